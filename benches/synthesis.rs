//! Code synthesis speed: what a function the cache has not seen costs a scenario, a random
//! stack (`walk-fuzz`, the `hybrid_walk` fuzz target) or a random process (`fuzz`).
//!
//! 64 random function shapes (drawn once, from a fixed seed), each built at the default size
//! (`0x100` bytes) and at `0x400` bytes, the largest padding the assembler adds:
//! - `built`: `MachineCode::build`, uncached: assembled, padded with `nop`s, emulated along
//!   every path and turned into one frame state per run of boundaries;
//! - `peer: assembled`: the same shapes assembled only, unpadded: the part no build can skip.
//!
//! The ratio of the two is the cost of the ground truth over the code itself.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use proptest::strategy::{Strategy, ValueTree};
use sim_clr::code::machine::MachineCode;
use sim_clr::synth::{assemble, FunctionShape};
use std::hint::black_box;

const BASE: u64 = 0x7f10_0000_1000;

/// 64 shapes a simulated function can have (entered by a call), from seed 1.
fn shapes() -> Vec<FunctionShape> {
    let mut runner = fixtures::strategies::seeded_runner(1);
    let strategy =
        fixtures::strategies::function_shape().prop_filter("entered by a call", |s| !s.machine_frame);
    let shapes: Vec<FunctionShape> = (0..64)
        .map(|_| strategy.new_tree(&mut runner).expect("a shape").current())
        .collect();
    assert!(
        shapes.iter().all(|s| MachineCode::build(s, BASE, 0x100).is_ok()),
        "every drawn shape builds"
    );
    shapes
}

fn synthesis(c: &mut Criterion) {
    let shapes = shapes();
    let mut g = c.benchmark_group("synthesis");
    g.throughput(Throughput::Elements(shapes.len() as u64));
    for size in [0x100u64, 0x400] {
        g.bench_function(format!("built, {size:#x} bytes"), |b| {
            b.iter(|| {
                shapes
                    .iter()
                    .map(|s| MachineCode::build(s, BASE, size).map_or(0, |m| m.states.len()))
                    .sum::<usize>()
            })
        });
    }
    g.bench_function("peer: assembled", |b| {
        b.iter(|| {
            shapes
                .iter()
                .map(|s| assemble(black_box(s), BASE).map_or(0, |a| a.bytes.len()))
                .sum::<usize>()
        })
    });
    g.finish();
}

criterion_group!(benches, synthesis);
criterion_main!(benches);
