//! The team's sampler in random Windows processes nothing was written for: the fuzzer finds a
//! rule the design breaks and shrinks it to a file and a schedule that replay it.

use sim_clr::process::Process;
use sim_clr::scenario::Scenario;

/// A random process with the team's sampler on its profiler threads.
fn attach_everywhere(scenario: Scenario) -> Result<Process, String> {
    let mut process = Process::new(scenario);
    team_sampler::attach(&mut process)?;
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
    // with ThreadDestroyed: it walks a thread after its ThreadDestroyed returned, before or
    // after the runtime freed the Thread), shrunk to a file and a schedule that replay it.
    let failure = report.failures.first().expect("a failure");
    assert!(
        ["walk_of_destroyed_thread", "thread_use_after_free"].contains(&failure.outcome.as_str()),
        "{failure:?}"
    );
    let shrunk = Scenario::parse("shrunk.toml", &failure.scenario).unwrap();
    let again = attach_everywhere(shrunk)
        .unwrap()
        .replay(&failure.schedule.parse().unwrap())
        .unwrap();
    assert_eq!(again.outcome, failure.outcome, "{failure:?}");
}
