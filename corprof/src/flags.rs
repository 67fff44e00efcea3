//! Flag words: `COR_PRF_SNAPSHOT_INFO` (spec §1.2), the `COR_PRF_MONITOR` event mask (§1.3)
//! and `COR_PRF_SUSPEND_REASON`.

/// `COR_PRF_SNAPSHOT_INFO` bits for `DoStackSnapshot`'s `infoFlags`.
pub mod snapshot {
    /// No register context is passed to the callback.
    pub const DEFAULT: u32 = 0x0;
    /// Pass the frame's register context to every callback (R25).
    pub const REGISTER_CONTEXT: u32 = 0x1;
    /// x86-only EBP-chain walker; rejected with `E_INVALIDARG` on x64 (R5).
    pub const X86_OPTIMIZED: u32 = 0x2;
    /// Bits an x64 runtime accepts (R5).
    pub const VALID_X64: u32 = REGISTER_CONTEXT;
}

/// `COR_PRF_MONITOR` event-mask bits (`corprof.idl`).
pub mod event {
    /// No events.
    pub const MONITOR_NONE: u32 = 0x0;
    /// `FunctionUnloadStarted`.
    pub const MONITOR_FUNCTION_UNLOADS: u32 = 0x1;
    /// Class load callbacks.
    pub const MONITOR_CLASS_LOADS: u32 = 0x2;
    /// Module load callbacks.
    pub const MONITOR_MODULE_LOADS: u32 = 0x4;
    /// Assembly load callbacks.
    pub const MONITOR_ASSEMBLY_LOADS: u32 = 0x8;
    /// AppDomain load callbacks.
    pub const MONITOR_APPDOMAIN_LOADS: u32 = 0x10;
    /// JIT compilation callbacks.
    pub const MONITOR_JIT_COMPILATION: u32 = 0x20;
    /// Exception callbacks (`ExceptionThrown`, …).
    pub const MONITOR_EXCEPTIONS: u32 = 0x40;
    /// GC callbacks (`GarbageCollectionStarted`, …).
    pub const MONITOR_GC: u32 = 0x80;
    /// `ObjectAllocated` (also needs [`ENABLE_OBJECT_ALLOCATED`]).
    pub const MONITOR_OBJECT_ALLOCATED: u32 = 0x100;
    /// `ThreadCreated`, `ThreadDestroyed`, `ThreadAssignedToOSThread`, `ThreadNameChanged`.
    pub const MONITOR_THREADS: u32 = 0x200;
    /// Remoting callbacks.
    pub const MONITOR_REMOTING: u32 = 0x400;
    /// Managed/unmanaged transition callbacks.
    pub const MONITOR_CODE_TRANSITIONS: u32 = 0x800;
    /// Enter/leave hooks.
    pub const MONITOR_ENTERLEAVE: u32 = 0x1000;
    /// COM-callable-wrapper callbacks.
    pub const MONITOR_CCW: u32 = 0x2000;
    /// Remoting cookie (implies remoting).
    pub const MONITOR_REMOTING_COOKIE: u32 = 0x4000 | MONITOR_REMOTING;
    /// Asynchronous remoting (implies remoting).
    pub const MONITOR_REMOTING_ASYNC: u32 = 0x8000 | MONITOR_REMOTING;
    /// `RuntimeSuspend*`, `RuntimeResume*`, `RuntimeThreadSuspended/Resumed`.
    pub const MONITOR_SUSPENDS: u32 = 0x10000;
    /// Cache-search callbacks.
    pub const MONITOR_CACHE_SEARCHES: u32 = 0x20000;
    /// ReJIT support.
    pub const ENABLE_REJIT: u32 = 0x40000;
    /// In-process debugging.
    pub const ENABLE_INPROC_DEBUGGING: u32 = 0x80000;
    /// JIT maps.
    pub const ENABLE_JIT_MAPS: u32 = 0x100000;
    /// Disable inlining.
    pub const DISABLE_INLINING: u32 = 0x200000;
    /// Disable optimizations.
    pub const DISABLE_OPTIMIZATIONS: u32 = 0x400000;
    /// Allow `ObjectAllocated` (immutable).
    pub const ENABLE_OBJECT_ALLOCATED: u32 = 0x800000;
    /// CLR exception callbacks.
    pub const MONITOR_CLR_EXCEPTIONS: u32 = 0x1000000;
    /// Function arguments in enter hooks.
    pub const ENABLE_FUNCTION_ARGS: u32 = 0x2000000;
    /// Return values in leave hooks.
    pub const ENABLE_FUNCTION_RETVAL: u32 = 0x4000000;
    /// Frame info in enter/leave hooks.
    pub const ENABLE_FRAME_INFO: u32 = 0x08000000;
    /// Allow `DoStackSnapshot` (R3).
    pub const ENABLE_STACK_SNAPSHOT: u32 = 0x10000000;
    /// Use profile-enhanced images.
    pub const USE_PROFILE_IMAGES: u32 = 0x20000000;
    /// Disable transparency checks.
    pub const DISABLE_TRANSPARENCY_CHECKS_UNDER_FULL_TRUST: u32 = 0x40000000;
    /// Disable all NGEN images.
    pub const DISABLE_ALL_NGEN_IMAGES: u32 = 0x80000000;
    /// Every bit.
    pub const ALL: u32 = 0x8FFF_FFFF;
    /// Bits that can only be set during a startup `Initialize`; changing them later fails with
    /// `E_FAIL`. (`ENABLE_REJIT` is not one since .NET Core 3.0: ReJIT works after attach.)
    pub const MONITOR_IMMUTABLE: u32 = MONITOR_CODE_TRANSITIONS
        | MONITOR_REMOTING
        | MONITOR_REMOTING_COOKIE
        | MONITOR_REMOTING_ASYNC
        | ENABLE_INPROC_DEBUGGING
        | ENABLE_JIT_MAPS
        | DISABLE_OPTIMIZATIONS
        | DISABLE_INLINING
        | ENABLE_OBJECT_ALLOCATED
        | ENABLE_FUNCTION_ARGS
        | ENABLE_FUNCTION_RETVAL
        | ENABLE_FRAME_INFO
        | USE_PROFILE_IMAGES
        | DISABLE_TRANSPARENCY_CHECKS_UNDER_FULL_TRUST
        | DISABLE_ALL_NGEN_IMAGES;

