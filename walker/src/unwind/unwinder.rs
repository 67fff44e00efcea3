//! Unwinding across modules: each module's own unwind data, the frame-pointer fallback where
//! none covers the address, and a bounded walk over many frames.

use super::dwarf::{DwarfCache, DwarfModule};
use super::pe::PeModule;
use super::{check_step, FrameKind, Regs, StackBounds, UnwindError};
use corprof::Register;

/// A module's unwind data.
pub enum UnwindData<'a> {
    /// `.eh_frame`.
    Dwarf(DwarfModule<'a>),
    /// `.pdata`/`.xdata`.
    Pe(PeModule<'a>),
}

/// A code range and its unwind data.
pub struct Module<'a> {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// How its frames unwind.
    pub data: UnwindData<'a>,
}

/// Unwinds through a set of modules.
pub struct Unwinder<'a> {
    modules: Vec<Module<'a>>,
    cache: DwarfCache,
}

/// The frame-pointer rule: the caller's RIP at `[RBP + 8]`, its RSP at `RBP + 16`, its RBP at
/// `[RBP]` (right only inside the body of a function that keeps a frame pointer).
pub fn frame_pointer_step(
    regs: &Regs,
    bounds: StackBounds,
    read: &mut dyn FnMut(u64) -> Option<u64>,
) -> Result<Option<Regs>, UnwindError> {
    let rbp = regs.get(Register::Rbp);
    if rbp == 0 {
        return Ok(None);
    }
    let rip = read(rbp.wrapping_add(8)).ok_or(UnwindError::MemoryRead(rbp.wrapping_add(8)))?;
    let saved_rbp = read(rbp).ok_or(UnwindError::MemoryRead(rbp))?;
    let rsp = rbp.wrapping_add(16);
    check_step(regs.rsp(), rsp, bounds)?;
    let mut caller = *regs;
    caller.rip = rip;
    caller.gpr[Register::Rsp as usize] = rsp;
    caller.gpr[Register::Rbp as usize] = saved_rbp;
    Ok((rip != 0).then_some(caller))
}

impl<'a> Unwinder<'a> {
    /// An unwinder over `modules` (ranges must not overlap).
    pub fn new(mut modules: Vec<Module<'a>>) -> Unwinder<'a> {
        modules.sort_by_key(|m| m.start);
        Unwinder {
            modules,
            cache: DwarfCache::default(),
        }
    }

    fn module_index(&self, address: u64) -> Option<usize> {
        let i = self
            .modules
            .partition_point(|m| m.start <= address)
            .checked_sub(1)?;
        (address < self.modules[i].end).then_some(i)
    }

    /// One step from `regs`; `Ok(None)` at the end of the stack.
    pub fn step(
        &mut self,
        regs: &Regs,
        kind: FrameKind,
        bounds: StackBounds,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<Option<Regs>, UnwindError> {
        let address = kind.lookup_address(regs.rip);
        match self.module_index(address).map(|i| &self.modules[i].data) {
            Some(UnwindData::Dwarf(dwarf)) => match dwarf.step(regs, kind, bounds, &mut self.cache, read) {
                Err(UnwindError::NoUnwindInfo(_)) => frame_pointer_step(regs, bounds, read),
                other => other,
            },
            Some(UnwindData::Pe(pe)) => pe.step(regs, kind, bounds, read),
            None => frame_pointer_step(regs, bounds, read),
        }
    }

    /// Walks from `regs` (the interrupted frame) and writes each frame's IP into `out`, leaf
    /// first; returns how many were written and how the walk ended (`Ok` at the end of the
    /// stack or a full buffer). Never more than `out.len()` steps.
    pub fn walk(
        &mut self,
        regs: &Regs,
        bounds: StackBounds,
        read: &mut dyn FnMut(u64) -> Option<u64>,
        out: &mut [u64],
    ) -> (usize, Result<(), UnwindError>) {
        let mut current = *regs;
        let mut kind = FrameKind::First;
        for (n, slot) in out.iter_mut().enumerate() {
            *slot = current.rip;
            match self.step(&current, kind, bounds, read) {
                Ok(Some(caller)) => current = caller,
                Ok(None) => return (n + 1, Ok(())),
                Err(e) => return (n + 1, Err(e)),
            }
            kind = FrameKind::Caller;
        }
        (out.len(), Ok(()))
    }
}
