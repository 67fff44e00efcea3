//! The ground truth for unwinding: executes a function's instructions (decoded with
//! iced-x86) from a known entry state along every path, and records the machine state at
//! every instruction boundary. It never reads an unwind table.
//!
//! In the standard entry state RSP is [`ENTRY_RSP`], `[RSP]` holds [`RETURN_ADDRESS`], and
//! every register holds its own sentinel ([`sentinel`]). A machine-frame function is entered with RSP 32 bytes
//! lower and the processor's frame there (RIP = `RETURN_ADDRESS`, CS, RFLAGS, RSP =
//! `ENTRY_RSP + 8`, SS), so that in both cases a correct unwind of any boundary yields RIP =
//! `RETURN_ADDRESS`, RSP = `ENTRY_RSP + 8`, and every nonvolatile register back at its
//! sentinel. [`emulate_from`] starts from any other state, such as the one a caller left
//! at its call ([`EntryState::called_from`]): chaining those builds deep stacks of real frames.

use super::assemble::Assembled;
use corprof::Register;
use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// RSP at function entry (≡ 8 mod 16, as after a call).
pub const ENTRY_RSP: u64 = 0x7ff0_0000_1008;
/// The return address at `[ENTRY_RSP]`.
pub const RETURN_ADDRESS: u64 = 0x7f66_0000_1234;

/// The one-byte `nop` (at an instruction boundary nothing else starts with this byte).
pub(crate) const NOP: u8 = 0x90;

/// The value register `r` holds at entry (and must hold again after unwinding).
pub fn sentinel(r: Register) -> u64 {
    0x5e00_0000_0000_0000 | (r as u64) << 8 | 0x11
}

/// The value XMM register `n` holds at entry.
pub fn xmm_sentinel(n: u8) -> u128 {
    0x3c00_0000_0000_0000_0000_0000_0000_0000 | u128::from(n) << 64 | 0x77
}

/// The machine state before one instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The instruction's address.
    pub ip: u64,
    /// General-purpose registers, by [`Register`] number.
    pub regs: [u64; 16],
    /// XMM registers, shared with the boundaries before it until an instruction writes one.
    pub xmm: Arc<[u128; 16]>,
    /// Stack memory written so far (8-byte words by address), the entry return address
    /// included. Shared with the boundaries before it until an instruction writes the stack.
    pub stack: Arc<BTreeMap<u64, u64>>,
    /// True when the instruction follows a call (a return site: unwound as a non-first frame).
    pub return_site: bool,
}

impl Boundary {
    /// Reads a stack word, as an unwinder's memory callback would.
    pub fn read(&self, address: u64) -> Option<u64> {
        self.stack.get(&address).copied()
    }
}

/// An instruction the emulator does not model, or an inconsistent path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmulationError(pub String);

impl fmt::Display for EmulationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "emulation: {}", self.0)
    }
}

impl std::error::Error for EmulationError {}

#[derive(Clone)]
struct State {
    regs: [u64; 16],
    /// Copied on write, like the stack: few instructions touch an XMM register.
    xmm: Arc<[u128; 16]>,
    /// Copied on write: most instructions leave the stack alone, so their boundaries share it.
    stack: Arc<BTreeMap<u64, u64>>,
}

impl State {
    fn store(&mut self, address: u64, value: u64) {
        Arc::make_mut(&mut self.stack).insert(address, value);
    }
}

/// `r`'s offset from `first` in iced's register enum, if below `count` (iced numbers each
/// register class contiguously in the x64 encoding order).
fn offset_in(r: iced_x86::Register, first: iced_x86::Register, count: u32) -> Option<usize> {
    let n = (r as u32).wrapping_sub(first as u32);
    (n < count).then_some(n as usize)
}

/// The 64-bit register (or the 32-bit alias of one) `r` names, by [`Register`] number.
fn reg_index(r: iced_x86::Register) -> Option<usize> {
    offset_in(r, iced_x86::Register::RAX, 16).or_else(|| offset_in(r, iced_x86::Register::EAX, 16))
}

fn xmm_index(r: iced_x86::Register) -> Option<usize> {
    offset_in(r, iced_x86::Register::XMM0, 16)
}

