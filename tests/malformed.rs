//! Malformed or inconsistent scenarios: every one is rejected with the file, the line and the
//! field at fault — by the library and by `simclr run` (exit code 2, no panic).

use sim_clr::scenario::Scenario;
use std::process::Command;

const HEAD: &str = "platform = \"unix\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\n[[code]]\nname = \"N\"\nkind = \"native\"\n[[threads]]\nname = \"t\"\nframes = [{ fn = \"M\" }, { fn = \"N\" }]\n";
const HEAD_LINES: usize = 10;

/// (what, scenario text, expected line, expected field)
fn cases() -> Vec<(&'static str, String, usize, &'static str)> {
    let after = |extra: &str| format!("{HEAD}{extra}");
    let call = |body: &str| after(&format!("[[calls]]\ncaller = \"t\"\n{body}"));
    let l = HEAD_LINES;
    vec![
        ("unterminated string", "platform = \"unix\nname = 3\n".into(), 1, "platform"),
        ("misspelt top-level key", "platfrom = \"unix\"\n".into(), 1, "platfrom"),
        ("missing platform", "name = \"x\"\n".into(), 1, "platform"),
        ("unknown platform", "platform = \"macos\"\n".into(), 1, "platform"),
        ("unknown field in a thread", after("[[threads]]\nname = \"u\"\ncolour = \"red\"\n"), l + 3, "colour"),
        ("frame naming an unknown method", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"Nope\" }]\n"), l + 3, "fn"),
        ("frame with both fn and frame", after("[[threads]]\nname = \"u\"\nframes = [\n  { fn = \"M\", frame = \"GCFrame\" },\n]\n"), l + 4, "fn"),
        ("unknown explicit Frame class", after("[[threads]]\nname = \"u\"\nframes = [{ frame = \"MagicFrame\" }, { fn = \"M\" }]\n"), l + 3, "frame"),
        ("explicit Frame with no call below", after("[[threads]]\nname = \"u\"\nframes = [\n  { fn = \"M\" },\n  { frame = \"GCFrame\" },\n]\n"), l + 5, "frame"),
        ("repeat of zero", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\", repeat = 0 }]\n"), l + 3, "repeat"),
        ("offset outside the function", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\", offset = 0x400 }]\n"), l + 3, "offset"),
        ("misaligned frame size", after("[[code]]\nname = \"X\"\nkind = \"jit\"\nframe_size = 0x48\n"), l + 4, "frame_size"),
        ("unknown code kind", after("[[code]]\nname = \"X\"\nkind = \"python\"\n"), l + 3, "kind"),
        ("duplicate function", after("[[code]]\nname = \"M\"\nkind = \"jit\"\n"), l + 2, "name"),
        ("duplicate thread", after("[[threads]]\nname = \"t\"\n"), l + 2, "name"),
        ("native thread with managed frames", after("[[threads]]\nname = \"s\"\nkind = \"native\"\nframes = [{ fn = \"M\" }]\n"), l + 2, "kind"),
        ("unknown event-mask flag", "platform = \"unix\"\n[runtime]\nevent_mask = [\"ENABLE_STACK_SNAPSHOTS\"]\n".into(), 3, "event_mask"),
        ("caller naming an unknown thread", after("[[calls]]\ncaller = \"ghost\"\napi = \"DoStackSnapshot\"\n"), l + 2, "caller"),
        ("call without caller", after("[[calls]]\napi = \"DoStackSnapshot\"\n"), l + 1, "caller"),
        ("unknown API", call("api = \"DoStackSnap\"\n"), l + 3, "api"),
        ("unknown calling context", call("from = \"SomewhereElse\"\napi = \"DoStackSnapshot\"\n"), l + 3, "from"),
        ("target naming an unknown thread", call("api = \"DoStackSnapshot\"\ntarget = \"ghost\"\n"), l + 4, "target"),
        ("seed naming a missing frame", call("api = \"DoStackSnapshot\"\nseed = { thread = \"t\", frame = 9 }\n"), l + 4, "seed.frame"),
        ("seed with an unknown register", call("api = \"DoStackSnapshot\"\nseed = { rxx = 1 }\n"), l + 4, "seed.rxx"),
        ("unknown snapshot flag", call("api = \"DoStackSnapshot\"\nflags = [\"CONTEXT\"]\n"), l + 4, "flags"),
        ("callback returning a non-HRESULT", call("api = \"DoStackSnapshot\"\ncallback = { return = \"maybe\" }\n"), l + 4, "callback.return"),
        ("expectation that is not an HRESULT", call("api = \"DoStackSnapshot\"\nexpect = \"fine\"\n"), l + 4, "expect"),
        ("argument that does not apply", call("api = \"DoStackSnapshot\"\nip = 5\n"), l + 4, "ip"),
        ("negative ip offset", call("api = \"GetFunctionFromIP\"\nip = { fn = \"M\", offset = -5 }\n"), l + 4, "ip"),
        ("negative seed offset", call("api = \"DoStackSnapshot\"\nseed = { rip = { fn = \"M\", offset = -1 } }\n"), l + 4, "seed.rip"),
        ("missing required argument", call("api = \"GetFunctionFromIP\"\n"), l + 3, "ip"),
        ("metadata name on native code", after("[[code]]\nname = \"X\"\nkind = \"native\"\nmethod = \"A::B\"\n"), l + 4, "method"),
        ("empty type arguments", after("[[code]]\nname = \"X\"\nkind = \"jit\"\ntype_args = []\n"), l + 2, "type_args"),
        ("expect_stack naming native code", call("api = \"DoStackSnapshot\"\nexpect_stack = [\"N\"]\n"), l + 4, "expect_stack"),
        ("expect_stack on another API", call("api = \"EnumThreads\"\nexpect_stack = [\"M\"]\n"), l + 4, "expect_stack"),
        ("exception state contradicting a catch funclet", after("[[threads]]\nname = \"u\"\nexception = \"unwinding\"\nframes = [{ fn = \"M\", funclet = \"catch\" }, { fn = \"M\" }]\n"), l + 3, "exception"),
        ("exception state contradicting a filter", after("[[threads]]\nname = \"u\"\nexception = \"unwinding_in_managed\"\nframes = [{ fn = \"M\", funclet = \"filter\" }, { fn = \"M\" }]\n"), l + 3, "exception"),
        ("host step naming an unknown thread", after("[host]\n[[host.steps]]\nthread = \"ghost\"\ncall = \"Run\"\n"), l + 3, "thread"),
        ("host step with call and raise", after("[host]\n[[host.steps]]\nthread = \"t\"\ncall = \"Run\"\nraise = \"ObjectAllocated\"\n"), l + 2, "steps"),
        ("host step raising a hook", after("[host]\n[[host.steps]]\nthread = \"t\"\nraise = \"FunctionEnter\"\n"), l + 4, "raise"),
        ("host step allocating an unknown class", after("[host]\n[[host.steps]]\nthread = \"t\"\nraise = \"ObjectAllocated\"\nclass = \"Nope\"\n"), l + 5, "class"),
        ("host step with a class for another callback", after("[host]\n[[host.steps]]\nthread = \"t\"\nraise = \"ExceptionThrown\"\nclass = \"<Module>\"\n"), l + 5, "class"),
        ("host step with a stray arg", after("[host]\n[[host.steps]]\nthread = \"t\"\ngc = true\narg = \"x\"\n"), l + 2, "arg"),
        ("host step raising on a native thread", after("[[threads]]\nname = \"s\"\nkind = \"native\"\n[host]\n[[host.steps]]\nthread = \"s\"\nraise = \"ObjectAllocated\"\n"), l + 6, "thread"),
        ("nested_at that is no index", call("api = \"DoStackSnapshot\"\nnested_at = \"all\"\n[calls.nested]\napi = \"EnumThreads\"\n"), l + 4, "nested_at"),
        ("nested_at out of order", call("api = \"DoStackSnapshot\"\nnested_at = [2, 1]\n[calls.nested]\napi = \"EnumThreads\"\n"), l + 4, "nested_at"),
        ("negative nested_at", call("api = \"DoStackSnapshot\"\nnested_at = -1\n[calls.nested]\napi = \"EnumThreads\"\n"), l + 4, "nested_at"),
        ("nested event", call("api = \"DoStackSnapshot\"\n[calls.nested]\nevent = \"gc\"\n"), l + 5, "event"),
        ("`at` outside a nested call", call("api = \"EnumThreads\"\nat = 0\n"), l + 4, "at"),
        ("`at` that is no index", call("api = \"DoStackSnapshot\"\n[[calls.nested]]\nat = \"all\"\napi = \"EnumThreads\"\n"), l + 5, "at"),
        ("nested_at and `at` for one nested call", call("api = \"DoStackSnapshot\"\nnested_at = 1\n[[calls.nested]]\nat = 0\napi = \"EnumThreads\"\n"), l + 4, "nested_at"),
        ("a nested call with nested calls", call("api = \"DoStackSnapshot\"\n[[calls.nested]]\napi = \"DoStackSnapshot\"\n[[calls.nested.nested]]\napi = \"EnumThreads\"\n"), l + 6, "nested"),
        ("template with a wrong name", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }, { template = \"thread_begin\" }]\n"), l + 3, "template"),
        ("template ending in a Frame at the bottom", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }, { template = \"cctor_trigger\" }]\n"), l + 3, "template"),
        ("template with a repeat", after("[[threads]]\nname = \"u\"\nframes = [\n  { fn = \"M\" },\n  { template = \"wait\", repeat = 2 },\n]\n"), l + 5, "template"),
        ("a call that is no table", after("calls = [1]\n"), l + 1, "calls"),
        ("nested call outside DoStackSnapshot", call("api = \"EnumThreads\"\n[calls.nested]\napi = \"EnumThreads\"\n"), l + 1, "nested"),
        ("P/Invoke on a native thread", after("[[threads]]\nname = \"s\"\nkind = \"native\"\n[[calls]]\ncaller = \"s\"\nfrom = \"pinvoke\"\napi = \"EnumThreads\"\n"), l + 6, "from"),
        ("wrong value type", after("[[threads]]\nname = \"u\"\nframes = \"M\"\n"), l + 3, "frames"),
        ("unknown expected fault", call("api = \"DoStackSnapshot\"\nexpect_fault = \"meltdown\"\n"), l + 4, "expect_fault"),
        ("program naming an unknown lock", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }]\nprogram = [\n  \"call N\",\n  \"lock nosuch\",\n]\n"), l + 6, "program"),
        ("program naming an unknown thread", after("[[threads]]\nname = \"u\"\nkind = \"native\"\nprogram = [\"suspend ghost\"]\n"), l + 4, "program"),
        ("program naming an unknown function", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }]\nprogram = [\"call Nope\"]\n"), l + 4, "program"),
        ("unbalanced return", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }]\nprogram = [\n  \"call N\",\n  \"return\",\n  \"return\",\n]\n"), l + 7, "program"),
        ("reverse P/Invoke into native code", after("[[threads]]\nname = \"u\"\nkind = \"native\"\nframes = [{ fn = \"N\" }]\nprogram = [\"reverse_pinvoke N\"]\n"), l + 5, "program"),
        ("unknown step", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }]\nprogram = [\"teleport\"]\n"), l + 4, "program"),
        ("loop without end", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }]\nprogram = [\"loop 2\", \"spin 1\"]\n"), l + 4, "program"),
        ("handler naming an unknown lock", "platform = \"unix\"\n[profiler]\nthread_destroyed = [\"lock nope\"]\n".into(), 3, "thread_destroyed"),
        ("lock declared twice", "platform = \"unix\"\nlocks = [\"heap\"]\n".into(), 2, "locks"),
        ("spawned thread without a program", after("[[threads]]\nname = \"u\"\nstart = \"spawned\"\n"), l + 3, "start"),
        ("an id taken over from an unknown thread", after("[[threads]]\nname = \"u\"\nstart = \"spawned\"\nframes = [{ fn = \"M\" }]\nprogram = [\"exit\"]\nreuses_thread_id = \"nope\"\n"), l + 6, "reuses_thread_id"),
        ("an id taken over by a thread that is not spawned", after("[[threads]]\nname = \"v\"\nframes = [{ fn = \"M\" }]\nprogram = [\"exit\"]\n[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }]\nprogram = [\"exit\"]\nreuses_os_id = \"v\"\n"), l + 9, "reuses_os_id"),
        ("a ThreadID taken over from a thread that never exits", after("[[threads]]\nname = \"v\"\nframes = [{ fn = \"M\" }]\nprogram = [\"spin 1\"]\n[[threads]]\nname = \"u\"\nstart = \"spawned\"\nframes = [{ fn = \"M\" }]\nprogram = [\"exit\"]\nreuses_thread_id = \"v\"\n"), l + 10, "reuses_thread_id"),
        ("ids taken over in a cycle", after("[[threads]]\nname = \"v\"\nstart = \"spawned\"\nframes = [{ fn = \"M\" }]\nprogram = [\"exit\"]\nreuses_os_id = \"u\"\n[[threads]]\nname = \"u\"\nstart = \"spawned\"\nframes = [{ fn = \"M\" }]\nprogram = [\"exit\"]\nreuses_os_id = \"v\"\n"), l + 6, "reuses_os_id"),
        ("unknown exploration strategy", "platform = \"unix\"\n[explore]\nstrategy = \"bfs\"\n".into(), 3, "strategy"),
        ("join of a thread without a program", after("[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }]\nprogram = [\"join t\"]\n"), l + 4, "program"),
        ("a thread with a program and a body", after("[[threads]]\nname = \"u\"\nkind = \"native\"\nprogram = [\"spin 1\"]\nbody = \"snapshot-sampler\"\n"), l + 5, "body"),
        ("unknown expected outcome", "platform = \"unix\"\n[explore]\nexpect = [\"fine\"]\n".into(), 3, "expect"),
        ("unload of a method that is not dynamic", after("[[calls]]\nevent = \"unload\"\nthread = \"t\"\nfunction = \"M\"\n"), l + 4, "function"),
        ("unload naming nothing", after("[[calls]]\nevent = \"unload\"\nthread = \"t\"\n"), l + 2, "function"),
        ("unload of a module without methods", after("[[calls]]\nevent = \"unload\"\nthread = \"t\"\nmodule = \"none.dll\"\n"), l + 4, "module"),
        ("unload of code on a stack", after("[[code]]\nname = \"D\"\nkind = \"lcg\"\n[[threads]]\nname = \"u\"\nframes = [{ fn = \"D\" }, { fn = \"M\" }]\n[[calls]]\nevent = \"unload\"\nthread = \"t\"\nfunction = \"D\"\n"), l + 10, "function"),
        ("unload of unloaded code", after("[[code]]\nname = \"D\"\nkind = \"lcg\"\n[[calls]]\nevent = \"unload\"\nthread = \"t\"\nfunction = \"D\"\n[[calls]]\nevent = \"unload\"\nthread = \"t\"\nfunction = \"D\"\n"), l + 11, "function"),
        ("attached profiler with a startup-only flag", "platform = \"unix\"\n[runtime]\nattached = true\nevent_mask = [\"MONITOR_ENTERLEAVE\"]\n".into(), 4, "event_mask"),
        ("a failed call of an unknown API", "platform = \"unix\"\n[[fail]]\napi = \"GetILFunctionBody\"\n".into(), 3, "api"),
        ("a failed call number 0", "platform = \"unix\"\n[[fail]]\napi = \"EnumThreads\"\ncalls = [0]\n".into(), 4, "calls"),
        ("a failed call that succeeds", "platform = \"unix\"\n[[fail]]\napi = \"EnumThreads\"\nhresult = \"S_FALSE\"\n".into(), 4, "hresult"),
        ("a failed call of an unknown thread", after("[[fail]]\napi = \"EnumThreads\"\nthread = \"nope\"\n"), l + 3, "thread"),
    ]
}

