//! The threads the sampler may sample, fed by the runtime's thread callbacks.
//!
//! Each tracked thread has a per-thread lock, shared by the sampler (held for the whole
//! sample) and the `ThreadDestroyed` handler (held while it marks the thread destroyed). So
//! `ThreadDestroyed` returns only once any walk of the thread has ended (R37), and a sampler
//! that takes the lock after the mark sees it when it re-checks.
//!
//! The list itself sits behind a profiler lock (`registry`) that the sampler takes only to
//! copy it, before it stops any thread. The entries are shared (`Arc`), so a copy is a handful
//! of reference counts into a preallocated vector.

use corprof::os::{MutexId, OsThread, Sync};
use corprof::ThreadId;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// One managed thread the sampler knows.
#[derive(Debug)]
pub struct Tracked {
    /// Its `ThreadID`.
    pub id: ThreadId,
    /// Its OS thread, once `ThreadAssignedToOSThread` (or `GetThreadInfo`) said (0: unbound).
    os: AtomicU32,
    /// `ThreadDestroyed` has run for it.
    destroyed: AtomicBool,
    /// The per-thread lock.
    lock: MutexId,
    /// Watchdog interventions on it in the budget period `period`.
    interventions: AtomicU32,
    period: AtomicU64,
}

impl Tracked {
    /// Its OS thread, if it is bound to one.
    pub fn os_thread(&self) -> Option<OsThread> {
        match self.os.load(Ordering::Acquire) {
            0 => None,
            id => Some(OsThread(id)),
        }
    }

    /// Its per-thread lock, held by the sampler for a whole sample and by `ThreadDestroyed`
    /// while it marks the thread.
    pub fn lock(&self) -> MutexId {
        self.lock
    }

