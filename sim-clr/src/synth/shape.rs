//! The declarative description of a synthesized function.

use corprof::Register;
use std::fmt;

/// One prologue instruction, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PrologStep {
    /// `push reg`.
    Push(Register),
    /// `sub rsp, n` (n a multiple of 8; 8–128 is a small allocation, above a large one).
    Alloc(u32),
    /// `lea rbp, [rsp + offset]` (`mov rbp, rsp` for 0): RBP becomes the frame pointer.
    /// `offset` is a multiple of 16 up to 240; RBP must have been pushed before.
    SetFramePointer(u8),
    /// `mov [rsp + offset], reg`: a nonvolatile register saved without a push.
    Save(Register, u32),
    /// `movaps [rsp + offset], xmmN` (N in 6–15, offset 16-aligned).
    SaveXmm(u8, u32),
}

/// How an epilogue leaves the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epilogue {
    /// `ret`.
    Ret,
    /// `ret imm16`.
    RetImm(u16),
    /// `rep ret` (`F3 C3`).
    RepRet,
    /// `jmp rel32` to a function outside this one (a tail call).
    TailJmp,
    /// `jmp qword ptr [rip + disp]` through a slot in the function's data (a tail call).
    TailJmpIndirect,
    /// `rex.w jmp rax` (`48 FF E0`), RAX loaded before the epilogue (a tail call).
    TailJmpRax,
    /// `iretq`: leaves a function entered through a machine frame.
    Iret,
}

/// A function: its prologue, body and epilogues.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FunctionShape {
    /// The prologue, in instruction order.
    pub prologue: Vec<PrologStep>,
    /// How many `call rel32` the body makes (each one a return site).
    pub calls: u8,
    /// The body contains a loop: a `jcc` and a `jmp` back-edge inside the function.
    pub back_edges: bool,
    /// The epilogues (at least one); the body branches to each.
    pub epilogues: Vec<Epilogue>,
    /// Entered through a machine frame (RIP, CS, RFLAGS, RSP, SS pushed by the processor, as
    /// for an interrupt or exception) instead of a return address; left with `iretq`.
    pub machine_frame: bool,
}

/// Why a shape cannot be assembled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShapeError(pub String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid function shape: {}", self.0)
    }
}

impl std::error::Error for ShapeError {}

impl FunctionShape {
    /// A frameless leaf: `ret` and nothing else.
    pub fn leaf() -> FunctionShape {
        FunctionShape {
            prologue: Vec::new(),
            calls: 0,
            back_edges: false,
            epilogues: vec![Epilogue::Ret],
            machine_frame: false,
        }
    }

    /// Registers pushed, in push order.
    pub fn pushes(&self) -> impl Iterator<Item = Register> + '_ {
        self.prologue.iter().filter_map(|s| match s {
            PrologStep::Push(r) => Some(*r),
            _ => None,
        })
    }

    /// The fixed stack allocation in bytes.
    pub fn allocation(&self) -> u32 {
        self.prologue
            .iter()
            .map(|s| if let PrologStep::Alloc(n) = s { *n } else { 0 })
            .sum()
    }

    /// The frame-pointer offset, if RBP is set as frame pointer.
    pub fn frame_pointer(&self) -> Option<u8> {
        self.prologue.iter().find_map(|s| {
            if let PrologStep::SetFramePointer(o) = s {
                Some(*o)
            } else {
                None
            }
        })
    }

    /// Bytes the caller (or the processor) pushed before the first instruction: a return
    /// address, or a 40-byte machine frame.
    pub fn entry_size(&self) -> u64 {
        if self.machine_frame {
            40
        } else {
            8
        }
    }

    /// Bytes from the CFA down to RSP after the prologue.
    pub fn frame_size(&self) -> u64 {
        self.entry_size() + 8 * self.pushes().count() as u64 + u64::from(self.allocation())
    }

    /// Checks the rules the encoders rely on (the Windows prologue constraints, which the
    /// DWARF side accepts too).
    pub fn validate(&self) -> Result<(), ShapeError> {
        let err = |m: &str| Err(ShapeError(m.to_string()));
        if self.epilogues.is_empty() {
            return err("a function needs at least one epilogue");
        }
        if self
            .epilogues
            .iter()
            .any(|e| (*e == Epilogue::Iret) != self.machine_frame)
        {
            return err("a machine-frame function leaves with iretq, and only it does");
        }
        let mut pushed = Vec::new();
        let (mut allocs, mut fp, mut after_alloc) = (0, false, false);
        for step in &self.prologue {
            match *step {
                PrologStep::Push(r) => {
                    if r == Register::Rsp || pushed.contains(&r) {
                        return err("each register is pushed at most once, RSP never");
                    }
                    if after_alloc {
                        return err("pushes come before the allocation");
                    }
                    pushed.push(r);
                }
                PrologStep::Alloc(n) => {
                    allocs += 1;
                    after_alloc = true;
                    if n == 0 || n % 8 != 0 || n > 0x10_0000 || allocs > 1 {
                        return err("one allocation, a non-zero multiple of 8 up to 1 MiB");
                    }
                }
                PrologStep::SetFramePointer(o) => {
                    if fp || o % 16 != 0 || o > 240 || !pushed.contains(&Register::Rbp) {
                        return err(
                            "one frame pointer, offset a multiple of 16 up to 240, RBP pushed before",
                        );
                    }
                    fp = true;
                }
                PrologStep::Save(r, off) => {
                    if !after_alloc {
                        return err("saves come after the allocation");
                    }
                    if off % 8 != 0 || r == Register::Rsp || pushed.contains(&r) || r == Register::Rbp && fp {
                        return err("saves go to 8-aligned slots, of registers not pushed");
                    }
                    if u64::from(off) + 8 > u64::from(self.allocation()) {
                        return err("a save must fit in the allocation");
                    }
                }
                PrologStep::SaveXmm(x, off) => {
                    if !after_alloc {
                        return err("saves come after the allocation");
                    }
                    if !(6..=15).contains(&x)
                        || off % 16 != 0
                        || u64::from(off) + 16 > u64::from(self.allocation())
                    {
                        return err("XMM saves are of xmm6-15, 16-aligned, inside the allocation");
                    }
                }
            }
        }
        let needs_alignment =
            self.calls > 0 || self.prologue.iter().any(|s| matches!(s, PrologStep::SaveXmm(..)));
        if needs_alignment && self.frame_size() % 16 != 0 {
            return err("a function that calls or saves XMM must keep RSP 16-aligned (return address, pushes, allocation)");
        }
        let saves = self
            .prologue
            .iter()
            .filter(|s| matches!(s, PrologStep::Save(..) | PrologStep::SaveXmm(..)));
        if saves.clone().count() > 0 && !self.prologue.iter().any(|s| matches!(s, PrologStep::Alloc(_))) {
            return err("saves need an allocation");
        }
        Ok(())
    }
}
