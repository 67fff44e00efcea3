//! The hosted library's blocking calls, clocks and threads, seen by the simulated process.
//!
//! Native code blocks, reads clocks and starts threads through the C library:
//! `pthread_mutex_lock`, `nanosleep`, `clock_gettime`, `pthread_create`, … On a simulated
//! thread of a running process
//! ([`sim_clr::process`]) such a call must be a scheduling point the deterministic scheduler
//! sees, or one thread blocking on a mutex that a parked thread holds would stop the whole
//! simulation in real time, and a thread the library starts must be one of the process's. So,
//! right after loading, the library's imports of these functions are redirected: the entries
//! of its global offset table that the dynamic linker filled with the C library's addresses
//! are rewritten to point here (the loader's own relocation records say where they are).
//!
//! On a simulated thread a redirected call goes to the process's OS layer: each
//! `pthread_mutex_t` is a named mutex of the process (named after its address, so every
//! thread opens the same one), taken and released as the engine decides, with its wait-for
//! edges; read-write locks, `pthread_once` and semaphores wait on the process's condition
//! variables ([`shared`]); a sleep, `clock_nanosleep` or a `poll` with a timeout passes in
//! virtual time and the clocks (`clock_gettime`, `gettimeofday`, `time`) read it
//! ([`clocks`]); `pthread_create` creates
//! one of the threads the scenario declares `start = "profiler"` (also while a run is set
//! up, when the profiler's `Initialize` runs) and hands back a handle no real thread has,
//! which `pthread_self` (on that thread), `pthread_join`, `pthread_detach` and
//! `pthread_setname_np` understand.
//! Anywhere else (a frozen runtime's callbacks, a thread the library started outside any
//! process) it calls the C library function the entry held before, so the library behaves
//! as it always did.
//!
//! A profiling signal's handler installed with `sigaction` runs on the simulated thread that
//! `pthread_kill` or `tgkill` interrupts, with its registers in the `ucontext_t`
//! ([`signals`]).
//!
//! Calls that would wait for something no simulated thread can provide (a `read` of an empty
//! pipe, `epoll_wait`, a raw futex wait) or start an OS thread of their own (`clone`) end the
//! run instead, naming the import ([`escapes`]).
//!
//! A library built with `-fsanitize=thread` gets a stand-in for the ThreadSanitizer runtime
//! ([`tsan`]): each of its atomic operations is a scheduling point.
//!
//! The library's own imports are redirected, and the thread, sleep, clock and condition
//! variable imports of the C++ runtime it loaded (`std::thread` calls `pthread_create` and
//! `std::chrono::steady_clock::now` reads the clock inside libstdc++); other calls the C
//! library or the C++ runtime make internally are not. Every mutex is
//! treated as a plain one on a simulated thread (a recursive mutex taken twice deadlocks).

mod clocks;
mod escapes;
mod names;
mod shared;
mod signals;
pub(crate) mod tsan;

use crate::library::{dlopen, dlsym, RTLD_NOW};
use clocks::{
    clock_gettime, clock_nanosleep, duration_of, gettimeofday, nanosleep, poll, simulated_clock, sleep, time,
    usleep, Timespec, REALTIME_START,
};
use corprof::os::{OsThread, Sync as _};
use escapes::{
    accept, accept4, clone, epoll_pwait, epoll_wait, pause, read, recv, recvfrom, select, sigsuspend,
    sigwait, syscall, system, waitpid,
};
use shared::{
    once, rwlock_init, rwlock_rdlock, rwlock_tryrdlock, rwlock_trywrlock, rwlock_unlock, rwlock_wrlock,
    sem_getvalue, sem_init, sem_post, sem_timedwait, sem_trywait, sem_wait,
};
use signals::{pthread_kill, pthread_sigmask, sigaction, sigprocmask, tgkill};
use sim_clr::process::{fiber, unobserved, SimOs};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `EBUSY`: `pthread_mutex_trylock` on a mutex another thread holds.
const EBUSY: c_int = 16;

