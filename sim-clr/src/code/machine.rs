//! Each function's machine code, and what that code leaves on the stack and in the registers
//! at every instruction boundary.
//!
//! A function is real x64 code assembled from its [`FunctionShape`] at its address. The
//! emulator runs it once from a symbolic entry (every register holding a sentinel, RSP a
//! known value), and each boundary's state is recorded relative to that entry: a register
//! holds an entry register's value, an address relative to the entry RSP, or a constant; the
//! stack words the function wrote below its return address likewise. A [`FrameState`] is that
//! template. Laying out a stack instantiates one per frame, root first, from the registers the
//! caller left at its call (so frameless frames have no RBP chain and callee-saved registers
//! sit where the code put them); the runtime's own unwinder reads the same templates, as the
//! real runtime reads the unwind info of the code it generated.

use crate::synth::{
    assemble_at, emulate, sentinel, xmm_sentinel, Assembled, Boundary, FunctionShape, Padding, PrologStep,
    ENTRY_RSP,
};
use corprof::Register;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// Where a value in a frame comes from, relative to the function's entry state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Value {
    /// The value register `r` held at entry.
    Entry(Register),
    /// The entry RSP plus this offset.
    Rsp(i64),
    /// A constant the code wrote (a clobber, a loop counter, a value left by a call).
    Const(u64),
}

impl Value {
    /// The value for a function entered with `entry` registers.
    pub fn resolve(self, entry: &[u64; 16]) -> u64 {
        match self {
            Value::Entry(r) => entry[r as usize],
            Value::Rsp(d) => entry[Register::Rsp as usize].wrapping_add_signed(d),
            Value::Const(c) => c,
        }
    }

    /// Classifies a value the emulator produced from the standard entry. The halves of the
    /// XMM sentinels become 0: simulated threads' XMM registers hold 0.
    fn classify(v: u64) -> Value {
        if let Some(r) = Register::ALL.into_iter().find(|&r| sentinel(r) == v) {
            return Value::Entry(r);
        }
        if (ENTRY_RSP - 0x20_0000..=ENTRY_RSP + 0x1000).contains(&v) {
            return Value::Rsp(v.wrapping_sub(ENTRY_RSP) as i64);
        }
        let xmm_half = (0..16u8).any(|n| {
            let x = xmm_sentinel(n);
            v == x as u64 || v == (x >> 64) as u64
        });
        Value::Const(if xmm_half { 0 } else { v })
    }
}

/// The state a function's code leaves at a run of instruction boundaries (consecutive
/// boundaries with the same state, such as a body of `nop`s, share one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameState {
    /// The run's first boundary, as an offset from the function's start.
    pub offset: u64,
    /// Each general-purpose register, by [`Register`] number.
    pub regs: [Value; 16],
    /// The stack words the function wrote, by offset from the entry RSP (all negative: below
    /// the return address), in address order.
    pub writes: Vec<(i64, Value)>,
    /// The registers whose entry value is no longer in the register but saved in a slot, by
    /// slot offset from the entry RSP (derived from `regs` and `writes`).
    pub saved: Vec<(Register, i64)>,
    /// How a frame stopped here is unwound (derived from `regs` and `saved`).
    pub rule: UnwindRule,
}

impl FrameState {
    /// RSP at this boundary minus the entry RSP (≤ 0).
    pub fn rsp_delta(&self) -> i64 {
        rsp_delta(&self.regs)
    }
}

/// RSP in `regs` minus the entry RSP.
fn rsp_delta(regs: &[Value; 16]) -> i64 {
    match regs[Register::Rsp as usize] {
        Value::Rsp(d) => d,
        _ => 0,
    }
}

/// The most registers a frame can have saved: every one but RSP.
const MAX_SAVED: usize = 15;

/// The register a frame's entry RSP is found from, as the runtime's unwinder reads the unwind
/// info of the code it generated (Windows x64 unwind semantics, which CoreCLR uses for
/// managed code on every platform).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Anchor {
    /// RSP: the function has no frame pointer, has not set it up yet, or is in an epilogue
    /// (which the unwinder emulates forward from RSP).
    #[default]
    Rsp,
    /// The frame pointer RBP, once the prologue's `lea rbp, [rsp + n]` ran and outside
    /// epilogues (`UWOP_SET_FPREG`: the establisher frame comes from the frame register).
    Rbp,
    /// The conventional frame of `push rbp; mov rbp, rsp`: an [`Anchor::Rbp`] frame whose
    /// return address is at RBP + 8 and whose caller's RBP is at RBP, the links of a
    /// frame-pointer chain. A walk unwinds it from RBP alone, without the frame's offsets.
    Chain,
}

