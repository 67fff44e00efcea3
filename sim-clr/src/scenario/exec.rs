//! Runs a scenario: a fresh runtime, each call performed through [`corprof::ProfilerInfo`] on
//! its simulated thread, and a [`Report`] of what happened.

use super::report::{CallReport, EventReport, Expectations, FaultReport, FrameReport, Report, TruthEntry};
use super::types::{
    Action, ApiCall, Call, CallbackBehavior, FrameInfoArg, FunctionRef, IpRef, NestedAt, Scenario, Seed,
    SeedBase, SeedValue, Target, NATIVE_RUN,
};
use crate::runtime::snapshot::WalkStart;
use crate::runtime::{CallContext, CallbackKind, Runtime};
use crate::thread::{StackEntry, Thread};
use corprof::{CodeInfo, Context, FrameInfo, FunctionId, HResult, ProfilerInfo, SnapshotFrame, ThreadId};
use std::collections::{BTreeMap, BTreeSet};

/// The most code regions a method has (its hot and cold parts).
const MAX_CODE_REGIONS: u32 = 2;

impl Scenario {
    /// Runs the scenario on a fresh runtime. The same scenario always gives the same report.
    pub fn run(&self) -> Report {
        self.run_observing(|_, _| {})
    }

    /// Runs the scenario as [`Scenario::run`] does, calling `before(n, runtime)` just before
    /// each API call `n` (1-based) is made, on its thread, in its calling context (with the
    /// frames a P/Invoke or a callback pushed): a way to look at the process as the call
    /// finds it.
    pub fn run_observing(&self, mut before: impl FnMut(usize, &Runtime)) -> Report {
        let runtime = self.runtime();
        let captured = Captured::for_calls(&self.calls);
        let mut report = Report {
            scenario: self.name.clone(),
            description: self.description.clone(),
            platform: self.config.platform.as_str().to_string(),
            calls: Vec::new(),
            faults: Vec::new(),
            expectations: Expectations::default(),
        };
        for (i, call) in self.calls.iter().enumerate() {
            let mut record = if runtime.is_terminated() {
                let mut r = blank(call, i + 1);
                r.skipped = Some("the process was terminated (or hung) by an earlier fatal fault".into());
                r
            } else {
                self.execute(&runtime, call, i + 1, &captured, &mut before)
            };
            let faults: Vec<FaultReport> = runtime
                .take_faults()
                .into_iter()
                .map(|f| FaultReport {
                    kind: f.kind.as_str().into(),
                    message: f.message,
                    fatal: f.fatal,
                    call: i + 1,
                })
                .collect();
            if let Some(fatal) = faults.iter().find(|f| f.fatal) {
                // The real call never returns: the process is dead or hung.
                record.hresult = None;
                record.hresult_name = None;
                record.result = Some(format!("never returned ({})", fatal.kind));
            }
            check(&mut report.expectations, call, &record);
            if let Some(kind) = call.expect_fault {
                let expected = kind.as_str().to_string();
                let got = match faults.iter().find(|f| f.kind == expected) {
                    Some(f) => f.kind.clone(),
                    None if faults.is_empty() => "no fault".to_string(),
                    None => faults
                        .iter()
                        .map(|f| f.kind.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                };
                report
                    .expectations
                    .check(i + 1, call.line, "expect_fault", expected, got);
            }
            report.faults.extend(faults);
            report.calls.push(record);
        }
        report
    }

    fn execute(
        &self,
        runtime: &Runtime,
        call: &Call,
        index: usize,
        captured: &Captured,
        before: &mut impl FnMut(usize, &Runtime),
    ) -> CallReport {
        let mut record = blank(call, index);
        if let CallContext::Callback(cb) = call.context {
            let mask = runtime.event_mask();
            if mask & cb.required_mask() != cb.required_mask() {
                record.skipped = Some(format!(
                    "the runtime does not raise {} with event mask 0x{mask:08x} (needs 0x{:08x})",
                    cb.as_str(),
                    cb.required_mask()
                ));
                return record;
            }
        }
        match &call.action {
            Action::Api(api) => {
                let done = runtime.on_thread(&call.caller, call.context, |rt| {
                    before(index, rt);
                    self.perform(rt, api, None, captured, &mut record)
                });
                debug_assert!(done.is_ok(), "callers are validated");
            }
            Action::ThreadExit => {
                let cb = CallContext::Callback(CallbackKind::ThreadDestroyed);
                let exited = runtime.on_thread(&call.caller, cb, |_| ());
                debug_assert!(exited.is_ok(), "callers are validated");
                if runtime.event_mask() & CallbackKind::ThreadDestroyed.required_mask() != 0 {
                    record.events.push(EventReport {
                        kind: "ThreadDestroyed".into(),
                        on: call.caller.clone(),
                        detail: None,
                    });
                }
            }
            Action::ThreadDelete => {
                runtime.delete_thread(&call.caller);
            }
            Action::Gc => {
                runtime.collect_garbage(&call.caller);
            }
            Action::Unload(unload) => {
                let unloaded = runtime.unload(&call.caller, unload);
                debug_assert!(unloaded, "callers are validated");
            }
        }
        record
            .events
            .extend(runtime.take_events().into_iter().map(|e| EventReport {
                kind: e.kind,
                on: e.on,
                detail: e.detail,
            }));
        record
    }

    /// Performs one API call on the current thread; `frame` is the snapshot frame being
    /// reported when the call is nested in a callback.
    fn perform(
        &self,
        rt: &Runtime,
        api: &ApiCall,
        frame: Option<&SnapshotFrame<'_>>,
        captured: &Captured,
        record: &mut CallReport,
    ) {
        let hr = match api {
            ApiCall::DoStackSnapshot {
                target,
                flags,
                seed,
                context_size,
                callback,
                nested,
            } => {
                let caller = record.caller.clone();
                let (id, truth_thread) = match target {
                    Target::Zero => (ThreadId::NULL, rt.thread(&caller).filter(|t| t.is_managed())),
                    Target::Thread(name) => {
                        let t = rt.thread(name);
                        (t.as_ref().map_or(ThreadId::NULL, |t| t.id), t)
                    }
                    Target::Raw(v) => (ThreadId(*v), None),
                };
                record.target = Some(match target {
                    Target::Zero => "0".into(),
                    Target::Thread(name) => name.clone(),
                    Target::Raw(v) => format!("0x{v:x}"),
                });
                record.ground_truth = truth_thread.as_ref().map(|t| {
                    let addresses = t.entry_addresses();
                    rt.with_code(|code| {
                        t.stack
                            .iter()
                            .zip(addresses)
                            .map(|(e, address)| match *e {
                                StackEntry::Call { function, .. } => {
                                    let f = code.function(function);
                                    TruthEntry {
                                        kind: "call",
                                        name: f.name.clone(),
                                        code: Some(f.kind.as_str()),
                                        address: format!("0x{address:x}"),
                                    }
                                }
                                StackEntry::Frame(kind) => TruthEntry {
                                    kind: "frame",
                                    name: kind.as_str().into(),
                                    code: None,
                                    address: format!("0x{address:x}"),
                                },
                            })
                            .collect()
                    })
                });
                let seed = match self.seed_context(rt, seed, captured) {
                    Ok(seed) => seed,
                    Err(why) => {
                        record.skipped = Some(why);
                        return;
                    }
                };
                // This walk's CONTEXTs, when a later call seeds from them (top-level calls
                // only: nested ones share their parent's number).
                let keep = if frame.is_none() {
                    captured.wanted(record.index)
                } else {
                    None
                };
                let mut kept = BTreeMap::new();
                let mut frames = Vec::new();
                let mut nested_records = Vec::new();
                let mut index = 0;
                let mut cb = |f: &SnapshotFrame<'_>| -> HResult {
                    frames.push(FrameReport {
                        function: (!f.func_id.is_null()).then(|| function_name(rt, f.func_id)),
                        method: metadata_name(rt, f.func_id),
                        func_id: format!("0x{:x}", f.func_id.0),
                        ip: format!("0x{:x}", f.ip),
                        context_size: f.context_size(),
                        truth_span: None,
                    });
                    if keep.is_some_and(|named| named.contains(&index)) {
                        kept.insert(index, (f.context.and_then(Context::from_bytes), *f.frame_info));
                    }
                    for (j, (_, call)) in nested
                        .iter()
                        .enumerate()
                        .filter(|(_, (at, _))| at.includes(index))
                    {
                        let mut inner = blank(call, record.index);
                        (inner.callback, inner.nested_call) = (Some(index), Some(j));
                        if let Action::Api(api) = &call.action {
                            self.perform(rt, api, Some(f), captured, &mut inner);
                        }
                        nested_records.push(inner);
                    }
                    let hr = match callback {
                        CallbackBehavior::Return { at, value } if *at == index => *value,
                        _ => HResult::S_OK,
                    };
                    index += 1;
                    hr
                };
                let callback_arg: Option<&mut corprof::StackSnapshotCallback<'_>> =
                    if *callback == CallbackBehavior::Null {
                        None
                    } else {
                        Some(&mut cb)
                    };
                let hr = rt.do_stack_snapshot(id, callback_arg, *flags, seed.as_ref(), *context_size);
                if let (Some(thread), Some(truth)) = (&truth_thread, &record.ground_truth) {
                    let start = rt.lock().last_walk_start;
                    record.walk_start = start.and_then(|s| start_entry(thread, s));
                    align(&mut frames, truth, record.walk_start.unwrap_or(0));
                }
                if keep.is_some() {
                    captured.keep(record.index, frames.len(), kept);
                }
                record.frames = Some(frames);
                record.nested = nested_records;
                hr
            }
            ApiCall::GetFunctionFromIp { version, ip } => {
                let ip = match ip {
                    IpRef::Raw(v) => *v,
                    IpRef::Function(name, off) => address_of(rt, name) + off,
                    IpRef::CurrentFrame => frame.map_or(0, |f| f.ip),
                };
                let result = match version {
                    1 => rt.get_function_from_ip(ip).map(|f| (f, None)),
                    2 => rt.get_function_from_ip2(ip).map(|(f, r)| (f, Some(r))),
                    _ => rt.get_function_from_ip3(ip).map(|(f, r)| (f, Some(r))),
                };
                settle(
                    record,
                    result.map(|(f, rejit)| {
                        let rejit = rejit.map(|r| format!(", ReJITID {}", r.0)).unwrap_or_default();
                        format!(
                            "FunctionID 0x{:x} ({}){rejit} for ip 0x{ip:x}",
                            f.0,
                            function_name(rt, f)
                        )
                    }),
                )
            }
            ApiCall::GetCodeInfo2 {
                function,
                requested,
                null_buffer,
            } => {
                let id = resolve_function(rt, function, frame);
                // The buffer the profiler passes holds `requested` entries; no method has more
                // than its hot and cold regions, so entries past those are never written.
                let mut buffer = vec![CodeInfo::default(); (*requested).min(MAX_CODE_REGIONS) as usize];
                let out = if *null_buffer { None } else { Some(&mut buffer[..]) };
                let result = rt.get_code_info2(id, *requested, out);
                settle(
                    record,
                    result.map(|total| {
                        let shown: Vec<String> = buffer
                            .iter()
                            .take(total as usize)
                            .map(|c| format!("0x{:x}+0x{:x}", c.start_address, c.size))
                            .collect();
                        format!("{total} region(s): [{}]", shown.join(", "))
                    }),
                )
            }
            ApiCall::GetFunctionInfo { function } => {
                let id = resolve_function(rt, function, frame);
                settle(record, rt.get_function_info(id).map(|i| describe_info(&i)))
            }
            ApiCall::GetFunctionInfo2 { function, frame_info } => {
                let id = resolve_function(rt, function, frame);
                let result = match frame_info {
                    FrameInfoArg::None => rt.get_function_info2(id, None),
                    FrameInfoArg::CurrentFrame => rt.get_function_info2(id, frame.map(|f| f.frame_info)),
                    // A valid record of another function: live for the call.
                    FrameInfoArg::Mismatched => {
                        let mismatched = FrameInfo::for_snapshot(FunctionId(id.0 ^ 0x40), 0);
                        crate::runtime::snapshot::live::during(&mismatched, || {
                            rt.get_function_info2(id, Some(&mismatched))
                        })
                    }
                    // The record as the profiler kept it, its walk over: read where it was.
                    FrameInfoArg::Kept { call, callback } => match captured.callback(*call, *callback) {
                        Ok((_, kept)) => rt.get_function_info2(id, Some(&kept)),
                        Err(why) => {
                            record.skipped = Some(format!("no frame info: {why}"));
                            return;
                        }
                    },
                };
                settle(record, result.map(|i| describe_info(&i)))
            }
            ApiCall::GetCurrentThreadId => settle(
                record,
                rt.get_current_thread_id()
                    .map(|t| format!("ThreadID 0x{:x} ({})", t.0, thread_name(rt, t))),
            ),
            ApiCall::SetEventMask { mask } => rt.set_event_mask(*mask),
            ApiCall::GetEventMask => settle(record, rt.get_event_mask().map(|m| format!("0x{m:08x}"))),
            ApiCall::InitializeCurrentThread => rt.initialize_current_thread(),
            ApiCall::SuspendRuntime => rt.suspend_runtime(),
            ApiCall::ResumeRuntime => rt.resume_runtime(),
            ApiCall::EnumThreads => settle(
                record,
                rt.enum_threads().map(|ids| {
                    let names: Vec<String> = ids.iter().map(|t| thread_name(rt, *t)).collect();
                    format!("[{}]", names.join(", "))
                }),
            ),
        };
        record.hresult = Some(format!("0x{:08X}", hr.0));
        record.hresult_name = hr.name().map(str::to_string);
    }

