//! Every command's exit codes, as the README's table gives them: each code a command can
//! give, from a run that gives it (the long hunts only from bad input), and the table names
//! every command `simclr --help` lists.

use std::path::{Path, PathBuf};
use std::process::Command;

fn simclr(args: &[&str]) -> Option<i32> {
    Command::new(env!("CARGO_BIN_EXE_simclr"))
        .args(args)
        .output()
        .expect("simclr runs")
        .status
        .code()
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh file `name` holding `text`.
fn file(name: &str, text: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("exit-codes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Two threads taking two locks in opposite orders: some schedules deadlock.
const TWO_LOCKS: &str = r#"
platform = "unix"
locks = ["A", "B"]
[[code]]
name = "App::Main"
kind = "jit"
[[threads]]
name = "first"
frames = [{ fn = "App::Main" }]
program = ["lock A", "lock B", "unlock B", "unlock A"]
[[threads]]
name = "second"
frames = [{ fn = "App::Main" }]
program = ["lock B", "lock A", "unlock A", "unlock B"]
[explore]
strategy = "dfs"
"#;

#[test]
fn every_command_exits_as_the_readme_says() {
    let p = |f: &Path| f.to_str().unwrap().to_string();
    let scenario = p(&root().join("fixtures/scenarios/attached-profiler.toml"));
    let failing_expectation = p(&file(
        "expect.toml",
        "platform = \"unix\"\n[[code]]\nname = \"M\"\nkind = \"jit\"\n[[threads]]\nname = \"main\"\nframes = [{ fn = \"M\" }]\n[[calls]]\napi = \"DoStackSnapshot\"\ncaller = \"main\"\ntarget = \"main\"\nexpect_frames = 5\n",
    ));
    let malformed = p(&file("bad.toml", "platform = \"vms\"\n"));
    let deadlocks = p(&file("two-locks.toml", TWO_LOCKS));
    let control = p(&root().join("fixtures/processes/thread-churn.toml"));
    let unreachable = p(&file(
        "unreachable.toml",
        &std::fs::read_to_string(root().join("fixtures/processes/thread-churn.toml"))
            .unwrap()
            .replace(
                "reach = [\"r37.inside_thread_destroyed\",",
                "reach = [\"r43.signal_masked\",",
            ),
    ));
    let out = p(&file("out.keep", "").with_extension("d"));
    std::fs::create_dir_all(&out).unwrap();
    let svg = format!("{out}/x.svg");
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["catalog", "--nope"], 2),
        (vec!["run", &scenario], 0),
        (vec!["run", &failing_expectation], 1),
        (vec!["run", &malformed], 2),
        (vec!["list"], 0),
        (vec!["show", "scenarios/attached-profiler"], 0),
        (vec!["show", "no-such-scenario"], 2),
        (vec!["explain", &scenario, "--out", &svg], 0),
        (vec!["explain", &malformed], 2),
        (vec!["walk", &malformed], 2),
        (vec!["unwind-fuzz", "--functions", "3"], 0),
        (vec!["unwind-fuzz", "--format", "elf"], 2),
        (vec!["unwind-check", "/no/such/file"], 2),
        (vec!["walk-fuzz", "--processes", "3", "--out", &out], 0),
        (vec!["walk-fuzz", "--processes", "x"], 2),
        (vec!["explore", &control, "--schedules", "30"], 0),
        (vec!["explore", &deadlocks], 1),
        (vec!["explore", &malformed], 2),
        (vec!["replay", &deadlocks, "--schedule", "0x5"], 0),
        (vec!["replay", &deadlocks, "--schedule", "0.1x2"], 1),
        (vec!["replay", &deadlocks, "--schedule", "9"], 2),
        (vec!["reach", &control, "--schedules", "30"], 0),
        (vec!["reach", &unreachable, "--schedules", "3"], 1),
        (vec!["reach", "--schedules", "0"], 2),
        (vec!["sample-rates", "--runs", "1"], 0),
        (vec!["sample-rates", "--runs", "1", "--min", "1000000"], 1),
        (vec!["sample-rates", "--runs", "0"], 2),
        (vec!["fuzz", "--processes", "1", "--out", &out], 0),
        (vec!["fuzz", "--sampler", "nope"], 2),
        (vec!["mutants", "--nope"], 2),
        (vec!["record", "/no/such/log.jsonl"], 2),
        (vec!["merge"], 2),
        (vec!["conform", "/no/such/scenarios", "/no/such/results"], 2),
    ];
    for (args, code) in &cases {
        assert_eq!(simclr(args), Some(*code), "simclr {}", args.join(" "));
    }
    // The README's table names every command.
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let help = Command::new(env!("CARGO_BIN_EXE_simclr"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let commands = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help");
    for command in commands {
        assert!(
            readme
                .lines()
                .any(|l| l.starts_with('|') && l.contains(&format!("`{command}`"))),
            "the README's exit codes table misses `{command}`"
        );
    }
}
