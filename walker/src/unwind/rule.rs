//! The unwind rule for one address: where each of the caller's registers comes from, in terms
//! of the callee's registers and the memory they point to.
//!
//! Both unwind formats are evaluated into a [`Rule`] without reading memory; the rule is then
//! applied to the registers and cached per address, so a second visit to the same address
//! skips the table lookup and evaluation. Evaluation works on symbolic values — "callee
//! register plus offset" or "the 8 bytes there" — and refuses, as corrupt unwind data, an
//! address that would have to be computed from a value loaded from memory (a frame register
//! restored before the frame it set up was unwound).
//!
//! A walk applies rules to [`LazyRegs`]: a restored register's saved value is read only when
//! a later rule uses the register as a base, so walking reads little more than the return
//! addresses. A single step reads every restored register.

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
        self.address(at).map(|a| Source::Load(a.base, a.offset))
    }

    /// This value as an address (an error if it was loaded).
    fn address(self, at: u64) -> Result<Address, UnwindError> {
        match self {
            Source::Add(base, offset) => Ok(Address { base, offset }),
            Source::Load(..) => Err(UnwindError::BadUnwindInfo(at)),
        }
    }
}

/// A callee register plus an offset: an address, or a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Address {
    base: Register,
    offset: i32,
}

impl Address {
    fn at(self, gpr: &[u64; 16]) -> u64 {
        gpr[self.base as usize].wrapping_add_signed(i64::from(self.offset))
    }
}

fn read_at(read: &mut impl FnMut(u64) -> Option<u64>, a: u64) -> Result<u64, UnwindError> {
    read(a).ok_or(UnwindError::MemoryRead(a))
}

/// General-purpose registers during a walk. A register whose `pending` bit is set holds, in
/// `gpr`, the address of its saved value rather than the value. RSP is never pending.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LazyRegs {
    /// The instruction pointer.
    pub(crate) rip: u64,
    /// RSP, as in `gpr` (kept apart so that a walk carries it from frame to frame in a
    /// register rather than through memory).
    rsp: u64,
    gpr: [u64; 16],
    pending: u16,
}

impl LazyRegs {
    /// Registers whose values are all known.
    pub(crate) fn new(rip: u64, gpr: [u64; 16]) -> LazyRegs {
        LazyRegs {
            rip,
            rsp: gpr[RSP],
            gpr,
            pending: 0,
        }
    }

    /// Reads the saved values of the pending registers in `mask`.
    fn materialize(
        &mut self,
        mask: u16,
        read: &mut impl FnMut(u64) -> Option<u64>,
    ) -> Result<(), UnwindError> {
        for r in bits(self.pending & mask) {
            self.gpr[r] = read_at(read, self.gpr[r])?;
        }
        self.pending &= !mask;
        Ok(())
    }
}

/// One address's unwind rule: the caller's RIP and every register the unwind data restores.
/// Registers it does not name keep the callee's value.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rule {
    /// Where the caller's RIP is loaded from (or, with `rip_in_register`, the value it is);
    /// `None` when the unwind data marks the end of the stack.
    rip: Option<Address>,
    /// The caller's RIP is `rip`'s value itself: a return address held in a register.
    rip_in_register: bool,
    /// The frame is a signal frame: its caller was interrupted, so the caller's IP is not a
    /// return address (look it up as an interrupted frame's).
    signal: bool,
    /// Bit `r` set: general-purpose register `r` is loaded from `gpr[r]`.
    loads: u16,
    /// Bit `r` set: general-purpose register `r` is `gpr[r]` itself (RSP, nearly always).
    adds: u16,
    /// Bit `x` set: XMM register `x` is loaded from the 16 bytes at `xmm[x]`.
    xmms: u16,
    /// The registers the addresses and values are computed from (a superset).
    bases: u16,
    /// Meaningful only where `loads`, `adds` or `xmms` have the bit set.
    gpr: [Address; 16],
    xmm: [Address; 16],
    /// The general-purpose restores as a fixed sequence of moves, when `restores` says so.
    moves: [Move; MOVES],
    /// How a walk applies the general-purpose restores: set by [`Rule::seal`], back to
    /// [`Restores::Each`] by [`Rule::reset`].
    restores: Restores,
}

