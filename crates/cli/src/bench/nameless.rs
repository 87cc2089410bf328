//! `zftl bench nameless`: the physical segment (nameless writes) on the
//! in-memory simulator with timing off (CPU cost and media counts, wall
//! clock):
//!
//! - map memory per GiB stored: the same data written once as logical
//!   blocks and once as nameless blocks, each on a fresh volume; what the
//!   data added to the logical side's `map_memory_bytes` (its L2P), against
//!   what it added to the nameless side's plus the nameless per-zone state
//!   (a generation per zone, not in `FtlStats` yet); the P2L (a validity
//!   bit per physical block) is left out of both, which keep it alike;
//! - the example store (`zftl-kv`) with its values in the physical segment
//!   against the same store with its values in a logical value area of
//!   its own allocator: puts (a fill, then as many random overwrites) and
//!   random gets per second, same keys, values, one-block commands, one
//!   request in flight, a sync every `--sync-every` puts; fresh volumes
//!   each round, the two sides in alternating order. The same work, done
//!   the way each placement must: a nameless overwrite frees the old value
//!   with the new block and a sync is one `nameless_commit` (a flush, then
//!   the commit note); a logical put leaves the old value to its sync,
//!   which flushes, trims it (with the others since) and flushes again;
//! - 4 KiB random writes (`nameless_rw.rs`) and the paper's wear-leveling
//!   workloads (`nameless_wear.rs`), nameless against page-mapped, on the
//!   simulator with its timing model on (virtual time).

use std::time::Instant;

use clap::Args;
use serde::Serialize;
use zftl_core::p2l::P2l;
use zftl_core::{Backend, Driver, FormatOptions, FtlConfig};
use zftl_kv::{entries_per_bucket, Store, StoreOptions, ValuePlacement};
use zftl_sim::rng::Rng;
use zftl_sim::{SimConfig, SimDevice};

use super::nameless_rw::{RandomWriteSetup, RandomWrites};
use super::nameless_wear::{WearLeveling, WearSetup};
use super::range::Rounds;
use super::{progress, ratio, round, show, thread_cpu_s, BenchError};
use crate::report::Text;

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// `zftl bench nameless`.
#[derive(Debug, Clone, Args)]
pub struct NamelessArgs {
    /// Data stored on each side of the map memory comparison, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 2048)]
    pub stored_mib: u64,
    /// Keys of the store comparison.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    pub keys: u32,
    /// Bytes per value (at most a block).
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    pub value_bytes: usize,
    /// Puts between syncs (and, logical values, dropped values waiting for
    /// one).
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub sync_every: usize,
    /// Rounds of the store comparison; every round is printed.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub rounds: usize,
    /// Seed of the key order and of the random writes.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub seed: u64,
    /// Working sets of the random-write comparison, in percent of the
    /// volume (comma-separated).
    #[arg(
        long,
        value_name = "PERCENTS",
        value_delimiter = ',',
        default_value = "10,30,50,70,90"
    )]
    pub working_sets: Vec<u32>,
    /// One-block writes in flight in the random-write comparison.
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub rw_depth: usize,
    /// Passes over the working set (the first warms GC up; the rest is
    /// measured).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub rw_passes: u64,
    /// Erase blocks per LUN of the random-write device (the default
    /// geometry's 16 LUNs; 16 makes 256 MiB).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub rw_blocks_per_lun: u32,
    /// Wear-leveling workloads (the paper's §6.6): the share of the volume
    /// each overwrites after the fill, in percent (comma-separated).
    #[arg(
        long,
        value_name = "PERCENTS",
        value_delimiter = ',',
        default_value = "12.5,25"
    )]
    pub wear_hot_percents: Vec<f64>,
    /// Share of the volume's logical size the wear-leveling workloads fill
    /// first, in percent (at 100 the nameless side runs out of room to
    /// collect: see docs/bench.md).
    #[arg(long, value_name = "PERCENT", default_value_t = 90)]
    pub wear_fill_percent: u32,
    /// Times each workload overwrites its share.
    #[arg(long, value_name = "N", default_value_t = 40)]
    pub wear_passes: u64,
    /// Erase cycles the leveling policies assume (the simulated blocks
    /// never wear out).
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub wear_endurance: u32,
    /// The page-mapped side's static leveling threshold (erases between
    /// the most- and the least-worn zone); default 75 % of the endurance.
    #[arg(long, value_name = "N")]
    pub wear_page_threshold: Option<u32>,
    /// Erase blocks per LUN of the wear-leveling device (16 makes 256 MiB).
    #[arg(long, value_name = "N", default_value_t = 16)]
    pub wear_blocks_per_lun: u32,
    /// Tags in band on the random-write and wear-leveling devices (no
    /// OOB: nameless md in the log and md groups, page-mapped tags in the
    /// log and zone summaries); the map-memory and store comparisons keep
    /// tags in OOB.
    #[arg(long)]
    pub in_band_tags: bool,
    /// Entries of the FTL's nameless remap table on the random-write
    /// device (`FtlConfig::nameless_remap_entries`; default the FTL's): a
    /// small table stops migrations, and GC collects in place.
    #[arg(long, value_name = "N")]
    pub remap_entries: Option<u32>,
}

