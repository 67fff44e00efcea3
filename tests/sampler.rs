//! The reference sampler (`walker::sampler`) on every pitfall scenario, each sample judged
//! against the ground truth at the instant it was taken, and every mutant caught by the
//! failure story it breaks. CI runs the same at scale: `simclr explore` with 10⁴ schedules
//! per pitfall, and `simclr mutants`.

use fixtures::sampling::{mutants, process, Variant};
use sim_clr::process::schedule::{Random, Rng};
use sim_clr::process::Strategy;
use sim_clr::runtime::RuntimeVersion;
use sim_clr::scenario::Scenario;

// Profiler code's allocations on simulated threads take the process heap lock.
#[global_allocator]
static ALLOCATOR: sim_clr::process::HeapLockAllocator<std::alloc::System> =
    sim_clr::process::HeapLockAllocator(std::alloc::System);

/// The text of pitfall `name`.
fn pitfall_text(name: &str) -> &'static str {
    fixtures::pitfall_catalog()
        .iter()
        .find(|(file, _)| file.trim_end_matches(".toml") == name)
        .unwrap_or_else(|| panic!("no pitfall {name}"))
        .1
}

fn pitfall(name: &str) -> Scenario {
    Scenario::parse(&format!("{name}.toml"), pitfall_text(name)).unwrap()
}

#[test]
fn the_reference_sampler_survives_every_pitfall_on_every_version() {
    let mut differs = Vec::new();
    for version in RuntimeVersion::ALL {
        let all = fixtures::pitfalls_as(Some(version)).unwrap();
        assert!(all.len() >= 28);
        for scenario in all {
            let name = format!("{} on {version}", scenario.name);
            let p = process(scenario, Variant::REFERENCE).unwrap();
            // The default version most, the others half as long.
            let share = if version == RuntimeVersion::default() {
                2
            } else {
                1
            };
            for (strategy, n) in [(Strategy::Pct(3), 20 * share), (Strategy::Random, 10 * share)] {
                let report = p.explore(strategy, n, 7, |_, _| {});
                let outcomes: Vec<&String> = report.outcomes.keys().collect();
                if outcomes != ["ok"] {
                    differs.push(format!("{name}: {outcomes:?}"));
                }
            }
        }
    }
    assert_eq!(differs, Vec::<String>::new());
}

/// How a sampler that uses a thread after its `ThreadDestroyed` returned may fail: the
/// runtime's fatal error or use-after-free, or the oracle's verdict on the sample.
const AFTER_DESTROYED: &[&str] = &[
    "walk_of_destroyed_thread",
    "thread_use_after_free",
    "wrong_sample",
];

/// Each mutant, on the scenario that tells its failure story, and how that run may end.
const STORIES: [(&str, &str, &[&str]); 28] = [
    (
        "allocate-while-suspended",
        "s03-heap-lock",
        &["lock_while_suspending"],
    ),
    (
        "lock-in-walk-callback",
        "s04-profiler-lock",
        &["lock_while_suspending"],
    ),
    ("no-destroyed-recheck", "s24-canary", AFTER_DESTROYED),
    ("read-before-context", "s08-async-suspend", &["torn_stack_read"]),
    (
        "leak-suspend-on-failure",
        "s09-context-fails",
        &["hang", "deadlock", "lock_while_suspending"],
    ),
    (
        "walk-without-suspend-runtime",
        "s11-unix-cross-thread",
        &["wrong_sample"],
    ),
    (
        "lock-in-signal-handler",
        "s17-signal-in-malloc",
        &["lock_in_signal_handler"],
    ),
    ("no-bounds-check", "s12-hijacked-rsp", &["access_violation"]),
    ("unlocked-thread-destroyed", "s24-canary", AFTER_DESTROYED),
    ("ignore-crash", "s20-crash", &["sampled_after_crash"]),
    ("no-watchdog", "s05-code-manager-lock", &["deadlock"]),
    ("dropped-seed", "s29-helper-on-top", &["lost_sample"]),
    ("native-seed", "s29-helper-on-top", &["lost_sample"]),
    ("tier0-ranges", "s30-tier1-code", &["wrong_sample"]),
    ("unflagged-limit", "s21-deep-recursion", &["wrong_sample"]),
    ("resume-before-walk", "s08-async-suspend", &["torn_stack_read"]),
    ("no-restart", "s31-signal-interrupts-read", &["app_saw_eintr"]),
    ("retry-aborted", "s21-deep-recursion", &["livelock"]),
    ("ignored-thread-created", "s22-thread-churn", &["lost_sample"]),
    ("ignored-thread-assigned", "s22-thread-churn", &["lost_sample"]),
    (
        "untimed-wait",
        "s19-signal-handler-replaced",
        &["livelock", "hang"],
    ),
    (
        "no-alt-stack",
        "s32-unix-bad-stack-pointer",
        &["access_violation"],
    ),
    ("ignored-thread-destroyed", "s24-canary", AFTER_DESTROYED),
    ("unchecked-reads", "s33-stack-overrun", &["access_violation"]),
    ("tombstoned-thread-ids", "s37-reused-thread-id", &["lost_sample"]),
    ("stale-os-ids", "s38-reused-os-id", &["lost_sample"]),
    (
        "frame-info-after-walk",
        "s39-frame-info-after-walk",
        &["stale_frame_info"],
    ),
    (
        "managed-sampler-thread",
        "s06-gc-while-suspended",
        &["managed_suspender"],
    ),
];

