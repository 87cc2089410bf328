//! The physical side of the map: which physical blocks are live, and (when
//! the media cannot say it) which LBA and data CRC each holds.
//!
//! GC must know which blocks of a victim are live without reading it, and
//! must remap only if the L2P still points there (DESIGN.md §7 rule 7).
//!
//! - **Tags in OOB:** one validity bit per physical block. GC reads a live
//!   block's data and OOB together; the tag names the LBA and carries the
//!   data CRC, so the table need not. 1 bit per block.
//! - **Tags in band:** nothing on the media names a block's LBA or CRC, so
//!   the table keeps a `u32` LBA and a `u32` data CRC per block (LBAs at or
//!   above `u32::MAX` are refused at format). 8 bytes per block.
//!
//! An entry is set exactly while the L2P maps some LBA to that block.

use std::ops::Range;

use crate::addr::{Lba, Ppa};
use crate::backend::ZoneId;

/// An entry that holds no LBA (never written, reset, or invalidated).
pub const NO_LBA: u32 = u32::MAX;

#[derive(Clone, Debug)]
enum Entries {
    /// OOB tags: a validity bitmap.
    Bits(Box<[u64]>),
    /// In-band tags: LBA and data CRC per block.
    Full { lbas: Box<[u32]>, crcs: Box<[u32]> },
}

/// The dense physical-side table.
#[derive(Clone, Debug)]
pub struct P2l {
    physical_blocks: u32,
    entries: Entries,
}

impl P2l {
    /// A table of `physical_blocks` invalid entries; `in_band` keeps LBAs
    /// and CRCs (for backends without room for tags in OOB).
    pub fn new(physical_blocks: u32, in_band: bool) -> P2l {
        let len = physical_blocks as usize;
        let entries = if in_band {
            Entries::Full {
                lbas: vec![NO_LBA; len].into_boxed_slice(),
                crcs: vec![0; len].into_boxed_slice(),
            }
        } else {
            Entries::Bits(vec![0u64; len.div_ceil(64)].into_boxed_slice())
        };
        P2l {
            physical_blocks,
            entries,
        }
    }

    /// Physical blocks covered.
    pub fn physical_blocks(&self) -> u32 {
        self.physical_blocks
    }

    /// Records that `ppa` holds `lba` with data CRC `data_crc` (the LBA and
    /// CRC are kept in band only).
    pub fn set(&mut self, ppa: Ppa, lba: Lba, data_crc: u32) {
        let i = self.index(ppa);
        assert!(lba < u64::from(NO_LBA), "LBA {lba} does not fit the P2L");
        match &mut self.entries {
            Entries::Bits(bits) => bits[i / 64] |= 1 << (i % 64),
            Entries::Full { lbas, crcs } => {
                lbas[i] = lba as u32;
                crcs[i] = data_crc;
            }
        }
    }

    /// Marks `ppa` as holding no live data.
    pub fn clear(&mut self, ppa: Ppa) {
        let i = self.index(ppa);
        match &mut self.entries {
            Entries::Bits(bits) => bits[i / 64] &= !(1 << (i % 64)),
            Entries::Full { lbas, crcs } => {
                lbas[i] = NO_LBA;
                crcs[i] = 0;
            }
        }
    }

    /// Whether `ppa` holds live data.
    pub fn is_valid(&self, ppa: Ppa) -> bool {
        let i = self.index(ppa);
        match &self.entries {
            Entries::Bits(bits) => bits[i / 64] & (1 << (i % 64)) != 0,
            Entries::Full { lbas, .. } => lbas[i] != NO_LBA,
        }
    }

    /// The LBA `ppa` holds: in band only (with OOB tags the block's tag
    /// names it, and this is `None`).
    pub fn lba(&self, ppa: Ppa) -> Option<Lba> {
        let i = self.index(ppa);
        match &self.entries {
            Entries::Bits(_) => None,
            Entries::Full { lbas, .. } => (lbas[i] != NO_LBA).then_some(Lba::from(lbas[i])),
        }
    }

    /// The data CRC of `ppa`: in band only, and only while it is live.
    pub fn crc(&self, ppa: Ppa) -> Option<u32> {
        let i = self.index(ppa);
        match &self.entries {
            Entries::Bits(_) => None,
            Entries::Full { lbas, crcs } => (lbas[i] != NO_LBA).then_some(crcs[i]),
        }
    }

    /// Whether LBAs and CRCs are kept (in-band tags).
    pub fn keeps_lbas(&self) -> bool {
        matches!(self.entries, Entries::Full { .. })
    }

    /// Live blocks, with their LBA when kept.
    pub fn live(&self) -> impl Iterator<Item = (Ppa, Option<Lba>)> + '_ {
        (0..self.physical_blocks)
            .map(Ppa)
            .filter(|&p| self.is_valid(p))
            .map(|p| (p, self.lba(p)))
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

    /// Bytes the table holds: 1 bit per block with OOB tags, 8 bytes in band.
    pub fn memory_bytes(&self) -> u64 {
        let table = match &self.entries {
            Entries::Bits(bits) => 8 * bits.len() as u64,
            Entries::Full { lbas, crcs } => 4 * (lbas.len() + crcs.len()) as u64,
        };
        std::mem::size_of::<Self>() as u64 + table
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
    fn bitmap_tracks_liveness_only() {
        let mut p2l = P2l::new(100, false);
        assert!(!p2l.is_valid(Ppa(5)));
        p2l.set(Ppa(5), 1234, 0xdead);
        assert!(p2l.is_valid(Ppa(5)) && !p2l.is_valid(Ppa(4)) && !p2l.is_valid(Ppa(6)));
        assert_eq!(p2l.lba(Ppa(5)), None, "the tag names the LBA");
        assert_eq!(p2l.crc(Ppa(5)), None, "the tag carries the CRC");
        p2l.set(Ppa(64), 1, 0);
        assert_eq!(
            p2l.live().map(|(p, _)| p).collect::<Vec<_>>(),
            vec![Ppa(5), Ppa(64)]
        );
        p2l.clear(Ppa(5));
        assert!(!p2l.is_valid(Ppa(5)));
        assert_eq!(p2l.memory_bytes(), std::mem::size_of::<P2l>() as u64 + 16);
    }

    #[test]
    fn in_band_keeps_lbas_and_crcs() {
        let mut p2l = P2l::new(100, true);
        p2l.set(Ppa(7), 3, 0xbeef);
        assert_eq!(p2l.lba(Ppa(7)), Some(3));
        assert_eq!(p2l.crc(Ppa(7)), Some(0xbeef));
        assert_eq!(p2l.crc(Ppa(8)), None);
        assert_eq!(p2l.memory_bytes(), std::mem::size_of::<P2l>() as u64 + 800);
    }

    #[test]
    fn clear_zone_clears_only_that_zone() {
        for in_band in [false, true] {
            let mut p2l = P2l::new(200, in_band);
            for b in 0..200 {
                p2l.set(Ppa(b), u64::from(b) + 100, b);
            }
            p2l.clear_zone(1, 64);
            assert!(p2l.is_valid(Ppa(63)));
            assert!((64..128).all(|b| !p2l.is_valid(Ppa(b)) && p2l.crc(Ppa(b)).is_none()));
            assert!(p2l.is_valid(Ppa(128)));
        }
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn huge_lba_is_a_bug() {
        P2l::new(4, true).set(Ppa(0), u64::from(u32::MAX), 0);
    }

    #[test]
    #[should_panic(expected = "past the device")]
    fn ppa_past_device_is_a_bug() {
        P2l::new(4, false).is_valid(Ppa(4));
    }
}
