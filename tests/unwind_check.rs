//! The DWARF unwinder against gimli's own rows on real ELF files: the committed gcc fixture
//! (at its link address and loaded elsewhere) and this machine's C and C++ runtime libraries,
//! where they exist.

use fixtures::elf_check::check;
use std::path::Path;

#[test]
fn the_gcc_fixture_agrees_with_gimli_at_any_load_address() {
    for bias in [0, 0x7f12_3450_0000] {
        let checked = check(fixtures::elf::UNWIND_SAMPLE, bias).unwrap();
        assert!(checked.boundaries > 100, "{checked:?}");
        assert_eq!(
            (checked.refusals, checked.disagreements),
            (0, 0),
            "{:#?}",
            checked.classes
        );
    }
}

#[test]
fn system_libraries_agree_with_gimli() {
    let files = [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/lib/x86_64-linux-gnu/libstdc++.so.6",
        "/lib/x86_64-linux-gnu/libgcc_s.so.1",
        "/lib64/ld-linux-x86-64.so.2",
    ];
    for file in files {
        let Ok(bytes) = std::fs::read(Path::new(file)) else {
            println!("skipped: {file} is not on this machine");
            continue;
        };
        let checked = check(&bytes, 0).unwrap();
        assert!(checked.boundaries > 1000, "{file}: {checked:?}");
        assert_eq!(
            (checked.refusals, checked.disagreements),
            (0, 0),
            "{file}: {:#?}",
            checked.classes
        );
    }
}

#[test]
fn what_is_not_an_elf_file_is_an_error() {
    assert!(check(b"not an elf file", 0).is_err());
    assert!(check(&fixtures::elf::UNWIND_SAMPLE[..64], 0).is_err());
}
