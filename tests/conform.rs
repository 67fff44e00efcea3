//! `simclr conform` without a real runtime: results synthesized from the simulator's own
//! reports must all pass; a perturbed record, a missing run, or an unexpected survival must
//! fail. Also checks that the conformance scenarios are valid and their labels unique.

use serde_json::{json, Value};
use sim_clr::scenario::Scenario;
use std::path::{Path, PathBuf};
use std::process::Command;

fn simclr(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_simclr"))
        .args(args)
        .output()
        .unwrap()
}

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/scenarios")
}

fn stems() -> Vec<String> {
    let mut stems: Vec<String> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    stems.sort();
    stems
}

/// Writes, for every scenario, the log and exit a real runtime behaving exactly like the
/// simulator would have produced.
fn synthesize(dir: &Path) -> usize {
    std::fs::create_dir_all(dir).unwrap();
    let mut cases = 0;
    for stem in stems() {
        let file = scenarios_dir().join(format!("{stem}.toml"));
        let out = simclr(&["run", file.to_str().unwrap(), "--json"]);
        // What a real profiler's GetCodeInfo2 gives: the regions of the method's first code.
        let scenario = Scenario::parse("conformance.toml", &std::fs::read_to_string(&file).unwrap()).unwrap();
        let in_code = |f: &Value| {
            let hex = |v: &Value| u64::from_str_radix(v.as_str()?.trim_start_matches("0x"), 16).ok();
            let base = scenario
                .code
                .by_function_id(corprof::FunctionId(hex(&f["func_id"])?))?;
            Some(scenario.code.function(base).contains(hex(&f["ip"])?))
        };
        let module_of = |f: &Value| {
            let ip = u64::from_str_radix(f["ip"].as_str()?.trim_start_matches("0x"), 16).ok()?;
            Some(scenario.code.function(scenario.code.lookup(ip)?).module.clone())
        };
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        let fatal = |index: u64| {
            report["faults"]
                .as_array()
                .unwrap()
                .iter()
                .find(|f| f["call"] == index && f["fatal"] == true)
                .cloned()
        };
        // The profiler logs each case's shape: the one its `label:shape` names in the
        // [host] steps, or for a step of a multi-call shape the step (`label/step`).
        let shapes: std::collections::BTreeMap<String, String> = (scenario.host.steps.iter())
            .filter_map(|step| match &step.action {
                sim_clr::scenario::HostAction::Call { args, .. } => args.first()?.text()?.split_once(':'),
                _ => None,
            })
            .map(|(label, shape)| (label.to_string(), shape.trim_start_matches("nt_").to_string()))
            .collect();
        let shape_of = |case: &str| match shapes.get(case) {
            Some(shape) => shape.clone(),
            None => match case.rsplit_once('/') {
                // Steps that log another shape than their name, as cases.rs writes them.
                Some((_, "inner" | "self")) => "default".to_string(),
                Some((_, "after_resume")) => "target".to_string(),
                Some((_, step)) => step.to_string(),
                None => "default".into(),
            },
        };
        let (mut log, mut exit) = (String::new(), "ok");
        'calls: for call in report["calls"].as_array().unwrap() {
            for c in std::iter::once(call).chain(call["nested"].as_array().into_iter().flatten()) {
                let Some(case) = c["case"].as_str() else { continue };
                cases += 1;
                if let Some(fault) = fatal(call["index"].as_u64().unwrap()) {
                    exit = if fault["kind"] == "leaked_suspension_hang" || fault["kind"] == "deadlock" {
                        "hang"
                    } else {
                        "crash"
                    };
                    break 'calls;
                }
                let frames = c.get("frames").map(|frames| {
                    let frames = frames.as_array().unwrap();
                    Value::Array(
                        frames
                            .iter()
                            .enumerate()
                            .map(|(i, f)| {
                                // A real profiler names methods through metadata.
                                let name = if f["method"].is_null() {
                                    &f["function"]
                                } else {
                                    &f["method"]
                                };
                                let mut record = json!({"function": name, "context_size": f["context_size"]});
                                let same = frames[..i].iter().position(|g| g["func_id"] == f["func_id"]);
                                if let (false, Some(k)) = (f["function"].is_null(), same) {
                                    record["same_as"] = json!(k);
                                }
                                if let Some(inside) = in_code(f) {
                                    record["in_code"] = json!(inside);
                                }
                                // A native run's IP: the module that holds it, as the
                                // profiler resolves it.
                                if let Some(module) = f["function"].is_null().then(|| module_of(f)).flatten()
                                {
                                    record["native"] = json!(module);
                                }
                                record
                            })
                            .collect(),
                    )
                });
                let record = json!({"case": case, "caller": if c["from"] == "thread" { json!("native") } else { c["from"].clone() }, "api": c["api"], "shape": shape_of(case), "hresult": c["hresult"], "frames": frames.unwrap_or(Value::Null)});
                log.push_str(&format!("{record}\n"));
            }
        }
        std::fs::write(dir.join(format!("{stem}.jsonl")), log).unwrap();
        std::fs::write(dir.join(format!("{stem}.exit")), exit).unwrap();
    }
    cases
}

