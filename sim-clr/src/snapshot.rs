//! `ICorProfilerInfo2::DoStackSnapshot`: the decision table R1–R18 in the runtime's order,
//! then the walk and its reporting rules R19–R35.
//!
//! The walk is a model of CoreCLR's `StackFrameIterator` as a profiler sees it: it unwinds
//! managed frames by reading the target's stack memory, reports a `funcId == 0` marker when a
//! managed frame returns into native code, and hops over native code with the explicit Frame
//! chain. It is computed with the runtime lock held (the target cannot change meanwhile) and
//! delivered to the callback with the lock released, so the callback may call back in.

use crate::code::CodeMap;
use crate::runtime::{Notification, Platform, Runtime, State};
use crate::thread::{Lifecycle, Mode, OsContext, Thread};
use crate::trace::FaultKind;
use corprof::flags::{event, snapshot};
use corprof::{
    Context, FrameInfo, FunctionId, HResult, Register, SnapshotFrame, StackSnapshotCallback, ThreadId,
};

/// The most frames one walk reports; a bound on corrupt or cyclic stacks.
pub const MAX_WALK_FRAMES: usize = 1 << 16;

/// One frame the iterator stops at.
#[derive(Clone, Copy, Debug)]
struct WalkFrame {
    func_id: FunctionId,
    ip: u64,
    /// The CONTEXT the frame takes its other fields from, in `Walk::bases` (a walk replaces
    /// the whole CONTEXT only where it starts or hops, so frames share a few).
    base: u32,
    /// False for managed frames without metadata: the iterator stops there but the profiler
    /// is not called (R20.2).
    reported: bool,
}

/// How the iterator ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum WalkEnd {
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
    frames: Vec<WalkFrame>,
    /// Each frame's general-purpose registers, kept only when the profiler asked for
    /// contexts (`COR_PRF_SNAPSHOT_REGISTER_CONTEXT`).
    gprs: Vec<[u64; 16]>,
    /// The CONTEXTs frames take their other fields from.
    bases: Vec<Context>,
    end: WalkEnd,
    sites: Sites,
    /// The bytes of the CONTEXT handed to callbacks.
    bytes: Vec<u8>,
}

/// What the iterator needs to know about a code address.
#[derive(Clone, Copy, Debug, Default)]
struct Site {
    /// The address (0: an empty cache slot; the iterator never looks 0 up).
    ip: u64,
    /// The function containing it.
    function: u32,
    /// For managed code, the index of the state it unwinds with in the function's
    /// `machine.states` ([`NO_STATE`] if none).
    state: u32,
}

/// [`Site::state`] for native code, or managed code without a state at that address.
const NO_STATE: u32 = u32::MAX;

/// Slots in the [`Sites`] cache.
const SITE_SLOTS: usize = 256;

/// A direct-mapped cache of the sites a walk met, by address: the code map never changes
/// after it is built, so entries stay valid for the runtime's lifetime. Return addresses
/// repeat (recursion, common callers), and a hit skips two binary searches.
#[derive(Clone, Debug, Default)]
struct Sites(Vec<Site>);

impl Sites {
    /// The site at `ip`, or `None` outside every function.
    #[inline]
    fn get(&mut self, code: &CodeMap, ip: u64) -> Option<Site> {
        let slot = ((ip ^ (ip >> 9)) as usize) % SITE_SLOTS;
        match self.0.get(slot) {
            Some(&site) if site.ip == ip && ip != 0 => Some(site),
            _ => self.fill(code, ip, slot),
        }
    }

    /// Looks `ip` up in the code map and caches it in `slot`.
    #[inline(never)]
    fn fill(&mut self, code: &CodeMap, ip: u64, slot: usize) -> Option<Site> {
        if self.0.is_empty() {
            self.0 = vec![Site::default(); SITE_SLOTS];
        }
        let index = code.lookup(ip)?;
        let function = code.function(index);
        let state = if function.kind.is_managed() {
            function.machine.unwind_state(ip.wrapping_sub(function.start))
        } else {
            None
        };
        let site = Site {
            ip,
            function: index as u32,
            state: state.map_or(NO_STATE, |s| s as u32),
        };
        self.0[slot] = site;
        Some(site)
    }
}

/// What is left to do after the decision table, with the state lock released.
struct Plan {
    walk: Walk,
    target: usize,
    suspended: bool,
}

pub(crate) fn do_stack_snapshot(
    runtime: &Runtime,
    thread: ThreadId,
    callback: Option<&mut StackSnapshotCallback<'_>>,
    info_flags: u32,
    seed: Option<&Context>,
    _context_size: u32, // R7: only logged; a seed is always read as a full CONTEXT (R31).
) -> HResult {
    let plan = {
        let mut st = runtime.lock();
        match decide(&mut st, thread, info_flags, seed) {
            Ok(plan) => plan,
            Err(hr) => return hr,
        }
    };
    runtime.flush();
    let mut walk = plan.walk;
    let hr = deliver(runtime, &mut walk, callback, info_flags);
    {
        // R18: resume the target if this walk suspended it, release the hijack lock.
        let mut st = runtime.lock();
        st.spare_walk = Some(walk);
        if plan.suspended {
            st.threads[plan.target].os_suspend_count -= 1;
            let id = st.threads[plan.target].id;
            st.notify(Notification::ThreadResumed(id));
        }
        st.threads[plan.target].hijack_lock_held = false;
    }
    runtime.flush();
    hr
}

