//! The sans-IO FTL state machine.
//!
//! Host requests come in through [`Ftl::handle_request`], device completions
//! through [`Ftl::handle_completion`]; device commands go out through
//! [`Ftl::poll_command`] and host replies through [`Ftl::poll_reply`]. The
//! core never blocks, reads no clock and owns no device: a driver moves
//! commands and completions between it and a [`crate::Backend`].
//!
//! Ordering rules that make crash recovery exact (docs/format.md):
//! - a host block gets its seq when it is handed to the device, so every
//!   block with a seq below a checkpoint's `next_seq` is reflected in it;
//! - the map changes only on completion, and GC remaps a block only if the
//!   map still points where GC read it from (a racing host write wins);
//! - a zone is reset only after a durable ZoneReset note, which the log's
//!   prefix order makes durable together with every earlier Reloc note.
//!
//! A host read sees the map as of its planning (the first poll after its
//! request): every write acknowledged before then, and maybe writes
//! acknowledged after its request; never older data than at its request.
//!
//! The `impl Ftl` is split by what each part owns: `request` (the types the
//! host sees), `read`, `write` (admission, trims, flushes), `lane` (open
//! zones and host appends), `reloc` (GC, wear leveling, retirement), `meta`
//! (the metadata log glue) and `ckpt` (checkpoints and superblocks). This
//! module keeps the struct, the entry points, command dispatch and
//! introspection.

mod ckpt;
mod gc_budget;
mod inplace;
mod lane;
mod md_groups;
mod meta;
mod migrate;
mod nameless;
mod range;
mod read;
mod reloc;
mod request;
mod summaries;
mod urgent;
mod window;
mod write;

use crate::addr::{Epoch, Lba, Ppa, Seq};
use crate::attr::AttrMap;
use crate::backend::HOST_ATTEMPTS;
use crate::backend::{Command, Completion, DeviceError, Geometry, ZoneId};
use crate::buffer::{SlotId, WriteBuffer};
use crate::config::FtlConfig;
use crate::error::IoError;
use crate::history::SnapshotId;
use crate::layout::{Layout, SUPER_ZONES};
use crate::log::MetaLog;
use crate::mapping::Mapping;
use crate::nameless::NamelessAddr;
use crate::slab::{Key, Slab};
use crate::stats::FtlStats;
use crate::superblock::TagMode;
use crate::tag::DataCrcImpl;
use crate::zone::{ZoneKind, ZoneTable};
use ckpt::CkptState;
use lane::{Lane, StreamState};
use range::{RangeState, SnapshotChange};
use read::{ReadPart, ReadReq};
use reloc::{GcJob, RelocItem};
use std::collections::VecDeque;

/// Zones' worth of blocks that versions kept for snapshots leave free of
/// the usable space, so GC always finds dead blocks to collect.
const KEPT_SLACK_ZONES: u64 = 2;

/// A read accepted and not yet looked up: request id, lba, blocks, and the
/// snapshot it reads with its create seq and epoch (`None`: the live
/// volume).
type UnplannedRead = (u64, Lba, u32, Option<(SnapshotId, Seq, Epoch)>);
use write::{FlushWait, WaitingWrite};

pub(crate) use inplace::staging_index_entries;
pub use nameless::NAMELESS_MD_BYTES;
pub use request::{Extent, Reply, ReplyData, Request, MAX_EXTENT_QUERY_BLOCKS};
pub use window::{MAX_WINDOW_POINTS, MIN_POINT_INTERVAL_BLOCKS};

/// Background work in progress.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Activity {
    pub gc: bool,
    pub checkpoint: bool,
}

/// Everything a mounted FTL is made of; built by format or recovery.
pub(crate) struct Parts {
    pub geometry: Geometry,
    pub config: FtlConfig,
    pub layout: Layout,
    pub tag_mode: TagMode,
    pub uuid: [u8; 16],
    pub mapping: Mapping,
    pub attrs: AttrMap,
    pub zones: ZoneTable,
    pub next_seq: Seq,
    pub log: MetaLog,
    pub super_generation: u64,
    pub super_wp_blocks: [u64; 2],
    pub super_dead: [bool; 2],
    pub gc_reserve_zones: u32,
    /// Per zone, the generation of its nameless data.
    pub nameless_gens: Vec<u32>,
    /// Per zone, the `base_gen`, and the live gap fills' birth generations.
    pub nameless_births: crate::births::Births,
    /// The uncommitted set as recovered (live blocks, increasing), and the
    /// seq of the newest commit note (0: none).
    pub nameless_uncommitted: Vec<Ppa>,
    pub nameless_commit_seq: Seq,
    /// The remap table as recovered: (old, new), old increasing.
    pub nameless_remap: Vec<(NamelessAddr, NamelessAddr)>,
    /// In band: per zone, the offset past its last nameless data block and
    /// where its last group's md landed (`u32::MAX`: right after the data);
    /// empty for a fresh volume. And the recovered groups whose md the mount
    /// found on the media nowhere and had no room to write: (zone, group,
    /// entries).
    pub nameless_tails: Vec<(u32, u32)>,
    pub nameless_stuck: Vec<(ZoneId, u64, Vec<crate::nameless::MdEntry>)>,
}

/// Who gets the answer to a request the core runs: the caller (its id),
/// or the core itself (the protection window's points). The core's own
/// never reach [`Ftl::poll_reply`], so every `u64` is the caller's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReplyTo {
    Caller(u64),
    Core,
    /// The flush of the nameless commit of this caller's request: the
    /// commit note follows it.
    NamelessCommit(u64),
    /// The flush ahead of the acknowledgements of this caller's nameless
    /// commit: they are logged at once, not behind the writes it covers.
    NamelessCommitAcks(u64),
    /// The notes of a batch of migrations: its events go out once durable.
    Migrated(u64),
}

