//! The unwind rule for one address: where each of the caller's registers comes from, in terms
//! of the callee's registers and the memory they point to.
//!
//! Both unwind formats are evaluated into a [`Rule`] without reading memory; the rule is then
//! applied to the registers (reading only the slots it names) and cached per address, so a
//! second visit to the same address skips the table lookup and evaluation. Evaluation works
//! on symbolic values — "callee register plus offset" or "the 8 bytes there" — and refuses,
//! as corrupt unwind data, an address that would have to be computed from a value loaded
//! from memory (a frame register restored before the frame it set up was unwound).

use super::{check_step, Regs, StackBounds, UnwindError};
use corprof::Register;

/// How one value is obtained from the callee's registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The callee's register plus an offset.
    Add(Register, i32),
    /// The 8 (16 for an XMM register) bytes at the callee's register plus an offset.
    Load(Register, i32),
}

impl Source {
    /// The callee's value of `r`.
    pub(crate) fn same(r: Register) -> Source {
        Source::Add(r, 0)
    }

    /// This value plus `k`; an error (at `at`) if the value was loaded from memory or the
    /// offset leaves ±2 GiB.
    pub(crate) fn plus(self, k: i64, at: u64) -> Result<Source, UnwindError> {
        match self {
            Source::Add(r, o) => i32::try_from(i64::from(o) + k)
                .map(|o| Source::Add(r, o))
                .map_err(|_| UnwindError::BadUnwindInfo(at)),
            Source::Load(..) => Err(UnwindError::BadUnwindInfo(at)),
        }
    }

    /// The memory this value points to (an error if the value itself was loaded).
    pub(crate) fn load(self, at: u64) -> Result<Source, UnwindError> {
        match self {
            Source::Add(r, o) => Ok(Source::Load(r, o)),
            Source::Load(..) => Err(UnwindError::BadUnwindInfo(at)),
        }
    }

    fn address(base: Register, offset: i32, regs: &Regs) -> u64 {
        regs.get(base).wrapping_add_signed(i64::from(offset))
    }

    fn value(self, regs: &Regs, read: &mut dyn FnMut(u64) -> Option<u64>) -> Result<u64, UnwindError> {
        match self {
            Source::Add(r, o) => Ok(Source::address(r, o, regs)),
            Source::Load(r, o) => {
                let a = Source::address(r, o, regs);
                read(a).ok_or(UnwindError::MemoryRead(a))
            }
        }
    }
}

/// One address's unwind rule: the caller's RIP and every register the unwind data restores.
/// Registers it does not name keep the callee's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    /// The caller's RIP; `None` when the unwind data marks the end of the stack.
    rip: Option<Source>,
    /// Bit `r` set: `gpr[r]` restores general-purpose register `r` (RSP is always bit 4).
    /// Bit `16 + x` set: XMM register `x` is restored from the 16 bytes at `xmm[x]`.
    mask: u32,
    gpr: [Source; 16],
    xmm: [Source; 16],
}

const RSP: usize = Register::Rsp as usize;

impl Rule {
    /// The identity: every register keeps its value and there is no caller RIP (applied as it
    /// is, the end of the stack).
    pub(crate) fn identity() -> Rule {
        Rule {
            rip: None,
            mask: 1 << RSP,
            gpr: Register::ALL.map(Source::same),
            xmm: [Source::same(Register::Rsp); 16],
        }
    }

    /// Where register `r`'s caller value comes from, as evaluated so far.
    pub(crate) fn get(&self, r: Register) -> Source {
        self.gpr[r as usize]
    }

    /// Restores `r` from `source`.
    pub(crate) fn set(&mut self, r: Register, source: Source) {
        self.gpr[r as usize] = source;
        self.mask |= 1 << r as usize;
    }

    /// Restores XMM register `x` (0–15) from the 16 bytes at `at`.
    pub(crate) fn set_xmm(&mut self, x: u8, at: Source, info: u64) -> Result<(), UnwindError> {
        at.load(info)?; // an address, not a loaded value
        self.xmm[usize::from(x & 15)] = at;
        self.mask |= 1 << (16 + u32::from(x & 15));
        Ok(())
    }

    /// Sets the caller's RIP.
    pub(crate) fn set_return(&mut self, rip: Source) {
        self.rip = Some(rip);
    }

    /// Undoes a `push r`: `r` from `[RSP]`, RSP past it.
    pub(crate) fn pop(&mut self, r: Register, at: u64) -> Result<(), UnwindError> {
        let rsp = self.get(Register::Rsp);
        self.set(r, rsp.load(at)?);
        self.set(Register::Rsp, rsp.plus(8, at)?);
        Ok(())
    }

    /// The return-address emulation that ends most unwinds: RIP from `[RSP]`, RSP past it.
    pub(crate) fn pop_return(&mut self, at: u64) -> Result<(), UnwindError> {
        let rsp = self.get(Register::Rsp);
        self.set_return(rsp.load(at)?);
        self.set(Register::Rsp, rsp.plus(8, at)?);
        Ok(())
    }

