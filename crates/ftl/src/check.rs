//! `zftl check`: verify every metadata structure and every mapped block of a
//! device, read-only.
//!
//! The walk is the mount's own ([`recover_state`], which writes nothing)
//! plus what mount does not need to look at: every superblock record of
//! both copies, the log past the point where roll-forward stops (a damaged
//! block with valid blocks after it means notes that mount silently drops),
//! the data and tag of every mapped block, and the agreement of the map,
//! the reverse map and the zone table.
//!
//! [`check`] never writes and never panics on damaged media: every finding
//! is a [`Problem`] in the [`CheckReport`]. Findings that are the normal
//! result of a power cut (a torn superblock record, the log's end) are
//! *notices*, not problems.

use crate::addr::{Lba, Ppa};
use crate::backend::{
    again_after_abort, Backend, BackendExt, DeviceError, Geometry, ZoneId, ZoneInfo, ZoneState,
};
use crate::checkpoint;
use crate::error::MountError;
use crate::ftl::NAMELESS_MD_BYTES;
use crate::layout::{Layout, SUPER_ZONES};
use crate::mapping::{Owner, Target};
use crate::nameless::{MdEntry, NamelessTag, NamelessTagKind};
use crate::note::LogBlock;
use crate::recovery::{recover_state, LogReader, Recovered};
use crate::summary;
use crate::superblock::{Superblock, TagMode};
use crate::tag::{DataCrcImpl, Tag, TAG_BYTES};
use crate::zone::{ZoneKind, ZoneUse};
use serde::Serialize;

/// Problems kept in a report; past it only `summary.problems_total` grows.
pub const MAX_PROBLEMS: usize = 1000;

/// What kind of structure a [`Problem`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProblemKind {
    /// No valid superblock: the device holds no zftl FTL.
    NotFormatted,
    /// A superblock record below its zone's write pointer does not decode.
    SuperblockRecord,
    /// A superblock copy holds no valid record.
    SuperblockCopyMissing,
    /// Superblock records disagree with each other or with the device.
    SuperblockMismatch,
    /// The checkpoint the superblock names cannot be read or decoded.
    Checkpoint,
    /// The metadata log is damaged (roll-forward would lose notes).
    LogBlock,
    /// Recovery failed for a reason other than the above.
    Recovery,
    /// A mapped block's tag is missing or does not decode (OOB mode).
    Tag,
    /// A mapped block's tag names another logical block.
    Misdirected,
    /// A mapped block's data does not match its CRC.
    DataCrc,
    /// The device cannot read a mapped block.
    Unreadable,
    /// The map and the reverse map disagree.
    MapMismatch,
    /// A zone's valid count, kind or write pointer disagrees with the map.
    ZoneAccounting,
    /// A zone summary (tags in band) is damaged or names a live block
    /// wrongly. A missing one is a notice.
    Summary,
    /// A shared entry's reference count or CRC disagrees with the map.
    Shared,
    /// A device error stopped part of the check.
    Device,
    /// A live nameless block's tag, birth generation or data CRC does not
    /// match (format.md §11).
    Nameless,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub what: ProblemKind,
    pub zone: Option<ZoneId>,
    pub offset_blocks: Option<u64>,
    pub lba: Option<Lba>,
    pub detail: String,
}

impl Problem {
    fn new(what: ProblemKind, detail: impl Into<String>) -> Problem {
        Problem {
            what,
            zone: None,
            offset_blocks: None,
            lba: None,
            detail: detail.into(),
        }
    }

    fn at(mut self, zone: ZoneId, offset_blocks: u64) -> Problem {
        self.zone = Some(zone);
        self.offset_blocks = Some(offset_blocks);
        self
    }

    fn lba(mut self, lba: Lba) -> Problem {
        self.lba = Some(lba);
        self
    }
}

/// Counts of what the check looked at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CheckSummary {
    /// A valid superblock was found.
    pub formatted: bool,
    /// Recovery (the mount's read-only steps) succeeded.
    pub recovered: bool,
    /// "oob" or "in-band"; `None` when no superblock was found.
    pub tag_mode: Option<String>,
    pub superblock_generation: Option<u64>,
    /// Records read in zones 0 and 1 (below their write pointers).
    pub superblock_records: u64,
    pub superblock_records_valid: u64,
    pub checkpoint_log_seq: Option<u64>,
    pub checkpoint_zone: Option<ZoneId>,
    pub checkpoint_offset_blocks: Option<u64>,
    pub checkpoint_chunks: u64,
    /// Valid log blocks after the checkpoint's chunk 0 (its other chunks
    /// and later checkpoints' chunks included).
    pub log_blocks_after_checkpoint: u64,
    pub log_note_blocks: u64,
    pub notes_replayed: u64,
    pub tags_replayed: u64,
    /// Why roll-forward stops where it does (the normal end of the log).
    pub log_end: Option<String>,
    pub logical_blocks: Option<u64>,
    pub mapped_blocks: u64,
    /// Live physical blocks read and checked (a shared block once).
    pub mapped_blocks_checked: u64,
    /// Physical blocks reached through shared entries, and those whose
    /// reference counts were checked.
    pub shared_blocks: u64,
    pub shared_blocks_checked: u64,
    pub zones_checked: u32,
    /// Every problem found, including those past [`MAX_PROBLEMS`].
    pub problems_total: u64,
}

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// Damage: a report with any problem is not clean.
    pub problems: Vec<Problem>,
    /// The normal traces of power cuts (torn superblock records); not damage.
    pub notices: Vec<Problem>,
    pub summary: CheckSummary,
}

impl CheckReport {
    /// No problems (notices allowed).
    pub fn is_clean(&self) -> bool {
        self.summary.problems_total == 0
    }

    fn problem(&mut self, p: Problem) {
        self.summary.problems_total += 1;
        if self.problems.len() < MAX_PROBLEMS {
            self.problems.push(p);
        }
    }
}

/// Where a long check is, for progress bars.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CheckProgress {
    pub step: &'static str,
    /// Units done of `total` within this step (blocks for "mapped blocks").
    pub done: u64,
    pub total: u64,
}

