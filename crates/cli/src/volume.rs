//! The FTL commands: `format`, `stats`, `check`, and the FTL part of the
//! main job. Each works on a simulated device image, or (`--device`, see
//! `crate::device`) on an NVMe ZNS drive: the FTL part of each command is
//! generic over the [`Backend`].

use std::path::{Path, PathBuf};

use serde::Serialize;
use zftl_core::check::{check_with_progress, tag_mode_name, CheckReport, Problem, ProblemKind};
use zftl_core::layout::{Layout, SUPER_ZONES};
use zftl_core::recovery::recover_state;
use zftl_core::superblock::Superblock;
use zftl_core::tag::DataCrcImpl;
use zftl_core::{
    Backend, BackendExt, Driver, FormatOptions, FtlConfig, FtlStats, IoError, MountError,
    TagPlacement,
};
use zftl_sim::{SimDevice, SimStats};

use crate::args::{FormatArgs, ImageOpt, Placement};
use crate::error::CliError;
use crate::image;
use crate::paths;
use crate::progress::Progress;
use crate::report::{human_bytes, Text, WearSummary};

/// `--image` of the subcommand, else the top-level one, else the default.
pub fn image_path(sub: &ImageOpt, top: Option<&PathBuf>) -> Result<PathBuf, CliError> {
    match sub.image.as_ref().or(top) {
        Some(p) => Ok(p.clone()),
        None => paths::default_image_path(),
    }
}

fn ftl_error(path: &Path, what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::Ftl {
        path: path.to_path_buf(),
        reason: format!("{what}: {e}"),
    }
}

pub(crate) fn mount_error(path: &Path, e: &MountError) -> CliError {
    let hint = match e {
        MountError::NotFormatted(_) => "; run `zftl format` first",
        MountError::Damaged(_) | MountError::Format { .. } => "; run `zftl check` for details",
        _ => "",
    };
    CliError::Ftl {
        path: path.to_path_buf(),
        reason: format!("cannot mount: {e}{hint}"),
    }
}

// ----- the volume as the reports show it -------------------------------------

/// Logical size, tag mode and zone layout of a formatted volume.
#[derive(Serialize)]
pub struct VolumeReport {
    pub logical_blocks: u64,
    pub logical_bytes: u64,
    pub block_size_bytes: u32,
    /// "oob" or "in-band".
    pub tag_mode: &'static str,
    pub uuid: String,
    pub superblock_zones: [u32; 2],
    pub meta_first_zone: u32,
    pub meta_zone_count: u32,
    pub first_data_zone: u32,
    pub data_zone_count: u32,
    pub zone_capacity_blocks: u64,
}

impl VolumeReport {
    fn of<B: Backend>(driver: &Driver<B>, layout: &Layout) -> VolumeReport {
        let ftl = driver.ftl();
        let g = ftl.geometry();
        VolumeReport {
            logical_blocks: ftl.logical_blocks(),
            logical_bytes: ftl.logical_blocks() * u64::from(g.block_size_bytes),
            block_size_bytes: g.block_size_bytes,
            tag_mode: tag_mode_name(ftl.tag_mode()),
            uuid: ftl.uuid().iter().map(|b| format!("{b:02x}")).collect(),
            superblock_zones: [0, 1],
            meta_first_zone: layout.meta_first_zone,
            meta_zone_count: layout.meta_zone_count,
            first_data_zone: layout.first_data_zone(),
            data_zone_count: g.zone_count.saturating_sub(layout.first_data_zone()),
            zone_capacity_blocks: g.zone_capacity_blocks,
        }
    }

    fn write(&self, t: &mut Text) {
        t.section("volume");
        t.row("logical_blocks", self.logical_blocks);
        t.bytes("logical_bytes", self.logical_bytes);
        t.row("block_size_bytes", self.block_size_bytes);
        t.row("tag_mode", self.tag_mode);
        t.row("uuid", &self.uuid);
        t.section("layout");
        t.row("superblock_zones", "0, 1");
        let meta_end = self.meta_first_zone + self.meta_zone_count;
        t.row(
            "meta_zones",
            format!(
                "{}..{} ({} zones)",
                self.meta_first_zone,
                meta_end.saturating_sub(1),
                self.meta_zone_count
            ),
        );
        t.row(
            "data_zones",
            format!(
                "{}..{} ({} zones)",
                self.first_data_zone,
                self.first_data_zone + self.data_zone_count.saturating_sub(1),
                self.data_zone_count
            ),
        );
        t.row("zone_capacity_blocks", self.zone_capacity_blocks);
    }
}

