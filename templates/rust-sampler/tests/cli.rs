//! The team's own `simclr` (`src/main.rs`): a deadlock its design allows is found by
//! `explore --sampler team`, and the replay command it prints reproduces it.

use std::path::Path;
use std::process::Command;

fn team(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_team-sampler"))
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_printed_replay_command_reproduces_the_deadlock() {
    let found = team(&[
        "explore",
        "fixtures/pitfalls/s05-code-manager-lock.toml",
        "--sampler",
        "team",
    ]);
    let replay = found
        .lines()
        .find_map(|l| l.strip_prefix("replay: "))
        .unwrap_or_else(|| panic!("no replay command printed:\n{found}"));
    // The line runs as printed: it names this binary by its path.
    let words: Vec<&str> = replay.split(' ').collect();
    let canonical = |p: &str| std::fs::canonicalize(p).unwrap();
    assert_eq!(
        canonical(words[0]),
        canonical(env!("CARGO_BIN_EXE_team-sampler")),
        "{replay}"
    );
    let again = Command::new(words[0])
        .args(&words[1..])
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap();
    let again = String::from_utf8(again.stdout).unwrap();
    assert!(again.lines().any(|l| l.starts_with("deadlock: ")), "{again}");
}

#[test]
fn the_fuzzer_runs_the_team_sampler_in_windows_processes() {
    let out = std::env::temp_dir().join(format!("team-fuzz-{}", std::process::id()));
    let run = Command::new(env!("CARGO_BIN_EXE_team-sampler"))
        .args(["fuzz", "--sampler", "team", "--platform", "windows"])
        .args(["--processes", "10", "--schedules", "4", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&out);
    let stdout = String::from_utf8_lossy(&run.stdout);
    // What the design lacks (a lock shared with ThreadDestroyed) is found: exit 1.
    assert_eq!(run.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("team-sampler replay "), "{stdout}");
    assert!(!stdout.contains("unix"), "{stdout}");
}
