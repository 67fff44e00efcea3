//! Signals that interrupt: the profiling signal reaches a thread blocked in a wait at once,
//! the wait resumes after the handler (or a `read` fails with `EINTR` without `SA_RESTART`),
//! the signal is blocked during its own handler, and a bad stack pointer needs `SA_ONSTACK`.

use sim_clr::process::schedule::{Random, Replay, Rng};
use sim_clr::process::{Process, Strategy};
use sim_clr::scenario::Scenario;

/// A Unix process: `main` (managed unless `native`) runs `main`, `holder` runs `holder`,
/// `signaller` runs `signaller`; the profiler's signal handler is `handler`, installed with
/// `flags` (a TOML list of names).
fn process(main: &str, native: bool, holder: &str, signaller: &str, handler: &str, flags: &str) -> Process {
    let kind = if native { "native" } else { "jit" };
    let text = format!(
        r#"platform = "unix"
locks = ["app"]
[profiler]
signal_handler = [{handler}]
signal_flags = [{flags}]
[[code]]
name = "M"
kind = "{kind}"
[[threads]]
name = "holder"
kind = "native"
program = [{holder}]
[[threads]]
name = "main"
kind = "{}"
frames = [{{ fn = "M" }}]
program = [{main}]
[[threads]]
name = "signaller"
kind = "native"
program = [{signaller}]
"#,
        if native { "native" } else { "managed" }
    );
    Process::new(Scenario::parse("signals.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}")))
}

/// Every way the process can end, over every schedule.
fn outcomes(p: &Process) -> Vec<String> {
    let report = p.explore(Strategy::Dfs(3), 20_000, 0, |_, _| {});
    assert!(report.exhaustive, "{report:?}");
    report.outcomes.into_keys().collect()
}

/// The run of the schedule `choices` (then the first runnable thread), and its trace as
/// `thread what`.
fn replayed(p: &Process, choices: Vec<u16>) -> (sim_clr::process::RunReport, Vec<String>) {
    let schedule = sim_clr::process::schedule::Schedule(choices);
    let run = p.run(&mut Replay::new(&schedule, false)).unwrap();
    let trace = run
        .trace
        .iter()
        .map(|e| format!("{} {}", e.thread, e.what))
        .collect();
    (run, trace)
}

/// The trace of the schedule `choices`.
fn trace(p: &Process, choices: Vec<u16>) -> Vec<String> {
    replayed(p, choices).1
}

