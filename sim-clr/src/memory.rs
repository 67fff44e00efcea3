//! The simulated address space: sparse mapped regions holding 64-bit words.
//!
//! Thread stacks are the regions that matter to a walk: a read outside every mapped region is
//! an access violation, and a deleted thread's stack is unmapped. A region can be shared
//! ([`SharedRegion`]): a walk reads its target's stack through one with the runtime's lock
//! released, while the address space stays writable (a write copies a shared region first).

use std::sync::Arc;

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

/// Words per page of a region's contents (4 KiB).
const PAGE_WORDS: usize = 512;

/// A mapped region and its contents, in pages allocated on first write. The pages are
/// shared by clones of the region, and copied by a write to shared ones.
#[derive(Clone, Debug)]
struct Mapped {
    region: Region,
    pages: Arc<[Option<Box<[u64; PAGE_WORDS]>>]>,
    /// The lowest page written since the region was mapped (the page count if none): every
    /// page below it reads 0, so a clear (a stack re-laid from its limit) starts there.
    written_from: usize,
}

impl Region {
    /// The (page, slot) of the 8-aligned word at `addr` (inside the region).
    fn slot(&self, addr: u64) -> (usize, usize) {
        let word = ((addr - self.start) / 8) as usize;
        (word / PAGE_WORDS, word % PAGE_WORDS)
    }
}

impl Mapped {
    /// The written page holding the word at `addr` (inside the region), when `addr` is
    /// aligned.
    fn page(&self, addr: u64) -> Option<Page<'_>> {
        if !addr.is_multiple_of(8) {
            return None;
        }
        let (page, slot) = self.region.slot(addr);
        let data = self.pages[page].as_deref()?;
        let start = addr - 8 * slot as u64;
        let words = ((self.region.end - start) / 8).min(PAGE_WORDS as u64);
        Some(Page {
            start,
            data: &data[..words as usize],
        })
    }

    fn word(&self, addr: u64) -> u64 {
        let (page, slot) = self.region.slot(addr);
        self.pages
            .get(page)
            .and_then(|p| p.as_ref())
            .map_or(0, |p| p[slot])
    }

    /// The 8 bytes at `addr` (inside the region), aligned or not.
    fn read_u64(&self, addr: u64) -> u64 {
        let shift = (addr % 8) * 8;
        let low = addr - addr % 8;
        if shift == 0 {
            return self.word(low);
        }
        // An unaligned read inside the region: its two words (the second may be past the
        // region's last full word only if the region is not 8-aligned, which `map` forbids).
        (self.word(low) >> shift) | (self.word(low + 8) << (64 - shift))
    }
}

/// Sparse memory: mapped regions (sorted by address) whose words are written in pages
/// allocated on first write; unwritten words read 0. A read costs a binary search over the
/// regions and an index; a [`Reader`] skips the search while it stays in one region.
///
/// Regions are shared on clone: a write to a region that is shared (with a clone of the
/// address space or a [`SharedRegion`]) copies that region first.
#[derive(Clone, Debug, Default)]
pub struct AddressSpace {
    regions: Vec<Mapped>,
}

impl AddressSpace {
    /// Maps `[start, end)` (8-aligned; it must not overlap a mapped region).
    pub fn map(&mut self, start: u64, end: u64) {
        let pages = (end.saturating_sub(start) / 8).div_ceil(PAGE_WORDS as u64) as usize;
        let at = self.regions.partition_point(|m| m.region.start < start);
        self.regions.insert(
            at,
            Mapped {
                region: Region { start, end },
                pages: vec![None; pages].into(),
                written_from: pages,
            },
        );
    }

    /// Unmaps the region starting at `start` and forgets its contents.
    pub fn unmap(&mut self, start: u64) {
        if let Some(i) = self.regions.iter().position(|m| m.region.start == start) {
            self.regions.remove(i);
        }
    }

    /// Zeroes `[start, end)` (8-aligned): whole pages are dropped.
    pub fn clear(&mut self, start: u64, end: u64) {
        // The regions are sorted and disjoint: only those from the one holding `start` on,
        // up to `end`, can overlap (a process has a stack region per thread).
        let first = self.regions.partition_point(|m| m.region.end <= start);
        for m in self.regions[first..]
            .iter_mut()
            .take_while(|m| m.region.start < end)
        {
            let written = m
                .region
                .start
                .saturating_add(8 * (m.written_from * PAGE_WORDS) as u64);
            let (from, to) = (start.max(written), end.min(m.region.end));
            let mut addr = from.next_multiple_of(8);
            if addr >= to {
                continue;
            }
            let pages = Arc::make_mut(&mut m.pages);
            while addr < to {
                let (page, slot) = m.region.slot(addr);
                let page_end = addr + 8 * (PAGE_WORDS - slot) as u64;
                if slot == 0 && page_end <= to {
                    pages[page] = None;
                } else if let Some(p) = pages[page].as_mut() {
                    let last = ((to.min(page_end) - addr) / 8) as usize;
                    p[slot..slot + last].fill(0);
                }
                addr = page_end;
            }
        }
    }

