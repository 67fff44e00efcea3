//! Who is calling the runtime, and the entry checks that depend on it: asynchronous and
//! synchronous entrypoints (R1, R27, R38) and host-call avoidance (R42).

use super::{CallbackKind, State};
use corprof::HResult;
use std::cell::Cell;

thread_local! {
    /// How many [`UnknownThread`] scopes the current OS thread is in.
    static UNKNOWN: Cell<usize> = const { Cell::new(0) };
}

/// While alive, the current OS thread calls the runtime as a thread it does not know,
/// whatever the callers stack says (see `Runtime::on_unknown_thread`).
pub(crate) struct UnknownThread(());

impl UnknownThread {
    pub fn enter() -> UnknownThread {
        UNKNOWN.with(|u| u.set(u.get() + 1));
        UnknownThread(())
    }
}

impl Drop for UnknownThread {
    fn drop(&mut self) {
        UNKNOWN.with(|u| u.set(u.get() - 1));
    }
}

/// A thread currently calling into the runtime.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    /// Index of the simulated thread; `None` for a thread outside the scenario (treated as a
    /// native thread that never ran managed code).
    pub thread: Option<usize>,
    /// The callback it runs in, if any.
    pub callback: Option<CallbackKind>,
}

impl State {
    pub fn caller(&self) -> Caller {
        let unknown = Caller {
            thread: None,
            callback: None,
        };
        if UNKNOWN.with(|u| u.get()) > 0 {
            return unknown;
        }
        self.callers.last().copied().unwrap_or(unknown)
    }

    /// The caller's runtime `Thread`, if it has one.
    pub fn caller_ee(&self) -> Option<usize> {
        self.caller().thread.filter(|&i| self.threads[i].is_managed())
    }

    pub fn caller_name(&self) -> String {
        match self.caller().thread {
            Some(i) => self.threads[i].name.clone(),
            None => "<unnamed native thread>".to_string(),
        }
    }

    /// True when host calls must be avoided: an asynchronous call on a managed thread, or a
    /// native GC thread (R42).
    pub fn avoid_host_calls(&self) -> bool {
        let caller = self.caller();
        match caller.thread {
            Some(i) if self.threads[i].is_managed() => caller.callback.is_none(),
            Some(i) => self.threads[i].gc_special,
            None => false,
        }
    }

    /// Checks of `PROFILER_TO_CLR_ENTRYPOINT_ASYNC` (R1).
    pub fn async_entry(&self) -> Result<(), HResult> {
        if self.terminated() {
            return Err(HResult::E_UNEXPECTED);
        }
        if self.config.detaching {
            return Err(HResult::CORPROF_E_PROFILER_DETACHING);
        }
        Ok(())
    }

    /// Checks of `PROFILER_TO_CLR_ENTRYPOINT_SYNC`: a managed caller must be inside a callback,
    /// and for APIs that may trigger a GC, one raised in a triggers scope (R27, R38).
    pub fn sync_entry(&self, triggers: bool) -> Result<(), HResult> {
        self.async_entry()?;
        if self.caller_ee().is_some() {
            match self.caller().callback {
                None => return Err(HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE),
                Some(cb) if triggers && !cb.triggers_scope() => {
                    return Err(HResult::CORPROF_E_UNSUPPORTED_CALL_SEQUENCE)
                }
                Some(_) => {}
            }
        }
        Ok(())
    }

    /// [`State::sync_entry`] of `GetFunctionFromIP2` and `GetCodeInfo3`, which may trigger a GC
    /// up to .NET 9 ([`super::RuntimeVersion::code_version_lookups_trigger`]).
    pub fn code_version_entry(&self) -> Result<(), HResult> {
        self.sync_entry(self.config.version.code_version_lookups_trigger())
    }
}
