//! The crash rig shared by the model-based property test and the seeded
//! crash torture: an FTL on the simulator, an in-memory model of what each
//! block may contain, power cuts and remounts.
//!
//! The model keeps, per block, the version known durable (`committed`) and
//! the versions written since (`pending`). After a crash a block must read
//! back as one of those and nothing else; after a successful mount the value
//! read is durable (mount writes a checkpoint), so it becomes `committed`.

#![allow(dead_code)]

pub mod frozen;
pub mod watch;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zftl::core::range::attr_bits;
use zftl::core::{
    Activity, Attribute, Driver, FormatOptions, FtlConfig, IoError, MergePolicy, MountError,
    ProtectWindow, RangeOp, Request, SummedBlocks, TagPlacement,
};
use zftl::sim::rng::Rng;
use zftl::sim::{Faults, PowerCut, SimConfig, SimDevice, Timing};

fn trace_lba() -> Option<u64> {
    std::env::var("ZFTL_TRACE_LBA")
        .ok()
        .and_then(|s| s.parse().ok())
}

/// `zftl check` on `dev` finds no problem (`when` names the moment), and
/// walks the metadata log as far as mount's roll-forward.
pub fn assert_check_clean<B: zftl::core::Backend>(dev: &mut B, when: &str) {
    let report = zftl::core::check::check(dev);
    assert!(
        report.is_clean(),
        "check {when}: {:?} (the log ends at {:?})",
        report.problems,
        report.summary.log_end
    );
    let crc = zftl::core::tag::DataCrcImpl::selected();
    let r = zftl::core::recovery::recover_state(dev, crc).expect("a clean volume mounts");
    let (blocks, end) = r.log_walked();
    let (zone, offset) = end.expect("the log ends inside its ring");
    let check_end = report.summary.log_end.as_deref().unwrap_or_default();
    assert!(
        report.summary.log_blocks_after_checkpoint == blocks
            && check_end.starts_with(&format!("zone {zone} offset {offset}:")),
        "check {when}: walked {} log blocks to {check_end:?}; mount {blocks} to zone {zone} offset {offset}",
        report.summary.log_blocks_after_checkpoint,
    );
}

/// Writes the header both block generators share: the lba in bytes 0..8,
/// the version in bytes 8..12.
fn stamp(mut b: Vec<u8>, lba: u64, version: u32) -> Vec<u8> {
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b
}

/// A block that names its lba and version ([`stamp`]), filled with a byte
/// of both: a test reads the version back to tell which write a block
/// holds after a crash. Unlike [`pattern`], version 0 is a stamped block
/// too, and the fill costs nothing to build.
pub fn block(lba: u64, version: u32, bs: usize) -> Vec<u8> {
    stamp(
        vec![(lba as u8) ^ (version as u8).wrapping_mul(31); bs],
        lba,
        version,
    )
}

/// Version 0 is "zeros" (never written or trimmed).
pub fn pattern(lba: u64, version: u32, bs: usize) -> Vec<u8> {
    if version == 0 {
        return vec![0; bs];
    }
    let mut b = vec![0u8; bs];
    let mut x = (lba << 32) ^ u64::from(version) ^ 0x9E37_79B9_7F4A_7C15;
    for chunk in b.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    stamp(b, lba, version)
}

/// The `(origin block, version)` a block holds — a clone or move makes a
/// block hold another's data — or why it holds no version; version 0 is
/// zeros (origin 0).
pub fn decode_any(data: &[u8]) -> Result<(u64, u32), String> {
    if data.iter().all(|&b| b == 0) {
        return Ok((0, 0));
    }
    let origin = u64::from_le_bytes(data[..8].try_into().unwrap());
    let version = u32::from_le_bytes(data[8..12].try_into().unwrap());
    if version == 0 || data != pattern(origin, version, data.len()).as_slice() {
        return Err(format!(
            "block of origin {origin} version {version}: contents damaged"
        ));
    }
    Ok((origin, version))
}

/// The version a block holds, or a description of why it is no version.
pub fn decode(lba: u64, data: &[u8]) -> Result<u32, String> {
    if data.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    let found_lba = u64::from_le_bytes(data[..8].try_into().unwrap());
    let version = u32::from_le_bytes(data[8..12].try_into().unwrap());
    if found_lba != lba {
        return Err(format!("block {lba} holds data of block {found_lba}"));
    }
    if data != pattern(lba, version, data.len()).as_slice() {
        return Err(format!("block {lba} version {version}: contents damaged"));
    }
    Ok(version)
}

/// What a version-0 block holds; versions are unique across blocks (the
/// rig counts them globally), so a version names its data wherever it is.
#[derive(Clone, Debug, Default)]
pub struct Model {
    committed: Vec<u32>,
    pending: Vec<Vec<u32>>,
    /// Range attributes per block (`attr_bits`).
    attrs: Vec<u8>,
}

/// A range-operation vector a power cut interrupted: applied whole or not
/// at all, which the mount after it shows.
#[derive(Clone, Debug)]
pub struct Uncertain {
    /// Per block of its ranges: the versions it may hold if the vector
    /// did not happen, and the version it holds if it did.
    blocks: BTreeMap<u64, (Vec<u32>, u32)>,
    attrs_before: Vec<u8>,
    attrs_after: Vec<u8>,
}

/// Why a vector fails, as the model predicts it.
#[derive(Clone, Debug, PartialEq)]
pub enum Refusal {
    Immutable(u64),
    Conflict(u64),
}

impl Model {
    pub fn new(blocks: u64) -> Model {
        Model {
            committed: vec![0; blocks as usize],
            pending: vec![Vec::new(); blocks as usize],
            attrs: vec![0; blocks as usize],
        }
    }

    /// A model whose blocks hold `versions`, durable.
    pub fn holding(versions: &[u32]) -> Model {
        Model {
            committed: versions.to_vec(),
            pending: vec![Vec::new(); versions.len()],
            attrs: vec![0; versions.len()],
        }
    }

    pub fn immutable(&self, lba: u64, n: u64) -> Option<u64> {
        (lba..lba + n).find(|&l| self.attrs[l as usize] & attr_bits::IMMUTABLE != 0)
    }

    /// The versions a block may hold after a crash.
    fn may_hold(&self, lba: u64) -> Vec<u32> {
        let i = lba as usize;
        let mut v = vec![self.committed[i]];
        v.extend(&self.pending[i]);
        v
    }

    /// The vector's effect: `Err` when the FTL must refuse it, else each
    /// block of its ranges with the version it holds after, and the
    /// attributes after. Judged as the FTL does: immutable ranges in
    /// operation order, then merge conflicts on the state before it.
    pub fn vector(&self, ops: &[RangeOp]) -> Result<(BTreeMap<u64, u32>, Vec<u8>), Refusal> {
        let mut attrs = self.attrs.clone();
        for op in ops {
            let guarded = match op {
                RangeOp::SetAttribute { .. } => Vec::new(),
                other => other.writes().collect(),
            };
            for (lba, n) in guarded {
                if let Some(at) =
                    (lba..lba + n).find(|&l| attrs[l as usize] & attr_bits::IMMUTABLE != 0)
                {
                    return Err(Refusal::Immutable(at));
                }
            }
            if let RangeOp::SetAttribute {
                lba,
                block_count,
                attribute,
            } = op
            {
                let (set, clear) = attribute.masks();
                for a in &mut attrs[*lba as usize..(*lba + *block_count) as usize] {
                    *a = (*a | set) & !clear;
                }
            }
        }
        let mut val: BTreeMap<u64, u32> = BTreeMap::new();
        for (lba, n) in ops.iter().flat_map(|o| o.ranges()) {
            for l in lba..lba + n {
                val.insert(l, self.latest(l));
            }
        }
        for op in ops {
            if let RangeOp::Merge {
                sources,
                dst,
                block_count,
                policy: MergePolicy::FailOnConflict,
            } = op
            {
                for k in 0..*block_count {
                    if merge_pick(&val, sources, *dst, k, MergePolicy::FailOnConflict).is_err() {
                        return Err(Refusal::Conflict(dst + k));
                    }
                }
            }
        }
        for op in ops {
            match op {
                RangeOp::Clone {
                    src,
                    dst,
                    block_count,
                } => {
                    for i in 0..*block_count {
                        let v = val[&(src + i)];
                        val.insert(dst + i, v);
                    }
                }
                RangeOp::Move {
                    src,
                    dst,
                    block_count,
                } => {
                    for i in 0..*block_count {
                        let v = val[&(src + i)];
                        val.insert(dst + i, v);
                        val.insert(src + i, 0);
                    }
                }
                RangeOp::Delete { lba, block_count } => {
                    for l in *lba..lba + block_count {
                        val.insert(l, 0);
                    }
                }
                RangeOp::Merge {
                    sources,
                    dst,
                    block_count,
                    policy,
                } => {
                    for k in 0..*block_count {
                        if let Ok(Some(v)) = merge_pick(&val, sources, *dst, k, *policy) {
                            val.insert(dst + k, v);
                        }
                    }
                }
                RangeOp::SetAttribute { .. } => {}
            }
        }
        Ok((val, attrs))
    }

