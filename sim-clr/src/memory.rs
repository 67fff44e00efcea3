//! The simulated address space: sparse mapped regions holding 64-bit words.
//!
//! Thread stacks are the regions that matter to a walk: a read outside every mapped region is
//! an access violation, and a deleted thread's stack is unmapped.

use std::collections::BTreeMap;

/// A mapped region `[start, end)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// First mapped byte.
    pub start: u64,
    /// One past the last mapped byte.
    pub end: u64,
}

impl Region {
    /// True when `[addr, addr + len)` lies inside the region.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        addr >= self.start && addr.checked_add(len).is_some_and(|e| e <= self.end)
    }
}

/// A read of unmapped memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessViolation {
    /// The faulting address.
    pub address: u64,
}

/// Sparse memory: mapped regions plus the words written into them (unwritten words read 0).
#[derive(Clone, Debug, Default)]
pub struct AddressSpace {
    regions: Vec<Region>,
    words: BTreeMap<u64, u64>,
}

impl AddressSpace {
    /// Maps `[start, end)`.
    pub fn map(&mut self, start: u64, end: u64) {
        self.regions.push(Region { start, end });
    }

    /// Unmaps the region starting at `start` and forgets its contents.
    pub fn unmap(&mut self, start: u64) {
        if let Some(i) = self.regions.iter().position(|r| r.start == start) {
            let region = self.regions.remove(i);
            self.clear(region.start, region.end);
        }
    }

    /// Zeroes `[start, end)`.
    pub fn clear(&mut self, start: u64, end: u64) {
        let keys: Vec<u64> = self.words.range(start..end).map(|(k, _)| *k).collect();
        for k in keys {
            self.words.remove(&k);
        }
    }

    /// True when `[addr, addr + len)` is mapped.
    pub fn is_mapped(&self, addr: u64, len: u64) -> bool {
        self.regions.iter().any(|r| r.contains(addr, len))
    }

    /// Writes an 8-byte-aligned word. Writes outside mapped memory are ignored (the simulator
    /// only writes where it mapped).
    pub fn write_u64(&mut self, addr: u64, value: u64) {
        debug_assert_eq!(addr % 8, 0);
        if self.is_mapped(addr, 8) {
            self.words.insert(addr, value);
        }
    }

    /// Reads 8 bytes at any address.
    pub fn read_u64(&self, addr: u64) -> Result<u64, AccessViolation> {
        if !self.is_mapped(addr, 8) {
            return Err(AccessViolation { address: addr });
        }
        let word = |a: u64| self.words.get(&a).copied().unwrap_or(0);
        let shift = (addr % 8) * 8;
        let low = addr - addr % 8;
        if shift == 0 {
            return Ok(word(low));
        }
        Ok((word(low) >> shift) | (word(low + 8) << (64 - shift)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fault_outside_mapped_regions() {
        let mut m = AddressSpace::default();
        m.map(0x1000, 0x2000);
        m.write_u64(0x1008, 0x1122_3344_5566_7788);
        assert_eq!(m.read_u64(0x1008), Ok(0x1122_3344_5566_7788));
        assert_eq!(m.read_u64(0x1010), Ok(0));
        assert_eq!(m.read_u64(0x1009), Ok(0x0011_2233_4455_6677));
        assert_eq!(m.read_u64(0x1ffc), Err(AccessViolation { address: 0x1ffc }));
        assert_eq!(m.read_u64(0x0), Err(AccessViolation { address: 0 }));
        m.unmap(0x1000);
        assert!(m.read_u64(0x1008).is_err());
    }
}
