//! A sampling profiler's sampler, written against `corprof` only: the code a production
//! profiler would ship, obeying every rule of asynchronous stack walking.
//!
//! **Threads.** [`Sampler::run`] is the sampler thread's code: a thread the runtime never
//! sees (never managed), which calls `InitializeCurrentThread` before it stops anyone (R39).
//! [`Sampler::watchdog`] is the watchdog thread's code ([`watchdog`]). The sampler also is the
//! profiler's [`ProfilerCallback`]: `ThreadCreated`, `ThreadAssignedToOSThread` and
//! `ThreadDestroyed` feed its [`Registry`]. On Unix, [`Sampler::on_signal`] is the profiling
//! signal's handler.
//!
//! **Which threads.** Managed threads the registry knows (seeded from `EnumThreads` and
//! `GetThreadInfo` at start, for threads that existed before the profiler), bound to an OS
//! thread. Never the sampler itself, nor the watchdog: they are not managed.
//!
//! **One sample**, under the thread's per-thread lock, taken before the thread is stopped and
//! re-checked for `ThreadDestroyed` once held:
//! - [`Method::Suspend`] (Windows): `SuspendThread`; `GetThreadContext` (on failure: resume
//!   once, skip); the context's stack pointer checked against the stack bounds; the hybrid
//!   walk ([`crate::hybrid`]); `ResumeThread`. While the target is stopped nothing allocates
//!   and no profiler lock is taken: every buffer is preallocated.
//! - [`Method::SuspendRuntime`]: every per-thread lock is taken first, then `SuspendRuntime`,
//!   an unseeded `DoStackSnapshot` of each thread (managed frames: a thread running native
//!   code is not stopped by a runtime suspension, so its native frames are not read), then
//!   `ResumeRuntime`. The only cross-thread walk Unix allows (R43).
//! - [`Method::Signal`] (Unix): the target is sent the profiling signal; its handler copies
//!   its registers and the top of its stack into a preallocated slot (no lock, no
//!   allocation); the sampler unwinds natively from the copy. JIT code has no
//!   unwind info on Unix, so such a sample ends at the first managed frame, marked partial.
//!
//! **Watchdog, canary, limits.** A suspension longer than 500 ms is ended by the watchdog, the
//! sample discarded and counted, with budgets. With [`Config::canary`], a `DoStackSnapshot`
//! of another thread probes the runtime before each suspension. A stack deeper than
//! [`Config::max_frames`] is cut and flagged [`Sample::truncated`]; a walk the runtime
//! aborted because the buffer was full counts the same way. When the application sets its
//! crash event, the sampler stops cleanly.
//!
//! The sampler has no switch that breaks a rule: test harnesses build broken variants by
//! composition, wrapping the OS layer, the runtime or the callbacks it is given.

mod registry;
mod signal;
pub mod watchdog;

pub use registry::{Registry, Tracked};
pub use watchdog::WatchdogConfig;

use crate::hybrid::{resolve_with, HybridFrame, HybridOutcome, HybridWalker, Stopped};
use crate::images::{ImageError, Images};
use crate::unwind::{StackBounds, Unwinder};
use corprof::modules::Modules;
use corprof::os::{EventId, OsError, OsThread, SignalFlags, Sync, ThreadControl};
use corprof::{Context, HResult, ProfilerCallback, ProfilerInfo, ThreadId};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use watchdog::Watch;

/// Everything the sampler needs from the operating system.
pub trait Os: ThreadControl + Sync + Modules {}

impl<T: ThreadControl + Sync + Modules> Os for T {}

/// How the sampler stops a thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// `SuspendThread` and `GetThreadContext`, then the hybrid walk (Windows).
    Suspend,
    /// `SuspendRuntime`, then `DoStackSnapshot` of each thread.
    SuspendRuntime,
    /// The profiling signal; its handler copies registers and stack (Unix).
    Signal,
}

