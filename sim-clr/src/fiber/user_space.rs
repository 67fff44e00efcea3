//! Fibers switched in user space (x86-64 Linux): each fiber runs on a stack of its own, on the
//! OS thread that resumes it, and control passes between the engine and a fiber in a few
//! instructions, with no system call and no other core involved.
//!
//! **Thread-local storage follows the simulated thread.** Code on a fiber keeps state in
//! thread-local storage (Rust's `thread_local!`, C's `__thread`, `errno`, the C library's own),
//! and expects it to be the same from one activation of its simulated thread to the next. On
//! x86-64 every such access is relative to the thread pointer (the FS segment base, whose
//! first word points to itself: the x86-64 psABI, "Thread-Local Storage"). So each fiber
//! borrows the thread pointer of a *donor*, an OS thread that sleeps for good and lends its
//! thread-local blocks; a switch saves the running context's thread pointer with its
//! registers and loads the other's (`wrfsbase` where the kernel allows it, else
//! `arch_prctl(ARCH_SET_FS)`). A simulated thread's fibers borrow its [`Home`]'s donor, one
//! after another, so what one activation leaves in thread-local storage the next one reads.
//!
//! **A switch** saves what the x86-64 System V calling convention asks a callee to keep
//! (RBX, RBP, R12–R15, the MXCSR and x87 control words) and the thread pointer on the running
//! stack, stores the stack pointer, and restores the other context from its stack the same
//! way. A new fiber's stack is laid out as if it had switched away just before its first
//! instruction: its return address is a start routine that calls [`fiber_main`] and whose
//! unwind information ends every backtrace there.

#![allow(unsafe_code)] // Stacks are mapped and switched by hand: each use says why it is sound.

use super::{run_fiber, Baton, Code, Reply, Shared, Yielded, STACK_BYTES};
use std::cell::{RefCell, UnsafeCell};
use std::ffi::{c_int, c_long, c_ulong, c_void};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once};

/// How control passes between the engine and one fiber: the message in flight and each
/// side's saved stack pointer.
pub(super) struct Handoff {
    /// The message in flight: read and written only by the side that runs.
    baton: UnsafeCell<Baton>,
    /// The engine's saved stack pointer, while the fiber runs.
    engine: AtomicUsize,
    /// The fiber's saved stack pointer, while the engine runs.
    fiber: AtomicUsize,
    /// The fiber's code has returned: its stack holds no frame of it any more.
    ended: AtomicBool,
}

impl Handoff {
    /// A hand-off with no message and no saved context.
    pub(super) fn new() -> Handoff {
        Handoff {
            baton: UnsafeCell::new(Baton::Empty),
            engine: AtomicUsize::new(0),
            fiber: AtomicUsize::new(0),
            ended: AtomicBool::new(false),
        }
    }

    fn put(&self, baton: Baton) {
        // SAFETY: see `Sync for Handoff`: only the running side touches the baton, and no
        // reference to it outlives this statement.
        unsafe { *self.baton.get() = baton };
    }

    fn take(&self) -> Baton {
        // SAFETY: as in `put`.
        unsafe { std::mem::replace(&mut *self.baton.get(), Baton::Empty) }
    }

    /// On the fiber: saves its context and switches to the engine's.
    ///
    /// # Safety
    ///
    /// The fiber runs, inside `Running::resume`, whose engine context is saved in
    /// `self.engine` and waits for this switch; `self` outlives the switch (the `Fiber`
    /// owning this hand-off is alive while it is resumed).
    unsafe fn to_engine_context(&self) {
        // SAFETY: the caller's.
        unsafe { switch(self.fiber.as_ptr(), self.engine.load(Ordering::Relaxed)) };
    }

    /// On the fiber: leaves `yielded` for the engine, switches to it, and returns its reply
    /// when the engine resumes the fiber.
    pub(super) fn to_engine(&self, yielded: Yielded) -> Reply {
        self.put(Baton::ToEngine(yielded));
        // SAFETY: on the fiber, resumed by `Running::resume`.
        unsafe { self.to_engine_context() };
        match self.take() {
            Baton::ToFiber(reply) => reply,
            _ => unreachable!("a fiber only resumes with the engine's message"),
        }
    }

    /// On the fiber, when the run is over and its frames are to stay where they are: tells
    /// the engine the fiber finished, and never runs again (the stack is never reused).
    pub(super) fn abandon(&self) -> ! {
        self.put(Baton::ToEngine(Yielded::Finished));
        loop {
            // SAFETY: as in `to_engine`. Nothing resumes a fiber that did not end
            // (`Running`'s drop keeps its stack), so this switch does not return.
            unsafe { self.to_engine_context() };
        }
    }
}

