//! [`SimOs`]: the `corprof::os` traits inside the simulated process.
//!
//! Profiler code running on a simulated thread (a fiber) gets a `SimOs`; each of its calls is
//! a request to the engine and a scheduling point: a mutex the target holds blocks the caller
//! in the wait-for graph, a sleep advances virtual time, `SuspendThread` stops the target only
//! once `GetThreadContext` returns. Called outside a simulated thread, every call panics with
//! a message saying so: there is no process to act on.

use super::Ending;
use crate::code::images::Images;
use crate::fiber::{create_during_setup, request, Holding, NativeSignalHandler, Reply, Request, ThreadStart};
use corprof::modules::{LoadedModule, Modules};
use corprof::os::{EventId, MutexId, OsError, OsThread, SignalFlags, Sync, ThreadControl};
use corprof::Context;
use std::sync::Arc;
use std::time::Duration;

/// The simulated process's OS layer, for code running on one of its threads.
#[derive(Clone, Copy, Debug, Default)]
pub struct SimOs {
    _private: (),
}

impl SimOs {
    /// The OS layer (every simulated thread's is the same).
    pub fn new() -> SimOs {
        SimOs { _private: () }
    }

    /// Creates a thread that runs `code`, as `pthread_create` or `CreateThread` would: the
    /// first of the scenario's threads declared `start = "profiler"` not created yet, a
    /// native thread that never ran managed code. Threads the profiler creates do not keep
    /// the process alive: when its other threads have ended, it exits with them still
    /// running. Allowed on a simulated thread and while a run is set up (the profiler's
    /// initialization), where the thread starts with the run. When every such thread is
    /// taken the run ends as `undeclared_thread` (during setup: `Err(NoSuchThread)`).
    pub fn create_thread(&self, code: impl FnOnce() + Send + 'static) -> Result<OsThread, OsError> {
        let code = ThreadStart::new(code);
        if let Some(created) = create_during_setup(code.clone()) {
            return created;
        }
        match ask(Request::CreateThread(code)) {
            Reply::Thread(t) => Ok(t),
            other => mismatch(other),
        }
    }

    /// A condition variable of the process, opened by name (named objects are shared): its
    /// id, and how many times it has been notified so far (for [`SimOs::cond_wait`]).
    pub fn cond_open(&self, name: &str) -> (u32, u64) {
        self.cond_open_as(name, name)
    }

    /// [`SimOs::cond_open`] by `key`, named `name` in reports (a hosted library's object is
    /// opened by its address and named by its symbol).
    pub fn cond_open_as(&self, key: &str, name: &str) -> (u32, u64) {
        match ask(Request::CondOpen(key.to_string(), name.to_string())) {
            Reply::Cond(id, generation) => (id, generation),
            other => mismatch(other),
        }
    }

    /// A mutex of the process opened by `key` (named objects are shared), named `name` in
    /// reports.
    pub fn mutex_open_as(&self, key: &str, name: &str) -> MutexId {
        match ask(Request::MutexCreate(key.to_string(), name.to_string())) {
            Reply::Mutex(m) => m,
            other => mismatch(other),
        }
    }

    /// Waits until condition variable `cond` is notified after its `generation`-th
    /// notification (at once if it already was), or until `timeout` passes; true if it was
    /// notified. A caller that releases a mutex to wait reads the generation before
    /// releasing it, so a notification in between is not lost.
    pub fn cond_wait(&self, cond: u32, generation: u64, timeout: Duration) -> bool {
        match ask(Request::CondWait(cond, generation, timeout)) {
            Reply::Flag(notified) => notified,
            other => mismatch(other),
        }
    }

    /// Wakes every thread waiting on condition variable `cond`.
    pub fn cond_notify(&self, cond: u32) {
        ask(Request::CondNotify(cond));
    }

