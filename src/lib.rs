//! The `simclr` command line, as a library: the `simclr` binary is [`main_with`] with no
//! sampler of its own, and a profiler team's binary is [`main_with`] with theirs, so that
//! `explore`, `replay` and `fuzz` run their sampler by name (`--sampler NAME`) beside the
//! reference and its mutants, and every failure prints a replay command for that binary.
//!
//! - `simclr` runs the bundled catalog, one line per scenario;
//! - `simclr run FILE… [--json] [--no-color]` runs scenarios and shows every call, each walk
//!   as two columns (the thread's ground truth, and what was reported beside it), and faults;
//! - `simclr explain FILE [--call N] -o walk.svg` draws one walk as an SVG picture;
//! - `simclr explore FILE` runs a process scenario under many schedules and counts outcomes;
//! - `simclr replay FILE --schedule S` runs one schedule with its full trace;
//! - `simclr conform SCENARIOS RESULTS` compares a real runtime's answers with the simulator's;
//! - `simclr unwind-fuzz` checks the native unwinders on random synthesized functions;
//! - `simclr unwind-check FILE…` checks the DWARF unwinder against gimli on real ELF files;
//! - `simclr walk FILE` walks a thread with the hybrid walker beside its ground truth;
//! - `simclr walk-fuzz` walks random processes with the hybrid walker against the ground truth;
//! - `simclr mutants` runs every deliberately broken sampler on the pitfall scenarios;
//! - `simclr fuzz` runs a sampler in random processes under random and PCT schedules;
//! - `simclr sample-rates` counts how often the reference sampler samples in each pitfall.
//!
//! Exit codes: 0 success; 1 a scenario's own expectations failed; 2 a malformed scenario or
//! bad command line.

#![forbid(unsafe_code)]

mod conform;
mod explain;
mod explore;
mod fuzz;
#[cfg(unix)]
mod hosted;
mod hybrid;
mod merge;
mod mutants;
mod out;
mod own;
mod progress;
mod reach;
mod reached;
mod record;
mod sample_rates;
mod timeline;
mod unwind_check;
mod unwind_fuzz;

