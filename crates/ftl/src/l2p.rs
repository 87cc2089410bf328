//! The logical→physical map (L2P): page-level and sparse.
//!
//! The logical space is thin-provisioned (it may be far larger than the
//! media), so the map is a one-level radix: a top-level vector with one slot
//! per [`LEAF_ENTRIES`] logical blocks, and a leaf allocated only when
//! something in its range is mapped and freed when its last entry is
//! unmapped. An unused range costs one top-level slot (18 bytes per 1024
//! blocks).
//!
//! Leaf entries are bit-packed ([`EntryFormat`]): a physical address of just
//! enough bits for the device, and, when tags are in band, the block's data
//! CRC (nothing on the media carries it, and every read checks it). A 1 Mi
//! block device thus costs 2.6 bytes per mapped block with OOB tags and 6.6
//! in band, where a plain `u32` + `u32` entry would cost 4 and 8.

use crate::addr::{Lba, Ppa};

/// Entries per leaf.
pub const LEAF_ENTRIES: usize = 1024;

/// `LEAF_ENTRIES` as a block count, for LBA arithmetic.
const LEAF_BLOCKS: u64 = LEAF_ENTRIES as u64;

/// An unpacked leaf entry that maps nothing (the same bits as [`Ppa::NONE`]).
pub const UNMAPPED: u32 = u32::MAX;

/// One leaf, unpacked: the physical addresses of `LEAF_ENTRIES` consecutive
/// LBAs, as checkpoints store them.
pub type Leaf = [u32; LEAF_ENTRIES];

const _: () = assert!(UNMAPPED == Ppa::NONE.0);
const _: () = assert!(LEAF_ENTRIES <= u16::MAX as usize, "per-leaf counts are u16");
const _: () = assert!(
    LEAF_ENTRIES.is_multiple_of(64),
    "a leaf of any width is whole words"
);

/// Why a set of leaves (e.g. from a checkpoint) cannot form a map.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum L2pError {
    #[error("leaf {leaf} is past the last leaf ({leaf_count} leaves for {logical_blocks} blocks)")]
    LeafOutOfRange {
        leaf: u32,
        leaf_count: u32,
        logical_blocks: u64,
    },
    #[error("leaf {leaf} appears twice")]
    DuplicateLeaf { leaf: u32 },
    #[error("LBA {lba} is mapped but the logical space ends at {logical_blocks} blocks")]
    MappedPastEnd { lba: Lba, logical_blocks: u64 },
    #[error("LBA {lba} maps to physical block {ppa}, past the device")]
    PpaPastDevice { lba: Lba, ppa: u32 },
    #[error("{got} data CRCs for {mapped} mapped blocks")]
    CrcCount { got: usize, mapped: u64 },
}

/// How a leaf entry is packed: the physical address in the low `ppa_bits`
/// bits (all ones: unmapped), then the 32-bit data CRC when kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryFormat {
    ppa_bits: u32,
    keeps_crc: bool,
    /// Addresses at or above this are past the device.
    physical_blocks: u32,
    /// Bits per entry (1..=64), their mask, and the all-ones address
    /// (unmapped): derived from the fields above once, for the lookups.
    width: u32,
    mask: u64,
    none: u64,
}

impl EntryFormat {
    /// Plain `u32` addresses, no CRC (tools and tests).
    pub const PLAIN: EntryFormat = EntryFormat::new(32, false, u32::MAX);

    /// `ppa_bits` is 1..=32.
    const fn new(ppa_bits: u32, keeps_crc: bool, physical_blocks: u32) -> EntryFormat {
        assert!(ppa_bits >= 1 && ppa_bits <= 32);
        let width = ppa_bits + if keeps_crc { 32 } else { 0 };
        EntryFormat {
            ppa_bits,
            keeps_crc,
            physical_blocks,
            width,
            mask: u64::MAX >> (64 - width),
            none: (1u64 << ppa_bits) - 1,
        }
    }

    /// The narrowest format for a device of `physical_blocks`: addresses
    /// `0..physical_blocks` and the all-ones "unmapped" must fit.
    pub fn for_device(physical_blocks: u32, keeps_crc: bool) -> EntryFormat {
        let ppa_bits = (u32::BITS - physical_blocks.leading_zeros()).max(1);
        EntryFormat::new(ppa_bits, keeps_crc, physical_blocks)
    }

    /// Bits of an entry that hold the address (or map value).
    pub fn address_bits(self) -> u32 {
        self.ppa_bits
    }

    /// Bits per entry (at most 64).
    pub fn width_bits(self) -> u32 {
        self.width
    }

    /// Whether entries carry the data CRC.
    pub fn keeps_crc(self) -> bool {
        self.keeps_crc
    }

    #[inline]
    fn none(self) -> u64 {
        self.none
    }

