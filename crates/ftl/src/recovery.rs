//! Format and mount, as lists of named steps (DESIGN.md §7.6).
//!
//! Both run synchronously over a [`Backend`] through [`BackendExt`]: they
//! happen once, before the driver loop exists, and touch the device in a
//! fixed order that docs/format.md analyses step by step. Neither writes
//! anything until its in-memory result is complete; both end by writing a
//! checkpoint through the normal FTL path, so a cut during that leaves the
//! previous superblock and checkpoint in charge.

use crate::addr::{physical_blocks, Lba, Ppa, Seq};
use crate::backend::{
    again_after_abort, Backend, BackendExt, DeviceError, Geometry, ZoneId, ZoneState,
};
use crate::checkpoint::{self, CheckpointImage, ZoneKind as RecordKind, ZoneRecord as CkptZone};
use crate::codec::FormatError;
use crate::config::{FormatOptions, FtlConfig, TagPlacement};
use crate::driver::Driver;
use crate::error::MountError;
use crate::ftl::{Ftl, Parts};
use crate::l2p::{EntryFormat, L2p};
use crate::layout::{Layout, SUPER_ZONES};
use crate::log::MetaLog;
use crate::note::{LogBlock, Note};
use crate::p2l::P2l;
use crate::superblock::{uuid_from_seed, Superblock, TagMode};
use crate::tag::{Tag, TagKind, TAG_BYTES};
use crate::zone::{Stream, ZoneKind, ZoneRecord, ZoneTable, ZoneUse};
use std::collections::{BTreeMap, HashMap};

fn dev(step: &'static str) -> impl Fn(DeviceError) -> MountError {
    move |source| MountError::Device { step, source }
}

fn fmt_err(step: &'static str) -> impl Fn(FormatError) -> MountError {
    move |source| MountError::Format { step, source }
}

fn checkpoint_failed(step: &'static str) -> impl Fn(crate::error::IoError) -> MountError {
    move |e| match e {
        crate::error::IoError::DeviceGone => MountError::Device {
            step,
            source: DeviceError::DeviceGone,
        },
        other => MountError::Device {
            step,
            source: DeviceError::HostIo {
                op: step,
                kind: std::io::ErrorKind::Other,
                message: other.to_string(),
            },
        },
    }
}

/// Blocks the largest log/metadata write may carry.
fn max_write_blocks(g: &Geometry) -> usize {
    g.max_transfer_blocks.min(64) as usize
}

// ----- format ---------------------------------------------------------------

impl<B: Backend> Driver<B> {
    /// Formats `backend` and mounts the empty volume.
    ///
    /// Steps: plan the layout → reset every zone (offline ones retired) →
    /// build the empty state → write checkpoint and superblocks.
    pub fn format(
        mut backend: B,
        options: &FormatOptions,
        config: FtlConfig,
    ) -> Result<Driver<B>, MountError> {
        let geometry = backend.geometry().clone();
        let tag_mode = match options.tag_placement {
            TagPlacement::Auto if geometry.oob_size_bytes as usize >= TAG_BYTES => TagMode::Oob,
            _ => TagMode::InBand,
        };
        let layout = Layout::plan(
            &geometry,
            options.logical_blocks,
            options.gc_reserve_zones,
            tag_mode == TagMode::InBand,
        )?;
        let zones = reset_all_zones(&mut backend, &geometry, &layout)?;
        let physical = physical_blocks(&geometry).expect("checked by plan");
        let ring: Vec<ZoneId> = layout.meta_zones().collect();
        let log = MetaLog::new(
            ring.clone(),
            0,
            0,
            geometry.zone_capacity_blocks,
            geometry.block_size_bytes as usize,
            max_write_blocks(&geometry),
            1,
            vec![None; ring.len()],
            0,
        );
        let parts = Parts {
            l2p: L2p::with_format(
                layout.logical_blocks,
                EntryFormat::for_device(physical, tag_mode == TagMode::InBand),
            ),
            p2l: P2l::new(physical),
            uuid: uuid_from_seed(options.seed),
            zones,
            next_seq: 1,
            epoch: 0,
            log,
            super_generation: 0,
            super_wp_blocks: [0, 0],
            super_dead: [false, false],
            gc_reserve_zones: options.gc_reserve_zones,
            geometry,
            config,
            layout,
            tag_mode,
        };
        let mut driver = Driver::new(backend, Ftl::from_parts(parts));
        driver
            .checkpoint()
            .map_err(checkpoint_failed("format: first checkpoint"))?;
        Ok(driver)
    }
}

/// Resets every zone; superblock and metadata zones must work, failing data
/// zones are retired.
fn reset_all_zones<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    layout: &Layout,
) -> Result<ZoneTable, MountError> {
    let mut zones = ZoneTable::new(g.zone_count, g.zone_capacity_blocks);
    for z in 0..g.zone_count {
        let info =
            again_after_abort(|| backend.zone_info(z)).map_err(dev("format: zone report"))?;
        let why_unusable = match info.state {
            ZoneState::Offline | ZoneState::ReadOnly => Some(format!("is {:?}", info.state)),
            ZoneState::Empty => None,
            _ => again_after_abort(|| backend.reset_zone(z))
                .err()
                .map(|e| format!("could not be reset ({e})")),
        };
        let usable = why_unusable.is_none();
        let fixed = SUPER_ZONES.contains(&z) || layout.is_meta(z);
        if let Some(why) = why_unusable.filter(|_| fixed) {
            return Err(MountError::Unsupported(format!(
                "zone {z} {why}; zftl keeps its superblock and metadata log in zones 0..{}",
                layout.first_data_zone()
            )));
        }
        if !usable {
            zones.retire(z);
        } else if SUPER_ZONES.contains(&z) {
            zones.claim(z, ZoneKind::Superblock);
        } else if layout.is_meta(z) {
            zones.claim(z, ZoneKind::Meta);
        }
    }
    Ok(zones)
}

