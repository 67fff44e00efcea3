//! `.eh_frame` for synthesized functions, written with gimli from the shapes — not derived
//! from the instructions.
//!
//! Each function gets one FDE: the prologue's rows (CFA offset, saved registers, the switch
//! to RBP), unchanged rows through the body, and for each epilogue a remembered state that
//! the pops unwind step by step and the next block restores.
//!
//! [`write_eh_frame_hdr`] adds the linker's binary-search header for any `.eh_frame`.

use super::assemble::Assembled;
use super::shape::PrologStep;
use corprof::Register;
use gimli::write::{
    Address, CallFrameInstruction, CommonInformationEntry, EhFrame, EndianVec, FrameDescriptionEntry,
    FrameTable,
};
use gimli::{Encoding, Format, LittleEndian, X86_64};

/// The DWARF number of a general-purpose register.
pub fn dwarf_register(r: Register) -> gimli::Register {
    match r {
        Register::Rax => X86_64::RAX,
        Register::Rdx => X86_64::RDX,
        Register::Rcx => X86_64::RCX,
        Register::Rbx => X86_64::RBX,
        Register::Rsi => X86_64::RSI,
        Register::Rdi => X86_64::RDI,
        Register::Rbp => X86_64::RBP,
        Register::Rsp => X86_64::RSP,
        Register::R8 => X86_64::R8,
        Register::R9 => X86_64::R9,
        Register::R10 => X86_64::R10,
        Register::R11 => X86_64::R11,
        Register::R12 => X86_64::R12,
        Register::R13 => X86_64::R13,
        Register::R14 => X86_64::R14,
        Register::R15 => X86_64::R15,
    }
}

fn xmm_register(n: u8) -> gimli::Register {
    gimli::Register(X86_64::XMM0.0 + u16::from(n))
}

/// The FDE of one function.
fn fde(code: &Assembled) -> FrameDescriptionEntry {
    use CallFrameInstruction as I;
    let shape = &code.shape;
    let mut fde = FrameDescriptionEntry::new(Address::Constant(code.base), code.code_len as u32);
    let mut depth = shape.entry_size() as i32; // CFA - RSP
    if shape.machine_frame {
        // The processor's frame: RIP at CFA-40, the caller's RSP at CFA-16.
        fde.add_instruction(0, I::CfaOffset(depth));
        fde.add_instruction(0, I::Offset(X86_64::RA, -depth));
        fde.add_instruction(0, I::Offset(X86_64::RSP, -16));
    }
    let mut on_rbp = false;
    for (step, &end) in shape.prologue.iter().zip(&code.prolog_ends) {
        let at = end as u32;
        match *step {
            PrologStep::Push(r) => {
                depth += 8;
                if !on_rbp {
                    fde.add_instruction(at, I::CfaOffset(depth));
                }
                fde.add_instruction(at, I::Offset(dwarf_register(r), -depth));
            }
            PrologStep::Alloc(n) => {
                depth += n as i32;
                if !on_rbp {
                    fde.add_instruction(at, I::CfaOffset(depth));
                }
            }
            PrologStep::SetFramePointer(o) => {
                on_rbp = true;
                fde.add_instruction(at, I::Cfa(X86_64::RBP, depth - i32::from(o)));
            }
            PrologStep::Save(r, off) => {
                fde.add_instruction(at, I::Offset(dwarf_register(r), off as i32 - depth))
            }
            PrologStep::SaveXmm(x, off) => {
                fde.add_instruction(at, I::Offset(xmm_register(x), off as i32 - depth))
            }
        }
    }
    let pushes: Vec<Register> = shape.pushes().collect();
    let pushes_depth = shape.entry_size() as i32 + 8 * pushes.len() as i32;
    let has_reset = on_rbp || shape.allocation() > 0;
    for (k, &(block, proper)) in code.epilogues.iter().enumerate() {
        if k > 0 {
            fde.add_instruction(block as u32, I::RestoreState);
        }
        if k + 1 < code.epilogues.len() {
            fde.add_instruction(block as u32, I::RememberState);
        }
        // Walk the epilogue proper instruction by instruction.
        let mut at = proper;
        let mut decoder = iced_x86::Decoder::with_ip(
            64,
            &code.bytes[proper as usize..code.code_len as usize],
            code.base + proper,
            iced_x86::DecoderOptions::NONE,
        );
        let mut next = || {
            let i = decoder.decode();
            at += i.len() as u64;
            at as u32
        };
        if has_reset {
            let after = next();
            fde.add_instruction(after, I::Cfa(X86_64::RSP, pushes_depth));
        }
        let mut cfa = pushes_depth;
        for r in pushes.iter().rev() {
            let after = next();
            cfa -= 8;
            fde.add_instruction(after, I::CfaOffset(cfa));
            fde.add_instruction(after, I::Restore(dwarf_register(*r)));
        }
    }
    fde
}

