//! Rust profiler code inside the running process: a sampler closure on a simulated thread and
//! a `ProfilerCallback` whose `ThreadDestroyed` blocks, both using the OS layer, explored
//! under schedules. What would hang or crash a real process comes back as an outcome.

use corprof::os::{OsError, SignalFlags, Sync, ThreadControl};
use corprof::{HResult, ProfilerCallback, ProfilerInfo, ThreadId};
use sim_clr::process::schedule::{Random, Rng};
use sim_clr::process::{Process, SigAction, SimOs, Strategy};
use sim_clr::scenario::Scenario;
use std::sync::Arc;
use std::time::Duration;

// Profiler code's allocations on simulated threads take the process heap lock.
#[global_allocator]
static ALLOCATOR: sim_clr::process::HeapLockAllocator<std::alloc::System> =
    sim_clr::process::HeapLockAllocator(std::alloc::System);

const FILE: &str = r#"
platform = "windows"
[runtime]
event_mask = ["ENABLE_STACK_SNAPSHOT", "MONITOR_THREADS"]
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
program = ["call App::Work", "return", "exit"]
[[threads]]
name = "sampler"
kind = "native"
frames = [{ fn = "sampler!loop" }]
"#;

/// The profiler's ThreadDestroyed: marks the thread destroyed, under the per-thread lock when
/// `locked`.
struct Profiler {
    locked: bool,
}

impl ProfilerCallback for Profiler {
    fn thread_destroyed(&self, _thread: ThreadId) -> HResult {
        let os = SimOs::new();
        let lock = os.mutex_create("walk_lock");
        let dead = os.event_create("main_destroyed");
        if self.locked {
            os.mutex_lock(lock);
        }
        os.event_set(dead);
        if self.locked {
            os.mutex_unlock(lock);
        }
        HResult::S_OK
    }
}

fn sampler(rt: &sim_clr::Runtime, os: &SimOs) {
    assert_eq!(rt.initialize_current_thread(), HResult::S_OK);
    let main = rt.thread("main").expect("declared").id;
    let lock = os.mutex_create("walk_lock");
    let dead = os.event_create("main_destroyed");
    for _ in 0..2 {
        os.mutex_lock(lock);
        if !os.event_wait(dead, Duration::ZERO) {
            let mut frames = 0;
            let mut cb = |_: &corprof::SnapshotFrame<'_>| {
                frames += 1;
                HResult::S_OK
            };
            // Inside ThreadDestroyed the leaf is native runtime code: E_FAIL is a fine answer.
            let hr = rt.do_stack_snapshot(main, Some(&mut cb), 0, None, 0);
            assert!(hr != HResult::E_INVALIDARG, "{hr}");
        }
        os.mutex_unlock(lock);
        os.sleep(Duration::from_millis(1));
    }
}

fn process(locked: bool) -> Process {
    let mut p = Process::new(Scenario::parse("threads.toml", FILE).unwrap());
    p.thread_body("sampler", Arc::new(sampler)).unwrap();
    p.profiler(Arc::new(Profiler { locked }));
    p
}

#[test]
fn a_sampler_sharing_a_lock_with_thread_destroyed_never_faults() {
    let report = process(true).explore(Strategy::Dfs(3), 5_000, 0, |_, _| {});
    assert!(report.exhaustive, "{report:?}");
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
    assert!(report.schedules_run > 10);
}

#[test]
fn without_the_lock_thread_destroyed_races_the_walk() {
    let report = process(false).explore(Strategy::Dfs(3), 5_000, 0, |_, _| {});
    let bad: Vec<&String> = report.outcomes.keys().filter(|k| *k != "ok").collect();
    assert!(!bad.is_empty(), "{report:?}");
    assert!(
        bad.iter()
            .all(|k| *k == "walk_of_destroyed_thread" || *k == "thread_use_after_free"),
        "{report:?}"
    );
    // The failing schedule replays to the same fault, byte for byte.
    let first = report.first_failure.unwrap();
    let p = process(false);
    let a = p.replay(&first.schedule.parse().unwrap()).unwrap();
    let b = p.replay(&first.schedule.parse().unwrap()).unwrap();
    assert_eq!(a, b);
    assert_eq!(a.fault.unwrap(), first.fault);
}

