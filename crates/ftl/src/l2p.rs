//! The logical→physical map (L2P): page-level and sparse.
//!
//! The logical space is thin-provisioned (it may be far larger than the
//! media), so the map is a one-level radix: a top-level vector with one slot
//! per [`LEAF_ENTRIES`] logical blocks, and a leaf of `u32` physical addresses
//! allocated only when something in its range is mapped and freed when its
//! last entry is unmapped. A dense leaf costs 4 bytes per block; an unused
//! range costs one top-level slot (10 bytes per 1024 blocks).

use crate::addr::{Lba, Ppa};

/// Entries per leaf. 4 KiB of `u32`: one host page per leaf.
pub const LEAF_ENTRIES: usize = 1024;

/// `LEAF_ENTRIES` as a block count, for LBA arithmetic.
const LEAF_BLOCKS: u64 = LEAF_ENTRIES as u64;

/// A leaf entry that maps nothing (the same bits as [`Ppa::NONE`]).
pub const UNMAPPED: u32 = u32::MAX;

/// One leaf: the physical addresses of `LEAF_ENTRIES` consecutive LBAs.
pub type Leaf = [u32; LEAF_ENTRIES];

const _: () = assert!(UNMAPPED == Ppa::NONE.0);
const _: () = assert!(LEAF_ENTRIES <= u16::MAX as usize, "per-leaf counts are u16");
const _: () = assert!(std::mem::size_of::<Leaf>() == 4 * LEAF_ENTRIES);

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
}

/// The sparse logical→physical map.
#[derive(Clone, Debug)]
pub struct L2p {
    logical_blocks: u64,
    /// One slot per leaf range; `None` while nothing in the range is mapped.
    leaves: Vec<Option<Box<Leaf>>>,
    /// Mapped entries per leaf, so unmapping frees an empty leaf in O(1).
    leaf_mapped_entries: Vec<u16>,
    mapped_blocks: u64,
    leaf_count: u32,
}

impl L2p {
    /// An empty map of `logical_blocks` blocks.
    ///
    /// The top level is allocated now (bounded by the logical size); leaves
    /// come later. At most `u32::MAX` leaves (2^42 blocks).
    pub fn new(logical_blocks: u64) -> L2p {
        let slots = leaf_slots(logical_blocks);
        let slots_usize = usize::try_from(slots).expect("top level fits in memory");
        L2p {
            logical_blocks,
            leaves: std::iter::repeat_with(|| None).take(slots_usize).collect(),
            leaf_mapped_entries: vec![0; slots_usize],
            mapped_blocks: 0,
            leaf_count: 0,
        }
    }

    /// Rebuilds a map from `(leaf index, leaf)` pairs, e.g. read from a
    /// checkpoint. Leaves with no mapped entry are dropped.
    pub fn from_leaves(
        logical_blocks: u64,
        leaves: Vec<(u32, Box<Leaf>)>,
    ) -> Result<L2p, L2pError> {
        let mut map = L2p::new(logical_blocks);
        let slots = map.leaves.len() as u32;
        for (leaf, entries) in leaves {
            if leaf >= slots {
                return Err(L2pError::LeafOutOfRange {
                    leaf,
                    leaf_count: slots,
                    logical_blocks,
                });
            }
            if map.leaves[leaf as usize].is_some() {
                return Err(L2pError::DuplicateLeaf { leaf });
            }
            map.check_leaf_end(leaf, &entries)?;
            map.install_leaf(leaf, entries);
        }
        Ok(map)
    }

    /// The logical size, in blocks.
    pub fn logical_blocks(&self) -> u64 {
        self.logical_blocks
    }

    /// Where `lba` lives, if it is mapped.
    pub fn get(&self, lba: Lba) -> Option<Ppa> {
        let (leaf, slot) = self.split(lba);
        let raw = self.leaves[leaf].as_ref()?[slot];
        (raw != UNMAPPED).then_some(Ppa(raw))
    }

    /// Maps `lba` to `ppa`; returns the address it replaced.
    pub fn set(&mut self, lba: Lba, ppa: Ppa) -> Option<Ppa> {
        assert!(!ppa.is_none(), "set() with Ppa::NONE; use unmap()");
        let (leaf, slot) = self.split(lba);
        if self.leaves[leaf].is_none() {
            self.leaves[leaf] = Some(Box::new([UNMAPPED; LEAF_ENTRIES]));
            self.leaf_count += 1;
        }
        let entries = self.leaves[leaf].as_mut().expect("leaf just ensured");
        let old = std::mem::replace(&mut entries[slot], ppa.0);
        if old == UNMAPPED {
            self.leaf_mapped_entries[leaf] += 1;
            self.mapped_blocks += 1;
            return None;
        }
        Some(Ppa(old))
    }

