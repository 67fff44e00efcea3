//! Runtime suspensions: the profiler's `SuspendRuntime` / `ResumeRuntime` (R41) and the GC's,
//! and parking managed threads at safe points.

use super::{Caller, Notification, Runtime, State};
use crate::thread::{FrameKind, Lifecycle, Mode, StackEntry};
use crate::trace::FaultKind;
use corprof::flags::SuspendReason;
use corprof::{HResult, ThreadId};

/// The suspension state.
#[derive(Clone, Debug, Default)]
pub(crate) struct Suspension {
    /// `fProfilerRequestedRuntimeSuspend` (R41) and who asked.
    pub profiler: Option<Option<usize>>,
    /// A second `SuspendRuntime` leaked the thread-store lock (R41).
    pub leaked: bool,
    /// The EE is suspended by the GC (inside `GarbageCollectionStarted`).
    pub gc: bool,
}

impl State {
    /// `EnumThreads` from `RuntimeSuspendFinished` of a suspension the profiler did not ask
    /// for, on .NET 9: the enumerator's release of the thread-store lock ends the suspension's
    /// hold on it and the process stalls
    /// ([`super::RuntimeVersion::enum_threads_stalls_a_suspension`]).
    pub fn enum_threads_in_a_suspension(&mut self) -> Result<(), HResult> {
        let in_finished =
            self.caller().callback == Some(super::CallbackKind::Suspension(Notification::SuspendFinished));
        if !(in_finished
            && self.suspension.profiler.is_none()
            && self.config.version.enum_threads_stalls_a_suspension())
        {
            return Ok(());
        }
        let message = format!(
            "{} called EnumThreads from RuntimeSuspendFinished of a suspension the profiler did not request: on .NET 9 the enumerator releases the thread-store lock the suspension holds until the runtime restarts, and the process stalls (dotnet/runtime issue #110062)",
            self.caller_name()
        );
        self.fault(FaultKind::Deadlock, true, message);
        Err(HResult::E_UNEXPECTED)
    }

    /// `EnumThreads`' list, made under the thread-store lock: every live managed thread but
    /// the GC's own (or the stall .NET 9 has in `RuntimeSuspendFinished`,
    /// [`enum_threads_in_a_suspension`](State::enum_threads_in_a_suspension)).
    pub fn listed_threads(&mut self) -> Result<Vec<ThreadId>, HResult> {
        self.enum_threads_in_a_suspension()?;
        let listed: Vec<usize> = (0..self.threads.len())
            .filter(|&i| {
                let t = &self.threads[i];
                // Not once its ThreadDestroyed has begun: observed inside the callback and
                // after it returned, under SuspendRuntime, on 3.1.23 and 8.0.4 (the lane's
                // destroyed probe).
                t.is_managed() && !t.gc_special && t.lifecycle == Lifecycle::Alive
            })
            .collect();
        let ids = listed.iter().map(|&i| self.threads[i].id).collect();
        if self.in_process {
            let caller = self.caller().thread;
            self.list_log.push((caller, listed));
        }
        Ok(ids)
    }

    /// Parks every managed thread at a safe point for a runtime suspension, except those that
    /// run code under the scheduler: they park at their own next safe point.
    pub fn park_all(&mut self, except: Option<usize>) {
        for i in 0..self.threads.len() {
            let t = &self.threads[i];
            if t.is_managed()
                && !t.runs_code
                && Some(i) != except
                && t.parked.is_none()
                && t.lifecycle == Lifecycle::Alive
            {
                self.park(i);
            }
        }
    }

