//! Forking a process that runs simulations, for runs in worker processes of their own.
//!
//! `fork` copies only the thread that calls it. A lock that another thread held at that
//! instant is held for good in the child, and the child's first attempt to take it never
//! returns. [`prepare`] takes every process-wide lock of this crate (the pool of fiber
//! threads, the cache of built machine code) so that no other thread holds one across the
//! fork; the caller forks, then releases them in each process with [`Prepared::in_parent`]
//! or [`Prepared::in_child`].

use crate::code::machine::CacheHeld;
use crate::fiber::PoolHeld;

/// This crate's process-wide locks, held across a `fork` ([`prepare`]).
#[must_use = "fork while it is held, then release it in each process"]
pub struct Prepared {
    pool: PoolHeld,
    cache: CacheHeld,
}

/// Takes this crate's process-wide locks, always in the same order, waiting for any other
/// thread that holds one to release it.
pub fn prepare() -> Prepared {
    let pool = PoolHeld::take();
    let cache = CacheHeld::take();
    Prepared { pool, cache }
}

impl Prepared {
    /// In the process that forked (or when the fork failed): releases the locks.
    pub fn in_parent(self) {
        drop(self);
    }

    /// In the child: forgets the fiber threads, which did not follow it, and releases the
    /// locks. Call it before anything else in the child.
    pub fn in_child(self) {
        let Prepared { pool, cache } = self;
        pool.in_child();
        drop(cache);
    }
}