    fn words_per_leaf(self) -> usize {
        LEAF_ENTRIES * self.width_bits() as usize / 64
    }

    fn pack(self, ppa: Ppa, crc: u32) -> u64 {
        let crc = if self.keeps_crc { u64::from(crc) } else { 0 };
        u64::from(ppa.0) | crc.wrapping_shl(self.ppa_bits) // ppa_bits <= 32
    }

    #[inline]
    fn ppa_of(self, raw: u64) -> Option<Ppa> {
        let ppa = raw & self.none();
        (ppa != self.none()).then_some(Ppa(ppa as u32))
    }

    #[inline]
    fn crc_of(self, raw: u64) -> u32 {
        raw.wrapping_shr(self.ppa_bits) as u32 // ppa_bits <= 32
    }

    /// The entry of `slot` (below [`LEAF_ENTRIES`]) in a leaf's `words`.
    #[inline]
    fn read(self, words: &[u64], slot: usize) -> u64 {
        debug_assert!(slot < LEAF_ENTRIES);
        // slot < LEAF_ENTRIES and width <= 64: the product cannot wrap;
        // the shifts stay within 0..64 (`off` > 0 when the entry spills).
        let w = self.width as usize;
        let bit = slot.wrapping_mul(w);
        let (i, off) = (bit / 64, (bit % 64) as u32);
        let mut v = words[i] >> off;
        if off as usize + w > 64 {
            v |= words[i + 1].wrapping_shl(64 - off);
        }
        v & self.mask
    }

    /// Sets the entry of `slot` (below [`LEAF_ENTRIES`]) in `words`.
    #[inline]
    fn write(self, words: &mut [u64], slot: usize, value: u64) {
        debug_assert!(slot < LEAF_ENTRIES);
        // As in `read`: no product wraps, every shift is within 0..64.
        let w = self.width as usize;
        let bit = slot.wrapping_mul(w);
        let (i, off) = (bit / 64, (bit % 64) as u32);
        let mask = self.mask;
        words[i] = words[i] & !(mask << off) | (value & mask) << off;
        if off as usize + w > 64 {
            let spill = 64 - off;
            let (m, v) = (mask.wrapping_shr(spill), (value & mask).wrapping_shr(spill));
            words[i + 1] = words[i + 1] & !m | v;
        }
    }

    fn empty_leaf(self) -> Box<[u64]> {
        let mut words = vec![0u64; self.words_per_leaf()].into_boxed_slice();
        for slot in 0..LEAF_ENTRIES {
            self.write(&mut words, slot, self.none());
        }
        words
    }
}

/// The sparse logical→physical map.
#[derive(Clone, Debug)]
pub struct L2p {
    logical_blocks: u64,
    format: EntryFormat,
    /// One slot per leaf range; `None` while nothing in the range is mapped.
    leaves: Vec<Option<Box<[u64]>>>,
    /// Mapped entries per leaf, so unmapping frees an empty leaf in O(1).
    leaf_mapped_entries: Vec<u16>,
    mapped_blocks: u64,
    leaf_count: u32,
    /// Leaves below this index are the eager part ([`Self::sparse`]).
    eager_leaves: u32,
    /// Allocated leaves at or past `eager_leaves`.
    far_leaf_count: u32,
}

impl L2p {
    /// An empty map of `logical_blocks` blocks with plain `u32` entries.
    pub fn new(logical_blocks: u64) -> L2p {
        L2p::with_format(logical_blocks, EntryFormat::PLAIN)
    }

    /// An empty map of `logical_blocks` blocks packed as `format`.
    ///
    /// The top level is allocated now (bounded by the logical size); leaves
    /// come later. At most `u32::MAX` leaves (2^42 blocks).
    pub fn with_format(logical_blocks: u64, format: EntryFormat) -> L2p {
        L2p::sparse(logical_blocks, logical_blocks, format)
    }

    /// An empty map of `logical_blocks` blocks whose top level is allocated
    /// now only for the first `eager_blocks` and grows as blocks past them
    /// are mapped (the fork regions past the volume, see [`crate::fork`]).
    pub fn sparse(logical_blocks: u64, eager_blocks: u64, format: EntryFormat) -> L2p {
        let slots = leaf_slots(eager_blocks.min(logical_blocks));
        let slots_usize = usize::try_from(slots).expect("top level fits in memory");
        L2p {
            logical_blocks,
            format,
            leaves: std::iter::repeat_with(|| None).take(slots_usize).collect(),
            leaf_mapped_entries: vec![0; slots_usize],
            mapped_blocks: 0,
            leaf_count: 0,
            eager_leaves: slots,
            far_leaf_count: 0,
        }
    }

