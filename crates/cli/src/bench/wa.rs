//! `zftl bench wa`: write amplification and wear of one workload.
//!
//! Steps: size the device for the asked-for data zones and OP → format →
//! fill the logical space sequentially → flush and take the counters as the
//! baseline → overwrite `overwrites × logical` blocks with the workload →
//! flush and settle → report deltas of the FTL's counters.

use std::time::Instant;

use serde::Serialize;
use zftl_core::{Backend, Driver, FormatOptions, FtlConfig, FtlStats, TagPlacement, VictimPolicy};
use zftl_sim::SimDevice;

use super::pipe::Pipeline;
use super::workload::{AddressGen, WorkloadSpec};
use super::{plan, progress, ratio, round, write_shown, BenchError, Plan, WaArgs};
use crate::report::Text;

/// `--compare`: the textbook baseline and the tuned FTL in one run.
#[derive(Debug, Serialize)]
pub struct WaComparison {
    /// Greedy victims, one host stream and one GC stream.
    pub baseline: WaReport,
    /// Cost-benefit victims, temperature-separated streams.
    pub tuned: WaReport,
    /// tuned.wa ÷ baseline.wa.
    pub wa_ratio: f64,
}

impl WaComparison {
    pub fn text(&self) -> String {
        format!(
            "baseline (greedy, single streams):\n{}\ntuned (cost-benefit, temperature streams):\n{}\nWA ratio tuned/baseline: {}\n",
            self.baseline.text(),
            self.tuned.text(),
            self.wa_ratio
        )
    }
}

/// Runs the baseline and the tuned configuration on the same workload.
pub fn compare(args: &WaArgs, ftl: &FtlConfig) -> Result<WaComparison, BenchError> {
    let mut baseline_args = args.clone();
    baseline_args.space.policy = VictimPolicy::Greedy;
    baseline_args.streams = super::Streams::Single;
    let mut tuned_args = args.clone();
    tuned_args.space.policy = VictimPolicy::CostBenefit;
    tuned_args.streams = super::Streams::Temperature;
    let baseline = run(&baseline_args, ftl)?;
    let tuned = run(&tuned_args, ftl)?;
    let wa_ratio = round(ratio(tuned.wa, baseline.wa), 4);
    Ok(WaComparison {
        baseline,
        tuned,
        wa_ratio,
    })
}

#[derive(Debug, Serialize)]
pub struct WaReport {
    pub workload: &'static str,
    /// The OP asked for.
    pub op: f64,
    /// The OP obtained after rounding the logical size down.
    pub op_actual: f64,
    pub policy: String,
    /// "temperature" or "single" (see `--streams`).
    pub streams: super::Streams,
    /// L2P + P2L bytes per mapped block at the end of the run.
    pub map_bytes_per_mapped_block: f64,
    /// Data zones (the GC reserve is among them).
    pub zone_count: u32,
    pub zone_blocks: u64,
    pub device_zones: u32,
    pub meta_zones: u32,
    pub gc_reserve_zones: u32,
    pub logical_blocks: u64,
    pub tag_placement: &'static str,
    pub overwrites: f64,
    pub warmup: f64,
    pub hot_fraction: Option<f64>,
    pub hot_access: Option<f64>,
    pub zipf_theta: Option<f64>,
    pub static_wl_threshold: u32,
    /// The GC settings the run used (`FtlConfig::gc_lanes`, `gc_victims`).
    pub gc_lanes: u32,
    pub gc_victims: u32,
    /// Appends in flight per open data zone (`FtlConfig::zone_max_appends`; 0: no bound).
    pub zone_max_appends: u32,
    pub seed: u64,
    /// Over the overwrite phase only (FtlStats deltas).
    pub host_writes: u64,
    /// Data + GC copies + metadata + padding.
    pub media_writes: u64,
    pub gc_copies: u64,
    /// Of `gc_copies`, blocks static wear leveling moved.
    pub wl_moves: u64,
    pub meta_writes: u64,
    pub pad_blocks: u64,
    pub erases: u64,
    pub checkpoints: u64,
    /// media_writes ÷ host_writes.
    pub wa: f64,
    /// The FTL's per-zone erase counts at the end (whole run, zones in service).
    pub erase_min: u32,
    pub erase_max: u32,
    pub erase_mean: f64,
    pub erase_stddev: f64,
    pub erase_max_over_mean: f64,
    /// The simulator's per-erase-block counts at the end (every block,
    /// superblock and metadata zones included).
    pub device_erase_max: u32,
    pub device_erase_mean: f64,
    pub device_erase_max_over_mean: f64,
    /// Highest device erase count among the superblock and metadata zones,
    /// and among the data zones (one erase block per zone here).
    pub device_erase_max_meta: u32,
    pub device_erase_max_data: u32,
    /// Free zones seen by the FTL during the overwrite phase (sampled every
    /// 1024 host writes): how much of the OP GC keeps in reserve.
    pub free_zones_min: u32,
    pub free_zones_mean: f64,
    pub write_buffer_blocks: u32,
    pub queue_depth: usize,
    pub fill_s: f64,
    /// Wall time of the overwrite phase.
    pub elapsed_s: f64,
    pub host_writes_per_s: f64,
}

