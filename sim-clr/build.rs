//! Tells the crate whether a sanitizer that keeps stack bounds per OS thread (the address,
//! memory, thread or hardware-address sanitizer) instruments this build: `cfg(stack_sanitizer)`.
//! Fibers then stay on OS threads (see `fiber`).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(stack_sanitizer)");
    println!("cargo::rerun-if-env-changed=CARGO_CFG_SANITIZE");
    let sanitizers = std::env::var("CARGO_CFG_SANITIZE").unwrap_or_default();
    if sanitizers
        .split(',')
        .any(|s| matches!(s, "address" | "memory" | "thread" | "hwaddress"))
    {
        println!("cargo::rustc-cfg=stack_sanitizer");
    }
}