use clap::{Parser, Subcommand};
use fixtures::unwind_oracle::Format;
use out::{out, outln};
use sim_clr::platform::Platform;
use sim_clr::process::Shard;
use sim_clr::runtime::RuntimeVersion;
use sim_clr::scenario::{cut, Report, Scenario};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "simclr",
    version,
    about = "A simulated .NET runtime for testing profiler stack walkers"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run scenarios and report every call: files, folders (every `*.toml` in them) or the
    /// names of bundled scenarios (`simclr list`).
    Run {
        /// Scenario files (TOML), folders, or bundled scenario names.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON instead of text: one report, or an array of them for several
        /// (schema: docs/json-output.md).
        #[arg(long)]
        json: bool,
        /// Never color the text (it is colored only on a terminal, and not when the
        /// `NO_COLOR` environment variable is set).
        #[arg(long)]
        no_color: bool,
        /// Answer as this runtime version (`3.1`, `8.0`, `9.0`, `10.0`), whatever the files say.
        #[arg(long, value_name = "VERSION", value_parser = str::parse::<RuntimeVersion>)]
        runtime: Option<RuntimeVersion>,
        #[command(flatten)]
        hosting: HostingArgs,
    },
    /// Draw one walk of a scenario as an SVG picture: the target's stack memory, its frames,
    /// the explicit Frame chain, where the walk started, and what it reported.
    Explain {
        /// The scenario (TOML).
        file: PathBuf,
        /// The call to draw, 1-based as `simclr run` numbers them (default: the first
        /// `DoStackSnapshot` of a thread of the scenario).
        #[arg(long)]
        call: Option<usize>,
        /// Where the SVG is written.
        #[arg(short, long, default_value = "walk.svg")]
        out: PathBuf,
    },
    /// Run every bundled scenario (the default).
    Catalog,
    /// List the bundled scenarios, with the first line of each one's description.
    List,
    /// Print a bundled scenario file.
    Show {
        /// Its name, as `simclr list` prints it (the folder may be left out).
        name: String,
    },
    /// Unwind every instruction boundary of random synthesized functions with this project's
    /// unwinders and framehop, and check them against the emulator.
    UnwindFuzz {
        /// How many functions.
        #[arg(long, default_value_t = 1000)]
        functions: usize,
        /// The generator's seed (same seed, same functions).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// `dwarf`, `pe1`, `pe2` or `all`.
        #[arg(long, default_value = "all")]
        format: String,
        #[command(flatten)]
        jobs: Jobs,
    },
    /// Check the DWARF unwinder against gimli's own rows at every instruction boundary of
    /// every FDE of each ELF file; prints `N boundaries, R refusals, D disagreements`.
    UnwindCheck {
        /// ELF files (shared libraries, executables).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Walk one thread of a scenario with the hybrid walker (and, on Windows, natively) from
    /// a never-managed thread, beside the thread's ground truth.
    Walk {
        /// The scenario (TOML).
        file: PathBuf,
        /// The thread walked.
        #[arg(long, default_value = "main")]
        target: String,
        /// The native thread the walk runs on.
        #[arg(long, default_value = "sampler")]
        sampler: String,
    },
    /// Walk random processes (mixed managed, native and stub stacks of random shapes) with
    /// the hybrid walker from a random instruction of the leaf, and compare each walk with
    /// the ground truth frame by frame.
    WalkFuzz {
        /// How many processes.
        #[arg(long, default_value_t = 200)]
        processes: usize,
        /// The generator's seed (same seed, same processes).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Which platforms (`all`: alternating).
        #[arg(long, value_enum, default_value = "all")]
        platform: Platforms,
        /// Print one JSON document.
        #[arg(long)]
        json: bool,
        /// Where reproducer scenarios of mismatches are written.
        #[arg(long, default_value = "walk-fuzz-failures")]
        out: PathBuf,
        #[command(flatten)]
        jobs: Jobs,
        #[command(flatten)]
        shard: ShardArg,
    },
    /// Run process scenarios (threads with programs) under many schedules and count how
    /// each run ended; show the first failing schedule and how to replay it. Several files
    /// are explored side by side on the `--jobs` threads and reported in the order given.
    Explore {
        /// The scenarios (TOML): files, or folders (every `*.toml` in them).
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// How many schedules at most (default: the file's `[explore]`, else 1000).
        #[arg(long)]
        schedules: Option<u64>,
        /// `random`, `pct`, `dfs` or `cover` (steered towards the windows earlier runs missed; default: the file's, else `pct`).
        #[arg(long)]
        strategy: Option<String>,
        /// PCT's bug depth, or DFS's preemption bound.
        #[arg(long)]
        depth: Option<u32>,
        /// The first seed (run i uses seed + i).
        #[arg(long)]
        seed: Option<u64>,
        /// Print one JSON document (docs/json-output.md).
        #[arg(long)]
        json: bool,
        /// Also print the traces of the first N runs of each outcome, `ok` runs included (they
        /// are replayed once the exploration ends).
        #[arg(long, value_name = "N", default_value_t = 0)]
        trace_first: usize,
        #[command(flatten)]
        jobs: Jobs,
        #[command(flatten)]
        shard: ShardArg,
        #[command(flatten)]
        code: CodeArgs,
    },
    /// Run one schedule of a process scenario and print its full trace.
    Replay {
        /// The scenario (TOML).
        file: PathBuf,
        /// The schedule, as `explore` prints it (`0x3.1.0x12`).
        #[arg(long)]
        schedule: String,
        #[command(flatten)]
        code: CodeArgs,
        /// Also draw the run as a timeline into this SVG file: one lane per thread over the
        /// steps (running, blocked and on what, suspended and by whom, callbacks, locks held,
        /// walks), a deadlock's cycle in red.
        #[arg(long, value_name = "OUT.svg")]
        svg: Option<PathBuf>,
        /// Print one JSON document (docs/json-output.md).
        #[arg(long)]
        json: bool,
    },
    /// Hunt every mutant of the reference sampler (each breaks one rule) twice: on the
    /// pitfall scenarios under PCT schedules, and with the fuzzer alone in random processes;
    /// say what caught it, after how many schedules, with a shrunk reproducer to replay; exit
    /// 1 if one escapes either hunt.
    Mutants {
        /// PCT schedules per pitfall scenario at most.
        #[arg(long, default_value_t = 1000)]
        schedules: u64,
        /// The first seed (run i uses seed + i) of both hunts.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Random processes the fuzzer tries at most, per mutant.
        #[arg(long, default_value_t = 200)]
        fuzz_processes: u64,
        /// Schedules per random process (the first half random, the rest PCT).
        #[arg(long, default_value_t = 5)]
        fuzz_schedules: u64,
        /// Where the fuzzer's shrunk reproducers are written.
        #[arg(long, default_value = "fuzz-failures")]
        out: PathBuf,
        /// Print one JSON document (docs/json-output.md).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        jobs: Jobs,
    },
    /// For each pitfall (or each file given), how many schedules random, PCT and cover
    /// schedules need until their runs have reached every window the story can reach (the
    /// windows any of them reached within `--schedules`, and those the file's `[explore]
    /// reach` names), with the reference sampler; exit 1 when a strategy missed a window a
    /// file's `reach` names.
    Reach {
        /// Process scenarios (default: every bundled pitfall).
        files: Vec<PathBuf>,
        /// Schedules per strategy.
        #[arg(long, default_value_t = 1000)]
        schedules: u64,
        /// The first seed (run i uses seed + i).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Print one JSON document (docs/json-output.md).
        #[arg(long)]
        json: bool,
    },
    /// Count how often the reference sampler samples in each pitfall scenario under random and
    /// PCT schedules (a scenario whose schedules rarely let it sample checks little); exit 1
    /// if one exploration took fewer than `--min` samples.
    SampleRates {
        /// Schedules per pitfall and strategy.
        #[arg(long, default_value_t = 1000)]
        runs: u64,
        /// The first seed (run i uses seed + i).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// The fewest samples an exploration may take.
        #[arg(long, default_value_t = 0)]
        min: u64,
        /// Print one JSON document (docs/json-output.md).
        #[arg(long)]
        json: bool,
    },
    /// Run a sampler (the reference or a mutant) in random processes under random and PCT
    /// schedules, checking every rule and every sample against the ground truth; shrink each
    /// failure to a scenario file and a schedule, and print how to replay it.
    Fuzz {
        /// How many random processes.
        #[arg(long, default_value_t = 100)]
        processes: u64,
        /// Schedules per process (the first half random, the rest PCT).
        #[arg(long, default_value_t = 100)]
        schedules: u64,
        /// `reference`, a mutant's name, or a sampler this binary was built with.
        #[arg(long, default_value = "reference")]
        sampler: String,
        /// The generator's seed (same seed, same processes and schedules).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Generate processes on this platform (`all`: either, drawn at random).
        #[arg(long, value_enum, default_value = "all")]
        platform: Platforms,
        /// Print one JSON document (docs/json-output.md).
        #[arg(long)]
        json: bool,
        /// Where the shrunk reproducers are written.
        #[arg(long, default_value = "fuzz-failures")]
        out: PathBuf,
        #[command(flatten)]
        jobs: Jobs,
        #[command(flatten)]
        shard: ShardArg,
    },
    /// Turn a log the conformance profiler wrote on a real runtime into a scenario that
    /// reproduces every recorded answer. Given a results folder, record every `NAME.jsonl`
    /// into OUT/NAME.toml, then compare each with its log (`recorded: N passed, M failed`).
    Record {
        /// A log (`NAME.jsonl`), or a folder of them.
        log: PathBuf,
        /// Where to write the scenario (a folder when LOG is one); standard output if absent.
        #[arg(short, long)]
        out: Option<PathBuf>,
        /// The version of the runtime that wrote the log (`3.1`, `8.0`, `9.0`, `10.0`): the scenario's
        /// `[runtime] version`.
        #[arg(long, value_name = "VERSION", value_parser = str::parse::<RuntimeVersion>, default_value = "8.0")]
        runtime: RuntimeVersion,
        /// The operating system of the runtime that wrote the log (`windows`, `unix`): the
        /// scenario's `platform`.
        #[arg(long, value_name = "PLATFORM", value_parser = str::parse::<Platform>, default_value = "unix")]
        platform: Platform,
    },
    /// Combine the `--json` reports of every shard of one `explore`, `fuzz` or `walk-fuzz` run
    /// (`--shard 1/N` … `--shard N/N`) into the report the whole run prints.
    Merge {
        /// The shards' reports, in any order.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
    },
    /// Compare a real runtime's answers with the simulator's (see conformance/run.sh).
    Conform {
        /// Directory of scenarios (`NAME.toml`) with `case` labels.
        scenarios: PathBuf,
        /// Directory of real results (`NAME.jsonl`, `NAME.exit`).
        results: PathBuf,
        /// Also host this build of the conformance profiler library in the simulator, driven
        /// by each scenario's `[host]` steps, and compare its records with the real ones
        /// (its logs go to RESULTS/hosted/).
        #[arg(long, value_name = "LIB")]
        hosted: Option<PathBuf>,
        /// Answer as this runtime version (`3.1`, `8.0`, `9.0`, `10.0`), whatever the scenarios say.
        #[arg(long, value_name = "VERSION", value_parser = str::parse::<RuntimeVersion>)]
        runtime: Option<RuntimeVersion>,
        /// Answer on this operating system (`windows`, `unix`), whatever the scenarios say: the
        /// same programs run on Windows are compared with their scenarios so.
        #[arg(long, value_name = "PLATFORM", value_parser = str::parse::<Platform>)]
        platform: Option<Platform>,
        /// Real answers known to differ for a reason outside the runtime (a TOML list of
        /// `[[difference]]` tables: `case`, `real`, `why`; see conformance/windows/wine.toml):
        /// a listed case passes with the listed answer too.
        #[arg(long, value_name = "FILE")]
        known: Option<PathBuf>,
    },
}

