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
pub use crate::fiber;
pub mod fork;
pub mod hazard;
mod locks;
mod os;
pub mod schedule;
pub mod shrink;
pub mod timeline;
pub mod waitfor;

use crate::parallel::Pool;
pub use crate::parallel::Shard;
pub use crate::spec::{
    program, Ending, ExploreSpec, Handlers, Limits, NamedBody, ProcessSpec, Program, SamplerSettings,
    Strategy,
};
pub use fiber::{unobserved, HeapLockAllocator};
pub use os::{install_signal_handler, leave_simulation, SimOs};

use crate::scenario::Scenario;
use corprof::os::SignalFlags;
use corprof::ProfilerCallback;
use schedule::{Biased, Chooser, Cover, Dfs, Pct, Replay, Rng, Schedule, ScheduleError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// The exports of the loaded library, which programs call (`call_export`).
    pub exports: Option<Arc<dyn Exports>>,
}

/// The exports of a hosted profiler library that thread programs call (`call_export`):
/// managed code's P/Invokes into the profiler's own library.
pub trait Exports: Send + Sync {
    /// Whether the library exports `name`.
    fn has(&self, name: &str) -> bool;
    /// Calls export `name` with `args` on the calling simulated thread; the value it
    /// returned (a 64-bit word). Called only for names [`Exports::has`] admits.
    fn call(&self, name: &str, args: &[program::ExportArg]) -> u64;
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
    /// How many runs of each outcome an exploration keeps with their traces.
    trace_first: usize,
    /// The share of an exploration's schedules this process runs ([`Process::shard`]).
    shard: Shard,
    /// Whether runs inject failures into runtime calls ([`Process::inject`]).
    inject: bool,
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
    /// What the run reached: its walks by answer, its stops, the threads sampled and the
    /// windows met ([`crate::coverage`]).
    pub coverage: crate::coverage::RunCoverage,
    /// Every step, in order.
    pub trace: Vec<TraceEntry>,
    /// Every thread's state after every step, when asked for
    /// ([`Process::replay_timeline`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<timeline::Timeline>,
}

/// What a run records besides its outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Recording {
    /// Nothing: exploration.
    Nothing,
    /// The trace of every step.
    Trace,
    /// The trace and every thread's state after every step.
    Timeline,
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
    /// The command line that replays it, when the caller knows how it is run (the CLI and the
    /// C ABI fill it in: [`ExploreReport::name_replays`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<String>,
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
    /// The windows the file's `[explore] reach` names: some run must reach each.
    pub reach: Vec<String>,
    /// What the runs reached: samples, threads sampled, windows ([`crate::coverage`]).
    pub coverage: crate::coverage::Coverage,
    /// What the exploration as a whole failed to reach, as outcomes (`no_sample`,
    /// `unreached`) with their messages ([`crate::coverage::Coverage::unmet`]). Empty in a
    /// shard's report, which sees some of the runs only (`simclr merge` works it out).
    pub unmet: BTreeMap<String, String>,
    /// The first schedule that did not end `ok`, if any.
    pub first_failure: Option<FirstFailure>,
    /// The first run of each outcome other than `ok`, by outcome.
    pub failures: BTreeMap<String, FirstFailure>,
    /// The first runs of each outcome with their traces, at most [`Process::trace_first`] of
    /// each (none unless asked for; a run whose replay fails, as a hosted library that is
    /// not deterministic may, is left out).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub traces: BTreeMap<String, Vec<Traced>>,
}

impl ExploreReport {
    /// Fills in the replay command of the first failure and of each outcome's first run:
    /// `command(schedule)`.
    pub fn name_replays(&mut self, command: impl Fn(&str) -> String) {
        for failure in self.first_failure.iter_mut().chain(self.failures.values_mut()) {
            failure.replay = Some(command(&failure.schedule));
        }
    }

    /// The outcomes found: each run's, and what the exploration as a whole failed to reach
    /// ([`ExploreReport::unmet`]), in order.
    pub fn found(&self) -> Vec<&str> {
        let mut found: Vec<&str> = (self.outcomes.keys())
            .chain(self.unmet.keys())
            .map(String::as_str)
            .collect();
        found.sort_unstable();
        found
    }
}

/// One run of an exploration kept with its trace ([`Process::trace_first`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Traced {
    /// Which schedule of the exploration it was (0-based).
    pub index: u64,
    /// The schedule string (`replay --schedule` runs it again).
    pub schedule: String,
    /// Every step of the run.
    pub trace: Vec<TraceEntry>,
}

