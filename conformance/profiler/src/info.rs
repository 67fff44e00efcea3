//! The `ICorProfilerInfo10` pointer the runtime gave `Initialize`, with thin wrappers over the
//! slots the cases call.

use corprof::com::*;
use corprof::flags::event;
use std::ffi::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

static INFO: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

/// The event mask the profiler asks for: snapshots, allocations, threads, GC, module loads
/// (the real probe's 0x10800384), without `ENABLE_STACK_SNAPSHOT` when `CONF_NO_SNAPSHOT` is
/// set.
fn event_mask() -> u32 {
    let mask = event::ENABLE_STACK_SNAPSHOT
        | event::ENABLE_OBJECT_ALLOCATED
        | event::MONITOR_OBJECT_ALLOCATED
        | event::MONITOR_THREADS
        | event::MONITOR_GC
        | event::MONITOR_MODULE_LOADS;
    if std::env::var_os("CONF_NO_SNAPSHOT").is_some() {
        mask & !event::ENABLE_STACK_SNAPSHOT
    } else {
        mask
    }
}

/// `Initialize`: keeps `ICorProfilerInfo10` and sets the event mask.
pub unsafe fn initialize(unknown: *mut c_void) -> HRESULT {
    let vtbl = *(unknown as *const *const IUnknownVtbl);
    let mut info = std::ptr::null_mut();
    let hr = ((*vtbl).QueryInterface)(unknown, &IID_ICORPROFILERINFO10, &mut info);
    if hr != 0 {
        return hr;
    }
    INFO.store(info, Ordering::SeqCst);
    let info = Info::get();
    (info.v1().SetEventMask)(info.this(), event_mask())
}

/// A borrowed `ICorProfilerInfo10`.
#[derive(Clone, Copy)]
pub struct Info(*mut c_void);

/// One snapshot callback as the runtime made it.
pub struct RawFrame {
    /// `funcId`.
    pub func_id: UintPtr,
    /// `ip`.
    pub ip: UintPtr,
    /// `contextSize`.
    pub context_size: u32,
    /// The context bytes (`contextSize` of them), if any.
    pub context: Option<Vec<u8>>,
}

unsafe extern "system-unwind" fn trampoline(
    func_id: UintPtr,
    ip: UintPtr,
    _frame_info: UintPtr,
    context_size: u32,
    context: *mut u8,
    client_data: *mut c_void,
) -> HRESULT {
    let f = &mut *(client_data as *mut &mut dyn FnMut(RawFrame) -> HRESULT);
    let context =
        (!context.is_null()).then(|| std::slice::from_raw_parts(context, context_size as usize).to_vec());
    f(RawFrame {
        func_id,
        ip,
        context_size,
        context,
    })
}

impl Info {
    /// The pointer `Initialize` stored.
    pub fn get() -> Info {
        Info(INFO.load(Ordering::SeqCst))
    }

    fn this(self) -> *mut c_void {
        self.0
    }

