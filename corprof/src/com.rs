//! The COM ABI of the profiling API: `#[repr(C)]` vtables in slot order, the IIDs, and the
//! raw callback types — what a native profiler exchanges with CoreCLR.
//!
//! Each vtable is generated from its method list (the order of `corprof.idl`); a derived
//! interface starts with its base's vtable. Slots the project calls or implements have precise
//! signatures; structures it never reads are passed as `*mut c_void`. `with_stubs` builds a
//! vtable whose every method returns `S_OK`, for an object that implements only a few.
//!
//! Only x86-64 is targeted: `extern "system"` is the C calling convention there on Unix and
//! the Windows x64 convention on Windows, and ids (`UINT_PTR`) are `usize`.

#![allow(non_snake_case)]

use std::ffi::c_void;

/// `HRESULT` at the ABI.
pub type HRESULT = i32;
/// `BOOL`.
pub type BOOL = i32;
/// `WCHAR` (UTF-16 on every platform CoreCLR supports, PAL included).
pub type WCHAR = u16;
/// An id (`ThreadID`, `FunctionID`, …) or `UINT_PTR` at the ABI.
pub type UintPtr = usize;

/// A COM `GUID`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(C)]
pub struct Guid {
    /// First 32 bits.
    pub data1: u32,
    /// Next 16 bits.
    pub data2: u16,
    /// Next 16 bits.
    pub data3: u16,
    /// Last 64 bits, in byte order.
    pub data4: [u8; 8],
}

impl Guid {
    /// Builds a GUID from its textual groups.
    pub const fn new(data1: u32, data2: u16, data3: u16, data4: [u8; 8]) -> Guid {
        Guid {
            data1,
            data2,
            data3,
            data4,
        }
    }

    /// Parses the registry form `{8A4B6C2D-1E3F-4A5B-9C8D-7E6F5A4B3C2D}` (braces optional,
    /// any case).
    pub fn parse(text: &str) -> Option<Guid> {
        let t = text.trim();
        let t = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')).unwrap_or(t);
        let groups: Vec<&str> = t.split('-').collect();
        let lengths = [8, 4, 4, 4, 12];
        if groups.len() != 5
            || groups
                .iter()
                .zip(lengths)
                .any(|(g, n)| g.len() != n || !g.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return None;
        }
        let tail = format!("{}{}", groups[3], groups[4]);
        let mut data4 = [0u8; 8];
        for (i, byte) in data4.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&tail[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Guid::new(
            u32::from_str_radix(groups[0], 16).ok()?,
            u16::from_str_radix(groups[1], 16).ok()?,
            u16::from_str_radix(groups[2], 16).ok()?,
            data4,
        ))
    }
}