/// Checks `backend` read-only; see the module docs. Data CRCs are taken
/// with [`DataCrcImpl::selected`].
pub fn check<B: Backend>(backend: &mut B) -> CheckReport {
    check_with_progress(backend, DataCrcImpl::selected(), &mut |_| {})
}

/// [`check`], taking data CRCs with `crc` and calling `progress` at each
/// step and every few hundred blocks.
pub fn check_with_progress<B: Backend>(
    backend: &mut B,
    crc: DataCrcImpl,
    progress: &mut dyn FnMut(CheckProgress),
) -> CheckReport {
    let mut report = CheckReport::default();
    let g = backend.geometry().clone();
    let step = |p: &mut dyn FnMut(CheckProgress), step| {
        p(CheckProgress {
            step,
            done: 0,
            total: 0,
        })
    };
    step(progress, "superblocks");
    let supers = scan_superblocks(backend, &g);
    step(progress, "recovery");
    let r = match recover_state(backend, crc) {
        Ok(r) => r,
        Err(e) => {
            report.problem(recovery_problem(backend, &g, &supers, &e));
            report.summary.formatted = !matches!(e, MountError::NotFormatted(_));
            return report;
        }
    };
    report.notices = supers.notices;
    for p in supers.problems {
        report.problem(p);
    }
    summarize(&mut report.summary, &r, &supers.counts);
    step(progress, "log");
    let zones = match zone_reports(backend, &g) {
        Ok(z) => z,
        Err(p) => {
            report.problem(p);
            return report;
        }
    };
    check_log(backend, &g, &r, &zones, &mut report);
    check_mapped(backend, &g, &r, progress, &mut report);
    check_nameless(backend, &g, &r, &mut report);
    check_shared(&r, &mut report);
    step(progress, "zones");
    check_zones(&g, &r, &zones, &mut report);
    if r.superblock.tag_mode == TagMode::InBand {
        step(progress, "zone summaries");
        check_summaries(backend, &g, &r, &mut report);
    }
    report
}

// ----- zone summaries ------------------------------------------------------

/// In band, every data zone filled to capacity ends in a summary (format.md
/// §2a). GC only takes it as a hint, so a missing one (zone closed early,
/// or formatted before summaries) is a notice; one that has the magic but
/// does not decode, or names a live block as holding another LBA than the
/// map says, is damage.
fn check_summaries<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    r: &Recovered,
    report: &mut CheckReport,
) {
    let cap = g.zone_capacity_blocks;
    let bs = g.block_size_bytes as usize;
    let data_cap = crate::layout::data_blocks_per_zone(g, true);
    for (z, zone) in r.zones.iter() {
        let filled = zone.state() == ZoneUse::Full && zone.write_pointer_blocks() == cap;
        if !matches!(zone.kind(), ZoneKind::Data { .. }) || !filled {
            continue;
        }
        let notice = |detail: String| Problem::new(ProblemKind::Summary, detail).at(z, data_cap);
        let data = match read_summary(
            backend,
            g,
            z,
            data_cap,
            summary::encoded_blocks(data_cap, bs),
        ) {
            Ok(data) => data,
            Err(DeviceError::DeviceGone) => return,
            Err(e) => {
                report.notices.push(notice(format!(
                    "summary unreadable (torn by a power cut?): {e}"
                )));
                continue;
            }
        };
        let lbas = match summary::decode(z, data_cap, &data, bs) {
            Ok(lbas) => lbas,
            Err(e @ summary::SummaryError::NoMagic { .. }) => {
                report.notices.push(notice(e.to_string()));
                continue;
            }
            Err(e) => {
                report.problem(notice(e.to_string()));
                continue;
            }
        };
        for (off, &lba) in (0u64..).zip(lbas.iter()) {
            let ppa = Ppa::new(z, off, cap);
            if lba == summary::NO_LBA || !r.mapping.is_live(ppa) {
                continue;
            }
            let lba = Lba::from(lba);
            let direct = lba < r.mapping.space_blocks()
                && r.mapping.target(lba) == Some(Target::Direct(ppa));
            // A block the summary names may since have become shared.
            if !direct && r.mapping.find_shared(ppa).is_none() {
                report.problem(
                    Problem::new(
                        ProblemKind::Summary,
                        format!("the zone summary says this live block holds block {lba}; the map does not"),
                    )
                    .at(z, off)
                    .lba(lba),
                );
            }
        }
    }
}

/// `blocks` blocks from `offset_blocks` of `zone`, in reads of at most
/// `max_transfer_blocks`.
fn read_summary<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    zone: ZoneId,
    offset_blocks: u64,
    blocks: u64,
) -> Result<Vec<u8>, DeviceError> {
    let mut data = Vec::new();
    let mut at = 0;
    while at < blocks {
        let count = (blocks - at).min(u64::from(g.max_transfer_blocks));
        let (part, _) = read_retrying(backend, zone, offset_blocks + at, count as u32)?;
        data.extend_from_slice(&part);
        at += count;
    }
    Ok(data)
}

// ----- superblocks ---------------------------------------------------------

#[derive(Default)]
struct SuperCounts {
    records: u64,
    valid: u64,
}

struct SuperScan {
    /// Valid records with their zone and offset, in read order.
    valid: Vec<(ZoneId, u64, Superblock)>,
    problems: Vec<Problem>,
    notices: Vec<Problem>,
    counts: SuperCounts,
}

impl SuperScan {
    fn newest(&self) -> Option<&Superblock> {
        self.valid
            .iter()
            .map(|(_, _, sb)| sb)
            .max_by_key(|sb| sb.generation)
    }
}

