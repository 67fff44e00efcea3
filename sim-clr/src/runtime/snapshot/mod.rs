//! `ICorProfilerInfo2::DoStackSnapshot`: the decision table R1–R18 in the runtime's order,
//! then the walk and its reporting rules R19–R35.
//!
//! The walk is a model of CoreCLR's `StackFrameIterator` as a profiler sees it: it unwinds
//! managed frames by reading the target's stack memory, reports a `funcId == 0` marker when a
//! managed frame returns into native code, and hops over native code with the explicit Frame
//! chain. It is computed with the runtime lock held (the target cannot change meanwhile), a
//! batch of frames at a time, and each batch is delivered to the callback with the lock
//! released, so the callback may call back in. Chains of frame-pointer links are walked with
//! the lock released, on the target's stack as it was when the iterator paused, and
//! reported frame by frame as they are found.

mod chain;
pub(crate) mod live;
mod sites;
mod walk;

use walk::WalkEnd;
pub(crate) use walk::{Walk, WalkStart};

use crate::platform::Platform;
use crate::runtime::{Notification, Runtime, State};
use crate::thread::{Lifecycle, Mode, OsContext};
use crate::trace::FaultKind;
use corprof::flags::{event, snapshot};
use corprof::{Context, HResult, SnapshotFrame, StackSnapshotCallback, ThreadId};

/// The most frames one walk reports; a bound on corrupt or cyclic stacks.
pub const MAX_WALK_FRAMES: usize = 1 << 16;

/// A `DoStackSnapshot` profiler code made in a running process, as its coverage counts it
/// ([`State::walk_log`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkSeen {
    /// The walking thread (`None`: one the runtime does not know).
    pub caller: Option<usize>,
    /// The walked thread, when the `ThreadID` named one.
    pub target: Option<usize>,
    /// The answer.
    pub hr: HResult,
    /// The target's GC mode when the walk began.
    pub mode: Mode,
    /// The target's lifecycle when the walk began.
    pub lifecycle: Lifecycle,
    /// A seed was given by a thread that never ran managed code.
    pub seeded_from_native: bool,
    /// A GC's or another thread's runtime suspension was in effect.
    pub during_suspension: bool,
    /// The caller's own runtime suspension was in effect.
    pub under_own_suspension: bool,
    /// The walk reported a native run between managed frames (a `funcId == 0` callback with
    /// a managed one after it).
    pub native_run: bool,
    /// The walk has reported a `funcId == 0` callback so far.
    native_seen: bool,
}

impl WalkSeen {
    /// The walk of `target` (if known) by the current caller, as it begins.
    fn begins(st: &State, target: Option<usize>, seeded: bool) -> WalkSeen {
        let caller = st.caller().thread;
        let thread = target.map(|t| &st.threads[t]);
        WalkSeen {
            caller,
            target,
            hr: HResult::S_OK,
            mode: thread.map_or(Mode::Preemptive, |t| t.mode),
            lifecycle: thread.map_or(Lifecycle::Alive, |t| t.lifecycle),
            seeded_from_native: seeded && st.caller_ee().is_none(),
            during_suspension: st.config.suspend_in_progress
                || st.suspension.profiler.is_some_and(|owner| owner != caller),
            under_own_suspension: st.suspension.profiler == Some(caller),
            native_run: false,
            native_seen: false,
        }
    }
}

/// What is left to do after the decision table, with the state lock released.
struct Plan {
    /// The walk, its first batch recorded.
    walk: Box<Walk>,
    /// The walk as coverage counts it.
    seen: WalkSeen,
    target: usize,
    suspended: bool,
    /// The runtime's platform is Unix.
    unix: bool,
    /// The runtime's `CONTEXT` size.
    context_size: usize,
}

