//! The simulated runtime: its global state, its threads, and the profiler-facing API.
//!
//! [`Runtime`] implements [`corprof::ProfilerInfo`]. Profiler code calls it through `&self`
//! from whichever simulated thread it runs on; the caller is set with [`Runtime::on_thread`]
//! (a scenario's executor, or a test, decides which simulated thread is running) or by the
//! running process's scheduler. Callbacks into the profiler are raised with no lock held, so a
//! profiler may call back into the runtime.
//!
//! One lock guards the `State` this module composes; each concern has its own module:
//! - `callers`: who is calling, and the entry checks that depend on it (R1, R27, R38, R42);
//! - `callbacks`: the contexts callbacks run in (the frames and GC mode they imply), raising
//!   them;
//! - `suspension`: runtime suspensions — the profiler's `SuspendRuntime` and the GC's — and
//!   parking threads at safe points (R41);
//! - `code_manager`: the code manager's reader lock against a writer (R13.2, R14, R42);
//! - `notifications`: callbacks queued under the lock and raised after it;
//! - `info`: the `ProfilerInfo` methods;
//! - `snapshot`: `DoStackSnapshot`, its decision table and its walk.

mod callbacks;
mod callers;
mod code_manager;
mod failing;
mod info;
mod notifications;
pub(crate) mod snapshot;
pub use snapshot::live::is_live as is_live_frame_info;
mod suspension;
mod unload;
mod version;

pub use crate::platform::Platform;
pub use callbacks::{builtin, CallContext, CallbackKind, UnknownThread};
pub(crate) use callbacks::{Entered, OBJECT_BASE};
pub(crate) use callers::Caller;
pub use failing::{injected, FailRule, Injected, FAILABLE_APIS, INJECTED};
pub use notifications::Notification;
pub(crate) use notifications::Queued;
pub(crate) use suspension::Suspension;
pub use unload::Unload;
pub use version::RuntimeVersion;

use crate::code::{CodeMap, FunctionIndex};
use crate::memory::AddressSpace;
use crate::thread::{Lifecycle, Thread};
use crate::trace::{Event, Fault, FaultKind};
use corprof::flags::event;
use corprof::{FunctionId, HResult, ProfilerCallback, ThreadId};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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
    /// The profiler was attached to the running process, not loaded at startup: it may only
    /// set the event-mask bits allowed after attach, and the runtime announces no thread or
    /// module that existed before it (it finds them with `EnumThreads`). `DoStackSnapshot`
    /// is allowed (R1).
    pub attached: bool,
    /// An EE suspension is in progress (R9).
    pub suspend_in_progress: bool,
    /// The profiler's event mask (R3).
    pub event_mask: u32,
    /// The high word of the event mask (`SetEventMask2`).
    pub event_mask_high: u32,
    /// The runtime version answered as.
    pub version: RuntimeVersion,
    /// `sizeof(CONTEXT)` the runtime reports to callbacks when it is not the version's own
    /// ([`RuntimeVersion::context_size`], R44).
    pub context_size: Option<u32>,
}

impl RuntimeConfig {
    /// `sizeof(CONTEXT)` the runtime reports to callbacks (R25, R44).
    pub fn context_size(&self) -> u32 {
        self.context_size
            .unwrap_or_else(|| self.version.context_size(self.platform))
    }
}

impl Default for RuntimeConfig {
    fn default() -> RuntimeConfig {
        RuntimeConfig {
            platform: Platform::Unix,
            started: true,
            gc_initialized: true,
            detaching: false,
            attached: false,
            suspend_in_progress: false,
            event_mask: event::ENABLE_STACK_SNAPSHOT,
            event_mask_high: 0,
            version: RuntimeVersion::default(),
            context_size: None,
        }
    }
}

/// The most events [`Runtime::take_events`] keeps between two takes.
pub const MAX_EVENTS: usize = 4096;

