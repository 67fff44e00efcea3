//! The `[host]` table of a scenario file: how the program drives a hosted native profiler
//! library — which of its exports managed code calls by P/Invoke, and which callbacks the
//! runtime raises into it, on which thread, in order — and the environment the library is
//! loaded with.
//!
//! The steps are validated here (threads, callbacks and classes exist); running them needs
//! the library loaded, which is the `simclr-host` crate's work.

use super::error::{ScenarioError, Source};
use super::model::{HostModel, HostStepModel};
use crate::code::CodeMap;
use crate::runtime::{CallContext, CallbackKind, Unload};
use crate::spec::program::{ExportArg, MAX_EXPORT_ARGS};
use crate::thread::Thread;
use corprof::ClassId;
use toml::{Spanned, Value};

type Res<T> = Result<T, ScenarioError>;

/// What a step with several actions, or none, is told.
const ONE_ACTION: &str = "a step has exactly one of `call` (an export), `raise` (a callback), `gc = true`, `unload` (a module) or `sleep_ms`";

/// The longest `sleep_ms`.
pub const MAX_SLEEP_MS: u64 = 60_000;

/// The most `[[host.steps]]` a file may have.
pub const MAX_HOST_STEPS: usize = 10_000;

/// How a program drives a hosted library.
#[derive(Clone, Debug, Default)]
pub struct HostSpec {
    /// Environment variables set before the library is loaded, in file order.
    pub env: Vec<(String, String)>,
    /// The steps, in order.
    pub steps: Vec<HostStep>,
}

/// One step of a program driving a hosted library.
#[derive(Clone, Debug)]
pub struct HostStep {
    /// Line of the step's table.
    pub line: usize,
    /// The simulated thread it happens on.
    pub thread: String,
    /// What happens.
    pub action: HostAction,
}

/// What a step does.
#[derive(Clone, Debug)]
pub enum HostAction {
    /// The thread calls the library's export `export` with `args` (as a C function of as many
    /// 64-bit integer or pointer parameters): by P/Invoke from a managed thread, directly
    /// from a native one. With `expect`, the integer it returns must be that.
    Call {
        /// The exported function's name.
        export: String,
        /// Its arguments, in order.
        args: Vec<ExportArg>,
        /// The value it must return, if the file says.
        expect: Option<i64>,
        /// The context it is called from.
        context: CallContext,
    },
    /// Time passes for the library's own threads (real time: in a frozen run they are OS
    /// threads of their own); the program does nothing meanwhile.
    Sleep(std::time::Duration),
    /// The runtime raises `callback` into the library on the thread; for `ObjectAllocated`,
    /// the object's class.
    Raise {
        /// The callback.
        callback: CallbackKind,
        /// The allocated object's class (`ObjectAllocated` only; null when not given).
        class: ClassId,
    },
    /// The thread starts a garbage collection (`GC.Collect()`).
    Gc,
    /// The thread unloads a collectible assembly (`AssemblyLoadContext.Unload` and the
    /// collections that free it).
    Unload(Unload),
}

/// The arguments of a call step: `arg` (one string) or `args` (integers, booleans, strings).
fn export_args(src: &Source<'_>, m: &HostStepModel) -> Res<Vec<ExportArg>> {
    let string = |text: &str, span: std::ops::Range<usize>, field: &str| {
        if text.contains('\0') {
            return Err(src.error(span, field, "a string argument holds a NUL byte"));
        }
        Ok(ExportArg::Str(text.to_string()))
    };
    match (&m.arg, &m.args) {
        (Some(_), Some(args)) => Err(src.error(args.span(), "args", "give `arg` or `args`, not both")),
        (Some(arg), None) => Ok(vec![string(arg.get_ref(), arg.span(), "arg")?]),
        (None, None) => Ok(Vec::new()),
        (None, Some(args)) => {
            if args.get_ref().len() > MAX_EXPORT_ARGS {
                return Err(src.error(
                    args.span(),
                    "args",
                    format!("an export takes at most {MAX_EXPORT_ARGS} arguments here"),
                ));
            }
            args.get_ref()
                .iter()
                .map(|v| match v {
                    Value::Integer(n) => Ok(ExportArg::Int(*n)),
                    Value::Boolean(b) => Ok(ExportArg::Int(i64::from(*b))),
                    Value::String(text) => string(text, args.span(), "args"),
                    other => Err(src.error(
                        args.span(),
                        "args",
                        format!("a {} is not an integer, a boolean or a string", other.type_str()),
                    )),
                })
                .collect()
        }
    }
}

