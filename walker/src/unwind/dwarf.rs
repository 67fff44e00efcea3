//! Unwinding with DWARF CFI (`.eh_frame`), read with gimli.
//!
//! FDEs are found through a sorted index built once per module, from the FDEs themselves or
//! from the module's `.eh_frame_hdr` table (binary search, never gimli's linear scan); the
//! unwind row for an address is evaluated, with the cache's reusable `UnwindContext`, into a
//! [`Rule`].

use super::rule::{Rule, Source};
use super::UnwindError;
use corprof::Register;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameHdr, LittleEndian, RegisterRule, UnwindContext, UnwindSection,
    X86_64,
};

/// One module's `.eh_frame` and its FDE index.
pub struct DwarfModule<'a> {
    eh_frame: EhFrame<gimli::EndianSlice<'a, LittleEndian>>,
    bases: BaseAddresses,
    /// (first address, FDE offset), sorted.
    index: Vec<(u64, usize)>,
}

const GPRS: [(Register, gimli::Register); 16] = [
    (Register::Rax, X86_64::RAX),
    (Register::Rcx, X86_64::RCX),
    (Register::Rdx, X86_64::RDX),
    (Register::Rbx, X86_64::RBX),
    (Register::Rsp, X86_64::RSP),
    (Register::Rbp, X86_64::RBP),
    (Register::Rsi, X86_64::RSI),
    (Register::Rdi, X86_64::RDI),
    (Register::R8, X86_64::R8),
    (Register::R9, X86_64::R9),
    (Register::R10, X86_64::R10),
    (Register::R11, X86_64::R11),
    (Register::R12, X86_64::R12),
    (Register::R13, X86_64::R13),
    (Register::R14, X86_64::R14),
    (Register::R15, X86_64::R15),
];

fn by_dwarf(r: gimli::Register) -> Option<Register> {
    GPRS.iter().find(|(_, d)| *d == r).map(|(g, _)| *g)
}

impl<'a> DwarfModule<'a> {
    /// Indexes `eh_frame`, mapped at `section_address`, by parsing every FDE once. A
    /// malformed section is an error.
    pub fn new(eh_frame: &'a [u8], section_address: u64) -> Result<DwarfModule<'a>, UnwindError> {
        let bad = |_| UnwindError::BadUnwindInfo(section_address);
        let eh_frame = EhFrame::new(eh_frame, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(section_address);
        let mut index = Vec::new();
        let mut entries = eh_frame.entries(&bases);
        while let Some(entry) = entries.next().map_err(bad)? {
            if let gimli::CieOrFde::Fde(partial) = entry {
                let fde = partial.parse(EhFrame::cie_from_offset).map_err(bad)?;
                index.push((fde.initial_address(), fde.offset()));
            }
        }
        Ok(DwarfModule::indexed(eh_frame, bases, index))
    }

    /// Uses the binary-search table of the module's `.eh_frame_hdr` (mapped at
    /// `hdr_address`) instead of parsing every FDE: for large modules. A malformed header, or
    /// an entry pointing outside `eh_frame`, is an error.
    pub fn with_eh_frame_hdr(
        eh_frame: &'a [u8],
        section_address: u64,
        hdr: &[u8],
        hdr_address: u64,
    ) -> Result<DwarfModule<'a>, UnwindError> {
        let bad = |_| UnwindError::BadUnwindInfo(hdr_address);
        let bases = BaseAddresses::default()
            .set_eh_frame(section_address)
            .set_eh_frame_hdr(hdr_address);
        let parsed = EhFrameHdr::new(hdr, LittleEndian).parse(&bases, 8).map_err(bad)?;
        let table = parsed.table().ok_or(UnwindError::BadUnwindInfo(hdr_address))?;
        let mut index = Vec::new();
        let mut rows = table.iter(&bases);
        while let Some((start, fde)) = rows.next().map_err(bad)? {
            let offset = fde
                .direct()
                .ok()
                .and_then(|p| p.checked_sub(section_address))
                .filter(|&o| o < eh_frame.len() as u64)
                .ok_or(UnwindError::BadUnwindInfo(hdr_address))?;
            index.push((start.pointer(), offset as usize));
        }
        let eh_frame = EhFrame::new(eh_frame, LittleEndian);
        Ok(DwarfModule::indexed(eh_frame, bases, index))
    }

    fn indexed(
        eh_frame: EhFrame<gimli::EndianSlice<'a, LittleEndian>>,
        bases: BaseAddresses,
        mut index: Vec<(u64, usize)>,
    ) -> DwarfModule<'a> {
        index.sort_unstable();
        DwarfModule {
            eh_frame,
            bases,
            index,
        }
    }

    /// The FDEs by first address: (address, offset in `.eh_frame`), sorted.
    pub fn index(&self) -> &[(u64, usize)] {
        &self.index
    }

    /// The offset of the FDE that may cover `address`: the last one starting at or before it.
    fn find(&self, address: u64) -> Option<usize> {
        let i = self
            .index
            .partition_point(|&(start, _)| start <= address)
            .checked_sub(1)?;
        Some(self.index[i].1)
    }

    /// The rule at `address` (already adjusted for the frame kind): CFA, return address and
    /// every register the CFI restores. Registers it does not mention keep their value
    /// (callee-saved registers the function did not touch); an undefined return address is
    /// the end of the stack.
    pub(crate) fn rule(&self, address: u64, context: &mut UnwindContext<usize>) -> Result<Rule, UnwindError> {
        let offset = self.find(address).ok_or(UnwindError::NoUnwindInfo(address))?;
        let bad = |_| UnwindError::BadUnwindInfo(address);
        let fde = self
            .eh_frame
            .fde_from_offset(
                &self.bases,
                gimli::EhFrameOffset(offset),
                EhFrame::cie_from_offset,
            )
            .map_err(bad)?;
        if !fde.contains(address) {
            return Err(UnwindError::NoUnwindInfo(address));
        }
        let row = fde
            .unwind_info_for_address(&self.eh_frame, &self.bases, context, address)
            .map_err(bad)?;
        let dwarf_register = |r| by_dwarf(r).ok_or(UnwindError::BadUnwindInfo(address));
        let cfa = match *row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => {
                Source::same(dwarf_register(register)?).plus(offset, address)?
            }
            CfaRule::Expression(_) => return Err(UnwindError::BadUnwindInfo(address)),
        };
        let mut rule = Rule::identity();
        // gimli gives `None` for a register with the default rule: for the return address
        // that means "undefined" (the end of the stack), for others "same value".
        match row.register(X86_64::RA) {
            Some(RegisterRule::Offset(o)) => rule.set_return(cfa.plus(o, address)?.load(address)?),
            None | Some(RegisterRule::Undefined) => return Ok(rule),
            Some(_) => return Err(UnwindError::BadUnwindInfo(address)),
        }
        // The caller's RSP is the CFA, unless the CFI says where it was saved (a machine frame).
        rule.set(Register::Rsp, cfa);
        for &(r, d) in &GPRS {
            let source = match row.register(d) {
                None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => continue,
                Some(RegisterRule::Offset(o)) => cfa.plus(o, address)?.load(address)?,
                Some(RegisterRule::ValOffset(o)) => cfa.plus(o, address)?,
                Some(RegisterRule::Register(from)) => Source::same(dwarf_register(from)?),
                Some(_) => return Err(UnwindError::BadUnwindInfo(address)),
            };
            rule.set(r, source);
        }
        Ok(rule)
    }
}
