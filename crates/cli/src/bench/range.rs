//! `zftl bench range`: range operations on the in-memory simulator with
//! timing off (CPU cost and media counts, wall clock), each measurement in
//! rounds that are all printed, with their minimum and median:
//!
//! - durable single-block moves per second, at several vectors in flight
//!   (group commit shares a log block and a device flush among them);
//! - a clone against a copy (read and write through the FTL, then a flush)
//!   of the same range, 4 KiB to `--max-clone-mib`, both durable;
//! - the first write to a shared block against an overwrite of an unshared
//!   one;
//! - single-write journaling (`zftl::transaction`: write to scratch, commit
//!   with one vector of moves) against double-write journaling (write the
//!   data and a commit block to a journal, flush, write the data to its
//!   target, flush), per transaction size, once timed by the wall clock
//!   with timing off (the CPU's work) and once by the virtual clock with
//!   the default timing model on (the media's work);
//! - map memory per mapped block with nothing shared, and per shared block.

use std::time::Instant;

use clap::Args;
use serde::Serialize;
use zftl::transaction::Transaction;
use zftl_core::{
    Backend, Driver, FormatOptions, FtlConfig, IoError, RangeOp, ReplyData, Request, TagPlacement,
};
use zftl_sim::{SimConfig, SimDevice, Timing};

use super::{median, ratio, round, show, BenchError};
use crate::report::Text;

const MIB: u64 = 1 << 20;
const BLOCK: u64 = 4096;

/// `zftl bench range`.
#[derive(Debug, Clone, Args)]
pub struct RangeArgs {
    /// Single-block move vectors timed per round.
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    pub moves: u64,
    /// Move vectors kept in flight, one measurement each.
    #[arg(long, value_name = "N,..", value_delimiter = ',', default_values_t = [1, 16, 256])]
    pub depths: Vec<usize>,
    /// Largest range cloned and copied, in MiB (sizes from 4 KiB, ×16 each).
    #[arg(long, value_name = "MIB", default_value_t = 1024)]
    pub max_clone_mib: u64,
    /// Transactions per size in the journaling comparison.
    #[arg(long, value_name = "N", default_value_t = 400)]
    pub transactions: u64,
    /// Rounds of each measurement.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rounds: usize,
    /// Keep block tags in band (the simulated device has 64 OOB bytes).
    #[arg(long)]
    pub in_band_tags: bool,
}

#[derive(Debug, Serialize)]
pub struct Rounds {
    pub rounds: Vec<f64>,
    pub min: f64,
    pub median: f64,
}

