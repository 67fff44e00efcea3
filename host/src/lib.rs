//! Hosting a native CoreCLR profiler library — C, C++, or anything with a C ABI — in the
//! simulated runtime, through the same COM interfaces CoreCLR uses.
//!
//! [`Hosted::load`] does what the runtime does at startup with `CORECLR_PROFILER_PATH`:
//! it loads the library, calls `DllGetClassObject(clsid, IID_IClassFactory)`, creates the
//! profiler with `IClassFactory::CreateInstance(ICorProfilerCallback2)` and calls its
//! `Initialize` with an `IUnknown*` that answers `ICorProfilerInfo` … `ICorProfilerInfo10`
//! from a [`sim_clr::Runtime`]. From then on the runtime's callbacks (threads, module loads,
//! allocations, GCs, suspensions, exceptions) go through the library's vtable, and the
//! library's calls are answered by the simulated runtime.
//!
//! Calls the library makes on the OS thread a callback runs on are that simulated thread's.
//! [`loader`] hosts the library in every run of a running process, where the threads it
//! creates are the process's simulated threads and its blocking calls are scheduling points
//! ([`Library`]); elsewhere calls from threads it starts itself are an unknown native
//! thread's, as a sampler thread is to the real runtime. See `docs/native-profilers.md` for
//! the whole contract.

#![cfg(unix)]

mod callback;
pub mod capi;
mod com_object;
mod drive;
mod import;
mod in_process;
mod info;
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod interpose;
#[cfg(target_os = "linux")]
pub mod isolation;
mod library;
mod os_object;
mod out;
mod thread_enum;

pub use callback::as_runtime_thread;
pub use drive::Ending;
#[cfg(target_os = "linux")]
pub use in_process::isolated_loader;
pub use in_process::loader;
pub use library::Library;
pub use os_object::IID_ISIMCLR_OS;

use callback::Callbacks;
use corprof::com::*;
use corprof::HResult;
use info::InfoObject;
use sim_clr::runtime::RuntimeVersion;
use sim_clr::Runtime;
use std::ffi::c_void;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a library could not be hosted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// The library could not be loaded.
    Load {
        /// The library.
        path: PathBuf,
        /// The loader's message.
        message: String,
    },
    /// The library exports no `DllGetClassObject`.
    NoEntryPoint(PathBuf),
    /// `DllGetClassObject` refused the CLSID (usually `CLASS_E_CLASSNOTAVAILABLE`).
    ClassRefused(HResult),
    /// The class factory could not create an `ICorProfilerCallback2` object.
    CreateFailed(HResult),
    /// The profiler's `Initialize` failed: the runtime runs without it.
    InitializeFailed(HResult),
    /// A profiler is already attached to this runtime.
    AlreadyAttached,
    /// The runtime's profiler is one attached after startup (`[runtime] attached`); hosting
    /// loads libraries only as the runtime does at startup, through `Initialize`.
    AttachAfterStartup,
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::Load { path, message } => write!(f, "cannot load {}: {message}", path.display()),
            HostError::NoEntryPoint(path) => write!(f, "{} exports no DllGetClassObject", path.display()),
            HostError::ClassRefused(hr) => write!(f, "DllGetClassObject refused the CLSID: {hr}"),
            HostError::CreateFailed(hr) => {
                write!(
                    f,
                    "IClassFactory::CreateInstance(ICorProfilerCallback2) failed: {hr}"
                )
            }
            HostError::InitializeFailed(hr) => write!(f, "the profiler's Initialize failed: {hr}"),
            HostError::AlreadyAttached => write!(f, "a profiler is already attached to this runtime"),
            HostError::AttachAfterStartup => write!(
                f,
                "the scenario's profiler attached after startup (`attached = true`); a hosted library is loaded at startup only"
            ),
        }
    }
}

impl std::error::Error for HostError {}

/// `DllGetClassObject(rclsid, riid, ppv)`.
type DllGetClassObjectFn =
    unsafe extern "system-unwind" fn(*const Guid, *const Guid, *mut *mut c_void) -> HRESULT;

/// A simulated runtime's COM face — its `ICorProfilerInfo` object — with the native profiler
/// attached to it, if any, and the library it came from, if it was loaded.
pub struct Hosted {
    rt: Arc<Runtime>,
    info: *mut InfoObject,
    /// The attached profiler's `ICorProfilerCallback2*`, one reference held, and whether its
    /// `Initialize` succeeded (so `Shutdown` is owed).
    profiler: Option<(*mut c_void, bool)>,
    library: Option<Library>,
}

// SAFETY: the raw pointers are COM objects, which the profiling API lets any thread call.
unsafe impl Send for Hosted {}
// SAFETY: as above; the host's own state is behind locks.
unsafe impl Sync for Hosted {}