    /// Rebuilds a map from unpacked `(leaf index, leaf)` pairs, e.g. read
    /// from a checkpoint, and (when `format` keeps them) the data CRCs of
    /// the mapped blocks in LBA order. Leaves with no mapped entry are
    /// dropped.
    pub fn from_leaves(
        logical_blocks: u64,
        format: EntryFormat,
        leaves: &[(u32, Box<Leaf>)],
        crcs: &[u32],
    ) -> Result<L2p, L2pError> {
        L2p::from_leaves_sparse(logical_blocks, logical_blocks, format, leaves, crcs)
    }

    /// [`Self::from_leaves`] into a map built as [`Self::sparse`] builds it.
    pub fn from_leaves_sparse(
        logical_blocks: u64,
        eager_blocks: u64,
        format: EntryFormat,
        leaves: &[(u32, Box<Leaf>)],
        crcs: &[u32],
    ) -> Result<L2p, L2pError> {
        let mut map = L2p::sparse(logical_blocks, eager_blocks, format);
        let slots = leaf_slots(logical_blocks);
        let mut seen: Vec<u32> = Vec::with_capacity(leaves.len());
        let mut mapped = 0u64;
        for (leaf, entries) in leaves {
            let leaf = *leaf;
            if leaf >= slots {
                return Err(L2pError::LeafOutOfRange {
                    leaf,
                    leaf_count: slots,
                    logical_blocks,
                });
            }
            map.check_leaf(leaf, entries)?;
            let in_leaf = entries.iter().filter(|&&raw| raw != UNMAPPED).count() as u64;
            if in_leaf > 0 {
                seen.push(leaf); // an empty leaf is dropped
            }
            mapped += in_leaf;
        }
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0] == w[1]) {
            return Err(L2pError::DuplicateLeaf { leaf: w[0] });
        }
        if format.keeps_crc && crcs.len() as u64 != mapped {
            return Err(L2pError::CrcCount {
                got: crcs.len(),
                mapped,
            });
        }
        // The CRC table runs in LBA order, so leaves go in by index.
        let mut order: Vec<&(u32, Box<Leaf>)> = leaves.iter().collect();
        order.sort_unstable_by_key(|(leaf, _)| *leaf);
        let mut crcs = crcs.iter().copied();
        for (leaf, entries) in order {
            map.install_leaf(*leaf, entries, &mut crcs);
        }
        Ok(map)
    }

    /// The logical size, in blocks.
    pub fn logical_blocks(&self) -> u64 {
        self.logical_blocks
    }

    /// How entries are packed.
    pub fn format(&self) -> EntryFormat {
        self.format
    }

    /// Where `lba` lives, if it is mapped.
    pub fn get(&self, lba: Lba) -> Option<Ppa> {
        self.raw(lba).and_then(|raw| self.format.ppa_of(raw))
    }

    /// Where `lba` lives and its data CRC (0 when the format keeps none).
    pub fn get_with_crc(&self, lba: Lba) -> Option<(Ppa, u32)> {
        let raw = self.raw(lba)?;
        let ppa = self.format.ppa_of(raw)?;
        Some((ppa, self.format.crc_of(raw)))
    }

    fn raw(&self, lba: Lba) -> Option<u64> {
        let (leaf, slot) = self.split(lba);
        Some(self.format.read(self.leaves.get(leaf)?.as_ref()?, slot))
    }

    /// Grows the top level to hold leaf `leaf`.
    fn reach(&mut self, leaf: usize) {
        if leaf >= self.leaves.len() {
            self.leaves.resize_with(leaf + 1, || None);
            self.leaf_mapped_entries.resize(leaf + 1, 0);
        }
    }

    /// Maps `lba` to `ppa` with data CRC `crc` (dropped when the format
    /// keeps none); returns the address it replaced.
    pub fn set(&mut self, lba: Lba, ppa: Ppa, crc: u32) -> Option<Ppa> {
        self.replace(lba, ppa, crc).map(|(old, _)| old)
    }

    /// [`Self::set`], returning the address it replaced with its data CRC
    /// (0 when the format keeps none): one lookup of the entry.
    pub fn replace(&mut self, lba: Lba, ppa: Ppa, crc: u32) -> Option<(Ppa, u32)> {
        assert!(!ppa.is_none(), "set() with Ppa::NONE; use unmap()");
        let f = self.format;
        assert!(
            ppa.0 < f.physical_blocks,
            "{ppa:?} does not fit a device of {} blocks",
            f.physical_blocks
        );
        let (leaf, slot) = self.split(lba);
        self.reach(leaf);
        if self.leaves[leaf].is_none() {
            self.leaves[leaf] = Some(f.empty_leaf());
            self.count_leaf(leaf, true);
        }
        let words = self.leaves[leaf].as_mut().expect("leaf just ensured");
        let raw = f.read(words, slot);
        f.write(words, slot, f.pack(ppa, crc));
        let old = f.ppa_of(raw).map(|old| (old, f.crc_of(raw)));
        if old.is_none() {
            self.leaf_mapped_entries[leaf] += 1;
            self.mapped_blocks += 1;
        }
        old
    }

    /// Unmaps `lba`; returns the address it had. Frees the leaf when it was
    /// the leaf's last mapped entry.
    pub fn unmap(&mut self, lba: Lba) -> Option<Ppa> {
        let f = self.format;
        let (leaf, slot) = self.split(lba);
        let words = self.leaves.get_mut(leaf)?.as_mut()?;
        let old = f.ppa_of(f.read(words, slot))?;
        f.write(words, slot, f.none());
        self.mapped_blocks -= 1;
        self.leaf_mapped_entries[leaf] -= 1;
        if self.leaf_mapped_entries[leaf] == 0 {
            self.leaves[leaf] = None;
            self.count_leaf(leaf, false);
        }
        Some(old)
    }

    /// Mapped LBAs.
    pub fn mapped_blocks(&self) -> u64 {
        self.mapped_blocks
    }

    /// Allocated leaves.
    pub fn leaf_count(&self) -> u32 {
        self.leaf_count
    }

    /// Allocated leaves past the eager part of a [`Self::sparse`] map.
    pub fn far_leaf_count(&self) -> u32 {
        self.far_leaf_count
    }

    /// Whether the leaf holding `lba` is allocated.
    pub fn has_leaf(&self, lba: Lba) -> bool {
        let (leaf, _) = self.split(lba);
        self.leaves.get(leaf).is_some_and(Option::is_some)
    }

    fn count_leaf(&mut self, leaf: usize, allocated: bool) {
        let far = u32::from(leaf as u64 >= u64::from(self.eager_leaves));
        if allocated {
            self.leaf_count += 1;
            self.far_leaf_count += far;
        } else {
            self.leaf_count -= 1;
            self.far_leaf_count -= far;
        }
    }

    /// Heap and inline bytes the map holds: the struct, the top level (at its
    /// capacity) and every allocated leaf.
    pub fn memory_bytes(&self) -> u64 {
        let top = self.leaves.capacity() * std::mem::size_of::<Option<Box<[u64]>>>()
            + self.leaf_mapped_entries.capacity() * std::mem::size_of::<u16>();
        let leaf_bytes = 8 * self.format.words_per_leaf() as u64;
        (std::mem::size_of::<Self>() + top) as u64 + u64::from(self.leaf_count) * leaf_bytes
    }

    /// Every mapped `(lba, ppa)`, in LBA order.
    pub fn iter(&self) -> impl Iterator<Item = (Lba, Ppa)> + '_ {
        self.iter_with_crc().map(|(lba, ppa, _)| (lba, ppa))
    }

    /// Every mapped `(lba, ppa, data CRC)`, in LBA order (CRC 0 when the
    /// format keeps none).
    pub fn iter_with_crc(&self) -> impl Iterator<Item = (Lba, Ppa, u32)> + '_ {
        let f = self.format;
        self.allocated().flat_map(move |(leaf, words)| {
            let base = u64::from(leaf) * LEAF_BLOCKS;
            (0..LEAF_ENTRIES).filter_map(move |slot| {
                let raw = f.read(words, slot);
                let ppa = f.ppa_of(raw)?;
                Some((base + slot as u64, ppa, f.crc_of(raw)))
            })
        })
    }

    /// Every allocated leaf, unpacked, with its index, in index order (for
    /// checkpoints).
    pub fn leaves(&self) -> impl Iterator<Item = (u32, Box<Leaf>)> + '_ {
        let f = self.format;
        self.allocated().map(move |(leaf, words)| {
            let mut out = Box::new([UNMAPPED; LEAF_ENTRIES]);
            for (slot, e) in out.iter_mut().enumerate() {
                if let Some(ppa) = f.ppa_of(f.read(words, slot)) {
                    *e = ppa.0;
                }
            }
            (leaf, out)
        })
    }

    fn allocated(&self) -> impl Iterator<Item = (u32, &[u64])> + '_ {
        self.leaves
            .iter()
            .enumerate()
            .filter_map(|(leaf, words)| Some((leaf as u32, &**words.as_ref()?)))
    }

    /// The first mapped LBA at or after `from`; `None` past the end.
    /// Skips unallocated leaves whole.
    pub fn next_mapped(&self, from: Lba) -> Option<Lba> {
        self.next_matching(from, |count| count != 0, true)
    }

    /// The first unmapped LBA at or after `from`; `None` past the end.
    /// Skips full leaves whole. With [`next_mapped`](Self::next_mapped) this
    /// splits a range into mapped extents and holes (block status).
    pub fn next_unmapped(&self, from: Lba) -> Option<Lba> {
        let full = LEAF_ENTRIES as u16;
        self.next_matching(from, |count| count != full, false)
    }

    /// True when every block of `start..start + count_blocks` is mapped.
    pub fn is_mapped_range(&self, start: Lba, count_blocks: u64) -> bool {
        let end = start.checked_add(count_blocks).expect("range overflows");
        assert!(
            end <= self.logical_blocks,
            "range {start}..{end} past the logical end"
        );
        self.next_unmapped(start).is_none_or(|hole| hole >= end)
    }

    /// True when no block of `start..start + count_blocks` is mapped.
    pub fn is_unmapped_range(&self, start: Lba, count_blocks: u64) -> bool {
        let end = start.checked_add(count_blocks).expect("range overflows");
        assert!(
            end <= self.logical_blocks,
            "range {start}..{end} past the logical end"
        );
        self.next_mapped(start).is_none_or(|lba| lba >= end)
    }

    /// The first LBA at or after `from` that is mapped (`want_mapped`) or
    /// not, looking only inside leaves whose mapped count satisfies
    /// `leaf_may`. An unallocated leaf counts as 0 mapped and all unmapped.
    fn next_matching(
        &self,
        from: Lba,
        leaf_may: impl Fn(u16) -> bool,
        want_mapped: bool,
    ) -> Option<Lba> {
        self.next_matching_before(from, self.logical_blocks, leaf_may, want_mapped)
    }

    /// The first LBA in `from..end` whose entry is mapped (`want_mapped`)
    /// or not, skipping leaves `leaf_may` rules out by their count.
    fn next_matching_before(
        &self,
        from: Lba,
        end: Lba,
        leaf_may: impl Fn(u16) -> bool,
        want_mapped: bool,
    ) -> Option<Lba> {
        let mut end = end.min(self.logical_blocks);
        if want_mapped {
            // Nothing is mapped past the top level's reach.
            end = end.min(self.leaves.len() as u64 * LEAF_BLOCKS);
        }
        if from >= end {
            return None;
        }
        let f = self.format;
        let (first_leaf, first_slot) = self.split(from);
        let last_leaf = ((end - 1) / LEAF_BLOCKS) as usize;
        for leaf in first_leaf..=last_leaf {
            if !leaf_may(self.leaf_mapped_entries.get(leaf).copied().unwrap_or(0)) {
                continue;
            }
            let start = if leaf == first_leaf { first_slot } else { 0 };
            let stop = if leaf == last_leaf {
                ((end - 1) % LEAF_BLOCKS) as usize + 1
            } else {
                LEAF_ENTRIES
            };
            let found = match self.leaves.get(leaf).and_then(Option::as_ref) {
                None => Some(start),
                Some(words) => (start..stop)
                    .find(|&slot| f.ppa_of(f.read(words, slot)).is_some() == want_mapped),
            };
            if let Some(slot) = found.filter(|&s| s < stop) {
                let lba = leaf as u64 * LEAF_BLOCKS + slot as u64;
                return (lba < end).then_some(lba);
            }
        }
        None
    }

    /// The first mapped LBA in `from..end` (unallocated leaves skipped whole).
    pub fn next_mapped_before(&self, from: Lba, end: Lba) -> Option<Lba> {
        self.next_matching_before(from, end, |count| count != 0, true)
    }

    /// `(leaf index, slot)` of an LBA; an LBA past the end is a caller bug.
    fn split(&self, lba: Lba) -> (usize, usize) {
        assert!(
            lba < self.logical_blocks,
            "LBA {lba} past the logical end {}",
            self.logical_blocks
        );
        ((lba / LEAF_BLOCKS) as usize, (lba % LEAF_BLOCKS) as usize)
    }

    /// Refuses a leaf that maps blocks past the logical end (only the last
    /// leaf can have such entries) or to addresses the format cannot hold.
    fn check_leaf(&self, leaf: u32, entries: &Leaf) -> Result<(), L2pError> {
        let base = u64::from(leaf) * LEAF_BLOCKS;
        let valid = self.logical_blocks.saturating_sub(base).min(LEAF_BLOCKS) as usize;
        if let Some(slot) = entries[valid..].iter().position(|&raw| raw != UNMAPPED) {
            return Err(L2pError::MappedPastEnd {
                lba: base + (valid + slot) as u64,
                logical_blocks: self.logical_blocks,
            });
        }
        let too_big = |&raw: &u32| raw != UNMAPPED && raw >= self.format.physical_blocks;
        match entries.iter().position(too_big) {
            Some(slot) => Err(L2pError::PpaPastDevice {
                lba: base + slot as u64,
                ppa: entries[slot],
            }),
            None => Ok(()),
        }
    }

    /// Puts a checked leaf in place, unless it maps nothing, taking the
    /// data CRC of each mapped entry from `crcs` when the format keeps them.
    fn install_leaf(&mut self, leaf: u32, entries: &Leaf, crcs: &mut impl Iterator<Item = u32>) {
        let mapped = entries.iter().filter(|&&raw| raw != UNMAPPED).count();
        if mapped == 0 {
            return;
        }
        let f = self.format;
        // Every slot is written once, so the words start zeroed rather
        // than as an empty leaf.
        let mut words = vec![0u64; f.words_per_leaf()].into_boxed_slice();
        for (slot, &raw) in entries.iter().enumerate() {
            let value = if raw == UNMAPPED {
                f.none()
            } else if f.keeps_crc {
                f.pack(Ppa(raw), crcs.next().expect("CRCs counted"))
            } else {
                f.pack(Ppa(raw), 0)
            };
            f.write(&mut words, slot, value);
        }
        self.reach(leaf as usize);
        self.leaf_mapped_entries[leaf as usize] = mapped as u16;
        self.leaves[leaf as usize] = Some(words);
        self.mapped_blocks += mapped as u64;
        self.count_leaf(leaf as usize, true);
    }
}

