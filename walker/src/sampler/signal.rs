//! The hand-off between the sampler thread and the profiling signal's handler (Unix).
//!
//! The sampler arms the slot for one target and sends it the signal. The handler, on the
//! target, claims the slot, copies the interrupted registers and the top of its own stack
//! into the slot's preallocated buffer, and marks it done: it takes no lock and allocates
//! nothing. The sampler then unwinds from the copy at leisure, while the target runs on.
//!
//! Who may touch the buffer is decided by one atomic state (idle → armed → busy → done →
//! idle): the sampler arms and collects, the handler claims and fills. The buffer's mutex is
//! therefore never contended; it only satisfies the borrow checker.

use corprof::os::OsThread;
use corprof::Context;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

const IDLE: u8 = 0;
const ARMED: u8 = 1;
const BUSY: u8 = 2;
const DONE: u8 = 3;

/// What the handler captured.
#[derive(Debug)]
pub(crate) struct Capture {
    /// The thread the slot is armed for.
    pub target: OsThread,
    /// Its interrupted registers.
    pub context: Context,
    /// The address of `words[0]`: the interrupted stack pointer.
    pub start: u64,
    /// The copied stack words (`len` of them are valid).
    pub words: Vec<u64>,
    /// How many words were copied.
    pub len: usize,
}

impl Capture {
    /// A stack read served from the copy (`None` outside it).
    pub(crate) fn read(&self, address: u64) -> Option<u64> {
        let offset = address.checked_sub(self.start)?;
        if !offset.is_multiple_of(8) {
            return None;
        }
        self.words[..self.len].get((offset / 8) as usize).copied()
    }
}

/// The slot.
#[derive(Debug)]
pub(crate) struct Slot {
    state: AtomicU8,
    capture: Mutex<Capture>,
}

impl Slot {
    /// A slot whose buffer holds up to `words` stack words.
    pub(crate) fn new(words: usize) -> Slot {
        Slot {
            state: AtomicU8::new(IDLE),
            capture: Mutex::new(Capture {
                target: OsThread(0),
                context: Context::zeroed(),
                start: 0,
                words: vec![0; words],
                len: 0,
            }),
        }
    }

    fn capture(&self) -> std::sync::MutexGuard<'_, Capture> {
        self.capture.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The sampler arms the slot for `target` (false if a handler still holds it).
    pub(crate) fn arm(&self, target: OsThread) -> bool {
        if self.state.load(Ordering::Acquire) != IDLE {
            return false;
        }
        self.capture().target = target;
        self.state.store(ARMED, Ordering::Release);
        true
    }

    /// The handler on thread `me` claims the slot: `None` when it is not armed for `me`.
    pub(crate) fn claim(&self, me: OsThread) -> Option<std::sync::MutexGuard<'_, Capture>> {
        self.state
            .compare_exchange(ARMED, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        let capture = self.capture();
        if capture.target != me {
            drop(capture);
            self.state.store(ARMED, Ordering::Release);
            return None;
        }
        Some(capture)
    }

    /// The handler is done filling the slot (drop the guard first).
    pub(crate) fn fill(&self) {
        self.state.store(DONE, Ordering::Release);
    }

    /// The sampler takes a filled slot; `None` if it is not done.
    pub(crate) fn collect(&self) -> Option<std::sync::MutexGuard<'_, Capture>> {
        (self.state.load(Ordering::Acquire) == DONE).then(|| self.capture())
    }

    /// The sampler gives up on an armed slot the handler never claimed (true), or finds it
    /// claimed (false: wait for the handler to finish).
    pub(crate) fn disarm(&self) -> bool {
        match self
            .state
            .compare_exchange(ARMED, IDLE, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state != BUSY,
        }
    }

    /// The sampler is done with a collected slot.
    pub(crate) fn release(&self) {
        self.state.store(IDLE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_hands_off_once_per_arming() {
        let slot = Slot::new(4);
        assert!(slot.claim(OsThread(1)).is_none(), "not armed");
        assert!(slot.arm(OsThread(1)));
        assert!(slot.claim(OsThread(2)).is_none(), "armed for another thread");
        {
            let mut c = slot.claim(OsThread(1)).expect("armed for this thread");
            c.start = 0x1000;
            c.words[..2].copy_from_slice(&[7, 8]);
            c.len = 2;
        }
        assert!(!slot.arm(OsThread(1)), "busy until collected");
        slot.fill();
        let c = slot.collect().expect("filled");
        assert_eq!(
            (c.read(0x1000), c.read(0x1008), c.read(0x1010), c.read(0x1004)),
            (Some(7), Some(8), None, None)
        );
        drop(c);
        slot.release();
        assert!(slot.arm(OsThread(3)));
        assert!(slot.disarm(), "never claimed: the sampler gives up");
        assert!(slot.collect().is_none());
    }
}