/// `IID_IUnknown`.
pub const IID_IUNKNOWN: Guid = Guid::new(0x0000_0000, 0, 0, [0xC0, 0, 0, 0, 0, 0, 0, 0x46]);
/// `IID_IClassFactory`.
pub const IID_ICLASSFACTORY: Guid = Guid::new(0x0000_0001, 0, 0, [0xC0, 0, 0, 0, 0, 0, 0, 0x46]);
/// `IID_ICorProfilerCallback`.
pub const IID_ICORPROFILERCALLBACK: Guid = Guid::new(
    0x176F_BED1,
    0xA55C,
    0x4796,
    [0x98, 0xCA, 0xA9, 0xDA, 0x0E, 0xF8, 0x83, 0xE7],
);
/// `IID_ICorProfilerCallback2`.
pub const IID_ICORPROFILERCALLBACK2: Guid = Guid::new(
    0x8A8C_C829,
    0xCCF2,
    0x49FE,
    [0xBB, 0xAE, 0x0F, 0x02, 0x22, 0x28, 0x07, 0x1A],
);
/// `IID_ICorProfilerInfo`.
pub const IID_ICORPROFILERINFO: Guid = Guid::new(
    0x28B5_557D,
    0x3F3F,
    0x48B4,
    [0x90, 0xB2, 0x5F, 0x9E, 0xEA, 0x2F, 0x6C, 0x48],
);
/// `IID_ICorProfilerInfo2`.
pub const IID_ICORPROFILERINFO2: Guid = Guid::new(
    0xCC09_35CD,
    0xA518,
    0x487D,
    [0xB0, 0xBB, 0xA9, 0x32, 0x14, 0xE6, 0x54, 0x78],
);
/// `IID_ICorProfilerInfo4`.
pub const IID_ICORPROFILERINFO4: Guid = Guid::new(
    0x0D8F_DCAA,
    0x6257,
    0x47BF,
    [0xB1, 0xBF, 0x94, 0xDA, 0xC8, 0x84, 0x66, 0xEE],
);
/// `IID_ICorProfilerInfo8`.
pub const IID_ICORPROFILERINFO8: Guid = Guid::new(
    0xC5AC_80A6,
    0x782E,
    0x4716,
    [0x80, 0x44, 0x39, 0x59, 0x8C, 0x60, 0xCF, 0xBF],
);
/// `IID_ICorProfilerInfo10`.
pub const IID_ICORPROFILERINFO10: Guid = Guid::new(
    0x2F1B_5152,
    0xC869,
    0x40C9,
    [0xAA, 0x5F, 0x3A, 0xBE, 0x02, 0x6B, 0xD7, 0x20],
);
/// `IID_ICorProfilerCallback3`.
pub const IID_ICORPROFILERCALLBACK3: Guid = Guid::new(
    0x4FD2_ED52,
    0x7731,
    0x4B8D,
    [0x94, 0x69, 0x03, 0xD2, 0xCC, 0x30, 0x86, 0xC5],
);
/// `IID_ICorProfilerInfo3`.
pub const IID_ICORPROFILERINFO3: Guid = Guid::new(
    0xB555_ED4F,
    0x452A,
    0x4E54,
    [0x8B, 0x39, 0xB5, 0x36, 0x0B, 0xAD, 0x32, 0xA0],
);
/// `IID_ICorProfilerInfo5`.
pub const IID_ICORPROFILERINFO5: Guid = Guid::new(
    0x0760_2928,
    0xCE38,
    0x4B83,
    [0x81, 0xE7, 0x74, 0xAD, 0xAF, 0x78, 0x12, 0x14],
);
/// `IID_ICorProfilerInfo6`.
pub const IID_ICORPROFILERINFO6: Guid = Guid::new(
    0xF30A_070D,
    0xBFFB,
    0x46A7,
    [0xB1, 0xD8, 0x87, 0x81, 0xEF, 0x7B, 0x69, 0x8A],
);
/// `IID_ICorProfilerInfo7`.
pub const IID_ICORPROFILERINFO7: Guid = Guid::new(
    0x9AEE_CC0D,
    0x63E0,
    0x4187,
    [0x8C, 0x00, 0xE3, 0x12, 0xF5, 0x03, 0xF6, 0x63],
);
/// `IID_ICorProfilerInfo9`.
pub const IID_ICORPROFILERINFO9: Guid = Guid::new(
    0x0081_70DB,
    0xF8CC,
    0x4796,
    [0x9A, 0x51, 0xDC, 0x8A, 0xA0, 0xB4, 0x70, 0x12],
);
/// `IID_ICorProfilerInfo11`.
pub const IID_ICORPROFILERINFO11: Guid = Guid::new(
    0x0639_8876,
    0x8987,
    0x4154,
    [0xB6, 0x21, 0x40, 0xA0, 0x0D, 0x6E, 0x4D, 0x04],
);
/// `IID_ICorProfilerInfo12`.
pub const IID_ICORPROFILERINFO12: Guid = Guid::new(
    0x27B2_4CCD,
    0x1CB1,
    0x47C5,
    [0x96, 0xEE, 0x98, 0x19, 0x0D, 0xC3, 0x09, 0x59],
);
/// `IID_ICorProfilerInfo13`.
pub const IID_ICORPROFILERINFO13: Guid = Guid::new(
    0x6E6C_7EE2,
    0x0701,
    0x4EC2,
    [0x9D, 0x29, 0x2E, 0x87, 0x33, 0xB6, 0x69, 0x34],
);
/// `IID_ICorProfilerInfo14`.
pub const IID_ICORPROFILERINFO14: Guid = Guid::new(
    0xF460_E352,
    0xD76D,
    0x4FE9,
    [0x83, 0x5F, 0xF6, 0xAF, 0x9D, 0x6E, 0x86, 0x2D],
);
/// `IID_ICorProfilerInfo15`.
pub const IID_ICORPROFILERINFO15: Guid = Guid::new(
    0xB446_462D,
    0xBD22,
    0x41DD,
    [0x87, 0x2D, 0xDC, 0x71, 0x4C, 0x49, 0xEB, 0x56],
);
/// `IID_IMetaDataImport2`.
pub const IID_IMETADATAIMPORT2: Guid = Guid::new(
    0xFCE5_EFA0,
    0x8BBA,
    0x4F8E,
    [0xA0, 0x36, 0x8F, 0x20, 0x22, 0xB0, 0x84, 0x66],
);
/// `IID_IMetaDataAssemblyImport`.
pub const IID_IMETADATAASSEMBLYIMPORT: Guid = Guid::new(
    0xEE62_470B,
    0xE94B,
    0x424E,
    [0x9B, 0x7C, 0x2F, 0x00, 0xC9, 0x24, 0x9F, 0x93],
);
/// `IID_ICorProfilerThreadEnum`.
pub const IID_ICORPROFILERTHREADENUM: Guid = Guid::new(
    0x5711_94F7,
    0x25ED,
    0x419F,
    [0xAA, 0x8B, 0x70, 0x16, 0xB3, 0x15, 0x97, 0x01],
);
/// `IID_IMetaDataImport`.
pub const IID_IMETADATAIMPORT: Guid = Guid::new(
    0x7DAC_8207,
    0xD3AE,
    0x4C75,
    [0x9B, 0x67, 0x92, 0x80, 0x1A, 0x49, 0x7D, 0x44],
);

/// `StackSnapshotCallback(funcId, ip, frameInfo, contextSize, context, clientData)`.
pub type StackSnapshotCallbackFn = unsafe extern "system-unwind" fn(
    func_id: UintPtr,
    ip: UintPtr,
    frame_info: UintPtr,
    context_size: u32,
    context: *mut u8,
    client_data: *mut c_void,
) -> HRESULT;

/// The `IUnknown` vtable.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct IUnknownVtbl {
    /// Slot 0.
    pub QueryInterface: unsafe extern "system-unwind" fn(
        this: *mut c_void,
        riid: *const Guid,
        out: *mut *mut c_void,
    ) -> HRESULT,
    /// Slot 1.
    pub AddRef: unsafe extern "system-unwind" fn(this: *mut c_void) -> u32,
    /// Slot 2.
    pub Release: unsafe extern "system-unwind" fn(this: *mut c_void) -> u32,
}

/// Declares a vtable that extends `$base` with the listed methods, in slot order.
macro_rules! vtable {
    ($(#[$doc:meta])* $name:ident : $base:ident { $($method:ident($($arg:ident: $ty:ty),* $(,)?);)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy)]
        #[repr(C)]
        pub struct $name {
            /// The base interface's slots.
            pub base: $base,
            $(
                #[doc = concat!("`", stringify!($method), "`.")]
                pub $method: unsafe extern "system-unwind" fn(this: *mut c_void $(, $arg: $ty)*) -> HRESULT,
            )*
        }

        impl $name {
            /// The method names this interface adds, in slot order.
            pub const METHODS: &'static [&'static str] = &[$(stringify!($method)),*];

            /// A vtable whose every method (except `IUnknown`'s) returns `S_OK`.
            pub fn with_stubs(unknown: IUnknownVtbl) -> $name {
                $name {
                    base: <$base>::with_stubs(unknown),
                    $($method: {
                        unsafe extern "system-unwind" fn stub(_this: *mut c_void $(, _: $ty)*) -> HRESULT {
                            0
                        }
                        stub
                    },)*
                }
            }

            /// A vtable whose every method (except `IUnknown`'s) returns `E_NOTIMPL`, for an
            /// object that implements some and refuses the rest.
            pub fn not_implemented(unknown: IUnknownVtbl) -> $name {
                $name {
                    base: <$base>::not_implemented(unknown),
                    $($method: {
                        unsafe extern "system-unwind" fn refuse(_this: *mut c_void $(, _: $ty)*) -> HRESULT {
                            E_NOTIMPL
                        }
                        refuse
                    },)*
                }
            }
        }
    };
}

