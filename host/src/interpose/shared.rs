//! Read-write locks, one-time initialization and semaphores on simulated threads.
//!
//! On a simulated thread each is kept in the object's own memory, in the C library's own
//! encoding of its state (the all-zero initializers `PTHREAD_RWLOCK_INITIALIZER` and
//! `PTHREAD_ONCE_INIT` are "free"; a lock the C library took and released before, while a
//! run was set up, is free too), and a thread that must wait waits on a condition variable of the process named
//! after the object's address, so a wait is a scheduling point with its wait-for edge, and a
//! holder parked by the scheduler never blocks an OS thread for real. Only one simulated thread
//! runs between two scheduling points, so reading and changing the word needs no lock of its
//! own: the condition variable's generation is read first, so a release between the check and
//! the wait is not lost.
//!
//! - `pthread_rwlock_*` (`std::shared_mutex`): any number of readers, or one writer;
//! - `pthread_once` (`std::call_once`): the first caller runs the routine, later ones wait for
//!   it to end; done is glibc's own value (2), so the C library agrees afterwards;
//! - `sem_*`: a count; `sem_wait` waits for it to be positive.
//!
//! The engine is told who holds each ([`SimOs::cond_holding`]): a read-write lock's writer
//! or each of its readers, the thread running a once-routine, each thread that took a
//! semaphore's count and has not posted it. A thread waiting on one waits for them in the
//! wait-for graph (so a cycle through a `std::shared_mutex` is a deadlock with every link
//! named), and the timeline shows them holding it.

use super::clocks::{duration_of, simulated_clock, Timespec};
use super::{
    original, EBUSY, ETIMEDOUT, ONCE, RWLOCK_INIT, RWLOCK_RDLOCK, RWLOCK_TRYRDLOCK, RWLOCK_TRYWRLOCK,
    RWLOCK_UNLOCK, RWLOCK_WRLOCK, SEM_GETVALUE, SEM_INIT, SEM_POST, SEM_TIMEDWAIT, SEM_TRYWAIT, SEM_WAIT,
};
use sim_clr::process::fiber::{self, Holding};
use sim_clr::process::{unobserved, SimOs};
use std::ffi::{c_int, c_uint, c_void};
use std::time::Duration;

/// `EAGAIN`: `sem_trywait` on a semaphore at zero.
const EAGAIN: c_int = 11;

/// The process condition variable for the object at `address` (`kind` names its kind).
fn cond(os: &SimOs, kind: &str, address: *mut c_void) -> (u32, u64) {
    // The name is the simulator's bookkeeping, not the library's allocation.
    unobserved(|| {
        let (key, name) = super::object_name(kind, address);
        os.cond_open_as(&key, &name)
    })
}

/// How a take of an object is held: by the taker until it releases it, or (a semaphore) a
/// count any thread may give back.
fn took(kind: &str) -> Holding {
    Holding::Took {
        any_thread_releases: kind == SEMAPHORE,
    }
}

/// Notes that this simulated thread took (or released) the object at `object`.
fn hold(kind: &str, object: *mut c_void, what: Holding) {
    let os = SimOs::new();
    os.cond_holding(cond(&os, kind, object).0, what);
}

/// Waits, on a simulated thread, until `take` succeeds on the word at `word` (true: the
/// thread holds the object) or `timeout` passes (false).
fn wait_for(
    kind: &str,
    object: *mut c_void,
    word: *mut u64,
    timeout: Duration,
    take: impl Fn(u64) -> Option<u64>,
) -> bool {
    let os = SimOs::new();
    loop {
        let (id, generation) = cond(&os, kind, object);
        if try_take(word, &take) {
            os.cond_holding(id, took(kind));
            return true;
        }
        if !os.cond_wait(id, generation, timeout) {
            return false;
        }
    }
}

/// [`try_take`] of the object at `object`, noting the hold when it succeeds.
fn try_hold(kind: &str, object: *mut c_void, take: impl Fn(u64) -> Option<u64>) -> bool {
    let taken = try_take(object.cast(), take);
    if taken {
        hold(kind, object, took(kind));
    }
    taken
}

/// Changes the word at `word` as `take` says, if it says so (true); on a simulated thread,
/// where only this thread runs until its next scheduling point.
fn try_take(word: *mut u64, take: impl Fn(u64) -> Option<u64>) -> bool {
    // SAFETY: `word` is a redirected object's first word, its caller's.
    match take(unsafe { word.read_volatile() }) {
        Some(next) => {
            // SAFETY: as above.
            unsafe { word.write_volatile(next) };
            true
        }
        None => false,
    }
}

