//! The C ABI declared by `include/simclr.h`: a simulated runtime built from a scenario, its
//! `ICorProfilerInfo*`, a profiler object attached to it, code run as one of its threads,
//! callbacks raised, and scenario reports (runs and schedule explorations) as JSON.
//!
//! Every function checks its pointers, never unwinds into C (a Rust panic becomes an error
//! result), and returns strings the caller frees with `simclr_string_free`.

use crate::out::hr;
use crate::{as_runtime_thread, HostError, Hosted};
use corprof::com::{Guid, HRESULT};
use corprof::HResult;
use sim_clr::process::Process;
use sim_clr::scenario::Scenario;
use sim_clr::{CallContext, CallbackKind};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

/// `simclr_runtime`: a runtime with its COM face (opaque to C).
pub struct SimclrRuntime {
    hosted: Hosted,
}

/// A C string argument as UTF-8, or an error naming the argument.
///
/// # Safety
/// `s` is NULL or NUL-terminated.
unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<&'a str, String> {
    if s.is_null() {
        return Err(format!("{what} is NULL"));
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    unsafe { CStr::from_ptr(s) }
        .to_str()
        .map_err(|_| format!("{what} is not UTF-8"))
}

/// A Rust string handed to C (freed with `simclr_string_free`).
fn c_string(s: String) -> *mut c_char {
    // Interior NULs cannot come from our own messages or JSON; replace defensively.
    CString::new(s.replace('\0', " ")).map_or(std::ptr::null_mut(), CString::into_raw)
}

/// Runs `f`, turning an error or a panic into NULL with the message in `*error`.
///
/// # Safety
/// `error` is NULL or valid for one write.
unsafe fn or_error<T>(error: *mut *mut c_char, f: impl FnOnce() -> Result<*mut T, String>) -> *mut T {
    let result =
        catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Err("internal error (a panic)".to_string()));
    match result {
        Ok(p) => p,
        Err(message) => {
            if !error.is_null() {
                // SAFETY: per the contract.
                unsafe { error.write(c_string(message)) };
            }
            std::ptr::null_mut()
        }
    }
}

fn runtime_of(scenario: Scenario) -> *mut SimclrRuntime {
    Box::into_raw(Box::new(SimclrRuntime {
        hosted: Hosted::new(Arc::new(scenario.runtime())),
    }))
}

/// `simclr_runtime_from_file`.
///
/// # Safety
/// `path` is NUL-terminated; `error` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn simclr_runtime_from_file(
    path: *const c_char,
    error: *mut *mut c_char,
) -> *mut SimclrRuntime {
    // SAFETY: forwarded contract.
    unsafe {
        or_error(error, || {
            let scenario = Scenario::load(Path::new(text(path, "path")?)).map_err(|e| e.to_string())?;
            Ok(runtime_of(scenario))
        })
    }
}

/// `simclr_runtime_from_string`.
///
/// # Safety
/// `name` and `toml` are NUL-terminated; `error` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn simclr_runtime_from_string(
    name: *const c_char,
    toml: *const c_char,
    error: *mut *mut c_char,
) -> *mut SimclrRuntime {
    // SAFETY: forwarded contract.
    unsafe {
        or_error(error, || {
            let scenario =
                Scenario::parse(text(name, "name")?, text(toml, "toml")?).map_err(|e| e.to_string())?;
            Ok(runtime_of(scenario))
        })
    }
}

/// `simclr_runtime_free`.
///
/// # Safety
/// `runtime` is NULL or came from a `simclr_runtime_from_*` and is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn simclr_runtime_free(runtime: *mut SimclrRuntime) {
    if !runtime.is_null() {
        // SAFETY: per the contract; dropping detaches the profiler (Shutdown, Release).
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(runtime) })));
    }
}

/// `simclr_profiler_info`.
///
/// # Safety
/// `runtime` is NULL or live.
#[no_mangle]
pub unsafe extern "C" fn simclr_profiler_info(runtime: *const SimclrRuntime) -> *mut c_void {
    // SAFETY: per the contract.
    match unsafe { runtime.as_ref() } {
        Some(r) => r.hosted.info(),
        None => std::ptr::null_mut(),
    }
}