pub(crate) fn do_stack_snapshot(
    runtime: &Runtime,
    thread: ThreadId,
    callback: Option<&mut StackSnapshotCallback<'_>>,
    info_flags: u32,
    seed: Option<&Context>,
    _context_size: u32, // R7: only logged; a seed is always read as a full CONTEXT (R31).
) -> HResult {
    match walk_held(runtime, thread, callback, info_flags, seed) {
        Ok(held) => held.release(runtime),
        Err(hr) => hr,
    }
}

/// A walk whose callbacks have all been made, its target still stopped and its hijack lock
/// still held: a program's `walk` step holds it for a step per reported frame before it
/// releases it, as profiler code on a fiber holds it across the scheduling point before each
/// callback.
pub(crate) struct Held {
    plan: Plan,
    thread: ThreadId,
    hr: HResult,
}

/// `DoStackSnapshot` up to its end, without the end (R18): `Err` when the decision table
/// refused the walk (nothing is held then).
pub(crate) fn walk_held(
    runtime: &Runtime,
    thread: ThreadId,
    callback: Option<&mut StackSnapshotCallback<'_>>,
    info_flags: u32,
    seed: Option<&Context>,
) -> Result<Held, HResult> {
    let (plan, notified) = {
        let mut st = runtime.lock();
        let decided = decide(&mut st, thread, info_flags, seed);
        if let Err(hr) = decided {
            st.last_walk_start = None;
            let seen = st.in_process.then(|| {
                let target = if thread.is_null() {
                    st.caller().thread
                } else {
                    st.threads.iter().position(|t| t.id == thread)
                };
                WalkSeen {
                    hr,
                    ..WalkSeen::begins(&st, target, seed.is_some())
                }
            });
            st.walked(thread, hr, seen);
        }
        (decided, !st.pending.is_empty())
    };
    // The profiler hears of a suspension (and of a resumption, on the failure paths) before
    // the walk's callbacks and this call's return.
    if notified {
        runtime.flush();
    }
    let mut plan = plan?;
    if plan.suspended {
        runtime.walk_stopped();
    }
    let hr = deliver(runtime, &mut plan, callback, info_flags);
    Ok(Held { plan, thread, hr })
}

impl Held {
    /// R18: resumes the target if the walk suspended it and releases its hijack lock; the
    /// walk's HRESULT.
    pub(crate) fn release(self, runtime: &Runtime) -> HResult {
        let Held { plan, thread, hr } = self;
        let mut walk = plan.walk;
        // The spare walk shares no stack: writes to it need no copy.
        walk.unshare();
        {
            let mut st = runtime.lock();
            st.last_walk_start = walk.start;
            let seen = st.in_process.then_some(WalkSeen { hr, ..plan.seen });
            st.walked(thread, hr, seen);
            st.spare_walk = Some(walk);
            if plan.suspended {
                resume_target(&mut st, plan.target);
            }
            st.threads[plan.target].hijack_lock_held = false;
        }
        if plan.suspended {
            runtime.walk_stopped();
            runtime.flush();
        }
        hr
    }
}

/// Undoes the walk's own suspension of thread `t` (R11) at its end (R18).
fn resume_target(st: &mut State, t: usize) {
    st.threads[t].os_suspend_count -= 1;
    st.threads[t].stopped_for_walk = None;
    let id = st.threads[t].id;
    st.notify(Notification::ThreadResumed(id));
}

