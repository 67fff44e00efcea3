//! The running process: thread programs, profiler threads, the OS layer, locks and virtual
//! time under one deterministic scheduler.
//!
//! A [`Process`] is a scenario whose threads move. Application threads run their `program`s
//! (data: [`program`]); profiler code runs either as programs too (the file's `[profiler]`
//! handlers and native threads with programs) or as Rust closures and a Rust
//! [`corprof::ProfilerCallback`] on [`fiber`]s. One simulated thread runs at a time; every
//! step, every runtime API call and every OS call is a scheduling point where a
//! [`schedule::Chooser`] picks who runs next. A run ends when every thread is done, or with a
//! fault: a `deadlock` (a cycle in the wait-for graph, [`waitfor`]), a `hang` (threads blocked
//! without a cycle), a `livelock` (no progress within the virtual-time budget), or a fault the
//! runtime reports (a walk of a destroyed thread, a torn stack read, …).
//!
//! [`Process::run`] runs one schedule; [`Process::explore`] runs many under a strategy and
//! counts outcomes. Both are deterministic: the same scenario and schedule (or seed) give a
//! byte-identical [`RunReport`].

mod engine;
pub mod fiber;
pub mod fork;
pub mod hazard;
mod locks;
mod os;
pub mod program;
pub mod schedule;
pub mod shrink;
pub mod waitfor;

pub use crate::parallel::Shard;
pub use fiber::{unobserved, HeapLockAllocator};
pub use os::SimOs;

use crate::scenario::Scenario;
use corprof::os::SignalFlags;
use corprof::ProfilerCallback;
use program::Instr;
use schedule::{Biased, Chooser, Dfs, Pct, Replay, Rng, Schedule, ScheduleError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A program, shared by every run.
pub type Program = Arc<[Instr]>;

/// What a scenario file says about its moving parts (empty for a frozen scenario).
#[derive(Clone, Debug, Default)]
pub struct ProcessSpec {
    /// Each thread's program, by thread index (`None`: frozen, as in a snapshot).
    pub programs: Vec<Option<Program>>,
    /// Threads that start only when another thread's `spawn` step starts them.
    pub spawned: Vec<bool>,
    /// Threads that exist only once the profiler creates a thread (`start = "profiler"`):
    /// its thread creations take them in the order they are declared.
    pub created: Vec<bool>,
    /// Threads that run named profiler code (`body = "NAME"`), attached by whoever runs the
    /// file (the CLI attaches the bundled behaviours).
    pub bodies: Vec<Option<NamedBody>>,
    /// The profiler's callback handlers, as programs run on the thread the callback is raised
    /// on.
    pub handlers: Handlers,
    /// Lock names: the runtime's ([`program::RUNTIME_LOCKS`]) and the file's.
    pub locks: Vec<String>,
    /// Event names.
    pub events: Vec<String>,
    /// Virtual-time and step limits.
    pub limits: Limits,
    /// How `simclr explore` runs the file by default, and what it must find.
    pub explore: ExploreSpec,
    /// Settings of the built-in samplers its `body` fields name (`[sampler]`).
    pub sampler: SamplerSettings,
}

/// The file's `[sampler]` table: settings of the built-in samplers (the reference and its
/// mutants) that its `body` fields name. A setting left out keeps the sampler's own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplerSettings {
    /// Rounds the sampler takes before it stops.
    pub rounds: Option<u32>,
    /// Frames a sample holds at most (deeper stacks are cut and flagged truncated).
    pub max_frames: Option<u32>,
    /// Virtual microseconds between rounds.
    pub period_us: Option<u64>,
    /// Milliseconds after which the watchdog resumes a thread the sampler suspended.
    pub watchdog_ms: Option<u64>,
}

/// The file's `[explore]` table: the default exploration and its expected outcomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExploreSpec {
    /// The strategy.
    pub strategy: Strategy,
    /// How many schedules at most.
    pub schedules: u64,
    /// The first seed.
    pub seed: u64,
    /// The exact set of outcomes the exploration must find (`None`: no expectation).
    pub expect: Option<Vec<String>>,
}

