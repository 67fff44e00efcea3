//! The DWARF expressions call-frame information uses, evaluated symbolically when a rule is
//! built: a value is a constant, a callee register plus an offset, or the word stored there.
//!
//! That covers what compilers and C libraries emit: the PLT's CFA
//! (`rsp + 8 + ((rip & 15) >= 11) * 8` — RIP is known when the rule is built, so the
//! arithmetic folds to a constant), a signal trampoline's CFA (`[rsp + 160]`) and its
//! registers (`rsp + 40`…). Anything else — arithmetic on a loaded value, an unknown
//! operation, a stack deeper than [`DEPTH`], a program longer than [`LENGTH`] bytes — is
//! refused as bad unwind data, never guessed.

use super::by_dwarf;
use super::entry::Cursor;
use crate::unwind::UnwindError;
use corprof::Register;

/// The deepest evaluation stack accepted.
pub(crate) const DEPTH: usize = 16;
/// The longest expression accepted, in bytes.
pub(crate) const LENGTH: usize = 256;

/// A symbolic value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sym {
    /// A known constant.
    Const(u64),
    /// The callee's register plus an offset.
    Reg(Register, i64),
    /// The word at the callee's register plus an offset.
    Load(Register, i64),
}

/// Where an expression lies in `.eh_frame`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expr {
    /// Offset of its first byte in the section.
    pub(crate) at: u32,
    /// Its length in bytes.
    pub(crate) len: u16,
}

impl Expr {
    /// The expression that `length` bytes at the cursor hold (skipped), if it fits.
    pub(crate) fn take(c: &mut Cursor<'_>, length: u64) -> Option<Expr> {
        let at = u32::try_from(c.position()).ok()?;
        let len = u16::try_from(length).ok().filter(|&l| usize::from(l) <= LENGTH)?;
        c.skip(length)?;
        Some(Expr { at, len })
    }
}

/// Evaluates the expression at `expr` in `section` (mapped at `address`), with `initial`
/// pushed first (the CFA, for register rules) and RIP equal to `rip`. `at` names the
/// address whose rule is built, for errors.
pub(crate) fn evaluate(
    section: &[u8],
    address: u64,
    expr: Expr,
    initial: Option<Sym>,
    rip: u64,
    at: u64,
) -> Result<Sym, UnwindError> {
    let bad = UnwindError::BadUnwindInfo(at);
    let start = expr.at as usize;
    let end = start + usize::from(expr.len);
    let bytes = section.get(..end).ok_or(bad)?;
    let mut c = Cursor::new(bytes, address, start);
    let mut stack = [Sym::Const(0); DEPTH];
    let mut depth = 0;
    let push = |stack: &mut [Sym; DEPTH], depth: &mut usize, v: Sym| {
        let slot = stack.get_mut(*depth).ok_or(bad)?;
        *slot = v;
        *depth += 1;
        Ok::<(), UnwindError>(())
    };
    if let Some(v) = initial {
        push(&mut stack, &mut depth, v)?;
    }
    while !c.is_empty() {
        let op = c.u8().ok_or(bad)?;
        let value = match op {
            0x30..=0x4f => Sym::Const(u64::from(op - 0x30)),
            0x70..=0x8f => {
                let offset = c.sleb().ok_or(bad)?;
                match op - 0x70 {
                    16 => Sym::Const(rip.wrapping_add_signed(offset)),
                    n => Sym::Reg(by_dwarf(gimli::Register(u16::from(n))).ok_or(bad)?, offset),
                }
            }
            0x08 => Sym::Const(u64::from(c.u8().ok_or(bad)?)),
            0x09 => Sym::Const(c.u8().ok_or(bad)? as i8 as u64),
            0x0a => Sym::Const(u64::from(c.u16().ok_or(bad)?)),
            0x0b => Sym::Const(c.u16().ok_or(bad)? as i16 as u64),
            0x0c => Sym::Const(u64::from(c.u32().ok_or(bad)?)),
            0x0d => Sym::Const(c.u32().ok_or(bad)? as i32 as u64),
            0x0e | 0x0f => Sym::Const(c.u64().ok_or(bad)?),
            0x10 => Sym::Const(c.uleb().ok_or(bad)?),
            0x11 => Sym::Const(c.sleb().ok_or(bad)? as u64),
            0x12 => *stack.get(depth.checked_sub(1).ok_or(bad)?).ok_or(bad)?,
            0x13 => {
                depth = depth.checked_sub(1).ok_or(bad)?;
                continue;
            }
            0x16 => {
                let top = depth.checked_sub(1).ok_or(bad)?;
                stack.swap(top, top.checked_sub(1).ok_or(bad)?);
                continue;
            }
            0x06 => {
                depth = depth.checked_sub(1).ok_or(bad)?;
                match stack[depth] {
                    Sym::Reg(r, o) => Sym::Load(r, o),
                    _ => return Err(bad),
                }
            }
            0x23 => {
                depth = depth.checked_sub(1).ok_or(bad)?;
                let k = c.uleb().ok_or(bad)?;
                add(stack[depth], Sym::Const(k)).ok_or(bad)?
            }
            0x1a | 0x1c | 0x1e | 0x21 | 0x22 | 0x24 | 0x25 | 0x29..=0x2e => {
                depth = depth.checked_sub(2).ok_or(bad)?;
                binary(op, stack[depth], stack[depth + 1]).ok_or(bad)?
            }
            _ => return Err(bad),
        };
        push(&mut stack, &mut depth, value)?;
    }
    depth.checked_sub(1).map(|top| stack[top]).ok_or(bad)
}

