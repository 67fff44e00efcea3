//! Loading a shared library and finding a symbol in it (`dlopen`, `dlsym`). On x86-64
//! Linux, loading also redirects the library's blocking calls (`crate::interpose`).

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::Path;
use std::sync::{RwLock, RwLockWriteGuard};

/// `dlopen` flags: resolve every symbol now.
pub(crate) const RTLD_NOW: c_int = 2;

#[link(name = "dl")]
extern "C" {
    pub(crate) fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    pub(crate) fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

/// Held (shared) by every load of a library, taken (exclusive) by a thread about to fork a
/// run's worker: the dynamic loader's own list lock, which `dlopen` takes, is not reset in a
/// forked child, so a fork during another thread's load would leave the worker unable to
/// load anything.
static LOADING: RwLock<()> = RwLock::new(());

/// Waits until no thread is loading a library and keeps new loads waiting until the guard is
/// dropped: hold it across `fork`.
pub(crate) fn no_loads() -> RwLockWriteGuard<'static, ()> {
    LOADING.write().unwrap_or_else(|e| e.into_inner())
}

/// A loaded shared library. It is never unloaded: a profiler's threads and callbacks may
/// outlive any handle to it, as they do in a real process.
#[derive(Debug)]
pub struct Library {
    handle: *mut c_void,
}

// SAFETY: a `dlopen` handle may be used from any thread.
unsafe impl Send for Library {}
// SAFETY: `dlsym` on a handle is thread-safe.
unsafe impl Sync for Library {}

/// The last `dlerror` message.
pub(crate) fn last_error() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call
    // on this thread; it is copied at once.
    unsafe {
        let e = dlerror();
        if e.is_null() {
            "unknown error".to_string()
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

impl Library {
    /// Loads the library at `path`, resolving every symbol now. On x86-64 Linux its thread,
    /// mutex, condition-variable, sleep and clock imports (and its C++ runtime's condition
    /// variables, sleeps and clocks) are redirected: on a simulated thread of a running
    /// process they are the process's threads, mutexes, condition variables and virtual
    /// time, elsewhere the C library's own; a library built with `-fsanitize=thread` gets a
    /// scheduling point at each of its atomic operations (see `docs/native-profilers.md`).
    pub fn open(path: &Path) -> Result<Library, String> {
        let text = path
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", path.display()))?;
        let c = CString::new(text).map_err(|_| format!("{text} contains a NUL byte"))?;
        let _loading = LOADING.read().unwrap_or_else(|e| e.into_inner());
        // A library built with `-fsanitize=thread` finds its runtime, a stand-in whose atomic
        // operations are scheduling points.
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        if crate::interpose::tsan::instrumented(path) {
            crate::interpose::tsan::provide()?;
        }
        // In a worker, the only OS thread is this one until the run starts its own: one
        // more after the load is a thread a static constructor started, before any import
        // could be redirected.
        #[cfg(target_os = "linux")]
        let watched = crate::isolation::is_worker();
        #[cfg(not(target_os = "linux"))]
        let watched = false;
        let before = if watched { os_threads() } else { 0 };
        // SAFETY: `c` is a NUL-terminated path; loading runs the library's initializers,
        // which is what hosting it means.
        let handle = unsafe { dlopen(c.as_ptr(), RTLD_NOW) };
        if handle.is_null() {
            return Err(last_error());
        }
        let started = if watched {
            os_threads().saturating_sub(before)
        } else {
            0
        };
        if started > 0 {
            let message = format!(
                "{text}'s static constructors started {started} OS thread(s) as it loaded, before any import could be redirected"
            );
            sim_clr::process::leave_simulation(sim_clr::process::Ending::EscapedThread, &message);
        }
        // Its blocking calls become scheduling points on simulated threads.
        #[cfg(all(target_os = "linux", target_arch = "x86_64"))]
        crate::interpose::redirect_imports(handle).map_err(|e| format!("{text}: {e}"))?;
        Ok(Library { handle })
    }

    /// The address of exported symbol `name`, if the library has it.
    pub fn symbol(&self, name: &str) -> Option<*mut c_void> {
        let c = CString::new(name).ok()?;
        // SAFETY: the handle is live (never closed) and `c` is NUL-terminated.
        let address = unsafe { dlsym(self.handle, c.as_ptr()) };
        (!address.is_null()).then_some(address)
    }
}

/// How many OS threads this process has (the entries of `/proc/self/task`; 0 if unknown).
fn os_threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count())
}
