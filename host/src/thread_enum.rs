//! The `ICorProfilerThreadEnum` COM object `EnumThreads` returns. The profiler owns it: it is
//! freed when its last reference is released.

use crate::com_object::query_interface as query_interface_of;
use crate::out::{hr, put};
use corprof::com::*;
use corprof::HResult;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// A snapshot of thread ids with a cursor.
#[repr(C)]
struct ThreadEnum {
    vtbl: &'static ICorProfilerThreadEnumVtbl,
    refs: AtomicU32,
    threads: Vec<UintPtr>,
    next: Mutex<usize>,
    /// How many enumerators of its runtime are not freed yet, this one included.
    live: Arc<AtomicU32>,
}

/// A new enumerator over `threads` starting at `next`, with one reference, as an `IUnknown*`;
/// `live` counts it until it is freed.
pub fn create(threads: Vec<UintPtr>, next: usize, live: Arc<AtomicU32>) -> *mut c_void {
    live.fetch_add(1, Ordering::SeqCst);
    Box::into_raw(Box::new(ThreadEnum {
        vtbl: vtable(),
        refs: AtomicU32::new(1),
        threads,
        next: Mutex::new(next),
        live,
    })) as *mut c_void
}

/// # Safety
/// `this` came from [`create`] and still holds a reference.
unsafe fn object<'a>(this: *mut c_void) -> &'a ThreadEnum {
    // SAFETY: per the contract.
    unsafe { &*(this as *const ThreadEnum) }
}

fn cursor(e: &ThreadEnum) -> std::sync::MutexGuard<'_, usize> {
    e.next.lock().unwrap_or_else(|p| p.into_inner())
}

unsafe extern "system-unwind" fn query_interface(
    this: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    let iids = [IID_IUNKNOWN, IID_ICORPROFILERTHREADENUM];
    // SAFETY: COM passes a valid (or NULL) IID and out-pointer, and a live object.
    unsafe {
        query_interface_of(riid, out, &iids, || {
            add_ref(this);
            this
        })
    }
}

unsafe extern "system-unwind" fn add_ref(this: *mut c_void) -> u32 {
    // SAFETY: COM calls it on a live object.
    unsafe { object(this) }.refs.fetch_add(1, Ordering::SeqCst) + 1
}

unsafe extern "system-unwind" fn release(this: *mut c_void) -> u32 {
    // SAFETY: COM calls it on a live object.
    let left = unsafe { object(this) }.refs.fetch_sub(1, Ordering::SeqCst) - 1;
    if left == 0 {
        // SAFETY: the last reference is gone; the object came from Box::into_raw.
        let freed = unsafe { Box::from_raw(this as *mut ThreadEnum) };
        freed.live.fetch_sub(1, Ordering::SeqCst);
    }
    left
}

unsafe extern "system-unwind" fn skip(this: *mut c_void, count: u32) -> HRESULT {
    // SAFETY: a live object.
    let e = unsafe { object(this) };
    let mut next = cursor(e);
    *next = (*next + count as usize).min(e.threads.len());
    hr(HResult::S_OK)
}

unsafe extern "system-unwind" fn reset(this: *mut c_void) -> HRESULT {
    // SAFETY: a live object.
    *cursor(unsafe { object(this) }) = 0;
    hr(HResult::S_OK)
}

unsafe extern "system-unwind" fn clone(this: *mut c_void, out: *mut *mut c_void) -> HRESULT {
    if out.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: a live object; `out` is valid.
    unsafe {
        let e = object(this);
        out.write(create(e.threads.clone(), *cursor(e), e.live.clone()));
    }
    hr(HResult::S_OK)
}

unsafe extern "system-unwind" fn get_count(this: *mut c_void, count: *mut u32) -> HRESULT {
    if count.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: a live object; `count` is valid.
    unsafe { count.write(object(this).threads.len() as u32) };
    hr(HResult::S_OK)
}

unsafe extern "system-unwind" fn next(
    this: *mut c_void,
    count: u32,
    ids: *mut UintPtr,
    fetched: *mut u32,
) -> HRESULT {
    if ids.is_null() && count > 0 {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: a live object.
    let e = unsafe { object(this) };
    let mut at = cursor(e);
    let n = (count as usize).min(e.threads.len() - *at);
    // SAFETY: `ids` holds `count` >= `n` slots; `fetched` is NULL or valid.
    unsafe {
        std::ptr::copy_nonoverlapping(e.threads[*at..].as_ptr(), ids, n);
        put(fetched, n as u32);
    }
    *at += n;
    hr(if n == count as usize {
        HResult::S_OK
    } else {
        HResult::S_FALSE
    })
}

fn vtable() -> &'static ICorProfilerThreadEnumVtbl {
    static VTBL: OnceLock<ICorProfilerThreadEnumVtbl> = OnceLock::new();
    VTBL.get_or_init(|| ICorProfilerThreadEnumVtbl {
        base: IUnknownVtbl {
            QueryInterface: query_interface,
            AddRef: add_ref,
            Release: release,
        },
        Skip: skip,
        Reset: reset,
        Clone: clone,
        GetCount: get_count,
        Next: next,
    })
}
