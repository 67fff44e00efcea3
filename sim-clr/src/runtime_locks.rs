//! The locks every simulated process has, owned by the runtime or the OS, and how a process's
//! locks are numbered: these first, then the scenario file's own.

/// A lock the runtime or the OS owns, always present; scenario files may declare more.
pub const RUNTIME_LOCKS: [&str; 5] = ["loader", "heap", "code_manager", "thread_store", "function_table"];

/// Index of a lock: the [`RUNTIME_LOCKS`] first, then the file's own, in declaration order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LockId(pub u32);

impl LockId {
    /// The loader lock (`LoadLibrary`, per-thread runtime initialization, R39).
    pub const LOADER: LockId = LockId(0);
    /// The process heap lock (malloc's on Unix, the process heap's on Windows), taken by every
    /// allocation: the runtime's and the profiler's.
    pub const HEAP: LockId = LockId(1);
    /// The code manager's writer lock (R13.2, R14, R42).
    pub const CODE_MANAGER: LockId = LockId(2);
    /// The thread-store lock, held by a runtime suspension (R41).
    pub const THREAD_STORE: LockId = LockId(3);
    /// The OS function-table lock (`RtlLookupFunctionEntry`, dynamic function tables).
    pub const FUNCTION_TABLE: LockId = LockId(4);
}
