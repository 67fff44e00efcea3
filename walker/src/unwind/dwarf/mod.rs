//! Unwinding with DWARF CFI (`.eh_frame`), read with gimli.
//!
//! gimli reads the section when a module is built: the FDE index (from the FDEs themselves or
//! from the module's `.eh_frame_hdr` table; looked up by binary search, never gimli's linear
//! scan) and every CIE, whose initial row is evaluated then. On a miss, the FDE's header is
//! read without its CIE (`entry`) and its instructions are decoded and applied up to the
//! address in one pass (`row`); the row becomes a rule.

use super::rule::{Rule, Source};
use super::{FrameKind, UnwindError};
use corprof::Register;
use entry::CieFormat;
use expr::{evaluate, Sym};
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, UnwindSection};
use row::{initial_row, row_at, CieRules, RegisterRule};

mod entry;
mod expr;
mod row;

pub(crate) use row::{Row, STATE_DEPTH};

/// One module's `.eh_frame`, its FDE index and its CIEs.
pub struct DwarfModule<'a> {
    /// `.eh_frame`.
    bytes: &'a [u8],
    /// Where it is mapped.
    address: u64,
    /// (first address, FDE offset), sorted.
    index: Vec<(u64, usize)>,
    /// By offset (the order of the section).
    cies: Vec<Cie>,
}

/// What FDEs need from their CIE, read once.
struct Cie {
    offset: usize,
    format: CieFormat,
    rules: Result<CieRules, UnwindError>,
    /// The return address's column.
    return_address: usize,
}

/// DWARF numbers 0–7, which order the first eight registers differently from the Windows
/// numbering of [`Register`]; R8–R15 are numbered alike.
const FIRST_EIGHT: [Register; 8] = [
    Register::Rax,
    Register::Rdx,
    Register::Rcx,
    Register::Rbx,
    Register::Rsi,
    Register::Rdi,
    Register::Rbp,
    Register::Rsp,
];

/// The general-purpose register with DWARF number `r` (0–15).
fn by_dwarf(r: gimli::Register) -> Option<Register> {
    let n = usize::from(r.0);
    match n {
        0..=7 => Some(FIRST_EIGHT[n]),
        8..=15 => Some(Register::ALL[n]),
        _ => None,
    }
}

