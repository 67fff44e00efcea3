//! `simclr reach`: how many schedules each strategy needs until its runs have reached every
//! window ([`sim_clr::coverage`]) the story can reach — the windows any strategy's runs
//! reached within the budget — for each pitfall (or each file given), with the reference
//! sampler. A strategy that needs many schedules to reach a window tests the rule behind it
//! rarely; `cover` is built to need fewer.

use crate::progress::Progress;
use crate::{conclude, load};
use fixtures::sampling::{process, Variant};
use serde::Serialize;
use sim_clr::process::Strategy;
use sim_clr::scenario::Scenario;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::ExitCode;

/// The strategies compared.
const STRATEGIES: [Strategy; 3] = [Strategy::Random, Strategy::Pct(3), Strategy::Cover];

/// One scenario's measure.
#[derive(Debug, Serialize)]
pub struct Reach {
    /// The scenario.
    pub scenario: String,
    /// The windows some strategy's runs reached within the budget.
    pub windows: Vec<String>,
    /// For each strategy (`random`, `pct:3`, `cover`): the schedules it ran until its runs
    /// had reached all of them (`None`: not within the budget).
    pub schedules: BTreeMap<String, Option<u64>>,
    /// For each strategy that did not, the windows it missed.
    pub missed: BTreeMap<String, Vec<String>>,
}

/// Measures `files` (every pitfall when none) with `budget` schedules per strategy from
/// `seed`; exit 1 when a strategy missed a window of a file's `[explore] reach`.
pub fn run(files: &[PathBuf], budget: u64, seed: u64, json: bool) -> ExitCode {
    if budget == 0 {
        eprintln!("error: --schedules must be at least 1");
        return ExitCode::from(2);
    }
    let scenarios: Vec<Scenario> = if files.is_empty() {
        match fixtures::pitfalls() {
            Ok(all) => all,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        let mut all = Vec::new();
        for file in files {
            match load(file, None) {
                Ok(s) => all.push(s),
                Err(code) => return code,
            }
        }
        all
    };
    let bar = Progress::new(scenarios.len() as u64, json, "scenarios");
    let width = scenarios.iter().map(|s| s.name.len()).max().unwrap_or(0);
    if !json {
        bar.println(&format!(
            "{:<width$}  random   pct:3    cover    windows",
            "scenario"
        ));
    }
    let mut all = Vec::new();
    let mut short = 0;
    for scenario in scenarios {
        let wanted = scenario.process.explore.reach.clone();
        let name = scenario.name.clone();
        let p = match process(scenario, Variant::REFERENCE) {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: {name}: {e}");
                return ExitCode::from(2);
            }
        };
        // Each strategy's runs in order: the windows each reached.
        let mut runs: Vec<(String, Vec<BTreeSet<String>>)> = Vec::new();
        for strategy in STRATEGIES {
            let mut reached = Vec::new();
            p.each(strategy, budget, seed, |_, run| {
                reached.push(run.coverage.windows.clone())
            });
            runs.push((strategy.describe(), reached));
        }
        // What the story can reach (some strategy's run reached it), and what its file says
        // must be reached, reached or not.
        let union: BTreeSet<String> = (runs.iter())
            .flat_map(|(_, r)| r.iter().flatten().cloned())
            .chain(wanted.iter().cloned())
            .collect();
        let mut reach = Reach {
            scenario: name,
            windows: union.iter().cloned().collect(),
            schedules: BTreeMap::new(),
            missed: BTreeMap::new(),
        };
        for (strategy, reached) in &runs {
            let mut seen = BTreeSet::new();
            let full = reached.iter().position(|w| {
                seen.extend(w.iter().cloned());
                seen.len() == union.len()
            });
            reach
                .schedules
                .insert(strategy.clone(), full.map(|i| i as u64 + 1));
            if full.is_none() {
                let missed: Vec<String> = union.difference(&seen).cloned().collect();
                short += usize::from(missed.iter().any(|w| wanted.contains(w)));
                reach.missed.insert(strategy.clone(), missed);
            }
        }
        if !json {
            bar.println(&line(&reach, width));
        }
        all.push(reach);
        bar.inc(1);
    }
    bar.finish();
    // Each strategy's mean over the files, one that missed counting its whole budget.
    let means: Vec<String> = STRATEGIES
        .iter()
        .map(|s| {
            let name = s.describe();
            let total: u64 = (all.iter())
                .map(|r| r.schedules.get(&name).copied().flatten().unwrap_or(budget))
                .sum();
            format!("{name} {:.1}", total as f64 / all.len().max(1) as f64)
        })
        .collect();
    let summary = format!(
        "{} scenarios, {budget} schedules per strategy; mean schedules to every window (a miss counts {budget}): {}; {short} strategies missed a window a file's `reach` names",
        all.len(),
        means.join(", ")
    );
    conclude(json, &all, &summary, short > 0)
}

/// One scenario's line: each strategy's schedules to full coverage (`N missed` when not within
/// the budget: it missed N windows), then how many windows there are.
fn line(r: &Reach, width: usize) -> String {
    let cell = |s: &str| match r.schedules.get(s).copied().flatten() {
        Some(n) => format!("{n:<8}"),
        None => format!("{:<8}", format!("{} missed", r.missed.get(s).map_or(0, Vec::len))),
    };
    format!(
        "{:<width$}  {} {} {} {}",
        r.scenario,
        cell("random"),
        cell("pct:3"),
        cell("cover"),
        r.windows.len()
    )
}
