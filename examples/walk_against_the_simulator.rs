//! Testing a stack walker against the simulated runtime: a scenario with a managed thread, the
//! walker run on a never-managed sampler thread, and its result compared with the thread's
//! ground truth.
//!
//! Run it with `cargo run --example walk_against_the_simulator`.

use corprof::{FunctionId, HResult, ProfilerInfo, SnapshotFrame, ThreadId};
use sim_clr::scenario::Scenario;
use sim_clr::CallContext;

/// The walker under test: the `funcId` of every frame `DoStackSnapshot` reports for `thread`,
/// leaf first (0 for a run of native frames).
fn my_walker(info: &dyn ProfilerInfo, thread: ThreadId) -> Result<Vec<FunctionId>, HResult> {
    let mut frames = Vec::new();
    let mut callback = |f: &SnapshotFrame<'_>| {
        frames.push(f.func_id);
        HResult::S_OK
    };
    match info.do_stack_snapshot(thread, Some(&mut callback), 0, None, 0) {
        HResult::S_OK => Ok(frames),
        hr => Err(hr),
    }
}

/// A Windows process: `worker` runs managed code called back from native code; `sampler` is
/// the profiler's own thread.
/// It answers as CoreCLR 3.1, which reports the native run below the reverse P/Invoke with a
/// `funcId == 0` callback; .NET 8 reports none there.
const SCENARIO: &str = r#"
platform = "windows"
[runtime]
version = "3.1"
[[code]]
name = "App::Leaf"
kind = "jit"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "native!callback"
kind = "native"
[[code]]
name = "host!main"
kind = "native"
[[code]]
name = "sampler!loop"
kind = "native"
[[threads]]
name = "worker"
frames = [
  { fn = "App::Leaf", repeat = 2 },
  { frame = "UMThkCallFrame" },
  { fn = "native!callback", repeat = 3 },
  { frame = "InlinedCallFrame" },
  { fn = "App::Main" },
  { fn = "host!main" },
]
[[threads]]
name = "sampler"
kind = "native"
frames = [{ fn = "sampler!loop" }]
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let runtime = Scenario::parse("example.toml", SCENARIO)?.runtime();
    let worker = runtime.thread("worker").ok_or("no thread `worker`")?;
    // Walk `worker` from `sampler`, as a sampling profiler's thread does.
    let walked = runtime
        .on_thread("sampler", CallContext::Thread, |rt| my_walker(rt, worker.id))?
        .map_err(|hr| format!("DoStackSnapshot failed: {hr}"))?;

    // The ground truth: each laid-out call, leaf first; a run of native calls above a managed
    // one is reported as one funcId 0.
    let mut expected = Vec::new();
    runtime.with_code(|code| {
        for call in &worker.layout.calls {
            let function = code.function(call.function);
            if function.kind.is_managed() {
                expected.push(function.function_id);
            } else if expected.last().is_some_and(|f: &FunctionId| !f.is_null()) {
                expected.push(FunctionId::NULL);
            }
        }
    });
    let name = |id: FunctionId| {
        runtime.with_code(|code| match code.by_function_id(id) {
            Some(i) => code.function(i).name.clone(),
            None => "[native frames]".to_string(),
        })
    };
    println!("{:<4} {:<20} {:<20}", "#", "ground truth", "walked");
    for i in 0..expected.len().max(walked.len()) {
        let show = |f: Option<&FunctionId>| f.map_or(String::new(), |&f| name(f));
        println!("{i:<4} {:<20} {:<20}", show(expected.get(i)), show(walked.get(i)));
    }
    assert_eq!(walked, expected, "the walker disagrees with the ground truth");
    println!("the walk matches the ground truth");
    Ok(())
}
