//! A native profiler written in C (`tests/c/walker.c`), built with the system C compiler and
//! hosted in the simulated runtime: it walks with `DoStackSnapshot` and names its frames
//! through metadata, as it would inside CoreCLR. Also: misuse of the COM surface gets the
//! documented HRESULT and never crashes the host.

use corprof::com::*;
use corprof::HResult;
use sim_clr::scenario::Scenario;
use sim_clr::{CallbackKind, Runtime};
use simclr_host::{Ending, HostError, Hosted};
use std::ffi::{c_char, c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

// Allocations by code on simulated threads take the process heap lock, as in `simclr explore`.
#[global_allocator]
static ALLOCATOR: sim_clr::process::HeapLockAllocator<std::alloc::System> =
    sim_clr::process::HeapLockAllocator(std::alloc::System);

/// The CLSID `walker.c` answers to.
const CLSID: Guid = Guid::new(
    0x1b9e_9f2c,
    0x5e3d,
    0x4c55,
    [0x9a, 0x11, 0x2f, 0x60, 0x7d, 0x31, 0x42, 0x0b],
);

const SCENARIO: &str = r#"
platform = "unix"
[runtime]
version = "3.1"
[[code]]
name = "Shop.Cart::Add"
kind = "jit"
module = "/app/Shop.dll"
[[code]]
name = "Program::Main"
kind = "jit"
module = "/app/App.dll"
[[code]]
name = "libc.so.6!qsort"
kind = "native"
[[code]]
name = "Program::Compare"
kind = "jit"
module = "/app/App.dll"
[[code]]
name = "libcoreclr.so!UMThunkStub"
kind = "helper"
[[code]]
name = "dotnet!main"
kind = "native"
# Main calls qsort through P/Invoke; qsort calls Compare back through a reverse P/Invoke.
[[threads]]
name = "main"
frames = [
  { fn = "Shop.Cart::Add" },
  { fn = "Program::Compare" },
  { frame = "UMThkCallFrame" },
  { fn = "libcoreclr.so!UMThunkStub" },
  { fn = "libc.so.6!qsort" },
  { frame = "InlinedCallFrame" },
  { fn = "Program::Main" },
  { fn = "dotnet!main" },
]
"#;

/// Builds `tests/c/<name>.c` into a shared library.
fn build(name: &str) -> PathBuf {
    build_file(&format!("{name}.c"))
}

/// Export `name` of `library`, of type `F`.
fn export<F: Copy>(library: &simclr_host::Library, name: &str) -> F {
    let f = library.symbol(name).expect("the export");
    // SAFETY: the caller names the export's C signature.
    unsafe { std::mem::transmute_copy(&f) }
}

/// Builds `tests/c/<file>` (C, or C++ for a `.cpp` file) into a shared library.
fn build_file(file: &str) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c").join(file);
    fixtures::c_library::build(
        &source,
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-profilers"),
    )
}

/// The CLSID of class `n` of test profiler `group` of `tests/c` (`…4455 01`: sampler.c's first).
const fn test_class(group: u8, n: u8) -> Guid {
    Guid::new(
        0x2c0f_6a1e,
        0x7b3d,
        0x4e21,
        [0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, group, n],
    )
}

fn walker() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| build("walker"))
}

/// The library's globals are shared by every load of it: one test at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn runtime() -> Arc<Runtime> {
    Arc::new(Scenario::parse("hosting.toml", SCENARIO).unwrap().runtime())
}

fn text_of(hosted: &Hosted, symbol: &str) -> String {
    let f = hosted.symbol(symbol).expect("the export");
    // SAFETY: the export is `const char *(void)`.
    let f: extern "C" fn() -> *const c_char = unsafe { std::mem::transmute(f) };
    // SAFETY: it returns a NUL-terminated static buffer.
    unsafe { CStr::from_ptr(f()) }.to_string_lossy().into_owned()
}

#[test]
fn a_c_profiler_walks_and_names_its_frames_through_metadata() {
    let _one = serial();
    let rt = runtime();
    let hosted = Hosted::load(walker(), CLSID, rt.clone()).expect("hosted");
    assert_eq!(
        rt.raise("main", CallbackKind::ObjectAllocated),
        Some(HResult::S_OK)
    );
    assert_eq!(
        text_of(&hosted, "walker_result"),
        "Shop.Cart::Add\nProgram::Compare\n<native>\nProgram::Main\n<native>\nmodule /app/Shop.dll\nmetadata v4.0.30319\nassembly Shop\n"
    );
    assert!(hosted.misuse().is_empty(), "{:?}", hosted.misuse());
    let shutdowns = |h: &Hosted| {
        let f = h.symbol("walker_shutdowns").unwrap();
        // SAFETY: the export is `int (void)`.
        let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(f) };
        f()
    };
    let before = shutdowns(&hosted);
    let library = hosted.symbol("walker_shutdowns").unwrap();
    let releases: extern "C" fn() -> i32 = {
        let f = hosted.symbol("profiler_releases").expect("the export");
        // SAFETY: the export is `int (void)`.
        unsafe { std::mem::transmute(f) }
    };
    let released = releases();
    drop(hosted);
    // SAFETY: the library stays loaded; the export is `int (void)`.
    let after: extern "C" fn() -> i32 = unsafe { std::mem::transmute(library) };
    assert_eq!(
        after(),
        before + 1,
        "Shutdown is called once when the host lets go"
    );
    assert_eq!(
        releases(),
        released + 1,
        "after Shutdown CoreCLR 3.1 releases the profiler once"
    );
    // No callback reaches an unloaded profiler.
    assert_eq!(rt.raise("main", CallbackKind::ObjectAllocated), None);
    // A profiler abandoned, as by a process that died, gets no Shutdown.
    let rt = runtime();
    Hosted::load(walker(), CLSID, rt.clone())
        .expect("hosted")
        .abandon();
    assert_eq!(after(), before + 1, "no Shutdown for an abandoned profiler");
    assert_eq!(rt.raise("main", CallbackKind::ObjectAllocated), None);
}

#[test]
fn a_library_that_refuses_or_lacks_the_class_is_a_clear_error() {
    let _one = serial();
    let other = Guid::new(1, 2, 3, [4; 8]);
    assert_eq!(
        Hosted::load(walker(), other, runtime()).err(),
        Some(HostError::ClassRefused(HResult::CLASS_E_CLASSNOTAVAILABLE))
    );
    let missing = Hosted::load(Path::new("/nonexistent/libprofiler.so"), CLSID, runtime()).err();
    assert!(matches!(missing, Some(HostError::Load { .. })), "{missing:?}");
    // A shared library without DllGetClassObject: the C library itself.
    let libc = Path::new("libc.so.6");
    let none = Hosted::load(libc, CLSID, runtime()).err();
    assert_eq!(none, Some(HostError::NoEntryPoint(libc.to_path_buf())));
    assert!(none.unwrap().to_string().contains("exports no DllGetClassObject"));
}

/// The `ICorProfilerInfo10` vtable of `info`.
fn vtbl<'a>(info: *mut c_void) -> &'a ICorProfilerInfo10Vtbl {
    // SAFETY: a COM object starts with its vtable pointer.
    unsafe { &**(info as *const *const ICorProfilerInfo10Vtbl) }
}

fn v1(info: *mut c_void) -> &'static ICorProfilerInfoVtbl {
    &vtbl(info).base.base.base.base.base.base.base.base.base
}

