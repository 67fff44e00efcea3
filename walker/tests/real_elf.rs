//! Real compiler output: `fixtures/elf/unwind-sample.elf`, built by gcc from
//! `unwind-sample.c` (see `build.sh`). Every row of every FDE, at every instruction boundary it
//! covers (and at every return site, as a caller), unwinds to the same RIP, RSP and RBP with
//! ours and with framehop; our `.eh_frame_hdr` writer reproduces the linker's bytes; and the
//! FDE index built from that header equals the one built by parsing the FDEs.

use corprof::Register;
use fixtures::elf::{self, Section, UNWIND_SAMPLE, UNWIND_SAMPLE_BASE};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module as FhModule, Unwinder as _};
use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindContext, UnwindSection};
use iced_x86::{Decoder, DecoderOptions, Mnemonic};
use sim_clr::synth::write_eh_frame_hdr;
use simclr_walker::unwind::dwarf::DwarfModule;
use simclr_walker::unwind::{FrameKind, Module, Regs, StackBounds, UnwindCache, UnwindData, Unwinder};

const IMAGE_BASE: u64 = UNWIND_SAMPLE_BASE;
const STACK: StackBounds = StackBounds {
    limit: 0x7ff0_0000_0000,
    base: 0x7ff0_0010_0000,
};
const RSP: u64 = 0x7ff0_0008_0000;

/// A section of the sample.
fn section(name: &str) -> Section<'static> {
    elf::section(UNWIND_SAMPLE, name).unwrap_or_else(|| panic!("no section {name}"))
}

/// Registers at `ip`: RSP on the stack, RBP above it (some functions compute the CFA from
/// it), every other register a recognizable value.
fn registers(ip: u64) -> Regs {
    let mut gpr = Register::ALL.map(|r| 0x1100 + r as u64);
    gpr[Register::Rsp as usize] = RSP;
    gpr[Register::Rbp as usize] = RSP + 0x400;
    Regs {
        rip: ip,
        gpr,
        xmm: [0; 16],
    }
}

/// Stack memory: each word holds a value derived from its address; nothing else is mapped.
fn read(address: u64) -> Option<u64> {
    (STACK.limit..STACK.base)
        .contains(&address)
        .then_some(IMAGE_BASE + (address & 0xffff))
}

fn framehop_unwinder(text: &Section, eh_frame: &Section, hdr: &Section) -> UnwinderX86_64<Vec<u8>> {
    let info = ExplicitModuleSectionInfo {
        base_svma: IMAGE_BASE,
        text_svma: Some(text.range()),
        text: Some(text.bytes.to_vec()),
        eh_frame_svma: Some(eh_frame.range()),
        eh_frame: Some(eh_frame.bytes.to_vec()),
        eh_frame_hdr_svma: Some(hdr.range()),
        eh_frame_hdr: Some(hdr.bytes.to_vec()),
        ..Default::default()
    };
    let mut unwinder = UnwinderX86_64::new();
    let end = eh_frame.range().end;
    unwinder.add_module(FhModule::new(
        "unwind-sample".into(),
        IMAGE_BASE..end,
        IMAGE_BASE,
        info,
    ));
    unwinder
}

/// (RIP, RSP, RBP) of the caller per framehop, or `None` if it fails.
fn framehop_step(unwinder: &UnwinderX86_64<Vec<u8>>, ip: u64, kind: FrameKind) -> Option<(u64, u64, u64)> {
    let r = registers(ip);
    let mut regs = UnwindRegsX86_64::new(r.rip, r.rsp(), r.get(Register::Rbp));
    let address = match kind {
        FrameKind::First => FrameAddress::from_instruction_pointer(ip),
        FrameKind::Caller => FrameAddress::from_return_address(ip)?,
    };
    let ra = unwinder
        .unwind_frame(address, &mut regs, &mut CacheX86_64::new(), &mut |a| {
            read(a).ok_or(())
        })
        .ok()??;
    Some((ra, regs.sp(), regs.bp()))
}