/// A redirected function: its name, its replacement here, the C library's own function
/// (found in the global scope when the first entry is rewritten), and whether the C++
/// runtime's imports of it are redirected too (for its clocks, sleeps and condition
/// variables: `std::condition_variable::wait` and `notify_all` live there).
struct Redirect {
    name: &'static [u8],
    replacement: usize,
    original: &'static AtomicUsize,
    in_cxx_runtime: bool,
}

/// Declares, for each redirected function, the static holding its original, and
/// `redirects()` listing them all: those of the library only, then those redirected in the
/// C++ runtime too.
macro_rules! redirected {
    (
        library only: { $($original:ident: $name:literal => $replacement:ident,)* }
        C++ runtime too: { $($cxx_original:ident: $cxx_name:literal => $cxx_replacement:ident,)* }
    ) => {
        $(static $original: AtomicUsize = AtomicUsize::new(0);)*
        $(static $cxx_original: AtomicUsize = AtomicUsize::new(0);)*

        fn redirects() -> Vec<Redirect> {
            let redirect = |name, replacement, original, in_cxx_runtime| Redirect {
                name,
                replacement,
                original,
                in_cxx_runtime,
            };
            vec![
                $(redirect($name, $replacement as *const () as usize, &$original, false),)*
                $(redirect($cxx_name, $cxx_replacement as *const () as usize, &$cxx_original, true),)*
            ]
        }
    };
}

redirected! {
    library only: {
        MUTEX_LOCK: b"pthread_mutex_lock" => mutex_lock,
        MUTEX_TRYLOCK: b"pthread_mutex_trylock" => mutex_trylock,
        MUTEX_UNLOCK: b"pthread_mutex_unlock" => mutex_unlock,
        USLEEP: b"usleep" => usleep,
        SLEEP: b"sleep" => sleep,
        THREAD_SETNAME: b"pthread_setname_np" => thread_setname,
        THREAD_SELF: b"pthread_self" => thread_self,
        RWLOCK_INIT: b"pthread_rwlock_init" => rwlock_init,
        RWLOCK_RDLOCK: b"pthread_rwlock_rdlock" => rwlock_rdlock,
        RWLOCK_WRLOCK: b"pthread_rwlock_wrlock" => rwlock_wrlock,
        RWLOCK_TRYRDLOCK: b"pthread_rwlock_tryrdlock" => rwlock_tryrdlock,
        RWLOCK_TRYWRLOCK: b"pthread_rwlock_trywrlock" => rwlock_trywrlock,
        RWLOCK_UNLOCK: b"pthread_rwlock_unlock" => rwlock_unlock,
        ONCE: b"pthread_once" => once,
        SEM_INIT: b"sem_init" => sem_init,
        SEM_WAIT: b"sem_wait" => sem_wait,
        SEM_TRYWAIT: b"sem_trywait" => sem_trywait,
        SEM_TIMEDWAIT: b"sem_timedwait" => sem_timedwait,
        SEM_POST: b"sem_post" => sem_post,
        SEM_GETVALUE: b"sem_getvalue" => sem_getvalue,
        GETTIMEOFDAY: b"gettimeofday" => gettimeofday,
        TIME: b"time" => time,
        POLL: b"poll" => poll,
        READ: b"read" => read,
        RECV: b"recv" => recv,
        RECVFROM: b"recvfrom" => recvfrom,
        ACCEPT: b"accept" => accept,
        ACCEPT4: b"accept4" => accept4,
        EPOLL_WAIT: b"epoll_wait" => epoll_wait,
        EPOLL_PWAIT: b"epoll_pwait" => epoll_pwait,
        SELECT: b"select" => select,
        PAUSE: b"pause" => pause,
        SIGSUSPEND: b"sigsuspend" => sigsuspend,
        SIGWAIT: b"sigwait" => sigwait,
        WAITPID: b"waitpid" => waitpid,
        SYSTEM: b"system" => system,
        CLONE: b"clone" => clone,
        SYSCALL: b"syscall" => syscall,
        SIGACTION: b"sigaction" => sigaction,
        PTHREAD_KILL: b"pthread_kill" => pthread_kill,
        TGKILL: b"tgkill" => tgkill,
        PTHREAD_SIGMASK: b"pthread_sigmask" => pthread_sigmask,
        SIGPROCMASK: b"sigprocmask" => sigprocmask,
    }
    C++ runtime too: {
        THREAD_CREATE: b"pthread_create" => thread_create,
        THREAD_JOIN: b"pthread_join" => thread_join,
        THREAD_DETACH: b"pthread_detach" => thread_detach,
        CLOCK_NANOSLEEP: b"clock_nanosleep" => clock_nanosleep,
        COND_WAIT: b"pthread_cond_wait" => cond_wait,
        COND_TIMEDWAIT: b"pthread_cond_timedwait" => cond_timedwait,
        COND_CLOCKWAIT: b"pthread_cond_clockwait" => cond_clockwait,
        COND_SIGNAL: b"pthread_cond_signal" => cond_signal,
        COND_BROADCAST: b"pthread_cond_broadcast" => cond_broadcast,
        NANOSLEEP: b"nanosleep" => nanosleep,
        CLOCK_GETTIME: b"clock_gettime" => clock_gettime,
    }
}