impl IUnknownVtbl {
    /// `IUnknown` has no stubs: the object supplies its own.
    pub fn with_stubs(unknown: IUnknownVtbl) -> IUnknownVtbl {
        unknown
    }

    /// `IUnknown` has no defaults: the object supplies its own.
    pub fn not_implemented(unknown: IUnknownVtbl) -> IUnknownVtbl {
        unknown
    }
}

/// `E_NOTIMPL` at the ABI.
const E_NOTIMPL: HRESULT = 0x8000_4001_u32 as i32;

vtable! {
    /// `IClassFactory`.
    IClassFactoryVtbl: IUnknownVtbl {
        CreateInstance(outer: *mut c_void, riid: *const Guid, out: *mut *mut c_void);
        LockServer(lock: BOOL);
    }
}

vtable! {
    /// `ICorProfilerCallback`: slots 3–71.
    ICorProfilerCallbackVtbl: IUnknownVtbl {
        Initialize(info: *mut c_void);
        Shutdown();
        AppDomainCreationStarted(app_domain: UintPtr);
        AppDomainCreationFinished(app_domain: UintPtr, status: HRESULT);
        AppDomainShutdownStarted(app_domain: UintPtr);
        AppDomainShutdownFinished(app_domain: UintPtr, status: HRESULT);
        AssemblyLoadStarted(assembly: UintPtr);
        AssemblyLoadFinished(assembly: UintPtr, status: HRESULT);
        AssemblyUnloadStarted(assembly: UintPtr);
        AssemblyUnloadFinished(assembly: UintPtr, status: HRESULT);
        ModuleLoadStarted(module: UintPtr);
        ModuleLoadFinished(module: UintPtr, status: HRESULT);
        ModuleUnloadStarted(module: UintPtr);
        ModuleUnloadFinished(module: UintPtr, status: HRESULT);
        ModuleAttachedToAssembly(module: UintPtr, assembly: UintPtr);
        ClassLoadStarted(class: UintPtr);
        ClassLoadFinished(class: UintPtr, status: HRESULT);
        ClassUnloadStarted(class: UintPtr);
        ClassUnloadFinished(class: UintPtr, status: HRESULT);
        FunctionUnloadStarted(function: UintPtr);
        JITCompilationStarted(function: UintPtr, safe_to_block: BOOL);
        JITCompilationFinished(function: UintPtr, status: HRESULT, safe_to_block: BOOL);
        JITCachedFunctionSearchStarted(function: UintPtr, use_cached: *mut BOOL);
        JITCachedFunctionSearchFinished(function: UintPtr, result: u32);
        JITFunctionPitched(function: UintPtr);
        JITInlining(caller: UintPtr, callee: UintPtr, should_inline: *mut BOOL);
        ThreadCreated(thread: UintPtr);
        ThreadDestroyed(thread: UintPtr);
        ThreadAssignedToOSThread(thread: UintPtr, os_thread: u32);
        RemotingClientInvocationStarted();
        RemotingClientSendingMessage(cookie: *mut Guid, is_async: BOOL);
        RemotingClientReceivingReply(cookie: *mut Guid, is_async: BOOL);
        RemotingClientInvocationFinished();
        RemotingServerReceivingMessage(cookie: *mut Guid, is_async: BOOL);
        RemotingServerInvocationStarted();
        RemotingServerInvocationReturned();
        RemotingServerSendingReply(cookie: *mut Guid, is_async: BOOL);
        UnmanagedToManagedTransition(function: UintPtr, reason: u32);
        ManagedToUnmanagedTransition(function: UintPtr, reason: u32);
        RuntimeSuspendStarted(reason: u32);
        RuntimeSuspendFinished();
        RuntimeSuspendAborted();
        RuntimeResumeStarted();
        RuntimeResumeFinished();
        RuntimeThreadSuspended(thread: UintPtr);
        RuntimeThreadResumed(thread: UintPtr);
        MovedReferences(count: u32, old_starts: *mut UintPtr, new_starts: *mut UintPtr, lengths: *mut u32);
        ObjectAllocated(object: UintPtr, class: UintPtr);
        ObjectsAllocatedByClass(count: u32, classes: *mut UintPtr, objects: *mut u32);
        ObjectReferences(object: UintPtr, class: UintPtr, count: u32, refs: *mut UintPtr);
        RootReferences(count: u32, refs: *mut UintPtr);
        ExceptionThrown(object: UintPtr);
        ExceptionSearchFunctionEnter(function: UintPtr);
        ExceptionSearchFunctionLeave();
        ExceptionSearchFilterEnter(function: UintPtr);
        ExceptionSearchFilterLeave();
        ExceptionSearchCatcherFound(function: UintPtr);
        ExceptionOSHandlerEnter(unused: UintPtr);
        ExceptionOSHandlerLeave(unused: UintPtr);
        ExceptionUnwindFunctionEnter(function: UintPtr);
        ExceptionUnwindFunctionLeave();
        ExceptionUnwindFinallyEnter(function: UintPtr);
        ExceptionUnwindFinallyLeave();
        ExceptionCatcherEnter(function: UintPtr, object: UintPtr);
        ExceptionCatcherLeave();
        COMClassicVTableCreated(class: UintPtr, iid: *const Guid, vtable: *mut c_void, slots: u32);
        COMClassicVTableDestroyed(class: UintPtr, iid: *const Guid, vtable: *mut c_void);
        ExceptionCLRCatcherFound();
        ExceptionCLRCatcherExecute();
    }
}

vtable! {
    /// `ICorProfilerCallback2`: slots 72–79.
    ICorProfilerCallback2Vtbl: ICorProfilerCallbackVtbl {
        ThreadNameChanged(thread: UintPtr, len: u32, name: *mut WCHAR);
        GarbageCollectionStarted(generations: i32, collected: *mut BOOL, reason: u32);
        SurvivingReferences(count: u32, starts: *mut UintPtr, lengths: *mut u32);
        GarbageCollectionFinished();
        FinalizeableObjectQueued(flags: u32, object: UintPtr);
        RootReferences2(count: u32, refs: *mut UintPtr, kinds: *mut u32, flags: *mut u32, ids: *mut UintPtr);
        HandleCreated(handle: UintPtr, object: UintPtr);
        HandleDestroyed(handle: UintPtr);
    }
}

