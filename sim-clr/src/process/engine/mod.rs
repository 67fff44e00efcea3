//! One run of a process: the scheduler loop, who can run, the wait-for edges and how a run
//! ends. What each instruction does is in [`steps`]; the OS calls that programs and fibers
//! share, and the serving of fibers' requests, are in [`os_calls`].
//!
//! Invariants, checked with debug assertions where they are cheap:
//! - exactly one simulated thread runs at a time (the engine's loop, or the one fiber it
//!   resumed and waits for);
//! - locks: see [`LockTable`] (a thread waiting for a lock it owns is a one-thread cycle);
//! - a thread can run only if its wait condition holds, it is not OS-suspended (a suspension
//!   still pending — asynchronous `SuspendThread` before `GetThreadContext` — does not stop it)
//!   and it is not parked by a runtime suspension;
//! - every stack edit re-lays the thread's memory, so walks and stack reads see the new stack.

mod coverage;
mod hazards;
mod os_calls;
mod steps;

use super::hazard::Hazard;
use super::locks::LockTable;
use super::program::{Instr, LockId, Op};
use super::schedule::{Chooser, Schedule, ScheduleError};
use super::timeline::{Doing, Lane, Step, Timeline};
use super::waitfor::{find_cycle, Edge};
use super::{
    CycleLink, Ending, Process, Program, Recording, RunFault, RunReport, SigAction, SimOs, TraceEntry,
};
use crate::fiber::{setting_up, Code, Fiber, Home, Reply, Request};
use crate::runtime::builtin;
use crate::runtime::{CallContext, CallbackKind, Caller, Entered, Notification, Runtime, OBJECT_BASE};
use crate::thread::{FrameKind, Lifecycle, Mode, StackEntry};
use crate::trace::FaultKind;
use corprof::flags::GcReason;
use corprof::os::{OsThread, SignalFlags};
use corprof::{ClassId, Context, FunctionId, HResult, ObjectId, ThreadId};
use os_calls::{fiber_source, spawn_body};
use std::sync::Arc;

/// The stack pointer of a thread whose RSP a foreign agent moved (`hijack_rsp`): mapped by
/// nothing.
const HIJACKED_RSP: u64 = 0x0000_0bad_0000_0000;

/// The wait of a thread OS-suspended by another (any thread may end it).
const RESUME_THREAD: &str = "ResumeThread";
/// What a thread a walk suspended waits for: the walk's end (R18).
const WALK: &str = "the end of its DoStackSnapshot";

/// Polls in a row of one address that read one value, after which a thread spins
/// ([`Request::Poll`]): a spin loop gets there at once, while code that merely reads a value
/// twice (one flag checked for two threads in turn) does not.
const SPIN_POLLS: u32 = 3;

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
    Event(u32, u64),
    /// A thread's code to end.
    Join(usize),
    /// A condition variable's notification after the given count, until a virtual deadline
    /// (`u64::MAX`: none).
    Cond(u32, u64, u64),
    /// Another thread to change something after this step (a `corprof::sync::spin_loop`).
    Change(u64),
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

/// One activation on a thread: its main code, or a callback or signal handler on top of it.
struct Activation {
    source: Source,
    /// The callback it runs in (`None`: the thread's own code or a signal handler).
    callback: Option<CallbackKind>,
    /// What raising the callback changed on the thread, restored when it returns.
    entered: Option<Entered>,
    /// It is the profiling signal's handler.
    signal: bool,
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
    /// The wait a signal interrupted and whether its handler restarts system calls
    /// (`SA_RESTART`): restored when the handler returns ([`Run::interrupt`]).
    interrupted: Option<(Status, bool)>,
    /// A foreign agent has moved its stack pointer off its stack (`hijack_rsp`).
    rsp_hijacked: bool,
    handler_replaced: bool,
    last_progress: u64,
    /// The step it last ran.
    last_step: u64,
    /// In a managed wait from managed code (`join`, `wait_event`, `sleep`): the runtime's
    /// wait function and its Frame are on the stack until it ends.
    in_wait: bool,
    /// The reverse P/Invokes it is in, innermost last: where each one's entries start on the
    /// stack (their depth) and how many there are (the method's call, and the Frames the
    /// runtime version lays under it).
    reverse_calls: Vec<(usize, usize)>,
    /// Spawned, not yet started in the runtime: its next step is `Thread::HasStarted`
    /// ([`Run::start`]).
    starting: bool,
    /// It takes over ids of threads that must have ended before its first step
    /// ([`crate::spec::Reuses`]).
    takes_over_ids: bool,
    /// A callback raised in preemptive mode returned during another thread's runtime
    /// suspension: back to cooperative mode, the thread waits for the suspension's end
    /// (CoreCLR v3.1.23 `Thread::RareDisablePreemptiveGC`, `threadsuspend.cpp`), still in the
    /// callback's frames and mode, which are left once it ends.
    returning: Option<crate::runtime::Entered>,
    /// Threads it stopped (suspension, signal, runtime suspension) after the crash event.
    stops_after_crash: u32,
    /// A program's `walk` in progress: its target held, and how many frames it reported.
    walking: Option<(crate::runtime::snapshot::Held, u32)>,
    /// The step at which its code last asked to spin (`corprof::sync::spin_loop`, after a
    /// read that found nothing new): a write after it ends the spin.
    spin_since: u64,
    /// Its code's last request, if it was a [`Request::Poll`]: the address, the value read,
    /// how many polls in a row read it there, and the step of the last. From [`SPIN_POLLS`]
    /// on the thread spins ([`Sim::spins`]).
    polled: Option<(usize, u64, u32, u64)>,
    /// Suspended by another thread's `DoStackSnapshot` until its walk ends (a copy of the
    /// runtime's [`crate::thread::Thread::stopped_for_walk`]).
    stopped_for_walk: Option<Option<usize>>,
    /// Its profiler code is in a sampling round: it stopped or walked another thread since it
    /// last slept or waited with a deadline ([`crate::coverage::Window::RoundOverExit`]).
    round_open: bool,
    /// The threads its profiler code listed (`EnumThreads`) in this round and has not walked
    /// since.
    listed: Vec<usize>,
}

impl Sim {
    /// Whether the thread spins: its last [`SPIN_POLLS`] requests or more polled one address
    /// and read one value, and nothing changed since the last (`changed_at`, the step of the
    /// process's last change).
    fn spins(&self, changed_at: u64) -> bool {
        self.polled
            .is_some_and(|(.., n, at)| n >= SPIN_POLLS && changed_at <= at)
    }
}

