//! The simulated runtime: its global state, its threads, and the profiler-facing API.
//!
//! [`Runtime`] implements [`corprof::ProfilerInfo`]. Profiler code calls it through `&self`
//! from whichever simulated thread it runs on; the caller is set with [`Runtime::on_thread`]
//! (a scenario's executor, or a test, decides which simulated thread is running). Callbacks
//! into the profiler are raised with no lock held, so a profiler may call back into the runtime.

use crate::code::{CodeMap, FunctionIndex};
use crate::memory::AddressSpace;
use crate::process::fiber;
use crate::thread::{FrameKind, Lifecycle, Mode, StackEntry, Thread, ThreadKind};
use crate::trace::{Event, Fault, FaultKind};
use corprof::flags::{event, GcReason, SuspendReason};
use corprof::{
    ClassId, CodeInfo, Context, FrameInfo, FunctionId, FunctionInfo, HResult, ObjectId, ProfilerCallback,
    ProfilerInfo, ReJitId, StackSnapshotCallback, ThreadId,
};
use std::sync::{Arc, Mutex, MutexGuard};

/// Which operating system's runtime is simulated (R11, R13, R43).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// Windows: cross-thread walks OS-suspend the target.
    Windows,
    /// Linux/macOS: cross-thread walks only under `SuspendRuntime`.
    Unix,
}

impl Platform {
    /// `"windows"` or `"unix"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Windows => "windows",
            Platform::Unix => "unix",
        }
    }
}

/// The profiler callbacks a scenario can make calls from.
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
}

impl CallbackKind {
    /// Every kind.
    pub const ALL: [CallbackKind; 5] = [
        CallbackKind::ObjectAllocated,
        CallbackKind::GarbageCollectionStarted,
        CallbackKind::ExceptionThrown,
        CallbackKind::ThreadDestroyed,
        CallbackKind::FunctionEnter,
    ];

    /// The callback's name.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackKind::ObjectAllocated => "ObjectAllocated",
            CallbackKind::GarbageCollectionStarted => "GarbageCollectionStarted",
            CallbackKind::ExceptionThrown => "ExceptionThrown",
            CallbackKind::ThreadDestroyed => "ThreadDestroyed",
            CallbackKind::FunctionEnter => "FunctionEnter",
        }
    }

    /// Parses the callback's name.
    pub fn parse(text: &str) -> Option<CallbackKind> {
        CallbackKind::ALL.into_iter().find(|k| k.as_str() == text)
    }

    /// Event-mask bits without which the runtime never raises it.
    pub fn required_mask(self) -> u32 {
        match self {
            CallbackKind::ObjectAllocated => event::ENABLE_OBJECT_ALLOCATED | event::MONITOR_OBJECT_ALLOCATED,
            CallbackKind::GarbageCollectionStarted => event::MONITOR_GC,
            CallbackKind::ExceptionThrown => event::MONITOR_EXCEPTIONS,
            CallbackKind::ThreadDestroyed => event::MONITOR_THREADS,
            CallbackKind::FunctionEnter => event::MONITOR_ENTERLEAVE,
        }
    }

    /// Whether the runtime raises it with `COR_PRF_CALLBACKSTATE_IN_TRIGGERS_SCOPE`, which
    /// GC-triggering SYNC APIs require on a managed thread (R38). `ObjectAllocated` sets only
    /// `INCALLBACK`; a GC callback cannot trigger a GC.
    pub fn triggers_scope(self) -> bool {
        matches!(
            self,
            CallbackKind::ExceptionThrown | CallbackKind::ThreadDestroyed
        )
    }

    /// The GC mode the thread is in while the callback runs.
    pub fn mode(self) -> Mode {
        match self {
            CallbackKind::ThreadDestroyed => Mode::Preemptive,
            _ => Mode::Cooperative,
        }
    }

    /// The runtime function that raises it (pushed above the thread's own frames).
    pub fn raiser(self) -> &'static str {
        match self {
            CallbackKind::ObjectAllocated => "libcoreclr.so!AllocateObject",
            CallbackKind::GarbageCollectionStarted => "libcoreclr.so!GCHeap::GarbageCollect",
            CallbackKind::ExceptionThrown => "libcoreclr.so!IL_Throw",
            CallbackKind::ThreadDestroyed => "libcoreclr.so!Thread::OnThreadTerminate",
            CallbackKind::FunctionEnter => "libcoreclr.so!ProfileEnterNaked",
        }
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
    /// The GC's return-address hijack stub (R29).
    pub const HIJACK_STUB: &str = "libcoreclr.so!OnHijackTripThread";
}

