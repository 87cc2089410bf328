//! `zftl bench recovery`: mount time after a power cut on fully mapped
//! volumes, by volume size and tag placement.
//!
//! For each volume size and each tag mode (tags in OOB, tags in band):
//!
//! 1. A simulator image file (sparse) just large enough for the volume at
//!    the default over-provisioning (7 %) and GC reserve, in `--image-dir`
//!    (its free space is checked first; the image is deleted afterwards).
//!    The volume is formatted with exactly `size` bytes.
//! 2. Every logical block is written once, in 512 KiB writes, and flushed:
//!    the volume is fully mapped. The data is zeros, which the simulator
//!    keeps as holes in the image, so a 64 GiB volume costs a few GiB of
//!    disk; mount does the same work whatever the data (the tag scan
//!    checks each block's CRC either way).
//! 3. 4 KiB writes at uniformly random addresses until GC runs and two
//!    checkpoints were taken while it ran: the data blocks between them are
//!    the FTL's checkpoint period (`--checkpoint-interval-blocks`, by default
//!    `FtlConfig`'s, or fewer when the metadata log's room calls a checkpoint first). Then
//!    on until the data blocks since the last checkpoint come within two
//!    sampling steps of that period: the next checkpoint is about due, the
//!    longest roll-forward there can be. Then on in batches of 32 writes
//!    until GC is copying (a GC job under way and copies sent during the
//!    batch), and the power is cut, armed to come after the next 16 device
//!    commands: inside a turn of the driver, with GC's and the host writes'
//!    commands in flight and the write buffer not flushed. A checkpoint
//!    coming in those batches starts the next period, and the search goes
//!    on to its end (4 periods at most).
//! 4. The image as the cut left it is kept aside (a sparse copy). Each of
//!    `--rounds` rounds restores it and opens it; `Driver::mount` is timed
//!    with the wall clock and the thread's CPU time, under a wrapper that
//!    times the calls into the device and splits the mount into its steps
//!    by the zones it reads: superblock; checkpoint and log (the metadata
//!    zones); tag scan (data zones, tags in OOB); rebuild (no device I/O, up
//!    to mount's first write); finishing half-written zones and the mount's
//!    own checkpoint (its writes, to the end). Then one 4 KiB FUA write is
//!    timed: the first durable request after the mount. Every round is
//!    reported; the fastest mount is the headline.
//! 5. Every logical block must still be mapped, after every round.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use zftl_core::backend::ZoneId;
use zftl_core::layout::{Layout, OPEN_DATA_LANES, SUPER_ZONES};
use zftl_core::{
    Backend, Command, Completion, DeviceError, Driver, FormatOptions, FtlConfig, ReplyData,
    Request, SubmitError, TagPlacement, ZoneInfo,
};
use zftl_sim::{Faults, PowerCut, SimConfig, SimDevice};

use super::pipe::Pipeline;
use super::workload::{AddressGen, WorkloadSpec};
use super::{progress, round, thread_cpu_s, BenchError, RecoveryArgs, TagMode};
use crate::report::Text;

const MIB: u64 = 1 << 20;
/// What `zftl bench recovery` aims for: a fully mapped 16 GiB volume.
const TARGET_MOUNT_MS: f64 = 500.0;
const TARGET_VOLUME_BYTES: u64 = 16 << 30;
/// Host writes of the fill: 512 KiB each, this many in flight.
const FILL_REQUEST_BLOCKS: u32 = 128;
const FILL_DEPTH: usize = 8;
/// Random writes in flight after the fill.
const OVERWRITE_DEPTH: usize = 32;
/// Host writes between two looks at the FTL's counters while they run.
const SAMPLE_EVERY: u64 = 128;
/// Batches of [`OVERWRITE_DEPTH`] random writes, once the next checkpoint
/// is about due, in which GC must be found copying.
const GC_SEARCH_BATCHES: u64 = 64;

#[derive(Debug, Serialize)]
pub struct RecoveryReport {
    pub seed: u64,
    pub checkpoint_interval_blocks: u64,
    pub runs: Vec<VolumeResult>,
    /// Per tag mode: mount_ms of the 16 GiB volume against the 500 ms
    /// target, when that size was measured.
    pub target_mount_ms: f64,
    pub mount_ms_16g_oob: Option<f64>,
    pub mount_ms_16g_in_band: Option<f64>,
}

