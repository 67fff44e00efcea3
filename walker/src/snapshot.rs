//! Collecting one `DoStackSnapshot` walk into a fixed-capacity buffer.

use corprof::flags::snapshot::REGISTER_CONTEXT;
use corprof::{Context, FunctionId, HResult, ProfilerInfo, SnapshotFrame, ThreadId};

/// One frame of a collected stack, leaf first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A managed frame.
    Managed {
        /// The method.
        function: FunctionId,
        /// Its instruction pointer (the leaf IP or a return address).
        ip: u64,
    },
    /// A run of native frames the runtime reported once (`funcId == 0`); its context — the
    /// registers of the run's most recent frame, where a native unwind starts — is
    /// [`StackBuffer::context`]`(index)`.
    NativeRun {
        /// The return address into the run.
        ip: u64,
        /// Index of the run's registers in the buffer, when contexts were requested.
        context: Option<usize>,
    },
}

/// Which frames' registers a walk keeps ([`snapshot`] asks the runtime for a CONTEXT per
/// frame, `COR_PRF_SNAPSHOT_REGISTER_CONTEXT`, unless `None`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contexts {
    /// None: the runtime is not asked for them.
    None,
    /// The native runs' (`funcId == 0`): where their native unwinding starts.
    NativeRuns,
}

/// A preallocated stack buffer: filling it never allocates.
#[derive(Debug)]
pub struct StackBuffer {
    frames: Vec<Frame>,
    contexts: Vec<Context>,
    used_contexts: usize,
    capacity: usize,
    truncated: bool,
}

impl StackBuffer {
    /// A buffer for up to `capacity` frames, of which up to `capacity / 2 + 1` native runs can
    /// keep their context (runs alternate with managed frames).
    pub fn with_capacity(capacity: usize) -> StackBuffer {
        let runs = capacity / 2 + 1;
        StackBuffer {
            frames: Vec::with_capacity(capacity),
            contexts: vec![Context::zeroed(); runs],
            used_contexts: 0,
            capacity,
            truncated: false,
        }
    }

    /// The frames of the last walk, leaf first.
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// True when the last walk had more frames than the buffer holds.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The registers of a native run (the `context` index of [`Frame::NativeRun`]).
    pub fn context(&self, index: usize) -> &Context {
        &self.contexts[index]
    }

    /// Empties the buffer for the next walk, keeping its allocations.
    pub fn clear(&mut self) {
        self.frames.clear();
        self.used_contexts = 0;
        self.truncated = false;
    }

    fn push(&mut self, f: &SnapshotFrame<'_>) -> HResult {
        if self.frames.len() == self.capacity {
            self.truncated = true;
            return HResult::S_FALSE;
        }
        let frame = if f.func_id.is_null() {
            let slot = self.used_contexts;
            let read = match (f.context, self.contexts.get_mut(slot)) {
                (Some(bytes), Some(place)) => place.read_bytes(bytes),
                _ => false,
            };
            self.used_contexts += usize::from(read);
            Frame::NativeRun {
                ip: f.ip,
                context: read.then_some(slot),
            }
        } else {
            Frame::Managed {
                function: f.func_id,
                ip: f.ip,
            }
        };
        self.frames.push(frame);
        HResult::S_OK
    }
}

/// How a walk ended, when it produced a usable stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkOutcome {
    /// The whole stack is in the buffer.
    Complete,
    /// The buffer filled up; the stack is cut (the walk was aborted on purpose).
    Truncated,
}

/// Walks `thread` (0 = the calling thread) with `DoStackSnapshot` into `buffer`, keeping the
/// `contexts` asked for.
///
/// A walk aborted because the buffer was full counts as a success ([`WalkOutcome::Truncated`]);
/// any other failure returns the runtime's HRESULT, with whatever frames arrived before it
/// left in the buffer.
pub fn snapshot(
    info: &dyn ProfilerInfo,
    thread: ThreadId,
    seed: Option<&Context>,
    contexts: Contexts,
    buffer: &mut StackBuffer,
) -> Result<WalkOutcome, HResult> {
    buffer.clear();
    let flags = if contexts == Contexts::None {
        0
    } else {
        REGISTER_CONTEXT
    };
    let size = if seed.is_some() { Context::SIZE as u32 } else { 0 };
    let mut callback = |f: &SnapshotFrame<'_>| buffer.push(f);
    let hr = info.do_stack_snapshot(thread, Some(&mut callback), flags, seed, size);
    match hr {
        HResult::S_OK => Ok(WalkOutcome::Complete),
        HResult::CORPROF_E_STACKSNAPSHOT_ABORTED if buffer.truncated => Ok(WalkOutcome::Truncated),
        other => Err(other),
    }
}
