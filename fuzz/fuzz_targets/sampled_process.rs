//! Any bytes as the random draws of a process (application threads running random programs,
//! the reference sampler and its watchdog attached), run under one random schedule seeded from
//! the same bytes. The reference sampler must end every run `ok`: a deadlock, a wrong sample,
//! a crash of the simulated process, a panic or a hang is a bug (of the sampler or of the
//! simulator).

#![no_main]

use fixtures::fuzz::{built_in, random_process};
use fixtures::sampling::Variant;
use proptest::strategy::{Strategy, ValueTree};
use sim_clr::process::schedule::{Random, Rng};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut runner = fixtures::strategies::bytes_runner(data);
    let Ok(tree) = random_process(None).new_tree(&mut runner) else {
        return;
    };
    let generated = tree.current();
    let (text, process) = generated
        .build(&built_in(Variant::REFERENCE))
        .unwrap_or_else(|e| panic!("a generated process does not build: {e}"));
    // The schedule's seed: the same runner's next draw.
    let Ok(seed) = proptest::prelude::any::<u64>().new_tree(&mut runner) else {
        return;
    };
    let seed = seed.current();
    let run = process
        .run_untraced(&mut Random(Rng::new(seed)))
        .unwrap_or_else(|e| panic!("a random schedule does not fit: {e}"));
    if run.outcome != "ok" {
        let message = run.fault.map(|f| f.message).unwrap_or_default();
        panic!("{}: {message}\nschedule {}\n{text}", run.outcome, run.schedule);
    }
});