#[test]
fn misuse_of_the_com_surface_gets_the_documented_hresult() {
    let _one = serial();
    let hosted = Hosted::load(walker(), CLSID, runtime()).expect("hosted");
    let info = hosted.info();
    let unknown = &v1(info).base;
    let hr = |h: HResult| h.0 as HRESULT;
    // SAFETY: `info` is live while `hosted` is; each call passes what its slot declares.
    unsafe {
        // NULL out-pointers.
        assert_eq!(
            (unknown.QueryInterface)(info, &IID_ICORPROFILERINFO, std::ptr::null_mut()),
            hr(HResult::E_POINTER)
        );
        assert_eq!(
            (v1(info).GetEventMask)(info, std::ptr::null_mut()),
            hr(HResult::E_INVALIDARG)
        );
        assert_eq!(
            (v1(info).GetCurrentThreadID)(info, std::ptr::null_mut()),
            hr(HResult::CORPROF_E_NOT_MANAGED_THREAD)
        );
        assert_eq!(
            (v1(info).GetModuleMetaData)(info, 0, 0, &IID_IMETADATAIMPORT, std::ptr::null_mut()),
            hr(HResult::E_INVALIDARG)
        );
        // Unknown IIDs.
        let mut out = std::ptr::dangling_mut::<c_void>();
        assert_eq!(
            (unknown.QueryInterface)(info, &IID_ICLASSFACTORY, &mut out),
            hr(HResult::E_NOINTERFACE)
        );
        assert!(out.is_null());
        // A method the simulator does not model.
        assert_eq!((v1(info).ForceGC)(info), hr(HResult::E_NOTIMPL));
        // Unbalanced Release: noted, never a crash or a double free.
        for _ in 0..5 {
            (unknown.Release)(info);
        }
        assert!(hosted
            .misuse()
            .iter()
            .any(|m| m.contains("Release without a matching reference")));
        // Calls after detach: the C profiler does not implement ICorProfilerCallback3.
        let i3 = &vtbl(info).base.base.base.base.base.base.base;
        assert_eq!(
            (i3.RequestProfilerDetach)(info, 10),
            hr(HResult::CORPROF_E_CALLBACK3_REQUIRED)
        );
    }
    // With detaching set as a runtime would after a successful request, every call fails.
    let detaching = Scenario::parse(
        "detaching.toml",
        &SCENARIO.replace("[runtime]\n", "[runtime]\ndetaching = true\n"),
    )
    .unwrap()
    .runtime();
    drop(hosted);
    let hosted = Hosted::load(walker(), CLSID, Arc::new(detaching));
    assert_eq!(
        hosted.err(),
        Some(HostError::InitializeFailed(HResult::CORPROF_E_PROFILER_DETACHING))
    );
}

#[test]
fn a_runtime_whose_profiler_attached_after_startup_cannot_host_a_library() {
    let _one = serial();
    let attached = Scenario::parse(
        "attached.toml",
        &SCENARIO.replace("[runtime]\n", "[runtime]\nattached = true\n"),
    )
    .unwrap()
    .runtime();
    let hosted = Hosted::load(walker(), CLSID, Arc::new(attached));
    assert_eq!(hosted.err(), Some(HostError::AttachAfterStartup));
}

#[test]
fn host_steps_drive_the_library_until_the_simulated_process_dies() {
    let _one = serial();
    let steps = r#"
[host]
[[host.steps]]
thread = "main"
raise = "ObjectAllocated"
class = "Shop.Cart"
[[host.steps]]
thread = "main"
call = "walker_note"
arg = "noted"
[[host.steps]]
thread = "main"
call = "walker_threads"
[[host.steps]]
thread = "main"
call = "walker_null_walk"
[[host.steps]]
thread = "main"
call = "walker_note"
arg = "after death"
"#;
    let scenario = Scenario::parse("drive.toml", &format!("{SCENARIO}{steps}")).unwrap();
    let rt = Arc::new(scenario.runtime());
    let hosted = Hosted::load(walker(), CLSID, rt).expect("hosted");
    let ending = hosted.drive(&scenario.host).unwrap();
    assert!(
        matches!(&ending, Ending::Crashed(why) if why.contains("null_callback")),
        "{ending:?}"
    );
    let text = text_of(&hosted, "walker_result");
    assert!(text.starts_with("Shop.Cart::Add\n"), "{text}");
    // The step after the crash never ran. (The library's own line after its fatal call did:
    // without an `on_fatal` hook the call returns; `simclr run --profiler` exits there.)
    assert!(
        text.contains("noted\n") && !text.contains("after death"),
        "{text}"
    );
    // The P/Invoke caller is thread main; a thread the library starts is unknown to the
    // runtime (CORPROF_E_NOT_MANAGED_THREAD).
    assert!(
        text.contains("caller 0x00000000, own thread 0x80131355\n"),
        "{text}"
    );

    // Typed arguments, a returned value checked, and time passing for the library's own
    // thread.
    let typed = r#"
[host]
[[host.steps]]
thread = "main"
call = "walker_sum"
args = [40, "abc", true]
expect = 44
[[host.steps]]
thread = "main"
call = "walker_tick_later"
[[host.steps]]
thread = "main"
sleep_ms = 100
"#;
    // (A process of its own: the one above is dead.)
    let scenario = Scenario::parse("typed.toml", &format!("{SCENARIO}{typed}")).unwrap();
    let alive = Hosted::load(walker(), CLSID, Arc::new(scenario.runtime())).expect("hosted");
    assert_eq!(alive.drive(&scenario.host), Ok(Ending::Completed));
    assert!(text_of(&alive, "walker_result").contains("ticked\n"));
    let wrong = typed.replace("expect = 44", "expect = 45");
    let scenario = Scenario::parse("typed.toml", &format!("{SCENARIO}{wrong}")).unwrap();
    // The step's table starts three lines after the scenario's own text (`typed` opens with
    // an empty line).
    let line = SCENARIO.lines().count() + 3;
    assert_eq!(
        alive.drive(&scenario.host),
        Ok(Ending::Unexpected(format!(
            "line {line}: `walker_sum` returned 44, the step expects 45"
        )))
    );

    let missing = Scenario::parse(
        "missing.toml",
        &format!("{SCENARIO}[host]\n[[host.steps]]\nthread = \"main\"\ncall = \"nope\"\n"),
    )
    .unwrap();
    // The step's table starts two lines after the scenario's own text.
    let line = SCENARIO.lines().count() + 2;
    assert_eq!(
        hosted.drive(&missing.host),
        Err(format!("line {line}: the library exports no `nope`"))
    );
}

#[test]
fn a_frame_info_kept_after_its_walk_is_a_fault() {
    let _one = serial();
    let steps = "[host]\n[[host.steps]]\nthread = \"main\"\ncall = \"walker_stale_frame_info\"\n";
    let scenario = Scenario::parse("stale.toml", &format!("{SCENARIO}{steps}")).unwrap();
    let rt = Arc::new(scenario.runtime());
    let hosted = Hosted::load(walker(), CLSID, rt.clone()).expect("hosted");
    hosted.drive(&scenario.host).unwrap();
    // The call fails as the runtime's read of the dead slot most often makes it fail, and the
    // use is the profiler's fault.
    let text = text_of(&hosted, "walker_result");
    assert!(text.contains("stale frame info 0x80070057"), "{text}");
    let faults = rt.take_faults();
    assert_eq!(faults.len(), 1, "{faults:?}");
    assert_eq!(faults[0].kind.as_str(), "stale_frame_info");
    assert!(!faults[0].fatal);
}

/// Native code's blocking calls on simulated threads (`tests/c/blocking.c`).
mod blocking {
    use super::{build, build_file, export};
    use sim_clr::process::schedule::{Random, Rng};
    use sim_clr::process::{Process, Strategy};
    use sim_clr::scenario::Scenario;
    use simclr_host::Library;
    use std::ffi::{c_char, c_int, CStr};
    use std::sync::{Arc, OnceLock};

    const THREADS: &str = r#"
platform = "unix"
[[code]]
name = "libblocking.so!work"
kind = "native"
[[threads]]
name = "one"
kind = "native"
frames = [{ fn = "libblocking.so!work" }]
[[threads]]
name = "two"
kind = "native"
frames = [{ fn = "libblocking.so!work" }]
"#;

