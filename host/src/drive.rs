//! Running a scenario's `[host]` steps against a hosted library: exports called by P/Invoke,
//! callbacks raised, garbage collections — the program's part — until the steps end or the
//! simulated process dies.

use crate::callback::as_runtime_thread;
use crate::Hosted;
use sim_clr::scenario::{HostAction, HostSpec};
use sim_clr::trace::Fault;
use std::ffi::{c_char, c_void, CString};

/// How the simulated process ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Every step ran.
    Completed,
    /// A fatal fault killed the process (the real one would crash, e.g. SIGSEGV).
    Crashed(String),
    /// A fatal fault hung the process (a deadlock).
    Hung(String),
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

/// `void f(const char *)`.
type ExportWithArg = unsafe extern "C" fn(*const c_char);
/// `void f(void)`.
type Export = unsafe extern "C" fn();

impl Hosted {
    /// Runs `spec`'s steps in order. Stops at the first fatal fault (the process is dead or
    /// hung from then on) and says how it ended; every fault, the non-fatal ones the process
    /// went on after too, stays for [`sim_clr::Runtime::take_faults`]. An export the library
    /// lacks, or an argument with a NUL byte, is an error before anything of that step runs.
    pub fn drive(&self, spec: &HostSpec) -> Result<Ending, String> {
        let rt = self.runtime();
        for step in &spec.steps {
            match &step.action {
                HostAction::Call { export, arg, context } => {
                    let f = self
                        .symbol(export)
                        .ok_or_else(|| format!("line {}: the library exports no `{export}`", step.line))?;
                    let arg = arg
                        .as_deref()
                        .map(CString::new)
                        .transpose()
                        .map_err(|_| format!("line {}: `arg` contains a NUL byte", step.line))?;
                    // The thread was validated with the scenario.
                    let _called = rt.on_thread(&step.thread, *context, |_| {
                        as_runtime_thread(|| match &arg {
                            // SAFETY: the scenario declares the export's signature by giving
                            // an argument or not; the C string outlives the call.
                            Some(a) => unsafe {
                                std::mem::transmute::<*mut c_void, ExportWithArg>(f)(a.as_ptr())
                            },
                            // SAFETY: as above, for `void f(void)`.
                            None => unsafe { std::mem::transmute::<*mut c_void, Export>(f)() },
                        })
                    });
                }
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