    /// The index of the region containing `[addr, addr + len)`.
    fn find(&self, addr: u64, len: u64) -> Option<usize> {
        let i = self
            .regions
            .partition_point(|m| m.region.start <= addr)
            .checked_sub(1)?;
        self.regions[i].region.contains(addr, len).then_some(i)
    }

    /// The region containing `[addr, addr + len)`.
    fn region(&self, addr: u64, len: u64) -> Option<&Mapped> {
        self.find(addr, len).map(|i| &self.regions[i])
    }

    /// True when `[addr, addr + len)` is mapped.
    pub fn is_mapped(&self, addr: u64, len: u64) -> bool {
        self.region(addr, len).is_some()
    }

    /// Writes an 8-byte-aligned word. Writes outside mapped memory are ignored (the simulator
    /// only writes where it mapped).
    pub fn write_u64(&mut self, addr: u64, value: u64) {
        debug_assert_eq!(addr % 8, 0);
        let i = match self.find(addr, 8) {
            Some(i) if addr.is_multiple_of(8) => i,
            _ => return,
        };
        let m = &mut self.regions[i];
        let (page, slot) = m.region.slot(addr);
        m.written_from = m.written_from.min(page);
        Arc::make_mut(&mut m.pages)[page].get_or_insert_with(|| Box::new([0; PAGE_WORDS]))[slot] = value;
    }

    /// Reads 8 bytes at any address.
    pub fn read_u64(&self, addr: u64) -> Result<u64, AccessViolation> {
        let m = self.region(addr, 8).ok_or(AccessViolation { address: addr })?;
        Ok(m.read_u64(addr))
    }

    /// A reader of this memory for a run of reads that mostly stay in one page, such as a walk
    /// of one thread's stack.
    pub fn reader(&self) -> Reader<'_> {
        Reader {
            space: self,
            page: Page::default(),
            region: 0,
        }
    }

    /// A read outside a reader's page: the value, and the page it is in (with its region's
    /// index) when that page holds written words and the read is aligned (the reader keeps it
    /// for the next reads).
    #[inline(never)]
    fn read_paged(&self, addr: u64) -> Result<(u64, Option<(Page<'_>, usize)>), AccessViolation> {
        let i = self.find(addr, 8).ok_or(AccessViolation { address: addr })?;
        let m = &self.regions[i];
        match m.page(addr) {
            Some(page) => Ok((page.data[page.word(addr)], Some((page, i)))),
            None => Ok((m.read_u64(addr), None)),
        }
    }
}

/// A mapped region shared out of an [`AddressSpace`] ([`Reader::share`]): its words as they
/// were when it was shared, read without the address space.
#[derive(Clone, Debug)]
pub struct SharedRegion(Mapped);

impl SharedRegion {
    /// The written page holding the word at `addr`; `None` when `addr` is unaligned, outside
    /// the region, or in a page never written.
    pub fn page(&self, addr: u64) -> Option<Page<'_>> {
        let m = &self.0;
        m.region.contains(addr, 8).then(|| m.page(addr)).flatten()
    }
}

/// A written page of a mapped region, as a reader keeps it: the words it reads without a
/// search.
#[derive(Clone, Copy, Debug)]
pub struct Page<'a> {
    /// The page's address (8-aligned).
    start: u64,
    /// Its mapped words.
    data: &'a [u64],
}

/// No page: it holds no word.
impl Default for Page<'_> {
    fn default() -> Self {
        Page {
            start: u64::MAX,
            data: &[],
        }
    }
}

