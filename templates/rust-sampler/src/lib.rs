//! A profiler team's own sampler, written from scratch against `corprof` and `walker` (Windows
//! design: `SuspendThread`, `GetThreadContext`, the hybrid walk, `ResumeThread`).
//!
//! [`sample_one`] is the code a production profiler ships: it sees the OS only through
//! `corprof::os::ThreadControl`, so a unit test gives it `corprof::mock::FakeOs`
//! (`tests/mocks.rs`). [`team_sampler`] runs it on a simulated process's sampler thread, with
//! every sample judged against the ground truth by the public oracle
//! (`fixtures::sampling::Judge`); [`attach`] puts it on every profiler thread of a process, so
//! explorations, the pitfall catalog and the fuzzer run it (`tests/`), and the team's own
//! `simclr` (`src/main.rs`) offers it as `--sampler team`.

use corprof::os::{OsThread, Sync as _, ThreadControl};
use corprof::{ProfilerInfo, ThreadId};
use fixtures::sampling::Judge;
use sim_clr::process::{unobserved, Process, SimOs, ThreadBody};
use sim_clr::runtime::Runtime;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use walker::hybrid::{resolve_with, HybridOutcome, HybridWalker, Stopped};
use walker::images::Images;
use walker::sampler::Method;
use walker::unwind::{StackBounds, Unwinder};

/// One sample of managed thread `thread`, running on OS thread `target`: suspend it, read its
/// context and stack bounds, walk it into `walker`, resume it. `stopped` runs while the
/// target is stopped (a test harness takes its ground truth there). `None`: no sample (the
/// thread could not be suspended, or its context not read; it is resumed exactly once
/// whenever it was suspended).
pub fn sample_one<O: ThreadControl + ?Sized>(
    os: &O,
    info: &dyn ProfilerInfo,
    unwinder: &Unwinder<'_>,
    walker: &mut HybridWalker,
    (thread, target): (ThreadId, OsThread),
    stopped: &mut dyn FnMut(),
) -> Option<HybridOutcome> {
    os.suspend_thread(target).ok()?;
    let (Ok(context), Ok((limit, base))) = (os.get_thread_context(target), os.stack_bounds(target)) else {
        let _ = os.resume_thread(target);
        return None;
    };
    stopped();
    let stopped = Stopped {
        thread,
        context: &context,
        bounds: StackBounds { limit, base },
    };
    let mut read = |a| os.read_stack(target, a).ok();
    let outcome = walker.walk(info, unwinder, &stopped, &mut read, &mut resolve_with(info));
    let _ = os.resume_thread(target);
    Some(outcome)
}

/// The team's sampler thread: three rounds over every other managed thread, each sample
/// judged, counted into `judged`. With `drop_leaf` it reports its samples without their leaf
/// frame (the bug of a collector that skips the interrupted frame, thinking it is the
/// sampler's own).
pub fn team_sampler(drop_leaf: bool, judged: Arc<AtomicU64>) -> ThreadBody {
    Arc::new(move |rt: &Runtime, os: &SimOs| {
        let info: &dyn ProfilerInfo = rt;
        info.initialize_current_thread();
        let images = Images::load(os).expect("the module list");
        let unwinder = images.unwinder().expect("unwind data");
        let mut walker = HybridWalker::with_capacity(256);
        let mut judge = Judge::default();
        let me = os.current_thread();
        for _ in 0..3 {
            // A real sampler knows its threads from ThreadAssignedToOSThread; this one asks
            // the simulator, outside the process.
            let targets: Vec<_> = unobserved(|| {
                let threads = rt.threads().into_iter();
                threads
                    .filter(|t| t.is_managed() && t.os_id != me.0)
                    .map(|t| (t.id, OsThread(t.os_id)))
                    .collect()
            });
            for (thread, target) in targets {
                let mut stopped = || {
                    if let Some(verdict) = unobserved(|| judge.stopped(rt, thread, Method::Suspend)) {
                        verdict.report(os);
                    }
                };
                let sampled = sample_one(os, info, &unwinder, &mut walker, (thread, target), &mut stopped);
                let Some(outcome) = sampled else { continue };
                let frames = walker.frames();
                let frames = if drop_leaf {
                    &frames[1.min(frames.len())..]
                } else {
                    frames
                };
                let truncated = outcome == HybridOutcome::Full;
                judged.fetch_add(1, Ordering::Relaxed);
                if let Some(verdict) =
                    unobserved(|| judge.sample(rt, thread, frames, truncated, Method::Suspend))
                {
                    verdict.report(os);
                }
            }
            os.sleep(Duration::from_millis(1));
        }
    })
}

/// Attaches the team's sampler to every profiler thread of `process`: its sampler bodies
/// (whichever method a pitfall or the fuzzer's generator names) run the team's code; the
/// watchdog and the profiler's managed exporter thread have nothing to do in this design.
pub fn attach(process: &mut Process) -> Result<(), String> {
    let named: Vec<(String, String)> = process
        .named_bodies()
        .map(|(thread, body)| (thread.to_string(), body.name.clone()))
        .collect();
    for (thread, body) in named {
        let code: ThreadBody = match body.as_str() {
            "watchdog" | "exporter" => Arc::new(|_: &Runtime, _: &SimOs| {}),
            _ => team_sampler(false, Arc::new(AtomicU64::new(0))),
        };
        process.thread_body(&thread, code).map_err(|e| e.to_string())?;
    }
    Ok(())
}