/// Where unwinding a frame stopped at one state reads: enough to find the caller's RSP, RBP
/// and return address without the other saved registers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// The register the entry RSP is found from.
    anchor: Anchor,
    /// The entry RSP minus the anchor register (RBP may point above the entry RSP).
    offset: i32,
    /// The lowest and the highest offset from the entry RSP the unwind reads: the saved
    /// registers' slots and the return address's 0.
    span: (i32, i32),
    /// Where the caller's RBP is saved, as an offset from the entry RSP, if it is.
    rbp_slot: Option<i32>,
    /// `span` reaches words besides the return address and the caller's RBP: a walk that
    /// skips the other saved registers must check that both its ends are mapped.
    wide: bool,
}

impl Reach {
    /// The entry RSP of a frame whose RSP is `rsp` and RBP is `rbp`.
    #[inline]
    fn entry_rsp(&self, rsp: u64, rbp: u64) -> u64 {
        match self.anchor {
            Anchor::Rsp => rsp.wrapping_add_signed(i64::from(self.offset)),
            Anchor::Rbp => rbp.wrapping_add_signed(i64::from(self.offset)),
            // The offset is 8: spelled out, the address does not wait for the rule.
            Anchor::Chain => rbp.wrapping_add(8),
        }
    }

    /// Whether the frame's entry RSP is found from RBP (a frame pointer), not from RSP.
    pub fn uses_frame_pointer(&self) -> bool {
        self.anchor != Anchor::Rsp
    }

    /// A link of the frame-pointer chain ([`Anchor::Chain`]) that reads nothing else: the
    /// caller's RBP is at RBP, the return address at RBP + 8, and the caller's RSP is
    /// RBP + 16.
    #[inline]
    pub fn is_chain(&self) -> bool {
        self.anchor == Anchor::Chain && !self.wide
    }

    /// [`UnwindRule::unwind`] for a walk that keeps only RSP and RBP, without reading the
    /// other saved registers back: `cached` answers for memory known to be mapped (a
    /// reader's current page). When it answers for the return address and for both ends of
    /// the words a full unwind reads, these reads cannot fault and the other values are not
    /// needed: RSP becomes the CFA, RBP the caller's, and the return address is returned.
    /// Else `None`, and nothing changed.
    #[inline]
    pub fn unwind_rsp_rbp(
        &self,
        rsp: &mut u64,
        rbp: &mut u64,
        cached: impl Fn(u64) -> Option<u64>,
    ) -> Option<u64> {
        let entry_rsp = self.entry_rsp(*rsp, *rbp);
        let rip = cached(entry_rsp)?;
        if self.wide {
            cached(entry_rsp.wrapping_add_signed(i64::from(self.span.0)))?;
            cached(entry_rsp.wrapping_add_signed(i64::from(self.span.1)))?;
        }
        let caller_rbp = match (self.anchor, self.rbp_slot) {
            (Anchor::Chain, _) => cached(*rbp)?,
            (_, Some(slot)) => cached(entry_rsp.wrapping_add_signed(i64::from(slot)))?,
            (_, None) => *rbp,
        };
        (*rsp, *rbp) = (entry_rsp.wrapping_add(8), caller_rbp);
        Some(rip)
    }
}

/// How to unwind a frame stopped at one state, in a small `Copy` value the runtime's walk
/// keeps next to each code address it meets: the entry RSP is the anchor register plus an
/// offset, the return address sits there, and each saved register is read back from its
/// slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindRule {
    /// Where the unwind reads.
    pub reach: Reach,
    /// How many registers `registers` and `slots` hold.
    saved: u8,
    /// The saved registers, by [`Register`] number.
    registers: [u8; MAX_SAVED],
    /// Each saved register's slot, as an offset from the entry RSP.
    slots: [i32; MAX_SAVED],
}