#[derive(Debug)]
enum Op {
    HostAppend {
        zone: ZoneId,
        slots: Vec<(SlotId, Seq, u32)>,
        pad_blocks: u32,
    },
    GcAppend {
        zone: ZoneId,
        items: Vec<RelocItem>,
        pad_blocks: u32,
    },
    HostRead(ReadPart),
    GcRead {
        ppa: Ppa,
        count: u32,
        attempts: u8,
    },
    LogWrite {
        first_log_seq: u64,
        count: u64,
    },
    LogReset {
        zone: ZoneId,
    },
    LogFinish {
        zone: ZoneId,
    },
    SuperReset {
        copy: usize,
    },
    SuperWrite {
        copy: usize,
    },
    SummaryWrite {
        zone: ZoneId,
        blocks: u64,
    },
    /// Md blocks of a nameless zone's group (md placement log).
    MdWrite {
        zone: ZoneId,
        blocks: u64,
    },
    ZoneFinish {
        zone: ZoneId,
    },
    SummaryRead {
        zone: ZoneId,
        count: u32,
    },
    VictimFlush {
        zone: ZoneId,
    },
    VictimReset {
        zone: ZoneId,
    },
    HostFlush {
        /// Each waiter and the reply it gets once durable.
        waiters: Vec<(ReplyTo, ReplyData)>,
    },
    CkptFlush,
    /// The flush a range-operation vector waits for before its notes.
    RangeFlush,
    NamelessAppend(nameless::NamelessAppend),
    /// Copies of a migration victim's live blocks.
    MigrateAppend {
        zone: ZoneId,
        items: Vec<migrate::MoveItem>,
        pad_blocks: u32,
    },
    /// In band, md blocks of a migration victim's group (`first_block`
    /// is the index of the first in the group's md).
    VictimMdRead {
        zone: ZoneId,
        first_block: u64,
        blocks: u64,
    },
    NamelessRead(nameless::NamelessRead),
    /// A read that prepares a hand-over event.
    HandoverRead(nameless::NamelessRead),
    /// A command of the in-place job.
    InPlace(inplace::InPlaceOp),
}

/// The FTL core. See the module documentation.
pub struct Ftl {
    geo: Geometry,
    cfg: FtlConfig,
    layout: Layout,
    tag_mode: TagMode,
    uuid: [u8; 16],
    mapping: Mapping,
    /// Range attributes (immutable, non-persistent).
    attrs: AttrMap,
    zones: ZoneTable,
    zone_readers: Vec<u32>,
    zone_appends: Vec<u32>,
    /// Blocks of GC's victim reads in flight, by zone group
    /// (`FtlConfig::gc_read_max_blocks_per_group`).
    gc_read_blocks_by_group: Vec<u32>,
    buffer: WriteBuffer,
    buffered_new: u64,
    /// Map leaves of fork regions that buffered writes will take when they
    /// land (bounded by the buffer: cleared whenever it is empty).
    fork_leaves_pending: std::collections::HashSet<u64>,
    max_mapped_blocks: u64,
    /// Blocks the data zones hold, less the GC reserve and open lanes:
    /// kept versions may fill the room the logical size leaves, up to
    /// [`KEPT_SLACK_ZONES`] zones short of it.
    usable_blocks: u64,
    /// Blocks at the end of each data zone that hold its summary (0 with
    /// OOB tags): fixed by the geometry and tag mode.
    summary_blocks: u64,
    gc_reserve_zones: u32,
    next_seq: Seq,
    epoch: Epoch,
    log: MetaLog,
    /// Open zone of each lane (indexed by `Lane::index`): the base
    /// lanes, then the extra GC lanes (at most `lane::MAX_GC_LANES - 1`).
    lanes: Vec<StreamState>,
    /// Zones host writes of one temperature go to at once
    /// (`FtlConfig::host_stripes`, clamped): the host lane and
    /// `host_stripes - 1` of the `Lane::HostStripe` lanes.
    host_stripes: u8,
    /// Host blocks admitted so far: the clock temperature is measured in.
    host_clock: u64,
    /// `host_clock` when each zone was opened by a host stream (0 for GC
    /// zones and after mount: their data counts as old).
    zone_clock: Vec<u64>,
    /// The jobs copying their victims' live blocks (or reading a summary):
    /// at most `gc_victims` (`reloc::MAX_GC_VICTIMS`), and one at a time
    /// for leveling and retirement.
    jobs: Vec<GcJob>,
    /// The jobs whose copies are done: their notes, flushes and resets
    /// (at most `reloc::CLOSING_JOBS`, or `CLOSING_JOBS_WIDE` with spread GC).
    closing: Vec<GcJob>,
    /// Zone summaries being collected (tags in band): at most one per lane
    /// plus those waiting for their zone's appends.
    summaries: Vec<summaries::PendingSummary>,
    /// Zones sealed before they were full, to finish on the device once
    /// their appends complete (each is one a lane held: a few at most).
    finish_pending: Vec<ZoneId>,
    retire_queue: VecDeque<ZoneId>,
    /// Appends failed on the host side (`HostIo`) since the last one that
    /// succeeded: see [`Ftl::write_failed`].
    host_write_failures: u32,
    /// GC jobs since the last static wear-leveling move.
    jobs_since_wl: u32,
    /// Blocks read by GC waiting to be written: per temperature, then those
    /// only snapshots hold (`reloc::KEPT_QUEUE`).
    gc_queues: [VecDeque<RelocItem>; 3],
    gc_in_flight: u32,
    host_appends_in_flight: u32,
    ckpt: CkptState,
    ckpt_requested: bool,
    /// The checkpoint being written is a clean shutdown's.
    clean_requested: bool,
    /// `next_seq` of the checkpoint both superblocks point at, and of the
    /// one being written: blocks written since the committed one are known
    /// to recovery only by their tags (OOB) or notes.
    committed_next_seq: Seq,
    /// No checkpoint has committed since this core started: a mount's log
    /// may go on past a torn block that the next mount's roll-forward
    /// stops at, so nothing irreversible (a victim's reset) may rest on a
    /// note written until a checkpoint makes them reachable.
    first_checkpoint_pending: bool,
    /// A snapshot create with tags in OOB found the history idle at this
    /// seq: blocks written before it since the committed checkpoint are
    /// known to recovery by their tags alone, so GC resets none of their
    /// zones until a checkpoint captured after it commits
    /// (`reloc::reset_fenced`).
    tag_only_fence: Option<Seq>,
    capture_next_seq: Seq,
    /// Range-operation vectors: the queue and the one being run.
    ranges: RangeState,
    blocks_since_checkpoint: u64,
    super_generation: u64,
    super_wp_blocks: [u64; 2],
    /// Superblock zones that failed a write or reset.
    super_dead: [bool; 2],
    /// Superblock writes aborted on the host side in a row, per copy.
    super_aborts: [u8; 2],
    /// Commands in flight, keyed by the tag they were submitted with
    /// (at most `max_inflight_commands`).
    ops: Slab<Op>,
    /// Attempts made of each command in flight, by its slot in `ops`.
    op_attempts: Vec<u8>,
    /// For a flush in flight, by its slot in `ops`: `appends_done` when it
    /// was issued (what it makes durable).
    flush_marks: Vec<u64>,
    /// Data appends completed so far, and how many of them a completed
    /// device flush has made durable.
    appends_done: u64,
    flushed_through: u64,
    /// Flushes, zone resets and finishes to issue again after a host-side
    /// failure, with the attempts made: each left `ops`, so at most
    /// `max_inflight_commands`.
    repeats: VecDeque<(Op, Command, u8)>,
    read_queue: VecDeque<ReadPart>,
    /// Host reads of several parts waiting on the device, and how many
    /// single-part reads are (together at most `max_host_requests`).
    reads: Slab<ReadReq>,
    whole_reads: usize,
    /// Host reads accepted but not yet looked up: (id, lba, block_count).
    /// Planned together at the next poll (see `plan_reads`).
    /// Accepted reads not yet looked up.
    unplanned_reads: VecDeque<UnplannedRead>,
    /// Scratch, kept so a read allocates nothing: one batch's L2P lookups,
    /// and one request's device reads.
    read_lookups: Vec<Option<crate::mapping::Resolved>>,
    read_plan: Vec<ReadPart>,
    /// The last `poll_command` ran `advance` (or followed one that did)
    /// and issued a host read, and nothing came in since: issuing a read
    /// changes nothing `advance` looks at, so the next poll may skip it.
    advanced_then_read: bool,
    waiting_writes: VecDeque<WaitingWrite>,
    /// Scratch of `admit_writes`: per block of one request, whether the
    /// buffer holds it and its mapping (at most a request's blocks).
    admit_facts: Vec<write::AdmitFact>,
    /// The data CRCs of the request being admitted (reused, as `admit_facts`).
    admit_crcs: Vec<u32>,
    flushes: Vec<FlushWait>,
    replies: VecDeque<Reply>,
    read_only: bool,
    device_gone: bool,
    /// Host writes may use the GC reserve: GC found nothing to collect.
    reserve_unlocked: bool,
    /// The urgent lane's zone came from below the GC reserve: it opens no
    /// other there until a host lane has opened one or the reserve is
    /// refilled (`ftl/urgent.rs`).
    urgent_below_reserve: bool,
    /// The media has no room left for data already accepted: read-only.
    space_exhausted: bool,
    now_ns: u64,
    /// By zone group, the clock at the last urgent append there (FUA
    /// blocks, or blocks a flush waits for)
    /// (`FtlConfig::gc_reset_yields_to_urgent`).
    urgent_appended_ns: Vec<Option<u64>>,
    /// GC's device-time budget (`FtlConfig::gc_budget`), if one is set.
    gc_bucket: Option<gc_budget::GcBucket>,
    /// A collection's read waits for the budget (`FtlStats::gc_budget_waits`
    /// counts the waits, not the polls).
    gc_budget_waiting: bool,
    window: window::WindowState,
    /// The physical segment (nameless writes).
    nameless: nameless::NamelessState,
    /// The in-place collection running, if any (at most one).
    inplace: Option<inplace::InPlaceJob>,
    /// Gap fills of the last in-place job (N_last of GC's in-place score).
    last_inplace_fills: u64,
    /// S_write of GC's in-place score.
    arrivals: inplace::Arrivals,
    stats: FtlStats,
}

