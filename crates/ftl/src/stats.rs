//! Counters the FTL keeps and the figures derived from them.

use crate::l2p::L2p;
use crate::p2l::P2l;
use crate::zone::{ZoneKind, ZoneTable};
use serde::Serialize;

/// FTL statistics. Block counts are in device blocks.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct FtlStats {
    pub host_write_blocks: u64,
    /// Host blocks the temperature estimate sent to the hot stream.
    pub host_hot_blocks: u64,
    pub host_read_blocks: u64,
    pub host_trim_blocks: u64,
    pub host_zero_blocks: u64,
    /// Every block the FTL wrote to media: host data, GC copies, padding, metadata.
    pub media_write_blocks: u64,
    /// Blocks GC wrote (a copy that lost a race to a host write included).
    pub gc_copy_blocks: u64,
    /// Of those, blocks static wear leveling moved off young zones.
    pub wl_move_blocks: u64,
    pub meta_write_blocks: u64,
    pub pad_blocks: u64,
    /// Zone summary blocks written (tags in band; part of media writes).
    pub summary_write_blocks: u64,
    /// GC victims whose LBAs came from a walk of the map because they had
    /// no usable summary (closed early, cut by a power loss, damaged).
    pub summary_map_walks: u64,
    pub erases: u64,
    pub flushes: u64,
    pub checkpoints: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    /// Flushes, zone resets, finishes and host reads issued again after a
    /// host-side failure (a command a controller reset aborted).
    pub host_retries: u64,
    // Derived by `fill_from`.
    /// media_write_blocks ÷ host_write_blocks (0 before any host write).
    pub write_amplification: f64,
    pub free_zones: u32,
    pub data_zones: u32,
    /// Zones taken out of service (worn out, failed program or erase).
    pub retired_zones: u32,
    pub mapped_blocks: u64,
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_mean: f64,
    pub erase_count_stddev: f64,
    /// Erase counts above are over data and free zones; this is the highest
    /// among the superblock and metadata zones.
    pub metadata_erase_count_max: u32,
    /// L2P + P2L bytes, plus the summaries being collected (in band).
    pub map_memory_bytes: u64,
    /// map_memory_bytes ÷ mapped_blocks (0 when nothing is mapped).
    pub map_bytes_per_mapped_block: f64,
}

impl FtlStats {
    pub(crate) fn fill_from(
        &mut self,
        zones: &ZoneTable,
        l2p: &L2p,
        p2l: &P2l,
        pending_summary_bytes: u64,
    ) {
        self.write_amplification = ratio(self.media_write_blocks, self.host_write_blocks);
        self.free_zones = zones.free_count();
        self.retired_zones = zones
            .iter()
            .filter(|(_, z)| z.kind() == ZoneKind::Retired)
            .count() as u32;
        self.data_zones = zones
            .iter()
            .filter(|(_, z)| matches!(z.kind(), ZoneKind::Data { .. } | ZoneKind::Free))
            .count() as u32;
        self.mapped_blocks = l2p.mapped_blocks();
        let wear = zones.wear_spread();
        self.erase_count_min = wear.min_erases;
        self.erase_count_max = wear.max_erases;
        self.erase_count_mean = wear.mean_erases;
        self.erase_count_stddev = wear.stddev_erases;
        self.metadata_erase_count_max = zones.metadata_erase_max();
        self.map_memory_bytes = l2p.memory_bytes() + p2l.memory_bytes() + pending_summary_bytes;
        self.map_bytes_per_mapped_block = ratio(self.map_memory_bytes, self.mapped_blocks);
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}
