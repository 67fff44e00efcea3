//! The team's own `simclr`: the command line with their sampler added as `team`
//! (`src/lib.rs`), so every command that takes `--sampler` runs it, and each failure prints a
//! replay command that runs this binary by its path, as printed. From this folder:
//!
//! ```text
//! cargo run --release -- explore ../../fixtures/pitfalls/s33-stack-overrun.toml --sampler team
//! cargo run --release -- explore ../../fixtures/pitfalls/s05-code-manager-lock.toml --sampler team
//! cargo run --release -- fuzz --sampler team --platform windows --processes 20
//! ```

use sim_clr::process::HeapLockAllocator;
use simclr::OwnSampler;
use std::sync::Arc;

/// Profiler code allocates as real code does: on a simulated thread, an allocation takes the
/// process heap lock.
#[global_allocator]
static ALLOCATOR: HeapLockAllocator<std::alloc::System> = HeapLockAllocator(std::alloc::System);

fn main() -> std::process::ExitCode {
    simclr::main_with(vec![OwnSampler {
        name: "team".into(),
        attach: Arc::new(team_sampler::attach),
    }])
}