extern "C" {
    fn __errno_location() -> *mut c_int;
}

/// Sets this OS thread's `errno`.
fn set_errno(value: c_int) {
    // SAFETY: errno is this OS thread's.
    unsafe { *__errno_location() = value };
}

/// The process mutex standing for the `pthread_mutex_t` at `mutex`.
fn process_mutex(os: &SimOs, mutex: *mut c_void) -> corprof::os::MutexId {
    // Opening the named mutex is the simulator's bookkeeping, not an allocation of the
    // library's (a real `pthread_mutex_lock` allocates nothing).
    unobserved(|| {
        let (key, name) = object_name("pthread_mutex", mutex);
        os.mutex_open_as(&key, &name)
    })
}

/// The process condition variable standing for the `pthread_cond_t` at `cond`, and how many
/// times it was notified.
fn process_cond(os: &SimOs, cond: *mut c_void) -> (u32, u64) {
    // As for mutexes: the name is the simulator's bookkeeping.
    unobserved(|| {
        let (key, name) = object_name("pthread_cond", cond);
        os.cond_open_as(&key, &name)
    })
}

/// The process's key for the library's `kind` object at `object` (its address: the object's
/// identity), and its name in reports ([`names`]: a new one not in the library's data is
/// named after the library function whose call, some frames up, first reached here).
fn object_name(kind: &str, object: *mut c_void) -> (String, String) {
    let key = format!("{kind} {:#x}", object as usize);
    let name = names::of(kind, object as usize, || {
        let mut frames = [std::ptr::null_mut(); 16];
        // SAFETY: room for 16 return addresses.
        let n = unsafe { libc::backtrace(frames.as_mut_ptr(), frames.len() as c_int) };
        frames[..n.max(0) as usize].iter().map(|&f| f as usize).collect()
    });
    (key, name)
}

/// Gives the library's object at `object` the name `name` in every report (before its first
/// use): `ISimclrOs::NameObject`.
pub(crate) fn name_object(object: *const c_void, name: &str) {
    unobserved(|| names::give(object as usize, name));
}

/// The C library's own function for a redirected one.
///
/// # Safety
/// `F` is the function's type.
unsafe fn original<F: Copy>(slot: &AtomicUsize) -> F {
    let address = slot.load(Ordering::Acquire);
    assert!(address != 0, "a redirected call before its original was kept");
    // SAFETY: `address` is the function the dynamic linker bound the import to, and the
    // caller names its type.
    unsafe { std::mem::transmute_copy(&address) }
}

