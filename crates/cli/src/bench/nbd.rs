//! `zftl bench nbd`: fio's `nbd` engine against three NBD servers in one
//! run — `zftl serve --memory-mib` (this binary, on a simulated device held
//! in memory, timing off), `nbdkit memory` and `qemu-nbd` serving a raw file
//! on tmpfs — and zftl's ratio to the best peer per job.
//!
//! For each server: start it on a free 127.0.0.1 port, wait until it
//! answers an NBD handshake, fill the measured region once with 1 MiB
//! sequential writes (not measured: reads then hit written data everywhere,
//! not holes), run the jobs (4 KiB random writes, 4 KiB random reads, both
//! at iodepth 16, then 128 KiB sequential writes at iodepth 16), each for
//! `--seconds` over the first `--size-mib` of the export, then kill it.
//!
//! The external tools are not installed from here: a missing one stops the
//! bench with the Debian package to install. Servers are spawned with
//! `std::process::Command` and killed by their pid (`Child::kill`) when the
//! server's guard drops, on success and on every error path.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{ratio, round, BenchError, NbdArgs};
use crate::report::Text;

const MIB: u64 = 1 << 20;
const IODEPTH: u32 = 16;

/// One fio job of the benchmark.
#[derive(Clone, Copy)]
struct JobSpec {
    name: &'static str,
    rw: &'static str,
    block_size: u64,
}

const JOBS: [JobSpec; 3] = [
    JobSpec {
        name: "randwrite-4k",
        rw: "randwrite",
        block_size: 4096,
    },
    JobSpec {
        name: "randread-4k",
        rw: "randread",
        block_size: 4096,
    },
    JobSpec {
        name: "seqwrite-128k",
        rw: "write",
        block_size: 128 * 1024,
    },
];

#[derive(Debug, Serialize)]
pub struct NbdReport {
    pub seconds: u64,
    pub size_mib: u64,
    pub iodepth: u32,
    pub fio_version: String,
    pub servers: Vec<ServerResult>,
    /// zftl's IOPS ÷ the best peer's IOPS, per job.
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
    /// The unmeasured fill of the region with 1 MiB writes.
    pub prefill_mib_s: f64,
    pub jobs: Vec<JobResult>,
}

#[derive(Debug, Serialize)]
pub struct JobResult {
    pub job: String,
    pub rw: String,
    pub block_size_bytes: u64,
    pub iodepth: u32,
    pub iops: f64,
    pub mib_s: f64,
    pub runtime_ms: u64,
}

#[derive(Debug, Serialize)]
pub struct JobRatio {
    pub job: String,
    pub zftl_iops: f64,
    pub best_peer: String,
    pub best_peer_iops: f64,
    pub ratio: f64,
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
fn export_size(addr: SocketAddr) -> std::io::Result<u64> {
    const IHAVEOPT: u64 = 0x4948_4156_454F_5054;
    let bad = |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut hello = [0u8; 18];
    s.read_exact(&mut hello)?;
    if &hello[..8] != b"NBDMAGIC"
        || u64::from_be_bytes(hello[8..16].try_into().unwrap()) != IHAVEOPT
    {
        return Err(bad("not a newstyle NBD server"));
    }
    let server_flags = u16::from_be_bytes([hello[16], hello[17]]);
    // FIXED_NEWSTYLE, and NO_ZEROES when the server offers it.
    let client_flags: u32 = 1 | u32::from(server_flags & 2);
    let mut out = Vec::new();
    out.extend_from_slice(&client_flags.to_be_bytes());
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&1u32.to_be_bytes()); // NBD_OPT_EXPORT_NAME
    out.extend_from_slice(&0u32.to_be_bytes()); // "" (the default export)
    s.write_all(&out)?;
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply)?;
    if server_flags & 2 == 0 {
        let mut zeroes = [0u8; 124];
        s.read_exact(&mut zeroes)?;
    }
    let size = u64::from_be_bytes(reply[..8].try_into().unwrap());
    // NBD_CMD_DISC.
    let mut disc = Vec::with_capacity(28);
    disc.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    disc.extend_from_slice(&0u16.to_be_bytes());
    disc.extend_from_slice(&2u16.to_be_bytes());
    disc.extend_from_slice(&1u64.to_be_bytes());
    disc.extend_from_slice(&0u64.to_be_bytes());
    disc.extend_from_slice(&0u32.to_be_bytes());
    let _ = s.write_all(&disc);
    Ok(size)
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
    runtime_ms: u64,
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
    let runtime_ms = side["runtime"].as_u64().unwrap_or(0);
    if iops <= 0.0 {
        return Err(fail(format!("measured no {dir}s")));
    }
    Ok(Measured {
        iops,
        bw_bytes,
        runtime_ms,
    })
}