impl UnwindRule {
    /// The rule of a state whose RSP is `rsp_delta` from the entry RSP, whose frame pointer
    /// (when the unwinder uses it) is `rbp_delta` from it, and which saved `saved`; `None`
    /// if an offset is out of the range code can reach (±2 GiB).
    fn new(rsp_delta: i64, rbp_delta: Option<i64>, saved: &[(Register, i64)]) -> Option<UnwindRule> {
        let mut rule = UnwindRule::default();
        let (anchor, delta) = rbp_delta.map_or((Anchor::Rsp, rsp_delta), |d| (Anchor::Rbp, d));
        rule.reach.anchor = anchor;
        rule.reach.offset = i32::try_from(-delta).ok()?;
        for (i, &(r, offset)) in saved.iter().enumerate().take(MAX_SAVED) {
            let slot = i32::try_from(offset).ok()?;
            rule.registers[i] = r as u8;
            rule.slots[i] = slot;
            rule.saved += 1;
            let span = rule.reach.span;
            rule.reach.span = (span.0.min(slot), span.1.max(slot));
            if r == Register::Rbp {
                rule.reach.rbp_slot = Some(slot);
            }
        }
        if anchor == Anchor::Rbp && delta == -8 && rule.reach.rbp_slot == Some(-8) {
            rule.reach.anchor = Anchor::Chain;
        }
        let read = |slot: i32| slot == 0 || Some(slot) == rule.reach.rbp_slot;
        rule.reach.wide = !(read(rule.reach.span.0) && read(rule.reach.span.1));
        Some(rule)
    }

    /// Unwinds a frame stopped here, turning its registers `regs` into the caller's, and
    /// returns the return address: each register the function changed is read back from the
    /// slot it saved it in, RSP becomes the CFA and the other registers are left as they
    /// are. `read` fails with the faulting address; `regs` is then partly unwound.
    #[inline]
    pub fn unwind(
        &self,
        regs: &mut [u64; 16],
        read: &mut impl FnMut(u64) -> Result<u64, u64>,
    ) -> Result<u64, u64> {
        let entry_rsp = self
            .reach
            .entry_rsp(regs[Register::Rsp as usize], regs[Register::Rbp as usize]);
        let rip = read(entry_rsp)?;
        let saved = usize::from(self.saved).min(MAX_SAVED);
        for (&r, &slot) in self.registers[..saved].iter().zip(&self.slots[..saved]) {
            regs[usize::from(r) % 16] = read(entry_rsp.wrapping_add_signed(i64::from(slot)))?;
        }
        regs[Register::Rsp as usize] = entry_rsp.wrapping_add(8);
        Ok(rip)
    }
}

/// A function's code and its state at every instruction boundary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineCode {
    /// The assembled code (its shape, bytes and offsets).
    pub code: Assembled,
    /// Every instruction boundary, as offsets in order.
    pub boundaries: Arc<[u64]>,
    /// The states, one per run of boundaries, by offset.
    pub states: Arc<[FrameState]>,
    /// Each state's first offset, in order: the index a lookup searches.
    state_offsets: Arc<[u64]>,
}

/// The functions [`MachineCode::build_shared`] built, by shape and size, and address for code
/// that cannot move (looked up, never iterated), each at the address it was first built at.
static BUILT: LazyLock<Mutex<HashMap<BuiltKey, Arc<MachineCode>>>> = LazyLock::new(Default::default);

/// A function's shape, size and, when its code holds an absolute address, its address: what
/// its machine code is a function of.
type BuiltKey = (FunctionShape, u64, Option<u64>);

/// The most functions [`BUILT`] keeps; it is emptied when full.
const BUILT_MAX: usize = 1024;

/// [`BUILT`], locked so that no other thread changes it while this one forks
/// ([`crate::process::fork`]).
pub(crate) struct CacheHeld {
    _held: std::sync::MutexGuard<'static, HashMap<BuiltKey, Arc<MachineCode>>>,
}

impl CacheHeld {
    /// Locks the cache (made first if no function was built yet).
    pub(crate) fn take() -> CacheHeld {
        CacheHeld {
            _held: BUILT.lock().unwrap_or_else(|e| e.into_inner()),
        }
    }
}

/// Where the default leaf IP sits, when it is a boundary of the body.
pub const LEAF_OFFSET: u64 = 0x10;
/// Where the body's first call returns to, when the prologue leaves room.
pub const RETURN_OFFSET: u64 = 0x25;

