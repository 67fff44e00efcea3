//! What runs reached: the samples profiler code took, and the rules' dangerous windows its
//! walks and stops met.
//!
//! A run can pass without ever testing what a rule is about: a sampler that never walks, or
//! never walks a thread inside its `ThreadDestroyed`, passes the rule's checks by missing its
//! moment. So every run counts what it reached ([`RunCoverage`]): its walks by answer, its
//! stops (a suspension `GetThreadContext` completed, a signal handler starting), the threads
//! walked or stopped, and the [`Window`]s met. An exploration sums them ([`Coverage`]), every
//! window listed with the runs that reached it, 0 included; one that took no sample in any run
//! ends `no_sample`, and one that never reached a window its file names in `[explore] reach`
//! ends `unreached` ([`Coverage::unmet`]).

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A dangerous window of the rules: a moment a walk or a stop can meet that some rule is
/// about. Each is named after its rule (`r37.inside_thread_destroyed`). A target's held
/// locks are windows too, named by [`holds`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Window {
    /// A walk or stop of a thread inside its `ThreadCreated`, where the profiler's registry
    /// lock may be held (R40).
    InsideThreadCreated,
    /// A walk or stop of a thread inside its `ThreadDestroyed` (R37).
    InsideThreadDestroyed,
    /// A walk or stop of a thread whose `ThreadDestroyed` has returned: its `ThreadID` is no
    /// longer valid (R37).
    AfterThreadDestroyed,
    /// A thread created while a sampling round was under way: the round's list misses it.
    RoundOverCreation,
    /// A thread exiting while a sampling round was under way (R37).
    RoundOverExit,
    /// A runtime callback (a profiler handler) blocked on a lock profiler code holds (R40).
    CallbackBlockedOnProfilerLock,
    /// A walk while a GC's or another thread's runtime suspension was in effect (R9, R41).
    WalkDuringSuspension,
    /// A walk seeded with a context by a never-managed thread (R13, R14).
    SeededFromNative,
    /// A walk that reported a native run between two managed frames (`funcId == 0`, R21): a
    /// reverse P/Invoke's, a runtime helper's.
    NativeRun,
    /// A walk of a thread in cooperative mode (R13).
    WalkCooperative,
    /// A walk of a thread in preemptive mode, from its Frame chain (R12).
    WalkPreemptive,
    /// The profiling signal interrupting a thread blocked in a call (R43: Unix).
    SignalInWait,
    /// A walk the profiler's callback cut short, its buffer full (R26: `ABORTED`).
    FrameLimit,
    /// A stop of a thread with more frames than a typical sampler's buffer (R26).
    DeepStack,
    /// A stop of a thread that ran on between `SuspendThread` and `GetThreadContext`: the
    /// suspension is asynchronous (R11).
    RanAfterSuspend,
    /// `GetThreadContext` failed for a thread `SuspendThread` stopped (R13.1).
    ContextFailed,
    /// A walk by the thread whose own `SuspendRuntime` is in effect (R19).
    WalkUnderOwnSuspension,
    /// A walk or stop of a thread running an exception handler's funclet (R28).
    InFunclet,
    /// A stop of a thread whose leaf code has no unwind info: its caller cannot be found from
    /// it (R33).
    LeafWithoutUnwindInfo,
    /// A stop of a cooperative thread whose leaf is native code with unwind info, a runtime
    /// helper (R33).
    CooperativeNativeLeaf,
    /// A stop of a thread whose stack pointer is off its stack (R34).
    BadStackPointer,
    /// A stop of a thread running a later code version of a method (tier-1, ReJIT, OSR),
    /// outside the ranges `GetCodeInfo2` gives (R20).
    LaterCodeVersion,
    /// A stop of a thread whose stack a buffer overrun corrupted (R17).
    CorruptStack,
    /// The profiling signal sent to a thread that blocks it (R43).
    SignalMasked,
    /// The profiling signal sent to a thread after the application replaced the profiler's
    /// handler (R43).
    SignalHandlerReplaced,
    /// The application crashed (its `crash` event set) while a sampling round was under way
    /// (the project's `sampled_after_crash` rule).
    CrashDuringRound,
}