/// The layout the newest superblock record describes.
fn layout_on<B: Backend>(backend: &mut B) -> Option<Layout> {
    let mut newest: Option<Superblock> = None;
    for z in SUPER_ZONES {
        let wp = backend.zone_info(z).ok()?.write_pointer_blocks;
        for off in 0..wp {
            let Ok((data, _)) = backend.read_blocks(z, off, 1) else {
                continue;
            };
            if let Ok(sb) = Superblock::decode(&data) {
                if newest.as_ref().is_none_or(|n| sb.generation > n.generation) {
                    newest = Some(sb);
                }
            }
        }
    }
    newest.map(|sb| Layout {
        meta_first_zone: sb.meta_first_zone,
        meta_zone_count: sb.meta_zone_count,
        logical_blocks: sb.logical_blocks,
    })
}

fn volume<B: Backend>(driver: &mut Driver<B>) -> Option<VolumeReport> {
    layout_on(driver.backend_mut()).map(|l| VolumeReport::of(driver, &l))
}

pub fn ftl_stats_text(s: &FtlStats, t: &mut Text) {
    t.section("ftl");
    if s.read_only {
        t.row(
            "read_only",
            "yes: writes fail (a metadata write failed; if it stays so after a remount, the metadata can no longer be written: copy the data off)",
        );
    }
    t.row("host_write_blocks", s.host_write_blocks);
    t.row("host_read_blocks", s.host_read_blocks);
    t.row("host_trim_blocks", s.host_trim_blocks);
    t.row("host_zero_blocks", s.host_zero_blocks);
    t.row("nameless_write_blocks", s.nameless_write_blocks);
    t.row("nameless_read_blocks", s.nameless_read_blocks);
    t.row("nameless_free_blocks", s.nameless_free_blocks);
    t.row("nameless_live_blocks", s.nameless_live_blocks);
    t.row("nameless_zones", s.nameless_zones);
    t.row("nameless_uncommitted_blocks", s.nameless_uncommitted_blocks);
    t.row("nameless_events_pending", s.nameless_events_pending);
    t.row("nameless_remap_entries", s.nameless_remap_entries);
    t.row("nameless_remap_capacity", s.nameless_remap_capacity);
    t.row("nameless_handover_blocks", s.nameless_handover_blocks);
    t.row("nameless_md_write_blocks", s.nameless_md_write_blocks);
    t.row("nameless_md_stuck_groups", s.nameless_md_stuck_groups);
    t.row("nameless_migrated_blocks", s.nameless_migrated_blocks);
    t.row("nameless_remap_full_stops", s.nameless_remap_full_stops);
    t.row("nameless_remap_peak_entries", s.nameless_remap_peak_entries);
    t.row("nameless_inplace_jobs", s.nameless_inplace_jobs);
    t.row("nameless_staged_blocks", s.nameless_staged_blocks);
    t.row("nameless_pad_blocks", s.nameless_pad_blocks);
    t.row("nameless_gap_fill_blocks", s.nameless_gap_fill_blocks);
    t.row(
        "nameless_overwrite_fill_blocks",
        s.nameless_overwrite_fill_blocks,
    );
    t.row("nameless_inplace_gc_victims", s.nameless_inplace_gc_victims);
    t.row("nameless_fill_entries", s.nameless_fill_entries);
    t.row(
        "nameless_migration_note_bytes",
        s.nameless_migration_note_bytes,
    );
    t.row(
        "nameless_remap_checkpoint_bytes",
        s.nameless_remap_checkpoint_bytes,
    );
    t.row("media_write_blocks", s.media_write_blocks);
    t.row(
        "write_amplification",
        format!("{:.3}", s.write_amplification),
    );
    t.row("gc_copy_blocks", s.gc_copy_blocks);
    t.row("wl_move_blocks", s.wl_move_blocks);
    t.row("gc_kept_blocks", s.gc_kept_blocks);
    t.row("kept_zones", s.kept_zones);
    t.row("meta_write_blocks", s.meta_write_blocks);
    t.row("pad_blocks", s.pad_blocks);
    t.row("urgent_lane_blocks", s.urgent_lane_blocks);
    t.row("summary_write_blocks", s.summary_write_blocks);
    t.row("summary_map_walks", s.summary_map_walks);
    t.row("erases", s.erases);
    t.row("gc_device_us", s.gc_device_us);
    t.row("gc_unbudgeted_us", s.gc_unbudgeted_us);
    t.row("gc_budget_waits", s.gc_budget_waits);
    t.row("gc_resets_yielded", s.gc_resets_yielded);
    t.row("flushes", s.flushes);
    t.row("checkpoints", s.checkpoints);
    t.row("read_errors", s.read_errors);
    t.row("write_errors", s.write_errors);
    t.row("retired_zones", s.retired_zones);
    t.row("free_zones", s.free_zones);
    t.row("data_zones", s.data_zones);
    t.row("mapped_blocks", s.mapped_blocks);
    t.row("erase_count_min", s.erase_count_min);
    t.row("erase_count_mean", format!("{:.2}", s.erase_count_mean));
    t.row("erase_count_max", s.erase_count_max);
    t.row("erase_count_stddev", format!("{:.2}", s.erase_count_stddev));
    t.bytes("map_memory_bytes", s.map_memory_bytes);
    t.row(
        "map_bytes_per_mapped_block",
        format!("{:.2}", s.map_bytes_per_mapped_block),
    );
    t.section("ftl snapshots, forks and protection window");
    t.row("snapshots", s.snapshots);
    t.row("snapshot_versions", s.snapshot_versions);
    t.row("snapshot_room_versions", s.snapshot_room_versions);
    t.bytes("snapshot_memory_bytes", s.snapshot_memory_bytes);
    t.row("snapshot_creates", s.snapshot_creates);
    t.row("snapshot_deletes", s.snapshot_deletes);
    t.row("snapshot_reverts", s.snapshot_reverts);
    t.row("snapshot_revert_blocks", s.snapshot_revert_blocks);
    t.row("forks", s.forks);
    t.row("fork_creates", s.fork_creates);
    t.row("fork_deletes", s.fork_deletes);
    t.row("fork_delete_blocks", s.fork_delete_blocks);
    t.row("window_points", s.window_points);
    t.row(
        "window_oldest (UTC)",
        if s.window_oldest_ns == 0 {
            "-".to_string()
        } else {
            zftl_core::history::rfc3339_utc(s.window_oldest_ns)
        },
    );
    t.row("window_points_expired", s.window_points_expired);
    t.row("window_points_given_way", s.window_points_given_way);
    t.row("window_point_failures", s.window_point_failures);
}

