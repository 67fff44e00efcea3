//! Runtime frame templates: the frame sequences CoreCLR itself puts on a thread's stack around
//! the application's code — a thread's start, a thread-pool work item, an async continuation,
//! a reflection call, a static constructor, the finalizer thread, a wait — usable in a
//! thread's `frames` as `{ template = "NAME" }`.
//!
//! Each template has its entries per runtime version. The managed frames and where the native
//! runs lie are what `DoStackSnapshot` reported on CoreCLR 3.1.23 and on .NET 8.0.4 for each
//! shape (`conformance/programs/Runtime.cs`, compared again by every run of the conformance
//! lane on both runtimes). A walk cannot name native frames, so the native ones are the
//! functions CoreCLR 3.1's sources run there, one or a few per run, kept for .NET 8.
//!
//! .NET 9 and 10 have .NET 8's entries (not observed), except where exception dispatch became
//! managed code (the `*_dispatch` templates; see
//! [`RuntimeVersion::dispatches_exceptions_in_managed_code`]).

use crate::code::{CodeKind, FunctionSpec};
use crate::runtime::RuntimeVersion;
use crate::thread::FrameKind;

/// One entry of a template, leaf first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Entry {
    /// A call of a method of `System.Private.CoreLib.dll` (ReadyToRun code).
    CoreLib(&'static str),
    /// A call of a native function of `libcoreclr.so`.
    Runtime(&'static str),
    /// An explicit Frame.
    Frame(FrameKind),
    /// A call of a method of CoreLib's managed exception dispatch (`System.Runtime.EH`,
    /// `System.Runtime.ExceptionServices.InternalCalls`), which .NET 10's walks leave out
    /// ([`RuntimeVersion::hides_exception_dispatch`]).
    Dispatch(&'static str),
}

use Entry::{CoreLib, Dispatch, Frame, Runtime};

/// A named template.
#[derive(Clone, Copy, Debug)]
pub struct Template {
    /// Its name in scenario files.
    pub name: &'static str,
    /// Where it goes on a stack.
    pub doc: &'static str,
    /// Its entries on CoreCLR 3.1, leaf first, in parts that templates share.
    pub(super) core31: &'static [&'static [Entry]],
    /// Its entries on .NET 8, where they differ from 3.1's.
    pub(super) net8: Option<&'static [&'static [Entry]]>,
    /// Its entries on .NET 9 and 10, where they differ from .NET 8's.
    pub(super) net9: Option<&'static [&'static [Entry]]>,
}

/// The bottom of a thread started with `new Thread(…)` on CoreCLR 3.1, below its start method.
const THREAD_START_31: &[Entry] = &[
    CoreLib("System.Threading.ThreadHelper::ThreadStart_Context"),
    CoreLib("System.Threading.ExecutionContext::RunInternal"),
    CoreLib("System.Threading.ThreadHelper::ThreadStart"),
    Runtime("libcoreclr.so!CallDescrWorkerInternal"),
    Runtime("libcoreclr.so!ThreadNative::KickOffThread"),
];

/// The same on .NET 8: no managed frame is reported below the start method (observed:
/// `t_thread`, `t_wait`, `t_in_catch`).
const THREAD_START_8: &[Entry] = &[
    Runtime("libcoreclr.so!CallDescrWorkerInternal"),
    Runtime("libcoreclr.so!ThreadNative::KickOffThread"),
];

/// .NET 8's thread-pool worker below a work item: the portable thread pool's managed worker
/// thread (observed: `t_pool`, `t_async`).
const POOL_DISPATCH_8: &[Entry] = &[
    CoreLib("System.Threading.ThreadPoolWorkQueue::Dispatch"),
    CoreLib("WorkerThread::WorkerThreadStart"),
];

/// The native run of a reflection call between the called method and its managed caller.
const INVOKE_NATIVE: &[Entry] = &[
    Runtime("libcoreclr.so!CallDescrWorkerInternal"),
    Runtime("libcoreclr.so!RuntimeMethodHandle::InvokeMethod"),
    Frame(FrameKind::HelperMethod),
];