#[test]
fn every_malformed_scenario_names_file_line_and_field() {
    let cases = cases();
    assert!(cases.len() >= 10);
    let mut wrong = Vec::new();
    for (what, text, line, field) in cases {
        match Scenario::parse("bad.toml", &text) {
            Ok(_) => wrong.push(format!("{what}: accepted")),
            Err(err) if (err.file.as_str(), err.line, err.field.as_str()) != ("bad.toml", line, field) => {
                wrong.push(format!("{what}: expected line {line} field `{field}`, got {err}"))
            }
            Err(err) => {
                let text = err.to_string();
                let column = format!("bad.toml:{line}:{}: field `{field}`: ", err.column);
                assert!(
                    err.column > 0 && text.starts_with(&column),
                    "{what}: no column in {err}"
                );
                assert_eq!(text.lines().count(), 1, "{what}: {err}");
                assert!(!text.contains("Model"), "{what}: an internal type name in {err}");
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_cli_rejects_them_with_exit_code_2() {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("malformed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, (what, text, line, field)) in cases().into_iter().enumerate() {
        let file = dir.join(format!("case{i}.toml"));
        std::fs::write(&file, &text).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_simclr"))
            .arg("run")
            .arg(&file)
            .arg("--json")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("case{i}.toml:{line}:"))
                && stderr.contains(&format!(": field `{field}`")),
            "{what}: {stderr}"
        );
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn garbage_never_panics() {
    let samples = [
        "",
        "\u{0}",
        "[[calls]]",
        "platform = 3",
        "[runtime]\nplatform = \"unix\"",
        "platform = \"unix\"\n[[threads]]\nframes = [{}]",
        "platform = \"unix\"\ncalls = 5",
    ];
    for s in samples {
        assert!(Scenario::parse("g.toml", s).is_err(), "{s:?}");
    }
}

const TWO_LOCKS: &str = "platform = \"unix\"\nlocks = [\"A\"]\n[[code]]\nname = \"M\"\nkind = \"jit\"\n[[threads]]\nname = \"t\"\nframes = [{ fn = \"M\" }]\nprogram = [\"lock A\", \"unlock A\"]\n[[threads]]\nname = \"u\"\nframes = [{ fn = \"M\" }]\nprogram = [\"unlock A\"]\n";

#[test]
fn a_release_by_a_thread_that_does_not_hold_the_lock_is_a_typed_fault() {
    let scenario = Scenario::parse("misuse.toml", TWO_LOCKS).unwrap();
    let report = sim_clr::process::Process::new(scenario).explore(
        sim_clr::process::Strategy::Dfs(2),
        100,
        0,
        |_, _| {},
    );
    assert_eq!(
        report.outcomes.get("lock_misuse").copied(),
        Some(report.schedules_run)
    );
    let f = report.first_failure.unwrap();
    assert!(
        f.fault.message.contains("u (line 13) releases lock A held by"),
        "{}",
        f.fault.message
    );
}

#[test]
fn schedules_that_do_not_fit_the_file_are_exit_code_2() {
    let file =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sched-{}.toml", std::process::id()));
    std::fs::write(&file, TWO_LOCKS).unwrap();
    for (schedule, message) in [
        ("7", "thread 7 does not exist"),
        ("1x400", "the run ended after"),
        ("0x", "is not `THREAD`"),
        ("zz", "is not `THREAD`"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_simclr"))
            .args(["replay", file.to_str().unwrap(), "--schedule", schedule])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{schedule}: {stderr}");
        assert!(stderr.contains(message), "{schedule}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn explore_rejects_an_unknown_built_in_body_with_its_line() {
    let text = format!("{HEAD}[[threads]]\nname = \"s\"\nkind = \"native\"\nbody = \"no-such-sampler\"\n[[threads]]\nname = \"u\"\nframes = [{{ fn = \"M\" }}]\nprogram = [\"spin 1\"]\n");
    let file =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("body-{}.toml", std::process::id()));
    std::fs::write(&file, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_simclr"))
        .args(["explore", file.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            ".toml:{}: field `body`: no built-in profiler code is named `no-such-sampler`",
            HEAD_LINES + 4
        )),
        "{stderr}"
    );
}

/// Runs `simclr run FILE` and returns (exit code, stdout, stderr).
fn run_cli(file: &std::path::Path) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_simclr"))
        .arg("run")
        .arg(file)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_huge_requested_count_allocates_only_what_can_be_written() {
    // GetCodeInfo2's `requested` is the size of the profiler's buffer; u32::MAX entries would
    // be 64 GiB.
    let text = format!(
        "{HEAD}[[calls]]\ncaller = \"t\"\napi = \"GetCodeInfo2\"\nfunction = \"M\"\nrequested = 4294967295\nexpect = \"S_OK\"\n"
    );
    let report = Scenario::parse("huge.toml", &text).unwrap().run();
    assert!(report.expectations.failed.is_empty(), "{report:?}");
    assert_eq!(report.expectations.checked, 1);
    let result = report.calls[0].result.as_deref().unwrap_or_default();
    assert!(result.starts_with("1 region(s): [0x"), "{result}");
}

#[test]
fn files_that_are_not_regular_or_too_big_are_refused_without_reading() {
    let dir = scratch_dir("hostile");
    let big = dir.join("big.toml");
    let mut text = String::from("platform = \"unix\"\n");
    while text.len() as u64 <= sim_clr::scenario::MAX_FILE_BYTES {
        text.push_str("# padding padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&big, &text).unwrap();
    let (code, stdout, stderr) = run_cli(&big);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("larger than the limit"), "{stderr}");
    assert!(stdout.is_empty());
    // A directory is not a scenario file (`simclr run` runs the files in it instead), and on
    // Unix a FIFO nobody writes to (opening it would block forever).
    let err = Scenario::load(&dir).unwrap_err();
    assert!(err.message.contains("not a regular file"), "{err}");
    #[cfg(unix)]
    {
        let fifo = dir.join("fifo.toml");
        let made = Command::new("mkfifo").arg(&fifo).status();
        if made.is_ok_and(|s| s.success()) {
            let (code, _, stderr) = run_cli(&fifo);
            assert_eq!(code, Some(2), "{stderr}");
            assert!(stderr.contains("not a regular file"), "{stderr}");
        } else {
            eprintln!("skipped the FIFO case: mkfifo is not available");
        }
    }
}

#[test]
fn a_nested_call_the_walk_never_reaches_is_a_failed_expectation() {
    let nested = |at: usize| {
        format!(
            "{HEAD}[[calls]]\ncaller = \"t\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\nnested_at = {at}\n[calls.nested]\napi = \"GetFunctionFromIP\"\nip = \"frame\"\nexpect = \"S_OK\"\n"
        )
    };
    let reached = Scenario::parse("n.toml", &nested(0)).unwrap().run();
    assert!(
        reached.expectations.failed.is_empty(),
        "{:?}",
        reached.expectations
    );
    assert_eq!(reached.expectations.checked, 1);
    let unreached = Scenario::parse("n.toml", &nested(7)).unwrap().run();
    assert_eq!(unreached.expectations.checked, 1);
    let failed = &unreached.expectations.failed;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].field, "nested_at");
    assert_eq!(failed[0].expected, "a walk reaching frame 7", "{failed:?}");
}

/// One walk, one nested call at several callbacks or at every one: each run is checked, and a
/// listed callback the walk never reaches fails `nested_at`.
#[test]
fn a_nested_call_runs_at_every_listed_callback() {
    let nested = |at: &str| {
        format!(
            "{HEAD}[[calls]]\ncaller = \"t\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\nnested_at = {at}\n[calls.nested]\napi = \"GetFunctionFromIP\"\nip = \"frame\"\nexpect = \"S_OK\"\n"
        )
    };
    let every = Scenario::parse("n.toml", &nested("\"every\"")).unwrap().run();
    let walked = every.calls[0].frames.as_ref().unwrap().len();
    assert!(walked >= 2, "{walked} frames");
    assert_eq!(every.calls[0].nested.len(), walked, "one run per callback");
    // The last callback is the funcId 0 marker: its IP is native, so GetFunctionFromIP fails
    // there, and that run's expectation with it.
    assert_eq!(every.expectations.checked, walked);
    let failed = &every.expectations.failed;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].field, "expect");
    let listed = Scenario::parse("n.toml", &nested("[0, 7]")).unwrap().run();
    assert_eq!(listed.calls[0].nested.len(), 1);
    let failed = &listed.expectations.failed;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].field, "nested_at");
    assert_eq!(failed[0].expected, "a walk reaching frame 0, 7");
}

#[test]
fn bad_utf8_is_reported_at_its_line_column_and_key() {
    let dir = scratch_dir("utf8");
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        b"platform = \"unix\"\n[[code]]\nname = \"caf\xff\"\nkind = \"jit\"\n",
    )
    .unwrap();
    let (code, stdout, stderr) = run_cli(&file);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("bad.toml:3:12: field `name`: invalid UTF-8"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "one line per error: {stderr}");
}

