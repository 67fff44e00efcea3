//! `simclr conform`: the same call shapes on a real CoreCLR and on the simulator, compared case
//! by case.
//!
//! For every scenario `NAME.toml` of the scenarios directory, the results directory holds what
//! the real runtime did: `NAME.jsonl` (one record per call, written by the conformance
//! profiler) and `NAME.exit` (`ok`, `crash` or `hang`). Each scenario call with a `case` label
//! is compared with the real record of that label: HRESULT, number of frames, method names,
//! `funcId == 0` positions and context sizes. A call the simulator reports as fatal must match
//! a real process that crashed (or hung) before recording it.

use serde_json::Value;
use sim_clr::scenario::{CallReport, FaultReport, Scenario};
use std::collections::BTreeMap;
use std::path::Path;

/// One compared case.
struct Row {
    case: String,
    api: String,
    real: String,
    simulated: String,
    verdict: Result<(), String>,
}

/// Faults that kill the process (SIGSEGV) and those that hang it.
const CRASHES: [&str; 5] = [
    "null_callback",
    "bogus_thread_id",
    "access_violation",
    "walk_of_destroyed_thread",
    "thread_use_after_free",
];
const HANGS: [&str; 2] = ["deadlock", "leaked_suspension_hang"];

/// Compares every scenario with its results; returns (passed, failed, text table). Inputs
/// that cannot be compared are errors, never an empty pass: a missing or empty scenarios
/// folder, a missing results folder, results for none of the scenarios (the folders swapped,
/// say), a results file that cannot be read, and two records of one case.
pub fn compare(scenarios: &Path, results: &Path) -> Result<(usize, usize, String), String> {
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
    let read = |path: &Path| -> Result<Option<String>, String> {
        match std::fs::read_to_string(path) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    };
    let mut rows = Vec::new();
    let mut runs = 0;
    for file in files {
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        let scenario = Scenario::load(&file).map_err(|e| e.to_string())?;
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
            });
            continue;
        };
        runs += 1;
        rows.extend(compare_one(&scenario, exit.trim(), &log)?);
    }
    if runs == 0 {
        return Err(format!(
            "{}: no results (*.exit) for any scenario of {}",
            results.display(),
            scenarios.display()
        ));
    }
    let passed = rows.iter().filter(|r| r.verdict.is_ok()).count();
    let mut table = format!(
        "{:<34} {:<24} {:<44} {:<44} result\n",
        "case", "api", "real", "simulated"
    );
    for r in &rows {
        let verdict = match &r.verdict {
            Ok(()) => "ok".to_string(),
            Err(why) => format!("FAIL: {why}"),
        };
        table.push_str(&format!(
            "{:<34} {:<24} {:<44} {:<44} {verdict}\n",
            r.case, r.api, r.real, r.simulated
        ));
    }
    Ok((passed, rows.len() - passed, table))
}

fn compare_one(scenario: &Scenario, exit: &str, log: &str) -> Result<Vec<Row>, String> {
    let mut real: BTreeMap<String, Value> = BTreeMap::new();
    for (n, line) in log.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let record: Value =
            serde_json::from_str(line).map_err(|e| format!("{}: line {}: {e}", scenario.name, n + 1))?;
        let case = record["case"]
            .as_str()
            .ok_or_else(|| format!("{}: line {}: no case", scenario.name, n + 1))?
            .to_string();
        if real.insert(case.clone(), record).is_some() {
            return Err(format!(
                "{}: line {}: a second record of case `{case}`",
                scenario.name,
                n + 1
            ));
        }
    }
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
        let simulated = describe_simulated(call, &faults);
        let (real_text, verdict) = match (real.remove(&case), faults.first()) {
            (Some(record), None) => {
                let text = describe_real(&record);
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
                let expected = if CRASHES.contains(&fault.kind.as_str()) {
                    "crash"
                } else if HANGS.contains(&fault.kind.as_str()) {
                    "hang"
                } else {
                    "?"
                };
                let verdict = if exit == expected {
                    Ok(())
                } else {
                    Err(format!("the simulator predicts a {expected}"))
                };
                (format!("no record, process {exit}"), verdict)
            }
            (Some(record), Some(_)) => (describe_real(&record), Err("the real call returned".into())),
            (None, None) => (
                format!("no record, process {exit}"),
                Err("the real runtime never made this call".into()),
            ),
        };
        rows.push(Row {
            case,
            api: call.api.clone(),
            real: real_text,
            simulated,
            verdict,
        });
    }
    for (case, record) in real {
        rows.push(Row {
            case,
            api: record["api"].as_str().unwrap_or("?").into(),
            real: describe_real(&record),
            simulated: "-".into(),
            verdict: Err("not in the scenario".into()),
        });
    }
    Ok(rows)
}

/// `HRESULT [frames]` where frames are method names (`0` for a native run) with `@size`.
fn describe(hresult: &str, frames: Option<Vec<(Option<String>, u64)>>) -> String {
    let Some(frames) = frames else {
        return hresult.to_string();
    };
    let names: Vec<String> = frames
        .iter()
        .map(|(name, size)| {
            format!(
                "{}{}",
                name.as_deref().unwrap_or("0"),
                if *size == 0 {
                    String::new()
                } else {
                    format!("@{size}")
                }
            )
        })
        .collect();
    format!("{hresult} [{}]", names.join(", "))
}

fn describe_real(record: &Value) -> String {
    let frames = record["frames"].as_array().map(|frames| {
        frames
            .iter()
            .map(|f| {
                (
                    f["function"].as_str().map(str::to_string),
                    f["context_size"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    });
    describe(record["hresult"].as_str().unwrap_or("?"), frames)
}

fn describe_simulated(call: &CallReport, faults: &[&FaultReport]) -> String {
    if let Some(f) = faults.first() {
        return format!("fatal {}", f.kind);
    }
    let frames = call.frames.as_ref().map(|frames| {
        frames
            .iter()
            .map(|f| (f.function.clone(), f.context_size as u64))
            .collect()
    });
    describe(call.hresult.as_deref().unwrap_or("-"), frames)
}
