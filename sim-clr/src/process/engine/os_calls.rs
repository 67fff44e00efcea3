//! The OS calls programs and profiler fibers share (suspension, context, signals, stack reads),
//! and the serving of a fiber's requests.
//!
//! A program's step and a fiber's request for the same call go through the same function
//! here, so both see the same semantics and leave the same trace line.

use super::{Activation, Cond, Run, Source, Status, Wait};
use crate::coverage::Window;
use crate::fiber::{Code, Fiber, Holding, Home, Reply, Request, ThreadStart, Yielded};
use crate::platform::Platform;
use crate::process::program::LockId;
use crate::process::schedule::{Chooser, ScheduleError};
use crate::process::{Ending, SimOs, ThreadBody};
use crate::runtime::{CallbackKind, Notification, Runtime};
use crate::thread::{Lifecycle, OsContext};
use crate::trace::FaultKind;
use corprof::os::{EventId, MutexId, OsError, OsThread};
use corprof::Context;
use std::sync::Arc;
use std::time::Duration;

impl Run<'_> {
    /// Whether thread `x` can be the target of an OS call: a deleted thread's handle names
    /// nothing any more; one whose program ended stays, idle.
    pub(super) fn os_target(&self, x: usize) -> Result<(), OsError> {
        // After ThreadDestroyed returns (`Dead`) the OS thread still runs: CoreCLR raises it
        // from `Thread::OnThreadTerminate` on the exiting thread itself, which then takes the
        // thread-store lock and marks the `Thread` dead (v3.1.23 `src/vm/threads.cpp`). A
        // profiler's handle to it (by the id ThreadAssignedToOSThread gave) still suspends
        // and reads it, until the thread is gone.
        match self.rt.lock().threads[x].lifecycle {
            Lifecycle::Deleted => Err(OsError::NoSuchThread),
            _ => Ok(()),
        }
    }

    /// The trace line of an OS call by `t` on `x`: the call, the target and its answer.
    fn traced(&mut self, t: usize, line: usize, call: &str, x: usize, answer: String) {
        self.note(t, line, |run| format!("{call} {} → {answer}", run.th[x].name));
    }

    /// `SuspendThread` of `x` by `t` (Windows): asynchronous until `GetThreadContext`.
    pub(super) fn os_suspend(&mut self, t: usize, x: usize, line: usize) -> Result<u32, OsError> {
        let r = self.suspend(t, x);
        self.traced(t, line, "SuspendThread", x, shown(&r));
        r
    }

    fn suspend(&mut self, t: usize, x: usize) -> Result<u32, OsError> {
        if self.rt.platform() != Platform::Windows {
            return Err(OsError::Unsupported);
        }
        self.os_target(x)?;
        if self.rt.lock().threads[t].is_managed() {
            let message = format!(
                "{} suspends {}, but the runtime knows {0}: a runtime suspension can stop it while its target is suspended",
                self.th[t].name, self.th[x].name
            );
            self.warn(Ending::ManagedSuspender.as_str(), message);
        }
        let name = self.th[x].name.clone();
        self.stop_started(t, &name);
        let s = &mut self.th[x];
        let previous = s.suspenders.len() as u32;
        s.suspenders.push(t);
        s.suspend_pending = true;
        s.moved = false;
        self.rt.lock().threads[x].os_suspend_count += 1;
        Ok(previous)
    }

    /// `ResumeThread` of `x` by `t`: any thread may resume; the suspension it ends is the
    /// newest by `t`, else the newest.
    pub(super) fn os_resume(&mut self, t: usize, x: usize, line: usize) -> Result<u32, OsError> {
        let r = self.resume(t, x);
        self.traced(t, line, "ResumeThread", x, shown(&r));
        r
    }

    fn resume(&mut self, t: usize, x: usize) -> Result<u32, OsError> {
        if self.rt.platform() != Platform::Windows {
            return Err(OsError::Unsupported);
        }
        if self.rt.lock().threads[x].lifecycle == Lifecycle::Deleted {
            return Err(OsError::NoSuchThread);
        }
        let s = &mut self.th[x];
        let previous = s.suspenders.len();
        let at = s
            .suspenders
            .iter()
            .rposition(|&by| by == t)
            .or(previous.checked_sub(1));
        let at = at.ok_or(OsError::NotSuspended)?;
        s.suspenders.remove(at);
        if s.suspenders.is_empty() {
            s.suspend_pending = false;
        }
        self.rt.lock().threads[x].os_suspend_count -= 1;
        Ok(previous as u32)
    }

    /// `GetThreadContext` of `x`: completes a pending suspension. It fails where the thread
    /// declares that it does (`os_context = "get_context_fails"`: the same call fails inside
    /// `DoStackSnapshot`, R13.1) and for a thread whose stack is gone; a thread declared
    /// `os_context = "stale"` answers the stale context `DoStackSnapshot` sees (R13.4). A thread inside its
    /// `ThreadDestroyed` is alive and running that callback, so it answers as any live
    /// thread (no observation says otherwise).
    pub(super) fn os_context(&mut self, t: usize, x: usize, line: usize) -> Result<Context, OsError> {
        let r = self.context(x);
        let answer = match &r {
            Ok(c) => format!("ok rip {:#x}", c.rip),
            Err(e) => format!("error: {e}"),
        };
        self.traced(t, line, "GetThreadContext", x, answer);
        r
    }

    fn context(&mut self, x: usize) -> Result<Context, OsError> {
        self.os_target(x)?;
        // GetThreadContext returns only once the thread has really stopped, whether or not it
        // can then give the registers: a failed call leaves it suspended.
        self.complete_suspension(x);
        let mut context = {
            let st = self.rt.lock();
            let thread = &st.threads[x];
            if thread.os_context == OsContext::GetContextFails {
                drop(st);
                self.met(Window::ContextFailed);
                return Err(OsError::ContextUnavailable);
            }
            thread.os_thread_context().ok_or(OsError::Terminated)?
        };
        if self.th[x].rsp_hijacked {
            context.rsp = super::HIJACKED_RSP;
        }
        Ok(context)
    }

    /// A pending `SuspendThread` of `x` takes effect (`GetThreadContext` waits for it).
    fn complete_suspension(&mut self, x: usize) {
        if !self.th[x].suspenders.is_empty() {
            if self.th[x].suspend_pending {
                if self.th[x].moved {
                    self.met(Window::RanAfterSuspend);
                }
                self.stopped(x, false);
            }
            self.th[x].suspend_pending = false;
        }
    }

    /// Sends the profiling signal to `x` (Unix): its handler runs at `x`'s next step.
    pub(super) fn os_signal(&mut self, t: usize, x: usize, line: usize) -> Result<(), OsError> {
        let r = if self.rt.platform() != Platform::Unix {
            Err(OsError::Unsupported)
        } else {
            self.os_target(x).map(|()| self.th[x].signal_pending = true)
        };
        if r.is_ok() {
            if self.th[x].signals_masked {
                self.met(Window::SignalMasked);
            }
            if self.th[x].handler_replaced {
                self.met(Window::SignalHandlerReplaced);
            }
        }
        if r.is_ok() {
            let name = self.th[x].name.clone();
            self.stop_started(t, &name);
        }
        self.traced(t, line, "signal", x, shown(&r));
        r
    }

    fn stack_bounds(&self, x: usize) -> Result<(u64, u64), OsError> {
        let st = self.rt.lock();
        let thread = &st.threads[x];
        if thread.lifecycle == Lifecycle::Deleted {
            return Err(OsError::NoSuchThread);
        }
        Ok((thread.stack_limit, thread.stack_base))
    }

    /// A torn-read fault when `t` reads the stack of `x` while `x` may still move: it is not
    /// suspended, or its suspension has not completed and it ran since.
    fn check_torn(&mut self, t: usize, x: usize, line: usize) -> bool {
        let s = &self.th[x];
        let stopped = (!s.suspenders.is_empty() && !s.suspend_pending) || s.parked;
        if t == x || stopped || (!s.suspenders.is_empty() && !s.moved) {
            return false;
        }
        let why = if s.suspenders.is_empty() {
            "which is not suspended"
        } else {
            "whose SuspendThread had not completed (no GetThreadContext) and which ran on"
        };
        let message = format!(
            "{} read the stack of {} {why}: the sample is torn (line {line})",
            self.th[t].name, s.name
        );
        self.warn(Ending::TornStackRead.as_str(), message);
        true
    }

    /// A raw read of `x`'s stack at its stack pointer, as a sampler does after suspending it:
    /// freed memory is an access violation; a thread that still moves gives a torn sample.
    pub(super) fn raw_stack_read(&mut self, t: usize, x: usize, line: usize) {
        let (sp, deleted) = {
            let st = self.rt.lock();
            let thread = &st.threads[x];
            let sp = thread
                .layout
                .calls
                .first()
                .map_or(thread.stack_base - 0x40, |c| c.rsp);
            (sp, thread.lifecycle == Lifecycle::Deleted)
        };
        if deleted || self.rt.read_memory(sp).is_none() {
            let message = format!(
                "{} reads {sp:#x} on the stack of {}, which was freed when the thread exited (line {line})",
                self.th[t].name, self.th[x].name
            );
            self.end(FaultKind::AccessViolation.as_str(), message, Vec::new());
            return;
        }
        let torn = self.check_torn(t, x, line);
        if x != t {
            self.coverage.reads += 1;
            self.coverage.sampled.insert(self.th[x].name.clone());
        }
        self.note(t, line, |run| {
            let how = if torn { "torn" } else { "ok" };
            format!("read_stack {} at {sp:#x}: {how}", run.th[x].name)
        });
    }

    /// A checked read (`ThreadControl::read_stack`): outside the bounds or unmapped is an
    /// error, never a fault; reading a thread that still moves is torn all the same.
    fn checked_read(&mut self, t: usize, x: usize, address: u64) -> Result<u64, OsError> {
        let (low, high) = self.stack_bounds(x)?;
        if address < low || address.checked_add(8).is_none_or(|end| end > high) {
            return Err(OsError::BadAddress(address));
        }
        self.check_torn(t, x, 0);
        self.rt.read_memory(address).ok_or(OsError::BadAddress(address))
    }

    /// Checked reads of `count` consecutive words (one torn-read check for them all).
    fn checked_words(&mut self, t: usize, x: usize, address: u64, count: usize) -> Result<Vec<u64>, OsError> {
        let (low, high) = self.stack_bounds(x)?;
        let end = (count as u64)
            .checked_mul(8)
            .and_then(|n| address.checked_add(n))
            .ok_or(OsError::BadAddress(address))?;
        if address < low || end > high {
            return Err(OsError::BadAddress(address));
        }
        self.check_torn(t, x, 0);
        (0..count as u64)
            .map(|i| {
                let at = address + 8 * i;
                self.rt.read_memory(at).ok_or(OsError::BadAddress(at))
            })
            .collect()
    }

    fn os_thread(&self, x: usize) -> OsThread {
        OsThread(self.rt.lock().threads[x].os_id)
    }

    /// The thread with OS id `id`: of the threads that had it in turn (`reuses_os_id`), the
    /// one that has started and not ended, else the first.
    fn by_os_id(&self, id: OsThread) -> Result<usize, OsError> {
        let st = self.rt.lock();
        let mut owners = st
            .threads
            .iter()
            .enumerate()
            .filter(|(_, t)| t.os_id == id.0)
            .map(|(x, _)| x);
        let first = owners.next().ok_or(OsError::NoSuchThread)?;
        let live = |x: &usize| !matches!(self.th[*x].status, Status::NotStarted | Status::Done);
        Ok(std::iter::once(first).chain(owners).find(live).unwrap_or(first))
    }

    // ---- fibers ------------------------------------------------------------------------

    /// When `t` waits to learn whether its runtime call fails ([`Request::Fails`]), or, in a
    /// run that injects failures, is about to make an OS thread call, asks `chooser` and keeps
    /// the choice in the schedule.
    pub(super) fn decide_failure(
        &mut self,
        t: usize,
        chooser: &mut dyn Chooser,
    ) -> Result<(), ScheduleError> {
        let Some(Activation {
            source:
                Source::Fiber {
                    pending: Some(req),
                    ready: None,
                    ..
                },
            ..
        }) = self.th[t].stack.last()
        else {
            return Ok(());
        };
        let os_call = os_call_name(req).is_some_and(|api| crate::runtime::injected(api).is_some())
            && self.rt.lock().failing.injecting;
        if !matches!(req, Request::Fails) && !os_call {
            return Ok(());
        }
        let req = req.clone();
        let fails = chooser.fail()?;
        self.choices.push(u16::from(fails));
        let reply = match req {
            Request::Fails => Some(Reply::Flag(fails)),
            _ if fails => Some(self.failed_os_call(t, &req)),
            // The OS call goes on as usual at the step.
            _ => None,
        };
        if let Some(reply) = reply {
            self.fiber_mut(t, |pending, ready, _| {
                *pending = None;
                *ready = Some(reply);
            });
        }
        Ok(())
    }

    /// The answer of OS thread call `req` of `t` made to fail, noted in the trace.
    fn failed_os_call(&mut self, t: usize, req: &Request) -> Reply {
        let api = os_call_name(req).unwrap_or("an OS call");
        self.note(t, 0, |_| format!("{api} → failed (injected)"));
        match req {
            Request::GetContext(thread) => {
                // The suspension it waited for has taken effect all the same.
                if let Ok(x) = self.by_os_id(*thread) {
                    self.complete_suspension(x);
                }
                self.met(Window::ContextFailed);
                Reply::Context(Box::new(Err(OsError::Injected)))
            }
            _ => Reply::Count(Err(OsError::Injected)),
        }
    }

    /// One step of Rust code on `t`: serve the request it waits in (or block again), then
    /// resume it, as the current caller, until its next request.
    pub(super) fn fiber_step(&mut self, t: usize, callback: Option<CallbackKind>) {
        let Some(Activation {
            source: Source::Fiber { pending, ready, .. },
            ..
        }) = self.th[t].stack.last_mut()
        else {
            unreachable!("fiber_step on a fiber activation");
        };
        let reply = match (ready.take(), pending.take()) {
            (Some(reply), _) => reply,
            (None, None) => {
                self.changed();
                Reply::Start
            }
            (None, Some(req)) => match self.serve(t, &req) {
                Ok(reply) => {
                    if changes(&req, &reply) {
                        self.changed();
                    }
                    reply
                }
                Err(w) => {
                    if let Wait::Lock(l) = w {
                        let what = match req {
                            Request::Allocated => "allocation",
                            Request::ReaderLock => "code manager reader lock",
                            Request::Point => "per-thread setup",
                            _ => "lock",
                        };
                        self.waits_for_lock(t, 0, what, l);
                    }
                    self.fiber_mut(t, |pending, _, _| *pending = Some(req));
                    self.th[t].status = Status::Blocked(w);
                    return;
                }
            },
        };
        self.fiber_mut(t, |_, _, deadline| *deadline = None);
        self.th[t].last_progress = self.now;
        if let Status::Sleeping(_) = self.th[t].status {
            // A sleep: the fiber gets its reply when it wakes.
            self.fiber_mut(t, |_, ready, _| *ready = Some(reply));
            return;
        }
        // Callbacks the request raised on this thread run first; the code gets its reply
        // when they have returned.
        let depth = self.th[t].stack.len();
        if self.raise_queued().contains(&t) {
            if let Some(Activation {
                source: Source::Fiber { ready, .. },
                ..
            }) = self.th[t].stack.get_mut(depth - 1)
            {
                *ready = Some(reply);
            }
            return;
        }
        let tracing = self.tracing;
        let (yielded, holds, notes) = self.with_caller(t, callback, |run| match run.th[t].stack.last_mut() {
            Some(Activation {
                source: Source::Fiber { fiber, .. },
                ..
            }) => {
                fiber.set_tracing(tracing);
                let yielded = fiber.resume(reply);
                let holds = fiber.take_holds();
                (
                    yielded,
                    holds,
                    if tracing { fiber.take_notes() } else { Vec::new() },
                )
            }
            _ => unreachable!("the activation is still a fiber"),
        });
        for text in notes {
            self.note(t, 0, |_| text);
        }
        for (c, what) in holds {
            self.cond_holding(t, c, what);
        }
        // Rust code may have suspended or resumed the runtime.
        self.sync_parked();
        match yielded {
            Yielded::Request(req) => {
                self.note_spin(t, &req);
                self.fiber_mut(t, |pending, _, _| *pending = Some(req));
            }
            Yielded::Finished => self.pop_activation(t),
            Yielded::Panicked(message) => {
                let message = format!("profiler code on {} panicked: {message}", self.th[t].name);
                self.end(Ending::ProfilerPanic.as_str(), message, Vec::new());
            }
        }
    }

    /// Notes what thread `t`'s request says about spinning: a [`Request::Spin`] waits from
    /// this step; a [`Request::Poll`] counts the polls in a row that read one value at one
    /// address (the thread spins from [`super::SPIN_POLLS`] on); any other request ends the count.
    fn note_spin(&mut self, t: usize, req: &Request) {
        let (s, now) = (&mut self.th[t], self.steps);
        s.polled = match (req, s.polled) {
            (&Request::Poll(address, seen), Some((a, v, n, _))) if (a, v) == (address, seen) => {
                Some((a, v, n + 1, now))
            }
            (&Request::Poll(address, seen), _) => Some((address, seen, 1, now)),
            _ => None,
        };
        if let Request::Spin = req {
            s.spin_since = now;
        }
    }

    /// Edits the top fiber activation's request, reply and deadline.
    fn fiber_mut(
        &mut self,
        t: usize,
        f: impl FnOnce(&mut Option<Request>, &mut Option<Reply>, &mut Option<u64>),
    ) {
        if let Some(Activation {
            source:
                Source::Fiber {
                    pending,
                    ready,
                    deadline,
                    ..
                },
            ..
        }) = self.th[t].stack.last_mut()
        {
            f(pending, ready, deadline);
        }
    }

    /// Performs a fiber's request; `Err` when it must wait.
    fn serve(&mut self, t: usize, req: &Request) -> Result<Reply, Wait> {
        if let Some(api) = os_call_name(req) {
            if self.rt.lock().failing.call(api, Some(t)).is_some() {
                return Ok(self.failed_os_call(t, req));
            }
        }
        let reply = match req {
            // A runtime API call: a native thread's first one does the per-thread setup.
            Request::Point => {
                self.thread_setup(t)?;
                Reply::Done
            }
            Request::WalkFrame => {
                self.walk_frame = true;
                Reply::Done
            }
            Request::SafePoints => {
                if !self.unsafe_threads(t).is_empty() {
                    return Err(Wait::SafePoints);
                }
                self.stop_started(t, "the runtime");
                // `ThreadSuspend::SuspendRuntime` raises it after its wait loop.
                self.notify(t, Notification::SuspendFinished);
                Reply::Done
            }
            // Raised below, before the code goes on.
            Request::Raise => Reply::Done,
            // Decided by the chooser before the step ([`Run::decide_failure`]); a run that
            // injects nothing lets every call succeed.
            Request::Fails => Reply::Flag(false),
            Request::Allocated => {
                self.check_lock_rules(t, "allocates", 0);
                self.passes(t, LockId::HEAP)?;
                self.note(t, 0, |_| "allocation: heap lock free".into());
                Reply::Done
            }
            Request::ReaderLock => {
                self.passes(t, LockId::CODE_MANAGER)?;
                Reply::Done
            }
            Request::MaskSignals(masked) => {
                let before = self.th[t].signals_masked;
                if let Some(masked) = *masked {
                    self.th[t].signals_masked = masked;
                    let what = if masked { "mask_signals" } else { "unmask_signals" };
                    self.note(t, 0, |_| what.into());
                }
                Reply::Flag(before)
            }
            Request::SignalHandler(handler, flags) => {
                let handler = handler.clone();
                self.signal_handler = Some(crate::process::SigAction {
                    handler: Arc::new(move |_, _, context| (handler.0)(context)),
                    flags: *flags,
                });
                self.note(t, 0, |_| {
                    format!("installs the profiling signal's handler ({flags})")
                });
                Reply::Done
            }
            Request::Escape(outcome, message) => {
                let message = format!("{}: {message}", self.th[t].name);
                self.end(outcome, message, Vec::new());
                Reply::Abort
            }
            Request::Warn(outcome, message) => {
                let message = format!("{}: {message}", self.th[t].name);
                self.warn(outcome, message);
                Reply::Done
            }
            // Named objects: creating one that exists opens it (the file's locks and the
            // runtime's included), so a sampler and its callbacks share them by name.
            Request::MutexCreate(key, name) => Reply::Mutex(MutexId(self.locks.open_as(key, name).0)),
            Request::MutexLock(m) => {
                let l = LockId(m.0);
                self.check_lock_rules(t, &format!("takes lock {}", self.locks.name(l)), 0);
                self.acquire(t, l)?;
                self.note(t, 0, |run| format!("lock {}", run.locks.name(l)));
                Reply::Done
            }
            Request::MutexTryLock(m) => {
                let l = LockId(m.0);
                let taken = self.locks.can_take(t, l) && self.acquire(t, l).is_ok();
                if taken {
                    self.note(t, 0, |run| format!("lock {}", run.locks.name(l)));
                }
                Reply::Flag(taken)
            }
            Request::MutexUnlock(m) => {
                let l = LockId(m.0);
                if self.release(t, l, 0) {
                    self.note(t, 0, |run| format!("unlock {}", run.locks.name(l)));
                }
                Reply::Done
            }
            Request::CreateThread(code) => match self.create_thread(t, code) {
                Some(thread) => Reply::Thread(thread),
                None => Reply::Abort,
            },
            Request::JoinThread(id) => match self.by_os_id(*id) {
                Ok(x) if self.th[x].status == Status::Done => Reply::Unit(Ok(())),
                Ok(x) if x == t => {
                    let message = format!("{} joins itself", self.th[t].name);
                    self.end(Ending::Deadlock.as_str(), message, Vec::new());
                    Reply::Abort
                }
                Ok(x) => {
                    self.note(t, 0, |run| format!("join {}: waits for its end", run.th[x].name));
                    return Err(Wait::Join(x));
                }
                Err(e) => Reply::Unit(Err(e)),
            },
            Request::EventCreate(name) => {
                let at = self
                    .event_names
                    .iter()
                    .position(|n| n == name)
                    .unwrap_or_else(|| {
                        self.events.push(false);
                        self.event_names.push(name.clone());
                        self.events.len() - 1
                    });
                Reply::Event(EventId(at as u32))
            }
            Request::EventSet(e) => {
                self.set_event(e.0 as usize);
                Reply::Done
            }
            Request::EventReset(e) => {
                self.events[e.0 as usize] = false;
                Reply::Done
            }
            Request::EventWait(e, timeout) => {
                let set = self.events[e.0 as usize];
                self.timed_wait(t, *timeout, set, |deadline| Wait::Event(e.0, deadline))?
            }
            Request::CondOpen(key, name) => {
                let c = self.conds.iter().position(|c| c.key == *key).unwrap_or_else(|| {
                    self.conds.push(Cond {
                        key: key.clone(),
                        name: name.clone(),
                        notified: 0,
                        holders: Vec::new(),
                        any_thread_releases: false,
                    });
                    self.conds.len() - 1
                });
                Reply::Cond(c as u32, self.conds[c].notified)
            }
            Request::CondWait(c, generation, timeout) => {
                let notified = self.conds[*c as usize].notified != *generation;
                self.timed_wait(t, *timeout, notified, |deadline| {
                    Wait::Cond(*c, *generation, deadline)
                })?
            }
            Request::CondNotify(c) => {
                self.conds[*c as usize].notified += 1;
                self.note(t, 0, |run| format!("notify {}", run.conds[*c as usize].name));
                Reply::Done
            }
            Request::Sleep(d) => {
                self.round_closes(t);
                self.th[t].status = Status::Sleeping(self.now + d.as_micros() as u64);
                Reply::Done
            }
            // An atomic access: a scheduling point and nothing more.
            Request::Atomic(_) | Request::Poll(..) => Reply::Done,
            // A spin-wait: nothing can change for it until another thread writes after the
            // step that asked (the one whose read found nothing new).
            Request::Spin => {
                let since = self.th[t].spin_since;
                if self.changed_at <= since {
                    return Err(Wait::Change(since));
                }
                Reply::Done
            }
            Request::Now => Reply::Time(Duration::from_micros(self.now)),
            Request::Images => Reply::Images(self.rt.images()),
            Request::CurrentThread => Reply::Thread(self.os_thread(t)),
            Request::Threads => {
                let ids = (0..self.th.len())
                    .filter(|&x| self.os_target(x).is_ok() && self.th[x].status != Status::NotStarted)
                    .map(|x| self.os_thread(x))
                    .collect();
                Reply::Threads(ids)
            }
            Request::Suspend(id) => Reply::Count(self.by_os_id(*id).and_then(|x| self.os_suspend(t, x, 0))),
            Request::Resume(id) => Reply::Count(self.by_os_id(*id).and_then(|x| self.os_resume(t, x, 0))),
            Request::GetContext(id) => Reply::Context(Box::new(
                self.by_os_id(*id).and_then(|x| self.os_context(t, x, 0)),
            )),
            Request::Signal(id) => Reply::Unit(self.by_os_id(*id).and_then(|x| self.os_signal(t, x, 0))),
            Request::StackBounds(id) => Reply::Bounds(self.by_os_id(*id).and_then(|x| self.stack_bounds(x))),
            // Unmapped memory crashes the process: the run ends and the fiber is stopped.
            Request::ReadRaw(address) => match self.rt.read_memory(*address) {
                Some(word) => Reply::Word(Ok(word)),
                None => {
                    let message = format!("{} read unmapped memory at {address:#x}", self.th[t].name);
                    self.end(FaultKind::AccessViolation.as_str(), message, Vec::new());
                    Reply::Abort
                }
            },
            Request::ReadStack(id, address) => {
                Reply::Word(self.by_os_id(*id).and_then(|x| self.checked_read(t, x, *address)))
            }
            Request::ReadStackWords(id, address, count) => Reply::Words(
                self.by_os_id(*id)
                    .and_then(|x| self.checked_words(t, x, *address, *count)),
            ),
        };
        Ok(reply)
    }
}