    /// Bits a profiler attached to a running process may set (`COR_PRF_ALLOWABLE_AFTER_ATTACH`);
    /// asking for any other fails with `CORPROF_E_UNSUPPORTED_FOR_ATTACHING_PROFILER`.
    pub const ALLOWABLE_AFTER_ATTACH: u32 = MONITOR_THREADS
        | MONITOR_MODULE_LOADS
        | MONITOR_ASSEMBLY_LOADS
        | MONITOR_APPDOMAIN_LOADS
        | ENABLE_STACK_SNAPSHOT
        | MONITOR_GC
        | MONITOR_SUSPENDS
        | MONITOR_CLASS_LOADS
        | MONITOR_EXCEPTIONS
        | MONITOR_JIT_COMPILATION
        | ENABLE_REJIT;

    /// Every named bit with its `COR_PRF_` name, for parsing and display.
    pub const NAMED: &[(&str, u32)] = &[
        ("MONITOR_FUNCTION_UNLOADS", MONITOR_FUNCTION_UNLOADS),
        ("MONITOR_CLASS_LOADS", MONITOR_CLASS_LOADS),
        ("MONITOR_MODULE_LOADS", MONITOR_MODULE_LOADS),
        ("MONITOR_ASSEMBLY_LOADS", MONITOR_ASSEMBLY_LOADS),
        ("MONITOR_APPDOMAIN_LOADS", MONITOR_APPDOMAIN_LOADS),
        ("MONITOR_JIT_COMPILATION", MONITOR_JIT_COMPILATION),
        ("MONITOR_EXCEPTIONS", MONITOR_EXCEPTIONS),
        ("MONITOR_GC", MONITOR_GC),
        ("MONITOR_OBJECT_ALLOCATED", MONITOR_OBJECT_ALLOCATED),
        ("MONITOR_THREADS", MONITOR_THREADS),
        ("MONITOR_REMOTING", MONITOR_REMOTING),
        ("MONITOR_CODE_TRANSITIONS", MONITOR_CODE_TRANSITIONS),
        ("MONITOR_ENTERLEAVE", MONITOR_ENTERLEAVE),
        ("MONITOR_CCW", MONITOR_CCW),
        ("MONITOR_REMOTING_COOKIE", MONITOR_REMOTING_COOKIE),
        ("MONITOR_REMOTING_ASYNC", MONITOR_REMOTING_ASYNC),
        ("MONITOR_SUSPENDS", MONITOR_SUSPENDS),
        ("MONITOR_CACHE_SEARCHES", MONITOR_CACHE_SEARCHES),
        ("ENABLE_REJIT", ENABLE_REJIT),
        ("ENABLE_INPROC_DEBUGGING", ENABLE_INPROC_DEBUGGING),
        ("ENABLE_JIT_MAPS", ENABLE_JIT_MAPS),
        ("DISABLE_INLINING", DISABLE_INLINING),
        ("DISABLE_OPTIMIZATIONS", DISABLE_OPTIMIZATIONS),
        ("ENABLE_OBJECT_ALLOCATED", ENABLE_OBJECT_ALLOCATED),
        ("MONITOR_CLR_EXCEPTIONS", MONITOR_CLR_EXCEPTIONS),
        ("ENABLE_FUNCTION_ARGS", ENABLE_FUNCTION_ARGS),
        ("ENABLE_FUNCTION_RETVAL", ENABLE_FUNCTION_RETVAL),
        ("ENABLE_FRAME_INFO", ENABLE_FRAME_INFO),
        ("ENABLE_STACK_SNAPSHOT", ENABLE_STACK_SNAPSHOT),
        ("USE_PROFILE_IMAGES", USE_PROFILE_IMAGES),
        (
            "DISABLE_TRANSPARENCY_CHECKS_UNDER_FULL_TRUST",
            DISABLE_TRANSPARENCY_CHECKS_UNDER_FULL_TRUST,
        ),
        ("DISABLE_ALL_NGEN_IMAGES", DISABLE_ALL_NGEN_IMAGES),
        ("ALL", ALL),
    ];