impl Default for ExploreSpec {
    fn default() -> ExploreSpec {
        ExploreSpec {
            strategy: Strategy::Pct(3),
            schedules: 1000,
            seed: 1,
            expect: None,
        }
    }
}

impl ProcessSpec {
    /// True when some thread has a program with a step, or runs profiler code (a `body`): the
    /// scenario moves. `program = []` on every thread moves nothing.
    pub fn moves(&self) -> bool {
        self.programs.iter().flatten().any(|p| !p.is_empty()) || self.bodies.iter().any(Option::is_some)
    }
}

/// A thread's `body`: the name of profiler code to run on it, and the line naming it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedBody {
    /// The name.
    pub name: String,
    /// The 1-based line of the `body` field.
    pub line: usize,
}

/// The profiler's callback handlers written in the scenario file.
#[derive(Clone, Debug, Default)]
pub struct Handlers {
    /// `ThreadCreated`, on the new thread.
    pub thread_created: Option<Program>,
    /// `ThreadDestroyed`, on the dying thread.
    pub thread_destroyed: Option<Program>,
    /// `ObjectAllocated`, on the allocating thread.
    pub object_allocated: Option<Program>,
    /// `ExceptionThrown`, on the throwing thread.
    pub exception_thrown: Option<Program>,
    /// The profiling signal's handler (Unix), on the interrupted thread.
    pub signal: Option<Program>,
    /// The `sa_flags` that handler is installed with (`signal_flags`; none by default).
    pub signal_flags: SignalFlags,
}

/// Limits of one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Virtual time one step takes, in microseconds.
    pub step_us: u64,
    /// A thread that makes no progress for this long (virtual µs) is a livelock.
    pub livelock_us: u64,
    /// The most steps one run may take.
    pub max_steps: u64,
    /// Steps in a row in which no thread changes what another can see (a lock, an event, a
    /// suspension, a signal, a program's position, a thread's start or end) before the run is
    /// a livelock, unless a thread that did not run meanwhile waits for a deadline.
    pub idle_steps: u64,
    /// The most activations one thread may hold at once (its program, the callback and
    /// signal handlers raised on top of it); one more overflows its stack. A handler that
    /// raises its own callback again (an `exception_thrown` handler that throws) recurses
    /// until then, as the real callback frames would until the thread's stack ran out.
    pub callback_depth: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            step_us: 10,
            livelock_us: 10_000_000,
            max_steps: 1_000_000,
            idle_steps: 5_000,
            callback_depth: 64,
        }
    }
}

/// Profiler code for a simulated thread: called once per run with the process's runtime and
/// OS layer. It may block (on the OS layer's mutexes, events, sleeps); every call it makes
/// into either is a scheduling point.
pub type ThreadBody = Arc<dyn Fn(&crate::Runtime, &SimOs) + Send + Sync>;

/// A profiling-signal handler: called on the interrupted thread with its context.
pub type SignalHandler = Arc<dyn Fn(&crate::Runtime, &SimOs, &corprof::Context) + Send + Sync>;

/// A profiling-signal handler as `sigaction` installs it: the code and its `sa_flags`, which
/// decide whether a system call it interrupts is restarted (`SA_RESTART`) and which stack it
/// runs on (`SA_ONSTACK`).
#[derive(Clone)]
pub struct SigAction {
    /// The handler.
    pub handler: SignalHandler,
    /// Its flags.
    pub flags: SignalFlags,
}

/// Profiler code loaded into one run: thread bodies by thread name, callbacks and a signal
/// handler, taking the place of what [`Process::thread_body`], [`Process::profiler`] and
/// [`Process::signal_handler`] attached.
#[derive(Clone, Default)]
pub struct Loaded {
    /// Code for threads, by the thread's name in the scenario.
    pub bodies: Vec<(String, ThreadBody)>,
    /// The runtime's callbacks.
    pub profiler: Option<Arc<dyn ProfilerCallback>>,
    /// The profiling signal's handler (Unix).
    pub signal_handler: Option<SigAction>,
    /// Code to run when the process exits (the profiler's `Shutdown`): once every thread
    /// other than those the profiler created has ended, on the first thread. The process
    /// ends when it returns, with any thread the profiler created still running.
    pub at_exit: Option<ExitHook>,
}