// ----- format ----------------------------------------------------------------

#[derive(Serialize)]
pub struct FormatReport {
    pub image: String,
    /// Whether the image file was "created" or "opened".
    pub image_action: &'static str,
    /// The image held a zftl FTL that --force formatted over.
    pub replaced_existing: bool,
    pub gc_reserve_zones: u32,
    #[serde(flatten)]
    pub volume: VolumeReport,
}

impl FormatReport {
    pub fn text(&self) -> Text {
        let mut t = Text::default();
        t.line(format!("formatted zftl on {}", self.image));
        self.volume.write(&mut t);
        t.row("gc_reserve_zones", self.gc_reserve_zones);
        t
    }
}

/// What the image holds now: `None` for no FTL, else a description.
pub fn existing_ftl<B: Backend>(dev: &mut B, crc: DataCrcImpl) -> Option<String> {
    match recover_state(dev, crc) {
        Ok(r) => Some(format!(
            "a zftl FTL ({} logical blocks, {} mapped)",
            r.superblock.logical_blocks,
            r.mapping.mapped_blocks()
        )),
        Err(MountError::NotFormatted(_)) => None,
        Err(e) => Some(format!("a damaged zftl FTL ({e})")),
    }
}

fn logical_blocks(args: &FormatArgs, block_size: u32) -> Result<Option<u64>, CliError> {
    let Some(bytes) = args.logical_size else {
        return Ok(args.logical_blocks);
    };
    let bs = u64::from(block_size);
    if bytes == 0 || bytes % bs != 0 {
        return Err(CliError::InvalidArgument(format!(
            "--logical-size {bytes} is not a positive multiple of the block size ({bs} bytes)"
        )));
    }
    Ok(Some(bytes / bs))
}

