//! The iterator (R17, R19–R23, R28, R31–R34): CoreCLR's `StackFrameIterator` as a profiler sees
//! it. It starts from the seed, or else from the first explicit Frame that returns into
//! managed code; unwinds managed frames by reading the target's stack with each code
//! address's unwind rule; reports a `funcId == 0` marker when a managed frame returns into
//! native code, and hops over the native run with the Frame chain.
//!
//! It runs with the runtime's lock held and records frames into a [`Walk`]; the profiler is
//! called later, from the record, with the lock released.

use super::sites::Sites;
use super::MAX_WALK_FRAMES;
use crate::runtime::State;
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
    pub(super) frames: Vec<WalkFrame>,
    /// Each frame's general-purpose registers, kept only when the profiler asked for
    /// contexts (`COR_PRF_SNAPSHOT_REGISTER_CONTEXT`).
    pub(super) gprs: Vec<[u64; 16]>,
    /// The seed the walk started from, if any.
    pub(super) seed: Option<Context>,
    pub(super) end: WalkEnd,
    /// Where the iterator started; `None` when there was nothing to walk.
    pub(super) start: Option<WalkStart>,
    /// The bytes of the CONTEXT handed to callbacks.
    pub(super) bytes: Vec<u8>,
    sites: Sites,
    /// The code map's generation `sites` was filled in.
    generation: u32,
}

/// Walks thread `t` from `seed` into the runtime's spare [`Walk`]; `gprs` keeps each frame's
/// registers for the callback's CONTEXT.
pub(super) fn walk(st: &mut State, t: usize, seed: Option<Context>, gprs: bool) -> Box<Walk> {
    let mut walk = st.spare_walk.take().unwrap_or_default();
    if walk.generation != st.code.generation() {
        (walk.sites, walk.generation) = (Sites::default(), st.code.generation());
    }
    walk.frames.clear();
    walk.gprs.clear();
    let mut record = Record {
        frames: std::mem::take(&mut walk.frames),
        gprs: std::mem::take(&mut walk.gprs),
        keep_gprs: gprs,
        start: None,
    };
    walk.end = walk_into(st, t, seed.as_ref(), &mut record, &mut walk.sites);
    (walk.frames, walk.gprs, walk.start) = (record.frames, record.gprs, record.start);
    walk.seed = seed;
    walk
}

/// Where the iterator records frames.
struct Record {
    frames: Vec<WalkFrame>,
    /// Each frame's registers, when kept.
    gprs: Vec<[u64; 16]>,
    /// Whether `gprs` are kept.
    keep_gprs: bool,
    /// Where the iterator started; `None` when there was nothing to walk.
    start: Option<WalkStart>,
}

impl Record {
    #[inline]
    fn push(&mut self, frame: WalkFrame, regs: &[u64; 16]) {
        self.frames.push(frame);
        if self.keep_gprs {
            self.gprs.push(*regs);
        }
    }
}

/// The iterator's loop, recording where it started and its frames into `record`; returns how
/// it ended.
fn walk_into(
    st: &State,
    t: usize,
    seed: Option<&Context>,
    record: &mut Record,
    sites: &mut Sites,
) -> WalkEnd {
    let thread = &st.threads[t];
    let calls = &thread.layout.calls;
    let chain = &thread.layout.frames;
    let mut memory = st.memory.reader();
    let mut next_frame = 0;
    // A Frame is usable when it returns into a managed call at or above `sp`: the call's
    // index.
    let hop = |next_frame: &mut usize, sp: u64| -> Option<usize> {
        while let Some(frame) = chain.get(*next_frame) {
            *next_frame += 1;
            if frame.address < sp {
                continue;
            }
            if let Some(call) = frame.returns_to {
                if st.code.function(calls[call].function).kind.is_managed() {
                    return Some(call);
                }
            }
        }
        None
    };
    let funclets = thread.layout.funclets;
    let (mut ip, mut regs, mut from_seed, start) = match seed {
        Some(c) => (
            c.rip,
            Register::ALL.map(|r| c.get(r)),
            true,
            WalkStart::Seed {
                rip: c.rip,
                rsp: c.rsp,
            },
        ),
        None => match hop(&mut next_frame, 0) {
            Some(call) => (
                calls[call].rip,
                calls[call].regs,
                false,
                WalkStart::Frame {
                    entry: chain[next_frame - 1].entry,
                },
            ),
            None => return WalkEnd::Done,
        },
    };
    record.start = Some(start);
    let (stack_base, stack_limit) = (thread.stack_base, thread.stack_limit);
    // The site at `ip`: each frame's lookup is the previous frame's "is it managed?".
    let mut found = sites.get(&st.code, ip);
    loop {
        if record.frames.len() >= MAX_WALK_FRAMES {
            return WalkEnd::Failed;
        }
        let Some(mut site) = found else {
            return WalkEnd::Failed;
        };
        let frame = WalkFrame {
            func_id: site.function_id,
            ip,
            from_seed,
            reported: site.reported,
        };
        record.push(frame, &regs);
        // R28: a catch/finally funclet is reported under its method; the frames between it and
        // its parent are already unwound, and the parent is not reported again.
        if funclets {
            // Laid-out calls are in stack order, their RSPs increasing: a binary search.
            let sp = regs[Register::Rsp as usize];
            let first = calls.partition_point(|c| c.rsp < sp);
            let here = calls[first..]
                .iter()
                .take_while(|c| c.rsp == sp)
                .position(|c| c.rip == ip)
                .map(|i| first + i);
            if let Some(parent) = here.and_then(|i| thread.funclet_parent(i)) {
                (ip, regs, from_seed) = (calls[parent].rip, calls[parent].regs, false);
                let Some(parent_site) = sites.get(&st.code, ip) else {
                    return WalkEnd::Failed;
                };
                site = parent_site;
            }
        }
        // Unwind the managed frame with its code's rule at the IP, as the code manager reads
        // the unwind info of the code it generated: the return address and the saved
        // registers are read first — an unmapped read faults — then the new SP is checked
        // against the target's stack (R17's speculative-walk check).
        let Some(rule) = &site.rule else {
            return WalkEnd::Failed;
        };
        ip = match rule.unwind(&mut regs, &mut |a| memory.read_u64(a).map_err(|av| av.address)) {
            Ok(ret) => ret,
            Err(address) => return WalkEnd::AccessViolation(address),
        };
        let cfa = regs[Register::Rsp as usize];
        if cfa > stack_base || cfa <= stack_limit {
            return WalkEnd::Failed;
        }
        if ip == 0 {
            return WalkEnd::Done;
        }
        found = sites.get(&st.code, ip);
        if found.is_some_and(|s| s.managed) {
            continue;
        }
        // R21: a managed frame returned into native code: one marker for the whole run. Its
        // CONTEXT is the frame's registers over the current base.
        let marker = WalkFrame {
            func_id: FunctionId::NULL,
            ip,
            from_seed,
            reported: true,
        };
        record.push(marker, &regs);
        let Some(call) = hop(&mut next_frame, regs[Register::Rsp as usize]) else {
            return WalkEnd::Done;
        };
        (ip, regs, from_seed) = (calls[call].rip, calls[call].regs, false);
        found = sites.get(&st.code, ip);
    }
}
