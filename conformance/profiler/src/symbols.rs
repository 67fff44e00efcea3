//! Naming native code: the module and symbol `dladdr` finds for an address, as
//! `libname.so!Symbol`.

use std::ffi::{c_char, c_int, c_void, CStr};

/// `Dl_info` (glibc).
#[repr(C)]
struct DlInfo {
    fname: *const c_char,
    fbase: *mut c_void,
    sname: *const c_char,
    saddr: *mut c_void,
}

extern "C" {
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
}

/// `module!symbol` of the code at `ip` (`module` alone when the symbol is not exported), or
/// `None` when no loaded module holds it.
pub fn native_name(ip: usize) -> Option<String> {
    let mut info = DlInfo {
        fname: std::ptr::null(),
        fbase: std::ptr::null_mut(),
        sname: std::ptr::null(),
        saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the address's mapping and fills `info`; the strings it points
    // to live as long as the module stays loaded, and are copied at once.
    let found = unsafe { dladdr(ip as *const c_void, &mut info) } != 0;
    if !found || info.fname.is_null() {
        return None;
    }
    // SAFETY: non-null C strings from dladdr.
    let path = unsafe { CStr::from_ptr(info.fname) }.to_string_lossy();
    let module = path.rsplit('/').next().unwrap_or(&path).to_string();
    if info.sname.is_null() {
        return Some(module);
    }
    // SAFETY: as above.
    let symbol = unsafe { CStr::from_ptr(info.sname) }.to_string_lossy();
    Some(format!("{module}!{symbol}"))
}