/// Profiler code run as the process exits ([`Loaded::at_exit`]).
pub type ExitHook = Arc<dyn Fn() + Send + Sync>;

/// Loads profiler code afresh at the start of every run, so state it keeps (a thread
/// registry, counters) starts clean in each schedule, as in a new process. It gets the run's
/// runtime (the profiler's initialization may call it) and may create threads with
/// [`SimOs::create_thread`]: they start with the run.
pub type Loader = Arc<dyn Fn(&Arc<crate::Runtime>) -> Loaded + Send + Sync>;

/// A scenario ready to run under schedules, with any Rust profiler code attached.
#[derive(Clone)]
pub struct Process {
    scenario: Scenario,
    /// The runtime in the scenario's initial state; each run starts from a fork of it.
    template: Arc<crate::Runtime>,
    bodies: Vec<Option<ThreadBody>>,
    profiler: Option<Arc<dyn ProfilerCallback>>,
    signal_handler: Option<SigAction>,
    loader: Option<Loader>,
    isolation: Option<Arc<dyn Isolation>>,
    /// How many schedules an exploration runs at once ([`Process::jobs`]).
    jobs: usize,
    /// The share of an exploration's schedules this process runs ([`Process::shard`]).
    shard: Shard,
}

/// A name that the scenario does not declare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownThread(pub String);

impl std::fmt::Display for UnknownThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the scenario declares no thread `{}`", self.0)
    }
}

impl std::error::Error for UnknownThread {}

/// How a run can end besides `ok` and the faults the runtime reports
/// ([`crate::trace::FaultKind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// A cycle in the wait-for graph.
    Deadlock,
    /// Threads blocked with no cycle (waiting for a thread that ended, an event nobody sets).
    Hang,
    /// No progress within the virtual-time budget, or the step limit reached.
    Livelock,
    /// A lock released by a thread that does not hold it.
    LockMisuse,
    /// A return (or catch) with no caller left.
    UnbalancedReturn,
    /// A stack that no longer fits its region.
    StackOverflow,
    /// A stack read of a thread that was not stopped (the run goes on).
    TornStackRead,
    /// Rust profiler code panicked.
    ProfilerPanic,
    /// A thread's `body` names profiler code that nobody attached.
    UnattachedBody,
    /// The profiler created more threads than the scenario declares `start = "profiler"`.
    UndeclaredThread,
    /// Profiler code took a lock or allocated while a thread it suspended was stopped (the
    /// run goes on; the target may have held that lock).
    LockWhileSuspending,
    /// A signal handler took a lock or allocated (the run goes on).
    LockInSignalHandler,
    /// A thread the runtime knows suspended another (the run goes on).
    ManagedSuspender,
    /// An oracle found a sample that differs from the ground truth (the run goes on).
    WrongSample,
    /// An oracle found a sample shorter than a correct sampler would have taken at that
    /// instant, for a reason the sampler caused (the run goes on).
    LostSample,
    /// The application saw `EINTR` from a system call the profiling signal interrupted, because
    /// the handler was installed without `SA_RESTART` (the run goes on).
    AppSawEintr,
    /// A thread stopped others again after the application crashed (its `crash` event set):
    /// beyond the one stop that may already have been under way (the run goes on).
    SampledAfterCrash,
}

impl Ending {
    /// Every ending.
    pub const ALL: [Ending; 17] = [
        Ending::Deadlock,
        Ending::Hang,
        Ending::Livelock,
        Ending::LockMisuse,
        Ending::UnbalancedReturn,
        Ending::StackOverflow,
        Ending::TornStackRead,
        Ending::ProfilerPanic,
        Ending::UnattachedBody,
        Ending::UndeclaredThread,
        Ending::LockWhileSuspending,
        Ending::LockInSignalHandler,
        Ending::ManagedSuspender,
        Ending::WrongSample,
        Ending::LostSample,
        Ending::AppSawEintr,
        Ending::SampledAfterCrash,
    ];