    fn library() -> &'static Library {
        static LIBRARY: OnceLock<Library> = OnceLock::new();
        LIBRARY.get_or_init(|| Library::open(&build("blocking")).expect("libblocking.so loads"))
    }

    /// A process whose two native threads `one` and `two` run `bodies`.
    fn process(bodies: [Arc<dyn Fn() + Send + Sync>; 2]) -> Process {
        let mut p = Process::new(Scenario::parse("blocking.toml", THREADS).unwrap());
        for (thread, body) in ["one", "two"].into_iter().zip(bodies) {
            p.thread_body(thread, Arc::new(move |_, _| body())).unwrap();
        }
        p
    }

    fn take_both(order: &'static CStr) -> Arc<dyn Fn() + Send + Sync> {
        let f: extern "C-unwind" fn(*const c_char) = export(library(), "take_both");
        Arc::new(move || f(order.as_ptr()))
    }

    #[test]
    fn pthread_mutexes_taken_in_opposite_orders_deadlock_in_the_simulation() {
        let opposite = process([take_both(c"12"), take_both(c"21")]);
        let report = opposite.explore(Strategy::Dfs(2), 1_000, 0, |_, _| {});
        // Each thread sleeps holding its first mutex, so the other always takes its own.
        assert_eq!(
            report.outcomes.keys().collect::<Vec<_>>(),
            ["deadlock"],
            "{:?}",
            report.outcomes
        );
        let failure = report.first_failure.expect("a deadlocking schedule");
        assert!(
            failure
                .fault
                .cycle
                .iter()
                .all(|l| l.waits_for.starts_with("lock pthread_mutex 0x")),
            "{:?}",
            failure.fault
        );
        let same = process([take_both(c"12"), take_both(c"12")]);
        let report = same.explore(Strategy::Dfs(2), 1_000, 0, |_, _| {});
        assert_eq!(
            report.outcomes.keys().collect::<Vec<_>>(),
            ["ok"],
            "{:?}",
            report.outcomes
        );
        // Off a simulated thread the calls are the C library's: real mutexes, real sleeps.
        take_both(c"21")();
    }

    #[test]
    fn a_try_lock_sees_the_simulated_holder_and_sleeps_pass_in_virtual_time() {
        let hold: extern "C-unwind" fn() = export(library(), "hold_first");
        let free: extern "C-unwind" fn() -> c_int = export(library(), "first_is_free");
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let p = process([
            Arc::new(move || hold()),
            Arc::new(move || s.lock().unwrap().push(free())),
        ]);
        let report = p.explore(Strategy::Dfs(2), 1_000, 0, |_, _| {});
        assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"]);
        let seen = seen.lock().unwrap();
        assert!(seen.contains(&0) && seen.contains(&1), "{seen:?}");
        let nap: extern "C-unwind" fn() = export(library(), "nap");
        let idle: extern "C-unwind" fn() -> c_int = export(library(), "first_is_free");
        let p = process([Arc::new(move || nap()), Arc::new(move || assert_eq!(idle(), 1))]);
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "ok");
        assert!(run.time_us >= 3_500_000, "{} µs of virtual time", run.time_us);
    }

    /// The read-write lock, semaphore and once control of `libblocking.so`: one test at a time.
    fn reset() -> std::sync::MutexGuard<'static, ()> {
        static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let reset: extern "C-unwind" fn() = export(library(), "reset");
        reset();
        guard
    }

    /// The outcomes of `runs` runs (random schedules), each from the library's initial state.
    fn outcomes(p: &Process, runs: u64) -> std::collections::BTreeSet<String> {
        (0..runs)
            .map(|seed| {
                let _one = reset();
                p.run_untraced(&mut Random(Rng::new(seed))).unwrap().outcome
            })
            .collect()
    }

    #[test]
    fn read_write_locks_let_readers_share_and_writers_wait_in_the_simulation() {
        let read: extern "C-unwind" fn() = export(library(), "read_until_posted");
        let post: extern "C-unwind" fn(c_int) = export(library(), "lock_then_post");
        // Two readers at once: the first holds its read lock until the second posts.
        let readers = process([Arc::new(move || read()), Arc::new(move || post(0))]);
        assert_eq!(outcomes(&readers, 60), ["ok".to_string()].into());
        // A writer cannot take the lock a reader holds until it posts: a hang in the runs
        // where the reader is first, never a real block.
        let writer = process([Arc::new(move || read()), Arc::new(move || post(1))]);
        assert_eq!(
            outcomes(&writer, 60),
            ["hang".to_string(), "ok".to_string()].into()
        );
    }

    #[test]
    fn pthread_once_runs_its_routine_once_and_makes_the_others_wait() {
        let call: extern "C-unwind" fn() = export(library(), "call_init_once");
        let runs: extern "C-unwind" fn() -> c_int = export(library(), "init_runs_seen");
        let early: extern "C-unwind" fn() -> c_int = export(library(), "returned_too_early");
        let p = process([Arc::new(move || call()), Arc::new(move || call())]);
        for seed in 0..40 {
            let _one = reset();
            let run = p.run_untraced(&mut Random(Rng::new(seed))).unwrap();
            assert_eq!(run.outcome, "ok");
            assert_eq!((runs(), early()), (1, 0), "seed {seed}");
        }
    }

    /// The cycle of the first run of `p` (random schedules, each from the library's initial
    /// state) that deadlocks, each link as `(thread, waits for, held by)`.
    fn first_cycle(p: &Process) -> Vec<(String, String, String)> {
        let cycle = (0..200).find_map(|seed| {
            let _one = reset();
            let run = p.run_untraced(&mut Random(Rng::new(seed))).unwrap();
            assert!(["ok", "deadlock"].contains(&run.outcome.as_str()), "{run:?}");
            run.fault.filter(|f| f.kind == "deadlock")
        });
        (cycle.expect("a deadlock").cycle.into_iter())
            .map(|l| (l.thread, l.waits_for, l.held_by))
            .collect()
    }

    #[test]
    fn a_once_routine_in_progress_and_a_taken_semaphore_have_holders_so_cycles_close() {
        let once: extern "C-unwind" fn() = export(library(), "once_taking_gate");
        let gate_once: extern "C-unwind" fn() = export(library(), "gate_then_once");
        let p = process([Arc::new(move || once()), Arc::new(move || gate_once())]);
        let cycle = first_cycle(&p);
        assert_eq!(cycle.len(), 2, "{cycle:?}");
        assert!(
            cycle
                .iter()
                .any(|(t, what, by)| t == "two" && what.starts_with("pthread_once ") && by == "one"),
            "{cycle:?}"
        );
        assert!(
            cycle
                .iter()
                .any(|(t, what, by)| t == "one" && what.starts_with("lock pthread_mutex ") && by == "two"),
            "{cycle:?}"
        );
        let sem_gate: extern "C-unwind" fn() = export(library(), "semaphore_then_gate");
        let gate_sem: extern "C-unwind" fn() = export(library(), "gate_then_semaphore");
        let p = process([Arc::new(move || sem_gate()), Arc::new(move || gate_sem())]);
        let cycle = first_cycle(&p);
        assert!(
            cycle
                .iter()
                .any(|(t, what, by)| t == "two" && what.starts_with("sem ") && by == "one"),
            "{cycle:?}"
        );
    }

    #[test]
    fn clock_nanosleep_poll_gettimeofday_and_time_are_virtual() {
        let nap: extern "C-unwind" fn() -> std::ffi::c_long = export(library(), "nap_with_clocks");
        let seen = Arc::new(std::sync::Mutex::new(0));
        let s = seen.clone();
        let p = process([Arc::new(move || *s.lock().unwrap() = nap()), Arc::new(|| {})]);
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "ok");
        assert_eq!(*seen.lock().unwrap(), 3_000, "milliseconds gettimeofday saw pass");
        assert!(run.time_us >= 3_000_000, "{} µs of virtual time", run.time_us);
    }

    /// `libcxx_time.so`, built and loaded once per test binary.
    fn cxx() -> &'static Library {
        static CXX: OnceLock<Library> = OnceLock::new();
        CXX.get_or_init(|| Library::open(&build_file("cxx_time.cpp")).expect("loads"))
    }

    #[test]
    fn a_std_thread_started_by_the_shared_cxx_runtime_is_one_of_the_process_threads() {
        let spawn: extern "C-unwind" fn() -> c_int = export(cxx(), "thread_sleeps_and_joins");
        let text = format!(
            "{THREADS}[[threads]]\nname = \"helper\"\nkind = \"native\"\nstart = \"profiler\"\nframes = [{{ fn = \"libblocking.so!work\" }}]\n"
        );
        let mut p = Process::new(Scenario::parse("blocking.toml", &text).unwrap());
        let seen = Arc::new(std::sync::Mutex::new(0));
        let s = seen.clone();
        p.thread_body("one", Arc::new(move |_, _| *s.lock().unwrap() = spawn()))
            .unwrap();
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "ok", "{:?}", run.fault);
        assert_eq!(*seen.lock().unwrap(), 1);
        assert!(
            run.trace.iter().any(|e| e.thread == "helper"),
            "std::thread ran as the declared thread `helper`"
        );
        assert!(
            run.time_us >= 3_000,
            "its sleep passed in virtual time: {} µs",
            run.time_us
        );
    }

    #[test]
    fn cxx_clocks_and_sleeps_in_the_standard_library_are_virtual_on_simulated_threads() {
        let steady: extern "C-unwind" fn() -> i64 = export(cxx(), "steady_ms");
        let sleep: extern "C-unwind" fn(i32) = export(cxx(), "sleep_for_ms");
        let elapsed = Arc::new(std::sync::Mutex::new(None));
        let e = elapsed.clone();
        let p = process([
            Arc::new(move || {
                let before = steady();
                sleep(2500);
                *e.lock().unwrap() = Some(steady() - before);
            }),
            Arc::new(|| {}),
        ]);
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "ok");
        assert!(run.time_us >= 2_500_000, "{} µs of virtual time", run.time_us);
        let elapsed = elapsed.lock().unwrap().expect("the body ran");
        assert!(
            (2500..2600).contains(&elapsed),
            "{elapsed} ms on the steady clock"
        );
    }

    #[test]
    fn cxx_condition_variables_wake_on_notify_and_time_out_in_virtual_time() {
        let wait_for: extern "C-unwind" fn(i32) -> i32 = export(cxx(), "wait_for_flag");
        let wait: extern "C-unwind" fn() = export(cxx(), "wait_flag");
        let set: extern "C-unwind" fn(i32) = export(cxx(), "set_flag");
        let sleep: extern "C-unwind" fn(i32) = export(cxx(), "sleep_for_ms");
        // Nobody sets it: a wait without a deadline is a hang the run reports (its thread is
        // unwound through the C++ frames, whose destructors unlock the mutex), and the timed
        // wait times out after 2 s of virtual time.
        set(0);
        let p = process([Arc::new(move || wait()), Arc::new(|| {})]);
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "hang");
        let fault = run.fault.unwrap();
        // Named by its symbol: `static std::condition_variable flag_changed`.
        let waits =
            |l: &sim_clr::process::CycleLink| l.waits_for == "condition variable pthread_cond flag_changed";
        assert!(fault.cycle.iter().any(waits), "{fault:?}");
        let p = process([Arc::new(move || assert_eq!(wait_for(2000), 0)), Arc::new(|| {})]);
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "ok", "{:?}", run.fault);
        assert!(run.time_us >= 2_000_000, "{} µs", run.time_us);
        // The timeline draws the timed wait as a wait with a deadline, not as blocked.
        let drawn = p.replay_timeline(&run.schedule.parse().unwrap()).unwrap();
        let doing: Vec<_> = (drawn.timeline.unwrap().steps.iter())
            .flat_map(|s| s.lanes.iter().map(|l| l.doing.clone()))
            .collect();
        use sim_clr::process::timeline::Doing;
        let timed = Doing::Waiting("condition variable pthread_cond flag_changed".into());
        assert!(doing.contains(&timed), "{doing:?}");
        assert!(!doing.iter().any(|d| matches!(d, Doing::Blocked(_))), "{doing:?}");
        // Later runs still get their threads: the unwound one is back in the pool.
        for seed in 0..10 {
            // Notified after 1 s, well before the 5 s deadline; then a wait without one.
            set(0);
            let woken = Arc::new(std::sync::Mutex::new(None));
            let w = woken.clone();
            let p = process([
                Arc::new(move || {
                    *w.lock().unwrap() = Some(wait_for(5000));
                    wait();
                }),
                Arc::new(move || {
                    sleep(1000);
                    set(1);
                }),
            ]);
            let run = p.run(&mut Random(Rng::new(seed))).unwrap();
            assert_eq!(run.outcome, "ok", "{:?}", run.fault);
            assert_eq!(*woken.lock().unwrap(), Some(1));
            assert!(
                (1_000_000..1_100_000).contains(&run.time_us),
                "{} µs",
                run.time_us
            );
        }
    }
}

