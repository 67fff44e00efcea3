//! Runtime suspensions: the profiler's `SuspendRuntime` / `ResumeRuntime` (R41) and the GC's,
//! and parking managed threads at safe points.

use super::{Caller, Notification, Runtime, State};
use crate::thread::{FrameKind, Lifecycle, Mode, StackEntry};
use crate::trace::FaultKind;
use corprof::flags::SuspendReason;
use corprof::HResult;

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
            t.stack.insert(0, StackEntry::Frame(FrameKind::Redirected));
        }
        t.mode = Mode::Preemptive;
        t.parked = Some(previous);
        self.relayout(i);
        let id = self.threads[i].id;
        self.notify(Notification::ThreadSuspended(id));
    }

    /// Undoes [`State::park_all`].
    pub fn unpark_all(&mut self) {
        for i in 0..self.threads.len() {
            let Some(previous) = self.threads[i].parked.take() else {
                continue;
            };
            let t = &mut self.threads[i];
            if t.stack.first() == Some(&StackEntry::Frame(FrameKind::Redirected)) {
                t.stack.remove(0);
            }
            t.mode = previous;
            self.relayout(i);
            let id = self.threads[i].id;
            self.notify(Notification::ThreadResumed(id));
        }
    }
}

impl Runtime {
    /// An induced garbage collection on `thread`. After a leaked `SuspendRuntime` it hangs
    /// (R41); otherwise it raises the suspension callbacks. Returns false if no such thread.
    pub fn collect_garbage(&self, thread: &str) -> bool {
        let ok = {
            let mut st = self.lock();
            match st.threads.iter().position(|t| t.name == thread) {
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
                        st.notify(Notification::SuspendStarted(SuspendReason::ForGc));
                        st.notify(Notification::SuspendFinished);
                        st.notify(Notification::ResumeStarted);
                        st.notify(Notification::ResumeFinished);
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

/// `ICorProfilerInfo10::SuspendRuntime` (R41). A second call from the suspending thread
/// answers `S_OK` and leaks the suspension, as CoreCLR 3.1 does; from another thread it would
/// block on the thread-store lock.
pub(super) fn suspend_runtime(st: &mut State) -> HResult {
    if let Err(hr) = st.sync_entry(true) {
        return hr;
    }
    if !st.config.started {
        return HResult::CORPROF_E_RUNTIME_UNINITIALIZED;
    }
    if st.config.suspend_in_progress {
        return HResult::CORPROF_E_SUSPENSION_IN_PROGRESS;
    }
    let me = st.caller().thread;
    if let Some(owner) = st.suspension.profiler {
        if owner != me {
            let owner = owner.map_or("<unnamed native thread>".to_string(), |i| {
                st.threads[i].name.clone()
            });
            let message = format!(
                "SuspendRuntime on {} blocks on the thread-store lock held by {owner}'s suspension",
                st.caller_name()
            );
            st.fault(FaultKind::Deadlock, true, message);
            return HResult::E_UNEXPECTED;
        }
        st.suspension.leaked = true;
        st.note(
            "SuspendRuntime",
            "already suspended: the second suspension's thread-store lock is leaked",
        );
        return HResult::S_OK;
    }
    st.notify(Notification::SuspendStarted(SuspendReason::ForProfiler));
    st.park_all(me);
    st.notify(Notification::SuspendFinished);
    st.suspension.profiler = Some(me);
    HResult::S_OK
}

/// `ICorProfilerInfo10::ResumeRuntime` (R41): refused unless the profiler suspended the
/// runtime; otherwise every parked thread is resumed.
pub(super) fn resume_runtime(st: &mut State) -> HResult {
    if let Err(hr) = st.sync_entry(true) {
        return hr;
    }
    if st.suspension.profiler.is_none() {
        return HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE;
    }
    st.notify(Notification::ResumeStarted);
    st.unpark_all();
    st.notify(Notification::ResumeFinished);
    st.suspension.profiler = None;
    HResult::S_OK
}