/// `simclr conform` of every conformance scenario against the results in `dir`: the exit
/// code and what it printed.
fn conform_all(dir: &Path) -> (Option<i32>, String) {
    let out = simclr(&[
        "conform",
        scenarios_dir().to_str().unwrap(),
        dir.to_str().unwrap(),
    ]);
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

fn results_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("conform-{name}-{}", std::process::id()))
}

#[test]
fn matching_results_pass_every_case() {
    let dir = results_dir("match");
    let cases = synthesize(&dir);
    assert!(cases >= 40, "{cases} conformance cases");
    let (code, text) = conform_all(&dir);
    assert_eq!(code, Some(0), "{text}");
    // Each case, and how each scenario's process ended.
    let passed = cases + stems().len();
    assert_eq!(text.lines().last().unwrap(), format!("{passed} passed, 0 failed"));
}

#[test]
fn a_differing_record_a_missing_run_and_a_survival_fail() {
    let dir = results_dir("perturbed");
    synthesize(&dir);
    let sync = dir.join("sync.jsonl");
    let text = std::fs::read_to_string(&sync).unwrap().replacen(
        "\"hresult\":\"0x8013135F\"",
        "\"hresult\":\"0x00000000\"",
        1,
    );
    std::fs::write(&sync, text).unwrap();
    std::fs::remove_file(dir.join("noflag.exit")).unwrap();
    std::fs::write(dir.join("crash-bogus.exit"), "ok").unwrap();
    // Every record of `cross` as predicted, but the real process crashed at its end.
    std::fs::write(dir.join("cross.exit"), "crash").unwrap();
    let (code, text) = conform_all(&dir);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.lines().last().unwrap().ends_with(" passed, 5 failed"),
        "{text}"
    );
    for (case, real, simulated) in [
        ("conformance-crash-bogus", "ok", "crash"),
        ("conformance-cross", "crash", "ok"),
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{case} (process) "))
                && l.split_whitespace().collect::<Vec<_>>()[3..6] == [real, simulated, "FAIL:"]),
            "{case}: {text}"
        );
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("oa_d5_zero ") && l.contains("FAIL: differs")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("noflag ") && l.contains("no real run")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("crash_bogus ") && l.contains("predicts a crash")),
        "{text}"
    );
}

#[test]
fn conformance_scenarios_are_valid_and_labels_unique() {
    for stem in stems() {
        let file = scenarios_dir().join(format!("{stem}.toml"));
        let scenario = sim_clr::scenario::Scenario::load(&file).unwrap_or_else(|e| panic!("{e}"));
        let mut labels: Vec<String> = Vec::new();
        // Events (a thread's exit, an unload) move the process between the recorded calls.
        for call in scenario
            .calls
            .iter()
            .filter(|c| matches!(c.action, sim_clr::scenario::Action::Api(_)))
        {
            labels.push(
                call.case
                    .clone()
                    .unwrap_or_else(|| panic!("{stem}: a call without `case` (line {})", call.line)),
            );
        }
        let total = labels.len();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), total, "{stem}: duplicate case labels");
    }
}

