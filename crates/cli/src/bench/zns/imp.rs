//! The Linux side of `zftl bench zns` (see the parent module's docs).

use super::*;
use std::process::{Command, Stdio};
use std::time::Duration;

use zftl::handle::{AsyncHandle, Handle};
use zftl_core::backend::{
    Command as DevCommand, DeviceError, Geometry, SubmitError, ZoneId, ZoneInfo,
};
use zftl_core::{Backend, Driver, FormatOptions, FtlConfig, Request};
use zftl_sim::rng::Rng;
use zftl_zns::{Device, IoPath, WriteBuffers, ZoneAction};

use crate::bench::shape::Recorder;

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
    forward_backend!(inner: reap, wait, in_flight, clock_ns);
}

type Dev = Recorder<FirstZones>;

/// Allocations below this come from the reused heap (zftl's largest
/// per-command buffer is one append: 512 KiB on QEMU's namespace).
const KEEP_BELOW: u32 = 4 << 20;

/// The same settings for fio's glibc: `mallopt(M_MMAP_THRESHOLD,
/// KEEP_BELOW)` and `mallopt(M_TRIM_THRESHOLD, INT_MAX)`.
const FIO_TUNABLES: &str =
    "glibc.malloc.mmap_threshold=4194304:glibc.malloc.trim_threshold=2147483647";
const _: () = assert!(KEEP_BELOW == 4194304);

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
}

/// USER_HZ, the unit of /proc/<pid>/stat times (100 on every Linux ABI).
const USER_HZ: f64 = 100.0;

/// CPU seconds (user + system, and system alone) and minor page faults
/// of a process (this one, or its reaped children).
#[derive(Clone, Copy, Default)]
struct Usage {
    cpu_secs: f64,
    sys_secs: f64,
    minor_faults: f64,
}

impl Usage {
    fn since(self, before: Usage) -> Usage {
        Usage {
            cpu_secs: self.cpu_secs - before.cpu_secs,
            sys_secs: self.sys_secs - before.sys_secs,
            minor_faults: self.minor_faults - before.minor_faults,
        }
    }
}

/// The usage of this process and of its reaped children, from
/// /proc/self/stat; zeros if it cannot be read.
fn usage() -> (Usage, Usage) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return Default::default();
    };
    // Fields after the command name, which may hold spaces: minflt is
    // field 10, cminflt 11, utime 14, stime 15, cutime 16, cstime 17.
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
    };
    let children = Usage {
        cpu_secs: (at(16) + at(17)) / USER_HZ,
        sys_secs: at(17) / USER_HZ,
        minor_faults: at(11),
    };
    (own, children)
}

impl Rate {
    fn iops(&self) -> f64 {
        self.ops as f64 / self.secs
    }
    fn mib_per_s(&self) -> f64 {
        self.bytes as f64 / MIB / self.secs
    }
}

/// The jobs, in report order.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Job {
    RawSeq128k,
    RawSeq4k,
    FtlSeq128k,
    FtlRand4k,
}

const JOBS: [Job; 4] = [
    Job::RawSeq128k,
    Job::RawSeq4k,
    Job::FtlSeq128k,
    Job::FtlRand4k,
];

/// The jobs in the order they run: all rounds of a phase before the
/// next, so each zftl job measures its workload's steady state (the
/// sequential rounds on a volume only sequential writes have touched),
/// not the switch from the other workload.
const PHASES: [&[Job]; 2] = [
    &[Job::RawSeq128k, Job::FtlSeq128k],
    &[Job::RawSeq4k, Job::FtlRand4k],
];

impl Job {
    fn name(self) -> &'static str {
        match self {
            Job::RawSeq128k => "raw_seq128k",
            Job::RawSeq4k => "raw_seq4k",
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
            Job::FtlSeq128k | Job::FtlRand4k => "zftl",
        }
    }
    fn pattern(self) -> &'static str {
        match self {
            Job::FtlRand4k => "random",
            _ => "sequential",
        }
    }
    fn is_ftl(self) -> bool {
        matches!(self, Job::FtlSeq128k | Job::FtlRand4k)
    }
}

/// What zftl did in one job.
#[derive(Default)]
struct FtlWork {
    host_blocks: u64,
    media_blocks: u64,
    writes: WriteBuffers,
    device_write_commands: u64,
    device_write_blocks: u64,
    /// Mean write blocks in flight when the driver polled the device.
    in_flight_blocks: f64,
}

/// Everything one run needs.
struct Bench<'a> {
    args: &'a ZnsArgs,
    fio: PathBuf,
    /// The FTL, mounted between jobs (`None` while a job has it).
    drv: Option<Driver<Dev>>,
    /// What the FTL is formatted and remounted with.
    ftl: &'a FtlConfig,
    /// Zones of the raw region: `raw_first..zone_count`.
    raw_first: ZoneId,
    zone_count: u32,
    zone_bytes: u64,
    seed: u64,
    keep_freed_memory: bool,
}