#[test]
fn blocking_forever_in_thread_destroyed_is_a_reported_hang() {
    struct Stuck;
    impl ProfilerCallback for Stuck {
        fn thread_destroyed(&self, _: ThreadId) -> HResult {
            let os = SimOs::new();
            let never = os.event_create("walk_done");
            os.event_wait(never, Duration::from_secs(3600));
            HResult::S_OK
        }
    }
    let mut p = Process::new(Scenario::parse("stuck.toml", FILE).unwrap());
    p.profiler(Arc::new(Stuck));
    let run = p
        .run(&mut sim_clr::process::schedule::Random(
            sim_clr::process::schedule::Rng::new(1),
        ))
        .unwrap();
    // The wait has a deadline, so virtual time jumps an hour ahead instead of hanging.
    assert_eq!(run.outcome, "ok", "{run:?}");
    assert!(run.time_us >= 3_600_000_000);

    struct Forever;
    impl ProfilerCallback for Forever {
        fn thread_destroyed(&self, _: ThreadId) -> HResult {
            let os = SimOs::new();
            let lock = os.mutex_create("walk_lock");
            os.mutex_lock(lock);
            os.mutex_lock(lock); // a non-recursive lock taken twice
            HResult::S_OK
        }
    }
    p.profiler(Arc::new(Forever));
    let run = p
        .run(&mut sim_clr::process::schedule::Random(
            sim_clr::process::schedule::Rng::new(1),
        ))
        .unwrap();
    assert_eq!(run.outcome, "deadlock", "{run:?}");
    assert_eq!(run.fault.unwrap().cycle[0].thread, "main");
}

