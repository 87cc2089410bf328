//! `zftl bench throughput`: the FTL's write and random-read rates against
//! the raw backend's, on identical in-memory devices (timing off, so the
//! rates are CPU cost: the simulator's and the FTL's), in one run.
//!
//! The FTL at OP `--op` is filled, then overwritten at random for a warmup
//! so GC runs at steady state. Then rounds alternate four windows:
//!
//! 1. FTL writes: 4 KiB host writes at uniformly random addresses,
//!    `--queue-depth` in flight, ending with a flush. A recorder under the
//!    FTL notes every device write command (its blocks and the buffers
//!    they are in) and the write blocks in flight each time the device is
//!    polled (`shape.rs`).
//! 2. Raw writes: zone appends of the sizes and buffer counts the FTL sent
//!    in window 1, replayed in order, with as many blocks in flight, over a
//!    ring of zones reset as they come round (`raw::ShapedWriter`). Before
//!    the rounds the raw device is written through once with the warmup's
//!    shape, as the FTL's device was by its fill and warmup: the first
//!    write to each page of the simulator's memory pays a page fault (a
//!    huge page's, with compaction, on media of 256 MiB or more), which
//!    costs many times the write (`raw_first_pass_blocks_per_s`).
//! 3. FTL reads: 4 KiB host reads at random addresses, `--read-queue-depth`
//!    in flight.
//! 4. Raw reads: 4 KiB reads at random addresses of a full device, as many
//!    in flight as the FTL's reads had when it polled the device.
//!
//! The headline, `write_efficiency`, is the FTL's host-visible write rate
//! at its write amplification against the raw rate: host blocks per second
//! × WA (the device's programs per host block in the window: host data, GC
//! copies, notes, padding) ÷ raw blocks per second. GC's copies count as
//! the programs the device does; the reads GC does first are the FTL's
//! cost and count nowhere. 1.0 means the FTL keeps the device as busy
//! programming as a raw writer sending the same commands would;
//! `host_write_ratio` (host blocks per second ÷ raw) is what a user gets.
//! `read_ratio` = FTL reads per second ÷ raw reads per second.
//!
//! Every round is reported with the median and the minimum over rounds. The
//! ratios are wall-clock; on a shared machine a window can lose the CPU to
//! other processes, so each is also given on this thread's CPU time
//! (`*_cpu`), which being descheduled does not count in (cache and memory
//! contention still does).

use std::time::Instant;

use serde::Serialize;
use zftl_core::{Backend, Driver, FtlConfig};
use zftl_sim::rng::Rng;
use zftl_sim::{SimDevice, SimStats};

use super::pipe::Pipeline;
use super::raw::{fill_device, random_reads, ShapedWriter};
use super::shape::{Recorder, Shape};
use super::wa::{fill, format_on};
use super::workload::{AddressGen, WorkloadSpec};
use super::{
    median, plan, progress, ratio, round, thread_cpu_s, write_shown, BenchError, ThroughputArgs,
};
use crate::report::Text;

/// Blocks per raw batch between clock checks.
const RAW_BATCH: u64 = 4096;

/// The device commands of one window, as the report gives them.
#[derive(Debug, Serialize)]
pub struct ShapeReport {
    pub write_commands: u64,
    pub blocks_per_write: f64,
    pub buffers_per_write: f64,
    /// Write blocks in flight when the device was polled (with timing off:
    /// the blocks sent per batch).
    pub write_blocks_in_flight: f64,
    pub read_commands: u64,
    pub reads_in_flight: f64,
    pub zone_resets: u64,
}

impl ShapeReport {
    fn of(s: &Shape) -> ShapeReport {
        ShapeReport {
            write_commands: s.write_commands,
            blocks_per_write: round(s.blocks_per_write(), 2),
            buffers_per_write: round(s.parts_per_write(), 2),
            write_blocks_in_flight: round(s.write_blocks_in_flight(), 1),
            read_commands: s.read_commands,
            reads_in_flight: round(s.reads_in_flight(), 1),
            zone_resets: s.resets,
        }
    }
}