    /// Whether `ThreadDestroyed` has marked it.
    pub fn destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// Its interventions in budget period `period` (counting restarts in a new period).
    pub(crate) fn interventions(&self, period: u64) -> u32 {
        if self.period.load(Ordering::Acquire) == period {
            self.interventions.load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// Counts one intervention in budget period `period`.
    pub(crate) fn intervened(&self, period: u64) {
        if self.period.swap(period, Ordering::AcqRel) != period {
            self.interventions.store(0, Ordering::Release);
        }
        self.interventions.fetch_add(1, Ordering::AcqRel);
    }
}

/// The tracked threads.
#[derive(Debug)]
pub struct Registry {
    entries: Mutex<Vec<Arc<Tracked>>>,
    lock: OnceLock<MutexId>,
    /// Threads destroyed before seeding ended (`None` after): a seed lists threads whose
    /// `ThreadDestroyed` may already have run, and must not bring them back.
    tombstones: Mutex<Option<Vec<ThreadId>>>,
}

impl Default for Registry {
    fn default() -> Registry {
        Registry {
            entries: Mutex::default(),
            lock: OnceLock::new(),
            tombstones: Mutex::new(Some(Vec::new())),
        }
    }
}

impl Registry {
    /// The name the registry's lock is created with.
    pub const LOCK_NAME: &'static str = "simclr-sampler-registry";

    /// The profiler lock that guards the list (created on first use, on the calling thread).
    pub(crate) fn lock_id(&self, os: &dyn Sync) -> MutexId {
        super::once(&self.lock, || os.mutex_create(Self::LOCK_NAME))
    }

    /// Runs `f` on the list with the registry lock held. The inner mutex is never contended:
    /// every user holds the registry lock, and `f` makes no OS call.
    fn with<R>(&self, os: &dyn Sync, f: impl FnOnce(&mut Vec<Arc<Tracked>>) -> R) -> R {
        let lock = self.lock_id(os);
        os.mutex_lock(lock);
        let r = f(&mut self.entries.lock().unwrap_or_else(|e| e.into_inner()));
        os.mutex_unlock(lock);
        r
    }

    fn tombstones(&self) -> std::sync::MutexGuard<'_, Option<Vec<ThreadId>>> {
        self.tombstones.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Seeding is over (every thread that existed before the callbacks has been added):
    /// destroyed threads need no more remembering.
    pub fn seeded(&self, os: &dyn Sync) {
        self.with(os, |_| *self.tombstones() = None);
    }

    /// Tracks `id` (if it is new), bound to `os_thread` when known. A thread the callbacks
    /// report (`fresh`) is live; one from a seed is skipped if it was destroyed meanwhile.
    pub fn add(&self, os: &dyn Sync, id: ThreadId, os_thread: Option<OsThread>, fresh: bool) {
        // The per-thread lock is created outside the registry lock (creating may block).
        let known = self.with(os, |list| list.iter().any(|t| t.id == id));
        let entry = if known {
            None
        } else {
            Some(Arc::new(Tracked {
                id,
                os: AtomicU32::new(0),
                destroyed: AtomicBool::new(false),
                lock: os.mutex_create(&format!("simclr-sampler-thread-{:#x}", id.0)),
                interventions: AtomicU32::new(0),
                period: AtomicU64::new(0),
            }))
        };
        self.with(os, |list| {
            if let Some(dead) = self.tombstones().as_mut() {
                if fresh {
                    dead.retain(|&d| d != id);
                } else if dead.contains(&id) {
                    return;
                }
            }
            if let Some(entry) = entry.filter(|_| !list.iter().any(|t| t.id == id)) {
                list.push(entry);
            }
            if let (Some(t), Some(bound)) = (list.iter().find(|t| t.id == id), os_thread) {
                t.os.store(bound.0, Ordering::Release);
            }
        });
    }

    /// The entry of `id`, if tracked.
    pub fn get(&self, os: &dyn Sync, id: ThreadId) -> Option<Arc<Tracked>> {
        self.with(os, |list| list.iter().find(|t| t.id == id).cloned())
    }

    /// `ThreadDestroyed`: marks `id` destroyed under its per-thread lock and forgets it
    /// (remembering it until seeding ends).
    pub fn destroy(&self, os: &dyn Sync, id: ThreadId) {
        // The tombstone first: no seed adds `id` after it, and an entry added before it is
        // found and marked below.
        self.with(os, |_| {
            if let Some(dead) = self.tombstones().as_mut() {
                dead.push(id);
            }
        });
        if let Some(entry) = self.get(os, id) {
            os.mutex_lock(entry.lock);
            entry.destroyed.store(true, Ordering::Release);
            os.mutex_unlock(entry.lock);
        }
        self.with(os, |list| list.retain(|t| t.id != id));
    }

    /// How many threads are tracked.
    pub fn count(&self, os: &dyn Sync) -> usize {
        self.with(os, |list| list.len())
    }

    /// Copies the list into `out` (cleared first; it grows only past its capacity).
    pub fn copy_into(&self, os: &dyn Sync, out: &mut Vec<Arc<Tracked>>) {
        out.clear();
        self.with(os, |list| out.extend(list.iter().cloned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use corprof::os::StdSync;

    fn ids(registry: &Registry, os: &StdSync) -> Vec<u64> {
        let mut out = Vec::new();
        registry.copy_into(os, &mut out);
        out.iter().map(|t| t.id.0).collect()
    }

    #[test]
    fn callbacks_add_bind_and_destroy() {
        let os = StdSync::default();
        let registry = Registry::default();
        registry.seeded(&os);
        registry.add(&os, ThreadId(1), None, true);
        let entry = registry.get(&os, ThreadId(1)).unwrap();
        assert_eq!(entry.os_thread(), None, "unbound until assigned");
        registry.add(&os, ThreadId(1), Some(OsThread(7)), true);
        assert_eq!(entry.os_thread(), Some(OsThread(7)));
        assert_eq!(ids(&registry, &os), [1], "added once");
        registry.destroy(&os, ThreadId(1));
        assert!(entry.destroyed(), "a sampler holding the entry sees the mark");
        assert!(ids(&registry, &os).is_empty());
    }

    #[test]
    fn a_seed_does_not_bring_back_a_thread_destroyed_before_seeding_ended() {
        let os = StdSync::default();
        let registry = Registry::default();
        registry.destroy(&os, ThreadId(2));
        registry.add(&os, ThreadId(2), Some(OsThread(9)), false);
        registry.add(&os, ThreadId(3), Some(OsThread(10)), false);
        assert_eq!(ids(&registry, &os), [3]);
        // A new thread reported by the callbacks with a reused id is live.
        registry.add(&os, ThreadId(2), Some(OsThread(11)), true);
        registry.seeded(&os);
        assert_eq!(ids(&registry, &os), [3, 2]);
    }

    #[test]
    fn budgets_count_per_period() {
        let t = Tracked {
            id: ThreadId(1),
            os: AtomicU32::new(0),
            destroyed: AtomicBool::new(false),
            lock: MutexId(0),
            interventions: AtomicU32::new(0),
            period: AtomicU64::new(0),
        };
        t.intervened(3);
        t.intervened(3);
        assert_eq!((t.interventions(3), t.interventions(4)), (2, 0));
        t.intervened(4);
        assert_eq!(t.interventions(4), 1, "a new period starts from zero");
    }
}