pub fn run(args: &WaArgs, ftl: &FtlConfig) -> Result<WaReport, BenchError> {
    let spec = WorkloadSpec {
        kind: args.workload,
        hot_fraction: args.hot_fraction,
        hot_access: args.hot_access,
        zipf_theta: args.zipf_theta,
    };
    spec.validate().map_err(BenchError::Args)?;
    if !(args.overwrites >= 0.0 && args.overwrites.is_finite()) {
        return Err(BenchError::Args(format!(
            "--overwrites {} must be a non-negative number",
            args.overwrites
        )));
    }
    let plan = plan(&args.space, args.op)?;
    let config = FtlConfig {
        gc_policy: args.space.policy,
        static_wl_threshold: args.static_wl_threshold,
        write_buffer_blocks: args.write_buffer_blocks,
        temperature_streams: args.streams == super::Streams::Temperature,
        ..args.gc.apply(ftl.clone())
    };
    let gc = (config.gc_lanes, config.gc_victims, config.zone_max_appends);
    let mut drv = format(&plan, &args.space, config)?;
    let mut pipe = Pipeline::new(args.space.queue_depth, drv.block_size());

    let started = Instant::now();
    fill(&mut drv, &mut pipe, plan.logical_blocks)?;
    let fill_s = started.elapsed().as_secs_f64();
    let mut addresses = AddressGen::new(&spec, plan.logical_blocks, args.space.seed);
    let warmup_writes = (args.warmup.max(0.0) * plan.logical_blocks as f64).round() as u64;
    if warmup_writes > 0 {
        let lbas = std::iter::repeat_with(|| addresses.next_lba());
        write_shown(&mut drv, &mut pipe, lbas, warmup_writes, "warmup")?;
        drv.flush()?;
        drv.settle()?;
    }
    let base = drv.stats();

    let host_writes = (args.overwrites * plan.logical_blocks as f64).round() as u64;
    let bar = progress(host_writes, spec.kind.name());
    let mut free = FreeZones::default();
    let started = Instant::now();
    pipe.write_observed(
        &mut drv,
        host_writes,
        &mut || addresses.next_lba(),
        &mut |drv, done| {
            bar.set_position(done);
            free.sample(drv.stats().free_zones);
            true
        },
    )?;
    drv.flush()?;
    drv.settle()?;
    let elapsed_s = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let end = drv.stats();
    let device_counts = drv.backend().erase_counts();
    let measured = Measured {
        gc,
        base,
        end,
        device_counts,
        free,
        fill_s,
        elapsed_s,
    };
    Ok(report(args, &plan, &measured))
}

/// Formats a fresh in-memory device of `plan`'s shape.
pub fn format(
    plan: &Plan,
    space: &super::SpaceArgs,
    config: FtlConfig,
) -> Result<Driver<SimDevice>, BenchError> {
    let device = SimDevice::create_memory(plan.sim.clone())?;
    format_on(device, plan, space, config)
}