impl Window {
    /// Every window, in report order.
    pub const ALL: [Window; 26] = [
        Window::InsideThreadCreated,
        Window::InsideThreadDestroyed,
        Window::AfterThreadDestroyed,
        Window::RoundOverCreation,
        Window::RoundOverExit,
        Window::CallbackBlockedOnProfilerLock,
        Window::WalkDuringSuspension,
        Window::SeededFromNative,
        Window::NativeRun,
        Window::WalkCooperative,
        Window::WalkPreemptive,
        Window::SignalInWait,
        Window::FrameLimit,
        Window::DeepStack,
        Window::RanAfterSuspend,
        Window::ContextFailed,
        Window::WalkUnderOwnSuspension,
        Window::InFunclet,
        Window::LeafWithoutUnwindInfo,
        Window::CooperativeNativeLeaf,
        Window::BadStackPointer,
        Window::LaterCodeVersion,
        Window::CorruptStack,
        Window::SignalMasked,
        Window::SignalHandlerReplaced,
        Window::CrashDuringRound,
    ];

    /// Its name in reports and in `[explore] reach`.
    pub fn as_str(self) -> &'static str {
        match self {
            Window::InsideThreadCreated => "r40.inside_thread_created",
            Window::InsideThreadDestroyed => "r37.inside_thread_destroyed",
            Window::AfterThreadDestroyed => "r37.after_thread_destroyed",
            Window::RoundOverCreation => "r37.round_over_creation",
            Window::RoundOverExit => "r37.round_over_exit",
            Window::CallbackBlockedOnProfilerLock => "r40.callback_blocked_on_profiler_lock",
            Window::WalkDuringSuspension => "r9.walk_during_suspension",
            Window::SeededFromNative => "r14.seeded_from_native",
            Window::NativeRun => "r21.native_run",
            Window::WalkCooperative => "r13.walk_cooperative",
            Window::WalkPreemptive => "r12.walk_preemptive",
            Window::SignalInWait => "r43.signal_in_wait",
            Window::FrameLimit => "r26.frame_limit",
            Window::DeepStack => "r26.deep_stack",
            Window::RanAfterSuspend => "r11.ran_after_suspend",
            Window::ContextFailed => "r13.context_failed",
            Window::WalkUnderOwnSuspension => "r19.walk_under_own_suspension",
            Window::InFunclet => "r28.in_funclet",
            Window::LeafWithoutUnwindInfo => "r33.leaf_without_unwind_info",
            Window::CooperativeNativeLeaf => "r33.cooperative_native_leaf",
            Window::BadStackPointer => "r34.bad_stack_pointer",
            Window::LaterCodeVersion => "r20.later_code_version",
            Window::CorruptStack => "r17.corrupt_stack",
            Window::SignalMasked => "r43.signal_masked",
            Window::SignalHandlerReplaced => "r43.signal_handler_replaced",
            Window::CrashDuringRound => "crash.during_round",
        }
    }
}

/// The window of a walk or stop of a thread that holds lock `name` (the runtime's, the
/// file's): `r39.holds.loader` (R39), `r42.holds.code_manager` (R42), `r41.holds.thread_store`
/// (R41), and `r40.holds.NAME` for the heap, the OS function table and the file's own (R40).
pub fn holds(name: &str) -> String {
    let rule = match name {
        "loader" => "r39",
        "code_manager" => "r42",
        "thread_store" => "r41",
        _ => "r40",
    };
    format!("{rule}.holds.{name}")
}

/// The window of a walk or stop of a thread that holds a lock profiler code created at run
/// time (a hosted library's mutex or read-write lock, a Rust profiler's `Sync` mutex).
pub const HOLDS_PROFILER_LOCK: &str = "r40.holds.profiler_lock";

