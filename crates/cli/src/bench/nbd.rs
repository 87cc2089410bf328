//! `zftl bench nbd`: fio's `nbd` engine against three NBD servers in one
//! run — `zftl serve --memory-mib` (this binary, on a simulated device held
//! in memory, timing off), `nbdkit memory` and `qemu-nbd` serving a raw file
//! on tmpfs — and zftl's ratio to the best peer per job.
//!
//! All three servers run for the whole bench, each on a free 127.0.0.1
//! port; each is filled with two passes of 1 MiB sequential writes over
//! the first `--size-mib` of its export (not measured; see
//! [`PREFILL_PASSES`]; reads then hit written data everywhere, not holes).
//! Then each job in turn (128 KiB sequential writes, 4 KiB random writes,
//! 4 KiB random reads, all at iodepth 16) runs `--rounds` rounds of
//! `--seconds` against each server, the servers in a rotated order each
//! round. A job's ratio is the median over rounds of zftl's IOPS ÷ the
//! best peer's IOPS in the same round: on a shared machine the load drifts
//! between minutes, and measuring one server after the other skewed single
//! runs by ±30 %. All rounds of a job run before the next job, so each
//! measures its workload's steady state, as SNIA's performance test spec
//! does; the first round of a job may still carry the switch from the job
//! before.
//!
//! The external tools are not installed from here: a missing one stops the
//! bench with the Debian package to install. Servers are spawned with
//! `std::process::Command` and killed by their pid (`Child::kill`) when the
//! server's guard drops, on success and on every error path.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;
use zftl_nbd::client::Client;

use super::{median, ratio, round, BenchError, NbdArgs};
use crate::report::Text;

const MIB: u64 = 1 << 20;
const IODEPTH: u32 = 16;
/// Sequential passes of the fill: as SNIA's performance test spec
/// preconditions a drive (twice its capacity, sequentially), so
/// that an FTL has rewritten every block once and is past its first
/// garbage collection (and, on the simulator, has touched its memory)
/// before anything is measured.
const PREFILL_PASSES: u32 = 2;

/// One fio job of the benchmark.
#[derive(Clone, Copy)]
struct JobSpec {
    name: &'static str,
    rw: &'static str,
    block_size: u64,
    /// Passes over the region (fio's `loops`); untimed jobs only.
    loops: u32,
}

/// In the order they run. Sequential writes first, right after the
/// sequential fill; random writes next, then random reads of their data.
const JOBS: [JobSpec; 3] = [
    JobSpec {
        name: "seqwrite-128k",
        rw: "write",
        block_size: 128 * 1024,
        loops: 1,
    },
    JobSpec {
        name: "randwrite-4k",
        rw: "randwrite",
        block_size: 4096,
        loops: 1,
    },
    JobSpec {
        name: "randread-4k",
        rw: "randread",
        block_size: 4096,
        loops: 1,
    },
];

#[derive(Debug, Serialize)]
pub struct NbdReport {
    pub seconds: u64,
    pub rounds: u32,
    pub size_mib: u64,
    pub iodepth: u32,
    pub fio_version: String,
    pub servers: Vec<ServerResult>,
    /// zftl's IOPS ÷ the best peer's IOPS, per job (median over rounds).
    pub ratios: Vec<JobRatio>,
    /// The smallest of `ratios` (the target is ≥ 1.0 on every job).
    pub min_ratio: f64,
}

#[derive(Debug, Serialize)]
pub struct ServerResult {
    pub server: String,
    /// How it was started (port left out).
    pub command: String,
    pub export_bytes: u64,
    /// The unmeasured fill of the region (two passes of 1 MiB writes).
    pub prefill_mib_s: f64,
    pub jobs: Vec<JobResult>,
}

#[derive(Debug, Serialize)]
pub struct JobResult {
    pub job: String,
    pub rw: String,
    pub block_size_bytes: u64,
    pub iodepth: u32,
    /// Medians over rounds.
    pub iops: f64,
    pub mib_s: f64,
    pub iops_per_round: Vec<f64>,
}