/// A native profiler library to host (`run`, `explore`, `replay`).
#[derive(clap::Args)]
struct HostingArgs {
    /// Host this native profiler library (a `.so` exporting `DllGetClassObject`). `run`
    /// drives it in one scenario's runtime with the file's `[host]` steps instead of its calls
    /// (exit 3 when the simulated process crashes, 4 when it hangs); `explore` and `replay`
    /// host it afresh in every run, the threads it creates taking the threads declared
    /// `start = "profiler"`.
    #[arg(long, value_name = "LIB")]
    profiler: Option<PathBuf>,
    /// The CLSID passed to the library's `DllGetClassObject`.
    #[arg(
        long,
        default_value = "{00000000-0000-0000-0000-000000000000}",
        requires = "profiler"
    )]
    clsid: String,
    /// `explore`, `replay`: run every run in this process rather than in a worker process of
    /// its own (faster; but a crash or a hang of the library then ends simclr itself).
    #[arg(long, requires = "profiler")]
    in_process: bool,
    /// `explore`, `replay`: the wall-clock seconds a run may take in its worker before it
    /// ends as `profiler_hang`.
    #[arg(long, value_name = "SECONDS", default_value_t = 10.0, requires = "profiler")]
    run_timeout: f64,
}

/// How many threads do the work.
#[derive(clap::Args)]
struct Jobs {
    /// Threads that do the work (default: one per core); the output is the same whatever
    /// the number. `explore`, `fuzz` and `mutants` run schedules on them (DFS schedules and
    /// a hosted library's one at a time; `explore` with several files gives each thread a
    /// file of its own, the threads with no file left to start sharing the schedules of the
    /// files still running); `unwind-fuzz` and `walk-fuzz` check functions or processes.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
}

