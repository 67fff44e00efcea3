//! The operating-system layer a sampling profiler uses besides the profiling API.
//!
//! A sampler suspends threads, reads their registers and stacks, sends signals, and needs
//! mutexes, events, sleep and a clock. Coding against these traits instead of the OS directly
//! lets the same sampler run in production (over the real OS) and inside the simulator, whose
//! deterministic scheduler sees every one of these calls as a scheduling point.
//!
//! - [`ThreadControl`]: thread enumeration, `SuspendThread`/`ResumeThread` (Windows; the
//!   suspension completes only when [`ThreadControl::get_thread_context`] returns), signals
//!   (Unix), checked stack reads and stack bounds.
//! - [`Sync`]: mutexes, events, sleep and a monotonic clock. [`StdSync`] implements it over
//!   `std`, for production.

use crate::context::Context;
use std::time::{Duration, Instant};

/// An operating-system thread, as the OS names it (a TID or a handle's thread id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OsThread(pub u32);

/// Why an OS call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OsError {
    /// No thread has that id (never existed, or already reaped).
    NoSuchThread,
    /// The thread has exited; its handle is still valid but it cannot be suspended or read.
    Terminated,
    /// `ResumeThread` on a thread whose suspend count is 0.
    NotSuspended,
    /// The address lies outside the thread's stack, or the memory is unmapped.
    BadAddress(u64),
    /// The operation does not exist on this platform (`SuspendThread` on Unix, signals on
    /// Windows).
    Unsupported,
    /// `GetThreadContext` failed for a live thread: the OS could not give its registers.
    ContextUnavailable,
    /// The call failed because a test asked it to (a simulator's injected failure).
    Injected,
}

impl std::fmt::Display for OsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OsError::NoSuchThread => write!(f, "no such thread"),
            OsError::Terminated => write!(f, "the thread has terminated"),
            OsError::NotSuspended => write!(f, "the thread is not suspended"),
            OsError::Injected => write!(f, "the call failed (injected)"),
            OsError::BadAddress(a) => write!(f, "address {a:#x} is outside the thread's stack"),
            OsError::Unsupported => write!(f, "not supported on this platform"),
            OsError::ContextUnavailable => write!(f, "the thread's context is unavailable"),
        }
    }
}

impl std::error::Error for OsError {}

/// The `sa_flags` a profiler installs its signal handler with (`sigaction`), with Linux's
/// x86-64 values. Only the flags that change what a sampled thread or its application sees
/// are named; a zeroed `struct sigaction` has none of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SignalFlags(pub u32);

impl SignalFlags {
    /// `SA_SIGINFO`: the handler gets the `siginfo_t` and the interrupted `ucontext_t`.
    pub const SIGINFO: SignalFlags = SignalFlags(0x0000_0004);
    /// `SA_ONSTACK`: the handler runs on the thread's alternate signal stack, if it has one.
    pub const ONSTACK: SignalFlags = SignalFlags(0x0800_0000);
    /// `SA_RESTART`: a slow system call the signal interrupts (`read`, `write`, `wait`, …) is
    /// restarted after the handler returns instead of failing with `EINTR`.
    pub const RESTART: SignalFlags = SignalFlags(0x1000_0000);
    /// Every named flag with its name, as `sigaction(2)` spells it.
    pub const NAMED: [(SignalFlags, &'static str); 3] = [
        (SignalFlags::SIGINFO, "SA_SIGINFO"),
        (SignalFlags::ONSTACK, "SA_ONSTACK"),
        (SignalFlags::RESTART, "SA_RESTART"),
    ];

    /// True when every flag of `other` is set.
    pub fn contains(self, other: SignalFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags without those of `other`.
    pub fn without(self, other: SignalFlags) -> SignalFlags {
        SignalFlags(self.0 & !other.0)
    }

    /// The flag named `name` (`SA_RESTART`, …).
    pub fn named(name: &str) -> Option<SignalFlags> {
        SignalFlags::NAMED
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(f, _)| *f)
    }
}

impl std::ops::BitOr for SignalFlags {
    type Output = SignalFlags;
    fn bitor(self, other: SignalFlags) -> SignalFlags {
        SignalFlags(self.0 | other.0)
    }
}

impl std::fmt::Display for SignalFlags {
    /// The named flags joined by `|` (`0` when none is set), then any other bits in hex.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts: Vec<String> = SignalFlags::NAMED
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|(_, name)| name.to_string())
            .collect();
        let known = SignalFlags::NAMED.iter().fold(0, |all, (flag, _)| all | flag.0);
        if self.0 & !known != 0 {
            parts.push(format!("{:#x}", self.0 & !known));
        }
        if parts.is_empty() {
            write!(f, "0")
        } else {
            write!(f, "{}", parts.join("|"))
        }
    }
}

