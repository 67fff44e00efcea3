//! A sampler of one's own, judged by the public oracle. A profiler team's Windows-design
//! sampler (`SuspendThread`, `GetThreadContext`, the hybrid walk, `ResumeThread`), written
//! from scratch against `corprof` and `walker` as a user's crate would
//! (`examples/team_sampler/sampler.rs`), runs in a pitfall's process; `fixtures::sampling::Judge` judges each of its samples against the
//! ground truth at the instant the target stopped, with the verdicts the reference gets. The
//! pitfall catalog and the fuzzer run it too.

#[path = "../examples/team_sampler/sampler.rs"]
mod sampler;

use sampler::team_sampler;
use sim_clr::process::{Process, SimOs, Strategy};
use sim_clr::runtime::Runtime;
use sim_clr::scenario::Scenario;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Pitfall `name`'s process with the team's sampler on its `sampler` thread, counting the
/// samples judged into `judged`.
fn process(name: &str, drop_leaf: bool, judged: &Arc<AtomicU64>) -> Process {
    let (_, text) = fixtures::pitfall_catalog()
        .iter()
        .find(|(file, _)| file.strip_suffix(".toml") == Some(name))
        .expect("a pitfall");
    let mut process = Process::new(Scenario::parse(name, text).unwrap());
    process
        .thread_body("sampler", team_sampler(drop_leaf, judged.clone()))
        .unwrap();
    process
        .thread_body("watchdog", Arc::new(|_: &Runtime, _: &SimOs| {}))
        .unwrap();
    process
}

#[test]
fn the_oracle_passes_a_correct_sampler_of_ones_own() {
    // A helper on top, a buffer overrun, a frame pointer into another stack: the team's walk
    // stops where a correct one must, and every sample is judged right.
    for pitfall in [
        "s29-helper-on-top",
        "s33-stack-overrun",
        "s35-frame-pointer-into-another-stack",
    ] {
        let judged = Arc::new(AtomicU64::new(0));
        let report = process(pitfall, false, &judged).explore(Strategy::Pct(3), 200, 1, |_, _| {});
        assert_eq!(
            report.outcomes.keys().collect::<Vec<_>>(),
            ["ok"],
            "{pitfall}: {report:?}"
        );
        let judged = judged.load(Ordering::Relaxed);
        assert!(
            judged >= 200,
            "{pitfall}: only {judged} samples judged in 200 runs"
        );
    }
}

#[test]
fn the_oracle_catches_a_sampler_of_ones_own_that_drops_a_frame() {
    let judged = Arc::new(AtomicU64::new(0));
    let report = process("s33-stack-overrun", true, &judged).explore(Strategy::Pct(3), 200, 1, |_, _| {});
    let failure = report.first_failure.expect("caught").fault;
    assert_eq!(failure.kind, "wrong_sample", "{failure:?}");
    assert!(
        failure.message.contains("the sample of main is wrong"),
        "{failure:?}"
    );
}

#[test]
fn the_pitfall_catalog_runs_against_a_sampler_of_ones_own_in_one_call() {
    let judged = Arc::new(AtomicU64::new(0));
    let attach = |process: &mut Process| -> Result<(), String> {
        process
            .thread_body("sampler", team_sampler(false, judged.clone()))
            .map_err(|e| e.to_string())?;
        process
            .thread_body("watchdog", Arc::new(|_: &Runtime, _: &SimOs| {}))
            .map_err(|e| e.to_string())?;
        Ok(())
    };
    // Every Windows-design pitfall whose profiler threads are a sampler and a watchdog.
    let reports =
        fixtures::sampling::explore_pitfalls(&["sampler", "watchdog"], &attach, Strategy::Pct(3), 100, 1)
            .unwrap();
    let outcomes = |name: &str| {
        let report = reports.iter().find(|r| r.scenario == name).expect(name);
        report.outcomes.keys().cloned().collect::<Vec<_>>()
    };
    assert!(reports.len() > 20, "{} pitfalls run", reports.len());
    assert!(reports.iter().all(|r| r.schedules_run == 100));
    // Where the design holds.
    for name in [
        "s29-helper-on-top",
        "s33-stack-overrun",
        "s35-frame-pointer-into-another-stack",
    ] {
        assert_eq!(outcomes(name), ["ok"], "{name}");
    }
    // What it lacks, found by the stories written for the reference: a watchdog (a target
    // stopped holding the code manager's lock), a stack-pointer check (a seed off the stack),
    // a stop when the application crashes, a lock shared with ThreadDestroyed.
    assert!(outcomes("s05-code-manager-lock").contains(&"deadlock".to_string()));
    assert!(outcomes("s12-hijacked-rsp").contains(&"wrong_sample".to_string()));
    assert_eq!(outcomes("s20-crash"), ["sampled_after_crash"]);
    assert!(outcomes("s07-thread-exits").contains(&"wrong_sample".to_string()));
    assert!(judged.load(Ordering::Relaxed) > 0);
}

/// A random process with the team's sampler on its profiler threads.
fn attach_everywhere(scenario: Scenario) -> Result<Process, String> {
    let mut process = Process::new(scenario);
    sampler::attach(&mut process)?;
    Ok(process)
}

#[test]
fn the_fuzzer_runs_a_sampler_of_ones_own_in_random_windows_processes() {
    let options = fixtures::fuzz::Options {
        processes: 40,
        schedules: 4,
        seed: 1,
        shrinks: 16,
        max_failures: Some(1),
        platform: Some("windows"),
        jobs: 1,
        shard: sim_clr::process::Shard::WHOLE,
    };
    let report = fixtures::fuzz::fuzz(options, &attach_everywhere, |_, _| {}).unwrap();
    // Processes nothing was written for find a rule the design breaks (it shares no lock
    // with ThreadDestroyed), shrunk to a file and a schedule that replay it.
    let failure = report.failures.first().expect("a failure");
    assert!(
        failure.message.contains("after its ThreadDestroyed returned"),
        "{failure:?}"
    );
    let shrunk = Scenario::parse("shrunk.toml", &failure.scenario).unwrap();
    let again = attach_everywhere(shrunk)
        .unwrap()
        .replay(&failure.schedule.parse().unwrap())
        .unwrap();
    assert_eq!(again.outcome, failure.outcome, "{failure:?}");
}
