//! Callback contexts: what calling from a callback (or a P/Invoke) puts on the thread — the
//! profiler's entry point, the raising runtime helper and its Frame, the GC mode — and raising
//! callbacks into an attached profiler.

use super::{callers, Caller, Notification, Runtime, RuntimeVersion};
use crate::code::{CodeMap, FunctionIndex};
use crate::leaf_first::LeafFirst;
use crate::thread::{FrameKind, Lifecycle, Mode, StackEntry};
use crate::trace::Event;
use corprof::flags::{event, GcReason};
use corprof::{ClassId, HResult, ObjectId, ThreadId};

/// The profiler callbacks the runtime raises on a thread, with the context each runs in.
///
/// GC modes and callback states follow CoreCLR v3.1.23 (`src/vm/eetoprofinterfaceimpl.cpp`:
/// each wrapper's `MODE_*` contract and its `CLR_TO_PROFILER_ENTRYPOINT` flags; the raising
/// sites in `src/vm/threads.cpp` and `src/vm/threadsuspend.cpp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallbackKind {
    /// `ObjectAllocated`: cooperative mode, inside the allocation helper.
    ObjectAllocated,
    /// `GarbageCollectionStarted`: the runtime is suspended by the GC.
    GarbageCollectionStarted,
    /// `ExceptionThrown`: cooperative mode, first pass.
    ExceptionThrown,
    /// `ThreadDestroyed`: preemptive mode, on the dying thread.
    ThreadDestroyed,
    /// A `FunctionEnter3` hook. With `COR_PRF_ENABLE_STACK_SNAPSHOT` the runtime calls hooks
    /// through the slow path, whose helper pushes a Frame so a walk has a marker to begin
    /// from (R35). Hooks run without the callback state (calls from them are asynchronous).
    FunctionEnter,
    /// `ModuleLoadFinished`: preemptive mode, in a scope that may trigger a GC, on the thread
    /// that loaded the module (the first managed thread).
    ModuleLoadFinished,
    /// `ThreadCreated` then `ThreadAssignedToOSThread`, on the new thread as it starts
    /// (`Thread::HasStarted`), before it runs managed code: preemptive mode (`GCX_PREEMP()`
    /// around the call; the wrapper's contract is `MODE_PREEMPTIVE`), so a runtime suspension
    /// does not wait for a thread blocked in it. Only a running process raises it.
    ThreadCreated,
    /// A suspension callback (`COR_PRF_MONITOR_SUSPENDS`), raised in the thread's current
    /// mode (`MODE_ANY`, `kEE2PNoTrigger`: in a callback, not in a triggers scope), except
    /// `RuntimeResumeFinished`, raised under `GCX_PREEMP()` (`ThreadSuspend::ResumeRuntime`).
    /// Only a running process raises them on a thread; see [`Notification`] for where.
    Suspension(Notification),
    /// `JITCompilationStarted` then `JITCompilationFinished` for a method's first call, on
    /// the calling thread before the method's frame exists, in preemptive mode with the
    /// callback state and a triggers scope (CoreCLR v3.1.23 `src/vm/prestub.cpp`,
    /// `MethodDesc::JitCompileCodeLockedEventWrapper`, reached from `MethodDesc::DoPrestub`
    /// below a `PrestubMethodFrame`; the wrappers' contracts in `eetoprofinterfaceimpl.cpp`
    /// are `MODE_PREEMPTIVE`, `GC_TRIGGERS`). Observed on CoreCLR 3.1.23 and .NET 8.0.4 by the
    /// lane's events probe (`conformance/probes/events.c`): raised on the thread whose call
    /// compiles the method, and no walk of that thread from the callback has the method as its
    /// leaf managed frame.
    /// Only a running process raises it.
    JitCompilation(FunctionIndex),
    /// `ThreadNameChanged` for the thread at this index: raised on the thread that set the
    /// name (`ThreadNative::InformThreadNameChange`, a QCall, so preemptive), with the
    /// callback state and a triggers scope; not for a GC thread. Observed on 3.1.23 and 8.0.4 by
    /// the lane's events probe: a thread naming another gets the callback itself, with the
    /// other thread's `ThreadID`. Only a running process raises it.
    ThreadNameChanged(usize),
}

