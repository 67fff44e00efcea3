//! Calls made to fail on demand (`[[fail]]`): a sampler whose error path leaks its runtime
//! suspension passes every schedule while `EnumThreads` succeeds, and is shown wrong once a
//! rule makes it fail; the same sampler with the error path mended passes both ways. A failed
//! call does nothing but fail, and its trace line says it was injected.

use corprof::os::{OsThread, ThreadControl};
use corprof::{HResult, ProfilerInfo};
use sim_clr::process::{Process, SimOs, Strategy};
use sim_clr::scenario::Scenario;
use std::sync::Arc;

const FILE: &str = r#"
platform = "unix"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "sampler!loop"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "App::Main" }]
program = ["spin 3", "gc", "spin 3"]
[[threads]]
name = "sampler"
kind = "native"
frames = [{ fn = "sampler!loop" }]
"#;

const FAIL_ENUM_THREADS: &str = "[[fail]]\napi = \"EnumThreads\"\nthread = \"sampler\"\n";

/// A Unix sampler: `SuspendRuntime`, `EnumThreads`, `ResumeRuntime`, giving up when a call
/// before the suspension fails. When `EnumThreads` fails, the leaky one returns at once, with
/// the runtime still suspended; the mended one resumes it, and tries a failed
/// `ResumeRuntime` again.
fn process(extra: &str, leaky: bool) -> Process {
    let mut p = Process::new(Scenario::parse("fail.toml", &format!("{FILE}{extra}")).unwrap());
    p.thread_body(
        "sampler",
        Arc::new(move |rt: &sim_clr::Runtime, _: &SimOs| {
            if rt.initialize_current_thread() != HResult::S_OK || rt.suspend_runtime() != HResult::S_OK {
                return;
            }
            if rt.enum_threads().is_err() && leaky {
                return;
            }
            while rt.resume_runtime() != HResult::S_OK {}
        }),
    )
    .unwrap();
    p
}

fn outcomes(p: &Process) -> Vec<String> {
    let report = p.explore(Strategy::Dfs(2), 1_000, 0, |_, _| {});
    assert!(report.exhaustive, "{report:?}");
    report.outcomes.keys().cloned().collect()
}

#[test]
fn a_leak_on_the_error_path_is_found_once_the_call_fails() {
    // Never taken: every schedule passes.
    assert_eq!(outcomes(&process("", true)), ["ok"]);
    // Taken: the GC waits for a suspension nobody ends.
    let leaky = process(FAIL_ENUM_THREADS, true);
    let found = outcomes(&leaky);
    assert!(found.iter().any(|o| o != "ok"), "{found:?}");
    let report = leaky.explore(Strategy::Dfs(2), 1_000, 0, |_, _| {});
    let failure = report.first_failure.expect("a failing schedule");
    let replayed = leaky.replay(&failure.schedule.parse().unwrap()).unwrap();
    assert!(
        replayed
            .trace
            .iter()
            .any(|e| e.thread == "sampler" && e.what == "EnumThreads → 0x80004005 E_FAIL (injected)"),
        "{:#?}",
        replayed.trace
    );
    // Mended: the error path resumes the runtime.
    assert_eq!(outcomes(&process(FAIL_ENUM_THREADS, false)), ["ok"]);
}

#[test]
fn a_rule_watches_only_its_thread_and_fails_only_the_calls_it_numbers() {
    // The sampler's first EnumThreads is its only one: numbering the second fails nothing.
    let second = process(
        "[[fail]]\napi = \"EnumThreads\"\ncalls = [2]\nhresult = \"CORPROF_E_NOT_YET_AVAILABLE\"\n",
        true,
    );
    assert_eq!(outcomes(&second), ["ok"]);
    // A rule for main's calls never sees the sampler's.
    let other = process("[[fail]]\napi = \"EnumThreads\"\nthread = \"main\"\n", true);
    assert_eq!(outcomes(&other), ["ok"]);
}

#[test]
fn with_injection_a_failed_call_is_a_scheduling_choice_that_finds_the_leak_and_replays() {
    // No rule: the chooser decides which calls fail.
    let mut leaky = process("", true);
    leaky.inject(true);
    let report = leaky.explore(Strategy::Dfs(1), 1_000, 0, |_, _| {});
    assert!(report.exhaustive, "{report:?}");
    assert!(report.outcomes.keys().any(|o| o != "ok"), "{report:?}");
    let failure = report.first_failure.expect("a failing schedule");
    let replayed = leaky.replay(&failure.schedule.parse().unwrap()).unwrap();
    assert_eq!(replayed.outcome, failure.fault.kind);
    assert!(
        replayed.trace.iter().any(|e| e.what.ends_with("(injected)")),
        "{:#?}",
        replayed.trace
    );
    // Random schedules fail a call now and then: enough of them find it too.
    let random = leaky.explore(Strategy::Random, 400, 1, |_, _| {});
    assert!(
        random.outcomes.get("ok").is_some_and(|&ok| ok < 400),
        "{random:?}"
    );
    // Mended, no failure of any call breaks it.
    let mut mended = process("", false);
    mended.inject(true);
    let report = mended.explore(Strategy::Dfs(1), 1_000, 0, |_, _| {});
    assert!(report.exhaustive, "{report:?}");
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
}