#[derive(Debug, Serialize)]
pub struct MapMemory {
    pub stored_bytes: u64,
    /// The P2L's bytes (one bit per physical block), left out of both sides.
    pub p2l_bytes: u64,
    /// `map_memory_bytes` less the P2L of each side's volume, fresh and
    /// after the data: the logical side's L2P, zone live counts and empty
    /// tables; the nameless side's the same, its L2P empty.
    pub page_level_fresh_map_bytes: u64,
    pub page_level_map_bytes: u64,
    pub nameless_fresh_map_bytes: u64,
    pub nameless_map_bytes: u64,
    /// The nameless side's per-zone state: the zones' generations (4 bytes
    /// per zone, kept by the core's physical segment; no statistic reports
    /// them yet, so this is 4 × the zone count).
    pub nameless_generation_bytes: u64,
    /// Map memory the data added, per GiB stored: page-level, the L2P's
    /// growth; nameless, its growth plus the generations.
    pub page_level_bytes_per_gib: f64,
    pub nameless_bytes_per_gib: f64,
    /// nameless ÷ page-level, per GiB stored.
    pub nameless_over_page_level: f64,
    /// The same with each volume's whole map memory less the P2L (the
    /// fixed tables both volumes have counted on both sides).
    pub nameless_over_page_level_totals: f64,
}

#[derive(Debug, Serialize)]
pub struct StoreRates {
    pub keys: u32,
    pub value_bytes: usize,
    pub buckets: u32,
    pub sync_every: usize,
    /// Puts per round: a fill of every key, then as many overwrites.
    pub puts_per_round: u64,
    /// Per second of this thread's CPU time (the driver, the FTL and the
    /// simulator all run on it): what other processes' load moves least.
    pub nameless_puts_per_cpu_s: Rounds,
    pub logical_puts_per_cpu_s: Rounds,
    /// nameless ÷ logical, per round.
    pub puts_ratio_cpu: Rounds,
    pub nameless_gets_per_cpu_s: Rounds,
    pub logical_gets_per_cpu_s: Rounds,
    pub gets_ratio_cpu: Rounds,
    /// The same per wall second.
    pub nameless_puts_per_s: Rounds,
    pub logical_puts_per_s: Rounds,
    pub puts_ratio: Rounds,
    pub nameless_gets_per_s: Rounds,
    pub logical_gets_per_s: Rounds,
    pub gets_ratio: Rounds,
    /// Media blocks written per put (values, buckets, GC, metadata), last
    /// round.
    pub nameless_media_blocks_per_put: f64,
    pub logical_media_blocks_per_put: f64,
    /// `map_memory_bytes` less the P2L after the puts, last round.
    pub nameless_map_bytes: u64,
    pub logical_map_bytes: u64,
}

#[derive(Debug, Serialize)]
pub struct NamelessReport {
    pub device_bytes: u64,
    pub memory: MapMemory,
    pub store: StoreRates,
    pub random_writes: RandomWrites,
    pub wear_leveling: WearLeveling,
}

/// The default 4 GiB device in memory (allocated as written), timing off.
fn volume(ftl: &FtlConfig) -> Result<Driver<SimDevice>, BenchError> {
    let sim = SimConfig {
        endurance_erases: u32::MAX,
        timing: None,
        ..SimConfig::default()
    };
    let dev = SimDevice::create_memory(sim)?;
    Ok(Driver::format(dev, &FormatOptions::default(), ftl.clone())?)
}