    /// Builds the seed CONTEXT: zeroed, from a declared call of a thread (as laid out now), or
    /// from an earlier walk's callback, then with the scenario's register overrides; an error
    /// says why it cannot (the earlier walk did not reach that callback).
    fn seed_context(
        &self,
        rt: &Runtime,
        seed: &Seed,
        captured: &Captured,
    ) -> Result<Option<Context>, String> {
        let Seed::Context { base, overrides } = seed else {
            return Ok(None);
        };
        let mut context = match base {
            SeedBase::Zero => Context::zeroed(),
            SeedBase::Frame(name, k) => {
                let (Some(t), Some(index)) =
                    (rt.thread(name), self.threads.iter().position(|x| &x.name == name))
                else {
                    return Ok(None);
                };
                let calls = t.layout.calls.len();
                let call = (calls + k).checked_sub(self.declared_calls[index]);
                match call.filter(|&c| c < calls) {
                    Some(c) => t.call_context(c),
                    None => Context::zeroed(),
                }
            }
            SeedBase::Callback { call, callback } => captured.context(*call, *callback)?,
        };
        for (register, value) in overrides {
            let v = match value {
                SeedValue::Raw(v) => *v,
                SeedValue::Function(name, off) => address_of(rt, name) + off,
            };
            match register {
                Some(r) => context.set(*r, v),
                None => context.rip = v,
            }
        }
        Ok(Some(context))
    }
}

