//! Calls that would leave the simulation, caught before they do.
//!
//! A hosted library that blocks in a call the process does not model (a `read` of an empty
//! pipe, an `epoll_wait`, a raw futex wait) would stop its OS thread for real while the thread
//! that could wake it is parked by the scheduler; one that starts an OS thread itself
//! (`clone`, the `clone` system call) would run code no schedule controls. Either makes a
//! run's `ok` meaningless. So on a simulated thread (and while a run is set up) these imports
//! look first: a call that would return at once (data is waiting, a zero timeout, a
//! non-blocking descriptor, a futex whose word already changed) goes to the C library as
//! usual; one that would wait ends the run as `unredirected_block`, and a thread creation as
//! `escaped_thread`, each naming the import. Anywhere else they are the C library's.

use super::{
    original, set_errno, signals, ACCEPT, ACCEPT4, CLONE, EPOLL_PWAIT, EPOLL_WAIT, PAUSE, READ, RECV,
    RECVFROM, SELECT, SIGSUSPEND, SIGWAIT, SYSCALL, SYSTEM, WAITPID,
};
use sim_clr::process::{fiber, leave_simulation, Ending};
use std::ffi::{c_char, c_int, c_long, c_void};

/// `EINTR`: what a call that must not block returns while a run is set up (the run ends as
/// soon as it is set up).
const EINTR: c_int = 4;
/// `POLLIN`.
const POLLIN: i16 = 1;
/// `F_GETFL`.
const F_GETFL: c_int = 3;
/// `O_NONBLOCK`.
const O_NONBLOCK: c_int = 0o4000;
/// `WNOHANG`.
const WNOHANG: c_int = 1;
/// System call numbers (x86-64).
const SYS_CLONE: c_long = 56;
const SYS_TKILL: c_long = 200;
const SYS_TGKILL: c_long = 234;
const SYS_FUTEX: c_long = 202;
const SYS_CLONE3: c_long = 435;

/// `struct pollfd`.
#[repr(C)]
struct PollFd {
    fd: c_int,
    events: i16,
    revents: i16,
}

extern "C" {
    #[link_name = "poll"]
    fn libc_poll(fds: *mut PollFd, count: u64, timeout: c_int) -> c_int;
    #[link_name = "fcntl"]
    fn libc_fcntl(fd: c_int, command: c_int, ...) -> c_int;
}

/// True when the calling code belongs to a simulated process (a simulated thread, or a run
/// being set up).
fn watched() -> bool {
    fiber::in_process()
}

/// Leaves the simulation as `ending` says, naming `import`. Returns (with `errno` set to
/// `EINTR`) only while a run is set up; the caller then returns -1.
fn leave(ending: Ending, import: &str, why: &str) {
    let message = match ending {
        Ending::EscapedThread => format!(
            "`{import}` would start an OS thread outside the simulation ({why}); create threads with pthread_create or std::thread"
        ),
        _ => format!(
            "`{import}` would block outside the simulation ({why}): no simulated thread could end the wait"
        ),
    };
    leave_simulation(ending, &message);
    set_errno(EINTR);
}

/// Whether reading descriptor `fd` would wait: nothing to read now, and the descriptor is
/// blocking. A descriptor the C library would refuse is left to it.
fn read_would_block(fd: c_int) -> bool {
    let mut poll = PollFd {
        fd,
        events: POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    let ready = unsafe { libc_poll(&mut poll, 1, 0) };
    if ready != 0 {
        return false;
    }
    // SAFETY: F_GETFL takes no argument.
    let flags = unsafe { libc_fcntl(fd, F_GETFL) };
    flags >= 0 && flags & O_NONBLOCK == 0
}

/// A read-like call of descriptor `fd` (`read`, `recv`, `recvfrom`, `accept`, `accept4`):
/// the C library's, unless it would wait on a simulated thread.
fn reading(import: &str, fd: c_int, call: impl FnOnce() -> isize) -> isize {
    if watched() && read_would_block(fd) {
        leave(
            Ending::UnredirectedBlock,
            import,
            &format!("descriptor {fd} has nothing to read and is blocking"),
        );
        return -1;
    }
    call()
}

pub(super) unsafe extern "C-unwind" fn read(fd: c_int, buffer: *mut c_void, count: usize) -> isize {
    type F = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
    // SAFETY: the C library's own function, with the caller's arguments.
    reading("read", fd, || unsafe { original::<F>(&READ)(fd, buffer, count) })
}

pub(super) unsafe extern "C-unwind" fn recv(
    fd: c_int,
    buffer: *mut c_void,
    count: usize,
    flags: c_int,
) -> isize {
    type F = unsafe extern "C" fn(c_int, *mut c_void, usize, c_int) -> isize;
    // SAFETY: the C library's own function, with the caller's arguments.
    reading("recv", fd, || unsafe {
        original::<F>(&RECV)(fd, buffer, count, flags)
    })
}

pub(super) unsafe extern "C-unwind" fn recvfrom(
    fd: c_int,
    buffer: *mut c_void,
    count: usize,
    flags: c_int,
    from: *mut c_void,
    length: *mut u32,
) -> isize {
    type F = unsafe extern "C" fn(c_int, *mut c_void, usize, c_int, *mut c_void, *mut u32) -> isize;
    // SAFETY: the C library's own function, with the caller's arguments.
    reading("recvfrom", fd, || unsafe {
        original::<F>(&RECVFROM)(fd, buffer, count, flags, from, length)
    })
}

pub(super) unsafe extern "C-unwind" fn accept(fd: c_int, address: *mut c_void, length: *mut u32) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut c_void, *mut u32) -> c_int;
    // SAFETY: the C library's own function, with the caller's arguments.
    reading("accept", fd, || unsafe {
        original::<F>(&ACCEPT)(fd, address, length) as isize
    }) as c_int
}

