//! Evaluating DWARF call-frame instructions up to one address: the row that applies there —
//! the CFA rule and the rules of the general-purpose registers and the return address — in a
//! fixed-size [`Row`]. Each instruction is decoded and applied in one step (one dispatch per
//! instruction: the hot loop of a cache miss). Rules for other registers are skipped;
//! expressions are kept as their place in the section and evaluated only if used.

use super::super::UnwindError;
use super::entry::Cursor;
use super::expr::Expr;
use gimli::{DwEhPe, Register};

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
    /// Saved at the address a DWARF expression computes (the CFA pushed first).
    Expression(Expr),
    /// The value a DWARF expression computes (the CFA pushed first).
    ValExpression(Expr),
}

/// The rules at one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Row {
    /// CFA = register + offset; `None` for a CFA expression.
    pub(crate) cfa: Option<(Register, i32)>,
    /// The CFA expression, when `cfa` is `None`.
    pub(crate) cfa_expression: Option<Expr>,
    /// Rules by DWARF register number.
    pub(crate) registers: [RegisterRule; COLUMNS],
    /// Bit `n` set: register `n`'s rule is not [`RegisterRule::Same`].
    pub(crate) changed: u32,
}

impl Default for Row {
    fn default() -> Row {
        // As gimli: register 0 plus 0 until the CIE defines the CFA.
        Row {
            cfa: Some((Register(0), 0)),
            cfa_expression: None,
            registers: [RegisterRule::Same; COLUMNS],
            changed: 0,
        }
    }
}

/// How a CIE's FDEs evaluate: its initial row and alignment factors.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CieRules {
    /// The row its initial instructions set up.
    pub(crate) initial: Row,
    /// Code alignment factor.
    pub(crate) code_alignment: u64,
    /// Data alignment factor.
    pub(crate) data_alignment: i64,
}

/// The state of one evaluation.
struct Evaluation<'s> {
    row: Row,
    /// The row after the CIE's initial instructions (for `DW_CFA_restore`); `None` while
    /// evaluating those.
    initial: Option<&'s Row>,
    /// Rows saved by `DW_CFA_remember_state` (capacity [`STATE_DEPTH`]; never grown).
    saved: &'s mut Vec<Row>,
    code_alignment: u64,
    data_alignment: i64,
    /// The FDE's pointer encoding and first address (for `DW_CFA_set_loc`).
    encoding: DwEhPe,
    function: u64,
    /// The start of the current row.
    location: u64,
    /// The address whose row is wanted.
    address: u64,
}