/// The pitfall `name`, answering as `version`.
fn pitfall_as(name: &str, version: RuntimeVersion) -> Scenario {
    Scenario::parse_as(&format!("{name}.toml"), pitfall_text(name), Some(version)).unwrap()
}

#[test]
fn every_mutant_fails_its_own_story_within_1000_schedules_on_every_observed_version() {
    let all = mutants();
    assert_eq!(all.len(), STORIES.len());
    for (name, story, outcomes) in STORIES {
        for version in [RuntimeVersion::Core31, RuntimeVersion::Net8] {
            caught(
                all.iter().find(|m| m.name == name).unwrap(),
                pitfall_as(story, version),
                outcomes,
            );
        }
    }
}

/// `mutant` fails `story` within 1,000 PCT schedules, ending as one of `outcomes`, and the
/// shrunk schedule replays to the same outcome.
fn caught(mutant: &fixtures::sampling::Mutant, story: Scenario, outcomes: &[&str]) {
    let name = mutant.name;
    let on = format!("{} on {}", story.name, story.config.version);
    let p = process(story, mutant.variant).unwrap();
    let (ran, failed) = p.first_failure(Strategy::Pct(3), 1000, 1);
    let run = failed.unwrap_or_else(|| panic!("{name} escaped {on} in {ran} schedules"));
    assert!(
        outcomes.contains(&run.outcome.as_str()),
        "{name} on {on}: {run:?}"
    );
    // The shrunk schedule replays, strictly, to the same outcome.
    let schedule = run.schedule.parse().unwrap();
    let (shrunk, again) = sim_clr::process::shrink::shrink(&p, &schedule, &run.outcome, 100).unwrap();
    // Shrinking makes thread switches fewer first, then choices.
    let size = |s: &sim_clr::process::schedule::Schedule| (s.0.chunk_by(|a, b| a == b).count(), s.0.len());
    assert!(
        size(&shrunk) <= size(&schedule),
        "{name} on {on}: {shrunk} is not smaller than {schedule}"
    );
    assert_eq!(p.replay(&shrunk).unwrap().outcome, again.outcome);
}

#[test]
fn random_schedules_let_the_sampler_sample_where_the_application_is_short() {
    // S7's threads exit after a few steps, fewer than the sampler's start-up takes: the
    // random strategy's per-run odds between the profiler's threads and the application's
    // still let it sample there in many runs (`simclr sample-rates` measures every pitfall).
    for strategy in [Strategy::Random, Strategy::Pct(3)] {
        let rate = fixtures::sampling::rate(pitfall("s07-thread-exits"), strategy, 200, 1).unwrap();
        assert_eq!(rate.runs, 200);
        assert!(rate.runs_sampled > 10, "{rate:?}");
        assert!(rate.samples >= rate.runs_sampled, "{rate:?}");
    }
}

/// Whether some run of `story` under the first `runs` random schedules has a trace line that
/// `inside` accepts while a GC is under way.
fn sampled_during_gc(story: &str, runs: u64, inside: impl Fn(&str) -> bool) -> bool {
    let p = process(pitfall(story), Variant::REFERENCE).unwrap();
    (0..runs).any(|seed| {
        let run = p.run(&mut Random(Rng::new(seed))).unwrap();
        let mut in_gc = false;
        run.trace.iter().any(|e| {
            if e.what.contains("gc: runtime suspension starts") {
                in_gc = true;
            } else if e.what.contains("gc: collected") {
                in_gc = false;
            }
            in_gc && inside(&e.what)
        })
    })
}