/// R1–R16, in order. On success the target's hijack lock is held and the walk computed.
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
    let result = decide_locked(st, t, cross, seed, &mut suspended);
    match result {
        Ok(seed) => Ok(Plan {
            walk: walk(st, t, seed, flags & snapshot::REGISTER_CONTEXT != 0),
            target: t,
            suspended,
        }),
        Err(hr) => {
            // R18 on the failure paths.
            if suspended {
                st.threads[t].os_suspend_count -= 1;
                let id = st.threads[t].id;
                st.notify(Notification::ThreadResumed(id));
            }
            st.threads[t].hijack_lock_held = false;
            Err(hr)
        }
    }
}

/// R9–R16 and R29 with the target's hijack lock held: the seed the walk starts from.
fn decide_locked(
    st: &mut State,
    t: usize,
    cross: bool,
    seed: Option<&Context>,
    suspended: &mut bool,
) -> Result<Option<Context>, HResult> {
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
        *suspended = true;
        let id = st.threads[t].id;
        st.notify(Notification::ThreadSuspended(id));
    }
    // R12: a preemptive target's seed is discarded before any validation.
    let mut seed = seed.cloned();
    if st.threads[t].mode == Mode::Preemptive && seed.take().is_some() {
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
        let current = current_context(thread);
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
        if seed.is_none() {
            seed = current;
            st.note(
                "SelfSeeded",
                "no seed given: the target's current context seeds the walk (R13.5)",
            );
        }
    }
    // R14: only the seed's IP is checked.
    if let Some(s) = &seed {
        st.reader_lock()?;
        if !st.code.is_managed(s.rip) {
            return Err(HResult::CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX);
        }
    }
    let thread = &st.threads[t];
    // R15
    if seed.is_none() && thread.exception == crate::thread::ExceptionState::Unwinding {
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
    Ok(seed)
}

/// The context `GetThreadContext` gives for the target (R13): its leaf registers, or for a
/// stale context an RSP above the most recent explicit Frame.
fn current_context(thread: &Thread) -> Option<Context> {
    let mut context = thread.leaf_context()?;
    if thread.os_context == OsContext::Stale {
        if let Some(frame) = thread.layout.frames.first() {
            context.rsp = frame.address + 8;
        }
    }
    Some(context)
}

/// The iterator (R17, R19–R23, R31–R34): from the seed, or else from the first Frame of the
/// chain that returns into managed code; managed frames are unwound through memory; a return
/// into native code yields a marker and a hop to the next usable Frame. `gprs` keeps each
/// frame's registers for the callback's CONTEXT.
fn walk(st: &mut State, t: usize, seed: Option<Context>, gprs: bool) -> Walk {
    let mut walk = st.spare_walk.take().unwrap_or_default();
    walk.frames.clear();
    walk.gprs.clear();
    walk.bases.clear();
    walk.end = walk_into(st, t, seed, gprs, &mut walk);
    walk
}

/// The general-purpose registers of `context`, by [`Register`] number.
fn registers(context: &Context) -> [u64; 16] {
    Register::ALL.map(|r| context.get(r))
}

