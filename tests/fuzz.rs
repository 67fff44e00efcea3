//! The sampler fuzzer (`fixtures::fuzz`): the reference sampler survives random processes,
//! a mutant does not, and every failure it reports is a small scenario file whose schedule
//! replays to the same outcome. CI runs it at scale with `simclr fuzz`.

use fixtures::fuzz::{built_in, fuzz, random_process, Options, Report};
use fixtures::sampling::{process, variant, Variant};
use proptest::strategy::{Strategy, ValueTree};
use sim_clr::scenario::Scenario;

// Profiler code's allocations on simulated threads take the process heap lock.
#[global_allocator]
static ALLOCATOR: sim_clr::process::HeapLockAllocator<std::alloc::System> =
    sim_clr::process::HeapLockAllocator(std::alloc::System);

fn run(variant: Variant, processes: u64, seed: u64) -> Report {
    let options = Options {
        processes,
        schedules: 20,
        seed,
        shrinks: 8,
        jobs: 1,
        shard: sim_clr::process::Shard::WHOLE,
        max_failures: None,
        platform: None,
    };
    fuzz(options, &built_in(variant), |_, _| {}).expect("every generated process builds")
}

#[test]
fn the_reference_sampler_survives_random_processes() {
    let report = run(Variant::REFERENCE, 6, 3);
    assert_eq!(report.schedules_run, 6 * 20);
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
}

#[test]
fn a_mutant_fails_and_each_failure_is_a_small_file_that_replays() {
    let mutant = variant("allocate-while-suspended").unwrap();
    let report = run(mutant, 8, 2);
    assert!(
        !report.failures.is_empty(),
        "the mutant escaped 8 random processes"
    );
    for f in &report.failures {
        assert_eq!(f.outcome, "lock_while_suspending", "{f:#?}");
        assert!(f.threads.1 <= f.threads.0, "{f:#?}");
        let scenario = Scenario::parse("fuzz.toml", &f.scenario).unwrap();
        let p = process(scenario, mutant).unwrap();
        let replayed = p.replay(&f.schedule.parse().unwrap()).unwrap();
        assert_eq!(replayed.outcome, f.outcome);
        // The same file with the reference sampler in it passes that schedule's start.
        let reference = process(
            Scenario::parse("fuzz.toml", &f.scenario).unwrap(),
            Variant::REFERENCE,
        )
        .unwrap();
        assert_eq!(
            reference
                .explore(sim_clr::process::Strategy::Random, 20, 1, |_, _| {})
                .first_failure,
            None
        );
    }
}

#[test]
fn the_same_seed_gives_the_same_processes_and_report() {
    let mutant = variant("read-before-context").unwrap();
    assert_eq!(run(mutant, 3, 11), run(mutant, 3, 11));
}

#[test]
fn generated_processes_cover_every_platform_and_sampler_method() {
    let mut runner = fixtures::strategies::seeded_runner(5);
    let strategy = random_process(None);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..64 {
        let p = strategy.new_tree(&mut runner).unwrap().current();
        let text = p.text(None);
        assert!(text.contains("body = \"watchdog\""));
        seen.insert((p.stack.platform, p.sampler));
    }
    let all: Vec<_> = seen.into_iter().collect();
    assert_eq!(
        all,
        [
            ("unix", "sampler"),
            ("unix", "signal-sampler"),
            ("windows", "canary-sampler"),
            ("windows", "runtime-sampler"),
            ("windows", "sampler"),
        ]
    );
}

/// The example of `docs/profiler-guide.md` §8, step 6.
#[test]
fn the_guides_fuzzing_example_runs() -> Result<(), String> {
    use sim_clr::process::Process;
    let attach = |scenario: Scenario| -> Result<Process, String> {
        let mut process = Process::new(scenario);
        fixtures::sampling::load(&mut process, fixtures::sampling::Variant::REFERENCE)?;
        Ok(process)
    };
    let options = Options {
        processes: 2,
        schedules: 10,
        seed: 1,
        shrinks: 8,
        jobs: 1,
        shard: sim_clr::process::Shard::WHOLE,
        max_failures: None,
        platform: None,
    };
    let report = fuzz(options, &attach, |_, _| {})?;
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/profiler-guide.md")).unwrap();
    assert!(
        guide.contains("fixtures::sampling::load(&mut process, fixtures::sampling::Variant::REFERENCE)?;")
    );
    assert!(guide.contains("let report = fuzz(options, &attach, |_, _| {})?;"));
    Ok(())
}

#[test]
fn a_leaf_placed_on_the_parsed_scenario_equals_the_reproducer_file_parsed() {
    let mut runner = fixtures::strategies::seeded_runner(9);
    let strategy = random_process(None);
    for _ in 0..12 {
        let generated = strategy.new_tree(&mut runner).unwrap().current();
        let (text, placed) = generated
            .build(&|s| Ok(sim_clr::process::Process::new(s)))
            .unwrap();
        let placed = placed.scenario().runtime();
        let parsed = Scenario::parse("fuzz.toml", &text).unwrap().runtime();
        let leaf = |rt: &sim_clr::runtime::Runtime| rt.thread("main").unwrap().leaf_context();
        assert_eq!(leaf(&placed), leaf(&parsed), "{text}");
        assert_eq!(
            placed.thread("main").unwrap().stack,
            parsed.thread("main").unwrap().stack
        );
    }
}

#[test]
fn a_platform_limits_every_generated_process_to_it() {
    let mut runner = fixtures::strategies::seeded_runner(5);
    for platform in ["windows", "unix"] {
        let strategy = random_process(Some(platform));
        for _ in 0..32 {
            let p = strategy.new_tree(&mut runner).unwrap().current();
            assert_eq!(p.stack.platform, platform);
            assert!(p.text(None).contains(&format!("platform = \"{platform}\"")));
            let sampler_platform = match p.sampler {
                "canary-sampler" | "runtime-sampler" => "windows",
                "signal-sampler" => "unix",
                _ => platform,
            };
            assert_eq!(sampler_platform, platform, "{}", p.sampler);
        }
    }
}