/// How a walk applies a rule's general-purpose restores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Restores {
    /// One by one, for each register in `loads | adds`.
    Each,
    /// As the fixed sequence in `moves`.
    Moves,
    /// As the fixed sequence in `moves`, every one from the callee's RSP, which a walk keeps
    /// in a register: no other register is read (measured: applying these as `Moves` makes
    /// warm walks of frameless functions about a third slower).
    MovesFromRsp,
}

/// How many general-purpose restores a sealed rule applies as a fixed sequence: a walk then
/// runs the same instructions for every frame, with no loop whose length varies from frame to
/// frame (a mispredicted branch per frame costs more than the moves themselves).
const MOVES: usize = 8;

/// One general-purpose restore of a sealed rule: `gpr[to] = callee[from] + offset` (an address
/// for a loaded register, the value for an added one). Padding moves repeat the first one.
#[derive(Clone, Copy, Debug)]
struct Move {
    offset: i32,
    to: u8,
    from: u8,
}

const RSP: usize = Register::Rsp as usize;

impl Rule {
    /// The identity: every register keeps its value and there is no caller RIP (applied as it
    /// is, the end of the stack).
    pub(crate) fn identity() -> Rule {
        let nowhere = Address {
            base: Register::Rsp,
            offset: 0,
        };
        Rule {
            rip: None,
            rip_in_register: false,
            signal: false,
            loads: 0,
            adds: 0,
            xmms: 0,
            bases: 0,
            gpr: [nowhere; 16],
            xmm: [nowhere; 16],
            moves: [Move {
                offset: 0,
                to: 0,
                from: 0,
            }; MOVES],
            restores: Restores::Each,
        }
    }

    /// Makes this rule the identity again (cheaply: only the masks say what is restored).
    pub(crate) fn reset(&mut self) {
        self.rip = None;
        self.rip_in_register = false;
        self.signal = false;
        self.loads = 0;
        self.adds = 0;
        self.xmms = 0;
        self.bases = 0;
        self.restores = Restores::Each;
    }

    /// Prepares the complete rule for walks (the cache does so when the next walk starts):
    /// its general-purpose restores as a fixed sequence of moves when there are at most
    /// [`MOVES`] of them. [`Rule::reset`] undoes it. Returns, for a *plain* frame, the offset
    /// from the callee's RSP to the caller's, whose RIP is the word just below: nearly every
    /// frame is plain, and a walk that has the offset from the cache's tag knows where the
    /// return address is before it reads the rule.
    pub(crate) fn seal(&mut self) -> Option<i32> {
        let rsp = self.gpr[RSP];
        let plain = self.rip.filter(|rip| {
            !self.rip_in_register
                && self.adds & 1 << RSP != 0
                && (rsp.base, rip.base) == (Register::Rsp, Register::Rsp)
                && i64::from(rip.offset) + 8 == i64::from(rsp.offset)
        });
        let plain = plain.map(|_| rsp.offset);
        let restored = self.loads | self.adds;
        if restored.count_ones() as usize > MOVES {
            return plain;
        }
        // Each restore in register order; padding repeats the first.
        let mut moves = bits(restored).map(|r| Move {
            offset: self.gpr[r].offset,
            to: r as u8,
            from: self.gpr[r].base as u8,
        });
        let Some(first) = moves.next() else {
            return plain;
        };
        self.moves = [first; MOVES];
        for (slot, m) in self.moves.iter_mut().skip(1).zip(moves) {
            *slot = m;
        }
        self.restores = if self.bases & !(1 << RSP) == 0 {
            Restores::MovesFromRsp
        } else {
            Restores::Moves
        };
        plain
    }

