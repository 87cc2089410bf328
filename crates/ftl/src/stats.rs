//! Counters the FTL keeps and the figures derived from them.

use crate::mapping::Mapping;
use crate::zone::{Stream, ZoneKind, ZoneTable};
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
    /// Of those, blocks only snapshots held, written to the kept stream's
    /// zones.
    pub gc_kept_blocks: u64,
    pub meta_write_blocks: u64,
    pub pad_blocks: u64,
    /// Blocks of FUA writes written into the urgent lane's zone, while the
    /// host lanes had no room (padding included; `ftl/urgent.rs`).
    pub urgent_lane_blocks: u64,
    /// Zone summary blocks written (tags in band; part of media writes).
    pub summary_write_blocks: u64,
    /// GC victims whose LBAs came from a walk of the map because they had
    /// no usable summary (closed early, cut by a power loss, damaged).
    pub summary_map_walks: u64,
    pub erases: u64,
    /// GC's device time in µs as `FtlConfig::gc_budget` costs it (reads,
    /// copies, resets of collections; counted with or without a budget).
    pub gc_device_us: u64,
    /// Of it, what went out whatever the budget said: while the free zones
    /// were down to the GC reserve, nothing else was in flight, or a
    /// failing zone was retired.
    pub gc_unbudgeted_us: u64,
    /// Times a collection's read waited for the budget.
    pub gc_budget_waits: u64,
    /// Victims' resets that waited for urgent appends
    /// (`FtlConfig::gc_reset_yields_to_urgent`).
    pub gc_resets_yielded: u64,
    pub flushes: u64,
    pub checkpoints: u64,
    pub read_errors: u64,
    pub write_errors: u64,
    /// The volume is read-only: a metadata write failed (until a remount),
    /// or its metadata can no longer be written at all (then it mounts
    /// read-only: the end of its life).
    pub read_only: bool,
    /// Flushes, zone resets, finishes and host reads issued again after a
    /// host-side failure (a command a controller reset aborted).
    pub host_retries: u64,
    /// Range-operation vectors applied, and refused by their check
    /// (immutable range, merge conflict, shared table full).
    pub range_vectors: u64,
    pub range_vectors_refused: u64,
    /// Operations applied by kind, and the blocks they covered.
    pub range_clones: u64,
    pub range_clone_blocks: u64,
    pub range_moves: u64,
    pub range_move_blocks: u64,
    pub range_deletes: u64,
    pub range_delete_blocks: u64,
    pub range_merges: u64,
    pub range_merge_blocks: u64,
    pub range_attribute_changes: u64,
    /// Notes the vectors logged (pins included), and the pins alone.
    pub range_notes: u64,
    pub range_pins: u64,
    /// Log packs that carried vectors' replies (group commits).
    pub range_commits: u64,
    /// Blocks of the physical segment written (nameless writes and
    /// overwrites), read, and freed (by frees and overwrites) since mount.
    pub nameless_write_blocks: u64,
    pub nameless_read_blocks: u64,
    pub nameless_free_blocks: u64,
    /// Events of the post-crash hand-over taken by the client
    /// (`NamelessEvent::Unrecorded`) since mount.
    pub nameless_handover_blocks: u64,
    /// In band (md placement log): md blocks written after nameless
    /// groups since mount, and groups whose md append failed (kept in
    /// memory and in checkpoints while their zone holds a live block),
    /// mount's orphans included.
    pub nameless_md_write_blocks: u64,
    pub nameless_md_stuck_groups: u64,
    /// Nameless blocks GC migrated (each with a `Migrated` event; also in
    /// gc_copy_blocks) since mount, and the times migration stopped
    /// because the remap table (or the checkpoint's room for it) had no
    /// room for a victim's live blocks: acknowledgements make room.
    pub nameless_migrated_blocks: u64,
    pub nameless_remap_full_stops: u64,
    /// Metadata the migrations cost since mount, in bytes: their notes
    /// (a `NamelessMigrate` per block moved, a `NamelessAck` per entry
    /// acknowledged; 32 bytes each, packed into log blocks with the other
    /// notes), and the remap entries the checkpoints written carried
    /// (16 bytes each, every checkpoint repeats the table).
    pub nameless_migration_note_bytes: u64,
    pub nameless_remap_checkpoint_bytes: u64,
    /// The most entries the remap table held since mount (it holds
    /// `nameless_remap_entries` now).
    pub nameless_remap_peak_entries: u64,
    /// In-place collections of nameless zones finished since mount, the
    /// live blocks they staged in scratch zones (in media_write_blocks),
    /// and the pad blocks they wrote into gaps (wasted until the zone is
    /// collected again).
    pub nameless_inplace_jobs: u64,
    pub nameless_staged_blocks: u64,
    pub nameless_pad_blocks: u64,
    /// Queued nameless write blocks in-place collections wrote into their
    /// victims' gaps (gap fills: room reclaimed; also in
    /// nameless_write_blocks), and the in-place collections GC chose by
    /// itself (its in-place victim, beside the logical and migration ones).
    pub nameless_gap_fill_blocks: u64,
    /// Of the gap fills, the blocks of overwrites (each replaced block
    /// freed once its job's `InPlaceDone` was durable).
    pub nameless_overwrite_fill_blocks: u64,
    pub nameless_inplace_gc_victims: u64,
    /// Live gap fills now: the entries of step 7's map (8 bytes each in
    /// memory and in every checkpoint).
    pub nameless_fill_entries: u64,
    // Derived by `fill_from`.
    /// media_write_blocks ÷ (host_write_blocks + nameless_write_blocks)
    /// (0 before any write).
    pub write_amplification: f64,
    pub free_zones: u32,
    pub data_zones: u32,
    /// Zones taken out of service (worn out, failed program or erase).
    pub retired_zones: u32,
    /// Data zones the kept stream holds (blocks GC moved that only
    /// snapshots held), those it took since mount: a mount makes them GC
    /// zones.
    pub kept_zones: u32,
    /// Logical blocks mapped (a shared block counts once per owner).
    pub mapped_blocks: u64,
    /// Physical blocks holding live data.
    pub live_blocks: u64,
    /// Of those, blocks of the physical segment (nameless writes), and the
    /// zones that hold them.
    pub nameless_live_blocks: u64,
    pub nameless_zones: u32,
    /// Nameless blocks written since the client's last commit (the
    /// uncommitted set), and hand-over events prepared or still to prepare
    /// and not yet taken.
    pub nameless_uncommitted_blocks: u64,
    pub nameless_events_pending: u64,
    /// Entries of the remap table (migrated blocks not yet acknowledged)
    /// and how many it holds at most.
    pub nameless_remap_entries: u64,
    pub nameless_remap_capacity: u64,
    /// Physical blocks named by more than one logical block, or by one
    /// whose tag names another (moved): reached through the shared table.
    pub shared_blocks: u64,
    /// Logical blocks that name a shared block.
    pub shared_refs: u64,
    /// Bytes of the shared table (part of map_memory_bytes).
    pub shared_memory_bytes: u64,
    /// Media bytes sharing saves: logical blocks naming a shared block
    /// beyond one per shared block, in bytes.
    pub shared_saved_bytes: u64,
    /// range_vectors ÷ range_commits (0 before any).
    pub vectors_per_commit: f64,
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_mean: f64,
    pub erase_count_stddev: f64,
    /// Erase counts above are over data and free zones; this is the highest
    /// among the superblock and metadata zones.
    pub metadata_erase_count_max: u32,
    /// L2P + P2L + shared table bytes, plus the summaries being collected (in band).
    pub map_memory_bytes: u64,
    /// map_memory_bytes ÷ mapped_blocks (0 when nothing is mapped).
    pub map_bytes_per_mapped_block: f64,
    /// Snapshots created and deleted since mount.
    pub snapshot_creates: u64,
    pub snapshot_deletes: u64,
    /// Reverts since mount, and the blocks they changed (no data copied).
    pub snapshot_reverts: u64,
    pub snapshot_revert_blocks: u64,
    /// Forks created and deleted since mount, and the blocks the deletes
    /// unmapped.
    pub fork_creates: u64,
    pub fork_deletes: u64,
    pub fork_delete_blocks: u64,
    /// Live forks.
    pub forks: u64,
    /// Protection-window points dropped for age (or blocks written),
    /// dropped because a write, trim or vector needed their room, and
    /// point changes that failed.
    pub window_points_expired: u64,
    pub window_points_given_way: u64,
    pub window_point_failures: u64,
    /// Window points held, and the wall time of the oldest (ns since the
    /// Unix epoch; 0: none): the oldest time a revert can reach.
    pub window_points: u64,
    pub window_oldest_ns: u64,
    /// Host blocks written since the oldest point was taken (since the
    /// mount for a point the mount recovered; 0: no point): how far back,
    /// in blocks written, a revert reaches.
    pub window_reach_blocks: u64,
    /// Kept versions that deletes released since mount.
    pub snapshot_versions_released: u64,
    /// Live snapshots.
    pub snapshots: u64,
    /// Replaced versions the snapshots keep (some of them "unmapped").
    pub snapshot_versions: u64,
    /// Blocks only snapshots hold (no live block names them): what
    /// deleting every snapshot gives back, in blocks.
    pub snapshot_retained_blocks: u64,
    /// Bytes of the snapshot books (part of map_memory_bytes).
    pub snapshot_memory_bytes: u64,
    /// Versions the snapshots may still keep before writes that replace
    /// kept blocks fail with `SnapshotSpace` (the bound of the history, the
    /// shared table and the checkpoint's room in the metadata log).
    pub snapshot_room_versions: u64,
}

