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
use crate::thread::Thread;
use corprof::ClassId;
use toml::Spanned;

type Res<T> = Result<T, ScenarioError>;

/// What a step with several actions, or none, is told.
const ONE_ACTION: &str =
    "a step has exactly one of `call` (an export), `raise` (a callback), `gc = true` or `unload` (a module)";

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
    /// The thread calls the library's export `export`, with `arg` as its one C-string
    /// argument (or no argument): by P/Invoke from a managed thread, directly from a native
    /// one.
    Call {
        /// The exported function's name.
        export: String,
        /// Its argument, if it takes one.
        arg: Option<String>,
        /// The context it is called from.
        context: CallContext,
    },
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
    let action = match (&m.call, &m.raise, m.gc, &m.unload) {
        (Some(export), None, None, None) => HostAction::Call {
            export: export.get_ref().clone(),
            arg: m.arg.as_ref().map(|a| a.get_ref().clone()),
            context: if thread.is_managed() {
                CallContext::PInvoke
            } else {
                CallContext::Thread
            },
        },
        (None, Some(raise), None, None) => {
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
        (None, None, Some(true), None) => HostAction::Gc,
        (None, None, None, Some(module)) => HostAction::Unload(
            Unload::assembly(code, module.get_ref()).map_err(|e| src.error(module.span(), "unload", e))?,
        ),
        _ => return Err(src.error(s.span(), "steps", ONE_ACTION)),
    };
    if m.arg.is_some() && !matches!(action, HostAction::Call { .. }) {
        return Err(src.error(s.span(), "arg", "`arg` goes with `call`"));
    }
    Ok(HostStep {
        line: src.line(s.span().start),
        thread: thread.name.clone(),
        action,
    })
}
