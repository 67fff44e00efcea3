//! The code manager's lock: readers (walks, IP lookups) against a writer (a thread adding
//! code). Its state is the writer mark on each thread (`Thread::holds_writer_lock`).

use super::State;
use crate::thread::Lifecycle;
use crate::trace::FaultKind;
use corprof::HResult;

impl State {
    /// Takes the code manager's reader lock for the caller (R13.2, R14, R42). With a writer
    /// holding it, an asynchronous caller gets `CORPROF_E_ASYNCHRONOUS_UNSAFE`; a caller allowed
    /// to block waits — forever, if the writer is suspended. .NET 10's lookups take no lock
    /// ([`super::RuntimeVersion::code_lookups_take_the_reader_lock`]).
    pub fn reader_lock(&mut self) -> Result<(), HResult> {
        if self.writer_lock_holders == 0 || !self.config.version.code_lookups_take_the_reader_lock() {
            return Ok(());
        }
        let me = self.caller().thread;
        let Some(writer) = self
            .threads
            .iter()
            .position(|t| t.holds_writer_lock && t.lifecycle != Lifecycle::Deleted)
            .filter(|&w| Some(w) != me)
        else {
            return Ok(());
        };
        if self.avoid_host_calls() {
            return Err(HResult::CORPROF_E_ASYNCHRONOUS_UNSAFE);
        }
        if self.threads[writer].os_suspend_count > 0 {
            let message = format!(
                "{} waits for the code manager lock held by {}, which is suspended",
                self.caller_name(),
                self.threads[writer].name
            );
            self.fault(FaultKind::Deadlock, true, message);
            return Err(HResult::E_UNEXPECTED);
        }
        Ok(())
    }
}