    /// Makes this (reset) rule the frame-pointer rule, for code no unwind data covers: the
    /// caller's RIP at `[RBP + 8]`, its RSP at `RBP + 16`, its RBP at `[RBP]` (right only
    /// inside the body of a function that keeps a frame pointer).
    pub(crate) fn use_frame_pointer(&mut self) {
        self.return_from(Address {
            base: Register::Rbp,
            offset: 8,
        });
        self.set(Register::Rsp, Source::Add(Register::Rbp, 16));
        self.set(Register::Rbp, Source::Load(Register::Rbp, 0));
    }

    /// Where register `r`'s caller value comes from, as evaluated so far.
    pub(crate) fn get(&self, r: Register) -> Source {
        let bit = 1 << r as usize;
        let Address { base, offset } = self.gpr[r as usize];
        if self.loads & bit != 0 {
            Source::Load(base, offset)
        } else if self.adds & bit != 0 {
            Source::Add(base, offset)
        } else {
            Source::same(r)
        }
    }

    /// Restores `r` from `source`.
    pub(crate) fn set(&mut self, r: Register, source: Source) {
        let bit = 1 << r as usize;
        let (address, loaded) = match source {
            Source::Add(base, offset) => (Address { base, offset }, false),
            Source::Load(base, offset) => (Address { base, offset }, true),
        };
        if loaded {
            self.adds &= !bit;
            self.loads |= bit;
        } else {
            self.loads &= !bit;
            self.adds |= bit;
        }
        self.bases |= 1 << address.base as usize;
        self.gpr[r as usize] = address;
    }

    /// Restores XMM register `x` (0–15) from the 16 bytes at `at`.
    pub(crate) fn set_xmm(&mut self, x: u8, at: Source, info: u64) -> Result<(), UnwindError> {
        let address = at.address(info)?;
        self.bases |= 1 << address.base as usize;
        self.xmm[usize::from(x & 15)] = address;
        self.xmms |= 1 << (x & 15);
        Ok(())
    }

    /// Sets the caller's RIP, loaded from `at`.
    fn set_return(&mut self, at: Source, info: u64) -> Result<(), UnwindError> {
        self.return_from(at.address(info)?);
        Ok(())
    }

    fn return_from(&mut self, address: Address) {
        self.bases |= 1 << address.base as usize;
        self.rip = Some(address);
    }

    /// Undoes a `push r`: `r` from `[RSP]`, RSP past it.
    pub(crate) fn pop(&mut self, r: Register, at: u64) -> Result<(), UnwindError> {
        let rsp = self.get(Register::Rsp);
        self.set(r, rsp.load(at)?);
        self.set(Register::Rsp, rsp.plus(8, at)?);
        Ok(())
    }

    /// The caller's RIP and RSP from a hardware frame at `frame` (RIP, CS, RFLAGS, RSP, SS).
    pub(crate) fn machine_frame(&mut self, frame: Source, at: u64) -> Result<(), UnwindError> {
        self.set_return(frame, at)?;
        self.set(Register::Rsp, frame.plus(24, at)?.load(at)?);
        Ok(())
    }

    /// The return address held in the callee's register `r` (DWARF `DW_CFA_register`).
    pub(crate) fn return_in(&mut self, r: Register) {
        self.return_from(Address { base: r, offset: 0 });
        self.rip_in_register = true;
    }

    /// Marks the frame as a signal frame (or not).
    pub(crate) fn set_signal(&mut self, signal: bool) {
        self.signal = signal;
    }

    /// True for a signal frame: the next frame is an interrupted one, not a caller.
    pub(crate) fn is_signal(&self) -> bool {
        self.signal
    }

    /// The return address at `[CFA + offset]` (DWARF).
    pub(crate) fn return_at(&mut self, cfa: Source, offset: i64, at: u64) -> Result<(), UnwindError> {
        self.set_return(cfa.plus(offset, at)?, at)
    }