    /// A vector acknowledged: durable, its blocks hold what it left.
    pub fn apply_vector(&mut self, after: &BTreeMap<u64, u32>, attrs: Vec<u8>) {
        for (&l, &v) in after {
            self.durable(l, v);
        }
        self.attrs = attrs;
    }

    /// A vector cut short: what the mount must show of it.
    pub fn uncertain(&self, after: &BTreeMap<u64, u32>, attrs: &[u8]) -> Uncertain {
        Uncertain {
            blocks: after
                .iter()
                .map(|(&l, &v)| (l, (self.may_hold(l), v)))
                .collect(),
            attrs_before: self.attrs.clone(),
            attrs_after: attrs.to_vec(),
        }
    }

    /// The attributes after a mount (the FTL's table, as read back).
    pub fn set_attrs(&mut self, attrs: Vec<u8>) {
        self.attrs = attrs;
    }

    pub fn attrs(&self) -> &[u8] {
        &self.attrs
    }

    /// A crash empties the non-persistent blocks.
    pub fn crash(&mut self) {
        for i in 0..self.attrs.len() {
            if self.attrs[i] & attr_bits::NON_PERSISTENT != 0 {
                self.committed[i] = 0;
                self.pending[i].clear();
            }
        }
    }
    pub fn latest(&self, lba: u64) -> u32 {
        let i = lba as usize;
        *self.pending[i].last().unwrap_or(&self.committed[i])
    }
    pub fn write(&mut self, lba: u64, version: u32) {
        self.pending[lba as usize].push(version);
    }
    /// Forgets the newest pending write of `lba` (it was refused).
    pub fn unwrite(&mut self, lba: u64) {
        self.pending[lba as usize].pop();
    }

    pub fn flush(&mut self) {
        for i in 0..self.committed.len() {
            if let Some(&v) = self.pending[i].last() {
                self.committed[i] = v;
            }
            self.pending[i].clear();
        }
    }
    pub fn durable(&mut self, lba: u64, version: u32) {
        self.committed[lba as usize] = version;
        self.pending[lba as usize].clear();
    }
    /// Whether a write or trim of `lba` is not known durable yet.
    pub fn has_pending(&self, lba: u64) -> bool {
        !self.pending[lba as usize].is_empty()
    }
    /// Whether `v` is one of `lba`'s writes not known durable yet.
    pub fn allowed_pending(&self, lba: u64, v: u32) -> bool {
        self.pending[lba as usize].contains(&v)
    }
    pub fn allowed(&self, lba: u64, v: u32) -> bool {
        let i = lba as usize;
        self.committed[i] == v || self.pending[i].contains(&v)
    }
    pub fn describe(&self, lba: u64) -> String {
        let i = lba as usize;
        format!(
            "committed {} pending {:?}",
            self.committed[i], self.pending[i]
        )
    }
}

/// A merge's choice at offset `k` over versions `val` (as the FTL's
/// `range::merge_choice` over physical blocks): `Ok(Some(v))` takes `v`.
fn merge_pick(
    val: &BTreeMap<u64, u32>,
    sources: &[u64],
    dst: u64,
    k: u64,
    policy: MergePolicy,
) -> Result<Option<u32>, ()> {
    let base = val[&(dst + k)];
    let mut chosen: Option<u32> = None;
    for s in sources {
        let v = val[&(s + k)];
        if v == base {
            continue;
        }
        match chosen {
            None => chosen = Some(v),
            Some(seen) if seen == v => {}
            Some(_) => match policy {
                MergePolicy::FailOnConflict => return Err(()),
                MergePolicy::FirstWins => {}
                MergePolicy::LastWins => chosen = Some(v),
            },
        }
    }
    Ok(chosen)
}

#[derive(Clone, Copy, Debug)]
pub enum Op {
    Write {
        lba: u64,
        blocks: u32,
    },
    Fua {
        lba: u64,
    },
    Trim {
        lba: u64,
        blocks: u32,
    },
    Zeroes {
        lba: u64,
        blocks: u32,
    },
    Read {
        lba: u64,
        blocks: u32,
    },
    Flush,
    /// Arm a power cut after this many more device commands.
    Cut {
        after_commands: u64,
    },
    /// A vector of 1 to 3 range operations built from `seed`.
    Vector {
        seed: u64,
    },
    /// A snapshot create, delete or read, chosen from `seed`.
    Snapshot {
        seed: u64,
    },
}

/// Whether a snapshot the model knows exists on the volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapState {
    Exists,
    /// Its create was cut short: the mount shows whether it happened.
    MaybeCreated,
    /// Its delete was cut short.
    MaybeDeleted,
}

/// A snapshot's contents as the model knows them.
#[derive(Clone, Debug)]
pub struct SnapModel {
    pub name: String,
    pub state: SnapState,
    /// The version of each block it holds.
    pub versions: Vec<u32>,
    /// Blocks that may read as zeros instead: a crash dropped the volume's
    /// non-persistent ranges, and with them the snapshot's copy where the
    /// snapshot shared the live block.
    pub may_be_zero: Vec<bool>,
}

/// A fork the model follows: its blocks as a model of their own that
/// starts as its base snapshot held them.
#[derive(Clone, Debug)]
pub struct ForkModel {
    pub name: String,
    pub base: String,
    pub state: SnapState,
    pub model: Model,
    /// Blocks a write or trim of the fork was answered for (the others
    /// read as its base).
    pub changed: Vec<bool>,
    /// Blocks a write or trim of the fork is known durable for: a cut keeps
    /// them changed. An answered change not yet flushed may be lost, and
    /// the block then reads as its base again (zeros if the base was
    /// non-persistent).
    pub durably_changed: Vec<bool>,
    /// Blocks its base may read as zeros (see [`SnapModel::may_be_zero`]).
    pub may_be_zero: Vec<bool>,
}

/// A window point the model saw appear during an operation: it holds the
/// model's state from just before or just after that operation.
#[derive(Clone, Debug)]
pub struct PointModel {
    pub before: Vec<u32>,
    pub after: Vec<u32>,
    pub may_be_zero: Vec<bool>,
}

/// A device of 128 zones of 64 blocks (32 MiB of 4 KiB blocks), with 64
/// OOB bytes per block (`oob`) or none: the scenario tests' volume.
pub fn volume_config(oob: bool) -> SimConfig {
    SimConfig {
        channels: 2,
        luns_per_channel: 2,
        blocks_per_lun: 32,
        pages_per_block: 64,
        oob_size_bytes: if oob { 64 } else { 0 },
        zone_width_luns: 1,
        max_append_blocks: 16,
        max_transfer_blocks: 32,
        ..SimConfig::small_for_tests()
    }
}

/// Formats a simulator of `cfg` with tags in OOB (`oob`) or in band.
pub fn format_on(oob: bool, cfg: SimConfig) -> Driver<SimDevice> {
    format_with(oob, cfg, FtlConfig::default())
}

/// `format_on` with the FTL configuration `ftl`.
pub fn format_with(oob: bool, cfg: SimConfig, ftl: FtlConfig) -> Driver<SimDevice> {
    let tag_placement = if oob {
        TagPlacement::Auto
    } else {
        TagPlacement::InBand
    };
    let opts = FormatOptions {
        tag_placement,
        ..FormatOptions::default()
    };
    let dev = SimDevice::create_memory(cfg).unwrap();
    Driver::format(dev, &opts, ftl).unwrap()
}

/// A clean remount, then a crash (no checkpoint) and a mount; `check`
/// runs after each.
pub fn remount_both_ways(
    ftl: Driver<SimDevice>,
    check: impl Fn(&mut Driver<SimDevice>),
) -> Driver<SimDevice> {
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    check(&mut ftl);
    ftl.flush().unwrap();
    let mut dev = ftl.into_backend();
    assert_check_clean(&mut dev, "after a crash");
    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    check(&mut ftl);
    ftl
}