/// Every record of both copies. A record that reads back but does not
/// decode is damage: a superblock record is one block, which NVMe writes
/// atomically across a power failure and which the simulator marks torn
/// (unreadable) when a cut interrupts it. An unreadable record is such a
/// torn update: later records (or the other copy) supersede it.
fn scan_superblocks<B: Backend>(backend: &mut B, g: &Geometry) -> SuperScan {
    let mut s = SuperScan {
        valid: Vec::new(),
        problems: Vec::new(),
        notices: Vec::new(),
        counts: SuperCounts::default(),
    };
    for z in SUPER_ZONES.into_iter().filter(|&z| z < g.zone_count) {
        let info = match again_after_abort(|| backend.zone_info(z)) {
            Ok(i) => i,
            Err(e) => {
                s.problems
                    .push(device_problem("superblock zone report", &e).at(z, 0));
                continue;
            }
        };
        if info.state == ZoneState::Offline {
            // The FTL takes a copy whose zone failed out of service and
            // writes the other alone (mount does the same): lost
            // redundancy, not damage. With both gone nothing is valid, and
            // recovery reports the volume as not formatted.
            s.notices.push(
                Problem::new(
                    ProblemKind::SuperblockCopyMissing,
                    format!(
                        "superblock copy {z}: its zone is offline (the device retired it after \
                         a failed write or erase); the other copy serves"
                    ),
                )
                .at(z, 0),
            );
            continue;
        }
        let wp = info.write_pointer_blocks.min(g.zone_capacity_blocks);
        let problems_before = s.problems.len();
        for off in 0..wp {
            s.counts.records += 1;
            match read_retrying(backend, z, off, 1) {
                Ok((data, _)) => match Superblock::decode(&data) {
                    Ok(sb) => {
                        s.counts.valid += 1;
                        s.valid.push((z, off, sb));
                    }
                    Err(e) => s.problems.push(
                        Problem::new(
                            ProblemKind::SuperblockRecord,
                            format!("superblock record does not decode: {e}"),
                        )
                        .at(z, off),
                    ),
                },
                Err(DeviceError::UncorrectableRead { .. }) => {
                    let place = if off + 1 == wp { "last" } else { "earlier" };
                    s.notices.push(
                        Problem::new(
                            ProblemKind::SuperblockRecord,
                            format!(
                                "{place} superblock record is unreadable (an update torn by a \
                                 power cut; newer records or the other copy serve)"
                            ),
                        )
                        .at(z, off),
                    );
                }
                Err(e) => s
                    .problems
                    .push(device_problem("reading a superblock record", &e).at(z, off)),
            }
        }
        if !s.valid.iter().any(|(vz, _, _)| *vz == z) && g.zone_count > 1 {
            let missing = Problem::new(
                ProblemKind::SuperblockCopyMissing,
                format!("superblock copy {z} holds no valid record"),
            )
            .at(z, 0);
            // A full copy is reset before its next record is written: a cut
            // in between leaves it empty or with that record torn, and the
            // other copy serves. Only a record that reads back wrong is damage.
            if s.problems.len() == problems_before {
                s.notices.push(Problem {
                    detail: format!(
                        "superblock copy {z} holds no valid record (its rewrite was cut by a \
                         power cut; the other copy serves)"
                    ),
                    ..missing
                });
            } else {
                s.problems.push(missing);
            }
        }
    }
    cross_check_superblocks(g, &mut s);
    s
}

/// Every valid record describes this device and the same volume as the
/// newest one.
fn cross_check_superblocks(g: &Geometry, s: &mut SuperScan) {
    let Some(newest) = s.newest().cloned() else {
        // Nothing valid at all: recovery reports "not formatted"; a copy
        // missing is implied.
        s.problems
            .retain(|p| p.what != ProblemKind::SuperblockCopyMissing);
        s.notices
            .retain(|p| p.what != ProblemKind::SuperblockCopyMissing);
        return;
    };
    let volume = |sb: &Superblock| {
        (
            sb.uuid,
            sb.meta_first_zone,
            sb.meta_zone_count,
            sb.tag_mode,
            sb.logical_blocks,
        )
    };
    for (z, off, sb) in &s.valid {
        if let Err(e) = sb.validate_against(g) {
            s.problems
                .push(Problem::new(ProblemKind::SuperblockMismatch, e.to_string()).at(*z, *off));
        } else if volume(sb) != volume(&newest) {
            s.problems.push(
                Problem::new(
                    ProblemKind::SuperblockMismatch,
                    format!(
                        "superblock generation {} describes another volume than the newest \
                         (generation {}): uuid, layout, tag mode or logical size differ",
                        sb.generation, newest.generation
                    ),
                )
                .at(*z, *off),
            );
        }
    }
}

// ----- recovery failure ----------------------------------------------------

/// The one problem of a report whose recovery failed: which step and why,
/// with the damaged checkpoint chunk located when there is one.
fn recovery_problem<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    supers: &SuperScan,
    e: &MountError,
) -> Problem {
    let text = e.to_string();
    let kind = match e {
        MountError::NotFormatted(_) => ProblemKind::NotFormatted,
        MountError::Format { step, .. } if step.contains("superblock") => {
            ProblemKind::SuperblockMismatch
        }
        MountError::Format { step, .. } if step.contains("checkpoint") => ProblemKind::Checkpoint,
        MountError::Format { step, .. } if step.contains("metadata log") => ProblemKind::LogBlock,
        MountError::Damaged(m) if m.starts_with("checkpoint") => ProblemKind::Checkpoint,
        MountError::Device { .. } => ProblemKind::Device,
        _ => ProblemKind::Recovery,
    };
    let problem = Problem::new(kind, format!("recovery failed: {text}"));
    if kind != ProblemKind::Checkpoint {
        return problem;
    }
    let Some(sb) = supers.newest() else {
        return problem;
    };
    match locate_checkpoint_damage(backend, g, sb) {
        Some((zone, off, why)) => Problem::new(
            kind,
            format!("recovery failed: {text}; checkpoint chunk at zone {zone} offset {off}: {why}"),
        )
        .at(zone, off),
        None => problem.at(sb.checkpoint_zone, sb.checkpoint_offset_blocks),
    }
}

