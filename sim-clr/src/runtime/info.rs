//! The `ProfilerInfo` methods of the simulated runtime. Every method starts with a scheduling
//! point (`fiber::RuntimeCall`: a no-op outside a running process) and, in a run that keeps a
//! trace, leaves its answer there.

use super::{Runtime, State};
use crate::code::metadata::{APP_DOMAIN, APP_DOMAIN_NAME, PROCESS_ID};
use crate::fiber;
use corprof::flags::{event, high as event_high};
use corprof::metadata::{AppDomainInfo, AssemblyInfo, ClassInfo, ModuleInfo, MODULE_DISK};
use corprof::{
    AppDomainId, AssemblyId, ClassId, CodeInfo, Context, FrameInfo, FunctionId, FunctionInfo, HResult,
    MdToken, MetaDataImport, ModuleId, ProfilerInfo, ReJitId, StackSnapshotCallback, ThreadId,
};
use std::sync::{Arc, MutexGuard};

// The trait's signatures name their lifetimes (see `corprof::ProfilerInfo`). Every method
// starts with a scheduling point (`fiber::RuntimeCall`: a no-op outside a running process);
// the runtime's own allocations are not the profiler's.
#[allow(clippy::needless_lifetimes)]
impl ProfilerInfo for Runtime {
    fn do_stack_snapshot<'a, 'b>(
        &self,
        thread: ThreadId,
        callback: Option<&'a mut StackSnapshotCallback<'a>>,
        info_flags: u32,
        context: Option<&'b Context>,
        context_size: u32,
    ) -> HResult {
        self.traced("DoStackSnapshot", Some(thread), |_call| {
            crate::runtime::snapshot::do_stack_snapshot(
                self,
                thread,
                callback,
                info_flags,
                context,
                context_size,
            )
        })
    }

    fn get_function_from_ip(&self, ip: u64) -> Result<FunctionId, HResult> {
        self.traced("GetFunctionFromIP", None, |call| {
            let st = self.lock();
            st.async_entry()?;
            if st
                .caller()
                .thread
                .is_some_and(|i| st.threads[i].forbid_suspend > 0)
            {
                return Err(HResult::CORPROF_E_ASYNCHRONOUS_UNSAFE);
            }
            self.function_from_ip(call, st, ip, false).map(|(f, _)| f)
        })
    }

    fn get_function_from_ip2(&self, ip: u64) -> Result<(FunctionId, ReJitId), HResult> {
        self.traced("GetFunctionFromIP2", None, |call| {
            let st = self.lock();
            st.code_version_entry()?;
            self.function_from_ip(call, st, ip, false)
        })
    }

    fn get_function_from_ip3(&self, ip: u64) -> Result<(FunctionId, ReJitId), HResult> {
        self.traced("GetFunctionFromIP3", None, |call| {
            let st = self.lock();
            st.sync_entry(true)?;
            self.function_from_ip(call, st, ip, true)
        })
    }

