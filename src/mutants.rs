//! `simclr mutants`: every deliberately broken sampler hunted twice, by the pitfall scenarios
//! and by the fuzzer alone (random processes, nothing written for it), each catch shrunk to a
//! reproducer that replays.

use crate::conclude;
use crate::explore::replay_command;
use crate::fuzz::write_reproducer;
use crate::progress::Progress;
use fixtures::fuzz::{built_in, fuzz, Options};
use fixtures::sampling::{hunt, mutants, Hunt, Mutant};
use std::path::Path;
use std::process::ExitCode;

/// What to hunt with.
pub struct Budget {
    /// PCT schedules per pitfall scenario at most.
    pub schedules: u64,
    /// The first seed, for both hunts.
    pub seed: u64,
    /// Random processes the fuzzer tries at most.
    pub fuzz_processes: u64,
    /// Schedules per random process (half random, half PCT).
    pub fuzz_schedules: u64,
    /// Mutants hunted at once, each on a thread of its own.
    pub jobs: usize,
}

/// What the fuzzer alone found for one mutant.
#[derive(serde::Serialize)]
struct Fuzzed {
    /// A random process failed with it.
    caught: bool,
    /// Schedules run until the first failure, the failing one included (all of them when
    /// none failed).
    schedules_run: u64,
    /// The failing run's outcome.
    fault: Option<String>,
    /// What happened, in the shrunk run.
    message: Option<String>,
    /// The shrunk reproducer file.
    file: Option<String>,
    /// The command that replays it.
    replay: Option<String>,
    /// The windows the fuzzer's runs reached ([`sim_clr::coverage`]).
    windows_reached: Vec<String>,
}

/// One mutant's two hunts.
#[derive(serde::Serialize)]
struct Hunted {
    #[serde(flatten)]
    catalog: Hunt,
    fuzz: Fuzzed,
}

/// Hunts every mutant with the pitfall scenarios and with the fuzzer, writing the fuzzer's
/// reproducers into `out`; exit 1 if one escapes either.
pub fn run(budget: &Budget, out: &Path, json: bool) -> ExitCode {
    if budget.schedules == 0 || budget.fuzz_processes == 0 || budget.fuzz_schedules == 0 {
        eprintln!("error: --schedules, --fuzz-processes and --fuzz-schedules must be at least 1");
        return ExitCode::from(2);
    }
    let all = mutants();
    let bar = Progress::new(all.len() as u64, json, "mutants");
    let mut hunts: Vec<Hunted> = Vec::new();
    let mut failed = None;
    // Mutants side by side, each hunted on a thread of its own, reported in order.
    sim_clr::parallel::tasks(
        budget.jobs,
        all.len() as u64,
        |k, _| hunted(&all[k as usize], budget, out),
        |_, h| match h {
            Ok(h) if failed.is_none() => {
                if !json {
                    bar.println(&lines(&h));
                }
                bar.inc(1);
                hunts.push(h);
            }
            Ok(_) => {}
            Err(code) => {
                failed.get_or_insert(code);
            }
        },
    );
    if let Some(code) = failed {
        return code;
    }
    bar.finish();
    let by_catalog = hunts.iter().filter(|h| h.catalog.caught).count();
    let by_fuzz = hunts.iter().filter(|h| h.fuzz.caught).count();
    let escaped = hunts
        .iter()
        .filter(|h| !h.catalog.caught || !h.fuzz.caught)
        .count();
    let summary = format!(
        "{} mutants: {by_catalog} caught by the pitfalls, {by_fuzz} by the fuzzer alone; {escaped} escaped one or both",
        hunts.len(),
    );
    conclude(json, &hunts, &summary, escaped > 0)
}

/// Both hunts of `mutant`, one schedule at a time.
fn hunted(mutant: &Mutant, budget: &Budget, out: &Path) -> Result<Hunted, ExitCode> {
    let catalog = hunt(mutant, budget.schedules, budget.seed, 1).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })?;
    let fuzz = fuzzed(mutant, budget, out)?;
    Ok(Hunted { catalog, fuzz })
}

/// The fuzzer alone on `mutant`: random processes until the first failure, shrunk and
/// written out.
fn fuzzed(mutant: &Mutant, budget: &Budget, out: &Path) -> Result<Fuzzed, ExitCode> {
    let options = Options {
        processes: budget.fuzz_processes,
        schedules: budget.fuzz_schedules,
        seed: budget.seed,
        shrinks: fixtures::fuzz::SHRINKS,
        jobs: 1,
        shard: sim_clr::process::Shard::WHOLE,
        max_failures: Some(1),
        platform: None,
    };
    let report = fuzz(options, &built_in(mutant.variant), |_, _| {}).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })?;
    let mut fuzzed = Fuzzed {
        caught: false,
        schedules_run: report.schedules_run,
        fault: None,
        message: None,
        file: None,
        replay: None,
        windows_reached: (report.coverage.windows.iter())
            .filter(|(_, &n)| n > 0)
            .map(|(w, _)| w.clone())
            .collect(),
    };
    if let Some(f) = report.failures.first() {
        let origin = format!(
            "{} mutants --seed {} --fuzz-processes {} --fuzz-schedules {}, mutant {}",
            crate::own::program(),
            budget.seed,
            budget.fuzz_processes,
            budget.fuzz_schedules,
            mutant.name
        );
        let file = write_reproducer(out, f, mutant.name, budget.seed, &origin)?;
        fuzzed.caught = true;
        fuzzed.fault = Some(f.outcome.clone());
        fuzzed.message = Some(f.message.clone());
        fuzzed.replay = Some(replay_command(&file, mutant.name, &f.schedule));
        fuzzed.file = Some(file.display().to_string());
    }
    Ok(fuzzed)
}

/// One mutant's lines: caught where and how, with the replay commands.
fn lines(h: &Hunted) -> String {
    let c = &h.catalog;
    let catalog = match (&c.scenario, &c.fault, &c.schedule, c.schedules_to_catch) {
        (Some(scenario), Some(fault), Some(schedule), Some(n)) => {
            let file = format!("fixtures/pitfalls/{scenario}.toml");
            format!(
                "caught  {:<30} by {scenario} after {n} schedules: {fault}\n        {}\n        replay: {}",
                c.name,
                c.message.as_deref().unwrap_or(""),
                replay_command(Path::new(&file), &c.name, schedule)
            )
        }
        _ => format!(
            "ESCAPED {:<30} ({}): no pitfall scenario failed in {} schedules; {}",
            c.name,
            c.rule,
            c.schedules_run,
            reached(&c.windows_reached)
        ),
    };
    let f = &h.fuzz;
    let fuzz = match (&f.fault, &f.replay) {
        (Some(fault), Some(replay)) => format!(
            "        fuzzer alone: caught after {} schedules: {fault}\n        replay: {replay}",
            f.schedules_run
        ),
        _ => format!(
            "        fuzzer alone: ESCAPED: no random process failed in {} schedules; {}",
            f.schedules_run,
            reached(&f.windows_reached)
        ),
    };
    format!("{catalog}\n{fuzz}")
}

/// What an escaped mutant's runs reached, in words: the windows it had the chance to break.
fn reached(windows: &[String]) -> String {
    if windows.is_empty() {
        "its runs reached no window".to_string()
    } else {
        format!(
            "its runs reached {} windows: {}",
            windows.len(),
            windows.join(", ")
        )
    }
}
