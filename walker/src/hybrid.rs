//! The walk a sampling profiler needs on a thread stopped anywhere: native frames unwound
//! from the interrupted instruction down to the first managed frame, `DoStackSnapshot`
//! seeded there, and every native run it reports (`funcId == 0`) expanded with the native
//! unwinder — one merged stack, leaf first.
//!
//! - **The leaf run.** From the thread's context, native frames are unwound (the first as
//!   the interrupted frame, the others at their return addresses) until an IP is managed
//!   code, as the caller's `resolve` says (`GetFunctionFromIP`, or the profiler's own code
//!   ranges). An interrupted frame whose IP no unwind data describes stops the run: its
//!   caller cannot be known (a stub may be in its prologue).
//! - **The managed part.** `DoStackSnapshot` is seeded with the registers of that managed
//!   frame and asked for contexts (`COR_PRF_SNAPSHOT_REGISTER_CONTEXT`).
//! - **Native runs.** Each `funcId == 0` callback's context is the most recent frame of a
//!   native run; unwinding from it stops before the first managed IP, which is the frame
//!   the runtime reports next, so no frame appears twice.
//! - **Refusals.** Wherever native unwinding refuses (no unwind data, an unmapped read, a
//!   step that does not move up the stack) a [`HybridFrame::Truncated`] marker takes the
//!   place of the frames that could not be found, and the walk goes on with the runtime's
//!   frames; when the leaf run is cut, the runtime walks unseeded.
//!
//! [`HybridWalker::walk_native`] is the Windows variant: every frame, managed ones included,
//! is unwound natively (JIT code has unwind info there) and only the IPs are resolved.
//!
//! A walk allocates nothing: the frame buffer, the runtime's buffer and the rule cache are
//! preallocated, and each walk is bounded by the buffer's capacity.

use crate::snapshot::{snapshot, Contexts, Frame, StackBuffer, WalkOutcome};
use crate::unwind::{FrameKind, Regs, StackBounds, UnwindCache, UnwindError, Unwinder};
use corprof::{Context, FunctionId, HResult, ProfilerInfo, Register, ThreadId};

/// One frame of a merged stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HybridFrame {
    /// A managed frame (reported by the runtime, or resolved from its IP).
    Managed {
        /// The method.
        function: FunctionId,
        /// The leaf IP or a return address.
        ip: u64,
    },
    /// A native frame found by the native unwinder.
    Native {
        /// The leaf IP or a return address.
        ip: u64,
    },
    /// Frames are missing here.
    Truncated(Truncation),
}

/// Why frames are missing at a [`HybridFrame::Truncated`] marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Truncation {
    /// Native unwinding refused.
    Unwind(UnwindError),
    /// The interrupted frame's IP has no unwind data, so its caller is unknown.
    NoUnwindInfo(u64),
    /// `DoStackSnapshot` failed with this HRESULT (frames it reported before are kept).
    Snapshot(HResult),
    /// The runtime reported a native run without a context to unwind it from.
    NoContext,
    /// The target's stack could not be read at its stack pointer before `DoStackSnapshot`:
    /// it runs again (as after a watchdog's rescue), or its stack pointer lies off its stack.
    /// The runtime was not asked to walk it.
    Resumed,
}

impl std::fmt::Display for Truncation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Truncation::Unwind(e) => write!(f, "native unwinding refused: {e}"),
            Truncation::NoUnwindInfo(ip) => write!(f, "no unwind data for the interrupted frame at {ip:#x}"),
            Truncation::Snapshot(hr) => write!(f, "DoStackSnapshot failed: {hr}"),
            Truncation::NoContext => write!(f, "a native run without a context"),
            Truncation::Resumed => write!(
                f,
                "the stack was unreadable at the stack pointer before DoStackSnapshot (the target ran again, or its stack pointer is bad)"
            ),
        }
    }
}

/// How a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HybridOutcome {
    /// The walk reached the end of the stack (with markers where frames are missing).
    Complete,
    /// The buffer filled up: the stack is cut after its last frame.
    Full,
}

/// The stopped thread a walk starts from.
#[derive(Clone, Copy, Debug)]
pub struct Stopped<'a> {
    /// Its `ThreadID` for `DoStackSnapshot` (0 for the calling thread).
    pub thread: ThreadId,
    /// Its registers where it stopped (`GetThreadContext`, or a signal handler's context).
    pub context: &'a Context,
    /// Its stack's extent.
    pub bounds: StackBounds,
}

/// A reusable hybrid walker: its buffers and the native unwinder's rule cache.
pub struct HybridWalker {
    frames: Vec<HybridFrame>,
    capacity: usize,
    runtime: StackBuffer,
    cache: UnwindCache,
}

/// Registers as the unwinder holds them.
fn regs_of(context: &Context) -> Regs {
    Regs {
        rip: context.rip,
        gpr: Register::ALL.map(|r| context.get(r)),
        xmm: std::array::from_fn(|i| context.xmm(i)),
    }
}