impl Ftl {
    pub(crate) fn from_parts(p: Parts) -> Ftl {
        let zone_count = p.geometry.zone_count as usize;
        let zone_groups = p.geometry.zone_groups;
        let lane_data_zones = p.geometry.zone_count - p.layout.first_data_zone();
        let epoch = p.mapping.history().epoch();
        let in_band = p.tag_mode == TagMode::InBand;
        let summary_blocks = crate::layout::summary_blocks_per_zone(&p.geometry, in_band);
        let data_cap = p.geometry.zone_capacity_blocks - summary_blocks;
        let data_zones = (p.layout.first_data_zone()..p.geometry.zone_count)
            .filter(|&z| p.zones.get(z).kind() != ZoneKind::Retired)
            .count() as u64;
        let set_aside = u64::from(p.gc_reserve_zones + crate::layout::OPEN_DATA_LANES);
        let max_commands = p.config.max_inflight_commands.max(1) as usize;
        let max_reads = p.config.max_host_requests.max(1) as usize;
        let zone_capacity_blocks = p.geometry.zone_capacity_blocks;
        let placement = nameless::segment_placement(p.tag_mode, p.geometry.oob_size_bytes as usize);
        let nameless_supported = placement.is_some();
        let md_groups = (placement == Some(crate::nameless::MdPlacement::Log)).then(|| {
            let layout = crate::nameless::MdLayout::new(
                p.geometry.block_size_bytes as usize,
                NAMELESS_MD_BYTES,
                p.geometry.zone_capacity_blocks,
            );
            let mut m = md_groups::MdGroups::new(layout, NAMELESS_MD_BYTES, zone_count);
            if !p.nameless_tails.is_empty() {
                m.tails = p.nameless_tails;
            }
            for (zone, group, entries) in p.nameless_stuck {
                m.add_stuck(zone, group, entries);
            }
            m
        });
        let stuck_groups = md_groups.as_ref().map_or(0, |m| m.open.len() as u64);
        let nameless_empty_zones = p
            .zones
            .iter()
            .filter(|&(z, zone)| zone.kind().is_nameless() && p.mapping.valid_blocks(z) == 0)
            .count() as u32;
        let usable = data_zones.saturating_sub(set_aside) * data_cap;
        let stats = FtlStats {
            nameless_remap_peak_entries: p.nameless_remap.len() as u64,
            nameless_md_stuck_groups: stuck_groups,
            ..FtlStats::default()
        };
        Ftl {
            buffer: WriteBuffer::new(
                p.config.write_buffer_blocks,
                u64::from_le_bytes(p.uuid[..8].try_into().expect("8 bytes")),
            ),
            max_mapped_blocks: usable.min(p.layout.logical_blocks),
            usable_blocks: usable,
            summary_blocks,
            zone_readers: vec![0; zone_count],
            zone_appends: vec![0; zone_count],
            gc_read_blocks_by_group: vec![0; zone_groups.max(1) as usize],
            geo: p.geometry,
            // Resolved once: the implementation stays the same while mounted.
            cfg: FtlConfig {
                data_crc: Some(p.config.data_crc_impl()),
                ..p.config
            },
            layout: p.layout,
            tag_mode: p.tag_mode,
            uuid: p.uuid,
            mapping: p.mapping,
            attrs: p.attrs,
            committed_next_seq: p.next_seq,
            first_checkpoint_pending: true,
            tag_only_fence: None,
            capture_next_seq: p.next_seq,
            clean_requested: false,
            ranges: RangeState::new(),
            zones: p.zones,
            buffered_new: 0,
            fork_leaves_pending: Default::default(),
            gc_reserve_zones: p.gc_reserve_zones,
            next_seq: p.next_seq,
            epoch,
            log: p.log,
            lanes: lane::new_lanes(p.config.gc_lanes, zone_groups, lane_data_zones),
            host_stripes: lane::host_stripes(p.config.host_stripes, zone_groups, lane_data_zones),
            host_clock: 0,
            zone_clock: vec![0; zone_count],
            jobs: Vec::new(),
            closing: Vec::new(),
            summaries: Vec::new(),
            finish_pending: Vec::new(),
            retire_queue: VecDeque::new(),
            host_write_failures: 0,
            jobs_since_wl: 0,
            gc_queues: Default::default(),
            gc_in_flight: 0,
            host_appends_in_flight: 0,
            ckpt: CkptState::Idle,
            ckpt_requested: false,
            blocks_since_checkpoint: 0,
            super_generation: p.super_generation,
            super_wp_blocks: p.super_wp_blocks,
            super_dead: p.super_dead,
            super_aborts: [0; 2],
            ops: Slab::new(max_commands),
            op_attempts: vec![0; max_commands],
            flush_marks: vec![0; max_commands],
            appends_done: 0,
            flushed_through: 0,
            repeats: VecDeque::with_capacity(max_commands),
            read_queue: VecDeque::new(),
            reads: Slab::new(max_reads),
            whole_reads: 0,
            unplanned_reads: VecDeque::new(),
            read_lookups: Vec::new(),
            read_plan: Vec::new(),
            advanced_then_read: false,
            waiting_writes: VecDeque::new(),
            admit_facts: Vec::new(),
            admit_crcs: Vec::new(),
            flushes: Vec::new(),
            replies: VecDeque::new(),
            read_only: false,
            device_gone: false,
            reserve_unlocked: false,
            urgent_below_reserve: false,
            space_exhausted: false,
            now_ns: 0,
            urgent_appended_ns: vec![None; zone_groups.max(1) as usize],
            gc_bucket: p.config.gc_budget.map(gc_budget::GcBucket::new),
            gc_budget_waiting: false,
            window: window::WindowState::default(),
            nameless: nameless::NamelessState::new(
                nameless::Recovered {
                    gens: p.nameless_gens,
                    births: p.nameless_births,
                    uncommitted: p.nameless_uncommitted,
                    commit_seq: p.nameless_commit_seq,
                    remap: p.nameless_remap,
                },
                nameless_empty_zones,
                nameless_supported,
                md_groups,
                max_reads,
                p.config.nameless_uncommitted_blocks,
                p.config.nameless_remap_entries,
                zone_capacity_blocks,
            ),
            inplace: None,
            last_inplace_fills: 0,
            arrivals: inplace::Arrivals::default(),
            stats,
        }
    }

