//! Validation of `[[calls]]`: each call's API, arguments, seed, callback behaviour, nested
//! call and expectations, checked against the threads and code already built.

use super::build::{one_of, Builder, Res};
use super::model::{CallModel, NestedModel};
use super::types::*;
use crate::code::{CodeMap, FunctionIndex};
use crate::runtime::{CallContext, CallbackKind, Unload};
use crate::thread::{StackEntry, Thread};
use crate::trace::FaultKind;
use corprof::flags::{event, snapshot};
use corprof::{Context, HResult, Register};
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Range;
use toml::{Spanned, Value};

/// What a call may refer to while being validated.
pub(super) struct CallCtx<'a> {
    /// The scenario's threads.
    pub threads: &'a [Thread],
    /// Each thread's index in `threads`, by name.
    pub thread_index: &'a HashMap<&'a str, usize>,
    /// Each thread's number of declared calls.
    pub declared_calls: &'a [usize],
    /// The code map.
    pub code: &'a CodeMap,
    /// The top-level calls before this one.
    pub earlier: &'a [Call],
    /// What those calls did to threads and code.
    pub history: &'a History,
}

/// What the calls so far did to the process, for checks that depend on it: the threads that
/// exited and the code that was unloaded, kept as the calls are validated, and which threads
/// call each function (indexed once, at the first unload), so each check costs a lookup.
#[derive(Default)]
pub(super) struct History {
    exited: BTreeSet<String>,
    unloaded: BTreeSet<FunctionIndex>,
    callers: OnceCell<BTreeMap<FunctionIndex, Vec<usize>>>,
}

impl History {
    /// Notes what top-level call `call` does.
    pub fn record(&mut self, call: &Call) {
        match &call.action {
            Action::ThreadExit | Action::ThreadDelete => {
                self.exited.insert(call.caller.clone());
            }
            Action::Unload(unload) => self.unloaded.extend(unload.functions()),
            Action::Api(_) | Action::Gc => {}
        }
    }

    /// The threads (by index) whose stacks call `function`.
    fn callers(&self, threads: &[Thread], function: FunctionIndex) -> &[usize] {
        let callers = self.callers.get_or_init(|| {
            let mut map: BTreeMap<FunctionIndex, Vec<usize>> = BTreeMap::new();
            for (t, thread) in threads.iter().enumerate() {
                for entry in &thread.stack {
                    if let StackEntry::Call { function, .. } = entry {
                        let list = map.entry(*function).or_default();
                        if list.last() != Some(&t) {
                            list.push(t);
                        }
                    }
                }
            }
            map
        });
        callers.get(&function).map_or(&[], Vec::as_slice)
    }
}

const APIS: [&str; 14] = [
    "DoStackSnapshot",
    "GetFunctionFromIP",
    "GetFunctionFromIP2",
    "GetFunctionFromIP3",
    "GetCodeInfo2",
    "GetFunctionInfo",
    "GetFunctionInfo2",
    "GetCurrentThreadID",
    "SetEventMask",
    "GetEventMask",
    "InitializeCurrentThread",
    "SuspendRuntime",
    "ResumeRuntime",
    "EnumThreads",
];

