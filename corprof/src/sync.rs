//! Atomics a sampler shares between its threads and callbacks, visible to a simulator.
//!
//! Samplers race at memory accesses, not only at API calls: a slot's "walk in progress" flag,
//! a spin lock, a destroyed mark. Write those with [`atomic`] instead of `std::sync::atomic`
//! (the same API) and a simulator can interleave threads between any two accesses.
//!
//! Without the `simulation` feature, [`atomic`] *is* `std::sync::atomic` and [`spin_loop`] is
//! `std::hint::spin_loop`: a production build carries nothing. With it (the simulator turns it
//! on; a crate that has the simulator only as a dev-dependency gets it in its tests alone),
//! every load, store and read-modify-write first calls the scheduling point a simulator
//! installed with [`install`], and [`spin_loop`] lets the other threads run until one of them
//! writes. Off a simulated thread, or before anything is installed, they are plain atomics.
//!
//! Interleavings are sequentially consistent: each access happens at once, in the order the
//! scheduler picks; the reorderings weaker orderings allow on real hardware are not explored.

#[cfg(not(feature = "simulation"))]
pub use std::hint::spin_loop;
#[cfg(not(feature = "simulation"))]
pub use std::sync::atomic;

#[cfg(feature = "simulation")]
pub use simulated::{install, spin_loop, Scheduler};

/// Atomics with a scheduling point before every access.
#[cfg(feature = "simulation")]
pub mod atomic {
    pub use std::sync::atomic::Ordering;
    use std::sync::atomic::{self as std_atomic};

    use super::simulated::access;

    /// A memory fence (a scheduling point, then `std::sync::atomic::fence`).
    pub fn fence(order: Ordering) {
        access(false);
        std_atomic::fence(order);
    }

    /// The methods every atomic type has.
    macro_rules! atomic_common {
        ($name:ident, $t:ty) => {
            /// `std::sync::atomic`'s type of the same name, each access a scheduling point.
            #[derive(Debug, Default)]
            pub struct $name(std_atomic::$name);

            impl $name {
                /// A new atomic holding `v`.
                pub const fn new(v: $t) -> $name {
                    $name(std_atomic::$name::new(v))
                }
                /// Loads the value.
                pub fn load(&self, order: Ordering) -> $t {
                    access(false);
                    self.0.load(order)
                }
                /// Stores `v`.
                pub fn store(&self, v: $t, order: Ordering) {
                    access(true);
                    self.0.store(v, order)
                }
                /// Stores `v`, returning the previous value.
                pub fn swap(&self, v: $t, order: Ordering) -> $t {
                    access(true);
                    self.0.swap(v, order)
                }
                /// Stores `new` if the value is `current`; the previous value either way.
                pub fn compare_exchange(
                    &self,
                    current: $t,
                    new: $t,
                    success: Ordering,
                    failure: Ordering,
                ) -> Result<$t, $t> {
                    access(false);
                    self.0.compare_exchange(current, new, success, failure)
                }
                /// As [`Self::compare_exchange`] (never fails spuriously here).
                pub fn compare_exchange_weak(
                    &self,
                    current: $t,
                    new: $t,
                    success: Ordering,
                    failure: Ordering,
                ) -> Result<$t, $t> {
                    self.compare_exchange(current, new, success, failure)
                }
                /// Applies `f` until it stores or `f` returns `None` (one scheduling point
                /// per attempt).
                pub fn fetch_update(
                    &self,
                    set: Ordering,
                    fetch: Ordering,
                    mut f: impl FnMut($t) -> Option<$t>,
                ) -> Result<$t, $t> {
                    let mut previous = self.load(fetch);
                    while let Some(next) = f(previous) {
                        match self.compare_exchange(previous, next, set, fetch) {
                            Ok(v) => return Ok(v),
                            Err(now) => previous = now,
                        }
                    }
                    Err(previous)
                }
                /// The value, for an owner (no other thread can see it).
                pub fn get_mut(&mut self) -> &mut $t {
                    self.0.get_mut()
                }
                /// The value, consuming the atomic.
                pub fn into_inner(self) -> $t {
                    self.0.into_inner()
                }
            }
        };
    }

    /// Read-modify-write methods, each a write.
    macro_rules! atomic_rmw {
        ($name:ident, $t:ty, $($op:ident),*) => {
            impl $name {
                $(
                    /// As `std::sync::atomic`'s method of the same name.
                    pub fn $op(&self, v: $t, order: Ordering) -> $t {
                        access(true);
                        self.0.$op(v, order)
                    }
                )*
            }
        };
    }

    atomic_common!(AtomicBool, bool);
    atomic_rmw!(AtomicBool, bool, fetch_and, fetch_or, fetch_xor, fetch_nand);
    /// Integer atomics.
    macro_rules! atomic_int {
        ($($name:ident: $t:ty),*) => {$(
            atomic_common!($name, $t);
            atomic_rmw!($name, $t, fetch_add, fetch_sub, fetch_and, fetch_or, fetch_xor, fetch_nand, fetch_max, fetch_min);
        )*};
    }
    atomic_int!(
        AtomicU8: u8, AtomicU16: u16, AtomicU32: u32, AtomicU64: u64, AtomicUsize: usize,
        AtomicI8: i8, AtomicI16: i16, AtomicI32: i32, AtomicI64: i64, AtomicIsize: isize
    );
}

/// The installed scheduler.
#[cfg(feature = "simulation")]
mod simulated {
    use std::sync::OnceLock;

    /// A simulator's scheduling points, installed once per process with [`install`].
    #[derive(Clone, Copy, Debug)]
    pub struct Scheduler {
        /// Called before every atomic access: `true` when the access surely writes (a store,
        /// a swap, a `fetch_*`); loads, fences and compare-exchanges pass `false`.
        pub access: fn(write: bool),
        /// [`spin_loop`]: lets the other threads run until one of them writes.
        pub spin: fn(),
    }

    static SCHEDULER: OnceLock<Scheduler> = OnceLock::new();

    /// Installs `scheduler` for every atomic of this process; `false` (and nothing changes)
    /// if one was installed before.
    pub fn install(scheduler: Scheduler) -> bool {
        SCHEDULER.set(scheduler).is_ok()
    }

    /// The scheduling point before an access.
    pub(super) fn access(write: bool) {
        if let Some(s) = SCHEDULER.get() {
            (s.access)(write);
        }
    }

    /// In a spin-wait loop: `std::hint::spin_loop`, and under a simulator a wait until another
    /// thread writes (re-reading before that could see nothing new).
    pub fn spin_loop() {
        match SCHEDULER.get() {
            Some(s) => (s.spin)(),
            None => std::hint::spin_loop(),
        }
    }
}
