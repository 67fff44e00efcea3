//! The `simclr` binary: the command line ([`simclr::main_with`]) with the built-in samplers
//! only.

#![forbid(unsafe_code)]

use sim_clr::process::HeapLockAllocator;

/// Built-in profiler code run by `explore` allocates as real code does: on a simulated thread,
/// an allocation takes the process heap lock.
#[global_allocator]
static ALLOCATOR: HeapLockAllocator<std::alloc::System> = HeapLockAllocator(std::alloc::System);

fn main() -> std::process::ExitCode {
    simclr::main_with(Vec::new())
}