/// The async continuation's own frames above the thread pool's.
const ASYNC_BOX: &[Entry] = &[
    CoreLib("AsyncStateMachineBox`1::ExecutionContextCallback"),
    CoreLib("System.Threading.ExecutionContext::RunFromThreadPoolDispatchLoop"),
    CoreLib("AsyncStateMachineBox`1::MoveNext"),
    CoreLib("AsyncStateMachineBox`1::ExecuteFromThreadPool"),
];

/// A thread-pool worker's frames below the work item's own on CoreCLR 3.1.
const POOL_DISPATCH: &[Entry] = &[
    CoreLib("System.Threading.ThreadPoolWorkQueue::Dispatch"),
    CoreLib("System.Threading._ThreadPoolWaitCallback::PerformWaitCallback"),
    Runtime("libcoreclr.so!CallDescrWorkerInternal"),
    Runtime("libcoreclr.so!ManagedPerAppDomainTPCount::DispatchWorkItem"),
    Runtime("libcoreclr.so!ThreadpoolMgr::WorkerThreadStart"),
];

/// Between a running exception handler and the method that threw on CoreCLR 3.1 and .NET 8:
/// the runtime's native dispatcher, entered by `IL_Throw` below its Frame (observed:
/// `t_in_filter`, `t_in_catch`, `catch`, `finally`, `filter`).
const NATIVE_DISPATCH: &[Entry] = &[
    Runtime("libcoreclr.so!ProcessCLRException"),
    Frame(FrameKind::HelperMethod),
];

/// Below managed exception dispatch (.NET 9 and 10), above the method that threw: `IL_Throw`
/// and its Frame, and `DispatchManagedException`, which calls `EH.RhThrowEx` through
/// `CallDescrWorkerInternal` (`dotnet/runtime` `src/coreclr/vm/exceptionhandling.cpp`,
/// `DispatchManagedException`).
const THROW_INTO_MANAGED_DISPATCH: &[Entry] = &[
    Dispatch("System.Runtime.EH::DispatchEx"),
    Dispatch("System.Runtime.EH::RhThrowEx"),
    Runtime("libcoreclr.so!CallDescrWorkerInternal"),
    Runtime("libcoreclr.so!DispatchManagedException"),
    Runtime("libcoreclr.so!IL_Throw"),
    Frame(FrameKind::HelperMethod),
];