#[derive(Debug, Serialize)]
pub struct JobRatio {
    pub job: String,
    /// Medians over rounds; the best peer is the one with the higher median.
    pub zftl_iops: f64,
    pub best_peer: String,
    pub best_peer_iops: f64,
    /// The median of `ratio_per_round`, and the smallest.
    pub ratio: f64,
    pub ratio_min: f64,
    /// zftl's IOPS ÷ the better peer's IOPS in the same round.
    pub ratio_per_round: Vec<f64>,
}

/// A spawned server, killed by its pid and reaped when dropped.
struct Server {
    name: &'static str,
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn uri(&self) -> String {
        format!("nbd://127.0.0.1:{}", self.port)
    }

    /// The last lines of its log, for error messages.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(8)..].join("\n");
        if tail.is_empty() {
            String::from("(its log is empty)")
        } else {
            format!("its log ends with:\n{tail}")
        }
    }

    /// Waits until the server completes a handshake; returns the export size.
    fn wait_ready(&mut self, timeout: Duration) -> Result<u64, BenchError> {
        let started = Instant::now();
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, self.port));
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(BenchError::Check(format!(
                    "{} exited at start ({status}); {}",
                    self.name,
                    self.log_tail()
                )));
            }
            match export_size(addr) {
                Ok(size) => return Ok(size),
                Err(e) if started.elapsed() > timeout => {
                    return Err(BenchError::Check(format!(
                        "{} did not answer an NBD handshake on {addr} within {}s ({e}); {}",
                        self.name,
                        timeout.as_secs(),
                        self.log_tail()
                    )));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL by pid; harmless if it already exited. Then reap it.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory, removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fixed newstyle handshake with NBD_OPT_EXPORT_NAME of the default export
/// (""), then NBD_CMD_DISC: the export size, and proof the server is up.
fn export_size(addr: SocketAddr) -> Result<u64, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(async {
        let probe = async {
            let stream = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| e.to_string())?;
            let mut nbd = Client::greet(stream).await.map_err(|e| e.to_string())?;
            let export = nbd.export_name("").await.map_err(|e| e.to_string())?;
            let _ = nbd.disconnect().await;
            Ok(export.size_bytes)
        };
        tokio::time::timeout(Duration::from_secs(5), probe)
            .await
            .map_err(|_| "no answer within 5 s".to_string())?
    })
}

/// A port nothing listens on now (bound, read, released).
fn free_port() -> Result<u16, BenchError> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| BenchError::Check(format!("cannot find a free port on 127.0.0.1: {e}")))
}

/// `tool` on $PATH, or an error naming the Debian package to install.
fn require(tool: &str, package: &str) -> Result<PathBuf, BenchError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(tool))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            BenchError::Args(format!(
                "`{tool}` is not installed (not on PATH): install the Debian package `{package}` \
                 (apt-get install {package})"
            ))
        })
}

fn spawn(
    name: &'static str,
    program: &Path,
    args: &[String],
    port: u16,
    scratch: &Path,
) -> Result<Server, BenchError> {
    let log = scratch.join(format!("{name}.log"));
    let file = std::fs::File::create(&log)
        .map_err(|e| BenchError::Check(format!("cannot create {}: {e}", log.display())))?;
    let err = file
        .try_clone()
        .map_err(|e| BenchError::Check(format!("cannot reopen {}: {e}", log.display())))?;
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| BenchError::Check(format!("cannot start {}: {e}", program.display())))?;
    Ok(Server {
        name,
        child,
        port,
        log,
    })
}

struct Tools {
    fio: PathBuf,
    nbdkit: PathBuf,
    qemu_nbd: PathBuf,
    zftl: PathBuf,
}

