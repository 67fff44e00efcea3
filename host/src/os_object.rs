//! `ISimclrOs`: the operating system a hosted library sees on simulated threads, as a COM
//! object it gets from the `ICorProfilerInfo` object (`QueryInterface(IID_ISimclrOs)`).
//!
//! A sampler designed for Windows stops threads with `SuspendThread`, reads them with
//! `GetThreadContext` and resumes them with `ResumeThread`; ported to run here, it calls the
//! same operations through this object (`include/simclr_os.h` declares it, with the
//! Windows-named functions a Windows design calls), and each is the running process's:
//! suspend counts, the stop that completes only at `GetThreadContext`, the suspended thread's
//! registers as a CONTEXT, its stack bounds and checked reads, every rule the engine checks
//! for Rust samplers. Outside a running process's threads every call fails (`-1`, `0`): there
//! is nothing to stop.

use crate::com_object::query_interface as query_interface_of;
use corprof::com::IID_IUNKNOWN;
use corprof::com::{Guid, HRESULT};
use corprof::os::{OsThread, ThreadControl};
use corprof::Context;
use sim_clr::process::{fiber, SimOs};
use std::ffi::c_void;

/// `IID_ISimclrOs`: {5E1C1A0A-0C5E-4D0E-9A1B-51C0FFEE0001}.
pub const IID_ISIMCLR_OS: Guid = Guid::new(
    0x5E1C_1A0A,
    0x0C5E,
    0x4D0E,
    [0x9A, 0x1B, 0x51, 0xC0, 0xFF, 0xEE, 0x00, 0x01],
);

/// The vtable, in `include/simclr_os.h`'s order.
#[repr(C)]
struct Vtbl {
    query_interface: unsafe extern "system-unwind" fn(*mut c_void, *const Guid, *mut *mut c_void) -> HRESULT,
    add_ref: unsafe extern "system-unwind" fn(*mut c_void) -> u32,
    release: unsafe extern "system-unwind" fn(*mut c_void) -> u32,
    current_thread_id: unsafe extern "system-unwind" fn(*mut c_void) -> u32,
    suspend_thread: unsafe extern "system-unwind" fn(*mut c_void, u32) -> i32,
    resume_thread: unsafe extern "system-unwind" fn(*mut c_void, u32) -> i32,
    get_thread_context: unsafe extern "system-unwind" fn(*mut c_void, u32, *mut u8) -> i32,
    enum_threads: unsafe extern "system-unwind" fn(*mut c_void, *mut u32, u32) -> u32,
    get_stack_bounds: unsafe extern "system-unwind" fn(*mut c_void, u32, *mut u64, *mut u64) -> i32,
    read_stack: unsafe extern "system-unwind" fn(*mut c_void, u32, u64, *mut u64) -> i32,
    name_object: unsafe extern "system-unwind" fn(*mut c_void, *const c_void, *const std::ffi::c_char) -> i32,
}

/// The object: a vtable pointer, no state (it is the process's OS layer).
#[repr(C)]
struct OsObject {
    vtbl: &'static Vtbl,
}

static VTBL: Vtbl = Vtbl {
    query_interface,
    add_ref,
    release,
    current_thread_id,
    suspend_thread,
    resume_thread,
    get_thread_context,
    enum_threads,
    get_stack_bounds,
    read_stack,
    name_object,
};

static OBJECT: OsObject = OsObject { vtbl: &VTBL };

/// The object's pointer, handed out by `QueryInterface` (it is never freed).
pub fn hand_out() -> *mut c_void {
    &OBJECT as *const OsObject as *mut c_void
}

unsafe extern "system-unwind" fn query_interface(
    _: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    // SAFETY: COM passes a valid (or NULL) IID and out-pointer.
    unsafe { query_interface_of(riid, out, &[IID_IUNKNOWN, IID_ISIMCLR_OS], hand_out) }
}

unsafe extern "system-unwind" fn add_ref(_: *mut c_void) -> u32 {
    1
}

unsafe extern "system-unwind" fn release(_: *mut c_void) -> u32 {
    1
}

/// The process's OS layer, when the caller runs a simulated thread.
fn os() -> Option<SimOs> {
    fiber::on_fiber().then(SimOs::new)
}

unsafe extern "system-unwind" fn current_thread_id(_: *mut c_void) -> u32 {
    os().map_or(0, |os| os.current_thread().0)
}

unsafe extern "system-unwind" fn suspend_thread(_: *mut c_void, thread: u32) -> i32 {
    os().and_then(|os| os.suspend_thread(OsThread(thread)).ok())
        .map_or(-1, |count| count as i32)
}

unsafe extern "system-unwind" fn resume_thread(_: *mut c_void, thread: u32) -> i32 {
    os().and_then(|os| os.resume_thread(OsThread(thread)).ok())
        .map_or(-1, |count| count as i32)
}

unsafe extern "system-unwind" fn get_thread_context(_: *mut c_void, thread: u32, context: *mut u8) -> i32 {
    if context.is_null() {
        return 0;
    }
    let Some(read) = os().and_then(|os| os.get_thread_context(OsThread(thread)).ok()) else {
        return 0;
    };
    // SAFETY: a non-NULL `context` points at a whole CONTEXT of the caller's.
    read.write_bytes(unsafe { &mut *context.cast::<[u8; Context::SIZE]>() });
    1
}

unsafe extern "system-unwind" fn enum_threads(_: *mut c_void, ids: *mut u32, capacity: u32) -> u32 {
    let Some(os) = os() else { return 0 };
    let threads = os.threads();
    if !ids.is_null() {
        for (i, t) in threads.iter().take(capacity as usize).enumerate() {
            // SAFETY: `ids` has room for `capacity` entries.
            unsafe { ids.add(i).write(t.0) };
        }
    }
    threads.len() as u32
}

unsafe extern "system-unwind" fn get_stack_bounds(
    _: *mut c_void,
    thread: u32,
    limit: *mut u64,
    base: *mut u64,
) -> i32 {
    let Some((low, high)) = os().and_then(|os| os.stack_bounds(OsThread(thread)).ok()) else {
        return 0;
    };
    // SAFETY: NULL or the caller's words.
    unsafe {
        if !limit.is_null() {
            limit.write(low);
        }
        if !base.is_null() {
            base.write(high);
        }
    }
    1
}

unsafe extern "system-unwind" fn read_stack(
    _: *mut c_void,
    thread: u32,
    address: u64,
    value: *mut u64,
) -> i32 {
    let Some(word) = os().and_then(|os| os.read_stack(OsThread(thread), address).ok()) else {
        return 0;
    };
    if !value.is_null() {
        // SAFETY: the caller's word.
        unsafe { value.write(word) };
    }
    1
}

/// `NameObject`: the library names its mutex, read-write lock, condition variable, semaphore
/// or once-control at `object` for every report (before its first use; 1, or 0 for a NULL
/// argument or a name that is not UTF-8).
unsafe extern "system-unwind" fn name_object(
    _: *mut c_void,
    object: *const c_void,
    name: *const std::ffi::c_char,
) -> i32 {
    if object.is_null() || name.is_null() {
        return 0;
    }
    // SAFETY: the caller's NUL-terminated name.
    let Ok(name) = unsafe { std::ffi::CStr::from_ptr(name) }.to_str() else {
        return 0;
    };
    #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
    crate::interpose::name_object(object, name);
    1
}