/// Every mapped `(lba, raw value)` of unpacked leaves (a checkpoint's),
/// leaf by leaf in the order given.
pub fn leaf_entries(leaves: &[(u32, Box<Leaf>)]) -> impl Iterator<Item = (Lba, u32)> + '_ {
    leaves.iter().flat_map(|(leaf, entries)| {
        let base = u64::from(*leaf) * LEAF_BLOCKS;
        entries
            .iter()
            .enumerate()
            .filter(|&(_, &raw)| raw != UNMAPPED)
            .map(move |(slot, &raw)| (base + slot as u64, raw))
    })
}

/// Top-level slots for a logical size: `ceil(logical_blocks / LEAF_ENTRIES)`.
fn leaf_slots(logical_blocks: u64) -> u32 {
    let slots = logical_blocks.div_ceil(LEAF_BLOCKS);
    u32::try_from(slots).expect("logical space above 2^42 blocks")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn set_get_unmap() {
        let mut map = L2p::new(5000);
        assert_eq!(map.get(10), None);
        assert_eq!(map.set(10, Ppa(7), 0), None);
        assert_eq!(map.set(10, Ppa(8), 0), Some(Ppa(7)));
        assert_eq!(map.get(10), Some(Ppa(8)));
        assert_eq!(map.mapped_blocks(), 1);
        assert_eq!(map.unmap(10), Some(Ppa(8)));
        assert_eq!(map.unmap(10), None);
        assert_eq!(map.unmap(4999), None);
        assert_eq!(map.mapped_blocks(), 0);
    }

    #[test]
    fn every_width_packs_every_slot_apart() {
        for ppa_bits in 1..=32u32 {
            for keeps_crc in [false, true] {
                let physical = (1u64 << ppa_bits) - 1;
                let f = EntryFormat::for_device(physical as u32, keeps_crc);
                assert_eq!(f.address_bits(), ppa_bits);
                let mut words = f.empty_leaf();
                let value = |slot: usize| {
                    let ppa = Ppa((slot as u64 * 0x9E37_79B9 % physical) as u32);
                    f.pack(ppa, 0xA5A5_0000 ^ slot as u32)
                };
                for slot in 0..LEAF_ENTRIES {
                    assert_eq!(f.ppa_of(f.read(&words, slot)), None);
                    f.write(&mut words, slot, value(slot));
                }
                for slot in 0..LEAF_ENTRIES {
                    let raw = f.read(&words, slot);
                    assert_eq!(raw, value(slot), "{ppa_bits} bits, slot {slot}");
                    let want = if keeps_crc {
                        0xA5A5_0000 ^ slot as u32
                    } else {
                        0
                    };
                    assert_eq!(f.crc_of(raw), want);
                }
            }
        }
    }

    #[test]
    fn leaves_come_and_go() {
        let mut map = L2p::new(3 * LEAF_BLOCKS);
        let empty_bytes = map.memory_bytes();
        map.set(0, Ppa(1), 0);
        map.set(1, Ppa(2), 0);
        map.set(2 * LEAF_BLOCKS + 5, Ppa(3), 0);
        assert_eq!(map.leaf_count(), 2);
        assert_eq!(map.memory_bytes(), empty_bytes + 2 * 4096);
        map.unmap(0);
        assert_eq!(map.leaf_count(), 2);
        map.unmap(1);
        assert_eq!(map.leaf_count(), 1);
        map.unmap(2 * LEAF_BLOCKS + 5);
        assert_eq!(map.leaf_count(), 0);
        assert_eq!(map.memory_bytes(), empty_bytes);
    }

    #[test]
    fn dense_map_costs_about_four_bytes_per_block() {
        let blocks = 64 * LEAF_BLOCKS;
        let mut map = L2p::new(blocks);
        for lba in 0..blocks {
            map.set(lba, Ppa(lba as u32), 0);
        }
        let per_block = map.memory_bytes() as f64 / blocks as f64;
        assert!(
            (4.0..4.05).contains(&per_block),
            "{per_block} bytes per block"
        );
    }

    #[test]
    fn thin_provisioned_map_is_cheap_when_empty() {
        // 1 TiB of 4 KiB blocks: the top level only, 18 bytes per leaf slot.
        let map = L2p::new(1 << 28);
        assert!(map.memory_bytes() < 5 << 20, "{}", map.memory_bytes());
    }

    #[test]
    #[should_panic(expected = "past the logical end")]
    fn lba_past_end_is_a_bug() {
        L2p::new(100).get(100);
    }

    #[test]
    #[should_panic(expected = "Ppa::NONE")]
    fn setting_none_is_a_bug() {
        L2p::new(100).set(1, Ppa::NONE, 0);
    }

    #[test]
    fn round_trips_through_leaves() {
        let mut map = L2p::new(2500);
        for lba in [0, 1023, 1024, 2499] {
            map.set(lba, Ppa(lba as u32 + 1), 0);
        }
        let leaves: Vec<_> = map.leaves().collect();
        let copy = L2p::from_leaves(2500, EntryFormat::PLAIN, &leaves, &[]).unwrap();
        assert_eq!(
            copy.iter().collect::<Vec<_>>(),
            map.iter().collect::<Vec<_>>()
        );
        assert_eq!(copy.mapped_blocks(), 4);
        assert_eq!(copy.leaf_count(), 3);
    }

    #[test]
    fn from_leaves_validates() {
        let leaf = |at: usize| {
            let mut l = Box::new([UNMAPPED; LEAF_ENTRIES]);
            l[at] = 9;
            l
        };
        assert_eq!(
            L2p::from_leaves(2048, EntryFormat::PLAIN, &[(2, leaf(0))], &[]).unwrap_err(),
            L2pError::LeafOutOfRange {
                leaf: 2,
                leaf_count: 2,
                logical_blocks: 2048
            }
        );
        assert_eq!(
            L2p::from_leaves(2048, EntryFormat::PLAIN, &[(1, leaf(0)), (1, leaf(1))], &[])
                .unwrap_err(),
            L2pError::DuplicateLeaf { leaf: 1 }
        );
        assert_eq!(
            L2p::from_leaves(1500, EntryFormat::PLAIN, &[(1, leaf(476))], &[]).unwrap_err(),
            L2pError::MappedPastEnd {
                lba: 1500,
                logical_blocks: 1500
            }
        );
        let empty = Box::new([UNMAPPED; LEAF_ENTRIES]);
        let map =
            L2p::from_leaves(1500, EntryFormat::PLAIN, &[(0, empty), (1, leaf(475))], &[]).unwrap();
        assert_eq!(map.leaf_count(), 1);
        assert_eq!(map.get(1499), Some(Ppa(9)));
    }

    #[test]
    fn finds_extents_and_holes() {
        let mut map = L2p::new(5000);
        for lba in 1000..3100 {
            map.set(lba, Ppa(lba as u32), 0);
        }
        assert_eq!(map.next_mapped(0), Some(1000));
        assert_eq!(map.next_mapped_before(0, 1000), None);
        assert_eq!(map.next_mapped_before(0, 1001), Some(1000));
        assert_eq!(map.next_mapped_before(2047, 2049), Some(2047));
        assert_eq!(map.next_mapped_before(3100, 5000), None);
        assert_eq!(map.next_mapped_before(5, 5), None);
        assert_eq!(map.next_unmapped(1000), Some(3100));
        assert_eq!(map.next_mapped(3100), None);
        assert_eq!(map.next_unmapped(4999), Some(4999));
        assert_eq!(map.next_unmapped(5000), None);
        assert!(map.is_mapped_range(1000, 2100));
        assert!(!map.is_mapped_range(999, 2));
        assert!(map.is_unmapped_range(0, 1000));
        assert!(!map.is_unmapped_range(0, 1001));
        assert!(map.is_mapped_range(0, 0));
    }

    #[test]
    fn full_last_leaf_has_no_hole_past_end() {
        let mut map = L2p::new(1030);
        for lba in 0..1030 {
            map.set(lba, Ppa(1), 0);
        }
        assert_eq!(map.next_unmapped(0), None);
        assert!(map.is_mapped_range(0, 1030));
    }

    #[test]
    fn format_is_as_narrow_as_the_device() {
        assert_eq!(EntryFormat::for_device(1 << 18, false).width_bits(), 19);
        assert_eq!(
            EntryFormat::for_device((1 << 18) - 1, false).width_bits(),
            18
        );
        assert_eq!(EntryFormat::for_device(1 << 18, true).width_bits(), 51);
        assert_eq!(EntryFormat::for_device(u32::MAX, true).width_bits(), 64);
        assert_eq!(EntryFormat::for_device(1, false).width_bits(), 1);
    }

    #[test]
    fn packed_map_keeps_crcs_and_costs_its_width() {
        let f = EntryFormat::for_device(1 << 18, true);
        let blocks = 64 * LEAF_BLOCKS;
        let mut map = L2p::with_format(blocks, f);
        for lba in 0..blocks {
            let ppa = Ppa((lba * 7 % (1 << 18)) as u32);
            map.set(lba, ppa, lba as u32 ^ 0xdead_beef);
        }
        for lba in 0..blocks {
            let ppa = Ppa((lba * 7 % (1 << 18)) as u32);
            assert_eq!(map.get_with_crc(lba), Some((ppa, lba as u32 ^ 0xdead_beef)));
        }
        let per_block = map.memory_bytes() as f64 / blocks as f64;
        assert!(
            (6.375..6.4).contains(&per_block),
            "{per_block} bytes per block"
        );
        let leaves: Vec<_> = map.leaves().collect();
        let crcs: Vec<u32> = map.iter_with_crc().map(|(.., c)| c).collect();
        let copy = L2p::from_leaves(blocks, f, &leaves, &crcs).unwrap();
        assert!(copy.iter_with_crc().eq(map.iter_with_crc()));
        assert_eq!(
            L2p::from_leaves(blocks, f, &leaves, &crcs[1..]).unwrap_err(),
            L2pError::CrcCount {
                got: crcs.len() - 1,
                mapped: blocks
            }
        );
    }

    #[test]
    fn from_leaves_refuses_addresses_past_the_device() {
        let mut leaf = Box::new([UNMAPPED; LEAF_ENTRIES]);
        leaf[3] = 1000;
        let f = EntryFormat::for_device(1000, false);
        assert_eq!(
            L2p::from_leaves(2048, f, &[(1, leaf)], &[]).unwrap_err(),
            L2pError::PpaPastDevice {
                lba: 1027,
                ppa: 1000
            }
        );
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn address_wider_than_the_format_is_a_bug() {
        L2p::with_format(10, EntryFormat::for_device(100, false)).set(0, Ppa(100), 0);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Set(u64, u32),
        Unmap(u64),
    }

    fn op(blocks: u64) -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..blocks, 0..u32::MAX).prop_map(|(l, p)| Op::Set(l, p)),
            (0..blocks).prop_map(Op::Unmap),
        ]
    }

    proptest! {
        #[test]
        fn packed_matches_a_btreemap(
            physical in 1u32..5000,
            crc in any::<bool>(),
            ops in proptest::collection::vec((0..2 * LEAF_BLOCKS + 3, any::<u32>(), any::<u32>(), any::<bool>()), 1..400),
        ) {
            let blocks = 2 * LEAF_BLOCKS + 3;
            let f = EntryFormat::for_device(physical, crc);
            let mut map = L2p::with_format(blocks, f);
            let mut model = BTreeMap::new();
            for (lba, p, c, set) in ops {
                if set {
                    let ppa = Ppa(p % physical);
                    let kept = if crc { c } else { 0 };
                    let old = model.insert(lba, (ppa, kept)).map(|(p, _)| p);
                    prop_assert_eq!(map.set(lba, ppa, c), old);
                } else {
                    prop_assert_eq!(map.unmap(lba), model.remove(&lba).map(|(p, _)| p));
                }
            }
            prop_assert!(map.iter_with_crc().eq(model.iter().map(|(&l, &(p, c))| (l, p, c))));
            for lba in [0, 1, 1023, 1024, blocks - 1] {
                prop_assert_eq!(map.get_with_crc(lba), model.get(&lba).copied());
            }
        }

        #[test]
        fn matches_a_btreemap(ops in proptest::collection::vec(op(4 * LEAF_BLOCKS + 7), 1..400)) {
            let blocks = 4 * LEAF_BLOCKS + 7;
            let mut map = L2p::new(blocks);
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(l, p) => prop_assert_eq!(map.set(l, Ppa(p), 0), model.insert(l, Ppa(p))),
                    Op::Unmap(l) => prop_assert_eq!(map.unmap(l), model.remove(&l)),
                }
            }
            prop_assert_eq!(map.mapped_blocks(), model.len() as u64);
            prop_assert_eq!(map.iter().collect::<Vec<_>>(), model.iter().map(|(&l, &p)| (l, p)).collect::<Vec<_>>());
            let leaves: std::collections::BTreeSet<u64> = model.keys().map(|l| l / LEAF_BLOCKS).collect();
            prop_assert_eq!(map.leaf_count() as usize, leaves.len());
            for from in [0, 1, 1023, 1024, 2000, blocks - 1] {
                prop_assert_eq!(map.next_mapped(from), model.range(from..).next().map(|(&l, _)| l));
                let hole = (from..blocks).find(|l| !model.contains_key(l));
                prop_assert_eq!(map.next_unmapped(from), hole);
            }
        }
    }
}