    /// Its name in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Deadlock => "deadlock",
            Ending::Hang => "hang",
            Ending::Livelock => "livelock",
            Ending::LockMisuse => "lock_misuse",
            Ending::UnbalancedReturn => "unbalanced_return",
            Ending::StackOverflow => "stack_overflow",
            Ending::TornStackRead => "torn_stack_read",
            Ending::ProfilerPanic => "profiler_panic",
            Ending::UnattachedBody => "unattached_body",
            Ending::UndeclaredThread => "undeclared_thread",
            Ending::LockWhileSuspending => "lock_while_suspending",
            Ending::LockInSignalHandler => "lock_in_signal_handler",
            Ending::ManagedSuspender => "managed_suspender",
            Ending::WrongSample => "wrong_sample",
            Ending::LostSample => "lost_sample",
            Ending::AppSawEintr => "app_saw_eintr",
            Ending::SampledAfterCrash => "sampled_after_crash",
        }
    }

    /// True when `name` is an outcome a run can have: `ok`, an ending, or a runtime fault.
    pub fn is_outcome(name: &str) -> bool {
        name == "ok"
            || Ending::ALL.iter().any(|e| e.as_str() == name)
            || crate::trace::FaultKind::ALL.iter().any(|k| k.as_str() == name)
    }
}

/// One link of a deadlock cycle: `thread` waits for `waits_for`, which `held_by` holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CycleLink {
    /// The waiting thread.
    pub thread: String,
    /// What it waits for (`lock heap`, `ResumeThread`, `safe point`, `end of GC`).
    pub waits_for: String,
    /// The thread that must act for the wait to end.
    pub held_by: String,
}

/// How a run ended, when it did not end well.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunFault {
    /// `deadlock`, `hang`, `livelock`, or a runtime fault kind (`walk_of_destroyed_thread`, …).
    pub kind: String,
    /// What happened, naming threads.
    pub message: String,
    /// The wait-for cycle (deadlocks), or every blocked thread's wait (hangs).
    pub cycle: Vec<CycleLink>,
}

/// One step of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceEntry {
    /// The step's number, from 1.
    pub step: u64,
    /// Virtual time in microseconds when it ran.
    pub time_us: u64,
    /// The thread that ran.
    pub thread: String,
    /// The scenario line of its instruction (0 for Rust code).
    pub line: usize,
    /// What it did.
    pub what: String,
}

/// Everything one run did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// The schedule that was run (replay it with `simclr replay --schedule`).
    pub schedule: String,
    /// `ok`, or the fault's kind.
    pub outcome: String,
    /// The first fault (the run stops at a fatal one), if any.
    pub fault: Option<RunFault>,
    /// Non-fatal faults after which the run went on.
    pub warnings: Vec<RunFault>,
    /// Scheduling choices made (steps where several threads could run): the schedule's length.
    pub choice_points: u64,
    /// Steps run.
    pub steps: u64,
    /// Virtual time at the end, in microseconds.
    pub time_us: u64,
    /// Stops of a thread by profiler code: suspensions `GetThreadContext` completed, and the
    /// profiling signal's handler starting.
    pub stops: u64,
    /// How many of those stops met each hazard ([`hazard::Hazard`], by name; hazards never
    /// met are left out).
    pub hazards: BTreeMap<String, u64>,
    /// Every step, in order.
    pub trace: Vec<TraceEntry>,
}

/// Where a run runs, when not in this process ([`Process::isolate`]).
pub trait Isolation: Send + Sync {
    /// Runs `run` with `chooser` where nothing it does (a crash, a hang, an abort) can reach
    /// the caller, and returns its report; a run that dies or hangs there is a report too
    /// (`profiler_crash`, `profiler_hang`) whose schedule is the choices made before it died.
    /// `chooser` must end as the run left it: each of its choices is made in this process
    /// too (choosers are deterministic), so strategies that learn from runs (DFS) go on.
    fn run(
        &self,
        run: &dyn Fn(&mut dyn Chooser) -> Result<RunReport, ScheduleError>,
        chooser: &mut dyn Chooser,
    ) -> Result<RunReport, ScheduleError>;
}