/// One round's windows.
#[derive(Debug, Serialize)]
pub struct RoundReport {
    pub ftl_host_writes_per_s: f64,
    /// The device's programs ÷ host writes in the window.
    pub ftl_write_wa: f64,
    pub ftl_gc_reads: u64,
    pub raw_write_blocks_per_s: f64,
    /// ftl_host_writes_per_s × ftl_write_wa ÷ raw_write_blocks_per_s.
    pub write_efficiency: f64,
    /// ftl_host_writes_per_s ÷ raw_write_blocks_per_s.
    pub host_write_ratio: f64,
    pub ftl_host_reads_per_s: f64,
    pub raw_read_blocks_per_s: f64,
    pub read_ratio: f64,
    /// The same ratios on this thread's CPU time.
    pub write_efficiency_cpu: f64,
    pub read_ratio_cpu: f64,
    /// What the FTL sent the device in its write window, and what the raw
    /// writer sent replaying it.
    pub ftl_write_shape: ShapeReport,
    pub raw_write_shape: ShapeReport,
    /// The same for the read windows (the raw reads keep as many in
    /// flight as the FTL's did).
    pub ftl_read_shape: ShapeReport,
    pub raw_read_shape: ShapeReport,
}

/// Median and minimum over rounds.
#[derive(Debug, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
}

