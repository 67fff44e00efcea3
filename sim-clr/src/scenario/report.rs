//! The outcome of running a scenario: every call with its HRESULT, the frames a walk reported
//! beside the target's ground truth, the runtime's events, and faults.
//!
//! The same structure is rendered as text ([`Report::render`]) and serialized as JSON (the
//! schema is documented in `docs/json-output.md`).

use serde::Serialize;
use std::fmt::Write;

/// One scenario run.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The scenario's name.
    pub scenario: String,
    /// The scenario's description.
    pub description: String,
    /// `"windows"` or `"unix"`.
    pub platform: String,
    /// Every call, in order.
    pub calls: Vec<CallReport>,
    /// Every fault detected, in order.
    pub faults: Vec<FaultReport>,
    /// The file's `expect` / `expect_frames` checks.
    pub expectations: Expectations,
}

/// One call (or runtime event) and what it did.
#[derive(Clone, Debug, Serialize)]
pub struct CallReport {
    /// 1-based position in the scenario (nested calls carry their parent's).
    pub index: usize,
    /// Line of the call in the file.
    pub line: usize,
    /// The API name, or `event:<name>` for a runtime event.
    pub api: String,
    /// The calling thread.
    pub caller: String,
    /// The caller's context: `thread`, `pinvoke` or a callback name.
    pub from: String,
    /// `DoStackSnapshot`'s target: `"0"`, a thread name, or a raw hex value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The HRESULT as `"0x8013135F"`; null for events and skipped calls.
    pub hresult: Option<String>,
    /// The HRESULT's symbolic name, if known.
    pub hresult_name: Option<String>,
    /// What the call returned besides the HRESULT.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// The snapshot callbacks, in order (`DoStackSnapshot` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames: Option<Vec<FrameReport>>,
    /// The target thread's real stack, leaf first (`DoStackSnapshot` of a real thread only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ground_truth: Option<Vec<TruthEntry>>,
    /// Callbacks the runtime raised and runtime actions, in order.
    pub events: Vec<EventReport>,
    /// Calls made from inside the snapshot callback.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nested: Vec<CallReport>,
    /// Why the call did not run, if it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    /// The scenario's note on the call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The call's conformance label (`case` in the file).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
}

/// One snapshot callback.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FrameReport {
    /// The method's name; null for a `funcId == 0` (native run) callback.
    pub function: Option<String>,
    /// `funcId` as `"0x…"`.
    pub func_id: String,
    /// `ip` as `"0x…"`.
    pub ip: String,
    /// `contextSize` (0 when no context was passed).
    pub context_size: u32,
}

/// One element of a thread's real stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TruthEntry {
    /// `"call"` or `"frame"` (an explicit runtime Frame).
    pub kind: String,
    /// Function name, or the Frame's class.
    pub name: String,
    /// For calls: the code kind (`jit`, `native`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// For calls: the IP in that frame; for Frames: the Frame's address.
    pub address: String,
}

/// A runtime event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventReport {
    /// Callback or action name.
    pub kind: String,
    /// The thread it happened on.
    pub on: String,
    /// Subject or explanation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A fault.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FaultReport {
    /// Snake-case kind (`null_callback`, `deadlock`, …).
    pub kind: String,
    /// What happened.
    pub message: String,
    /// True when the real process would be dead or hung.
    pub fatal: bool,
    /// The call during which it happened (1-based).
    pub call: usize,
}

/// The result of the file's own expectations.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Expectations {
    /// How many were checked.
    pub checked: usize,
    /// One entry per mismatch.
    pub failed: Vec<Mismatch>,
}

/// One expectation of the file that did not hold.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The call it is about (1-based, as `CallReport::index`).
    pub call: usize,
    /// The line of the expectation's call in the file.
    pub line: usize,
    /// The field that states it: `expect`, `expect_frames`, `expect_fault` or `nested_at`.
    pub field: String,
    /// What the file expected.
    pub expected: String,
    /// What happened.
    pub got: String,
}