/// Which strategy [`Process::explore`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Uniformly random choices; run `i` uses seed `seed + i`.
    Random,
    /// PCT with this bug depth.
    Pct(u32),
    /// Exhaustive DFS with at most this many preemptions per run.
    Dfs(u32),
}

impl Strategy {
    /// The strategy's name with its bound (`random`, `pct:3`, `dfs:2`).
    pub fn describe(self) -> String {
        match self {
            Strategy::Random => "random".into(),
            Strategy::Pct(d) => format!("pct:{d}"),
            Strategy::Dfs(p) => format!("dfs:{p}"),
        }
    }
}

/// The first failing schedule of an exploration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FirstFailure {
    /// Which schedule (0-based: under random and PCT schedules, run `index` has seed
    /// `seed + index`).
    pub index: u64,
    /// The schedule string.
    pub schedule: String,
    /// What went wrong.
    pub fault: RunFault,
}

/// What an exploration found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExploreReport {
    /// The scenario.
    pub scenario: String,
    /// `random`, `pct:D` or `dfs:P`.
    pub strategy: String,
    /// The seed.
    pub seed: u64,
    /// How many schedules ran.
    pub schedules_run: u64,
    /// True when DFS ran every schedule within its bound.
    pub exhaustive: bool,
    /// How many runs ended each way (`ok`, `deadlock`, …).
    pub outcomes: BTreeMap<String, u64>,
    /// Stops of a thread by profiler code, over every run ([`RunReport::stops`]).
    pub stops: u64,
    /// The stops that met each hazard, over every run (hazards no stop met are absent).
    pub hazards: BTreeMap<String, u64>,
    /// The first schedule that did not end `ok`, if any.
    pub first_failure: Option<FirstFailure>,
}

impl Process {
    /// The scenario's process, with no Rust code attached.
    pub fn new(scenario: Scenario) -> Process {
        let bodies = vec![None; scenario.threads.len()];
        Process {
            template: Arc::new(scenario.runtime()),
            scenario,
            bodies,
            profiler: None,
            signal_handler: None,
            loader: None,
            isolation: None,
            jobs: 1,
            shard: Shard::WHOLE,
        }
    }

    /// Lets explorations under random and PCT schedules run up to `n` schedules at once, each
    /// on an OS thread of its own (DFS, whose every schedule follows from the one before, and
    /// isolated runs go one at a time). Reports are the same whatever `n` is: runs are seen
    /// in schedule order, and a PCT run that started before an earlier run taught PCT a
    /// longer run is run again. The attached code must keep no state across runs that its
    /// outcome depends on (a [`Loader`] makes each run's afresh).
    pub fn jobs(&mut self, n: usize) -> &mut Process {
        self.jobs = n.max(1);
        self
    }

    /// Runs only `shard`'s share of every exploration under random schedules: schedule `i` of
    /// the whole depends on its index alone, so the shards of one exploration, run anywhere,
    /// together run each of its schedules once. PCT (whose runs learn their length from the
    /// runs before them) and DFS (whose every schedule follows from the one before) cannot be
    /// split: exploring with them panics unless the shard is [`Shard::WHOLE`].
    pub fn shard(&mut self, shard: Shard) -> &mut Process {
        self.shard = shard;
        self
    }

    /// Calls `loader` at the start of every run for that run's profiler code (a thread named
    /// in it that the scenario does not declare ends the run as `unattached_body`).
    pub fn load(&mut self, loader: Loader) -> &mut Process {
        self.loader = Some(loader);
        self
    }

    /// Runs every schedule through `isolation` (a worker process, say) instead of in this
    /// process: explorations, replays and shrinking all go through it.
    pub fn isolate(&mut self, isolation: Arc<dyn Isolation>) -> &mut Process {
        self.isolation = Some(isolation);
        self
    }

    /// The scenario.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Runs `body` as thread `thread` (declared in the scenario, usually `kind = "native"`
    /// without a program) in every run.
    pub fn thread_body(&mut self, thread: &str, body: ThreadBody) -> Result<&mut Process, UnknownThread> {
        let i = self.index_of(thread)?;
        self.bodies[i] = Some(body);
        Ok(self)
    }

