//! The `ICorProfilerInfo` … `ICorProfilerInfo10` COM object backed by the simulated runtime:
//! what the hosted library's `Initialize` receives.
//!
//! Every method the runtime models answers through [`corprof::ProfilerInfo`]; the others
//! return `E_NOTIMPL`. Out-parameters follow the runtime: most are optional and skipped when
//! NULL; `GetEventMask`, `GetEventMask2`, `GetModuleMetaData` and `EnumThreads` refuse a
//! NULL one with `E_INVALIDARG`, `QueryInterface` with `E_POINTER`. A call from an OS thread
//! the runtime is not running library code on is made as an unknown native thread (see
//! [`crate::callback`]).
//!
//! The object belongs to the host: `AddRef`/`Release` count but never free it, and a
//! `Release` past the count is noted as misuse.

use crate::callback::on_runtime_thread;
use crate::com_object::{query_interface as query_interface_of, release_owned};
use crate::import::ImportObject;
use crate::out::{hr, put, put_name};
use crate::thread_enum;
use corprof::com::*;
use corprof::{
    AppDomainId, AssemblyId, ClassId, CodeInfo, Context, FrameInfo, FunctionId, HResult, MetaDataImport,
    ModuleId, ProfilerInfo, ReJitId, SnapshotFrame, ThreadId,
};
use sim_clr::process::unobserved;
use sim_clr::runtime::RuntimeVersion;
use sim_clr::trace::Fault;
use sim_clr::Runtime;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// The runtime's `ICorProfilerInfo10` object.
#[repr(C)]
pub struct InfoObject {
    vtbl: &'static ICorProfilerInfo15Vtbl,
    refs: AtomicU32,
    rt: Arc<Runtime>,
    /// One `IMetaDataImport` object per module asked for, alive as long as this object. Boxed:
    /// their addresses are handed out, so they must not move when the list grows.
    #[allow(clippy::vec_box)]
    imports: Mutex<Vec<Box<ImportObject>>>,
    /// Misuse of the COM surface the host survived.
    pub misuse: Arc<Mutex<Vec<String>>>,
    /// How many thread enumerators it handed out are not freed yet.
    enumerators: Arc<AtomicU32>,
    /// Called when a call leaves the simulated process dead or hung.
    pub on_fatal: Mutex<Option<FatalHook>>,
}

/// What the host does when a call of the library kills the simulated process.
pub type FatalHook = Box<dyn Fn(&Fault) + Send + Sync>;

impl InfoObject {
    /// A new object over `rt`.
    pub fn new(rt: Arc<Runtime>) -> Box<InfoObject> {
        Box::new(InfoObject {
            vtbl: vtable(),
            refs: AtomicU32::new(0),
            rt,
            imports: Mutex::new(Vec::new()),
            misuse: Arc::default(),
            enumerators: Arc::default(),
            on_fatal: Mutex::new(None),
        })
    }

    /// The objects it handed out that the profiler still holds references to (thread
    /// enumerators, metadata objects), described; the object itself is not counted (a
    /// profiler keeps its `ICorProfilerInfo` to the end).
    pub fn held(&self) -> Vec<String> {
        let mut held = Vec::new();
        match self.enumerators.load(Ordering::SeqCst) {
            0 => {}
            n => held.push(format!("{n} ICorProfilerThreadEnum")),
        }
        let imports = self.imports.lock().unwrap_or_else(|e| e.into_inner());
        held.extend(imports.iter().filter_map(|o| o.held()));
        held
    }

    /// The object as an `IUnknown*`, with one more reference counted.
    pub fn hand_out(&self) -> *mut c_void {
        self.refs.fetch_add(1, Ordering::SeqCst);
        self as *const InfoObject as *mut c_void
    }

    /// The metadata object for `import`, created on first use, handed out for `riid` through
    /// `out`.
    ///
    /// # Safety
    /// `riid` is NULL or valid; `out` is valid.
    unsafe fn import_object(
        &self,
        import: Arc<dyn MetaDataImport>,
        riid: *const Guid,
        out: *mut *mut c_void,
    ) -> HRESULT {
        let mut imports = self.imports.lock().unwrap_or_else(|e| e.into_inner());
        let at = match imports.iter().position(|o| o.serves(&import)) {
            Some(at) => at,
            None => {
                // The module's assembly, read from the runtime's metadata (no API call: none
                // may be made while this lock is held, as each is a scheduling point).
                let assembly = self.rt.with_code(|code| {
                    let modules = code.metadata().modules();
                    modules
                        .iter()
                        .find(|m| std::ptr::addr_eq(Arc::as_ptr(&m.import), Arc::as_ptr(&import)))
                        .map(|m| m.assembly_name().to_string())
                        .unwrap_or_default()
                });
                imports.push(ImportObject::new(import, assembly, self.misuse.clone()));
                imports.len() - 1
            }
        };
        // SAFETY: per the contract.
        unsafe { crate::import::query(&imports[at], riid, out) }
    }
}

