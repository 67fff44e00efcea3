//! The iterator (R17, R19–R23, R28, R31–R34): CoreCLR's `StackFrameIterator` as a profiler sees
//! it. It starts from the seed, or else from the first explicit Frame that returns into
//! managed code; unwinds managed frames by reading the target's stack with each code
//! address's unwind rule; reports a `funcId == 0` marker when a managed frame returns into
//! native code, and hops over the native run with the Frame chain.
//!
//! It runs with the runtime's lock held and records the frames it reports into a [`Walk`],
//! [`BATCH`] at a time; the profiler is called for a batch with the lock released, and the
//! iterator goes on from where it paused. It also pauses before a chain of frame-pointer
//! links, which [`super::chain`] walks and reports with the lock released.

use super::chain::{self, Ahead, Stop};
use super::sites::{Site, Sites};
use super::MAX_WALK_FRAMES;
use crate::code::machine::UnwindRule;
use crate::memory::Reader;
use crate::runtime::State;
use crate::thread::Thread;
use corprof::{Context, FrameInfo, FunctionId, Register, StackSnapshotCallback};

/// What a frame's CONTEXT is made of.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct FrameContext {
    /// The general-purpose registers.
    pub gprs: [u64; 16],
    /// The CONTEXT takes its fields other than the registers from the seed (else from a
    /// laid-out call's CONTEXT, whose other fields are the same for every call).
    pub from_seed: bool,
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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WalkEnd {
    /// The Frame chain or the stack ended normally (`SWA_DONE`).
    Done,
    /// Unwinding left the target's stack or stopped making progress (`SWA_FAILED`, R17).
    Failed,
    /// Unwinding read unmapped memory (R17, R34).
    AccessViolation(u64),
}

/// How many frames the iterator records before the profiler is called for them. The
/// iterator pauses with a full batch, and goes on from there once the callbacks returned: the
/// records stay in the processor's nearest cache, and a walk's memory is the same at any
/// depth.
pub(super) const BATCH: usize = 256;

/// A walk in progress: its latest batch of frames, and where the iterator paused. The
/// runtime keeps one spare between walks, so a walk allocates nothing once one ran.
#[derive(Clone, Debug, Default)]
pub(crate) struct Walk {
    /// The batch's frames the iterator stopped at and reports, leaf first, each as the
    /// frame info its callback receives (R24): a managed frame with metadata, or the marker
    /// of a native run (function 0). The iterator also stops at managed frames without
    /// metadata, but the profiler is not called for them (R20.2).
    pub(super) frames: Batch<FrameInfo>,
    /// What each of the batch's frames' CONTEXT is made of, kept only when the profiler
    /// asked for contexts (`COR_PRF_SNAPSHOT_REGISTER_CONTEXT`).
    pub(super) contexts: Batch<FrameContext>,
    /// How many frames the iterator stopped at so far, reported or not.
    pub(super) stops: usize,
    /// The seed the walk starts from, when `seeded`.
    pub(super) seed: Context,
    /// Whether the walk has a seed.
    pub(super) seeded: bool,
    /// How the walk ended; `None` while the iterator is paused with a full batch.
    pub(super) end: Option<WalkEnd>,
    /// Where the iterator started; `None` when there was nothing to walk.
    pub(super) start: Option<WalkStart>,
    /// The bytes of the CONTEXT handed to callbacks.
    pub(super) bytes: Vec<u8>,
    /// The chain of links the iterator paused before, when it did (with the batch not full).
    chain: Option<Ahead>,
    /// Where the iterator paused.
    at: Cursor,
    /// The next explicit Frame of the chain to consider.
    next_frame: usize,
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

    /// Reports the chain of links the iterator paused before, if it did, with the runtime's
    /// lock released ([`Ahead::run`]); false when a callback aborted the walk. The iterator
    /// goes on from where the chain stopped, or the walk is done.
    pub(super) fn report_chain(&mut self, cb: &mut StackSnapshotCallback<'_>) -> bool {
        let Some(ahead) = self.chain.take() else {
            return true;
        };
        let at = Place {
            ip: self.at.ip,
            sp: self.at.sp,
            fp: self.at.fp,
        };
        let room = MAX_WALK_FRAMES.saturating_sub(self.stops);
        let (now, taken, stop) = ahead.run(self.sites.links(), at, room, cb);
        // The iterator paused where the chain takes a frame: every pause makes progress.
        debug_assert!(taken > 0, "a chain took no frame at {:#x}", at.ip);
        (self.at.ip, self.at.sp, self.at.fp) = (now.ip, now.sp, now.fp);
        self.stops += taken;
        match stop {
            Stop::Frame => true,
            Stop::Done => {
                self.end = Some(WalkEnd::Done);
                true
            }
            Stop::Aborted => false,
        }
    }