/// R1–R16, in order. On success the target's hijack lock is held and the walk's first batch
/// recorded.
fn decide(st: &mut State, thread: ThreadId, flags: u32, seed: Option<&Context>) -> Result<Plan, HResult> {
    if st.terminated() {
        return Err(HResult::E_UNEXPECTED);
    }
    // R1: an asynchronous entrypoint; only detaching is refused.
    if st.config.detaching {
        return Err(HResult::CORPROF_E_PROFILER_DETACHING);
    }
    // R2
    if !st.config.started {
        return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
    }
    // R3
    if !st.monitors(event::ENABLE_STACK_SNAPSHOT) {
        return Err(HResult::CORPROF_E_INCONSISTENT_WITH_FLAGS);
    }
    // R4: 0 means the caller's Thread; anything else is reinterpreted without validation.
    let caller = st.caller_ee();
    // R5
    if flags & !snapshot::VALID_X64 != 0 {
        return Err(HResult::E_INVALIDARG);
    }
    // R6: nothing to walk. Checking "GC special" dereferences the Thread.
    let t = match (thread.is_null(), caller) {
        (true, None) => return Err(HResult::S_OK),
        (true, Some(t)) => t,
        (false, _) => st.dereference(thread, "DoStackSnapshot")?,
    };
    if st.threads[t].gc_special || !st.config.gc_initialized {
        return Err(HResult::S_OK);
    }
    let cross = Some(t) != caller;
    // R8: the per-thread hijack lock, never blocking.
    if st.threads[t].hijack_lock_held {
        return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
    }
    st.threads[t].hijack_lock_held = true;
    let mut suspended = false;
    // The walk, with its seed, is written in the runtime's spare one: nothing is allocated
    // or moved.
    let mut plan = st.spare_walk.take().unwrap_or_default();
    let result = decide_locked(st, t, cross, seed, &mut plan, &mut suspended);
    match result {
        Ok(()) => {
            walk::start(st, t, &mut plan, flags & snapshot::REGISTER_CONTEXT != 0);
            Ok(Plan {
                seen: WalkSeen::begins(st, Some(t), seed.is_some()),
                walk: plan,
                target: t,
                suspended,
                unix: st.config.platform == Platform::Unix,
                context_size: st.config.context_size() as usize,
            })
        }
        Err(hr) => {
            st.spare_walk = Some(plan);
            // R18 on the failure paths.
            if suspended {
                resume_target(st, t);
            }
            st.threads[t].hijack_lock_held = false;
            Err(hr)
        }
    }
}

