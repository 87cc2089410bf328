//! `zftl bench snapshot`'s measurements of going back in time, each in
//! the tag mode being measured (docs/bench.md, "bench snapshot"):
//!
//! - **revert**: a volume in memory, a base written, snapshot T, then 4
//!   KiB writes at random addresses of the base; each round reverts to T
//!   (timed), reverts to the undo snapshot that revert took (timed), and
//!   deletes both undo snapshots; the FTL's counters around each revert
//!   show what it wrote (metadata only: no host write, no data block);
//! - **diff**: a fully written volume on a sparse image (zeros), snapshot
//!   A, a share of its blocks rewritten at random, snapshot B; each round
//!   times `snapshot_diff(A, B)` and `snapshot_diff(A, live)` and checks
//!   that both list exactly the blocks rewritten;
//! - **views**: fully written volumes in memory; each round creates a
//!   snapshot, times the first 4 KiB read of its view from the moment the
//!   create returned, overwrites half of a sample of blocks, and times 4
//!   KiB reads of the sample through the view and through the live volume,
//!   block by block in turn;
//! - **window**: 4 KiB random writes on two like volumes in memory with
//!   the simulator's timing on, one with a protection window and one
//!   without, their rounds in turn; the driver's wall clock follows the
//!   simulator's virtual time, so the window's points come at the times a
//!   device of that speed would see.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use zftl_core::{Backend, Driver, FormatOptions, FtlConfig, FtlStats, ProtectWindow, TagPlacement};
use zftl_sim::rng::Rng;
use zftl_sim::{SimConfig, SimDevice, Timing};

use super::pipe::Pipeline;
use super::range::Rounds;
use super::recovery::{device_for, disk_estimate, fill_zeros, free_bytes, ImageFile};
use super::workload::{AddressGen, WorkloadSpec};
use super::{median, progress, ratio, round, show, write_shown, BenchError, TagMode};
use crate::report::{human_bytes, Text};

const MIB: u64 = 1 << 20;
const GIB: f64 = (1u64 << 30) as f64;
/// The simulator's default device has 16 LUNs of 256-page erase blocks of
/// 4 KiB: 16 MiB per erase block on every LUN.
const MIB_PER_BLOCK_ROW: u64 = 16;
/// Host writes kept in flight while volumes are written (not timed).
const QUEUE_DEPTH: usize = 8;
/// The byte of the blocks written before a snapshot, and of those after.
pub(super) const BEFORE: u8 = 0x11;
const AFTER: u8 = 0x5a;
/// Targets of the issue: a revert after 1 GiB written, a diff of a 16 GiB
/// volume with 1 % changed, a view's activation per GiB of data.
pub const REVERT_TARGET_MS: f64 = 1000.0;
pub const DIFF_TARGET_MS: f64 = 100.0;
pub const VIEW_TARGET_MS_PER_GIB: f64 = 50.0;

/// The options of these measurements (part of `zftl bench snapshot`'s).
#[derive(Debug, Clone, Args)]
pub struct TimeArgs {
    /// Revert: the simulated device, in memory, in MiB (a multiple of 16,
    /// at least 256); the volume has the default logical size. The
    /// checkpoint's room for kept versions grows with it, and a revert
    /// keeps a version of every block it changes beside the ones T keeps.
    #[arg(long, value_name = "MIB", default_value_t = 16384)]
    pub revert_device_mib: u64,
    /// Revert: data written sequentially from block 0 before snapshot T,
    /// in MiB; the writes after T go to random blocks of it.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    pub revert_base_mib: u64,
    /// Revert: 4 KiB writes at uniformly random blocks of the base after
    /// T, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub revert_written_mib: u64,
    /// Diff: the volume's size in MiB, every block written (zeros, on a
    /// sparse image file).
    #[arg(long, value_name = "MIB", default_value_t = 16384)]
    pub diff_volume_mib: u64,
    /// Diff: the share of the volume's blocks rewritten between the two
    /// snapshots (distinct blocks, at random).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.01)]
    pub diff_changed: f64,
    /// Diff: where the sparse image goes (deleted afterwards); default:
    /// the system's temporary directory.
    #[arg(long, value_name = "DIR")]
    pub image_dir: Option<PathBuf>,
    /// Views: volumes of these sizes in MiB, every block written, in
    /// memory.
    #[arg(long, value_name = "MIB,..", value_delimiter = ',', default_values_t = [1024, 4096])]
    pub view_mib: Vec<u64>,
    /// Views: blocks read through the view and through the live volume
    /// each round (half of them overwritten after the snapshot).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub view_reads: u64,
    /// Window: the protection window in seconds
    /// (`FtlConfig::protect_window`) of the volume that has one.
    #[arg(long, value_name = "SECS", default_value_t = 3600)]
    pub window_secs: u64,
    /// Window: the simulated device (timing on, in memory), in MiB (a
    /// multiple of 16, at least 256).
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub window_device_mib: u64,
    /// Window: the share of the logical space written and overwritten;
    /// the rest is room for the blocks the window keeps.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.9)]
    pub window_used: f64,
    /// Window: 4 KiB random writes per round, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub window_write_mib: u64,
    /// Window: rounds of each volume.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub window_rounds: usize,
    /// Window: host writes in flight.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub window_queue_depth: usize,
    /// Window, hot/cold WA: host writes per second of the volume's
    /// simulated clock (the simulator's timing is off in the WA runs; the
    /// clock advances by the inverse per host write).
    #[arg(long, value_name = "WRITES", default_value_t = 10_000.0)]
    pub window_wa_rate: f64,
}

