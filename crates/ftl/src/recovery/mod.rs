//! Format and mount, as lists of named steps (docs/design.md, "A mount").
//!
//! Both run synchronously over a [`Backend`] through [`BackendExt`]: they
//! happen once, before the driver loop exists, and touch the device in a
//! fixed order that docs/format.md analyses step by step. Neither writes
//! anything until its in-memory result is complete; both end by writing a
//! checkpoint through the normal FTL path, so a cut during that leaves the
//! previous superblock and checkpoint in charge.
//!
//! The module is split by step: `log_reader` walks the metadata log
//! (checkpoint and roll-forward), `tags` scans data zones for OOB tags,
//! `replay` applies notes and tags in seq order to the mapping state, and
//! `zones` rebuilds the zone table from the checkpoint, the replay and the
//! device's zone report.

mod inplace;
mod log_reader;
mod md;
mod replay;
mod tags;
mod zones;

pub use inplace::PendingInPlace;
use log_reader::read_one;
pub(crate) use log_reader::LogReader;
pub(crate) use replay::MAX_ATTRIBUTE_RANGES;
use replay::{group_vectors, reset_seqs, Event, Rebuild};
use tags::scan_tags;

use crate::addr::{Ppa, Seq};
use crate::attr::AttrMap;
use crate::backend::{
    again_after_abort, Backend, BackendExt, DeviceError, Geometry, ZoneId, ZoneState,
};
use crate::checkpoint::{ZoneKind as RecordKind, ZoneRecord as CkptZone};
use crate::codec::FormatError;
use crate::config::{FormatOptions, FtlConfig, TagPlacement};
use crate::driver::Driver;
use crate::error::MountError;
use crate::ftl::{Ftl, Parts};
use crate::layout::{Layout, SUPER_ZONES};
use crate::log::MetaLog;
use crate::mapping::Mapping;
use crate::nameless::NamelessAddr;
use crate::superblock::{uuid_from_seed, Superblock, TagMode};
use crate::tag::{DataCrcImpl, TAG_BYTES};
use crate::zone::{Stream, ZoneKind, ZoneRecord, ZoneTable, ZoneUse};

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
            mapping: Mapping::new(
                layout.logical_blocks,
                geometry.zone_count,
                geometry.zone_capacity_blocks,
                tag_mode == TagMode::InBand,
            ),
            attrs: AttrMap::new(MAX_ATTRIBUTE_RANGES),
            uuid: uuid_from_seed(options.seed),
            zones,
            next_seq: 1,
            log,
            super_generation: 0,
            super_wp_blocks: [0, 0],
            super_dead: [false, false],
            gc_reserve_zones: options.gc_reserve_zones,
            nameless_gens: vec![0; geometry.zone_count as usize],
            nameless_births: crate::births::Births::new(geometry.zone_count),
            nameless_uncommitted: Vec::new(),
            nameless_commit_seq: 0,
            nameless_remap: Vec::new(),
            nameless_tails: Vec::new(),
            nameless_stuck: Vec::new(),
            geometry,
            config,
            layout,
            tag_mode,
        };
        let mut driver = Driver::new(backend, Ftl::from_parts(parts));
        driver
            .checkpoint()
            .map_err(checkpoint_failed("format: first checkpoint"))?;
        driver.start_wall_clock();
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
    ///
    /// A volume whose metadata can no longer be written (both superblock
    /// zones failed, or every zone of the metadata log) is at the end of
    /// its life: it mounts read-only, so what it holds can still be read.
    /// `ftl().is_read_only()` tells; every write answers
    /// [`IoError::ReadOnly`](crate::error::IoError::ReadOnly).
    pub fn mount(mut backend: B, config: FtlConfig) -> Result<Driver<B>, MountError> {
        let mut r = recover_state(&mut backend, config.data_crc_impl())?;
        // In band, nameless groups whose md the media may lack: before the
        // zones are finished (no room after).
        let settled = match r.nameless_md.take() {
            Some(md) => {
                let mapping = &r.mapping;
                let is_live = |p: Ppa| mapping.is_live(p);
                Some(md::settle(
                    &mut backend,
                    &r.geometry,
                    md,
                    r.inplace_pending.map(|j| j.victim),
                    is_live,
                    &mut r.reports,
                )?)
            }
            None => None,
        };
        if let Some(job) = r.inplace_pending.take() {
            inplace::redo(
                &mut backend,
                &r.geometry,
                &job,
                &r.mapping,
                &mut r.zones,
                r.data_crc,
                settled.as_ref().map(|s| s.layout),
            )?;
        }
        for &z in &r.finish {
            again_after_abort(|| backend.finish_zone(z))
                .map_err(dev("mount: finishing a half-written zone"))?;
        }
        let Recovered {
            geometry,
            superblock: sb,
            layout,
            mapping,
            attrs,
            zones,
            next_seq,
            log,
            reports,
            nameless_gens,
            nameless_births,
            nameless_uncommitted,
            nameless_commit_seq,
            nameless_remap,
            ..
        } = r;
        let (nameless_tails, nameless_stuck) =
            settled.map_or_else(|| (Vec::new(), Vec::new()), |s| (s.tails, s.stuck));
        let log = log.writer(&mut backend, &geometry, sb.checkpoint_log_seq)?;
        let in_band = sb.tag_mode == TagMode::InBand;
        let config_reserve = reserve_from_layout(&geometry, &layout, in_band);
        let parts = Parts {
            mapping,
            attrs,
            zones,
            next_seq,
            log,
            super_generation: sb.generation,
            super_wp_blocks: [
                reports[0].write_pointer_blocks,
                reports[1].write_pointer_blocks,
            ],
            super_dead: [0, 1]
                .map(|i| matches!(reports[i].state, ZoneState::ReadOnly | ZoneState::Offline)),
            gc_reserve_zones: config_reserve,
            nameless_gens,
            nameless_births,
            nameless_uncommitted,
            nameless_commit_seq,
            nameless_remap,
            nameless_tails,
            nameless_stuck,
            uuid: sb.uuid,
            tag_mode: sb.tag_mode,
            geometry,
            config,
            layout,
        };
        let mut driver = Driver::new(backend, Ftl::from_parts(parts));
        match driver.checkpoint() {
            // Read-only: the recovered state stays in memory, unwritten.
            Ok(()) | Err(crate::error::IoError::ReadOnly) => {}
            Err(e) => return Err(checkpoint_failed("mount: recovery checkpoint")(e)),
        }
        driver.start_wall_clock();
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
    /// The map, validity and shared entries, as the replay left them.
    pub mapping: Mapping,
    /// The range attributes.
    pub attrs: AttrMap,
    pub zones: ZoneTable,
    pub next_seq: Seq,
    /// Half-written data zones mount will finish.
    pub finish: Vec<ZoneId>,
    /// Notes rolled forward after the checkpoint.
    pub notes_replayed: usize,
    /// Tags (OOB mode) replayed from data zones written since the checkpoint.
    pub tags_replayed: usize,
    /// The last shutdown was clean: its checkpoint is marked so and
    /// nothing was logged after it.
    pub clean: bool,
    /// Blocks of non-persistent ranges unmapped because it was not.
    pub non_persistent_dropped: u64,
    /// What the tag scan took data CRCs with (`zftl check` goes on with it).
    pub data_crc: DataCrcImpl,
    /// Per zone, the generation of its nameless data (0: never nameless).
    pub nameless_gens: Vec<u32>,
    /// Per zone, the `base_gen`, and the live gap fills' birth generations
    /// (step 7 of the address check).
    pub nameless_births: crate::births::Births,
    /// The uncommitted set: live nameless blocks written since the newest
    /// commit note, increasing; and that note's seq (0: none).
    pub nameless_uncommitted: Vec<Ppa>,
    pub nameless_commit_seq: Seq,
    /// The remap table: (old, new) of each migration not acknowledged,
    /// old increasing.
    pub nameless_remap: Vec<(NamelessAddr, NamelessAddr)>,
    /// In band: the md groups' records, settled by the mount.
    pub(crate) nameless_md: Option<md::RecoveredMd>,
    /// The in-place job the log leaves pending: the mount redoes it (its
    /// victim's live blocks are in the scratch zone until then).
    pub inplace_pending: Option<inplace::PendingInPlace>,
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
/// → rebuild zones and reverse map. The tag scan checks each block's data
/// CRC with `crc`.
pub fn recover_state<B: Backend>(
    backend: &mut B,
    crc: DataCrcImpl,
) -> Result<Recovered, MountError> {
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
    let mut image = log.read_checkpoint(backend, &geometry, sb.checkpoint_log_seq)?;
    let notes = log.roll_forward(backend)?;
    let reports = report_zones(backend, &geometry)?;
    let notes_replayed = notes.len();
    let clean = image.clean && notes.is_empty();
    let mut events = group_vectors(notes)?;
    let note_events = events.len();
    let resets = reset_seqs(&events);
    if sb.tag_mode == TagMode::Oob {
        // In-place victims too: their gap fills' tags (seq above the
        // InPlaceStaged note's) are their only record.
        let rescan = replay::rescan_seqs(&events, &resets);
        events.extend(scan_tags(
            backend, &geometry, &layout, &image, &reports, &rescan, crc,
        )?);
    }
    let mut state = Rebuild::from_image(&geometry, &sb, &mut image, resets.keys().copied())?;
    let tags_replayed = events.len() - note_events;
    events.sort_by_key(Event::seq);
    state.replay(&events, &geometry)?;
    let non_persistent_dropped = if clean {
        0
    } else {
        state.drop_non_persistent()
    };
    let (zones, finish) = state.zone_table(&geometry, &layout, &image, &reports)?;
    let nameless_uncommitted = state.live_uncommitted();
    Ok(Recovered {
        superblock: sb,
        layout,
        epoch: state.mapping.history().epoch(),
        mapping: state.mapping,
        attrs: state.attrs,
        clean,
        non_persistent_dropped,
        zones,
        next_seq: state.next_seq,
        finish,
        notes_replayed,
        tags_replayed,
        nameless_uncommitted,
        nameless_commit_seq: state.nameless_commit_seq,
        nameless_remap: state.nameless_remap.into_iter().collect(),
        nameless_gens: state.nameless_gens,
        nameless_births: state.nameless_births,
        nameless_md: state.nameless_md,
        inplace_pending: state.inplace_pending,
        data_crc: crc,
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
        // Nor kept zones from GC zones: kept blocks a snapshot delete
        // frees are dead space like any other, wherever they lie.
        ZoneKind::Data {
            stream: Stream::Gc | Stream::Kept,
        } => RecordKind::DataGc,
        ZoneKind::Data {
            stream: Stream::Nameless,
        } => RecordKind::DataNameless,
        ZoneKind::Data {
            stream: Stream::NamelessMoved,
        } => RecordKind::DataNamelessMoved,
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