    /// Applies the rule to `regs` in place. `Ok(false)` at the end of the stack (no return
    /// address, or a return address of 0), leaving `regs` as they were; on an error `regs`
    /// are unchanged too. The new RSP is checked against the old one and the bounds.
    pub(crate) fn apply(
        &self,
        regs: &mut Regs,
        bounds: StackBounds,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<bool, UnwindError> {
        let Some(rip) = self.rip else {
            return Ok(false);
        };
        let rip = rip.value(regs, read)?;
        if rip == 0 {
            return Ok(false);
        }
        let mut gpr = regs.gpr;
        for r in bits(self.mask & 0xffff) {
            gpr[r] = self.gpr[r].value(regs, read)?;
        }
        check_step(regs.rsp(), gpr[RSP], bounds)?;
        let xmm_mask = self.mask >> 16;
        if xmm_mask != 0 {
            let mut xmm = regs.xmm;
            for x in bits(xmm_mask) {
                let at = self.xmm[x].value(regs, read)?;
                let mut half = |a: u64| read(a).ok_or(UnwindError::MemoryRead(a));
                xmm[x] = u128::from(half(at)?) | u128::from(half(at.wrapping_add(8))?) << 64;
            }
            regs.xmm = xmm;
        }
        regs.gpr = gpr;
        regs.rip = rip;
        Ok(true)
    }
}

/// The indices of the set bits of `mask`, lowest first.
fn bits(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            i
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: StackBounds = StackBounds {
        limit: 0x1000,
        base: 0x2000,
    };

    fn regs() -> Regs {
        let mut regs = Regs {
            rip: 0x40_0000,
            gpr: [0; 16],
            xmm: [7; 16],
        };
        regs.gpr[RSP] = 0x1800;
        regs.gpr[Register::Rbp as usize] = 0x1900;
        regs
    }

    /// `push rbp; mov rbp, rsp; push rbx; sub rsp, 8; movaps [rsp], xmm6` undone.
    fn framed() -> Rule {
        let mut rule = Rule::identity();
        let rbp = rule.get(Register::Rbp);
        rule.set(Register::Rbx, rbp.plus(-8, 0).unwrap().load(0).unwrap());
        rule.set_xmm(6, rbp.plus(-32, 0).unwrap(), 0).unwrap();
        rule.set(Register::Rsp, rbp);
        rule.pop(Register::Rbp, 0).unwrap();
        rule.pop_return(0).unwrap();
        rule
    }

    #[test]
    fn applying_reads_only_the_named_slots() {
        let mut r = regs();
        let mut reads = Vec::new();
        let more = framed().apply(&mut r, BOUNDS, &mut |a| {
            reads.push(a);
            Some(a + 1)
        });
        assert_eq!(more, Ok(true));
        // RIP, then the registers in number order (RBX, RBP), then XMM6.
        assert_eq!(reads, [0x1908, 0x18f8, 0x1900, 0x18e0, 0x18e8]);
        assert_eq!(
            (r.rip, r.rsp(), r.get(Register::Rbp), r.get(Register::Rbx)),
            (0x1909, 0x1910, 0x1901, 0x18f9)
        );
        assert_eq!(r.xmm[6], 0x18e9 << 64 | 0x18e1);
        assert_eq!(r.xmm[7], 7);
    }

    #[test]
    fn a_failed_apply_changes_nothing() {
        for bad in [0x1908, 0x1900, 0x18e8] {
            let mut r = regs();
            let result = framed().apply(&mut r, BOUNDS, &mut |a| (a != bad).then_some(a + 1));
            assert_eq!((result, r), (Err(UnwindError::MemoryRead(bad)), regs()));
        }
        let mut r = regs();
        let low = StackBounds {
            limit: 0x1000,
            base: 0x1900,
        };
        assert_eq!(
            framed().apply(&mut r, low, &mut |a| Some(a + 1)),
            Err(UnwindError::OutOfBounds(0x1910))
        );
        assert_eq!(r, regs());
    }

    #[test]
    fn the_end_of_the_stack_reads_nothing_or_a_zero_return_address() {
        let mut r = regs();
        assert_eq!(Rule::identity().apply(&mut r, BOUNDS, &mut |_| None), Ok(false));
        assert_eq!(framed().apply(&mut r, BOUNDS, &mut |_| Some(0)), Ok(false));
        assert_eq!(r, regs());
    }

    /// An address computed from a value loaded from memory cannot be a rule: corrupt data.
    #[test]
    fn addresses_from_loaded_values_are_bad_unwind_info() {
        let loaded = Source::same(Register::Rsp).load(9).unwrap();
        assert_eq!(loaded.plus(8, 9), Err(UnwindError::BadUnwindInfo(9)));
        assert_eq!(loaded.load(9), Err(UnwindError::BadUnwindInfo(9)));
        let far = Source::same(Register::Rsp).plus(i64::from(i32::MAX), 9).unwrap();
        assert_eq!(far.plus(1, 9), Err(UnwindError::BadUnwindInfo(9)));
    }
}