impl CallbackKind {
    /// Every kind a scenario can make calls from (by name).
    pub const ALL: [CallbackKind; 6] = [
        CallbackKind::ObjectAllocated,
        CallbackKind::GarbageCollectionStarted,
        CallbackKind::ExceptionThrown,
        CallbackKind::ThreadDestroyed,
        CallbackKind::FunctionEnter,
        CallbackKind::ModuleLoadFinished,
    ];

    /// The callback's name.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackKind::ObjectAllocated => "ObjectAllocated",
            CallbackKind::GarbageCollectionStarted => "GarbageCollectionStarted",
            CallbackKind::ExceptionThrown => "ExceptionThrown",
            CallbackKind::ThreadDestroyed => "ThreadDestroyed",
            CallbackKind::FunctionEnter => "FunctionEnter",
            CallbackKind::ModuleLoadFinished => "ModuleLoadFinished",
            CallbackKind::ThreadCreated => "ThreadCreated",
            CallbackKind::Suspension(n) => n.as_str(),
            CallbackKind::JitCompilation(_) => "JITCompilationStarted",
            CallbackKind::ThreadNameChanged(_) => "ThreadNameChanged",
        }
    }

    /// Parses the name of a kind in [`CallbackKind::ALL`].
    pub fn parse(text: &str) -> Option<CallbackKind> {
        CallbackKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// Event-mask bits without which the runtime never raises it.
    pub fn required_mask(self) -> u32 {
        match self {
            CallbackKind::ObjectAllocated => event::ENABLE_OBJECT_ALLOCATED | event::MONITOR_OBJECT_ALLOCATED,
            CallbackKind::GarbageCollectionStarted => event::MONITOR_GC,
            CallbackKind::ExceptionThrown => event::MONITOR_EXCEPTIONS,
            CallbackKind::ThreadDestroyed
            | CallbackKind::ThreadCreated
            | CallbackKind::ThreadNameChanged(_) => event::MONITOR_THREADS,
            CallbackKind::JitCompilation(_) => event::MONITOR_JIT_COMPILATION,
            CallbackKind::FunctionEnter => event::MONITOR_ENTERLEAVE,
            CallbackKind::ModuleLoadFinished => event::MONITOR_MODULE_LOADS,
            CallbackKind::Suspension(_) => event::MONITOR_SUSPENDS,
        }
    }

    /// Whether the runtime raises it with `COR_PRF_CALLBACKSTATE_IN_TRIGGERS_SCOPE`, which
    /// GC-triggering SYNC APIs require on a managed thread (R38). `ObjectAllocated` sets only
    /// `INCALLBACK`; a GC callback cannot trigger a GC; nor can a suspension callback.
    pub fn triggers_scope(self) -> bool {
        matches!(
            self,
            CallbackKind::ExceptionThrown
                | CallbackKind::ThreadDestroyed
                | CallbackKind::ModuleLoadFinished
                | CallbackKind::ThreadCreated
                | CallbackKind::JitCompilation(_)
                | CallbackKind::ThreadNameChanged(_)
        )
    }

    /// The GC mode the thread is in while the callback runs (`None`: the mode it was in).
    pub fn mode(self) -> Option<Mode> {
        match self {
            CallbackKind::ThreadDestroyed
            | CallbackKind::ModuleLoadFinished
            | CallbackKind::ThreadCreated
            | CallbackKind::JitCompilation(_)
            | CallbackKind::ThreadNameChanged(_)
            | CallbackKind::Suspension(Notification::ResumeFinished) => Some(Mode::Preemptive),
            CallbackKind::Suspension(_) => None,
            _ => Some(Mode::Cooperative),
        }
    }

    /// The runtime function that raises it, pushed above the thread's own frames with the
    /// profiler's callback (`None`: the callback puts no frame on the simulated stack).
    pub fn raiser(self) -> Option<&'static str> {
        match self {
            CallbackKind::ObjectAllocated => Some("libcoreclr.so!AllocateObject"),
            CallbackKind::GarbageCollectionStarted => Some("libcoreclr.so!GCHeap::GarbageCollect"),
            CallbackKind::ExceptionThrown => Some("libcoreclr.so!IL_Throw"),
            CallbackKind::ThreadDestroyed => Some("libcoreclr.so!Thread::OnThreadTerminate"),
            CallbackKind::FunctionEnter => Some("libcoreclr.so!ProfileEnterNaked"),
            CallbackKind::ModuleLoadFinished => Some("libcoreclr.so!Module::NotifyProfilerLoadFinished"),
            CallbackKind::JitCompilation(_) => Some("libcoreclr.so!MethodDesc::DoPrestub"),
            CallbackKind::ThreadNameChanged(_) => Some("libcoreclr.so!ThreadNative::InformThreadNameChange"),
            CallbackKind::ThreadCreated | CallbackKind::Suspension(_) => None,
        }
    }

    /// The explicit Frame below the raiser on `version` (`None`: none). The prestub's
    /// `PrestubMethodFrame` returns into the calling method as a helper's Frame does; a QCall
    /// is entered by P/Invoke; `ThreadDestroyed` runs in native code, below any Frame; .NET 10's
    /// enter hooks push none ([`RuntimeVersion::hooks_push_a_frame`]).
    pub fn explicit_frame(self, version: RuntimeVersion) -> Option<FrameKind> {
        match self {
            CallbackKind::ThreadDestroyed => None,
            CallbackKind::FunctionEnter if !version.hooks_push_a_frame() => None,
            CallbackKind::ThreadNameChanged(_) => Some(FrameKind::InlinedCall),
            _ => Some(FrameKind::HelperMethod),
        }
    }

    /// The raisers of the callbacks only a running process raises: in every code map, after
    /// every other function.
    pub fn process_raisers() -> [&'static str; 2] {
        [
            CallbackKind::JitCompilation(0),
            CallbackKind::ThreadNameChanged(0),
        ]
        .map(|cb| cb.raiser().expect("both are raised by a runtime function"))
    }

    /// Whether the runtime sets `COR_PRF_CALLBACKSTATE_INCALLBACK` while it runs (enter/leave
    /// hooks do not: calls from them are asynchronous, [DB-SEQ]).
    pub fn sets_callback_state(self) -> bool {
        self != CallbackKind::FunctionEnter
    }
}

