//! Reading `.eh_frame` entries on the hot path: a bounds-checked cursor, and where a CIE's or
//! an FDE's call-frame instructions are. gimli parses and checks every CIE when a module is
//! built, and builds the FDE index; an FDE's header is read here, on a miss, without parsing
//! its CIE again (the module keeps what the CIE says).

use super::super::UnwindError;
use gimli::DwEhPe;

/// A position in `.eh_frame`, reading up to `end`. Every read is checked; a failed read is
/// `None`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cursor<'a> {
    section: &'a [u8],
    /// Where the section is mapped (for PC-relative pointers).
    address: u64,
    pos: usize,
    end: usize,
}

impl<'a> Cursor<'a> {
    /// The section from `pos` to its end.
    pub(crate) fn new(section: &'a [u8], address: u64, pos: usize) -> Cursor<'a> {
        Cursor {
            section,
            address,
            pos,
            end: section.len(),
        }
    }

    /// The offset in the section of the next byte.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// True when nothing is left before `end`.
    pub(crate) fn is_empty(&self) -> bool {
        self.pos >= self.end
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.end)?;
        let bytes = &self.section[self.pos..end];
        self.pos = end;
        Some(bytes)
    }

    /// One byte.
    #[inline]
    pub(crate) fn u8(&mut self) -> Option<u8> {
        if self.pos >= self.end {
            return None;
        }
        let b = *self.section.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }

    /// A little-endian u16.
    pub(crate) fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.take(2)?.try_into().ok()?))
    }

    /// A little-endian u32.
    pub(crate) fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.take(4)?.try_into().ok()?))
    }

    /// A little-endian u64.
    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }

    /// An unsigned LEB128 (at most 64 bits).
    #[inline]
    pub(crate) fn uleb(&mut self) -> Option<u64> {
        // Nearly every operand fits one byte.
        match self.section.get(self.pos) {
            Some(&b) if b < 0x80 && self.pos < self.end => {
                self.pos += 1;
                Some(u64::from(b))
            }
            _ => self.uleb_long(),
        }
    }

    #[inline(never)]
    fn uleb_long(&mut self) -> Option<u64> {
        let (mut value, mut shift) = (0u64, 0u32);
        loop {
            let b = self.u8()?;
            if shift >= 64 || (shift == 63 && b & 0x7e != 0) {
                return None;
            }
            value |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(value);
            }
            shift += 7;
        }
    }

    /// A signed LEB128 (at most 64 bits).
    #[inline]
    pub(crate) fn sleb(&mut self) -> Option<i64> {
        let (mut value, mut shift) = (0i64, 0u32);
        loop {
            let b = self.u8()?;
            if shift >= 64 {
                return None;
            }
            value |= i64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    value |= -1 << shift;
                }
                return Some(value);
            }
        }
    }

    /// A ULEB128 register number.
    #[inline]
    pub(crate) fn register(&mut self) -> Option<u16> {
        u16::try_from(self.uleb()?).ok()
    }

    /// Skips `n` bytes.
    pub(crate) fn skip(&mut self, n: u64) -> Option<()> {
        self.take(usize::try_from(n).ok()?).map(|_| ())
    }

    /// A pointer in `encoding` (`DW_EH_PE_*`); `function` is the base of `funcrel`.
    /// Text- and data-relative, aligned and indirect pointers do not occur in x86-64
    /// `.eh_frame` FDEs: `None`.
    pub(crate) fn pointer(&mut self, encoding: DwEhPe, function: u64) -> Option<u64> {
        let here = self.address.wrapping_add(self.pos as u64);
        let value = match encoding.format() {
            gimli::DW_EH_PE_absptr | gimli::DW_EH_PE_udata8 | gimli::DW_EH_PE_sdata8 => self.u64()?,
            gimli::DW_EH_PE_uleb128 => self.uleb()?,
            gimli::DW_EH_PE_udata2 => u64::from(self.u16()?),
            gimli::DW_EH_PE_udata4 => u64::from(self.u32()?),
            gimli::DW_EH_PE_sleb128 => self.sleb()? as u64,
            gimli::DW_EH_PE_sdata2 => i64::from(self.u16()? as i16) as u64,
            gimli::DW_EH_PE_sdata4 => i64::from(self.u32()? as i32) as u64,
            _ => return None,
        };
        match encoding.application() {
            gimli::DW_EH_PE_absptr => Some(value),
            gimli::DW_EH_PE_pcrel => Some(value.wrapping_add(here)),
            gimli::DW_EH_PE_funcrel => Some(value.wrapping_add(function)),
            _ => None,
        }
    }

    /// Reads an entry's length and identifier field: the cursor ends at the entry's end, and
    /// the identifier (the CIE pointer, or 0 in a CIE) is returned with its own offset.
    fn entry(&mut self) -> Option<(u64, usize)> {
        let (length, wide) = match self.u32()? {
            0xffff_ffff => (self.u64()?, true),
            0 => return None, // the terminator
            length => (u64::from(length), false),
        };
        let end = usize::try_from(length)
            .ok()
            .and_then(|l| self.pos.checked_add(l))?;
        if end > self.end {
            return None;
        }
        self.end = end;
        let id_offset = self.pos;
        let id = if wide { self.u64()? } else { u64::from(self.u32()?) };
        Some((id, id_offset))
    }
}