/// Starts one server; returns it and how it was started.
fn start(
    which: &str,
    tools: &Tools,
    size_mib: u64,
    scratch: &Path,
) -> Result<(Server, String), BenchError> {
    let port = free_port()?;
    let (name, program, args, shown): (&'static str, &Path, Vec<String>, String) = match which {
        "zftl" => {
            crate::image::memory_config(size_mib)
                .map_err(|e| BenchError::Args(format!("--size-mib: {e}")))?;
            let args = vec![
                "serve".into(),
                "--memory-mib".into(),
                size_mib.to_string(),
                "--listen".into(),
                format!("127.0.0.1:{port}"),
            ];
            let shown = format!("zftl serve --memory-mib {size_mib} (timing off)");
            ("zftl", &tools.zftl, args, shown)
        }
        "nbdkit" => {
            let args = vec![
                "--foreground".into(),
                "--exit-with-parent".into(),
                format!("--port={port}"),
                "--ip-addr=127.0.0.1".into(),
                "memory".into(),
                format!("{size_mib}M"),
            ];
            let shown = format!("nbdkit --foreground --ip-addr=127.0.0.1 memory {size_mib}M");
            ("nbdkit", &tools.nbdkit, args, shown)
        }
        "qemu-nbd" => {
            let file = scratch.join("qemu-nbd.raw");
            std::fs::File::create(&file)
                .and_then(|f| f.set_len(size_mib * MIB))
                .map_err(|e| BenchError::Check(format!("cannot create {}: {e}", file.display())))?;
            let args = vec![
                "-f".into(),
                "raw".into(),
                "-b".into(),
                "127.0.0.1".into(),
                "-p".into(),
                port.to_string(),
                "-t".into(),
                file.display().to_string(),
            ];
            let shown = format!("qemu-nbd -f raw -b 127.0.0.1 -t {}", file.display());
            ("qemu-nbd", &tools.qemu_nbd, args, shown)
        }
        other => unreachable!("unknown server {other}"),
    };
    let server = spawn(name, program, &args, port, scratch)?;
    Ok((server, shown))
}

/// What one fio run measured.
struct Measured {
    iops: f64,
    bw_bytes: f64,
}

/// Runs fio's nbd engine once and parses its JSON output.
fn fio(
    tools: &Tools,
    server: &Server,
    scratch: &Path,
    spec: &JobSpec,
    size_mib: u64,
    seconds: Option<u64>,
) -> Result<Measured, BenchError> {
    let JobSpec {
        name,
        rw,
        block_size,
        loops,
    } = *spec;
    let mut cmd = Command::new(&tools.fio);
    cmd.current_dir(scratch)
        .arg(format!("--name={name}"))
        .arg("--ioengine=nbd")
        .arg(format!("--uri={}", server.uri()))
        .arg(format!("--rw={rw}"))
        .arg(format!("--bs={block_size}"))
        .arg(format!("--iodepth={IODEPTH}"))
        .arg(format!("--size={size_mib}M"))
        .arg("--numjobs=1")
        .arg("--norandommap")
        .arg("--randrepeat=0")
        .arg(format!("--loops={loops}"))
        .arg("--output-format=json")
        .stdin(Stdio::null());
    if let Some(s) = seconds {
        cmd.arg("--time_based").arg(format!("--runtime={s}"));
    }
    let out = cmd
        .output()
        .map_err(|e| BenchError::Check(format!("cannot run fio: {e}")))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let fail = |why: String| {
        BenchError::Check(format!(
            "fio {name} against {} ({}): {why}\nfio stderr: {}\nserver: {}",
            server.name,
            server.uri(),
            stderr.trim(),
            server.log_tail()
        ))
    };
    let job = super::fio_job(&out, fail)?;
    let dir = if rw.contains("read") { "read" } else { "write" };
    let side = &job[dir];
    let iops = side["iops"]
        .as_f64()
        .ok_or_else(|| fail(format!("no {dir}.iops")))?;
    // fio's "bw" is KiB/s; "bw_bytes" is bytes/s.
    let bw_bytes = side["bw_bytes"]
        .as_f64()
        .or_else(|| side["bw"].as_f64().map(|k| k * 1024.0))
        .ok_or_else(|| fail(format!("no {dir}.bw")))?;
    if iops <= 0.0 {
        return Err(fail(format!("measured no {dir}s")));
    }
    Ok(Measured { iops, bw_bytes })
}

