//! The profiling signal of a hosted library, delivered inside the simulation.
//!
//! A signal-based sampler installs a handler with `sigaction` and interrupts each thread with
//! `pthread_kill` or `tgkill`; the handler reads the interrupted registers from its
//! `ucontext_t`. Real signals would interrupt OS threads the simulation does not control, so
//! on a simulated thread (and while a run is set up) these calls are the process's: the
//! handler becomes the run's profiling-signal handler, and a signal sent to a simulated
//! thread's OS id is delivered by the scheduler, at that thread's next step (at once if it is
//! waiting), with the thread's simulated registers in the `ucontext_t` (`uc_mcontext.gregs`,
//! glibc's x86-64 layout) and `si_signo` set. The handler runs on the interrupted thread, so
//! a lock or an allocation in it is `lock_in_signal_handler`. `pthread_sigmask` and
//! `sigprocmask` on a simulated thread block or unblock that signal for the thread as the
//! program steps `mask_signals` and `unmask_signals` do (a signal sent meanwhile waits), and
//! go to the C library too for the rest of the set.

use super::{original, PTHREAD_KILL, PTHREAD_SIGMASK, SIGACTION, SIGPROCMASK, TGKILL};
use corprof::os::{OsThread, SignalFlags, ThreadControl};
use corprof::Context;
use sim_clr::process::fiber::NativeSignalHandler;
use sim_clr::process::{fiber, install_signal_handler, SimOs};
use std::ffi::c_int;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// `SA_SIGINFO`: the handler takes `(signal, siginfo_t *, ucontext_t *)`.
const SA_SIGINFO: u64 = 4;
/// `ESRCH`: no such thread.
const ESRCH: c_int = 3;

/// The signal number the library installed its handler for inside a process (0: none).
static PROFILING_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// glibc's `struct sigaction` on x86-64.
#[repr(C)]
pub(super) struct SigAction {
    handler: usize,
    mask: [u64; 16],
    flags: c_int,
    restorer: usize,
}

/// `siginfo_t`: 128 bytes, `si_signo` first.
#[repr(C)]
struct SigInfo {
    signo: c_int,
    rest: [u8; 124],
}

/// glibc's `ucontext_t` on x86-64, as far as a handler reads it: `uc_mcontext.gregs` at
/// byte 40, 23 registers; the rest zero.
#[repr(C)]
struct UContext {
    flags: u64,
    link: usize,
    stack: [u64; 3],
    gregs: [u64; 23],
    rest: [u8; 968 - 40 - 184],
}

/// `REG_*` indices of `gregs`.
const REG_R8: usize = 0;
const REG_RDI: usize = 8;
const REG_RSI: usize = 9;
const REG_RBP: usize = 10;
const REG_RBX: usize = 11;
const REG_RDX: usize = 12;
const REG_RAX: usize = 13;
const REG_RCX: usize = 14;
const REG_RSP: usize = 15;
const REG_RIP: usize = 16;
const REG_EFL: usize = 17;

/// The interrupted registers `context` as a handler's `ucontext_t`.
fn ucontext_of(context: &Context) -> UContext {
    let mut gregs = [0u64; 23];
    let high = [
        context.r8,
        context.r9,
        context.r10,
        context.r11,
        context.r12,
        context.r13,
        context.r14,
        context.r15,
    ];
    gregs[REG_R8..REG_R8 + 8].copy_from_slice(&high);
    gregs[REG_RDI] = context.rdi;
    gregs[REG_RSI] = context.rsi;
    gregs[REG_RBP] = context.rbp;
    gregs[REG_RBX] = context.rbx;
    gregs[REG_RDX] = context.rdx;
    gregs[REG_RAX] = context.rax;
    gregs[REG_RCX] = context.rcx;
    gregs[REG_RSP] = context.rsp;
    gregs[REG_RIP] = context.rip;
    gregs[REG_EFL] = u64::from(context.e_flags);
    UContext {
        flags: 0,
        link: 0,
        stack: [0; 3],
        gregs,
        rest: [0; 968 - 40 - 184],
    }
}

/// The library's handler, called as the kernel would call it.
fn native_handler(signal: c_int, action: &SigAction) -> NativeSignalHandler {
    let (handler, siginfo) = (action.handler, action.flags as u64 & SA_SIGINFO != 0);
    NativeSignalHandler(Arc::new(move |context: &Context| {
        let mut uc = ucontext_of(context);
        let mut info = SigInfo {
            signo: signal,
            rest: [0; 124],
        };
        if siginfo {
            type F = unsafe extern "C-unwind" fn(c_int, *mut SigInfo, *mut UContext);
            // SAFETY: the library installed this `sa_sigaction` with SA_SIGINFO.
            let f: F = unsafe { std::mem::transmute::<usize, F>(handler) };
            // SAFETY: valid siginfo and ucontext for the call.
            unsafe { f(signal, &mut info, &mut uc) };
        } else {
            type F = unsafe extern "C-unwind" fn(c_int);
            // SAFETY: the library installed this `sa_handler`.
            let f: F = unsafe { std::mem::transmute::<usize, F>(handler) };
            // SAFETY: the handler takes the signal number.
            unsafe { f(signal) };
        }
    }))
}

