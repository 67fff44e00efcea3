//! The scheduler's speed: steps per second with the wait-for check on every block, steps per
//! second when every atomic access of Rust code is a scheduling point, and whole schedules per
//! second of a two-thread, two-lock program — under `simclr explore`'s engine
//! and, as the peer in the same run, under shuttle (the same program as real Rust threads on
//! shuttle's mutexes, random scheduler).

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use sim_clr::process::schedule::{Random, Rng};
use sim_clr::process::{Process, Strategy};
use sim_clr::scenario::Scenario;

/// Two threads, two locks, taken in the same order (no deadlock): `lock A, lock B, unlock B,
/// unlock A`, with `spin` steps in between.
fn two_locks(spin: u32) -> Process {
    let body =
        format!("[\"lock A\", \"spin {spin}\", \"lock B\", \"spin {spin}\", \"unlock B\", \"unlock A\"]");
    let text = format!(
        "platform = \"unix\"\nlocks = [\"A\", \"B\"]\n[[code]]\nname = \"M\"\nkind = \"jit\"\n\
         [[threads]]\nname = \"one\"\nframes = [{{ fn = \"M\" }}]\nprogram = {body}\n\
         [[threads]]\nname = \"two\"\nframes = [{{ fn = \"M\" }}]\nprogram = {body}\n"
    );
    Process::new(Scenario::parse("two-locks.toml", &text).expect("valid"))
}

/// Contended locking: 8 threads on one lock, 50 rounds each — many blocks, each checked for
/// a cycle.
fn contended() -> Process {
    let mut text =
        String::from("platform = \"unix\"\nlocks = [\"L\"]\n[[code]]\nname = \"M\"\nkind = \"jit\"\n");
    for t in 0..8 {
        text += &format!(
            "[[threads]]\nname = \"t{t}\"\nframes = [{{ fn = \"M\" }}]\nprogram = [\"loop 50\", \"lock L\", \"spin 2\", \"unlock L\", \"end\"]\n"
        );
    }
    Process::new(Scenario::parse("contended.toml", &text).expect("valid"))
}

/// Steps per second of one random run of `process` after another.
fn bench_steps(c: &mut Criterion, name: &str, process: &Process) {
    let run = process.run(&mut Random(Rng::new(7))).unwrap();
    let mut g = c.benchmark_group("scheduler_steps");
    g.throughput(Throughput::Elements(run.steps));
    g.bench_function(name, |b| {
        let mut seed = 0;
        b.iter(|| {
            seed += 1;
            process
                .explore(Strategy::Random, 1, seed, |_, _| {})
                .schedules_run
        })
    });
    g.finish();
}

fn steps(c: &mut Criterion) {
    bench_steps(
        c,
        "8 threads, 1 lock, wait-for check on every block",
        &contended(),
    );
}

/// Two native threads running Rust code that adds to one `corprof::sync` counter 2,000
/// times each: every access a scheduling point.
fn atomic_counters() -> Process {
    use corprof::sync::atomic::{AtomicU64, Ordering};
    use sim_clr::process::{SimOs, ThreadBody};
    use std::sync::Arc;
    let text = "platform = \"unix\"\n[[code]]\nname = \"n!loop\"\nkind = \"native\"\n\
        [[threads]]\nname = \"one\"\nkind = \"native\"\nframes = [{ fn = \"n!loop\" }]\nbody = \"adder\"\n\
        [[threads]]\nname = \"two\"\nkind = \"native\"\nframes = [{ fn = \"n!loop\" }]\nbody = \"adder\"\n";
    let mut process = Process::new(Scenario::parse("atomics.toml", text).expect("valid"));
    let counter = Arc::new(AtomicU64::new(0));
    let adder: ThreadBody = Arc::new(move |_: &sim_clr::Runtime, _: &SimOs| {
        for _ in 0..2_000 {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    for thread in ["one", "two"] {
        process.thread_body(thread, adder.clone()).expect("declared");
    }
    process
}

fn atomic_steps(c: &mut Criterion) {
    bench_steps(
        c,
        "2 threads, every atomic access a scheduling point",
        &atomic_counters(),
    );
}

fn shuttle_two_locks(spin: u32) {
    use shuttle::sync::Mutex;
    use std::sync::Arc;
    let a = Arc::new(Mutex::new(0u64));
    let b = Arc::new(Mutex::new(0u64));
    let worker = |a: Arc<Mutex<u64>>, b: Arc<Mutex<u64>>| {
        move || {
            let mut ga = a.lock().unwrap();
            for _ in 0..spin {
                shuttle::thread::yield_now();
            }
            let mut gb = b.lock().unwrap();
            for _ in 0..spin {
                shuttle::thread::yield_now();
            }
            *gb += 1;
            *ga += 1;
        }
    };
    let t = shuttle::thread::spawn(worker(a.clone(), b.clone()));
    worker(a, b)();
    t.join().unwrap();
}

fn schedules(c: &mut Criterion) {
    let mut g = c.benchmark_group("two_threads_two_locks");
    const RUNS: u64 = 100;
    g.throughput(Throughput::Elements(RUNS));
    for spin in [1u32, 4] {
        let process = two_locks(spin);
        g.bench_with_input(
            BenchmarkId::new("simclr explore (random)", spin),
            &spin,
            |b, _| {
                b.iter(|| {
                    process
                        .explore(Strategy::Random, RUNS, 1, |_, _| {})
                        .schedules_run
                })
            },
        );
        g.bench_with_input(BenchmarkId::new("simclr explore (pct:3)", spin), &spin, |b, _| {
            b.iter(|| {
                process
                    .explore(Strategy::Pct(3), RUNS, 1, |_, _| {})
                    .schedules_run
            })
        });
        g.bench_with_input(
            BenchmarkId::new("shuttle check_random", spin),
            &spin,
            |b, &spin| b.iter(|| shuttle::check_random(move || shuttle_two_locks(spin), RUNS as usize)),
        );
    }
    g.finish();
}

criterion_group!(benches, steps, atomic_steps, schedules);
criterion_main!(benches);