type MutexFn = unsafe extern "C" fn(*mut c_void) -> c_int;

unsafe extern "C-unwind" fn mutex_lock(mutex: *mut c_void) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<MutexFn>(&MUTEX_LOCK)(mutex) };
    }
    let os = SimOs::new();
    os.mutex_lock(process_mutex(&os, mutex));
    0
}

unsafe extern "C-unwind" fn mutex_trylock(mutex: *mut c_void) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<MutexFn>(&MUTEX_TRYLOCK)(mutex) };
    }
    let os = SimOs::new();
    if os.mutex_try_lock(process_mutex(&os, mutex)) {
        0
    } else {
        EBUSY
    }
}

unsafe extern "C-unwind" fn mutex_unlock(mutex: *mut c_void) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<MutexFn>(&MUTEX_UNLOCK)(mutex) };
    }
    let os = SimOs::new();
    os.mutex_unlock(process_mutex(&os, mutex));
    0
}

/// The `pthread_t` of a simulated thread: its OS id under a tag no real `pthread_t` (an
/// address in user space) has.
const SIMULATED: usize = 0xf1be_0000_0000_0000;
const TAG: usize = 0xffff_0000_0000_0000;

/// The simulated thread a `pthread_t` stands for, if it is one.
fn simulated(thread: usize) -> Option<OsThread> {
    (thread & TAG == SIMULATED).then_some(OsThread((thread & !TAG) as u32))
}

thread_local! {
    /// The `pthread_t` of the simulated thread the library created that this OS thread runs
    /// (0: none).
    static CREATED_SELF: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A thread's start routine: library code a run may unwind through when it ends.
type StartRoutine = unsafe extern "C-unwind" fn(*mut c_void) -> *mut c_void;

/// `EAGAIN`: no thread could be created.
const EAGAIN: c_int = 11;
/// `ESRCH`: no such thread.
const ESRCH: c_int = 3;

unsafe extern "C-unwind" fn thread_create(
    thread: *mut usize,
    attributes: *const c_void,
    start: StartRoutine,
    argument: *mut c_void,
) -> c_int {
    if !fiber::in_process() {
        type F = unsafe extern "C" fn(*mut usize, *const c_void, StartRoutine, *mut c_void) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&THREAD_CREATE)(thread, attributes, start, argument) };
    }
    // The argument is the library's to pass to its own thread.
    let argument = argument as usize;
    // The new thread's handle, known once the creation returns (before it first runs).
    let handle = Arc::new(AtomicUsize::new(0));
    let own = handle.clone();
    let created = SimOs::new().create_thread(move || {
        /// Forgets the handle when the thread ends, or its run unwinds it.
        struct Reset;
        impl Drop for Reset {
            fn drop(&mut self) {
                CREATED_SELF.with(|s| s.set(0));
            }
        }
        CREATED_SELF.with(|s| s.set(own.load(Ordering::Acquire)));
        let _reset = Reset;
        // SAFETY: `start` is the caller's start routine, called once with its argument, as
        // the C library would on the new thread.
        unsafe { start(argument as *mut c_void) };
    });
    match created {
        Ok(id) => {
            let value = SIMULATED | id.0 as usize;
            handle.store(value, Ordering::Release);
            if !thread.is_null() {
                // SAFETY: a non-NULL `thread` points at the caller's pthread_t.
                unsafe { thread.write(value) };
            }
            0
        }
        Err(_) => EAGAIN,
    }
}

unsafe extern "C-unwind" fn thread_self() -> usize {
    match CREATED_SELF.with(|s| s.get()) {
        // SAFETY: the C library's own function.
        0 => unsafe { original::<unsafe extern "C" fn() -> usize>(&THREAD_SELF)() },
        me => me,
    }
}

