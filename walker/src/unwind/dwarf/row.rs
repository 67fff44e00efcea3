//! Evaluating DWARF call-frame instructions, parsed by gimli, up to one address: the row
//! that applies there — the CFA rule and the rules of the general-purpose registers and the
//! return address — in a fixed-size [`Row`]. Rules for other registers are skipped; rules
//! this unwinder cannot apply (expressions) are kept as such and refused only if used.

use super::super::UnwindError;
use gimli::{CallFrameInstruction, CallFrameInstructionIter, Reader, Register};

/// Columns kept: DWARF registers 0–16 (on x86-64 the 16 general-purpose registers and the
/// return address).
pub(crate) const COLUMNS: usize = 17;
/// How deep `DW_CFA_remember_state` may nest.
pub(crate) const STATE_DEPTH: usize = 16;

/// One register's rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegisterRule {
    /// The default: the caller's value is the callee's.
    Same,
    /// The value cannot be recovered.
    Undefined,
    /// Saved at CFA plus the offset.
    Offset(i32),
    /// The value is CFA plus the offset.
    ValOffset(i32),
    /// The value is in another register.
    Register(Register),
    /// A DWARF expression (not supported).
    Expression,
}

/// The rules at one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// CFA = register + offset; `None` for a CFA expression (not supported) or none yet.
    pub(crate) cfa: Option<(Register, i32)>,
    /// Rules by DWARF register number.
    pub(crate) registers: [RegisterRule; COLUMNS],
    /// Bit `n` set: register `n`'s rule is not [`RegisterRule::Same`].
    pub(crate) changed: u32,
}

impl Default for Row {
    fn default() -> Row {
        Row {
            cfa: None,
            registers: [RegisterRule::Same; COLUMNS],
            changed: 0,
        }
    }
}

/// The state of one evaluation.
struct Evaluation<'s> {
    row: Row,
    /// The row after the CIE's initial instructions (for `DW_CFA_restore`).
    initial: Option<&'s Row>,
    /// Rows saved by `DW_CFA_remember_state` (capacity [`STATE_DEPTH`]; never grown).
    saved: &'s mut Vec<Row>,
    code_alignment: u64,
    data_alignment: i64,
    /// The start of the current row.
    location: u64,
    /// The address whose row is wanted.
    address: u64,
}

