//! `simclr fuzz`: a sampler in random processes under random and PCT schedules; each failure
//! is shrunk and written out as a scenario file with the schedule that replays it.

use crate::explore::{chosen, replay_command};
use crate::out::{out, outln};
use crate::progress::Progress;
use fixtures::fuzz::{fuzz, Failure, Options};
use sim_clr::process::Shard;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What to fuzz with.
#[derive(Clone, Copy)]
pub struct Budget {
    /// Random processes.
    pub processes: u64,
    /// Schedules per process.
    pub schedules: u64,
    /// The generator's seed.
    pub seed: u64,
    /// The one platform to generate (`None`: both).
    pub platform: Option<&'static str>,
    /// Schedules of a process run at once.
    pub jobs: usize,
    /// Explore only this share of the processes.
    pub shard: Option<Shard>,
}

/// Fuzzes `sampler` (`reference`, a mutant, or one of the binary's own) within `budget`,
/// writing reproducers into `out`; exit 1 on any failure.
pub fn run(budget: &Budget, sampler: &str, json: bool, out: &Path) -> ExitCode {
    let Budget {
        processes,
        schedules,
        seed,
        platform,
        jobs,
        shard,
    } = *budget;
    if processes == 0 || schedules == 0 {
        eprintln!("error: --processes and --schedules must be at least 1");
        return ExitCode::from(2);
    }
    let sampler_code = match chosen(sampler) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let bar = Progress::new(processes, json, "processes");
    let options = Options {
        processes,
        schedules,
        seed,
        shrinks: fixtures::fuzz::SHRINKS,
        jobs,
        shard: shard.unwrap_or(Shard::WHOLE),
        max_failures: None,
        platform,
    };
    let report = fuzz(
        options,
        &move |scenario| sampler_code.process(scenario),
        |done, failures| {
            bar.set_position(done);
            bar.set_message(format!("{failures} failures"));
        },
    );
    bar.finish();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let mut files = Vec::new();
    for f in &report.failures {
        let only = platform.map(|p| format!(" --platform {p}")).unwrap_or_default();
        let program = crate::own::program();
        let origin =
            format!("{program} fuzz --seed {seed} --sampler {sampler} --schedules {schedules}{only}");
        match write_reproducer(out, f, sampler, seed, &origin) {
            Ok(file) => files.push(file),
            Err(code) => return code,
        }
    }
    if json {
        #[derive(serde::Serialize)]
        struct Summary<'a> {
            sampler: &'a str,
            seed: u64,
            platform: &'a str,
            processes: u64,
            schedules_per_process: u64,
            schedules_run: u64,
            failures: Vec<Written<'a>>,
            stops: u64,
            hazards: &'a [fixtures::hazards::HazardCount],
            coverage: &'a sim_clr::coverage::Coverage,
        }
        #[derive(serde::Serialize)]
        struct Written<'a> {
            #[serde(flatten)]
            failure: &'a Failure,
            file: String,
            replay: String,
        }
        let failures = report
            .failures
            .iter()
            .zip(&files)
            .map(|(f, file)| Written {
                failure: f,
                file: file.display().to_string(),
                replay: replay_command(file, sampler, &f.schedule),
            })
            .collect();
        let summary = Summary {
            sampler,
            seed,
            platform: platform.unwrap_or("all"),
            processes: report.processes,
            schedules_per_process: schedules,
            schedules_run: report.schedules_run,
            failures,
            stops: report.hazards.stops,
            hazards: &report.hazards.hazards,
            coverage: &report.coverage,
        };
        if let Err(code) = crate::merge::print_shard(&summary, shard) {
            return code;
        }
    } else {
        for (f, file) in report.failures.iter().zip(&files) {
            outln!(
                "process {}: {}: {}\n  shrunk from {} threads and {} thread switches to {} and {}\n  replay: {}",
                f.process,
                f.outcome,
                f.message,
                f.threads.0,
                f.switches.0,
                f.threads.1,
                f.switches.1,
                replay_command(file, sampler, &f.schedule)
            );
        }
        outln!(
            "{} stops of a thread; hazards (processes that generate it, processes where a stop met it, stops that met it):",
            report.hazards.stops
        );
        for h in &report.hazards.hazards {
            outln!(
                "  {:<24} {:>6} {:>6} {:>9}",
                h.hazard,
                h.generated,
                h.met,
                h.stops
            );
        }
        let mut reached = String::new();
        crate::reached::render(&mut reached, &report.coverage);
        out!("{reached}");
        let share = shard.map(|s| format!(", shard {s}")).unwrap_or_default();
        outln!(
            "{} processes, {} schedules, {} failures (sampler {sampler}, seed {seed}{share})",
            report.processes,
            report.schedules_run,
            report.failures.len()
        );
    }
    if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Writes failure `f` of fuzzing `sampler` from `seed` into folder `out` as a reproducer
/// file (`fuzz-SEED-PROCESS.toml`, `fuzz-SAMPLER-SEED-PROCESS.toml` for a mutant), its first
/// line naming `origin`, the command that found it; exit 2 if it cannot be written.
pub fn write_reproducer(
    out: &Path,
    f: &Failure,
    sampler: &str,
    seed: u64,
    origin: &str,
) -> Result<PathBuf, ExitCode> {
    let name = if sampler == "reference" {
        format!("fuzz-{seed}-{}.toml", f.process)
    } else {
        format!("fuzz-{sampler}-{seed}-{}.toml", f.process)
    };
    let file = out.join(name);
    std::fs::create_dir_all(out)
        .and_then(|()| std::fs::write(&file, reproducer(f, sampler, origin, &file)))
        .map_err(|e| {
            eprintln!("error: cannot write {}: {e}", file.display());
            ExitCode::from(2)
        })?;
    Ok(file)
}

/// The reproducer file: what failed and how to replay it, then the scenario.
fn reproducer(f: &Failure, sampler: &str, origin: &str, file: &Path) -> String {
    let message: String = f.message.lines().map(|l| format!("# {l}\n")).collect();
    format!(
        "# {origin}, process {}: {}\n{message}# replay: {}\n{}",
        f.process,
        f.outcome,
        replay_command(file, sampler, &f.schedule),
        f.scenario
    )
}