impl Spread {
    fn of(xs: impl Iterator<Item = f64> + Clone) -> Spread {
        Spread {
            median: round(median(xs.clone()), 4),
            min: round(xs.fold(f64::INFINITY, f64::min), 4),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ThroughputReport {
    pub op: f64,
    pub policy: String,
    pub zone_count: u32,
    pub zone_blocks: u64,
    pub device_zones: u32,
    pub logical_blocks: u64,
    /// Host writes in flight through the FTL.
    pub queue_depth: usize,
    /// Host reads in flight through the FTL, and raw reads in flight.
    pub read_queue_depth: usize,
    pub seed: u64,
    pub warmup_host_writes: u64,
    pub warmup_s: f64,
    /// What the FTL sent the device during the warmup (the raw device's
    /// first pass replays it).
    pub warmup_shape: ShapeReport,
    /// The raw write device's first pass over every block, before the
    /// rounds (fresh memory: page faults), for comparison with
    /// `raw_write_blocks_per_s`.
    pub raw_first_pass_blocks_per_s: f64,
    pub rounds: u32,
    /// The headline and the other ratios: median and minimum over rounds.
    pub write_efficiency: f64,
    pub write_efficiency_min: f64,
    pub host_write_ratio: f64,
    pub host_write_ratio_min: f64,
    pub read_ratio: f64,
    pub read_ratio_min: f64,
    pub write_efficiency_cpu: Spread,
    pub read_ratio_cpu: Spread,
    pub per_round: Vec<RoundReport>,
    // Totals over rounds.
    pub raw_write_blocks: u64,
    pub raw_write_s: f64,
    pub raw_write_blocks_per_s: f64,
    pub raw_read_blocks: u64,
    pub raw_read_s: f64,
    pub raw_read_blocks_per_s: f64,
    pub ftl_write_blocks: u64,
    pub ftl_write_s: f64,
    pub ftl_host_writes_per_s: f64,
    pub ftl_write_window_programs: u64,
    pub ftl_write_window_reads: u64,
    pub ftl_write_window_erases: u64,
    /// Programs ÷ host writes over every write window.
    pub ftl_write_window_wa: f64,
    pub ftl_read_blocks: u64,
    pub ftl_read_s: f64,
    pub ftl_host_reads_per_s: f64,
}

/// How long a measured window runs.
#[derive(Clone, Copy)]
struct Window {
    seconds: f64,
    ops: Option<u64>,
}

impl Window {
    fn blocks(self) -> u64 {
        self.ops.unwrap_or(u64::MAX)
    }

    fn over(self, started: Instant, done: u64) -> bool {
        match self.ops {
            Some(n) => done >= n,
            None => started.elapsed().as_secs_f64() >= self.seconds,
        }
    }
}

/// Blocks moved, wall seconds and CPU seconds of one window.
#[derive(Clone, Copy, Default)]
struct Timed {
    blocks: u64,
    secs: f64,
    cpu: f64,
}

impl Timed {
    fn rate(self) -> f64 {
        ratio(self.blocks as f64, self.secs)
    }
    fn cpu_rate(self) -> f64 {
        ratio(self.blocks as f64, self.cpu)
    }
    fn add(&mut self, o: Timed) {
        self.blocks += o.blocks;
        self.secs += o.secs;
        self.cpu += o.cpu;
    }
}

/// Runs `f` (which returns blocks moved) and times it.
fn timed(f: impl FnOnce() -> Result<u64, BenchError>) -> Result<Timed, BenchError> {
    let cpu = thread_cpu_s();
    let started = Instant::now();
    let blocks = f()?;
    Ok(Timed {
        blocks,
        secs: started.elapsed().as_secs_f64(),
        cpu: thread_cpu_s() - cpu,
    })
}

type Ftl = Driver<Recorder<SimDevice>>;

/// Everything the rounds work on.
struct Rig {
    drv: Ftl,
    pipe: Pipeline,
    read_pipe: Pipeline,
    addresses: AddressGen,
    read_addresses: AddressGen,
    raw_w: Recorder<SimDevice>,
    writer: ShapedWriter,
    raw_r: Recorder<SimDevice>,
    raw_rng: Rng,
    /// The warmup's write commands.
    warm_writes: Vec<super::shape::WriteCmd>,
}

pub fn run(args: &ThroughputArgs, ftl: &FtlConfig) -> Result<ThroughputReport, BenchError> {
    if args.ops.is_none() && !(args.seconds > 0.0 && args.seconds.is_finite()) {
        return Err(BenchError::Args(format!(
            "--seconds {} must be positive",
            args.seconds
        )));
    }
    if args.ops == Some(0) {
        return Err(BenchError::Args("--ops must be at least 1".into()));
    }
    let plan = plan(&args.space, args.op)?;
    let rounds = args.rounds.max(1);
    let slice = Window {
        seconds: args.seconds / f64::from(rounds),
        ops: args.ops.map(|n| (n / u64::from(rounds)).max(1)),
    };

    // The FTL on a recorded device, filled and warmed up.
    let config = FtlConfig {
        gc_policy: args.space.policy,
        ..ftl.clone()
    };
    let device = Recorder::new(SimDevice::create_memory(plan.sim.clone())?);
    let mut drv = format_on(device, &plan, &args.space, config)?;
    let mut pipe = Pipeline::new(args.space.queue_depth, drv.block_size());
    fill(&mut drv, &mut pipe, plan.logical_blocks)?;
    let mut addresses = AddressGen::new(
        &WorkloadSpec::uniform(),
        plan.logical_blocks,
        args.space.seed,
    );
    let warmup_host_writes = (args.warmup.max(0.0) * plan.logical_blocks as f64).round() as u64;
    drv.backend_mut().take_shape();
    let started = Instant::now();
    let lbas = std::iter::repeat_with(|| addresses.next_lba());
    write_shown(&mut drv, &mut pipe, lbas, warmup_host_writes, "warmup")?;
    drv.flush()?;
    let warmup_s = started.elapsed().as_secs_f64();
    let mut warm_shape = drv.backend_mut().take_shape();
    if warm_shape.writes.is_empty() {
        // No warmup: the fill's appends are the shape to start from.
        warm_shape.writes.push(super::shape::WriteCmd {
            blocks: drv.backend().geometry().max_append_blocks,
            parts: 1,
            last_in_batch: true,
        });
    }

    // The raw devices: one written through once with the warmup's shape
    // (every page touched, as the FTL's were), one filled to be read.
    let mut raw_w = Recorder::new(SimDevice::create_memory(plan.sim.clone())?);
    let mut writer = ShapedWriter::new(&raw_w);
    let g = raw_w.geometry().clone();
    let device_blocks = u64::from(g.zone_count) * g.zone_capacity_blocks;
    let first_pass = timed(|| Ok(writer.write(&mut raw_w, device_blocks, &warm_shape.writes)))?;
    raw_w.take_shape();
    let mut raw_r = Recorder::new(SimDevice::create_memory(plan.sim.clone())?);
    fill_device(&mut raw_r, args.read_queue_depth);
    raw_r.take_shape();

    let read_addresses = AddressGen::new(
        &WorkloadSpec::uniform(),
        plan.logical_blocks,
        args.space.seed ^ 0x4ead,
    );
    let mut rig = Rig {
        read_pipe: Pipeline::new(args.read_queue_depth, drv.block_size()),
        drv,
        pipe,
        addresses,
        read_addresses,
        raw_w,
        writer,
        raw_r,
        raw_rng: Rng::stream(args.space.seed, 0x4a3),
        warm_writes: warm_shape.writes.clone(),
    };

    let mut totals = Totals::default();
    let mut per_round = Vec::new();
    let bar = progress(u64::from(rounds), "rounds");
    for r in 0..rounds {
        per_round.push(rig.round(slice, &mut totals)?);
        bar.set_position(u64::from(r) + 1);
    }
    bar.finish_and_clear();
    Ok(report(
        args,
        &plan,
        (warmup_host_writes, warmup_s, &warm_shape),
        first_pass,
        per_round,
        &totals,
    ))
}

/// Sums over rounds.
#[derive(Default)]
struct Totals {
    fw: Timed,
    rw: Timed,
    fr: Timed,
    rr: Timed,
    programs: u64,
    reads: u64,
    erases: u64,
}

impl Rig {
    fn round(&mut self, slice: Window, t: &mut Totals) -> Result<RoundReport, BenchError> {
        // 1. FTL writes.
        let before = self.drv.backend().inner.stats();
        self.drv.backend_mut().take_shape();
        let (drv, pipe, addresses) = (&mut self.drv, &mut self.pipe, &mut self.addresses);
        let fw = timed(|| {
            let started = Instant::now();
            let n = pipe.write(
                drv,
                slice.blocks(),
                &mut || addresses.next_lba(),
                &mut |done| !slice.over(started, done),
            )?;
            drv.flush()?;
            Ok(n)
        })?;
        let delta = Delta::between(&before, &self.drv.backend().inner.stats());
        let mut ftl_shape = self.drv.backend_mut().take_shape();
        if ftl_shape.writes.is_empty() {
            // Nothing reached the device (all in the write buffer, which
            // the flush drained through commands of an earlier window).
            ftl_shape.writes = self.warm_writes.clone();
        }
        // 2. Raw writes of the same shape.
        let (raw_w, writer) = (&mut self.raw_w, &mut self.writer);
        let rw = timed(|| {
            let started = Instant::now();
            let mut done = 0u64;
            while !slice.over(started, done) {
                let batch = RAW_BATCH.min(slice.blocks() - done);
                done += writer.write(raw_w, batch, &ftl_shape.writes);
            }
            Ok(done)
        })?;
        let raw_shape = self.raw_w.take_shape();
        // 3. FTL reads.
        self.drv.backend_mut().take_shape();
        let (drv, read_pipe, read_addresses) =
            (&mut self.drv, &mut self.read_pipe, &mut self.read_addresses);
        let fr = timed(|| {
            let started = Instant::now();
            Ok(read_pipe.read(
                drv,
                slice.blocks(),
                &mut || read_addresses.next_lba(),
                &mut |done| !slice.over(started, done),
            )?)
        })?;
        let ftl_read_shape = self.drv.backend_mut().take_shape();
        // 4. Raw reads, as many in flight as the FTL had.
        let depth = (ftl_read_shape.reads_in_flight().round() as usize).max(1);
        let (raw_r, rng) = (&mut self.raw_r, &mut self.raw_rng);
        let rr = timed(|| {
            let mut completions = Vec::with_capacity(depth);
            let started = Instant::now();
            let (mut done, mut bytes) = (0u64, 0u64);
            while !slice.over(started, done) {
                let batch = RAW_BATCH.min(slice.blocks() - done);
                bytes += random_reads(raw_r, rng, &mut completions, depth, batch);
                done += batch;
            }
            std::hint::black_box(bytes);
            Ok(done)
        })?;
        let raw_read_shape = self.raw_r.take_shape();
        t.fw.add(fw);
        t.rw.add(rw);
        t.fr.add(fr);
        t.rr.add(rr);
        t.programs += delta.programs;
        t.reads += delta.reads;
        t.erases += delta.erases;
        let wa = ratio(delta.programs as f64, fw.blocks as f64);
        Ok(RoundReport {
            ftl_host_writes_per_s: round(fw.rate(), 0),
            ftl_write_wa: round(wa, 4),
            ftl_gc_reads: delta.reads,
            raw_write_blocks_per_s: round(rw.rate(), 0),
            write_efficiency: round(ratio(fw.rate() * wa, rw.rate()), 4),
            host_write_ratio: round(ratio(fw.rate(), rw.rate()), 4),
            ftl_host_reads_per_s: round(fr.rate(), 0),
            raw_read_blocks_per_s: round(rr.rate(), 0),
            read_ratio: round(ratio(fr.rate(), rr.rate()), 4),
            write_efficiency_cpu: round(ratio(fw.cpu_rate() * wa, rw.cpu_rate()), 4),
            read_ratio_cpu: round(ratio(fr.cpu_rate(), rr.cpu_rate()), 4),
            ftl_write_shape: ShapeReport::of(&ftl_shape),
            raw_write_shape: ShapeReport::of(&raw_shape),
            ftl_read_shape: ShapeReport::of(&ftl_read_shape),
            raw_read_shape: ShapeReport::of(&raw_read_shape),
        })
    }
}

struct Delta {
    programs: u64,
    reads: u64,
    erases: u64,
}

impl Delta {
    fn between(before: &SimStats, after: &SimStats) -> Delta {
        Delta {
            programs: after.media_page_programs - before.media_page_programs,
            reads: after.media_page_reads - before.media_page_reads,
            erases: after.media_block_erases - before.media_block_erases,
        }
    }
}

fn report(
    args: &ThroughputArgs,
    plan: &super::Plan,
    warmup: (u64, f64, &Shape),
    first_pass: Timed,
    per_round: Vec<RoundReport>,
    t: &Totals,
) -> ThroughputReport {
    let spread = |f: fn(&RoundReport) -> f64| Spread::of(per_round.iter().map(f));
    let eff = spread(|r| r.write_efficiency);
    let host = spread(|r| r.host_write_ratio);
    let read = spread(|r| r.read_ratio);
    ThroughputReport {
        op: args.op,
        policy: args.space.policy.to_string(),
        zone_count: plan.data_zones,
        zone_blocks: plan.zone_blocks,
        device_zones: plan.device_zones,
        logical_blocks: plan.logical_blocks,
        queue_depth: args.space.queue_depth,
        read_queue_depth: args.read_queue_depth,
        seed: args.space.seed,
        warmup_host_writes: warmup.0,
        warmup_s: round(warmup.1, 3),
        warmup_shape: ShapeReport::of(warmup.2),
        raw_first_pass_blocks_per_s: round(first_pass.rate(), 0),
        rounds: per_round.len() as u32,
        write_efficiency: eff.median,
        write_efficiency_min: eff.min,
        host_write_ratio: host.median,
        host_write_ratio_min: host.min,
        read_ratio: read.median,
        read_ratio_min: read.min,
        write_efficiency_cpu: spread(|r| r.write_efficiency_cpu),
        read_ratio_cpu: spread(|r| r.read_ratio_cpu),
        raw_write_blocks: t.rw.blocks,
        raw_write_s: round(t.rw.secs, 3),
        raw_write_blocks_per_s: round(t.rw.rate(), 0),
        raw_read_blocks: t.rr.blocks,
        raw_read_s: round(t.rr.secs, 3),
        raw_read_blocks_per_s: round(t.rr.rate(), 0),
        ftl_write_blocks: t.fw.blocks,
        ftl_write_s: round(t.fw.secs, 3),
        ftl_host_writes_per_s: round(t.fw.rate(), 0),
        ftl_write_window_programs: t.programs,
        ftl_write_window_reads: t.reads,
        ftl_write_window_erases: t.erases,
        ftl_write_window_wa: round(ratio(t.programs as f64, t.fw.blocks as f64), 4),
        ftl_read_blocks: t.fr.blocks,
        ftl_read_s: round(t.fr.secs, 3),
        ftl_host_reads_per_s: round(t.fr.rate(), 0),
        per_round,
    }
}

impl ThroughputReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "throughput: FTL at OP {} ({} GC), 4 KiB random host writes at depth {} and reads \
             at depth {}, against raw appends of the FTL's command sizes and raw 4 KiB reads",
            self.op, self.policy, self.queue_depth, self.read_queue_depth
        ));
        t.section("device");
        t.row("data zones", self.zone_count);
        t.row("zone blocks", self.zone_blocks);
        t.row("device zones", self.device_zones);
        t.row("logical blocks", self.logical_blocks);
        t.row("warmup host writes", self.warmup_host_writes);
        for (i, r) in self.per_round.iter().enumerate() {
            t.section(&format!("round {}", i + 1));
            t.row("ftl host writes/s", r.ftl_host_writes_per_s);
            t.row("ftl write WA", r.ftl_write_wa);
            t.row("raw write blocks/s", r.raw_write_blocks_per_s);
            t.row(
                "ftl / raw blocks per write",
                format!(
                    "{} / {}",
                    r.ftl_write_shape.blocks_per_write, r.raw_write_shape.blocks_per_write
                ),
            );
            t.row(
                "ftl / raw write blocks in flight",
                format!(
                    "{} / {}",
                    r.ftl_write_shape.write_blocks_in_flight,
                    r.raw_write_shape.write_blocks_in_flight
                ),
            );
            t.row("write efficiency", r.write_efficiency);
            t.row("host write ratio", r.host_write_ratio);
            t.row("ftl host reads/s", r.ftl_host_reads_per_s);
            t.row("raw read blocks/s", r.raw_read_blocks_per_s);
            t.row(
                "ftl / raw reads in flight",
                format!(
                    "{} / {}",
                    r.ftl_read_shape.reads_in_flight, r.raw_read_shape.reads_in_flight
                ),
            );
            t.row("read ratio", r.read_ratio);
            t.row("write efficiency (CPU time)", r.write_efficiency_cpu);
            t.row("read ratio (CPU time)", r.read_ratio_cpu);
        }
        t.section("over rounds (median, min)");
        let pair = |m: f64, n: f64| format!("{m}, {n}");
        t.row(
            "write efficiency",
            pair(self.write_efficiency, self.write_efficiency_min),
        );
        t.row(
            "host write ratio",
            pair(self.host_write_ratio, self.host_write_ratio_min),
        );
        t.row("read ratio", pair(self.read_ratio, self.read_ratio_min));
        t.row(
            "write efficiency (CPU time)",
            pair(
                self.write_efficiency_cpu.median,
                self.write_efficiency_cpu.min,
            ),
        );
        t.row(
            "read ratio (CPU time)",
            pair(self.read_ratio_cpu.median, self.read_ratio_cpu.min),
        );
        t.render()
    }
}