/// Every window a process whose locks are `locks` (the runtime's,
/// [`RUNTIME_LOCKS`](crate::runtime_locks::RUNTIME_LOCKS), then the file's) can reach, in
/// report order.
pub fn windows(locks: &[String]) -> Vec<String> {
    let mut all: Vec<String> = Window::ALL.iter().map(|w| w.as_str().to_string()).collect();
    all.extend(locks.iter().map(|l| holds(l)));
    all.push(HOLDS_PROFILER_LOCK.to_string());
    all
}

/// What one run reached.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCoverage {
    /// `DoStackSnapshot` calls of profiler code that returned, by answer (`S_OK`, each
    /// refusal's name).
    pub walks: BTreeMap<String, u64>,
    /// Threads stopped by profiler code: suspensions `GetThreadContext` completed, signal
    /// handlers starting.
    pub stops: u64,
    /// Raw reads of another thread's stack by a program (`read_stack`): a sampler copying a
    /// stack itself.
    pub reads: u64,
    /// The threads walked, stopped or read, by name.
    pub sampled: BTreeSet<String>,
    /// The threads a sampler could sample: those the runtime knew as managed (not the GC's).
    pub sampleable: BTreeSet<String>,
    /// The windows reached, by name.
    pub windows: BTreeSet<String>,
}

impl RunCoverage {
    /// Walks, stops and reads together: the run's samples.
    pub fn samples(&self) -> u64 {
        self.walks.values().sum::<u64>() + self.stops + self.reads
    }
}

/// What an exploration's runs reached, summed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Coverage {
    /// Walks and stops of every run.
    pub samples: Samples,
    /// For each thread sampleable in some run (or sampled), the runs that sampled it.
    pub threads: BTreeMap<String, u64>,
    /// For each window the process can reach, the runs that reached it.
    pub windows: BTreeMap<String, u64>,
}

/// Samples over an exploration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Samples {
    /// Every walk, stop and read.
    pub total: u64,
    /// Walks by answer.
    pub walks: BTreeMap<String, u64>,
    /// Stops of a thread.
    pub stops: u64,
    /// Raw reads of another thread's stack.
    pub reads: u64,
    /// The runs that took at least one sample.
    pub runs_sampled: u64,
}

impl Coverage {
    /// Nothing reached yet, of `windows` (every window listed, at 0).
    pub fn of(windows: &[String]) -> Coverage {
        Coverage {
            windows: windows.iter().map(|w| (w.clone(), 0)).collect(),
            ..Coverage::default()
        }
    }

    /// Counts one run.
    pub fn add(&mut self, run: &RunCoverage) {
        let samples = run.samples();
        self.samples.total += samples;
        self.samples.stops += run.stops;
        self.samples.reads += run.reads;
        self.samples.runs_sampled += u64::from(samples > 0);
        for (answer, n) in &run.walks {
            *self.samples.walks.entry(answer.clone()).or_default() += n;
        }
        for thread in &run.sampleable {
            self.threads.entry(thread.clone()).or_default();
        }
        for thread in &run.sampled {
            *self.threads.entry(thread.clone()).or_default() += 1;
        }
        for window in &run.windows {
            *self.windows.entry(window.clone()).or_default() += 1;
        }
    }

    /// Adds another exploration's counts (a shard's).
    pub fn merge(&mut self, other: &Coverage) {
        self.samples.total += other.samples.total;
        self.samples.stops += other.samples.stops;
        self.samples.reads += other.samples.reads;
        self.samples.runs_sampled += other.samples.runs_sampled;
        for (answer, n) in &other.samples.walks {
            *self.samples.walks.entry(answer.clone()).or_default() += n;
        }
        for (thread, n) in &other.threads {
            *self.threads.entry(thread.clone()).or_default() += n;
        }
        for (window, n) in &other.windows {
            *self.windows.entry(window.clone()).or_default() += n;
        }
    }

