//! The outcome of running a scenario: every call with its HRESULT, the frames a walk reported
//! beside the target's ground truth, the runtime's events, and faults.
//!
//! The same structure is rendered as text ([`Report::render`]) and serialized as JSON (the
//! schema is documented in `docs/json-output.md`).

use crate::code::CodeKind;
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
    /// The index in `ground_truth` of the entry the runtime's walk started at: the call its
    /// seed is in, or the explicit Frame whose return address it started from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub walk_start: Option<usize>,
    /// Callbacks the runtime raised and runtime actions, in order.
    pub events: Vec<EventReport>,
    /// Calls made from inside the snapshot callback, in the order they were made.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nested: Vec<CallReport>,
    /// For a nested call, the snapshot callback (0-based) it was made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callback: Option<usize>,
    /// For a nested call, its place among its parent's nested calls (not in the JSON, where
    /// `line` says which it is).
    #[serde(skip)]
    pub(crate) nested_call: Option<usize>,
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
    /// The method's name in metadata (`Class::Method`), when it differs from `function`: an
    /// instantiation or an overload, declared with `method`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// `funcId` as `"0x…"`.
    pub func_id: String,
    /// `ip` as `"0x…"`.
    pub ip: String,
    /// `contextSize` (0 when no context was passed).
    pub context_size: u32,
    /// The first and last indices in the call's `ground_truth` this callback stands for: the
    /// one call whose IP it reports, or for a `funcId == 0` marker the native run (and any
    /// Frames inside it) down to the next reported frame. Absent when the IP is on no call
    /// of the stack (a bogus seed) or there is no ground truth.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truth_span: Option<[usize; 2]>,
}