/// The `IUnknown` slots of COM object `object`.
///
/// # Safety
/// `object` is a live COM object.
unsafe fn unknown(object: *mut c_void) -> &'static IUnknownVtbl {
    // SAFETY: a COM object starts with its vtable pointer, whose first slots are IUnknown's.
    unsafe { &**(object as *const *const IUnknownVtbl) }
}

/// Loads the library at `path` and creates its profiler object for `clsid`: `dlopen`,
/// `DllGetClassObject(clsid, IID_IClassFactory)`, `CreateInstance(ICorProfilerCallback2)`,
/// the factory released. The object comes with one reference.
fn create(path: &Path, clsid: Guid) -> Result<(Library, *mut c_void), HostError> {
    let library = Library::open(path).map_err(|message| HostError::Load {
        path: path.to_path_buf(),
        message,
    })?;
    let entry = library
        .symbol("DllGetClassObject")
        .ok_or_else(|| HostError::NoEntryPoint(path.to_path_buf()))?;
    // SAFETY: the exported DllGetClassObject has this signature (the COM contract).
    let get_class_object: DllGetClassObjectFn = unsafe { std::mem::transmute(entry) };
    let mut factory: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid GUIDs and out-pointer.
    let hr =
        callback::as_runtime_thread(|| unsafe { get_class_object(&clsid, &IID_ICLASSFACTORY, &mut factory) });
    if hr != 0 || factory.is_null() {
        return Err(HostError::ClassRefused(HResult(hr as u32)));
    }
    let mut profiler: *mut c_void = std::ptr::null_mut();
    // SAFETY: `factory` is the live IClassFactory the library returned.
    let hr = callback::as_runtime_thread(|| unsafe {
        let vtbl = &**(factory as *const *const IClassFactoryVtbl);
        let hr = (vtbl.CreateInstance)(
            factory,
            std::ptr::null_mut(),
            &IID_ICORPROFILERCALLBACK2,
            &mut profiler,
        );
        (vtbl.base.Release)(factory);
        hr
    });
    if hr != 0 || profiler.is_null() {
        return Err(HostError::CreateFailed(HResult(hr as u32)));
    }
    Ok((library, profiler))
}

impl Hosted {
    /// `rt`'s `ICorProfilerInfo` object, with no profiler attached yet.
    pub fn new(rt: Arc<Runtime>) -> Hosted {
        Hosted {
            info: Box::into_raw(InfoObject::new(rt.clone())),
            rt,
            profiler: None,
            library: None,
        }
    }

    /// Loads the profiler library at `path`, creates its profiler object for `clsid` and
    /// attaches it to `rt` (see [`Hosted::attach`]).
    pub fn load(path: &Path, clsid: Guid, rt: Arc<Runtime>) -> Result<Hosted, HostError> {
        if rt.attached() {
            return Err(HostError::AttachAfterStartup);
        }
        let (library, profiler) = create(path, clsid)?;
        let mut hosted = Hosted::new(rt);
        hosted.library = Some(library);
        // SAFETY: `create` returned a live ICorProfilerCallback2 with one reference, which
        // `attach_owned` takes over.
        unsafe { hosted.attach_owned(profiler) }?;
        Ok(hosted)
    }

    /// Attaches profiler object `callback` (an `ICorProfilerCallback2*`, one reference taken)
    /// as the runtime does at startup: `QueryInterface(ICorProfilerCallback3)` to learn
    /// whether it can detach, `Initialize` with this runtime's `ICorProfilerInfo` object (the
    /// event mask's immutable flags may be set during it), then `ModuleLoadFinished` for
    /// every managed module and `ThreadCreated` / `ThreadAssignedToOSThread` for every live
    /// managed thread, as far as the event mask asks. When `Initialize` fails the profiler
    /// is released, without `Shutdown`.
    ///
    /// # Safety
    /// `callback` is a live COM object implementing `ICorProfilerCallback2`.
    pub unsafe fn attach(&mut self, callback: *mut c_void) -> Result<(), HostError> {
        if self.profiler.is_some() {
            return Err(HostError::AlreadyAttached);
        }
        if self.rt.attached() {
            return Err(HostError::AttachAfterStartup);
        }

        // SAFETY: per the contract; the reference is the host's until `detach`.
        unsafe {
            (unknown(callback).AddRef)(callback);
            self.attach_owned(callback)
        }
    }

