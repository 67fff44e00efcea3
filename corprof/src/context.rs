//! The Windows x64 `CONTEXT`, byte-exact (spec §3): 1232 bytes, 16-aligned.
//!
//! A profiler hands `DoStackSnapshot` a byte buffer plus a size, and receives one in each
//! callback; [`Context::from_bytes`] and [`Context::to_bytes`] convert between that buffer and
//! the typed struct. Unix runtimes of the same era (CoreCLR 3.1) use the same 1232-byte layout;
//! newer PAL builds append XSTATE after it (R44).

use std::fmt;

/// `CONTEXT_AMD64`.
pub const CONTEXT_AMD64: u32 = 0x0010_0000;
/// `CONTEXT_CONTROL`: SegSs, Rsp, SegCs, Rip, EFlags.
pub const CONTEXT_CONTROL: u32 = 0x0010_0001;
/// `CONTEXT_INTEGER`: Rax … R15 except Rsp.
pub const CONTEXT_INTEGER: u32 = 0x0010_0002;
/// `CONTEXT_SEGMENTS`: SegDs, SegEs, SegFs, SegGs.
pub const CONTEXT_SEGMENTS: u32 = 0x0010_0004;
/// `CONTEXT_FLOATING_POINT`: XMM and the legacy FP state.
pub const CONTEXT_FLOATING_POINT: u32 = 0x0010_0008;
/// `CONTEXT_DEBUG_REGISTERS`: Dr0–Dr3, Dr6, Dr7.
pub const CONTEXT_DEBUG_REGISTERS: u32 = 0x0010_0010;
/// `CONTEXT_FULL` = CONTROL | INTEGER | FLOATING_POINT.
pub const CONTEXT_FULL: u32 = 0x0010_000B;
/// `CONTEXT_ALL`.
pub const CONTEXT_ALL: u32 = 0x0010_001F;
/// `CONTEXT_XSTATE`.
pub const CONTEXT_XSTATE: u32 = 0x0010_0040;
/// `CONTEXT_EXCEPTION_ACTIVE`: the thread is in exception dispatch (R13.1).
pub const CONTEXT_EXCEPTION_ACTIVE: u32 = 0x0800_0000;
/// `CONTEXT_SERVICE_ACTIVE`: the thread is in a system service (R13.1).
pub const CONTEXT_SERVICE_ACTIVE: u32 = 0x1000_0000;
/// `CONTEXT_EXCEPTION_REQUEST`: ask for exception reporting.
pub const CONTEXT_EXCEPTION_REQUEST: u32 = 0x4000_0000;
/// `CONTEXT_EXCEPTION_REPORTING`: the OS reported the two flags above.
pub const CONTEXT_EXCEPTION_REPORTING: u32 = 0x8000_0000;

/// An x64 general-purpose register, numbered as in the Windows unwind format (spec B.3.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Register {
    /// RAX (volatile).
    Rax = 0,
    /// RCX (volatile).
    Rcx = 1,
    /// RDX (volatile).
    Rdx = 2,
    /// RBX (nonvolatile).
    Rbx = 3,
    /// RSP.
    Rsp = 4,
    /// RBP (nonvolatile, frame pointer).
    Rbp = 5,
    /// RSI (nonvolatile on Windows).
    Rsi = 6,
    /// RDI (nonvolatile on Windows).
    Rdi = 7,
    /// R8 (volatile).
    R8 = 8,
    /// R9 (volatile).
    R9 = 9,
    /// R10 (volatile).
    R10 = 10,
    /// R11 (volatile).
    R11 = 11,
    /// R12 (nonvolatile).
    R12 = 12,
    /// R13 (nonvolatile).
    R13 = 13,
    /// R14 (nonvolatile).
    R14 = 14,
    /// R15 (nonvolatile).
    R15 = 15,
}