/// The machine state a function is entered with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryState {
    /// General-purpose registers, by [`Register`] number.
    pub regs: [u64; 16],
    /// XMM registers.
    pub xmm: [u128; 16],
    /// Stack memory (8-byte words by address), the return address (or machine frame) included.
    pub stack: BTreeMap<u64, u64>,
}

impl EntryState {
    /// The standard entry described above: sentinels, [`ENTRY_RSP`], [`RETURN_ADDRESS`]
    /// (behind a machine frame if `machine_frame`).
    pub fn standard(machine_frame: bool) -> EntryState {
        let mut regs = Register::ALL.map(sentinel);
        let mut stack = BTreeMap::new();
        if machine_frame {
            let t = ENTRY_RSP - 32;
            for (i, v) in [RETURN_ADDRESS, 0x33, 0x246, ENTRY_RSP + 8, 0x2b]
                .into_iter()
                .enumerate()
            {
                stack.insert(t + 8 * i as u64, v);
            }
            regs[Register::Rsp as usize] = t;
        } else {
            stack.insert(ENTRY_RSP, RETURN_ADDRESS);
            regs[Register::Rsp as usize] = ENTRY_RSP;
        }
        EntryState {
            regs,
            xmm: std::array::from_fn(|n| xmm_sentinel(n as u8)),
            stack,
        }
    }

    /// The state a function is entered with when it is called from the call just before
    /// return site `site`: the caller's registers and stack, and the return address pushed.
    pub fn called_from(site: &Boundary) -> EntryState {
        let mut regs = site.regs;
        regs[Register::Rsp as usize] -= 8;
        let mut stack = BTreeMap::clone(&site.stack);
        stack.insert(regs[Register::Rsp as usize], site.ip);
        EntryState {
            regs,
            xmm: *site.xmm,
            stack,
        }
    }
}

/// Executes `code` from the standard entry ([`EntryState::standard`]) along every path and
/// returns one [`Boundary`] per instruction reached, in address order.
pub fn emulate(code: &Assembled) -> Result<Vec<Boundary>, EmulationError> {
    emulate_from(code, EntryState::standard(code.shape.machine_frame))
}

/// Executes `code` from `entry` along every path and returns one [`Boundary`] per
/// instruction reached, in address order.
pub fn emulate_from(code: &Assembled, entry: EntryState) -> Result<Vec<Boundary>, EmulationError> {
    let err = |m: String| Err(EmulationError(m));
    let text = &code.bytes[..code.code_len as usize];
    let end = code.base + code.code_len;
    let EntryState { regs, xmm, stack } = entry;
    // Each offset's boundary, by its index in `found` (u32::MAX: not reached yet).
    let mut seen = vec![u32::MAX; text.len()];
    let mut found: Vec<Boundary> = Vec::with_capacity(text.len());
    let mut decoder = Decoder::with_ip(64, text, code.base, DecoderOptions::NONE);
    let mut work = vec![(
        code.base,
        State {
            regs,
            xmm: Arc::new(xmm),
            stack: Arc::new(stack),
        },
        false,
    )];
    while let Some((ip, mut state, return_site)) = work.pop() {
        if ip < code.base || ip >= end {
            return err(format!("control left the function at 0x{ip:x}"));
        }
        let offset = (ip - code.base) as usize;
        if let Some(prev) = found.get(seen[offset] as usize) {
            if prev.regs[Register::Rsp as usize] != state.regs[Register::Rsp as usize] {
                return err(format!("paths meet at 0x{ip:x} with different RSP"));
            }
            continue;
        }
        seen[offset] = found.len() as u32;
        let boundary = |ip| Boundary {
            ip,
            regs: state.regs,
            xmm: Arc::clone(&state.xmm),
            stack: Arc::clone(&state.stack),
            return_site,
        };
        found.push(boundary(ip));
        if text[offset] == NOP {
            // The padding: a run of one-byte `nop`s changes nothing but the IP. Its boundaries
            // are recorded here, up to the next instruction or one reached before.
            let mut next = offset + 1;
            while text.get(next) == Some(&NOP) && seen[next] == u32::MAX {
                seen[next] = found.len() as u32;
                found.push(Boundary {
                    return_site: false,
                    ..boundary(code.base + next as u64)
                });
                next += 1;
            }
            work.push((code.base + next as u64, state, false));
            continue;
        }
        decoder
            .set_position(offset)
            .map_err(|e| EmulationError(format!("at 0x{ip:x}: {e}")))?;
        decoder.set_ip(ip);
        let i = decoder.decode();
        if i.is_invalid() {
            return err(format!("invalid instruction at 0x{ip:x}"));
        }
        match step(&i, &mut state, code.external())? {
            Flow::Next => work.push((i.next_ip(), state, false)),
            Flow::AfterCall => work.push((i.next_ip(), state, true)),
            Flow::Branch(target) => {
                work.push((i.next_ip(), state.clone(), false));
                work.push((target, state, false));
            }
            Flow::Jump(target) => work.push((target, state, false)),
            Flow::Leave => {}
        }
    }
    // Paths are followed in address order mostly, so the sort finds long sorted runs.
    found.sort_by_key(|b| b.ip);
    Ok(found)
}

