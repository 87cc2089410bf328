//! `zftl bench media`: how close zftl comes to what the media can do, and
//! what garbage collection does to latency, on the simulator with its
//! timing model on. Every figure is in the simulator's virtual time, so a
//! run is deterministic and free of this machine's noise.
//!
//! The device is the default one (`SimConfig::default()`: 16 LUNs, 4 MiB
//! zones 4 LUNs wide, 4 KiB pages) with the default timing (read 25 µs,
//! program 200 µs, erase 1.5 ms per LUN operation; each LUN does one
//! operation at a time, in the order they were queued, or with
//! `--nand-scheduling read-priority` reads first, host reads before GC's,
//! or with `suspend` as well host reads suspending the program or erase
//! running). The FTL has the
//! default format (7 % over-provisioning) and configuration. It is filled
//! sequentially and overwritten at random (`--warmup`), so GC runs at
//! steady state. Then:
//!
//! - **Media utilization** = LUN busy time ÷ (LUN count × elapsed virtual
//!   time) over a window of `--window-ms` virtual milliseconds, at each
//!   host queue depth of `--depths`, for 4 KiB random writes (acknowledged
//!   once in the write buffer, GC running), 4 KiB random FUA writes
//!   (acknowledged once durable), 128 KiB sequential writes and, after GC
//!   settled, 4 KiB random reads. A window ends once its last request is
//!   answered; requests still in flight when the time is up count.
//! - Beside it the **host rate against the geometry's limit**: for writes,
//!   LUNs ÷ (WA × program time + media reads per host block × read time +
//!   erases per host block × erase time), the most host blocks a second the
//!   LUNs could take with the run's own WA and GC reads; for reads, LUNs ÷
//!   read time.
//! - **Latency** (virtual time from a request's submission to its reply)
//!   of 4 KiB random reads and 4 KiB random FUA writes, `--probes` of each:
//!   idle (right after the fill: no GC, no other load; one request at a
//!   time, reads and writes taking turns) and during steady GC (beside
//!   `--load-depth` random 4 KiB writes that keep GC running; a read stream
//!   and a FUA write stream, one request each at a time, the writes cut
//!   short after `--gc-probe-ms` of virtual time): p50, p99, p99.9.
//!
//! `--svg FILE` plots utilization against depth and the latency CDFs.
//! `--zone-max-appends` with `--append-max-blocks` bounds the programs
//! queued per open data zone, `--gc-budget-us-per-ms` GC's device time
//! (docs/bench.md, "Bounded queues per zone, and GC's device-time
//! budget"); each window reports GC's device share and budget waits.

use std::collections::HashMap;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;
use zftl_core::{Backend, Driver, FormatOptions, FtlConfig, GcBudget, IoError, Request};
use zftl_sim::rng::Rng;
use zftl_sim::{NandScheduling, SimConfig, SimDevice, SimStats, Timing};

use super::shape::Recorder;
use super::{progress, ratio, round, BenchError};
use crate::report::Text;

#[derive(Debug, Args)]
pub struct MediaArgs {
    /// Host queue depths of the utilization runs.
    #[arg(
        long,
        value_name = "N,...",
        value_delimiter = ',',
        default_value = "1,4,16,64"
    )]
    pub depths: Vec<usize>,
    /// Virtual milliseconds each utilization window submits for.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub window_ms: u64,
    /// Random 4 KiB overwrites after the fill, as a multiple of the logical
    /// size, so GC is at steady state.
    #[arg(long, value_name = "F", default_value_t = 0.5)]
    pub warmup: f64,
    /// Latency samples of each kind (reads, writes) in each state.
    #[arg(long, value_name = "N", default_value_t = 5000)]
    pub probes: usize,
    /// Random 4 KiB writes in flight beside the latency probes during GC.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub load_depth: usize,
    /// Virtual milliseconds after which the probes during GC stop waiting
    /// for `--probes` FUA writes (each can take seconds there).
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub gc_probe_ms: u64,
    /// Erase blocks per LUN (the default device's 256 is 4 GiB; fewer make
    /// a smaller device of the same parallelism and timing).
    #[arg(long, value_name = "N", default_value_t = SimConfig::default().blocks_per_lun)]
    pub blocks_per_lun: u32,
    /// Seed of the addresses.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub gc: super::GcArgs,
    /// `FtlConfig::gc_max_inflight`: device commands GC may have in flight
    /// while the host is busy (default: the configuration's).
    #[arg(long, value_name = "N")]
    pub gc_max_inflight: Option<u32>,
    /// Also write the plots (utilization against depth, latency CDFs) to
    /// this SVG file.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// How each LUN orders its queued operations (`Timing::scheduling`):
    /// `fifo` in the order queued; `read-priority` a read goes before
    /// queued programs and erases, a host read also before GC's reads;
    /// `suspend` a host read also suspends the program or erase running;
    /// with `Timing`'s default suspend and resume times and bounds
    /// (docs/sim.md; the report's `timing` shows them).
    #[arg(long, value_name = "MODE", value_enum, default_value_t = Scheduling::Fifo)]
    pub nand_scheduling: Scheduling,
}

/// `--nand-scheduling`: `zftl_sim::NandScheduling` on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Scheduling {
    Fifo,
    ReadPriority,
    Suspend,
}