impl Jobs {
    /// The number given, or the cores this process may use.
    fn get(&self) -> usize {
        self.jobs.map_or_else(explore::cores, usize::from)
    }
}

/// Which share of the work this machine does.
#[derive(clap::Args)]
struct ShardArg {
    /// Do shard I of N (`1/4` … `4/4`): every Nth schedule (`explore`, random schedules
    /// only) or process (`fuzz`, `walk-fuzz`), from the (I-1)th. `simclr merge` combines the
    /// shards' `--json` reports into the whole run's.
    #[arg(long, value_name = "I/N", value_parser = str::parse::<Shard>)]
    shard: Option<Shard>,
}

/// The profiler code `explore` and `replay` run in every run.
#[derive(clap::Args)]
struct CodeArgs {
    /// The sampler on `body = "sampler"` threads: `reference`, a mutant's name, or a sampler
    /// this binary was built with.
    #[arg(long, default_value = "reference", conflicts_with = "profiler")]
    sampler: String,
    #[command(flatten)]
    hosting: HostingArgs,
    /// Make "this ICorProfilerInfo call fails" a scheduling choice: any call of profiler code
    /// may answer E_FAIL (random and PCT schedules fail one call in 32, DFS tries both
    /// answers at every call); a replay of such a schedule needs it too.
    #[arg(long)]
    inject: bool,
    /// Answer as this runtime version (`3.1`, `8.0`, `9.0`, `10.0`), whatever the file's `[runtime]
    /// version` says; a replay of one of its schedules needs it too.
    #[arg(long, value_name = "VERSION", value_parser = str::parse::<RuntimeVersion>)]
    runtime: Option<RuntimeVersion>,
}