/// How the current thread came to call the profiling API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallContext {
    /// Plain code on the thread, in the state its scenario declares (for a managed thread this
    /// is an asynchronous call: not inside a callback).
    Thread,
    /// Native code reached from managed code by P/Invoke (preemptive, not in a callback).
    PInvoke,
    /// Inside a profiler callback.
    Callback(CallbackKind),
}

impl CallContext {
    /// The callback state the runtime sets for a call from this context, if any.
    pub(crate) fn callback_state(self) -> Option<CallbackKind> {
        match self {
            CallContext::Callback(cb) if cb.sets_callback_state() => Some(cb),
            _ => None,
        }
    }
}

/// The address of the object `raise` reports as allocated or thrown.
pub(crate) const OBJECT_BASE: u64 = 0x7f40_0000_1000;

/// Names of the runtime-owned functions every code map contains.
pub mod builtin {
    /// The profiler's P/Invoke-exported entry point.
    pub const PINVOKE_ENTRY: &str = "libprofiler.so!PInvokeEntry";
    /// The profiler's callback implementation.
    pub const PROFILER_CALLBACK: &str = "libprofiler.so!ProfilerCallback";
    /// The runtime's wait function (Thread.Sleep, Thread.Join, WaitHandle.WaitOne), entered
    /// from managed code through an InlinedCallFrame.
    pub const WAIT: &str = "libcoreclr.so!ThreadNative::Wait";
    /// The GC's return-address hijack stub (R29).
    pub const HIJACK_STUB: &str = "libcoreclr.so!OnHijackTripThread";
}

