//! Atomics as scheduling points: a sampler whose per-thread slots sit behind spin locks
//! (`corprof::sync::atomic`), with no OS lock and no hand-placed scheduling point, raced by
//! exploration at its atomic accesses alone.
//!
//! `ThreadDestroyed` spin-locks the dying thread's slot, marks it destroyed and unlocks, so it
//! waits for a walk in progress. The sampler's correct order is lock, check the mark, walk,
//! unlock; the planted bug reads the mark before taking the lock, so `ThreadDestroyed` can run
//! to its end in between and the sampler walks a thread whose `ThreadDestroyed` returned: on
//! Windows the runtime terminates the process (R11.1, R37).

use corprof::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use corprof::{HResult, ProfilerCallback, ProfilerInfo, ThreadId};
use sim_clr::process::fiber::{self, Request};
use sim_clr::process::{Loaded, Process, SimOs, Strategy, ThreadBody};
use sim_clr::runtime::Runtime;
use sim_clr::scenario::Scenario;
use std::sync::atomic::AtomicU64 as Counter;
use std::sync::Arc;

/// Two application threads that exit while a native sampler walks them.
const PROCESS: &str = r#"
name = "spin-lock-slots"
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
name = "host!main"
kind = "native"

[[code]]
name = "sampler!loop"
kind = "native"

[[threads]]
name = "main"
frames = [{ fn = "App::Main" }, { fn = "host!main" }]
program = ["call App::Work", "return", "exit"]

[[threads]]
name = "worker"
frames = [{ fn = "App::Main" }, { fn = "host!main" }]
program = ["call App::Work", "spin 2", "return", "exit"]

[[threads]]
name = "sampler"
kind = "native"
frames = [{ fn = "sampler!loop" }]
body = "sampler"
"#;

/// One thread's slot: its `ThreadID` (0: free), a spin lock, the destroyed mark.
#[derive(Default)]
struct Slot {
    thread: AtomicU64,
    busy: AtomicBool,
    destroyed: AtomicBool,
}

impl Slot {
    fn lock(&self) {
        while self.busy.compare_exchange(false, true, SeqCst, SeqCst).is_err() {
            corprof::sync::spin_loop();
        }
    }

    fn unlock(&self) {
        self.busy.store(false, SeqCst);
    }
}

/// The slot map: threads listed when the sampler starts, and any `ThreadDestroyed` names.
#[derive(Default)]
struct Slots([Slot; 4]);

impl Slots {
    /// `thread`'s slot, claimed if it has none. Every caller scans in the same order, so two
    /// threads claiming one thread's slot at once find the same one.
    fn slot(&self, thread: ThreadId) -> Option<&Slot> {
        self.0
            .iter()
            .find(|s| match s.thread.compare_exchange(0, thread.0, SeqCst, SeqCst) {
                Ok(_) => true,
                Err(owner) => owner == thread.0,
            })
    }
}

impl ProfilerCallback for Slots {
    /// Marks the thread destroyed (in a slot of its own if the sampler has not listed it yet,
    /// so it never will), waiting for a walk in progress.
    fn thread_destroyed(&self, thread: ThreadId) -> HResult {
        if let Some(slot) = self.slot(thread) {
            slot.lock();
            slot.destroyed.store(true, SeqCst);
            slot.unlock();
        }
        HResult::S_OK
    }
}