    fn get_code_info2<'a>(
        &self,
        function: FunctionId,
        requested: u32,
        code_infos: Option<&'a mut [CodeInfo]>,
    ) -> Result<u32, HResult> {
        self.traced("GetCodeInfo2", None, |call| {
            self.lock().async_entry()?;
            // The method's first code: tier-0 code even once it has tiered up.
            self.code_info(call, function, None, requested, code_infos)
        })
    }

    fn get_code_info3<'a>(
        &self,
        function: FunctionId,
        rejit: ReJitId,
        requested: u32,
        code_infos: Option<&'a mut [CodeInfo]>,
    ) -> Result<u32, HResult> {
        self.traced("GetCodeInfo3", None, |call| {
            // Takes the code-versioning lock, which may trigger a GC (R38), up to .NET 9.
            self.lock().code_version_entry()?;
            self.code_info(call, function, Some(rejit), requested, code_infos)
        })
    }

    fn get_rejit_ids(&self, function: FunctionId) -> Result<Vec<ReJitId>, HResult> {
        self.traced("GetReJITIDs", None, |_call| {
            let mut st = self.lock();
            st.sync_entry(true)?;
            let base = st.method(function, "GetReJITIDs")?;
            let mut ids: Vec<ReJitId> = st
                .code
                .versions(base)
                .map(|i| st.code.function(i).rejit_id)
                .filter(|id| id.0 != 0)
                .collect();
            ids.dedup();
            Ok(ids)
        })
    }

    fn get_native_code_start_addresses(
        &self,
        function: FunctionId,
        rejit: ReJitId,
    ) -> Result<Vec<u64>, HResult> {
        self.traced("GetNativeCodeStartAddresses", None, |_call| {
            let mut st = self.lock();
            st.async_entry()?;
            let base = st.method(function, "GetNativeCodeStartAddresses")?;
            // Every native code version of the IL version: the method's first code, its tier-1
            // bodies and (.NET 8, observed by the lane's `osr` probe) its OSR bodies.
            Ok(st
                .code
                .versions(base)
                .map(|i| st.code.function(i))
                .filter(|f| f.rejit_id == rejit && f.compiled)
                .map(|f| f.start)
                .collect())
        })
    }

    fn get_code_info4<'a>(
        &self,
        start: u64,
        requested: u32,
        code_infos: Option<&'a mut [CodeInfo]>,
    ) -> Result<u32, HResult> {
        self.traced("GetCodeInfo4", None, |call| {
            let st = self.lock();
            // SYNC, may trigger a GC (CoreCLR v3.1.23 `GetCodeInfo4`: `kP2EETriggers`); from a
            // P/Invoke a managed thread is refused (observed: the lane's `osr` probe).
            st.sync_entry(true)?;
            if requested != 0 && code_infos.is_none() {
                return Err(HResult::E_INVALIDARG);
            }
            if start == 0 {
                return Err(HResult::CORPROF_E_FUNCTION_NOT_COMPILED);
            }
            let st = self.reader_locked(call, st)?;
            // `GetCodeInfoFromCodeStart`: the body the address lies in, if it is managed code.
            let body = st.code.lookup(start).map(|i| st.code.function(i));
            match body {
                Some(f) if f.kind.is_managed() => Ok(deliver_regions(f, requested, code_infos)),
                _ => Err(HResult::E_FAIL),
            }
        })
    }

    fn get_function_info(&self, function: FunctionId) -> Result<FunctionInfo, HResult> {
        self.traced("GetFunctionInfo", None, |_call| {
            let mut st = self.lock();
            st.async_entry()?;
            let index = st.method(function, "GetFunctionInfo")?;
            let f = st.code.function(index);
            Ok(FunctionInfo {
                class_id: f.class_id,
                module_id: f.module_id,
                token: f.token,
                type_args: Vec::new(),
            })
        })
    }

    fn get_function_info2<'a>(
        &self,
        function: FunctionId,
        frame_info: Option<&'a FrameInfo>,
    ) -> Result<FunctionInfo, HResult> {
        self.traced("GetFunctionInfo2", None, |_call| {
            if let Some(record) = frame_info {
                // A record kept after its callback returned is read from a dead stack slot (R24).
                if !super::is_live_frame_info(record as *const FrameInfo as usize) {
                    return Err(self.stale_frame_info("GetFunctionInfo2", function));
                }
                if record.func_id != function {
                    return Err(HResult::E_INVALIDARG);
                }
            }
            let mut info = self.get_function_info(function)?;
            let st = self.lock();
            if let Some(f) = st.code.by_function_id(function) {
                info.type_args = st.code.function(f).type_args.clone();
            }
            Ok(info)
        })
    }

    fn get_current_thread_id(&self) -> Result<ThreadId, HResult> {
        self.traced("GetCurrentThreadID", None, |_call| {
            let st = self.lock();
            st.async_entry()?;
            match st.caller_ee() {
                Some(i) if !st.threads[i].gc_special => Ok(st.threads[i].id),
                _ => Err(HResult::CORPROF_E_NOT_MANAGED_THREAD),
            }
        })
    }

    fn set_event_mask(&self, mask: u32) -> HResult {
        self.traced("SetEventMask", None, |_call| {
            let mut st = self.lock();
            let high = st.config.event_mask_high;
            set_masks(&mut st, mask, high)
        })
    }

    fn get_event_mask(&self) -> Result<u32, HResult> {
        self.traced("GetEventMask", None, |_call| {
            let st = self.lock();
            st.async_entry()?;
            Ok(st.config.event_mask)
        })
    }

    fn initialize_current_thread(&self) -> HResult {
        self.traced("InitializeCurrentThread", None, |_call| {
            let mut st = self.lock();
            if let Err(hr) = st.sync_entry(false) {
                return hr;
            }
            if let Some(i) = st.caller().thread {
                st.threads[i].tls_initialized = true;
            }
            HResult::S_OK
        })
    }

    fn suspend_runtime(&self) -> HResult {
        self.traced("SuspendRuntime", None, |_call| {
            // In a running process the suspension holds the thread-store lock (R41): wait for it.
            fiber::thread_store_lock(true);
            // Each half raises its own callbacks; the process raises RuntimeSuspendFinished when
            // the safe points are reached.
            match self.suspend_runtime_begin() {
                Ok(fresh) => {
                    self.suspend_runtime_stop(fresh);
                    // SuspendEE returns once every thread reached a safe point.
                    fiber::request(fiber::Request::SafePoints);
                    HResult::S_OK
                }
                Err(hr) => {
                    fiber::thread_store_lock(false);
                    hr
                }
            }
        })
    }

    fn resume_runtime(&self) -> HResult {
        self.traced("ResumeRuntime", None, |_call| match self.resume_runtime_begin() {
            Ok(()) => {
                self.resume_runtime_finish();
                fiber::thread_store_lock(false);
                self.flush();
                HResult::S_OK
            }
            Err(hr) => hr,
        })
    }

    fn enum_threads(&self) -> Result<Vec<ThreadId>, HResult> {
        self.traced("EnumThreads", None, |_call| {
            // CoreCLR v3.1.23 `ProfilerThreadEnum::Init` (`profilingenumerators.cpp`) lists the
            // threads under the thread-store lock, which it takes unless a profiler-requested
            // runtime suspension is in progress (`fProfilerRequestedRuntimeSuspend`): while
            // another thread holds the lock for a GC, the call waits; the GC thread itself
            // re-enters it.
            let mut st = self.lock();
            st.async_entry()?;
            let waits = st.suspension.profiler.is_none()
                && st
                    .thread_store_owner
                    .is_some_and(|owner| st.caller().thread != Some(owner));
            if !waits {
                return st.listed_threads();
            }
            drop(st);
            fiber::thread_store_lock(true);
            let listed = self.lock().listed_threads();
            fiber::thread_store_lock(false);
            listed
        })
    }

    fn get_thread_info(&self, thread: ThreadId) -> Result<u32, HResult> {
        self.traced("GetThreadInfo", Some(thread), |_call| {
            let mut st = self.lock();
            st.sync_entry(false)?;
            let t = st.dereference(thread, "GetThreadInfo")?;
            Ok(st.threads[t].os_id)
        })
    }

    fn get_class_id_info2(&self, class: ClassId) -> Result<ClassInfo, HResult> {
        self.traced("GetClassIDInfo2", None, |_call| {
            let st = self.lock();
            st.async_entry()?;
            // A null id is refused; any other id the runtime never handed out is refused too,
            // where the real runtime would dereference it.
            let (def, module) = st.code.metadata().class(class).ok_or(HResult::E_INVALIDARG)?;
            Ok(ClassInfo {
                module_id: module.id,
                type_def: def.type_def,
                parent: ClassId::NULL,
                type_args: Vec::new(),
            })
        })
    }

    fn get_module_info2(&self, module: ModuleId) -> Result<ModuleInfo, HResult> {
        self.traced("GetModuleInfo2", None, |_call| {
            let st = self.lock();
            st.async_entry()?;
            let m = st.code.metadata().module(module).ok_or(HResult::E_INVALIDARG)?;
            Ok(ModuleInfo {
                base_address: m.base,
                name: m.name.clone(),
                assembly_id: m.assembly,
                flags: MODULE_DISK,
            })
        })
    }

    fn get_module_metadata(&self, module: ModuleId) -> Result<Arc<dyn MetaDataImport>, HResult> {
        self.traced("GetModuleMetaData", None, |_call| {
            let st = self.lock();
            // A SYNC entrypoint: a managed thread must be inside a callback (R27).
            st.sync_entry(false)?;
            let m = st.code.metadata().module(module).ok_or(HResult::E_INVALIDARG)?;
            Ok(m.import.clone() as Arc<dyn MetaDataImport>)
        })
    }

    fn get_token_and_metadata_from_function(
        &self,
        function: FunctionId,
    ) -> Result<(Arc<dyn MetaDataImport>, MdToken), HResult> {
        self.traced("GetTokenAndMetaDataFromFunction", None, |_call| {
            let mut st = self.lock();
            st.sync_entry(false)?;
            let index = st.method(function, "GetTokenAndMetaDataFromFunction")?;
            let f = st.code.function(index);
            let m = st
                .code
                .metadata()
                .module(f.module_id)
                .ok_or(HResult::E_INVALIDARG)?;
            Ok((m.import.clone() as Arc<dyn MetaDataImport>, f.token))
        })
    }

    fn get_app_domain_info(&self, app_domain: AppDomainId) -> Result<AppDomainInfo, HResult> {
        self.traced("GetAppDomainInfo", None, |_call| {
            let st = self.lock();
            st.async_entry()?;
            if app_domain != APP_DOMAIN {
                return Err(HResult::E_INVALIDARG);
            }
            Ok(AppDomainInfo {
                name: APP_DOMAIN_NAME.to_string(),
                process_id: PROCESS_ID,
            })
        })
    }

    fn get_assembly_info(&self, assembly: AssemblyId) -> Result<AssemblyInfo, HResult> {
        self.traced("GetAssemblyInfo", None, |_call| {
            let st = self.lock();
            st.async_entry()?;
            let m = st
                .code
                .metadata()
                .assembly(assembly)
                .ok_or(HResult::E_INVALIDARG)?;
            Ok(AssemblyInfo {
                name: m.assembly_name().to_string(),
                app_domain_id: APP_DOMAIN,
                module_id: m.id,
            })
        })
    }

    fn set_event_mask2(&self, low: u32, high: u32) -> HResult {
        self.traced("SetEventMask2", None, |_call| {
            set_masks(&mut self.lock(), low, high)
        })
    }

    fn get_event_mask2(&self) -> Result<(u32, u32), HResult> {
        let low = self.get_event_mask()?;
        Ok((low, self.lock().config.event_mask_high))
    }

    fn request_profiler_detach(&self, _expected_completion_ms: u32) -> HResult {
        self.traced("RequestProfilerDetach", None, |_call| {
            let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let mut st = self.lock();
            if let Err(hr) = st.sync_entry(false) {
                return hr;
            }
            if !profiler.is_some_and(|p| p.implements_callback3()) {
                return HResult::CORPROF_E_CALLBACK3_REQUIRED;
            }
            if st.config.event_mask & event::MONITOR_IMMUTABLE != 0 {
                return HResult::CORPROF_E_IMMUTABLE_FLAGS_SET;
            }
            // From here on every entrypoint refuses the profiler (R1).
            st.config.detaching = true;
            HResult::S_OK
        })
    }
}

