//! The C ABI (`include/simclr.h`): the header compiles as C11 and C++17 with every warning an
//! error, and a C program using it (`tests/c/capi.c`) runs against both the dynamic and the
//! static library.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// This package's static and dynamic libraries, built for the profile and target folder the
/// tests run from (`cargo test` builds only the Rust library they link): their folder.
fn libraries() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--quiet", "-p", "simclr-host", "--lib"])
        .env("CARGO_TARGET_DIR", target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    run(&mut cargo);
    profile_dir
}

fn compiler(cpp: bool) -> cc::Tool {
    let target = "x86_64-unknown-linux-gnu";
    cc::Build::new()
        .target(target)
        .host(target)
        .opt_level(0)
        .cargo_metadata(false)
        .cpp(cpp)
        .get_compiler()
}

fn run(command: &mut Command) -> String {
    let out = command.output().expect("the command runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{command:?} failed:\n{text}");
    text
}

#[test]
fn the_header_compiles_as_c11_and_cpp17_without_warnings() {
    let include = root().join("include");
    for (cpp, standard, source) in [(false, "-std=c11", "x.c"), (true, "-std=c++17", "x.cpp")] {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("header");
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join(source);
        std::fs::write(
            &file,
            "#include \"simclr.h\"\nint main(void) { simclr_string_free(0); return 0; }\n",
        )
        .unwrap();
        run(compiler(cpp)
            .to_command()
            .args([standard, "-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
            .arg(&include)
            .arg(&file));
    }
}

#[test]
fn pkg_config_gives_the_flags_that_build_a_c_program() {
    let libs = libraries();
    let root = root();
    let flags = Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", root.join("include"))
        .arg(format!("--define-variable=prefix={}", root.display()))
        .arg(format!("--define-variable=libdir={}", libs.display()))
        .args(["--cflags", "--libs", "simclr_host"])
        .output();
    let Ok(flags) = flags else {
        eprintln!("skipped: pkg-config is not installed");
        return;
    };
    assert!(flags.status.success(), "{flags:?}");
    let flags = String::from_utf8(flags.stdout).unwrap();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi");
    std::fs::create_dir_all(&out).unwrap();
    let exe = out.join("capi-pkg-config");
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/capi.c");
    run(compiler(false)
        .to_command()
        .args(["-std=c11", "-Wall", "-Werror"])
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .args(flags.split_whitespace()));
    // Without arguments it runs its in-memory checks only.
    let text = run(&mut Command::new(&exe));
    assert!(!text.contains("FAILED"), "{text}");
    assert!(
        text.lines().filter(|l| l.starts_with("ok ")).count() >= 8,
        "{text}"
    );
}

#[test]
fn a_c_program_uses_the_dynamic_and_the_static_library() {
    let libs = libraries();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi");
    std::fs::create_dir_all(&out).unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/capi.c");
    let scenario = root().join("fixtures/scenarios/sync-object-allocated.toml");
    let common = |exe: &Path| {
        let mut c = compiler(false).to_command();
        c.args(["-std=c11", "-Wall", "-Werror", "-I"])
            .arg(root().join("include"))
            .arg(&source)
            .arg("-o")
            .arg(exe);
        c
    };
    let dynamic = out.join("capi-dynamic");
    run(common(&dynamic)
        .arg(format!("-L{}", libs.display()))
        .arg(format!("-Wl,-rpath,{}", libs.display()))
        .arg("-lsimclr_host"));
    let stat = out.join("capi-static");
    run(common(&stat)
        .arg(libs.join("libsimclr_host.a"))
        .args(["-lpthread", "-ldl", "-lm"]));
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sampler = fixtures::c_library::build(&manifest.join("tests/c/sampler.c"), &out);
    for exe in [dynamic, stat] {
        let text = run(Command::new(&exe)
            .arg(&scenario)
            .arg(manifest.join("tests/c/sampler.toml"))
            .arg(&sampler));
        assert!(!text.contains("FAILED"), "{text}");
        assert_eq!(
            text.lines().filter(|l| l.starts_with("ok ")).count(),
            15,
            "{text}"
        );
        assert!(text.contains("bad.toml"), "the error names the file: {text}");
    }
}

/// The `simclr` command, built for the profile the tests run from.
fn simclr_command() -> PathBuf {
    let libs = libraries();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .args(["build", "--quiet", "-p", "simclr", "--bin", "simclr"])
        .env("CARGO_TARGET_DIR", libs.parent().unwrap());
    if libs.file_name().is_some_and(|n| n == "release") {
        cargo.arg("--release");
    }
    run(&mut cargo);
    libs.join("simclr")
}

#[test]
fn a_gtest_explores_a_library_that_terminates_and_survives_it() {
    if !Path::new("/usr/include/gtest/gtest.h").exists() {
        // CI installs GoogleTest before the tests (.ci/run): there a skip would hide a
        // missing install step.
        assert!(std::env::var_os("CI").is_none(), "GoogleTest is not installed");
        eprintln!("skipped: GoogleTest is not installed (Debian: libgtest-dev)");
        return;
    }
    let libs = libraries();
    let simclr = simclr_command();
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi");
    std::fs::create_dir_all(&out).unwrap();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let library = fixtures::c_library::build_with(
        &manifest.join("tests/c/terminating.cpp"),
        &out,
        &["-static-libstdc++", "-static-libgcc"],
    );
    let exe = out.join("capi-gtest");
    let quoted = |p: &Path| format!("\"{}\"", p.display());
    run(compiler(true)
        .to_command()
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(format!(
            "-DPROCESS_FILE={}",
            quoted(&manifest.join("tests/c/terminating.toml"))
        ))
        .arg(format!("-DLIBRARY={}", quoted(&library)))
        .arg(format!("-DSIMCLR={}", quoted(&simclr)))
        .arg(manifest.join("tests/c/capi_gtest.cpp"))
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", libs.display()))
        .arg(format!("-Wl,-rpath,{}", libs.display()))
        .args(["-lsimclr_host", "-lgtest", "-lgtest_main", "-lpthread"]));
    let text = run(&mut Command::new(&exe));
    assert!(text.contains("[  PASSED  ] 1 test"), "{text}");
}
