//! Runtime frame templates: the frame sequences CoreCLR itself puts on a thread's stack around
//! the application's code — a thread's start, a thread-pool work item, an async continuation,
//! a reflection call, a static constructor, the finalizer thread, a wait — usable in a
//! thread's `frames` as `{ template = "NAME" }`.
//!
//! The managed frames and where the native runs lie are what `DoStackSnapshot` reported on
//! CoreCLR 3.1.23 for each shape (`conformance/programs/Runtime.cs`, compared again by every
//! run of the conformance lane). A walk cannot name native frames, so the native ones are the
//! functions CoreCLR 3.1's sources run there, one or a few per run.

use crate::code::{CodeKind, FunctionSpec};
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
}

use Entry::{CoreLib, Frame, Runtime};

/// A named template.
#[derive(Clone, Copy, Debug)]
pub struct Template {
    /// Its name in scenario files.
    pub name: &'static str,
    /// Where it goes on a stack.
    pub doc: &'static str,
    /// Its entries, leaf first, in parts that templates share.
    pub(super) entries: &'static [&'static [Entry]],
}

/// A thread-pool worker's frames below the work item's own.
const POOL_DISPATCH: &[Entry] = &[
    CoreLib("System.Threading.ThreadPoolWorkQueue::Dispatch"),
    CoreLib("System.Threading._ThreadPoolWaitCallback::PerformWaitCallback"),
    Runtime("libcoreclr.so!CallDescrWorkerInternal"),
    Runtime("libcoreclr.so!ManagedPerAppDomainTPCount::DispatchWorkItem"),
    Runtime("libcoreclr.so!ThreadpoolMgr::WorkerThreadStart"),
];

/// Every template, by name.
pub const TEMPLATES: [Template; 7] = [
    Template {
        name: "thread_start",
        doc: "the bottom of a thread started with `new Thread(…)`, below its start method",
        entries: &[&[
            CoreLib("System.Threading.ThreadHelper::ThreadStart_Context"),
            CoreLib("System.Threading.ExecutionContext::RunInternal"),
            CoreLib("System.Threading.ThreadHelper::ThreadStart"),
            Runtime("libcoreclr.so!CallDescrWorkerInternal"),
            Runtime("libcoreclr.so!ThreadNative::KickOffThread"),
        ]],
    },
    Template {
        name: "thread_pool",
        doc: "the bottom of a thread-pool thread running a `ThreadPool.QueueUserWorkItem` callback, below the callback",
        entries: &[
            &[CoreLib("System.Threading.QueueUserWorkItemCallbackDefaultContext::Execute")],
            POOL_DISPATCH,
        ],
    },
    Template {
        name: "async_continuation",
        doc: "the bottom of a thread-pool thread resuming an async method after an `await`, below the state machine's `MoveNext`",
        entries: &[
            &[
                CoreLib("AsyncStateMachineBox`1::ExecutionContextCallback"),
                CoreLib("System.Threading.ExecutionContext::RunFromThreadPoolDispatchLoop"),
                CoreLib("AsyncStateMachineBox`1::MoveNext"),
                CoreLib("AsyncStateMachineBox`1::ExecuteFromThreadPool"),
            ],
            POOL_DISPATCH,
        ],
    },
    Template {
        name: "reflection_invoke",
        doc: "between a method called through `MethodInfo.Invoke` and its caller",
        entries: &[&[
            Runtime("libcoreclr.so!CallDescrWorkerInternal"),
            Runtime("libcoreclr.so!RuntimeMethodHandle::InvokeMethod"),
            Frame(FrameKind::HelperMethod),
            CoreLib("System.Reflection.RuntimeMethodInfo::Invoke"),
        ]],
    },
    Template {
        name: "cctor_trigger",
        doc: "between a static constructor and the method whose access ran it",
        entries: &[&[
            Runtime("libcoreclr.so!CallDescrWorkerInternal"),
            Runtime("libcoreclr.so!MethodTable::RunClassInitEx"),
            Runtime("libcoreclr.so!MethodTable::DoRunClassInitThrowing"),
            Runtime("libcoreclr.so!JIT_GetSharedNonGCStaticBase_Helper"),
            Frame(FrameKind::HelperMethod),
        ]],
    },
    Template {
        name: "finalizer",
        doc: "the bottom of the finalizer thread, below a `Finalize` method",
        entries: &[&[
            Runtime("libcoreclr.so!FastCallFinalizeWorker"),
            Runtime("libcoreclr.so!MethodTable::CallFinalizer"),
            Runtime("libcoreclr.so!FinalizerThread::FinalizeAllObjects"),
            Runtime("libcoreclr.so!FinalizerThread::FinalizerThreadWorker"),
            Runtime("libcoreclr.so!FinalizerThread::FinalizerThreadStart"),
        ]],
    },
    Template {
        name: "wait",
        doc: "the top of a thread blocked in `WaitHandle.WaitOne`, above its caller",
        entries: &[&[
            Runtime("libcoreclr.so!WaitHandleNative::CorWaitOneNative"),
            Frame(FrameKind::HelperMethod),
            CoreLib("System.Threading.WaitHandle::WaitOneNoCheck"),
            CoreLib("System.Threading.WaitHandle::WaitOne"),
        ]],
    },
];

impl Template {
    /// The template called `name`.
    pub fn named(name: &str) -> Option<&'static Template> {
        TEMPLATES.iter().find(|t| t.name == name)
    }

    /// Its entries, leaf first.
    pub(super) fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.entries.iter().flat_map(|part| part.iter().copied())
    }
}

/// The functions the templates in `used` call, each once, except those named in `declared`
/// (a scenario may declare a template's function itself, with its own kind or size).
pub(super) fn functions<'a>(
    used: impl IntoIterator<Item = &'a Template>,
    declared: &std::collections::BTreeSet<&str>,
) -> Vec<FunctionSpec> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for template in used {
        for entry in template.entries() {
            let (name, kind, module) = match entry {
                CoreLib(name) => (name, CodeKind::ReadyToRun, "System.Private.CoreLib.dll"),
                Runtime(name) => (name, CodeKind::Helper, "libcoreclr.so"),
                Frame(_) => continue,
            };
            if declared.contains(name) || !seen.insert(name) {
                continue;
            }
            let mut spec = FunctionSpec::new(name, kind);
            spec.module = Some(module.into());
            out.push(spec);
        }
    }
    out
}
