//! The words scenario files use for the simulator's enums: one table per enum, read by the
//! builder, quoted in its error messages, and checked against `docs/scenario-format.md` by
//! the documentation tests.

use crate::code::CodeKind;
use crate::platform::Platform;
use crate::thread::{ExceptionState, Funclet, Lifecycle, Mode, OsContext, ThreadKind};

/// `platform`.
pub const PLATFORMS: &[(&str, Platform)] = &[("windows", Platform::Windows), ("unix", Platform::Unix)];

/// `[[code]]` `kind`.
pub const CODE_KINDS: &[(&str, CodeKind)] = &[
    ("jit", CodeKind::Jit),
    ("r2r", CodeKind::ReadyToRun),
    ("il_stub", CodeKind::IlStub),
    ("lcg", CodeKind::Lcg),
    ("helper", CodeKind::Helper),
    ("stub", CodeKind::Stub),
    ("native", CodeKind::Native),
];

/// `[[threads]]` `kind`.
pub const THREAD_KINDS: &[(&str, ThreadKind)] =
    &[("managed", ThreadKind::Managed), ("native", ThreadKind::Native)];

/// `[[threads]]` `mode`.
pub const MODES: &[(&str, Mode)] = &[
    ("cooperative", Mode::Cooperative),
    ("preemptive", Mode::Preemptive),
];

/// `[[threads]]` `state` (a thread not yet started is made by `start`, not named here).
pub const LIFECYCLES: &[(&str, Lifecycle)] = &[
    ("alive", Lifecycle::Alive),
    ("destroying", Lifecycle::Destroying),
    ("dead", Lifecycle::Dead),
    ("deleted", Lifecycle::Deleted),
];

/// `[[threads]]` `exception`.
pub const EXCEPTION_STATES: &[(&str, ExceptionState)] = &[
    ("none", ExceptionState::None),
    ("first_pass", ExceptionState::FirstPass),
    ("unwinding", ExceptionState::Unwinding),
    ("unwinding_in_managed", ExceptionState::UnwindingInManaged),
    ("inconsistent", ExceptionState::Inconsistent),
];

/// `[[threads]]` `os_context`.
pub const OS_CONTEXTS: &[(&str, OsContext)] = &[
    ("ok", OsContext::Ok),
    ("debugger_filter", OsContext::DebuggerFilter),
    ("get_context_fails", OsContext::GetContextFails),
    ("in_kernel", OsContext::InKernel),
    ("exception_active", OsContext::ExceptionActive),
    ("no_exception_reporting", OsContext::NoExceptionReporting),
    ("stale", OsContext::Stale),
];

/// A frame's `funclet`.
pub const FUNCLETS: &[(&str, Funclet)] = &[
    ("catch", Funclet::Catch),
    ("finally", Funclet::Finally),
    ("filter", Funclet::Filter),
];

/// The name `value` has in `table`.
pub fn name_of<T: PartialEq>(table: &[(&'static str, T)], value: T) -> &'static str {
    table.iter().find(|(_, v)| *v == value).map_or("?", |(n, _)| n)
}
