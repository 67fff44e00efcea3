//! The process's loaded modules as a profiler sees them: each module's code bytes and the
//! unwind tables written for its functions.
//!
//! On Unix a shared object has `.eh_frame_hdr` and `.eh_frame`; the JIT heap, the stub heap
//! and ReadyToRun images are not ELF modules, so `dl_iterate_phdr` does not list them and
//! their code has no unwind info a profiler can find. On Windows every image has `.pdata` and
//! `.xdata`, and the runtime registers its JIT heap's unwind info with the OS (a dynamic
//! function table), so `RtlLookupFunctionEntry` finds managed code too; runtime stubs have
//! none.

use super::{CodeKind, Function};
use crate::platform::Platform;
use crate::synth::{write_pe, Assembled, EhFrameSections, PeLayout, PeVersion};
use corprof::modules::{LoadedModule, Modules, Section, SectionKind};
use corprof::os::OsError;

/// A mapped section with its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappedSection {
    /// Where and what.
    pub section: Section,
    /// Its contents.
    pub bytes: Vec<u8>,
}

/// One module of the process's module list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// How the module list describes it.
    pub module: LoadedModule,
    /// The sections' contents, in the order of `module.sections`.
    pub sections: Vec<MappedSection>,
}

/// Every module of the process that has unwind info a profiler can find.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Images {
    /// In address order.
    pub images: Vec<Image>,
}

/// True when the platform's module list exposes unwind info for code of `kind`.
pub fn has_unwind_info(platform: Platform, kind: CodeKind) -> bool {
    match platform {
        Platform::Windows => kind != CodeKind::Stub,
        Platform::Unix => matches!(kind, CodeKind::Native | CodeKind::Helper),
    }
}

impl Images {
    /// The module list for `functions` (with their assembled code) on `platform`: one module
    /// per owning module (the JIT heap counted as one), holding the functions whose unwind
    /// info the platform exposes.
    pub fn build(platform: Platform, functions: &[Function]) -> Result<Images, String> {
        let mut groups: Vec<(String, Vec<&Function>)> = Vec::new();
        for f in functions.iter().filter(|f| has_unwind_info(platform, f.kind)) {
            let key = if f.kind.in_jit_heap() {
                super::JIT_MODULE.to_string()
            } else {
                f.module.clone()
            };
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, list)) => list.push(f),
                None => groups.push((key, vec![f])),
            }
        }
        let mut images = Vec::new();
        for (name, list) in groups {
            // Each function's bytes padded with `int3` to its declared size, so that the
            // tables land after the module's code.
            let code: Vec<Assembled> = list
                .iter()
                .map(|f| {
                    let mut c = f.machine.code.clone();
                    c.bytes.resize((f.size as usize).max(c.bytes.len()), 0xCC);
                    c
                })
                .collect();
            let start = list.iter().map(|f| f.start).min().unwrap_or(0);
            let end = list.iter().map(|f| f.start + f.size).max().unwrap_or(0);
            let image = match platform {
                Platform::Unix => elf_image(name, start, end, &code)?,
                Platform::Windows => pe_image(name, start, end, &code)?,
            };
            images.push(image);
        }
        images.sort_by_key(|i| i.module.start);
        Ok(Images { images })
    }

    /// The module list.
    pub fn modules(&self) -> Vec<LoadedModule> {
        self.images.iter().map(|i| i.module.clone()).collect()
    }

    /// Copies mapped section bytes at `address`; `None` if any byte lies outside every
    /// section.
    pub fn read(&self, address: u64, out: &mut [u8]) -> Option<()> {
        let len = out.len() as u64;
        let section = self.images.iter().flat_map(|i| &i.sections).find(|s| {
            address >= s.section.address
                && address
                    .checked_add(len)
                    .is_some_and(|end| end <= s.section.address + s.section.size)
        })?;
        let at = (address - section.section.address) as usize;
        out.copy_from_slice(&section.bytes[at..at + out.len()]);
        Some(())
    }
}

fn mapped(kind: SectionKind, address: u64, bytes: Vec<u8>) -> MappedSection {
    MappedSection {
        section: Section {
            kind,
            address,
            size: bytes.len() as u64,
        },
        bytes,
    }
}

fn image(name: String, start: u64, end: u64, base: u64, sections: Vec<MappedSection>) -> Image {
    Image {
        module: LoadedModule {
            name,
            start,
            end,
            base,
            sections: sections.iter().map(|s| s.section).collect(),
        },
        sections,
    }
}

/// A shared object: `.eh_frame_hdr` and `.eh_frame` a page after its code (absolute
/// addresses, so its load bias is 0).
fn elf_image(name: String, start: u64, end: u64, code: &[Assembled]) -> Result<Image, String> {
    let cfi = EhFrameSections::write(code, end.next_multiple_of(0x1000)).map_err(|e| e.to_string())?;
    let sections = vec![
        mapped(SectionKind::EhFrameHdr, cfi.hdr_address, cfi.hdr),
        mapped(SectionKind::EhFrame, cfi.eh_frame_address, cfi.eh_frame),
    ];
    Ok(image(name, start, end, 0, sections))
}

/// A PE image (or the JIT heap's dynamic function table): its code, `.pdata` and `.xdata`
/// (version 1), the image base a page below the first function.
fn pe_image(name: String, start: u64, end: u64, code: &[Assembled]) -> Result<Image, String> {
    let base = (start & !0xfff) - 0x1000;
    let layout = PeLayout {
        version: PeVersion::V1,
        chained: false,
    };
    let pe = write_pe(code, base, layout).map_err(|e| e.to_string())?;
    let (pdata, pdata_len) = (pe.pdata.0 as usize, pe.pdata.1 as usize);
    let text = (start - base) as usize;
    let slice = |from: usize, to: usize| {
        pe.bytes
            .get(from..to)
            .map(<[u8]>::to_vec)
            .ok_or("a PE section outside the image")
    };
    let sections = vec![
        mapped(SectionKind::Text, start, slice(text, pdata)?),
        mapped(
            SectionKind::Pdata,
            base + pdata as u64,
            slice(pdata, pdata + pdata_len)?,
        ),
        mapped(
            SectionKind::Xdata,
            base + (pdata + pdata_len) as u64,
            slice(pdata + pdata_len, pe.bytes.len())?,
        ),
    ];
    Ok(image(name, start, end, base, sections))
}

/// The module list as a profiler's loader interface gives it.
impl Modules for Images {
    fn loaded_modules(&self) -> Vec<LoadedModule> {
        self.modules()
    }

    fn read_memory(&self, address: u64, out: &mut [u8]) -> Result<(), OsError> {
        self.read(address, out).ok_or(OsError::BadAddress(address))
    }
}
