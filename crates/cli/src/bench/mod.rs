//! `zftl bench`: benchmarks. `wa`, `throughput` and `recovery` run the
//! simulator with its timing off, so their numbers are CPU cost and media
//! counts, not a model of NAND speed; `media` runs it with timing on, in
//! virtual time. Methods and figures: docs/bench.md.
//!
//! - `wa`: write amplification and wear of a workload at a given
//!   over-provisioning (OP) and GC policy;
//! - `throughput`: the FTL's host rates against the raw backend's on
//!   identical devices, the raw side sending the FTL's command sizes with
//!   as many blocks in flight;
//! - `recovery`: mount time after a power cut on fully mapped volumes of
//!   several sizes (sparse image files), the cut during GC with the
//!   longest roll-forward;
//! - `media`: LUN utilization and the host rate against the geometry's
//!   limit by queue depth, and latency percentiles idle and during GC;
//! - `nbd`: fio's nbd engine against `zftl serve`, `nbdkit memory` and
//!   `qemu-nbd` (external tools, not the in-process simulator alone);
//! - `zns`: zftl on an NVMe ZNS namespace against fio's io_uring_cmd
//!   engine on the raw namespace (a real device, e.g. in the QEMU guest);
//! - `range`: range operations: durable moves per second, clone against
//!   copy, the first write to a shared block, single- against
//!   double-write journaling, memory per shared block;
//! - `snapshot`: snapshot create/delete latency and metadata blocks, with
//!   much written and with many snapshots live, mount time, memory per
//!   kept block, and write amplification with snapshots live; revert,
//!   changed blocks, views and the protection window's cost;
//! - `nameless`: map memory per GiB stored, page-level against nameless,
//!   the example store's (zftl-kv) puts and gets with its values
//!   nameless against in a logical value area, 4 KiB random writes and the
//!   wear-leveling workloads (the paper's §6.6) nameless against
//!   page-mapped.
//!
//! Each prints one JSON object with `--json`, aligned text otherwise, and
//! shows a progress bar on stderr when stderr is a terminal.

#[macro_use]
mod forward;

mod forks;
mod media;
mod nameless;
mod nameless_rw;
mod nameless_wear;
mod nbd;
mod pipe;
mod plot;
mod range;
pub mod raw;
mod recovery;
pub mod shape;
mod snapshot;
mod throughput;
mod timetravel;
mod wa;
mod workload;
mod zns;

use std::io::{self, IsTerminal};

use clap::{Args, Subcommand};
use serde::Serialize;
use zftl_core::layout::Layout;
use zftl_core::{FtlConfig, GcBudget, IoError, MountError, VictimPolicy};
use zftl_sim::{SimConfig, SimError};

use crate::error::CliError;
use workload::WorkloadKind;

