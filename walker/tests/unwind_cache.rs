//! The rule cache: a second visit to an address is a hit with the same answer, and rules
//! never outlive the set of modules they came from (the module generation).

use corprof::Register;
use fixtures::unwind_oracle::{one_module, regs, BASE, BOUNDS};
use sim_clr::synth::{
    assemble, emulate, write_eh_frame, FunctionShape, PrologStep, ENTRY_RSP, RETURN_ADDRESS,
};
use simclr_walker::unwind::dwarf::DwarfModule;
use simclr_walker::unwind::{CacheStats, FrameKind, Module, UnwindCache, UnwindData, Unwinder};

/// A function that pushes `pushes` registers, and its `.eh_frame` (at address 0).
fn function(pushes: &[Register]) -> (sim_clr::synth::Assembled, Vec<u8>) {
    let shape = FunctionShape {
        prologue: pushes.iter().map(|r| PrologStep::Push(*r)).collect(),
        ..FunctionShape::leaf()
    };
    let code = assemble(&shape, BASE).unwrap();
    let eh_frame = write_eh_frame(std::slice::from_ref(&code));
    (code, eh_frame)
}

fn text(code: &sim_clr::synth::Assembled) -> (u64, u64) {
    (code.base, code.base + code.code_len)
}

#[test]
fn a_second_visit_hits_and_agrees() {
    let (code, eh_frame) = function(&[Register::Rbx, Register::R12]);
    let unwinder = one_module(
        text(&code),
        UnwindData::Dwarf(DwarfModule::new(&eh_frame, 0).unwrap()),
    );
    let boundaries = emulate(&code).unwrap();
    let mut cache = UnwindCache::new();
    for round in 0..2 {
        for b in &boundaries {
            let mut caller = regs(b);
            assert_eq!(
                unwinder.step(&mut caller, FrameKind::First, BOUNDS, &mut cache, &mut |a| b
                    .read(a)),
                Ok(true)
            );
            assert_eq!(
                (caller.rip, caller.rsp()),
                (RETURN_ADDRESS, ENTRY_RSP + 8),
                "round {round}"
            );
        }
    }
    let n = boundaries.len() as u64;
    assert_eq!(cache.stats(), CacheStats { hits: n, misses: n });
}

/// Two unwinders over different functions at the same addresses share one cache: each gets
/// its own rules; adding a module makes the old rules unreachable.
#[test]
fn rules_are_keyed_by_the_module_generation() {
    let (one, one_cfi) = function(&[Register::Rbx]);
    let (three, three_cfi) = function(&[Register::Rbx, Register::R12, Register::R13]);
    let a = one_module(
        text(&one),
        UnwindData::Dwarf(DwarfModule::new(&one_cfi, 0).unwrap()),
    );
    let b = one_module(
        text(&three),
        UnwindData::Dwarf(DwarfModule::new(&three_cfi, 0).unwrap()),
    );
    let mut cache = UnwindCache::new();
    // After every push of `three`: `one`'s rule there would give the wrong caller.
    for at in emulate(&three)
        .unwrap()
        .iter()
        .filter(|x| x.ip >= BASE + three.prolog_ends[2])
    {
        for unwinder in [&a, &b, &b] {
            let mut caller = regs(at);
            let _ = unwinder.step(&mut caller, FrameKind::First, BOUNDS, &mut cache, &mut |x| {
                at.read(x)
            });
        }
        let mut caller = regs(at);
        assert_eq!(
            b.step(&mut caller, FrameKind::First, BOUNDS, &mut cache, &mut |x| at
                .read(x)),
            Ok(true)
        );
        assert_eq!(caller.rsp(), ENTRY_RSP + 8);
    }
    // Adding any module, even one elsewhere, retires the cached rules.
    let mut grown = Unwinder::new(vec![Module {
        start: one.base,
        end: one.base + one.code_len,
        data: UnwindData::Dwarf(DwarfModule::new(&one_cfi, 0).unwrap()),
    }]);
    let at = &emulate(&one).unwrap()[0];
    let step = |unwinder: &Unwinder<'_>, cache: &mut UnwindCache| {
        let mut caller = regs(at);
        let more = unwinder.step(&mut caller, FrameKind::First, BOUNDS, cache, &mut |x| at.read(x));
        assert_eq!((more, caller.rip), (Ok(true), RETURN_ADDRESS));
    };
    step(&grown, &mut cache);
    step(&grown, &mut cache);
    grown.add_module(Module {
        start: 0x1000,
        end: 0x2000,
        data: UnwindData::Dwarf(DwarfModule::new(&three_cfi, 0).unwrap()),
    });
    let before = cache.stats();
    step(&grown, &mut cache);
    assert_eq!(
        cache.stats().misses,
        before.misses + 1,
        "no rule survives add_module"
    );
}
