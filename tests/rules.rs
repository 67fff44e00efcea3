//! One test (at least) per rule R1–R35 of the DoStackSnapshot specification, named after it.
//! `docs/rules.md` maps every rule to these tests and to the catalog scenarios.
//!
//! Most tests state a small scenario and check the report; those about callback arguments
//! (R22–R25, R31) drive the runtime directly through `corprof::ProfilerInfo`.

use corprof::flags::snapshot;
use corprof::{Context, FunctionId, HResult, ProfilerInfo, Register, SnapshotFrame, ThreadId};
use fixtures::compose::{CallSpec, Compose, Frame, ThreadSpec, Value};
use sim_clr::code::CodeKind;
use sim_clr::scenario::{
    CallReport, CallbackBehavior, NestedAt, Scenario, Seed, SeedBase, SeedValue, Target,
};
use sim_clr::thread::{ExceptionState, FrameKind, Funclet, Mode, OsContext};
use sim_clr::{CallContext, CallbackKind, Platform, Runtime};

/// The event mask of every scenario unless a test sets its own.
const MASK: [&str; 8] = [
    "ENABLE_STACK_SNAPSHOT",
    "ENABLE_OBJECT_ALLOCATED",
    "MONITOR_OBJECT_ALLOCATED",
    "MONITOR_SUSPENDS",
    "MONITOR_EXCEPTIONS",
    "MONITOR_GC",
    "MONITOR_THREADS",
    "MONITOR_ENTERLEAVE",
];

/// The code and threads shared by the tests, on `platform`, with [`MASK`]: `main` (managed,
/// called through P/Invoke), `worker` (managed, running managed code), `sampler` (never
/// managed). Tests add their own runtime fields, threads and calls.
fn world(platform: Platform) -> Compose {
    let managed = [
        ("App::Leaf", CodeKind::Jit),
        ("App::Mid", CodeKind::Jit),
        ("App::Main", CodeKind::Jit),
        ("IL_STUB", CodeKind::IlStub),
    ];
    let native = ["native!run", "host!main", "sampler!loop"].map(|name| (name, CodeKind::Native));
    let code = managed
        .into_iter()
        .chain(native)
        .fold(Compose::new(platform).event_mask(&MASK), |c, (name, kind)| {
            c.code(name, kind)
        });
    let main = [
        Frame::Call("App::Leaf"),
        Frame::Call("App::Mid"),
        Frame::Call("App::Main"),
        Frame::Call("host!main"),
    ];
    let worker = [
        Frame::Repeat("App::Leaf", 2),
        Frame::Call("App::Main"),
        Frame::Call("host!main"),
    ];
    code.thread(ThreadSpec::new("main", &main))
        .thread(ThreadSpec::new("worker", &worker))
        .thread(ThreadSpec::native("sampler", &[Frame::Call("sampler!loop")]))
}

/// The contexts calls are made from.
const THREAD: CallContext = CallContext::Thread;
const PINVOKE: CallContext = CallContext::PInvoke;

/// A `DoStackSnapshot` by `caller` from `from`.
fn dss(caller: &str, from: CallContext) -> CallSpec {
    CallSpec::snapshot(caller, from)
}

/// The `ThreadID` of the thread named `name`.
fn on(name: &str) -> Target {
    Target::Thread(name.into())
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
    let r = world(Platform::Unix)
        .runtime("detaching", true)
        .call(dss("main", PINVOKE).flags(6))
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_PROFILER_DETACHING");
}

#[test]
fn r01_never_unsupported_call_sequence_even_outside_callbacks() {
    let r = world(Platform::Unix).call(dss("main", PINVOKE)).build().run();
    assert_eq!(hr(&r.calls[0]), "S_OK");
}

#[test]
fn r02_runtime_not_started_is_unsafe_before_anything_else() {
    let r = world(Platform::Unix)
        .runtime("started", false)
        .runtime("gc_initialized", false)
        .call(dss("sampler", THREAD).flags(6).target(Target::Raw(1)))
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    assert!(r.faults.is_empty());
}