impl Evaluation<'_> {
    /// Runs the instructions at `code` until they end or one starts a row beyond `address`.
    fn run(&mut self, mut code: Cursor<'_>) -> Result<(), UnwindError> {
        let bad = UnwindError::BadUnwindInfo(self.address);
        while !code.is_empty() {
            if !self.step(&mut code).ok_or(bad)?? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Decodes and applies one instruction: `None` for a truncated or unknown instruction,
    /// `Some(Err)` for an impossible one, `Some(Ok(false))` when it starts a row beyond the
    /// wanted address.
    #[inline]
    fn step(&mut self, c: &mut Cursor<'_>) -> Option<Result<bool, UnwindError>> {
        use RegisterRule as R;
        let op = c.u8()?;
        let low = u16::from(op & 0x3f);
        // One dispatch on the whole opcode (one indirect jump per instruction, not two).
        let (register, rule) = match op {
            0x40..=0x7f => return Some(self.advance_by(u64::from(low))),
            0x80..=0xbf => (low, R::Offset(self.factored(c.uleb()?)?)),
            0xc0..=0xff => (low, self.initial_rule(low)?),
            0x00 | 0x2e => {
                if op == 0x2e {
                    c.uleb()?; // GNU_args_size
                }
                return Some(Ok(true));
            }
            0x01 => {
                let location = c.pointer(self.encoding, self.function)?;
                return Some(self.advance_to(location));
            }
            0x02 => return Some(self.advance_by(u64::from(c.u8()?))),
            0x03 => return Some(self.advance_by(u64::from(c.u16()?))),
            0x04 => return Some(self.advance_by(u64::from(c.u32()?))),
            0x05 => (c.register()?, R::Offset(self.factored(c.uleb()?)?)),
            0x06 => {
                let register = c.register()?;
                (register, self.initial_rule(register)?)
            }
            0x07 => (c.register()?, R::Undefined),
            0x08 => (c.register()?, R::Same),
            0x09 => (c.register()?, R::Register(Register(c.register()?))),
            0x0a => {
                if self.saved.len() == STATE_DEPTH {
                    return Some(Err(UnwindError::BadUnwindInfo(self.address)));
                }
                self.saved.push(self.row);
                return Some(Ok(true));
            }
            0x0b => {
                self.row = self.saved.pop()?;
                return Some(Ok(true));
            }
            0x0c => {
                let register = Register(c.register()?);
                self.row.cfa = Some((register, i32::try_from(c.uleb()?).ok()?));
                self.row.cfa_expression = None;
                return Some(Ok(true));
            }
            0x0d => {
                let (_, offset) = self.row.cfa?;
                self.row.cfa = Some((Register(c.register()?), offset));
                return Some(Ok(true));
            }
            0x0e | 0x13 => {
                let (register, _) = self.row.cfa?;
                let offset = if op == 0x0e {
                    i32::try_from(c.uleb()?).ok()?
                } else {
                    self.factored_signed(c.sleb()?)?
                };
                self.row.cfa = Some((register, offset));
                return Some(Ok(true));
            }
            0x0f => {
                let length = c.uleb()?;
                self.row.cfa_expression = Some(Expr::take(c, length)?);
                self.row.cfa = None;
                return Some(Ok(true));
            }
            0x10 | 0x16 => {
                let register = c.register()?;
                let length = c.uleb()?;
                let expr = Expr::take(c, length)?;
                (
                    register,
                    if op == 0x10 {
                        R::Expression(expr)
                    } else {
                        R::ValExpression(expr)
                    },
                )
            }
            0x11 => (c.register()?, R::Offset(self.factored_signed(c.sleb()?)?)),
            0x12 => {
                let register = Register(c.register()?);
                self.row.cfa = Some((register, self.factored_signed(c.sleb()?)?));
                self.row.cfa_expression = None;
                return Some(Ok(true));
            }
            0x14 => (c.register()?, R::ValOffset(self.factored(c.uleb()?)?)),
            0x15 => (c.register()?, R::ValOffset(self.factored_signed(c.sleb()?)?)),
            0x2f => {
                // GNU_negative_offset_extended
                let register = c.register()?;
                let offset = i64::try_from(c.uleb()?).ok()?;
                (register, R::Offset(self.factored_signed(-offset)?))
            }
            _ => return None,
        };
        self.set(register, rule);
        Some(Ok(true))
    }

    /// An unsigned factored offset times the data alignment (beyond ±2 GiB: not an x86-64
    /// stack frame).
    fn factored(&self, f: u64) -> Option<i32> {
        self.factored_signed(i64::try_from(f).ok()?)
    }

    fn factored_signed(&self, f: i64) -> Option<i32> {
        f.checked_mul(self.data_alignment)
            .and_then(|o| i32::try_from(o).ok())
    }

    /// The CIE's rule for `register` (only an FDE may restore one).
    fn initial_rule(&self, register: u16) -> Option<RegisterRule> {
        let initial = self.initial?;
        Some(
            initial
                .registers
                .get(usize::from(register))
                .copied()
                .unwrap_or(RegisterRule::Same),
        )
    }

    fn set(&mut self, register: u16, rule: RegisterRule) {
        let n = usize::from(register);
        if let Some(slot) = self.row.registers.get_mut(n) {
            *slot = rule;
            if rule == RegisterRule::Same {
                self.row.changed &= !(1 << n);
            } else {
                self.row.changed |= 1 << n;
            }
        }
    }

    fn advance_by(&mut self, delta: u64) -> Result<bool, UnwindError> {
        let bad = UnwindError::BadUnwindInfo(self.address);
        let delta = delta.checked_mul(self.code_alignment).ok_or(bad)?;
        self.advance_to(self.location.checked_add(delta).ok_or(bad)?)
    }

    /// A new row starts at `location`: false if it is beyond the wanted address.
    fn advance_to(&mut self, location: u64) -> Result<bool, UnwindError> {
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

/// The row a CIE's initial instructions (at `code`) set up, with its alignment factors.
/// `saved` is scratch space with capacity [`STATE_DEPTH`].
pub(crate) fn initial_row(
    code: Cursor<'_>,
    code_alignment: u64,
    data_alignment: i64,
    saved: &mut Vec<Row>,
) -> Result<CieRules, UnwindError> {
    saved.clear();
    let mut evaluation = Evaluation {
        row: Row::default(),
        initial: None,
        saved,
        code_alignment,
        data_alignment,
        encoding: gimli::DW_EH_PE_absptr,
        function: 0,
        location: 0,
        address: 0,
    };
    evaluation.run(code)?;
    Ok(CieRules {
        initial: evaluation.row,
        code_alignment,
        data_alignment,
    })
}

/// The row at `address` of an FDE starting at `start`, whose instructions are at `code`
/// (pointers in `encoding`), from its CIE's rules. `saved` is scratch space with capacity
/// [`STATE_DEPTH`].
pub(crate) fn row_at(
    code: Cursor<'_>,
    start: u64,
    encoding: DwEhPe,
    cie: &CieRules,
    address: u64,
    saved: &mut Vec<Row>,
) -> Result<Row, UnwindError> {
    saved.clear();
    let mut evaluation = Evaluation {
        row: cie.initial,
        initial: Some(&cie.initial),
        saved,
        code_alignment: cie.code_alignment,
        data_alignment: cie.data_alignment,
        encoding,
        function: start,
        location: start,
        address,
    };
    evaluation.run(code)?;
    Ok(evaluation.row)
}
