//! Progress bars for long runs: drawn on stderr once a run has taken a second, only when both
//! stdout and stderr are terminals (never into a file, a pipe or a CI log).

use crate::out::outln;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::cell::Cell;
use std::io::IsTerminal;
use std::time::Duration;

/// How long a run goes before its bar appears.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// A progress bar that stays hidden for the first second.
pub struct Progress {
    bar: ProgressBar,
    /// False when the bar must never be drawn (`--json`, or not on a terminal).
    may_show: bool,
    shown: Cell<bool>,
}

impl Progress {
    /// A bar counting `total` `unit`s; never drawn when `quiet` (machine-readable output).
    pub fn new(total: u64, quiet: bool, unit: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "{{bar:40}} {{pos}}/{{len}} {unit}, {{elapsed}} (eta {{eta}}) {{msg}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        Progress {
            bar,
            may_show: !quiet && std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
            shown: Cell::new(false),
        }
    }

    /// Sets how many units are done.
    pub fn set_position(&self, done: u64) {
        self.bar.set_position(done);
        self.reveal();
    }

    /// Counts `n` more units done.
    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
        self.reveal();
    }

    /// Sets the text after the counts.
    pub fn set_message(&self, message: String) {
        self.bar.set_message(message);
    }

    /// Prints `line` to stdout with the bar out of its way.
    pub fn println(&self, line: &str) {
        self.bar.suspend(|| outln!("{line}"));
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// Draws the bar from now on, once the run has taken [`QUIET_FOR`].
    fn reveal(&self) {
        if self.may_show && !self.shown.get() && self.bar.elapsed() >= QUIET_FOR {
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.shown.set(true);
        }
    }
}