impl Register {
    /// All sixteen, in unwind-format order.
    pub const ALL: [Register; 16] = [
        Register::Rax,
        Register::Rcx,
        Register::Rdx,
        Register::Rbx,
        Register::Rsp,
        Register::Rbp,
        Register::Rsi,
        Register::Rdi,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
        Register::R12,
        Register::R13,
        Register::R14,
        Register::R15,
    ];

    /// The registers a snapshot callback may rely on besides Rip (R25, [DB-CTX]):
    /// Rdi, Rsi, Rbx, Rbp, Rsp, R12–R15.
    pub const CALLBACK_VALID: [Register; 9] = [
        Register::Rbx,
        Register::Rsp,
        Register::Rbp,
        Register::Rsi,
        Register::Rdi,
        Register::R12,
        Register::R13,
        Register::R14,
        Register::R15,
    ];

    /// The volatile (caller-saved) integer registers of the Windows x64 convention
    /// ([MS-REG]): a callee may clobber them without saving.
    pub const VOLATILE: [Register; 7] = [
        Register::Rax,
        Register::Rcx,
        Register::Rdx,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
    ];

    /// The lower-case name (`"rbx"`).
    pub fn name(self) -> &'static str {
        [
            "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
            "r14", "r15",
        ][self as usize]
    }

    /// The register named `name` (case-insensitive).
    pub fn from_name(name: &str) -> Option<Register> {
        let lower = name.to_ascii_lowercase();
        Register::ALL.into_iter().find(|r| r.name() == lower)
    }
}

/// The Windows x64 `CONTEXT` structure, field for field.
#[derive(Clone, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Context {
    /// Register parameter home addresses.
    pub p1_home: u64,
    /// See `p1_home`.
    pub p2_home: u64,
    /// See `p1_home`.
    pub p3_home: u64,
    /// See `p1_home`.
    pub p4_home: u64,
    /// See `p1_home`.
    pub p5_home: u64,
    /// See `p1_home`.
    pub p6_home: u64,
    /// Which parts are valid (`CONTEXT_*`).
    pub context_flags: u32,
    /// SSE control/status.
    pub mx_csr: u32,
    /// CS.
    pub seg_cs: u16,
    /// DS.
    pub seg_ds: u16,
    /// ES.
    pub seg_es: u16,
    /// FS.
    pub seg_fs: u16,
    /// GS.
    pub seg_gs: u16,
    /// SS.
    pub seg_ss: u16,
    /// RFLAGS (low 32 bits).
    pub e_flags: u32,
    /// Debug register 0.
    pub dr0: u64,
    /// Debug register 1.
    pub dr1: u64,
    /// Debug register 2.
    pub dr2: u64,
    /// Debug register 3.
    pub dr3: u64,
    /// Debug register 6.
    pub dr6: u64,
    /// Debug register 7.
    pub dr7: u64,
    /// RAX.
    pub rax: u64,
    /// RCX.
    pub rcx: u64,
    /// RDX.
    pub rdx: u64,
    /// RBX.
    pub rbx: u64,
    /// RSP.
    pub rsp: u64,
    /// RBP.
    pub rbp: u64,
    /// RSI.
    pub rsi: u64,
    /// RDI.
    pub rdi: u64,
    /// R8.
    pub r8: u64,
    /// R9.
    pub r9: u64,
    /// R10.
    pub r10: u64,
    /// R11.
    pub r11: u64,
    /// R12.
    pub r12: u64,
    /// R13.
    pub r13: u64,
    /// R14.
    pub r14: u64,
    /// R15.
    pub r15: u64,
    /// RIP.
    pub rip: u64,
    /// `XMM_SAVE_AREA32` (FXSAVE image); Xmm0 is at byte 0xA0 of it (0x1A0 in the CONTEXT).
    pub flt_save: [u8; 512],
    /// AVX vector registers.
    pub vector_register: [u128; 26],
    /// Vector control.
    pub vector_control: u64,
    /// Debug control.
    pub debug_control: u64,
    /// Last branch target.
    pub last_branch_to_rip: u64,
    /// Last branch source.
    pub last_branch_from_rip: u64,
    /// Last exception target.
    pub last_exception_to_rip: u64,
    /// Last exception source.
    pub last_exception_from_rip: u64,
}