vtable! {
    /// `ICorProfilerInfo`: slots 3–35.
    ICorProfilerInfoVtbl: IUnknownVtbl {
        GetClassFromObject(object: UintPtr, class: *mut UintPtr);
        GetClassFromToken(module: UintPtr, type_def: u32, class: *mut UintPtr);
        GetCodeInfo(function: UintPtr, start: *mut *mut u8, size: *mut u32);
        GetEventMask(events: *mut u32);
        GetFunctionFromIP(ip: *mut u8, function: *mut UintPtr);
        GetFunctionFromToken(module: UintPtr, token: u32, function: *mut UintPtr);
        GetHandleFromThread(thread: UintPtr, handle: *mut *mut c_void);
        GetObjectSize(object: UintPtr, size: *mut u32);
        IsArrayClass(class: UintPtr, element: *mut u32, base_class: *mut UintPtr, rank: *mut u32);
        GetThreadInfo(thread: UintPtr, win32_thread: *mut u32);
        GetCurrentThreadID(thread: *mut UintPtr);
        GetClassIDInfo(class: UintPtr, module: *mut UintPtr, type_def: *mut u32);
        GetFunctionInfo(function: UintPtr, class: *mut UintPtr, module: *mut UintPtr, token: *mut u32);
        SetEventMask(events: u32);
        SetEnterLeaveFunctionHooks(enter: *mut c_void, leave: *mut c_void, tailcall: *mut c_void);
        SetFunctionIDMapper(mapper: *mut c_void);
        GetTokenAndMetaDataFromFunction(function: UintPtr, riid: *const Guid, import: *mut *mut c_void, token: *mut u32);
        GetModuleInfo(module: UintPtr, base: *mut *mut u8, len: u32, out_len: *mut u32, name: *mut WCHAR, assembly: *mut UintPtr);
        GetModuleMetaData(module: UintPtr, open_flags: u32, riid: *const Guid, out: *mut *mut c_void);
        GetILFunctionBody(module: UintPtr, method: u32, header: *mut *mut u8, size: *mut u32);
        GetILFunctionBodyAllocator(module: UintPtr, malloc: *mut *mut c_void);
        SetILFunctionBody(module: UintPtr, method: u32, header: *mut u8);
        GetAppDomainInfo(app_domain: UintPtr, len: u32, out_len: *mut u32, name: *mut WCHAR, process: *mut UintPtr);
        GetAssemblyInfo(assembly: UintPtr, len: u32, out_len: *mut u32, name: *mut WCHAR, app_domain: *mut UintPtr, module: *mut UintPtr);
        SetFunctionReJIT(function: UintPtr);
        ForceGC();
        SetILInstrumentedCodeMap(function: UintPtr, start_jit: BOOL, count: u32, map: *mut c_void);
        GetInprocInspectionInterface(out: *mut *mut c_void);
        GetInprocInspectionIThisThread(out: *mut *mut c_void);
        GetThreadContext(thread: UintPtr, context_id: *mut UintPtr);
        BeginInprocDebugging(this_thread_only: BOOL, context: *mut u32);
        EndInprocDebugging(context: u32);
        GetILToNativeMapping(function: UintPtr, len: u32, out_len: *mut u32, map: *mut c_void);
    }
}

vtable! {
    /// `ICorProfilerInfo2`: slots 36–56.
    ICorProfilerInfo2Vtbl: ICorProfilerInfoVtbl {
        DoStackSnapshot(thread: UintPtr, callback: Option<StackSnapshotCallbackFn>, flags: u32, client_data: *mut c_void, context: *mut u8, context_size: u32);
        SetEnterLeaveFunctionHooks2(enter: *mut c_void, leave: *mut c_void, tailcall: *mut c_void);
        GetFunctionInfo2(function: UintPtr, frame_info: UintPtr, class: *mut UintPtr, module: *mut UintPtr, token: *mut u32, type_args_len: u32, type_args_out: *mut u32, type_args: *mut UintPtr);
        GetStringLayout(buffer_length: *mut u32, string_length: *mut u32, buffer: *mut u32);
        GetClassLayout(class: UintPtr, offsets: *mut c_void, len: u32, out_len: *mut u32, size: *mut u32);
        GetClassIDInfo2(class: UintPtr, module: *mut UintPtr, type_def: *mut u32, parent: *mut UintPtr, len: u32, out_len: *mut u32, type_args: *mut UintPtr);
        GetCodeInfo2(function: UintPtr, len: u32, out_len: *mut u32, infos: *mut c_void);
        GetClassFromTokenAndTypeArgs(module: UintPtr, type_def: u32, len: u32, type_args: *mut UintPtr, class: *mut UintPtr);
        GetFunctionFromTokenAndTypeArgs(module: UintPtr, func_def: u32, class: UintPtr, len: u32, type_args: *mut UintPtr, function: *mut UintPtr);
        EnumModuleFrozenObjects(module: UintPtr, out: *mut *mut c_void);
        GetArrayObjectInfo(object: UintPtr, dims: u32, sizes: *mut u32, lower: *mut i32, data: *mut *mut u8);
        GetBoxClassLayout(class: UintPtr, offset: *mut u32);
        GetThreadAppDomain(thread: UintPtr, app_domain: *mut UintPtr);
        GetRVAStaticAddress(class: UintPtr, field: u32, address: *mut *mut c_void);
        GetAppDomainStaticAddress(class: UintPtr, field: u32, app_domain: UintPtr, address: *mut *mut c_void);
        GetThreadStaticAddress(class: UintPtr, field: u32, thread: UintPtr, address: *mut *mut c_void);
        GetContextStaticAddress(class: UintPtr, field: u32, context: UintPtr, address: *mut *mut c_void);
        GetStaticFieldInfo(class: UintPtr, field: u32, info: *mut u32);
        GetGenerationBounds(len: u32, out_len: *mut u32, ranges: *mut c_void);
        GetObjectGeneration(object: UintPtr, range: *mut c_void);
        GetNotifiedExceptionClauseInfo(info: *mut c_void);
    }
}