#[test]
fn counts_past_the_limits_are_refused_before_anything_is_built() {
    let threads = |n: usize, frames: usize| {
        let mut text = String::from(HEAD);
        for i in 0..n {
            text.push_str(&format!(
                "[[threads]]\nname = \"x{i}\"\nframes = [{{ fn = \"M\", repeat = {frames} }}]\n"
            ));
        }
        text
    };
    let many = sim_clr::scenario::MAX_THREADS; // with HEAD's thread: one too many
    let err = Scenario::parse("threads.toml", &threads(many, 1)).unwrap_err();
    assert_eq!(err.field, "threads", "{err}");
    assert!(err.message.contains("limit of 4096"), "{err}");
    // Each thread fits its stack; together they hold too many frames.
    let per_thread = 8_000;
    let n = sim_clr::scenario::MAX_FRAMES / per_thread + 1;
    let err = Scenario::parse("frames.toml", &threads(n, per_thread)).unwrap_err();
    assert_eq!(err.field, "frames", "{err}");
    assert!(err.message.contains("in all"), "{err}");
    assert!(Scenario::parse("frames.toml", &threads(n - 1, per_thread)).is_ok());
}

#[test]
fn expect_stack_pins_the_names_and_native_runs_of_a_walk() {
    let stack = |expected: &str| {
        format!("{HEAD}[[calls]]\ncaller = \"t\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\nexpect_stack = {expected}\n")
    };
    let right = Scenario::parse("s.toml", &stack("[\"M\", \"0\"]")).unwrap().run();
    assert!(right.expectations.failed.is_empty(), "{:?}", right.expectations);
    assert_eq!(right.expectations.checked, 1);
    let wrong = Scenario::parse("s.toml", &stack("[\"M\"]")).unwrap().run();
    let failed = &wrong.expectations.failed;
    assert_eq!(failed.len(), 1);
    assert_eq!(
        (
            failed[0].field.as_str(),
            failed[0].expected.as_str(),
            failed[0].got.as_str()
        ),
        ("expect_stack", "[M]", "[M, 0]")
    );
}