/// Where a native run ended.
enum RunEnd {
    /// At a managed IP (not pushed), with these general-purpose registers.
    Managed {
        /// The managed IP.
        rip: u64,
        /// The registers there.
        gpr: [u64; 16],
    },
    /// At the end of the stack.
    Done,
    /// Cut (the marker is pushed).
    Cut,
    /// The buffer is full.
    Full,
}

impl HybridWalker {
    /// A walker for stacks of up to `capacity` frames (markers included).
    pub fn with_capacity(capacity: usize) -> HybridWalker {
        HybridWalker {
            frames: Vec::with_capacity(capacity),
            capacity,
            runtime: StackBuffer::with_capacity(capacity),
            cache: UnwindCache::new(),
        }
    }

    /// The frames of the last walk, leaf first.
    pub fn frames(&self) -> &[HybridFrame] {
        &self.frames
    }

    fn push(&mut self, frame: HybridFrame) -> bool {
        if self.frames.len() == self.capacity {
            return false;
        }
        self.frames.push(frame);
        true
    }

    /// Unwinds frames natively from `regs` (`kind` for the first): until a managed IP when
    /// `stop_at_managed` (not pushed), else to the end, managed frames pushed as resolved.
    #[allow(clippy::too_many_arguments)]
    fn native_run(
        &mut self,
        unwinder: &Unwinder<'_>,
        mut regs: Regs,
        mut kind: FrameKind,
        bounds: StackBounds,
        read: &mut impl FnMut(u64) -> Option<u64>,
        resolve: &mut impl FnMut(u64) -> Option<FunctionId>,
        stop_at_managed: bool,
    ) -> RunEnd {
        loop {
            let frame = match resolve(regs.rip) {
                Some(_) if stop_at_managed => {
                    return RunEnd::Managed {
                        rip: regs.rip,
                        gpr: regs.gpr,
                    }
                }
                Some(function) => HybridFrame::Managed {
                    function,
                    ip: regs.rip,
                },
                None => HybridFrame::Native { ip: regs.rip },
            };
            if !self.push(frame) {
                return RunEnd::Full;
            }
            if kind == FrameKind::First && !unwinder.covers(regs.rip) {
                return self.cut(Truncation::NoUnwindInfo(regs.rip));
            }
            match unwinder.step_frame(&mut regs, kind, bounds, &mut self.cache, read) {
                Ok(Some(next)) => kind = next,
                Ok(None) => return RunEnd::Done,
                Err(e) => return self.cut(Truncation::Unwind(e)),
            }
        }
    }

    fn cut(&mut self, why: Truncation) -> RunEnd {
        if self.push(HybridFrame::Truncated(why)) {
            RunEnd::Cut
        } else {
            RunEnd::Full
        }
    }

    /// Walks `target` from its registers: the leaf native run, `DoStackSnapshot` seeded at
    /// the first managed frame (unseeded if the run was cut), each native run expanded.
    /// `read` reads the thread's stack; `resolve` maps an IP to its method if it is managed
    /// code.
    pub fn walk(
        &mut self,
        info: &dyn ProfilerInfo,
        unwinder: &Unwinder<'_>,
        target: &Stopped<'_>,
        read: &mut impl FnMut(u64) -> Option<u64>,
        resolve: &mut impl FnMut(u64) -> Option<FunctionId>,
    ) -> HybridOutcome {
        let Stopped {
            thread,
            context,
            bounds,
        } = *target;
        self.frames.clear();
        let leaf = self.native_run(
            unwinder,
            regs_of(context),
            FrameKind::First,
            bounds,
            read,
            resolve,
            true,
        );
        let seed = match leaf {
            RunEnd::Done => return HybridOutcome::Complete,
            RunEnd::Full => return HybridOutcome::Full,
            RunEnd::Cut => None,
            RunEnd::Managed { rip, gpr } => {
                let mut seed = context.clone();
                seed.rip = rip;
                for r in Register::ALL {
                    seed.set(r, gpr[r as usize]);
                }
                Some(seed)
            }
        };
        // A target whose stack is unreadable at its stack pointer (it runs again, or the
        // pointer is bad) is not walked: on Windows a cross-thread DoStackSnapshot of a running
        // target suspends it itself, and would then wait for any lock it holds (the code
        // manager's, say) with nobody left to resume it.
        if read(context.rsp).is_none() {
            self.cut(Truncation::Resumed);
            return HybridOutcome::Complete;
        }
        let result = snapshot(
            info,
            thread,
            seed.as_ref(),
            Contexts::NativeRuns,
            &mut self.runtime,
        );
        for i in 0..self.runtime.frames().len() {
            let end = match self.runtime.frames()[i] {
                Frame::Managed { function, ip } => {
                    if self.push(HybridFrame::Managed { function, ip }) {
                        continue;
                    }
                    RunEnd::Full
                }
                Frame::NativeRun { context: None, .. } => self.cut(Truncation::NoContext),
                Frame::NativeRun {
                    context: Some(index), ..
                } => {
                    let regs = regs_of(self.runtime.context(index));
                    self.native_run(unwinder, regs, FrameKind::Caller, bounds, read, resolve, true)
                }
            };
            if matches!(end, RunEnd::Full) {
                return HybridOutcome::Full;
            }
        }
        self.end_of_snapshot(result)
    }