/// The first chunk of the newest checkpoint that does not read back as the
/// expected chunk.
fn locate_checkpoint_damage<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    sb: &Superblock,
) -> Option<(ZoneId, u64, String)> {
    let layout = layout_of(sb);
    let mut pos = LogPos::new(g, &layout, sb.checkpoint_zone, sb.checkpoint_offset_blocks)?;
    let bs = g.block_size_bytes as usize;
    let mut total = u64::MAX;
    let mut index = 0u64;
    while index < total && index < pos.ring_blocks() {
        let (zone, off) = pos.here();
        let expected = sb.checkpoint_log_seq + index;
        let why = match read_retrying(backend, zone, off, 1) {
            Err(e) => Some(format!("unreadable: {e}")),
            Ok((data, _)) => match LogBlock::decode(&data) {
                Err(e) => Some(e.to_string()),
                Ok(LogBlock::CheckpointChunk {
                    log_seq,
                    checkpoint_id,
                    payload,
                    ..
                }) if log_seq == expected && checkpoint_id == sb.checkpoint_log_seq => {
                    if index == 0 {
                        match checkpoint::peek_stream_bytes(&payload) {
                            Ok(n) => total = checkpoint::chunks_for_stream(n, bs),
                            Err(e) => return Some((zone, off, e.to_string())),
                        }
                    }
                    None
                }
                // Notes blocks may sit between chunks.
                Ok(LogBlock::Notes { log_seq, .. }) if log_seq == expected => {
                    total = total.saturating_add(1);
                    None
                }
                Ok(other) => Some(format!(
                    "expected log_seq {expected} of checkpoint {}, found log block {}",
                    sb.checkpoint_log_seq,
                    other.log_seq()
                )),
            },
        };
        if let Some(why) = why {
            return Some((zone, off, why));
        }
        index += 1;
        pos.advance();
    }
    None
}

fn layout_of(sb: &Superblock) -> Layout {
    Layout {
        meta_first_zone: sb.meta_first_zone,
        meta_zone_count: sb.meta_zone_count,
        logical_blocks: sb.logical_blocks,
    }
}

fn summarize(s: &mut CheckSummary, r: &Recovered, counts: &SuperCounts) {
    let sb = &r.superblock;
    s.formatted = true;
    s.recovered = true;
    s.tag_mode = Some(tag_mode_name(sb.tag_mode).to_string());
    s.superblock_generation = Some(sb.generation);
    s.superblock_records = counts.records;
    s.superblock_records_valid = counts.valid;
    s.checkpoint_log_seq = Some(sb.checkpoint_log_seq);
    s.checkpoint_zone = Some(sb.checkpoint_zone);
    s.checkpoint_offset_blocks = Some(sb.checkpoint_offset_blocks);
    s.notes_replayed = r.notes_replayed as u64;
    s.tags_replayed = r.tags_replayed as u64;
    s.logical_blocks = Some(sb.logical_blocks);
    s.mapped_blocks = r.mapping.mapped_blocks();
    s.shared_blocks = r.mapping.shared_blocks();
}

/// "oob" or "in-band".
pub fn tag_mode_name(mode: TagMode) -> &'static str {
    match mode {
        TagMode::Oob => "oob",
        TagMode::InBand => "in-band",
    }
}

/// Attempts at a read before a block counts as unreadable: NAND read errors
/// are often transient (read retry), and a read a controller reset aborted
/// (`HostIo`) says nothing of the block, as mount also assumes.
const READ_ATTEMPTS: u32 = 8;

fn read_retrying<B: Backend>(
    backend: &mut B,
    zone: ZoneId,
    offset_blocks: u64,
    block_count: u32,
) -> Result<(Vec<u8>, Vec<u8>), DeviceError> {
    let mut last = None;
    for _ in 0..READ_ATTEMPTS {
        match backend.read_blocks(zone, offset_blocks, block_count) {
            Err(e @ (DeviceError::UncorrectableRead { .. } | DeviceError::HostIo { .. })) => {
                last = Some(e)
            }
            other => return other,
        }
    }
    Err(last.expect("at least one attempt"))
}

fn device_problem(what: &str, e: &DeviceError) -> Problem {
    Problem::new(ProblemKind::Device, format!("{what}: {e}"))
}

fn zone_reports<B: Backend>(backend: &mut B, g: &Geometry) -> Result<Vec<ZoneInfo>, Problem> {
    (0..g.zone_count)
        .map(|z| {
            again_after_abort(|| backend.zone_info(z))
                .map_err(|e| device_problem("zone report", &e).at(z, 0))
        })
        .collect()
}

// ----- the metadata log ----------------------------------------------------

/// A position in the metadata log ring.
struct LogPos {
    ring: Vec<ZoneId>,
    index: usize,
    offset_blocks: u64,
    capacity_blocks: u64,
}

impl LogPos {
    fn new(g: &Geometry, layout: &Layout, zone: ZoneId, offset_blocks: u64) -> Option<LogPos> {
        let ring: Vec<ZoneId> = layout.meta_zones().collect();
        let index = ring.iter().position(|&z| z == zone)?;
        (offset_blocks < g.zone_capacity_blocks).then_some(LogPos {
            ring,
            index,
            offset_blocks,
            capacity_blocks: g.zone_capacity_blocks,
        })
    }

    fn here(&self) -> (ZoneId, u64) {
        (self.ring[self.index], self.offset_blocks)
    }

    fn advance(&mut self) {
        self.offset_blocks += 1;
        if self.offset_blocks == self.capacity_blocks {
            self.offset_blocks = 0;
            self.index = (self.index + 1) % self.ring.len();
        }
    }

    fn ring_blocks(&self) -> u64 {
        self.ring.len() as u64 * self.capacity_blocks
    }
}

/// Why a log position is not the next block of the log.
enum LogRead {
    Block(LogBlock),
    /// Why the log cannot go on here; `cut`: the block is unwritten or
    /// unreadable, as a write lost or torn by a power cut leaves it.
    End {
        why: String,
        cut: bool,
    },
}

fn log_end(why: impl Into<String>, cut: bool) -> LogRead {
    LogRead::End {
        why: why.into(),
        cut,
    }
}

