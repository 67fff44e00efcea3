//! Hybrid walks of simulated threads whose native frames are real code.

use fixtures::hybrid::{describe, walk, Mode};
use sim_clr::scenario::Scenario;

fn helper_on_top(platform: &str) -> Scenario {
    let text = format!(
        r#"
platform = "{platform}"
[[code]]
name = "libcoreclr.so!AllocHelper"
kind = "helper"
[[code]]
name = "libcoreclr.so!JIT_New"
kind = "helper"
[[code]]
name = "App::B"
kind = "jit"
[[code]]
name = "App::A"
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
  {{ fn = "libcoreclr.so!AllocHelper" }},
  {{ fn = "libcoreclr.so!JIT_New" }},
  {{ frame = "HelperMethodFrame" }},
  {{ fn = "App::B" }},
  {{ fn = "App::A" }},
  {{ fn = "App::Main" }},
  {{ fn = "host!main" }},
]
[[threads]]
name = "sampler"
kind = "native"
frames = [{{ fn = "host!main" }}]
"#
    );
    Scenario::parse("helper.toml", &text).unwrap()
}

#[test]
fn a_helper_on_top_is_walked_without_duplicates() {
    for platform in ["windows", "unix"] {
        let runtime = helper_on_top(platform).runtime();
        let judged = walk(&runtime, "main", "sampler", Mode::Hybrid).unwrap();
        assert_eq!(
            judged.mismatch,
            None,
            "{platform}\n{}",
            describe(&runtime, &judged)
        );
    }
}

#[test]
fn show() {
    let runtime = helper_on_top("unix").runtime();
    let judged = walk(&runtime, "main", "sampler", Mode::Hybrid).unwrap();
    println!("{}", describe(&runtime, &judged));
    let runtime = helper_on_top("windows").runtime();
    let judged = walk(&runtime, "main", "sampler", Mode::Native).unwrap();
    println!("{}", describe(&runtime, &judged));
}

#[test]
fn random() {
    use proptest::strategy::{Strategy, ValueTree};
    let strategy = fixtures::random_stack::random_stack();
    let mut runner = fixtures::strategies::seeded_runner(1);
    let (mut n, mut bad) = (0, 0);
    let t = std::time::Instant::now();
    for _ in 0..200 {
        let stack = strategy.new_tree(&mut runner).unwrap().current();
        let (text, scenario) = fixtures::random_stack::scenario(&stack).unwrap();
        let runtime = scenario.runtime();
        let modes: &[Mode] = if stack.platform == "windows" {
            &[Mode::Hybrid, Mode::Native]
        } else {
            &[Mode::Hybrid]
        };
        for &mode in modes {
            n += 1;
            let judged = walk(&runtime, "main", "sampler", mode).unwrap();
            if let Some(m) = &judged.mismatch {
                bad += 1;
                println!("{mode:?} {} {m}", stack.platform);
                if bad < 3 {
                    println!("{}\n{text}", describe(&runtime, &judged));
                }
            }
        }
    }
    println!("{n} walks, {bad} mismatches in {:?}", t.elapsed());
}
