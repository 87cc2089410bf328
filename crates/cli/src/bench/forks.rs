//! `zftl bench snapshot --parts forks`: writable forks of a snapshot, in
//! the tag mode being measured (docs/bench.md, "bench snapshot").
//!
//! Volumes of `--fork-mib` sizes in memory, timing off, every block
//! written, one snapshot (the base) taken. Then:
//!
//! - **create**: rounds in turn over the volumes (which goes first
//!   alternating); each creates a fork of the base (timed, with the media
//!   blocks it wrote), reads one random 4 KiB block of it (timed from the
//!   create's return: the fork's activation), deletes it (timed) and
//!   settles. Each volume's create ÷ the first (smallest) volume's, per
//!   round;
//! - **reads**: with a fork live, 4 KiB reads at random blocks, none
//!   changed since the base, through the fork and from the live volume:
//!   the same addresses in each round, the same count and depth, which
//!   goes first alternating; rate per wall and per CPU second of this
//!   thread, fork ÷ live per round;
//! - **writes**: 4 KiB writes at random blocks of a working set of
//!   distinct blocks, into the fork and into the live volume, the same
//!   addresses, count and depth, each side's round ending with a flush.
//!   A first pass writes every block of the set once on each side, split
//!   into the rounds (the fork's first write of a block sets its diverged
//!   bit, the live volume's keeps the base's version); the rounds after
//!   overwrite.

use std::collections::HashSet;
use std::time::Instant;

use clap::Args;
use serde::Serialize;
use zftl_core::{Driver, FtlConfig};
use zftl_sim::rng::Rng;
use zftl_sim::SimDevice;

use super::pipe::Pipeline;
use super::range::Rounds;
use super::snapshot::{Collect, OpCost};
use super::timetravel::{expect_byte, written_volume, Activation, BEFORE};
use super::{progress, ratio, round, show, thread_cpu_s, BenchError, TagMode};
use crate::report::{human_bytes, Text};

const MIB: u64 = 1 << 20;
/// A fork's activation target: its first read within this per GiB of data.
pub const FORK_TARGET_MS_PER_GIB: f64 = 50.0;
/// The bytes the fork's writes and the live volume's writes carry.
const FORK_BYTE: u8 = 0xf0;
const LIVE_BYTE: u8 = 0x0f;
/// The base snapshot's name.
const BASE: &str = "base";

/// The options of the forks part (part of `zftl bench snapshot`'s).
#[derive(Debug, Clone, Args)]
pub struct ForkArgs {
    /// Forks: volumes of these sizes in MiB, every block written, in
    /// memory; create ratios are each ÷ the first.
    #[arg(long, value_name = "MIB,..", value_delimiter = ',', default_values_t = [1024, 4096])]
    pub fork_mib: Vec<u64>,
    /// Forks: 4 KiB reads per round through the fork and from the live
    /// volume each.
    #[arg(long, value_name = "N", default_value_t = 65536)]
    pub fork_reads: u64,
    /// Forks: distinct blocks the writes go to (a random set).
    #[arg(long, value_name = "BLOCKS", default_value_t = 16384)]
    pub fork_write_blocks: u64,
    /// Forks: 4 KiB writes per round into the fork and into the live
    /// volume each.
    #[arg(long, value_name = "N", default_value_t = 32768)]
    pub fork_writes: u64,
    /// Forks: requests in flight, reads and writes, on both sides.
    #[arg(long, value_name = "N", default_value_t = 32)]
    pub fork_queue_depth: usize,
}

impl ForkArgs {
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.fork_mib.is_empty() || self.fork_mib.contains(&0) {
            return Err(BenchError::Args(
                "--fork-mib must list sizes of at least 1 MiB".into(),
            ));
        }
        for (flag, n) in [
            ("--fork-reads", self.fork_reads),
            ("--fork-write-blocks", self.fork_write_blocks),
            ("--fork-writes", self.fork_writes),
            ("--fork-queue-depth", self.fork_queue_depth as u64),
        ] {
            if n == 0 {
                return Err(BenchError::Args(format!("{flag} must be at least 1")));
            }
        }
        Ok(())
    }
}

/// Rates of one side per round: per wall second and per CPU second of
/// this thread.
#[derive(Debug, Serialize)]
pub struct Rates {
    pub per_s: Rounds,
    pub per_cpu_s: Rounds,
}