impl From<Scheduling> for NandScheduling {
    fn from(s: Scheduling) -> Self {
        match s {
            Scheduling::Fifo => NandScheduling::Fifo,
            Scheduling::ReadPriority => NandScheduling::ReadPriority,
            Scheduling::Suspend => NandScheduling::Suspend,
        }
    }
}

/// What the targets ask.
const TARGET_UTILIZATION: f64 = 0.9;
const TARGET_HOST_VS_LIMIT: f64 = 0.85;
const TARGET_WRITE_P999_RATIO: f64 = 4.0;
const TARGET_READ_P999_RATIO: f64 = 3.0;

/// One utilization window.
#[derive(Debug, Serialize)]
pub struct Window {
    pub depth: usize,
    pub host_requests: u64,
    pub host_blocks: u64,
    pub elapsed_ms: f64,
    pub host_blocks_per_s: f64,
    pub host_mib_per_s: f64,
    /// LUN busy time ÷ (LUNs × elapsed).
    pub utilization: f64,
    /// Media programs, reads and erase-block erases per host block.
    pub wa: f64,
    pub media_reads_per_host_block: f64,
    pub erases_per_host_block: f64,
    pub gc_copy_blocks: u64,
    /// GC's device time as its budget costs it (`FtlStats::gc_device_us`)
    /// ÷ (LUNs × elapsed), and the times a GC read waited for the budget
    /// (`--gc-budget-us-per-ms`).
    pub gc_device_share: f64,
    pub gc_budget_waits: u64,
    /// Page reads the LUNs ran ahead of operations queued before them, and
    /// programs and erases they suspended for a read (`--nand-scheduling`).
    pub reads_passed: u64,
    pub suspensions: u64,
    /// What the geometry allows at this run's WA, reads and erases.
    pub limit_host_blocks_per_s: f64,
    pub host_vs_limit: f64,
    /// The least and the most busy LUN's utilization.
    pub lun_utilization_min: f64,
    pub lun_utilization_max: f64,
    /// Each LUN's, by LUN number (zone `z` is on LUNs `4 (z mod 4)` to
    /// `4 (z mod 4) + 3` of the default device).
    pub lun_utilization: Vec<f64>,
    /// The FTL's free zones, sampled at every turn of its driver.
    pub free_zones_min: u32,
    pub free_zones_mean: f64,
    /// What the FTL sent the device: blocks per write command, and the
    /// write blocks and read commands in flight each time it polled it.
    pub device_blocks_per_write: f64,
    pub device_write_blocks_in_flight: f64,
    pub device_reads_in_flight: f64,
}

/// Utilization windows of one workload, by depth.
#[derive(Debug, Serialize)]
pub struct Series {
    pub workload: &'static str,
    pub block_bytes: u64,
    pub windows: Vec<Window>,
}

/// Latency percentiles of one kind in one state, virtual microseconds.
#[derive(Debug, Serialize)]
pub struct Percentiles {
    pub samples: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

#[derive(Debug, Serialize)]
pub struct Latency {
    pub read_idle: Percentiles,
    pub write_idle: Percentiles,
    pub read_gc: Percentiles,
    pub write_gc: Percentiles,
    /// GC copies while the GC probes ran, and while the idle ones did.
    pub gc_copy_blocks_during_probes: u64,
    pub gc_copy_blocks_during_idle_probes: u64,
    /// FUA blocks (and their padding) written into the urgent lane's zone
    /// while the GC probes ran: the host lanes had no room then
    /// (`FtlStats::urgent_lane_blocks`).
    pub urgent_lane_blocks_during_probes: u64,
    /// Victims' resets that waited for FUA appends during the GC probes
    /// (`FtlStats::gc_resets_yielded`, `--gc-reset-yields-to-urgent`).
    pub gc_resets_yielded_during_probes: u64,
    /// Over the GC probes: the `--load-depth` random writes beside them
    /// (blocks a second), GC's device time ÷ (LUNs × elapsed), the
    /// part of it that went out whatever the budget said (free zones at the
    /// reserve: `FtlStats::gc_unbudgeted_us`) and the times a GC read
    /// waited for the budget.
    pub load_write_blocks_per_s_during_probes: f64,
    /// Virtual time the GC probes took, and the FUA writes a second in it.
    pub gc_probes_ms: f64,
    pub fua_writes_per_s_during_probes: f64,
    pub gc_device_share_during_probes: f64,
    pub gc_unbudgeted_share_during_probes: f64,
    pub gc_budget_waits_during_probes: u64,
    pub read_p999_gc_over_idle: f64,
    pub write_p999_gc_over_idle: f64,
}

#[derive(Debug, Serialize)]
pub struct Targets {
    /// Utilization ≥ 0.9 in every window at a depth of at least the LUN
    /// count, by workload.
    pub utilization_at_depth_ge_luns: Vec<(String, bool)>,
    /// Host rate ≥ 0.85 of the limit there.
    pub host_vs_limit_at_depth_ge_luns: Vec<(String, bool)>,
    pub write_p999_gc_le_4x_idle: bool,
    pub read_p999_gc_le_3x_idle: bool,
}

#[derive(Debug, Serialize)]
pub struct MediaReport {
    pub luns: u32,
    pub zone_width_luns: u32,
    pub zone_count: u32,
    pub device_bytes: u64,
    pub logical_blocks: u64,
    pub read_us: f64,
    pub program_us: f64,
    pub erase_us: f64,
    /// The device's timing (`Timing`: latencies, `scheduling` and, for
    /// `read-priority` and `suspend`, their bounds).
    pub timing: Timing,
    /// LUNs ÷ program time and LUNs ÷ read time, blocks a second.
    pub program_limit_blocks_per_s: f64,
    pub read_limit_blocks_per_s: f64,
    /// Blocks the sequential fill wrote (each address once: the logical
    /// size), and GC's copies and the media's erases from the format to the
    /// end of the fill and its checkpoint (none expected: a fill leaves no
    /// stale block).
    pub fill_blocks: u64,
    pub fill_gc_copy_blocks: u64,
    pub fill_erases: u64,
    pub warmup_host_writes: u64,
    pub window_ms: u64,
    pub series: Vec<Series>,
    pub latency: Latency,
    pub targets: Targets,
    pub seed: u64,
    /// The GC settings the run used (`FtlConfig::gc_lanes`, `gc_victims`,
    /// `gc_max_inflight`).
    pub gc_lanes: u32,
    pub gc_victims: u32,
    /// `FtlConfig::host_stripes`.
    pub host_stripes: u32,
    pub gc_max_inflight: u32,
    /// `FtlConfig::gc_budget` (`--gc-budget-us-per-ms`, `--gc-budget-burst-us`).
    pub gc_budget: Option<GcBudget>,
    /// `FtlConfig::zone_max_appends`, `append_max_blocks`.
    pub zone_max_appends: u32,
    pub append_max_blocks: u32,
    /// `FtlConfig::urgent_below_reserve` (`--urgent-below-reserve`).
    pub urgent_below_reserve: bool,
    /// `FtlConfig::gc_read_max_blocks_per_group`
    /// (`--gc-read-max-blocks-per-group`).
    pub gc_read_max_blocks_per_group: u32,
    /// `FtlConfig::gc_reset_yields_to_urgent`.
    pub gc_reset_yields_to_urgent: bool,
}

/// What a stream sends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    RandRead,
    RandWrite {
        fua: bool,
    },
    SeqWrite {
        blocks: u32,
    },
    /// Reads and FUA writes taking turns (the latency probes).
    Probe,
}

