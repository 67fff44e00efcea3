//! The frame-pointer fallback, for code no unwind data covers: inside the body of a function
//! that keeps `push rbp; mov rbp, rsp` frames it recovers the caller's RIP, RSP and RBP; and a
//! walk over garbage memory ends with an error, never a loop.

use corprof::Register;
use fixtures::unwind_oracle::{regs, BASE, BOUNDS};
use proptest::prelude::*;
use sim_clr::synth::{assemble, emulate, sentinel, PrologStep, ENTRY_RSP, RETURN_ADDRESS};
use simclr_walker::unwind::{FrameKind, UnwindCache, UnwindError, Unwinder};

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_body_of_a_frame_pointer_function_unwinds_without_unwind_data(shape in fixtures::strategies::function_shape()) {
        let linux_fp = matches!(shape.prologue.get(1), Some(PrologStep::SetFramePointer(0)));
        prop_assume!(linux_fp && !shape.machine_frame);
        let code = assemble(&shape, BASE).unwrap();
        let boundaries = emulate(&code).unwrap();
        let body_start = BASE + code.prolog_ends[1];
        let body_end = BASE + code.epilogues.iter().map(|e| e.1).min().unwrap();
        let unwinder = Unwinder::new(Vec::new());
        let mut cache = UnwindCache::new();
        for b in boundaries.iter().filter(|b| b.ip >= body_start && b.ip <= body_end) {
            let mut caller = regs(b);
            prop_assert_eq!(unwinder.step(&mut caller, FrameKind::First, BOUNDS, &mut cache, &mut |a| b.read(a)), Ok(true));
            prop_assert_eq!((caller.rip, caller.rsp(), caller.get(Register::Rbp)), (RETURN_ADDRESS, ENTRY_RSP + 8, sentinel(Register::Rbp)));
        }
    }
}

#[test]
fn a_walk_over_garbage_ends_with_an_error_within_its_bound() {
    let unwinder = Unwinder::new(Vec::new());
    let mut r = simclr_walker::unwind::Regs {
        rip: 0x1234,
        gpr: [0; 16],
        xmm: [0; 16],
    };
    r.gpr[Register::Rsp as usize] = ENTRY_RSP - 0x100;
    r.gpr[Register::Rbp as usize] = ENTRY_RSP - 0x80;
    // Every word reads as a pointer to itself: a frame-pointer cycle.
    let mut out = [0u64; 64];
    let (n, end) = unwinder.walk(&r, BOUNDS, &mut UnwindCache::new(), &mut |a| Some(a), &mut out);
    assert!(n <= out.len());
    assert!(
        matches!(
            end,
            Err(UnwindError::NoProgress(_))
                | Err(UnwindError::Misaligned(_))
                | Err(UnwindError::OutOfBounds(_))
        ),
        "{end:?}"
    );
}
