//! Scheduling points at the atomic operations of a library built with `-fsanitize=thread`.
//!
//! Such a library calls the ThreadSanitizer runtime (`__tsan_atomic32_compare_exchange_strong`,
//! `__tsan_func_entry`, …) where its source has an atomic operation, a function entry or a
//! plain access, and names that runtime (`libtsan.so.2`, `libtsan.so.0`) as a dependency. The
//! real runtime cannot be loaded into a process that did not start with it, so before the
//! first such library is loaded a stand-in is (`tsan.c`, built by the build script under both
//! names, loaded so that its symbols are global): the dynamic loader then finds the library's
//! dependency already there, and a library that leaves the entry points undefined (as Clang
//! builds one) finds them too.
//!
//! Each atomic operation of the stand-in reports here, and on a simulated thread becomes a
//! scheduling point: one that writes is a change other threads can see; one that changes
//! nothing is a poll (sim-clr's `Request::Poll`), and a thread that keeps polling one address
//! and reading one value spins: it runs only when no other thread can, until something
//! changes. Plain accesses are not scheduling points: this is no data-race detector.
//! Interleavings are sequentially consistent.

use crate::library::{dlopen, dlsym};
use sim_clr::process::fiber::{self, Request};
use std::ffi::{c_int, c_void, CString};
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::OnceLock;

/// The stand-in, once for each soname.
const STAND_INS: [(&str, &[u8]); 2] = [
    (
        "libtsan.so.0",
        include_bytes!(concat!(env!("OUT_DIR"), "/libtsan.so.0.stand-in")),
    ),
    (
        "libtsan.so.2",
        include_bytes!(concat!(env!("OUT_DIR"), "/libtsan.so.2.stand-in")),
    ),
];

/// The stand-in's report of an atomic operation: on a simulated thread, a scheduling point.
extern "C-unwind" fn access(address: *const c_void, seen: u64, changed: c_int) {
    let request = if changed != 0 {
        Request::Atomic(true)
    } else if address.is_null() {
        Request::Atomic(false)
    } else {
        Request::Poll(address as usize, seen)
    };
    // Off a simulated thread (a frozen runtime's callbacks, a load) it is a plain atomic.
    fiber::request(request);
}

/// Whether the library at `path` was built with `-fsanitize=thread`: its dynamic symbols name
/// `__tsan_init`, which the constructor of every instrumented object calls. (Only such a
/// library gets the stand-in: it also defines C++'s `operator new` and `delete`, which would
/// otherwise stand in for those of every library loaded later.) A file that is no 64-bit ELF
/// file is not.
pub(crate) fn instrumented(path: &std::path::Path) -> bool {
    let Ok(elf) = std::fs::read(path) else {
        return false;
    };
    dynamic_strings(&elf).is_some_and(|names| names.split(|&b| b == 0).any(|name| name == b"__tsan_init"))
}

/// The string table of a 64-bit little-endian ELF file's dynamic symbols (the section its
/// `SHT_DYNSYM` section links to), if it has one inside the file.
fn dynamic_strings(elf: &[u8]) -> Option<&[u8]> {
    const SHT_DYNSYM: u32 = 11;
    let word = |at: usize, n: usize| -> Option<u64> {
        let bytes = elf.get(at..at.checked_add(n)?)?;
        Some(bytes.iter().rev().fold(0, |v, &b| v << 8 | u64::from(b)))
    };
    if elf.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    let (table, entry, count) = (word(0x28, 8)? as usize, word(0x3a, 2)? as usize, word(0x3c, 2)?);
    let header = |i: usize| table.checked_add(i.checked_mul(entry)?);
    let dynsym = (0..count as usize).find_map(|i| {
        let h = header(i)?;
        (word(h + 4, 4)? == u64::from(SHT_DYNSYM)).then_some(h)
    })?;
    let strings = header(word(dynsym + 0x28, 4)? as usize)?;
    let (offset, size) = (
        word(strings + 0x18, 8)? as usize,
        word(strings + 0x20, 8)? as usize,
    );
    elf.get(offset..offset.checked_add(size)?)
}

/// Loads the stand-in under each soname, once per process; an error says why it could not.
pub(crate) fn provide() -> Result<(), String> {
    static LOADED: OnceLock<Result<(), String>> = OnceLock::new();
    LOADED
        .get_or_init(|| {
            // Each copy's file stays open until both are loaded: a copy whose descriptor was
            // closed and reused would have the next one's path, and the loader would take the
            // second for the first.
            let files = STAND_INS
                .iter()
                .map(|&(soname, bytes)| load(soname, bytes))
                .collect::<Result<Vec<_>, _>>();
            files.map(drop)
        })
        .clone()
}

/// Loads one copy of the stand-in from memory (the file returned) and points its report at
/// [`access`].
fn load(soname: &str, bytes: &[u8]) -> Result<std::fs::File, String> {
    let failed = |what: &str| format!("the ThreadSanitizer stand-in {soname}: {what}");
    let name = CString::new(soname).expect("no NUL in a soname");
    // SAFETY: a NUL-terminated name and valid flags.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(failed(&std::io::Error::last_os_error().to_string()));
    }
    // SAFETY: `fd` was just created and is owned by nothing else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(bytes).map_err(|e| failed(&e.to_string()))?;
    let path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).expect("no NUL in a path");
    // SAFETY: a NUL-terminated path to a shared library this crate built; its initializers do
    // nothing.
    let handle = unsafe { dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if handle.is_null() {
        return Err(failed(&crate::library::last_error()));
    }
    // SAFETY: the handle is live and the name NUL-terminated.
    let slot = unsafe { dlsym(handle, c"simclr_tsan_access".as_ptr()) };
    if slot.is_null() {
        return Err(failed("it has no simclr_tsan_access"));
    }
    type Access = extern "C-unwind" fn(*const c_void, u64, c_int);
    // SAFETY: `slot` is the stand-in's `simclr_access_fn simclr_tsan_access`, a pointer-sized
    // global read atomically (acquire) by every report.
    unsafe {
        (*slot.cast::<std::sync::atomic::AtomicPtr<c_void>>()).store(
            access as Access as *mut c_void,
            std::sync::atomic::Ordering::Release,
        )
    };
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::dynamic_strings;

    #[test]
    fn no_elf_file_has_dynamic_strings() {
        assert_eq!(dynamic_strings(b""), None);
        assert_eq!(dynamic_strings(b"\x7fELF\x02\x01"), None);
        let mut header = vec![0u8; 64];
        header[..6].copy_from_slice(b"\x7fELF\x02\x01");
        // A section table past the end of the file.
        header[0x28] = 0xff;
        header[0x3a] = 64;
        header[0x3c] = 3;
        assert_eq!(dynamic_strings(&header), None);
    }
}