/// Host requests of one kind, `depth` in flight.
struct Stream {
    kind: Kind,
    depth: usize,
    in_flight: usize,
    done: u64,
    blocks_done: u64,
    /// The sequential stream's next address; the probe's turn.
    cursor: u64,
    /// A sequential stream that writes each address once: it sends nothing
    /// once its cursor reaches the end of the volume (else it wraps).
    once: bool,
    /// Latencies (virtual ns) of answered probes: reads, writes.
    lat: Option<(Vec<u64>, Vec<u64>)>,
}

impl Stream {
    /// One request at a time, its latency kept.
    fn timed(kind: Kind) -> Stream {
        Stream {
            lat: Some((Vec::new(), Vec::new())),
            ..Stream::new(kind, 1)
        }
    }

    /// A sequential write stream of `blocks` per request that writes the
    /// volume once through and stops: the fill.
    fn fill(blocks: u32, depth: usize) -> Stream {
        Stream {
            once: true,
            ..Stream::new(Kind::SeqWrite { blocks }, depth)
        }
    }

    /// Whether the stream has nothing more to send.
    fn exhausted(&self, logical: u64) -> bool {
        self.once && self.cursor >= logical
    }

    /// Takes back the request just made, which the FTL refused as busy, so
    /// the next one is the same: a sequential stream's blocks or the
    /// probe's turn (random addresses are drawn afresh).
    fn unmake(&mut self, blocks: u64) {
        match self.kind {
            Kind::SeqWrite { .. } => self.cursor -= blocks,
            Kind::Probe => self.cursor -= 1,
            Kind::RandRead | Kind::RandWrite { .. } => {}
        }
    }

    fn new(kind: Kind, depth: usize) -> Stream {
        Stream {
            kind,
            depth: depth.max(1),
            in_flight: 0,
            done: 0,
            blocks_done: 0,
            cursor: 0,
            once: false,
            lat: (kind == Kind::Probe).then(|| (Vec::new(), Vec::new())),
        }
    }
}

/// A request in flight: its stream, when it went in, whether it reads,
/// its blocks.
struct Sent {
    stream: usize,
    at_ns: u64,
    read: bool,
    blocks: u64,
}

struct Bench {
    drv: Driver<Recorder<SimDevice>>,
    rng: Rng,
    logical: u64,
    bs: usize,
    next_id: u64,
    sent: HashMap<u64, Sent>,
    luns: u32,
    timing: Timing,
}

/// Counters at a window's edges.
struct Mark {
    clock_ns: u64,
    sim: SimStats,
    /// Per LUN: busy time so far counted to the end of its queue, less
    /// what of that queue lies after the clock: the time it was busy up to
    /// the clock.
    lun_busy_ns: Vec<u64>,
    gc_copies: u64,
    gc_device_us: u64,
    gc_budget_waits: u64,
    /// Host requests and blocks answered so far in the window's stream.
    done: u64,
    blocks_done: u64,
}

