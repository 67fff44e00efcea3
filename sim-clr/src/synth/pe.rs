//! Windows x64 unwind tables (`.pdata` + `.xdata`, versions 1 and 2) for synthesized
//! functions, written from the shapes by this project's own writer.
//!
//! The image is laid out as `.text` at RVA 0x1000, then `.pdata` (12-byte RUNTIME_FUNCTION
//! entries, sorted), then `.xdata` (UNWIND_INFO). Version 2 adds UWOP_EPILOG descriptors: a
//! header (epilogue size) and one descriptor per epilogue (its distance from the function's
//! end), padded to an even count, before the prologue codes.

use super::assemble::Assembled;
use super::shape::{PrologStep, ShapeError};
use corprof::Register;

/// UNWIND_INFO version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PeVersion {
    /// Version 1: epilogues are found by decoding instructions.
    V1,
    /// Version 2: epilogues are listed with UWOP_EPILOG.
    V2,
}

/// Unwind operation codes.
pub mod op {
    /// `UWOP_PUSH_NONVOL`.
    pub const PUSH_NONVOL: u8 = 0;
    /// `UWOP_ALLOC_LARGE`.
    pub const ALLOC_LARGE: u8 = 1;
    /// `UWOP_ALLOC_SMALL`.
    pub const ALLOC_SMALL: u8 = 2;
    /// `UWOP_SET_FPREG`.
    pub const SET_FPREG: u8 = 3;
    /// `UWOP_SAVE_NONVOL`.
    pub const SAVE_NONVOL: u8 = 4;
    /// `UWOP_SAVE_NONVOL_FAR`.
    pub const SAVE_NONVOL_FAR: u8 = 5;
    /// `UWOP_EPILOG` (version 2).
    pub const EPILOG: u8 = 6;
    /// `UWOP_SPARE_CODE`.
    pub const SPARE: u8 = 7;
    /// `UWOP_SAVE_XMM128`.
    pub const SAVE_XMM128: u8 = 8;
    /// `UWOP_SAVE_XMM128_FAR`.
    pub const SAVE_XMM128_FAR: u8 = 9;
    /// `UWOP_PUSH_MACHFRAME`.
    pub const PUSH_MACHFRAME: u8 = 10;
}

/// RVA of `.text` in a synthesized image.
pub const TEXT_RVA: u32 = 0x1000;

/// A synthesized PE image: code, `.pdata` and `.xdata`, contiguous from `image_base`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeImage {
    /// Load address.
    pub image_base: u64,
    /// The image from RVA 0 (headers zeroed).
    pub bytes: Vec<u8>,
    /// RVA and size of `.pdata`.
    pub pdata: (u32, u32),
}

fn slot(code_offset: u8, op: u8, info: u8) -> [u8; 2] {
    [code_offset, op | (info << 4)]
}