    /// Raises the runtime's callbacks into `profiler` (on fibers, on the thread each callback
    /// happens on) instead of the file's `[profiler]` handlers.
    pub fn profiler(&mut self, profiler: Arc<dyn ProfilerCallback>) -> &mut Process {
        self.profiler = Some(profiler);
        self
    }

    /// Installs `action` (Unix) as the profiling signal's handler, run on the signalled
    /// thread with its interrupted context, instead of the file's `signal_handler`.
    pub fn signal_handler(&mut self, action: SigAction) -> &mut Process {
        self.signal_handler = Some(action);
        self
    }

    /// The threads whose `body` names profiler code, with the name: attach each with
    /// [`Process::thread_body`].
    pub fn named_bodies(&self) -> impl Iterator<Item = (&str, &NamedBody)> {
        let threads = &self.scenario.threads;
        let named = self.scenario.process.bodies.iter().enumerate();
        named.filter_map(|(i, b)| Some((threads[i].name.as_str(), b.as_ref()?)))
    }

    /// Which threads run the profiler's code: those with a `body`, attached code, or declared
    /// `start = "profiler"`.
    pub fn profiler_threads(&self) -> Vec<bool> {
        let spec = &self.scenario.process;
        (0..self.scenario.threads.len())
            .map(|i| {
                self.bodies[i].is_some()
                    || spec.bodies.get(i).is_some_and(Option::is_some)
                    || spec.created.get(i).copied().unwrap_or(false)
            })
            .collect()
    }

    fn index_of(&self, thread: &str) -> Result<usize, UnknownThread> {
        self.scenario
            .threads
            .iter()
            .position(|t| t.name == thread)
            .ok_or_else(|| UnknownThread(thread.to_string()))
    }

    /// Runs one schedule chosen by `chooser`, with its full trace.
    pub fn run(&self, chooser: &mut dyn Chooser) -> Result<RunReport, ScheduleError> {
        self.go(true, chooser)
    }

    /// Runs one schedule without recording a trace (what [`Process::explore`] does; replay a
    /// schedule for its trace).
    pub fn run_untraced(&self, chooser: &mut dyn Chooser) -> Result<RunReport, ScheduleError> {
        self.go(false, chooser)
    }

    fn go(&self, traced: bool, chooser: &mut dyn Chooser) -> Result<RunReport, ScheduleError> {
        let run = |chooser: &mut dyn Chooser| engine::Run::new(self, traced).go(chooser);
        match &self.isolation {
            Some(isolation) => isolation.run(&run, chooser),
            None => run(chooser),
        }
    }

    /// Replays `schedule` exactly: an error if a choice names a thread that cannot run then,
    /// or the schedule ends before the run does.
    pub fn replay(&self, schedule: &Schedule) -> Result<RunReport, ScheduleError> {
        let threads = self.scenario.threads.len();
        if let Some(&bad) = schedule.0.iter().find(|&&t| t as usize >= threads) {
            return Err(ScheduleError(format!(
                "thread {bad} does not exist: the scenario has {threads} threads (0 to {})",
                threads.saturating_sub(1)
            )));
        }
        let report = self.run(&mut Replay::new(schedule, true))?;
        if report.choice_points < schedule.0.len() as u64 {
            return Err(ScheduleError(format!(
                "the run ended after {} of the schedule's {} choices",
                report.choice_points,
                schedule.0.len()
            )));
        }
        Ok(report)
    }

    /// Runs up to `schedules` schedules under `strategy` from `seed` and counts outcomes.
    /// `progress` is called after each run with the count so far and the faults so far.
    pub fn explore(
        &self,
        strategy: Strategy,
        schedules: u64,
        seed: u64,
        mut progress: impl FnMut(u64, u64),
    ) -> ExploreReport {
        let mut report = ExploreReport {
            scenario: self.scenario.name.clone(),
            strategy: strategy.describe(),
            seed,
            schedules_run: 0,
            exhaustive: false,
            outcomes: BTreeMap::new(),
            stops: 0,
            hazards: BTreeMap::new(),
            first_failure: None,
        };
        let mut faults = 0;
        report.exhaustive = self.each_run(strategy, schedules, seed, |index, run| {
            report.schedules_run += 1;
            *report.outcomes.entry(run.outcome.clone()).or_default() += 1;
            report.stops += run.stops;
            for (hazard, n) in &run.hazards {
                *report.hazards.entry(hazard.clone()).or_default() += n;
            }
            if let Some(fault) = run.fault {
                faults += 1;
                if report.first_failure.is_none() {
                    report.first_failure = Some(FirstFailure {
                        index,
                        schedule: run.schedule,
                        fault,
                    });
                }
            }
            progress(report.schedules_run, faults);
            true
        });
        report
    }