/// A Windows sampler stopping `main` once: `SuspendThread`, `GetThreadContext`,
/// `ResumeThread`. The careless one gives up as soon as a call fails; the careful one, once
/// its suspension took, resumes whatever happens, trying a failed `ResumeThread` again.
fn windows_process(extra: &str, careful: bool) -> Process {
    let file = format!("{FILE}{extra}").replace("platform = \"unix\"", "platform = \"windows\"");
    let mut p = Process::new(Scenario::parse("os.toml", &file).unwrap());
    p.thread_body(
        "sampler",
        Arc::new(move |rt: &sim_clr::Runtime, os: &SimOs| {
            let main = OsThread(rt.thread("main").unwrap().os_id);
            if os.suspend_thread(main).is_err() {
                return;
            }
            if os.get_thread_context(main).is_err() && !careful {
                return;
            }
            while os.resume_thread(main).is_err() && careful {}
        }),
    )
    .unwrap();
    p
}

#[test]
fn os_thread_calls_fail_on_demand_too() {
    // ResumeThread fails: the careless sampler leaves main suspended.
    let rule = "[[fail]]\napi = \"ResumeThread\"\ncalls = [1]\n";
    let careless = outcomes(&windows_process(rule, false));
    assert!(careless.iter().any(|o| o != "ok"), "{careless:?}");
    assert_eq!(outcomes(&windows_process(rule, true)), ["ok"]);
    // With injection, SuspendThread and GetThreadContext are choices too: a failed
    // GetThreadContext leaves the careless sampler's target suspended for good.
    let mut injected = windows_process("", false);
    injected.inject(true);
    injected.trace_first(100);
    let report = injected.explore(Strategy::Dfs(1), 100, 0, |_, _| {});
    assert!(report.outcomes.keys().any(|o| o != "ok"), "{report:?}");
    let lines: Vec<&str> = report
        .traces
        .values()
        .flatten()
        .flat_map(|r| &r.trace)
        .map(|e| e.what.as_str())
        .collect();
    for api in ["SuspendThread", "GetThreadContext"] {
        assert!(
            lines.contains(&format!("{api} → failed (injected)").as_str()),
            "{api}: {lines:?}"
        );
    }
}

#[test]
fn a_rule_fails_the_calls_of_a_frozen_scenario_too() {
    // The second EnumThreads fails as the rule says; the first and third answer as ever.
    let file = r#"
platform = "unix"
[runtime]
event_mask = ["ENABLE_STACK_SNAPSHOT"]
[[code]]
name = "App::Main"
kind = "jit"
[[threads]]
name = "main"
frames = [{ fn = "App::Main" }]
[[fail]]
api = "EnumThreads"
calls = [2]
hresult = "0x8007000E"
[[calls]]
caller = "main"
api = "EnumThreads"
expect = "S_OK"
[[calls]]
caller = "main"
api = "EnumThreads"
expect = "0x8007000E"
[[calls]]
caller = "main"
api = "EnumThreads"
expect = "S_OK"
"#;
    let report = Scenario::parse("frozen.toml", file).unwrap().run();
    assert_eq!(report.expectations.checked, 3);
    assert!(
        report.expectations.failed.is_empty(),
        "{:#?}",
        report.expectations.failed
    );
}

#[test]
fn injection_fails_only_calls_a_real_runtime_can_fail_and_as_it_would() {
    // Every call a sampler makes, each answer a failure was noted as (API, answer).
    let seen = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
    let file = FILE.replace("platform = \"unix\"", "platform = \"windows\"");
    let mut p = Process::new(Scenario::parse("inject.toml", &file).unwrap());
    let noted = seen.clone();
    p.thread_body(
        "sampler",
        Arc::new(move |rt: &sim_clr::Runtime, os: &SimOs| {
            let note = |api: &str, hr: HResult| {
                if !hr.is_success() {
                    noted.lock().unwrap().insert((api.to_string(), hr));
                }
            };
            let main = OsThread(rt.thread("main").unwrap().os_id);
            let id = rt.thread("main").unwrap().id;
            let managed = rt.thread("main").unwrap().layout.calls.first().unwrap().rip;
            note("InitializeCurrentThread", rt.initialize_current_thread());
            if let Err(e) = os.suspend_thread(main) {
                note("SuspendThread", HResult::E_FAIL);
                assert_eq!(e, corprof::os::OsError::Injected);
            } else {
                if os.get_thread_context(main).is_err() {
                    note("GetThreadContext", HResult::E_FAIL);
                }
                if os.resume_thread(main).is_err() {
                    note("ResumeThread", HResult::E_FAIL);
                }
            }
            if let Err(hr) = rt.get_function_from_ip(managed) {
                note("GetFunctionFromIP", hr);
            }
            let suspended = rt.suspend_runtime();
            note("SuspendRuntime", suspended);
            if let Err(hr) = rt.enum_threads() {
                note("EnumThreads", hr);
            }
            if suspended.is_success() {
                note("ResumeRuntime", rt.resume_runtime());
            }
            let mut ok = |_: &corprof::SnapshotFrame<'_>| HResult::S_OK;
            note(
                "DoStackSnapshot",
                rt.do_stack_snapshot(id, Some(&mut ok), 0, None, 0),
            );
        }),
    )
    .unwrap();
    p.inject(true);
    let report = p.explore(Strategy::Dfs(2), 1_000, 0, |_, _| {});
    assert!(report.outcomes.contains_key("ok"), "{report:?}");
    let failed: Vec<(String, HResult)> = seen.lock().unwrap().iter().cloned().collect();
    let expected: Vec<(String, HResult)> = sim_clr::runtime::INJECTED
        .iter()
        .map(|i| (i.api.to_string(), i.hresult))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(failed, expected);
}