/// A condition variable of the process.
struct Cond {
    /// What it is opened by.
    key: String,
    /// What reports call it.
    name: String,
    /// How many times it was notified.
    notified: u64,
    /// The threads holding the object it stands for, once per hold ([`Holding`]).
    holders: Vec<usize>,
    /// Another thread than a holder may release it (a semaphore).
    any_thread_releases: bool,
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
    /// Each thread's OS thread for its fibers (after `th`: its fibers end first).
    homes: Vec<Home>,
    locks: LockTable,
    events: Vec<bool>,
    event_names: Vec<String>,
    /// Condition variables, by id.
    conds: Vec<Cond>,
    /// Threads the profiler's ThreadDestroyed handler marked (`mark_destroyed`).
    marks: Vec<bool>,
    /// Which functions have code, by index: those on a stack as the run starts; a
    /// JIT-compiled method's first `call` compiles it ([`CallbackKind::JitCompilation`]).
    compiled: Vec<bool>,
    /// The thread running a GC's runtime suspension.
    gc: Option<usize>,
    /// [`Runtime::walk_stops`] when the threads' walk suspensions were last copied.
    walk_stops: u64,
    now: u64,
    steps: u64,
    /// The step at which a thread last changed what another can see ([`Run::changed`]).
    changed_at: u64,
    /// Steps since then that count towards [`super::Limits::idle_steps`]: all but the steps
    /// of a walk in progress (a walk makes progress frame by frame, and is one call).
    idle: u64,
    /// The step just served a walk's frame ([`Request::WalkFrame`]): not an idle step.
    walk_frame: bool,
    /// What the run reached ([`crate::coverage`]).
    coverage: crate::coverage::RunCoverage,
    /// Which threads run profiler code ([`Process::profiler_threads`]).
    samplers: Vec<bool>,
    /// Stops of a thread by profiler code, and how many met each hazard (by `Hazard as usize`).
    stops: u64,
    hazards: [u64; Hazard::ALL.len()],
    choices: Vec<u16>,
    trace: Vec<TraceEntry>,
    tracing: bool,
    /// Every thread's state after every step, when recorded.
    timeline: Option<Timeline>,
    /// With a timeline, the windows first reached since its last step was recorded.
    fresh_windows: Vec<String>,
    current: Option<usize>,
    fault: Option<RunFault>,
    warnings: Vec<RunFault>,
    /// The profiler's callbacks in this run.
    profiler: Option<Arc<dyn corprof::ProfilerCallback>>,
    /// The profiling signal's Rust handler in this run.
    signal_handler: Option<super::SigAction>,
    /// Profiler code to run when the process exits (`Shutdown`), until it has started.
    at_exit: Option<super::ExitHook>,
    /// The loaded library's exports, which programs call.
    exports: Option<Arc<dyn super::Exports>>,
}