/// [`remount_both_ways`], then a clean shutdown and a check of the
/// device that finds nothing (`when` names the point in its message).
pub fn remount_both_ways_then_clean(
    ftl: Driver<SimDevice>,
    check: impl Fn(&mut Driver<SimDevice>),
    when: &str,
) {
    let ftl = remount_both_ways(ftl, check);
    let mut dev = ftl.shutdown().unwrap();
    assert_check_clean(&mut dev, when);
}

/// Rig geometry: small zones so GC, checkpoints and log wrap happen often.
pub fn sim_config(seed: u64, oob: bool, timing: bool) -> SimConfig {
    SimConfig {
        channels: 2,
        luns_per_channel: 2,
        blocks_per_lun: 12,
        pages_per_block: 32,
        oob_size_bytes: if oob { 64 } else { 0 },
        zone_width_luns: 1,
        max_open_zones: 8,
        max_active_zones: 12,
        max_append_blocks: 8,
        max_transfer_blocks: 16,
        queue_depth: 32,
        timing: timing.then(Timing::default),
        faults: Faults {
            seed,
            shuffle_completions: true,
            ..Faults::default()
        },
        ..SimConfig::small_for_tests()
    }
}

pub fn ftl_config() -> FtlConfig {
    FtlConfig {
        write_buffer_blocks: 64,
        checkpoint_interval_blocks: 256,
        gc_max_inflight: 8,
        ..FtlConfig::default()
    }
}

/// Where the cuts landed, to show the run covered what it claims.
#[derive(Clone, Copy, Debug, Default)]
pub struct Coverage {
    pub cuts: u64,
    pub during_gc: u64,
    pub during_checkpoint: u64,
    pub during_recovery: u64,
    pub gc_copies: u64,
    pub wl_moves: u64,
    /// Commands the FTL issued again after a host-side failure.
    pub host_retries: u64,
    /// Snapshots created, and snapshot blocks read and checked.
    pub snapshots: u64,
    pub snapshot_blocks_checked: u64,
    /// Forks created, and fork blocks written and read back checked.
    pub forks: u64,
    pub fork_blocks_written: u64,
    pub fork_blocks_checked: u64,
    /// Whole-volume diffs checked against the model.
    pub snapshot_diffs: u64,
    /// Reverts answered.
    pub reverts: u64,
    /// Window points the core had taken, summed at each cut; points the
    /// model saw appear, and their blocks checked.
    pub window_points: u64,
    pub window_points_seen: u64,
    pub window_point_blocks_checked: u64,
    /// Blocks snapshots kept after the volume replaced them (summed at
    /// each cut).
    pub snapshot_versions: u64,
    /// Nameless blocks handed over after mounts, and of those the blocks
    /// of writes a cut left unanswered.
    pub nameless_handed_over: u64,
    pub nameless_orphans: u64,
    /// `Migrated` events the host followed.
    pub nameless_moves: u64,
    /// In-place collections started (by the test and by GC), of those GC's,
    /// and gap fills written, of those overwrites' blocks.
    pub inplace_jobs: u64,
    pub inplace_gc_victims: u64,
    pub gap_fills: u64,
    pub overwrite_fills: u64,
}

impl Coverage {
    fn add(&mut self, other: &Coverage) {
        self.cuts += other.cuts;
        self.during_gc += other.during_gc;
        self.during_checkpoint += other.during_checkpoint;
        self.during_recovery += other.during_recovery;
        self.gc_copies += other.gc_copies;
        self.wl_moves += other.wl_moves;
        self.host_retries += other.host_retries;
        self.snapshots += other.snapshots;
        self.forks += other.forks;
        self.fork_blocks_written += other.fork_blocks_written;
        self.fork_blocks_checked += other.fork_blocks_checked;
        self.snapshot_blocks_checked += other.snapshot_blocks_checked;
        self.snapshot_diffs += other.snapshot_diffs;
        self.reverts += other.reverts;
        self.window_points += other.window_points;
        self.window_points_seen += other.window_points_seen;
        self.window_point_blocks_checked += other.window_point_blocks_checked;
        self.snapshot_versions += other.snapshot_versions;
        self.nameless_handed_over += other.nameless_handed_over;
        self.nameless_orphans += other.nameless_orphans;
        self.nameless_moves += other.nameless_moves;
        self.inplace_jobs += other.inplace_jobs;
        self.inplace_gc_victims += other.inplace_gc_victims;
        self.gap_fills += other.gap_fills;
        self.overwrite_fills += other.overwrite_fills;
    }
}

/// Runs `run_seed` on seeds 0.. (`ZFTL_SEEDS=<n>` of them, else
/// `default_seeds`; `ZFTL_SEEDS=<from>..<to>` for a range, to go on past an
/// earlier long run), or on `ZFTL_SEED=<s>` alone; a failing seed is
/// printed with the command that replays it. Returns how many seeds ran
/// and their summed coverage.
pub fn run_seeds(
    test: &str,
    default_seeds: u64,
    run_seed: impl Fn(u64) -> Coverage,
) -> (usize, Coverage) {
    let seeds = seeds_to_run(0..default_seeds);
    let total = run_listed_seeds(test, &seeds, run_seed);
    eprintln!("{test}: {} seeds, {total:?}", seeds.len());
    (seeds.len(), total)
}

/// The seeds a test runs: `ZFTL_SEED=<s>` alone, else `ZFTL_SEEDS=<n>`
/// (0..n) or `<from>..<to>`, else `default`.
pub fn seeds_to_run(default: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var("ZFTL_SEED") {
        Ok(s) => vec![s.parse().expect("ZFTL_SEED must be a number")],
        Err(_) => match std::env::var("ZFTL_SEEDS") {
            Ok(v) => seed_range(&v),
            Err(_) => default.collect(),
        },
    }
}

/// Runs `run_seed` on `seeds` (also: regressions found by longer runs),
/// printing the replay command of one that fails: `test` is the test
/// function that runs `run_seed` on `ZFTL_SEED`. Returns the summed
/// coverage.
pub fn run_listed_seeds(
    test: &str,
    seeds: &[u64],
    mut run_seed: impl FnMut(u64) -> Coverage,
) -> Coverage {
    let mut total = Coverage::default();
    for &seed in seeds {
        let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_seed(seed)));
        let cov = run.unwrap_or_else(|e| {
            // This module is compiled into each test binary: the crate is the binary.
            let binary = env!("CARGO_CRATE_NAME");
            eprintln!(
                "\n{test} FAILED at seed {seed}; replay: \
                 ZFTL_SEED={seed} cargo test --release --test {binary} {test} -- --exact"
            );
            std::panic::resume_unwind(e)
        });
        total.add(&cov);
    }
    total
}

/// `n` (seeds 0..n) or `from..to`.
fn seed_range(v: &str) -> Vec<u64> {
    let num = |s: &str| -> u64 {
        s.trim()
            .parse()
            .unwrap_or_else(|_| panic!("ZFTL_SEEDS must be <n> or <from>..<to>, not {v:?}"))
    };
    match v.split_once("..") {
        Some((from, to)) => (num(from)..num(to)).collect(),
        None => (0..num(v)).collect(),
    }
}

pub struct Rig {
    pub ftl: Option<Driver<SimDevice>>,
    /// The FTL's settings at format and every mount.
    cfg: FtlConfig,
    pub model: Model,
    pub blocks: u64,
    pub bs: usize,
    next_version: u32,
    rng: Rng,
    pub coverage: Coverage,
    armed: bool,
    last_activity: Activity,
    /// Media faults are injected: reads may fail with a typed error (never
    /// return wrong data), writes may hit NoSpace on a worn device, and a
    /// metadata write failure makes the volume read-only until remount.
    pub media_faults: bool,
    pub remounts_after_failure: u64,
    /// The volume mounted read-only (its metadata can no longer be
    /// written: the end of its life): the mount's check of every block
    /// was the run's last; later operations are skipped.
    pub end_of_life: bool,
    pub read_errors_seen: u64,
    /// The rate of simulated controller resets while a power cut is armed,
    /// also during the mounts a cut interrupts
    /// (`Faults::controller_reset_per_million`).
    pub controller_reset_per_million: u32,
    /// Random operations include range-operation vectors.
    pub ranges: bool,
    /// A vector a power cut interrupted, resolved by the next mount.
    uncertain: Option<Uncertain>,
    /// Random operations include snapshot creates, deletes and reads
    /// (volumes with tags in band).
    pub snapshots: bool,
    pub snaps: Vec<SnapModel>,
    next_snap: u32,
    /// Snapshot operations include fork creates, deletes, writes, trims
    /// and reads (with `snapshots`).
    pub forks: bool,
    pub fork_models: Vec<ForkModel>,
    next_fork: u32,
    /// The wall clock of a volume with a protection window (see
    /// [`Rig::with_window`]): 100 ms pass per operation.
    clock: Option<Arc<AtomicU64>>,
    /// Window points seen appearing during an operation, by id (a name
    /// comes back when a point is dropped and another taken in the same
    /// second); and those first seen after a mount (their operation is
    /// unknown).
    points: BTreeMap<u32, PointModel>,
    unknown_points: Vec<u32>,
}