/// A server started and filled, and what it measured so far.
struct Running {
    server: Server,
    command: String,
    export_bytes: u64,
    prefill_mib_s: f64,
    /// Per job of [`JOBS`], one measurement per round.
    rates: Vec<Vec<Measured>>,
}

/// Starts `which`, waits for its handshake and fills the measured region.
fn start_filled(
    which: &str,
    tools: &Tools,
    args: &NbdArgs,
    scratch: &Path,
) -> Result<Running, BenchError> {
    let (mut server, command) = start(which, tools, args.size_mib, scratch)?;
    let export_bytes = server.wait_ready(Duration::from_secs(60))?;
    if export_bytes < args.size_mib * MIB {
        return Err(BenchError::Check(format!(
            "{which} exports {export_bytes} bytes, less than --size-mib {}",
            args.size_mib
        )));
    }
    eprintln!(
        "bench nbd: {which}: filling {} MiB, {PREFILL_PASSES} passes",
        args.size_mib
    );
    let prefill_spec = JobSpec {
        name: "prefill",
        rw: "write",
        block_size: MIB,
        loops: PREFILL_PASSES,
    };
    let prefill = fio(tools, &server, scratch, &prefill_spec, args.size_mib, None)?;
    Ok(Running {
        server,
        command,
        export_bytes,
        prefill_mib_s: round(prefill.bw_bytes / MIB as f64, 1),
        rates: JOBS.iter().map(|_| Vec::new()).collect(),
    })
}

impl Running {
    /// An error if the server has exited (a crash mid-job fails fio, but
    /// one between jobs would go unseen).
    fn check_alive(&mut self) -> Result<(), BenchError> {
        match self.server.child.try_wait() {
            Ok(Some(status)) => Err(BenchError::Check(format!(
                "{} exited during the run ({status}); {}",
                self.server.name,
                self.server.log_tail()
            ))),
            _ => Ok(()),
        }
    }

    fn result(&self) -> ServerResult {
        let jobs = JOBS
            .iter()
            .zip(&self.rates)
            .map(|(spec, ms)| JobResult {
                job: spec.name.into(),
                rw: spec.rw.into(),
                block_size_bytes: spec.block_size,
                iodepth: IODEPTH,
                iops: round(median(ms.iter().map(|m| m.iops)), 0),
                mib_s: round(median(ms.iter().map(|m| m.bw_bytes)) / MIB as f64, 1),
                iops_per_round: ms.iter().map(|m| round(m.iops, 0)).collect(),
            })
            .collect();
        ServerResult {
            server: self.server.name.into(),
            command: self.command.clone(),
            export_bytes: self.export_bytes,
            prefill_mib_s: self.prefill_mib_s,
            jobs,
        }
    }
}

/// zftl's ratio to the best peer on job `j`: `servers[0]` is zftl.
fn job_ratio(j: usize, servers: &[Running], results: &[ServerResult]) -> JobRatio {
    let per_round: Vec<f64> = (0..servers[0].rates[j].len())
        .map(|r| {
            let peer_best = servers[1..]
                .iter()
                .map(|s| s.rates[j][r].iops)
                .fold(0.0, f64::max);
            round(ratio(servers[0].rates[j][r].iops, peer_best), 3)
        })
        .collect();
    let best = results[1..]
        .iter()
        .max_by(|a, b| a.jobs[j].iops.total_cmp(&b.jobs[j].iops))
        .expect("two peers");
    JobRatio {
        job: JOBS[j].name.into(),
        zftl_iops: results[0].jobs[j].iops,
        best_peer: best.server.clone(),
        best_peer_iops: best.jobs[j].iops,
        ratio: round(median(per_round.iter().copied()), 3),
        ratio_min: per_round.iter().copied().fold(f64::INFINITY, f64::min),
        ratio_per_round: per_round,
    }
}

