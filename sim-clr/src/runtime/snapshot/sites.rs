//! The code addresses a walk meets, cached per runtime: for each, what the iterator needs to
//! report and unwind a frame stopped there.
//!
//! A walk looks up every frame's IP twice in the code map (is it managed? how is it
//! unwound?), and follows several pointers from the function to its unwind state. Return
//! addresses repeat (recursion, common callers, the same stacks sampled again and again), so
//! a direct-mapped cache by address answers most lookups with one load. Each slot's hot half
//! (a [`Site`], six words) is what a walk without contexts reads; the full [`UnwindRule`]
//! sits in a parallel array, read only to restore registers; and a third array holds, for
//! the sites that are links of the frame-pointer chain, the frame info a callback receives
//! for a frame there, keyed by its IP (the [`Links`]). A cache belongs to one generation of
//! the code map: unloading code starts a new one.

use crate::code::machine::{Reach, UnwindRule};
use crate::code::CodeMap;
use corprof::{FrameInfo, FunctionId};

/// What the iterator needs to know about a code address to report a frame there and find
/// its caller.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Site {
    /// The address (0: an empty slot; the iterator never looks 0 up).
    ip: u64,
    /// The method's `FunctionID` (0 for native code).
    pub function_id: FunctionId,
    /// Where unwinding a frame stopped here reads (with `unwinds`).
    pub reach: Reach,
    /// Managed code: the iterator unwinds it, and a return into it is not a native run.
    pub managed: bool,
    /// Managed code with metadata: the profiler is called for its frames (R20.2).
    pub reported: bool,
    /// Managed code with an unwind state here: `reach` and the slot's rule apply.
    pub unwinds: bool,
}

/// Slots in the cache.
const SLOTS: usize = 256;

/// A direct-mapped cache of [`Site`]s, their [`UnwindRule`]s and links by address.
#[derive(Clone, Debug)]
pub(super) struct Sites {
    sites: Box<[Site; SLOTS]>,
    rules: Box<[UnwindRule; SLOTS]>,
    /// Slot by slot, the frame info of the link cached there (its IP is the key), or
    /// [`Sites::no_link`].
    links: Box<[FrameInfo; SLOTS]>,
}

impl Default for Sites {
    fn default() -> Sites {
        Sites {
            sites: Box::new([Site::default(); SLOTS]),
            rules: Box::new([UnwindRule::default(); SLOTS]),
            links: Box::new(std::array::from_fn(Sites::no_link)),
        }
    }
}

/// A cached address: its site, and its full rule when the site unwinds.
pub(super) type Found<'a> = (&'a Site, &'a UnwindRule);

impl Sites {
    /// The slot `ip` is cached in.
    #[inline]
    fn slot(ip: u64) -> usize {
        ((ip ^ (ip >> 9)) as usize) % SLOTS
    }

    /// A slot without a link: its IP is one that is never cached in it (0, or 1 in slot 0),
    /// so that no lookup matches it and a lookup needs no other test.
    fn no_link(slot: usize) -> FrameInfo {
        let ip = u64::from(slot == 0);
        debug_assert_ne!(Sites::slot(ip), slot);
        FrameInfo::for_snapshot(FunctionId::NULL, ip)
    }

    /// The cached links, for lookups that never fill.
    #[inline]
    pub fn links(&self) -> Links<'_> {
        Links(&self.links)
    }

    /// The site at `ip` and its rule, or `None` outside every function.
    #[inline]
    pub fn get(&mut self, code: &CodeMap, ip: u64) -> Option<Found<'_>> {
        let slot = Sites::slot(ip);
        if self.sites[slot].ip == ip && ip != 0 {
            return Some((&self.sites[slot], &self.rules[slot]));
        }
        self.fill(code, ip, slot)
    }

    /// Looks `ip` up in the code map and caches it in `slot`.
    #[inline(never)]
    fn fill(&mut self, code: &CodeMap, ip: u64, slot: usize) -> Option<Found<'_>> {
        let function = code.function(code.lookup(ip)?);
        let managed = function.kind.is_managed();
        let machine = &function.machine;
        let rule = managed
            .then(|| machine.unwind_state(ip.wrapping_sub(function.start)))
            .flatten()
            .map(|s| machine.states[s].rule);
        self.sites[slot] = Site {
            ip,
            function_id: function.function_id,
            reach: rule.map(|r| r.reach).unwrap_or_default(),
            managed,
            reported: function.kind.has_metadata() && !function.hidden,
            unwinds: rule.is_some(),
        };
        // A reported managed site in a conventional `push rbp; mov rbp, rsp` frame: a frame
        // stopped there is a link of the frame-pointer chain, unwound from RBP alone.
        let link =
            function.kind.has_metadata() && !function.hidden && rule.is_some_and(|r| r.reach.is_chain());
        self.links[slot] = if link {
            FrameInfo::for_snapshot(function.function_id, ip)
        } else {
            Sites::no_link(slot)
        };
        self.rules[slot] = rule.unwrap_or_default();
        Some((&self.sites[slot], &self.rules[slot]))
    }
}

/// The cached links, borrowed once: a loop that only looks up keeps their address in a
/// machine register.
#[derive(Clone, Copy, Debug)]
pub(super) struct Links<'a>(&'a [FrameInfo; SLOTS]);

impl<'a> Links<'a> {
    /// The frame info of a frame at `ip` (R24), when `ip` is a cached link: a site where a
    /// frame is a link of the frame-pointer chain.
    #[inline]
    pub fn get(self, ip: u64) -> Option<&'a FrameInfo> {
        let link = &self.0[Sites::slot(ip)];
        (link.ip == ip).then_some(link)
    }
}