/// Whether a served request changed what another thread can see (a lock, an event, a
/// condition variable, a suspension, a signal, a runtime suspension, a new thread), or ended a
/// wait because another thread did. Runtime API calls, reads, the clock, sleeps, failed
/// attempts and waits that timed out do not: a thread that only makes those observes a
/// process it leaves as it was, as a retry loop does.
fn changes(req: &Request, reply: &Reply) -> bool {
    match req {
        Request::MutexLock(_)
        | Request::MutexUnlock(_)
        | Request::CondNotify(_)
        | Request::EventSet(_)
        | Request::EventReset(_)
        | Request::CreateThread(_)
        | Request::SafePoints
        | Request::MaskSignals(_)
        | Request::Raise => true,
        Request::MutexTryLock(_) | Request::EventWait(..) | Request::CondWait(..) => {
            matches!(reply, Reply::Flag(true))
        }
        Request::Suspend(_) | Request::Resume(_) => matches!(reply, Reply::Count(Ok(_))),
        Request::JoinThread(_) | Request::Signal(_) => matches!(reply, Reply::Unit(Ok(()))),
        Request::Atomic(write) => *write,
        _ => false,
    }
}

/// An OS call's answer as the trace shows it (`ok 0`, `error: the thread has terminated`).
fn shown<T: std::fmt::Debug>(r: &Result<T, OsError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!("error: {e}"),
    }
}