unsafe extern "C-unwind" fn thread_join(thread: usize, result: *mut *mut c_void) -> c_int {
    let Some(id) = simulated(thread) else {
        type F = unsafe extern "C" fn(usize, *mut *mut c_void) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&THREAD_JOIN)(thread, result) };
    };
    // Outside the process's threads (its run is over) the thread ended with the process.
    if fiber::on_fiber() && SimOs::new().join_thread(id).is_err() {
        return ESRCH;
    }
    if !result.is_null() {
        // SAFETY: a non-NULL `result` points at the caller's `void *`.
        unsafe { result.write(std::ptr::null_mut()) };
    }
    0
}

unsafe extern "C-unwind" fn thread_detach(thread: usize) -> c_int {
    if simulated(thread).is_some() {
        return 0;
    }
    // SAFETY: the C library's own function, with the caller's argument.
    unsafe { original::<unsafe extern "C" fn(usize) -> c_int>(&THREAD_DETACH)(thread) }
}

unsafe extern "C-unwind" fn thread_setname(thread: usize, name: *const c_char) -> c_int {
    if simulated(thread).is_some() {
        return 0;
    }
    // SAFETY: the C library's own function, with the caller's arguments.
    unsafe { original::<unsafe extern "C" fn(usize, *const c_char) -> c_int>(&THREAD_SETNAME)(thread, name) }
}

/// `ETIMEDOUT`: a timed wait's deadline passed.
const ETIMEDOUT: c_int = 110;
/// `CLOCK_MONOTONIC`.
const CLOCK_MONOTONIC: c_int = 1;

/// A wait on condition variable `cond` with `mutex` held, on a simulated thread, until the
/// absolute time `deadline` of `clock` if any: the mutex is released for the wait and taken
/// again after it. Any notification wakes every waiter (a wake-up the caller did not need
/// is one POSIX allows).
fn wait_on_fiber(cond: *mut c_void, mutex: *mut c_void, deadline: Option<(c_int, Duration)>) -> c_int {
    let os = SimOs::new();
    let (id, generation) = process_cond(&os, cond);
    let timeout = match deadline {
        Some((clock, at)) => at.saturating_sub(simulated_clock(clock)),
        None => Duration::MAX,
    };
    os.mutex_unlock(process_mutex(&os, mutex));
    let notified = os.cond_wait(id, generation, timeout);
    os.mutex_lock(process_mutex(&os, mutex));
    if notified {
        0
    } else {
        ETIMEDOUT
    }
}

unsafe extern "C-unwind" fn cond_wait(cond: *mut c_void, mutex: *mut c_void) -> c_int {
    if !fiber::on_fiber() {
        type F = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&COND_WAIT)(cond, mutex) };
    }
    wait_on_fiber(cond, mutex, None)
}

unsafe extern "C-unwind" fn cond_timedwait(
    cond: *mut c_void,
    mutex: *mut c_void,
    at: *const Timespec,
) -> c_int {
    if !fiber::on_fiber() || at.is_null() {
        type F = unsafe extern "C" fn(*mut c_void, *mut c_void, *const Timespec) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&COND_TIMEDWAIT)(cond, mutex, at) };
    }
    // SAFETY: a non-NULL deadline points at the caller's timespec.
    let at = duration_of(unsafe { &*at });
    // The condition variable's clock is an attribute this call does not see: a deadline far
    // below the wall clock's simulated start is a monotonic one.
    let clock = if at < REALTIME_START / 2 {
        CLOCK_MONOTONIC
    } else {
        0
    };
    wait_on_fiber(cond, mutex, Some((clock, at)))
}

unsafe extern "C-unwind" fn cond_clockwait(
    cond: *mut c_void,
    mutex: *mut c_void,
    clock: c_int,
    at: *const Timespec,
) -> c_int {
    if !fiber::on_fiber() || at.is_null() {
        type F = unsafe extern "C" fn(*mut c_void, *mut c_void, c_int, *const Timespec) -> c_int;
        // SAFETY: the C library's own function, with the caller's arguments.
        return unsafe { original::<F>(&COND_CLOCKWAIT)(cond, mutex, clock, at) };
    }
    // SAFETY: a non-NULL deadline points at the caller's timespec.
    let at = duration_of(unsafe { &*at });
    wait_on_fiber(cond, mutex, Some((clock, at)))
}