/// Formats `device` (of `plan`'s shape, perhaps wrapped) as `plan` says.
pub fn format_on<B: Backend>(
    device: B,
    plan: &Plan,
    space: &super::SpaceArgs,
    config: FtlConfig,
) -> Result<Driver<B>, BenchError> {
    let options = FormatOptions {
        logical_blocks: Some(plan.logical_blocks),
        tag_placement: if space.in_band_tags {
            TagPlacement::InBand
        } else {
            TagPlacement::Auto
        },
        gc_reserve_zones: plan.gc_reserve_zones,
        seed: space.seed,
    };
    Ok(Driver::format(device, &options, config)?)
}

/// Writes every logical block once, in order, and flushes.
pub fn fill<B: Backend>(
    drv: &mut Driver<B>,
    pipe: &mut Pipeline,
    logical_blocks: u64,
) -> Result<(), BenchError> {
    write_shown(drv, pipe, 0..logical_blocks, logical_blocks, "fill")?;
    drv.flush()?;
    Ok(())
}

/// What the run measured.
struct Measured {
    /// `FtlConfig::gc_lanes`, `gc_victims` and `zone_max_appends` of the run.
    gc: (u32, u32, u32),
    base: FtlStats,
    end: FtlStats,
    device_counts: Vec<u32>,
    free: FreeZones,
    fill_s: f64,
    elapsed_s: f64,
}

/// Free-zone samples.
#[derive(Default)]
struct FreeZones {
    min: u32,
    sum: u64,
    samples: u64,
}

impl FreeZones {
    fn sample(&mut self, free: u32) {
        self.min = if self.samples == 0 {
            free
        } else {
            self.min.min(free)
        };
        self.sum += u64::from(free);
        self.samples += 1;
    }
}

fn report(args: &WaArgs, plan: &Plan, m: &Measured) -> WaReport {
    let (base, end, device_counts, free) = (&m.base, &m.end, &m.device_counts, &m.free);
    let (fill_s, elapsed_s) = (m.fill_s, m.elapsed_s);
    let (gc_lanes, gc_victims, zone_max_appends) = m.gc;
    let host_writes = end.host_write_blocks - base.host_write_blocks;
    let media_writes = end.media_write_blocks - base.media_write_blocks;
    let device_erase_max = device_counts.iter().copied().max().unwrap_or(0);
    let device_erase_mean = if device_counts.is_empty() {
        0.0
    } else {
        device_counts.iter().map(|&c| f64::from(c)).sum::<f64>() / device_counts.len() as f64
    };
    // One erase block per zone, in zone order (zoned_config).
    let fixed = (2 + plan.meta_zones) as usize;
    let max_of = |c: &[u32]| c.iter().copied().max().unwrap_or(0);
    let device_erase_max_meta = max_of(&device_counts[..fixed.min(device_counts.len())]);
    let device_erase_max_data = max_of(&device_counts[fixed.min(device_counts.len())..]);
    let hotcold = args.workload == super::WorkloadKind::Hotcold;
    WaReport {
        workload: args.workload.name(),
        op: args.op,
        op_actual: round(plan.op_actual(), 4),
        policy: args.space.policy.to_string(),
        streams: args.streams,
        map_bytes_per_mapped_block: round(end.map_bytes_per_mapped_block, 3),
        zone_count: plan.data_zones,
        zone_blocks: plan.zone_blocks,
        device_zones: plan.device_zones,
        meta_zones: plan.meta_zones,
        gc_reserve_zones: plan.gc_reserve_zones,
        logical_blocks: plan.logical_blocks,
        tag_placement: if args.space.in_band_tags {
            "in-band"
        } else {
            "auto (oob)"
        },
        overwrites: args.overwrites,
        warmup: args.warmup,
        hot_fraction: hotcold.then_some(args.hot_fraction),
        hot_access: hotcold.then_some(args.hot_access),
        zipf_theta: (args.workload == super::WorkloadKind::Zipf).then_some(args.zipf_theta),
        static_wl_threshold: args.static_wl_threshold,
        gc_lanes,
        gc_victims,
        zone_max_appends,
        seed: args.space.seed,
        host_writes,
        media_writes,
        gc_copies: end.gc_copy_blocks - base.gc_copy_blocks,
        wl_moves: end.wl_move_blocks - base.wl_move_blocks,
        meta_writes: end.meta_write_blocks - base.meta_write_blocks,
        pad_blocks: end.pad_blocks - base.pad_blocks,
        erases: end.erases - base.erases,
        checkpoints: end.checkpoints - base.checkpoints,
        wa: round(ratio(media_writes as f64, host_writes as f64), 4),
        erase_min: end.erase_count_min,
        erase_max: end.erase_count_max,
        erase_mean: round(end.erase_count_mean, 3),
        erase_stddev: round(end.erase_count_stddev, 3),
        erase_max_over_mean: round(
            ratio(f64::from(end.erase_count_max), end.erase_count_mean),
            4,
        ),
        device_erase_max,
        device_erase_mean: round(device_erase_mean, 3),
        device_erase_max_over_mean: round(ratio(f64::from(device_erase_max), device_erase_mean), 4),
        device_erase_max_meta,
        device_erase_max_data,
        free_zones_min: free.min,
        free_zones_mean: round(ratio(free.sum as f64, free.samples as f64), 2),
        write_buffer_blocks: args.write_buffer_blocks,
        queue_depth: args.space.queue_depth,
        fill_s: round(fill_s, 3),
        elapsed_s: round(elapsed_s, 3),
        host_writes_per_s: round(ratio(host_writes as f64, elapsed_s), 0),
    }
}

