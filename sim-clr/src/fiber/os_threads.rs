//! Fibers on OS threads, where user-space switching is not available: each fiber is an OS
//! thread that runs only while the engine waits for it. The engine hands it a reply and blocks
//! until the fiber asks for something or ends, so exactly one of them runs at a time. A
//! hand-off polls, then yields, then sleeps (a few microseconds per switch).

use super::{run_fiber, Baton, Code, Reply, Shared, Yielded};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// How control passes between the engine and one fiber: a baton under a mutex, with a hint
/// for the side that polls.
pub(super) struct Handoff {
    baton: Mutex<Baton>,
    turn: Condvar,
    /// Who may take the baton now: `EMPTY`, `FIBER` or `ENGINE` (a hint read while
    /// polling; the mutex decides).
    holder: AtomicU8,
    /// Threads blocked on `turn`.
    sleepers: AtomicUsize,
}

const EMPTY: u8 = 0;
const FIBER: u8 = 1;
const ENGINE: u8 = 2;

/// How many times a hand-off is polled, then polled after yielding the CPU, before the
/// waiting side sleeps: the other side usually answers within a microsecond, and a sleep and
/// a wake-up cost far more. Yielding keeps the wait cheap when threads outnumber cores.
const SPINS: u32 = 64;
const YIELDS: u32 = 16;

impl Handoff {
    /// A hand-off with no message.
    pub(super) fn new() -> Handoff {
        Handoff {
            baton: Mutex::new(Baton::Empty),
            turn: Condvar::new(),
            holder: AtomicU8::new(EMPTY),
            sleepers: AtomicUsize::new(0),
        }
    }

    fn give(&self, baton: Baton) {
        let to = match baton {
            Baton::ToFiber(_) => FIBER,
            Baton::ToEngine(_) => ENGINE,
            Baton::Empty => EMPTY,
        };
        *self.baton.lock().unwrap_or_else(|e| e.into_inner()) = baton;
        self.holder.store(to, Ordering::Release);
        if self.sleepers.load(Ordering::Acquire) > 0 {
            let _guard = self.baton.lock().unwrap_or_else(|e| e.into_inner());
            self.turn.notify_all();
        }
    }

    fn take(&self, want_fiber: bool) -> Baton {
        let want = if want_fiber { FIBER } else { ENGINE };
        for i in 0..SPINS + YIELDS {
            if self.holder.load(Ordering::Acquire) == want {
                break;
            }
            if i < SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let mut b = self.baton.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let ready = match &*b {
                Baton::ToFiber(_) => want_fiber,
                Baton::ToEngine(_) => !want_fiber,
                Baton::Empty => false,
            };
            if ready {
                self.holder.store(EMPTY, Ordering::Release);
                return std::mem::replace(&mut *b, Baton::Empty);
            }
            self.sleepers.fetch_add(1, Ordering::AcqRel);
            b = self.turn.wait(b).unwrap_or_else(|e| e.into_inner());
            self.sleepers.fetch_sub(1, Ordering::AcqRel);
        }
    }

    fn take_reply(&self) -> Reply {
        match self.take(true) {
            Baton::ToFiber(reply) => reply,
            _ => unreachable!("a fiber only wakes for the engine's message"),
        }
    }

    /// On the fiber: leaves `yielded` for the engine and waits for its reply.
    pub(super) fn to_engine(&self, yielded: Yielded) -> Reply {
        self.give(Baton::ToEngine(yielded));
        self.take_reply()
    }

    /// On the fiber, when the run is over and its frames are to stay where they are: tells
    /// the engine the fiber finished, and blocks its OS thread for good.
    pub(super) fn abandon(&self) -> ! {
        self.give(Baton::ToEngine(Yielded::Finished));
        loop {
            std::thread::park();
        }
    }
}

/// What one fiber holds while it lives: nothing, its OS thread keeps everything.
pub(super) struct Running;

