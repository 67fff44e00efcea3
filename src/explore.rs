//! `simclr explore` and `simclr replay`: a process scenario under many schedules, or one.

use crate::hosted::loader as hosted_loader;
#[cfg(unix)]
use crate::out::{out, outln};
use crate::own::{self, OwnSampler};
use crate::progress::Progress;
use crate::{load, print_json};
use fixtures::sampling::Variant;
use sim_clr::process::schedule::Schedule;
use sim_clr::process::{ExploreReport, Process, RunReport, Shard, Strategy, TraceEntry};
use sim_clr::runtime::RuntimeVersion;
use sim_clr::scenario::Scenario;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// What the command line overrides of the file's `[explore]` table.
pub struct Options {
    /// `random`, `pct`, `dfs` or `cover`.
    pub strategy: Option<String>,
    /// PCT depth or DFS preemption bound.
    pub depth: Option<u32>,
    /// Schedules to run at most.
    pub schedules: Option<u64>,
    /// First seed.
    pub seed: Option<u64>,
    /// One JSON document instead of text.
    pub json: bool,
    /// Runs of each outcome kept with their traces ([`Process::trace_first`]).
    pub trace_first: usize,
    /// Schedules run at once (built-in profiler code only: [`Process::jobs`]).
    pub jobs: usize,
    /// Run only this share of the schedules (random schedules only: [`Process::shard`]).
    pub shard: Option<Shard>,
    /// What every run changes from the file.
    pub changes: Changes,
    /// The profiler code every run carries.
    pub profiler: Profiler,
}

/// What every run of `explore` or `replay` changes from the file, which a replay of one of its
/// schedules needs too.
#[derive(Clone, Copy, Debug, Default)]
pub struct Changes {
    /// Whether any runtime call may fail, as a scheduling choice ([`Process::inject`]).
    pub inject: bool,
    /// The runtime version answered as, whatever the file's `[runtime] version` says.
    pub runtime: Option<RuntimeVersion>,
}

impl Changes {
    /// The command-line options that make them (` --inject`, ` --runtime 9.0`).
    fn options(self) -> String {
        let inject = if self.inject { " --inject" } else { "" };
        match self.runtime {
            Some(version) => format!("{inject} --runtime {version}"),
            None => inject.to_string(),
        }
    }
}

/// The cores this process may use.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The profiler code a process's runs carry.
pub enum Profiler {
    /// The sampler to put on the profiler threads (`body = "sampler"`, …): `reference`, a
    /// mutant, or one of the binary's own.
    Builtin(String),
    /// A native profiler library hosted afresh in every run (`--profiler LIB --clsid GUID`).
    Hosted {
        /// The library.
        library: PathBuf,
        /// The CLSID passed to its `DllGetClassObject`.
        clsid: String,
        /// Each run in a worker process of its own, with this wall-clock timeout (`None`:
        /// `--in-process`).
        isolation: Option<std::time::Duration>,
    },
}

impl Profiler {
    /// The command that replays `schedule` of `file` with this code and `changes`.
    fn replay(&self, file: &Path, schedule: &str, changes: Changes) -> String {
        format!("{}{}", self.replay_unchanged(file, schedule), changes.options())
    }

    fn replay_unchanged(&self, file: &Path, schedule: &str) -> String {
        match self {
            Profiler::Builtin(sampler) => replay_command(file, sampler, schedule),
            Profiler::Hosted {
                library,
                clsid,
                isolation,
            } => format!(
                "{} replay {} --profiler {} --clsid {clsid}{} --schedule {schedule}",
                own::program(),
                file.display(),
                library.display(),
                if isolation.is_some() { "" } else { " --in-process" }
            ),
        }
    }
}

