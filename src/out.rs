//! The command's standard output, written without ever panicking or dying of a signal.
//!
//! A reader that goes away early (`simclr list | head -1`) is not an error: nothing more is
//! written, the command runs to its end and exits with its own verdict. Any other failure to
//! write (a full disk) is reported once on stderr, and the command exits 2.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering};

/// Whether stdout still takes output: [`OPEN`], [`CLOSED`] or [`FAILED`].
static STATE: AtomicU8 = AtomicU8::new(OPEN);
const OPEN: u8 = 0;
/// The reader went away (a broken pipe).
const CLOSED: u8 = 1;
/// A write failed otherwise.
const FAILED: u8 = 2;

/// Writes `text` to stdout, unless an earlier write found it closed or failing.
pub fn write(text: std::fmt::Arguments<'_>) {
    // `Stdout` reports its own failures and never returns one.
    let _ = Stdout.write_fmt(text);
}

/// Writes `value` as one pretty-printed JSON document and a newline, streamed: the document
/// is never whole in memory. A value that cannot be serialized is an error (nothing about the
/// output is).
pub fn json(value: &impl serde::Serialize) -> serde_json::Result<()> {
    let mut out = std::io::BufWriter::new(Stdout);
    serde_json::to_writer_pretty(&mut out, value)?;
    let _ = out.write_all(b"\n").and_then(|()| out.flush());
    Ok(())
}

/// Stdout as an `io::Write` whose failures are [`failed`]'s, never the writer's caller's.
struct Stdout;

impl Write for Stdout {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        if STATE.load(Ordering::Relaxed) == OPEN {
            if let Err(e) = std::io::stdout().lock().write_all(bytes) {
                failed(&e);
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn failed(e: &std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        STATE.store(CLOSED, Ordering::Relaxed);
    } else if STATE.swap(FAILED, Ordering::Relaxed) != FAILED {
        eprintln!("error: cannot write the output: {e}");
    }
}

/// The command's exit status once its output is flushed: `code`, or 2 when writing failed.
pub fn finish(code: ExitCode) -> ExitCode {
    if STATE.load(Ordering::Relaxed) == OPEN {
        if let Err(e) = std::io::stdout().lock().flush() {
            failed(&e);
        }
    }
    if STATE.load(Ordering::Relaxed) == FAILED {
        ExitCode::from(2)
    } else {
        code
    }
}

/// `println!` through [`write()`].
macro_rules! outln {
    () => {
        $crate::out::write(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` through [`write()`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*))
    };
}

pub(crate) use {out, outln};