/// The iterator's loop, recording frames into `walk`; returns how it ended.
fn walk_into(st: &State, t: usize, seed: Option<Context>, gprs: bool, walk: &mut Walk) -> WalkEnd {
    let thread = &st.threads[t];
    let chain = &thread.layout.frames;
    let mut memory = st.memory.reader();
    let mut next_frame = 0;
    // A Frame is usable when it returns into a managed call at or above `sp`.
    let hop = |next_frame: &mut usize, sp: u64| -> Option<Context> {
        while let Some(frame) = chain.get(*next_frame) {
            *next_frame += 1;
            if frame.address < sp {
                continue;
            }
            if let Some(call) = frame.returns_to {
                if st
                    .code
                    .function(thread.layout.calls[call].function)
                    .kind
                    .is_managed()
                {
                    return Some(thread.call_context(call));
                }
            }
        }
        None
    };
    let record = |walk: &mut Walk, func_id: FunctionId, ip: u64, regs: &[u64; 16], reported: bool| {
        walk.frames.push(WalkFrame {
            func_id,
            ip,
            base: (walk.bases.len() - 1) as u32,
            reported,
        });
        if gprs {
            walk.gprs.push(*regs);
        }
    };
    let funclets = thread.layout.calls.iter().any(|c| c.funclet.is_some());
    let Some(context) = seed.or_else(|| hop(&mut next_frame, 0)) else {
        return WalkEnd::Done;
    };
    let (mut ip, mut regs) = (context.rip, registers(&context));
    walk.bases.push(context);
    // The site at `ip`: each frame's lookup is the previous frame's "is it managed?".
    let mut found = walk.sites.get(&st.code, ip);
    loop {
        if walk.frames.len() >= MAX_WALK_FRAMES {
            return WalkEnd::Failed;
        }
        let Some(mut site) = found else {
            return WalkEnd::Failed;
        };
        let function = st.code.function(site.function as usize);
        record(
            walk,
            function.function_id,
            ip,
            &regs,
            function.kind.has_metadata(),
        );
        // R28: a catch/finally funclet is reported under its method; the frames between it and
        // its parent are already unwound, and the parent is not reported again.
        let sp = regs[Register::Rsp as usize];
        let here = funclets
            .then(|| {
                thread
                    .layout
                    .calls
                    .iter()
                    .position(|c| c.rsp == sp && c.rip == ip)
            })
            .flatten();
        if let Some(parent) = here.and_then(|i| thread.funclet_parent(i)) {
            let context = thread.call_context(parent);
            (ip, regs) = (context.rip, registers(&context));
            walk.bases.push(context);
            let Some(parent_site) = walk.sites.get(&st.code, ip) else {
                return WalkEnd::Failed;
            };
            site = parent_site;
        }
        // Unwind the managed frame with its code's template at the IP, as the code manager
        // reads the unwind info of the code it generated: the return address and the saved
        // registers are read first — an unmapped read faults — then the new SP is checked
        // against the target's stack (R17's speculative-walk check).
        let machine = &st.code.function(site.function as usize).machine;
        let Some(state) = machine.states.get(site.state as usize) else {
            return WalkEnd::Failed;
        };
        ip = match state.unwind(&mut regs, &mut |a| memory.read_u64(a).map_err(|av| av.address)) {
            Ok(ret) => ret,
            Err(address) => return WalkEnd::AccessViolation(address),
        };
        let cfa = regs[Register::Rsp as usize];
        if cfa > thread.stack_base || cfa <= thread.stack_limit {
            return WalkEnd::Failed;
        }
        if ip == 0 {
            return WalkEnd::Done;
        }
        found = walk.sites.get(&st.code, ip);
        if found.is_some_and(|s| st.code.function(s.function as usize).kind.is_managed()) {
            continue;
        }
        // R21: a managed frame returned into native code: one marker for the whole run. Its
        // CONTEXT is the frame's registers over the last base.
        record(walk, FunctionId::NULL, ip, &regs, true);
        let Some(context) = hop(&mut next_frame, regs[Register::Rsp as usize]) else {
            return WalkEnd::Done;
        };
        (ip, regs) = (context.rip, registers(&context));
        walk.bases.push(context);
        found = walk.sites.get(&st.code, ip);
    }
}

/// Calls the profiler once per reported frame (R22–R26) and maps the outcome (R17).
fn deliver(
    runtime: &Runtime,
    walk: &mut Walk,
    callback: Option<&mut StackSnapshotCallback<'_>>,
    flags: u32,
) -> HResult {
    let (unix, context_size) = {
        let st = runtime.lock();
        (
            st.config.platform == Platform::Unix,
            st.config.context_size as usize,
        )
    };
    // SWA_FAILED is the iterator's initial result: a walk that stops nowhere is E_FAIL.
    if walk.frames.is_empty() {
        return HResult::E_FAIL;
    }
    let Some(cb) = callback else {
        if !walk.frames.iter().any(|f| f.reported) {
            return end(runtime, walk.end, unix);
        }
        let mut st = runtime.lock();
        let survived = !unix;
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
    let Walk {
        frames,
        gprs,
        bases,
        bytes,
        ..
    } = walk;
    if contexts {
        bytes.resize(context_size.max(Context::SIZE), 0);
    }
    // The callbacks are the profiler's code: their allocations count. Nothing else in this
    // loop allocates.
    let completed = crate::process::fiber::observed(|| {
        let mut written = None;
        for (i, frame) in frames.iter().enumerate() {
            if !frame.reported {
                continue;
            }
            let frame_info = FrameInfo::for_snapshot(frame.func_id, frame.ip);
            let context = if contexts {
                if let Some(full) = bytes.first_chunk_mut().filter(|_| written != Some(frame.base)) {
                    bases[frame.base as usize].write_bytes(full);
                    written = Some(frame.base);
                }
                corprof::context::write_registers(bytes, frame.ip, &gprs[i]);
                Some(&bytes[..context_size])
            } else {
                None
            };
            let hr = cb(&SnapshotFrame {
                func_id: frame.func_id,
                ip: frame.ip,
                frame_info: &frame_info,
                context,
            });
            if hr != HResult::S_OK {
                return false;
            }
        }
        true
    });
    if !completed {
        return HResult::CORPROF_E_STACKSNAPSHOT_ABORTED;
    }
    end(runtime, walk.end, unix)
}

/// The HRESULT of a walk that ended with `end` after every callback returned `S_OK` (R17).
fn end(runtime: &Runtime, end: WalkEnd, unix: bool) -> HResult {
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