/// A sampler `--sampler` names.
pub enum Chosen {
    /// The reference, or one of its mutants.
    BuiltIn(Variant),
    /// One the binary was built with ([`crate::main_with`]).
    Own(&'static OwnSampler),
}

impl Chosen {
    /// `scenario`'s process with this sampler on its profiler threads.
    pub fn process(&self, scenario: Scenario) -> Result<Process, String> {
        match self {
            Chosen::BuiltIn(variant) => fixtures::sampling::process(scenario, *variant),
            Chosen::Own(own) => {
                let mut process = Process::new(scenario);
                (own.attach)(&mut process)?;
                Ok(process)
            }
        }
    }
}

/// The sampler named `sampler` (`reference`, a mutant, or one of the binary's own), or (exit
/// 2, with the names there are) none.
pub fn chosen(sampler: &str) -> Result<Chosen, ExitCode> {
    if let Some(variant) = fixtures::sampling::variant(sampler) {
        return Ok(Chosen::BuiltIn(variant));
    }
    if let Some(own) = own::find(sampler) {
        return Ok(Chosen::Own(own));
    }
    let mutants = fixtures::sampling::mutants();
    let names: Vec<&str> = std::iter::once("reference")
        .chain(own::names())
        .chain(mutants.iter().map(|m| m.name))
        .collect();
    eprintln!("error: no sampler is named `{sampler}` ({})", names.join(", "));
    Err(ExitCode::from(2))
}

/// The command that replays `schedule` of `file` with `sampler` on its sampler threads.
pub fn replay_command(file: &Path, sampler: &str, schedule: &str) -> String {
    let variant = if sampler == "reference" {
        String::new()
    } else {
        format!(" --sampler {sampler}")
    };
    format!(
        "{} replay {}{variant} --schedule {schedule}",
        own::program(),
        file.display()
    )
}

/// The scenario's process with `profiler` attached: the built-in code its `body` fields name
/// (`reference` or a mutant), or a hosted library; exit 2 for code that cannot be attached.
fn attach(file: &Path, scenario: Scenario, profiler: &Profiler) -> Result<Process, ExitCode> {
    let fail = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    match profiler {
        Profiler::Builtin(sampler) => chosen(sampler)?
            .process(scenario)
            .map_err(|e| fail(format!("{}:{e}", file.display()))),
        Profiler::Hosted {
            library,
            clsid,
            isolation,
        } => {
            if let Some(body) = scenario.process.bodies.iter().flatten().next() {
                return Err(fail(format!(
                    "{}:{}: `body = \"{}\"` runs built-in profiler code; --profiler hosts a library instead",
                    file.display(),
                    body.line,
                    body.name
                )));
            }
            let mut process = Process::new(scenario);
            hosted_loader(&mut process, library, clsid, *isolation)?;
            Ok(process)
        }
    }
}

/// Hosting needs a Unix loader.
#[cfg(not(unix))]
fn hosted_loader(_: &mut Process, _: &Path, _: &str, _: Option<std::time::Duration>) -> Result<(), ExitCode> {
    eprintln!("error: hosting a profiler library needs a Unix loader (dlopen)");
    Err(ExitCode::from(2))
}

/// One file made ready to explore: its process with the profiler code attached, and what the
/// file and the command line say to run.
struct Exploration {
    file: PathBuf,
    process: Process,
    strategy: Strategy,
    schedules: u64,
    seed: u64,
    expect: Option<Vec<String>>,
}

impl Exploration {
    /// Whether `report` found other outcomes than the file expects (without an `expect`, any
    /// failing schedule). A shard sees some of the schedules: an outcome outside the expected
    /// ones is a mismatch, an expected one it did not meet may be another shard's.
    fn mismatch(&self, report: &ExploreReport, shard: Option<Shard>) -> bool {
        match (&self.expect, shard) {
            (Some(expect), None) => !report.found().into_iter().eq(expect.iter().map(String::as_str)),
            (Some(expect), Some(_)) => report.outcomes.keys().any(|o| !expect.contains(o)),
            (None, None) => report.first_failure.is_some() || !report.unmet.is_empty(),
            (None, Some(_)) => report.first_failure.is_some(),
        }
    }
}

/// Reads `file` and attaches the profiler code; exit 2 for a file or an option that cannot be
/// explored.
fn prepare(file: &Path, options: &Options) -> Result<Exploration, ExitCode> {
    let fail = |message: String| {
        eprintln!("error: {message}");
        ExitCode::from(2)
    };
    let scenario = load(file, options.changes.runtime)?;
    let spec = scenario.process.explore.clone();
    let depth = options.depth;
    let strategy = match options.strategy.as_deref() {
        None => match (spec.strategy, depth) {
            (Strategy::Pct(_), Some(d)) => Strategy::Pct(d.max(1)),
            (Strategy::Dfs(_), Some(d)) => Strategy::Dfs(d),
            (s, _) => s,
        },
        Some("random") => Strategy::Random,
        Some("pct") => Strategy::Pct(depth.unwrap_or(3).max(1)),
        Some("dfs") => Strategy::Dfs(depth.unwrap_or(2)),
        Some("cover") => Strategy::Cover,
        Some(other) => {
            return Err(fail(format!(
                "unknown strategy `{other}` (random, pct, dfs or cover)"
            )))
        }
    };
    if options.schedules == Some(0) {
        return Err(fail("--schedules must be at least 1".into()));
    }
    if !scenario.process.moves() {
        return Err(fail(format!(
            "{}: no thread has a program step or a `body`: nothing moves, so there is nothing to schedule (use `simclr run`)",
            file.display()
        )));
    }
    let mut process = attach(file, scenario, &options.profiler)?;
    if let Profiler::Builtin(_) = options.profiler {
        process.jobs(options.jobs);
    }
    process.inject(options.changes.inject);
    if let Some(shard) = options.shard {
        if strategy != Strategy::Random {
            return Err(fail(
                "--shard splits random schedules only (`--strategy random`): each PCT schedule learns its length from the ones before it, each DFS schedule follows from the one before, and each cover schedule steers by what the ones before it reached".into(),
            ));
        }
        if options.trace_first > 0 {
            return Err(fail(
                "--trace-first and --shard cannot be combined: a shard's first runs are not the run's".into(),
            ));
        }
        process.shard(shard);
    }
    process.trace_first(options.trace_first);
    Ok(Exploration {
        file: file.to_path_buf(),
        process,
        strategy,
        schedules: options.schedules.unwrap_or(spec.schedules),
        seed: options.seed.unwrap_or(spec.seed),
        expect: spec.expect,
    })
}

/// Explores each of `files` as it says and the options override; exit 1 when the outcomes of
/// any differ from its file's `expect` (or, without one, when any of its schedules failed).
/// Several files are explored side by side on the `--jobs` threads, each driven by one thread
/// and helped by the idle ones once no file is left to start ([`sim_clr::parallel::tasks`]),
/// and reported in the order given: each file's report is the bytes that exploring it alone
/// prints, and a line of totals follows. Every file is read and its process built before the
/// first run, so a bad file is an error before any exploration.
pub fn explore(files: &[PathBuf], options: &Options) -> ExitCode {
    if files.len() > 1 && options.shard.is_some() {
        eprintln!(
            "error: --shard splits one file's schedules: give one file (a command per file, each with its shard)"
        );
        return ExitCode::from(2);
    }
    #[cfg(target_os = "linux")]
    if options.json {
        // The report is standard output's; a hosted library's printf goes to stderr.
        host::isolation::library_stdout_to_stderr();
    }
    let mut explorations = Vec::with_capacity(files.len());
    for file in files {
        match prepare(file, options) {
            Ok(e) => explorations.push(e),
            Err(code) => return code,
        }
    }
    let (reports, mismatches) = match explorations.as_slice() {
        [one] => {
            let bar = Progress::new(one.schedules, options.json, "schedules");
            let report = one
                .process
                .explore(one.strategy, one.schedules, one.seed, |done, faults| {
                    if done % 64 == 0 {
                        bar.set_position(done);
                        bar.set_message(format!("{faults} faults"));
                    }
                });
            bar.finish();
            let mismatch = one.mismatch(&report, options.shard);
            (vec![report], usize::from(mismatch))
        }
        all => explore_side_by_side(all, options),
    };
    let mut reports = reports;
    for (e, report) in explorations.iter().zip(&mut reports) {
        report.name_replays(|schedule| options.profiler.replay(&e.file, schedule, options.changes));
    }
    if options.json {
        let printed = match reports.as_slice() {
            [report] => crate::merge::print_shard(report, options.shard),
            all => print_json(&all),
        };
        if let Err(code) = printed {
            return code;
        }
    } else {
        for (e, report) in explorations.iter().zip(&reports) {
            let expect = e.expect.as_deref();
            out!(
                "{}",
                render(report, &e.file, expect, &options.profiler, options.changes)
            );
        }
        if let Some(shard) = options.shard {
            outln!("shard {shard}: `--json` reports of every shard combine with `simclr merge`");
        }
        if reports.len() > 1 {
            outln!(
                "{} scenarios explored, {mismatches} with unexpected outcomes",
                reports.len()
            );
        }
    }
    if mismatches > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Every exploration's report, in order, and how many found unexpected outcomes: explored on
/// the `--jobs` threads (a hosted library's one at a time), a bar counting the files.
fn explore_side_by_side(all: &[Exploration], options: &Options) -> (Vec<ExploreReport>, usize) {
    let jobs = match options.profiler {
        Profiler::Builtin(_) => options.jobs,
        Profiler::Hosted { .. } => 1,
    };
    let bar = Progress::new(all.len() as u64, options.json, "scenarios");
    let mut reports = Vec::with_capacity(all.len());
    let mut mismatches = 0;
    side_by_side(all, jobs, |e, report| {
        mismatches += usize::from(e.mismatch(&report, options.shard));
        reports.push(report);
        bar.inc(1);
    });
    bar.finish();
    (reports, mismatches)
}

/// Explores `all` side by side on `jobs` threads ([`sim_clr::parallel::tasks`]) and gives
/// each exploration's report to `emit`, in order.
fn side_by_side(all: &[Exploration], jobs: usize, mut emit: impl FnMut(&Exploration, ExploreReport)) {
    sim_clr::parallel::tasks(
        jobs,
        all.len() as u64,
        |k, pool| {
            let e = &all[k as usize];
            e.process
                .explore_in(pool, e.strategy, e.schedules, e.seed, |_, _| {})
        },
        |k, report| emit(&all[k as usize], report),
    );
}

/// The text form of an exploration.
pub fn render(
    report: &ExploreReport,
    file: &Path,
    expect: Option<&[String]>,
    profiler: &Profiler,
    changes: Changes,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let exhaustive = if report.exhaustive {
        " (every schedule within the bound)"
    } else {
        ""
    };
    writeln!(
        out,
        "{}: {} schedules, strategy {}, seed {}{exhaustive}",
        report.scenario, report.schedules_run, report.strategy, report.seed
    )
    .unwrap();
    for (outcome, count) in &report.outcomes {
        writeln!(out, "  {outcome:<26} {count}").unwrap();
    }
    if report.stops > 0 {
        let met: Vec<String> = report.hazards.iter().map(|(h, n)| format!("{h} {n}")).collect();
        let met = if met.is_empty() {
            "none".to_string()
        } else {
            met.join(", ")
        };
        writeln!(out, "{} stops of a thread; hazards met: {met}", report.stops).unwrap();
    }
    crate::reached::render(&mut out, &report.coverage);
    for (outcome, why) in &report.unmet {
        writeln!(out, "outcome {outcome}: {why}").unwrap();
    }
    if let Some(expect) = expect {
        let verdict = if report.found().into_iter().eq(expect.iter().map(|s| s.as_str())) {
            "as expected"
        } else {
            "MISMATCH"
        };
        writeln!(out, "expected outcomes: {}: {verdict}", expect.join(", ")).unwrap();
    }
    match &report.first_failure {
        None => writeln!(out, "no failing schedule").unwrap(),
        Some(f) => {
            writeln!(out, "first failure: {}: {}", f.fault.kind, f.fault.message).unwrap();
            for link in &f.fault.cycle {
                writeln!(
                    out,
                    "  {} waits for {} ← {}",
                    link.thread, link.waits_for, link.held_by
                )
                .unwrap();
            }
            writeln!(out, "replay: {}", profiler.replay(file, &f.schedule, changes)).unwrap();
        }
    }
    for (outcome, runs) in &report.traces {
        for run in runs {
            writeln!(
                out,
                "\n-- run {} ({outcome}), schedule {}",
                run.index, run.schedule
            )
            .unwrap();
            render_trace(&mut out, &run.trace);
        }
    }
    out
}

/// Replays one schedule of `file` with its full trace; with `svg`, draws it there too. Exit 0
/// when the run ends `ok`, 1 when it fails, 2 on bad input.
pub fn replay(
    file: &Path,
    schedule: &str,
    profiler: &Profiler,
    changes: Changes,
    svg: Option<&Path>,
    json: bool,
) -> ExitCode {
    let scenario = match load(file, changes.runtime) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let schedule: Schedule = match schedule.parse() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    #[cfg(target_os = "linux")]
    if json {
        // The report is standard output's; a hosted library's printf goes to stderr.
        host::isolation::library_stdout_to_stderr();
    }
    let mut process = match attach(file, scenario, profiler) {
        Ok(p) => p,
        Err(code) => return code,
    };
    process.inject(changes.inject);
    let replayed = match svg {
        Some(_) => process.replay_timeline(&schedule),
        None => process.replay(&schedule),
    };
    let mut report = match replayed {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    if let Some(out) = svg {
        let title = file.file_name().map_or_else(
            || file.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        if let Err(e) = std::fs::write(out, crate::timeline::svg(&report, &title)) {
            eprintln!("error: {}: {e}", out.display());
            return ExitCode::from(2);
        }
        // The timeline is the picture's; the report printed stays as without `--svg`.
        report.timeline = None;
    }
    if json {
        if let Err(code) = print_json(&report) {
            return code;
        }
    } else {
        out!("{}", render_run(&report));
    }
    // A schedule that fails fails the command, as the exploration that found it did.
    if report.outcome == "ok" {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Writes a run's trace, one step a line.
fn render_trace(out: &mut String, trace: &[TraceEntry]) {
    use std::fmt::Write;
    for e in trace {
        let line = if e.line == 0 {
            String::new()
        } else {
            format!(":{}", e.line)
        };
        writeln!(
            out,
            "#{:<5} {:>8}us  {}{line}  {}",
            e.step, e.time_us, e.thread, e.what
        )
        .unwrap();
    }
}

/// The text form of one run: its trace, then how it ended.
pub fn render_run(report: &RunReport) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    render_trace(&mut out, &report.trace);
    writeln!(
        out,
        "outcome: {} after {} steps, {} us of virtual time; schedule {}",
        report.outcome, report.steps, report.time_us, report.schedule
    )
    .unwrap();
    if let Some(f) = &report.fault {
        writeln!(out, "{}: {}", f.kind, f.message).unwrap();
        for link in &f.cycle {
            writeln!(
                out,
                "  {} waits for {} ← {}",
                link.thread, link.waits_for, link.held_by
            )
            .unwrap();
        }
    }
    out
}

/// Explores every bundled process scenario as its file says, one line each, side by side on
/// every core (the lines in file order); true when every one found exactly its expected
/// outcomes.
pub fn catalog() -> Result<bool, ExitCode> {
    let processes = fixtures::process_catalog().iter().map(|f| ("processes", f));
    let pitfalls = fixtures::pitfall_catalog().iter().map(|f| ("pitfalls", f));
    let mut catalog = Vec::new();
    for (folder, (file, text)) in processes.chain(pitfalls) {
        let path = format!("fixtures/{folder}/{file}");
        let scenario = Scenario::parse(&path, text).map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::from(2)
        })?;
        let spec = scenario.process.explore.clone();
        catalog.push(Exploration {
            process: attach(Path::new(&path), scenario, &Profiler::Builtin("reference".into()))?,
            file: path.into(),
            strategy: spec.strategy,
            schedules: spec.schedules,
            seed: spec.seed,
            expect: spec.expect,
        });
    }
    let width = catalog
        .iter()
        .map(|e| e.process.scenario().name.len())
        .max()
        .unwrap_or(0);
    let bar = Progress::new(catalog.len() as u64, false, "process scenarios");
    let mut mismatches = 0;
    side_by_side(&catalog, cores(), |e, report| {
        let ok = !e.mismatch(&report, None);
        mismatches += usize::from(!ok);
        let counts: Vec<String> = (report.outcomes.iter().map(|(k, v)| format!("{k} {v}")))
            .chain(report.unmet.keys().cloned())
            .collect();
        bar.println(&format!(
            "{} {:<width$} {:>6} schedules ({}): {}",
            if ok { "ok  " } else { "FAIL" },
            report.scenario,
            report.schedules_run,
            report.strategy,
            counts.join(", ")
        ));
        bar.inc(1);
    });
    bar.finish();
    outln!(
        "{} process and pitfall scenarios explored, {mismatches} with unexpected outcomes",
        catalog.len()
    );
    Ok(mismatches == 0)
}