/// Where mount's time went.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MountSteps {
    pub superblock_ms: f64,
    /// Reading the checkpoint and rolling the log forward (metadata zones).
    pub checkpoint_and_log_ms: f64,
    /// Reading data zones written since the checkpoint (tags in OOB).
    pub tag_scan_ms: f64,
    /// Replay and rebuild: from the last read to the first write.
    pub rebuild_ms: f64,
    /// Finishing half-written zones and writing the mount's checkpoint.
    pub finish_and_checkpoint_ms: f64,
    /// Of the whole mount, the time spent inside the device's calls (the
    /// simulator reading and writing its image file).
    pub in_device_ms: f64,
    /// Blocks read before mount's first write: in the metadata zones, and
    /// in data zones (the tag scan; in band, the summaries of zones
    /// written since the checkpoint).
    pub blocks_read_meta: u64,
    pub blocks_read_data: u64,
    /// Blocks read after it (the log's tail; GC starting).
    pub blocks_read_while_writing: u64,
    pub blocks_written: u64,
}

/// One mount of the cut image.
#[derive(Debug, Serialize)]
pub struct MountRound {
    pub mount_ms: f64,
    pub mount_cpu_ms: f64,
    pub mount_steps: MountSteps,
    /// A 4 KiB FUA write right after the mount returned.
    pub first_fua_write_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct VolumeResult {
    pub tags: TagMode,
    pub volume_bytes: u64,
    pub logical_blocks: u64,
    pub device_bytes: u64,
    pub zones: u32,
    pub meta_zones: u32,
    pub format_ms: f64,
    pub fill_s: f64,
    /// Random 4 KiB writes after the fill, up to the cut.
    pub overwrite_host_writes: u64,
    pub overwrite_s: f64,
    pub gc_copy_blocks_before_cut: u64,
    /// Data blocks (host, GC, padding) written since the last checkpoint
    /// when the power was cut, and between the two checkpoints before it
    /// (at most the interval; fewer where the metadata log's room, not the
    /// interval, called the checkpoint).
    pub data_blocks_since_checkpoint: u64,
    pub data_blocks_between_checkpoints: u64,
    /// Device commands in flight at the cut (each landed, tore or was lost).
    pub commands_in_flight_at_cut: u64,
    /// Blocks GC sent to be copied from the moment the cut was armed to
    /// the cut (the last turns included; GC's reads are counted apart).
    pub gc_copy_blocks_at_cut: u64,
    /// Device reads sent from the moment the cut was armed to the cut:
    /// GC's (the load only writes); each ran or was caught by the cut.
    pub gc_reads_at_cut: u64,
    /// The fastest round's whole `Driver::mount`, the first thing done on
    /// the device after the power comes back.
    pub mount_ms: f64,
    /// The fastest round's CPU time of this thread during the mount (the
    /// simulator's included: it runs on the same thread); on a shared
    /// machine the wall time also holds the time other processes had the
    /// CPU.
    pub mount_cpu_ms: f64,
    /// The fastest round's steps.
    pub mount_steps: MountSteps,
    /// Every round, in order.
    pub rounds: Vec<MountRound>,
    pub mapped_blocks: u64,
    /// Disk the sparse image held before it was deleted.
    pub image_disk_bytes: u64,
}

pub fn run(args: &RecoveryArgs, ftl: &FtlConfig) -> Result<RecoveryReport, BenchError> {
    if args.rounds == 0 {
        return Err(BenchError::Args("--rounds must be at least 1".into()));
    }
    if args.sizes_mib.is_empty() {
        return Err(BenchError::Args("--sizes-mib lists no size".into()));
    }
    if args.tags.is_empty() {
        return Err(BenchError::Args("--tags lists no tag mode".into()));
    }
    let dir = args.image_dir.clone().unwrap_or_else(std::env::temp_dir);
    let mut runs = Vec::new();
    for &mib in &args.sizes_mib {
        for &tags in &args.tags {
            runs.push(measure(mib, tags, &dir, args, ftl)?);
        }
    }
    let at_16g = |tags: TagMode| {
        runs.iter()
            .find(|r| r.tags == tags && r.volume_bytes == TARGET_VOLUME_BYTES)
            .map(|r| r.mount_ms)
    };
    Ok(RecoveryReport {
        seed: args.seed,
        checkpoint_interval_blocks: args.checkpoint_interval_blocks,
        target_mount_ms: TARGET_MOUNT_MS,
        mount_ms_16g_oob: at_16g(TagMode::Oob),
        mount_ms_16g_in_band: at_16g(TagMode::InBand),
        runs,
    })
}

fn ms(d: Duration) -> f64 {
    round(d.as_secs_f64() * 1000.0, 3)
}

/// The default device's shape (16 LUNs, 4 MiB zones 4 LUNs wide) with the
/// fewest erase blocks per LUN that hold `logical_blocks` at the default
/// over-provisioning beside the GC reserve, the open zones and the
/// metadata ring; and its layout.
pub(super) fn device_for(
    logical_blocks: u64,
    in_band: bool,
) -> Result<(SimConfig, Layout), BenchError> {
    let base = SimConfig {
        endurance_erases: u32::MAX,
        ..SimConfig::default()
    };
    let reserve = FormatOptions::default().gc_reserve_zones;
    let lun_blocks = u64::from(base.pages_per_block) * u64::from(base.lun_count());
    let mut blocks_per_lun = u32::try_from(logical_blocks.div_ceil(lun_blocks))
        .map_err(|_| BenchError::Args("volume too large".into()))?;
    loop {
        let cfg = SimConfig {
            blocks_per_lun,
            ..base.clone()
        };
        let g = cfg.geometry()?;
        if let Ok(layout) = Layout::plan(&g, Some(logical_blocks), reserve, in_band) {
            let data_zones = u64::from(g.zone_count - layout.first_data_zone());
            let spare = u64::from(reserve + OPEN_DATA_LANES);
            let usable = data_zones.saturating_sub(spare)
                * zftl_core::layout::data_blocks_per_zone(&g, in_band);
            let needed = logical_blocks * (100 + zftl_core::layout::DEFAULT_OP_PERCENT) / 100;
            if usable >= needed {
                return Ok((cfg, layout));
            }
        }
        blocks_per_lun = blocks_per_lun
            .checked_add(1)
            .ok_or_else(|| BenchError::Args("volume too large".into()))?;
    }
}

/// Disk an image of `cfg` may take with zero data: its tables, OOB bytes
/// (tags in OOB), the metadata ring and in-band zone summaries, with room
/// to spare.
pub(super) fn disk_estimate(cfg: &SimConfig, layout: &Layout, in_band: bool) -> u64 {
    let pages = cfg.page_count();
    let zone_bytes = cfg.zone_capacity_blocks() * u64::from(cfg.page_size_bytes);
    let oob = if in_band {
        0
    } else {
        pages * u64::from(cfg.oob_size_bytes)
    };
    let summaries = if in_band {
        let zones = cfg.erase_block_count() / u64::from(cfg.zone_width_luns);
        let g = cfg.geometry().expect("validated");
        zones
            * zftl_core::layout::summary_blocks_per_zone(&g, true)
            * u64::from(cfg.page_size_bytes)
    } else {
        0
    };
    pages + oob + summaries + u64::from(layout.meta_zone_count) * zone_bytes + (256 << 20)
}

/// Free bytes of the file system holding `dir`.
pub(super) fn free_bytes(dir: &Path) -> Result<u64, BenchError> {
    let st = rustix::fs::statvfs(dir).map_err(|e| {
        BenchError::Args(format!(
            "cannot stat the file system of {}: {e}",
            dir.display()
        ))
    })?;
    Ok(st.f_bavail * st.f_frsize)
}

/// Deletes the image when the run ends, however it ends.
pub(super) struct ImageFile(pub(super) PathBuf);

impl Drop for ImageFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn measure(
    size_mib: u64,
    tags: TagMode,
    dir: &Path,
    args: &RecoveryArgs,
    ftl: &FtlConfig,
) -> Result<VolumeResult, BenchError> {
    let (seed, in_band) = (args.seed, tags == TagMode::InBand);
    if args.checkpoint_interval_blocks == 0 {
        return Err(BenchError::Args(
            "--checkpoint-interval-blocks must be at least 1".into(),
        ));
    }
    let config = FtlConfig {
        checkpoint_interval_blocks: args.checkpoint_interval_blocks,
        ..ftl.clone()
    };
    if size_mib == 0 {
        return Err(BenchError::Args("a volume size of 0 MiB".into()));
    }
    let logical_blocks = size_mib * MIB / u64::from(SimConfig::default().page_size_bytes);
    let (cfg, layout) = device_for(logical_blocks, in_band)?;
    let need = disk_estimate(&cfg, &layout, in_band);
    let free = free_bytes(dir)?;
    // Two GiB beside it for whatever else writes there meanwhile.
    if free < need + (2 << 30) {
        return Err(BenchError::Args(format!(
            "{}: {} MiB free, a {size_mib} MiB volume's image needs about {} MiB and 2 GiB \
             are kept spare (use --image-dir)",
            dir.display(),
            free / MIB,
            need / MIB
        )));
    }
    let path = dir.join(format!(
        "zftl-bench-recovery-{}-{size_mib}m-{}.img",
        std::process::id(),
        tags.name()
    ));
    let image = ImageFile(path);
    let _ = std::fs::remove_file(&image.0);
    let device_bytes = cfg.page_count() * u64::from(cfg.page_size_bytes);
    let zones = cfg.geometry()?.zone_count;
    // Each round opens the cut image with the run's shape and no faults.
    let sim_cfg = SimConfig {
        faults: Faults::default(),
        ..cfg.clone()
    };
    let device = ReadCount {
        inner: SimDevice::create_file(&image.0, cfg)?,
        reads: 0,
    };

    let started = Instant::now();
    let options = FormatOptions {
        logical_blocks: Some(logical_blocks),
        tag_placement: if in_band {
            TagPlacement::InBand
        } else {
            TagPlacement::Auto
        },
        seed,
        ..FormatOptions::default()
    };
    let mut drv = Driver::format(device, &options, config.clone())?;
    let format_ms = ms(started.elapsed());

    let started = Instant::now();
    fill_zeros(&mut drv, logical_blocks)?;
    let fill_s = round(started.elapsed().as_secs_f64(), 3);

    let started = Instant::now();
    let cut = overwrite_to_cut(
        &mut drv,
        logical_blocks,
        args.checkpoint_interval_blocks,
        seed,
    )?;
    let overwrite_s = round(started.elapsed().as_secs_f64(), 3);
    let (commands_in_flight_at_cut, gc_copy_blocks_at_cut, gc_reads_at_cut) =
        cut_power(&mut drv, logical_blocks, seed)?;
    // Reopening the image after a cut shows what power_on() would.
    drop(drv.into_backend().inner);
    let image_disk_bytes = allocated_bytes(&image.0);
    let cut_image = ImageFile(image.0.with_extension("cut"));
    copy_sparse(&image.0, &cut_image.0)?;

    let mut rounds = Vec::new();
    let mut mapped_blocks = 0;
    for n in 0..args.rounds {
        if n > 0 {
            copy_sparse(&cut_image.0, &image.0)?;
        }
        let device = SimDevice::open_file_expecting(&image.0, &sim_cfg)?;
        let clocked = Clocked::new(device, &layout);
        let cpu = thread_cpu_s();
        let drv = Driver::mount(clocked, config.clone())?;
        let mount = drv.backend().started.elapsed();
        let mount_cpu_ms = round((thread_cpu_s() - cpu) * 1000.0, 3);
        let mount_steps = drv.backend().steps(mount);
        // The first durable request: a 4 KiB FUA write of block 0's zeros.
        let mut drv = drv;
        let started = Instant::now();
        drv.write_fua(0, &vec![0; drv.block_size()])?;
        let first_fua_write_ms = ms(started.elapsed());
        mapped_blocks = drv.stats().mapped_blocks;
        drop(drv);
        if mapped_blocks != logical_blocks {
            return Err(BenchError::Check(format!(
                "after mount {} of {} {mapped_blocks} blocks are mapped where all \
                 {logical_blocks} were",
                n + 1,
                args.rounds
            )));
        }
        rounds.push(MountRound {
            mount_ms: ms(mount),
            mount_cpu_ms,
            mount_steps,
            first_fua_write_ms,
        });
    }
    drop((image, cut_image));
    let fastest = rounds
        .iter()
        .min_by(|a, b| a.mount_ms.total_cmp(&b.mount_ms))
        .expect("at least one round");
    let (mount_ms, mount_cpu_ms, mount_steps) = (
        fastest.mount_ms,
        fastest.mount_cpu_ms,
        fastest.mount_steps.clone(),
    );
    Ok(VolumeResult {
        tags,
        volume_bytes: size_mib * MIB,
        logical_blocks,
        device_bytes,
        zones,
        meta_zones: layout.meta_zone_count,
        format_ms,
        fill_s,
        overwrite_host_writes: cut.host_writes,
        overwrite_s,
        gc_copy_blocks_before_cut: cut.gc_copies,
        data_blocks_since_checkpoint: cut.data_since_checkpoint,
        data_blocks_between_checkpoints: cut.checkpoint_period,
        commands_in_flight_at_cut,
        gc_copy_blocks_at_cut,
        gc_reads_at_cut,
        mount_ms,
        mount_cpu_ms,
        mount_steps,
        rounds,
        mapped_blocks,
        image_disk_bytes,
    })
}

/// Copies `from` to `to` (replacing it) extent by extent, so the holes
/// of a sparse image stay holes.
fn copy_sparse(from: &Path, to: &Path) -> Result<(), BenchError> {
    use rustix::fs::{copy_file_range, seek, SeekFrom};
    let io = |what: &str, e: std::io::Error| {
        BenchError::Check(format!(
            "copying {} to {}: {what}: {e}",
            from.display(),
            to.display()
        ))
    };
    let src = std::fs::File::open(from).map_err(|e| io("open", e))?;
    let len = src.metadata().map_err(|e| io("stat", e))?.len();
    let dst = std::fs::File::create(to).map_err(|e| io("create", e))?;
    dst.set_len(len).map_err(|e| io("set_len", e))?;
    let mut at = 0u64;
    while at < len {
        let data = match seek(&src, SeekFrom::Data(at)) {
            Ok(d) => d,
            Err(rustix::io::Errno::NXIO) => break, // only a hole is left
            Err(e) => return Err(io("seek data", e.into())),
        };
        let hole = seek(&src, SeekFrom::Hole(data)).map_err(|e| io("seek hole", e.into()))?;
        let (mut off_in, mut off_out) = (data, data);
        while off_in < hole {
            let want = (hole - off_in).min(1 << 30) as usize;
            let n = copy_file_range(&src, Some(&mut off_in), &dst, Some(&mut off_out), want)
                .map_err(|e| io("copy", e.into()))?;
            if n == 0 {
                return Err(io("copy", std::io::ErrorKind::UnexpectedEof.into()));
            }
        }
        at = hole;
    }
    Ok(())
}

/// Disk a file holds (its allocated blocks).
fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).map_or(0, |m| m.blocks() * 512)
}