fn add(a: Sym, b: Sym) -> Option<Sym> {
    match (a, b) {
        (Sym::Const(x), Sym::Const(y)) => Some(Sym::Const(x.wrapping_add(y))),
        (Sym::Reg(r, o), Sym::Const(k)) | (Sym::Const(k), Sym::Reg(r, o)) => {
            Some(Sym::Reg(r, o.checked_add(k as i64)?))
        }
        _ => None,
    }
}

/// A binary operation: `a op b` with `b` on top. Only `plus` and `minus` accept a register
/// value (with a constant); every other operation needs two constants.
fn binary(op: u8, a: Sym, b: Sym) -> Option<Sym> {
    if op == 0x22 {
        return add(a, b);
    }
    if let (0x1c, Sym::Reg(r, o), Sym::Const(k)) = (op, a, b) {
        return Some(Sym::Reg(r, o.checked_sub(k as i64)?));
    }
    let (Sym::Const(x), Sym::Const(y)) = (a, b) else {
        return None;
    };
    let (sx, sy) = (x as i64, y as i64);
    Some(Sym::Const(match op {
        0x1a => x & y,
        0x1c => x.wrapping_sub(y),
        0x1e => x.wrapping_mul(y),
        0x21 => x | y,
        0x24 => x.checked_shl(u32::try_from(y).ok()?).unwrap_or(0),
        0x25 => x.checked_shr(u32::try_from(y).ok()?).unwrap_or(0),
        0x29 => u64::from(x == y),
        0x2a => u64::from(sx >= sy),
        0x2b => u64::from(sx > sy),
        0x2c => u64::from(sx <= sy),
        0x2d => u64::from(sx < sy),
        0x2e => u64::from(x != y),
        _ => return None,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(bytes: &[u8], initial: Option<Sym>, rip: u64) -> Result<Sym, UnwindError> {
        let expr = Expr {
            at: 0,
            len: bytes.len() as u16,
        };
        evaluate(bytes, 0, expr, initial, rip, 0x1000)
    }

    #[test]
    fn the_plt_cfa_folds_to_an_offset_from_rsp() {
        // DW_OP_breg7 (rsp): 8; DW_OP_breg16 (rip): 0; lit15; and; lit11; ge; lit3; shl; plus
        let plt = [0x77, 8, 0x80, 0, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22];
        assert_eq!(run(&plt, None, 0x1000 + 6), Ok(Sym::Reg(Register::Rsp, 8)));
        assert_eq!(run(&plt, None, 0x1000 + 11), Ok(Sym::Reg(Register::Rsp, 16)));
    }

    #[test]
    fn signal_frames_load_the_cfa_and_name_slots() {
        // DW_OP_breg7 (rsp): 160; DW_OP_deref
        assert_eq!(
            run(&[0x77, 0xa0, 0x01, 0x06], None, 0),
            Ok(Sym::Load(Register::Rsp, 160))
        );
        // A register rule: the CFA pushed first, the slot's address on top.
        let cfa = Sym::Load(Register::Rsp, 160);
        assert_eq!(run(&[0x77, 40], Some(cfa), 0), Ok(Sym::Reg(Register::Rsp, 40)));
    }

    #[test]
    fn what_cannot_be_folded_is_refused() {
        let bad = Err(UnwindError::BadUnwindInfo(0x1000));
        assert_eq!(
            run(&[0x77, 0, 0x06, 0x23, 8], None, 0),
            bad,
            "arithmetic on a loaded value"
        );
        assert_eq!(run(&[0x96], None, 0), bad, "an unknown operation");
        assert_eq!(run(&[0x22], None, 0), bad, "an empty stack");
        assert_eq!(run(&[0x30; 17], None, 0), bad, "too deep");
        assert_eq!(run(&[], None, 0), bad, "no value");
        assert_eq!(run(&[0x77], None, 0), bad, "truncated");
        assert_eq!(run(&[0x30, 0x06], None, 0), bad, "a load from a constant address");
    }
}