/// The unwind code slots of a prologue, in array order (descending code offset).
fn prologue_codes(code: &Assembled) -> Result<Vec<[u8; 2]>, ShapeError> {
    let mut fp_depth = None; // bytes pushed/allocated when RBP became the frame pointer
    let mut depth = 0u64; // bytes pushed or allocated so far
    let mut ops: Vec<Vec<[u8; 2]>> = Vec::new();
    let total: u64 = code.shape.frame_size() - code.shape.entry_size();
    for (step, &end) in code.shape.prologue.iter().zip(&code.prolog_ends) {
        let at = u8::try_from(end).map_err(|_| ShapeError("prologue longer than 255 bytes".into()))?;
        let mut op_slots = Vec::new();
        match *step {
            PrologStep::Push(r) => {
                depth += 8;
                op_slots.push(slot(at, op::PUSH_NONVOL, r as u8));
            }
            PrologStep::Alloc(n) => {
                depth += u64::from(n);
                if n <= 128 {
                    op_slots.push(slot(at, op::ALLOC_SMALL, (n / 8 - 1) as u8));
                } else if n / 8 <= 0xFFFF {
                    op_slots.push(slot(at, op::ALLOC_LARGE, 0));
                    op_slots.push(((n / 8) as u16).to_le_bytes());
                } else {
                    op_slots.push(slot(at, op::ALLOC_LARGE, 1));
                    op_slots.push((n as u16).to_le_bytes());
                    op_slots.push(((n >> 16) as u16).to_le_bytes());
                }
            }
            PrologStep::SetFramePointer(_) => {
                fp_depth = Some(depth);
                op_slots.push(slot(at, op::SET_FPREG, 0));
            }
            // Save offsets are relative to the establisher frame (FP - 16 * FrameOffset), which
            // is RSP after the prologue only if the frame pointer was set after everything else.
            PrologStep::Save(..) | PrologStep::SaveXmm(..) if fp_depth.is_some_and(|d| d < total) => {
                return Err(ShapeError(
                    "a save below the frame pointer's establisher frame cannot be encoded (frame pointer set before the allocation)".into(),
                ));
            }
            PrologStep::Save(r, off) => {
                if off / 8 <= 0xFFFF {
                    op_slots.push(slot(at, op::SAVE_NONVOL, r as u8));
                    op_slots.push(((off / 8) as u16).to_le_bytes());
                } else {
                    op_slots.push(slot(at, op::SAVE_NONVOL_FAR, r as u8));
                    op_slots.push((off as u16).to_le_bytes());
                    op_slots.push(((off >> 16) as u16).to_le_bytes());
                }
            }
            PrologStep::SaveXmm(x, off) => {
                if off / 16 <= 0xFFFF {
                    op_slots.push(slot(at, op::SAVE_XMM128, x));
                    op_slots.push(((off / 16) as u16).to_le_bytes());
                } else {
                    op_slots.push(slot(at, op::SAVE_XMM128_FAR, x));
                    op_slots.push((off as u16).to_le_bytes());
                    op_slots.push(((off >> 16) as u16).to_le_bytes());
                }
            }
        }
        ops.push(op_slots);
    }
    ops.reverse();
    if code.shape.machine_frame {
        ops.push(vec![slot(0, op::PUSH_MACHFRAME, 0)]);
    }
    Ok(ops.into_iter().flatten().collect())
}

/// Version 2's epilogue descriptors: the header, then each epilogue's distance from the end.
/// An `iretq` epilogue cannot be described (its emulation would return-emulate), so a
/// machine-frame function gets none.
fn epilog_codes(code: &Assembled) -> Result<Vec<[u8; 2]>, ShapeError> {
    if code.shape.machine_frame {
        return Ok(Vec::new());
    }
    let pushes: Vec<Register> = code.shape.pushes().collect();
    let pop_bytes: u64 = pushes.iter().map(|r| if (*r as u8) < 8 { 1 } else { 2 }).sum();
    let size = pop_bytes + 1; // the pops and the terminator's first byte
    let reset = code.shape.frame_pointer().is_some() || code.shape.allocation() > 0;
    let mut slots = vec![slot(size as u8, op::EPILOG, 0)];
    for &(_, proper) in &code.epilogues {
        let start = if reset {
            proper + reset_length(code, proper)
        } else {
            proper
        };
        let distance = code.code_len - start;
        if distance > 0xFFF {
            return Err(ShapeError(
                "an epilogue more than 4095 bytes before the function's end (version 2)".into(),
            ));
        }
        slots.push(slot(distance as u8, op::EPILOG, (distance >> 8) as u8));
    }
    if slots.len() % 2 == 1 {
        slots.push(slot(0, op::EPILOG, 0));
    }
    Ok(slots)
}

/// Length of the `add rsp`/`lea rsp` at the start of an epilogue proper.
fn reset_length(code: &Assembled, proper: u64) -> u64 {
    let mut decoder =
        iced_x86::Decoder::new(64, &code.bytes[proper as usize..], iced_x86::DecoderOptions::NONE);
    decoder.decode().len() as u64
}

/// How unwind info is laid out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeLayout {
    /// UNWIND_INFO version.
    pub version: PeVersion,
    /// Split each function at its first epilogue: the epilogues live in a second
    /// RUNTIME_FUNCTION whose UNWIND_INFO has no prologue codes and chains (UNW_FLAG_CHAININFO)
    /// to the primary entry, as compilers do for non-contiguous code.
    pub chained: bool,
}