impl TimeArgs {
    pub fn validate(&self) -> Result<(), BenchError> {
        for (flag, mib) in [
            ("--revert-device-mib", self.revert_device_mib),
            ("--window-device-mib", self.window_device_mib),
        ] {
            if mib < 256 || !mib.is_multiple_of(MIB_PER_BLOCK_ROW) {
                return Err(BenchError::Args(format!(
                    "{flag} {mib} must be a multiple of 16, at least 256"
                )));
            }
        }
        let positive = [
            ("--revert-base-mib", self.revert_base_mib),
            ("--revert-written-mib", self.revert_written_mib),
            ("--diff-volume-mib", self.diff_volume_mib),
            ("--view-reads", self.view_reads),
            ("--window-write-mib", self.window_write_mib),
            ("--window-rounds", self.window_rounds as u64),
            ("--window-queue-depth", self.window_queue_depth as u64),
        ];
        for (flag, n) in positive {
            if n == 0 {
                return Err(BenchError::Args(format!("{flag} must be at least 1")));
            }
        }
        if self.view_mib.is_empty() || self.view_mib.contains(&0) {
            return Err(BenchError::Args(
                "--view-mib must list sizes of at least 1 MiB".into(),
            ));
        }
        if !(self.window_wa_rate >= 1.0 && self.window_wa_rate <= 1e9) {
            return Err(BenchError::Args(format!(
                "--window-wa-rate {} must lie in [1, 1e9]",
                self.window_wa_rate
            )));
        }
        for (flag, f) in [
            ("--diff-changed", self.diff_changed),
            ("--window-used", self.window_used),
        ] {
            if !(f > 0.0 && f <= 1.0) {
                return Err(BenchError::Args(format!("{flag} {f} must lie in (0, 1]")));
            }
        }
        Ok(())
    }
}

pub(super) fn no_window(ftl: &FtlConfig) -> FtlConfig {
    FtlConfig {
        protect_window: None,
        ..ftl.clone()
    }
}

pub(super) fn format_options(
    mode: TagMode,
    seed: u64,
    logical_blocks: Option<u64>,
) -> FormatOptions {
    FormatOptions {
        logical_blocks,
        tag_placement: match mode {
            TagMode::Oob => TagPlacement::Auto,
            TagMode::InBand => TagPlacement::InBand,
        },
        seed,
        ..FormatOptions::default()
    }
}

/// The default device's shape with `mib` of media; timing as given.
fn sim_of(mib: u64, timing: Option<Timing>) -> SimConfig {
    SimConfig {
        blocks_per_lun: u32::try_from(mib / MIB_PER_BLOCK_ROW).unwrap_or(u32::MAX),
        endurance_erases: u32::MAX,
        timing,
        ..SimConfig::default()
    }
}

fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// One bit per logical block.
struct Bitmap {
    words: Vec<u64>,
    count: u64,
}

impl Bitmap {
    fn new(blocks: u64) -> Bitmap {
        Bitmap {
            words: vec![0; blocks.div_ceil(64) as usize],
            count: 0,
        }
    }

    fn get(&self, lba: u64) -> bool {
        self.words[(lba / 64) as usize] & (1 << (lba % 64)) != 0
    }

    /// Sets the bit; whether it was clear.
    fn set(&mut self, lba: u64) -> bool {
        let w = &mut self.words[(lba / 64) as usize];
        let bit = 1 << (lba % 64);
        let new = *w & bit == 0;
        *w |= bit;
        self.count += u64::from(new);
        new
    }
}

/// Writes `lbas` in order, `QUEUE_DEPTH` in flight, blocks of `byte`.
fn write_list<B: Backend>(
    drv: &mut Driver<B>,
    lbas: &[u64],
    byte: u8,
    what: &str,
) -> Result<(), BenchError> {
    let mut pipe = Pipeline::with_byte(QUEUE_DEPTH, drv.block_size(), byte);
    let count = lbas.len() as u64;
    write_shown(drv, &mut pipe, lbas.iter().copied(), count, what)
}

/// A volume of `mib` MiB in memory, every block written with [`BEFORE`],
/// flushed and settled, on a device sized for its blocks and `room` of
/// them more (no protection window): the driver, its logical blocks and
/// the device's bytes.
pub(super) fn written_volume(
    mib: u64,
    room: impl FnOnce(u64) -> u64,
    ftl: &FtlConfig,
    mode: TagMode,
    seed: u64,
) -> Result<(Driver<SimDevice>, u64, u64), BenchError> {
    let logical = mib * MIB / u64::from(SimConfig::default().page_size_bytes);
    let (cfg, _) = device_for(logical + room(logical), mode == TagMode::InBand)?;
    let device_bytes = cfg.page_count() * u64::from(cfg.page_size_bytes);
    let dev = SimDevice::create_memory(cfg)?;
    let options = format_options(mode, seed, Some(logical));
    let mut drv = Driver::format(dev, &options, no_window(ftl))?;
    write_range(&mut drv, logical, BEFORE, &format!("{mib} MiB"))?;
    drv.flush()?;
    drv.settle()?;
    Ok((drv, logical, device_bytes))
}

/// Writes blocks `0..count` of `byte`, `QUEUE_DEPTH` in flight.
pub(super) fn write_range<B: Backend>(
    drv: &mut Driver<B>,
    count: u64,
    byte: u8,
    what: &str,
) -> Result<(), BenchError> {
    let mut pipe = Pipeline::with_byte(QUEUE_DEPTH, drv.block_size(), byte);
    write_shown(drv, &mut pipe, 0..count, count, what)
}

/// Checks that block `lba`'s data is all `byte`.
pub(super) fn expect_byte(data: &[u8], byte: u8, what: &str, lba: u64) -> Result<(), BenchError> {
    match data.iter().position(|&b| b != byte) {
        None => Ok(()),
        Some(at) => Err(BenchError::Check(format!(
            "{what}: block {lba} byte {at} is {:#04x}, not {byte:#04x}",
            data[at]
        ))),
    }
}

