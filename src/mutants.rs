//! `simclr mutants`: every deliberately broken sampler against the pitfall scenarios, each
//! caught or not, with a shrunk reproducer.

use crate::conclude;
use crate::explore::replay_command;
use crate::progress::Progress;
use fixtures::sampling::{hunt, mutants, Hunt};
use std::process::ExitCode;

/// Hunts every mutant with up to `schedules` PCT schedules per pitfall scenario from `seed`;
/// exit 1 if one escapes.
pub fn run(schedules: u64, seed: u64, json: bool) -> ExitCode {
    if schedules == 0 {
        eprintln!("error: --schedules must be at least 1");
        return ExitCode::from(2);
    }
    let mut hunts: Vec<Hunt> = Vec::new();
    let all = mutants();
    let bar = Progress::new(all.len() as u64, json, "mutants");
    for mutant in all {
        match hunt(&mutant, schedules, seed) {
            Ok(h) => {
                if !json {
                    bar.println(&line(&h));
                }
                bar.inc(1);
                hunts.push(h);
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    }
    bar.finish();
    let escaped = hunts.iter().filter(|h| !h.caught).count();
    let summary = format!(
        "{} mutants, {} caught, {escaped} escaped",
        hunts.len(),
        hunts.len() - escaped
    );
    conclude(json, &hunts, &summary, escaped > 0)
}

/// One mutant's line: caught where and how, and the replay command.
fn line(h: &Hunt) -> String {
    match (&h.scenario, &h.fault, &h.schedule, h.schedules_to_catch) {
        (Some(scenario), Some(fault), Some(schedule), Some(n)) => {
            let file = format!("fixtures/pitfalls/{scenario}.toml");
            format!(
                "caught  {:<30} by {scenario} after {n} schedules: {fault}\n        {}\n        replay: {}",
                h.name,
                h.message.as_deref().unwrap_or(""),
                replay_command(std::path::Path::new(&file), &h.name, schedule)
            )
        }
        _ => format!(
            "ESCAPED {:<30} ({}): no pitfall scenario failed in {} schedules",
            h.name, h.rule, h.schedules_run
        ),
    }
}
