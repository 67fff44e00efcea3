//! A deterministic simulated CoreCLR for testing .NET profilers' stack walkers.
//!
//! [`Runtime`] models what `ICorProfilerInfo2::DoStackSnapshot` depends on — the runtime's
//! global state, its code map, threads with their GC mode, explicit Frames, locks and
//! suspension — and answers the [`corprof::ProfilerInfo`] API as CoreCLR does (rules R1–R44 of
//! the project's specification, cited in the code). Thread stacks are materialized in a
//! simulated address space, so the runtime's walk, and a profiler's own unwinder, read real
//! return addresses from memory.
//!
//! Scenarios ([`scenario`]) describe a runtime and a sequence of calls in TOML; running one
//! gives a [`scenario::Report`] that compares every walk with the thread's ground truth.
//!
//! The modules stack in layers, each importing only lower ones: [`memory`], [`leaf_first`],
//! [`synth`], [`platform`], [`runtime_locks`], [`trace`], [`input`], [`parallel`] and
//! [`coverage`] at the bottom; then [`code`]; then [`thread`], [`fiber`] and [`spec`]; then [`runtime`] (with its
//! `DoStackSnapshot`); then [`scenario`]; and [`process`] on top.

// Only the fibers' counting allocator (`fiber`) needs `unsafe` (`GlobalAlloc`).
#![deny(unsafe_code)]

pub mod code;
pub mod coverage;
pub mod fiber;
pub mod input;
pub mod leaf_first;
pub mod memory;
pub mod parallel;
pub mod platform;
pub mod process;
pub mod runtime;
pub mod runtime_locks;
pub mod scenario;
pub mod spec;
pub mod synth;
pub mod thread;
pub mod trace;

pub use runtime::snapshot::MAX_WALK_FRAMES;
pub use runtime::{
    CallContext, CallbackKind, Notification, Platform, Runtime, RuntimeConfig, UnknownThread, Unload,
    MAX_EVENTS,
};