/// What a runtime call answered.
trait Answer {
    /// The `HRESULT` it returned.
    fn hresult(&self) -> HResult;
    /// The answer of a call that failed with `hr`.
    fn failed(hr: HResult) -> Self;
}

impl Answer for HResult {
    fn hresult(&self) -> HResult {
        *self
    }
    fn failed(hr: HResult) -> HResult {
        hr
    }
}

impl<T> Answer for Result<T, HResult> {
    fn hresult(&self) -> HResult {
        self.as_ref().err().copied().unwrap_or(HResult::S_OK)
    }
    fn failed(hr: HResult) -> Self {
        Err(hr)
    }
}

impl Runtime {
    /// Runs the body of API call `api`: a scheduling point first ([`fiber::RuntimeCall`]),
    /// then the body, unless a `[[fail]]` rule makes the call fail; on a fiber, in a run that
    /// keeps a trace, the call, the thread it names and its answer become a trace line of the
    /// calling thread, as an OS call's or a program step's do.
    fn traced<R: Answer>(
        &self,
        api: &'static str,
        target: Option<ThreadId>,
        body: impl FnOnce(&fiber::RuntimeCall) -> R,
    ) -> R {
        debug_assert!(super::FAILABLE_APIS.contains(&api), "{api} can be made to fail");
        let call = fiber::RuntimeCall::enter();
        let (ruled, injecting) = {
            let mut st = self.lock();
            let caller = st.caller().thread;
            (st.failing.call(api, caller), st.failing.injecting)
        };
        // Only a failure a real runtime can give at any moment is a choice (`INJECTED`).
        let chosen = || {
            let failure = super::injected(api)?;
            match fiber::request(fiber::Request::Fails) {
                Some(fiber::Reply::Flag(true)) => Some(failure.hresult),
                _ => None,
            }
        };
        let injected = ruled.or_else(|| if injecting { chosen() } else { None });
        let answer = match injected {
            Some(hr) => R::failed(hr),
            None => body(&call),
        };
        fiber::note(|| {
            let target = target.map_or_else(String::new, |id| {
                let name = if id.is_null() {
                    "self".to_string()
                } else {
                    self.lock().name_of(id)
                };
                format!(" {name}")
            });
            let marked = if injected.is_some() { " (injected)" } else { "" };
            format!("{api}{target} → {}{marked}", answer.hresult())
        });
        answer
    }