/// Generates the byte conversions from one table of scalar fields and their spec offsets.
macro_rules! scalar_fields {
    ($($field:ident: $ty:ty = $offset:expr,)*) => {
        impl Context {
            /// Every scalar field with its byte offset and size, as in spec §3.
            pub const SCALAR_FIELDS: &'static [(&'static str, usize, usize)] =
                &[$((stringify!($field), $offset, std::mem::size_of::<$ty>()),)*];

            fn read_scalars(&mut self, bytes: &[u8; Context::SIZE]) {
                $(self.$field = <$ty>::from_le_bytes(
                    bytes[$offset..$offset + std::mem::size_of::<$ty>()].try_into().unwrap(),
                );)*
            }

            fn write_scalars(&self, bytes: &mut [u8; Context::SIZE]) {
                $(bytes[$offset..$offset + std::mem::size_of::<$ty>()]
                    .copy_from_slice(&self.$field.to_le_bytes());)*
            }
        }
    };
}

scalar_fields! {
    p1_home: u64 = 0x000,
    p2_home: u64 = 0x008,
    p3_home: u64 = 0x010,
    p4_home: u64 = 0x018,
    p5_home: u64 = 0x020,
    p6_home: u64 = 0x028,
    context_flags: u32 = 0x030,
    mx_csr: u32 = 0x034,
    seg_cs: u16 = 0x038,
    seg_ds: u16 = 0x03A,
    seg_es: u16 = 0x03C,
    seg_fs: u16 = 0x03E,
    seg_gs: u16 = 0x040,
    seg_ss: u16 = 0x042,
    e_flags: u32 = 0x044,
    dr0: u64 = 0x048,
    dr1: u64 = 0x050,
    dr2: u64 = 0x058,
    dr3: u64 = 0x060,
    dr6: u64 = 0x068,
    dr7: u64 = 0x070,
    rax: u64 = 0x078,
    rcx: u64 = 0x080,
    rdx: u64 = 0x088,
    rbx: u64 = 0x090,
    rsp: u64 = 0x098,
    rbp: u64 = 0x0A0,
    rsi: u64 = 0x0A8,
    rdi: u64 = 0x0B0,
    r8: u64 = 0x0B8,
    r9: u64 = 0x0C0,
    r10: u64 = 0x0C8,
    r11: u64 = 0x0D0,
    r12: u64 = 0x0D8,
    r13: u64 = 0x0E0,
    r14: u64 = 0x0E8,
    r15: u64 = 0x0F0,
    rip: u64 = 0x0F8,
    vector_control: u64 = 0x4A0,
    debug_control: u64 = 0x4A8,
    last_branch_to_rip: u64 = 0x4B0,
    last_branch_from_rip: u64 = 0x4B8,
    last_exception_to_rip: u64 = 0x4C0,
    last_exception_from_rip: u64 = 0x4C8,
}

impl Context {
    /// `sizeof(CONTEXT)` on Windows x64 (and CoreCLR 3.1 on Unix): 1232 = 0x4D0.
    pub const SIZE: usize = 0x4D0;
    /// Offset of `FltSave`.
    pub const FLT_SAVE_OFFSET: usize = 0x100;
    /// Offset of `Xmm0` (inside `FltSave`).
    pub const XMM0_OFFSET: usize = 0x1A0;
    /// Offset of `VectorRegister`.
    pub const VECTOR_REGISTER_OFFSET: usize = 0x300;

