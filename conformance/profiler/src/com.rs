//! The COM objects CoreCLR talks to: a class factory and the profiler callback object. Only
//! the callbacks the cases need are implemented; every other slot answers `S_OK`.

use crate::{cases, info, names};
use corprof::com::*;
use std::ffi::c_void;
use std::sync::OnceLock;

const E_NOINTERFACE: HRESULT = 0x8000_4002_u32 as i32;
const S_OK: HRESULT = 0;

/// A COM object: a pointer to its vtable.
#[repr(C)]
struct Object<V: 'static> {
    vtbl: &'static V,
}

// SAFETY: the objects are immutable statics; COM callers only read the vtable pointer.
unsafe impl<V> Sync for Object<V> {}

unsafe extern "system-unwind" fn add_ref(_this: *mut c_void) -> u32 {
    1
}

unsafe extern "system-unwind" fn release(_this: *mut c_void) -> u32 {
    1
}

fn accepts(riid: *const Guid, iids: &[Guid]) -> bool {
    // SAFETY: the runtime passes a valid IID.
    !riid.is_null() && iids.contains(unsafe { &*riid })
}

unsafe extern "system-unwind" fn factory_qi(
    this: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    if accepts(riid, &[IID_IUNKNOWN, IID_ICLASSFACTORY]) {
        *out = this;
        S_OK
    } else {
        *out = std::ptr::null_mut();
        E_NOINTERFACE
    }
}

unsafe extern "system-unwind" fn profiler_qi(
    this: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    if accepts(
        riid,
        &[IID_IUNKNOWN, IID_ICORPROFILERCALLBACK, IID_ICORPROFILERCALLBACK2],
    ) {
        *out = this;
        S_OK
    } else {
        *out = std::ptr::null_mut();
        E_NOINTERFACE
    }
}

unsafe extern "system-unwind" fn create_instance(
    _this: *mut c_void,
    _outer: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    profiler_qi(profiler() as *const _ as *mut c_void, riid, out)
}

unsafe extern "system-unwind" fn initialize(_this: *mut c_void, unknown: *mut c_void) -> HRESULT {
    info::initialize(unknown)
}

unsafe extern "system-unwind" fn module_load_finished(
    _this: *mut c_void,
    module: UintPtr,
    _status: HRESULT,
) -> HRESULT {
    names::module_loaded(module);
    S_OK
}

unsafe extern "system-unwind" fn object_allocated(
    _this: *mut c_void,
    _object: UintPtr,
    class: UintPtr,
) -> HRESULT {
    cases::object_allocated(class);
    S_OK
}

unsafe extern "system-unwind" fn gc_started(
    _this: *mut c_void,
    _gens: i32,
    _collected: *mut BOOL,
    _reason: u32,
) -> HRESULT {
    cases::gc_started();
    S_OK
}

fn unknown(
    qi: unsafe extern "system-unwind" fn(*mut c_void, *const Guid, *mut *mut c_void) -> HRESULT,
) -> IUnknownVtbl {
    IUnknownVtbl {
        QueryInterface: qi,
        AddRef: add_ref,
        Release: release,
    }
}

fn profiler() -> &'static Object<ICorProfilerCallback2Vtbl> {
    static VTBL: OnceLock<ICorProfilerCallback2Vtbl> = OnceLock::new();
    static OBJECT: OnceLock<Object<ICorProfilerCallback2Vtbl>> = OnceLock::new();
    OBJECT.get_or_init(|| {
        let vtbl = VTBL.get_or_init(|| {
            let mut v = ICorProfilerCallback2Vtbl::with_stubs(unknown(profiler_qi));
            v.base.Initialize = initialize;
            v.base.ModuleLoadFinished = module_load_finished;
            v.base.ObjectAllocated = object_allocated;
            v.GarbageCollectionStarted = gc_started;
            v
        });
        Object { vtbl }
    })
}

/// `DllGetClassObject`'s work: the one class factory.
pub unsafe fn class_factory(riid: *const Guid, out: *mut *mut c_void) -> HRESULT {
    static VTBL: OnceLock<IClassFactoryVtbl> = OnceLock::new();
    static OBJECT: OnceLock<Object<IClassFactoryVtbl>> = OnceLock::new();
    let factory = OBJECT.get_or_init(|| {
        let vtbl = VTBL.get_or_init(|| {
            let mut v = IClassFactoryVtbl::with_stubs(unknown(factory_qi));
            v.CreateInstance = create_instance;
            v
        });
        Object { vtbl }
    });
    factory_qi(factory as *const _ as *mut c_void, riid, out)
}