/// `zftl bench ...`
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub bench: BenchCommand,
}

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Write amplification and wear: fill the logical space, then overwrite
    /// it with a workload and count what the FTL wrote to the media.
    Wa(WaArgs),
    /// Host write and random-read rates through the FTL at steady-state GC,
    /// against raw appends of the FTL's own command sizes and raw reads on
    /// an identical device.
    Throughput(ThroughputArgs),
    /// Mount time after a power cut during GC, a checkpoint's interval of
    /// writes after the last checkpoint, on fully mapped volumes of 1, 4,
    /// 16 and 64 GiB (sparse image files), tags in OOB and in band.
    Recovery(RecoveryArgs),
    /// fio's nbd engine (128 KiB sequential writes, 4 KiB random writes
    /// and reads, iodepth 16) against `zftl serve`, `nbdkit memory` and
    /// `qemu-nbd` on tmpfs, all running at once; each job in rounds that
    /// take the servers in turn: IOPS, MiB/s and zftl's ratio to the best
    /// peer, medians over rounds. Needs fio, nbdkit and qemu-nbd (qemu-utils).
    Nbd(NbdArgs),
    /// zftl on an NVMe ZNS namespace (/dev/ngXnY, passthrough) against
    /// fio's io_uring_cmd engine writing the raw namespace, in one run:
    /// sequential 128 KiB and random 4 KiB writes through zftl, sequential
    /// 128 KiB and 4 KiB raw writes; IOPS, MiB/s and the ratios. Destroys
    /// what the namespace holds. Needs fio.
    Zns(zns::ZnsArgs),
    /// Range operations on the in-memory simulator (timing off): durable
    /// single-block moves per second at several depths, a clone against a
    /// copy of 4 KiB to 1 GiB, the first write to a shared block against a
    /// plain overwrite, single- against double-write journaling, and map
    /// memory per mapped and per shared block. Every round is printed.
    Range(range::RangeArgs),
    /// The simulator with its timing model on (virtual time): media
    /// utilization and the host rate against what the geometry allows, by
    /// queue depth, for random and sequential writes and random reads; 4
    /// KiB read and write latency percentiles, idle and during GC.
    Media(media::MediaArgs),
    /// Snapshots on the simulator: create and delete latency and the
    /// media blocks they write after 4 MiB and 4 GiB written, with one and
    /// with 4096 live snapshots, mount time with one and with many, memory
    /// per kept block, and the write amplification of a hot/cold workload
    /// with 0, 1 and 4 live snapshots taken at intervals; a revert after 1
    /// GiB written and its undo, the blocks changed between two snapshots
    /// of a 16 GiB volume, a view's first read and view against live
    /// reads, random writes and WA with a protection window against none,
    /// and writable forks (create, first read, reads and writes through a
    /// fork against the live volume); tags in OOB and in band. Every round
    /// is printed; `--parts` picks the measurements.
    Snapshot(Box<snapshot::SnapshotArgs>),
    /// Nameless writes on the in-memory simulator (timing off): map memory
    /// per GiB stored, page-level (logical blocks) against nameless, the
    /// same data; and the example store (zftl-kv) with its values in the
    /// physical segment against the same store with a logical value area
    /// of its own: puts and gets per second, same keys, values, command
    /// sizes and depth. Every round is printed.
    Nameless(nameless::NamelessArgs),
}

