//! The profiler→runtime API: what a profiler calls (`ICorProfilerInfo*`), as a Rust trait.
//!
//! Methods take `&self` and implementations are `Send + Sync`, like a COM interface pointer
//! shared by threads. "The current thread" is the thread on whose behalf the caller runs.
//! Out-parameters become return values: `Ok(v)` is `S_OK` with `v` written, `Err(hr)` any
//! failure.

use crate::context::Context;
use crate::frame_info::FrameInfo;
use crate::hresult::HResult;
use crate::ids::{AppDomainId, AssemblyId, ClassId, FunctionId, MdToken, ModuleId, ReJitId, ThreadId};
use crate::metadata::{AppDomainInfo, AssemblyInfo, ClassInfo, MetaDataImport, ModuleInfo};
use std::sync::Arc;

/// One `StackSnapshotCallback` invocation: a managed frame, or (`func_id == 0`) a run of
/// native frames (R20–R25).
#[derive(Clone, Copy, Debug)]
pub struct SnapshotFrame<'a> {
    /// The frame's function; 0 for a run of native frames.
    pub func_id: FunctionId,
    /// The frame's instruction pointer (R23).
    pub ip: u64,
    /// The runtime's frame record, valid only during this callback (R24).
    pub frame_info: &'a FrameInfo,
    /// The frame's CONTEXT, `contextSize` bytes long, when `COR_PRF_SNAPSHOT_REGISTER_CONTEXT`
    /// was passed (R25); `None` (NULL, size 0) otherwise.
    pub context: Option<&'a [u8]>,
}

impl SnapshotFrame<'_> {
    /// `contextSize` as the callback receives it.
    pub fn context_size(&self) -> u32 {
        self.context.map_or(0, |c| c.len() as u32)
    }

    /// The frame's registers, decoded from the context bytes.
    pub fn registers(&self) -> Option<Context> {
        Context::from_bytes(self.context?)
    }
}

/// A `StackSnapshotCallback`: return exactly `S_OK` to continue; anything else aborts the walk
/// with `CORPROF_E_STACKSNAPSHOT_ABORTED` (R26). `clientData` is whatever the closure captures.
pub type StackSnapshotCallback<'a> = dyn FnMut(&SnapshotFrame<'_>) -> HResult + 'a;

/// `COR_PRF_CODE_INFO`: one region of a method's native code, laid out as at the ABI on x64.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct CodeInfo {
    /// First byte of the region.
    pub start_address: u64,
    /// Size of the region in bytes.
    pub size: u64,
}

/// What `GetFunctionInfo` / `GetFunctionInfo2` report about a function.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct FunctionInfo {
    /// The class, or 0 when it cannot be determined exactly (shared generics, R24).
    pub class_id: ClassId,
    /// The module.
    pub module_id: ModuleId,
    /// The `mdMethodDef` token.
    pub token: MdToken,
    /// Type arguments (`GetFunctionInfo2` only).
    pub type_args: Vec<ClassId>,
}

