//! The Windows x64 unwinder (versions 1 and 2, flat and chained layouts) against the
//! emulator, as for DWARF: every boundary of random functions, first frame and caller, XMM
//! saves included.

use fixtures::unwind_oracle::{check, one_module, Format, BASE};
use proptest::prelude::*;
use sim_clr::synth::{
    assemble, write_pe, Epilogue, FunctionShape, PeLayout, PeVersion, PrologStep, TEXT_RVA,
};
use simclr_walker::unwind::pe::PeModule;
use simclr_walker::unwind::{FrameKind, Regs, StackBounds, UnwindCache, UnwindData, UnwindError};

const IMAGE_BASE: u64 = BASE - TEXT_RVA as u64;
const LOW: StackBounds = StackBounds {
    limit: 0x100,
    base: 0x10_0000,
};

fn checked(shape: &FunctionShape, format: Format) -> Result<usize, TestCaseError> {
    let outcome = check(shape, BASE, format).map_err(TestCaseError::fail)?;
    prop_assert!(outcome.mismatches.is_empty(), "{:?}", outcome.mismatches);
    Ok(outcome.steps)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn version_1_unwinds_every_boundary(shape in fixtures::strategies::function_shape()) {
        checked(&shape, Format::PeV1)?;
    }

    #[test]
    fn version_2_unwinds_every_boundary(shape in fixtures::strategies::function_shape()) {
        checked(&shape, Format::PeV2)?;
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
    for format in [Format::PeV1, Format::PeV2] {
        assert!(checked(&shape, format).unwrap() > 0);
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
    assert!(checked(&shape, Format::PeV2).unwrap() > 0);
}

#[test]
fn a_function_without_unwind_info_is_a_leaf_and_garbage_is_an_error() {
    let code = assemble(&FunctionShape::leaf(), BASE).unwrap();
    let layout = PeLayout {
        version: PeVersion::V1,
        chained: false,
    };
    let image = write_pe(std::slice::from_ref(&code), IMAGE_BASE, layout).unwrap();
    let module = PeModule::new(IMAGE_BASE, &image.bytes, image.pdata).unwrap();
    let image_range = (IMAGE_BASE, IMAGE_BASE + image.bytes.len() as u64);
    let unwinder = one_module(image_range, UnwindData::Pe(module));
    let mut cache = UnwindCache::new();
    let mut regs = Regs {
        rip: IMAGE_BASE + u64::from(image.pdata.0), // in the image, in no RUNTIME_FUNCTION
        gpr: [0x1000; 16],
        xmm: [0; 16],
    };
    let more = unwinder.step(&mut regs, FrameKind::First, LOW, &mut cache, &mut |_| {
        Some(0x1234)
    });
    assert_eq!((more, regs.rip, regs.rsp()), (Ok(true), 0x1234, 0x1008));
    assert!(PeModule::new(IMAGE_BASE, &image.bytes, (0xFFFF_0000, 12)).is_err());
    let mut broken = image.bytes.clone();
    let info = u32::from_le_bytes(broken[image.pdata.0 as usize + 8..][..4].try_into().unwrap()) as usize;
    broken[info] = 0x07; // version 7
    let module = PeModule::new(IMAGE_BASE, &broken, image.pdata).unwrap();
    let unwinder = one_module(image_range, UnwindData::Pe(module));
    let mut regs = Regs {
        rip: BASE,
        gpr: [0x1000; 16],
        xmm: [0; 16],
    };
    let result = unwinder.step(&mut regs, FrameKind::First, LOW, &mut cache, &mut |_| Some(1));
    assert!(matches!(result, Err(UnwindError::BadUnwindInfo(_))), "{result:?}");
}

/// Only shapes Windows cannot express are skipped (a `mov` save below a frame pointer set
/// before the allocation), and most generated shapes are checked.
#[test]
fn only_unencodable_shapes_are_skipped() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = fixtures::strategies::function_shape();
    let (mut encodable, total) = (0, 200);
    for _ in 0..total {
        let shape = strategy.new_tree(&mut runner).unwrap().current();
        let outcome = check(&shape, BASE, Format::PeV1).unwrap();
        if !outcome.not_encodable {
            encodable += 1;
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
        encodable * 2 >= total,
        "only {encodable} of {total} shapes are encodable"
    );
}
