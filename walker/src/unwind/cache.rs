//! The unwind cache a thread keeps across walks: each address's [`Rule`], keyed by the
//! unwinder's 64-bit module generation (so a rule never outlives the modules it came from),
//! and the scratch space DWARF evaluation reuses. Created once; nothing in a step allocates.

use super::rule::Rule;
use super::FrameKind;
use gimli::UnwindContext;

/// How many rules the cache holds (direct-mapped).
const SLOTS: usize = 512;

#[derive(Clone, Copy)]
struct Slot {
    /// 0 for an empty slot (generations start at 1).
    generation: u64,
    address: u64,
    first: bool,
    rule: Rule,
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
    slots: Box<[Slot]>,
    context: Box<UnwindContext<usize>>,
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
        let empty = Slot {
            generation: 0,
            address: 0,
            first: false,
            rule: Rule::identity(),
        };
        UnwindCache {
            slots: vec![empty; SLOTS].into_boxed_slice(),
            context: Box::new(UnwindContext::new()),
            stats: CacheStats::default(),
        }
    }

    /// Hits and misses so far.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    fn index(address: u64) -> usize {
        // Fibonacci hashing: return addresses share low bits less than function starts do.
        (address.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SLOTS.trailing_zeros())) as usize
    }

    /// The cached rule for (`address`, `kind`) under `generation`, counting a hit or a miss.
    pub(crate) fn lookup(&mut self, generation: u64, address: u64, kind: FrameKind) -> Option<&Rule> {
        let slot = &self.slots[UnwindCache::index(address)];
        if slot.generation == generation
            && slot.address == address
            && slot.first == (kind == FrameKind::First)
        {
            self.stats.hits += 1;
            Some(&slot.rule)
        } else {
            self.stats.misses += 1;
            None
        }
    }

    /// Caches `rule` for (`address`, `kind`) under `generation`.
    pub(crate) fn insert(&mut self, generation: u64, address: u64, kind: FrameKind, rule: Rule) {
        self.slots[UnwindCache::index(address)] = Slot {
            generation,
            address,
            first: kind == FrameKind::First,
            rule,
        };
    }

    /// The DWARF evaluation scratch space.
    pub(crate) fn context(&mut self) -> &mut UnwindContext<usize> {
        &mut self.context
    }
}