    /// An all-zero CONTEXT (what a profiler passes as a "zeroed seed").
    pub fn zeroed() -> Context {
        Context {
            p1_home: 0,
            p2_home: 0,
            p3_home: 0,
            p4_home: 0,
            p5_home: 0,
            p6_home: 0,
            context_flags: 0,
            mx_csr: 0,
            seg_cs: 0,
            seg_ds: 0,
            seg_es: 0,
            seg_fs: 0,
            seg_gs: 0,
            seg_ss: 0,
            e_flags: 0,
            dr0: 0,
            dr1: 0,
            dr2: 0,
            dr3: 0,
            dr6: 0,
            dr7: 0,
            rax: 0,
            rcx: 0,
            rdx: 0,
            rbx: 0,
            rsp: 0,
            rbp: 0,
            rsi: 0,
            rdi: 0,
            r8: 0,
            r9: 0,
            r10: 0,
            r11: 0,
            r12: 0,
            r13: 0,
            r14: 0,
            r15: 0,
            rip: 0,
            flt_save: [0; 512],
            vector_register: [0; 26],
            vector_control: 0,
            debug_control: 0,
            last_branch_to_rip: 0,
            last_branch_from_rip: 0,
            last_exception_to_rip: 0,
            last_exception_from_rip: 0,
        }
    }

    /// Reads a CONTEXT from the first [`Context::SIZE`] bytes of `bytes`.
    ///
    /// Returns `None` when fewer bytes are given: the runtime always reads a full CONTEXT
    /// whatever `contextSize` says (R7, R31), so a short buffer is a profiler bug.
    pub fn from_bytes(bytes: &[u8]) -> Option<Context> {
        let mut context = Context::zeroed();
        context.read_bytes(bytes).then_some(context)
    }

    /// Overwrites this CONTEXT with the first [`Context::SIZE`] bytes of `bytes`, as
    /// [`Context::from_bytes`] reads them, without a copy; returns false (and changes nothing)
    /// when fewer bytes are given.
    pub fn read_bytes(&mut self, bytes: &[u8]) -> bool {
        let Some(bytes) = bytes.first_chunk::<{ Context::SIZE }>() else {
            return false;
        };
        self.read_scalars(bytes);
        self.flt_save
            .copy_from_slice(&bytes[Context::FLT_SAVE_OFFSET..Context::FLT_SAVE_OFFSET + 512]);
        for (i, v) in self.vector_register.iter_mut().enumerate() {
            let at = Context::VECTOR_REGISTER_OFFSET + 16 * i;
            *v = u128::from_le_bytes(bytes[at..at + 16].try_into().unwrap());
        }
        true
    }

    /// The CONTEXT as the 1232 bytes a native profiler would see.
    pub fn to_bytes(&self) -> [u8; Context::SIZE] {
        let mut bytes = [0u8; Context::SIZE];
        self.write_bytes(&mut bytes);
        bytes
    }

    /// Writes the CONTEXT's 1232 bytes, as [`Context::to_bytes`] gives them, into `bytes`.
    pub fn write_bytes(&self, bytes: &mut [u8; Context::SIZE]) {
        self.write_scalars(bytes);
        bytes[Context::FLT_SAVE_OFFSET..Context::FLT_SAVE_OFFSET + 512].copy_from_slice(&self.flt_save);
        for (i, v) in self.vector_register.iter().enumerate() {
            let at = Context::VECTOR_REGISTER_OFFSET + 16 * i;
            bytes[at..at + 16].copy_from_slice(&v.to_le_bytes());
        }
    }

    /// The value of a general-purpose register.
    pub fn get(&self, register: Register) -> u64 {
        match register {
            Register::Rax => self.rax,
            Register::Rcx => self.rcx,
            Register::Rdx => self.rdx,
            Register::Rbx => self.rbx,
            Register::Rsp => self.rsp,
            Register::Rbp => self.rbp,
            Register::Rsi => self.rsi,
            Register::Rdi => self.rdi,
            Register::R8 => self.r8,
            Register::R9 => self.r9,
            Register::R10 => self.r10,
            Register::R11 => self.r11,
            Register::R12 => self.r12,
            Register::R13 => self.r13,
            Register::R14 => self.r14,
            Register::R15 => self.r15,
        }
    }