/// How the sampler runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// How threads are stopped.
    pub method: Method,
    /// The pause between rounds.
    pub period: Duration,
    /// How many rounds (`None`: until [`Sampler::stop`]).
    pub rounds: Option<u32>,
    /// The most frames (and markers) one sample holds.
    pub max_frames: usize,
    /// The watchdog's settings (`None`: no watchdog; [`Sampler::watchdog`] returns at once).
    pub watchdog: Option<WatchdogConfig>,
    /// Probe the runtime with a `DoStackSnapshot` of another thread before each suspension.
    pub canary: bool,
    /// The application's crash event: once set, the sampler stops.
    pub crash_event: Option<String>,
    /// How many stack words the signal handler copies.
    pub stack_copy_words: usize,
    /// How long the sampler waits for the signal handler.
    pub signal_timeout: Duration,
    /// The `sa_flags` to install [`Sampler::on_signal`] with: `SA_RESTART`, so a system call
    /// the signal interrupts is restarted instead of failing with `EINTR` in the
    /// application; `SA_ONSTACK`, so the handler runs on the thread's alternate signal stack
    /// when its own stack pointer is bad; `SA_SIGINFO` for the interrupted context.
    pub signal_flags: SignalFlags,
}

impl Config {
    /// The reference sampler with `method`: 10 ms between rounds, 256 frames, the watchdog,
    /// no canary, 4 KiB stack copies, a 2 s signal timeout, a handler installed with
    /// `SA_SIGINFO | SA_RESTART | SA_ONSTACK`.
    pub fn new(method: Method) -> Config {
        Config {
            method,
            period: Duration::from_millis(10),
            rounds: None,
            max_frames: 256,
            watchdog: Some(WatchdogConfig::default()),
            canary: false,
            crash_event: None,
            stack_copy_words: 512,
            signal_timeout: Duration::from_secs(2),
            signal_flags: SignalFlags::SIGINFO | SignalFlags::RESTART | SignalFlags::ONSTACK,
        }
    }
}

/// One sample, as the sink receives it.
#[derive(Clone, Copy, Debug)]
pub struct Sample<'a> {
    /// The thread.
    pub thread: ThreadId,
    /// Its OS thread.
    pub os_thread: OsThread,
    /// Its frames, leaf first, with markers where frames are missing.
    pub frames: &'a [HybridFrame],
    /// The stack was deeper than the buffer: it is cut after the last frame.
    pub truncated: bool,
    /// When it was taken.
    pub at: Duration,
}

/// Why the sampler took no sample of a thread it tracks, in one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// No OS thread is bound to it yet (`ThreadAssignedToOSThread` has not named one).
    Unbound,
    /// `ThreadDestroyed` has marked it, or the suspended runtime no longer lists it.
    Destroyed,
    /// The watchdog's budgets exclude it for now.
    OverBudget,
    /// `SuspendThread` or the signal could not reach it (it is exiting).
    Unreachable,
    /// `SuspendThread` failed for a thread that still exists (the OS refused, as the
    /// runtime's own walks allow for): nothing was stopped.
    SuspendFailed,
    /// No usable context: `GetThreadContext` failed, or the stack pointer lay outside its
    /// stack.
    BadContext,
    /// The canary walk of another thread failed.
    Canary,
    /// The signal's handler did not answer within [`Config::signal_timeout`].
    SignalUnanswered,
    /// The watchdog ended the suspension: the thread ran on during the walk, and the sample
    /// is discarded.
    Rescued,
    /// `SuspendRuntime` failed with this `HRESULT`: the whole round is skipped.
    RuntimeNotSuspended(HResult),
}

/// Where samples go.
pub trait Sink {
    /// A round begins, before the sampler reads its list of threads.
    fn round_started(&mut self) {}

    /// Called while `thread` is stopped, its registers read ([`Method::Suspend`]) or its walk
    /// done ([`Method::SuspendRuntime`]): it must not allocate or take a lock. Production sinks
    /// leave it empty; a test harness takes its ground truth here.
    fn stopped(&mut self, _thread: ThreadId) {}

