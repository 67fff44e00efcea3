//! A native CoreCLR profiler that runs named `DoStackSnapshot` call shapes and logs what the
//! runtime answered, one JSON line per call, so the same shapes can be compared with the
//! simulator (`conformance/run.sh`).
//!
//! It is loaded by CoreCLR (`CORECLR_PROFILER_PATH`) and called by the conformance C#
//! programs through P/Invoke:
//! - `RunCase(name)` runs a case on the calling thread (or on a native thread it starts);
//! - `Arm(name)` runs a case at the next `ObjectAllocated` of a `Marker` object, or the next
//!   `GarbageCollectionStarted` for `gc_…` cases;
//! - `RegisterTarget()` records the calling managed thread as the target of cross-thread cases;
//! - `InvokeCallback(f)` calls a managed delegate back (reverse P/Invoke);
//!   `InvokeCallbackFramed(f)` too, from a native frame of its own.
//!
//! Only `corprof` is used: this is what any Rust profiler built on it looks like.

mod cases;
mod com;
mod info;
mod log;
mod names;
mod symbols;

use std::ffi::{c_char, c_void, CStr};

/// `DllGetClassObject`: hands CoreCLR the class factory, whatever CLSID it asks for.
///
/// # Safety
/// Called by the runtime with valid out-pointers.
#[no_mangle]
pub unsafe extern "system-unwind" fn DllGetClassObject(
    _clsid: *const corprof::com::Guid,
    riid: *const corprof::com::Guid,
    out: *mut *mut c_void,
) -> corprof::com::HRESULT {
    com::class_factory(riid, out)
}

/// Runs case `name` on the calling thread; returns 0, or -1 for an unknown case.
///
/// # Safety
/// `name` must be a NUL-terminated string (what the C# marshaller passes).
#[no_mangle]
pub unsafe extern "C" fn RunCase(name: *const c_char) -> i32 {
    let name = CStr::from_ptr(name).to_string_lossy();
    if cases::run(&name, cases::Caller::PInvoke) {
        0
    } else {
        -1
    }
}

/// Arms case `name` for the next `ObjectAllocated` of a `Marker` (or the next GC).
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn Arm(name: *const c_char) {
    cases::arm(&CStr::from_ptr(name).to_string_lossy());
}

/// Records the calling managed thread as the cross-thread target.
#[no_mangle]
pub extern "C" fn RegisterTarget() {
    cases::register_target();
}

/// Calls `callback` (a managed delegate marshalled as a function pointer): native code
/// calling managed code, for the managed→native→managed shapes.
///
/// # Safety
/// `callback` must be a valid function pointer.
#[no_mangle]
pub unsafe extern "C" fn InvokeCallback(callback: extern "C" fn()) {
    callback();
}

/// Calls `callback` as [`InvokeCallback`] does, but from a frame of its own. `InvokeCallback`
/// compiles to a jump (its call is its last act), so the managed code a delegate enters
/// returns straight into the managed caller of `InvokeCallback`: no native frame lies between
/// them. Here a value lives across the call, so the call cannot become a jump.
///
/// # Safety
/// `callback` must be a valid function pointer.
#[no_mangle]
pub unsafe extern "C" fn InvokeCallbackFramed(callback: extern "C" fn()) {
    let kept = std::hint::black_box(1u32);
    callback();
    std::hint::black_box(kept);
}