    /// `GetCodeInfo2` (`rejit` `None`: the method's first code) and `GetCodeInfo3` (the first
    /// code of ReJIT version `rejit`): fills up to `requested` regions, returns how many the
    /// code has.
    fn code_info(
        &self,
        call: &fiber::RuntimeCall,
        function: FunctionId,
        rejit: Option<ReJitId>,
        requested: u32,
        code_infos: Option<&mut [CodeInfo]>,
    ) -> Result<u32, HResult> {
        let mut st = self.lock();
        let base = st.method(
            function,
            if rejit.is_some() {
                "GetCodeInfo3"
            } else {
                "GetCodeInfo2"
            },
        )?;
        if requested != 0 && code_infos.is_none() {
            return Err(HResult::E_INVALIDARG);
        }
        if st.code.function(base).generic_definition {
            return Err(HResult::E_INVALIDARG);
        }
        let version = match rejit {
            None => Some(base),
            Some(id) => st
                .code
                .versions(base)
                .find(|&i| st.code.function(i).rejit_id == id),
        };
        let f = match version.map(|i| st.code.function(i)) {
            Some(f) if f.compiled => f.clone(),
            _ => return Err(HResult::CORPROF_E_FUNCTION_NOT_COMPILED),
        };
        drop(self.reader_locked(call, st)?);
        Ok(deliver_regions(&f, requested, code_infos))
    }