#[test]
fn inputs_that_cannot_be_compared_are_errors_not_passes() {
    let good = results_dir("inputs");
    synthesize(&good);
    let empty = results_dir("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let duplicated = results_dir("duplicated");
    synthesize(&duplicated);
    let sync = duplicated.join("sync.jsonl");
    let text = std::fs::read_to_string(&sync).unwrap();
    let first = text.lines().next().unwrap().to_string();
    std::fs::write(&sync, format!("{text}{first}\n")).unwrap();
    let unreadable = results_dir("unreadable");
    synthesize(&unreadable);
    std::fs::write(unreadable.join("sync.jsonl"), [0xff, 0xfe, b'\n']).unwrap();
    let scenarios = scenarios_dir();
    let missing = good.join("nonexistent");
    let cases: [(&str, &Path, &Path, &str); 6] = [
        (
            "missing results folder",
            &scenarios,
            &missing,
            "not a results folder",
        ),
        ("missing scenarios folder", &missing, &good, "nonexistent"),
        ("empty results folder", &scenarios, &empty, "no results"),
        ("swapped folders", &good, &scenarios, "no scenario"),
        (
            "duplicate case records",
            &scenarios,
            &duplicated,
            "a second record of case",
        ),
        ("unreadable results", &scenarios, &unreadable, "sync.jsonl"),
    ];
    for (what, scenarios, results, message) in cases {
        let out = simclr(&["conform", scenarios.to_str().unwrap(), results.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains(message), "{what}: {stderr}");
    }
}

/// The real runtimes whose logs of `Runtime.exe` are recorded (`conformance/recorded/`), with
/// the `--runtime` version the simulator answers as for each.
const RECORDED: [(&str, &str); 2] = [("3.1.23", "3.1"), ("8.0.4", "8.0")];

/// Runs `simclr conform --runtime VERSION` on `runtime.toml` and the real runtime `real`'s
/// recorded log of it (`conformance/recorded/REAL/`), after `edit` has changed the log;
/// returns the exit status and the output.
fn conform_recorded(
    name: &str,
    (real, version): (&str, &str),
    edit: impl Fn(String) -> String,
) -> (Option<i32>, String) {
    let (scenarios, results) = (
        results_dir(&format!("{name}-{real}-scenarios")),
        results_dir(&format!("{name}-{real}-results")),
    );
    std::fs::create_dir_all(&scenarios).unwrap();
    std::fs::create_dir_all(&results).unwrap();
    let recorded = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("conformance/recorded")
        .join(real);
    std::fs::copy(
        scenarios_dir().join("runtime.toml"),
        scenarios.join("runtime.toml"),
    )
    .unwrap();
    std::fs::copy(recorded.join("runtime.exit"), results.join("runtime.exit")).unwrap();
    let log = std::fs::read_to_string(recorded.join("runtime.jsonl")).unwrap();
    std::fs::write(results.join("runtime.jsonl"), edit(log)).unwrap();
    let out = simclr(&[
        "conform",
        scenarios.to_str().unwrap(),
        results.to_str().unwrap(),
        "--runtime",
        version,
    ]);
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

/// The runtime frame templates, code versions, OSR and unloading against each real runtime's
/// recorded log (`conformance/recorded/`): every case agrees, without a runtime on this
/// machine.
#[test]
fn the_frame_templates_reproduce_each_recorded_real_runtime() {
    for runtime in RECORDED {
        let (code, text) = conform_recorded("templates", runtime, |log| log);
        assert_eq!(code, Some(0), "{runtime:?}: {text}");
        assert_eq!(
            text.lines().last().unwrap(),
            "64 passed, 0 failed",
            "{runtime:?}: {text}"
        );
    }
}

/// Each version answers as its own runtime only: .NET 8.0.4's log against the simulator as
/// CoreCLR 3.1 differs in the thread-start, thread-pool, task, reflection, wait and lock
/// frames, the context sizes, the OSR frames and the reverse P/Invoke runs, and the other way
/// round.
#[test]
fn a_recorded_runtime_differs_from_the_other_version() {
    for ((real, _), (_, other)) in [(RECORDED[0], RECORDED[1]), (RECORDED[1], RECORDED[0])] {
        let (code, text) = conform_recorded("crossed", (real, other), |log| log);
        assert_eq!(code, Some(1), "{real} as {other}: {text}");
        for case in [
            "t_thread",
            "t_pool",
            "t_reflection",
            "t_wait/target_regctx",
            "t_in_catch/target",
            "t_osr/after",
            "t_task_run",
            "t_sandwich2",
            "t_monitor/target",
        ] {
            assert!(
                text.lines()
                    .any(|l| l.starts_with(&format!("{case} ")) && l.ends_with("FAIL: differs")),
                "{real} as {other}: {case}: {text}"
            );
        }
    }
}

/// Code ranges are compared: a record whose tier-1 frame lay inside `GetCodeInfo2`'s regions
/// differs from the simulator's.
#[test]
fn a_record_with_other_code_ranges_differs() {
    let (code, text) = conform_recorded("ranges", RECORDED[0], |log| {
        assert!(log.contains("\"in_code\":false"), "{log}");
        log.replace("\"in_code\":false", "\"in_code\":true")
    });
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(text.lines().last().unwrap(), "63 passed, 1 failed", "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("t_tierup") && l.contains("Tiered::Rec~") && l.contains("FAIL: differs")),
        "{text}"
    );
}

/// The module of a native run's IP is compared: a record whose sandwiched run lay in the
/// runtime rather than in the native caller (as on 3.1) differs from the simulator as 8.0.
#[test]
fn a_record_whose_native_run_lies_in_another_module_differs() {
    let (code, text) = conform_recorded("modules", RECORDED[1], |log| {
        let caller = "\"native\":\"libconfprof.so!InvokeCallbackFramed\"";
        assert!(log.contains(caller), "{log}");
        log.replacen(caller, "\"native\":\"libcoreclr.so\"", 1)
    });
    assert_eq!(code, Some(1), "{text}");
    assert_eq!(text.lines().last().unwrap(), "63 passed, 1 failed", "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains("0(coreclr)@3104, Reentries::Outer")
                && l.contains("0(confprof)@3104, Reentries::Outer")
                && l.ends_with("FAIL: differs")),
        "{text}"
    );
}

/// FunctionID identity is compared: a record whose recursive frames do not repeat the first
/// one's `FunctionID` differs from the simulator's.
#[test]
fn a_record_with_other_function_identities_differs() {
    let dir = results_dir("identity");
    synthesize(&dir);
    let cross = dir.join("cross.jsonl");
    let text = std::fs::read_to_string(&cross).unwrap();
    assert!(text.contains(",\"same_as\":0"), "{text}");
    std::fs::write(&cross, text.replacen(",\"same_as\":0", "", 1)).unwrap();
    let (code, text) = conform_all(&dir);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.lines().last().unwrap().ends_with(" passed, 1 failed"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("=0") && l.contains("FAIL: differs")),
        "{text}"
    );
}

/// `simclr record DIR -o OUT --runtime VERSION`, returning the exit code and the output.
fn record_all(dir: &Path, name: &str, version: &str) -> (Option<i32>, String) {
    let out = results_dir(name);
    let run = simclr(&[
        "record",
        dir.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--runtime",
        version,
    ]);
    let text = String::from_utf8(run.stdout).unwrap() + &String::from_utf8(run.stderr).unwrap();
    (run.status.code(), text)
}

/// Every log the lane writes (here: the simulator's own answers as the profiler logs them, and
/// the real runtime's recorded log) turns into a scenario that reproduces every record.
#[test]
fn every_log_records_into_a_scenario_that_reproduces_it() {
    let dir = results_dir("record-synthesized");
    synthesize(&dir);
    let records: usize = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .map(|p| std::fs::read_to_string(p).unwrap().lines().count())
        .sum();
    let (code, text) = record_all(&dir, "record-synthesized-out", "8.0");
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        text.lines().last().unwrap(),
        format!("recorded: {records} passed, 0 failed"),
        "{text}"
    );
    for (runtime, version) in RECORDED {
        let real = results_dir(&format!("record-real-{runtime}"));
        std::fs::create_dir_all(&real).unwrap();
        let recorded = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("conformance/recorded")
            .join(runtime);
        for file in ["runtime.jsonl", "runtime.exit"] {
            std::fs::copy(recorded.join(file), real.join(file)).unwrap();
        }
        let (code, text) = record_all(&real, &format!("record-real-{runtime}-out"), version);
        assert_eq!(code, Some(0), "{runtime}: {text}");
        assert_eq!(
            text.lines().last().unwrap(),
            "recorded: 63 passed, 0 failed",
            "{runtime}: {text}"
        );
        let written = results_dir(&format!("record-real-{runtime}-out")).join("runtime.toml");
        let scenario = std::fs::read_to_string(written).unwrap();
        assert!(
            scenario.contains(&format!("version = \"{version}\"")),
            "{scenario}"
        );
    }
}