/// Notifies condition variable `cond` on a simulated thread, else calls `slot`'s function.
///
/// # Safety
/// `slot` holds `pthread_cond_signal` or `pthread_cond_broadcast`.
unsafe fn notify(cond: *mut c_void, slot: &AtomicUsize) -> c_int {
    if !fiber::on_fiber() {
        // SAFETY: the C library's own function, with the caller's argument.
        return unsafe { original::<unsafe extern "C" fn(*mut c_void) -> c_int>(slot)(cond) };
    }
    let os = SimOs::new();
    let (id, _) = process_cond(&os, cond);
    os.cond_notify(id);
    0
}

unsafe extern "C-unwind" fn cond_signal(cond: *mut c_void) -> c_int {
    // SAFETY: the slot of pthread_cond_signal.
    unsafe { notify(cond, &COND_SIGNAL) }
}

unsafe extern "C-unwind" fn cond_broadcast(cond: *mut c_void) -> c_int {
    // SAFETY: the slot of pthread_cond_broadcast.
    unsafe { notify(cond, &COND_BROADCAST) }
}

/// The part of glibc's `struct link_map` that is public ABI (`<link.h>`).
#[repr(C)]
struct LinkMap {
    /// The difference between the library's load address and its link address.
    base: usize,
    name: *const c_char,
    /// The library's `PT_DYNAMIC` segment, in memory.
    dynamic: *const Dyn,
}

/// `Elf64_Dyn`.
#[repr(C)]
struct Dyn {
    tag: i64,
    value: u64,
}

/// `Elf64_Rela`.
#[repr(C)]
struct Rela {
    offset: u64,
    info: u64,
    _addend: i64,
}

/// `Elf64_Sym`.
#[repr(C)]
struct Sym {
    name: u32,
    _info: u8,
    _other: u8,
    _section: u16,
    _value: u64,
    _size: u64,
}

/// `struct dl_phdr_info`, as far as it is read.
#[repr(C)]
struct PhdrInfo {
    base: usize,
    _name: *const c_char,
    headers: *const Phdr,
    count: u16,
}

/// `Elf64_Phdr`.
#[repr(C)]
struct Phdr {
    kind: u32,
    _flags: u32,
    _offset: u64,
    vaddr: u64,
    _paddr: u64,
    _file_size: u64,
    memory_size: u64,
    _align: u64,
}

const DT_NULL: i64 = 0;
const DT_PLTRELSZ: i64 = 2;
const DT_STRTAB: i64 = 5;
const DT_SYMTAB: i64 = 6;
const DT_RELA: i64 = 7;
const DT_RELASZ: i64 = 8;
const DT_JMPREL: i64 = 23;
const R_X86_64_GLOB_DAT: u64 = 6;
const R_X86_64_JUMP_SLOT: u64 = 7;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const RTLD_DI_LINKMAP: c_int = 2;
const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const PAGE: usize = 4096;

/// `RTLD_DEFAULT`: the global scope.
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();
/// `dlopen` flag: only find a library already loaded.
const RTLD_NOLOAD: c_int = 4;

#[link(name = "dl")]
extern "C" {
    fn dlinfo(handle: *mut c_void, request: c_int, info: *mut c_void) -> c_int;
    fn dl_iterate_phdr(
        callback: unsafe extern "C" fn(*mut PhdrInfo, usize, *mut c_void) -> c_int,
        data: *mut c_void,
    ) -> c_int;
}

extern "C" {
    fn mprotect(address: *mut c_void, length: usize, protection: c_int) -> c_int;
}