/// A program's `call_export` steps: managed code P/Invokes into the hosted library, which runs
/// on that simulated thread, in the run (its walk of itself with a NULL callback is the run's
/// fault); an export the library lacks, or no library at all, is refused before the run.
#[test]
fn programs_call_the_hosted_librarys_exports_on_their_thread() {
    use sim_clr::process::schedule::{Random, Rng};
    use sim_clr::process::Process;
    let _one = serial();
    let file = |program: &str| {
        format!(
            "platform = \"unix\"\n[[code]]\nname = \"App::Main\"\nkind = \"jit\"\n[[code]]\nname = \"App::Work\"\nkind = \"jit\"\n[[threads]]\nname = \"main\"\nframes = [{{ fn = \"App::Main\" }}]\nprogram = {program}\n"
        )
    };
    let run = |program: &str, hosted: bool| {
        let mut p = Process::new(Scenario::parse("exports.toml", &file(program)).unwrap());
        if hosted {
            p.load(simclr_host::loader(walker(), CLSID).unwrap());
        }
        p.run(&mut Random(Rng::new(1))).unwrap()
    };
    let died = run(
        r#"["call App::Work", "call_export walker_note from-main", "call_export walker_null_walk", "return"]"#,
        true,
    );
    assert_eq!(died.outcome, "null_callback", "{died:?}");
    assert!(
        died.fault
            .as_ref()
            .unwrap()
            .message
            .contains("main called DoStackSnapshot"),
        "{died:?}"
    );
    let steps: Vec<&str> = died
        .trace
        .iter()
        .filter(|e| e.thread == "main")
        .map(|e| e.what.as_str())
        .collect();
    assert!(steps.contains(&"call_export walker_null_walk"), "{steps:?}");
    // What an export returned is in the trace.
    let summed = run(
        r#"["call App::Work", "call_export walker_sum 2 abc 3", "return"]"#,
        true,
    );
    assert!(
        summed
            .trace
            .iter()
            .any(|e| e.thread == "main" && e.what == "walker_sum returned 8 (0x8)"),
        "{:?}",
        summed.trace
    );
    let missing = run(r#"["call_export walker_nope"]"#, true);
    assert_eq!(missing.outcome, "unattached_body");
    assert!(
        missing
            .fault
            .unwrap()
            .message
            .contains("which the hosted library does not export"),
        "the library lacks it"
    );
    let unhosted = run(r#"["call_export walker_note"]"#, false);
    assert_eq!(unhosted.outcome, "unattached_body");
    assert!(unhosted.fault.unwrap().message.contains("no library is hosted"));
}

/// Calls that would leave the simulation (`tests/c/escapes.c`): a wait no simulated thread
/// can end is `unredirected_block`, a thread started with `clone` is `escaped_thread`, each
/// naming the import, on a simulated thread and while a run is set up; the same calls that
/// return at once are the C library's.
mod escapes {
    use super::{build, export};
    use sim_clr::process::schedule::{Random, Rng};
    use sim_clr::process::{Loaded, Process, RunReport};
    use sim_clr::scenario::Scenario;
    use simclr_host::Library;
    use std::ffi::c_int;
    use std::sync::{Arc, Mutex, OnceLock};

    const THREAD: &str = r#"
platform = "unix"
[[code]]
name = "libescapes.so!work"
kind = "native"
[[threads]]
name = "one"
kind = "native"
frames = [{ fn = "libescapes.so!work" }]
"#;

    fn library() -> &'static Library {
        static LIBRARY: OnceLock<Library> = OnceLock::new();
        LIBRARY.get_or_init(|| Library::open(&build("escapes")).expect("libescapes.so loads"))
    }

    /// One run of thread `one` calling `body`, and what the body's call returned (if it did).
    fn run(body: impl Fn() -> i64 + Send + Sync + 'static) -> (RunReport, Option<i64>) {
        let returned = Arc::new(Mutex::new(None));
        let r = returned.clone();
        let mut p = Process::new(Scenario::parse("escapes.toml", THREAD).unwrap());
        p.thread_body("one", Arc::new(move |_, _| *r.lock().unwrap() = Some(body())))
            .unwrap();
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        let value = *returned.lock().unwrap();
        (run, value)
    }

    fn message(run: &RunReport) -> &str {
        run.fault.as_ref().map_or("", |f| f.message.as_str())
    }

    #[test]
    fn a_wait_no_simulated_thread_can_end_ends_the_run_naming_its_import() {
        let read_pipe: extern "C-unwind" fn(c_int) -> i64 = export(library(), "read_pipe");
        let epoll_for: extern "C-unwind" fn(c_int) -> c_int = export(library(), "epoll_for");
        let futex_wait_on: extern "C-unwind" fn(c_int) -> i64 = export(library(), "futex_wait_on");
        for (body, import) in [
            (
                Box::new(move || read_pipe(0)) as Box<dyn Fn() -> i64 + Send + Sync>,
                "`read`",
            ),
            (Box::new(move || epoll_for(-1) as i64), "`epoll_wait`"),
            (Box::new(move || epoll_for(50) as i64), "`epoll_wait`"),
            (Box::new(move || futex_wait_on(0)), "`syscall`"),
        ] {
            let (run, returned) = run(body);
            assert_eq!(run.outcome, "unredirected_block", "{:?}", run.fault);
            assert!(
                message(&run).starts_with(&format!("one: {import} would block")),
                "{:?}",
                run.fault
            );
            assert_eq!(returned, None, "the call never returned into the run");
        }
    }

    #[test]
    fn the_same_calls_that_return_at_once_are_the_c_librarys() {
        let read_pipe: extern "C-unwind" fn(c_int) -> i64 = export(library(), "read_pipe");
        let epoll_for: extern "C-unwind" fn(c_int) -> c_int = export(library(), "epoll_for");
        let futex_wait_on: extern "C-unwind" fn(c_int) -> i64 = export(library(), "futex_wait_on");
        for (body, expected) in [
            // One byte waiting; nothing ready with a zero timeout; a word that is not the
            // value waited for (EAGAIN).
            (
                Box::new(move || read_pipe(1)) as Box<dyn Fn() -> i64 + Send + Sync>,
                1,
            ),
            (Box::new(move || epoll_for(0) as i64), 0),
            (Box::new(move || futex_wait_on(1)), -1),
        ] {
            let (run, returned) = run(body);
            assert_eq!(run.outcome, "ok", "{:?}", run.fault);
            assert_eq!(returned, Some(expected));
        }
    }

    #[test]
    fn a_thread_started_with_clone_is_an_escaped_thread() {
        let clone_thread: extern "C-unwind" fn() -> c_int = export(library(), "clone_thread");
        let (run, returned) = run(move || clone_thread() as i64);
        assert_eq!(run.outcome, "escaped_thread", "{:?}", run.fault);
        assert!(
            message(&run).starts_with("one: `clone` would start an OS thread"),
            "{:?}",
            run.fault
        );
        assert_eq!(returned, None);
    }

    #[test]
    fn a_wait_while_the_profiler_loads_ends_the_run_before_its_first_step() {
        let read_pipe: extern "C-unwind" fn(c_int) -> i64 = export(library(), "read_pipe");
        let mut p = Process::new(Scenario::parse("escapes.toml", THREAD).unwrap());
        let returned = Arc::new(Mutex::new(None));
        let r = returned.clone();
        p.load(Arc::new(move |_| {
            *r.lock().unwrap() = Some(read_pipe(0));
            Loaded::default()
        }));
        let run = p.run(&mut Random(Rng::new(1))).unwrap();
        assert_eq!(run.outcome, "unredirected_block", "{:?}", run.fault);
        assert!(
            message(&run).starts_with("as the profiler loaded: `read` would block"),
            "{:?}",
            run.fault
        );
        assert_eq!(run.steps, 0);
        // The load went on, the read failing instead of blocking.
        assert_eq!(*returned.lock().unwrap(), Some(-1));
    }
}

/// A C profiler with its own sampler thread (`tests/c/sampler.c`) in a running process,
/// explored under schedules.
mod in_process {
    use super::build;
    use corprof::com::Guid;
    use sim_clr::process::schedule::{Random, Rng};
    use sim_clr::process::{Process, Strategy};
    use sim_clr::scenario::Scenario;
    use std::path::PathBuf;
    use std::sync::OnceLock;

    /// Walks while holding the mutex ThreadDestroyed takes.
    const LOCKED: Guid = super::test_class(0x55, 0x01);
    /// Walks a copy of the thread list after releasing the mutex.
    const UNLOCKED: Guid = super::test_class(0x55, 0x02);

    /// Two managed threads that exit, and the thread the profiler creates.
    const PROCESS: &str = include_str!("c/sampler.toml");

    /// `libsampler.so`, built once per test binary.
    fn library() -> &'static PathBuf {
        static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
        LIBRARY.get_or_init(|| build("sampler"))
    }

    /// The process of scenario `text` with the sampler of class `clsid` in every run.
    fn process_of(text: &str, clsid: Guid) -> Process {
        let mut p = Process::new(Scenario::parse("sampler.toml", text).unwrap());
        p.load(simclr_host::loader(library(), clsid).expect("the sampler hosts"));
        p
    }

    fn process(clsid: Guid) -> Process {
        process_of(PROCESS, clsid)
    }

    #[test]
    fn a_c_sampler_that_walks_under_the_thread_list_lock_never_faults() {
        let report = process(LOCKED).explore(Strategy::Pct(3), 100, 1, |_, _| {});
        assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
        let run = process(LOCKED).run(&mut Random(Rng::new(1))).unwrap();
        let trace: Vec<String> = run
            .trace
            .iter()
            .map(|e| format!("{} {}", e.thread, e.what))
            .collect();
        assert!(
            trace.iter().any(|l| l.starts_with("sampler ")),
            "the created thread runs: {trace:#?}"
        );
        assert!(
            trace.iter().any(|l| l.contains("the profiler's Shutdown")),
            "{trace:#?}"
        );
        let refused = simclr_host::loader(library(), Guid::new(1, 2, 3, [4; 8]));
        assert!(matches!(refused, Err(simclr_host::HostError::ClassRefused(_))));
    }

    #[test]
    fn runs_cut_short_anywhere_unwind_the_librarys_threads_cleanly() {
        // Every run ends after a few steps, wherever each thread is: in a callback blocked on
        // the library's mutex, at a runtime call's scheduling point inside a COM method, in
        // a sleep. Each parked thread is unwound through the library's C frames.
        for max_steps in (3..=60).step_by(3) {
            let text = PROCESS.replacen(
                "[[code]]",
                &format!("[limits]\nmax_steps = {max_steps}\n[[code]]"),
                1,
            );
            let report = process_of(&text, LOCKED).explore(Strategy::Pct(3), 30, max_steps as u64, |_, _| {});
            assert!(report.schedules_run == 30, "{report:?}");
        }
    }

    #[test]
    fn a_c_sampler_that_walks_after_releasing_the_lock_walks_a_destroyed_thread() {
        let report = process(UNLOCKED).explore(Strategy::Pct(3), 300, 1, |_, _| {});
        let bad: Vec<&String> = report.outcomes.keys().filter(|k| *k != "ok").collect();
        assert!(!bad.is_empty(), "{report:?}");
        assert!(
            bad.iter()
                .all(|k| *k == "walk_of_destroyed_thread" || *k == "thread_use_after_free"),
            "{report:?}"
        );
        // Deterministic, though every run loads a new copy of the library at a new address.
        let again = process(UNLOCKED).explore(Strategy::Pct(3), 300, 1, |_, _| {});
        assert_eq!(again, report);
        let first = report.first_failure.unwrap();
        let replayed = process(UNLOCKED)
            .replay(&first.schedule.parse().unwrap())
            .unwrap();
        assert_eq!(replayed.fault, Some(first.fault));
    }
}