/// Writes every logical block once with zeros, in large writes, and flushes.
pub(super) fn fill_zeros<B: Backend>(
    drv: &mut Driver<B>,
    logical_blocks: u64,
) -> Result<(), BenchError> {
    let bs = drv.block_size();
    let bar = progress(logical_blocks, "fill");
    let (mut next, mut in_flight, mut id) = (0u64, 0usize, 1u64 << 62);
    while next < logical_blocks || in_flight > 0 {
        while next < logical_blocks && in_flight < FILL_DEPTH {
            let n = u64::from(FILL_REQUEST_BLOCKS).min(logical_blocks - next);
            let request = Request::Write {
                lba: next,
                data: vec![0; n as usize * bs],
                fua: false,
            };
            match drv.try_submit(id, request) {
                Ok(()) => {
                    id += 1;
                    in_flight += 1;
                    next += n;
                }
                Err(zftl_core::IoError::Busy) => break,
                Err(e) => return Err(e.into()),
            }
        }
        drv.turn()?;
        while let Some(reply) = drv.take_reply() {
            match reply.result? {
                ReplyData::Done => in_flight -= 1,
                other => {
                    return Err(BenchError::Check(format!(
                        "a write answered with {other:?}"
                    )))
                }
            }
        }
        bar.set_position(next);
    }
    drv.flush()?;
    bar.finish_and_clear();
    Ok(())
}