impl Rig {
    /// A rig whose volume has protection window `window` (in time or in
    /// blocks written): the core takes and drops points (snapshots the
    /// model does not follow) while the operations run, on a clock that
    /// moves 100 ms per operation, so a seed replays the same points.
    pub fn with_window(seed: u64, oob: bool, window: ProtectWindow) -> Rig {
        let cfg = FtlConfig {
            protect_window: Some(window),
            ..ftl_config()
        };
        let mut rig = Rig::with_configs(seed, sim_config(seed, oob, false), cfg);
        rig.clock = Some(Arc::new(AtomicU64::new(1_795_773_600_000_000_000)));
        rig.set_clock();
        rig
    }

    fn set_clock(&mut self) {
        if let (Some(clock), Some(ftl)) = (&self.clock, self.ftl.as_mut()) {
            let c = clock.clone();
            ftl.set_wall_clock(move || c.load(Ordering::SeqCst));
        }
    }

    pub fn new(seed: u64, oob: bool, timing: bool) -> Rig {
        Rig::with_config(seed, sim_config(seed, oob, timing))
    }

    pub fn with_config(seed: u64, cfg: SimConfig) -> Rig {
        Rig::with_configs(seed, cfg, ftl_config())
    }

    pub fn with_configs(seed: u64, cfg: SimConfig, ftl_cfg: FtlConfig) -> Rig {
        let dev = SimDevice::create_memory(cfg).expect("sim config");
        let opts = FormatOptions {
            tag_placement: TagPlacement::Auto,
            seed,
            gc_reserve_zones: 3,
            ..FormatOptions::default()
        };
        let ftl = Driver::format(dev, &opts, ftl_cfg.clone()).expect("format");
        let blocks = ftl.logical_blocks();
        let bs = ftl.block_size();
        Rig {
            ftl: Some(ftl),
            cfg: ftl_cfg,
            model: Model::new(blocks),
            blocks,
            bs,
            next_version: 1,
            rng: Rng::new(seed ^ 0xC0FFEE),
            coverage: Coverage::default(),
            armed: false,
            last_activity: Activity::default(),
            media_faults: false,
            remounts_after_failure: 0,
            end_of_life: false,
            read_errors_seen: 0,
            controller_reset_per_million: 0,
            ranges: false,
            uncertain: None,
            snapshots: false,
            snaps: Vec::new(),
            next_snap: 0,
            forks: false,
            fork_models: Vec::new(),
            next_fork: 0,
            clock: None,
            points: BTreeMap::new(),
            unknown_points: Vec::new(),
        }
    }

    fn ftl(&mut self) -> &mut Driver<SimDevice> {
        self.ftl.as_mut().expect("mounted")
    }

    fn version(&mut self) -> u32 {
        let v = self.next_version;
        self.next_version += 1;
        v
    }

    /// Runs one op; a power cut during it triggers crash + recovery + check.
    pub fn apply(&mut self, op: Op) {
        if self.end_of_life {
            return;
        }
        if let Some(clock) = &self.clock {
            clock.fetch_add(100_000_000, Ordering::SeqCst);
        }
        let before = self.clock.is_some().then(|| self.latest_versions());
        let result = self.run(op);
        if let (Some(before), Ok(())) = (before, &result) {
            self.note_points(before);
        }
        if let Some(t) = trace_lba() {
            let hit = match op {
                Op::Write { lba, blocks }
                | Op::Trim { lba, blocks }
                | Op::Zeroes { lba, blocks } => {
                    let (l, n) = self.clip(lba, blocks);
                    (l..l + u64::from(n)).contains(&t)
                }
                Op::Fua { lba } => lba % self.blocks == t,
                Op::Flush | Op::Cut { .. } | Op::Vector { .. } | Op::Snapshot { .. } => true,
                Op::Read { .. } => false,
            };
            if hit {
                let at = self.ftl.as_ref().and_then(|f| f.ftl().lookup(t));
                eprintln!(
                    "trace: {op:?} -> {result:?}; block {t}: {} at {at:?}",
                    self.model.describe(t)
                );
            }
        }
        self.last_activity = self
            .ftl
            .as_ref()
            .map(|f| f.ftl().activity())
            .unwrap_or_default();
        match result {
            Ok(()) => {}
            Err(IoError::DeviceGone) | Err(IoError::ReadOnly) if self.armed => {
                self.crash_and_recover()
            }
            Err(IoError::ReadOnly) if self.media_faults => self.remount_after_failure(),
            Err(IoError::NoSpace) if self.media_faults => {}
            Err(IoError::SnapshotSpace) if self.snapshots => {}
            Err(IoError::Device { .. } | IoError::Corrupt { .. }) if self.media_faults => {
                self.read_errors_seen += 1;
            }
            Err(e) => panic!("{op:?} failed without a power cut: {e}"),
        }
    }

    fn clip(&self, lba: u64, blocks: u32) -> (u64, u32) {
        let lba = lba % self.blocks;
        (lba, blocks.clamp(1, (self.blocks - lba).min(32) as u32))
    }

    fn run(&mut self, op: Op) -> Result<(), IoError> {
        let bs = self.bs;
        match op {
            Op::Write { lba, blocks } => {
                let (lba, n) = self.clip(lba, blocks);
                if let Some(at) = self.model.immutable(lba, u64::from(n)) {
                    let data = vec![1u8; n as usize * bs];
                    let result = self.ftl().write(lba, &data);
                    return self.expect_immutable(result, at);
                }
                let mut data = Vec::with_capacity(n as usize * bs);
                for l in lba..lba + u64::from(n) {
                    let v = self.version();
                    self.model.write(l, v);
                    data.extend(pattern(l, v, bs));
                }
                // Odd addresses come with their CRCs taken by the caller, as
                // the threaded handles send every write (same bytes on media).
                let result = if lba % 2 == 1 {
                    let crc = self.ftl().data_crc();
                    let blocks = SummedBlocks::new(data, bs, crc).expect("whole blocks");
                    let fua = false;
                    self.ftl()
                        .call(Request::WriteSummed { lba, blocks, fua })
                        .map(drop)
                } else {
                    self.ftl().write(lba, &data)
                };
                self.forget_if_refused(&result, lba, n);
                result
            }
            Op::Fua { lba } => {
                let lba = lba % self.blocks;
                if self.model.immutable(lba, 1).is_some() {
                    let result = self.ftl().write_fua(lba, &vec![1u8; bs]);
                    return self.expect_immutable(result, lba);
                }
                let v = self.version();
                self.model.write(lba, v);
                match self.ftl().write_fua(lba, &pattern(lba, v, bs)) {
                    Ok(()) => {
                        self.model.durable(lba, v);
                        Ok(())
                    }
                    // Refused at admission unless the volume failed meanwhile,
                    // in which case it may sit in the buffer: ambiguous.
                    // `SnapshotSpace` is only ever a refusal at admission
                    // (the volume may fail in the turn that answers it).
                    Err(e) => {
                        let refused = e == IoError::SnapshotSpace;
                        if refused || self.ftl().ftl().failure().is_none() {
                            self.forget_if_refused(&Err(e.clone()), lba, 1);
                        }
                        Err(e)
                    }
                }
            }
            Op::Trim { lba, blocks } | Op::Zeroes { lba, blocks } => {
                let (lba, n) = self.clip(lba, blocks);
                if let Some(at) = self.model.immutable(lba, u64::from(n)) {
                    let result = if matches!(op, Op::Trim { .. }) {
                        self.ftl().trim(lba, n)
                    } else {
                        self.ftl().write_zeroes(lba, n)
                    };
                    return self.expect_immutable(result, at);
                }
                for l in lba..lba + u64::from(n) {
                    self.model.write(l, 0);
                }
                let result = if matches!(op, Op::Trim { .. }) {
                    self.ftl().trim(lba, n)
                } else {
                    self.ftl().write_zeroes(lba, n)
                };
                self.forget_if_refused(&result, lba, n);
                result
            }
            Op::Read { lba, blocks } => {
                let (lba, n) = self.clip(lba, blocks);
                let data = match self.ftl().read(lba, n) {
                    Err(IoError::Device { .. } | IoError::Corrupt { .. }) if self.media_faults => {
                        self.read_errors_seen += 1;
                        return Ok(());
                    }
                    other => other?,
                };
                // After a volume failure the last request may or may not
                // have been admitted; otherwise a read returns the last write.
                let failed = self.ftl().ftl().failure().is_some();
                for (i, block) in data.chunks(bs).enumerate() {
                    let l = lba + i as u64;
                    let (_, got) = decode_any(block).unwrap_or_else(|e| panic!("read of {l}: {e}"));
                    if failed {
                        assert!(
                            self.model.allowed(l, got),
                            "read of block {l} on a failed volume: {got}"
                        );
                    } else {
                        assert_eq!(
                            got,
                            self.model.latest(l),
                            "read of block {l} before any crash"
                        );
                    }
                }
                Ok(())
            }
            Op::Flush => {
                self.ftl().flush()?;
                self.model.flush();
                for f in &mut self.fork_models {
                    for l in 0..f.changed.len() {
                        f.durably_changed[l] |= f.model.has_pending(l as u64);
                    }
                    f.model.flush();
                }
                Ok(())
            }
            Op::Vector { seed } => self.run_vector(seed),
            Op::Snapshot { seed } => self.run_snapshot(seed),
            Op::Cut { after_commands } => {
                let seed = self.rng.next_u64();
                let faults = Faults {
                    seed,
                    power_cut: PowerCut::AfterSubmits(after_commands.max(1)),
                    shuffle_completions: true,
                    controller_reset_per_million: self.controller_reset_per_million,
                    ..Faults::default()
                };
                self.ftl().backend_mut().set_faults(faults);
                self.armed = true;
                Ok(())
            }
        }
    }