    /// One sample (after the target was resumed, except under [`Method::SuspendRuntime`],
    /// where samples arrive during the suspension: do not allocate or lock there either).
    fn sample(&mut self, sample: &Sample<'_>);

    /// No sample of `thread` this round, for reason `why` (at most once per thread and round;
    /// under [`Method::SuspendRuntime`] during the suspension).
    fn skipped(&mut self, _thread: ThreadId, _why: Skip) {}

    /// The round has visited every thread it listed. A round cut short (the crash event, or
    /// [`Sampler::stop`]) does not end.
    fn round_ended(&mut self) {}
}

/// What the sampler did, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Rounds run.
    pub rounds: u64,
    /// Samples delivered.
    pub samples: u64,
    /// Samples cut at the frame limit.
    pub truncated: u64,
    /// Threads skipped because they had no OS thread yet.
    pub unbound: u64,
    /// Threads skipped because `ThreadDestroyed` had marked them.
    pub destroyed: u64,
    /// Threads skipped by the watchdog's budgets.
    pub over_budget: u64,
    /// `SuspendThread` or signal failures (thread exited or exiting).
    pub stop_failures: u64,
    /// `GetThreadContext` failures, and contexts whose stack pointer lay outside the stack.
    pub bad_contexts: u64,
    /// Samples the watchdog rescued (and discarded).
    pub rescued: u64,
    /// Canary probes that failed.
    pub canary_failures: u64,
    /// Signals whose handler did not answer in time.
    pub signal_timeouts: u64,
    /// Rounds where `SuspendRuntime` failed.
    pub suspend_runtime_failures: u64,
}

impl Stats {
    /// Counts one skipped sample under its reason.
    fn count(&mut self, why: Skip) {
        let counter = match why {
            Skip::Unbound => &mut self.unbound,
            Skip::Destroyed => &mut self.destroyed,
            Skip::OverBudget => &mut self.over_budget,
            Skip::Unreachable | Skip::SuspendFailed => &mut self.stop_failures,
            Skip::BadContext => &mut self.bad_contexts,
            Skip::Canary => &mut self.canary_failures,
            Skip::SignalUnanswered => &mut self.signal_timeouts,
            // Counted once per round, and by the watchdog.
            Skip::RuntimeNotSuspended(_) | Skip::Rescued => return,
        };
        *counter += 1;
    }
}

/// Why the sampler could not start.
#[derive(Debug)]
pub enum SamplerError {
    /// The module list's unwind data could not be used.
    Images(ImageError),
}

impl std::fmt::Display for SamplerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SamplerError::Images(e) => write!(f, "the sampler cannot read the module list: {e}"),
        }
    }
}

impl std::error::Error for SamplerError {}

/// The sampler: its configuration, its registry and what its threads share.
pub struct Sampler<O> {
    config: Config,
    os: O,
    registry: Registry,
    watch: Watch,
    stop: AtomicBool,
    slot: signal::Slot,
    signal_done: OnceLock<EventId>,
    /// Suspensions the watchdog ended (it counts them; the sampler reports them).
    rescued: AtomicU64,
}

/// The per-round state of the sampler thread: preallocated buffers and what it found.
struct Round<'u> {
    info: &'u dyn ProfilerInfo,
    unwinder: &'u Unwinder<'u>,
    walker: HybridWalker,
    me: OsThread,
    stats: Stats,
    targets: Vec<Arc<Tracked>>,
}