/// What the overwrite phase did before the cut.
struct Cut {
    host_writes: u64,
    gc_copies: u64,
    data_since_checkpoint: u64,
    checkpoint_period: u64,
}

/// Checkpoint periods the cut search goes through at most. GC copies in
/// bursts, and the host's writes held in the buffer meanwhile go out in
/// bursts after them (an open zone takes `FtlConfig::zone_max_appends`
/// appends at a time), so one sample can bring the next checkpoint within
/// a batch: it comes before GC is found copying, and the search waits
/// for the one after.
const CUT_TRIES: u32 = 4;

/// Data blocks (host, GC, padding) the FTL has written: what its
/// checkpoint interval counts.
fn data_blocks(s: &zftl_core::FtlStats) -> u64 {
    s.media_write_blocks - s.meta_write_blocks
}

/// The overwrite against the checkpoints, in data blocks written.
#[derive(Default)]
struct CheckpointWatch {
    /// When the last checkpoint was seen (one taken while GC ran, or any
    /// after it).
    mark: Option<u64>,
    /// Between the last two checkpoints seen.
    period: Option<u64>,
    /// The most between two samples.
    step: u64,
}

impl CheckpointWatch {
    fn checkpoint_seen(&mut self, data: u64) {
        if let Some(m) = self.mark {
            self.period = Some(data - m);
        }
        self.mark = Some(data);
    }