/// Everything behind the runtime's lock.
#[derive(Clone, Debug)]
pub(crate) struct State {
    pub config: RuntimeConfig,
    /// The code, shared by every fork of the runtime until one unloads some (copy on write).
    pub code: Arc<CodeMap>,
    pub memory: AddressSpace,
    pub threads: Vec<Thread>,
    /// Each thread's index in `threads`, by name (threads are never added or removed).
    pub thread_names: Arc<HashMap<String, usize>>,
    /// Who is calling: the running thread's calls into the runtime, innermost last.
    pub callers: Vec<Caller>,
    /// Runtime suspensions (the profiler's and the GC's).
    pub suspension: Suspension,
    /// Events not yet taken, at most [`MAX_EVENTS`] (see [`State::record`]).
    pub events: Vec<Event>,
    /// Events dropped since the last take because `events` was full.
    pub events_dropped: usize,
    pub faults: Vec<Fault>,
    /// How many of `faults` [`Runtime::take_faults`] already returned.
    pub faults_seen: usize,
    /// Callbacks queued for the profiler, raised once the lock is released.
    pub pending: Vec<Queued>,
    /// The runtime is a running process's: the process raises queued callbacks on their
    /// threads, and a runtime suspension is finished when its engine says so.
    pub in_process: bool,
    /// The buffers of the last `DoStackSnapshot` walk, kept for the next.
    pub spare_walk: Option<Box<crate::runtime::snapshot::Walk>>,
    /// The profiler's `Initialize` is running: the event mask's immutable flags may still be
    /// set.
    pub initializing: bool,
    /// Where the last `DoStackSnapshot` that returned started walking (`None` when it walked
    /// nothing); a scenario report marks it in the ground truth.
    pub last_walk_start: Option<crate::runtime::snapshot::WalkStart>,
    /// How many `DoStackSnapshot` calls have returned, and the last one's target and answer
    /// (a run's timeline marks each walk on the step that made it).
    pub walks: (u64, Option<(ThreadId, HResult)>),
    /// In a running process, the walks that returned since the process last took them.
    pub walk_log: Vec<snapshot::WalkSeen>,
    /// In a running process, each `EnumThreads` that answered since the process last took
    /// them: the calling thread (if the runtime knows it) and the threads it listed.
    pub list_log: Vec<(Option<usize>, Vec<usize>)>,
    /// How many threads have `holds_writer_lock` set (kept by [`State::set_writer_lock`]), so
    /// a reader need not look at every thread when none does.
    pub writer_lock_holders: usize,
    /// The calls made to fail on demand (`[[fail]]`), and how many each rule has watched.
    pub failing: failing::Failing,
    /// The thread holding the thread-store lock in a running process (a runtime suspension's
    /// or a GC's hold, across steps), as its scheduler keeps it.
    pub thread_store_owner: Option<usize>,
}

/// The simulated runtime.
pub struct Runtime {
    state: Mutex<State>,
    profiler: Mutex<Option<Arc<dyn ProfilerCallback>>>,
    /// Changes whenever a walk suspends or resumes its target
    /// ([`crate::thread::Thread::stopped_for_walk`]): a scheduler reads it after every step
    /// without taking the state lock.
    walk_stops: AtomicU64,
}

impl State {
    /// Counts a `DoStackSnapshot` of `thread` that answered `hr` ([`State::walks`]), and in a
    /// running process logs it for the process's coverage ([`State::walk_log`]).
    pub(crate) fn walked(&mut self, thread: ThreadId, hr: HResult, seen: Option<snapshot::WalkSeen>) {
        self.walks = (self.walks.0 + 1, Some((thread, hr)));
        if let Some(seen) = seen {
            self.walk_log.push(seen);
        }
    }

    /// The index of the thread named `name`.
    pub fn thread_named(&self, name: &str) -> Option<usize> {
        self.thread_names.get(name).copied()
    }

    /// Sets whether thread `t` holds the code manager's writer lock.
    pub fn set_writer_lock(&mut self, t: usize, held: bool) {
        let thread = &mut self.threads[t];
        if thread.holds_writer_lock != held {
            thread.holds_writer_lock = held;
            if held {
                self.writer_lock_holders += 1;
            } else {
                self.writer_lock_holders -= 1;
            }
        }
    }

    pub fn note(&mut self, kind: &str, detail: impl Into<String>) {
        // The event is built (its strings allocated) only when it is kept.
        if !self.dropping_events() {
            let on = self.caller_name();
            self.events.push(Event {
                kind: kind.to_string(),
                on,
                detail: Some(detail.into()),
            });
        }
    }

    /// Keeps `event` for [`Runtime::take_events`], unless [`MAX_EVENTS`] are waiting.
    pub fn record(&mut self, event: Event) {
        if !self.dropping_events() {
            self.events.push(event);
        }
    }