/// Shape of the device and of the FTL's space, shared by `wa` and `throughput`.
#[derive(Debug, Clone, Args)]
pub struct SpaceArgs {
    /// Zones for data (the GC reserve is among them); at least 256. The
    /// superblock and metadata zones format needs come on top.
    #[arg(long, value_name = "N", default_value_t = 256)]
    pub zones: u32,
    /// Blocks (4 KiB pages) per zone.
    #[arg(long, value_name = "BLOCKS", default_value_t = 256)]
    pub zone_blocks: u32,
    /// Zones format keeps free for GC; part of the OP, not on top of it.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub gc_reserve_zones: u32,
    /// GC victim policy: greedy or cost-benefit.
    #[arg(long, value_name = "POLICY", default_value = "greedy")]
    pub policy: VictimPolicy,
    /// Keep block tags in band (metadata notes) even though the simulated
    /// device has 64 OOB bytes per block.
    #[arg(long)]
    pub in_band_tags: bool,
    /// Host requests kept in flight. Past about 32 the host outruns the
    /// (untimed) device and the FTL's write buffer stays full.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub queue_depth: usize,
    /// Seed of the address stream and of the format.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, Clone, Args)]
pub struct WaArgs {
    /// Address distribution of the overwrite phase.
    #[arg(long, value_enum, default_value = "uniform")]
    pub workload: WorkloadKind,
    /// Over-provisioning: (data blocks − logical blocks) ÷ logical blocks.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.28)]
    pub op: f64,
    #[command(flatten)]
    pub space: SpaceArgs,
    /// Host writes after the fill, as a multiple of the logical size.
    #[arg(long, value_name = "F", default_value_t = 4.0)]
    pub overwrites: f64,
    /// Random overwrites (same workload) between the fill and the measured
    /// phase, as a multiple of the logical size: 0 measures from the fill,
    /// more measures closer to steady state.
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub warmup: f64,
    /// hotcold: the share of the logical space that is hot.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.1)]
    pub hot_fraction: f64,
    /// hotcold: the share of writes that go to the hot part.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.9)]
    pub hot_access: f64,
    /// zipf: the exponent.
    #[arg(long, value_name = "THETA", default_value_t = 0.99)]
    pub zipf_theta: f64,
    /// Static wear leveling threshold in erases (0 = off).
    #[arg(long, value_name = "ERASES", default_value_t = 0)]
    pub static_wl_threshold: u32,
    /// Write streams: `temperature` splits host writes and GC output into hot
    /// and cold zones by the age of each block's previous version; `single`
    /// is the textbook layout (one host stream, one GC stream).
    #[arg(long, value_enum, default_value = "temperature")]
    pub streams: Streams,
    /// Run twice in this process: the textbook baseline (greedy, single
    /// streams) and cost-benefit with temperature streams; print both and
    /// the ratio of their WA. `--policy` and `--streams` are ignored.
    #[arg(long)]
    pub compare: bool,
    /// The FTL's write buffer (FtlConfig::write_buffer_blocks). Host writes
    /// are acknowledged once buffered; a full buffer absorbs rewrites.
    #[arg(long, value_name = "BLOCKS", default_value_t = FtlConfig::default().write_buffer_blocks)]
    pub write_buffer_blocks: u32,
    #[command(flatten)]
    pub gc: GcArgs,
}

/// How GC spreads (`FtlConfig::gc_lanes`, `gc_victims`), for the benches
/// that take it.
#[derive(Debug, Clone, Args)]
pub struct GcArgs {
    /// `FtlConfig::gc_lanes`: zones GC writes into at once, on the zone
    /// groups the open zones use least, two per group at most (default:
    /// the configuration's).
    #[arg(long, value_name = "N")]
    pub gc_lanes: Option<u32>,
    /// `FtlConfig::host_stripes`: zones host writes of one temperature go
    /// to at once, on the zone groups the open zones use least (default:
    /// the configuration's).
    #[arg(long, value_name = "N")]
    pub host_stripes: Option<u32>,
    /// `FtlConfig::gc_victims`: victims GC holds at once (default: the
    /// configuration's).
    #[arg(long, value_name = "N")]
    pub gc_victims: Option<u32>,
    /// `FtlConfig::zone_max_appends`: appends in flight per open data zone
    /// at most, 0 for none (default: the configuration's).
    #[arg(long, value_name = "N")]
    pub zone_max_appends: Option<u32>,
    /// `FtlConfig::append_max_blocks`: blocks one host or GC append
    /// carries at most, 0 for the device's largest (default: the
    /// configuration's).
    #[arg(long, value_name = "N")]
    pub append_max_blocks: Option<u32>,
    /// `FtlConfig::urgent_below_reserve`: FUA writes' blocks may take a
    /// zone below the GC reserve, in turn with the host lanes.
    #[arg(long)]
    pub urgent_below_reserve: bool,
    /// `FtlConfig::gc_budget`: device µs (summed over the parallel units)
    /// GC may spend per ms elapsed, its reads, copies and resets costed at
    /// `nameless_cost_us`; 4000 lets GC keep four units busy. It binds
    /// until the free zones fall to the GC reserve (default: the
    /// configuration's, none).
    #[arg(long, value_name = "US")]
    pub gc_budget_us_per_ms: Option<u32>,
    /// The budget's burst: device µs GC may save up while idle.
    #[arg(
        long,
        value_name = "US",
        default_value_t = 10_000,
        requires = "gc_budget_us_per_ms"
    )]
    pub gc_budget_burst_us: u32,
    /// `FtlConfig::gc_read_max_blocks_per_group`: blocks of GC's victim
    /// reads in flight on one zone group's units at most, 0 for no bound
    /// (default: the configuration's).
    #[arg(long, value_name = "N")]
    pub gc_read_max_blocks_per_group: Option<u32>,
    /// `FtlConfig::gc_reset_yields_to_urgent`: a GC victim's reset waits
    /// while FUA writes' appends go to its zone group.
    #[arg(long)]
    pub gc_reset_yields_to_urgent: bool,
}

impl GcArgs {
    /// `ftl` with the settings given on the command line.
    pub fn apply(&self, ftl: FtlConfig) -> FtlConfig {
        let budget = self.gc_budget_us_per_ms.map(|rate| GcBudget {
            device_us_per_ms: rate,
            burst_us: self.gc_budget_burst_us,
        });
        FtlConfig {
            gc_lanes: self.gc_lanes.unwrap_or(ftl.gc_lanes),
            gc_victims: self.gc_victims.unwrap_or(ftl.gc_victims),
            host_stripes: self.host_stripes.unwrap_or(ftl.host_stripes),
            zone_max_appends: self.zone_max_appends.unwrap_or(ftl.zone_max_appends),
            append_max_blocks: self.append_max_blocks.unwrap_or(ftl.append_max_blocks),
            gc_budget: budget.or(ftl.gc_budget),
            urgent_below_reserve: self.urgent_below_reserve || ftl.urgent_below_reserve,
            gc_read_max_blocks_per_group: self
                .gc_read_max_blocks_per_group
                .unwrap_or(ftl.gc_read_max_blocks_per_group),
            gc_reset_yields_to_urgent: self.gc_reset_yields_to_urgent
                || ftl.gc_reset_yields_to_urgent,
            ..ftl
        }
    }
}