/// The pages the loader made read-only after relocation (`PT_GNU_RELRO`, rounded down at
/// both ends as the loader rounds it), as absolute addresses.
fn relro(base: usize) -> Option<(usize, usize)> {
    struct Search {
        base: usize,
        found: Option<(usize, usize)>,
    }
    unsafe extern "C" fn visit(info: *mut PhdrInfo, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid `dl_phdr_info` and our `Search`.
        let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
        if info.base != search.base {
            return 0;
        }
        // SAFETY: `headers` points at `count` program headers of a loaded object.
        let headers = unsafe { std::slice::from_raw_parts(info.headers, info.count.into()) };
        search.found = headers.iter().find(|h| h.kind == PT_GNU_RELRO).map(|h| {
            let start = info.base + h.vaddr as usize;
            (
                start & !(PAGE - 1),
                (start + h.memory_size as usize) & !(PAGE - 1),
            )
        });
        1
    }
    let mut search = Search { base, found: None };
    // SAFETY: `visit` matches the callback type and reads `search` only during the call.
    unsafe { dl_iterate_phdr(visit, &mut search as *mut Search as *mut c_void) };
    search.found
}

/// The C++ runtimes a library may sleep, read clocks and wait through
/// (`std::this_thread::sleep_for`, `std::chrono::steady_clock::now` and
/// `std::condition_variable::wait` live in them, not in the library).
const CXX_RUNTIMES: [&CStr; 2] = [c"libstdc++.so.6", c"libc++.so.1"];

/// Redirects the imports of the library `handle` (a `dlopen` handle, every symbol bound) to
/// this module's functions, and the clock, sleep and condition-variable imports of the C++
/// runtime it loaded; returns how many entries were rewritten.
pub fn redirect_imports(handle: *mut c_void) -> Result<usize, String> {
    let all = redirects();
    let map = link_map(handle)?;
    // Its synchronization objects are named by its symbols.
    if !map.name.is_null() {
        // SAFETY: the loader's NUL-terminated path of the library.
        let path = unsafe { CStr::from_ptr(map.name) };
        unobserved(|| names::register(std::path::Path::new(&*path.to_string_lossy()), map.base));
    }
    let mut rewritten = patch(map, all.iter())?;
    for runtime in CXX_RUNTIMES {
        // SAFETY: a NUL-terminated name; RTLD_NOLOAD only finds a library already loaded.
        let loaded = unsafe { dlopen(runtime.as_ptr(), RTLD_NOW | RTLD_NOLOAD) };
        if !loaded.is_null() {
            rewritten += patch(link_map(loaded)?, all.iter().filter(|r| r.in_cxx_runtime))?;
        }
    }
    Ok(rewritten)
}

/// The link map of a loaded library.
fn link_map<'a>(handle: *mut c_void) -> Result<&'a LinkMap, String> {
    let mut map: *const LinkMap = std::ptr::null();
    // SAFETY: `handle` is a live dlopen handle; RTLD_DI_LINKMAP writes a `struct link_map *`.
    if unsafe {
        dlinfo(
            handle,
            RTLD_DI_LINKMAP,
            &mut map as *mut *const LinkMap as *mut c_void,
        )
    } != 0
        || map.is_null()
    {
        return Err("the loader gave no link map for the library".into());
    }
    // SAFETY: the link map of a loaded library stays valid while it is loaded (always).
    Ok(unsafe { &*map })
}

