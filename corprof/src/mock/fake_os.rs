//! [`FakeOs`] (feature `mock`): a small operating system for unit tests of sampler code, which
//! answers as the simulator's OS layer does without a simulated process around it.

use crate::context::Context;
use crate::modules::{LoadedModule, Modules};
use crate::os::{EventId, MutexId, OsError, OsThread, Sync, ThreadControl};
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// The calling thread of a [`FakeOs`] until [`FakeOs::calling_as`] names another: a thread
/// the profiler created, which the fake does not list.
pub const SAMPLER_THREAD: OsThread = OsThread(1);

/// One thread of a [`FakeOs`]: its registers and its stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FakeThread {
    /// What `GetThreadContext` answers.
    pub context: Context,
    /// The stack's bounds `(low, high)`, `high` exclusive.
    pub bounds: (u64, u64),
    /// Stack words by address; a word of the stack not listed reads as 0.
    pub words: BTreeMap<u64, u64>,
    /// `GetThreadContext` fails (`OsError::ContextUnavailable`).
    pub context_fails: bool,
}

impl FakeThread {
    /// A thread with `context` and an empty stack within `bounds` (`high` exclusive).
    pub fn new(context: Context, bounds: (u64, u64)) -> FakeThread {
        FakeThread {
            context,
            bounds,
            words: BTreeMap::new(),
            context_fails: false,
        }
    }

    /// The same thread with the stack word at `address` set to `value`.
    pub fn word(mut self, address: u64, value: u64) -> FakeThread {
        self.words.insert(address, value);
        self
    }

    /// The same thread with consecutive stack words from `address`.
    pub fn words(mut self, address: u64, values: &[u64]) -> FakeThread {
        for (i, &value) in values.iter().enumerate() {
            self.words.insert(address + 8 * i as u64, value);
        }
        self
    }

    /// The stack word at `address` (0 where none was set), if the stack holds it.
    fn read(&self, address: u64) -> Option<u64> {
        let held = (self.bounds.0..self.bounds.1).contains(&address) && address.is_multiple_of(8);
        held.then(|| self.words.get(&address).copied().unwrap_or(0))
    }
}

/// A rule of the OS layer that a call broke, as the simulator would report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Misuse {
    /// The simulator's outcome name for it (`torn_stack_read`, `deadlock`, …).
    pub kind: &'static str,
    /// What happened.
    pub message: String,
}

/// The threads and objects of a [`FakeOs`].
#[derive(Debug, Default)]
struct State {
    current: Option<OsThread>,
    threads: BTreeMap<OsThread, (FakeThread, Suspension)>,
    mutexes: Vec<(String, Option<OsThread>)>,
    events: Vec<(String, bool)>,
    modules: Vec<LoadedModule>,
    now: Duration,
    misuses: Vec<Misuse>,
}

/// How far a thread's suspension has got.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Suspension {
    count: u32,
    /// `GetThreadContext` returned since the count went from 0 to 1: the thread has stopped.
    completed: bool,
}

/// A small operating system for unit tests of sampler code, which answers as the simulator's
/// OS layer does without a simulated process around it.
///
/// It holds threads (each a CONTEXT and a stack image), their suspend counts, named mutexes
/// and events, the loaded modules and a clock that only sleeps and timed waits move. There is
/// one calling thread ([`FakeOs::calling_as`] picks it) and no scheduler: a call that would
/// block forever instead records a [`Misuse`] and returns, so a test states "no misuse" with
/// one assertion on [`FakeOs::misuses`]. The rules it checks are the ones the simulator checks
/// in a running process:
/// - a thread's stack is read only once its suspension has completed (`SuspendThread`, then
///   `GetThreadContext`), or by the thread itself;
/// - a raw read (a pointer dereference) reads mapped stack memory only;
/// - a mutex is taken only when free and released only by its holder;
/// - a wait without a timeout is for an event that is set.
///
/// For expectations call by call instead, `MockThreadControl`, `MockSync` and `MockModules`
/// (mockall) mock the same traits.
///
/// ```
/// use corprof::mock::{FakeOs, FakeThread};
/// use corprof::os::{OsThread, Sync, ThreadControl};
/// use corprof::Context;
///
/// let mut context = Context::zeroed();
/// context.rip = 0x7000_1234;
/// context.rsp = 0x5000_0fe0;
/// let os = FakeOs::new().with_thread(
///     OsThread(7),
///     FakeThread::new(context, (0x5000_0000, 0x5000_1000)).word(0x5000_0fe0, 0x7000_5678),
/// );
/// // The code under test: suspend, context, read the return address, resume.
/// assert_eq!(os.suspend_thread(OsThread(7)), Ok(0));
/// let context = os.get_thread_context(OsThread(7)).unwrap();
/// assert_eq!(os.read_stack(OsThread(7), context.rsp), Ok(0x7000_5678));
/// assert_eq!(os.resume_thread(OsThread(7)), Ok(1));
/// assert!(os.misuses().is_empty());
/// // Reading a running thread's stack is a torn read.
/// let _ = os.read_stack(OsThread(7), context.rsp);
/// assert_eq!(os.misuses().len(), 1);
/// ```
#[derive(Debug, Default)]
pub struct FakeOs {
    state: Mutex<State>,
}