    /// The next checkpoint is about due: what was written since the last
    /// comes within two sampling steps of the period.
    fn next_due(&self, data: u64) -> bool {
        match (self.mark, self.period) {
            (Some(m), Some(p)) => data - m + 2 * self.step >= p,
            _ => false,
        }
    }
}

/// Random 4 KiB zero writes until GC runs and two checkpoints were taken
/// while it did (what lies between them is how many data blocks the FTL
/// writes between checkpoints: the interval, or fewer when the metadata log
/// runs short of room first), then on until the data blocks written since
/// the last checkpoint come within two sampling steps of that period: the
/// next checkpoint is about due; then on in short batches until GC is
/// copying. A checkpoint coming in those batches starts the next period:
/// the search goes on to its end, [`CUT_TRIES`] periods at most. Returns
/// with nothing flushed.
fn overwrite_to_cut(
    drv: &mut Driver<ReadCount>,
    logical_blocks: u64,
    interval: u64,
    seed: u64,
) -> Result<Cut, BenchError> {
    let start = drv.stats();
    let mut watch = CheckpointWatch::default();
    let mut addresses = AddressGen::new(&WorkloadSpec::uniform(), logical_blocks, seed);
    let mut pipe =
        Pipeline::with_byte(OVERWRITE_DEPTH, drv.block_size(), 0).tick_every(SAMPLE_EVERY);
    // Writes per approach at most: the first waits for GC to start too.
    let limit = logical_blocks + 8 * interval;
    for _ in 0..CUT_TRIES {
        approach_checkpoint(drv, &mut pipe, &mut addresses, &mut watch, limit, &start)?;
        if find_gc_copying(drv, &mut pipe, &mut addresses)? {
            let end = drv.stats();
            return Ok(Cut {
                host_writes: end.host_write_blocks - start.host_write_blocks,
                gc_copies: end.gc_copy_blocks - start.gc_copy_blocks,
                data_since_checkpoint: data_blocks(&end) - watch.mark.unwrap_or(0),
                checkpoint_period: watch.period.unwrap_or(0),
            });
        }
        watch.checkpoint_seen(data_blocks(&drv.stats()));
    }
    Err(BenchError::Check(format!(
        "in {CUT_TRIES} checkpoint periods the next checkpoint came each time before GC \
         was found copying (the roll-forward would be short)"
    )))
}