/// Every template, by name.
pub const TEMPLATES: [Template; 16] = [
    Template {
        name: "main",
        doc: "the bottom of the main thread, between `Main` and the host that started the runtime",
        // The runtime calls `Main` through `RunMain` (`src/vm/assembly.cpp`) and
        // `MethodDescCallSite`, whose `CallDescrWorkerInternal` (`src/vm/amd64/
        // calldescrworkeramd64.S`, CoreCLR v3.1.23) makes the call: the trailing
        // `funcId == 0` below `Main` has its IP in libcoreclr.so (coreclr.dll on Windows) on
        // both runtimes (observed: every walk of the lane's main thread).
        core31: &[&[Runtime("libcoreclr.so!CallDescrWorkerInternal")]],
        net8: None,
        net9: None,
    },
    Template {
        name: "thread_start",
        doc: "the bottom of a thread started with `new Thread(…)`, below its start method",
        core31: &[THREAD_START_31],
        net8: Some(&[THREAD_START_8]),
        net9: None,
    },
    Template {
        name: "thread_pool",
        doc: "the bottom of a thread-pool thread running a `ThreadPool.QueueUserWorkItem` callback, below the callback",
        core31: &[
            &[CoreLib("System.Threading.QueueUserWorkItemCallbackDefaultContext::Execute")],
            POOL_DISPATCH,
        ],
        // The work item's `Execute` is not reported (observed: `t_pool`).
        net8: Some(&[POOL_DISPATCH_8, THREAD_START_8]),
        net9: None,
    },
    Template {
        name: "async_continuation",
        doc: "the bottom of a thread-pool thread resuming an async method after an `await`, below the state machine's `MoveNext`",
        core31: &[ASYNC_BOX, POOL_DISPATCH],
        net8: Some(&[ASYNC_BOX, POOL_DISPATCH_8, THREAD_START_8]),
        net9: None,
    },
    Template {
        name: "reflection_invoke",
        doc: "between a method called through `MethodInfo.Invoke(obj, null)` (no arguments) and its caller",
        core31: &[INVOKE_NATIVE, &[CoreLib("System.Reflection.RuntimeMethodInfo::Invoke")]],
        // .NET 8's invoker (observed: `t_reflection`).
        net8: Some(&[
            INVOKE_NATIVE,
            &[CoreLib("System.Reflection.MethodBaseInvoker::InvokeWithNoArgs")],
        ]),
        net9: None,
    },
    Template {
        name: "reflection_invoke_one_arg",
        doc: "between a method called through `MethodBase.Invoke(obj, args)` with one argument and its caller",
        core31: &[
            INVOKE_NATIVE,
            &[
                CoreLib("System.Reflection.RuntimeMethodInfo::Invoke"),
                CoreLib("System.Reflection.MethodBase::Invoke"),
            ],
        ],
        // `MethodBase::Invoke` is not reported on .NET 8 (observed: `t_unload/save`).
        net8: Some(&[
            INVOKE_NATIVE,
            &[
                CoreLib("System.Reflection.MethodBaseInvoker::InvokeDirectByRefWithFewArgs"),
                CoreLib("System.Reflection.MethodBaseInvoker::InvokeWithOneArg"),
            ],
        ]),
        net9: None,
    },
    Template {
        name: "cctor_trigger",
        doc: "between a static constructor and the method whose access ran it",
        core31: &[&[
            Runtime("libcoreclr.so!CallDescrWorkerInternal"),
            Runtime("libcoreclr.so!MethodTable::RunClassInitEx"),
            Runtime("libcoreclr.so!MethodTable::DoRunClassInitThrowing"),
            Runtime("libcoreclr.so!JIT_GetSharedNonGCStaticBase_Helper"),
            Frame(FrameKind::HelperMethod),
        ]],
        // The same walk (observed: `t_cctor`).
        net8: None,
        net9: None,
    },
    Template {
        name: "finalizer",
        doc: "the bottom of the finalizer thread, below a `Finalize` method",
        core31: &[&[
            Runtime("libcoreclr.so!FastCallFinalizeWorker"),
            Runtime("libcoreclr.so!MethodTable::CallFinalizer"),
            Runtime("libcoreclr.so!FinalizerThread::FinalizeAllObjects"),
            Runtime("libcoreclr.so!FinalizerThread::FinalizerThreadWorker"),
            Runtime("libcoreclr.so!FinalizerThread::FinalizerThreadStart"),
        ]],
        // The same walk (observed: `t_finalizer`).
        net8: None,
        net9: None,
    },
    Template {
        name: "wait",
        doc: "the top of a thread blocked in `WaitHandle.WaitOne`, above its caller",
        core31: &[&[
            Runtime("libcoreclr.so!WaitHandleNative::CorWaitOneNative"),
            Frame(FrameKind::HelperMethod),
            CoreLib("System.Threading.WaitHandle::WaitOneNoCheck"),
            CoreLib("System.Threading.WaitHandle::WaitOne"),
        ]],
        // `WaitOne` is inlined into its caller (observed: `t_wait/target`).
        net8: Some(&[&[
            Runtime("libcoreclr.so!WaitHandleNative::CorWaitOneNative"),
            Frame(FrameKind::HelperMethod),
            CoreLib("System.Threading.WaitHandle::WaitOneNoCheck"),
        ]]),
        net9: None,
    },
    Template {
        name: "task_run",
        doc: "the bottom of a thread-pool thread running a `Task.Run` work item, below the delegate's method",
        core31: &[
            &[
                CoreLib("System.Threading.Tasks.Task::InnerInvoke"),
                CoreLib("<>c::<.cctor>b__274_0"),
                CoreLib("System.Threading.ExecutionContext::RunFromThreadPoolDispatchLoop"),
                CoreLib("System.Threading.Tasks.Task::ExecuteWithThreadLocal"),
                CoreLib("System.Threading.Tasks.Task::ExecuteEntryUnsafe"),
                CoreLib("System.Threading.Tasks.Task::ExecuteFromThreadPool"),
            ],
            POOL_DISPATCH,
        ],
        // The task's invocation is inlined into `RunFromThreadPoolDispatchLoop` and the
        // thread-pool entry into `Dispatch` (observed: `t_task_run`).
        net8: Some(&[
            &[
                CoreLib("System.Threading.ExecutionContext::RunFromThreadPoolDispatchLoop"),
                CoreLib("System.Threading.Tasks.Task::ExecuteWithThreadLocal"),
            ],
            POOL_DISPATCH_8,
            THREAD_START_8,
        ]),
        net9: None,
    },
    Template {
        name: "sleep",
        doc: "the top of a thread blocked in `Thread.Sleep`, above its caller",
        core31: &[&[
            Runtime("libcoreclr.so!ThreadNative::Sleep"),
            Frame(FrameKind::HelperMethod),
            CoreLib("System.Threading.Thread::Sleep"),
        ]],
        // The same walk (observed: `t_sleep/target`).
        net8: None,
        net9: None,
    },
    Template {
        name: "monitor_enter",
        doc: "the top of a thread blocked entering a contended `lock`, above the method with the `lock` statement",
        core31: &[&[
            Runtime("libcoreclr.so!JIT_MonEnter_Helper"),
            Runtime("libcoreclr.so!JIT_MonReliableEnter_Portable"),
            Frame(FrameKind::HelperMethod),
            CoreLib("System.Threading.Monitor::Enter"),
        ]],
        // The JIT calls the runtime's helper from the locking method itself: no
        // `Monitor::Enter` frame (observed: `t_monitor/target`).
        net8: Some(&[&[
            Runtime("libcoreclr.so!JIT_MonEnter_Helper"),
            Runtime("libcoreclr.so!JIT_MonReliableEnter_Portable"),
            Frame(FrameKind::HelperMethod),
        ]]),
        net9: None,
    },
    Template {
        name: "reverse_pinvoke",
        doc: "between managed code that native code called (a delegate, or an `UnmanagedCallersOnly` method) and that native caller",
        // CoreCLR 3.1 enters through `UMThunkStub`, a native frame of its own holding a
        // `UMThkCallFrame` (`src/vm/amd64/umthunkstub.S`): the walk's `funcId == 0` for the
        // native run below has its IP there, in libcoreclr.so, even where the native caller
        // has no frame of its own (observed: `t_sandwich2`, `t_sandwich_framed`, `t_uco`).
        core31: &[&[Frame(FrameKind::ReversePInvoke), Runtime("libcoreclr.so!UMThunkStub")]],
        // .NET 8 enters a delegate through its reverse P/Invoke IL stub, which the walk does
        // not report, and an `UnmanagedCallersOnly` method through the method's own prolog:
        // neither leaves a native frame or a Frame. The managed code returns straight into
        // its native caller, whose run gets its `funcId == 0` with the IP there (observed:
        // `t_sandwich_framed`, `t_uco`); a native caller that jumped to the delegate (its
        // call was its last act) leaves no frame, so there is no run and no callback
        // (observed: `t_sandwich2`).
        net8: Some(&[]),
        net9: None,
    },
    Template {
        name: "filter_dispatch",
        doc: "between a running filter funclet and the method that threw",
        core31: &[NATIVE_DISPATCH],
        net8: None,
        // The first pass calls the filter through a QCall from `EH.FindFirstPassHandler`
        // (`ExceptionHandling.cs`; `CallFilterFunclet` in `exceptionhandlingqcalls.h`).
        net9: Some(&[
            &[
                Runtime("libcoreclr.so!CallFilterFunclet"),
                Frame(FrameKind::InlinedCall),
                Dispatch("System.Runtime.ExceptionServices.InternalCalls::RhpCallFilterFunclet"),
                Dispatch("System.Runtime.EH::FindFirstPassHandler"),
            ],
            THROW_INTO_MANAGED_DISPATCH,
        ]),
    },
    Template {
        name: "catch_dispatch",
        doc: "between a running catch funclet and the method that threw",
        core31: &[NATIVE_DISPATCH],
        net8: None,
        // `EH.DispatchEx` calls the catch funclet through a QCall once the first pass found it.
        net9: Some(&[
            &[
                Runtime("libcoreclr.so!CallCatchFunclet"),
                Frame(FrameKind::InlinedCall),
                Dispatch("System.Runtime.ExceptionServices.InternalCalls::RhpCallCatchFunclet"),
            ],
            THROW_INTO_MANAGED_DISPATCH,
        ]),
    },
    Template {
        name: "finally_dispatch",
        doc: "between a finally funclet an exception runs and the method that threw",
        core31: &[NATIVE_DISPATCH],
        net8: None,
        // `EH.InvokeSecondPass`, called by `DispatchEx`, runs each finally through a QCall.
        net9: Some(&[
            &[
                Runtime("libcoreclr.so!CallFinallyFunclet"),
                Frame(FrameKind::InlinedCall),
                Dispatch("System.Runtime.ExceptionServices.InternalCalls::RhpCallFinallyFunclet"),
                Dispatch("System.Runtime.EH::InvokeSecondPass"),
            ],
            THROW_INTO_MANAGED_DISPATCH,
        ]),
    },
];

