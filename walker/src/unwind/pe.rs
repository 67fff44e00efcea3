//! Unwinding with Windows x64 unwind info (`.pdata`/`.xdata`, versions 1 and 2), as
//! `RtlVirtualUnwind` does it (spec B.3):
//! - no RUNTIME_FUNCTION for the address: a leaf, RIP = `[RSP]`, RSP += 8;
//! - for the interrupted frame, epilogue detection against the entry that contains the IP —
//!   version 1 by decoding the instructions at the IP with the exact Windows rules, version 2
//!   from the UWOP_EPILOG descriptors — and, in an epilogue, emulation of the rest of it;
//! - otherwise the prologue codes, skipping those whose CodeOffset lies beyond the IP, the
//!   FrameBase rule for saves, chained entries (up to 32), MACHFRAME.
//!
//! All of it is evaluated into a rule from the tables and the code alone, without
//! reading the stack.

use super::rule::{Rule, Source};
use super::{FrameKind, UnwindError};
use corprof::Register;
use iced_x86::{Code, Decoder, DecoderOptions};

const UNW_FLAG_CHAININFO: u8 = 0x4;
const CHAIN_LIMIT: usize = 32;

/// A RUNTIME_FUNCTION.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    begin: u32,
    end: u32,
    info: u32,
}

/// The parsed UNWIND_INFO header.
#[derive(Clone, Copy, Debug)]
struct Info {
    version: u8,
    flags: u8,
    prolog_size: u8,
    count: u8,
    frame_register: u8,
    frame_offset: u8,
    /// RVA of the first code slot.
    codes: u32,
}

impl Info {
    /// RVA just past the (even-padded) code array: the chained parent's RUNTIME_FUNCTION.
    fn after_codes(&self) -> u32 {
        self.codes + 2 * (u32::from(self.count) + u32::from(self.count) % 2)
    }
}

/// One module's image (code, `.pdata`, `.xdata`) mapped at `image_base`, whole or as the
/// sections a profiler copied.
pub struct PeModule<'a> {
    image_base: u64,
    /// (RVA, bytes) of each mapped part, by RVA.
    sections: Vec<(u32, &'a [u8])>,
    pdata: &'a [u8],
}

/// Slots an operation occupies (the .NET port's table).
fn slots(op: u8, info: u8) -> Option<usize> {
    Some(match op {
        0 | 2 | 3 | 10 => 1,
        1 => 2 + usize::from(info == 1),
        4 | 6 | 8 => 2,
        5 | 9 => 3,
        _ => return None,
    })
}

fn register(n: u8) -> Register {
    Register::ALL[usize::from(n & 15)]
}

impl<'a> PeModule<'a> {
    /// A module laid out whole from RVA 0 in `image`, whose `.pdata` is at RVA `pdata.0`,
    /// `pdata.1` bytes long.
    pub fn new(image_base: u64, image: &'a [u8], pdata: (u32, u32)) -> Result<PeModule<'a>, UnwindError> {
        PeModule::from_sections(image_base, vec![(0, image)], pdata)
    }

    /// A module given by its sections, each `(RVA, bytes)`: at least `.pdata`, the
    /// `.xdata` it points at, and the code (version 1 epilogues are recognized by decoding
    /// it; where it is missing, an IP is taken to be outside any epilogue).
    pub fn from_sections(
        image_base: u64,
        mut sections: Vec<(u32, &'a [u8])>,
        pdata: (u32, u32),
    ) -> Result<PeModule<'a>, UnwindError> {
        sections.sort_by_key(|s| s.0);
        let bad = UnwindError::BadUnwindInfo(image_base);
        if !pdata.1.is_multiple_of(12) {
            return Err(bad);
        }
        let mut module = PeModule {
            image_base,
            sections,
            pdata: &[],
        };
        module.pdata = module.bytes(pdata.0, pdata.1 as usize).map_err(|_| bad)?;
        Ok(module)
    }

    /// The mapped bytes from `rva` to the end of the part that contains it.
    fn rest(&self, rva: u32) -> &'a [u8] {
        let i = self.sections.partition_point(|s| s.0 <= rva);
        let Some(&(start, bytes)) = i.checked_sub(1).map(|i| &self.sections[i]) else {
            return &[];
        };
        bytes.get((rva - start) as usize..).unwrap_or(&[])
    }

