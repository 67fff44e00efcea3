//! The process catalog: every scenario with thread programs finds exactly its expected
//! outcomes, its exploration and first failing trace are pinned, runs replay byte for byte,
//! and every reported deadlock cycle is re-derived from the trace by an independent checker.

use proptest::prelude::*;
use sim_clr::process::schedule::{Random, Rng, Schedule};
use sim_clr::process::{CycleLink, Process, RunReport, Strategy, TraceEntry};
use sim_clr::runtime::RuntimeVersion;
use sim_clr::scenario::Scenario;
use std::collections::{BTreeMap, BTreeSet};

// As in the CLI: built-in profiler code's allocations take the heap lock.
#[global_allocator]
static ALLOCATOR: sim_clr::process::HeapLockAllocator<std::alloc::System> =
    sim_clr::process::HeapLockAllocator(std::alloc::System);

fn processes() -> Vec<Scenario> {
    fixtures::processes().unwrap_or_else(|e| panic!("process scenario does not parse: {e}"))
}

/// A catalog scenario's process, with the built-in profiler code it names attached.
fn process(scenario: Scenario) -> Process {
    fixtures::behaviours::process(scenario).unwrap()
}

#[test]
fn the_catalog_covers_the_failure_stories() {
    let names: BTreeSet<String> = processes().into_iter().map(|s| s.name).collect();
    for required in [
        "loader-lock-hang",
        "heap-lock-sampler-allocates",
        "profiler-lock-in-callback",
        "mutual-suspension-gc",
        "thread-destroyed-no-lock",
        "thread-destroyed-with-lock",
        "thread-destroyed-walk-unix",
        "exit-before-suspend",
        "async-suspend-torn-read",
        "leaked-suspend-runtime",
        "signal-handler-allocates",
        "correct-sampler-control",
        "snapshot-sampler-unix",
        "join-cycle",
        "two-walkers-one-target",
        "gc-waits-for-walk",
    ] {
        assert!(names.contains(required), "{required} is missing");
    }
    assert!(names.len() >= 12);
}

/// Each version the conformance lane observes: the catalog's outcomes are the same on both.
const OBSERVED: [RuntimeVersion; 2] = [RuntimeVersion::Core31, RuntimeVersion::Net8];

#[test]
fn every_process_finds_exactly_its_expected_outcomes_on_every_observed_version() {
    let all = OBSERVED
        .into_iter()
        .flat_map(|v| fixtures::processes_as(Some(v)).unwrap());
    for scenario in all {
        let spec = scenario.process.explore.clone();
        let expect = spec
            .expect
            .clone()
            .expect("every catalog process states its outcomes");
        let report = process(scenario.clone()).explore(spec.strategy, spec.schedules, spec.seed, |_, _| {});
        let found: Vec<String> = report.found().into_iter().map(str::to_string).collect();
        let version = scenario.config.version;
        assert_eq!(found, expect, "{} on {version}", scenario.name);
        // A control explored by DFS must finish; one explored by random choices (the thread
        // churn recipe, too big for DFS) is ok in every schedule it ran.
        if expect == ["ok"] && matches!(spec.strategy, Strategy::Dfs(_)) {
            assert!(
                report.exhaustive,
                "{} on {version}: the control must cover every DFS schedule",
                scenario.name
            );
        }
    }
}

#[test]
fn explorations_and_first_failures_are_pinned() {
    for scenario in processes() {
        let spec = scenario.process.explore.clone();
        let process = process(scenario.clone());
        let report = process.explore(spec.strategy, spec.schedules, spec.seed, |_, _| {});
        let first = report.first_failure.as_ref().map(|f| {
            let schedule: Schedule = f.schedule.parse().unwrap();
            process.replay(&schedule).unwrap()
        });
        insta::assert_json_snapshot!(
            format!("process-{}", scenario.name),
            serde_json::json!({ "explore": report, "first_failure_run": first })
        );
    }
}