/// What [`Runtime::enter`] changed on a thread, for [`Runtime::leave`] to restore.
#[derive(Debug)]
pub(crate) struct Entered {
    index: usize,
    context: CallContext,
    stack: LeafFirst<StackEntry>,
    mode: Mode,
    lifecycle: Lifecycle,
}

impl Entered {
    /// The profiler's code for the callback has returned, whenever the thread gets to leave
    /// its frames: once its `ThreadDestroyed` returned, the thread is dead, its `ThreadID` no
    /// longer valid (R37), even while it waits out a runtime suspension before it goes on.
    /// True when that made it dead.
    pub(crate) fn returned(&self, rt: &Runtime) -> bool {
        let died = self.context == CallContext::Callback(CallbackKind::ThreadDestroyed);
        if died {
            rt.lock().threads[self.index].lifecycle = Lifecycle::Dead;
        }
        died
    }

    /// Whether leaving takes the thread from preemptive back to cooperative mode (a callback
    /// raised in preemptive mode on a thread that was running managed code).
    pub(crate) fn returns_to_cooperative(&self, rt: &Runtime) -> bool {
        self.mode == Mode::Cooperative && rt.lock().threads[self.index].mode == Mode::Preemptive
    }
}

/// [`Runtime::on_thread`] named a thread the runtime does not have.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownThread(pub String);

impl std::fmt::Display for UnknownThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no thread named `{}`", self.0)
    }
}

impl std::error::Error for UnknownThread {}

impl Runtime {
    /// Runs `f` as thread `thread` (by scenario name) calling from `context`: the runtime
    /// pushes the frames that context implies (the profiler's entry point, the raising runtime
    /// helper and its explicit Frame), sets the GC mode, and restores everything afterwards.
    /// Fails, without running `f`, if no thread has that name.
    pub fn on_thread<R>(
        &self,
        thread: &str,
        context: CallContext,
        f: impl FnOnce(&Runtime) -> R,
    ) -> Result<R, UnknownThread> {
        let index = {
            let mut st = self.lock();
            let index = st
                .thread_named(thread)
                .ok_or_else(|| UnknownThread(thread.to_string()))?;
            st.callers.push(Caller {
                thread: Some(index),
                callback: context.callback_state(),
            });
            index
        };
        let entered = self.enter(index, context);
        let result = f(self);
        self.leave(entered);
        self.lock().callers.pop();
        Ok(result)
    }

    /// Runs `f`, on the calling OS thread, as a thread the runtime does not know: a native
    /// thread that never ran managed code (a profiler's own sampler thread, say). Calls made
    /// from it are judged as such (no `ThreadID`, asynchronous entrypoints allowed, R1, R27),
    /// whatever simulated thread other OS threads are running as meanwhile.
    pub fn on_unknown_thread<R>(&self, f: impl FnOnce(&Runtime) -> R) -> R {
        let _unknown = callers::UnknownThread::enter();
        f(self)
    }