    /// Sets a general-purpose register.
    pub fn set(&mut self, register: Register, value: u64) {
        let slot = match register {
            Register::Rax => &mut self.rax,
            Register::Rcx => &mut self.rcx,
            Register::Rdx => &mut self.rdx,
            Register::Rbx => &mut self.rbx,
            Register::Rsp => &mut self.rsp,
            Register::Rbp => &mut self.rbp,
            Register::Rsi => &mut self.rsi,
            Register::Rdi => &mut self.rdi,
            Register::R8 => &mut self.r8,
            Register::R9 => &mut self.r9,
            Register::R10 => &mut self.r10,
            Register::R11 => &mut self.r11,
            Register::R12 => &mut self.r12,
            Register::R13 => &mut self.r13,
            Register::R14 => &mut self.r14,
            Register::R15 => &mut self.r15,
        };
        *slot = value;
    }

    /// XMM register `index` (0–15) from the FXSAVE area.
    pub fn xmm(&self, index: usize) -> u128 {
        let at = Context::XMM0_OFFSET - Context::FLT_SAVE_OFFSET + 16 * index;
        u128::from_le_bytes(self.flt_save[at..at + 16].try_into().unwrap())
    }

    /// Sets XMM register `index` (0–15) in the FXSAVE area.
    pub fn set_xmm(&mut self, index: usize, value: u128) {
        let at = Context::XMM0_OFFSET - Context::FLT_SAVE_OFFSET + 16 * index;
        self.flt_save[at..at + 16].copy_from_slice(&value.to_le_bytes());
    }
}

/// Offset of `Rax` in a CONTEXT; the general-purpose registers follow in [`Register`] order.
pub const GPR_OFFSET: usize = 0x78;
/// Offset of `Rip` in a CONTEXT.
pub const RIP_OFFSET: usize = 0xF8;

/// Writes `rip` and the general-purpose registers `gpr` (by [`Register`] number) into the
/// CONTEXT laid out in `bytes` (as [`Context::to_bytes`] lays it out), leaving every other
/// field; `bytes` shorter than a CONTEXT's registers are left alone.
pub fn write_registers(bytes: &mut [u8], rip: u64, gpr: &[u64; 16]) {
    let Some(registers) = bytes.get_mut(GPR_OFFSET..RIP_OFFSET + 8) else {
        return;
    };
    for (slot, value) in registers.chunks_exact_mut(8).zip(gpr.iter().chain([&rip])) {
        slot.copy_from_slice(&value.to_le_bytes());
    }
}