    /// Lets go of the stack region a paused walk shares: once shared no longer, the region
    /// is written in place again.
    pub(super) fn unshare(&mut self) {
        self.chain = None;
    }
}

/// A batch of records, refilled batch after batch in the same [`BATCH`] slots.
#[derive(Clone, Debug)]
pub(super) struct Batch<T> {
    slots: Vec<T>,
    len: usize,
}

impl<T> Default for Batch<T> {
    fn default() -> Self {
        Batch {
            slots: Vec::new(),
            len: 0,
        }
    }
}

impl<T: Copy + Default> Batch<T> {
    /// Forgets the records, keeping the slots (allocated, filled with defaults, the first
    /// time).
    fn clear(&mut self) {
        if self.slots.is_empty() {
            self.slots = vec![T::default(); BATCH];
        }
        self.len = 0;
    }

    /// Whether the batch holds [`BATCH`] records.
    #[inline]
    fn is_full(&self) -> bool {
        self.len == BATCH
    }

    /// Appends `item` (the batch must not be full).
    #[inline]
    fn push(&mut self, item: T) {
        self.slots[self.len] = item;
        self.len += 1;
    }

    /// The records.
    pub fn as_slice(&self) -> &[T] {
        &self.slots[..self.len]
    }
}

/// Starts the walk of thread `t` at `walk`'s seed, or else at the first explicit Frame that
/// returns into managed code, and records its first batch; `contexts` keeps what each
/// frame's CONTEXT is made of.
pub(super) fn start(st: &State, t: usize, walk: &mut Walk, contexts: bool) {
    let thread = &st.threads[t];
    (walk.stops, walk.next_frame) = (0, 0);
    walk.chain = None;
    walk.start = if walk.seeded {
        let c = &walk.seed;
        walk.at.set(c.rip, Register::ALL.map(|r| c.get(r)), true);
        Some(WalkStart::Seed {
            rip: c.rip,
            rsp: c.rsp,
        })
    } else if hop(st, thread, &mut walk.next_frame, 0, &mut walk.at) {
        let entry = thread.layout.frames[walk.next_frame - 1].depth;
        Some(WalkStart::Frame {
            entry: thread.stack.index_of(entry),
        })
    } else {
        walk.frames.clear();
        walk.contexts.clear();
        (walk.start, walk.end) = (None, Some(WalkEnd::Done));
        return;
    };
    batch(st, t, walk, contexts);
}

/// Records the paused walk's next batch: the next [`BATCH`] reported frames, or those up to
/// where the walk ends.
pub(super) fn batch(st: &State, t: usize, walk: &mut Walk, contexts: bool) {
    if walk.generation != st.code.generation() {
        (walk.sites, walk.generation) = (Sites::default(), st.code.generation());
    }
    walk.frames.clear();
    walk.contexts.clear();
    walk.end = if contexts {
        walk_into::<true>(st, t, walk)
    } else {
        walk_into::<false>(st, t, walk)
    };
}

