//! `zftl bench nameless`'s random-write workload (Zhang et al., FAST'12,
//! Figs 4–5): 4 KiB random overwrites of a working set of 10 % to 90 % of
//! the volume, page-mapped (logical writes) against nameless (overwrites
//! of the client's own addresses, following GC's migrations), on the
//! simulator with its timing model on, so throughput is in virtual time
//! and exact. Both sides: a fresh volume of the same geometry, the working
//! set filled sequentially (64-block commands), then one-block commands,
//! `depth` in flight, at random over the working set (none twice in
//! flight), `passes` times its size; the first pass warms GC up, the rest
//! is measured. Every `commit_every` writes (an eighth of the volume's
//! blocks, 64 to 4096) the nameless side commits (a flush and a
//! note; it also acknowledges the moves taken) and the page-mapped side
//! flushes: a client that acknowledges moves rarely holds the zones they
//! landed in, which on a small volume is a large share of its space.

use std::collections::{HashMap, HashSet};

use serde::Serialize;
use zftl_core::{
    Backend, Driver, FormatOptions, FtlConfig, IoError, NamelessAddr, NamelessError, NamelessEvent,
    ReplyData, Request,
};
use zftl_sim::rng::Rng;
use zftl_sim::{SimConfig, SimDevice, Timing};

use super::{progress, ratio, round, BenchError};

/// Writes between the nameless side's commits (and the page-mapped side's
/// flushes), at most.
const COMMIT_EVERY_WRITES: u64 = 4096;

/// Writes between commits on a volume of `logical_blocks`.
fn commit_every(logical_blocks: u64) -> u64 {
    (logical_blocks / 8).clamp(FILL_BLOCKS, COMMIT_EVERY_WRITES) / FILL_BLOCKS * FILL_BLOCKS
}

/// Blocks per command of the fill.
const FILL_BLOCKS: u64 = 64;

/// What the workload is run with.
#[derive(Clone, Debug)]
pub struct RandomWriteSetup {
    pub working_set_percents: Vec<u32>,
    pub depth: usize,
    pub passes: u64,
    pub blocks_per_lun: u32,
    /// Tags in band (the device has no OOB).
    pub in_band_tags: bool,
    pub seed: u64,
}

/// One side at one working set (measured passes only).
#[derive(Debug, Serialize)]
pub struct SideFigures {
    /// Host writes per virtual second.
    pub writes_per_s: f64,
    /// Blocks GC copied (migrated, on the nameless side) per host write.
    pub gc_copies_per_write: f64,
    pub write_amplification: f64,
}

#[derive(Debug, Serialize)]
pub struct WorkingSetRow {
    pub working_set_percent: u32,
    pub working_set_blocks: u64,
    pub page_mapped: SideFigures,
    pub nameless: SideFigures,
    /// Nameless writes per second ÷ page-mapped (target ≥ 0.9).
    pub throughput_ratio: f64,
    /// Moves the nameless side followed (`Migrated` events) while measured.
    pub nameless_moves_followed: u64,
    /// In-place collections the nameless side's GC ran, and the blocks
    /// they filled and padded, while measured (its overwrites never fill
    /// a gap: only plain writes do).
    pub nameless_inplace_jobs: u64,
    pub nameless_gap_fill_blocks: u64,
    pub nameless_pad_blocks: u64,
}

#[derive(Debug, Serialize)]
pub struct RandomWrites {
    pub device_bytes: u64,
    pub in_band_tags: bool,
    pub depth: usize,
    pub passes: u64,
    pub commit_every_writes: u64,
    /// The FTL's remap table entries (`--remap-entries`).
    pub remap_entries: u32,
    pub rows: Vec<WorkingSetRow>,
    /// The smallest throughput ratio over the working sets.
    pub min_throughput_ratio: f64,
}

/// The simulated device of the random writes (and of the wear-leveling
/// workloads): the default geometry with `blocks_per_lun` erase blocks per
/// LUN, timing on, blocks that never wear out (the FTL's policies act on
/// their erase counts); no OOB with `in_band_tags` (tags go in band).
pub(super) fn sim_config(blocks_per_lun: u32, in_band_tags: bool) -> SimConfig {
    let oob_size_bytes = if in_band_tags {
        0
    } else {
        SimConfig::default().oob_size_bytes
    };
    SimConfig {
        blocks_per_lun,
        oob_size_bytes,
        timing: Some(Timing::default()),
        endurance_erases: u32::MAX,
        ..SimConfig::default()
    }
}

