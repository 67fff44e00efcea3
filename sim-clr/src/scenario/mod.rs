//! Scenario files: a runtime, its threads and a sequence of profiler calls, in TOML.
//!
//! [`Scenario::parse`] reads and validates a file (every error names the file, line and
//! field); [`Scenario::run`] builds a fresh [`crate::Runtime`], performs the calls through the
//! [`corprof::ProfilerInfo`] trait and returns a [`Report`]. The format is documented field by
//! field in `docs/scenario-format.md`.

mod build;
mod calls;
mod churn;
mod error;
mod exec;
mod fail;
mod functions;
mod host;
mod model;
pub mod names;
mod process;
mod report;
mod templates;
mod threads;
mod types;

pub use crate::spec::program::{ExportArg, ExportCall, MAX_EXPORT_ARGS};
pub use error::{printable, ScenarioError};
pub use host::{HostAction, HostSpec, HostStep, MAX_HOST_STEPS};
pub use report::{
    cut, CallReport, EventReport, Expectations, FaultReport, FrameReport, Mismatch, Report, TruthEntry,
};
pub use templates::{Template, TEMPLATES};
pub use types::{
    Action, ApiCall, Call, CallbackBehavior, FunctionRef, IpRef, NestedAt, Scenario, Seed, SeedBase,
    SeedValue, Target, MAX_CALLS, MAX_FILE_BYTES, MAX_FRAMES, MAX_FUNCTIONS, MAX_NAMES, MAX_NESTED_CALLS,
    MAX_THREADS, MAX_WALKED_FRAMES, NATIVE_RUN,
};
