//! `simclr unwind-check FILE…`: the native unwinder against gimli's own rows at every
//! instruction boundary of every FDE of each ELF file (a shared library, an executable).

use crate::progress::Progress;
use std::path::PathBuf;
use std::process::ExitCode;

/// The largest ELF file `unwind-check` reads.
const MAX_ELF_BYTES: u64 = 256 << 20;

/// Checks each file; exit code 1 on any refusal or disagreement, 2 if a file cannot be read.
pub fn run(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    let bar = Progress::new(files.len() as u64, false, "files");
    for file in files {
        bar.inc(1);
        let bytes = match sim_clr::input::read(file, MAX_ELF_BYTES) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        let checked = match fixtures::elf_check::check(&bytes, 0) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("error: {}: {e}", file.display());
                return ExitCode::from(2);
            }
        };
        bar.println(&format!(
            "{}: {} boundaries, {} refusals, {} disagreements",
            file.display(),
            checked.boundaries,
            checked.refusals,
            checked.disagreements
        ));
        for (class, c) in &checked.classes {
            bar.println(&format!("  {:>7}  {class}   e.g. {}", c.count, c.example));
        }
        failed |= checked.refusals + checked.disagreements > 0;
    }
    bar.finish();
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
