//! The code addresses a walk meets, cached per runtime: for each, what the iterator needs to
//! report and unwind a frame stopped there, in one small `Copy` value.
//!
//! A walk looks up every frame's IP twice in the code map (is it managed? how is it
//! unwound?), and follows several pointers from the function to its unwind state. Return
//! addresses repeat (recursion, common callers, the same stacks sampled again and again), so
//! a direct-mapped cache by address answers most lookups with one load. A cache belongs to
//! one generation of the code map: unloading code starts a new one.

use crate::code::machine::UnwindRule;
use crate::code::CodeMap;
use corprof::FunctionId;

/// What the iterator needs to know about a code address.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Site {
    /// The address (0: an empty slot; the iterator never looks 0 up).
    ip: u64,
    /// The method's `FunctionID` (0 for native code).
    pub function_id: FunctionId,
    /// Managed code: the iterator unwinds it, and a return into it is not a native run.
    pub managed: bool,
    /// Managed code with metadata: the profiler is called for its frames (R20.2).
    pub reported: bool,
    /// For managed code, how a frame stopped here is unwound; `None` without a state there.
    pub rule: Option<UnwindRule>,
}

/// Slots in the cache.
const SLOTS: usize = 256;

/// A direct-mapped cache of [`Site`]s by address.
#[derive(Clone, Debug)]
pub(super) struct Sites(Box<[Site; SLOTS]>);

impl Default for Sites {
    fn default() -> Sites {
        Sites(Box::new([Site::default(); SLOTS]))
    }
}

impl Sites {
    /// The site at `ip`, or `None` outside every function.
    #[inline]
    pub fn get(&mut self, code: &CodeMap, ip: u64) -> Option<&Site> {
        let slot = ((ip ^ (ip >> 9)) as usize) % SLOTS;
        if self.0[slot].ip == ip && ip != 0 {
            return Some(&self.0[slot]);
        }
        self.fill(code, ip, slot)
    }

    /// Looks `ip` up in the code map and caches it in `slot`.
    #[inline(never)]
    fn fill(&mut self, code: &CodeMap, ip: u64, slot: usize) -> Option<&Site> {
        let function = code.function(code.lookup(ip)?);
        let managed = function.kind.is_managed();
        let machine = &function.machine;
        let rule = managed
            .then(|| machine.unwind_state(ip.wrapping_sub(function.start)))
            .flatten()
            .map(|s| machine.states[s].rule);
        let site = Site {
            ip,
            function_id: function.function_id,
            managed,
            reported: function.kind.has_metadata(),
            rule,
        };
        self.0[slot] = site;
        Some(&self.0[slot])
    }
}