/// Runs isolated in worker processes: a library that crashes or blocks ends its run, never
/// the exploration (`tests/c/crashing.c`).
mod isolated {
    use super::build;
    use corprof::com::Guid;
    use sim_clr::process::{Process, Strategy};
    use sim_clr::scenario::Scenario;
    use simclr_host::isolation::Forked;
    use std::path::PathBuf;
    use std::sync::{Arc, OnceLock};
    use std::time::Duration;

    /// Re-reads a slot ThreadDestroyed may have cleared during the walk.
    const RACE: Guid = super::test_class(0x66, 0x01);
    /// Also blocks its sampler thread in a read nobody ends.
    const BLOCKS: Guid = super::test_class(0x66, 0x02);

    fn library() -> &'static PathBuf {
        static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
        LIBRARY.get_or_init(|| build("crashing"))
    }

    fn process(clsid: Guid, timeout: Duration) -> Process {
        let text = include_str!("c/sampler.toml").replace("libsampler.so", "libcrashing.so");
        let mut p = Process::new(Scenario::parse("sampler.toml", &text).unwrap());
        let forked = Forked::new(library(), timeout).unwrap();
        p.load(simclr_host::isolated_loader(library(), clsid, &forked).expect("it hosts"));
        p.isolate(Arc::new(forked));
        p
    }

    #[test]
    fn a_library_that_crashes_in_some_runs_ends_only_those_and_each_replays() {
        let p = process(RACE, Duration::from_secs(20));
        let report = p.explore(Strategy::Pct(3), 200, 1, |_, _| {});
        assert_eq!(report.schedules_run, 200, "the exploration goes on: {report:?}");
        let crashes = report.outcomes.get("profiler_crash").copied().unwrap_or(0);
        assert!(crashes > 0 && report.outcomes.contains_key("ok"), "{report:?}");
        let first = report.first_failure.expect("a crash");
        assert_eq!(first.fault.kind, "profiler_crash");
        assert!(first.fault.message.contains("SIGSEGV"), "{}", first.fault.message);
        assert!(
            first.fault.message.contains("in libcrashing.so: walk_and_count"),
            "the library's frames are named: {}",
            first.fault.message
        );
        let again = p.replay(&first.schedule.parse().unwrap()).unwrap();
        assert_eq!(again.outcome, "profiler_crash", "{again:?}");
        // The same exploration, in workers, finds the same runs.
        assert_eq!(
            p.explore(Strategy::Pct(3), 200, 1, |_, _| {}).outcomes,
            report.outcomes
        );
    }

    #[test]
    fn a_thread_a_static_constructor_starts_is_an_escaped_thread() {
        let library = build("ctor_thread");
        let text = include_str!("c/sampler.toml").replace("libsampler.so", "libctor_thread.so");
        let mut p = Process::new(Scenario::parse("sampler.toml", &text).unwrap());
        let forked = Forked::new(&library, Duration::from_secs(20)).unwrap();
        let clsid = super::test_class(0xaa, 0x01);
        p.load(simclr_host::isolated_loader(&library, clsid, &forked).expect("it hosts"));
        p.isolate(Arc::new(forked));
        let report = p.explore(Strategy::Random, 5, 1, |_, _| {});
        assert_eq!(report.outcomes.get("escaped_thread"), Some(&5), "{report:?}");
        let fault = report.first_failure.unwrap().fault;
        assert!(
            fault
                .message
                .contains("static constructors started 1 OS thread(s)"),
            "{}",
            fault.message
        );
    }

    #[test]
    fn a_run_that_blocks_outside_the_simulation_is_a_hang_after_its_timeout() {
        let p = process(BLOCKS, Duration::from_millis(300));
        let report = p.explore(Strategy::Random, 2, 1, |_, _| {});
        assert_eq!(report.outcomes.get("profiler_hang"), Some(&2), "{report:?}");
        let fault = report.first_failure.unwrap().fault;
        assert!(fault.message.contains("wall-clock"), "{}", fault.message);
    }

    #[test]
    fn dfs_goes_on_in_workers_as_in_one_process() {
        let text = include_str!("c/sampler.toml");
        let clsid = super::test_class(0x55, 0x01);
        let sampler = build("sampler");
        let mut here = Process::new(Scenario::parse("sampler.toml", text).unwrap());
        here.load(simclr_host::loader(&sampler, clsid).unwrap());
        let mut there = Process::new(Scenario::parse("sampler.toml", text).unwrap());
        let forked = Forked::new(&sampler, Duration::from_secs(20)).unwrap();
        there.load(simclr_host::isolated_loader(&sampler, clsid, &forked).unwrap());
        there.isolate(Arc::new(forked));
        let a = here.explore(Strategy::Dfs(1), 40, 1, |_, _| {});
        let b = there.explore(Strategy::Dfs(1), 40, 1, |_, _| {});
        assert_eq!(a, b);
        // The same with failed calls as choices: a worker's failure decisions are taken in
        // this process too, and PCT's runs are the same.
        for p in [&mut here, &mut there] {
            p.inject(true);
        }
        for strategy in [Strategy::Dfs(1), Strategy::Pct(3)] {
            let a = here.explore(strategy, 40, 1, |_, _| {});
            let b = there.explore(strategy, 40, 1, |_, _| {});
            assert_eq!(a, b);
        }
        // And calls did fail there.
        there.trace_first(40);
        let traced = there.explore(Strategy::Pct(3), 40, 1, |_, _| {}).traces;
        let injected = traced.values().flatten().flat_map(|run| &run.trace);
        assert!(
            injected.clone().any(|e| e.what.ends_with("(injected)")),
            "{traced:?}"
        );
    }
}

