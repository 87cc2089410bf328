//! `zftl bench zns`: zftl on a real (or QEMU-emulated) NVMe ZNS namespace
//! against the raw namespace, in one run on one device.
//!
//! The namespace is split: the last `--raw-zones` zones are the raw
//! region, the others hold zftl (formatted through an adapter that shows
//! the FTL only its zones), so raw and zftl jobs can alternate without
//! reformatting. The jobs run in two phases, each `--rounds` rounds of
//! `--seconds` per job: first the 128 KiB ones (`raw_seq128k`,
//! `backend_append128k`, `zftl_seq128k`), then the 4 KiB ones
//! (`raw_seq4k`, `zftl_randwrite4k`), so each zftl job measures its
//! workload's steady state rather than the switch from the other one:
//!
//! * `raw_seq128k`, `raw_seq4k`: fio's `io_uring_cmd` engine
//!   (`cmd_type=nvme`, `zonemode=zbd`) writing the raw region through
//!   `/dev/ngXnY` sequentially (fio resets zones as it wraps);
//! * `backend_append128k` (diagnostic, with `--backend-job`): zftl's
//!   passthrough backend alone, 128 KiB zone appends, 8 in flight, over
//!   the raw region, a new
//!   buffer per command as the FTL hands them over: the backend's cost
//!   without the FTL's;
//! * `zftl_seq128k`, `zftl_randwrite4k`: the FTL through its driver loop,
//!   `--depth` host requests in flight (made on a caller thread where
//!   there is a second CPU, `--caller-threads`, which takes their data
//!   CRCs while the core's thread has work queued, as `zftl::Handle` does),
//!   sequential 128 KiB writes, then
//!   4 KiB writes at uniformly random addresses of the whole logical space.
//!   Each ends with a flush inside its timed window: only data on the
//!   device counts. Random writes run garbage collection; the media
//!   blocks written per host block say how much.
//!
//! Ratios, median over rounds (each round's ratio from jobs run minutes
//! apart at most, so load drift on a shared machine skews a round, not the
//! result): `seq128k_ratio` = zftl seq 128 KiB ÷ raw seq 128 KiB MiB/s and
//! `randwrite4k_vs_raw_seq4k` = zftl random 4 KiB ÷ raw sequential 4 KiB
//! IOPS (the FTL turns random writes into zone appends; the raw device can
//! only take sequential ones).
//!
//! Before the jobs the bench makes glibc's allocator keep freed memory
//! (`--allocator-default` leaves it): under an emulated CPU the page faults
//! of zftl's 128 KiB and 512 KiB buffers, mapped and handed back again and
//! again, are dear. `--cpu-costs` adds the guest's rate of each per-byte
//! step of a zftl write and the ratio they alone would allow.
//!
//! Meant for the QEMU guest of `scripts/zns-guest.sh` (run `bench`); fio
//! must be on PATH, else the bench fails naming it.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use serde::Serialize;

use super::{median, ratio, round, BenchError};
use crate::report::Text;
use zftl_core::tag::DataCrcImpl;
use zftl_core::FtlConfig;

const MIB: f64 = (1u64 << 20) as f64;
/// What the ratios should reach.
const TARGET_RATIO: f64 = 0.8;

#[derive(Debug, Args)]
pub struct ZnsArgs {
    /// The namespace's NVMe generic char device (fio's io_uring_cmd engine
    /// and zftl's passthrough backend both need it).
    #[arg(long, value_name = "DEVICE", default_value = "/dev/ng0n1")]
    pub device: PathBuf,
    /// Length of each measured job, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 4)]
    pub seconds: u64,
    /// Rounds of all jobs; rates and ratios are medians over rounds.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: u32,
    /// Host requests zftl keeps in flight.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub depth: usize,
    /// fio's iodepth for the raw jobs. Regular writes to a zone must reach
    /// the device in order, so 1 is what a zoned drive promises to take.
    /// (QEMU 7.2's controller took 16 in some runs and in others stopped
    /// completing commands until the kernel's 30 s timeout cancelled them.)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub raw_iodepth: u32,
    /// Zones at the end of the namespace for the raw jobs (zftl gets the
    /// others).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub raw_zones: u32,
    /// Also run `backend_append128k` (zftl's backend alone, 128 KiB zone
    /// appends). Off by default: on QEMU 7.2 it made the emulated
    /// controller stop completing commands in most guest runs.
    #[arg(long)]
    pub backend_job: bool,
    /// Seed of the random addresses.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Also measure, before the jobs, the rate of the per-byte work a zftl
    /// write does on this CPU (each data CRC implementation, the copies):
    /// `cpu_costs` in the report.
    #[arg(long)]
    pub cpu_costs: bool,
    /// Threads that make zftl's writes beside the thread that runs the
    /// core, as the connection tasks of `zftl serve --device` do, and take
    /// their data CRCs (`Request::WriteSummed`) while the core's thread has
    /// work queued (`zftl::handle::CALLER_SUMS_FROM_QUEUED`): 0 or 1. Default:
    /// 1 if this machine has more than one CPU, else 0 (on one CPU the
    /// hand-over only adds thread switches).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=1))]
    pub caller_threads: Option<u8>,
    /// Leave glibc's allocator as it is. By default the bench first makes
    /// it keep freed memory (`zftl_zns::keep_freed_memory`): with glibc's
    /// defaults zftl's 128 KiB and 512 KiB buffers are mapped, faulted in
    /// and handed back again and again, which an emulated CPU pays dearly.
    #[arg(long)]
    pub allocator_default: bool,
}

