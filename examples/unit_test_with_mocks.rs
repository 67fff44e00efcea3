//! Unit-testing profiler code with no runtime at all: `MockProfilerInfo` (feature `mock` of
//! `corprof`) stands in for the runtime, and `corprof::mock::report_frames` makes its
//! `DoStackSnapshot` call the profiler's callback the way the runtime does.
//!
//! Run it with `cargo run --example unit_test_with_mocks`.

use corprof::mock::report_frames;
use corprof::{FunctionId, HResult, MockProfilerInfo, ProfilerInfo, SnapshotFrame, ThreadId};

/// The code under test: collects at most `limit` frames, stopping the walk when full (a
/// callback returning anything but `S_OK` aborts it).
fn collect(info: &dyn ProfilerInfo, thread: ThreadId, limit: usize) -> (Vec<u64>, HResult) {
    let mut ips = Vec::new();
    let mut callback = |f: &SnapshotFrame<'_>| {
        if ips.len() == limit {
            return HResult::S_FALSE;
        }
        ips.push(f.ip);
        HResult::S_OK
    };
    let hr = info.do_stack_snapshot(thread, Some(&mut callback), 0, None, 0);
    (ips, hr)
}

fn main() {
    let frames = [
        (FunctionId(0x7ff0_0010), 0x1000),
        (FunctionId::NULL, 0x2000),
        (FunctionId(0x7ff0_0020), 0x3000),
    ];
    let mut info = MockProfilerInfo::new();
    info.expect_do_stack_snapshot()
        .withf(|thread, _, _, _, _| *thread == ThreadId(7))
        .returning(move |_thread, callback, _flags, _seed, _size| report_frames(callback, &frames));

    let (ips, hr) = collect(&info, ThreadId(7), 8);
    assert_eq!(
        (ips.as_slice(), hr),
        ([0x1000, 0x2000, 0x3000].as_slice(), HResult::S_OK)
    );
    println!("room for every frame: {ips:x?}, {hr}");

    let (ips, hr) = collect(&info, ThreadId(7), 2);
    assert_eq!(
        (ips.as_slice(), hr),
        (
            [0x1000, 0x2000].as_slice(),
            HResult::CORPROF_E_STACKSNAPSHOT_ABORTED
        )
    );
    println!("room for two: {ips:x?}, {hr} (the walk was aborted, as the runtime does)");
}