/// A fiber activation that has not started.
pub(super) fn fiber_source(fiber: Fiber) -> Source {
    Source::Fiber {
        fiber,
        pending: None,
        ready: None,
        deadline: None,
    }
}

impl Run<'_> {
    /// Thread `t`'s code took or released the object condition variable `c` stands for.
    fn cond_holding(&mut self, t: usize, c: u32, what: Holding) {
        let Some(cond) = self.conds.get_mut(c as usize) else {
            return;
        };
        match what {
            Holding::Took { any_thread_releases } => {
                cond.holders.push(t);
                cond.any_thread_releases |= any_thread_releases;
            }
            Holding::Released => {
                if let Some(i) = cond.holders.iter().position(|&h| h == t) {
                    cond.holders.remove(i);
                }
            }
        }
    }

    /// A timed wait of `t`'s fiber: `Flag(true)` once `woken`, `Flag(false)` once its
    /// deadline passed (`timeout` after the wait's first attempt), else the wait `until` the
    /// deadline.
    fn timed_wait(
        &mut self,
        t: usize,
        timeout: Duration,
        woken: bool,
        until: impl FnOnce(u64) -> Wait,
    ) -> Result<Reply, Wait> {
        let now = self.now;
        let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
        if micros != u64::MAX {
            // A wait with a deadline ends a sampling round, as a sleep does.
            self.round_closes(t);
        }
        let mut deadline = 0;
        self.fiber_mut(t, |_, _, d| {
            deadline = *d.get_or_insert(now.saturating_add(micros))
        });
        if woken {
            Ok(Reply::Flag(true))
        } else if deadline <= now {
            Ok(Reply::Flag(false))
        } else {
            Err(until(deadline))
        }
    }

    /// Starts the first thread declared `start = "profiler"` not started yet, running `code`
    /// (created by `t`); `None` when none is left (the run ends `undeclared_thread`).
    pub(super) fn create_thread(&mut self, t: usize, code: &ThreadStart) -> Option<OsThread> {
        let free = (0..self.th.len()).find(|&x| self.created(x) && self.th[x].status == Status::NotStarted);
        let Some(code) = code.take() else {
            unreachable!("a thread's code is given once");
        };
        let Some(x) = free else {
            let message = format!(
                "{} created a thread, and every thread declared `start = \"profiler\"` already exists",
                self.th[t].name
            );
            self.end(Ending::UndeclaredThread.as_str(), message, Vec::new());
            return None;
        };
        self.start_created(x, code);
        self.note(t, 0, |run| format!("creates thread {}", run.th[x].name));
        Some(self.os_thread(x))
    }

    /// Starts thread `x` (declared `start = "profiler"`) on `code`.
    pub(super) fn start_created(&mut self, x: usize, code: Code) {
        let fiber = self.fiber_on(x, code);
        self.th[x].stack.push(Activation {
            source: fiber_source(fiber),
            callback: None,
            entered: None,
            signal: false,
        });
        self.th[x].status = Status::Ready;
        self.th[x].last_progress = self.now;
        self.rt.lock().threads[x].runs_code = true;
    }
}

/// A thread body on its own fiber, with the run's runtime and the OS layer.
pub(super) fn spawn_body(body: ThreadBody, rt: Arc<Runtime>, home: &mut Home) -> Fiber {
    Fiber::spawn_at(Box::new(move || body(&rt, &SimOs::new())), home)
}

/// The name of an OS thread call a `[[fail]]` rule may fail (`None` for other requests).
fn os_call_name(req: &Request) -> Option<&'static str> {
    match req {
        Request::Suspend(_) => Some("SuspendThread"),
        Request::Resume(_) => Some("ResumeThread"),
        Request::GetContext(_) => Some("GetThreadContext"),
        _ => None,
    }
}
