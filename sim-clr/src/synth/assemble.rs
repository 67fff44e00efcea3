//! Assembling a [`FunctionShape`] into x64 machine code with iced-x86's code assembler.
//!
//! Layout: the prologue (one instruction per step); the body — clobbers of every register
//! the prologue preserved (so an unwinder that fails to restore them is caught), optional
//! `nop` padding ([`assemble_at`]), the calls,
//! the loops, a compare-and-branch to each extra epilogue; then each epilogue (restores of
//! `mov`-saved registers, the epilogue proper, its terminator); then an 8-byte data slot for
//! indirect tail calls.

use super::emulate::NOP;
use super::shape::{Epilogue, FunctionShape, PrologStep, ShapeError};
use corprof::Register;
use iced_x86::code_asm::*;
use iced_x86::BlockEncoderOptions;

/// Where calls and tail calls go: this far past the function's base, outside it, and close
/// enough for `rel32`.
pub const EXTERNAL_OFFSET: u64 = 0x0800_0000;

/// A function's machine code and the offsets the unwind-table writers need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assembled {
    /// The shape it was assembled from.
    pub shape: FunctionShape,
    /// Address of the first byte.
    pub base: u64,
    /// Code followed by data.
    pub bytes: Vec<u8>,
    /// Length of the code (the function's extent for unwind tables).
    pub code_len: u64,
    /// Offset just after each prologue step.
    pub prolog_ends: Vec<u64>,
    /// For each epilogue: the offset of its block and of its epilogue proper (the
    /// `add rsp`/`lea rsp`/pops/terminator sequence).
    pub epilogues: Vec<(u64, u64)>,
    /// Offset of the instruction after each call (the return sites).
    pub return_sites: Vec<u64>,
}

impl Assembled {
    /// The same code at `base`, if its instructions hold no absolute address: then every
    /// call and jump is relative and every offset counts from the base, so only the base and
    /// the data slot's absolute address change. `None` when it cannot move
    /// ([`FunctionShape::can_move`]): build it there instead.
    pub fn moved_to(&self, base: u64) -> Option<Assembled> {
        if !self.shape.can_move() {
            return None;
        }
        let mut moved = self.clone();
        let slot = self.code_len as usize;
        moved.bytes[slot..slot + 8].copy_from_slice(&(base + EXTERNAL_OFFSET).to_le_bytes());
        moved.base = base;
        Some(moved)
    }

    /// The address calls and tail calls target.
    pub fn external(&self) -> u64 {
        self.base + EXTERNAL_OFFSET
    }

    /// True when `offset` is inside an epilogue proper: from its first `add rsp`/`lea rsp`/pop
    /// to its terminator (epilogue blocks follow one another to the end of the code).
    pub fn in_epilogue(&self, offset: u64) -> bool {
        self.epilogues.iter().enumerate().any(|(i, &(_, proper))| {
            let end = self
                .epilogues
                .get(i + 1)
                .map_or(self.code_len, |&(block, _)| block);
            (proper..end).contains(&offset)
        })
    }
}

fn gpr(r: Register) -> AsmRegister64 {
    match r {
        Register::Rax => rax,
        Register::Rcx => rcx,
        Register::Rdx => rdx,
        Register::Rbx => rbx,
        Register::Rsp => rsp,
        Register::Rbp => rbp,
        Register::Rsi => rsi,
        Register::Rdi => rdi,
        Register::R8 => r8,
        Register::R9 => r9,
        Register::R10 => r10,
        Register::R11 => r11,
        Register::R12 => r12,
        Register::R13 => r13,
        Register::R14 => r14,
        Register::R15 => r15,
    }
}

fn xmm(n: u8) -> AsmRegisterXmm {
    [
        xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14, xmm15,
    ][n as usize]
}

fn asm_err(e: IcedError) -> ShapeError {
    ShapeError(format!("assembler: {e}"))
}

/// Assembles `shape` at address `base`.
pub fn assemble(shape: &FunctionShape, base: u64) -> Result<Assembled, ShapeError> {
    assemble_at(shape, base, Padding::default())
}

/// Where [`assemble_at`] pads the body with `nop`s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Padding {
    /// Pad before the first call so that it returns at this offset (when the prologue and
    /// clobbers end early enough).
    pub first_return: Option<u64>,
    /// Pad after the calls so that code and data take this many bytes (at most 0x400 bytes
    /// of padding; none if the code is already longer).
    pub total: Option<u64>,
}

