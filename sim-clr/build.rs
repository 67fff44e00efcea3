//! Tells the crate whether a sanitizer instruments this build: `cfg(sanitized)`. Fibers then
//! stay on OS threads (see `fiber`): sanitizers keep per-thread state (stack bounds, a leak
//! scan's roots, a separate unsafe stack) that a fiber switched in user space would not match.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(sanitized)");
    println!("cargo::rerun-if-env-changed=CARGO_CFG_SANITIZE");
    if std::env::var("CARGO_CFG_SANITIZE").is_ok_and(|s| !s.is_empty()) {
        println!("cargo::rustc-cfg=sanitized");
    }
}