#[derive(Debug, Args)]
pub struct ThroughputArgs {
    /// Over-provisioning of the FTL run.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.28)]
    pub op: f64,
    #[command(flatten)]
    pub space: SpaceArgs,
    /// Length of each measured phase, in seconds.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 3.0,
        conflicts_with = "ops"
    )]
    pub seconds: f64,
    /// Blocks moved in each measured phase, instead of --seconds.
    #[arg(long, value_name = "N")]
    pub ops: Option<u64>,
    /// Random overwrites before measuring, as a multiple of the logical size.
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub warmup: f64,
    /// Host reads kept in flight through the FTL (reads do not go through
    /// the write buffer). The raw reads keep as many in flight as the
    /// FTL's device reads had.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub read_queue_depth: usize,
    /// FTL and raw windows alternate in this many rounds (the time split
    /// among them); every round is reported, with the median and the
    /// minimum over rounds, so a change in machine load skews a round, not
    /// the result.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub rounds: u32,
}

#[derive(Debug, Args)]
pub struct NbdArgs {
    /// Length of each measured fio job, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 3)]
    pub seconds: u64,
    /// Rounds of each job against every server, in a rotated order (all
    /// of a job's rounds before the next job); rates and ratios are
    /// medians over rounds.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub rounds: u32,
    /// The region fio works on (filled with two sequential passes before the
    /// jobs), in MiB; every server exports at least this much.
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub size_mib: u64,
}

#[derive(Debug, Args)]
pub struct RecoveryArgs {
    /// Volume sizes in MiB; each is formatted exactly that large, on a
    /// device just large enough for it, and fully mapped.
    #[arg(
        long,
        value_name = "MIB,...",
        value_delimiter = ',',
        default_value = "1024,4096,16384,65536"
    )]
    pub sizes_mib: Vec<u64>,
    /// Tag placements to measure each size in.
    #[arg(
        long,
        value_enum,
        value_name = "MODE,...",
        value_delimiter = ',',
        default_value = "oob,in-band"
    )]
    pub tags: Vec<TagMode>,
    /// Where the sparse image files go (deleted after each volume's run);
    /// default: the system's temporary directory. Its file system needs a
    /// few GiB free for a 64 GiB volume (checked before each run).
    #[arg(long, value_name = "DIR")]
    pub image_dir: Option<std::path::PathBuf>,
    /// Data blocks the FTL writes between checkpoints
    /// (`FtlConfig::checkpoint_interval_blocks`): what bounds the
    /// roll-forward.
    #[arg(long, value_name = "BLOCKS", default_value_t = FtlConfig::default().checkpoint_interval_blocks)]
    pub checkpoint_interval_blocks: u64,
    /// Seed of the random overwrites and of the format.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Mounts of each cut image: each round mounts a fresh copy of the
    /// image as the power cut left it; every round is printed and the
    /// fastest is the headline.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: u32,
}

/// Where block tags go in `bench recovery`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TagMode {
    /// In the device's OOB bytes (the simulator has 64 per block).
    Oob,
    /// In band: notes in the metadata log, summaries at zone ends.
    InBand,
}

impl TagMode {
    pub fn name(self) -> &'static str {
        match self {
            TagMode::Oob => "oob",
            TagMode::InBand => "in-band",
        }
    }
}

