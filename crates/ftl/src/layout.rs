//! Which zone holds what: superblock copies, the metadata log ring, data.
//!
//! Zones 0 and 1 hold the superblock copies; the next `meta_zone_count` zones
//! form the metadata log ring; the rest hold data. The ring is sized at
//! format so it holds three worst-case checkpoints plus notes: the newest
//! checkpoint must survive while the next one is written (format.md §crash).

use crate::addr::physical_blocks;
use crate::backend::{Geometry, ZoneId};
use crate::checkpoint::LEAF_ENTRIES;
use crate::error::MountError;

/// Data zones the writer keeps open at once (hot host, cold host, GC):
/// their unwritten tails hold no data, so space accounting sets them aside.
pub const OPEN_DATA_LANES: u32 = 3;

/// Over-provisioning a format leaves when no logical size is given: the
/// usual minimum on SSDs; with less, GC at full fill copies most of each
/// victim and a workload that fills the volume crawls.
pub const DEFAULT_OP_PERCENT: u64 = 7;

/// Smallest metadata log ring: after one failed zone, three remain, so a
/// checkpoint can always be written while the previous one is still needed.
pub const MIN_META_ZONES: u64 = 4;

/// Superblock copies, at zones 0 and 1.
pub const SUPER_ZONES: [ZoneId; 2] = [0, 1];

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub meta_first_zone: ZoneId,
    pub meta_zone_count: u32,
    pub logical_blocks: u64,
}

impl Layout {
    pub fn meta_zones(&self) -> impl Iterator<Item = ZoneId> + Clone {
        self.meta_first_zone..self.meta_first_zone + self.meta_zone_count
    }

    pub fn is_meta(&self, zone: ZoneId) -> bool {
        (self.meta_first_zone..self.meta_first_zone + self.meta_zone_count).contains(&zone)
    }

    pub fn first_data_zone(&self) -> ZoneId {
        self.meta_first_zone + self.meta_zone_count
    }

    /// Plans a layout for `geometry`; `logical_blocks = None` picks the data
    /// capacity less the GC reserve. `in_band`: tags in band, so every data
    /// zone ends in its summary.
    pub fn plan(
        geometry: &Geometry,
        logical_blocks: Option<u64>,
        gc_reserve_zones: u32,
        in_band: bool,
    ) -> Result<Layout, MountError> {
        geometry
            .validate()
            .map_err(|e| MountError::Unsupported(e.to_string()))?;
        if geometry.write_unit_blocks != 1 {
            return Err(MountError::Unsupported(format!(
                "a write unit of {} blocks: zftl writes its superblock records and metadata \
                 one block at a time, so it needs devices that take single-block writes",
                geometry.write_unit_blocks
            )));
        }
        let data_cap = data_blocks_per_zone(geometry, in_band);
        if data_cap == 0 {
            return Err(MountError::Unsupported(format!(
                "zones of {} blocks leave no room for data after the zone summary (tags in band)",
                geometry.zone_capacity_blocks
            )));
        }
        let physical = physical_blocks(geometry)
            .ok_or_else(|| MountError::Unsupported("more than 2^32 - 1 physical blocks".into()))?;
        let cap = geometry.zone_capacity_blocks;
        let bs = u64::from(geometry.block_size_bytes);
        let guess_logical = logical_blocks.unwrap_or(u64::from(physical));
        let ckpt_bytes = max_checkpoint_bytes(geometry, guess_logical)
            + snapshot_reserve_bytes(geometry, guess_logical);
        let ckpt_blocks = ckpt_bytes.div_ceil(bs - 64);
        // Three worst-case checkpoints plus two zones of notes, and never
        // fewer than MIN_META_ZONES: the ring must survive losing a zone.
        let meta_zone_count =
            u32::try_from(((3 * ckpt_blocks).div_ceil(cap) + 2).max(MIN_META_ZONES))
                .map_err(|_| MountError::Unsupported("metadata log too large".into()))?;
        let reserved = 2 + meta_zone_count + gc_reserve_zones + OPEN_DATA_LANES;
        if geometry.zone_count <= reserved {
            return Err(MountError::Unsupported(format!(
                "{} zones, but zftl needs at least {} (2 superblock, {meta_zone_count} metadata, \
                 {gc_reserve_zones} GC reserve, {OPEN_DATA_LANES} open data zones) plus data zones",
                geometry.zone_count,
                reserved + 1
            )));
        }
        let data_zones = u64::from(geometry.zone_count - 2 - meta_zone_count);
        let usable = (data_zones - u64::from(gc_reserve_zones + OPEN_DATA_LANES)) * data_cap;
        let default_logical = usable * 100 / (100 + DEFAULT_OP_PERCENT);
        let logical_blocks = logical_blocks.unwrap_or(default_logical);
        if logical_blocks == 0 || logical_blocks >= u64::from(u32::MAX) {
            return Err(MountError::Unsupported(format!(
                "logical size of {logical_blocks} blocks: must be between 1 and 2^32 - 2"
            )));
        }
        Ok(Layout {
            meta_first_zone: 2,
            meta_zone_count,
            logical_blocks,
        })
    }
}

