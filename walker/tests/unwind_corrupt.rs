//! Corrupt unwind data never makes the unwinder panic or loop: random byte changes to the
//! `.eh_frame`, `.eh_frame_hdr` and PE images of random functions, then steps (first frame
//! and caller) and bounded walks from every instruction boundary. Errors are the expected
//! outcome; any answer that is not an error must still be a checked step.

use fixtures::unwind_oracle::{one_module, regs, Format, BASE, BOUNDS};
use proptest::prelude::*;
use sim_clr::synth::{assemble, emulate, write_pe, EhFrameSections, PeLayout, PeVersion, TEXT_RVA};
use simclr_walker::unwind::dwarf::DwarfModule;
use simclr_walker::unwind::pe::PeModule;
use simclr_walker::unwind::{FrameKind, UnwindCache, UnwindData, Unwinder};

/// Applies `changes` (position scaled to the length, new byte) to `bytes`.
fn corrupt(bytes: &mut [u8], changes: &[(usize, u8)]) {
    let len = bytes.len();
    for &(at, value) in changes.iter().filter(|_| len > 0) {
        bytes[at % len] = value;
    }
}

/// Every boundary: both kinds of step and a walk; a step that succeeds moved RSP up.
fn exercise(unwinder: &Unwinder<'_>, boundaries: &[sim_clr::synth::Boundary]) {
    let mut cache = UnwindCache::new();
    for b in boundaries {
        for kind in [FrameKind::First, FrameKind::Caller] {
            let mut r = regs(b);
            if let Ok(true) = unwinder.step(&mut r, kind, BOUNDS, &mut cache, &mut |a| b.read(a)) {
                assert!(r.rsp() > b.regs[4], "a step that does not move up");
            }
        }
        let mut ips = [0u64; 64];
        let (n, _) = unwinder.walk(&regs(b), BOUNDS, &mut cache, &mut |a| b.read(a), &mut ips);
        assert!(n <= ips.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn corrupt_tables_give_errors_not_panics(
        shape in fixtures::strategies::function_shape(),
        format in prop::sample::select(Format::ALL.to_vec()),
        changes in prop::collection::vec((any::<usize>(), any::<u8>()), 1..8),
    ) {
        let code = assemble(&shape, BASE).unwrap();
        let boundaries = emulate(&code).unwrap();
        let text = (BASE, BASE + code.code_len);
        match format {
            Format::Dwarf => {
                let hdr_address = (BASE + code.bytes.len() as u64).next_multiple_of(0x1000);
                let mut cfi = EhFrameSections::write(std::slice::from_ref(&code), hdr_address).unwrap();
                corrupt(&mut cfi.eh_frame, &changes);
                corrupt(&mut cfi.hdr, &changes[..1]);
                for module in [
                    DwarfModule::new(&cfi.eh_frame, cfi.eh_frame_address),
                    DwarfModule::with_eh_frame_hdr(&cfi.eh_frame, cfi.eh_frame_address, &cfi.hdr, cfi.hdr_address),
                ]
                .into_iter()
                .flatten()
                {
                    exercise(&one_module(text, UnwindData::Dwarf(module)), &boundaries);
                }
            }
            _ => {
                let version = if format == Format::PeV1 { PeVersion::V1 } else { PeVersion::V2 };
                let image_base = BASE - u64::from(TEXT_RVA);
                let layout = PeLayout { version, chained: changes.len() % 2 == 0 };
                let Ok(mut image) = write_pe(std::slice::from_ref(&code), image_base, layout) else {
                    return Ok(());
                };
                // Mostly the tables (after the code), sometimes the code itself.
                let tables = image.pdata.0 as usize;
                let (head, tail) = image.bytes.split_at_mut(tables);
                corrupt(tail, &changes);
                corrupt(head, &changes[..changes.len() / 4]);
                if let Ok(module) = PeModule::new(image_base, &image.bytes, image.pdata) {
                    let range = (image_base, image_base + image.bytes.len() as u64);
                    exercise(&one_module(range, UnwindData::Pe(module)), &boundaries);
                }
            }
        }
    }
}
