//! `simclr sample-rates`: how often the reference sampler gets to sample in each pitfall
//! scenario under each exploring strategy. A scenario whose schedules rarely let the sampler
//! sample checks little: a broken sampler that never samples there is never caught there.

use crate::conclude;
use crate::progress::Progress;
use fixtures::sampling::{rate, Rate};
use sim_clr::process::Strategy;
use std::process::ExitCode;

/// The strategies measured: those `explore`, `mutants` and `fuzz` draw schedules from.
const STRATEGIES: [Strategy; 2] = [Strategy::Random, Strategy::Pct(3)];

/// Runs every pitfall under `runs` schedules of each strategy from `seed`; exit 1 if one
/// took fewer than `min` samples (per `runs` runs).
pub fn run(runs: u64, seed: u64, min: u64, json: bool) -> ExitCode {
    if runs == 0 {
        eprintln!("error: --runs must be at least 1");
        return ExitCode::from(2);
    }
    let pitfalls = match fixtures::pitfalls() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let bar = Progress::new((pitfalls.len() * STRATEGIES.len()) as u64, json, "explorations");
    let width = pitfalls.iter().map(|s| s.name.len()).max().unwrap_or(0);
    let mut rates: Vec<Rate> = Vec::new();
    for scenario in pitfalls {
        for strategy in STRATEGIES {
            match rate(scenario.clone(), strategy, runs, seed) {
                Ok(r) => {
                    if !json {
                        bar.println(&line(&r, min, width));
                    }
                    rates.push(r);
                }
                Err(e) => {
                    eprintln!("error: {}: {e}", scenario.name);
                    return ExitCode::from(2);
                }
            }
            bar.inc(1);
        }
    }
    bar.finish();
    let short = rates.iter().filter(|r| r.samples < min).count();
    let summary = format!(
        "{} explorations of {runs} runs, {short} with fewer than {min} samples",
        rates.len()
    );
    conclude(json, &rates, &summary, short > 0)
}

/// One exploration's line, its scenario's name padded to `width`.
fn line(r: &Rate, min: u64, width: usize) -> String {
    let mark = if r.samples < min { "FEW" } else { "   " };
    let windows = &r.coverage.windows;
    let reached = windows.values().filter(|&&n| n > 0).count();
    format!(
        "{mark} {:<width$} {:<7} {:>6} samples, {:>5} of {} runs sampled, {reached} of {} windows reached",
        r.scenario,
        r.strategy,
        r.samples,
        r.runs_sampled,
        r.runs,
        windows.len()
    )
}