/// Validates the `[host]` table.
pub(super) fn host_spec(
    src: &Source<'_>,
    m: Option<&HostModel>,
    threads: &[Thread],
    code: &CodeMap,
) -> Res<HostSpec> {
    let Some(m) = m else {
        return Ok(HostSpec::default());
    };
    if let Some(extra) = m.steps.get(MAX_HOST_STEPS) {
        return Err(src.error(
            extra.span(),
            "steps",
            format!("more than the limit of {MAX_HOST_STEPS} [[host.steps]] tables"),
        ));
    }
    let env = m.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    let steps = m
        .steps
        .iter()
        .map(|s| step(src, s, threads, code))
        .collect::<Res<_>>()?;
    Ok(HostSpec { env, steps })
}

fn step(src: &Source<'_>, s: &Spanned<HostStepModel>, threads: &[Thread], code: &CodeMap) -> Res<HostStep> {
    let m = s.get_ref();
    let thread = threads
        .iter()
        .find(|t| t.name == *m.thread.get_ref())
        .ok_or_else(|| {
            src.error(
                m.thread.span(),
                "thread",
                format!("no thread named `{}`", m.thread.get_ref()),
            )
        })?;
    let action = match (&m.call, &m.raise, m.gc, &m.unload, &m.sleep_ms) {
        (Some(export), None, None, None, None) => HostAction::Call {
            export: export.get_ref().clone(),
            args: export_args(src, m)?,
            expect: m.expect.as_ref().map(|e| *e.get_ref()),
            context: if thread.is_managed() {
                CallContext::PInvoke
            } else {
                CallContext::Thread
            },
        },
        (None, None, None, None, Some(ms)) => {
            if !(1..=MAX_SLEEP_MS).contains(ms.get_ref()) {
                return Err(src.error(
                    ms.span(),
                    "sleep_ms",
                    format!("must be between 1 and {MAX_SLEEP_MS}"),
                ));
            }
            HostAction::Sleep(std::time::Duration::from_millis(*ms.get_ref()))
        }
        (None, Some(raise), None, None, None) => {
            let callback = CallbackKind::parse(raise.get_ref())
                .filter(|&k| k != CallbackKind::FunctionEnter)
                .ok_or_else(|| {
                    src.error(
                        raise.span(),
                        "raise",
                        format!("`{}` is not a callback the runtime raises", raise.get_ref()),
                    )
                })?;
            if !thread.is_managed() {
                return Err(src.error(
                    m.thread.span(),
                    "thread",
                    "callbacks are raised on managed threads",
                ));
            }
            let class = match &m.class {
                None => ClassId::NULL,
                Some(c) if callback == CallbackKind::ObjectAllocated => {
                    code.metadata().class_named(c.get_ref()).ok_or_else(|| {
                        src.error(
                            c.span(),
                            "class",
                            format!("no method of the scenario declares class `{}`", c.get_ref()),
                        )
                    })?
                }
                Some(c) => {
                    return Err(src.error(c.span(), "class", "only an ObjectAllocated step names a class"))
                }
            };
            HostAction::Raise { callback, class }
        }
        (None, None, Some(true), None, None) => HostAction::Gc,
        (None, None, None, Some(module), None) => HostAction::Unload(
            Unload::assembly(code, module.get_ref()).map_err(|e| src.error(module.span(), "unload", e))?,
        ),
        _ => return Err(src.error(s.span(), "steps", ONE_ACTION)),
    };
    if !matches!(action, HostAction::Call { .. }) {
        for (given, field) in [
            (m.arg.is_some(), "arg"),
            (m.args.is_some(), "args"),
            (m.expect.is_some(), "expect"),
        ] {
            if given {
                return Err(src.error(s.span(), field, format!("`{field}` goes with `call`")));
            }
        }
    }
    Ok(HostStep {
        line: src.line(s.span().start),
        thread: thread.name.clone(),
        action,
    })
}