impl<'p> Run<'p> {
    pub fn new(p: &'p Process, recording: Recording) -> Run<'p> {
        let tracing = recording != Recording::Nothing;
        let s = &p.scenario;
        let rt = Arc::new(p.template.fork());
        rt.lock().in_process = true;
        rt.inject_failures(p.injects());
        let spec = &s.process;
        // Code loaded afresh for this run takes the place of the process's own. Threads it
        // creates while it loads take the threads declared `start = "profiler"`.
        let slots: Vec<usize> = (0..s.threads.len())
            .filter(|&i| spec.created.get(i).copied().unwrap_or(false))
            .collect();
        let free = slots
            .iter()
            .map(|&i| OsThread(rt.lock().threads[i].os_id))
            .collect();
        let (loaded, mut setup) = setting_up(free, || {
            p.loader.as_ref().map(|load| load(&rt)).unwrap_or_default()
        });
        let mut bodies = p.bodies.clone();
        let mut stray = None;
        for (name, body) in loaded.bodies {
            match s.threads.iter().position(|t| t.name == name) {
                Some(i) => bodies[i] = Some(body),
                None => stray = Some(name),
            }
        }
        let mut homes: Vec<Home> = s.threads.iter().map(|_| Home::default()).collect();
        let th: Vec<Sim> = s
            .threads
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let source = match (&bodies[i], &spec.programs.get(i).cloned().flatten()) {
                    (Some(body), _) => {
                        Some(fiber_source(spawn_body(body.clone(), rt.clone(), &mut homes[i])))
                    }
                    (None, Some(code)) => Some(Source::Program {
                        code: code.clone(),
                        pc: 0,
                        phase: 0,
                    }),
                    (None, None) => None,
                };
                let status = match &source {
                    None if spec.created.get(i).copied().unwrap_or(false) => Status::NotStarted,
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
                            signal: false,
                        })
                        .collect(),
                    suspenders: Vec::new(),
                    suspend_pending: false,
                    moved: false,
                    parked: false,
                    signal_pending: false,
                    signals_masked: false,
                    interrupted: None,
                    rsp_hijacked: false,
                    handler_replaced: false,
                    last_progress: 0,
                    last_step: 0,
                    in_wait: false,
                    reverse_calls: Vec::new(),
                    starting: false,
                    takes_over_ids: spec.reuses.get(i).is_some_and(|r| r.after().next().is_some()),
                    returning: None,
                    stops_after_crash: 0,
                    walking: None,
                    stopped_for_walk: None,
                    round_open: false,
                    listed: Vec::new(),
                    spin_since: 0,
                    polled: None,
                }
            })
            .collect();
        // Runtime threads have done their per-thread setup; native threads have not (R39).
        // Threads with code park lazily in a runtime suspension. (A thread not started yet is
        // unstarted in the template already: `Scenario::runtime`.)
        for (t, s) in rt.lock().threads.iter_mut().zip(&th) {
            t.tls_initialized |= t.is_managed();
            t.runs_code = s.status != Status::Frozen;
        }
        let compiled = {
            let st = rt.lock();
            let mut compiled = vec![false; st.code.functions().len()];
            for entry in st.threads.iter().flat_map(|t| &t.stack) {
                if let StackEntry::Call { function, .. } = entry {
                    compiled[*function] = true;
                }
            }
            compiled
        };
        // A thread the file declares holding the code-manager lock holds it here too.
        let mut locks = LockTable::new(&spec.locks);
        if let Some(holder) = s.threads.iter().position(|t| t.holds_writer_lock) {
            locks.take(holder, LockId::CODE_MANAGER);
        }
        // A native handler the profiler installed as it loaded (`sigaction` in `Initialize`).
        let native_handler = setup.signal_handler.take().map(|(handler, flags)| SigAction {
            handler: Arc::new(move |_: &Runtime, _: &SimOs, context: &Context| (handler.0)(context)),
            flags,
        });
        let mut run = Run {
            p,
            rt,
            th,
            homes,
            locks,
            events: vec![false; spec.events.len()],
            event_names: spec.events.clone(),
            conds: Vec::new(),
            marks: vec![false; s.threads.len()],
            compiled,
            gc: None,
            walk_stops: 0,
            now: 0,
            steps: 0,
            changed_at: 0,
            idle: 0,
            walk_frame: false,
            coverage: Default::default(),
            samplers: p.profiler_threads(),
            stops: 0,
            hazards: [0; Hazard::ALL.len()],
            choices: Vec::new(),
            trace: Vec::new(),
            tracing,
            fresh_windows: Vec::new(),
            timeline: (recording == Recording::Timeline).then(|| Timeline {
                threads: s.threads.iter().map(|t| t.name.clone()).collect(),
                steps: Vec::new(),
            }),
            current: None,
            fault: None,
            warnings: Vec::new(),
            profiler: loaded.profiler.or_else(|| p.profiler.clone()),
            signal_handler: loaded
                .signal_handler
                .or(native_handler)
                .or_else(|| p.signal_handler.clone()),
            at_exit: loaded.at_exit,
            exports: loaded.exports,
        };
        for (x, code) in slots.into_iter().zip(setup.created) {
            if let Some(code) = code.take() {
                run.start_created(x, code);
            }
        }
        if let Some((outcome, message)) = setup.escaped {
            run.end(outcome, format!("as the profiler loaded: {message}"), Vec::new());
        } else if setup.refused > 0 {
            let message = format!(
                "the profiler created {} thread(s) more than the scenario declares `start = \"profiler\"` as it loaded",
                setup.refused
            );
            run.end(Ending::UndeclaredThread.as_str(), message, Vec::new());
        }
        let unattached = p.named_bodies().find(|(thread, _)| {
            let i = s
                .threads
                .iter()
                .position(|t| t.name == *thread)
                .expect("a declared thread");
            bodies[i].is_none()
        });
        let missing_export = s.process.programs.iter().enumerate().find_map(|(t, code)| {
            code.iter()
                .flat_map(|c| c.iter())
                .find_map(|instr| match instr.op {
                    Op::CallExport(i) => {
                        let name = &s.process.exports[i as usize].name;
                        let exported = run.exports.as_ref().is_some_and(|e| e.has(name));
                        (!exported).then(|| (t, name.clone(), instr.line))
                    }
                    _ => None,
                })
        });
        if let Some((t, name, line)) = missing_export {
            let message = match run.exports {
                Some(_) => format!(
                    "thread {} calls export `{name}` (line {line}), which the hosted library does not export",
                    s.threads[t].name
                ),
                None => format!(
                    "thread {} calls export `{name}` (line {line}), and no library is hosted (--profiler)",
                    s.threads[t].name
                ),
            };
            run.end(Ending::UnattachedBody.as_str(), message, Vec::new());
        } else if let Some(name) = stray {
            let message =
                format!("the loaded profiler code names thread {name}, which the scenario does not declare");
            run.end(Ending::UnattachedBody.as_str(), message, Vec::new());
        } else if let Some((thread, body)) = unattached {
            let message = format!(
                "thread {thread} runs profiler code `{}` (line {}), which is not attached",
                body.name, body.line
            );
            run.end(Ending::UnattachedBody.as_str(), message, Vec::new());
        }
        run
    }

    /// Runs to the end under `chooser`.
    pub fn go(mut self, chooser: &mut dyn Chooser) -> Result<RunReport, ScheduleError> {
        let limits = self.p.scenario.process.limits;
        let mut runnable = Vec::with_capacity(self.th.len());
        // A process whose profiler creates threads or has an exit hook exits when its other
        // threads end, if any of them moves (if none does, it never exits on its own).
        let exits = (self.at_exit.is_some() || (0..self.th.len()).any(|x| self.created(x)))
            && (0..self.th.len()).any(|x| !self.created(x) && self.th[x].status != Status::Frozen);
        while self.fault.is_none() {
            if exits && self.exited() {
                break;
            }
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
                let t = if chooser.wants_hints() {
                    chooser.choose_hinted(&runnable, current, &self.hints())?
                } else {
                    chooser.choose(&runnable, current)?
                };
                debug_assert!(runnable.contains(&t));
                self.choices.push(t as u16);
                t
            };
            self.decide_failure(t, chooser)?;
            self.current = Some(t);
            self.steps += 1;
            self.th[t].last_step = self.steps;
            self.now += limits.step_us;
            let walks = self.timeline.as_ref().map(|_| self.rt.lock().walks.0);
            self.walk_frame = false;
            self.idle += 1;
            self.step(t);
            if self.walk_frame {
                self.idle = self.idle.saturating_sub(1);
            }
            self.take_walks();
            self.raise_queued();
            self.collect_runtime_faults();
            if let Some(walks) = walks {
                self.record(t, walks);
            }
            if self.fault.is_some() {
                break;
            }
            if !self.can_run(t) && self.th[t].status != Status::Done {
                self.blocked_met(t);
                // Every new wait-for cycle passes through the thread that just stepped.
                if let Some(cycle) = find_cycle(t, |x| self.edges(x)) {
                    if !self.breakable(&cycle) {
                        self.deadlock(cycle);
                        break;
                    }
                }
            }
            if self.now.saturating_sub(self.th[t].last_progress) > limits.livelock_us {
                let message = format!(
                    "{} made no progress for {} ms of virtual time",
                    self.th[t].name,
                    limits.livelock_us / 1000
                );
                self.end(Ending::Livelock.as_str(), message, Vec::new());
            } else if self.steps >= limits.max_steps {
                let message = format!("the run did not end within {} steps", limits.max_steps);
                self.end(Ending::Livelock.as_str(), message, Vec::new());
            } else if self.idle > limits.idle_steps && !self.sleeper_outside() {
                let busy: Vec<&str> = self
                    .th
                    .iter()
                    .filter(|s| s.last_step > self.changed_at)
                    .map(|s| s.name.as_str())
                    .collect();
                let message = format!(
                    "no thread changed anything another could see in {} steps (`idle_steps`): {} kept running without effect",
                    limits.idle_steps,
                    busy.join(", ")
                );
                self.end(Ending::Livelock.as_str(), message, Vec::new());
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
        let hazards = Hazard::ALL
            .iter()
            .map(|&h| (h.as_str().to_string(), self.hazards[h as usize]))
            .filter(|&(_, n)| n > 0)
            .collect();
        let mut coverage = std::mem::take(&mut self.coverage);
        coverage.stops = self.stops;
        coverage.sampleable = self.sampleable();
        RunReport {
            coverage,
            stops: self.stops,
            hazards,
            choice_points: self.choices.len() as u64,
            schedule: Schedule(std::mem::take(&mut self.choices)).to_string(),
            outcome: fault.as_ref().map_or("ok".to_string(), |f| f.kind.clone()),
            fault,
            warnings: std::mem::take(&mut self.warnings),
            steps: self.steps,
            time_us: self.now,
            trace: std::mem::take(&mut self.trace),
            timeline: self.timeline.take(),
        }
    }

    // ---- who can run -------------------------------------------------------------------

    fn runnable(&mut self, out: &mut Vec<usize>) {
        out.clear();
        let walk_stops = self.rt.walk_stops();
        if walk_stops != self.walk_stops {
            self.walk_stops = walk_stops;
            let st = self.rt.lock();
            for (s, t) in self.th.iter_mut().zip(&st.threads) {
                s.stopped_for_walk = t.stopped_for_walk;
            }
        }
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
        // A spinning thread would only read again what it read: while another thread can run,
        // that one does.
        let changed_at = self.changed_at;
        if out.iter().any(|&t| !self.th[t].spins(changed_at)) {
            out.retain(|&t| !self.th[t].spins(changed_at));
        }
    }

    /// A fiber for code on thread `t`: on the thread's own OS thread unless another fiber of
    /// it is alive (a handler on top of Rust code), which keeps that OS thread.
    fn fiber_on(&mut self, t: usize, code: Code) -> Fiber {
        let nested = self.th[t]
            .stack
            .iter()
            .any(|a| matches!(a.source, Source::Fiber { .. }));
        if nested {
            Fiber::spawn(code)
        } else {
            Fiber::spawn_at(code, &mut self.homes[t])
        }
    }

    /// True when thread `x` is one the profiler creates (`start = "profiler"`).
    fn created(&self, x: usize) -> bool {
        self.p.scenario.process.created.get(x).copied().unwrap_or(false)
    }

    /// Whether the process has exited: every thread but those the profiler created has
    /// ended. The exit hook (`Shutdown`) runs first, on the first such thread, with the
    /// runtime's calls made as from a thread it does not know; once it has returned, threads
    /// the profiler created end with the process, wherever they are.
    fn exited(&mut self) -> bool {
        let running = |s: &Sim| matches!(s.status, Status::Ready | Status::Blocked(_) | Status::Sleeping(_));
        if (0..self.th.len()).any(|x| !self.created(x) && running(&self.th[x])) {
            return false;
        }
        if let Some(hook) = self.at_exit.take() {
            let t = (0..self.th.len()).find(|&x| !self.created(x)).unwrap_or(0);
            let rt = self.rt.clone();
            let fiber = self.fiber_on(t, Box::new(move || rt.on_unknown_thread(|_| hook())));
            self.th[t].stack.push(Activation {
                source: fiber_source(fiber),
                callback: None,
                entered: None,
                signal: false,
            });
            self.th[t].status = Status::Ready;
            self.th[t].last_progress = self.now;
            self.note(t, 0, |_| "the process exits: the profiler's Shutdown".into());
            return false;
        }
        let left: Vec<usize> = (0..self.th.len())
            .filter(|&x| self.created(x) && running(&self.th[x]))
            .collect();
        if !left.is_empty() {
            let names: Vec<&str> = left.iter().map(|&x| self.th[x].name.as_str()).collect();
            let message = format!("the process exits; {} end with it", names.join(", "));
            self.note_for(None, 0, message);
        }
        true
    }

    fn can_run(&self, t: usize) -> bool {
        let s = &self.th[t];
        if (!s.suspenders.is_empty() && !s.suspend_pending) || s.stopped_for_walk.is_some() {
            return false;
        }
        if self.waiting(t) {
            return self.signal_deliverable(t);
        }
        matches!(s.status, Status::Ready | Status::Blocked(_))
    }

    fn wait_over(&self, t: usize, w: Wait) -> bool {
        match w {
            Wait::Lock(l) => self.locks.owner(l).is_none(),
            Wait::SafePoints => self.unsafe_threads(t).is_empty(),
            Wait::SuspensionEnd => self.suspension_owner().is_none(),
            Wait::Event(e, deadline) => self.events[e as usize] || deadline <= self.now,
            Wait::Cond(c, generation, deadline) => {
                self.conds[c as usize].notified != generation || deadline <= self.now
            }
            Wait::Join(x) => self.th[x].status == Status::Done,
            Wait::Change(since) => self.changed_at > since,
        }
    }

    /// Notes that the thread stepping changed what another thread can see: the process is not
    /// livelocked ([`super::Limits::idle_steps`]).
    fn changed(&mut self) {
        self.changed_at = self.steps;
        self.idle = 0;
    }

    /// True when a thread that has not run since the last change waits for a deadline still to
    /// come (a sleep, a timed wait): time alone will move it, so the run is not idle yet.
    fn sleeper_outside(&self) -> bool {
        self.th.iter().any(|s| {
            let deadline = match s.status {
                Status::Sleeping(until) => until,
                Status::Blocked(Wait::Event(_, deadline) | Wait::Cond(_, _, deadline)) => deadline,
                _ => return false,
            };
            deadline != u64::MAX && deadline > self.now && s.last_step <= self.changed_at
        })
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
            .filter(|s| (s.suspenders.is_empty() || s.suspend_pending) && s.stopped_for_walk.is_none())
            .filter_map(|s| match s.status {
                Status::Sleeping(until) => Some(until),
                Status::Blocked(Wait::Event(_, deadline) | Wait::Cond(_, _, deadline))
                    if deadline != u64::MAX =>
                {
                    Some(deadline)
                }
                _ => None,
            })
            .min()
    }

    /// Managed threads a GC on `gc` still waits for: alive, running, cooperative, not parked.
    /// A thread in a managed wait is preemptive ([`Run::wait_preemptive`]); a thread past its
    /// `ThreadDestroyed` is no longer the GC's.
    fn unsafe_threads(&self, gc: usize) -> Vec<usize> {
        let st = self.rt.lock();
        (0..self.th.len())
            .filter(|&i| {
                let t = &st.threads[i];
                i != gc
                    && t.is_managed()
                    && t.lifecycle == Lifecycle::Alive
                    && !matches!(self.th[i].status, Status::Done | Status::NotStarted)
                    && t.mode == Mode::Cooperative
                    && t.parked.is_none()
            })
            .collect()
    }

    /// A program's blocking wait (`join`, `wait_event`, `sleep`) is a managed wait: from
    /// managed code the thread calls the runtime's wait function
    /// (`libcoreclr.so!ThreadNative::Wait`) through an InlinedCallFrame, in preemptive mode
    /// (so a GC or a `SuspendRuntime` does not wait for it, and `DoStackSnapshot` walks it from
    /// that Frame), and returns at its next step (where, during a suspension, it parks).
    fn wait_preemptive(&mut self, t: usize) {
        let mut st = self.rt.lock();
        let st = &mut *st;
        let thread = &mut st.threads[t];
        if !thread.is_managed() || thread.mode != Mode::Cooperative || self.th[t].in_wait {
            return;
        }
        let wait = st
            .code
            .by_name(builtin::WAIT)
            .expect("builtin functions are part of every code map");
        thread.stack.push_leaves([
            StackEntry::Call {
                function: wait,
                offset: None,
                funclet: None,
            },
            StackEntry::Frame(FrameKind::InlinedCall),
        ]);
        thread.mode = Mode::Preemptive;
        st.relayout(t);
        self.th[t].in_wait = true;
    }

    /// The thread whose runtime suspension (a GC, or the profiler's `SuspendRuntime`) is in
    /// effect, if any.
    fn suspension_owner(&self) -> Option<usize> {
        self.gc.or_else(|| self.rt.lock().suspension.profiler.flatten())
    }

    /// Whether another thread's runtime suspension is in effect: a thread returning to
    /// cooperative mode now waits for its end (CoreCLR v3.1.23
    /// `Thread::RareDisablePreemptiveGC`).
    fn suspended_by_other(&self, t: usize) -> bool {
        self.suspension_owner().is_some_and(|owner| owner != t)
    }

    /// The wait-for edges out of `t` (empty when it can run).
    fn edges(&self, t: usize) -> Vec<Edge> {
        let s = &self.th[t];
        let mut out = Vec::new();
        if matches!(s.status, Status::Done | Status::Frozen) {
            return out;
        }
        let edge = |to: usize, what: String| Edge {
            to,
            what,
            anyone: false,
        };
        if !s.suspenders.is_empty() && !s.suspend_pending {
            // Any thread may resume a suspended one (a watchdog does).
            out.extend(s.suspenders.iter().map(|&by| Edge {
                to: by,
                what: RESUME_THREAD.into(),
                anyone: true,
            }));
        }
        if let Some(Some(by)) = s.stopped_for_walk {
            out.push(edge(by, WALK.into()));
        }
        let blocked = match s.status {
            Status::Blocked(w) if !self.wait_over(t, w) => Some(w),
            _ => None,
        };
        // A parked thread, like one returning to managed code, waits out the suspension.
        if s.parked || blocked == Some(Wait::SuspensionEnd) {
            out.extend(
                self.suspension_owner()
                    .map(|o| edge(o, self.wait_name(Wait::SuspensionEnd))),
            );
        }
        match blocked {
            Some(w @ Wait::Lock(l)) => out.extend(self.locks.owner(l).map(|o| edge(o, self.wait_name(w)))),
            Some(Wait::SafePoints) => out.extend(
                self.unsafe_threads(t)
                    .into_iter()
                    .map(|o| edge(o, "safe point".into())),
            ),
            Some(Wait::Join(x)) => out.push(edge(x, "join".into())),
            Some(w @ Wait::Cond(c, ..)) => {
                let cond = &self.conds[c as usize];
                let mut holders: Vec<usize> = cond.holders.iter().copied().filter(|&h| h != t).collect();
                holders.sort_unstable();
                holders.dedup();
                out.extend(holders.into_iter().map(|h| Edge {
                    to: h,
                    what: self.wait_name(w),
                    anyone: cond.any_thread_releases,
                }));
            }
            Some(Wait::SuspensionEnd | Wait::Event(..) | Wait::Change(_)) | None => {}
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

    /// Whether a thread outside `cycle` may still break it: any thread may `ResumeThread` a
    /// suspended one (a watchdog does) or post a semaphore, so a cycle through such a wait is
    /// final only once every other thread has ended or is stuck too (see [`Run::stuck`]).
    fn breakable(&self, cycle: &[(usize, Edge)]) -> bool {
        cycle.iter().any(|(_, e)| e.anyone)
            && (0..self.th.len()).any(|x| {
                !cycle.iter().any(|(n, _)| *n == x)
                    && !matches!(self.th[x].status, Status::Done | Status::Frozen)
            })
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
        self.end(Ending::Deadlock.as_str(), message, links);
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
        for &t in &waiting {
            let edges = self.edges(t);
            if edges.is_empty() {
                let waits_for = match self.th[t].status {
                    Status::Blocked(w @ (Wait::Event(..) | Wait::Cond(..) | Wait::Change(_))) => {
                        self.wait_name(w)
                    }
                    _ => "nothing that can happen".into(),
                };
                links.push((
                    t,
                    Edge {
                        to: t,
                        what: waits_for,
                        anyone: false,
                    },
                    "nobody".to_string(),
                ));
            }
            for e in edges {
                let held = self.th[e.to].name.clone();
                links.push((t, e, held));
            }
        }
        let message = links
            .iter()
            .map(|(t, e, held)| {
                let ended = if e.to != *t && self.th[e.to].status == Status::Done {
                    " (which has ended)"
                } else {
                    ""
                };
                format!("{} waits for {held}{ended} ({})", self.th[*t].name, e.what)
            })
            .collect::<Vec<_>>()
            .join(", ");
        let links = links
            .into_iter()
            .map(|(t, e, held)| CycleLink {
                thread: self.th[t].name.clone(),
                waits_for: e.what,
                held_by: held,
            })
            .collect();
        self.end(Ending::Hang.as_str(), message, links);
    }

    /// The runtime's faults since the last step: a fatal one ends the run.
    fn collect_runtime_faults(&mut self) {
        for f in self.rt.take_faults() {
            let kind = f.kind.as_str();
            if f.fatal {
                self.end(kind, f.message, Vec::new());
            } else {
                self.warn(kind, f.message);
            }
        }
    }

    /// A fault the run goes on after (the first one is the run's outcome if nothing fatal
    /// follows).
    /// `t` starts stopping `what` (a thread, or the runtime). Once the application has
    /// crashed (its event `crash` is set), one stop may already have been under way when it
    /// did; a second one is `sampled_after_crash`.
    pub(super) fn stop_started(&mut self, t: usize, what: &str) {
        self.round_opens(Some(t));
        let crashed = self
            .event_names
            .iter()
            .position(|n| n == "crash")
            .is_some_and(|e| self.events[e]);
        if !crashed {
            return;
        }
        self.th[t].stops_after_crash += 1;
        if self.th[t].stops_after_crash == 2 {
            let message = format!(
                "{} stops {what} after the application crashed (its crash event is set): a sampler must stop walking a dying process",
                self.th[t].name
            );
            self.warn(Ending::SampledAfterCrash.as_str(), message);
        }
    }

    fn warn(&mut self, kind: &str, message: String) {
        self.note_for(self.current, 0, format!("{kind}: {message}"));
        self.warnings.push(RunFault {
            kind: kind.into(),
            message,
            cycle: Vec::new(),
        });
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

    /// Adds the step thread `t` just ran to the timeline; `walks` is how many walks had
    /// returned before it.
    fn record(&mut self, t: usize, walks: u64) {
        let walk = {
            let st = self.rt.lock();
            match st.walks {
                (n, Some((target, hr))) if n > walks => {
                    let name = st
                        .threads
                        .iter()
                        .find(|x| x.id == target)
                        .map_or_else(|| format!("thread {:#x}", target.0), |x| x.name.clone());
                    Some((name, hr.to_string()))
                }
                _ => None,
            }
        };
        let lanes = (0..self.th.len()).map(|x| self.lane(x, t)).collect();
        if let Some(timeline) = &mut self.timeline {
            timeline.steps.push(Step {
                step: self.steps,
                ran: t,
                walk,
                reached: std::mem::take(&mut self.fresh_windows),
                lanes,
            });
        }
    }

    /// Thread `x` after a step thread `ran` ran.
    fn lane(&self, x: usize, ran: usize) -> Lane {
        let s = &self.th[x];
        // A thread that ran into a wait shows the wait.
        let doing = match s.status {
            Status::Blocked(w) if !self.wait_over(x, w) => match w {
                Wait::Cond(_, _, deadline) | Wait::Event(_, deadline) if deadline != u64::MAX => {
                    Doing::Waiting(self.wait_name(w))
                }
                _ => Doing::Blocked(self.wait_name(w)),
            },
            _ if x == ran => Doing::Ran,
            _ if s.parked => Doing::Parked,
            Status::Frozen => Doing::Frozen,
            Status::NotStarted => Doing::NotStarted,
            Status::Ready | Status::Blocked(_) => Doing::Ready,
            Status::Sleeping(_) => Doing::Sleeping,
            Status::Done => Doing::Done,
        };
        Lane {
            doing,
            suspended_by: (s.suspenders.iter().copied())
                .chain(s.stopped_for_walk.flatten())
                .map(|by| self.th[by].name.clone())
                .collect(),
            callback: s
                .stack
                .iter()
                .rev()
                .find_map(|a| a.callback)
                .map(|k| k.as_str().to_string()),
            signal: s.stack.iter().any(|a| a.signal),
            locks: (self.locks.held(x).map(str::to_string))
                .chain(
                    (self.conds.iter())
                        .filter(|c| c.holders.contains(&x))
                        .map(|c| c.name.clone()),
                )
                .collect(),
        }
    }

    /// What a blocked thread waits for, in words (as deadlock and hang reports and the
    /// timeline name it).
    fn wait_name(&self, w: Wait) -> String {
        match w {
            Wait::Lock(l) => format!("lock {}", self.locks.name(l)),
            Wait::SafePoints => "safe points".into(),
            Wait::SuspensionEnd => "end of the runtime suspension".into(),
            Wait::Event(e, _) => format!("event {}", self.event_names[e as usize]),
            Wait::Join(x) => format!("join {}", self.th[x].name),
            Wait::Cond(c, ..) => self.cond_name(c),
            Wait::Change(_) => "a write by another thread (it spins)".into(),
        }
    }

    /// How waits on condition variable `c` are named: the object it stands for (a read-write
    /// lock, a one-time initialization, a semaphore), or the condition variable itself.
    fn cond_name(&self, c: u32) -> String {
        let name = &self.conds[c as usize].name;
        if name.starts_with("pthread_cond") {
            format!("condition variable {name}")
        } else {
            name.clone()
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
        if self.waiting(t) {
            // Only a signal makes a waiting thread run ([`Run::can_run`]).
            self.interrupt(t);
            return;
        }
        if self.in_signal_handler(t) {
            // The handler runs on top of whatever the thread was doing, which waits for it.
            self.run_top(t);
            return;
        }
        if let Status::Blocked(_) | Status::Sleeping(_) = self.th[t].status {
            self.th[t].status = Status::Ready;
        }
        if self.th[t].takes_over_ids && self.waits_for_ids(t) {
            return;
        }
        if self.th[t].in_wait {
            // Back to cooperative mode: during another thread's runtime suspension that waits
            // for its end, as a P/Invoke's return does.
            if self.suspended_by_other(t) {
                self.th[t].status = Status::Blocked(Wait::SuspensionEnd);
                return;
            }
            self.th[t].in_wait = false;
            let mut st = self.rt.lock();
            st.threads[t].stack.pop_leaves(2);
            st.threads[t].mode = Mode::Cooperative;
            st.relayout(t);
        }
        if self.th[t].starting {
            self.start(t);
            return;
        }
        if let Some(entered) = self.th[t].returning.take() {
            if self.suspended_by_other(t) {
                self.th[t].returning = Some(entered);
                self.th[t].status = Status::Blocked(Wait::SuspensionEnd);
                return;
            }
            self.rt.leave(entered);
        }
        // A cooperative managed thread reaches a safe point at every step: during a runtime
        // suspension it parks there.
        if self.park_if_suspending(t) {
            return;
        }
        if self.deliver_signal(t) {
            return;
        }
        self.run_top(t);
    }

    /// Runs one step of the thread's top activation: its code, a callback or a signal handler.
    fn run_top(&mut self, t: usize) {
        let depth = self.th[t].stack.len();
        let Some(top) = self.th[t].stack.last_mut() else {
            self.ended(t);
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

    /// Before a spawned thread's first step: it waits for the end of the threads whose ids it
    /// takes over. A `Thread` object's memory is free for the next `Thread` only once it is
    /// deleted, and a kernel gives a dead thread's id to a new thread only once the old one
    /// has ended; until then the new thread does not exist yet. Returns whether it waits.
    fn waits_for_ids(&mut self, t: usize) -> bool {
        let reuses = self.p.scenario.process.reuses[t];
        let Some(x) = reuses.after().find(|&x| self.th[x].status != Status::Done) else {
            self.th[t].takes_over_ids = false;
            return false;
        };
        self.note(t, 0, |run| {
            format!("start: takes over {}'s ids: waits for its end", run.th[x].name)
        });
        self.th[t].status = Status::Blocked(Wait::Join(x));
        true
    }

    /// A spawned managed thread's first step, `Thread::HasStarted` (CoreCLR v3.1.23
    /// `src/vm/threads.cpp`): `ThreadStore::TransferStartedThread` takes the thread-store
    /// lock, which a runtime suspension holds until it ends, so a thread starting during one
    /// waits for it, unknown to `EnumThreads` and to the suspension; once past it, the thread
    /// is alive and the runtime raises `ThreadCreated` on it.
    fn start(&mut self, t: usize) {
        if let Err(wait) = self.passes(t, LockId::THREAD_STORE) {
            self.note(t, 0, |run| {
                format!(
                    "start: adding the Thread: waits for lock {}",
                    run.locks.name(LockId::THREAD_STORE)
                )
            });
            self.th[t].status = Status::Blocked(wait);
            return;
        }
        self.th[t].starting = false;
        self.th[t].last_progress = self.now;
        self.changed();
        self.rt.lock().threads[t].lifecycle = Lifecycle::Alive;
        self.lifecycle_met(t, crate::coverage::Window::RoundOverCreation);
        self.raise(t, CallbackKind::ThreadCreated);
    }

    /// Moves the activation at `depth` (the one that ran `instr`) on, as `done` says. A
    /// handler the step pushed runs first; the instruction below it has already moved on.
    fn after(&mut self, t: usize, depth: usize, instr: Instr, done: Done) {
        let progress = !matches!(instr.op, Op::Spin(_));
        if progress {
            self.th[t].last_progress = self.now;
            if !matches!(done, Done::Block(_)) {
                self.changed();
            }
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
        if act.signal {
            self.handler_returned(t);
        }
        if let Some(entered) = act.entered {
            if entered.returned(&self.rt) {
                self.note(t, 0, |_| "ThreadDestroyed returned: thread dead".into());
            }
            let waits = !self.th[t].stack.is_empty()
                && entered.returns_to_cooperative(&self.rt)
                && self.suspended_by_other(t);
            if waits {
                self.th[t].returning = Some(entered);
                self.th[t].status = Status::Blocked(Wait::SuspensionEnd);
                return;
            }
            self.rt.leave(entered);
        }
        if self.th[t].stack.is_empty() {
            self.ended(t);
            self.note(t, 0, |_| "ends".into());
        }
    }

    /// Thread `t`'s code has ended: it idles from now on, stopped for any runtime suspension
    /// like a thread without code (parked at once, now if one is in effect).
    fn ended(&mut self, t: usize) {
        self.th[t].status = Status::Done;
        self.round_closes(t);
        self.changed();
        let suspended = self.suspension_owner().is_some();
        let mut st = self.rt.lock();
        st.threads[t].runs_code = false;
        let thread = &st.threads[t];
        if suspended && thread.is_managed() && thread.parked.is_none() && thread.lifecycle == Lifecycle::Alive
        {
            st.park(t);
            drop(st);
            self.th[t].parked = true;
        }
    }

    fn park_if_suspending(&mut self, t: usize) -> bool {
        let Some(owner) = self.suspension_owner() else {
            return false;
        };
        // Only managed code polls for safe points, and only between instructions (not in the
        // middle of an allocation holding the heap lock): profiler code in a callback runs on
        // (in cooperative mode, holding the suspension up).
        match &self.th[t].stack[..] {
            [Activation {
                source: Source::Program { phase: 0, .. },
                ..
            }] => {}
            _ => return false,
        }
        let mut st = self.rt.lock();
        let thread = &st.threads[t];
        if owner == t || !thread.is_managed() || thread.mode != Mode::Cooperative || thread.parked.is_some() {
            return false;
        }
        // Native code run in cooperative mode without a Frame (an FCall) is no safe point:
        // the thread parks once it is back in managed code ("every code path through the
        // FCALL must do such a poll", CoreCLR v3.1.23 `src/vm/fcall.h`).
        let native = |e: &StackEntry| match e {
            StackEntry::Call { function, .. } => !st.code.function(*function).kind.is_managed(),
            StackEntry::Frame(_) => false,
        };
        let mut entries = thread.stack.iter();
        let in_fcall = entries.next().is_some_and(native)
            && matches!(entries.find(|e| !native(e)), Some(StackEntry::Call { .. }));
        if in_fcall {
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

    /// True when `t` waits (blocked, asleep, or parked by a runtime suspension): only a signal
    /// can make it run before its wait ends.
    fn waiting(&self, t: usize) -> bool {
        let s = &self.th[t];
        // A thread parks in preemptive mode and then raises RuntimeThreadSuspended on itself
        // (`Thread::RareDisablePreemptiveGC`): parked, it still runs that callback.
        let in_notice = matches!(
            s.stack.last(),
            Some(Activation {
                callback: Some(CallbackKind::Suspension(_)),
                ..
            })
        );
        let parked = s.parked && !in_notice && !self.in_signal_handler(t);
        match s.status {
            Status::Blocked(w) => !self.wait_over(t, w),
            Status::Sleeping(until) => until > self.now,
            Status::Ready => parked,
            Status::Frozen | Status::NotStarted | Status::Done => false,
        }
    }

    /// True when the profiling signal is pending on `t` and would be delivered at its next
    /// step: not blocked (`mask_signals`), and not during its own handler, which blocks the
    /// signal that triggered it (`sigaction(2)`, without `SA_NODEFER`).
    fn signal_deliverable(&self, t: usize) -> bool {
        let s = &self.th[t];
        s.signal_pending && !s.signals_masked && !self.in_signal_handler(t)
    }

    /// True when `t` runs the profiling signal's handler (on top of its other activations).
    fn in_signal_handler(&self, t: usize) -> bool {
        self.th[t].stack.iter().any(|a| a.signal)
    }

    /// Delivers the signal to a waiting thread, as Linux does: the handler runs at once, on
    /// top of the wait, which resumes when it returns ([`Run::handler_returned`]). Every
    /// wait a program step makes resumes so (a futex-based lock, a condition variable, the
    /// runtime's waits and sleeps loop until their condition or deadline) except `read`,
    /// which fails with `EINTR` unless the handler was installed with `SA_RESTART`
    /// (`signal(7)`, "Interruption of system calls and library functions by signal handlers").
    fn interrupt(&mut self, t: usize) {
        let status = self.th[t].status;
        if self.deliver_signal(t) && self.in_signal_handler(t) {
            let restart = self.signal_flags().contains(SignalFlags::RESTART);
            self.th[t].interrupted = Some((status, restart));
            self.th[t].status = Status::Ready;
        }
    }

    /// The handler of a signal that interrupted a wait has returned: the wait resumes, or a
    /// `read` fails with `EINTR`, which the application sees (`app_saw_eintr`).
    fn handler_returned(&mut self, t: usize) {
        let Some((status, restart)) = self.th[t].interrupted.take() else {
            return;
        };
        let read = match self.th[t].stack.last() {
            Some(Activation {
                source: Source::Program { code, pc, .. },
                ..
            }) => code
                .get(*pc)
                .filter(|i| matches!(i.op, Op::Read(_)))
                .map(|i| i.line),
            _ => None,
        };
        match read {
            Some(line) if !restart && status != Status::Ready => {
                let message = format!(
                    "{}'s read (line {line}) failed with EINTR: the profiling signal's handler, installed without SA_RESTART, interrupted it",
                    self.th[t].name
                );
                self.note(t, line, |_| "read: EINTR".into());
                self.warn(Ending::AppSawEintr.as_str(), message);
            }
            _ => self.th[t].status = status,
        }
    }

    /// The `sa_flags` of the profiling signal's handler in this run.
    fn signal_flags(&self) -> SignalFlags {
        match &self.signal_handler {
            Some(action) => action.flags,
            None => self.p.scenario.process.handlers.signal_flags,
        }
    }

    fn deliver_signal(&mut self, t: usize) -> bool {
        if !self.signal_deliverable(t) {
            return false;
        }
        let s = &mut self.th[t];
        s.signal_pending = false;
        if s.handler_replaced {
            self.note(t, 0, |_| {
                "the application's own signal handler runs; the profiler's does not".into()
            });
            return true;
        }
        // The interrupted context: the thread's registers at its current instruction.
        let mut context = self.rt.lock().threads[t]
            .leaf_context()
            .unwrap_or_else(Context::zeroed);
        if self.th[t].rsp_hijacked {
            context.rsp = HIJACKED_RSP;
            if !self.alternate_stack(t) {
                let message = format!(
                    "the profiling signal could not be delivered to {}: its stack pointer {HIJACKED_RSP:#x} is unmapped and the handler does not run on an alternate stack (SA_ONSTACK), so the kernel kills the process with SIGSEGV",
                    self.th[t].name
                );
                self.end(FaultKind::AccessViolation.as_str(), message, Vec::new());
                return true;
            }
        }
        let rip = context.rip;
        let source = match (&self.signal_handler, &self.p.scenario.process.handlers.signal) {
            (Some(action), _) => {
                let (handler, rt) = (action.handler.clone(), self.rt.clone());
                fiber_source(self.fiber_on(t, Box::new(move || handler(&rt, &SimOs::new(), &context))))
            }
            (None, Some(code)) => Source::Program {
                code: code.clone(),
                pc: 0,
                phase: 0,
            },
            (None, None) => {
                self.note(t, 0, |_| "signal delivered; no handler installed".into());
                return true;
            }
        };
        self.note(t, 0, |_| {
            format!("signal handler starts (interrupted at {rip:#x})")
        });
        self.stopped(t, true);
        self.th[t].stack.push(Activation {
            source,
            callback: None,
            entered: None,
            signal: true,
        });
        true
    }

    /// Whether the profiling signal's handler runs on an alternate stack on `t`: installed with
    /// `SA_ONSTACK`, on a thread the runtime knows, whose PAL gave it one
    /// (`CPalThread::EnsureSignalAlternateStack`, CoreCLR v3.1.23 `src/pal/src/thread/thread.cpp`,
    /// for threads it creates and those that enter it). Without one, Linux writes the signal
    /// frame below the interrupted stack pointer, and if that memory is unmapped it kills the
    /// process with SIGSEGV (`get_sigframe`, `arch/x86/kernel/signal.c`).
    fn alternate_stack(&self, t: usize) -> bool {
        self.signal_flags().contains(SignalFlags::ONSTACK) && self.rt.lock().threads[t].is_managed()
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
        // The thread is gone: suspensions of it (pending ones) end with it.
        self.th[t].suspenders.clear();
        self.th[t].suspend_pending = false;
        self.note(t, 0, |_| "Thread deleted, stack unmapped".into());
    }

    /// Raises `kind` on thread `t` if the event mask enables it and the profiler handles it:
    /// pushes the handler (a program, or the Rust profiler's method on a fiber) on the thread,
    /// in the callback's context (its frames, GC mode and callback state). Returns whether it
    /// pushed one.
    fn raise(&mut self, t: usize, kind: CallbackKind) -> bool {
        let top = self.th[t].stack.len();
        self.raise_at(t, kind, top)
    }

    /// [`Run::raise`], with the handler placed at `at` in the thread's activations (it runs
    /// when those above it have returned).
    fn raise_at(&mut self, t: usize, kind: CallbackKind, at: usize) -> bool {
        if self.rt.event_mask() & kind.required_mask() != kind.required_mask() {
            return false;
        }
        let depth = self.p.scenario.process.limits.callback_depth;
        if self.th[t].stack.len() >= depth {
            let message = format!(
                "{} overflows its stack: {} raised on top of {depth} nested activations (`callback_depth`; a handler that raises its own callback again recurses until the stack runs out)",
                self.th[t].name,
                kind.as_str()
            );
            self.end(Ending::StackOverflow.as_str(), message, Vec::new());
            return false;
        }
        let source = if let Some(profiler) = self.profiler.clone().or_else(|| self.rt.profiler()) {
            let (id, os_id, function, named) = {
                let st = self.rt.lock();
                let function = match kind {
                    CallbackKind::JitCompilation(f) => st.code.function(f).function_id,
                    _ => FunctionId(0),
                };
                let named = match kind {
                    CallbackKind::ThreadNameChanged(x) => (st.threads[x].id, st.threads[x].name.clone()),
                    _ => (ThreadId(0), String::new()),
                };
                (st.threads[t].id, st.threads[t].os_id, function, named)
            };
            let object = ObjectId(OBJECT_BASE);
            fiber_source(self.fiber_on(
                t,
                Box::new(move || {
                    match kind {
                        CallbackKind::ThreadCreated => {
                            profiler.thread_created(id);
                            profiler.thread_assigned_to_os_thread(id, os_id)
                        }
                        CallbackKind::ThreadDestroyed => profiler.thread_destroyed(id),
                        CallbackKind::ObjectAllocated => profiler.object_allocated(object, ClassId::NULL),
                        CallbackKind::ExceptionThrown => profiler.exception_thrown(object),
                        CallbackKind::GarbageCollectionStarted => {
                            // The collection runs between the two, the runtime suspended.
                            profiler.garbage_collection_started(&[true, false, false], GcReason::Induced);
                            profiler.garbage_collection_finished()
                        }
                        CallbackKind::Suspension(n) => {
                            n.deliver(profiler.as_ref());
                            HResult::S_OK
                        }
                        CallbackKind::JitCompilation(_) => {
                            // The method is compiled between the two; the runtime always
                            // says blocking is safe here.
                            profiler.jit_compilation_started(function, true);
                            profiler.jit_compilation_finished(function, HResult::S_OK, true)
                        }
                        CallbackKind::ThreadNameChanged(_) => profiler.thread_name_changed(named.0, &named.1),
                        // Raised into a running process's profiler by nothing: enter hooks are
                        // not callbacks; modules load before its threads run.
                        CallbackKind::FunctionEnter | CallbackKind::ModuleLoadFinished => HResult::S_OK,
                    };
                }),
            ))
        } else {
            let handlers = &self.p.scenario.process.handlers;
            let code = match kind {
                CallbackKind::ThreadCreated => &handlers.thread_created,
                CallbackKind::ThreadDestroyed => &handlers.thread_destroyed,
                CallbackKind::ObjectAllocated => &handlers.object_allocated,
                CallbackKind::ExceptionThrown => &handlers.exception_thrown,
                _ => return false,
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
        // A callback that neither pushes frames nor changes the mode leaves the thread as it
        // is, and must not restore it afterwards: a suspension callback of a parked thread
        // may outlast the suspension.
        let changes = kind.raiser().is_some() || kind.mode().is_some();
        let entered = changes.then(|| self.rt.enter(t, CallContext::Callback(kind)));
        self.note(t, 0, |_| format!("{} raised", kind.as_str()));
        self.th[t].stack.insert(
            at,
            Activation {
                source,
                callback: Some(kind).filter(|k| k.sets_callback_state()),
                entered,
                signal: false,
            },
        );
        true
    }

    /// Raises the callbacks the runtime queued (the suspension callbacks) on the threads they
    /// belong to, in the order they were queued, after any suspension callback a thread has
    /// not finished (a thread returns from RuntimeThreadSuspended before it can be resumed).
    /// Returns the threads it raised one on.
    fn raise_queued(&mut self) -> Vec<usize> {
        let pending = std::mem::take(&mut self.rt.lock().pending);
        // Each thread's place: below its unfinished suspension callbacks. Callbacks placed
        // there one after the other run in the order they were placed.
        let mut slots: Vec<(usize, usize)> = Vec::new();
        let mut raised = Vec::new();
        for (x, n) in pending {
            let Some(x) = x else { continue };
            let at = match slots.iter().find(|(y, _)| *y == x) {
                Some(&(_, at)) => at,
                None => {
                    let stack = &self.th[x].stack;
                    let unfinished = stack
                        .iter()
                        .rev()
                        .take_while(|a| matches!(a.callback, Some(CallbackKind::Suspension(_))))
                        .count();
                    slots.push((x, stack.len() - unfinished));
                    stack.len() - unfinished
                }
            };
            if self.raise_at(x, CallbackKind::Suspension(n), at) && !raised.contains(&x) {
                raised.push(x);
            }
        }
        raised
    }

    /// Queues suspension callback `n` on thread `t` (the runtime raises it there).
    fn notify(&mut self, t: usize, n: Notification) {
        self.rt.lock().notify_on(Some(t), n);
    }

    // ---- locks -------------------------------------------------------------------------

    /// Takes lock `l` for `t`, or says what `t` waits for. The code-manager lock is mirrored
    /// in the runtime, whose reader side (R13.2, R14) consults it.
    fn acquire(&mut self, t: usize, l: LockId) -> Result<(), Wait> {
        if !self.locks.take(t, l) {
            return Err(Wait::Lock(l));
        }
        if l == LockId::CODE_MANAGER {
            self.rt.lock().set_writer_lock(t, true);
        }
        if l == LockId::THREAD_STORE {
            self.rt.lock().thread_store_owner = Some(t);
        }
        Ok(())
    }

    /// Whether `t` could take `l` now (for locks taken and released within one step).
    fn passes(&self, t: usize, l: LockId) -> Result<(), Wait> {
        if self.locks.can_take(t, l) {
            Ok(())
        } else {
            Err(Wait::Lock(l))
        }
    }

    /// Releases `l`; a release by a thread that does not hold it ends the run (`lock_misuse`).
    fn release(&mut self, t: usize, l: LockId, line: usize) -> bool {
        match self.locks.release(t, l) {
            Ok(free) => {
                if free && l == LockId::CODE_MANAGER {
                    self.rt.lock().set_writer_lock(t, false);
                }
                if free && l == LockId::THREAD_STORE {
                    self.rt.lock().thread_store_owner = None;
                }
                true
            }
            Err(holder) => {
                let holder = holder.map_or("nobody".to_string(), |o| self.th[o].name.clone());
                let message = format!(
                    "{} (line {line}) releases lock {} held by {holder}",
                    self.th[t].name,
                    self.locks.name(l)
                );
                self.end(Ending::LockMisuse.as_str(), message, Vec::new());
                false
            }
        }
    }

    /// The rules for taking a lock or allocating (`what`): not in a signal handler, and not
    /// while a thread `t` suspended may be stopped holding it. Breaking one is a warning.
    fn check_lock_rules(&mut self, t: usize, what: &str, line: usize) {
        let name = &self.th[t].name;
        if self.th[t].stack.last().is_some_and(|a| a.signal) {
            let message = format!("{name}'s signal handler {what} (line {line})");
            self.warn(Ending::LockInSignalHandler.as_str(), message);
        } else if let Some(x) = (0..self.th.len())
            .find(|&x| x != t && self.th[x].suspenders.contains(&t) && self.os_target(x).is_ok())
        {
            let message = format!(
                "{name} {what} while {} is suspended by it (line {line}): the target may hold that lock",
                self.th[x].name
            );
            self.warn(Ending::LockWhileSuspending.as_str(), message);
        }
    }

    /// Notes that `t`, doing `what`, waits for lock `l`, and blocks it.
    fn waits_for_lock(&mut self, t: usize, line: usize, what: &str, l: LockId) -> Done {
        self.note(t, line, |run| {
            format!("{what}: waits for lock {}", run.locks.name(l))
        });
        Done::Block(Wait::Lock(l))
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

    // ---- descriptions ------------------------------------------------------------------

    fn describe(&self, op: Op) -> String {
        let thread = |x: usize| self.th[x].name.as_str();
        let lock = |l: LockId| self.locks.name(l);
        let function = |f| self.rt.with_code(|c| c.function(f).name.clone());
        match op {
            Op::Call(f) => format!("call {}", function(f)),
            Op::Return => "return".into(),
            Op::PInvoke(f) => format!("pinvoke {}", function(f)),
            Op::PInvokeReturn => "pinvoke_return".into(),
            Op::ReversePInvoke(f) => format!("reverse_pinvoke {}", function(f)),
            Op::ReversePInvokeReturn => "reverse_pinvoke_return".into(),
            Op::Alloc => "alloc".into(),
            Op::Lock(l) => format!("lock {}", lock(l)),
            Op::Unlock(l) => format!("unlock {}", lock(l)),
            Op::Throw => "throw".into(),
            Op::SetName(x) => format!("set_name {}", thread(x)),
            Op::CallExport(i) => format!("call_export {}", self.p.scenario.process.exports[i as usize].name),
            Op::Catch(n) => format!("catch {n}"),
            Op::EndCatch => "end_catch".into(),
            Op::Gc => "gc".into(),
            Op::Spin(n) => format!("spin {n}"),
            Op::Sleep(us) => format!("sleep {us}us"),
            Op::Read(us) => format!("read {us}us"),
            Op::Spawn(x) => format!("spawn {}", thread(x)),
            Op::Exit => "exit".into(),
            Op::HijackRsp => "hijack_rsp".into(),
            Op::RestoreRsp => "restore_rsp".into(),
            Op::Overrun(None) => "overrun".into(),
            Op::Overrun(Some(x)) => format!("overrun {}", thread(x)),
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
            Op::Join(x) => format!("join {}", thread(x)),
        }
    }
}
