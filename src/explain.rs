//! `simclr explain FILE [--call N] -o walk.svg`: one walk drawn as a picture. Left to right:
//! the target's stack memory (one row per 8-byte slot, leaf at the top), the frames that own
//! the slots, the explicit Frame chain, and the callbacks the walk reported, each beside what
//! it stands for; an outline marks where the walk started (its seed, or a Frame).

use crate::out::outln;
use sim_clr::scenario::{CallReport, FrameReport, Report, Scenario, TruthEntry};
use sim_clr::thread::Thread;
use std::fmt::Write;
use std::path::Path;
use std::process::ExitCode;

/// The most slot rows drawn; a deeper stack is cut there, and the picture says so.
const MAX_ROWS: usize = 400;
/// Height of one row, in pixels.
const ROW: usize = 18;
/// Where the rows start below the title.
const TOP: usize = 70;
/// Left edges of the columns: memory, frames, Frame chain, callbacks.
const X_MEMORY: usize = 20;
const X_FRAMES: usize = 330;
const X_CHAIN: usize = 650;
const X_CALLBACKS: usize = 900;
const WIDTH: usize = 1330;
/// Width of a memory slot and of a frame box.
const BOX: usize = 290;
/// Width of an explicit Frame's box.
const FRAME_BOX: usize = 160;

/// What `explain` drew.
pub struct Picture {
    /// The SVG document.
    pub svg: String,
    /// The call drawn (1-based).
    pub call: usize,
}

/// Runs `file` and writes a picture of call `call` (default: the first walk of a thread) to
/// `out`.
pub fn run(file: &Path, call: Option<usize>, out: &Path) -> ExitCode {
    let scenario = match Scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let picture = match draw(&scenario, call) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::write(out, &picture.svg) {
        eprintln!("error: {}: {e}", out.display());
        return ExitCode::from(2);
    }
    outln!(
        "{}: call #{} drawn to {}",
        file.display(),
        picture.call,
        out.display()
    );
    ExitCode::SUCCESS
}

/// Runs `scenario` and draws call `call` (1-based; default: the first `DoStackSnapshot` of a
/// thread of the scenario).
pub fn draw(scenario: &Scenario, call: Option<usize>) -> Result<Picture, String> {
    let report = scenario.run();
    let walks = |c: &&CallReport| c.ground_truth.is_some() && c.frames.is_some();
    let chosen = match call {
        Some(n) => report
            .calls
            .get(n.wrapping_sub(1))
            .ok_or_else(|| format!("there is no call #{n} ({} calls)", report.calls.len()))?,
        None => report
            .calls
            .iter()
            .find(walks)
            .ok_or("no call walks a thread of the scenario")?,
    };
    if !walks(&chosen) {
        return Err(format!(
            "call #{} is not a DoStackSnapshot of a thread of the scenario",
            chosen.index
        ));
    }
    let target = match chosen.target.as_deref() {
        Some("0") => chosen.caller.clone(),
        Some(name) => name.to_string(),
        None => return Err(format!("call #{} has no target", chosen.index)),
    };
    // The same run again, looking at the target as the call finds it.
    let mut seen: Option<(Thread, Vec<Option<u64>>)> = None;
    scenario.run_observing(|n, rt| {
        if n == chosen.index {
            seen = rt.thread(&target).map(|t| {
                let low = t.layout.calls.first().map_or(t.stack_base, |c| c.rsp);
                let words = (low..t.stack_base)
                    .step_by(8)
                    .take(MAX_ROWS * 64)
                    .map(|a| rt.read_memory(a))
                    .collect();
                (t, words)
            });
        }
    });
    let (thread, words) = seen.ok_or_else(|| format!("thread {target} is gone at call #{}", chosen.index))?;
    Ok(Picture {
        svg: svg(&report, chosen, &thread, &words),
        call: chosen.index,
    })
}

/// One drawn row: a stack slot, or a gap standing for slots nobody points at.
#[derive(Clone, Copy)]
enum Row {
    Slot(u64),
    Gap(u64),
}