    /// Unmaps `lba`; returns the address it had. Frees the leaf when it was
    /// the leaf's last mapped entry.
    pub fn unmap(&mut self, lba: Lba) -> Option<Ppa> {
        let (leaf, slot) = self.split(lba);
        let entries = self.leaves[leaf].as_mut()?;
        let old = std::mem::replace(&mut entries[slot], UNMAPPED);
        if old == UNMAPPED {
            return None;
        }
        self.mapped_blocks -= 1;
        self.leaf_mapped_entries[leaf] -= 1;
        if self.leaf_mapped_entries[leaf] == 0 {
            self.leaves[leaf] = None;
            self.leaf_count -= 1;
        }
        Some(Ppa(old))
    }

    /// Mapped LBAs.
    pub fn mapped_blocks(&self) -> u64 {
        self.mapped_blocks
    }

    /// Allocated leaves.
    pub fn leaf_count(&self) -> u32 {
        self.leaf_count
    }

    /// Heap and inline bytes the map holds: the struct, the top level (at its
    /// capacity) and every allocated leaf.
    pub fn memory_bytes(&self) -> u64 {
        let top = self.leaves.capacity() * std::mem::size_of::<Option<Box<Leaf>>>()
            + self.leaf_mapped_entries.capacity() * std::mem::size_of::<u16>();
        let leaves = u64::from(self.leaf_count) * std::mem::size_of::<Leaf>() as u64;
        (std::mem::size_of::<Self>() + top) as u64 + leaves
    }