    /// The state `st`, with the code manager's reader lock taken (R42): in a running process
    /// a caller that may block first waits (with the state unlocked) while another thread
    /// holds the writer lock, so a writer it suspended blocks it as the real lock would.
    fn reader_locked<'a>(
        &'a self,
        call: &fiber::RuntimeCall,
        mut st: MutexGuard<'a, State>,
    ) -> Result<MutexGuard<'a, State>, HResult> {
        if call.on_fiber() && !st.avoid_host_calls() && st.config.version.code_lookups_take_the_reader_lock()
        {
            drop(st);
            call.wait_for_reader_lock();
            st = self.lock();
        }
        st.reader_lock()?;
        Ok(st)
    }

    /// `GetFunctionFromIP*`'s lookup: NOT_YET_AVAILABLE before the GC is up, the reader lock,
    /// then `E_FAIL` for native code and (unless `no_metadata_ok`) for methods without
    /// metadata.
    fn function_from_ip(
        &self,
        call: &fiber::RuntimeCall,
        st: MutexGuard<'_, State>,
        ip: u64,
        no_metadata_ok: bool,
    ) -> Result<(FunctionId, ReJitId), HResult> {
        if !st.config.gc_initialized {
            return Err(HResult::CORPROF_E_NOT_YET_AVAILABLE);
        }
        let st = self.reader_locked(call, st)?;
        lookup(&st, ip, no_metadata_ok)
    }
}