    fn v10(self) -> &'static ICorProfilerInfo10Vtbl {
        // SAFETY: a COM object starts with its vtable pointer; the runtime keeps it alive.
        unsafe { &**(self.0 as *const *const ICorProfilerInfo10Vtbl) }
    }

    fn v4(self) -> &'static ICorProfilerInfo4Vtbl {
        &self.v10().base.base.base.base.base.base
    }

    fn v2(self) -> &'static ICorProfilerInfo2Vtbl {
        &self.v4().base.base
    }

    fn v1(self) -> &'static ICorProfilerInfoVtbl {
        &self.v2().base
    }

    /// `DoStackSnapshot`; a `None` callback passes NULL.
    pub fn do_stack_snapshot(
        self,
        thread: UintPtr,
        callback: Option<&mut dyn FnMut(RawFrame) -> HRESULT>,
        flags: u32,
        context: Option<&mut [u8]>,
        context_size: u32,
    ) -> HRESULT {
        let ctx = context.map_or(std::ptr::null_mut(), |c| c.as_mut_ptr());
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        unsafe {
            match callback {
                Some(mut f) => {
                    let data = &mut f as *mut &mut dyn FnMut(RawFrame) -> HRESULT as *mut c_void;
                    (self.v2().DoStackSnapshot)(
                        self.this(),
                        thread,
                        Some(trampoline),
                        flags,
                        data,
                        ctx,
                        context_size,
                    )
                }
                None => (self.v2().DoStackSnapshot)(
                    self.this(),
                    thread,
                    None,
                    flags,
                    std::ptr::null_mut(),
                    ctx,
                    context_size,
                ),
            }
        }
    }

    /// `GetCurrentThreadID`.
    pub fn get_current_thread_id(self) -> (HRESULT, UintPtr) {
        let mut id = 0;
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        let hr = unsafe { (self.v1().GetCurrentThreadID)(self.this(), &mut id) };
        (hr, id)
    }

    /// `GetFunctionFromIP`.
    pub fn get_function_from_ip(self, ip: UintPtr) -> (HRESULT, UintPtr) {
        let mut f = 0;
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        let hr = unsafe { (self.v1().GetFunctionFromIP)(self.this(), ip as *mut u8, &mut f) };
        (hr, f)
    }

    /// `GetFunctionFromIP2`.
    pub fn get_function_from_ip2(self, ip: UintPtr) -> HRESULT {
        let (mut f, mut rejit) = (0, 0);
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        unsafe { (self.v4().GetFunctionFromIP2)(self.this(), ip as *mut u8, &mut f, &mut rejit) }
    }

    /// `GetFunctionInfo`: (hr, class, module, token).
    pub fn get_function_info(self, function: UintPtr) -> (HRESULT, UintPtr, UintPtr, u32) {
        let (mut class, mut module, mut token) = (0, 0, 0);
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        let hr = unsafe {
            (self.v1().GetFunctionInfo)(self.this(), function, &mut class, &mut module, &mut token)
        };
        (hr, class, module, token)
    }

    /// `GetCodeInfo2`: whether `ip` lies in one of `function`'s code regions, `None` when the
    /// call fails.
    pub fn code_contains(self, function: UintPtr, ip: UintPtr) -> Option<bool> {
        // COR_PRF_CODE_INFO: { UINT_PTR startAddress; SIZE_T size; }; a method has at most a
        // hot and a cold region.
        let mut regions = [[0usize; 2]; 2];
        let mut count = 0u32;
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        let hr = unsafe {
            (self.v2().GetCodeInfo2)(
                self.this(),
                function,
                2,
                &mut count,
                regions.as_mut_ptr() as *mut c_void,
            )
        };
        let filled = &regions[..(count as usize).min(2)];
        (hr == 0).then(|| {
            filled
                .iter()
                .any(|&[start, size]| ip >= start && ip - start < size)
        })
    }

    /// `GetClassIDInfo`: (hr, module, typedef).
    pub fn get_class_id_info(self, class: UintPtr) -> (HRESULT, UintPtr, u32) {
        let (mut module, mut token) = (0, 0);
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        let hr = unsafe { (self.v1().GetClassIDInfo)(self.this(), class, &mut module, &mut token) };
        (hr, module, token)
    }

    /// `GetModuleMetaData(module, ofRead, IID_IMetaDataImport)`.
    pub fn get_module_metadata(self, module: UintPtr) -> (HRESULT, *mut c_void) {
        let mut import = std::ptr::null_mut();
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        let hr = unsafe {
            (self.v1().GetModuleMetaData)(self.this(), module, 0, &IID_IMETADATAIMPORT, &mut import)
        };
        (hr, import)
    }

    /// `InitializeCurrentThread`.
    pub fn initialize_current_thread(self) -> HRESULT {
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        unsafe { (self.v4().InitializeCurrentThread)(self.this()) }
    }

    /// `SuspendRuntime`.
    pub fn suspend_runtime(self) -> HRESULT {
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        unsafe { (self.v10().SuspendRuntime)(self.this()) }
    }

    /// `ResumeRuntime`.
    pub fn resume_runtime(self) -> HRESULT {
        // SAFETY: the runtime's ICorProfilerInfo10 slot, called with its declared arguments and valid out-pointers.
        unsafe { (self.v10().ResumeRuntime)(self.this()) }
    }
}