    /// The bit named `name`, with or without the `COR_PRF_` prefix.
    pub fn from_name(name: &str) -> Option<u32> {
        super::named(NAMED, "COR_PRF_", name)
    }
}

/// `COR_PRF_HIGH_MONITOR`: the event mask's high word (`SetEventMask2`).
pub mod high {
    /// `COR_PRF_HIGH_ADD_ASSEMBLY_REFERENCES`.
    pub const ADD_ASSEMBLY_REFERENCES: u32 = 0x1;
    /// `COR_PRF_HIGH_IN_MEMORY_SYMBOLS_UPDATED`.
    pub const IN_MEMORY_SYMBOLS_UPDATED: u32 = 0x2;
    /// `COR_PRF_HIGH_MONITOR_DYNAMIC_FUNCTION_UNLOADS`: raise `DynamicMethodUnloaded`.
    pub const MONITOR_DYNAMIC_FUNCTION_UNLOADS: u32 = 0x4;
    /// `COR_PRF_HIGH_DISABLE_TIERED_COMPILATION`.
    pub const DISABLE_TIERED_COMPILATION: u32 = 0x8;
    /// `COR_PRF_HIGH_BASIC_GC`.
    pub const BASIC_GC: u32 = 0x10;
    /// `COR_PRF_HIGH_MONITOR_GC_MOVED_OBJECTS`.
    pub const MONITOR_GC_MOVED_OBJECTS: u32 = 0x20;
    /// `COR_PRF_HIGH_MONITOR_LARGEOBJECT_ALLOCATED`.
    pub const MONITOR_LARGEOBJECT_ALLOCATED: u32 = 0x40;
    /// Bits an attached profiler may set (`COR_PRF_HIGH_ALLOWABLE_AFTER_ATTACH`).
    pub const ALLOWABLE_AFTER_ATTACH: u32 = IN_MEMORY_SYMBOLS_UPDATED
        | MONITOR_DYNAMIC_FUNCTION_UNLOADS
        | BASIC_GC
        | MONITOR_GC_MOVED_OBJECTS
        | MONITOR_LARGEOBJECT_ALLOCATED;
    /// Bits that can only be set during a startup `Initialize` (`COR_PRF_HIGH_MONITOR_IMMUTABLE`).
    pub const MONITOR_IMMUTABLE: u32 = DISABLE_TIERED_COMPILATION;