impl CodeArgs {
    /// What every run changes from the file.
    fn changes(&self) -> explore::Changes {
        explore::Changes {
            inject: self.inject,
            runtime: self.runtime,
        }
    }

    /// A hosted library, else the built-in sampler.
    fn profiler(self) -> explore::Profiler {
        match self.hosting.profiler {
            Some(library) => explore::Profiler::Hosted {
                library,
                clsid: self.hosting.clsid,
                isolation: (!self.hosting.in_process)
                    .then(|| std::time::Duration::from_secs_f64(self.hosting.run_timeout.clamp(0.001, 1e6))),
            },
            None => explore::Profiler::Builtin(self.sampler),
        }
    }
}

/// Exit status of `simclr run --profiler` when the simulated process crashed.
const EXIT_CRASH: u8 = 3;
/// Exit status of `simclr run --profiler` when the simulated process hung.
const EXIT_HANG: u8 = 4;

pub use own::{Attach, OwnSampler};

/// Runs the command line with `samplers` added to the built-in ones, and returns its exit
/// status; call it once, from `main`. The binary should install
/// `sim_clr::process::HeapLockAllocator` as its global allocator, as `simclr` does, so that
/// an allocation by profiler code on a simulated thread takes the process heap lock (an
/// allocation while a target holds it is then the deadlock it is in production).
pub fn main_with(samplers: Vec<OwnSampler>) -> ExitCode {
    if let Err(e) = own::install(samplers) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    out::finish(command())
}