/// What earlier walks handed their callbacks, for the later calls that use it: the CONTEXTs
/// seeds take (`seed = { call, callback }`) and the frame infos `GetFunctionInfo2` is given
/// after the walk ended (`frame_info = { call, callback }`). Only the callbacks such a call
/// names are kept, so a chain of walks each seeded from the one before keeps one CONTEXT per
/// walk, not one per frame.
struct Captured {
    /// Call number → its walk.
    walks: std::cell::RefCell<BTreeMap<usize, Walked>>,
    /// Call number → the callbacks later calls name.
    wanted: BTreeMap<usize, BTreeSet<usize>>,
}

/// What one snapshot callback received: its CONTEXT (`None` when it got none) and its frame
/// info.
type Kept = (Option<Context>, FrameInfo);

/// An earlier walk: how many callbacks it made, and what each one a later call names received.
type Walked = (usize, BTreeMap<usize, Kept>);

impl Captured {
    /// Ready for the walks that `calls` (and their nested calls) name.
    fn for_calls(calls: &[Call]) -> Captured {
        fn named(call: &Call, out: &mut BTreeMap<usize, BTreeSet<usize>>) {
            match &call.action {
                Action::Api(ApiCall::DoStackSnapshot { seed, nested, .. }) => {
                    if let Seed::Context {
                        base: SeedBase::Callback { call, callback },
                        ..
                    } = seed
                    {
                        out.entry(*call).or_default().insert(*callback);
                    }
                    for (_, inner) in nested {
                        named(inner, out);
                    }
                }
                Action::Api(ApiCall::GetFunctionInfo2 {
                    frame_info: FrameInfoArg::Kept { call, callback },
                    ..
                }) => {
                    out.entry(*call).or_default().insert(*callback);
                }
                _ => {}
            }
        }
        let mut wanted = BTreeMap::new();
        for call in calls {
            named(call, &mut wanted);
        }
        Captured {
            walks: Default::default(),
            wanted,
        }
    }