impl Rounds {
    pub(super) fn of(rounds: Vec<f64>) -> Rounds {
        let min = rounds.iter().copied().fold(f64::INFINITY, f64::min);
        Rounds {
            median: round(median(rounds.iter().copied()), 4),
            min: round(if min.is_finite() { min } else { 0.0 }, 4),
            rounds: rounds.iter().map(|&x| round(x, 4)).collect(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct MoveRate {
    pub depth: usize,
    pub moves_per_round: u64,
    pub moves_per_s: Rounds,
    /// Log packs that carried vectors' replies, per vector.
    pub commits_per_vector: f64,
    pub notes_per_vector: f64,
}

#[derive(Debug, Serialize)]
pub struct CloneVsCopy {
    pub bytes: u64,
    pub clone_ms: Rounds,
    pub copy_ms: Rounds,
    /// clone ÷ copy, per round.
    pub clone_over_copy: Rounds,
    /// Metadata blocks the clone wrote (log blocks with its notes).
    pub clone_meta_blocks: u64,
    pub clone_notes: u64,
}

#[derive(Debug, Serialize)]
pub struct Journaling {
    /// `wall`: timing off, the CPU cost (wall clock); `virtual`: the
    /// default timing model on, the media's time (virtual clock, exact).
    pub clock: &'static str,
    pub transaction_bytes: u64,
    pub single_write_tx_per_s: Rounds,
    pub double_write_tx_per_s: Rounds,
    /// single ÷ double, per round.
    pub speedup: Rounds,
    /// Media blocks written per transaction (data, metadata, padding).
    pub single_write_media_blocks_per_tx: f64,
    pub double_write_media_blocks_per_tx: f64,
}

#[derive(Debug, Serialize)]
pub struct RangeReport {
    pub tag_mode: &'static str,
    pub device_bytes: u64,
    pub moves: Vec<MoveRate>,
    pub clone_vs_copy: Vec<CloneVsCopy>,
    /// Writes of one block each: to blocks another block shares, and to
    /// unshared mapped blocks (the same count, the same sizes); µs per write.
    pub break_sharing_us: Rounds,
    pub plain_overwrite_us: Rounds,
    /// break ÷ plain, per round.
    pub break_over_plain: Rounds,
    pub journaling: Vec<Journaling>,
    /// Map memory (L2P, validity, shared table) per mapped block of a
    /// volume with nothing shared.
    pub map_bytes_per_mapped_block_unshared: f64,
    /// Shared-table bytes per shared block after a clone.
    pub bytes_per_shared_block: f64,
}

/// The default 4 GiB device in memory, timing off unless `timing`.
fn volume(
    args: &RangeArgs,
    ftl: &FtlConfig,
    timing: Option<Timing>,
) -> Result<Driver<SimDevice>, BenchError> {
    let sim = SimConfig {
        endurance_erases: u32::MAX,
        timing,
        ..SimConfig::default()
    };
    let dev = SimDevice::create_memory(sim)?;
    let opts = FormatOptions {
        tag_placement: if args.in_band_tags {
            TagPlacement::InBand
        } else {
            TagPlacement::Auto
        },
        ..FormatOptions::default()
    };
    Ok(Driver::format(dev, &opts, ftl.clone())?)
}

/// Writes `blocks` blocks from `lba` in 1 MiB requests (each block names
/// itself), then flushes.
fn fill(ftl: &mut Driver<SimDevice>, lba: u64, blocks: u64) -> Result<(), BenchError> {
    let bs = ftl.block_size();
    let per = (MIB / BLOCK).min(blocks.max(1));
    let mut at = lba;
    while at < lba + blocks {
        let n = per.min(lba + blocks - at);
        let mut data = vec![0u8; n as usize * bs];
        for (i, b) in data.chunks_mut(bs).enumerate() {
            b[..8].copy_from_slice(&(at + i as u64).to_le_bytes());
        }
        ftl.write(at, &data)?;
        at += n;
    }
    ftl.flush()?;
    Ok(())
}

pub fn run(args: &RangeArgs, ftl: &FtlConfig) -> Result<RangeReport, BenchError> {
    if args.rounds == 0 || args.moves == 0 || args.depths.contains(&0) {
        return Err(BenchError::Args(
            "--rounds, --moves and every --depths value must be at least 1".into(),
        ));
    }
    let config = ftl;
    let mut ftl = volume(args, config, None)?;
    let device_bytes = {
        let g = ftl.backend().geometry();
        u64::from(g.zone_count) * g.zone_capacity_blocks * u64::from(g.block_size_bytes)
    };
    let (unshared, per_shared) = memory(&mut ftl)?;
    let moves = args
        .depths
        .iter()
        .map(|&d| move_rate(&mut ftl, args, d))
        .collect::<Result<Vec<_>, _>>()?;
    let clone_vs_copy = clone_vs_copy(&mut ftl, args)?;
    let (breaking, plain) = break_sharing(&mut ftl, args)?;
    let over: Vec<f64> = breaking
        .iter()
        .zip(&plain)
        .map(|(b, p)| ratio(*b, *p))
        .collect();
    let sizes = [4 << 10, 16 << 10, 64 << 10, 256 << 10, MIB];
    let mut journaling = sizes
        .into_iter()
        .map(|bytes| journal(&mut ftl, args, bytes, Clock::Wall))
        .collect::<Result<Vec<_>, _>>()?;
    let mut timed = volume(args, config, Some(Timing::default()))?;
    for bytes in sizes {
        journaling.push(journal(&mut timed, args, bytes, Clock::Virtual)?);
    }
    Ok(RangeReport {
        tag_mode: if args.in_band_tags { "in-band" } else { "oob" },
        device_bytes,
        moves,
        clone_vs_copy,
        break_sharing_us: Rounds::of(breaking),
        plain_overwrite_us: Rounds::of(plain),
        break_over_plain: Rounds::of(over),
        journaling,
        map_bytes_per_mapped_block_unshared: round(unshared, 3),
        bytes_per_shared_block: round(per_shared, 3),
    })
}

/// Area of the volume each measurement uses (in blocks from 0): moves at
/// 0.. and 64 Ki.., clone sources at 128 Ki.., and so on, apart.
const MOVE_BLOCKS: u64 = 1 << 16;
const MOVE_A: u64 = 0;
const MOVE_B: u64 = MOVE_BLOCKS;
const MEMORY_AT: u64 = 2 * MOVE_BLOCKS;

fn memory(ftl: &mut Driver<SimDevice>) -> Result<(f64, f64), BenchError> {
    fill(ftl, MEMORY_AT, MOVE_BLOCKS)?;
    let s = ftl.stats();
    let unshared = s.map_bytes_per_mapped_block;
    ftl.clone_ranges(&[(MEMORY_AT, MEMORY_AT + MOVE_BLOCKS, MOVE_BLOCKS)])?;
    let s = ftl.stats();
    let per_shared = ratio(s.shared_memory_bytes as f64, s.shared_blocks as f64);
    ftl.delete_ranges(&[(MEMORY_AT, 2 * MOVE_BLOCKS)])?;
    Ok((unshared, per_shared))
}

/// Durable single-block moves per second with `depth` vectors in flight:
/// blocks go from area A to B and back, one vector each.
fn move_rate(
    ftl: &mut Driver<SimDevice>,
    args: &RangeArgs,
    depth: usize,
) -> Result<MoveRate, BenchError> {
    fill(ftl, MOVE_A, MOVE_BLOCKS)?;
    // Blocks written since the last checkpoint need a pin in the first
    // vector that reads them: checkpoint first, so every round is alike.
    ftl.checkpoint()?;
    let mut rates = Vec::with_capacity(args.rounds);
    let before = ftl.stats();
    let mut from_a = true;
    let mut done = 0u64;
    for _ in 0..args.rounds {
        let t = Instant::now();
        let mut sent = 0u64;
        let mut answered = 0u64;
        let mut next_id = 1u64 << 40;
        let mut in_flight = 0usize;
        while answered < args.moves {
            while in_flight < depth && sent < args.moves {
                let i = (done + sent) % MOVE_BLOCKS;
                let (src, dst) = if from_a {
                    (MOVE_A + i, MOVE_B + i)
                } else {
                    (MOVE_B + i, MOVE_A + i)
                };
                let op = RangeOp::Move {
                    src,
                    dst,
                    block_count: 1,
                };
                match ftl.try_submit(next_id, Request::Range { ops: vec![op] }) {
                    Ok(()) => {
                        next_id += 1;
                        sent += 1;
                        in_flight += 1;
                        if (done + sent).is_multiple_of(MOVE_BLOCKS) {
                            from_a = !from_a;
                        }
                    }
                    Err(IoError::Busy) => break,
                    Err(e) => return Err(e.into()),
                }
            }
            ftl.turn()?;
            while let Some(reply) = ftl.take_reply() {
                match reply.result {
                    Ok(ReplyData::Done) => {}
                    Ok(other) => unreachable!("a move answered {other:?}"),
                    Err(e) => return Err(e.into()),
                }
                answered += 1;
                in_flight -= 1;
            }
        }
        done += sent;
        rates.push(args.moves as f64 / t.elapsed().as_secs_f64());
    }
    let after = ftl.stats();
    let vectors = (after.range_vectors - before.range_vectors) as f64;
    Ok(MoveRate {
        depth,
        moves_per_round: args.moves,
        moves_per_s: Rounds::of(rates),
        commits_per_vector: round(
            ratio((after.range_commits - before.range_commits) as f64, vectors),
            4,
        ),
        notes_per_vector: round(
            ratio((after.range_notes - before.range_notes) as f64, vectors),
            4,
        ),
    })
}

const CLONE_SRC: u64 = 1 << 18;

fn clone_vs_copy(
    ftl: &mut Driver<SimDevice>,
    args: &RangeArgs,
) -> Result<Vec<CloneVsCopy>, BenchError> {
    let max_blocks = args.max_clone_mib * MIB / BLOCK;
    let dst = CLONE_SRC + max_blocks;
    let room = ftl.logical_blocks();
    if dst + max_blocks > room {
        return Err(BenchError::Args(format!(
            "--max-clone-mib {} does not fit twice in the volume",
            args.max_clone_mib
        )));
    }
    fill(ftl, CLONE_SRC, max_blocks)?;
    ftl.checkpoint()?;
    let bs = ftl.block_size();
    let mut out = Vec::new();
    // 4 KiB, ×16 each, and the largest size itself.
    let mut sizes: Vec<u64> = std::iter::successors(Some(1u64), |b| Some(b * 16))
        .take_while(|&b| b < max_blocks)
        .collect();
    sizes.push(max_blocks);
    for blocks in sizes {
        let (mut clones, mut copies) = (Vec::new(), Vec::new());
        let (mut meta, mut notes) = (0, 0);
        for _ in 0..args.rounds {
            let s0 = ftl.stats();
            let t = Instant::now();
            ftl.clone_ranges(&[(CLONE_SRC, dst, blocks)])?;
            clones.push(t.elapsed().as_secs_f64() * 1e3);
            let s1 = ftl.stats();
            meta = s1.meta_write_blocks - s0.meta_write_blocks;
            notes = s1.range_notes - s0.range_notes;
            ftl.delete_ranges(&[(dst, blocks)])?;
            let t = Instant::now();
            let chunk = (8 * MIB / BLOCK).min(blocks);
            let mut at = 0;
            while at < blocks {
                let n = chunk.min(blocks - at);
                let data = ftl.read(CLONE_SRC + at, n as u32)?;
                debug_assert_eq!(data.len(), n as usize * bs);
                ftl.write(dst + at, &data)?;
                at += n;
            }
            ftl.flush()?;
            copies.push(t.elapsed().as_secs_f64() * 1e3);
            ftl.delete_ranges(&[(dst, blocks)])?;
        }
        let ratios = clones
            .iter()
            .zip(&copies)
            .map(|(c, p)| ratio(*c, *p))
            .collect();
        out.push(CloneVsCopy {
            bytes: blocks * BLOCK,
            clone_ms: Rounds::of(clones),
            copy_ms: Rounds::of(copies),
            clone_over_copy: Rounds::of(ratios),
            clone_meta_blocks: meta,
            clone_notes: notes,
        });
    }
    Ok(out)
}

const SHARE_AT: u64 = 1 << 17;
const SHARE_BLOCKS: u64 = 1 << 14;

/// µs per one-block write: breaking sharing (to clones) and plain (to
/// unshared blocks), alternating which goes first.
fn break_sharing(
    ftl: &mut Driver<SimDevice>,
    args: &RangeArgs,
) -> Result<(Vec<f64>, Vec<f64>), BenchError> {
    let bs = ftl.block_size();
    let (src, clone, plain) = (
        SHARE_AT,
        SHARE_AT + SHARE_BLOCKS,
        SHARE_AT + 2 * SHARE_BLOCKS,
    );
    let block = vec![0x5A; bs];
    let (mut breaking, mut plains) = (Vec::new(), Vec::new());
    for r in 0..args.rounds {
        fill(ftl, src, SHARE_BLOCKS)?;
        fill(ftl, plain, SHARE_BLOCKS)?;
        ftl.clone_ranges(&[(src, clone, SHARE_BLOCKS)])?;
        let time = |ftl: &mut Driver<SimDevice>, at: u64| -> Result<f64, BenchError> {
            let t = Instant::now();
            for i in 0..SHARE_BLOCKS {
                ftl.write(at + i, &block)?;
            }
            ftl.flush()?;
            Ok(t.elapsed().as_secs_f64() * 1e6 / SHARE_BLOCKS as f64)
        };
        if r % 2 == 0 {
            breaking.push(time(ftl, clone)?);
            plains.push(time(ftl, plain)?);
        } else {
            plains.push(time(ftl, plain)?);
            breaking.push(time(ftl, clone)?);
        }
    }
    ftl.delete_ranges(&[(SHARE_AT, 3 * SHARE_BLOCKS)])?;
    Ok((breaking, plains))
}

const TX_TARGET: u64 = 1 << 19;
const TX_TARGET_BLOCKS: u64 = 1 << 15;
const TX_SCRATCH: u64 = TX_TARGET + TX_TARGET_BLOCKS;

/// What a journaling round is timed by.
#[derive(Clone, Copy)]
enum Clock {
    Wall,
    Virtual,
}

impl Clock {
    /// A reading in seconds.
    fn now(self, ftl: &Driver<SimDevice>, wall: Instant) -> f64 {
        match self {
            Clock::Wall => wall.elapsed().as_secs_f64(),
            Clock::Virtual => ftl.backend().clock_ns() as f64 / 1e9,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Clock::Wall => "wall",
            Clock::Virtual => "virtual",
        }
    }
}

/// Transactions of `bytes` each: single-write (scratch + move vector) and
/// double-write (journal record + commit block + flush + target + flush),
/// in alternating rounds, timed by `clock`.
fn journal(
    ftl: &mut Driver<SimDevice>,
    args: &RangeArgs,
    bytes: u64,
    clock: Clock,
) -> Result<Journaling, BenchError> {
    let started = Instant::now();
    let blocks = bytes / BLOCK;
    let data = vec![0xC3; bytes as usize];
    let commit = vec![0x3C; BLOCK as usize];
    let slots = TX_TARGET_BLOCKS / blocks;
    let (mut single, mut double) = (Vec::new(), Vec::new());
    let (mut single_media, mut double_media) = (0u64, 0u64);
    for r in 0..args.rounds {
        let run_single = |ftl: &mut Driver<SimDevice>| -> Result<(f64, u64), BenchError> {
            let m0 = ftl.stats().media_write_blocks;
            let t = clock.now(ftl, started);
            for i in 0..args.transactions {
                let target = TX_TARGET + (i % slots) * blocks;
                let mut tx = Transaction::begin(ftl, TX_SCRATCH, blocks)?;
                tx.write(target, &data)?;
                tx.commit()?;
            }
            let rate = args.transactions as f64 / (clock.now(ftl, started) - t);
            Ok((rate, ftl.stats().media_write_blocks - m0))
        };
        let run_double = |ftl: &mut Driver<SimDevice>| -> Result<(f64, u64), BenchError> {
            let m0 = ftl.stats().media_write_blocks;
            let t = clock.now(ftl, started);
            for i in 0..args.transactions {
                let target = TX_TARGET + (i % slots) * blocks;
                // The journal record: the data and a commit block after it.
                ftl.write(TX_SCRATCH, &data)?;
                ftl.write(TX_SCRATCH + blocks, &commit)?;
                ftl.flush()?;
                ftl.write(target, &data)?;
                ftl.flush()?;
            }
            let rate = args.transactions as f64 / (clock.now(ftl, started) - t);
            Ok((rate, ftl.stats().media_write_blocks - m0))
        };
        let (s, d) = if r % 2 == 0 {
            let s = run_single(ftl)?;
            (s, run_double(ftl)?)
        } else {
            let d = run_double(ftl)?;
            (run_single(ftl)?, d)
        };
        single.push(s.0);
        double.push(d.0);
        single_media += s.1;
        double_media += d.1;
    }
    let speedup = single
        .iter()
        .zip(&double)
        .map(|(s, d)| ratio(*s, *d))
        .collect();
    let txs = (args.transactions * args.rounds as u64) as f64;
    Ok(Journaling {
        clock: clock.name(),
        transaction_bytes: bytes,
        single_write_tx_per_s: Rounds::of(single),
        double_write_tx_per_s: Rounds::of(double),
        speedup: Rounds::of(speedup),
        single_write_media_blocks_per_tx: round(single_media as f64 / txs, 3),
        double_write_media_blocks_per_tx: round(double_media as f64 / txs, 3),
    })
}

impl RangeReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "range operations on a {} simulated device in memory (timing off, and on for the virtual-clock journaling), tags {}",
            crate::report::human_bytes(self.device_bytes),
            self.tag_mode
        ));
        t.section("durable single-block moves");
        for m in &self.moves {
            t.row(
                &format!("depth_{}_moves_per_s", m.depth),
                show(&m.moves_per_s),
            );
            t.row(
                &format!("depth_{}_commits_per_vector", m.depth),
                m.commits_per_vector,
            );
        }
        t.section("clone vs copy (both durable)");
        for c in &self.clone_vs_copy {
            let size = crate::report::human_bytes(c.bytes);
            t.row(&format!("{size}_clone_ms"), show(&c.clone_ms));
            t.row(&format!("{size}_copy_ms"), show(&c.copy_ms));
            t.row(&format!("{size}_clone_over_copy"), show(&c.clone_over_copy));
            t.row(&format!("{size}_clone_meta_blocks"), c.clone_meta_blocks);
        }
        t.section("first write to a shared block");
        t.row("break_sharing_us", show(&self.break_sharing_us));
        t.row("plain_overwrite_us", show(&self.plain_overwrite_us));
        t.row("break_over_plain", show(&self.break_over_plain));
        t.section("single-write vs double-write journaling (flush per transaction)");
        for j in &self.journaling {
            let size = format!(
                "{}_{}",
                j.clock,
                crate::report::human_bytes(j.transaction_bytes)
            );
            t.row(
                &format!("{size}_single_tx_per_s"),
                show(&j.single_write_tx_per_s),
            );
            t.row(
                &format!("{size}_double_tx_per_s"),
                show(&j.double_write_tx_per_s),
            );
            t.row(&format!("{size}_speedup"), show(&j.speedup));
            t.row(
                &format!("{size}_media_blocks_per_tx"),
                format!(
                    "single {} double {}",
                    j.single_write_media_blocks_per_tx, j.double_write_media_blocks_per_tx
                ),
            );
        }
        t.section("memory");
        t.row(
            "map_bytes_per_mapped_block_unshared",
            self.map_bytes_per_mapped_block_unshared,
        );
        t.row("bytes_per_shared_block", self.bytes_per_shared_block);
        t.render()
    }
}
