//! The example of `docs/profiler-guide.md`, section 3, kept compiling and passing.

use corprof::{HResult, ProfilerInfo, SnapshotFrame, ThreadId};
use sim_clr::{scenario::Scenario, CallContext};

fn count_frames(info: &dyn ProfilerInfo, thread: ThreadId) -> Result<usize, HResult> {
    let mut n = 0;
    let mut cb = |_: &SnapshotFrame<'_>| {
        n += 1;
        HResult::S_OK
    };
    match info.do_stack_snapshot(thread, Some(&mut cb), 0, None, 0) {
        HResult::S_OK => Ok(n),
        hr => Err(hr),
    }
}

#[test]
fn the_guide_example_works() {
    let scenario = Scenario::parse(
        "my-test.toml",
        r#"
        platform = "windows"
        [[code]]
        name = "App::Work"
        kind = "jit"
        [[code]]
        name = "kernel32!BaseThreadInitThunk"
        kind = "native"
        [[code]]
        name = "sampler!loop"
        kind = "native"
        [[threads]]
        name = "worker"
        frames = [{ fn = "App::Work", repeat = 3 }, { fn = "kernel32!BaseThreadInitThunk" }]
        [[threads]]
        name = "sampler"
        kind = "native"
        frames = [{ fn = "sampler!loop" }]
    "#,
    )
    .unwrap();
    let runtime = scenario.runtime();
    runtime
        .on_thread("sampler", CallContext::Thread, |rt| {
            let worker = rt.thread("worker").unwrap();
            assert_eq!(count_frames(rt, worker.id), Ok(4));
        })
        .expect("the scenario declares `sampler`");
    // On Linux the same call is refused: no cross-thread walks without SuspendRuntime.
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/profiler-guide.md")).unwrap();
    assert!(text.contains("assert_eq!(n, 4);"));
}