impl WaReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "write amplification: {} workload, OP {}, {} GC",
            self.workload, self.op, self.policy
        ));
        t.section("device");
        t.row("data zones", self.zone_count);
        t.row("zone blocks", self.zone_blocks);
        t.row("device zones", self.device_zones);
        t.row("metadata zones", self.meta_zones);
        t.row("gc reserve zones", self.gc_reserve_zones);
        t.row("logical blocks", self.logical_blocks);
        t.row("op actual", self.op_actual);
        t.row("tag placement", self.tag_placement);
        t.section("workload");
        t.row("overwrites", self.overwrites);
        t.row("warmup", self.warmup);
        if let (Some(f), Some(a)) = (self.hot_fraction, self.hot_access) {
            t.row("hot fraction", f);
            t.row("hot access", a);
        }
        if let Some(theta) = self.zipf_theta {
            t.row("zipf theta", theta);
        }
        t.row("static wl threshold", self.static_wl_threshold);
        t.row(
            "gc lanes, victims",
            format!("{}, {}", self.gc_lanes, self.gc_victims),
        );
        t.row("zone max appends", self.zone_max_appends);
        t.row("write buffer blocks", self.write_buffer_blocks);
        t.row("queue depth", self.queue_depth);
        t.row("seed", self.seed);
        t.section("overwrite phase");
        t.row("host writes", self.host_writes);
        t.row("media writes", self.media_writes);
        t.row("gc copies", self.gc_copies);
        t.row("of them wear leveling", self.wl_moves);
        t.row("meta writes", self.meta_writes);
        t.row("pad blocks", self.pad_blocks);
        t.row("erases", self.erases);
        t.row("free zones min", self.free_zones_min);
        t.row("free zones mean", self.free_zones_mean);
        t.row("checkpoints", self.checkpoints);
        t.row("WA", self.wa);
        t.row(
            "map bytes per mapped block",
            self.map_bytes_per_mapped_block,
        );
        t.section("wear (ftl zones)");
        t.row("erase min", self.erase_min);
        t.row("erase max", self.erase_max);
        t.row("erase mean", self.erase_mean);
        t.row("erase stddev", self.erase_stddev);
        t.row("erase max/mean", self.erase_max_over_mean);
        t.section("wear (device erase blocks)");
        t.row("erase max", self.device_erase_max);
        t.row("erase mean", self.device_erase_mean);
        t.row("erase max/mean", self.device_erase_max_over_mean);
        t.row("erase max (sb+meta)", self.device_erase_max_meta);
        t.row("erase max (data)", self.device_erase_max_data);
        t.section("time");
        t.row("fill s", self.fill_s);
        t.row("elapsed s", self.elapsed_s);
        t.row("host writes/s", self.host_writes_per_s);
        t.render()
    }
}