// ----- revert ----------------------------------------------------------

/// One kind of revert, per round: its wall time and what the FTL's
/// counters moved by while it ran.
#[derive(Debug, Serialize)]
pub struct RevertCost {
    pub ms: Rounds,
    /// Blocks pointed back (`snapshot_revert_blocks`).
    pub revert_blocks: Vec<u64>,
    /// Host writes counted (`host_write_blocks`): 0, nothing is rewritten.
    pub host_write_blocks: Vec<u64>,
    /// Media blocks written (`media_write_blocks`), and of them metadata
    /// (log blocks with the vector's notes), padding, and everything else
    /// (data: 0 when nothing is copied).
    pub media_write_blocks: Vec<u64>,
    pub meta_blocks: Vec<u64>,
    pub pad_blocks: Vec<u64>,
    pub data_blocks: Vec<u64>,
    pub gc_copy_blocks: Vec<u64>,
}

#[derive(Default)]
struct RevertCollect {
    ms: Vec<f64>,
    deltas: Vec<[u64; 7]>,
}

impl RevertCollect {
    fn time<B: Backend>(
        &mut self,
        drv: &mut Driver<B>,
        to: &str,
        undo: &str,
    ) -> Result<(), BenchError> {
        let s0 = drv.stats();
        let t = Instant::now();
        let done = drv.snapshot_revert(to, Some(undo));
        let ms = ms_since(t);
        if let Err(e) = done {
            let s = drv.stats();
            return Err(BenchError::Check(format!(
                "the revert to {to} failed: {e} ({} kept versions, room for {} more)",
                s.snapshot_versions, s.snapshot_room_versions
            )));
        }
        self.ms.push(ms);
        let s1 = drv.stats();
        let media = s1.media_write_blocks - s0.media_write_blocks;
        let meta = s1.meta_write_blocks - s0.meta_write_blocks;
        let pad = s1.pad_blocks - s0.pad_blocks;
        self.deltas.push([
            s1.snapshot_revert_blocks - s0.snapshot_revert_blocks,
            s1.host_write_blocks - s0.host_write_blocks,
            media,
            meta,
            pad,
            media.saturating_sub(meta + pad),
            s1.gc_copy_blocks - s0.gc_copy_blocks,
        ]);
        Ok(())
    }

