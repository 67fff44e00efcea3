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

/// One random process walked in every mode of its platform.
struct Walked {
    /// Its scenario text.
    text: String,
    /// How many walks.
    walks: usize,
    /// The walks that disagreed with the ground truth: the mode, the first disagreement, and
    /// the walk beside the ground truth.
    disagreed: Vec<(&'static str, String, String)>,
}

/// `stack`'s process, built and walked; an error if it cannot be built.
fn walked(stack: &fixtures::random_stack::RandomStack) -> Result<Walked, String> {
    let (text, scenario) = scenario(stack)?;
    let runtime = scenario.runtime();
    let modes = Mode::for_platform(runtime.platform());
    let disagreed = modes
        .iter()
        .filter_map(|&mode| {
            let (problem, listing) = match walk(&runtime, "main", "sampler", mode) {
                Ok(judged) => (judged.mismatch.clone()?, describe(&runtime, &judged)),
                Err(e) => (e, String::new()),
            };
            Some((mode.as_str(), problem, listing))
        })
        .collect();
    Ok(Walked {
        text,
        walks: modes.len(),
        disagreed,
    })
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

/// Runs `processes` random processes from `seed` on `platforms` (alternating), `jobs` at
/// once (the output is the same whatever the number), writing reproducers into `out`; exit
/// code 1 on any mismatch, 2 if a process cannot be built. With a `shard`, every process is
/// generated but only the shard's are walked.
pub fn run(
    processes: usize,
    seed: u64,
    platforms: &[&'static str],
    jobs: usize,
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
    let mut n = 0;
    while n < processes {
        // The processes are drawn in order, then walked at once.
        let chunk = (processes - n).min(256);
        let mut stacks = Vec::with_capacity(chunk);
        for k in n..n + chunk {
            let mut stack = match strategy.new_tree(&mut runner) {
                Ok(tree) => tree.current(),
                Err(e) => {
                    eprintln!("error: cannot generate a process: {e}");
                    return ExitCode::from(2);
                }
            };
            if shard.unwrap_or(Shard::WHOLE).holds(k as u64) {
                stack.platform = platforms[k % platforms.len()];
                stacks.push((k, stack));
            }
        }
        let walked =
            sim_clr::parallel::in_order(jobs, stacks.len() as u64, |i| walked(&stacks[i as usize].1));
        for ((k, stack), walked) in stacks.iter().zip(walked) {
            let Walked {
                text,
                walks,
                disagreed,
            } = match walked {
                Ok(walked) => walked,
                Err(e) => {
                    eprintln!("error: process {k} cannot be built: {e}\n{}", stack.text(None));
                    return ExitCode::from(2);
                }
            };
            summary.processes += 1;
            summary.walks += walks;
            for (name, problem, listing) in disagreed {
                let file = out.join(format!("walk-fuzz-{seed}-{k}-{name}.toml"));
                let body = format!(
                    "# walk-fuzz --seed {seed}, process {k}, {name} walk: {problem}\n# got | expected\n{}\n{text}",
                    listing.lines().map(|l| format!("# {l}\n")).collect::<String>()
                );
                let written = std::fs::create_dir_all(out)
                    .and_then(|()| std::fs::write(&file, body))
                    .is_ok();
                bar.set_message(format!("{} mismatches", summary.mismatches.len() + 1));
                summary.mismatches.push(Mismatch {
                    process: *k,
                    mode: name,
                    problem,
                    file: written.then(|| file.display().to_string()),
                });
            }
        }
        bar.inc(chunk as u64);
        n += chunk;
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