#[test]
fn the_exception_state_is_derived_from_the_leaf_most_funclet() {
    use sim_clr::thread::ExceptionState;
    let state = |frames: &str| {
        let text = format!("{HEAD}[[threads]]\nname = \"u\"\nframes = [{frames}]\n");
        Scenario::parse("e.toml", &text).unwrap().threads[1].exception
    };
    assert_eq!(state("{ fn = \"M\" }"), ExceptionState::None);
    assert_eq!(
        state("{ fn = \"M\", funclet = \"catch\" }, { fn = \"M\" }"),
        ExceptionState::UnwindingInManaged
    );
    assert_eq!(
        state("{ fn = \"M\", funclet = \"filter\" }, { fn = \"M\" }"),
        ExceptionState::FirstPass
    );
    // A filter running inside a catch handler: the filter's first pass is the current one.
    assert_eq!(
        state("{ fn = \"M\", funclet = \"filter\" }, { fn = \"M\", funclet = \"catch\" }, { fn = \"M\" }"),
        ExceptionState::FirstPass
    );
}

/// Several nested calls in one walk (`[[calls.nested]]`), each at its own callbacks: each is
/// made where its `at` says, in declared order at one callback, and each one's unreached
/// callbacks fail its own `nested_at` check.
#[test]
fn several_nested_calls_each_run_at_their_own_callbacks() {
    let text = format!(
        "{HEAD}[[calls]]\ncaller = \"t\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\n\
         [[calls.nested]]\nat = [0, 1]\napi = \"GetFunctionFromIP\"\nip = \"frame\"\n\
         [[calls.nested]]\napi = \"GetCurrentThreadID\"\n\
         [[calls.nested]]\nat = [1, 9]\napi = \"EnumThreads\"\n"
    );
    let report = Scenario::parse("n.toml", &text).unwrap().run();
    let made: Vec<(Option<usize>, &str)> = report.calls[0]
        .nested
        .iter()
        .map(|n| (n.callback, n.api.as_str()))
        .collect();
    assert_eq!(
        made,
        [
            (Some(0), "GetFunctionFromIP"),
            (Some(0), "GetCurrentThreadID"),
            (Some(1), "GetFunctionFromIP"),
            (Some(1), "EnumThreads"),
        ]
    );
    let failed = &report.expectations.failed;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(
        (failed[0].field.as_str(), failed[0].line),
        ("nested_at", HEAD_LINES + 11)
    );
    assert_eq!(failed[0].expected, "a walk reaching frame 1, 9");
}