    // ----- public surface -------------------------------------------------

    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    pub fn logical_blocks(&self) -> u64 {
        self.layout.logical_blocks
    }

    pub fn block_size(&self) -> usize {
        self.geo.block_size_bytes as usize
    }

    pub fn uuid(&self) -> [u8; 16] {
        self.uuid
    }

    /// The implementation that takes the data CRCs of this volume's
    /// blocks ([`FtlConfig::data_crc`]); a caller that takes a write's CRCs
    /// itself ([`crate::SummedBlocks`]) uses it too.
    pub fn data_crc(&self) -> DataCrcImpl {
        self.cfg.data_crc_impl()
    }

    pub fn tag_mode(&self) -> TagMode {
        self.tag_mode
    }

    /// The driver tells the core the time: it fills GC's device-time
    /// budget (`FtlConfig::gc_budget`) and paces the in-place collection.
    pub fn handle_time(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
        if let Some(bucket) = &mut self.gc_bucket {
            bucket.refill(self.now_ns);
        }
    }

    /// Requests a checkpoint as soon as possible (shutdown, after mount).
    pub fn request_checkpoint(&mut self) {
        self.advanced_then_read = false;
        self.ckpt_requested = true;
    }

    /// Requests the checkpoint of a clean shutdown: marked clean, so a
    /// mount that finds nothing logged after it keeps non-persistent ranges.
    pub fn request_clean_checkpoint(&mut self) {
        self.clean_requested = true;
        self.request_checkpoint();
    }

    /// Whether no checkpoint is pending or being written.
    pub fn checkpoint_idle(&self) -> bool {
        matches!(self.ckpt, CkptState::Idle) && !self.ckpt_requested
    }

    /// Commands in flight on the device.
    pub fn commands_in_flight(&self) -> usize {
        self.ops.len()
    }

    /// Host blocks in the write buffer waiting to be sent to the device.
    pub fn queued_blocks(&self) -> usize {
        self.buffer.queued()
    }

    /// Whether the core has nothing left to do until a new request arrives.
    pub fn is_idle(&self) -> bool {
        self.ops.is_empty()
            && self.repeats.is_empty()
            && self.replies.is_empty()
            && self.unplanned_reads.is_empty()
            && self.flushes.is_empty()
            && self.waiting_writes.is_empty()
            && self.read_queue.is_empty()
            && self.buffer.used_slots() == 0
            && self.checkpoint_idle()
            && self.ranges.is_idle()
            && self.nameless.is_idle()
            && self.inplace.is_none()
    }

    /// What background work is under way (tests use it to aim power cuts).
    pub fn activity(&self) -> Activity {
        Activity {
            gc: !self.jobs.is_empty() || !self.closing.is_empty(),
            checkpoint: !matches!(self.ckpt, CkptState::Idle),
        }
    }

