//! Hybrid walks of a 64-frame mixed stack (three native runs of 8 frames without frame
//! pointers between managed runs), with the module list loaded and the rule cache warm:
//! The native unwinder reads a copy of the stack taken before the timed loop.
//! - `hybrid/unix`: native leaf run, `DoStackSnapshot` given the first managed frame as seed
//!   (which the runtime discards: the target is in preemptive mode, R12),
//!   each native run expanded (under `SuspendRuntime`, outside the timed loop);
//! - `hybrid/windows_native`: the all-native variant (JIT code has unwind info), IPs
//!   resolved through the runtime;
//! - `…_code_ranges`: the same walks resolving IPs with `CodeRanges` (the profiler's own
//!   table of compiled code, filled from `GetCodeInfo2`) instead of a runtime call per frame;
//! - `peer/dss_unix`: the runtime's own `DoStackSnapshot` of the same thread, given the
//!   same frame, collecting into a preallocated buffer: the part of the hybrid walk that is
//!   not native unwinding, measured in the same run.

use corprof::ProfilerInfo;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sim_clr::scenario::Scenario;
use sim_clr::CallContext;
use walker::hybrid::{resolve_with, HybridOutcome, HybridWalker, Stopped};
use walker::images::Images;
use walker::unwind::StackBounds;
use walker::{snapshot, Contexts, StackBuffer};

fn mixed(platform: &str) -> Scenario {
    let run = |from: &str| {
        format!(
            "{{ fn = \"native!f\", repeat = 7 }}, {{ fn = \"native!g\" }}, {{ frame = \"InlinedCallFrame\" }}, {{ fn = \"{from}\" }}"
        )
    };
    // The hybrid walker expands each native run at its funcId 0 callback.
    let text = format!(
        r#"platform = "{platform}"
[runtime]
version = "3.1"
[[code]]
name = "native!f"
kind = "native"
shape = {{ prologue = ["push rbx", "push r12", "push r13", "sub rsp, 0x20"], calls = 1, epilogues = ["ret"] }}
[[code]]
name = "native!g"
kind = "native"
[[code]]
name = "App::M"
kind = "jit"
[[code]]
name = "App::Main"
kind = "jit"
[[code]]
name = "host!main"
kind = "native"
[[threads]]
name = "main"
frames = [
  {}, {{ fn = "App::M", repeat = 12 }}, {{ frame = "UMThkCallFrame" }},
  {}, {{ fn = "App::M", repeat = 12 }}, {{ frame = "UMThkCallFrame" }},
  {}, {{ fn = "App::M", repeat = 11 }}, {{ fn = "App::Main" }}, {{ fn = "host!main" }},
]
[[threads]]
name = "sampler"
kind = "native"
frames = [{{ fn = "host!main" }}]
"#,
        run("App::M"),
        run("App::M"),
        run("App::M"),
    );
    Scenario::parse("mixed.toml", &text).expect("the mixed stack parses")
}

fn hybrid(c: &mut Criterion) {
    let mut group = c.benchmark_group("hybrid");
    for platform in ["unix", "windows"] {
        let runtime = mixed(platform).runtime();
        let source = runtime.images();
        let images = Images::load(&*source).expect("images");
        let unwinder = images.unwinder().expect("unwinder");
        let thread = runtime.thread("main").expect("main");
        assert_eq!(thread.layout.calls.len(), 64);
        group.throughput(Throughput::Elements(64));
        let context = thread.leaf_context().expect("a leaf");
        let bounds = StackBounds {
            limit: thread.stack_limit,
            base: thread.stack_base,
        };
        runtime
            .on_thread("sampler", CallContext::Thread, |rt| {
                let ranges = fixtures::hybrid::code_ranges(rt).expect("GetCodeInfo2");
                let mut walker = HybridWalker::with_capacity(128);
                // The stack copied once, as a sampler copies a suspended thread's stack and
                // unwinds the copy: reads are plain loads, not runtime calls.
                let low = context.rsp & !7;
                let words: Vec<u64> = (low..bounds.base)
                    .step_by(8)
                    .map(|a| rt.read_memory(a).unwrap_or(0))
                    .collect();
                let mut read = |a: u64| {
                    let i = a.checked_sub(low)?;
                    if i % 8 != 0 {
                        return None;
                    }
                    words.get((i / 8) as usize).copied()
                };
                let stopped = Stopped {
                    thread: thread.id,
                    context: &context,
                    bounds,
                };
                let mut by_runtime = resolve_with(rt);
                let mut by_ranges = |ip| ranges.resolve(ip);
                if platform == "unix" {
                    rt.suspend_runtime();
                    for (name, resolve) in [
                        ("unix", &mut by_runtime as &mut dyn FnMut(u64) -> _),
                        ("unix_code_ranges", &mut by_ranges),
                    ] {
                        let mut resolve = |ip| resolve(ip);
                        let mut walk = || walker.walk(rt, &unwinder, &stopped, &mut read, &mut resolve);
                        assert_eq!(walk(), HybridOutcome::Complete);
                        group.bench_function(name, |b| b.iter(&mut walk));
                        assert_eq!(walker.frames().len(), 64);
                    }
                    // The seed the hybrid walk passes: the first managed frame's registers.
                    let seed = rt.thread("main").map(|t| t.call_context(8)).expect("frame 8");
                    let mut buffer = StackBuffer::with_capacity(128);
                    group.bench_function("peer/dss_unix", |b| {
                        b.iter(|| snapshot(rt, thread.id, Some(&seed), Contexts::NativeRuns, &mut buffer))
                    });
                    rt.resume_runtime();
                } else {
                    // JIT code has unwind data here: the walk keeps every frame's registers and
                    // steps from each managed frame whose caller is managed too, looking for a
                    // native run the runtime did not report.
                    let mut resolve = |ip| by_ranges(ip);
                    let mut walk = || walker.walk(rt, &unwinder, &stopped, &mut read, &mut resolve);
                    assert_eq!(walk(), HybridOutcome::Complete);
                    group.bench_function("windows_code_ranges", |b| b.iter(&mut walk));
                    assert_eq!(walker.frames().len(), 64);
                    for (name, resolve) in [
                        ("windows_native", &mut by_runtime as &mut dyn FnMut(u64) -> _),
                        ("windows_native_code_ranges", &mut by_ranges),
                    ] {
                        let mut resolve = |ip| resolve(ip);
                        let mut walk = || walker.walk_native(&unwinder, &stopped, &mut read, &mut resolve);
                        assert_eq!(walk(), HybridOutcome::Complete);
                        group.bench_function(name, |b| b.iter(&mut walk));
                        assert_eq!(walker.frames().len(), 64);
                    }
                }
            })
            .expect("the scenario declares `sampler`");
    }
    group.finish();
}

criterion_group!(benches, hybrid);
criterion_main!(benches);