/// A signal-based sampler (`tests/c/signal_sampler.c`): its `sigaction` handler runs on the
/// simulated thread its `tgkill` interrupts, with that thread's registers in the
/// `ucontext_t`; a handler that takes a mutex is `lock_in_signal_handler`.
mod signal_based {
    use super::build;
    use sim_clr::process::{Process, Strategy};
    use sim_clr::scenario::Scenario;
    use simclr_host::isolation::Forked;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    fn process(class: u8) -> Process {
        let library = build("signal_sampler");
        let text = include_str!("c/signal_sampler.toml");
        let mut p = Process::new(Scenario::parse("signal_sampler.toml", text).unwrap());
        let forked = Forked::new(&library, Duration::from_secs(20)).unwrap();
        let clsid = super::test_class(0x99, class);
        p.load(simclr_host::isolated_loader(&library, clsid, &forked).expect("it hosts"));
        p.isolate(Arc::new(forked));
        p
    }

    #[test]
    fn the_handler_runs_on_the_interrupted_thread_with_its_registers() {
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("signal_sampler.out");
        let _ = std::fs::remove_file(&out);
        // Read by the library at Shutdown, in each run's worker.
        std::env::set_var("SIGNAL_SAMPLER_OUT", &out);
        // 100 schedules; fewer under valgrind, where each run takes about a second.
        let schedules = std::env::var("SIGNAL_SAMPLER_SCHEDULES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(100);
        let report = process(0x01).explore(Strategy::Pct(3), schedules, 1, |_, _| {});
        assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
        let seen = std::fs::read_to_string(&out).unwrap();
        let counts: Vec<(u64, u64)> = seen
            .lines()
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                match (words.next(), words.next(), words.next(), words.next()) {
                    (Some("signals"), Some(n), Some("managed"), Some(m)) => {
                        Some((n.parse().ok()?, m.parse().ok()?))
                    }
                    _ => None,
                }
            })
            .collect();
        assert_eq!(
            counts.len() as u64,
            schedules,
            "every run shut the sampler down: {seen:.300}"
        );
        // Signals were sent and handled, and the interrupted instruction pointers the
        // handlers read from their ucontext_t were managed code in some (main's P/Invoke
        // and the sleeps are native).
        let (signals, managed): (u64, u64) = counts.iter().fold((0, 0), |(s, m), (a, b)| (s + a, m + b));
        assert!(
            signals > schedules && managed > 0 && managed < signals,
            "{signals} {managed}"
        );
    }

    #[test]
    fn a_handler_that_takes_a_mutex_is_a_lock_in_a_signal_handler() {
        let report = process(0x02).explore(Strategy::Pct(3), 50, 1, |_, _| {});
        let fault = report.first_failure.expect("the locking handler is caught").fault;
        assert_eq!(fault.kind, "lock_in_signal_handler", "{fault:?}");
    }
}

/// A sampler designed for Windows (`tests/c/windows_sampler.c`), hosted through the OS
/// interface of `include/simclr_os.h`: SuspendThread, GetThreadContext, ResumeThread.
mod windows_design {
    use super::build;
    use corprof::com::Guid;
    use sim_clr::process::{Process, Strategy};
    use sim_clr::scenario::Scenario;
    use std::path::PathBuf;
    use std::sync::OnceLock;

    const fn class(last: u8) -> Guid {
        super::test_class(0x77, last)
    }

    fn process(clsid: Guid) -> Process {
        static LIBRARY: OnceLock<PathBuf> = OnceLock::new();
        let library = LIBRARY.get_or_init(|| build("windows_sampler"));
        let text = include_str!("c/windows_sampler.toml");
        let mut p = Process::new(Scenario::parse("windows_sampler.toml", text).unwrap());
        p.load(simclr_host::loader(library, clsid).expect("the sampler hosts"));
        p
    }

    #[test]
    fn a_windows_sampler_that_checks_destroyed_under_its_lock_never_faults() {
        let report = process(class(1)).explore(Strategy::Pct(3), 300, 1, |_, _| {});
        assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
        let run = process(class(1))
            .run(&mut sim_clr::process::schedule::Random(
                sim_clr::process::schedule::Rng::new(3),
            ))
            .unwrap();
        let suspends = run
            .trace
            .iter()
            .filter(|e| e.what.starts_with("SuspendThread"))
            .count();
        assert!(suspends > 0, "the sampler suspends through simclr_os.h");
        // The locks it named through simclr_os.h go by those names.
        let said = |what: &str| run.trace.iter().any(|e| e.what == what);
        assert!(said("lock pthread_mutex records lock"), "{:?}", run.trace);
        assert!(said("lock pthread_mutex thread record lock"), "{:?}", run.trace);
    }

    #[test]
    fn the_destroyed_flag_read_before_the_lock_is_caught_without_a_hand_placed_point() {
        let report = process(class(2)).explore(Strategy::Pct(3), 1_000, 1, |_, _| {});
        let bad: Vec<&String> = report.outcomes.keys().filter(|k| *k != "ok").collect();
        assert!(
            !bad.is_empty()
                && bad
                    .iter()
                    .all(|k| *k == "walk_of_destroyed_thread" || *k == "thread_use_after_free"),
            "{report:?}"
        );
    }
}

