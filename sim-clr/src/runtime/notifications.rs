//! Callbacks the runtime queues while it holds its lock and raises after releasing it (the
//! suspension callbacks, `RuntimeThreadSuspended` / `RuntimeThreadResumed`).

use super::{Runtime, State};
use crate::trace::Event;
use corprof::flags::{event, SuspendReason};
use corprof::ThreadId;

/// A callback to raise into the profiler once the state lock is released.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Notification {
    ThreadSuspended(ThreadId),
    ThreadResumed(ThreadId),
    SuspendStarted(SuspendReason),
    SuspendFinished,
    ResumeStarted,
    ResumeFinished,
}

impl State {
    /// Queues a callback for the profiler (raised after the lock is released) and records it.
    pub fn notify(&mut self, n: Notification) {
        if !self.monitors(event::MONITOR_SUSPENDS) {
            return;
        }
        let (kind, detail) = match n {
            Notification::ThreadSuspended(t) => ("RuntimeThreadSuspended", Some(self.name_of(t))),
            Notification::ThreadResumed(t) => ("RuntimeThreadResumed", Some(self.name_of(t))),
            Notification::SuspendStarted(r) => ("RuntimeSuspendStarted", Some(format!("{r:?}"))),
            Notification::SuspendFinished => ("RuntimeSuspendFinished", None),
            Notification::ResumeStarted => ("RuntimeResumeStarted", None),
            Notification::ResumeFinished => ("RuntimeResumeFinished", None),
        };
        let on = self.caller_name();
        self.record(Event {
            kind: kind.into(),
            on,
            detail,
        });
        self.pending.push(n);
    }
}

impl Runtime {
    /// Raises queued callbacks into the attached profiler. Call with the lock released.
    pub(crate) fn flush(&self) {
        let pending = std::mem::take(&mut self.lock().pending);
        let profiler = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let Some(p) = profiler else { return };
        for n in pending {
            match n {
                Notification::ThreadSuspended(t) => p.runtime_thread_suspended(t),
                Notification::ThreadResumed(t) => p.runtime_thread_resumed(t),
                Notification::SuspendStarted(r) => p.runtime_suspend_started(r),
                Notification::SuspendFinished => p.runtime_suspend_finished(),
                Notification::ResumeStarted => p.runtime_resume_started(),
                Notification::ResumeFinished => p.runtime_resume_finished(),
            };
        }
    }
}
