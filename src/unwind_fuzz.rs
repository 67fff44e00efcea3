//! `simclr unwind-fuzz`: random synthesized functions, every instruction boundary unwound by
//! this project's unwinders and by framehop, checked against the emulator.

use crate::out::outln;
use crate::progress::Progress;
use fixtures::unwind_oracle::{check, Format, Outcome, BASE};
use proptest::strategy::{Strategy, ValueTree};
use sim_clr::synth::FunctionShape;
use std::process::ExitCode;

/// Totals for one format.
#[derive(Default)]
struct Totals {
    functions: usize,
    steps: usize,
    mismatches: usize,
    expected: usize,
    unexpected: usize,
    not_encodable: usize,
    examples: Vec<String>,
}

/// Runs `functions` random functions from `seed` in each of `formats`, `jobs` functions at
/// once (the output is the same whatever the number); exit code 1 on any mismatch with the
/// emulator or unexpected disagreement with framehop.
pub fn run(functions: usize, seed: u64, formats: &[Format], jobs: usize) -> ExitCode {
    if functions == 0 {
        eprintln!("error: --functions 0 checks nothing");
        return ExitCode::from(2);
    }
    let mut runner = fixtures::strategies::seeded_runner(seed);
    let strategy = fixtures::strategies::function_shape();
    let mut totals: Vec<Totals> = formats.iter().map(|_| Totals::default()).collect();
    let bar = Progress::new(functions as u64, false, "functions");
    let mut n = 0;
    while n < functions {
        // The functions are drawn in order, then checked at once.
        let chunk = (functions - n).min(256);
        let mut shapes = Vec::with_capacity(chunk);
        for k in n..n + chunk {
            match strategy.new_tree(&mut runner) {
                Ok(tree) => shapes.push((tree.current(), BASE + 0x1_0000 * (k as u64 % 4096))),
                Err(e) => {
                    eprintln!("error: cannot generate a function: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        let checked = sim_clr::parallel::in_order(jobs, chunk as u64, |k| {
            let (shape, base) = &shapes[k as usize];
            formats
                .iter()
                .map(|f| check(shape, *base, *f))
                .collect::<Vec<_>>()
        });
        for ((shape, _), outcomes) in shapes.iter().zip(checked) {
            bar.inc(1);
            for (outcome, t) in outcomes.into_iter().zip(&mut totals) {
                tally(t, shape, outcome);
            }
        }
        n += chunk;
    }
    bar.finish();
    outln!(
        "{:<7} {:>9} {:>13} {:>11} {:>21} {:>23} {:>13}",
        "format",
        "functions",
        "steps",
        "mismatches",
        "framehop: expected",
        "framehop: unexpected",
        "not encodable"
    );
    for (format, t) in formats.iter().zip(&totals) {
        outln!(
            "{:<7} {:>9} {:>13} {:>11} {:>21} {:>23} {:>13}",
            format.as_str(),
            t.functions,
            t.steps,
            t.mismatches,
            t.expected,
            t.unexpected,
            t.not_encodable
        );
        for e in &t.examples {
            outln!("  {e}");
        }
    }
    // A step is an unwind from one boundary (each kind, each layout) compared with the emulator.
    let bad: usize = totals.iter().map(|t| t.mismatches + t.unexpected).sum();
    let steps: usize = totals.iter().map(|t| t.steps).sum();
    outln!("unwind-fuzz: {} passed, {bad} failed", steps.saturating_sub(bad));
    if bad == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Adds one function's check in one format to `t`.
fn tally(t: &mut Totals, shape: &FunctionShape, outcome: Result<Outcome, String>) {
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            t.mismatches += 1;
            t.examples.push(format!("cannot check {shape:?}: {e}"));
            return;
        }
    };
    t.functions += 1;
    t.not_encodable += usize::from(outcome.not_encodable);
    t.steps += outcome.steps;
    t.mismatches += outcome.mismatches.len();
    t.expected += outcome.framehop_expected;
    t.unexpected += outcome.framehop_unexpected.len();
    for problem in outcome
        .mismatches
        .iter()
        .chain(&outcome.framehop_unexpected)
        .take(3)
    {
        if t.examples.len() < 10 {
            t.examples.push(format!("{problem} in {shape:?}"));
        }
    }
}