#[cfg(test)]
mod tests {
    use super::super::raw::{ShapedWriter, WRITE_STREAMS};
    use super::super::shape::{Recorder, WriteCmd};
    use zftl_core::Backend;
    use zftl_sim::{SimConfig, SimDevice};

    fn device() -> Recorder<SimDevice> {
        let cfg = SimConfig {
            channels: 1,
            luns_per_channel: 1,
            blocks_per_lun: 16,
            pages_per_block: 64,
            zone_width_luns: 1,
            max_append_blocks: 16,
            max_transfer_blocks: 64,
            queue_depth: 64,
            ..SimConfig::small_for_tests()
        };
        Recorder::new(SimDevice::create_memory(cfg).expect("device"))
    }

    /// The replay sends the recorded sizes and buffer counts and polls the
    /// device where the recording did, so the recorder under it sees the
    /// same shape; round and round the ring of zones, resetting them.
    #[test]
    fn shaped_writer_replays_sizes_parts_and_batches() {
        let cmd = |blocks, parts, last_in_batch| WriteCmd {
            blocks,
            parts,
            last_in_batch,
        };
        // 32 blocks a round, so commands never straddle a 64-block zone.
        let shape = [
            cmd(8, 2, false),
            cmd(4, 4, true),
            cmd(16, 1, false),
            cmd(2, 1, false),
            cmd(2, 2, true),
        ];
        let mut dev = device();
        let mut writer = ShapedWriter::new(&dev);
        let zones = u64::from(dev.geometry().zone_count);
        let rounds = 3 * zones * 2; // the ring thrice
        let written = writer.write(&mut dev, rounds * 32, &shape);
        assert_eq!(written, rounds * 32);
        let got = dev.take_shape();
        assert_eq!(got.write_commands, rounds * 5);
        assert_eq!(&got.writes[..5], &shape[..]);
        assert_eq!(got.writes[5..10], shape[..]);
        // Batches of 12 and 20 blocks, alternating.
        assert!((got.write_blocks_in_flight() - 16.0).abs() < 1e-9);
        assert!(got.resets >= 2 * zones - WRITE_STREAMS as u64);
    }
}