/// One RUNTIME_FUNCTION to emit: its range, its unwind codes, its frame register byte, and
/// the primary entry it chains to, if any.
struct Fragment {
    begin: u32,
    end: u32,
    prolog: u8,
    frame: u8,
    codes: Vec<[u8; 2]>,
    parent: Option<usize>,
}

/// Builds an image holding `functions` (assembled at `image_base + TEXT_RVA + …`,
/// non-overlapping) with unwind info laid out as `layout` says.
pub fn write_pe(functions: &[Assembled], image_base: u64, layout: PeLayout) -> Result<PeImage, ShapeError> {
    let version = layout.version;
    let text_end = functions
        .iter()
        .map(|f| f.base + f.bytes.len() as u64 - image_base)
        .max()
        .unwrap_or(u64::from(TEXT_RVA));
    let mut order: Vec<&Assembled> = functions.iter().collect();
    order.sort_by_key(|f| f.base);
    let mut fragments: Vec<Fragment> = Vec::new();
    for f in order {
        let begin = u32::try_from(f.base - image_base)
            .map_err(|_| ShapeError("function outside the image".into()))?;
        let end = begin + f.code_len as u32;
        let mut prologue = prologue_codes(f)?;
        let mut epilogues = if version == PeVersion::V2 {
            epilog_codes(f)?
        } else {
            Vec::new()
        };
        let split = begin + f.epilogues[0].0 as u32;
        let prolog = f.prolog_ends.last().copied().unwrap_or(0) as u8;
        let frame = match f.shape.frame_pointer() {
            Some(o) => Register::Rbp as u8 | (o / 16) << 4,
            None => 0,
        };
        if layout.chained && split > begin {
            let primary = fragments.len();
            fragments.push(Fragment {
                begin,
                end: split,
                prolog,
                frame,
                codes: prologue,
                parent: None,
            });
            fragments.push(Fragment {
                begin: split,
                end,
                prolog: 0,
                frame,
                codes: epilogues,
                parent: Some(primary),
            });
        } else {
            epilogues.append(&mut prologue);
            fragments.push(Fragment {
                begin,
                end,
                prolog,
                frame,
                codes: epilogues,
                parent: None,
            });
        }
    }
    let pdata_rva = (text_end as u32).next_multiple_of(16);
    let xdata_rva = pdata_rva + 12 * fragments.len() as u32;
    let mut bytes = vec![0u8; xdata_rva as usize];
    for f in functions {
        let rva = (f.base - image_base) as usize;
        bytes[rva..rva + f.bytes.len()].copy_from_slice(&f.bytes);
    }
    let mut xdata = Vec::new();
    let mut info_rvas = Vec::new();
    for (n, fragment) in fragments.iter().enumerate() {
        if fragment.codes.len() > 255 {
            return Err(ShapeError("more than 255 unwind code slots".into()));
        }
        let info_rva = xdata_rva + xdata.len() as u32;
        info_rvas.push(info_rva);
        let v = if version == PeVersion::V1 { 1 } else { 2 };
        let flags = if fragment.parent.is_some() { 0x4 << 3 } else { 0 };
        xdata.extend_from_slice(&[
            v | flags,
            fragment.prolog,
            fragment.codes.len() as u8,
            fragment.frame,
        ]);
        for c in &fragment.codes {
            xdata.extend_from_slice(c);
        }
        if fragment.codes.len() % 2 == 1 {
            xdata.extend_from_slice(&[0, 0]);
        }
        if let Some(p) = fragment.parent {
            let parent = &fragments[p];
            xdata.extend_from_slice(&parent.begin.to_le_bytes());
            xdata.extend_from_slice(&parent.end.to_le_bytes());
            xdata.extend_from_slice(&info_rvas[p].to_le_bytes());
        }
        let entry = pdata_rva as usize + 12 * n;
        bytes[entry..entry + 4].copy_from_slice(&fragment.begin.to_le_bytes());
        bytes[entry + 4..entry + 8].copy_from_slice(&fragment.end.to_le_bytes());
        bytes[entry + 8..entry + 12].copy_from_slice(&info_rva.to_le_bytes());
    }
    bytes.extend_from_slice(&xdata);
    Ok(PeImage {
        image_base,
        bytes,
        pdata: (pdata_rva, 12 * fragments.len() as u32),
    })
}
