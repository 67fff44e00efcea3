//! Fibers: profiler code (ordinary blocking Rust) run as a simulated thread.
//!
//! A fiber runs only while the engine waits for it: the engine hands it a [`Reply`]
//! ([`Fiber::resume`]) and waits until the fiber asks for something ([`Request`]) or ends. So
//! exactly one of them runs at a time, and every request is a scheduling point. How control
//! passes is the carrier's business: on x86-64 Linux each fiber is a stack of its own switched
//! in user space, on the engine's OS thread, with the thread-local storage of its simulated
//! thread (`user_space`); elsewhere each fiber is an OS thread of its own (`os_threads`).
//!
//! Code running on a fiber reaches the engine through [`request`]; outside a fiber,
//! [`request`] returns `None` and [`point`] does nothing, so the runtime's API works unchanged
//! in frozen scenarios and plain tests.
//!
//! A test binary that installs [`HeapLockAllocator`] as its global allocator makes every
//! allocation by code on a fiber count as taking the process heap lock: at the fiber's next
//! request it first waits for the heap lock to be free, so a sampler that allocates while the
//! thread it suspended holds the heap lock deadlocks in the simulation as it would for real.

use corprof::os::{EventId, MutexId, OsError, OsThread, SignalFlags};
use corprof::Context;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// The build script sets `cfg(user_space_fibers)` on x86-64 Linux without a sanitizer: sanitizers
// keep per-thread state that a fiber switched in user space, on a stack of its own with a
// donor's thread pointer, does not match (the address sanitizer's stack bounds: it reported
// the fibers' frames as overflows). Fuzzing builds without one switch in user space too.
#[cfg(not(user_space_fibers))]
mod os_threads;
#[cfg(user_space_fibers)]
mod user_space;
#[cfg(not(user_space_fibers))]
use os_threads as carrier;
#[cfg(user_space_fibers)]
use user_space as carrier;

pub use carrier::Home;
pub(crate) use carrier::PoolHeld;

/// A fiber's stack size, whatever carries it (reserved: pages are committed as the stack
/// grows into them).
const STACK_BYTES: usize = 8 << 20;