pub(super) unsafe extern "C-unwind" fn sigaction(
    signal: c_int,
    action: *const SigAction,
    old: *mut SigAction,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const SigAction, *mut SigAction) -> c_int;
    // SAFETY: a non-NULL action points at the caller's struct sigaction.
    let Some(action) = (unsafe { action.as_ref() }) else {
        // SAFETY: the C library's own function, with the caller's arguments (a query).
        return unsafe { original::<F>(&SIGACTION)(signal, action, old) };
    };
    // SIG_DFL (0) and SIG_IGN (1) are not handlers.
    let handles = action.handler > 1;
    if handles && fiber::in_process() {
        let flags = SignalFlags(action.flags as u32);
        if install_signal_handler(native_handler(signal, action), flags) {
            PROFILING_SIGNAL.store(signal, Ordering::SeqCst);
            if !old.is_null() {
                // SAFETY: a non-NULL `old` points at the caller's struct sigaction; no handler
                // was the process's before.
                unsafe { old.write(std::mem::zeroed()) };
            }
            return 0;
        }
    }
    // SAFETY: the C library's own function, with the caller's arguments.
    unsafe { original::<F>(&SIGACTION)(signal, action, old) }
}

/// Sends the process's profiling signal to simulated thread `id`: `Some(0)`, or `Some(ESRCH)`
/// for a thread the process does not have; `None` when the call is not the process's (not on
/// a simulated thread, or another signal).
pub(super) fn send(id: u32, signal: c_int) -> Option<c_int> {
    let profiling = PROFILING_SIGNAL.load(Ordering::SeqCst);
    if !fiber::on_fiber() || profiling == 0 || signal != profiling {
        return None;
    }
    Some(match SimOs::new().send_signal(OsThread(id)) {
        Ok(()) => 0,
        Err(_) => ESRCH,
    })
}

pub(super) unsafe extern "C-unwind" fn pthread_kill(thread: usize, signal: c_int) -> c_int {
    if let Some(id) = super::simulated(thread) {
        if let Some(sent) = send(id.0, signal) {
            return sent;
        }
    }
    // SAFETY: the C library's own function, with the caller's arguments.
    unsafe { original::<unsafe extern "C" fn(usize, c_int) -> c_int>(&PTHREAD_KILL)(thread, signal) }
}

pub(super) unsafe extern "C-unwind" fn tgkill(group: c_int, thread: c_int, signal: c_int) -> c_int {
    match send(thread as u32, signal) {
        Some(0) => 0,
        Some(_) => {
            super::set_errno(ESRCH);
            -1
        }
        // SAFETY: the C library's own function, with the caller's arguments.
        None => unsafe {
            original::<unsafe extern "C" fn(c_int, c_int, c_int) -> c_int>(&TGKILL)(group, thread, signal)
        },
    }
}

/// `sigset_t`: 1,024 bits.
type SigSet = [u64; 16];
/// `how` of a mask change.
const SIG_BLOCK: c_int = 0;
const SIG_UNBLOCK: c_int = 1;
const SIG_SETMASK: c_int = 2;

/// Whether `set` holds `signal`.
fn holds(set: &SigSet, signal: c_int) -> bool {
    let bit = (signal - 1) as usize;
    set.get(bit / 64).is_some_and(|word| word >> (bit % 64) & 1 == 1)
}

/// A mask change (`pthread_sigmask` or `sigprocmask`, whose C library function `slot`
/// holds): the C library's for the real OS thread, and on a simulated thread the process's
/// for the profiling signal, whose state before it `old` then shows.
///
/// # Safety
/// `slot` holds a function of `pthread_sigmask`'s type; the arguments are the caller's.
unsafe fn masking(
    slot: &std::sync::atomic::AtomicUsize,
    how: c_int,
    set: *const SigSet,
    old: *mut SigSet,
) -> c_int {
    type F = unsafe extern "C" fn(c_int, *const SigSet, *mut SigSet) -> c_int;
    // SAFETY: per the contract.
    let result = unsafe { original::<F>(slot)(how, set, old) };
    let profiling = PROFILING_SIGNAL.load(Ordering::SeqCst);
    if result != 0 || profiling == 0 || !fiber::on_fiber() {
        return result;
    }
    // SAFETY: a non-NULL `set` points at the caller's sigset_t.
    let named = unsafe { set.as_ref() }.map(|set| holds(set, profiling));
    let change = match (how, named) {
        (SIG_BLOCK, Some(true)) => Some(true),
        (SIG_UNBLOCK, Some(true)) => Some(false),
        (SIG_SETMASK, Some(masked)) => Some(masked),
        // A query, or a change that leaves the signal as it is.
        _ => None,
    };
    let before = SimOs::new().mask_signals(change);
    // SAFETY: a non-NULL `old` points at the caller's sigset_t, which the call filled.
    if let Some(old) = unsafe { old.as_mut() } {
        let bit = (profiling - 1) as usize;
        let word = &mut old[bit / 64];
        *word = (*word & !(1 << (bit % 64))) | (u64::from(before) << (bit % 64));
    }
    result
}

pub(super) unsafe extern "C-unwind" fn pthread_sigmask(
    how: c_int,
    set: *const SigSet,
    old: *mut SigSet,
) -> c_int {
    // SAFETY: the slot of pthread_sigmask; the caller's arguments.
    unsafe { masking(&PTHREAD_SIGMASK, how, set, old) }
}

pub(super) unsafe extern "C-unwind" fn sigprocmask(
    how: c_int,
    set: *const SigSet,
    old: *mut SigSet,
) -> c_int {
    // SAFETY: the slot of sigprocmask; the caller's arguments.
    unsafe { masking(&SIGPROCMASK, how, set, old) }
}