/// Runs the command line's command; its exit status.
fn command() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command.unwrap_or(Command::Catalog) {
        Command::Run {
            files,
            json,
            no_color,
            runtime,
            hosting: HostingArgs { profiler, clsid, .. },
        } => match (profiler, files.as_slice()) {
            (None, _) => run(&files, json, !no_color && colors(), runtime),
            #[cfg(unix)]
            (Some(library), [file]) => hosted::run(file, &library, &clsid, runtime),
            #[cfg(not(unix))]
            (Some(_), [_]) => {
                eprintln!("error: hosting a profiler library needs a Unix loader (dlopen)");
                ExitCode::from(2)
            }
            (Some(_), _) => {
                eprintln!("error: --profiler hosts the library in one scenario file");
                ExitCode::from(2)
            }
        },
        Command::Explain { file, call, out } => explain::run(&file, call, &out),
        Command::Catalog => catalog(),
        Command::List => list(),
        Command::Show { name } => show(&name),
        Command::Explore {
            files,
            schedules,
            strategy,
            depth,
            seed,
            json,
            trace_first,
            jobs,
            shard,
            code,
        } => match scenario_files(&files) {
            Ok(files) => explore::explore(
                &files,
                &explore::Options {
                    strategy,
                    depth,
                    schedules,
                    seed,
                    json,
                    trace_first,
                    jobs: jobs.get(),
                    shard: shard.shard,
                    changes: code.changes(),
                    profiler: code.profiler(),
                },
            ),
            Err(code) => code,
        },
        Command::Replay {
            file,
            schedule,
            code,
            svg,
            json,
        } => {
            let changes = code.changes();
            explore::replay(&file, &schedule, &code.profiler(), changes, svg.as_deref(), json)
        }
        Command::Conform {
            scenarios,
            results,
            hosted,
            runtime,
            platform,
            known,
        } => conform(
            &scenarios,
            &results,
            hosted.as_deref(),
            runtime,
            platform,
            known.as_deref(),
        ),
        Command::Record {
            log,
            out,
            runtime,
            platform,
        } => record(&log, out.as_deref(), runtime, platform),
        Command::Mutants {
            schedules,
            seed,
            fuzz_processes,
            fuzz_schedules,
            out,
            json,
            jobs,
        } => mutants::run(
            &mutants::Budget {
                schedules,
                seed,
                fuzz_processes,
                fuzz_schedules,
                jobs: jobs.get(),
            },
            &out,
            json,
        ),
        Command::SampleRates {
            runs,
            seed,
            min,
            json,
        } => sample_rates::run(runs, seed, min, json),
        Command::Reach {
            files,
            schedules,
            seed,
            json,
        } => reach::run(&files, schedules, seed, json),
        Command::Fuzz {
            processes,
            schedules,
            sampler,
            seed,
            platform,
            json,
            out,
            jobs,
            shard,
        } => fuzz::run(
            &fuzz::Budget {
                processes,
                schedules,
                seed,
                platform: platform.only(),
                jobs: jobs.get(),
                shard: shard.shard,
            },
            &sampler,
            json,
            &out,
        ),
        Command::UnwindCheck { files } => unwind_check::run(&files),
        Command::Walk {
            file,
            target,
            sampler,
        } => hybrid::walk_file(&file, &target, &sampler),
        Command::WalkFuzz {
            processes,
            seed,
            platform,
            json,
            out,
            jobs,
            shard,
        } => hybrid::run(
            processes,
            seed,
            platform.list(),
            jobs.get(),
            json,
            &out,
            shard.shard,
        ),
        Command::Merge { reports } => merge::run(&reports),
        Command::UnwindFuzz {
            functions,
            seed,
            format,
            jobs,
        } => {
            let formats = match format.as_str() {
                "all" => Format::ALL.to_vec(),
                "dwarf" => vec![Format::Dwarf],
                "pe1" => vec![Format::PeV1],
                "pe2" => vec![Format::PeV2],
                other => {
                    eprintln!("error: unknown format `{other}` (dwarf, pe1, pe2 or all)");
                    return ExitCode::from(2);
                }
            };
            unwind_fuzz::run(functions, seed, &formats, jobs.get())
        }
    }
}

/// True when text output may be colored: stdout is a terminal and `NO_COLOR` is not set.
fn colors() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn run(files: &[PathBuf], json: bool, color: bool, runtime: Option<RuntimeVersion>) -> ExitCode {
    let mut scenarios = Vec::new();
    for file in files {
        match scenarios_named(file, runtime) {
            Ok(found) => scenarios.extend(found),
            Err(code) => return code,
        }
    }
    // A file with no call checks nothing here: say what would check it.
    if let Some(s) = scenarios.iter().find(|s| s.calls.is_empty()) {
        let instead = if !s.host.steps.is_empty() {
            "its [host] steps drive a profiler library: `simclr run FILE --profiler LIB.so`"
        } else if s.process.moves() {
            "its threads move: `simclr explore FILE` runs them under many schedules"
        } else {
            "there is nothing to run"
        };
        let name = sim_clr::scenario::printable(&s.name);
        eprintln!("error: scenario `{name}` has no [[calls]], so `run` would check nothing; {instead}");
        return ExitCode::from(2);
    }
    let bar = progress::Progress::new(scenarios.len() as u64, json, "scenarios");
    let reports: Vec<Report> = scenarios
        .iter()
        .map(|s| {
            let report = s.run();
            bar.inc(1);
            report
        })
        .collect();
    bar.finish();
    if json {
        let printed = match reports.as_slice() {
            [one] => print_json(one),
            all => print_json(&all),
        };
        if let Err(code) = printed {
            return code;
        }
    } else {
        for (i, report) in reports.iter().enumerate() {
            if i > 0 {
                outln!();
            }
            out!("{}", report.render_with(color));
        }
    }
    status(&reports)
}