/// What code on a fiber asks the engine for.
#[derive(Clone, Debug)]
pub enum Request {
    /// A plain scheduling point (every `ProfilerInfo` call makes one).
    Point,
    /// The scheduling point before a walk's callback for one frame (`DoStackSnapshot` in a
    /// running process): other threads run between two frames. A walk makes progress with
    /// each frame, so these steps never count towards a livelock's idle steps.
    WalkFrame,
    /// An `ICorProfilerInfo` call in a run that injects failures asks whether it fails: the
    /// engine asks its chooser when the thread next runs ([`Reply::Flag`]).
    Fails,
    /// A `corprof::sync` atomic access: a scheduling point; `true` when it surely writes.
    Atomic(bool),
    /// A `corprof::sync::spin_loop`: wait until another thread writes.
    Spin,
    /// An atomic access at this address that changed nothing and read this value (a load, a
    /// failed compare-exchange, an exchange storing what was there): a scheduling point. From
    /// the third in a row at one address reading the same value (no other request of the
    /// thread's in between) the thread spins: until another thread changes something, it runs
    /// only when no other thread can.
    Poll(usize, u64),
    /// Wait until every cooperative thread has parked for the caller's runtime suspension.
    SafePoints,
    /// Raise the callbacks the runtime queued (the suspension callbacks) on their threads
    /// before going on.
    Raise,
    /// The code allocated since its last request (with [`HeapLockAllocator`]): it needs the
    /// heap lock free.
    Allocated,
    /// The code manager's reader lock: wait while another thread holds the writer lock.
    ReaderLock,
    /// The calling thread blocks (`Some(true)`) or unblocks (`Some(false)`) the profiling
    /// signal, or asks (`None`), as a hosted library's `pthread_sigmask` does; the reply says
    /// whether it was blocked before.
    MaskSignals(Option<bool>),
    /// Profiler code installs the profiling signal's handler (`sigaction`): it runs on each
    /// thread the signal interrupts, with that thread's registers, from now on.
    SignalHandler(NativeSignalHandler, SignalFlags),
    /// Hosted code would leave the simulation: the run ends with this outcome and message
    /// ([`Reply::Abort`]).
    Escape(&'static str, String),
    /// A rule broken whose run goes on (an oracle's `wrong_sample` or `lost_sample`, a
    /// reference held at exit), by outcome, with its message: the run's outcome unless a
    /// fatal one follows.
    Warn(&'static str, String),
    /// A mutex opened by its key (named objects are shared), and the name reports give it
    /// when it is new.
    MutexCreate(String, String),
    /// Take a mutex (blocks while held).
    MutexLock(MutexId),
    /// Take a mutex if it is free (never blocks).
    MutexTryLock(MutexId),
    /// Release a mutex.
    MutexUnlock(MutexId),
    /// Open a condition variable by its key, with the name reports give it when it is new:
    /// its id and how many times it was notified.
    CondOpen(String, String),
    /// Wait until a condition variable is notified after this many notifications, at most
    /// this long.
    CondWait(u32, u64, Duration),
    /// Notify a condition variable (every waiter wakes).
    CondNotify(u32),
    /// Create a thread running this code (one declared `start = "profiler"`).
    CreateThread(ThreadStart),
    /// Wait until a thread's code has ended.
    JoinThread(OsThread),
    /// A new event.
    EventCreate(String),
    /// Set an event.
    EventSet(EventId),
    /// Clear an event.
    EventReset(EventId),
    /// Wait for an event, at most this long.
    EventWait(EventId, Duration),
    /// Sleep in virtual time.
    Sleep(Duration),
    /// The virtual clock.
    Now,
    /// The calling thread.
    CurrentThread,
    /// Every live thread.
    Threads,
    /// The module list and its images (`dl_iterate_phdr`, the loader's module list).
    Images,
    /// `SuspendThread`.
    Suspend(OsThread),
    /// `ResumeThread`.
    Resume(OsThread),
    /// `GetThreadContext`.
    GetContext(OsThread),
    /// Send the profiling signal.
    Signal(OsThread),
    /// Stack bounds.
    StackBounds(OsThread),
    /// A checked stack read.
    ReadStack(OsThread, u64),
    /// A raw memory read.
    ReadRaw(u64),
    /// Checked reads of this many consecutive stack words.
    ReadStackWords(OsThread, u64, usize),
}

/// The engine's answer to a [`Request`].
#[derive(Clone, Debug)]
pub enum Reply {
    /// Begin running.
    Start,
    /// Done; nothing to return.
    Done,
    /// A count (suspend counts).
    Count(Result<u32, OsError>),
    /// A unit result.
    Unit(Result<(), OsError>),
    /// A word (stack reads).
    Word(Result<u64, OsError>),
    /// Words (a bulk stack read).
    Words(Result<Vec<u64>, OsError>),
    /// Bounds.
    Bounds(Result<(u64, u64), OsError>),
    /// A context.
    Context(Box<Result<Context, OsError>>),
    /// A thread.
    Thread(OsThread),
    /// Threads.
    Threads(Vec<OsThread>),
    /// The loaded modules.
    Images(std::sync::Arc<crate::code::images::Images>),
    /// A mutex.
    Mutex(MutexId),
    /// An event.
    Event(EventId),
    /// A flag (an event wait: set or timed out).
    Flag(bool),
    /// A condition variable and how many times it was notified.
    Cond(u32, u64),
    /// A time.
    Time(Duration),
    /// The run is over: unwind and stop.
    Abort,
}

/// What a fiber did when it gave control back.
#[derive(Debug)]
pub enum Yielded {
    /// It asks for this.
    Request(Request),
    /// Its code returned.
    Finished,
    /// Its code panicked, with this message.
    Panicked(String),
}

/// A message between the engine and a fiber.
enum Baton {
    /// The fiber may run with this reply.
    ToFiber(Reply),
    /// The engine may run; the fiber left this.
    ToEngine(Yielded),
    /// Nobody has taken the last message yet.
    Empty,
}

/// What the engine and one fiber share.
struct Shared {
    /// How control passes between them.
    handoff: carrier::Handoff,
    /// The run keeps a trace: the fiber's code leaves [`note`]s for it.
    tracing: AtomicBool,
    /// Trace lines the fiber's code left since the engine last took them.
    notes: Mutex<Vec<String>>,
    /// What the fiber's code did since then to objects waited on through condition variables
    /// ([`holding`]), and whether there is any.
    holds: Mutex<Vec<(u32, Holding)>>,
    held: AtomicBool,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            handoff: carrier::Handoff::new(),
            tracing: AtomicBool::new(false),
            notes: Mutex::new(Vec::new()),
            holds: Mutex::new(Vec::new()),
            held: AtomicBool::new(false),
        }
    }
}