/// The rate of one piece of per-byte CPU work (`--cpu-costs`).
#[derive(Debug, Serialize)]
pub struct CpuCost {
    pub name: String,
    pub mib_per_s: f64,
    /// One of the steps every byte of a zftl 128 KiB write goes through:
    /// the caller's buffer, the data CRC the volume runs, the copy of the
    /// append's parts into one buffer for the passthrough command.
    pub per_write_byte: bool,
}

/// The fastest zftl's 128 KiB writes could go if all it did were the
/// per-byte steps of `costs` one after the other (no bookkeeping, no
/// device), MiB/s.
fn per_byte_bound(costs: &[CpuCost]) -> f64 {
    let secs_per_mib: f64 = costs
        .iter()
        .filter(|c| c.per_write_byte)
        .map(|c| 1.0 / c.mib_per_s)
        .sum();
    1.0 / secs_per_mib
}

/// Each `--cpu-costs` item runs this many times for [`CPU_COST_SECS`]; its
/// best rate counts (the least disturbed by other load on the machine).
const CPU_COST_TRIES: u32 = 5;
const CPU_COST_SECS: f64 = 0.1;

/// Runs `step` (which returns the bytes it processed) and returns its best
/// rate over [`CPU_COST_TRIES`] tries.
fn cpu_cost(
    name: impl Into<String>,
    per_write_byte: bool,
    mut step: impl FnMut() -> usize,
) -> CpuCost {
    let mut best = 0.0f64;
    for _ in 0..CPU_COST_TRIES {
        let t0 = Instant::now();
        let mut bytes = 0usize;
        while t0.elapsed().as_secs_f64() < CPU_COST_SECS {
            bytes += step();
        }
        best = best.max(bytes as f64 / MIB / t0.elapsed().as_secs_f64());
    }
    CpuCost {
        name: name.into(),
        mib_per_s: round(best, 1),
        per_write_byte,
    }
}

/// The per-byte work of a 128 KiB zftl write, piece by piece, on 4 KiB
/// blocks: the data CRC by each implementation (and by `in_use`, the one
/// zftl's volume runs), the caller's fresh buffer, and the passthrough
/// backend's copy of an append's parts into one fresh buffer; for
/// comparison, the copy into block buffers, which multi-block writes skip
/// while the write buffer's bound on shared request buffers allows.
pub fn cpu_costs(in_use: DataCrcImpl) -> Vec<CpuCost> {
    use std::hint::black_box;
    const BLOCK: usize = 4096;
    const WRITE: usize = 128 << 10;
    const APPEND: usize = 512 << 10;
    let src: Vec<u8> = (0..WRITE).map(|i| (i * 131 + (i >> 9)) as u8).collect();
    let mut out = Vec::new();
    for imp in DataCrcImpl::ALL.into_iter().filter(|imp| imp.runs_here()) {
        out.push(cpu_cost(format!("crc_{}", imp.name()), false, || {
            for b in src.chunks_exact(BLOCK) {
                black_box(imp.checksum(black_box(b)));
            }
            WRITE
        }));
    }
    out.push(cpu_cost(
        format!("crc_data_crc_{}", in_use.name()),
        true,
        || {
            for b in src.chunks_exact(BLOCK) {
                black_box(in_use.checksum(black_box(b)));
            }
            WRITE
        },
    ));
    let mut dst = vec![0u8; WRITE];
    out.push(cpu_cost("copy_128k_reused", false, || {
        dst.copy_from_slice(black_box(&src));
        black_box(&dst);
        WRITE
    }));
    out.push(cpu_cost("clone_128k_fresh", true, || {
        black_box(black_box(&src).clone());
        WRITE
    }));
    let mut blocks: Vec<Vec<u8>> = (0..WRITE / BLOCK)
        .map(|_| Vec::with_capacity(BLOCK))
        .collect();
    out.push(cpu_cost("copy_4k_blocks_reused", false, || {
        for (d, s) in blocks.iter_mut().zip(src.chunks_exact(BLOCK)) {
            d.clear();
            d.extend_from_slice(s);
        }
        black_box(&blocks);
        WRITE
    }));
    out.push(cpu_cost("append_512k_fresh", true, || {
        let mut v = Vec::with_capacity(APPEND);
        for _ in 0..APPEND / WRITE {
            v.extend_from_slice(black_box(&src));
        }
        black_box(v);
        APPEND
    }));
    out
}