/// The method whose code contains `ip`: `E_FAIL` for native code and (unless
/// `no_metadata_ok`) for methods without metadata.
fn lookup(st: &State, ip: u64, no_metadata_ok: bool) -> Result<(FunctionId, ReJitId), HResult> {
    let f = st
        .code
        .lookup(ip)
        .map(|i| st.code.function(i))
        .ok_or(HResult::E_FAIL)?;
    if !f.kind.is_managed() || !(f.kind.has_metadata() || no_metadata_ok) {
        return Err(HResult::E_FAIL);
    }
    Ok((f.function_id, f.rejit_id))
}

/// `SetEventMask2` behind the lock: immutable bits may change only inside a startup
/// `Initialize` (an attaching profiler's `InitializeForAttach` is not one), and an attached
/// profiler may set only the bits allowed after attach.
fn set_masks(st: &mut State, low: u32, high: u32) -> HResult {
    if let Err(hr) = st.async_entry() {
        return hr;
    }
    let config = &st.config;
    let startup_init = st.initializing && !config.attached;
    if !startup_init
        && (low & event::MONITOR_IMMUTABLE != config.event_mask & event::MONITOR_IMMUTABLE
            || high & event_high::MONITOR_IMMUTABLE != config.event_mask_high & event_high::MONITOR_IMMUTABLE)
    {
        return HResult::E_FAIL;
    }
    if config.attached
        && (low & !event::ALLOWABLE_AFTER_ATTACH != 0 || high & !event_high::ALLOWABLE_AFTER_ATTACH != 0)
    {
        return HResult::CORPROF_E_UNSUPPORTED_FOR_ATTACHING_PROFILER;
    }
    (st.config.event_mask, st.config.event_mask_high) = (low, high);
    HResult::S_OK
}

/// Fills up to `requested` of `f`'s code regions (hot, then cold) into `code_infos`; the number
/// of regions.
fn deliver_regions(f: &crate::code::Function, requested: u32, code_infos: Option<&mut [CodeInfo]>) -> u32 {
    let hot = CodeInfo {
        start_address: f.start,
        size: f.size,
    };
    let cold = f
        .cold
        .map(|(start_address, size)| CodeInfo { start_address, size });
    let regions: Vec<CodeInfo> = std::iter::once(hot).chain(cold).collect();
    if let Some(out) = code_infos {
        for (slot, region) in out.iter_mut().zip(&regions).take(requested as usize) {
            *slot = *region;
        }
    }
    regions.len() as u32
}
