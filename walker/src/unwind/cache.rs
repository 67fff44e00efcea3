//! The unwind cache a thread keeps across walks: each address's [`Rule`], keyed by the
//! unwinder's 64-bit module generation (so a rule never outlives the modules it came from),
//! and the scratch space DWARF evaluation reuses. Created once; nothing in a step allocates.

use super::dwarf::{Row, STATE_DEPTH};
use super::rule::Rule;
use super::FrameKind;

/// Sets of [`WAYS`] rules each: 512 rules. Four ways keep a deep stack's rules from
/// evicting each other when their addresses hash alike.
const SETS: usize = 128;
const WAYS: usize = 4;

/// Which (address, frame kind, module generation) a slot holds, and where its rule is.
#[derive(Clone, Copy)]
struct Tag {
    address: u64,
    /// The generation shifted left once, plus 1 for the first frame; 0 for an empty slot
    /// (generations start at 1).
    generation_kind: u64,
    /// Index of the slot's rule in `rules` (meaningless while the slot is empty).
    rule: u32,
}

impl Tag {
    const EMPTY: Tag = Tag {
        address: 0,
        generation_kind: 0,
        rule: 0,
    };

    fn key(generation: u64, kind: FrameKind) -> u64 {
        generation << 1 | u64::from(kind == FrameKind::First)
    }
}

/// Cache hit and miss counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Steps whose rule came from the cache.
    pub hits: u64,
    /// Steps that evaluated unwind data.
    pub misses: u64,
}

/// Rules by address, and DWARF scratch space. One per walking thread.
pub struct UnwindCache {
    /// `SETS * WAYS` tags, a set's together.
    tags: Box<[Tag]>,
    /// The rules, appended as slots fill (so a new cache costs little more than its tags).
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

impl UnwindCache {
    /// An empty cache.
    pub fn new() -> UnwindCache {
        UnwindCache {
            tags: vec![Tag::EMPTY; SETS * WAYS].into_boxed_slice(),
            rules: Vec::with_capacity(SETS * WAYS),
            next: vec![0; SETS].into_boxed_slice(),
            saved_rows: Vec::with_capacity(STATE_DEPTH),
            stats: CacheStats::default(),
        }
    }

    /// Hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    fn set(address: u64) -> usize {
        // Fibonacci hashing: the high bits of the product mix every bit of the address.
        (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SETS.trailing_zeros())) as usize
    }

    /// Where the cached rule for (`address`, `kind`) under `generation` is, counting a hit or
    /// a miss.
    #[inline]
    pub(crate) fn lookup(&mut self, generation: u64, address: u64, kind: FrameKind) -> Option<usize> {
        let key = Tag::key(generation, kind);
        let first = UnwindCache::set(address) * WAYS;
        // Branch-free over the ways: which one hits varies from frame to frame.
        let mut rule = None;
        for tag in &self.tags[first..first + WAYS] {
            let hit = tag.address == address && tag.generation_kind == key;
            rule = if hit { Some(tag.rule) } else { rule };
        }
        match rule {
            Some(i) => {
                self.stats.hits += 1;
                Some(i as usize)
            }
            None => {
                self.stats.misses += 1;
                None
            }
        }
    }

    /// A rule by the index [`UnwindCache::lookup`] or [`UnwindCache::insert`] gave.
    #[inline]
    pub(crate) fn rule(&self, index: usize) -> &Rule {
        &self.rules[index]
    }

    /// Caches `rule` for (`address`, `kind`) under `generation`; returns where it is.
    pub(crate) fn insert(&mut self, generation: u64, address: u64, kind: FrameKind, rule: Rule) -> usize {
        let set = UnwindCache::set(address);
        let way = usize::from(self.next[set]);
        self.next[set] = ((way + 1) % WAYS) as u8;
        let tag = &mut self.tags[set * WAYS + way];
        if tag.generation_kind == 0 {
            tag.rule = self.rules.len() as u32;
            self.rules.push(rule);
        } else {
            self.rules[tag.rule as usize] = rule;
        }
        tag.address = address;
        tag.generation_kind = Tag::key(generation, kind);
        tag.rule as usize
    }

    /// The DWARF evaluation scratch space.
    pub(crate) fn saved_rows(&mut self) -> &mut Vec<Row> {
        &mut self.saved_rows
    }
}