/// The sampler thread: three rounds over the slots, each walk under the slot's spin lock;
/// with `bug`, the destroyed mark read before the lock is taken. Successful walks are counted
/// in `walked` (a plain std atomic: the test's, not the sampler's).
fn sampler(slots: Arc<Slots>, bug: bool, walked: Arc<Counter>) -> ThreadBody {
    Arc::new(move |rt: &Runtime, _: &SimOs| {
        let info: &dyn ProfilerInfo = rt;
        info.initialize_current_thread();
        // The threads that exist, listed where none is freed.
        if info.suspend_runtime() == HResult::S_OK {
            for thread in info.enum_threads().unwrap_or_default() {
                slots.slot(thread);
            }
            info.resume_runtime();
        }
        for _ in 0..3 {
            for slot in &slots.0 {
                let thread = ThreadId(slot.thread.load(SeqCst));
                if thread.is_null() || (bug && slot.destroyed.load(SeqCst)) {
                    continue;
                }
                slot.lock();
                if bug || !slot.destroyed.load(SeqCst) {
                    let mut frames = |_: &corprof::SnapshotFrame<'_>| HResult::S_OK;
                    if info.do_stack_snapshot(thread, Some(&mut frames), 0, None, 0) == HResult::S_OK {
                        walked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
                slot.unlock();
            }
        }
    })
}

/// The process with a fresh slot map and sampler in every run.
fn process(bug: bool, walked: &Arc<Counter>) -> Process {
    let walked = walked.clone();
    let mut p = Process::new(Scenario::parse("spin-lock-slots.toml", PROCESS).unwrap());
    p.load(Arc::new(move |_| {
        let slots = Arc::new(Slots::default());
        Loaded {
            bodies: vec![("sampler".into(), sampler(slots.clone(), bug, walked.clone()))],
            profiler: Some(slots),
            ..Loaded::default()
        }
    }));
    p
}

#[test]
fn a_destroyed_mark_read_outside_the_spin_lock_is_caught_within_1000_pct_schedules() {
    let (ran, failure) = process(true, &Arc::default()).first_failure(Strategy::Pct(3), 1_000, 1);
    let failure = failure.unwrap_or_else(|| panic!("not caught in {ran} schedules"));
    // The walk came after ThreadDestroyed returned: before the Thread was freed, or after.
    assert!(
        ["walk_of_destroyed_thread", "thread_use_after_free"].contains(&failure.outcome.as_str()),
        "{failure:?}"
    );
}

#[test]
fn the_fixed_order_runs_10000_schedules_clean() {
    let walked = Arc::default();
    let report = process(false, &walked).explore(Strategy::Pct(3), 10_000, 1, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
    // The sampler walked threads: the check is not vacuous.
    assert!(walked.load(std::sync::atomic::Ordering::Relaxed) > 10_000);
}

#[test]
fn spinning_waits_for_another_threads_write() {
    // A spin lock held by a thread that never releases it: the spinner waits for a write
    // that never comes, and the run ends as a hang naming the wait, not a busy livelock.
    let slots = Arc::new(Slots::default());
    slots.0[0].busy.store(true, SeqCst);
    let mut p = Process::new(Scenario::parse("spin-lock-slots.toml", PROCESS).unwrap());
    let spinning = slots.clone();
    let body: ThreadBody = Arc::new(move |_: &Runtime, _: &SimOs| spinning.0[0].lock());
    p.thread_body("sampler", body).unwrap();
    let (_, failure) = p.first_failure(Strategy::Random, 1, 1);
    let failure = failure.expect("the spinner never gets the lock");
    assert_eq!(failure.outcome, "hang", "{failure:?}");
    let fault = failure.fault.unwrap();
    assert!(
        fault.message.contains("a write by another thread (it spins)"),
        "{}",
        fault.message
    );
}

/// Two native threads running profiler code: one spins on a flag, the other may set it.
const POLLERS: &str = r#"
name = "poll"
platform = "windows"

[[code]]
name = "sampler!loop"
kind = "native"

[[threads]]
name = "spinner"
kind = "native"
frames = [{ fn = "sampler!loop" }]
body = "spinner"

[[threads]]
name = "setter"
kind = "native"
frames = [{ fn = "sampler!loop" }]
body = "setter"
"#;

/// The pollers' process, with a fresh flag in every run: the spinner polls it the way
/// instrumented native code reports its atomics ([`Request::Poll`]: an access that changed
/// nothing, its address and the value read), as a spin loop with no spin hint does, until it
/// is set; with `set`, the setter sets it after a few scheduling points of its own.
fn pollers(set: bool) -> Process {
    let mut p = Process::new(Scenario::parse("poll.toml", POLLERS).unwrap());
    p.load(Arc::new(move |_| {
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let polled = flag.clone();
        let spinner: ThreadBody = Arc::new(move |_: &Runtime, _: &SimOs| loop {
            let seen = polled.load(SeqCst);
            fiber::request(Request::Poll(Arc::as_ptr(&polled) as usize, seen.into()));
            if seen {
                return;
            }
        });
        let setter: ThreadBody = Arc::new(move |_: &Runtime, _: &SimOs| {
            for _ in 0..3 {
                fiber::point();
            }
            if set {
                flag.store(true, SeqCst);
                fiber::request(Request::Atomic(true));
            }
        });
        Loaded {
            bodies: vec![("spinner".into(), spinner), ("setter".into(), setter)],
            ..Loaded::default()
        }
    }));
    p
}

#[test]
fn a_thread_polling_an_unchanged_value_lets_the_others_run_first() {
    // A spinner that kept the scheduler's choice would poll through the run's idle steps
    // under every schedule that favours it, and the run would end as a livelock; here it runs
    // only when nothing else can, so the setter always gets there.
    let report = pollers(true).explore(Strategy::Pct(3), 200, 1, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
}

#[test]
fn a_spin_nothing_will_end_is_a_livelock() {
    let (_, failure) = pollers(false).first_failure(Strategy::Pct(3), 1, 1);
    let failure = failure.expect("the flag is never set");
    assert_eq!(failure.outcome, "livelock", "{failure:?}");
    let message = failure.fault.unwrap().message;
    assert!(
        message.contains("spinner kept running without effect"),
        "{message}"
    );
}

#[test]
fn two_threads_spinning_on_each_others_flags_are_a_livelock_within_the_idle_budget() {
    // Each waits for the other to set its flag first: a real livelock. Walks no longer count
    // as idle steps, polls still do, so it is found after the idle budget as before.
    let mut p = Process::new(Scenario::parse("poll.toml", POLLERS).unwrap());
    p.load(Arc::new(|_| {
        let flags = Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let waits_for = |mine: usize| -> ThreadBody {
            let flags = flags.clone();
            Arc::new(move |_: &Runtime, _: &SimOs| {
                // Polled as instrumented native code reports a load ([`Request::Poll`]), a
                // spin loop without a spin hint.
                let theirs = &flags[1 - mine];
                loop {
                    let seen = theirs.load(SeqCst);
                    fiber::request(Request::Poll(theirs as *const _ as usize, seen.into()));
                    if seen {
                        break;
                    }
                }
                flags[mine].store(true, SeqCst);
                fiber::request(Request::Atomic(true));
            })
        };
        Loaded {
            bodies: vec![("spinner".into(), waits_for(0)), ("setter".into(), waits_for(1))],
            ..Loaded::default()
        }
    }));
    // The steps each strategy's first schedule took before walks stopped counting as idle.
    for (strategy, before) in [
        (Strategy::Random, 5_004),
        (Strategy::Pct(3), 5_049),
        (Strategy::Dfs(2), 5_002),
    ] {
        let (_, failure) = p.first_failure(strategy, 1, 1);
        let failure = failure.expect("neither flag is ever set");
        assert_eq!(failure.outcome, "livelock", "{strategy:?}: {failure:?}");
        let message = failure.fault.unwrap().message;
        assert!(message.contains("in 5000 steps (`idle_steps`)"), "{message}");
        assert!(failure.steps <= before, "{strategy:?}: {} steps", failure.steps);
    }
}
