//! `zftl bench throughput`: the FTL's host rates against the raw backend's,
//! in one run, on identical in-memory devices (timing off).
//!
//! (a) raw: 4 KiB programs at the write pointer across zones (zones reset
//! when the ring comes round), then 4 KiB random reads of a full device;
//! (b) FTL at OP `--op`: fill, random 4 KiB overwrites for a warmup so GC
//! runs at steady state, then measured random overwrites (ending with a
//! flush) and measured random reads. The FTL's backend rate is the
//! simulator's page programs + page reads in the window ÷ wall seconds.
//!
//! Both sides run on this thread, one after the other, with the same queue
//! depth and 4 KiB random I/O. The ratios are wall-clock; on a shared
//! machine a phase can lose the CPU to other processes, so the same ratios
//! are also given on this thread's CPU time (`*_cpu`), which being
//! descheduled does not count in (cache and memory contention still does).

use std::time::Instant;

use serde::Serialize;
use zftl_core::FtlConfig;
use zftl_sim::rng::Rng;
use zftl_sim::{SimDevice, SimStats};

use super::pipe::Pipeline;
use super::raw::{fill_device, random_reads, SeqWriter};
use super::wa::{fill, format};
use super::workload::{AddressGen, WorkloadSpec};
use super::{median, plan, progress, ratio, round, BenchError, ThroughputArgs};
use crate::report::Text;

/// Blocks per raw batch between clock checks.
const RAW_BATCH: u64 = 4096;

#[derive(Debug, Serialize)]
pub struct ThroughputReport {
    /// Raw and FTL phases alternate this many times; `write_efficiency` and
    /// `read_ratio` are medians of the per-round ratios.
    pub rounds: u32,
    pub write_efficiency_per_round: Vec<f64>,
    pub read_ratio_per_round: Vec<f64>,
    pub op: f64,
    pub policy: String,
    pub zone_count: u32,
    pub zone_blocks: u64,
    pub device_zones: u32,
    pub logical_blocks: u64,
    /// Host writes in flight through the FTL.
    pub queue_depth: usize,
    /// Raw commands in flight, and host reads in flight through the FTL.
    pub read_queue_depth: usize,
    pub seed: u64,
    // (a) raw backend
    pub raw_write_blocks: u64,
    pub raw_write_s: f64,
    pub raw_write_blocks_per_s: f64,
    pub raw_read_blocks: u64,
    pub raw_read_s: f64,
    pub raw_read_blocks_per_s: f64,
    // (b) through the FTL
    pub warmup_host_writes: u64,
    pub warmup_s: f64,
    pub ftl_write_blocks: u64,
    pub ftl_write_s: f64,
    pub ftl_host_writes_per_s: f64,
    /// Simulator page programs + page reads per second in the write window.
    pub ftl_backend_cmds_per_s: f64,
    pub ftl_write_window_programs: u64,
    pub ftl_write_window_reads: u64,
    pub ftl_write_window_erases: u64,
    /// Page programs ÷ host writes in the window.
    pub ftl_write_window_wa: f64,
    pub ftl_read_blocks: u64,
    pub ftl_read_s: f64,
    pub ftl_host_reads_per_s: f64,
    /// ftl_backend_cmds_per_s ÷ raw_write_blocks_per_s (target ≥ 0.7).
    pub write_efficiency: f64,
    /// ftl_host_writes_per_s ÷ raw_write_blocks_per_s.
    pub host_write_ratio: f64,
    /// ftl_host_reads_per_s ÷ raw_read_blocks_per_s (target ≥ 0.8).
    pub read_ratio: f64,
    /// `write_efficiency` and `read_ratio` with each phase timed by this
    /// thread's CPU time instead of wall time (medians over rounds).
    pub write_efficiency_cpu: f64,
    pub read_ratio_cpu: f64,
    pub write_efficiency_cpu_per_round: Vec<f64>,
    pub read_ratio_cpu_per_round: Vec<f64>,
}