/// `map_memory_bytes` of `ftl` less its P2L, and the P2L's bytes.
fn map_bytes_less_p2l(ftl: &Driver<SimDevice>) -> (u64, u64) {
    let p2l = P2l::new(ftl.ftl().mapping().physical_blocks()).memory_bytes();
    (ftl.stats().map_memory_bytes - p2l, p2l)
}

pub fn run(args: &NamelessArgs, ftl: &FtlConfig) -> Result<NamelessReport, BenchError> {
    if args.rounds == 0 || args.keys == 0 || args.sync_every == 0 || args.stored_mib == 0 {
        return Err(BenchError::Args(
            "--rounds, --keys, --sync-every and --stored-mib must be at least 1".into(),
        ));
    }
    let setup = RandomWriteSetup {
        working_set_percents: args.working_sets.clone(),
        depth: args.rw_depth,
        passes: args.rw_passes,
        blocks_per_lun: args.rw_blocks_per_lun,
        in_band_tags: args.in_band_tags,
        seed: args.seed,
    };
    let wear = WearSetup {
        hot_percents: args.wear_hot_percents.clone(),
        fill_percent: args.wear_fill_percent,
        passes: args.wear_passes,
        endurance_erases: args.wear_endurance,
        page_threshold_erases: args.wear_page_threshold,
        depth: args.rw_depth,
        blocks_per_lun: args.wear_blocks_per_lun,
        in_band_tags: args.in_band_tags,
        seed: args.seed,
    };
    wear.check()?;
    let rw_ftl = FtlConfig {
        nameless_remap_entries: args.remap_entries.unwrap_or(ftl.nameless_remap_entries),
        ..ftl.clone()
    };
    if rw_ftl.nameless_remap_entries == 0 {
        return Err(BenchError::Args(
            "--remap-entries must be at least 1".into(),
        ));
    }
    let random_writes = super::nameless_rw::run(&setup, &rw_ftl)?;
    let wear_leveling = super::nameless_wear::run(&wear, ftl)?;
    let memory = memory(args, ftl)?;
    let store = store_rates(args, ftl)?;
    let device_bytes = {
        let v = volume(ftl)?;
        let g = v.backend().geometry();
        u64::from(g.zone_count) * g.zone_capacity_blocks * u64::from(g.block_size_bytes)
    };
    Ok(NamelessReport {
        device_bytes,
        memory,
        store,
        random_writes,
        wear_leveling,
    })
}

/// Requests between the nameless side's commits: 64 MiB, a quarter of the
/// FTL's default bound on blocks written since the last commit (a write
/// past it answers `Busy`).
const REQUESTS_PER_COMMIT: u64 = 64;

/// Writes `blocks` blocks, 1 MiB per request, logical (from LBA 0) or
/// nameless (committed every `REQUESTS_PER_COMMIT`, as a client records
/// its addresses), then flushes (nameless: commits).
fn store_blocks(
    ftl: &mut Driver<SimDevice>,
    blocks: u64,
    nameless: bool,
) -> Result<(), BenchError> {
    let bs = ftl.block_size();
    let per = MIB / bs as u64;
    let md_bytes = ftl.nameless_md_bytes();
    let bar = progress(blocks, if nameless { "nameless" } else { "logical" });
    let mut at = 0;
    while at < blocks {
        let n = per.min(blocks - at);
        let mut data = vec![0u8; n as usize * bs];
        for (i, b) in data.chunks_mut(bs).enumerate() {
            b[..8].copy_from_slice(&(at + i as u64).to_le_bytes());
        }
        if nameless {
            ftl.nameless_write(&data, &vec![0; n as usize * md_bytes])?;
            if (at / per + 1).is_multiple_of(REQUESTS_PER_COMMIT) {
                ftl.nameless_commit()?;
            }
        } else {
            ftl.write(at, &data)?;
        }
        at += n;
        bar.set_position(at);
    }
    bar.finish_and_clear();
    if nameless {
        ftl.nameless_commit()?;
    } else {
        ftl.flush()?;
    }
    Ok(())
}

