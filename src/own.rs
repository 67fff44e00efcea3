//! Samplers of one's own: a binary built on this crate ([`crate::main_with`]) names them, and
//! `--sampler NAME` runs them where the built-in ones run (`explore`, `replay`, `fuzz`).

use std::sync::{Arc, OnceLock};

/// Puts a sampler's code on the profiler threads of a process: its bodies with
/// `Process::thread_body` (every thread whose `body` the scenario names: `sampler`,
/// `watchdog`, … in the pitfalls; in a random process of `fuzz` also `canary-sampler`,
/// `runtime-sampler`, `signal-sampler` and `exporter`, whichever the generator drew), its
/// callbacks with `Process::profiler`, its signal handler with `Process::signal_handler`.
/// An error (a body it has no code for) ends the command with exit 2, naming the file.
pub type Attach = dyn Fn(&mut sim_clr::process::Process) -> Result<(), String> + Send + Sync;

/// A sampler of one's own, by name.
#[derive(Clone)]
pub struct OwnSampler {
    /// What `--sampler` calls it (not `reference` nor a mutant's name).
    pub name: String,
    /// How it is put into a process.
    pub attach: Arc<Attach>,
}

/// The samplers [`crate::main_with`] was given.
static OWN: OnceLock<Vec<OwnSampler>> = OnceLock::new();

/// Makes `samplers` known by name; an error if a name is taken or given twice.
pub(crate) fn install(samplers: Vec<OwnSampler>) -> Result<(), String> {
    check(&samplers)?;
    OWN.set(samplers)
        .map_err(|_| "the samplers were already given".to_string())
}

/// An error if a name of `samplers` is a built-in sampler's or given twice.
fn check(samplers: &[OwnSampler]) -> Result<(), String> {
    for (i, s) in samplers.iter().enumerate() {
        if fixtures::sampling::variant(&s.name).is_some() {
            return Err(format!("a built-in sampler is already named `{}`", s.name));
        }
        if samplers[..i].iter().any(|t| t.name == s.name) {
            return Err(format!("two samplers are named `{}`", s.name));
        }
    }
    Ok(())
}

/// The sampler of one's own named `name`.
pub(crate) fn find(name: &str) -> Option<&'static OwnSampler> {
    OWN.get()?.iter().find(|s| s.name == name)
}

/// The names of the samplers of one's own.
pub(crate) fn names() -> Vec<&'static str> {
    OWN.get()
        .map_or_else(Vec::new, |all| all.iter().map(|s| s.name.as_str()).collect())
}

/// What a replay command must call to run this program: `simclr` for simclr itself (as its
/// users install it), else (a team's own binary built with its samplers, which nothing puts
/// on the PATH) the path of the running executable, so the printed line runs as it is.
pub(crate) fn program() -> String {
    let name = std::env::args_os().next().and_then(|arg0| {
        let path = std::path::PathBuf::from(arg0);
        Some(path.file_name()?.to_string_lossy().into_owned())
    });
    match name {
        Some(name) if name != "simclr" => {
            std::env::current_exe().map_or(name, |exe| exe.display().to_string())
        }
        _ => "simclr".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> OwnSampler {
        OwnSampler {
            name: name.into(),
            attach: Arc::new(|_| Ok(())),
        }
    }

    #[test]
    fn names_are_new_and_distinct() {
        assert_eq!(check(&[named("team"), named("other")]), Ok(()));
        let taken = check(&[named("no-watchdog")]).unwrap_err();
        assert!(taken.contains("built-in"), "{taken}");
        assert!(check(&[named("reference")]).is_err());
        let twice = check(&[named("team"), named("team")]).unwrap_err();
        assert!(twice.contains("two samplers"), "{twice}");
    }
}