/// `S_OK` at the ABI.
const OK: HRESULT = 0;

/// Asks `ask` of the object behind `this` (see [`with`]); on success `write` puts the answer
/// in the out-parameters and gives the HRESULT, on failure the failure is returned.
///
/// # Safety
/// As [`with`].
unsafe fn answer<T>(
    this: *mut c_void,
    ask: impl FnOnce(&InfoObject) -> Result<T, HResult>,
    write: impl FnOnce(&InfoObject, T) -> HRESULT,
) -> HRESULT {
    // SAFETY: forwarded contract.
    unsafe {
        with(this, |o| match ask(o) {
            Ok(value) => write(o, value),
            Err(e) => hr(e),
        })
    }
}

/// Runs `f` on the object behind `this`, as the runtime's current caller when the OS thread
/// runs library code for the runtime or runs a simulated thread of a running process (whose
/// engine made that thread the current caller), else as an unknown native thread.
///
/// # Safety
/// `this` is a pointer [`InfoObject::hand_out`] returned, and the host is alive.
unsafe fn with<R>(this: *mut c_void, f: impl FnOnce(&InfoObject) -> R) -> R {
    // SAFETY: per the contract.
    let o = unsafe { &*(this as *const InfoObject) };
    let result = if on_runtime_thread() || sim_clr::process::fiber::on_fiber() {
        f(o)
    } else {
        o.rt.on_unknown_thread(|_| f(o))
    };
    if let Some(fault) = o.rt.fatal_fault() {
        if let Some(hook) = o.on_fatal.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            hook(&fault);
        }
    }
    result
}

/// The interfaces the object answers to, in order: `IUnknown`, then `ICorProfilerInfo` up to
/// `ICorProfilerInfo15`; each runtime version offers a prefix ([`offered`]).
const IIDS: [Guid; 16] = [
    IID_IUNKNOWN,
    IID_ICORPROFILERINFO,
    IID_ICORPROFILERINFO2,
    IID_ICORPROFILERINFO3,
    IID_ICORPROFILERINFO4,
    IID_ICORPROFILERINFO5,
    IID_ICORPROFILERINFO6,
    IID_ICORPROFILERINFO7,
    IID_ICORPROFILERINFO8,
    IID_ICORPROFILERINFO9,
    IID_ICORPROFILERINFO10,
    IID_ICORPROFILERINFO11,
    IID_ICORPROFILERINFO12,
    IID_ICORPROFILERINFO13,
    IID_ICORPROFILERINFO14,
    IID_ICORPROFILERINFO15,
];

/// The interfaces of [`IIDS`] a runtime version offers, as the real runtimes answer a
/// profiler's `QueryInterface` in `Initialize` (the lane's interfaces probe,
/// `conformance/probes/interfaces.c`): CoreCLR 3.1.23 up to `ICorProfilerInfo11`, .NET 8.0.4
/// up to `ICorProfilerInfo14`. .NET 9 and 10 up to `ICorProfilerInfo15` (not observed: the
/// `dotnet/runtime` `src/coreclr/inc/corprof.idl` of the .NET 9 code line ends with it, added
/// by pull request #103735 for .NET 9; no later one was found). The vtable has every slot
/// through `ICorProfilerInfo15`.
fn offered(version: RuntimeVersion) -> &'static [Guid] {
    match version {
        RuntimeVersion::Core31 => &IIDS[..12],
        RuntimeVersion::Net8 => &IIDS[..15],
        RuntimeVersion::Net9 | RuntimeVersion::Net10 => &IIDS,
    }
}

unsafe extern "system-unwind" fn query_interface(
    this: *mut c_void,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    // SAFETY: COM passes a valid (or NULL) IID and out-pointer, and a live `this`.
    unsafe {
        if !riid.is_null() && *riid == crate::os_object::IID_ISIMCLR_OS {
            return query_interface_of(
                riid,
                out,
                &[crate::os_object::IID_ISIMCLR_OS],
                crate::os_object::hand_out,
            );
        }
        let o = &*(this as *const InfoObject);
        query_interface_of(riid, out, offered(o.rt.version()), || o.hand_out())
    }
}

