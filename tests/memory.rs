//! The memory the largest files take, counted by this test binary's allocator (the same on
//! every machine and build, unlike a process's resident size): a chain of walks each seeded
//! from the one before, and a file at the `[[code]]` limit, each under the 500 MB the docs
//! promise for files within the limits (docs/scenario-format.md), the second under half of it.

use sim_clr::scenario::Scenario;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system allocator, counting the bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is the system allocator's, with its arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = IN_USE.fetch_add(layout.size(), Relaxed) + layout.size();
        PEAK.fetch_max(now, Relaxed);
        // SAFETY: as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Relaxed);
        // SAFETY: as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The peak bytes in use while `f` runs, above what was in use before.
fn peak_of(f: impl FnOnce()) -> usize {
    let before = IN_USE.load(Relaxed);
    PEAK.store(before, Relaxed);
    f();
    PEAK.load(Relaxed) - before
}

const MB: usize = 1 << 20;

/// Parses and runs `text` with its text report, as `simclr run` does.
fn run(name: &str, text: &str) {
    let scenario = Scenario::parse(name, text).unwrap();
    let report = scenario.run();
    assert!(!report.calls.is_empty());
}

#[test]
fn the_largest_files_stay_under_500_mb() {
    // 1 MB of walks, each seeded from a callback of the one before: one CONTEXT per walk is
    // kept, the one a later call names, not one per frame (which took 1.0 GB).
    let mut chain = String::from(
        "platform = \"windows\"\n[[code]]\nname = \"App::Work\"\nkind = \"jit\"\n[[code]]\nname = \"App::Main\"\nkind = \"jit\"\n\
         [[threads]]\nname = \"main\"\nframes = [{ fn = \"App::Work\", repeat = 60 }, { fn = \"App::Main\" }]\n\
         [[calls]]\ncaller = \"main\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\nflags = [\"REGISTER_CONTEXT\"]\n",
    );
    let mut call = 1;
    while chain.len() < 1_000_000 {
        chain.push_str(&format!(
            "[[calls]]\ncaller = \"main\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\nflags = [\"REGISTER_CONTEXT\"]\nseed = {{ call = {call}, callback = 0 }}\n"
        ));
        call += 1;
    }
    let chained = peak_of(|| run("chain.toml", &chain));
    // 65,536 `[[code]]` tables of one shape: their code's states are shared, not copied to
    // each address (which took 494 MB).
    let mut codes = String::from("platform = \"unix\"\n");
    for i in 0..65_536 {
        codes.push_str(&format!("[[code]]\nname = \"f{i}\"\nkind = \"jit\"\n"));
    }
    codes.push_str("[[threads]]\nname = \"main\"\nframes = [{ fn = \"f1\" }]\n[[calls]]\ncaller = \"main\"\napi = \"GetCurrentThreadID\"\n");
    let coded = peak_of(|| run("codes.toml", &codes));
    eprintln!(
        "peaks: chain {} MB, [[code]] limit {} MB",
        chained / MB,
        coded / MB
    );
    assert!(chained < 500 * MB, "the seeded chain took {} MB", chained / MB);
    // Half the promise: the states were once copied to every address (494 MB).
    assert!(coded < 250 * MB, "the [[code]] limit took {} MB", coded / MB);
}