/// The profiler→runtime API a stack walker needs (`ICorProfilerInfo` … `ICorProfilerInfo10`).
// mockall cannot mock a reference inside `Option` without a named lifetime.
#[allow(clippy::needless_lifetimes)]
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait ProfilerInfo: Send + Sync {
    /// `ICorProfilerInfo2::DoStackSnapshot`: walks `thread` (0 = the caller) leaf first,
    /// calling `callback` once per managed frame and once per run of native frames below a
    /// managed frame. `context`/`context_size` are the optional seed (R12–R14, R31–R34).
    fn do_stack_snapshot<'a, 'b>(
        &self,
        thread: ThreadId,
        callback: Option<&'a mut StackSnapshotCallback<'a>>,
        info_flags: u32,
        context: Option<&'b Context>,
        context_size: u32,
    ) -> HResult;

    /// `ICorProfilerInfo::GetFunctionFromIP`: the managed function containing `ip`.
    /// A native IP or a method without metadata gives `E_FAIL`.
    fn get_function_from_ip(&self, ip: u64) -> Result<FunctionId, HResult>;

    /// `ICorProfilerInfo4::GetFunctionFromIP2`: like `GetFunctionFromIP`, plus the ReJIT id.
    /// A SYNC entrypoint that may trigger a GC (R38).
    fn get_function_from_ip2(&self, ip: u64) -> Result<(FunctionId, ReJitId), HResult>;

    /// `ICorProfilerInfo8::GetFunctionFromIP3`: like `GetFunctionFromIP2`, but also maps
    /// methods without metadata (IL stubs, dynamic methods).
    fn get_function_from_ip3(&self, ip: u64) -> Result<(FunctionId, ReJitId), HResult>;

    /// `ICorProfilerInfo2::GetCodeInfo2`: fills up to `requested` regions of `function`'s
    /// native code into `code_infos` (NULL = `None`) and returns the total number of regions.
    fn get_code_info2<'a>(
        &self,
        function: FunctionId,
        requested: u32,
        code_infos: Option<&'a mut [CodeInfo]>,
    ) -> Result<u32, HResult>;

    /// `ICorProfilerInfo4::GetCodeInfo3`: like `GetCodeInfo2`, for the code of ReJIT version
    /// `rejit` of `function` (its first native code version). A SYNC entrypoint that may
    /// trigger a GC.
    fn get_code_info3<'a>(
        &self,
        function: FunctionId,
        rejit: ReJitId,
        requested: u32,
        code_infos: Option<&'a mut [CodeInfo]>,
    ) -> Result<u32, HResult>;

    /// `ICorProfilerInfo4::GetReJITIDs`: the ReJIT ids of `function`'s ReJITted versions.
    /// A SYNC entrypoint that may trigger a GC.
    fn get_rejit_ids(&self, function: FunctionId) -> Result<Vec<ReJitId>, HResult>;

    /// `ICorProfilerInfo9::GetNativeCodeStartAddresses`: where each native code body of ReJIT
    /// version `rejit` of `function` starts (tier 0, tier 1, on-stack replacement), the first
    /// compiled first. An ASYNC entrypoint.
    fn get_native_code_start_addresses(
        &self,
        function: FunctionId,
        rejit: ReJitId,
    ) -> Result<Vec<u64>, HResult>;

    /// `ICorProfilerInfo9::GetCodeInfo4`: like `GetCodeInfo2`, for the native code body that
    /// starts at `start` (one `GetNativeCodeStartAddresses` gave). A SYNC entrypoint that may
    /// trigger a GC.
    fn get_code_info4<'a>(
        &self,
        start: u64,
        requested: u32,
        code_infos: Option<&'a mut [CodeInfo]>,
    ) -> Result<u32, HResult>;

    /// `ICorProfilerInfo::GetFunctionInfo`: class, module and token of `function`.
    fn get_function_info(&self, function: FunctionId) -> Result<FunctionInfo, HResult>;

    /// `ICorProfilerInfo2::GetFunctionInfo2`: like `GetFunctionInfo`, with type arguments,
    /// exact only with frame info from an enter hook (R24).
    fn get_function_info2<'a>(
        &self,
        function: FunctionId,
        frame_info: Option<&'a FrameInfo>,
    ) -> Result<FunctionInfo, HResult>;

    /// `ICorProfilerInfo::GetCurrentThreadID`: the caller's managed thread; fails with
    /// `CORPROF_E_NOT_MANAGED_THREAD` on a thread that never ran managed code.
    fn get_current_thread_id(&self) -> Result<ThreadId, HResult>;

    /// `ICorProfilerInfo::SetEventMask`.
    fn set_event_mask(&self, mask: u32) -> HResult;

    /// `ICorProfilerInfo::GetEventMask`.
    fn get_event_mask(&self) -> Result<u32, HResult>;

    /// `ICorProfilerInfo4::InitializeCurrentThread`: per-thread runtime setup, to be done
    /// before this profiler suspends any thread (R39).
    fn initialize_current_thread(&self) -> HResult;

    /// `ICorProfilerInfo10::SuspendRuntime` (R41).
    fn suspend_runtime(&self) -> HResult;

    /// `ICorProfilerInfo10::ResumeRuntime` (R41).
    fn resume_runtime(&self) -> HResult;

    /// `ICorProfilerInfo4::EnumThreads`: every live managed thread.
    fn enum_threads(&self) -> Result<Vec<ThreadId>, HResult>;

    /// `ICorProfilerInfo::GetThreadInfo`: the OS thread id `thread` runs on. A SYNC
    /// entrypoint: a managed caller must be inside a callback. The `ThreadID` is
    /// dereferenced, like `DoStackSnapshot`'s: it must name a `Thread` that exists.
    fn get_thread_info(&self, thread: ThreadId) -> Result<u32, HResult>;

    /// `ICorProfilerInfo2::GetClassIDInfo2` (and `GetClassIDInfo`, its first two fields): the
    /// module and `mdTypeDef` of `class`, its parent and type arguments. `E_INVALIDARG` for a
    /// null id.
    fn get_class_id_info2(&self, class: ClassId) -> Result<ClassInfo, HResult>;

    /// `ICorProfilerInfo3::GetModuleInfo2` (and `GetModuleInfo`, without the flags): where
    /// `module` is loaded, its file name and assembly. `E_INVALIDARG` for a null or unknown
    /// id.
    fn get_module_info2(&self, module: ModuleId) -> Result<ModuleInfo, HResult>;

    /// `ICorProfilerInfo::GetModuleMetaData` for `IMetaDataImport`: the module's metadata.
    fn get_module_metadata(&self, module: ModuleId) -> Result<Arc<dyn MetaDataImport>, HResult>;

    /// `ICorProfilerInfo::GetTokenAndMetaDataFromFunction`: the method's `mdMethodDef` and its
    /// module's metadata. A SYNC entrypoint: a managed caller must be inside a callback.
    fn get_token_and_metadata_from_function(
        &self,
        function: FunctionId,
    ) -> Result<(Arc<dyn MetaDataImport>, MdToken), HResult>;

    /// `ICorProfilerInfo::GetAppDomainInfo`.
    fn get_app_domain_info(&self, app_domain: AppDomainId) -> Result<AppDomainInfo, HResult>;

    /// `ICorProfilerInfo::GetAssemblyInfo`.
    fn get_assembly_info(&self, assembly: AssemblyId) -> Result<AssemblyInfo, HResult>;

    /// `ICorProfilerInfo5::SetEventMask2`: the low word is `SetEventMask`'s; the high word
    /// holds `COR_PRF_HIGH_MONITOR` flags.
    fn set_event_mask2(&self, low: u32, high: u32) -> HResult;

    /// `ICorProfilerInfo5::GetEventMask2`: (low, high).
    fn get_event_mask2(&self) -> Result<(u32, u32), HResult>;

    /// `ICorProfilerInfo3::RequestProfilerDetach`: starts detaching; from then on every
    /// call fails with `CORPROF_E_PROFILER_DETACHING` (R1).
    fn request_profiler_detach(&self, expected_completion_ms: u32) -> HResult;
}
