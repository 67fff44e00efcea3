//! One run of a process: the scheduler loop and what each step does.
//!
//! Invariants, checked with debug assertions where they are cheap:
//! - exactly one simulated thread runs at a time (the engine's loop, or the one fiber it
//!   resumed and waits for);
//! - a lock has at most one owner; only the thread-store lock counts re-entries (a second
//!   `SuspendRuntime` leaks one, R41); a thread waiting for a lock it owns is a one-thread cycle;
//! - a thread can run only if its wait condition holds, it is not OS-suspended (a suspension
//!   still pending — asynchronous `SuspendThread` before `GetThreadContext` — does not stop it)
//!   and it is not parked by a runtime suspension;
//! - every stack edit re-lays the thread's memory, so walks and stack reads see the new stack.

use super::fiber::{Fiber, Reply, Request, Yielded};
use super::program::{Instr, LockId, Op};
use super::schedule::{Chooser, Schedule, ScheduleError};
use super::waitfor::{find_cycle, Edge};
use super::{CycleLink, Process, Program, RunFault, RunReport, TraceEntry};
use crate::runtime::{CallContext, CallbackKind, Caller, Entered, Platform, Runtime};
use crate::thread::{ExceptionState, FrameKind, Funclet, Lifecycle, Mode, StackEntry};
use crate::trace::FaultKind;
use corprof::flags::event;
use corprof::os::{EventId, MutexId, OsError, OsThread};
use corprof::{ClassId, HResult, ObjectId, ProfilerInfo, ThreadId};
use std::sync::Arc;
use std::time::Duration;

/// What a blocked thread waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Wait {
    /// A lock to be free.
    Lock(LockId),
    /// Every cooperative thread to reach a safe point (the GC thread).
    SafePoints,
    /// The runtime suspension to end (a parked thread).
    SuspensionEnd,
    /// An event to be set, until a virtual deadline (`u64::MAX`: none).
    Event(u16, u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// No program: the thread stays as the file declares it, as in a frozen scenario.
    Frozen,
    NotStarted,
    Ready,
    Blocked(Wait),
    Sleeping(u64),
    Done,
}

/// Where a thread's next step comes from.
enum Source {
    /// A program and the index of its next instruction, and the step within it.
    Program { code: Program, pc: usize, phase: u32 },
    /// Rust code: the request it waits on (`None` before it starts), the reply it gets when
    /// it next runs (after a sleep), and the deadline of an event wait in progress.
    Fiber {
        fiber: Fiber,
        pending: Option<Request>,
        ready: Option<Reply>,
        deadline: Option<u64>,
    },
}

/// Something the runtime tells the profiler on a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Notice {
    /// `ThreadCreated` (then `ThreadAssignedToOSThread`), on the new thread.
    Created,
    /// A callback raised in the runtime's context for it.
    Callback(CallbackKind),
}

impl Notice {
    fn name(self) -> &'static str {
        match self {
            Notice::Created => "ThreadCreated",
            Notice::Callback(kind) => kind.as_str(),
        }
    }

    fn mask(self) -> u32 {
        match self {
            Notice::Created => event::MONITOR_THREADS,
            Notice::Callback(kind) => kind.required_mask(),
        }
    }
}

/// One activation on a thread: its main code, or a callback or signal handler on top of it.
struct Activation {
    source: Source,
    /// The callback it runs in (`None`: the thread's own code or a signal handler).
    callback: Option<CallbackKind>,
    /// What raising the callback changed on the thread, restored when it returns.
    entered: Option<Entered>,
}

struct Sim {
    name: String,
    status: Status,
    stack: Vec<Activation>,
    /// Threads that OS-suspended this one, one entry per suspension.
    suspenders: Vec<usize>,
    /// The newest suspension has not completed (no `GetThreadContext` yet).
    suspend_pending: bool,
    /// The thread ran a step since it was last suspended.
    moved: bool,
    /// Parked by a runtime suspension (mirrors the runtime's `Thread::parked`).
    parked: bool,
    signal_pending: bool,
    signals_masked: bool,
    handler_replaced: bool,
    last_progress: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct LockState {
    owner: Option<usize>,
    count: u32,
}

/// What a step did.
enum Done {
    /// The instruction finished; move on.
    Next,
    /// Run the same instruction again at a later step (multi-step instructions).
    Again,
    /// Blocked: retry when the wait ends.
    Block(Wait),
}

/// A run in progress.
pub(crate) struct Run<'p> {
    p: &'p Process,
    rt: Arc<Runtime>,
    th: Vec<Sim>,
    locks: Vec<LockState>,
    lock_names: Vec<String>,
    events: Vec<bool>,
    event_names: Vec<String>,
    /// Threads the profiler's ThreadDestroyed handler marked (`mark_destroyed`).
    marks: Vec<bool>,
    /// The thread running a GC's runtime suspension.
    gc: Option<usize>,
    now: u64,
    steps: u64,
    choices: Vec<u16>,
    trace: Vec<TraceEntry>,
    tracing: bool,
    current: Option<usize>,
    fault: Option<RunFault>,
    warnings: Vec<RunFault>,
    /// Runtime faults already seen.
    runtime_faults: usize,
}