/// Words of Rust's and serde's vocabulary, which no message about a file may use: a field is
/// described in the file's terms (a whole number from 0 to 4294967295, an array, a table).
const RUST_WORDS: [&str; 21] = [
    "u8", "u16", "u32", "u64", "u128", "usize", "i8", "i16", "i32", "i64", "i128", "isize", "f32", "f64",
    "struct", "enum", "Option", "Vec", "sequence", "newtype", "variant",
];

/// Whether `message` uses one of [`RUST_WORDS`] as a word.
fn rust_word_in(message: &str) -> Option<&'static str> {
    let words: Vec<&str> = message
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .collect();
    RUST_WORDS.iter().copied().find(|w| words.contains(w))
}

/// The byte ranges of the values of `line`'s `key = value` pairs: the line's own (`key = …`
/// up to its end) and, inside inline tables, each up to the next `,` or `}` outside quotes
/// and brackets.
fn values_in(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = line[from..].find(" = ") {
        let start = from + at + 3;
        let key_ok = line[..from + at]
            .chars()
            .last()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        let (mut depth, mut quoted, mut end) = (0i32, false, start);
        while end < bytes.len() {
            match bytes[end] {
                b'"' => quoted = !quoted,
                b'[' | b'{' if !quoted => depth += 1,
                b']' | b'}' if !quoted && depth == 0 => break,
                b']' | b'}' if !quoted => depth -= 1,
                b',' if !quoted && depth == 0 => break,
                _ => {}
            }
            end += 1;
        }
        if key_ok && end > start {
            out.push((start, line[..end].trim_end().len().max(start)));
        }
        from = start;
    }
    out
}