enum Flow {
    Next,
    AfterCall,
    Branch(u64),
    Jump(u64),
    Leave,
}

fn mem_address(i: &Instruction, s: &State) -> Result<u64, EmulationError> {
    if i.is_ip_rel_memory_operand() {
        return Ok(i.ip_rel_memory_address());
    }
    let base = reg_index(i.memory_base())
        .ok_or_else(|| EmulationError(format!("unsupported memory operand in {:?}", i.code())))?;
    if i.memory_index() != iced_x86::Register::None {
        return Err(EmulationError(format!(
            "indexed memory operand in {:?}",
            i.code()
        )));
    }
    Ok(s.regs[base].wrapping_add(i.memory_displacement64()))
}

fn load(s: &State, address: u64) -> Result<u64, EmulationError> {
    s.stack
        .get(&address)
        .copied()
        .ok_or_else(|| EmulationError(format!("read of unwritten stack at 0x{address:x}")))
}

fn step(i: &Instruction, s: &mut State, external: u64) -> Result<Flow, EmulationError> {
    let unsupported = || {
        Err(EmulationError(format!(
            "unsupported instruction {:?} at 0x{:x}",
            i.code(),
            i.ip()
        )))
    };
    let rsp = Register::Rsp as usize;
    let op_reg = |n: u32| reg_index(i.op_register(n));
    match i.mnemonic() {
        Mnemonic::Push => {
            let Some(r) = op_reg(0) else { return unsupported() };
            s.regs[rsp] -= 8;
            s.store(s.regs[rsp], s.regs[r]);
        }
        Mnemonic::Pop => {
            let Some(r) = op_reg(0) else { return unsupported() };
            let v = load(s, s.regs[rsp])?;
            s.regs[rsp] += 8;
            s.regs[r] = v;
        }
        Mnemonic::Sub | Mnemonic::Add if op_reg(0) == Some(rsp) && i.op1_kind() != OpKind::Register => {
            let imm = i.immediate(1);
            s.regs[rsp] = if i.mnemonic() == Mnemonic::Sub {
                s.regs[rsp] - imm
            } else {
                s.regs[rsp] + imm
            };
        }
        Mnemonic::Lea => {
            let Some(r) = op_reg(0) else { return unsupported() };
            s.regs[r] = mem_address(i, s)?;
        }
        Mnemonic::Mov => match (i.op0_kind(), i.op1_kind()) {
            (OpKind::Register, OpKind::Register) => {
                let (Some(d), Some(src)) = (op_reg(0), op_reg(1)) else {
                    return unsupported();
                };
                s.regs[d] = s.regs[src];
            }
            (OpKind::Memory, OpKind::Register) => {
                let (Some(src), address) = (op_reg(1), mem_address(i, s)?) else {
                    return unsupported();
                };
                s.store(address, s.regs[src]);
            }
            (OpKind::Register, OpKind::Memory) => {
                let Some(d) = op_reg(0) else { return unsupported() };
                s.regs[d] = load(s, mem_address(i, s)?)?;
            }
            (OpKind::Register, _) => {
                let Some(d) = op_reg(0) else { return unsupported() };
                s.regs[d] = i.immediate(1);
            }
            _ => return unsupported(),
        },
        Mnemonic::Movaps => match (i.op0_kind(), i.op1_kind()) {
            (OpKind::Memory, OpKind::Register) => {
                let (Some(x), address) = (xmm_index(i.op1_register()), mem_address(i, s)?) else {
                    return unsupported();
                };
                s.store(address, s.xmm[x] as u64);
                s.store(address + 8, (s.xmm[x] >> 64) as u64);
            }
            (OpKind::Register, OpKind::Memory) => {
                let (Some(x), address) = (xmm_index(i.op0_register()), mem_address(i, s)?) else {
                    return unsupported();
                };
                Arc::make_mut(&mut s.xmm)[x] =
                    u128::from(load(s, address)?) | u128::from(load(s, address + 8)?) << 64;
            }
            _ => return unsupported(),
        },
        Mnemonic::Xorps => {
            let Some(x) = xmm_index(i.op0_register()) else {
                return unsupported();
            };
            Arc::make_mut(&mut s.xmm)[x] = 0;
        }
        Mnemonic::Dec | Mnemonic::Cmp | Mnemonic::Nop => {}
        Mnemonic::Call => {
            if i.near_branch_target() != external {
                return unsupported();
            }
            // The callee returns with RSP unchanged and clobbers the volatile registers.
            for r in Register::VOLATILE {
                s.regs[r as usize] = 0xdead_0000_0000_0000 | r as u64;
            }
            return Ok(Flow::AfterCall);
        }
        Mnemonic::Jne | Mnemonic::Je => return Ok(Flow::Branch(i.near_branch_target())),
        Mnemonic::Jmp if i.op0_kind() == OpKind::NearBranch64 && i.near_branch_target() != external => {
            return Ok(Flow::Jump(i.near_branch_target()));
        }
        Mnemonic::Jmp | Mnemonic::Ret | Mnemonic::Iretq => return Ok(Flow::Leave),
        _ => return unsupported(),
    }
    Ok(Flow::Next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{assemble, Epilogue, FunctionShape, PrologStep};

    fn shape() -> FunctionShape {
        FunctionShape {
            prologue: vec![
                PrologStep::Push(Register::Rbp),
                PrologStep::Push(Register::Rbx),
                PrologStep::Push(Register::R12),
                PrologStep::Alloc(0x30),
                PrologStep::SetFramePointer(0x20),
                PrologStep::Save(Register::Rsi, 8),
                PrologStep::SaveXmm(6, 0x10),
            ],
            calls: 2,
            back_edges: true,
            epilogues: vec![
                Epilogue::Ret,
                Epilogue::TailJmpIndirect,
                Epilogue::TailJmpRax,
                Epilogue::RetImm(16),
            ],
            machine_frame: false,
        }
    }

    #[test]
    fn every_instruction_is_reached_and_rsp_is_consistent() {
        let code = assemble(&shape(), 0x7f20_0000_1000).unwrap();
        let boundaries = emulate(&code).unwrap();
        let mut decoder = Decoder::with_ip(
            64,
            &code.bytes[..code.code_len as usize],
            code.base,
            DecoderOptions::NONE,
        );
        let mut count = 0;
        while decoder.can_decode() {
            let _ = decoder.decode();
            count += 1;
        }
        assert_eq!(boundaries.len(), count, "every instruction is on some path");
        let entry = &boundaries[0];
        assert_eq!(entry.regs[Register::Rsp as usize], ENTRY_RSP);
        let body = boundaries
            .iter()
            .find(|b| b.ip == code.base + code.prolog_ends.last().unwrap())
            .unwrap();
        assert_eq!(
            body.regs[Register::Rsp as usize],
            ENTRY_RSP + 8 - code.shape.frame_size()
        );
        assert_eq!(
            body.regs[Register::Rbp as usize],
            body.regs[Register::Rsp as usize] + 0x20
        );
        assert_eq!(boundaries.iter().filter(|b| b.return_site).count(), 2);
        for (_, proper) in &code.epilogues {
            let b = boundaries.iter().find(|b| b.ip == code.base + proper).unwrap();
            assert_eq!(
                b.regs[Register::Rsi as usize],
                sentinel(Register::Rsi),
                "restored before the epilogue"
            );
            assert_eq!(b.xmm[6], xmm_sentinel(6));
        }
    }

    #[test]
    fn unsupported_code_is_an_error_not_a_panic() {
        let mut code = assemble(&FunctionShape::leaf(), 0x1000).unwrap();
        code.bytes[0] = 0x0F; // ud-ish prefix garbage
        code.bytes.insert(1, 0xFF);
        assert!(emulate(&code).is_err());
    }
}
