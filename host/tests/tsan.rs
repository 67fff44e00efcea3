//! A C++ sampler built with `-fsanitize=thread` (`tests/c/tsan_slots.cpp`), hosted unchanged:
//! its atomic operations are scheduling points (the ThreadSanitizer stand-in hosting loads),
//! so a race that lives between two of them is explored without a hand-placed point.
//!
//! Its slots sit behind spin locks; with the destroyed mark read before the lock is taken,
//! `ThreadDestroyed` can run to its end between the read and the walk, and the Windows
//! cross-thread walk of a destroyed thread kills the process (R11.1, R37).

use corprof::com::Guid;
use sim_clr::process::{Process, Strategy};
use sim_clr::scenario::Scenario;
use simclr_host::isolation::Forked;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The CLSID `tsan_slots.cpp` answers to.
const CLSID: Guid = Guid::new(
    0x2c0f_6a1e,
    0x7b3d,
    0x4e21,
    [0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x89, 0x01],
);

/// Two application threads that exit while the library's sampler thread walks them.
const PROCESS: &str = r#"
platform = "windows"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "App::Work"
kind = "jit"
[[code]]
name = "libtsan_slots.so!sample"
kind = "native"
[[threads]]
name = "main"
frames = [{ fn = "App::Main" }]
program = ["call App::Work", "return", "exit"]
[[threads]]
name = "worker"
frames = [{ fn = "App::Main" }]
program = ["call App::Work", "spin 2", "return", "exit"]
[[threads]]
name = "sampler"
kind = "native"
start = "profiler"
frames = [{ fn = "libtsan_slots.so!sample" }]
"#;

/// The library built as production would, with ThreadSanitizer's instrumentation: the correct
/// order, or (`bug`) the destroyed mark read before the spin lock is taken.
fn library(bug: bool) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/tsan_slots.cpp");
    let variant = if bug { "bug" } else { "fixed" };
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("tsan-{variant}"));
    let mut flags = vec!["-fsanitize=thread", "-static-libstdc++", "-static-libgcc"];
    if bug {
        flags.push("-DSLOTS_BUG");
    }
    fixtures::c_library::build_with(&source, &out, &flags)
}

/// One test at a time: the workers of one read the environment the other sets.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The process hosting `library`, each run in a worker of its own.
fn process(library: &Path) -> Process {
    let mut p = Process::new(Scenario::parse("tsan_slots.toml", PROCESS).unwrap());
    let forked = Forked::new(library, Duration::from_secs(30)).unwrap();
    p.load(simclr_host::isolated_loader(library, CLSID, &forked).expect("it hosts"));
    p.isolate(Arc::new(forked));
    p
}

#[test]
fn the_destroyed_mark_read_outside_the_spin_lock_is_caught_within_1000_pct_schedules() {
    let _one = serial();
    let library = library(true);
    let report = process(&library).explore(Strategy::Pct(3), 1_000, 1, |_, _| {});
    let failure = report.first_failure.as_ref().expect("caught");
    assert!(
        ["walk_of_destroyed_thread", "thread_use_after_free"].contains(&failure.fault.kind.as_str()),
        "{report:?}"
    );
    // The schedule replays the failure.
    let replayed = process(&library)
        .replay(&failure.schedule.parse().unwrap())
        .unwrap();
    assert_eq!(replayed.fault.as_ref(), Some(&failure.fault));
}

#[test]
fn in_the_right_order_10000_pct_schedules_run_clean_and_walk_in_a_quarter_of_them() {
    let _one = serial();
    let library = library(false);
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tsan_slots.out");
    let _ = std::fs::remove_file(&out);
    // Read by the library at Shutdown, in each run's worker.
    std::env::set_var("TSAN_SLOTS_OUT", &out);
    // 10,000 schedules; fewer under valgrind, where each run takes about a second.
    let schedules = std::env::var("TSAN_SLOTS_SCHEDULES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let report = process(&library).explore(Strategy::Pct(3), schedules, 1, |_, _| {});
    std::env::remove_var("TSAN_SLOTS_OUT");
    assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"], "{report:?}");
    let seen = std::fs::read_to_string(&out).unwrap();
    let walks: Vec<u64> = seen
        .lines()
        .filter_map(|l| l.strip_prefix("walks ")?.parse().ok())
        .collect();
    assert_eq!(walks.len() as u64, schedules, "every run reported");
    // In the others the application's threads ended before the sampler listed them.
    let walked = walks.iter().filter(|&&n| n > 0).count() as u64;
    assert!(walked * 4 > schedules, "{walked} of {schedules} runs walked");
}
