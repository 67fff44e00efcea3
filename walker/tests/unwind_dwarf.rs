//! The DWARF unwinder against the emulator: for random functions of every shape, at every
//! instruction boundary (as the interrupted frame) and at every return site (as a caller),
//! one step recovers exactly the caller's RIP, RSP and preserved registers.

use fixtures::unwind_oracle::{check, one_module, Format, BASE, BOUNDS};
use proptest::prelude::*;
use sim_clr::synth::{assemble, write_eh_frame, FunctionShape, ENTRY_RSP, RETURN_ADDRESS};
use walker::unwind::dwarf::DwarfModule;
use walker::unwind::{FrameKind, Regs, StackBounds, UnwindCache, UnwindData, UnwindError, Unwinder};

/// Our unwinder over `eh_frame`, for addresses from `BASE` on.
fn unwinder(eh_frame: &[u8]) -> Unwinder<'_> {
    one_module(
        (BASE, u64::MAX),
        UnwindData::Dwarf(DwarfModule::new(eh_frame, 0).unwrap()),
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_boundary_unwinds_to_the_emulated_caller(shape in fixtures::strategies::function_shape()) {
        let outcome = check(&shape, BASE, Format::Dwarf).map_err(TestCaseError::fail)?;
        prop_assert!(outcome.steps > 0);
        prop_assert!(outcome.mismatches.is_empty(), "{:?}", outcome.mismatches);
    }
}

/// Outside every FDE the frame-pointer rule applies (here RBP is 0: the end of the stack).
#[test]
fn addresses_outside_every_fde_fall_back_to_the_frame_pointer() {
    let code = assemble(&FunctionShape::leaf(), BASE).unwrap();
    let eh_frame = write_eh_frame(std::slice::from_ref(&code));
    let mut regs = Regs {
        rip: BASE + 0x1000,
        gpr: [0; 16],
        xmm: [0; 16],
    };
    let more = unwinder(&eh_frame).step(
        &mut regs,
        FrameKind::First,
        BOUNDS,
        &mut UnwindCache::new(),
        &mut |_| Some(0),
    );
    assert_eq!(more, Ok(false));
}

#[test]
fn corrupt_sections_and_bad_stacks_are_errors() {
    assert!(DwarfModule::new(&[0xff; 64], 0).is_err());
    let code = assemble(&FunctionShape::leaf(), BASE).unwrap();
    let eh_frame = write_eh_frame(std::slice::from_ref(&code));
    let unwinder = unwinder(&eh_frame);
    let mut regs = Regs {
        rip: BASE,
        gpr: [ENTRY_RSP; 16],
        xmm: [0; 16],
    };
    let before = regs;
    let mut cache = UnwindCache::new();
    assert_eq!(
        unwinder.step(&mut regs, FrameKind::First, BOUNDS, &mut cache, &mut |_| None),
        Err(UnwindError::MemoryRead(ENTRY_RSP))
    );
    let low = StackBounds {
        limit: 0,
        base: ENTRY_RSP,
    };
    let out = unwinder.step(&mut regs, FrameKind::First, low, &mut cache, &mut |_| {
        Some(RETURN_ADDRESS)
    });
    assert_eq!(out, Err(UnwindError::OutOfBounds(ENTRY_RSP + 8)));
    assert_eq!(regs, before, "a failed step leaves the registers alone");
}
