//! The hazards each stop of a thread by profiler code meets ([`Hazard`]), tallied per run.

use super::{Run, Status};
use crate::code::images::has_unwind_info;
use crate::process::hazard::{Hazard, DEEP_FRAMES};
use crate::thread::{Mode, StackEntry};

impl Run<'_> {
    /// Tallies a stop of thread `x` by profiler code: a suspension `GetThreadContext`
    /// completed, or the profiling signal's handler starting on it.
    pub(super) fn stopped(&mut self, x: usize) {
        self.stops += 1;
        let waiting = self.th[x].interrupted.is_some()
            || matches!(self.th[x].status, Status::Blocked(_) | Status::Sleeping(_))
            || self.th[x].parked;
        let mut met = Vec::with_capacity(Hazard::ALL.len());
        met.extend(self.locks.held_by(x).then_some(Hazard::HoldsLock));
        met.extend(waiting.then_some(Hazard::InWait));
        met.extend(self.th[x].rsp_hijacked.then_some(Hazard::BadStackPointer));
        met.extend(self.suspended_by_other(x).then_some(Hazard::RuntimeSuspended));
        let platform = self.rt.platform();
        {
            let st = self.rt.lock();
            let thread = &st.threads[x];
            let calls = thread.stack.iter().filter_map(|e| match e {
                StackEntry::Call { function, .. } => Some(st.code.function(*function)),
                StackEntry::Frame(_) => None,
            });
            let (mut depth, mut later) = (0, false);
            for f in calls {
                depth += 1;
                later |= f.version_of.is_some();
            }
            let leaf = thread.stack.iter().find_map(|e| match e {
                StackEntry::Call { function, .. } => Some(st.code.function(*function).kind),
                StackEntry::Frame(_) => None,
            });
            let leaf_native = leaf.is_some_and(|kind| !kind.is_managed() && has_unwind_info(platform, kind));
            let cooperative = thread.is_managed() && thread.mode == Mode::Cooperative;
            met.extend((cooperative && leaf_native).then_some(Hazard::CooperativeNativeLeaf));
            met.extend(later.then_some(Hazard::LaterCodeVersion));
            met.extend((depth > DEEP_FRAMES).then_some(Hazard::DeepStack));
        }
        for hazard in met {
            self.hazards[hazard as usize] += 1;
        }
    }
}