impl Bench {
    /// The virtual clock.
    fn now(&self) -> u64 {
        self.drv.backend().clock_ns()
    }

    fn mark(&self, stream: &Stream) -> Mark {
        let dev = &self.drv.backend().inner;
        let now = self.now();
        Mark {
            clock_ns: now,
            sim: dev.stats(),
            lun_busy_ns: dev
                .lun_busy_ns()
                .iter()
                .zip(dev.lun_queued_until_ns())
                .map(|(&busy, &until)| busy - until.saturating_sub(now))
                .collect(),
            gc_copies: self.drv.stats().gc_copy_blocks,
            gc_device_us: self.drv.stats().gc_device_us,
            gc_budget_waits: self.drv.stats().gc_budget_waits,
            done: stream.done,
            blocks_done: stream.blocks_done,
        }
    }

    /// The next request of `s`.
    fn make(&mut self, s: &mut Stream) -> (Request, bool, u64) {
        let bs = self.bs;
        match s.kind {
            Kind::RandRead => (
                Request::Read {
                    lba: self.rng.below(self.logical),
                    block_count: 1,
                },
                true,
                1,
            ),
            Kind::RandWrite { fua } => (
                Request::Write {
                    lba: self.rng.below(self.logical),
                    data: vec![0x5a; bs],
                    fua,
                },
                false,
                1,
            ),
            Kind::SeqWrite { blocks } => {
                if s.cursor >= self.logical {
                    s.cursor = 0;
                }
                let lba = s.cursor;
                let n = u64::from(blocks).min(self.logical - lba);
                s.cursor += n;
                (
                    Request::Write {
                        lba,
                        data: vec![0x5a; bs * n as usize],
                        fua: false,
                    },
                    false,
                    n,
                )
            }
            Kind::Probe => {
                s.cursor += 1;
                let lba = self.rng.below(self.logical);
                if s.cursor % 2 == 1 {
                    (
                        Request::Read {
                            lba,
                            block_count: 1,
                        },
                        true,
                        1,
                    )
                } else {
                    (
                        Request::Write {
                            lba,
                            data: vec![0x5a; bs],
                            fua: true,
                        },
                        false,
                        1,
                    )
                }
            }
        }
    }

    /// Keeps every stream at its depth until `stop` says so, then waits
    /// for what is in flight.
    fn drive(
        &mut self,
        streams: &mut [Stream],
        stop: &mut dyn FnMut(&Bench, &[Stream]) -> bool,
    ) -> Result<(), BenchError> {
        let mut stopping = false;
        loop {
            stopping = stopping || stop(self, streams);
            let mut in_flight = 0;
            for (i, s) in streams.iter_mut().enumerate() {
                while !stopping && s.in_flight < s.depth && !s.exhausted(self.logical) {
                    let (request, read, blocks) = self.make(s);
                    let id = self.next_id;
                    match self.drv.try_submit(id, request) {
                        Ok(()) => {
                            self.next_id += 1;
                            s.in_flight += 1;
                            let at_ns = self.now();
                            self.sent.insert(
                                id,
                                Sent {
                                    stream: i,
                                    at_ns,
                                    read,
                                    blocks,
                                },
                            );
                        }
                        Err(IoError::Busy) => {
                            s.unmake(blocks);
                            break;
                        }
                        Err(e) => return Err(e.into()),
                    }
                }
                in_flight += s.in_flight;
            }
            if stopping && in_flight == 0 {
                return Ok(());
            }
            let moved = self.drv.turn()?;
            let now = self.now();
            let mut replies = 0;
            while let Some(reply) = self.drv.take_reply() {
                replies += 1;
                // The bench only reads and writes; what a reply holds is dropped.
                drop(reply.result?);
                let sent = self.sent.remove(&reply.id).ok_or_else(|| {
                    BenchError::Check(format!("a reply to unknown id {}", reply.id))
                })?;
                let s = &mut streams[sent.stream];
                s.in_flight -= 1;
                s.done += 1;
                s.blocks_done += sent.blocks;
                if let Some((reads, writes)) = &mut s.lat {
                    let v = if sent.read { reads } else { writes };
                    v.push(now - sent.at_ns);
                }
            }
            if !moved && replies == 0 {
                return Err(BenchError::Check(format!(
                    "the FTL stalled with {in_flight} requests unanswered: {}",
                    self.drv.ftl().debug_state()
                )));
            }
        }
    }

