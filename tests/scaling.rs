//! Every dimension of a scenario file costs linear time: for each one, a file n large and a file
//! 4n large are read and run (in turns, the cheapest of five tries each) and the larger may cost
//! at most five times as much (linear: four, measured from 2.9 to 4.6, and up to 5.3 for the
//! `[[code]]` tables on a busy machine; a quadratic path: sixteen). A comparison above five is
//! made again, up to five times in all, before it fails: noise from the machine comes and
//! goes, a quadratic path does not. The tests take turns, so that
//! none measures while another runs; they compare costs within one run, never against a clock.

use sim_clr::process::{Process, Strategy};
use sim_clr::scenario::Scenario;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Instant;

/// Held by the test measuring.
static MEASURING: Mutex<()> = Mutex::new(());

/// Reads `text` (on Unix) and runs it: its `[[calls]]` on the frozen state, then, if a thread
/// has a program, one random schedule.
fn read_and_run(text: &str) {
    let text = format!("platform = \"unix\"\n{text}");
    let scenario = Scenario::parse("scaling.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    let report = scenario.run();
    assert!(
        report
            .calls
            .iter()
            .all(|c| c.hresult_name.as_deref() == Some("S_OK")),
        "every walk succeeds"
    );
    if scenario.process.moves() {
        let (_, failed) = Process::new(scenario).first_failure(Strategy::Random, 1, 1);
        assert!(failed.is_none(), "{:?}", failed.map(|f| f.fault));
    }
}

/// The cheapest of five runs of `small` and of `large`, in seconds, run in turns so that a
/// spell of noise from the machine slows both rather than one.
fn costs(small: &str, large: &str) -> (f64, f64) {
    let time = |text: &str| {
        let start = Instant::now();
        read_and_run(text);
        start.elapsed().as_secs_f64()
    };
    (0..5).fold((f64::INFINITY, f64::INFINITY), |(a, b), _| {
        (a.min(time(small)), b.min(time(large)))
    })
}

/// The most `file(4 * n)` may cost, in multiples of what `file(n)` costs.
const BOUND: f64 = 5.0;

/// How many comparisons a test makes before it fails.
const TRIES: usize = 5;

/// Asserts that the file `file(4 * n)` costs at most [`BOUND`] times what `file(n)` does, in
/// one of [`TRIES`] comparisons.
fn linear(what: &str, n: usize, file: impl Fn(usize) -> String) {
    let _turn = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let (small, large) = (file(n), file(4 * n));
    read_and_run(&small); // warm: the first run builds caches
    let mut best = (f64::INFINITY, 0.0, 0.0);
    for _ in 0..TRIES {
        let (a, b) = costs(&small, &large);
        if b / a < best.0 {
            best = (b / a, a, b);
        }
        if best.0 <= BOUND {
            return;
        }
    }
    let (ratio, a, b) = best;
    panic!("{what}: 4 x {n} cost {ratio:.1} times {n} at best ({a:.4} s, {b:.4} s)");
}

/// Code a file's threads use: a native function and a method (last, so that a file can add
/// fields to its table).
const CODE: &str = "[[code]]\nname = \"N\"\nkind = \"native\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\n";

/// A synchronous walk of thread `t` from inside a P/Invoke.
fn walk(t: &str) -> String {
    format!("[[calls]]\ncaller = \"{t}\"\nfrom = \"pinvoke\"\napi = \"DoStackSnapshot\"\n")
}

#[test]
fn frames_per_walk() {
    linear("frames of one walk", 4_000, |n| {
        let repeats: Vec<String> = (0..n.div_ceil(10_000))
            .map(|k| format!("{{ fn = \"M\", repeat = {} }}", (n - k * 10_000).min(10_000)))
            .collect();
        // Frames of 16 bytes: 64,000 of them fit in a thread's stack.
        format!(
            "{}\nframe_size = 16\n[[threads]]\nname = \"t\"\nframes = [{}, {{ fn = \"N\" }}]\n{}",
            CODE.trim_end(),
            repeats.join(", "),
            walk("t")
        )
    });
}

#[test]
fn walks() {
    linear("walks", 2_000, |n| {
        let mut s = format!(
            "{CODE}[[threads]]\nname = \"t\"\nframes = [{{ fn = \"M\", repeat = 8 }}, {{ fn = \"N\" }}]\n"
        );
        (0..n).for_each(|_| s.push_str(&walk("t")));
        s
    });
}

#[test]
fn nested_walks() {
    linear("nested walks", 64, |n| {
        let nested = "[[calls.nested]]\napi = \"DoStackSnapshot\"\n".repeat(n);
        format!(
            "{CODE}[[threads]]\nname = \"t\"\nframes = [{{ fn = \"M\", repeat = 200 }}, {{ fn = \"N\" }}]\n{}{nested}",
            walk("t")
        )
    });
}

#[test]
fn threads_named_by_calls() {
    linear("threads", 500, |n| {
        let mut s = CODE.to_string();
        for k in 0..n {
            let _ = write!(
                s,
                "[[threads]]\nname = \"t{k}\"\nframes = [{{ fn = \"M\" }}, {{ fn = \"N\" }}]\n"
            );
        }
        (0..n).for_each(|k| s.push_str(&walk(&format!("t{k}"))));
        s
    });
}

#[test]
fn code_entries() {
    linear("[[code]] tables", 2_000, |n| {
        let mut s = String::new();
        for k in 0..n {
            let _ = write!(
                s,
                "[[code]]\nname = \"C{k}\"\nkind = \"jit\"\nframe_size = {}\n",
                16 * (1 + k % 4)
            );
        }
        let _ = write!(
            s,
            "[[code]]\nname = \"N\"\nkind = \"native\"\n[[threads]]\nname = \"t\"\nframes = [{{ fn = \"C{}\" }}, {{ fn = \"N\" }}]\n{}",
            n - 1,
            walk("t")
        );
        s
    });
}

#[test]
fn explicit_frames() {
    linear("explicit Frames", 1_000, |n| {
        let groups = vec!["{ fn = \"N\" }, { frame = \"InlinedCallFrame\" }, { fn = \"M\" }"; n].join(", ");
        format!(
            "{CODE}[[threads]]\nname = \"t\"\nframes = [{{ fn = \"M\" }}, {groups}]\n{}",
            walk("t")
        )
    });
}

/// A file whose one thread runs `program`, with `header` at the top.
fn program(header: &str, program: &[String]) -> String {
    let steps: Vec<String> = program.iter().map(|p| format!("\"{p}\"")).collect();
    format!(
        "{header}\n{CODE}[[threads]]\nname = \"main\"\nframes = [{{ fn = \"M\" }}]\nprogram = [{}]\n",
        steps.join(", ")
    )
}

/// A file declaring `n` objects in `list` (`locks`, `events`), named `PREFIX0`, `PREFIX1`, …,
/// whose thread uses each one with the two steps `verbs`.
fn declared(list: &str, prefix: &str, verbs: [&str; 2], n: usize) -> String {
    let names: Vec<String> = (0..n).map(|k| format!("\"{prefix}{k}\"")).collect();
    let steps: Vec<String> = (0..n)
        .flat_map(|k| verbs.map(|verb| format!("{verb} {prefix}{k}")))
        .collect();
    program(&format!("{list} = [{}]", names.join(", ")), &steps)
}

#[test]
fn locks() {
    linear("locks", 1_000, |n| declared("locks", "L", ["lock", "unlock"], n));
}

#[test]
fn events() {
    linear("events", 1_000, |n| {
        declared("events", "E", ["set_event", "wait_event"], n)
    });
}

#[test]
fn nested_calls() {
    linear("nested calls", 2_000, |n| {
        let steps: Vec<String> = (0..2 * n)
            .map(|k| if k < n { "call M" } else { "return" }.to_string())
            .collect();
        program("", &steps).replace("kind = \"jit\"\n", "kind = \"jit\"\nframe_size = 16\n")
    });
}

#[test]
fn program_steps() {
    linear("program steps", 5_000, |n| {
        let steps: Vec<String> = (0..n)
            .flat_map(|_| ["call M".to_string(), "return".to_string()])
            .collect();
        program("", &steps)
    });
}