/// A thread currently calling into the runtime.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    /// Index of the simulated thread; `None` for a thread outside the scenario (treated as a
    /// native thread that never ran managed code).
    pub thread: Option<usize>,
    /// The callback it runs in, if any.
    pub callback: Option<CallbackKind>,
}

/// What [`Runtime::enter`] changed on a thread, for [`Runtime::leave`] to restore.
#[derive(Debug)]
pub(crate) struct Entered {
    index: usize,
    context: CallContext,
    stack: Vec<StackEntry>,
    mode: Mode,
    lifecycle: Lifecycle,
}

/// A callback to raise into the profiler once the state lock is released.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Notification {
    ThreadSuspended(ThreadId),
    ThreadResumed(ThreadId),
    SuspendStarted(SuspendReason),
    SuspendFinished,
    ResumeStarted,
    ResumeFinished,
}

/// Global runtime state (what CoreCLR keeps in `g_fEEStarted`, `g_profControlBlock`, …).
#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Windows or Unix semantics.
    pub platform: Platform,
    /// `g_fEEStarted` (R2).
    pub started: bool,
    /// `IsGarbageCollectorFullyInitialized` (R6).
    pub gc_initialized: bool,
    /// The profiler is detaching (R1).
    pub detaching: bool,
    /// An EE suspension is in progress (R9).
    pub suspend_in_progress: bool,
    /// The profiler's event mask (R3).
    pub event_mask: u32,
    /// `sizeof(CONTEXT)` the runtime reports to callbacks (1232; 3104 on newer Unix PALs, R44).
    pub context_size: u32,
}

impl Default for RuntimeConfig {
    fn default() -> RuntimeConfig {
        RuntimeConfig {
            platform: Platform::Unix,
            started: true,
            gc_initialized: true,
            detaching: false,
            suspend_in_progress: false,
            event_mask: event::ENABLE_STACK_SNAPSHOT,
            context_size: Context::SIZE as u32,
        }
    }
}

/// Everything behind the runtime's lock.
#[derive(Clone, Debug)]
pub(crate) struct State {
    pub config: RuntimeConfig,
    pub code: CodeMap,
    pub memory: AddressSpace,
    pub threads: Vec<Thread>,
    pub callers: Vec<Caller>,
    /// `fProfilerRequestedRuntimeSuspend` (R41) and who asked.
    pub profiler_suspension: Option<Option<usize>>,
    /// A second `SuspendRuntime` leaked the thread-store lock (R41, real-clr row 35).
    pub leaked_suspension: bool,
    /// The EE is suspended by the GC (inside `GarbageCollectionStarted`).
    pub gc_suspension: bool,
    pub events: Vec<Event>,
    pub faults: Vec<Fault>,
    /// How many of `faults` [`Runtime::take_faults`] already returned.
    pub faults_seen: usize,
    pub pending: Vec<Notification>,
}

/// The simulated runtime.
pub struct Runtime {
    state: Mutex<State>,
    profiler: Mutex<Option<Arc<dyn ProfilerCallback>>>,
}

impl State {
    pub fn caller(&self) -> Caller {
        self.callers.last().copied().unwrap_or(Caller {
            thread: None,
            callback: None,
        })
    }

    /// The caller's runtime `Thread`, if it has one.
    pub fn caller_ee(&self) -> Option<usize> {
        self.caller().thread.filter(|&i| self.threads[i].is_managed())
    }

    pub fn caller_name(&self) -> String {
        match self.caller().thread {
            Some(i) => self.threads[i].name.clone(),
            None => "<unnamed native thread>".to_string(),
        }
    }