    /// The return-address emulation that ends most unwinds: RIP from `[RSP]`, RSP past it.
    pub(crate) fn pop_return(&mut self, at: u64) -> Result<(), UnwindError> {
        let rsp = self.get(Register::Rsp);
        self.set_return(rsp, at)?;
        self.set(Register::Rsp, rsp.plus(8, at)?);
        Ok(())
    }

    /// Applies the rule to a walk's registers: reads the pending registers it computes from
    /// and the caller's RIP, records where the restored registers were saved, and checks the
    /// new RSP. `plain` is what [`Rule::seal`] returned (as a cache tag holds it) or `None`,
    /// which applies the rule in its general form. `Ok(false)` at the end of the stack: no return address,
    /// a return address of 0, or a return address relative to a register holding 0 (the
    /// outermost frame's RBP). On an error `regs` are no longer meaningful.
    #[inline(always)]
    pub(crate) fn apply_lazy(
        &self,
        plain: Option<i32>,
        regs: &mut LazyRegs,
        bounds: StackBounds,
        read: &mut impl FnMut(u64) -> Option<u64>,
    ) -> Result<bool, UnwindError> {
        let Some(rip) = self.rip else {
            return Ok(false);
        };
        regs.materialize(self.bases, read)?;
        // The return address's base register and address; for a plain frame, the new RSP.
        let (base, at, rsp) = match plain {
            Some(offset) => {
                let rsp = regs.rsp.wrapping_add_signed(i64::from(offset));
                (regs.rsp, rsp.wrapping_sub(8), Some(rsp))
            }
            None => (regs.gpr[rip.base as usize], rip.at(&regs.gpr), None),
        };
        if base == 0 {
            return Ok(false);
        }
        let rip = if self.rip_in_register {
            at
        } else {
            read_at(read, at)?
        };
        if rip == 0 {
            return Ok(false);
        }
        // Every address and value comes from the callee's registers: a loaded register holds
        // its address until it is materialized, an added one its value.
        let callee = regs.rsp;
        match self.restores {
            Restores::MovesFromRsp => {
                for m in &self.moves {
                    regs.gpr[usize::from(m.to & 15)] = callee.wrapping_add_signed(i64::from(m.offset));
                }
            }
            Restores::Moves => {
                // Every value first, from the callee's registers, then every store (no copy
                // of the register file: copying it in wide words just after the last frame
                // stored it word by word stalls).
                let values = self
                    .moves
                    .map(|m| regs.gpr[usize::from(m.from & 15)].wrapping_add_signed(i64::from(m.offset)));
                for (m, value) in self.moves.iter().zip(values) {
                    regs.gpr[usize::from(m.to & 15)] = value;
                }
            }
            Restores::Each => {
                let callee = regs.gpr;
                for r in bits(self.loads | self.adds) {
                    regs.gpr[r] = self.gpr[r].at(&callee);
                }
            }
        }
        regs.pending = (regs.pending & !self.adds) | self.loads;
        let rsp = match rsp {
            Some(rsp) => rsp,
            None => {
                // A machine frame's RSP comes from memory: it is needed now.
                regs.materialize(1 << RSP, read)?;
                regs.gpr[RSP]
            }
        };
        // A return address held in a register (`__vfork`, the end of `_Unwind_RaiseException`)
        // may leave RSP where it is; every other step must move up the stack.
        if !(self.rip_in_register && rsp == regs.rsp) {
            check_step(regs.rsp, rsp, bounds)?;
        }
        regs.rsp = rsp;
        regs.rip = rip;
        Ok(true)
    }