impl Page<'_> {
    /// The index in the page of the word at `addr`; past any page's end when `addr` is
    /// before the page or unaligned (its low bits rotate to the top), so that one bounds
    /// check answers all three.
    #[inline]
    fn word(&self, addr: u64) -> usize {
        let word = addr.wrapping_sub(self.start).rotate_right(3);
        usize::try_from(word).unwrap_or(usize::MAX)
    }

    /// The words at `addr` and `addr + 8` when both lie, aligned, in the page, else `None`:
    /// a frame-pointer link (the caller's RBP, then the return address) read with one check.
    #[inline]
    pub fn pair(&self, addr: u64) -> Option<[u64; 2]> {
        match self.data.get(self.word(addr)..) {
            Some(&[low, high, ..]) => Some([low, high]),
            _ => None,
        }
    }

    /// The addresses the page covers: `[start, end)`.
    #[inline]
    pub fn range(&self) -> (u64, u64) {
        (self.start, self.start.wrapping_add(8 * self.data.len() as u64))
    }
}

/// Reads [`AddressSpace`] memory, remembering the page of its last read: an aligned read in
/// the same page costs a subtraction, a compare and a load; one elsewhere a search of the
/// regions, as [`AddressSpace::read_u64`].
///
/// The reader is a few words passed by value to nothing: in a loop its page stays in
/// registers.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    space: &'a AddressSpace,
    page: Page<'a>,
    /// The index of the page's region (when there is a page).
    region: usize,
}

impl<'a> Reader<'a> {
    /// The word at `addr` when it is aligned and in the page of the last read, else `None`:
    /// a read that never faults and never searches.
    #[inline]
    pub fn cached(&self, addr: u64) -> Option<u64> {
        self.page.data.get(self.page.word(addr)).copied()
    }

