//! Test doubles for profiler code (feature `mock`): [`report_frames`], a mocked
//! `DoStackSnapshot` for [`MockProfilerInfo`](crate::MockProfilerInfo) that calls the
//! profiler's callback as the runtime does, and [`FakeOs`], an operating system that answers
//! and checks the OS layer's calls as the simulator does.

mod fake_os;

pub use fake_os::{FakeOs, FakeThread, Misuse, SAMPLER_THREAD};

use crate::{FrameInfo, FunctionId, HResult, SnapshotFrame, StackSnapshotCallback};

/// Reports `frames` (`funcId`, ip; `funcId == 0` for a native run), leaf first, to `callback`
/// the way the runtime does: one call per frame, each with its frame info and no CONTEXT; the
/// first return other than `S_OK` aborts the walk with `CORPROF_E_STACKSNAPSHOT_ABORTED`;
/// `S_OK` once every frame is reported. A NULL callback with frames to report is
/// `E_UNEXPECTED` (the runtime catches the access violation on Windows).
///
/// ```
/// use corprof::{mock::report_frames, FunctionId, HResult, MockProfilerInfo, ProfilerInfo, ThreadId};
///
/// let mut info = MockProfilerInfo::new();
/// let frames = [(FunctionId(0x10), 0x1000), (FunctionId::NULL, 0x2000)];
/// info.expect_do_stack_snapshot()
///     .returning(move |_thread, callback, _flags, _seed, _size| report_frames(callback, &frames));
/// // A profiler's callback that stops at the first native run.
/// let mut seen = Vec::new();
/// let mut callback = |f: &corprof::SnapshotFrame<'_>| {
///     seen.push(f.ip);
///     if f.func_id.is_null() { HResult::S_FALSE } else { HResult::S_OK }
/// };
/// let hr = info.do_stack_snapshot(ThreadId(7), Some(&mut callback), 0, None, 0);
/// assert_eq!(hr, HResult::CORPROF_E_STACKSNAPSHOT_ABORTED);
/// assert_eq!(seen, [0x1000, 0x2000]);
/// ```
pub fn report_frames(
    callback: Option<&mut StackSnapshotCallback<'_>>,
    frames: &[(FunctionId, u64)],
) -> HResult {
    if frames.is_empty() {
        // A walk that stops nowhere.
        return HResult::E_FAIL;
    }
    let Some(callback) = callback else {
        return HResult::E_UNEXPECTED;
    };
    for &(func_id, ip) in frames {
        let frame_info = FrameInfo::for_snapshot(func_id, ip);
        let frame = SnapshotFrame {
            func_id,
            ip,
            frame_info: &frame_info,
            context: None,
        };
        if callback(&frame) != HResult::S_OK {
            return HResult::CORPROF_E_STACKSNAPSHOT_ABORTED;
        }
    }
    HResult::S_OK
}
