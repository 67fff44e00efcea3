//! Native unwinding: one step from a frame's registers to its caller's, given the module's
//! unwind data and a memory-read function supplied by the caller (the unwinder never touches
//! memory itself, so it works on a suspended thread, offline, or on simulated memory).
//!
//! Each format evaluates its tables into a rule for the address, which the thread's
//! [`UnwindCache`] keeps for the next visit. Every step is checked: the new RSP must be
//! 8-aligned, inside the stack bounds and strictly above the old one; a corrupt table, an
//! unmapped read or a cycle is a typed error.
//!
//! ```
//! use simclr_walker::unwind::{dwarf::DwarfModule, Module, UnwindCache, UnwindData, Unwinder};
//! # use fixtures::deep_stack::{DeepStack, Mix};
//! # let stack = DeepStack::build(8, Mix::Any, 1).unwrap();
//! # let (text, cfi) = (stack.text(), &stack.cfi);
//! // A module: its code range and its `.eh_frame` (indexed through `.eh_frame_hdr`).
//! let data = DwarfModule::with_eh_frame_hdr(&cfi.eh_frame, cfi.eh_frame_address, &cfi.hdr, cfi.hdr_address)?;
//! let unwinder = Unwinder::new(vec![Module { start: text.start, end: text.end, data: UnwindData::Dwarf(data) }]);
//! // One cache per walking thread, kept across samples.
//! let mut cache = UnwindCache::new();
//! let mut ips = [0u64; 128];
//! let (n, end) = unwinder.walk(&stack.regs, stack.bounds, &mut cache, &mut |a| stack.read(a), &mut ips);
//! assert_eq!((&ips[..n], end), (&stack.ips[..], Ok(())));
//! # Ok::<(), simclr_walker::unwind::UnwindError>(())
//! ```

mod cache;
pub mod dwarf;
pub mod pe;
mod rule;
mod unwinder;

pub use cache::{CacheStats, UnwindCache};
pub use unwinder::{Module, UnwindData, Unwinder};

use corprof::Register;
use std::fmt;

/// Registers an unwind step reads and writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs {
    /// The instruction pointer.
    pub rip: u64,
    /// The general-purpose registers, by [`Register`] number (RSP included).
    pub gpr: [u64; 16],
    /// XMM0–XMM15 (Windows unwind info restores XMM6–XMM15; DWARF CFI leaves them alone).
    pub xmm: [u128; 16],
}

impl Regs {
    /// RSP.
    pub fn rsp(&self) -> u64 {
        self.gpr[Register::Rsp as usize]
    }

    /// A register.
    pub fn get(&self, r: Register) -> u64 {
        self.gpr[r as usize]
    }
}

/// Whether a frame is the one that was interrupted (its IP may be anywhere, prologue and
/// epilogue included) or a caller (its IP is a return address: look up `ip - 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// The interrupted frame.
    First,
    /// A frame whose IP is a return address.
    Caller,
}

impl FrameKind {
    /// The address whose unwind rule applies.
    pub fn lookup_address(self, ip: u64) -> u64 {
        match self {
            FrameKind::First => ip,
            FrameKind::Caller => ip.wrapping_sub(1),
        }
    }
}

/// The stack an unwind may read and move within.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackBounds {
    /// Lowest valid address.
    pub limit: u64,
    /// One past the highest valid address.
    pub base: u64,
}

/// Why a step failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnwindError {
    /// No unwind data covers the address.
    NoUnwindInfo(u64),
    /// The unwind data is malformed or uses an unsupported rule.
    BadUnwindInfo(u64),
    /// A read the step needed failed.
    MemoryRead(u64),
    /// The new RSP is not 8-aligned.
    Misaligned(u64),
    /// The new RSP is outside the stack.
    OutOfBounds(u64),
    /// The new RSP is not above the old one (a cycle).
    NoProgress(u64),
}

impl fmt::Display for UnwindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnwindError::NoUnwindInfo(a) => write!(f, "no unwind data covers 0x{a:x}"),
            UnwindError::BadUnwindInfo(a) => write!(f, "bad unwind data at 0x{a:x}"),
            UnwindError::MemoryRead(a) => write!(f, "cannot read 0x{a:x}"),
            UnwindError::Misaligned(a) => write!(f, "new RSP 0x{a:x} is not 8-aligned"),
            UnwindError::OutOfBounds(a) => write!(f, "new RSP 0x{a:x} is outside the stack"),
            UnwindError::NoProgress(a) => write!(f, "new RSP 0x{a:x} does not move up the stack"),
        }
    }
}

impl std::error::Error for UnwindError {}

/// Checks a step's new RSP against the old one and the stack bounds.
pub fn check_step(old_rsp: u64, new_rsp: u64, bounds: StackBounds) -> Result<(), UnwindError> {
    if !new_rsp.is_multiple_of(8) {
        return Err(UnwindError::Misaligned(new_rsp));
    }
    if new_rsp <= old_rsp {
        return Err(UnwindError::NoProgress(new_rsp));
    }
    if new_rsp < bounds.limit || new_rsp > bounds.base {
        return Err(UnwindError::OutOfBounds(new_rsp));
    }
    Ok(())
}