/// Fork against live, the same requests on each side.
#[derive(Debug, Serialize)]
pub struct Versus {
    pub requests_per_round: u64,
    pub depth: usize,
    pub fork: Rates,
    pub live: Rates,
    /// fork ÷ live per round: wall, and CPU.
    pub ratio: Rounds,
    pub cpu_ratio: Rounds,
}

#[derive(Debug, Serialize)]
pub struct ForkCase {
    /// Data written (every block of the volume) before the base snapshot.
    pub data_bytes: u64,
    pub device_bytes: u64,
    /// The base snapshot's create (the volume's first snapshot), ms.
    pub base_create_ms: f64,
    /// Each round's fork create and delete: µs and media blocks by kind.
    pub create: OpCost,
    pub delete: OpCost,
    /// create ÷ the first volume's create, per round.
    pub create_ratio: Rounds,
    /// The fork's first read after each create.
    #[serde(flatten)]
    pub activation: Activation,
    /// 4 KiB random reads of blocks unchanged since the base.
    pub reads: Versus,
    /// The writes' working set, distinct blocks.
    pub write_blocks: u64,
    /// The first pass over the working set, split into the rounds (the
    /// fork's first write of each block, the live volume's first since
    /// the base).
    pub first_writes: Versus,
    /// 4 KiB random writes over the working set, each already written.
    pub writes: Versus,
}

pub fn forks(
    args: &ForkArgs,
    rounds: usize,
    ftl: &FtlConfig,
    mode: TagMode,
    seed: u64,
) -> Result<Vec<ForkCase>, BenchError> {
    let mut vols = args
        .fork_mib
        .iter()
        .map(|&mib| Volume::new(args, mib, ftl, mode, seed))
        .collect::<Result<Vec<_>, _>>()?;
    // Create rounds, the volumes in turn.
    let mut rng = Rng::stream(seed, 0xf0c5);
    let bar = progress(rounds as u64, "fork creates");
    for r in 0..rounds {
        let n = vols.len();
        for i in 0..n {
            let at = if r % 2 == 0 { i } else { n - 1 - i };
            vols[at].create_round(r, &mut rng)?;
        }
        bar.set_position(r as u64 + 1);
    }
    bar.finish_and_clear();
    let first_create = vols[0].create.us.clone();
    let mut out = Vec::new();
    for (i, v) in vols.into_iter().enumerate() {
        out.push(v.finish(args, rounds, &first_create, seed, i)?);
    }
    Ok(out)
}

struct Volume {
    mib: u64,
    logical: u64,
    device_bytes: u64,
    drv: Driver<SimDevice>,
    base_create_ms: f64,
    create: Collect,
    delete: Collect,
    first_read_us: Vec<f64>,
    first_read_media: Vec<u64>,
}

impl Volume {
    fn new(
        args: &ForkArgs,
        mib: u64,
        ftl: &FtlConfig,
        mode: TagMode,
        seed: u64,
    ) -> Result<Volume, BenchError> {
        // The default over-provisioning (7 %) less two zones is too little
        // room for the working set twice (the fork's blocks and the
        // versions the base keeps of the live volume's): the device is
        // sized for a quarter more than the volume, plus that.
        let room = |logical: u64| logical / 4 + 2 * args.fork_write_blocks.min(logical);
        let (mut drv, logical, device_bytes) = written_volume(mib, room, ftl, mode, seed)?;
        let t = Instant::now();
        drv.snapshot_create(BASE)?;
        let base_create_ms = t.elapsed().as_secs_f64() * 1e3;
        drv.flush()?;
        drv.settle()?;
        Ok(Volume {
            mib,
            logical,
            device_bytes,
            drv,
            base_create_ms,
            create: Collect::default(),
            delete: Collect::default(),
            first_read_us: Vec::new(),
            first_read_media: Vec::new(),
        })
    }

    /// Creates a fork (timed), reads one random block of it (timed from the
    /// create's return), deletes it (timed), settles.
    fn create_round(&mut self, r: usize, rng: &mut Rng) -> Result<(), BenchError> {
        let drv = &mut self.drv;
        drv.flush()?;
        drv.settle()?;
        let name = format!("fork-{r}");
        let mut fork = None;
        self.create.time(drv, |d| {
            fork = Some(d.fork_create(BASE, &name)?);
            Ok(())
        })?;
        let returned = Instant::now();
        let fork = fork.expect("the create answered with its fork");
        let b = rng.below(self.logical);
        let s0 = drv.stats();
        let data = drv.read(fork.lba_offset + b, 1)?;
        self.first_read_us
            .push(returned.elapsed().as_secs_f64() * 1e6);
        self.first_read_media
            .push(drv.stats().media_write_blocks - s0.media_write_blocks);
        expect_byte(&data, BEFORE, &name, b)?;
        self.delete.time(drv, |d| d.fork_delete(&name))?;
        drv.settle()?;
        Ok(())
    }