    /// One utilization window of `kind` at `depth`: a lead-in of a quarter
    /// of the window, then `window_ns` measured, the stream running on
    /// throughout.
    fn window(&mut self, kind: Kind, depth: usize, window_ns: u64) -> Result<Window, BenchError> {
        self.drv.backend_mut().take_shape();
        let mut streams = [Stream::new(kind, depth)];
        let lead_end = self.now() + window_ns / 4;
        let mut before: Option<Mark> = None;
        let mut after: Option<Mark> = None;
        let (mut free_min, mut free_sum, mut samples) = (u32::MAX, 0u64, 0u64);
        self.drive(&mut streams, &mut |b, s| {
            let now = b.now();
            let Some(start) = &before else {
                if now >= lead_end {
                    before = Some(b.mark(&s[0]));
                }
                return false;
            };
            let free = b.drv.stats().free_zones;
            free_min = free_min.min(free);
            free_sum += u64::from(free);
            samples += 1;
            if now >= start.clock_ns + window_ns {
                after.get_or_insert_with(|| b.mark(&s[0]));
                return true;
            }
            false
        })?;
        let (before, after) = (before.expect("lead-in"), after.expect("window"));
        let shape = self.drv.backend_mut().take_shape();
        let mut w = self.window_report(
            depth,
            after.done - before.done,
            after.blocks_done - before.blocks_done,
            &before,
            &after,
        );
        w.device_blocks_per_write = round(shape.blocks_per_write(), 2);
        w.device_write_blocks_in_flight = round(shape.write_blocks_in_flight(), 1);
        w.device_reads_in_flight = round(shape.reads_in_flight(), 1);
        w.free_zones_min = free_min;
        w.free_zones_mean = round(ratio(free_sum as f64, samples as f64), 1);
        Ok(w)
    }

    fn window_report(
        &self,
        depth: usize,
        requests: u64,
        blocks: u64,
        before: &Mark,
        after: &Mark,
    ) -> Window {
        let elapsed_ns = after.clock_ns.saturating_sub(before.clock_ns);
        let busy: u64 = after
            .lun_busy_ns
            .iter()
            .zip(&before.lun_busy_ns)
            .map(|(a, b)| a - b)
            .sum();
        let programs = after.sim.media_page_programs - before.sim.media_page_programs;
        let reads = after.sim.media_page_reads - before.sim.media_page_reads;
        let erases = after.sim.media_block_erases - before.sim.media_block_erases;
        let per = |n: u64| ratio(n as f64, blocks as f64);
        let t = &self.timing;
        // LUN time per host block at this window's mix, ns.
        let per_block_ns = per(programs) * t.program_ns as f64
            + per(reads) * t.read_ns as f64
            + per(erases) * t.erase_ns as f64;
        let limit = ratio(f64::from(self.luns) * 1e9, per_block_ns);
        let rate = ratio(blocks as f64 * 1e9, elapsed_ns as f64);
        let lun_use: Vec<f64> = after
            .lun_busy_ns
            .iter()
            .zip(&before.lun_busy_ns)
            .map(|(a, b)| ratio((a - b) as f64, elapsed_ns as f64))
            .collect();
        Window {
            lun_utilization_min: round(lun_use.iter().copied().fold(f64::INFINITY, f64::min), 3),
            lun_utilization_max: round(lun_use.iter().copied().fold(0.0, f64::max), 3),
            lun_utilization: lun_use.iter().map(|&u| round(u, 3)).collect(),
            free_zones_min: 0,
            free_zones_mean: 0.0,
            device_blocks_per_write: 0.0,
            device_write_blocks_in_flight: 0.0,
            device_reads_in_flight: 0.0,
            depth,
            host_requests: requests,
            host_blocks: blocks,
            elapsed_ms: round(elapsed_ns as f64 / 1e6, 3),
            host_blocks_per_s: round(rate, 0),
            host_mib_per_s: round(rate * self.bs as f64 / (1 << 20) as f64, 1),
            utilization: round(
                ratio(busy as f64, f64::from(self.luns) * elapsed_ns as f64),
                4,
            ),
            wa: round(per(programs), 4),
            media_reads_per_host_block: round(per(reads), 4),
            erases_per_host_block: round(per(erases), 5),
            gc_copy_blocks: after.gc_copies - before.gc_copies,
            gc_device_share: round(
                ratio(
                    (after.gc_device_us - before.gc_device_us) as f64 * 1e3,
                    f64::from(self.luns) * elapsed_ns as f64,
                ),
                4,
            ),
            gc_budget_waits: after.gc_budget_waits - before.gc_budget_waits,
            reads_passed: after.sim.reads_passed - before.sim.reads_passed,
            suspensions: after.sim.suspensions - before.sim.suspensions,
            limit_host_blocks_per_s: round(limit, 0),
            host_vs_limit: round(ratio(rate, limit), 4),
        }
    }

    /// Latency probes, alone or beside random writes at `load_depth`.
    /// Latency probes, one at a time, reads and FUA writes taking turns,
    /// with nothing else running; `count` of each.
    fn idle_probes(&mut self, count: usize) -> Result<(Vec<u64>, Vec<u64>, u64), BenchError> {
        let before = self.drv.stats().gc_copy_blocks;
        let mut streams = [Stream::new(Kind::Probe, 1)];
        let bar = progress(2 * count as u64, "idle probes");
        self.drive(&mut streams, &mut |_, s| {
            let (r, w) = s[0].lat.as_ref().expect("probe stream");
            bar.set_position((r.len() + w.len()) as u64);
            r.len() >= count && w.len() >= count
        })?;
        bar.finish_and_clear();
        let (reads, writes) = streams[0].lat.take().expect("probe stream");
        Ok((reads, writes, self.drv.stats().gc_copy_blocks - before))
    }