// ----- mount ----------------------------------------------------------------

impl<B: Backend> Driver<B> {
    /// Mounts a formatted device after a clean shutdown or a power cut.
    ///
    /// Steps: [`recover_state`] (read-only) → finish half-written zones →
    /// write a checkpoint.
    pub fn mount(mut backend: B, config: FtlConfig) -> Result<Driver<B>, MountError> {
        let r = recover_state(&mut backend)?;
        for &z in &r.finish {
            again_after_abort(|| backend.finish_zone(z))
                .map_err(dev("mount: finishing a half-written zone"))?;
        }
        let Recovered {
            geometry,
            superblock: sb,
            layout,
            epoch,
            l2p,
            p2l,
            zones,
            next_seq,
            log,
            reports,
            ..
        } = r;
        let log = log.writer(&mut backend, &geometry, sb.checkpoint_log_seq)?;
        let in_band = sb.tag_mode == TagMode::InBand;
        let config_reserve = reserve_from_layout(&geometry, &layout, in_band);
        let parts = Parts {
            p2l,
            l2p,
            zones,
            next_seq,
            epoch,
            log,
            super_generation: sb.generation,
            super_wp_blocks: [
                reports[0].write_pointer_blocks,
                reports[1].write_pointer_blocks,
            ],
            super_dead: [0, 1]
                .map(|i| matches!(reports[i].state, ZoneState::ReadOnly | ZoneState::Offline)),
            gc_reserve_zones: config_reserve,
            uuid: sb.uuid,
            tag_mode: sb.tag_mode,
            geometry,
            config,
            layout,
        };
        let mut driver = Driver::new(backend, Ftl::from_parts(parts));
        driver
            .checkpoint()
            .map_err(checkpoint_failed("mount: recovery checkpoint"))?;
        Ok(driver)
    }
}

/// Everything recovery learns from a device without writing to it: the
/// state a mount continues from, and what `zftl check` verifies.
pub struct Recovered {
    pub geometry: Geometry,
    pub superblock: Superblock,
    pub layout: Layout,
    pub epoch: crate::addr::Epoch,
    pub l2p: L2p,
    pub p2l: P2l,
    pub zones: ZoneTable,
    pub next_seq: Seq,
    /// Half-written data zones mount will finish.
    pub finish: Vec<ZoneId>,
    /// Notes rolled forward after the checkpoint.
    pub notes_replayed: usize,
    /// Tags (OOB mode) replayed from data zones written since the checkpoint.
    pub tags_replayed: usize,
    log: LogReader,
    reports: Vec<crate::backend::ZoneInfo>,
}

impl Recovered {
    /// Log blocks roll-forward read from the checkpoint's chunk 0 on (the
    /// checkpoint's chunks included), and where it found no next one.
    pub fn log_walked(&self) -> (u64, Option<(ZoneId, u64)>) {
        let read = self.log.next_log_seq - self.superblock.checkpoint_log_seq;
        (read, self.log.here())
    }
}

/// Mount steps 1–6, read-only: newest superblock → checkpoint → roll the
/// log forward → (OOB) scan data zones written since → replay in seq order
/// → rebuild zones and reverse map.
pub fn recover_state<B: Backend>(backend: &mut B) -> Result<Recovered, MountError> {
    let geometry = backend.geometry().clone();
    let sb = read_superblock(backend, &geometry)?;
    let layout = Layout {
        meta_first_zone: sb.meta_first_zone,
        meta_zone_count: sb.meta_zone_count,
        logical_blocks: sb.logical_blocks,
    };
    let mut log = LogReader::new(
        &geometry,
        &layout,
        sb.checkpoint_zone,
        sb.checkpoint_offset_blocks,
    );
    let image = log.read_checkpoint(backend, &geometry, sb.checkpoint_log_seq)?;
    let notes = log.roll_forward(backend)?;
    let reports = report_zones(backend, &geometry)?;
    let notes_replayed = notes.len();
    let mut events: Vec<Event> = notes.into_iter().map(Event::Note).collect();
    let resets = reset_seqs(&events);
    if sb.tag_mode == TagMode::Oob {
        events.extend(scan_tags(
            backend, &geometry, &layout, &image, &reports, &resets,
        )?);
    }
    let mut state = Rebuild::from_image(&geometry, &sb, &image, resets.keys().copied())?;
    let tags_replayed = events.len() - notes_replayed;
    events.sort_by_key(Event::seq);
    state.replay(&events, &geometry)?;
    let (zones, finish) = state.zone_table(&geometry, &layout, &image, &reports)?;
    Ok(Recovered {
        superblock: sb,
        layout,
        epoch: image.epoch,
        l2p: state.l2p,
        p2l: state.p2l,
        zones,
        next_seq: state.next_seq,
        finish,
        notes_replayed,
        tags_replayed,
        log,
        reports,
        geometry,
    })
}

/// The GC reserve is not stored; it is recomputed from the logical size:
/// the data zones left once the logical space and the open lanes have
/// theirs, at most the format default, at least 1. So the space a mounted
/// volume may map (data zones less reserve and lanes) still holds its
/// logical size whenever format could give it that.
fn reserve_from_layout(g: &Geometry, layout: &Layout, in_band: bool) -> u32 {
    let data_zones = u64::from(g.zone_count - layout.first_data_zone());
    let data_cap = crate::layout::data_blocks_per_zone(g, in_band);
    let used = layout.logical_blocks.div_ceil(data_cap) + u64::from(crate::layout::OPEN_DATA_LANES);
    let spare = data_zones.saturating_sub(used);
    (spare.min(u64::from(FormatOptions::default().gc_reserve_zones)) as u32).max(1)
}

