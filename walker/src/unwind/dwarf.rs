//! Unwinding with DWARF CFI (`.eh_frame`), read with gimli.
//!
//! FDEs are found through a sorted index built once per module (binary search, never gimli's
//! linear scan); the unwind row for an address is evaluated, with the cache's reusable
//! `UnwindContext`, into a [`Rule`].

use super::rule::{Rule, Source};
use super::UnwindError;
use corprof::Register;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, LittleEndian, RegisterRule, UnwindContext, UnwindSection, X86_64,
};

/// One module's `.eh_frame` and its FDE index.
pub struct DwarfModule<'a> {
    eh_frame: EhFrame<gimli::EndianSlice<'a, LittleEndian>>,
    bases: BaseAddresses,
    /// (start, end, FDE offset), sorted by start.
    index: Vec<(u64, u64, usize)>,
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
    /// Indexes `eh_frame` (absolute FDE locations) once. A malformed section is an error.
    pub fn new(eh_frame: &'a [u8], section_address: u64) -> Result<DwarfModule<'a>, UnwindError> {
        let eh_frame = EhFrame::new(eh_frame, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(section_address);
        let mut index = Vec::new();
        let mut entries = eh_frame.entries(&bases);
        loop {
            match entries.next() {
                Ok(Some(gimli::CieOrFde::Fde(partial))) => {
                    let fde = partial
                        .parse(EhFrame::cie_from_offset)
                        .map_err(|_| UnwindError::BadUnwindInfo(section_address))?;
                    let offset = fde.offset();
                    index.push((fde.initial_address(), fde.end_address(), offset));
                }
                Ok(Some(gimli::CieOrFde::Cie(_))) => {}
                Ok(None) => break,
                Err(_) => return Err(UnwindError::BadUnwindInfo(section_address)),
            }
        }
        index.sort_unstable();
        Ok(DwarfModule {
            eh_frame,
            bases,
            index,
        })
    }

    fn find(&self, address: u64) -> Option<usize> {
        let i = self
            .index
            .partition_point(|&(start, _, _)| start <= address)
            .checked_sub(1)?;
        let (_, end, offset) = self.index[i];
        (address < end).then_some(offset)
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