/// Writes `.eh_frame` for `functions` (one CIE, one FDE each). Locations are absolute
/// (`DW_EH_PE_absptr`), so the section may be mapped anywhere.
pub fn write_eh_frame(functions: &[Assembled]) -> Vec<u8> {
    let encoding = Encoding {
        format: Format::Dwarf32,
        version: 1,
        address_size: 8,
    };
    let mut cie = CommonInformationEntry::new(encoding, 1, -8, X86_64::RA);
    cie.add_instruction(CallFrameInstruction::Cfa(X86_64::RSP, 8));
    cie.add_instruction(CallFrameInstruction::Offset(X86_64::RA, -8));
    let mut table = FrameTable::default();
    let cie_id = table.add_cie(cie);
    for f in functions {
        table.add_fde(cie_id, fde(f));
    }
    let mut eh_frame = EhFrame(EndianVec::new(LittleEndian));
    table
        .write_eh_frame(&mut eh_frame)
        .expect("synthesized CFI is always encodable");
    eh_frame.0.into_vec()
}

/// Why an `.eh_frame_hdr` cannot be written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EhFrameHdrError(pub String);

impl std::fmt::Display for EhFrameHdrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write .eh_frame_hdr: {}", self.0)
    }
}

impl std::error::Error for EhFrameHdrError {}

/// Writes the `.eh_frame_hdr` for `eh_frame` (mapped at `eh_frame_address`), to be mapped at
/// `hdr_address`, as linkers do: version 1, a PC-relative pointer to `.eh_frame`, and the
/// binary-search table of (initial location, FDE address) sorted by location, both relative
/// to the header (`DW_EH_PE_datarel | DW_EH_PE_sdata4`). gimli reads the FDEs; the header
/// format is too small to need a writer library.
pub fn write_eh_frame_hdr(
    eh_frame: &[u8],
    eh_frame_address: u64,
    hdr_address: u64,
) -> Result<Vec<u8>, EhFrameHdrError> {
    use gimli::{BaseAddresses, CieOrFde, UnwindSection};
    let section = gimli::EhFrame::new(eh_frame, LittleEndian);
    let bases = BaseAddresses::default().set_eh_frame(eh_frame_address);
    let error = |e: gimli::Error| EhFrameHdrError(e.to_string());
    let mut table = Vec::new();
    let mut entries = section.entries(&bases);
    while let Some(entry) = entries.next().map_err(error)? {
        if let CieOrFde::Fde(partial) = entry {
            let fde = partial.parse(gimli::EhFrame::cie_from_offset).map_err(error)?;
            table.push((fde.initial_address(), eh_frame_address + fde.offset() as u64));
        }
    }
    table.sort_unstable();
    let relative = |to: u64, from: u64| {
        i32::try_from(to.wrapping_sub(from) as i64)
            .map_err(|_| EhFrameHdrError(format!("0x{to:x} is beyond ±2 GiB of 0x{from:x}")))
    };
    let count = u32::try_from(table.len()).map_err(|_| EhFrameHdrError("too many FDEs".into()))?;
    // version, eh_frame_ptr (pcrel|sdata4), fde_count (udata4), table (datarel|sdata4)
    let mut hdr = vec![1, 0x1b, 0x03, 0x3b];
    hdr.extend(relative(eh_frame_address, hdr_address + 4)?.to_le_bytes());
    hdr.extend(count.to_le_bytes());
    for (location, fde) in table {
        hdr.extend(relative(location, hdr_address)?.to_le_bytes());
        hdr.extend(relative(fde, hdr_address)?.to_le_bytes());
    }
    Ok(hdr)
}

/// `.eh_frame_hdr` followed by `.eh_frame` for a set of functions, laid out as a linker does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EhFrameSections {
    /// Where the header is mapped.
    pub hdr_address: u64,
    /// `.eh_frame_hdr`.
    pub hdr: Vec<u8>,
    /// Where `.eh_frame` is mapped (just after the header, 8-aligned).
    pub eh_frame_address: u64,
    /// `.eh_frame`.
    pub eh_frame: Vec<u8>,
}

impl EhFrameSections {
    /// Writes both sections for `functions`, the header at `hdr_address`.
    pub fn write(functions: &[Assembled], hdr_address: u64) -> Result<EhFrameSections, EhFrameHdrError> {
        let eh_frame = write_eh_frame(functions);
        let hdr_len = 12 + 8 * functions.len() as u64;
        let eh_frame_address = hdr_address + hdr_len.next_multiple_of(8);
        let hdr = write_eh_frame_hdr(&eh_frame, eh_frame_address, hdr_address)?;
        Ok(EhFrameSections {
            hdr_address,
            hdr,
            eh_frame_address,
            eh_frame,
        })
    }
}