/// One job: medians over rounds, and each round's rates.
#[derive(Debug, Serialize)]
pub struct JobReport {
    pub name: &'static str,
    /// `fio io_uring_cmd` or `zftl`.
    pub engine: &'static str,
    pub pattern: &'static str,
    pub block_size_bytes: u64,
    pub iodepth: u64,
    pub iops: f64,
    pub mib_per_s: f64,
    pub iops_per_round: Vec<f64>,
    /// CPU time of the job's process (zftl itself, or the fio child) ÷
    /// wall time, over all rounds: near 1 means the job was bound by the
    /// (guest) CPU, not by the device. zftl's counts its caller thread too
    /// (`caller_threads`), so it may reach 2.
    pub cpu_busy_fraction: f64,
    /// The part of `cpu_busy_fraction` spent in the kernel.
    pub cpu_sys_fraction: f64,
    /// Minor page faults of the job's process per operation (fresh memory
    /// the allocator took from the kernel; for fio including its start-up).
    pub minor_faults_per_op: f64,
    /// zftl jobs: the times zftl's process slept (voluntary context
    /// switches: waits for the device) per operation.
    pub waits_per_op: Option<f64>,
    /// zftl jobs: media blocks written per host block (GC, tags, notes),
    /// over all rounds and in each.
    pub media_blocks_per_host_block: Option<f64>,
    pub media_blocks_per_host_block_per_round: Option<Vec<f64>>,
    /// zftl jobs: of the writes and appends zftl sent the device, the
    /// share that went as a vector of the host's buffers (no copy), and
    /// the share copied into one buffer first; the rest went in the one
    /// buffer their bytes were in (`zftl_zns::WriteBuffers`).
    pub device_writes_vectored_fraction: Option<f64>,
    pub device_writes_copied_fraction: Option<f64>,
    /// zftl jobs with a caller thread: the share of writes whose data CRCs
    /// it took; the core's thread took the others' (`zftl::Handle`'s rule,
    /// `CALLER_SUMS_FROM_QUEUED`).
    pub caller_summed_fraction: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct ZnsBenchReport {
    pub device: String,
    pub fio_version: String,
    pub seconds_per_job: u64,
    pub rounds: u32,
    pub raw_zones: u32,
    pub zone_size_bytes: u64,
    pub zone_capacity_bytes: u64,
    pub zone_count: u32,
    pub logical_bytes: u64,
    pub jobs: Vec<JobReport>,
    /// zftl sequential 128 KiB ÷ raw sequential 128 KiB (MiB/s), median.
    pub seq128k_ratio: f64,
    /// zftl random 4 KiB writes ÷ raw sequential 4 KiB writes (IOPS), median.
    pub randwrite4k_vs_raw_seq4k: f64,
    pub seq128k_ratio_per_round: Vec<f64>,
    pub randwrite4k_vs_raw_seq4k_per_round: Vec<f64>,
    pub target_ratio: f64,
    /// With `--cpu-costs`: the per-byte work of a zftl write on this CPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_costs: Option<Vec<CpuCost>>,
    /// With `--cpu-costs`: the MiB/s of 128 KiB writes if zftl did nothing
    /// but their per-byte steps (see `CpuCost::per_write_byte`), and that
    /// over raw_seq128k's median: the most `seq128k_ratio` could be on this
    /// CPU without less per-byte work.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_byte_bound_mib_per_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_byte_bound_ratio: Option<f64>,
    /// Whether the allocator was told to keep freed memory (see
    /// `--allocator-default`).
    pub keep_freed_memory: bool,
    /// CPUs this process may run on, and the caller threads zftl's jobs
    /// had beside the one that runs the core (`--caller-threads`).
    pub cpus: usize,
    pub caller_threads: u8,
}

impl ZnsBenchReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "zns: {} ({} zones of {} MiB, capacity {} MiB, {} for raw jobs), {}, {} rounds of {} s per job",
            self.device,
            self.zone_count,
            self.zone_size_bytes >> 20,
            self.zone_capacity_bytes >> 20,
            self.raw_zones,
            self.fio_version,
            self.rounds,
            self.seconds_per_job
        ));
        t.line(format!(
            "{} CPUs; zftl with {} caller thread(s) beside the core's",
            self.cpus, self.caller_threads
        ));
        t.section("jobs");
        for j in &self.jobs {
            t.row(
                j.name,
                format!(
                    "{:>10.0} IOPS {:>8.1} MiB/s  cpu {:.2} (sys {:.2})  faults/op {:.1}  ({}, {} {} B, iodepth {})",
                    j.iops,
                    j.mib_per_s,
                    j.cpu_busy_fraction,
                    j.cpu_sys_fraction,
                    j.minor_faults_per_op,
                    j.engine,
                    j.pattern,
                    j.block_size_bytes,
                    j.iodepth
                ),
            );
        }
        t.section("ratios");
        t.row("seq128k_ratio", self.seq128k_ratio);
        t.row("randwrite4k_vs_raw_seq4k", self.randwrite4k_vs_raw_seq4k);
        t.row("target_ratio", self.target_ratio);
        if let Some(costs) = &self.cpu_costs {
            t.section("cpu costs (MiB/s)");
            for c in costs {
                t.row(&c.name, c.mib_per_s);
            }
            if let (Some(b), Some(r)) = (self.per_byte_bound_mib_per_s, self.per_byte_bound_ratio) {
                t.row("per_byte_bound_mib_per_s", b);
                t.row("per_byte_bound_ratio", r);
            }
        }
        t.render()
    }
}

/// `tool` on $PATH.
fn find_tool(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
}

#[cfg(not(target_os = "linux"))]
pub fn run(args: &ZnsArgs, _ftl: &FtlConfig) -> Result<ZnsBenchReport, BenchError> {
    Err(BenchError::Args(format!(
        "{}: NVMe ZNS devices are supported on Linux only",
        args.device.display()
    )))
}