#[test]
fn no_message_names_a_rust_type_whatever_value_a_field_is_given() {
    // Every `key = value` line of every bundled file, its value replaced by each kind of
    // value TOML has (and numbers out of every range): each error is in the file's words.
    let values = [
        "\"text\"",
        "-1",
        "4294967296",
        "18446744073709551615",
        "9223372036854775807",
        "1.5",
        "true",
        "[1, 2]",
        "[\"a\", 3]",
        "{ x = 1 }",
        "1979-05-27",
    ];
    let files = fixtures::catalog()
        .iter()
        .chain(fixtures::process_catalog())
        .chain(fixtures::pitfall_catalog())
        .chain(fixtures::walk_catalog());
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (name, text) in files {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.trim_start().starts_with('#') {
                continue;
            }
            for (start, end) in values_in(line) {
                for value in values {
                    let mut edited = lines.clone();
                    let replaced = format!("{}{value}{}", &line[..start], &line[end..]);
                    edited[i] = &replaced;
                    if let Err(e) = Scenario::parse(name, &edited.join("\n")) {
                        checked += 1;
                        if let Some(word) = rust_word_in(&e.message) {
                            wrong.push(format!(
                                "{word}: field `{}`: {} ({name}:{})",
                                e.field, e.message, e.line
                            ));
                        }
                    }
                }
            }
        }
    }
    // One line per field and message.
    wrong.sort();
    wrong.dedup_by(|a, b| a.split(" (").next() == b.split(" (").next());
    assert!(checked > 1_000, "{checked} errors checked");
    assert!(
        wrong.is_empty(),
        "{} messages name Rust types:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
