//! Hybrid walks from the command line.
//!
//! - `simclr walk FILE`: walks one thread of a scenario with the hybrid walker (and, on
//!   Windows, the all-native variant) and prints it beside the ground truth;
//! - `simclr walk-fuzz`: random processes whose threads mix managed, native and stub frames
//!   of random shapes, each thread stopped at a random instruction of its leaf, walked and
//!   compared frame by frame with the ground truth. Each mismatch is written out as a
//!   scenario file that reproduces it (`simclr walk FILE`).

use crate::out::{out, outln};
use crate::progress::Progress;
use fixtures::hybrid::{describe, walk, Mode};
use fixtures::random_stack::{random_stack, scenario};
use proptest::strategy::{Strategy, ValueTree};
use serde::Serialize;
use sim_clr::process::Shard;
use std::path::Path;
use std::process::ExitCode;

/// One mismatch.
#[derive(Serialize)]
struct Mismatch {
    /// Which process (0-based).
    process: usize,
    /// `hybrid` or `native`.
    mode: &'static str,
    /// The first disagreement.
    problem: String,
    /// The reproducer scenario, if it could be written.
    file: Option<String>,
}

/// The summary `--json` prints.
#[derive(Serialize)]
struct Summary {
    seed: u64,
    /// `windows`, `unix` or `all`.
    platform: &'static str,
    processes: usize,
    walks: usize,
    mismatches: Vec<Mismatch>,
}

/// Walks thread `target` of `file` from native thread `sampler`; exit code 1 on a mismatch.
pub fn walk_file(file: &Path, target: &str, sampler: &str) -> ExitCode {
    let scenario = match sim_clr::scenario::Scenario::load(file) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = scenario.runtime();
    let mut failed = false;
    for &mode in Mode::for_platform(runtime.platform()) {
        match walk(&runtime, target, sampler, mode) {
            Ok(judged) => {
                outln!("{} walk of {target} (got | ground truth):", mode.as_str());
                out!("{}", describe(&runtime, &judged));
                match &judged.mismatch {
                    Some(m) => {
                        failed = true;
                        outln!("MISMATCH: {m}\n");
                    }
                    None => outln!("matches the ground truth\n"),
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs `processes` random processes from `seed` on `platforms` (alternating), writing
/// reproducers into `out`; exit code 1 on any mismatch, 2 if a process cannot be built. With
/// a `shard`, every process is generated but only the shard's are walked.
pub fn run(
    processes: usize,
    seed: u64,
    platforms: &[&'static str],
    json: bool,
    out: &Path,
    shard: Option<Shard>,
) -> ExitCode {
    if processes == 0 {
        eprintln!("error: --processes 0 walks nothing");
        return ExitCode::from(2);
    }
    let mut runner = fixtures::strategies::seeded_runner(seed);
    let strategy = random_stack();
    let bar = Progress::new(processes as u64, json, "processes");
    let mut summary = Summary {
        seed,
        platform: match platforms {
            [one] => one,
            _ => "all",
        },
        processes: 0,
        walks: 0,
        mismatches: Vec::new(),
    };
    for n in 0..processes {
        bar.inc(1);
        let mut stack = match strategy.new_tree(&mut runner) {
            Ok(tree) => tree.current(),
            Err(e) => {
                eprintln!("error: cannot generate a process: {e}");
                return ExitCode::from(2);
            }
        };
        if !shard.unwrap_or(Shard::WHOLE).holds(n as u64) {
            continue;
        }
        summary.processes += 1;
        stack.platform = platforms[n % platforms.len()];
        let (text, scenario) = match scenario(&stack) {
            Ok(built) => built,
            Err(e) => {
                eprintln!("error: process {n} cannot be built: {e}\n{}", stack.text(None));
                return ExitCode::from(2);
            }
        };
        let runtime = scenario.runtime();
        for &mode in Mode::for_platform(runtime.platform()) {
            summary.walks += 1;
            let (problem, listing) = match walk(&runtime, "main", "sampler", mode) {
                Ok(judged) => match &judged.mismatch {
                    Some(m) => (m.clone(), describe(&runtime, &judged)),
                    None => continue,
                },
                Err(e) => (e, String::new()),
            };
            let name = mode.as_str();
            let file = out.join(format!("walk-fuzz-{seed}-{n}-{name}.toml"));
            let body = format!(
                "# walk-fuzz --seed {seed}, process {n}, {name} walk: {problem}\n# got | expected\n{}\n{text}",
                listing.lines().map(|l| format!("# {l}\n")).collect::<String>()
            );
            let written = std::fs::create_dir_all(out)
                .and_then(|()| std::fs::write(&file, body))
                .is_ok();
            bar.set_message(format!("{} mismatches", summary.mismatches.len() + 1));
            summary.mismatches.push(Mismatch {
                process: n,
                mode: name,
                problem,
                file: written.then(|| file.display().to_string()),
            });
        }
    }
    bar.finish();
    if json {
        if let Err(code) = crate::merge::print_shard(&summary, shard) {
            return code;
        }
    } else {
        for m in &summary.mismatches {
            let file = m.file.as_deref().unwrap_or("(not written)");
            outln!(
                "process {} ({}): {} — reproduce with: {} walk {file}",
                m.process,
                m.mode,
                m.problem,
                crate::own::program(),
            );
        }
        let share = shard.map(|s| format!(" (shard {s})")).unwrap_or_default();
        outln!(
            "{} walks, {} mismatches{share}",
            summary.walks,
            summary.mismatches.len()
        );
    }
    if summary.mismatches.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
