//! Builds the ThreadSanitizer stand-in (`src/interpose/tsan.c`) that hosting loads before a
//! library built with `-fsanitize=thread`: one shared library per soname the compilers link
//! against, embedded in the crate (x86-64 Linux only, where hosting redirects imports).

use std::path::PathBuf;

/// The sonames of the ThreadSanitizer runtime: GCC 11 and before link `libtsan.so.0`, GCC 12
/// and after `libtsan.so.2`.
const SONAMES: [&str; 2] = ["libtsan.so.0", "libtsan.so.2"];

fn main() {
    println!("cargo:rerun-if-changed=src/interpose/tsan.c");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    if os != "linux" || arch != "x86_64" {
        return;
    }
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let compiler = cc::Build::new().cargo_metadata(false).get_compiler();
    for soname in SONAMES {
        let library = out.join(format!("{soname}.stand-in"));
        let status = compiler
            .to_command()
            .args([
                "-shared",
                "-fPIC",
                "-O2",
                "-fexceptions",
                "-std=c11",
                "-Wall",
                "-Werror",
                "-Wno-unused-parameter",
            ])
            .arg(format!("-Wl,-soname,{soname}"))
            .arg("-o")
            .arg(&library)
            .arg("src/interpose/tsan.c")
            .status()
            .unwrap_or_else(|e| panic!("running the C compiler for the ThreadSanitizer stand-in: {e}"));
        assert!(status.success(), "the C compiler failed on src/interpose/tsan.c");
    }
}