#[test]
fn s25_samples_a_redirected_thread_while_a_gc_waits() {
    assert!(sampled_during_gc("s25-gc-redirected", 2000, |what| {
        what.starts_with("GetThreadContext idle")
    }));
}

/// S5 with a thread that holds the code manager's writer lock almost all the time: every
/// sample of it gets stuck resolving its IP until the watchdog resumes it.
fn stuck() -> Scenario {
    let (file, text) = fixtures::pitfall_catalog()
        .iter()
        .find(|(f, _)| f.starts_with("s05-"))
        .unwrap();
    let once =
        r#"program = ["call App::Work", "lock code_manager", "spin 3", "unlock code_manager", "return"]"#;
    let held = r#"program = ["call App::Work", "loop 12", "lock code_manager", "spin 60", "unlock code_manager", "end", "return"]"#;
    assert!(text.contains(once));
    Scenario::parse(file, &text.replace(once, held)).unwrap()
}

#[test]
fn the_watchdog_gives_a_thread_up_after_5_rescues() {
    let variant = Variant {
        rounds: 10,
        ..Variant::REFERENCE
    };
    let p = process(stuck(), variant).unwrap();
    let mut exhausted = 0;
    for seed in 0..20 {
        let run = p.run(&mut Random(Rng::new(seed))).unwrap();
        assert_eq!(run.outcome, "ok", "{:?}", run.fault);
        let by = |thread: &str, what: &str| {
            run.trace
                .iter()
                .filter(|e| e.thread == thread && e.what.starts_with(what))
                .count()
        };
        let rescues = by("watchdog", "ResumeThread main");
        assert!(rescues <= 5, "seed {seed}: {rescues} rescues");
        if rescues == 5 {
            exhausted += 1;
            // Once its budget is spent, the thread is not suspended again (within 30 s).
            let fifth = run
                .trace
                .iter()
                .filter(|e| e.thread == "watchdog" && e.what.starts_with("ResumeThread main"))
                .nth(4)
                .unwrap()
                .step;
            assert!(
                !run.trace.iter().any(|e| e.step > fifth
                    && e.thread == "sampler"
                    && e.what.starts_with("SuspendThread main")),
                "seed {seed}: main suspended after its 5th rescue"
            );
        }
    }
    assert!(exhausted > 0, "no schedule spent the budget");
}