/// One element of a thread's real stack.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TruthEntry {
    /// `"call"` or `"frame"` (an explicit runtime Frame).
    pub kind: &'static str,
    /// Function name, or the Frame's class.
    pub name: String,
    /// For calls: the code kind (`jit`, `native`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<&'static str>,
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
    /// The field that states it: `expect`, `expect_frames`, `expect_stack`, `expect_fault` or `nested_at`.
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
    /// A multi-line human-readable account, without colors.
    pub fn render(&self) -> String {
        self.render_with(false)
    }

    /// A multi-line human-readable account: each walk as two columns, the ground truth and
    /// what was reported beside it. `color` adds ANSI colors, for a terminal.
    pub fn render_with(&self, color: bool) -> String {
        let paint = Paint(color);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} {} ({})",
            paint.bold("scenario"),
            paint.bold(&self.scenario),
            self.platform
        );
        if !self.description.is_empty() {
            let _ = writeln!(out, "  {}", self.description.trim());
        }
        for call in &self.calls {
            render_call(&mut out, call, 1, paint);
        }
        if !self.faults.is_empty() {
            let _ = writeln!(out, "faults:");
            for f in &self.faults {
                let fatal = if f.fatal {
                    paint.red("FATAL ")
                } else {
                    String::new()
                };
                let _ = writeln!(out, "  during call #{}: {fatal}{}: {}", f.call, f.kind, f.message);
            }
        }
        let e = &self.expectations;
        let failed = format!("{} failed", e.failed.len());
        let _ = writeln!(
            out,
            "expectations: {} checked, {}",
            e.checked,
            if e.failed.is_empty() {
                paint.green(&failed)
            } else {
                paint.red(&failed)
            }
        );
        for f in &e.failed {
            let _ = writeln!(out, "  {} {f}", paint.red("MISMATCH"));
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

fn render_call(out: &mut String, c: &CallReport, depth: usize, paint: Paint) {
    let pad = "  ".repeat(depth);
    let target = c
        .target
        .as_ref()
        .map(|t| format!(" target={t}"))
        .unwrap_or_default();
    let hr = match (&c.hresult, &c.hresult_name) {
        (Some(h), Some(n)) if h.starts_with("0x8") => paint.red(&format!("{h} {n}")),
        (Some(h), Some(n)) => paint.green(&format!("{h} {n}")),
        (Some(h), None) => h.clone(),
        _ => "-".into(),
    };
    let _ = writeln!(
        out,
        "{pad}#{} line {}: {} [{}] {}{target} -> {hr}",
        c.index,
        c.line,
        c.caller,
        c.from,
        paint.bold(&c.api)
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
    match (&c.frames, &c.ground_truth) {
        (Some(frames), Some(truth)) => render_columns(out, &pad, frames, truth, c.walk_start, paint),
        (Some(frames), None) => {
            let _ = writeln!(out, "{pad}  reported ({}), no ground truth:", frames.len());
            for (i, f) in frames.iter().enumerate() {
                let _ = writeln!(out, "{pad}    {}", callback(i, f, paint));
            }
        }
        _ => {}
    }
    for n in &c.nested {
        let at = n.callback.map_or(String::new(), |k| format!(" {k}"));
        let _ = writeln!(out, "{pad}  nested in callback{at}:");
        render_call(out, n, depth + 2, paint);
    }
}

/// The widest a ground-truth name is shown; longer names are cut.
const NAME_WIDTH: usize = 44;

/// One walk as two columns: the ground truth (leaf first) on the left, each callback beside
/// the entry it reports, a bracket around the entries a `funcId == 0` marker stands for, and
/// `>` on the entry where the walk started.
fn render_columns(
    out: &mut String,
    pad: &str,
    frames: &[FrameReport],
    truth: &[TruthEntry],
    start: Option<usize>,
    paint: Paint,
) {
    let width = truth
        .iter()
        .map(|t| truth_name(t).chars().count())
        .max()
        .unwrap_or(0)
        .clamp(16, NAME_WIDTH);
    let left = width + 2 + 14 + 1 + 7;
    let _ = writeln!(
        out,
        "{pad}    {:<left$}   reported ({} callback{})",
        "ground truth (leaf first)",
        frames.len(),
        if frames.len() == 1 { "" } else { "s" }
    );
    // What sits beside each entry: (bracket, text).
    let mut beside: Vec<(&str, String)> = vec![("", String::new()); truth.len()];
    let mut unplaced = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        match f.truth_span {
            Some([first, last]) if last < truth.len() => {
                let text = callback(i, f, paint);
                if first == last {
                    beside[first] = (if f.function.is_some() { "<-" } else { "]" }, text);
                } else {
                    beside[first] = ("\u{2510}", text);
                    for row in &mut beside[first + 1..last] {
                        row.0 = "\u{2502}";
                    }
                    beside[last].0 = "\u{2518}";
                }
            }
            _ => unplaced.push(callback(i, f, paint)),
        }
    }
    let walked = |i: usize| start.is_some_and(|s| i >= s);
    for (i, (t, (bracket, text))) in truth.iter().zip(&beside).enumerate() {
        let mark = if start == Some(i) {
            paint.yellow(">")
        } else {
            " ".into()
        };
        let name = cut(&truth_name(t), width);
        let code = t.code.and_then(CodeKind::parse);
        let managed = code.is_some_and(CodeKind::is_managed);
        let shown = match &t.code {
            None => paint.cyan(&format!("{name:<width$}")),
            Some(_) if managed => paint.green(&format!("{name:<width$}")),
            Some(_) => format!("{name:<width$}"),
        };
        let kind = t.code.unwrap_or("Frame");
        let mut right = if text.is_empty() {
            String::new()
        } else {
            format!(" {text}")
        };
        if right.is_empty() && bracket.is_empty() && walked(i) {
            match code {
                Some(k) if k.has_metadata() => right = paint.yellow(" (not reported)"),
                Some(k) if k.is_managed() => right = " (no metadata: not reported)".into(),
                _ => {}
            }
        }
        let bracket = if *bracket == "<-" {
            paint.green(bracket)
        } else {
            paint.cyan(bracket)
        };
        let line = format!(
            "{pad}  {mark} {shown}  {:<14} {kind:<7}  {bracket}{right}",
            t.address
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if !unplaced.is_empty() {
        let _ = writeln!(out, "{pad}    not on the thread's stack:");
        for text in unplaced {
            let _ = writeln!(out, "{pad}      {text}");
        }
    }
    if let Some(s) = start {
        let how = if truth.get(s).is_some_and(|t| t.code.is_none()) {
            "the walk started at the call this Frame returns into"
        } else {
            "the walk started at the seed, in this call"
        };
        let _ = writeln!(out, "{pad}    {} {how}", paint.yellow(">"));
    }
}

/// How a ground-truth entry is named: its function, or `<FrameClass>`.
fn truth_name(t: &TruthEntry) -> String {
    match t.code {
        Some(_) => t.name.clone(),
        None => format!("<{}>", t.name),
    }
}

/// One callback, numbered from 1: its method (or the native-run marker), IP and context size.
fn callback(i: usize, f: &FrameReport, paint: Paint) -> String {
    let name = match &f.function {
        Some(name) => paint.green(name),
        None => paint.cyan("funcId 0 (native run)"),
    };
    format!("#{} {name} ip={} ctx={}", i + 1, f.ip, f.context_size)
}

/// `text` cut to at most `chars` characters for display, ending in `…` where it was cut.
pub fn cut(text: &str, chars: usize) -> String {
    if text.chars().count() <= chars {
        return text.to_string();
    }
    let kept: String = text.chars().take(chars.saturating_sub(1)).collect();
    format!("{kept}\u{2026}")
}

/// ANSI colors, or none.
#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn with(self, code: &str, text: &str) -> String {
        if self.0 && !text.is_empty() {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }
    fn bold(self, text: &str) -> String {
        self.with("1", text)
    }
    fn red(self, text: &str) -> String {
        self.with("31", text)
    }
    fn green(self, text: &str) -> String {
        self.with("32", text)
    }
    fn yellow(self, text: &str) -> String {
        self.with("33", text)
    }
    fn cyan(self, text: &str) -> String {
        self.with("36", text)
    }
}