/// Writes on, sampling the FTL's counters, until the next checkpoint is
/// about due while GC runs (`watch.next_due`), `limit` writes at most.
fn approach_checkpoint(
    drv: &mut Driver<ReadCount>,
    pipe: &mut Pipeline,
    addresses: &mut AddressGen,
    watch: &mut CheckpointWatch,
    limit: u64,
    start: &zftl_core::FtlStats,
) -> Result<(), BenchError> {
    let mut prev = drv.stats();
    let mut ready = false;
    let bar = progress(limit, "overwrite");
    let done = pipe.write_observed(drv, limit, &mut || addresses.next_lba(), &mut |d, n| {
        bar.set_position(n);
        let s = d.stats();
        let gc_running = s.gc_copy_blocks > prev.gc_copy_blocks;
        watch.step = watch.step.max(data_blocks(&s) - data_blocks(&prev));
        if s.checkpoints > prev.checkpoints && (watch.mark.is_some() || gc_running) {
            watch.checkpoint_seen(data_blocks(&s));
        }
        ready |= gc_running && watch.next_due(data_blocks(&s));
        prev = s;
        !ready
    })?;
    bar.finish_and_clear();
    if !ready {
        let end = drv.stats();
        return Err(BenchError::Check(format!(
            "{done} random writes did not bring GC and the next checkpoint about \
             (from the start GC copied {} blocks, {} checkpoints)",
            end.gc_copy_blocks - start.gc_copy_blocks,
            end.checkpoints - start.checkpoints
        )));
    }
    Ok(())
}

/// Writes on in short batches until GC is copying (a job under way and
/// copies sent during the last batch; the cut is armed right after):
/// true. False when a checkpoint comes first.
fn find_gc_copying(
    drv: &mut Driver<ReadCount>,
    pipe: &mut Pipeline,
    addresses: &mut AddressGen,
) -> Result<bool, BenchError> {
    for _ in 0..GC_SEARCH_BATCHES {
        let before = drv.stats();
        pipe.write(
            drv,
            OVERWRITE_DEPTH as u64,
            &mut || addresses.next_lba(),
            &mut |_| true,
        )?;
        let after = drv.stats();
        if after.checkpoints > before.checkpoints {
            return Ok(false);
        }
        if drv.ftl().activity().gc && after.gc_copy_blocks > before.gc_copy_blocks {
            return Ok(true);
        }
    }
    Err(BenchError::Check(format!(
        "GC copied nothing in {} random writes after the checkpoint came due",
        GC_SEARCH_BATCHES * OVERWRITE_DEPTH as u64
    )))
}