pub fn run(args: &ZnsArgs, ftl: &FtlConfig) -> Result<ZnsBenchReport, BenchError> {
    if args.seconds == 0 || args.jobs == 0 || args.rounds == 0 {
        return Err(BenchError::Args(
            "--seconds, --jobs and --rounds must be at least 1".into(),
        ));
    }
    if args.raw_zones < args.jobs || !args.raw_zones.is_multiple_of(args.jobs) {
        return Err(BenchError::Args(format!(
            "--raw-zones {} must be a multiple of --jobs {} (each fio job writes its own zones)",
            args.raw_zones, args.jobs
        )));
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
    let ftl_dev = Recorder::new(FirstZones::new(dev, raw_first));
    let drv = Driver::format(ftl_dev, &FormatOptions::default(), ftl.clone())?;
    let logical_bytes = drv.logical_blocks() * bs;
    let mut b = Bench {
        args,
        fio,
        drv: Some(drv),
        ftl,
        raw_first,
        zone_count: g.zone_count,
        zone_bytes: g.zone_size_blocks * bs,
        seed: args.seed,
        keep_freed_memory,
    };
    let mut rates: Vec<Vec<Rate>> = JOBS.iter().map(|_| Vec::new()).collect();
    let mut work: Vec<Vec<FtlWork>> = JOBS.iter().map(|_| Vec::new()).collect();
    for phase in PHASES {
        for _ in 0..args.rounds {
            for &job in phase {
                let i = JOBS.iter().position(|&j| j == job).expect("a job");
                let (rate, w) = b.measured_job(job)?;
                rates[i].push(rate);
                work[i].push(w);
            }
        }
    }
    if let Some(drv) = b.drv.take() {
        drv.shutdown()?;
    }
    let per_round = |a: usize, b: usize, f: fn(&Rate) -> f64| -> Vec<f64> {
        rates[a]
            .iter()
            .zip(&rates[b])
            .map(|(x, y)| round(ratio(f(x), f(y)), 3))
            .collect()
    };
    let min = |v: &[f64]| v.iter().copied().fold(f64::INFINITY, f64::min);
    let seq = per_round(2, 0, Rate::mib_per_s);
    let rand = per_round(3, 1, Rate::iops);
    let raw_seq128k = median(rates[0].iter().map(Rate::mib_per_s));
    let bound = cpu_costs.as_deref().map(per_byte_bound);
    let jobs = JOBS
        .iter()
        .zip(&rates)
        .zip(&work)
        .map(|((&job, r), w)| job_report(job, args.jobs, r, w))
        .collect();
    Ok(ZnsBenchReport {
        device: args.device.display().to_string(),
        fio_version,
        seconds_per_job: args.seconds,
        rounds: args.rounds,
        jobs_in_flight: args.jobs,
        raw_zones: args.raw_zones,
        zone_size_bytes: g.zone_size_blocks * bs,
        zone_capacity_bytes: g.zone_capacity_blocks * bs,
        zone_count: g.zone_count,
        logical_bytes,
        jobs,
        seq128k_ratio: round(median(seq.iter().copied()), 3),
        seq128k_ratio_min: min(&seq),
        seq128k_ratio_per_round: seq,
        randwrite4k_vs_raw_seq4k: round(median(rand.iter().copied()), 3),
        randwrite4k_vs_raw_seq4k_min: min(&rand),
        randwrite4k_vs_raw_seq4k_per_round: rand,
        target_ratio: TARGET_RATIO,
        per_byte_bound_mib_per_s: bound.map(|b| round(b, 1)),
        per_byte_bound_ratio: bound.map(|b| round(ratio(b, raw_seq128k), 3)),
        cpu_costs,
        keep_freed_memory,
        cpus,
    })
}

fn job_report(job: Job, in_flight: u32, r: &[Rate], w: &[FtlWork]) -> JobReport {
    let sum = |f: fn(&Rate) -> f64| r.iter().map(f).sum::<f64>();
    let secs = sum(|x| x.secs);
    let ops = sum(|x| x.ops as f64);
    let ftl = job.is_ftl();
    let (host, media) = w
        .iter()
        .fold((0, 0), |(h, m), x| (h + x.host_blocks, m + x.media_blocks));
    let per_block = |host: u64, media: u64| round(ratio(media as f64, host as f64), 3);
    let writes = w
        .iter()
        .fold(WriteBuffers::default(), |a, x| a.plus(x.writes));
    let share = |part: u64| {
        (ftl && writes.total() > 0).then(|| round(ratio(part as f64, writes.total() as f64), 3))
    };
    let cmds: u64 = w.iter().map(|x| x.device_write_commands).sum();
    let blocks: u64 = w.iter().map(|x| x.device_write_blocks).sum();
    let in_flight_blocks =
        w.iter().map(|x| x.in_flight_blocks).sum::<f64>() / w.len().max(1) as f64;
    JobReport {
        name: job.name(),
        engine: job.engine(),
        pattern: job.pattern(),
        block_size_bytes: job.block_bytes(),
        commands_in_flight: in_flight,
        iops: round(median(r.iter().map(Rate::iops)), 1),
        iops_min: round(r.iter().map(Rate::iops).fold(f64::INFINITY, f64::min), 1),
        mib_per_s: round(median(r.iter().map(Rate::mib_per_s)), 2),
        iops_per_round: r.iter().map(|x| round(x.iops(), 1)).collect(),
        cpu_busy_fraction: round(ratio(sum(|x| x.cpu_secs), secs), 2),
        cpu_sys_fraction: round(ratio(sum(|x| x.sys_secs), secs), 2),
        minor_faults_per_op: round(ratio(sum(|x| x.minor_faults), ops), 2),
        media_blocks_per_host_block: (ftl && host > 0).then(|| per_block(host, media)),
        media_blocks_per_host_block_per_round: (ftl && host > 0).then(|| {
            w.iter()
                .map(|x| per_block(x.host_blocks, x.media_blocks))
                .collect()
        }),
        device_blocks_per_write: (ftl && cmds > 0)
            .then(|| round(ratio(blocks as f64, cmds as f64), 2)),
        device_write_blocks_in_flight: ftl.then(|| round(in_flight_blocks, 1)),
        device_writes_vectored_fraction: share(writes.vectored),
        device_writes_copied_fraction: share(writes.copied),
    }
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
    dev.reset_all()
        .map_err(|e| BenchError::Check(format!("{}: reset of every zone: {e}", path.display())))?;
    Ok(dev)
}

impl Bench<'_> {
    fn drv(&mut self) -> &mut Driver<Dev> {
        self.drv.as_mut().expect("the FTL is mounted between jobs")
    }

    /// Runs `job` with the CPU time of the process that did the work
    /// (fio's for raw jobs) and, for zftl's, what it did.
    fn measured_job(&mut self, job: Job) -> Result<(Rate, FtlWork), BenchError> {
        let (own0, child0) = usage();
        let (mut rate, work) = match job {
            Job::RawSeq128k | Job::RawSeq4k => (self.fio_job(job)?, FtlWork::default()),
            Job::FtlSeq128k => self.ftl_job(Pattern::Sequential, 32)?,
            Job::FtlRand4k => self.ftl_job(Pattern::Random, 1)?,
        };
        let (own1, child1) = usage();
        let used = if job.is_ftl() {
            own1.since(own0)
        } else {
            child1.since(child0)
        };
        rate.cpu_secs = used.cpu_secs;
        rate.sys_secs = used.sys_secs;
        rate.minor_faults = used.minor_faults;
        Ok((rate, work))
    }

    /// Lets the FTL finish what it does (its commands would otherwise
    /// run during the raw jobs) and resets the raw region; outside any
    /// timed window.
    fn reset_raw(&mut self) -> Result<(), BenchError> {
        let (first, count) = (self.raw_first, self.zone_count);
        let drv = self.drv();
        drv.settle()?;
        let dev = &mut drv.backend_mut().inner.inner;
        if dev.in_flight() != 0 {
            return Err(BenchError::Check(format!(
                "the FTL left {} commands in flight after settling",
                dev.in_flight()
            )));
        }
        for z in first..count {
            dev.zone_action_sync(Some(z), ZoneAction::Reset)
                .map_err(|e| BenchError::Check(format!("reset of raw zone {z}: {e}")))?;
        }
        Ok(())
    }

    /// One raw fio run over the raw region: `--jobs` jobs, each on its
    /// own zones at iodepth 1.
    fn fio_job(&mut self, job: Job) -> Result<Rate, BenchError> {
        self.reset_raw()?;
        let args = self.args;
        let name = job.name();
        let per_job = u64::from(args.raw_zones / args.jobs) * self.zone_bytes;
        let mut cmd = Command::new(&self.fio);
        cmd.arg(format!("--name={name}"))
            .arg("--ioengine=io_uring_cmd")
            .arg("--cmd_type=nvme")
            .arg(format!("--filename={}", args.device.display()))
            .arg("--zonemode=zbd")
            .arg("--rw=write")
            .arg(format!("--bs={}", job.block_bytes()))
            .arg("--iodepth=1")
            .arg(format!("--numjobs={}", args.jobs))
            .arg("--group_reporting")
            .arg(format!(
                "--offset={}",
                u64::from(self.raw_first) * self.zone_bytes
            ))
            .arg(format!("--offset_increment={per_job}"))
            .arg(format!("--size={per_job}"))
            .arg("--time_based")
            .arg(format!("--runtime={}", args.seconds))
            .arg("--output-format=json")
            .stdin(Stdio::null());
        if self.keep_freed_memory {
            cmd.env("GLIBC_TUNABLES", FIO_TUNABLES);
        }
        let out = cmd
            .output()
            .map_err(|e| BenchError::Check(format!("cannot run fio: {e}")))?;
        parse_fio(&out, name, &args.device)
    }

    /// `--jobs` tasks on this thread, each with one write of
    /// `block_count` blocks in flight through an `AsyncHandle`, for
    /// `--seconds`, then a flush, all timed; then the FTL is shut down
    /// and mounted again (untimed).
    fn ftl_job(
        &mut self,
        pattern: Pattern,
        block_count: u32,
    ) -> Result<(Rate, FtlWork), BenchError> {
        let mut drv = self.drv.take().expect("mounted");
        let before = drv.stats();
        let sent0 = drv.backend().inner.inner.write_buffers();
        drv.backend_mut().take_shape();
        let bs = drv.block_size();
        let logical = drv.logical_blocks();
        let handle = AsyncHandle::from(Handle::spawn(drv));
        let window = Duration::from_secs(self.args.seconds);
        let jobs = self.args.jobs;
        let seed = self.seed;
        self.seed = self.seed.wrapping_add(1);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| BenchError::Check(format!("tokio runtime: {e}")))?;
        let t0 = Instant::now();
        let (done, secs, after, backend) = runtime.block_on(async {
            let tasks: Vec<_> = (0..u64::from(jobs))
                .map(|k| {
                    let ftl = handle.clone();
                    tokio::spawn(writer(
                        ftl,
                        k,
                        jobs,
                        pattern,
                        block_count,
                        bs,
                        logical,
                        seed,
                        t0,
                        window,
                    ))
                })
                .collect();
            let mut done = 0u64;
            for t in tasks {
                done += t
                    .await
                    .map_err(|e| BenchError::Check(format!("writer task: {e}")))??;
            }
            handle.flush().await?;
            let secs = t0.elapsed().as_secs_f64();
            let after = handle.stats().await?;
            let backend = handle.shutdown().await?;
            Ok::<_, BenchError>((done, secs, after, backend))
        })?;
        let mut backend = backend;
        let shape = backend.take_shape();
        let sent1 = backend.inner.inner.write_buffers();
        self.drv = Some(Driver::mount(backend, self.ftl.clone())?);
        let work = FtlWork {
            host_blocks: after.host_write_blocks - before.host_write_blocks,
            media_blocks: after.media_write_blocks - before.media_write_blocks,
            writes: sent1.since(sent0),
            device_write_commands: shape.write_commands,
            device_write_blocks: shape.write_blocks,
            in_flight_blocks: shape.write_blocks_in_flight(),
        };
        Ok((
            Rate {
                ops: done,
                bytes: done * u64::from(block_count) * bs as u64,
                secs,
                cpu_secs: 0.0,
                sys_secs: 0.0,
                minor_faults: 0.0,
            },
            work,
        ))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pattern {
    Sequential,
    Random,
}

/// One writer task: task `k` of `jobs` keeps one write in flight until
/// the window closes; sequential writers each go through their own
/// `1/jobs` of the volume. Returns the writes answered.
#[allow(clippy::too_many_arguments)]
async fn writer(
    ftl: AsyncHandle<Dev>,
    k: u64,
    jobs: u32,
    pattern: Pattern,
    block_count: u32,
    bs: usize,
    logical: u64,
    seed: u64,
    t0: Instant,
    window: Duration,
) -> Result<u64, BenchError> {
    let n = u64::from(block_count);
    let slots = logical / n;
    let part = (slots / u64::from(jobs)).max(1);
    let first = k * part;
    let mut rng = Rng::stream(seed, k);
    let data = vec![0x5a_u8; bs * block_count as usize];
    let (mut next, mut done) = (0u64, 0u64);
    while t0.elapsed() < window {
        let slot = match pattern {
            Pattern::Sequential => {
                let s = first + next % part;
                next += 1;
                s
            }
            Pattern::Random => rng.below(slots),
        };
        ftl.call(Request::Write {
            lba: slot * n,
            data: data.clone(),
            fua: false,
        })
        .await?;
        done += 1;
    }
    Ok(done)
}

/// The write window of one fio run from its JSON output (`--group_reporting`:
/// the jobs summed in the first).
fn parse_fio(out: &std::process::Output, name: &str, device: &Path) -> Result<Rate, BenchError> {
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
    })
}