impl FakeOs {
    /// No threads, no modules, the clock at 0, calls made by [`SAMPLER_THREAD`].
    pub fn new() -> FakeOs {
        FakeOs::default()
    }

    /// The same OS with `thread` added (replacing one of that id).
    pub fn with_thread(self, id: OsThread, thread: FakeThread) -> FakeOs {
        self.lock().threads.insert(id, (thread, Suspension::default()));
        self
    }

    /// The same OS with `module` loaded.
    pub fn with_module(self, module: LoadedModule) -> FakeOs {
        self.lock().modules.push(module);
        self
    }

    /// Makes later calls come from `thread` (a listed one, to test code that runs on a
    /// sampled thread, such as a signal handler).
    pub fn calling_as(&self, thread: OsThread) {
        self.lock().current = Some(thread);
    }

    /// Removes `thread`, as when it exits: later calls on it fail with `NoSuchThread`.
    pub fn exit_thread(&self, thread: OsThread) {
        self.lock().threads.remove(&thread);
    }

    /// The suspend count of `thread` (0 for an unknown one).
    pub fn suspend_count(&self, thread: OsThread) -> u32 {
        self.lock().threads.get(&thread).map_or(0, |(_, s)| s.count)
    }

    /// Whether `mutex` is held.
    pub fn is_locked(&self, mutex: MutexId) -> bool {
        self.lock()
            .mutexes
            .get(mutex.0 as usize)
            .is_some_and(|(_, h)| h.is_some())
    }

