//! The unwind cache a thread keeps across walks: each address's rule, keyed by the
//! unwinder's 64-bit module generation (so a rule never outlives the modules it came from),
//! and the scratch space DWARF evaluation reuses. Created once; nothing in a step allocates.
//!
//! The generation keys the whole cache: rules are only ever used under the generation they
//! were evaluated for, and a step under another one empties the cache first. That leaves
//! room in each tag for the rule's index and, for a plain frame, its RSP offset: a hit
//! tells where the return address is from the tag line alone, before the rule is read.

use super::dwarf::{Row, STATE_DEPTH};
use super::rule::{bits, Rule};
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
    /// The module generation of every rule in the tags (0, which no unwinder has, while
    /// there are none).
    generation: u64,
    /// Each slot's address and [`meta`] (all zero for a slot without a rule). A set's tags
    /// share a cache line.
    tags: Box<[[u64; 2]]>,
    /// Each slot's rule, as an index into `rules` plus 1; 0 until the slot first fills. A
    /// slot keeps its rule when the tags are emptied.
    indices: Box<[u32]>,
    /// The rules, appended as slots first fill.
    rules: Vec<Rule>,
    /// Per set, the way the next insertion replaces (round robin).
    next: Box<[u8]>,
    /// One bit per slot whose rule is not sealed yet ([`Rule::seal`]): rules are sealed when
    /// the next walk starts, not when they are evaluated — a rule is read back just after
    /// evaluation wrote it only at the cost of store-forwarding stalls, and a cold walk
    /// would pay them on every frame.
    unsealed: [u64; SLOTS / 64],
    /// DWARF evaluation's `DW_CFA_remember_state` stack (capacity fixed).
    saved_rows: Vec<Row>,
    stats: CacheStats,
}

impl Default for UnwindCache {
    fn default() -> UnwindCache {
        UnwindCache::new()
    }
}

/// A tag's bit for a rule of the first frame.
const FIRST: u64 = 1;
/// A tag's bit for a slot with a rule.
const VALID: u64 = 2;
/// A tag's bit for a plain rule (see [`Rule::seal`]), whose offset is in the high 32 bits.
const PLAIN: u64 = 4;
/// Where a tag keeps the rule's index.
const INDEX_SHIFT: u32 = 3;

/// The second word of a new rule's tag: which kind of frame the rule is for and where it is
/// in `rules`. Sealing adds whether it is plain, with its offset (so a walk knows where the
/// return address is before it reads the rule).
fn meta(index: usize, kind: FrameKind) -> u64 {
    (index as u64) << INDEX_SHIFT | VALID | if kind == FrameKind::First { FIRST } else { 0 }
}

/// A cached rule's place, and its plain offset once sealed (see [`Rule::seal`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hit {
    /// Where the rule is, for [`UnwindCache::rule`].
    pub(crate) index: usize,
    /// The offset from the tag (`None` for a rule not plain or not sealed yet).
    pub(crate) plain: Option<i32>,
}

impl UnwindCache {
    /// An empty cache.
    pub fn new() -> UnwindCache {
        UnwindCache {
            generation: 0,
            tags: vec![[0; 2]; SLOTS].into_boxed_slice(),
            indices: vec![0; SLOTS].into_boxed_slice(),
            rules: Vec::with_capacity(SLOTS),
            next: vec![0; SETS].into_boxed_slice(),
            unsealed: [0; SLOTS / 64],
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

    /// The cached rule for (`address`, `kind`) under `generation`, counting a hit or a miss.
    /// Under a generation other than the cached rules', empties the cache first.
    #[inline]
    pub(crate) fn lookup(&mut self, generation: u64, address: u64, kind: FrameKind) -> Option<Hit> {
        if generation != self.generation {
            self.retire(generation);
        }
        let want = VALID | if kind == FrameKind::First { FIRST } else { 0 };
        let first = UnwindCache::set(address);
        for &[tag, meta] in &self.tags[first..first + WAYS] {
            if tag == address && meta & (VALID | FIRST) == want {
                self.stats.hits += 1;
                return Some(Hit {
                    index: (meta as u32 >> INDEX_SHIFT) as usize,
                    plain: (meta & PLAIN != 0).then_some((meta >> 32) as i32),
                });
            }
        }
        self.stats.misses += 1;
        None
    }

    /// Empties the tags for rules of `generation` (a new cache's are empty already).
    #[cold]
    fn retire(&mut self, generation: u64) {
        if self.generation != 0 {
            self.tags.fill([0, 0]);
            self.unsealed = [0; SLOTS / 64];
        }
        self.generation = generation;
    }

    /// A rule by the index a [`Hit`] gives.
    #[inline]
    pub(crate) fn rule(&self, index: usize) -> &Rule {
        &self.rules[index]
    }

    /// Evaluates the rule for (`address`, `kind`) in place, in the slot it will occupy
    /// (`evaluate` gets the reset rule and the DWARF scratch space); returns where it is. On
    /// an error the slot is left empty. The rule is for the generation of the last
    /// [`UnwindCache::lookup`]; it is sealed when the next walk starts.
    pub(crate) fn insert_with(
        &mut self,
        address: u64,
        kind: FrameKind,
        evaluate: impl FnOnce(&mut Rule, &mut Vec<Row>) -> Result<(), UnwindError>,
    ) -> Result<Hit, UnwindError> {
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
        self.tags[slot] = [address, meta(index, kind)];
        self.unsealed[slot / 64] |= 1 << (slot % 64);
        Ok(Hit { index, plain: None })
    }

    /// Seals the rules cached since the last call (a walk's first act).
    #[inline]
    pub(crate) fn seal_new(&mut self) {
        if self.unsealed.iter().any(|&word| word != 0) {
            self.seal_all();
        }
    }

    /// Seals every rule with an `unsealed` bit, and puts each plain one's offset in its tag.
    #[cold]
    fn seal_all(&mut self) {
        for word in 0..self.unsealed.len() {
            for bit in bits(std::mem::take(&mut self.unsealed[word])) {
                let slot = word * 64 + bit;
                let meta = self.tags[slot][1];
                if meta & VALID == 0 {
                    continue;
                }
                let plain = self.rules[(meta as u32 >> INDEX_SHIFT) as usize].seal();
                let plain = plain.map_or(0, |offset| u64::from(offset as u32) << 32 | PLAIN);
                self.tags[slot][1] = meta | plain;
            }
        }
    }
}
