//! What each instruction of a program does to the thread and the process.

use super::os_calls::fiber_source;
use super::{Activation, Done, Run, Source, Status, Wait};
use crate::code::{CodeKind, FunctionIndex};
use crate::process::program::{Instr, LockId, Op};
use crate::process::Ending;
use crate::runtime::{snapshot, CallContext, CallbackKind, Notification};
use crate::scenario::Template;
use crate::thread::{
    ExceptionState, FrameKind, Funclet, Lifecycle, Mode, Overrun, OverrunFill, StackEntry, Thread,
};
use corprof::flags::SuspendReason;
use corprof::{HResult, ProfilerInfo, ThreadId};

/// Why a thread cannot leave a frame whose buffer overrun overwrote its return address.
const OVERRUN_RETURN: &str = "leaves a frame whose return address its buffer overrun overwrote: the process would end at the frame's stack-cookie check";

impl Run<'_> {
    /// Runs one step of `instr` (its `phase`-th, for instructions that take several) on `t`.
    pub(super) fn exec(&mut self, t: usize, instr: Instr, phase: u32) -> Done {
        let line = instr.line;
        let describe = |run: &Self| run.describe(instr.op);
        match instr.op {
            Op::Call(f) => {
                let kind = self.rt.with_code(|c| c.function(f).kind);
                let managed = kind.is_managed();
                // A JIT-compiled method's first call runs the JIT on the caller first, which
                // raises its JIT callbacks there; the call goes on once they return. (Code
                // precompiled ReadyToRun raises none; a method without metadata raises
                // `DynamicMethodJITCompilationStarted`, which is not delivered: v3.1.23
                // `src/vm/prestub.cpp`, `GetPrecompiledR2RCode`,
                // `JitCompileCodeLockedEventWrapper`.)
                if kind == CodeKind::Jit
                    && !std::mem::replace(&mut self.compiled[f], true)
                    && self.raise(t, CallbackKind::JitCompilation(f))
                {
                    return Done::Again;
                }
                let mode = managed.then_some(Mode::Cooperative);
                self.push_frames(t, instr, &[call_of(f)], mode)
            }
            Op::Return => self.edit_stack(t, instr, |thread| {
                let is_call = |e: &StackEntry| matches!(e, StackEntry::Call { .. });
                let caller = thread.stack.iter().skip(1).any(is_call);
                if !caller || !thread.stack.first().is_some_and(is_call) {
                    return Err("returns with no caller to return to");
                }
                thread.stack.pop_leaf();
                Ok(())
            }),
            Op::PInvoke(f) => {
                let entries = [call_of(f), StackEntry::Frame(FrameKind::InlinedCall)];
                self.push_frames(t, instr, &entries, Some(Mode::Preemptive))
            }
            Op::PInvokeReturn => {
                let st = self.rt.lock();
                let thread = &st.threads[t];
                if !entered_through(thread, FrameKind::InlinedCall) {
                    drop(st);
                    return self.unbalanced(t, line, "leaves a P/Invoke but is not in one");
                }
                let managed = thread.is_managed();
                drop(st);
                if managed {
                    if let Some(wait) = self.waits_to_enter_managed_code(t, line, "returns from native code")
                    {
                        return wait;
                    }
                }
                self.edit_stack(t, instr, |thread| {
                    thread.stack.pop_leaves(2);
                    thread.mode = Mode::Cooperative;
                    Ok(())
                })
            }
            Op::ReversePInvoke(f) => self.reverse_pinvoke(t, instr, f, phase),
            Op::ReversePInvokeReturn => {
                let len = self.rt.lock().threads[t].stack.len();
                let calls = &mut self.th[t].reverse_calls;
                // A reverse P/Invoke an exception unwound is over.
                while calls.last().is_some_and(|&(depth, n)| depth + n > len) {
                    calls.pop();
                }
                let entered = calls.pop().filter(|&(depth, n)| depth + n == len);
                self.edit_stack(t, instr, |thread| {
                    let Some((_, n)) = entered else {
                        return Err("leaves a reverse P/Invoke but is not in one");
                    };
                    thread.stack.pop_leaves(n);
                    thread.mode = Mode::Preemptive;
                    Ok(())
                })
            }
            Op::Alloc => {
                if phase == 0 {
                    self.check_lock_rules(t, "allocates", line);
                    if self.acquire(t, LockId::HEAP).is_err() {
                        return self.waits_for_lock(t, line, "alloc", LockId::HEAP);
                    }
                    self.note(t, line, |_| "alloc: takes lock heap".into());
                    return Done::Again;
                }
                if !self.release(t, LockId::HEAP, line) {
                    return Done::Next;
                }
                self.note(t, line, |_| "alloc: releases lock heap".into());
                // Managed allocations (not the profiler's own, in a handler) are reported.
                if self.th[t].stack.len() == 1 && self.rt.lock().threads[t].is_managed() {
                    self.raise(t, CallbackKind::ObjectAllocated);
                }
                Done::Next
            }
            Op::Lock(l) => {
                self.check_lock_rules(t, &format!("takes lock {}", self.locks.name(l)), line);
                if self.acquire(t, l).is_err() {
                    return self.waits_for_lock(t, line, "lock", l);
                }
                self.note(t, line, describe);
                Done::Next
            }
            Op::Unlock(l) => {
                if self.release(t, l, line) {
                    self.note(t, line, describe);
                }
                Done::Next
            }
            Op::CallExport(i) => self.call_export(t, instr, i),
            Op::SetName(x) => {
                self.note(t, line, describe);
                // Managed code sets the name; a GC thread's or a destroyed thread's change is
                // not reported (`EEToProfInterfaceImpl::ThreadNameChanged`, the entrypoint's
                // per-thread check).
                let st = self.rt.lock();
                let (caller, target) = (&st.threads[t], &st.threads[x]);
                let reported = caller.is_managed()
                    && target.is_managed()
                    && !target.gc_special
                    && target.lifecycle == Lifecycle::Alive;
                drop(st);
                if reported {
                    self.raise(t, CallbackKind::ThreadNameChanged(x));
                }
                Done::Next
            }
            Op::Throw => {
                self.rt.lock().threads[t].exception = ExceptionState::FirstPass;
                self.note(t, line, describe);
                self.raise(t, CallbackKind::ExceptionThrown);
                Done::Next
            }
            // Unwinds `n` calls (and the Frames among them); the root call stays.
            Op::Catch(n) => self.edit_stack(t, instr, |thread| {
                let handler = (thread.stack.iter().enumerate())
                    .filter(|(_, e)| matches!(e, StackEntry::Call { .. }))
                    .nth(n as usize);
                let Some((handler, _)) = handler else {
                    return Err("unwinds past its root frame");
                };
                thread.stack.pop_leaves(handler);
                if let Some(StackEntry::Call { function, .. }) = thread.stack.first().copied() {
                    let funclet = StackEntry::Call {
                        function,
                        offset: None,
                        funclet: Some(Funclet::Catch),
                    };
                    thread.stack.push_leaf(funclet);
                }
                thread.exception = ExceptionState::UnwindingInManaged;
                thread.mode = Mode::Cooperative;
                Ok(())
            }),
            Op::EndCatch => self.edit_stack(t, instr, |thread| {
                if matches!(
                    thread.stack.first(),
                    Some(StackEntry::Call { funclet: Some(_), .. })
                ) {
                    thread.stack.pop_leaf();
                }
                thread.exception = ExceptionState::None;
                Ok(())
            }),
            Op::Gc => self.gc(t, line, phase),
            Op::Spin(n) => {
                if phase + 1 >= n {
                    self.note(t, line, describe);
                    Done::Next
                } else {
                    Done::Again
                }
            }
            // From managed code both wait in preemptive mode, as P/Invokes do.
            Op::Sleep(us) | Op::Read(us) => {
                if phase == 0 {
                    self.note(t, line, describe);
                    self.round_closes(t);
                    self.th[t].status = Status::Sleeping(self.now + us);
                    self.wait_preemptive(t);
                    Done::Again
                } else {
                    Done::Next
                }
            }
            Op::Spawn(x) => {
                if self.th[x].status == Status::NotStarted {
                    self.th[x].status = Status::Ready;
                    self.th[x].last_progress = self.now;
                    self.note(t, line, describe);
                    // A managed thread starts in the runtime at its first step.
                    let mut st = self.rt.lock();
                    let thread = &mut st.threads[x];
                    if thread.is_managed() {
                        self.th[x].starting = true;
                    } else if thread.lifecycle == Lifecycle::Unstarted {
                        thread.lifecycle = Lifecycle::Alive;
                    }
                } else {
                    self.note(t, line, |run| {
                        format!("spawn {}: already started", run.th[x].name)
                    });
                }
                Done::Next
            }
            Op::Exit if phase == 0 && self.rt.lock().threads[t].overrun.is_some() => {
                self.unbalanced(t, line, OVERRUN_RETURN)
            }
            Op::Exit => self.exit(t, line, phase),
            Op::Join(x) => {
                if self.th[x].status != Status::Done {
                    self.note(t, line, |run| {
                        format!("join {}: waits for its end", run.th[x].name)
                    });
                    self.wait_preemptive(t);
                    return Done::Block(Wait::Join(x));
                }
                self.note(t, line, describe);
                Done::Next
            }
            Op::MaskSignals
            | Op::UnmaskSignals
            | Op::ReplaceSignalHandler
            | Op::HijackRsp
            | Op::RestoreRsp => {
                let s = &mut self.th[t];
                match instr.op {
                    Op::MaskSignals => s.signals_masked = true,
                    Op::UnmaskSignals => s.signals_masked = false,
                    Op::HijackRsp => s.rsp_hijacked = true,
                    Op::RestoreRsp => s.rsp_hijacked = false,
                    _ => s.handler_replaced = true,
                }
                self.note(t, line, describe);
                Done::Next
            }
            Op::Overrun(into) => match self.overrun_fill(t, into) {
                Err(why) => self.unbalanced(t, line, why),
                Ok(fill) => self.edit_stack(t, instr, |thread| {
                    if thread.overrun.is_some() {
                        return Err("overruns a buffer again: one overrun frame per thread");
                    }
                    let depth = thread.stack.len() - 1;
                    thread.overrun = Some(Overrun { depth, fill });
                    Ok(())
                }),
            },
            Op::InitThread => {
                if self.passes(t, LockId::LOADER).is_err() {
                    return self.waits_for_lock(t, line, "InitializeCurrentThread", LockId::LOADER);
                }
                let hr = self.rt.initialize_current_thread();
                self.note(t, line, |run| format!("{} → {hr}", run.describe(instr.op)));
                Done::Next
            }
            Op::Suspend(x) | Op::Resume(x) | Op::GetContext(x) | Op::Signal(x) => {
                // A program goes on whatever the call answers; the trace shows the answer.
                let _ = match instr.op {
                    Op::Suspend(_) => self.os_suspend(t, x, line).map(drop),
                    Op::Resume(_) => self.os_resume(t, x, line).map(drop),
                    Op::GetContext(_) => self.os_context(t, x, line).map(drop),
                    _ => self.os_signal(t, x, line),
                };
                Done::Next
            }
            Op::ReadStack(x) => {
                self.raw_stack_read(t, x, line);
                Done::Next
            }
            Op::Walk(x) => {
                // A walk takes a step per frame it reports (the scheduling point before each
                // callback), its target held meanwhile: stopped, its hijack lock taken.
                if phase == 0 {
                    if self.thread_setup(t).is_err() {
                        return self.waits_for_lock(t, line, "per-thread setup", LockId::LOADER);
                    }
                    let id = x.map_or(ThreadId::NULL, |x| self.rt.lock().threads[x].id);
                    let mut frames = 0u32;
                    let mut cb = |_: &corprof::SnapshotFrame<'_>| {
                        frames += 1;
                        HResult::S_OK
                    };
                    match snapshot::walk_held(&self.rt, id, Some(&mut cb), 0, None) {
                        Ok(held) => {
                            if frames > 1 {
                                self.note(t, line, |run| {
                                    format!(
                                        "{}: walking, {frames} frames, a step each",
                                        run.describe(instr.op)
                                    )
                                });
                            }
                            self.th[t].walking = Some((held, frames));
                        }
                        Err(hr) => {
                            self.note(t, line, |run| {
                                format!("{} → {hr}, 0 frames", run.describe(instr.op))
                            });
                            return Done::Next;
                        }
                    }
                }
                match self.th[t].walking.take() {
                    Some(walking) if phase + 1 < walking.1 => {
                        self.th[t].walking = Some(walking);
                        Done::Again
                    }
                    Some((held, frames)) => {
                        let hr = held.release(&self.rt);
                        self.note(t, line, |run| {
                            format!("{} → {hr}, {frames} frames", run.describe(instr.op))
                        });
                        Done::Next
                    }
                    None => Done::Next,
                }
            }
            Op::SuspendRuntime => match phase {
                0 => {
                    if self.thread_setup(t).is_err() {
                        return self.waits_for_lock(t, line, "per-thread setup", LockId::LOADER);
                    }
                    if self.acquire(t, LockId::THREAD_STORE).is_err() {
                        return self.waits_for_lock(t, line, "SuspendRuntime", LockId::THREAD_STORE);
                    }
                    // RuntimeSuspendStarted runs (raised after this step) before any thread
                    // stops.
                    match self.rt.suspend_runtime_begin() {
                        Ok(_) => Done::Again,
                        Err(hr) => {
                            self.note(t, line, |run| format!("{} → {hr}", run.describe(instr.op)));
                            self.release(t, LockId::THREAD_STORE, line);
                            Done::Next
                        }
                    }
                }
                1 => {
                    // Holding the thread-store lock, this thread is the only one that could
                    // have suspended the runtime since.
                    let fresh = self.rt.lock().suspension.profiler.is_none();
                    self.rt.suspend_runtime_stop(fresh);
                    self.sync_parked();
                    self.note(t, line, |run| {
                        format!("{} → {}", run.describe(instr.op), HResult::S_OK)
                    });
                    Done::Again
                }
                // SuspendEE returns once every cooperative thread has parked.
                _ => {
                    if !self.unsafe_threads(t).is_empty() {
                        return Done::Block(Wait::SafePoints);
                    }
                    self.note(t, line, |_| "SuspendRuntime: every thread at a safe point".into());
                    self.notify(t, Notification::SuspendFinished);
                    Done::Next
                }
            },
            Op::ResumeRuntime if phase == 0 => {
                if self.thread_setup(t).is_err() {
                    return self.waits_for_lock(t, line, "per-thread setup", LockId::LOADER);
                }
                // RuntimeResumeStarted runs (raised after this step) before any thread goes on.
                match self.rt.resume_runtime_begin() {
                    Ok(()) => Done::Again,
                    Err(hr) => {
                        self.note(t, line, |run| format!("{} → {hr}", run.describe(instr.op)));
                        Done::Next
                    }
                }
            }
            Op::ResumeRuntime => {
                self.rt.resume_runtime_finish();
                self.release(t, LockId::THREAD_STORE, line);
                self.sync_parked();
                self.note(t, line, |run| {
                    format!("{} → {}", run.describe(instr.op), HResult::S_OK)
                });
                Done::Next
            }
            Op::LookupFunctionEntry => {
                if self.passes(t, LockId::FUNCTION_TABLE).is_err() {
                    return self.waits_for_lock(t, line, "RtlLookupFunctionEntry", LockId::FUNCTION_TABLE);
                }
                self.note(t, line, describe);
                Done::Next
            }
            Op::MarkDestroyed => {
                self.marks[t] = true;
                self.note(t, line, describe);
                Done::Next
            }
            Op::IfAlive { thread, end } => {
                let alive = !self.marks[thread];
                self.note(t, line, |run| {
                    format!(
                        "{} → {}",
                        run.describe(instr.op),
                        if alive { "alive" } else { "destroyed: skip" }
                    )
                });
                if !alive {
                    self.jump(t, end);
                    return Done::Again;
                }
                Done::Next
            }
            Op::SetEvent(e) => {
                self.set_event(e as usize);
                self.note(t, line, describe);
                Done::Next
            }
            Op::WaitEvent(e) => {
                if self.events[e as usize] {
                    self.note(t, line, describe);
                    Done::Next
                } else {
                    self.wait_preemptive(t);
                    Done::Block(Wait::Event(e, u64::MAX))
                }
            }
        }
    }

    /// What an `overrun` step of `t` writes over its leaf frame (pointers into the stack of
    /// thread `into`, else text), or why it cannot: the leaf must be native code, and pointers
    /// need another live thread with a stack and `t` in preemptive mode. A walk of a
    /// cooperative thread is seeded from the unwound context, which would hand the runtime a
    /// frame pointer into another stack: what CoreCLR reports then was never observed, so it
    /// is not modelled.
    fn overrun_fill(&self, t: usize, into: Option<usize>) -> Result<OverrunFill, &'static str> {
        let st = self.rt.lock();
        let thread = &st.threads[t];
        let native = match thread.stack.first() {
            Some(StackEntry::Call { function, .. }) => !st.code.function(*function).kind.is_managed(),
            _ => false,
        };
        if !native {
            return Err("overruns a buffer, but its leaf frame is not native code");
        }
        let Some(x) = into else {
            return Ok(OverrunFill::Text);
        };
        if thread.is_managed() && thread.mode == Mode::Cooperative {
            return Err("overruns a buffer with pointers in cooperative mode (an FCall): only a thread in preemptive mode, whose walk starts from its Frames, may");
        }
        let other = &st.threads[x];
        match other.layout.calls.first() {
            Some(call) if x != t && other.lifecycle != Lifecycle::Deleted => {
                Ok(OverrunFill::Pointer(call.rsp))
            }
            _ => Err("overruns a buffer with pointers into a stack that is not another live thread's"),
        }
    }

    /// Edits `t`'s stack under the runtime's lock and re-lays it; when `edit` says why it
    /// cannot, or the edit leaves a frame a buffer overrun overwrote, nothing is laid and the
    /// run ends (`unbalanced_return`).
    fn edit_stack(
        &mut self,
        t: usize,
        instr: Instr,
        edit: impl FnOnce(&mut Thread) -> Result<(), &'static str>,
    ) -> Done {
        let mut st = self.rt.lock();
        let thread = &mut st.threads[t];
        let mut edited = edit(thread);
        if edited.is_ok() && thread.overrun.is_some_and(|o| thread.stack.len() <= o.depth) {
            edited = Err(OVERRUN_RETURN);
        }
        if edited.is_ok() {
            st.relayout(t);
        }
        drop(st);
        match edited {
            Ok(()) => {
                self.note(t, instr.line, |run| run.describe(instr.op));
                Done::Next
            }
            Err(why) => self.unbalanced(t, instr.line, why),
        }
    }

    /// Ends the run: `t`'s stack cannot do what line `line` asks.
    fn unbalanced(&mut self, t: usize, line: usize, what: &str) -> Done {
        let message = format!("{} {what} (line {line})", self.th[t].name);
        self.end(Ending::UnbalancedReturn.as_str(), message, Vec::new());
        Done::Next
    }

    /// Pushes `entries` on thread `t`'s stack (a managed thread takes `mode`) and re-lays it;
    /// a stack that no longer fits is a `stack_overflow`.
    pub(super) fn push_frames(
        &mut self,
        t: usize,
        instr: Instr,
        entries: &[StackEntry],
        mode: Option<Mode>,
    ) -> Done {
        let mut guard = self.rt.lock();
        let st = &mut *guard;
        let thread = &mut st.threads[t];
        // The stack as laid out, and what the new entries add.
        let laid = thread.layout.calls.first().map_or(0, |c| c.bytes);
        let pushed: u64 = entries.iter().map(|e| e.bytes(&st.code)).sum();
        thread.stack.push_leaves(entries.iter().copied());
        if let Some(mode) = mode.filter(|_| thread.is_managed()) {
            thread.mode = mode;
        }
        let fits = laid + pushed <= crate::thread::STACK_SIZE / 2;
        if fits {
            st.relayout(t);
        }
        drop(guard);
        if !fits {
            let message = format!("{} overflows its stack (line {})", self.th[t].name, instr.line);
            self.end(Ending::StackOverflow.as_str(), message, Vec::new());
            return Done::Next;
        }
        self.note(t, instr.line, |run| run.describe(instr.op));
        Done::Next
    }

    /// `call_export`: the thread calls the hosted library's export, by P/Invoke from managed
    /// code (the runtime's P/Invoke frames, preemptive mode), directly from native code; the
    /// export runs as the thread's code until it returns (the trace notes what it returned),
    /// then the program goes on (back in managed code once any runtime suspension has
    /// ended).
    fn call_export(&mut self, t: usize, instr: Instr, index: u32) -> Done {
        // Run::new checked the export is there.
        let Some(exports) = self.exports.clone() else {
            return Done::Next;
        };
        let call = self.p.scenario.process.exports[index as usize].clone();
        self.note(t, instr.line, |run| run.describe(instr.op));
        let managed = self.rt.lock().threads[t].is_managed();
        let source = fiber_source(self.fiber_on(
            t,
            Box::new(move || {
                let value = exports.call(&call.name, &call.args);
                // What it returned, in the trace: a drain's count, a flush's status.
                crate::fiber::note(|| format!("{} returned {value} ({value:#x})", call.name));
            }),
        ));
        let entered = managed.then(|| self.rt.enter(t, CallContext::PInvoke));
        self.th[t].stack.push(Activation {
            source,
            callback: None,
            entered,
            signal: false,
        });
        Done::Next
    }

    /// Continues the top program at instruction `to`, from its first phase (the `Again` the
    /// caller returns wraps the phase to 0).
    fn jump(&mut self, t: usize, to: usize) {
        if let Some(Activation {
            source: Source::Program { pc, phase, .. },
            ..
        }) = self.th[t].stack.last_mut()
        {
            *pc = to;
            *phase = u32::MAX;
        }
    }

    fn gc(&mut self, t: usize, line: usize, phase: u32) -> Done {
        match phase {
            0 => {
                // Waiting for another suspension to end, the thread is in preemptive mode (a
                // thread that waited in cooperative mode would hold that suspension up).
                if self.acquire(t, LockId::THREAD_STORE).is_err() {
                    self.wait_preemptive(t);
                    return self.waits_for_lock(t, line, "gc", LockId::THREAD_STORE);
                }
                self.rt.lock().threads[t].mode = Mode::Cooperative;
                // Raised (after this step) before any thread stops.
                self.rt.lock().suspension_started(SuspendReason::ForGc);
                self.note(t, line, |_| "gc: runtime suspension starts".into());
                Done::Again
            }
            1 => {
                self.gc = Some(t);
                {
                    let mut st = self.rt.lock();
                    st.config.suspend_in_progress = true;
                    // Frozen threads are redirected at once; the others park at a safe point.
                    st.park_all(Some(t));
                }
                self.sync_parked();
                Done::Again
            }
            2 => {
                let waiting = self.unsafe_threads(t);
                if !waiting.is_empty() {
                    return Done::Block(Wait::SafePoints);
                }
                // Raised after the wait loop, while every thread is stopped.
                self.notify(t, Notification::SuspendFinished);
                self.note(t, line, |_| "gc: every thread at a safe point".into());
                Done::Again
            }
            3 => {
                // The collection: GarbageCollectionStarted, then Finished, on the collecting
                // thread while the runtime is suspended.
                self.raise(t, CallbackKind::GarbageCollectionStarted);
                Done::Again
            }
            4 => {
                // `ThreadSuspend::RestartEE` raises RuntimeResumeStarted before any thread
                // goes on.
                self.notify(t, Notification::ResumeStarted);
                Done::Again
            }
            _ => {
                {
                    let mut st = self.rt.lock();
                    st.unpark_all();
                    st.config.suspend_in_progress = false;
                    st.resume_finished();
                }
                self.gc = None;
                self.sync_parked();
                self.release(t, LockId::THREAD_STORE, line);
                self.note(t, line, |_| "gc: collected; runtime restarted".into());
                Done::Next
            }
        }
    }

    /// Entering cooperative mode (managed code) waits for another thread's runtime suspension
    /// to end: the wait, noted as `what` does it, or `None` when there is none.
    fn waits_to_enter_managed_code(&mut self, t: usize, line: usize, what: &str) -> Option<Done> {
        if !self.suspended_by_other(t) {
            return None;
        }
        self.note(t, line, |_| format!("{what}: waits for the runtime suspension"));
        Some(Done::Block(Wait::SuspensionEnd))
    }

    /// A reverse P/Invoke into managed `f`. On a thread the runtime does not know, the stub
    /// first sets one up (phase 0): CoreCLR v3.1.23's `UMThunkStub` (`src/vm/amd64/
    /// umthunkstub.S`) calls `CreateThreadBlockThrow`, whose `SetupThread`
    /// (`src/vm/threads.cpp`) adds a new `Thread` to the thread store under the thread-store
    /// lock (so it waits while a runtime suspension holds it) and raises `ThreadCreated`
    /// and `ThreadAssignedToOSThread` on the thread. Then (phase 1) the call enters
    /// cooperative mode above a `UMThkCallFrame`, which waits for a runtime suspension to end.
    fn reverse_pinvoke(&mut self, t: usize, instr: Instr, f: FunctionIndex, phase: u32) -> Done {
        let line = instr.line;
        let known = self.rt.lock().threads[t].is_managed();
        if phase == 0 && !known {
            if self.passes(t, LockId::THREAD_STORE).is_err() {
                return self.waits_for_lock(
                    t,
                    line,
                    "reverse_pinvoke: adding the Thread",
                    LockId::THREAD_STORE,
                );
            }
            self.rt.lock().threads[t].adopt(t);
            self.note(t, line, |_| {
                "reverse_pinvoke: the runtime adopts the thread (SetupThread)".into()
            });
            self.lifecycle_met(t, crate::coverage::Window::RoundOverCreation);
            self.raise(t, CallbackKind::ThreadCreated);
            return Done::Again;
        }
        if let Some(wait) = self.waits_to_enter_managed_code(t, line, "reverse_pinvoke: enters managed code")
        {
            return wait;
        }
        // The method's call above the Frames the runtime lays for a reverse P/Invoke: CoreCLR
        // 3.1's `UMThkCallFrame`; none from .NET 8 on, whose `ReversePInvokeFrame` is a plain
        // struct on the stack, not a Frame of the thread's chain (dotnet/runtime,
        // `src/coreclr/vm/frames.h`), and whose walks show nothing of it (lane: `t_uco`,
        // `t_sandwich_framed`). The `reverse_pinvoke` template says which.
        let (version, depth) = {
            let st = self.rt.lock();
            (st.config.version, st.threads[t].stack.len())
        };
        let template = Template::named("reverse_pinvoke").expect("a built-in template");
        let frames = template.frames(version).map(StackEntry::Frame);
        let entries: Vec<StackEntry> = std::iter::once(call_of(f)).chain(frames).collect();
        self.th[t].reverse_calls.push((depth, entries.len()));
        self.push_frames(t, instr, &entries, Some(Mode::Cooperative))
    }

    /// Exits: `ThreadDestroyed` on the thread (phase 0), dead once it returns (phase 1), and
    /// its `Thread` deleted at a later step (phase 2), so other threads can run in between.
    /// Deleting a `Thread` removes it from the thread store, under the thread-store lock: not
    /// while a runtime suspension holds it, so `ThreadID`s listed during one stay valid.
    fn exit(&mut self, t: usize, line: usize, phase: u32) -> Done {
        let managed = self.rt.lock().threads[t].is_managed();
        match phase {
            0 if managed => {
                // Its managed code returns first: from a P/Invoke that means back through
                // cooperative mode, which waits out another thread's runtime suspension as
                // `pinvoke_return` does (a walk under SuspendRuntime may be reading those
                // frames).
                if self.above_thread_start(t) > 0 {
                    if let Some(wait) =
                        self.waits_to_enter_managed_code(t, line, "exit: returns through managed code")
                    {
                        return wait;
                    }
                }
                self.note(t, line, |_| "exit".into());
                self.return_to_thread_start(t);
                self.lifecycle_met(t, crate::coverage::Window::RoundOverExit);
                self.raise(t, CallbackKind::ThreadDestroyed);
                Done::Again
            }
            1 if managed => {
                // Dead already once a ThreadDestroyed the profiler was told of returned.
                let was = std::mem::replace(&mut self.rt.lock().threads[t].lifecycle, Lifecycle::Dead);
                if was != Lifecycle::Dead {
                    self.note(t, line, |_| "exit: thread dead".into());
                }
                Done::Again
            }
            _ => {
                if !managed {
                    self.note(t, line, |_| "exit".into());
                } else if self.passes(t, LockId::THREAD_STORE).is_err() {
                    return self.waits_for_lock(t, line, "exit: removing the Thread", LockId::THREAD_STORE);
                }
                self.delete(t);
                Done::Next
            }
        }
    }
}