#[test]
fn r03_snapshot_flag_is_required_and_checked_before_the_flags() {
    let r = world(Platform::Unix)
        .runtime("event_mask", 0i64)
        .call(dss("main", PINVOKE).flags(2))
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_INCONSISTENT_WITH_FLAGS");
}

#[test]
fn r04_zero_is_the_caller_and_a_non_zero_id_is_not_validated() {
    let r = world(Platform::Unix)
        .call(dss("main", PINVOKE).target(Target::Zero))
        .call(dss("main", PINVOKE).target(on("self")))
        .call(dss("sampler", THREAD).target(Target::Raw(1)))
        .build()
        .run();
    assert_eq!(names(&r.calls[0]), names(&r.calls[1]));
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Mid", "App::Main", "0"]);
    assert_eq!(r.faults[0].kind, "bogus_thread_id");
    assert!(r.faults[0].fatal);
}

#[test]
fn r05_invalid_flags_are_rejected_before_the_thread_is_dereferenced() {
    for flags in [2, 4, 0x8000_0000, 3] {
        let r = world(Platform::Unix)
            .call(dss("sampler", THREAD).target(Target::Raw(1)).flags(flags))
            .build()
            .run();
        assert_eq!(hr(&r.calls[0]), "E_INVALIDARG", "flags {flags}");
        assert!(r.faults.is_empty());
    }
}

#[test]
fn r06_nothing_to_walk_is_success_without_callbacks() {
    let native = world(Platform::Unix)
        .call(dss("sampler", THREAD).target(Target::Zero))
        .build()
        .run();
    assert_eq!((hr(&native.calls[0]), names(&native.calls[0]).len()), ("S_OK", 0));
    let gc = world(Platform::Unix)
        .thread(ThreadSpec::new("gc", &[Frame::Call("native!run")]).set("gc_special", true))
        .call(dss("main", PINVOKE).target(on("gc")))
        .build()
        .run();
    assert_eq!((hr(&gc.calls[0]), names(&gc.calls[0]).len()), ("S_OK", 0));
    let early = world(Platform::Unix)
        .runtime("gc_initialized", false)
        .call(dss("main", PINVOKE))
        .build()
        .run();
    assert_eq!((hr(&early.calls[0]), names(&early.calls[0]).len()), ("S_OK", 0));
}

#[test]
fn r07_context_size_is_ignored_and_a_null_callback_only_crashes_when_a_frame_is_reached() {
    let r = world(Platform::Unix)
        .call(
            dss("main", CallContext::Callback(CallbackKind::ObjectAllocated))
                .seed(Seed::Context {
                    base: SeedBase::Zero,
                    overrides: vec![],
                })
                .context_size(16),
        )
        .call(
            dss("sampler", THREAD)
                .target(on("worker"))
                .callback(CallbackBehavior::Null),
        )
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(hr(&r.calls[1]), "E_NOTIMPL");
    assert!(r.faults.is_empty());
    let crash = world(Platform::Unix)
        .call(dss("main", PINVOKE).callback(CallbackBehavior::Null))
        .build()
        .run();
    assert_eq!(
        (crash.faults[0].kind.as_str(), crash.faults[0].fatal),
        ("null_callback", true)
    );
    let survive = world(Platform::Windows)
        .call(dss("main", PINVOKE).callback(CallbackBehavior::Null))
        .build()
        .run();
    assert_eq!(
        (hr(&survive.calls[0]), survive.faults[0].fatal),
        ("E_UNEXPECTED", false)
    );
}

