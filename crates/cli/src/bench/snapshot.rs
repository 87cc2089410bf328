//! `zftl bench snapshot`: snapshots on the in-memory simulator with timing
//! off (CPU cost and media counts, wall clock), in each tag mode asked for:
//!
//! - create and delete latency on two volumes, one after a small and one
//!   after a large amount written (`--small-mib`, `--large-mib`), their
//!   rounds in turn, with the metadata, padding and other media blocks
//!   each create and delete wrote (from the FTL's counters);
//! - create and delete latency and mount time (clean shutdown, then
//!   `Driver::mount`) with one live snapshot and with many (`--many`),
//!   each snapshot keeping a few blocks, and with one snapshot keeping
//!   as many versions as the many keep (the snapshot count alone); memory
//!   per kept block and the room left for kept versions;
//! - write amplification of `bench wa`'s hot/cold workload with 0, 1 and
//!   4 live snapshots taken at intervals (each new one created before the
//!   oldest past the count is deleted; with 0 the same intervals end in a
//!   flush, the barrier a create brings), and the metadata blocks per host
//!   write; and the same workload with a protection window against none,
//!   the simulator's timing on and the window's clock its virtual time;
//! - revert, changed blocks, views and the protection window's cost
//!   (`timetravel.rs`).
//!
//! Every round is printed with the minimum and the median. `--parts`
//! picks the measurements.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use zftl_core::{
    Driver, FormatOptions, FtlConfig, FtlStats, IoError, ProtectWindow, TagPlacement, VictimPolicy,
};
use zftl_sim::{SimConfig, SimDevice};

use super::forks::{self, ForkArgs};
use super::pipe::Pipeline;
use super::range::Rounds;
use super::timetravel::{self, PointCounts, TimeArgs};
use super::workload::{AddressGen, WorkloadKind, WorkloadSpec};
use super::{
    plan, progress, ratio, round, show, thread_cpu_s, wa, write_shown, BenchError, SpaceArgs,
    TagMode,
};
use crate::report::Text;

const MIB: u64 = 1 << 20;
/// Host writes kept in flight by the writers of this bench.
const QUEUE_DEPTH: usize = 8;
/// The simulator's default device is 16 LUNs of 256-page erase blocks of
/// 4 KiB: 16 MiB per erase block on every LUN.
const MIB_PER_BLOCK_ROW: u64 = 16;

/// `zftl bench snapshot`.
#[derive(Debug, Clone, Args)]
pub struct SnapshotArgs {
    /// Size of the simulated device of the latency and many-snapshot
    /// measurements, in MiB (a multiple of 16, at least 256): the default
    /// device's geometry with as many erase blocks per LUN as that takes.
    #[arg(long, value_name = "MIB", default_value_t = 4096)]
    pub device_mib: u64,
    /// Host data written (sequentially, wrapping within the first three
    /// quarters of the volume) before the first set of create/delete rounds.
    #[arg(long, value_name = "MIB", default_value_t = 4)]
    pub small_mib: u64,
    /// Host data written in all before the second set of rounds.
    #[arg(long, value_name = "MIB", default_value_t = 4096)]
    pub large_mib: u64,
    /// Rounds of each latency measurement (create + delete, mount).
    #[arg(long, value_name = "N", default_value_t = 11)]
    pub rounds: usize,
    /// Live snapshots in the many-snapshot case, counting the one each
    /// round creates (at most 4096, the volume's bound).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub many: u64,
    /// Blocks overwritten after each create, so every snapshot keeps
    /// that many replaced versions.
    #[arg(long, value_name = "BLOCKS", default_value_t = 4)]
    pub kept_per_snapshot: u64,
    /// Tag placements to measure: oob, in-band or both.
    #[arg(long, value_enum, default_value = "both")]
    pub tags: Tags,
    /// Write amplification: data zones of the device (`bench wa --zones`).
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub wa_zones: u32,
    /// Write amplification: blocks per zone (`bench wa --zone-blocks`).
    #[arg(long, value_name = "BLOCKS", default_value_t = 256)]
    pub wa_zone_blocks: u32,
    /// Write amplification: over-provisioning (`bench wa --op`).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.28)]
    pub wa_op: f64,
    /// Write amplification: GC victim policy.
    #[arg(long, value_name = "POLICY", default_value = "greedy")]
    pub wa_policy: VictimPolicy,
    /// Write amplification: hot/cold overwrites after the fill, as a
    /// multiple of the used space.
    #[arg(long, value_name = "F", default_value_t = 4.0)]
    pub wa_overwrites: f64,
    /// Write amplification: host writes between two snapshots, as a
    /// fraction of the used space.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.01)]
    pub wa_interval: f64,
    /// Write amplification: the live snapshot counts to compare.
    #[arg(long, value_name = "N,..", value_delimiter = ',', default_values_t = [0, 1, 4])]
    pub wa_live: Vec<usize>,
    /// Write amplification: the share of the logical space the workload
    /// fills and overwrites; the rest stays unmapped, room for the blocks
    /// the snapshots keep (kept blocks count against the logical size).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.9)]
    pub wa_used: f64,
    /// Write amplification: the share of the used space that is hot.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.1)]
    pub hot_fraction: f64,
    /// Write amplification: the share of writes that go to the hot part.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.9)]
    pub hot_access: f64,
    /// Seed of the address stream and of the formats.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// The measurements to run, in this order for each tag mode.
    #[arg(
        long,
        value_enum,
        value_name = "PART,..",
        value_delimiter = ',',
        default_value = "latency,many,wa,revert,diff,views,window,forks"
    )]
    pub parts: Vec<Part>,
    #[command(flatten)]
    pub time: TimeArgs,
    #[command(flatten)]
    pub fork: ForkArgs,
}

/// `--parts`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// Create and delete after much and little written.
    Latency,
    /// Many live snapshots: create, delete, mount, memory.
    Many,
    /// Hot/cold WA with 0, 1, 4 live snapshots.
    Wa,
    /// Revert after data written since a snapshot, and its undo.
    Revert,
    /// Changed blocks between two snapshots of a large volume.
    Diff,
    /// A view's first read after its create, and view against live reads.
    Views,
    /// Random-write throughput and hot/cold WA with a protection window
    /// against none.
    Window,
    /// Writable forks of a snapshot: create after little and much data,
    /// first read, reads and writes through a fork against the live
    /// volume.
    Forks,
}