vtable! {
    /// `ICorProfilerInfo3`: slots 57–70.
    ICorProfilerInfo3Vtbl: ICorProfilerInfo2Vtbl {
        EnumJITedFunctions(out: *mut *mut c_void);
        RequestProfilerDetach(expected_ms: u32);
        SetFunctionIDMapper2(mapper: *mut c_void, client_data: *mut c_void);
        GetStringLayout2(string_length: *mut u32, buffer: *mut u32);
        SetEnterLeaveFunctionHooks3(enter: *mut c_void, leave: *mut c_void, tailcall: *mut c_void);
        SetEnterLeaveFunctionHooks3WithInfo(enter: *mut c_void, leave: *mut c_void, tailcall: *mut c_void);
        GetFunctionEnter3Info(function: UintPtr, elt: UintPtr, frame_info: *mut UintPtr, arg_size: *mut u32, args: *mut c_void);
        GetFunctionLeave3Info(function: UintPtr, elt: UintPtr, frame_info: *mut UintPtr, retval: *mut c_void);
        GetFunctionTailcall3Info(function: UintPtr, elt: UintPtr, frame_info: *mut UintPtr);
        EnumModules(out: *mut *mut c_void);
        GetRuntimeInformation(instance: *mut u16, runtime: *mut u32, major: *mut u16, minor: *mut u16, build: *mut u16, qfe: *mut u16, len: u32, out_len: *mut u32, version: *mut WCHAR);
        GetThreadStaticAddress2(class: UintPtr, field: u32, app_domain: UintPtr, thread: UintPtr, address: *mut *mut c_void);
        GetAppDomainsContainingModule(module: UintPtr, len: u32, out_len: *mut u32, app_domains: *mut UintPtr);
        GetModuleInfo2(module: UintPtr, base: *mut *mut u8, len: u32, out_len: *mut u32, name: *mut WCHAR, assembly: *mut UintPtr, flags: *mut u32);
    }
}

vtable! {
    /// `ICorProfilerInfo4`: slots 71–80.
    ICorProfilerInfo4Vtbl: ICorProfilerInfo3Vtbl {
        EnumThreads(out: *mut *mut c_void);
        InitializeCurrentThread();
        RequestReJIT(count: u32, modules: *mut UintPtr, methods: *mut u32);
        RequestRevert(count: u32, modules: *mut UintPtr, methods: *mut u32, status: *mut HRESULT);
        GetCodeInfo3(function: UintPtr, rejit: UintPtr, len: u32, out_len: *mut u32, infos: *mut c_void);
        GetFunctionFromIP2(ip: *mut u8, function: *mut UintPtr, rejit: *mut UintPtr);
        GetReJITIDs(function: UintPtr, len: u32, out_len: *mut u32, ids: *mut UintPtr);
        GetILToNativeMapping2(function: UintPtr, rejit: UintPtr, len: u32, out_len: *mut u32, map: *mut c_void);
        EnumJITedFunctions2(out: *mut *mut c_void);
        GetObjectSize2(object: UintPtr, size: *mut usize);
    }
}

vtable! {
    /// `ICorProfilerInfo5`: slots 81–82.
    ICorProfilerInfo5Vtbl: ICorProfilerInfo4Vtbl {
        GetEventMask2(low: *mut u32, high: *mut u32);
        SetEventMask2(low: u32, high: u32);
    }
}

vtable! {
    /// `ICorProfilerInfo6`: slot 83.
    ICorProfilerInfo6Vtbl: ICorProfilerInfo5Vtbl {
        EnumNgenModuleMethodsInliningThisMethod(inliners: UintPtr, inlinee: UintPtr, method: u32, incomplete: *mut BOOL, out: *mut *mut c_void);
    }
}

vtable! {
    /// `ICorProfilerInfo7`: slots 84–86.
    ICorProfilerInfo7Vtbl: ICorProfilerInfo6Vtbl {
        ApplyMetaData(module: UintPtr);
        GetInMemorySymbolsLength(module: UintPtr, len: *mut u32);
        ReadInMemorySymbols(module: UintPtr, offset: u32, bytes: *mut u8, len: u32, read: *mut u32);
    }
}

vtable! {
    /// `ICorProfilerInfo8`: slots 87–89.
    ICorProfilerInfo8Vtbl: ICorProfilerInfo7Vtbl {
        IsFunctionDynamic(function: UintPtr, dynamic: *mut BOOL);
        GetFunctionFromIP3(ip: *mut u8, function: *mut UintPtr, rejit: *mut UintPtr);
        GetDynamicFunctionInfo(function: UintPtr, module: *mut UintPtr, sig: *mut *mut u8, sig_len: *mut u32, len: u32, out_len: *mut u32, name: *mut WCHAR);
    }
}

vtable! {
    /// `ICorProfilerInfo9`: slots 90–92.
    ICorProfilerInfo9Vtbl: ICorProfilerInfo8Vtbl {
        GetNativeCodeStartAddresses(function: UintPtr, rejit: UintPtr, len: u32, out_len: *mut u32, starts: *mut UintPtr);
        GetILToNativeMapping3(start: UintPtr, len: u32, out_len: *mut u32, map: *mut c_void);
        GetCodeInfo4(start: UintPtr, len: u32, out_len: *mut u32, infos: *mut c_void);
    }
}

vtable! {
    /// `ICorProfilerInfo10`: slots 93–98.
    ICorProfilerInfo10Vtbl: ICorProfilerInfo9Vtbl {
        EnumerateObjectReferences(object: UintPtr, callback: *mut c_void, client_data: *mut c_void);
        IsFrozenObject(object: UintPtr, frozen: *mut BOOL);
        GetLOHObjectSizeThreshold(threshold: *mut u32);
        RequestReJITWithInliners(flags: u32, count: u32, modules: *mut UintPtr, methods: *mut u32);
        SuspendRuntime();
        ResumeRuntime();
    }
}

vtable! {
    /// `ICorProfilerInfo11` (.NET Core 3.1 headers and later runtimes): slots 99–100.
    ICorProfilerInfo11Vtbl: ICorProfilerInfo10Vtbl {
        GetEnvironmentVariable(name: *const WCHAR, capacity: u32, length: *mut u32, value: *mut WCHAR);
        SetEnvironmentVariable(name: *const WCHAR, value: *const WCHAR);
    }
}