    fn bytes(&self, rva: u32, len: usize) -> Result<&'a [u8], UnwindError> {
        self.rest(rva)
            .get(..len)
            .ok_or(UnwindError::BadUnwindInfo(self.image_base + u64::from(rva)))
    }

    fn u32_at(&self, rva: u32) -> Result<u32, UnwindError> {
        Ok(u32::from_le_bytes(self.bytes(rva, 4)?.try_into().unwrap()))
    }

    fn entry_at(&self, index: usize) -> Entry {
        let e = &self.pdata[12 * index..12 * index + 12];
        let word = |i: usize| u32::from_le_bytes(e[i..i + 4].try_into().unwrap());
        Entry {
            begin: word(0),
            end: word(4),
            info: word(8),
        }
    }

    /// The RUNTIME_FUNCTION containing `rva`, by binary search.
    fn lookup(&self, rva: u32) -> Option<Entry> {
        let (mut lo, mut hi) = (0, self.pdata.len() / 12);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.entry_at(mid).begin <= rva {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        let e = self.entry_at(lo.checked_sub(1)?);
        (rva < e.end).then_some(e)
    }

    fn info(&self, entry: Entry) -> Result<Info, UnwindError> {
        let h = self.bytes(entry.info, 4)?;
        let info = Info {
            version: h[0] & 7,
            flags: h[0] >> 3,
            prolog_size: h[1],
            count: h[2],
            frame_register: h[3] & 15,
            frame_offset: h[3] >> 4,
            codes: entry.info + 4,
        };
        if !(1..=2).contains(&info.version) {
            return Err(UnwindError::BadUnwindInfo(
                self.image_base + u64::from(entry.info),
            ));
        }
        self.bytes(info.codes, 2 * usize::from(info.count))?;
        Ok(info)
    }

    fn code(&self, info: &Info, i: usize) -> Result<(u8, u8, u8), UnwindError> {
        let s = self.bytes(info.codes + 2 * i as u32, 2)?;
        Ok((s[0], s[1] & 15, s[1] >> 4))
    }

    fn slot16(&self, info: &Info, i: usize) -> Result<u32, UnwindError> {
        let s = self.bytes(info.codes + 2 * i as u32, 2)?;
        Ok(u32::from(u16::from_le_bytes([s[0], s[1]])))
    }

    /// The primary (unchained) entry of `entry`.
    fn primary(&self, mut entry: Entry) -> Result<Entry, UnwindError> {
        for _ in 0..CHAIN_LIMIT {
            let info = self.info(entry)?;
            if info.flags & UNW_FLAG_CHAININFO == 0 {
                return Ok(entry);
            }
            let at = info.after_codes();
            entry = Entry {
                begin: self.u32_at(at)?,
                end: self.u32_at(at + 4)?,
                info: self.u32_at(at + 8)?,
            };
        }
        Err(UnwindError::BadUnwindInfo(
            self.image_base + u64::from(entry.info),
        ))
    }

    /// The rule at `address` (already adjusted for the frame kind; epilogues are detected
    /// only in the interrupted frame), written into `rule` (reset).
    pub(crate) fn rule(&self, address: u64, kind: FrameKind, rule: &mut Rule) -> Result<(), UnwindError> {
        let rva = address
            .checked_sub(self.image_base)
            .and_then(|r| u32::try_from(r).ok());
        if let Some((rva, entry)) = rva.and_then(|rva| self.lookup(rva).map(|e| (rva, e))) {
            let info = self.info(entry)?;
            let in_epilogue = kind == FrameKind::First && self.epilogue(rva, entry, &info, rule)?;
            if !in_epilogue && self.prologue(rva, entry, info, rule)? {
                return Ok(());
            }
        }
        // Return emulation, unless a MACHFRAME gave the caller's RIP and RSP.
        rule.pop_return(address)
    }

    /// Undoes the prologue codes of `entry` and its chain, leaving RSP at the return address;
    /// returns true when a UWOP_PUSH_MACHFRAME supplied the caller's RIP and RSP instead.
    fn prologue(
        &self,
        rva: u32,
        mut entry: Entry,
        mut info: Info,
        rule: &mut Rule,
    ) -> Result<bool, UnwindError> {
        let mut chained = false;
        for _ in 0..CHAIN_LIMIT {
            let at = self.image_base + u64::from(info.codes);
            let offset = rva.wrapping_sub(entry.begin);
            let frame_base = self.frame_base(&info, offset, chained, rule)?;
            let mut i = 0;
            while i < usize::from(info.count) {
                let (code_offset, op, op_info) = self.code(&info, i)?;
                let n = slots(op, op_info).ok_or(UnwindError::BadUnwindInfo(at))?;
                if op == 6 || (!chained && u32::from(code_offset) > offset) {
                    i += n;
                    continue;
                }
                let rsp = rule.get(Register::Rsp);
                match op {
                    0 => rule.pop(register(op_info), at)?,
                    1 => {
                        let size = if op_info == 0 {
                            self.slot16(&info, i + 1)? * 8
                        } else {
                            self.far(&info, i)?
                        };
                        rule.set(Register::Rsp, rsp.plus(i64::from(size), at)?);
                    }
                    2 => rule.set(Register::Rsp, rsp.plus(8 * i64::from(op_info) + 8, at)?),
                    3 => {
                        let fp = rule.get(register(info.frame_register));
                        rule.set(Register::Rsp, fp.plus(-16 * i64::from(info.frame_offset), at)?);
                    }
                    4 | 5 => {
                        let off = if op == 4 {
                            self.slot16(&info, i + 1)? * 8
                        } else {
                            self.far(&info, i)?
                        };
                        rule.set(register(op_info), frame_base.plus(i64::from(off), at)?.load(at)?);
                    }
                    8 | 9 => {
                        let off = if op == 8 {
                            self.slot16(&info, i + 1)? * 16
                        } else {
                            self.far(&info, i)?
                        };
                        rule.set_xmm(op_info, frame_base.plus(i64::from(off), at)?, at)?;
                    }
                    10 => {
                        // A hardware frame (RIP, CS, EFLAGS, RSP, SS, after an error code if
                        // OpInfo is 1) replaces the return address.
                        let frame = rsp.plus(if op_info == 1 { 8 } else { 0 }, at)?;
                        rule.machine_frame(frame, at)?;
                        return Ok(true);
                    }
                    _ => return Err(UnwindError::BadUnwindInfo(at)),
                }
                i += n;
            }
            if info.flags & UNW_FLAG_CHAININFO == 0 {
                return Ok(false);
            }
            let at = info.after_codes();
            entry = Entry {
                begin: self.u32_at(at)?,
                end: self.u32_at(at + 4)?,
                info: self.u32_at(at + 8)?,
            };
            info = self.info(entry)?;
            chained = true;
        }
        Err(UnwindError::BadUnwindInfo(
            self.image_base + u64::from(entry.info),
        ))
    }

    fn far(&self, info: &Info, i: usize) -> Result<u32, UnwindError> {
        Ok(self.slot16(info, i + 1)? | self.slot16(info, i + 2)? << 16)
    }

    /// The FrameBase (establisher frame) save offsets are relative to.
    fn frame_base(
        &self,
        info: &Info,
        offset: u32,
        chained: bool,
        rule: &Rule,
    ) -> Result<Source, UnwindError> {
        let rsp = rule.get(Register::Rsp);
        if info.frame_register == 0 {
            return Ok(rsp);
        }
        let at = self.image_base + u64::from(info.codes);
        let fp = rule
            .get(register(info.frame_register))
            .plus(-16 * i64::from(info.frame_offset), at)?;
        if chained || offset >= u32::from(info.prolog_size) {
            return Ok(fp);
        }
        let mut i = 0;
        while i < usize::from(info.count) {
            let (code_offset, op, op_info) = self.code(info, i)?;
            if op == 3 {
                return Ok(if u32::from(code_offset) <= offset { fp } else { rsp });
            }
            i += slots(op, op_info).ok_or(UnwindError::BadUnwindInfo(at))?;
        }
        Ok(rsp)
    }

    /// If the IP is in an epilogue, undoes the rest of it up to the return address and
    /// returns true.
    fn epilogue(&self, rva: u32, entry: Entry, info: &Info, rule: &mut Rule) -> Result<bool, UnwindError> {
        if info.version == 2 {
            return self.epilogue_v2(rva, entry, info, rule);
        }
        let rest = self.rest(rva);
        let code = &rest[..rest.len().min((entry.end.max(rva) - rva) as usize + 16)];
        let ip = self.image_base + u64::from(rva);
        let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
        let mut pos = 0usize;
        let mut i = decoder.decode();
        // The epilogue is undone on a copy, kept only if a terminator follows.
        let mut undone = *rule;
        // 1. add rsp, imm / lea rsp, [fp + disp] in the exact Windows encodings.
        let raw = |p: usize| code.get(p).copied().unwrap_or(0);
        let mut reset = None;
        if raw(0) == 0x48 && (raw(1) == 0x83 || raw(1) == 0x81) && raw(2) == 0xC4 {
            reset = Some(rule.get(Register::Rsp).plus(i.immediate(1) as i64, ip)?);
        } else if (raw(0) == 0x48 || raw(0) == 0x49) && raw(1) == 0x8D && matches!(i.code(), Code::Lea_r64_m)
        {
            let modrm = raw(2);
            let fp = ((raw(0) & 1) << 3) | (modrm & 7);
            let form = modrm & 0xF8;
            if fp == 0
                || fp != info.frame_register
                || !(form == 0x60 || form == 0xA0)
                || i.op0_register() != iced_x86::Register::RSP
            {
                return Ok(false);
            }
            reset = Some(
                rule.get(register(fp))
                    .plus(i.memory_displacement64() as i64, ip)?,
            );
        }
        if let Some(rsp) = reset {
            undone.set(Register::Rsp, rsp);
            pos += i.len();
            i = decoder.decode();
        }
        // 2. pops: 58+r, optionally after a REX prefix.
        loop {
            let b = raw(pos);
            let (rex, opcode) = if (0x40..=0x4F).contains(&b) {
                (b, raw(pos + 1))
            } else {
                (0, b)
            };
            if !(0x58..=0x5F).contains(&opcode) || i.code() != Code::Pop_r64 {
                break;
            }
            undone.pop(register(((rex & 1) << 3) | (opcode - 0x58)), ip)?;
            pos += i.len();
            i = decoder.decode();
        }
        // 3. an optional F2 prefix, 4. the terminator.
        let t = if raw(pos) == 0xF2 { pos + 1 } else { pos };
        let is_epilogue = match raw(t) {
            0xC3 | 0xC2 => true,
            0xF3 => raw(t + 1) == 0xC3,
            0xEB | 0xE9 => self.jump_leaves_function(i.near_branch_target(), entry)?,
            0xFF => raw(t + 1) == 0x25,
            0x48..=0x4F => raw(t + 1) == 0xFF && raw(t + 2) & 0x38 == 0x20,
            _ => false,
        };
        if is_epilogue {
            *rule = undone;
        }
        Ok(is_epilogue)
    }

    /// A relative jump ends an epilogue when it leaves the logical function, or targets the
    /// primary function's start (a recursive tail call).
    fn jump_leaves_function(&self, target: u64, entry: Entry) -> Result<bool, UnwindError> {
        let primary = self.primary(entry)?;
        let Some(target_rva) = target
            .checked_sub(self.image_base)
            .and_then(|r| u32::try_from(r).ok())
        else {
            return Ok(true);
        };
        if target_rva == primary.begin {
            return Ok(true);
        }
        if (entry.begin..entry.end).contains(&target_rva) {
            return Ok(false);
        }
        match self.lookup(target_rva) {
            Some(other) => Ok(self.primary(other)? != primary),
            None => Ok(true),
        }
    }

    /// Version 2: the UWOP_EPILOG descriptors say whether the IP is in an epilogue; the
    /// prologue's PUSH_NONVOL codes say which pops remain.
    fn epilogue_v2(&self, rva: u32, entry: Entry, info: &Info, rule: &mut Rule) -> Result<bool, UnwindError> {
        if info.count == 0 || self.code(info, 0)?.1 != 6 {
            return Ok(false);
        }
        let (size, _, flags) = self.code(info, 0)?;
        let size = u32::from(size);
        let holds = |start: u32| rva >= start && rva - start < size;
        // The first descriptor may describe an epilogue at the very end; the others give
        // their distance from the end (0 ends the list).
        let mut start = (flags & 1 != 0)
            .then(|| entry.end.wrapping_sub(size))
            .filter(|&s| holds(s));
        let mut i = 1;
        while start.is_none() && i < usize::from(info.count) {
            let (low, op, high) = self.code(info, i)?;
            if op != 6 {
                break;
            }
            let distance = u32::from(low) | u32::from(high) << 8;
            start = (distance != 0)
                .then(|| entry.end.wrapping_sub(distance))
                .filter(|&s| holds(s));
            i += 1;
        }
        let Some(start) = start else {
            return Ok(false);
        };
        // Pops in epilogue order: the primary entry's PUSH_NONVOL codes in array order.
        let at = self.image_base + u64::from(rva);
        let primary = self.info(self.primary(entry)?)?;
        let mut done = rva - start;
        let mut i = 0;
        while i < usize::from(primary.count) {
            let (_, op, op_info) = self.code(&primary, i)?;
            if op == 0 {
                let len = if op_info < 8 { 1 } else { 2 };
                if done >= len {
                    done -= len;
                } else {
                    done = 0;
                    rule.pop(register(op_info), at)?;
                }
            }
            i += slots(op, op_info).ok_or(UnwindError::BadUnwindInfo(
                self.image_base + u64::from(info.codes),
            ))?;
        }
        Ok(true)
    }
}