fn memory(args: &NamelessArgs, ftl: &FtlConfig) -> Result<MapMemory, BenchError> {
    let mut logical = volume(ftl)?;
    let blocks = args.stored_mib * MIB / logical.block_size() as u64;
    let (page_level_fresh, _) = map_bytes_less_p2l(&logical);
    store_blocks(&mut logical, blocks, false)?;
    let (page_level, p2l) = map_bytes_less_p2l(&logical);
    drop(logical);
    let mut nameless = volume(ftl)?;
    let (nameless_fresh, _) = map_bytes_less_p2l(&nameless);
    store_blocks(&mut nameless, blocks, true)?;
    if nameless.stats().nameless_live_blocks != blocks {
        return Err(BenchError::Check(format!(
            "{} nameless blocks live, {blocks} written",
            nameless.stats().nameless_live_blocks
        )));
    }
    let (nameless_map, _) = map_bytes_less_p2l(&nameless);
    let generations = 4 * u64::from(nameless.backend().geometry().zone_count);
    let stored = blocks * nameless.block_size() as u64;
    let per_gib = |bytes: u64| round(bytes as f64 * GIB as f64 / stored as f64, 1);
    let page_level_added = page_level - page_level_fresh;
    let nameless_added = nameless_map - nameless_fresh + generations;
    Ok(MapMemory {
        stored_bytes: stored,
        p2l_bytes: p2l,
        page_level_fresh_map_bytes: page_level_fresh,
        page_level_map_bytes: page_level,
        nameless_fresh_map_bytes: nameless_fresh,
        nameless_map_bytes: nameless_map,
        nameless_generation_bytes: generations,
        page_level_bytes_per_gib: per_gib(page_level_added),
        nameless_bytes_per_gib: per_gib(nameless_added),
        nameless_over_page_level: round(ratio(nameless_added as f64, page_level_added as f64), 5),
        nameless_over_page_level_totals: round(
            ratio((nameless_map + generations) as f64, page_level as f64),
            5,
        ),
    })
}

/// One side's run: puts and gets per wall and per CPU second, media
/// blocks per put, map bytes.
struct Side {
    buckets: u32,
    puts_per_s: f64,
    gets_per_s: f64,
    puts_per_cpu_s: f64,
    gets_per_cpu_s: f64,
    media_blocks_per_put: f64,
    map_bytes: u64,
}

/// The value of key `k`, version `v`: `value_bytes` bytes naming both.
fn value(k: u32, v: u32, value_bytes: usize) -> Vec<u8> {
    let mut x = [0u8; 8];
    x[..4].copy_from_slice(&k.to_le_bytes());
    x[4..].copy_from_slice(&v.to_le_bytes());
    x.iter().copied().cycle().take(value_bytes).collect()
}

fn key(k: u32) -> [u8; 16] {
    let mut key = *b"key-............";
    key[4..8].copy_from_slice(&k.to_le_bytes());
    key
}

/// Buckets for `keys` at about 70 % load.
fn buckets_for(keys: u32, block_size: usize) -> u32 {
    let per = entries_per_bucket(block_size) as u64;
    (u64::from(keys) * 10).div_ceil(per * 7).max(1) as u32
}