/// A results folder whose logs hold no record compares nothing: that is no pass.
#[test]
fn a_folder_of_blank_logs_is_not_a_pass() {
    let dir = results_dir("record-blank");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.jsonl"), "\n").unwrap();
    std::fs::write(dir.join("a.exit"), "0\n").unwrap();
    let (code, text) = record_all(&dir, "record-blank-out", "8.0");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("nothing was compared"), "{text}");
}

/// A log that is not the profiler's is an error naming its line, not a scenario.
#[test]
fn a_log_record_cannot_read_is_an_error_with_its_line() {
    let dir = results_dir("record-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let good = r#"{"case":"a","caller":"pinvoke","api":"DoStackSnapshot","shape":"default","hresult":"0x00000000","frames":[]}"#;
    for (log, why) in [
        (format!("{good}\nnot json\n"), "line 2"),
        (
            good.replace("\"default\"", "\"teleport\""),
            "unknown shape `teleport`",
        ),
        (good.replace("\"caller\":\"pinvoke\",", ""), "no `caller`"),
        // An empty or blank log recorded nothing: no scenario to check it against.
        (String::new(), "holds no record"),
        ("\n  \n".into(), "holds no record"),
    ] {
        let file = dir.join("bad.jsonl");
        std::fs::write(&file, log).unwrap();
        let run = simclr(&["record", file.to_str().unwrap()]);
        let err = String::from_utf8(run.stderr).unwrap();
        assert_eq!(run.status.code(), Some(2), "{err}");
        assert!(err.contains(why), "{err}");
    }
}

/// The repository's folder `path`, as a string.
fn repo(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(path)
        .to_str()
        .unwrap()
        .to_string()
}

/// The Windows lane's logs of the Windows CoreCLR 3.1.23 (`conformance/windows.sh`, run under
/// Wine 10; committed in `conformance/recorded/windows-3.1.23/`).
const WINDOWS_LOGS: &str = "conformance/recorded/windows-3.1.23";

/// `simclr conform` of `scenarios` and the Windows lane's logs with `extra` arguments: the
/// exit status and the output.
fn conform_windows(scenarios: &str, extra: &[&str]) -> (Option<i32>, String) {
    let (scenarios, logs) = (repo(scenarios), repo(WINDOWS_LOGS));
    let mut args = vec!["conform", &scenarios, &logs, "--runtime", "3.1"];
    args.extend_from_slice(extra);
    let out = simclr(&args);
    (out.status.code(), String::from_utf8(out.stdout).unwrap())
}

/// Every case of the Windows lane agrees with the simulator answering on Windows, without Wine
/// on this machine: the Linux lane's programs against their scenarios answering on Windows,
/// and the Windows lane's own programs against theirs. The one answer Wine gives where the
/// simulator models Windows (a GC-redirected thread's walk) passes as the listed difference it
/// is, and fails without the list.
#[test]
fn the_windows_lane_agrees_with_the_simulator_on_windows() {
    let known = repo("conformance/windows/wine.toml");
    let shared = ["--platform", "windows", "--known", known.as_str()];
    let (code, text) = conform_windows("conformance/scenarios", &shared);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        text.lines().last().unwrap(),
        "144 passed (1 as a known difference), 0 failed",
        "{text}"
    );
    let (code, text) = conform_windows("conformance/windows/scenarios", &["--known", known.as_str()]);
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(text.lines().last().unwrap(), "201 passed, 0 failed", "{text}");
    let (code, text) = conform_windows("conformance/scenarios", &["--platform", "windows"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("gc/target ") && l.ends_with("FAIL: differs")),
        "{text}"
    );
}