/// R9–R16 and R29 with the target's hijack lock held: sets the seed `walk` starts from.
fn decide_locked(
    st: &mut State,
    t: usize,
    cross: bool,
    seed: Option<&Context>,
    walk: &mut Walk,
    suspended: &mut bool,
) -> Result<(), HResult> {
    let unix = st.config.platform == Platform::Unix;
    // R9: only for callers with a Thread; native callers are exempt.
    if cross && st.caller_ee().is_some() && st.config.suspend_in_progress {
        return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
    }
    // R10
    if st.threads[t].forbid_suspend != 0 {
        return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
    }
    // R11: a cross-thread walk of a running runtime suspends the target itself (Windows only).
    if cross && st.suspension.profiler.is_none() {
        if unix {
            return Err(HResult::E_NOTIMPL);
        }
        if st.threads[t].lifecycle == Lifecycle::Dead {
            let message = format!(
                "cross-thread DoStackSnapshot of {} after its ThreadDestroyed: fatal error CORPROF_E_STACKSNAPSHOT_INVALID_TGT_THREAD, the process is terminated",
                st.threads[t].name
            );
            st.fault(FaultKind::WalkOfDestroyedThread, true, message);
            return Err(HResult::E_UNEXPECTED);
        }
        if st.threads[t].suspend_fails {
            return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
        }
        st.threads[t].os_suspend_count += 1;
        st.threads[t].stopped_for_walk = Some(st.caller().thread);
        *suspended = true;
        let id = st.threads[t].id;
        st.notify(Notification::ThreadSuspended(id));
    }
    // R37 on the other paths: under the profiler's runtime suspension nothing checks the
    // target, and the walk goes on as the runtime would; but the ThreadID "is no longer
    // valid" once ThreadDestroyed ran (corprof.idl, ICorProfilerCallback::ThreadDestroyed),
    // so the profiler broke its contract even though this call survives.
    if st.threads[t].lifecycle == Lifecycle::Dead {
        let message = format!(
            "DoStackSnapshot of {} after its ThreadDestroyed returned: the ThreadID is no longer valid (the walk goes on, the Thread may be freed at any moment)",
            st.threads[t].name
        );
        st.fault(FaultKind::WalkOfDestroyedThread, false, message);
    }
    // R12: a preemptive target's seed is discarded before any validation.
    walk.set_seed(seed);
    if st.threads[t].mode == Mode::Preemptive && walk.take_seed() {
        st.note(
            "SeedDiscarded",
            "target is in preemptive mode; the walk starts from its Frame chain (R12)",
        );
    }
    // R13: cross-thread, cooperative target: check the target's own context.
    if st.threads[t].mode == Mode::Cooperative && cross {
        if unix {
            return Err(HResult::E_NOTIMPL);
        }
        let thread = &st.threads[t];
        if matches!(
            thread.os_context,
            OsContext::DebuggerFilter
                | OsContext::GetContextFails
                | OsContext::InKernel
                | OsContext::ExceptionActive
                | OsContext::NoExceptionReporting
        ) {
            return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
        }
        let current = thread.os_thread_context();
        st.reader_lock()?;
        let thread = &st.threads[t];
        let ip_managed = current.as_ref().is_some_and(|c| st.code.is_managed(c.rip));
        if ip_managed && thread.mode_race {
            return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
        }
        let frame_above_sp = match (&current, thread.layout.frames.first()) {
            (Some(c), Some(f)) => f.address < c.rsp,
            _ => false,
        };
        if frame_above_sp {
            return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
        }
        if walk.seed().is_none() {
            walk.set_seed(current.as_ref());
            st.note(
                "SelfSeeded",
                "no seed given: the target's current context seeds the walk (R13.5)",
            );
        }
    }
    // R14: only the seed's IP is checked.
    if let Some(s) = walk.seed() {
        st.reader_lock()?;
        if !st.code.is_managed(s.rip) {
            return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX);
        }
    }
    let thread = &st.threads[t];
    // R15
    if walk.seed().is_none() && thread.exception == crate::thread::ExceptionState::Unwinding {
        return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX);
    }
    // R16
    if thread.exception == crate::thread::ExceptionState::Inconsistent {
        return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNSAFE);
    }
    // R29: the iterator removes a pending return-address hijack before walking.
    if let Some((slot, original)) = st.threads[t].layout.hijacked_slot.take() {
        st.memory.write_u64(slot, original);
        st.threads[t].hijacked = false;
        let name = st.threads[t].name.clone();
        st.note(
            "UnhijackThread",
            format!("removed the GC's return-address hijack from {name} (R29)"),
        );
    }
    Ok(())
}