impl<'a> DwarfModule<'a> {
    /// Indexes `eh_frame`, mapped at `section_address`, by parsing every FDE once. A
    /// malformed section is an error.
    pub fn new(bytes: &'a [u8], section_address: u64) -> Result<DwarfModule<'a>, UnwindError> {
        let bad = |_| UnwindError::BadUnwindInfo(section_address);
        let eh_frame = EhFrame::new(bytes, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(section_address);
        let mut index = Vec::new();
        let mut entries = eh_frame.entries(&bases);
        while let Some(entry) = entries.next().map_err(bad)? {
            if let gimli::CieOrFde::Fde(partial) = entry {
                let fde = partial.parse(EhFrame::cie_from_offset).map_err(bad)?;
                index.push((fde.initial_address(), fde.offset()));
            }
        }
        DwarfModule::indexed(bytes, bases, index)
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
        DwarfModule::indexed(eh_frame, bases, index)
    }

    /// The module with its FDE index, and its CIEs parsed and evaluated once (a module has
    /// few, each shared by many FDEs).
    fn indexed(
        bytes: &'a [u8],
        bases: BaseAddresses,
        mut index: Vec<(u64, usize)>,
    ) -> Result<DwarfModule<'a>, UnwindError> {
        let address = bases.eh_frame.section.unwrap_or(0);
        let bad = UnwindError::BadUnwindInfo(address);
        let eh_frame = EhFrame::new(bytes, LittleEndian);
        index.sort_unstable();
        let mut cies = Vec::new();
        let mut saved = Vec::with_capacity(STATE_DEPTH);
        let mut entries = eh_frame.entries(&bases);
        while let Some(entry) = entries.next().map_err(|_| bad)? {
            if let gimli::CieOrFde::Cie(cie) = entry {
                let code = entry::cie_instructions(bytes, address, cie.offset());
                let (code_alignment, data_alignment) =
                    (cie.code_alignment_factor(), cie.data_alignment_factor());
                let rules = code
                    .ok_or(bad)
                    .and_then(|code| initial_row(code, code_alignment, data_alignment, &mut saved));
                cies.push(Cie {
                    offset: cie.offset(),
                    format: CieFormat {
                        encoding: cie.fde_address_encoding().unwrap_or(gimli::DW_EH_PE_absptr),
                        augmented: cie.augmentation().is_some(),
                        signal: cie.is_signal_trampoline(),
                    },
                    rules,
                    return_address: usize::from(cie.return_address_register().0),
                });
            }
        }
        Ok(DwarfModule {
            bytes,
            address,
            index,
            cies,
        })
    }

    /// The CIE at `offset`, if there is one there.
    fn cie(&self, offset: usize) -> Option<&Cie> {
        let i = self.cies.binary_search_by_key(&offset, |c| c.offset).ok()?;
        Some(&self.cies[i])
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

    /// True when an FDE covers `address`.
    pub fn covers(&self, address: u64) -> bool {
        let Some(offset) = self.find(address) else {
            return false;
        };
        entry::fde(self.bytes, self.address, offset, address, |at| {
            self.cie(at).map(|c| c.format)
        })
        .is_ok_and(|fde| (fde.start..fde.end).contains(&address))
    }

    /// The CFI row at `address` and the return-address column. `saved` is scratch space for
    /// `DW_CFA_remember_state`.
    fn row(&self, address: u64, saved: &mut Vec<Row>) -> Result<(Row, usize, bool), UnwindError> {
        let offset = self.find(address).ok_or(UnwindError::NoUnwindInfo(address))?;
        let mut cie = None;
        let fde = entry::fde(self.bytes, self.address, offset, address, |at| {
            cie = self.cie(at);
            cie.map(|c| c.format)
        })?;
        if !(fde.start..fde.end).contains(&address) {
            return Err(UnwindError::NoUnwindInfo(address));
        }
        let cie = cie.ok_or(UnwindError::BadUnwindInfo(address))?;
        let rules = cie.rules.as_ref().map_err(|e| *e)?;
        let row = row_at(
            fde.instructions,
            fde.start,
            cie.format.encoding,
            rules,
            address,
            saved,
        )?;
        Ok((row, cie.return_address, cie.format.signal))
    }

    /// The rule at `address` (already adjusted for the frame `kind`): CFA, return address
    /// (loaded, or held in a register) and every register the CFI restores; expressions are
    /// folded (`expr`). Registers it does not mention keep their value
    /// (callee-saved registers the function did not touch); an undefined return address is
    /// the end of the stack. Written into `rule` (reset); `saved` is scratch space for
    /// `DW_CFA_remember_state`.
    pub(crate) fn rule(
        &self,
        address: u64,
        kind: FrameKind,
        rule: &mut Rule,
        saved: &mut Vec<Row>,
    ) -> Result<(), UnwindError> {
        let (row, ra, signal) = self.row(address, saved)?;
        let bad = UnwindError::BadUnwindInfo(address);
        let register = |r: gimli::Register| by_dwarf(r).ok_or(bad);
        // The IP the expressions see: the looked-up address, one past it for a caller.
        let rip = match kind {
            FrameKind::First => address,
            FrameKind::Caller => address.wrapping_add(1),
        };
        let eval = |e, initial| evaluate(self.bytes, self.address, e, initial, rip, address);
        let cfa = match (row.cfa, row.cfa_expression) {
            (Some((base, offset)), _) => Source::same(register(base)?).plus(i64::from(offset), address)?,
            (None, Some(e)) => source(eval(e, None)?, address)?,
            (None, None) => return Err(bad),
        };
        let pushed = Some(symbol(cfa));
        match *row.registers.get(ra).ok_or(bad)? {
            RegisterRule::Offset(o) => rule.return_at(cfa, i64::from(o), address)?,
            RegisterRule::Register(from) => rule.return_in(register(from)?),
            RegisterRule::Expression(e) => rule.return_at(source(eval(e, pushed)?, address)?, 0, address)?,
            RegisterRule::Same | RegisterRule::Undefined => return Ok(()),
            RegisterRule::ValOffset(_) | RegisterRule::ValExpression(_) => return Err(bad),
        }
        rule.set_signal(signal);
        // The caller's RSP is the CFA, unless the CFI says where it was saved (a machine frame).
        rule.set(Register::Rsp, cfa);
        for n in (0..16u16).filter(|n| row.changed & 1 << n != 0) {
            let source = match row.registers[usize::from(n)] {
                RegisterRule::Same | RegisterRule::Undefined => continue,
                RegisterRule::Offset(o) => cfa.plus(i64::from(o), address)?.load(address)?,
                RegisterRule::ValOffset(o) => cfa.plus(i64::from(o), address)?,
                RegisterRule::Register(from) => Source::same(register(from)?),
                RegisterRule::Expression(e) => source(eval(e, pushed)?, address)?.load(address)?,
                RegisterRule::ValExpression(e) => source(eval(e, pushed)?, address)?,
            };
            rule.set(register(gimli::Register(n))?, source);
        }
        Ok(())
    }
}

/// A rule's source as an expression value.
fn symbol(source: Source) -> Sym {
    match source {
        Source::Add(r, o) => Sym::Reg(r, i64::from(o)),
        Source::Load(r, o) => Sym::Load(r, i64::from(o)),
    }
}

/// An expression's value as a rule's source: a register plus an offset, or the word there.
/// Constants are absolute addresses, which a rule relative to the callee's registers cannot
/// hold.
fn source(sym: Sym, at: u64) -> Result<Source, UnwindError> {
    let bad = UnwindError::BadUnwindInfo(at);
    let offset = |o: i64| i32::try_from(o).map_err(|_| bad);
    match sym {
        Sym::Reg(r, o) => Ok(Source::Add(r, offset(o)?)),
        Sym::Load(r, o) => Ok(Source::Load(r, offset(o)?)),
        Sym::Const(_) => Err(bad),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gimli::X86_64;
    use proptest::prelude::*;

    #[test]
    fn dwarf_numbers_name_the_right_registers() {
        let named = [
            (X86_64::RAX, Register::Rax),
            (X86_64::RDX, Register::Rdx),
            (X86_64::RCX, Register::Rcx),
            (X86_64::RBX, Register::Rbx),
            (X86_64::RSI, Register::Rsi),
            (X86_64::RDI, Register::Rdi),
            (X86_64::RBP, Register::Rbp),
            (X86_64::RSP, Register::Rsp),
            (X86_64::R8, Register::R8),
            (X86_64::R15, Register::R15),
        ];
        for (d, r) in named {
            assert_eq!(by_dwarf(d), Some(r));
        }
        assert_eq!(by_dwarf(X86_64::RA), None);
    }

    /// Our row evaluation against gimli's (`UnwindTable`) at the first and last address of
    /// every row of every FDE in `eh_frame`; returns how many rows were compared.
    fn rows_agree_with_gimli(eh_frame: &[u8], address: u64) -> usize {
        use gimli::RegisterRule as G;
        let module = DwarfModule::new(eh_frame, address).unwrap();
        let mut saved = Vec::with_capacity(STATE_DEPTH);
        let mut context = Box::new(gimli::UnwindContext::new());
        let section = EhFrame::new(eh_frame, LittleEndian);
        let bases = BaseAddresses::default().set_eh_frame(address);
        let mut entries = section.entries(&bases);
        let mut compared = 0;
        while let Some(entry) = entries.next().unwrap() {
            let gimli::CieOrFde::Fde(partial) = entry else {
                continue;
            };
            let fde = partial.parse(EhFrame::cie_from_offset).unwrap();
            let mut table = fde.rows(&section, &bases, &mut context).unwrap();
            while let Some(theirs) = table.next_row().unwrap() {
                for at in [theirs.start_address(), theirs.end_address() - 1] {
                    let (ours, _, _) = module.row(at, &mut saved).unwrap();
                    let expression = |e: &gimli::UnwindExpression<usize>| expr::Expr {
                        at: e.offset as u32,
                        len: e.length as u16,
                    };
                    let cfa = match theirs.cfa() {
                        gimli::CfaRule::RegisterAndOffset { register, offset } => {
                            (Some((*register, *offset as i32)), None)
                        }
                        gimli::CfaRule::Expression(e) => (None, Some(expression(e))),
                    };
                    assert_eq!((ours.cfa, ours.cfa_expression), cfa, "CFA at 0x{at:x}");
                    for n in 0..row::COLUMNS as u16 {
                        let expected = match theirs.register(gimli::Register(n)) {
                            None | Some(G::SameValue) => RegisterRule::Same,
                            Some(G::Undefined) => RegisterRule::Undefined,
                            Some(G::Offset(o)) => RegisterRule::Offset(o as i32),
                            Some(G::ValOffset(o)) => RegisterRule::ValOffset(o as i32),
                            Some(G::Register(r)) => RegisterRule::Register(r),
                            Some(G::Expression(e)) => RegisterRule::Expression(expression(&e)),
                            Some(G::ValExpression(e)) => RegisterRule::ValExpression(expression(&e)),
                            Some(other) => panic!("{other:?} at 0x{at:x}"),
                        };
                        assert_eq!(
                            ours.registers[usize::from(n)],
                            expected,
                            "register {n} at 0x{at:x}"
                        );
                    }
                    compared += 1;
                }
            }
        }
        compared
    }

    #[test]
    fn rows_of_real_compiler_output_agree_with_gimli() {
        let eh_frame = fixtures::elf::section(fixtures::elf::UNWIND_SAMPLE, ".eh_frame").unwrap();
        assert!(rows_agree_with_gimli(eh_frame.bytes, eh_frame.address) > 20);
    }

    /// One random call-frame operation (what gimli's writer can express).
    #[derive(Clone, Debug)]
    enum Op {
        Cfa(u16, i32),
        CfaRegister(u16),
        CfaOffset(i32),
        CfaExpression,
        Restore(u16),
        Undefined(u16),
        SameValue(u16),
        Offset(u16, i32),
        ValOffset(u16, i32),
        Register(u16, u16),
        Expression(u16),
        Remember,
        RestoreState,
        ArgsSize(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        let reg = 0u16..24;
        let off = (-64i32..64).prop_map(|o| o * 8);
        prop_oneof![
            (reg.clone(), off.clone()).prop_map(|(r, o)| Op::Cfa(r, o)),
            reg.clone().prop_map(Op::CfaRegister),
            off.clone().prop_map(Op::CfaOffset),
            Just(Op::CfaExpression),
            reg.clone().prop_map(Op::Restore),
            reg.clone().prop_map(Op::Undefined),
            reg.clone().prop_map(Op::SameValue),
            (reg.clone(), off.clone()).prop_map(|(r, o)| Op::Offset(r, o)),
            (reg.clone(), off).prop_map(|(r, o)| Op::ValOffset(r, o)),
            (reg.clone(), reg.clone()).prop_map(|(a, b)| Op::Register(a, b)),
            reg.prop_map(Op::Expression),
            Just(Op::Remember),
            Just(Op::RestoreState),
            (0u32..64).prop_map(Op::ArgsSize),
        ]
    }

    /// `.eh_frame` for one FDE running `ops` (each after an advance of the given size) under
    /// a CIE in gcc's form (`zR`, PC-relative 4-byte addresses) or the plain one. Operations
    /// gimli could not evaluate (a CFA offset after a CFA expression, an unmatched restore
    /// state) are dropped.
    fn program(ops: &[(u32, Op)], gcc_form: bool) -> Vec<u8> {
        use gimli::write::{self, CallFrameInstruction as W, Expression};
        let encoding = gimli::Encoding {
            format: gimli::Format::Dwarf32,
            version: 1,
            address_size: 8,
        };
        let mut cie = write::CommonInformationEntry::new(encoding, 1, -8, gimli::X86_64::RA);
        if gcc_form {
            cie.fde_address_encoding = gimli::DwEhPe(gimli::DW_EH_PE_pcrel.0 | gimli::DW_EH_PE_sdata4.0);
        }
        cie.add_instruction(W::Cfa(gimli::X86_64::RSP, 8));
        cie.add_instruction(W::Offset(gimli::X86_64::RA, -8));
        let length = ops.iter().map(|(a, _)| a).sum::<u32>() + 1;
        let mut fde = write::FrameDescriptionEntry::new(write::Address::Constant(0x40_1000), length);
        // Whether the CFA is an expression, now and in each remembered state (gimli keeps 3).
        let (mut at, mut remembered, mut cfa_expression) = (0, Vec::new(), false);
        for (advance, op) in ops {
            at += advance;
            let r = gimli::Register;
            let instruction = match *op {
                Op::Cfa(reg, o) => {
                    cfa_expression = false;
                    W::Cfa(r(reg), o)
                }
                Op::CfaRegister(_) | Op::CfaOffset(_) if cfa_expression => continue,
                Op::CfaRegister(reg) => W::CfaRegister(r(reg)),
                Op::CfaOffset(o) => W::CfaOffset(o),
                Op::CfaExpression => {
                    cfa_expression = true;
                    W::CfaExpression(Expression::new())
                }
                Op::Restore(reg) => W::Restore(r(reg)),
                Op::Undefined(reg) => W::Undefined(r(reg)),
                Op::SameValue(reg) => W::SameValue(r(reg)),
                Op::Offset(reg, o) => W::Offset(r(reg), o),
                Op::ValOffset(reg, o) => W::ValOffset(r(reg), o),
                Op::Register(a, b) => W::Register(r(a), r(b)),
                Op::Expression(reg) => W::Expression(r(reg), Expression::new()),
                Op::Remember if remembered.len() < 3 => {
                    remembered.push(cfa_expression);
                    W::RememberState
                }
                Op::RestoreState if !remembered.is_empty() => {
                    cfa_expression = remembered.pop().unwrap_or(false);
                    W::RestoreState
                }
                Op::Remember | Op::RestoreState => continue,
                Op::ArgsSize(n) => W::ArgsSize(n),
            };
            fde.add_instruction(at, instruction);
        }
        let mut table = write::FrameTable::default();
        let id = table.add_cie(cie);
        table.add_fde(id, fde);
        let mut eh_frame = write::EhFrame(write::EndianVec::new(LittleEndian));
        table.write_eh_frame(&mut eh_frame).unwrap();
        eh_frame.0.into_vec()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// Random programs over every operation, both CIE forms, advances of every width.
        #[test]
        fn rows_of_random_programs_agree_with_gimli(
            ops in prop::collection::vec((prop_oneof![0u32..4, 60u32..70, 250u32..260, 70_000u32..70_010], op()), 0..40),
            gcc_form in any::<bool>(),
        ) {
            let eh_frame = program(&ops, gcc_form);
            prop_assert!(rows_agree_with_gimli(&eh_frame, 0x40_2000) > 0);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Synthesized CFI uses remember/restore state, restore and every CFA form.
        #[test]
        fn rows_of_synthesized_functions_agree_with_gimli(shape in fixtures::strategies::function_shape()) {
            let code = sim_clr::synth::assemble(&shape, 0x7f20_0000_1000).unwrap();
            let eh_frame = sim_clr::synth::write_eh_frame(std::slice::from_ref(&code));
            prop_assert!(rows_agree_with_gimli(&eh_frame, 0x7f30_0000_0000) > 0);
        }
    }
}
