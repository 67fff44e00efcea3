//! The process's locks: the runtime's, the scenario's and those profiler code creates.
//!
//! Invariants: a lock has at most one owner, and an owner exactly while its count is positive;
//! locks are not recursive except the thread-store lock, whose re-entries count (a second
//! `SuspendRuntime` leaks one hold, R41). Waiting for a lock one owns is left to the wait-for
//! graph, where it is a one-thread cycle.

use super::program::LockId;
use std::collections::HashMap;

/// One lock's state.
#[derive(Clone, Copy, Debug, Default)]
struct LockState {
    owner: Option<usize>,
    count: u32,
}

/// Every lock of a run, by [`LockId`].
#[derive(Clone, Debug)]
pub(crate) struct LockTable {
    states: Vec<LockState>,
    names: Vec<String>,
    /// Each name's lock (the first, should a name be given twice).
    by_name: HashMap<String, u32>,
    /// How many locks the run began with (the runtime's and the scenario's): those after
    /// them profiler code created.
    declared: usize,
}

impl LockTable {
    /// The locks `names`, all free.
    pub fn new(names: &[String]) -> LockTable {
        let mut by_name = HashMap::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            by_name.entry(name.clone()).or_insert(i as u32);
        }
        LockTable {
            states: vec![LockState::default(); names.len()],
            names: names.to_vec(),
            by_name,
            declared: names.len(),
        }
    }

    /// The lock's name.
    pub fn name(&self, l: LockId) -> &str {
        &self.names[l.0 as usize]
    }

    /// The lock's owner.
    pub fn owner(&self, l: LockId) -> Option<usize> {
        self.states[l.0 as usize].owner
    }

    /// True when thread `t` holds a lock.
    pub fn held_by(&self, t: usize) -> bool {
        self.states.iter().any(|s| s.owner == Some(t))
    }

    /// The names of the locks thread `t` holds.
    pub fn held(&self, t: usize) -> impl Iterator<Item = &str> {
        self.states
            .iter()
            .zip(&self.names)
            .filter(move |(s, _)| s.owner == Some(t))
            .map(|(_, name)| name.as_str())
    }

    /// The locks thread `t` holds.
    pub fn held_ids(&self, t: usize) -> impl Iterator<Item = LockId> + '_ {
        (self.states.iter().enumerate())
            .filter(move |(_, s)| s.owner == Some(t))
            .map(|(i, _)| LockId(i as u32))
    }

    /// True when profiler code created `l` (it is none of the runtime's or the file's).
    pub fn is_profilers(&self, l: LockId) -> bool {
        l.0 as usize >= self.declared
    }

    /// True when thread `t` holds a lock profiler code created.
    pub fn profiler_lock_held_by(&self, t: usize) -> bool {
        self.states[self.declared..].iter().any(|s| s.owner == Some(t))
    }

    /// The lock opened by `key` (named objects are shared): one opened by it before, else a
    /// new one, free, called `name` in reports.
    pub fn open_as(&mut self, key: &str, name: &str) -> LockId {
        if let Some(&at) = self.by_name.get(key) {
            return LockId(at);
        }
        // Lossless: a run cannot hold 2^32 locks in memory.
        let at = self.names.len() as u32;
        self.states.push(LockState::default());
        self.names.push(name.to_string());
        self.by_name.insert(key.to_string(), at);
        LockId(at)
    }

    /// True when thread `t` could take `l` now.
    pub fn can_take(&self, t: usize, l: LockId) -> bool {
        match self.owner(l) {
            None => true,
            Some(o) => o == t && l == LockId::THREAD_STORE,
        }
    }

    /// Takes `l` for `t`; false (nothing changed) when it must wait.
    pub fn take(&mut self, t: usize, l: LockId) -> bool {
        if !self.can_take(t, l) {
            return false;
        }
        let s = &mut self.states[l.0 as usize];
        s.owner = Some(t);
        s.count += 1;
        true
    }

    /// Releases one hold of `l` by `t`; `Err(holder)` when `t` does not hold it. True in `Ok`
    /// when the lock is now free.
    pub fn release(&mut self, t: usize, l: LockId) -> Result<bool, Option<usize>> {
        let s = &mut self.states[l.0 as usize];
        if s.owner != Some(t) {
            return Err(s.owner);
        }
        s.count -= 1;
        if s.count == 0 {
            s.owner = None;
        }
        debug_assert_eq!(s.owner.is_some(), s.count > 0);
        Ok(s.owner.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_thread_store_lock_counts_reentries() {
        let names: Vec<String> = super::super::program::RUNTIME_LOCKS
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut locks = LockTable::new(&names);
        assert!(locks.take(0, LockId::HEAP));
        assert!(!locks.take(0, LockId::HEAP), "not recursive");
        assert!(!locks.take(1, LockId::HEAP));
        assert_eq!(locks.release(1, LockId::HEAP), Err(Some(0)));
        assert_eq!(locks.release(0, LockId::HEAP), Ok(true));
        assert!(locks.take(2, LockId::THREAD_STORE) && locks.take(2, LockId::THREAD_STORE));
        assert_eq!(
            locks.release(2, LockId::THREAD_STORE),
            Ok(false),
            "one hold leaked"
        );
        assert_eq!(locks.owner(LockId::THREAD_STORE), Some(2));
        assert_eq!(locks.open_as("heap", "heap"), LockId::HEAP);
        let mine = locks.open_as("pthread_mutex 0x10", "pthread_mutex mine");
        let again = locks.open_as("pthread_mutex 0x10", "pthread_mutex other");
        assert_eq!(again, mine, "opened by its key, not created again");
        assert_eq!(
            locks.name(mine),
            "pthread_mutex mine",
            "the name it was created with"
        );
    }
}
