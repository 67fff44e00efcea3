//! The iterator (R17, R19–R23, R28, R31–R34): CoreCLR's `StackFrameIterator` as a profiler sees
//! it. It starts from the seed, or else from the first explicit Frame that returns into
//! managed code; unwinds managed frames by reading the target's stack with each code
//! address's unwind rule; reports a `funcId == 0` marker when a managed frame returns into
//! native code, and hops over the native run with the Frame chain.
//!
//! It runs with the runtime's lock held and records frames into a [`Walk`]; the profiler is
//! called later, from the record, with the lock released.

use super::sites::{Site, Sites};
use super::MAX_WALK_FRAMES;
use crate::code::machine::UnwindRule;
use crate::memory::Reader;
use crate::runtime::State;
use crate::thread::Thread;
use corprof::{Context, FunctionId, Register};

/// One frame the iterator stops at.
#[derive(Clone, Copy, Debug)]
pub(super) struct WalkFrame {
    pub func_id: FunctionId,
    pub ip: u64,
    /// The frame's CONTEXT takes its fields other than the registers from the seed (else
    /// from a laid-out call's CONTEXT, whose other fields are the same for every call).
    pub from_seed: bool,
    /// False for managed frames without metadata: the iterator stops there but the profiler
    /// is not called (R20.2).
    pub reported: bool,
}

/// Where the iterator started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WalkStart {
    /// At a seed context (given by the profiler, or the target's own, R13.5).
    Seed {
        /// The seed's instruction pointer.
        rip: u64,
        /// The seed's stack pointer.
        rsp: u64,
    },
    /// At the call an explicit Frame returns into: the Frame's position in the thread's stack.
    Frame {
        /// The Frame's index in [`crate::thread::Thread::stack`].
        entry: usize,
    },
}

/// How the iterator ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum WalkEnd {
    /// The Frame chain or the stack ended normally (`SWA_DONE`).
    #[default]
    Done,
    /// Unwinding left the target's stack or stopped making progress (`SWA_FAILED`, R17).
    Failed,
    /// Unwinding read unmapped memory (R17, R34).
    AccessViolation(u64),
}

/// A walk's frames. The runtime keeps one spare between walks, so a walk of a stack no deeper
/// than an earlier one allocates nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct Walk {
    /// The frames the iterator stopped at, leaf first.
    pub(super) frames: Reused<WalkFrame>,
    /// Each frame's general-purpose registers, kept only when the profiler asked for
    /// contexts (`COR_PRF_SNAPSHOT_REGISTER_CONTEXT`).
    pub(super) gprs: Reused<[u64; 16]>,
    /// The seed the walk starts from, when `seeded`.
    pub(super) seed: Context,
    /// Whether the walk has a seed.
    pub(super) seeded: bool,
    pub(super) end: WalkEnd,
    /// Where the iterator started; `None` when there was nothing to walk.
    pub(super) start: Option<WalkStart>,
    /// The bytes of the CONTEXT handed to callbacks.
    pub(super) bytes: Vec<u8>,
    sites: Sites,
    /// The code map's generation `sites` was filled in.
    generation: u32,
}

impl Walk {
    /// The seed the walk starts from, if any.
    pub(super) fn seed(&self) -> Option<&Context> {
        self.seeded.then_some(&self.seed)
    }

    /// Sets the seed (copied in place).
    pub(super) fn set_seed(&mut self, seed: Option<&Context>) {
        if let Some(seed) = seed {
            self.seed.clone_from(seed);
        }
        self.seeded = seed.is_some();
    }

    /// Discards the seed; true if there was one.
    pub(super) fn take_seed(&mut self) -> bool {
        std::mem::take(&mut self.seeded)
    }
}

/// A vector refilled walk after walk: clearing keeps its elements, so pushing up to the
/// deepest earlier walk is a store.
#[derive(Clone, Debug)]
pub(super) struct Reused<T> {
    items: Vec<T>,
    len: usize,
}