    /// Every named bit with its `COR_PRF_HIGH_` name, for parsing and display.
    pub const NAMED: &[(&str, u32)] = &[
        ("ADD_ASSEMBLY_REFERENCES", ADD_ASSEMBLY_REFERENCES),
        ("IN_MEMORY_SYMBOLS_UPDATED", IN_MEMORY_SYMBOLS_UPDATED),
        (
            "MONITOR_DYNAMIC_FUNCTION_UNLOADS",
            MONITOR_DYNAMIC_FUNCTION_UNLOADS,
        ),
        ("DISABLE_TIERED_COMPILATION", DISABLE_TIERED_COMPILATION),
        ("BASIC_GC", BASIC_GC),
        ("MONITOR_GC_MOVED_OBJECTS", MONITOR_GC_MOVED_OBJECTS),
        ("MONITOR_LARGEOBJECT_ALLOCATED", MONITOR_LARGEOBJECT_ALLOCATED),
    ];

    /// The bit named `name`, with or without the `COR_PRF_HIGH_` prefix.
    pub fn from_name(name: &str) -> Option<u32> {
        super::named(NAMED, "COR_PRF_HIGH_", name)
    }
}

/// The bit of `table` named `name`, with or without `prefix`.
fn named(table: &[(&str, u32)], prefix: &str, name: &str) -> Option<u32> {
    let name = name.strip_prefix(prefix).unwrap_or(name);
    table.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// `COR_PRF_SUSPEND_REASON`: why the runtime is suspending (`RuntimeSuspendStarted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum SuspendReason {
    /// `COR_PRF_SUSPEND_OTHER`.
    Other = 0,
    /// `COR_PRF_SUSPEND_FOR_GC`.
    ForGc = 1,
    /// `COR_PRF_SUSPEND_FOR_APPDOMAIN_SHUTDOWN`.
    ForAppDomainShutdown = 2,
    /// `COR_PRF_SUSPEND_FOR_CODE_PITCHING`.
    ForCodePitching = 3,
    /// `COR_PRF_SUSPEND_FOR_SHUTDOWN`.
    ForShutdown = 4,
    /// `COR_PRF_SUSPEND_FOR_INPROC_DEBUGGER`.
    ForInprocDebugger = 6,
    /// `COR_PRF_SUSPEND_FOR_GC_PREP`.
    ForGcPrep = 7,
    /// `COR_PRF_SUSPEND_FOR_REJIT`.
    ForRejit = 8,
    /// `COR_PRF_SUSPEND_FOR_PROFILER`: `ICorProfilerInfo10::SuspendRuntime` (R41).
    ForProfiler = 9,
}

/// `COR_PRF_GC_REASON`: why a collection started (`GarbageCollectionStarted`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum GcReason {
    /// `COR_PRF_GC_OTHER`: the runtime decided.
    Other = 0,
    /// `COR_PRF_GC_INDUCED`: `GC.Collect()` or `ForceGC`.
    Induced = 1,
}
