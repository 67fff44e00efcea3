//! What the host's COM objects share: `QueryInterface` over the IIDs an object answers to,
//! and the reference count of an object the host owns, which `Release` never frees.

use crate::out::hr;
use corprof::com::{Guid, HRESULT};
use corprof::HResult;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

/// `QueryInterface`: `E_POINTER` for a NULL `out`, `E_NOINTERFACE` (and NULL written) for an
/// IID not in `iids`, else the pointer `hand_out` gives (with its reference counted).
///
/// # Safety
/// `riid` is NULL or valid; `out` is NULL or valid for one write.
pub unsafe fn query_interface(
    riid: *const Guid,
    out: *mut *mut c_void,
    iids: &[Guid],
    hand_out: impl FnOnce() -> *mut c_void,
) -> HRESULT {
    if out.is_null() {
        return hr(HResult::E_POINTER);
    }
    // SAFETY: `riid` is checked for NULL; `out` is valid per the contract.
    unsafe {
        if riid.is_null() || !iids.contains(&*riid) {
            out.write(std::ptr::null_mut());
            return hr(HResult::E_NOINTERFACE);
        }
        out.write(hand_out());
    }
    hr(HResult::S_OK)
}

/// `Release` of an object the host owns: counts down, never frees, and notes a `Release`
/// past the count in `misuse` instead of going below zero.
pub fn release_owned(refs: &AtomicU32, misuse: &Mutex<Vec<String>>, interface: &str) -> u32 {
    match refs.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)) {
        Ok(n) => n - 1,
        Err(_) => {
            misuse
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(format!("{interface}::Release without a matching reference"));
            0
        }
    }
}