    fn finish(
        mut self,
        args: &ForkArgs,
        rounds: usize,
        first_create: &[f64],
        seed: u64,
        index: usize,
    ) -> Result<ForkCase, BenchError> {
        let create_ratio = Rounds::of(
            self.create
                .us
                .iter()
                .zip(first_create)
                .map(|(c, f)| ratio(*c, *f))
                .collect(),
        );
        let create_ms: Vec<f64> = self.create.us.iter().map(|us| us / 1e3).collect();
        let activation = Activation::new(
            &create_ms,
            std::mem::take(&mut self.first_read_us),
            std::mem::take(&mut self.first_read_media),
            self.mib * MIB,
            FORK_TARGET_MS_PER_GIB,
        );
        let create = std::mem::take(&mut self.create).done();
        let delete = std::mem::take(&mut self.delete).done();

        // The fork the reads and writes go through.
        let drv = &mut self.drv;
        let fork = drv.fork_create(BASE, "bench")?;
        let at = fork.lba_offset;
        let depth = args.fork_queue_depth;
        let mut rng = Rng::stream(seed, 0xf0c6 + index as u64);
        let logical = self.logical;

        // Reads of blocks unchanged since the base.
        let reads = args.fork_reads;
        let read_rounds = (0..rounds)
            .map(|_| (0..reads).map(|_| rng.below(logical)).collect::<Vec<u64>>())
            .collect::<Vec<_>>();
        let bar = progress(rounds as u64, &format!("{} MiB: fork reads", self.mib));
        let read = versus(drv, &read_rounds, depth, at, Op::Read, &mut |r| {
            bar.set_position(r as u64 + 1)
        })?;
        bar.finish_and_clear();

        // The writes' working set, and its first pass on each side.
        let want = args.fork_write_blocks.min(logical);
        let mut set = HashSet::with_capacity(want as usize);
        let mut order = Vec::with_capacity(want as usize);
        while (order.len() as u64) < want {
            let b = rng.below(logical);
            if set.insert(b) {
                order.push(b);
            }
        }
        let room = |e: BenchError| {
            BenchError::Args(format!(
                "writing {want} blocks into the fork and the live volume of the {} MiB volume: \
                 {e} (its spare space holds fewer: use fewer --fork-write-blocks)",
                self.mib
            ))
        };
        let chunk = order.len().div_ceil(rounds).max(1);
        let first_rounds = order.chunks(chunk).map(<[u64]>::to_vec).collect::<Vec<_>>();
        let first_writes =
            versus(drv, &first_rounds, depth, at, Op::Write, &mut |_| {}).map_err(room)?;
        let write_rounds = (0..rounds)
            .map(|_| {
                (0..args.fork_writes)
                    .map(|_| order[rng.below(want) as usize])
                    .collect::<Vec<u64>>()
            })
            .collect::<Vec<_>>();
        let bar = progress(rounds as u64, &format!("{} MiB: fork writes", self.mib));
        let writes = versus(drv, &write_rounds, depth, at, Op::Write, &mut |r| {
            bar.set_position(r as u64 + 1)
        })
        .map_err(room)?;
        bar.finish_and_clear();
        // Each side holds its own bytes in the set; the rest reads as the
        // base through the fork.
        for &b in order.iter().take(16) {
            expect_byte(&drv.read(at + b, 1)?, FORK_BYTE, "fork", b)?;
            expect_byte(&drv.read(b, 1)?, LIVE_BYTE, "live", b)?;
        }
        for &b in read_rounds[0].iter().filter(|b| !set.contains(b)).take(16) {
            expect_byte(&drv.read(at + b, 1)?, BEFORE, "fork", b)?;
        }
        drv.fork_delete("bench")?;
        drv.settle()?;

        Ok(ForkCase {
            data_bytes: self.mib * MIB,
            device_bytes: self.device_bytes,
            base_create_ms: round(self.base_create_ms, 4),
            create,
            delete,
            create_ratio,
            activation,
            reads: read,
            write_blocks: want,
            first_writes,
            writes,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Read,
    Write,
}

/// Runs each round's blocks through the fork (at `at + b`) and on the live
/// volume (at `b`), in turn (which goes first alternating), `depth` in
/// flight; a write round ends with a flush.
fn versus(
    drv: &mut Driver<SimDevice>,
    rounds: &[Vec<u64>],
    depth: usize,
    at: u64,
    op: Op,
    tick: &mut dyn FnMut(usize),
) -> Result<Versus, BenchError> {
    let bs = drv.block_size();
    let (mut fork, mut live) = ((vec![], vec![]), (vec![], vec![]));
    for (r, blocks) in rounds.iter().enumerate() {
        for pass in 0..2 {
            let through_fork = (pass == 0) == (r % 2 == 0);
            let (offset, byte) = match through_fork {
                true => (at, FORK_BYTE),
                false => (0, LIVE_BYTE),
            };
            let mut pipe = Pipeline::with_byte(depth, bs, byte);
            let mut it = blocks.iter().map(|&b| offset + b);
            let mut next = || it.next().expect("as many addresses as requests");
            let count = blocks.len() as u64;
            let (t, c) = (Instant::now(), thread_cpu_s());
            let done = match op {
                Op::Read => pipe.read(drv, count, &mut next, &mut |_| true)?,
                Op::Write => {
                    let n = pipe.write(drv, count, &mut next, &mut |_| true)?;
                    drv.flush()?;
                    n
                }
            };
            let (wall, cpu) = (t.elapsed().as_secs_f64(), thread_cpu_s() - c);
            let side = if through_fork { &mut fork } else { &mut live };
            side.0.push(ratio(done as f64, wall));
            side.1.push(ratio(done as f64, cpu));
        }
        tick(r);
    }
    let per_round =
        |a: &[f64], b: &[f64]| Rounds::of(a.iter().zip(b).map(|(a, b)| ratio(*a, *b)).collect());
    let ratio_wall = per_round(&fork.0, &live.0);
    let ratio_cpu = per_round(&fork.1, &live.1);
    let rates = |(w, c): (Vec<f64>, Vec<f64>)| Rates {
        per_s: Rounds::of(w.into_iter().map(|x| x.round()).collect()),
        per_cpu_s: Rounds::of(c.into_iter().map(|x| x.round()).collect()),
    };
    Ok(Versus {
        requests_per_round: rounds.first().map_or(0, |b| b.len() as u64),
        depth,
        fork: rates(fork),
        live: rates(live),
        ratio: ratio_wall,
        cpu_ratio: ratio_cpu,
    })
}

// ----- text ------------------------------------------------------------

fn versus_text(key: &str, v: &Versus, t: &mut Text) {
    t.row(
        &format!("{key}_fork_per_s"),
        format!(
            "{} (per CPU s: {})",
            show(&v.fork.per_s),
            show(&v.fork.per_cpu_s)
        ),
    );
    t.row(
        &format!("{key}_live_per_s"),
        format!(
            "{} (per CPU s: {})",
            show(&v.live.per_s),
            show(&v.live.per_cpu_s)
        ),
    );
    t.row(&format!("{key}_fork_over_live"), show(&v.ratio));
    t.row(&format!("{key}_fork_over_live_cpu"), show(&v.cpu_ratio));
}

pub fn forks_text(tag: &str, cases: &[ForkCase], t: &mut Text) {
    for c in cases {
        t.section(&format!(
            "tags {tag}: forks of a snapshot of a volume of {} written",
            human_bytes(c.data_bytes)
        ));
        t.row("base_create_ms", c.base_create_ms);
        t.row("create_us", show(&c.create.us));
        t.row(
            "create_blocks",
            format!(
                "meta {:?} pad {:?} other {:?}",
                c.create.meta_blocks, c.create.pad_blocks, c.create.other_blocks
            ),
        );
        t.row("create_over_first_volume", show(&c.create_ratio));
        t.row("delete_us", show(&c.delete.us));
        c.activation.text(t);
        t.row(
            "reads",
            format!(
                "{} per round, depth {}",
                c.reads.requests_per_round, c.reads.depth
            ),
        );
        versus_text("read", &c.reads, t);
        t.row(
            "writes",
            format!(
                "{} per round over {} blocks, depth {}",
                c.writes.requests_per_round, c.write_blocks, c.writes.depth
            ),
        );
        versus_text("first_write", &c.first_writes, t);
        versus_text("write", &c.writes, t);
    }
}
