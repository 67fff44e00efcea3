//! The frame-pointer chain, walked with the runtime's lock released and reported frame by
//! frame, as CoreCLR's iterator calls the profiler while it walks.
//!
//! Most managed frames a walk meets are links of the frame-pointer chain: a reported method's
//! `push rbp; mov rbp, rsp` frame, whose caller's RBP and return address are the two words at
//! its RBP. The iterator ([`super::walk`]) pauses before such a frame when those two words lie
//! in a written page of the target's stack, and shares that stack's region out of the
//! address space ([`SharedRegion`]). [`Ahead::run`] then takes the links one after the other
//! without the lock, calling the profiler for each as soon as it is found: the walk's
//! dependent reads and the profiler's code overlap in the processor, as they do in the real
//! runtime. At the first frame it cannot take whole, it stops, and the iterator goes on from
//! there under the lock.
//!
//! The shared region reads as the stack was when the iterator paused, as the iterator's own
//! batches read it: the walk sees one consistent stack while the profiler runs.

use super::sites::Links;
use super::walk::{Place, Stack};
use crate::memory::{Page, SharedRegion};
use corprof::{FrameInfo, FunctionId, HResult, SnapshotFrame, StackSnapshotCallback};

/// A chain of links the iterator paused before: the target's stack region, shared, and where
/// the stack lies.
#[derive(Clone, Debug)]
pub(super) struct Ahead {
    /// The mapped region holding the target's stack, as it was when the iterator paused.
    pub region: SharedRegion,
    /// Where the target's stack lies.
    pub stack: Stack,
}

/// Where [`Ahead::run`] stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stop {
    /// At a frame it cannot take whole (or at the walk's bound on frames): the iterator goes
    /// on from there.
    Frame,
    /// At a return address of 0: the walk is done.
    Done,
    /// A callback returned something other than `S_OK` (R26).
    Aborted,
}

/// Whether the chain can read a link at `fp` in `page`: the page lies in the target's stack,
/// and holds the link's two words (the caller's RBP, then the return address).
#[inline]
pub(super) fn reads_link(page: Page<'_>, stack: Stack, fp: u64) -> bool {
    let (start, end) = page.range();
    // A link at RBP in a page of the stack puts the caller's RSP, RBP + 16, at most at the
    // page's end: the chain needs no RSP check.
    stack.holds(start.wrapping_add(8)) && stack.holds(end) && page.pair(fp).is_some()
}

impl Ahead {
    /// Takes the links from `at` on, at most `room` of them: for each, calls `cb` with the
    /// frame (R22–R24, no CONTEXT), then unwinds it from RBP, as the iterator's loop does. It
    /// moves between the pages of the shared region itself, and stops at the first frame
    /// whose IP is no cached link or whose two words it cannot read in a page of the stack,
    /// at a return address of 0, or when a callback aborts. It returns where it stopped (past
    /// the frame whose callback aborted), how many frames it took, and why it stopped.
    ///
    /// A loop that calls only the profiler, so that its values stay in machine registers.
    #[inline(never)]
    pub fn run(
        &self,
        links: Links<'_>,
        at: Place,
        room: usize,
        cb: &mut StackSnapshotCallback<'_>,
    ) -> (Place, usize, Stop) {
        let Place {
            mut ip,
            mut sp,
            mut fp,
        } = at;
        // The callback's argument, built once: each frame sets its function, IP and frame
        // info, which is the link's own (R24: valid during the callback).
        let none = FrameInfo::default();
        let mut frame = SnapshotFrame {
            func_id: FunctionId::NULL,
            ip: 0,
            frame_info: &none,
            context: None,
        };
        let mut left = room;
        // Page after page of the stack: the page of the first link, then the page of each
        // link past a page's end.
        'pages: while let Some(page) = self.region.page(fp).filter(|&p| reads_link(p, self.stack, fp)) {
            while left > 0 {
                let Some(link) = links.get(ip) else {
                    break 'pages;
                };
                let Some([caller_fp, ret]) = page.pair(fp) else {
                    continue 'pages;
                };
                (frame.func_id, frame.ip, frame.frame_info) = (link.func_id, ip, link);
                left -= 1;
                let hr = super::live::during(link, || cb(&frame));
                (ip, sp, fp) = (ret, fp.wrapping_add(16), caller_fp);
                if hr != HResult::S_OK {
                    return (Place { ip, sp, fp }, room - left, Stop::Aborted);
                }
            }
            break;
        }
        let taken = room - left;
        // A return address of 0 is no link: it ended the loop, and ends the walk.
        let stop = if ip == 0 { Stop::Done } else { Stop::Frame };
        (Place { ip, sp, fp }, taken, stop)
    }
}

#[cfg(test)]
mod tests {
    use crate::scenario::Scenario;
    use crate::{CallContext, Runtime, MAX_WALK_FRAMES};
    use corprof::{HResult, ProfilerInfo, Register, SnapshotFrame, ThreadId};

    /// `main`: three frames of a recursive method, called from native code; `root`: the
    /// same, the method at the root of the thread (its return address is 0).
    fn runtime() -> Runtime {
        let text = "platform = \"unix\"\n[[code]]\nname = \"R\"\nkind = \"jit\"\nframe_size = 32\n\
                    [[code]]\nname = \"host\"\nkind = \"native\"\n\
                    [[threads]]\nname = \"main\"\nframes = [{ fn = \"R\", repeat = 3 }, { fn = \"host\" }]\n\
                    [[threads]]\nname = \"root\"\nframes = [{ fn = \"R\", repeat = 3 }]\n";
        Scenario::parse("chain.toml", text).unwrap().runtime()
    }

    /// A synchronous walk's HRESULT and how many callbacks it made.
    fn walk(rt: &Runtime) -> (HResult, usize) {
        let mut n = 0;
        let mut cb = |_: &SnapshotFrame<'_>| {
            n += 1;
            HResult::S_OK
        };
        let hr = rt.do_stack_snapshot(ThreadId::NULL, Some(&mut cb), 0, None, 0);
        (hr, n)
    }

    #[test]
    fn a_cyclic_chain_of_cached_links_is_walked_to_the_bound_and_fails() {
        let rt = runtime();
        rt.on_thread("main", CallContext::PInvoke, |rt| {
            // The first walk caches the links: three frames of R, and the native run.
            assert_eq!(walk(rt), (HResult::S_OK, 4));
            // R's leafmost frame saved its caller's RBP at RBP: pointing it at itself makes
            // the frame its own caller.
            let thread = rt.thread("main").unwrap();
            let leafmost = rt.with_code(|code| {
                let r = |c: &&crate::thread::LaidCall| code.function(c.function).name == "R";
                *thread.layout.calls.iter().find(r).unwrap()
            });
            let rbp = leafmost.regs[Register::Rbp as usize];
            rt.lock().memory.write_u64(rbp, rbp);
            assert_eq!(walk(rt), (HResult::E_FAIL, MAX_WALK_FRAMES));
            // Every walk pauses and resumes there alike.
            assert_eq!(walk(rt), (HResult::E_FAIL, MAX_WALK_FRAMES));
        })
        .unwrap();
    }

    #[test]
    fn a_chain_ends_the_walk_at_a_return_address_of_0() {
        let rt = runtime();
        rt.on_thread("root", CallContext::PInvoke, |rt| {
            // The first walk caches the links; the second takes them all in the chain.
            assert_eq!(walk(rt), (HResult::S_OK, 3));
            assert_eq!(walk(rt), (HResult::S_OK, 3));
        })
        .unwrap();
    }
}