/// Wakes the threads waiting on the object at `object`.
fn wake(kind: &str, object: *mut c_void) {
    let os = SimOs::new();
    os.cond_notify(cond(&os, kind, object).0);
}

/// A read-write lock's state, in glibc's own encoding of the lock's first 32-bit field
/// (`__readers`), so a lock the C library used outside the simulation (a callback while a
/// run is set up) reads the same here, and the C library reads what is left here: the
/// readers count from bit 3, bit 1 set while a writer holds it, bit 0 the lock's phase
/// (glibc leaves it set after a writer's release) and bit 2 (readers waiting, glibc's) are
/// kept as they were. (glibc 2.34 `nptl/pthread_rwlock_common.c`: `PTHREAD_RWLOCK_WRPHASE`
/// 1, `PTHREAD_RWLOCK_WRLOCKED` 2, `PTHREAD_RWLOCK_RWAITING` 4, `PTHREAD_RWLOCK_READER_SHIFT`
/// 3; observed here: a `std::shared_mutex` a writer took and released outside the simulation
/// reads 3 while held and 1 after.)
const READER: u64 = 1 << 3;
const WRITER: u64 = 1 << 1;
/// The bits of the word that say who holds the lock (readers and writer); the rest are kept.
const HELD: u64 = 0xffff_fff8 | WRITER;
const RWLOCK: &str = "pthread_rwlock";

type LockFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// `lock` on a simulated thread, the C library's `slot` elsewhere.
///
/// # Safety
/// `lock` points at a `pthread_rwlock_t`.
unsafe fn rwlock(
    lock: *mut c_void,
    slot: &std::sync::atomic::AtomicUsize,
    wait: bool,
    take: fn(u64) -> Option<u64>,
) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<LockFn>(slot)(lock) };
    }
    if wait {
        wait_for(RWLOCK, lock, lock.cast(), Duration::MAX, take);
        0
    } else if try_hold(RWLOCK, lock, take) {
        0
    } else {
        EBUSY
    }
}

fn read_lock(word: u64) -> Option<u64> {
    (word & WRITER == 0).then_some(word + READER)
}

fn write_lock(word: u64) -> Option<u64> {
    (word & HELD == 0).then_some(word | WRITER)
}

pub(super) unsafe extern "C-unwind" fn rwlock_init(lock: *mut c_void, attributes: *const c_void) -> c_int {
    if !fiber::on_fiber() {
        type F = unsafe extern "C" fn(*mut c_void, *const c_void) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&RWLOCK_INIT)(lock, attributes) };
    }
    // SAFETY: `lock` points at the caller's pthread_rwlock_t; free is zero.
    unsafe { lock.cast::<u64>().write_volatile(0) };
    0
}

pub(super) unsafe extern "C-unwind" fn rwlock_rdlock(lock: *mut c_void) -> c_int {
    // SAFETY: the caller's lock.
    unsafe { rwlock(lock, &RWLOCK_RDLOCK, true, read_lock) }
}

pub(super) unsafe extern "C-unwind" fn rwlock_wrlock(lock: *mut c_void) -> c_int {
    // SAFETY: the caller's lock.
    unsafe { rwlock(lock, &RWLOCK_WRLOCK, true, write_lock) }
}

pub(super) unsafe extern "C-unwind" fn rwlock_tryrdlock(lock: *mut c_void) -> c_int {
    // SAFETY: the caller's lock.
    unsafe { rwlock(lock, &RWLOCK_TRYRDLOCK, false, read_lock) }
}

pub(super) unsafe extern "C-unwind" fn rwlock_trywrlock(lock: *mut c_void) -> c_int {
    // SAFETY: the caller's lock.
    unsafe { rwlock(lock, &RWLOCK_TRYWRLOCK, false, write_lock) }
}

pub(super) unsafe extern "C-unwind" fn rwlock_unlock(lock: *mut c_void) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<LockFn>(&RWLOCK_UNLOCK)(lock) };
    }
    let release = |word: u64| {
        Some(if word & WRITER != 0 {
            word & !WRITER
        } else if word & HELD >= READER {
            word - READER
        } else {
            word
        })
    };
    try_take(lock.cast(), release);
    hold(RWLOCK, lock, Holding::Released);
    wake(RWLOCK, lock);
    0
}

