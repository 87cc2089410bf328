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

use crate::addr::{Epoch, Lba, Ppa, Seq};
use crate::backend::{Command, Completion, DeviceError, Geometry, Outcome, ZoneId};
use crate::buffer::{SlotId, Temp, WriteBuffer};
use crate::checkpoint::{self, CheckpointImage};
use crate::config::FtlConfig;
use crate::error::IoError;
use crate::l2p::L2p;
use crate::layout::{Layout, SUPER_ZONES};
use crate::log::{LogCommand, MetaLog};
use crate::note::Note;
use crate::p2l::P2l;
use crate::slab::{Key, Slab};
use crate::stats::FtlStats;
use crate::superblock::{Superblock, TagMode};
use crate::tag::{self, Tag, TagKind, TAG_BYTES};
use crate::zone::{Stream, ZoneKind, ZoneTable};
use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

/// A host request. Offsets and counts are in blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Read {
        lba: Lba,
        block_count: u32,
    },
    /// `fua`: reply only once the data is durable.
    Write {
        lba: Lba,
        data: Vec<u8>,
        fua: bool,
    },
    /// Persistent trim: reads return zeros, also after a crash once flushed.
    Trim {
        lba: Lba,
        block_count: u32,
    },
    /// Reads return zeros; costs a note, no data writes.
    WriteZeroes {
        lba: Lba,
        block_count: u32,
        fua: bool,
    },
    /// Which blocks of the range hold data: runs of mapped (written, or
    /// buffered) and unmapped (never written or trimmed: they read as zeros)
    /// blocks, for NBD block status and tools. At most
    /// `MAX_EXTENT_QUERY_BLOCKS` per request.
    Extents {
        lba: Lba,
        block_count: u32,
    },
    /// Makes every acknowledged write, trim and zeroing durable.
    Flush,
}

/// What a finished request returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyData {
    Read(Vec<u8>),
    /// Answer to `Request::Extents`: consecutive runs covering the range.
    Extents(Vec<Extent>),
    Done,
}

/// A run of blocks that are all mapped or all unmapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub block_count: u32,
    pub mapped: bool,
}

/// The largest range one `Request::Extents` may ask about (bounds its loop).
pub const MAX_EXTENT_QUERY_BLOCKS: u32 = 1 << 20;

/// The answer to request `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub id: u64,
    pub result: Result<ReplyData, IoError>,
}

/// An open zone the core writes data into; each maps to a zone stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    /// Host writes of recently rewritten blocks.
    HostHot = 0,
    /// First host writes and blocks rewritten after a long time; cold data GC moved.
    HostCold = 1,
    /// Data GC moved that is not cold.
    Gc = 2,
    /// Cold data static wear leveling parks on the most-worn free zones.
    WearLeveling = 3,
}

impl Lane {
    fn stream(self) -> Stream {
        match self {
            Lane::HostHot => Stream::Host,
            Lane::HostCold => Stream::HostCold,
            Lane::Gc | Lane::WearLeveling => Stream::Gc,
        }
    }
}

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
    pub l2p: L2p,
    pub p2l: P2l,
    pub zones: ZoneTable,
    pub next_seq: Seq,
    pub epoch: Epoch,
    pub log: MetaLog,
    pub super_generation: u64,
    pub super_wp_blocks: [u64; 2],
    pub super_dead: [bool; 2],
    pub gc_reserve_zones: u32,
}

#[derive(Debug)]
struct RelocItem {
    lba: Lba,
    src: Ppa,
    /// The GC read's buffer, shared by its blocks; this one is at `at`.
    buf: Arc<Vec<u8>>,
    at: usize,
    seq: Seq,
    crc: u32,
}