    /// A write or trim of an immutable range: refused, nothing happened.
    fn expect_immutable(&mut self, result: Result<(), IoError>, at: u64) -> Result<(), IoError> {
        match result {
            Err(IoError::Immutable { lba }) => {
                assert_eq!(lba, at, "refused at another block");
                Ok(())
            }
            Err(e) => Err(e),
            Ok(()) => panic!("a write to immutable block {at} was accepted"),
        }
    }

    /// A random valid vector of 1 to 3 operations on small ranges.
    pub fn random_vector(&self, seed: u64) -> Vec<RangeOp> {
        let mut r = Rng::new(seed);
        let blocks = self.blocks;
        let mut ops: Vec<RangeOp> = Vec::new();
        for _ in 0..1 + r.next_u64() % 3 {
            let n = (1 + r.next_u64() % 16).min(blocks / 4);
            let at = |r: &mut Rng| r.next_u64() % (blocks - n);
            let apart = |a: u64, b: u64| a + n <= b || b + n <= a;
            let (src, dst) = (at(&mut r), at(&mut r));
            let op = match r.next_u64() % 100 {
                0..=34 if apart(src, dst) => RangeOp::Clone {
                    src,
                    dst,
                    block_count: n,
                },
                35..=59 if apart(src, dst) => RangeOp::Move {
                    src,
                    dst,
                    block_count: n,
                },
                60..=74 => RangeOp::Delete {
                    lba: src,
                    block_count: n,
                },
                75..=89 => {
                    let other = at(&mut r);
                    let mut sources = vec![src];
                    if apart(other, src) && apart(other, dst) {
                        sources.push(other);
                    }
                    let policy = match r.next_u64() % 3 {
                        0 => MergePolicy::FailOnConflict,
                        1 => MergePolicy::FirstWins,
                        _ => MergePolicy::LastWins,
                    };
                    if !apart(src, dst) {
                        continue;
                    }
                    RangeOp::Merge {
                        sources,
                        dst,
                        block_count: n,
                        policy,
                    }
                }
                k if k >= 90 => {
                    let attribute = match r.next_u64() % 10 {
                        0 => Attribute::Immutable,
                        1..=4 => Attribute::Mutable,
                        5..=6 => Attribute::NonPersistent,
                        _ => Attribute::Persistent,
                    };
                    RangeOp::SetAttribute {
                        lba: src,
                        block_count: n,
                        attribute,
                    }
                }
                _ => RangeOp::Delete {
                    lba: dst,
                    block_count: n,
                },
            };
            ops.push(op);
        }
        if ops.is_empty() || zftl::core::range::validate(&ops, blocks).is_err() {
            // A fail-on-conflict merge after an operation on its ranges.
            return vec![RangeOp::Delete {
                lba: 0,
                block_count: 1,
            }];
        }
        ops
    }

    fn run_vector(&mut self, seed: u64) -> Result<(), IoError> {
        let ops = self.random_vector(seed);
        let expected = self.model.vector(&ops);
        let result = self.ftl().range_ops(ops);
        match (result, expected) {
            (Ok(()), Ok((after, attrs))) => {
                self.model.apply_vector(&after, attrs);
                Ok(())
            }
            (Err(IoError::Immutable { lba }), Err(Refusal::Immutable(at))) if lba == at => Ok(()),
            (Err(IoError::MergeConflict { lba }), Err(Refusal::Conflict(at))) if lba == at => {
                Ok(())
            }
            // Snapshots hold the room the vector's changes would keep.
            (Err(IoError::SnapshotSpace), _) if self.snapshots => Ok(()),
            (Err(e @ (IoError::DeviceGone | IoError::ReadOnly)), Ok((after, attrs))) => {
                self.uncertain = Some(self.model.uncertain(&after, &attrs));
                Err(e)
            }
            (Err(e @ (IoError::DeviceGone | IoError::ReadOnly)), Err(_)) => Err(e),
            (result, expected) => panic!(
                "vector answered {result:?}, the model expected {:?}",
                expected.map(|(after, _)| after)
            ),
        }
    }

    /// A snapshot create (up to 3 live), delete or read of a random range.
    fn run_snapshot(&mut self, seed: u64) -> Result<(), IoError> {
        let mut r = Rng::new(seed);
        if self.forks && r.next_u64().is_multiple_of(2) {
            return self.run_fork(&mut r);
        }
        let live: Vec<usize> = (0..self.snaps.len())
            .filter(|&i| self.snaps[i].state == SnapState::Exists)
            .collect();
        let pick = |r: &mut Rng| live[(r.next_u64() % live.len() as u64) as usize];
        match r.next_u64() % 12 {
            10..=11 if !live.is_empty() && live.len() < 3 => {
                let i = pick(&mut r);
                self.run_revert(i)
            }
            0..=3 if live.len() < 3 => {
                let name = format!("s{}", self.next_snap);
                self.next_snap += 1;
                let versions: Vec<u32> = (0..self.blocks).map(|l| self.model.latest(l)).collect();
                let result = self.ftl().snapshot_create(&name).map(drop);
                let state = match &result {
                    Ok(()) => {
                        // A create is a flush barrier.
                        self.model.flush();
                        self.coverage.snapshots += 1;
                        SnapState::Exists
                    }
                    Err(IoError::DeviceGone | IoError::ReadOnly) => SnapState::MaybeCreated,
                    Err(IoError::SnapshotSpace) => return Ok(()),
                    Err(e) => panic!("snapshot create {name}: {e}"),
                };
                let may_be_zero = vec![false; self.blocks as usize];
                self.snaps.push(SnapModel {
                    name,
                    state,
                    versions,
                    may_be_zero,
                });
                result
            }
            0..=5 if !live.is_empty() => {
                let i = pick(&mut r);
                let name = self.snaps[i].name.clone();
                if self.fork_models.iter().any(|f| f.base == name) {
                    return Ok(()); // refused while a fork of it lives
                }
                match self.ftl().snapshot_delete(&name) {
                    Ok(()) => {
                        self.snaps.remove(i);
                        Ok(())
                    }
                    Err(e @ (IoError::DeviceGone | IoError::ReadOnly)) => {
                        self.snaps[i].state = SnapState::MaybeDeleted;
                        Err(e)
                    }
                    Err(e) => panic!("snapshot delete {name}: {e}"),
                }
            }
            6..=7 if !live.is_empty() => {
                let i = pick(&mut r);
                let j = r.next_u64().is_multiple_of(2).then(|| pick(&mut r));
                self.check_diff(i, j)
            }
            _ if !self.points.is_empty() && r.next_u64().is_multiple_of(2) => {
                let k = (r.next_u64() % self.points.len() as u64) as usize;
                let id = *self.points.keys().nth(k).expect("k < len");
                let lba = r.next_u64() % self.blocks;
                let n = (1 + r.next_u64() % 16).min(self.blocks - lba) as u32;
                self.check_point(id, lba, n)
            }
            _ if !live.is_empty() => {
                let i = pick(&mut r);
                let lba = r.next_u64() % self.blocks;
                let n = (1 + r.next_u64() % 16).min(self.blocks - lba) as u32;
                self.check_snapshot(i, lba, n)
            }
            _ => Ok(()),
        }
    }