    pub fn note(&mut self, kind: &str, detail: impl Into<String>) {
        let on = self.caller_name();
        self.events.push(Event {
            kind: kind.to_string(),
            on,
            detail: Some(detail.into()),
        });
    }

    pub fn fault(&mut self, kind: FaultKind, fatal: bool, message: impl Into<String>) {
        self.faults.push(Fault {
            kind,
            message: message.into(),
            fatal,
        });
    }

    pub fn terminated(&self) -> bool {
        self.faults.iter().any(|f| f.fatal)
    }

    pub fn monitors(&self, bits: u32) -> bool {
        self.config.event_mask & bits == bits
    }

    /// Queues a callback for the profiler (raised after the lock is released) and records it.
    pub fn notify(&mut self, n: Notification) {
        if !self.monitors(event::MONITOR_SUSPENDS) {
            return;
        }
        let (kind, detail) = match n {
            Notification::ThreadSuspended(t) => ("RuntimeThreadSuspended", Some(self.name_of(t))),
            Notification::ThreadResumed(t) => ("RuntimeThreadResumed", Some(self.name_of(t))),
            Notification::SuspendStarted(r) => ("RuntimeSuspendStarted", Some(format!("{r:?}"))),
            Notification::SuspendFinished => ("RuntimeSuspendFinished", None),
            Notification::ResumeStarted => ("RuntimeResumeStarted", None),
            Notification::ResumeFinished => ("RuntimeResumeFinished", None),
        };
        let on = self.caller_name();
        self.events.push(Event {
            kind: kind.into(),
            on,
            detail,
        });
        self.pending.push(n);
    }

    pub fn name_of(&self, id: ThreadId) -> String {
        match self.threads.iter().find(|t| t.id == id && t.is_managed()) {
            Some(t) => t.name.clone(),
            None => id.to_string(),
        }
    }

    /// Resolves a non-null `ThreadID` the way CoreCLR does: by reinterpreting it (R4).
    pub fn resolve(&self, id: ThreadId) -> Option<usize> {
        self.threads.iter().position(|t| t.is_managed() && t.id == id)
    }

    pub fn relayout(&mut self, index: usize) {
        let State {
            threads,
            code,
            memory,
            ..
        } = self;
        threads[index].materialize(code, memory);
    }

    /// True when host calls must be avoided: an asynchronous call on a managed thread, or a
    /// native GC thread (R42).
    pub fn avoid_host_calls(&self) -> bool {
        let caller = self.caller();
        match caller.thread {
            Some(i) if self.threads[i].is_managed() => caller.callback.is_none(),
            Some(i) => self.threads[i].gc_special,
            None => false,
        }
    }

    /// Takes the code manager's reader lock for the caller (R13.2, R14, R42). With a writer
    /// holding it, an asynchronous caller gets `CORPROF_E_ASYNCHRONOUS_UNSAFE`; a caller allowed
    /// to block waits — forever, if the writer is suspended.
    pub fn reader_lock(&mut self) -> Result<(), HResult> {
        let me = self.caller().thread;
        let Some(writer) = self
            .threads
            .iter()
            .position(|t| t.holds_writer_lock && t.lifecycle != Lifecycle::Deleted)
            .filter(|&w| Some(w) != me)
        else {
            return Ok(());
        };
        if self.avoid_host_calls() {
            return Err(HResult::CORPROF_E_ASYNCHRONOUS_UNSAFE);
        }
        if self.threads[writer].os_suspend_count > 0 {
            let message = format!(
                "{} waits for the code manager lock held by {}, which is suspended",
                self.caller_name(),
                self.threads[writer].name
            );
            self.fault(FaultKind::Deadlock, true, message);
            return Err(HResult::E_UNEXPECTED);
        }
        Ok(())
    }

    /// Checks of `PROFILER_TO_CLR_ENTRYPOINT_ASYNC` (R1).
    pub fn async_entry(&self) -> Result<(), HResult> {
        if self.terminated() {
            return Err(HResult::E_UNEXPECTED);
        }
        if self.config.detaching {
            return Err(HResult::CORPROF_E_PROFILER_DETACHING);
        }
        Ok(())
    }

