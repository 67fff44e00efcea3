//! One run of the team's sampler in a simulated process: pitfall S33 (a native function
//! overran its buffer and corrupted its caller's frame) under one random schedule. Every
//! sample is judged against the ground truth; the run must end `ok` with samples taken.

use sim_clr::process::schedule::{Random, Rng};
use sim_clr::process::{Process, SimOs};
use sim_clr::runtime::Runtime;
use sim_clr::scenario::Scenario;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use team_sampler::team_sampler;

#[test]
fn one_run_of_a_pitfall_samples_and_ends_ok() {
    let (_, text) = fixtures::pitfall_catalog()
        .iter()
        .find(|(file, _)| *file == "s33-stack-overrun.toml")
        .expect("the pitfall");
    let mut process = Process::new(Scenario::parse("s33-stack-overrun.toml", text).unwrap());
    let judged = Arc::new(AtomicU64::new(0));
    process
        .thread_body("sampler", team_sampler(false, judged.clone()))
        .unwrap();
    process
        .thread_body("watchdog", Arc::new(|_: &Runtime, _: &SimOs| {}))
        .unwrap();
    let run = process.run(&mut Random(Rng::new(1))).unwrap();
    assert_eq!(run.outcome, "ok", "{run:?}");
    assert!(judged.load(Ordering::Relaxed) > 0, "no sample was judged");
}
