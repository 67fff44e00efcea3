//! The loaded-module list a native unwinder starts from: each module's address range and
//! where its unwind sections are mapped, as `dl_iterate_phdr` (Unix) or the loader's module
//! list and dynamic function tables (Windows) give them, plus reads of mapped image memory.
//!
//! A profiler copies the sections it needs once, when a module appears, and unwinds from
//! those copies; nothing here is called during a walk.

use crate::os::OsError;

/// What a mapped section holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SectionKind {
    /// Machine code (`.text`). A Windows unwinder decodes it to recognize epilogues.
    Text,
    /// `.eh_frame_hdr`: the binary-search index over `.eh_frame`.
    EhFrameHdr,
    /// `.eh_frame`: DWARF call-frame information.
    EhFrame,
    /// `.pdata`: the sorted `RUNTIME_FUNCTION` table (RVAs from the image base).
    Pdata,
    /// `.xdata`: the `UNWIND_INFO` records `.pdata` points at.
    Xdata,
}

impl SectionKind {
    /// The section's conventional name (`.eh_frame_hdr`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SectionKind::Text => ".text",
            SectionKind::EhFrameHdr => ".eh_frame_hdr",
            SectionKind::EhFrame => ".eh_frame",
            SectionKind::Pdata => ".pdata",
            SectionKind::Xdata => ".xdata",
        }
    }
}

/// One mapped section of a module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section {
    /// What it holds.
    pub kind: SectionKind,
    /// Where it is mapped.
    pub address: u64,
    /// Its size in bytes.
    pub size: u64,
}

/// A loaded module (shared object, PE image, or a runtime code heap registered with the OS).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadedModule {
    /// The module's name (`libc.so.6`, `app.dll`).
    pub name: String,
    /// First address of its code.
    pub start: u64,
    /// One past the last address of its code.
    pub end: u64,
    /// The base the module's relative addresses count from: a PE image base (RVAs), an ELF
    /// load bias (`dlpi_addr`).
    pub base: u64,
    /// Its unwind sections (and, for PE, its code); empty when the module has none.
    pub sections: Vec<Section>,
}

impl LoadedModule {
    /// The first section of `kind`.
    pub fn section(&self, kind: SectionKind) -> Option<Section> {
        self.sections.iter().copied().find(|s| s.kind == kind)
    }
}

/// The process's module list and image memory.
#[cfg_attr(feature = "mock", mockall::automock)]
pub trait Modules: Send + Sync {
    /// Every loaded module, in address order.
    fn loaded_modules(&self) -> Vec<LoadedModule>;

    /// Copies mapped image memory at `address` into `out`; fails if any byte is unmapped.
    fn read_memory(&self, address: u64, out: &mut [u8]) -> Result<(), OsError>;
}
