//! The Windows x64 unwinder (versions 1 and 2) against the emulator, as for DWARF: every
//! boundary of random functions, first frame and caller, XMM saves included.

mod common;

use common::{check_boundaries, regs, BASE, BOUNDS};
use proptest::prelude::*;
use sim_clr::synth::{
    assemble, emulate, write_pe, Epilogue, FunctionShape, PeLayout, PeVersion, PrologStep, TEXT_RVA,
};
use walker::unwind::pe::PeModule;
use walker::unwind::{FrameKind, Regs, UnwindError};

const IMAGE_BASE: u64 = BASE - TEXT_RVA as u64;

/// Checks every boundary with both layouts (one entry per function, and epilogues in a
/// chained entry). Windows unwind info cannot describe an `iretq` epilogue, so in a
/// machine-frame function the boundaries after its first epilogue instruction are skipped.
fn check(shape: &FunctionShape, version: PeVersion) -> Result<usize, TestCaseError> {
    let code = assemble(shape, BASE).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let boundaries = emulate(&code).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let first_epilogue = BASE + code.epilogues.iter().map(|e| e.1).min().unwrap_or(u64::MAX);
    let describable: Vec<_> = boundaries
        .into_iter()
        .filter(|b| !shape.machine_frame || b.ip <= first_epilogue)
        .collect();
    let mut checked = 0;
    for chained in [false, true] {
        let Ok(image) = write_pe(
            std::slice::from_ref(&code),
            IMAGE_BASE,
            PeLayout { version, chained },
        ) else {
            return Ok(0); // not encodable in Windows unwind info (a save below a Linux-style frame pointer)
        };
        let module = PeModule::new(IMAGE_BASE, &image.bytes, image.pdata)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        checked += check_boundaries(shape, &describable, true, |b, kind| {
            module.step(&regs(b), kind, BOUNDS, &mut |a| b.read(a))
        })?;
    }
    Ok(checked)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn version_1_unwinds_every_boundary(shape in fixtures::strategies::function_shape()) {
        check(&shape, PeVersion::V1)?;
    }

    #[test]
    fn version_2_unwinds_every_boundary(shape in fixtures::strategies::function_shape()) {
        check(&shape, PeVersion::V2)?;
    }
}

/// framehop's false positive (spec A.3/C.3): a loop back-edge `jmp` in a frameless function
/// is not an epilogue.
#[test]
fn a_loop_back_edge_is_not_an_epilogue() {
    let shape = FunctionShape {
        prologue: vec![PrologStep::Push(corprof::Register::Rbx), PrologStep::Alloc(0x20)],
        calls: 0,
        back_edges: true,
        epilogues: vec![Epilogue::Ret],
        machine_frame: false,
    };
    for version in [PeVersion::V1, PeVersion::V2] {
        assert!(check(&shape, version).unwrap() > 0);
    }
}

/// framehop's v2 bug (spec A.3/C.3): in-prologue IPs with UWOP_EPILOG entries at the head of
/// the code array.
#[test]
fn version_2_in_prologue_ips_unwind() {
    let shape = FunctionShape {
        prologue: vec![
            PrologStep::Push(corprof::Register::Rbp),
            PrologStep::Push(corprof::Register::Rbx),
            PrologStep::Alloc(0x28),
            PrologStep::SetFramePointer(0x20),
        ],
        calls: 1,
        back_edges: false,
        epilogues: vec![Epilogue::Ret, Epilogue::TailJmp],
        machine_frame: false,
    };
    assert!(check(&shape, PeVersion::V2).unwrap() > 0);
}

#[test]
fn a_function_without_unwind_info_is_a_leaf_and_garbage_is_an_error() {
    let code = assemble(&FunctionShape::leaf(), BASE).unwrap();
    let image = write_pe(
        std::slice::from_ref(&code),
        IMAGE_BASE,
        PeLayout {
            version: PeVersion::V1,
            chained: false,
        },
    )
    .unwrap();
    let module = PeModule::new(IMAGE_BASE, &image.bytes, image.pdata).unwrap();
    let regs = Regs {
        rip: BASE + 0x4000,
        gpr: [0x1000; 16],
        xmm: [0; 16],
    };
    let caller = module
        .step(&regs, FrameKind::First, common::BOUNDS_LOW, &mut |_| Some(0x1234))
        .unwrap()
        .unwrap();
    assert_eq!((caller.rip, caller.rsp()), (0x1234, 0x1008));
    assert!(PeModule::new(IMAGE_BASE, &image.bytes, (0xFFFF_0000, 12)).is_err());
    let mut broken = image.bytes.clone();
    let info = u32::from_le_bytes(broken[image.pdata.0 as usize + 8..][..4].try_into().unwrap()) as usize;
    broken[info] = 0x07; // version 7
    let module = PeModule::new(IMAGE_BASE, &broken, image.pdata).unwrap();
    let regs = Regs {
        rip: BASE,
        gpr: [0x1000; 16],
        xmm: [0; 16],
    };
    assert!(matches!(
        module.step(&regs, FrameKind::First, common::BOUNDS_LOW, &mut |_| Some(1)),
        Err(UnwindError::BadUnwindInfo(_))
    ));
}

/// Only shapes Windows cannot express are skipped (a `mov` save below a frame pointer set
/// before the allocation), and most generated shapes are checked.
#[test]
fn only_unencodable_shapes_are_skipped() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = fixtures::strategies::function_shape();
    let (mut checked, total) = (0, 200);
    for _ in 0..total {
        let shape = strategy.new_tree(&mut runner).unwrap().current();
        if check(&shape, PeVersion::V1).unwrap() > 0 && check(&shape, PeVersion::V2).unwrap() > 0 {
            checked += 1;
            continue;
        }
        let steps = &shape.prologue;
        let fp = steps
            .iter()
            .position(|s| matches!(s, PrologStep::SetFramePointer(_)));
        let alloc = steps.iter().position(|s| matches!(s, PrologStep::Alloc(_)));
        let saves = steps
            .iter()
            .any(|s| matches!(s, PrologStep::Save(..) | PrologStep::SaveXmm(..)));
        assert!(saves && fp < alloc, "skipped an encodable shape: {shape:?}");
    }
    assert!(
        checked * 2 >= total,
        "only {checked} of {total} shapes are encodable"
    );
}
