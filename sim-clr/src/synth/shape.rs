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

/// Parses an integer written in decimal or with a `0x` prefix.
fn number(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

/// `[rsp+N]` (or `[rsp]`) → N.
fn rsp_slot(text: &str) -> Option<u32> {
    let inner = text.trim().strip_prefix('[')?.strip_suffix(']')?.trim();
    if inner == "rsp" {
        return Some(0);
    }
    u32::try_from(number(inner.strip_prefix("rsp")?.trim().strip_prefix('+')?)?).ok()
}

impl PrologStep {
    /// Parses the assembly spelling [`PrologStep`]'s `Display` writes: `push rbx`,
    /// `sub rsp, 0x28`, `mov rbp, rsp`, `lea rbp, [rsp+0x20]`, `mov [rsp+8], rsi`,
    /// `movaps [rsp+0x10], xmm6`.
    pub fn parse(text: &str) -> Option<PrologStep> {
        let (op, args) = text.trim().split_once(' ')?;
        let args: Vec<&str> = args.split(',').map(str::trim).collect();
        match (op, args.as_slice()) {
            ("push", [r]) => Some(PrologStep::Push(Register::from_name(r)?)),
            ("sub", ["rsp", n]) => Some(PrologStep::Alloc(u32::try_from(number(n)?).ok()?)),
            ("mov", ["rbp", "rsp"]) => Some(PrologStep::SetFramePointer(0)),
            ("lea", ["rbp", slot]) => Some(PrologStep::SetFramePointer(u8::try_from(rsp_slot(slot)?).ok()?)),
            ("mov", [slot, r]) => Some(PrologStep::Save(Register::from_name(r)?, rsp_slot(slot)?)),
            ("movaps", [slot, x]) => Some(PrologStep::SaveXmm(
                x.strip_prefix("xmm")?.parse().ok()?,
                rsp_slot(slot)?,
            )),
            _ => None,
        }
    }
}

impl fmt::Display for PrologStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PrologStep::Push(r) => write!(f, "push {}", r.name()),
            PrologStep::Alloc(n) => write!(f, "sub rsp, {n:#x}"),
            PrologStep::SetFramePointer(0) => write!(f, "mov rbp, rsp"),
            PrologStep::SetFramePointer(o) => write!(f, "lea rbp, [rsp+{o:#x}]"),
            PrologStep::Save(r, o) => write!(f, "mov [rsp+{o:#x}], {}", r.name()),
            PrologStep::SaveXmm(x, o) => write!(f, "movaps [rsp+{o:#x}], xmm{x}"),
        }
    }
}

impl Epilogue {
    /// Parses the spelling `Display` writes: `ret`, `ret 16`, `rep ret`, `jmp` (a tail call),
    /// `jmp [rip]`, `jmp rax`, `iretq`.
    pub fn parse(text: &str) -> Option<Epilogue> {
        Some(match text.trim() {
            "ret" => Epilogue::Ret,
            "rep ret" => Epilogue::RepRet,
            "jmp" => Epilogue::TailJmp,
            "jmp [rip]" => Epilogue::TailJmpIndirect,
            "jmp rax" => Epilogue::TailJmpRax,
            "iretq" => Epilogue::Iret,
            other => Epilogue::RetImm(u16::try_from(number(other.strip_prefix("ret ")?)?).ok()?),
        })
    }
}

impl fmt::Display for Epilogue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Epilogue::Ret => write!(f, "ret"),
            Epilogue::RetImm(n) => write!(f, "ret {n}"),
            Epilogue::RepRet => write!(f, "rep ret"),
            Epilogue::TailJmp => write!(f, "jmp"),
            Epilogue::TailJmpIndirect => write!(f, "jmp [rip]"),
            Epilogue::TailJmpRax => write!(f, "jmp rax"),
            Epilogue::Iret => write!(f, "iretq"),
        }
    }
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

impl fmt::Display for FunctionShape {
    /// The scenario-file spelling: an inline TOML table.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |items: Vec<String>| {
            items
                .iter()
                .map(|i| format!("{i:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(
            f,
            "{{ prologue = [{}], calls = {}, loop = {}, epilogues = [{}] }}",
            list(self.prologue.iter().map(ToString::to_string).collect()),
            self.calls,
            self.back_edges,
            list(self.epilogues.iter().map(ToString::to_string).collect()),
        )
    }
}

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

    /// True when its code holds no absolute address in its instructions, so that it can be
    /// moved to another address ([`super::Assembled::moved_to`]): every shape but one with a
    /// `TailJmpRax` epilogue, which loads its target as an immediate.
    pub fn can_move(&self) -> bool {
        !self.epilogues.contains(&Epilogue::TailJmpRax)
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
        if needs_alignment && !self.frame_size().is_multiple_of(16) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_epilogues_read_back_what_they_write() {
        let steps = [
            PrologStep::Push(Register::R12),
            PrologStep::Alloc(0x1028),
            PrologStep::SetFramePointer(0),
            PrologStep::SetFramePointer(0x20),
            PrologStep::Save(Register::Rsi, 8),
            PrologStep::Save(Register::Rdi, 0),
            PrologStep::SaveXmm(6, 0x10),
        ];
        for step in steps {
            assert_eq!(PrologStep::parse(&step.to_string()), Some(step), "{step}");
        }
        for e in [
            Epilogue::Ret,
            Epilogue::RetImm(16),
            Epilogue::RepRet,
            Epilogue::TailJmp,
            Epilogue::TailJmpIndirect,
            Epilogue::TailJmpRax,
            Epilogue::Iret,
        ] {
            assert_eq!(Epilogue::parse(&e.to_string()), Some(e), "{e}");
        }
        for bad in [
            "push",
            "push rzz",
            "sub rbx, 8",
            "lea rbp, [rbx+8]",
            "movaps [rsp+8], ymm1",
            "ret x",
            "jmp rbx",
        ] {
            assert_eq!(
                (PrologStep::parse(bad), Epilogue::parse(bad)),
                (None, None),
                "{bad}"
            );
        }
    }
}