/// Seconds of CPU this thread has used.
fn thread_cpu_s() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// How long a measured phase runs.
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
    let depth = args.space.queue_depth;
    let raw_depth = args.read_queue_depth;

    let rounds = args.rounds.max(1);
    let slice = Window {
        seconds: args.seconds / f64::from(rounds),
        ops: args.ops.map(|n| (n / u64::from(rounds)).max(1)),
    };

    // The raw backend: one device written sequentially, one filled device
    // read at random; both live through every round.
    let mut raw_w = SimDevice::create_memory(plan.sim.clone())?;
    let mut writer = SeqWriter::new(&raw_w, raw_depth);
    let mut raw_r = SimDevice::create_memory(plan.sim.clone())?;
    fill_device(&mut raw_r, raw_depth);
    let mut raw_rng = Rng::stream(args.space.seed, 0x4a3);

    // The FTL on an identical device, filled and warmed up.
    let config = FtlConfig {
        gc_policy: args.space.policy,
        ..ftl.clone()
    };
    let mut drv = format(&plan, &args.space, config)?;
    let mut pipe = Pipeline::new(depth, drv.block_size());
    fill(&mut drv, &mut pipe, plan.logical_blocks)?;
    let mut addresses = AddressGen::new(
        &WorkloadSpec::uniform(),
        plan.logical_blocks,
        args.space.seed,
    );
    let warmup_host_writes = (args.warmup.max(0.0) * plan.logical_blocks as f64).round() as u64;
    let bar = progress(warmup_host_writes, "warmup");
    let started = Instant::now();
    pipe.write(
        &mut drv,
        warmup_host_writes,
        &mut || addresses.next_lba(),
        &mut |done| {
            bar.set_position(done);
            true
        },
    )?;
    drv.flush()?;
    let warmup_s = started.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let mut read_addresses = AddressGen::new(
        &WorkloadSpec::uniform(),
        plan.logical_blocks,
        args.space.seed ^ 0x4ead,
    );
    let mut read_pipe = Pipeline::new(raw_depth, drv.block_size());

    let mut t = Totals::default();
    let mut write_effs = Vec::new();
    let mut read_ratios = Vec::new();
    let (mut write_effs_cpu, mut read_ratios_cpu) = (Vec::new(), Vec::new());
    let bar = progress(u64::from(rounds), "rounds");
    for r in 0..rounds {
        let cpu = thread_cpu_s();
        let (rw, rw_s) = raw_write_round(&mut raw_w, &mut writer, slice);
        let rw_cpu = thread_cpu_s() - cpu;
        let before = drv.backend().stats();
        let cpu = thread_cpu_s();
        let started = Instant::now();
        let fw = pipe.write(
            &mut drv,
            slice.blocks(),
            &mut || addresses.next_lba(),
            &mut |done| !slice.over(started, done),
        )?;
        drv.flush()?;
        let fw_s = started.elapsed().as_secs_f64();
        let fw_cpu = thread_cpu_s() - cpu;
        let delta = Delta::between(&before, &drv.backend().stats());
        let cpu = thread_cpu_s();
        let (rr, rr_s) = raw_read_round(&mut raw_r, &mut raw_rng, raw_depth, slice);
        let rr_cpu = thread_cpu_s() - cpu;
        let cpu = thread_cpu_s();
        let started = Instant::now();
        let fr = read_pipe.read(
            &mut drv,
            slice.blocks(),
            &mut || read_addresses.next_lba(),
            &mut |done| !slice.over(started, done),
        )?;
        let fr_s = started.elapsed().as_secs_f64();
        let fr_cpu = thread_cpu_s() - cpu;
        let backend_cmds = delta.programs + delta.reads;
        write_effs.push(ratio(
            ratio(backend_cmds as f64, fw_s),
            ratio(rw as f64, rw_s),
        ));
        read_ratios.push(ratio(ratio(fr as f64, fr_s), ratio(rr as f64, rr_s)));
        write_effs_cpu.push(ratio(
            ratio(backend_cmds as f64, fw_cpu),
            ratio(rw as f64, rw_cpu),
        ));
        read_ratios_cpu.push(ratio(ratio(fr as f64, fr_cpu), ratio(rr as f64, rr_cpu)));
        t.add(rw, rw_s, rr, rr_s, fw, fw_s, fr, fr_s, &delta);
        bar.set_position(u64::from(r) + 1);
    }
    bar.finish_and_clear();
    let (raw_write_blocks, raw_write_s, raw_read_blocks, raw_read_s) = (t.rw, t.rw_s, t.rr, t.rr_s);
    let (ftl_write_blocks, ftl_write_s, ftl_read_blocks, ftl_read_s) = (t.fw, t.fw_s, t.fr, t.fr_s);
    let window_delta = Delta {
        programs: t.programs,
        reads: t.reads,
        erases: t.erases,
    };

    let raw_write_rate = ratio(raw_write_blocks as f64, raw_write_s);
    let raw_read_rate = ratio(raw_read_blocks as f64, raw_read_s);
    let ftl_write_rate = ratio(ftl_write_blocks as f64, ftl_write_s);
    let ftl_read_rate = ratio(ftl_read_blocks as f64, ftl_read_s);
    let backend_rate = ratio(
        (window_delta.programs + window_delta.reads) as f64,
        ftl_write_s,
    );
    Ok(ThroughputReport {
        op: args.op,
        policy: args.space.policy.to_string(),
        zone_count: plan.data_zones,
        zone_blocks: plan.zone_blocks,
        device_zones: plan.device_zones,
        logical_blocks: plan.logical_blocks,
        queue_depth: depth,
        read_queue_depth: raw_depth,
        seed: args.space.seed,
        raw_write_blocks,
        raw_write_s: round(raw_write_s, 3),
        raw_write_blocks_per_s: round(raw_write_rate, 0),
        raw_read_blocks,
        raw_read_s: round(raw_read_s, 3),
        raw_read_blocks_per_s: round(raw_read_rate, 0),
        warmup_host_writes,
        warmup_s: round(warmup_s, 3),
        ftl_write_blocks,
        ftl_write_s: round(ftl_write_s, 3),
        ftl_host_writes_per_s: round(ftl_write_rate, 0),
        ftl_backend_cmds_per_s: round(backend_rate, 0),
        ftl_write_window_programs: window_delta.programs,
        ftl_write_window_reads: window_delta.reads,
        ftl_write_window_erases: window_delta.erases,
        ftl_write_window_wa: round(
            ratio(window_delta.programs as f64, ftl_write_blocks as f64),
            4,
        ),
        ftl_read_blocks,
        ftl_read_s: round(ftl_read_s, 3),
        ftl_host_reads_per_s: round(ftl_read_rate, 0),
        write_efficiency: round(median(write_effs.iter().copied()), 4),
        host_write_ratio: round(ratio(ftl_write_rate, raw_write_rate), 4),
        read_ratio: round(median(read_ratios.iter().copied()), 4),
        rounds,
        write_efficiency_per_round: write_effs.iter().map(|&x| round(x, 4)).collect(),
        read_ratio_per_round: read_ratios.iter().map(|&x| round(x, 4)).collect(),
        write_efficiency_cpu: round(median(write_effs_cpu.iter().copied()), 4),
        read_ratio_cpu: round(median(read_ratios_cpu.iter().copied()), 4),
        write_efficiency_cpu_per_round: write_effs_cpu.iter().map(|&x| round(x, 4)).collect(),
        read_ratio_cpu_per_round: read_ratios_cpu.iter().map(|&x| round(x, 4)).collect(),
    })
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