/// `--tags`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Tags {
    Oob,
    InBand,
    Both,
}

impl Tags {
    fn modes(self) -> Vec<TagMode> {
        match self {
            Tags::Oob => vec![TagMode::Oob],
            Tags::InBand => vec![TagMode::InBand],
            Tags::Both => vec![TagMode::Oob, TagMode::InBand],
        }
    }
}

/// One snapshot create or delete per round: wall time and the media
/// blocks it wrote, by kind.
#[derive(Debug, Serialize)]
pub struct OpCost {
    pub us: Rounds,
    /// Metadata blocks (log blocks with its notes, checkpoint blocks) per round.
    pub meta_blocks: Vec<u64>,
    /// Padding of partial write units per round.
    pub pad_blocks: Vec<u64>,
    /// Every other media block per round (host data it flushed, GC copies).
    pub other_blocks: Vec<u64>,
}

#[derive(Debug, Serialize)]
pub struct CreateDelete {
    pub create: OpCost,
    pub delete: OpCost,
}

#[derive(Debug, Serialize)]
pub struct AfterWritten {
    /// Host bytes written to the volume before these rounds.
    pub written_bytes: u64,
    /// No other snapshot live: each create is the volume's first, each
    /// delete its last.
    pub none_live: CreateDelete,
    /// One other snapshot live (keeping `--kept-per-snapshot` blocks).
    pub one_live: CreateDelete,
}

/// large ÷ small per round (the two volumes' rounds run in turn).
#[derive(Debug, Serialize)]
pub struct Ratios {
    pub create: Rounds,
    pub delete: Rounds,
}