    /// A one-paragraph summary of the core's state, for stall reports.
    pub fn debug_state(&self) -> String {
        format!(
            "ckpt {:?} requested {}; jobs {:?}; flushes {:?}; buffer used {} queued {}; waiting writes {}; \
             closing {:?}; host appends {}; gc in flight {} queue {}; free zones {} (reserve {}); host {:?} gc {:?}; \
             log {}; ops {}; reads unplanned {} planned {}; read_only {}",
            self.ckpt,
            self.ckpt_requested,
            self.jobs,
            self.flushes,
            self.buffer.used_slots(),
            self.buffer.queued(),
            self.waiting_writes.len(),
            self.closing,
            self.host_appends_in_flight,
            self.gc_in_flight,
            self.gc_queued(),
            self.zones.free_count(),
            self.gc_reserve_zones,
            self.lanes[Lane::HostHot.index()],
            self.lanes[Lane::Gc.index()],
            self.log.debug_state(),
            self.ops.len(),
            self.unplanned_reads.len(),
            self.reads.len() + self.whole_reads,
            self.read_only
        )
    }

    pub fn is_read_only(&self) -> bool {
        self.read_only
    }

    /// Takes a host request. `Err(Busy)` when too many are pending; every
    /// other outcome, including bad arguments, arrives as a reply. A read
    /// is looked up at the next [`Self::poll_command`] or
    /// [`Self::poll_reply`], with the reads that arrived alongside it.
    pub fn handle_request(&mut self, id: u64, request: Request) -> Result<(), IoError> {
        if let Request::InFork { fork, request } = request {
            return match self.check_in_fork(fork, &request) {
                Ok(()) => self.handle_request(id, *request),
                Err(e) => {
                    self.replies.push_back(Reply { id, result: Err(e) });
                    Ok(())
                }
            };
        }
        self.advanced_then_read = false;
        let pending = self.reads.len()
            + self.whole_reads
            + self.unplanned_reads.len()
            + self.waiting_writes.len()
            + self.flushes.len()
            + self.ranges.pending()
            + self.ranges.held_len()
            + self.nameless.pending_requests();
        if pending >= self.cfg.max_host_requests as usize {
            return Err(IoError::Busy);
        }
        let host_change = matches!(
            request,
            Request::Write { .. }
                | Request::WriteSummed { .. }
                | Request::Trim { .. }
                | Request::WriteZeroes { .. }
                | Request::Range { .. }
        );
        let trim = matches!(request, Request::Trim { .. } | Request::WriteZeroes { .. });
        let vector = matches!(
            request,
            Request::Range { .. }
                | Request::SnapshotCreate { .. }
                | Request::SnapshotDelete { .. }
                | Request::SnapshotRevert { .. }
                | Request::ForkCreate { .. }
                | Request::ForkDelete { .. }
        );
        if vector && self.ranges.queue_full() {
            return Err(IoError::Busy);
        }
        let result = match request {
            Request::Read { lba, block_count } => self.start_read(id, lba, block_count, None),
            Request::ReadSnapshot {
                snapshot,
                lba,
                block_count,
            } => self.start_read(id, lba, block_count, Some(snapshot)),
            Request::SnapshotCreate { name, wall_ns } => {
                self.start_snapshot(id, SnapshotChange::Create { name, wall_ns })
            }
            Request::SnapshotDelete { id: snapshot } => {
                self.start_snapshot(id, SnapshotChange::Delete { id: snapshot })
            }
            Request::SnapshotRevert { to, undo, wall_ns } => {
                self.start_snapshot(id, SnapshotChange::Revert { to, undo, wall_ns })
            }
            Request::ForkCreate {
                snapshot,
                name,
                wall_ns,
            } => self.start_snapshot(
                id,
                SnapshotChange::ForkCreate {
                    base: snapshot,
                    name,
                    wall_ns,
                },
            ),
            Request::ForkDelete { id: fork } => {
                self.start_snapshot(id, SnapshotChange::ForkDelete { id: fork })
            }
            Request::Write { lba, data, fua } => self.start_write(id, lba, data, None, fua),
            Request::WriteSummed { lba, blocks, fua } => {
                let same_size = blocks.block_bytes() == self.block_size();
                let (data, crcs) = blocks.into_parts();
                self.start_write(id, lba, data, same_size.then_some(crcs), fua)
            }
            Request::Trim { lba, block_count } => {
                self.start_trim(id, lba, block_count, false, false)
            }
            Request::WriteZeroes {
                lba,
                block_count,
                fua,
            } => self.start_trim(id, lba, block_count, true, fua),
            Request::Range { ops } => self.start_range(id, ops),
            Request::Flush => {
                self.add_flush(id);
                Ok(None)
            }
            Request::Extents { lba, block_count } => self.extents(lba, block_count).map(Some),
            Request::Changed {
                since,
                until,
                lba,
                block_count,
            } => self.changed(since, until, lba, block_count).map(Some),
            Request::InFork { .. } => unreachable!("taken at the top"),
            Request::NamelessWrite { data, md, fua } => self
                .start_nameless_write(id, data, md, Vec::new(), fua)
                .map(|()| None),
            Request::NamelessOverwrite { old, data, md, fua } => {
                if old.is_empty() {
                    Err(crate::error::NamelessError::AddressCount {
                        expected: data.len() / self.block_size().max(1),
                        actual: 0,
                    }
                    .into())
                } else {
                    self.start_nameless_write(id, data, md, old, fua)
                        .map(|()| None)
                }
            }
            Request::NamelessRead { addr } => self.start_nameless_read(id, addr).map(|()| None),
            Request::NamelessFree { addrs } => {
                self.nameless_free(addrs).map(|()| Some(ReplyData::Done))
            }
            Request::NamelessCommit => self.start_nameless_commit(id).map(|()| None),
            Request::NamelessAck { olds } => self.nameless_ack(id, olds),
            Request::NamelessEvents { max } => self.nameless_events(id, max).map(|()| None),
        };
        if trim && matches!(result, Err(IoError::SnapshotSpace)) && self.window_gives_way() {
            // Nothing changed: the caller sends it again once a window
            // point is dropped.
            return Err(IoError::Busy);
        }
        if host_change {
            self.window.changes += 1;
        }
        match result {
            Ok(Some(data)) => self.replies.push_back(Reply {
                id,
                result: Ok(data),
            }),
            Ok(None) => {}
            Err(e) => self.replies.push_back(Reply { id, result: Err(e) }),
        }
        Ok(())
    }

