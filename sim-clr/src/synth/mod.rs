//! Real x64 code for simulated functions, from one declarative description.
//!
//! A [`FunctionShape`] says how a function's frame is built (pushes, allocation, frame
//! pointer, register saves), what its body does (calls, loops) and how it leaves (one or more
//! epilogues). [`assemble`] turns it into machine code with iced-x86's code assembler;
//! [`emulate`] executes that code instruction by instruction and records, at every
//! instruction boundary, the state an unwinder must recover — without looking at any unwind
//! table. The unwind tables themselves are written from the same description.

mod assemble;
mod cfi;
mod emulate;
mod pe;
mod shape;

pub use assemble::{assemble, assemble_at, Assembled, Padding, EXTERNAL_OFFSET};
pub use cfi::{dwarf_register, write_eh_frame, write_eh_frame_hdr, EhFrameHdrError, EhFrameSections};
pub use emulate::{
    emulate, emulate_from, sentinel, xmm_sentinel, Boundary, EmulationError, EntryState, ENTRY_RSP,
    RETURN_ADDRESS,
};
pub use pe::{op as unwind_op, write_pe, PeImage, PeLayout, PeVersion, TEXT_RVA};
pub use shape::{Epilogue, FunctionShape, PrologStep, ShapeError};
