//! `simclr run FILE --profiler LIB.so`: a native profiler library hosted in the scenario's
//! runtime and driven by the scenario's `[host]` steps, as the program would drive it.
//!
//! The simulated process ends as the real one would: when a call of the library kills it (a
//! fatal fault), this process ends at once with `EXIT_CRASH` or `EXIT_HANG`, so nothing the
//! library would never have done afterwards happens.

use crate::out::outln;
use crate::{EXIT_CRASH, EXIT_HANG};
use corprof::com::Guid;
use host::{Ending, Hosted};
use sim_clr::runtime::RuntimeVersion;
use sim_clr::scenario::Scenario;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

/// Hosts `library` (class `clsid`) in `file`'s runtime and runs its `[host]` steps.
/// Answers as `runtime` when it is given, whatever the file says.
pub fn run(file: &Path, library: &Path, clsid: &str, runtime: Option<RuntimeVersion>) -> ExitCode {
    let clsid = match guid(clsid) {
        Ok(g) => g,
        Err(code) => return code,
    };
    let scenario = match Scenario::load_as(file, runtime) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if scenario.host.steps.is_empty() {
        eprintln!(
            "error: {}: no [[host.steps]]: nothing would call the library",
            file.display()
        );
        return ExitCode::from(2);
    }
    for (name, value) in &scenario.host.env {
        // Set before the library is loaded, while this process runs one thread.
        std::env::set_var(name, value);
    }
    let runtime = Arc::new(scenario.runtime());
    let hosted = match Hosted::load(library, clsid, runtime.clone()) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    hosted.on_fatal(|fault| {
        let (ending, code) = if fault.kind.hangs() {
            ("hung", EXIT_HANG)
        } else {
            ("crashed", EXIT_CRASH)
        };
        eprintln!("simclr: the simulated process {ending}: {fault}");
        std::process::exit(i32::from(code));
    });
    let ending = match hosted.drive(&scenario.host) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    for event in runtime.take_events() {
        outln!("event {} on {}", event.kind, event.on);
    }
    for misuse in hosted.misuse() {
        outln!("misuse: {misuse}");
    }
    // Faults the process went on after: the profiler's bugs all the same, printed.
    let faults: Vec<_> = runtime.take_faults().into_iter().filter(|f| !f.fatal).collect();
    for fault in &faults {
        outln!("fault: {fault}");
    }
    let steps = scenario.host.steps.len();
    match ending {
        Ending::Completed if faults.is_empty() => {
            outln!("{}: {steps} steps ran; the process completed", scenario.name);
            ExitCode::SUCCESS
        }
        // The real process would have lived on too: its exit is the same.
        Ending::Completed => {
            outln!(
                "{}: {steps} steps ran; the process completed, after {} fault(s) it survived",
                scenario.name,
                faults.len()
            );
            ExitCode::SUCCESS
        }
        Ending::Crashed(why) => {
            outln!("{}: the simulated process crashed: {why}", scenario.name);
            ExitCode::from(EXIT_CRASH)
        }
        Ending::Hung(why) => {
            outln!("{}: the simulated process hung: {why}", scenario.name);
            ExitCode::from(EXIT_HANG)
        }
        Ending::Unexpected(why) => {
            outln!("{}: {why}", scenario.name);
            ExitCode::from(1)
        }
    }
}

/// `--clsid`'s GUID, or (exit 2) why it is not one.
fn guid(clsid: &str) -> Result<Guid, ExitCode> {
    Guid::parse(clsid).ok_or_else(|| {
        eprintln!("error: --clsid `{clsid}` is not a GUID such as {{8A4B6C2D-1E3F-4A5B-9C8D-7E6F5A4B3C2D}}");
        ExitCode::from(2)
    })
}

/// Hosts `library` (class `clsid`) afresh in every run of `process`: each run in a worker
/// process of its own with `isolation`'s wall-clock timeout (Linux), else in this process; or
/// (exit 2) why it cannot.
pub fn loader(
    process: &mut sim_clr::process::Process,
    library: &Path,
    clsid: &str,
    isolation: Option<std::time::Duration>,
) -> Result<(), ExitCode> {
    let clsid = guid(clsid)?;
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let loader = match isolation {
        #[cfg(target_os = "linux")]
        Some(timeout) => {
            let forked = host::isolation::Forked::new(library, timeout).map_err(fail)?;
            let loader = host::isolated_loader(library, clsid, &forked).map_err(|e| fail(e.to_string()))?;
            process.isolate(Arc::new(forked));
            loader
        }
        _ => host::loader(library, clsid).map_err(|e| fail(e.to_string()))?,
    };
    process.load(loader);
    Ok(())
}
