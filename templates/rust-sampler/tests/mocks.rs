//! The team's sample code with no runtime and no simulated process: `FakeOs` (feature `mock`
//! of `corprof`) answers as the simulator's OS layer does and records every rule a call
//! breaks; `MockProfilerInfo` stands in for the runtime, and is never reached on these paths.

use corprof::mock::{report_frames, FakeOs, FakeThread};
use corprof::os::OsThread;
use corprof::{Context, HResult, MockProfilerInfo, ThreadId};
use team_sampler::sample_one;
use walker::hybrid::HybridWalker;
use walker::images::Images;

const TARGET: OsThread = OsThread(7);

fn context() -> Context {
    Context {
        rsp: 0x1000_0f00,
        rip: 0x7f00_0000_1000,
        ..Default::default()
    }
}

/// `sample_one` of `TARGET` on `os`: whether it sampled, and whether it stopped the target.
fn sample(os: &FakeOs) -> (bool, bool) {
    let images = Images::load(os).unwrap();
    let unwinder = images.unwinder().unwrap();
    let info = MockProfilerInfo::new();
    let mut walker = HybridWalker::with_capacity(16);
    let mut stopped = false;
    let sampled = sample_one(
        os,
        &info,
        &unwinder,
        &mut walker,
        (ThreadId(1), TARGET),
        &mut || stopped = true,
    );
    (sampled.is_some(), stopped)
}

#[test]
fn a_thread_whose_context_cannot_be_read_is_resumed_once() {
    let mut thread = FakeThread::new(context(), (0x1000_0000, 0x1000_1000));
    thread.context_fails = true;
    let os = FakeOs::new().with_thread(TARGET, thread);
    assert_eq!(sample(&os), (false, false));
    assert_eq!(os.suspend_count(TARGET), 0, "suspended and resumed once");
    assert!(os.misuses().is_empty(), "{:?}", os.misuses());
}

#[test]
fn a_sample_leaves_the_thread_resumed_and_reads_only_its_stack() {
    // A native leaf with no unwind data: the walk stops there with a marker. The runtime is
    // asked what the IP is (not managed code) and walks the thread's managed frames (none).
    let os = FakeOs::new().with_thread(TARGET, FakeThread::new(context(), (0x1000_0000, 0x1000_1000)));
    let images = Images::load(&os).unwrap();
    let unwinder = images.unwinder().unwrap();
    let mut info = MockProfilerInfo::new();
    info.expect_get_function_from_ip3()
        .returning(|_| Err(HResult::E_FAIL));
    info.expect_do_stack_snapshot()
        .returning(|_, callback, _, _, _| report_frames(callback, &[]));
    let mut walker = HybridWalker::with_capacity(16);
    let mut stops = 0;
    let sampled = sample_one(
        &os,
        &info,
        &unwinder,
        &mut walker,
        (ThreadId(1), TARGET),
        &mut || stops += 1,
    );
    assert!(sampled.is_some());
    assert_eq!(stops, 1, "the harness hears of the stop once");
    assert_eq!(os.suspend_count(TARGET), 0);
    assert!(os.misuses().is_empty(), "{:?}", os.misuses());
}
