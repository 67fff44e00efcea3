//! Callbacks the runtime queues while it holds its lock and raises after releasing it: the
//! suspension callbacks (`RuntimeSuspendStarted` … `RuntimeResumeFinished`,
//! `RuntimeThreadSuspended` / `RuntimeThreadResumed`).
//!
//! Each queued callback names the thread CoreCLR raises it on. For a scenario run call by call
//! they are raised at once into the attached profiler on the calling OS thread. In a running
//! process ([`State::in_process`]) the process raises each one on its simulated thread, as a
//! callback activation that runs before that thread goes on, so profiler code in it is
//! scheduled, can block, and can fail like any other callback.

use super::{Runtime, State};
use crate::fiber;
use crate::trace::Event;
use corprof::flags::{event, SuspendReason};
use corprof::{ProfilerCallback, ThreadId};

/// A suspension callback (`COR_PRF_MONITOR_SUSPENDS`), with its argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Notification {
    /// `RuntimeThreadSuspended(thread)`.
    ThreadSuspended(ThreadId),
    /// `RuntimeThreadResumed(thread)`.
    ThreadResumed(ThreadId),
    /// `RuntimeSuspendStarted(reason)`.
    SuspendStarted(SuspendReason),
    /// `RuntimeSuspendFinished`: every thread has reached a safe point.
    SuspendFinished,
    /// `RuntimeResumeStarted`.
    ResumeStarted,
    /// `RuntimeResumeFinished`.
    ResumeFinished,
}

impl Notification {
    /// The callback's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Notification::ThreadSuspended(_) => "RuntimeThreadSuspended",
            Notification::ThreadResumed(_) => "RuntimeThreadResumed",
            Notification::SuspendStarted(_) => "RuntimeSuspendStarted",
            Notification::SuspendFinished => "RuntimeSuspendFinished",
            Notification::ResumeStarted => "RuntimeResumeStarted",
            Notification::ResumeFinished => "RuntimeResumeFinished",
        }
    }

    /// Calls the profiler's method for it.
    pub fn deliver(self, p: &dyn ProfilerCallback) {
        match self {
            Notification::ThreadSuspended(t) => p.runtime_thread_suspended(t),
            Notification::ThreadResumed(t) => p.runtime_thread_resumed(t),
            Notification::SuspendStarted(r) => p.runtime_suspend_started(r),
            Notification::SuspendFinished => p.runtime_suspend_finished(),
            Notification::ResumeStarted => p.runtime_resume_started(),
            Notification::ResumeFinished => p.runtime_resume_finished(),
        };
    }
}

/// A queued callback and the thread (by index) it is raised on; `None`: a thread the runtime
/// does not know, where a running process raises nothing.
pub(crate) type Queued = (Option<usize>, Notification);

impl State {
    /// Queues a callback, raised on the calling thread once the lock is released, and records
    /// it.
    pub fn notify(&mut self, n: Notification) {
        let on = self.caller().thread;
        self.notify_on(on, n);
    }

    /// Queues a callback raised on thread `on`, and records it.
    pub fn notify_on(&mut self, on: Option<usize>, n: Notification) {
        if !self.monitors(event::MONITOR_SUSPENDS) {
            return;
        }
        let detail = match n {
            Notification::ThreadSuspended(t) | Notification::ThreadResumed(t) => Some(self.name_of(t)),
            Notification::SuspendStarted(r) => Some(format!("{r:?}")),
            _ => None,
        };
        let on_name = match on {
            Some(i) => self.threads[i].name.clone(),
            None => self.caller_name(),
        };
        self.record(Event {
            kind: n.as_str().into(),
            on: on_name,
            detail,
        });
        self.pending.push((on, n));
    }

    /// `RuntimeSuspendStarted(reason)`, then `RuntimeThreadSuspended` for the calling thread
    /// if it is a runtime thread, as `ThreadSuspend::SuspendRuntime` raises them before it
    /// stops any thread (`if (pCurThread)`: a native thread has no `Thread`; CoreCLR v3.1.23,
    /// `src/vm/threadsuspend.cpp`).
    pub fn suspension_started(&mut self, reason: SuspendReason) {
        self.notify(Notification::SuspendStarted(reason));
        if let Some(id) = self.runtime_caller() {
            self.notify(Notification::ThreadSuspended(id));
        }
    }

    /// `RuntimeThreadResumed` for the calling thread if it is a runtime thread, then
    /// `RuntimeResumeFinished`, as `ThreadSuspend::ResumeRuntime` raises them (same file).
    pub fn resume_finished(&mut self) {
        if let Some(id) = self.runtime_caller() {
            self.notify(Notification::ThreadResumed(id));
        }
        self.notify(Notification::ResumeFinished);
    }

    /// The calling thread's `ThreadID`, if the runtime knows it as one of its own.
    fn runtime_caller(&self) -> Option<ThreadId> {
        let me = self.caller().thread.filter(|&i| self.threads[i].is_managed())?;
        Some(self.threads[me].id)
    }
}

impl Runtime {
    /// Raises queued callbacks. Call with the lock released. Called call by call, they reach
    /// the attached profiler here; in a running process, code on a simulated thread asks the
    /// process to raise them (a scheduling point) and the engine's own steps leave them for the
    /// process to raise after the step.
    pub(crate) fn flush(&self) {
        let in_process = {
            let st = self.lock();
            if st.pending.is_empty() {
                return;
            }
            st.in_process
        };
        if in_process {
            // Off a fiber the request returns at once: the process raises them after its step.
            let _raised = fiber::request(fiber::Request::Raise);
            return;
        }
        let pending = std::mem::take(&mut self.lock().pending);
        let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(p) = profiler else { return };
        for (_, n) in pending {
            n.deliver(p.as_ref());
        }
    }
}