// SAFETY: the engine and its fiber never run at once: each touches the baton only between
// the switch that gives it control and the switch by which it gives control away, and both
// switches run on one OS thread (the fiber runs inside the engine's `Running::resume`), so
// the switch, a call the compiler cannot see into, orders every access. Another OS thread
// only ever resumes the fiber after the `Fiber` was sent to it, which orders memory too.
unsafe impl Sync for Handoff {}

/// What one fiber holds while it lives: its stack and the donor whose thread pointer it runs
/// with.
pub(super) struct Running {
    /// The fiber's stack, back to the pool when the fiber has ended.
    stack: Option<Stack>,
    /// The donor, when it is the fiber's own (a fiber spawned at a [`Home`] uses the home's).
    donor: Option<Donor>,
    /// The fiber's code has returned (read from the hand-off after each switch).
    ended: bool,
}

/// A fiber's first reply and code, handed to [`fiber_main`] through its first registers.
struct Start {
    shared: Arc<Shared>,
    body: Code,
}

impl Running {
    /// Lays out a new fiber running `body` on a stack of the pool, with `home`'s donor (taken
    /// from the pool the first time) or one of its own; it runs from the first
    /// [`Running::resume`].
    pub(super) fn start(shared: Arc<Shared>, body: Code, home: Option<&mut Home>) -> Running {
        FSGSBASE_ONCE.call_once(|| {
            // SAFETY: `getauxval` reads the auxiliary vector the kernel gave the process.
            let hwcap2 = unsafe { getauxval(AT_HWCAP2) };
            FSGSBASE.store(u8::from(hwcap2 & HWCAP2_FSGSBASE != 0), Ordering::Relaxed);
        });
        let (thread_pointer, donor) = match home {
            Some(home) => (home.0.get_or_insert_with(Donor::take).0, None),
            None => {
                let donor = Donor::take();
                (donor.0, Some(donor))
            }
        };
        let stack = Stack::take();
        let start = Box::into_raw(Box::new(Start {
            shared: shared.clone(),
            body,
        }));
        let sp = stack.lay_out(start as usize, thread_pointer);
        shared.handoff.fiber.store(sp, Ordering::Relaxed);
        Running {
            stack: Some(stack),
            donor,
            ended: false,
        }
    }

    /// On the engine: runs the fiber with `reply` until it yields again.
    pub(super) fn resume(&mut self, shared: &Shared, reply: Reply) -> Yielded {
        let handoff = &shared.handoff;
        handoff.put(Baton::ToFiber(reply));
        // SAFETY: the fiber's saved context is the one its last switch (or `lay_out`) left,
        // on a stack this `Running` keeps mapped; it switches back to `handoff.engine`.
        unsafe { switch(handoff.engine.as_ptr(), handoff.fiber.load(Ordering::Relaxed)) };
        self.ended = handoff.ended.load(Ordering::Relaxed);
        match handoff.take() {
            Baton::ToEngine(yielded) => yielded,
            _ => unreachable!("the engine only resumes with the fiber's message"),
        }
    }
}

impl Drop for Running {
    /// Gives the stack and the donor back to the pool, unless the fiber's frames are still on
    /// them (an abandoned fiber): then both stay out of use for good.
    fn drop(&mut self) {
        let (stack, donor) = (self.stack.take(), self.donor.take());
        if self.ended {
            idle(|pool| {
                pool.stacks.extend(stack);
                pool.donors.extend(donor);
            });
        }
    }
}

/// The donor one simulated thread's fibers share during a run, so that what native or Rust
/// code keeps in thread-local storage, and `pthread_self`, follow the simulated thread from one
/// activation (a callback, its code) to the next. Empty until its first fiber; the donor goes
/// back to the pool when the home is dropped (at the end of the run).
#[derive(Default)]
pub struct Home(Option<Donor>);

impl Drop for Home {
    fn drop(&mut self) {
        if let Some(donor) = self.0.take() {
            idle(|pool| pool.donors.push(donor));
        }
    }
}

/// The thread pointer of an OS thread that sleeps for good, lent to fibers.
struct Donor(usize);

impl Donor {
    /// A donor from the pool, or a new one.
    fn take() -> Donor {
        if let Some(donor) = reuse(|pool| pool.donors.pop()) {
            return donor;
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("simclr-fiber".into())
            .spawn(move || {
                let _ = tx.send(thread_pointer());
                drop(tx);
                // Sleeping asks nothing of this thread's own thread-local storage, which
                // fibers use meanwhile.
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(86_400));
                }
            })
            .expect("spawning a fiber's donor thread");
        Donor(rx.recv().expect("a new donor sends its thread pointer"))
    }
}

/// Idle donors and stacks.
struct Pool {
    donors: Vec<Donor>,
    stacks: Vec<Stack>,
}

/// Runs start and end fibers by the thousand; reusing donors and stacks keeps that cheap.
/// This pool holds what the OS threads that ran fibers left when they ended ([`LOCAL`]).
static POOL: Mutex<Pool> = Mutex::new(Pool {
    donors: Vec::new(),
    stacks: Vec::new(),
});

fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(|e| e.into_inner())
}

thread_local! {
    /// The idle donors and stacks of the fibers this OS thread ran, taken before [`POOL`]'s
    /// and given back here: an engine's runs reuse their own, so a donor's thread-local blocks
    /// (its C library heap arena among them) and a stack's pages stay in the caches of the
    /// core the engine runs on, and no lock is shared with another engine. Only engines (an
    /// OS thread's own thread pointer) reach it, never a fiber.
    static LOCAL: RefCell<Local> = const {
        RefCell::new(Local(Pool {
            donors: Vec::new(),
            stacks: Vec::new(),
        }))
    };
}

/// An OS thread's idle donors and stacks, which go to [`POOL`] when the thread ends.
struct Local(Pool);

impl Drop for Local {
    fn drop(&mut self) {
        let mut pool = pool();
        pool.donors.append(&mut self.0.donors);
        pool.stacks.append(&mut self.0.stacks);
    }
}

/// `f` on this OS thread's idle donors and stacks, or, while the thread ends, on [`POOL`].
fn idle<T>(f: impl FnOnce(&mut Pool) -> T) -> T {
    // `try_with` takes the closure even when it cannot call it.
    let mut f = Some(f);
    let mut call = |pool: &mut Pool| (f.take().expect("called once"))(pool);
    match LOCAL.try_with(|l| call(&mut l.borrow_mut().0)) {
        Ok(t) => t,
        Err(_) => call(&mut pool()),
    }
}

/// What `take` takes from this OS thread's idle donors and stacks, else from [`POOL`].
fn reuse<T>(take: impl Fn(&mut Pool) -> Option<T>) -> Option<T> {
    idle(&take).or_else(|| take(&mut pool()))
}

/// The pool of donors and stacks, locked so that no other thread changes it while this one
/// forks ([`crate::process::fork`]).
pub(crate) struct PoolHeld(MutexGuard<'static, Pool>);

impl PoolHeld {
    /// Locks the pool.
    pub(crate) fn take() -> PoolHeld {
        PoolHeld(pool())
    }

    /// In the child of the fork: the donors did not follow (their thread-local blocks are
    /// there, their threads are not), so they are dropped from the pool; the stacks are
    /// plain memory and stay. Then unlocks the pool.
    pub(crate) fn in_child(mut self) {
        self.0.donors.clear();
        let _ = LOCAL.try_with(|l| l.borrow_mut().0.donors.clear());
    }
}

/// A fiber's stack: a private anonymous mapping whose lowest pages are a guard.
struct Stack {
    /// The mapping's lowest address.
    low: usize,
}

/// The inaccessible pages at the bottom of a fiber's stack.
const GUARD_BYTES: usize = 64 << 10;

const PROT_NONE: c_int = 0;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const MAP_PRIVATE: c_int = 0x02;
const MAP_ANONYMOUS: c_int = 0x20;
const MAP_NORESERVE: c_int = 0x4000;
const MAP_STACK: c_int = 0x20000;
/// `getauxval`'s key for the second word of hardware capabilities.
const AT_HWCAP2: c_ulong = 26;
/// The bit in `AT_HWCAP2` that says user code may use `wrfsbase`.
const HWCAP2_FSGSBASE: c_ulong = 2;
/// The MXCSR and x87 control words a new thread starts with (every exception masked, round
/// to nearest).
const INITIAL_MXCSR: u64 = 0x1f80;
const INITIAL_X87_CW: u64 = 0x037f;

extern "C" {
    fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, off: c_long) -> *mut c_void;
    fn mprotect(addr: *mut c_void, len: usize, prot: c_int) -> c_int;
    fn getauxval(key: c_ulong) -> c_ulong;
}

impl Stack {
    /// A stack from the pool, or a new one.
    fn take() -> Stack {
        reuse(|pool| pool.stacks.pop()).unwrap_or_else(Stack::map)
    }

    fn map() -> Stack {
        // SAFETY: a new private anonymous mapping overlaps nothing; its result is checked.
        let low = unsafe {
            mmap(
                std::ptr::null_mut(),
                STACK_BYTES,
                PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK,
                -1,
                0,
            )
        };
        assert!(low as isize != -1, "cannot map a fiber's stack");
        // SAFETY: the guard lies inside the mapping just made, which nothing uses yet.
        let guarded = unsafe { mprotect(low, GUARD_BYTES, PROT_NONE) };
        assert_eq!(guarded, 0, "cannot protect a fiber's stack guard");
        Stack { low: low as usize }
    }

