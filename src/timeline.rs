//! `simclr replay --svg`: one run drawn as a timeline, one lane per thread over the run's
//! steps. A lane's bar says what the thread was doing (ran, ready, blocked and on what,
//! asleep, parked by a runtime suspension, done), hatched while another thread held it
//! suspended; a strip above it marks a callback or the signal handler it ran in, thin strips
//! below it the locks it held, a diamond each `DoStackSnapshot` it made. Hovering any mark
//! shows its details. A deadlock's cycle is drawn red: its threads' names, and an arrow from
//! each waiting thread to the thread it waits for, labelled with what it waits for.

use sim_clr::process::timeline::{Doing, Lane, Timeline};
use sim_clr::process::RunReport;
use std::fmt::Write;

/// Left margin, for the thread names.
const LABELS: f64 = 120.0;
/// Right margin, for the cycle's arrows and labels.
const RIGHT: f64 = 330.0;
/// The widest the steps are drawn.
const CHART: f64 = 960.0;
/// Height of the header above the lanes.
const HEADER: f64 = 64.0;
/// Height of a lane without lock strips.
const LANE: f64 = 34.0;
/// Height of one lock strip.
const LOCK_STRIP: f64 = 4.0;

/// The width of a character of 12-pixel text, on the mean (sans-serif).
const TEXT_EM: f64 = 7.0;

/// About how wide `text` is drawn at 12 pixels.
fn text_width(text: &str) -> f64 {
    TEXT_EM * text.chars().count() as f64
}

/// What a bar's colour says, with its CSS class and fill.
fn style(doing: &Doing) -> Option<(&'static str, &'static str)> {
    match doing {
        Doing::Ran => Some(("ran", "#2e7d32")),
        Doing::Ready => Some(("ready", "#cfd8dc")),
        Doing::Blocked(_) => Some(("blocked", "#c62828")),
        Doing::Waiting(_) => Some(("waiting", "#ef9a9a")),
        Doing::Sleeping => Some(("sleeping", "#90caf9")),
        Doing::Parked => Some(("parked", "#8e24aa")),
        Doing::NotStarted | Doing::Done | Doing::Frozen => None,
    }
}

/// The words for what a thread was doing.
fn describe(doing: &Doing) -> String {
    match doing {
        Doing::NotStarted => "not started".into(),
        Doing::Ran => "ran".into(),
        Doing::Ready => "ready".into(),
        Doing::Blocked(on) => format!("blocked on {on}"),
        Doing::Waiting(on) => format!("waiting, with a deadline, for {on}"),
        Doing::Sleeping => "asleep".into(),
        Doing::Parked => "parked by the runtime suspension".into(),
        Doing::Done => "done".into(),
        Doing::Frozen => "frozen".into(),
    }
}

/// `text` safe inside an SVG element or attribute.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Distinct colours for locks, in the order the run first takes them.
const LOCK_COLOURS: [&str; 8] = [
    "#1565c0", "#ef6c00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e", "#37474f",
];

/// Every lock the run's threads held, in the order first held.
fn locks_of(timeline: &Timeline) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for step in &timeline.steps {
        for lane in &step.lanes {
            for lock in &lane.locks {
                if !out.contains(&lock.as_str()) {
                    out.push(lock);
                }
            }
        }
    }
    out
}

/// The colour of lock `name` among `locks`.
fn lock_colour(locks: &[&str], name: &str) -> &'static str {
    let i = locks.iter().position(|l| *l == name).unwrap_or(0);
    LOCK_COLOURS[i % LOCK_COLOURS.len()]
}

/// Runs of equal values in `values`: `(first index, one past the last, value)`.
fn runs<T: PartialEq + Clone>(values: impl Iterator<Item = T>) -> Vec<(usize, usize, T)> {
    let mut out: Vec<(usize, usize, T)> = Vec::new();
    for (i, v) in values.enumerate() {
        match out.last_mut() {
            Some((_, end, last)) if *last == v && *end == i => *end = i + 1,
            _ => out.push((i, i + 1, v)),
        }
    }
    out
}