#[test]
fn a_sample_of_a_thread_whose_thread_destroyed_returned_is_wrong() {
    // The schedule `simclr explore fixtures/pitfalls/s07-thread-exits.toml --sampler
    // unlocked-thread-destroyed --strategy pct --seed 1` finds: the sampler re-checks the
    // worker under its per-thread lock, the worker's ThreadDestroyed (which does not take
    // the lock) runs and returns, and only then does the sampler suspend it.
    let schedule = "3x3.2x32.0.2x39.0x12.1x13.2x6".parse().unwrap();
    let unlocked = fixtures::sampling::variant("unlocked-thread-destroyed").unwrap();
    let run = process(pitfall("s07-thread-exits"), unlocked)
        .unwrap()
        .replay(&schedule)
        .unwrap();
    assert_eq!(run.outcome, "wrong_sample");
    let message = run.fault.unwrap().message;
    assert!(
        message.contains("worker was stopped for a sample after its ThreadDestroyed returned"),
        "{message}"
    );
    // The reference's ThreadDestroyed waits for the sample: its PCT schedules end ok.
    let reference = process(pitfall("s07-thread-exits"), Variant::REFERENCE).unwrap();
    let report = reference.explore(Strategy::Pct(3), 200, 1, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"]);
}

/// The reference on pitfall `name` under `runs` random schedules, each of which must end ok:
/// how many stops met `hazard`.
fn reference_stops_meeting(name: &str, hazard: &str, runs: u64) -> u64 {
    let p = process(pitfall(name), Variant::REFERENCE).unwrap();
    (0..runs)
        .map(|seed| {
            let run = p.run(&mut Random(Rng::new(seed))).unwrap();
            assert_eq!(run.outcome, "ok", "{name}: {run:?}");
            run.hazards.get(hazard).copied().unwrap_or(0)
        })
        .sum()
}

#[test]
fn the_reference_samples_threads_whose_stack_a_buffer_overrun_corrupted() {
    // Each of those stops was judged: the walk stopped inside the stack, at the frame the
    // overrun overwrote with text (S33) or after the caller found from the RBP it overwrote
    // with a pointer into another stack (S35).
    for story in ["s33-stack-overrun", "s35-frame-pointer-into-another-stack"] {
        let corrupt = reference_stops_meeting(story, "corrupt_stack", 40);
        assert!(corrupt >= 40, "{story}: {corrupt} stops met the overrun");
    }
}

#[test]
fn leaving_a_frame_a_buffer_overrun_corrupted_ends_the_run() {
    let text = pitfall_text("s33-stack-overrun").replace(
        r#""overrun", "spin 40""#,
        r#""overrun", "spin 2", "pinvoke_return""#,
    );
    let p = process(Scenario::parse("s33.toml", &text).unwrap(), Variant::REFERENCE).unwrap();
    let run = p.run(&mut Random(Rng::new(1))).unwrap();
    assert_eq!(run.outcome, "unbalanced_return", "{run:?}");
    let message = run.fault.unwrap().message;
    assert!(message.contains("stack-cookie check"), "{message}");
}

#[test]
fn stack_reads_outside_the_target_stack_are_a_wrong_sample_where_that_memory_is_mapped() {
    // S33 catches `unchecked-reads` by the crash its reads of unmapped memory cause; in S35
    // the words it reads are another thread's, and only the oracle can tell.
    let mutant = mutants()
        .into_iter()
        .find(|m| m.name == "unchecked-reads")
        .unwrap();
    let p = process(pitfall("s35-frame-pointer-into-another-stack"), mutant.variant).unwrap();
    let (ran, failed) = p.first_failure(Strategy::Pct(3), 1000, 1);
    let run = failed.unwrap_or_else(|| panic!("unchecked-reads escaped S35 in {ran} schedules"));
    assert_eq!(run.outcome, "wrong_sample", "{run:?}");
}

#[test]
fn an_overrun_with_pointers_names_another_live_thread_in_preemptive_mode() {
    let text = pitfall_text("s35-frame-pointer-into-another-stack");
    for (from, to, why) in [
        (
            "\"overrun server\"",
            "\"overrun main\"",
            "not another live thread's",
        ),
        (
            "\"call App::Encode\", \"pinvoke native!encode_batch\", \"call native!copy_refs\"",
            "\"call App::Encode\", \"call native!copy_refs\"",
            "cooperative mode",
        ),
    ] {
        let edited = text.replace(from, to);
        assert_ne!(edited, text);
        let p = process(Scenario::parse("s35.toml", &edited).unwrap(), Variant::REFERENCE).unwrap();
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "unbalanced_return", "{run:?}");
        let message = run.fault.unwrap().message;
        assert!(message.contains(why), "{message}");
    }
}

#[test]
fn the_reference_stops_a_profiler_thread_that_holds_the_samplers_own_lock() {
    let held = reference_stops_meeting("s34-profiler-thread", "profiler_lock", 200);
    assert!(held > 0, "no stop met the exporter holding the registry lock");
}