    /// Runs schedules under `strategy` from `seed` until the first one that does not end
    /// `ok`: how many ran, and that one (`None` if all `schedules` ended well).
    pub fn first_failure(&self, strategy: Strategy, schedules: u64, seed: u64) -> (u64, Option<RunReport>) {
        self.first_failure_seeing(strategy, schedules, seed, |_| {})
    }

    /// [`Process::first_failure`], showing every run to `seen` as it ends (to count what the
    /// runs met, say).
    pub fn first_failure_seeing(
        &self,
        strategy: Strategy,
        schedules: u64,
        seed: u64,
        mut seen: impl FnMut(&RunReport),
    ) -> (u64, Option<RunReport>) {
        let mut ran = 0;
        let mut failed = None;
        self.each_run(strategy, schedules, seed, |_, run| {
            ran += 1;
            seen(&run);
            if run.outcome == "ok" {
                return true;
            }
            failed = Some(run);
            false
        });
        (ran, failed)
    }

    /// Runs up to `schedules` schedules under `strategy` from `seed` (those of this process's
    /// shard), each given to `each` with its index until it returns false. True when DFS ran
    /// every schedule within its bound.
    fn each_run(
        &self,
        strategy: Strategy,
        schedules: u64,
        seed: u64,
        mut each: impl FnMut(u64, RunReport) -> bool,
    ) -> bool {
        assert!(
            self.shard == Shard::WHOLE || strategy == Strategy::Random,
            "only random schedules can be split into shards"
        );
        if let Strategy::Dfs(bound) = strategy {
            let mut dfs = Dfs::new(bound);
            for index in 0..schedules {
                if !dfs.next_run() {
                    return true;
                }
                if !each(
                    index,
                    self.run_untraced(&mut dfs)
                        .expect("generated schedules always fit"),
                ) {
                    return false;
                }
            }
            return !dfs.next_run();
        }
        let profiler_threads = self.profiler_threads();
        // Schedule `i`, its PCT change points spread over `pct_steps` choice points.
        let one = |i: u64, pct_steps: usize| {
            let run_seed = seed.wrapping_add(i);
            let result = match strategy {
                Strategy::Pct(depth) => {
                    let mut rng = Rng::new(run_seed);
                    self.run_untraced(&mut Pct::new(
                        &mut rng,
                        self.scenario.threads.len(),
                        depth,
                        pct_steps,
                    ))
                }
                _ => self.run_untraced(&mut Biased::new(Rng::new(run_seed), profiler_threads.clone())),
            };
            result.expect("generated schedules always fit")
        };
        let jobs = if self.isolation.is_some() { 1 } else { self.jobs };
        // PCT learns how many choice points a run has: each run uses the most any run before
        // it had (at least 64).
        let mut pct_steps = 64;
        let mut next = 0;
        let mine = self.shard.count_of(schedules);
        while next < mine {
            let batch = (mine - next).min(if jobs == 1 { 1 } else { 8 * jobs as u64 });
            let runs =
                crate::parallel::in_order(jobs, batch, |k| one(self.shard.index_of(next + k), pct_steps));
            for run in runs {
                let index = self.shard.index_of(next);
                next += 1;
                let learned = pct_steps.max(run.choice_points as usize);
                if !each(index, run) {
                    return false;
                }
                if learned != pct_steps && matches!(strategy, Strategy::Pct(_)) {
                    // The rest of the batch ran with fewer: run them again.
                    pct_steps = learned;
                    break;
                }
            }
        }
        false
    }
}