    /// Lays out the stack as a context that, when switched to, calls [`fiber_main`] with
    /// `start` and runs with `thread_pointer`; returns its saved stack pointer.
    fn lay_out(&self, start: usize, thread_pointer: usize) -> usize {
        let top = self.low + STACK_BYTES;
        // What `switch` pops, lowest first: the control words, the thread pointer, R15, R14,
        // R13 (the routine to call), R12 (its argument), RBX, RBP (0: the frame chain ends),
        // the return address (the start routine), then two zero words so that the start
        // routine begins with a 16-byte-aligned stack pointer.
        let words: [u64; 11] = [
            INITIAL_MXCSR | INITIAL_X87_CW << 32,
            thread_pointer as u64,
            0,
            0,
            fiber_main as *const () as u64,
            start as u64,
            0,
            0,
            start_routine as *const () as u64,
            0,
            0,
        ];
        let sp = top - 8 * words.len();
        // SAFETY: the words lie in the top of this stack's writable pages, which no fiber uses
        // (a stack from the pool held an ended fiber, whose frames are gone).
        unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), sp as *mut u64, words.len()) };
        sp
    }
}

/// Whether `wrfsbase` may be used (read by [`switch`]; 0 until the first fiber starts, then
/// the kernel's answer).
static FSGSBASE: AtomicU8 = AtomicU8::new(0);
static FSGSBASE_ONCE: Once = Once::new();

/// The running OS thread's thread pointer (the first word at FS:0 is the pointer itself).
fn thread_pointer() -> usize {
    let tp: usize;
    // SAFETY: FS:0 holds the thread pointer on every x86-64 Linux thread (psABI TLS).
    unsafe {
        std::arch::asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags))
    };
    tp
}

/// Saves the running context (callee-saved registers, control words, thread pointer) on its
/// stack, stores its stack pointer at `save`, and restores the context saved at stack pointer
/// `to`; returns when something switches back to the saved context.
///
/// # Safety
///
/// `to` must be a context saved by `switch` or laid out by [`Stack::lay_out`], on memory that
/// stays mapped while it runs, and not running; `save` must be valid for a write.
#[unsafe(naked)]
unsafe extern "C" fn switch(save: *mut usize, to: usize) {
    std::arch::naked_asm!(
        "push rbp",
        "push rbx",
        "push r12",
        "push r13",
        "push r14",
        "push r15",
        "mov rax, qword ptr fs:[0]",
        "push rax",
        "sub rsp, 8",
        "stmxcsr dword ptr [rsp]",
        "fnstcw word ptr [rsp + 4]",
        "mov qword ptr [rdi], rsp",
        "mov rsp, rsi",
        "ldmxcsr dword ptr [rsp]",
        "fldcw word ptr [rsp + 4]",
        "add rsp, 8",
        "pop rsi",
        "cmp byte ptr [rip + {fsgsbase}], 0",
        "je 2f",
        "wrfsbase rsi",
        "jmp 3f",
        "2:",
        // arch_prctl(ARCH_SET_FS, rsi): the system call clobbers RAX, RCX and R11 only,
        // which a callee need not keep.
        "mov edi, 0x1002",
        "mov eax, 158",
        "syscall",
        "3:",
        "pop r15",
        "pop r14",
        "pop r13",
        "pop r12",
        "pop rbx",
        "pop rbp",
        "ret",
        fsgsbase = sym FSGSBASE,
    )
}

/// Where a new fiber's first switch returns to: calls R13 with R12 as its argument. Its
/// unwind information marks the return address undefined, so backtraces end here.
#[unsafe(naked)]
unsafe extern "C" fn start_routine() {
    std::arch::naked_asm!(
        ".cfi_startproc",
        ".cfi_undefined rip",
        "mov rdi, r12",
        "call r13",
        "ud2",
        ".cfi_endproc",
    )
}

/// A fiber's first frame: runs its code and hands the engine the last message, then switches
/// away for good.
extern "C" fn fiber_main(start: usize) -> ! {
    // SAFETY: `start` is the box `Running::start` leaked for this fiber; only this first
    // frame of the fiber takes it back, once.
    let Start { shared, body } = *unsafe { Box::from_raw(start as *mut Start) };
    let first = match shared.handoff.take() {
        Baton::ToFiber(reply) => reply,
        _ => unreachable!("a fiber starts with the engine's message"),
    };
    let last = run_fiber(&shared, body, first);
    let handoff: *const Handoff = &shared.handoff;
    shared.handoff.put(Baton::ToEngine(last));
    shared.handoff.ended.store(true, Ordering::Relaxed);
    // The `Fiber` that resumed this one holds the shared state until the switch below
    // returns to it; this frame never ends, so it lets go of its reference now.
    drop(shared);
    loop {
        // SAFETY: `handoff` lives in the shared state the resuming `Fiber` still holds; the
        // engine's context is saved in it. Nothing resumes an ended fiber.
        unsafe { (*handoff).to_engine_context() };
    }
}