pub fn run(s: &RandomWriteSetup, ftl: &FtlConfig) -> Result<RandomWrites, BenchError> {
    if s.working_set_percents.is_empty()
        || s.working_set_percents.iter().any(|&p| p == 0 || p > 100)
        || s.depth == 0
        || s.passes < 2
    {
        return Err(BenchError::Args(
            "--working-sets lists percents 1..=100, --rw-depth is at least 1 and \
             --rw-passes at least 2 (the first warms GC up)"
                .into(),
        ));
    }
    let cfg = sim_config(s.blocks_per_lun, s.in_band_tags);
    let g = cfg.geometry()?;
    let device_bytes =
        u64::from(g.zone_count) * g.zone_capacity_blocks * u64::from(g.block_size_bytes);
    let mut rows = Vec::new();
    let mut commit_every_blocks = 0;
    for &pct in &s.working_set_percents {
        let side = |nameless| -> Result<SideRun, BenchError> {
            let mut side = Side::format(&cfg, ftl, s.seed, s.depth, nameless)?;
            let blocks = side.drv.logical_blocks() * u64::from(pct) / 100;
            side.set_working_set(blocks, blocks, s.seed ^ u64::from(pct));
            side.label = format!("{pct}% {}", side.kind());
            side.run(s.passes)
        };
        let page = side(false)?;
        commit_every_blocks = page.commit_every;
        let nameless = side(true)?;
        rows.push(WorkingSetRow {
            working_set_percent: pct,
            working_set_blocks: page.blocks,
            throughput_ratio: round(
                ratio(nameless.figures.writes_per_s, page.figures.writes_per_s),
                4,
            ),
            nameless_moves_followed: nameless.moves,
            nameless_inplace_jobs: nameless.inplace.0,
            nameless_gap_fill_blocks: nameless.inplace.1,
            nameless_pad_blocks: nameless.inplace.2,
            page_mapped: page.figures,
            nameless: nameless.figures,
        });
    }
    let min = rows
        .iter()
        .map(|r| r.throughput_ratio)
        .fold(f64::INFINITY, f64::min);
    Ok(RandomWrites {
        device_bytes,
        in_band_tags: s.in_band_tags,
        depth: s.depth,
        passes: s.passes,
        commit_every_writes: commit_every_blocks,
        remap_entries: ftl.nameless_remap_entries,
        rows,
        min_throughput_ratio: if min.is_finite() { min } else { 0.0 },
    })
}

/// What one side's run measured.
struct SideRun {
    blocks: u64,
    commit_every: u64,
    figures: SideFigures,
    moves: u64,
    /// In-place jobs, gap fills and pads while measured.
    inplace: (u64, u64, u64),
}

/// One side's volume and the client's state: the nameless side's own
/// index (the address of each working-set block, and back).
pub(super) struct Side {
    pub(super) drv: Driver<SimDevice>,
    nameless: bool,
    /// Blocks the fill writes (the working set).
    blocks: u64,
    /// The first `region` of them take the random overwrites.
    region: u64,
    depth: usize,
    index: Vec<NamelessAddr>,
    by_addr: HashMap<NamelessAddr, u64>,
    rng: Rng,
    next_id: u64,
    /// `Migrated` events followed.
    moves: u64,
    /// What the progress bar says.
    pub(super) label: String,
    pub(super) commit_every: u64,
}

impl Side {
    /// A fresh volume on `cfg`, nothing written yet; `set_working_set`
    /// next.
    pub(super) fn format(
        cfg: &SimConfig,
        ftl: &FtlConfig,
        seed: u64,
        depth: usize,
        nameless: bool,
    ) -> Result<Side, BenchError> {
        let dev = SimDevice::create_memory(cfg.clone())?;
        let opts = FormatOptions {
            seed,
            ..FormatOptions::default()
        };
        let drv = Driver::format(dev, &opts, ftl.clone())?;
        let every = commit_every(drv.logical_blocks());
        Ok(Side {
            drv,
            nameless,
            blocks: 1,
            region: 1,
            depth,
            index: Vec::new(),
            by_addr: HashMap::new(),
            rng: Rng::new(seed),
            next_id: 1,
            moves: 0,
            label: String::new(),
            commit_every: every,
        })
    }