    /// Every mapped `(lba, ppa)`, in LBA order.
    pub fn iter(&self) -> impl Iterator<Item = (Lba, Ppa)> + '_ {
        self.leaves().flat_map(|(leaf, entries)| {
            let base = u64::from(leaf) * LEAF_BLOCKS;
            entries
                .iter()
                .enumerate()
                .filter(|(_, &raw)| raw != UNMAPPED)
                .map(move |(slot, &raw)| (base + slot as u64, Ppa(raw)))
        })
    }

    /// Every allocated leaf with its index, in index order (for checkpoints).
    pub fn leaves(&self) -> impl Iterator<Item = (u32, &Leaf)> + '_ {
        self.leaves
            .iter()
            .enumerate()
            .filter_map(|(leaf, entries)| Some((leaf as u32, &**entries.as_ref()?)))
    }

    /// The first mapped LBA at or after `from`; `None` past the end.
    /// Skips unallocated leaves whole.
    pub fn next_mapped(&self, from: Lba) -> Option<Lba> {
        self.next_matching(from, |count| count != 0, |raw| raw != UNMAPPED)
    }

    /// The first unmapped LBA at or after `from`; `None` past the end.
    /// Skips full leaves whole. With [`next_mapped`](Self::next_mapped) this
    /// splits a range into mapped extents and holes (block status).
    pub fn next_unmapped(&self, from: Lba) -> Option<Lba> {
        let full = LEAF_ENTRIES as u16;
        self.next_matching(from, |count| count != full, |raw| raw == UNMAPPED)
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

    /// The first LBA at or after `from` whose entry satisfies `entry_ok`,
    /// looking only inside leaves whose mapped count satisfies `leaf_may`.
    /// An unallocated leaf counts as 0 mapped and all-`UNMAPPED`.
    fn next_matching(
        &self,
        from: Lba,
        leaf_may: impl Fn(u16) -> bool,
        entry_ok: impl Fn(u32) -> bool,
    ) -> Option<Lba> {
        if from >= self.logical_blocks {
            return None;
        }
        let (first_leaf, first_slot) = self.split(from);
        for leaf in first_leaf..self.leaves.len() {
            if !leaf_may(self.leaf_mapped_entries[leaf]) {
                continue;
            }
            let start = if leaf == first_leaf { first_slot } else { 0 };
            let found = match &self.leaves[leaf] {
                None => Some(start),
                Some(entries) => (start..LEAF_ENTRIES).find(|&slot| entry_ok(entries[slot])),
            };
            if let Some(slot) = found {
                let lba = leaf as u64 * LEAF_BLOCKS + slot as u64;
                return (lba < self.logical_blocks).then_some(lba);
            }
        }
        None
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
    /// leaf can have such entries).
    fn check_leaf_end(&self, leaf: u32, entries: &Leaf) -> Result<(), L2pError> {
        let base = u64::from(leaf) * LEAF_BLOCKS;
        let valid = self.logical_blocks.saturating_sub(base).min(LEAF_BLOCKS) as usize;
        match entries[valid..].iter().position(|&raw| raw != UNMAPPED) {
            Some(slot) => Err(L2pError::MappedPastEnd {
                lba: base + (valid + slot) as u64,
                logical_blocks: self.logical_blocks,
            }),
            None => Ok(()),
        }
    }

    /// Puts a checked leaf in place, unless it maps nothing.
    fn install_leaf(&mut self, leaf: u32, entries: Box<Leaf>) {
        let mapped = entries.iter().filter(|&&raw| raw != UNMAPPED).count();
        if mapped == 0 {
            return;
        }
        self.leaf_mapped_entries[leaf as usize] = mapped as u16;
        self.leaves[leaf as usize] = Some(entries);
        self.mapped_blocks += mapped as u64;
        self.leaf_count += 1;
    }
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
        assert_eq!(map.set(10, Ppa(7)), None);
        assert_eq!(map.set(10, Ppa(8)), Some(Ppa(7)));
        assert_eq!(map.get(10), Some(Ppa(8)));
        assert_eq!(map.mapped_blocks(), 1);
        assert_eq!(map.unmap(10), Some(Ppa(8)));
        assert_eq!(map.unmap(10), None);
        assert_eq!(map.unmap(4999), None);
        assert_eq!(map.mapped_blocks(), 0);
    }

    #[test]
    fn leaves_come_and_go() {
        let mut map = L2p::new(3 * LEAF_BLOCKS);
        let empty_bytes = map.memory_bytes();
        map.set(0, Ppa(1));
        map.set(1, Ppa(2));
        map.set(2 * LEAF_BLOCKS + 5, Ppa(3));
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
            map.set(lba, Ppa(lba as u32));
        }
        let per_block = map.memory_bytes() as f64 / blocks as f64;
        assert!(
            (4.0..4.05).contains(&per_block),
            "{per_block} bytes per block"
        );
    }

    #[test]
    fn thin_provisioned_map_is_cheap_when_empty() {
        // 1 TiB of 4 KiB blocks: the top level only.
        let map = L2p::new(1 << 28);
        assert!(map.memory_bytes() < 3 << 20, "{}", map.memory_bytes());
    }

    #[test]
    #[should_panic(expected = "past the logical end")]
    fn lba_past_end_is_a_bug() {
        L2p::new(100).get(100);
    }

    #[test]
    #[should_panic(expected = "Ppa::NONE")]
    fn setting_none_is_a_bug() {
        L2p::new(100).set(1, Ppa::NONE);
    }

    #[test]
    fn round_trips_through_leaves() {
        let mut map = L2p::new(2500);
        for lba in [0, 1023, 1024, 2499] {
            map.set(lba, Ppa(lba as u32 + 1));
        }
        let leaves: Vec<_> = map.leaves().map(|(i, l)| (i, Box::new(*l))).collect();
        let copy = L2p::from_leaves(2500, leaves).unwrap();
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
            L2p::from_leaves(2048, vec![(2, leaf(0))]).unwrap_err(),
            L2pError::LeafOutOfRange {
                leaf: 2,
                leaf_count: 2,
                logical_blocks: 2048
            }
        );
        assert_eq!(
            L2p::from_leaves(2048, vec![(1, leaf(0)), (1, leaf(1))]).unwrap_err(),
            L2pError::DuplicateLeaf { leaf: 1 }
        );
        assert_eq!(
            L2p::from_leaves(1500, vec![(1, leaf(476))]).unwrap_err(),
            L2pError::MappedPastEnd {
                lba: 1500,
                logical_blocks: 1500
            }
        );
        let empty = Box::new([UNMAPPED; LEAF_ENTRIES]);
        let map = L2p::from_leaves(1500, vec![(0, empty), (1, leaf(475))]).unwrap();
        assert_eq!(map.leaf_count(), 1);
        assert_eq!(map.get(1499), Some(Ppa(9)));
    }

    #[test]
    fn finds_extents_and_holes() {
        let mut map = L2p::new(5000);
        for lba in 1000..3100 {
            map.set(lba, Ppa(lba as u32));
        }
        assert_eq!(map.next_mapped(0), Some(1000));
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
            map.set(lba, Ppa(1));
        }
        assert_eq!(map.next_unmapped(0), None);
        assert!(map.is_mapped_range(0, 1030));
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
        fn matches_a_btreemap(ops in proptest::collection::vec(op(4 * LEAF_BLOCKS + 7), 1..400)) {
            let blocks = 4 * LEAF_BLOCKS + 7;
            let mut map = L2p::new(blocks);
            let mut model = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(l, p) => prop_assert_eq!(map.set(l, Ppa(p)), model.insert(l, Ppa(p))),
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