    /// The windows of `wanted` no run reached.
    pub fn missed<'a>(&self, wanted: &'a [String]) -> Vec<&'a str> {
        wanted
            .iter()
            .filter(|w| self.windows.get(*w).is_none_or(|&n| n == 0))
            .map(String::as_str)
            .collect()
    }

    /// What the exploration failed to reach, as outcomes with their messages: `no_sample`
    /// when no run took a sample, `unreached` when a window of `reach` was never reached. A
    /// file whose `[explore] expect` lists one of them expects it (a control that samples
    /// nothing).
    pub fn unmet(&self, reach: &[String]) -> BTreeMap<String, String> {
        let mut unmet = BTreeMap::new();
        if self.samples.total == 0 {
            unmet.insert(
                NO_SAMPLE.to_string(),
                "no run took a sample: profiler code never walked, stopped or read a thread".to_string(),
            );
        }
        let missed = self.missed(reach);
        if !missed.is_empty() {
            unmet.insert(
                UNREACHED.to_string(),
                format!("no run reached {}", missed.join(", ")),
            );
        }
        unmet
    }
}

/// The outcome of an exploration in which no run took a sample.
pub const NO_SAMPLE: &str = "no_sample";
/// The outcome of an exploration that never reached a window its file names.
pub const UNREACHED: &str = "unreached";

#[cfg(test)]
mod tests {
    use super::*;

    fn run(walks: &[(&str, u64)], stops: u64, windows: &[&str]) -> RunCoverage {
        RunCoverage {
            walks: walks.iter().map(|(a, n)| (a.to_string(), *n)).collect(),
            stops,
            reads: 0,
            sampled: ["main".to_string()].into(),
            sampleable: ["main".to_string(), "worker".to_string()].into(),
            windows: windows.iter().map(|w| w.to_string()).collect(),
        }
    }

    #[test]
    fn runs_sum_into_counts_with_unreached_windows_at_zero() {
        let locks: Vec<String> = (crate::runtime_locks::RUNTIME_LOCKS.iter().map(|l| l.to_string()))
            .chain(["registry".to_string()])
            .collect();
        let all = windows(&locks);
        assert!(all.contains(&"r40.holds.registry".to_string()));
        assert!(all.contains(&"r39.holds.loader".to_string()));
        let mut c = Coverage::of(&all);
        c.add(&run(&[("S_OK", 2)], 1, &["r37.inside_thread_destroyed"]));
        c.add(&run(
            &[("S_OK", 1), ("E_FAIL", 1)],
            0,
            &["r37.inside_thread_destroyed"],
        ));
        c.add(&RunCoverage::default());
        assert_eq!(c.samples.total, 5);
        assert_eq!(c.samples.walks["S_OK"], 3);
        assert_eq!(c.samples.runs_sampled, 2);
        assert_eq!(c.threads["main"], 2);
        assert_eq!(c.threads["worker"], 0);
        assert_eq!(c.windows["r37.inside_thread_destroyed"], 2);
        assert_eq!(c.windows["r37.after_thread_destroyed"], 0);
        let reach = [
            "r37.after_thread_destroyed".to_string(),
            "r37.inside_thread_destroyed".to_string(),
        ];
        let unmet = c.unmet(&reach);
        assert_eq!(unmet.keys().collect::<Vec<_>>(), ["unreached"]);
        assert!(unmet["unreached"].contains("r37.after_thread_destroyed"));
    }

    #[test]
    fn no_sample_in_any_run_is_an_outcome() {
        let mut c = Coverage::of(&windows(&[]));
        assert_eq!(c.unmet(&[]).keys().collect::<Vec<_>>(), ["no_sample"]);
        c.add(&run(&[], 1, &[]));
        assert!(c.unmet(&[]).is_empty());
    }
}