    fn done(self) -> RevertCost {
        let col = |i: usize| self.deltas.iter().map(|d| d[i]).collect::<Vec<u64>>();
        RevertCost {
            ms: Rounds::of(self.ms),
            revert_blocks: col(0),
            host_write_blocks: col(1),
            media_write_blocks: col(2),
            meta_blocks: col(3),
            pad_blocks: col(4),
            data_blocks: col(5),
            gc_copy_blocks: col(6),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct RevertReport {
    pub device_bytes: u64,
    pub logical_blocks: u64,
    /// Written sequentially before snapshot T.
    pub base_bytes: u64,
    /// Written after T, 4 KiB at a time at random blocks of the base.
    pub written_since_bytes: u64,
    /// Distinct blocks those writes changed: what each revert points back.
    pub changed_blocks: u64,
    /// Versions T kept before the first revert, and the room left.
    pub kept_versions: u64,
    pub room_versions: u64,
    /// The FTL's counters before the first revert and after the last.
    pub host_write_blocks_before: u64,
    pub host_write_blocks_after: u64,
    pub media_write_blocks_before: u64,
    pub media_write_blocks_after: u64,
    /// Reverts to T (each taking an undo snapshot).
    pub revert: RevertCost,
    /// Reverts to that undo snapshot: the revert undone.
    pub undo: RevertCost,
    pub target_ms: f64,
}

pub fn revert(
    args: &TimeArgs,
    rounds: usize,
    ftl: &FtlConfig,
    mode: TagMode,
    seed: u64,
) -> Result<RevertReport, BenchError> {
    let dev = SimDevice::create_memory(sim_of(args.revert_device_mib, None))?;
    let mut drv = Driver::format(dev, &format_options(mode, seed, None), no_window(ftl))?;
    let bs = drv.block_size() as u64;
    let base = args.revert_base_mib * MIB / bs;
    if base == 0 || base > drv.logical_blocks() {
        return Err(BenchError::Args(format!(
            "--revert-base-mib {} must fit the volume's {} blocks of {bs} bytes",
            args.revert_base_mib,
            drv.logical_blocks()
        )));
    }
    write_range(&mut drv, base, BEFORE, "base")?;
    drv.flush()?;
    drv.settle()?;
    drv.snapshot_create("T")?;
    let written = args.revert_written_mib * MIB / bs;
    let mut changed = Bitmap::new(base);
    let mut gen = AddressGen::new(&WorkloadSpec::uniform(), base, seed);
    let lbas: Vec<u64> = (0..written)
        .map(|_| {
            let lba = gen.next_lba();
            changed.set(lba);
            lba
        })
        .collect();
    write_list(&mut drv, &lbas, AFTER, "since T")?;
    drop(lbas);
    drv.flush()?;
    drv.settle()?;
    // Blocks to read back after each revert: some changed since T, some not.
    let mut rng = Rng::stream(seed, 0x7e7e);
    let (mut was_changed, mut unchanged) = (Vec::new(), Vec::new());
    for _ in 0..100_000 {
        let lba = rng.below(base);
        let list = if changed.get(lba) {
            &mut was_changed
        } else {
            &mut unchanged
        };
        if list.len() < 32 {
            list.push(lba);
        }
    }
    let check = |drv: &mut Driver<SimDevice>, lbas: &[u64], byte: u8, what: &str| {
        for &lba in lbas {
            expect_byte(&drv.read(lba, 1)?, byte, what, lba)?;
        }
        Ok::<(), BenchError>(())
    };
    let s = drv.stats();
    let (kept_versions, room_versions) = (s.snapshot_versions, s.snapshot_room_versions);
    let before = drv.stats();
    let (mut to_t, mut back) = (RevertCollect::default(), RevertCollect::default());
    let bar = progress(rounds as u64, "reverts");
    for r in 0..rounds {
        let (undo, redo) = (format!("undo-{r}"), format!("redo-{r}"));
        to_t.time(&mut drv, "T", &undo)?;
        check(&mut drv, &was_changed, BEFORE, "after the revert to T")?;
        check(&mut drv, &unchanged, BEFORE, "after the revert to T")?;
        back.time(&mut drv, &undo, &redo)?;
        check(&mut drv, &was_changed, AFTER, "after the revert undone")?;
        check(&mut drv, &unchanged, BEFORE, "after the revert undone")?;
        drv.snapshot_delete(&undo)?;
        drv.snapshot_delete(&redo)?;
        drv.settle()?;
        bar.set_position(r as u64 + 1);
    }
    bar.finish_and_clear();
    let after = drv.stats();
    let (revert, undo) = (to_t.done(), back.done());
    for (what, cost) in [("revert", &revert), ("undo", &undo)] {
        if let Some(n) = cost.revert_blocks.iter().find(|&&n| n != changed.count) {
            return Err(BenchError::Check(format!(
                "a {what} pointed back {n} blocks, {} were changed",
                changed.count
            )));
        }
    }
    Ok(RevertReport {
        device_bytes: args.revert_device_mib * MIB,
        logical_blocks: drv.logical_blocks(),
        base_bytes: base * bs,
        written_since_bytes: written * bs,
        changed_blocks: changed.count,
        kept_versions,
        room_versions,
        host_write_blocks_before: before.host_write_blocks,
        host_write_blocks_after: after.host_write_blocks,
        media_write_blocks_before: before.media_write_blocks,
        media_write_blocks_after: after.media_write_blocks,
        revert,
        undo,
        target_ms: REVERT_TARGET_MS,
    })
}

// ----- diff ------------------------------------------------------------

#[derive(Debug, Serialize)]
pub struct DiffReport {
    pub volume_bytes: u64,
    pub device_bytes: u64,
    pub logical_blocks: u64,
    pub fill_s: f64,
    /// Distinct blocks rewritten between A and B.
    pub changed_blocks: u64,
    /// Runs each diff listed (both list the same).
    pub runs: u64,
    /// `Request::Changed` queries per diff (one per
    /// `MAX_EXTENT_QUERY_BLOCKS`).
    pub queries: u64,
    /// Versions A keeps.
    pub kept_versions: u64,
    /// The create of B, and the first 4 KiB read of B's view timed from
    /// the moment that create returned.
    pub create_b_ms: f64,
    pub first_view_read_us: f64,
    /// `snapshot_diff(A, B)` and `snapshot_diff(A, live)`.
    pub between_ms: Rounds,
    pub since_ms: Rounds,
    pub target_ms: f64,
    /// Disk the sparse image held at the end.
    pub image_disk_bytes: u64,
}

/// Checks that `runs` cover exactly the blocks set in `expected`.
fn check_runs(runs: &[(u64, u64)], expected: &Bitmap, what: &str) -> Result<(), BenchError> {
    let mut listed = 0u64;
    for &(lba, n) in runs {
        for b in lba..lba + n {
            if !expected.get(b) {
                return Err(BenchError::Check(format!(
                    "{what} lists block {b}, which was not rewritten"
                )));
            }
        }
        listed += n;
    }
    if listed != expected.count {
        return Err(BenchError::Check(format!(
            "{what} lists {listed} blocks, {} were rewritten",
            expected.count
        )));
    }
    Ok(())
}

pub fn diff(
    args: &TimeArgs,
    rounds: usize,
    ftl: &FtlConfig,
    mode: TagMode,
    seed: u64,
) -> Result<DiffReport, BenchError> {
    let in_band = mode == TagMode::InBand;
    let logical = args.diff_volume_mib * MIB / u64::from(SimConfig::default().page_size_bytes);
    let (cfg, layout) = device_for(logical, in_band)?;
    let dir = args.image_dir.clone().unwrap_or_else(std::env::temp_dir);
    let need = disk_estimate(&cfg, &layout, in_band)
        + (args.diff_changed * logical as f64) as u64 * u64::from(cfg.page_size_bytes) * 2;
    let free = free_bytes(&dir)?;
    if free < need + (2 << 30) {
        return Err(BenchError::Args(format!(
            "{}: {} MiB free, the diff's image needs about {} MiB and 2 GiB are kept spare \
             (use --image-dir)",
            dir.display(),
            free / MIB,
            need / MIB
        )));
    }
    let image = ImageFile(dir.join(format!(
        "zftl-bench-snapshot-diff-{}-{}.img",
        std::process::id(),
        mode.name()
    )));
    let _ = std::fs::remove_file(&image.0);
    let device_bytes = cfg.page_count() * u64::from(cfg.page_size_bytes);
    let dev = SimDevice::create_file(&image.0, cfg)?;
    let mut drv = Driver::format(
        dev,
        &format_options(mode, seed, Some(logical)),
        no_window(ftl),
    )?;
    let t = Instant::now();
    fill_zeros(&mut drv, logical)?;
    let fill_s = t.elapsed().as_secs_f64();
    drv.settle()?;
    drv.snapshot_create("A")?;
    let target = ((args.diff_changed * logical as f64).round() as u64).clamp(1, logical);
    let mut changed = Bitmap::new(logical);
    let mut rng = Rng::stream(seed, 0xd1ff);
    let mut lbas = Vec::with_capacity(target as usize);
    while changed.count < target {
        let lba = rng.below(logical);
        if changed.set(lba) {
            lbas.push(lba);
        }
    }
    write_list(&mut drv, &lbas, AFTER, "changes")?;
    drv.flush()?;
    drv.settle()?;
    let t = Instant::now();
    let b = drv.snapshot_create("B")?;
    let returned = Instant::now();
    let create_b_ms = (returned - t).as_secs_f64() * 1e3;
    let first = drv.read_snapshot(b.id, lbas[0], 1)?;
    let first_view_read_us = returned.elapsed().as_secs_f64() * 1e6;
    expect_byte(&first, AFTER, "B's view", lbas[0])?;
    let kept_versions = drv.stats().snapshot_versions;
    let (mut between, mut since) = (Vec::new(), Vec::new());
    let mut runs = 0u64;
    for r in 0..rounds {
        let order = if r % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for with_b in order {
            let until = with_b.then_some("B");
            let t = Instant::now();
            let listed = drv.snapshot_diff("A", until)?;
            let ms = ms_since(t);
            let what = if with_b {
                "diff(A, B)"
            } else {
                "diff(A, live)"
            };
            check_runs(&listed, &changed, what)?;
            runs = listed.len() as u64;
            if with_b {
                between.push(ms);
            } else {
                since.push(ms);
            }
        }
    }
    let step = u64::from(zftl_core::MAX_EXTENT_QUERY_BLOCKS);
    let logical_blocks = drv.logical_blocks();
    let dev = drv.shutdown()?;
    drop(dev);
    Ok(DiffReport {
        volume_bytes: args.diff_volume_mib * MIB,
        device_bytes,
        logical_blocks,
        fill_s: round(fill_s, 3),
        changed_blocks: changed.count,
        runs,
        queries: logical_blocks.div_ceil(step),
        kept_versions,
        create_b_ms: round(create_b_ms, 4),
        first_view_read_us: round(first_view_read_us, 2),
        between_ms: Rounds::of(between),
        since_ms: Rounds::of(since),
        target_ms: DIFF_TARGET_MS,
        image_disk_bytes: allocated_bytes(&image.0),
    })
}

fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

// ----- views -----------------------------------------------------------

#[derive(Debug, Serialize)]
pub struct ViewCase {
    /// Data written (every block of the volume) before the snapshots.
    pub data_bytes: u64,
    pub device_bytes: u64,
    /// The create before each view (with no other snapshot live).
    pub create_ms: Rounds,
    /// The view's first read after each create.
    #[serde(flatten)]
    pub activation: Activation,
    /// 4 KiB reads per round through the view and through the live
    /// volume, of the same blocks, half of them overwritten after the
    /// snapshot (the view reads their kept versions), one at a time: the
    /// median µs per read in each round.
    pub reads_per_round: u64,
    pub view_read_us: Rounds,
    pub live_read_us: Rounds,
    /// view ÷ live, per round.
    pub view_over_live: Rounds,
}

pub fn views(
    args: &TimeArgs,
    rounds: usize,
    ftl: &FtlConfig,
    mode: TagMode,
    seed: u64,
) -> Result<Vec<ViewCase>, BenchError> {
    args.view_mib
        .iter()
        .map(|&mib| view_case(args, mib, rounds, ftl, mode, seed))
        .collect()
}

fn view_case(
    args: &TimeArgs,
    mib: u64,
    rounds: usize,
    ftl: &FtlConfig,
    mode: TagMode,
    seed: u64,
) -> Result<ViewCase, BenchError> {
    let (mut drv, logical, device_bytes) = written_volume(mib, |_| 0, ftl, mode, seed)?;
    let mut rng = Rng::stream(seed, 0x71e3);
    let sample: Vec<u64> = (0..args.view_reads.min(logical))
        .map(|_| rng.below(logical))
        .collect();
    let overwritten = &sample[..sample.len() / 2];
    let over_set: std::collections::HashSet<u64> = overwritten.iter().copied().collect();
    let (mut create, mut first, mut view_us, mut live_us, mut over) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut first_media = vec![];
    // The bytes the live volume holds in the overwritten blocks.
    let mut held = BEFORE;
    let bar = progress(rounds as u64, "views");
    for r in 0..rounds {
        drv.flush()?;
        drv.settle()?;
        let name = format!("view-{r}");
        let t = Instant::now();
        let snap = drv.snapshot_create(&name)?;
        let returned = Instant::now();
        create.push((returned - t).as_secs_f64() * 1e3);
        let lba = rng.below(logical);
        let s0 = drv.stats();
        let data = drv.read_snapshot(snap.id, lba, 1)?;
        first.push(returned.elapsed().as_secs_f64() * 1e6);
        first_media.push(drv.stats().media_write_blocks - s0.media_write_blocks);
        std::hint::black_box(&data);
        let now = AFTER.wrapping_add(r as u8);
        write_list(&mut drv, overwritten, now, "overwrite").map_err(|e| {
            BenchError::Args(format!(
                "overwriting {} blocks of the {mib} MiB volume after a snapshot: {e} \
                 (its spare space holds fewer kept versions: use fewer --view-reads)",
                overwritten.len()
            ))
        })?;
        drv.flush()?;
        drv.settle()?;
        let (mut v, mut l) = (Vec::with_capacity(sample.len()), Vec::new());
        for (i, &lba) in sample.iter().enumerate() {
            let is_over = over_set.contains(&lba);
            let view_first = i % 2 == 0;
            for pass in 0..2 {
                let through_view = (pass == 0) == view_first;
                let t = Instant::now();
                let data = if through_view {
                    drv.read_snapshot(snap.id, lba, 1)?
                } else {
                    drv.read(lba, 1)?
                };
                let us = t.elapsed().as_secs_f64() * 1e6;
                let expect = match (through_view, is_over) {
                    (true, true) => held,
                    (false, true) => now,
                    _ => BEFORE,
                };
                expect_byte(&data, expect, &name, lba)?;
                if through_view {
                    v.push(us);
                } else {
                    l.push(us);
                }
            }
        }
        let (v, l) = (median(v), median(l));
        view_us.push(v);
        live_us.push(l);
        over.push(ratio(v, l));
        held = now;
        drv.snapshot_delete(&name)?;
        drv.settle()?;
        bar.set_position(r as u64 + 1);
    }
    bar.finish_and_clear();
    let activation = Activation::new(
        &create,
        first,
        first_media,
        mib * MIB,
        VIEW_TARGET_MS_PER_GIB,
    );
    Ok(ViewCase {
        data_bytes: mib * MIB,
        device_bytes,
        create_ms: Rounds::of(create),
        activation,
        reads_per_round: sample.len() as u64,
        view_read_us: Rounds::of(view_us),
        live_read_us: Rounds::of(live_us),
        view_over_live: Rounds::of(over),
    })
}

// ----- protection window -----------------------------------------------

/// A backend that publishes its clock whenever it is read (the driver
/// reads it every turn, just before the wall clock), so the wall clock a
/// volume is given can follow the simulator's virtual time.
pub struct Clocked<B> {
    inner: B,
    now: Arc<AtomicU64>,
    /// The wall time (ns since the Unix epoch) at virtual time 0.
    wall_base: u64,
}

impl<B: Backend> Clocked<B> {
    pub fn new(inner: B) -> Clocked<B> {
        let now = Arc::new(AtomicU64::new(inner.clock_ns()));
        Clocked {
            inner,
            now,
            wall_base: 0,
        }
    }

    /// The wall time the volume is told now.
    pub fn wall_ns(&self) -> u64 {
        self.wall_base.saturating_add(self.inner.clock_ns())
    }
}

impl<B: Backend> Backend for Clocked<B> {
    forward_backend!(inner: geometry, zone_info, submit, reap, wait, in_flight);
    fn clock_ns(&self) -> u64 {
        let t = self.inner.clock_ns();
        self.now.store(t, Ordering::Relaxed);
        t
    }
}

/// Gives `drv` a wall clock that starts at the real time now and advances
/// with its simulator's virtual time.
pub fn follow_virtual_time<B: Backend>(drv: &mut Driver<Clocked<B>>) {
    let now = Arc::clone(&drv.backend().now);
    let start = wall_ns_now();
    let base = start.saturating_sub(drv.backend().inner.clock_ns());
    drv.backend_mut().wall_base = base;
    drv.set_wall_clock(move || base.saturating_add(now.load(Ordering::Relaxed)));
}

/// The system's wall time, ns since the Unix epoch.
pub fn wall_ns_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Window points over a stretch of a run, from the FTL's counters.
#[derive(Debug, Default, Serialize, Clone)]
pub struct PointCounts {
    /// Points the core took (`snapshot_creates`: no user snapshot is
    /// taken in these runs).
    pub taken: u64,
    /// Dropped for age, dropped because a write needed room, failed.
    pub expired: u64,
    pub given_way: u64,
    pub failures: u64,
    /// Points held at the end, and the time they span then (s).
    pub held: u64,
    pub span_s: f64,
    /// Versions they keep at the end.
    pub kept_versions: u64,
}

impl PointCounts {
    pub fn between(s0: &FtlStats, s1: &FtlStats, wall_now_ns: u64) -> PointCounts {
        PointCounts {
            taken: s1.snapshot_creates - s0.snapshot_creates,
            expired: s1.window_points_expired - s0.window_points_expired,
            given_way: s1.window_points_given_way - s0.window_points_given_way,
            failures: s1.window_point_failures - s0.window_point_failures,
            held: s1.window_points,
            span_s: if s1.window_oldest_ns == 0 {
                0.0
            } else {
                round(
                    wall_now_ns.saturating_sub(s1.window_oldest_ns) as f64 / 1e9,
                    3,
                )
            },
            kept_versions: s1.snapshot_versions,
        }
    }
}

/// One volume's rounds.
#[derive(Debug, Serialize)]
pub struct WindowRun {
    pub window_secs: Option<u64>,
    /// Host writes per second of virtual time (the simulated media's
    /// speed), and per second of wall time (the CPU's work, the
    /// simulator's timing model included).
    pub host_writes_per_virtual_s: Rounds,
    pub host_writes_per_wall_s: Rounds,
    pub virtual_s: Vec<f64>,
    /// Media blocks ÷ host blocks per round, and the GC copies.
    pub wa: Vec<f64>,
    pub gc_copies: Vec<u64>,
    pub meta_blocks: Vec<u64>,
    /// The window's points in each round.
    pub points: Vec<PointCounts>,
}

#[derive(Debug, Serialize)]
pub struct WindowReport {
    /// How the window's wall clock ran.
    pub clock: &'static str,
    pub device_bytes: u64,
    pub logical_blocks: u64,
    /// Blocks written once, then overwritten at random.
    pub used_blocks: u64,
    /// Random writes before the rounds (not measured), and per round.
    pub warmup_writes: u64,
    pub writes_per_round: u64,
    pub queue_depth: usize,
    pub off: WindowRun,
    pub on: WindowRun,
    /// on ÷ off per round.
    pub on_over_off_virtual: Rounds,
    pub on_over_off_wall: Rounds,
}

struct WindowVolume {
    drv: Driver<Clocked<SimDevice>>,
    addresses: AddressGen,
    virtual_rate: Vec<f64>,
    wall_rate: Vec<f64>,
    virtual_s: Vec<f64>,
    wa: Vec<f64>,
    gc: Vec<u64>,
    meta: Vec<u64>,
    points: Vec<PointCounts>,
    window_secs: Option<u64>,
}

impl WindowVolume {
    fn new(
        args: &TimeArgs,
        ftl: &FtlConfig,
        mode: TagMode,
        seed: u64,
        window_secs: Option<u64>,
    ) -> Result<WindowVolume, BenchError> {
        let sim = sim_of(args.window_device_mib, Some(Timing::default()));
        let dev = Clocked::new(SimDevice::create_memory(sim)?);
        let config = FtlConfig {
            protect_window: window_secs.map(ProtectWindow::Secs),
            ..ftl.clone()
        };
        let mut drv = Driver::format(dev, &format_options(mode, seed, None), config)?;
        follow_virtual_time(&mut drv);
        let used = ((args.window_used * drv.logical_blocks() as f64).round() as u64).max(1);
        Ok(WindowVolume {
            addresses: AddressGen::new(&WorkloadSpec::uniform(), used, seed),
            drv,
            virtual_rate: vec![],
            wall_rate: vec![],
            virtual_s: vec![],
            wa: vec![],
            gc: vec![],
            meta: vec![],
            points: vec![],
            window_secs,
        })
    }

    fn write(&mut self, count: u64, depth: usize, what: &str) -> Result<(), BenchError> {
        let mut pipe = Pipeline::new(depth, self.drv.block_size());
        let lbas = std::iter::repeat_with(|| self.addresses.next_lba());
        write_shown(&mut self.drv, &mut pipe, lbas, count, what)?;
        self.drv.flush()?;
        Ok(())
    }

    fn round(&mut self, count: u64, depth: usize) -> Result<(), BenchError> {
        let what = if self.window_secs.is_some() {
            "window on"
        } else {
            "window off"
        };
        let (s0, v0, t0) = (
            self.drv.stats(),
            self.drv.backend().clock_ns(),
            Instant::now(),
        );
        self.write(count, depth, what)?;
        let (s1, v1) = (self.drv.stats(), self.drv.backend().clock_ns());
        let wall_s = t0.elapsed().as_secs_f64();
        let virtual_s = (v1 - v0) as f64 / 1e9;
        let host = s1.host_write_blocks - s0.host_write_blocks;
        self.virtual_rate.push(ratio(host as f64, virtual_s));
        self.wall_rate.push(ratio(host as f64, wall_s));
        self.virtual_s.push(round(virtual_s, 4));
        let media = s1.media_write_blocks - s0.media_write_blocks;
        self.wa.push(round(ratio(media as f64, host as f64), 4));
        self.gc.push(s1.gc_copy_blocks - s0.gc_copy_blocks);
        self.meta.push(s1.meta_write_blocks - s0.meta_write_blocks);
        let wall_now = self.drv.backend().wall_ns();
        self.points.push(PointCounts::between(&s0, &s1, wall_now));
        Ok(())
    }

    fn done(self) -> WindowRun {
        WindowRun {
            window_secs: self.window_secs,
            host_writes_per_virtual_s: Rounds::of(self.virtual_rate),
            host_writes_per_wall_s: Rounds::of(self.wall_rate),
            virtual_s: self.virtual_s,
            wa: self.wa,
            gc_copies: self.gc,
            meta_blocks: self.meta,
            points: self.points,
        }
    }
}

pub fn window(
    args: &TimeArgs,
    ftl: &FtlConfig,
    mode: TagMode,
    seed: u64,
) -> Result<WindowReport, BenchError> {
    let mut off = WindowVolume::new(args, ftl, mode, seed, None)?;
    let mut on = WindowVolume::new(args, ftl, mode, seed, Some(args.window_secs))?;
    let logical = off.drv.logical_blocks();
    let used = ((args.window_used * logical as f64).round() as u64).max(1);
    let bs = off.drv.block_size() as u64;
    let per_round = args.window_write_mib * MIB / bs;
    let warmup = used / 2;
    let depth = args.window_queue_depth;
    for v in [&mut off, &mut on] {
        let mut pipe = Pipeline::new(depth, v.drv.block_size());
        super::wa::fill(&mut v.drv, &mut pipe, used)?;
        v.write(warmup, depth, "warmup")?;
    }
    for r in 0..args.window_rounds {
        if r % 2 == 0 {
            off.round(per_round, depth)?;
            on.round(per_round, depth)?;
        } else {
            on.round(per_round, depth)?;
            off.round(per_round, depth)?;
        }
    }
    let per_round_ratio =
        |a: &[f64], b: &[f64]| Rounds::of(a.iter().zip(b).map(|(a, b)| ratio(*a, *b)).collect());
    let on_over_off_virtual = per_round_ratio(&on.virtual_rate, &off.virtual_rate);
    let on_over_off_wall = per_round_ratio(&on.wall_rate, &off.wall_rate);
    Ok(WindowReport {
        clock: "simulated: the volume's wall clock starts at the real time at format and advances with the simulator's virtual time",
        device_bytes: args.window_device_mib * MIB,
        logical_blocks: logical,
        used_blocks: used,
        warmup_writes: warmup,
        writes_per_round: per_round,
        queue_depth: depth,
        off: off.done(),
        on: on.done(),
        on_over_off_virtual,
        on_over_off_wall,
    })
}

// ----- text ------------------------------------------------------------

pub fn revert_text(tag: &str, r: &RevertReport, t: &mut Text) {
    t.section(&format!(
        "tags {tag}: revert after {} written since T ({} changed blocks of a {} base, {} device)",
        human_bytes(r.written_since_bytes),
        r.changed_blocks,
        human_bytes(r.base_bytes),
        human_bytes(r.device_bytes)
    ));
    t.row("kept_versions_at_t", r.kept_versions);
    t.row("room_versions", r.room_versions);
    for (what, c) in [("revert", &r.revert), ("undo", &r.undo)] {
        t.row(&format!("{what}_ms"), show(&c.ms));
        t.row(&format!("{what}_blocks"), format!("{:?}", c.revert_blocks));
        t.row(
            &format!("{what}_writes"),
            format!(
                "host {:?} media {:?} (meta {:?} pad {:?} data {:?} gc {:?})",
                c.host_write_blocks,
                c.media_write_blocks,
                c.meta_blocks,
                c.pad_blocks,
                c.data_blocks,
                c.gc_copy_blocks
            ),
        );
    }
    t.row(
        "host_write_blocks_before_after",
        format!(
            "{} {}",
            r.host_write_blocks_before, r.host_write_blocks_after
        ),
    );
    t.row(
        "media_write_blocks_before_after",
        format!(
            "{} {}",
            r.media_write_blocks_before, r.media_write_blocks_after
        ),
    );
    t.row("target_ms", r.target_ms);
}

pub fn diff_text(tag: &str, d: &DiffReport, t: &mut Text) {
    t.section(&format!(
        "tags {tag}: diff of two snapshots of a {} volume, {} blocks rewritten between them",
        human_bytes(d.volume_bytes),
        d.changed_blocks
    ));
    t.row("fill_s", d.fill_s);
    t.row("runs", d.runs);
    t.row("queries", d.queries);
    t.row("kept_versions", d.kept_versions);
    t.row("create_b_ms", d.create_b_ms);
    t.row("first_view_read_us", d.first_view_read_us);
    t.row("between_ms", show(&d.between_ms));
    t.row("since_ms", show(&d.since_ms));
    t.row("target_ms", d.target_ms);
    t.bytes("image_disk_bytes", d.image_disk_bytes);
}

/// The first read of a view or a fork after its create, each round
/// (flattened into the case's JSON).
#[derive(Debug, Serialize)]
pub struct Activation {
    /// From the create's return to the first 4 KiB read done.
    pub first_read_us: Rounds,
    /// Media blocks the FTL wrote while that read ran (the rest of work
    /// the create started: with tags in OOB, the checkpoint the first
    /// snapshot waits for).
    pub first_read_media_blocks: Vec<u64>,
    /// The median first read per GiB of data, the target, and the first ÷
    /// the target.
    pub first_read_ms_per_gib: f64,
    pub target_ms_per_gib: f64,
    pub over_target: f64,
    /// The create and the first read together, per round, per GiB of
    /// data (the create is the part that grows with the data, with tags
    /// in OOB).
    pub create_and_first_read_ms_per_gib: Rounds,
}

impl Activation {
    /// From each round's create (ms), first read (µs) and media blocks
    /// written during it, on a volume with `data_bytes` written.
    pub fn new(
        create_ms: &[f64],
        first_read_us: Vec<f64>,
        first_read_media_blocks: Vec<u64>,
        data_bytes: u64,
        target_ms_per_gib: f64,
    ) -> Activation {
        let gib = data_bytes as f64 / GIB;
        let both = create_ms
            .iter()
            .zip(&first_read_us)
            .map(|(c, f)| (c + f / 1e3) / gib)
            .collect();
        let first = Rounds::of(first_read_us);
        let per_gib = first.median / 1e3 / gib;
        Activation {
            first_read_us: first,
            first_read_media_blocks,
            first_read_ms_per_gib: round(per_gib, 6),
            target_ms_per_gib,
            over_target: round(per_gib / target_ms_per_gib, 6),
            create_and_first_read_ms_per_gib: Rounds::of(both),
        }
    }

    /// Its text rows.
    pub fn text(&self, t: &mut Text) {
        t.row("first_read_us", show(&self.first_read_us));
        t.row(
            "first_read_media_blocks",
            format!("{:?}", self.first_read_media_blocks),
        );
        t.row(
            "first_read_ms_per_gib",
            format!(
                "{} (target {}: {} of it)",
                self.first_read_ms_per_gib, self.target_ms_per_gib, self.over_target
            ),
        );
        t.row(
            "create_and_first_read_ms_per_gib",
            show(&self.create_and_first_read_ms_per_gib),
        );
    }
}

pub fn views_text(tag: &str, cases: &[ViewCase], t: &mut Text) {
    for c in cases {
        t.section(&format!(
            "tags {tag}: views of a volume of {} written",
            human_bytes(c.data_bytes)
        ));
        t.row("create_ms", show(&c.create_ms));
        c.activation.text(t);
        t.row("view_read_us", show(&c.view_read_us));
        t.row("live_read_us", show(&c.live_read_us));
        t.row("view_over_live", show(&c.view_over_live));
    }
}

pub fn window_text(tag: &str, w: &WindowReport, t: &mut Text) {
    t.section(&format!(
        "tags {tag}: 4 KiB random writes, timing on, window {} s against none ({} of {} blocks used, {} per round, depth {})",
        w.on.window_secs.unwrap_or(0), w.used_blocks, w.logical_blocks, w.writes_per_round, w.queue_depth
    ));
    t.row("clock", w.clock);
    for (what, run) in [("off", &w.off), ("on", &w.on)] {
        t.row(
            &format!("{what}_writes_per_virtual_s"),
            show(&run.host_writes_per_virtual_s),
        );
        t.row(
            &format!("{what}_writes_per_wall_s"),
            show(&run.host_writes_per_wall_s),
        );
        t.row(
            &format!("{what}_wa"),
            format!("{:?} (gc {:?})", run.wa, run.gc_copies),
        );
    }
    for (r, p) in w.on.points.iter().enumerate() {
        t.row(
            &format!("on_points_round_{r}"),
            format!(
                "taken {} given way {} expired {} failed {} held {} spanning {} s, {} kept",
                p.taken, p.given_way, p.expired, p.failures, p.held, p.span_s, p.kept_versions
            ),
        );
    }
    t.row("on_over_off_virtual", show(&w.on_over_off_virtual));
    t.row("on_over_off_wall", show(&w.on_over_off_wall));
}
