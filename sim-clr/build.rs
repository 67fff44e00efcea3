//! Decides how fibers are carried (see `fiber`): `cfg(user_space_fibers)` on x86-64 Linux when
//! no sanitizer instruments the build. Elsewhere each fiber is an OS thread: sanitizers keep
//! per-thread state (stack bounds, a leak scan's roots, a separate unsafe stack) that a fiber
//! switched in user space would not match.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(user_space_fibers)");
    println!("cargo::rerun-if-env-changed=CARGO_CFG_SANITIZE");
    let cfg = |name: &str| std::env::var(format!("CARGO_CFG_{name}")).unwrap_or_default();
    if cfg("TARGET_ARCH") == "x86_64" && cfg("TARGET_OS") == "linux" && cfg("SANITIZE").is_empty() {
        println!("cargo::rustc-cfg=user_space_fibers");
    }
}