/// Every FDE's rows: (row start, row end), in the order the CFI gives them.
fn rows(eh_frame: &Section) -> Vec<(u64, u64)> {
    let section = EhFrame::new(eh_frame.bytes, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(eh_frame.address);
    let mut context = Box::new(UnwindContext::new());
    let mut rows = Vec::new();
    let mut entries = section.entries(&bases);
    while let Some(entry) = entries.next().unwrap() {
        if let CieOrFde::Fde(partial) = entry {
            let fde = partial.parse(EhFrame::cie_from_offset).unwrap();
            let mut table = fde.rows(&section, &bases, &mut context).unwrap();
            while let Some(row) = table.next_row().unwrap() {
                rows.push((row.start_address(), row.end_address()));
            }
        }
    }
    rows
}

#[test]
fn our_eh_frame_hdr_writer_matches_the_linkers() {
    let (eh_frame, hdr) = (section(".eh_frame"), section(".eh_frame_hdr"));
    let ours = write_eh_frame_hdr(eh_frame.bytes, eh_frame.address, hdr.address).unwrap();
    assert_eq!(ours, hdr.bytes);
    let parsed = DwarfModule::new(eh_frame.bytes, eh_frame.address).unwrap();
    let from_hdr =
        DwarfModule::with_eh_frame_hdr(eh_frame.bytes, eh_frame.address, hdr.bytes, hdr.address).unwrap();
    assert_eq!(parsed.index(), from_hdr.index());
    assert_eq!(parsed.index().len(), 8, "one FDE per function");
    let mut truncated = hdr.bytes.to_vec();
    truncated.truncate(20);
    assert!(
        DwarfModule::with_eh_frame_hdr(eh_frame.bytes, eh_frame.address, &truncated, hdr.address).is_err()
    );
}

#[test]
fn every_fde_row_unwinds_as_framehop_does() {
    let (text, eh_frame, hdr) = (section(".text"), section(".eh_frame"), section(".eh_frame_hdr"));
    let module =
        DwarfModule::with_eh_frame_hdr(eh_frame.bytes, eh_frame.address, hdr.bytes, hdr.address).unwrap();
    let ours = Unwinder::new(vec![Module {
        start: text.address,
        end: text.range().end,
        data: UnwindData::Dwarf(module),
    }]);
    let framehop = framehop_unwinder(&text, &eh_frame, &hdr);
    let mut cache = UnwindCache::new();
    let (mut first, mut callers, mut differ) = (0, 0, Vec::new());
    for (start, end) in rows(&eh_frame) {
        let code = &text.bytes[(start - text.address) as usize..(end - text.address) as usize];
        for i in Decoder::with_ip(64, code, start, DecoderOptions::NONE).iter() {
            let mut kinds = vec![(i.ip(), FrameKind::First)];
            if i.mnemonic() == Mnemonic::Call {
                kinds.push((i.next_ip(), FrameKind::Caller));
            }
            for (ip, kind) in kinds {
                let mut caller = registers(ip);
                let step = ours.step(&mut caller, kind, STACK, &mut cache, &mut read);
                assert_eq!(step, Ok(true), "ours at 0x{ip:x} {kind:?}");
                let ours = Some((caller.rip, caller.rsp(), caller.get(Register::Rbp)));
                let theirs = framehop_step(&framehop, ip, kind);
                if ours != theirs {
                    differ.push(format!("0x{ip:x} {kind:?}: ours {ours:x?}, framehop {theirs:x?}"));
                }
                match kind {
                    FrameKind::First => first += 1,
                    FrameKind::Caller => callers += 1,
                }
            }
        }
    }
    assert!(differ.is_empty(), "{differ:#?}");
    // Every instruction of every function (the padding between them has no FDE).
    assert!(
        first > 100 && callers >= 10,
        "{first} boundaries, {callers} return sites"
    );
}