/// The most `nop`s [`Padding`] adds at either place.
const MAX_PAD: u64 = 0x400;

/// Assembles `shape` at address `base`, padded with `nop`s as `padding` asks: a body whose
/// every byte is an instruction boundary with the body's state, and return sites where a
/// caller expects them. Nothing before the first call branches, so the first padding moves
/// only what follows it.
pub fn assemble_at(shape: &FunctionShape, base: u64, padding: Padding) -> Result<Assembled, ShapeError> {
    shape.validate()?;
    let assemble = |before: u64, after: u64| {
        build(shape, base, before, after)
            .map_err(asm_err)?
            .finish(shape, base)
    };
    let plain = assemble(0, 0)?;
    let before = match (padding.first_return, plain.return_sites.first()) {
        (Some(want), Some(&got)) if want > got && want - got <= MAX_PAD => want - got,
        _ => 0,
    };
    // Every branch lies after both paddings, so each adds exactly its own length: one pass
    // reaches the total (or the most padding allowed, or none for code already longer).
    let grown = plain.bytes.len() as u64 + before;
    let after = padding
        .total
        .map_or(0, |total| total.saturating_sub(grown).min(MAX_PAD));
    if before == 0 && after == 0 {
        return Ok(plain);
    }
    let code = assemble(before, after)?;
    debug_assert_eq!(
        code.bytes.len() as u64,
        grown + after,
        "a padding changed an encoding"
    );
    Ok(code)
}

/// The assembler and the instruction counts needed to locate offsets afterwards.
struct Built {
    asm: CodeAssembler,
    epilogue_labels: Vec<CodeLabel>,
    /// Instructions before the epilogue proper, per epilogue.
    epilogue_lead: Vec<usize>,
}

fn build(shape: &FunctionShape, base: u64, before: u64, after: u64) -> Result<Built, IcedError> {
    let external = base + EXTERNAL_OFFSET;
    let mut a = CodeAssembler::new(64)?;
    let fp = shape.frame_pointer();
    // Where RSP and RBP stand relative to the CFA after the prologue, for the epilogue's LEA.
    let mut depth = shape.entry_size() as i64; // CFA - RSP
    let mut fp_depth = 0i64; // CFA - RBP once RBP is the frame pointer
    for step in &shape.prologue {
        match *step {
            PrologStep::Push(r) => {
                a.push(gpr(r))?;
                depth += 8;
            }
            PrologStep::Alloc(n) => {
                a.sub(rsp, n as i32)?;
                depth += i64::from(n);
            }
            PrologStep::SetFramePointer(0) => {
                a.mov(rbp, rsp)?;
                fp_depth = depth;
            }
            PrologStep::SetFramePointer(o) => {
                a.lea(rbp, ptr(rsp + i32::from(o)))?;
                fp_depth = depth - i64::from(o);
            }
            PrologStep::Save(r, off) => a.mov(qword_ptr(rsp + off as i32), gpr(r))?,
            PrologStep::SaveXmm(x, off) => a.movaps(xmmword_ptr(rsp + off as i32), xmm(x))?,
        }
    }
    // Body: clobber everything the prologue preserved.
    for step in &shape.prologue {
        match *step {
            PrologStep::Push(r) | PrologStep::Save(r, _) if !(r == Register::Rbp && fp.is_some()) => {
                a.mov(gpr(r), 0x0bad_0000_0000_0000u64 | r as u64)?;
            }
            PrologStep::SaveXmm(x, _) => a.xorps(xmm(x), xmm(x))?,
            _ => {}
        }
    }
    pad(&mut a, before)?;
    for _ in 0..shape.calls {
        a.call(external)?;
    }
    pad(&mut a, after)?;
    if shape.back_edges {
        // A jcc back-edge, then a jmp back-edge: neither is an epilogue.
        let mut top = a.create_label();
        a.mov(ecx, 3)?;
        a.set_label(&mut top)?;
        a.dec(ecx)?;
        a.jne(top)?;
        let (mut again, mut out) = (a.create_label(), a.create_label());
        a.mov(ecx, 2)?;
        a.set_label(&mut again)?;
        a.dec(ecx)?;
        a.je(out)?;
        a.jmp(again)?;
        a.set_label(&mut out)?;
        a.nop()?;
    }
    let mut epilogue_labels: Vec<CodeLabel> = shape.epilogues.iter().map(|_| a.create_label()).collect();
    for (k, label) in epilogue_labels.iter().enumerate().skip(1) {
        a.cmp(eax, k as i32)?;
        a.je(*label)?;
    }
    let mut slot = a.create_label();
    let mut epilogue_lead = Vec::new();
    for (k, epilogue) in shape.epilogues.iter().enumerate() {
        a.set_label(&mut epilogue_labels[k])?;
        let mut lead = 0;
        a.nop()?; // the block's first instruction, so the label never lands on the epilogue proper
        lead += 1;
        for step in &shape.prologue {
            match *step {
                PrologStep::Save(r, off) => a.mov(gpr(r), qword_ptr(rsp + off as i32))?,
                PrologStep::SaveXmm(x, off) => a.movaps(xmm(x), xmmword_ptr(rsp + off as i32))?,
                _ => continue,
            }
            lead += 1;
        }
        if *epilogue == Epilogue::TailJmpRax {
            a.mov(rax, external)?;
            lead += 1;
        }
        epilogue_lead.push(lead);
        let pushes_depth = shape.entry_size() as i64 + 8 * shape.pushes().count() as i64;
        if fp.is_some() {
            // RSP = CFA - pushes_depth = RBP + (fp_depth - pushes_depth).
            a.lea(rsp, ptr(rbp + (fp_depth - pushes_depth) as i32))?;
        } else if shape.allocation() > 0 {
            a.add(rsp, shape.allocation() as i32)?;
        }
        let pushes: Vec<Register> = shape.pushes().collect();
        for r in pushes.iter().rev() {
            a.pop(gpr(*r))?;
        }
        match epilogue {
            Epilogue::Ret => a.ret()?,
            Epilogue::RetImm(n) => a.ret_1(i32::from(*n))?,
            Epilogue::RepRet => a.db(&[0xF3, 0xC3])?,
            Epilogue::TailJmp => a.jmp(external)?,
            Epilogue::TailJmpIndirect => a.jmp(qword_ptr(slot))?,
            Epilogue::TailJmpRax => a.db(&[0x48, 0xFF, 0xE0])?,
            Epilogue::Iret => a.iretq()?,
        }
    }
    a.set_label(&mut slot)?;
    a.dq(&[external])?;
    Ok(Built {
        asm: a,
        epilogue_labels,
        epilogue_lead,
    })
}