impl Run<'_> {
    /// How many leaf entries of `t`'s stack its exit cuts: everything above the native frames
    /// that started it (0 when it has no managed frame or Frame, or nothing below one).
    fn above_thread_start(&self, t: usize) -> usize {
        let st = self.rt.lock();
        let stack = &st.threads[t].stack;
        if stack.len() < 2 {
            return 0;
        }
        let managed = stack.iter().rposition(|e| match e {
            StackEntry::Frame(_) => true,
            StackEntry::Call { function, .. } => st.code.function(*function).kind.is_managed(),
        });
        managed.map_or(0, |i| (i + 1).min(stack.len() - 1))
    }

    /// A thread exits once its managed code has returned: the runtime raises
    /// `ThreadDestroyed` from its thread teardown with only the native frames that started the
    /// thread left on the stack (so no managed frame sits above a preemptive thread's Frame
    /// chain, as in the real runtime). A stack with no native root keeps its last entry.
    fn return_to_thread_start(&mut self, t: usize) {
        let cut = self.above_thread_start(t);
        if cut > 0 {
            let mut st = self.rt.lock();
            st.threads[t].stack.pop_leaves(cut);
            st.relayout(t);
        }
    }
}

fn call_of(function: FunctionIndex) -> StackEntry {
    StackEntry::Call {
        function,
        offset: None,
        funclet: None,
    }
}

/// Whether `thread`'s leaf is a call made through a transition that left a Frame of `kind`
/// right below it (a P/Invoke's `InlinedCallFrame`, a reverse P/Invoke's `UMThkCallFrame`).
fn entered_through(thread: &Thread, kind: FrameKind) -> bool {
    matches!(
        (thread.stack.get(0), thread.stack.get(1)),
        (Some(StackEntry::Call { .. }), Some(StackEntry::Frame(k))) if *k == kind
    )
}