/// The Windows runtime's answers are not Linux's: the same logs against the scenarios
/// answering on Linux fail where Windows walks another thread by suspending it (the
/// cross-thread walks, Linux `E_NOTIMPL`) and where it survives what kills a Linux process
/// (a NULL callback: `E_UNEXPECTED`).
#[test]
fn the_windows_lane_differs_from_linux() {
    let (code, text) = conform_windows("conformance/scenarios", &[]);
    assert_eq!(code, Some(1), "{text}");
    for case in ["x_nt ", "x_nt_regctx ", "x_pi ", "crash_nullcb_x/target_null "] {
        assert!(
            text.lines().any(|l| l.starts_with(case) && l.contains("FAIL")),
            "{case}: {text}"
        );
    }
}

/// `simclr record` turns each of the Windows lane's logs into a Windows scenario that
/// reproduces every recorded answer: seeds from each frame and from the target's own
/// registers, bad seeds, walks refused while another walk holds the target, and walks that
/// find no frame.
#[test]
fn the_windows_lane_logs_record_into_windows_scenarios() {
    let out_dir = results_dir("windows-recorded");
    let out = simclr(&[
        "record",
        &repo(WINDOWS_LOGS),
        "-o",
        out_dir.to_str().unwrap(),
        "--runtime",
        "3.1",
        "--platform",
        "windows",
    ]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        text.lines().last().unwrap(),
        "recorded: 332 passed, 0 failed",
        "{text}"
    );
    let scenario = std::fs::read_to_string(out_dir.join("windows.toml")).unwrap();
    assert!(scenario.contains("platform = \"windows\""), "{scenario}");
}