/// Blocks at the end of each data zone that hold its summary: none with
/// OOB tags (`crate::summary`). At most the zone capacity.
pub fn summary_blocks_per_zone(geometry: &Geometry, in_band: bool) -> u64 {
    let cap = geometry.zone_capacity_blocks;
    if !in_band {
        return 0;
    }
    let bs = geometry.block_size_bytes as usize;
    crate::summary::summary_blocks(cap, bs, u64::from(geometry.write_unit_blocks)).min(cap)
}

/// Blocks of a data zone that hold data: its capacity, less the zone
/// summary when tags are in band.
pub fn data_blocks_per_zone(geometry: &Geometry, in_band: bool) -> u64 {
    geometry.zone_capacity_blocks - summary_blocks_per_zone(geometry, in_band)
}

/// Upper bound of an encoded checkpoint's fixed part: header, zone table,
/// every map leaf a volume of `logical_blocks` can have, and the CRC table.
/// The shared, attribute and snapshot tables come on top
/// ([`snapshot_reserve_bytes`] is what a format sets aside for them).
pub fn max_checkpoint_bytes(geometry: &Geometry, logical_blocks: u64) -> u64 {
    let leaves = logical_blocks.div_ceil(LEAF_ENTRIES as u64);
    let physical = u64::from(geometry.zone_count) * geometry.zone_capacity_blocks;
    64 + 32 * u64::from(geometry.zone_count)
        + leaves * (4 + 4 * LEAF_ENTRIES as u64)
        + 4 * physical.min(logical_blocks)
        + 4
}

/// Snapshots a format sets checkpoint room aside for.
pub const RESERVED_SNAPSHOTS: u64 = 64;
/// Checkpoint bytes a kept version may add: its history record and the
/// shared entry it may take.
pub const KEPT_VERSION_BYTES: u64 = 24 + 16;

/// Checkpoint bytes a format sets aside for snapshots: a birth for every
/// block, [`RESERVED_SNAPSHOTS`] snapshot records, and kept versions of an
/// eighth of the device's blocks (each section's header included).
pub fn snapshot_reserve_bytes(geometry: &Geometry, logical_blocks: u64) -> u64 {
    let physical = u64::from(geometry.zone_count) * geometry.zone_capacity_blocks;
    births_bytes(logical_blocks)
        + 4 * 16
        + 8
        + RESERVED_SNAPSHOTS * 96
        + physical / 8 * KEPT_VERSION_BYTES
}

/// Checkpoint bytes of the births when every leaf has one.
pub fn births_bytes(logical_blocks: u64) -> u64 {
    4 + logical_blocks.div_ceil(LEAF_ENTRIES as u64) * (4 + 4 * LEAF_ENTRIES as u64)
}

/// Bytes one checkpoint may take in a metadata log of `meta_zone_count`
/// zones: the ring holds three of them and two zones of notes.
pub fn checkpoint_budget_bytes(geometry: &Geometry, meta_zone_count: u32) -> u64 {
    let cap = geometry.zone_capacity_blocks;
    let blocks = u64::from(meta_zone_count.saturating_sub(2)) * cap / 3;
    blocks * (u64::from(geometry.block_size_bytes) - 64)
}
