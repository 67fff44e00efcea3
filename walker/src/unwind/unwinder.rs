//! Unwinding across modules: each module's own unwind data through the rule cache, the
//! frame-pointer fallback where none covers the address, and a bounded walk over many frames.

use super::cache::UnwindCache;
use super::dwarf::DwarfModule;
use super::pe::PeModule;
use super::rule::Rule;
use super::{check_step, FrameKind, Regs, StackBounds, UnwindError};
use corprof::Register;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// Identifies this set of modules in every [`UnwindCache`]; never reused.
    generation: u64,
}

/// Module generations, unique in the process (0 marks an empty cache slot).
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// The frame-pointer rule: the caller's RIP at `[RBP + 8]`, its RSP at `RBP + 16`, its RBP at
/// `[RBP]` (right only inside the body of a function that keeps a frame pointer). `Ok(false)`
/// at the end of the stack (RBP or the return address 0).
pub fn frame_pointer_step(
    regs: &mut Regs,
    bounds: StackBounds,
    read: &mut dyn FnMut(u64) -> Option<u64>,
) -> Result<bool, UnwindError> {
    let rbp = regs.get(Register::Rbp);
    if rbp == 0 {
        return Ok(false);
    }
    let rip = read(rbp.wrapping_add(8)).ok_or(UnwindError::MemoryRead(rbp.wrapping_add(8)))?;
    let saved_rbp = read(rbp).ok_or(UnwindError::MemoryRead(rbp))?;
    if rip == 0 {
        return Ok(false);
    }
    let rsp = rbp.wrapping_add(16);
    check_step(regs.rsp(), rsp, bounds)?;
    regs.rip = rip;
    regs.gpr[Register::Rsp as usize] = rsp;
    regs.gpr[Register::Rbp as usize] = saved_rbp;
    Ok(true)
}

impl<'a> Unwinder<'a> {
    /// An unwinder over `modules` (ranges must not overlap).
    pub fn new(modules: Vec<Module<'a>>) -> Unwinder<'a> {
        let mut unwinder = Unwinder {
            modules: Vec::new(),
            generation: 0,
        };
        for m in modules {
            unwinder.add_module(m);
        }
        unwinder
    }

    /// Adds a module (its range must not overlap another's). Rules cached for the previous
    /// set of modules are no longer used.
    pub fn add_module(&mut self, module: Module<'a>) {
        let at = self.modules.partition_point(|m| m.start <= module.start);
        self.modules.insert(at, module);
        self.generation = NEXT_GENERATION.fetch_add(1, Ordering::Relaxed);
    }

    fn module(&self, address: u64) -> Option<&UnwindData<'a>> {
        let i = self
            .modules
            .partition_point(|m| m.start <= address)
            .checked_sub(1)?;
        let m = &self.modules[i];
        (address < m.end).then_some(&m.data)
    }

    /// The rule for `address` (already adjusted for `kind`); `None` where no unwind data
    /// covers it.
    fn rule(
        &self,
        address: u64,
        kind: FrameKind,
        cache: &mut UnwindCache,
    ) -> Result<Option<Rule>, UnwindError> {
        match self.module(address) {
            Some(UnwindData::Dwarf(dwarf)) => match dwarf.rule(address, cache.context()) {
                Err(UnwindError::NoUnwindInfo(_)) => Ok(None),
                other => other.map(Some),
            },
            Some(UnwindData::Pe(pe)) => pe.rule(address, kind).map(Some),
            None => Ok(None),
        }
    }

    /// One step from `regs` to the caller's registers, in place. `Ok(false)` at the end of
    /// the stack; on an error or at the end, `regs` are unchanged. Rules come from `cache`
    /// when an earlier step visited the same address.
    pub fn step(
        &self,
        regs: &mut Regs,
        kind: FrameKind,
        bounds: StackBounds,
        cache: &mut UnwindCache,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Result<bool, UnwindError> {
        let address = kind.lookup_address(regs.rip);
        if let Some(rule) = cache.lookup(self.generation, address, kind) {
            return rule.apply(regs, bounds, read);
        }
        match self.rule(address, kind, cache)? {
            Some(rule) => {
                cache.insert(self.generation, address, kind, rule);
                rule.apply(regs, bounds, read)
            }
            None => frame_pointer_step(regs, bounds, read),
        }
    }

    /// Walks from `regs` (the interrupted frame) and writes each frame's IP into `out`, leaf
    /// first; returns how many were written and how the walk ended (`Ok` at the end of the
    /// stack or a full buffer). Never more than `out.len()` steps.
    pub fn walk(
        &self,
        regs: &Regs,
        bounds: StackBounds,
        cache: &mut UnwindCache,
        read: &mut dyn FnMut(u64) -> Option<u64>,
        out: &mut [u64],
    ) -> (usize, Result<(), UnwindError>) {
        let mut current = *regs;
        let mut kind = FrameKind::First;
        for (n, slot) in out.iter_mut().enumerate() {
            *slot = current.rip;
            match self.step(&mut current, kind, bounds, cache, read) {
                Ok(true) => {}
                Ok(false) => return (n + 1, Ok(())),
                Err(e) => return (n + 1, Err(e)),
            }
            kind = FrameKind::Caller;
        }
        (out.len(), Ok(()))
    }
}