pub(super) unsafe extern "C-unwind" fn accept4(
    fd: c_int,
    address: *mut c_void,
    length: *mut u32,
    flags: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut c_void, *mut u32, c_int) -> c_int;
    // SAFETY: the C library's own function, with the caller's arguments.
    reading("accept4", fd, || unsafe {
        original::<F>(&ACCEPT4)(fd, address, length, flags) as isize
    }) as c_int
}

/// An `epoll_wait`-like call: looked at once without waiting; if nothing is ready and it
/// would wait, the simulation is left.
fn waiting(import: &str, timeout: c_int, look: impl Fn(c_int) -> c_int) -> c_int {
    if !watched() || timeout == 0 {
        return look(timeout);
    }
    match look(0) {
        0 => {
            leave(
                Ending::UnredirectedBlock,
                import,
                "nothing is ready and it has a timeout",
            );
            -1
        }
        ready => ready,
    }
}

pub(super) unsafe extern "C-unwind" fn epoll_wait(
    epoll: c_int,
    events: *mut c_void,
    max: c_int,
    timeout: c_int,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut c_void, c_int, c_int) -> c_int;
    // SAFETY: the C library's own function, with the caller's arguments.
    waiting("epoll_wait", timeout, |t| unsafe {
        original::<F>(&EPOLL_WAIT)(epoll, events, max, t)
    })
}

pub(super) unsafe extern "C-unwind" fn epoll_pwait(
    epoll: c_int,
    events: *mut c_void,
    max: c_int,
    timeout: c_int,
    mask: *const c_void,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut c_void, c_int, c_int, *const c_void) -> c_int;
    // SAFETY: the C library's own function, with the caller's arguments.
    waiting("epoll_pwait", timeout, |t| unsafe {
        original::<F>(&EPOLL_PWAIT)(epoll, events, max, t, mask)
    })
}

/// `struct timeval`.
#[repr(C)]
pub(super) struct Timeval {
    seconds: i64,
    micros: i64,
}

/// `fd_set`: 1,024 bits.
type FdSet = [u64; 16];

pub(super) unsafe extern "C-unwind" fn select(
    count: c_int,
    read: *mut FdSet,
    write: *mut FdSet,
    error: *mut FdSet,
    timeout: *mut Timeval,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *mut FdSet, *mut FdSet, *mut FdSet, *mut Timeval) -> c_int;
    // SAFETY: the C library's own function.
    let select = unsafe { original::<F>(&SELECT) };
    // SAFETY: a non-NULL timeout points at the caller's timeval.
    let zero = !timeout.is_null() && unsafe { (*timeout).seconds == 0 && (*timeout).micros == 0 };
    if !watched() || zero {
        // SAFETY: the caller's arguments.
        return unsafe { select(count, read, write, error, timeout) };
    }
    // A look without waiting, on copies of the sets (a look that finds nothing clears them).
    // SAFETY: non-NULL sets point at the caller's fd_sets.
    let copy = |set: *mut FdSet| (!set.is_null()).then(|| unsafe { *set });
    let mut sets = [copy(read), copy(write), copy(error)];
    let mut now = Timeval {
        seconds: 0,
        micros: 0,
    };
    let [r, w, e] = sets
        .each_mut()
        .map(|s| s.as_mut().map_or(std::ptr::null_mut(), |s| s as *mut FdSet));
    // SAFETY: valid copies (or NULL) and a zero timeout.
    let ready = unsafe { select(count, r, w, e, &mut now) };
    if ready == 0 {
        leave(
            Ending::UnredirectedBlock,
            "select",
            "nothing is ready and it has a timeout",
        );
        return -1;
    }
    for (set, looked) in [read, write, error].into_iter().zip(sets) {
        if let Some(looked) = looked {
            // SAFETY: the caller's non-NULL fd_set gets what the look found.
            unsafe { *set = looked };
        }
    }
    ready
}

/// A call that always waits for something outside the process (a signal, a child process).
fn always_waits(import: &str, why: &str) -> bool {
    if watched() {
        leave(Ending::UnredirectedBlock, import, why);
        return true;
    }
    false
}

pub(super) unsafe extern "C-unwind" fn pause() -> c_int {
    if always_waits("pause", "it waits for a signal") {
        return -1;
    }
    // SAFETY: the C library's own function.
    unsafe { original::<unsafe extern "C" fn() -> c_int>(&PAUSE)() }
}