impl<'p> Run<'p> {
    pub fn new(p: &'p Process, tracing: bool) -> Run<'p> {
        let s = &p.scenario;
        let rt = Arc::new(p.template.fork());
        let spec = &s.process;
        let th = s
            .threads
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let source = match (&p.bodies[i], &spec.programs.get(i).cloned().flatten()) {
                    (Some(body), _) => Some(fiber_source(spawn_body(body.clone(), rt.clone()))),
                    (None, Some(code)) => Some(Source::Program {
                        code: code.clone(),
                        pc: 0,
                        phase: 0,
                    }),
                    (None, None) => None,
                };
                let status = match &source {
                    None => Status::Frozen,
                    Some(_) if spec.spawned.get(i).copied().unwrap_or(false) => Status::NotStarted,
                    Some(_) => Status::Ready,
                };
                Sim {
                    name: t.name.clone(),
                    status,
                    stack: source
                        .into_iter()
                        .map(|source| Activation {
                            source,
                            callback: None,
                            entered: None,
                        })
                        .collect(),
                    suspenders: Vec::new(),
                    suspend_pending: false,
                    moved: false,
                    parked: false,
                    signal_pending: false,
                    signals_masked: false,
                    handler_replaced: false,
                    last_progress: 0,
                }
            })
            .collect();
        // Runtime threads have done their per-thread setup; native threads have not (R39).
        for t in rt.lock().threads.iter_mut() {
            t.tls_initialized |= t.is_managed();
        }
        // A thread the file declares holding the code-manager lock holds it here too.
        let mut locks = vec![LockState::default(); spec.locks.len()];
        for (i, t) in s.threads.iter().enumerate() {
            if t.holds_writer_lock {
                locks[LockId::CODE_MANAGER.0 as usize] = LockState {
                    owner: Some(i),
                    count: 1,
                };
            }
        }
        Run {
            p,
            rt,
            th,
            locks,
            lock_names: spec.locks.clone(),
            events: vec![false; spec.events.len()],
            event_names: spec.events.clone(),
            marks: vec![false; s.threads.len()],
            gc: None,
            now: 0,
            steps: 0,
            choices: Vec::new(),
            trace: Vec::new(),
            tracing,
            current: None,
            fault: None,
            warnings: Vec::new(),
            runtime_faults: 0,
        }
    }

    /// Runs to the end under `chooser`.
    pub fn go(mut self, chooser: &mut dyn Chooser) -> Result<RunReport, ScheduleError> {
        let limits = self.p.scenario.process.limits;
        let mut runnable = Vec::with_capacity(self.th.len());
        while self.fault.is_none() {
            self.runnable(&mut runnable);
            if runnable.is_empty() {
                if let Some(wake) = self.next_wake() {
                    self.now = wake;
                    continue;
                }
                self.stuck();
                break;
            }
            let t = if runnable.len() == 1 {
                runnable[0]
            } else {
                let current = self.current.filter(|c| runnable.contains(c));
                let t = chooser.choose(&runnable, current)?;
                debug_assert!(runnable.contains(&t));
                self.choices.push(t as u16);
                t
            };
            self.current = Some(t);
            self.steps += 1;
            self.now += limits.step_us;
            self.step(t);
            self.collect_runtime_faults();
            if self.fault.is_some() {
                break;
            }
            if !self.can_run(t) && self.th[t].status != Status::Done {
                // Every new wait-for cycle passes through the thread that just stepped.
                if let Some(cycle) = find_cycle(t, |x| self.edges(x)) {
                    self.deadlock(cycle);
                    break;
                }
            }
            if self.now.saturating_sub(self.th[t].last_progress) > limits.livelock_us {
                let message = format!(
                    "{} made no progress for {} ms of virtual time",
                    self.th[t].name,
                    limits.livelock_us / 1000
                );
                self.end("livelock", message, Vec::new());
            } else if self.steps >= limits.max_steps {
                let message = format!("the run did not end within {} steps", limits.max_steps);
                self.end("livelock", message, Vec::new());
            }
        }
        Ok(self.finish())
    }

    fn finish(mut self) -> RunReport {
        // Stop every fiber that is still waiting (drop unwinds it), with no lock held.
        for s in &mut self.th {
            s.stack.clear();
        }
        // The outcome is the fatal fault, else the first fault the run went on after.
        let fault = self.fault.take().or_else(|| self.warnings.first().cloned());
        RunReport {
            schedule: Schedule(std::mem::take(&mut self.choices)).to_string(),
            outcome: fault.as_ref().map_or("ok".to_string(), |f| f.kind.clone()),
            fault,
            warnings: std::mem::take(&mut self.warnings),
            steps: self.steps,
            time_us: self.now,
            trace: std::mem::take(&mut self.trace),
        }
    }

    // ---- who can run -------------------------------------------------------------------

    fn runnable(&mut self, out: &mut Vec<usize>) {
        out.clear();
        for t in 0..self.th.len() {
            if let Status::Sleeping(until) = self.th[t].status {
                if until <= self.now {
                    self.th[t].status = Status::Ready;
                }
            }
            if self.can_run(t) {
                out.push(t);
            }
        }
    }

    fn can_run(&self, t: usize) -> bool {
        let s = &self.th[t];
        if s.parked || (!s.suspenders.is_empty() && !s.suspend_pending) {
            return false;
        }
        match s.status {
            Status::Ready => true,
            Status::Blocked(w) => self.wait_over(t, w),
            Status::Frozen | Status::NotStarted | Status::Sleeping(_) | Status::Done => false,
        }
    }

    fn wait_over(&self, t: usize, w: Wait) -> bool {
        match w {
            Wait::Lock(l) => self.locks[l.0 as usize].owner.is_none(),
            Wait::SafePoints => self.unsafe_threads(t).is_empty(),
            Wait::SuspensionEnd => self.suspension_owner().is_none(),
            Wait::Event(e, deadline) => self.events[e as usize] || deadline <= self.now,
        }
    }

    /// Copies the runtime's parked marks (after a runtime suspension starts or ends).
    fn sync_parked(&mut self) {
        let st = self.rt.lock();
        for (s, t) in self.th.iter_mut().zip(&st.threads) {
            s.parked = t.parked.is_some();
        }
    }

    fn next_wake(&self) -> Option<u64> {
        self.th
            .iter()
            .filter(|s| s.suspenders.is_empty() || s.suspend_pending)
            .filter_map(|s| match s.status {
                Status::Sleeping(until) => Some(until),
                Status::Blocked(Wait::Event(_, deadline)) if deadline != u64::MAX => Some(deadline),
                _ => None,
            })
            .min()
    }

    /// Managed threads a GC on `gc` still waits for: running, cooperative, not parked.
    fn unsafe_threads(&self, gc: usize) -> Vec<usize> {
        let st = self.rt.lock();
        (0..self.th.len())
            .filter(|&i| {
                let t = &st.threads[i];
                i != gc
                    && t.is_managed()
                    && !matches!(self.th[i].status, Status::Done | Status::NotStarted)
                    && t.mode == Mode::Cooperative
                    && t.parked.is_none()
            })
            .collect()
    }

    /// The thread whose runtime suspension (a GC, or the profiler's `SuspendRuntime`) is in
    /// effect, if any.
    fn suspension_owner(&self) -> Option<usize> {
        self.gc.or_else(|| self.rt.lock().profiler_suspension.flatten())
    }

    /// The wait-for edges out of `t` (empty when it can run).
    fn edges(&self, t: usize) -> Vec<Edge> {
        let s = &self.th[t];
        let mut out = Vec::new();
        if matches!(s.status, Status::Done | Status::Frozen) {
            return out;
        }
        if !s.suspenders.is_empty() && !s.suspend_pending {
            out.extend(s.suspenders.iter().map(|&by| Edge {
                to: by,
                what: "ResumeThread".into(),
            }));
        }
        if s.parked {
            out.extend(self.suspension_owner().map(|o| Edge {
                to: o,
                what: "end of the runtime suspension".into(),
            }));
        }
        if let Status::Blocked(w) = s.status {
            if !self.wait_over(t, w) {
                match w {
                    Wait::Lock(l) => out.extend(self.locks[l.0 as usize].owner.map(|o| Edge {
                        to: o,
                        what: format!("lock {}", self.lock_names[l.0 as usize]),
                    })),
                    Wait::SafePoints => out.extend(self.unsafe_threads(t).into_iter().map(|o| Edge {
                        to: o,
                        what: "safe point".into(),
                    })),
                    Wait::SuspensionEnd => out.extend(self.suspension_owner().map(|o| Edge {
                        to: o,
                        what: "end of the runtime suspension".into(),
                    })),
                    Wait::Event(..) => {}
                }
            }
        }
        out
    }

    // ---- endings -----------------------------------------------------------------------

    fn end(&mut self, kind: &str, message: String, cycle: Vec<CycleLink>) {
        if self.fault.is_none() {
            self.note_for(self.current, 0, format!("{kind}: {message}"));
            self.fault = Some(RunFault {
                kind: kind.into(),
                message,
                cycle,
            });
        }
    }

    fn links(&self, path: &[(usize, Edge)]) -> Vec<CycleLink> {
        path.iter()
            .map(|(from, e)| CycleLink {
                thread: self.th[*from].name.clone(),
                waits_for: e.what.clone(),
                held_by: self.th[e.to].name.clone(),
            })
            .collect()
    }

    fn deadlock(&mut self, cycle: Vec<(usize, Edge)>) {
        let links = self.links(&cycle);
        let message = links
            .iter()
            .map(|l| format!("{} waits for {} ({})", l.thread, l.held_by, l.waits_for))
            .collect::<Vec<_>>()
            .join(", ");
        self.end("deadlock", message, links);
    }

    /// Nothing can run and nothing sleeps: done, a cycle, or a hang.
    fn stuck(&mut self) {
        let waiting: Vec<usize> = (0..self.th.len())
            .filter(|&t| {
                !matches!(
                    self.th[t].status,
                    Status::Done | Status::NotStarted | Status::Frozen
                )
            })
            .collect();
        if waiting.is_empty() {
            return;
        }
        for &t in &waiting {
            if let Some(cycle) = find_cycle(t, |x| self.edges(x)) {
                self.deadlock(cycle);
                return;
            }
        }
        let mut links = Vec::new();
        let mut parts = Vec::new();
        for &t in &waiting {
            let edges = self.edges(t);
            if edges.is_empty() {
                let what = match self.th[t].status {
                    Status::Blocked(Wait::Event(e, _)) => format!("event {}", self.event_names[e as usize]),
                    Status::Blocked(Wait::Lock(l)) => format!("lock {}", self.lock_names[l.0 as usize]),
                    _ => "nothing that can happen".into(),
                };
                parts.push(format!("{} waits for {what}", self.th[t].name));
                links.push(CycleLink {
                    thread: self.th[t].name.clone(),
                    waits_for: what,
                    held_by: "nobody".into(),
                });
            }
            for e in edges {
                let held = &self.th[e.to].name;
                let done = if self.th[e.to].status == Status::Done {
                    " (which has ended)"
                } else {
                    ""
                };
                parts.push(format!("{} waits for {held}{done} ({})", self.th[t].name, e.what));
                links.push(CycleLink {
                    thread: self.th[t].name.clone(),
                    waits_for: e.what,
                    held_by: held.clone(),
                });
            }
        }
        self.end("hang", parts.join(", "), links);
    }

    fn collect_runtime_faults(&mut self) {
        let faults = self.rt.take_faults();
        for f in faults {
            self.runtime_faults += 1;
            let fault = RunFault {
                kind: f.kind.as_str().into(),
                message: f.message,
                cycle: Vec::new(),
            };
            self.note_for(
                self.current,
                0,
                format!("fault {}: {}", fault.kind, fault.message),
            );
            if f.fatal {
                if self.fault.is_none() {
                    self.fault = Some(fault);
                }
            } else {
                self.warn(fault);
            }
        }
    }

    /// A fault the run goes on after (the first one is the run's outcome if nothing fatal
    /// follows).
    fn warn(&mut self, fault: RunFault) {
        self.warnings.push(fault);
    }

    fn fatal(&mut self, kind: FaultKind, message: String) {
        self.end(kind.as_str(), message, Vec::new());
    }

    // ---- tracing -----------------------------------------------------------------------

    fn note_for(&mut self, t: Option<usize>, line: usize, what: String) {
        if self.tracing {
            self.trace.push(TraceEntry {
                step: self.steps,
                time_us: self.now,
                thread: t.map_or("-".into(), |t| self.th[t].name.clone()),
                line,
                what,
            });
        }
    }

    fn note(&mut self, t: usize, line: usize, what: impl FnOnce(&Self) -> String) {
        if self.tracing {
            let text = what(self);
            self.note_for(Some(t), line, text);
        }
    }

    // ---- one step ----------------------------------------------------------------------

    fn step(&mut self, t: usize) {
        if self.th[t].suspend_pending {
            self.th[t].moved = true;
        }
        if let Status::Blocked(_) | Status::Sleeping(_) = self.th[t].status {
            self.th[t].status = Status::Ready;
        }
        // A cooperative managed thread reaches a safe point at every step: during a runtime
        // suspension it parks there.
        if self.park_if_suspending(t) {
            return;
        }
        if self.deliver_signal(t) {
            return;
        }
        let depth = self.th[t].stack.len();
        let Some(top) = self.th[t].stack.last_mut() else {
            self.th[t].status = Status::Done;
            return;
        };
        let callback = top.callback;
        match &mut top.source {
            Source::Program { code, pc, phase } => {
                let Some(instr) = code.get(*pc).copied() else {
                    self.pop_activation(t);
                    return;
                };
                let phase = *phase;
                let done = self.with_caller(t, callback, |run| run.exec(t, instr, phase));
                self.after(t, depth, instr, done);
            }
            Source::Fiber { .. } => self.fiber_step(t, callback),
        }
    }

    /// Moves the activation at `depth` (the one that ran `instr`) on, as `done` says. A
    /// handler the step pushed runs first; the instruction below it has already moved on.
    fn after(&mut self, t: usize, depth: usize, instr: Instr, done: Done) {
        let progress = !matches!(instr.op, Op::Spin(_));
        if progress {
            self.th[t].last_progress = self.now;
        }
        let Some(Activation {
            source: Source::Program { pc, phase, .. },
            ..
        }) = self.th[t].stack.get_mut(depth - 1)
        else {
            return;
        };
        match done {
            Done::Next => {
                *pc += 1;
                *phase = 0;
            }
            Done::Again => *phase = phase.wrapping_add(1),
            Done::Block(w) => self.th[t].status = Status::Blocked(w),
        }
    }

    /// Runs `f` with `t` as the runtime's current caller.
    fn with_caller<R>(
        &mut self,
        t: usize,
        callback: Option<CallbackKind>,
        f: impl FnOnce(&mut Self) -> R,
    ) -> R {
        self.rt.lock().callers.push(Caller {
            thread: Some(t),
            callback,
        });
        let r = f(self);
        self.rt.lock().callers.pop();
        r
    }

    fn pop_activation(&mut self, t: usize) {
        let act = self.th[t].stack.pop().expect("an activation to pop");
        if let Some(entered) = act.entered {
            self.rt.leave(entered);
        }
        if self.th[t].stack.is_empty() {
            self.th[t].status = Status::Done;
            self.note(t, 0, |_| "ends".into());
        }
    }

    fn park_if_suspending(&mut self, t: usize) -> bool {
        let Some(owner) = self.suspension_owner() else {
            return false;
        };
        // Only managed code polls for safe points: profiler code in a callback runs on (in
        // cooperative mode, holding the suspension up).
        if self.th[t].stack.len() != 1 {
            return false;
        }
        let mut st = self.rt.lock();
        let thread = &st.threads[t];
        if owner == t || !thread.is_managed() || thread.mode != Mode::Cooperative || thread.parked.is_some() {
            return false;
        }
        st.park(t);
        drop(st);
        self.th[t].parked = true;
        self.note(t, 0, |_| {
            "parks at a safe point for the runtime suspension".into()
        });
        true
    }

    fn deliver_signal(&mut self, t: usize) -> bool {
        let s = &mut self.th[t];
        if !s.signal_pending || s.signals_masked {
            return false;
        }
        s.signal_pending = false;
        if s.handler_replaced {
            self.note(t, 0, |_| {
                "the application's own signal handler runs; the profiler's does not".into()
            });
            return true;
        }
        let Some(handler) = self.p.scenario.process.handlers.signal.clone() else {
            self.note(t, 0, |_| "signal delivered; no handler installed".into());
            return true;
        };
        self.note(t, 0, |run| {
            let rip = run.rt.lock().threads[t].leaf_context().map_or(0, |c| c.rip);
            format!("signal handler starts (interrupted at {rip:#x})")
        });
        self.th[t].stack.push(Activation {
            source: Source::Program {
                code: handler,
                pc: 0,
                phase: 0,
            },
            callback: None,
            entered: None,
        });
        true
    }

    /// After `ThreadDestroyed` returned and the thread died: its `Thread` is deleted and its
    /// stack unmapped.
    fn delete(&mut self, t: usize) {
        let mut st = self.rt.lock();
        st.threads[t].lifecycle = Lifecycle::Deleted;
        let base = st.threads[t].stack_limit;
        st.memory.unmap(base);
        drop(st);
        self.th[t].stack.clear();
        self.th[t].status = Status::Done;
        self.note(t, 0, |_| "Thread deleted, stack unmapped".into());
    }

    /// Raises `notice` on thread `t` if the event mask enables it and the profiler handles it:
    /// pushes the handler (a program, or the Rust profiler's method on a fiber) on the thread.
    fn raise(&mut self, t: usize, notice: Notice) -> bool {
        if self.rt.event_mask() & notice.mask() != notice.mask() {
            return false;
        }
        let source = if let Some(profiler) = &self.p.profiler {
            let profiler = profiler.clone();
            let (id, os_id) = {
                let st = self.rt.lock();
                (st.threads[t].id, st.threads[t].os_id)
            };
            let object = ObjectId(0x7f40_0000_1000);
            fiber_source(Fiber::spawn(Box::new(move || {
                match notice {
                    Notice::Created => {
                        profiler.thread_created(id);
                        profiler.thread_assigned_to_os_thread(id, os_id)
                    }
                    Notice::Callback(CallbackKind::ThreadDestroyed) => profiler.thread_destroyed(id),
                    Notice::Callback(CallbackKind::ObjectAllocated) => {
                        profiler.object_allocated(object, ClassId::NULL)
                    }
                    Notice::Callback(_) => profiler.exception_thrown(object),
                };
            })))
        } else {
            let handlers = &self.p.scenario.process.handlers;
            let code = match notice {
                Notice::Created => &handlers.thread_created,
                Notice::Callback(CallbackKind::ThreadDestroyed) => &handlers.thread_destroyed,
                Notice::Callback(CallbackKind::ObjectAllocated) => &handlers.object_allocated,
                Notice::Callback(_) => &handlers.exception_thrown,
            };
            let Some(code) = code.clone() else {
                return false;
            };
            Source::Program {
                code,
                pc: 0,
                phase: 0,
            }
        };
        // ThreadCreated runs in the thread's own context; the others push the runtime's frames.
        let (entered, callback) = match notice {
            Notice::Created => (None, None),
            Notice::Callback(kind) => (
                Some(self.rt.enter(t, CallContext::Callback(kind))),
                Some(kind).filter(|k| k.sets_callback_state()),
            ),
        };
        self.note(t, 0, |_| format!("{} raised", notice.name()));
        self.th[t].stack.push(Activation {
            source,
            callback,
            entered,
        });
        true
    }

    // ---- locks -------------------------------------------------------------------------

    /// Takes lock `l` for `t`; `Err(wait)` when it must wait.
    fn acquire(&mut self, t: usize, l: LockId) -> Result<(), Wait> {
        let lock = &mut self.locks[l.0 as usize];
        match lock.owner {
            None => {
                *lock = LockState {
                    owner: Some(t),
                    count: 1,
                };
                if l == LockId::CODE_MANAGER {
                    self.rt.lock().threads[t].holds_writer_lock = true;
                }
                Ok(())
            }
            Some(o) if o == t && l == LockId::THREAD_STORE => {
                lock.count += 1;
                Ok(())
            }
            // Non-recursive: waiting for one's own lock is a one-thread cycle.
            Some(_) => Err(Wait::Lock(l)),
        }
    }

    /// Whether `t` could take `l` now (for locks taken and released within one step).
    fn passes(&self, t: usize, l: LockId) -> Result<(), Wait> {
        match self.locks[l.0 as usize].owner {
            Some(o) if o != t || l != LockId::THREAD_STORE => Err(Wait::Lock(l)),
            _ => Ok(()),
        }
    }

    fn release(&mut self, t: usize, l: LockId, line: usize) -> bool {
        let lock = &mut self.locks[l.0 as usize];
        if lock.owner != Some(t) {
            let holder = lock
                .owner
                .map_or("nobody".to_string(), |o| self.th[o].name.clone());
            let message = format!(
                "{} (line {line}) releases lock {} held by {holder}",
                self.th[t].name, self.lock_names[l.0 as usize]
            );
            self.end("lock_misuse", message, Vec::new());
            return false;
        }
        lock.count -= 1;
        if lock.count == 0 {
            lock.owner = None;
            if l == LockId::CODE_MANAGER {
                self.rt.lock().threads[t].holds_writer_lock = false;
            }
        }
        debug_assert!(self.locks.iter().all(|l| (l.owner.is_some()) == (l.count > 0)));
        true
    }

    /// The per-thread runtime setup a thread's first runtime call does (R39): it takes the
    /// loader lock, which a thread suspended while holding it never releases.
    fn thread_setup(&mut self, t: usize) -> Result<(), Wait> {
        if self.rt.lock().threads[t].tls_initialized {
            return Ok(());
        }
        self.passes(t, LockId::LOADER)?;
        self.rt.lock().threads[t].tls_initialized = true;
        Ok(())
    }

    // ---- instructions ------------------------------------------------------------------

    fn exec(&mut self, t: usize, instr: Instr, phase: u32) -> Done {
        let line = instr.line;
        let describe = |run: &Self| run.describe(instr.op);
        match instr.op {
            Op::Call(f) => {
                let managed = self.rt.with_code(|c| c.function(f).kind.is_managed());
                let mode = managed.then_some(Mode::Cooperative);
                self.push_frames(t, instr, &[call_of(f)], mode)
            }
            Op::Return => {
                let mut st = self.rt.lock();
                let thread = &mut st.threads[t];
                let calls = thread
                    .stack
                    .iter()
                    .filter(|e| matches!(e, StackEntry::Call { .. }))
                    .count();
                let leaf_is_call = matches!(thread.stack.first(), Some(StackEntry::Call { .. }));
                if calls < 2 || !leaf_is_call {
                    drop(st);
                    let message = format!(
                        "{} returns at line {line} with no caller to return to",
                        self.th[t].name
                    );
                    self.end("unbalanced_return", message, Vec::new());
                    return Done::Next;
                }
                thread.stack.remove(0);
                st.relayout(t);
                drop(st);
                self.note(t, line, describe);
                Done::Next
            }
            Op::PInvoke(f) => {
                let entries = [call_of(f), StackEntry::Frame(FrameKind::InlinedCall)];
                self.push_frames(t, instr, &entries, Some(Mode::Preemptive))
            }
            Op::PInvokeReturn => {
                let mut st = self.rt.lock();
                let thread = &st.threads[t];
                let in_pinvoke = matches!(
                    thread.stack.get(..2),
                    Some([StackEntry::Call { .. }, StackEntry::Frame(FrameKind::InlinedCall)])
                );
                if !in_pinvoke {
                    drop(st);
                    let message = format!(
                        "{} leaves a P/Invoke at line {line} but is not in one",
                        self.th[t].name
                    );
                    self.end("unbalanced_return", message, Vec::new());
                    return Done::Next;
                }
                // Returning to cooperative mode waits for a runtime suspension to end.
                if let Some(owner) = self.gc.or(st.profiler_suspension.flatten()) {
                    if owner != t && thread.is_managed() {
                        drop(st);
                        self.note(t, line, |_| {
                            "returns from native code: waits for the runtime suspension".into()
                        });
                        return Done::Block(Wait::SuspensionEnd);
                    }
                }
                let thread = &mut st.threads[t];
                thread.stack.drain(0..2);
                thread.mode = Mode::Cooperative;
                st.relayout(t);
                drop(st);
                self.note(t, line, describe);
                Done::Next
            }
            Op::Alloc => {
                if phase == 0 {
                    if let Err(w) = self.acquire(t, LockId::HEAP) {
                        self.note(t, line, |_| "alloc: waits for lock heap".into());
                        return Done::Block(w);
                    }
                    self.note(t, line, |_| "alloc: takes lock heap".into());
                    return Done::Again;
                }
                if !self.release(t, LockId::HEAP, line) {
                    return Done::Next;
                }
                self.note(t, line, |_| "alloc: releases lock heap".into());
                // Managed allocations (not the profiler's own, in a handler) are reported.
                if self.th[t].stack.len() == 1 && self.rt.lock().threads[t].is_managed() {
                    self.raise(t, Notice::Callback(CallbackKind::ObjectAllocated));
                }
                Done::Next
            }
            Op::Lock(l) => match self.acquire(t, l) {
                Ok(()) => {
                    self.note(t, line, describe);
                    Done::Next
                }
                Err(w) => {
                    self.note(t, line, |run| format!("{}: waits", run.describe(instr.op)));
                    Done::Block(w)
                }
            },
            Op::Unlock(l) => {
                if self.release(t, l, line) {
                    self.note(t, line, describe);
                }
                Done::Next
            }
            Op::Throw => {
                self.rt.lock().threads[t].exception = ExceptionState::FirstPass;
                self.note(t, line, describe);
                self.raise(t, Notice::Callback(CallbackKind::ExceptionThrown));
                Done::Next
            }
            Op::Catch(n) => {
                let mut st = self.rt.lock();
                let thread = &mut st.threads[t];
                let mut left = n;
                while left > 0 {
                    match thread.stack.first() {
                        Some(StackEntry::Call { .. })
                            if thread
                                .stack
                                .iter()
                                .filter(|e| matches!(e, StackEntry::Call { .. }))
                                .count()
                                > 1 =>
                        {
                            thread.stack.remove(0);
                            left -= 1;
                        }
                        Some(StackEntry::Frame(_)) => {
                            thread.stack.remove(0);
                        }
                        _ => break,
                    }
                }
                while matches!(thread.stack.first(), Some(StackEntry::Frame(_))) {
                    thread.stack.remove(0);
                }
                if left > 0 {
                    drop(st);
                    let message = format!("{} unwinds past its root frame at line {line}", self.th[t].name);
                    self.end("unbalanced_return", message, Vec::new());
                    return Done::Next;
                }
                if let Some(StackEntry::Call { function, .. }) = thread.stack.first().copied() {
                    thread.stack.insert(
                        0,
                        StackEntry::Call {
                            function,
                            offset: None,
                            funclet: Some(Funclet::Catch),
                        },
                    );
                }
                thread.exception = ExceptionState::UnwindingInManaged;
                thread.mode = Mode::Cooperative;
                st.relayout(t);
                drop(st);
                self.note(t, line, describe);
                Done::Next
            }
            Op::EndCatch => {
                let mut st = self.rt.lock();
                let thread = &mut st.threads[t];
                if matches!(
                    thread.stack.first(),
                    Some(StackEntry::Call { funclet: Some(_), .. })
                ) {
                    thread.stack.remove(0);
                }
                thread.exception = ExceptionState::None;
                st.relayout(t);
                drop(st);
                self.note(t, line, describe);
                Done::Next
            }
            Op::Gc => self.gc(t, line, phase),
            Op::Spin(n) => {
                if phase + 1 >= n {
                    self.note(t, line, describe);
                    Done::Next
                } else {
                    Done::Again
                }
            }
            Op::Sleep(us) => {
                if phase == 0 {
                    self.note(t, line, describe);
                    self.th[t].status = Status::Sleeping(self.now + us);
                    Done::Again
                } else {
                    Done::Next
                }
            }
            Op::Spawn(x) => {
                if self.th[x].status == Status::NotStarted {
                    self.th[x].status = Status::Ready;
                    self.th[x].last_progress = self.now;
                    self.note(t, line, describe);
                    if self.rt.lock().threads[x].is_managed() {
                        self.raise(x, Notice::Created);
                    }
                } else {
                    self.note(t, line, |run| {
                        format!("spawn {}: already started", run.th[x].name)
                    });
                }
                Done::Next
            }
            Op::Exit => self.exit(t, line, phase),
            Op::MaskSignals | Op::UnmaskSignals | Op::ReplaceSignalHandler => {
                let s = &mut self.th[t];
                match instr.op {
                    Op::MaskSignals => s.signals_masked = true,
                    Op::UnmaskSignals => s.signals_masked = false,
                    _ => s.handler_replaced = true,
                }
                self.note(t, line, describe);
                Done::Next
            }
            Op::InitThread => {
                if let Err(w) = self.passes(t, LockId::LOADER) {
                    self.note(t, line, |_| {
                        "InitializeCurrentThread: waits for lock loader".into()
                    });
                    return Done::Block(w);
                }
                let hr = self.rt.initialize_current_thread();
                self.note(t, line, |run| format!("{} → {hr}", run.describe(instr.op)));
                Done::Next
            }
            Op::Suspend(x) => {
                let r = self.os_suspend(t, x);
                self.note(t, line, |run| {
                    format!("{} → {}", run.describe(instr.op), show(&r))
                });
                Done::Next
            }
            Op::Resume(x) => {
                let r = self.os_resume(t, x);
                self.note(t, line, |run| {
                    format!("{} → {}", run.describe(instr.op), show(&r))
                });
                Done::Next
            }
            Op::GetContext(x) => {
                let r = self.os_context(x).map(|c| c.rip);
                self.note(t, line, |run| match &r {
                    Ok(rip) => format!("{} → rip {rip:#x}", run.describe(instr.op)),
                    Err(e) => format!("{} → {e}", run.describe(instr.op)),
                });
                Done::Next
            }
            Op::ReadStack(x) => {
                self.raw_stack_read(t, x, line);
                Done::Next
            }
            Op::Walk(x) => {
                if let Err(w) = self.thread_setup(t) {
                    self.note(t, line, |_| {
                        "first runtime call: per-thread setup waits for lock loader".into()
                    });
                    return Done::Block(w);
                }
                let id = x.map_or(ThreadId::NULL, |x| self.rt.lock().threads[x].id);
                let mut frames = 0u32;
                let mut cb = |_: &corprof::SnapshotFrame<'_>| {
                    frames += 1;
                    HResult::S_OK
                };
                let hr = self.rt.do_stack_snapshot(id, Some(&mut cb), 0, None, 0);
                self.note(t, line, |run| {
                    format!("{} → {hr}, {frames} frames", run.describe(instr.op))
                });
                Done::Next
            }
            Op::SuspendRuntime => {
                if let Err(w) = self.thread_setup(t) {
                    return Done::Block(w);
                }
                if let Err(w) = self.acquire(t, LockId::THREAD_STORE) {
                    self.note(t, line, |_| "SuspendRuntime: waits for lock thread_store".into());
                    return Done::Block(w);
                }
                let hr = self.rt.suspend_runtime();
                if hr != HResult::S_OK {
                    self.release(t, LockId::THREAD_STORE, line);
                }
                self.sync_parked();
                self.note(t, line, |run| format!("{} → {hr}", run.describe(instr.op)));
                Done::Next
            }
            Op::ResumeRuntime => {
                if let Err(w) = self.thread_setup(t) {
                    return Done::Block(w);
                }
                let hr = self.rt.resume_runtime();
                if hr == HResult::S_OK {
                    self.release(t, LockId::THREAD_STORE, line);
                }
                self.sync_parked();
                self.note(t, line, |run| format!("{} → {hr}", run.describe(instr.op)));
                Done::Next
            }
            Op::Signal(x) => {
                let r = self.os_signal(x);
                self.note(t, line, |run| {
                    format!("{} → {}", run.describe(instr.op), show(&r))
                });
                Done::Next
            }
            Op::LookupFunctionEntry => {
                if let Err(w) = self.passes(t, LockId::FUNCTION_TABLE) {
                    self.note(t, line, |_| {
                        "RtlLookupFunctionEntry: waits for lock function_table".into()
                    });
                    return Done::Block(w);
                }
                self.note(t, line, describe);
                Done::Next
            }
            Op::MarkDestroyed => {
                self.marks[t] = true;
                self.note(t, line, describe);
                Done::Next
            }
            Op::IfAlive { thread, end } => {
                let alive = !self.marks[thread];
                self.note(t, line, |run| {
                    format!(
                        "{} → {}",
                        run.describe(instr.op),
                        if alive { "alive" } else { "destroyed: skip" }
                    )
                });
                if !alive {
                    self.jump(t, end);
                    return Done::Again;
                }
                Done::Next
            }
            Op::SetEvent(e) => {
                self.events[e as usize] = true;
                self.note(t, line, describe);
                Done::Next
            }
            Op::WaitEvent(e) => {
                if self.events[e as usize] {
                    self.note(t, line, describe);
                    Done::Next
                } else {
                    Done::Block(Wait::Event(e, u64::MAX))
                }
            }
        }
    }

    /// Pushes `entries` on thread `t`'s stack (a managed thread takes `mode`) and re-lays it;
    /// a stack that no longer fits is a `stack_overflow`.
    fn push_frames(&mut self, t: usize, instr: Instr, entries: &[StackEntry], mode: Option<Mode>) -> Done {
        let mut st = self.rt.lock();
        let thread = &mut st.threads[t];
        thread.stack.splice(0..0, entries.iter().copied());
        if let Some(mode) = mode.filter(|_| thread.is_managed()) {
            thread.mode = mode;
        }
        let fits = st.threads[t].stack_bytes(&st.code) <= crate::thread::STACK_SIZE / 2;
        if fits {
            st.relayout(t);
        }
        drop(st);
        if !fits {
            let message = format!("{} overflows its stack (line {})", self.th[t].name, instr.line);
            self.end("stack_overflow", message, Vec::new());
            return Done::Next;
        }
        self.note(t, instr.line, |run| run.describe(instr.op));
        Done::Next
    }

    /// Continues the top program at instruction `to`, from its first phase (the `Again` the
    /// caller returns wraps the phase to 0).
    fn jump(&mut self, t: usize, to: usize) {
        if let Some(Activation {
            source: Source::Program { pc, phase, .. },
            ..
        }) = self.th[t].stack.last_mut()
        {
            *pc = to;
            *phase = u32::MAX;
        }
    }

    fn gc(&mut self, t: usize, line: usize, phase: u32) -> Done {
        match phase {
            0 => {
                if let Err(w) = self.acquire(t, LockId::THREAD_STORE) {
                    self.note(t, line, |_| "gc: waits for lock thread_store".into());
                    return Done::Block(w);
                }
                self.gc = Some(t);
                let mut st = self.rt.lock();
                st.config.suspend_in_progress = true;
                // Threads without programs are frozen: the runtime redirects them at once.
                for i in 0..st.threads.len() {
                    let frozen = self.th[i].status == Status::Frozen;
                    let thread = &st.threads[i];
                    if i != t
                        && frozen
                        && thread.is_managed()
                        && thread.lifecycle == Lifecycle::Alive
                        && thread.parked.is_none()
                    {
                        st.park(i);
                    }
                }
                drop(st);
                self.sync_parked();
                self.note(t, line, |_| "gc: runtime suspension starts".into());
                Done::Again
            }
            _ => {
                let waiting = self.unsafe_threads(t);
                if !waiting.is_empty() {
                    return Done::Block(Wait::SafePoints);
                }
                {
                    let mut st = self.rt.lock();
                    st.unpark_all();
                    st.config.suspend_in_progress = false;
                }
                self.gc = None;
                self.sync_parked();
                self.release(t, LockId::THREAD_STORE, line);
                self.note(t, line, |_| "gc: collected; runtime restarted".into());
                Done::Next
            }
        }
    }

    /// Exits: `ThreadDestroyed` on the thread (phase 0), dead once it returns (phase 1), and
    /// its `Thread` deleted at a later step (phase 2), so other threads can run in between.
    fn exit(&mut self, t: usize, line: usize, phase: u32) -> Done {
        let managed = self.rt.lock().threads[t].is_managed();
        match phase {
            0 if managed => {
                self.note(t, line, |_| "exit".into());
                self.raise(t, Notice::Callback(CallbackKind::ThreadDestroyed));
                Done::Again
            }
            1 if managed => {
                self.rt.lock().threads[t].lifecycle = Lifecycle::Dead;
                self.note(t, line, |_| "exit: thread dead".into());
                Done::Again
            }
            _ => {
                if !managed {
                    self.note(t, line, |_| "exit".into());
                }
                self.delete(t);
                Done::Next
            }
        }
    }

    // ---- OS operations shared by programs and fibers -------------------------------------

    fn os_target(&self, x: usize) -> Result<(), OsError> {
        match self.rt.lock().threads[x].lifecycle {
            Lifecycle::Deleted => Err(OsError::NoSuchThread),
            Lifecycle::Dead => Err(OsError::Terminated),
            // A thread whose program ended without `exit` stays, idle.
            _ => Ok(()),
        }
    }

    fn os_suspend(&mut self, t: usize, x: usize) -> Result<u32, OsError> {
        if self.rt.platform() != Platform::Windows {
            return Err(OsError::Unsupported);
        }
        self.os_target(x)?;
        let previous = self.th[x].suspenders.len() as u32;
        self.th[x].suspenders.push(t);
        self.th[x].suspend_pending = true;
        self.th[x].moved = false;
        self.rt.lock().threads[x].os_suspend_count += 1;
        Ok(previous)
    }

    fn os_resume(&mut self, t: usize, x: usize) -> Result<u32, OsError> {
        if self.rt.platform() != Platform::Windows {
            return Err(OsError::Unsupported);
        }
        if self.rt.lock().threads[x].lifecycle == Lifecycle::Deleted {
            return Err(OsError::NoSuchThread);
        }
        let s = &mut self.th[x];
        let previous = s.suspenders.len() as u32;
        // Any thread may resume; the suspension it ends is the newest by this thread, else
        // the newest.
        let at = s
            .suspenders
            .iter()
            .rposition(|&by| by == t)
            .or(previous.checked_sub(1).map(|p| p as usize));
        let Some(at) = at else {
            return Err(OsError::NotSuspended);
        };
        s.suspenders.remove(at);
        if s.suspenders.is_empty() {
            s.suspend_pending = false;
        }
        self.rt.lock().threads[x].os_suspend_count -= 1;
        Ok(previous)
    }

    fn os_context(&mut self, x: usize) -> Result<corprof::Context, OsError> {
        self.os_target(x)?;
        let st = self.rt.lock();
        if matches!(st.threads[x].lifecycle, Lifecycle::Destroying | Lifecycle::Dead) {
            return Err(OsError::Terminated);
        }
        let context = st.threads[x].leaf_context().ok_or(OsError::Terminated)?;
        drop(st);
        // GetThreadContext returns only once the thread has really stopped.
        if !self.th[x].suspenders.is_empty() {
            self.th[x].suspend_pending = false;
        }
        Ok(context)
    }

    fn os_signal(&mut self, x: usize) -> Result<(), OsError> {
        if self.rt.platform() != Platform::Unix {
            return Err(OsError::Unsupported);
        }
        self.os_target(x)?;
        self.th[x].signal_pending = true;
        Ok(())
    }

    fn stack_bounds(&self, x: usize) -> Result<(u64, u64), OsError> {
        let st = self.rt.lock();
        let thread = &st.threads[x];
        if thread.lifecycle == Lifecycle::Deleted {
            return Err(OsError::NoSuchThread);
        }
        Ok((thread.stack_limit, thread.stack_base))
    }

    fn checked_read(&self, x: usize, address: u64) -> Result<u64, OsError> {
        let (low, high) = self.stack_bounds(x)?;
        if address < low || address.checked_add(8).is_none_or(|end| end > high) {
            return Err(OsError::BadAddress(address));
        }
        self.rt.read_memory(address).ok_or(OsError::BadAddress(address))
    }

    /// A raw read of `x`'s stack at its stack pointer, as a sampler does after suspending it:
    /// freed memory is an access violation; a thread that still runs gives a torn sample.
    fn raw_stack_read(&mut self, t: usize, x: usize, line: usize) {
        let (sp, deleted) = {
            let st = self.rt.lock();
            let thread = &st.threads[x];
            let sp = thread
                .layout
                .calls
                .first()
                .map_or(thread.stack_base - 0x40, |c| c.rsp);
            (sp, thread.lifecycle == Lifecycle::Deleted)
        };
        if deleted || self.rt.read_memory(sp).is_none() {
            let message = format!(
                "{} reads {sp:#x} on the stack of {}, which was freed when the thread exited (line {line})",
                self.th[t].name, self.th[x].name
            );
            self.fatal(FaultKind::AccessViolation, message);
            return;
        }
        let s = &self.th[x];
        let stopped = !s.suspenders.is_empty() && !s.suspend_pending;
        if t != x && !stopped && (s.suspenders.is_empty() || s.moved) {
            let why = if s.suspenders.is_empty() {
                "which is not suspended"
            } else {
                "whose SuspendThread had not completed (no GetThreadContext) and which ran on"
            };
            let message = format!(
                "{} read the stack of {} {why}: the sample is torn (line {line})",
                self.th[t].name, self.th[x].name
            );
            self.note(t, line, |run| {
                format!("read_stack {} at {sp:#x}: torn", run.th[x].name)
            });
            self.warn(RunFault {
                kind: "torn_stack_read".into(),
                message,
                cycle: Vec::new(),
            });
            return;
        }
        self.note(t, line, |run| {
            format!("read_stack {} at {sp:#x}: ok", run.th[x].name)
        });
    }

    fn os_thread(&self, x: usize) -> OsThread {
        OsThread(self.rt.lock().threads[x].os_id)
    }

    fn by_os_id(&self, id: OsThread) -> Result<usize, OsError> {
        self.rt
            .lock()
            .threads
            .iter()
            .position(|t| t.os_id == id.0)
            .ok_or(OsError::NoSuchThread)
    }

    // ---- fibers ------------------------------------------------------------------------

    fn fiber_step(&mut self, t: usize, callback: Option<CallbackKind>) {
        let Some(Activation {
            source: Source::Fiber { pending, ready, .. },
            ..
        }) = self.th[t].stack.last_mut()
        else {
            unreachable!("fiber_step on a fiber activation");
        };
        let reply = match (ready.take(), pending.take()) {
            (Some(reply), _) => reply,
            (None, None) => Reply::Start,
            (None, Some(req)) => match self.serve(t, &req) {
                Ok(reply) => reply,
                Err(w) => {
                    self.fiber_mut(t, |pending, _, _| *pending = Some(req));
                    self.th[t].status = Status::Blocked(w);
                    return;
                }
            },
        };
        self.fiber_mut(t, |_, _, deadline| *deadline = None);
        self.th[t].last_progress = self.now;
        if let Status::Sleeping(_) = self.th[t].status {
            // A sleep: the fiber gets its reply when it wakes.
            self.fiber_mut(t, |_, ready, _| *ready = Some(reply));
            return;
        }
        self.rt.lock().callers.push(Caller {
            thread: Some(t),
            callback,
        });
        let Some(Activation {
            source: Source::Fiber { fiber, .. },
            ..
        }) = self.th[t].stack.last_mut()
        else {
            unreachable!("the activation is still a fiber");
        };
        let yielded = fiber.resume(reply);
        self.rt.lock().callers.pop();
        match yielded {
            Yielded::Request(req) => self.fiber_mut(t, |pending, _, _| *pending = Some(req)),
            Yielded::Finished => self.pop_activation(t),
            Yielded::Panicked(message) => {
                let message = format!("profiler code on {} panicked: {message}", self.th[t].name);
                self.end("profiler_panic", message, Vec::new());
            }
        }
    }

    /// Edits the top fiber activation's request, reply and deadline.
    fn fiber_mut(
        &mut self,
        t: usize,
        f: impl FnOnce(&mut Option<Request>, &mut Option<Reply>, &mut Option<u64>),
    ) {
        if let Some(Activation {
            source:
                Source::Fiber {
                    pending,
                    ready,
                    deadline,
                    ..
                },
            ..
        }) = self.th[t].stack.last_mut()
        {
            f(pending, ready, deadline);
        }
    }

    /// Performs a fiber's request; `Err` when it must wait.
    fn serve(&mut self, t: usize, req: &Request) -> Result<Reply, Wait> {
        let reply = match req {
            // A runtime API call: a native thread's first one does the per-thread setup.
            Request::Point => {
                self.thread_setup(t)?;
                Reply::Done
            }
            // Named objects: creating one that exists opens it (the file's locks and the
            // runtime's included), so a sampler and its callbacks share them by name.
            Request::MutexCreate(name) => {
                let at = self.lock_names.iter().position(|n| n == name).unwrap_or_else(|| {
                    self.locks.push(LockState::default());
                    self.lock_names.push(name.clone());
                    self.locks.len() - 1
                });
                Reply::Mutex(MutexId(at as u32))
            }
            Request::MutexLock(m) => {
                let l = LockId(m.0 as u16);
                self.acquire(t, l)?;
                self.note(t, 0, |run| format!("lock {}", run.lock_names[l.0 as usize]));
                Reply::Done
            }
            Request::MutexUnlock(m) => {
                let l = LockId(m.0 as u16);
                if self.release(t, l, 0) {
                    self.note(t, 0, |run| format!("unlock {}", run.lock_names[l.0 as usize]));
                }
                Reply::Done
            }
            Request::EventCreate(name) => {
                let at = self
                    .event_names
                    .iter()
                    .position(|n| n == name)
                    .unwrap_or_else(|| {
                        self.events.push(false);
                        self.event_names.push(name.clone());
                        self.events.len() - 1
                    });
                Reply::Event(EventId(at as u32))
            }
            Request::EventSet(e) => {
                self.events[e.0 as usize] = true;
                Reply::Done
            }
            Request::EventWait(e, timeout) => {
                let mut deadline = 0;
                let now = self.now;
                self.fiber_mut(t, |_, _, d| {
                    deadline = *d.get_or_insert(now.saturating_add(timeout.as_micros() as u64))
                });
                if self.events[e.0 as usize] {
                    Reply::Flag(true)
                } else if deadline <= self.now {
                    Reply::Flag(false)
                } else {
                    return Err(Wait::Event(e.0 as u16, deadline));
                }
            }
            Request::Sleep(d) => {
                self.th[t].status = Status::Sleeping(self.now + d.as_micros() as u64);
                Reply::Done
            }
            Request::Now => Reply::Time(Duration::from_micros(self.now)),
            Request::CurrentThread => Reply::Thread(self.os_thread(t)),
            Request::Threads => {
                let ids = (0..self.th.len())
                    .filter(|&x| self.os_target(x).is_ok() && self.th[x].status != Status::NotStarted)
                    .map(|x| self.os_thread(x))
                    .collect();
                Reply::Threads(ids)
            }
            Request::Suspend(id) => {
                let r = self.by_os_id(*id).and_then(|x| self.os_suspend(t, x));
                self.note(t, 0, |_| format!("SuspendThread {} → {}", id.0, show(&r)));
                Reply::Count(r)
            }
            Request::Resume(id) => {
                let r = self.by_os_id(*id).and_then(|x| self.os_resume(t, x));
                self.note(t, 0, |_| format!("ResumeThread {} → {}", id.0, show(&r)));
                Reply::Count(r)
            }
            Request::GetContext(id) => {
                let r = self.by_os_id(*id).and_then(|x| self.os_context(x));
                self.note(t, 0, |_| {
                    format!(
                        "GetThreadContext {} → {}",
                        id.0,
                        if r.is_ok() { "ok".to_string() } else { show(&r) }
                    )
                });
                Reply::Context(Box::new(r))
            }
            Request::Signal(id) => Reply::Unit(self.by_os_id(*id).and_then(|x| self.os_signal(x))),
            Request::StackBounds(id) => Reply::Bounds(self.by_os_id(*id).and_then(|x| self.stack_bounds(x))),
            Request::ReadStack(id, address) => {
                let r = self.by_os_id(*id).and_then(|x| {
                    let s = &self.th[x];
                    if x != t && (s.suspenders.is_empty() || s.suspend_pending) && s.moved {
                        let message = format!(
                            "{} read the stack of {} before its suspension completed: the sample is torn",
                            self.th[t].name, s.name
                        );
                        self.warn(RunFault {
                            kind: "torn_stack_read".into(),
                            message,
                            cycle: Vec::new(),
                        });
                    }
                    self.checked_read(x, *address)
                });
                Reply::Word(r)
            }
        };
        Ok(reply)
    }

    // ---- descriptions ------------------------------------------------------------------

    fn describe(&self, op: Op) -> String {
        let thread = |x: usize| self.th[x].name.as_str();
        let lock = |l: LockId| self.lock_names[l.0 as usize].as_str();
        let function = |f| self.rt.with_code(|c| c.function(f).name.clone());
        match op {
            Op::Call(f) => format!("call {}", function(f)),
            Op::Return => "return".into(),
            Op::PInvoke(f) => format!("pinvoke {}", function(f)),
            Op::PInvokeReturn => "pinvoke_return".into(),
            Op::Alloc => "alloc".into(),
            Op::Lock(l) => format!("lock {}", lock(l)),
            Op::Unlock(l) => format!("unlock {}", lock(l)),
            Op::Throw => "throw".into(),
            Op::Catch(n) => format!("catch {n}"),
            Op::EndCatch => "end_catch".into(),
            Op::Gc => "gc".into(),
            Op::Spin(n) => format!("spin {n}"),
            Op::Sleep(us) => format!("sleep {us}us"),
            Op::Spawn(x) => format!("spawn {}", thread(x)),
            Op::Exit => "exit".into(),
            Op::MaskSignals => "mask_signals".into(),
            Op::UnmaskSignals => "unmask_signals".into(),
            Op::ReplaceSignalHandler => "replace_signal_handler".into(),
            Op::InitThread => "InitializeCurrentThread".into(),
            Op::Suspend(x) => format!("SuspendThread {}", thread(x)),
            Op::Resume(x) => format!("ResumeThread {}", thread(x)),
            Op::GetContext(x) => format!("GetThreadContext {}", thread(x)),
            Op::ReadStack(x) => format!("read_stack {}", thread(x)),
            Op::Walk(None) => "DoStackSnapshot self".into(),
            Op::Walk(Some(x)) => format!("DoStackSnapshot {}", thread(x)),
            Op::SuspendRuntime => "SuspendRuntime".into(),
            Op::ResumeRuntime => "ResumeRuntime".into(),
            Op::Signal(x) => format!("signal {}", thread(x)),
            Op::LookupFunctionEntry => "RtlLookupFunctionEntry".into(),
            Op::MarkDestroyed => "mark_destroyed".into(),
            Op::IfAlive { thread: x, .. } => format!("if_alive {}", thread(x)),
            Op::SetEvent(e) => format!("set_event {}", self.event_names[e as usize]),
            Op::WaitEvent(e) => format!("wait_event {}", self.event_names[e as usize]),
        }
    }
}

fn call_of(function: crate::code::FunctionIndex) -> StackEntry {
    StackEntry::Call {
        function,
        offset: None,
        funclet: None,
    }
}

fn show<T: std::fmt::Debug>(r: &Result<T, OsError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("error: {e}"),
    }
}

fn fiber_source(fiber: Fiber) -> Source {
    Source::Fiber {
        fiber,
        pending: None,
        ready: None,
        deadline: None,
    }
}

fn spawn_body(body: super::ThreadBody, rt: Arc<Runtime>) -> Fiber {
    Fiber::spawn(Box::new(move || body(&rt, &super::SimOs::new())))
}
