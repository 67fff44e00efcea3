//! The reference sampler's speed in the simulated process, and the throughput of exploring
//! pitfall scenarios with it.
//!
//! - `sampler/samples`: one run of a Windows process with 10 application threads and the
//!   reference sampler (3 rounds: 30 samples, each suspended, walked with the hybrid walker,
//!   resumed, judged against the ground truth), under one fixed seed. Throughput is in
//!   samples. The peer in the same group is the built-in `snapshot-sampler` (two rounds of
//!   unseeded `DoStackSnapshot` of every thread: 20 walks, no suspension, no oracle) on the
//!   same process.
//! - `sampler/explore`: schedules per second of `simclr explore` on a pitfall scenario
//!   (processes × schedules), against the same application with no profiler at all.
//! - `sampler_fuzz`: `simclr fuzz`'s throughput in processes × schedules per second: 4 random
//!   processes generated, built and explored under 25 schedules each (half random, half PCT)
//!   with the reference sampler; the peer explores the same 4 processes' applications with no
//!   profiler under as many schedules.
//! - `sampler_jobs`: every pitfall scenario of the catalog explored under 100 PCT schedules
//!   as `simclr explore FILES… --jobs 2` does (side by side on two threads,
//!   `sim_clr::parallel::tasks`), against `--jobs 1`, and against one scenario at a time with
//!   two schedules at once (`Process::jobs(2)`).
//! - `random_process`: building one random process of the fuzzer (its scenario text parsed,
//!   its code synthesized, the sampler attached), against parsing the same text alone.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sim_clr::process::{HeapLockAllocator, Process, Strategy};
use sim_clr::scenario::Scenario;

#[global_allocator]
static ALLOCATOR: HeapLockAllocator<std::alloc::System> = HeapLockAllocator(std::alloc::System);

/// A Windows process of `threads` application threads, each calling and returning, with a
/// sampler thread running `body` (and a watchdog for the reference sampler).
fn process(threads: usize, body: &str) -> Process {
    let mut text = String::from(
        "platform = \"windows\"\n[runtime]\nevent_mask = [\"ENABLE_STACK_SNAPSHOT\", \"MONITOR_THREADS\"]\n",
    );
    for (name, kind) in [
        ("App::Main", "jit"),
        ("App::Work", "jit"),
        ("host!main", "native"),
        ("sampler!loop", "native"),
    ] {
        text += &format!("[[code]]\nname = \"{name}\"\nkind = \"{kind}\"\n");
    }
    for t in 0..threads {
        text += &format!(
            "[[threads]]\nname = \"t{t}\"\nframes = [{{ fn = \"App::Main\" }}, {{ fn = \"host!main\" }}]\n\
             program = [\"loop 20\", \"call App::Work\", \"spin 2\", \"return\", \"end\"]\n"
        );
    }
    text += &format!("[[threads]]\nname = \"sampler\"\nkind = \"native\"\nframes = [{{ fn = \"sampler!loop\" }}]\nbody = \"{body}\"\n");
    if body == "sampler" {
        text += "[[threads]]\nname = \"watchdog\"\nkind = \"native\"\nframes = [{ fn = \"sampler!loop\" }]\nbody = \"watchdog\"\n";
    }
    fixtures::behaviours::process(Scenario::parse("bench.toml", &text).expect("valid")).expect("attached")
}

fn samples(c: &mut Criterion) {
    let mut g = c.benchmark_group("sampler");
    g.sample_size(20);
    // Samples per run: the reference takes 3 rounds of 10, the snapshot-sampler 2 of 10;
    // every run is checked to end well.
    for (name, body, samples) in [
        ("reference, 10 threads", "sampler", 30),
        ("peer: snapshot-sampler, 10 threads", "snapshot-sampler", 20),
    ] {
        g.throughput(Throughput::Elements(samples));
        let p = process(10, body);
        g.bench_function(name, |b| {
            b.iter(|| {
                let report = p.explore(Strategy::Random, 1, 3, |_, _| {});
                assert_eq!(report.outcomes.keys().collect::<Vec<_>>(), ["ok"]);
            })
        });
    }
    g.finish();
}

fn explore(c: &mut Criterion) {
    let (file, text) = fixtures::pitfall_catalog()
        .iter()
        .find(|(f, _)| f.starts_with("s03"))
        .expect("the heap-lock pitfall");
    let scenario = Scenario::parse(file, text).expect("valid");
    let with = fixtures::behaviours::process(scenario.clone()).expect("attached");
    let mut bare = scenario;
    bare.process.bodies.iter_mut().for_each(|b| *b = None);
    let without = Process::new(bare);
    let mut g = c.benchmark_group("sampler_explore");
    g.sample_size(10);
    g.throughput(Throughput::Elements(100));
    g.bench_function("s03-heap-lock, reference sampler, 100 PCT schedules", |b| {
        b.iter(|| with.explore(Strategy::Pct(3), 100, 1, |_, _| {}).schedules_run)
    });
    g.bench_function(
        "peer: the same application without a profiler, 100 PCT schedules",
        |b| b.iter(|| without.explore(Strategy::Pct(3), 100, 1, |_, _| {}).schedules_run),
    );
    g.finish();
}

