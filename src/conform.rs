//! `simclr conform`: the same call shapes on a real CoreCLR and on the simulator, compared case
//! by case.
//!
//! For every scenario `NAME.toml` of the scenarios directory, the results directory holds what
//! the real runtime did: `NAME.jsonl` (one record per call, written by the conformance
//! profiler) and `NAME.exit` (`ok`, `crash` or `hang`). Each scenario call with a `case` label
//! is compared with the real record of that label: HRESULT, number of frames, method names,
//! `funcId == 0` positions and the module each one's IP lies in, context sizes, which callbacks
//! share a `FunctionID`, and which callbacks' IPs lie outside their method's `GetCodeInfo2`
//! regions. A call the simulator
//! reports as fatal must match a real process that crashed (or hung) before recording it.
//! The notation is described in `docs/real-runtime.md`.

use corprof::FunctionId;
use serde_json::Value;
use sim_clr::code::CodeMap;
use sim_clr::platform::Platform;
use sim_clr::runtime::RuntimeVersion;
use sim_clr::scenario::{CallReport, FaultReport, Scenario};
use sim_clr::trace::FaultKind;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One compared case.
struct Row {
    case: String,
    api: String,
    real: String,
    simulated: String,
    verdict: Result<(), String>,
    /// Why the real answer differs from the simulated one, when it is a listed difference.
    known: Option<String>,
}

/// Real answers that differ from the simulated ones for a reason outside the runtime, each
/// with why: the Windows lane's answers that come from Wine rather than from Windows
/// (`conformance/windows/wine.toml`). A listed case passes with either answer, the
/// simulated one or the listed one; any other answer fails as usual.
#[derive(Default)]
pub struct Known {
    /// Case label → (the listed answer, in the comparison's notation; why).
    cases: BTreeMap<String, (String, String)>,
}

impl Known {
    /// Reads a list of `[[difference]]` tables, each `case`, `real` (the answer, as the
    /// comparison table writes it) and `why`.
    pub fn load(path: &Path) -> Result<Known, String> {
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            difference: Vec<Difference>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Difference {
            case: String,
            real: String,
            why: String,
        }
        let text = read(path)?.ok_or_else(|| format!("{}: no such file", path.display()))?;
        let file: File = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut cases = BTreeMap::new();
        for d in file.difference {
            if cases.insert(d.case.clone(), (d.real, d.why)).is_some() {
                return Err(format!("{}: case `{}` is listed twice", path.display(), d.case));
            }
        }
        Ok(Known { cases })
    }

    /// Why `real` is the listed answer of `case`, if it is.
    fn explains(&self, case: &str, real: &str) -> Option<&str> {
        let (answer, why) = self.cases.get(case)?;
        (answer == real).then_some(why.as_str())
    }
}