/// The traces of every schedule of catalog process `name` (it must be one DFS explores
/// exhaustively, every run `ok`).
fn every_ok_trace(name: &str) -> Vec<Vec<TraceEntry>> {
    let scenario = processes().into_iter().find(|s| s.name == name).unwrap();
    let spec = scenario.process.explore.clone();
    let mut process = process(scenario);
    process.trace_first(usize::MAX);
    let report = process.explore(spec.strategy, spec.schedules, spec.seed, |_, _| {});
    assert!(report.exhaustive, "{name}");
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{name}");
    let runs = &report.traces["ok"];
    assert_eq!(runs.len() as u64, report.schedules_run, "{name}");
    runs.iter().map(|r| r.trace.clone()).collect()
}

/// The entries of `trace` between the start of a walk of `target` and its end, walker by
/// walker: what happened while the walk held its target.
fn during_walks<'t>(trace: &'t [TraceEntry], target: &str) -> Vec<&'t TraceEntry> {
    let (start, end) = (
        format!("DoStackSnapshot {target}: walking"),
        format!("DoStackSnapshot {target} →"),
    );
    let mut walker: Option<&str> = None;
    let mut during = Vec::new();
    for e in trace {
        match walker {
            None if e.what.starts_with(&start) => walker = Some(&e.thread),
            Some(w) if e.thread == w && e.what.starts_with(&end) => walker = None,
            Some(_) => during.push(e),
            None => {}
        }
    }
    during
}

/// Walks take time (a step per reported frame): meanwhile the target stays suspended, a
/// second walk of it is refused with CORPROF_E_STACKSNAPSHOT_UNSAFE (R8) rather than waiting,
/// and a GC started meanwhile finishes only after the walk has resumed the target.
#[test]
fn a_walk_holds_its_target_until_it_ends() {
    let mut refused = 0;
    for trace in every_ok_trace("two-walkers-one-target") {
        let during = during_walks(&trace, "main");
        assert!(during.iter().all(|e| e.thread != "main"), "{trace:#?}");
        refused += during
            .iter()
            .filter(|e| {
                e.what
                    .contains("DoStackSnapshot main → 0x80131360 CORPROF_E_STACKSNAPSHOT_UNSAFE")
            })
            .count();
    }
    assert!(refused > 0, "no schedule walked main twice at once");
    let mut gc_waited = 0;
    for trace in every_ok_trace("gc-waits-for-walk") {
        let during = during_walks(&trace, "main");
        assert!(during.iter().all(|e| e.thread != "main"), "{trace:#?}");
        // A GC that starts during the walk waits for it (one that found main parked before
        // the walk began has every thread at a safe point already).
        if let Some(gc) = during
            .iter()
            .position(|e| e.what == "gc: runtime suspension starts")
        {
            assert!(
                during[gc..]
                    .iter()
                    .all(|e| e.what != "gc: every thread at a safe point"),
                "the GC finished its suspension during the walk: {trace:#?}"
            );
            gc_waited += 1;
        }
    }
    assert!(gc_waited > 0, "no GC started during a walk");
}