unsafe extern "system-unwind" fn add_ref(this: *mut c_void) -> u32 {
    // SAFETY: COM calls it on the pointer it was handed.
    unsafe { &*(this as *const InfoObject) }
        .refs
        .fetch_add(1, Ordering::SeqCst)
        + 1
}

unsafe extern "system-unwind" fn release(this: *mut c_void) -> u32 {
    // SAFETY: COM calls it on the pointer it was handed.
    let o = unsafe { &*(this as *const InfoObject) };
    release_owned(&o.refs, &o.misuse, "ICorProfilerInfo")
}

fn fid(f: UintPtr) -> FunctionId {
    FunctionId(f as u64)
}

unsafe extern "system-unwind" fn get_code_info(
    this: *mut c_void,
    function: UintPtr,
    start: *mut *mut u8,
    size: *mut u32,
) -> HRESULT {
    // SAFETY: `this` is live; the out-pointers are NULL or valid.
    unsafe {
        answer(
            this,
            |o| {
                let mut first = [CodeInfo::default()];
                o.rt.get_code_info2(fid(function), 1, Some(&mut first))
                    .map(|_| first[0])
            },
            |_, first| {
                put(start, first.start_address as *mut u8);
                put(size, first.size as u32);
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_event_mask(this: *mut c_void, events: *mut u32) -> HRESULT {
    if events.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: `this` is live; `events` is valid.
    unsafe {
        answer(
            this,
            |o| o.rt.get_event_mask(),
            |_, mask| {
                events.write(mask);
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_function_from_ip(
    this: *mut c_void,
    ip: *mut u8,
    function: *mut UintPtr,
) -> HRESULT {
    // SAFETY: `this` is live; `function` is NULL or valid.
    unsafe {
        answer(
            this,
            |o| o.rt.get_function_from_ip(ip as u64),
            |_, f| {
                put(function, f.0 as UintPtr);
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_thread_info(
    this: *mut c_void,
    thread: UintPtr,
    win32: *mut u32,
) -> HRESULT {
    // SAFETY: `this` is live; `win32` is NULL or valid.
    unsafe {
        answer(
            this,
            |o| o.rt.get_thread_info(ThreadId(thread as u64)),
            |_, os| {
                put(win32, os);
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_current_thread_id(this: *mut c_void, thread: *mut UintPtr) -> HRESULT {
    // SAFETY: `this` is live; `thread` is NULL or valid.
    unsafe {
        answer(
            this,
            |o| o.rt.get_current_thread_id(),
            |_, t| {
                put(thread, t.0 as UintPtr);
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_class_id_info(
    this: *mut c_void,
    class: UintPtr,
    module: *mut UintPtr,
    type_def: *mut u32,
) -> HRESULT {
    let none = std::ptr::null_mut();
    // SAFETY: forwarded contract; GetClassIDInfo is GetClassIDInfo2 without its extras.
    unsafe { get_class_id_info2(this, class, module, type_def, none, 0, none.cast(), none) }
}

unsafe extern "system-unwind" fn get_function_info(
    this: *mut c_void,
    function: UintPtr,
    class: *mut UintPtr,
    module: *mut UintPtr,
    token: *mut u32,
) -> HRESULT {
    let none = std::ptr::null_mut();
    // SAFETY: forwarded contract; GetFunctionInfo is GetFunctionInfo2 without frame info or
    // type arguments.
    unsafe { get_function_info2(this, function, 0, class, module, token, 0, none, none.cast()) }
}

unsafe extern "system-unwind" fn set_event_mask(this: *mut c_void, events: u32) -> HRESULT {
    // SAFETY: `this` is live.
    unsafe { with(this, |o| hr(o.rt.set_event_mask(events))) }
}

unsafe extern "system-unwind" fn get_token_and_metadata_from_function(
    this: *mut c_void,
    function: UintPtr,
    riid: *const Guid,
    import: *mut *mut c_void,
    token: *mut u32,
) -> HRESULT {
    // SAFETY: `this` is live; the out-pointers are NULL or valid.
    unsafe {
        answer(
            this,
            |o| o.rt.get_token_and_metadata_from_function(fid(function)),
            |o, (md, t)| {
                put(token, t);
                if import.is_null() {
                    hr(HResult::S_OK)
                } else {
                    o.import_object(md, riid, import)
                }
            },
        )
    }
}

/// `GetModuleInfo` and `GetModuleInfo2`.
///
/// # Safety
/// `this` is live; the out-pointers are NULL or valid, `name` for `len` units.
#[allow(clippy::too_many_arguments)]
unsafe fn module_info(
    this: *mut c_void,
    module: UintPtr,
    base: *mut *mut u8,
    len: u32,
    out_len: *mut u32,
    name: *mut WCHAR,
    assembly: *mut UintPtr,
    flags: *mut u32,
) -> HRESULT {
    // SAFETY: per the contract.
    unsafe {
        answer(
            this,
            |o| o.rt.get_module_info2(ModuleId(module as u64)),
            |_, m| {
                put(base, m.base_address as *mut u8);
                put(assembly, m.assembly_id.0 as UintPtr);
                put(flags, m.flags);
                name_result(put_name(&m.name, name, len, out_len))
            },
        )
    }
}

/// The runtime reports a name cut to fit with `ERROR_INSUFFICIENT_BUFFER`.
fn name_result(fit: bool) -> HRESULT {
    hr(if fit {
        HResult::S_OK
    } else {
        HResult::ERROR_INSUFFICIENT_BUFFER
    })
}

unsafe extern "system-unwind" fn get_module_info(
    this: *mut c_void,
    module: UintPtr,
    base: *mut *mut u8,
    len: u32,
    out_len: *mut u32,
    name: *mut WCHAR,
    assembly: *mut UintPtr,
) -> HRESULT {
    // SAFETY: forwarded contract.
    unsafe {
        module_info(
            this,
            module,
            base,
            len,
            out_len,
            name,
            assembly,
            std::ptr::null_mut(),
        )
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system-unwind" fn get_module_info2(
    this: *mut c_void,
    module: UintPtr,
    base: *mut *mut u8,
    len: u32,
    out_len: *mut u32,
    name: *mut WCHAR,
    assembly: *mut UintPtr,
    flags: *mut u32,
) -> HRESULT {
    // SAFETY: forwarded contract.
    unsafe { module_info(this, module, base, len, out_len, name, assembly, flags) }
}

unsafe extern "system-unwind" fn get_module_metadata(
    this: *mut c_void,
    module: UintPtr,
    _open_flags: u32,
    riid: *const Guid,
    out: *mut *mut c_void,
) -> HRESULT {
    if out.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: `this` is live; `out` is valid.
    unsafe {
        with(this, |o| {
            match o.rt.get_module_metadata(ModuleId(module as u64)) {
                Err(e) => {
                    out.write(std::ptr::null_mut());
                    hr(e)
                }
                Ok(md) => o.import_object(md, riid, out),
            }
        })
    }
}

unsafe extern "system-unwind" fn get_app_domain_info(
    this: *mut c_void,
    app_domain: UintPtr,
    len: u32,
    out_len: *mut u32,
    name: *mut WCHAR,
    process: *mut UintPtr,
) -> HRESULT {
    // SAFETY: `this` is live; the out-pointers are NULL or valid.
    unsafe {
        answer(
            this,
            |o| o.rt.get_app_domain_info(AppDomainId(app_domain as u64)),
            |_, d| {
                put(process, d.process_id as UintPtr);
                name_result(put_name(&d.name, name, len, out_len))
            },
        )
    }
}

unsafe extern "system-unwind" fn get_assembly_info(
    this: *mut c_void,
    assembly: UintPtr,
    len: u32,
    out_len: *mut u32,
    name: *mut WCHAR,
    app_domain: *mut UintPtr,
    module: *mut UintPtr,
) -> HRESULT {
    // SAFETY: `this` is live; the out-pointers are NULL or valid.
    unsafe {
        answer(
            this,
            |o| o.rt.get_assembly_info(AssemblyId(assembly as u64)),
            |_, a| {
                put(app_domain, a.app_domain_id.0 as UintPtr);
                put(module, a.module_id.0 as UintPtr);
                name_result(put_name(&a.name, name, len, out_len))
            },
        )
    }
}

unsafe extern "system-unwind" fn do_stack_snapshot(
    this: *mut c_void,
    thread: UintPtr,
    callback: Option<StackSnapshotCallbackFn>,
    flags: u32,
    client_data: *mut c_void,
    context: *mut u8,
    context_size: u32,
) -> HRESULT {
    // The seed is read as the runtime reads it: a whole CONTEXT, whatever `context_size`
    // says (R7).
    let seed = (!context.is_null()).then(|| {
        // SAFETY: a seed pointer addresses a CONTEXT, as the API requires; the real runtime
        // reads all of it too.
        let bytes = unsafe { std::slice::from_raw_parts(context, Context::SIZE) };
        Context::from_bytes(bytes).unwrap_or_default()
    });
    // One buffer for every callback's copy of its CONTEXT, allocated once per walk.
    let mut copy: Vec<u8> = Vec::new();
    let mut deliver = |frame: &SnapshotFrame<'_>| -> HResult {
        let Some(cb) = callback else { return HResult::S_OK };
        let record = frame.frame_info as *const FrameInfo as usize;
        // The adapter's own allocations are not the profiler's: in a running process they
        // would otherwise take the heap lock, and differently once the context copy has grown
        // in an earlier run.
        let (ptr, size) = unobserved(|| match frame.context {
            Some(c) => {
                copy.clear();
                copy.extend_from_slice(c);
                (copy.as_mut_ptr(), c.len() as u32)
            }
            None => (std::ptr::null_mut(), 0),
        });
        // SAFETY: the profiler's callback, with the arguments its signature declares; the
        // context copy and the frame record outlive the call.
        let result = unsafe {
            cb(
                frame.func_id.0 as UintPtr,
                frame.ip as UintPtr,
                record,
                size,
                ptr,
                client_data,
            )
        };
        HResult(result as u32)
    };
    // SAFETY: `this` is live.
    unsafe {
        with(this, |o| {
            let cb: Option<&mut corprof::StackSnapshotCallback<'_>> = match callback {
                Some(_) => Some(&mut deliver),
                None => None,
            };
            hr(o.rt.do_stack_snapshot(ThreadId(thread as u64), cb, flags, seed.as_ref(), context_size))
        })
    }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system-unwind" fn get_function_info2(
    this: *mut c_void,
    function: UintPtr,
    frame_info: UintPtr,
    class: *mut UintPtr,
    module: *mut UintPtr,
    token: *mut u32,
    type_args_len: u32,
    type_args_out: *mut u32,
    type_args: *mut UintPtr,
) -> HRESULT {
    // A frame-info handle is a record valid only inside its snapshot callback: any other
    // value is refused rather than read, and is the profiler's fault (the runtime would read
    // it).
    let live = frame_info == 0 || sim_clr::runtime::is_live_frame_info(frame_info);
    if !live {
        // SAFETY: `this` is the live info object.
        return unsafe {
            with(this, |o| {
                hr(o.rt.stale_frame_info("GetFunctionInfo2", fid(function)))
            })
        };
    }
    // SAFETY: a live record (checked above) or NULL.
    let record = (frame_info != 0).then(|| unsafe { &*(frame_info as *const FrameInfo) });
    // SAFETY: `this` is live; the out-pointers are NULL or valid, `type_args` for
    // `type_args_len` ids.
    unsafe {
        answer(
            this,
            |o| o.rt.get_function_info2(fid(function), record),
            |_, f| {
                put(class, f.class_id.0 as UintPtr);
                put(module, f.module_id.0 as UintPtr);
                put(token, f.token);
                put(type_args_out, f.type_args.len() as u32);
                put_ids(&f.type_args, type_args, type_args_len)
            },
        )
    }
}

/// Copies as many of `ids` as fit in `out` (room for `len`).
///
/// # Safety
/// `out` is NULL or valid for `len` writes.
unsafe fn put_ids(ids: &[ClassId], out: *mut UintPtr, len: u32) -> HRESULT {
    if !out.is_null() {
        for (i, id) in ids.iter().take(len as usize).enumerate() {
            // SAFETY: `i` < `len`.
            unsafe { out.add(i).write(id.0 as UintPtr) };
        }
    }
    hr(HResult::S_OK)
}

#[allow(clippy::too_many_arguments)]
unsafe extern "system-unwind" fn get_class_id_info2(
    this: *mut c_void,
    class: UintPtr,
    module: *mut UintPtr,
    type_def: *mut u32,
    parent: *mut UintPtr,
    len: u32,
    out_len: *mut u32,
    type_args: *mut UintPtr,
) -> HRESULT {
    // SAFETY: `this` is live; the out-pointers are NULL or valid, `type_args` for `len`.
    unsafe {
        answer(
            this,
            |o| o.rt.get_class_id_info2(ClassId(class as u64)),
            |_, c| {
                put(module, c.module_id.0 as UintPtr);
                put(type_def, c.type_def);
                put(parent, c.parent.0 as UintPtr);
                put(out_len, c.type_args.len() as u32);
                put_ids(&c.type_args, type_args, len)
            },
        )
    }
}

/// `GetCodeInfo2` and `GetCodeInfo3`: `ask` fills the caller's records (if any) and gives the
/// number of regions, written to `out_len`.
///
/// # Safety
/// `this` is live; `out_len` is NULL or valid; `infos` is NULL or holds `len`
/// COR_PRF_CODE_INFO records of two pointer-sized fields each, laid out as `CodeInfo`'s two
/// u64 on x64.
unsafe fn code_regions(
    this: *mut c_void,
    len: u32,
    out_len: *mut u32,
    infos: *mut c_void,
    ask: impl FnOnce(&InfoObject, Option<&mut [CodeInfo]>) -> Result<u32, HResult>,
) -> HRESULT {
    // SAFETY: per the contract.
    unsafe {
        answer(
            this,
            |o| {
                let out = (!infos.is_null())
                    .then(|| std::slice::from_raw_parts_mut(infos as *mut CodeInfo, len as usize));
                ask(o, out)
            },
            |_, n| {
                put(out_len, n);
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_code_info2(
    this: *mut c_void,
    function: UintPtr,
    len: u32,
    out_len: *mut u32,
    infos: *mut c_void,
) -> HRESULT {
    // SAFETY: forwarded contract.
    unsafe {
        code_regions(this, len, out_len, infos, |o, out| {
            o.rt.get_code_info2(fid(function), len, out)
        })
    }
}

unsafe extern "system-unwind" fn get_code_info3(
    this: *mut c_void,
    function: UintPtr,
    rejit: UintPtr,
    len: u32,
    out_len: *mut u32,
    infos: *mut c_void,
) -> HRESULT {
    // SAFETY: forwarded contract.
    unsafe {
        code_regions(this, len, out_len, infos, |o, out| {
            o.rt.get_code_info3(fid(function), ReJitId(rejit as u64), len, out)
        })
    }
}

unsafe extern "system-unwind" fn get_rejit_ids(
    this: *mut c_void,
    function: UintPtr,
    len: u32,
    out_len: *mut u32,
    ids: *mut UintPtr,
) -> HRESULT {
    if len != 0 && ids.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: `this` is live; `out_len` is NULL or valid, `ids` holds `len` ids.
    unsafe {
        answer(
            this,
            |o| o.rt.get_rejit_ids(fid(function)),
            |_, found| {
                put(out_len, found.len() as u32);
                for (i, id) in found.iter().take(len as usize).enumerate() {
                    ids.add(i).write(id.0 as UintPtr);
                }
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_native_code_start_addresses(
    this: *mut c_void,
    function: UintPtr,
    rejit: UintPtr,
    len: u32,
    out_len: *mut u32,
    starts: *mut UintPtr,
) -> HRESULT {
    // SAFETY: `this` is live; `out_len` is NULL or valid, `starts` NULL or holds `len` slots.
    unsafe {
        answer(
            this,
            |o| {
                o.rt.get_native_code_start_addresses(fid(function), ReJitId(rejit as u64))
            },
            |_, found| {
                put(out_len, found.len() as u32);
                if starts.is_null() {
                    return OK;
                }
                if (len as usize) < found.len() {
                    return hr(HResult::ERROR_INSUFFICIENT_BUFFER);
                }
                for (i, start) in found.iter().enumerate() {
                    starts.add(i).write(*start as UintPtr);
                }
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_code_info4(
    this: *mut c_void,
    start: UintPtr,
    len: u32,
    out_len: *mut u32,
    infos: *mut c_void,
) -> HRESULT {
    // SAFETY: forwarded contract.
    unsafe {
        code_regions(this, len, out_len, infos, |o, out| {
            o.rt.get_code_info4(start as u64, len, out)
        })
    }
}

/// What `GetRuntimeInformation` answers for the runtime version simclr answers as, as each
/// real runtime answers a profiler calling it from `Initialize` (linux-x64; the conformance
/// lane's probe `conformance/probes/runtime_information.c` compares the two on each runtime): CoreCLR 3.1.23
/// reports 4.0.30319.0 and `v4.0.30319`, the version .NET Framework 4 reported (not its
/// `libcoreclr.so`'s file version, 4.700.22.11601); .NET 8.0.4 reports 8.0.4.0 and `8.0.4`,
/// its product version, without the `v`. Both: type `COR_PRF_CORE_CLR`, instance id 0. .NET 9
/// and 10 answer as .NET 8 does, with their first releases' versions, 9.0.0 and 10.0.0 (not
/// observed).
fn runtime_version(version: RuntimeVersion) -> ((u16, u16, u16, u16), &'static str) {
    match version {
        RuntimeVersion::Core31 => ((4, 0, 30319, 0), "v4.0.30319"),
        RuntimeVersion::Net8 => ((8, 0, 4, 0), "8.0.4"),
        RuntimeVersion::Net9 => ((9, 0, 0, 0), "9.0.0"),
        RuntimeVersion::Net10 => ((10, 0, 0, 0), "10.0.0"),
    }
}
const COR_PRF_CORE_CLR: u32 = 2;

#[allow(clippy::too_many_arguments)]
unsafe extern "system-unwind" fn get_runtime_information(
    this: *mut c_void,
    instance: *mut u16,
    runtime: *mut u32,
    major: *mut u16,
    minor: *mut u16,
    build: *mut u16,
    qfe: *mut u16,
    capacity: u32,
    length: *mut u32,
    version: *mut u16,
) -> HRESULT {
    // v3.1.23 `ProfToEEInterfaceImpl::GetRuntimeInformation`: the string's length is asked
    // for through `length`; a buffer without it is a caller's mistake.
    if !version.is_null() && length.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: `this` is live.
    let ((a, b, c, d), string) = runtime_version(unsafe { with(this, |o| o.rt.version()) });
    if !length.is_null() {
        let text: Vec<u16> = string.encode_utf16().chain([0]).collect();
        // SAFETY: `length` is the caller's; `version` has room for `capacity` units.
        unsafe {
            length.write(text.len() as u32);
            if text.len() > capacity as usize {
                return hr(HResult::ERROR_INSUFFICIENT_BUFFER);
            }
            if version.is_null() {
                return hr(HResult::E_POINTER);
            }
            std::ptr::copy_nonoverlapping(text.as_ptr(), version, text.len());
        }
    }
    // SAFETY: each out-pointer is NULL or the caller's.
    unsafe {
        put(instance, 0);
        put(runtime, COR_PRF_CORE_CLR);
        put(major, a);
        put(minor, b);
        put(build, c);
        put(qfe, d);
    }
    OK
}

unsafe extern "system-unwind" fn request_profiler_detach(this: *mut c_void, expected_ms: u32) -> HRESULT {
    // SAFETY: `this` is live.
    unsafe { with(this, |o| hr(o.rt.request_profiler_detach(expected_ms))) }
}

unsafe extern "system-unwind" fn enum_threads(this: *mut c_void, out: *mut *mut c_void) -> HRESULT {
    if out.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: `this` is live; `out` is valid.
    unsafe {
        answer(
            this,
            |o| o.rt.enum_threads(),
            |o, ids| {
                out.write(thread_enum::create(
                    ids.iter().map(|t| t.0 as UintPtr).collect(),
                    0,
                    o.enumerators.clone(),
                ));
                hr(HResult::S_OK)
            },
        )
    }
}

unsafe extern "system-unwind" fn initialize_current_thread(this: *mut c_void) -> HRESULT {
    // SAFETY: `this` is live.
    unsafe { with(this, |o| hr(o.rt.initialize_current_thread())) }
}

/// `GetFunctionFromIP2` and `GetFunctionFromIP3`.
///
/// # Safety
/// `this` is live; the out-pointers are NULL or valid.
unsafe fn function_from_ip(
    this: *mut c_void,
    ip: *mut u8,
    function: *mut UintPtr,
    rejit: *mut UintPtr,
    no_metadata_ok: bool,
) -> HRESULT {
    // SAFETY: per the contract.
    unsafe {
        answer(
            this,
            |o| {
                if no_metadata_ok {
                    o.rt.get_function_from_ip3(ip as u64)
                } else {
                    o.rt.get_function_from_ip2(ip as u64)
                }
            },
            |_, (f, id)| {
                put(function, f.0 as UintPtr);
                put(rejit, id.0 as UintPtr);
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn get_function_from_ip2(
    this: *mut c_void,
    ip: *mut u8,
    function: *mut UintPtr,
    rejit: *mut UintPtr,
) -> HRESULT {
    // SAFETY: forwarded contract.
    unsafe { function_from_ip(this, ip, function, rejit, false) }
}

unsafe extern "system-unwind" fn get_function_from_ip3(
    this: *mut c_void,
    ip: *mut u8,
    function: *mut UintPtr,
    rejit: *mut UintPtr,
) -> HRESULT {
    // SAFETY: forwarded contract.
    unsafe { function_from_ip(this, ip, function, rejit, true) }
}

unsafe extern "system-unwind" fn get_event_mask2(
    this: *mut c_void,
    low: *mut u32,
    high: *mut u32,
) -> HRESULT {
    if low.is_null() || high.is_null() {
        return hr(HResult::E_INVALIDARG);
    }
    // SAFETY: `this` is live; both pointers are valid.
    unsafe {
        answer(
            this,
            |o| o.rt.get_event_mask2(),
            |_, (l, h)| {
                low.write(l);
                high.write(h);
                OK
            },
        )
    }
}

unsafe extern "system-unwind" fn set_event_mask2(this: *mut c_void, low: u32, high: u32) -> HRESULT {
    // SAFETY: `this` is live.
    unsafe { with(this, |o| hr(o.rt.set_event_mask2(low, high))) }
}

unsafe extern "system-unwind" fn suspend_runtime(this: *mut c_void) -> HRESULT {
    // SAFETY: `this` is live.
    unsafe { with(this, |o| hr(o.rt.suspend_runtime())) }
}

unsafe extern "system-unwind" fn resume_runtime(this: *mut c_void) -> HRESULT {
    // SAFETY: `this` is live.
    unsafe { with(this, |o| hr(o.rt.resume_runtime())) }
}

fn vtable() -> &'static ICorProfilerInfo15Vtbl {
    static VTBL: OnceLock<ICorProfilerInfo15Vtbl> = OnceLock::new();
    VTBL.get_or_init(|| {
        // Info11 to Info15 (environment, EventPipe, handles, heap walks): nothing a stack
        // sampler needs, every slot E_NOTIMPL.
        let mut v15 = ICorProfilerInfo15Vtbl::not_implemented(IUnknownVtbl {
            QueryInterface: query_interface,
            AddRef: add_ref,
            Release: release,
        });
        let v = &mut v15.base.base.base.base.base;
        v.SuspendRuntime = suspend_runtime;
        v.ResumeRuntime = resume_runtime;
        let i9 = &mut v.base;
        i9.GetNativeCodeStartAddresses = get_native_code_start_addresses;
        i9.GetCodeInfo4 = get_code_info4;
        let i8 = &mut i9.base;
        i8.GetFunctionFromIP3 = get_function_from_ip3;
        let i5 = &mut i8.base.base.base;
        i5.GetEventMask2 = get_event_mask2;
        i5.SetEventMask2 = set_event_mask2;
        let i4 = &mut i5.base;
        i4.EnumThreads = enum_threads;
        i4.InitializeCurrentThread = initialize_current_thread;
        i4.GetFunctionFromIP2 = get_function_from_ip2;
        i4.GetCodeInfo3 = get_code_info3;
        i4.GetReJITIDs = get_rejit_ids;
        let i3 = &mut i4.base;
        i3.RequestProfilerDetach = request_profiler_detach;
        i3.GetRuntimeInformation = get_runtime_information;
        i3.GetModuleInfo2 = get_module_info2;
        let i2 = &mut i3.base;
        i2.DoStackSnapshot = do_stack_snapshot;
        i2.GetFunctionInfo2 = get_function_info2;
        i2.GetClassIDInfo2 = get_class_id_info2;
        i2.GetCodeInfo2 = get_code_info2;
        let i1 = &mut i2.base;
        i1.GetCodeInfo = get_code_info;
        i1.GetEventMask = get_event_mask;
        i1.GetFunctionFromIP = get_function_from_ip;
        i1.GetThreadInfo = get_thread_info;
        i1.GetCurrentThreadID = get_current_thread_id;
        i1.GetClassIDInfo = get_class_id_info;
        i1.GetFunctionInfo = get_function_info;
        i1.SetEventMask = set_event_mask;
        i1.GetTokenAndMetaDataFromFunction = get_token_and_metadata_from_function;
        i1.GetModuleInfo = get_module_info;
        i1.GetModuleMetaData = get_module_metadata;
        i1.GetAppDomainInfo = get_app_domain_info;
        i1.GetAssemblyInfo = get_assembly_info;
        v15
    })
}