pub(super) unsafe extern "C-unwind" fn sigsuspend(mask: *const c_void) -> c_int {
    if always_waits("sigsuspend", "it waits for a signal") {
        return -1;
    }
    // SAFETY: the C library's own function, with the caller's argument.
    unsafe { original::<unsafe extern "C" fn(*const c_void) -> c_int>(&SIGSUSPEND)(mask) }
}

pub(super) unsafe extern "C-unwind" fn sigwait(set: *const c_void, signal: *mut c_int) -> c_int {
    if always_waits("sigwait", "it waits for a signal") {
        return EINTR;
    }
    type F = unsafe extern "C" fn(*const c_void, *mut c_int) -> c_int;
    // SAFETY: the C library's own function, with the caller's arguments.
    unsafe { original::<F>(&SIGWAIT)(set, signal) }
}

pub(super) unsafe extern "C-unwind" fn waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int {
    if options & WNOHANG == 0 && always_waits("waitpid", "it waits for a child process") {
        return -1;
    }
    type F = unsafe extern "C" fn(c_int, *mut c_int, c_int) -> c_int;
    // SAFETY: the C library's own function, with the caller's arguments.
    unsafe { original::<F>(&WAITPID)(pid, status, options) }
}

pub(super) unsafe extern "C-unwind" fn system(command: *const c_char) -> c_int {
    if !command.is_null() && always_waits("system", "it waits for a child process") {
        return -1;
    }
    // SAFETY: the C library's own function, with the caller's argument.
    unsafe { original::<unsafe extern "C" fn(*const c_char) -> c_int>(&SYSTEM)(command) }
}

/// `clone(fn, stack, flags, arg, parent_tid, tls, child_tid)`.
pub(super) unsafe extern "C-unwind" fn clone(
    start: *const c_void,
    stack: *mut c_void,
    flags: c_int,
    argument: *mut c_void,
    parent: *mut c_int,
    tls: *mut c_void,
    child: *mut c_int,
) -> c_int {
    if watched() {
        leave(Ending::EscapedThread, "clone", "a thread of its own");
        return -1;
    }
    type F = unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        c_int,
        *mut c_void,
        *mut c_int,
        *mut c_void,
        *mut c_int,
    ) -> c_int;
    // SAFETY: the C library's own function, with the caller's arguments.
    unsafe { original::<F>(&CLONE)(start, stack, flags, argument, parent, tls, child) }
}

/// Futex operations that wait (`FUTEX_WAIT`, `FUTEX_LOCK_PI`, `FUTEX_WAIT_BITSET`,
/// `FUTEX_WAIT_REQUEUE_PI`, `FUTEX_LOCK_PI2`), without the private and clock flags.
const FUTEX_WAITS: [c_long; 5] = [0, 6, 9, 11, 13];
/// The lock operations among them.
const FUTEX_LOCK_PI: c_long = 6;
const FUTEX_LOCK_PI2: c_long = 13;
/// The futex operation's command bits.
const FUTEX_COMMAND: c_long = 0x7f;

/// `syscall(number, ...)`: the C library's, except a futex wait that would wait, a thread
/// creation, and the profiling signal sent to a simulated thread (the process's: [`signals`]). (The C library's `syscall` reads its six arguments from registers, so it is
/// called here with all six.)
pub(super) unsafe extern "C-unwind" fn syscall(
    number: c_long,
    a: c_long,
    b: c_long,
    c: c_long,
    d: c_long,
    e: c_long,
    f: c_long,
) -> c_long {
    if watched() {
        match number {
            SYS_CLONE | SYS_CLONE3 => {
                leave(Ending::EscapedThread, "syscall", "the clone system call");
                return -1;
            }
            // The profiling signal to a simulated thread: `tgkill(group, thread, signal)`,
            // `tkill(thread, signal)`.
            SYS_TGKILL | SYS_TKILL => {
                let (thread, signal) = if number == SYS_TGKILL { (b, c) } else { (a, b) };
                match signals::send(thread as u32, signal as c_int) {
                    Some(0) => return 0,
                    Some(error) => {
                        set_errno(error);
                        return -1;
                    }
                    None => {}
                }
            }
            SYS_FUTEX if FUTEX_WAITS.contains(&(b & FUTEX_COMMAND)) => {
                // A wait returns at once when the word no longer holds the value; a lock
                // operation when the word says no thread owns it.
                // SAFETY: a futex word is an aligned 32-bit word of the caller's.
                let word = unsafe { (a as *const i32).read_volatile() };
                let waits = match b & FUTEX_COMMAND {
                    FUTEX_LOCK_PI | FUTEX_LOCK_PI2 => word != 0,
                    _ => word == c as i32,
                };
                if waits {
                    leave(Ending::UnredirectedBlock, "syscall", "a futex wait");
                    return -1;
                }
            }
            _ => {}
        }
    }
    type F = unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;
    // SAFETY: the C library's own function, with the caller's arguments.
    unsafe { original::<F>(&SYSCALL)(number, a, b, c, d, e, f) }
}