    /// The first half of [`Runtime::on_thread`]: thread `index` starts calling from `context`
    /// (its frames pushed, its mode set). The caller must already be the current caller.
    /// Undo with [`Runtime::leave`].
    pub(crate) fn enter(&self, index: usize, context: CallContext) -> Entered {
        let entered = {
            let mut st = self.lock();
            let saved = Entered {
                index,
                context,
                stack: st.threads[index].stack.clone(),
                mode: st.threads[index].mode,
                lifecycle: st.threads[index].lifecycle,
            };
            let pushed = pushed_frames(&st.code, context, st.config.version);
            let t = &mut st.threads[index];
            if t.is_managed() {
                match context {
                    CallContext::Thread => {}
                    CallContext::PInvoke => t.mode = Mode::Preemptive,
                    CallContext::Callback(cb) => t.mode = cb.mode().unwrap_or(t.mode),
                }
            }
            if context == CallContext::Callback(CallbackKind::ThreadDestroyed) {
                t.lifecycle = Lifecycle::Destroying;
            }
            t.stack.push_leaves(pushed);
            st.relayout(index);
            // Called call by call, the callback implies the GC's suspension; a running
            // process has suspended the runtime itself before it raises the callback.
            if context == CallContext::Callback(CallbackKind::GarbageCollectionStarted) && !st.in_process {
                st.suspension.gc = true;
                st.park_all(Some(index));
            }
            saved
        };
        self.flush();
        entered
    }

    /// The second half of [`Runtime::on_thread`]: restores what [`Runtime::enter`] changed.
    /// After `ThreadDestroyed` the thread is dead.
    pub(crate) fn leave(&self, entered: Entered) {
        {
            let mut st = self.lock();
            let Entered {
                index,
                context,
                stack,
                mode,
                lifecycle,
            } = entered;
            if context == CallContext::Callback(CallbackKind::GarbageCollectionStarted) && !st.in_process {
                st.unpark_all();
                st.suspension.gc = false;
            }
            let t = &mut st.threads[index];
            t.stack = stack;
            t.mode = mode;
            t.lifecycle = if context == CallContext::Callback(CallbackKind::ThreadDestroyed) {
                Lifecycle::Dead
            } else {
                lifecycle
            };
            if t.lifecycle != Lifecycle::Deleted {
                st.relayout(index);
            }
        }
        self.flush();
    }

    /// Raises `callback` on thread `thread` into the attached profiler, as the runtime would:
    /// only if the event mask enables it, on that thread, in the callback's context (frames,
    /// GC mode, callback state — see [`Runtime::on_thread`]). Returns the profiler's HRESULT,
    /// or `None` if the callback is not raised (not enabled, no profiler, no such thread, an
    /// enter hook — hooks are not `ICorProfilerCallback` methods). After `ThreadDestroyed`
    /// the thread is dead.
    pub fn raise(&self, thread: &str, callback: CallbackKind) -> Option<HResult> {
        self.raise_allocation_of(thread, callback, ClassId::NULL)
    }

    /// [`Runtime::raise`], with `class` as the class `ObjectAllocated` reports (other
    /// callbacks ignore it).
    pub fn raise_allocation_of(
        &self,
        thread: &str,
        callback: CallbackKind,
        class: ClassId,
    ) -> Option<HResult> {
        let (id, enabled, first_module) = {
            let st = self.lock();
            let t = &st.threads[st.thread_named(thread)?];
            if !t.is_managed() {
                return None;
            }
            let first_module = st.code.metadata().modules().first().map(|m| m.id);
            (t.id, st.monitors(callback.required_mask()), first_module)
        };
        let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
        let raised_here = CallbackKind::ALL.contains(&callback) && callback != CallbackKind::FunctionEnter;
        if !enabled || !raised_here {
            return None;
        }
        self.lock().record(Event {
            kind: callback.as_str().into(),
            on: thread.into(),
            detail: None,
        });
        let raised = self.on_thread(thread, CallContext::Callback(callback), |_| match callback {
            CallbackKind::ObjectAllocated => profiler.object_allocated(ObjectId(OBJECT_BASE), class),
            CallbackKind::GarbageCollectionStarted => {
                // The collection runs between the two, with the runtime still suspended.
                let started = profiler.garbage_collection_started(&[true, false, false], GcReason::Induced);
                profiler.garbage_collection_finished();
                started
            }
            CallbackKind::ExceptionThrown => profiler.exception_thrown(ObjectId(OBJECT_BASE)),
            CallbackKind::ThreadDestroyed => profiler.thread_destroyed(id),
            CallbackKind::ModuleLoadFinished => match first_module {
                Some(module) => profiler.module_load_finished(module, HResult::S_OK),
                None => HResult::S_OK,
            },
            CallbackKind::FunctionEnter
            | CallbackKind::ThreadCreated
            | CallbackKind::Suspension(_)
            | CallbackKind::JitCompilation(_)
            | CallbackKind::ThreadNameChanged(_) => HResult::S_OK,
        });
        raised.ok()
    }