    /// Whether `request` may go to fork `fork`: the fork lives and the
    /// request is block I/O inside its region.
    fn check_in_fork(&self, fork: crate::fork::ForkId, request: &Request) -> Result<(), IoError> {
        use crate::fork::ForkError;
        let f = self
            .mapping
            .forks()
            .by_id(fork)
            .ok_or(ForkError::NoSuchId(fork))?;
        let (lba, count) = match request {
            Request::Read { lba, block_count }
            | Request::Trim { lba, block_count }
            | Request::WriteZeroes {
                lba, block_count, ..
            }
            | Request::Extents { lba, block_count } => (*lba, u64::from(*block_count)),
            Request::Write { lba, data, .. } => {
                (*lba, (data.len() / self.block_size().max(1)) as u64)
            }
            Request::WriteSummed { lba, blocks, .. } => (
                *lba,
                (blocks.data().len() / self.block_size().max(1)) as u64,
            ),
            Request::Flush => return Ok(()),
            _ => return Err(ForkError::NotBlockIo.into()),
        };
        let inside = lba >= f.lba_offset
            && lba
                .checked_add(count)
                .is_some_and(|end| end <= f.lba_offset + f.block_count);
        if inside {
            Ok(())
        } else {
            Err(IoError::OutOfRange {
                lba,
                block_count: count,
                logical_blocks: f.lba_offset + f.block_count,
            })
        }
    }

    /// Answers `to`: a caller's request, or one of the core's own.
    pub(super) fn deliver(&mut self, to: ReplyTo, result: Result<ReplyData, IoError>) {
        match to {
            ReplyTo::Caller(id) => self.replies.push_back(Reply { id, result }),
            ReplyTo::Core => self.internal_reply(result.as_ref()),
            ReplyTo::NamelessCommit(id) => self.nameless_commit_flushed(id, result),
            ReplyTo::NamelessCommitAcks(id) => self.nameless_commit_acks_flushed(id, result),
            ReplyTo::Migrated(batch) => self.migrations_logged(batch, result),
        }
    }

    /// The next reply to a caller's request. The core's own requests (the
    /// protection window's points) never reply here, so every `u64` is
    /// the caller's to use as an id.
    pub fn poll_reply(&mut self) -> Option<Reply> {
        self.plan_reads();
        self.replies.pop_front()
    }

    /// The next device command, or `None` when the core has nothing to issue
    /// now. The driver calls this only while the device has queue room.
    pub fn poll_command(&mut self) -> Option<(u64, Command)> {
        self.plan_reads();
        if self.ops.len() >= self.cfg.max_inflight_commands as usize {
            return None;
        }
        if let Some((op, cmd, attempts)) = self.repeats.pop_front() {
            let key = self.ops.insert(op);
            self.op_attempts[key.index()] = attempts;
            self.flush_marks[key.index()] = self.appends_done;
            return Some((key.0, cmd));
        }
        let mut advanced = !self.advanced_then_read || self.read_only;
        if advanced {
            self.advance();
        }
        // Each stall step changes state (seal lanes, lend the reserve, give
        // up read-only), so this ends. Before a step, one more advance: the
        // last `next_command` may have started work that only `advance`
        // moves on (a GC job whose victim holds nothing live goes straight
        // to its note and reset); sealing the lanes then wasted their zones.
        let mut rechecked = false;
        let (op, cmd) = loop {
            if let Some(c) = self.next_command() {
                break c;
            }
            if !advanced {
                advanced = true;
                self.advance();
                continue;
            }
            if !self.stalled() {
                self.advanced_then_read = false;
                return None;
            }
            if !rechecked {
                rechecked = true;
                self.advance();
                continue;
            }
            rechecked = false;
            self.resolve_stall();
        };
        self.advanced_then_read = matches!(op, Op::HostRead(_));
        let key = self.ops.insert(op);
        self.op_attempts[key.index()] = 0;
        self.flush_marks[key.index()] = self.appends_done;
        Some((key.0, cmd))
    }

    fn next_command(&mut self) -> Option<(Op, Command)> {
        self.next_log_command()
            .or_else(|| self.next_checkpoint_command())
            .or_else(|| self.next_range_command())
            .or_else(|| self.next_flush_command())
            .or_else(|| self.next_urgent_append())
            .or_else(|| self.next_read_command())
            .or_else(|| self.next_nameless_read())
            .or_else(|| self.next_handover_read())
            .or_else(|| self.next_inplace_command())
            .or_else(|| self.next_job_command())
            .or_else(|| self.next_summary_command())
            .or_else(|| self.next_md_command())
            .or_else(|| self.next_finish_command())
            .or_else(|| self.gc_appends_go().then(|| self.next_gc_append())?)
            .or_else(|| self.gc_appends_go().then(|| self.next_migrate_append())?)
            .or_else(|| self.next_host_append())
            .or_else(|| self.next_nameless_append())
    }

    /// GC's appends (and migrations) may go: not while a due checkpoint is
    /// held (`Ftl::checkpoint_held`).
    fn gc_appends_go(&self) -> bool {
        !self.checkpoint_held()
    }

    /// Work is pending, nothing is in flight and nothing can be issued:
    /// no completion will ever change that.
    fn stalled(&self) -> bool {
        let pending = self.buffer.queued() > 0
            || self.nameless.queued_blocks() > 0
            || self.gc_queued() > 0
            || !self.flushes.is_empty()
            || !self.waiting_writes.is_empty()
            || !self.checkpoint_idle()
            || (!self.ranges.is_idle() && !self.range_runnable())
            || self.log.blocked()
            || self.inplace.is_some();
        !self.read_only && self.ops.is_empty() && pending
    }

    /// Runs one bounded step of work that waits on no device command (a
    /// range-operation vector's check or application); returns whether it
    /// did any. A driver calls it each turn and counts it as progress.
    pub fn poll_work(&mut self) -> bool {
        if !self.range_runnable() && !self.mapping.history().sweeping() {
            return false;
        }
        self.advanced_then_read = false;
        self.advance();
        true
    }