impl Default for Context {
    fn default() -> Context {
        Context::zeroed()
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Context");
        s.field("context_flags", &format_args!("0x{:x}", self.context_flags));
        s.field("rip", &format_args!("0x{:x}", self.rip));
        for r in Register::ALL {
            s.field(r.name(), &format_args!("0x{:x}", self.get(r)));
        }
        s.finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writing_registers_into_bytes_equals_serializing_them() {
        let mut context = Context::zeroed();
        context.context_flags = 0x10_000b;
        context.set_xmm(3, 0x1234);
        let before = context.to_bytes();
        for r in Register::ALL {
            context.set(r, 0x1000 + r as u64);
        }
        context.rip = 0x7777;
        let mut bytes = before.to_vec();
        write_registers(&mut bytes, context.rip, &Register::ALL.map(|r| context.get(r)));
        assert_eq!(bytes, context.to_bytes().to_vec());
        let mut short = vec![0u8; 0x80];
        write_registers(&mut short, 1, &[2; 16]);
        assert_eq!(short, vec![0u8; 0x80]);
    }
    use std::mem::{align_of, offset_of, size_of};

    #[test]
    fn size_and_alignment() {
        assert_eq!(size_of::<Context>(), 1232);
        assert_eq!(Context::SIZE, 0x4D0);
        assert_eq!(align_of::<Context>(), 16);
    }

    #[test]
    fn every_offset_matches_the_spec() {
        // The struct's own layout, independently of the conversion table.
        let expected = [
            (offset_of!(Context, p1_home), 0x000),
            (offset_of!(Context, p6_home), 0x028),
            (offset_of!(Context, context_flags), 0x030),
            (offset_of!(Context, mx_csr), 0x034),
            (offset_of!(Context, seg_cs), 0x038),
            (offset_of!(Context, seg_ds), 0x03A),
            (offset_of!(Context, seg_es), 0x03C),
            (offset_of!(Context, seg_fs), 0x03E),
            (offset_of!(Context, seg_gs), 0x040),
            (offset_of!(Context, seg_ss), 0x042),
            (offset_of!(Context, e_flags), 0x044),
            (offset_of!(Context, dr0), 0x048),
            (offset_of!(Context, dr7), 0x070),
            (offset_of!(Context, rax), 0x078),
            (offset_of!(Context, rcx), 0x080),
            (offset_of!(Context, rdx), 0x088),
            (offset_of!(Context, rbx), 0x090),
            (offset_of!(Context, rsp), 0x098),
            (offset_of!(Context, rbp), 0x0A0),
            (offset_of!(Context, rsi), 0x0A8),
            (offset_of!(Context, rdi), 0x0B0),
            (offset_of!(Context, r8), 0x0B8),
            (offset_of!(Context, r9), 0x0C0),
            (offset_of!(Context, r10), 0x0C8),
            (offset_of!(Context, r11), 0x0D0),
            (offset_of!(Context, r12), 0x0D8),
            (offset_of!(Context, r13), 0x0E0),
            (offset_of!(Context, r14), 0x0E8),
            (offset_of!(Context, r15), 0x0F0),
            (offset_of!(Context, rip), 0x0F8),
            (offset_of!(Context, flt_save), 0x100),
            (offset_of!(Context, vector_register), 0x300),
            (offset_of!(Context, vector_control), 0x4A0),
            (offset_of!(Context, debug_control), 0x4A8),
            (offset_of!(Context, last_branch_to_rip), 0x4B0),
            (offset_of!(Context, last_branch_from_rip), 0x4B8),
            (offset_of!(Context, last_exception_to_rip), 0x4C0),
            (offset_of!(Context, last_exception_from_rip), 0x4C8),
        ];
        for (actual, spec) in expected {
            assert_eq!(actual, spec);
        }
        // The conversion table agrees with the struct for every scalar field.
        let layout: std::collections::HashMap<&str, usize> = [
            ("p1_home", offset_of!(Context, p1_home)),
            ("p2_home", offset_of!(Context, p2_home)),
            ("p3_home", offset_of!(Context, p3_home)),
            ("p4_home", offset_of!(Context, p4_home)),
            ("p5_home", offset_of!(Context, p5_home)),
            ("p6_home", offset_of!(Context, p6_home)),
            ("context_flags", offset_of!(Context, context_flags)),
            ("mx_csr", offset_of!(Context, mx_csr)),
            ("seg_cs", offset_of!(Context, seg_cs)),
            ("seg_ds", offset_of!(Context, seg_ds)),
            ("seg_es", offset_of!(Context, seg_es)),
            ("seg_fs", offset_of!(Context, seg_fs)),
            ("seg_gs", offset_of!(Context, seg_gs)),
            ("seg_ss", offset_of!(Context, seg_ss)),
            ("e_flags", offset_of!(Context, e_flags)),
            ("dr0", offset_of!(Context, dr0)),
            ("dr1", offset_of!(Context, dr1)),
            ("dr2", offset_of!(Context, dr2)),
            ("dr3", offset_of!(Context, dr3)),
            ("dr6", offset_of!(Context, dr6)),
            ("dr7", offset_of!(Context, dr7)),
            ("rax", offset_of!(Context, rax)),
            ("rcx", offset_of!(Context, rcx)),
            ("rdx", offset_of!(Context, rdx)),
            ("rbx", offset_of!(Context, rbx)),
            ("rsp", offset_of!(Context, rsp)),
            ("rbp", offset_of!(Context, rbp)),
            ("rsi", offset_of!(Context, rsi)),
            ("rdi", offset_of!(Context, rdi)),
            ("r8", offset_of!(Context, r8)),
            ("r9", offset_of!(Context, r9)),
            ("r10", offset_of!(Context, r10)),
            ("r11", offset_of!(Context, r11)),
            ("r12", offset_of!(Context, r12)),
            ("r13", offset_of!(Context, r13)),
            ("r14", offset_of!(Context, r14)),
            ("r15", offset_of!(Context, r15)),
            ("rip", offset_of!(Context, rip)),
            ("vector_control", offset_of!(Context, vector_control)),
            ("debug_control", offset_of!(Context, debug_control)),
            ("last_branch_to_rip", offset_of!(Context, last_branch_to_rip)),
            ("last_branch_from_rip", offset_of!(Context, last_branch_from_rip)),
            (
                "last_exception_to_rip",
                offset_of!(Context, last_exception_to_rip),
            ),
            (
                "last_exception_from_rip",
                offset_of!(Context, last_exception_from_rip),
            ),
        ]
        .into_iter()
        .collect();
        assert_eq!(layout.len(), Context::SCALAR_FIELDS.len());
        for (name, offset, _) in Context::SCALAR_FIELDS {
            assert_eq!(layout[name], *offset, "{name}");
        }
    }

    #[test]
    fn flag_values_match_the_spec() {
        assert_eq!(
            CONTEXT_FULL,
            CONTEXT_CONTROL | CONTEXT_INTEGER | CONTEXT_FLOATING_POINT
        );
        assert_eq!(
            CONTEXT_ALL,
            CONTEXT_FULL | CONTEXT_SEGMENTS | CONTEXT_DEBUG_REGISTERS
        );
        assert_eq!(CONTEXT_FULL, 0x0010_000B);
        assert_eq!(CONTEXT_ALL, 0x0010_001F);
    }

    #[test]
    fn bytes_round_trip_and_land_at_the_spec_offsets() {
        let mut c = Context::zeroed();
        for (i, r) in Register::ALL.into_iter().enumerate() {
            c.set(r, 0x1111_0000_0000_0000 + i as u64);
        }
        c.rip = 0xdead_beef_0000_1234;
        c.context_flags = CONTEXT_FULL;
        c.e_flags = 0x246;
        c.seg_ss = 0x2b;
        c.set_xmm(15, 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        c.vector_register[25] = 7;
        c.last_exception_from_rip = 9;
        let bytes = c.to_bytes();
        let at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
        assert_eq!(at(0x0F8), 0xdead_beef_0000_1234);
        assert_eq!(at(0x098), 0x1111_0000_0000_0004);
        assert_eq!(at(0x0F0), 0x1111_0000_0000_000F);
        assert_eq!(
            u32::from_le_bytes(bytes[0x30..0x34].try_into().unwrap()),
            CONTEXT_FULL
        );
        assert_eq!(u16::from_le_bytes(bytes[0x42..0x44].try_into().unwrap()), 0x2b);
        assert_eq!(bytes[0x290 + 15], 0x01);
        assert_eq!(at(0x490), 7);
        assert_eq!(at(0x4C8), 9);
        assert_eq!(Context::from_bytes(&bytes), Some(c.clone()));
        assert_eq!(c.xmm(15), 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10);
        assert!(Context::from_bytes(&bytes[..16]).is_none());
    }

    #[test]
    fn register_names_round_trip() {
        for r in Register::ALL {
            assert_eq!(Register::from_name(r.name()), Some(r));
        }
        assert_eq!(Register::from_name("RIP"), None);
    }
}