    /// Raises `ModuleLoadFinished` for every managed module, in declaration order, on the
    /// first live managed thread, as the runtime does while it loads them (needs
    /// `COR_PRF_MONITOR_MODULE_LOADS`). The callback state is set, so the profiler may call
    /// SYNC APIs such as `GetModuleMetaData` there. An attached profiler is told of none: the
    /// modules were loaded before it attached.
    pub fn announce_modules(&self) {
        let Some(profiler) = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone() else {
            return;
        };
        let (thread, modules) = {
            let st = self.lock();
            if st.config.attached || !st.monitors(event::MONITOR_MODULE_LOADS) {
                return;
            }
            let thread = st
                .threads
                .iter()
                .find(|t| t.is_managed() && t.lifecycle == Lifecycle::Alive && !t.gc_special)
                .map(|t| t.name.clone());
            let modules: Vec<_> = st.code.metadata().modules().iter().map(|m| m.id).collect();
            (thread, modules)
        };
        let Some(thread) = thread else { return };
        let context = CallContext::Callback(CallbackKind::ModuleLoadFinished);
        for module in modules {
            // The thread was just found alive: it exists.
            let _raised = self.on_thread(&thread, context, |rt| {
                rt.lock().record(Event {
                    kind: "ModuleLoadFinished".into(),
                    on: thread.clone(),
                    detail: None,
                });
                profiler.module_load_finished(module, HResult::S_OK)
            });
        }
    }

    /// Raises `ThreadCreated` and `ThreadAssignedToOSThread` for every live managed thread, on
    /// that thread, as the runtime does when threads start (needs `COR_PRF_MONITOR_THREADS`).
    /// An attached profiler is told of none: the threads started before it attached.
    pub fn announce_threads(&self) {
        let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let threads: Vec<(String, ThreadId, u32)> = {
            let st = self.lock();
            if st.config.attached || !st.monitors(event::MONITOR_THREADS) {
                return;
            }
            st.threads
                .iter()
                .filter(|t| t.is_managed() && t.lifecycle == Lifecycle::Alive)
                .map(|t| (t.name.clone(), t.id, t.os_id))
                .collect()
        };
        let Some(profiler) = profiler else { return };
        for (name, id, os_id) in threads {
            // The names are the runtime's own: every one is found.
            let _announced = self.on_thread(&name, CallContext::Thread, |rt| {
                rt.lock().record(Event {
                    kind: "ThreadCreated".into(),
                    on: name.clone(),
                    detail: None,
                });
                profiler.thread_created(id);
                profiler.thread_assigned_to_os_thread(id, os_id);
            });
        }
    }
}

fn pushed_frames(code: &CodeMap, context: CallContext, version: RuntimeVersion) -> Vec<StackEntry> {
    let call = |name: &str| StackEntry::Call {
        function: index_of(code, name),
        offset: None,
        funclet: None,
    };
    match context {
        CallContext::Thread => Vec::new(),
        CallContext::PInvoke => vec![
            call(builtin::PINVOKE_ENTRY),
            StackEntry::Frame(FrameKind::InlinedCall),
        ],
        CallContext::Callback(cb) => {
            let Some(raiser) = cb.raiser() else {
                return Vec::new();
            };
            let mut frames = vec![call(builtin::PROFILER_CALLBACK), call(raiser)];
            frames.extend(cb.explicit_frame(version).map(StackEntry::Frame));
            frames
        }
    }
}

fn index_of(code: &CodeMap, name: &str) -> FunctionIndex {
    code.by_name(name)
        .expect("builtin functions are part of every code map")
}