fn bench_server(
    which: &str,
    tools: &Tools,
    args: &NbdArgs,
    scratch: &Path,
) -> Result<ServerResult, BenchError> {
    let (mut server, command) = start(which, tools, args.size_mib, scratch)?;
    let export_bytes = server.wait_ready(Duration::from_secs(60))?;
    if export_bytes < args.size_mib * MIB {
        return Err(BenchError::Check(format!(
            "{which} exports {export_bytes} bytes, less than --size-mib {}",
            args.size_mib
        )));
    }
    eprintln!("bench nbd: {which}: filling {} MiB", args.size_mib);
    let prefill_spec = JobSpec {
        name: "prefill",
        rw: "write",
        block_size: MIB,
    };
    let prefill = fio(tools, &server, scratch, &prefill_spec, args.size_mib, None)?;
    let mut jobs = Vec::new();
    for spec in &JOBS {
        eprintln!("bench nbd: {which}: {} for {}s", spec.name, args.seconds);
        let m = fio(
            tools,
            &server,
            scratch,
            spec,
            args.size_mib,
            Some(args.seconds),
        )?;
        jobs.push(JobResult {
            job: spec.name.into(),
            rw: spec.rw.into(),
            block_size_bytes: spec.block_size,
            iodepth: IODEPTH,
            iops: round(m.iops, 0),
            mib_s: round(m.bw_bytes / MIB as f64, 1),
            runtime_ms: m.runtime_ms,
        });
    }
    // Still alive after the jobs? (A crash mid-run would have failed fio.)
    if let Ok(Some(status)) = server.child.try_wait() {
        return Err(BenchError::Check(format!(
            "{which} exited during the run ({status}); {}",
            server.log_tail()
        )));
    }
    drop(server);
    Ok(ServerResult {
        server: which.into(),
        command,
        export_bytes,
        prefill_mib_s: round(prefill.bw_bytes / MIB as f64, 1),
        jobs,
    })
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
    if args.seconds == 0 {
        return Err(BenchError::Args("--seconds must be at least 1".into()));
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
        servers.push(bench_server(which, &tools, args, &scratch.0)?);
        // Free the tmpfs space of one server before the next.
        for f in ["zftl.img", "qemu-nbd.raw"] {
            let _ = std::fs::remove_file(scratch.0.join(f));
        }
    }
    drop(scratch);
    let ratios: Vec<JobRatio> = JOBS
        .iter()
        .enumerate()
        .map(|(i, spec)| {
            let zftl_iops = servers[0].jobs[i].iops;
            let best = servers[1..]
                .iter()
                .max_by(|a, b| a.jobs[i].iops.total_cmp(&b.jobs[i].iops))
                .expect("two peers");
            JobRatio {
                job: spec.name.into(),
                zftl_iops,
                best_peer: best.server.clone(),
                best_peer_iops: best.jobs[i].iops,
                ratio: round(ratio(zftl_iops, best.jobs[i].iops), 3),
            }
        })
        .collect();
    let min_ratio = ratios.iter().map(|r| r.ratio).fold(f64::INFINITY, f64::min);
    Ok(NbdReport {
        seconds: args.seconds,
        size_mib: args.size_mib,
        iodepth: IODEPTH,
        fio_version,
        servers,
        ratios,
        min_ratio,
    })
}

impl NbdReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "nbd: fio nbd engine ({}), iodepth {}, {} s per job over {} MiB (filled first)",
            self.fio_version, self.iodepth, self.seconds, self.size_mib
        ));
        for s in &self.servers {
            t.section(&s.server);
            t.row("command", &s.command);
            t.row("export bytes", s.export_bytes);
            t.row("prefill MiB/s", s.prefill_mib_s);
            for j in &s.jobs {
                t.row(&j.job, format!("{} IOPS, {} MiB/s", j.iops, j.mib_s));
            }
        }
        t.section("zftl / best peer (IOPS)");
        for r in &self.ratios {
            t.row(
                &r.job,
                format!(
                    "{} ({} vs {} {})",
                    r.ratio, r.zftl_iops, r.best_peer, r.best_peer_iops
                ),
            );
        }
        t.row("min ratio", self.min_ratio);
        t.render()
    }
}