/// A walk of a thread whose `ThreadDestroyed` has returned is the profiler's fault on both
/// paths: under the profiler's `SuspendRuntime` (Unix; nothing in the runtime checks, the
/// walk goes on) and cross-thread (Windows; the runtime terminates the process), whether the
/// `Thread` is still there (`walk_of_destroyed_thread`) or already freed
/// (`thread_use_after_free`).
#[test]
fn a_walk_after_thread_destroyed_returned_is_a_fault_on_both_paths_before_and_after_the_free() {
    let paths = [
        ("thread-destroyed-walk-unix", "the walk goes on"),
        ("thread-destroyed-no-lock", "the process is terminated"),
    ];
    for (name, consequence) in paths {
        let scenario = processes().into_iter().find(|s| s.name == name).unwrap();
        let spec = scenario.process.explore.clone();
        let mut p = process(scenario);
        p.trace_first(1);
        let report = p.explore(spec.strategy, spec.schedules, spec.seed, |_, _| {});
        for (outcome, freed) in [
            ("walk_of_destroyed_thread", false),
            ("thread_use_after_free", true),
        ] {
            let traced = &report
                .traces
                .get(outcome)
                .unwrap_or_else(|| panic!("{name}: no {outcome}"))[0];
            let at = |what: &str| traced.trace.iter().position(|e| e.what.contains(what));
            let returned = at("thread dead").unwrap_or_else(|| panic!("{name}: {outcome}"));
            let walk = at("DoStackSnapshot main").unwrap_or_else(|| panic!("{name}: {outcome}"));
            assert!(
                returned < walk,
                "{name}: {outcome}: the walk came after ThreadDestroyed returned"
            );
            assert_eq!(
                at("Thread deleted").is_some_and(|d| d < walk),
                freed,
                "{name}: {outcome}"
            );
            let run = p.replay(&traced.schedule.parse().unwrap()).unwrap();
            let fault = run.fault.unwrap();
            assert_eq!(fault.kind, outcome, "{name}");
            if !freed {
                assert!(fault.message.contains(consequence), "{name}: {}", fault.message);
            }
        }
    }
}

#[test]
fn the_same_seed_gives_a_byte_identical_trace() {
    for scenario in processes() {
        let process = process(scenario);
        for seed in 0..20 {
            let a = process.run(&mut Random(Rng::new(seed))).unwrap();
            let b = process.run(&mut Random(Rng::new(seed))).unwrap();
            assert_eq!(
                serde_json::to_string(&a).unwrap(),
                serde_json::to_string(&b).unwrap()
            );
            // And the recorded schedule replays the same run.
            let c = process.replay(&a.schedule.parse().unwrap()).unwrap();
            assert_eq!(a, c);
        }
    }
}

/// What the trace says each thread holds and waits for, rebuilt line by line with no access
/// to the engine's state.
#[derive(Default)]
struct Rebuilt {
    /// lock name → holder.
    held: BTreeMap<String, String>,
    /// target → its suspenders (one entry per suspension).
    suspended: BTreeMap<String, Vec<String>>,
    /// thread → what its last line says it waits for.
    waiting: BTreeMap<String, String>,
    /// The thread whose GC is in progress.
    gc: Option<String>,
    /// Threads parked for a runtime suspension.
    parked: BTreeSet<String>,
    /// Threads whose code ended.
    ended: BTreeSet<String>,
}

fn rebuild(run: &RunReport) -> Rebuilt {
    let mut r = Rebuilt::default();
    // The run's last line announces the deadlock itself: not a step.
    let steps = run.trace.iter().filter(|e| !e.what.starts_with("deadlock: "));
    for e in steps {
        let who = e.thread.clone();
        let w = e.what.as_str();
        r.waiting.remove(&who);
        if let Some((_, lock)) = w.split_once(": waits for lock ") {
            r.waiting.insert(who, format!("lock {lock}"));
        } else if let Some(joined) = w
            .strip_prefix("join ")
            .and_then(|j| j.strip_suffix(": waits for its end"))
        {
            r.waiting.insert(who, format!("join {joined}"));
        } else if w == "ends" {
            r.ended.insert(who);
        } else if let Some(lock) = w.strip_prefix("lock ") {
            r.held.insert(lock.to_string(), who);
        } else if let Some(lock) = w.strip_prefix("unlock ") {
            r.held.remove(lock);
        } else if w == "alloc: takes lock heap" {
            r.held.insert("heap".into(), who);
        } else if w == "alloc: releases lock heap" {
            r.held.remove("heap");
        } else if let Some(rest) = w.strip_prefix("SuspendThread ") {
            if let Some((target, "ok 0" | "ok 1" | "ok 2")) = rest.split_once(" → ") {
                r.suspended.entry(target.into()).or_default().push(who);
            }
        } else if let Some(rest) = w.strip_prefix("ResumeThread ") {
            if let Some((target, result)) = rest.split_once(" → ") {
                if result.starts_with("ok") {
                    r.suspended.entry(target.into()).or_default().pop();
                }
            }
        } else if w == "gc: runtime suspension starts" {
            r.gc = Some(who.clone());
            r.waiting.insert(who, "safe point".into());
        } else if w.starts_with("gc: collected") {
            r.gc = None;
            r.parked.clear();
        } else if w.starts_with("parks at a safe point") {
            r.parked.insert(who);
        }
    }
    r
}

