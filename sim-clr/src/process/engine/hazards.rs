//! The hazards each stop of a thread by profiler code meets ([`Hazard`]), tallied per run.

use super::{Run, Status};
use crate::code::images::has_unwind_info;
use crate::process::hazard::{Hazard, DEEP_FRAMES};
use crate::thread::{Lifecycle, Mode, StackEntry};

impl Run<'_> {
    /// Tallies a stop of thread `x` by profiler code: a suspension `GetThreadContext`
    /// completed, or the profiling signal's handler starting on it.
    pub(super) fn stopped(&mut self, x: usize, by_signal: bool) {
        self.stops += 1;
        let platform = self.rt.platform();
        let (cooperative_native_leaf, later, deep, exiting, corrupt) = {
            let st = self.rt.lock();
            let thread = &st.threads[x];
            let mut calls = thread
                .stack
                .iter()
                .filter_map(|e| match e {
                    StackEntry::Call { function, .. } => Some(st.code.function(*function)),
                    StackEntry::Frame(_) => None,
                })
                .peekable();
            let leaf_native = calls
                .peek()
                .is_some_and(|f| !f.kind.is_managed() && has_unwind_info(platform, f.kind));
            let cooperative = thread.is_managed() && thread.mode == Mode::Cooperative;
            let (depth, later) = calls.fold((0, false), |(depth, later), f| {
                (depth + 1, later || f.version_of.is_some())
            });
            let exiting = matches!(thread.lifecycle, Lifecycle::Destroying | Lifecycle::Dead);
            let corrupt = thread.overrun.is_some();
            (
                cooperative && leaf_native,
                later,
                depth > DEEP_FRAMES,
                exiting,
                corrupt,
            )
        };
        // A signal stops a waiting thread before the handler's activation goes on it.
        let waiting =
            matches!(self.th[x].status, Status::Blocked(_) | Status::Sleeping(_)) || self.th[x].parked;
        let met = [
            (Hazard::HoldsLock, self.locks.held_by(x)),
            (Hazard::ProfilerLock, self.locks.profiler_lock_held_by(x)),
            (Hazard::InWait, waiting),
            (Hazard::BadStackPointer, self.th[x].rsp_hijacked),
            (Hazard::CooperativeNativeLeaf, cooperative_native_leaf),
            (Hazard::LaterCodeVersion, later),
            (Hazard::DeepStack, deep),
            (Hazard::RuntimeSuspended, self.suspended_by_other(x)),
            (Hazard::Exiting, exiting),
            (Hazard::CorruptStack, corrupt),
        ];
        for (hazard, yes) in met {
            self.hazards[hazard as usize] += u64::from(yes);
        }
        self.stop_met(x, by_signal, &met);
    }
}