impl MachineCode {
    /// Assembles `shape` at `base`, padded to `size` bytes with its first call returning at
    /// [`RETURN_OFFSET`] when possible (so that the body covers most of the function, as the
    /// body of real code does), and records the state at every boundary.
    pub fn build(shape: &FunctionShape, base: u64, size: u64) -> Result<MachineCode, String> {
        if shape.machine_frame {
            return Err("a simulated function is entered by a call, not through a machine frame".into());
        }
        let padding = Padding {
            first_return: Some(RETURN_OFFSET),
            total: Some(size),
        };
        let code = assemble_at(shape, base, padding).map_err(|e| e.to_string())?;
        let boundaries = emulate(&code).map_err(|e| e.to_string())?;
        let mut states: Vec<FrameState> = Vec::new();
        // Where the prologue has set up the frame pointer, if it does.
        let frame_set = shape
            .prologue
            .iter()
            .position(|s| matches!(s, PrologStep::SetFramePointer(_)))
            .map(|i| code.prolog_ends[i]);
        // What a state is a function of: the registers, the stack and whether the frame
        // pointer anchors the unwind. A run of boundaries with the same (a padded body's
        // `nop`s share one stack) yields one state, computed once.
        let mut previous: Option<(&Boundary, bool)> = None;
        for b in &boundaries {
            let offset = b.ip - base;
            let anchored = frame_set.is_some_and(|at| offset >= at) && !code.in_epilogue(offset);
            if previous
                .is_some_and(|(p, a)| p.regs == b.regs && Arc::ptr_eq(&p.stack, &b.stack) && a == anchored)
            {
                continue;
            }
            previous = Some((b, anchored));
            let regs = b.regs.map(Value::classify);
            let writes: Vec<(i64, Value)> = b
                .stack
                .range(..ENTRY_RSP)
                .map(|(&a, &v)| (a.wrapping_sub(ENTRY_RSP) as i64, Value::classify(v)))
                .collect();
            let saved: Vec<(Register, i64)> = Register::ALL
                .into_iter()
                .filter(|&r| r != Register::Rsp && regs[r as usize] != Value::Entry(r))
                .filter_map(|r| {
                    let (offset, _) = writes.iter().find(|(_, v)| *v == Value::Entry(r))?;
                    Some((r, *offset))
                })
                .collect();
            // The frame pointer anchors the unwind once it is set up, outside epilogues.
            let rbp_delta = match regs[Register::Rbp as usize] {
                Value::Rsp(d) if anchored => Some(d),
                _ => None,
            };
            let rule = UnwindRule::new(rsp_delta(&regs), rbp_delta, &saved)
                .ok_or_else(|| format!("a frame offset at +{offset:#x} is out of range"))?;
            let state = FrameState {
                offset,
                regs,
                writes,
                saved,
                rule,
            };
            match states.last() {
                Some(last)
                    if last.regs == state.regs && last.writes == state.writes && last.rule == state.rule => {}
                _ => states.push(state),
            }
        }
        Ok(MachineCode {
            code,
            boundaries: boundaries.iter().map(|b| b.ip - base).collect(),
            state_offsets: states.iter().map(|s| s.offset).collect(),
            states: states.into(),
        })
    }

    /// [`MachineCode::build`], shared: a function of the same shape and size built before (in
    /// any runtime of this process, at any address) is not built again but moved
    /// ([`MachineCode::moved_to`]). The same ones recur: a file's functions of one shape, the
    /// runtime's own functions in every scenario, a process rebuilt while a failure is
    /// shrunk.
    pub fn build_shared(shape: &FunctionShape, base: u64, size: u64) -> Result<Arc<MachineCode>, String> {
        let key = (shape.clone(), size, (!shape.can_move()).then_some(base));
        let built = || BUILT.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(machine) = built().get(&key).cloned() {
            if machine.code.base == base {
                return Ok(machine);
            }
            if let Some(moved) = machine.moved_to(base) {
                return Ok(Arc::new(moved));
            }
        }
        let machine = Arc::new(MachineCode::build(shape, base, size)?);
        let mut cache = built();
        if cache.len() >= BUILT_MAX {
            cache.clear();
        }
        cache.insert(key, Arc::clone(&machine));
        Ok(machine)
    }

    /// The same function at `base`, if its code can move ([`Assembled::moved_to`]): its
    /// states are then relative to its base, and shared with this one's. Equal to building
    /// it there (a property test pins it).
    pub fn moved_to(&self, base: u64) -> Option<MachineCode> {
        Some(MachineCode {
            code: self.code.moved_to(base)?,
            boundaries: self.boundaries.clone(),
            states: self.states.clone(),
            state_offsets: self.state_offsets.clone(),
        })
    }

    /// Bytes of code and data.
    pub fn size(&self) -> u64 {
        self.code.bytes.len() as u64
    }

    /// The state at the boundary `offset`, if one is there.
    pub fn state(&self, offset: u64) -> Option<&FrameState> {
        self.boundaries.binary_search(&offset).ok()?;
        self.state_containing(offset)
    }