/// The iterator's loop, from where `walk` paused: records the reported frames (and with
/// `GPRS` their registers) until the batch is full (`None`) or the walk ends.
///
/// The loop itself handles the common frame: managed code without funclets, unwound in full
/// with contexts, or without them from RSP and RBP alone when its reads lie in the reader's
/// current page. Without contexts it pauses before a link of the frame-pointer chain that
/// [`Ahead::run`] can take (the batch then is not full). Everything else — a funclet, a frame
/// across pages, a native run — is a call out of the loop, so that the loop's values (IP,
/// RSP, RBP, the count) stay in machine registers.
#[inline(never)]
fn walk_into<const GPRS: bool>(st: &State, t: usize, walk: &mut Walk) -> Option<WalkEnd> {
    let thread = &st.threads[t];
    let Walk {
        at,
        next_frame,
        stops,
        sites,
        frames,
        contexts,
        chain,
        ..
    } = walk;
    let mut it = Iter::<GPRS> {
        st,
        thread,
        memory: st.memory.reader(),
        sites,
        frames,
        contexts,
        next_frame,
    };
    let funclets = thread.layout.funclets();
    let fast = !GPRS && !funclets;
    // Without contexts the walk reads from the frame pointer up, in the reader's page, from
    // a managed frame on (a native run's marker reads nothing; with contexts the first read
    // finds the page).
    if fast
        && it
            .sites
            .get(&st.code, at.ip)
            .is_some_and(|(site, _)| site.managed)
    {
        it.memory.prime(at.fp);
    }
    let stack = Stack::of(thread);
    // The frame's IP, RSP and RBP, copied out of `at` (which the calls out of the loop take)
    // so that they stay in machine registers.
    let (mut ip, mut sp, mut fp) = (at.ip, at.sp, at.fp);
    // How many frames the iterator stopped at.
    let mut n = *stops;
    let end = loop {
        // A link the chain takes (what it checks first, checked here on the same page):
        // pausing there makes progress.
        if fast && n < MAX_WALK_FRAMES && it.sites.links().get(ip).is_some() {
            let region = chain::reads_link(it.memory.page(), stack, fp)
                .then(|| it.memory.share())
                .flatten();
            if let Some(region) = region {
                *chain = Some(Ahead { region, stack });
                break None;
            }
        }
        if it.frames.is_full() {
            break None;
        }
        let (site, rule) = match it.sites.get(&st.code, ip) {
            Some((site, rule)) if site.managed => (site, rule),
            // R21: a managed frame returned into native code: one marker for the whole run,
            // then the Frame chain.
            _ => {
                (at.ip, at.sp, at.fp) = (ip, sp, fp);
                let hopped = it.native_run(at);
                (ip, sp, fp) = (at.ip, at.sp, at.fp);
                n += 1;
                if hopped {
                    continue;
                }
                break Some(WalkEnd::Done);
            }
        };
        if n >= MAX_WALK_FRAMES {
            break Some(WalkEnd::Failed);
        }
        n += 1;
        // The frame as its callback would see it: it is reported only once its caller is
        // known. CoreCLR computes a managed frame's caller context before it reports the
        // frame (v3.1.23 `src/vm/stackwalk.cpp`, `StackFrameIterator::CheckForSkippedFrames`
        // calls `EnsureCallerContextIsValid` for every frameless frame on x64), so an
        // unmapped read while unwinding it means the frame is never reported (R17; a seed
        // whose RSP is 0x1000 makes no callback: Windows lane case `w_spin/target_badseed_rsp`).
        let frame = site
            .reported
            .then(|| FrameInfo::for_snapshot(site.function_id, ip));
        // With contexts, the frame's registers before the unwind moves `at` to its caller.
        let mut here = if GPRS {
            Some(Cursor { ip, sp, fp, ..*at })
        } else {
            None
        };
        // Unwind the managed frame with its code's rule at the IP, as the code manager reads
        // the unwind info of the code it generated: the return address and the saved
        // registers are read first — an unmapped read faults — then the new SP is checked
        // against the target's stack (R17's speculative-walk check, after the callback).
        // Without contexts only RSP and RBP are needed: the other saved registers are not
        // read back when their reads could not fault.
        let memory = &mut it.memory;
        let unwound = (fast && site.unwinds)
            .then(|| site.reach.unwind_rsp_rbp(&mut sp, &mut fp, |a| memory.cached(a)))
            .flatten();
        let (next, end) = match unwound {
            Some(ret) => (ret, None),
            None => {
                (at.ip, at.sp, at.fp) = (ip, sp, fp);
                // With contexts every frame is unwound in full, here in the loop.
                let unwound = if GPRS && !funclets {
                    unwind_in_full(site, rule, at, memory)
                } else {
                    it.unwind(at)
                };
                (sp, fp) = (at.sp, at.fp);
                (at.ip, unwound.err())
            }
        };
        if matches!(end, Some(WalkEnd::AccessViolation(_))) {
            break end;
        }
        if let Some(frame) = frame {
            record::<GPRS>(it.frames, it.contexts, frame, here.as_mut().unwrap_or(at));
        }
        if end.is_some() {
            break end;
        }
        ip = next;
        if !stack.holds(sp) {
            break Some(WalkEnd::Failed);
        }
        if ip == 0 {
            break Some(WalkEnd::Done);
        }
    };
    (at.ip, at.sp, at.fp) = (ip, sp, fp);
    *stops = n;
    end
}

/// Where the target's stack lies: an RSP in it is in (limit, base].
#[derive(Clone, Copy, Debug)]
pub(super) struct Stack {
    /// The limit plus one.
    low: u64,
    /// The base minus the limit.
    span: u64,
}

impl Stack {
    fn of(thread: &Thread) -> Stack {
        Stack {
            low: thread.stack_limit.wrapping_add(1),
            span: thread.stack_base.wrapping_sub(thread.stack_limit),
        }
    }

    /// Whether `sp` is in the stack: one unsigned compare.
    #[inline]
    pub fn holds(self, sp: u64) -> bool {
        sp.wrapping_sub(self.low) < self.span
    }
}

/// Where the iterator's loop is: the frame's IP, RSP and RBP.
#[derive(Clone, Copy, Debug)]
pub(super) struct Place {
    pub ip: u64,
    pub sp: u64,
    pub fp: u64,
}

/// Where the iterator is: a frame's IP and registers, RSP and RBP apart from the others (the
/// array's RSP and RBP are set before it is read).
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    ip: u64,
    sp: u64,
    fp: u64,
    regs: [u64; 16],
    /// The frame's CONTEXT takes its other fields from the seed.
    from_seed: bool,
}