    /// A fork create (up to 2 live) of a live snapshot, a fork delete, or
    /// a write, trim or read of a random range of a live fork.
    fn run_fork(&mut self, r: &mut Rng) -> Result<(), IoError> {
        let live: Vec<usize> = (0..self.fork_models.len())
            .filter(|&i| self.fork_models[i].state == SnapState::Exists)
            .collect();
        let snaps: Vec<usize> = (0..self.snaps.len())
            .filter(|&i| self.snaps[i].state == SnapState::Exists)
            .collect();
        let choice = r.next_u64() % 10;
        if live.is_empty() || (choice == 0 && live.len() < 2) {
            if snaps.is_empty() || live.len() >= 2 {
                return Ok(());
            }
            let s = &self.snaps[snaps[(r.next_u64() % snaps.len() as u64) as usize]];
            let (base, versions, may_be_zero) =
                (s.name.clone(), s.versions.clone(), s.may_be_zero.clone());
            let name = format!("f{}", self.next_fork);
            self.next_fork += 1;
            let result = self.ftl().fork_create(&base, &name).map(drop);
            let state = match &result {
                Ok(()) => {
                    self.coverage.forks += 1;
                    SnapState::Exists
                }
                Err(IoError::DeviceGone | IoError::ReadOnly) => SnapState::MaybeCreated,
                Err(e) => panic!("fork create {name} of {base}: {e}"),
            };
            self.fork_models.push(ForkModel {
                name,
                base,
                state,
                model: Model::holding(&versions),
                changed: vec![false; self.blocks as usize],
                durably_changed: vec![false; self.blocks as usize],
                may_be_zero,
            });
            return result;
        }
        let i = live[(r.next_u64() % live.len() as u64) as usize];
        let name = self.fork_models[i].name.clone();
        let at = match self.ftl().forks().into_iter().find(|f| f.name == name) {
            Some(f) => f.lba_offset,
            None => panic!("fork {name} is gone"),
        };
        let lba = r.next_u64() % self.blocks;
        let n = (1 + r.next_u64() % 8).min(self.blocks - lba) as u32;
        let bs = self.bs;
        match choice {
            1 => match self.ftl().fork_delete(&name) {
                Ok(()) => {
                    self.fork_models.remove(i);
                    Ok(())
                }
                Err(e @ (IoError::DeviceGone | IoError::ReadOnly)) => {
                    self.fork_models[i].state = SnapState::MaybeDeleted;
                    Err(e)
                }
                Err(e) => panic!("fork delete {name}: {e}"),
            },
            2..=6 => {
                let trim = choice == 6;
                let mut data = Vec::with_capacity(n as usize * bs);
                for l in lba..lba + u64::from(n) {
                    let v = if trim { 0 } else { self.version() };
                    self.fork_models[i].model.write(l, v);
                    data.extend(pattern(l, v, bs));
                }
                let result = if trim {
                    self.ftl().trim(at + lba, n)
                } else {
                    self.ftl().write(at + lba, &data)
                };
                let f = &mut self.fork_models[i];
                match result {
                    Ok(()) => {
                        f.changed[lba as usize..(lba + u64::from(n)) as usize].fill(true);
                        self.coverage.fork_blocks_written += u64::from(n);
                        Ok(())
                    }
                    Err(IoError::SnapshotSpace | IoError::NoSpace | IoError::Fork(_)) => {
                        for l in lba..lba + u64::from(n) {
                            f.model.unwrite(l);
                        }
                        Ok(())
                    }
                    Err(e) => Err(e),
                }
            }
            _ => self.check_fork(i, at, lba, n),
        }
    }

    /// Reads blocks `lba..+n` of model fork `i` (its region at `at`) and
    /// checks them: the latest version before any crash, one the model
    /// allows after one (then known durable).
    fn check_fork(&mut self, i: usize, at: u64, lba: u64, n: u32) -> Result<(), IoError> {
        let data = self.ftl().read(at + lba, n)?;
        let failed = self.ftl().ftl().failure().is_some();
        self.coverage.fork_blocks_checked += u64::from(n);
        let f = &mut self.fork_models[i];
        for (k, block) in data.chunks(self.bs).enumerate() {
            let l = lba + k as u64;
            // Versions are unique: a clone's copy names its origin block.
            let (_, got) =
                decode_any(block).unwrap_or_else(|e| panic!("fork {} block {l}: {e}", f.name));
            let zero_ok = got == 0 && f.may_be_zero[l as usize] && !f.changed[l as usize];
            if failed || zero_ok {
                assert!(
                    zero_ok || f.model.allowed(l, got),
                    "fork {} block {l} read {got}; model: {}",
                    f.name,
                    f.model.describe(l)
                );
            } else {
                assert_eq!(
                    got,
                    f.model.latest(l),
                    "fork {} block {l}; model: {}",
                    f.name,
                    f.model.describe(l)
                );
            }
        }
        Ok(())
    }

    /// After a mount: forks whose create or delete a cut interrupted exist
    /// or not as the volume says, every other one exactly there; then
    /// every block of every fork is checked and known durable.
    fn resolve_forks(&mut self) {
        let found: Vec<(String, u64)> = self
            .ftl()
            .forks()
            .into_iter()
            .map(|f| (f.name, f.lba_offset))
            .collect();
        self.fork_models.retain_mut(|f| {
            let there = found.iter().any(|(n, _)| *n == f.name);
            match f.state {
                SnapState::Exists => assert!(there, "fork {} lost by a crash", f.name),
                SnapState::MaybeCreated | SnapState::MaybeDeleted => f.state = SnapState::Exists,
            }
            there
        });
        for (name, _) in &found {
            assert!(
                self.fork_models.iter().any(|f| f.name == *name),
                "fork {name} appeared from nowhere"
            );
        }
        let attrs = self.model.attrs().to_vec();
        for f in &mut self.fork_models {
            for (l, &a) in attrs.iter().enumerate() {
                // A change the cut may have lost leaves the block its base's.
                f.changed[l] = f.durably_changed[l];
                f.may_be_zero[l] |= a & attr_bits::NON_PERSISTENT != 0 && !f.changed[l];
            }
        }
        for i in 0..self.fork_models.len() {
            let name = self.fork_models[i].name.clone();
            let at = found.iter().find(|(n, _)| *n == name).expect("found").1;
            let mut lba = 0;
            while lba < self.blocks {
                let n = (self.blocks - lba).min(64) as u32;
                let data = self
                    .ftl()
                    .read(at + lba, n)
                    .unwrap_or_else(|e| panic!("fork {name} read after recovery: {e}"));
                let f = &mut self.fork_models[i];
                for (k, block) in data.chunks(self.bs).enumerate() {
                    let l = lba + k as u64;
                    let (_, got) =
                        decode_any(block).unwrap_or_else(|e| panic!("fork {name} block {l}: {e}"));
                    let zero_ok = got == 0 && f.may_be_zero[l as usize] && !f.changed[l as usize];
                    assert!(
                        zero_ok || f.model.allowed(l, got),
                        "fork {name} block {l} read {got} after recovery; model: {}",
                        f.model.describe(l)
                    );
                    if f.model.has_pending(l) && f.model.allowed_pending(l, got) {
                        // The fork's own change survived the cut.
                        f.changed[l as usize] = true;
                        f.durably_changed[l as usize] = true;
                    }
                    f.model.durable(l, got);
                }
                self.coverage.fork_blocks_checked += u64::from(n);
                lba += u64::from(n);
            }
        }
    }

    fn latest_versions(&self) -> Vec<u32> {
        (0..self.blocks).map(|l| self.model.latest(l)).collect()
    }

    /// Records the window points that appeared during the operation that
    /// ran from state `before` to now, and forgets those gone.
    fn note_points(&mut self, before: Vec<u32>) {
        let found: Vec<u32> = self
            .ftl
            .as_ref()
            .expect("mounted")
            .snapshots()
            .into_iter()
            .filter(|s| s.is_point())
            .map(|s| s.id)
            .collect();
        self.points.retain(|id, _| found.contains(id));
        self.unknown_points.retain(|id| found.contains(id));
        let after = self.latest_versions();
        for id in found {
            if !self.points.contains_key(&id) && !self.unknown_points.contains(&id) {
                let p = PointModel {
                    before: before.clone(),
                    after: after.clone(),
                    may_be_zero: vec![false; self.blocks as usize],
                };
                self.points.insert(id, p);
                self.coverage.window_points_seen += 1;
            }
        }
    }