/// Device commands after which the power goes, once the cut is due: a turn
/// of the driver sends GC's reads and appends and the host's appends
/// together, so the cut comes in the middle of them.
const CUT_AFTER_SUBMITS: u64 = 16;

/// Arms a power cut after [`CUT_AFTER_SUBMITS`] more device commands and
/// writes on at random until it comes; returns the commands it caught in
/// flight, and from the arming to the cut the blocks GC sent to be copied
/// and the device reads sent (GC's: the load only writes).
fn cut_power(
    drv: &mut Driver<ReadCount>,
    logical_blocks: u64,
    seed: u64,
) -> Result<(u64, u64, u64), BenchError> {
    let before = drv.backend().inner.stats().commands_cut;
    let reads_before = drv.backend().reads;
    let gc_before = drv.stats().gc_copy_blocks;
    drv.backend_mut().inner.set_faults(Faults {
        seed,
        power_cut: PowerCut::AfterSubmits(CUT_AFTER_SUBMITS),
        ..Faults::default()
    });
    let mut addresses = AddressGen::new(&WorkloadSpec::uniform(), logical_blocks, seed ^ 0xc07);
    let mut pipe = Pipeline::with_byte(OVERWRITE_DEPTH, drv.block_size(), 0);
    let outcome = pipe.write(drv, 1 << 20, &mut || addresses.next_lba(), &mut |_| true);
    if drv.backend().inner.is_powered() {
        return Err(BenchError::Check(format!(
            "the power cut armed after {CUT_AFTER_SUBMITS} commands did not come ({outcome:?})"
        )));
    }
    Ok((
        drv.backend().inner.stats().commands_cut - before,
        drv.stats().gc_copy_blocks - gc_before,
        drv.backend().reads - reads_before,
    ))
}

/// The simulator, counting the reads the FTL sends it.
struct ReadCount {
    inner: SimDevice,
    reads: u64,
}

impl Backend for ReadCount {
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        let read = matches!(command, Command::Read { .. });
        self.inner.submit(tag, command)?;
        self.reads += u64::from(read);
        Ok(())
    }
    forward_backend!(inner: geometry, zone_info, reap, wait, in_flight, clock_ns);
}

/// What a device call touched, for the step split.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    SuperRead,
    MetaRead,
    DataRead,
    Write,
}

/// First and last time (since the mount started) a class was seen, and
/// its blocks.
#[derive(Clone, Copy, Default)]
struct Seen {
    first: Option<Duration>,
    last: Duration,
    blocks: u64,
}

/// A device that times its calls and notes which zones mount touches when.
struct Clocked<B> {
    inner: B,
    meta: std::ops::Range<ZoneId>,
    started: Instant,
    in_calls: Duration,
    seen: [Seen; 4],
    /// Blocks read after mount's first write (the log's tail, GC starting).
    reads_while_writing: u64,
}

impl<B: Backend> Clocked<B> {
    fn new(inner: B, layout: &Layout) -> Clocked<B> {
        Clocked {
            inner,
            meta: layout.meta_first_zone..layout.first_data_zone(),
            started: Instant::now(),
            in_calls: Duration::ZERO,
            seen: [Seen::default(); 4],
            reads_while_writing: 0,
        }
    }

    fn note(&mut self, command: &Command) {
        let (class, blocks) = match command {
            Command::Read {
                zone, block_count, ..
            } => {
                let class = if SUPER_ZONES.contains(zone) {
                    Class::SuperRead
                } else if self.meta.contains(zone) {
                    Class::MetaRead
                } else {
                    Class::DataRead
                };
                (class, u64::from(*block_count))
            }
            Command::Write { data, .. } | Command::Append { data, .. } => (
                Class::Write,
                (data.len() / self.inner.geometry().block_size_bytes as usize) as u64,
            ),
            Command::Finish { .. } | Command::Reset { .. } => (Class::Write, 0),
            _ => return,
        };
        let now = self.started.elapsed();
        // Times of reads count up to mount's first write (what reads come
        // after it belong to the writing step).
        let writing = self.seen[Class::Write as usize].first.is_some();
        if writing && class != Class::Write {
            self.reads_while_writing += blocks;
            return;
        }
        let s = &mut self.seen[class as usize];
        s.first.get_or_insert(now);
        s.last = now;
        s.blocks += blocks;
    }