/// What code did to an object whose waiters wait on a condition variable of the process (a
/// read-write lock, a one-time initialization, a semaphore): the engine keeps its holders,
/// so a thread waiting on it waits for them in the wait-for graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holding {
    /// The thread took it (a read or write lock, the routine started, a count taken);
    /// `any_thread_releases` when another thread may give it back too (a semaphore's post),
    /// so a cycle through it is final only once no other thread can run.
    Took {
        /// Whether a thread other than the holder may release it.
        any_thread_releases: bool,
    },
    /// The thread gave back one of its holds (a thread that holds none changes nothing).
    Released,
}

/// The code of a thread the profiler creates ([`Request::CreateThread`]), run once.
#[derive(Clone)]
pub struct ThreadStart(Arc<Mutex<Option<Code>>>);

/// Code run once on a thread of its own.
pub type Code = Box<dyn FnOnce() + Send>;

impl ThreadStart {
    /// Wraps `code`.
    pub fn new(code: impl FnOnce() + Send + 'static) -> ThreadStart {
        ThreadStart(Arc::new(Mutex::new(Some(Box::new(code)))))
    }

    /// The code, the first time (`None` afterwards).
    pub(crate) fn take(&self) -> Option<Code> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl std::fmt::Debug for ThreadStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ThreadStart")
    }
}

/// A signal handler installed by native code: called on the interrupted thread with its
/// registers.
#[derive(Clone)]
pub struct NativeSignalHandler(pub Arc<dyn Fn(&Context) + Send + Sync>);

impl std::fmt::Debug for NativeSignalHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NativeSignalHandler")
    }
}