impl<T> Default for Reused<T> {
    fn default() -> Self {
        Reused {
            items: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Copy> Reused<T> {
    /// Sets the item at `at` (at most the length: one past it appends) and keeps the first
    /// `at + 1`.
    #[inline]
    fn put(&mut self, at: usize, item: T) {
        match self.items.get_mut(at) {
            Some(slot) => *slot = item,
            None => self.items.push(item),
        }
        self.len = at + 1;
    }

    /// The items put since the last clear.
    pub fn as_slice(&self) -> &[T] {
        &self.items[..self.len]
    }
}

/// Walks thread `t` from `walk`'s seed into `walk`; `gprs` keeps each frame's registers for
/// the callback's CONTEXT.
pub(super) fn walk(st: &State, t: usize, walk: &mut Walk, gprs: bool) {
    if walk.generation != st.code.generation() {
        (walk.sites, walk.generation) = (Sites::default(), st.code.generation());
    }
    let Walk {
        frames,
        gprs: kept,
        sites,
        seed,
        seeded,
        ..
    } = walk;
    frames.len = 0;
    kept.len = 0;
    let seed = seeded.then_some(&*seed);
    let (end, start) = if gprs {
        walk_into::<true>(st, t, seed, frames, kept, sites)
    } else {
        walk_into::<false>(st, t, seed, frames, kept, sites)
    };
    (walk.end, walk.start) = (end, start);
}

/// The iterator's loop: records the frames (and with `GPRS` their registers); returns how it
/// ended and where it started (`None` when there was nothing to walk).
///
/// The loop itself handles the common frame: managed code without funclets, unwound in full
/// with contexts, or without them from RSP and RBP alone when its reads lie in the reader's
/// current page. Everything else — a funclet, a frame across pages, a native run — is a
/// call out of the loop, so that the loop's values (IP, RSP, RBP, the count) stay in machine
/// registers.
#[inline(never)]
fn walk_into<const GPRS: bool>(
    st: &State,
    t: usize,
    seed: Option<&Context>,
    frames: &mut Reused<WalkFrame>,
    gprs: &mut Reused<[u64; 16]>,
    sites: &mut Sites,
) -> (WalkEnd, Option<WalkStart>) {
    let thread = &st.threads[t];
    let mut it = Iter::<GPRS> {
        st,
        thread,
        memory: st.memory.reader(),
        sites,
        frames,
        gprs,
        next_frame: 0,
    };
    let (mut at, start) = match seed {
        Some(c) => (
            Cursor::new(c.rip, Register::ALL.map(|r| c.get(r)), true),
            WalkStart::Seed {
                rip: c.rip,
                rsp: c.rsp,
            },
        ),
        None => match it.hop(0) {
            Some(at) => (
                at,
                WalkStart::Frame {
                    entry: thread.layout.frames[it.next_frame - 1].entry,
                },
            ),
            None => return (WalkEnd::Done, None),
        },
    };
    let funclets = thread.layout.funclets;
    let fast = !GPRS && !funclets;
    let (stack_base, stack_limit) = (thread.stack_base, thread.stack_limit);
    // The frame's IP, RSP and RBP, copied out of `at` (which the calls out of the loop take)
    // so that they stay in machine registers.
    let (mut ip, mut sp, mut fp) = (at.ip, at.sp, at.fp);
    // How many frames are recorded.
    let mut n = 0;
    let end = loop {
        let (site, rule) = match it.sites.get(&st.code, ip) {
            Some((site, rule)) if site.managed => (site, rule),
            // R21: a managed frame returned into native code: one marker for the whole run,
            // then the Frame chain.
            _ => {
                (at.ip, at.sp, at.fp) = (ip, sp, fp);
                let hopped = it.native_run(&mut at, n);
                (ip, sp, fp) = (at.ip, at.sp, at.fp);
                n += 1;
                if hopped {
                    continue;
                }
                break WalkEnd::Done;
            }
        };
        if n >= MAX_WALK_FRAMES {
            break WalkEnd::Failed;
        }
        let frame = WalkFrame {
            func_id: site.function_id,
            ip,
            from_seed: at.from_seed,
            reported: site.reported,
        };
        if GPRS {
            (at.sp, at.fp) = (sp, fp);
        }
        record::<GPRS>(it.frames, it.gprs, n, frame, &mut at);
        n += 1;
        // Unwind the managed frame with its code's rule at the IP, as the code manager reads
        // the unwind info of the code it generated: the return address and the saved
        // registers are read first — an unmapped read faults — then the new SP is checked
        // against the target's stack (R17's speculative-walk check). Without contexts only
        // RSP and RBP are needed: the other saved registers are not read back when their
        // reads could not fault.
        let memory = &mut it.memory;
        let unwound = (fast && site.unwinds)
            .then(|| site.reach.unwind_rsp_rbp(&mut sp, &mut fp, |a| memory.cached(a)))
            .flatten();
        ip = match unwound {
            Some(ret) => ret,
            None => {
                (at.ip, at.sp, at.fp) = (ip, sp, fp);
                // With contexts every frame is unwound in full, here in the loop.
                let unwound = if GPRS && !funclets {
                    unwind_in_full(site, rule, &mut at, memory)
                } else {
                    it.unwind(&mut at)
                };
                if let Err(end) = unwound {
                    break end;
                }
                (sp, fp) = (at.sp, at.fp);
                at.ip
            }
        };
        if sp > stack_base || sp <= stack_limit {
            break WalkEnd::Failed;
        }
        if ip == 0 {
            break WalkEnd::Done;
        }
    };
    (end, Some(start))
}

/// Where the iterator is: a frame's IP and registers, RSP and RBP apart from the others (the
/// array's RSP and RBP are set before it is read).
#[derive(Clone, Copy, Debug)]
struct Cursor {
    ip: u64,
    sp: u64,
    fp: u64,
    regs: [u64; 16],
    /// The frame's CONTEXT takes its other fields from the seed.
    from_seed: bool,
}

impl Cursor {
    fn new(ip: u64, regs: [u64; 16], from_seed: bool) -> Cursor {
        Cursor {
            ip,
            sp: regs[Register::Rsp as usize],
            fp: regs[Register::Rbp as usize],
            regs,
            from_seed,
        }
    }

    /// All the registers.
    fn regs(&mut self) -> &mut [u64; 16] {
        (
            self.regs[Register::Rsp as usize],
            self.regs[Register::Rbp as usize],
        ) = (self.sp, self.fp);
        &mut self.regs
    }
}

/// The iterator over one thread's stack, between frames.
struct Iter<'a, const GPRS: bool> {
    st: &'a State,
    thread: &'a Thread,
    memory: Reader<'a>,
    sites: &'a mut Sites,
    frames: &'a mut Reused<WalkFrame>,
    gprs: &'a mut Reused<[u64; 16]>,
    /// The next explicit Frame of the chain to consider.
    next_frame: usize,
}

/// Records `frame` as frame `n` (`n` frames are recorded), and with `GPRS` the registers at
/// `at`.
#[inline]
fn record<const GPRS: bool>(
    frames: &mut Reused<WalkFrame>,
    gprs: &mut Reused<[u64; 16]>,
    n: usize,
    frame: WalkFrame,
    at: &mut Cursor,
) {
    frames.put(n, frame);
    if GPRS {
        gprs.put(n, *at.regs());
    }
}

impl<const GPRS: bool> Iter<'_, GPRS> {
    /// The cursor at the next usable Frame at or above `sp`: one that returns into a managed
    /// call.
    fn hop(&mut self, sp: u64) -> Option<Cursor> {
        let (calls, chain) = (&self.thread.layout.calls, &self.thread.layout.frames);
        while let Some(frame) = chain.get(self.next_frame) {
            self.next_frame += 1;
            if frame.address < sp {
                continue;
            }
            if let Some(call) = frame.returns_to {
                if self.st.code.function(calls[call].function).kind.is_managed() {
                    return Some(Cursor::new(calls[call].rip, calls[call].regs, false));
                }
            }
        }
        None
    }

    /// Records the marker of a native run at `at` (R21; its CONTEXT is the registers the
    /// managed frame returned with) as frame `n`, and moves `at` to the Frame that ends the
    /// run; false when no Frame does.
    #[inline(never)]
    fn native_run(&mut self, at: &mut Cursor, n: usize) -> bool {
        let marker = WalkFrame {
            func_id: FunctionId::NULL,
            ip: at.ip,
            from_seed: at.from_seed,
            reported: true,
        };
        record::<GPRS>(self.frames, self.gprs, n, marker, at);
        self.hop(at.sp).map(|next| *at = next).is_some()
    }

    /// Unwinds the managed frame at `at` in full, restoring every register it saved: `at`
    /// becomes its caller, at its return address.
    #[inline(never)]
    fn unwind(&mut self, at: &mut Cursor) -> Result<(), WalkEnd> {
        // R28: a catch/finally funclet is reported under its method; the frames between it and
        // its parent are already unwound, and the parent is not reported again.
        if self.thread.layout.funclets {
            let calls = &self.thread.layout.calls;
            // Laid-out calls are in stack order, their RSPs increasing: a binary search.
            let first = calls.partition_point(|c| c.rsp < at.sp);
            let here = calls[first..]
                .iter()
                .take_while(|c| c.rsp == at.sp)
                .position(|c| c.rip == at.ip)
                .map(|i| first + i);
            if let Some(parent) = here.and_then(|i| self.thread.funclet_parent(i)) {
                *at = Cursor::new(calls[parent].rip, calls[parent].regs, false);
            }
        }
        let Some((site, rule)) = self.sites.get(&self.st.code, at.ip) else {
            return Err(WalkEnd::Failed);
        };
        unwind_in_full(site, rule, at, &mut self.memory)
    }
}

/// Unwinds the managed frame at `at` in full with its site's `rule`, restoring every register
/// the frame saved: `at` becomes its caller, at its return address. `Failed` where the code
/// has no unwind state.
#[inline]
fn unwind_in_full(
    site: &Site,
    rule: &UnwindRule,
    at: &mut Cursor,
    memory: &mut Reader<'_>,
) -> Result<(), WalkEnd> {
    if !site.unwinds {
        return Err(WalkEnd::Failed);
    }
    let ip = rule
        .unwind(at.regs(), &mut |a| memory.read_u64(a).map_err(|av| av.address))
        .map_err(WalkEnd::AccessViolation)?;
    (at.ip, at.sp, at.fp) = (
        ip,
        at.regs[Register::Rsp as usize],
        at.regs[Register::Rbp as usize],
    );
    Ok(())
}