    /// The fill writes `blocks`; the overwrites pick among the first
    /// `region` of them, in an order seeded by `seed`.
    pub(super) fn set_working_set(&mut self, blocks: u64, region: u64, seed: u64) {
        self.blocks = blocks.max(1);
        self.region = region.clamp(1, self.blocks);
        self.rng = Rng::new(seed);
    }

    pub(super) fn kind(&self) -> &'static str {
        if self.nameless {
            "nameless"
        } else {
            "page-mapped"
        }
    }

    fn block(&self, i: u64) -> Vec<u8> {
        let mut b = vec![0u8; self.drv.block_size()];
        b[..8].copy_from_slice(&i.to_le_bytes());
        b
    }

    /// The fill, a pass of overwrites to warm GC up, and `passes - 1`
    /// measured.
    fn run(mut self, passes: u64) -> Result<SideRun, BenchError> {
        self.fill()?;
        let per_pass = self.blocks;
        let bar = progress(per_pass * passes, &self.label);
        self.overwrite(per_pass, &bar)?;
        let (t0, s0, moves0) = (self.drv.backend().clock_ns(), self.drv.stats(), self.moves);
        self.overwrite(per_pass * (passes - 1), &bar)?;
        bar.finish_and_clear();
        let (t1, s1) = (self.drv.backend().clock_ns(), self.drv.stats());
        let writes = per_pass * (passes - 1);
        let host = |s: &zftl_core::FtlStats| s.host_write_blocks + s.nameless_write_blocks;
        let host_blocks = (host(&s1) - host(&s0)) as f64;
        let figures = SideFigures {
            writes_per_s: round(writes as f64 * 1e9 / (t1 - t0).max(1) as f64, 1),
            gc_copies_per_write: round(
                (s1.gc_copy_blocks - s0.gc_copy_blocks) as f64 / writes as f64,
                4,
            ),
            write_amplification: round(
                (s1.media_write_blocks - s0.media_write_blocks) as f64 / host_blocks.max(1.0),
                4,
            ),
        };
        Ok(SideRun {
            blocks: self.blocks,
            commit_every: self.commit_every,
            figures,
            moves: self.moves - moves0,
            inplace: (
                s1.nameless_inplace_jobs - s0.nameless_inplace_jobs,
                s1.nameless_gap_fill_blocks - s0.nameless_gap_fill_blocks,
                s1.nameless_pad_blocks - s0.nameless_pad_blocks,
            ),
        })
    }

    /// The working set, written once in order.
    pub(super) fn fill(&mut self) -> Result<(), BenchError> {
        let md_bytes = self.drv.nameless_md_bytes();
        let mut at = 0;
        while at < self.blocks {
            let n = FILL_BLOCKS.min(self.blocks - at);
            let data: Vec<u8> = (at..at + n).flat_map(|i| self.block(i)).collect();
            if self.nameless {
                let md = vec![0u8; n as usize * md_bytes];
                let addrs = self.drv.nameless_write(&data, &md)?;
                for (i, a) in (at..).zip(addrs) {
                    self.by_addr.insert(a, i);
                    self.index.push(a);
                }
                if (at / FILL_BLOCKS + 1).is_multiple_of(self.commit_every / FILL_BLOCKS) {
                    self.drv.nameless_commit()?;
                }
            } else {
                self.drv.write(at, &data)?;
            }
            at += n;
        }
        if self.nameless {
            self.drv.nameless_commit()?;
        } else {
            self.drv.flush()?;
        }
        Ok(())
    }

    /// The request that overwrites working-set block `i`.
    fn overwrite_request(&self, i: u64) -> Request {
        let data = self.block(i);
        if self.nameless {
            Request::NamelessOverwrite {
                old: vec![self.index[i as usize]],
                data,
                md: vec![0u8; self.drv.nameless_md_bytes()],
                fua: false,
            }
        } else {
            Request::Write {
                lba: i,
                data,
                fua: false,
            }
        }
    }

    /// `total` random one-block overwrites of the region, `depth` in
    /// flight, a commit (flush) every `commit_every`, the last after the
    /// last write.
    pub(super) fn overwrite(
        &mut self,
        total: u64,
        bar: &indicatif::ProgressBar,
    ) -> Result<(), BenchError> {
        let mut in_flight: HashMap<u64, u64> = HashMap::new();
        let mut busy: HashSet<u64> = HashSet::new();
        let mut syncs: HashSet<u64> = HashSet::new();
        let (mut issued, mut done) = (0u64, 0u64);
        let mut sync_due = false;
        // Writes refused for unacknowledged moves wait for the commit that
        // acknowledges them; commits that free nothing end the run.
        let (mut held_back, mut refused, mut fruitless) = (false, false, 0u32);
        while done < total || !syncs.is_empty() || sync_due {
            if sync_due {
                let sync = if self.nameless {
                    Request::NamelessCommit
                } else {
                    Request::Flush
                };
                match self.drv.try_submit(self.next_id, sync) {
                    Ok(()) => {
                        syncs.insert(self.next_id);
                        self.next_id += 1;
                        sync_due = false;
                    }
                    Err(IoError::Busy) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            while !sync_due && !held_back && in_flight.len() < self.depth && issued < total {
                let i = loop {
                    let i = self.rng.next_u64() % self.region;
                    if !busy.contains(&i) {
                        break i;
                    }
                };
                let id = self.next_id;
                match self.drv.try_submit(id, self.overwrite_request(i)) {
                    Ok(()) => {}
                    Err(IoError::Busy) => break,
                    Err(e) => return Err(e.into()),
                }
                self.next_id += 1;
                in_flight.insert(id, i);
                busy.insert(i);
                issued += 1;
                sync_due = issued.is_multiple_of(self.commit_every) || issued == total;
            }
            let moved = self.drv.turn()?;
            let mut replies = 0;
            while let Some(reply) = self.drv.take_reply() {
                replies += 1;
                let unacknowledged = matches!(
                    reply.result,
                    Err(IoError::Nameless(NamelessError::MovesUnacknowledged { .. }))
                );
                if unacknowledged && in_flight.contains_key(&reply.id) && fruitless < 3 {
                    // GC waits for the moves this side followed: commit,
                    // then write again (another random block).
                    let i = in_flight.remove(&reply.id).expect("checked");
                    busy.remove(&i);
                    issued -= 1;
                    sync_due |= syncs.is_empty();
                    (held_back, refused) = (true, true);
                    continue;
                }
                let result = reply.result?;
                if syncs.remove(&reply.id) {
                    held_back = false;
                    fruitless = if refused { fruitless + 1 } else { 0 };
                    continue;
                }
                refused = false;
                let i = in_flight.remove(&reply.id).ok_or_else(|| {
                    BenchError::Check(format!("a reply to unknown id {}", reply.id))
                })?;
                busy.remove(&i);
                done += 1;
                bar.inc(1);
                if let ReplyData::Addrs(addrs) = result {
                    self.by_addr.remove(&self.index[i as usize]);
                    self.index[i as usize] = addrs[0];
                    self.by_addr.insert(addrs[0], i);
                }
            }
            self.follow_moves()?;
            if !moved && replies == 0 {
                return Err(BenchError::Check(format!(
                    "the volume stalled with {} writes in flight: {}",
                    in_flight.len(),
                    self.drv.ftl().debug_state()
                )));
            }
        }
        Ok(())
    }

    /// Repoints the index at the moves GC made (the next commit
    /// acknowledges them).
    fn follow_moves(&mut self) -> Result<(), BenchError> {
        while let Some(e) = self.drv.poll_event() {
            match e {
                NamelessEvent::Migrated { old, new, .. } => {
                    self.moves += 1;
                    if let Some(i) = self.by_addr.remove(&old) {
                        self.index[i as usize] = new;
                        self.by_addr.insert(new, i);
                    }
                }
                other => {
                    return Err(BenchError::Check(format!(
                        "an event no write left: {other:?}"
                    )))
                }
            }
        }
        Ok(())
    }
}