/// A scratch directory on tmpfs (/dev/shm) when there is one.
fn scratch_dir() -> Result<Scratch, BenchError> {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = base.join(format!("zftl-bench-nbd.{}.{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir)
        .map_err(|e| BenchError::Check(format!("cannot create {}: {e}", dir.display())))?;
    Ok(Scratch(dir))
}

pub fn run(args: &NbdArgs) -> Result<NbdReport, BenchError> {
    if args.seconds == 0 || args.rounds == 0 {
        return Err(BenchError::Args(
            "--seconds and --rounds must be at least 1".into(),
        ));
    }
    if args.size_mib < 16 {
        return Err(BenchError::Args("--size-mib must be at least 16".into()));
    }
    let tools = Tools {
        fio: require("fio", "fio")?,
        nbdkit: require("nbdkit", "nbdkit")?,
        qemu_nbd: require("qemu-nbd", "qemu-utils")?,
        zftl: std::env::current_exe()
            .map_err(|e| BenchError::Check(format!("cannot find the zftl binary: {e}")))?,
    };
    let fio_version = Command::new(&tools.fio)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let scratch = scratch_dir()?;
    let mut servers = Vec::new();
    for which in ["zftl", "nbdkit", "qemu-nbd"] {
        servers.push(start_filled(which, &tools, args, &scratch.0)?);
    }
    // Job by job, all rounds of one before the next: each job measures
    // its own workload's steady state, not the switch from the job before
    // (an FTL's first second of sequential writes after random ones pays
    // for collecting the zones they scattered).
    for (j, spec) in JOBS.iter().enumerate() {
        for r in 0..args.rounds as usize {
            // A rotated order, so no server always runs first or last.
            let n = servers.len();
            for k in 0..n {
                let s = &mut servers[(r + k) % n];
                eprintln!(
                    "bench nbd: {} round {}/{} on {} for {}s",
                    spec.name,
                    r + 1,
                    args.rounds,
                    s.server.name,
                    args.seconds
                );
                let m = fio(
                    &tools,
                    &s.server,
                    &scratch.0,
                    spec,
                    args.size_mib,
                    Some(args.seconds),
                )?;
                s.rates[j].push(m);
            }
            for s in &mut servers {
                s.check_alive()?;
            }
        }
    }
    let results: Vec<ServerResult> = servers.iter().map(Running::result).collect();
    let ratios: Vec<JobRatio> = (0..JOBS.len())
        .map(|j| job_ratio(j, &servers, &results))
        .collect();
    drop(servers);
    drop(scratch);
    let min_ratio = ratios.iter().map(|r| r.ratio).fold(f64::INFINITY, f64::min);
    Ok(NbdReport {
        seconds: args.seconds,
        rounds: args.rounds,
        size_mib: args.size_mib,
        iodepth: IODEPTH,
        fio_version,
        servers: results,
        ratios,
        min_ratio,
    })
}

impl NbdReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "nbd: fio nbd engine ({}), iodepth {}, {} rounds of {} s per job and server over {} MiB (filled first, {PREFILL_PASSES} passes); medians over rounds",
            self.fio_version, self.iodepth, self.rounds, self.seconds, self.size_mib
        ));
        for s in &self.servers {
            t.section(&s.server);
            t.row("command", &s.command);
            t.row("export bytes", s.export_bytes);
            t.row("prefill MiB/s", s.prefill_mib_s);
            for j in &s.jobs {
                t.row(
                    &j.job,
                    format!(
                        "{} IOPS, {} MiB/s (rounds: {:?})",
                        j.iops, j.mib_s, j.iops_per_round
                    ),
                );
            }
        }
        t.section("zftl / best peer (IOPS)");
        for r in &self.ratios {
            t.row(
                &r.job,
                format!(
                    "{}, min {} ({} vs {} {}; rounds: {:?})",
                    r.ratio,
                    r.ratio_min,
                    r.zftl_iops,
                    r.best_peer,
                    r.best_peer_iops,
                    r.ratio_per_round
                ),
            );
        }
        t.row("min ratio", self.min_ratio);
        t.render()
    }
}