    /// Parks managed thread `i` at a safe point: a thread running managed code gets a
    /// `RedirectedThreadFrame`; every parked thread is in preemptive mode.
    pub fn park(&mut self, i: usize) {
        let t = &self.threads[i];
        debug_assert!(
            t.parked.is_none() && t.is_managed(),
            "parked twice, or not a runtime thread"
        );
        let previous = t.mode;
        let leaf_managed = t.stack.iter().find_map(|e| match e {
            StackEntry::Call { function, .. } => Some(self.code.function(*function).kind.is_managed()),
            StackEntry::Frame(_) => None,
        });
        let t = &mut self.threads[i];
        if previous == Mode::Cooperative && leaf_managed == Some(true) {
            t.stack.push_leaf(StackEntry::Frame(FrameKind::Redirected));
        }
        t.mode = Mode::Preemptive;
        t.parked = Some(previous);
        self.relayout(i);
        let id = self.threads[i].id;
        if let Some(on) = self.raised_on(i, previous) {
            self.notify_on(Some(on), Notification::ThreadSuspended(id));
        }
    }

    /// The thread `RuntimeThreadSuspended` / `Resumed` for thread `i` is raised on, given the
    /// mode it was in before it parked (`None`: raised nowhere). A thread that runs code parks
    /// itself at its safe point and raises both on itself (`Thread::RareDisablePreemptiveGC`,
    /// CoreCLR v3.1.23 `src/vm/threadsuspend.cpp`). A frozen one in cooperative mode is stopped
    /// at once by the suspending thread, which raises them for it, as `Thread::SuspendThread`
    /// does for a thread the suspension loop stops (same file; a frozen thread runs no code of
    /// its own to raise them). A thread in preemptive mode is not stopped at all
    /// (`ThreadSuspend::SuspendRuntime` passes over it) and gets neither.
    fn raised_on(&self, i: usize, mode: Mode) -> Option<usize> {
        if self.threads[i].runs_code {
            Some(i)
        } else if mode == Mode::Cooperative {
            self.caller().thread
        } else {
            None
        }
    }

    /// Undoes [`State::park_all`].
    pub fn unpark_all(&mut self) {
        for i in 0..self.threads.len() {
            let Some(previous) = self.threads[i].parked.take() else {
                continue;
            };
            let t = &mut self.threads[i];
            if t.stack.first() == Some(&StackEntry::Frame(FrameKind::Redirected)) {
                t.stack.pop_leaf();
            }
            t.mode = previous;
            self.relayout(i);
            let id = self.threads[i].id;
            if let Some(on) = self.raised_on(i, previous) {
                self.notify_on(Some(on), Notification::ThreadResumed(id));
            }
        }
    }
}

impl Runtime {
    /// An induced garbage collection on `thread`. After a leaked `SuspendRuntime` it hangs
    /// (R41); otherwise it raises the suspension callbacks. Returns false if no such thread.
    pub fn collect_garbage(&self, thread: &str) -> bool {
        let ok = {
            let mut st = self.lock();
            match st.thread_named(thread) {
                None => false,
                Some(i) => {
                    st.callers.push(Caller {
                        thread: Some(i),
                        callback: None,
                    });
                    if st.suspension.leaked || st.suspension.profiler.is_some() {
                        let message = format!(
                            "GC on {thread} blocks in LockThreadStore: the thread-store lock is held by a SuspendRuntime that was never resumed"
                        );
                        st.fault(FaultKind::LeakedSuspensionHang, true, message);
                    } else {
                        st.suspension_started(SuspendReason::ForGc);
                        st.notify(Notification::SuspendFinished);
                        st.notify(Notification::ResumeStarted);
                        st.resume_finished();
                    }
                    st.callers.pop();
                    true
                }
            }
        };
        self.flush();
        ok
    }
}

