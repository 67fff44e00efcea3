//! What a run reached ([`crate::coverage`]): each walk and stop profiler code made, what its
//! target was doing then, and the windows between threads (a round open while a thread is
//! created or exits, a callback blocked on a lock profiler code holds).

use super::{Activation, Run, Source, Status, Wait};
use crate::code::images::has_unwind_info;
use crate::coverage::{holds, Window, HOLDS_PROFILER_LOCK};
use crate::process::hazard::Hazard;
use crate::process::program::Op;
use crate::process::schedule::Hint;
use crate::runtime::CallbackKind;
use crate::thread::{Lifecycle, Mode, StackEntry};
use corprof::HResult;

impl Run<'_> {
    /// Counts the walks that returned during the step ([`crate::runtime::State::walk_log`]).
    pub(super) fn take_walks(&mut self) {
        let (walks, lists) = {
            let mut st = self.rt.lock();
            if st.walk_log.is_empty() && st.list_log.is_empty() {
                return;
            }
            (std::mem::take(&mut st.walk_log), std::mem::take(&mut st.list_log))
        };
        for (caller, listed) in lists {
            if let Some(s) = caller {
                self.th[s].listed = listed;
            }
        }
        for seen in &walks {
            let answer = seen.hr.name().map_or_else(|| seen.hr.to_string(), str::to_string);
            *self.coverage.walks.entry(answer).or_default() += 1;
            let Some(target) = seen.target else { continue };
            if let Some(s) = seen.caller {
                self.th[s].listed.retain(|&l| l != target);
            }
            if seen.caller.is_some_and(|c| c != target) {
                self.round_opens(seen.caller);
            }
            // A walk that answered samples its target; any walk met the target where it was
            // (inside its ThreadDestroyed a walk answers E_FAIL, and still reached the window).
            let sampled = seen.hr == HResult::S_OK || seen.hr == HResult::CORPROF_E_STACKSNAPSHOT_ABORTED;
            self.target_met(target, seen.lifecycle, sampled);
            let met = [
                (Window::WalkDuringSuspension, seen.during_suspension),
                (Window::WalkUnderOwnSuspension, seen.under_own_suspension),
                (Window::SeededFromNative, seen.seeded_from_native),
                (Window::NativeRun, seen.native_run),
                (Window::WalkCooperative, seen.mode == Mode::Cooperative),
                (Window::WalkPreemptive, seen.mode == Mode::Preemptive),
                (
                    Window::FrameLimit,
                    seen.hr == HResult::CORPROF_E_STACKSNAPSHOT_ABORTED,
                ),
            ];
            for (window, yes) in met {
                if yes {
                    self.reached(window.as_str());
                }
            }
        }
        // Keep the log's buffer for the next walks.
        let mut walks = walks;
        walks.clear();
        let mut st = self.rt.lock();
        if st.walk_log.is_empty() {
            st.walk_log = walks;
        }
    }

    /// Profiler code stopped thread `x` (its suspension completed, or the signal's handler
    /// starts on it, `by_signal`), meeting the hazards `met`.
    pub(super) fn stop_met(&mut self, x: usize, by_signal: bool, met: &[(Hazard, bool)]) {
        let (lifecycle, leaf_unwinds) = {
            let st = self.rt.lock();
            let thread = &st.threads[x];
            let leaf = thread.stack.iter().find_map(|e| match e {
                StackEntry::Call { function, .. } => Some(st.code.function(*function).kind),
                StackEntry::Frame(_) => None,
            });
            let platform = st.config.platform;
            (
                thread.lifecycle,
                leaf.is_none_or(|kind| has_unwind_info(platform, kind) || kind.is_managed()),
            )
        };
        self.target_met(x, lifecycle, true);
        if !leaf_unwinds {
            self.reached(Window::LeafWithoutUnwindInfo.as_str());
        }
        for &(hazard, yes) in met {
            let window = match hazard {
                Hazard::InWait if by_signal => Window::SignalInWait,
                Hazard::DeepStack => Window::DeepStack,
                Hazard::CooperativeNativeLeaf => Window::CooperativeNativeLeaf,
                Hazard::BadStackPointer => Window::BadStackPointer,
                Hazard::LaterCodeVersion => Window::LaterCodeVersion,
                Hazard::CorruptStack => Window::CorruptStack,
                _ => continue,
            };
            if yes {
                self.reached(window.as_str());
            }
        }
    }

    /// A window reached by what a thread did (a failed `GetThreadContext`, a signal sent, the
    /// crash event set), where the engine sees it.
    pub(super) fn met(&mut self, window: Window) {
        self.reached(window.as_str());
    }

    /// Sets event `e`; the application's crash event (`crash`) set while a round is under
    /// way reaches [`Window::CrashDuringRound`].
    pub(super) fn set_event(&mut self, e: usize) {
        self.events[e] = true;
        if self.event_names[e] == "crash" && self.th.iter().any(|s| s.round_open) {
            self.reached(Window::CrashDuringRound.as_str());
        }
    }

    /// Thread `x` was walked or stopped while it was in `lifecycle`: the windows it was in are
    /// reached, and it is sampled if the walk or stop gave a sample (`sampled`).
    fn target_met(&mut self, x: usize, lifecycle: Lifecycle, sampled: bool) {
        if sampled {
            let name = self.th[x].name.clone();
            self.coverage.sampled.insert(name);
        }
        let in_created = (self.th[x].stack.iter()).any(|a| a.callback == Some(CallbackKind::ThreadCreated));
        if in_created {
            self.reached(Window::InsideThreadCreated.as_str());
        }
        if self.rt.lock().threads[x].layout.funclets() {
            self.reached(Window::InFunclet.as_str());
        }
        match lifecycle {
            Lifecycle::Destroying => self.reached(Window::InsideThreadDestroyed.as_str()),
            Lifecycle::Dead | Lifecycle::Deleted => self.reached(Window::AfterThreadDestroyed.as_str()),
            Lifecycle::Alive | Lifecycle::Unstarted => {}
        }
        let held: Vec<String> = (self.locks.held_ids(x))
            .map(|l| {
                if self.locks.is_profilers(l) {
                    HOLDS_PROFILER_LOCK.to_string()
                } else {
                    holds(self.locks.name(l))
                }
            })
            .collect();
        for window in held {
            self.reached(&window);
        }
        if self.conds.iter().any(|c| c.holders.contains(&x)) {
            self.reached(HOLDS_PROFILER_LOCK);
        }
    }

    /// Thread `t` just blocked: inside a runtime callback, on a lock profiler code holds (a
    /// lock of the file's or of profiler code's making, a read-write lock, a semaphore)?
    pub(super) fn blocked_met(&mut self, t: usize) {
        let Status::Blocked(wait) = self.th[t].status else {
            return;
        };
        if !self.th[t].stack.iter().any(|a| a.callback.is_some()) {
            return;
        }
        let on_profiler_lock = match wait {
            Wait::Lock(l) => {
                (l.0 as usize) >= crate::runtime_locks::RUNTIME_LOCKS.len()
                    && self.locks.owner(l).is_some_and(|o| o != t)
            }
            Wait::Cond(c, ..) => self.conds[c as usize].holders.iter().any(|&h| h != t),
            _ => false,
        };
        if on_profiler_lock {
            self.reached(Window::CallbackBlockedOnProfilerLock.as_str());
        }
    }

    /// Profiler code on thread `t` (if known) stops or walks others: a sampling round is under
    /// way on it until it next sleeps, waits with a deadline or ends.
    pub(super) fn round_opens(&mut self, t: Option<usize>) {
        if let Some(t) = t {
            self.th[t].round_open = true;
        }
    }

    /// Thread `t`'s round, if one was under way, is over.
    pub(super) fn round_closes(&mut self, t: usize) {
        self.th[t].round_open = false;
        self.th[t].listed.clear();
    }

    /// Thread `x` is being created (`ThreadCreated`) or exits (`ThreadDestroyed`): while a
    /// round is under way on another thread, its window is reached.
    pub(super) fn lifecycle_met(&mut self, x: usize, window: Window) {
        if (0..self.th.len()).any(|s| s != x && self.th[s].round_open) {
            self.reached(window.as_str());
        }
    }

    fn reached(&mut self, window: &str) {
        if !self.coverage.windows.contains(window) {
            self.coverage.windows.insert(window.to_string());
            if self.timeline.is_some() {
                self.fresh_windows.push(window.to_string());
            }
        }
    }

    /// Where every thread stands, for a chooser that steers towards windows
    /// ([`crate::process::schedule::Cover`]): a profiler thread or not, the windows a walk or
    /// stop of it would reach now, and those its next program step enters.
    pub(super) fn hints(&self) -> Vec<Hint> {
        (0..self.th.len())
            .map(|x| {
                let mut inside = Vec::new();
                if self.th[x]
                    .stack
                    .iter()
                    .any(|a| a.callback == Some(CallbackKind::ThreadCreated))
                {
                    inside.push(Window::InsideThreadCreated.as_str().to_string());
                }
                {
                    let st = self.rt.lock();
                    let thread = &st.threads[x];
                    match thread.lifecycle {
                        Lifecycle::Destroying => {
                            inside.push(Window::InsideThreadDestroyed.as_str().to_string())
                        }
                        Lifecycle::Dead => inside.push(Window::AfterThreadDestroyed.as_str().to_string()),
                        _ => {}
                    }
                    if thread.layout.funclets() {
                        inside.push(Window::InFunclet.as_str().to_string());
                    }
                }
                for l in self.locks.held_ids(x) {
                    inside.push(if self.locks.is_profilers(l) {
                        HOLDS_PROFILER_LOCK.to_string()
                    } else {
                        holds(self.locks.name(l))
                    });
                }
                Hint {
                    sampler: self.samplers.get(x).copied().unwrap_or(false),
                    in_round: self.th[x].round_open,
                    listed: (0..self.th.len())
                        .any(|s| self.th[s].round_open && self.th[s].listed.contains(&x)),
                    inside,
                    entering: self.entering(x),
                }
            })
            .collect()
    }

    /// The windows thread `x`'s next program step takes it into.
    fn entering(&self, x: usize) -> Vec<String> {
        let Some(Activation {
            source: Source::Program { code, pc, .. },
            ..
        }) = self.th[x].stack.last()
        else {
            return Vec::new();
        };
        let Some(instr) = code.get(*pc) else {
            return Vec::new();
        };
        let windows: &[Window] = match instr.op {
            Op::Exit => &[Window::InsideThreadDestroyed, Window::RoundOverExit],
            Op::Spawn(_) => &[Window::RoundOverCreation, Window::InsideThreadCreated],
            Op::Throw | Op::Catch(_) => &[Window::InFunclet],
            Op::PInvoke(_) => &[Window::WalkPreemptive],
            Op::Overrun(_) => &[Window::CorruptStack],
            Op::HijackRsp => &[Window::BadStackPointer],
            Op::Gc => &[Window::WalkDuringSuspension],
            Op::Lock(l) => return vec![holds(self.locks.name(l))],
            Op::Alloc => return vec![holds("heap")],
            _ => &[],
        };
        windows.iter().map(|w| w.as_str().to_string()).collect()
    }

    /// The threads a sampler could have sampled in this run: those the runtime knew as
    /// managed, not the GC's.
    pub(super) fn sampleable(&self) -> std::collections::BTreeSet<String> {
        let st = self.rt.lock();
        (st.threads.iter())
            .zip(&self.th)
            .filter(|(t, s)| t.is_managed() && !t.gc_special && s.status != Status::NotStarted)
            .map(|(t, _)| t.name.clone())
            .collect()
    }
}