/// Thread control: what a sampler does to the threads it samples.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait ThreadControl: Send + std::marker::Sync {
    /// The calling thread.
    fn current_thread(&self) -> OsThread;

    /// Every live thread of the process.
    fn threads(&self) -> Vec<OsThread>;

    /// Windows `SuspendThread`: increments the suspend count and returns the previous one.
    /// The suspension is asynchronous: the target may run on until a
    /// [`ThreadControl::get_thread_context`] on it returns.
    fn suspend_thread(&self, thread: OsThread) -> Result<u32, OsError>;

    /// Windows `ResumeThread`: decrements the suspend count and returns the previous one.
    fn resume_thread(&self, thread: OsThread) -> Result<u32, OsError>;

    /// Windows `GetThreadContext`: the registers of a suspended thread (completing its
    /// suspension). Fails for a thread that is terminating.
    fn get_thread_context(&self, thread: OsThread) -> Result<Context, OsError>;

    /// Unix: sends the profiling signal to `thread`; the installed handler runs on it with the
    /// interrupted context at its next instruction (unless it masks the signal).
    fn send_signal(&self, thread: OsThread) -> Result<(), OsError>;

    /// The thread's stack bounds `(low, high)`.
    fn stack_bounds(&self, thread: OsThread) -> Result<(u64, u64), OsError>;

    /// A checked read of 8 bytes of `thread`'s stack: an address outside its bounds, or memory
    /// that is no longer mapped, is an error instead of a crash.
    fn read_stack(&self, thread: OsThread, address: u64) -> Result<u64, OsError>;

    /// Checked reads of consecutive 8-byte words of `thread`'s stack from `address` into
    /// `out` (as `process_vm_readv` does): an error if any word is outside its bounds or
    /// unmapped. The default reads word by word with [`ThreadControl::read_stack`].
    fn read_stack_words(&self, thread: OsThread, address: u64, out: &mut [u64]) -> Result<(), OsError> {
        for (i, word) in out.iter_mut().enumerate() {
            let at = address
                .checked_add(8 * i as u64)
                .ok_or(OsError::BadAddress(address))?;
            *word = self.read_stack(thread, at)?;
        }
        Ok(())
    }

    /// A raw read of 8 bytes of the process's memory, as dereferencing a pointer does: no
    /// check, so unmapped memory crashes the process (in the simulator, the run ends with an
    /// `access_violation`). A production implementation is a volatile pointer read.
    fn read_raw(&self, address: u64) -> u64;
}

/// A mutex created by [`Sync::mutex_create`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MutexId(pub u32);

/// An event created by [`Sync::event_create`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId(pub u32);

/// Synchronization and time, as the simulator's scheduler must see them.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait Sync: Send + std::marker::Sync {
    /// A new, unlocked, non-recursive mutex. Implementations may treat `name` as a named
    /// object: the simulator opens an existing mutex of that name (its own locks included).
    fn mutex_create(&self, name: &str) -> MutexId;

    /// Blocks until the mutex is free, then takes it.
    fn mutex_lock(&self, mutex: MutexId);

    /// Takes the mutex if it is free, without blocking; true if it was taken.
    fn mutex_try_lock(&self, mutex: MutexId) -> bool;

    /// Releases a mutex the caller holds.
    fn mutex_unlock(&self, mutex: MutexId);

    /// A new manual-reset event, initially clear (or, as for mutexes, an existing one of that
    /// name in the simulator).
    fn event_create(&self, name: &str) -> EventId;

    /// Sets the event, waking every waiter.
    fn event_set(&self, event: EventId);

    /// Clears the event.
    fn event_reset(&self, event: EventId);

    /// Waits until the event is set or `timeout` elapses; true if it was set.
    fn event_wait(&self, event: EventId, timeout: Duration) -> bool;

    /// Sleeps for `duration`.
    fn sleep(&self, duration: Duration);

    /// Monotonic time since an arbitrary origin.
    fn now(&self) -> Duration;
}

/// [`Sync`] over the standard library, for a profiler running in a real process.
#[derive(Debug)]
pub struct StdSync {
    origin: Instant,
    mutexes: std::sync::RwLock<Vec<Flag>>,
    events: std::sync::RwLock<Vec<Flag>>,
}