fn report_zones<B: Backend>(
    backend: &mut B,
    g: &Geometry,
) -> Result<Vec<crate::backend::ZoneInfo>, MountError> {
    (0..g.zone_count)
        .map(|z| again_after_abort(|| backend.zone_info(z)).map_err(dev("mount: zone report")))
        .collect()
}

/// Step 1: the valid superblock record with the highest generation.
fn read_superblock<B: Backend>(backend: &mut B, g: &Geometry) -> Result<Superblock, MountError> {
    let mut best: Option<Superblock> = None;
    let mut first_error: Option<FormatError> = None;
    for z in SUPER_ZONES {
        let info = again_after_abort(|| backend.zone_info(z))
            .map_err(dev("mount: superblock zone report"))?;
        for off in 0..info.write_pointer_blocks {
            // A torn record: the other copy or an older record serves.
            let Some((block, _)) = read_one(backend, z, off, "mount: reading superblocks")? else {
                continue;
            };
            match Superblock::decode(&block) {
                Ok(sb) if best.as_ref().is_none_or(|b| sb.generation > b.generation) => {
                    best = Some(sb)
                }
                Ok(_) => {}
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    let sb = best.ok_or_else(|| {
        MountError::NotFormatted(match first_error {
            Some(e) => format!("zones 0 and 1 hold no valid superblock ({e})"),
            None => "zones 0 and 1 are empty".into(),
        })
    })?;
    sb.validate_against(g)
        .map_err(fmt_err("mount: superblock vs device geometry"))?;
    Ok(sb)
}

/// Walks the metadata log ring block by block, as mount rolls it forward
/// (`zftl check` walks it the same way).
pub(crate) struct LogReader {
    ring: Vec<ZoneId>,
    ring_index: usize,
    offset_blocks: u64,
    zone_capacity_blocks: u64,
    next_log_seq: u64,
    newest_in: Vec<Option<u64>>,
    /// Where the last block read lies: (ring index, offset).
    last: Option<(usize, u64)>,
}

impl LogReader {
    pub(crate) fn new(
        g: &Geometry,
        layout: &Layout,
        zone: ZoneId,
        offset_blocks: u64,
    ) -> LogReader {
        let ring: Vec<ZoneId> = layout.meta_zones().collect();
        let ring_index = ring.iter().position(|&z| z == zone).unwrap_or(usize::MAX);
        LogReader {
            newest_in: vec![None; ring.len()],
            ring,
            ring_index,
            offset_blocks,
            zone_capacity_blocks: g.zone_capacity_blocks,
            next_log_seq: 0,
            last: None,
        }
    }

    /// The block with log_seq `expected`, or `None` at the log's end (an
    /// erased, torn, damaged or older block). After a failed write the
    /// writer ends its ring zone and writes that write and all after it
    /// again, same log_seqs and bytes, at the start of the next zone it can
    /// use; the failed write may have landed, in part or whole. So a miss
    /// here looks for a ring zone that starts with `expected`, or with a
    /// byte-for-byte copy of a block just read from the last zone (then
    /// `expected` lies as far into that zone as it would have in the last).
    pub(crate) fn next_block<B: Backend>(
        &mut self,
        backend: &mut B,
        expected: u64,
    ) -> Result<Option<LogBlock>, MountError> {
        if self.offset_blocks == self.zone_capacity_blocks {
            self.ring_index = (self.ring_index + 1) % self.ring.len();
            self.offset_blocks = 0;
        }
        let here = self.read_at(backend, self.ring_index, self.offset_blocks)?;
        if let Some(block) = here.filter(|b| b.log_seq() == expected) {
            return Ok(Some(block));
        }
        for k in 0..self.ring.len() {
            let j = (self.ring_index + 1 + k) % self.ring.len();
            if self.last.is_some_and(|(i, _)| i == j) {
                continue;
            }
            let Some((first_bytes, first)) = self.read_raw_at(backend, j, 0)? else {
                continue;
            };
            let s0 = first.log_seq();
            let (offset, found) = if s0 == expected {
                (0, Some(first))
            } else if self.is_copy_of_read(backend, s0, expected, &first_bytes)? {
                let at = expected - s0;
                (at, self.read_at(backend, j, at)?)
            } else {
                continue;
            };
            if let Some(block) = found.filter(|b| b.log_seq() == expected) {
                self.ring_index = j;
                self.offset_blocks = offset;
                return Ok(Some(block));
            }
        }
        Ok(None)
    }

    /// Whether `bytes`, a block with log_seq `s0` that starts a ring zone,
    /// is a copy of the block with that log_seq in the zone read last, so
    /// that `expected` (the log_seq after the last block read) would lie
    /// `expected - s0` blocks into its zone.
    fn is_copy_of_read<B: Backend>(
        &self,
        backend: &mut B,
        s0: u64,
        expected: u64,
        bytes: &[u8],
    ) -> Result<bool, MountError> {
        let Some((i, last_offset)) = self.last else {
            return Ok(false);
        };
        if s0 >= expected || expected - s0 >= self.zone_capacity_blocks {
            return Ok(false);
        }
        let back = expected - 1 - s0; // from the last block read to the copy's original
        if back > last_offset {
            return Ok(false);
        }
        Ok(self
            .read_raw_at(backend, i, last_offset - back)?
            .is_some_and(|(b, block)| block.log_seq() == s0 && b == bytes))
    }

    fn read_at<B: Backend>(
        &self,
        backend: &mut B,
        ring_index: usize,
        offset_blocks: u64,
    ) -> Result<Option<LogBlock>, MountError> {
        Ok(self
            .read_raw_at(backend, ring_index, offset_blocks)?
            .map(|(_, block)| block))
    }

    /// A log block's bytes and decoded form; `None` if unreadable or invalid.
    fn read_raw_at<B: Backend>(
        &self,
        backend: &mut B,
        ring_index: usize,
        offset_blocks: u64,
    ) -> Result<Option<(Vec<u8>, LogBlock)>, MountError> {
        let zone = self.ring[ring_index];
        let step = "mount: reading the metadata log";
        Ok(
            read_one(backend, zone, offset_blocks, step)?.and_then(|(data, _)| {
                let block = LogBlock::decode(&data).ok()?;
                Some((data, block))
            }),
        )
    }

    /// Where the next block is looked for first: the block after the last
    /// one read (the zone and offset the log ends at, once `next_block`
    /// found nothing). `None` if the reader started outside the ring.
    pub(crate) fn here(&self) -> Option<(ZoneId, u64)> {
        let zone = *self.ring.get(self.ring_index)?;
        if self.offset_blocks == self.zone_capacity_blocks {
            let next = (self.ring_index + 1) % self.ring.len();
            return Some((self.ring[next], 0));
        }
        Some((zone, self.offset_blocks))
    }

    pub(crate) fn consume(&mut self, block: &LogBlock) {
        let s = block.log_seq();
        let slot = &mut self.newest_in[self.ring_index];
        *slot = Some(slot.map_or(s, |n| n.max(s)));
        self.last = Some((self.ring_index, self.offset_blocks));
        self.offset_blocks += 1;
        self.next_log_seq = s + 1;
    }

    /// Step 2: the checkpoint the superblock names, chunk by chunk.
    fn read_checkpoint<B: Backend>(
        &mut self,
        backend: &mut B,
        g: &Geometry,
        id: u64,
    ) -> Result<CheckpointImage, MountError> {
        if self.ring_index == usize::MAX {
            return Err(MountError::Damaged(
                "the superblock points at a zone outside the metadata log".into(),
            ));
        }
        let bs = g.block_size_bytes as usize;
        let damaged = |what: String| MountError::Damaged(format!("checkpoint {id}: {what}"));
        let mut chunks = Vec::new();
        let mut total = u64::MAX;
        while (chunks.len() as u64) < total {
            let expected = id + chunks.len() as u64;
            let block = self.next_block(backend, expected)?.ok_or_else(|| {
                damaged(format!(
                    "chunk with log_seq {expected} is unreadable or invalid"
                ))
            })?;
            match &block {
                LogBlock::CheckpointChunk {
                    log_seq,
                    checkpoint_id,
                    payload,
                    ..
                } if *log_seq == expected && *checkpoint_id == id => {
                    if chunks.is_empty() {
                        let stream = checkpoint::peek_stream_bytes(payload)
                            .map_err(fmt_err("mount: checkpoint header"))?;
                        total = checkpoint::chunks_for_stream(stream, bs);
                    }
                }
                other => {
                    return Err(damaged(format!(
                        "expected chunk with log_seq {expected}, found {other:?}"
                    )))
                }
            }
            self.consume(&block);
            chunks.push(block);
        }
        let stream =
            checkpoint::join_chunks(&chunks).map_err(fmt_err("mount: checkpoint chunks"))?;
        let physical = physical_blocks(g).expect("validated geometry");
        CheckpointImage::decode(&stream, physical).map_err(fmt_err("mount: checkpoint"))
    }

    /// Step 3: notes after the checkpoint, up to the first block that is
    /// erased, unreadable, damaged or out of sequence (the log's end).
    fn roll_forward<B: Backend>(&mut self, backend: &mut B) -> Result<Vec<Note>, MountError> {
        let mut notes = Vec::new();
        while let Some(block) = self.next_block(backend, self.next_log_seq)? {
            if let LogBlock::Notes { notes: n, .. } = &block {
                notes.extend(n.iter().cloned());
            }
            self.consume(&block);
        }
        Ok(notes)
    }

    /// Step 7: the writer continues after the last valid block, past any
    /// torn block (at the zone's write pointer) or in the next ring zone.
    fn writer<B: Backend>(
        self,
        backend: &mut B,
        g: &Geometry,
        committed: u64,
    ) -> Result<MetaLog, MountError> {
        let zone = self.ring[self.ring_index];
        let info =
            again_after_abort(|| backend.zone_info(zone)).map_err(dev("mount: log zone report"))?;
        let writable = !matches!(info.state, ZoneState::ReadOnly | ZoneState::Offline);
        let mut cur = self.ring_index;
        let mut wp = if writable {
            info.write_pointer_blocks.max(self.offset_blocks)
        } else {
            g.zone_capacity_blocks
        };
        if self.offset_blocks == 0 && self.newest_in[cur].is_none() && wp > 0 {
            // The log ended at the very end of a ring zone and the reader
            // stepped into the next one, which holds only blocks of an
            // older pass (the cut came before the writer reset it).
            // Appending after them would put new blocks where no reader
            // looks; continue as the writer would have, from the full zone
            // before it, so the next log write resets this zone first.
            cur = (cur + self.ring.len() - 1) % self.ring.len();
            wp = g.zone_capacity_blocks;
        }
        let ring = self.ring.clone();
        let mut log = MetaLog::new(
            self.ring,
            cur,
            wp,
            g.zone_capacity_blocks,
            g.block_size_bytes as usize,
            max_write_blocks(g),
            self.next_log_seq,
            self.newest_in,
            committed,
        );
        for (i, &z) in ring.iter().enumerate() {
            let state = again_after_abort(|| backend.zone_info(z))
                .map_err(dev("mount: log zone report"))?
                .state;
            if matches!(state, ZoneState::ReadOnly | ZoneState::Offline) {
                log.mark_dead(i);
            }
        }
        Ok(log)
    }
}

/// A change to replay, from a note or (OOB mode) a data block's tag.
enum Event {
    Note(Note),
    Tag {
        seq: Seq,
        lba: Lba,
        ppa: Ppa,
        crc: u32,
    },
}

impl Event {
    fn seq(&self) -> Seq {
        match self {
            Event::Note(n) => n.seq(),
            Event::Tag { seq, .. } => *seq,
        }
    }
}

/// Seq of the newest ZoneReset note per zone: older tags there are stale.
fn reset_seqs(events: &[Event]) -> HashMap<ZoneId, Seq> {
    let mut out = HashMap::new();
    for e in events {
        if let Event::Note(Note::ZoneReset { seq, zone, .. }) = e {
            out.insert(*zone, *seq);
        }
    }
    out
}

/// Step 4 (OOB mode): tags of host blocks written since the checkpoint, in
/// zones that were open or empty then, or reset after it.
fn scan_tags<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    layout: &Layout,
    image: &CheckpointImage,
    reports: &[crate::backend::ZoneInfo],
    resets: &HashMap<ZoneId, Seq>,
) -> Result<Vec<Event>, MountError> {
    let mut events = Vec::new();
    for z in layout.first_data_zone()..g.zone_count {
        let rec = &image.zones[z as usize];
        let report = &reports[z as usize];
        let was_full = rec.state == zone_use_code(ZoneUse::Full) && rec.kind != RecordKind::Free;
        if report.write_pointer_blocks == 0
            || report.state == ZoneState::Offline
            || (was_full && !resets.contains_key(&z))
        {
            continue;
        }
        let min_seq = resets
            .get(&z)
            .map_or(image.next_seq, |&r| r.max(image.next_seq));
        scan_zone(
            backend,
            g,
            z,
            report.write_pointer_blocks,
            min_seq,
            &mut events,
        )?;
    }
    Ok(events)
}

fn scan_zone<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    zone: ZoneId,
    wp: u64,
    min_seq: Seq,
    out: &mut Vec<Event>,
) -> Result<(), MountError> {
    let chunk = u64::from(g.max_transfer_blocks);
    let mut off = 0;
    while off < wp {
        let n = chunk.min(wp - off);
        match backend.read_blocks(zone, off, n as u32) {
            Ok((data, oob)) => collect_tags(g, zone, off, &data, &oob, min_seq, out),
            // A torn block fails the whole read, an aborted one may have
            // failed for the host: retry block by block.
            Err(DeviceError::UncorrectableRead { .. } | DeviceError::HostIo { .. }) => {
                for o in off..off + n {
                    if let Some((data, oob)) = read_one(backend, zone, o, "mount: scanning tags")? {
                        collect_tags(g, zone, o, &data, &oob, min_seq, out);
                    }
                }
            }
            Err(e) => {
                return Err(MountError::Device {
                    step: "mount: scanning tags",
                    source: e,
                })
            }
        }
        off += n;
    }
    Ok(())
}

/// A block's data and OOB bytes.
type DataAndOob = (Vec<u8>, Vec<u8>);

/// Attempts at reading a metadata block before it counts as unreadable.
/// NAND read errors are often transient (read retry); treating one as the
/// end of the log would silently drop every note after it.
const METADATA_READ_ATTEMPTS: u32 = 8;

/// Reads one block; `None` when the media cannot return it after retries
/// (a torn or failed page), an error for anything else. A host-side
/// failure (a read a controller reset aborted) is retried too, and is the
/// error if the last attempt fails so.
fn read_one<B: Backend>(
    backend: &mut B,
    zone: ZoneId,
    offset_blocks: u64,
    step: &'static str,
) -> Result<Option<DataAndOob>, MountError> {
    let mut host_failure = None;
    for _ in 0..METADATA_READ_ATTEMPTS {
        match backend.read_blocks(zone, offset_blocks, 1) {
            Ok(r) => return Ok(Some(r)),
            Err(DeviceError::UncorrectableRead { .. }) => host_failure = None,
            Err(e @ DeviceError::HostIo { .. }) => host_failure = Some(e),
            Err(DeviceError::ZoneOffline { .. }) => return Ok(None),
            Err(e) => return Err(MountError::Device { step, source: e }),
        }
    }
    match host_failure {
        Some(source) => Err(MountError::Device { step, source }),
        None => Ok(None),
    }
}

fn collect_tags(
    g: &Geometry,
    zone: ZoneId,
    first: u64,
    data: &[u8],
    oob: &[u8],
    min_seq: Seq,
    out: &mut Vec<Event>,
) {
    let bs = g.block_size_bytes as usize;
    let ob = g.oob_size_bytes as usize;
    for i in 0..data.len() / bs {
        let Ok(Some(tag)) = Tag::decode(&oob[i * ob..i * ob + TAG_BYTES]) else {
            continue;
        };
        let block = &data[i * bs..(i + 1) * bs];
        if tag.kind != TagKind::HostData
            || tag.seq < min_seq
            || crate::tag::data_crc(block) != tag.data_crc
        {
            continue;
        }
        let ppa = Ppa::new(zone, first + i as u64, g.zone_capacity_blocks);
        out.push(Event::Tag {
            seq: tag.seq,
            lba: tag.lba,
            ppa,
            crc: tag.data_crc,
        });
    }
}

/// The map and reverse map being rebuilt.
struct Rebuild {
    l2p: L2p,
    p2l: P2l,
    next_seq: Seq,
    erase_counts: HashMap<ZoneId, u32>,
    retired: Vec<ZoneId>,
    zone_capacity_blocks: u64,
    in_band: bool,
    /// The seq of the version each block mapped by a replayed tag or
    /// Relocated note holds (OOB tags, where Relocated notes compare with
    /// it; in band, HostWrite notes need none).
    versions: HashMap<Lba, Seq>,
    /// Zones a replayed ZoneReset note resets (by zone id), and the blocks
    /// mapped into them, by address: what such a note must unmap.
    reset_zones: Vec<bool>,
    in_reset_zones: BTreeMap<Ppa, Lba>,
}

impl Rebuild {
    fn from_image(
        g: &Geometry,
        sb: &Superblock,
        image: &CheckpointImage,
        reset_zones: impl Iterator<Item = ZoneId>,
    ) -> Result<Rebuild, MountError> {
        if image.logical_blocks != sb.logical_blocks || image.zones.len() != g.zone_count as usize {
            return Err(MountError::Damaged(
                "checkpoint does not match the superblock".into(),
            ));
        }
        let physical = physical_blocks(g).expect("validated geometry");
        let in_band = sb.tag_mode == TagMode::InBand;
        let format = EntryFormat::for_device(physical, in_band);
        let crcs = image.crcs.as_deref().unwrap_or(&[]);
        let l2p = L2p::from_leaves(image.logical_blocks, format, &image.leaves, crcs)
            .map_err(|e| MountError::Damaged(format!("checkpoint map: {e}")))?;
        Ok(Rebuild::with_map(
            g,
            l2p,
            image.next_seq,
            in_band,
            reset_zones,
        ))
    }

    /// Replay state starting from `l2p` (the checkpoint's map).
    fn with_map(
        g: &Geometry,
        l2p: L2p,
        next_seq: Seq,
        in_band: bool,
        reset_zones: impl Iterator<Item = ZoneId>,
    ) -> Rebuild {
        let physical = physical_blocks(g).expect("validated geometry");
        let cap = g.zone_capacity_blocks;
        let mut is_reset = vec![false; g.zone_count as usize];
        for z in reset_zones {
            // A note naming a zone past the device is refused by the replay.
            if let Some(r) = is_reset.get_mut(z as usize) {
                *r = true;
            }
        }
        let mut in_reset_zones = BTreeMap::new();
        let mut p2l = P2l::new(physical);
        for (lba, ppa) in l2p.iter() {
            p2l.set(ppa);
            if is_reset[ppa.zone(cap) as usize] {
                in_reset_zones.insert(ppa, lba);
            }
        }
        Rebuild {
            l2p,
            p2l,
            next_seq,
            erase_counts: HashMap::new(),
            retired: Vec::new(),
            zone_capacity_blocks: cap,
            in_band,
            versions: HashMap::new(),
            reset_zones: is_reset,
            in_reset_zones,
        }
    }

    fn check_lba(&self, lba: Lba) -> Result<(), MountError> {
        if lba >= self.l2p.logical_blocks() {
            return Err(MountError::Damaged(format!(
                "a note or tag names block {lba}, past the logical end"
            )));
        }
        Ok(())
    }

    fn set(&mut self, lba: Lba, ppa: Ppa, crc: u32) {
        if let Some(old) = self.l2p.set(lba, ppa, crc) {
            self.cleared(old);
        }
        self.p2l.set(ppa);
        if self.reset_zones[ppa.zone(self.zone_capacity_blocks) as usize] {
            self.in_reset_zones.insert(ppa, lba);
        }
    }

    fn unmap(&mut self, lba: Lba) {
        if let Some(old) = self.l2p.unmap(lba) {
            self.cleared(old);
        }
    }

    fn cleared(&mut self, ppa: Ppa) {
        self.p2l.clear(ppa);
        self.in_reset_zones.remove(&ppa);
    }

    /// A version of `lba` with seq `version` is mapped at `ppa`.
    fn set_version(&mut self, lba: Lba, ppa: Ppa, crc: u32, version: Seq) {
        self.set(lba, ppa, crc);
        self.versions.insert(lba, version);
    }

    /// GC moved nothing live off a zone before its ZoneReset note, so any
    /// block still mapped into it here is stale: its newer place is a tag
    /// the reset of its own zone erased, which a later Relocated note
    /// restores. Left mapped, it would share the address with the zone's
    /// next data.
    fn zone_reset(&mut self, zone: ZoneId) {
        let cap = self.zone_capacity_blocks;
        let first = Ppa::new(zone, 0, cap);
        let last = Ppa::new(zone, cap - 1, cap);
        let stale: Vec<Lba> = self
            .in_reset_zones
            .range(first..=last)
            .map(|(_, &l)| l)
            .collect();
        for lba in stale {
            self.unmap(lba);
        }
    }

    /// Step 5: apply notes and tags in seq order.
    fn replay(&mut self, events: &[Event], g: &Geometry) -> Result<(), MountError> {
        let physical = u64::from(physical_blocks(g).expect("validated geometry"));
        let ppa_ok = |p: Ppa| u64::from(p.0) < physical;
        for e in events {
            self.next_seq = self.next_seq.max(e.seq() + 1);
            match *e {
                Event::Tag { seq, lba, ppa, crc } => {
                    self.check_lba(lba)?;
                    self.set_version(lba, ppa, crc, seq);
                }
                Event::Note(Note::HostWrite {
                    lba, ppa, data_crc, ..
                }) => {
                    self.check_lba(lba)?;
                    if !ppa_ok(ppa) {
                        return Err(MountError::Damaged(format!(
                            "HostWrite note names block {}",
                            ppa.0
                        )));
                    }
                    self.set(lba, ppa, data_crc);
                }
                Event::Note(Note::Trim {
                    lba, block_count, ..
                }) => {
                    let end = lba
                        .checked_add(block_count)
                        .filter(|&e| e <= self.l2p.logical_blocks());
                    let Some(end) = end else {
                        return Err(MountError::Damaged(format!(
                            "Trim note {lba}+{block_count} past the end"
                        )));
                    };
                    for l in lba..end {
                        self.unmap(l);
                    }
                }
                Event::Note(Note::Reloc { lba, from, to, .. }) => {
                    self.check_lba(lba)?;
                    if !ppa_ok(to) {
                        return Err(MountError::Damaged(format!(
                            "Reloc note names block {}",
                            to.0
                        )));
                    }
                    if let Some((at, crc)) = self.l2p.get_with_crc(lba) {
                        if at == from {
                            self.set(lba, to, crc);
                        }
                    }
                }
                Event::Note(Note::Relocated {
                    lba,
                    to,
                    version_seq,
                    ..
                }) => {
                    self.check_lba(lba)?;
                    if self.in_band {
                        return Err(MountError::Damaged(
                            "a Relocated note in a volume with in-band tags".into(),
                        ));
                    }
                    if !ppa_ok(to) {
                        return Err(MountError::Damaged(format!(
                            "Relocated note names block {}",
                            to.0
                        )));
                    }
                    // A write of `lba` in flight when GC moved this version
                    // has a larger seq and was replayed already: it wins.
                    let newer = self.versions.get(&lba).is_some_and(|&v| v > version_seq);
                    if !newer {
                        self.set_version(lba, to, 0, version_seq);
                    }
                }
                Event::Note(Note::ZoneReset {
                    zone, erase_count, ..
                }) => {
                    if zone >= g.zone_count {
                        return Err(MountError::Damaged(format!(
                            "ZoneReset note names zone {zone} of {}",
                            g.zone_count
                        )));
                    }
                    self.erase_counts.insert(zone, erase_count);
                    self.zone_reset(zone);
                }
                Event::Note(Note::ZoneRetire { zone, .. }) => self.retired.push(zone),
            }
        }
        Ok(())
    }

    /// Step 6: zone table from checkpoint records, replayed notes and the
    /// device's report; every mapped block must lie below its zone's write
    /// pointer. Returns the table and the zones to finish.
    fn zone_table(
        &mut self,
        g: &Geometry,
        layout: &Layout,
        image: &CheckpointImage,
        reports: &[crate::backend::ZoneInfo],
    ) -> Result<(ZoneTable, Vec<ZoneId>), MountError> {
        let mut records = Vec::with_capacity(g.zone_count as usize);
        let mut finish = Vec::new();
        let mut retire = Vec::new();
        for z in 0..g.zone_count {
            let rec = &image.zones[z as usize];
            let rep = &reports[z as usize];
            let erase_count = self
                .erase_counts
                .get(&z)
                .copied()
                .unwrap_or(rec.erase_count);
            let gone = matches!(rep.state, ZoneState::Offline)
                || rec.kind == RecordKind::Retired
                || self.retired.contains(&z);
            let fixed = SUPER_ZONES.contains(&z) || layout.is_meta(z);
            let (kind, state, wp) = if fixed {
                let kind = if SUPER_ZONES.contains(&z) {
                    ZoneKind::Superblock
                } else {
                    ZoneKind::Meta
                };
                let wp = rep.write_pointer_blocks;
                let state = match wp {
                    0 => ZoneUse::Empty,
                    w if w == g.zone_capacity_blocks => ZoneUse::Full,
                    _ => ZoneUse::Open,
                };
                (kind, state, wp)
            } else if gone {
                // Retired zones may still hold blocks that could not be moved
                // off (reads of them report the device's error).
                retire.push(z);
                (
                    ZoneKind::Data {
                        stream: Stream::Host,
                    },
                    ZoneUse::Full,
                    g.zone_capacity_blocks,
                )
            } else if rep.write_pointer_blocks == 0 {
                (ZoneKind::Free, ZoneUse::Empty, 0)
            } else {
                if rep.state != ZoneState::Full && rep.state != ZoneState::ReadOnly {
                    finish.push(z);
                }
                let stream = if rec.kind == RecordKind::DataGc {
                    Stream::Gc
                } else {
                    Stream::Host
                };
                (
                    ZoneKind::Data { stream },
                    ZoneUse::Full,
                    rep.write_pointer_blocks,
                )
            };
            records.push(ZoneRecord {
                kind,
                state,
                write_pointer_blocks: wp,
                erase_count,
                last_write_seq: rec.last_write_seq,
            });
        }
        let mut table = ZoneTable::from_records(g.zone_capacity_blocks, &records)
            .map_err(|e| MountError::Damaged(format!("zone table: {e}")))?;
        let cap = g.zone_capacity_blocks;
        for (lba, ppa) in self.l2p.iter() {
            let z = ppa.zone(cap);
            let zone = table.get(z);
            if !matches!(zone.kind(), ZoneKind::Data { .. })
                || ppa.offset_blocks(cap) >= zone.write_pointer_blocks()
            {
                return Err(MountError::Damaged(format!(
                    "block {lba} maps to zone {z} offset {}, which holds no data (zone {:?}, write pointer {})",
                    ppa.offset_blocks(cap),
                    zone.kind(),
                    zone.write_pointer_blocks()
                )));
            }
            table.add_valid(z, 1);
        }
        for z in retire {
            table.retire(z);
        }
        Ok((table, finish))
    }
}

/// The zone module's ZoneUse as the checkpoint's state byte.
pub(crate) fn zone_use_code(u: ZoneUse) -> u8 {
    match u {
        ZoneUse::Empty => 0,
        ZoneUse::Open => 1,
        ZoneUse::Full => 2,
    }
}

/// A zone-table record as the checkpoint stores it.
pub(crate) fn zone_record_out(r: ZoneRecord, valid_blocks: u64) -> CkptZone {
    let kind = match r.kind {
        ZoneKind::Free => RecordKind::Free,
        ZoneKind::Superblock => RecordKind::Superblock,
        ZoneKind::Meta
        | ZoneKind::Data {
            stream: Stream::Meta,
        } => RecordKind::Meta,
        // The checkpoint does not tell hot from cold host zones: after a
        // mount every host zone is simply a full data zone.
        ZoneKind::Data {
            stream: Stream::Host | Stream::HostCold,
        } => RecordKind::DataHost,
        ZoneKind::Data { stream: Stream::Gc } => RecordKind::DataGc,
        ZoneKind::Retired => RecordKind::Retired,
    };
    CkptZone {
        kind,
        state: zone_use_code(r.state),
        erase_count: r.erase_count,
        write_pointer_blocks: r.write_pointer_blocks,
        last_write_seq: r.last_write_seq,
        valid_blocks,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 zones of 8 blocks, OOB tags; the checkpoint maps what `map` says.
    fn rebuild(map: &[(Lba, u32)], events: &[Event]) -> Rebuild {
        let g = Geometry {
            block_size_bytes: 4096,
            oob_size_bytes: 64,
            zone_count: 4,
            zone_size_blocks: 8,
            zone_capacity_blocks: 8,
            write_unit_blocks: 1,
            max_append_blocks: 8,
            max_transfer_blocks: 8,
            max_open_zones: 0,
            max_active_zones: 0,
            parallel_units: 1,
            queue_depth: 8,
        };
        let mut l2p = L2p::with_format(16, EntryFormat::for_device(32, false));
        for &(lba, ppa) in map {
            l2p.set(lba, Ppa(ppa), 0);
        }
        let notes: Vec<Event> = events
            .iter()
            .filter_map(|e| match e {
                Event::Note(n) => Some(Event::Note(*n)),
                Event::Tag { .. } => None,
            })
            .collect();
        let resets = reset_seqs(&notes);
        let mut r = Rebuild::with_map(&g, l2p, 10, false, resets.keys().copied());
        r.replay(events, &g).expect("replay");
        r
    }

    fn tag(seq: Seq, lba: Lba, ppa: u32) -> Event {
        Event::Tag {
            seq,
            lba,
            ppa: Ppa(ppa),
            crc: 0,
        }
    }

    fn relocated(seq: Seq, lba: Lba, to: u32, version_seq: Seq) -> Event {
        Event::Note(Note::Relocated {
            seq,
            lba,
            to: Ppa(to),
            version_seq,
        })
    }

    fn zone_reset(seq: Seq, zone: ZoneId) -> Event {
        Event::Note(Note::ZoneReset {
            seq,
            zone,
            erase_count: 1,
        })
    }

    /// Every mapped block is live in the reverse map and nothing else is.
    fn assert_consistent(r: &Rebuild) {
        let mapped: Vec<Ppa> = r.l2p.iter().map(|(_, p)| p).collect();
        for p in 0..32 {
            let live = r.p2l.is_valid(Ppa(p));
            assert_eq!(live, mapped.contains(&Ppa(p)), "block {p}");
        }
    }

    #[test]
    fn relocated_version_is_found_though_its_tag_is_gone() {
        // Block 1: in the checkpoint at 2; rewritten at seq 12 into zone 1
        // (tag erased with zone 1), moved by GC to 17.
        let r = rebuild(&[(1, 2)], &[relocated(20, 1, 17, 12), zone_reset(21, 1)]);
        assert_eq!(r.l2p.get(1), Some(Ppa(17)));
        assert_consistent(&r);
    }

    #[test]
    fn relocated_loses_to_a_newer_write() {
        // The write of seq 15 was in flight when GC moved version 12.
        let r = rebuild(&[(1, 2)], &[tag(15, 1, 9), relocated(20, 1, 17, 12)]);
        assert_eq!(r.l2p.get(1), Some(Ppa(9)));
        assert_consistent(&r);
    }

    #[test]
    fn zone_reset_unmaps_stale_blocks_before_the_zone_is_reused() {
        // Block 1 sits at 2 (zone 0) in the checkpoint; its newer version
        // (seq 12, zone 1) lost its tag. Zone 0 is reset and block 5 lands
        // at 2; then GC moves block 1's version to 17. Without the unmap at
        // the reset, blocks 1 and 5 share 2 until the move, which then
        // clears 2 in the reverse map under block 5.
        let r = rebuild(
            &[(1, 2)],
            &[
                zone_reset(14, 0),
                tag(16, 5, 2),
                relocated(20, 1, 17, 12),
                zone_reset(21, 1),
            ],
        );
        assert_eq!(r.l2p.get(1), Some(Ppa(17)));
        assert_eq!(r.l2p.get(5), Some(Ppa(2)));
        assert_consistent(&r);
    }
}
