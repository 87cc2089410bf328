//! The physical→logical reverse map (P2L), plus a per-block data CRC.
//!
//! GC needs to know which LBA a physical block holds without reading it, and
//! must remap only if the L2P still points there (DESIGN.md §7 rule 7). The
//! table is dense: one `u32` LBA per physical block (LBAs at or above
//! `u32::MAX` are refused at format, so `u32` fits).
//!
//! On backends without OOB the data CRC cannot come back with the block's
//! tag, so in "CRC mode" the table also keeps a `u32` CRC per block.

use std::ops::Range;

use crate::addr::{Lba, Ppa};
use crate::backend::ZoneId;

/// An entry that holds no LBA (never written, reset, or invalidated).
pub const NO_LBA: u32 = u32::MAX;

/// Why saved P2L arrays cannot form a table.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum P2lError {
    #[error("{actual} entries where the device has {expected} physical blocks")]
    Length { expected: u32, actual: usize },
    #[error("{crcs} CRCs for {lbas} LBAs")]
    CrcLength { lbas: usize, crcs: usize },
}

/// The dense physical→logical map.
#[derive(Clone, Debug)]
pub struct P2l {
    lbas: Box<[u32]>,
    /// `Some` only in CRC mode; same length as `lbas`.
    crcs: Option<Box<[u32]>>,
}

impl P2l {
    /// A table of `physical_blocks` invalid entries; `keep_crcs` turns on CRC
    /// mode (for backends without OOB).
    pub fn new(physical_blocks: u32, keep_crcs: bool) -> P2l {
        let len = physical_blocks as usize;
        P2l {
            lbas: vec![NO_LBA; len].into_boxed_slice(),
            crcs: keep_crcs.then(|| vec![0; len].into_boxed_slice()),
        }
    }

    /// Rebuilds a table from saved arrays (e.g. a checkpoint).
    pub fn from_parts(
        physical_blocks: u32,
        lbas: Vec<u32>,
        crcs: Option<Vec<u32>>,
    ) -> Result<P2l, P2lError> {
        if lbas.len() != physical_blocks as usize {
            return Err(P2lError::Length {
                expected: physical_blocks,
                actual: lbas.len(),
            });
        }
        if let Some(c) = &crcs {
            if c.len() != lbas.len() {
                return Err(P2lError::CrcLength {
                    lbas: lbas.len(),
                    crcs: c.len(),
                });
            }
        }
        Ok(P2l {
            lbas: lbas.into_boxed_slice(),
            crcs: crcs.map(Vec::into_boxed_slice),
        })
    }

    /// Physical blocks covered.
    pub fn physical_blocks(&self) -> u32 {
        self.lbas.len() as u32
    }

    /// True in CRC mode.
    pub fn keeps_crcs(&self) -> bool {
        self.crcs.is_some()
    }

    /// Records that `ppa` holds `lba` with data CRC `data_crc` (ignored
    /// outside CRC mode).
    pub fn set(&mut self, ppa: Ppa, lba: Lba, data_crc: u32) {
        let i = self.index(ppa);
        assert!(lba < u64::from(NO_LBA), "LBA {lba} does not fit the P2L");
        self.lbas[i] = lba as u32;
        if let Some(crcs) = &mut self.crcs {
            crcs[i] = data_crc;
        }
    }

    /// Marks `ppa` as holding no LBA.
    pub fn clear(&mut self, ppa: Ppa) {
        let i = self.index(ppa);
        self.lbas[i] = NO_LBA;
        if let Some(crcs) = &mut self.crcs {
            crcs[i] = 0;
        }
    }

    /// The LBA `ppa` holds, if any.
    pub fn lba(&self, ppa: Ppa) -> Option<Lba> {
        let raw = self.lbas[self.index(ppa)];
        (raw != NO_LBA).then_some(Lba::from(raw))
    }

    /// The data CRC of `ppa`; `None` outside CRC mode or when `ppa` holds no
    /// LBA.
    pub fn crc(&self, ppa: Ppa) -> Option<u32> {
        let i = self.index(ppa);
        let crcs = self.crcs.as_ref()?;
        (self.lbas[i] != NO_LBA).then_some(crcs[i])
    }

