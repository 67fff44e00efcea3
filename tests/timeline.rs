//! `simclr replay --svg`: the timeline of a catalog deadlock, parsed as XML, shows every
//! thread's lane, the suspension, the lock and the wait, and the cycle.

use fixtures::sampling::{process, variant};
use sim_clr::process::Strategy;
use sim_clr::scenario::Scenario;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

// Profiler code's allocations on simulated threads take the process heap lock, as in the
// binary whose replay the test runs.
#[global_allocator]
static ALLOCATOR: sim_clr::process::HeapLockAllocator<std::alloc::System> =
    sim_clr::process::HeapLockAllocator(std::alloc::System);

const FILE: &str = "fixtures/pitfalls/s05-code-manager-lock.toml";

/// The first deadlock `no-watchdog` meets in S5, as `explore` finds it.
fn deadlock_schedule() -> String {
    let text = std::fs::read_to_string(FILE).unwrap();
    let scenario = Scenario::parse(FILE, &text).unwrap();
    let p = process(scenario, variant("no-watchdog").unwrap()).unwrap();
    let (_, failed) = p.first_failure(Strategy::Pct(3), 1000, 1);
    let run = failed.expect("no-watchdog deadlocks in S5");
    assert_eq!(run.outcome, "deadlock");
    run.schedule
}