    /// [`Hosted::attach`] of an object whose reference the host already holds, when no
    /// profiler is attached yet.
    ///
    /// # Safety
    /// As [`Hosted::attach`].
    unsafe fn attach_owned(&mut self, profiler: *mut c_void) -> Result<(), HostError> {
        let mut callback3: *mut c_void = std::ptr::null_mut();
        // SAFETY: `profiler` is live; a successful QueryInterface is balanced by Release.
        let implements3 = callback::as_runtime_thread(|| unsafe {
            let hr = (unknown(profiler).QueryInterface)(profiler, &IID_ICORPROFILERCALLBACK3, &mut callback3);
            if hr == 0 && !callback3.is_null() {
                (unknown(callback3).Release)(callback3);
                true
            } else {
                false
            }
        });
        self.profiler = Some((profiler, false));
        // SAFETY: `profiler` implements ICorProfilerCallback2 and lives until `detach`, which
        // clears the runtime's profiler before releasing it.
        self.rt
            .set_profiler(Arc::new(unsafe { Callbacks::new(profiler, implements3) }));
        let info = self.info;
        // SAFETY: `info` is live while `self` is; the vtable slot has this signature.
        let hr = self.rt.initializing(|| {
            callback::as_runtime_thread(|| unsafe {
                let vtbl = &**(profiler as *const *const ICorProfilerCallback2Vtbl);
                (vtbl.base.Initialize)(profiler, (*info).hand_out())
            })
        });
        if hr != 0 {
            self.detach();
            return Err(HostError::InitializeFailed(HResult(hr as u32)));
        }
        self.profiler = Some((profiler, true));
        self.rt.announce_modules();
        self.rt.announce_threads();
        Ok(())
    }

    /// Detaches the profiler as the runtime does at exit: no callback from here on, then
    /// `Shutdown` if it initialized, then, answering as CoreCLR 3.1, one `Release`; as .NET
    /// 8 (and 9 and 10, not observed), none, so the profiler object's destructor never runs. The lane's shutdown probe
    /// (`conformance/probes/shutdown.c`) saw exactly that on linux-x64: 3.1.23 destroys its
    /// `EEToProfInterfaceImpl` before the process exits, which releases the callback
    /// interfaces it holds (v3.1.23 `EEToProfInterfaceImpl::~EEToProfInterfaceImpl`, when
    /// `!IsAtProcessExit()`), and 8.0.4 releases nothing. (The host holds one reference, to
    /// `ICorProfilerCallback2`; 3.1 would release an `ICorProfilerCallback3` it holds too,
    /// which the host released right after asking for it.) A profiler whose `Initialize`
    /// failed is released, as the runtime does when loading it fails.
    pub fn detach(&mut self) {
        let Some((profiler, initialized)) = self.profiler.take() else {
            return;
        };
        self.rt.clear_profiler();
        let released = !initialized || self.rt.version() == RuntimeVersion::Core31;
        // SAFETY: `profiler` is the live ICorProfilerCallback2 the host holds a reference to.
        callback::as_runtime_thread(|| unsafe {
            let vtbl = &**(profiler as *const *const ICorProfilerCallback2Vtbl);
            if initialized {
                (vtbl.base.Shutdown)(profiler);
            }
            if released {
                (vtbl.base.base.Release)(profiler);
            }
        });
    }

    /// Ends the profiler as a process that died ends it: no callback from here on, no
    /// `Shutdown` and no `Release` (the process runs nothing more).
    pub fn abandon(mut self) {
        if self.profiler.take().is_some() {
            self.rt.clear_profiler();
        }
    }

    /// The runtime the library is attached to.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.rt
    }

    /// The `ICorProfilerInfo*` the library was given (an `IUnknown*` answering
    /// `ICorProfilerInfo` … `ICorProfilerInfo10`), with one more reference counted.
    pub fn info(&self) -> *mut c_void {
        // SAFETY: `info` is live while `self` is.
        unsafe { (*self.info).hand_out() }
    }

    /// The address of exported symbol `name` (a P/Invoke target, say), if a library was
    /// loaded and has it.
    pub fn symbol(&self, name: &str) -> Option<*mut c_void> {
        self.library.as_ref()?.symbol(name)
    }

    /// Sets what happens when one of the library's calls leaves the simulated process dead or
    /// hung (a NULL snapshot callback, a bogus `ThreadID`, …): the real call would never
    /// return. A command-line host ends its own process here, as the real one would end;
    /// without a hook the call returns and the process stays terminated (every later walk
    /// fails).
    pub fn on_fatal(&self, hook: impl Fn(&sim_clr::trace::Fault) + Send + Sync + 'static) {
        // SAFETY: `info` is live while `self` is.
        *unsafe { &*self.info }
            .on_fatal
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Box::new(hook));
    }

    /// The COM objects the runtime handed out that the library still holds references to
    /// (thread enumerators, metadata objects), described; its `ICorProfilerInfo` is not
    /// counted.
    pub fn held(&self) -> Vec<String> {
        // SAFETY: `info` is live while `self` is.
        unsafe { &*self.info }.held()
    }

    /// Misuse of the COM surface the host survived, in order (a `Release` without a matching
    /// reference, …).
    pub fn misuse(&self) -> Vec<String> {
        // SAFETY: `info` is live while `self` is.
        unsafe { &*self.info }
            .misuse
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Hosted {
    /// Detaches the profiler ([`Hosted::detach`]) and frees the runtime's COM object: after
    /// `Shutdown` the library must not use it any more.
    fn drop(&mut self) {
        self.detach();
        // SAFETY: created by Box::into_raw in `new`.
        drop(unsafe { Box::from_raw(self.info) });
    }
}