/// The first half of `ICorProfilerInfo10::SuspendRuntime` (R41): its checks, then
/// `RuntimeSuspendStarted` (and `RuntimeThreadSuspended` for a runtime caller) queued, to be
/// raised before any thread stops (`ThreadSuspend::SuspendRuntime` raises them before it
/// traps a thread). `Ok(true)`: stop the threads with [`stop_threads`] once they are raised.
/// `Ok(false)`: a second call from the suspending thread, which answers `S_OK` and leaks the
/// suspension, as CoreCLR 3.1 does (`SuspendEE` runs again, raising the callbacks again; the
/// threads are stopped already); from another thread it would block on the thread-store lock.
pub(super) fn begin_suspension(st: &mut State) -> Result<bool, HResult> {
    st.sync_entry(true)?;
    if !st.config.started {
        return Err(HResult::CORPROF_E_RUNTIME_UNINITIALIZED);
    }
    if st.config.suspend_in_progress {
        return Err(HResult::CORPROF_E_SUSPENSION_IN_PROGRESS);
    }
    let me = st.caller().thread;
    let fresh = match st.suspension.profiler {
        Some(owner) if owner != me => {
            let owner = owner.map_or("<unnamed native thread>".to_string(), |i| {
                st.threads[i].name.clone()
            });
            let message = format!(
                "SuspendRuntime on {} blocks on the thread-store lock held by {owner}'s suspension",
                st.caller_name()
            );
            st.fault(FaultKind::Deadlock, true, message);
            return Err(HResult::E_UNEXPECTED);
        }
        Some(_) => {
            st.suspension.leaked = true;
            st.note(
                "SuspendRuntime",
                "already suspended: the second suspension's thread-store lock is leaked",
            );
            false
        }
        None => true,
    };
    st.suspension_started(SuspendReason::ForProfiler);
    Ok(fresh)
}

/// The second half of `SuspendRuntime`: every thread stopped at a safe point. In a running
/// process the suspension is finished when the last thread reaches its safe point, which the
/// process sees and raises `RuntimeSuspendFinished` then (`ThreadSuspend::SuspendRuntime`
/// raises it after its wait loop); called call by call, at once.
pub(super) fn stop_threads(st: &mut State, fresh: bool) {
    let me = st.caller().thread;
    if fresh {
        st.park_all(me);
        st.suspension.profiler = Some(me);
    }
    if !st.in_process {
        st.notify(Notification::SuspendFinished);
    }
}

/// The first half of `ICorProfilerInfo10::ResumeRuntime` (R41): refused unless the profiler
/// suspended the runtime; otherwise `RuntimeResumeStarted` is queued, raised before any thread
/// goes on (`ThreadSuspend::RestartEE`: "this notification must happen before we set
/// TrapReturningThreads to FALSE").
pub(super) fn begin_resume(st: &mut State) -> Result<(), HResult> {
    st.sync_entry(true)?;
    if st.suspension.profiler.is_none() {
        return Err(HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE);
    }
    st.notify(Notification::ResumeStarted);
    Ok(())
}

/// The second half of `ResumeRuntime`: every parked thread resumed, then
/// `RuntimeThreadResumed` for a runtime caller and `RuntimeResumeFinished`
/// (`ThreadSuspend::ResumeRuntime`).
pub(super) fn restart_threads(st: &mut State) {
    st.unpark_all();
    st.resume_finished();
    st.suspension.profiler = None;
}

impl Runtime {
    /// [`begin_suspension`] for the calling thread, its callbacks raised before it returns
    /// (in a running process: by the process, before the caller goes on).
    pub(crate) fn suspend_runtime_begin(&self) -> Result<bool, HResult> {
        let begun = begin_suspension(&mut self.lock());
        self.flush();
        begun
    }

    /// [`stop_threads`], its callbacks raised.
    pub(crate) fn suspend_runtime_stop(&self, fresh: bool) {
        stop_threads(&mut self.lock(), fresh);
        self.flush();
    }

    /// [`begin_resume`] for the calling thread, its callback raised.
    pub(crate) fn resume_runtime_begin(&self) -> Result<(), HResult> {
        let begun = begin_resume(&mut self.lock());
        self.flush();
        begun
    }

    /// [`restart_threads`]; the caller raises its callbacks ([`Runtime::flush`]) once it has
    /// released the thread-store lock.
    pub(crate) fn resume_runtime_finish(&self) {
        restart_threads(&mut self.lock());
    }
}