    /// The step split of a mount that took `total`.
    fn steps(&self, total: Duration) -> MountSteps {
        let [sb, meta, data, write] = self.seen;
        let first_write = write.first.unwrap_or(total);
        let meta_start = meta.first.unwrap_or(first_write);
        let log_end = data.first.unwrap_or(meta.last.max(meta_start));
        let last_read = sb.last.max(meta.last).max(data.last);
        let span = |a: Duration, b: Duration| ms(b.saturating_sub(a));
        MountSteps {
            superblock_ms: span(Duration::ZERO, meta_start),
            checkpoint_and_log_ms: span(meta_start, log_end),
            tag_scan_ms: data.first.map_or(0.0, |f| span(f, data.last)),
            rebuild_ms: span(last_read, first_write),
            finish_and_checkpoint_ms: span(first_write, total),
            in_device_ms: ms(self.in_calls),
            blocks_read_meta: meta.blocks,
            blocks_read_data: data.blocks,
            blocks_read_while_writing: self.reads_while_writing,
            blocks_written: write.blocks,
        }
    }

    fn timed<T>(&mut self, f: impl FnOnce(&mut B) -> T) -> T {
        let t = Instant::now();
        let out = f(&mut self.inner);
        self.in_calls += t.elapsed();
        out
    }
}

impl<B: Backend> Backend for Clocked<B> {
    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        self.timed(|d| d.zone_info(zone))
    }
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        self.note(&command);
        self.timed(|d| d.submit(tag, command))
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        self.timed(|d| d.reap(out, max))
    }
    fn wait(&mut self) -> Result<(), DeviceError> {
        self.timed(|d| d.wait())
    }
    forward_backend!(inner: geometry, in_flight, clock_ns);
}

impl RecoveryReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "recovery: mount after a power cut during GC, {} data blocks after the last \
             checkpoint at most (its interval); fully mapped volumes",
            self.checkpoint_interval_blocks
        ));
        for r in &self.runs {
            t.section(&format!(
                "{} MiB volume, tags {}",
                r.volume_bytes / MIB,
                r.tags.name()
            ));
            t.row("device MiB", r.device_bytes / MIB);
            t.row(
                "zones (metadata)",
                format!("{} ({})", r.zones, r.meta_zones),
            );
            t.row("fill s", r.fill_s);
            t.row("overwrite host writes", r.overwrite_host_writes);
            t.row("gc copies before the cut", r.gc_copy_blocks_before_cut);
            t.row(
                "data blocks since / between checkpoints",
                format!(
                    "{} / {}",
                    r.data_blocks_since_checkpoint, r.data_blocks_between_checkpoints
                ),
            );
            t.row("commands in flight at cut", r.commands_in_flight_at_cut);
            t.row(
                "gc copies / reads sent while the cut was armed",
                format!("{} / {}", r.gc_copy_blocks_at_cut, r.gc_reads_at_cut),
            );
            let each = |f: fn(&MountRound) -> f64| {
                r.rounds
                    .iter()
                    .map(|x| f(x).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            t.row("mount ms, each round", each(|x| x.mount_ms));
            t.row("mount CPU ms, each round", each(|x| x.mount_cpu_ms));
            t.row(
                "first 4 KiB FUA write ms, each round",
                each(|x| x.first_fua_write_ms),
            );
            t.row("mount ms (fastest round)", r.mount_ms);
            t.row("mount CPU ms", r.mount_cpu_ms);
            let s = &r.mount_steps;
            t.row("  superblock ms", s.superblock_ms);
            t.row("  checkpoint and log ms", s.checkpoint_and_log_ms);
            t.row("  tag scan ms", s.tag_scan_ms);
            t.row("  rebuild ms", s.rebuild_ms);
            t.row("  finish and checkpoint ms", s.finish_and_checkpoint_ms);
            t.row("  in device calls ms", s.in_device_ms);
            t.row("  metadata blocks read", s.blocks_read_meta);
            t.row("  data blocks read", s.blocks_read_data);
            t.row("  blocks written", s.blocks_written);
            t.row("mapped blocks", r.mapped_blocks);
            t.row("image disk MiB", r.image_disk_bytes / MIB);
        }
        t.section("target: a fully mapped 16 GiB volume mounts in < 500 ms");
        let show = |v: Option<f64>| v.map_or("not measured".to_string(), |m| format!("{m} ms"));
        t.row("tags oob", show(self.mount_ms_16g_oob));
        t.row("tags in band", show(self.mount_ms_16g_in_band));
        t.render()
    }
}