pub fn format(
    args: &FormatArgs,
    top: Option<&PathBuf>,
    ftl: &FtlConfig,
) -> Result<FormatReport, CliError> {
    if let Some(device) = &args.image.device {
        return crate::device::format(args, device, ftl);
    }
    let path = image_path(&args.image, top)?;
    let (dev, action) = image::open_or_create(&path)?;
    let (report, mut dev) = format_on(args, &path, dev, action.as_str(), ftl)?;
    dev.sync()
        .map_err(|e| ftl_error(&path, "sync", crate::error::sim_reason(&e)))?;
    Ok(report)
}

/// Formats the FTL on `dev` (named `path`) with configuration `ftl`; hands
/// the device back after a clean shutdown.
pub fn format_on<B: Backend>(
    args: &FormatArgs,
    path: &Path,
    mut dev: B,
    action: &'static str,
    ftl: &FtlConfig,
) -> Result<(FormatReport, B), CliError> {
    let path = path.to_path_buf();
    let progress = Progress::start("looking for an existing FTL");
    let existing = existing_ftl(&mut dev, ftl.data_crc_impl());
    if let (Some(what), false) = (&existing, args.force) {
        progress.finish();
        return Err(CliError::AlreadyFormatted {
            path,
            what: what.clone(),
        });
    }
    let options = FormatOptions {
        logical_blocks: logical_blocks(args, dev.geometry().block_size_bytes)?,
        tag_placement: match args.tag_placement {
            Placement::Auto => TagPlacement::Auto,
            Placement::InBand => TagPlacement::InBand,
        },
        gc_reserve_zones: args.gc_reserve_zones,
        seed: args.seed,
    };
    progress.step("formatting: resetting zones, writing the first checkpoint");
    let driver = Driver::format(dev, &options, ftl.clone())
        .map_err(|e| ftl_error(&path, "cannot format", e))?;
    let layout = Layout::plan(
        driver.ftl().geometry(),
        Some(driver.logical_blocks()),
        args.gc_reserve_zones,
        driver.ftl().tag_mode() == zftl_core::superblock::TagMode::InBand,
    )
    .map_err(|e| ftl_error(&path, "layout", e))?;
    let volume = VolumeReport::of(&driver, &layout);
    progress.step("shutting down");
    let dev = driver
        .shutdown()
        .map_err(|e| ftl_error(&path, "shutdown after format", e))?;
    progress.finish();
    let report = FormatReport {
        image: path.display().to_string(),
        image_action: action,
        replaced_existing: existing.is_some(),
        gc_reserve_zones: args.gc_reserve_zones,
        volume,
    };
    Ok((report, dev))
}

// ----- stats -----------------------------------------------------------------

#[derive(Serialize)]
pub struct StatsReport {
    pub image: String,
    pub volume: Option<VolumeReport>,
    pub ftl: FtlStats,
    /// The simulator's counters; absent on a ZNS drive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device: Option<SimStats>,
    /// The simulator's wear; absent on a ZNS drive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wear: Option<WearSummary>,
}

impl StatsReport {
    pub fn text(&self) -> Text {
        let mut t = Text::default();
        t.line(format!(
            "mounted zftl on {} (counters since this mount)",
            self.image
        ));
        if let Some(v) = &self.volume {
            v.write(&mut t);
        }
        ftl_stats_text(&self.ftl, &mut t);
        if let Some(device) = &self.device {
            crate::report::stats_text(device, &mut t);
        }
        if let Some(wear) = &self.wear {
            t.section("wear");
            wear.write(&mut t);
        }
        t
    }
}