const ONCE_CONTROL: &str = "pthread_once";

/// `pthread_once`'s states: glibc's in-progress and done values.
const ONCE_RUNNING: u32 = 1;
const ONCE_DONE: u32 = 2;

pub(super) unsafe extern "C-unwind" fn once(
    control: *mut c_int,
    routine: unsafe extern "C-unwind" fn(),
) -> c_int {
    if !fiber::on_fiber() {
        type F = unsafe extern "C" fn(*mut c_int, unsafe extern "C-unwind" fn()) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&ONCE)(control, routine) };
    }
    let state = control.cast::<u32>();
    let os = SimOs::new();
    loop {
        let (id, generation) = cond(&os, ONCE_CONTROL, control.cast());
        // SAFETY: the caller's pthread_once_t; only this simulated thread runs now.
        match unsafe { state.read_volatile() } & 3 {
            0 => {
                // SAFETY: as above.
                unsafe { state.write_volatile(ONCE_RUNNING) };
                os.cond_holding(id, took(ONCE_CONTROL));
                // SAFETY: the caller's routine, run once.
                unsafe { routine() };
                // SAFETY: as above.
                unsafe { state.write_volatile(ONCE_DONE) };
                os.cond_holding(id, Holding::Released);
                wake(ONCE_CONTROL, control.cast());
                return 0;
            }
            ONCE_RUNNING => {
                os.cond_wait(id, generation, Duration::MAX);
            }
            _ => return 0,
        }
    }
}

const SEMAPHORE: &str = "sem";

fn sem_take(word: u64) -> Option<u64> {
    let count = word & u64::from(u32::MAX);
    count.checked_sub(1)
}

/// Sets `errno` and returns -1, as the `sem_*` functions fail.
fn fail(errno: c_int) -> c_int {
    // SAFETY: this thread's errno.
    unsafe { *libc::__errno_location() = errno };
    -1
}

pub(super) unsafe extern "C-unwind" fn sem_init(sem: *mut c_void, shared: c_int, value: c_uint) -> c_int {
    if !fiber::on_fiber() {
        type F = unsafe extern "C" fn(*mut c_void, c_int, c_uint) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&SEM_INIT)(sem, shared, value) };
    }
    // SAFETY: the caller's sem_t; its first word holds the count.
    unsafe { sem.cast::<u64>().write_volatile(value.into()) };
    0
}

pub(super) unsafe extern "C-unwind" fn sem_wait(sem: *mut c_void) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<LockFn>(&SEM_WAIT)(sem) };
    }
    wait_for(SEMAPHORE, sem, sem.cast(), Duration::MAX, sem_take);
    0
}

pub(super) unsafe extern "C-unwind" fn sem_trywait(sem: *mut c_void) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<LockFn>(&SEM_TRYWAIT)(sem) };
    }
    if try_hold(SEMAPHORE, sem, sem_take) {
        0
    } else {
        fail(EAGAIN)
    }
}

pub(super) unsafe extern "C-unwind" fn sem_timedwait(sem: *mut c_void, at: *const Timespec) -> c_int {
    if !fiber::on_fiber() || at.is_null() {
        type F = unsafe extern "C" fn(*mut c_void, *const Timespec) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&SEM_TIMEDWAIT)(sem, at) };
    }
    // SAFETY: a non-NULL deadline points at the caller's timespec (CLOCK_REALTIME).
    let timeout = duration_of(unsafe { &*at }).saturating_sub(simulated_clock(0));
    if wait_for(SEMAPHORE, sem, sem.cast(), timeout, sem_take) {
        0
    } else {
        fail(ETIMEDOUT)
    }
}

pub(super) unsafe extern "C-unwind" fn sem_post(sem: *mut c_void) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<LockFn>(&SEM_POST)(sem) };
    }
    try_take(sem.cast(), |word| Some((word & u64::from(u32::MAX)) + 1));
    hold(SEMAPHORE, sem, Holding::Released);
    wake(SEMAPHORE, sem);
    0
}

pub(super) unsafe extern "C-unwind" fn sem_getvalue(sem: *mut c_void, value: *mut c_int) -> c_int {
    if !fiber::on_fiber() {
        type F = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&SEM_GETVALUE)(sem, value) };
    }
    // SAFETY: the caller's sem_t and int.
    unsafe { value.write((sem.cast::<u64>().read_volatile() & u64::from(u32::MAX)) as c_int) };
    0
}
