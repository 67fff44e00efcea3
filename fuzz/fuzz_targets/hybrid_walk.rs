//! Any bytes as the random draws of a mixed stack: managed, native and stub frames of random
//! shapes, its leaf stopped at a random instruction. The hybrid walker (and, on Windows, the
//! all-native walk) must agree with the ground truth frame by frame. A mismatch, a stack the
//! generator cannot build, a panic or a hang is a bug.

#![no_main]

use fixtures::hybrid::{walk, Mode};
use fixtures::random_stack::{random_stack, scenario};
use proptest::strategy::{Strategy, ValueTree};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut runner = fixtures::strategies::bytes_runner(data);
    let Ok(tree) = random_stack().new_tree(&mut runner) else {
        return;
    };
    let stack = tree.current();
    let (text, scenario) = scenario(&stack).unwrap_or_else(|e| panic!("a generated stack does not build: {e}"));
    let runtime = scenario.runtime();
    for &mode in Mode::for_platform(runtime.platform()) {
        let judged = walk(&runtime, "main", "sampler", mode)
            .unwrap_or_else(|e| panic!("{} walk failed: {e}\n{text}", mode.as_str()));
        if let Some(m) = judged.mismatch {
            panic!("{} walk: {m}\n{text}", mode.as_str());
        }
    }
});