/// What can stop a benchmark.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("{0}")]
    Args(String),
    #[error("simulator: {0}")]
    Sim(#[from] SimError),
    #[error("format or mount: {0}")]
    Mount(#[from] MountError),
    #[error("I/O through the FTL: {0}")]
    Io(#[from] IoError),
    #[error("check failed: {0}")]
    Check(String),
    #[error(transparent)]
    Cli(#[from] CliError),
}

/// How writes are laid out in streams (`FtlConfig::temperature_streams`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Streams {
    Temperature,
    Single,
}

/// Runs one benchmark. Output errors go back to `main` as they are; any
/// other failure is printed here, in main's format, and exits with 1
/// (`CliError` has no variant for FTL failures). Every volume a benchmark
/// opens starts from `ftl` (the data CRC implementation `main` timed).
pub fn run(args: &BenchArgs, json: bool, ftl: &FtlConfig) -> Result<(), CliError> {
    let outcome = match &args.bench {
        BenchCommand::Wa(a) if a.compare => {
            wa::compare(a, ftl).and_then(|r| emit(json, &r, || r.text()))
        }
        BenchCommand::Wa(a) => wa::run(a, ftl).and_then(|r| emit(json, &r, || r.text())),
        BenchCommand::Throughput(a) => {
            throughput::run(a, ftl).and_then(|r| emit(json, &r, || r.text()))
        }
        BenchCommand::Recovery(a) => {
            recovery::run(a, ftl).and_then(|r| emit(json, &r, || r.text()))
        }
        BenchCommand::Nbd(a) => nbd::run(a).and_then(|r| emit(json, &r, || r.text())),
        BenchCommand::Zns(a) => zns::run(a, ftl).and_then(|r| emit(json, &r, || r.text())),
        BenchCommand::Range(a) => range::run(a, ftl).and_then(|r| emit(json, &r, || r.text())),
        BenchCommand::Media(a) => media::run(a, ftl).and_then(|r| emit(json, &r, || r.text())),
        BenchCommand::Nameless(a) => {
            nameless::run(a, ftl).and_then(|r| emit(json, &r, || r.text()))
        }
        BenchCommand::Snapshot(a) => {
            snapshot::run(a, ftl).and_then(|r| emit(json, &r, || r.text()))
        }
    };
    match outcome {
        Ok(()) => Ok(()),
        Err(BenchError::Cli(e)) => Err(e),
        Err(e) => {
            eprintln!("zftl: error: bench: {e}");
            std::process::exit(1);
        }
    }
}

/// The CLI's output helper, with the bench's error type.
fn emit<T: Serialize>(
    json: bool,
    value: &T,
    render: impl FnOnce() -> String,
) -> Result<(), BenchError> {
    crate::emit(json, value, render).map_err(BenchError::Cli)
}

/// A progress bar on stderr, hidden unless stderr is a terminal.
/// Writes `count` blocks through `pipe` at the addresses `lbas` gives, in
/// order, with a progress bar named `what`.
pub fn write_shown<B: zftl_core::Backend>(
    drv: &mut zftl_core::Driver<B>,
    pipe: &mut pipe::Pipeline,
    lbas: impl IntoIterator<Item = zftl_core::addr::Lba>,
    count: u64,
    what: &str,
) -> Result<(), BenchError> {
    let bar = progress(count, what);
    let mut lbas = lbas.into_iter();
    pipe.write(
        drv,
        count,
        &mut || lbas.next().expect("as many addresses as writes"),
        &mut |done| {
            bar.set_position(done);
            true
        },
    )?;
    bar.finish_and_clear();
    Ok(())
}

pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    if !io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template(
        "{msg:>12} [{elapsed_precise}] {wide_bar} {pos}/{len} ({per_sec}, eta {eta})",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar
}

/// A device for `wa` and `throughput`: `data_zones` zones for data plus the
/// superblock and metadata zones format takes, and the logical size that
/// gives the asked-for OP.
#[derive(Clone, Debug)]
pub struct Plan {
    pub sim: SimConfig,
    pub device_zones: u32,
    pub meta_zones: u32,
    pub data_zones: u32,
    pub zone_blocks: u64,
    /// data_zones × zone capacity: what OP is measured against.
    pub data_blocks: u64,
    pub logical_blocks: u64,
    pub gc_reserve_zones: u32,
}

impl Plan {
    /// OP actually obtained after rounding the logical size down.
    pub fn op_actual(&self) -> f64 {
        (self.data_blocks - self.logical_blocks) as f64 / self.logical_blocks as f64
    }
}

/// Zones of one erase block (1 LUN wide), all on one LUN; endurance out of
/// the way so long runs never wear the device out; timing off.
pub fn zoned_config(device_zones: u32, zone_blocks: u32) -> SimConfig {
    SimConfig {
        channels: 1,
        luns_per_channel: 1,
        blocks_per_lun: device_zones,
        pages_per_block: zone_blocks,
        zone_width_luns: 1,
        max_append_blocks: zone_blocks.min(128),
        max_transfer_blocks: zone_blocks.min(256),
        queue_depth: 256,
        timing: None,
        endurance_erases: u32::MAX,
        ..SimConfig::default()
    }
}

/// Finds the device size where format's metadata ring and the data zones
/// fit exactly (the ring's size depends on the zone count and the logical
/// size, so iterate to the fixed point).
pub fn plan(space: &SpaceArgs, op: f64) -> Result<Plan, BenchError> {
    if space.zones < 256 {
        return Err(BenchError::Args(format!(
            "--zones {} is below the minimum of 256",
            space.zones
        )));
    }
    if space.zone_blocks == 0 {
        return Err(BenchError::Args("--zone-blocks must be at least 1".into()));
    }
    if !(op > 0.0 && op.is_finite()) {
        return Err(BenchError::Args(format!(
            "--op {op} must be a positive fraction"
        )));
    }
    let zone_blocks = u64::from(space.zone_blocks);
    // OP counts the blocks that can hold data: in band, each zone ends in
    // its summary.
    let summary_blocks = if space.in_band_tags {
        let sim = zoned_config(1, space.zone_blocks);
        let (block_size, write_unit) = (sim.page_size_bytes as usize, sim.program_unit_pages);
        zftl_core::summary::summary_blocks(zone_blocks, block_size, u64::from(write_unit))
    } else {
        0
    };
    if summary_blocks >= zone_blocks {
        return Err(BenchError::Args(format!(
            "--zone-blocks {zone_blocks} leaves no room for data after the zone summary"
        )));
    }
    let data_blocks = u64::from(space.zones) * (zone_blocks - summary_blocks);
    let logical_blocks = (data_blocks as f64 / (1.0 + op)).floor() as u64;
    if logical_blocks == 0 {
        return Err(BenchError::Args(format!(
            "--op {op} leaves no logical space"
        )));
    }
    let mut meta_zones = 2u32;
    for _ in 0..16 {
        let device_zones = 2 + meta_zones + space.zones;
        let sim = zoned_config(device_zones, space.zone_blocks);
        let geometry = sim.geometry()?;
        let layout = Layout::plan(
            &geometry,
            Some(logical_blocks),
            space.gc_reserve_zones,
            space.in_band_tags,
        )?;
        if layout.meta_zone_count == meta_zones {
            return Ok(Plan {
                sim,
                device_zones,
                meta_zones,
                data_zones: space.zones,
                zone_blocks,
                data_blocks,
                logical_blocks,
                gc_reserve_zones: space.gc_reserve_zones,
            });
        }
        meta_zones = layout.meta_zone_count;
    }
    Err(BenchError::Args(
        "cannot size the metadata ring (no fixed point)".into(),
    ))
}

/// Rounds for printing: `digits` after the point.
/// The first job of a fio run's `--output-format=json` output, checked:
/// fio exited 0, printed a JSON object (maybe after notes) and the job
/// reports no error. `fail` turns a reason into the caller's error.
pub fn fio_job(
    out: &std::process::Output,
    fail: impl Fn(String) -> BenchError,
) -> Result<serde_json::Value, BenchError> {
    if !out.status.success() {
        return Err(fail(format!("exit status {}", out.status)));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let start = stdout
        .find('{')
        .ok_or_else(|| fail("no JSON in its output".into()))?;
    let mut v: serde_json::Value = serde_json::from_str(&stdout[start..])
        .map_err(|e| fail(format!("cannot parse its JSON: {e}")))?;
    let job = v["jobs"][0].take();
    let err = job["error"].as_i64().unwrap_or(0);
    if err != 0 {
        return Err(fail(format!("job error {err}")));
    }
    Ok(job)
}

/// Seconds of CPU this thread has used.
pub fn thread_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// A measurement's rounds as the text reports print them: the minimum,
/// the median and every round.
pub fn show(r: &range::Rounds) -> String {
    format!("min {} median {} rounds {:?}", r.min, r.median, r.rounds)
}

pub fn round(x: f64, digits: i32) -> f64 {
    let p = 10f64.powi(digits);
    (x * p).round() / p
}

/// The median of `xs` (the mean of the middle two for an even count), 0 for none.
pub fn median(xs: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = xs.into_iter().collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// `a ÷ b`, 0 when `b` is 0.
pub fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}