#[test]
fn later_info_interfaces_are_offered_and_the_runtime_says_which_it_is() {
    use corprof::com::{
        ICorProfilerInfo15Vtbl, IID_ICORPROFILERINFO11, IID_ICORPROFILERINFO12, IID_ICORPROFILERINFO14,
        IID_ICORPROFILERINFO15,
    };
    let _one = serial();
    let hosted = Hosted::load(walker(), CLSID, runtime()).expect("hosted");
    let info = hosted.info();
    // SAFETY: `info` is the host's ICorProfilerInfo object; every slot has its signature.
    unsafe {
        let vtbl = &**(info as *const *const ICorProfilerInfo15Vtbl);
        let i10 = &vtbl.base.base.base.base.base;
        let i3 = &i10.base.base.base.base.base.base.base;
        let unknown = &i3.base.base.base;
        // As CoreCLR 3.1.23 answers: up to ICorProfilerInfo11.
        for iid in [IID_ICORPROFILERINFO11, simclr_host::IID_ISIMCLR_OS] {
            let mut out = std::ptr::null_mut();
            assert_eq!((unknown.QueryInterface)(info, &iid, &mut out), 0, "{iid:?}");
            assert!(!out.is_null());
        }
        let mut out = std::ptr::null_mut();
        assert_eq!(
            (unknown.QueryInterface)(info, &IID_ICORPROFILERINFO12, &mut out) as u32,
            0x8000_4002
        );
        // Slots past Info10 answer E_NOTIMPL, never a null slot.
        assert_eq!(
            (vtbl.EnumerateGCHeapObjects)(info, std::ptr::null_mut(), std::ptr::null_mut()) as u32,
            0x8000_4001
        );
        let (mut id, mut kind, mut major, mut minor, mut build, mut qfe, mut len) = (9, 0, 0, 0, 0, 0, 0);
        let mut text = [0u16; 16];
        let hr = (i3.GetRuntimeInformation)(
            info,
            &mut id,
            &mut kind,
            &mut major,
            &mut minor,
            &mut build,
            &mut qfe,
            16,
            &mut len,
            text.as_mut_ptr(),
        );
        assert_eq!(hr, 0);
        // As the real CoreCLR 3.1.23 answers.
        assert_eq!((id, kind, major, minor, build, qfe), (0, 2, 4, 0, 30319, 0));
        assert_eq!(String::from_utf16_lossy(&text[..len as usize - 1]), "v4.0.30319");
        // Too small a buffer: the length, and ERROR_INSUFFICIENT_BUFFER.
        let hr = (i3.GetRuntimeInformation)(
            info,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            4,
            &mut len,
            text.as_mut_ptr(),
        );
        assert_eq!((hr as u32, len), (0x8007_007A, 11));
        (unknown.Release)(info);
    }
    // Answering as .NET 8, as the real 8.0.4 answers: its product version.
    let net8 = Scenario::parse(
        "net8.toml",
        &SCENARIO.replace("version = \"3.1\"", "version = \"8.0\""),
    )
    .unwrap();
    let hosted = Hosted::load(walker(), CLSID, Arc::new(net8.runtime())).expect("hosted");
    let info = hosted.info();
    // SAFETY: as above.
    unsafe {
        let vtbl = &**(info as *const *const ICorProfilerInfo15Vtbl);
        let i3 = &vtbl.base.base.base.base.base.base.base.base.base.base.base.base;
        let (mut major, mut minor, mut build, mut qfe, mut len) = (0, 0, 0, 0, 0);
        let mut text = [0u16; 16];
        let hr = (i3.GetRuntimeInformation)(
            info,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut major,
            &mut minor,
            &mut build,
            &mut qfe,
            16,
            &mut len,
            text.as_mut_ptr(),
        );
        assert_eq!((hr, major, minor, build, qfe), (0, 8, 0, 4, 0));
        assert_eq!(String::from_utf16_lossy(&text[..len as usize - 1]), "8.0.4");
        // As .NET 8.0.4 answers: up to ICorProfilerInfo14.
        let unknown = &i3.base.base.base;
        let mut out = std::ptr::null_mut();
        assert_eq!(
            (unknown.QueryInterface)(info, &IID_ICORPROFILERINFO14, &mut out),
            0
        );
        assert_eq!(
            (unknown.QueryInterface)(info, &IID_ICORPROFILERINFO15, &mut out) as u32,
            0x8000_4002
        );
        (i3.base.base.base.Release)(info);
    }
}

/// A production-style C++17 sampler (`tests/c/cxx_sampler.cpp`) built with its own flags,
/// `-static-libstdc++ -static-libgcc`, hosted unchanged in workers.
mod production_cxx {
    use corprof::com::Guid;
    use sim_clr::process::{Process, Strategy};
    use sim_clr::scenario::Scenario;
    use simclr_host::isolation::Forked;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::time::Duration;

    const CLSID: Guid = super::test_class(0x88, 0x01);

    fn library() -> PathBuf {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cxx_sampler.cpp");
        fixtures::c_library::build_with(
            &source,
            &Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-profilers"),
            &["-static-libstdc++", "-static-libgcc"],
        )
    }

    /// The library's class `clsid` in every run of its process, each run in a worker.
    fn process(clsid: Guid) -> Process {
        let library = library();
        let text = include_str!("c/cxx_sampler.toml");
        let mut p = Process::new(Scenario::parse("cxx_sampler.toml", text).unwrap());
        let forked = Forked::new(&library, Duration::from_secs(30)).unwrap();
        p.load(simclr_host::isolated_loader(&library, clsid, &forked).expect("it hosts"));
        p.isolate(Arc::new(forked));
        p
    }

    #[test]
    fn a_static_libstdcxx_sampler_runs_1000_schedules_names_its_frames_and_threads() {
        // Its runs write what they saw to one file: no other run of the library meanwhile.
        let _one = super::serial();
        // One file per test process: two runs of these tests at once must not share it.
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cxx_sampler.{}.out", std::process::id()));
        let _ = std::fs::remove_file(&out);
        // Read by the library at Shutdown, in each run's worker.
        std::env::set_var("CXX_SAMPLER_OUT", &out);
        let p = process(CLSID);
        // 1,000 schedules; fewer under valgrind, where each run takes about a second.
        let schedules = std::env::var("CXX_SAMPLER_SCHEDULES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1_000);
        let report = p.explore(Strategy::Pct(3), schedules, 1, |_, _| {});
        assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
        let seen = std::fs::read_to_string(&out).unwrap();
        let _ = std::fs::remove_file(&out);
        let runs = seen.lines().filter(|l| l.starts_with("samples ")).count() as u64;
        assert_eq!(runs, schedules, "every run shut the profiler down and reported");
        let sampled = seen
            .lines()
            .filter(|l| l.starts_with("samples ") && *l != "samples 0")
            .count() as u64;
        assert!(sampled * 10 > schedules, "{sampled} runs took a sample");
        // It samples only after a JITCompilationFinished, and keeps what ThreadNameChanged
        // says: the worker's name, set by main.
        for name in ["frame App::Main", "frame App.Work::Run", "thread worker"] {
            assert!(seen.lines().any(|l| l == name), "{name} in {seen:.500}");
        }
    }

    #[test]
    fn its_locks_are_named_by_the_function_that_first_took_them_never_by_address() {
        let _one = super::serial();
        let mut p = process(CLSID);
        p.trace_first(1);
        let report = p.explore(Strategy::Pct(3), 1, 1, |_, _| {});
        let trace = &report.traces["ok"][0].trace;
        let locks: Vec<&str> = (trace.iter().map(|e| e.what.as_str()))
            .filter(|w| w.contains("pthread_"))
            .collect();
        // Its mutex, condition variable and read-write lock live on the heap (members of
        // its Sampler object): each is named after the function that first took it.
        for kind in ["pthread_mutex", "pthread_cond", "pthread_rwlock"] {
            assert!(
                locks
                    .iter()
                    .any(|w| w.contains(&format!("{kind} first taken in (anonymous namespace)::Sampler::"))),
                "{kind}: {locks:?}"
            );
        }
        assert!(locks.iter().all(|w| !w.contains("0x")), "{locks:?}");
    }

    #[test]
    fn enumerators_still_held_after_shutdown_are_a_leaked_reference() {
        let _one = super::serial();
        let p = process(super::test_class(0x88, 0x02));
        let report = p.explore(Strategy::Pct(3), 40, 1, |_, _| {});
        let leaked = report.outcomes.get("leaked_reference").copied().unwrap_or(0);
        // A run that took no sample asked for no enumerator.
        assert!(leaked > 0, "{report:?}");
        assert_eq!(
            leaked + report.outcomes.get("ok").copied().unwrap_or(0),
            40,
            "{report:?}"
        );
        let fault = report.first_failure.expect("a leak").fault;
        assert!(
            fault.message.contains("after Shutdown the profiler still holds")
                && fault.message.contains("ICorProfilerThreadEnum"),
            "{}",
            fault.message
        );
    }
}

/// A C++ sampler that holds its `std::shared_mutex` registry's exclusive lock across
/// `SuspendRuntime`, while `ObjectAllocated` on an application thread (cooperative mode,
/// inside the callback: no safe point) takes the shared lock: a deadlock through the
/// read-write lock, found as one with both edges named, and the lock drawn held.
mod shared_mutex_cycle {
    use corprof::com::Guid;
    use sim_clr::process::{Process, Strategy};
    use sim_clr::scenario::Scenario;
    use simclr_host::isolation::Forked;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    const CLSID: Guid = super::test_class(0x89, 0x01);