    /// True (counting one more dropped event) when [`MAX_EVENTS`] are waiting: a sampler
    /// that never takes them (each seeded walk of a preemptive thread notes a discarded
    /// seed) runs in bounded memory.
    fn dropping_events(&mut self) -> bool {
        let full = self.events.len() >= MAX_EVENTS;
        self.events_dropped += usize::from(full);
        full
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

    pub fn name_of(&self, id: ThreadId) -> String {
        self.resolve(id)
            .map_or_else(|| id.to_string(), |i| self.threads[i].name.clone())
    }

    /// Resolves a non-null `ThreadID` the way CoreCLR does: by reinterpreting it (R4). A
    /// `ThreadID` is a `Thread` object's address: once that `Thread` is freed, a thread that
    /// took its memory over (`reuses_thread_id`) answers to it, as soon as it has started.
    pub fn resolve(&self, id: ThreadId) -> Option<usize> {
        // A ThreadID is made from its first owner's index (`Thread::new`, `Thread::adopt`).
        let i = crate::thread::index_in_id(id)?;
        let t = self.threads.get(i)?;
        if !(t.is_managed() && t.id == id) {
            return None;
        }
        if t.lifecycle != Lifecycle::Deleted {
            return Some(i);
        }
        let successor = self.threads.iter().position(|n| {
            n.id == id && n.is_managed() && !matches!(n.lifecycle, Lifecycle::Deleted | Lifecycle::Unstarted)
        });
        Some(successor.unwrap_or(i))
    }

    /// Dereferences `id` as the runtime does, without validation, for API `api`: a `ThreadID`
    /// that is no `Thread` crashes the process (R4, R6), a freed one is a use after free
    /// (R37). Either is a fatal fault and `E_UNEXPECTED`.
    pub fn dereference(&mut self, id: ThreadId, api: &str) -> Result<usize, HResult> {
        let Some(t) = self.resolve(id) else {
            let message =
                format!("{api} dereferenced ThreadID {id}, which is no Thread: the process crashes");
            self.fault(FaultKind::BogusThreadId, true, message);
            return Err(HResult::E_UNEXPECTED);
        };
        if self.threads[t].lifecycle == Lifecycle::Deleted {
            let message = format!(
                "{api} dereferenced ThreadID {id} of {}, freed after ThreadDestroyed (block in ThreadDestroyed until walks end, R37)",
                self.threads[t].name
            );
            self.fault(FaultKind::ThreadUseAfterFree, true, message);
            return Err(HResult::E_UNEXPECTED);
        }
        Ok(t)
    }

    /// Looks `id` up for API `api` as the runtime does, by dereferencing it: `E_INVALIDARG`
    /// when it names no method; a method whose code was unloaded is freed memory, a fatal
    /// fault and `E_UNEXPECTED`.
    pub fn method(&mut self, id: FunctionId, api: &str) -> Result<FunctionIndex, HResult> {
        let index = self.code.by_function_id(id).ok_or(HResult::E_INVALIDARG)?;
        let f = self.code.function(index);
        if f.unloaded {
            let message = format!(
                "{api} used FunctionID {:#x} of {}, unloaded and freed (drop a method's ids at DynamicMethodUnloaded or AssemblyUnloadStarted)",
                id.0, f.name
            );
            self.fault(FaultKind::FunctionUseAfterUnload, true, message);
            return Err(HResult::E_UNEXPECTED);
        }
        Ok(index)
    }

    pub fn relayout(&mut self, index: usize) {
        let State {
            threads,
            code,
            memory,
            ..
        } = self;
        let thread = &mut threads[index];
        thread.update_layout(code, memory);
        // Invariant of a layout, checked at the leaf, where an update changes it (the layout
        // tests check all of it): the leafmost laid call is the stack's leafmost call, its frame
        // below its caller's.
        let (stack, calls) = (&thread.stack, &thread.layout.calls);
        debug_assert_eq!(
            calls.first().map(|c| c.depth),
            (stack
                .iter()
                .position(|e| matches!(e, crate::thread::StackEntry::Call { .. })))
            .map(|i| stack.depth_of(i))
        );
        debug_assert!(calls.get(1).is_none_or(|caller| calls[0].cfa < caller.cfa));
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
        let writer_lock_holders = threads.iter().filter(|t| t.holds_writer_lock).count();
        let thread_names = Arc::new(
            threads
                .iter()
                .enumerate()
                .map(|(i, t)| (t.name.clone(), i))
                .collect(),
        );
        Runtime {
            state: Mutex::new(State {
                config,
                code: Arc::new(code),
                memory,
                threads,
                thread_names,
                callers: Vec::new(),
                suspension: Suspension::default(),
                events: Vec::new(),
                events_dropped: 0,
                faults: Vec::new(),
                faults_seen: 0,
                pending: Vec::new(),
                in_process: false,
                spare_walk: None,
                initializing: false,
                last_walk_start: None,
                walks: (0, None),
                walk_log: Vec::new(),
                list_log: Vec::new(),
                writer_lock_holders,
                failing: failing::Failing::default(),
                thread_store_owner: None,
            }),
            profiler: Mutex::new(None),
            walk_stops: AtomicU64::new(0),
        }
    }

    /// Makes the calls `rules` name fail from now on (`[[fail]]`), each rule's count from 0.
    pub fn fail_calls(&self, rules: &[FailRule]) {
        self.lock().failing = failing::Failing::new(rules);
    }

    /// In a running process: every call no rule fails asks the run's chooser whether it fails
    /// (its `Chooser::fail`).
    pub(crate) fn inject_failures(&self, on: bool) {
        self.lock().failing.injecting = on;
    }

    /// A number that changes whenever a walk suspends or resumes its target.
    pub fn walk_stops(&self) -> u64 {
        self.walk_stops.load(Ordering::Acquire)
    }

    /// Notes that a walk suspended or resumed its target.
    pub(crate) fn walk_stopped(&self) {
        self.walk_stops.fetch_add(1, Ordering::Release);
    }

    /// A copy of this runtime in its current state, with no profiler attached: what each run of
    /// a process starts from, cheaper than building the code map and stacks again.
    pub fn fork(&self) -> Runtime {
        Runtime {
            state: Mutex::new(self.lock().clone()),
            profiler: Mutex::new(None),
            walk_stops: AtomicU64::new(0),
        }
    }

    /// A copy of the runtime in its current state that belongs to no process and has no
    /// profiler: an oracle asks it what a call would answer now, without changing anything.
    pub fn detached(&self) -> Runtime {
        let copy = self.fork();
        copy.lock().in_process = false;
        copy
    }

    /// Attaches a profiler to receive the runtime's callbacks.
    pub fn set_profiler(&self, profiler: Arc<dyn ProfilerCallback>) {
        *self.profiler.lock().unwrap_or_else(|e| e.into_inner()) = Some(profiler);
    }

    /// The attached profiler's callbacks, if any.
    pub fn profiler(&self) -> Option<Arc<dyn ProfilerCallback>> {
        self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Runs `f` as the profiler's `Initialize`: while it runs, `SetEventMask` may set or
    /// clear the flags that are immutable afterwards.
    pub fn initializing<R>(&self, f: impl FnOnce() -> R) -> R {
        self.lock().initializing = true;
        let result = f();
        self.lock().initializing = false;
        result
    }

    /// Detaches the profiler: no callback is raised from here on.
    pub fn clear_profiler(&self) {
        *self.profiler.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frees thread `thread`'s `Thread` object and unmaps its stack: later uses are
    /// use-after-free faults. Returns false if no thread has that name.
    pub fn delete_thread(&self, thread: &str) -> bool {
        let mut st = self.lock();
        let Some(i) = st.thread_named(thread) else {
            return false;
        };
        st.threads[i].lifecycle = Lifecycle::Deleted;
        let base = st.threads[i].stack_limit;
        st.memory.unmap(base);
        true
    }

    /// Takes the events recorded since the last call. When more than [`MAX_EVENTS`] were
    /// waiting, the last one taken is an `EventsDropped` event saying how many were not kept.
    pub fn take_events(&self) -> Vec<Event> {
        let mut st = self.lock();
        let mut events = std::mem::take(&mut st.events);
        let dropped = std::mem::take(&mut st.events_dropped);
        if dropped > 0 {
            events.push(Event {
                kind: "EventsDropped".into(),
                on: st.caller_name(),
                detail: Some(format!(
                    "{dropped} later events were not kept: at most {MAX_EVENTS} wait to be taken"
                )),
            });
        }
        events
    }

    /// Records that `api` was given a `COR_PRF_FRAME_INFO` that is no live snapshot frame's
    /// (a native profiler kept one after its callback returned) for `function`, and returns
    /// what the call answers: `E_INVALIDARG`. The runtime reads `funcID`, `thisArg` and
    /// `extraArg` from the handle without checking it (CoreCLR v3.1.23
    /// `src/vm/proftoeeinterfaceimpl.cpp`, `ProfToEEInterfaceImpl::GetFunctionInfo2`), and a
    /// snapshot frame's lives in the walk's own stack frame: once the callback has returned
    /// that slot is dead, so what is read is whatever is there now. The fault is not fatal:
    /// most often the `funcID` read differs and the call fails.
    pub fn stale_frame_info(&self, api: &str, function: FunctionId) -> HResult {
        let mut st = self.lock();
        let message = format!(
            "{} called {api} for {} with a COR_PRF_FRAME_INFO that is no live DoStackSnapshot frame's (kept after its callback returned?): the runtime reads it unchecked, from a dead stack slot",
            st.caller_name(),
            st.code
                .by_function_id(function)
                .map_or_else(|| function.to_string(), |f| st.code.function(f).name.clone())
        );
        st.fault(FaultKind::StaleFrameInfo, false, message);
        HResult::E_INVALIDARG
    }

    /// Takes the faults recorded since the last call (a fatal one stays in effect).
    pub fn take_faults(&self) -> Vec<Fault> {
        let mut st = self.lock();
        let total = st.faults.len();
        let seen = std::mem::replace(&mut st.faults_seen, total);
        st.faults[seen..].to_vec()
    }

    /// The fatal fault that ended (or hung) the simulated process, if one did.
    pub fn fatal_fault(&self) -> Option<Fault> {
        self.lock().faults.iter().find(|f| f.fatal).cloned()
    }

    /// True once a fatal fault ended (or hung) the simulated process.
    pub fn is_terminated(&self) -> bool {
        self.lock().terminated()
    }

    /// Read access to the code map.
    pub fn with_code<R>(&self, f: impl FnOnce(&CodeMap) -> R) -> R {
        f(&self.lock().code)
    }

    /// The process's module list with each module's unwind sections (`corprof::modules`).
    pub fn images(&self) -> std::sync::Arc<crate::code::images::Images> {
        self.lock().code.images().clone()
    }

    /// A snapshot of thread `name` (its ground-truth stack and layout), if it exists.
    pub fn thread(&self, name: &str) -> Option<Thread> {
        let st = self.lock();
        st.thread_named(name).map(|i| st.threads[i].clone())
    }

    /// A snapshot of the managed thread whose `ThreadID` is `id`, if there is one.
    pub fn thread_by_id(&self, id: ThreadId) -> Option<Thread> {
        let st = self.lock();
        st.resolve(id).map(|i| st.threads[i].clone())
    }

    /// The name of the managed thread whose `ThreadID` is `id`, without copying the thread.
    pub fn thread_name(&self, id: ThreadId) -> Option<String> {
        let st = self.lock();
        st.resolve(id).map(|i| st.threads[i].name.clone())
    }

    /// All threads, in declaration order.
    pub fn threads(&self) -> Vec<Thread> {
        self.lock().threads.clone()
    }

    /// Reads 8 bytes of simulated memory (`ReadProcessMemory`); `None` if unmapped.
    pub fn read_memory(&self, address: u64) -> Option<u64> {
        self.lock().memory.read_u64(address).ok()
    }

    /// Runs `f` with a reader of the simulated memory, for many reads at once (copying a
    /// stack, say) at a few nanoseconds each. The runtime's lock is held meanwhile: `f` must
    /// not call the runtime.
    pub fn with_memory<R>(&self, f: impl FnOnce(&mut crate::memory::Reader<'_>) -> R) -> R {
        f(&mut self.lock().memory.reader())
    }

    /// The current event mask (what the runtime consults before raising a callback).
    pub fn event_mask(&self) -> u32 {
        self.lock().config.event_mask
    }

    /// Whether the profiler was attached to the running process rather than loaded at
    /// startup ([`RuntimeConfig::attached`]).
    pub fn attached(&self) -> bool {
        self.lock().config.attached
    }

    /// The platform simulated.
    pub fn platform(&self) -> Platform {
        self.lock().config.platform
    }

    /// The runtime version simulated.
    pub fn version(&self) -> RuntimeVersion {
        self.lock().config.version
    }
}
