//! `simclr unwind-check FILE…`: the native unwinder against gimli's own rows at every
//! instruction boundary of every FDE of each ELF file (a shared library, an executable).

use std::path::PathBuf;
use std::process::ExitCode;

/// Checks each file; exit code 1 on any refusal or disagreement, 2 if a file cannot be read.
pub fn run(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for file in files {
        let bytes = match std::fs::read(file) {
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
        println!(
            "{}: {} boundaries, {} refusals, {} disagreements",
            file.display(),
            checked.boundaries,
            checked.refusals,
            checked.disagreements
        );
        for (class, c) in &checked.classes {
            println!("  {:>7}  {class}   e.g. {}", c.count, c.example);
        }
        failed |= checked.refusals + checked.disagreements > 0;
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
