//! Unwinding across modules: each module's own unwind data through the rule cache, the
//! frame-pointer rule where none covers the address, and a bounded walk over many frames.

use super::cache::{Hit, UnwindCache};
use super::dwarf::DwarfModule;
use super::pe::PeModule;
use super::rule::{LazyRegs, Rule};
use super::{FrameKind, Regs, StackBounds, UnwindError};
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

/// Module generations, unique in the process (0 marks a cache without rules).
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

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

    /// True when a module's unwind data describes `address`: an FDE covers it, or it lies in
    /// a PE module (where an address without a RUNTIME_FUNCTION is a leaf by the Windows
    /// rule). Elsewhere only the frame-pointer fallback applies, which is right for a caller
    /// frame that set up RBP but cannot be trusted for an interrupted one.
    pub fn covers(&self, address: u64) -> bool {
        match self.module(address) {
            Some(UnwindData::Dwarf(dwarf)) => dwarf.covers(address),
            Some(UnwindData::Pe(_)) => true,
            None => false,
        }
    }

    /// The rule for (`address`, `kind`) from the cache, or else evaluated and cached, with
    /// its plain offset from the cache's tag (see [`Rule::seal`]).
    #[inline]
    fn rule<'c>(
        &self,
        address: u64,
        kind: FrameKind,
        cache: &'c mut UnwindCache,
    ) -> Result<(&'c Rule, Option<i32>), UnwindError> {
        let hit = match cache.lookup(self.generation, address, kind) {
            Some(hit) => hit,
            None => self.evaluate(address, kind, cache)?,
        };
        Ok((cache.rule(hit.index), hit.plain))
    }

    /// Evaluates the rule for (`address`, `kind`) into the cache: the module's unwind data,
    /// or the frame-pointer rule where none covers the address.
    #[cold]
    fn evaluate(&self, address: u64, kind: FrameKind, cache: &mut UnwindCache) -> Result<Hit, UnwindError> {
        let module = self.module(address);
        cache.insert_with(address, kind, |rule, saved| {
            let covered = match module {
                Some(UnwindData::Dwarf(dwarf)) => dwarf.rule(address, kind, rule, saved),
                Some(UnwindData::Pe(pe)) => pe.rule(address, kind, rule),
                None => Err(UnwindError::NoUnwindInfo(address)),
            };
            match covered {
                Err(UnwindError::NoUnwindInfo(_)) => {
                    rule.reset();
                    rule.use_frame_pointer();
                    Ok(())
                }
                other => other,
            }
        })
    }

    /// One step from `regs` to the caller's registers, in place, every register the unwind
    /// data restores read from memory. `Ok(false)` at the end of the stack (no return address,
    /// or one of 0 or relative to a register holding 0); at the end or on an error `regs` are
    /// unchanged. Where no unwind data covers the IP, the frame-pointer rule applies: the
    /// caller's RIP at `[RBP + 8]`, its RSP at `RBP + 16`, its RBP at `[RBP]`. Rules come from
    /// `cache` when an earlier step visited the same address. [`Unwinder::step_frame`] also
    /// says how to look up the caller.
    #[inline]
    pub fn step(
        &self,
        regs: &mut Regs,
        kind: FrameKind,
        bounds: StackBounds,
        cache: &mut UnwindCache,
        read: &mut impl FnMut(u64) -> Option<u64>,
    ) -> Result<bool, UnwindError> {
        self.step_frame(regs, kind, bounds, cache, read)
            .map(|next| next.is_some())
    }

    /// [`Unwinder::step`], returning the caller frame's kind (`None` at the end of the
    /// stack): [`FrameKind::Caller`], or [`FrameKind::First`] after a signal frame (CIE
    /// augmentation `S`), whose caller was interrupted rather than calling.
    #[inline]
    pub fn step_frame(
        &self,
        regs: &mut Regs,
        kind: FrameKind,
        bounds: StackBounds,
        cache: &mut UnwindCache,
        read: &mut impl FnMut(u64) -> Option<u64>,
    ) -> Result<Option<FrameKind>, UnwindError> {
        let address = kind.lookup_address(regs.rip);
        let rule = self.rule(address, kind, cache)?.0;
        let next = if rule.is_signal() {
            FrameKind::First
        } else {
            FrameKind::Caller
        };
        Ok(rule.apply(regs, bounds, read)?.then_some(next))
    }

    /// Walks from `regs` (the interrupted frame) and writes each frame's IP into `out`, leaf
    /// first; returns how many were written and how the walk ended (`Ok` at the end of the
    /// stack or a full buffer). Never more than `out.len()` steps. A register's saved value
    /// is read only when a later frame's rule needs it, so the walk reads fewer stack words
    /// than as many [`Unwinder::step`]s.
    pub fn walk(
        &self,
        regs: &Regs,
        bounds: StackBounds,
        cache: &mut UnwindCache,
        read: &mut impl FnMut(u64) -> Option<u64>,
        out: &mut [u64],
    ) -> (usize, Result<(), UnwindError>) {
        cache.seal_new();
        let mut current = LazyRegs::new(regs.rip, regs.gpr);
        let mut kind = FrameKind::First;
        for (n, slot) in out.iter_mut().enumerate() {
            *slot = current.rip;
            let address = kind.lookup_address(current.rip);
            let step = self.rule(address, kind, cache).and_then(|(rule, plain)| {
                let signal = rule.is_signal();
                rule.apply_lazy(plain, &mut current, bounds, read)
                    .map(|more| (more, signal))
            });
            match step {
                Ok((true, signal)) => {
                    kind = if signal {
                        FrameKind::First
                    } else {
                        FrameKind::Caller
                    }
                }
                Ok((false, _)) => return (n + 1, Ok(())),
                Err(e) => return (n + 1, Err(e)),
            }
        }
        (out.len(), Ok(()))
    }
}