impl Builder<'_> {
    /// `expect_stack`: method names of the code map, or [`NATIVE_RUN`].
    fn expect_stack(&self, m: &CallModel, code: &CodeMap) -> Res<Option<Vec<String>>> {
        let Some(stack) = &m.expect_stack else {
            return Ok(None);
        };
        if let Some(bad) = stack.get_ref().iter().find(|n| {
            *n != NATIVE_RUN
                && code
                    .by_name(n)
                    .is_none_or(|i| !code.function(i).kind.is_managed())
        }) {
            return Err(self.err(
                stack.span(),
                "expect_stack",
                format!(
                    "`{bad}` is neither a managed method of the scenario nor \"{NATIVE_RUN}\" (a native run)"
                ),
            ));
        }
        Ok(Some(stack.get_ref().clone()))
    }

    /// `nested_at` or a nested call's `at` (`field`): a callback index, an ascending array of
    /// them, or `"every"`.
    fn nested_at(&self, value: &Spanned<Value>, field: &str) -> Res<NestedAt> {
        let bad = || {
            self.err(
                value.span(),
                field,
                "expected a callback index (0-based), an array of ascending indices, or \"every\"",
            )
        };
        let index = |v: &Value| match v {
            Value::Integer(n) => usize::try_from(*n).ok(),
            _ => None,
        };
        match value.get_ref() {
            Value::String(s) if s == "every" => Ok(NestedAt::Every),
            Value::Array(items) => {
                let at: Vec<usize> = items.iter().map(index).collect::<Option<_>>().ok_or_else(bad)?;
                if at.is_empty() || !at.windows(2).all(|w| w[0] < w[1]) {
                    return Err(bad());
                }
                Ok(NestedAt::Frames(at))
            }
            v => index(v).map(|n| NestedAt::Frames(vec![n])).ok_or_else(bad),
        }
    }

    /// Validates one call, `m` at `span`; `parent` is the (thread, context) of the call a
    /// nested call is made from.
    pub(super) fn call(
        &self,
        span: Range<usize>,
        m: &CallModel,
        ctx: &CallCtx,
        parent: Option<(&str, CallContext)>,
    ) -> Res<Call> {
        let line = self.src.line(span.start);
        let thread_named = |name: &Spanned<String>, field: &str| -> Res<usize> {
            ctx.thread_index
                .get(name.get_ref().as_str())
                .copied()
                .ok_or_else(|| {
                    self.err(
                        name.span(),
                        field,
                        format!("no thread named `{}`", name.get_ref()),
                    )
                })
        };
        let (caller, context) = match parent {
            Some((thread, context)) => {
                if let Some(x) = m
                    .caller
                    .as_ref()
                    .map(|x| x.span())
                    .or(m.from.as_ref().map(|x| x.span()))
                {
                    return Err(self.err(
                        x,
                        "caller",
                        "a nested call runs on its parent's thread and context",
                    ));
                }
                (thread.to_string(), context)
            }
            None if m.event.is_some() => {
                let t = m
                    .thread
                    .as_ref()
                    .ok_or_else(|| self.err(span.clone(), "thread", "an event needs `thread`"))?;
                (
                    ctx.threads[thread_named(t, "thread")?].name.clone(),
                    CallContext::Thread,
                )
            }
            None => {
                let c = m.caller.as_ref().ok_or_else(|| {
                    self.err(span.clone(), "caller", "a call needs `caller` (a thread name)")
                })?;
                let index = thread_named(c, "caller")?;
                let context = match &m.from {
                    None => CallContext::Thread,
                    Some(f) => match f.get_ref().as_str() {
                        "thread" => CallContext::Thread,
                        "pinvoke" => CallContext::PInvoke,
                        other => CallContext::Callback(CallbackKind::parse(other).ok_or_else(|| {
                            let all: Vec<&str> = CallbackKind::ALL.iter().map(|k| k.as_str()).collect();
                            self.err(
                                f.span(),
                                "from",
                                format!(
                                    "`{other}` is not `thread`, `pinvoke` or one of {}",
                                    all.join(", ")
                                ),
                            )
                        })?),
                    },
                };
                if context != CallContext::Thread && !ctx.threads[index].is_managed() {
                    let f = m.from.as_ref().unwrap();
                    return Err(self.err(
                        f.span(),
                        "from",
                        "only a managed thread can be in a P/Invoke or a profiler callback",
                    ));
                }
                (ctx.threads[index].name.clone(), context)
            }
        };
        let action = match (&m.api, &m.event) {
            (Some(api), None) => Action::Api(self.api(api, m, ctx, &caller)?),
            (None, Some(ev)) => {
                if let Some(x) = m.caller.as_ref().or(m.from.as_ref()) {
                    return Err(self.err(
                        x.span(),
                        "caller",
                        "an event names its `thread`; `caller` and `from` do not apply",
                    ));
                }
                // `None`: an unload, whose fields say what is unloaded.
                let plain = self.choice(
                    ev,
                    "event",
                    &[
                        ("thread_exit", Some(Action::ThreadExit)),
                        ("thread_delete", Some(Action::ThreadDelete)),
                        ("gc", Some(Action::Gc)),
                        ("unload", None),
                    ],
                )?;
                match plain {
                    Some(action) => {
                        self.only(m, &["thread"], ev.get_ref())?;
                        action
                    }
                    None => {
                        self.only(m, &["thread", "function", "module"], "an unload")?;
                        Action::Unload(self.unload(m, ev, ctx)?)
                    }
                }
            }
            _ => return Err(self.err(span, "api", "each call needs exactly one of `api` or `event`")),
        };
        let expect = match &m.expect {
            Some(e) => Some(HResult::parse(e.get_ref()).ok_or_else(|| {
                self.err(e.span(), "expect", format!("`{}` is not an HRESULT", e.get_ref()))
            })?),
            None => None,
        };
        let expect_fault = match &m.expect_fault {
            Some(f) => {
                let kinds: Vec<(&str, FaultKind)> = FaultKind::ALL.iter().map(|k| (k.as_str(), *k)).collect();
                Some(self.choice(f, "expect_fault", &kinds)?)
            }
            None => None,
        };
        let mut call = Call {
            line,
            caller,
            context,
            action,
            expect,
            expect_frames: m.expect_frames.as_ref().map(|v| *v.get_ref()),
            expect_stack: self.expect_stack(m, ctx.code)?,
            expect_fault,
            note: m.note.clone(),
            case: m.case.clone(),
        };
        if let (Some(at), None) = (&m.at, parent) {
            return Err(self.err(
                at.span(),
                "at",
                "`at` says where a nested call is made; at the top level, use `nested_at` on the DoStackSnapshot",
            ));
        }
        match (&m.nested, &mut call.action) {
            (Some(nested), _) if parent.is_some() => {
                return Err(self.err(
                    nested.span(),
                    "nested",
                    "a nested call cannot make nested calls of its own",
                ));
            }
            (Some(nested), Action::Api(ApiCall::DoStackSnapshot { nested: slot, .. })) => {
                let parent = (call.caller.as_str(), call.context);
                *slot = self.nested_calls(nested, m.nested_at.as_ref(), ctx, parent)?;
            }
            _ if m.nested.is_some() || m.nested_at.is_some() => {
                return Err(self.err(
                    span,
                    "nested",
                    "only DoStackSnapshot can make a nested call (from its callback)",
                ));
            }
            _ => {}
        }
        Ok(call)
    }

    /// A `DoStackSnapshot`'s nested calls, with the callbacks each is made at: `nested_at` for
    /// a lone `[calls.nested]` table, or each call's own `at`.
    fn nested_calls(
        &self,
        nested: &Spanned<NestedModel>,
        nested_at: Option<&Spanned<Value>>,
        ctx: &CallCtx,
        parent: (&str, CallContext),
    ) -> Res<Vec<(NestedAt, Call)>> {
        let calls: Vec<(Range<usize>, &CallModel)> = match nested.get_ref() {
            NestedModel::One(c) => vec![(nested.span(), c.as_ref())],
            NestedModel::Many(calls) => calls.iter().map(|c| (c.span(), c.get_ref())).collect(),
        };
        if calls.len() > MAX_NESTED_CALLS {
            return Err(self.err(
                nested.span(),
                "nested",
                format!("more than the limit of {MAX_NESTED_CALLS} nested calls"),
            ));
        }
        let mut out = Vec::with_capacity(calls.len());
        for (span, c) in calls {
            if let Some(event) = &c.event {
                return Err(self.err(
                    event.span(),
                    "event",
                    "a nested call is an API call made from the snapshot callback; events cannot be nested",
                ));
            }
            let at =
                match (&c.at, nested_at) {
                    (Some(_), Some(both)) => return Err(self.err(
                        both.span(),
                        "nested_at",
                        "say once where a nested call is made: `nested_at` here or `at` in the nested call",
                    )),
                    (Some(at), None) => self.nested_at(at, "at")?,
                    (None, Some(at)) => self.nested_at(at, "nested_at")?,
                    (None, None) => NestedAt::Frames(vec![0]),
                };
            out.push((at, self.call(span, c, ctx, Some(parent))?));
        }
        Ok(out)
    }

    /// Rejects fields that do not apply to this kind of call.
    fn only(&self, m: &CallModel, allowed: &[&str], what: &str) -> Res<()> {
        let given: [(&str, Option<Range<usize>>); 14] = [
            ("target", m.target.as_ref().map(|v| v.span())),
            ("flags", m.flags.as_ref().map(|v| v.span())),
            ("seed", m.seed.as_ref().map(|v| v.span())),
            ("callback", m.callback.as_ref().map(|v| v.span())),
            ("ip", m.ip.as_ref().map(|v| v.span())),
            ("function", m.function.as_ref().map(|v| v.span())),
            ("module", m.module.as_ref().map(|v| v.span())),
            ("frame_info", m.frame_info.as_ref().map(|v| v.span())),
            ("mask", m.mask.as_ref().map(|v| v.span())),
            ("thread", m.thread.as_ref().map(|v| v.span())),
            ("context_size", m.context_size.as_ref().map(|v| v.span())),
            ("requested", m.requested.as_ref().map(|v| v.span())),
            ("expect_frames", m.expect_frames.as_ref().map(|v| v.span())),
            ("expect_stack", m.expect_stack.as_ref().map(|v| v.span())),
        ];
        match given
            .into_iter()
            .find(|(name, span)| span.is_some() && !allowed.contains(name))
        {
            Some((name, Some(span))) => Err(self.err(span, name, format!("does not apply to {what}"))),
            _ => Ok(()),
        }
    }

    fn api(&self, api: &Spanned<String>, m: &CallModel, ctx: &CallCtx, caller: &str) -> Res<ApiCall> {
        let name = api.get_ref().as_str();
        if !APIS.contains(&name) {
            return Err(self.err(
                api.span(),
                "api",
                format!("unknown API `{name}`; known: {}", APIS.join(", ")),
            ));
        }
        let allowed: &[&str] = match name {
            "DoStackSnapshot" => &[
                "target",
                "flags",
                "seed",
                "callback",
                "context_size",
                "expect_frames",
                "expect_stack",
            ],
            "GetFunctionFromIP" | "GetFunctionFromIP2" | "GetFunctionFromIP3" => &["ip"],
            "GetCodeInfo2" => &["function", "requested"],
            "GetFunctionInfo" => &["function"],
            "GetFunctionInfo2" => &["function", "frame_info"],
            "SetEventMask" => &["mask"],
            _ => &[],
        };
        self.only(m, allowed, name)?;
        Ok(match name {
            "DoStackSnapshot" => ApiCall::DoStackSnapshot {
                target: self.target(m.target.as_ref(), ctx, caller)?,
                flags: match &m.flags {
                    Some(f) => self.bits(f, "flags", |n| {
                        one_of(
                            n.strip_prefix("COR_PRF_SNAPSHOT_").unwrap_or(n),
                            &[
                                ("DEFAULT", snapshot::DEFAULT),
                                ("REGISTER_CONTEXT", snapshot::REGISTER_CONTEXT),
                                ("X86_OPTIMIZED", snapshot::X86_OPTIMIZED),
                            ],
                        )
                    })?,
                    None => 0,
                },
                seed: self.seed(m.seed.as_ref(), ctx)?,
                context_size: m.context_size.as_ref().map(|v| *v.get_ref()).unwrap_or(
                    if m.seed
                        .as_ref()
                        .is_some_and(|s| s.get_ref().as_str() != Some("none"))
                    {
                        Context::SIZE as u32
                    } else {
                        0
                    },
                ),
                callback: self.callback(m.callback.as_ref())?,
                nested: Vec::new(),
            },
            "GetFunctionFromIP" | "GetFunctionFromIP2" | "GetFunctionFromIP3" => ApiCall::GetFunctionFromIp {
                version: match name {
                    "GetFunctionFromIP" => 1,
                    "GetFunctionFromIP2" => 2,
                    _ => 3,
                },
                ip: self.ip(
                    m.ip.as_ref()
                        .ok_or_else(|| self.err(api.span(), "ip", format!("{name} needs `ip`")))?,
                    ctx,
                )?,
            },
            "GetCodeInfo2" => ApiCall::GetCodeInfo2 {
                function: self.function(m.function.as_ref(), api, ctx)?,
                requested: m.requested.as_ref().map_or(2, |v| *v.get_ref()),
                null_buffer: m.null_buffer,
            },
            "GetFunctionInfo" => ApiCall::GetFunctionInfo {
                function: self.function(m.function.as_ref(), api, ctx)?,
            },
            "GetFunctionInfo2" => ApiCall::GetFunctionInfo2 {
                function: self.function(m.function.as_ref(), api, ctx)?,
                frame_info: match &m.frame_info {
                    None => FrameInfoArg::None,
                    Some(f) => self.frame_info(f, ctx)?,
                },
            },
            "GetCurrentThreadID" => ApiCall::GetCurrentThreadId,
            "SetEventMask" => ApiCall::SetEventMask {
                mask: self.bits(
                    m.mask
                        .as_ref()
                        .ok_or_else(|| self.err(api.span(), "mask", "SetEventMask needs `mask`"))?,
                    "mask",
                    event::from_name,
                )?,
            },
            "GetEventMask" => ApiCall::GetEventMask,
            "InitializeCurrentThread" => ApiCall::InitializeCurrentThread,
            "SuspendRuntime" => ApiCall::SuspendRuntime,
            "ResumeRuntime" => ApiCall::ResumeRuntime,
            _ => ApiCall::EnumThreads,
        })
    }

    fn target(&self, v: Option<&Spanned<Value>>, ctx: &CallCtx, caller: &str) -> Res<Target> {
        let Some(v) = v else { return Ok(Target::Zero) };
        match v.get_ref() {
            Value::Integer(0) => Ok(Target::Zero),
            Value::Integer(n) => Ok(Target::Raw(*n as u64)),
            Value::String(s) => match s.as_str() {
                "0" => Ok(Target::Zero),
                "self" => Ok(Target::Thread(caller.to_string())),
                "bogus" => Ok(Target::Raw(1)),
                name if ctx.threads.iter().any(|t| t.name == name) => {
                    let t = ctx.threads.iter().find(|t| t.name == name).unwrap();
                    if !t.is_managed() {
                        return Err(self.err(
                            v.span(),
                            "target",
                            format!("`{name}` is a native thread: it has no ThreadID"),
                        ));
                    }
                    Ok(Target::Thread(name.to_string()))
                }
                other => Err(self.err(
                    v.span(),
                    "target",
                    format!("`{other}` is not 0, `self`, `bogus`, a number or a thread name"),
                )),
            },
            _ => Err(self.err(
                v.span(),
                "target",
                "expected 0, `self`, `bogus`, a number or a thread name",
            )),
        }
    }

    /// `GetFunctionInfo2`'s `frame_info`: `"none"`, `"frame"`, `"mismatched"`, or the record
    /// a callback of an earlier walk received (`{ call = N, callback = K }`).
    fn frame_info(&self, v: &Spanned<Value>, ctx: &CallCtx) -> Res<FrameInfoArg> {
        let span = v.span();
        match v.get_ref() {
            Value::String(s) => self.choice(
                &Spanned::new(span, s.clone()),
                "frame_info",
                &[
                    ("none", FrameInfoArg::None),
                    ("frame", FrameInfoArg::CurrentFrame),
                    ("mismatched", FrameInfoArg::Mismatched),
                ],
            ),
            Value::Table(table) => {
                let (call, callback) = self.earlier_callback(table, span, "frame_info", ctx, false)?;
                Ok(FrameInfoArg::Kept { call, callback })
            }
            _ => Err(self.err(
                span,
                "frame_info",
                "expected \"none\", \"frame\", \"mismatched\" or a table { call, callback }",
            )),
        }
    }

    /// `{ call = N, callback = K }` in field `field`: callback K (0-based) of the earlier
    /// `DoStackSnapshot` call N (1-based), which must hand its callbacks a CONTEXT when
    /// `contexts`.
    fn earlier_callback(
        &self,
        table: &toml::value::Table,
        span: Range<usize>,
        field: &str,
        ctx: &CallCtx,
        contexts: bool,
    ) -> Res<(usize, usize)> {
        let index = |key: &str, what: &str| -> Res<usize> {
            let value = table.get(key).ok_or_else(|| {
                self.err(
                    span.clone(),
                    field,
                    format!("`call` and `callback` go together: `{key}` is missing"),
                )
            })?;
            value
                .as_integer()
                .and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| {
                    self.err(
                        span.clone(),
                        &format!("{field}.{key}"),
                        format!("expected {what}"),
                    )
                })
        };
        if let Some(other) = table.keys().find(|k| !["call", "callback"].contains(&k.as_str())) {
            return Err(self.err(span, &format!("{field}.{other}"), "not `call` or `callback`"));
        }
        let call = index("call", "an earlier call's number (1-based)")?;
        let callback = index("callback", "a callback index (0-based)")?;
        self.earlier_walk(call, span, field, ctx, contexts)?;
        Ok((call, callback))
    }

    /// Checks that call `call` (1-based) is an earlier `DoStackSnapshot`, one whose callbacks
    /// get a CONTEXT when `contexts`.
    fn earlier_walk(
        &self,
        call: usize,
        span: Range<usize>,
        field: &str,
        ctx: &CallCtx,
        contexts: bool,
    ) -> Res<()> {
        let walked = call
            .checked_sub(1)
            .and_then(|i| ctx.earlier.get(i))
            .is_some_and(|c| {
                matches!(&c.action, Action::Api(ApiCall::DoStackSnapshot { flags, .. })
                    if !contexts || flags & snapshot::REGISTER_CONTEXT != 0)
            });
        if walked {
            return Ok(());
        }
        let message = if contexts {
            format!("call #{call} is not an earlier DoStackSnapshot with flags = [\"REGISTER_CONTEXT\"]: its callbacks get no CONTEXT")
        } else {
            format!("call #{call} is not an earlier DoStackSnapshot")
        };
        Err(self.err(span, &format!("{field}.call"), message))
    }

    fn seed(&self, v: Option<&Spanned<Value>>, ctx: &CallCtx) -> Res<Seed> {
        let Some(v) = v else { return Ok(Seed::None) };
        let span = v.span();
        match v.get_ref() {
            Value::String(s) if s == "none" => Ok(Seed::None),
            Value::String(s) if s == "zero" => Ok(Seed::Context {
                base: SeedBase::Zero,
                overrides: Vec::new(),
            }),
            Value::Table(table) => {
                let mut base_thread = None;
                let mut frame = None;
                let mut earlier = None;
                let mut callback = None;
                let mut overrides = Vec::new();
                let index = |value: &Value, field: &str, what: &str| {
                    value
                        .as_integer()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(|| self.err(span.clone(), field, format!("expected {what}")))
                };
                for (key, value) in table {
                    match key.as_str() {
                        "call" => earlier = Some(index(value, "seed.call", "an earlier call's number (1-based)")?),
                        "callback" => callback = Some(index(value, "seed.callback", "a callback index (0-based)")?),
                        "thread" => {
                            base_thread = Some(
                                value
                                    .as_str()
                                    .ok_or_else(|| {
                                        self.err(span.clone(), "seed.thread", "expected a thread name")
                                    })?
                                    .to_string(),
                            )
                        }
                        "frame" => {
                            frame = Some(index(value, "seed.frame", "a call index (0 = the leaf declared call)")?)
                        }
                        reg => {
                            let register = if reg == "rip" {
                                None
                            } else {
                                Some(Register::from_name(reg).ok_or_else(|| {
                                    self.err(
                                        span.clone(),
                                        &format!("seed.{reg}"),
                                        "not `thread`, `frame`, `call`, `callback` or a register name (rip, rsp, rbp, rax, …)",
                                    )
                                })?)
                            };
                            overrides.push((register, self.seed_value(value, span.clone(), reg, ctx)?));
                        }
                    }
                }
                let base = match (base_thread, frame, earlier, callback) {
                    (None, None, None, None) => SeedBase::Zero,
                    (None, None, Some(call), Some(callback)) => {
                        self.earlier_walk(call, span, "seed", ctx, true)?;
                        SeedBase::Callback { call, callback }
                    }
                    (Some(t), Some(k), None, None) => {
                        let i = ctx.thread_index.get(t.as_str()).copied().ok_or_else(|| {
                            self.err(span.clone(), "seed.thread", format!("no thread named `{t}`"))
                        })?;
                        if k >= ctx.declared_calls[i] {
                            return Err(self.err(
                                span,
                                "seed.frame",
                                format!(
                                    "thread `{t}` declares {} calls; frame {k} does not exist",
                                    ctx.declared_calls[i]
                                ),
                            ));
                        }
                        SeedBase::Frame(t, k)
                    }
                    _ => {
                        return Err(self.err(
                            span,
                            "seed",
                            "`thread` and `frame` go together, as do `call` and `callback`, and the two pairs exclude each other",
                        ))
                    }
                };
                Ok(Seed::Context { base, overrides })
            }
            _ => Err(self.err(
                span,
                "seed",
                "expected \"none\", \"zero\" or a table { thread, frame | call, callback, <register> = value }",
            )),
        }
    }

    fn seed_value(&self, v: &Value, span: Range<usize>, reg: &str, ctx: &CallCtx) -> Res<SeedValue> {
        match v {
            Value::Integer(n) => Ok(SeedValue::Raw(*n as u64)),
            Value::Table(t) => {
                let name = t.get("fn").and_then(Value::as_str).ok_or_else(|| {
                    self.err(
                        span.clone(),
                        &format!("seed.{reg}"),
                        "expected { fn = \"name\", offset = n }",
                    )
                })?;
                let field = format!("seed.{reg}");
                self.known_function(name, span.clone(), &field, ctx)?;
                Ok(SeedValue::Function(
                    name.to_string(),
                    self.offset_in(t, span, &field)?,
                ))
            }
            _ => Err(self.err(
                span,
                &format!("seed.{reg}"),
                "expected a number or { fn = \"name\", offset = n }",
            )),
        }
    }

    /// The `offset` of a `{ fn = "name", offset = n }` table: 0 when absent, never negative.
    fn offset_in(&self, t: &toml::Table, span: Range<usize>, field: &str) -> Res<u64> {
        match t.get("offset") {
            None => Ok(0),
            Some(Value::Integer(n)) => u64::try_from(*n).map_err(|_| {
                self.err(
                    span,
                    field,
                    format!("offset {n} is negative; offsets count bytes from the function's start"),
                )
            }),
            Some(_) => Err(self.err(span, field, "offset must be an integer")),
        }
    }

    /// An `unload` event: `function` names a dynamic method, `module` a collectible
    /// assembly's module. Code with a frame on the stack of a thread that has not exited, or
    /// already unloaded, cannot be.
    fn unload(&self, m: &CallModel, ev: &Spanned<String>, ctx: &CallCtx) -> Res<Unload> {
        let (unload, span, field) = match (&m.function, &m.module) {
            (Some(f), None) => {
                let name = f
                    .get_ref()
                    .as_str()
                    .ok_or_else(|| self.err(f.span(), "function", "expected the name of a dynamic method"))?;
                let unload = Unload::dynamic_method(ctx.code, name);
                (unload, f.span(), "function")
            }
            (None, Some(module)) => (
                Unload::assembly(ctx.code, module.get_ref()),
                module.span(),
                "module",
            ),
            _ => return Err(self.err(
                ev.span(),
                "function",
                "an unload names one of `function` (a dynamic method) or `module` (a collectible assembly)",
            )),
        };
        let unload = unload.map_err(|message| self.err(span.clone(), field, message))?;
        let functions = unload.functions();
        // Threads that exited earlier hold no frames any more.
        let on_stack = functions.iter().find_map(|&f| {
            (ctx.history.callers(ctx.threads, f).iter())
                .map(|&t| &ctx.threads[t])
                .find(|t| !ctx.history.exited.contains(&t.name))
                .map(|t| (t, f))
        });
        if let Some((t, f)) = on_stack {
            return Err(self.err(
                span,
                field,
                format!(
                    "`{}` has a frame on thread `{}`: code on a stack is never unloaded",
                    ctx.code.function(f).name,
                    t.name
                ),
            ));
        }
        if functions.iter().any(|f| ctx.history.unloaded.contains(f)) {
            return Err(self.err(span, field, "this code was unloaded by an earlier call"));
        }
        Ok(unload)
    }

    fn known_function(&self, name: &str, span: Range<usize>, field: &str, ctx: &CallCtx) -> Res<()> {
        match ctx.code.by_name(name) {
            Some(_) => Ok(()),
            None => Err(self.err(span, field, format!("no function named `{name}` in [[code]]"))),
        }
    }

    fn callback(&self, v: Option<&Spanned<Value>>) -> Res<CallbackBehavior> {
        let Some(v) = v else {
            return Ok(CallbackBehavior::Ok);
        };
        let span = v.span();
        match v.get_ref() {
            Value::String(s) if s == "ok" => Ok(CallbackBehavior::Ok),
            Value::String(s) if s == "null" => Ok(CallbackBehavior::Null),
            Value::Table(t) => {
                for key in t.keys() {
                    if key != "return" && key != "at" {
                        return Err(self.err(span, &format!("callback.{key}"), "expected `return` and `at`"));
                    }
                }
                let text = t.get("return").and_then(Value::as_str).ok_or_else(|| {
                    self.err(
                        span.clone(),
                        "callback.return",
                        "expected an HRESULT such as \"S_FALSE\" or \"0x80004005\"",
                    )
                })?;
                let value = HResult::parse(text).ok_or_else(|| {
                    self.err(
                        span.clone(),
                        "callback.return",
                        format!("`{text}` is not an HRESULT"),
                    )
                })?;
                let at = t
                    .get("at")
                    .map_or(Some(0), Value::as_integer)
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| self.err(span, "callback.at", "expected a callback index (0-based)"))?;
                Ok(CallbackBehavior::Return {
                    at: at as usize,
                    value,
                })
            }
            _ => Err(self.err(
                span,
                "callback",
                "expected \"ok\", \"null\" or { return = \"S_FALSE\", at = n }",
            )),
        }
    }

    fn ip(&self, v: &Spanned<Value>, ctx: &CallCtx) -> Res<IpRef> {
        match v.get_ref() {
            Value::Integer(n) => Ok(IpRef::Raw(*n as u64)),
            Value::String(s) if s == "frame" => Ok(IpRef::CurrentFrame),
            Value::Table(t) => {
                let name = t
                    .get("fn")
                    .and_then(Value::as_str)
                    .ok_or_else(|| self.err(v.span(), "ip", "expected { fn = \"name\", offset = n }"))?;
                self.known_function(name, v.span(), "ip", ctx)?;
                Ok(IpRef::Function(name.into(), self.offset_in(t, v.span(), "ip")?))
            }
            _ => Err(self.err(
                v.span(),
                "ip",
                "expected a number, \"frame\" or { fn = \"name\", offset = n }",
            )),
        }
    }

    fn function(&self, v: Option<&Spanned<Value>>, api: &Spanned<String>, ctx: &CallCtx) -> Res<FunctionRef> {
        let v = v.ok_or_else(|| {
            self.err(
                api.span(),
                "function",
                format!("{} needs `function`", api.get_ref()),
            )
        })?;
        match v.get_ref() {
            Value::Integer(n) => Ok(FunctionRef::Raw(*n as u64)),
            Value::String(s) if s == "frame" => Ok(FunctionRef::CurrentFrame),
            Value::String(s) => {
                self.known_function(s, v.span(), "function", ctx)?;
                Ok(FunctionRef::Name(s.clone()))
            }
            _ => Err(self.err(
                v.span(),
                "function",
                "expected a function name, a number or \"frame\"",
            )),
        }
    }
}