/// The slots worth a row: each frame's first and last slots, the slots next to them, and the
/// Frames' own; the rest become gaps. At most [`MAX_ROWS`].
fn rows(thread: &Thread, low: u64) -> (Vec<Row>, bool) {
    let mut marks = std::collections::BTreeSet::new();
    for c in &thread.layout.calls {
        for a in [c.rsp, c.rsp + 8, c.cfa.wrapping_sub(16), c.cfa.wrapping_sub(8)] {
            marks.insert(a);
        }
    }
    for f in &thread.layout.frames {
        marks.insert(f.address);
    }
    let mut out = Vec::new();
    let mut gap = 0;
    let mut a = low;
    while a < thread.stack_base && out.len() < MAX_ROWS {
        if marks.contains(&a) {
            if gap > 0 {
                out.push(Row::Gap(gap));
                gap = 0;
            }
            out.push(Row::Slot(a));
        } else {
            gap += 1;
        }
        a += 8;
    }
    if gap > 0 && out.len() < MAX_ROWS {
        out.push(Row::Gap(gap));
    }
    (out, a < thread.stack_base)
}

/// Text safe inside an SVG element or attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The fill of a frame of code kind `kind`.
fn fill(kind: Option<&str>) -> &'static str {
    match kind {
        Some("jit" | "r2r") => "#c8ecc8",
        Some("il_stub" | "lcg") => "#e3f2d5",
        Some("helper") => "#fde2c0",
        Some("stub") => "#e6d6f2",
        Some(_) => "#e4e4e4",
        None => "#cdeef6",
    }
}

/// The SVG picture of `call`, with `thread` and its stack `words` as the call found them.
fn svg(report: &Report, call: &CallReport, thread: &Thread, words: &[Option<u64>]) -> String {
    let truth = call.ground_truth.as_deref().unwrap_or_default();
    let low = thread.layout.calls.first().map_or(thread.stack_base, |c| c.rsp);
    let (rows, cut) = rows(thread, low);
    let grid = Grid { rows, low };
    let mut s = String::new();
    header(&mut s, report, call, thread, y(grid.rows.len()) + 60);
    memory(&mut s, &grid, cut, thread, truth, words);
    let mut entry_row = frame_boxes(&mut s, &grid, thread, truth);
    frame_chain(&mut s, &grid, thread, &mut entry_row);
    callbacks(
        &mut s,
        &grid,
        call.frames.as_deref().unwrap_or_default(),
        truth,
        &entry_row,
    );
    walk_start(&mut s, call, truth, &entry_row);
    s.push_str("</svg>\n");
    s
}

/// The rows drawn, and the lowest address (the first row's).
struct Grid {
    rows: Vec<Row>,
    low: u64,
}

impl Grid {
    /// The first row at or below `address` (the end when there is none).
    fn row_of(&self, address: u64) -> usize {
        self.rows
            .iter()
            .position(|r| matches!(r, Row::Slot(a) if *a >= address))
            .unwrap_or(self.rows.len())
    }
}

/// The top of row `row`, in pixels.
fn y(row: usize) -> usize {
    TOP + 30 + row * ROW
}