/// What reading an FDE needs from its CIE.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CieFormat {
    /// The pointer encoding of the FDE's addresses (`DW_EH_PE_absptr` without an `R`).
    pub(crate) encoding: DwEhPe,
    /// The CIE has a `z` augmentation: FDEs carry augmentation data, skipped here.
    pub(crate) augmented: bool,
    /// The CIE has an `S` augmentation: its FDEs describe signal frames, whose caller was
    /// interrupted (its IP is not a return address).
    pub(crate) signal: bool,
}

/// The instructions of the CIE at `offset` (which gimli has parsed): the cursor after its
/// header, up to its end.
pub(crate) fn cie_instructions(section: &[u8], address: u64, offset: usize) -> Option<Cursor<'_>> {
    let mut c = Cursor::new(section, address, offset);
    let (id, _) = c.entry()?;
    if id != 0 {
        return None;
    }
    let version = c.u8()?;
    let first = c.u8()?;
    if first != 0 {
        while c.u8()? != 0 {} // the rest of the augmentation string
    }
    let augmented = first == b'z';
    if version >= 4 {
        c.skip(2)?; // address size, segment selector size
    }
    c.uleb()?; // code alignment
    c.sleb()?; // data alignment
    if version == 1 {
        c.u8()?;
    } else {
        c.uleb()?;
    }
    if augmented {
        let length = c.uleb()?;
        c.skip(length)?;
    }
    Some(c)
}

/// An FDE's header and instructions.
pub(crate) struct Fde<'a> {
    /// The first address it covers.
    pub(crate) start: u64,
    /// One past the last.
    pub(crate) end: u64,
    /// Its instructions.
    pub(crate) instructions: Cursor<'a>,
}

/// Reads the FDE at `offset` in `section` (mapped at `address`); `cie_format` gives what its
/// CIE says, by the CIE's offset. Errors name `at`.
pub(crate) fn fde(
    section: &[u8],
    address: u64,
    offset: usize,
    at: u64,
    cie_format: impl FnOnce(usize) -> Option<CieFormat>,
) -> Result<Fde<'_>, UnwindError> {
    let read = || {
        let mut c = Cursor::new(section, address, offset);
        let (id, id_offset) = c.entry()?;
        // In .eh_frame an FDE's CIE pointer counts back from its own position.
        let cie = id_offset.checked_sub(usize::try_from(id).ok().filter(|&id| id != 0)?)?;
        let format = cie_format(cie)?;
        let start = c.pointer(format.encoding, 0)?;
        let length = c.pointer(format.encoding.format(), 0)?;
        if format.augmented {
            let skip = c.uleb()?;
            c.skip(skip)?;
        }
        Some(Fde {
            start,
            end: start.checked_add(length)?,
            instructions: c,
        })
    };
    read().ok_or(UnwindError::BadUnwindInfo(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(bytes: &[u8]) -> Cursor<'_> {
        Cursor::new(bytes, 0x1000, 0)
    }

    #[test]
    fn leb128_values_and_malformed_ones() {
        assert_eq!(cursor(&[0xe5, 0x8e, 0x26]).uleb(), Some(624_485));
        assert_eq!(cursor(&[0xc0, 0xbb, 0x78]).sleb(), Some(-123_456));
        assert_eq!(cursor(&[0x7f]).sleb(), Some(-1));
        assert_eq!(cursor(&[0x80, 0x80]).uleb(), None, "truncated");
        assert_eq!(cursor(&[0xff; 11]).uleb(), None, "longer than 64 bits");
        let mut max = [0xff; 10];
        max[9] = 0x01;
        assert_eq!(cursor(&max).uleb(), Some(u64::MAX));
        assert_eq!(cursor(&[0x80, 0x80, 0x04]).register(), None, "beyond u16");
    }

    #[test]
    fn pointers_in_each_encoding() {
        let bytes = [0xf0, 0xff, 0xff, 0xff, 0x34, 0x12];
        let pcrel = gimli::DwEhPe(gimli::DW_EH_PE_pcrel.0 | gimli::DW_EH_PE_sdata4.0);
        assert_eq!(cursor(&bytes).pointer(pcrel, 0), Some(0x1000 - 0x10));
        let funcrel = gimli::DwEhPe(gimli::DW_EH_PE_funcrel.0 | gimli::DW_EH_PE_udata2.0);
        assert_eq!(cursor(&bytes[4..]).pointer(funcrel, 0x40_0000), Some(0x40_1234));
        let datarel = gimli::DwEhPe(gimli::DW_EH_PE_datarel.0 | gimli::DW_EH_PE_udata4.0);
        assert_eq!(cursor(&bytes).pointer(datarel, 0), None);
        assert_eq!(
            cursor(&bytes[..3]).pointer(gimli::DW_EH_PE_udata4, 0),
            None,
            "truncated"
        );
    }

    #[test]
    fn entries_past_the_section_or_terminators_are_not_fdes() {
        let format = |_| {
            Some(CieFormat {
                encoding: gimli::DW_EH_PE_absptr,
                augmented: false,
                signal: false,
            })
        };
        assert!(fde(&[0, 0, 0, 0], 0, 0, 9, format).is_err());
        assert!(fde(&[0xff, 0, 0, 0, 1, 2], 0, 0, 9, format).is_err());
        assert!(fde(&[8, 0, 0, 0], 0, 9, 9, format).is_err());
        assert!(
            cie_instructions(&[4, 0, 0, 0, 1, 0, 0, 0], 0, 0).is_none(),
            "not a CIE id"
        );
    }
}