    /// How a walk ends after the runtime's part: a failed `DoStackSnapshot` leaves a marker.
    fn end_of_snapshot(&mut self, result: Result<WalkOutcome, HResult>) -> HybridOutcome {
        match result {
            Ok(WalkOutcome::Complete) => HybridOutcome::Complete,
            Ok(WalkOutcome::Truncated) => HybridOutcome::Full,
            Err(hr) => match self.cut(Truncation::Snapshot(hr)) {
                RunEnd::Full => HybridOutcome::Full,
                _ => HybridOutcome::Complete,
            },
        }
    }

    /// The managed frames of `thread` only: `DoStackSnapshot` unseeded, its native runs not
    /// expanded. This is the walk under `SuspendRuntime`, where a thread running native code
    /// is not stopped, so its native frames cannot be read safely. A failed walk ends with a
    /// [`Truncation::Snapshot`] marker after the frames reported before the failure.
    pub fn walk_managed(&mut self, info: &dyn ProfilerInfo, thread: ThreadId) -> HybridOutcome {
        self.frames.clear();
        let result = snapshot(info, thread, None, Contexts::None, &mut self.runtime);
        for i in 0..self.runtime.frames().len() {
            if let Frame::Managed { function, ip } = self.runtime.frames()[i] {
                if !self.push(HybridFrame::Managed { function, ip }) {
                    return HybridOutcome::Full;
                }
            }
        }
        self.end_of_snapshot(result)
    }

    /// The Windows variant: unwinds every frame of `target` natively and resolves each IP
    /// (managed frames by their method). No runtime call is made besides `resolve`.
    pub fn walk_native(
        &mut self,
        unwinder: &Unwinder<'_>,
        target: &Stopped<'_>,
        read: &mut impl FnMut(u64) -> Option<u64>,
        resolve: &mut impl FnMut(u64) -> Option<FunctionId>,
    ) -> HybridOutcome {
        self.frames.clear();
        let regs = regs_of(target.context);
        match self.native_run(
            unwinder,
            regs,
            FrameKind::First,
            target.bounds,
            read,
            resolve,
            false,
        ) {
            RunEnd::Full => HybridOutcome::Full,
            _ => HybridOutcome::Complete,
        }
    }
}

/// A `resolve` function over the runtime: an IP is managed when `GetFunctionFromIP3` maps
/// it to a method — IL stubs and dynamic methods included, which `GetFunctionFromIP`
/// refuses — or, where that call is not allowed (a managed thread outside a callback),
/// `GetFunctionFromIP` does.
pub fn resolve_with(info: &dyn ProfilerInfo) -> impl FnMut(u64) -> Option<FunctionId> + '_ {
    move |ip| {
        let id = match info.get_function_from_ip3(ip) {
            Ok((id, _)) => Ok(id),
            Err(HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE) => info.get_function_from_ip(ip),
            Err(e) => Err(e),
        };
        id.ok().filter(|f| !f.is_null())
    }
}

/// The managed code a profiler has seen compiled, as sorted address ranges: a `resolve`
/// function that needs no runtime call during a walk. Fill it when code appears
/// (`JITCompilationFinished`, ReadyToRun lookups) with [`CodeRanges::add`].
#[derive(Clone, Debug, Default)]
pub struct CodeRanges {
    /// (start, end, method), sorted by start, not overlapping.
    ranges: Vec<(u64, u64, FunctionId)>,
}

impl CodeRanges {
    /// Adds every code region `GetCodeInfo2` reports for `function` (hot and cold).
    pub fn add(&mut self, info: &dyn ProfilerInfo, function: FunctionId) -> Result<(), HResult> {
        let mut regions = [corprof::CodeInfo::default(); 4];
        let n = info.get_code_info2(function, regions.len() as u32, Some(&mut regions))?;
        for r in &regions[..(n as usize).min(regions.len())] {
            let at = self.ranges.partition_point(|&(s, _, _)| s < r.start_address);
            self.ranges.insert(
                at,
                (r.start_address, r.start_address.saturating_add(r.size), function),
            );
        }
        Ok(())
    }

    /// The method whose code contains `ip`.
    pub fn resolve(&self, ip: u64) -> Option<FunctionId> {
        let i = self.ranges.partition_point(|&(s, _, _)| s <= ip).checked_sub(1)?;
        let (_, end, function) = self.ranges[i];
        (ip < end).then_some(function)
    }
}