    /// Out of free zones with nothing left to collect: first seal the open
    /// data zones (their stale blocks become collectable), then let host
    /// writes use the GC reserve, then collect a zone with nothing live
    /// beside the jobs held, then declare the media exhausted.
    fn resolve_stall(&mut self) {
        if self.log.blocked() {
            // Lost ring zones left the log no room for the checkpoint that
            // would free some: read-only; a remount starts a fresh log.
            self.metadata_failed();
            self.fail_waiters();
            return;
        }
        if self.nameless_stalled() {
            return;
        }
        // Sealing also unblocks lanes that wait for the device's open
        // zone limit, with free zones left.
        let open: Vec<ZoneId> = self.lanes.iter().filter_map(|l| l.zone).collect();
        if !open.is_empty() {
            for z in open {
                self.seal_zone(z);
            }
            return;
        }
        let free = u64::from(self.zones.free_count());
        assert!(
            free <= u64::from(self.gc_reserve_zones) || self.reserve_unlocked,
            "FTL stalled with free zones left: {}",
            self.debug_state()
        );
        if !self.reserve_unlocked && free > 0 {
            self.reserve_unlocked = true;
            return;
        }
        // A zone with nothing live is a zone free for the cost of a reset.
        if self.start_empty_job() {
            return;
        }
        self.space_exhausted = true;
        self.read_only = true;
        self.fail_waiters();
    }

    pub fn handle_completion(&mut self, completion: Completion) {
        let op = self
            .ops
            .remove(Key(completion.tag))
            .expect("completion for an unknown command");
        let attempts = self.op_attempts[Key(completion.tag).index()] + 1;
        let result = completion.result;
        let is_flush = matches!(
            op,
            Op::HostFlush { .. } | Op::VictimFlush { .. } | Op::CkptFlush | Op::RangeFlush
        );
        if is_flush && result.is_ok() {
            let mark = self.flush_marks[Key(completion.tag).index()];
            self.flushed_through = self.flushed_through.max(mark);
        }
        if matches!(result, Err(DeviceError::HostIo { .. })) && attempts < HOST_ATTEMPTS {
            if let Some(command) = Self::repeatable(&op) {
                self.stats.host_retries += 1;
                self.repeats.push_back((op, command, attempts));
                return;
            }
        }
        if matches!(result, Err(DeviceError::DeviceGone)) {
            self.read_only = true;
            self.device_gone = true;
        }
        match op {
            Op::HostAppend {
                zone,
                slots,
                pad_blocks,
            } => self.host_append_done(zone, slots, pad_blocks, result),
            Op::GcAppend {
                zone,
                items,
                pad_blocks,
            } => self.gc_append_done(zone, items, pad_blocks, result),
            Op::HostRead(part) => {
                self.host_read_done(part, result);
                // A read's completion changes nothing `advance` looks at
                // (pins, replies and statistics), unless the device is gone.
                if !self.read_only {
                    return;
                }
            }
            Op::GcRead {
                ppa,
                count,
                attempts,
            } => self.gc_read_done(ppa, count, attempts + 1, result),
            Op::VictimMdRead {
                zone,
                first_block,
                blocks,
            } => self.victim_md_read_done(zone, first_block, blocks, result),
            Op::NamelessAppend(a) => self.nameless_append_done(a, result),
            Op::MigrateAppend {
                zone,
                items,
                pad_blocks,
            } => self.migrate_append_done(zone, items, pad_blocks, result),
            Op::NamelessRead(r) => {
                self.nameless_read_done(r, result);
                if !self.read_only {
                    return;
                }
            }
            Op::HandoverRead(r) => {
                self.handover_read_done(r, result);
                if !self.read_only {
                    return;
                }
            }
            Op::InPlace(op) => self.inplace_done(op, result),
            Op::LogWrite {
                first_log_seq,
                count,
            } => match result {
                Ok(_) => self.log.on_write_done(first_log_seq, count),
                Err(DeviceError::DeviceGone) => self.metadata_failed(),
                Err(e) => {
                    self.stats.write_errors += 1;
                    let media = !matches!(e, DeviceError::HostIo { .. });
                    self.log.on_write_failed(first_log_seq, media);
                    // The ring lost the rest of a zone until it comes round:
                    // a checkpoint now lets the zones behind it be reused
                    // before another failure leaves the log no room.
                    self.ckpt_requested = true;
                    self.check_log();
                }
            },
            Op::LogReset { zone } => match result {
                Ok(_) => {
                    self.zones.reset_in_place(zone);
                    self.stats.erases += 1;
                    self.log.on_reset_done();
                }
                Err(DeviceError::DeviceGone) => self.metadata_failed(),
                Err(_) => {
                    self.stats.write_errors += 1;
                    self.log.on_reset_failed();
                    self.check_log();
                }
            },
            Op::LogFinish { .. } => self.log.on_finish_done(),
            Op::SuperReset { copy } => match result {
                Ok(_) => {
                    self.super_wp_blocks[copy] = 0;
                    self.zones.reset_in_place(SUPER_ZONES[copy]);
                    self.stats.erases += 1;
                    if let CkptState::Super { busy, .. } = &mut self.ckpt {
                        *busy = false;
                    }
                }
                Err(e) => self.super_failed(copy, e),
            },
            Op::SuperWrite { copy } => self.super_write_done(copy, result),
            Op::SummaryWrite { zone, blocks } => self.summary_write_done(zone, blocks, result),
            Op::MdWrite { zone, blocks } => self.md_write_done(zone, blocks, result),
            // A zone that went read-only or offline cannot be finished, and
            // need not be: it no longer counts against the open limits.
            Op::ZoneFinish { zone } => self.append_settled(zone),
            Op::SummaryRead { zone, count } => self.victim_summary_read(zone, count, result),
            Op::VictimFlush { zone } => self.victim_flushed(zone, result),
            Op::VictimReset { zone } => self.victim_reset_done(zone, result),
            Op::HostFlush { waiters } => {
                let r = result.map_err(|e| match e {
                    DeviceError::DeviceGone => IoError::DeviceGone,
                    source => IoError::Device { lba: 0, source },
                });
                for (to, data) in waiters {
                    let result = r.clone().map(|_| data);
                    self.deliver(to, result);
                }
            }
            Op::CkptFlush => self.checkpoint_flushed(result),
            Op::RangeFlush => self.range_flushed(result),
        }
        self.advanced_then_read = false;
        self.advance();
    }

    /// The command to issue again when `op` failed on the host side: the
    /// idempotent ones (flushes, zone resets and finishes). Writes are not
    /// repeated at the same place (the first may have landed); their
    /// failure paths write the data again elsewhere.
    fn repeatable(op: &Op) -> Option<Command> {
        match *op {
            Op::HostFlush { .. } | Op::VictimFlush { .. } | Op::CkptFlush | Op::RangeFlush => {
                Some(Command::Flush)
            }
            Op::VictimReset { zone } | Op::LogReset { zone } => Some(Command::Reset { zone }),
            Op::InPlace(ref op) => op.repeatable(),
            Op::SuperReset { copy } => Some(Command::Reset {
                zone: SUPER_ZONES[copy],
            }),
            // Left open, the zone would count against the device's limit.
            Op::ZoneFinish { zone } | Op::LogFinish { zone } => Some(Command::Finish { zone }),
            _ => None,
        }
    }

