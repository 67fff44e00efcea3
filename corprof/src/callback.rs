//! The runtime→profiler callbacks a stack walker uses (`ICorProfilerCallback`,
//! `ICorProfilerCallback2`), as a Rust trait.
//!
//! Every method has a default that returns `S_OK`, so a profiler implements only what it
//! subscribed to with its event mask. The runtime invokes each callback on the thread the
//! event happens on.

use crate::flags::{GcReason, SuspendReason};
use crate::hresult::HResult;
use crate::ids::{AssemblyId, ClassId, FunctionId, ModuleId, ObjectId, ThreadId};

/// Runtime→profiler notifications relevant to stack walking.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait ProfilerCallback: Send + Sync {
    /// `ThreadCreated` (`COR_PRF_MONITOR_THREADS`): the id is valid immediately.
    fn thread_created(&self, _thread: ThreadId) -> HResult {
        HResult::S_OK
    }

    /// `ThreadDestroyed` (`COR_PRF_MONITOR_THREADS`): raised on the dying thread, in
    /// preemptive mode. Block here until any walk of `thread` has finished (R37).
    fn thread_destroyed(&self, _thread: ThreadId) -> HResult {
        HResult::S_OK
    }

    /// `ThreadAssignedToOSThread`: the managed thread now runs on OS thread `os_thread`.
    fn thread_assigned_to_os_thread(&self, _thread: ThreadId, _os_thread: u32) -> HResult {
        HResult::S_OK
    }

    /// `ObjectAllocated` (`COR_PRF_ENABLE_OBJECT_ALLOCATED` + `COR_PRF_MONITOR_OBJECT_ALLOCATED`),
    /// raised on the allocating thread in cooperative mode.
    fn object_allocated(&self, _object: ObjectId, _class: ClassId) -> HResult {
        HResult::S_OK
    }

    /// `GarbageCollectionStarted` (`COR_PRF_MONITOR_GC`), with the runtime suspended.
    fn garbage_collection_started(&self, _generations: &[bool], _reason: GcReason) -> HResult {
        HResult::S_OK
    }

    /// `GarbageCollectionFinished` (`COR_PRF_MONITOR_GC`), on the collecting thread, before
    /// the runtime resumes.
    fn garbage_collection_finished(&self) -> HResult {
        HResult::S_OK
    }

    /// `RuntimeSuspendStarted` (`COR_PRF_MONITOR_SUSPENDS`).
    fn runtime_suspend_started(&self, _reason: SuspendReason) -> HResult {
        HResult::S_OK
    }

    /// `RuntimeSuspendFinished`, on the thread that raised `RuntimeSuspendStarted`.
    fn runtime_suspend_finished(&self) -> HResult {
        HResult::S_OK
    }

    /// `RuntimeResumeStarted`.
    fn runtime_resume_started(&self) -> HResult {
        HResult::S_OK
    }

    /// `RuntimeResumeFinished`, on the thread that raised `RuntimeResumeStarted`.
    fn runtime_resume_finished(&self) -> HResult {
        HResult::S_OK
    }

    /// `RuntimeThreadSuspended`: also raised on the caller when `DoStackSnapshot` OS-suspends
    /// its target (R11.3).
    fn runtime_thread_suspended(&self, _thread: ThreadId) -> HResult {
        HResult::S_OK
    }

    /// `RuntimeThreadResumed`: the counterpart of `runtime_thread_suspended` (R18).
    fn runtime_thread_resumed(&self, _thread: ThreadId) -> HResult {
        HResult::S_OK
    }

    /// `ModuleLoadFinished` (`COR_PRF_MONITOR_MODULE_LOADS`): `module` is loaded and its
    /// metadata readable. Raised with the callback state set, so SYNC APIs
    /// (`GetModuleMetaData`) may be called here.
    fn module_load_finished(&self, _module: ModuleId, _status: HResult) -> HResult {
        HResult::S_OK
    }

    /// `AssemblyUnloadStarted` (`COR_PRF_MONITOR_ASSEMBLY_LOADS`): a collectible assembly
    /// starts unloading; its methods' ids are still valid.
    fn assembly_unload_started(&self, _assembly: AssemblyId) -> HResult {
        HResult::S_OK
    }

    /// `AssemblyUnloadFinished` (`COR_PRF_MONITOR_ASSEMBLY_LOADS`): the assembly's code is
    /// released; its methods' `FunctionID`s name freed memory from here on.
    fn assembly_unload_finished(&self, _assembly: AssemblyId, _status: HResult) -> HResult {
        HResult::S_OK
    }

    /// `ICorProfilerCallback9::DynamicMethodUnloaded`
    /// (`COR_PRF_HIGH_MONITOR_DYNAMIC_FUNCTION_UNLOADS`): a collected dynamic method is about
    /// to be freed; its `FunctionID` is valid only during this call.
    fn dynamic_method_unloaded(&self, _function: FunctionId) -> HResult {
        HResult::S_OK
    }

    /// True when the profiler implements `ICorProfilerCallback3`, which
    /// `RequestProfilerDetach` requires.
    fn implements_callback3(&self) -> bool {
        false
    }

    /// `ExceptionThrown` (`COR_PRF_MONITOR_EXCEPTIONS`).
    fn exception_thrown(&self, _object: ObjectId) -> HResult {
        HResult::S_OK
    }

    /// `JITCompilationStarted` (`COR_PRF_MONITOR_JIT_COMPILATION`): `function` is about to be
    /// compiled, on the thread whose first call of it runs the compiler, in preemptive mode.
    /// The runtime always passes `safe_to_block` true.
    fn jit_compilation_started(&self, _function: FunctionId, _safe_to_block: bool) -> HResult {
        HResult::S_OK
    }

    /// `JITCompilationFinished` (`COR_PRF_MONITOR_JIT_COMPILATION`): `function`'s code exists
    /// now (its `GetCodeInfo2` answers), raised on the thread that raised the start.
    fn jit_compilation_finished(
        &self,
        _function: FunctionId,
        _status: HResult,
        _safe_to_block: bool,
    ) -> HResult {
        HResult::S_OK
    }

    /// `ThreadNameChanged` (`COR_PRF_MONITOR_THREADS`): managed code set `thread`'s
    /// `Thread.Name` to `name`; raised on the thread that set it, in preemptive mode.
    fn thread_name_changed(&self, _thread: ThreadId, _name: &str) -> HResult {
        HResult::S_OK
    }
}