impl Process {
    /// The scenario's process, with no Rust code attached.
    pub fn new(scenario: Scenario) -> Process {
        fiber::install_atomics();
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
            trace_first: 0,
            shard: Shard::WHOLE,
            inject: false,
        }
    }

    /// Makes "this `ICorProfilerInfo` call fails" a scheduling choice: in every run, each call
    /// of profiler code that no `[[fail]]` rule fails asks the chooser whether it fails
    /// (`E_FAIL`; [`Chooser::fail`]): random and PCT schedules fail one such call in
    /// [`schedule::FAIL_ODDS`], DFS tries both answers at every call (a failure spends a
    /// preemption), and the choices are in the schedule, so a replay (with injection on too)
    /// fails the same calls.
    pub fn inject(&mut self, on: bool) -> &mut Process {
        self.inject = on;
        self
    }

    /// Whether runs inject failures ([`Process::inject`]).
    pub fn injects(&self) -> bool {
        self.inject
    }

    /// Lets explorations under random and PCT schedules run up to `n` schedules at once, each
    /// on an OS thread of its own, the calling one included (DFS, whose every schedule
    /// follows from the one before, and isolated runs go one at a time). Reports are the same
    /// whatever `n` is: runs are seen in schedule order, and a PCT run that started before an
    /// earlier run taught PCT a longer run is run again. The attached code must keep no
    /// state across runs that its outcome depends on (a [`Loader`] makes each run's afresh).
    /// To explore several processes side by side on one set of threads, see
    /// [`Process::explore_in`].
    pub fn jobs(&mut self, n: usize) -> &mut Process {
        self.jobs = n.max(1);
        self
    }

    /// Keeps the first `n` runs of each outcome of every exploration with their traces
    /// ([`ExploreReport::traces`]), `ok` runs included: why a race was or was not hit shows in
    /// them. Runs are explored untraced and the kept ones replayed once the exploration ends.
    pub fn trace_first(&mut self, n: usize) -> &mut Process {
        self.trace_first = n;
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
        self.go(Recording::Trace, chooser)
    }

    /// Runs one schedule without recording a trace (what [`Process::explore`] does; replay a
    /// schedule for its trace).
    pub fn run_untraced(&self, chooser: &mut dyn Chooser) -> Result<RunReport, ScheduleError> {
        self.go(Recording::Nothing, chooser)
    }

    fn go(&self, recording: Recording, chooser: &mut dyn Chooser) -> Result<RunReport, ScheduleError> {
        let run = |chooser: &mut dyn Chooser| engine::Run::new(self, recording).go(chooser);
        match &self.isolation {
            Some(isolation) => isolation.run(&run, chooser),
            None => run(chooser),
        }
    }

    /// Replays `schedule` exactly: an error if a choice names a thread that cannot run then,
    /// or the schedule ends before the run does.
    pub fn replay(&self, schedule: &Schedule) -> Result<RunReport, ScheduleError> {
        self.replay_recording(schedule, Recording::Trace)
    }

    /// [`Process::replay`], recording besides the trace every thread's state after every step
    /// ([`RunReport::timeline`]): what `simclr replay --svg` draws.
    pub fn replay_timeline(&self, schedule: &Schedule) -> Result<RunReport, ScheduleError> {
        self.replay_recording(schedule, Recording::Timeline)
    }

    fn replay_recording(
        &self,
        schedule: &Schedule,
        recording: Recording,
    ) -> Result<RunReport, ScheduleError> {
        let threads = self.scenario.threads.len();
        // With failures injected, a 1 may also be a failed call.
        let bound = if self.inject { threads.max(2) } else { threads };
        if let Some(&bad) = schedule.0.iter().find(|&&t| t as usize >= bound) {
            return Err(ScheduleError(format!(
                "thread {bad} does not exist: the scenario has {threads} threads (0 to {})",
                threads.saturating_sub(1)
            )));
        }
        let report = self.go(recording, &mut Replay::new(schedule, true))?;
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
        progress: impl FnMut(u64, u64),
    ) -> ExploreReport {
        Pool::with(self.run_jobs(), |pool| {
            self.explore_in(pool, strategy, schedules, seed, progress)
        })
    }

    /// [`Process::explore`] driven on the calling thread of `pool`, whose threads run batches
    /// of its schedules while they have nothing else to do ([`crate::parallel::tasks`]
    /// explores several processes so), whatever [`Process::jobs`] says. The report is the
    /// same bytes [`Process::explore`] gives.
    pub fn explore_in<'a>(
        &'a self,
        pool: &Pool<'a>,
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
            reach: self.scenario.process.explore.reach.clone(),
            coverage: crate::coverage::Coverage::of(&self.windows()),
            unmet: BTreeMap::new(),
            first_failure: None,
            failures: BTreeMap::new(),
            traces: BTreeMap::new(),
        };
        let mut faults = 0;
        let mut kept: BTreeMap<String, Vec<(u64, String)>> = BTreeMap::new();
        report.exhaustive = self.each_run(pool, strategy, schedules, seed, |index, run| {
            report.schedules_run += 1;
            *report.outcomes.entry(run.outcome.clone()).or_default() += 1;
            report.stops += run.stops;
            for (hazard, n) in &run.hazards {
                *report.hazards.entry(hazard.clone()).or_default() += n;
            }
            report.coverage.add(&run.coverage);
            if self.trace_first > 0 {
                let first = kept.entry(run.outcome.clone()).or_default();
                if first.len() < self.trace_first {
                    first.push((index, run.schedule.clone()));
                }
            }
            if let Some(fault) = run.fault {
                faults += 1;
                let first = FirstFailure {
                    index,
                    schedule: run.schedule,
                    fault,
                    replay: None,
                };
                if report.first_failure.is_none() {
                    report.first_failure = Some(first.clone());
                }
                report.failures.entry(run.outcome).or_insert(first);
            }
            progress(report.schedules_run, faults);
            true
        });
        report.traces = kept
            .into_iter()
            .map(|(outcome, runs)| {
                let traced = runs.into_iter().filter_map(|(index, schedule)| {
                    let run = self.replay(&schedule.parse().ok()?).ok()?;
                    Some(Traced {
                        index,
                        schedule,
                        trace: run.trace,
                    })
                });
                (outcome, traced.collect())
            })
            .collect();
        if self.shard == Shard::WHOLE {
            report.unmet = report.coverage.unmet(&report.reach);
        }
        report
    }

    /// Runs `schedules` schedules under `strategy` from `seed` (as [`Process::explore`] does),
    /// showing each run to `seen` in schedule order with its index.
    pub fn each(&self, strategy: Strategy, schedules: u64, seed: u64, mut seen: impl FnMut(u64, &RunReport)) {
        Pool::with(self.run_jobs(), |pool| {
            self.each_run(pool, strategy, schedules, seed, |index, run| {
                seen(index, &run);
                true
            });
        });
    }

    /// Every window ([`crate::coverage`]) this process's runs can reach.
    pub fn windows(&self) -> Vec<String> {
        crate::coverage::windows(&self.scenario.process.locks)
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
        Pool::with(self.run_jobs(), |pool| {
            self.each_run(pool, strategy, schedules, seed, |_, run| {
                ran += 1;
                seen(&run);
                if run.outcome == "ok" {
                    return true;
                }
                failed = Some(run);
                false
            })
        });
        (ran, failed)
    }

    /// How many threads this process's explorations use: [`Process::jobs`], or one for
    /// isolated runs.
    fn run_jobs(&self) -> usize {
        if self.isolation.is_some() {
            1
        } else {
            self.jobs
        }
    }

    /// Runs up to `schedules` schedules under `strategy` from `seed` (those of this process's
    /// shard), each given to `each` with its index until it returns false, on the calling
    /// thread and on `pool`'s idle threads. True when DFS ran every schedule within its bound.
    fn each_run<'a>(
        &'a self,
        pool: &Pool<'a>,
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
        if strategy == Strategy::Cover {
            // Each run steers by what the runs before it reached: one after another.
            let mut reached: BTreeMap<String, u64> = BTreeMap::new();
            let marked = self.profiler_threads();
            for index in 0..schedules {
                let rng = Rng::new(seed.wrapping_add(index));
                let mut cover = Cover::new(rng, marked.clone(), reached.clone(), index);
                let run = self
                    .run_untraced(&mut cover)
                    .expect("generated schedules always fit");
                for w in &run.coverage.windows {
                    *reached.entry(w.clone()).or_default() += 1;
                }
                if !each(index, run) {
                    return false;
                }
            }
            return false;
        }
        let profiler_threads = self.profiler_threads();
        let threads = self.scenario.threads.len();
        let shard = self.shard;
        // This shard's `k`th schedule, its PCT change points spread over `pct_steps` choice
        // points.
        let one = Arc::new(move |k: u64, pct_steps: usize| {
            let run_seed = seed.wrapping_add(shard.index_of(k));
            let result = match strategy {
                Strategy::Pct(depth) => {
                    let mut rng = Rng::new(run_seed);
                    self.run_untraced(&mut Pct::new(&mut rng, threads, depth, pct_steps))
                }
                _ => self.run_untraced(&mut Biased::new(Rng::new(run_seed), profiler_threads.clone())),
            };
            result.expect("generated schedules always fit")
        });
        // Isolated runs go one at a time, each in its worker process.
        let may_share = self.isolation.is_none() && pool.threads() > 1;
        let mine = self.shard.count_of(schedules);
        // PCT learns how many choice points a run has: each run uses the most any run before
        // it had (at least 64).
        let mut pct_steps = 64;
        let mut next = 0;
        // While a thread of the pool is idle, schedules run in batches shared with it. A batch
        // starts small and doubles while none of its runs teaches PCT a longer run (which
        // makes the rest of the batch run again), up to a size whose end, where one thread may
        // wait for the other's last run, costs little beside it. Otherwise the next schedule
        // runs here, and nothing ever runs again.
        let smallest = 8 * pool.threads() as u64;
        let largest = 128 * pool.threads() as u64;
        let mut size = smallest;
        while next < mine {
            let runs = if may_share && mine - next > 1 && pool.has_idle() {
                let runs = pool.run(&one, next, (mine - next).min(size), pct_steps);
                size = (2 * size).min(largest);
                runs
            } else {
                vec![one(next, pct_steps)]
            };
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
                    size = smallest;
                    break;
                }
            }
        }
        false
    }
}