    // ----- admission ------------------------------------------------------

    fn check_range(&self, lba: Lba, block_count: u64) -> Result<(), IoError> {
        let max_blocks = self.cfg.request_blocks_limit();
        if block_count > u64::from(max_blocks) {
            return Err(IoError::TooLarge {
                block_count,
                max_blocks,
            });
        }
        let logical_blocks = self.layout.logical_blocks;
        let outside = lba
            .checked_add(block_count)
            .is_none_or(|end| end > logical_blocks);
        if outside && !self.mapping.forks().holds_range(lba, block_count) {
            return Err(IoError::OutOfRange {
                lba,
                block_count,
                logical_blocks,
            });
        }
        Ok(())
    }

    /// Largest host request, in blocks ([`FtlConfig::request_blocks_limit`]).
    pub fn max_request_blocks(&self) -> u32 {
        self.cfg.request_blocks_limit()
    }

    fn take_seq(&mut self) -> Seq {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    // ----- map maintenance --------------------------------------------------

    /// Whether every host write gets a HostWrite note and every GC copy a
    /// Reloc note naming its source: with tags in band always; with tags in
    /// OOB while snapshots keep books (docs/design.md, "Recovery"), so that
    /// replay knows where each version it may have to keep lies.
    fn notes_every_change(&self) -> bool {
        self.tag_mode == TagMode::InBand || !self.mapping.history().is_idle()
    }

    fn cap(&self) -> u64 {
        self.geo.zone_capacity_blocks
    }

    /// Maps `lba` to the fresh block `ppa` (a host write of seq `seq`
    /// landed).
    fn map(&mut self, lba: Lba, ppa: Ppa, crc: u32, seq: Seq) {
        if let Err(owner) = self.mapping.map_direct(lba, ppa, crc, seq) {
            panic!("block {} written for {lba} is live under {owner:?}", ppa.0);
        }
    }

    // ----- progress and failure -----------------------------------------

    /// Re-evaluates everything that waits on state rather than on a command.
    fn advance(&mut self) {
        if self.read_only {
            self.fail_waiters();
        }
        let comfortable = u64::from(self.gc_reserve_zones + self.cfg.gc_start_free_zones);
        if self.reserve_unlocked && u64::from(self.zones.free_count()) > comfortable {
            self.reserve_unlocked = false;
        }
        self.advance_ranges();
        self.sweep_history();
        if self.read_only {
            self.fail_waiters(); // what the vectors released
        }
        self.admit_writes();
        self.advance_nameless_commits();
        self.advance_flushes();
        if !self.checkpoint_held() {
            self.advance_job();
        }
        self.advance_checkpoint();
    }

    /// Why the core refuses writes, if it does.
    pub fn failure(&self) -> Option<IoError> {
        self.read_only.then(|| self.refusal())
    }

    fn refusal(&self) -> IoError {
        if self.space_exhausted {
            IoError::NoSpace
        } else if self.device_gone {
            IoError::DeviceGone
        } else {
            IoError::ReadOnly
        }
    }

    /// Nothing more reaches the media: answer everything that waits on it.
    fn fail_waiters(&mut self) {
        let error = self.refusal();
        for f in std::mem::take(&mut self.flushes) {
            self.deliver(f.to, Err(error.clone()));
        }
        for WaitingWrite { id, .. } in std::mem::take(&mut self.waiting_writes) {
            self.replies.push_back(Reply {
                id,
                result: Err(error.clone()),
            });
        }
        self.fail_ranges(&error);
        self.fail_nameless_writes(&error);
        self.fail_inplace_fills(&error);
        self.fail_nameless_commits(&error);
        if self.device_gone {
            self.plan_reads(); // buffered and unmapped blocks still answer
            for part in std::mem::take(&mut self.read_queue) {
                let zone = part.ppa.zone(self.cap()) as usize;
                self.zone_readers[zone] -= 1;
                if part.req == Key::NONE {
                    self.whole_reads -= 1;
                    self.replies.push_back(Reply {
                        id: part.id,
                        result: Err(IoError::DeviceGone),
                    });
                } else if let Some(req) = self.reads.remove(part.req) {
                    self.replies.push_back(Reply {
                        id: req.id,
                        result: Err(IoError::DeviceGone),
                    });
                }
            }
        }
    }

    // ----- introspection ------------------------------------------------------

    pub fn stats(&self) -> FtlStats {
        let mut s = self.stats.clone();
        s.fill_from(
            &self.zones,
            &self.mapping,
            self.pending_summary_bytes(),
            self.geo.block_size_bytes,
        );
        s.read_only = self.read_only;
        s.nameless_uncommitted_blocks = self.nameless.uncommitted_blocks();
        s.nameless_events_pending = self.nameless.events_pending();
        s.nameless_remap_entries = u64::from(self.nameless.remap.len());
        s.nameless_fill_entries = self.nameless.births.fill_count();
        s.nameless_remap_capacity = u64::from(self.nameless.remap.capacity());
        s.snapshot_room_versions = self.history_room();
        s.window_reach_blocks = self.window_reach_blocks();
        s
    }

    /// Mapped logical blocks.
    pub fn mapped_blocks(&self) -> u64 {
        self.mapping.mapped_blocks()
    }

    /// Physical location of `lba`, if mapped (for tools and tests).
    pub fn lookup(&self, lba: Lba) -> Option<Ppa> {
        self.mapping.get(lba)
    }

    /// The mapping state (for tools and tests).
    pub fn mapping(&self) -> &Mapping {
        &self.mapping
    }

    /// What `zone` is used for (for tools and tests).
    pub fn zone_kind(&self, zone: ZoneId) -> Option<ZoneKind> {
        (zone < self.geo.zone_count).then(|| self.zones.get(zone).kind())
    }

    /// The range attributes: `(lba, block_count, bits)` runs, in order.
    pub fn attributes(&self) -> Vec<(Lba, u64, u8)> {
        self.attrs.iter().collect()
    }
}