/// Rewrites the GOT entries of `map`'s library that bind the functions of `redirects`;
/// returns how many.
fn patch<'r>(map: &LinkMap, redirects: impl Iterator<Item = &'r Redirect> + Clone) -> Result<usize, String> {
    // The loader has relocated most address entries of the dynamic section in place; an
    // entry below the load address is still a link-time address.
    let absolute = |value: u64| {
        let value = value as usize;
        if value < map.base {
            value + map.base
        } else {
            value
        }
    };
    let (mut strtab, mut symtab) = (0, 0);
    let (mut tables, mut sizes) = ([0usize; 2], [0usize; 2]);
    let mut entry = map.dynamic;
    loop {
        // SAFETY: the dynamic section is an array of entries ended by DT_NULL.
        let Dyn { tag, value } = unsafe { &*entry };
        match *tag {
            DT_NULL => break,
            DT_STRTAB => strtab = absolute(*value),
            DT_SYMTAB => symtab = absolute(*value),
            DT_JMPREL => tables[0] = absolute(*value),
            DT_PLTRELSZ => sizes[0] = *value as usize,
            DT_RELA => tables[1] = absolute(*value),
            DT_RELASZ => sizes[1] = *value as usize,
            _ => {}
        }
        // SAFETY: not past DT_NULL.
        entry = unsafe { entry.add(1) };
    }
    if strtab == 0 || symtab == 0 {
        return Err("the library has no dynamic symbol table".into());
    }
    let relro = relro(map.base);
    let mut rewritten = 0;
    for (table, size) in tables.into_iter().zip(sizes) {
        if table == 0 {
            continue;
        }
        // SAFETY: DT_JMPREL/DT_RELA with their sizes describe arrays of Elf64_Rela.
        let relocations =
            unsafe { std::slice::from_raw_parts(table as *const Rela, size / size_of::<Rela>()) };
        for r in relocations {
            let kind = r.info & 0xffff_ffff;
            let symbol = (r.info >> 32) as usize;
            if symbol == 0 || (kind != R_X86_64_JUMP_SLOT && kind != R_X86_64_GLOB_DAT) {
                continue;
            }
            // SAFETY: a relocation's symbol index is within the dynamic symbol table, and
            // its name an offset into the string table.
            let name = unsafe {
                let sym = &*((symtab as *const Sym).add(symbol));
                CStr::from_ptr((strtab + sym.name as usize) as *const c_char)
            };
            let Some(redirect) = redirects.clone().find(|d| d.name == name.to_bytes()) else {
                continue;
            };
            let slot = map.base + r.offset as usize;
            // SAFETY: a GOT entry is a pointer-sized word of the loaded library.
            if unsafe { (slot as *const usize).read() } == redirect.replacement {
                continue;
            }
            // The C library's function, as the global scope finds it: a lazily bound entry
            // would still hold its PLT stub.
            if redirect.original.load(Ordering::Acquire) == 0 {
                // SAFETY: a NUL-terminated name looked up in the global scope.
                let found = unsafe { dlsym(RTLD_DEFAULT, name.as_ptr()) } as usize;
                if found == 0 {
                    return Err(format!("{} is not in the global scope", name.to_string_lossy()));
                }
                redirect.original.store(found, Ordering::Release);
            }
            write_word(slot, redirect.replacement, relro)?;
            rewritten += 1;
        }
    }
    Ok(rewritten)
}

/// Writes `value` at `slot` of a loaded library; a page the loader made read-only (in
/// `relro`) is made writable for the write and read-only again after it.
fn write_word(slot: usize, value: usize, relro: Option<(usize, usize)>) -> Result<(), String> {
    let page = slot & !(PAGE - 1);
    let protected = relro.is_some_and(|(start, end)| page >= start && page < end);
    // SAFETY: `page` is a mapped page of the library (it holds `slot`); making it writable
    // changes no content.
    if protected && unsafe { mprotect(page as *mut c_void, PAGE, PROT_READ | PROT_WRITE) } != 0 {
        return Err(format!("cannot make the library's page {page:#x} writable"));
    }
    // SAFETY: `slot` is an aligned, now writable GOT entry of the library; writing a function
    // address there is what the dynamic linker itself does.
    unsafe { (slot as *mut usize).write(value) };
    // SAFETY: as above; the page goes back to read-only, as the loader left it.
    if protected && unsafe { mprotect(page as *mut c_void, PAGE, PROT_READ) } != 0 {
        return Err(format!(
            "cannot make the library's page {page:#x} read-only again"
        ));
    }
    Ok(())
}
