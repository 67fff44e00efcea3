//! The runtime's suspension callbacks in a running process: each reaches the loaded profiler
//! on the thread CoreCLR raises it on, at the moment it raises it (`RuntimeSuspendFinished`
//! only once every thread is at a safe point), for the profiler's own `SuspendRuntime` and for
//! application GCs alike; `ThreadCreated` runs in preemptive mode; a panic in any of them is
//! the run's outcome, never the test process's crash.

use corprof::flags::SuspendReason;
use corprof::os::{Sync, ThreadControl};
use corprof::{HResult, ProfilerCallback, ProfilerInfo, ThreadId};
use sim_clr::process::schedule::{Random, Rng};
use sim_clr::process::{Process, RunReport, SimOs, Strategy};
use sim_clr::scenario::Scenario;
use std::sync::{Arc, Mutex};

/// A threads section: `main` spins in managed code, `worker` runs managed code too, and the
/// native `sampler` (when the file has one) suspends the runtime.
const THREADS: &str = r#"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "App::Work"
kind = "jit"
[[code]]
name = "sampler!loop"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "App::Main" }]
program = ["call App::Work", "spin 3", "return"]
[[threads]]
name = "worker"
frames = [{ fn = "App::Main" }]
program = ["call App::Work", "spin 2", "return"]
"#;

const SAMPLER: &str = r#"
[[threads]]
name = "sampler"
kind = "native"
frames = [{ fn = "sampler!loop" }]
"#;

/// The threads section with `main` collecting garbage (`gc`) in the middle of its work.
fn gc_threads() -> String {
    THREADS.replace(
        r#"program = ["call App::Work", "spin 3", "return"]"#,
        r#"program = ["call App::Work", "gc", "return"]"#,
    )
}

/// Takes and releases the profiler's `registry` lock, as a callback that updates the
/// profiler's thread registry does.
fn touch_registry() {
    let os = SimOs::new();
    let registry = os.mutex_create("registry");
    os.mutex_lock(registry);
    os.mutex_unlock(registry);
}

/// Gives the sampler thread a body that holds `registry` across `call`.
fn sampler_holding_registry(p: &mut Process, call: fn(&sim_clr::Runtime)) {
    let body = move |rt: &sim_clr::Runtime, os: &SimOs| {
        assert_eq!(rt.initialize_current_thread(), HResult::S_OK);
        let registry = os.mutex_create("registry");
        os.mutex_lock(registry);
        call(rt);
        os.mutex_unlock(registry);
    };
    p.thread_body("sampler", Arc::new(body)).unwrap();
}

/// One callback as the profiler saw it: its name, its argument's thread (for the per-thread
/// ones), and the simulated thread it ran on.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    name: &'static str,
    about: Option<ThreadId>,
    on: u32,
}

/// Records every suspension callback; `panic_in` names one that panics.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<Seen>>,
    panic_in: Option<&'static str>,
}

impl Recorder {
    fn saw(&self, name: &'static str, about: Option<ThreadId>) {
        // Asked before the lock is taken: the question is a scheduling point.
        let on = SimOs::new().current_thread().0;
        if self.panic_in == Some(name) {
            panic!("the profiler's {name} failed");
        }
        self.seen.lock().unwrap().push(Seen { name, about, on });
    }

