//! The CoreCLR profiling API contract shared by a profiler and the runtime it profiles.
//!
//! `corprof` is what a real profiler and the simulator (`sim-clr`) have in common: the
//! [`HResult`] values, the opaque ids, the flag words, the frame record, the byte-exact x64
//! [`Context`], and the two traits — [`ProfilerInfo`] (profiler→runtime) and
//! [`ProfilerCallback`] (runtime→profiler). Code written against these traits runs unchanged
//! against the simulator in tests and against a COM shim in production.
//!
//! [`os`] is the operating-system layer a sampler needs besides the profiling API (thread
//! suspension and context, signals, stack reads, mutexes, events, sleep and a clock).
//!
//! [`modules`] is the loaded-module list with each module's unwind sections, which a native
//! unwinder copies when a module appears.
//!
//! [`sync`] holds atomics a simulator can interleave threads at (plain std atomics unless the
//! `simulation` feature is on).
//!
//! [`com`] holds the same API at the COM ABI level (vtables, IIDs) for native profilers.
//!
//! With the `mock` feature, every trait has a mockall mock for unit tests that need no
//! runtime at all (`MockProfilerInfo`, `MockProfilerCallback`, `metadata::MockMetaDataImport`,
//! `os::MockThreadControl`, `os::MockSync`, `modules::MockModules`); `mock::report_frames`
//! makes a mocked `DoStackSnapshot` call the profiler's callback as the runtime does, and
//! `mock::FakeOs` is an OS layer that answers and checks every call as the simulator does.

// Only the COM ABI module (`com`) declares `unsafe` functions: the vtable slots.
#![deny(unsafe_code)]

pub mod callback;
#[allow(unsafe_code)]
pub mod com;
pub mod context;
pub mod flags;
pub mod frame_info;
pub mod hresult;
pub mod ids;
pub mod info;
pub mod metadata;
#[cfg(feature = "mock")]
pub mod mock;
pub mod modules;
pub mod os;
pub mod sync;

pub use callback::ProfilerCallback;
pub use context::{Context, Register};
pub use frame_info::FrameInfo;
pub use hresult::HResult;
pub use ids::{AppDomainId, AssemblyId, ClassId, FunctionId, MdToken, ModuleId, ObjectId, ReJitId, ThreadId};
pub use info::{CodeInfo, FunctionInfo, ProfilerInfo, SnapshotFrame, StackSnapshotCallback};
pub use metadata::MetaDataImport;

#[cfg(feature = "mock")]
pub use callback::MockProfilerCallback;
#[cfg(feature = "mock")]
pub use info::MockProfilerInfo;
