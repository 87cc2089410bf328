//! `zftl bench zns`: zftl on a real (or QEMU-emulated) NVMe ZNS namespace
//! against the raw namespace, in one run on one device, both sides doing
//! the same work: `--jobs` commands in flight of the same size, the same
//! process tuning.
//!
//! The namespace is split: the last `--raw-zones` zones are the raw
//! region, the others hold zftl (formatted through an adapter that shows
//! the FTL only its zones), so raw and zftl jobs can alternate without
//! reformatting. The jobs run in two phases, each `--rounds` rounds of
//! `--seconds` per job: first the 128 KiB ones, then the 4 KiB ones, so
//! each zftl job measures its workload's steady state rather than the
//! switch from the other one:
//!
//! * `raw_seq128k`, `raw_seq4k`: fio's `io_uring_cmd` engine
//!   (`cmd_type=nvme`, `zonemode=zbd`), `--jobs` fio jobs each writing
//!   its own zones of the raw region sequentially at iodepth 1 (a zone
//!   takes one regular write at a time), fio resetting them as it wraps;
//! * `zftl_seq128k`, `zftl_randwrite4k`: the FTL through
//!   `zftl::handle::AsyncHandle` (its driver thread, as `zftl serve
//!   --device` runs it), `--jobs` tasks on one caller thread, each with
//!   one write in flight: 128 KiB writes, each task sequential in its own
//!   part of the volume, then 4 KiB writes at uniformly random addresses
//!   of the whole volume. Each ends with a flush inside its timed window:
//!   only data on the device counts. Random writes run garbage collection;
//!   the media blocks written per host block say how much. zftl's device
//!   writes (appends gathered from its write buffer) and the blocks it had
//!   in flight are recorded beside the rates.
//!
//! Between jobs zftl is shut down (flush, checkpoint) and mounted again,
//! so nothing of it runs while fio does.
//!
//! Ratios per round (each from jobs run minutes apart at most, so load
//! drift on a shared machine skews a round, not the result), with the
//! median and the minimum: `seq128k_ratio` = zftl seq 128 KiB ÷ raw seq
//! 128 KiB MiB/s and `randwrite4k_vs_raw_seq4k` = zftl random 4 KiB ÷ raw
//! sequential 4 KiB IOPS (the FTL turns random writes into zone appends;
//! the raw device can only take sequential ones).
//!
//! Process tuning goes to both sides or neither: by default glibc's
//! allocator keeps freed memory, in zftl's process (`mallopt`,
//! `zftl_zns::keep_freed_memory`) and in fio's (the same settings through
//! `GLIBC_TUNABLES`); `--allocator-default` leaves both as they are.
//! `--cpu-costs` adds the guest's rate of each per-byte step of a zftl
//! write and the ratio they alone would allow.
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
    /// Rounds of all jobs; every round is reported, with the median and
    /// the minimum.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: u32,
    /// Commands in flight on each side: fio jobs on distinct zones at
    /// iodepth 1, and zftl writes (tasks with one write each).
    #[arg(long, value_name = "N", default_value_t = 4)]
    pub jobs: u32,
    /// Zones at the end of the namespace for the raw jobs, split evenly
    /// among them (zftl gets the others).
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub raw_zones: u32,
    /// Seed of the random addresses.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Also measure, before the jobs, the rate of the per-byte work a zftl
    /// write does on this CPU (each data CRC implementation, the copies):
    /// `cpu_costs` in the report.
    #[arg(long)]
    pub cpu_costs: bool,
    /// Leave glibc's allocator as it is, in zftl's process and in fio's.
    /// By default both keep freed memory (zftl through `mallopt`, fio
    /// through `GLIBC_TUNABLES`): with glibc's defaults zftl's 128 KiB and
    /// 512 KiB buffers are mapped, faulted in and handed back again and
    /// again, which an emulated CPU pays dearly.
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

