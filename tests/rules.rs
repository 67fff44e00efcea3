//! One test (at least) per rule R1–R35 of the DoStackSnapshot specification, named after it.
//! `docs/rules.md` maps every rule to these tests and to the catalog scenarios.
//!
//! Most tests state a small scenario and check the report; those about callback arguments
//! (R22–R25, R31) drive the runtime directly through `corprof::ProfilerInfo`.

use corprof::flags::snapshot;
use corprof::{Context, FunctionId, HResult, ProfilerInfo, Register, SnapshotFrame, ThreadId};
use sim_clr::scenario::{CallReport, Report, Scenario};
use sim_clr::{CallContext, CallbackKind, Runtime};

/// Code and threads shared by the tests: `main` (managed, called through P/Invoke), `worker`
/// (managed, running managed code), `sampler` (never managed).
const WORLD: &str = r#"
[[code]]
name = "App::Leaf"
kind = "jit"
[[code]]
name = "App::Mid"
kind = "jit"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "IL_STUB"
kind = "il_stub"
[[code]]
name = "native!run"
kind = "native"
[[code]]
name = "host!main"
kind = "native"
[[code]]
name = "sampler!loop"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "App::Leaf" }, { fn = "App::Mid" }, { fn = "App::Main" }, { fn = "host!main" }]
[[threads]]
name = "worker"
frames = [{ fn = "App::Leaf", repeat = 2 }, { fn = "App::Main" }, { fn = "host!main" }]
[[threads]]
name = "sampler"
kind = "native"
frames = [{ fn = "sampler!loop" }]
"#;

const MASK: &str = r#"event_mask = ["ENABLE_STACK_SNAPSHOT", "ENABLE_OBJECT_ALLOCATED", "MONITOR_OBJECT_ALLOCATED", "MONITOR_SUSPENDS", "MONITOR_EXCEPTIONS", "MONITOR_GC", "MONITOR_THREADS", "MONITOR_ENTERLEAVE"]"#;

/// Builds a scenario: `runtime` lines go in `[runtime]`, `threads` are extra `[[threads]]`
/// tables, `calls` the `[[calls]]` tables.
fn scenario(platform: &str, runtime: &str, threads: &str, calls: &str) -> Scenario {
    let mask = if runtime.contains("event_mask") { "" } else { MASK };
    let text =
        format!("platform = \"{platform}\"\n[runtime]\n{mask}\n{runtime}\n{WORLD}\n{threads}\n{calls}");
    Scenario::parse("inline.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn run(platform: &str, runtime: &str, threads: &str, calls: &str) -> Report {
    scenario(platform, runtime, threads, calls).run()
}

fn hr(call: &CallReport) -> &str {
    call.hresult_name
        .as_deref()
        .or(call.hresult.as_deref())
        .unwrap_or("<none>")
}

fn names(call: &CallReport) -> Vec<String> {
    call.frames
        .as_ref()
        .unwrap()
        .iter()
        .map(|f| f.function.clone().unwrap_or_else(|| "0".into()))
        .collect()
}

fn dss(caller: &str, from: &str, extra: &str) -> String {
    format!("[[calls]]\ncaller = \"{caller}\"\nfrom = \"{from}\"\napi = \"DoStackSnapshot\"\n{extra}\n")
}

/// Runs `f` on `thread` in `context` against a fresh runtime of `s`.
fn with_runtime<R>(s: &Scenario, thread: &str, context: CallContext, f: impl FnOnce(&Runtime) -> R) -> R {
    s.runtime().on_thread(thread, context, f).expect("thread exists")
}

/// Collects (funcId, ip, frame info, context) for every callback of a walk.
type Seen = Vec<(FunctionId, u64, corprof::FrameInfo, Option<Vec<u8>>)>;

fn walk(rt: &Runtime, thread: ThreadId, flags: u32, seed: Option<&Context>) -> (HResult, Seen) {
    let mut seen = Vec::new();
    let mut cb = |f: &SnapshotFrame<'_>| {
        seen.push((f.func_id, f.ip, *f.frame_info, f.context.map(<[u8]>::to_vec)));
        HResult::S_OK
    };
    let hr = rt.do_stack_snapshot(thread, Some(&mut cb), flags, seed, 0);
    (hr, seen)
}