/// The scenarios an argument of `simclr run` names: a file, every `*.toml` of a folder (sorted),
/// or a bundled scenario, answering as `runtime` when it is given; an error (exit 2) says why
/// not.
fn scenarios_named(
    arg: &std::path::Path,
    runtime: Option<RuntimeVersion>,
) -> Result<Vec<Scenario>, ExitCode> {
    if arg.is_dir() {
        return folder_files(arg)?.iter().map(|f| load(f, runtime)).collect();
    }
    if arg.exists() {
        return load(arg, runtime).map(|s| vec![s]);
    }
    let Some((path, text)) = arg.to_str().and_then(fixtures::find_bundled) else {
        eprintln!(
            "error: {}: no such file, and no bundled scenario has that name (see `simclr list`)",
            sim_clr::scenario::printable(&arg.display().to_string())
        );
        return Err(ExitCode::from(2));
    };
    Scenario::parse_as(&format!("fixtures/{path}"), text, runtime)
        .map(|s| vec![s])
        .map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::from(2)
        })
}

/// Every `*.toml` file in `folder`, sorted; exit 2 when it cannot be read or has none.
fn folder_files(folder: &std::path::Path) -> Result<Vec<PathBuf>, ExitCode> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(folder)
        .map_err(|e| {
            eprintln!("error: {}: {e}", folder.display());
            ExitCode::from(2)
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    if files.is_empty() {
        eprintln!("error: {}: no scenario (*.toml) files", folder.display());
        return Err(ExitCode::from(2));
    }
    Ok(files)
}

/// The scenario files `args` name: each file, and every `*.toml` file of each folder.
fn scenario_files(args: &[PathBuf]) -> Result<Vec<PathBuf>, ExitCode> {
    let mut files = Vec::new();
    for arg in args {
        if arg.is_dir() {
            files.extend(folder_files(arg)?);
        } else {
            files.push(arg.clone());
        }
    }
    Ok(files)
}

fn list() -> ExitCode {
    for (path, text) in fixtures::bundled() {
        let name = path.strip_suffix(".toml").unwrap_or(&path);
        let about = Scenario::parse(&path, text)
            .ok()
            .and_then(|s| s.description.lines().next().map(|line| cut(line, 80)))
            .unwrap_or_default();
        outln!("{name:<48} {about}");
    }
    ExitCode::SUCCESS
}

fn show(name: &str) -> ExitCode {
    match fixtures::find_bundled(name) {
        Some((_, text)) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("error: no bundled scenario is named `{name}` (or several are); see `simclr list`");
            ExitCode::from(2)
        }
    }
}

/// Reads a scenario file, answering as `runtime` when it is given, or says why not (exit 2).
fn load(file: &std::path::Path, runtime: Option<RuntimeVersion>) -> Result<Scenario, ExitCode> {
    Scenario::load_as(file, runtime).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

/// Which platforms a generator makes processes for (`--platform`).
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum Platforms {
    /// Windows only.
    Windows,
    /// Unix only.
    Unix,
    /// Both.
    All,
}

impl Platforms {
    /// The platforms' names, in the order they alternate.
    fn list(self) -> &'static [&'static str] {
        match self {
            Platforms::Windows => &["windows"],
            Platforms::Unix => &["unix"],
            Platforms::All => &["windows", "unix"],
        }
    }

    /// The one platform, if only one.
    fn only(self) -> Option<&'static str> {
        match self.list() {
            [one] => Some(one),
            _ => None,
        }
    }
}