impl Template {
    /// The template called `name`.
    pub fn named(name: &str) -> Option<&'static Template> {
        TEMPLATES.iter().find(|t| t.name == name)
    }

    /// Its entries on `version`, leaf first.
    pub(super) fn entries(&self, version: RuntimeVersion) -> impl Iterator<Item = Entry> + '_ {
        let net8 = self.net8.unwrap_or(self.core31);
        let parts = match version {
            RuntimeVersion::Core31 => self.core31,
            RuntimeVersion::Net8 => net8,
            RuntimeVersion::Net9 | RuntimeVersion::Net10 => self.net9.unwrap_or(net8),
        };
        parts.iter().flat_map(|part| part.iter().copied())
    }

    /// The explicit Frames among its entries on `version`, leaf first.
    pub fn frames(&self, version: RuntimeVersion) -> impl Iterator<Item = FrameKind> + '_ {
        self.entries(version).filter_map(|e| match e {
            Frame(kind) => Some(kind),
            _ => None,
        })
    }
}

/// The functions the templates in `used` call on `version`, each once, except those named in
/// `declared` (a scenario may declare a template's function itself, with its own kind or size).
pub(super) fn functions<'a>(
    used: impl IntoIterator<Item = &'a Template>,
    version: RuntimeVersion,
    declared: &std::collections::BTreeSet<&str>,
) -> Vec<FunctionSpec> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for template in used {
        for entry in template.entries(version) {
            let (name, kind, module) = match entry {
                CoreLib(name) | Dispatch(name) => (name, CodeKind::ReadyToRun, "System.Private.CoreLib.dll"),
                Runtime(name) => (name, CodeKind::Helper, "libcoreclr.so"),
                Frame(_) => continue,
            };
            if declared.contains(name) || !seen.insert(name) {
                continue;
            }
            let mut spec = FunctionSpec::new(name, kind);
            spec.module = Some(module.into());
            spec.hidden = matches!(entry, Dispatch(_)) && version.hides_exception_dispatch();
            out.push(spec);
        }
    }
    out
}
