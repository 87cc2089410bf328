//! Addresses and the numbers that order history.
//!
//! A physical block address (`Ppa`) is dense over zone *capacity*, not zone
//! size: `zone * zone_capacity_blocks + offset_blocks`. u32 bounds the device
//! at 2^32 blocks (16 TiB at 4 KiB), checked at format time.

use crate::backend::{Geometry, ZoneId};

/// Logical block address, in blocks.
pub type Lba = u64;

/// Global write sequence number: every host write, trim and note gets the
/// next one, so "newer" is a plain comparison across the whole device.
pub type Seq = u64;

/// Snapshot epoch; bumped by snapshot creation (later issue). 0 until then.
pub type Epoch = u32;

/// Physical block address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ppa(pub u32);

impl Ppa {
    /// Marks "no block" in dense tables.
    pub const NONE: Ppa = Ppa(u32::MAX);

    pub fn new(zone: ZoneId, offset_blocks: u64, zone_capacity_blocks: u64) -> Ppa {
        assert!(offset_blocks < zone_capacity_blocks, "offset past capacity");
        let raw = u64::from(zone) * zone_capacity_blocks + offset_blocks;
        Ppa(u32::try_from(raw).expect("device larger than 2^32 blocks"))
    }

    pub fn zone(self, zone_capacity_blocks: u64) -> ZoneId {
        (u64::from(self.0) / zone_capacity_blocks) as ZoneId
    }

    pub fn offset_blocks(self, zone_capacity_blocks: u64) -> u64 {
        u64::from(self.0) % zone_capacity_blocks
    }

    pub fn is_none(self) -> bool {
        self == Ppa::NONE
    }
}

/// Physical blocks on a device (capacity only), checked to fit a `Ppa`.
pub fn physical_blocks(geometry: &Geometry) -> Option<u32> {
    let total = u64::from(geometry.zone_count) * geometry.zone_capacity_blocks;
    u32::try_from(total).ok().filter(|&n| n < u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppa_round_trips() {
        let p = Ppa::new(7, 100, 1024);
        assert_eq!(p.zone(1024), 7);
        assert_eq!(p.offset_blocks(1024), 100);
        assert!(!p.is_none());
    }
}