impl Evaluation<'_> {
    /// Runs instructions until they end or one would start a row beyond `address`.
    fn run<R: Reader>(
        &mut self,
        mut instructions: CallFrameInstructionIter<'_, R>,
    ) -> Result<(), UnwindError> {
        let bad = UnwindError::BadUnwindInfo(self.address);
        while let Some(instruction) = instructions.next().map_err(|_| bad)? {
            if !self.execute(instruction)? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Executes one instruction; false when it starts a row beyond the wanted address.
    fn execute<T: gimli::ReaderOffset>(
        &mut self,
        instruction: CallFrameInstruction<T>,
    ) -> Result<bool, UnwindError> {
        use CallFrameInstruction as I;
        let bad = UnwindError::BadUnwindInfo(self.address);
        // Offsets beyond ±2 GiB are not x86-64 stack frames.
        let factored = |f: i64| {
            f.checked_mul(self.data_alignment)
                .and_then(|o| i32::try_from(o).ok())
                .ok_or(bad)
        };
        let unsigned = |f: u64| factored(i64::try_from(f).map_err(|_| bad)?);
        let unfactored = |o: u64| i32::try_from(o).map_err(|_| bad);
        let (register, rule) = match instruction {
            I::SetLoc { address } => return self.advance(address),
            I::AdvanceLoc { delta } => {
                let delta = u64::from(delta).checked_mul(self.code_alignment).ok_or(bad)?;
                return self.advance(self.location.checked_add(delta).ok_or(bad)?);
            }
            I::DefCfa { register, offset } => {
                self.row.cfa = Some((register, unfactored(offset)?));
                return Ok(true);
            }
            I::DefCfaSf {
                register,
                factored_offset,
            } => {
                self.row.cfa = Some((register, factored(factored_offset)?));
                return Ok(true);
            }
            I::DefCfaRegister { register } => {
                let (_, offset) = self.row.cfa.ok_or(bad)?;
                self.row.cfa = Some((register, offset));
                return Ok(true);
            }
            I::DefCfaOffset { offset } => {
                let (register, _) = self.row.cfa.ok_or(bad)?;
                self.row.cfa = Some((register, unfactored(offset)?));
                return Ok(true);
            }
            I::DefCfaOffsetSf { factored_offset } => {
                let (register, _) = self.row.cfa.ok_or(bad)?;
                self.row.cfa = Some((register, factored(factored_offset)?));
                return Ok(true);
            }
            I::DefCfaExpression { .. } => {
                self.row.cfa = None;
                return Ok(true);
            }
            I::RememberState => {
                if self.saved.len() == STATE_DEPTH {
                    return Err(bad);
                }
                self.saved.push(self.row);
                return Ok(true);
            }
            I::RestoreState => {
                self.row = self.saved.pop().ok_or(bad)?;
                return Ok(true);
            }
            I::Undefined { register } => (register, RegisterRule::Undefined),
            I::SameValue { register } => (register, RegisterRule::Same),
            I::Offset {
                register,
                factored_offset,
            } => (register, RegisterRule::Offset(unsigned(factored_offset)?)),
            I::OffsetExtendedSf {
                register,
                factored_offset,
            } => (register, RegisterRule::Offset(factored(factored_offset)?)),
            I::ValOffset {
                register,
                factored_offset,
            } => (register, RegisterRule::ValOffset(unsigned(factored_offset)?)),
            I::ValOffsetSf {
                register,
                factored_offset,
            } => (register, RegisterRule::ValOffset(factored(factored_offset)?)),
            I::Register {
                dest_register,
                src_register,
            } => (dest_register, RegisterRule::Register(src_register)),
            I::Expression { register, .. } | I::ValExpression { register, .. } => {
                (register, RegisterRule::Expression)
            }
            I::Restore { register } => {
                // Only an FDE may restore a rule to the CIE's.
                let initial = self.initial.ok_or(bad)?;
                let rule = initial
                    .registers
                    .get(usize::from(register.0))
                    .copied()
                    .unwrap_or(RegisterRule::Same);
                (register, rule)
            }
            _ => return Ok(true), // GNU_args_size, AArch64's negate_ra_state, nop
        };
        let n = usize::from(register.0);
        if let Some(slot) = self.row.registers.get_mut(n) {
            *slot = rule;
            if rule == RegisterRule::Same {
                self.row.changed &= !(1 << n);
            } else {
                self.row.changed |= 1 << n;
            }
        }
        Ok(true)
    }

    /// A new row starts at `location`: false if it is beyond the wanted address.
    fn advance(&mut self, location: u64) -> Result<bool, UnwindError> {
        if self.initial.is_none() || location < self.location {
            return Err(UnwindError::BadUnwindInfo(self.address));
        }
        if location > self.address {
            return Ok(false);
        }
        self.location = location;
        Ok(true)
    }
}

/// The row a CIE's initial instructions set up. `saved` is scratch space with capacity
/// [`STATE_DEPTH`].
pub(crate) fn initial_row<R: Reader, S: gimli::UnwindSection<R>>(
    section: &S,
    bases: &gimli::BaseAddresses,
    cie: &gimli::CommonInformationEntry<R>,
    saved: &mut Vec<Row>,
) -> Result<Row, UnwindError> {
    saved.clear();
    let mut evaluation = Evaluation {
        row: Row::default(),
        initial: None,
        saved,
        code_alignment: cie.code_alignment_factor(),
        data_alignment: cie.data_alignment_factor(),
        location: 0,
        address: 0,
    };
    evaluation.run(cie.instructions(section, bases))?;
    Ok(evaluation.row)
}

/// The row of `fde` that applies at `address` (which the FDE covers), from its CIE's
/// `initial` row. `saved` is scratch space with capacity [`STATE_DEPTH`].
pub(crate) fn row_at<R: Reader, S: gimli::UnwindSection<R>>(
    section: &S,
    bases: &gimli::BaseAddresses,
    fde: &gimli::FrameDescriptionEntry<R>,
    initial: &Row,
    address: u64,
    saved: &mut Vec<Row>,
) -> Result<Row, UnwindError> {
    let cie = fde.cie();
    saved.clear();
    let mut evaluation = Evaluation {
        row: *initial,
        initial: Some(initial),
        saved,
        code_alignment: cie.code_alignment_factor(),
        data_alignment: cie.data_alignment_factor(),
        location: fde.initial_address(),
        address,
    };
    evaluation.run(fde.instructions(section, bases))?;
    Ok(evaluation.row)
}
