//! What a run records besides return values: runtime events and faults.
//!
//! A fault is what would kill or hang a real process (a NULL callback reached, a bogus
//! `ThreadID`, a walk of a destroyed thread, a deadlock) — or a profiler bug the runtime
//! happens to survive (an access violation caught inside the walk). Faults are data, never a
//! Rust panic.

use std::fmt;

/// Something the runtime did during a call: a callback it raised into the profiler, or an
/// internal action worth showing (a seed discarded, a hijack removed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The callback name (`RuntimeThreadSuspended`) or runtime action (`UnhijackThread`).
    pub kind: String,
    /// The thread it happened on.
    pub on: String,
    /// The subject or explanation, if any.
    pub detail: Option<String>,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on {}", self.kind, self.on)?;
        if let Some(d) = &self.detail {
            write!(f, ": {d}")?;
        }
        Ok(())
    }
}

/// The kinds of fault the simulator detects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// The walk reached a frame and called a NULL callback (R7).
    NullCallback,
    /// A `ThreadID` that is no `Thread` was dereferenced (R4, R6).
    BogusThreadId,
    /// A freed `Thread` was dereferenced (a walk after `ThreadDestroyed` and deletion).
    ThreadUseAfterFree,
    /// A `FunctionID` of unloaded code was used (after `DynamicMethodUnloaded` or
    /// `AssemblyUnloadFinished`): its MethodDesc is freed memory.
    FunctionUseAfterUnload,
    /// A Windows cross-thread walk of a thread being destroyed: the runtime's fatal error
    /// `CORPROF_E_STACKSNAPSHOT_INVALID_TGT_THREAD` (R11.1, R37).
    WalkOfDestroyedThread,
    /// The walk read unmapped memory (bogus seed, R17, R34).
    AccessViolation,
    /// A cycle of waits no thread can break.
    Deadlock,
    /// A GC after a leaked `SuspendRuntime` blocks forever on the thread-store lock (R41).
    LeakedSuspensionHang,
    /// A `COR_PRF_FRAME_INFO` that is no live snapshot frame's (kept after its callback
    /// returned) was passed to the runtime, which reads it unchecked.
    StaleFrameInfo,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::NullCallback,
        FaultKind::BogusThreadId,
        FaultKind::ThreadUseAfterFree,
        FaultKind::FunctionUseAfterUnload,
        FaultKind::WalkOfDestroyedThread,
        FaultKind::AccessViolation,
        FaultKind::Deadlock,
        FaultKind::LeakedSuspensionHang,
        FaultKind::StaleFrameInfo,
    ];

    /// True for the kinds that leave the process hung rather than dead.
    pub fn hangs(self) -> bool {
        matches!(self, FaultKind::Deadlock | FaultKind::LeakedSuspensionHang)
    }

    /// The kind named `name` (as [`FaultKind::as_str`] spells it).
    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The snake_case name used in reports and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::NullCallback => "null_callback",
            FaultKind::BogusThreadId => "bogus_thread_id",
            FaultKind::ThreadUseAfterFree => "thread_use_after_free",
            FaultKind::FunctionUseAfterUnload => "function_use_after_unload",
            FaultKind::WalkOfDestroyedThread => "walk_of_destroyed_thread",
            FaultKind::AccessViolation => "access_violation",
            FaultKind::Deadlock => "deadlock",
            FaultKind::LeakedSuspensionHang => "leaked_suspension_hang",
            FaultKind::StaleFrameInfo => "stale_frame_info",
        }
    }
}

/// A detected fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// What happened.
    pub kind: FaultKind,
    /// A human-readable account, naming threads and addresses.
    pub message: String,
    /// True when the real process would be dead or hung: nothing runs after it.
    pub fatal: bool,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fatal = if self.fatal { "fatal " } else { "" };
        write!(f, "{fatal}{}: {}", self.kind.as_str(), self.message)
    }
}