    fn process() -> Process {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cxx_registry.cpp");
        let library = fixtures::c_library::build_with(
            &source,
            &Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-profilers"),
            &["-static-libstdc++", "-static-libgcc"],
        );
        let text = include_str!("c/cxx_registry.toml");
        let mut p = Process::new(Scenario::parse("cxx_registry.toml", text).unwrap());
        let forked = Forked::new(&library, Duration::from_secs(30)).unwrap();
        p.load(simclr_host::isolated_loader(&library, CLSID, &forked).expect("it hosts"));
        p.isolate(Arc::new(forked));
        p
    }

    #[test]
    fn is_a_deadlock_with_both_edges_named_never_a_hang() {
        let p = process();
        let report = p.explore(Strategy::Pct(3), 200, 1, |_, _| {});
        let outcomes: Vec<&String> = report.outcomes.keys().collect();
        assert_eq!(outcomes, ["deadlock", "ok"], "{report:?}");
        let failure = report.first_failure.expect("a deadlock");
        let links: Vec<(&str, &str, &str)> = (failure.fault.cycle.iter())
            .map(|l| (l.thread.as_str(), l.waits_for.as_str(), l.held_by.as_str()))
            .collect();
        assert_eq!(links.len(), 2, "{links:?}");
        assert!(links.contains(&("sampler", "safe point", "main")), "{links:?}");
        // The lock is named by its symbol, never by its address.
        assert!(
            links.contains(&(
                "main",
                "pthread_rwlock (anonymous namespace)::registry",
                "sampler"
            )),
            "{links:?}"
        );
        assert!(!failure.fault.message.contains("0x"), "{}", failure.fault.message);
        // The timeline shows the sampler holding the lock until the end.
        let schedule = failure.schedule.parse().unwrap();
        let run = p.replay_timeline(&schedule).unwrap();
        assert_eq!(run.outcome, "deadlock");
        let timeline = run.timeline.expect("a timeline");
        let sampler = timeline.threads.iter().position(|t| t == "sampler").unwrap();
        let last = timeline.steps.last().unwrap();
        assert!(
            last.lanes[sampler]
                .locks
                .iter()
                .any(|l| l == "pthread_rwlock (anonymous namespace)::registry"),
            "{:?}",
            last.lanes[sampler]
        );
        // No lock anywhere on the timeline or in the trace is named by an address.
        let held = (timeline.steps.iter()).flat_map(|s| s.lanes.iter().flat_map(|l| l.locks.iter()));
        for lock in held {
            assert!(!lock.contains("0x"), "{lock}");
        }
        for e in &run.trace {
            assert!(
                !(e.what.contains("pthread_") && e.what.contains("0x")),
                "{}",
                e.what
            );
        }
    }
}

/// A C++17 sampler of the production kind (`std::thread`, `SuspendRuntime`, `EnumThreads`, a
/// `std::shared_mutex` registry fed by `ThreadCreated` / `ThreadDestroyed`) in a process with
/// thread churn: the exploration says what it reached, steers to the `ThreadDestroyed` race,
/// and catches the planted bug (the lock dropped between the lookup and the walk).
mod thread_churn {
    use corprof::com::Guid;
    use sim_clr::process::{ExploreReport, Process, Strategy};
    use sim_clr::scenario::Scenario;
    use simclr_host::isolation::Forked;
    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    const CORRECT: Guid = super::test_class(0x8a, 0x01);
    const BUGGY: Guid = super::test_class(0x8a, 0x02);
    /// The schedules explored per seed when counting those until a first failure.
    const CAP: u64 = 100;

    fn process(clsid: Guid) -> Process {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cxx_churn.cpp");
        let library = fixtures::c_library::build_with(
            &source,
            &Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-profilers"),
            &["-static-libstdc++", "-static-libgcc"],
        );
        let text = include_str!("c/cxx_churn.toml");
        let mut p = Process::new(Scenario::parse("cxx_churn.toml", text).unwrap());
        let forked = Forked::new(&library, Duration::from_secs(30)).unwrap();
        p.load(simclr_host::isolated_loader(&library, clsid, &forked).expect("it hosts"));
        p.isolate(Arc::new(forked));
        p
    }

    fn explore(clsid: Guid, strategy: Strategy, schedules: u64, seed: u64) -> ExploreReport {
        process(clsid).explore(strategy, schedules, seed, |_, _| {})
    }

    /// How many schedules each of `seeds` needed until its first `walk_of_destroyed_thread`.
    fn to_first_failure(strategy: Strategy, seeds: &[u64]) -> Vec<Option<u64>> {
        let p = process(BUGGY);
        (seeds.iter())
            .map(|&seed| {
                let report = p.explore(strategy, CAP, seed, |_, _| {});
                report.first_failure.map(|f| f.index + 1)
            })
            .collect()
    }

    #[test]
    fn the_correct_sampler_is_ok_and_its_report_says_what_it_reached() {
        let report = explore(CORRECT, Strategy::Cover, 100, 1);
        assert_eq!(report.found(), ["ok"], "{report:?}");
        let c = &report.coverage;
        assert_eq!(c.samples.runs_sampled, 100, "{c:?}");
        assert!(c.samples.walks["S_OK"] > 1_000, "{c:?}");
        // Every worker was sampled in some run, and the races were reached: walks of a thread
        // inside its ThreadDestroyed (which waits on the registry the walk holds), rounds
        // over creations and exits, callbacks blocked on the sampler's lock.
        for w in 1..=8 {
            assert!(c.threads[&format!("worker-{w}")] > 0, "{c:?}");
        }
        for window in [
            "r37.inside_thread_destroyed",
            "r37.round_over_creation",
            "r37.round_over_exit",
            "r40.callback_blocked_on_profiler_lock",
            "r40.inside_thread_created",
        ] {
            assert!(c.windows[window] > 0, "{window}: {c:?}");
        }
        // Never a walk after the callback: the lock makes ThreadDestroyed wait.
        assert_eq!(c.windows["r37.after_thread_destroyed"], 0, "{c:?}");
    }

    #[test]
    fn the_planted_bug_is_caught_and_cover_schedules_find_it_first() {
        let report = explore(BUGGY, Strategy::Cover, 50, 1);
        assert!(report.outcomes["walk_of_destroyed_thread"] > 0, "{report:?}");
        assert!(report.coverage.windows["r37.after_thread_destroyed"] > 0);
        let seeds = [1, 1001, 2001, 3001, 4001, 5001, 6001, 7001];
        let mean = |runs: &[Option<u64>]| {
            // A seed that never failed counts as the schedules it ran.
            runs.iter().map(|r| r.unwrap_or(CAP)).sum::<u64>() as f64 / runs.len() as f64
        };
        let random = to_first_failure(Strategy::Random, &seeds);
        let pct = to_first_failure(Strategy::Pct(3), &seeds);
        let cover = to_first_failure(Strategy::Cover, &seeds);
        println!("schedules until the first walk_of_destroyed_thread, seeds {seeds:?}:");
        for (name, runs) in [("random", &random), ("pct", &pct), ("cover", &cover)] {
            println!("  {name:<7} {runs:?}, mean {:.1}", mean(runs));
        }
        assert!(cover.iter().all(Option::is_some), "{cover:?}");
        assert!(mean(&cover) < mean(&random), "{cover:?} {random:?}");
        assert!(mean(&cover) < mean(&pct), "{cover:?} {pct:?}");
    }
}