fn at(trace: &[String], prefix: &str) -> usize {
    trace
        .iter()
        .position(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}` in {trace:#?}"))
}

#[test]
fn a_signal_interrupts_a_thread_blocked_on_a_lock_which_then_waits_on() {
    let p = process(
        r#""lock app", "unlock app""#,
        false,
        r#""lock app", "spin 4", "unlock app""#,
        r#""signal main""#,
        r#""spin 1""#,
        "",
    );
    // holder takes the lock, main blocks on it, the signal comes: main's handler runs at once.
    let t = trace(&p, vec![0, 1, 2, 1, 0]);
    let started = at(&t, "main signal handler starts");
    assert!(started < at(&t, "holder unlock app"), "{t:#?}");
    assert!(at(&t, "holder unlock app") < at(&t, "main lock app"), "{t:#?}");
    assert_eq!(outcomes(&p), ["ok"]);
}

#[test]
fn a_read_is_restarted_under_sa_restart_and_fails_with_eintr_without() {
    let read = |flags: &str| {
        process(
            r#""read 100us""#,
            true,
            "",
            r#""signal main""#,
            r#""spin 1""#,
            flags,
        )
    };
    assert_eq!(outcomes(&read(r#""SA_RESTART", "SA_SIGINFO""#)), ["ok"]);
    // Signalled before its read starts, main runs the handler first: no read is interrupted.
    assert_eq!(outcomes(&read(r#""SA_SIGINFO""#)), ["app_saw_eintr", "ok"]);
    let t = trace(&read(""), vec![1, 2, 1]);
    assert!(
        at(&t, "main read: EINTR") > at(&t, "main signal handler starts"),
        "{t:#?}"
    );
    // Restarted, the read still waits for its data: the run lasts the read's 100 us.
    let (run, t) = replayed(&read(r#""SA_RESTART""#), vec![1, 2, 1]);
    assert!(at(&t, "main signal handler starts") < t.len(), "{t:#?}");
    assert!(run.time_us >= 100, "{run:?}");
}

#[test]
fn a_sleep_goes_on_to_its_end_after_the_handler() {
    let p = process(
        r#""sleep 100us""#,
        true,
        "",
        r#""signal main""#,
        r#""spin 1""#,
        "",
    );
    assert_eq!(outcomes(&p), ["ok"]);
    let (run, t) = replayed(&p, vec![1, 2, 1]);
    assert!(at(&t, "main signal handler starts") < t.len(), "{t:#?}");
    assert!(run.time_us >= 100, "{run:?}");
}

#[test]
fn the_signal_is_blocked_during_its_own_handler() {
    let p = process(
        r#""spin 8""#,
        false,
        "",
        r#""signal main", "signal main""#,
        r#""spin 3""#,
        "",
    );
    // The second signal is sent while the first handler runs: it waits for that handler's end.
    let t = trace(&p, vec![2, 1, 2, 1, 1, 1, 1, 1]);
    let first = at(&t, "main signal handler starts");
    let second = first + 1 + at(&t[first + 1..], "main signal handler starts");
    let first_ends = at(&t, "main spin 3");
    assert!(first < first_ends && first_ends < second, "{t:#?}");
}

#[test]
fn a_bad_stack_pointer_needs_sa_onstack_and_an_alternate_stack() {
    let hijacked = |native: bool, flags: &str| {
        let main = r#""hijack_rsp", "spin 2", "restore_rsp""#;
        outcomes(&process(
            main,
            native,
            "",
            r#""signal main""#,
            r#""spin 1""#,
            flags,
        ))
    };
    assert_eq!(hijacked(false, ""), ["access_violation", "ok"]);
    assert_eq!(hijacked(false, r#""SA_ONSTACK""#), ["ok"]);
    // A thread the runtime does not know has no alternate signal stack.
    assert_eq!(hijacked(true, r#""SA_ONSTACK""#), ["access_violation", "ok"]);
}

#[test]
fn an_unknown_signal_flag_is_an_error_at_its_line() {
    let text = "platform = \"unix\"\n[profiler]\nsignal_handler = [\"spin 1\"]\nsignal_flags = [\"SA_RESTART\", \"SA_NOCLDSTOP\"]\n";
    let e = Scenario::parse("flags.toml", text).unwrap_err().to_string();
    assert!(e.contains("flags.toml:4") && e.contains("SA_NOCLDSTOP"), "{e}");
    assert!(
        e.contains("SA_RESTART, SA_ONSTACK") || e.contains("SA_SIGINFO"),
        "{e}"
    );
}

#[test]
fn each_stop_counts_the_hazards_it_meets() {
    // main holds a lock and waits in a read when the signal comes; later its stack pointer is
    // off its stack when the second one comes.
    let p = process(
        r#""lock app", "read 100us", "unlock app", "hijack_rsp", "spin 40", "restore_rsp""#,
        false,
        "",
        r#""signal main", "sleep 200us", "signal main""#,
        r#""spin 1""#,
        r#""SA_RESTART", "SA_ONSTACK""#,
    );
    // A random schedule in which both signals stop main in those states.
    let run = (0..200)
        .map(|seed| p.run(&mut Random(Rng::new(seed))).unwrap())
        .find(|run| run.stops == 2 && run.hazards.len() == 3)
        .expect("a schedule where both signals stop main");
    assert_eq!(run.outcome, "ok", "{run:?}");
    let met: Vec<(&str, u64)> = run.hazards.iter().map(|(h, n)| (h.as_str(), *n)).collect();
    assert_eq!(
        met,
        [("bad_stack_pointer", 1), ("holds_lock", 1), ("in_wait", 1)],
        "{run:?}"
    );
}
