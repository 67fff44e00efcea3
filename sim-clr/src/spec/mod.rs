//! What a scenario file says about its process's moving parts, as data: thread programs
//! ([`program`]), the profiler's handlers, the file's locks, events and limits, its default
//! exploration and the built-in samplers' settings. The scenario parser fills it; the process
//! runs it.

pub mod program;

use corprof::os::SignalFlags;
use program::Instr;
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
    /// Ids each thread takes over from a thread that ended before it starts (by thread index).
    pub reuses: Vec<Reuses>,
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
    /// The hosted library's exports the programs call (`call_export`), by
    /// [`program::Op::CallExport`] index.
    pub exports: Vec<program::ExportCall>,
}

/// The ids a spawned thread takes over from threads that ended before it (`reuses_thread_id`,
/// `reuses_os_id`): it starts only once they have ended, as a freed `Thread` object's address
/// and a dead thread's id are free for the next thread only then.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reuses {
    /// The thread whose `ThreadID` (its freed `Thread` object's address) it gets.
    pub thread_id: Option<usize>,
    /// The thread whose OS thread id it gets.
    pub os_id: Option<usize>,
}

impl Reuses {
    /// The threads that must have ended before this one starts.
    pub fn after(self) -> std::iter::Chain<std::option::IntoIter<usize>, std::option::IntoIter<usize>> {
        self.thread_id.into_iter().chain(self.os_id)
    }
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
    /// The windows ([`crate::coverage`]) some run must reach, or the exploration ends
    /// `unreached`.
    pub reach: Vec<String>,
}

impl Default for ExploreSpec {
    fn default() -> ExploreSpec {
        ExploreSpec {
            strategy: Strategy::Pct(3),
            schedules: 1000,
            seed: 1,
            expect: None,
            reach: Vec::new(),
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
    /// Hosted code made a call that would block outside the simulation (a `read` of an empty
    /// pipe, an `epoll_wait`, a futex wait): no simulated thread could end it.
    UnredirectedBlock,
    /// Hosted code started an OS thread of its own (`clone`), which would run outside the
    /// simulation.
    EscapedThread,
    /// Profiler code still held COM references the runtime handed out (a thread enumerator,
    /// a metadata object) when the process exited (the run goes on).
    LeakedReference,
}

impl Ending {
    /// Every ending.
    pub const ALL: [Ending; 20] = [
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
        Ending::UnredirectedBlock,
        Ending::EscapedThread,
        Ending::LeakedReference,
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
            Ending::UnredirectedBlock => "unredirected_block",
            Ending::EscapedThread => "escaped_thread",
            Ending::LeakedReference => "leaked_reference",
        }
    }

    /// True when `name` is an outcome a run can have: `ok`, an ending, or a runtime fault.
    pub fn is_outcome(name: &str) -> bool {
        name == "ok"
            || [crate::coverage::NO_SAMPLE, crate::coverage::UNREACHED].contains(&name)
            || Ending::ALL.iter().any(|e| e.as_str() == name)
            || crate::trace::FaultKind::ALL.iter().any(|k| k.as_str() == name)
    }
}

/// Which strategy an exploration uses (`Process::explore`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Uniformly random choices; run `i` uses seed `seed + i`.
    Random,
    /// PCT with this bug depth.
    Pct(u32),
    /// Exhaustive DFS with at most this many preemptions per run.
    Dfs(u32),
    /// Random choices steered towards the windows earlier runs missed
    /// ([`crate::coverage`]); run `i` uses seed `seed + i`, runs one after another.
    Cover,
}

impl Strategy {
    /// The strategy's name with its bound (`random`, `pct:3`, `dfs:2`).
    pub fn describe(self) -> String {
        match self {
            Strategy::Random => "random".into(),
            Strategy::Pct(d) => format!("pct:{d}"),
            Strategy::Dfs(p) => format!("dfs:{p}"),
            Strategy::Cover => "cover".into(),
        }
    }
}