/// The end of a command that judges a list: the list as JSON, or `summary`; exit 1 when
/// `failed`, 0 otherwise (2 if the JSON cannot be written).
fn conclude(json: bool, list: &impl serde::Serialize, summary: &str, failed: bool) -> ExitCode {
    if json {
        if let Err(code) = print_json(list) {
            return code;
        }
    } else {
        outln!("{summary}");
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Prints `report` as one pretty-printed JSON document, or says why it cannot (exit 2).
pub(crate) fn print_json(report: &impl serde::Serialize) -> Result<(), ExitCode> {
    out::json(report).map_err(|e| {
        eprintln!("error: cannot serialize the report: {e}");
        ExitCode::from(2)
    })
}

fn catalog() -> ExitCode {
    let mut reports = Vec::new();
    let bar = progress::Progress::new(fixtures::catalog().len() as u64, false, "scenarios");
    for (file, text) in fixtures::catalog() {
        match Scenario::parse(&format!("fixtures/scenarios/{file}"), text) {
            Ok(scenario) => {
                let report = scenario.run();
                bar.println(&report.summary());
                bar.inc(1);
                reports.push(report);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    bar.finish();
    let failed = reports
        .iter()
        .filter(|r| !r.expectations.failed.is_empty())
        .count();
    let checked: usize = reports.iter().map(|r| r.expectations.checked).sum();
    outln!(
        "{} scenarios, {checked} expectations checked, {failed} scenarios with mismatches",
        reports.len()
    );
    let processes = match explore::catalog() {
        Ok(ok) => ok,
        Err(code) => return code,
    };
    if processes {
        status(&reports)
    } else {
        ExitCode::from(1)
    }
}

/// `simclr record`: one log into a scenario, or a results folder into a folder of scenarios
/// compared with their logs.
fn record(
    log: &std::path::Path,
    out: Option<&std::path::Path>,
    runtime: RuntimeVersion,
    platform: Platform,
) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    if !log.is_dir() {
        let name = log
            .file_stem()
            .map_or("recorded".into(), |s| s.to_string_lossy().into_owned());
        let text = match sim_clr::input::read_text(log, sim_clr::scenario::MAX_FILE_BYTES) {
            Ok(text) => text,
            Err(e) => return fail(format!("cannot read {}: {e}", log.display())),
        };
        // A log's scenario is the check of its records: with none there is nothing to check.
        if text.trim().is_empty() {
            return fail(format!(
                "{}: the log holds no record (one JSON object per line): nothing was recorded",
                log.display()
            ));
        }
        return match (record::scenario(&name, &text, runtime, platform), out) {
            (Err(e), _) => fail(format!("{}: {e}", log.display())),
            (Ok(scenario), None) => {
                out!("{scenario}");
                ExitCode::SUCCESS
            }
            (Ok(scenario), Some(path)) => match std::fs::write(path, scenario) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(format!("cannot write {}: {e}", path.display())),
            },
        };
    }
    let Some(out) = out else {
        return fail("recording a folder needs `-o FOLDER` for the scenarios".into());
    };
    if let Err(e) = record::folder(log, out, runtime, platform) {
        return fail(e);
    }
    match conform::compare(out, log, None, None, None, &conform::Known::default(), false) {
        Ok(comparison) => {
            let (passed, failed, table) = comparison.simulated;
            out!("{table}");
            outln!("recorded: {passed} passed, {failed} failed");
            if passed + failed == 0 {
                eprintln!(
                    "error: {}: no record in any log: nothing was compared",
                    log.display()
                );
                ExitCode::from(1)
            } else if failed == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => fail(e),
    }
}

fn conform(
    scenarios: &std::path::Path,
    results: &std::path::Path,
    hosted: Option<&std::path::Path>,
    runtime: Option<RuntimeVersion>,
    platform: Option<Platform>,
    known: Option<&std::path::Path>,
) -> ExitCode {
    let known = match known.map(conform::Known::load).transpose() {
        Ok(known) => known.unwrap_or_default(),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match conform::compare(scenarios, results, hosted, runtime, platform, &known, true) {
        Ok(comparison) => {
            let (passed, failed, table) = comparison.simulated;
            out!("{table}");
            match comparison.known {
                0 => outln!("{passed} passed, {failed} failed"),
                known => outln!("{passed} passed ({known} as a known difference), {failed} failed"),
            }
            let mut all_passed = failed == 0;
            if let Some(((passed, failed, table), cannot)) = comparison.hosted {
                outln!();
                out!("{table}");
                for why in &cannot {
                    outln!("hosted: cannot run {why}");
                }
                outln!("hosted: {passed} passed, {failed} failed");
                all_passed &= failed == 0;
            }
            if all_passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn status(reports: &[Report]) -> ExitCode {
    if reports.iter().all(|r| r.expectations.failed.is_empty()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