#[test]
fn r01_a_detaching_profiler_is_refused() {
    let r = run(
        "unix",
        "detaching = true",
        "",
        &dss("main", "pinvoke", "flags = 6"),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_PROFILER_DETACHING");
}

#[test]
fn r01_never_unsupported_call_sequence_even_outside_callbacks() {
    let r = run("unix", "", "", &dss("main", "pinvoke", ""));
    assert_eq!(hr(&r.calls[0]), "S_OK");
}

#[test]
fn r02_runtime_not_started_is_unsafe_before_anything_else() {
    let r = run(
        "unix",
        "started = false\ngc_initialized = false",
        "",
        &dss("sampler", "thread", "flags = 6\ntarget = \"bogus\""),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    assert!(r.faults.is_empty());
}

#[test]
fn r03_snapshot_flag_is_required_and_checked_before_the_flags() {
    let r = run("unix", "event_mask = 0", "", &dss("main", "pinvoke", "flags = 2"));
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_INCONSISTENT_WITH_FLAGS");
}

#[test]
fn r04_zero_is_the_caller_and_a_non_zero_id_is_not_validated() {
    let r = run(
        "unix",
        "",
        "",
        &(dss("main", "pinvoke", "target = 0")
            + &dss("main", "pinvoke", "target = \"self\"")
            + &dss("sampler", "thread", "target = \"bogus\"")),
    );
    assert_eq!(names(&r.calls[0]), names(&r.calls[1]));
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Mid", "App::Main", "0"]);
    assert_eq!(r.faults[0].kind, "bogus_thread_id");
    assert!(r.faults[0].fatal);
}

#[test]
fn r05_invalid_flags_are_rejected_before_the_thread_is_dereferenced() {
    for flags in ["2", "4", "0x80000000", "3"] {
        let r = run(
            "unix",
            "",
            "",
            &dss(
                "sampler",
                "thread",
                &format!("target = \"bogus\"\nflags = {flags}"),
            ),
        );
        assert_eq!(hr(&r.calls[0]), "E_INVALIDARG", "flags {flags}");
        assert!(r.faults.is_empty());
    }
}

#[test]
fn r06_nothing_to_walk_is_success_without_callbacks() {
    let native = run("unix", "", "", &dss("sampler", "thread", "target = 0"));
    assert_eq!((hr(&native.calls[0]), names(&native.calls[0]).len()), ("S_OK", 0));
    let gc = run(
        "unix",
        "",
        "[[threads]]\nname = \"gc\"\ngc_special = true\nframes = [{ fn = \"native!run\" }]",
        &dss("main", "pinvoke", "target = \"gc\""),
    );
    assert_eq!((hr(&gc.calls[0]), names(&gc.calls[0]).len()), ("S_OK", 0));
    let early = run("unix", "gc_initialized = false", "", &dss("main", "pinvoke", ""));
    assert_eq!((hr(&early.calls[0]), names(&early.calls[0]).len()), ("S_OK", 0));
}

#[test]
fn r07_context_size_is_ignored_and_a_null_callback_only_crashes_when_a_frame_is_reached() {
    let r = run(
        "unix",
        "",
        "",
        &(dss("main", "ObjectAllocated", "seed = \"zero\"\ncontext_size = 16")
            + &dss("sampler", "thread", "target = \"worker\"\ncallback = \"null\"")),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(hr(&r.calls[1]), "E_NOTIMPL");
    assert!(r.faults.is_empty());
    let crash = run("unix", "", "", &dss("main", "pinvoke", "callback = \"null\""));
    assert_eq!(
        (crash.faults[0].kind.as_str(), crash.faults[0].fatal),
        ("null_callback", true)
    );
    let survive = run("windows", "", "", &dss("main", "pinvoke", "callback = \"null\""));
    assert_eq!(
        (hr(&survive.calls[0]), survive.faults[0].fatal),
        ("E_UNEXPECTED", false)
    );
}

#[test]
fn r08_the_hijack_lock_makes_a_nested_walk_of_the_same_thread_unsafe() {
    let r = run(
        "unix",
        "",
        "",
        &(dss("main", "pinvoke", "nested_at = 1") + "[calls.nested]\napi = \"DoStackSnapshot\"\n"),
    );
    assert_eq!(hr(&r.calls[0]), "S_OK");
    assert_eq!(hr(&r.calls[0].nested[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    let held = run(
        "unix",
        "",
        "[[threads]]\nname = \"held\"\nhijack_lock_held = true\nframes = [{ fn = \"App::Main\" }]",
        &dss("held", "pinvoke", ""),
    );
    assert_eq!(hr(&held.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
}

#[test]
fn r09_suspension_in_progress_refuses_managed_callers_only() {
    let r = run(
        "windows",
        "suspend_in_progress = true",
        "",
        &(dss("main", "pinvoke", "target = \"worker\"") + &dss("sampler", "thread", "target = \"worker\"")),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    assert_eq!(hr(&r.calls[1]), "S_OK");
}

#[test]
fn r10_a_forbid_suspend_region_is_unsafe_even_for_the_thread_itself() {
    let r = run(
        "unix",
        "",
        "[[threads]]\nname = \"busy\"\nforbid_suspend = 2\nframes = [{ fn = \"App::Main\" }]",
        &dss("busy", "pinvoke", ""),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
}

#[test]
fn r11_cross_thread_without_suspend_runtime() {
    let unix = run("unix", "", "", &dss("sampler", "thread", "target = \"worker\""));
    assert_eq!(hr(&unix.calls[0]), "E_NOTIMPL");
    let windows = run(
        "windows",
        "",
        "",
        &dss("sampler", "thread", "target = \"worker\""),
    );
    assert_eq!(hr(&windows.calls[0]), "S_OK");
    let events: Vec<&str> = windows.calls[0].events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(events.first(), Some(&"RuntimeThreadSuspended"));
    assert_eq!(events.last(), Some(&"RuntimeThreadResumed"));
    assert!(
        windows.calls[0].events.iter().all(|e| e.on == "sampler"),
        "R11.3: raised on the caller"
    );
    let fails = run(
        "windows",
        "",
        "[[threads]]\nname = \"stuck\"\nsuspend_fails = true\nframes = [{ fn = \"App::Main\" }]",
        &dss("sampler", "thread", "target = \"stuck\""),
    );
    assert_eq!(hr(&fails.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    let dead = run(
        "windows",
        "",
        "",
        &("[[calls]]\nevent = \"thread_exit\"\nthread = \"worker\"\n".to_string()
            + &dss("sampler", "thread", "target = \"worker\"")),
    );
    assert_eq!(dead.faults[0].kind, "walk_of_destroyed_thread");
    assert_eq!(dead.calls[1].hresult, None, "a fatal error never returns");
}

/// A sampler that never takes the runtime's events (each seeded walk of a preemptive thread
/// notes a discarded seed) keeps at most `MAX_EVENTS` of them; the take says how many it lost.
#[test]
fn r12_discarded_seeds_noted_in_bounded_memory() {
    let s = scenario("unix", "", "", "");
    let walks = sim_clr::MAX_EVENTS + 100;
    let events = with_runtime(&s, "main", CallContext::PInvoke, |rt| {
        let seed = Context::zeroed();
        for _ in 0..walks {
            assert_eq!(walk(rt, ThreadId::NULL, 0, Some(&seed)).0, HResult::S_OK);
        }
        rt.take_events()
    });
    assert_eq!(events.len(), sim_clr::MAX_EVENTS + 1);
    assert!(events[..sim_clr::MAX_EVENTS]
        .iter()
        .all(|e| e.kind == "SeedDiscarded"));
    let last = events.last().unwrap();
    assert_eq!(last.kind, "EventsDropped");
    assert!(
        last.detail.as_deref().unwrap().starts_with("100 later events"),
        "{last:?}"
    );
}

#[test]
fn r12_a_preemptive_targets_seed_is_discarded_unchecked() {
    let r = run(
        "unix",
        "",
        "",
        &(dss("main", "pinvoke", "seed = \"zero\"") + &dss("main", "pinvoke", "seed = { rip = 0x42 }")),
    );
    for call in &r.calls {
        assert_eq!(hr(call), "S_OK");
        assert_eq!(names(call), ["App::Leaf", "App::Mid", "App::Main", "0"]);
        assert!(call.events.iter().any(|e| e.kind == "SeedDiscarded"));
    }
}

#[test]
fn r13_cooperative_cross_thread_targets_must_have_a_trustworthy_context() {
    for bad in [
        "debugger_filter",
        "get_context_fails",
        "in_kernel",
        "exception_active",
        "no_exception_reporting",
    ] {
        let t =
            format!("[[threads]]\nname = \"t\"\nos_context = \"{bad}\"\nframes = [{{ fn = \"App::Main\" }}]");
        let r = run("windows", "", &t, &dss("sampler", "thread", "target = \"t\""));
        assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE", "{bad}");
    }
    let race = run(
        "windows",
        "",
        "[[threads]]\nname = \"t\"\nmode_race = true\nframes = [{ fn = \"App::Main\" }]",
        &dss("sampler", "thread", "target = \"t\""),
    );
    assert_eq!(hr(&race.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE", "R13.3");
    let stale = run("windows", "", "[[threads]]\nname = \"t\"\nos_context = \"stale\"\nframes = [{ fn = \"App::Leaf\" }, { frame = \"HelperMethodFrame\" }, { fn = \"App::Main\" }]", &dss("sampler", "thread", "target = \"t\""));
    assert_eq!(hr(&stale.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE", "R13.4");
    let unix = run(
        "unix",
        "",
        "",
        &dss("main", "GarbageCollectionStarted", "target = \"worker\""),
    );
    assert_eq!(hr(&unix.calls[0]), "E_NOTIMPL");
    let selfseed = run(
        "windows",
        "",
        "",
        &dss("sampler", "thread", "target = \"worker\""),
    );
    assert_eq!(
        names(&selfseed.calls[0]),
        ["App::Leaf", "App::Leaf", "App::Main", "0"],
        "R13.5: the walk starts at the real IP"
    );
}

#[test]
fn r14_the_seed_ip_must_be_managed_code() {
    let r = run(
        "unix",
        "",
        "",
        &(dss(
            "main",
            "ObjectAllocated",
            "seed = { thread = \"main\", frame = 3 }",
        ) + &dss(
            "main",
            "ObjectAllocated",
            "seed = { thread = \"main\", frame = 1 }",
        )),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(names(&r.calls[1]), ["App::Mid", "App::Main", "0"]);
}

#[test]
fn r15_an_unseeded_walk_during_unwinding_is_unmanaged_ctx() {
    let t = "[[threads]]\nname = \"t\"\nexception = \"unwinding\"\nframes = [{ fn = \"App::Main\" }, { fn = \"host!main\" }]";
    let r = run(
        "unix",
        "",
        t,
        &(dss("t", "pinvoke", "") + &dss("t", "ExceptionThrown", "seed = { thread = \"t\", frame = 0 }")),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(hr(&r.calls[1]), "S_OK", "seeded: R15 does not apply");
}

#[test]
fn r16_an_inconsistent_exception_state_is_unsafe_seeded_or_not() {
    let t = "[[threads]]\nname = \"t\"\nexception = \"inconsistent\"\nframes = [{ fn = \"App::Main\" }]";
    let r = run(
        "unix",
        "",
        t,
        &(dss("t", "pinvoke", "") + &dss("t", "ObjectAllocated", "seed = { thread = \"t\", frame = 0 }")),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    assert_eq!(hr(&r.calls[1]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
}

#[test]
fn r17_walk_outcomes_map_to_hresults() {
    let empty = run(
        "unix",
        "",
        "[[threads]]\nname = \"t\"\nframes = [{ fn = \"IL_STUB\" }]",
        &dss("t", "pinvoke", ""),
    );
    assert_eq!(
        (hr(&empty.calls[0]), names(&empty.calls[0]).len()),
        ("S_OK", 0),
        "the walk stopped only at a frame without metadata"
    );
    let none = run(
        "unix",
        "",
        "[[threads]]\nname = \"t\"\nframes = [{ fn = \"native!run\" }]",
        &dss("t", "ThreadDestroyed", ""),
    );
    assert_eq!(hr(&none.calls[0]), "E_FAIL", "no frame at all: SWA_FAILED");
    let outside = run(
        "windows",
        "",
        "",
        &dss(
            "sampler",
            "thread",
            "target = \"worker\"\nseed = { thread = \"main\", frame = 0 }",
        ),
    );
    assert_eq!(
        (hr(&outside.calls[0]), names(&outside.calls[0]).len()),
        ("E_FAIL", 1)
    );
    let av = run(
        "windows",
        "",
        "",
        &dss(
            "sampler",
            "thread",
            "target = \"worker\"\nseed = { rip = { fn = \"App::Main\" }, rsp = 0x1000 }",
        ),
    );
    assert_eq!(hr(&av.calls[0]), "E_UNEXPECTED");
    assert_eq!(av.faults[0].kind, "access_violation");
}

#[test]
fn r18_cleanup_resumes_the_target_and_releases_the_hijack_lock() {
    let s = scenario("windows", "", "", "");
    let rt = s.runtime();
    let worker = rt.thread("worker").unwrap().id;
    rt.on_thread("sampler", CallContext::Thread, |rt| {
        let (first, _) = walk(rt, worker, 0, None);
        let (aborted, _) = {
            let mut cb = |_: &SnapshotFrame<'_>| HResult::S_FALSE;
            (rt.do_stack_snapshot(worker, Some(&mut cb), 0, None, 0), ())
        };
        let bad = rt.do_stack_snapshot(worker, None, 0, Some(&Context::zeroed()), 0);
        let (again, frames) = walk(rt, worker, 0, None);
        assert_eq!(
            (first, aborted, bad),
            (
                HResult::S_OK,
                HResult::CORPROF_E_STACKSNAPSHOT_ABORTED,
                HResult::CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX
            )
        );
        assert_eq!((again, frames.len()), (HResult::S_OK, 4));
    })
    .expect("the scenario declares `sampler`");
    let t = rt.thread("worker").unwrap();
    assert_eq!((t.os_suspend_count, t.hijack_lock_held), (0, false));
}

#[test]
fn r19_a_walk_under_suspend_runtime_does_not_suspend_the_target_itself() {
    let calls = "[[calls]]\ncaller = \"sampler\"\napi = \"SuspendRuntime\"\n".to_string()
        + &dss("sampler", "thread", "target = \"worker\"");
    let r = run("windows", "", "", &calls);
    assert_eq!(hr(&r.calls[1]), "S_OK");
    assert!(r.calls[1]
        .events
        .iter()
        .all(|e| e.kind != "RuntimeThreadSuspended"));
}

#[test]
fn r20_only_managed_frames_with_metadata_are_reported() {
    let t = "[[threads]]\nname = \"t\"\nframes = [{ fn = \"App::Leaf\" }, { fn = \"IL_STUB\" }, { fn = \"App::Main\" }, { frame = \"GCFrame\" }, { fn = \"host!main\" }]";
    let r = run("unix", "", t, &dss("t", "ObjectAllocated", ""));
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Main", "0"]);
}

#[test]
fn r21_one_marker_per_native_run_below_managed_code_and_none_on_top() {
    let t = "[[threads]]\nname = \"t\"\nframes = [{ fn = \"native!run\", repeat = 3 }, { frame = \"InlinedCallFrame\" }, { fn = \"App::Leaf\" }, { fn = \"IL_STUB\" }, { fn = \"native!run\", repeat = 4 }, { frame = \"InlinedCallFrame\" }, { fn = \"App::Main\" }, { fn = \"host!main\" }]";
    let r = run("unix", "", t, &dss("t", "thread", ""));
    assert_eq!(
        names(&r.calls[0]),
        ["App::Leaf", "0", "App::Main", "0"],
        "a marker even after a skipped IL stub"
    );
}

#[test]
fn r22_r23_frames_come_leaf_first_with_the_leaf_ip_then_return_addresses() {
    let s = scenario("windows", "", "", "");
    with_runtime(&s, "sampler", CallContext::Thread, |rt| {
        let worker = rt.thread("worker").unwrap();
        let (hr, seen) = walk(rt, worker.id, 0, None);
        assert_eq!(hr, HResult::S_OK);
        let expected: Vec<u64> = worker.layout.calls.iter().map(|c| c.rip).collect();
        let got: Vec<u64> = seen.iter().map(|s| s.1).collect();
        assert_eq!(
            got, expected,
            "leaf IP (self-seeded), return addresses, then the native caller's return address"
        );
        let leaf = rt.with_code(|c| c.function(c.by_name("App::Leaf").unwrap()).clone());
        assert_eq!(got[0], leaf.start + sim_clr::code::machine::LEAF_OFFSET);
        assert_eq!(got[1], leaf.start + sim_clr::code::machine::RETURN_OFFSET);
    });
}

#[test]
fn r24_frame_info_repeats_the_callback_arguments_with_null_generic_context() {
    let s = scenario("unix", "", "", "");
    with_runtime(&s, "main", CallContext::PInvoke, |rt| {
        let (_, seen) = walk(rt, ThreadId::NULL, 0, None);
        for (func, ip, info, _) in &seen {
            assert_eq!(
                (
                    info.func_id,
                    info.ip,
                    info.extra_arg,
                    info.this_arg,
                    info.version,
                    info.size
                ),
                (*func, *ip, 0, 0, 1, 40)
            );
        }
        let (f, _, info, _) = seen[0];
        assert!(rt.get_function_info2(f, Some(&info)).is_ok());
        assert_eq!(
            rt.get_function_info2(seen[1].0, Some(&info)),
            Err(HResult::E_INVALIDARG)
        );
    });
}

#[test]
fn r25_each_context_holds_that_frames_registers() {
    let s = scenario("unix", "", "", "");
    with_runtime(
        &s,
        "main",
        CallContext::Callback(CallbackKind::ObjectAllocated),
        |rt| {
            let thread = rt.thread("main").unwrap();
            let (_, none) = walk(rt, ThreadId::NULL, 0, None);
            assert!(none.iter().all(|f| f.3.is_none()));
            let (_, seen) = walk(rt, ThreadId::NULL, snapshot::REGISTER_CONTEXT, None);
            // Calls in layout: profiler callback, helper, Leaf, Mid, Main, host.
            for (i, (_, ip, _, ctx)) in seen.iter().enumerate() {
                let bytes = ctx
                    .as_ref()
                    .expect("a context for every frame, funcId 0 included");
                assert_eq!(bytes.len(), 1232);
                let c = Context::from_bytes(bytes).unwrap();
                let truth = thread.call_context(i + 2);
                assert_eq!(c.rip, *ip);
                for r in Register::CALLBACK_VALID {
                    assert_eq!(c.get(r), truth.get(r), "frame {i} {}", r.name());
                }
            }
        },
    );
}

#[test]
fn r26_any_value_but_s_ok_aborts_the_walk() {
    for value in ["S_FALSE", "E_FAIL", "0x12345", "0x80131361"] {
        let r = run(
            "unix",
            "",
            "",
            &dss(
                "main",
                "pinvoke",
                &format!("callback = {{ return = \"{value}\", at = 2 }}"),
            ),
        );
        assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_ABORTED");
        assert_eq!(names(&r.calls[0]).len(), 3, "no callback after the aborting one");
    }
}

#[test]
fn r27_calls_from_the_callback_inherit_the_call_state() {
    let nested = "nested_at = 0\n[calls.nested]\napi = \"GetFunctionFromIP2\"\nip = \"frame\"\n";
    let calls = dss("main", "pinvoke", nested)
        + &dss("main", "ExceptionThrown", nested)
        + "[[calls]]\ncaller = \"sampler\"\napi = \"SuspendRuntime\"\n"
        + &dss("sampler", "thread", &format!("target = \"worker\"\n{nested}"));
    let r = run("unix", "", "", &calls);
    assert_eq!(hr(&r.calls[0].nested[0]), "CORPROF_E_UNSUPPORTED_CALL_SEQUENCE");
    assert_eq!(hr(&r.calls[1].nested[0]), "S_OK");
    assert_eq!(hr(&r.calls[3].nested[0]), "S_OK");
}

#[test]
fn r28_a_funclet_is_reported_under_its_containing_method() {
    let t = "[[threads]]\nname = \"t\"\nexception = \"unwinding_in_managed\"\nframes = [{ fn = \"App::Main\" }, { fn = \"App::Leaf\" }, { fn = \"App::Main\" }, { fn = \"host!main\" }]";
    let r = run("unix", "", t, &dss("t", "ExceptionThrown", ""));
    assert_eq!(names(&r.calls[0]), ["App::Main", "App::Leaf", "App::Main", "0"]);
}

#[test]
fn r28_after_a_second_pass_funclet_the_parent_is_skipped() {
    // Real CoreCLR 3.1: Run, CatchAt, Main, 0 inside a catch; Run, Filter, FilterAt, 0,
    // Thrower, FilterAt, Main, 0 inside a filter (conformance/scenarios/sync.toml).
    let t = |funclet: &str| {
        format!(
            "[[threads]]\nname = \"t\"\nframes = [{{ fn = \"App::Leaf\" }}, {{ fn = \"App::Mid\", funclet = \"{funclet}\" }}, \
             {{ fn = \"native!run\" }}, {{ frame = \"HelperMethodFrame\" }}, {{ fn = \"App::Leaf\" }}, {{ fn = \"App::Mid\" }}, {{ fn = \"App::Main\" }}, {{ fn = \"host!main\" }}]"
        )
    };
    for (funclet, expected) in [
        ("catch", vec!["App::Leaf", "App::Mid", "App::Main", "0"]),
        ("finally", vec!["App::Leaf", "App::Mid", "App::Main", "0"]),
        (
            "filter",
            vec![
                "App::Leaf",
                "App::Mid",
                "0",
                "App::Leaf",
                "App::Mid",
                "App::Main",
                "0",
            ],
        ),
    ] {
        let r = run("unix", "", &t(funclet), &dss("t", "pinvoke", ""));
        assert_eq!(names(&r.calls[0]), expected, "{funclet}");
    }
}

#[test]
fn r29_a_pending_hijack_is_removed_before_the_walk() {
    let s = scenario("windows", "", "[[threads]]\nname = \"h\"\nhijacked = true\nframes = [{ fn = \"App::Leaf\" }, { fn = \"App::Main\" }, { fn = \"host!main\" }]", "");
    let rt = s.runtime();
    let before = rt.thread("h").unwrap();
    let (slot, original) = before.layout.hijacked_slot.expect("hijacked");
    let stub = rt.with_code(|c| {
        c.function(c.by_name(sim_clr::runtime::builtin::HIJACK_STUB).unwrap())
            .start
    });
    assert_eq!(
        rt.read_memory(slot),
        Some(stub),
        "the stub sits in the return-address slot"
    );
    rt.on_thread("sampler", CallContext::Thread, |rt| {
        let (hr, seen) = walk(rt, before.id, 0, None);
        assert_eq!((hr, seen.len()), (HResult::S_OK, 3));
        assert!(seen.iter().all(|f| f.1 != stub));
    })
    .expect("the scenario declares `sampler`");
    assert_eq!(rt.read_memory(slot), Some(original));
}

#[test]
fn r30_walks_are_allowed_while_a_gc_runs() {
    let r = run("unix", "", "", &dss("main", "GarbageCollectionStarted", ""));
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Mid", "App::Main", "0"]);
}

#[test]
fn r31_the_seed_is_copied_whole_and_never_written() {
    let s = scenario("unix", "", "", "");
    with_runtime(
        &s,
        "main",
        CallContext::Callback(CallbackKind::ObjectAllocated),
        |rt| {
            let thread = rt.thread("main").unwrap();
            let mut seed = thread.call_context(3);
            seed.r12 = 0x1234_5678;
            let copy = seed.clone();
            let (hr, seen) = walk(rt, ThreadId::NULL, snapshot::REGISTER_CONTEXT, Some(&seed));
            assert_eq!(hr, HResult::S_OK);
            assert_eq!(seed, copy);
            let first = Context::from_bytes(seen[0].3.as_ref().unwrap()).unwrap();
            assert_eq!(
                first.r12, 0x1234_5678,
                "the walk's context starts as a full copy of the seed"
            );
        },
    );
}

/// A seed taken from a callback of an earlier walk (`seed = { call, callback }`): a managed
/// frame's CONTEXT seeds a walk from that frame; the `funcId == 0` marker's CONTEXT (the
/// native caller's registers) is refused as UNMANAGED_CTX (R14), as on the real runtime.
/// A callback the earlier walk never made skips the call, and its expectation says why.
#[test]
fn r14_a_seed_from_an_earlier_walks_callback() {
    let from = "ObjectAllocated";
    let first = dss("main", from, "flags = [\"REGISTER_CONTEXT\"]");
    let seeded = |k: usize| dss("main", from, &format!("seed = {{ call = 1, callback = {k} }}"));
    let r = run(
        "unix",
        "",
        "",
        &(first.clone() + &seeded(1) + &seeded(3) + &seeded(9) + "expect = \"S_OK\"\n"),
    );
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Mid", "App::Main", "0"]);
    assert_eq!(hr(&r.calls[1]), "S_OK");
    assert_eq!(names(&r.calls[1]), ["App::Mid", "App::Main", "0"]);
    assert_eq!(hr(&r.calls[2]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(
        r.calls[3].skipped.as_deref(),
        Some("no seed: call #1 made 4 callback(s), not callback 9")
    );
    let failed = &r.expectations.failed;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].got.starts_with("nothing (skipped: no seed"),
        "{failed:?}"
    );
    // Only an earlier walk with contexts can be named.
    for (calls, why) in [
        (seeded(0), "is not an earlier DoStackSnapshot"),
        (dss("main", from, "") + &seeded(0), "its callbacks get no CONTEXT"),
        (
            first + &dss("main", from, "seed = { call = 1 }"),
            "`call` and `callback`",
        ),
    ] {
        let text = format!("platform = \"unix\"\n[runtime]\n{MASK}\n{WORLD}\n{calls}");
        let e = Scenario::parse("inline.toml", &text).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
}

#[test]
fn r32_an_unseeded_walk_starts_at_the_most_recent_frame() {
    let t = "[[threads]]\nname = \"t\"\nmode = \"cooperative\"\nframes = [{ fn = \"native!run\" }, { fn = \"App::Leaf\" }, { fn = \"App::Mid\" }, { fn = \"native!run\" }, { frame = \"InlinedCallFrame\" }, { fn = \"App::Main\" }, { fn = \"host!main\" }]";
    let r = run(
        "unix",
        "",
        t,
        &(dss("t", "thread", "") + &dss("t", "thread", "seed = { thread = \"t\", frame = 1 }")),
    );
    assert_eq!(names(&r.calls[0]), ["App::Main", "0"]);
    assert_eq!(
        names(&r.calls[1]),
        ["App::Leaf", "App::Mid", "0", "App::Main", "0"]
    );
}

#[test]
fn r33_a_runtime_helper_on_top_needs_a_seed() {
    let t = "[[threads]]\nname = \"t\"\nmode = \"cooperative\"\nframes = [{ fn = \"native!run\" }, { fn = \"App::Leaf\" }, { fn = \"App::Main\" }, { fn = \"host!main\" }]";
    let r = run(
        "windows",
        "",
        t,
        &(dss("sampler", "thread", "target = \"t\"")
            + &dss(
                "sampler",
                "thread",
                "target = \"t\"\nseed = { thread = \"t\", frame = 1 }",
            )),
    );
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(names(&r.calls[1]), ["App::Leaf", "App::Main", "0"]);
}

#[test]
fn r34_only_the_seed_ip_is_checked() {
    let r = run(
        "unix",
        "",
        "",
        &(dss(
            "main",
            "ObjectAllocated",
            "seed = { rip = { fn = \"IL_STUB\", offset = 4 }, rsp = 0x20 }",
        ) + &dss(
            "main",
            "ObjectAllocated",
            "seed = { thread = \"main\", frame = 0, rsp = 0x7ffdfff00000 }",
        )),
    );
    assert_eq!(
        r.faults[0].kind, "access_violation",
        "an IL-stub IP passes; the unmapped RSP then faults"
    );
    assert!(r.faults[0].fatal, "not caught on Unix");
}

#[test]
fn r35_an_enter_hook_walk_begins_at_the_slow_path_frame() {
    let r = run("unix", "", "", &dss("main", "FunctionEnter", ""));
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Mid", "App::Main", "0"]);
}

#[test]
fn threads_are_found_by_thread_id() {
    let rt = scenario("unix", "", "", "").runtime();
    let main = rt.thread("main").unwrap();
    assert_eq!(rt.thread_by_id(main.id).map(|t| t.name), Some("main".into()));
    assert_eq!(rt.thread_name(main.id).as_deref(), Some("main"));
    // A never-managed thread has no ThreadID the runtime would resolve, nor has garbage.
    let sampler = rt.thread("sampler").unwrap();
    assert!(rt.thread_by_id(sampler.id).is_none());
    assert!(rt.thread_name(ThreadId(0xdead_0000)).is_none());
}

#[test]
fn on_thread_with_an_unknown_name_is_an_error_and_runs_nothing() {
    let rt = scenario("unix", "", "", "").runtime();
    let mut ran = false;
    let result = rt.on_thread("smapler", CallContext::Thread, |_| ran = true);
    assert_eq!(result, Err(sim_clr::UnknownThread("smapler".into())));
    assert!(!ran);
    assert_eq!(result.unwrap_err().to_string(), "no thread named `smapler`");
}
