//! Which `COR_PRF_FRAME_INFO` records are valid now: a snapshot callback's record is valid
//! only while that callback runs (R24). CoreCLR builds it in the walk's own stack frame
//! (v3.1.23 `src/vm/proftoeeinterfaceimpl.cpp`, `ProfilerStackWalkCallback`) and
//! `GetFunctionInfo2` reads it unchecked, so a record kept after its callback returned is read
//! from a dead stack slot ([`Runtime::stale_frame_info`](crate::Runtime::stale_frame_info)).
//!
//! The records of the callbacks running on an OS thread (nested walks stack them) are kept
//! per OS thread: a callback runs on the thread that walks, and so does any call it makes.

use corprof::FrameInfo;
use std::cell::RefCell;

thread_local! {
    /// The addresses of the records of the callbacks running on this OS thread, outermost
    /// first.
    static LIVE: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
}

/// Runs `callback` with `record` valid: the snapshot callback it is passed to.
pub(crate) fn during<R>(record: &FrameInfo, callback: impl FnOnce() -> R) -> R {
    /// Ends the record's life, also when a run that ends unwinds the callback.
    struct Ends;
    impl Drop for Ends {
        fn drop(&mut self) {
            LIVE.with(|l| l.borrow_mut().pop());
        }
    }
    LIVE.with(|l| {
        let mut l = l.borrow_mut();
        if l.len() == l.capacity() {
            // Growing is the simulator's allocation, not the profiler's: it must not count
            // as taking the heap lock, or runs would differ with what earlier runs grew.
            crate::fiber::unobserved(|| l.reserve(16));
        }
        l.push(record as *const FrameInfo as usize);
    });
    let _ends = Ends;
    callback()
}

/// Whether the record at `address` is a running snapshot callback's on this OS thread.
pub fn is_live(address: usize) -> bool {
    LIVE.with(|l| l.borrow().contains(&address))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_live_during_its_callback_only_and_nested_ones_stack() {
        let outer = FrameInfo::default();
        let inner = FrameInfo::default();
        let at = |r: &FrameInfo| r as *const FrameInfo as usize;
        during(&outer, || {
            assert!(is_live(at(&outer)));
            during(&inner, || assert!(is_live(at(&outer)) && is_live(at(&inner))));
            assert!(!is_live(at(&inner)));
        });
        assert!(!is_live(at(&outer)));
    }
}