    /// Latency probes beside `load_depth` random 4 KiB writes: a read
    /// stream and a FUA write stream, one request each at a time (a FUA
    /// write can take seconds there, so the reads do not wait for it),
    /// until `count` reads, and `count` writes or `budget_ns` of virtual
    /// time.
    fn gc_probes(
        &mut self,
        count: usize,
        load_depth: usize,
        budget_ns: u64,
    ) -> Result<GcProbes, BenchError> {
        let before = self.drv.stats();
        let start = self.now();
        let mut streams = [
            Stream::timed(Kind::RandRead),
            Stream::timed(Kind::RandWrite { fua: true }),
            Stream::new(Kind::RandWrite { fua: false }, load_depth),
        ];
        let bar = progress(2 * count as u64, "GC probes");
        self.drive(&mut streams, &mut |b, s| {
            let reads = s[0].lat.as_ref().expect("timed").0.len();
            let writes = s[1].lat.as_ref().expect("timed").1.len();
            bar.set_position((reads + writes.min(count)) as u64);
            reads >= count && (writes >= count || b.now() - start >= budget_ns)
        })?;
        bar.finish_and_clear();
        let reads = std::mem::take(&mut streams[0].lat.as_mut().expect("timed").0);
        let writes = std::mem::take(&mut streams[1].lat.as_mut().expect("timed").1);
        let after = self.drv.stats();
        let elapsed_ns = (self.now() - start) as f64;
        let load_blocks = streams[2].blocks_done;
        let fua_writes = writes.len() as f64;
        Ok(GcProbes {
            reads,
            writes,
            gc_copies: after.gc_copy_blocks - before.gc_copy_blocks,
            urgent_blocks: after.urgent_lane_blocks - before.urgent_lane_blocks,
            resets_yielded: after.gc_resets_yielded - before.gc_resets_yielded,
            load_blocks_per_s: round(ratio(load_blocks as f64 * 1e9, elapsed_ns), 0),
            elapsed_ms: round(elapsed_ns / 1e6, 1),
            fua_per_s: round(ratio(fua_writes * 1e9, elapsed_ns), 0),
            gc_device_share: round(
                ratio(
                    (after.gc_device_us - before.gc_device_us) as f64 * 1e3,
                    f64::from(self.luns) * elapsed_ns,
                ),
                4,
            ),
            gc_unbudgeted_share: round(
                ratio(
                    (after.gc_unbudgeted_us - before.gc_unbudgeted_us) as f64 * 1e3,
                    f64::from(self.luns) * elapsed_ns,
                ),
                4,
            ),
            gc_budget_waits: after.gc_budget_waits - before.gc_budget_waits,
        })
    }
}

/// What the latency probes during GC measured.
struct GcProbes {
    reads: Vec<u64>,
    writes: Vec<u64>,
    gc_copies: u64,
    urgent_blocks: u64,
    resets_yielded: u64,
    /// Blocks a second of the random writes beside the probes.
    load_blocks_per_s: f64,
    elapsed_ms: f64,
    fua_per_s: f64,
    gc_device_share: f64,
    gc_unbudgeted_share: f64,
    gc_budget_waits: u64,
}

impl Bench {}