#[cfg(target_os = "linux")]
pub fn run(args: &ZnsArgs, ftl: &FtlConfig) -> Result<ZnsBenchReport, BenchError> {
    imp::run(args, ftl)
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use std::cell::Cell;
    use std::process::{Command, Stdio};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    use zftl::handle::caller_sums;

    use zftl_core::backend::{
        Command as DevCommand, Completion, DeviceError, Geometry, SubmitError, ZoneId, ZoneInfo,
    };
    use zftl_core::{Backend, Driver, FormatOptions, FtlConfig, IoError, Request, SummedBlocks};
    use zftl_sim::rng::Rng;
    use zftl_zns::{Device, IoPath, WriteBuffers, ZoneAction};

    /// The first zones of a device: the FTL never sees the raw region.
    pub struct FirstZones {
        inner: Device,
        geometry: Geometry,
    }

    impl FirstZones {
        fn new(inner: Device, zone_count: u32) -> FirstZones {
            let mut geometry = inner.geometry().clone();
            geometry.zone_count = zone_count;
            FirstZones { inner, geometry }
        }
    }

    impl Backend for FirstZones {
        fn geometry(&self) -> &Geometry {
            &self.geometry
        }
        fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
            if zone >= self.geometry.zone_count {
                return Err(DeviceError::NoSuchZone { zone });
            }
            self.inner.zone_info(zone)
        }
        fn submit(&mut self, tag: u64, command: DevCommand) -> Result<(), SubmitError> {
            // The FTL addresses only the zones of its geometry; anything
            // else is a bug of the FTL.
            assert!(
                command.zone().is_none_or(|z| z < self.geometry.zone_count),
                "FTL command outside its zones"
            );
            self.inner.submit(tag, command)
        }
        fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
            self.inner.reap(out, max)
        }
        fn wait(&mut self) -> Result<(), DeviceError> {
            self.inner.wait()
        }
        fn in_flight(&self) -> usize {
            self.inner.in_flight()
        }
        fn clock_ns(&self) -> u64 {
            self.inner.clock_ns()
        }
    }

    /// Appends the backend-only job keeps in flight (all to one zone). With
    /// 32 and with 8, QEMU 7.2's controller stopped completing commands in
    /// most guest runs (until the kernel reset it).
    const BACKEND_DEPTH: usize = 8;

    /// Allocations below this come from the reused heap (zftl's largest
    /// per-command buffer is one append: 512 KiB on QEMU's namespace).
    const KEEP_BELOW: u32 = 4 << 20;

    /// One round's rate of one job.
    struct Rate {
        ops: u64,
        bytes: u64,
        secs: f64,
        /// CPU seconds the job's process used (user + system).
        cpu_secs: f64,
        /// Of which in the kernel (system).
        sys_secs: f64,
        /// Minor page faults of the job's process.
        minor_faults: f64,
        /// Voluntary context switches (waits) of zftl's process; 0 for fio.
        waits: f64,
        /// zftl writes whose CRCs a caller thread took (`caller_threads`).
        caller_summed: u64,
    }

    /// USER_HZ, the unit of `/proc/<pid>/stat` times (100 on every Linux ABI).
    const USER_HZ: f64 = 100.0;

    /// CPU seconds (user + system, and system alone) and minor page
    /// faults of a process (this one, or its reaped children).
    #[derive(Clone, Copy, Default)]
    struct Usage {
        cpu_secs: f64,
        sys_secs: f64,
        minor_faults: f64,
        waits: f64,
    }

    impl Usage {
        fn since(self, before: Usage) -> Usage {
            Usage {
                cpu_secs: self.cpu_secs - before.cpu_secs,
                sys_secs: self.sys_secs - before.sys_secs,
                minor_faults: self.minor_faults - before.minor_faults,
                waits: self.waits - before.waits,
            }
        }
    }

    /// The usage of this process and of its reaped children, from
    /// /proc/self/stat; zeros if it cannot be read.
    fn usage() -> (Usage, Usage) {
        let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
            return Default::default();
        };
        // Fields after the command name, which may hold spaces: state is
        // field 3, minflt 10, cminflt 11, utime 14, stime 15, cutime 16,
        // cstime 17.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
        let f: Vec<f64> = rest
            .split_whitespace()
            .map(|x| x.parse().unwrap_or(0.0))
            .collect();
        let at = |field: usize| f.get(field - 3).copied().unwrap_or(0.0);
        let own = Usage {
            cpu_secs: (at(14) + at(15)) / USER_HZ,
            sys_secs: at(15) / USER_HZ,
            minor_faults: at(10),
            waits: voluntary_switches(),
        };
        let children = Usage {
            cpu_secs: (at(16) + at(17)) / USER_HZ,
            sys_secs: at(17) / USER_HZ,
            minor_faults: at(11),
            waits: 0.0,
        };
        (own, children)
    }

    /// This process's voluntary context switches (/proc/self/status), 0
    /// if they cannot be read.
    fn voluntary_switches() -> f64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    }

    impl Rate {
        fn iops(&self) -> f64 {
            self.ops as f64 / self.secs
        }
        fn mib_per_s(&self) -> f64 {
            self.bytes as f64 / MIB / self.secs
        }
    }

    /// The jobs, in the order each round runs them.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Job {
        RawSeq128k,
        RawSeq4k,
        BackendAppend128k,
        FtlSeq128k,
        FtlRand4k,
    }

    const JOBS: [Job; 5] = [
        Job::RawSeq128k,
        Job::RawSeq4k,
        Job::BackendAppend128k,
        Job::FtlSeq128k,
        Job::FtlRand4k,
    ];

    /// The jobs in the order they run: all rounds of a phase before the
    /// next, so each zftl job measures its workload's steady state (the
    /// sequential rounds on a volume only sequential writes have touched),
    /// not the switch from the other workload (sequential writes right
    /// after random ones first pay for collecting the zones those
    /// scattered, while fio writes freshly reset raw zones).
    const PHASES: [&[Job]; 2] = [
        &[Job::RawSeq128k, Job::BackendAppend128k, Job::FtlSeq128k],
        &[Job::RawSeq4k, Job::FtlRand4k],
    ];

    impl Job {
        fn name(self) -> &'static str {
            match self {
                Job::RawSeq128k => "raw_seq128k",
                Job::RawSeq4k => "raw_seq4k",
                Job::BackendAppend128k => "backend_append128k",
                Job::FtlSeq128k => "zftl_seq128k",
                Job::FtlRand4k => "zftl_randwrite4k",
            }
        }
        fn block_bytes(self) -> u64 {
            match self {
                Job::RawSeq4k | Job::FtlRand4k => 4 << 10,
                _ => 128 << 10,
            }
        }
        fn engine(self) -> &'static str {
            match self {
                Job::RawSeq128k | Job::RawSeq4k => "fio io_uring_cmd",
                Job::BackendAppend128k => "zftl-zns backend (zone append)",
                Job::FtlSeq128k | Job::FtlRand4k => "zftl",
            }
        }
        fn pattern(self) -> &'static str {
            match self {
                Job::FtlRand4k => "random",
                Job::BackendAppend128k => "append",
                _ => "sequential",
            }
        }
    }

    /// Everything one run needs.
    struct Bench<'a> {
        args: &'a ZnsArgs,
        fio: PathBuf,
        drv: Driver<FirstZones>,
        /// Zones of the raw region: `raw_first..zone_count`.
        raw_first: ZoneId,
        zone_count: u32,
        zone_bytes: u64,
        rng: Rng,
        /// `--caller-threads`, or its default for this machine.
        caller_threads: u8,
    }

    pub fn run(args: &ZnsArgs, ftl: &FtlConfig) -> Result<ZnsBenchReport, BenchError> {
        if args.seconds == 0 || args.depth == 0 || args.raw_iodepth == 0 || args.raw_zones == 0 {
            return Err(BenchError::Args(
                "--seconds, --depth, --raw-iodepth and --raw-zones must be at least 1".into(),
            ));
        }
        if args.rounds == 0 {
            return Err(BenchError::Args("--rounds must be at least 1".into()));
        }
        let fio = find_tool("fio").ok_or_else(|| {
            BenchError::Args(
                "`fio` is not on PATH: bench zns compares zftl with fio's io_uring_cmd engine \
                 (install the Debian package fio; in the ZNS guest it is copied into the \
                 initramfs)"
                    .into(),
            )
        })?;
        let fio_version = tool_version(&fio)?;
        let keep_freed_memory = !args.allocator_default && zftl_zns::keep_freed_memory(KEEP_BELOW);
        let cpu_costs = args.cpu_costs.then(|| cpu_costs(ftl.data_crc_impl()));
        let dev = open_reset(&args.device)?;
        let g = dev.geometry().clone();
        let bs = u64::from(g.block_size_bytes);
        if args.raw_zones + 8 > g.zone_count {
            return Err(BenchError::Args(format!(
                "--raw-zones {} leaves fewer than 8 of the {} zones for zftl",
                args.raw_zones, g.zone_count
            )));
        }
        let raw_first = g.zone_count - args.raw_zones;
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let ftl_dev = FirstZones::new(dev, raw_first);
        let drv = Driver::format(ftl_dev, &FormatOptions::default(), ftl.clone())?;
        let logical_bytes = drv.logical_blocks() * bs;
        let mut b = Bench {
            args,
            fio,
            drv,
            raw_first,
            zone_count: g.zone_count,
            zone_bytes: g.zone_size_blocks * bs,
            rng: Rng::new(args.seed),
            caller_threads: args.caller_threads.unwrap_or(u8::from(cpus > 1)),
        };
        let mut rates: Vec<Vec<Rate>> = JOBS.iter().map(|_| Vec::new()).collect();
        let mut wa: Vec<Vec<(u64, u64)>> = JOBS.iter().map(|_| Vec::new()).collect();
        let mut sent: Vec<WriteBuffers> = vec![WriteBuffers::default(); JOBS.len()];
        for phase in PHASES {
            for _ in 0..args.rounds {
                for &job in phase {
                    if job == Job::BackendAppend128k && !args.backend_job {
                        continue;
                    }
                    let i = JOBS
                        .iter()
                        .position(|&j| j == job)
                        .expect("a phase job is a job");
                    let (rate, host, media, writes) = b.measured_job(job)?;
                    rates[i].push(rate);
                    wa[i].push((host, media));
                    sent[i] = sent[i].plus(writes);
                }
            }
        }
        b.drv.shutdown()?;
        let per_round = |a: usize, b: usize, f: fn(&Rate) -> f64| -> Vec<f64> {
            rates[a]
                .iter()
                .zip(&rates[b])
                .map(|(x, y)| round(ratio(f(x), f(y)), 3))
                .collect()
        };
        let seq = per_round(3, 0, Rate::mib_per_s);
        let raw_seq128k = median(rates[0].iter().map(Rate::mib_per_s));
        let bound = cpu_costs.as_deref().map(per_byte_bound);
        let rand = per_round(4, 1, Rate::iops);
        let share = |w: &WriteBuffers, part: u64| {
            (w.total() > 0).then(|| round(ratio(part as f64, w.total() as f64), 3))
        };
        let jobs = JOBS
            .iter()
            .zip(&rates)
            .zip(&wa)
            .zip(&sent)
            .filter(|(((_, r), _), _)| !r.is_empty())
            .map(|(((&job, r), wa), writes)| {
                let (host, media) = wa
                    .iter()
                    .fold((0, 0), |(h, m), &(host, media)| (h + host, m + media));
                let per_block = |host: u64, media: u64| round(ratio(media as f64, host as f64), 3);
                JobReport {
                    name: job.name(),
                    engine: job.engine(),
                    pattern: job.pattern(),
                    block_size_bytes: job.block_bytes(),
                    iodepth: match job {
                        Job::RawSeq128k | Job::RawSeq4k => u64::from(args.raw_iodepth),
                        Job::BackendAppend128k => BACKEND_DEPTH as u64,
                        _ => args.depth as u64,
                    },
                    iops: round(median(r.iter().map(Rate::iops)), 1),
                    mib_per_s: round(median(r.iter().map(Rate::mib_per_s)), 2),
                    iops_per_round: r.iter().map(|x| round(x.iops(), 1)).collect(),
                    cpu_busy_fraction: round(
                        ratio(
                            r.iter().map(|x| x.cpu_secs).sum(),
                            r.iter().map(|x| x.secs).sum(),
                        ),
                        2,
                    ),
                    cpu_sys_fraction: round(
                        ratio(
                            r.iter().map(|x| x.sys_secs).sum(),
                            r.iter().map(|x| x.secs).sum(),
                        ),
                        2,
                    ),
                    minor_faults_per_op: round(
                        ratio(
                            r.iter().map(|x| x.minor_faults).sum(),
                            r.iter().map(|x| x.ops as f64).sum(),
                        ),
                        2,
                    ),
                    waits_per_op: matches!(job, Job::FtlSeq128k | Job::FtlRand4k).then(|| {
                        round(
                            ratio(
                                r.iter().map(|x| x.waits).sum(),
                                r.iter().map(|x| x.ops as f64).sum(),
                            ),
                            3,
                        )
                    }),
                    media_blocks_per_host_block: (host > 0).then(|| per_block(host, media)),
                    media_blocks_per_host_block_per_round: (host > 0)
                        .then(|| wa.iter().map(|&(h, m)| per_block(h, m)).collect()),
                    device_writes_vectored_fraction: share(writes, writes.vectored),
                    device_writes_copied_fraction: share(writes, writes.copied),
                    caller_summed_fraction: (matches!(job, Job::FtlSeq128k | Job::FtlRand4k)
                        && b.caller_threads > 0)
                        .then(|| {
                            round(
                                ratio(
                                    r.iter().map(|x| x.caller_summed as f64).sum(),
                                    r.iter().map(|x| x.ops as f64).sum(),
                                ),
                                3,
                            )
                        }),
                }
            })
            .collect();
        Ok(ZnsBenchReport {
            device: args.device.display().to_string(),
            fio_version,
            seconds_per_job: args.seconds,
            rounds: args.rounds,
            raw_zones: args.raw_zones,
            zone_size_bytes: g.zone_size_blocks * bs,
            zone_capacity_bytes: g.zone_capacity_blocks * bs,
            zone_count: g.zone_count,
            logical_bytes,
            jobs,
            seq128k_ratio: round(median(seq.iter().copied()), 3),
            randwrite4k_vs_raw_seq4k: round(median(rand.iter().copied()), 3),
            seq128k_ratio_per_round: seq,
            randwrite4k_vs_raw_seq4k_per_round: rand,
            target_ratio: TARGET_RATIO,
            per_byte_bound_mib_per_s: bound.map(|b| round(b, 1)),
            per_byte_bound_ratio: bound.map(|b| round(ratio(b, raw_seq128k), 3)),
            cpu_costs,
            keep_freed_memory,
            cpus,
            caller_threads: b.caller_threads,
        })
    }

    fn tool_version(fio: &Path) -> Result<String, BenchError> {
        let out = Command::new(fio)
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .map_err(|e| BenchError::Check(format!("cannot run {}: {e}", fio.display())))?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Opens the namespace on the passthrough path and resets every zone.
    fn open_reset(path: &Path) -> Result<Device, BenchError> {
        let mut dev = crate::device::open(path)?;
        if dev.io_path() != IoPath::Passthrough {
            return Err(BenchError::Args(format!(
                "{}: bench zns needs NVMe passthrough (an /dev/ngXnY device); got the {} path",
                path.display(),
                dev.io_path().name()
            )));
        }
        dev.reset_all().map_err(|e| {
            BenchError::Check(format!("{}: reset of every zone: {e}", path.display()))
        })?;
        Ok(dev)
    }

    impl Bench<'_> {
        /// Runs `job` with the CPU time of the process that did the work
        /// (fio for raw jobs), the FTL's host and media blocks written, and
        /// how zftl's writes reached the kernel.
        fn measured_job(&mut self, job: Job) -> Result<(Rate, u64, u64, WriteBuffers), BenchError> {
            let before = self.drv.stats();
            let sent0 = self.drv.backend().inner.write_buffers();
            let (own0, child0) = usage();
            let mut rate = self.run_job(job)?;
            let (own1, child1) = usage();
            let used = match job {
                Job::RawSeq128k | Job::RawSeq4k => child1.since(child0),
                _ => own1.since(own0),
            };
            rate.cpu_secs = used.cpu_secs;
            rate.sys_secs = used.sys_secs;
            rate.minor_faults = used.minor_faults;
            rate.waits = used.waits;
            let after = self.drv.stats();
            let sent1 = self.drv.backend().inner.write_buffers();
            let writes = match job {
                Job::FtlSeq128k | Job::FtlRand4k => sent1.since(sent0),
                _ => WriteBuffers::default(),
            };
            Ok((
                rate,
                after.host_write_blocks - before.host_write_blocks,
                after.media_write_blocks - before.media_write_blocks,
                writes,
            ))
        }

        fn run_job(&mut self, job: Job) -> Result<Rate, BenchError> {
            match job {
                Job::RawSeq128k | Job::RawSeq4k => self.fio_job(job),
                Job::BackendAppend128k => self.backend_job(),
                Job::FtlSeq128k => self.ftl_job(Pattern::Sequential, 32),
                Job::FtlRand4k => self.ftl_job(Pattern::Random, 1),
            }
        }

        fn window(&self) -> Duration {
            Duration::from_secs(self.args.seconds)
        }

        /// Lets the FTL finish what it does (its commands would otherwise
        /// complete into the raw jobs) and resets the raw region; outside
        /// any timed window.
        fn reset_raw(&mut self) -> Result<(), BenchError> {
            self.drv.settle()?;
            let dev = &mut self.drv.backend_mut().inner;
            if dev.in_flight() != 0 {
                return Err(BenchError::Check(format!(
                    "the FTL left {} commands in flight after settling",
                    dev.in_flight()
                )));
            }
            for z in self.raw_first..self.zone_count {
                dev.zone_action_sync(Some(z), ZoneAction::Reset)
                    .map_err(|e| BenchError::Check(format!("reset of raw zone {z}: {e}")))?;
            }
            Ok(())
        }

        /// One raw fio job over the raw region.
        fn fio_job(&mut self, job: Job) -> Result<Rate, BenchError> {
            self.reset_raw()?;
            let args = self.args;
            let name = job.name();
            let out = Command::new(&self.fio)
                .arg(format!("--name={name}"))
                .arg("--ioengine=io_uring_cmd")
                .arg("--cmd_type=nvme")
                .arg(format!("--filename={}", args.device.display()))
                .arg("--zonemode=zbd")
                .arg("--rw=write")
                .arg(format!("--bs={}", job.block_bytes()))
                .arg(format!("--iodepth={}", args.raw_iodepth))
                .arg(format!(
                    "--offset={}",
                    u64::from(self.raw_first) * self.zone_bytes
                ))
                .arg(format!(
                    "--size={}",
                    u64::from(args.raw_zones) * self.zone_bytes
                ))
                .arg("--time_based")
                .arg(format!("--runtime={}", args.seconds))
                .arg("--output-format=json")
                .stdin(Stdio::null())
                .output()
                .map_err(|e| BenchError::Check(format!("cannot run fio: {e}")))?;
            parse_fio(&out, name, &args.device)
        }

        /// zftl's backend alone: 128 KiB appends over the raw region.
        fn backend_job(&mut self) -> Result<Rate, BenchError> {
            self.reset_raw()?;
            let (first, count) = (self.raw_first, self.zone_count);
            let depth = BACKEND_DEPTH;
            let window = self.window();
            let dev = &mut self.drv.backend_mut().inner;
            let g = dev.geometry().clone();
            let n = (32u32).min(g.max_append_blocks);
            let bytes = n as usize * g.block_size_bytes as usize;
            // Blocks handed out per zone; a zone is used until it is full.
            let mut zone = first;
            let mut planned = 0u64;
            let (mut done, mut in_flight) = (0u64, 0usize);
            let mut out = Vec::new();
            let t0 = Instant::now();
            loop {
                let open = t0.elapsed() < window;
                while open && in_flight < depth {
                    if planned + u64::from(n) > g.zone_capacity_blocks {
                        if zone + 1 < count {
                            zone += 1;
                            planned = 0;
                            continue;
                        }
                        break; // every raw zone is full: drain, then reset
                    }
                    let command = DevCommand::Append {
                        zone,
                        data: vec![0x5a; bytes].into(),
                        oob: Vec::new(),
                    };
                    dev.submit(done + in_flight as u64, command)
                        .map_err(|e| BenchError::Check(format!("backend append: {e}")))?;
                    planned += u64::from(n);
                    in_flight += 1;
                }
                if in_flight == 0 {
                    if !open {
                        break;
                    }
                    for z in first..count {
                        dev.zone_action_sync(Some(z), ZoneAction::Reset)
                            .map_err(|e| {
                                BenchError::Check(format!("reset of raw zone {z}: {e}"))
                            })?;
                    }
                    (zone, planned) = (first, 0);
                    continue;
                }
                out.clear();
                if dev.reap(&mut out, usize::MAX) == 0 {
                    dev.wait()
                        .map_err(|e| BenchError::Check(format!("backend wait: {e}")))?;
                    dev.reap(&mut out, usize::MAX);
                }
                for c in &out {
                    if let Err(e) = &c.result {
                        return Err(BenchError::Check(format!("backend append: {e}")));
                    }
                }
                in_flight -= out.len();
                done += out.len() as u64;
            }
            Ok(Rate {
                ops: done,
                bytes: done * bytes as u64,
                secs: t0.elapsed().as_secs_f64(),
                cpu_secs: 0.0,
                sys_secs: 0.0,
                minor_faults: 0.0,
                waits: 0.0,
                caller_summed: 0,
            })
        }

        /// Host writes of `block_count` blocks through the FTL for
        /// `--seconds` with `--depth` in flight, then a flush, all timed.
        /// This thread runs the core, as the driver thread of `zftl serve
        /// --device` does; with `--caller-threads 1` a second thread makes
        /// each write's buffer and takes its data CRCs
        /// (`Request::WriteSummed`) by `zftl::Handle`'s rule, as the
        /// server's connection tasks do.
        fn ftl_job(&mut self, pattern: Pattern, block_count: u32) -> Result<Rate, BenchError> {
            let depth = self.args.depth;
            let bs = self.drv.block_size();
            let crc = self.drv.data_crc();
            let data = vec![0x5a_u8; bs * block_count as usize];
            let slots = self.drv.logical_blocks() / u64::from(block_count);
            let t0 = Instant::now();
            let (done, summed) = std::thread::scope(|scope| -> Result<(u64, u64), BenchError> {
                let source = if self.caller_threads > 0 {
                    let (tx, rx) = std::sync::mpsc::sync_channel(depth);
                    let data = &data;
                    let queued = Arc::new(AtomicUsize::new(0));
                    let waiting = Arc::clone(&queued);
                    scope.spawn(move || loop {
                        let buf = data.clone();
                        // As `zftl::Handle` does: the CRCs go to the core's
                        // thread while it is short of work.
                        let write = if caller_sums(waiting.load(Ordering::Relaxed)) {
                            match SummedBlocks::new(buf, bs, crc) {
                                Ok(blocks) => Made::Summed(blocks),
                                Err(_) => break, // not whole blocks: cannot happen
                            }
                        } else {
                            Made::Plain(buf)
                        };
                        waiting.fetch_add(1, Ordering::Relaxed);
                        if tx.send(write).is_err() {
                            break; // the job is over
                        }
                    });
                    Source::Caller {
                        rx,
                        queued,
                        summed: Cell::new(0),
                    }
                } else {
                    Source::Inline(&data)
                };
                let done = self.drive_writes(&source, pattern, block_count, slots, t0)?;
                Ok((done, source.summed()))
            })?;
            self.drv.flush()?;
            Ok(Rate {
                ops: done,
                bytes: done * data.len() as u64,
                secs: t0.elapsed().as_secs_f64(),
                cpu_secs: 0.0,
                sys_secs: 0.0,
                minor_faults: 0.0,
                waits: 0.0,
                caller_summed: summed,
            })
        }

        /// The loop of `ftl_job`: keeps `--depth` writes in flight until the
        /// window closes and all are answered; returns how many were.
        fn drive_writes(
            &mut self,
            source: &Source<'_>,
            pattern: Pattern,
            block_count: u32,
            slots: u64,
            t0: Instant,
        ) -> Result<u64, BenchError> {
            let (depth, window) = (self.args.depth, self.window());
            let (mut next_slot, mut id, mut in_flight, mut done) = (0u64, 1u64 << 62, 0usize, 0u64);
            loop {
                let open = t0.elapsed() < window;
                while open && in_flight < depth {
                    let slot = match pattern {
                        Pattern::Sequential => next_slot,
                        Pattern::Random => self.rng.below(slots),
                    };
                    // Wait for the caller thread only when nothing else can move.
                    let idle = in_flight == 0 && self.drv.device_in_flight() == 0;
                    let Some(request) = source.next(slot * u64::from(block_count), idle) else {
                        break;
                    };
                    match self.drv.try_submit(id, request) {
                        Ok(()) => {
                            id += 1;
                            in_flight += 1;
                            next_slot = (next_slot + 1) % slots;
                        }
                        Err(IoError::Busy) => break, // that write is dropped, not counted
                        Err(e) => return Err(e.into()),
                    }
                }
                if !open && in_flight == 0 {
                    return Ok(done);
                }
                self.drv.turn()?;
                while let Some(reply) = self.drv.take_reply() {
                    reply.result?;
                    in_flight -= 1;
                    done += 1;
                }
            }
        }
    }

    /// Where `ftl_job`'s writes come from.
    enum Source<'a> {
        /// Made on the core's thread, which takes their CRCs.
        Inline(&'a [u8]),
        /// Made on a caller thread, which takes their CRCs while at least
        /// `CALLER_SUMS_FROM_QUEUED` writes wait for the core's thread.
        Caller {
            rx: std::sync::mpsc::Receiver<Made>,
            /// Writes sent and not received yet.
            queued: Arc<AtomicUsize>,
            /// Writes received with their CRCs taken.
            summed: Cell<u64>,
        },
    }

    /// A write the caller thread made.
    enum Made {
        Summed(SummedBlocks),
        /// The core takes its CRCs.
        Plain(Vec<u8>),
    }

    impl Source<'_> {
        /// Writes handed over with their CRCs taken by the caller thread.
        fn summed(&self) -> u64 {
            match self {
                Source::Inline(_) => 0,
                Source::Caller { summed, .. } => summed.get(),
            }
        }

        /// The next write, to `lba`; `None` if the caller thread has none
        /// ready and `wait` is false.
        fn next(&self, lba: u64, wait: bool) -> Option<Request> {
            match self {
                Source::Inline(data) => Some(Request::Write {
                    lba,
                    data: data.to_vec(),
                    fua: false,
                }),
                Source::Caller { rx, queued, summed } => {
                    let made = if wait {
                        rx.recv().ok()
                    } else {
                        rx.try_recv().ok()
                    }?;
                    queued.fetch_sub(1, Ordering::Relaxed);
                    Some(match made {
                        Made::Summed(blocks) => {
                            summed.set(summed.get() + 1);
                            Request::WriteSummed {
                                lba,
                                blocks,
                                fua: false,
                            }
                        }
                        Made::Plain(data) => Request::Write {
                            lba,
                            data,
                            fua: false,
                        },
                    })
                }
            }
        }
    }

    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Pattern {
        Sequential,
        Random,
    }

    /// The write rate of one fio run from its JSON output.
    fn parse_fio(
        out: &std::process::Output,
        name: &str,
        device: &Path,
    ) -> Result<Rate, BenchError> {
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let fail = |why: String| {
            BenchError::Check(format!(
                "fio {name} on {}: {why}\nfio stderr: {}\nfio stdout: {}",
                device.display(),
                stderr.trim(),
                stdout.trim()
            ))
        };
        let job = super::super::fio_job(out, fail)?;
        let w = &job["write"];
        let ops = w["total_ios"]
            .as_u64()
            .ok_or_else(|| fail("no write.total_ios".into()))?;
        let bytes = w["io_bytes"]
            .as_u64()
            .ok_or_else(|| fail("no write.io_bytes".into()))?;
        let runtime_ms = w["runtime"]
            .as_f64()
            .ok_or_else(|| fail("no write.runtime".into()))?;
        if ops == 0 || runtime_ms <= 0.0 {
            return Err(fail("measured no writes".into()));
        }
        Ok(Rate {
            ops,
            bytes,
            secs: runtime_ms / 1000.0,
            cpu_secs: 0.0,
            sys_secs: 0.0,
            minor_faults: 0.0,
            waits: 0.0,
            caller_summed: 0,
        })
    }
}