    /// The callbacks of call `index`'s walk that later calls name, if any.
    fn wanted(&self, index: usize) -> Option<&BTreeSet<usize>> {
        self.wanted.get(&index)
    }

    fn keep(&self, index: usize, callbacks: usize, kept: BTreeMap<usize, Kept>) {
        self.walks.borrow_mut().insert(index, (callbacks, kept));
    }

    /// What callback `callback` of call `call` received, or why there is nothing.
    fn callback(&self, call: usize, callback: usize) -> Result<Kept, String> {
        let walks = self.walks.borrow();
        let Some((made, kept)) = walks.get(&call) else {
            return Err(format!("call #{call} did not walk"));
        };
        kept.get(&callback)
            .cloned()
            .ok_or_else(|| format!("call #{call} made {made} callback(s), not callback {callback}"))
    }

    /// The CONTEXT callback `callback` of call `call` received, or why there is none.
    fn context(&self, call: usize, callback: usize) -> Result<Context, String> {
        match self.callback(call, callback) {
            Ok((Some(context), _)) => Ok(context),
            Ok((None, _)) => Err(format!(
                "no seed: callback {callback} of call #{call} got no CONTEXT"
            )),
            Err(why) => Err(format!("no seed: {why}")),
        }
    }
}

fn blank(call: &Call, index: usize) -> CallReport {
    CallReport {
        index,
        line: call.line,
        api: match &call.action {
            Action::Api(api) => api_name(api).into(),
            Action::ThreadExit => "event:thread_exit".into(),
            Action::ThreadDelete => "event:thread_delete".into(),
            Action::Gc => "event:gc".into(),
            Action::Unload(_) => "event:unload".into(),
        },
        caller: call.caller.clone(),
        from: match call.context {
            CallContext::Thread => "thread".into(),
            CallContext::PInvoke => "pinvoke".into(),
            CallContext::Callback(cb) => cb.as_str().into(),
        },
        target: None,
        hresult: None,
        hresult_name: None,
        result: None,
        frames: None,
        ground_truth: None,
        walk_start: None,
        events: Vec::new(),
        nested: Vec::new(),
        callback: None,
        nested_call: None,
        skipped: None,
        note: call.note.clone(),
        case: call.case.clone(),
    }
}