/// The document's start: size, arrow marker, background, title, note and column heads.
fn header(s: &mut String, report: &Report, call: &CallReport, thread: &Thread, height: usize) {
    let callbacks = call.frames.as_ref().map_or(0, Vec::len);
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="12">"#
    );
    let _ = writeln!(
        s,
        r##"<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>"##
    );
    let _ = writeln!(s, r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#);
    let hr = match (&call.hresult, &call.hresult_name) {
        (Some(h), Some(n)) => format!("{h} {n}"),
        (Some(h), None) => h.clone(),
        _ => call.result.clone().unwrap_or_else(|| "-".into()),
    };
    let title = format!(
        "{} ({}): call #{} (line {}): {} [{}] {} target={} → {hr}",
        report.scenario,
        report.platform,
        call.index,
        call.line,
        call.caller,
        call.from,
        call.api,
        call.target.as_deref().unwrap_or("?"),
    );
    let _ = writeln!(
        s,
        r#"<text x="20" y="24" font-size="15" font-weight="bold">{}</text>"#,
        escape(&title)
    );
    if let Some(note) = &call.note {
        let _ = writeln!(s, r##"<text x="20" y="44" fill="#444">{}</text>"##, escape(note));
    }
    for (x, head) in [
        (X_MEMORY, format!("stack of {} (leaf at the top)", thread.name)),
        (X_FRAMES, "frames (ground truth)".to_string()),
        (X_CHAIN, "Frame chain".to_string()),
        (X_CALLBACKS, format!("reported: {} callbacks", callbacks)),
    ] {
        let _ = writeln!(
            s,
            r#"<text x="{x}" y="{}" font-weight="bold">{}</text>"#,
            TOP + 10,
            escape(&head)
        );
    }
}

/// The stack memory column, return-address slots highlighted with the caller they return into.
fn memory(
    s: &mut String,
    grid: &Grid,
    cut: bool,
    thread: &Thread,
    truth: &[TruthEntry],
    words: &[Option<u64>],
) {
    for (i, row) in grid.rows.iter().enumerate() {
        match *row {
            Row::Slot(a) => {
                let word = words.get(((a - grid.low) / 8) as usize).copied().flatten();
                let value = word.map_or("unmapped".to_string(), |v| format!("{v:016x}"));
                // A return address: the slot below a caller's frame holding its IP.
                let calls = &thread.layout.calls;
                let returns_into = calls
                    .iter()
                    .filter(|c| c.cfa.wrapping_sub(8) == a)
                    .find_map(|c| calls.iter().find(|d| d.rsp == c.cfa && word == Some(d.rip)))
                    .and_then(|caller| truth.get(thread.stack.index_of(caller.depth)));
                let (fill, title) = match returns_into {
                    Some(t) => (
                        "#fff3c4",
                        format!("<title>return address into {}</title>", escape(&t.name)),
                    ),
                    None => ("#fafafa", String::new()),
                };
                let _ = writeln!(
                    s,
                    r##"<g class="slot">{title}<rect x="{X_MEMORY}" y="{}" width="{BOX}" height="{ROW}" fill="{fill}" stroke="#bbb"/><text x="{}" y="{}">{a:012x}  {value}</text></g>"##,
                    y(i),
                    X_MEMORY + 6,
                    y(i) + 13
                );
            }
            Row::Gap(n) => {
                let _ = writeln!(
                    s,
                    r##"<text class="gap" x="{}" y="{}" fill="#888">... {n} slot{}</text>"##,
                    X_MEMORY + 110,
                    y(i) + 13,
                    if n == 1 { "" } else { "s" }
                );
            }
        }
    }
    if cut {
        let _ = writeln!(
            s,
            r##"<text x="{X_MEMORY}" y="{}" fill="#a00">deeper slots not drawn (more than {MAX_ROWS} rows)</text>"##,
            y(grid.rows.len()) + 14
        );
    }
}

/// One box per call, from its RSP to its CFA; returns each ground-truth entry's rows.
fn frame_boxes(
    s: &mut String,
    grid: &Grid,
    thread: &Thread,
    truth: &[TruthEntry],
) -> Vec<Option<(usize, usize)>> {
    let mut entry_row = vec![None; truth.len()];
    for c in &thread.layout.calls {
        let (top, bottom) = (grid.row_of(c.rsp), grid.row_of(c.cfa).max(grid.row_of(c.rsp) + 1));
        let entry = thread.stack.index_of(c.depth);
        let Some(t) = truth.get(entry) else { continue };
        entry_row[entry] = Some((top, bottom));
        let _ = writeln!(
            s,
            r##"<g class="frame"><rect x="{X_FRAMES}" y="{}" width="{BOX}" height="{}" fill="{}" stroke="#666"/><text x="{}" y="{}">{}</text><text x="{}" y="{}" fill="#555">{} ip={}</text></g>"##,
            y(top),
            (bottom - top) * ROW,
            fill(t.code),
            X_FRAMES + 6,
            y(top) + 13,
            escape(&t.name),
            X_FRAMES + 6,
            y(top) + 13 + if bottom - top > 1 { ROW } else { 0 },
            t.code.unwrap_or(""),
            t.address
        );
    }
    entry_row
}

/// The Frame chain: each Frame at its address (its rows recorded in `entry_row`), linked to
/// the next, and to the call it is in.
fn frame_chain(s: &mut String, grid: &Grid, thread: &Thread, entry_row: &mut [Option<(usize, usize)>]) {
    let mut previous: Option<usize> = None;
    for f in &thread.layout.frames {
        let r = grid.row_of(f.address);
        if let Some(e) = entry_row.get_mut(thread.stack.index_of(f.depth)) {
            *e = Some((r, r + 1));
        }
        let _ = writeln!(
            s,
            r##"<g class="explicit-frame"><rect x="{X_CHAIN}" y="{}" width="{FRAME_BOX}" height="{ROW}" fill="{}" stroke="#2a8ca8"/><text x="{}" y="{}">{}</text></g>"##,
            y(r),
            fill(None),
            X_CHAIN + 6,
            y(r) + 13,
            escape(&format!("<{}>", f.kind.as_str()))
        );
        let _ = writeln!(
            s,
            r##"<line x1="{}" y1="{}" x2="{X_CHAIN}" y2="{}" stroke="#2a8ca8" stroke-dasharray="3,2"/>"##,
            X_FRAMES + BOX,
            y(r) + ROW / 2,
            y(r) + ROW / 2
        );
        if let Some(p) = previous {
            let _ = writeln!(
                s,
                r##"<path class="chain" d="M{} {} C{} {} {} {} {} {}" fill="none" stroke="#2a8ca8" marker-end="url(#arrow)"/>"##,
                X_CHAIN + FRAME_BOX,
                y(p) + ROW / 2,
                X_CHAIN + FRAME_BOX + 30,
                y(p) + ROW / 2,
                X_CHAIN + FRAME_BOX + 30,
                y(r) + ROW / 2,
                X_CHAIN + FRAME_BOX,
                y(r) + ROW / 2
            );
        }
        previous = Some(r);
    }
}

/// Each callback beside what it stands for: an arrow to its frame, or a bracket over its
/// native run; those on no frame of the stack listed below.
fn callbacks(
    s: &mut String,
    grid: &Grid,
    frames: &[FrameReport],
    truth: &[TruthEntry],
    entry_row: &[Option<(usize, usize)>],
) {
    let mut unplaced = Vec::new();
    for (i, f) in frames.iter().enumerate() {
        let name = f
            .function
            .clone()
            .unwrap_or_else(|| "funcId 0 (native run)".into());
        let label = escape(&format!("#{} {name} ctx={}", i + 1, f.context_size));
        // A native run's bracket ends at its last call (a Frame inside it sits in a call).
        let last_call = |[a, b]: [usize; 2]| {
            (a..=b)
                .rev()
                .find(|&e| truth.get(e).is_some_and(|t| t.code.is_some()))
        };
        let span = f.truth_span.and_then(|span| {
            let last = last_call(span)?;
            Some((entry_row.get(span[0]).copied()??, entry_row.get(last).copied()??))
        });
        let Some(((top, _), (_, bottom))) = span else {
            unplaced.push(label);
            continue;
        };
        let colour = if f.function.is_some() {
            "#1d7a1d"
        } else {
            "#2a8ca8"
        };
        if f.function.is_none() {
            // A bracket over the native run.
            let _ = writeln!(
                s,
                r#"<path class="bracket" d="M{} {} h10 V{} h-10" fill="none" stroke="{colour}" stroke-width="2"/>"#,
                X_CALLBACKS - 24,
                y(top) + 2,
                y(bottom) - 2
            );
        } else {
            let _ = writeln!(
                s,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{colour}" marker-end="url(#arrow)"/>"#,
                X_CALLBACKS - 4,
                y(top) + ROW / 2,
                X_FRAMES + BOX + 2,
                y(top) + ROW / 2
            );
        }
        let _ = writeln!(
            s,
            r#"<text class="callback" x="{X_CALLBACKS}" y="{}" fill="{colour}">{label}</text>"#,
            y(top) + 13
        );
    }
    for (k, label) in unplaced.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text class="callback unplaced" x="{X_CALLBACKS}" y="{}" fill="#a00">{label} (on no frame of this stack)</text>"##,
            y(grid.rows.len()) + 14 + k * ROW
        );
    }
}

/// Where the walk started: its entry outlined, and said.
fn walk_start(s: &mut String, call: &CallReport, truth: &[TruthEntry], entry_row: &[Option<(usize, usize)>]) {
    if let Some((top, bottom)) = call.walk_start.and_then(|e| entry_row.get(e).copied().flatten()) {
        let seeded = call
            .walk_start
            .and_then(|e| truth.get(e))
            .is_some_and(|t| t.code.is_some());
        let (how, x, width) = if seeded {
            ("the walk starts at the seed, in this frame", X_FRAMES, BOX)
        } else {
            (
                "the walk starts at the call this Frame returns into",
                X_CHAIN,
                FRAME_BOX,
            )
        };
        let _ = writeln!(
            s,
            r##"<g class="start"><rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#d08c00" stroke-width="3"/><text x="{}" y="{}" fill="#b07000" font-weight="bold">{how}</text></g>"##,
            x - 2,
            y(top) - 2,
            width + 4,
            (bottom - top) * ROW + 4,
            x,
            y(top) - 5
        );
    }
}