fn read_log_block<B: Backend>(
    backend: &mut B,
    zone: ZoneId,
    off: u64,
    wp: u64,
) -> Result<LogRead, DeviceError> {
    if off >= wp {
        return Ok(log_end("erased (at the zone's write pointer)", true));
    }
    match read_retrying(backend, zone, off, 1) {
        Ok((data, _)) => Ok(match LogBlock::decode(&data) {
            Ok(b) => LogRead::Block(b),
            Err(e) => log_end(e.to_string(), false),
        }),
        Err(DeviceError::UncorrectableRead { .. }) => {
            Ok(log_end("unreadable (torn by a power cut?)", true))
        }
        // A ring zone whose reset failed: out of the ring, as mount reads it.
        Err(DeviceError::ZoneOffline { .. }) => Ok(log_end("the ring zone is offline", false)),
        Err(e) => Err(e),
    }
}

/// Walks the log from the checkpoint's chunk 0 to where roll-forward stops,
/// with mount's own reader (so past a ring zone the writer ended after a
/// failed write, as mount goes), then looks past that point: a valid
/// block that continues the sequence there means the stop was damage in
/// the middle of the log.
fn check_log<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    r: &Recovered,
    zones: &[ZoneInfo],
    report: &mut CheckReport,
) {
    let sb = &r.superblock;
    let (zone0, off0) = (sb.checkpoint_zone, sb.checkpoint_offset_blocks);
    let mut reader = LogReader::new(g, &r.layout, zone0, off0);
    let Some(start) = LogPos::new(g, &r.layout, zone0, off0) else {
        return; // recovery would have failed
    };
    let wp_of = |z: ZoneId| zones[z as usize].write_pointer_blocks;
    let mut expected = sb.checkpoint_log_seq;
    let limit = start.ring_blocks();
    let mut walked = 0;
    let (end, cut) = loop {
        if walked == limit {
            break ("the whole ring holds one sequence".to_string(), false);
        }
        let block = match reader.next_block(backend, expected) {
            Ok(Some(b)) => b,
            Ok(None) => match why_the_log_ends(backend, &reader, expected, wp_of) {
                Ok(why) => break why,
                Err((zone, off, e)) => {
                    report.problem(device_problem("reading the metadata log", &e).at(zone, off));
                    return;
                }
            },
            Err(e) => {
                let (zone, off) = reader.here().expect("inside the ring");
                let problem = match &e {
                    MountError::Device { source, .. } => {
                        device_problem("reading the metadata log", source)
                    }
                    format @ MountError::Format { .. } => Problem::new(
                        ProblemKind::LogBlock,
                        format!("reading the metadata log: {format}"),
                    ),
                    other => Problem::new(
                        ProblemKind::Device,
                        format!("reading the metadata log: {other}"),
                    ),
                };
                report.problem(problem.at(zone, off));
                return;
            }
        };
        let s = &mut report.summary;
        s.log_blocks_after_checkpoint += 1;
        match block {
            LogBlock::Notes { .. } => s.log_note_blocks += 1,
            LogBlock::CheckpointChunk { checkpoint_id, .. }
                if checkpoint_id == sb.checkpoint_log_seq =>
            {
                s.checkpoint_chunks += 1
            }
            LogBlock::CheckpointChunk { .. } => {}
        }
        reader.consume(&block);
        expected += 1;
        walked += 1;
    };
    let (zone, off) = reader.here().expect("inside the ring");
    report.summary.log_end = Some(format!("zone {zone} offset {off}: {end}"));
    let Some(mut pos) = LogPos::new(g, &r.layout, zone, off) else {
        return;
    };
    let end = LogEnd {
        expected,
        cut,
        budget: limit - walked,
    };
    look_past_end(backend, &mut pos, end, wp_of, report);
}

/// What lies where the reader found no block `expected`, and whether that
/// is a cut (an unwritten or unreadable block, as a power cut leaves).
fn why_the_log_ends<B: Backend>(
    backend: &mut B,
    reader: &LogReader,
    expected: u64,
    wp_of: impl Fn(ZoneId) -> u64,
) -> Result<(String, bool), (ZoneId, u64, DeviceError)> {
    let (zone, off) = reader.here().expect("inside the ring");
    match read_log_block(backend, zone, off, wp_of(zone)) {
        Ok(LogRead::Block(b)) => Ok((
            format!(
                "log_seq {} where {expected} was next (a block of an earlier lap)",
                b.log_seq()
            ),
            false,
        )),
        Ok(LogRead::End { why, cut }) => Ok((why, cut)),
        Err(e) => Err((zone, off, e)),
    }
}

/// Where the walk of the log stopped.
struct LogEnd {
    /// The log_seq it found no block for.
    expected: u64,
    /// The block there is unwritten or unreadable (a write lost or torn).
    cut: bool,
    /// Ring blocks not walked yet.
    budget: u64,
}

/// From the end position `pos` (which held no block `end.expected`): a
/// valid block `k` positions later with log_seq `expected + k` proves the
/// log went on after a block that is now damaged. Except across ring zones:
/// the writer starts on the next zone while the last writes to the full one
/// are still in flight, so a cut may lose or tear those and keep later
/// ones, none of which was acknowledged (durability is a prefix of the log).
fn look_past_end<B: Backend>(
    backend: &mut B,
    pos: &mut LogPos,
    end: LogEnd,
    wp_of: impl Fn(ZoneId) -> u64,
    report: &mut CheckReport,
) {
    let (bad_zone, bad_off) = pos.here();
    let expected = end.expected;
    for k in 1..end.budget {
        pos.advance();
        let (zone, off) = pos.here();
        let wp = wp_of(zone);
        if off >= wp {
            if wp < pos.capacity_blocks {
                return; // the written part of the log ends here
            }
            continue;
        }
        let Ok(LogRead::Block(b)) = read_log_block(backend, zone, off, wp) else {
            continue;
        };
        if b.log_seq() == expected + k {
            if end.cut && zone != bad_zone {
                report.notices.push(
                    Problem::new(
                        ProblemKind::LogBlock,
                        format!(
                            "log block {expected} was lost or torn by a power cut while later \
                             blocks went to the next ring zone (log block {} at zone {zone} \
                             offset {off}); none was acknowledged, and mount drops them",
                            b.log_seq()
                        ),
                    )
                    .at(bad_zone, bad_off),
                );
                return;
            }
            report.problem(
                Problem::new(
                    ProblemKind::LogBlock,
                    format!(
                        "log block {expected} is damaged but the log goes on after it \
                         (log block {} at zone {zone} offset {off}); mount stops at the \
                         damaged block and loses the notes after it",
                        b.log_seq()
                    ),
                )
                .at(bad_zone, bad_off),
            );
            return;
        }
    }
}