/// A list of known differences that cannot be read is an error with its reason (exit 2), never
/// a comparison without it: a missing file, a table with an unknown field, a case listed twice.
#[test]
fn a_bad_list_of_known_differences_is_an_error() {
    let dir = results_dir("known");
    std::fs::create_dir_all(&dir).unwrap();
    let difference = "[[difference]]\ncase = \"gc/target\"\nreal = \"0x80004005 []\"\nwhy = \"Wine\"\n";
    let files = [
        ("missing.toml", None, "no such file"),
        (
            "unknown.toml",
            Some(
                "[[difference]]\ncase = \"gc/target\"\nreal = \"x\"\nwhy = \"y\"\nwhen = \"z\"\n".to_string(),
            ),
            "unknown field `when`",
        ),
        (
            "twice.toml",
            Some(difference.repeat(2)),
            "`gc/target` is listed twice",
        ),
    ];
    for (name, text, message) in files {
        let path = dir.join(name);
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let out = simclr(&[
            "conform",
            &repo("conformance/scenarios"),
            &repo(WINDOWS_LOGS),
            "--known",
            path.to_str().unwrap(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name}: {stderr}");
        assert!(stderr.contains(message), "{name}: {stderr}");
    }
}

/// The destroyed probe (`conformance/probes/destroyed.c`), hosted in the process its lane run
/// is described by, writes the line both real runtimes wrote (`destroyed.expected`): a thread
/// whose `ThreadDestroyed` has begun is no longer listed by `EnumThreads`, its walk finds no
/// frame (`E_FAIL`), and `GetThreadInfo` still answers after the callback returned while the
/// runtime stays suspended. The probe's walk after the callback returned is its own bug:
/// `walk_of_destroyed_thread`, which the file expects.
#[test]
fn the_destroyed_probe_writes_what_both_real_runtimes_wrote() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR")).join("destroyed-probe");
    let library = fixtures::c_library::build(&root.join("conformance/probes/destroyed.c"), &tmp);
    let expected = std::fs::read_to_string(root.join("conformance/probes/destroyed.expected")).unwrap();
    for version in ["3.1", "8.0"] {
        let out = tmp.join(format!("probe-{version}.sim"));
        let _ = std::fs::remove_file(&out);
        let run = Command::new(env!("CARGO_BIN_EXE_simclr"))
            .args(["explore", "conformance/probes/destroyed.toml", "--profiler"])
            .arg(&library)
            .args([
                "--clsid",
                "{2c0f6a1e-7b3d-4e21-8f5a-11223344bb08}",
                "--runtime",
                version,
            ])
            .current_dir(root)
            .env("PROBE_OUT", &out)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&run.stdout);
        assert!(run.status.success(), "{version}: {report}");
        assert!(
            report.contains("walk_of_destroyed_thread   1"),
            "{version}: {report}"
        );
        assert_eq!(std::fs::read_to_string(&out).unwrap(), expected, "{version}");
    }
}
