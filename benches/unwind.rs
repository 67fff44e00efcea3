//! Native unwinding speed: ours against framehop on the same modules and stacks, in the same
//! run.
//!
//! The stacks are 64 frames of 64 different synthesized functions (fixtures::deep_stack),
//! walked from the interrupted frame to the end, for DWARF CFI and Windows unwind info
//! (versions 1 and 2). Two mixes of functions: `simple` (frameless, pushes and one
//! allocation: framehop caches every rule, its best case) and `any` (every shape, where
//! framehop cannot cache frame-pointer and `mov`-save rules). Per mix and format, per frame:
//! - `cached/ours`, `cached/framehop`: a warm cache (every rule cached by an earlier walk);
//! - `cached/ours_by_step`: the same walk as a loop of single steps (`Unwinder::step_frame`),
//!   which read every restored register (XMM included) instead of only what later frames use;
//! - `uncached/ours`, `uncached/framehop`: a new cache for each walk, so every frame looks up
//!   its unwind data, evaluates it and fills the cache (the allocation included).

use corprof::Register;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use fixtures::deep_stack::{DeepStack, Mix};
use fixtures::unwind_oracle::Format;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::Unwinder as _;
use std::hint::black_box;
use walker::unwind::{FrameKind, UnwindCache, Unwinder};

const DEPTH: usize = 64;

/// Our walk; returns the frame count.
fn ours(unwinder: &Unwinder<'_>, stack: &DeepStack, cache: &mut UnwindCache) -> usize {
    let mut out = [0u64; DEPTH + 1];
    let (n, end) = unwinder.walk(&stack.regs, stack.bounds, cache, &mut |a| stack.read(a), &mut out);
    assert!(end.is_ok());
    n
}

/// Our walk done one `step_frame` at a time (every restored register read, as a single
/// step must); returns the frame count.
fn ours_by_step(unwinder: &Unwinder<'_>, stack: &DeepStack, cache: &mut UnwindCache) -> usize {
    let mut regs = stack.regs;
    let mut kind = FrameKind::First;
    let mut n = 1;
    while let Ok(Some(next)) =
        unwinder.step_frame(&mut regs, kind, stack.bounds, cache, &mut |a| stack.read(a))
    {
        kind = next;
        n += 1;
    }
    black_box(regs.rip);
    n
}

/// framehop's walk; returns the frame count.
fn framehop(unwinder: &UnwinderX86_64<Vec<u8>>, stack: &DeepStack, cache: &mut CacheX86_64) -> usize {
    let r = &stack.regs;
    let regs = UnwindRegsX86_64::new(r.rip, r.rsp(), r.get(Register::Rbp));
    let mut read = |a| stack.read(a).ok_or(());
    let mut frames = unwinder.iter_frames(r.rip, regs, cache, &mut read);
    let mut n = 0;
    while let Ok(Some(frame)) = frames.next() {
        black_box(frame);
        n += 1;
    }
    n
}

fn unwind(c: &mut Criterion) {
    for (mix, format) in [Mix::Simple, Mix::Any]
        .into_iter()
        .flat_map(|m| Format::ALL.map(|f| (m, f)))
    {
        let stack = DeepStack::build(DEPTH, mix, 1).expect("a 64-frame stack");
        let (our_unwinder, their_unwinder) = stack.unwinders(format).expect("both unwinders");
        let name = format!("unwind/{}/{}", format!("{mix:?}").to_lowercase(), format.as_str());
        let mut group = c.benchmark_group(name);
        group.throughput(Throughput::Elements(DEPTH as u64));
        let mut our_cache = UnwindCache::new();
        assert_eq!(ours(&our_unwinder, &stack, &mut our_cache), DEPTH);
        group.bench_function(BenchmarkId::new("cached", "ours"), |b| {
            b.iter(|| ours(&our_unwinder, &stack, &mut our_cache))
        });
        assert_eq!(ours_by_step(&our_unwinder, &stack, &mut our_cache), DEPTH);
        group.bench_function(BenchmarkId::new("cached", "ours_by_step"), |b| {
            b.iter(|| ours_by_step(&our_unwinder, &stack, &mut our_cache))
        });
        let mut their_cache = CacheX86_64::new();
        assert_eq!(framehop(&their_unwinder, &stack, &mut their_cache), DEPTH);
        group.bench_function(BenchmarkId::new("cached", "framehop"), |b| {
            b.iter(|| framehop(&their_unwinder, &stack, &mut their_cache))
        });
        group.bench_function(BenchmarkId::new("uncached", "ours"), |b| {
            b.iter(|| ours(&our_unwinder, &stack, &mut UnwindCache::new()))
        });
        group.bench_function(BenchmarkId::new("uncached", "framehop"), |b| {
            b.iter(|| framehop(&their_unwinder, &stack, &mut CacheX86_64::new()))
        });
        group.finish();
    }
}

criterion_group!(benches, unwind);
criterion_main!(benches);