// ----- mapped blocks -------------------------------------------------------

/// Reads every live block once (runs of consecutive physical blocks), a
/// shared one for all its owners, and checks its tag or CRC.
fn check_mapped<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    r: &Recovered,
    progress: &mut dyn FnMut(CheckProgress),
    report: &mut CheckReport,
) {
    let cap = g.zone_capacity_blocks;
    let mut blocks: Vec<(Ppa, Owner)> = r
        .mapping
        .iter()
        .filter_map(|(l, t)| match t {
            Target::Direct(p) => Some((p, Owner::Direct(l))),
            Target::Shared(_) => None,
        })
        .chain(
            r.mapping
                .shared_entries()
                .map(|(id, p, ..)| (p, Owner::Shared(id))),
        )
        .collect();
    blocks.sort_unstable_by_key(|b| b.0);
    let total = blocks.len() as u64;
    let max_run = g.max_transfer_blocks.clamp(1, 256) as usize;
    let mut i = 0;
    while i < blocks.len() {
        let zone = blocks[i].0.zone(cap);
        let mut n = 1;
        while i + n < blocks.len()
            && n < max_run
            && blocks[i + n].0 .0 == blocks[i].0 .0 + n as u32
            && blocks[i + n].0.zone(cap) == zone
        {
            n += 1;
        }
        if !check_run(backend, g, r, &blocks[i..i + n], report) {
            return;
        }
        i += n;
        report.summary.mapped_blocks_checked = i as u64;
        progress(CheckProgress {
            step: "mapped blocks",
            done: i as u64,
            total,
        });
    }
}

/// The LBA a problem with a block is reported at: its direct owner.
fn owner_lba(owner: Owner) -> Option<Lba> {
    match owner {
        Owner::Direct(lba) => Some(lba),
        Owner::Shared(_) => None,
    }
}

