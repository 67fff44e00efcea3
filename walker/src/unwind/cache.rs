//! The unwind cache a thread keeps across walks: each address's rule, keyed by the
//! unwinder's 64-bit module generation (so a rule never outlives the modules it came from),
//! and the scratch space DWARF evaluation reuses. Created once; nothing in a step allocates.

use super::dwarf::{Row, STATE_DEPTH};
use super::rule::Rule;
use super::{FrameKind, UnwindError};

/// Sets of `WAYS` rules each: 512 rules. Four ways keep a deep stack's rules from
/// evicting each other when their addresses hash alike.
const SETS: usize = 128;
const WAYS: usize = 4;
const SLOTS: usize = SETS * WAYS;

/// Cache hit and miss counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Steps whose rule came from the cache.
    pub hits: u64,
    /// Steps that evaluated unwind data.
    pub misses: u64,
}

/// Rules by address, and DWARF scratch space. One per walking thread.
///
/// Slots are grouped by set (a set's four slots together). All-zero slot tags are empty,
/// so a new cache is zeroed memory and little else.
pub struct UnwindCache {
    /// Each slot's address, and its module generation shifted left once plus 1 for the first
    /// frame (0 for a slot without a valid rule: generations start at 1). A set's tags share
    /// a cache line.
    tags: Box<[[u64; 2]]>,
    /// Each slot's rule, as an index into `rules` plus 1; 0 until the slot first fills.
    indices: Box<[u32]>,
    /// The rules, appended as slots first fill.
    rules: Vec<Rule>,
    /// Per set, the way the next insertion replaces (round robin).
    next: Box<[u8]>,
    /// DWARF evaluation's `DW_CFA_remember_state` stack (capacity fixed).
    saved_rows: Vec<Row>,
    stats: CacheStats,
}

impl Default for UnwindCache {
    fn default() -> UnwindCache {
        UnwindCache::new()
    }
}

fn key(generation: u64, kind: FrameKind) -> u64 {
    generation << 1 | u64::from(kind == FrameKind::First)
}

impl UnwindCache {
    /// An empty cache.
    pub fn new() -> UnwindCache {
        UnwindCache {
            tags: vec![[0; 2]; SLOTS].into_boxed_slice(),
            indices: vec![0; SLOTS].into_boxed_slice(),
            rules: Vec::with_capacity(SLOTS),
            next: vec![0; SETS].into_boxed_slice(),
            saved_rows: Vec::with_capacity(STATE_DEPTH),
            stats: CacheStats::default(),
        }
    }

    /// Hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// The first slot of `address`'s set.
    fn set(address: u64) -> usize {
        // Fibonacci hashing: the high bits of the product mix every bit of the address.
        let set = address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SETS.trailing_zeros());
        set as usize * WAYS
    }

    /// Where the cached rule for (`address`, `kind`) under `generation` is, counting a hit or
    /// a miss.
    #[inline]
    pub(crate) fn lookup(&mut self, generation: u64, address: u64, kind: FrameKind) -> Option<usize> {
        let key = key(generation, kind);
        let first = UnwindCache::set(address);
        // Branch-free over the ways: which one hits varies from frame to frame.
        let mut index = 0;
        for slot in first..first + WAYS {
            let hit = self.tags[slot] == [address, key];
            index = if hit { self.indices[slot] } else { index };
        }
        if index == 0 {
            self.stats.misses += 1;
            return None;
        }
        self.stats.hits += 1;
        Some(index as usize - 1)
    }

    /// A rule by the index [`UnwindCache::lookup`] or [`UnwindCache::insert_with`] gave.
    #[inline]
    pub(crate) fn rule(&self, index: usize) -> &Rule {
        &self.rules[index]
    }

    /// Evaluates the rule for (`address`, `kind`) under `generation` in place, in the slot it
    /// will occupy (`evaluate` gets the reset rule and the DWARF scratch space); returns where
    /// it is. On an error the slot is left empty.
    pub(crate) fn insert_with(
        &mut self,
        generation: u64,
        address: u64,
        kind: FrameKind,
        evaluate: impl FnOnce(&mut Rule, &mut Vec<Row>) -> Result<(), UnwindError>,
    ) -> Result<usize, UnwindError> {
        let set = UnwindCache::set(address);
        let way = usize::from(self.next[set / WAYS]);
        self.next[set / WAYS] = ((way + 1) % WAYS) as u8;
        let slot = set + way;
        if self.indices[slot] == 0 {
            self.rules.push(Rule::identity());
            self.indices[slot] = self.rules.len() as u32;
        }
        let index = self.indices[slot] as usize - 1;
        let rule = &mut self.rules[index];
        rule.reset();
        self.tags[slot] = [0, 0];
        evaluate(rule, &mut self.saved_rows)?;
        self.tags[slot] = [address, key(generation, kind)];
        Ok(index)
    }
}
