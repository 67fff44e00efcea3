//! The DWARF unwinder against the emulator: for random functions of every shape, at every
//! instruction boundary (as the interrupted frame) and at every return site (as a caller),
//! one step recovers exactly the caller's RIP, RSP and preserved registers.

use fixtures::unwind_oracle::{check, one_module, Format, BASE, BOUNDS};
use proptest::prelude::*;
use sim_clr::synth::{assemble, write_eh_frame, FunctionShape, ENTRY_RSP, RETURN_ADDRESS};
use simclr_walker::unwind::dwarf::DwarfModule;
use simclr_walker::unwind::{FrameKind, Regs, StackBounds, UnwindCache, UnwindData, UnwindError, Unwinder};

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

/// One FDE over `[BASE, BASE + 0x10)` with `instructions`, its CIE a signal trampoline's when
/// `signal` (augmentation `S`).
fn cfi(signal: bool, instructions: Vec<gimli::write::CallFrameInstruction>) -> Vec<u8> {
    use gimli::write::{
        Address, CommonInformationEntry, EhFrame, EndianVec, FrameDescriptionEntry, FrameTable,
    };
    let encoding = gimli::Encoding {
        format: gimli::Format::Dwarf32,
        version: 1,
        address_size: 8,
    };
    let mut cie = CommonInformationEntry::new(encoding, 1, -8, gimli::X86_64::RA);
    cie.signal_trampoline = signal;
    let mut table = FrameTable::default();
    let cie = table.add_cie(cie);
    let mut fde = FrameDescriptionEntry::new(Address::Constant(BASE), 0x10);
    for i in instructions {
        fde.add_instruction(0, i);
    }
    table.add_fde(cie, fde);
    let mut out = EhFrame(EndianVec::new(gimli::LittleEndian));
    table.write_eh_frame(&mut out).unwrap();
    out.0.into_vec()
}

fn at_base(rsp: u64) -> Regs {
    let mut gpr = [0x5000; 16];
    gpr[corprof::Register::Rsp as usize] = rsp;
    Regs {
        rip: BASE + 4,
        gpr,
        xmm: [0; 16],
    }
}

#[test]
fn signal_frames_make_the_next_frame_an_interrupted_one() {
    use gimli::write::CallFrameInstruction as I;
    use gimli::X86_64;
    let rsp = ENTRY_RSP - 0x100;
    for signal in [false, true] {
        let eh_frame = cfi(signal, vec![I::Cfa(X86_64::RSP, 16), I::Offset(X86_64::RA, -8)]);
        let mut regs = at_base(rsp);
        let next = unwinder(&eh_frame).step_frame(
            &mut regs,
            FrameKind::First,
            BOUNDS,
            &mut UnwindCache::new(),
            &mut |a| (a == rsp + 8).then_some(RETURN_ADDRESS),
        );
        let want = if signal {
            FrameKind::First
        } else {
            FrameKind::Caller
        };
        assert_eq!(
            (next, regs.rip, regs.rsp()),
            (Ok(Some(want)), RETURN_ADDRESS, rsp + 16)
        );
    }
}

#[test]
fn cfa_expressions_and_return_addresses_in_registers_unwind() {
    use gimli::write::{CallFrameInstruction as I, Expression};
    use gimli::X86_64;
    let rsp = ENTRY_RSP - 0x100;
    // The PLT's CFA: rsp + 8 + ((rip & 15) >= 11) * 8, at BASE + 4: rsp + 8.
    let mut plt = Expression::new();
    plt.op_breg(X86_64::RSP, 8);
    plt.op_breg(X86_64::RA, 0);
    plt.op(gimli::constants::DW_OP_lit15);
    plt.op(gimli::constants::DW_OP_and);
    plt.op(gimli::constants::DW_OP_lit11);
    plt.op(gimli::constants::DW_OP_ge);
    plt.op(gimli::constants::DW_OP_lit3);
    plt.op(gimli::constants::DW_OP_shl);
    plt.op(gimli::constants::DW_OP_plus);
    let eh_frame = cfi(false, vec![I::CfaExpression(plt), I::Offset(X86_64::RA, -8)]);
    let mut regs = at_base(rsp);
    let more = unwinder(&eh_frame).step(
        &mut regs,
        FrameKind::First,
        BOUNDS,
        &mut UnwindCache::new(),
        &mut |a| (a == rsp).then_some(RETURN_ADDRESS),
    );
    assert_eq!((more, regs.rip, regs.rsp()), (Ok(true), RETURN_ADDRESS, rsp + 8));
    // `__vfork`: the return address popped into RDI, the CFA RSP itself.
    let eh_frame = cfi(
        false,
        vec![I::Cfa(X86_64::RSP, 0), I::Register(X86_64::RA, X86_64::RDI)],
    );
    let mut regs = at_base(rsp);
    regs.gpr[corprof::Register::Rdi as usize] = RETURN_ADDRESS;
    let more = unwinder(&eh_frame).step(
        &mut regs,
        FrameKind::First,
        BOUNDS,
        &mut UnwindCache::new(),
        &mut |_| None,
    );
    assert_eq!((more, regs.rip, regs.rsp()), (Ok(true), RETURN_ADDRESS, rsp));
    // A signal trampoline: the CFA loaded from the saved context, registers at fixed slots.
    let mut cfa = Expression::new();
    cfa.op_breg(X86_64::RSP, 160);
    cfa.op_deref();
    let slot = |offset| {
        let mut e = Expression::new();
        e.op_breg(X86_64::RSP, offset);
        e
    };
    let eh_frame = cfi(
        true,
        vec![
            I::CfaExpression(cfa),
            I::Expression(X86_64::RBX, slot(128)),
            I::Expression(X86_64::RA, slot(168)),
        ],
    );
    let mut regs = at_base(rsp);
    let saved = |a: u64| match a - rsp {
        160 => Some(rsp + 0x800),
        168 => Some(RETURN_ADDRESS),
        128 => Some(0xb0b),
        _ => None,
    };
    let next = unwinder(&eh_frame).step_frame(
        &mut regs,
        FrameKind::Caller,
        BOUNDS,
        &mut UnwindCache::new(),
        &mut |a| saved(a),
    );
    assert_eq!(next, Ok(Some(FrameKind::First)));
    assert_eq!(
        (regs.rip, regs.rsp(), regs.get(corprof::Register::Rbx)),
        (RETURN_ADDRESS, rsp + 0x800, 0xb0b)
    );
}