pub fn stats(
    args: &ImageOpt,
    top: Option<&PathBuf>,
    ftl: &FtlConfig,
) -> Result<StatsReport, CliError> {
    if let Some(device) = &args.device {
        return crate::device::stats(device, ftl);
    }
    let path = image_path(args, top)?;
    let dev = image::open(&path)?;
    let (mut report, dev) = stats_on(&path, dev, ftl)?;
    report.device = Some(dev.stats());
    report.wear = Some(WearSummary::of(
        &dev.erase_counts(),
        dev.config().endurance_erases,
    ));
    Ok(report)
}

/// Mounts the FTL on `dev` with configuration `ftl`, reads its statistics
/// and shuts it down; the report has no device counters (the caller adds
/// its own).
pub fn stats_on<B: Backend>(
    path: &Path,
    dev: B,
    ftl: &FtlConfig,
) -> Result<(StatsReport, B), CliError> {
    let progress = Progress::start("mounting");
    let mut driver = Driver::mount(dev, ftl.clone()).map_err(|e| mount_error(path, &e))?;
    let ftl = driver.stats();
    let volume = volume(&mut driver);
    progress.step("shutting down");
    // A read-only volume has nothing to write back: no clean-shutdown
    // checkpoint can be written either.
    let dev = if driver.ftl().is_read_only() {
        driver.into_backend()
    } else {
        driver
            .shutdown()
            .map_err(|e| ftl_error(path, "shutdown", e))?
    };
    progress.finish();
    let report = StatsReport {
        image: path.display().to_string(),
        volume,
        ftl,
        device: None,
        wear: None,
    };
    Ok((report, dev))
}

// ----- check -----------------------------------------------------------------