/// The ground-truth entry where a walk started: the call its seed is in, or the Frame it
/// started from; `None` for a seed that is no call on the thread's stack.
fn start_entry(thread: &Thread, start: WalkStart) -> Option<usize> {
    match start {
        WalkStart::Frame { entry } => Some(entry),
        WalkStart::Seed { rip, rsp } => {
            let calls = &thread.layout.calls;
            calls
                .iter()
                .find(|c| c.rip == rip && c.rsp == rsp)
                .or_else(|| calls.iter().find(|c| c.rip == rip))
                .map(|c| thread.stack.index_of(c.depth))
        }
    }
}

/// Sets each reported frame's `truth_span`: the ground-truth call whose IP it reports, found
/// leaf to root from `from`, and for a `funcId == 0` marker every entry down to the next
/// reported frame's (the native run it stands for, with any Frames inside it).
fn align(frames: &mut [FrameReport], truth: &[TruthEntry], from: usize) {
    let mut cursor = from;
    let mut found: Vec<Option<usize>> = Vec::with_capacity(frames.len());
    for f in frames.iter() {
        let at = (cursor..truth.len()).find(|&j| truth[j].kind == "call" && truth[j].address == f.ip);
        if let Some(j) = at {
            cursor = j + 1;
        }
        found.push(at);
    }
    for i in 0..frames.len() {
        let Some(first) = found[i] else { continue };
        let last = if frames[i].function.is_some() {
            first
        } else {
            found[i + 1..]
                .iter()
                .flatten()
                .next()
                .map_or(truth.len() - 1, |&next| next - 1)
        };
        frames[i].truth_span = Some([first, last]);
    }
}

