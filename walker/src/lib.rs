//! The profiler side of stack walking, written only against the `corprof` API so that it can
//! ship inside a real profiler (it never depends on the simulator).
//!
//! [`snapshot`] collects what `DoStackSnapshot` reports into a preallocated [`StackBuffer`]:
//! managed frames, and native runs (`funcId == 0`) with the context a native unwinder needs to
//! expand them. Collecting never allocates once the buffer exists, because an asynchronous walk
//! runs while its target is suspended and may hold the heap lock.

pub mod snapshot;

pub use snapshot::{snapshot, Frame, StackBuffer, WalkOutcome};