/// One run of consecutive blocks in one zone; `false` when the device is gone.
fn check_run<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    r: &Recovered,
    run: &[(Ppa, Owner)],
    report: &mut CheckReport,
) -> bool {
    let cap = g.zone_capacity_blocks;
    let (zone, first) = (run[0].0.zone(cap), run[0].0.offset_blocks(cap));
    let read = if run.len() == 1 {
        read_retrying(backend, zone, first, 1)
    } else {
        backend.read_blocks(zone, first, run.len() as u32)
    };
    match read {
        Ok((data, oob)) => {
            for (i, &(ppa, owner)) in run.iter().enumerate() {
                check_block(g, r, ppa, owner, &data, &oob, i, report);
            }
            true
        }
        Err(DeviceError::DeviceGone) => {
            report.problem(device_problem("reading data", &DeviceError::DeviceGone));
            false
        }
        // One bad block fails the whole read: retry block by block.
        Err(_) if run.len() > 1 => run
            .iter()
            .all(|&b| check_run(backend, g, r, std::slice::from_ref(&b), report)),
        Err(e) => {
            let (ppa, owner) = run[0];
            let what = if matches!(e, DeviceError::UncorrectableRead { .. }) {
                ProblemKind::Unreadable
            } else {
                ProblemKind::Device
            };
            let mut p = Problem::new(what, format!("mapped block cannot be read: {e}"))
                .at(ppa.zone(cap), ppa.offset_blocks(cap));
            p.lba = owner_lba(owner);
            report.problem(p);
            true
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn check_block(
    g: &Geometry,
    r: &Recovered,
    ppa: Ppa,
    owner: Owner,
    data: &[u8],
    oob: &[u8],
    i: usize,
    report: &mut CheckReport,
) {
    let cap = g.zone_capacity_blocks;
    let bs = g.block_size_bytes as usize;
    let ob = g.oob_size_bytes as usize;
    let whose = match owner {
        Owner::Direct(lba) => format!("block {lba}"),
        Owner::Shared(id) => format!("shared entry {id}"),
    };
    let here = |what, detail: String| {
        let mut p = Problem::new(what, detail).at(ppa.zone(cap), ppa.offset_blocks(cap));
        p.lba = owner_lba(owner);
        p
    };
    let Some(block) = data.get(i * bs..(i + 1) * bs) else {
        report.problem(here(ProblemKind::Device, "short read".into()));
        return;
    };
    let actual = r.data_crc.checksum(block);
    if !r.mapping.is_live(ppa) {
        report.problem(here(
            ProblemKind::MapMismatch,
            format!("the map sends {whose} here, the validity bitmap says not live"),
        ));
    }
    let expected = match r.superblock.tag_mode {
        TagMode::Oob => {
            let Some(bytes) = oob.get(i * ob..i * ob + TAG_BYTES) else {
                report.problem(here(ProblemKind::Device, "short OOB read".into()));
                return;
            };
            match Tag::decode(bytes) {
                Err(e) => {
                    report.problem(here(ProblemKind::Tag, format!("tag does not decode: {e}")));
                    return;
                }
                Ok(None) => {
                    report.problem(here(ProblemKind::Tag, "no tag (erased OOB)".into()));
                    return;
                }
                Ok(Some(t)) if !t.kind.is_data() => {
                    report.problem(here(
                        ProblemKind::Tag,
                        format!("tag of kind {:?} on a mapped block", t.kind),
                    ));
                    return;
                }
                // A shared block's tag names its origin, any block.
                Ok(Some(t)) if matches!(owner, Owner::Direct(lba) if t.lba != lba) => {
                    report.problem(here(
                        ProblemKind::Misdirected,
                        format!("tag names block {}", t.lba),
                    ));
                    return;
                }
                Ok(Some(t)) => t.data_crc,
            }
        }
        TagMode::InBand => match owner {
            Owner::Direct(lba) => match r.mapping.resolve(lba) {
                Some(res) if res.ppa == ppa && !res.shared => res.crc,
                _ => return, // the caller walks the map: cannot happen
            },
            Owner::Shared(id) => match r.mapping.shared_entry(id) {
                Some((_, _, crc)) => crc,
                None => return,
            },
        },
    };
    if expected != actual {
        report.problem(here(
            ProblemKind::DataCrc,
            format!("data CRC32C {actual:#010x}, expected {expected:#010x}"),
        ));
    }
}

/// Every live block of a nameless zone: a nameless data tag (or a
/// migration's copy) of the block's birth generation (its zone's base, or
/// a gap fill's from the map) whose CRC matches the data.
fn check_nameless<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    r: &Recovered,
    report: &mut CheckReport,
) {
    let cap = g.zone_capacity_blocks;
    let ob = g.oob_size_bytes as usize;
    let live: Vec<Ppa> = r
        .mapping
        .live()
        .filter(|p| r.zones.get(p.zone(cap)).kind().is_nameless())
        .collect();
    let mut md = r.nameless_md.as_ref().map(|m| {
        let mut m = m.clone();
        m.cover_groups();
        m
    });
    // A pending in-place job's victim holds its live blocks in the
    // scratch zone until the mount redoes it: each is checked there.
    let staged = r.inplace_pending.map(|job| {
        let homes = match md.as_ref() {
            Some(m) => staged_homes_in_band(backend, g, &m.layout, &job),
            None => staged_homes(backend, g, &job),
        };
        (job.victim, homes)
    });
    for ppa in live {
        let (zone, off) = (ppa.zone(cap), ppa.offset_blocks(cap));
        let here = |detail: String| Problem::new(ProblemKind::Nameless, detail).at(zone, off);
        let at = match &staged {
            Some((victim, homes)) if *victim == zone => match homes.get(&off) {
                Some(&(scratch, o, _)) => (scratch, o),
                None => {
                    report.problem(here("a pending in-place job staged no copy of it".into()));
                    continue;
                }
            },
            _ => (zone, off),
        };
        let (data, oob) = match read_retrying(backend, at.0, at.1, 1) {
            Ok(read) => read,
            Err(DeviceError::DeviceGone) => {
                report.problem(device_problem("reading data", &DeviceError::DeviceGone));
                return;
            }
            Err(e) => {
                report.problem(here(format!("live nameless block cannot be read: {e}")));
                continue;
            }
        };
        // Its own birth generation: a gap fill's is in the map (step 7).
        let generation = r.nameless_births.birth(ppa, zone);
        if let Some(m) = md.as_mut() {
            // In band: the block's entry, recovered or in its md block (a
            // staged copy's in its staging index).
            let staged_entry = staged
                .as_ref()
                .filter(|(victim, _)| *victim == zone)
                .and_then(|(_, homes)| homes.get(&off))
                .map(|(_, _, e)| e.clone());
            let entry = match m.entry(zone, off) {
                _ if staged_entry.is_some() => staged_entry.flatten(),
                Some(e) => Some(e.clone()),
                None => {
                    let (end, at) = m.tails[zone as usize];
                    m.layout
                        .md_location(end, at, off)
                        .and_then(|(b, _)| read_retrying(backend, zone, b, 1).ok())
                        .and_then(|(block, _)| {
                            m.layout
                                .entry_in_block(zone, off, &block, NAMELESS_MD_BYTES)
                        })
                }
            };
            let actual = r.data_crc.checksum(&data);
            match entry.filter(|e| e.is_present()) {
                None => report.problem(here("no md entry names the live block".into())),
                Some(e) if e.birth_gen != generation => report.problem(here(format!(
                    "md entry of generation {} on a live block of a zone of generation {generation}",
                    e.birth_gen
                ))),
                Some(e) if e.data_crc != actual => report.problem(here(format!(
                    "data CRC32C {actual:#010x}, expected {:#010x}",
                    e.data_crc
                ))),
                Some(_) => {}
            }
            continue;
        }
        let kinds: &[NamelessTagKind] = if at.0 == zone {
            &[NamelessTagKind::Data, NamelessTagKind::Moved]
        } else {
            &[NamelessTagKind::Staged]
        };
        match NamelessTag::decode(oob.get(..ob).unwrap_or(&[])) {
            Ok(Some((t, _))) if kinds.contains(&t.kind) && t.birth_gen == generation =>
            {
                let actual = r.data_crc.checksum(&data);
                if actual != t.data_crc {
                    report.problem(here(format!(
                        "data CRC32C {actual:#010x}, expected {:#010x}",
                        t.data_crc
                    )));
                }
            }
            Ok(Some((t, _))) => report.problem(here(format!(
                "tag of kind {:?} and generation {} on a live block of a zone of generation {generation}",
                t.kind, t.birth_gen
            ))),
            Ok(None) => report.problem(here("no nameless tag (erased OOB)".into())),
            Err(e) => report.problem(here(format!("nameless tag does not decode: {e}"))),
        }
    }
}

/// Where a pending in-place job staged each block: home offset in the
/// victim -> (scratch zone, offset), from the staged copies' tags (a copy
/// that cannot be read or decoded is left out: its block is reported).
fn staged_homes<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    job: &crate::recovery::PendingInPlace,
) -> StagedHomes {
    let cap = g.zone_capacity_blocks;
    let ob = g.oob_size_bytes as usize;
    (0..job.staged_blocks)
        .filter_map(|o| {
            let (_, oob) = read_retrying(backend, job.scratch, o, 1).ok()?;
            let (tag, _) = NamelessTag::decode(oob.get(..ob)?).ok()??;
            let home = tag.link.ppa();
            (tag.kind == NamelessTagKind::Staged && home.zone(cap) == job.victim)
                .then(|| (home.offset_blocks(cap), (job.scratch, o, None)))
        })
        .collect()
}

/// Home offset in the victim -> (scratch zone, offset, entry in band).
type StagedHomes = std::collections::HashMap<u64, (ZoneId, u64, Option<MdEntry>)>;

/// In band, where a pending job staged each block and its entry, from the
/// scratch zone's staging index (format.md §11, crash step 9): a group
/// whose index cannot be read or decoded is left out (its blocks are
/// reported).
fn staged_homes_in_band<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    l: &crate::nameless::MdLayout,
    job: &crate::recovery::PendingInPlace,
) -> StagedHomes {
    let bs = g.block_size_bytes as usize;
    let mut homes = StagedHomes::new();
    for k in 0..job.staged_blocks.div_ceil(l.group_blocks) {
        let d = (job.staged_blocks - k * l.group_blocks).min(l.group_blocks);
        let start = l.group_start(k);
        let index: Option<Vec<u8>> = (0..l.md_blocks_for(d))
            .map(|i| {
                read_retrying(backend, job.scratch, start + d + i, 1)
                    .ok()
                    .map(|r| r.0)
            })
            .collect::<Option<Vec<_>>>()
            .map(|blocks| blocks.concat());
        let entries = index.and_then(|index| {
            crate::ftl::staging_index_entries(&index, bs, l, NAMELESS_MD_BYTES, job.victim, k, d)
        });
        for (i, e) in entries.into_iter().flatten().enumerate() {
            let home = u64::from(e.home_offset);
            homes.insert(home, (job.scratch, start + i as u64, Some(e)));
        }
    }
    homes
}