/// Threads created while a run is set up (its profiler's initialization, before any thread
/// runs): the created threads still free, by OS id, and the code given to each one taken.
pub(crate) struct Setup {
    /// OS ids of the threads declared `start = "profiler"`, in order.
    pub free: Vec<OsThread>,
    /// The code of each thread created so far (the first `created.len()` of `free`).
    pub created: Vec<ThreadStart>,
    /// How many creations found no free thread.
    pub refused: usize,
    /// The first way the code set up would have left the simulation (its outcome and
    /// message), if any.
    pub escaped: Option<(&'static str, String)>,
    /// The profiling signal's handler the code set up installed last, if any.
    pub signal_handler: Option<(NativeSignalHandler, SignalFlags)>,
}

/// Runs `f` (a run's setup, off any fiber) with thread creations on this OS thread taking
/// the threads `free` in order; returns what `f` returned and what it created.
pub(crate) fn setting_up<R>(free: Vec<OsThread>, f: impl FnOnce() -> R) -> (R, Setup) {
    let setup = Setup {
        free,
        created: Vec::new(),
        refused: 0,
        escaped: None,
        signal_handler: None,
    };
    let previous = SETUP.with(|s| s.replace(Some(setup)));
    let r = f();
    let setup = SETUP
        .with(|s| s.replace(previous))
        .expect("the setup just installed");
    (r, setup)
}

/// True when code on this OS thread is part of a simulated process: it runs one of its
/// threads, or sets a run up (where [`crate::process::SimOs::create_thread`] works too).
pub fn in_process() -> bool {
    on_fiber() || SETUP.with(|s| s.borrow().is_some())
}

/// Records, during a run's setup, the profiling signal's handler the code set up installs;
/// false outside a setup.
pub(crate) fn handler_during_setup(handler: NativeSignalHandler, flags: SignalFlags) -> bool {
    SETUP.with(|s| match s.borrow_mut().as_mut() {
        Some(setup) => {
            setup.signal_handler = Some((handler, flags));
            true
        }
        None => false,
    })
}

/// Records, during a run's setup, that the code set up would leave the simulation; false
/// outside a setup.
pub(crate) fn escape_during_setup(outcome: &'static str, message: &str) -> bool {
    SETUP.with(|s| match s.borrow_mut().as_mut() {
        Some(setup) => {
            setup
                .escaped
                .get_or_insert_with(|| (outcome, message.to_string()));
            true
        }
        None => false,
    })
}

/// A thread creation during a run's setup: the next free thread, or `None` outside a setup,
/// or `Some(Err)` when none is left.
pub(crate) fn create_during_setup(code: ThreadStart) -> Option<Result<OsThread, OsError>> {
    SETUP.with(|s| {
        let mut s = s.borrow_mut();
        let setup = s.as_mut()?;
        Some(match setup.free.get(setup.created.len()).copied() {
            Some(thread) => {
                setup.created.push(code);
                Ok(thread)
            }
            None => {
                setup.refused += 1;
                Err(OsError::NoSuchThread)
            }
        })
    })
}

/// The unwinding payload that stops a fiber when its run is over.
struct Stop;

thread_local! {
    static CURRENT: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
    /// This OS thread runs a fiber's code (read by the allocator, which must not allocate).
    static ON_FIBER: Cell<bool> = const { Cell::new(false) };
    /// The fiber's code allocated since its last request.
    static ALLOCATED: Cell<bool> = const { Cell::new(false) };
    /// Nesting depth of code whose allocations are not the profiler's: the simulated
    /// runtime's own work, and oracles ([`unobserved`]).
    static QUIET: Cell<u32> = const { Cell::new(0) };
    /// The run being set up on this OS thread, if any ([`setting_up`]).
    static SETUP: RefCell<Option<Setup>> = const { RefCell::new(None) };
}

/// A global allocator that makes allocations by code on a simulated thread count as taking
/// the process heap lock (see the module documentation). Install it in a test binary:
/// `#[global_allocator] static A: HeapLockAllocator<std::alloc::System> = HeapLockAllocator(std::alloc::System);`
#[derive(Debug, Default)]
pub struct HeapLockAllocator<A>(pub A);

fn note_allocation() {
    // `try_with`: allocations during thread teardown, after the thread-locals are gone, count
    // for nothing.
    if ON_FIBER.try_with(Cell::get).unwrap_or(false) && QUIET.try_with(Cell::get) == Ok(0) {
        let _ = ALLOCATED.try_with(|a| a.set(true));
    }
}

// SAFETY: every method forwards to the wrapped allocator with the caller's arguments unchanged
// and returns its result; noting the allocation touches only two const-initialized `Cell`
// thread-locals, which neither allocate nor unwind.
#[allow(unsafe_code)] // GlobalAlloc is an unsafe trait; each call forwards to the inner allocator.
unsafe impl<A: GlobalAlloc> GlobalAlloc for HeapLockAllocator<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, which we pass on.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as for `alloc`.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract, which we pass on.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller upholds `GlobalAlloc::dealloc`'s contract, which we pass on.
        unsafe { self.0.dealloc(ptr, layout) }
    }
}

/// A profiler thread's code, waiting for the engine.
pub struct Fiber {
    shared: Arc<Shared>,
    /// What the carrier keeps while the fiber lives.
    running: carrier::Running,
    done: bool,
}

/// Runs one fiber's body on the fiber, from the engine's first reply to the end of its code;
/// returns the last message for the engine.
fn run_fiber(shared: &Arc<Shared>, body: Code, first: Reply) -> Yielded {
    if let Reply::Abort = first {
        return Yielded::Finished;
    }
    CURRENT.with(|c| *c.borrow_mut() = Some(shared.clone()));
    ON_FIBER.with(|f| f.set(true));
    ALLOCATED.with(|a| a.set(false));
    QUIET.with(|q| q.set(0));
    let outcome = catch_unwind(AssertUnwindSafe(body));
    ON_FIBER.with(|f| f.set(false));
    CURRENT.with(|c| *c.borrow_mut() = None);
    match outcome {
        Ok(()) => Yielded::Finished,
        Err(payload) if payload.is::<Stop>() => Yielded::Finished,
        Err(payload) => Yielded::Panicked(panic_message(&payload)),
    }
}