/// Compares every scenario with its results; returns (passed, failed, text table). Inputs
/// that cannot be compared are errors, never an empty pass: a missing or empty scenarios
/// folder, a missing results folder, results for none of the scenarios (the folders swapped,
/// say), a results file that cannot be read, and two records of one case.
/// The scenarios answer as `runtime` and on `platform` when they are given, whatever they
/// say. With `exits`, how
/// each process ended (`NAME.exit`) is compared with how the simulator predicts it ends, a
/// row of its own (scenarios recorded from logs reproduce answers, not crashes: not then).
pub fn compare(
    scenarios: &Path,
    results: &Path,
    hosted: Option<&Path>,
    runtime: Option<RuntimeVersion>,
    platform: Option<Platform>,
    known: &Known,
    exits: bool,
) -> Result<Comparison, String> {
    let mut files: Vec<_> = std::fs::read_dir(scenarios)
        .map_err(|e| format!("{}: {e}", scenarios.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    if files.is_empty() {
        return Err(format!("{}: no scenario (*.toml) files", scenarios.display()));
    }
    if !results.is_dir() {
        return Err(format!("{}: not a results folder", results.display()));
    }
    files.sort();
    let mut rows = Vec::new();
    let mut hosted_rows = Vec::new();
    let mut cannot_host = Vec::new();
    let mut runs = 0;
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let scenario = Scenario::load_on(&file, runtime, platform).map_err(|e| e.to_string())?;
        let exit = read(&results.join(format!("{stem}.exit")))?;
        // A run that crashed before its first record may leave no log.
        let log = read(&results.join(format!("{stem}.jsonl")))?.unwrap_or_default();
        let Some(exit) = exit else {
            rows.push(Row {
                case: stem.clone(),
                api: "-".into(),
                real: "not run".into(),
                simulated: "-".into(),
                verdict: Err("no real run".into()),
                known: None,
            });
            continue;
        };
        runs += 1;
        rows.extend(compare_one(&scenario, exit.trim(), &log, known, exits)?);
        if let Some(library) = hosted {
            if scenario.host.steps.is_empty() {
                cannot_host.push(format!("{stem}: the scenario has no [host] steps"));
                continue;
            }
            let out = results.join("hosted");
            std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
            let log_path = out.join(format!("{stem}.jsonl"));
            let (hosted_exit, hosted_log) = host_run(&file, library, &log_path, runtime)?;
            hosted_rows.extend(compare_hosted(
                &scenario.name,
                exit.trim(),
                &log,
                &hosted_exit,
                &hosted_log,
            )?);
        }
    }
    if runs == 0 {
        return Err(format!(
            "{}: no results (*.exit) for any scenario of {}",
            results.display(),
            scenarios.display()
        ));
    }
    Ok(Comparison {
        known: rows.iter().filter(|r| r.known.is_some()).count(),
        simulated: tally(&rows, "simulated"),
        hosted: hosted.map(|_| (tally(&hosted_rows, "hosted"), cannot_host)),
    })
}

/// What `compare` found: (passed, failed, table) for the simulated scenarios, and, when a
/// library was hosted, the same for it with the scenarios it could not run (and why).
pub struct Comparison {
    /// The scenarios run by the simulator against the real runtime.
    pub simulated: (usize, usize, String),
    /// How many of the simulated rows passed as a listed difference ([`Known`]).
    pub known: usize,
    /// The hosted library against the real runtime, and the scenarios it cannot run.
    pub hosted: Option<((usize, usize, String), Vec<String>)>,
}

/// A file's text; `None` when it does not exist.
fn read(path: &Path) -> Result<Option<String>, String> {
    match sim_clr::input::read_text(path, sim_clr::scenario::MAX_FILE_BYTES) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// How long a hosted run may take before it counts as hung.
const HOSTED_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `simclr run SCENARIO --profiler LIBRARY` as its own process (a crash of the simulated
/// process ends it, as the real one would end), with the profiler's log at `log`; returns the
/// exit (`ok`, `crash`, `hang`, `failed(N)`) and the log.
fn host_run(
    scenario: &Path,
    library: &Path,
    log: &Path,
    runtime: Option<RuntimeVersion>,
) -> Result<(String, String), String> {
    let _ = std::fs::remove_file(log);
    let exe = std::env::current_exe().map_err(|e| format!("simclr's own path: {e}"))?;
    let mut command = Command::new(exe);
    command.arg("run");
    if let Some(version) = runtime {
        command.args(["--runtime", version.as_str()]);
    }
    let mut child = command
        .arg(scenario)
        .arg("--profiler")
        .arg(library)
        .env("CONF_LOG", log)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting a hosted run: {e}"))?;
    let started = Instant::now();
    let exit = loop {
        match child
            .try_wait()
            .map_err(|e| format!("waiting for a hosted run: {e}"))?
        {
            Some(status) => {
                break match status.code() {
                    Some(0) => "ok".to_string(),
                    Some(c) if c == i32::from(crate::EXIT_CRASH) => "crash".to_string(),
                    Some(c) if c == i32::from(crate::EXIT_HANG) => "hang".to_string(),
                    Some(c) => format!("failed({c})"),
                    None => "crash".to_string(),
                }
            }
            None if started.elapsed() > HOSTED_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break "hang".to_string();
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    Ok((exit, read(log)?.unwrap_or_default()))
}

/// Compares the hosted library's records and exit with the real runtime's, case by case.
fn compare_hosted(
    name: &str,
    exit: &str,
    log: &str,
    hosted_exit: &str,
    hosted_log: &str,
) -> Result<Vec<Row>, String> {
    let real = records(name, log)?;
    let mut hosted = records(&format!("{name} (hosted)"), hosted_log)?;
    let mut rows = Vec::new();
    for (case, record) in real {
        let real_text = describe_real(&record, false);
        let (hosted_text, verdict) = match hosted.remove(&case) {
            Some(h) => {
                let text = describe_real(&h, false);
                let verdict = if text == real_text {
                    Ok(())
                } else {
                    Err("differs".into())
                };
                (text, verdict)
            }
            None => (
                "no record".into(),
                Err("the hosted library never recorded it".into()),
            ),
        };
        rows.push(Row {
            case,
            api: record["api"].as_str().unwrap_or("?").into(),
            real: real_text,
            simulated: hosted_text,
            verdict,
            known: None,
        });
    }
    for (case, record) in hosted {
        rows.push(Row {
            case,
            api: record["api"].as_str().unwrap_or("?").into(),
            real: "no record".into(),
            simulated: describe_real(&record, false),
            verdict: Err("the real runtime never recorded it".into()),
            known: None,
        });
    }
    rows.push(process_row(name, exit, hosted_exit));
    Ok(rows)
}

/// (passed, failed, the table) of compared rows; `column` names the compared side. A listed
/// difference passes, its row saying so.
fn tally(rows: &[Row], column: &str) -> (usize, usize, String) {
    let passed = rows.iter().filter(|r| r.verdict.is_ok()).count();
    let mut table = format!(
        "{:<34} {:<24} {:<44} {:<44} result\n",
        "case", "api", "real", column
    );
    for r in rows {
        let verdict = match (&r.verdict, &r.known) {
            (Ok(()), Some(why)) => format!("ok, a known difference: {why}"),
            (Ok(()), None) => "ok".to_string(),
            (Err(why), _) => format!("FAIL: {why}"),
        };
        table.push_str(&format!(
            "{:<34} {:<24} {:<44} {:<44} {verdict}\n",
            r.case, r.api, r.real, r.simulated
        ));
    }
    (passed, rows.len() - passed, table)
}

/// The records of a conformance log by case label; a malformed line or a second record of a
/// case is an error.
fn records(name: &str, log: &str) -> Result<BTreeMap<String, Value>, String> {
    let mut records = BTreeMap::new();
    for (n, line) in log.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: Value = serde_json::from_str(line).map_err(|e| format!("{name}: line {}: {e}", n + 1))?;
        let case = record["case"]
            .as_str()
            .ok_or_else(|| format!("{name}: line {}: no case", n + 1))?
            .to_string();
        if records.insert(case.clone(), record).is_some() {
            return Err(format!(
                "{name}: line {}: a second record of case `{case}`",
                n + 1
            ));
        }
    }
    Ok(records)
}

fn compare_one(
    scenario: &Scenario,
    exit: &str,
    log: &str,
    known: &Known,
    judge_exit: bool,
) -> Result<Vec<Row>, String> {
    let mut real = records(&scenario.name, log)?;
    let report = scenario.run();
    let mut calls: Vec<&CallReport> = Vec::new();
    for call in &report.calls {
        calls.push(call);
        calls.extend(call.nested.iter());
    }
    let mut rows = Vec::new();
    for call in calls.iter().filter(|c| c.case.is_some()) {
        let case = call.case.clone().unwrap();
        let faults: Vec<&FaultReport> = report
            .faults
            .iter()
            .filter(|f| f.call == call.index && f.fatal)
            .collect();
        let simulated = describe_simulated(call, &faults, &scenario.code);
        let (real_text, verdict) = match (real.remove(&case), faults.first()) {
            (Some(record), None) => {
                let text = describe_real(&record, true);
                (
                    text.clone(),
                    if text == simulated {
                        Ok(())
                    } else {
                        Err("differs".into())
                    },
                )
            }
            (None, Some(fault)) => {
                let expected = match FaultKind::parse(&fault.kind) {
                    Some(kind) if kind.hangs() => "hang",
                    Some(_) => "crash",
                    None => "?",
                };
                let verdict = if exit == expected {
                    Ok(())
                } else {
                    Err(format!("the simulator predicts a {expected}"))
                };
                (format!("no record, process {exit}"), verdict)
            }
            (Some(record), Some(_)) => (describe_real(&record, true), Err("the real call returned".into())),
            (None, None) => (
                format!("no record, process {exit}"),
                Err("the real runtime never made this call".into()),
            ),
        };
        let known = verdict
            .is_err()
            .then(|| known.explains(&case, &real_text))
            .flatten()
            .map(str::to_string);
        rows.push(Row {
            case,
            api: call.api.clone(),
            real: real_text,
            simulated,
            verdict: if known.is_some() { Ok(()) } else { verdict },
            known,
        });
    }
    for (case, record) in real {
        rows.push(Row {
            case,
            api: record["api"].as_str().unwrap_or("?").into(),
            real: describe_real(&record, true),
            simulated: "-".into(),
            verdict: Err("not in the scenario".into()),
            known: None,
        });
    }
    if !judge_exit {
        return Ok(rows);
    }
    // How the process ended is compared too: a crash or a hang the simulator does not
    // predict fails even when every record matches.
    let predicted = match report
        .faults
        .iter()
        .find(|f| f.fatal)
        .map(|f| FaultKind::parse(&f.kind))
    {
        None => "ok",
        Some(Some(kind)) if kind.hangs() => "hang",
        Some(_) => "crash",
    };
    rows.push(process_row(&scenario.name, exit, predicted));
    Ok(rows)
}

/// The row comparing how scenario `name`'s real process ended with how the other side's did.
fn process_row(name: &str, real: &str, other: &str) -> Row {
    Row {
        case: format!("{name} (process)"),
        api: "-".into(),
        real: real.into(),
        simulated: other.into(),
        verdict: if real == other {
            Ok(())
        } else {
            Err("ends differently".into())
        },
        known: None,
    }
}

/// One callback as compared.
struct Compared {
    /// The method name (`None` for a native run).
    name: Option<String>,
    context_size: u64,
    /// The first earlier callback of the walk with the same `FunctionID`.
    same_as: Option<usize>,
    /// Whether the IP lies in the method's `GetCodeInfo2` regions: `None` for a native run
    /// (and for records made before the profiler logged it), `Some(None)` when the real
    /// `GetCodeInfo2` failed.
    in_code: Option<Option<bool>>,
    /// For a native run, the module its IP lies in, by [`module_stem`]; `None` when no module
    /// holds it.
    module: Option<String>,
}

/// What names a module on every platform: its file name without a `lib` prefix or a `.so`,
/// `.dll` or `.exe` suffix (`libcoreclr.so` and `coreclr.dll` are both `coreclr`).
fn module_stem(module: &str) -> String {
    let name = module.strip_prefix("lib").unwrap_or(module);
    [".so", ".dll", ".exe"]
        .iter()
        .find_map(|suffix| name.strip_suffix(suffix))
        .unwrap_or(name)
        .to_string()
}

/// `HRESULT [frames]` where frames are method names (`0` for a native run, `0(module)` when a
/// module holds its IP) with `@size`,
/// `=K` when the `FunctionID` is that of callback K (the first earlier one with it), `~` when
/// the IP lies outside the method's `GetCodeInfo2` regions (code of another tier) and `?`
/// when `GetCodeInfo2` failed.
fn describe(hresult: &str, frames: Option<Vec<Compared>>) -> String {
    let Some(frames) = frames else {
        return hresult.to_string();
    };
    let names: Vec<String> = frames
        .iter()
        .map(|f| {
            let size = if f.context_size == 0 {
                String::new()
            } else {
                format!("@{}", f.context_size)
            };
            let same_as = f.same_as.map_or(String::new(), |k| format!("={k}"));
            let code = match f.in_code {
                Some(Some(false)) => "~",
                Some(None) => "?",
                _ => "",
            };
            let name = match (&f.name, &f.module) {
                (Some(name), _) => name.clone(),
                (None, Some(module)) => format!("0({module})"),
                (None, None) => "0".into(),
            };
            format!("{name}{size}{same_as}{code}")
        })
        .collect();
    format!("{hresult} [{}]", names.join(", "))
}

/// A real record as compared; `modules` keeps the module of each native run's IP (a hosted
/// library's log has none to compare it with: the simulated process has no such modules).
fn describe_real(record: &Value, modules: bool) -> String {
    let frames = record["frames"].as_array().map(|frames| {
        frames
            .iter()
            .map(|f| Compared {
                name: f["function"].as_str().map(str::to_string),
                context_size: f["context_size"].as_u64().unwrap_or(0),
                same_as: f["same_as"].as_u64().map(|k| k as usize),
                in_code: f.get("in_code").map(Value::as_bool),
                // `module!symbol`, or the module alone where it has no symbol there.
                module: (f["native"].as_str().filter(|_| modules))
                    .map(|native| module_stem(native.split('!').next().unwrap_or(native))),
            })
            .collect()
    });
    describe(record["hresult"].as_str().unwrap_or("?"), frames)
}

fn describe_simulated(call: &CallReport, faults: &[&FaultReport], code: &CodeMap) -> String {
    if let Some(f) = faults.first() {
        return format!("fatal {}", f.kind);
    }
    let frames = call.frames.as_ref().map(|frames| {
        let mut first_with = std::collections::HashMap::new();
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                // The first callback with this FunctionID, if it is an earlier one.
                let first = *first_with.entry(&f.func_id).or_insert(i);
                let same_as = (f.function.is_some() && first < i).then_some(first);
                // GetCodeInfo2 gives the method's first code, not the version running.
                let id = u64::from_str_radix(f.func_id.trim_start_matches("0x"), 16).unwrap_or(0);
                let ip = u64::from_str_radix(f.ip.trim_start_matches("0x"), 16).unwrap_or(0);
                let base = code.by_function_id(FunctionId(id));
                Compared {
                    // The real profiler names methods through metadata.
                    name: f.method.clone().or_else(|| f.function.clone()),
                    context_size: f.context_size as u64,
                    same_as,
                    in_code: base.map(|b| Some(code.function(b).contains(ip))),
                    module: (f.function.is_none())
                        .then(|| code.lookup(ip))
                        .flatten()
                        .map(|i| module_stem(&code.function(i).module)),
                }
            })
            .collect()
    });
    describe(call.hresult.as_deref().unwrap_or("-"), frames)
}