impl<O: Os> Sampler<O> {
    /// A sampler over `os`.
    pub fn new(config: Config, os: O) -> Sampler<O> {
        Sampler {
            slot: signal::Slot::new(config.stack_copy_words),
            config,
            os,
            registry: Registry::default(),
            watch: Watch::default(),
            stop: AtomicBool::new(false),
            signal_done: OnceLock::new(),
            rescued: AtomicU64::new(0),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The OS layer it runs on (a test double's record of the calls, for instance).
    pub fn os(&self) -> &O {
        &self.os
    }

    /// The threads it tracks.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Asks the sampler and the watchdog to stop after their current step.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// How many threads the sampler tracks, read under its registry lock: what a profiler's
    /// exporter reports beside the samples. A profiler thread calling it holds that lock for
    /// the read, so the sampler may stop a thread of its own profiler that holds it (a managed
    /// exporter thread is sampled like any managed thread): it never takes the lock while a
    /// target is stopped.
    pub fn tracked(&self) -> usize {
        self.registry.count(&self.os)
    }

    fn done_event(&self) -> EventId {
        once(&self.signal_done, || {
            self.os.event_create("simclr-sampler-signal-done")
        })
    }

    /// The sampler thread's code: rounds until [`Config::rounds`] are done, [`Sampler::stop`]
    /// is called or the crash event is set; then the watchdog is told to stop too.
    pub fn run(&self, info: &dyn ProfilerInfo, sink: &mut dyn Sink) -> Result<Stats, SamplerError> {
        let result = self.rounds(info, sink);
        self.stop();
        result
    }

    fn rounds(&self, info: &dyn ProfilerInfo, sink: &mut dyn Sink) -> Result<Stats, SamplerError> {
        info.initialize_current_thread();
        let os = &self.os;
        let images = Images::load(os).map_err(SamplerError::Images)?;
        let unwinder = images.unwinder().map_err(SamplerError::Images)?;
        self.seed_registry(info);
        if self.config.method == Method::Signal {
            self.done_event();
        }
        let crash = self
            .config
            .crash_event
            .as_deref()
            .map(|name| os.event_create(name));
        let mut round = Round {
            info,
            unwinder: &unwinder,
            walker: HybridWalker::with_capacity(self.config.max_frames),
            me: os.current_thread(),
            stats: Stats::default(),
            targets: Vec::with_capacity(64),
        };
        let crashed = || crash.is_some_and(|e| os.event_wait(e, Duration::ZERO));
        while self
            .config
            .rounds
            .is_none_or(|n| round.stats.rounds < u64::from(n))
            && !self.stopping()
        {
            if crashed() {
                break;
            }
            sink.round_started();
            self.registry.copy_into(os, &mut round.targets);
            round.stats.rounds += 1;
            let ended = match self.config.method {
                Method::SuspendRuntime => {
                    self.runtime_round(&mut round, sink);
                    true
                }
                Method::Suspend | Method::Signal => (0..round.targets.len()).all(|i| {
                    let go_on = !crashed() && !self.stopping();
                    if go_on {
                        let target = round.targets[i].clone();
                        self.sample_one(&mut round, &target, sink);
                    }
                    go_on
                }),
            };
            if ended {
                sink.round_ended();
            }
            os.sleep(self.config.period);
        }
        round.stats.rescued = self.rescued.load(Ordering::Acquire);
        Ok(round.stats)
    }

    /// Tracks the managed threads that existed before the profiler did. Their `ThreadID`s are
    /// listed and dereferenced (`GetThreadInfo`) under `SuspendRuntime`, where no `Thread` is
    /// freed. A thread listed while its `ThreadDestroyed` runs is not added back once that
    /// has removed it (the registry remembers destroyed threads until seeding ends).
    fn seed_registry(&self, info: &dyn ProfilerInfo) {
        if info.suspend_runtime() == HResult::S_OK {
            for id in info.enum_threads().unwrap_or_default() {
                let bound = info.get_thread_info(id).ok().filter(|&t| t != 0).map(OsThread);
                self.registry.add(&self.os, id, bound, false);
            }
            info.resume_runtime();
        }
        self.registry.seeded(&self.os);
    }

    /// The OS thread of `target` if it may be sampled now: bound, within budget, and not a
    /// profiler thread (`Err(None)`: not sampled, and no sample is missing).
    fn eligible(&self, round: &Round<'_>, target: &Tracked) -> Result<OsThread, Option<Skip>> {
        let os_thread = target.os_thread().ok_or(Some(Skip::Unbound))?;
        if os_thread == round.me || os_thread.0 == self.watch.thread.load(Ordering::Acquire) {
            return Err(None);
        }
        if let Some(config) = &self.config.watchdog {
            if !self.watch.allows(config, target, self.os.now()) {
                return Err(Some(Skip::OverBudget));
            }
        }
        Ok(os_thread)
    }

    /// Takes `target`'s per-thread lock; `Err` (lock released) if it was destroyed meanwhile.
    fn lock_alive(&self, target: &Tracked) -> Result<(), Skip> {
        self.os.mutex_lock(target.lock());
        if target.destroyed() {
            self.os.mutex_unlock(target.lock());
            return Err(Skip::Destroyed);
        }
        Ok(())
    }

    /// The OS thread of `target`, with its per-thread lock now held, if it is to be sampled
    /// ([`Sampler::eligible`], then [`Sampler::lock_alive`]).
    fn claim(&self, round: &Round<'_>, target: &Tracked) -> Result<OsThread, Option<Skip>> {
        let os_thread = self.eligible(round, target)?;
        self.lock_alive(target).map_err(Some)?;
        Ok(os_thread)
    }

    /// Tells the sink why `thread` has no sample this round, and counts it.
    fn skip(round: &mut Round<'_>, sink: &mut dyn Sink, thread: ThreadId, why: Skip) {
        round.stats.count(why);
        sink.skipped(thread, why);
    }

    /// One thread, by suspension or signal.
    fn sample_one(&self, round: &mut Round<'_>, target: &Tracked, sink: &mut dyn Sink) {
        let os_thread = match self.claim(round, target) {
            Ok(os_thread) => os_thread,
            Err(why) => {
                if let Some(why) = why {
                    Self::skip(round, sink, target.id, why);
                }
                return;
            }
        };
        let taken = if self.config.canary && !self.canary(round, target) {
            Err(Skip::Canary)
        } else {
            match self.config.method {
                Method::Signal => self.by_signal(round, target, os_thread),
                _ => self.by_suspension(round, target, os_thread, sink),
            }
        };
        match taken {
            Ok(outcome) => self.deliver(round, target.id, os_thread, outcome, sink),
            Err(why) => Self::skip(round, sink, target.id, why),
        }
        self.os.mutex_unlock(target.lock());
    }

    fn deliver(
        &self,
        round: &mut Round<'_>,
        thread: ThreadId,
        os_thread: OsThread,
        outcome: HybridOutcome,
        sink: &mut dyn Sink,
    ) {
        let truncated = outcome == HybridOutcome::Full;
        round.stats.samples += 1;
        round.stats.truncated += u64::from(truncated);
        sink.sample(&Sample {
            thread,
            os_thread,
            frames: round.walker.frames(),
            truncated,
            at: self.os.now(),
        });
    }

    /// The canary: an unseeded `DoStackSnapshot` of another tracked thread must succeed. The
    /// canary is walked under its own per-thread lock, re-checked, like any target.
    fn canary(&self, round: &mut Round<'_>, target: &Tracked) -> bool {
        let Some(canary) = round
            .targets
            .iter()
            .find(|t| t.id != target.id && t.os_thread().is_some() && !t.destroyed())
            .cloned()
        else {
            return true;
        };
        if self.lock_alive(&canary).is_err() {
            return true;
        }
        let mut ok = |_: &corprof::SnapshotFrame<'_>| HResult::S_OK;
        let hr = round.info.do_stack_snapshot(canary.id, Some(&mut ok), 0, None, 0);
        self.os.mutex_unlock(canary.lock());
        hr == HResult::S_OK
    }

    /// Windows: suspend, context, walk, resume.
    fn by_suspension(
        &self,
        round: &mut Round<'_>,
        target: &Tracked,
        os_thread: OsThread,
        sink: &mut dyn Sink,
    ) -> Result<HybridOutcome, Skip> {
        let os = &self.os;
        self.watch.begin(os_thread, os.now());
        if let Err(e) = os.suspend_thread(os_thread) {
            self.watch.end(self.config.watchdog.as_ref(), target, os.now());
            return Err(match e {
                OsError::NoSuchThread | OsError::Terminated => Skip::Unreachable,
                _ => Skip::SuspendFailed,
            });
        }
        let bounds = os.stack_bounds(os_thread);
        let Ok(context) = os.get_thread_context(os_thread) else {
            self.release(target, os_thread);
            return Err(Skip::BadContext);
        };
        sink.stopped(target.id);
        let bounds = match bounds {
            Ok((limit, base)) if (limit..base).contains(&context.rsp) => StackBounds { limit, base },
            _ => {
                self.release(target, os_thread);
                return Err(Skip::BadContext);
            }
        };
        let outcome = self.walk_suspended(round, target.id, os_thread, &context, bounds);
        // A sample the watchdog rescued is discarded: the thread ran on during the walk.
        if self.release(target, os_thread) {
            Ok(outcome)
        } else {
            Err(Skip::Rescued)
        }
    }

    /// Ends the suspension of `target`: resumes it, unless the watchdog already has (then
    /// false). Either way it was resumed exactly once.
    fn release(&self, target: &Tracked, os_thread: OsThread) -> bool {
        let sampler_resumes = self
            .watch
            .end(self.config.watchdog.as_ref(), target, self.os.now());
        if sampler_resumes {
            let _ = self.os.resume_thread(os_thread);
        }
        sampler_resumes
    }

    /// The hybrid walk of a suspended thread. Once the watchdog has rescued the target, reads
    /// and lookups stop: the thread runs again.
    fn walk_suspended(
        &self,
        round: &mut Round<'_>,
        thread: ThreadId,
        os_thread: OsThread,
        context: &Context,
        bounds: StackBounds,
    ) -> HybridOutcome {
        let os = &self.os;
        let watch = &self.watch;
        let stopped = Stopped {
            thread,
            context,
            bounds,
        };
        let mut read = |a: u64| {
            if watch.rescued() {
                return None;
            }
            os.read_stack(os_thread, a).ok()
        };
        let info = round.info;
        let mut lookup = resolve_with(info);
        let mut resolve = |ip: u64| {
            if watch.rescued() {
                return None;
            }
            lookup(ip)
        };
        round
            .walker
            .walk(info, round.unwinder, &stopped, &mut read, &mut resolve)
    }

    /// Unix: signal the target, wait for its handler's copy, unwind from it.
    fn by_signal(
        &self,
        round: &mut Round<'_>,
        target: &Tracked,
        os_thread: OsThread,
    ) -> Result<HybridOutcome, Skip> {
        let os = &self.os;
        let done = self.done_event();
        if !self.slot.arm(os_thread) {
            return Err(Skip::SignalUnanswered);
        }
        os.event_reset(done);
        if os.send_signal(os_thread).is_err() {
            self.slot.disarm();
            return Err(Skip::Unreachable);
        }
        let capture = loop {
            let answered = os.event_wait(done, self.config.signal_timeout);
            if let Some(capture) = self.slot.collect() {
                break capture;
            }
            if !answered && self.slot.disarm() {
                // Masked, replaced, or the thread exited: no sample.
                return Err(Skip::SignalUnanswered);
            }
        };
        let bounds = os
            .stack_bounds(os_thread)
            .ok()
            .map(|(limit, base)| StackBounds { limit, base });
        let outcome = match bounds.filter(|b| (b.limit..b.base).contains(&capture.context.rsp)) {
            Some(bounds) => {
                let stopped = Stopped {
                    thread: target.id,
                    context: &capture.context,
                    bounds,
                };
                let mut read = |a| capture.read(a);
                let mut resolve = resolve_with(round.info);
                Ok(round
                    .walker
                    .walk_native(round.unwinder, &stopped, &mut read, &mut resolve))
            }
            None => Err(Skip::BadContext),
        };
        drop(capture);
        self.slot.release();
        outcome
    }

    /// Every tracked thread under one `SuspendRuntime`, with every per-thread lock taken first.
    fn runtime_round(&self, round: &mut Round<'_>, sink: &mut dyn Sink) {
        let os = &self.os;
        let mut locked = Vec::with_capacity(round.targets.len());
        for i in 0..round.targets.len() {
            let target = round.targets[i].clone();
            match self.claim(round, &target) {
                Ok(os_thread) => locked.push((target, os_thread)),
                Err(Some(why)) => Self::skip(round, sink, target.id, why),
                Err(None) => {}
            }
        }
        let hr = round.info.suspend_runtime();
        if hr == HResult::S_OK {
            // Only threads the runtime lists now: no `Thread` is freed during the suspension.
            let live = round.info.enum_threads().unwrap_or_default();
            for (target, os_thread) in &locked {
                if live.contains(&target.id) {
                    let outcome = round.walker.walk_managed(round.info, target.id);
                    sink.stopped(target.id);
                    self.deliver(round, target.id, *os_thread, outcome, sink);
                } else {
                    Self::skip(round, sink, target.id, Skip::Destroyed);
                }
            }
            round.info.resume_runtime();
        } else {
            round.stats.suspend_runtime_failures += 1;
            for (target, _) in &locked {
                Self::skip(round, sink, target.id, Skip::RuntimeNotSuspended(hr));
            }
        }
        for (target, _) in locked {
            os.mutex_unlock(target.lock());
        }
    }

    /// The watchdog thread's code: ticks until the sampler stops; returns at once without a
    /// watchdog configured.
    pub fn watchdog(&self) {
        let Some(config) = self.config.watchdog else {
            return;
        };
        let os = &self.os;
        self.watch.thread.store(os.current_thread().0, Ordering::Release);
        while !self.stopping() {
            os.sleep(config.tick);
            if let Some(target) = self.watch.check(&config, os.now()) {
                let _ = os.resume_thread(target);
                self.rescued.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    /// The profiling signal's handler, on the interrupted thread with its `context`: if the
    /// sampler armed the slot for this thread, copies the registers and the top of the stack.
    pub fn on_signal(&self, context: &Context) {
        let os = &self.os;
        let me = os.current_thread();
        let Some(mut capture) = self.slot.claim(me) else {
            return;
        };
        capture.context = context.clone();
        capture.start = context.rsp;
        capture.len = 0;
        if let Ok((limit, base)) = os.stack_bounds(me) {
            if (limit..base).contains(&context.rsp) && context.rsp.is_multiple_of(8) {
                let len = (((base - context.rsp) / 8) as usize).min(capture.words.len());
                if os
                    .read_stack_words(me, context.rsp, &mut capture.words[..len])
                    .is_ok()
                {
                    capture.len = len;
                }
            }
        }
        drop(capture);
        self.slot.fill();
        os.event_set(self.done_event());
    }
}

impl<O: Os> ProfilerCallback for Sampler<O> {
    fn thread_created(&self, thread: ThreadId) -> HResult {
        self.registry.add(&self.os, thread, None, true);
        HResult::S_OK
    }

    fn thread_assigned_to_os_thread(&self, thread: ThreadId, os_thread: u32) -> HResult {
        self.registry
            .add(&self.os, thread, Some(OsThread(os_thread)), true);
        HResult::S_OK
    }

    fn thread_destroyed(&self, thread: ThreadId) -> HResult {
        self.registry.destroy(&self.os, thread);
        HResult::S_OK
    }
}

/// The value of `cell`, made by `make` if it is empty. Unlike `OnceLock::get_or_init`, no
/// lock is held while `make` runs: it may block (an OS call), and a second thread must not
/// wait for it. Two threads may both make a value; the first one stored wins.
fn once<T: Copy>(cell: &OnceLock<T>, make: impl FnOnce() -> T) -> T {
    if let Some(&value) = cell.get() {
        return value;
    }
    let value = make();
    *cell.get_or_init(|| value)
}