/// One job: each round's rate, their median and minimum.
#[derive(Debug, Serialize)]
pub struct JobReport {
    pub name: &'static str,
    /// `fio io_uring_cmd` or `zftl`.
    pub engine: &'static str,
    pub pattern: &'static str,
    pub block_size_bytes: u64,
    /// Host commands in flight: fio jobs at iodepth 1, or zftl tasks with
    /// one write each.
    pub commands_in_flight: u32,
    pub iops: f64,
    pub iops_min: f64,
    pub mib_per_s: f64,
    pub iops_per_round: Vec<f64>,
    /// CPU time of the job's process (zftl itself, or the fio children) ÷
    /// wall time, over all rounds: near 1 means the job was bound by one
    /// (guest) CPU, not by the device; zftl's counts its caller thread and
    /// its driver thread, so it may reach 2.
    pub cpu_busy_fraction: f64,
    /// The part of `cpu_busy_fraction` spent in the kernel.
    pub cpu_sys_fraction: f64,
    /// Minor page faults of the job's process per operation (fresh memory
    /// the allocator took from the kernel; for fio including its start-up).
    pub minor_faults_per_op: f64,
    /// zftl jobs: media blocks written per host block (GC, tags, notes),
    /// over all rounds and in each.
    pub media_blocks_per_host_block: Option<f64>,
    pub media_blocks_per_host_block_per_round: Option<Vec<f64>>,
    /// zftl jobs: what zftl sent the device: blocks per write or append,
    /// and the write blocks it had in flight each time it polled the
    /// device (fio: `commands_in_flight` × the block size).
    pub device_blocks_per_write: Option<f64>,
    pub device_write_blocks_in_flight: Option<f64>,
    /// zftl jobs: of the writes and appends zftl sent the device, the
    /// share that went as a vector of the host's buffers (no copy), and
    /// the share copied into one buffer first; the rest went in the one
    /// buffer their bytes were in (`zftl_zns::WriteBuffers`).
    pub device_writes_vectored_fraction: Option<f64>,
    pub device_writes_copied_fraction: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct ZnsBenchReport {
    pub device: String,
    pub fio_version: String,
    pub seconds_per_job: u64,
    pub rounds: u32,
    pub jobs_in_flight: u32,
    pub raw_zones: u32,
    pub zone_size_bytes: u64,
    pub zone_capacity_bytes: u64,
    pub zone_count: u32,
    pub logical_bytes: u64,
    pub jobs: Vec<JobReport>,
    /// zftl sequential 128 KiB ÷ raw sequential 128 KiB (MiB/s): median
    /// and minimum of the rounds' ratios, and each round's.
    pub seq128k_ratio: f64,
    pub seq128k_ratio_min: f64,
    pub seq128k_ratio_per_round: Vec<f64>,
    /// zftl random 4 KiB writes ÷ raw sequential 4 KiB writes (IOPS).
    pub randwrite4k_vs_raw_seq4k: f64,
    pub randwrite4k_vs_raw_seq4k_min: f64,
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
    /// Whether both processes' allocators were told to keep freed memory
    /// (see `--allocator-default`).
    pub keep_freed_memory: bool,
    /// CPUs this process may run on.
    pub cpus: usize,
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
            "{} commands in flight on each side; {} CPUs; allocators keep freed memory: {}",
            self.jobs_in_flight, self.cpus, self.keep_freed_memory
        ));
        t.section("jobs (median IOPS, minimum, each round)");
        for j in &self.jobs {
            let mut extra = String::new();
            if let (Some(b), Some(f)) = (j.device_blocks_per_write, j.device_write_blocks_in_flight)
            {
                extra = format!("  device writes {b:.1} blocks, {f:.0} blocks in flight");
            }
            t.row(
                j.name,
                format!(
                    "{:>9.0} IOPS (min {:.0}, rounds {:?}) {:>7.1} MiB/s  cpu {:.2} (sys {:.2})  ({}, {} {} B){}",
                    j.iops,
                    j.iops_min,
                    j.iops_per_round,
                    j.mib_per_s,
                    j.cpu_busy_fraction,
                    j.cpu_sys_fraction,
                    j.engine,
                    j.pattern,
                    j.block_size_bytes,
                    extra
                ),
            );
        }
        t.section("ratios (median, min, each round)");
        t.row(
            "seq128k_ratio",
            format!(
                "{} {} {:?}",
                self.seq128k_ratio, self.seq128k_ratio_min, self.seq128k_ratio_per_round
            ),
        );
        t.row(
            "randwrite4k_vs_raw_seq4k",
            format!(
                "{} {} {:?}",
                self.randwrite4k_vs_raw_seq4k,
                self.randwrite4k_vs_raw_seq4k_min,
                self.randwrite4k_vs_raw_seq4k_per_round
            ),
        );
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
mod imp;