/// The picture of one run of `title` (a file's name): [`RunReport::timeline`] must be
/// recorded ([`sim_clr::process::Process::replay_timeline`]).
pub fn svg(report: &RunReport, title: &str) -> String {
    let empty = Timeline::default();
    let timeline = report.timeline.as_ref().unwrap_or(&empty);
    let n = timeline.steps.len().max(1);
    let step_w = (CHART / n as f64).clamp(0.5, 14.0);
    let chart_w = step_w * n as f64;
    let lock_rows: Vec<usize> = (0..timeline.threads.len())
        .map(|t| {
            timeline
                .steps
                .iter()
                .map(|s| s.lanes[t].locks.len())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut tops = Vec::with_capacity(timeline.threads.len());
    let mut y = HEADER;
    for rows in &lock_rows {
        tops.push(y);
        y += LANE + LOCK_STRIP * *rows as f64;
    }
    let locks = locks_of(timeline);
    let cycle_len = report.fault.as_ref().map_or(0, |f| f.cycle.len());
    // Wide enough for the longest text: the outcome line, each cycle link's label.
    let outcome_text = report.fault.as_ref().map_or(report.outcome.len() + 2, |f| {
        f.kind.len() + f.message.chars().count() + 2
    });
    let link_label = (report.fault.iter().flat_map(|f| &f.cycle))
        .map(|l| {
            LABELS
                + chart_w
                + 20.0
                + 14.0 * cycle_len as f64
                + text_width(&format!("waits for {}: {}", l.held_by, l.waits_for))
        })
        .fold(0.0, f64::max);
    let width = (LABELS + chart_w + RIGHT)
        .max(legend_width(&locks) + 10.0)
        .max(10.0 + TEXT_EM * outcome_text as f64 + 10.0)
        .max(link_label + 10.0);
    let height = y + 112.0;
    let x = |i: usize| LABELS + step_w * i as f64;
    let cycle = report.fault.as_ref().map_or(&[][..], |f| &f.cycle[..]);
    let in_cycle = |name: &str| cycle.iter().any(|l| l.thread == name);

    let mut out = String::new();
    let w = &mut out;
    writeln!(
        w,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"#
    )
    .unwrap();
    w.push_str(concat!(
        r##"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">"##,
        r##"<rect width="3" height="6" fill="#ff9800" fill-opacity="0.8"/></pattern>"##,
        r##"<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">"##,
        r##"<path d="M0,0 L10,5 L0,10 z" fill="#c62828"/></marker></defs>"##,
        "\n",
        r##"<rect width="100%" height="100%" fill="white"/>"##,
        "\n",
    ));
    let outcome = match &report.fault {
        Some(f) => format!("{}: {}", f.kind, f.message),
        None => report.outcome.clone(),
    };
    writeln!(
        w,
        r#"<text class="title" x="10" y="20" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    )
    .unwrap();
    writeln!(
        w,
        r#"<text class="outcome" x="10" y="38" fill="{}">{}</text>"#,
        if report.fault.is_some() {
            "#c62828"
        } else {
            "#2e7d32"
        },
        escape(&outcome)
    )
    .unwrap();
    writeln!(
        w,
        r##"<text x="10" y="54" fill="#555">{} steps · schedule {}</text>"##,
        report.steps,
        escape(&report.schedule)
    )
    .unwrap();

    for (t, name) in timeline.threads.iter().enumerate() {
        let top = tops[t];
        let lanes = || timeline.steps.iter().map(move |s| &s.lanes[t]);
        let red = in_cycle(name);
        writeln!(
            w,
            r#"<g class="lane{}" data-thread="{}">"#,
            if red { " cycle" } else { "" },
            escape(name)
        )
        .unwrap();
        writeln!(
            w,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="{}" font-weight="{}">{}</text>"#,
            LABELS - 8.0,
            top + 18.0,
            if red { "#c62828" } else { "#222" },
            if red { "bold" } else { "normal" },
            escape(name)
        )
        .unwrap();
        writeln!(
            w,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#eceff1"/>"##,
            LABELS,
            LABELS + chart_w,
            top + 14.0,
            top + 14.0
        )
        .unwrap();
        bars(w, timeline, t, top, step_w, report);
        for (a, b, (callback, signal)) in runs(lanes().map(|l| (l.callback.clone(), l.signal))) {
            let what = match (&callback, signal) {
                (Some(c), _) => format!("in {c}"),
                (None, true) => "in the profiling signal's handler".to_string(),
                (None, false) => continue,
            };
            writeln!(
                w,
                r##"<rect class="callback" x="{:.1}" y="{:.1}" width="{:.1}" height="4" fill="{}"><title>{}: {}, steps {}–{}</title></rect>"##,
                x(a),
                top,
                step_w * (b - a) as f64,
                if signal { "#d81b60" } else { "#f9a825" },
                escape(name),
                escape(&what),
                timeline.steps[a].step,
                timeline.steps[b - 1].step
            )
            .unwrap();
        }
        lock_strips(w, timeline, &locks, t, top, step_w);
        for (i, step) in timeline.steps.iter().enumerate() {
            if let (true, Some((target, hr))) = (step.ran == t, &step.walk) {
                let cx = x(i) + step_w / 2.0;
                // A dashed line to the lane of the thread it walked.
                if let Some(to) = timeline
                    .threads
                    .iter()
                    .position(|n| n == target)
                    .filter(|&to| to != t)
                {
                    writeln!(
                        w,
                        r##"<line class="walk-target" data-target="{}" x1="{cx:.1}" x2="{cx:.1}" y1="{:.1}" y2="{:.1}" stroke="#212121" stroke-width="0.8" stroke-dasharray="2,2"/>"##,
                        escape(target),
                        top + 9.0,
                        tops[to] + 9.0
                    )
                    .unwrap();
                }
                writeln!(
                    w,
                    r##"<path class="walk" d="M{cx:.1},{:.1} l4,5 l-4,5 l-4,-5 z" fill="#212121"><title>step {}: {} called DoStackSnapshot of {} → {}</title></path>"##,
                    top + 4.0,
                    step.step,
                    escape(name),
                    escape(target),
                    escape(hr)
                )
                .unwrap();
            }
            if step.ran == t && !step.reached.is_empty() {
                // A window the run reached for the first time: a flag above the lane.
                let cx = x(i) + step_w / 2.0;
                writeln!(
                    w,
                    r##"<path class="window" d="M{cx:.1},{:.1} v10 M{cx:.1},{:.1} h6 v4 h-6 z" stroke="#00897b" fill="#00897b"><title>step {}: first reached {}</title></path>"##,
                    top - 2.0,
                    top - 2.0,
                    step.step,
                    escape(&step.reached.join(", "))
                )
                .unwrap();
            }
        }
        w.push_str("</g>\n");
    }

    cycle_arrows(w, report, timeline, &tops, LABELS + chart_w);
    axis(w, timeline, y, step_w);
    legend(w, &locks, y + 36.0);
    w.push_str("</svg>\n");
    out
}

/// Thread `t`'s main bars: what it was doing, hatched while suspended.
fn bars(w: &mut String, timeline: &Timeline, t: usize, top: f64, step_w: f64, report: &RunReport) {
    let name = &timeline.threads[t];
    let key = |l: &Lane| (l.doing.clone(), l.suspended_by.clone());
    for (a, b, (doing, suspended_by)) in runs(timeline.steps.iter().map(|s| key(&s.lanes[t]))) {
        let (x0, width) = (LABELS + step_w * a as f64, step_w * (b - a) as f64);
        let (first, last) = (timeline.steps[a].step, timeline.steps[b - 1].step);
        let mut what = format!("{name}: {}, steps {first}–{last}", describe(&doing));
        if doing == Doing::Ran {
            // The trace is in step order: only the segment's steps are read.
            let from = report.trace.partition_point(|e| e.step < first);
            let lines: Vec<&str> = report.trace[from..]
                .iter()
                .take_while(|e| e.step <= last)
                .filter(|e| e.thread == *name)
                .map(|e| e.what.as_str())
                .collect();
            for line in lines.iter().take(6) {
                what += &format!("\n{line}");
            }
            if lines.len() > 6 {
                what += &format!("\n… {} more", lines.len() - 6);
            }
        }
        if let Some((class, fill)) = style(&doing) {
            writeln!(
                w,
                r#"<rect class="{class}" x="{x0:.1}" y="{:.1}" width="{width:.1}" height="16" fill="{fill}"><title>{}</title></rect>"#,
                top + 6.0,
                escape(&what)
            )
            .unwrap();
        }
        if !suspended_by.is_empty() {
            writeln!(
                w,
                r##"<rect class="suspended" x="{x0:.1}" y="{:.1}" width="{width:.1}" height="16" fill="url(#hatch)" stroke="#ef6c00"><title>{name}: suspended by {}, steps {first}–{last}</title></rect>"##,
                top + 6.0,
                escape(&suspended_by.join(", "))
            )
            .unwrap();
        }
    }
}

/// Thread `t`'s lock strips, one row per lock it held at once.
fn lock_strips(w: &mut String, timeline: &Timeline, all: &[&str], t: usize, top: f64, step_w: f64) {
    let name = &timeline.threads[t];
    let mut locks: Vec<&str> = Vec::new();
    for step in &timeline.steps {
        for lock in &step.lanes[t].locks {
            if !locks.contains(&lock.as_str()) {
                locks.push(lock);
            }
        }
    }
    for lock in locks {
        let held = timeline.steps.iter().map(|s| {
            let l = &s.lanes[t].locks;
            l.iter().position(|x| x == lock)
        });
        for (a, b, row) in runs(held) {
            let Some(row) = row else { continue };
            writeln!(
                w,
                r#"<rect class="lock" data-lock="{}" x="{:.1}" y="{:.1}" width="{:.1}" height="3" fill="{}"><title>{}: holds lock {}, steps {}–{}</title></rect>"#,
                escape(lock),
                LABELS + step_w * a as f64,
                top + 24.0 + LOCK_STRIP * row as f64,
                step_w * (b - a) as f64,
                lock_colour(all, lock),
                escape(name),
                escape(lock),
                timeline.steps[a].step,
                timeline.steps[b - 1].step
            )
            .unwrap();
        }
    }
}

/// The deadlock's cycle: an arrow from each waiting thread to the one it waits for, right of
/// the last step, labelled with what it waits for.
fn cycle_arrows(w: &mut String, report: &RunReport, timeline: &Timeline, tops: &[f64], end: f64) {
    let Some(fault) = &report.fault else { return };
    if fault.cycle.is_empty() {
        return;
    }
    let lane_y = |name: &str| {
        timeline
            .threads
            .iter()
            .position(|t| t == name)
            .map(|i| tops[i] + 14.0)
    };
    writeln!(w, r#"<g class="cycle-links">"#).unwrap();
    for (k, link) in fault.cycle.iter().enumerate() {
        let (Some(from), Some(to)) = (lane_y(&link.thread), lane_y(&link.held_by)) else {
            continue;
        };
        let x = end + 16.0 + 14.0 * k as f64;
        let path = if from == to {
            // A thread waiting for itself: a loop.
            format!("M{:.1},{from:.1} h12 v-10 h-12", end + 4.0)
        } else {
            format!("M{:.1},{from:.1} H{x:.1} V{to:.1} H{:.1}", end + 2.0, end + 4.0)
        };
        writeln!(
            w,
            r##"<path class="waits-for" data-from="{}" data-to="{}" d="{path}" fill="none" stroke="#c62828" stroke-width="2" marker-end="url(#arrow)"><title>{} waits for {} ({})</title></path>"##,
            escape(&link.thread),
            escape(&link.held_by),
            escape(&link.thread),
            escape(&link.held_by),
            escape(&link.waits_for)
        )
        .unwrap();
        writeln!(
            w,
            r##"<text x="{:.1}" y="{:.1}" fill="#c62828">waits for {}: {}</text>"##,
            end + 20.0 + 14.0 * fault.cycle.len() as f64,
            from + 4.0,
            escape(&link.held_by),
            escape(&link.waits_for)
        )
        .unwrap();
    }
    w.push_str("</g>\n");
}

/// Step numbers below the lanes.
fn axis(w: &mut String, timeline: &Timeline, y: f64, step_w: f64) {
    let n = timeline.steps.len();
    let every = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000]
        .into_iter()
        .find(|&e| step_w * e as f64 >= 48.0)
        .unwrap_or(20000);
    for (i, step) in timeline.steps.iter().enumerate() {
        let last = i + 1 == n && step.step % every > every / 2;
        if step.step % every == 0 || last {
            let x = LABELS + step_w * (i as f64 + 0.5);
            writeln!(
                w,
                r##"<text x="{x:.1}" y="{:.1}" text-anchor="middle" fill="#777" font-size="10">{}</text>"##,
                y + 12.0,
                step.step
            )
            .unwrap();
        }
    }
    writeln!(
        w,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#777" font-size="10">step</text>"##,
        LABELS - 8.0,
        y + 12.0
    )
    .unwrap();
}

/// The legend's rows: what the colours of a lane mean, then the marks on it.
const LEGEND: [&[(&str, &str)]; 2] = [
    &[
        ("#2e7d32", "ran"),
        ("#cfd8dc", "ready"),
        ("#c62828", "blocked"),
        ("#ef9a9a", "waiting with a deadline"),
        ("#90caf9", "asleep"),
        ("#8e24aa", "parked"),
        ("url(#hatch)", "suspended"),
    ],
    &[
        ("#f9a825", "in a callback"),
        ("#d81b60", "in the signal handler"),
        (
            "#212121",
            "DoStackSnapshot (diamond, dashed to the thread walked)",
        ),
        ("#00897b", "a window first reached (flag)"),
    ],
];

/// The room a legend item takes: its swatch, its label, the gap after it.
fn legend_item_width(label: &str) -> f64 {
    28.0 + 6.8 * label.chars().count() as f64
}

/// How wide the legend is with `locks` in its last row.
fn legend_width(locks: &[&str]) -> f64 {
    let row = |labels: &mut dyn Iterator<Item = &str>| 10.0 + labels.map(legend_item_width).sum::<f64>();
    let locks_row = 210.0 + locks.iter().map(|l| legend_item_width(l)).sum::<f64>();
    (LEGEND.iter())
        .map(|items| row(&mut items.iter().map(|(_, label)| *label)))
        .fold(locks_row, f64::max)
}

/// What the colours mean, and each lock's colour.
fn legend(w: &mut String, locks: &[&str], y: f64) {
    writeln!(w, r#"<g class="legend">"#).unwrap();
    for (row, items) in LEGEND.iter().enumerate() {
        let mut x = 10.0;
        for (fill, label) in *items {
            legend_item(w, &mut x, y + 22.0 * row as f64, fill, 10.0, label);
        }
    }
    let y = y + 22.0 * LEGEND.len() as f64;
    let mut x = 10.0;
    if !locks.is_empty() {
        writeln!(
            w,
            r##"<text x="{x:.1}" y="{y:.1}" fill="#333">locks held (strips under a lane):</text>"##
        )
        .unwrap();
        x += 200.0;
    }
    for lock in locks {
        legend_item(w, &mut x, y, lock_colour(locks, lock), 4.0, lock);
    }
    w.push_str("</g>\n");
}

/// One swatch and its label at `x` (moved past them).
fn legend_item(w: &mut String, x: &mut f64, y: f64, fill: &str, height: f64, label: &str) {
    writeln!(
        w,
        r##"<rect x="{:.1}" y="{:.1}" width="14" height="{height:.1}" fill="{fill}" stroke="#999" stroke-width="0.5"/><text x="{:.1}" y="{y:.1}" fill="#333">{}</text>"##,
        *x,
        y - 4.0 - height / 2.0,
        *x + 18.0,
        escape(label)
    )
    .unwrap();
    *x += legend_item_width(label);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_join_equal_neighbours() {
        assert_eq!(
            runs([1, 1, 2, 2, 2, 1].into_iter()),
            [(0, 2, 1), (2, 5, 2), (5, 6, 1)]
        );
        assert!(runs(std::iter::empty::<u8>()).is_empty());
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape(r#"a<b & "c">"#), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