#[derive(Serialize)]
pub struct CheckOutput {
    pub image: String,
    pub clean: bool,
    #[serde(flatten)]
    pub report: CheckReport,
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn problem_line(p: &Problem) -> String {
    let kind = serde_json::to_value(p.what)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{:?}", p.what));
    format!(
        "  {kind:<22} zone {:>5}  offset {:>7}  lba {:>10}  {}",
        opt(p.zone),
        opt(p.offset_blocks),
        opt(p.lba),
        p.detail
    )
}

impl CheckOutput {
    pub fn render(&self) -> String {
        let r = &self.report;
        let s = &r.summary;
        let mut out = if self.clean {
            format!("checked {}: clean\n", self.image)
        } else {
            format!("checked {}: {} problem(s)\n", self.image, s.problems_total)
        };
        for (title, list) in [("problems", &r.problems), ("notices", &r.notices)] {
            if list.is_empty() {
                continue;
            }
            out.push_str(&format!("\n{title}:\n"));
            for p in list {
                out.push_str(&problem_line(p));
                out.push('\n');
            }
        }
        if s.problems_total > r.problems.len() as u64 {
            out.push_str(&format!(
                "  ... and {} more\n",
                s.problems_total - r.problems.len() as u64
            ));
        }
        let mut t = Text::default();
        t.section("summary");
        t.row("formatted", s.formatted);
        t.row("recovered", s.recovered);
        t.row("tag_mode", opt(s.tag_mode.as_deref()));
        t.row("superblock_generation", opt(s.superblock_generation));
        t.row("superblock_records", s.superblock_records);
        t.row("superblock_records_valid", s.superblock_records_valid);
        t.row("checkpoint_log_seq", opt(s.checkpoint_log_seq));
        t.row("checkpoint_zone", opt(s.checkpoint_zone));
        t.row("checkpoint_offset_blocks", opt(s.checkpoint_offset_blocks));
        t.row("checkpoint_chunks", s.checkpoint_chunks);
        t.row("log_blocks_after_checkpoint", s.log_blocks_after_checkpoint);
        t.row("log_note_blocks", s.log_note_blocks);
        t.row("notes_replayed", s.notes_replayed);
        t.row("tags_replayed", s.tags_replayed);
        t.row("log_end", opt(s.log_end.as_deref()));
        t.row("logical_blocks", opt(s.logical_blocks));
        t.row("mapped_blocks", s.mapped_blocks);
        t.row("mapped_blocks_checked", s.mapped_blocks_checked);
        t.row("zones_checked", s.zones_checked);
        t.row("problems_total", s.problems_total);
        out.push('\n');
        out.push_str(&t.render());
        out
    }
}

/// Runs the check. `Err` (after nothing is printed) for an image that holds
/// no FTL; otherwise the report, which the caller prints before failing on
/// damage.
pub fn check(
    args: &ImageOpt,
    top: Option<&PathBuf>,
    crc: DataCrcImpl,
) -> Result<(PathBuf, CheckOutput), CliError> {
    if let Some(device) = &args.device {
        return crate::device::check(device, crc);
    }
    let path = image_path(args, top)?;
    let mut dev = image::open(&path)?;
    check_on(path, &mut dev, crc)
}

/// The check on `dev`, named `path`, taking data CRCs with `crc`.
pub fn check_on<B: Backend>(
    path: PathBuf,
    dev: &mut B,
    crc: DataCrcImpl,
) -> Result<(PathBuf, CheckOutput), CliError> {
    let progress = Progress::start("checking superblocks");
    let report = check_with_progress(dev, crc, &mut |p| {
        if p.total > 0 {
            progress.position(p.step, p.done, p.total);
        } else {
            progress.step(&format!("checking {}", p.step));
        }
    });
    progress.finish();
    if let [only] = report.problems.as_slice() {
        if only.what == ProblemKind::NotFormatted {
            return Err(CliError::Ftl {
                path,
                reason: format!("{}; run `zftl format` first", only.detail),
            });
        }
    }
    let out = CheckOutput {
        image: path.display().to_string(),
        clean: report.is_clean(),
        report,
    };
    Ok((path, out))
}

// ----- the main job ----------------------------------------------------------

/// The FTL part of the main job's report.
#[derive(Serialize)]
pub struct MainFtlReport {
    /// "formatted" (this run put the FTL on the image) or "mounted".
    pub action: &'static str,
    pub volume: Option<VolumeReport>,
    pub stats: FtlStats,
}

impl MainFtlReport {
    pub fn write(&self, t: &mut Text) {
        if let Some(v) = &self.volume {
            v.write(t);
        }
        ftl_stats_text(&self.stats, t);
    }
}

/// Mounts the FTL on `dev` with configuration `ftl`, formatting it first if
/// the image holds none; shuts it down cleanly and reports.
pub fn main_job_ftl(
    path: &Path,
    dev: &mut SimDevice,
    ftl: &FtlConfig,
) -> Result<MainFtlReport, CliError> {
    let progress = Progress::start("mounting");
    let (mut driver, action) = match Driver::mount(&mut *dev, ftl.clone()) {
        Ok(d) => (d, "mounted"),
        Err(MountError::NotFormatted(_)) => {
            progress.step("formatting");
            let d = Driver::format(&mut *dev, &FormatOptions::default(), ftl.clone())
                .map_err(|e| ftl_error(path, "cannot format", e))?;
            (d, "formatted")
        }
        Err(e) => return Err(mount_error(path, &e)),
    };
    let stats = driver.stats();
    let volume = volume(&mut driver);
    progress.step("shutting down");
    driver
        .shutdown()
        .map_err(|e: IoError| ftl_error(path, "shutdown", e))?;
    progress.finish();
    Ok(MainFtlReport {
        action,
        volume,
        stats,
    })
}

/// Shown in the main job's header line.
pub fn main_job_line(r: &MainFtlReport) -> String {
    match &r.volume {
        Some(v) => format!(
            "{} zftl: {} logical blocks ({}), tags {}",
            r.action,
            v.logical_blocks,
            human_bytes(v.logical_bytes),
            v.tag_mode
        ),
        None => format!("{} zftl", r.action),
    }
}
