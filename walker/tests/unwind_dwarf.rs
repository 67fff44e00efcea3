//! The DWARF unwinder against the emulator: for random functions of every shape, at every
//! instruction boundary (as the interrupted frame) and at every return site (as a caller),
//! one step recovers exactly the caller's RIP, RSP and preserved registers.

use corprof::Register;
use proptest::prelude::*;
use sim_clr::synth::{
    assemble, emulate, sentinel, write_eh_frame, Boundary, FunctionShape, ENTRY_RSP, RETURN_ADDRESS,
};
use walker::unwind::dwarf::{DwarfCache, DwarfModule};
use walker::unwind::{FrameKind, Regs, StackBounds, UnwindError};

const BASE: u64 = 0x7f20_0000_1000;
const BOUNDS: StackBounds = StackBounds {
    limit: ENTRY_RSP - 0x10_0000,
    base: ENTRY_RSP + 0x1000,
};
const VOLATILE: [Register; 7] = [
    Register::Rax,
    Register::Rcx,
    Register::Rdx,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
];

fn unwind(module: &DwarfModule<'_>, b: &Boundary, kind: FrameKind) -> Result<Option<Regs>, UnwindError> {
    let regs = Regs {
        rip: b.ip,
        gpr: b.regs,
    };
    module.step(&regs, kind, BOUNDS, &mut DwarfCache::default(), &mut |a| {
        b.read(a)
    })
}

/// Registers whose caller value must come back: everything but the volatile registers the
/// function may clobber without saving.
fn preserved(shape: &FunctionShape) -> Vec<Register> {
    let kept: Vec<Register> = shape
        .prologue
        .iter()
        .filter_map(|s| match s {
            sim_clr::synth::PrologStep::Push(r) | sim_clr::synth::PrologStep::Save(r, _) => Some(*r),
            _ => None,
        })
        .collect();
    Register::ALL
        .into_iter()
        .filter(|r| *r != Register::Rsp && (!VOLATILE.contains(r) || kept.contains(r)))
        .collect()
}

fn check(shape: &FunctionShape) -> Result<usize, TestCaseError> {
    let code = assemble(shape, BASE).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let boundaries = emulate(&code).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let eh_frame = write_eh_frame(std::slice::from_ref(&code));
    let module =
        DwarfModule::new(&eh_frame, 0x7f30_0000_0000).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut checked = 0;
    for b in &boundaries {
        let kinds: &[FrameKind] = if b.return_site {
            &[FrameKind::First, FrameKind::Caller]
        } else {
            &[FrameKind::First]
        };
        for &kind in kinds {
            let caller = unwind(&module, b, kind)
                .map_err(|e| TestCaseError::fail(format!("0x{:x} ({kind:?}): {e}", b.ip - BASE)))?
                .ok_or_else(|| TestCaseError::fail("end of stack"))?;
            prop_assert_eq!(
                caller.rip,
                RETURN_ADDRESS,
                "rip at +0x{:x} {:?}",
                b.ip - BASE,
                kind
            );
            prop_assert_eq!(
                caller.rsp(),
                ENTRY_RSP + 8,
                "rsp at +0x{:x} {:?}",
                b.ip - BASE,
                kind
            );
            for r in preserved(shape) {
                prop_assert_eq!(
                    caller.get(r),
                    sentinel(r),
                    "{} at +0x{:x} {:?}",
                    r.name(),
                    b.ip - BASE,
                    kind
                );
            }
            checked += 1;
        }
    }
    Ok(checked)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_boundary_unwinds_to_the_emulated_caller(shape in fixtures::strategies::function_shape()) {
        prop_assert!(check(&shape)? > 0);
    }
}

#[test]
fn addresses_outside_every_fde_have_no_unwind_info() {
    let code = assemble(&FunctionShape::leaf(), BASE).unwrap();
    let eh_frame = write_eh_frame(std::slice::from_ref(&code));
    let module = DwarfModule::new(&eh_frame, 0).unwrap();
    let regs = Regs {
        rip: BASE + 0x1000,
        gpr: [0; 16],
    };
    let err = module.step(
        &regs,
        FrameKind::First,
        BOUNDS,
        &mut DwarfCache::default(),
        &mut |_| Some(0),
    );
    assert_eq!(err, Err(UnwindError::NoUnwindInfo(BASE + 0x1000)));
}

#[test]
fn corrupt_sections_and_bad_stacks_are_errors() {
    assert!(DwarfModule::new(&[0xff; 64], 0).is_err());
    let code = assemble(&FunctionShape::leaf(), BASE).unwrap();
    let eh_frame = write_eh_frame(std::slice::from_ref(&code));
    let module = DwarfModule::new(&eh_frame, 0).unwrap();
    let regs = Regs {
        rip: BASE,
        gpr: [ENTRY_RSP; 16],
    };
    let step = |read: &mut dyn FnMut(u64) -> Option<u64>| {
        module.step(&regs, FrameKind::First, BOUNDS, &mut DwarfCache::default(), read)
    };
    assert_eq!(step(&mut |_| None), Err(UnwindError::MemoryRead(ENTRY_RSP)));
    let low = StackBounds {
        limit: 0,
        base: ENTRY_RSP,
    };
    let out = module.step(
        &regs,
        FrameKind::First,
        low,
        &mut DwarfCache::default(),
        &mut |_| Some(RETURN_ADDRESS),
    );
    assert_eq!(out, Err(UnwindError::OutOfBounds(ENTRY_RSP + 8)));
}