#[test]
fn the_os_layer_suspends_reads_and_resumes() {
    let mut p = Process::new(Scenario::parse("os.toml", FILE).unwrap());
    p.thread_body(
        "sampler",
        Arc::new(|_rt: &sim_clr::Runtime, os: &SimOs| {
            let me = os.current_thread();
            // The target may have exited already.
            let Some(&target) = os.threads().iter().find(|&&t| t != me) else {
                return;
            };
            if os.suspend_thread(target).is_ok() {
                if let Ok(ctx) = os.get_thread_context(target) {
                    let (low, high) = os.stack_bounds(target).unwrap();
                    assert!(ctx.rsp >= low && ctx.rsp < high);
                    assert!(os.read_stack(target, ctx.rsp).is_ok());
                    assert!(os.read_stack(target, high + 64).is_err());
                }
                // Until GetThreadContext returns, the target runs on: it may have exited.
                let resumed = os.resume_thread(target);
                assert!(
                    matches!(resumed, Ok(1) | Err(OsError::NoSuchThread)),
                    "{resumed:?}"
                );
            }
            assert!(os.now() > Duration::ZERO);
        }),
    )
    .unwrap();
    let report = p.explore(Strategy::Dfs(2), 2_000, 0, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
}

#[test]
fn a_stale_context_is_the_same_to_the_profiler_and_to_the_runtime() {
    // A GetThreadContext that answers a self-consistent but stale context (RSP above the most
    // recent explicit Frame) answers it to the profiler's own call as well: the runtime's
    // walk refuses it (R13.4), and the profiler sees the same registers.
    let file = FILE
        .replace(
            r#"name = "App::Work"
kind = "jit""#,
            r#"name = "App::Work"
kind = "jit"
[[code]]
name = "App::Inner"
kind = "jit""#,
        )
        .replace(
            r#"frames = [{ fn = "App::Main" }]
program = ["call App::Work", "return", "exit"]"#,
            r#"os_context = "stale"
frames = [{ fn = "App::Inner" }, { frame = "HelperMethodFrame" }, { fn = "App::Work" }, { fn = "App::Main" }]
program = ["spin 20"]"#,
        );
    let mut p = Process::new(Scenario::parse("stale.toml", &file).unwrap());
    p.thread_body(
        "sampler",
        Arc::new(|rt: &sim_clr::Runtime, os: &SimOs| {
            let main = rt.thread("main").unwrap();
            let target = os
                .threads()
                .into_iter()
                .find(|&t| t != os.current_thread())
                .unwrap();
            os.suspend_thread(target).unwrap();
            let ctx = os.get_thread_context(target).unwrap();
            let frame = main.layout.frames[0].address;
            assert_eq!(ctx.rsp, frame + 8, "the stale RSP lies just above the Frame");
            assert!(ctx.rsp > main.layout.calls[0].rsp);
            let size = corprof::Context::SIZE as u32;
            let hr = rt.do_stack_snapshot(main.id, None, 0, Some(&ctx), size);
            assert_eq!(hr, HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
            os.resume_thread(target).unwrap();
        }),
    )
    .unwrap();
    let report = p.explore(Strategy::Dfs(1), 200, 0, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
}

/// The target allocates (holding the heap lock across a step); the sampler suspends it, gets
/// its context, then collects into a buffer it allocates now or allocated before.
fn allocating_sampler(preallocated: bool) -> Process {
    let file = FILE.replace(
        r#"program = ["call App::Work", "return", "exit"]"#,
        r#"program = ["call App::Work", "alloc", "alloc", "return"]"#,
    );
    let mut p = Process::new(Scenario::parse("alloc.toml", &file).unwrap());
    p.thread_body(
        "sampler",
        Arc::new(move |_rt: &sim_clr::Runtime, os: &SimOs| {
            let main = *os.threads().first().unwrap();
            let mut buffer: Vec<u64> = if preallocated {
                Vec::with_capacity(64)
            } else {
                Vec::new()
            };
            if os.suspend_thread(main).is_ok() {
                if let Ok(ctx) = os.get_thread_context(main) {
                    buffer.push(ctx.rip); // allocates unless the capacity was reserved
                    let _ = os.read_stack(main, ctx.rsp);
                }
                let _ = os.resume_thread(main);
            }
            assert_eq!(buffer.len(), buffer.len().min(1));
        }),
    )
    .unwrap();
    p
}

#[test]
fn allocating_while_the_target_holds_the_heap_lock_deadlocks() {
    let report = allocating_sampler(false).explore(Strategy::Dfs(2), 5_000, 0, |_, _| {});
    assert!(report.exhaustive);
    // Every schedule breaks the rule; where the target held the heap lock, it deadlocks.
    assert_eq!(
        report.outcomes.keys().collect::<Vec<_>>(),
        ["deadlock", "lock_while_suspending"],
        "{report:?}"
    );
    let first = report.first_failure.unwrap().fault;
    assert_eq!(first.kind, "lock_while_suspending");
    assert!(first
        .message
        .contains("sampler allocates while main is suspended by it"));
    let report = allocating_sampler(true).explore(Strategy::Dfs(2), 5_000, 0, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
}

#[test]
fn a_rust_signal_handler_runs_on_the_interrupted_thread_with_its_context() {
    let file = FILE
        .replace(r#"platform = "windows""#, r#"platform = "unix""#)
        .replace(
            r#"program = ["call App::Work", "return", "exit"]"#,
            r#"program = ["call App::Work", "lock heap", "spin 2", "unlock heap", "return"]"#,
        );
    let mut p = Process::new(Scenario::parse("signal.toml", &file).unwrap());
    p.thread_body(
        "sampler",
        Arc::new(|_rt: &sim_clr::Runtime, os: &SimOs| {
            let main = *os.threads().first().unwrap();
            os.send_signal(main).unwrap();
        }),
    )
    .unwrap();
    p.signal_handler(SigAction {
        handler: Arc::new(|rt: &sim_clr::Runtime, os: &SimOs, ctx: &corprof::Context| {
            // The interrupted thread is `main`, its context inside one of its own functions.
            let main = rt.thread("main").unwrap();
            assert_eq!(os.current_thread().0, main.os_id);
            assert!(ctx.rsp >= main.stack_limit && ctx.rsp < main.stack_base);
            let _ = format!("{:x}", ctx.rip); // allocates: the heap lock, maybe held by `main`
        }),
        flags: SignalFlags::default(),
    });
    let report = p.explore(Strategy::Dfs(2), 2_000, 0, |_, _| {});
    // A handler that allocates breaks the rule wherever it runs; where it interrupted the
    // heap lock's holder, it deadlocks on its own thread.
    assert_eq!(
        report.outcomes.keys().collect::<Vec<_>>(),
        ["deadlock", "lock_in_signal_handler", "ok"],
        "{report:?}"
    );
}

#[test]
fn a_named_body_nobody_attached_ends_the_run_at_once() {
    let file = FILE.replace(
        "frames = [{ fn = \"sampler!loop\" }]",
        "frames = [{ fn = \"sampler!loop\" }]\nbody = \"my-sampler\"",
    );
    let p = Process::new(Scenario::parse("named.toml", &file).unwrap());
    let run = p
        .run(&mut sim_clr::process::schedule::Random(
            sim_clr::process::schedule::Rng::new(0),
        ))
        .unwrap();
    assert_eq!(run.outcome, "unattached_body");
    assert_eq!(run.steps, 0);
    let line = file.lines().position(|l| l.starts_with("body =")).unwrap() + 1;
    assert!(run
        .fault
        .unwrap()
        .message
        .contains(&format!("`my-sampler` (line {line})")));
    let unknown = fixtures::behaviours::process(Scenario::parse("named.toml", &file).unwrap());
    let message = format!("{line}: field `body`: no built-in profiler code is named `my-sampler`");
    assert!(unknown.err().unwrap().contains(&message));
}

#[test]
fn a_raw_read_of_a_freed_stack_crashes_the_run_a_checked_one_does_not() {
    let body = |raw: bool| -> sim_clr::process::ThreadBody {
        Arc::new(move |rt: &sim_clr::Runtime, os: &SimOs| {
            let main = rt.thread("main").unwrap();
            let sp = main.stack_base - 0x40;
            os.sleep(Duration::from_millis(1)); // main exits (and its stack is unmapped) meanwhile
            if raw {
                os.read_raw(sp);
            } else {
                assert!(os.read_stack(corprof::os::OsThread(main.os_id), sp).is_err());
            }
        })
    };
    for (raw, outcome) in [(true, "access_violation"), (false, "ok")] {
        let mut p = Process::new(Scenario::parse("raw.toml", FILE).unwrap());
        p.thread_body("sampler", body(raw)).unwrap();
        let run = p
            .run(&mut sim_clr::process::schedule::Random(
                sim_clr::process::schedule::Rng::new(5),
            ))
            .unwrap();
        assert_eq!(run.outcome, outcome, "{run:?}");
    }
}

const NATIVE_FILE: &str = r#"
platform = "windows"
[[code]]
name = "libc!memchr"
kind = "native"
shape = "leaf"
[[code]]
name = "native!work"
kind = "native"
[[code]]
name = "App::Work"
kind = "jit"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "libc!memchr" }, { fn = "native!work" }, { frame = "InlinedCallFrame" }, { fn = "App::Work" }, { fn = "App::Main" }, { fn = "host!main" }]
program = ["loop 40", "spin 1", "end", "exit"]
[[threads]]
name = "sampler"
kind = "native"
frames = [{ fn = "host!main" }]
"#;

/// A sampler on a simulated thread takes the module list and every thread operation from
/// the OS layer: SuspendThread, GetThreadContext, the native walk over stack reads,
/// ResumeThread. Whenever the target could be stopped, the walk equals its ground truth.
#[test]
fn a_sampler_walks_a_suspended_thread_with_the_os_layers_module_list() {
    use fixtures::hybrid::{expected, judge, Mode};
    use walker::hybrid::{resolve_with, HybridOutcome, HybridWalker, Stopped};
    use walker::images::Images;
    use walker::unwind::StackBounds;
    let walks = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = walks.clone();
    let body = move |rt: &sim_clr::Runtime, os: &SimOs| {
        let images = Images::load(os).expect("the module list");
        let unwinder = images.unwinder().expect("an unwinder");
        let target = corprof::os::OsThread(rt.thread("main").expect("declared").os_id);
        // Preallocated: nothing may allocate while the target is suspended.
        let mut walker = HybridWalker::with_capacity(32);
        if os.suspend_thread(target).is_err() {
            return; // the thread has exited
        }
        if let (Ok(context), Ok((limit, base))) = (os.get_thread_context(target), os.stack_bounds(target)) {
            let stopped = Stopped {
                thread: ThreadId::NULL,
                context: &context,
                bounds: StackBounds { limit, base },
            };
            let outcome = walker.walk_native(
                &unwinder,
                &stopped,
                &mut |a| os.read_stack(target, a).ok(),
                &mut resolve_with(rt),
            );
            // The oracle is outside the process: its allocations do not count.
            sim_clr::process::unobserved(|| {
                let truth = expected(rt, "main", Mode::Native).expect("main");
                seen.lock()
                    .unwrap()
                    .push(judge(walker.frames(), outcome, &truth, None));
            });
            assert_eq!(outcome, HybridOutcome::Complete);
        }
        let _ = os.resume_thread(target);
    };
    let mut p = Process::new(Scenario::parse("native.toml", NATIVE_FILE).unwrap());
    p.thread_body("sampler", Arc::new(body)).unwrap();
    let report = p.explore(Strategy::Random, 20, 1, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
    let walks = walks.lock().unwrap();
    assert!(!walks.is_empty(), "no schedule caught the thread running");
    assert!(walks.iter().all(Option::is_none), "{walks:?}");
}

/// Threads the profiler creates itself (`start = "profiler"`, `SimOs::create_thread`).
mod created {
    use super::*;
    use sim_clr::process::Loaded;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    /// The file above with the sampler created by the profiler and `main` working 5 ms.
    fn file() -> String {
        let file = super::FILE
            .replace(
                r#""call App::Work", "return""#,
                r#""call App::Work", "sleep 5ms", "return""#,
            )
            .replace(
                r#"kind = "native"
frames = [{ fn = "sampler!loop" }]"#,
                r#"kind = "native"
start = "profiler"
frames = [{ fn = "sampler!loop" }]"#,
            );
        assert_ne!(file, super::FILE);
        file + "[limits]\nmax_steps = 10000\n"
    }

    /// What one run's profiler saw.
    #[derive(Default)]
    struct Seen {
        stop: AtomicBool,
        samples: AtomicU32,
        joined: AtomicBool,
    }

    /// A process whose profiler creates a sampler thread as it loads: every millisecond it
    /// counts a sample (walking `main` when `walk`) until told to stop (never, when
    /// `stubborn`). With `shutdown`, the profiler's Shutdown tells it to stop and joins it.
    fn process(seen: &Arc<Seen>, shutdown: bool, stubborn: bool, walk: bool) -> Process {
        let mut p = Process::new(Scenario::parse("created.toml", &file()).unwrap());
        let seen = seen.clone();
        p.load(Arc::new(move |rt| {
            let (rt, s) = (rt.clone(), seen.clone());
            let os = SimOs::new();
            let sampler = os
                .create_thread(move || {
                    let main = rt.thread("main").expect("declared").id;
                    while stubborn || !s.stop.load(Ordering::SeqCst) {
                        if walk {
                            let mut cb = |_: &corprof::SnapshotFrame<'_>| HResult::S_OK;
                            let _ = rt.do_stack_snapshot(main, Some(&mut cb), 0, None, 0);
                        }
                        s.samples.fetch_add(1, Ordering::SeqCst);
                        SimOs::new().sleep(Duration::from_millis(1));
                    }
                })
                .expect("a thread declared start = \"profiler\"");
            let s = seen.clone();
            Loaded {
                at_exit: shutdown.then(|| -> sim_clr::process::ExitHook {
                    Arc::new(move || {
                        s.stop.store(true, Ordering::SeqCst);
                        assert_eq!(SimOs::new().join_thread(sampler), Ok(()));
                        s.joined.store(true, Ordering::SeqCst);
                    })
                }),
                ..Loaded::default()
            }
        }));
        p
    }

    #[test]
    fn a_thread_created_while_the_profiler_loads_runs_until_shutdown_joins_it() {
        let seen = Arc::new(Seen::default());
        let run = process(&seen, true, false, false)
            .run(&mut Random(Rng::new(7)))
            .unwrap();
        assert_eq!(run.outcome, "ok", "{:?}", run.fault);
        assert!(
            seen.samples.load(Ordering::SeqCst) >= 4,
            "5 ms of sampling every 1 ms"
        );
        assert!(seen.joined.load(Ordering::SeqCst));
        let notes: Vec<&str> = run.trace.iter().map(|e| e.what.as_str()).collect();
        assert!(
            notes.contains(&"the process exits: the profiler's Shutdown"),
            "{notes:?}"
        );
    }

    #[test]
    fn without_shutdown_the_process_exits_with_the_created_thread_still_running() {
        let seen = Arc::new(Seen::default());
        let run = process(&seen, false, false, false)
            .run(&mut Random(Rng::new(7)))
            .unwrap();
        assert_eq!(run.outcome, "ok", "{:?}", run.fault);
        assert!(!seen.stop.load(Ordering::SeqCst));
        let last = &run.trace.last().expect("a trace").what;
        assert_eq!(last, "the process exits; sampler end with it");
    }

    #[test]
    fn shutdown_joining_a_thread_that_never_stops_never_exits() {
        let seen = Arc::new(Seen::default());
        let report = process(&seen, true, true, false).explore(Strategy::Pct(2), 20, 1, |_, _| {});
        assert_eq!(
            report.outcomes.keys().collect::<Vec<_>>(),
            ["livelock"],
            "{report:?}"
        );
    }

    #[test]
    fn a_created_sampler_still_walking_a_thread_after_it_exited_walks_freed_memory() {
        let seen = Arc::new(Seen::default());
        let report = process(&seen, true, true, true).explore(Strategy::Pct(2), 20, 1, |_, _| {});
        assert!(
            report.outcomes.contains_key("thread_use_after_free"),
            "{report:?}"
        );
        let first = report.first_failure.expect("a failing schedule");
        assert!(first.fault.message.contains("R37"), "{}", first.fault.message);
    }

    #[test]
    fn a_loading_profiler_creating_more_threads_than_declared_ends_the_run_at_once() {
        let mut p = Process::new(Scenario::parse("created.toml", &file()).unwrap());
        p.load(Arc::new(|_| {
            let os = SimOs::new();
            assert!(os.create_thread(|| {}).is_ok());
            assert_eq!(os.create_thread(|| {}), Err(OsError::NoSuchThread));
            Loaded::default()
        }));
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "undeclared_thread");
        assert_eq!(run.steps, 0);
    }

    #[test]
    fn a_thread_creation_beyond_the_declared_ones_ends_the_run() {
        let mut p = Process::new(Scenario::parse("created.toml", &file()).unwrap());
        p.thread_body(
            "main",
            Arc::new(|_, os| {
                let _ = os.create_thread(|| {});
                let _ = os.create_thread(|| {});
            }),
        )
        .unwrap();
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "undeclared_thread");
        let fault = run.fault.unwrap();
        assert!(
            fault.message.starts_with("main created a thread"),
            "{}",
            fault.message
        );
    }
}

/// Profiler code's thread-local storage follows the simulated thread across its callbacks.
mod thread_local_storage {
    use super::*;
    use std::cell::Cell;
    use std::sync::Mutex;

    const FILE: &str = r#"
platform = "windows"
[runtime]
event_mask = ["ENABLE_OBJECT_ALLOCATED", "MONITOR_OBJECT_ALLOCATED"]
[[code]]
name = "App::Main"
kind = "jit"
[[threads]]
name = "a"
frames = [{ fn = "App::Main" }]
program = ["alloc", "alloc", "alloc", "alloc"]
[[threads]]
name = "b"
frames = [{ fn = "App::Main" }]
program = ["alloc", "alloc", "alloc", "alloc"]
"#;

    thread_local! {
        /// Allocations this OS thread has seen.
        static SEEN: Cell<u32> = const { Cell::new(0) };
    }

    /// Records, for each `ObjectAllocated`, its thread and the count its thread-local reached.
    struct Counting(Mutex<Vec<(corprof::os::OsThread, u32)>>);

    impl ProfilerCallback for Counting {
        fn object_allocated(&self, _: corprof::ObjectId, _: corprof::ClassId) -> HResult {
            let seen = SEEN.with(|s| {
                s.set(s.get() + 1);
                s.get()
            });
            let me = SimOs::new().current_thread();
            self.0.lock().unwrap().push((me, seen));
            HResult::S_OK
        }
    }

    #[test]
    fn each_simulated_threads_callbacks_see_its_own_thread_locals() {
        let counting = Arc::new(Counting(Mutex::new(Vec::new())));
        let mut p = Process::new(Scenario::parse("tls.toml", FILE).unwrap());
        p.profiler(counting.clone());
        for seed in 0..20 {
            counting.0.lock().unwrap().clear();
            let run = p.run(&mut Random(Rng::new(seed))).unwrap();
            assert_eq!(run.outcome, "ok");
            let seen = counting.0.lock().unwrap();
            assert_eq!(seen.len(), 8);
            // One OS thread per simulated thread: its count goes up by one per callback (from
            // where an earlier run left that OS thread).
            for thread in seen.iter().map(|(t, _)| *t) {
                let counts: Vec<u32> = seen
                    .iter()
                    .filter(|(t, _)| *t == thread)
                    .map(|(_, n)| *n)
                    .collect();
                let first = counts[0];
                assert_eq!(
                    counts,
                    [first, first + 1, first + 2, first + 3],
                    "seed {seed}: {seen:?}"
                );
            }
        }
    }
}

/// `FILE` with `main` running `program` and the sampler running `body`.
fn sampled(
    program: &str,
    body: impl Fn(&sim_clr::Runtime, &SimOs) + Send + std::marker::Sync + 'static,
) -> Process {
    let file = FILE.replace(
        r#"program = ["call App::Work", "return", "exit"]"#,
        &format!("program = [{program}]"),
    );
    let mut p = Process::new(Scenario::parse("idle.toml", &file).unwrap());
    p.thread_body("sampler", Arc::new(body)).unwrap();
    p
}

#[test]
fn a_retry_loop_that_changes_nothing_is_a_livelock_within_the_idle_budget() {
    // The sampler suspends main, then retries a call whose answer cannot change while main
    // is stopped; the watchdog-free process has nothing else to do.
    let p = sampled(r#""call App::Work", "spin 2", "return""#, |rt, os| {
        let main = *os.threads().first().unwrap();
        if os.suspend_thread(main).is_ok() && os.get_thread_context(main).is_ok() {
            let id = rt.threads()[0].id;
            while rt.get_thread_info(id).is_ok() {}
        }
    });
    let run = p.run(&mut Random(Rng::new(1))).unwrap();
    assert_eq!(run.outcome, "livelock", "{:?}", run.fault);
    let message = run.fault.unwrap().message;
    assert!(message.contains("in 5000 steps (`idle_steps`)"), "{message}");
    assert!(
        message.contains("sampler") && message.ends_with("kept running without effect"),
        "{message}"
    );
    // Found after the idle budget, not after the step limit.
    assert!(run.steps < 6_000, "{}", run.steps);
}

#[test]
fn a_thread_polling_while_another_sleeps_long_is_not_idle() {
    // main sleeps 500 ms of virtual time (50,000 steps of 10 us); the sampler polls the
    // clock every 10 us until then, changing nothing: time alone moves main on.
    let p = sampled(r#""sleep 500ms""#, |_, os| {
        while os.now() < Duration::from_millis(501) {
            os.sleep(Duration::from_micros(10));
        }
    });
    let run = p.run(&mut Random(Rng::new(1))).unwrap();
    assert_eq!(run.outcome, "ok", "{:?}", run.fault);
    assert!(run.steps > 5_000, "{}", run.steps);
}

