//! Hazards: what a thread was doing when profiler code stopped it. A schedule checks a
//! sampler against a hazard only if the sampler stops a thread while it holds; runs count
//! how often each one was met ([`super::RunReport::hazards`]), so a user can see which
//! hazards their schedules reach.

use serde::Serialize;

/// A hazard a stop of a thread can meet. A stop is a suspension completed by
/// `GetThreadContext`, or the profiling signal's handler starting on the thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Hazard {
    /// The thread holds a lock (the runtime's, the OS's, the application's or a profiler's):
    /// a stopper that needs it deadlocks.
    HoldsLock,
    /// The thread holds a lock profiler code created: it runs the profiler's own code (a
    /// callback such as `ThreadCreated`, or a thread of the profiler's, as a managed exporter
    /// is). A profiler that needs its own lock while the thread is stopped deadlocks on
    /// itself.
    ProfilerLock,
    /// The thread was waiting (blocked, asleep, parked); a signal interrupted the wait.
    InWait,
    /// The thread's stack pointer was off its stack (`hijack_rsp`).
    BadStackPointer,
    /// A managed thread in cooperative mode whose leaf is native code with unwind info (a
    /// runtime helper on Windows, a native function called without a transition).
    CooperativeNativeLeaf,
    /// A frame runs a later code version of its method (tier-1, ReJIT): outside the ranges
    /// `GetCodeInfo2` gives.
    LaterCodeVersion,
    /// More frames than [`DEEP_FRAMES`]: deeper than a typical sampler's buffer.
    DeepStack,
    /// Another thread's runtime suspension (a GC, a `SuspendRuntime`) was in effect.
    RuntimeSuspended,
    /// The thread is exiting: its `ThreadDestroyed` has begun (it may have returned).
    Exiting,
    /// A native frame on the thread's stack has overrun a buffer (`overrun`): its saved
    /// registers (and with text its return address) point nowhere or into another thread's
    /// stack, and an unwinder that steps past it must stop within the stack.
    CorruptStack,
}

/// The frame count above which a stack is [`Hazard::DeepStack`]: the reference sampler's
/// frame limit in the pitfalls and random processes.
pub const DEEP_FRAMES: usize = 128;

impl Hazard {
    /// Every hazard.
    pub const ALL: [Hazard; 10] = [
        Hazard::HoldsLock,
        Hazard::ProfilerLock,
        Hazard::InWait,
        Hazard::BadStackPointer,
        Hazard::CooperativeNativeLeaf,
        Hazard::LaterCodeVersion,
        Hazard::DeepStack,
        Hazard::RuntimeSuspended,
        Hazard::Exiting,
        Hazard::CorruptStack,
    ];

    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Hazard::HoldsLock => "holds_lock",
            Hazard::ProfilerLock => "profiler_lock",
            Hazard::InWait => "in_wait",
            Hazard::BadStackPointer => "bad_stack_pointer",
            Hazard::CooperativeNativeLeaf => "cooperative_native_leaf",
            Hazard::LaterCodeVersion => "later_code_version",
            Hazard::DeepStack => "deep_stack",
            Hazard::RuntimeSuspended => "runtime_suspended",
            Hazard::Exiting => "exiting",
            Hazard::CorruptStack => "corrupt_stack",
        }
    }
}