vtable! {
    /// `ICorProfilerInfo12` (.NET 5): slots 101–107, EventPipe. A provider configuration is
    /// passed by value; these stubs read no argument.
    ICorProfilerInfo12Vtbl: ICorProfilerInfo11Vtbl {
        EventPipeStartSession(count: u32, configs: *const c_void, rundown: BOOL, session: *mut u64);
        EventPipeAddProviderToSession(session: u64, config: *const c_void);
        EventPipeStopSession(session: u64);
        EventPipeCreateProvider(name: *const WCHAR, provider: *mut UintPtr);
        EventPipeGetProviderInfo(provider: UintPtr, capacity: u32, length: *mut u32, name: *mut WCHAR);
        EventPipeDefineEvent(provider: UintPtr, name: *const WCHAR, id: u32, keywords: u64, version: u32, level: u32, opcode: u8, stack: BOOL, count: u32, params: *const c_void, event: *mut UintPtr);
        EventPipeWriteEvent(event: UintPtr, count: u32, data: *const c_void, activity: *const Guid, related: *const Guid);
    }
}

vtable! {
    /// `ICorProfilerInfo13` (.NET 7): slots 108–110, object handles.
    ICorProfilerInfo13Vtbl: ICorProfilerInfo12Vtbl {
        CreateHandle(object: UintPtr, kind: u32, handle: *mut UintPtr);
        DestroyHandle(handle: UintPtr);
        GetObjectIDFromHandle(handle: UintPtr, object: *mut UintPtr);
    }
}

vtable! {
    /// `ICorProfilerInfo14` (.NET 8): slots 111–113.
    ICorProfilerInfo14Vtbl: ICorProfilerInfo13Vtbl {
        EnumerateNonGCObjects(objects: *mut *mut c_void);
        GetNonGCHeapBounds(capacity: u32, count: *mut u32, ranges: *mut c_void);
        EventPipeCreateProvider2(name: *const WCHAR, callback: *mut c_void, provider: *mut UintPtr);
    }
}

vtable! {
    /// `ICorProfilerInfo15` (.NET 9): slot 114.
    ICorProfilerInfo15Vtbl: ICorProfilerInfo14Vtbl {
        EnumerateGCHeapObjects(callback: *mut c_void, data: *mut c_void);
    }
}

vtable! {
    /// `ICorProfilerThreadEnum`.
    ICorProfilerThreadEnumVtbl: IUnknownVtbl {
        Skip(count: u32);
        Reset();
        Clone(out: *mut *mut c_void);
        GetCount(count: *mut u32);
        Next(count: u32, ids: *mut UintPtr, fetched: *mut u32);
    }
}

