//! What an exploration's runs reached, as the text reports print it: the samples taken, the
//! threads sampled, and the windows reached and never reached ([`sim_clr::coverage`]).

use sim_clr::coverage::Coverage;
use std::fmt::Write;

/// Appends the lines of `coverage` to `out`.
pub fn render(out: &mut String, coverage: &Coverage) {
    let samples = &coverage.samples;
    let walks: Vec<String> = samples.walks.iter().map(|(hr, n)| format!("{hr} {n}")).collect();
    let walks = if walks.is_empty() {
        "none".to_string()
    } else {
        walks.join(", ")
    };
    writeln!(
        out,
        "reached: {} samples in {} runs (walks: {walks}; stops: {}{})",
        samples.total,
        samples.runs_sampled,
        samples.stops,
        if samples.reads > 0 {
            format!("; stack reads: {}", samples.reads)
        } else {
            String::new()
        }
    )
    .unwrap();
    if !coverage.threads.is_empty() {
        let threads: Vec<String> = (coverage.threads.iter())
            .map(|(name, runs)| format!("{name} {runs}"))
            .collect();
        writeln!(out, "  threads sampled (runs): {}", threads.join(", ")).unwrap();
    }
    let (reached, missed): (Vec<_>, Vec<_>) = coverage.windows.iter().partition(|(_, &n)| n > 0);
    let reached: Vec<String> = reached.iter().map(|(w, n)| format!("{w} {n}")).collect();
    let missed: Vec<&str> = missed.iter().map(|(w, _)| w.as_str()).collect();
    if !reached.is_empty() {
        writeln!(out, "  windows reached (runs): {}", reached.join(", ")).unwrap();
    }
    if !missed.is_empty() {
        writeln!(out, "  windows never reached: {}", missed.join(", ")).unwrap();
    }
}