impl Ratios {
    fn of(large: &CreateDelete, small: &CreateDelete) -> Ratios {
        let per_round = |l: &Rounds, s: &Rounds| {
            Rounds::of(
                l.rounds
                    .iter()
                    .zip(&s.rounds)
                    .map(|(l, s)| ratio(*l, *s))
                    .collect(),
            )
        };
        Ratios {
            create: per_round(&large.create.us, &small.create.us),
            delete: per_round(&large.delete.us, &small.delete.us),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub small: AfterWritten,
    pub large: AfterWritten,
    pub none_live_ratio: Ratios,
    pub one_live_ratio: Ratios,
}

#[derive(Debug, Serialize)]
pub struct WithLive {
    /// Live snapshots before each round's create (and at each mount).
    pub live_before: u64,
    /// Replaced versions they keep.
    pub kept_versions: u64,
    pub create: OpCost,
    pub delete: OpCost,
    /// Clean shutdown, then `Driver::mount` timed (ms).
    pub mount_ms: Rounds,
    /// The same mounts' CPU time on this thread (ms): what a shared
    /// machine's other load does not add.
    pub mount_cpu_ms: Rounds,
}

#[derive(Debug, Serialize)]
pub struct SameKept {
    pub live_before: u64,
    pub kept_versions: u64,
    /// Clean shutdown, then `Driver::mount` timed (ms).
    pub mount_ms: Rounds,
    pub mount_cpu_ms: Rounds,
}

/// Per-round ratios of the many-snapshot volume's rounds to the other
/// volumes' rounds run beside them.
#[derive(Debug, Serialize)]
pub struct ManyRatios {
    /// many ÷ one.
    pub create: Rounds,
    pub delete: Rounds,
    pub mount: Rounds,
    pub mount_cpu: Rounds,
    /// many ÷ `one_same_kept`: what the snapshot count alone costs a
    /// mount, the kept versions being equal.
    pub mount_same_kept: Rounds,
    pub mount_same_kept_cpu: Rounds,
}

#[derive(Debug, Serialize)]
pub struct Many {
    pub asked: u64,
    /// Live snapshots reached before the many-snapshot rounds (`asked` −
    /// 1 unless a create was refused).
    pub built: u64,
    /// Why building stopped early, if it did.
    pub refused: Option<String>,
    /// Wall time to build them (the writes between creates included).
    pub build_s: f64,
    pub one: WithLive,
    pub many: Option<WithLive>,
    /// One snapshot keeping as many versions as `many` keeps: mount
    /// rounds on a volume of its own (the same region written).
    pub one_same_kept: Option<SameKept>,
    /// The rounds ran in turn on the volumes (which goes first
    /// alternates); ratios per round. None when `many` was not built.
    pub ratios: Option<ManyRatios>,
    /// (many − one) mount medians ÷ (many − one) kept versions, µs: wall
    /// and CPU time.
    pub mount_us_per_kept_version: f64,
    pub mount_cpu_us_per_kept_version: f64,
    /// `snapshot_memory_bytes ÷ snapshot_versions` with many live, after
    /// the create/delete rounds (the kept versions in the ordered maps
    /// changes use).
    pub memory_bytes_per_kept_block: f64,
    /// The same right after a clean mount: the kept versions still in the
    /// array the checkpoint loaded (built into the maps at the first keep
    /// or sweep).
    pub memory_bytes_per_kept_block_mounted: f64,
    pub snapshot_memory_bytes: u64,
    pub snapshot_versions: u64,
    /// Kept versions the volume has room for still (`snapshot_room_versions`).
    pub room_versions: u64,
    pub map_memory_bytes: u64,
}

/// The protection window of a WA case (`--parts window`).
#[derive(Debug, Serialize)]
pub struct WaWindow {
    pub window_secs: Option<u64>,
    /// The volume's clock advances this much per host write admitted
    /// (`--window-wa-rate`), fill included.
    pub clock_ns_per_host_write: u64,
    /// Simulated time of the overwrites.
    pub simulated_s: f64,
    pub points: PointCounts,
}

#[derive(Debug, Serialize)]
pub struct WaCase {
    pub live: usize,
    pub host_writes: u64,
    pub media_writes: u64,
    pub wa: f64,
    pub gc_copies: u64,
    pub meta_writes: u64,
    pub pad_blocks: u64,
    pub meta_blocks_per_host_write: f64,
    pub creates: u64,
    pub deletes: u64,
    /// Flushes at the intervals (the 0-snapshot case).
    pub interval_flushes: u64,
    /// Most versions the snapshots kept at an interval's end (before its
    /// create).
    pub max_kept_versions: u64,
    /// Least `snapshot_room_versions` seen at an interval's end.
    pub min_room_versions: u64,
    /// Set when a write or create was refused and the case stopped there.
    pub stopped: Option<String>,
    pub elapsed_s: f64,
    /// The window cases only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window: Option<WaWindow>,
}

#[derive(Debug, Serialize)]
pub struct WaReport {
    pub logical_blocks: u64,
    /// The blocks the workload fills and overwrites (`--wa-used`).
    pub used_blocks: u64,
    pub op_actual: f64,
    pub policy: String,
    pub hot_fraction: f64,
    pub hot_access: f64,
    pub overwrites: f64,
    pub interval_blocks: u64,
    pub cases: Vec<WaCase>,
}

/// `--parts window`: the hot/cold workload of the WA cases (no snapshot,
/// nothing at the intervals), without and with a protection window, the
/// volume's clock advancing with the host writes.
#[derive(Debug, Serialize)]
pub struct WaWindowReport {
    pub logical_blocks: u64,
    pub used_blocks: u64,
    pub op_actual: f64,
    pub off: WaCase,
    pub on: WaCase,
    /// on.wa ÷ off.wa.
    pub wa_ratio: f64,
}

#[derive(Debug, Serialize)]
pub struct ModeReport {
    pub tag_mode: &'static str,
    /// The volume of the latency measurements (none when not run).
    pub logical_blocks: Option<u64>,
    pub latency: Option<Latency>,
    pub many: Option<Many>,
    pub wa: Option<WaReport>,
    pub revert: Option<timetravel::RevertReport>,
    pub diff: Option<timetravel::DiffReport>,
    pub views: Option<Vec<timetravel::ViewCase>>,
    pub window: Option<timetravel::WindowReport>,
    pub window_wa: Option<WaWindowReport>,
    pub forks: Option<Vec<forks::ForkCase>>,
}

#[derive(Debug, Serialize)]
pub struct SnapshotReport {
    pub device_bytes: u64,
    pub rounds: usize,
    pub kept_per_snapshot: u64,
    pub modes: Vec<ModeReport>,
}

pub fn run(args: &SnapshotArgs, ftl: &FtlConfig) -> Result<SnapshotReport, BenchError> {
    if args.rounds == 0 {
        return Err(BenchError::Args("--rounds must be at least 1".into()));
    }
    if args.device_mib < 256 || !args.device_mib.is_multiple_of(MIB_PER_BLOCK_ROW) {
        return Err(BenchError::Args(format!(
            "--device-mib {} must be a multiple of 16, at least 256",
            args.device_mib
        )));
    }
    if args.small_mib == 0 || args.large_mib <= args.small_mib {
        return Err(BenchError::Args(
            "--small-mib must be at least 1 and --large-mib above it".into(),
        ));
    }
    if args.many < 2 || args.kept_per_snapshot == 0 {
        return Err(BenchError::Args(
            "--many must be at least 2 and --kept-per-snapshot at least 1".into(),
        ));
    }
    if !(args.wa_interval > 0.0 && args.wa_interval <= 1.0) {
        return Err(BenchError::Args(format!(
            "--wa-interval {} must lie in (0, 1]",
            args.wa_interval
        )));
    }
    if !(args.wa_used > 0.0 && args.wa_used <= 1.0) {
        return Err(BenchError::Args(format!(
            "--wa-used {} must lie in (0, 1]",
            args.wa_used
        )));
    }
    if !(args.wa_overwrites > 0.0 && args.wa_overwrites.is_finite()) {
        return Err(BenchError::Args(format!(
            "--wa-overwrites {} must be a positive number",
            args.wa_overwrites
        )));
    }
    let spec = hotcold(args);
    spec.validate().map_err(BenchError::Args)?;
    args.time.validate()?;
    args.fork.validate()?;
    if args.parts.is_empty() {
        return Err(BenchError::Args("--parts lists no measurement".into()));
    }
    let mut modes = Vec::new();
    for mode in args.tags.modes() {
        let on = |p: Part| args.parts.contains(&p);
        let (logical_blocks, latency) = match on(Part::Latency) {
            true => latency(args, ftl, mode).map(|(l, r)| (Some(l), Some(r)))?,
            false => (None, None),
        };
        let (t, seed) = (&args.time, args.seed);
        modes.push(ModeReport {
            tag_mode: mode.name(),
            logical_blocks,
            latency,
            many: on(Part::Many).then(|| many(args, ftl, mode)).transpose()?,
            wa: on(Part::Wa)
                .then(|| write_amplification(args, ftl, mode))
                .transpose()?,
            revert: on(Part::Revert)
                .then(|| timetravel::revert(t, args.rounds, ftl, mode, seed))
                .transpose()?,
            diff: on(Part::Diff)
                .then(|| timetravel::diff(t, args.rounds, ftl, mode, seed))
                .transpose()?,
            views: on(Part::Views)
                .then(|| timetravel::views(t, args.rounds, ftl, mode, seed))
                .transpose()?,
            window: on(Part::Window)
                .then(|| timetravel::window(t, ftl, mode, seed))
                .transpose()?,
            window_wa: on(Part::Window)
                .then(|| window_wa(args, ftl, mode))
                .transpose()?,
            forks: on(Part::Forks)
                .then(|| forks::forks(&args.fork, args.rounds, ftl, mode, seed))
                .transpose()?,
        });
    }
    Ok(SnapshotReport {
        device_bytes: args.device_mib * MIB,
        rounds: args.rounds,
        kept_per_snapshot: args.kept_per_snapshot,
        modes,
    })
}

fn sim(args: &SnapshotArgs) -> SimConfig {
    SimConfig {
        blocks_per_lun: u32::try_from(args.device_mib / MIB_PER_BLOCK_ROW).unwrap_or(u32::MAX),
        endurance_erases: u32::MAX,
        timing: None,
        ..SimConfig::default()
    }
}

/// A fresh volume of `--device-mib` in memory, timing off, the default
/// logical size.
fn volume(
    args: &SnapshotArgs,
    ftl: &FtlConfig,
    mode: TagMode,
) -> Result<Driver<SimDevice>, BenchError> {
    let dev = SimDevice::create_memory(sim(args))?;
    let opts = FormatOptions {
        tag_placement: match mode {
            TagMode::Oob => TagPlacement::Auto,
            TagMode::InBand => TagPlacement::InBand,
        },
        seed: args.seed,
        ..FormatOptions::default()
    };
    Ok(Driver::format(dev, &opts, ftl.clone())?)
}

/// Writes `count` blocks at `next` and on, wrapping at `end`, `QUEUE_DEPTH`
/// in flight; advances `next`.
fn write_seq(
    drv: &mut Driver<SimDevice>,
    next: &mut u64,
    count: u64,
    end: u64,
) -> Result<(), BenchError> {
    let mut pipe = Pipeline::new(QUEUE_DEPTH, drv.block_size());
    let lbas = std::iter::from_fn(|| {
        let lba = *next % end;
        *next += 1;
        Some(lba)
    });
    write_shown(drv, &mut pipe, lbas, count, "write")
}

/// Media blocks written between two readings, by kind.
fn media(s0: &FtlStats, s1: &FtlStats) -> (u64, u64, u64) {
    let meta = s1.meta_write_blocks - s0.meta_write_blocks;
    let pad = s1.pad_blocks - s0.pad_blocks;
    let all = s1.media_write_blocks - s0.media_write_blocks;
    (meta, pad, all.saturating_sub(meta + pad))
}

#[derive(Default)]
pub(super) struct Collect {
    pub(super) us: Vec<f64>,
    meta: Vec<u64>,
    pad: Vec<u64>,
    other: Vec<u64>,
}

impl Collect {
    /// Runs `op`, timed, with the media blocks it wrote.
    pub(super) fn time(
        &mut self,
        drv: &mut Driver<SimDevice>,
        op: impl FnOnce(&mut Driver<SimDevice>) -> Result<(), IoError>,
    ) -> Result<(), BenchError> {
        let s0 = drv.stats();
        self.timed(drv, &s0, op)
    }

    /// As [`Self::time`] on a volume with nothing to flush or settle:
    /// the counters are read first, then the volume flushed and settled
    /// (writing nothing), then `op` timed. The reading walks the snapshot
    /// list and the shared table, so right before `op` it would leave
    /// `op` to run in caches it filled in proportion to the snapshots
    /// live; the flush and the settle touch what any request does.
    pub(super) fn time_settled(
        &mut self,
        drv: &mut Driver<SimDevice>,
        op: impl FnOnce(&mut Driver<SimDevice>) -> Result<(), IoError>,
    ) -> Result<(), BenchError> {
        let s0 = drv.stats();
        drv.flush()?;
        drv.settle()?;
        self.timed(drv, &s0, op)
    }

    /// Times `op` and records the media blocks written since `s0`.
    fn timed(
        &mut self,
        drv: &mut Driver<SimDevice>,
        s0: &FtlStats,
        op: impl FnOnce(&mut Driver<SimDevice>) -> Result<(), IoError>,
    ) -> Result<(), BenchError> {
        let t = Instant::now();
        op(drv)?;
        self.us.push(t.elapsed().as_secs_f64() * 1e6);
        let (meta, pad, other) = media(s0, &drv.stats());
        self.meta.push(meta);
        self.pad.push(pad);
        self.other.push(other);
        Ok(())
    }

    pub(super) fn done(self) -> OpCost {
        OpCost {
            us: Rounds::of(self.us),
            meta_blocks: self.meta,
            pad_blocks: self.pad,
            other_blocks: self.other,
        }
    }
}

/// One round on a flushed volume: create a snapshot (timed, see
/// [`Collect::time_settled`]), overwrite `--kept-per-snapshot` blocks at
/// `kept_at` and flush (so it keeps them), delete it (timed), settle (its
/// sweep).
fn one_round(
    args: &SnapshotArgs,
    drv: &mut Driver<SimDevice>,
    kept_at: u64,
    r: usize,
    (create, delete): (&mut Collect, &mut Collect),
) -> Result<(), BenchError> {
    drv.flush()?;
    drv.settle()?;
    let name = format!("bench-{r}");
    create.time_settled(drv, |d| d.snapshot_create(&name).map(drop))?;
    let mut next = kept_at;
    write_seq(drv, &mut next, args.kept_per_snapshot, u64::MAX)?;
    drv.flush()?;
    drv.settle()?;
    delete.time_settled(drv, |d| d.snapshot_delete(&name))?;
    drv.settle()?;
    Ok(())
}

/// `--rounds` rounds on the small and the large volume in turn (which goes
/// first alternates), with no other snapshot live and then with one.
fn after_written(
    args: &SnapshotArgs,
    small: &mut Driver<SimDevice>,
    large: &mut Driver<SimDevice>,
) -> Result<[[CreateDelete; 2]; 2], BenchError> {
    let run = |small: &mut Driver<SimDevice>, large: &mut Driver<SimDevice>| {
        let mut c = [
            (Collect::default(), Collect::default()),
            (Collect::default(), Collect::default()),
        ];
        let [cs, cl] = &mut c;
        for r in 0..args.rounds {
            if r % 2 == 0 {
                one_round(args, small, 0, r, (&mut cs.0, &mut cs.1))?;
                one_round(args, large, 0, r, (&mut cl.0, &mut cl.1))?;
            } else {
                one_round(args, large, 0, r, (&mut cl.0, &mut cl.1))?;
                one_round(args, small, 0, r, (&mut cs.0, &mut cs.1))?;
            }
        }
        let [(c0, d0), (c1, d1)] = c;
        Ok::<_, BenchError>([
            CreateDelete {
                create: c0.done(),
                delete: d0.done(),
            },
            CreateDelete {
                create: c1.done(),
                delete: d1.done(),
            },
        ])
    };
    let none = run(small, large)?;
    for drv in [&mut *small, &mut *large] {
        drv.snapshot_create("base")?;
        let mut at = args.kept_per_snapshot;
        write_seq(drv, &mut at, args.kept_per_snapshot, u64::MAX)?;
    }
    let one = run(small, large)?;
    for drv in [small, large] {
        drv.snapshot_delete("base")?;
        drv.settle()?;
    }
    Ok([none, one])
}

fn latency(
    args: &SnapshotArgs,
    ftl: &FtlConfig,
    mode: TagMode,
) -> Result<(u64, Latency), BenchError> {
    let mut small = volume(args, ftl, mode)?;
    let mut large = volume(args, ftl, mode)?;
    let logical = small.logical_blocks();
    // Kept blocks count against the logical size: on a fully mapped
    // volume every overwrite with a snapshot live is refused, so the
    // writes wrap within the first three quarters.
    let span = logical / 4 * 3;
    let bs = small.block_size() as u64;
    let (mut next_small, mut next_large) = (0u64, 0u64);
    write_seq(&mut small, &mut next_small, args.small_mib * MIB / bs, span)?;
    write_seq(&mut large, &mut next_large, args.large_mib * MIB / bs, span)?;
    let [[small_none, large_none], [small_one, large_one]] =
        after_written(args, &mut small, &mut large)?;
    let latency = Latency {
        none_live_ratio: Ratios::of(&large_none, &small_none),
        one_live_ratio: Ratios::of(&large_one, &small_one),
        small: AfterWritten {
            written_bytes: next_small * bs,
            none_live: small_none,
            one_live: small_one,
        },
        large: AfterWritten {
            written_bytes: next_large * bs,
            none_live: large_none,
            one_live: large_one,
        },
    };
    Ok((logical, latency))
}

/// Clean shutdown of the volume in `slot`, then `Driver::mount` timed:
/// (wall ms, this thread's CPU ms).
fn mount_round(
    ftl: &FtlConfig,
    slot: &mut Option<Driver<SimDevice>>,
) -> Result<(f64, f64), BenchError> {
    let dev = slot.take().expect("a mounted volume").shutdown()?;
    let (t, c) = (Instant::now(), thread_cpu_s());
    let drv = Driver::mount(dev, ftl.clone())?;
    let wall = t.elapsed().as_secs_f64() * 1e3;
    let cpu = (thread_cpu_s() - c) * 1e3;
    *slot = Some(drv);
    Ok((wall, cpu))
}

/// A volume of `--device-mib` with `region + --kept-per-snapshot` blocks
/// written and flushed, and snapshot `live-0` taken of it.
fn many_base(
    args: &SnapshotArgs,
    ftl: &FtlConfig,
    mode: TagMode,
    region: u64,
) -> Result<Driver<SimDevice>, BenchError> {
    let mut drv = volume(args, ftl, mode)?;
    let logical = drv.logical_blocks();
    let mut next = 0u64;
    write_seq(
        &mut drv,
        &mut next,
        region + args.kept_per_snapshot,
        logical,
    )?;
    drv.flush()?;
    drv.snapshot_create("live-0")?;
    Ok(drv)
}

/// Snapshots `live-1` on, each followed by `--kept-per-snapshot` blocks
/// overwritten within `region` (from `cursor` on) and a flush, until
/// `--many` − 1 are live or a create or write is refused: (live, why
/// it stopped early).
fn build_many(
    args: &SnapshotArgs,
    drv: &mut Driver<SimDevice>,
    region: u64,
    cursor: &mut u64,
) -> Result<(u64, Option<String>), BenchError> {
    let bar = progress(args.many - 1, "snapshots");
    let mut built = 1u64;
    let mut refused = None;
    while built < args.many - 1 {
        match drv.snapshot_create(&format!("live-{built}")) {
            Ok(_) => built += 1,
            Err(e) => {
                refused = Some(format!(
                    "create {} refused: {e} (room for {} more kept versions)",
                    built + 1,
                    drv.stats().snapshot_room_versions
                ));
                break;
            }
        }
        let kept = write_seq(drv, cursor, args.kept_per_snapshot, region)
            .and_then(|()| drv.flush().map_err(BenchError::from));
        if let Err(e) = kept {
            refused = Some(format!(
                "the writes after create {built} failed: {e} (room for {} more kept versions)",
                drv.stats().snapshot_room_versions
            ));
            break;
        }
        bar.set_position(built);
    }
    bar.finish_and_clear();
    Ok((built, refused))
}

/// Wall and CPU ms of a volume's mount rounds.
#[derive(Default)]
struct MountTimes {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

impl MountTimes {
    fn push(&mut self, (wall, cpu): (f64, f64)) {
        self.wall.push(wall);
        self.cpu.push(cpu);
    }
}

/// `a[i] ÷ b[i]` per round.
fn per_round(a: &[f64], b: &[f64]) -> Rounds {
    Rounds::of(a.iter().zip(b).map(|(a, b)| ratio(*a, *b)).collect())
}

fn many(args: &SnapshotArgs, ftl: &FtlConfig, mode: TagMode) -> Result<Many, BenchError> {
    // The region the snapshots' kept blocks come from, written once; the
    // create/delete rounds overwrite the blocks just past it.
    let probe = volume(args, ftl, mode)?;
    let region = (args.many * args.kept_per_snapshot).min(probe.logical_blocks() / 2);
    drop(probe);
    let rounds_at = region;
    let kept = args.kept_per_snapshot;

    // One snapshot live, keeping `kept` blocks.
    let mut one = many_base(args, ftl, mode, region)?;
    let mut cursor = 0u64;
    write_seq(&mut one, &mut cursor, kept, region)?;
    one.flush()?;

    // `--many` − 1 live, each keeping `kept`.
    let mut many = many_base(args, ftl, mode, region)?;
    let mut cursor = 0u64;
    write_seq(&mut many, &mut cursor, kept, region)?;
    many.flush()?;
    let started = Instant::now();
    let (built, refused) = build_many(args, &mut many, region, &mut cursor)?;
    let build_s = started.elapsed().as_secs_f64();
    let (s_one, s_many) = (one.stats(), many.stats());

    // One live keeping as many versions as the many keep.
    let same = if built > 1 {
        let mut drv = many_base(args, ftl, mode, region)?;
        let mut cursor = 0u64;
        let versions = s_many.snapshot_versions.min(region);
        write_seq(&mut drv, &mut cursor, versions, region)?;
        drv.flush()?;
        Some(drv)
    } else {
        None
    };
    let s_same = same.as_ref().map(Driver::stats);

    // Create/delete rounds on `one` and `many` in turn.
    let mut cd = [
        (Collect::default(), Collect::default()),
        (Collect::default(), Collect::default()),
    ];
    for r in 0..args.rounds {
        let [c_one, c_many] = &mut cd;
        let turn = |drv: &mut Driver<SimDevice>, (c, d): &mut (Collect, Collect)| {
            one_round(args, drv, rounds_at, r, (c, d))
        };
        if built <= 1 {
            turn(&mut one, c_one)?;
        } else if r % 2 == 0 {
            turn(&mut one, c_one)?;
            turn(&mut many, c_many)?;
        } else {
            turn(&mut many, c_many)?;
            turn(&mut one, c_one)?;
        }
    }

    let s_changed = if built > 1 { &many } else { &one }.stats();

    // Mount rounds on the three volumes in turn, the first rotating.
    let mut slots = [Some(one), (built > 1).then_some(many), same];
    let mut times = [
        MountTimes::default(),
        MountTimes::default(),
        MountTimes::default(),
    ];
    for r in 0..args.rounds {
        for k in 0..3 {
            let v = (r + k) % 3;
            if slots[v].is_some() {
                times[v].push(mount_round(ftl, &mut slots[v])?);
            }
        }
    }
    let [slot_one, slot_many, _] = slots;
    let [t_one, t_many, t_same] = times;
    let s = slot_many
        .as_ref()
        .unwrap_or_else(|| slot_one.as_ref().expect("mounted"))
        .stats();

    let [(c1, d1), (cm, dm)] = cd;
    let ratios = (built > 1).then(|| ManyRatios {
        create: per_round(&cm.us, &c1.us),
        delete: per_round(&dm.us, &d1.us),
        mount: per_round(&t_many.wall, &t_one.wall),
        mount_cpu: per_round(&t_many.cpu, &t_one.cpu),
        mount_same_kept: per_round(&t_many.wall, &t_same.wall),
        mount_same_kept_cpu: per_round(&t_many.cpu, &t_same.cpu),
    });
    let one = WithLive {
        live_before: s_one.snapshots,
        kept_versions: s_one.snapshot_versions,
        create: c1.done(),
        delete: d1.done(),
        mount_ms: Rounds::of(t_one.wall),
        mount_cpu_ms: Rounds::of(t_one.cpu),
    };
    let many = (built > 1).then(|| WithLive {
        live_before: s_many.snapshots,
        kept_versions: s_many.snapshot_versions,
        create: cm.done(),
        delete: dm.done(),
        mount_ms: Rounds::of(t_many.wall),
        mount_cpu_ms: Rounds::of(t_many.cpu),
    });
    let same = s_same.map(|s| SameKept {
        live_before: s.snapshots,
        kept_versions: s.snapshot_versions,
        mount_ms: Rounds::of(t_same.wall),
        mount_cpu_ms: Rounds::of(t_same.cpu),
    });
    let per_version = |of: fn(&WithLive) -> &Rounds| {
        many.as_ref().map_or(0.0, |m| {
            let versions = m.kept_versions.saturating_sub(one.kept_versions);
            let ms = of(m).median - of(&one).median;
            round(ratio(ms * 1e3, versions as f64), 4)
        })
    };
    Ok(Many {
        asked: args.many,
        built,
        refused,
        build_s: round(build_s, 3),
        ratios,
        mount_us_per_kept_version: per_version(|w| &w.mount_ms),
        mount_cpu_us_per_kept_version: per_version(|w| &w.mount_cpu_ms),
        memory_bytes_per_kept_block: round(
            ratio(
                s_changed.snapshot_memory_bytes as f64,
                s_changed.snapshot_versions as f64,
            ),
            2,
        ),
        memory_bytes_per_kept_block_mounted: round(
            ratio(s.snapshot_memory_bytes as f64, s.snapshot_versions as f64),
            2,
        ),
        snapshot_memory_bytes: s.snapshot_memory_bytes,
        snapshot_versions: s.snapshot_versions,
        room_versions: s.snapshot_room_versions,
        map_memory_bytes: s.map_memory_bytes,
        one,
        many,
        one_same_kept: same,
    })
}

fn hotcold(args: &SnapshotArgs) -> WorkloadSpec {
    WorkloadSpec {
        kind: WorkloadKind::Hotcold,
        hot_fraction: args.hot_fraction,
        hot_access: args.hot_access,
        ..WorkloadSpec::uniform()
    }
}

/// The WA cases' device, its plan, the used blocks and the interval.
fn wa_space(
    args: &SnapshotArgs,
    mode: TagMode,
) -> Result<(SpaceArgs, super::Plan, u64, u64), BenchError> {
    let space = SpaceArgs {
        zones: args.wa_zones,
        zone_blocks: args.wa_zone_blocks,
        gc_reserve_zones: 1,
        policy: args.wa_policy,
        in_band_tags: mode == TagMode::InBand,
        queue_depth: QUEUE_DEPTH,
        seed: args.seed,
    };
    let plan = plan(&space, args.wa_op)?;
    let used = ((args.wa_used * plan.logical_blocks as f64).round() as u64).max(1);
    let interval = ((args.wa_interval * used as f64).round() as u64).max(1);
    Ok((space, plan, used, interval))
}

fn write_amplification(
    args: &SnapshotArgs,
    ftl: &FtlConfig,
    mode: TagMode,
) -> Result<WaReport, BenchError> {
    let (space, plan, used, interval) = wa_space(args, mode)?;
    let cases = args
        .wa_live
        .iter()
        .map(|&live| {
            let setup = WaSetup {
                live: Some(live),
                window: None,
            };
            wa_case(args, ftl, &space, &plan, (used, interval), setup)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(WaReport {
        logical_blocks: plan.logical_blocks,
        used_blocks: used,
        op_actual: round(plan.op_actual(), 4),
        policy: args.wa_policy.to_string(),
        hot_fraction: args.hot_fraction,
        hot_access: args.hot_access,
        overwrites: args.wa_overwrites,
        interval_blocks: interval,
        cases,
    })
}

/// `--parts window`: the WA workload without and with a protection
/// window.
fn window_wa(
    args: &SnapshotArgs,
    ftl: &FtlConfig,
    mode: TagMode,
) -> Result<WaWindowReport, BenchError> {
    let (space, plan, used, interval) = wa_space(args, mode)?;
    let case = |window| {
        let setup = WaSetup {
            live: None,
            window: Some(window),
        };
        wa_case(args, ftl, &space, &plan, (used, interval), setup)
    };
    let off = case(None)?;
    let on = case(Some(args.time.window_secs))?;
    Ok(WaWindowReport {
        logical_blocks: plan.logical_blocks,
        used_blocks: used,
        op_actual: round(plan.op_actual(), 4),
        wa_ratio: round(ratio(on.wa, off.wa), 4),
        off,
        on,
    })
}

/// What a WA case does beside the workload.
#[derive(Clone, Copy)]
struct WaSetup {
    /// At each interval's end: take a snapshot, keeping at most this many
    /// live (`Some(0)`: a flush instead); `None`: nothing.
    live: Option<usize>,
    /// `Some(window)`: `FtlConfig::protect_window = Secs(window)`, and the
    /// volume's wall clock advancing `--window-wa-rate`'s step per host
    /// write (the simulator's timing stays off, as in the other cases).
    window: Option<Option<u64>>,
}

/// `bench wa`'s steps (format, fill, hot/cold overwrites, flush and
/// settle, counter deltas over the overwrites) with what `setup` says at
/// every `interval` host writes.
fn wa_case(
    args: &SnapshotArgs,
    ftl: &FtlConfig,
    space: &SpaceArgs,
    plan: &super::Plan,
    (used, interval): (u64, u64),
    setup: WaSetup,
) -> Result<WaCase, BenchError> {
    let config = FtlConfig {
        gc_policy: space.policy,
        temperature_streams: true,
        protect_window: setup.window.flatten().map(ProtectWindow::Secs),
        ..ftl.clone()
    };
    let mut drv = wa::format(plan, space, config)?;
    // Host writes submitted: the clock of the window cases.
    let submitted = Arc::new(AtomicU64::new(0));
    let step_ns = (1e9 / args.time.window_wa_rate).round() as u64;
    let wall_at = |writes: u64| timetravel::wall_ns_now().saturating_add(writes * step_ns);
    if setup.window.is_some() {
        let (count, base) = (Arc::clone(&submitted), wall_at(0));
        drv.set_wall_clock(move || base.saturating_add(count.load(Ordering::Relaxed) * step_ns));
    }
    let count = |lba: u64| {
        submitted.fetch_add(1, Ordering::Relaxed);
        lba
    };
    let live = setup.live.unwrap_or(0);
    let label = match (setup.live, setup.window) {
        (Some(live), _) => format!("{live} live"),
        (None, Some(Some(_))) => "window on".to_string(),
        (None, _) => "window off".to_string(),
    };
    let mut pipe = Pipeline::new(space.queue_depth, drv.block_size());
    // `wa::fill`'s fill, counted.
    let bar = progress(used, "fill");
    let mut next = 0u64;
    let mut fill_tick = |d: u64| {
        bar.set_position(d);
        true
    };
    pipe.write(
        &mut drv,
        used,
        &mut || {
            next += 1;
            count(next - 1)
        },
        &mut fill_tick,
    )?;
    drv.flush()?;
    bar.finish_and_clear();
    let mut addresses = AddressGen::new(&hotcold(args), used, space.seed);
    let base = drv.stats();
    let writes_at_base = submitted.load(Ordering::Relaxed);
    let total = (args.wa_overwrites * used as f64).round() as u64;
    let bar = progress(total, &label);
    let started = Instant::now();
    let (mut done, mut flushes, mut taken) = (0u64, 0u64, 0u64);
    let mut names = VecDeque::new();
    let (mut max_kept, mut min_room) = (0u64, u64::MAX);
    let mut stopped = None;
    while done < total {
        let n = interval.min(total - done);
        let mut tick = |d: u64| {
            bar.set_position(done + d);
            true
        };
        if let Err(e) = pipe.write(&mut drv, n, &mut || count(addresses.next_lba()), &mut tick) {
            stopped = Some(format!("a write after {done} host writes failed: {e}"));
            break;
        }
        done += n;
        let s = drv.stats();
        max_kept = max_kept.max(s.snapshot_versions);
        min_room = min_room.min(s.snapshot_room_versions);
        if done == total {
            break;
        }
        let step = if setup.live.is_none() {
            Ok(())
        } else if live == 0 {
            flushes += 1;
            drv.flush()
        } else {
            // The new one first, then the oldest past the count: the
            // volume never drops to no snapshot between two intervals.
            let name = format!("wa-{taken}");
            drv.snapshot_create(&name).and_then(|_| {
                names.push_back(name);
                taken += 1;
                if names.len() > live {
                    let oldest: String = names.pop_front().expect("a live snapshot");
                    drv.snapshot_delete(&oldest)?;
                }
                Ok(())
            })
        };
        if let Err(e) = step {
            stopped = Some(format!("after {done} host writes: {e}"));
            break;
        }
    }
    if stopped.is_none() {
        drv.flush()?;
        drv.settle()?;
    }
    bar.finish_and_clear();
    let elapsed_s = started.elapsed().as_secs_f64();
    let end = drv.stats();
    let host_writes = end.host_write_blocks - base.host_write_blocks;
    let media_writes = end.media_write_blocks - base.media_write_blocks;
    let meta_writes = end.meta_write_blocks - base.meta_write_blocks;
    let window = setup.window.map(|window_secs| {
        let writes = submitted.load(Ordering::Relaxed);
        let now = wall_at(writes);
        WaWindow {
            window_secs,
            clock_ns_per_host_write: step_ns,
            simulated_s: round(((writes - writes_at_base) * step_ns) as f64 / 1e9, 3),
            points: PointCounts::between(&base, &end, now),
        }
    });
    Ok(WaCase {
        live,
        host_writes,
        media_writes,
        wa: round(ratio(media_writes as f64, host_writes as f64), 4),
        gc_copies: end.gc_copy_blocks - base.gc_copy_blocks,
        meta_writes,
        pad_blocks: end.pad_blocks - base.pad_blocks,
        meta_blocks_per_host_write: round(ratio(meta_writes as f64, host_writes as f64), 4),
        creates: end.snapshot_creates - base.snapshot_creates,
        deletes: end.snapshot_deletes - base.snapshot_deletes,
        interval_flushes: flushes,
        max_kept_versions: max_kept,
        min_room_versions: if min_room == u64::MAX { 0 } else { min_room },
        stopped,
        elapsed_s: round(elapsed_s, 3),
        window,
    })
}

fn blocks(c: &OpCost) -> String {
    format!(
        "meta {:?} pad {:?} other {:?}",
        c.meta_blocks, c.pad_blocks, c.other_blocks
    )
}

impl SnapshotReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "snapshots on the simulator, {} rounds; µs and ms are wall time unless said",
            self.rounds
        ));
        for m in &self.modes {
            let tag = m.tag_mode;
            if let Some(l) = &m.latency {
                latency_text(tag, l, &mut t);
            }
            if let Some(many) = &m.many {
                many_text(tag, many, &mut t);
            }
            if let Some(w) = &m.wa {
                t.section(&format!(
                    "tags {tag}: hot/cold WA ({} of {} logical blocks used, OP {}, {}, {} × used, a snapshot every {} writes)",
                    w.used_blocks, w.logical_blocks, w.op_actual, w.policy, w.overwrites, w.interval_blocks
                ));
                for c in &w.cases {
                    wa_case_text(&format!("{}_live", c.live), c, &mut t);
                }
            }
            if let Some(r) = &m.revert {
                timetravel::revert_text(tag, r, &mut t);
            }
            if let Some(d) = &m.diff {
                timetravel::diff_text(tag, d, &mut t);
            }
            if let Some(v) = &m.views {
                timetravel::views_text(tag, v, &mut t);
            }
            if let Some(w) = &m.window {
                timetravel::window_text(tag, w, &mut t);
            }
            if let Some(w) = &m.window_wa {
                t.section(&format!(
                    "tags {tag}: hot/cold WA, window {} s against none ({} of {} logical blocks used, OP {}, the clock {} ns per host write)",
                    w.on.window.as_ref().and_then(|x| x.window_secs).unwrap_or(0),
                    w.used_blocks,
                    w.logical_blocks,
                    w.op_actual,
                    w.on.window.as_ref().map_or(0, |x| x.clock_ns_per_host_write)
                ));
                wa_case_text("off", &w.off, &mut t);
                wa_case_text("on", &w.on, &mut t);
                t.row("wa_ratio", w.wa_ratio);
            }
            if let Some(f) = &m.forks {
                forks::forks_text(tag, f, &mut t);
            }
        }
        t.render()
    }
}

fn latency_text(tag: &str, l: &Latency, t: &mut Text) {
    for (label, a) in [("small", &l.small), ("large", &l.large)] {
        let written = crate::report::human_bytes(a.written_bytes);
        for (live, cd) in [("none", &a.none_live), ("one", &a.one_live)] {
            t.section(&format!(
                "tags {tag}: create and delete after {written} written ({label}), {live} other live"
            ));
            t.row("create_us", show(&cd.create.us));
            t.row("create_blocks", blocks(&cd.create));
            t.row("delete_us", show(&cd.delete.us));
            t.row("delete_blocks", blocks(&cd.delete));
        }
    }
    t.section(&format!("tags {tag}: large ÷ small"));
    for (live, r) in [
        ("none_live", &l.none_live_ratio),
        ("one_live", &l.one_live_ratio),
    ] {
        t.row(&format!("{live}_create_ratio"), show(&r.create));
        t.row(&format!("{live}_delete_ratio"), show(&r.delete));
    }
}

fn many_text(tag: &str, many: &Many, t: &mut Text) {
    let cases = std::iter::once(&many.one).chain(many.many.as_ref());
    for w in cases {
        t.section(&format!(
            "tags {tag}: {} live snapshots ({} kept versions)",
            w.live_before, w.kept_versions
        ));
        t.row("create_us", show(&w.create.us));
        t.row("create_blocks", blocks(&w.create));
        t.row("delete_us", show(&w.delete.us));
        t.row("delete_blocks", blocks(&w.delete));
        t.row("mount_ms", show(&w.mount_ms));
        t.row("mount_cpu_ms", show(&w.mount_cpu_ms));
    }
    if let Some(o) = &many.one_same_kept {
        t.section(&format!(
            "tags {tag}: {} live snapshot keeping as many versions ({})",
            o.live_before, o.kept_versions
        ));
        t.row("mount_ms", show(&o.mount_ms));
        t.row("mount_cpu_ms", show(&o.mount_cpu_ms));
    }
    t.section(&format!("tags {tag}: many ÷ one"));
    t.row("asked", many.asked);
    t.row("built", many.built);
    if let Some(why) = &many.refused {
        t.row("refused", why);
    }
    t.row("build_s", many.build_s);
    if let Some(r) = &many.ratios {
        t.row("create_ratio", show(&r.create));
        t.row("delete_ratio", show(&r.delete));
        t.row("mount_ratio", show(&r.mount));
        t.row("mount_cpu_ratio", show(&r.mount_cpu));
        t.row("mount_same_kept_ratio", show(&r.mount_same_kept));
        t.row("mount_same_kept_cpu_ratio", show(&r.mount_same_kept_cpu));
    }
    t.row(
        "mount_us_per_kept_version",
        format!(
            "{} (cpu {})",
            many.mount_us_per_kept_version, many.mount_cpu_us_per_kept_version
        ),
    );
    t.row(
        "memory_bytes_per_kept_block",
        format!(
            "{} (after a mount {})",
            many.memory_bytes_per_kept_block, many.memory_bytes_per_kept_block_mounted
        ),
    );
    t.row("snapshot_versions", many.snapshot_versions);
    t.row("room_versions", many.room_versions);
}

fn wa_case_text(key: &str, c: &WaCase, t: &mut Text) {
    t.row(
        &format!("{key}_wa"),
        format!(
            "{} (gc {} meta {} pad {} of {} host)",
            c.wa, c.gc_copies, c.meta_writes, c.pad_blocks, c.host_writes
        ),
    );
    t.row(
        &format!("{key}_meta_per_host_write"),
        c.meta_blocks_per_host_write,
    );
    t.row(
        &format!("{key}_snapshots"),
        format!(
            "creates {} deletes {} flushes {} max kept {} min room {}",
            c.creates, c.deletes, c.interval_flushes, c.max_kept_versions, c.min_room_versions
        ),
    );
    if let Some(w) = &c.window {
        let p = &w.points;
        t.row(
            &format!("{key}_window"),
            format!(
                "{} s simulated: points taken {} given way {} expired {} failed {}, {} held spanning {} s, {} kept",
                w.simulated_s, p.taken, p.given_way, p.expired, p.failures, p.held, p.span_s, p.kept_versions
            ),
        );
    }
    if let Some(why) = &c.stopped {
        t.row(&format!("{key}_stopped"), why);
    }
}