/// Each shared entry's reference count against the L2P entries and kept
/// versions naming it, and (in band) each owner's CRC against the entry's.
fn check_shared(r: &Recovered, report: &mut CheckReport) {
    let in_band = r.superblock.tag_mode == TagMode::InBand;
    let mut refs: std::collections::HashMap<u32, u32> = Default::default();
    for (lba, t) in r.mapping.iter() {
        let Target::Shared(id) = t else { continue };
        *refs.entry(id).or_default() += 1;
        let Some((_, _, crc)) = r.mapping.shared_entry(id) else {
            report.problem(
                Problem::new(
                    ProblemKind::Shared,
                    format!("names shared entry {id}, which is free"),
                )
                .lba(lba),
            );
            continue;
        };
        let owner_crc = r.mapping.resolve(lba).map_or(0, |res| res.crc);
        if in_band && owner_crc != crc {
            report.problem(
                Problem::new(
                    ProblemKind::Shared,
                    format!("holds CRC {owner_crc:#010x} for shared entry {id}, which holds {crc:#010x}"),
                )
                .lba(lba),
            );
        }
    }
    // A version a snapshot keeps holds a reference too.
    for (lba, kill_seq, v) in r.mapping.history().entries() {
        let Some(id) = v.value else { continue };
        *refs.entry(id).or_default() += 1;
        if r.mapping.shared_entry(id).is_none() {
            report.problem(
                Problem::new(
                    ProblemKind::Shared,
                    format!("its version replaced at seq {kill_seq} names shared entry {id}, which is free"),
                )
                .lba(lba),
            );
        }
    }
    for (id, ppa, n, _) in r.mapping.shared_entries() {
        let held = refs.get(&id).copied().unwrap_or(0);
        if held != n {
            let cap = r.geometry.zone_capacity_blocks;
            report.problem(
                Problem::new(
                    ProblemKind::Shared,
                    format!("shared entry {id} counts {n} references, the map holds {held}"),
                )
                .at(ppa.zone(cap), ppa.offset_blocks(cap)),
            );
        }
    }
    report.summary.shared_blocks_checked = r.mapping.shared_blocks();
}

// ----- zones ---------------------------------------------------------------

/// Valid counts against the map, mapped blocks below the device's write
/// pointers in data zones, and every reverse-map entry backed by the map.
fn check_zones(g: &Geometry, r: &Recovered, zones: &[ZoneInfo], report: &mut CheckReport) {
    let cap = g.zone_capacity_blocks;
    let mut live = vec![0u64; g.zone_count as usize];
    let direct = r.mapping.iter().filter_map(|(l, t)| match t {
        Target::Direct(p) => Some((p, Some(l))),
        Target::Shared(_) => None,
    });
    let shared = r.mapping.shared_entries().map(|(_, p, ..)| (p, None));
    // Nameless blocks: no entry names them, their bit is their record.
    let nameless = r
        .mapping
        .live()
        .filter(|p| r.zones.get(p.zone(cap)).kind().is_nameless())
        .map(|p| (p, None));
    let mut counted = 0u64;
    for (ppa, lba) in direct.chain(shared).chain(nameless) {
        let z = ppa.zone(cap);
        let off = ppa.offset_blocks(cap);
        live[z as usize] += 1;
        counted += 1;
        let dev = &zones[z as usize];
        let kind = r.zones.get(z).kind();
        let at = |detail: String| {
            let mut p = Problem::new(ProblemKind::ZoneAccounting, detail).at(z, off);
            p.lba = lba;
            p
        };
        // A block GC could not read stays mapped where it is, in a zone
        // that is then retired (docs/format.md §8).
        if !matches!(kind, ZoneKind::Data { .. } | ZoneKind::Retired) {
            report.problem(at(format!("mapped block in a {kind:?} zone")));
        }
        // A pending in-place job's victim may be reset or half rewritten.
        let staged = r.inplace_pending.is_some_and(|j| j.victim == z);
        if !staged && (off >= dev.write_pointer_blocks || dev.state == ZoneState::Offline) {
            report.problem(at(format!(
                "mapped block at or above the device write pointer {} (zone {:?})",
                dev.write_pointer_blocks, dev.state
            )));
        }
    }
    for (z, _) in r.zones.iter() {
        let said = r.mapping.valid_blocks(z);
        if said != live[z as usize] {
            report.problem(
                Problem::new(
                    ProblemKind::ZoneAccounting,
                    format!(
                        "the zone counts {said} live blocks, the map holds {}",
                        live[z as usize]
                    ),
                )
                .at(z, 0),
            );
        }
    }
    // Every live bit must be where the map points: by count (each mapped
    // block's bit was checked above, so equal counts leave no stray bit).
    let bits = r.mapping.live().count() as u64;
    if bits != counted {
        report.problem(Problem::new(
            ProblemKind::MapMismatch,
            format!("{bits} blocks live in the validity bitmap, {counted} mapped"),
        ));
    }
    report.summary.zones_checked = g.zone_count;
}