/// The guide's hand-placed scheduling points (`docs/profiler-guide.md` §7): a race between
/// two memory accesses is scheduled only where `fiber::point()` marks them.
#[test]
fn a_hand_placed_point_lets_a_race_between_memory_accesses_be_scheduled() {
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    // Two native threads, each running a body below.
    const TWO: &str = r#"
platform = "unix"
code = [{ name = "sampler!loop", kind = "native" }]
threads = [
  { name = "writer", kind = "native", frames = [{ fn = "sampler!loop" }] },
  { name = "reader", kind = "native", frames = [{ fn = "sampler!loop" }] },
]
"#;
    // Whether, in any schedule, the reader sees the flag the writer sets and clears.
    let seen_in_between = |points: bool| -> bool {
        let (flag, saw) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let mut p = Process::new(Scenario::parse("two.toml", TWO).unwrap());
        let f = flag.clone();
        let writer: sim_clr::process::ThreadBody = Arc::new(move |_: &sim_clr::Runtime, _: &SimOs| {
            f.store(true, SeqCst);
            if points {
                sim_clr::process::fiber::point();
            }
            f.store(false, SeqCst);
        });
        let (f, s) = (flag.clone(), saw.clone());
        let reader: sim_clr::process::ThreadBody = Arc::new(move |_: &sim_clr::Runtime, _: &SimOs| {
            if points {
                sim_clr::process::fiber::point();
            }
            if f.load(SeqCst) {
                s.store(true, SeqCst);
            }
        });
        p.thread_body("writer", writer).unwrap();
        p.thread_body("reader", reader).unwrap();
        let report = p.explore(Strategy::Dfs(2), 100, 0, |_, _| {});
        assert!(report.exhaustive, "{report:?}");
        assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"]);
        saw.load(SeqCst)
    };
    assert!(seen_in_between(true));
    assert!(!seen_in_between(false));
}

