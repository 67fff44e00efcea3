//! The profiler side of stack walking, written only against the `corprof` API so that it can
//! ship inside a real profiler (it never depends on the simulator).
//!
//! [`snapshot()`] collects what `DoStackSnapshot` reports into a preallocated [`StackBuffer`]:
//! managed frames, and native runs (`funcId == 0`) with the context a native unwinder needs to
//! expand them. Collecting never allocates once the buffer exists, because an asynchronous walk
//! runs while its target is suspended and may hold the heap lock.
//!
//! [`unwind`] walks native frames: one step from a frame's registers to its caller's, from
//! DWARF CFI or Windows unwind info, with memory reads supplied by the caller. [`images`]
//! copies each loaded module's unwind sections from the module list, once.
//!
//! [`hybrid`] puts them together: the walk of a thread stopped at any instruction, native
//! frames unwound down to managed code, `DoStackSnapshot` seeded there, its native runs
//! expanded — one merged stack.
//!
//! [`sampler`] is a whole sampler built on them: its thread, its registry of threads fed by
//! the runtime's callbacks, suspension or signals, the watchdog.

#![forbid(unsafe_code)]

pub mod hybrid;
pub mod images;
pub mod sampler;
pub mod snapshot;
pub mod unwind;

pub use snapshot::{snapshot, Contexts, Frame, StackBuffer, WalkOutcome};
