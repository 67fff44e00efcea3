//! Out-parameters at the ABI: optional pointers written only when not NULL, names copied
//! into the caller's UTF-16 buffer, and `HRESULT` conversions.

use corprof::com::HRESULT;
use corprof::HResult;

/// An `HResult` as the ABI returns it.
pub fn hr(value: HResult) -> HRESULT {
    value.0 as HRESULT
}

/// Writes `value` through `out` unless it is NULL: the runtime treats most out-parameters as
/// optional.
///
/// # Safety
/// `out` is NULL or valid for one write of `T`.
pub unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: non-null, and valid for a write by the caller's contract.
        unsafe { out.write(value) };
    }
}

/// Copies `name` with its terminating NUL into `buffer` (room for `len` UTF-16 units),
/// cutting it to fit (still NUL-terminated), and writes the full length, NUL included, to
/// `out_len`. Returns false when the name had to be cut. A NULL buffer only asks the length.
///
/// # Safety
/// `buffer` is NULL or valid for `len` writes; `out_len` is NULL or valid for one write.
pub unsafe fn put_name(name: &str, buffer: *mut u16, len: u32, out_len: *mut u32) -> bool {
    let wide: Vec<u16> = name.encode_utf16().chain(std::iter::once(0)).collect();
    // SAFETY: per the caller's contract.
    unsafe { put(out_len, wide.len() as u32) };
    if buffer.is_null() {
        return true;
    }
    let room = len as usize;
    if room == 0 {
        return false;
    }
    let n = wide.len().min(room);
    // SAFETY: `buffer` holds `len` >= `n` units; the last one written is the NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(wide.as_ptr(), buffer, n);
        buffer.add(n - 1).write(0);
    }
    n == wide.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_cut_to_fit_and_stay_terminated() {
        let mut buf = [0xffffu16; 4];
        let mut len = 0;
        // SAFETY: valid buffers of the sizes passed.
        assert!(!unsafe { put_name("abcdef", buf.as_mut_ptr(), 4, &mut len) });
        assert_eq!((buf, len), ([97, 98, 99, 0], 7));
        let mut buf = [0xffffu16; 8];
        // SAFETY: valid buffers of the sizes passed.
        assert!(unsafe { put_name("ab", buf.as_mut_ptr(), 8, &mut len) });
        assert_eq!((&buf[..3], len), (&[97, 98, 0][..], 3));
        // SAFETY: valid buffers of the sizes passed.
        assert!(unsafe { put_name("ab", std::ptr::null_mut(), 0, &mut len) });
        // SAFETY: valid buffers of the sizes passed.
        assert!(!unsafe { put_name("ab", buf.as_mut_ptr(), 0, std::ptr::null_mut()) });
    }
}