fn percentiles(v: &mut [u64]) -> Percentiles {
    v.sort_unstable();
    let at = |q: f64| {
        if v.is_empty() {
            return 0.0;
        }
        let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
        round(v[i] as f64 / 1e3, 1)
    };
    Percentiles {
        samples: v.len(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        p999_us: at(0.999),
        max_us: at(1.0),
    }
}

pub fn run(args: &MediaArgs, ftl: &FtlConfig) -> Result<MediaReport, BenchError> {
    if args.depths.is_empty() || args.depths.contains(&0) {
        return Err(BenchError::Args(
            "--depths must list depths of at least 1".into(),
        ));
    }
    if args.window_ms == 0 || args.probes == 0 || args.load_depth == 0 {
        return Err(BenchError::Args(
            "--window-ms, --probes and --load-depth must be at least 1".into(),
        ));
    }
    let timing = Timing {
        scheduling: args.nand_scheduling.into(),
        ..Timing::default()
    };
    let cfg = SimConfig {
        blocks_per_lun: args.blocks_per_lun,
        timing: Some(timing),
        endurance_erases: u32::MAX,
        ..SimConfig::default()
    };
    let luns = cfg.lun_count();
    let g = cfg.geometry()?;
    let device = Recorder::new(SimDevice::create_memory(cfg.clone())?);
    let options = FormatOptions {
        seed: args.seed,
        ..FormatOptions::default()
    };
    let ftl = &FtlConfig {
        gc_max_inflight: args.gc_max_inflight.unwrap_or(ftl.gc_max_inflight),
        ..args.gc.apply(ftl.clone())
    };
    let drv = Driver::format(device, &options, ftl.clone())?;
    let logical = drv.logical_blocks();
    let mut b = Bench {
        bs: drv.block_size(),
        drv,
        rng: Rng::new(args.seed),
        logical,
        next_id: 1 << 62,
        sent: HashMap::new(),
        luns,
        timing,
    };

    // Fill, then random overwrites to steady-state GC.
    let mut fill = [Stream::fill(32, 16)];
    let bar = progress(logical, "fill");
    b.drive(&mut fill, &mut |_, s| {
        bar.set_position(s[0].blocks_done);
        s[0].cursor >= logical
    })?;
    bar.finish_and_clear();
    b.drv.flush()?;
    // Idle: the volume just filled, 7 % of it free, so the probes' writes
    // start no GC; the fill's checkpoint written first.
    b.drv.settle()?;
    let fill_gc_copy_blocks = b.drv.stats().gc_copy_blocks;
    let fill_erases = b.drv.backend().inner.stats().media_block_erases;
    let (mut read_idle, mut write_idle, idle_gc) = b.idle_probes(args.probes)?;
    let warmup = (args.warmup.max(0.0) * logical as f64) as u64;
    let mut warm = [Stream::new(Kind::RandWrite { fua: false }, 64)];
    let bar = progress(warmup, "warmup");
    b.drive(&mut warm, &mut |_, s| {
        bar.set_position(s[0].done);
        s[0].done + s[0].in_flight as u64 >= warmup
    })?;
    bar.finish_and_clear();

    let window_ns = args.window_ms * 1_000_000;
    let mut series = Vec::new();
    let workloads: [(&'static str, Kind, u64); 3] = [
        ("randwrite_4k", Kind::RandWrite { fua: false }, 1),
        ("randwrite_4k_fua", Kind::RandWrite { fua: true }, 1),
        ("seqwrite_128k", Kind::SeqWrite { blocks: 32 }, 32),
    ];
    for (name, kind, blocks) in workloads {
        let mut windows = Vec::new();
        for &d in &args.depths {
            windows.push(b.window(kind, d, window_ns)?);
        }
        series.push(Series {
            workload: name,
            block_bytes: blocks * b.bs as u64,
            windows,
        });
    }
    // Random writes again, so the latency runs start from their steady
    // state (the sequential windows rewrote whole zones).
    let mut warm = [Stream::new(Kind::RandWrite { fua: false }, 64)];
    let again = warmup.min(logical / 4);
    b.drive(&mut warm, &mut |_, s| {
        s[0].done + s[0].in_flight as u64 >= again
    })?;
    let probes = b.gc_probes(args.probes, args.load_depth, args.gc_probe_ms * 1_000_000)?;
    let (mut read_gc, mut write_gc) = (probes.reads, probes.writes);
    b.drv.settle()?;
    let mut windows = Vec::new();
    for &d in &args.depths {
        windows.push(b.window(Kind::RandRead, d, window_ns)?);
    }
    series.push(Series {
        workload: "randread_4k",
        block_bytes: b.bs as u64,
        windows,
    });

    let latency = Latency {
        read_idle: percentiles(&mut read_idle),
        write_idle: percentiles(&mut write_idle),
        read_gc: percentiles(&mut read_gc),
        write_gc: percentiles(&mut write_gc),
        gc_copy_blocks_during_probes: probes.gc_copies,
        gc_copy_blocks_during_idle_probes: idle_gc,
        urgent_lane_blocks_during_probes: probes.urgent_blocks,
        gc_resets_yielded_during_probes: probes.resets_yielded,
        load_write_blocks_per_s_during_probes: probes.load_blocks_per_s,
        gc_probes_ms: probes.elapsed_ms,
        fua_writes_per_s_during_probes: probes.fua_per_s,
        gc_device_share_during_probes: probes.gc_device_share,
        gc_unbudgeted_share_during_probes: probes.gc_unbudgeted_share,
        gc_budget_waits_during_probes: probes.gc_budget_waits,
        read_p999_gc_over_idle: 0.0,
        write_p999_gc_over_idle: 0.0,
    };
    let latency = Latency {
        read_p999_gc_over_idle: round(ratio(latency.read_gc.p999_us, latency.read_idle.p999_us), 3),
        write_p999_gc_over_idle: round(
            ratio(latency.write_gc.p999_us, latency.write_idle.p999_us),
            3,
        ),
        ..latency
    };
    let deep = |s: &Series, f: fn(&Window) -> bool| {
        s.windows.iter().filter(|w| w.depth >= luns as usize).all(f)
    };
    let targets = Targets {
        utilization_at_depth_ge_luns: series
            .iter()
            .map(|s| {
                (
                    s.workload.to_string(),
                    deep(s, |w| w.utilization >= TARGET_UTILIZATION),
                )
            })
            .collect(),
        host_vs_limit_at_depth_ge_luns: series
            .iter()
            .map(|s| {
                (
                    s.workload.to_string(),
                    deep(s, |w| w.host_vs_limit >= TARGET_HOST_VS_LIMIT),
                )
            })
            .collect(),
        write_p999_gc_le_4x_idle: latency.write_p999_gc_over_idle <= TARGET_WRITE_P999_RATIO,
        read_p999_gc_le_3x_idle: latency.read_p999_gc_over_idle <= TARGET_READ_P999_RATIO,
    };
    let report = MediaReport {
        luns,
        zone_width_luns: cfg.zone_width_luns,
        zone_count: g.zone_count,
        device_bytes: cfg.page_count() * u64::from(cfg.page_size_bytes),
        logical_blocks: logical,
        read_us: timing.read_ns as f64 / 1e3,
        program_us: timing.program_ns as f64 / 1e3,
        erase_us: timing.erase_ns as f64 / 1e3,
        timing,
        program_limit_blocks_per_s: round(f64::from(luns) * 1e9 / timing.program_ns as f64, 0),
        read_limit_blocks_per_s: round(f64::from(luns) * 1e9 / timing.read_ns as f64, 0),
        fill_blocks: fill[0].blocks_done,
        fill_gc_copy_blocks,
        fill_erases,
        warmup_host_writes: warmup,
        window_ms: args.window_ms,
        series,
        latency,
        targets,
        seed: args.seed,
        gc_lanes: ftl.gc_lanes,
        gc_victims: ftl.gc_victims,
        host_stripes: ftl.host_stripes,
        gc_max_inflight: ftl.gc_max_inflight,
        gc_budget: ftl.gc_budget,
        zone_max_appends: ftl.zone_max_appends,
        append_max_blocks: ftl.append_max_blocks,
        urgent_below_reserve: ftl.urgent_below_reserve,
        gc_read_max_blocks_per_group: ftl.gc_read_max_blocks_per_group,
        gc_reset_yields_to_urgent: ftl.gc_reset_yields_to_urgent,
    };
    if let Some(path) = &args.svg {
        let cdfs = [
            ("read, idle", read_idle),
            ("read, during GC", read_gc),
            ("FUA write, idle", write_idle),
            ("FUA write, during GC", write_gc),
        ];
        super::plot::media_svg(path, &report, &cdfs)?;
    }
    Ok(report)
}

/// The scheduling as `--nand-scheduling` spells it, with its bounds.
fn scheduling_name(t: &Timing) -> String {
    match t.scheduling {
        NandScheduling::Fifo => "fifo".into(),
        NandScheduling::ReadPriority => {
            format!("read-priority (<= {} reads ahead)", t.max_reads_ahead)
        }
        NandScheduling::Suspend => format!(
            "suspend ({} + {} µs, <= {} suspensions, <= {} reads ahead)",
            t.suspend_ns as f64 / 1e3,
            t.resume_ns as f64 / 1e3,
            t.max_suspends,
            t.max_reads_ahead
        ),
    }
}

impl MediaReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "media: {} LUNs, zones {} LUNs wide, read {} µs, program {} µs, erase {} µs \
             (virtual time), LUN scheduling {}; program limit {} blocks/s, read limit {} blocks/s",
            self.luns,
            self.zone_width_luns,
            self.read_us,
            self.program_us,
            self.erase_us,
            scheduling_name(&self.timing),
            self.program_limit_blocks_per_s,
            self.read_limit_blocks_per_s
        ));
        for s in &self.series {
            t.section(&format!("{} ({} B)", s.workload, s.block_bytes));
            for w in &s.windows {
                t.row(
                    &format!("depth {}", w.depth),
                    format!(
                        "utilization {:.3} (LUNs {:.2}-{:.2})  host {:.0} blocks/s = {:.3} of \
                         limit {:.0}  WA {:.2}  reads/blk {:.2}  in flight: {:.0} write blocks, \
                         {:.0} reads  free zones {}-{:.1}  GC device share {:.3}",
                        w.utilization,
                        w.lun_utilization_min,
                        w.lun_utilization_max,
                        w.host_blocks_per_s,
                        w.host_vs_limit,
                        w.limit_host_blocks_per_s,
                        w.wa,
                        w.media_reads_per_host_block,
                        w.device_write_blocks_in_flight,
                        w.device_reads_in_flight,
                        w.free_zones_min,
                        w.free_zones_mean,
                        w.gc_device_share
                    ),
                );
            }
        }
        let l = &self.latency;
        t.section("latency, virtual µs (p50 / p99 / p99.9 / max)");
        let p =
            |x: &Percentiles| format!("{} / {} / {} / {}", x.p50_us, x.p99_us, x.p999_us, x.max_us);
        t.row("4 KiB read, idle", p(&l.read_idle));
        t.row("4 KiB read, during GC", p(&l.read_gc));
        t.row("4 KiB FUA write, idle", p(&l.write_idle));
        t.row("4 KiB FUA write, during GC", p(&l.write_gc));
        t.row("read p99.9 GC / idle", l.read_p999_gc_over_idle);
        t.row("write p99.9 GC / idle", l.write_p999_gc_over_idle);
        t.row(
            "FUA blocks in the urgent lane during GC",
            l.urgent_lane_blocks_during_probes,
        );
        t.row(
            "during GC: ms, FUA writes/s, load writes/s, GC device share (unbudgeted), budget waits",
            format!(
                "{} / {} / {} / {} ({}) / {}",
                l.gc_probes_ms,
                l.fua_writes_per_s_during_probes,
                l.load_write_blocks_per_s_during_probes,
                l.gc_device_share_during_probes,
                l.gc_unbudgeted_share_during_probes,
                l.gc_budget_waits_during_probes
            ),
        );
        t.section("targets");
        for (w, ok) in &self.targets.utilization_at_depth_ge_luns {
            t.row(&format!("utilization >= 0.9, {w}"), ok);
        }
        for (w, ok) in &self.targets.host_vs_limit_at_depth_ge_luns {
            t.row(&format!("host >= 0.85 of limit, {w}"), ok);
        }
        t.row(
            "write p99.9 during GC <= 4x idle",
            self.targets.write_p999_gc_le_4x_idle,
        );
        t.row(
            "read p99.9 during GC <= 3x idle",
            self.targets.read_p999_gc_le_3x_idle,
        );
        t.render()
    }
}