fn api_name(api: &ApiCall) -> &'static str {
    match api {
        ApiCall::DoStackSnapshot { .. } => "DoStackSnapshot",
        ApiCall::GetFunctionFromIp { version: 1, .. } => "GetFunctionFromIP",
        ApiCall::GetFunctionFromIp { version: 2, .. } => "GetFunctionFromIP2",
        ApiCall::GetFunctionFromIp { .. } => "GetFunctionFromIP3",
        ApiCall::GetCodeInfo2 { .. } => "GetCodeInfo2",
        ApiCall::GetFunctionInfo { .. } => "GetFunctionInfo",
        ApiCall::GetFunctionInfo2 { .. } => "GetFunctionInfo2",
        ApiCall::GetCurrentThreadId => "GetCurrentThreadID",
        ApiCall::SetEventMask { .. } => "SetEventMask",
        ApiCall::GetEventMask => "GetEventMask",
        ApiCall::InitializeCurrentThread => "InitializeCurrentThread",
        ApiCall::SuspendRuntime => "SuspendRuntime",
        ApiCall::ResumeRuntime => "ResumeRuntime",
        ApiCall::EnumThreads => "EnumThreads",
    }
}

/// Records a successful result and returns the HRESULT of a `Result`-returning API.
fn settle(record: &mut CallReport, result: Result<String, HResult>) -> HResult {
    match result {
        Ok(text) => {
            record.result = Some(text);
            HResult::S_OK
        }
        Err(hr) => hr,
    }
}

