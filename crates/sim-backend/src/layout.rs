//! Page addressing: how a zone offset maps to a LUN, an erase block and a
//! page. Pure arithmetic on a validated config, so it never fails.
//!
//! LUNs are numbered `0..channels*luns_per_channel`; LUN `l` sits on channel
//! `l % channels`, so a zone striped over consecutive LUNs spans channels.
//! Erase block `e = lun * blocks_per_lun + block`; global page
//! `p = e * pages_per_block + page`.

use zftl_core::backend::ZoneId;

use crate::config::SimConfig;

#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub blocks_per_lun: u64,
    pub pages_per_block: u64,
    pub zone_width_luns: u64,
    pub program_unit_pages: u64,
    /// Zones per erase-block row: `luns / zone_width_luns`.
    pub lun_groups: u64,
    pub zone_count: u64,
    pub zone_capacity_blocks: u64,
}

impl Layout {
    pub fn new(cfg: &SimConfig) -> Self {
        let luns = u64::from(cfg.lun_count());
        let width = u64::from(cfg.zone_width_luns);
        assert!(
            width > 0 && luns % width == 0,
            "layout of an unvalidated config"
        );
        let lun_groups = luns / width;
        Layout {
            blocks_per_lun: u64::from(cfg.blocks_per_lun),
            pages_per_block: u64::from(cfg.pages_per_block),
            zone_width_luns: width,
            program_unit_pages: u64::from(cfg.program_unit_pages),
            lun_groups,
            zone_count: lun_groups * u64::from(cfg.blocks_per_lun),
            zone_capacity_blocks: width * u64::from(cfg.pages_per_block),
        }
    }

    /// First LUN of the zone's group and its erase-block row.
    fn zone_base(&self, zone: ZoneId) -> (u64, u64) {
        let zone = u64::from(zone);
        debug_assert!(zone < self.zone_count);
        (
            (zone % self.lun_groups) * self.zone_width_luns,
            zone / self.lun_groups,
        )
    }

    /// The `j`th erase block of a zone (`j < zone_width_luns`).
    pub fn zone_erase_block(&self, zone: ZoneId, j: u64) -> u64 {
        let (lun0, row) = self.zone_base(zone);
        (lun0 + j) * self.blocks_per_lun + row
    }

    /// The zone an erase block belongs to.
    pub fn zone_of_erase_block(&self, erase_block: u64) -> ZoneId {
        let lun = erase_block / self.blocks_per_lun;
        let row = erase_block % self.blocks_per_lun;
        let zone = row * self.lun_groups + lun / self.zone_width_luns;
        u32::try_from(zone).expect("zone index fits u32 (validated)")
    }

    /// Where zone offset `offset` lives: `(lun, erase_block, global_page)`.
    pub fn locate(&self, zone: ZoneId, offset: u64) -> (u64, u64, u64) {
        debug_assert!(offset < self.zone_capacity_blocks);
        let (lun0, row) = self.zone_base(zone);
        let unit = offset / self.program_unit_pages;
        let j = unit % self.zone_width_luns;
        let page = (unit / self.zone_width_luns) * self.program_unit_pages
            + offset % self.program_unit_pages;
        let lun = lun0 + j;
        let erase_block = lun * self.blocks_per_lun + row;
        (lun, erase_block, erase_block * self.pages_per_block + page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_zone_block_maps_to_a_distinct_page() {
        let mut cfg = SimConfig::small_for_tests();
        cfg.program_unit_pages = 4;
        let layout = Layout::new(&cfg);
        let mut seen = vec![false; cfg.page_count() as usize];
        for zone in 0..layout.zone_count as u32 {
            for off in 0..layout.zone_capacity_blocks {
                let (lun, eb, page) = layout.locate(zone, off);
                assert!(!seen[page as usize], "page {page} mapped twice");
                seen[page as usize] = true;
                assert_eq!(eb / layout.blocks_per_lun, lun);
                assert_eq!(page / layout.pages_per_block, eb);
                assert_eq!(layout.zone_of_erase_block(eb), zone);
            }
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn program_units_stripe_across_luns() {
        let mut cfg = SimConfig::small_for_tests();
        cfg.program_unit_pages = 4;
        let layout = Layout::new(&cfg);
        // Zone 1 uses LUNs 2 and 3 (two groups of two), row 0.
        let luns: Vec<u64> = (0..16).map(|b| layout.locate(1, b).0).collect();
        assert_eq!(luns, [2, 2, 2, 2, 3, 3, 3, 3, 2, 2, 2, 2, 3, 3, 3, 3]);
        let (_, _, p8) = layout.locate(1, 8);
        let (_, _, p0) = layout.locate(1, 0);
        assert_eq!(p8, p0 + 4);
    }
}