    /// Every rule broken so far, in order.
    pub fn misuses(&self) -> Vec<Misuse> {
        self.lock().misuses.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl State {
    fn me(&self) -> OsThread {
        self.current.unwrap_or(SAMPLER_THREAD)
    }

    fn misuse(&mut self, kind: &'static str, message: String) {
        self.misuses.push(Misuse { kind, message });
    }

    fn thread(&mut self, id: OsThread) -> Result<&mut (FakeThread, Suspension), OsError> {
        self.threads.get_mut(&id).ok_or(OsError::NoSuchThread)
    }
}

impl ThreadControl for FakeOs {
    fn current_thread(&self) -> OsThread {
        self.lock().me()
    }

    fn threads(&self) -> Vec<OsThread> {
        self.lock().threads.keys().copied().collect()
    }

    fn suspend_thread(&self, thread: OsThread) -> Result<u32, OsError> {
        let mut state = self.lock();
        let (_, suspension) = state.thread(thread)?;
        let previous = suspension.count;
        suspension.count += 1;
        Ok(previous)
    }

    fn resume_thread(&self, thread: OsThread) -> Result<u32, OsError> {
        let mut state = self.lock();
        let (_, suspension) = state.thread(thread)?;
        if suspension.count == 0 {
            return Err(OsError::NotSuspended);
        }
        let previous = suspension.count;
        suspension.count -= 1;
        suspension.completed &= suspension.count > 0;
        Ok(previous)
    }

    fn get_thread_context(&self, thread: OsThread) -> Result<Context, OsError> {
        let mut state = self.lock();
        let (fake, suspension) = state.thread(thread)?;
        if fake.context_fails {
            return Err(OsError::ContextUnavailable);
        }
        suspension.completed |= suspension.count > 0;
        Ok(fake.context.clone())
    }

    fn send_signal(&self, _thread: OsThread) -> Result<(), OsError> {
        Err(OsError::Unsupported)
    }

    fn stack_bounds(&self, thread: OsThread) -> Result<(u64, u64), OsError> {
        Ok(self.lock().thread(thread)?.0.bounds)
    }

    fn read_stack(&self, thread: OsThread, address: u64) -> Result<u64, OsError> {
        let mut state = self.lock();
        let me = state.me();
        let (fake, suspension) = state.thread(thread)?;
        let word = fake.read(address).ok_or(OsError::BadAddress(address))?;
        if thread != me && !suspension.completed {
            let why = if suspension.count == 0 {
                "which is not suspended"
            } else {
                "whose SuspendThread had not completed (no GetThreadContext)"
            };
            state.misuse(
                "torn_stack_read",
                format!("read {address:#x} on the stack of thread {} {why}", thread.0),
            );
        }
        Ok(word)
    }

    fn read_raw(&self, address: u64) -> u64 {
        let mut state = self.lock();
        let word = state.threads.values().find_map(|(fake, _)| fake.read(address));
        word.unwrap_or_else(|| {
            state.misuse(
                "access_violation",
                format!("a raw read of {address:#x}, which no stack maps"),
            );
            0
        })
    }
}

/// The index of the object called `name` in `list`, added with state `fresh` if there is none
/// (as the simulator opens named objects).
fn named<T>(list: &mut Vec<(String, T)>, name: &str, fresh: T) -> u32 {
    let index = list.iter().position(|(n, _)| n == name).unwrap_or_else(|| {
        list.push((name.to_string(), fresh));
        list.len() - 1
    });
    index as u32
}

impl Sync for FakeOs {
    fn mutex_create(&self, name: &str) -> MutexId {
        MutexId(named(&mut self.lock().mutexes, name, None))
    }

    fn mutex_lock(&self, mutex: MutexId) {
        let mut state = self.lock();
        let me = state.me();
        let Some((name, holder)) = state.mutexes.get_mut(mutex.0 as usize) else {
            return state.misuse("lock_misuse", format!("mutex {} was never created", mutex.0));
        };
        match *holder {
            None => *holder = Some(me),
            Some(by) => {
                let message = format!(
                    "thread {} waits for mutex `{name}` held by thread {}: with no other thread to release it, it waits forever",
                    me.0, by.0
                );
                state.misuse("deadlock", message);
            }
        }
    }

    fn mutex_try_lock(&self, mutex: MutexId) -> bool {
        let mut state = self.lock();
        let me = state.me();
        match state.mutexes.get_mut(mutex.0 as usize) {
            Some((_, holder @ None)) => {
                *holder = Some(me);
                true
            }
            _ => false,
        }
    }

    fn mutex_unlock(&self, mutex: MutexId) {
        let mut state = self.lock();
        let me = state.me();
        match state.mutexes.get_mut(mutex.0 as usize) {
            Some((_, holder)) if *holder == Some(me) => *holder = None,
            Some((name, _)) => {
                let message = format!("thread {} releases mutex `{name}`, which it does not hold", me.0);
                state.misuse("lock_misuse", message);
            }
            None => state.misuse("lock_misuse", format!("mutex {} was never created", mutex.0)),
        }
    }

    fn event_create(&self, name: &str) -> EventId {
        EventId(named(&mut self.lock().events, name, false))
    }

    fn event_set(&self, event: EventId) {
        if let Some((_, set)) = self.lock().events.get_mut(event.0 as usize) {
            *set = true;
        }
    }

    fn event_reset(&self, event: EventId) {
        if let Some((_, set)) = self.lock().events.get_mut(event.0 as usize) {
            *set = false;
        }
    }

    fn event_wait(&self, event: EventId, timeout: Duration) -> bool {
        let mut state = self.lock();
        let (name, set) = match state.events.get(event.0 as usize) {
            Some((name, set)) => (name.clone(), *set),
            None => (format!("#{}", event.0), false),
        };
        if set {
            return true;
        }
        if timeout == Duration::MAX {
            let message = format!("a wait without a timeout for event `{name}`, which nobody sets");
            state.misuse("hang", message);
        } else {
            state.now += timeout;
        }
        false
    }

    fn sleep(&self, duration: Duration) {
        let mut state = self.lock();
        state.now = state.now.saturating_add(duration);
    }

    fn now(&self) -> Duration {
        self.lock().now
    }
}

impl Modules for FakeOs {
    fn loaded_modules(&self) -> Vec<LoadedModule> {
        self.lock().modules.clone()
    }

    fn read_memory(&self, address: u64, _out: &mut [u8]) -> Result<(), OsError> {
        Err(OsError::BadAddress(address))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: OsThread = OsThread(7);

    fn os() -> FakeOs {
        let mut context = Context::zeroed();
        context.rsp = 0x1000;
        FakeOs::new().with_thread(
            T,
            FakeThread::new(context, (0x800, 0x1100)).words(0x1000, &[1, 2]),
        )
    }

    fn kinds(os: &FakeOs) -> Vec<&'static str> {
        os.misuses().iter().map(|m| m.kind).collect()
    }

    #[test]
    fn a_stack_is_read_once_get_thread_context_completed_the_suspension() {
        let os = os();
        os.suspend_thread(T).unwrap();
        // Suspended but not yet stopped: the read is torn, though it answers.
        assert_eq!(os.read_stack(T, 0x1008), Ok(2));
        assert_eq!(kinds(&os), ["torn_stack_read"]);
        os.get_thread_context(T).unwrap();
        assert_eq!(os.read_stack_words(T, 0x1000, &mut [0; 2]), Ok(()));
        assert_eq!(os.read_stack(T, 0x1100), Err(OsError::BadAddress(0x1100)));
        assert_eq!(os.resume_thread(T), Ok(1));
        assert_eq!(os.suspend_count(T), 0);
        // Resumed: reading again is torn.
        let _ = os.read_stack(T, 0x1000);
        assert_eq!(kinds(&os), ["torn_stack_read", "torn_stack_read"]);
    }

    #[test]
    fn a_thread_reads_its_own_stack_freely() {
        let os = os();
        os.calling_as(T);
        assert_eq!(os.current_thread(), T);
        assert_eq!(os.read_stack(T, 0x1000), Ok(1));
        assert!(os.misuses().is_empty());
    }

    #[test]
    fn resuming_a_running_thread_and_calls_on_a_gone_thread_fail() {
        let os = os();
        assert_eq!(os.resume_thread(T), Err(OsError::NotSuspended));
        os.exit_thread(T);
        assert_eq!(os.suspend_thread(T), Err(OsError::NoSuchThread));
        assert!(os.threads().is_empty());
    }

    #[test]
    fn raw_reads_of_unmapped_memory_are_access_violations() {
        let os = os();
        assert_eq!(os.read_raw(0x1008), 2);
        assert!(os.misuses().is_empty());
        assert_eq!(os.read_raw(0x4141_4141_4141_4141), 0);
        assert_eq!(kinds(&os), ["access_violation"]);
    }

    #[test]
    fn a_lock_that_would_wait_forever_is_a_deadlock() {
        let os = os();
        let m = os.mutex_create("registry");
        assert_eq!(os.mutex_create("registry"), m, "a name opens the same mutex");
        os.mutex_lock(m);
        assert!(os.is_locked(m) && !os.mutex_try_lock(m));
        os.mutex_lock(m);
        os.mutex_unlock(m);
        os.mutex_unlock(m);
        assert_eq!(kinds(&os), ["deadlock", "lock_misuse"]);
    }

    #[test]
    fn time_moves_only_by_sleeps_and_timed_out_waits() {
        let os = os();
        let e = os.event_create("done");
        os.sleep(Duration::from_millis(3));
        assert!(!os.event_wait(e, Duration::from_millis(2)));
        assert_eq!(os.now(), Duration::from_millis(5));
        os.event_set(e);
        assert!(os.event_wait(e, Duration::MAX));
        os.event_reset(e);
        assert!(!os.event_wait(e, Duration::MAX));
        assert_eq!(kinds(&os), ["hang"]);
        assert_eq!(os.now(), Duration::from_millis(5));
    }

    #[test]
    fn a_failing_context_and_signals_answer_as_on_windows() {
        let mut thread = FakeThread::new(Context::zeroed(), (0, 8));
        thread.context_fails = true;
        let os = FakeOs::new().with_thread(T, thread);
        assert_eq!(os.get_thread_context(T), Err(OsError::ContextUnavailable));
        assert_eq!(os.send_signal(T), Err(OsError::Unsupported));
        assert!(os.loaded_modules().is_empty());
    }
}
