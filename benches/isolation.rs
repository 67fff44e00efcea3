//! What running each schedule in a worker process of its own costs: one run of
//! `host/tests/c/sampler.toml` with the C sampler hosted (a fresh library per run, two managed
//! threads that exit, the sampler thread the library creates), in this process (the peer) and
//! in a forked worker (`--in-process` off, the default), measured in the same run.

// Workers need fork (Linux).
#[cfg(target_os = "linux")]
mod workers {
    use corprof::com::Guid;
    use criterion::{criterion_group, Criterion};
    use host::isolation::{Forked, RUN_TIMEOUT};
    use sim_clr::process::schedule::{Random, Rng};
    use sim_clr::process::Process;
    use sim_clr::scenario::Scenario;
    use std::path::Path;
    use std::sync::Arc;

    /// The class that walks under its thread list's lock.
    const CLSID: Guid = Guid::new(
        0x2c0f_6a1e,
        0x7b3d,
        0x4e21,
        [0x8f, 0x5a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x01],
    );

    fn runs(c: &mut Criterion) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let library = fixtures::c_library::build(
            &root.join("host/tests/c/sampler.c"),
            &root.join("target/bench-profilers"),
        );
        let scenario =
            || Scenario::parse("sampler.toml", include_str!("../host/tests/c/sampler.toml")).unwrap();
        let mut here = Process::new(scenario());
        here.load(host::loader(&library, CLSID).unwrap());
        let mut there = Process::new(scenario());
        let forked = Forked::new(&library, RUN_TIMEOUT).unwrap();
        there.load(host::isolated_loader(&library, CLSID, &forked).unwrap());
        there.isolate(Arc::new(forked));
        let mut group = c.benchmark_group("hosted-run");
        let mut seed = 0;
        // Workers first: every in-process run maps one more copy of the library into this
        // process, which every later fork would then have to copy the page tables of.
        for (name, process) in [("worker", &there), ("in-process", &here)] {
            group.bench_function(name, |b| {
                b.iter(|| {
                    seed += 1;
                    let run = process.run_untraced(&mut Random(Rng::new(seed))).unwrap();
                    assert_eq!(run.outcome, "ok");
                })
            });
        }
        group.finish();
    }

    criterion_group!(benches, runs);
}

#[cfg(target_os = "linux")]
criterion::criterion_main!(workers::benches);

#[cfg(not(target_os = "linux"))]
fn main() {}
