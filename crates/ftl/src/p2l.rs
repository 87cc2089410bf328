//! The physical side of the map: which physical blocks are live.
//!
//! GC must know which blocks of a victim are live without reading it, and
//! must remap only if the L2P still points there (docs/design.md, "The invariants and the tests that guard them").
//! One validity bit per physical block. Which LBA a live block holds comes
//! from its tag: in OOB, or, with tags in band, the zone's summary blocks
//! (checked against the L2P, see `summary.rs`); its data CRC from the tag
//! or the L2P entry.
//!
//! A bit is set exactly while the L2P maps some LBA to that block.

use std::ops::Range;

use crate::addr::Ppa;
use crate::backend::ZoneId;

/// The dense physical-side table.
#[derive(Clone, Debug)]
pub struct P2l {
    physical_blocks: u32,
    bits: Box<[u64]>,
}

impl P2l {
    /// A table of `physical_blocks` invalid entries.
    pub fn new(physical_blocks: u32) -> P2l {
        let words = (physical_blocks as usize).div_ceil(64);
        P2l {
            physical_blocks,
            bits: vec![0u64; words].into_boxed_slice(),
        }
    }

    /// Physical blocks covered.
    pub fn physical_blocks(&self) -> u32 {
        self.physical_blocks
    }

    /// Records that `ppa` holds live data.
    pub fn set(&mut self, ppa: Ppa) {
        let i = self.index(ppa);
        self.bits[i / 64] |= 1 << (i % 64);
    }

    /// Marks `ppa` as holding no live data.
    pub fn clear(&mut self, ppa: Ppa) {
        let i = self.index(ppa);
        self.bits[i / 64] &= !(1 << (i % 64));
    }

    /// Whether `ppa` holds live data.
    pub fn is_valid(&self, ppa: Ppa) -> bool {
        let i = self.index(ppa);
        self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    /// Live blocks, in address order. Walks the set bits of each word, so
    /// a mount's checks cost per live block, not per physical block.
    pub fn live(&self) -> impl Iterator<Item = Ppa> + '_ {
        self.bits.iter().enumerate().flat_map(|(w, &word)| {
            let base = w as u32 * 64;
            std::iter::successors((word != 0).then_some(word), |&rest| {
                let next = rest & (rest - 1);
                (next != 0).then_some(next)
            })
            .map(move |rest| Ppa(base + rest.trailing_zeros()))
        })
    }

    /// Clears the physical blocks `blocks` (raw `Ppa` values), e.g. a zone
    /// after its reset.
    pub fn clear_range(&mut self, blocks: Range<u32>) {
        assert!(blocks.start <= blocks.end, "reversed range {blocks:?}");
        assert!(
            blocks.end <= self.physical_blocks,
            "range {blocks:?} past the device"
        );
        for b in blocks {
            self.clear(Ppa(b));
        }
    }

    /// Clears every block of `zone` (Ppas are dense over zone capacity).
    pub fn clear_zone(&mut self, zone: ZoneId, zone_capacity_blocks: u64) {
        let start = u64::from(zone) * zone_capacity_blocks;
        let end = start + zone_capacity_blocks;
        let start = u32::try_from(start).expect("zone start fits a Ppa");
        let end = u32::try_from(end).expect("zone end fits a Ppa");
        self.clear_range(start..end);
    }

    /// Bytes the table holds: 1 bit per block.
    pub fn memory_bytes(&self) -> u64 {
        std::mem::size_of::<Self>() as u64 + 8 * self.bits.len() as u64
    }

    fn index(&self, ppa: Ppa) -> usize {
        assert!(ppa.0 < self.physical_blocks, "{ppa:?} past the device");
        ppa.0 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_tracks_liveness() {
        let mut p2l = P2l::new(100);
        assert!(!p2l.is_valid(Ppa(5)));
        p2l.set(Ppa(5));
        assert!(p2l.is_valid(Ppa(5)) && !p2l.is_valid(Ppa(4)) && !p2l.is_valid(Ppa(6)));
        p2l.set(Ppa(64));
        assert_eq!(p2l.live().collect::<Vec<_>>(), vec![Ppa(5), Ppa(64)]);
        p2l.clear(Ppa(5));
        assert!(!p2l.is_valid(Ppa(5)));
        assert_eq!(p2l.memory_bytes(), std::mem::size_of::<P2l>() as u64 + 16);
    }

    #[test]
    fn live_lists_exactly_the_set_bits_in_order() {
        let mut p2l = P2l::new(300);
        let mut set = Vec::new();
        let mut x = 7u32;
        for b in 0..300 {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            // Dense and empty words, and both ends of a word.
            if (64..128).contains(&b) || [0, 63, 191, 192, 299].contains(&b) || x >> 29 == 0 {
                p2l.set(Ppa(b));
                set.push(Ppa(b));
            }
        }
        assert_eq!(p2l.live().collect::<Vec<_>>(), set);
        let by_bit: Vec<_> = (0..300).map(Ppa).filter(|&p| p2l.is_valid(p)).collect();
        assert_eq!(by_bit, set);
    }

    #[test]
    fn clear_zone_clears_only_that_zone() {
        let mut p2l = P2l::new(200);
        for b in 0..200 {
            p2l.set(Ppa(b));
        }
        p2l.clear_zone(1, 64);
        assert!(p2l.is_valid(Ppa(63)));
        assert!((64..128).all(|b| !p2l.is_valid(Ppa(b))));
        assert!(p2l.is_valid(Ppa(128)));
    }

    #[test]
    #[should_panic(expected = "past the device")]
    fn ppa_past_device_is_a_bug() {
        P2l::new(4).is_valid(Ppa(4));
    }
}