#[test]
fn a_files_sampler_table_replaces_the_samplers_own_settings() {
    let text = pitfall_text("s33-stack-overrun");
    let once = text.replace("[explore]", "[sampler]\nrounds = 1\nmax_frames = 3\n\n[explore]");
    let rate = |text: &str| {
        let scenario = Scenario::parse("s33.toml", text).unwrap();
        fixtures::sampling::rate(scenario, Strategy::Random, 50, 1).unwrap()
    };
    let (three, one) = (rate(text), rate(&once));
    // One sample of its one application thread per round; cut at 3 frames, still judged right.
    assert_eq!((three.samples, one.samples), (150, 50));
    let p = process(Scenario::parse("s33.toml", &once).unwrap(), Variant::REFERENCE).unwrap();
    let report = p.explore(Strategy::Pct(3), 100, 1, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
    let zero = text.replace("[explore]", "[sampler]\nrounds = 0\n\n[explore]");
    let error = Scenario::parse("s33.toml", &zero).unwrap_err().to_string();
    assert!(
        error.contains("rounds") && error.contains("between 1 and 10000"),
        "{error}"
    );
}

/// S36: a native thread the runtime adopts mid-run (a reverse P/Invoke) is announced only by
/// `ThreadCreated` and `ThreadAssignedToOSThread`, which the reference samples from and the
/// mutant that drops them never hears.
#[test]
fn an_adopted_native_thread_is_sampled_and_lost_without_thread_created() {
    let all = mutants();
    let reference = process(pitfall("s36-adopted-native-thread"), Variant::REFERENCE).unwrap();
    let report = reference.explore(Strategy::Pct(3), 300, 1, |_, _| {});
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
    let mutant = all.iter().find(|m| m.name == "ignored-thread-created").unwrap();
    let p = process(pitfall("s36-adopted-native-thread"), mutant.variant).unwrap();
    let (ran, failed) = p.first_failure(Strategy::Pct(3), 1000, 1);
    let run = failed.unwrap_or_else(|| panic!("escaped in {ran} schedules"));
    assert_eq!(run.outcome, "lost_sample", "{run:?}");
    assert!(run.fault.as_ref().unwrap().message.contains("driver"), "{run:?}");
}

#[test]
fn a_5000_frame_recursion_sampled_whole_is_not_a_livelock() {
    // Each walk of main takes a step per frame; a walk makes progress, so the 5,000 steps of
    // one walk are not idle steps, and every schedule ends `ok` with every sample whole.
    let s21 = pitfall_text("s21-deep-recursion");
    let text = s21
        .replace("repeat = 140", "repeat = 4998")
        .replace(
            r#"program = ["spin 4", "loop 20", "call App::Recurse", "end", "spin 4", "loop 160", "return", "end"]"#,
            r#"program = ["spin 4", "call App::Recurse", "spin 4", "return", "spin 4"]"#,
        )
        .replace("[explore]", "[sampler]\nmax_frames = 8192\n\n[explore]");
    assert_ne!(text, s21);
    let deep = Scenario::parse("deep.toml", &text).unwrap();
    let p = process(deep, Variant::REFERENCE).unwrap();
    for strategy in [Strategy::Random, Strategy::Pct(3), Strategy::Dfs(2)] {
        let report = p.explore(strategy, 20, 1, |_, _| {});
        let outcomes: Vec<&String> = report.outcomes.keys().collect();
        assert_eq!(outcomes, ["ok"], "{strategy:?}: {report:?}");
        // The 5,000 frames were on the stack at each stop (`deep_stack`), three rounds a run.
        assert_eq!(
            report.hazards.get("deep_stack"),
            Some(&60),
            "{strategy:?}: {report:?}"
        );
    }
}

#[test]
fn the_reference_sampler_survives_every_failure_injection_can_give_on_every_pitfall() {
    // Every call a real runtime or OS can fail at any moment (sim_clr::runtime::INJECTED)
    // may fail: the sampler retries, skips or marks the sample, never takes a wrong one,
    // never hangs, never gives a reason the process refutes.
    let mut differs = Vec::new();
    for scenario in fixtures::pitfalls().unwrap() {
        let name = scenario.name.clone();
        let mut p = process(scenario, Variant::REFERENCE).unwrap();
        p.inject(true);
        for (strategy, n) in [(Strategy::Pct(3), 30), (Strategy::Random, 15)] {
            let report = p.explore(strategy, n, 3, |_, _| {});
            let outcomes: Vec<&String> = report.outcomes.keys().collect();
            if outcomes != ["ok"] {
                differs.push(format!("{name}: {outcomes:?} {:?}", report.first_failure));
            }
        }
    }
    assert_eq!(differs, Vec::<String>::new());
}

#[test]
fn an_exit_from_a_pinvoke_during_a_walk_never_leaves_a_frame_past_the_root() {
    // S40: the walk under SuspendRuntime once reported the managed frames of a thread that
    // had exited from its P/Invoke meanwhile (about 1 schedule in 100, either strategy).
    let p = process(pitfall("s40-exit-from-pinvoke"), Variant::REFERENCE).unwrap();
    for strategy in [Strategy::Pct(3), Strategy::Random] {
        let report = p.explore(strategy, 1_000, 1, |_, _| {});
        let outcomes: Vec<&String> = report.outcomes.keys().collect();
        assert_eq!(outcomes, ["ok"], "{strategy:?}: {:?}", report.first_failure);
    }
}
