//! The collector against a mockall mock of `ProfilerInfo`: no runtime needed. This is the
//! pattern for a profiler author's own unit tests.

use corprof::mock::report_frames;
use corprof::{FunctionId, HResult, MockProfilerInfo, ThreadId};
use simclr_walker::{snapshot, Contexts, Frame, StackBuffer, WalkOutcome};

/// A mock whose walk reports `frames` (funcId, ip) and returns what the runtime would.
fn mock_reporting(frames: Vec<(u64, u64)>) -> MockProfilerInfo {
    let frames: Vec<(FunctionId, u64)> = frames.into_iter().map(|(f, ip)| (FunctionId(f), ip)).collect();
    let mut info = MockProfilerInfo::new();
    info.expect_do_stack_snapshot()
        .returning(move |_thread, callback, _flags, _seed, _size| report_frames(callback, &frames));
    info
}

#[test]
fn collects_managed_frames_and_native_runs() {
    let info = mock_reporting(vec![(0x10, 0x1000), (0, 0x2000), (0x20, 0x3000)]);
    let mut buffer = StackBuffer::with_capacity(8);
    assert_eq!(
        snapshot(&info, ThreadId(7), None, Contexts::None, &mut buffer),
        Ok(WalkOutcome::Complete)
    );
    assert_eq!(
        buffer.frames(),
        [
            Frame::Managed {
                function: FunctionId(0x10),
                ip: 0x1000
            },
            Frame::NativeRun {
                ip: 0x2000,
                context: None
            },
            Frame::Managed {
                function: FunctionId(0x20),
                ip: 0x3000
            },
        ]
    );
}

#[test]
fn a_full_buffer_truncates_instead_of_failing() {
    let info = mock_reporting((1..=10).map(|i| (i, i * 0x100)).collect());
    let mut buffer = StackBuffer::with_capacity(4);
    assert_eq!(
        snapshot(&info, ThreadId(7), None, Contexts::None, &mut buffer),
        Ok(WalkOutcome::Truncated)
    );
    assert_eq!(buffer.frames().len(), 4);
    assert!(buffer.truncated());
}

#[test]
fn runtime_failures_are_returned() {
    let mut info = MockProfilerInfo::new();
    info.expect_do_stack_snapshot()
        .times(1)
        .returning(|_, _, _, _, _| HResult::E_NOTIMPL);
    let mut buffer = StackBuffer::with_capacity(4);
    assert_eq!(
        snapshot(&info, ThreadId(7), None, Contexts::None, &mut buffer),
        Err(HResult::E_NOTIMPL)
    );
}
