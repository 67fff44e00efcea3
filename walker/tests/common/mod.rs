//! Shared by the unwinder property tests: run an unwind step at every emulated instruction
//! boundary of a synthesized function and compare with the emulator's ground truth.

// Each test crate that includes this module uses only part of it.
#![allow(dead_code)]

use corprof::Register;
use proptest::prelude::*;
use sim_clr::synth::{
    sentinel, xmm_sentinel, Boundary, FunctionShape, PrologStep, ENTRY_RSP, RETURN_ADDRESS,
};
use walker::unwind::{FrameKind, Regs, StackBounds, UnwindError};

/// Where test functions are assembled.
pub const BASE: u64 = 0x7f20_0000_1000;
/// The stack the emulator's frames live in.
pub const BOUNDS: StackBounds = StackBounds {
    limit: ENTRY_RSP - 0x10_0000,
    base: ENTRY_RSP + 0x1000,
};
/// A stack at low addresses, for hand-made register sets.
pub const BOUNDS_LOW: StackBounds = StackBounds {
    limit: 0x100,
    base: 0x10_0000,
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

/// Registers whose caller value must come back: everything but the volatile registers the
/// function may clobber without saving.
fn preserved(shape: &FunctionShape) -> Vec<Register> {
    let kept: Vec<Register> = shape
        .prologue
        .iter()
        .filter_map(|s| match s {
            PrologStep::Push(r) | PrologStep::Save(r, _) => Some(*r),
            _ => None,
        })
        .collect();
    Register::ALL
        .into_iter()
        .filter(|r| *r != Register::Rsp && (!VOLATILE.contains(r) || kept.contains(r)))
        .collect()
}

/// The registers at a boundary.
pub fn regs(b: &Boundary) -> Regs {
    Regs {
        rip: b.ip,
        gpr: b.regs,
        xmm: b.xmm,
    }
}

/// Checks one step at every boundary (as the first frame, and at return sites also as a
/// caller); `check_xmm` also requires XMM6–15 back at their entry values. Returns the number
/// of steps checked.
pub fn check_boundaries(
    shape: &FunctionShape,
    boundaries: &[Boundary],
    check_xmm: bool,
    mut unwind: impl FnMut(&Boundary, FrameKind) -> Result<Option<Regs>, UnwindError>,
) -> Result<usize, TestCaseError> {
    let mut checked = 0;
    for b in boundaries {
        let kinds: &[FrameKind] = if b.return_site {
            &[FrameKind::First, FrameKind::Caller]
        } else {
            &[FrameKind::First]
        };
        for &kind in kinds {
            let at = b.ip - BASE;
            let caller = unwind(b, kind)
                .map_err(|e| TestCaseError::fail(format!("+0x{at:x} ({kind:?}): {e}")))?
                .ok_or_else(|| TestCaseError::fail(format!("+0x{at:x}: end of stack")))?;
            prop_assert_eq!(caller.rip, RETURN_ADDRESS, "rip at +0x{:x} {:?}", at, kind);
            prop_assert_eq!(caller.rsp(), ENTRY_RSP + 8, "rsp at +0x{:x} {:?}", at, kind);
            for r in preserved(shape) {
                prop_assert_eq!(
                    caller.get(r),
                    sentinel(r),
                    "{} at +0x{:x} {:?}",
                    r.name(),
                    at,
                    kind
                );
            }
            if check_xmm {
                for x in 6..16u8 {
                    prop_assert_eq!(
                        caller.xmm[x as usize],
                        xmm_sentinel(x),
                        "xmm{} at +0x{:x} {:?}",
                        x,
                        at,
                        kind
                    );
                }
            }
            checked += 1;
        }
    }
    Ok(checked)
}