/// `simclr replay` of `schedule` with the `no-watchdog` mutant (`--json` when `json`), drawing
/// the run when `svg`: what it printed, and the picture.
fn replay(schedule: &str, json: bool, svg: bool) -> (String, Option<String>) {
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, Ordering::Relaxed);
    let out = std::env::temp_dir().join(format!("simclr-timeline-{}-{call}.svg", std::process::id()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_simclr"));
    command.args(["replay", FILE, "--sampler", "no-watchdog", "--schedule", schedule]);
    if json {
        command.arg("--json");
    }
    if svg {
        command.arg("--svg").arg(&out);
    }
    let run = command.output().unwrap();
    // A replay exits 0 when its run is ok, 1 when it fails (the deadlock's).
    assert!(
        matches!(run.status.code(), Some(0 | 1)),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let picture = svg.then(|| {
        let text = std::fs::read_to_string(&out).unwrap();
        std::fs::remove_file(&out).unwrap();
        text
    });
    (String::from_utf8(run.stdout).unwrap(), picture)
}

/// The attribute `name` of `node`.
fn attr<'a>(node: roxmltree::Node<'a, '_>, name: &str) -> &'a str {
    node.attribute(name).unwrap_or_default()
}

/// The hover text of `node`.
fn title(node: roxmltree::Node<'_, '_>) -> String {
    node.children()
        .find(|c| c.has_tag_name("title"))
        .and_then(|t| t.text())
        .unwrap_or_default()
        .to_string()
}

fn has_class(node: roxmltree::Node<'_, '_>, class: &str) -> bool {
    attr(node, "class").split(' ').any(|c| c == class)
}

#[test]
fn a_deadlock_is_drawn_with_its_cycle() {
    let (_, text) = replay(&deadlock_schedule(), false, true);
    let text = text.unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the SVG is well-formed XML");
    let svg = doc.root_element();
    assert!(svg.has_tag_name("svg"));

    let outcome = svg.descendants().find(|n| has_class(*n, "outcome")).unwrap();
    assert!(outcome.text().unwrap().starts_with("deadlock: "));

    // One lane per thread of the scenario, in its order.
    let lanes: Vec<_> = svg.descendants().filter(|n| has_class(*n, "lane")).collect();
    let names: Vec<&str> = lanes.iter().map(|l| attr(*l, "data-thread")).collect();
    assert_eq!(names, ["main", "sampler", "watchdog"]);
    let lane = |name: &str| *lanes.iter().find(|l| attr(**l, "data-thread") == name).unwrap();

    // The cycle: the sampler waits for main's lock, main for the sampler's ResumeThread.
    let in_cycle: Vec<&str> = lanes
        .iter()
        .filter(|l| has_class(**l, "cycle"))
        .map(|l| attr(*l, "data-thread"))
        .collect();
    assert_eq!(in_cycle, ["main", "sampler"]);
    let arrows: Vec<(String, String, String)> = svg
        .descendants()
        .filter(|n| has_class(*n, "waits-for"))
        .map(|n| (attr(n, "data-from").into(), attr(n, "data-to").into(), title(n)))
        .collect();
    assert_eq!(arrows.len(), 2, "{arrows:?}");
    assert!(arrows.contains(&(
        "sampler".into(),
        "main".into(),
        "sampler waits for main (lock code_manager)".into()
    )));
    assert!(arrows.contains(&(
        "main".into(),
        "sampler".into(),
        "main waits for sampler (ResumeThread)".into()
    )));

    // What the lanes show: main suspended by the sampler while it holds the lock, the
    // sampler blocked on it at the end.
    let marks = |name: &str, class: &str| -> Vec<String> {
        lane(name)
            .descendants()
            .filter(|n| has_class(*n, class))
            .map(title)
            .collect()
    };
    assert!(marks("main", "suspended")
        .iter()
        .any(|t| t.contains("suspended by sampler")));
    assert!(marks("main", "lock")
        .iter()
        .any(|t| t.contains("holds lock code_manager")));
    let blocked = marks("sampler", "blocked");
    assert!(
        blocked
            .last()
            .is_some_and(|t| t.contains("blocked on lock code_manager")),
        "{blocked:?}"
    );
    assert!(!marks("sampler", "ran").is_empty());
    // No text runs past the picture's right edge (at about 7 pixels a character).
    let width: f64 = attr(svg, "width").parse().unwrap();
    for text in svg.descendants().filter(|n| n.has_tag_name("text")) {
        if attr(text, "text-anchor") == "end" {
            continue;
        }
        let x: f64 = attr(text, "x").parse().unwrap_or(0.0);
        let chars = text.text().unwrap_or_default().chars().count() as f64;
        assert!(x + 7.0 * chars <= width, "clipped at {width}: {:?}", text.text());
    }
    // The windows the run reached are flagged where it first reached them: the sampler
    // stopped main while it held the code manager's lock (R42).
    let flags = marks("sampler", "window");
    assert!(
        flags
            .iter()
            .any(|t| t.contains("first reached") && t.contains("r42.holds.code_manager")),
        "{flags:?}"
    );
}

#[test]
fn each_walk_is_joined_to_the_lane_of_the_thread_it_walked() {
    let text = std::fs::read_to_string(FILE).unwrap();
    let scenario = Scenario::parse(FILE, &text).unwrap();
    let mut p = process(scenario, variant("no-watchdog").unwrap()).unwrap();
    p.trace_first(1);
    let report = p.explore(Strategy::Pct(3), 20, 1, |_, _| {});
    let schedule = &report.traces["ok"][0].schedule;
    let (_, text) = replay(schedule, false, true);
    let text = text.unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap();
    let targets: Vec<&str> = (doc.descendants())
        .filter(|n| has_class(*n, "walk-target"))
        .map(|n| attr(n, "data-target"))
        .collect();
    assert!(
        !targets.is_empty() && targets.iter().all(|t| *t == "main"),
        "{targets:?}"
    );
}

#[test]
fn without_svg_the_replay_prints_the_same() {
    let schedule = deadlock_schedule();
    assert_eq!(replay(&schedule, true, true).0, replay(&schedule, true, false).0);
}

#[test]
fn the_readmes_timeline_is_current() {
    let (_, drawn) = replay("1x32.0.1x23.0x3.2.1x8", false, true);
    let committed =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/timeline.svg"))
            .unwrap();
    assert!(
        drawn.as_deref() == Some(committed.as_str()),
        "docs/timeline.svg is stale: cargo run --release -- replay {FILE} --sampler no-watchdog --schedule 1x32.0.1x23.0x3.2.1x8 --svg docs/timeline.svg"
    );
}