    fn take(&self) -> Vec<Seen> {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl ProfilerCallback for Recorder {
    fn runtime_suspend_started(&self, reason: SuspendReason) -> HResult {
        let name = match reason {
            SuspendReason::ForGc => "RuntimeSuspendStarted(gc)",
            _ => "RuntimeSuspendStarted",
        };
        self.saw(name, None);
        HResult::S_OK
    }
    fn runtime_suspend_finished(&self) -> HResult {
        self.saw("RuntimeSuspendFinished", None);
        HResult::S_OK
    }
    fn runtime_resume_started(&self) -> HResult {
        self.saw("RuntimeResumeStarted", None);
        HResult::S_OK
    }
    fn runtime_resume_finished(&self) -> HResult {
        self.saw("RuntimeResumeFinished", None);
        HResult::S_OK
    }
    fn runtime_thread_suspended(&self, thread: ThreadId) -> HResult {
        self.saw("RuntimeThreadSuspended", Some(thread));
        HResult::S_OK
    }
    fn runtime_thread_resumed(&self, thread: ThreadId) -> HResult {
        self.saw("RuntimeThreadResumed", Some(thread));
        HResult::S_OK
    }
    fn garbage_collection_started(&self, _: &[bool], _: corprof::flags::GcReason) -> HResult {
        self.saw("GarbageCollectionStarted", None);
        HResult::S_OK
    }
    fn garbage_collection_finished(&self) -> HResult {
        self.saw("GarbageCollectionFinished", None);
        HResult::S_OK
    }
}

fn scenario(extra: &str) -> Scenario {
    let file = format!(
        "platform = \"unix\"\n[runtime]\nevent_mask = [\"ENABLE_STACK_SNAPSHOT\", \"MONITOR_SUSPENDS\"]\n{THREADS}{extra}"
    );
    Scenario::parse("notifications.toml", &file).unwrap()
}

/// The native sampler: suspends the runtime, lists the threads, resumes it.
fn suspending_sampler(rt: &sim_clr::Runtime, _os: &SimOs) {
    assert_eq!(rt.initialize_current_thread(), HResult::S_OK);
    assert_eq!(rt.suspend_runtime(), HResult::S_OK);
    rt.enum_threads().expect("threads under the suspension");
    assert_eq!(rt.resume_runtime(), HResult::S_OK);
}

/// Ids and OS ids of `main`, `worker` and (if declared) `sampler`.
fn ids(p: &Process) -> (ThreadId, u32, ThreadId, u32, Option<u32>) {
    let rt = p.scenario().runtime();
    let main = rt.thread("main").unwrap();
    let worker = rt.thread("worker").unwrap();
    let sampler = rt.thread("sampler").map(|t| t.os_id);
    (main.id, main.os_id, worker.id, worker.os_id, sampler)
}

/// Runs `schedules` random schedules, checking each run.
fn explore(p: &Process, schedules: u64, mut check: impl FnMut(&RunReport)) -> u64 {
    for seed in 0..schedules {
        check(&p.run(&mut Random(Rng::new(seed))).unwrap());
    }
    schedules
}

#[test]
fn the_profilers_suspension_raises_each_callback_on_its_thread_finished_after_the_safe_points() {
    let recorder = Arc::new(Recorder::default());
    let mut p = Process::new(scenario(SAMPLER));
    p.thread_body("sampler", Arc::new(suspending_sampler)).unwrap();
    p.profiler(recorder.clone());
    let (main, main_os, worker, worker_os, sampler) = ids(&p);
    let sampler = sampler.unwrap();
    let (mut lazily, mut at_once) = (0, 0);
    let runs = explore(&p, 300, |run| {
        assert_eq!(run.outcome, "ok", "{run:?}");
        let seen = recorder.take();
        let own: Vec<&str> = seen
            .iter()
            .filter(|s| s.about.is_none())
            .map(|s| {
                assert_eq!(s.on, sampler, "{seen:?}");
                s.name
            })
            .collect();
        // The native sampler has no `Thread`: no RuntimeThreadSuspended for itself.
        assert_eq!(
            own,
            [
                "RuntimeSuspendStarted",
                "RuntimeSuspendFinished",
                "RuntimeResumeStarted",
                "RuntimeResumeFinished"
            ],
            "{seen:?}"
        );
        // The suspension is finished only once every thread has parked.
        let step = |what: &str| run.trace.iter().rposition(|e| e.what.starts_with(what));
        let finished = step("RuntimeSuspendFinished raised").expect("raised");
        let last_park = step("parks at a safe point");
        assert!(last_park.is_none_or(|parked| parked < finished), "{run:?}");
        let at = |name: &str| seen.iter().position(|s| s.name == name).unwrap();
        for (id, os) in [(main, main_os), (worker, worker_os)] {
            let mine: Vec<usize> = (0..seen.len()).filter(|&i| seen[i].about == Some(id)).collect();
            let [suspended, resumed] = mine[..] else {
                panic!("one RuntimeThreadSuspended and one RuntimeThreadResumed: {seen:?}")
            };
            assert_eq!(seen[suspended].name, "RuntimeThreadSuspended");
            assert!(at("RuntimeSuspendStarted") < suspended, "{seen:?}");
            assert!(at("RuntimeResumeStarted") < resumed, "{seen:?}");
            let on = seen[suspended].on;
            assert_eq!(seen[resumed].on, on, "{seen:?}");
            if on == os {
                // A thread running managed code parks itself at its safe point, in preemptive
                // mode, and then says so on itself: the suspension may finish meanwhile.
                lazily += 1;
            } else {
                // One whose code has ended is stopped by the sampler, which says so before
                // the suspension is finished.
                assert_eq!(on, sampler, "{seen:?}");
                assert!(suspended < at("RuntimeSuspendFinished"), "{seen:?}");
                at_once += 1;
            }
        }
    });
    assert_eq!(runs, 300);
    assert!(lazily > 50 && at_once > 50, "{lazily} {at_once}");
}

#[test]
fn an_application_gc_raises_the_suspension_and_gc_callbacks_on_the_collecting_thread() {
    let recorder = Arc::new(Recorder::default());
    let file = gc_threads();
    let file = format!(
        "platform = \"unix\"\n[runtime]\nevent_mask = [\"ENABLE_STACK_SNAPSHOT\", \"MONITOR_SUSPENDS\", \"MONITOR_GC\"]\n{file}"
    );
    let mut p = Process::new(Scenario::parse("gc.toml", &file).unwrap());
    p.profiler(recorder.clone());
    let (main, main_os, worker, _, _) = ids(&p);
    let runs = explore(&p, 200, |run| {
        assert_eq!(run.outcome, "ok", "{run:?}");
        let seen = recorder.take();
        // The worker's own pair is raised on main or on itself, as above.
        let on_main: Vec<(&str, Option<ThreadId>)> = seen
            .iter()
            .filter(|s| s.about != Some(worker))
            .map(|s| {
                assert_eq!(s.on, main_os, "{seen:?}");
                (s.name, s.about)
            })
            .collect();
        assert_eq!(
            on_main,
            [
                ("RuntimeSuspendStarted(gc)", None),
                ("RuntimeThreadSuspended", Some(main)),
                ("RuntimeSuspendFinished", None),
                ("GarbageCollectionStarted", None),
                ("GarbageCollectionFinished", None),
                ("RuntimeResumeStarted", None),
                ("RuntimeThreadResumed", Some(main)),
                ("RuntimeResumeFinished", None),
            ],
            "{seen:?}"
        );
    });
    assert_eq!(runs, 200);
}

#[test]
fn a_panic_in_a_suspension_callback_is_the_runs_outcome_and_the_exploration_goes_on() {
    for callback in [
        "RuntimeSuspendFinished",
        "RuntimeThreadSuspended",
        "RuntimeResumeFinished",
    ] {
        let recorder = Arc::new(Recorder {
            panic_in: Some(callback),
            ..Recorder::default()
        });
        let mut p = Process::new(scenario(SAMPLER));
        p.thread_body("sampler", Arc::new(suspending_sampler)).unwrap();
        p.profiler(recorder);
        let report = p.explore(Strategy::Pct(3), 50, 1, |_, _| {});
        assert_eq!(report.schedules_run, 50, "{callback}: {report:?}");
        assert!(
            report.outcomes.contains_key("profiler_panic"),
            "{callback}: {report:?}"
        );
        let first = report.first_failure.expect("a failing schedule");
        assert!(first.fault.message.contains(callback), "{callback}: {first:?}");
        // The failing schedule replays to the same panic.
        let again = p.replay(&first.schedule.parse().unwrap()).unwrap();
        assert_eq!(again.outcome, "profiler_panic");
    }
}

/// The threads section with the sampler, `worker` started by `main` (`spawn worker`), and
/// thread callbacks on.
fn spawning() -> Scenario {
    let threads = THREADS
        .replace(
            r#"program = ["call App::Work", "spin 3", "return"]"#,
            r#"program = ["call App::Work", "spawn worker", "return"]"#,
        )
        .replace("name = \"worker\"\n", "name = \"worker\"\nstart = \"spawned\"\n");
    let file = format!(
        "platform = \"unix\"\n[runtime]\nevent_mask = [\"ENABLE_STACK_SNAPSHOT\", \"MONITOR_THREADS\"]\n{threads}{SAMPLER}"
    );
    Scenario::parse("spawning.toml", &file).unwrap()
}

#[test]
fn a_suspension_does_not_wait_for_a_thread_blocked_in_thread_created() {
    // The sampler holds `registry` across its runtime suspension; the spawned thread's
    // ThreadCreated takes `registry`. CoreCLR raises ThreadCreated in preemptive mode, so the
    // suspension does not wait for that thread and the run ends well in every schedule.
    struct Registry;
    impl ProfilerCallback for Registry {
        fn thread_created(&self, _: ThreadId) -> HResult {
            touch_registry();
            HResult::S_OK
        }
    }
    let mut p = Process::new(spawning());
    p.profiler(Arc::new(Registry));
    sampler_holding_registry(&mut p, |rt| {
        assert_eq!(rt.suspend_runtime(), HResult::S_OK);
        assert_eq!(rt.resume_runtime(), HResult::S_OK);
    });
    let report = p.explore(Strategy::Dfs(3), 20_000, 0, |_, _| {});
    assert!(report.exhaustive, "{report:?}");
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
}

#[test]
fn a_thread_started_during_a_suspension_waits_for_its_end() {
    // CoreCLR's `Thread::HasStarted` takes the thread-store lock, which the suspension holds
    // to its end: a thread spawned meanwhile stays out of the runtime (unlisted, unannounced)
    // until the runtime is resumed, so every thread a walk under the suspension meets is
    // either parked or preemptive, and walks.
    let mut p = Process::new(spawning());
    p.thread_body(
        "sampler",
        Arc::new(|rt: &sim_clr::Runtime, _: &SimOs| {
            assert_eq!(rt.initialize_current_thread(), HResult::S_OK);
            assert_eq!(rt.suspend_runtime(), HResult::S_OK);
            for id in rt.enum_threads().unwrap() {
                let mut frames = |_: &corprof::SnapshotFrame<'_>| HResult::S_OK;
                let hr = rt.do_stack_snapshot(id, Some(&mut frames), 0, None, 0);
                assert_eq!(hr, HResult::S_OK);
            }
            assert_eq!(rt.resume_runtime(), HResult::S_OK);
        }),
    )
    .unwrap();
    let mut waited = 0;
    explore(&p, 300, |run| {
        assert_eq!(run.outcome, "ok", "{run:?}");
        let waits = "start: adding the Thread: waits for lock thread_store";
        waited += u32::from(run.trace.iter().any(|e| e.what == waits));
    });
    assert!(waited > 0, "no schedule started the thread during the suspension");
}

/// A profiler that lists the threads in `RuntimeSuspendFinished`.
#[derive(Default)]
struct Enumerating {
    runtime: Mutex<std::sync::Weak<sim_clr::Runtime>>,
}

impl ProfilerCallback for Enumerating {
    fn runtime_suspend_finished(&self) -> HResult {
        let rt = self.runtime.lock().unwrap().upgrade().unwrap();
        match rt.enum_threads() {
            Ok(_) => HResult::S_OK,
            Err(hr) => hr,
        }
    }
}

#[test]
fn enum_threads_in_runtime_suspend_finished_of_a_gc_stalls_net9_only() {
    let gc = gc_threads();
    for version in sim_clr::runtime::RuntimeVersion::ALL {
        for (threads, sampler) in [(gc.as_str(), false), (THREADS, true)] {
            let file = format!(
                "platform = \"unix\"\n[runtime]\nversion = \"{version}\"\nevent_mask = [\"ENABLE_STACK_SNAPSHOT\", \"MONITOR_SUSPENDS\"]\n{threads}{}",
                if sampler { SAMPLER } else { "" }
            );
            let mut p = Process::new(Scenario::parse("enum.toml", &file).unwrap());
            let profiler = Arc::new(Enumerating::default());
            let hooked = profiler.clone();
            p.load(Arc::new(move |rt| {
                *hooked.runtime.lock().unwrap() = Arc::downgrade(rt);
                sim_clr::process::Loaded {
                    profiler: Some(hooked.clone()),
                    ..Default::default()
                }
            }));
            if sampler {
                p.thread_body("sampler", Arc::new(suspending_sampler)).unwrap();
            }
            // The GC's suspension stalls on .NET 9; the profiler's own never takes the lock.
            let expected = if version.enum_threads_stalls_a_suspension() && !sampler {
                "deadlock"
            } else {
                "ok"
            };
            explore(&p, 20, |run| {
                assert_eq!(run.outcome, expected, "{version}, sampler {sampler}: {run:?}");
                if expected == "deadlock" {
                    assert!(
                        run.fault.as_ref().is_some_and(|f| f.message.contains("#110062")),
                        "{run:?}"
                    );
                }
            });
        }
    }
}

#[test]
fn enum_threads_waits_for_another_threads_suspension_and_can_deadlock_with_its_callbacks() {
    // CoreCLR v3.1.23 `ProfilerThreadEnum::Init` lists the threads under the thread-store
    // lock, which a GC holds from its start to the runtime's restart. A sampler that holds its
    // registry lock across `EnumThreads`, while the GC's `GarbageCollectionStarted` takes that
    // lock, deadlocks in the schedules where the GC comes between the two: the sampler waits
    // for the thread-store lock, the GC thread for the registry.
    struct Registry;
    impl ProfilerCallback for Registry {
        fn garbage_collection_started(&self, _: &[bool], _: corprof::flags::GcReason) -> HResult {
            touch_registry();
            HResult::S_OK
        }
    }
    let threads = gc_threads();
    let file = format!(
        "platform = \"windows\"\n[runtime]\nevent_mask = [\"ENABLE_STACK_SNAPSHOT\", \"MONITOR_GC\"]\n{threads}{SAMPLER}"
    );
    let mut p = Process::new(Scenario::parse("enum-gc.toml", &file).unwrap());
    p.profiler(Arc::new(Registry));
    sampler_holding_registry(&mut p, |rt| {
        let _ = rt.enum_threads();
    });
    let report = p.explore(Strategy::Dfs(3), 20_000, 0, |_, _| {});
    assert!(report.exhaustive, "{report:?}");
    let outcomes: Vec<&String> = report.outcomes.keys().collect();
    assert_eq!(outcomes, ["deadlock", "ok"], "{report:?}");
    let failure = report.first_failure.as_ref().expect("a deadlock");
    let message = &failure.fault.message;
    assert!(message.contains("thread_store"), "{message}");
}
