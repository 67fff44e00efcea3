//! Steps never allocate once the cache exists: an asynchronous walk runs while its target is
//! suspended, possibly holding the heap lock. Counted with a global allocator, for cold
//! (every rule evaluated) and warm walks and single steps, in every format.

use fixtures::deep_stack::{DeepStack, Mix};
use fixtures::unwind_oracle::Format;
use simclr_walker::unwind::{FrameKind, UnwindCache};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts this thread's allocations (other test threads do not disturb the count).
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator with the caller's arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|n| n.set(n.get() + 1));
        // SAFETY: forwards to the system allocator with the caller's arguments.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwards to the system allocator with the caller's arguments.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn walks_and_steps_do_not_allocate() {
    let stack = DeepStack::build(64, Mix::Any, 3).unwrap();
    for format in Format::ALL {
        let (unwinder, _) = stack.unwinders(format).unwrap();
        let mut cache = UnwindCache::new();
        let mut ips = [0u64; 128];
        for pass in ["cold", "warm"] {
            let mut n = 0;
            let walked = allocations_during(|| {
                n = unwinder
                    .walk(
                        &stack.regs,
                        stack.bounds,
                        &mut cache,
                        &mut |a| stack.read(a),
                        &mut ips,
                    )
                    .0;
            });
            assert_eq!((walked, n), (0, 64), "{format:?} {pass} walk");
        }
        let mut fresh = UnwindCache::new();
        let mut regs = stack.regs;
        let stepped = allocations_during(|| {
            let mut kind = FrameKind::First;
            while let Ok(true) =
                unwinder.step(&mut regs, kind, stack.bounds, &mut fresh, &mut |a| stack.read(a))
            {
                kind = FrameKind::Caller;
            }
        });
        assert_eq!(stepped, 0, "{format:?} steps");
        assert_eq!(
            fresh.stats().misses,
            64,
            "{format:?}: every step evaluated a rule"
        );
    }
}