/// Calls the profiler once per reported frame (R22–R26), batch after batch (each followed by
/// the chain of links the iterator paused before, if it did), and maps the outcome (R17).
fn deliver(
    runtime: &Runtime,
    plan: &mut Plan,
    callback: Option<&mut StackSnapshotCallback<'_>>,
    flags: u32,
) -> HResult {
    let walk = &mut plan.walk;
    let Some(cb) = callback else {
        // A walk that ended in its first batch and reported nothing calls nothing; any other
        // reaches a frame (a paused walk has a full batch, or a chain ahead).
        if let (Some(ended), true) = (walk.end, walk.frames.as_slice().is_empty()) {
            return end(runtime, walk, ended, plan.unix);
        }
        let mut st = runtime.lock();
        let survived = !plan.unix;
        let message = format!(
            "{} called DoStackSnapshot with a NULL callback and the walk reached a frame: {}",
            st.caller_name(),
            if survived {
                "the access violation is caught, E_UNEXPECTED (R7, R17)"
            } else {
                "SIGSEGV, the process dies (R7)"
            }
        );
        st.fault(FaultKind::NullCallback, !survived, message);
        return HResult::E_UNEXPECTED;
    };
    let contexts = flags & snapshot::REGISTER_CONTEXT != 0;
    if contexts {
        walk.bytes.resize(plan.context_size.max(Context::SIZE), 0);
    }
    // A walk takes time: in a running process every callback is a scheduling point, so other
    // threads run between two frames while the target stays stopped and its hijack lock held
    // (a second walk of it is refused, R8; a GC waits for the target's suspension to end).
    let paced = crate::fiber::on_fiber();
    let seen = &mut plan.seen;
    let mut cb = |frame: &SnapshotFrame<'_>| {
        if paced {
            crate::fiber::walk_frame();
        }
        if frame.func_id.is_null() {
            seen.native_seen = true;
        } else {
            seen.native_run |= seen.native_seen;
        }
        cb(frame)
    };
    loop {
        // The callbacks are the profiler's code: their allocations count. Nothing else in
        // the loops allocates.
        let completed = crate::fiber::observed(|| {
            if contexts {
                report::<true>(walk, &mut cb, plan.context_size)
            } else {
                report::<false>(walk, &mut cb, plan.context_size) && walk.report_chain(&mut cb)
            }
        });
        if !completed {
            return HResult::CORPROF_E_STACKSNAPSHOT_ABORTED;
        }
        if let Some(ended) = walk.end {
            return end(runtime, walk, ended, plan.unix);
        }
        walk::batch(&runtime.lock(), plan.target, walk, contexts);
    }
}

/// Calls `cb` for each reported frame of `walk`, with a CONTEXT of `context_size` bytes when
/// `CONTEXTS`; false when a callback aborted the walk.
fn report<const CONTEXTS: bool>(
    walk: &mut Walk,
    cb: &mut StackSnapshotCallback<'_>,
    context_size: usize,
) -> bool {
    let Walk {
        frames,
        contexts,
        seed,
        seeded,
        bytes,
        ..
    } = walk;
    let (frames, contexts) = (frames.as_slice(), contexts.as_slice());
    let seed = seeded.then_some(&*seed);
    // Whether `bytes` holds the seed's other fields (else a laid-out call's), once written.
    let mut written = None;
    for (i, frame) in frames.iter().enumerate() {
        let context = if CONTEXTS {
            let made_of = &contexts[i];
            if let Some(full) = bytes
                .first_chunk_mut()
                .filter(|_| written != Some(made_of.from_seed))
            {
                match seed.filter(|_| made_of.from_seed) {
                    Some(seed) => seed.write_bytes(full),
                    None => crate::thread::call_context_base().write_bytes(full),
                }
                written = Some(made_of.from_seed);
            }
            corprof::context::write_registers(bytes, frame.ip, &made_of.gprs);
            Some(&bytes[..context_size])
        } else {
            None
        };
        let frame_arg = SnapshotFrame {
            func_id: frame.func_id,
            ip: frame.ip,
            frame_info: frame,
            context,
        };
        let hr = live::during(frame, || cb(&frame_arg));
        if hr != HResult::S_OK {
            return false;
        }
    }
    true
}

/// The HRESULT of `walk`, which ended with `end` after every callback returned `S_OK` (R17).
fn end(runtime: &Runtime, walk: &Walk, end: WalkEnd, unix: bool) -> HResult {
    // SWA_FAILED is the iterator's initial result: a walk that stops nowhere is E_FAIL.
    if walk.stops == 0 {
        return HResult::E_FAIL;
    }
    match end {
        WalkEnd::Done => HResult::S_OK,
        WalkEnd::Failed => HResult::E_FAIL,
        WalkEnd::AccessViolation(address) => {
            let mut st = runtime.lock();
            let message = format!(
                "the walk read unmapped address 0x{address:x} (a bogus seed?): {}",
                if unix {
                    "SIGSEGV, the process dies"
                } else {
                    "caught, E_UNEXPECTED (R17, R34)"
                }
            );
            st.fault(FaultKind::AccessViolation, unix, message);
            HResult::E_UNEXPECTED
        }
    }
}
