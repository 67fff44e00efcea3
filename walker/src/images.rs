//! The process's modules, copied once from its module list: each module's unwind sections
//! (and, for PE, its code) in memory the profiler owns, and an [`Unwinder`] over them.
//!
//! Load the images when modules appear (at startup, on a module-load notification), never
//! during a walk: loading allocates and reads image memory.
//!
//! ```
//! # use corprof::modules::{LoadedModule, Modules};
//! # use corprof::os::OsError;
//! # struct NoModules;
//! # impl Modules for NoModules {
//! #     fn loaded_modules(&self) -> Vec<LoadedModule> { Vec::new() }
//! #     fn read_memory(&self, a: u64, _: &mut [u8]) -> Result<(), OsError> { Err(OsError::BadAddress(a)) }
//! # }
//! # let process = NoModules;
//! use simclr_walker::images::Images;
//! let images = Images::load(&process)?;
//! let unwinder = images.unwinder()?;
//! assert!(!unwinder.covers(0x1000));
//! # Ok::<(), simclr_walker::images::ImageError>(())
//! ```

use crate::unwind::dwarf::DwarfModule;
use crate::unwind::pe::PeModule;
use crate::unwind::{Module, UnwindData, UnwindError, Unwinder};
use corprof::modules::{LoadedModule, Modules, SectionKind};
use corprof::os::OsError;
use std::fmt;

/// Why the module list cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageError {
    /// A section's memory could not be read.
    Read {
        /// The module.
        module: String,
        /// The section.
        section: SectionKind,
        /// Why.
        error: OsError,
    },
    /// A module's unwind sections are malformed.
    Unwind {
        /// The module.
        module: String,
        /// What the unwinder found.
        error: UnwindError,
    },
    /// Two modules' address ranges overlap.
    Overlap {
        /// The lower module.
        first: String,
        /// The module that starts inside it.
        second: String,
    },
    /// A module lists some unwind sections but not all its format needs.
    Incomplete {
        /// The module.
        module: String,
        /// The section that is missing.
        missing: SectionKind,
    },
    /// A section is too large to copy (more than 1 GiB) or lies outside 32-bit RVAs.
    TooLarge {
        /// The module.
        module: String,
    },
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Read {
                module,
                section,
                error,
            } => {
                write!(f, "{module}: cannot read {}: {error}", section.as_str())
            }
            ImageError::Unwind { module, error } => write!(f, "{module}: {error}"),
            ImageError::Overlap { first, second } => write!(f, "module {second} overlaps {first}"),
            ImageError::Incomplete { module, missing } => {
                write!(f, "{module}: its unwind sections lack {}", missing.as_str())
            }
            ImageError::TooLarge { module } => write!(f, "{module}: a section is too large"),
        }
    }
}

impl std::error::Error for ImageError {}

/// A copied section.
struct Copied {
    address: u64,
    bytes: Vec<u8>,
}

/// A module's copied unwind data.
enum Data {
    /// `.eh_frame_hdr` and `.eh_frame`.
    Dwarf { hdr: Copied, eh_frame: Copied },
    /// `.pdata`, `.xdata` and `.text`, by address.
    Pe { pdata: Copied, rest: Vec<Copied> },
}

/// One module and its copied unwind data.
struct Image {
    module: LoadedModule,
    data: Option<Data>,
}

/// The modules of a process, with their unwind data copied.
pub struct Images {
    images: Vec<Image>,
}

/// The most bytes one section may take.
const MAX_SECTION: u64 = 1 << 30;

fn copy(source: &dyn Modules, module: &LoadedModule, kind: SectionKind) -> Result<Copied, ImageError> {
    let section = module.section(kind).ok_or_else(|| ImageError::Incomplete {
        module: module.name.clone(),
        missing: kind,
    })?;
    if section.size > MAX_SECTION {
        return Err(ImageError::TooLarge {
            module: module.name.clone(),
        });
    }
    let mut bytes = vec![0; section.size as usize];
    source
        .read_memory(section.address, &mut bytes)
        .map_err(|error| ImageError::Read {
            module: module.name.clone(),
            section: kind,
            error,
        })?;
    Ok(Copied {
        address: section.address,
        bytes,
    })
}

impl Images {
    /// Copies the unwind sections of every module `source` lists. Modules without unwind
    /// sections are kept (their code has no unwind info); overlapping modules, unreadable or
    /// incomplete sections are errors.
    pub fn load(source: &dyn Modules) -> Result<Images, ImageError> {
        let mut modules = source.loaded_modules();
        modules.sort_by_key(|m| m.start);
        for pair in modules.windows(2) {
            if pair[1].start < pair[0].end {
                return Err(ImageError::Overlap {
                    first: pair[0].name.clone(),
                    second: pair[1].name.clone(),
                });
            }
        }
        let mut images = Vec::with_capacity(modules.len());
        for module in modules {
            let has = |k| module.section(k).is_some();
            let data = if has(SectionKind::EhFrame) || has(SectionKind::EhFrameHdr) {
                Some(Data::Dwarf {
                    hdr: copy(source, &module, SectionKind::EhFrameHdr)?,
                    eh_frame: copy(source, &module, SectionKind::EhFrame)?,
                })
            } else if has(SectionKind::Pdata) {
                let mut rest = vec![copy(source, &module, SectionKind::Xdata)?];
                if has(SectionKind::Text) {
                    rest.push(copy(source, &module, SectionKind::Text)?);
                }
                Some(Data::Pe {
                    pdata: copy(source, &module, SectionKind::Pdata)?,
                    rest,
                })
            } else {
                None
            };
            images.push(Image { module, data });
        }
        Ok(Images { images })
    }

    /// The modules, in address order.
    pub fn modules(&self) -> impl Iterator<Item = &LoadedModule> {
        self.images.iter().map(|i| &i.module)
    }

    /// An unwinder over every module with unwind data. Build it once and keep it with the
    /// images: each new unwinder starts with a cold rule cache.
    pub fn unwinder(&self) -> Result<Unwinder<'_>, ImageError> {
        let mut modules = Vec::new();
        for image in &self.images {
            let Some(data) = &image.data else { continue };
            let module = &image.module;
            let error = |error| ImageError::Unwind {
                module: module.name.clone(),
                error,
            };
            let data = match data {
                Data::Dwarf { hdr, eh_frame } => UnwindData::Dwarf(
                    DwarfModule::with_eh_frame_hdr(
                        &eh_frame.bytes,
                        eh_frame.address,
                        &hdr.bytes,
                        hdr.address,
                    )
                    .map_err(error)?,
                ),
                Data::Pe { pdata, rest } => {
                    let rva = |c: &Copied| {
                        c.address
                            .checked_sub(module.base)
                            .and_then(|r| u32::try_from(r).ok())
                            .ok_or_else(|| ImageError::TooLarge {
                                module: module.name.clone(),
                            })
                    };
                    let mut sections = vec![(rva(pdata)?, &pdata.bytes[..])];
                    for c in rest {
                        sections.push((rva(c)?, &c.bytes[..]));
                    }
                    let pdata = (rva(pdata)?, pdata.bytes.len() as u32);
                    UnwindData::Pe(PeModule::from_sections(module.base, sections, pdata).map_err(error)?)
                }
            };
            modules.push(Module {
                start: module.start,
                end: module.end,
                data,
            });
        }
        Ok(Unwinder::new(modules))
    }
}