/// Emits `count` one-byte `nop`s as data, which the encoder copies in blocks (as
/// instructions, each would be encoded on its own): the bytes are the same.
fn pad(a: &mut CodeAssembler, count: u64) -> Result<(), IcedError> {
    if count > 0 {
        a.db(&vec![NOP; count as usize])?;
    }
    Ok(())
}

impl Built {
    fn finish(mut self, shape: &FunctionShape, base: u64) -> Result<Assembled, ShapeError> {
        let result = self
            .asm
            .assemble_options(base, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
            .map_err(asm_err)?;
        let bytes = result.inner.code_buffer.clone();
        let code_len = bytes.len() as u64 - 8;
        // Instruction boundaries, by decoding the code linearly (it has no embedded data).
        let mut ends = Vec::new();
        let mut decoder = iced_x86::Decoder::with_ip(
            64,
            &bytes[..code_len as usize],
            base,
            iced_x86::DecoderOptions::NONE,
        );
        let mut calls = Vec::new();
        while decoder.can_decode() {
            let at = decoder.position();
            if bytes[at] == NOP {
                // The padding, a byte at a time: no decoder needed.
                ends.push(at as u64 + 1);
                decoder.set_position(at + 1).map_err(asm_err)?;
                decoder.set_ip(base + at as u64 + 1);
                continue;
            }
            let i = decoder.decode();
            ends.push(i.next_ip() - base);
            if i.mnemonic() == iced_x86::Mnemonic::Call {
                calls.push(i.next_ip() - base);
            }
        }
        let starts: Vec<u64> = std::iter::once(0).chain(ends.iter().copied()).collect();
        let prolog_ends = ends[..shape.prologue.len()].to_vec();
        let mut epilogues = Vec::new();
        for (label, lead) in self.epilogue_labels.iter().zip(&self.epilogue_lead) {
            let start = result.label_ip(label).map_err(asm_err)? - base;
            let index = starts
                .iter()
                .position(|&s| s == start)
                .ok_or_else(|| ShapeError("epilogue label".into()))?;
            epilogues.push((start, starts[index + lead]));
        }
        Ok(Assembled {
            shape: shape.clone(),
            base,
            bytes,
            code_len,
            prolog_ends,
            epilogues,
            return_sites: calls,
        })
    }
}