#[test]
fn r08_the_hijack_lock_makes_a_nested_walk_of_the_same_thread_unsafe() {
    let nested = CallSpec::inner("DoStackSnapshot");
    let r = world(Platform::Unix)
        .call(dss("main", PINVOKE).nested(NestedAt::Frames(vec![1]), nested))
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "S_OK");
    assert_eq!(hr(&r.calls[0].nested[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    let held = world(Platform::Unix)
        .thread(ThreadSpec::new("held", &[Frame::Call("App::Main")]).set("hijack_lock_held", true))
        .call(dss("held", PINVOKE))
        .build()
        .run();
    assert_eq!(hr(&held.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
}

#[test]
fn r09_suspension_in_progress_refuses_managed_callers_only() {
    let r = world(Platform::Windows)
        .runtime("suspend_in_progress", true)
        .call(dss("main", PINVOKE).target(on("worker")))
        .call(dss("sampler", THREAD).target(on("worker")))
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    assert_eq!(hr(&r.calls[1]), "S_OK");
}

#[test]
fn r10_a_forbid_suspend_region_is_unsafe_even_for_the_thread_itself() {
    let r = world(Platform::Unix)
        .thread(ThreadSpec::new("busy", &[Frame::Call("App::Main")]).set("forbid_suspend", 2i64))
        .call(dss("busy", PINVOKE))
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
}

#[test]
fn r11_cross_thread_without_suspend_runtime() {
    let unix = world(Platform::Unix)
        .call(dss("sampler", THREAD).target(on("worker")))
        .build()
        .run();
    assert_eq!(hr(&unix.calls[0]), "E_NOTIMPL");
    let windows = world(Platform::Windows)
        .call(dss("sampler", THREAD).target(on("worker")))
        .build()
        .run();
    assert_eq!(hr(&windows.calls[0]), "S_OK");
    let events: Vec<&str> = windows.calls[0].events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(events.first(), Some(&"RuntimeThreadSuspended"));
    assert_eq!(events.last(), Some(&"RuntimeThreadResumed"));
    assert!(
        windows.calls[0].events.iter().all(|e| e.on == "sampler"),
        "R11.3: raised on the caller"
    );
    let fails = world(Platform::Windows)
        .thread(ThreadSpec::new("stuck", &[Frame::Call("App::Main")]).set("suspend_fails", true))
        .call(dss("sampler", THREAD).target(on("stuck")))
        .build()
        .run();
    assert_eq!(hr(&fails.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    // Refused after the suspension (R13): the profiler hears of both before the call returns.
    let refused = world(Platform::Windows)
        .thread(ThreadSpec::new("waiting", &[Frame::Call("App::Main")]).set("os_context", "in_kernel"))
        .call(dss("sampler", THREAD).target(on("waiting")))
        .build()
        .run();
    assert_eq!(hr(&refused.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    let events: Vec<&str> = refused.calls[0].events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(events, ["RuntimeThreadSuspended", "RuntimeThreadResumed"]);
    let dead = world(Platform::Windows)
        .call(CallSpec::event("thread_exit", "worker"))
        .call(dss("sampler", THREAD).target(on("worker")))
        .build()
        .run();
    assert_eq!(dead.faults[0].kind, "walk_of_destroyed_thread");
    assert_eq!(dead.calls[1].hresult, None, "a fatal error never returns");
}

/// A sampler that never takes the runtime's events (each seeded walk of a preemptive thread
/// notes a discarded seed) keeps at most `MAX_EVENTS` of them; the take says how many it lost.
#[test]
fn r12_discarded_seeds_noted_in_bounded_memory() {
    let s = world(Platform::Unix).build();
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
    let r = world(Platform::Unix)
        .call(dss("main", PINVOKE).seed(Seed::Context {
            base: SeedBase::Zero,
            overrides: vec![],
        }))
        .call(dss("main", PINVOKE).seed(Seed::Context {
            base: SeedBase::Zero,
            overrides: vec![(None, SeedValue::Raw(0x42))],
        }))
        .build()
        .run();
    for call in &r.calls {
        assert_eq!(hr(call), "S_OK");
        assert_eq!(names(call), ["App::Leaf", "App::Mid", "App::Main", "0"]);
        assert!(call.events.iter().any(|e| e.kind == "SeedDiscarded"));
    }
}

#[test]
fn r13_cooperative_cross_thread_targets_must_have_a_trustworthy_context() {
    for bad in [
        OsContext::DebuggerFilter,
        OsContext::GetContextFails,
        OsContext::InKernel,
        OsContext::ExceptionActive,
        OsContext::NoExceptionReporting,
    ] {
        let t = ThreadSpec::new("t", &[Frame::Call("App::Main")]).os_context(bad);
        let r = world(Platform::Windows)
            .thread(t)
            .call(dss("sampler", THREAD).target(on("t")))
            .build()
            .run();
        assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE", "{bad:?}");
    }
    let race = world(Platform::Windows)
        .thread(ThreadSpec::new("t", &[Frame::Call("App::Main")]).set("mode_race", true))
        .call(dss("sampler", THREAD).target(on("t")))
        .build()
        .run();
    assert_eq!(hr(&race.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE", "R13.3");
    let stale = world(Platform::Windows)
        .thread(
            ThreadSpec::new(
                "t",
                &[
                    Frame::Call("App::Leaf"),
                    Frame::Explicit(FrameKind::HelperMethod),
                    Frame::Call("App::Main"),
                ],
            )
            .os_context(OsContext::Stale),
        )
        .call(dss("sampler", THREAD).target(on("t")))
        .build()
        .run();
    assert_eq!(hr(&stale.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE", "R13.4");
    let unix = world(Platform::Unix)
        .call(
            dss(
                "main",
                CallContext::Callback(CallbackKind::GarbageCollectionStarted),
            )
            .target(on("worker")),
        )
        .build()
        .run();
    assert_eq!(hr(&unix.calls[0]), "E_NOTIMPL");
    let selfseed = world(Platform::Windows)
        .call(dss("sampler", THREAD).target(on("worker")))
        .build()
        .run();
    assert_eq!(
        names(&selfseed.calls[0]),
        ["App::Leaf", "App::Leaf", "App::Main", "0"],
        "R13.5: the walk starts at the real IP"
    );
}

#[test]
fn r14_the_seed_ip_must_be_managed_code() {
    let r = world(Platform::Unix)
        .call(
            dss("main", CallContext::Callback(CallbackKind::ObjectAllocated)).seed(Seed::Context {
                base: SeedBase::Frame("main".into(), 3),
                overrides: vec![],
            }),
        )
        .call(
            dss("main", CallContext::Callback(CallbackKind::ObjectAllocated)).seed(Seed::Context {
                base: SeedBase::Frame("main".into(), 1),
                overrides: vec![],
            }),
        )
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(names(&r.calls[1]), ["App::Mid", "App::Main", "0"]);
}

#[test]
fn r15_an_unseeded_walk_during_unwinding_is_unmanaged_ctx() {
    let t = ThreadSpec::new("t", &[Frame::Call("App::Main"), Frame::Call("host!main")])
        .exception(ExceptionState::Unwinding);
    let r = world(Platform::Unix)
        .thread(t)
        .call(dss("t", PINVOKE))
        .call(
            dss("t", CallContext::Callback(CallbackKind::ExceptionThrown)).seed(Seed::Context {
                base: SeedBase::Frame("t".into(), 0),
                overrides: vec![],
            }),
        )
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(hr(&r.calls[1]), "S_OK", "seeded: R15 does not apply");
}

#[test]
fn r16_an_inconsistent_exception_state_is_unsafe_seeded_or_not() {
    let t = ThreadSpec::new("t", &[Frame::Call("App::Main")]).exception(ExceptionState::Inconsistent);
    let r = world(Platform::Unix)
        .thread(t)
        .call(dss("t", PINVOKE))
        .call(
            dss("t", CallContext::Callback(CallbackKind::ObjectAllocated)).seed(Seed::Context {
                base: SeedBase::Frame("t".into(), 0),
                overrides: vec![],
            }),
        )
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
    assert_eq!(hr(&r.calls[1]), "CORPROF_E_STACKSNAPSHOT_UNSAFE");
}

#[test]
fn r17_walk_outcomes_map_to_hresults() {
    let empty = world(Platform::Unix)
        .thread(ThreadSpec::new("t", &[Frame::Call("IL_STUB")]))
        .call(dss("t", PINVOKE))
        .build()
        .run();
    assert_eq!(
        (hr(&empty.calls[0]), names(&empty.calls[0]).len()),
        ("S_OK", 0),
        "the walk stopped only at a frame without metadata"
    );
    let none = world(Platform::Unix)
        .thread(ThreadSpec::new("t", &[Frame::Call("native!run")]))
        .call(dss("t", CallContext::Callback(CallbackKind::ThreadDestroyed)))
        .build()
        .run();
    assert_eq!(hr(&none.calls[0]), "E_FAIL", "no frame at all: SWA_FAILED");
    let outside = world(Platform::Windows)
        .call(dss("sampler", THREAD).target(on("worker")).seed(Seed::Context {
            base: SeedBase::Frame("main".into(), 0),
            overrides: vec![],
        }))
        .build()
        .run();
    assert_eq!(
        (hr(&outside.calls[0]), names(&outside.calls[0]).len()),
        ("E_FAIL", 1)
    );
    let av = world(Platform::Windows)
        .call(dss("sampler", THREAD).target(on("worker")).seed(Seed::Context {
            base: SeedBase::Zero,
            overrides: vec![
                (None, SeedValue::Function("App::Main".into(), 0)),
                (Some(Register::Rsp), SeedValue::Raw(0x1000)),
            ],
        }))
        .build()
        .run();
    assert_eq!(hr(&av.calls[0]), "E_UNEXPECTED");
    assert_eq!(av.faults[0].kind, "access_violation");
}

#[test]
fn r17_a_walk_leaving_the_target_stack_fails_even_along_cached_links() {
    // Every default body returns from its first call at the same offset: `main` and `worker`
    // share the return sites of App::Leaf and App::Main, so once `main` was walked, worker's
    // frames are links the runtime knows.
    let s = world(Platform::Unix).build();
    let rt = s.runtime();
    let site = |thread: &str, function: &str| {
        let t = rt.thread(thread).unwrap();
        let i = rt.with_code(|code| {
            t.layout
                .calls
                .iter()
                .position(|c| code.function(c.function).name == function)
        });
        t.call_context(i.unwrap_or_else(|| panic!("{thread} has {function}")))
    };
    // App::Mid's frame of `main`, its RBP pointing into `worker`'s stack, where a chain of
    // links goes on.
    let mut seed = site("main", "App::Mid");
    seed.rbp = site("worker", "App::Leaf").rbp;
    let (warm, (hr, seen)) = with_runtime(
        &s,
        "main",
        CallContext::Callback(CallbackKind::ObjectAllocated),
        |rt| {
            let (warm, _) = walk(rt, ThreadId::NULL, 0, None);
            (warm, walk(rt, ThreadId::NULL, 0, Some(&seed)))
        },
    );
    assert_eq!(warm, HResult::S_OK);
    assert_eq!(
        (hr, seen.len()),
        (HResult::E_FAIL, 1),
        "the caller's RSP, RBP + 16, lies outside the target's stack"
    );
}

#[test]
fn r18_cleanup_resumes_the_target_and_releases_the_hijack_lock() {
    let s = world(Platform::Windows).build();
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
    let r = world(Platform::Windows)
        .call(CallSpec::api("SuspendRuntime", "sampler", THREAD))
        .call(dss("sampler", THREAD).target(on("worker")))
        .build()
        .run();
    assert_eq!(hr(&r.calls[1]), "S_OK");
    assert!(r.calls[1]
        .events
        .iter()
        .all(|e| e.kind != "RuntimeThreadSuspended"));
}

#[test]
fn r20_only_managed_frames_with_metadata_are_reported() {
    let t = ThreadSpec::new(
        "t",
        &[
            Frame::Call("App::Leaf"),
            Frame::Call("IL_STUB"),
            Frame::Call("App::Main"),
            Frame::Explicit(FrameKind::Gc),
            Frame::Call("host!main"),
        ],
    );
    let r = world(Platform::Unix)
        .thread(t)
        .call(dss("t", CallContext::Callback(CallbackKind::ObjectAllocated)))
        .build()
        .run();
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Main", "0"]);
}

#[test]
fn r21_one_marker_per_native_run_below_managed_code_and_none_on_top() {
    let t = ThreadSpec::new(
        "t",
        &[
            Frame::Repeat("native!run", 3),
            Frame::Explicit(FrameKind::InlinedCall),
            Frame::Call("App::Leaf"),
            Frame::Call("IL_STUB"),
            Frame::Repeat("native!run", 4),
            Frame::Explicit(FrameKind::InlinedCall),
            Frame::Call("App::Main"),
            Frame::Call("host!main"),
        ],
    );
    let r = world(Platform::Unix)
        .thread(t)
        .call(dss("t", THREAD))
        .build()
        .run();
    assert_eq!(
        names(&r.calls[0]),
        ["App::Leaf", "0", "App::Main", "0"],
        "a marker even after a skipped IL stub"
    );
}

#[test]
fn r22_r23_frames_come_leaf_first_with_the_leaf_ip_then_return_addresses() {
    let s = world(Platform::Windows).build();
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
    let s = world(Platform::Unix).build();
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
        // During its callback a record answers for its own function only.
        let other = seen[1].0;
        let mut answers = Vec::new();
        let mut cb = |f: &SnapshotFrame<'_>| {
            if answers.is_empty() {
                answers.push(rt.get_function_info2(f.func_id, Some(f.frame_info)).is_ok());
                answers.push(rt.get_function_info2(other, Some(f.frame_info)) == Err(HResult::E_INVALIDARG));
            }
            HResult::S_OK
        };
        rt.do_stack_snapshot(ThreadId::NULL, Some(&mut cb), 0, None, 0);
        assert_eq!(answers, [true, true]);
        // A copy kept after the walk is no record: the runtime would read a dead stack slot.
        let (f, _, info, _) = seen[0];
        assert_eq!(rt.get_function_info2(f, Some(&info)), Err(HResult::E_INVALIDARG));
        let faults = rt.take_faults();
        assert!(
            faults
                .iter()
                .any(|f| f.kind.as_str() == "stale_frame_info" && !f.fatal),
            "{faults:?}"
        );
    });
}

#[test]
fn r25_each_context_holds_that_frames_registers() {
    let s = world(Platform::Unix).build();
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
                // The default version's CONTEXT on Unix: .NET 8's, 3104 bytes (R44).
                assert_eq!(bytes.len(), 3104);
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
    for value in [
        HResult::S_FALSE,
        HResult::E_FAIL,
        HResult(0x12345),
        HResult(0x8013_1361),
    ] {
        let r = world(Platform::Unix)
            .call(dss("main", PINVOKE).callback(CallbackBehavior::Return { at: 2, value }))
            .build()
            .run();
        assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_ABORTED");
        assert_eq!(names(&r.calls[0]).len(), 3, "no callback after the aborting one");
    }
}

#[test]
fn r27_calls_from_the_callback_inherit_the_call_state() {
    let at = || NestedAt::Frames(vec![0]);
    let nested = || CallSpec::inner("GetFunctionFromIP2").set("ip", "frame");
    let thrown = CallContext::Callback(CallbackKind::ExceptionThrown);
    let r = world(Platform::Unix)
        .call(dss("main", PINVOKE).nested(at(), nested()))
        .call(dss("main", thrown).nested(at(), nested()))
        .call(CallSpec::api("SuspendRuntime", "sampler", THREAD))
        .call(dss("sampler", THREAD).target(on("worker")).nested(at(), nested()))
        .build()
        .run();
    assert_eq!(hr(&r.calls[0].nested[0]), "CORPROF_E_UNSUPPORTED_CALL_SEQUENCE");
    assert_eq!(hr(&r.calls[1].nested[0]), "S_OK");
    assert_eq!(hr(&r.calls[3].nested[0]), "S_OK");
}

#[test]
fn r28_a_funclet_is_reported_under_its_containing_method() {
    let t = ThreadSpec::new(
        "t",
        &[
            Frame::Call("App::Main"),
            Frame::Call("App::Leaf"),
            Frame::Call("App::Main"),
            Frame::Call("host!main"),
        ],
    )
    .exception(ExceptionState::UnwindingInManaged);
    let r = world(Platform::Unix)
        .thread(t)
        .call(dss("t", CallContext::Callback(CallbackKind::ExceptionThrown)))
        .build()
        .run();
    assert_eq!(names(&r.calls[0]), ["App::Main", "App::Leaf", "App::Main", "0"]);
}

#[test]
fn r28_after_a_second_pass_funclet_the_parent_is_skipped() {
    // Real CoreCLR 3.1: Run, CatchAt, Main, 0 inside a catch; Run, Filter, FilterAt, 0,
    // Thrower, FilterAt, Main, 0 inside a filter (conformance/scenarios/sync.toml).
    let t = |funclet: Funclet| {
        ThreadSpec::new(
            "t",
            &[
                Frame::Call("App::Leaf"),
                Frame::Funclet("App::Mid", funclet),
                Frame::Call("native!run"),
                Frame::Explicit(FrameKind::HelperMethod),
                Frame::Call("App::Leaf"),
                Frame::Call("App::Mid"),
                Frame::Call("App::Main"),
                Frame::Call("host!main"),
            ],
        )
    };
    for (funclet, expected) in [
        (Funclet::Catch, vec!["App::Leaf", "App::Mid", "App::Main", "0"]),
        (Funclet::Finally, vec!["App::Leaf", "App::Mid", "App::Main", "0"]),
        (
            Funclet::Filter,
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
        let r = world(Platform::Unix)
            .thread(t(funclet))
            .call(dss("t", PINVOKE))
            .build()
            .run();
        assert_eq!(names(&r.calls[0]), expected, "{funclet:?}");
    }
}

#[test]
fn r29_a_pending_hijack_is_removed_before_the_walk() {
    let s = world(Platform::Windows)
        .thread(
            ThreadSpec::new(
                "h",
                &[
                    Frame::Call("App::Leaf"),
                    Frame::Call("App::Main"),
                    Frame::Call("host!main"),
                ],
            )
            .set("hijacked", true),
        )
        .build();
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
    let r = world(Platform::Unix)
        .call(dss(
            "main",
            CallContext::Callback(CallbackKind::GarbageCollectionStarted),
        ))
        .build()
        .run();
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Mid", "App::Main", "0"]);
}

#[test]
fn r31_the_seed_is_copied_whole_and_never_written() {
    let s = world(Platform::Unix).build();
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
    let from = CallContext::Callback(CallbackKind::ObjectAllocated);
    let first = || dss("main", from).flags(snapshot::REGISTER_CONTEXT);
    let seeded = |k: usize| {
        dss("main", from).seed(Seed::Context {
            base: SeedBase::Callback { call: 1, callback: k },
            overrides: vec![],
        })
    };
    let r = world(Platform::Unix)
        .calls([first(), seeded(1), seeded(3), seeded(9).expect(HResult::S_OK)])
        .build()
        .run();
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
    // A seed naming a call but no callback: not expressible as a `Seed`, so written as is.
    let call_only = dss("main", from).set(
        "seed",
        Value::Table([("call".to_string(), Value::from(1u32))].into()),
    );
    for (calls, why) in [
        (vec![seeded(0)], "is not an earlier DoStackSnapshot"),
        (vec![dss("main", from), seeded(0)], "its callbacks get no CONTEXT"),
        (vec![first(), call_only], "`call` and `callback`"),
    ] {
        let text = world(Platform::Unix).calls(calls).text();
        let e = Scenario::parse("inline.toml", &text).unwrap_err().to_string();
        assert!(e.contains(why), "{e}");
    }
}

#[test]
fn r32_an_unseeded_walk_starts_at_the_most_recent_frame() {
    let t = ThreadSpec::new(
        "t",
        &[
            Frame::Call("native!run"),
            Frame::Call("App::Leaf"),
            Frame::Call("App::Mid"),
            Frame::Call("native!run"),
            Frame::Explicit(FrameKind::InlinedCall),
            Frame::Call("App::Main"),
            Frame::Call("host!main"),
        ],
    )
    .mode(Mode::Cooperative);
    let r = world(Platform::Unix)
        .thread(t)
        .call(dss("t", THREAD))
        .call(dss("t", THREAD).seed(Seed::Context {
            base: SeedBase::Frame("t".into(), 1),
            overrides: vec![],
        }))
        .build()
        .run();
    assert_eq!(names(&r.calls[0]), ["App::Main", "0"]);
    assert_eq!(
        names(&r.calls[1]),
        ["App::Leaf", "App::Mid", "0", "App::Main", "0"]
    );
}

#[test]
fn r33_a_runtime_helper_on_top_needs_a_seed() {
    let t = ThreadSpec::new(
        "t",
        &[
            Frame::Call("native!run"),
            Frame::Call("App::Leaf"),
            Frame::Call("App::Main"),
            Frame::Call("host!main"),
        ],
    )
    .mode(Mode::Cooperative);
    let r = world(Platform::Windows)
        .thread(t)
        .call(dss("sampler", THREAD).target(on("t")))
        .call(dss("sampler", THREAD).target(on("t")).seed(Seed::Context {
            base: SeedBase::Frame("t".into(), 1),
            overrides: vec![],
        }))
        .build()
        .run();
    assert_eq!(hr(&r.calls[0]), "CORPROF_E_STACKSNAPSHOT_UNMANAGED_CTX");
    assert_eq!(names(&r.calls[1]), ["App::Leaf", "App::Main", "0"]);
}

#[test]
fn r34_only_the_seed_ip_is_checked() {
    let r = world(Platform::Unix)
        .call(
            dss("main", CallContext::Callback(CallbackKind::ObjectAllocated)).seed(Seed::Context {
                base: SeedBase::Zero,
                overrides: vec![
                    (None, SeedValue::Function("IL_STUB".into(), 4)),
                    (Some(Register::Rsp), SeedValue::Raw(0x20)),
                ],
            }),
        )
        .call(
            dss("main", CallContext::Callback(CallbackKind::ObjectAllocated)).seed(Seed::Context {
                base: SeedBase::Frame("main".into(), 0),
                overrides: vec![(Some(Register::Rsp), SeedValue::Raw(0x7ffdfff00000))],
            }),
        )
        .build()
        .run();
    assert_eq!(
        r.faults[0].kind, "access_violation",
        "an IL-stub IP passes; the unmapped RSP then faults"
    );
    assert!(r.faults[0].fatal, "not caught on Unix");
}

#[test]
fn r34_a_method_past_its_frame_pointer_setup_is_unwound_from_rbp() {
    // The leaf of `main` stops in App::Leaf's body, where `push rbp; mov rbp, rsp` has run:
    // the unwind info's frame register, not RSP, locates the frame.
    let seeded = |overrides: Vec<(Option<Register>, SeedValue)>| {
        dss("main", CallContext::Callback(CallbackKind::ObjectAllocated)).seed(Seed::Context {
            base: SeedBase::Frame("main".into(), 0),
            overrides,
        })
    };
    let r = world(Platform::Unix)
        .call(seeded(vec![]))
        .call(seeded(vec![(Some(Register::Rsp), SeedValue::Raw(0x10))]))
        .call(seeded(vec![(Some(Register::Rbp), SeedValue::Raw(0x1000))]))
        .build()
        .run();
    let expected = ["App::Leaf", "App::Mid", "App::Main", "0"];
    assert_eq!(names(&r.calls[0]), expected);
    assert_eq!(names(&r.calls[1]), expected, "a bogus RSP is not read");
    assert_eq!(r.faults.len(), 1);
    assert_eq!(
        (r.faults[0].kind.as_str(), r.faults[0].call),
        ("access_violation", 3),
        "a bogus RBP is: the return address at RBP + 8"
    );
    assert!(r.faults[0].message.contains("0x1008"), "{}", r.faults[0].message);
}

#[test]
fn r35_an_enter_hook_walk_begins_at_the_slow_path_frame() {
    let r = world(Platform::Unix)
        .call(dss("main", CallContext::Callback(CallbackKind::FunctionEnter)))
        .build()
        .run();
    assert_eq!(names(&r.calls[0]), ["App::Leaf", "App::Mid", "App::Main", "0"]);
}

#[test]
fn threads_are_found_by_thread_id() {
    let rt = world(Platform::Unix).build().runtime();
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
    let rt = world(Platform::Unix).build().runtime();
    let mut ran = false;
    let result = rt.on_thread("smapler", CallContext::Thread, |_| ran = true);
    assert_eq!(result, Err(sim_clr::UnknownThread("smapler".into())));
    assert!(!ran);
    assert_eq!(result.unwrap_err().to_string(), "no thread named `smapler`");
}
