//! Speed of the simulated runtime, with peers measured in the same run.
//!
//! - `walk/dss_sync`: a synchronous `DoStackSnapshot` of a deep managed stack, per frame; the
//!   callback takes each frame's IP through `black_box`, as the cross-thread one does (a
//!   callback that adds to a counter on the stack makes the time depend on where the
//!   process's stack lies: up to 15% from one run to the next);
//! - `walk/fp_chain`: the peer — a raw frame-pointer walk reading the same simulated memory
//!   through one [`sim_clr::memory::Reader`] (two dependent reads per frame), the floor any
//!   walk of that memory pays;
//! - `threads/dss_cross/N`: a cross-thread walk (Windows: the target is suspended) of one
//!   8-frame thread among N, and `threads/enum_threads/N`: `EnumThreads` over N threads, per
//!   thread — both should not grow with N;
//! - `catalog/run_all`: parsing and running every bundled scenario.

use corprof::{HResult, ProfilerInfo, SnapshotFrame, ThreadId};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sim_clr::scenario::Scenario;
use sim_clr::CallContext;
use std::hint::black_box;

fn deep(frames: usize) -> Scenario {
    let text = format!(
        "platform = \"unix\"\n[[code]]\nname = \"R\"\nkind = \"jit\"\nframe_size = 32\n[[code]]\nname = \"host\"\nkind = \"native\"\n\
         [[threads]]\nname = \"main\"\nframes = [{{ fn = \"R\", repeat = {frames} }}, {{ fn = \"host\" }}]\n"
    );
    Scenario::parse("bench.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn walks(c: &mut Criterion) {
    let mut group = c.benchmark_group("walk");
    for depth in [64usize, 512, 10_000] {
        let runtime = deep(depth).runtime();
        runtime
            .on_thread("main", CallContext::PInvoke, |rt| {
                let thread = rt.thread("main").unwrap();
                let leaf = thread.layout.calls[0];
                group.throughput(Throughput::Elements(depth as u64));
                group.bench_with_input(BenchmarkId::new("dss_sync", depth), &depth, |b, _| {
                    b.iter(|| {
                        let mut cb = |f: &SnapshotFrame<'_>| {
                            black_box(f.ip);
                            HResult::S_OK
                        };
                        let hr = rt.do_stack_snapshot(ThreadId::NULL, Some(&mut cb), 0, None, 0);
                        assert_eq!(hr, HResult::S_OK);
                    })
                });
                group.bench_with_input(BenchmarkId::new("fp_chain", depth), &depth, |b, _| {
                    b.iter(|| {
                        rt.with_memory(|memory| {
                            let (mut rbp, mut frames) = (leaf.regs[corprof::Register::Rbp as usize], 0usize);
                            while let (Ok(next), Ok(ret)) = (memory.read_u64(rbp), memory.read_u64(rbp + 8)) {
                                if next <= rbp || ret == 0 {
                                    break;
                                }
                                rbp = black_box(next);
                                frames += 1;
                            }
                            frames
                        })
                    })
                });
            })
            .expect("the scenario declares `main`");
    }
    group.finish();
}

fn many_threads(count: usize) -> Scenario {
    let mut text = String::from(
        "platform = \"windows\"\n[[code]]\nname = \"R\"\nkind = \"jit\"\n[[code]]\nname = \"host\"\nkind = \"native\"\n\
         [[threads]]\nname = \"sampler\"\nkind = \"native\"\nframes = [{ fn = \"host\" }]\n",
    );
    for i in 0..count {
        text.push_str(&format!(
            "[[threads]]\nname = \"t{i}\"\nframes = [{{ fn = \"R\", repeat = 8 }}, {{ fn = \"host\" }}]\n"
        ));
    }
    Scenario::parse("threads.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("threads");
    for count in [10usize, 1000, 4000] {
        let runtime = many_threads(count);
        let runtime = runtime.runtime();
        let target = runtime
            .thread(&format!("t{}", count - 1))
            .expect("the last thread")
            .id;
        runtime
            .on_thread("sampler", CallContext::Thread, |rt| {
                group.throughput(Throughput::Elements(1));
                group.bench_with_input(BenchmarkId::new("dss_cross", count), &count, |b, _| {
                    b.iter(|| {
                        let mut cb = |f: &SnapshotFrame<'_>| {
                            black_box(f.ip);
                            HResult::S_OK
                        };
                        rt.do_stack_snapshot(target, Some(&mut cb), 0, None, 0)
                    })
                });
                group.throughput(Throughput::Elements(count as u64));
                group.bench_with_input(BenchmarkId::new("enum_threads", count), &count, |b, _| {
                    b.iter(|| rt.enum_threads().map(|ids| ids.len()))
                });
            })
            .expect("the scenario declares `sampler`");
    }
    group.finish();
}

fn catalog(c: &mut Criterion) {
    c.bench_function("catalog/run_all", |b| {
        b.iter(|| {
            let scenarios = fixtures::scenarios().unwrap();
            scenarios.iter().map(|s| s.run().calls.len()).sum::<usize>()
        })
    });
}

criterion_group!(benches, walks, threads, catalog);
criterion_main!(benches);