/// Checks a call's `expect` and `expect_frames`, and those of each run of its nested calls.
/// A nested call that did not run at every callback it names (the walk did not reach them),
/// or never ran at all, is a failed expectation.
fn check(expectations: &mut Expectations, call: &Call, record: &CallReport) {
    if let Action::Api(ApiCall::DoStackSnapshot { nested, .. }) = &call.action {
        for (j, (at, inner)) in nested.iter().enumerate() {
            let runs: Vec<&CallReport> = record
                .nested
                .iter()
                .filter(|r| r.nested_call == Some(j))
                .collect();
            for inner_record in &runs {
                check(expectations, inner, inner_record);
            }
            let reported = record.frames.as_ref().map_or(0, Vec::len);
            let expected = match at {
                NestedAt::Frames(at) if at.len() != runs.len() => {
                    let at: Vec<String> = at.iter().map(usize::to_string).collect();
                    Some(format!("a walk reaching frame {}", at.join(", ")))
                }
                NestedAt::Every if runs.is_empty() => Some("a walk reaching a frame".to_string()),
                _ => None,
            };
            if let Some(expected) = expected {
                // The nested call (its own line) did not run where the file says.
                expectations.check(
                    record.index,
                    inner.line,
                    "nested_at",
                    expected,
                    format!("a walk of {reported} frame(s)"),
                );
            }
        }
    }
    // A skipped call got nothing: every expectation on it fails, even one of no frames. (A call
    // that never returned, a walk that crashed, reported the frames it reached.)
    let not_run = record
        .skipped
        .as_ref()
        .map(|why| format!("nothing (skipped: {why})"));
    if let Some(expected) = call.expect {
        let got = match (&record.hresult, &record.hresult_name, &not_run) {
            (Some(hr), Some(name), _) => format!("{hr} {name}"),
            (Some(hr), None, _) => hr.clone(),
            (None, _, Some(nothing)) => nothing.clone(),
            (None, _, None) => "nothing (the call never returned)".into(),
        };
        expectations.check(record.index, call.line, "expect", expected.to_string(), got);
    }
    if let Some(expected) = &call.expect_stack {
        let got = not_run.clone().unwrap_or_else(|| {
            let names: Vec<&str> = record
                .frames
                .iter()
                .flatten()
                .map(|f| f.function.as_deref().unwrap_or(NATIVE_RUN))
                .collect();
            format!("[{}]", names.join(", "))
        });
        expectations.check(
            record.index,
            call.line,
            "expect_stack",
            format!("[{}]", expected.join(", ")),
            got,
        );
    }
    if let Some(expected) = call.expect_frames {
        let got = not_run
            .clone()
            .unwrap_or_else(|| record.frames.as_ref().map_or(0, Vec::len).to_string());
        expectations.check(
            record.index,
            call.line,
            "expect_frames",
            expected.to_string(),
            got,
        );
    }
}

fn address_of(rt: &Runtime, name: &str) -> u64 {
    rt.with_code(|code| code.by_name(name).map_or(0, |i| code.function(i).start))
}

fn resolve_function(rt: &Runtime, function: &FunctionRef, frame: Option<&SnapshotFrame<'_>>) -> FunctionId {
    match function {
        FunctionRef::Name(name) => rt.with_code(|code| {
            code.by_name(name)
                .map_or(FunctionId::NULL, |i| code.function(i).function_id)
        }),
        FunctionRef::Raw(v) => FunctionId(*v),
        FunctionRef::CurrentFrame => frame.map_or(FunctionId::NULL, |f| f.func_id),
    }
}

fn function_name(rt: &Runtime, id: FunctionId) -> String {
    rt.with_code(|code| {
        code.by_function_id(id).map_or_else(
            || format!("<unknown 0x{:x}>", id.0),
            |i| code.function(i).name.clone(),
        )
    })
}

/// The metadata name (`Class::Method`) of a method declared with a `method` other than its
/// own name.
fn metadata_name(rt: &Runtime, id: FunctionId) -> Option<String> {
    rt.with_code(|code| {
        let function = code.function(code.by_function_id(id)?);
        let name = code.metadata().method_name(function.class_id, function.token)?;
        (name != function.name).then_some(name)
    })
}

fn thread_name(rt: &Runtime, id: ThreadId) -> String {
    rt.lock().name_of(id)
}

fn describe_info(info: &corprof::FunctionInfo) -> String {
    format!(
        "class 0x{:x}, module 0x{:x}, token 0x{:08x}",
        info.class_id.0, info.module_id.0, info.token
    )
}