/// `simclr_attach`.
///
/// # Safety
/// `runtime` is NULL or live; `callback` is NULL or a live `ICorProfilerCallback2*`.
#[no_mangle]
pub unsafe extern "C" fn simclr_attach(runtime: *mut SimclrRuntime, callback: *mut c_void) -> HRESULT {
    // SAFETY: per the contract.
    let Some(r) = (unsafe { runtime.as_mut() }) else {
        return hr(HResult::E_POINTER);
    };
    if callback.is_null() {
        return hr(HResult::E_POINTER);
    }
    // SAFETY: `callback` is a live ICorProfilerCallback2 per the contract.
    let attached = catch_unwind(AssertUnwindSafe(|| unsafe { r.hosted.attach(callback) }));
    match attached {
        Ok(Ok(())) => hr(HResult::S_OK),
        Ok(Err(HostError::InitializeFailed(e))) => hr(e),
        Ok(Err(_)) | Err(_) => hr(HResult::E_UNEXPECTED),
    }
}

/// The calling context a name gives: `thread`, `pinvoke` or a callback's name.
fn context_named(name: &str) -> Option<CallContext> {
    match name {
        "thread" => Some(CallContext::Thread),
        "pinvoke" => Some(CallContext::PInvoke),
        other => CallbackKind::parse(other).map(CallContext::Callback),
    }
}

/// `simclr_on_thread`.
///
/// # Safety
/// `runtime` is NULL or live; the strings are NUL-terminated; `f` is a valid function.
#[no_mangle]
pub unsafe extern "C" fn simclr_on_thread(
    runtime: *const SimclrRuntime,
    thread: *const c_char,
    context: *const c_char,
    f: Option<unsafe extern "C" fn(*mut c_void)>,
    data: *mut c_void,
) -> c_int {
    // SAFETY: per the contract.
    let (Some(r), Some(f)) = (unsafe { runtime.as_ref() }, f) else {
        return -1;
    };
    // SAFETY: per the contract.
    let (Ok(thread), Ok(context)) = (unsafe { text(thread, "thread") }, unsafe {
        text(context, "context")
    }) else {
        return -1;
    };
    let Some(context) = context_named(context) else {
        return -1;
    };
    let ran = catch_unwind(AssertUnwindSafe(|| {
        r.hosted
            .runtime()
            // SAFETY: the caller's function, called with its data.
            .on_thread(thread, context, |_| as_runtime_thread(|| unsafe { f(data) }))
            .is_ok()
    }));
    if matches!(ran, Ok(true)) {
        0
    } else {
        -1
    }
}

/// `simclr_raise`.
///
/// # Safety
/// `runtime` is NULL or live; the strings are NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn simclr_raise(
    runtime: *const SimclrRuntime,
    thread: *const c_char,
    callback: *const c_char,
) -> HRESULT {
    // SAFETY: per the contract.
    let Some(r) = (unsafe { runtime.as_ref() }) else {
        return hr(HResult::E_POINTER);
    };
    // SAFETY: per the contract.
    let (Ok(thread), Ok(callback)) = (unsafe { text(thread, "thread") }, unsafe {
        text(callback, "callback")
    }) else {
        return hr(HResult::E_INVALIDARG);
    };
    let Some(kind) = CallbackKind::parse(callback) else {
        return hr(HResult::E_INVALIDARG);
    };
    match catch_unwind(AssertUnwindSafe(|| r.hosted.runtime().raise(thread, kind))) {
        Ok(Some(result)) => hr(result),
        Ok(None) => hr(HResult::S_FALSE),
        Err(_) => hr(HResult::E_UNEXPECTED),
    }
}