/// Sums over rounds.
#[derive(Default)]
struct Totals {
    rw: u64,
    rw_s: f64,
    rr: u64,
    rr_s: f64,
    fw: u64,
    fw_s: f64,
    fr: u64,
    fr_s: f64,
    programs: u64,
    reads: u64,
    erases: u64,
}

impl Totals {
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        rw: u64,
        rw_s: f64,
        rr: u64,
        rr_s: f64,
        fw: u64,
        fw_s: f64,
        fr: u64,
        fr_s: f64,
        d: &Delta,
    ) {
        self.rw += rw;
        self.rw_s += rw_s;
        self.rr += rr;
        self.rr_s += rr_s;
        self.fw += fw;
        self.fw_s += fw_s;
        self.fr += fr;
        self.fr_s += fr_s;
        self.programs += d.programs;
        self.reads += d.reads;
        self.erases += d.erases;
    }
}

/// One round of raw sequential programs; (blocks, seconds).
fn raw_write_round(dev: &mut SimDevice, writer: &mut SeqWriter, window: Window) -> (u64, f64) {
    let started = Instant::now();
    let mut done = 0u64;
    while !window.over(started, done) {
        let batch = RAW_BATCH.min(window.blocks() - done);
        writer.write(dev, batch);
        done += batch;
    }
    (done, started.elapsed().as_secs_f64())
}

/// One round of raw random reads of a full device; (blocks, seconds).
fn raw_read_round(dev: &mut SimDevice, rng: &mut Rng, depth: usize, window: Window) -> (u64, f64) {
    let mut completions = Vec::with_capacity(depth);
    let started = Instant::now();
    let (mut done, mut bytes) = (0u64, 0u64);
    while !window.over(started, done) {
        let batch = RAW_BATCH.min(window.blocks() - done);
        bytes += random_reads(dev, rng, &mut completions, depth, batch);
        done += batch;
    }
    std::hint::black_box(bytes);
    (done, started.elapsed().as_secs_f64())
}

impl ThroughputReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "throughput: FTL at OP {} ({} GC) against the raw backend, 4 KiB, \
             write queue depth {}, raw and read queue depth {}",
            self.op, self.policy, self.queue_depth, self.read_queue_depth
        ));
        t.section("device");
        t.row("data zones", self.zone_count);
        t.row("zone blocks", self.zone_blocks);
        t.row("device zones", self.device_zones);
        t.row("logical blocks", self.logical_blocks);
        t.section("raw backend");
        t.row("write blocks/s", self.raw_write_blocks_per_s);
        t.row("random read blocks/s", self.raw_read_blocks_per_s);
        t.section("ftl");
        t.row("warmup host writes", self.warmup_host_writes);
        t.row("host writes/s", self.ftl_host_writes_per_s);
        t.row("backend cmds/s (write)", self.ftl_backend_cmds_per_s);
        t.row("window WA", self.ftl_write_window_wa);
        t.row("window erases", self.ftl_write_window_erases);
        t.row("host random reads/s", self.ftl_host_reads_per_s);
        t.section("ratios");
        t.row("write efficiency", self.write_efficiency);
        t.row("host write ratio", self.host_write_ratio);
        t.row("read ratio", self.read_ratio);
        t.row("write efficiency (CPU time)", self.write_efficiency_cpu);
        t.row("read ratio (CPU time)", self.read_ratio_cpu);
        t.render()
    }
}