fn run_side(
    args: &NamelessArgs,
    ftl: &FtlConfig,
    values: ValuePlacement,
    order: &[u32],
) -> Result<Side, BenchError> {
    let volume = volume(ftl)?;
    let bs = volume.block_size();
    if args.value_bytes > bs {
        return Err(BenchError::Args(format!(
            "--value-bytes is at most {bs} (a block)"
        )));
    }
    let buckets = buckets_for(args.keys, bs);
    let opts = StoreOptions {
        buckets,
        values,
        max_replaced: args.sync_every,
    };
    let mut store = Store::create(volume, 0, opts).map_err(kv)?;
    let media0 = store.volume_mut().stats().media_write_blocks;
    let started = Instant::now();
    let cpu = thread_cpu_s();
    let mut puts = 0usize;
    // The fill in key order, then overwrites in `order`.
    let writes = (0..args.keys)
        .map(|k| (k, 1))
        .chain(order.iter().map(|&k| (k, 2)));
    for (k, v) in writes {
        store
            .put(&key(k), &value(k, v, args.value_bytes))
            .map_err(kv)?;
        puts += 1;
        if puts.is_multiple_of(args.sync_every) {
            store.sync().map_err(kv)?;
        }
    }
    store.sync().map_err(kv)?;
    let put_s = started.elapsed().as_secs_f64();
    let put_cpu_s = thread_cpu_s() - cpu;
    let media = store.volume_mut().stats().media_write_blocks - media0;
    let started = Instant::now();
    let cpu = thread_cpu_s();
    for &k in order.iter().rev() {
        let got = store.get(&key(k)).map_err(kv)?;
        if got.as_deref() != Some(&value(k, 2, args.value_bytes)[..]) {
            return Err(BenchError::Check(format!("key {k} reads back wrong")));
        }
    }
    let get_s = started.elapsed().as_secs_f64();
    let get_cpu_s = thread_cpu_s() - cpu;
    let (map_bytes, _) = map_bytes_less_p2l(store.volume_mut());
    Ok(Side {
        buckets,
        puts_per_s: ratio(puts as f64, put_s),
        gets_per_s: ratio(order.len() as f64, get_s),
        puts_per_cpu_s: ratio(puts as f64, put_cpu_s),
        gets_per_cpu_s: ratio(order.len() as f64, get_cpu_s),
        media_blocks_per_put: round(media as f64 / puts as f64, 3),
        map_bytes,
    })
}

fn kv(e: zftl_kv::KvError) -> BenchError {
    match e {
        zftl_kv::KvError::Io(e) => BenchError::Io(e),
        e => BenchError::Check(format!("store: {e}")),
    }
}

fn store_rates(args: &NamelessArgs, ftl: &FtlConfig) -> Result<StoreRates, BenchError> {
    let mut rng = Rng::new(args.seed);
    let mut order: Vec<u32> = (0..args.keys).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
    let logical = ValuePlacement::Logical {
        blocks: u64::from(args.keys) + args.sync_every as u64,
    };
    let (mut n, mut l) = (Vec::new(), Vec::new());
    for r in 0..args.rounds {
        let (ns, ls) = if r % 2 == 0 {
            let ns = run_side(args, ftl, ValuePlacement::Nameless, &order)?;
            (ns, run_side(args, ftl, logical, &order)?)
        } else {
            let ls = run_side(args, ftl, logical, &order)?;
            (run_side(args, ftl, ValuePlacement::Nameless, &order)?, ls)
        };
        n.push(ns);
        l.push(ls);
    }
    let rounds = |sides: &[Side], f: fn(&Side) -> f64| Rounds::of(sides.iter().map(f).collect());
    let ratios = |f: fn(&Side) -> f64| {
        Rounds::of(n.iter().zip(&l).map(|(a, b)| ratio(f(a), f(b))).collect())
    };
    let (last_n, last_l) = (n.last().expect("a round"), l.last().expect("a round"));
    Ok(StoreRates {
        keys: args.keys,
        value_bytes: args.value_bytes,
        buckets: last_n.buckets,
        sync_every: args.sync_every,
        puts_per_round: 2 * u64::from(args.keys),
        nameless_puts_per_cpu_s: rounds(&n, |s| s.puts_per_cpu_s),
        logical_puts_per_cpu_s: rounds(&l, |s| s.puts_per_cpu_s),
        puts_ratio_cpu: ratios(|s| s.puts_per_cpu_s),
        nameless_gets_per_cpu_s: rounds(&n, |s| s.gets_per_cpu_s),
        logical_gets_per_cpu_s: rounds(&l, |s| s.gets_per_cpu_s),
        gets_ratio_cpu: ratios(|s| s.gets_per_cpu_s),
        nameless_puts_per_s: rounds(&n, |s| s.puts_per_s),
        logical_puts_per_s: rounds(&l, |s| s.puts_per_s),
        puts_ratio: ratios(|s| s.puts_per_s),
        nameless_gets_per_s: rounds(&n, |s| s.gets_per_s),
        logical_gets_per_s: rounds(&l, |s| s.gets_per_s),
        gets_ratio: ratios(|s| s.gets_per_s),
        nameless_media_blocks_per_put: last_n.media_blocks_per_put,
        logical_media_blocks_per_put: last_l.media_blocks_per_put,
        nameless_map_bytes: last_n.map_bytes,
        logical_map_bytes: last_l.map_bytes,
    })
}