/// `simclr_run_scenario`.
///
/// # Safety
/// `path` is NUL-terminated; `error` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn simclr_run_scenario(path: *const c_char, error: *mut *mut c_char) -> *mut c_char {
    // SAFETY: forwarded contract.
    unsafe {
        or_error(error, || {
            let scenario = Scenario::load(Path::new(text(path, "path")?)).map_err(|e| e.to_string())?;
            let json = serde_json::to_string_pretty(&scenario.run()).map_err(|e| e.to_string())?;
            Ok(c_string(json))
        })
    }
}

/// `simclr_explore_scenario`.
///
/// # Safety
/// `path` is NUL-terminated; `error` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn simclr_explore_scenario(
    path: *const c_char,
    schedules: u64,
    seed: u64,
    error: *mut *mut c_char,
) -> *mut c_char {
    // SAFETY: forwarded contract.
    unsafe { or_error(error, || explore(text(path, "path")?, None, schedules, seed)) }
}

/// A library the C ABI hosts in every run of an exploration: its path and class.
struct HostedLibrary<'a> {
    library: &'a Path,
    clsid: Guid,
    /// The CLSID as the caller wrote it, for the replay command.
    written: &'a str,
}

/// Explores the process of scenario file `path`, with `hosted`'s library in every run (on
/// Linux each run in a worker process of its own, as `simclr explore --profiler` does, so a
/// crash or a hang of the library is an outcome of its run and never ends the caller): the
/// report as JSON, each failure with the command that replays it.
fn explore(
    path: &str,
    hosted: Option<HostedLibrary<'_>>,
    schedules: u64,
    seed: u64,
) -> Result<*mut c_char, String> {
    let scenario = Scenario::load(Path::new(path)).map_err(|e| e.to_string())?;
    let strategy = scenario.process.explore.strategy;
    let mut process = Process::new(scenario);
    let mut replay = format!("simclr replay {path}");
    if let Some(h) = &hosted {
        host_library(&mut process, h)?;
        replay = format!(
            "{replay} --profiler {} --clsid {}",
            h.library.display(),
            h.written
        );
    }
    let mut report = process.explore(strategy, schedules, seed, |_, _| {});
    report.name_replays(|schedule| format!("{replay} --schedule {schedule}"));
    let json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    Ok(c_string(json))
}

/// Loads `hosted` into every run of `process`: in a worker per run on Linux.
fn host_library(process: &mut Process, hosted: &HostedLibrary<'_>) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        let forked = crate::isolation::Forked::new(hosted.library, crate::isolation::RUN_TIMEOUT)?;
        let loader =
            crate::isolated_loader(hosted.library, hosted.clsid, &forked).map_err(|e| e.to_string())?;
        process.isolate(Arc::new(forked));
        process.load(loader);
    }
    #[cfg(not(target_os = "linux"))]
    process.load(crate::loader(hosted.library, hosted.clsid).map_err(|e| e.to_string())?);
    Ok(())
}

/// `simclr_explore_profiler`.
///
/// # Safety
/// `path`, `library` and `clsid` are NUL-terminated; `error` is NULL or valid for one write.
#[no_mangle]
pub unsafe extern "C" fn simclr_explore_profiler(
    path: *const c_char,
    library: *const c_char,
    clsid: *const c_char,
    schedules: u64,
    seed: u64,
    error: *mut *mut c_char,
) -> *mut c_char {
    // SAFETY: forwarded contract.
    unsafe {
        or_error(error, || {
            let written = text(clsid, "clsid")?;
            let clsid = Guid::parse(written).ok_or_else(|| format!("clsid: `{written}` is not a GUID"))?;
            let hosted = HostedLibrary {
                library: Path::new(text(library, "library")?),
                clsid,
                written,
            };
            explore(text(path, "path")?, Some(hosted), schedules, seed)
        })
    }
}

/// `simclr_string_free`.
///
/// # Safety
/// `s` is NULL or a string this library returned, not freed before.
#[no_mangle]
pub unsafe extern "C" fn simclr_string_free(s: *mut c_char) {
    if !s.is_null() {
        // SAFETY: per the contract, it came from CString::into_raw.
        drop(unsafe { CString::from_raw(s) });
    }
}