/// Code for a pooled OS thread: a fiber's body and its baton, and whether the thread stays
/// with a [`Home`] afterwards instead of going back to the pool.
struct Job {
    shared: Arc<Shared>,
    body: Code,
    homed: bool,
}

/// The OS thread one simulated thread's fibers run on during a run, so that what native or
/// Rust code keeps in thread-local storage, and `pthread_self`, follow the simulated thread
/// from one activation (a callback, its code) to the next. Empty until its first fiber; the
/// thread goes back to the pool when the home is dropped (at the end of the run).
#[derive(Default)]
pub struct Home(Option<std::sync::mpsc::Sender<Job>>);

impl Drop for Home {
    fn drop(&mut self) {
        if let Some(worker) = self.0.take() {
            IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(worker);
        }
    }
}

/// Idle OS threads, each waiting on its channel for a fiber to run. Runs start and end
/// fibers by the thousand; reusing threads keeps that cheap.
static IDLE: Mutex<Vec<std::sync::mpsc::Sender<Job>>> = Mutex::new(Vec::new());

/// A pooled OS thread: runs one fiber after another, returning to the pool between them.
fn worker(jobs: std::sync::mpsc::Receiver<Job>, me: std::sync::mpsc::Sender<Job>) {
    while let Ok(Job { shared, body, homed }) = jobs.recv() {
        let first = shared.handoff.take_reply();
        let last = run_fiber(&shared, body, first);
        shared.handoff.give(Baton::ToEngine(last));
        if !homed {
            IDLE.lock().unwrap_or_else(|e| e.into_inner()).push(me.clone());
        }
    }
}

impl Running {
    /// Starts `body` on `home`'s OS thread (taken from the pool the first time) or on one of
    /// the pool's (a new one if none is idle), parked until the first [`Running::resume`].
    pub(super) fn start(shared: Arc<Shared>, body: Code, home: Option<&mut Home>) -> Running {
        let mut job = Job {
            shared,
            body,
            homed: home.is_some(),
        };
        let at_home = home.as_ref().and_then(|h| h.0.clone());
        let idle = || IDLE.lock().unwrap_or_else(|e| e.into_inner()).pop();
        for worker in at_home.into_iter().chain(std::iter::from_fn(idle)) {
            match worker.send(job) {
                Ok(()) => {
                    if let Some(home) = home {
                        home.0 = Some(worker);
                    }
                    return Running;
                }
                // That thread is gone (its process is exiting): try the next one.
                Err(std::sync::mpsc::SendError(back)) => job = back,
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        tx.send(job).expect("the receiver is alive");
        if let Some(home) = home {
            home.0 = Some(tx.clone());
        }
        std::thread::Builder::new()
            .name("simclr-fiber".into())
            .stack_size(super::STACK_BYTES)
            .spawn(move || worker(rx, tx))
            .expect("spawning a fiber thread");
        Running
    }

    /// On the engine: runs the fiber with `reply` until it yields again.
    pub(super) fn resume(&mut self, shared: &Shared, reply: Reply) -> Yielded {
        shared.handoff.give(Baton::ToFiber(reply));
        match shared.handoff.take(false) {
            Baton::ToEngine(yielded) => yielded,
            _ => unreachable!("the engine only wakes for the fiber's message"),
        }
    }
}

/// The pool of idle OS threads, locked so that no other thread changes it while this one
/// forks ([`crate::process::fork`]).
pub(crate) struct PoolHeld(std::sync::MutexGuard<'static, Vec<std::sync::mpsc::Sender<Job>>>);

impl PoolHeld {
    /// Locks the pool.
    pub(crate) fn take() -> PoolHeld {
        PoolHeld(IDLE.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// In the child of the fork: the pool's OS threads did not follow, so the pool is
    /// emptied (a fiber sent to one of them would never run), then unlocked.
    pub(crate) fn in_child(mut self) {
        std::mem::take(&mut *self.0)
            .into_iter()
            .for_each(std::mem::forget);
    }
}