    /// Reads blocks `lba..+n` of window point `id` and checks each holds
    /// its version from before or after the operation the point appeared
    /// in. A point dropped meanwhile is forgotten.
    fn check_point(&mut self, id: u32, lba: u64, n: u32) -> Result<(), IoError> {
        let ftl = self.ftl.as_mut().expect("mounted");
        let data = match ftl.read_snapshot(id, lba, n) {
            Err(IoError::Snapshot(_)) => {
                self.points.remove(&id);
                return Ok(());
            }
            other => other?,
        };
        let p = &self.points[&id];
        for (k, block) in data.chunks(self.bs).enumerate() {
            let l = (lba + k as u64) as usize;
            let (_, got) =
                decode_any(block).unwrap_or_else(|e| panic!("point {id} block {l}: {e}"));
            let zero_ok = p.may_be_zero[l] && got == 0;
            assert!(
                got == p.before[l] || got == p.after[l] || zero_ok,
                "point {id} block {l} read version {got}, it holds {} or {}",
                p.before[l],
                p.after[l]
            );
        }
        self.coverage.window_point_blocks_checked += u64::from(n);
        Ok(())
    }

    /// Reads blocks `lba..+n` of model snapshot `i` and checks them.
    fn check_snapshot(&mut self, i: usize, lba: u64, n: u32) -> Result<(), IoError> {
        let name = self.snaps[i].name.clone();
        let ftl = self.ftl.as_mut().expect("mounted");
        let id = ftl.snapshot_named(&name)?.id;
        let data = ftl.read_snapshot(id, lba, n)?;
        self.coverage.snapshot_blocks_checked += u64::from(n);
        let s = &self.snaps[i];
        for (k, block) in data.chunks(self.bs).enumerate() {
            let l = lba + k as u64;
            let (_, got) =
                decode_any(block).unwrap_or_else(|e| panic!("snapshot {name} block {l}: {e}"));
            let want = s.versions[l as usize];
            let zero_ok = s.may_be_zero[l as usize] && got == 0;
            assert!(
                got == want || zero_ok,
                "snapshot {name} block {l} read version {got}, it holds {want}"
            );
        }
        Ok(())
    }

    /// Reverts the live volume to model snapshot `i`, keeping the state it
    /// leaves as a new snapshot.
    fn run_revert(&mut self, i: usize) -> Result<(), IoError> {
        if self.snaps[i].may_be_zero.iter().any(|&z| z) {
            return Ok(()); // the model does not know what it holds
        }
        let to = self.snaps[i].name.clone();
        let undo = format!("s{}", self.next_snap);
        self.next_snap += 1;
        let before: Vec<u32> = (0..self.blocks).map(|l| self.model.latest(l)).collect();
        let after: BTreeMap<u64, u32> = (0..self.blocks)
            .filter(|&l| self.snaps[i].versions[l as usize] != before[l as usize])
            .map(|l| (l, self.snaps[i].versions[l as usize]))
            .collect();
        let result = self.ftl().snapshot_revert(&to, Some(&undo)).map(drop);
        let state = match &result {
            Ok(()) => {
                // A revert is a flush barrier, then one atomic vector.
                self.model.flush();
                let attrs = self.model.attrs.clone();
                self.model.apply_vector(&after, attrs);
                self.coverage.reverts += 1;
                SnapState::Exists
            }
            Err(IoError::DeviceGone | IoError::ReadOnly) => {
                let attrs = self.model.attrs.clone();
                self.uncertain = Some(self.model.uncertain(&after, &attrs));
                SnapState::MaybeCreated
            }
            Err(IoError::SnapshotSpace) => return Ok(()),
            Err(e) => panic!("revert to {to}: {e}"),
        };
        self.snaps.push(SnapModel {
            name: undo,
            state,
            versions: before,
            may_be_zero: vec![false; self.blocks as usize],
        });
        result
    }

    /// Diffs model snapshot `i` against snapshot `j` (`None`: the live
    /// volume): exactly the blocks whose versions differ are listed.
    fn check_diff(&mut self, i: usize, j: Option<usize>) -> Result<(), IoError> {
        let since = self.snaps[i].name.clone();
        let until = j.map(|j| self.snaps[j].name.clone());
        let ftl = self.ftl.as_mut().expect("mounted");
        let runs = ftl.snapshot_diff(&since, until.as_deref())?;
        self.coverage.snapshot_diffs += 1;
        let mut listed = vec![false; self.blocks as usize];
        let mut end = 0;
        for &(lba, n) in &runs {
            assert!(n > 0 && lba >= end, "diff runs out of order: {runs:?}");
            end = lba + n;
            listed[lba as usize..end as usize].fill(true);
        }
        let (a, b) = (&self.snaps[i], j.map(|j| &self.snaps[j]));
        for (l, &is_listed) in listed.iter().enumerate() {
            let unsure = a.may_be_zero[l] || b.is_some_and(|b| b.may_be_zero[l]);
            let other = b.map_or_else(|| self.model.latest(l as u64), |b| b.versions[l]);
            let differs = a.versions[l] != other;
            assert!(
                unsure || is_listed == differs,
                "diff {since}..{until:?} lists block {l}: {is_listed}, versions {} and {other}",
                a.versions[l]
            );
        }
        Ok(())
    }

    /// After a mount: each snapshot whose create or delete a cut
    /// interrupted exists or not as the volume says; every other one is
    /// exactly there; then every block of every snapshot is checked.
    fn resolve_snapshots(&mut self, ftl: &Driver<SimDevice>) {
        // Window points come and go without the model.
        let found: Vec<String> = ftl
            .snapshots()
            .into_iter()
            .filter(|s| !s.is_point())
            .map(|s| s.name)
            .collect();
        self.snaps.retain_mut(|s| {
            let there = found.contains(&s.name);
            match s.state {
                SnapState::Exists => assert!(there, "snapshot {} lost by a crash", s.name),
                SnapState::MaybeCreated | SnapState::MaybeDeleted => s.state = SnapState::Exists,
            }
            there
        });
        let known: Vec<&String> = self.snaps.iter().map(|s| &s.name).collect();
        for name in &found {
            assert!(
                known.contains(&name),
                "snapshot {name} appeared from nowhere"
            );
        }
    }

    /// A request refused at admission (no space, read-only volume) did not
    /// happen; one cut short by a power cut may or may not have.
    fn forget_if_refused(&mut self, result: &Result<(), IoError>, lba: u64, n: u32) {
        if matches!(
            result,
            Err(IoError::NoSpace | IoError::ReadOnly | IoError::SnapshotSpace)
        ) {
            for l in lba..lba + u64::from(n) {
                self.model.unwrite(l);
            }
        }
    }

    /// Power is gone: bring the device back, mount (maybe cutting power
    /// during recovery too), then check every block against the model.
    pub fn crash_and_recover(&mut self) {
        self.coverage.cuts += 1;
        self.coverage.during_gc += u64::from(self.last_activity.gc);
        self.coverage.during_checkpoint += u64::from(self.last_activity.checkpoint);
        let ftl = self.ftl.take().expect("mounted");
        let stats = ftl.stats();
        self.coverage.gc_copies += stats.gc_copy_blocks;
        self.coverage.wl_moves += stats.wl_move_blocks;
        self.coverage.host_retries += stats.host_retries;
        self.coverage.snapshot_versions += stats.snapshot_versions;
        self.coverage.window_points += stats.window_points;
        let mut dev = ftl.into_backend();
        dev.power_cut();
        self.armed = false;
        dev.power_on().expect("power on");
        if self.rng.next_u64().is_multiple_of(3) {
            self.cut_during_recovery(&mut dev);
        }
        dev.set_faults(Faults::default());
        self.mount_and_check(dev);
    }

    /// Mounts with a power cut armed a few commands in; whether recovery
    /// finished or not, the device is cut and recovered again by the caller.
    fn cut_during_recovery(&mut self, dev: &mut SimDevice) {
        let after = 1 + self.rng.next_u64() % 120;
        dev.set_faults(Faults {
            seed: self.rng.next_u64(),
            power_cut: PowerCut::AfterSubmits(after),
            controller_reset_per_million: self.controller_reset_per_million,
            ..Faults::default()
        });
        match Driver::mount(&mut *dev, self.cfg.clone()) {
            Ok(_) => {}
            Err(MountError::Device { .. }) => self.coverage.during_recovery += 1,
            Err(e) => panic!("mount cut short by a power cut reported: {e}"),
        }
        dev.power_cut();
        dev.power_on().expect("power on");
    }