impl Expectations {
    /// Counts one check of `field` for `call` at `line`, and records it as failed unless
    /// `expected == got`.
    pub(crate) fn check(&mut self, call: usize, line: usize, field: &str, expected: String, got: String) {
        self.checked += 1;
        if expected != got {
            self.failed.push(Mismatch {
                call,
                line,
                field: field.to_string(),
                expected,
                got,
            });
        }
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "call #{} (line {}): `{}` expected {}, got {}",
            self.call, self.line, self.field, self.expected, self.got
        )
    }
}

impl Report {
    /// A multi-line human-readable account.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "scenario {} ({})", self.scenario, self.platform);
        if !self.description.is_empty() {
            let _ = writeln!(out, "  {}", self.description.trim());
        }
        for call in &self.calls {
            render_call(&mut out, call, 1);
        }
        if !self.faults.is_empty() {
            let _ = writeln!(out, "faults:");
            for f in &self.faults {
                let fatal = if f.fatal { "FATAL " } else { "" };
                let _ = writeln!(out, "  during call #{}: {fatal}{}: {}", f.call, f.kind, f.message);
            }
        }
        let e = &self.expectations;
        let _ = writeln!(
            out,
            "expectations: {} checked, {} failed",
            e.checked,
            e.failed.len()
        );
        for f in &e.failed {
            let _ = writeln!(out, "  MISMATCH {f}");
        }
        out
    }

    /// The one-line summary used when running the whole catalog.
    pub fn summary(&self) -> String {
        let frames: usize = self
            .calls
            .iter()
            .filter_map(|c| c.frames.as_ref())
            .map(Vec::len)
            .sum();
        let fatal = self.faults.iter().filter(|f| f.fatal).count();
        let status = if self.expectations.failed.is_empty() {
            "ok  "
        } else {
            "FAIL"
        };
        format!(
            "{status} {:<40} {:<7} calls={:<3} frames={:<4} faults={} (fatal {}) expectations={}/{}",
            self.scenario,
            self.platform,
            self.calls.len(),
            frames,
            self.faults.len(),
            fatal,
            self.expectations.checked - self.expectations.failed.len(),
            self.expectations.checked
        )
    }
}

fn render_call(out: &mut String, c: &CallReport, depth: usize) {
    let pad = "  ".repeat(depth);
    let target = c
        .target
        .as_ref()
        .map(|t| format!(" target={t}"))
        .unwrap_or_default();
    let hr = match (&c.hresult, &c.hresult_name) {
        (Some(h), Some(n)) => format!("{h} {n}"),
        (Some(h), None) => h.clone(),
        _ => "-".into(),
    };
    let _ = writeln!(
        out,
        "{pad}#{} line {}: {} [{}] {}{target} -> {hr}",
        c.index, c.line, c.caller, c.from, c.api
    );
    if let Some(n) = &c.note {
        let _ = writeln!(out, "{pad}  note: {n}");
    }
    if let Some(s) = &c.skipped {
        let _ = writeln!(out, "{pad}  skipped: {s}");
    }
    if let Some(r) = &c.result {
        let _ = writeln!(out, "{pad}  result: {r}");
    }
    for e in &c.events {
        let detail = e.detail.as_ref().map(|d| format!(": {d}")).unwrap_or_default();
        let _ = writeln!(out, "{pad}  event: {} on {}{detail}", e.kind, e.on);
    }
    if let Some(frames) = &c.frames {
        let _ = writeln!(out, "{pad}  reported ({}):", frames.len());
        for f in frames {
            let name = f
                .function
                .clone()
                .unwrap_or_else(|| "<funcId 0: native run>".into());
            let _ = writeln!(out, "{pad}    {name:<44} ip={} ctx={}", f.ip, f.context_size);
        }
    }
    if let Some(truth) = &c.ground_truth {
        let _ = writeln!(out, "{pad}  ground truth (leaf first):");
        for t in truth {
            match &t.code {
                Some(code) => {
                    let _ = writeln!(out, "{pad}    {:<44} ip={} [{code}]", t.name, t.address);
                }
                None => {
                    let _ = writeln!(out, "{pad}    <{}> at {}", t.name, t.address);
                }
            }
        }
    }
    for n in &c.nested {
        let _ = writeln!(out, "{pad}  nested in callback:");
        render_call(out, n, depth + 2);
    }
}