    /// Checks of `PROFILER_TO_CLR_ENTRYPOINT_SYNC`: a managed caller must be inside a callback,
    /// and for APIs that may trigger a GC, one raised in a triggers scope (R27, R38).
    pub fn sync_entry(&self, triggers: bool) -> Result<(), HResult> {
        self.async_entry()?;
        if self.caller_ee().is_some() {
            match self.caller().callback {
                None => return Err(HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE),
                Some(cb) if triggers && !cb.triggers_scope() => {
                    return Err(HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE)
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// Parks every managed thread at a safe point for a runtime suspension, except those that
    /// run code under the scheduler: they park at their own next safe point.
    pub fn park_all(&mut self, except: Option<usize>) {
        for i in 0..self.threads.len() {
            let t = &self.threads[i];
            if t.is_managed()
                && !t.runs_code
                && Some(i) != except
                && t.parked.is_none()
                && t.lifecycle == Lifecycle::Alive
            {
                self.park(i);
            }
        }
    }

    /// Parks managed thread `i` at a safe point: a thread running managed code gets a
    /// `RedirectedThreadFrame`; every parked thread is in preemptive mode.
    pub fn park(&mut self, i: usize) {
        let t = &self.threads[i];
        let previous = t.mode;
        let leaf_managed = t.stack.iter().find_map(|e| match e {
            StackEntry::Call { function, .. } => Some(self.code.function(*function).kind.is_managed()),
            StackEntry::Frame(_) => None,
        });
        let t = &mut self.threads[i];
        if previous == Mode::Cooperative && leaf_managed == Some(true) {
            t.stack.insert(0, StackEntry::Frame(FrameKind::Redirected));
        }
        t.mode = Mode::Preemptive;
        t.parked = Some(previous);
        self.relayout(i);
        let id = self.threads[i].id;
        self.notify(Notification::ThreadSuspended(id));
    }

    /// Undoes [`State::park_all`].
    pub fn unpark_all(&mut self) {
        for i in 0..self.threads.len() {
            let Some(previous) = self.threads[i].parked.take() else {
                continue;
            };
            let t = &mut self.threads[i];
            if t.stack.first() == Some(&StackEntry::Frame(FrameKind::Redirected)) {
                t.stack.remove(0);
            }
            t.mode = previous;
            self.relayout(i);
            let id = self.threads[i].id;
            self.notify(Notification::ThreadResumed(id));
        }
    }
}

impl Runtime {
    /// A runtime with the given global state, code and threads. Each thread's stack region is
    /// mapped and its frames materialized.
    pub fn new(config: RuntimeConfig, code: CodeMap, mut threads: Vec<Thread>) -> Runtime {
        let mut memory = AddressSpace::default();
        for t in &mut threads {
            memory.map(t.stack_limit, t.stack_base);
            t.materialize(&code, &mut memory);
        }
        Runtime {
            state: Mutex::new(State {
                config,
                code,
                memory,
                threads,
                callers: Vec::new(),
                profiler_suspension: None,
                leaked_suspension: false,
                gc_suspension: false,
                events: Vec::new(),
                faults: Vec::new(),
                faults_seen: 0,
                pending: Vec::new(),
            }),
            profiler: Mutex::new(None),
        }
    }

    /// A copy of this runtime in its current state, with no profiler attached: what each run of
    /// a process starts from, cheaper than building the code map and stacks again.
    pub fn fork(&self) -> Runtime {
        Runtime {
            state: Mutex::new(self.lock().clone()),
            profiler: Mutex::new(None),
        }
    }

    /// Attaches a profiler to receive the runtime's callbacks.
    pub fn set_profiler(&self, profiler: Arc<dyn ProfilerCallback>) {
        *self.profiler.lock().unwrap_or_else(|e| e.into_inner()) = Some(profiler);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Raises queued callbacks into the attached profiler. Call with the lock released.
    pub(crate) fn flush(&self) {
        let pending = std::mem::take(&mut self.lock().pending);
        let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(p) = profiler else { return };
        for n in pending {
            match n {
                Notification::ThreadSuspended(t) => p.runtime_thread_suspended(t),
                Notification::ThreadResumed(t) => p.runtime_thread_resumed(t),
                Notification::SuspendStarted(r) => p.runtime_suspend_started(r),
                Notification::SuspendFinished => p.runtime_suspend_finished(),
                Notification::ResumeStarted => p.runtime_resume_started(),
                Notification::ResumeFinished => p.runtime_resume_finished(),
            };
        }
    }

    /// Runs `f` as thread `thread` (by scenario name) calling from `context`: the runtime
    /// pushes the frames that context implies (the profiler's entry point, the raising runtime
    /// helper and its explicit Frame), sets the GC mode, and restores everything afterwards.
    /// Returns `None` if no thread has that name.
    pub fn on_thread<R>(
        &self,
        thread: &str,
        context: CallContext,
        f: impl FnOnce(&Runtime) -> R,
    ) -> Option<R> {
        let index = {
            let mut st = self.lock();
            let index = st.threads.iter().position(|t| t.name == thread)?;
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
        Some(result)
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
            let pushed = pushed_frames(&st.code, context);
            let t = &mut st.threads[index];
            if t.is_managed() {
                match context {
                    CallContext::Thread => {}
                    CallContext::PInvoke => t.mode = Mode::Preemptive,
                    CallContext::Callback(cb) => t.mode = cb.mode(),
                }
            }
            if context == CallContext::Callback(CallbackKind::ThreadDestroyed) {
                t.lifecycle = Lifecycle::Destroying;
            }
            t.stack.splice(0..0, pushed);
            st.relayout(index);
            if context == CallContext::Callback(CallbackKind::GarbageCollectionStarted) {
                st.gc_suspension = true;
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
            if context == CallContext::Callback(CallbackKind::GarbageCollectionStarted) {
                st.unpark_all();
                st.gc_suspension = false;
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
        let (id, enabled) = {
            let st = self.lock();
            let t = st.threads.iter().find(|t| t.name == thread && t.is_managed())?;
            (t.id, st.monitors(callback.required_mask()))
        };
        let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone()?;
        if !enabled || callback == CallbackKind::FunctionEnter {
            return None;
        }
        self.lock().events.push(Event {
            kind: callback.as_str().into(),
            on: thread.into(),
            detail: None,
        });
        self.on_thread(thread, CallContext::Callback(callback), |_| match callback {
            CallbackKind::ObjectAllocated => profiler.object_allocated(ObjectId(OBJECT_BASE), ClassId::NULL),
            CallbackKind::GarbageCollectionStarted => {
                profiler.garbage_collection_started(&[true, false, false], GcReason::Induced)
            }
            CallbackKind::ExceptionThrown => profiler.exception_thrown(ObjectId(OBJECT_BASE)),
            CallbackKind::ThreadDestroyed => profiler.thread_destroyed(id),
            CallbackKind::FunctionEnter => HResult::S_OK,
        })
    }

    /// Raises `ThreadCreated` and `ThreadAssignedToOSThread` for every live managed thread, on
    /// that thread, as the runtime does when threads start (needs `COR_PRF_MONITOR_THREADS`).
    pub fn announce_threads(&self) {
        let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let threads: Vec<(String, ThreadId, u32)> = {
            let st = self.lock();
            if !st.monitors(event::MONITOR_THREADS) {
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
            self.on_thread(&name, CallContext::Thread, |rt| {
                rt.lock().events.push(Event {
                    kind: "ThreadCreated".into(),
                    on: name.clone(),
                    detail: None,
                });
                profiler.thread_created(id);
                profiler.thread_assigned_to_os_thread(id, os_id);
            });
        }
    }

    /// Frees thread `thread`'s `Thread` object and unmaps its stack: later uses are
    /// use-after-free faults. Returns false if no thread has that name.
    pub fn delete_thread(&self, thread: &str) -> bool {
        let mut st = self.lock();
        let Some(i) = st.threads.iter().position(|t| t.name == thread) else {
            return false;
        };
        st.threads[i].lifecycle = Lifecycle::Deleted;
        let base = st.threads[i].stack_limit;
        st.memory.unmap(base);
        true
    }

    /// An induced garbage collection on `thread`. After a leaked `SuspendRuntime` it hangs
    /// (R41); otherwise it raises the suspension callbacks. Returns false if no such thread.
    pub fn collect_garbage(&self, thread: &str) -> bool {
        let ok = {
            let mut st = self.lock();
            match st.threads.iter().position(|t| t.name == thread) {
                None => false,
                Some(i) => {
                    st.callers.push(Caller {
                        thread: Some(i),
                        callback: None,
                    });
                    if st.leaked_suspension || st.profiler_suspension.is_some() {
                        let message = format!(
                            "GC on {thread} blocks in LockThreadStore: the thread-store lock is held by a SuspendRuntime that was never resumed"
                        );
                        st.fault(FaultKind::LeakedSuspensionHang, true, message);
                    } else {
                        st.notify(Notification::SuspendStarted(SuspendReason::ForGc));
                        st.notify(Notification::SuspendFinished);
                        st.notify(Notification::ResumeStarted);
                        st.notify(Notification::ResumeFinished);
                    }
                    st.callers.pop();
                    true
                }
            }
        };
        self.flush();
        ok
    }

    /// Takes the events recorded since the last call.
    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut self.lock().events)
    }

    /// Takes the faults recorded since the last call (a fatal one stays in effect).
    pub fn take_faults(&self) -> Vec<Fault> {
        let mut st = self.lock();
        let total = st.faults.len();
        let seen = std::mem::replace(&mut st.faults_seen, total);
        st.faults[seen..].to_vec()
    }

    /// True once a fatal fault ended (or hung) the simulated process.
    pub fn is_terminated(&self) -> bool {
        self.lock().terminated()
    }

    /// Read access to the code map.
    pub fn with_code<R>(&self, f: impl FnOnce(&CodeMap) -> R) -> R {
        f(&self.lock().code)
    }

    /// A snapshot of thread `name` (its ground-truth stack and layout), if it exists.
    pub fn thread(&self, name: &str) -> Option<Thread> {
        self.lock().threads.iter().find(|t| t.name == name).cloned()
    }

    /// All threads, in declaration order.
    pub fn threads(&self) -> Vec<Thread> {
        self.lock().threads.clone()
    }

    /// Reads 8 bytes of simulated memory (`ReadProcessMemory`); `None` if unmapped.
    pub fn read_memory(&self, address: u64) -> Option<u64> {
        self.lock().memory.read_u64(address).ok()
    }

    /// The current event mask (what the runtime consults before raising a callback).
    pub fn event_mask(&self) -> u32 {
        self.lock().config.event_mask
    }

    /// The platform simulated.
    pub fn platform(&self) -> Platform {
        self.lock().config.platform
    }
}

fn pushed_frames(code: &CodeMap, context: CallContext) -> Vec<StackEntry> {
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
        CallContext::Callback(CallbackKind::ThreadDestroyed) => {
            vec![
                call(builtin::PROFILER_CALLBACK),
                call(CallbackKind::ThreadDestroyed.raiser()),
            ]
        }
        CallContext::Callback(cb) => vec![
            call(builtin::PROFILER_CALLBACK),
            call(cb.raiser()),
            StackEntry::Frame(FrameKind::HelperMethod),
        ],
    }
}

fn index_of(code: &CodeMap, name: &str) -> FunctionIndex {
    code.by_name(name)
        .expect("builtin functions are part of every code map")
}

// The trait's signatures name their lifetimes (see `corprof::ProfilerInfo`). Every method
// starts with a scheduling point (`fiber::point`: a no-op outside a running process).
#[allow(clippy::needless_lifetimes)]
impl ProfilerInfo for Runtime {
    fn do_stack_snapshot<'a>(
        &self,
        thread: ThreadId,
        callback: Option<&'a mut StackSnapshotCallback<'a>>,
        info_flags: u32,
        context: Option<&'a Context>,
        context_size: u32,
    ) -> HResult {
        fiber::point();
        crate::snapshot::do_stack_snapshot(self, thread, callback, info_flags, context, context_size)
    }

    fn get_function_from_ip(&self, ip: u64) -> Result<FunctionId, HResult> {
        fiber::point();
        let mut st = self.lock();
        st.async_entry()?;
        if st
            .caller()
            .thread
            .is_some_and(|i| st.threads[i].forbid_suspend > 0)
        {
            return Err(HResult::CORPROF_E_ASYNCHRONOUS_UNSAFE);
        }
        function_from_ip(&mut st, ip, false).map(|(f, _)| f)
    }

    fn get_function_from_ip2(&self, ip: u64) -> Result<(FunctionId, ReJitId), HResult> {
        fiber::point();
        let mut st = self.lock();
        st.sync_entry(true)?;
        function_from_ip(&mut st, ip, false)
    }

    fn get_function_from_ip3(&self, ip: u64) -> Result<(FunctionId, ReJitId), HResult> {
        fiber::point();
        let mut st = self.lock();
        st.sync_entry(true)?;
        function_from_ip(&mut st, ip, true)
    }

    fn get_code_info2<'a>(
        &self,
        function: FunctionId,
        requested: u32,
        code_infos: Option<&'a mut [CodeInfo]>,
    ) -> Result<u32, HResult> {
        fiber::point();
        let mut st = self.lock();
        st.async_entry()?;
        let index = st.code.by_function_id(function).ok_or(HResult::E_INVALIDARG)?;
        if requested != 0 && code_infos.is_none() {
            return Err(HResult::E_INVALIDARG);
        }
        let f = st.code.function(index).clone();
        if f.generic_definition {
            return Err(HResult::E_INVALIDARG);
        }
        if !f.compiled {
            return Err(HResult::CORPROF_E_FUNCTION_NOT_COMPILED);
        }
        st.reader_lock()?;
        let mut regions = vec![CodeInfo {
            start_address: f.start,
            size: f.size,
        }];
        if let Some((start, size)) = f.cold {
            regions.push(CodeInfo {
                start_address: start,
                size,
            });
        }
        if let Some(out) = code_infos {
            for (slot, region) in out.iter_mut().zip(&regions).take(requested as usize) {
                *slot = *region;
            }
        }
        Ok(regions.len() as u32)
    }

    fn get_function_info(&self, function: FunctionId) -> Result<FunctionInfo, HResult> {
        fiber::point();
        let st = self.lock();
        st.async_entry()?;
        let f = st
            .code
            .function(st.code.by_function_id(function).ok_or(HResult::E_INVALIDARG)?);
        Ok(FunctionInfo {
            class_id: f.class_id,
            module_id: f.module_id,
            token: f.token,
            type_args: Vec::new(),
        })
    }

    fn get_function_info2<'a>(
        &self,
        function: FunctionId,
        frame_info: Option<&'a FrameInfo>,
    ) -> Result<FunctionInfo, HResult> {
        fiber::point();
        if frame_info.is_some_and(|fi| fi.func_id != function) {
            return Err(HResult::E_INVALIDARG);
        }
        self.get_function_info(function)
    }

    fn get_current_thread_id(&self) -> Result<ThreadId, HResult> {
        fiber::point();
        let st = self.lock();
        st.async_entry()?;
        match st.caller_ee() {
            Some(i) if !st.threads[i].gc_special => Ok(st.threads[i].id),
            _ => Err(HResult::CORPROF_E_NOT_MANAGED_THREAD),
        }
    }

    fn set_event_mask(&self, mask: u32) -> HResult {
        fiber::point();
        let mut st = self.lock();
        if let Err(hr) = st.async_entry() {
            return hr;
        }
        if mask & event::MONITOR_IMMUTABLE != st.config.event_mask & event::MONITOR_IMMUTABLE {
            return HResult::E_FAIL;
        }
        st.config.event_mask = mask;
        HResult::S_OK
    }

    fn get_event_mask(&self) -> Result<u32, HResult> {
        fiber::point();
        let st = self.lock();
        st.async_entry()?;
        Ok(st.config.event_mask)
    }

    fn initialize_current_thread(&self) -> HResult {
        fiber::point();
        let mut st = self.lock();
        if let Err(hr) = st.sync_entry(false) {
            return hr;
        }
        if let Some(i) = st.caller().thread {
            st.threads[i].tls_initialized = true;
        }
        HResult::S_OK
    }

    fn suspend_runtime(&self) -> HResult {
        fiber::point();
        // In a running process the suspension holds the thread-store lock (R41): wait for it.
        fiber::thread_store_lock(true);
        let hr = {
            let mut st = self.lock();
            suspend_runtime(&mut st)
        };
        if hr == HResult::S_OK {
            // SuspendEE returns once every thread reached a safe point.
            fiber::request(fiber::Request::SafePoints);
        } else {
            fiber::thread_store_lock(false);
        }
        self.flush();
        hr
    }

    fn resume_runtime(&self) -> HResult {
        fiber::point();
        let hr = {
            let mut st = self.lock();
            match st.sync_entry(true) {
                Err(hr) => hr,
                Ok(()) if st.profiler_suspension.is_none() => HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE,
                Ok(()) => {
                    st.notify(Notification::ResumeStarted);
                    st.unpark_all();
                    st.notify(Notification::ResumeFinished);
                    st.profiler_suspension = None;
                    HResult::S_OK
                }
            }
        };
        if hr == HResult::S_OK {
            fiber::thread_store_lock(false);
        }
        self.flush();
        hr
    }

    fn enum_threads(&self) -> Result<Vec<ThreadId>, HResult> {
        fiber::point();
        let st = self.lock();
        st.async_entry()?;
        Ok(st
            .threads
            .iter()
            .filter(|t| {
                t.is_managed()
                    && !t.gc_special
                    && matches!(t.lifecycle, Lifecycle::Alive | Lifecycle::Destroying)
                    && t.kind == ThreadKind::Managed
            })
            .map(|t| t.id)
            .collect())
    }
}

/// `GetFunctionFromIP*`'s lookup: NOT_YET_AVAILABLE before the GC is up, the reader lock,
/// then `E_FAIL` for native code and (unless `no_metadata_ok`) for methods without metadata.
fn function_from_ip(st: &mut State, ip: u64, no_metadata_ok: bool) -> Result<(FunctionId, ReJitId), HResult> {
    if !st.config.gc_initialized {
        return Err(HResult::CORPROF_E_NOT_YET_AVAILABLE);
    }
    st.reader_lock()?;
    let f = st
        .code
        .lookup(ip)
        .map(|i| st.code.function(i))
        .ok_or(HResult::E_FAIL)?;
    if !f.kind.is_managed() || !(f.kind.has_metadata() || no_metadata_ok) {
        return Err(HResult::E_FAIL);
    }
    Ok((f.function_id, ReJitId(0)))
}

/// `ICorProfilerInfo10::SuspendRuntime` (R41). A second call from the suspending thread
/// answers `S_OK` and leaks the suspension, as CoreCLR 3.1 does; from another thread it would
/// block on the thread-store lock.
fn suspend_runtime(st: &mut State) -> HResult {
    if let Err(hr) = st.sync_entry(true) {
        return hr;
    }
    if !st.config.started {
        return HResult::CORPROF_E_RUNTIME_UNINITIALIZED;
    }
    if st.config.suspend_in_progress {
        return HResult::CORPROF_E_SUSPENSION_IN_PROGRESS;
    }
    let me = st.caller().thread;
    if let Some(owner) = st.profiler_suspension {
        if owner != me {
            let owner = owner.map_or("<unnamed native thread>".to_string(), |i| {
                st.threads[i].name.clone()
            });
            let message = format!(
                "SuspendRuntime on {} blocks on the thread-store lock held by {owner}'s suspension",
                st.caller_name()
            );
            st.fault(FaultKind::Deadlock, true, message);
            return HResult::E_UNEXPECTED;
        }
        st.leaked_suspension = true;
        st.note(
            "SuspendRuntime",
            "already suspended: the second suspension's thread-store lock is leaked",
        );
        return HResult::S_OK;
    }
    st.notify(Notification::SuspendStarted(SuspendReason::ForProfiler));
    st.park_all(me);
    st.notify(Notification::SuspendFinished);
    st.profiler_suspension = Some(me);
    HResult::S_OK
}