impl RelocItem {
    fn block(&self, block_size: usize) -> &[u8] {
        &self.buf[self.at..self.at + block_size]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JobPurpose {
    Gc,
    StaticWl,
    Retire,
}

#[derive(Debug)]
enum JobPhase {
    Copying,
    /// The ZoneReset/ZoneRetire note is packed; waits until the log is durable through `log_barrier`.
    Noting {
        log_barrier: u64,
    },
    /// Waits for host reads of the victim to finish, then flushes the device
    /// so the relocated copies are durable before the originals go.
    ReadyToFlush,
    Flushing,
    ReadyToReset,
    Resetting,
}

#[derive(Debug)]
struct GcJob {
    victim: ZoneId,
    purpose: JobPurpose,
    scan_offset: u64,
    reads_in_flight: u32,
    phase: JobPhase,
    /// Reads that failed, to issue again: (first block, count, attempts so far).
    retries: Vec<(Ppa, u32, u8)>,
    /// Live blocks that could not be read or failed their checksum.
    unreadable: BTreeSet<Ppa>,
}

/// Attempts at a read that fails with a media error before its blocks are
/// given up on (NAND read errors are often transient: read retry).
/// While GC is busy, GC jobs between two static wear-leveling moves.
const WL_EVERY_GC_JOBS: u32 = 4;
const READ_ATTEMPTS: u8 = 3;
/// Blocks looked up in the L2P in one pass when reads are planned (bounds
/// the scratch; a larger request is looked up alone).
const READ_LOOKUP_BATCH_BLOCKS: usize = 256;

#[derive(Debug, Default)]
struct StreamState {
    zone: Option<ZoneId>,
    allocated_blocks: u64,
    /// The zone came out of the GC reserve: only GC may fill it, or host
    /// writes sharing the lane would eat the reserve.
    gc_only: bool,
}

#[derive(Debug)]
enum CkptState {
    Idle,
    Draining,
    Writing {
        id: u64,
        end_log_seq: u64,
        location: Option<(ZoneId, u64)>,
    },
    Flushing {
        id: u64,
        location: (ZoneId, u64),
        issued: bool,
    },
    Super {
        id: u64,
        location: (ZoneId, u64),
        copy: usize,
        busy: bool,
    },
}

#[derive(Debug)]
enum FlushStage {
    Data { ticket_barrier: u64 },
    Log { log_barrier: u64 },
    Device,
}

#[derive(Debug)]
struct FlushWait {
    id: u64,
    stage: FlushStage,
}

#[derive(Debug)]
struct ReadReq {
    /// The host's request id, for the reply.
    id: u64,
    /// The reply, assembled: buffered blocks, zeros, then each part's data.
    data: Vec<u8>,
    parts_left: u32,
    error: Option<IoError>,
}

#[derive(Debug)]
/// Blocks `first_lba..+count` of a request, at consecutive physical blocks.
struct ReadPart {
    /// The request's key in `Ftl::reads`; `Key::NONE` when this part is the
    /// whole request (one device read serves it all): it replies to `id`
    /// with the device's buffer as is, with no entry in `Ftl::reads`.
    req: Key,
    /// The host's request id.
    id: u64,
    dst_block: u32,
    first_lba: Lba,
    count: u32,
    ppa: Ppa,
    /// Data CRCs when the tag is not in OOB (empty in OOB mode).
    crcs: Vec<Option<u32>>,
    attempts: u8,
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
    SuperReset {
        copy: usize,
    },
    SuperWrite {
        copy: usize,
    },
    VictimFlush,
    VictimReset {
        zone: ZoneId,
    },
    HostFlush {
        waiters: Vec<u64>,
    },
    CkptFlush,
}

/// The FTL core. See the module documentation.
pub struct Ftl {
    geo: Geometry,
    cfg: FtlConfig,
    layout: Layout,
    tag_mode: TagMode,
    uuid: [u8; 16],
    l2p: L2p,
    p2l: P2l,
    zones: ZoneTable,
    zone_readers: Vec<u32>,
    zone_appends: Vec<u32>,
    buffer: WriteBuffer,
    buffered_new: u64,
    max_mapped_blocks: u64,
    gc_reserve_zones: u32,
    next_seq: Seq,
    epoch: Epoch,
    log: MetaLog,
    /// Open zone of each lane (indexed by `Lane as usize`).
    lanes: [StreamState; 4],
    /// Host blocks admitted so far: the clock temperature is measured in.
    host_clock: u64,
    /// `host_clock` when each zone was opened by a host stream (0 for GC
    /// zones and after mount: their data counts as old).
    zone_clock: Vec<u64>,
    job: Option<GcJob>,
    retire_queue: VecDeque<ZoneId>,
    /// GC jobs since the last static wear-leveling move.
    jobs_since_wl: u32,
    /// Blocks read by GC waiting to be written, per temperature.
    gc_queues: [VecDeque<RelocItem>; 2],
    gc_in_flight: u32,
    host_appends_in_flight: u32,
    ckpt: CkptState,
    ckpt_requested: bool,
    blocks_since_checkpoint: u64,
    super_generation: u64,
    super_wp_blocks: [u64; 2],
    /// Superblock zones that failed a write or reset.
    super_dead: [bool; 2],
    /// Commands in flight, keyed by the tag they were submitted with
    /// (at most `max_inflight_commands`).
    ops: Slab<Op>,
    read_queue: VecDeque<ReadPart>,
    /// Host reads of several parts waiting on the device, and how many
    /// single-part reads are (together at most `max_host_requests`).
    reads: Slab<ReadReq>,
    whole_reads: usize,
    /// Host reads accepted but not yet looked up: (id, lba, block_count).
    /// Planned together at the next poll (see `plan_reads`).
    unplanned_reads: VecDeque<(u64, Lba, u32)>,
    /// Scratch, kept so a read allocates nothing: one batch's L2P lookups,
    /// and one request's device reads.
    read_lookups: Vec<Option<Ppa>>,
    read_plan: Vec<ReadPart>,
    /// The last `poll_command` ran `advance` (or followed one that did)
    /// and issued a host read, and nothing came in since: issuing a read
    /// changes nothing `advance` looks at, so the next poll may skip it.
    advanced_then_read: bool,
    waiting_writes: VecDeque<(u64, Lba, Vec<u8>, bool)>,
    flushes: Vec<FlushWait>,
    replies: VecDeque<Reply>,
    read_only: bool,
    device_gone: bool,
    /// Host writes may use the GC reserve: GC found nothing to collect.
    reserve_unlocked: bool,
    /// The media has no room left for data already accepted: read-only.
    space_exhausted: bool,
    now_ns: u64,
    stats: FtlStats,
}

impl Ftl {
    pub(crate) fn from_parts(p: Parts) -> Ftl {
        let zone_count = p.geometry.zone_count as usize;
        let cap = p.geometry.zone_capacity_blocks;
        let data_zones = (p.layout.first_data_zone()..p.geometry.zone_count)
            .filter(|&z| p.zones.get(z).kind() != ZoneKind::Retired)
            .count() as u64;
        let set_aside = u64::from(p.gc_reserve_zones + crate::layout::OPEN_DATA_LANES);
        let max_commands = p.config.max_inflight_commands.max(1) as usize;
        let max_reads = p.config.max_host_requests.max(1) as usize;
        let usable = data_zones.saturating_sub(set_aside) * cap;
        Ftl {
            buffer: WriteBuffer::new(
                p.config.write_buffer_blocks,
                u64::from_le_bytes(p.uuid[..8].try_into().expect("8 bytes")),
            ),
            max_mapped_blocks: usable.min(p.layout.logical_blocks),
            zone_readers: vec![0; zone_count],
            zone_appends: vec![0; zone_count],
            geo: p.geometry,
            cfg: p.config,
            layout: p.layout,
            tag_mode: p.tag_mode,
            uuid: p.uuid,
            l2p: p.l2p,
            p2l: p.p2l,
            zones: p.zones,
            buffered_new: 0,
            gc_reserve_zones: p.gc_reserve_zones,
            next_seq: p.next_seq,
            epoch: p.epoch,
            log: p.log,
            lanes: Default::default(),
            host_clock: 0,
            zone_clock: vec![0; zone_count],
            job: None,
            retire_queue: VecDeque::new(),
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
            ops: Slab::new(max_commands),
            read_queue: VecDeque::new(),
            reads: Slab::new(max_reads),
            whole_reads: 0,
            unplanned_reads: VecDeque::new(),
            read_lookups: Vec::new(),
            read_plan: Vec::new(),
            advanced_then_read: false,
            waiting_writes: VecDeque::new(),
            flushes: Vec::new(),
            replies: VecDeque::new(),
            read_only: false,
            device_gone: false,
            reserve_unlocked: false,
            space_exhausted: false,
            now_ns: 0,
            stats: FtlStats::default(),
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

    pub fn tag_mode(&self) -> TagMode {
        self.tag_mode
    }

    /// The driver tells the core the time; used for latency statistics.
    pub fn handle_time(&mut self, now_ns: u64) {
        self.now_ns = self.now_ns.max(now_ns);
    }

    /// Requests a checkpoint as soon as possible (shutdown, after mount).
    pub fn request_checkpoint(&mut self) {
        self.advanced_then_read = false;
        self.ckpt_requested = true;
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
            && self.replies.is_empty()
            && self.unplanned_reads.is_empty()
            && self.flushes.is_empty()
            && self.waiting_writes.is_empty()
            && self.read_queue.is_empty()
            && self.buffer.used_slots() == 0
            && self.checkpoint_idle()
    }

    /// What background work is under way (tests use it to aim power cuts).
    pub fn activity(&self) -> Activity {
        Activity {
            gc: self.job.is_some(),
            checkpoint: !matches!(self.ckpt, CkptState::Idle),
        }
    }

    /// A one-paragraph summary of the core's state, for stall reports.
    pub fn debug_state(&self) -> String {
        format!(
            "ckpt {:?} requested {}; job {:?}; flushes {:?}; buffer used {} queued {}; waiting writes {}; \
             host appends {}; gc in flight {} queue {}; free zones {} (reserve {}); host {:?} gc {:?}; \
             log {}; ops {}; reads unplanned {} planned {}; read_only {}",
            self.ckpt,
            self.ckpt_requested,
            self.job,
            self.flushes,
            self.buffer.used_slots(),
            self.buffer.queued(),
            self.waiting_writes.len(),
            self.host_appends_in_flight,
            self.gc_in_flight,
            self.gc_queued(),
            self.zones.free_count(),
            self.gc_reserve_zones,
            self.lanes[Lane::HostHot as usize],
            self.lanes[Lane::Gc as usize],
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
        self.advanced_then_read = false;
        let pending = self.reads.len()
            + self.whole_reads
            + self.unplanned_reads.len()
            + self.waiting_writes.len()
            + self.flushes.len();
        if pending >= self.cfg.max_host_requests as usize {
            return Err(IoError::Busy);
        }
        let result = match request {
            Request::Read { lba, block_count } => self.start_read(id, lba, block_count),
            Request::Write { lba, data, fua } => self.start_write(id, lba, data, fua),
            Request::Trim { lba, block_count } => self
                .trim(lba, block_count, false)
                .map(|_| Some(ReplyData::Done)),
            Request::WriteZeroes {
                lba,
                block_count,
                fua,
            } => self.trim(lba, block_count, true).map(|_| {
                if fua {
                    self.add_flush(id);
                    None
                } else {
                    Some(ReplyData::Done)
                }
            }),
            Request::Flush => {
                self.add_flush(id);
                Ok(None)
            }
            Request::Extents { lba, block_count } => self.extents(lba, block_count).map(Some),
        };
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
        let mut advanced = !self.advanced_then_read || self.read_only;
        if advanced {
            self.advance();
        }
        // Each stall step changes state (seal lanes, lend the reserve, give
        // up read-only), so this ends.
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
            self.resolve_stall();
        };
        self.advanced_then_read = matches!(op, Op::HostRead(_));
        Some((self.ops.insert(op).0, cmd))
    }

    fn next_command(&mut self) -> Option<(Op, Command)> {
        self.next_log_command()
            .or_else(|| self.next_checkpoint_command())
            .or_else(|| self.next_flush_command())
            .or_else(|| self.next_read_command())
            .or_else(|| self.next_job_command())
            .or_else(|| self.next_gc_append())
            .or_else(|| self.next_host_append())
    }

    /// Work is pending, nothing is in flight and nothing can be issued:
    /// no completion will ever change that.
    fn stalled(&self) -> bool {
        let pending = self.buffer.queued() > 0
            || self.gc_queued() > 0
            || !self.flushes.is_empty()
            || !self.waiting_writes.is_empty()
            || !self.checkpoint_idle()
            || self.log.blocked();
        !self.read_only && self.ops.is_empty() && pending
    }

    /// Out of free zones with nothing left to collect: first seal the open
    /// data zones (their stale blocks become collectable), then let host
    /// writes use the GC reserve, then declare the media exhausted.
    fn resolve_stall(&mut self) {
        if self.log.blocked() {
            // Lost ring zones left the log no room for the checkpoint that
            // would free some: read-only; a remount starts a fresh log.
            self.metadata_failed();
            return;
        }
        let free = u64::from(self.zones.free_count());
        assert!(
            free <= u64::from(self.gc_reserve_zones) || self.reserve_unlocked,
            "FTL stalled with free zones left: {}",
            self.debug_state()
        );
        let open: Vec<ZoneId> = self.lanes.iter().filter_map(|l| l.zone).collect();
        if !open.is_empty() {
            for st in &mut self.lanes {
                st.zone = None;
            }
            for z in open {
                self.zones.finish(z);
            }
            return;
        }
        if !self.reserve_unlocked && free > 0 {
            self.reserve_unlocked = true;
            return;
        }
        self.space_exhausted = true;
        self.read_only = true;
        self.fail_waiters();
    }

    fn retire_zone(&mut self, zone: ZoneId) {
        self.zones.retire(zone);
        self.max_mapped_blocks = self.max_mapped_blocks.saturating_sub(self.cap());
    }

    pub fn handle_completion(&mut self, completion: Completion) {
        let op = self
            .ops
            .remove(Key(completion.tag))
            .expect("completion for an unknown command");
        let result = completion.result;
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
            Op::LogWrite {
                first_log_seq,
                count,
            } => match result {
                Ok(_) => self.log.on_write_done(first_log_seq, count),
                Err(DeviceError::DeviceGone) => self.metadata_failed(),
                Err(_) => {
                    self.stats.write_errors += 1;
                    self.log.on_write_failed(first_log_seq);
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
            Op::VictimFlush => self.victim_flushed(result),
            Op::VictimReset { zone } => self.victim_reset_done(zone, result),
            Op::HostFlush { waiters } => {
                let r = result.map(|_| ReplyData::Done).map_err(|e| match e {
                    DeviceError::DeviceGone => IoError::DeviceGone,
                    source => IoError::Device { lba: 0, source },
                });
                for id in waiters {
                    self.replies.push_back(Reply {
                        id,
                        result: r.clone(),
                    });
                }
            }
            Op::CkptFlush => self.checkpoint_flushed(result),
        }
        self.advanced_then_read = false;
        self.advance();
    }

    // ----- admission ------------------------------------------------------

    fn check_range(&self, lba: Lba, block_count: u64) -> Result<(), IoError> {
        if block_count > u64::from(self.cfg.max_request_blocks) {
            return Err(IoError::TooLarge {
                block_count,
                max_blocks: self.cfg.max_request_blocks,
            });
        }
        let logical_blocks = self.layout.logical_blocks;
        if lba
            .checked_add(block_count)
            .is_none_or(|end| end > logical_blocks)
        {
            return Err(IoError::OutOfRange {
                lba,
                block_count,
                logical_blocks,
            });
        }
        Ok(())
    }

    fn start_write(
        &mut self,
        id: u64,
        lba: Lba,
        data: Vec<u8>,
        fua: bool,
    ) -> Result<Option<ReplyData>, IoError> {
        let bs = self.block_size();
        if data.is_empty() || !data.len().is_multiple_of(bs) {
            let expected_bytes = data.len().div_ceil(bs).max(1) * bs;
            return Err(IoError::BufferSize {
                expected_bytes,
                actual_bytes: data.len(),
            });
        }
        self.check_range(lba, (data.len() / bs) as u64)?;
        if self.read_only {
            return Err(self.refusal());
        }
        self.waiting_writes.push_back((id, lba, data, fua));
        self.admit_writes();
        Ok(None)
    }

    /// Moves waiting writes into the buffer, in arrival order, while it has room.
    fn admit_writes(&mut self) {
        while let Some((id, lba, data, fua)) = self.waiting_writes.pop_front() {
            let bs = self.block_size();
            let count = (data.len() / bs) as u64;
            let needed: usize = (lba..lba + count)
                .map(|l| self.buffer.slots_needed(l))
                .sum();
            if needed > self.buffer.free_slots() {
                assert!(
                    count <= u64::from(self.cfg.write_buffer_blocks)
                        || self.buffer.used_slots() > 0
                );
                self.waiting_writes.push_front((id, lba, data, fua));
                return;
            }
            let new_blocks = (lba..lba + count)
                .filter(|&l| self.l2p.get(l).is_none() && self.buffer.lookup(l).is_none())
                .count() as u64;
            if self.l2p.mapped_blocks() + self.buffered_new + new_blocks > self.max_mapped_blocks {
                self.replies.push_back(Reply {
                    id,
                    result: Err(IoError::NoSpace),
                });
                continue;
            }
            if count == 1 {
                self.buffer_block(lba, data); // the request's own buffer, no copy
            } else {
                for (i, chunk) in data.chunks_exact(bs).enumerate() {
                    let block = self.buffer.block_copy(chunk);
                    self.buffer_block(lba + i as u64, block);
                }
            }
            self.stats.host_write_blocks += count;
            if fua {
                self.add_flush(id);
            } else {
                self.replies.push_back(Reply {
                    id,
                    result: Ok(ReplyData::Done),
                });
            }
        }
    }

    fn extents(&self, lba: Lba, block_count: u32) -> Result<ReplyData, IoError> {
        if block_count > MAX_EXTENT_QUERY_BLOCKS {
            return Err(IoError::TooLarge {
                block_count: u64::from(block_count),
                max_blocks: MAX_EXTENT_QUERY_BLOCKS,
            });
        }
        let logical_blocks = self.layout.logical_blocks;
        if lba
            .checked_add(u64::from(block_count))
            .is_none_or(|end| end > logical_blocks)
        {
            return Err(IoError::OutOfRange {
                lba,
                block_count: u64::from(block_count),
                logical_blocks,
            });
        }
        let mut runs: Vec<Extent> = Vec::new();
        for l in lba..lba + u64::from(block_count) {
            let mapped = self.l2p.get(l).is_some() || self.buffer.lookup(l).is_some();
            match runs.last_mut() {
                Some(run) if run.mapped == mapped => run.block_count += 1,
                _ => runs.push(Extent {
                    block_count: 1,
                    mapped,
                }),
            }
        }
        Ok(ReplyData::Extents(runs))
    }

    /// Largest host request, in blocks.
    pub fn max_request_blocks(&self) -> u32 {
        self.cfg.max_request_blocks
    }

    fn buffer_block(&mut self, lba: Lba, block: Vec<u8>) {
        let is_new = self.l2p.get(lba).is_none() && self.buffer.lookup(lba).is_none();
        let temp = self.temperature(lba);
        self.buffer.insert(lba, block, is_new, temp);
        self.host_clock += 1;
        self.stats.host_hot_blocks += u64::from(temp == Temp::Hot);
        self.buffered_new += u64::from(is_new);
    }

    fn trim(&mut self, lba: Lba, block_count: u32, zeroes: bool) -> Result<(), IoError> {
        self.check_range(lba, u64::from(block_count))?;
        if self.read_only {
            return Err(self.refusal());
        }
        for l in lba..lba + u64::from(block_count) {
            if self.buffer.discard(l) {
                self.buffered_new -= 1;
            }
            self.unmap(l);
        }
        let seq = self.take_seq();
        self.log.push_note(Note::Trim {
            seq,
            lba,
            block_count: u64::from(block_count),
        });
        if zeroes {
            self.stats.host_zero_blocks += u64::from(block_count);
        } else {
            self.stats.host_trim_blocks += u64::from(block_count);
        }
        Ok(())
    }

    fn add_flush(&mut self, id: u64) {
        let ticket_barrier = self.buffer.next_ticket();
        self.flushes.push(FlushWait {
            id,
            stage: FlushStage::Data { ticket_barrier },
        });
    }

    fn take_seq(&mut self) -> Seq {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    // ----- map maintenance --------------------------------------------------

    fn cap(&self) -> u64 {
        self.geo.zone_capacity_blocks
    }

    fn unmap(&mut self, lba: Lba) {
        if let Some(old) = self.l2p.unmap(lba) {
            self.p2l.clear(old);
            self.zones.remove_valid(old.zone(self.cap()), 1);
        }
    }

    fn map(&mut self, lba: Lba, ppa: Ppa, crc: u32) {
        self.unmap(lba);
        self.l2p.set(lba, ppa);
        self.p2l.set(ppa, lba, crc);
        self.zones.add_valid(ppa.zone(self.cap()), 1);
    }

    // ----- reads ----------------------------------------------------------

    /// Accepts a read; its blocks are looked up at the next poll.
    fn start_read(
        &mut self,
        id: u64,
        lba: Lba,
        block_count: u32,
    ) -> Result<Option<ReplyData>, IoError> {
        self.check_range(lba, u64::from(block_count))?;
        if block_count == 0 {
            return Ok(Some(ReplyData::Read(Vec::new())));
        }
        self.stats.host_read_blocks += u64::from(block_count);
        self.unplanned_reads.push_back((id, lba, block_count));
        Ok(None)
    }

    /// Plans every accepted read, a batch at a time: first the L2P lookups
    /// of the whole batch in one tight loop (they are independent, so their
    /// cache misses overlap instead of stalling one request each), then
    /// each request's device reads. A read takes its snapshot of the map
    /// here, between its request and its reply.
    fn plan_reads(&mut self) {
        while !self.unplanned_reads.is_empty() {
            let mut lookups = std::mem::take(&mut self.read_lookups);
            lookups.clear();
            let mut requests = 0;
            for &(_, lba, block_count) in &self.unplanned_reads {
                let full = lookups.len() + block_count as usize > READ_LOOKUP_BATCH_BLOCKS;
                if full && requests > 0 {
                    break;
                }
                lookups.extend((lba..lba + u64::from(block_count)).map(|l| self.l2p.get(l)));
                requests += 1;
            }
            let mut at = 0;
            for _ in 0..requests {
                let (id, lba, block_count) = self.unplanned_reads.pop_front().expect("counted");
                let ppas = &lookups[at..at + block_count as usize];
                at += ppas.len();
                if let Some(data) = self.plan_read(id, lba, ppas) {
                    self.replies.push_back(Reply {
                        id,
                        result: Ok(ReplyData::Read(data)),
                    });
                }
            }
            self.read_lookups = lookups;
        }
    }

    /// Queues the device reads of request `id` at `lba`, whose blocks map
    /// to `ppas`; returns the reply when no device read is needed.
    fn plan_read(&mut self, id: u64, lba: Lba, ppas: &[Option<Ppa>]) -> Option<Vec<u8>> {
        let block_count = ppas.len() as u32;
        let mut parts = std::mem::take(&mut self.read_plan);
        debug_assert!(parts.is_empty());
        let media_blocks = self.plan_parts(id, lba, ppas, &mut parts);
        let cap = self.cap();
        if parts.len() == 1 && media_blocks == block_count {
            let p = parts.pop().expect("one part");
            self.zone_readers[p.ppa.zone(cap) as usize] += 1;
            self.whole_reads += 1;
            self.read_queue.push_back(p);
            self.read_plan = parts;
            return None;
        }
        let data = self.assemble_read(lba, block_count);
        if parts.is_empty() {
            self.read_plan = parts;
            return Some(data);
        }
        let req = self.reads.insert(ReadReq {
            id,
            data,
            parts_left: parts.len() as u32,
            error: None,
        });
        for mut p in parts.drain(..) {
            self.zone_readers[p.ppa.zone(cap) as usize] += 1;
            p.req = req;
            self.read_queue.push_back(p);
        }
        self.read_plan = parts;
        None
    }

    /// Device reads for the mapped, unbuffered blocks of a request, merged
    /// where physical blocks are consecutive, appended to `parts` (their
    /// `req` not yet set); returns how many blocks they cover.
    fn plan_parts(
        &self,
        id: u64,
        lba: Lba,
        ppas: &[Option<Ppa>],
        parts: &mut Vec<ReadPart>,
    ) -> u32 {
        let cap = self.cap();
        let in_band = self.tag_mode == TagMode::InBand;
        let buffered = self.buffer.used_slots() > 0;
        let mut media_blocks = 0;
        for (i, &ppa) in (0u32..).zip(ppas) {
            let l = lba + u64::from(i);
            if buffered && self.buffer.lookup(l).is_some() {
                continue;
            }
            let Some(ppa) = ppa else { continue };
            media_blocks += 1;
            let crc = if in_band {
                Some(self.p2l.crc(ppa))
            } else {
                None
            };
            if let Some(p) = parts.last_mut() {
                let contiguous = p.ppa.0 + p.count == ppa.0
                    && p.ppa.zone(cap) == ppa.zone(cap)
                    && p.dst_block + p.count == i
                    && p.count < self.geo.max_transfer_blocks;
                if contiguous {
                    p.count += 1;
                    p.crcs.extend(crc);
                    continue;
                }
            }
            parts.push(ReadPart {
                req: Key::NONE,
                id,
                dst_block: i,
                first_lba: l,
                count: 1,
                ppa,
                crcs: crc.into_iter().collect(),
                attempts: 0,
            });
        }
        media_blocks
    }

    /// The reply buffer: buffered blocks copied in, unmapped ones zero.
    fn assemble_read(&self, lba: Lba, block_count: u32) -> Vec<u8> {
        let bs = self.block_size();
        let mut data = vec![0u8; block_count as usize * bs];
        for (i, dst) in data.chunks_exact_mut(bs).enumerate() {
            if let Some(buffered) = self.buffer.lookup(lba + i as u64) {
                dst.copy_from_slice(buffered);
            }
        }
        data
    }

    fn next_read_command(&mut self) -> Option<(Op, Command)> {
        let part = self.read_queue.pop_front()?;
        let cap = self.cap();
        let cmd = Command::Read {
            zone: part.ppa.zone(cap),
            offset_blocks: part.ppa.offset_blocks(cap),
            block_count: part.count,
        };
        Some((Op::HostRead(part), cmd))
    }

    fn host_read_done(&mut self, mut part: ReadPart, result: Result<Outcome, DeviceError>) {
        let cap = self.cap();
        let zone = part.ppa.zone(cap);
        let media_error = matches!(result, Err(ref e) if *e != DeviceError::DeviceGone);
        if media_error && part.attempts + 1 < READ_ATTEMPTS {
            part.attempts += 1; // read retry; the zone stays pinned by this reader
            self.read_queue.push_front(part);
            return;
        }
        self.zone_readers[zone as usize] -= 1;
        let bs = self.block_size();
        let checked = match result {
            Ok(Outcome::Read { data, oob }) => self.verify_blocks(&part, &data, &oob).map(|_| data),
            Ok(other) => panic!("read completed as {other:?}"),
            Err(DeviceError::DeviceGone) => Err(IoError::DeviceGone),
            Err(e) => Err(IoError::Device {
                lba: part.first_lba,
                source: e,
            }),
        };
        if part.req == Key::NONE {
            self.whole_reads -= 1;
            let result = checked.map(ReplyData::Read);
            self.stats.read_errors += u64::from(result.is_err());
            self.replies.push_back(Reply {
                id: part.id,
                result,
            });
            return;
        }
        let Some(req) = self.reads.get_mut(part.req) else {
            return; // answered already (the device went away)
        };
        match checked {
            Ok(data) => {
                let at = part.dst_block as usize * bs;
                req.data[at..at + data.len()].copy_from_slice(&data);
            }
            Err(e) => {
                self.stats.read_errors += 1;
                req.error.get_or_insert(e);
            }
        }
        req.parts_left -= 1;
        if req.parts_left == 0 {
            let req = self.reads.remove(part.req).expect("read request");
            let result = match req.error {
                Some(e) => Err(e),
                None => Ok(ReplyData::Read(req.data)),
            };
            self.replies.push_back(Reply { id: req.id, result });
        }
    }

    /// Checks each block's CRC (and, with OOB tags, that it is the block asked for).
    fn verify_blocks(&self, part: &ReadPart, data: &[u8], oob: &[u8]) -> Result<(), IoError> {
        let bs = self.block_size();
        let ob = self.geo.oob_size_bytes as usize;
        let cap = self.cap();
        for i in 0..part.count as usize {
            let lba = part.first_lba + i as u64;
            let ppa = Ppa(part.ppa.0 + i as u32);
            let (zone, offset_blocks) = (ppa.zone(cap), ppa.offset_blocks(cap));
            let block = &data[i * bs..(i + 1) * bs];
            let actual_crc = tag::data_crc(block);
            let expected_crc = match self.tag_mode {
                TagMode::Oob => match Tag::decode(&oob[i * ob..i * ob + TAG_BYTES]) {
                    Ok(Some(t)) if t.lba == lba => t.data_crc,
                    Ok(Some(t)) => {
                        return Err(IoError::Misdirected {
                            lba,
                            zone,
                            offset_blocks,
                            found_lba: t.lba,
                        })
                    }
                    Ok(None) | Err(_) => {
                        return Err(IoError::Corrupt {
                            lba,
                            zone,
                            offset_blocks,
                            expected_crc: 0,
                            actual_crc,
                        })
                    }
                },
                TagMode::InBand => match part.crcs[i] {
                    Some(c) => c,
                    None => continue, // remapped after the read was issued; the data was valid then
                },
            };
            if expected_crc != actual_crc {
                return Err(IoError::Corrupt {
                    lba,
                    zone,
                    offset_blocks,
                    expected_crc,
                    actual_crc,
                });
            }
        }
        Ok(())
    }

    // ----- writers ----------------------------------------------------------

    /// Zone and block count for the next append of a stream, opening a new
    /// zone when needed. Host streams may not dip into the GC reserve.
    fn lane_room(
        &mut self,
        lane: Lane,
        wanted: u64,
        may_use_reserve: bool,
    ) -> Option<(ZoneId, u64)> {
        let cap = self.cap();
        let reserve = u64::from(self.gc_reserve_zones);
        let host_barred = !may_use_reserve && !self.reserve_unlocked;
        let above_reserve = self.zones.free_count() as u64 > reserve;
        let st = self.lane_mut(lane);
        if st.zone.is_some() && st.gc_only && host_barred {
            if !above_reserve {
                return None;
            }
            // The reserve has been refilled: the zone no longer stands in for it.
            st.gc_only = false;
        }
        if st.zone.is_none() {
            let free = self.zones.free_count() as u64;
            let from_reserve = free <= reserve;
            if free == 0 || (from_reserve && host_barred) {
                return None;
            }
            let kind = ZoneKind::Data {
                stream: lane.stream(),
            };
            let z = match lane {
                Lane::WearLeveling => self.zones.take_free_most_worn(kind)?,
                _ => self.zones.take_free(kind)?,
            };
            self.zone_clock[z as usize] = 0;
            let st = self.lane_mut(lane);
            st.zone = Some(z);
            st.allocated_blocks = 0;
            st.gc_only = from_reserve && may_use_reserve;
        }
        let st = self.lane_mut(lane);
        let zone = st.zone.expect("lane zone");
        let room = cap - st.allocated_blocks;
        let n = wanted.min(room);
        Some((zone, n))
    }

    /// A zone for static wear leveling to move, if leveling is due: when GC
    /// is idle, or as at most one job in `WL_EVERY_GC_JOBS + 1` while GC is
    /// busy (a leveling move frees the zone it empties, so it costs GC no
    /// space, only time).
    fn wl_victim(&self) -> Option<ZoneId> {
        if self.cfg.static_wl_threshold == 0 || self.zones.free_count() == 0 {
            return None;
        }
        if self.gc_needed() && self.jobs_since_wl < WL_EVERY_GC_JOBS {
            return None;
        }
        let ex = |z: ZoneId| self.excluded(z);
        self.zones
            .pick_static_wl_victim(self.cfg.static_wl_threshold, ex)
    }

    /// Room in `lane`, or else in its sibling: temperature separation is
    /// best effort, and must never hold up writing when one lane cannot get
    /// a zone (e.g. GC with one reserve zone left and both lanes full).
    fn room_in(
        &mut self,
        lane: Lane,
        wanted: u64,
        may_use_reserve: bool,
    ) -> Option<(Lane, ZoneId, u64)> {
        if let Some((zone, room)) = self.lane_room(lane, wanted, may_use_reserve) {
            return Some((lane, zone, room));
        }
        let sibling = match lane {
            Lane::HostHot => Lane::HostCold,
            Lane::HostCold if may_use_reserve => Lane::Gc,
            Lane::HostCold => Lane::HostHot,
            Lane::Gc => Lane::HostCold,
            // Never let leveling wedge GC: park the data with GC's instead.
            Lane::WearLeveling => {
                let (zone, room) = self.lane_room(Lane::Gc, wanted, true)?;
                return Some((Lane::Gc, zone, room));
            }
        };
        if !self.cfg.temperature_streams || (sibling == Lane::Gc && !self.cfg.separate_gc_stream) {
            return None;
        }
        let (zone, room) = self.lane_room(sibling, wanted, may_use_reserve)?;
        Some((sibling, zone, room))
    }

    fn lane_mut(&mut self, lane: Lane) -> &mut StreamState {
        &mut self.lanes[lane as usize]
    }

    /// Hot if the block's previous version was written recently (see
    /// [`Self::age_temp`]; the time is that of the last host write into its
    /// zone) or is still in the buffer. First writes count as cold. No
    /// per-block memory: the estimate rides on the zone the old version is in.
    fn temperature(&self, lba: Lba) -> Temp {
        if !self.cfg.temperature_streams {
            return Temp::Hot;
        }
        if self.buffer.lookup(lba).is_some() {
            return Temp::Hot;
        }
        let Some(old) = self.l2p.get(lba) else {
            return Temp::Cold;
        };
        self.age_temp(self.zone_clock[old.zone(self.cap()) as usize])
    }

    /// Hot if data written at host clock `written_at` is younger than a
    /// third of the mapped space's worth of host writes. (Uniform random
    /// rewrites a block every mapped-space's worth of writes on average; in
    /// the 90/10 hot/cold case hot blocks come back after a ninth of it.)
    fn age_temp(&self, written_at: u64) -> Temp {
        if !self.cfg.temperature_streams {
            return Temp::Hot;
        }
        let window = (self.l2p.mapped_blocks() / 3).max(1);
        if written_at > 0 && self.host_clock - written_at < window {
            Temp::Hot
        } else {
            Temp::Cold
        }
    }

    fn gc_queued(&self) -> usize {
        self.gc_queues[0].len() + self.gc_queues[1].len()
    }

    /// Books `n` blocks of the stream's zone; a zone with no room left is
    /// dropped by the stream and becomes Full once its appends complete.
    /// The zone table counts the blocks at submission (it becomes Full at
    /// capacity); `zone_appends` keeps GC off it until they complete.
    fn lane_commit(&mut self, lane: Lane, zone: ZoneId, n: u64, seq: Seq) {
        let cap = self.cap();
        let st = self.lane_mut(lane);
        st.allocated_blocks += n;
        if st.allocated_blocks == cap {
            st.zone = None;
        }
        self.zones.record_write(zone, n, seq);
        self.zone_appends[zone as usize] += 1;
    }

    fn append_settled(&mut self, zone: ZoneId) {
        self.zone_appends[zone as usize] -= 1;
    }

    fn write_unit(&self) -> u64 {
        u64::from(self.geo.write_unit_blocks)
    }

    /// Blocks to send now: full write units; a partial unit is padded only
    /// when something waits for durability.
    fn batch_size(&self, queued: u64, room: u64, urgent: bool) -> (u64, u64) {
        let wu = self.write_unit();
        let max = u64::from(self.geo.max_append_blocks).min(room);
        let take = queued.min(max);
        let full = take / wu * wu;
        if full > 0 || !urgent || take == 0 {
            return (full, 0);
        }
        (take, wu - take % wu)
    }

    fn host_flush_waiting(&self) -> bool {
        !self.flushes.is_empty() || matches!(self.ckpt, CkptState::Draining)
    }

    fn next_host_append(&mut self) -> Option<(Op, Command)> {
        if self.read_only || matches!(self.ckpt, CkptState::Draining) || self.buffer.queued() == 0 {
            return None;
        }
        let temp = if self.buffer.queued_in(Temp::Hot) >= self.buffer.queued_in(Temp::Cold) {
            Temp::Hot
        } else {
            Temp::Cold
        };
        let lane = match temp {
            Temp::Hot => Lane::HostHot,
            Temp::Cold => Lane::HostCold,
        };
        let queued = self.buffer.queued_in(temp) as u64;
        let urgent = self.host_flush_waiting();
        let (lane, zone, room) = self.room_in(lane, queued, false)?;
        let (n, pad) = self.batch_size(queued, room, urgent);
        if n == 0 {
            return None;
        }
        let mut slots = Vec::with_capacity(n as usize);
        let (mut data, mut oob) = self.alloc_buffers(n + pad);
        let bs = self.block_size();
        for _ in 0..n {
            let seq = self.take_seq();
            let s = self.buffer.pop_queued(temp, seq).expect("queued slot");
            let slot = self.buffer.slot(s);
            let crc = tag::data_crc(&slot.data);
            data.extend_from_slice(&slot.data);
            let t = Tag {
                kind: TagKind::HostData,
                epoch: self.epoch,
                lba: slot.lba,
                seq,
                data_crc: crc,
            };
            self.push_tag(&mut oob, &t);
            slots.push((s, seq, crc));
        }
        self.push_padding(&mut data, &mut oob, pad, bs);
        self.lane_commit(lane, zone, n + pad, self.next_seq.saturating_sub(1));
        self.zone_clock[zone as usize] = self.host_clock;
        self.host_appends_in_flight += 1;
        self.stats.media_write_blocks += n + pad;
        self.stats.pad_blocks += pad;
        self.blocks_since_checkpoint += n + pad;
        Some((
            Op::HostAppend {
                zone,
                slots,
                pad_blocks: pad as u32,
            },
            Command::Append { zone, data, oob },
        ))
    }

    fn alloc_buffers(&self, blocks: u64) -> (Vec<u8>, Vec<u8>) {
        let oob = if self.geo.oob_size_bytes > 0 {
            self.geo.oob_bytes(blocks)
        } else {
            0
        };
        (
            Vec::with_capacity(self.geo.data_bytes(blocks)),
            Vec::with_capacity(oob),
        )
    }

    fn push_tag(&self, oob: &mut Vec<u8>, t: &Tag) {
        let ob = self.geo.oob_size_bytes as usize;
        if ob == 0 {
            return;
        }
        let at = oob.len();
        oob.resize(at + ob, 0);
        if self.tag_mode == TagMode::Oob {
            t.encode(&mut oob[at..at + TAG_BYTES]);
        }
    }

    fn push_padding(&self, data: &mut Vec<u8>, oob: &mut Vec<u8>, pad: u64, bs: usize) {
        for _ in 0..pad {
            data.resize(data.len() + bs, 0);
            let t = Tag {
                kind: TagKind::Pad,
                epoch: self.epoch,
                lba: u64::MAX,
                seq: 0,
                data_crc: tag::data_crc(&vec![0; bs]),
            };
            self.push_tag(oob, &t);
        }
    }

    fn host_append_done(
        &mut self,
        zone: ZoneId,
        slots: Vec<(SlotId, Seq, u32)>,
        pad: u32,
        result: Result<Outcome, DeviceError>,
    ) {
        self.host_appends_in_flight -= 1;
        self.append_settled(zone);
        let offset = match result {
            Ok(Outcome::Written { offset_blocks, .. }) => offset_blocks,
            Ok(other) => panic!("append completed as {other:?}"),
            Err(e) => {
                for &(s, _, _) in slots.iter().rev() {
                    self.buffer.requeue_front(s);
                }
                self.stats.media_write_blocks -= slots.len() as u64 + u64::from(pad);
                self.write_failed(zone, e);
                return;
            }
        };
        for (i, &(s, seq, crc)) in slots.iter().enumerate() {
            let ppa = Ppa::new(zone, offset + i as u64, self.cap());
            let lba = self.buffer.slot(s).lba;
            let latest = self.buffer.is_latest(lba, s);
            let slot = self.buffer.release(s);
            if slot.counted_new {
                self.buffered_new -= 1;
            }
            self.buffer
                .recycle(slot.data, self.geo.block_size_bytes as usize);
            if latest {
                self.map(lba, ppa, crc);
                if self.tag_mode == TagMode::InBand {
                    self.log.push_note(Note::HostWrite {
                        seq,
                        lba,
                        ppa,
                        data_crc: crc,
                    });
                }
            }
        }
        self.admit_writes();
    }

    /// A data zone refused a write: stop using it, move its live data out and
    /// retire it (DESIGN.md §4 media faults).
    fn write_failed(&mut self, zone: ZoneId, error: DeviceError) {
        if error == DeviceError::DeviceGone {
            return;
        }
        self.stats.write_errors += 1;
        for st in &mut self.lanes {
            if st.zone == Some(zone) {
                st.zone = None;
            }
        }
        self.zones.finish(zone);
        if !self.retire_queue.contains(&zone) && self.job.as_ref().is_none_or(|j| j.victim != zone)
        {
            self.retire_queue.push_back(zone);
        }
    }

    // ----- garbage collection and wear leveling ---------------------------

    fn gc_needed(&self) -> bool {
        (self.zones.free_count() as u64)
            <= u64::from(self.gc_reserve_zones + self.cfg.gc_start_free_zones)
    }

    fn excluded(&self, z: ZoneId) -> bool {
        self.lanes.iter().any(|st| st.zone == Some(z)) || self.zone_appends[z as usize] > 0
    }

    fn pick_job(&mut self) -> Option<GcJob> {
        let (victim, purpose) = if let Some(z) = self.retire_queue.pop_front() {
            (z, JobPurpose::Retire)
        } else if let Some(z) = self.wl_victim() {
            self.jobs_since_wl = 0;
            (z, JobPurpose::StaticWl)
        } else if self.gc_needed() {
            let ex = |z: ZoneId| self.excluded(z);
            let z = self
                .zones
                .pick_victim(self.cfg.gc_policy, self.next_seq, ex)?;
            self.jobs_since_wl = self.jobs_since_wl.saturating_add(1);
            (z, JobPurpose::Gc)
        } else {
            return None;
        };
        Some(GcJob {
            victim,
            purpose,
            scan_offset: 0,
            reads_in_flight: 0,
            phase: JobPhase::Copying,
            retries: Vec::new(),
            unreadable: BTreeSet::new(),
        })
    }

    fn next_job_command(&mut self) -> Option<(Op, Command)> {
        if self.read_only {
            return None;
        }
        if self.job.is_none() {
            self.job = self.pick_job();
        }
        let job = self.job.as_ref()?;
        let victim = job.victim;
        match job.phase {
            JobPhase::Copying => self.next_gc_read(),
            JobPhase::ReadyToFlush if self.zone_readers[victim as usize] == 0 => {
                self.job.as_mut().expect("job").phase = JobPhase::Flushing;
                Some((Op::VictimFlush, Command::Flush))
            }
            JobPhase::ReadyToReset => {
                self.job.as_mut().expect("job").phase = JobPhase::Resetting;
                Some((
                    Op::VictimReset { zone: victim },
                    Command::Reset { zone: victim },
                ))
            }
            _ => None,
        }
    }

    fn gc_budget_left(&self) -> bool {
        let host_busy = self.buffer.queued() > 0 || !self.read_queue.is_empty();
        let urgent = (self.zones.free_count() as u64) <= u64::from(self.gc_reserve_zones);
        urgent || !host_busy || self.gc_in_flight < self.cfg.gc_max_inflight
    }

    fn next_gc_read(&mut self) -> Option<(Op, Command)> {
        if !self.gc_budget_left() || self.gc_queued() >= 4 * self.geo.max_append_blocks as usize {
            return None;
        }
        let cap = self.cap();
        if let Some((ppa, count, attempts)) = self.job.as_mut().expect("job").retries.pop() {
            return Some(self.gc_read(ppa, count, attempts));
        }
        let job = self.job.as_ref().expect("job");
        let (victim, wp) = (
            job.victim,
            self.zones.get(job.victim).write_pointer_blocks(),
        );
        let movable = |off: u64| {
            let p = Ppa::new(victim, off, cap);
            self.p2l.is_valid(p) && !job.unreadable.contains(&p)
        };
        let mut off = job.scan_offset;
        while off < wp && !movable(off) {
            off += 1;
        }
        let start = off;
        let limit = u64::from(self.geo.max_transfer_blocks).min(64);
        while off < wp && off - start < limit && movable(off) {
            off += 1;
        }
        self.job.as_mut().expect("job").scan_offset = off;
        if start == off {
            return None; // scan finished; completion is checked in advance()
        }
        Some(self.gc_read(Ppa::new(victim, start, cap), (off - start) as u32, 0))
    }

    fn gc_read(&mut self, ppa: Ppa, count: u32, attempts: u8) -> (Op, Command) {
        let cap = self.cap();
        let zone = ppa.zone(cap);
        self.job.as_mut().expect("job").reads_in_flight += 1;
        self.gc_in_flight += 1;
        self.zone_readers[zone as usize] += 1;
        let cmd = Command::Read {
            zone,
            offset_blocks: ppa.offset_blocks(cap),
            block_count: count,
        };
        (
            Op::GcRead {
                ppa,
                count,
                attempts,
            },
            cmd,
        )
    }

    fn gc_read_done(
        &mut self,
        first: Ppa,
        count: u32,
        attempts: u8,
        result: Result<Outcome, DeviceError>,
    ) {
        let cap = self.cap();
        self.gc_in_flight -= 1;
        self.zone_readers[first.zone(cap) as usize] -= 1;
        if let Some(job) = self.job.as_mut() {
            job.reads_in_flight -= 1;
        }
        let bs = self.block_size();
        let ob = self.geo.oob_size_bytes as usize;
        let (data, oob) = match result {
            Ok(Outcome::Read { data, oob }) => (data, oob),
            Ok(other) => panic!("read completed as {other:?}"),
            Err(DeviceError::DeviceGone) => return,
            Err(_) if attempts < READ_ATTEMPTS => {
                if let Some(job) = self.job.as_mut() {
                    job.retries.push((first, count, attempts));
                }
                return;
            }
            Err(_) if count > 1 => {
                // One bad page must not doom its neighbours: block by block.
                if let Some(job) = self.job.as_mut() {
                    job.retries
                        .extend((0..count).map(|i| (Ppa(first.0 + i), 1, 0)));
                }
                return;
            }
            Err(_) => (Vec::new(), Vec::new()),
        };
        let data = Arc::new(data);
        for i in 0..count as usize {
            let ppa = Ppa(first.0 + i as u32);
            if !self.p2l.is_valid(ppa) {
                continue; // overwritten or trimmed since the scan
            }
            // The LBA and data CRC come from the tag (OOB) or the table (in
            // band); the CRC travels with the data rather than being
            // recomputed: a damaged block moved by GC still fails its check
            // when the host reads it, so nothing is laundered. A tag naming a
            // block the map does not send here makes the block unreadable.
            let readable = data.len() >= (i + 1) * bs;
            let carried = match self.tag_mode {
                _ if !readable => None,
                TagMode::Oob => match Tag::decode(&oob[i * ob..i * ob + TAG_BYTES]) {
                    Ok(Some(t)) => Some((t.lba, t.data_crc, t.seq)),
                    _ => None,
                },
                TagMode::InBand => self
                    .p2l
                    .lba(ppa)
                    .zip(self.p2l.crc(ppa))
                    .map(|(l, c)| (l, c, 0)),
            };
            let carried = carried.filter(|&(lba, ..)| {
                lba < self.layout.logical_blocks && self.l2p.get(lba) == Some(ppa)
            });
            if let Some((lba, crc, seq)) = carried {
                let item = RelocItem {
                    lba,
                    src: ppa,
                    buf: Arc::clone(&data),
                    at: i * bs,
                    seq,
                    crc,
                };
                let temp = self.age_temp(self.zone_clock[first.zone(cap) as usize]);
                self.gc_queues[temp as usize].push_back(item);
            } else {
                // Unreadable, or its tag names another block: it stays mapped
                // where it is (reads report the error) and the victim is
                // retired instead of reset.
                self.stats.read_errors += 1;
                if let Some(job) = self.job.as_mut() {
                    job.unreadable.insert(ppa);
                }
            }
        }
    }

    fn next_gc_append(&mut self) -> Option<(Op, Command)> {
        if self.read_only || self.gc_queued() == 0 || !self.gc_budget_left() {
            return None;
        }
        let wl = self
            .job
            .as_ref()
            .is_some_and(|j| j.purpose == JobPurpose::StaticWl);
        let temp = if self.gc_queues[0].len() >= self.gc_queues[1].len() {
            Temp::Hot
        } else {
            Temp::Cold
        };
        // Relocated data joins the stream of its temperature: cold with cold
        // host writes, the rest in the GC stream (survivors of a collection).
        let lane = match (wl, self.cfg.separate_gc_stream, temp) {
            (true, _, _) => Lane::WearLeveling,
            (false, false, _) => Lane::HostHot,
            (false, true, Temp::Cold) if self.cfg.temperature_streams => Lane::HostCold,
            (false, true, _) => Lane::Gc,
        };
        let queued = self.gc_queues[temp as usize].len() as u64;
        let urgent = self.job.as_ref().is_some_and(|j| {
            j.scan_offset >= self.zones.get(j.victim).write_pointer_blocks()
                && j.reads_in_flight == 0
        });
        // GC and leveling (which frees what it moves) may use the reserve.
        let (lane, zone, room) = self.room_in(lane, queued, true)?;
        let (n, pad) = self.batch_size(queued, room, urgent);
        if n == 0 {
            return None;
        }
        let (mut data, mut oob) = self.alloc_buffers(n + pad);
        let items: Vec<RelocItem> = self.gc_queues[temp as usize].drain(..n as usize).collect();
        for it in &items {
            data.extend_from_slice(it.block(self.block_size()));
            let t = Tag {
                kind: TagKind::Relocated,
                epoch: self.epoch,
                lba: it.lba,
                seq: it.seq,
                data_crc: it.crc,
            };
            self.push_tag(&mut oob, &t);
        }
        self.push_padding(&mut data, &mut oob, pad, self.block_size());
        let newest = items.iter().map(|it| it.seq).max().unwrap_or(0);
        // Relocated data keeps the age of its youngest source: a hot block
        // GC moved must not look cold on its next write (erring hot is
        // cheaper than polluting cold zones).
        let cap = self.cap();
        let youngest = items
            .iter()
            .map(|it| self.zone_clock[it.src.zone(cap) as usize])
            .max()
            .unwrap_or(0);
        let clock = &mut self.zone_clock[zone as usize];
        *clock = (*clock).max(youngest);
        self.lane_commit(lane, zone, n + pad, newest);
        self.gc_in_flight += 1;
        self.stats.media_write_blocks += n + pad;
        self.stats.gc_copy_blocks += n;
        self.stats.pad_blocks += pad;
        self.blocks_since_checkpoint += n + pad;
        Some((
            Op::GcAppend {
                zone,
                items,
                pad_blocks: pad as u32,
            },
            Command::Append { zone, data, oob },
        ))
    }

    /// GC may use the reserve; with a shared stream it writes where the host does.
    fn gc_append_done(
        &mut self,
        zone: ZoneId,
        items: Vec<RelocItem>,
        pad: u32,
        result: Result<Outcome, DeviceError>,
    ) {
        self.gc_in_flight -= 1;
        self.append_settled(zone);
        let offset = match result {
            Ok(Outcome::Written { offset_blocks, .. }) => offset_blocks,
            Ok(other) => panic!("append completed as {other:?}"),
            Err(e) => {
                self.stats.media_write_blocks -= items.len() as u64 + u64::from(pad);
                for it in items.into_iter().rev() {
                    self.gc_queues[Temp::Hot as usize].push_front(it);
                }
                self.write_failed(zone, e);
                return;
            }
        };
        for (i, it) in items.into_iter().enumerate() {
            let dst = Ppa::new(zone, offset + i as u64, self.cap());
            if self.l2p.get(it.lba) != Some(it.src) {
                continue; // a host write or trim won the race
            }
            self.map(it.lba, dst, it.crc);
            let seq = self.take_seq();
            self.log.push_note(Note::Reloc {
                seq,
                lba: it.lba,
                from: it.src,
                to: dst,
            });
        }
    }

    /// Drives the job to its note, flush and reset once its copies are done.
    fn advance_job(&mut self) {
        let Some(job) = self.job.as_ref() else { return };
        let (victim, purpose) = (job.victim, job.purpose);
        match job.phase {
            JobPhase::Copying => {
                let wp = self.zones.get(victim).write_pointer_blocks();
                let copied = job.scan_offset >= wp
                    && job.reads_in_flight == 0
                    && job.retries.is_empty()
                    && self.gc_queued() == 0;
                let gc_writes_done = self.gc_in_flight == 0;
                if !copied || !gc_writes_done {
                    return;
                }
                let job = self.job.as_mut().expect("job");
                job.unreadable.retain(|&p| self.p2l.is_valid(p));
                let stuck = job.unreadable.len() as u64;
                if self.zones.get(victim).valid_blocks() > stuck {
                    // Blocks became live behind the scan (cannot happen for a
                    // Full zone) or a write raced: rescan.
                    job.scan_offset = 0;
                    return;
                }
                if stuck > 0 {
                    job.purpose = JobPurpose::Retire;
                }
                let purpose = job.purpose;
                let seq = self.take_seq();
                let note = if purpose == JobPurpose::Retire {
                    Note::ZoneRetire { seq, zone: victim }
                } else {
                    Note::ZoneReset {
                        seq,
                        zone: victim,
                        erase_count: self.zones.get(victim).erase_count() + 1,
                    }
                };
                self.log.push_note(note);
                self.log.pack(true);
                let log_barrier = self.log.next_log_seq();
                self.job.as_mut().expect("job").phase = JobPhase::Noting { log_barrier };
            }
            JobPhase::Noting { log_barrier } if self.log.durable_next() >= log_barrier => {
                if purpose == JobPurpose::Retire {
                    self.retire_zone(victim);
                    self.job = None;
                } else {
                    self.job.as_mut().expect("job").phase = JobPhase::ReadyToFlush;
                }
            }
            _ => {}
        }
    }

    fn victim_flushed(&mut self, result: Result<Outcome, DeviceError>) {
        if result.is_err() {
            self.metadata_failed();
            return;
        }
        self.job.as_mut().expect("job").phase = JobPhase::ReadyToReset;
    }

    fn victim_reset_done(&mut self, zone: ZoneId, result: Result<Outcome, DeviceError>) {
        self.job = None;
        match result {
            Ok(_) => {
                self.p2l.clear_zone(zone, self.cap());
                self.zones.release(zone);
                self.stats.erases += 1;
            }
            Err(DeviceError::DeviceGone) => {}
            Err(_) => {
                let seq = self.take_seq();
                self.log.push_note(Note::ZoneRetire { seq, zone });
                self.retire_zone(zone);
            }
        }
    }

    // ----- metadata log, flushes, checkpoints -------------------------------

    /// The log lost so many zones it cannot go on: read-only until remount.
    fn check_log(&mut self) {
        if self.log.failed() {
            self.metadata_failed();
        }
    }

    fn metadata_failed(&mut self) {
        self.read_only = true;
        self.log.on_failure();
        self.stats.write_errors += 1;
    }

    fn next_log_command(&mut self) -> Option<(Op, Command)> {
        match self.log.next_command()? {
            LogCommand::Write {
                zone,
                offset_blocks,
                first_log_seq,
                blocks,
            } => {
                let count = blocks.len() as u64;
                if let CkptState::Writing { id, location, .. } = &mut self.ckpt {
                    if location.is_none() && (first_log_seq..first_log_seq + count).contains(id) {
                        *location = Some((zone, offset_blocks + (*id - first_log_seq)));
                    }
                }
                self.stats.media_write_blocks += count;
                self.stats.meta_write_blocks += count;
                let mut data = Vec::with_capacity(self.geo.data_bytes(count));
                for b in blocks {
                    data.extend_from_slice(&b);
                }
                let oob = self.meta_oob(count);
                Some((
                    Op::LogWrite {
                        first_log_seq,
                        count,
                    },
                    Command::Write {
                        zone,
                        offset_blocks,
                        data,
                        oob,
                    },
                ))
            }
            LogCommand::Reset { zone } => Some((Op::LogReset { zone }, Command::Reset { zone })),
        }
    }

    /// OOB bytes for metadata blocks: zeros (metadata is self-describing).
    fn meta_oob(&self, blocks: u64) -> Vec<u8> {
        vec![0u8; self.geo.oob_bytes(blocks)]
    }

    fn next_flush_command(&mut self) -> Option<(Op, Command)> {
        let ready: Vec<u64> = self
            .flushes
            .iter()
            .filter(|f| matches!(f.stage, FlushStage::Device))
            .map(|f| f.id)
            .collect();
        if ready.is_empty() {
            return None;
        }
        self.flushes
            .retain(|f| !matches!(f.stage, FlushStage::Device));
        self.stats.flushes += 1;
        Some((Op::HostFlush { waiters: ready }, Command::Flush))
    }

    /// Moves flush waiters through data → log → device stages.
    fn advance_flushes(&mut self) {
        let mut need_pack = false;
        for f in &mut self.flushes {
            if let FlushStage::Data { ticket_barrier } = f.stage {
                if self.buffer.drained_before(ticket_barrier) {
                    need_pack = true;
                    f.stage = FlushStage::Log {
                        log_barrier: u64::MAX,
                    };
                }
            }
        }
        if need_pack {
            self.log.pack(true);
            let barrier = self.log.next_log_seq();
            for f in &mut self.flushes {
                if let FlushStage::Log { log_barrier } = &mut f.stage {
                    if *log_barrier == u64::MAX {
                        *log_barrier = barrier;
                    }
                }
            }
        }
        // A read-only core has already failed every waiter (`fail_waiters`).
        let durable = self.log.durable_next();
        for f in &mut self.flushes {
            if let FlushStage::Log { log_barrier } = f.stage {
                if durable >= log_barrier {
                    f.stage = FlushStage::Device;
                }
            }
        }
    }

    fn checkpoint_due(&self) -> bool {
        if self.ckpt_requested {
            return true;
        }
        if self.blocks_since_checkpoint >= self.cfg.checkpoint_interval_blocks {
            return true;
        }
        let est = crate::layout::max_checkpoint_bytes(&self.geo, self.layout.logical_blocks)
            .div_ceil(self.geo.block_size_bytes as u64 - 64);
        self.log.free_blocks() < 2 * est + 2
    }

    fn advance_checkpoint(&mut self) {
        match self.ckpt {
            CkptState::Idle if !self.read_only && self.checkpoint_due() => {
                self.ckpt_requested = false;
                self.ckpt = CkptState::Draining;
                self.advance_checkpoint();
            }
            CkptState::Draining if self.host_appends_in_flight == 0 => self.capture_checkpoint(),
            CkptState::Writing {
                id,
                end_log_seq,
                location: Some(location),
            } if self.log.durable_next() >= end_log_seq => {
                self.ckpt = CkptState::Flushing {
                    id,
                    location,
                    issued: false,
                };
            }
            _ => {}
        }
    }

    /// A victim whose ZoneReset note precedes the checkpoint in the log: the
    /// checkpoint must call it free, or recovery would skip the new data the
    /// reused zone gets after the reset (it holds no live data: valid is 0).
    fn victim_noted(&self) -> Option<ZoneId> {
        let j = self.job.as_ref()?;
        (j.purpose != JobPurpose::Retire && !matches!(j.phase, JobPhase::Copying))
            .then_some(j.victim)
    }

    fn capture_checkpoint(&mut self) {
        self.log.pack(true);
        let image = self.checkpoint_image();
        let stream = image.encode();
        let chunk_payload = crate::note::chunk_payload_bytes(self.block_size());
        let n = stream.len().div_ceil(chunk_payload) as u64;
        let first = self.log.reserve_log_seqs(n);
        let chunks = checkpoint::split_into_chunks(&stream, self.block_size(), first);
        assert_eq!(chunks.len() as u64, n);
        let blocks = chunks.iter().map(|c| c.encode(self.block_size())).collect();
        self.log.stage_encoded(first, blocks);
        self.blocks_since_checkpoint = 0;
        self.stats.checkpoints += 1;
        self.ckpt = CkptState::Writing {
            id: first,
            end_log_seq: first + n,
            location: None,
        };
    }

    fn checkpoint_image(&self) -> CheckpointImage {
        let noted = self.victim_noted();
        let zones = (0..self.geo.zone_count)
            .map(|z| {
                let zone = self.zones.get(z);
                let mut record = zone.record();
                if Some(z) == noted {
                    assert_eq!(zone.valid_blocks(), 0, "noted victim {z} still holds data");
                    record = crate::zone::ZoneRecord {
                        kind: ZoneKind::Free,
                        state: crate::zone::ZoneUse::Empty,
                        write_pointer_blocks: 0,
                        erase_count: record.erase_count + 1,
                        last_write_seq: record.last_write_seq,
                    };
                }
                crate::recovery::zone_record_out(record, zone.valid_blocks())
            })
            .collect();
        let leaves = self
            .l2p
            .leaves()
            .map(|(i, leaf)| (i, Box::new(*leaf)))
            .collect();
        let crcs = (self.tag_mode == TagMode::InBand).then(|| {
            self.l2p
                .iter()
                .map(|(_, ppa)| self.p2l.crc(ppa).expect("crc of a mapped block"))
                .collect()
        });
        CheckpointImage {
            next_seq: self.next_seq,
            epoch: self.epoch,
            log_seq: self.log.next_log_seq(),
            logical_blocks: self.layout.logical_blocks,
            zones,
            leaves,
            crcs,
        }
    }

    fn next_checkpoint_command(&mut self) -> Option<(Op, Command)> {
        match &mut self.ckpt {
            CkptState::Flushing { issued, .. } if !*issued => {
                *issued = true;
                return Some((Op::CkptFlush, Command::Flush));
            }
            CkptState::Super { busy, .. } if !*busy => *busy = true,
            _ => return None,
        }
        let CkptState::Super {
            id, location, copy, ..
        } = self.ckpt
        else {
            unreachable!()
        };
        if self.super_dead[copy] {
            self.super_step_done(copy);
            return self.next_checkpoint_command();
        }
        let zone = SUPER_ZONES[copy];
        if self.super_wp_blocks[copy] == self.cap() {
            return Some((Op::SuperReset { copy }, Command::Reset { zone }));
        }
        let sb = self.superblock_record(id, location);
        let data = sb.encode(self.block_size());
        self.stats.media_write_blocks += 1;
        self.stats.meta_write_blocks += 1;
        let cmd = Command::Write {
            zone,
            offset_blocks: self.super_wp_blocks[copy],
            data,
            oob: self.meta_oob(1),
        };
        Some((Op::SuperWrite { copy }, cmd))
    }

    fn superblock_record(&self, checkpoint_id: u64, (zone, offset): (ZoneId, u64)) -> Superblock {
        Superblock {
            generation: self.super_generation + 1,
            uuid: self.uuid,
            block_size_bytes: self.geo.block_size_bytes,
            zone_count: self.geo.zone_count,
            zone_capacity_blocks: self.geo.zone_capacity_blocks,
            oob_size_bytes: self.geo.oob_size_bytes,
            write_unit_blocks: self.geo.write_unit_blocks,
            super_zone_count: 2,
            meta_first_zone: self.layout.meta_first_zone,
            meta_zone_count: self.layout.meta_zone_count,
            tag_mode: self.tag_mode,
            logical_blocks: self.layout.logical_blocks,
            checkpoint_log_seq: checkpoint_id,
            checkpoint_zone: zone,
            checkpoint_offset_blocks: offset,
            format_time_seq: 0,
        }
    }

    fn checkpoint_flushed(&mut self, result: Result<Outcome, DeviceError>) {
        if result.is_err() {
            self.metadata_failed();
            return;
        }
        let CkptState::Flushing { id, location, .. } = self.ckpt else {
            panic!("checkpoint flush out of order")
        };
        self.ckpt = CkptState::Super {
            id,
            location,
            copy: 0,
            busy: false,
        };
    }

    fn super_write_done(&mut self, copy: usize, result: Result<Outcome, DeviceError>) {
        match result {
            Ok(_) => self.super_wp_blocks[copy] += 1,
            Err(e) => return self.super_failed(copy, e),
        }
        self.super_step_done(copy);
    }

    /// A superblock zone failed: the other copy carries on alone (mount
    /// takes the newest valid record of either); with both gone the volume
    /// is read-only.
    fn super_failed(&mut self, copy: usize, error: DeviceError) {
        if error == DeviceError::DeviceGone {
            return self.metadata_failed();
        }
        self.stats.write_errors += 1;
        self.super_dead[copy] = true;
        if self.super_dead.iter().all(|&d| d) {
            return self.metadata_failed();
        }
        self.super_step_done(copy);
    }

    /// Copy `copy` has the new record (or is dead): on to the next, or commit.
    fn super_step_done(&mut self, copy: usize) {
        let CkptState::Super { id, location, .. } = self.ckpt else {
            panic!("superblock write out of order")
        };
        if copy == 0 {
            self.ckpt = CkptState::Super {
                id,
                location,
                copy: 1,
                busy: false,
            };
        } else {
            self.super_generation += 1;
            self.log.set_committed_checkpoint(id);
            self.ckpt = CkptState::Idle;
        }
    }

    /// Re-evaluates everything that waits on state rather than on a command.
    fn advance(&mut self) {
        if self.read_only {
            self.fail_waiters();
        }
        let comfortable = u64::from(self.gc_reserve_zones + self.cfg.gc_start_free_zones);
        if self.reserve_unlocked && u64::from(self.zones.free_count()) > comfortable {
            self.reserve_unlocked = false;
        }
        self.admit_writes();
        self.advance_flushes();
        self.advance_job();
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
            self.replies.push_back(Reply {
                id: f.id,
                result: Err(error.clone()),
            });
        }
        for (id, ..) in std::mem::take(&mut self.waiting_writes) {
            self.replies.push_back(Reply {
                id,
                result: Err(error.clone()),
            });
        }
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
            &self.l2p,
            &self.p2l,
            self.geo.zone_capacity_blocks,
        );
        s
    }

    /// Mapped logical blocks.
    pub fn mapped_blocks(&self) -> u64 {
        self.l2p.mapped_blocks()
    }

    /// Physical location of `lba`, if mapped (for tools and tests).
    pub fn lookup(&self, lba: Lba) -> Option<Ppa> {
        self.l2p.get(lba)
    }
}