/// Checks one link against the rebuilt state: the waiter really waits for that, and the
/// thread named really is the one that must act.
fn confirm(r: &Rebuilt, link: &CycleLink) -> Result<(), String> {
    let ok = match link.waits_for.as_str() {
        "ResumeThread" => r
            .suspended
            .get(&link.thread)
            .is_some_and(|by| by.contains(&link.held_by)),
        "safe point" => r.gc.as_deref() == Some(link.thread.as_str()) && !r.parked.contains(&link.held_by),
        "join" => {
            r.waiting.get(&link.thread) == Some(&format!("join {}", link.held_by))
                && !r.ended.contains(&link.held_by)
        }
        "end of the runtime suspension" => {
            r.parked.contains(&link.thread) && r.gc.as_deref() == Some(link.held_by.as_str())
        }
        lock => {
            let name = lock.strip_prefix("lock ").unwrap_or(lock);
            r.waiting.get(&link.thread).map(String::as_str) == Some(lock)
                && r.held.get(name) == Some(&link.held_by)
        }
    };
    if ok {
        Ok(())
    } else {
        Err(format!("the trace does not show {link:?}"))
    }
}

#[test]
fn every_reported_cycle_is_rederived_from_the_trace() {
    let mut checked = 0;
    for scenario in processes() {
        let process = process(scenario.clone());
        for seed in 0..300 {
            let run = process.run(&mut Random(Rng::new(seed))).unwrap();
            let Some(fault) = run.fault.as_ref().filter(|f| f.kind == "deadlock") else {
                continue;
            };
            let rebuilt = rebuild(&run);
            // A cycle: each link's holder is the next link's waiter, back to the start.
            for (i, link) in fault.cycle.iter().enumerate() {
                let next = &fault.cycle[(i + 1) % fault.cycle.len()];
                assert_eq!(link.held_by, next.thread, "{}: not a cycle", scenario.name);
                confirm(&rebuilt, link).unwrap_or_else(|e| panic!("{} seed {seed}: {e}", scenario.name));
            }
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} deadlocks checked");
}

/// A TOML process of `threads` threads, each taking some of `locks` locks in increasing order
/// (nested, released in reverse), with spins between.
fn ordered_locks(programs: &[Vec<(usize, u8)>], locks: usize) -> String {
    let mut text = String::from("name = \"ordered\"\nplatform = \"unix\"\n");
    let names: Vec<String> = (0..locks).map(|i| format!("\"L{i}\"")).collect();
    text += &format!(
        "locks = [{}]\n[[code]]\nname = \"App::Main\"\nkind = \"jit\"\n",
        names.join(", ")
    );
    for (t, program) in programs.iter().enumerate() {
        let mut taken: Vec<usize> = program.iter().map(|(l, _)| *l).collect();
        taken.sort_unstable();
        taken.dedup();
        let mut steps = Vec::new();
        for (i, l) in taken.iter().enumerate() {
            steps.push(format!("\"lock L{l}\""));
            if let Some((_, spin)) = program.get(i).filter(|(_, s)| *s > 0) {
                steps.push(format!("\"spin {spin}\""));
            }
        }
        for l in taken.iter().rev() {
            steps.push(format!("\"unlock L{l}\""));
        }
        if steps.is_empty() {
            steps.push("\"spin 1\"".into());
        }
        text += &format!(
            "[[threads]]\nname = \"t{t}\"\nframes = [{{ fn = \"App::Main\" }}]\nprogram = [{}]\n",
            steps.join(", ")
        );
    }
    text
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Locks taken in one global order never deadlock: checked over every schedule within a
    /// preemption bound of 2.
    #[test]
    fn one_global_lock_order_never_deadlocks(
        programs in prop::collection::vec(prop::collection::vec((0usize..3, 0u8..3), 0..4), 2..4)
    ) {
        let text = ordered_locks(&programs, 3);
        let scenario = Scenario::parse("ordered.toml", &text).unwrap();
        let report = Process::new(scenario).explore(sim_clr::process::Strategy::Dfs(2), 20_000, 0, |_, _| {});
        prop_assert!(report.exhaustive, "{text}");
        prop_assert_eq!(report.outcomes.keys().cloned().collect::<Vec<_>>(), vec!["ok".to_string()], "{}", text);
    }

    /// Any schedule (a random choice vector, replayed leniently) of a catalog process runs to
    /// an outcome and replays to the same report.
    #[test]
    fn arbitrary_choice_vectors_replay(choices in prop::collection::vec(0u16..4, 0..40), pick in 0usize..14) {
        let scenarios = processes();
        let scenario = scenarios[pick % scenarios.len()].clone();
        let process = process(scenario);
        let run = process.run(&mut sim_clr::process::schedule::Replay::new(&Schedule(choices), false)).unwrap();
        let again = process.replay(&run.schedule.parse().unwrap()).unwrap();
        prop_assert_eq!(run, again);
    }
}

#[test]
fn no_progress_within_the_budget_is_a_livelock_and_time_is_virtual() {
    let text = "platform = \"unix\"\nevents = [\"go\"]\n[limits]\nlivelock_ms = 5\n[[code]]\nname = \"M\"\nkind = \"jit\"\n\
        [[threads]]\nname = \"spinner\"\nframes = [{ fn = \"M\" }]\nprogram = [\"spin 100000\"]\n\
        [[threads]]\nname = \"sleeper\"\nframes = [{ fn = \"M\" }]\nprogram = [\"sleep 500ms\", \"set_event go\"]\n";
    let process = Process::new(Scenario::parse("spin.toml", text).unwrap());
    let run = process.run(&mut Random(Rng::new(3))).unwrap();
    assert_eq!(run.outcome, "livelock", "{run:?}");
    assert!(run
        .fault
        .unwrap()
        .message
        .contains("spinner made no progress for 5 ms"));
    // Without the spinner, the 500 ms sleep ends exactly at 500 ms of virtual time.
    let text = text.replace("program = [\"spin 100000\"]", "program = [\"wait_event go\"]");
    let run = Process::new(Scenario::parse("sleep.toml", &text).unwrap())
        .run(&mut Random(Rng::new(3)))
        .unwrap();
    assert_eq!(run.outcome, "ok", "{run:?}");
    let slept = run.trace.iter().find(|e| e.what.starts_with("sleep")).unwrap();
    let set = run.trace.iter().find(|e| e.what == "set_event go").unwrap();
    // It wakes exactly 500 ms after it slept; the waking step and `set_event` take 10 us each.
    assert_eq!(set.time_us, slept.time_us + 500_000 + 2 * 10, "{run:?}");
}

#[test]
fn exceptions_spawns_and_signal_masks_run_as_written() {
    let text = r#"
platform = "unix"
[runtime]
event_mask = ["ENABLE_STACK_SNAPSHOT", "MONITOR_THREADS", "MONITOR_EXCEPTIONS"]
[profiler]
thread_created = ["walk"]
exception_thrown = ["walk"]
signal_handler = ["walk"]
[[code]]
name = "M"
kind = "jit"
[[code]]
name = "W"
kind = "jit"
[[threads]]
name = "main"
frames = [{ fn = "M" }]
program = ["call W", "alloc gc", "call W", "throw", "catch 1", "end_catch", "spawn late", "mask_signals", "spin 3", "unmask_signals", "replace_signal_handler", "spin 3", "return"]
[[threads]]
name = "late"
start = "spawned"
frames = [{ fn = "M" }]
program = ["join main"]
[[threads]]
name = "signaller"
kind = "native"
program = ["signal main", "spin 5", "signal main"]
"#;
    let moves = process(Scenario::parse("moves.toml", text).unwrap());
    let report = moves.explore(sim_clr::process::Strategy::Dfs(1), 50_000, 0, |_, _| {});
    assert!(report.exhaustive);
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
    // One schedule in detail: main runs first, as far as it can.
    let lenient = |p: &Process, s: Vec<u16>| {
        p.run(&mut sim_clr::process::schedule::Replay::new(&Schedule(s), false))
            .unwrap()
    };
    let said: Vec<String> = lenient(&moves, vec![0; 40])
        .trace
        .iter()
        .map(|e| format!("{} {}", e.thread, e.what))
        .collect();
    let has = |s: &str| said.iter().any(|l| l.starts_with(s));
    assert!(has("main ExceptionThrown raised"), "{said:#?}");
    assert!(has("main gc: collected"), "`alloc gc` collects: {said:#?}");
    assert!(has("main catch 1") && has("main end_catch"), "{said:#?}");
    assert!(has("late ThreadCreated raised"), "{said:#?}");

    // A masked signal waits for the unmask; a replaced handler means the profiler's never runs.
    let signals = |main: &str| {
        let text = format!(
            "platform = \"unix\"\n[profiler]\nsignal_handler = [\"spin 1\"]\n[[code]]\nname = \"M\"\nkind = \"jit\"\n\
             [[threads]]\nname = \"main\"\nframes = [{{ fn = \"M\" }}]\nprogram = [{main}]\n\
             [[threads]]\nname = \"signaller\"\nkind = \"native\"\nprogram = [\"signal main\"]\n"
        );
        // main's first step, then the signal, then main to the end.
        let run = lenient(
            &process(Scenario::parse("signals.toml", &text).unwrap()),
            vec![0, 1],
        );
        run.trace
            .iter()
            .map(|e| format!("{} {}", e.thread, e.what))
            .collect::<Vec<_>>()
    };
    let masked = signals(r#""mask_signals", "spin 2", "unmask_signals", "spin 1""#);
    let at = |t: &[String], s: &str| t.iter().position(|l| l.starts_with(s));
    let handler = at(&masked, "main signal handler starts").expect("delivered after the unmask");
    assert!(
        handler > at(&masked, "main unmask_signals").unwrap(),
        "{masked:#?}"
    );
    let replaced = signals(r#""replace_signal_handler", "spin 2""#);
    assert!(
        at(&replaced, "main the application's own signal handler runs").is_some(),
        "{replaced:#?}"
    );
    assert!(
        at(&replaced, "main signal handler starts").is_none(),
        "{replaced:#?}"
    );
}

#[test]
fn frozen_scenarios_have_nothing_to_schedule() {
    for scenario in fixtures::scenarios().unwrap() {
        assert!(!scenario.process.moves(), "{}", scenario.name);
        let run = Process::new(scenario.clone())
            .run(&mut Random(Rng::new(0)))
            .unwrap();
        assert_eq!(
            (run.outcome.as_str(), run.steps, run.trace.len()),
            ("ok", 0, 0),
            "{}",
            scenario.name
        );
    }
}

#[test]
fn a_thread_in_an_fcall_parks_only_back_in_managed_code() {
    // main calls native code straight from managed code (an FCall: cooperative, no Frame);
    // a GC starts meanwhile. main is no safe point until it returns.
    let text = "platform = \"unix\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\n[[code]]\nname = \"native!f\"\nkind = \"native\"\n\
        [[threads]]\nname = \"main\"\nframes = [{ fn = \"M\" }]\nprogram = [\"call native!f\", \"spin 3\", \"return\", \"spin 1\"]\n\
        [[threads]]\nname = \"collector\"\nframes = [{ fn = \"M\" }]\nprogram = [\"pinvoke native!f\", \"pinvoke_return\", \"gc\"]\n";
    let p = Process::new(Scenario::parse("fcall.toml", text).unwrap());
    // main enters the FCall, then the collector runs its GC as far as it can.
    let run = p
        .run(&mut sim_clr::process::schedule::Replay::new(
            &Schedule(vec![0, 1, 1, 1, 1, 1, 0]),
            false,
        ))
        .unwrap();
    let said: Vec<String> = run
        .trace
        .iter()
        .map(|e| format!("{} {}", e.thread, e.what))
        .collect();
    let at = |s: &str| {
        said.iter()
            .position(|l| l.starts_with(s))
            .unwrap_or_else(|| panic!("no {s}: {said:#?}"))
    };
    assert!(at("main parks at a safe point") > at("main return"), "{said:#?}");
    assert!(
        at("collector gc: every thread at a safe point") > at("main parks at a safe point"),
        "{said:#?}"
    );
    assert_eq!(run.outcome, "ok");
}

/// A program's `reverse_pinvoke` lays what the runtime version lays under the method: CoreCLR
/// 3.1 a `UMThkCallFrame`, .NET 8 no Frame at all (its `ReversePInvokeFrame` is a struct, not
/// on the Frame chain); `reverse_pinvoke_return` takes off what the step put on, either way.
#[test]
fn a_reverse_pinvoke_lays_the_frames_of_its_version() {
    use sim_clr::thread::{FrameKind, StackEntry};
    for (version, expected) in [("3.1", vec![FrameKind::ReversePInvoke]), ("8.0", vec![])] {
        let text = format!(
            "platform = \"unix\"\n[runtime]\nversion = \"{version}\"\n\
             [[code]]\nname = \"App::OnData\"\nkind = \"jit\"\n\
             [[code]]\nname = \"driver!loop\"\nkind = \"native\"\n\
             [[threads]]\nname = \"u\"\nkind = \"native\"\nframes = [{{ fn = \"driver!loop\" }}]\n\
             program = [\"reverse_pinvoke App::OnData\", \"spin 40\", \"reverse_pinvoke_return\", \"spin 2\"]\n\
             [[threads]]\nname = \"watcher\"\nkind = \"native\"\nframes = [{{ fn = \"driver!loop\" }}]\n"
        );
        // The watcher notes u's stack at each of its steps.
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        let watch = move |rt: &sim_clr::Runtime, os: &sim_clr::process::SimOs| {
            use corprof::os::Sync;
            for _ in 0..100 {
                into.lock().unwrap().push(rt.thread("u").unwrap().stack.to_vec());
                os.sleep(std::time::Duration::from_micros(10));
            }
        };
        let mut p = Process::new(Scenario::parse("rp.toml", &text).unwrap());
        p.thread_body("watcher", std::sync::Arc::new(watch)).unwrap();
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "ok", "{version}: {:?}", run.fault);
        let seen = seen.lock().unwrap();
        // Inside the method: its call, the version's Frames, then the native caller.
        let inside = (seen.iter().find(|s| s.len() > 1))
            .unwrap_or_else(|| panic!("{version}: never inside the method"));
        assert!(
            matches!(inside[0], StackEntry::Call { .. }),
            "{version}: {inside:?}"
        );
        let frames: Vec<FrameKind> = (inside[1..inside.len() - 1].iter())
            .map(|e| match e {
                StackEntry::Frame(kind) => *kind,
                StackEntry::Call { .. } => panic!("{version}: a call under the method: {inside:?}"),
            })
            .collect();
        assert_eq!(frames, expected, "{version}");
        assert_eq!(
            seen.last().unwrap().len(),
            1,
            "{version}: back to the caller alone"
        );
    }
}