    /// The state of the instruction containing `offset` (the last boundary at or before it).
    pub fn state_containing(&self, offset: u64) -> Option<&FrameState> {
        self.state_index(offset).map(|i| &self.states[i])
    }

    /// The index in `states` of the state of the instruction containing `offset`.
    fn state_index(&self, offset: u64) -> Option<usize> {
        if offset >= self.code.code_len {
            return None;
        }
        self.state_offsets
            .partition_point(|&s| s <= offset)
            .checked_sub(1)
    }

    /// The index in `states` of the state the runtime unwinds a frame stopped at `offset`
    /// with: the state of the instruction containing it, or past the code (in the padding of
    /// a function's size) the state at its first return site.
    pub fn unwind_state(&self, offset: u64) -> Option<usize> {
        self.state_index(offset).or_else(|| {
            let ret = self.default_return()?;
            self.boundaries.binary_search(&ret).ok()?;
            self.state_index(ret)
        })
    }

    /// Offsets a caller frame can return to.
    pub fn return_sites(&self) -> &[u64] {
        &self.code.return_sites
    }

    /// The end of the prologue.
    pub fn body_start(&self) -> u64 {
        self.code.prolog_ends.last().copied().unwrap_or(0)
    }

    /// The leaf IP a frame gets by default: [`LEAF_OFFSET`] when that is a boundary in the
    /// body, else the first return site, else the body's start.
    pub fn default_leaf(&self) -> u64 {
        if LEAF_OFFSET >= self.body_start() && self.state(LEAF_OFFSET).is_some() {
            return LEAF_OFFSET;
        }
        self.return_sites().first().copied().unwrap_or(self.body_start())
    }

    /// The return address a caller frame gets by default: the first return site.
    pub fn default_return(&self) -> Option<u64> {
        self.return_sites().first().copied()
    }
}