    /// A metadata write failed and the volume went read-only: remount (the
    /// device keeps its state; unflushed writes may be lost, as in a crash).
    fn remount_after_failure(&mut self) {
        self.remounts_after_failure += 1;
        let dev = self.ftl.take().expect("mounted").into_backend();
        self.mount_and_check(dev);
    }

    fn mount_and_check(&mut self, mut dev: SimDevice) {
        // What mount will rebuild must agree with itself (map, reverse map,
        // zone table): a disagreement shows only much later, as lost space.
        // Injected read errors are transient: off while `check` reads. The
        // faults resume with a seed drawn from the last one: restarting
        // from the same seed would replay the same faults at the same
        // points after every remount.
        let faults = Faults {
            seed: Rng::new(dev.config().faults.seed).next_u64(),
            ..dev.config().faults.clone()
        };
        dev.set_faults(Faults::default());
        assert_check_clean(&mut dev, "before mount");
        dev.set_faults(faults);
        let mut ftl = Driver::mount(dev, self.cfg.clone())
            .unwrap_or_else(|e| panic!("mount after power cut: {e}"));
        self.end_of_life = ftl.ftl().is_read_only();
        assert!(
            !self.end_of_life || self.media_faults,
            "mounted read-only with no media fault injected: {}",
            ftl.ftl().debug_state()
        );
        if let Some(t) = trace_lba() {
            eprintln!(
                "trace: mounted; block {t} at {:?}; model {}",
                ftl.ftl().lookup(t),
                self.model.describe(t)
            );
        }
        // The maps' counts (live blocks per zone, shared references, the
        // history's share of them) agree with the maps themselves.
        ftl.ftl().mapping().assert_consistent();
        self.resolve_attrs(&mut ftl);
        self.model.crash();
        for s in &mut self.snaps {
            for (l, &a) in self.model.attrs().iter().enumerate() {
                s.may_be_zero[l] |= a & attr_bits::NON_PERSISTENT != 0;
            }
        }
        for p in self.points.values_mut() {
            for (l, &a) in self.model.attrs().iter().enumerate() {
                p.may_be_zero[l] |= a & attr_bits::NON_PERSISTENT != 0;
            }
        }
        self.resolve_snapshots(&ftl);
        for s in ftl.snapshots().into_iter().filter(|s| s.is_point()) {
            if !self.points.contains_key(&s.id) && !self.unknown_points.contains(&s.id) {
                self.unknown_points.push(s.id);
            }
        }
        for lba in 0..self.blocks {
            let data = ftl
                .read(lba, 1)
                .unwrap_or_else(|e| panic!("read of block {lba} after recovery: {e}"));
            let (_, v) =
                decode_any(&data).unwrap_or_else(|e| panic!("block {lba} after recovery: {e}"));
            assert!(
                self.model.allowed(lba, v),
                "block {lba} read version {v} after recovery; model: {}",
                self.model.describe(lba)
            );
            self.model.durable(lba, v);
        }
        self.ftl = Some(ftl);
        self.set_clock();
        self.resolve_forks();
        let ids: Vec<u32> = self.points.keys().copied().collect();
        for id in ids {
            let mut lba = 0;
            while lba < self.blocks {
                let n = (self.blocks - lba).min(64) as u32;
                self.check_point(id, lba, n)
                    .unwrap_or_else(|e| panic!("point read after recovery: {e}"));
                lba += u64::from(n);
            }
        }
        for i in 0..self.snaps.len() {
            let blocks = self.blocks;
            let mut lba = 0;
            while lba < blocks {
                let n = (blocks - lba).min(64) as u32;
                self.check_snapshot(i, lba, n)
                    .unwrap_or_else(|e| panic!("snapshot read after recovery: {e}"));
                lba += u64::from(n);
            }
        }
    }

    /// The attributes the mount found, per block.
    fn ftl_attrs(&self, ftl: &Driver<SimDevice>) -> Vec<u8> {
        let mut attrs = vec![0u8; self.blocks as usize];
        for (lba, n, bits) in ftl.ftl().attributes() {
            attrs[lba as usize..(lba + n) as usize].fill(bits);
        }
        attrs
    }

    /// After a mount: a vector the cut interrupted happened whole or not at
    /// all (its attributes and every block of its ranges agree on which),
    /// and the attributes are the model's.
    fn resolve_attrs(&mut self, ftl: &mut Driver<SimDevice>) {
        let found = self.ftl_attrs(ftl);
        if let Some(u) = self.uncertain.take() {
            let np = |attrs: &[u8], l: u64| attrs[l as usize] & attr_bits::NON_PERSISTENT != 0;
            let mut applied = found == u.attrs_after;
            let mut not_applied = found == u.attrs_before;
            for (&l, (before, after)) in &u.blocks {
                let data = ftl
                    .read(l, 1)
                    .unwrap_or_else(|e| panic!("read of {l}: {e}"));
                let (_, v) = decode_any(&data).unwrap_or_else(|e| panic!("block {l}: {e}"));
                applied &= v == if np(&u.attrs_after, l) { 0 } else { *after };
                not_applied &= if np(&u.attrs_before, l) {
                    v == 0
                } else {
                    before.contains(&v)
                };
            }
            assert!(
                applied || not_applied,
                "a vector cut short left a mix of before and after: {u:?}; attributes found {found:?}"
            );
            if applied {
                let after = u.blocks.iter().map(|(&l, &(_, v))| (l, v)).collect();
                self.model.apply_vector(&after, u.attrs_after);
            }
        }
        assert_eq!(found, self.model.attrs(), "attributes after the mount");
    }

    /// A final cut and check at the end of a run.
    pub fn finish(&mut self) {
        let ftl = self.ftl.take().expect("mounted");
        let stats = ftl.stats();
        self.coverage.gc_copies += stats.gc_copy_blocks;
        self.coverage.wl_moves += stats.wl_move_blocks;
        self.coverage.host_retries += stats.host_retries;
        let mut dev = ftl.into_backend();
        dev.power_cut();
        dev.power_on().expect("power on");
        dev.set_faults(Faults::default());
        self.armed = false;
        self.mount_and_check(dev);
    }

    pub fn random_op(&mut self) -> Op {
        let r = self.rng.next_u64();
        let lba = self.rng.next_u64() % self.blocks;
        let blocks = 1 + (self.rng.next_u64() % 8) as u32;
        if self.snapshots {
            return match r % 100 {
                0..=57 => Op::Write { lba, blocks },
                58..=61 => Op::Fua { lba },
                62..=66 => Op::Trim { lba, blocks },
                67..=68 => Op::Zeroes { lba, blocks },
                69..=75 => Op::Read { lba, blocks },
                76..=83 => Op::Vector {
                    seed: self.rng.next_u64(),
                },
                84..=93 => Op::Snapshot {
                    seed: self.rng.next_u64(),
                },
                _ => Op::Flush,
            };
        }
        if self.ranges {
            return match r % 100 {
                0..=61 => Op::Write { lba, blocks },
                62..=65 => Op::Fua { lba },
                66..=70 => Op::Trim { lba, blocks },
                71..=72 => Op::Zeroes { lba, blocks },
                73..=81 => Op::Read { lba, blocks },
                82..=91 => Op::Vector {
                    seed: self.rng.next_u64(),
                },
                _ => Op::Flush,
            };
        }
        match r % 100 {
            0..=69 => Op::Write { lba, blocks },
            70..=73 => Op::Fua { lba },
            74..=78 => Op::Trim { lba, blocks },
            79..=80 => Op::Zeroes { lba, blocks },
            81..=89 => Op::Read { lba, blocks },
            _ => Op::Flush,
        }
    }

    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// `rounds` of: arm a power cut after a random 1..=`max_after`
    /// device commands, then 400 random operations; then a final cut and
    /// check. Returns where the cuts landed.
    pub fn cut_rounds(mut self, rounds: u32, max_after: u64) -> Coverage {
        for _ in 0..rounds {
            let after = 1 + self.rng.next_u64() % max_after;
            self.apply(Op::Cut {
                after_commands: after,
            });
            for _ in 0..400 {
                let op = self.random_op();
                self.apply(op);
            }
        }
        self.finish();
        self.coverage
    }
}