    /// Clears the physical blocks `blocks` (raw `Ppa` values), e.g. a zone
    /// after its reset.
    pub fn clear_range(&mut self, blocks: Range<u32>) {
        assert!(blocks.start <= blocks.end, "reversed range {blocks:?}");
        assert!(
            blocks.end <= self.physical_blocks(),
            "range {blocks:?} past the device"
        );
        let range = blocks.start as usize..blocks.end as usize;
        self.lbas[range.clone()].fill(NO_LBA);
        if let Some(crcs) = &mut self.crcs {
            crcs[range].fill(0);
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

    /// The raw LBA array (`NO_LBA` = none), indexed by `Ppa.0`, for checkpoints.
    pub fn lbas(&self) -> &[u32] {
        &self.lbas
    }

    /// The raw CRC array in CRC mode, indexed by `Ppa.0`, for checkpoints.
    pub fn crcs(&self) -> Option<&[u32]> {
        self.crcs.as_deref()
    }

    /// Bytes the table holds: 4 per block, 8 in CRC mode.
    pub fn memory_bytes(&self) -> u64 {
        let per_block = if self.crcs.is_some() { 8 } else { 4 };
        std::mem::size_of::<Self>() as u64 + per_block * self.lbas.len() as u64
    }

    fn index(&self, ppa: Ppa) -> usize {
        assert!(ppa.0 < self.physical_blocks(), "{ppa:?} past the device");
        ppa.0 as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_clear() {
        let mut p2l = P2l::new(100, false);
        assert_eq!(p2l.lba(Ppa(5)), None);
        p2l.set(Ppa(5), 1234, 0xdead);
        assert_eq!(p2l.lba(Ppa(5)), Some(1234));
        assert_eq!(p2l.crc(Ppa(5)), None, "no CRCs outside CRC mode");
        p2l.clear(Ppa(5));
        assert_eq!(p2l.lba(Ppa(5)), None);
        assert_eq!(p2l.memory_bytes(), std::mem::size_of::<P2l>() as u64 + 400);
    }

    #[test]
    fn crc_mode_keeps_crcs() {
        let mut p2l = P2l::new(100, true);
        p2l.set(Ppa(7), 3, 0xbeef);
        assert_eq!(p2l.crc(Ppa(7)), Some(0xbeef));
        assert_eq!(p2l.crc(Ppa(8)), None);
        assert_eq!(p2l.memory_bytes(), std::mem::size_of::<P2l>() as u64 + 800);
    }

    #[test]
    fn clear_zone_clears_only_that_zone() {
        let mut p2l = P2l::new(40, true);
        for b in 0..40 {
            p2l.set(Ppa(b), u64::from(b) + 100, b);
        }
        p2l.clear_zone(1, 10);
        assert_eq!(p2l.lba(Ppa(9)), Some(109));
        assert!((10..20).all(|b| p2l.lba(Ppa(b)).is_none() && p2l.crc(Ppa(b)).is_none()));
        assert_eq!(p2l.lba(Ppa(20)), Some(120));
    }

    #[test]
    fn from_parts_checks_lengths() {
        let p2l = P2l::new(4, true);
        let copy =
            P2l::from_parts(4, p2l.lbas().to_vec(), p2l.crcs().map(<[u32]>::to_vec)).unwrap();
        assert!(copy.keeps_crcs());
        assert_eq!(
            P2l::from_parts(5, vec![NO_LBA; 4], None).unwrap_err(),
            P2lError::Length {
                expected: 5,
                actual: 4
            }
        );
        assert_eq!(
            P2l::from_parts(4, vec![NO_LBA; 4], Some(vec![0; 3])).unwrap_err(),
            P2lError::CrcLength { lbas: 4, crcs: 3 }
        );
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn huge_lba_is_a_bug() {
        P2l::new(4, false).set(Ppa(0), u64::from(u32::MAX), 0);
    }

    #[test]
    #[should_panic(expected = "past the device")]
    fn ppa_past_device_is_a_bug() {
        P2l::new(4, false).lba(Ppa(4));
    }
}