/// The shape a function of `kind` gets when its file chooses none, for a frame of
/// `frame_size` bytes (a multiple of 16, ≥ 16): managed code and runtime stubs keep an RBP
/// frame (`push rbp; mov rbp, rsp; sub rsp, n`); runtime helpers (built with frame pointers)
/// push RBP and RBX and set RBP after the allocation; other native code is optimized without
/// a frame pointer (`push rbx; push r12; sub rsp, n`). Each makes two calls.
pub fn default_shape(kind: crate::code::CodeKind, frame_size: u64) -> FunctionShape {
    use crate::code::CodeKind;
    let alloc = |pushed: u64| {
        let n = frame_size.saturating_sub(8 + 8 * pushed);
        (n > 0).then_some(PrologStep::Alloc(n as u32))
    };
    let prologue: Vec<PrologStep> = match kind {
        CodeKind::Helper if frame_size >= 32 => [
            Some(PrologStep::Push(Register::Rbp)),
            Some(PrologStep::Push(Register::Rbx)),
            alloc(2),
            Some(PrologStep::SetFramePointer(0)),
        ]
        .into_iter()
        .flatten()
        .collect(),
        CodeKind::Native if frame_size >= 32 => [
            Some(PrologStep::Push(Register::Rbx)),
            Some(PrologStep::Push(Register::R12)),
            alloc(2),
        ]
        .into_iter()
        .flatten()
        .collect(),
        CodeKind::Native => vec![PrologStep::Push(Register::Rbx)],
        _ => [
            Some(PrologStep::Push(Register::Rbp)),
            Some(PrologStep::SetFramePointer(0)),
            alloc(1),
        ]
        .into_iter()
        .flatten()
        .collect(),
    };
    FunctionShape {
        prologue,
        calls: 2,
        back_edges: false,
        epilogues: vec![crate::synth::Epilogue::Ret],
        machine_frame: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::code::CodeKind;

    #[test]
    fn default_shapes_keep_the_frame_size_and_the_default_offsets() {
        for kind in [CodeKind::Jit, CodeKind::Helper, CodeKind::Native, CodeKind::Stub] {
            for frame_size in [16, 32, 0x40, 0x1000] {
                let shape = default_shape(kind, frame_size);
                assert_eq!(shape.frame_size(), frame_size, "{kind:?} {frame_size}");
                let m = MachineCode::build(&shape, 0x7f00_1000_0000, 0x100).unwrap();
                let body = m.state(m.default_return().unwrap()).unwrap();
                assert_eq!(body.rsp_delta(), 8 - frame_size as i64);
                if kind == CodeKind::Jit {
                    assert_eq!(
                        (m.default_leaf(), m.default_return()),
                        (LEAF_OFFSET, Some(RETURN_OFFSET))
                    );
                }
            }
        }
    }

    #[test]
    fn unwinding_a_state_restores_what_the_prologue_saved() {
        // The default shapes, and a frame pointer set above the entry RSP (`lea rbp,
        // [rsp + 112]` after 88 bytes of frame).
        let high_frame_pointer = FunctionShape {
            prologue: vec![
                PrologStep::Push(Register::Rbp),
                PrologStep::Push(Register::R12),
                PrologStep::Push(Register::R14),
                PrologStep::Alloc(64),
                PrologStep::SetFramePointer(112),
                PrologStep::Save(Register::Rbx, 0),
            ],
            ..default_shape(CodeKind::Jit, 0x40)
        };
        let shapes = [CodeKind::Native, CodeKind::Jit, CodeKind::Helper]
            .map(|kind| default_shape(kind, 0x40))
            .into_iter()
            .chain([high_frame_pointer]);
        let mut entry = [0u64; 16];
        for r in Register::ALL {
            entry[r as usize] = 0x1000 + r as u64;
        }
        entry[Register::Rsp as usize] = 0x8000;
        for shape in shapes {
            let m = MachineCode::build(&shape, 0x7f10_0000_1000, 0x100).unwrap();
            for state in m.states.iter() {
                let mut memory = std::collections::BTreeMap::from([(0x8000u64, 0x4242u64)]);
                for &(d, v) in &state.writes {
                    memory.insert(0x8000u64.wrapping_add_signed(d), v.resolve(&entry));
                }
                let mut regs = state.regs.map(|v| v.resolve(&entry));
                let (mut rsp, mut rbp) = (regs[Register::Rsp as usize], regs[Register::Rbp as usize]);
                let rip = state
                    .rule
                    .unwind(&mut regs, &mut |a| memory.get(&a).copied().ok_or(a))
                    .unwrap();
                let at = format!("{shape} at +{:#x}", state.offset);
                assert_eq!(rip, 0x4242, "{at}");
                assert_eq!(regs[Register::Rsp as usize], 0x8008, "{at}");
                for r in [
                    Register::Rbx,
                    Register::R12,
                    Register::Rbp,
                    Register::R14,
                    Register::R15,
                ] {
                    assert_eq!(regs[r as usize], entry[r as usize], "{r:?}, {at}");
                }
                // Keeping only RSP and RBP gives the same caller, reading the same memory.
                let fast = state
                    .rule
                    .reach
                    .unwind_rsp_rbp(&mut rsp, &mut rbp, |a| memory.get(&a).copied());
                assert_eq!(
                    (fast, rsp, rbp),
                    (Some(0x4242), 0x8008, entry[Register::Rbp as usize]),
                    "{at}"
                );
                // With memory unmapped below a cut, the RSP-and-RBP unwind succeeds only where
                // the full one does not fault.
                for cut in (0x7f00..=0x8010).step_by(8) {
                    let mapped = |a: u64| (a >= cut).then(|| memory.get(&a).copied()).flatten();
                    let mut regs = state.regs.map(|v| v.resolve(&entry));
                    let (mut rsp, mut rbp) = (regs[Register::Rsp as usize], regs[Register::Rbp as usize]);
                    let full = state.rule.unwind(&mut regs, &mut |a| mapped(a).ok_or(a));
                    if state
                        .rule
                        .reach
                        .unwind_rsp_rbp(&mut rsp, &mut rbp, mapped)
                        .is_some()
                    {
                        assert!(full.is_ok(), "{at}, unmapped below {cut:#x}");
                    }
                }
            }
        }
    }

    #[test]
    fn the_frame_pointer_anchors_the_unwind_once_set_up_and_outside_epilogues() {
        let m = MachineCode::build(&default_shape(CodeKind::Jit, 0x40), 0x7f10_0000_1000, 0x100).unwrap();
        let anchor = |offset: u64| m.state_containing(offset).unwrap().rule.reach.anchor;
        // push rbp (1 byte); mov rbp, rsp (3 bytes).
        assert_eq!((anchor(0), anchor(1)), (Anchor::Rsp, Anchor::Rsp));
        assert_eq!(anchor(4), Anchor::Chain);
        assert_eq!(anchor(RETURN_OFFSET), Anchor::Chain);
        let (_, proper) = m.code.epilogues[0];
        assert_eq!(anchor(proper - 1), Anchor::Chain, "the epilogue block's lead");
        assert_eq!(anchor(proper), Anchor::Rsp, "the epilogue proper");
    }
}
