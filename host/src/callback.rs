//! The runtime's callbacks delivered into the hosted library's `ICorProfilerCallback2`
//! vtable, and which OS thread runs as the runtime's current caller.
//!
//! While the runtime raises a callback, the OS thread that runs the library's code for it
//! *is* the simulated thread the callback is raised on: the library's calls from that OS
//! thread are attributed to it. So are calls from an OS thread running one of a running
//! process's simulated threads (a thread the library created there). Calls from any other OS
//! thread (one the library started outside a process) are attributed to a native thread the
//! runtime does not know.
//!
//! The vtable reaches `ICorProfilerCallback3`: callbacks of later interfaces
//! (`ICorProfilerCallback9::DynamicMethodUnloaded`) are not delivered to a hosted library.

use crate::out::hr;
use corprof::com::{ICorProfilerCallback2Vtbl, BOOL, HRESULT};
use corprof::flags::{GcReason, SuspendReason};
use corprof::{AssemblyId, ClassId, FunctionId, HResult, ModuleId, ObjectId, ProfilerCallback, ThreadId};
use std::cell::Cell;
use std::ffi::c_void;

thread_local! {
    /// How deep the current OS thread is in calls the runtime (or the host) made into the
    /// library.
    static HOSTED: Cell<usize> = const { Cell::new(0) };
}

/// True when the current OS thread is running library code on the runtime's behalf.
pub fn on_runtime_thread() -> bool {
    HOSTED.with(|h| h.get()) > 0
}

/// Runs `f` (a call into the library) with the current OS thread marked as the runtime's
/// current caller.
pub fn as_runtime_thread<R>(f: impl FnOnce() -> R) -> R {
    struct Mark;
    impl Drop for Mark {
        fn drop(&mut self) {
            HOSTED.with(|h| h.set(h.get() - 1));
        }
    }
    HOSTED.with(|h| h.set(h.get() + 1));
    let _mark = Mark;
    f()
}

/// The hosted library's callback object, as a [`ProfilerCallback`].
pub struct Callbacks {
    /// The `ICorProfilerCallback2*` (an address, so the adapter is `Send`).
    object: usize,
    /// Whether the object answered `QueryInterface(ICorProfilerCallback3)`.
    callback3: bool,
}

impl Callbacks {
    /// Wraps callback object `object`.
    ///
    /// # Safety
    /// `object` is a live COM object implementing `ICorProfilerCallback2` for as long as the
    /// adapter is used.
    pub unsafe fn new(object: *mut c_void, callback3: bool) -> Callbacks {
        Callbacks {
            object: object as usize,
            callback3,
        }
    }

    /// Calls one slot of the vtable as the runtime's current caller.
    fn call(&self, f: impl FnOnce(&ICorProfilerCallback2Vtbl, *mut c_void) -> HRESULT) -> HResult {
        let this = self.object as *mut c_void;
        // SAFETY: a COM object starts with its vtable pointer; `new`'s contract keeps it live.
        let vtbl = unsafe { &**(this as *const *const ICorProfilerCallback2Vtbl) };
        HResult(as_runtime_thread(|| f(vtbl, this)) as u32)
    }
}

fn id(value: u64) -> usize {
    value as usize
}

impl ProfilerCallback for Callbacks {
    fn thread_created(&self, thread: ThreadId) -> HResult {
        // SAFETY (all calls below): the slot has the signature its vtable declares.
        self.call(|v, this| unsafe { (v.base.ThreadCreated)(this, id(thread.0)) })
    }

    fn thread_destroyed(&self, thread: ThreadId) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.ThreadDestroyed)(this, id(thread.0)) })
    }

    fn thread_assigned_to_os_thread(&self, thread: ThreadId, os_thread: u32) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.ThreadAssignedToOSThread)(this, id(thread.0), os_thread) })
    }

    fn object_allocated(&self, object: ObjectId, class: ClassId) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.ObjectAllocated)(this, id(object.0), id(class.0)) })
    }

    fn garbage_collection_started(&self, generations: &[bool], reason: GcReason) -> HResult {
        // The adapter's allocation, not the profiler's.
        let mut collected: Vec<BOOL> =
            sim_clr::process::unobserved(|| generations.iter().map(|&g| BOOL::from(g)).collect());
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe {
            (v.GarbageCollectionStarted)(
                this,
                collected.len() as i32,
                collected.as_mut_ptr(),
                reason as u32,
            )
        })
    }

    fn garbage_collection_finished(&self) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.GarbageCollectionFinished)(this) })
    }

    fn runtime_suspend_started(&self, reason: SuspendReason) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.RuntimeSuspendStarted)(this, reason as u32) })
    }

    fn runtime_suspend_finished(&self) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.RuntimeSuspendFinished)(this) })
    }

    fn runtime_resume_started(&self) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.RuntimeResumeStarted)(this) })
    }

    fn runtime_resume_finished(&self) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.RuntimeResumeFinished)(this) })
    }

    fn runtime_thread_suspended(&self, thread: ThreadId) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.RuntimeThreadSuspended)(this, id(thread.0)) })
    }

    fn runtime_thread_resumed(&self, thread: ThreadId) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.RuntimeThreadResumed)(this, id(thread.0)) })
    }

    fn module_load_finished(&self, module: ModuleId, status: HResult) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.ModuleLoadFinished)(this, id(module.0), hr(status)) })
    }

    fn assembly_unload_started(&self, assembly: AssemblyId) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.AssemblyUnloadStarted)(this, id(assembly.0)) })
    }

    fn assembly_unload_finished(&self, assembly: AssemblyId, status: HResult) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.AssemblyUnloadFinished)(this, id(assembly.0), hr(status)) })
    }

    fn implements_callback3(&self) -> bool {
        self.callback3
    }

    fn exception_thrown(&self, object: ObjectId) -> HResult {
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.ExceptionThrown)(this, id(object.0)) })
    }

    fn jit_compilation_started(&self, function: FunctionId, safe_to_block: bool) -> HResult {
        let safe = BOOL::from(safe_to_block);
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe { (v.base.JITCompilationStarted)(this, id(function.0), safe) })
    }

    fn jit_compilation_finished(
        &self,
        function: FunctionId,
        status: HResult,
        safe_to_block: bool,
    ) -> HResult {
        let safe = BOOL::from(safe_to_block);
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object.
        self.call(|v, this| unsafe {
            (v.base.JITCompilationFinished)(this, id(function.0), hr(status), safe)
        })
    }

    fn thread_name_changed(&self, thread: ThreadId, name: &str) -> HResult {
        // The runtime passes the managed string's characters and their count; the buffer is
        // the adapter's, not an allocation of the profiler's.
        let mut wide: Vec<u16> = sim_clr::process::unobserved(|| name.encode_utf16().chain([0]).collect());
        let count = (wide.len() - 1) as u32;
        // SAFETY: the slot has the signature its vtable declares; `this` is the live object;
        // `wide` holds `count` characters (and a NUL) for the call.
        self.call(|v, this| unsafe { (v.ThreadNameChanged)(this, id(thread.0), count, wide.as_mut_ptr()) })
    }
}
