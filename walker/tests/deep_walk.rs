//! Whole walks over deep stacks of real code: 64 different functions, each called by the
//! next (fixtures::deep_stack). For DWARF and both PE versions, ours reports every frame's IP
//! and ends at the outermost frame, with a cold cache and a warm one; framehop reports the same
//! frames (the benchmarks compare the two on these stacks).

use corprof::Register;
use fixtures::deep_stack::{DeepStack, Mix};
use fixtures::unwind_oracle::Format;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64};
use framehop::Unwinder as _;
use simclr_walker::unwind::UnwindCache;

const DEPTH: usize = 64;

#[test]
fn ours_and_framehop_walk_every_frame_of_a_deep_stack() {
    for (mix, seed) in [(Mix::Any, 1), (Mix::Any, 2), (Mix::Simple, 1)] {
        let stack = DeepStack::build(DEPTH, mix, seed).unwrap();
        assert_eq!(stack.ips.len(), DEPTH);
        for format in Format::ALL {
            let (ours, framehop) = stack.unwinders(format).unwrap();
            let mut cache = UnwindCache::new();
            for pass in ["cold", "warm"] {
                let mut out = [0u64; 2 * DEPTH];
                let (n, end) = ours.walk(
                    &stack.regs,
                    stack.bounds,
                    &mut cache,
                    &mut |a| stack.read(a),
                    &mut out,
                );
                assert_eq!(
                    (&out[..n], end),
                    (&stack.ips[..], Ok(())),
                    "{format:?} {pass} {mix:?} {seed}"
                );
            }
            assert_eq!(
                cache.stats().hits,
                DEPTH as u64,
                "{format:?}: the warm walk is all hits"
            );
            let r = &stack.regs;
            let regs = UnwindRegsX86_64::new(r.rip, r.rsp(), r.get(Register::Rbp));
            let mut fh_cache = CacheX86_64::new();
            let mut read = |a| stack.read(a).ok_or(());
            let mut frames = framehop.iter_frames(r.rip, regs, &mut fh_cache, &mut read);
            let mut theirs = Vec::new();
            while let Ok(Some(frame)) = frames.next() {
                theirs.push(frame.address());
            }
            assert_eq!(theirs, stack.ips, "framehop, {format:?} {mix:?} {seed}");
        }
    }
}