    /// Notes that the calling thread took or released the object whose waiters wait on
    /// condition variable `cond` (a read-write lock, a one-time initialization in progress, a
    /// semaphore): a thread waiting on `cond` then waits for its holders in the wait-for
    /// graph, so a cycle through it is a `deadlock` naming each link, and the timeline shows
    /// it held. Not a scheduling point (the take itself was one).
    pub fn cond_holding(&self, cond: u32, what: Holding) {
        crate::fiber::holding(cond, what);
    }

    /// Waits until the code of `thread` has ended (at once if it has); `NoSuchThread` for a
    /// thread the process does not have.
    pub fn join_thread(&self, thread: OsThread) -> Result<(), OsError> {
        match ask(Request::JoinThread(thread)) {
            Reply::Unit(r) => r,
            other => mismatch(other),
        }
    }
}

fn ask(req: Request) -> Reply {
    request(req).expect("SimOs is used on a simulated thread (a Process thread body or callback)")
}

fn mismatch(reply: Reply) -> ! {
    unreachable!("the engine answers each request with its own reply kind, not {reply:?}")
}

impl ThreadControl for SimOs {
    fn current_thread(&self) -> OsThread {
        match ask(Request::CurrentThread) {
            Reply::Thread(t) => t,
            other => mismatch(other),
        }
    }

    fn threads(&self) -> Vec<OsThread> {
        match ask(Request::Threads) {
            Reply::Threads(t) => t,
            other => mismatch(other),
        }
    }

    fn suspend_thread(&self, thread: OsThread) -> Result<u32, OsError> {
        match ask(Request::Suspend(thread)) {
            Reply::Count(r) => r,
            other => mismatch(other),
        }
    }

    fn resume_thread(&self, thread: OsThread) -> Result<u32, OsError> {
        match ask(Request::Resume(thread)) {
            Reply::Count(r) => r,
            other => mismatch(other),
        }
    }

    fn get_thread_context(&self, thread: OsThread) -> Result<Context, OsError> {
        match ask(Request::GetContext(thread)) {
            Reply::Context(r) => *r,
            other => mismatch(other),
        }
    }

    fn send_signal(&self, thread: OsThread) -> Result<(), OsError> {
        match ask(Request::Signal(thread)) {
            Reply::Unit(r) => r,
            other => mismatch(other),
        }
    }

    fn stack_bounds(&self, thread: OsThread) -> Result<(u64, u64), OsError> {
        match ask(Request::StackBounds(thread)) {
            Reply::Bounds(r) => r,
            other => mismatch(other),
        }
    }

    fn read_stack(&self, thread: OsThread, address: u64) -> Result<u64, OsError> {
        match ask(Request::ReadStack(thread, address)) {
            Reply::Word(r) => r,
            other => mismatch(other),
        }
    }

    fn read_stack_words(&self, thread: OsThread, address: u64, out: &mut [u64]) -> Result<(), OsError> {
        match ask(Request::ReadStackWords(thread, address, out.len())) {
            Reply::Words(r) => r.map(|words| out.copy_from_slice(&words)),
            other => mismatch(other),
        }
    }

    fn read_raw(&self, address: u64) -> u64 {
        match ask(Request::ReadRaw(address)) {
            Reply::Word(Ok(word)) => word,
            other => mismatch(other),
        }
    }
}

/// Hosted code is about to leave the simulation, as `ending` and `message` say (block in a
/// call the process does not see, start an OS thread of its own). On a simulated thread the
/// run ends so, and this does not return; while a run is set up (the profiler's `Initialize`)
/// the run ends so as soon as it is set up, and this returns true; anywhere else it returns
/// false and the caller goes on as it would.
pub fn leave_simulation(ending: Ending, message: &str) -> bool {
    if crate::fiber::on_fiber() {
        ask(Request::Escape(ending.as_str(), message.to_string()));
        unreachable!("the engine ends the run");
    }
    crate::fiber::escape_during_setup(ending.as_str(), message)
}

