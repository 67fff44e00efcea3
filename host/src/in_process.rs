//! A hosted library in a running process ([`sim_clr::process::Process`]), explored under
//! schedules like Rust profiler code.
//!
//! Every run loads a fresh copy of the library (a file copied under a new name, so the
//! dynamic linker maps it anew and its globals start clean, as in a new process) and attaches
//! its profiler to the run's runtime; `Initialize` runs as the run is set up, so the threads
//! it starts with `pthread_create` are the scenario's threads declared `start = "profiler"`
//! and start with the run. The runtime's callbacks reach the library on the simulated thread
//! they are raised on; its blocking calls are the process's (`crate::interpose`); its
//! `Shutdown` runs as the process exits, and not at all when the run ends otherwise (a
//! crash, a deadlock), as in a process that died. Copies are never unloaded (a process never
//! unloads its profiler): each run maps the library once more.

use crate::{HostError, Hosted};
use corprof::com::Guid;
use sim_clr::process::{fiber, Exports, Loaded, Loader, SimOs};
use sim_clr::scenario::ExportArg;
use sim_clr::Runtime;
use std::ffi::c_void;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A [`Loader`] that hosts the library at `path` (class `clsid`) afresh in every run. A copy
/// is loaded and its profiler object created (and released) here, so a library that cannot
/// be hosted is an error now, not in the middle of an exploration.
pub fn loader(path: &Path, clsid: Guid) -> Result<Loader, HostError> {
    from_fresh_copy(path, |copy| hostable(copy, clsid))?;
    Ok(per_run(path, clsid, true))
}

/// A [`Loader`] for runs isolated in workers ([`crate::isolation::Forked`], which the
/// process must be given with [`sim_clr::process::Process::isolate`]): each worker loads the
/// library itself, at its own path, the first copy that process maps. Whether it can be
/// hosted is found out now, in a worker of `isolation` too: this process never loads it.
#[cfg(target_os = "linux")]
pub fn isolated_loader(
    path: &Path,
    clsid: Guid,
    isolation: &crate::isolation::Forked,
) -> Result<Loader, HostError> {
    let failed = |message: String| HostError::Load {
        path: path.to_path_buf(),
        message,
    };
    match isolation.call(|| hostable(path, clsid).map_err(|e| e.to_string())) {
        Ok(result) => result.map_err(failed)?,
        Err(death) => {
            return Err(failed(format!(
                "loading it killed the process ({:?}): {}",
                death.how,
                death.stderr.trim()
            )))
        }
    }
    Ok(per_run(path, clsid, false))
}

/// Loads the library at `path` and creates its profiler object, then releases it: whether
/// the library can be hosted at all.
fn hostable(path: &Path, clsid: Guid) -> Result<(), HostError> {
    let (_library, profiler) = crate::create(path, clsid)?;
    // SAFETY: `create` returned a live COM object with the one reference released here.
    crate::callback::as_runtime_thread(|| unsafe { (crate::unknown(profiler).Release)(profiler) });
    Ok(())
}

/// The loader of every run: [`attach`] (on a fresh copy, with `copy`); a library that loaded
/// once and then fails is a bug of the host, not an outcome.
fn per_run(path: &Path, clsid: Guid, copy: bool) -> Loader {
    let path = path.to_path_buf();
    Arc::new(move |rt: &Arc<Runtime>| match attach(&path, clsid, rt, copy) {
        Ok(loaded) => loaded,
        Err(e) => panic!("hosting {} failed after it loaded once: {e}", path.display()),
    })
}

/// Loads the library (a fresh copy of it, with `copy`) and attaches its profiler to `rt`: the
/// run's callbacks, and its `Shutdown` as the exit hook. A profiler whose `Initialize` fails is
/// not attached, and the process runs without it, as the real runtime does.
fn attach(path: &Path, clsid: Guid, rt: &Arc<Runtime>, copy: bool) -> Result<Loaded, HostError> {
    let load = |at: &Path| Hosted::load(at, clsid, rt.clone());
    let hosted = match if copy {
        from_fresh_copy(path, load)
    } else {
        load(path)
    } {
        Ok(h) => h,
        Err(HostError::InitializeFailed(_)) => return Ok(Loaded::default()),
        Err(e) => return Err(e),
    };
    let profiler = rt.profiler();
    let hosted = Arc::new(Attached(Mutex::new(Some(hosted))));
    let exports = hosted.clone();
    Ok(Loaded {
        profiler,
        exports: Some(exports),
        at_exit: Some(Arc::new(move || {
            // Shutdown (and no Release, as at a real process's exit); what the profiler
            // still holds then it leaked.
            if let Some(mut hosted) = hosted.take() {
                hosted.detach();
                let held = hosted.held();
                drop(hosted);
                if !held.is_empty() && fiber::on_fiber() {
                    let message = format!("after Shutdown the profiler still holds {}", held.join(", "));
                    SimOs::new().leaked_reference(message);
                }
            }
        })),
        ..Loaded::default()
    })
}

/// The run's profiler until the process exits.
struct Attached(Mutex<Option<Hosted>>);

impl Attached {
    fn take(&self) -> Option<Hosted> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The address of export `name`, while the profiler is attached.
    fn symbol(&self, name: &str) -> Option<*mut c_void> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()?
            .symbol(name)
    }
}

/// Managed code's P/Invokes into the library (`call_export`).
impl Exports for Attached {
    fn has(&self, name: &str) -> bool {
        self.symbol(name).is_some()
    }

    fn call(&self, name: &str, args: &[ExportArg]) -> u64 {
        // Looked up first, the lock released: the export may block, and another thread may
        // call one meanwhile.
        match self.symbol(name) {
            // SAFETY: an export of the loaded library; the file gives its arguments.
            Some(f) => unsafe { crate::drive::call_export(f, args) },
            None => 0,
        }
    }
}

impl Drop for Attached {
    /// A run that ended before the process exited (a crash, a deadlock) never shuts the
    /// profiler down, as a dead process would not.
    fn drop(&mut self) {
        if let Some(hosted) = self.take() {
            hosted.abandon();
        }
    }
}

/// `load` (which loads the library) on a fresh copy of the library at `path`, whose name is
/// removed once loaded: the mapping stays.
fn from_fresh_copy<T>(path: &Path, load: impl FnOnce(&Path) -> Result<T, HostError>) -> Result<T, HostError> {
    let copy = fresh_copy(path)?;
    let loaded = load(&copy);
    let _ = std::fs::remove_file(&copy);
    loaded
}

/// Copies the library to a new name in the temporary directory.
fn fresh_copy(path: &Path) -> Result<PathBuf, HostError> {
    static COPIES: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = COPIES.fetch_add(1, Ordering::Relaxed);
    let copy = std::env::temp_dir().join(format!("simclr-{}-{n}-{name}", std::process::id()));
    std::fs::copy(path, &copy).map_err(|e| HostError::Load {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(copy)
}
