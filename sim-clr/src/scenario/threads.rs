//! Validation of the threads: their kind, mode, lifecycle and exception state, and their
//! frames — calls, explicit Frames, funclets, IP offsets and runtime frame templates.

use super::build::{Builder, Res};
use super::model::{FrameModel, ThreadModel};
use super::names::{name_of, EXCEPTION_STATES, FUNCLETS, LIFECYCLES, MODES, OS_CONTEXTS, THREAD_KINDS};
use super::templates::{Entry, Template, TEMPLATES};
use crate::code::{CodeKind, CodeMap};
use crate::thread::{ExceptionState, FrameKind, Funclet, Mode, StackEntry, Thread, ThreadKind, STACK_SIZE};
use toml::{Spanned, Value};

impl Builder<'_> {
    /// The template `name` names.
    pub(super) fn template(&self, name: &Spanned<String>) -> Res<&'static Template> {
        Template::named(name.get_ref()).ok_or_else(|| {
            let known: Vec<&str> = TEMPLATES.iter().map(|t| t.name).collect();
            self.err(
                name.span(),
                "template",
                format!(
                    "no template named `{}` (expected one of: {})",
                    name.get_ref(),
                    known.join(", ")
                ),
            )
        })
    }

    /// A frame's IP offset: an integer that is an instruction boundary of the function, or
    /// `"entry"`, `"prologue:K"` (after K prologue instructions), `"epilogue:K"` (the K-th
    /// instruction of the first epilogue proper, from 0).
    fn frame_offset(&self, value: &Spanned<Value>, func: &crate::code::Function) -> Res<u64> {
        let machine = &func.machine;
        let err = |m: String| self.err(value.span(), "offset", m);
        let offset = match value.get_ref() {
            Value::Integer(n) => u64::try_from(*n).map_err(|_| err(format!("{n} is negative")))?,
            Value::String(s) => {
                let (place, k) = s.split_once(':').unwrap_or((s, "0"));
                let k: usize = k.parse().map_err(|_| {
                    err(format!(
                        "`{s}`: expected \"entry\", \"prologue:K\" or \"epilogue:K\""
                    ))
                })?;
                let found = match place {
                    "entry" => Some(0),
                    "prologue" if k == 0 => Some(0),
                    "prologue" => machine.code.prolog_ends.get(k - 1).copied(),
                    "epilogue" => {
                        let proper = machine.code.epilogues.first().map(|e| e.1);
                        let at = proper.and_then(|p| machine.boundaries.iter().position(|&b| b == p));
                        at.and_then(|i| machine.boundaries.get(i + k)).copied()
                    }
                    _ => None,
                };
                found.ok_or_else(|| {
                    err(format!(
                        "`{s}` is not a place in `{}` (entry, prologue:0–{}, epilogue:K)",
                        func.name,
                        machine.code.prolog_ends.len()
                    ))
                })?
            }
            _ => {
                return Err(err(
                    "expected an integer or \"entry\", \"prologue:K\", \"epilogue:K\"".into(),
                ))
            }
        };
        if machine.state(offset).is_none() {
            let sites: Vec<String> = machine.return_sites().iter().map(|s| format!("{s:#x}")).collect();
            return Err(err(format!(
                "{offset:#x} is not an instruction boundary of `{}` ({:#x} bytes of code; its return sites are {})",
                func.name,
                machine.code.code_len,
                sites.join(", ")
            )));
        }
        Ok(offset)
    }

    pub(super) fn thread(&self, m: &ThreadModel, index: usize, code: &CodeMap) -> Res<Thread> {
        let kind = match &m.kind {
            Some(k) => self.choice(k, "kind", THREAD_KINDS)?,
            None => ThreadKind::Managed,
        };
        let mut t = Thread::new(m.name.get_ref(), kind, index);
        let mut stack = Vec::new();
        for f in &m.frames {
            self.frame(f, &mut stack, code)?;
        }
        t.stack = stack.into();
        if let Some(last) = m.frames.last() {
            if matches!(t.stack.last(), Some(StackEntry::Frame(_))) {
                let field = if last.get_ref().template.is_some() {
                    "template"
                } else {
                    "frame"
                };
                return Err(self.err(
                    last.span(),
                    field,
                    "an explicit Frame lives in the call below it: the last entry must be a call",
                ));
            }
        }
        let depth = t.stack_bytes(code);
        if depth > STACK_SIZE / 2 {
            return Err(self.err(
                m.name.span(),
                "frames",
                format!(
                    "the frames need {depth:#x} bytes of stack; at most {:#x} fit",
                    STACK_SIZE / 2
                ),
            ));
        }
        let leaf_managed = t.stack.iter().find_map(|e| match e {
            StackEntry::Call { function, .. } => Some(code.function(*function).kind.is_managed()),
            StackEntry::Frame(_) => None,
        });
        t.mode = match &m.mode {
            Some(mode) => self.choice(mode, "mode", MODES)?,
            None if leaf_managed == Some(true) => Mode::Cooperative,
            None => Mode::Preemptive,
        };
        if let Some(state) = &m.state {
            t.lifecycle = self.choice(state, "state", LIFECYCLES)?;
        }
        // The leaf-most handler on the stack says which pass the exception is in.
        let handler = t.stack.iter().find_map(|e| match e {
            StackEntry::Call { funclet: Some(f), .. } => Some(*f),
            _ => None,
        });
        t.exception = match handler {
            Some(Funclet::Filter) => ExceptionState::FirstPass,
            Some(Funclet::Catch | Funclet::Finally) => ExceptionState::UnwindingInManaged,
            None => ExceptionState::None,
        };
        if let Some(e) = &m.exception {
            t.exception = self.choice(e, "exception", EXCEPTION_STATES)?;
            let possible = match (handler, t.exception) {
                (_, ExceptionState::Inconsistent) | (None, _) => true,
                (Some(Funclet::Filter), state) => state == ExceptionState::FirstPass,
                (Some(_), state) => state == ExceptionState::UnwindingInManaged,
            };
            if !possible {
                let (funclet, state) = match handler {
                    Some(Funclet::Filter) => ("filter", ExceptionState::FirstPass),
                    _ => ("catch or finally", ExceptionState::UnwindingInManaged),
                };
                let (state, inconsistent) = (
                    name_of(EXCEPTION_STATES, state),
                    name_of(EXCEPTION_STATES, ExceptionState::Inconsistent),
                );
                return Err(self.err(
                    e.span(),
                    "exception",
                    format!(
                        "the leaf-most funclet on the stack is a {funclet} handler, so the exception is in state `{state}` (or `{inconsistent}`); omit `exception` to have it derived"
                    ),
                ));
            }
        }
        if let Some(o) = &m.os_context {
            t.os_context = self.choice(o, "os_context", OS_CONTEXTS)?;
        }
        t.gc_special = m.gc_special;
        t.forbid_suspend = m.forbid_suspend;
        t.hijack_lock_held = m.hijack_lock_held;
        t.hijacked = m.hijacked;
        t.mode_race = m.mode_race;
        t.suspend_fails = m.suspend_fails;
        t.holds_writer_lock = m.holds_code_manager_lock;
        if kind == ThreadKind::Native {
            let managed = t.stack.iter().any(|e| match e {
                StackEntry::Call { function, .. } => code.function(*function).kind.is_managed(),
                StackEntry::Frame(_) => true,
            });
            if managed || m.mode.is_some() || m.hijacked {
                return Err(self.err(m.name.span(), "kind", format!(
                    "native thread `{}` never ran managed code: it can have no managed frames, explicit Frames, GC mode or hijack",
                    m.name.get_ref()
                )));
            }
        }
        Ok(t)
    }

    fn frame(&self, f: &Spanned<FrameModel>, stack: &mut Vec<StackEntry>, code: &CodeMap) -> Res<()> {
        let m = f.get_ref();
        if let Some(name) = &m.template {
            if m.function.is_some()
                || m.frame.is_some()
                || m.repeat.is_some()
                || m.offset.is_some()
                || m.funclet.is_some()
                || m.in_loop.is_some()
            {
                return Err(self.err(
                    name.span(),
                    "template",
                    "a template entry stands alone: no `fn`, `frame`, `repeat`, `offset`, `funclet` or `in_loop`",
                ));
            }
            for entry in self.template(name)?.entries(self.version) {
                stack.push(match entry {
                    Entry::Frame(kind) => StackEntry::Frame(kind),
                    Entry::CoreLib(function) | Entry::Dispatch(function) | Entry::Runtime(function) => {
                        StackEntry::Call {
                            function: code.by_name(function).ok_or_else(|| {
                                self.err(
                                    name.span(),
                                    "template",
                                    format!("`{function}` is not in the code map"),
                                )
                            })?,
                            offset: None,
                            funclet: None,
                        }
                    }
                });
            }
            return Ok(());
        }
        let repeat = match &m.repeat {
            Some(r) if !(1..=10_000).contains(r.get_ref()) => {
                return Err(self.err(r.span(), "repeat", "must be between 1 and 10000"))
            }
            Some(r) => *r.get_ref() as usize,
            None => 1,
        };
        let entry = match (&m.function, &m.frame) {
            (Some(name), None) => {
                let mut function = code.by_name(name.get_ref()).ok_or_else(|| {
                    self.err(
                        name.span(),
                        "fn",
                        format!("no function named `{}` in [[code]]", name.get_ref()),
                    )
                })?;
                if let Some(in_loop) = m.in_loop.as_ref().filter(|l| *l.get_ref()) {
                    let looping = code.function(function);
                    if looping.kind != CodeKind::Jit || looping.version_of.is_some() {
                        return Err(self.err(
                            in_loop.span(),
                            "in_loop",
                            "only a JIT-compiled method (kind = \"jit\", not one of its code versions) runs its loop in replaced code",
                        ));
                    }
                    if self.version.replaces_loops_on_stack() {
                        function = code
                            .by_name(&osr_name(name.get_ref()))
                            .expect("the OSR body of every method in a loop is declared");
                    }
                }
                let func = code.function(function);
                if !func.compiled {
                    return Err(self.err(
                        name.span(),
                        "fn",
                        format!(
                            "`{}` has no native code (compiled = false), so it cannot be on a stack",
                            func.name
                        ),
                    ));
                }
                let offset = match &m.offset {
                    Some(o) => Some(self.frame_offset(o, func)?),
                    None => None,
                };
                let funclet = match &m.funclet {
                    None => None,
                    Some(f) if func.kind.is_managed() => Some(self.choice(f, "funclet", FUNCLETS)?),
                    Some(f) => return Err(self.err(f.span(), "funclet", "only managed code has funclets")),
                };
                StackEntry::Call {
                    function,
                    offset,
                    funclet,
                }
            }
            (None, Some(kind)) => {
                if m.offset.is_some() || m.funclet.is_some() || m.in_loop.is_some() {
                    return Err(self.err(
                        f.span(),
                        "offset",
                        "an explicit Frame has no offset, funclet or in_loop",
                    ));
                }
                let known: Vec<(&str, FrameKind)> = FrameKind::ALL.iter().map(|k| (k.as_str(), *k)).collect();
                StackEntry::Frame(self.choice(kind, "frame", &known)?)
            }
            _ => {
                return Err(self.err(
                    f.span(),
                    "fn",
                    "each frame needs exactly one of `fn` (a call) or `frame` (an explicit Frame)",
                ))
            }
        };
        stack.extend(std::iter::repeat_n(entry, repeat));
        Ok(())
    }
}

/// What ends the name of an on-stack-replacement body; no declared function's name does.
pub(super) const OSR_SUFFIX: &str = " [OSR]";

/// What ends the name of a method's instrumented tier (dynamic PGO); no declared function's
/// name does.
pub(super) const INSTRUMENTED_SUFFIX: &str = " [instrumented]";

/// The name of the on-stack-replacement body of the method `name`, which frames marked
/// `in_loop` run on versions that replace loops on the stack.
pub(super) fn osr_name(name: &str) -> String {
    format!("{name}{OSR_SUFFIX}")
}