vtable! {
    /// `IMetaDataImport`: slots 3–64 (`GetMethodProps` is 30).
    IMetaDataImportVtbl: IUnknownVtbl {
        CloseEnum(e: *mut c_void);
        CountEnum(e: *mut c_void, count: *mut u32);
        ResetEnum(e: *mut c_void, position: u32);
        EnumTypeDefs(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        EnumInterfaceImpls(e: *mut *mut c_void, type_def: u32, tokens: *mut u32, max: u32, count: *mut u32);
        EnumTypeRefs(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        FindTypeDefByName(name: *const WCHAR, enclosing: u32, type_def: *mut u32);
        GetScopeProps(name: *mut WCHAR, len: u32, out_len: *mut u32, mvid: *mut Guid);
        GetModuleFromScope(module: *mut u32);
        GetTypeDefProps(type_def: u32, name: *mut WCHAR, len: u32, out_len: *mut u32, flags: *mut u32, extends: *mut u32);
        GetInterfaceImplProps(impl_token: u32, class: *mut u32, interface: *mut u32);
        GetTypeRefProps(type_ref: u32, scope: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32);
        ResolveTypeRef(type_ref: u32, riid: *const Guid, scope: *mut *mut c_void, type_def: *mut u32);
        EnumMembers(e: *mut *mut c_void, class: u32, tokens: *mut u32, max: u32, count: *mut u32);
        EnumMembersWithName(e: *mut *mut c_void, class: u32, name: *const WCHAR, tokens: *mut u32, max: u32, count: *mut u32);
        EnumMethods(e: *mut *mut c_void, class: u32, tokens: *mut u32, max: u32, count: *mut u32);
        EnumMethodsWithName(e: *mut *mut c_void, class: u32, name: *const WCHAR, tokens: *mut u32, max: u32, count: *mut u32);
        EnumFields(e: *mut *mut c_void, class: u32, tokens: *mut u32, max: u32, count: *mut u32);
        EnumFieldsWithName(e: *mut *mut c_void, class: u32, name: *const WCHAR, tokens: *mut u32, max: u32, count: *mut u32);
        EnumParams(e: *mut *mut c_void, method: u32, tokens: *mut u32, max: u32, count: *mut u32);
        EnumMemberRefs(e: *mut *mut c_void, parent: u32, tokens: *mut u32, max: u32, count: *mut u32);
        EnumMethodImpls(e: *mut *mut c_void, type_def: u32, bodies: *mut u32, decls: *mut u32, max: u32, count: *mut u32);
        EnumPermissionSets(e: *mut *mut c_void, token: u32, actions: u32, tokens: *mut u32, max: u32, count: *mut u32);
        FindMember(type_def: u32, name: *const WCHAR, sig: *const u8, sig_len: u32, member: *mut u32);
        FindMethod(type_def: u32, name: *const WCHAR, sig: *const u8, sig_len: u32, method: *mut u32);
        FindField(type_def: u32, name: *const WCHAR, sig: *const u8, sig_len: u32, field: *mut u32);
        FindMemberRef(type_ref: u32, name: *const WCHAR, sig: *const u8, sig_len: u32, member_ref: *mut u32);
        GetMethodProps(method: u32, class: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, attributes: *mut u32, sig: *mut *const u8, sig_len: *mut u32, rva: *mut u32, impl_flags: *mut u32);
        GetMemberRefProps(member_ref: u32, parent: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, sig: *mut *const u8, sig_len: *mut u32);
        EnumProperties(e: *mut *mut c_void, type_def: u32, tokens: *mut u32, max: u32, count: *mut u32);
        EnumEvents(e: *mut *mut c_void, type_def: u32, tokens: *mut u32, max: u32, count: *mut u32);
        GetEventProps(event: u32, class: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, flags: *mut u32, kind: *mut u32, add: *mut u32, remove: *mut u32, fire: *mut u32, other: *mut u32, max: u32, count: *mut u32);
        EnumMethodSemantics(e: *mut *mut c_void, method: u32, tokens: *mut u32, max: u32, count: *mut u32);
        GetMethodSemantics(method: u32, event_prop: u32, flags: *mut u32);
        GetClassLayout(type_def: u32, pack: *mut u32, offsets: *mut c_void, max: u32, count: *mut u32, size: *mut u32);
        GetFieldMarshal(token: u32, sig: *mut *const u8, sig_len: *mut u32);
        GetRVA(token: u32, rva: *mut u32, flags: *mut u32);
        GetPermissionSetProps(token: u32, action: *mut u32, blob: *mut *const c_void, blob_len: *mut u32);
        GetSigFromToken(token: u32, sig: *mut *const u8, sig_len: *mut u32);
        GetModuleRefProps(module_ref: u32, name: *mut WCHAR, len: u32, out_len: *mut u32);
        EnumModuleRefs(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        GetTypeSpecFromToken(type_spec: u32, sig: *mut *const u8, sig_len: *mut u32);
        GetNameFromToken(token: u32, name: *mut *const u8);
        EnumUnresolvedMethods(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        GetUserString(token: u32, text: *mut WCHAR, len: u32, out_len: *mut u32);
        GetPinvokeMap(token: u32, flags: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, module_ref: *mut u32);
        EnumSignatures(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        EnumTypeSpecs(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        EnumUserStrings(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        GetParamForMethodIndex(method: u32, index: u32, param: *mut u32);
        EnumCustomAttributes(e: *mut *mut c_void, scope: u32, kind: u32, tokens: *mut u32, max: u32, count: *mut u32);
        GetCustomAttributeProps(attribute: u32, scope: *mut u32, kind: *mut u32, blob: *mut *const c_void, blob_len: *mut u32);
        FindTypeRef(scope: u32, name: *const WCHAR, type_ref: *mut u32);
        GetMemberProps(member: u32, class: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, attributes: *mut u32, sig: *mut *const u8, sig_len: *mut u32, rva: *mut u32, impl_flags: *mut u32, kind: *mut u32, value: *mut *const c_void, value_len: *mut u32);
        GetFieldProps(field: u32, class: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, attributes: *mut u32, sig: *mut *const u8, sig_len: *mut u32, kind: *mut u32, value: *mut *const c_void, value_len: *mut u32);
        GetPropertyProps(property: u32, class: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, flags: *mut u32, sig: *mut *const u8, sig_len: *mut u32, kind: *mut u32, value: *mut *const c_void, value_len: *mut u32, setter: *mut u32, getter: *mut u32, other: *mut u32, max: u32, count: *mut u32);
        GetParamProps(param: u32, method: *mut u32, sequence: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, attributes: *mut u32, kind: *mut u32, value: *mut *const c_void, value_len: *mut u32);
        GetCustomAttributeByName(scope: u32, name: *const WCHAR, data: *mut *const c_void, data_len: *mut u32);
        IsValidToken(token: u32);
        GetNestedClassProps(nested: u32, enclosing: *mut u32);
        GetNativeCallConvFromSig(sig: *const c_void, sig_len: u32, convention: *mut u32);
        IsGlobal(token: u32, global: *mut i32);
    }
}

vtable! {
    /// `IMetaDataImport2`: `IMetaDataImport` (slots 3–64) and slots 65–72, generics and the
    /// metadata version.
    IMetaDataImport2Vtbl: IMetaDataImportVtbl {
        EnumGenericParams(e: *mut *mut c_void, token: u32, params: *mut u32, max: u32, count: *mut u32);
        GetGenericParamProps(param: u32, sequence: *mut u32, flags: *mut u32, owner: *mut u32, reserved: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32);
        GetMethodSpecProps(method_spec: u32, parent: *mut u32, sig: *mut *const u8, sig_len: *mut u32);
        EnumGenericParamConstraints(e: *mut *mut c_void, param: u32, constraints: *mut u32, max: u32, count: *mut u32);
        GetGenericParamConstraintProps(constraint: u32, param: *mut u32, kind: *mut u32);
        GetPEKind(kind: *mut u32, machine: *mut u32);
        GetVersionString(text: *mut WCHAR, len: u32, out_len: *mut u32);
        EnumMethodSpecs(e: *mut *mut c_void, token: u32, specs: *mut u32, max: u32, count: *mut u32);
    }
}

vtable! {
    /// `IMetaDataAssemblyImport`: the manifest of a module's assembly (slots 3–16).
    IMetaDataAssemblyImportVtbl: IUnknownVtbl {
        GetAssemblyProps(assembly: u32, key: *mut *const c_void, key_len: *mut u32, hash: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, metadata: *mut c_void, flags: *mut u32);
        GetAssemblyRefProps(assembly_ref: u32, key: *mut *const c_void, key_len: *mut u32, name: *mut WCHAR, len: u32, out_len: *mut u32, metadata: *mut c_void, hash: *mut *const c_void, hash_len: *mut u32, flags: *mut u32);
        GetFileProps(file: u32, name: *mut WCHAR, len: u32, out_len: *mut u32, hash: *mut *const c_void, hash_len: *mut u32, flags: *mut u32);
        GetExportedTypeProps(exported: u32, name: *mut WCHAR, len: u32, out_len: *mut u32, implementation: *mut u32, type_def: *mut u32, flags: *mut u32);
        GetManifestResourceProps(resource: u32, name: *mut WCHAR, len: u32, out_len: *mut u32, implementation: *mut u32, offset: *mut u32, flags: *mut u32);
        EnumAssemblyRefs(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        EnumFiles(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        EnumExportedTypes(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        EnumManifestResources(e: *mut *mut c_void, tokens: *mut u32, max: u32, count: *mut u32);
        GetAssemblyFromScope(assembly: *mut u32);
        FindExportedTypeByName(name: *const WCHAR, enclosing: u32, exported: *mut u32);
        FindManifestResourceByName(name: *const WCHAR, resource: *mut u32);
        CloseEnum(e: *mut c_void);
        FindAssembliesByName(app_base: *const WCHAR, private_bin: *const WCHAR, name: *const WCHAR, assemblies: *mut *mut c_void, max: u32, count: *mut u32);
    }
}

/// The slot index of a vtable field at byte `offset` (slots are pointer-sized).
pub const fn slot(offset: usize) -> usize {
    offset / std::mem::size_of::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn slots_match_the_real_runtime() {
        // The vtable slots the conformance profiler calls on CoreCLR 3.1.
        type Info = ICorProfilerInfo10Vtbl;
        let info = |o: usize| slot(o);
        let i2 = offset_of!(Info, base.base.base.base.base.base.base.base);
        let i1 = i2 + offset_of!(ICorProfilerInfo2Vtbl, base);
        assert_eq!(info(i1 + offset_of!(ICorProfilerInfoVtbl, GetThreadInfo)), 12);
        assert_eq!(
            info(i1 + offset_of!(ICorProfilerInfoVtbl, GetCurrentThreadID)),
            13
        );
        assert_eq!(info(i1 + offset_of!(ICorProfilerInfoVtbl, GetClassIDInfo)), 14);
        assert_eq!(info(i1 + offset_of!(ICorProfilerInfoVtbl, GetFunctionInfo)), 15);
        assert_eq!(info(i1 + offset_of!(ICorProfilerInfoVtbl, SetEventMask)), 16);
        assert_eq!(info(i1 + offset_of!(ICorProfilerInfoVtbl, GetModuleMetaData)), 21);
        assert_eq!(info(i2 + offset_of!(ICorProfilerInfo2Vtbl, DoStackSnapshot)), 36);
        assert_eq!(info(offset_of!(Info, SuspendRuntime)), 97);
        assert_eq!(info(offset_of!(Info, ResumeRuntime)), 98);
        assert_eq!(size_of::<Info>(), 99 * 8);
        type Callback = ICorProfilerCallback2Vtbl;
        let c1 = offset_of!(Callback, base);
        assert_eq!(slot(c1 + offset_of!(ICorProfilerCallbackVtbl, Initialize)), 3);
        assert_eq!(
            slot(c1 + offset_of!(ICorProfilerCallbackVtbl, ModuleLoadFinished)),
            14
        );
        assert_eq!(slot(c1 + offset_of!(ICorProfilerCallbackVtbl, ThreadCreated)), 29);
        assert_eq!(
            slot(c1 + offset_of!(ICorProfilerCallbackVtbl, ThreadDestroyed)),
            30
        );
        assert_eq!(
            slot(c1 + offset_of!(ICorProfilerCallbackVtbl, ThreadAssignedToOSThread)),
            31
        );
        assert_eq!(
            slot(c1 + offset_of!(ICorProfilerCallbackVtbl, ObjectAllocated)),
            50
        );
        assert_eq!(slot(offset_of!(Callback, GarbageCollectionStarted)), 73);
        assert_eq!(size_of::<Callback>(), 80 * 8);
        assert_eq!(slot(offset_of!(IMetaDataImportVtbl, GetTypeDefProps)), 12);
        assert_eq!(slot(offset_of!(IMetaDataImportVtbl, GetMethodProps)), 30);
        assert_eq!(slot(offset_of!(IMetaDataImportVtbl, GetNestedClassProps)), 62);
        assert_eq!(size_of::<IMetaDataImportVtbl>(), 65 * 8);
        assert_eq!(slot(offset_of!(IMetaDataImport2Vtbl, GetVersionString)), 71);
        assert_eq!(size_of::<IMetaDataImport2Vtbl>(), 73 * 8);
        assert_eq!(
            slot(offset_of!(IMetaDataAssemblyImportVtbl, GetAssemblyFromScope)),
            12
        );
        assert_eq!(size_of::<IMetaDataAssemblyImportVtbl>(), 17 * 8);
        type Later = ICorProfilerInfo15Vtbl;
        assert_eq!(
            slot(offset_of!(Later, base.base.base.base.GetEnvironmentVariable)),
            99
        );
        assert_eq!(slot(offset_of!(Later, base.base.base.EventPipeStartSession)), 101);
        assert_eq!(slot(offset_of!(Later, base.base.CreateHandle)), 108);
        assert_eq!(slot(offset_of!(Later, base.EnumerateNonGCObjects)), 111);
        assert_eq!(slot(offset_of!(Later, EnumerateGCHeapObjects)), 114);
        assert_eq!(
            slot(offset_of!(ICorProfilerInfo4Vtbl, InitializeCurrentThread)),
            72
        );
        assert_eq!(slot(offset_of!(ICorProfilerInfo4Vtbl, GetFunctionFromIP2)), 76);
        assert_eq!(slot(offset_of!(ICorProfilerInfo8Vtbl, GetFunctionFromIP3)), 88);
    }

    #[test]
    fn guids_parse_in_registry_form() {
        assert_eq!(
            Guid::parse("{8A4B6C2D-1E3F-4A5B-9C8D-7E6F5A4B3C2D}"),
            Some(Guid::new(
                0x8A4B_6C2D,
                0x1E3F,
                0x4A5B,
                [0x9C, 0x8D, 0x7E, 0x6F, 0x5A, 0x4B, 0x3C, 0x2D]
            ))
        );
        assert_eq!(
            Guid::parse("00000000-0000-0000-c000-000000000046"),
            Some(IID_IUNKNOWN)
        );
        for bad in [
            "",
            "{}",
            "8A4B6C2D-1E3F-4A5B-9C8D",
            "8A4B6C2D-1E3F-4A5B-9C8D-7E6F5A4B3C2G",
            "{8A4B6C2D1E3F4A5B9C8D7E6F5A4B3C2D}",
        ] {
            assert_eq!(Guid::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn stubs_answer_s_ok() {
        unsafe extern "system-unwind" fn qi(_: *mut c_void, _: *const Guid, _: *mut *mut c_void) -> HRESULT {
            -1
        }
        unsafe extern "system-unwind" fn rc(_: *mut c_void) -> u32 {
            1
        }
        let v = ICorProfilerCallback2Vtbl::with_stubs(IUnknownVtbl {
            QueryInterface: qi,
            AddRef: rc,
            Release: rc,
        });
        // SAFETY: the stub ignores its arguments.
        unsafe {
            assert_eq!((v.base.ObjectAllocated)(std::ptr::null_mut(), 1, 2), 0);
            assert_eq!((v.GarbageCollectionFinished)(std::ptr::null_mut()), 0);
        }
    }
}