impl NamelessReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "nameless writes on a {} simulated device in memory (timing off)",
            crate::report::human_bytes(self.device_bytes)
        ));
        let m = &self.memory;
        t.section("map memory, same data logical and nameless (P2L left out of both)");
        t.bytes("stored_bytes", m.stored_bytes);
        t.bytes("p2l_bytes", m.p2l_bytes);
        t.bytes("page_level_fresh_map_bytes", m.page_level_fresh_map_bytes);
        t.bytes("page_level_map_bytes", m.page_level_map_bytes);
        t.bytes("nameless_fresh_map_bytes", m.nameless_fresh_map_bytes);
        t.bytes("nameless_map_bytes", m.nameless_map_bytes);
        t.bytes("nameless_generation_bytes", m.nameless_generation_bytes);
        t.row("page_level_bytes_per_gib", m.page_level_bytes_per_gib);
        t.row("nameless_bytes_per_gib", m.nameless_bytes_per_gib);
        t.row("nameless_over_page_level", m.nameless_over_page_level);
        t.row(
            "nameless_over_page_level_totals",
            m.nameless_over_page_level_totals,
        );
        let s = &self.store;
        t.section(&format!(
            "zftl-kv: values nameless vs logical ({} keys, {} B values, {} buckets, sync every {} puts, depth 1)",
            s.keys, s.value_bytes, s.buckets, s.sync_every
        ));
        t.row("puts_per_round", s.puts_per_round);
        t.row("nameless_puts_per_cpu_s", show(&s.nameless_puts_per_cpu_s));
        t.row("logical_puts_per_cpu_s", show(&s.logical_puts_per_cpu_s));
        t.row("puts_ratio_cpu", show(&s.puts_ratio_cpu));
        t.row("nameless_gets_per_cpu_s", show(&s.nameless_gets_per_cpu_s));
        t.row("logical_gets_per_cpu_s", show(&s.logical_gets_per_cpu_s));
        t.row("gets_ratio_cpu", show(&s.gets_ratio_cpu));
        t.row("nameless_puts_per_s", show(&s.nameless_puts_per_s));
        t.row("logical_puts_per_s", show(&s.logical_puts_per_s));
        t.row("puts_ratio", show(&s.puts_ratio));
        t.row("nameless_gets_per_s", show(&s.nameless_gets_per_s));
        t.row("logical_gets_per_s", show(&s.logical_gets_per_s));
        t.row("gets_ratio", show(&s.gets_ratio));
        t.row(
            "media_blocks_per_put",
            format!(
                "nameless {} logical {}",
                s.nameless_media_blocks_per_put, s.logical_media_blocks_per_put
            ),
        );
        t.row(
            "map_bytes_after_puts",
            format!(
                "nameless {} logical {}",
                s.nameless_map_bytes, s.logical_map_bytes
            ),
        );
        let w = &self.random_writes;
        t.section(&format!(
            "4 KiB random writes, nameless vs page-mapped ({} simulated, timing on, virtual time; \
             depth {}, {} passes, the first not measured; commit / flush every {} writes; \
             remap table {} entries)",
            crate::report::human_bytes(w.device_bytes),
            w.depth,
            w.passes,
            w.commit_every_writes,
            w.remap_entries
        ));
        for r in &w.rows {
            t.row(
                &format!("working_set_{}%", r.working_set_percent),
                format!(
                    "writes/s page {} nameless {} ratio {}; GC copies/write page {} nameless {}; \
                     WA page {} nameless {}; moves followed {}; in-place jobs {} \
                     (gap fills {}, pads {})",
                    r.page_mapped.writes_per_s,
                    r.nameless.writes_per_s,
                    r.throughput_ratio,
                    r.page_mapped.gc_copies_per_write,
                    r.nameless.gc_copies_per_write,
                    r.page_mapped.write_amplification,
                    r.nameless.write_amplification,
                    r.nameless_moves_followed,
                    r.nameless_inplace_jobs,
                    r.nameless_gap_fill_blocks,
                    r.nameless_pad_blocks
                ),
            );
        }
        t.row("min_throughput_ratio", w.min_throughput_ratio);
        self.wear_leveling.text(&mut t);
        t.render()
    }
}