impl FtlStats {
    pub(crate) fn fill_from(
        &mut self,
        zones: &ZoneTable,
        mapping: &Mapping,
        pending_summary_bytes: u64,
        block_size_bytes: u32,
    ) {
        self.write_amplification = ratio(
            self.media_write_blocks,
            self.host_write_blocks + self.nameless_write_blocks,
        );
        self.free_zones = zones.free_count();
        self.retired_zones = zones
            .iter()
            .filter(|(_, z)| z.kind() == ZoneKind::Retired)
            .count() as u32;
        self.kept_zones = zones
            .iter()
            .filter(|(_, z)| {
                z.kind()
                    == ZoneKind::Data {
                        stream: Stream::Kept,
                    }
            })
            .count() as u32;
        self.data_zones = zones
            .iter()
            .filter(|(_, z)| matches!(z.kind(), ZoneKind::Data { .. } | ZoneKind::Free))
            .count() as u32;
        self.mapped_blocks = mapping.mapped_blocks();
        self.live_blocks = mapping.live_blocks();
        self.nameless_live_blocks = mapping.nameless_blocks();
        self.nameless_zones = zones.nameless_zone_count();
        self.shared_blocks = mapping.shared_blocks();
        self.shared_refs = mapping.shared_refs();
        self.shared_memory_bytes = mapping.shared_memory_bytes();
        self.shared_saved_bytes =
            (mapping.shared_refs() - mapping.shared_blocks()) * u64::from(block_size_bytes);
        self.vectors_per_commit = ratio(self.range_vectors, self.range_commits);
        let history = mapping.history();
        self.snapshots = history.snapshots().len() as u64;
        self.snapshot_versions = history.entry_count();
        self.forks = mapping.forks().iter().count() as u64;
        self.snapshot_memory_bytes = history.memory_bytes();
        self.snapshot_retained_blocks = if history.keeps_versions() || history.entry_count() > 0 {
            mapping.retained_blocks()
        } else {
            0
        };
        let points = history.snapshots().iter().filter(|s| s.is_point());
        self.window_points = points.clone().count() as u64;
        self.window_oldest_ns = points.map(|s| s.wall_ns).next().unwrap_or(0);
        let wear = zones.wear_spread();
        self.erase_count_min = wear.min_erases;
        self.erase_count_max = wear.max_erases;
        self.erase_count_mean = wear.mean_erases;
        self.erase_count_stddev = wear.stddev_erases;
        self.metadata_erase_count_max = zones.metadata_erase_max();
        self.map_memory_bytes = mapping.memory_bytes() + pending_summary_bytes;
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