#[test]
fn a_blocked_profiling_signal_waits_until_the_thread_unblocks_it() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let file = r#"
platform = "unix"
[[code]]
name = "app!loop"
kind = "native"
[[threads]]
name = "target"
kind = "native"
frames = [{ fn = "app!loop" }]
[[threads]]
name = "sender"
kind = "native"
frames = [{ fn = "app!loop" }]
"#;
    let mut p = Process::new(Scenario::parse("mask.toml", file).unwrap());
    let handled = Arc::new(AtomicU32::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (h, s) = (handled.clone(), seen.clone());
    p.thread_body(
        "target",
        Arc::new(move |_: &sim_clr::Runtime, os: &SimOs| {
            assert!(!os.mask_signals(Some(true)));
            os.sleep(std::time::Duration::from_millis(1));
            let blocked = h.load(Ordering::SeqCst);
            assert!(os.mask_signals(None), "still blocked");
            assert!(os.mask_signals(Some(false)));
            os.sleep(std::time::Duration::from_millis(1));
            s.lock().unwrap().push((blocked, h.load(Ordering::SeqCst)));
        }),
    )
    .unwrap();
    p.thread_body(
        "sender",
        Arc::new(|rt: &sim_clr::Runtime, os: &SimOs| {
            os.sleep(std::time::Duration::from_micros(100));
            let target = corprof::os::OsThread(rt.thread("target").unwrap().os_id);
            os.send_signal(target).unwrap();
        }),
    )
    .unwrap();
    let h = handled.clone();
    p.signal_handler(SigAction {
        handler: Arc::new(move |_: &sim_clr::Runtime, _: &SimOs, _: &corprof::Context| {
            h.fetch_add(1, Ordering::SeqCst);
        }),
        flags: SignalFlags::default(),
    });
    for seed in 0..20 {
        handled.store(0, Ordering::SeqCst);
        let run = p.run(&mut Random(Rng::new(seed))).unwrap();
        assert_eq!(run.outcome, "ok", "{run:?}");
    }
    // Sent while blocked: handled only once unblocked.
    assert_eq!(*seen.lock().unwrap(), vec![(0, 1); 20]);
}
