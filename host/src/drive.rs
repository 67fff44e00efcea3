//! Running a scenario's `[host]` steps against a hosted library: exports called by P/Invoke,
//! callbacks raised, garbage collections — the program's part — until the steps end or the
//! simulated process dies.

use crate::callback::as_runtime_thread;
use crate::Hosted;
use sim_clr::scenario::{ExportArg, HostAction, HostSpec, MAX_EXPORT_ARGS};
use sim_clr::trace::Fault;
use std::ffi::{c_void, CString};

/// How the simulated process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every step ran.
    Completed,
    /// A fatal fault killed the process (the real one would crash, e.g. SIGSEGV).
    Crashed(String),
    /// A fatal fault hung the process (a deadlock).
    Hung(String),
    /// An export returned another value than its step's `expect` (the steps stop there).
    Unexpected(String),
}

impl Ending {
    /// The ending a fatal fault gives.
    pub fn of(fault: &Fault) -> Ending {
        if fault.kind.hangs() {
            Ending::Hung(fault.to_string())
        } else {
            Ending::Crashed(fault.to_string())
        }
    }
}

/// An export called with up to six integer or pointer arguments, in the integer registers
/// of the x86-64 C ABI: a function of fewer parameters ignores the rest, and the value in
/// `rax` is its result (meaningless for a `void` one, which no step expects a value of).
type Export = unsafe extern "C-unwind" fn(u64, u64, u64, u64, u64, u64) -> u64;

/// Calls export `f` with `args` (integers as they are, strings as pointers to NUL-terminated
/// copies that live for the call; a string with a NUL byte is cut there); what it returned.
///
/// # Safety
/// `f` is an export of a loaded library that takes such arguments.
pub(crate) unsafe fn call_export(f: *mut c_void, args: &[ExportArg]) -> u64 {
    let strings: Vec<CString> = args
        .iter()
        .filter_map(|a| a.text())
        .map(|text| CString::new(text.split('\0').next().unwrap_or_default()).unwrap_or_default())
        .collect();
    let mut words = [0u64; MAX_EXPORT_ARGS];
    let mut next_string = strings.iter();
    for (word, arg) in words.iter_mut().zip(args) {
        *word = match arg {
            ExportArg::Int(n) => *n as u64,
            ExportArg::Str(_) => next_string.next().map_or(0, |s| s.as_ptr() as u64),
        };
    }
    let [a, b, c, d, e, g] = words;
    // SAFETY: per the contract; the strings outlive the call.
    unsafe { std::mem::transmute::<*mut c_void, Export>(f)(a, b, c, d, e, g) }
}

impl Hosted {
    /// Runs `spec`'s steps in order. Stops at the first fatal fault (the process is dead or
    /// hung from then on) and says how it ended; every fault, the non-fatal ones the process
    /// went on after too, stays for [`sim_clr::Runtime::take_faults`]; stops too at the first
    /// export that returns another value than its step expects. An export the library lacks
    /// is an error before anything of that step runs.
    pub fn drive(&self, spec: &HostSpec) -> Result<Ending, String> {
        let rt = self.runtime();
        for step in &spec.steps {
            match &step.action {
                HostAction::Call {
                    export,
                    args,
                    expect,
                    context,
                } => {
                    let f = self
                        .symbol(export)
                        .ok_or_else(|| format!("line {}: the library exports no `{export}`", step.line))?;
                    // The thread was validated with the scenario.
                    let returned = rt.on_thread(&step.thread, *context, |_| {
                        // SAFETY: the scenario declares the export's arguments.
                        as_runtime_thread(|| unsafe { call_export(f, args) })
                    });
                    if let (Some(want), Ok(got)) = (expect, returned) {
                        if got as i64 != *want {
                            return Ok(Ending::Unexpected(format!(
                                "line {}: `{export}` returned {}, the step expects {want}",
                                step.line, got as i64
                            )));
                        }
                    }
                }
                HostAction::Sleep(duration) => std::thread::sleep(*duration),
                HostAction::Raise { callback, class } => {
                    rt.raise_allocation_of(&step.thread, *callback, *class);
                }
                HostAction::Gc => {
                    rt.collect_garbage(&step.thread);
                }
                HostAction::Unload(unload) => {
                    rt.unload(&step.thread, unload);
                }
            }
            if let Some(fatal) = rt.fatal_fault() {
                return Ok(Ending::of(&fatal));
            }
        }
        Ok(Ending::Completed)
    }
}