impl Fiber {
    /// Starts `body` as a fiber of its own (on a thread-local context not used by another
    /// live fiber), waiting for the first [`Fiber::resume`].
    pub fn spawn(body: Code) -> Fiber {
        Fiber::start(body, None)
    }

    /// Starts `body` with `home`'s thread-local context (set up the first time), which must
    /// have no other fiber alive; it stays with `home` afterwards.
    pub fn spawn_at(body: Code, home: &mut Home) -> Fiber {
        Fiber::start(body, Some(home))
    }

    fn start(body: Code, home: Option<&mut Home>) -> Fiber {
        let shared = Arc::new(Shared::new());
        let running = carrier::Running::start(shared.clone(), body, home);
        Fiber {
            shared,
            running,
            done: false,
        }
    }

    /// Has the fiber's code leave trace lines ([`note`]) for a run that keeps a trace.
    pub fn set_tracing(&self, on: bool) {
        self.shared.tracing.store(on, Ordering::Release);
    }

    /// The trace lines the fiber's code left since the last call, oldest first.
    pub fn take_notes(&self) -> Vec<String> {
        std::mem::take(&mut *self.shared.notes.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// What the fiber's code took and released since the last call ([`holding`]), in order.
    pub fn take_holds(&self) -> Vec<(u32, Holding)> {
        if !self.shared.held.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        std::mem::take(&mut *self.shared.holds.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Runs the fiber with `reply` until it yields again.
    pub fn resume(&mut self, reply: Reply) -> Yielded {
        let yielded = self.running.resume(&self.shared, reply);
        self.done = !matches!(yielded, Yielded::Request(_));
        yielded
    }
}

impl Drop for Fiber {
    /// Stops a fiber that has not finished (its run ended in a deadlock, a hang or a fault):
    /// its code unwinds from the request it is blocked in, and what it ran on goes back to
    /// the pool.
    fn drop(&mut self) {
        if !self.done {
            let _ = self.running.resume(&self.shared, Reply::Abort);
        }
    }
}

/// The message a panic carried (its `&str` or `String` payload).
pub fn panic_message(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

/// True when the calling code runs on a fiber.
pub fn on_fiber() -> bool {
    ON_FIBER.with(Cell::get)
}

/// Asks the engine for `request` and waits for the reply; `None` when not on a fiber.
pub fn request(request: Request) -> Option<Reply> {
    if !on_fiber() {
        return None;
    }
    let shared = CURRENT.with(|c| c.borrow().clone())?;
    // An allocation since the last request is reported first: it waits for the heap lock.
    if ALLOCATED.with(|a| a.replace(false)) {
        exchange(&shared, Request::Allocated);
    }
    Some(exchange(&shared, request))
}

/// Set by [`abandon_at_end`].
static ABANDON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// From now on, a run that ends leaves the fibers still inside code where they are (their
/// OS threads blocked for good) instead of unwinding their frames: for a process that exits
/// once its run has ended (a worker running one run), where a library's own unwinder (a
/// statically linked libgcc) could not unwind through simclr's frames.
pub fn abandon_at_end() {
    ABANDON.store(true, std::sync::atomic::Ordering::Relaxed);
}

fn exchange(shared: &Shared, request: Request) -> Reply {
    match shared.handoff.to_engine(Yielded::Request(request)) {
        Reply::Abort if ABANDON.load(std::sync::atomic::Ordering::Relaxed) => shared.handoff.abandon(),
        Reply::Abort => {
            // The run is over. What runs from here on (the cleanups of the frames unwound, a
            // C++ destructor unlocking a mutex, say) is plain code of this OS thread, not a
            // simulated thread's: it must not ask the engine, which no longer answers.
            ON_FIBER.with(|f| f.set(false));
            CURRENT.with(|c| *c.borrow_mut() = None);
            resume_unwind(Box::new(Stop))
        }
        reply => reply,
    }
}

/// A scheduling point (a no-op outside a fiber).
pub fn point() {
    request(Request::Point);
}

/// The scheduling point before a walk calls the profiler for one frame ([`Request::WalkFrame`];
/// a no-op outside a fiber).
pub fn walk_frame() {
    request(Request::WalkFrame);
}

/// Leaves the line `text` makes in the trace of the run, at the thread's current step, when
/// code on a fiber runs in a run that keeps a trace; otherwise does nothing (and `text` is not
/// called). Not a scheduling point: the engine takes the lines when the code next yields.
pub fn note(text: impl FnOnce() -> String) {
    if !on_fiber() {
        return;
    }
    CURRENT.with(|c| {
        if let Some(shared) = c.borrow().as_ref().filter(|s| s.tracing.load(Ordering::Acquire)) {
            // The simulator's allocation, not the profiler's (no heap lock).
            unobserved(|| {
                shared
                    .notes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(text())
            });
        }
    });
}

/// Notes, for the engine, that the code on this fiber took or released the object condition
/// variable `cond` stands for ([`Holding`]). Not a scheduling point: the engine applies it
/// when the code next yields, before another thread runs. A no-op outside a fiber.
pub fn holding(cond: u32, what: Holding) {
    if !on_fiber() {
        return;
    }
    CURRENT.with(|c| {
        if let Some(shared) = c.borrow().as_ref() {
            // The simulator's allocation, not the profiler's (no heap lock).
            unobserved(|| {
                shared
                    .holds
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((cond, what))
            });
            shared.held.store(true, Ordering::Release);
        }
    });
}

/// Makes every `corprof::sync` atomic access by code on a fiber a scheduling point, and its
/// `spin_loop` a wait until another thread writes (once per process; off a fiber they stay
/// plain atomics).
pub(crate) fn install_atomics() {
    corprof::sync::install(corprof::sync::Scheduler {
        access: |write| {
            request(Request::Atomic(write));
        },
        spin: || {
            if request(Request::Spin).is_none() {
                std::hint::spin_loop();
            }
        },
    });
}

/// Runs `f` without its allocations counting as the profiler's: for oracles that inspect the
/// process (ground truth at the instant of a sample) from profiler code, which the simulated
/// process must not see, and for the simulator's own glue around profiler code (a hosted
/// library's COM adapter, the request a redirected `pthread_mutex_lock` makes). An oracle
/// must not make requests in it (each is a scheduling point the process does not have);
/// glue that stands for one call of the profiler's may.
pub fn unobserved<R>(f: impl FnOnce() -> R) -> R {
    /// Restores the depth, also when a run that ends unwinds `f`.
    struct Quiet;
    impl Drop for Quiet {
        fn drop(&mut self) {
            QUIET.with(|q| q.set(q.get().saturating_sub(1)));
        }
    }
    QUIET.with(|q| q.set(q.get() + 1));
    let _quiet = Quiet;
    f()
}

/// Runs profiler code called back from inside the runtime (a snapshot callback): its
/// allocations count again.
pub(crate) fn observed<R>(f: impl FnOnce() -> R) -> R {
    let depth = QUIET.with(|q| q.replace(0));
    let r = f();
    QUIET.with(|q| q.set(depth));
    r
}

/// A runtime API call in progress on this thread: a scheduling point on entry, and the
/// runtime's own allocations (its bookkeeping, not the profiler's) do not count until it
/// ends.
pub(crate) struct RuntimeCall {
    /// The call runs on a fiber (read once: off a fiber the call makes no request at all).
    on_fiber: bool,
}

impl RuntimeCall {
    /// Enters the runtime: a scheduling point.
    pub(crate) fn enter() -> RuntimeCall {
        let on_fiber = on_fiber();
        if on_fiber {
            point();
            QUIET.with(|q| q.set(q.get() + 1));
        }
        RuntimeCall { on_fiber }
    }

    /// Waits, on a fiber, until no other thread holds the code manager's writer lock, as a
    /// reader that may block does (R42); a no-op outside a fiber.
    pub(crate) fn wait_for_reader_lock(&self) {
        if self.on_fiber {
            request(Request::ReaderLock);
        }
    }

    /// True when the call runs on a fiber (where waiting is a scheduling point).
    pub(crate) fn on_fiber(&self) -> bool {
        self.on_fiber
    }
}

impl Drop for RuntimeCall {
    fn drop(&mut self) {
        if self.on_fiber {
            QUIET.with(|q| q.set(q.get().saturating_sub(1)));
        }
    }
}

/// On a fiber, takes (`true`, waiting while another thread holds it) or releases the
/// process's thread-store lock, as a runtime suspension does; a no-op outside a fiber. (Program
/// steps take it in the engine, which runs them.)
pub(crate) fn thread_store_lock(take: bool) {
    let lock = MutexId(crate::runtime_locks::LockId::THREAD_STORE.0);
    request(if take {
        Request::MutexLock(lock)
    } else {
        Request::MutexUnlock(lock)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fiber_runs_only_between_resumes_and_stops_when_dropped() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let l = log.clone();
        let mut f = Fiber::spawn(Box::new(move || {
            l.lock().unwrap().push("start");
            let reply = request(Request::Now);
            assert!(matches!(reply, Some(Reply::Time(_))));
            l.lock().unwrap().push("after now");
            request(Request::Point);
            l.lock().unwrap().push("never");
        }));
        assert!(log.lock().unwrap().is_empty());
        assert!(matches!(f.resume(Reply::Start), Yielded::Request(Request::Now)));
        assert_eq!(*log.lock().unwrap(), ["start"]);
        assert!(matches!(
            f.resume(Reply::Time(Duration::ZERO)),
            Yielded::Request(Request::Point)
        ));
        drop(f);
        assert_eq!(*log.lock().unwrap(), ["start", "after now"]);
        assert!(!on_fiber());
        assert!(request(Request::Point).is_none());
    }

    thread_local! {
        static MARK: Cell<u32> = const { Cell::new(0) };
    }

    /// Runs `body` as a fiber at `home` (or on its own) to its end.
    fn run_to_end(body: impl FnOnce() + Send + 'static, home: Option<&mut Home>) {
        let mut f = match home {
            Some(home) => Fiber::spawn_at(Box::new(body), home),
            None => Fiber::spawn(Box::new(body)),
        };
        assert!(matches!(f.resume(Reply::Start), Yielded::Finished));
    }

    #[test]
    fn thread_local_storage_follows_the_home_not_the_engine() {
        MARK.with(|m| m.set(1));
        let (mut home, mut other) = (Home::default(), Home::default());
        run_to_end(|| MARK.with(|m| m.set(7)), Some(&mut home));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        run_to_end(
            move || s.lock().unwrap().push(MARK.with(Cell::get)),
            Some(&mut home),
        );
        let s = seen.clone();
        run_to_end(
            move || s.lock().unwrap().push(MARK.with(Cell::get)),
            Some(&mut other),
        );
        // The engine's own value is untouched by the fibers'; the home's second fiber reads
        // what its first one left; another home starts from its own.
        assert_eq!(MARK.with(Cell::get), 1);
        assert_eq!(seen.lock().unwrap()[0], 7);
        assert_ne!(seen.lock().unwrap()[1], 7);
    }

    #[test]
    fn a_fiber_has_a_deep_stack_and_backtraces_end_in_it() {
        fn depth(n: u32) -> u32 {
            let pad = std::hint::black_box([n as u8; 1024]);
            if n == 0 {
                pad[0] as u32
            } else {
                depth(n - 1) + pad[1] as u32
            }
        }
        let frames = Arc::new(Mutex::new(false));
        let f = frames.clone();
        run_to_end(
            move || {
                // About 2 MiB of frames, then a backtrace that must stop at the fiber's start.
                assert_eq!(depth(2_000), (1..=2_000).map(|n| n as u8 as u32).sum::<u32>());
                let trace = std::backtrace::Backtrace::force_capture().to_string();
                *f.lock().unwrap() = trace.contains("run_fiber");
            },
            None,
        );
        assert!(*frames.lock().unwrap(), "the backtrace shows the fiber's frames");
    }

    #[test]
    fn a_panic_is_reported_not_propagated() {
        let mut f = Fiber::spawn(Box::new(|| panic!("profiler bug")));
        match f.resume(Reply::Start) {
            Yielded::Panicked(m) => assert_eq!(m, "profiler bug"),
            other => panic!("{other:?}"),
        }
    }
}