/// Native profiler code installs `handler` as the profiling signal's handler, with
/// `sa_flags` `flags` (a hosted library's `sigaction`): on a simulated thread it is the
/// run's handler from now on; while a run is set up, from the run's start. True in either
/// case; false anywhere else (the caller goes on as it would).
pub fn install_signal_handler(handler: NativeSignalHandler, flags: SignalFlags) -> bool {
    if crate::fiber::on_fiber() {
        ask(Request::SignalHandler(handler, flags));
        return true;
    }
    crate::fiber::handler_during_setup(handler, flags)
}

impl SimOs {
    /// Blocks (`Some(true)`) or unblocks (`Some(false)`) the profiling signal on the calling
    /// thread, as the program steps `mask_signals` and `unmask_signals` do, or leaves it
    /// (`None`); whether it was blocked before.
    pub fn mask_signals(&self, masked: Option<bool>) -> bool {
        match ask(Request::MaskSignals(masked)) {
            Reply::Flag(before) => before,
            other => mismatch(other),
        }
    }

    /// An oracle's verdict: the sample just taken differs from the ground truth as `message`
    /// says. The run goes on, with `wrong_sample` as its outcome.
    pub fn wrong_sample(&self, message: String) {
        ask(Request::Warn(Ending::WrongSample.as_str(), message));
    }

    /// An oracle's verdict: the sample just taken is shorter than a correct sampler's would
    /// have been at that instant, for a reason the sampler caused, as `message` says. The run
    /// goes on, with `lost_sample` as its outcome.
    pub fn lost_sample(&self, message: String) {
        ask(Request::Warn(Ending::LostSample.as_str(), message));
    }

    /// Profiler code still holds COM references the runtime handed out (an enumerator, a
    /// metadata object), as `message` says, when the process exits. The run goes on, with
    /// `leaked_reference` as its outcome.
    pub fn leaked_reference(&self, message: String) {
        ask(Request::Warn(Ending::LeakedReference.as_str(), message));
    }
}

impl Sync for SimOs {
    fn mutex_create(&self, name: &str) -> MutexId {
        self.mutex_open_as(name, name)
    }

    fn mutex_lock(&self, mutex: MutexId) {
        ask(Request::MutexLock(mutex));
    }

    fn mutex_try_lock(&self, mutex: MutexId) -> bool {
        match ask(Request::MutexTryLock(mutex)) {
            Reply::Flag(taken) => taken,
            other => mismatch(other),
        }
    }

    fn mutex_unlock(&self, mutex: MutexId) {
        ask(Request::MutexUnlock(mutex));
    }

    fn event_create(&self, name: &str) -> EventId {
        match ask(Request::EventCreate(name.to_string())) {
            Reply::Event(e) => e,
            other => mismatch(other),
        }
    }

    fn event_set(&self, event: EventId) {
        ask(Request::EventSet(event));
    }

    fn event_reset(&self, event: EventId) {
        ask(Request::EventReset(event));
    }

    fn event_wait(&self, event: EventId, timeout: Duration) -> bool {
        match ask(Request::EventWait(event, timeout)) {
            Reply::Flag(set) => set,
            other => mismatch(other),
        }
    }

    fn sleep(&self, duration: Duration) {
        ask(Request::Sleep(duration));
    }

    fn now(&self) -> Duration {
        match ask(Request::Now) {
            Reply::Time(t) => t,
            other => mismatch(other),
        }
    }
}

fn images() -> Arc<Images> {
    match ask(Request::Images) {
        Reply::Images(images) => images,
        other => mismatch(other),
    }
}

/// The process's module list, as the loader gives it (each call a scheduling point).
impl Modules for SimOs {
    fn loaded_modules(&self) -> Vec<LoadedModule> {
        images().modules()
    }

    fn read_memory(&self, address: u64, out: &mut [u8]) -> Result<(), OsError> {
        images().read(address, out).ok_or(OsError::BadAddress(address))
    }
}