    /// The page of the last read (empty before the first read).
    pub fn page(&self) -> Page<'a> {
        self.page
    }

    /// The region of the page of the last read, shared ([`SharedRegion`]): it reads as the
    /// region reads now, whatever is written to the address space later. `None` before the
    /// first read.
    pub fn share(&self) -> Option<SharedRegion> {
        let shared = || SharedRegion(self.space.regions[self.region].clone());
        (!self.page.data.is_empty()).then(shared)
    }

    /// Makes the page holding `addr` the reader's page, as a read there would, when it is
    /// mapped and written; reads nothing and never faults. A walk about to read around
    /// `addr` finds its first words without a search.
    pub fn prime(&mut self, addr: u64) {
        if let Ok((_, Some((page, region)))) = self.space.read_paged(addr & !7) {
            (self.page, self.region) = (page, region);
        }
    }

    /// Reads 8 bytes at any address, as [`AddressSpace::read_u64`] does.
    #[inline]
    pub fn read_u64(&mut self, addr: u64) -> Result<u64, AccessViolation> {
        if let Some(value) = self.cached(addr) {
            return Ok(value);
        }
        let (value, next) = self.space.read_paged(addr)?;
        if let Some((page, region)) = next {
            (self.page, self.region) = (page, region);
        }
        Ok(value)
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

    #[test]
    fn a_reader_reads_what_the_address_space_reads() {
        let mut m = AddressSpace::default();
        m.map(0x1000, 0x3000);
        // A region ending inside its last page, followed closely by another.
        m.map(0x8000, 0x9800);
        m.map(0x9a00, 0xa000);
        for a in (0x1000..0x2000)
            .chain(0x8000..0x9800)
            .chain(0x9a00..0xa000)
            .step_by(8)
        {
            m.write_u64(a, a.rotate_left(17));
        }
        let mut reader = m.reader();
        // Hops between the regions, into gaps, unwritten pages, and across word, page and
        // region ends.
        let probes: Vec<u64> = (0x0ff0..0x3010).chain(0x7ff0..0xa010).step_by(4).collect();
        for &a in probes.iter().chain(probes.iter().rev()) {
            // What the page answers without a search is what a search reads.
            if let Some(word) = reader.cached(a) {
                assert_eq!(Ok(word), m.read_u64(a), "at {a:#x}");
            }
            if let Some([low, high]) = reader.page().pair(a) {
                assert_eq!(
                    (Ok(low), Ok(high)),
                    (m.read_u64(a), m.read_u64(a + 8)),
                    "at {a:#x}"
                );
            }
            assert_eq!(reader.read_u64(a), m.read_u64(a), "at {a:#x}");
        }
    }

    #[test]
    fn a_pair_is_read_without_a_search_only_inside_the_current_page() {
        let mut m = AddressSpace::default();
        m.map(0x1000, 0x3000);
        for a in (0x1000..0x3000).step_by(8) {
            m.write_u64(a, a);
        }
        let mut reader = m.reader();
        assert_eq!(reader.page().pair(0x1000), None, "a new reader has no page");
        reader.prime(0x5000);
        assert_eq!(
            reader.page().pair(0x1000),
            None,
            "an unmapped address primes nothing"
        );
        reader.prime(0x1803);
        assert_eq!(reader.page().pair(0x1000), Some([0x1000, 0x1008]));
        let mut reader = m.reader();
        assert_eq!(reader.read_u64(0x1100), Ok(0x1100));
        assert_eq!(reader.page().pair(0x1000), Some([0x1000, 0x1008]));
        assert_eq!(reader.page().pair(0x1ff0), Some([0x1ff0, 0x1ff8]));
        // The second word is in the next page, the first before the page, or unaligned.
        for a in [0x1ff8, 0xff8, 0x1004, 0x2000, u64::MAX] {
            assert_eq!(reader.page().pair(a), None, "at {a:#x}");
        }
    }

    #[test]
    fn a_shared_region_reads_as_it_was_when_shared() {
        let mut m = AddressSpace::default();
        m.map(0x1000, 0x3000);
        m.map(0x4000, 0x5000);
        m.write_u64(0x1ff0, 1);
        m.write_u64(0x1ff8, 2);
        let mut reader = m.reader();
        assert!(reader.share().is_none(), "nothing read");
        reader.prime(0x1ff0);
        let shared = reader.share().expect("mapped");
        // Writes after sharing, to the region and to another, and unmapping it.
        m.write_u64(0x1ff0, 3);
        m.write_u64(0x2000, 4);
        m.write_u64(0x4000, 5);
        let page = shared.page(0x1ff0).expect("written");
        assert_eq!(page.pair(0x1ff0), Some([1, 2]));
        assert_eq!(page.range(), (0x1000, 0x2000));
        assert_eq!(
            shared.page(0x2000).map(|p| p.range()),
            None,
            "written after sharing"
        );
        assert_eq!(m.read_u64(0x1ff0), Ok(3));
        assert_eq!(m.read_u64(0x2000), Ok(4));
        m.unmap(0x1000);
        assert_eq!(shared.page(0x1ff8).and_then(|p| p.pair(0x1ff0)), Some([1, 2]));
        for a in [0x1ff4, 0xff8, 0x3000, 0x4000] {
            assert!(shared.page(a).is_none(), "at {a:#x}");
        }
    }

    #[test]
    fn regions_are_found_in_any_order_and_clearing_zeroes_exactly_its_range() {
        let mut m = AddressSpace::default();
        m.map(0x30_0000, 0x40_0000);
        m.map(0x10_0000, 0x20_0000);
        for a in (0x10_0000..0x10_3000)
            .step_by(8)
            .chain((0x30_0000..0x30_3000).step_by(8))
        {
            m.write_u64(a, a);
        }
        m.write_u64(0x25_0000, 1); // unmapped: ignored
        assert!(m.read_u64(0x25_0000).is_err());
        m.clear(0x10_0ff8, 0x10_2010);
        assert_eq!(m.read_u64(0x10_0ff0), Ok(0x10_0ff0));
        assert_eq!(m.read_u64(0x10_0ff8), Ok(0));
        assert_eq!(m.read_u64(0x10_1800), Ok(0), "a whole page dropped");
        assert_eq!(m.read_u64(0x10_2008), Ok(0));
        assert_eq!(m.read_u64(0x10_2010), Ok(0x10_2010));
        assert_eq!(m.read_u64(0x30_2ff8), Ok(0x30_2ff8), "the other region untouched");
        assert_eq!(
            m.read_u64(0x1f_fff4),
            Ok(0),
            "an unaligned read at the end of a region"
        );
        assert!(m.read_u64(0x1f_fffc).is_err(), "past the end");
    }

    #[test]
    fn a_clear_from_a_stacks_limit_zeroes_the_words_written_near_its_base() {
        let mut m = AddressSpace::default();
        m.map(0x10_0000, 0x20_0000);
        m.write_u64(0x1f_f000, 7);
        m.write_u64(0x1f_fff8, 8);
        m.clear(0x10_0000, 0x1f_fff8);
        assert_eq!(m.read_u64(0x1f_f000), Ok(0));
        assert_eq!(m.read_u64(0x1f_fff8), Ok(8));
        m.write_u64(0x18_0000, 9); // below every word written before
        m.clear(0x10_0000, 0x18_0008);
        assert_eq!(m.read_u64(0x18_0000), Ok(0));
        assert_eq!(m.read_u64(0x1f_fff8), Ok(8));
    }
}