fn jobs(c: &mut Criterion) {
    const SCHEDULES: u64 = 100;
    let mut catalog: Vec<Process> = fixtures::pitfall_catalog()
        .iter()
        .map(|(file, text)| {
            fixtures::behaviours::process(Scenario::parse(file, text).expect("valid")).expect("attached")
        })
        .collect();
    let mut g = c.benchmark_group("sampler_jobs");
    g.sample_size(10);
    g.throughput(Throughput::Elements(SCHEDULES * catalog.len() as u64));
    // What `simclr explore FILES… --jobs N` does: the scenarios side by side on N threads,
    // the last ones helped by the threads with no scenario left to start.
    for (jobs, name) in [(2, "--jobs 2"), (1, "peer: --jobs 1")] {
        let catalog = &catalog;
        g.bench_function(
            format!("the pitfall catalog, {SCHEDULES} PCT schedules each, {name}"),
            |b| {
                b.iter(|| {
                    let mut schedules = 0;
                    sim_clr::parallel::tasks(
                        jobs,
                        catalog.len() as u64,
                        |k, pool| {
                            catalog[k as usize].explore_in(pool, Strategy::Pct(3), SCHEDULES, 1, |_, _| {})
                        },
                        |_, report| schedules += report.schedules_run,
                    );
                    schedules
                })
            },
        );
    }
    // One scenario at a time, each on both threads: PCT's re-run batches cost more than the
    // second thread gives at this length.
    g.bench_function(
        format!("the pitfall catalog, {SCHEDULES} PCT schedules each, peer: one at a time on 2 threads"),
        |b| {
            b.iter(|| {
                catalog
                    .iter_mut()
                    .map(|p| {
                        p.jobs(2)
                            .explore(Strategy::Pct(3), SCHEDULES, 1, |_, _| {})
                            .schedules_run
                    })
                    .sum::<u64>()
            })
        },
    );
    g.finish();
}

fn random_process(c: &mut Criterion) {
    use fixtures::fuzz::{built_in, random_process};
    use proptest::strategy::{Strategy as _, ValueTree};
    let reference = built_in(fixtures::sampling::Variant::REFERENCE);
    let mut runner = fixtures::strategies::seeded_runner(1);
    let generated: Vec<_> = (0..8)
        .map(|_| {
            random_process(None)
                .new_tree(&mut runner)
                .expect("generated")
                .current()
        })
        .collect();
    let texts: Vec<String> = generated
        .iter()
        .map(|p| p.build(&reference).expect("built").0)
        .collect();
    let mut g = c.benchmark_group("random_process");
    g.throughput(Throughput::Elements(generated.len() as u64));
    g.bench_function("8 random processes built", |b| {
        b.iter(|| {
            generated
                .iter()
                .map(|p| p.build(&reference).expect("built").0.len())
                .sum::<usize>()
        })
    });
    g.bench_function("peer: their scenario texts parsed", |b| {
        b.iter(|| {
            texts
                .iter()
                .map(|t| Scenario::parse("fuzz.toml", t).expect("valid").threads.len())
                .sum::<usize>()
        })
    });
    g.finish();
}

fn fuzz(c: &mut Criterion) {
    use fixtures::fuzz::{built_in, random_process, Options};
    use proptest::strategy::{Strategy as _, ValueTree};
    let options = Options {
        processes: 4,
        schedules: 25,
        seed: 1,
        shrinks: fixtures::fuzz::SHRINKS,
        jobs: 1,
        shard: sim_clr::process::Shard::WHOLE,
        max_failures: None,
        platform: None,
    };
    let reference = built_in(fixtures::sampling::Variant::REFERENCE);
    let mut runner = fixtures::strategies::seeded_runner(options.seed);
    let bare: Vec<Process> = (0..options.processes)
        .map(|_| {
            let generated = random_process(None)
                .new_tree(&mut runner)
                .expect("generated")
                .current();
            let (text, _) = generated.build(&reference).expect("built");
            let mut scenario = Scenario::parse("fuzz.toml", &text).expect("valid");
            scenario.process.bodies.iter_mut().for_each(|b| *b = None);
            Process::new(scenario)
        })
        .collect();
    let mut g = c.benchmark_group("sampler_fuzz");
    g.sample_size(10);
    g.throughput(Throughput::Elements(options.processes * options.schedules));
    g.bench_function("reference sampler, 4 random processes x 25 schedules", |b| {
        b.iter(|| {
            let report = fixtures::fuzz::fuzz(options, &reference, |_, _| {}).expect("built");
            assert!(report.failures.is_empty());
        })
    });
    g.bench_function("peer: the same applications without a profiler", |b| {
        b.iter(|| {
            for p in &bare {
                p.explore(Strategy::Random, 13, 1, |_, _| {});
                p.explore(Strategy::Pct(3), 12, 1, |_, _| {});
            }
        })
    });
    g.finish();
}

criterion_group!(benches, samples, explore, jobs, random_process, fuzz);
criterion_main!(benches);