/// A boolean guarded by a mutex, with a condition variable: a mutex's "locked" bit or an
/// event's "set" bit.
#[derive(Debug, Default)]
struct Flag {
    value: std::sync::Mutex<bool>,
    changed: std::sync::Condvar,
}

impl Default for StdSync {
    fn default() -> StdSync {
        StdSync {
            origin: Instant::now(),
            mutexes: Default::default(),
            events: Default::default(),
        }
    }
}

fn push(list: &std::sync::RwLock<Vec<Flag>>) -> u32 {
    let mut list = list.write().unwrap_or_else(|e| e.into_inner());
    list.push(Flag::default());
    (list.len() - 1) as u32
}

fn with_flag<R>(list: &std::sync::RwLock<Vec<Flag>>, id: u32, f: impl FnOnce(&Flag) -> R) -> R {
    let list = list.read().unwrap_or_else(|e| e.into_inner());
    f(&list[id as usize])
}

impl Sync for StdSync {
    fn mutex_create(&self, _name: &str) -> MutexId {
        MutexId(push(&self.mutexes))
    }

    fn mutex_lock(&self, mutex: MutexId) {
        with_flag(&self.mutexes, mutex.0, |flag| {
            let mut locked = flag.value.lock().unwrap_or_else(|e| e.into_inner());
            while *locked {
                locked = flag.changed.wait(locked).unwrap_or_else(|e| e.into_inner());
            }
            *locked = true;
        })
    }

    fn mutex_try_lock(&self, mutex: MutexId) -> bool {
        with_flag(&self.mutexes, mutex.0, |flag| {
            let mut locked = flag.value.lock().unwrap_or_else(|e| e.into_inner());
            !std::mem::replace(&mut *locked, true)
        })
    }

    fn mutex_unlock(&self, mutex: MutexId) {
        with_flag(&self.mutexes, mutex.0, |flag| {
            *flag.value.lock().unwrap_or_else(|e| e.into_inner()) = false;
            flag.changed.notify_one();
        })
    }

    fn event_create(&self, _name: &str) -> EventId {
        EventId(push(&self.events))
    }

    fn event_set(&self, event: EventId) {
        with_flag(&self.events, event.0, |flag| {
            *flag.value.lock().unwrap_or_else(|e| e.into_inner()) = true;
            flag.changed.notify_all();
        })
    }

    fn event_reset(&self, event: EventId) {
        with_flag(&self.events, event.0, |flag| {
            *flag.value.lock().unwrap_or_else(|e| e.into_inner()) = false;
        })
    }

    fn event_wait(&self, event: EventId, timeout: Duration) -> bool {
        with_flag(&self.events, event.0, |flag| {
            let set = flag.value.lock().unwrap_or_else(|e| e.into_inner());
            let (set, _) = flag
                .changed
                .wait_timeout_while(set, timeout, |set| !*set)
                .unwrap_or_else(|e| e.into_inner());
            *set
        })
    }

    fn sleep(&self, duration: Duration) {
        std::thread::sleep(duration)
    }

    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn signal_flags_have_linux_values_and_names() {
        let flags = SignalFlags::SIGINFO | SignalFlags::RESTART;
        assert_eq!(flags.0, 0x1000_0004);
        assert!(flags.contains(SignalFlags::RESTART) && !flags.contains(SignalFlags::ONSTACK));
        assert_eq!(flags.without(SignalFlags::RESTART), SignalFlags::SIGINFO);
        assert_eq!(flags.to_string(), "SA_SIGINFO|SA_RESTART");
        assert_eq!(SignalFlags::default().to_string(), "0");
        assert_eq!(
            (SignalFlags::ONSTACK | SignalFlags(1)).to_string(),
            "SA_ONSTACK|0x1"
        );
        assert_eq!(SignalFlags::named("SA_ONSTACK"), Some(SignalFlags::ONSTACK));
        assert_eq!(SignalFlags::named("SA_NODEFER"), None);
    }

    #[test]
    fn std_mutex_excludes_and_events_wake() {
        let sync = Arc::new(StdSync::default());
        let m = sync.mutex_create("m");
        let e = sync.event_create("e");
        sync.mutex_lock(m);
        let other = {
            let sync = sync.clone();
            std::thread::spawn(move || {
                sync.mutex_lock(m);
                sync.mutex_unlock(m);
                sync.event_set(e);
            })
        };
        assert!(
            !sync.event_wait(e, Duration::from_millis(20)),
            "the other thread is blocked"
        );
        sync.mutex_unlock(m);
        assert!(sync.event_wait(e, Duration::from_secs(10)));
        other.join().unwrap();
        assert!(sync.now() >= Duration::from_millis(20));
    }
}
