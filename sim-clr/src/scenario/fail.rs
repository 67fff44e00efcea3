//! The `[[fail]]` tables of a scenario file: `ICorProfilerInfo` calls made to fail on demand
//! ([`FailRule`]), each field checked at its line.

use super::error::{ScenarioError, Source};
use super::model::FailModel;
use crate::runtime::{FailRule, FAILABLE_APIS};
use crate::thread::Thread;
use corprof::HResult;
use toml::Spanned;

type Res<T> = Result<T, ScenarioError>;

/// The most `[[fail]]` tables a file may have.
pub const MAX_FAIL_RULES: usize = 256;
/// The most call numbers one rule may list.
pub const MAX_FAILED_CALLS: usize = 1024;
/// The highest call number.
const MAX_CALL: u64 = 1 << 24;

/// The rules of `models`, in file order; `threads` are the file's threads.
pub(super) fn fail_rules(
    src: &Source<'_>,
    models: &[Spanned<FailModel>],
    threads: &[Thread],
) -> Res<Vec<FailRule>> {
    if let Some(extra) = models.get(MAX_FAIL_RULES) {
        return Err(src.error(
            extra.span(),
            "fail",
            format!("a file has at most {MAX_FAIL_RULES} `[[fail]]` tables"),
        ));
    }
    models.iter().map(|m| rule(src, m.get_ref(), threads)).collect()
}

/// One rule.
fn rule(src: &Source<'_>, m: &FailModel, threads: &[Thread]) -> Res<FailRule> {
    let api = FAILABLE_APIS
        .iter()
        .find(|a| **a == m.api.get_ref().as_str())
        .ok_or_else(|| {
            src.error(
                m.api.span(),
                "api",
                format!(
                    "`{}` is not an ICorProfilerInfo method the runtime answers ({})",
                    m.api.get_ref(),
                    FAILABLE_APIS.join(", ")
                ),
            )
        })?;
    let calls = match &m.calls {
        None => None,
        Some(calls) => {
            let list = calls.get_ref();
            if list.is_empty() || list.len() > MAX_FAILED_CALLS {
                return Err(src.error(
                    calls.span(),
                    "calls",
                    format!("lists 1 to {MAX_FAILED_CALLS} call numbers (leave it out: every call fails)"),
                ));
            }
            if let Some(bad) = list.iter().find(|n| !(1..=MAX_CALL).contains(*n)) {
                return Err(src.error(
                    calls.span(),
                    "calls",
                    format!("`{bad}` is not a call number between 1 and {MAX_CALL}"),
                ));
            }
            Some(list.iter().map(|&n| n as u32).collect())
        }
    };
    let thread = match &m.thread {
        None => None,
        Some(name) => Some(
            threads
                .iter()
                .position(|t| t.name == *name.get_ref())
                .ok_or_else(|| {
                    src.error(
                        name.span(),
                        "thread",
                        format!("no thread is named `{}`", name.get_ref()),
                    )
                })?,
        ),
    };
    let hresult = match &m.hresult {
        None => HResult::E_FAIL,
        Some(text) => match HResult::parse(text.get_ref()) {
            Some(hr) if hr.0 & 0x8000_0000 != 0 => hr,
            Some(_) => {
                return Err(src.error(
                    text.span(),
                    "hresult",
                    format!(
                        "`{}` is a success code: a failed call returns a failure",
                        text.get_ref()
                    ),
                ))
            }
            None => {
                return Err(src.error(
                    text.span(),
                    "hresult",
                    format!("`{}` is not an HRESULT", text.get_ref()),
                ))
            }
        },
    };
    Ok(FailRule {
        api,
        calls,
        thread,
        hresult,
    })
}