impl Cursor {
    /// Moves the cursor to `ip` with registers `regs`.
    fn set(&mut self, ip: u64, regs: [u64; 16], from_seed: bool) {
        (self.ip, self.sp, self.fp) = (ip, regs[Register::Rsp as usize], regs[Register::Rbp as usize]);
        (self.regs, self.from_seed) = (regs, from_seed);
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
    frames: &'a mut Batch<FrameInfo>,
    contexts: &'a mut Batch<FrameContext>,
    /// The next explicit Frame of the chain to consider.
    next_frame: &'a mut usize,
}

/// Records `frame` after the recorded ones, and with `GPRS` its CONTEXT's makings at `at`.
#[inline]
fn record<const GPRS: bool>(
    frames: &mut Batch<FrameInfo>,
    contexts: &mut Batch<FrameContext>,
    frame: FrameInfo,
    at: &mut Cursor,
) {
    frames.push(frame);
    if GPRS {
        contexts.push(FrameContext {
            gprs: *at.regs(),
            from_seed: at.from_seed,
        });
    }
}

/// Moves `at` to the next usable Frame of `thread`'s chain (from `next_frame` on) at or above
/// `sp`: one that returns into a managed call; false when there is none.
fn hop(st: &State, thread: &Thread, next_frame: &mut usize, sp: u64, at: &mut Cursor) -> bool {
    take_hop(thread, next_frame, next_hop(st, thread, *next_frame, sp), at)
}

/// Moves `at` to the managed call that `hop` (a Frame's index and the call's position, from
/// [`next_hop`]) returns into and past that Frame; with none, past every Frame: false.
fn take_hop(thread: &Thread, next_frame: &mut usize, hop: Option<(usize, usize)>, at: &mut Cursor) -> bool {
    match hop {
        Some((frame, call)) => {
            let call = &thread.layout.calls.root_first()[call];
            *next_frame = frame + 1;
            at.set(call.rip, call.regs, false);
            true
        }
        None => {
            *next_frame = thread.layout.frames.len();
            false
        }
    }
}

/// The Frame a hop from `from` at `sp` takes and the managed call it returns to: the Frame's
/// index in the thread's Frame chain and the call's position from the root among its laid-out
/// calls. The first Frame at or above `sp` that returns into managed code.
fn next_hop(st: &State, thread: &Thread, from: usize, sp: u64) -> Option<(usize, usize)> {
    let (calls, chain) = (&thread.layout.calls, &thread.layout.frames);
    chain.iter().skip(from).enumerate().find_map(|(i, frame)| {
        let call = frame.returns_to.filter(|_| frame.address >= sp)?;
        st.code
            .function(calls.root_first()[call].function)
            .kind
            .is_managed()
            .then_some((from + i, call))
    })
}

impl<const GPRS: bool> Iter<'_, GPRS> {
    /// Records the marker of a native run at `at` (R21; its CONTEXT is the registers the
    /// managed frame returned with), and moves `at` to the Frame that ends the run; false
    /// when no Frame does.
    #[inline(never)]
    fn native_run(&mut self, at: &mut Cursor) -> bool {
        let layout = &self.thread.layout;
        let version = self.st.config.version;
        let next = next_hop(self.st, self.thread, *self.next_frame, at.sp);
        // .NET 10 leaves out the run of a QCall the hidden exception dispatch made (its
        // InlinedCallFrame is marked as the dispatch's).
        let dispatch_qcall = version.hides_exception_dispatch()
            && next.is_some_and(|(_, call)| {
                self.st
                    .code
                    .function(layout.calls.root_first()[call].function)
                    .hidden
            });
        if !dispatch_qcall {
            let marker = FrameInfo::for_snapshot(FunctionId::NULL, at.ip);
            record::<GPRS>(self.frames, self.contexts, marker, at);
        }
        take_hop(self.thread, self.next_frame, next, at)
    }

    /// Unwinds the managed frame at `at` in full, restoring every register it saved: `at`
    /// becomes its caller, at its return address.
    #[inline(never)]
    fn unwind(&mut self, at: &mut Cursor) -> Result<(), WalkEnd> {
        // R28: a catch/finally funclet is reported under its method; the frames between it and
        // its parent are already unwound, and the parent is not reported again.
        if self.thread.layout.funclets() {
            let calls = &self.thread.layout.calls;
            // Laid-out calls are in stack order, their RSPs increasing from the leaf: a binary
            // search.
            let first = calls.len() - calls.root_first().partition_point(|c| c.rsp >= at.sp);
            let here = (calls.iter().skip(first))
                .take_while(|c| c.rsp == at.sp)
                .position(|c| c.rip == at.ip)
                .map(|i| first + i);
            if let Some(parent) = here.and_then(|i| self.thread.funclet_parent(i)) {
                at.set(calls[parent].rip, calls[parent].regs, false);
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