    /// Applies the rule to `regs` in place, reading every restored register (XMM included,
    /// touched only when the rule restores some) — eagerly, with no pending registers, which
    /// is what one step needs. `Ok(false)` at the end of the stack as for a walk; at the end
    /// or on an error `regs` are unchanged.
    #[inline]
    pub(crate) fn apply(
        &self,
        regs: &mut Regs,
        bounds: StackBounds,
        read: &mut impl FnMut(u64) -> Option<u64>,
    ) -> Result<bool, UnwindError> {
        let Some(rip) = self.rip else {
            return Ok(false);
        };
        let callee = &regs.gpr;
        if callee[rip.base as usize] == 0 {
            return Ok(false);
        }
        let at = rip.at(callee);
        let rip = if self.rip_in_register {
            at
        } else {
            read_at(read, at)?
        };
        if rip == 0 {
            return Ok(false);
        }
        let mut gpr = *callee;
        for r in bits(self.loads) {
            gpr[r] = read_at(read, self.gpr[r].at(callee))?;
        }
        for r in bits(self.adds) {
            gpr[r] = self.gpr[r].at(callee);
        }
        if !(self.rip_in_register && gpr[RSP] == callee[RSP]) {
            check_step(callee[RSP], gpr[RSP], bounds)?;
        }
        // XMM values are read first (`regs` stays unchanged on an error), then stored one
        // by one: no copy of the 256-byte XMM file.
        let mut xmm = [0u128; 16];
        for x in bits(self.xmms) {
            let at = self.xmm[x].at(callee);
            xmm[x] = u128::from(read_at(read, at)?) | u128::from(read_at(read, at.wrapping_add(8))?) << 64;
        }
        for x in bits(self.xmms) {
            regs.xmm[x] = xmm[x];
        }
        regs.rip = rip;
        regs.gpr = gpr;
        Ok(true)
    }
}

/// The indices of the set bits of `mask`, lowest first.
pub(crate) fn bits(mask: impl Into<u64>) -> impl Iterator<Item = usize> {
    let mut mask = mask.into();
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

    /// `push` each of `pushes`, then `sub rsp, 8`, undone.
    fn frameless(pushes: &[Register]) -> Rule {
        let mut rule = Rule::identity();
        let rsp = rule.get(Register::Rsp);
        rule.set(Register::Rsp, rsp.plus(8, 0).unwrap());
        for r in pushes.iter().rev() {
            rule.pop(*r, 0).unwrap();
        }
        rule.pop_return(0).unwrap();
        rule
    }

    /// Sealing changes how a walk applies a rule, never what it computes: a fixed sequence of
    /// moves from any registers or from RSP alone, or one restore per register when there are
    /// too many; and the plain frame's shortcut to the return address.
    #[test]
    fn sealed_rules_apply_as_before_sealing() {
        use Register::*;
        let nine = [Rbx, Rbp, Rsi, Rdi, R12, R13, R14, R15, R8];
        let cases = [
            (framed(), Restores::Moves, None),
            (frameless(&nine[..3]), Restores::MovesFromRsp, Some(40)),
            (frameless(&nine), Restores::Each, Some(88)),
        ];
        for (rule, restores, plain) in cases {
            let mut sealed = rule;
            let sealed_plain = sealed.seal();
            assert_eq!((sealed.restores, sealed_plain), (restores, plain));
            let read = &mut |a: u64| Some(a + 1);
            let mut want = LazyRegs::new(regs().rip, regs().gpr);
            let mut got = want;
            assert_eq!(rule.apply_lazy(None, &mut want, BOUNDS, read), Ok(true));
            assert_eq!(sealed.apply_lazy(sealed_plain, &mut got, BOUNDS, read), Ok(true));
            want.materialize(u16::MAX, read).unwrap();
            got.materialize(u16::MAX, read).unwrap();
            assert_eq!((got.rip, got.rsp, got.gpr), (want.rip, want.rsp, want.gpr));
            assert_eq!(got.rsp, got.gpr[RSP]);
        }
        // Resetting unseals.
        let mut reset = frameless(&nine[..3]);
        reset.seal();
        reset.reset();
        assert_eq!(reset.restores, Restores::Each);
        assert_eq!(reset.seal(), None, "the identity is no plain frame");
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
