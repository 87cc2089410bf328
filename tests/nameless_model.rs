//! Model-based property test of the nameless API (issue 31) on `Driver`
//! over a small simulated volume, with power cuts at random device
//! commands, mid-flight and during mounts.
//!
//! A client model knows, for every address it was told (by a reply or an
//! event), the data and md the block holds, whether a flush or a commit
//! covers it, and which addresses it freed. Every call is checked against
//! it: blocks read back exactly; freed, never-written, moved-and-acked,
//! out-of-segment and garbage addresses get typed errors (never a panic);
//! refused requests change nothing. After every cut and mount:
//!
//! - every flushed or committed block reads back at its address;
//! - every block written after the last commit that answered is handed
//!   over as `Unrecorded` with its md exactly, or is gone; a commit the cut
//!   left unanswered either covers all the blocks it would cover or none;
//! - an overwrite keeps its new block and the free of the old one, or
//!   neither; a block of a write the cut left unanswered comes back only
//!   through the hand-over, whole, with its md;
//! - a block freed by a flushed free never comes back;
//! - once the client has freed the blocks it does not want,
//!   `nameless_live_blocks` is exactly what it holds (nothing leaks);
//! - every move (`Migrated { old, new, md }`) the client took and did not
//!   see acknowledged (by an ack, or a commit admitted after it) comes
//!   again, unless the client freed the block and the free survived; the
//!   old address reaches the block until the ack, then is dead.
//!
//! GC migrates live blocks at any time, also during the hand-over: the
//! client follows every move of a block it holds (repoints, acks at
//! random), only of blocks it holds or was handed over (a freed block's
//! move never comes); a block moved after the hand-over named it is known
//! by its new address; until a move is delivered the client's address
//! still reaches the block, so the checks read the addresses it knows.
//!
//! The paper's four crash points (Zhang et al., FAST'12, §6.7) have cases
//! of their own besides the random ones: `crash_point_*` below.
//!
//! Replay: the property test runs the same cases every time (a fixed
//! seed; `PROPTEST_RNG_SEED=<n>` for others, `PROPTEST_CASES=<n>` for
//! more); a failure prints its shrunk case and the command that reruns it,
//! and keeps the shrunk case in `tests/nameless_model.proptest-regressions`,
//! which every later run replays first. The crash-point cases print
//! `ZFTL_SEED=<s> cargo test ...` for a failing seed; more seeds with
//! `ZFTL_SEEDS`.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use zftl::core::{
    nameless_request, Driver, FormatOptions, FtlConfig, IoError, MountError, NamelessAddr,
    NamelessError, NamelessEvent, ReplyData, Request, TagPlacement,
};
use zftl::sim::rng::Rng;
use zftl::sim::{Faults, PowerCut, SimDevice};

mod common;
use common::{ftl_config, pattern, run_listed_seeds, seeds_to_run, sim_config, Coverage};

/// The metadata of block `key` version `version`: both, then bytes made
/// of them, so a wrong, shifted or torn md never matches.
fn md_of(key: u64, version: u32, md_bytes: usize) -> Vec<u8> {
    let mut m = vec![0u8; md_bytes];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..12].copy_from_slice(&version.to_le_bytes());
    for (i, b) in m[12..].iter_mut().enumerate() {
        *b = (key as u8).wrapping_mul(7) ^ (version as u8).wrapping_add(i as u8);
    }
    m
}

/// The (key, version) an md names.
fn md_names(md: &[u8]) -> (u64, u32) {
    let key = u64::from_le_bytes(md[..8].try_into().unwrap());
    let version = u32::from_le_bytes(md[8..12].try_into().unwrap());
    (key, version)
}

/// Whether an error means the power went (or the volume stopped writing
/// because of it): the request may or may not have taken effect.
fn is_cut(e: &IoError) -> bool {
    matches!(
        e,
        IoError::DeviceGone | IoError::ReadOnly | IoError::Device { .. }
    )
}

/// Whether a commit covers a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Commit {
    /// Written after the last commit that answered: handed over after a
    /// mount if it survives.
    No,
    /// Written before a commit a cut left unanswered.
    Maybe,
    /// Covered by a commit that answered: never handed over.
    Yes,
}

/// A block the client holds (or freed, while a cut may bring it back).
#[derive(Clone, Copy, Debug)]
struct Block {
    key: u64,
    version: u32,
    /// A flush (or FUA, or a commit) since it was answered: a cut keeps it.
    durable: bool,
    commit: Commit,
    /// The block this one's overwrite freed, until a flush.
    replaces: Option<NamelessAddr>,
}

/// What the client knows of the physical segment.
#[derive(Default)]
struct Model {
    live: BTreeMap<NamelessAddr, Block>,
    /// Freed (or replaced) since the last flush: a cut may bring them back.
    freeing: BTreeMap<NamelessAddr, Block>,
    /// Freed for good (a flush, or found dead after a cut): never live again.
    gone: BTreeSet<NamelessAddr>,
    /// Blocks of writes a cut left unanswered (or that failed after being
    /// sent): each may come back once, through the hand-over. For an
    /// overwrite, the address it replaces.
    limbo: BTreeMap<(u64, u32), Option<NamelessAddr>>,
    /// Of those, the blocks of writes answered with an error (no space):
    /// the FTL freed what landed, a cut may undo that.
    refused: BTreeSet<(u64, u32)>,
    /// Live blocks an unanswered overwrite names, and its new block.
    overwriting: BTreeMap<NamelessAddr, (u64, u32)>,
    /// The blocks being freed when a commit the cut left unanswered was
    /// admitted: if it happened, they are freed for good.
    maybe_commit_frees: Option<BTreeSet<NamelessAddr>>,
    /// Blocks both a free and an overwrite freed (a batch's race): a cut
    /// may keep the free alone.
    raced: BTreeSet<NamelessAddr>,
    /// Moves delivered and not acknowledged: old address -> new.
    moved: BTreeMap<NamelessAddr, NamelessAddr>,
    /// Moves delivered, not acknowledged, whose block the client freed
    /// since (the free dropped the entry; a cut that loses the free
    /// brings both back): old address -> new.
    unmoving: BTreeMap<NamelessAddr, NamelessAddr>,
    /// Moves whose ack (or covering commit) a cut left unanswered.
    acking: BTreeMap<NamelessAddr, NamelessAddr>,
    /// Old addresses of acknowledged moves: stale.
    acked: BTreeSet<NamelessAddr>,
}

impl Model {
    fn flush(&mut self) {
        for b in self.live.values_mut() {
            b.durable = true;
            b.replaces = None;
        }
        self.gone
            .extend(std::mem::take(&mut self.freeing).into_keys());
        self.gone
            .extend(std::mem::take(&mut self.unmoving).into_keys());
        self.raced.clear();
    }

    /// Frees the block at `a` (its address now); a delivered move of it
    /// goes with it.
    fn free(&mut self, a: NamelessAddr) {
        let b = self.live.remove(&a).expect("freed a live block");
        self.freeing.insert(a, b);
        let olds: Vec<NamelessAddr> = self
            .moved
            .iter()
            .filter(|&(_, &new)| new == a)
            .map(|(&old, _)| old)
            .collect();
        for old in olds {
            self.moved.remove(&old);
            self.unmoving.insert(old, a);
        }
    }

    /// A flush answered that covers the frees of `a`.
    fn free_done(&mut self, a: NamelessAddr) {
        if self.freeing.remove(&a).is_some() {
            self.gone.insert(a);
        }
        let olds: Vec<NamelessAddr> = self
            .unmoving
            .iter()
            .filter(|&(_, &new)| new == a)
            .map(|(&old, _)| old)
            .collect();
        for old in olds {
            self.unmoving.remove(&old);
            self.gone.insert(old);
        }
    }

    /// A commit was admitted and not answered.
    fn commit_sent(&mut self) {
        for b in self.live.values_mut().chain(self.freeing.values_mut()) {
            if b.commit == Commit::No {
                b.commit = Commit::Maybe;
            }
        }
        self.maybe_commit_frees = Some(self.freeing.keys().copied().collect());
        self.acking.append(&mut self.moved);
    }

    /// A commit answered: what it covers is committed, flushed, and the
    /// moves delivered before it are acknowledged.
    fn committed(&mut self) {
        for b in self.live.values_mut().chain(self.freeing.values_mut()) {
            b.commit = Commit::Yes;
        }
        self.maybe_commit_frees = None;
        self.flush();
        let moved = std::mem::take(&mut self.moved);
        let acking = std::mem::take(&mut self.acking);
        self.acked
            .extend(moved.into_keys().chain(acking.into_keys()));
    }

    fn nth<V>(map: &BTreeMap<NamelessAddr, V>, pick: usize) -> Option<NamelessAddr> {
        (!map.is_empty()).then(|| *map.keys().nth(pick % map.len()).unwrap())
    }

    fn nth_set(set: &BTreeSet<NamelessAddr>, pick: usize) -> Option<NamelessAddr> {
        (!set.is_empty()).then(|| *set.iter().nth(pick % set.len()).unwrap())
    }
}

/// An address a read names.
#[derive(Clone, Debug)]
enum Target {
    Live(usize),
    /// Freed, replaced, or found dead after a cut.
    Freed(usize),
    /// A live block's address one generation on: never handed out.
    Unborn(usize),
    /// Outside the segment: none, generation 0, the superblock zone, past
    /// the device.
    Outside(u8),
    /// Any 8 bytes.
    Garbage(u64),
    /// The old address of a move not yet acknowledged.
    Moved(usize),
    /// The old address of an acknowledged move.
    Acked(usize),
}

/// A request of a batch submitted together.
#[derive(Clone, Debug)]
enum Req {
    Write {
        blocks: u8,
    },
    Overwrite {
        pick: usize,
    },
    Free {
        pick: usize,
    },
    /// A free of a block an overwrite earlier in the batch replaces: the
    /// free wins if admitted before the overwrite lands (house rule 7).
    FreeRacing,
    Read {
        pick: usize,
    },
    Commit,
    Flush,
}

#[derive(Clone, Debug)]
enum Op {
    Write {
        blocks: u8,
        fua: bool,
    },
    Overwrite {
        pick: usize,
        blocks: u8,
    },
    Read {
        target: Target,
    },
    Free {
        pick: usize,
        blocks: u8,
    },
    /// A request the FTL must refuse with a typed error, changing nothing.
    Bad {
        kind: u8,
        pick: usize,
    },
    Commit,
    Ack {
        pick: usize,
    },
    /// `poll_event` (`max` 0) or `next_events(max)`.
    Events {
        max: u8,
    },
    Flush,
    /// Runs the loop until the core is idle: GC, resets of emptied zones
    /// and checkpoints finish.
    Settle,
    /// An in-place collection of a held block's zone, if one may start
    /// (md in OOB): it runs beside the ops after it.
    InPlace {
        pick: usize,
    },
    /// Requests submitted together, then all answers awaited, or (`cut`)
    /// the loop turned that many times and the power cut with whatever is
    /// in flight.
    Batch {
        reqs: Vec<Req>,
        cut: Option<u8>,
    },
    /// A power cut right after the device's `after_commands`-th command
    /// from now (0: now); the ops after it run until it fires. Then a
    /// mount, itself cut after `mount_cut` commands when given.
    Cut {
        after_commands: u16,
        mount_cut: Option<u8>,
    },
}

/// A request of a batch as sent.
#[derive(Clone, Debug)]
enum Sent {
    Write(Vec<(u64, u32)>),
    Overwrite {
        old: NamelessAddr,
        key: u64,
        version: u32,
    },
    /// The block, and whether it races an overwrite of it.
    Free(NamelessAddr, bool),
    Read(NamelessAddr, Block),
    Commit,
    Flush,
}

/// What the cases did, to show a run covered what it claims.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    cuts: u64,
    mount_cuts: u64,
    /// Blocks handed over after mounts, and of those the blocks of writes
    /// a cut left unanswered, kept or freed by the client.
    handed_over: u64,
    orphans_kept: u64,
    orphans_freed: u64,
    /// Blocks of unanswered writes that did not come back.
    in_flight_lost: u64,
    /// Commits a cut left unanswered that turned out done, or not.
    commits_done: u64,
    commits_lost: u64,
    /// Blocks read back and checked, typed errors checked.
    blocks_checked: u64,
    errors_checked: u64,
    /// Reads answered `Stale` (a zone reset since), writes refused for
    /// room (`NoSpace`, `MovesUnacknowledged`).
    stale_errors: u64,
    no_space: u64,
    migrated_events: u64,
    /// Moves not acknowledged at a cut, checked to come again.
    moves_again: u64,
    /// Of the blocks handed over, those named at an old address, their
    /// move coming after.
    handed_over_then_moved: u64,
    /// Moves taken of blocks the client freed, back after a cut lost the
    /// free.
    moves_of_lost_frees: u64,
    acks: u64,
    /// In-place collections GC started by itself (a remap table of one
    /// entry) and the gap fills of all jobs, summed at each cut.
    inplace_by_gc: u64,
    gap_fills: u64,
    overwrite_fills: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.cuts += o.cuts;
        self.mount_cuts += o.mount_cuts;
        self.handed_over += o.handed_over;
        self.orphans_kept += o.orphans_kept;
        self.orphans_freed += o.orphans_freed;
        self.in_flight_lost += o.in_flight_lost;
        self.commits_done += o.commits_done;
        self.commits_lost += o.commits_lost;
        self.blocks_checked += o.blocks_checked;
        self.errors_checked += o.errors_checked;
        self.stale_errors += o.stale_errors;
        self.no_space += o.no_space;
        self.migrated_events += o.migrated_events;
        self.moves_again += o.moves_again;
        self.handed_over_then_moved += o.handed_over_then_moved;
        self.moves_of_lost_frees += o.moves_of_lost_frees;
        self.acks += o.acks;
        self.inplace_by_gc += o.inplace_by_gc;
        self.gap_fills += o.gap_fills;
        self.overwrite_fills += o.overwrite_fills;
    }
}

struct Rig {
    ftl: Option<Driver<SimDevice>>,
    cfg: FtlConfig,
    bs: usize,
    mb: usize,
    m: Model,
    /// The client's own choices: keep or free a handed-over block, ack a
    /// move now or later, event batch sizes.
    rng: Rng,
    next_key: u64,
    next_version: u32,
    /// A cut is armed, and the mount after it is cut too after so many
    /// commands.
    armed: bool,
    mount_cut: Option<u8>,
    counts: Counts,
}

impl Rig {
    /// A volume with md in OOB on the common rig geometry (48 zones of 32
    /// blocks); `timing` turns on the simulator's virtual-time model, so
    /// commands stay in flight across loop turns.
    fn new(seed: u64, timing: bool, cfg: FtlConfig) -> Rig {
        Rig::new_in(seed, timing, cfg, true)
    }

    /// `new` with tags and md in OOB (`oob`) or in band (md in the log and
    /// in md groups).
    fn new_in(seed: u64, timing: bool, cfg: FtlConfig, oob: bool) -> Rig {
        let dev = SimDevice::create_memory(sim_config(seed, oob, timing)).unwrap();
        let opts = FormatOptions {
            tag_placement: if oob {
                TagPlacement::Auto
            } else {
                TagPlacement::InBand
            },
            seed,
            gc_reserve_zones: 3,
            ..FormatOptions::default()
        };
        let ftl = Driver::format(dev, &opts, cfg.clone()).unwrap();
        let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
        Rig {
            ftl: Some(ftl),
            cfg,
            bs,
            mb,
            m: Model::default(),
            rng: Rng::new(seed ^ 0x4E41_4D45),
            next_key: 0,
            next_version: 1,
            armed: false,
            mount_cut: None,
            counts: Counts::default(),
        }
    }

    fn ftl(&mut self) -> &mut Driver<SimDevice> {
        self.ftl.as_mut().expect("mounted")
    }

    fn data(&self, key: u64, version: u32) -> Vec<u8> {
        pattern(key, version, self.bs)
    }

    fn md(&self, key: u64, version: u32) -> Vec<u8> {
        md_of(key, version, self.mb)
    }

    /// `n` new blocks (fresh keys): their names, data and md.
    fn new_blocks(&mut self, n: u64) -> (Vec<(u64, u32)>, Vec<u8>, Vec<u8>) {
        let names: Vec<(u64, u32)> = (0..n)
            .map(|i| (self.next_key + i, self.next_version))
            .collect();
        self.next_key += n;
        self.next_version += 1;
        let data = names.iter().flat_map(|&(k, v)| self.data(k, v)).collect();
        let md = names.iter().flat_map(|&(k, v)| self.md(k, v)).collect();
        (names, data, md)
    }

    fn next_version(&mut self) -> u32 {
        self.next_version += 1;
        self.next_version - 1
    }

    /// Runs one op; a power cut it meets crashes and remounts.
    fn apply(&mut self, op: &Op) {
        let r = match op {
            Op::Write { blocks, fua } => self.write(u64::from(*blocks), *fua),
            Op::Overwrite { pick, blocks } => self.overwrite(*pick, *blocks),
            Op::Read { target } => self.read(target),
            Op::Free { pick, blocks } => self.free(*pick, *blocks),
            Op::Bad { kind, pick } => self.bad(*kind, *pick),
            Op::Commit => self.commit(),
            Op::Ack { pick } => self.ack(*pick),
            Op::Events { max } => self.events(*max),
            Op::Flush => self.flush(),
            Op::Settle => self.ftl().settle(),
            Op::InPlace { pick } => {
                if let Some(&a) = self.pick_live(*pick, 1).first() {
                    let cap = self.ftl().ftl().geometry().zone_capacity_blocks;
                    self.ftl().start_in_place(a.ppa().zone(cap));
                }
                Ok(())
            }
            Op::Batch { reqs, cut } => self.batch(reqs, *cut),
            Op::Cut {
                after_commands,
                mount_cut,
            } => {
                self.cut(*after_commands, *mount_cut);
                Ok(())
            }
        };
        match r {
            Ok(()) => {}
            Err(e) if self.armed && is_cut(&e) => self.crash(self.mount_cut),
            Err(e) => panic!("{op:?} failed without a power cut: {e}"),
        }
    }

    /// The end of a case: a cut still armed fires now; then a clean
    /// shutdown and a mount, which must hand over exactly what a cut
    /// would (a clean shutdown is no commit).
    fn finish(mut self) -> Counts {
        if self.armed {
            self.crash(self.mount_cut);
        }
        let dev = self.ftl.take().unwrap().shutdown().expect("clean shutdown");
        self.m.flush();
        self.ftl = Some(Driver::mount(dev, self.cfg.clone()).expect("mount after shutdown"));
        self.after_mount();
        let mut dev = self.ftl.take().unwrap().shutdown().unwrap();
        common::assert_check_clean(&mut dev, "after the model's case");
        self.counts
    }

    fn write(&mut self, n: u64, fua: bool) -> Result<(), IoError> {
        let (names, data, md) = self.new_blocks(n);
        let ftl = self.ftl();
        let r = match fua {
            true => ftl.nameless_write_fua(&data, &md),
            false => ftl.nameless_write(&data, &md),
        };
        match r {
            Ok(addrs) => {
                self.answered_write(&names, &addrs, fua);
                Ok(())
            }
            Err(e) => {
                // Refused at admission (no space) or failed: blocks of it
                // may have landed and come back after a cut.
                self.m.limbo.extend(names.iter().map(|&n| (n, None)));
                match e {
                    IoError::NoSpace
                    | IoError::Nameless(NamelessError::MovesUnacknowledged { .. }) => {
                        self.m.refused.extend(names);
                        self.counts.no_space += 1;
                        Ok(())
                    }
                    e => Err(e),
                }
            }
        }
    }

    fn answered_write(&mut self, names: &[(u64, u32)], addrs: &[NamelessAddr], durable: bool) {
        assert_eq!(addrs.len(), names.len(), "an address per block");
        for (&(key, version), &a) in names.iter().zip(addrs) {
            self.check_fresh(a);
            let b = Block {
                key,
                version,
                durable,
                commit: Commit::No,
                replaces: None,
            };
            self.m.live.insert(a, b);
        }
    }

    /// A new block's address was never handed out before.
    fn check_fresh(&self, a: NamelessAddr) {
        let m = &self.m;
        let known = m.live.contains_key(&a)
            || m.freeing.contains_key(&a)
            || m.gone.contains(&a)
            || m.moved.contains_key(&a)
            || m.unmoving.contains_key(&a)
            || m.acked.contains(&a);
        assert!(!known, "{a:?} handed out twice");
    }

    /// Overwrites `blocks` live blocks in one request: each new block
    /// replaces its own old one.
    fn overwrite(&mut self, pick: usize, blocks: u8) -> Result<(), IoError> {
        let olds = self.pick_live(pick, blocks);
        if olds.is_empty() {
            return Ok(());
        }
        let version = self.next_version();
        let keys: Vec<u64> = olds.iter().map(|a| self.m.live[a].key).collect();
        let data: Vec<u8> = keys.iter().flat_map(|&k| self.data(k, version)).collect();
        let md: Vec<u8> = keys.iter().flat_map(|&k| self.md(k, version)).collect();
        match self.ftl().nameless_overwrite(&olds, &data, &md) {
            Ok(new) => {
                assert_eq!(new.len(), olds.len(), "an address per block");
                for ((&old, key), new) in olds.iter().zip(keys).zip(new) {
                    self.answered_overwrite(old, key, version, new);
                }
                Ok(())
            }
            // Refused: the old blocks stay as they were.
            Err(
                IoError::NoSpace | IoError::Nameless(NamelessError::MovesUnacknowledged { .. }),
            ) => {
                self.counts.no_space += 1;
                Ok(())
            }
            Err(e) => {
                for (&old, key) in olds.iter().zip(keys) {
                    self.m.limbo.insert((key, version), Some(old));
                    self.m.overwriting.insert(old, (key, version));
                }
                Err(e)
            }
        }
    }

    /// Up to `n` distinct live blocks, from `pick` on.
    fn pick_live(&self, pick: usize, n: u8) -> Vec<NamelessAddr> {
        let live = self.m.live.len();
        let mut addrs: Vec<NamelessAddr> = (0..usize::from(n).min(live))
            .map(|i| *self.m.live.keys().nth((pick + i * 7) % live).unwrap())
            .collect();
        addrs.sort_unstable();
        addrs.dedup();
        addrs
    }

    fn answered_overwrite(&mut self, old: NamelessAddr, key: u64, version: u32, new: NamelessAddr) {
        self.check_fresh(new);
        self.m.free(old);
        let b = Block {
            key,
            version,
            durable: false,
            commit: Commit::No,
            replaces: Some(old),
        };
        self.m.live.insert(new, b);
    }

    /// The address a target names, and the block the client expects there
    /// (`None`: a typed error is expected, which `read_expect` checks).
    fn target(&self, t: &Target) -> Option<(NamelessAddr, Expect)> {
        let m = &self.m;
        let live = |i| Model::nth(&m.live, i);
        Some(match *t {
            Target::Live(i) => {
                let a = live(i)?;
                (a, Expect::Block(m.live[&a]))
            }
            Target::Freed(i) => {
                let mut dead: BTreeSet<NamelessAddr> = m.gone.clone();
                dead.extend(m.freeing.keys());
                (Model::nth_set(&dead, i)?, Expect::Dead)
            }
            Target::Unborn(i) => {
                // One generation on from a live block's: never handed out
                // at that offset, `NotLive` (above the zone's generation)
                // or, once an in-place job gave the zone a gap generation,
                // `Stale` (step 7: not the block's birth generation). With
                // moves pending the client may hold an old address whose
                // zone was reset since: a generation far on, then, which
                // is `NotLive` always.
                let a = live(i)?;
                let moves = self.ftl.as_ref()?.stats().nameless_remap_entries;
                let on = if moves == 0 { 1 } else { 1 << 20 };
                let unborn = NamelessAddr::new(a.ppa(), a.generation() + on);
                let expect = if on == 1 {
                    Expect::Dead
                } else {
                    Expect::NotLive
                };
                (unborn, expect)
            }
            Target::Outside(k) => {
                let any = live(0).unwrap_or(NamelessAddr::from_u64(1 << 40));
                let a = match k % 4 {
                    0 => NamelessAddr::NONE,
                    1 => NamelessAddr::from_u64(any.to_u64() & 0xFFFF_FFFF), // generation 0
                    2 => NamelessAddr::from_u64(1 << 32),                    // the superblock zone
                    _ => NamelessAddr::from_u64((1 << 32) | 0xFFFF_FFFE),    // past the device
                };
                (a, Expect::OutOfSegment)
            }
            Target::Garbage(x) => {
                let a = NamelessAddr::from_u64(x);
                match (m.live.get(&a), m.moved.get(&a)) {
                    (Some(b), _) => (a, Expect::Block(*b)),
                    (None, Some(new)) => (a, Expect::Block(m.live[new])),
                    _ => (a, Expect::Any),
                }
            }
            Target::Moved(i) => {
                let old = Model::nth(&m.moved, i)?;
                let new = m.moved[&old];
                let b = m.live.get(&new).unwrap_or_else(|| {
                    panic!("model: move {old:?} -> {new:?} of a block not held")
                });
                (old, Expect::Block(*b))
            }
            Target::Acked(i) => (Model::nth_set(&m.acked, i)?, Expect::Dead),
        })
    }

    fn read(&mut self, t: &Target) -> Result<(), IoError> {
        let Some((a, expect)) = self.target(t) else {
            return Ok(());
        };
        let got = self.ftl().nameless_read(a);
        self.read_expect(a, expect, got)
    }

    /// Checks the answer to a read of `a`; a cut's error is passed on.
    fn read_expect(
        &mut self,
        a: NamelessAddr,
        expect: Expect,
        got: Result<(Vec<u8>, Vec<u8>), IoError>,
    ) -> Result<(), IoError> {
        let e = match got {
            Ok((data, md)) => {
                let Expect::Block(b) = expect else {
                    panic!("{a:?} read back, the client expected {expect:?}");
                };
                assert!(data == self.data(b.key, b.version), "data at {a:?} ({b:?})");
                assert_eq!(md, self.md(b.key, b.version), "md at {a:?} ({b:?})");
                self.counts.blocks_checked += 1;
                return Ok(());
            }
            Err(IoError::Nameless(e)) => e,
            Err(e) if is_cut(&e) => return Err(e),
            Err(e) => panic!("read of {a:?} ({expect:?}): {e}"),
        };
        let ok = match expect {
            Expect::Block(b) => panic!("read of {a:?} ({b:?}): {e}"),
            Expect::Dead => matches!(
                e,
                NamelessError::NotLive { .. } | NamelessError::Stale { .. }
            ),
            Expect::NotLive => matches!(e, NamelessError::NotLive { .. }),
            Expect::OutOfSegment => matches!(e, NamelessError::OutOfSegment { .. }),
            Expect::Any => matches!(
                e,
                NamelessError::NotLive { .. }
                    | NamelessError::Stale { .. }
                    | NamelessError::OutOfSegment { .. }
            ),
        };
        assert!(ok, "read of {a:?}: expected {expect:?}, got {e:?}");
        let named = match e {
            NamelessError::NotLive { addr }
            | NamelessError::Stale { addr, .. }
            | NamelessError::OutOfSegment { addr } => addr,
            other => panic!("{other:?}"),
        };
        assert_eq!(named, a, "the error names the address read");
        if matches!(e, NamelessError::Stale { .. }) {
            self.counts.stale_errors += 1;
        }
        self.counts.errors_checked += 1;
        Ok(())
    }

    fn free(&mut self, pick: usize, blocks: u8) -> Result<(), IoError> {
        let addrs = self.pick_live(pick, blocks);
        if addrs.is_empty() {
            return Ok(());
        }
        let r = self.ftl().nameless_free(&addrs);
        // A free takes effect when admitted; a cut may undo it.
        if r.is_ok() || r.as_ref().is_err_and(is_cut) {
            addrs.iter().for_each(|&a| self.m.free(a));
        }
        r
    }

    /// A request the FTL refuses: the error it must give, and nothing
    /// changes (no block written or freed).
    fn bad(&mut self, kind: u8, pick: usize) -> Result<(), IoError> {
        let (bs, mb) = (self.bs, self.mb);
        let live = Model::nth(&self.m.live, pick);
        let mut dead: BTreeSet<NamelessAddr> = self.m.gone.clone();
        dead.extend(self.m.freeing.keys());
        let dead = Model::nth_set(&dead, pick);
        let one = self.data(u64::MAX, 1);
        let before = self.ftl().stats();
        let ftl = self.ftl.as_mut().unwrap();
        let (r, ok): (Result<(), IoError>, ErrorCheck) = match kind % 6 {
            0 => (ftl.nameless_write(&one, &vec![0; mb + 4]).map(drop), |e| {
                matches!(e, IoError::Nameless(NamelessError::MetadataSize { .. }))
            }),
            1 => (
                ftl.nameless_write(&one[..bs / 2], &vec![0; mb]).map(drop),
                |e| matches!(e, IoError::BufferSize { .. }),
            ),
            2 => {
                let Some(a) = live else { return Ok(()) };
                let two = [one.clone(), one.clone()].concat();
                (
                    ftl.nameless_overwrite(&[a], &two, &vec![0; 2 * mb])
                        .map(drop),
                    |e| matches!(e, IoError::Nameless(NamelessError::AddressCount { .. })),
                )
            }
            3 => {
                let Some(a) = live else { return Ok(()) };
                let two = [one.clone(), one.clone()].concat();
                (
                    ftl.nameless_overwrite(&[a, a], &two, &vec![0; 2 * mb])
                        .map(drop),
                    |e| matches!(e, IoError::Nameless(NamelessError::Duplicate { .. })),
                )
            }
            4 => {
                let Some(d) = dead else { return Ok(()) };
                (
                    ftl.nameless_overwrite(&[d], &one, &vec![0; mb]).map(drop),
                    |e| {
                        matches!(
                            e,
                            IoError::Nameless(
                                NamelessError::NotLive { .. } | NamelessError::Stale { .. }
                            )
                        )
                    },
                )
            }
            _ => {
                // A live block beside a freed one: all or none.
                let (Some(a), Some(d)) = (live, dead) else {
                    return Ok(());
                };
                (ftl.nameless_free(&[a, d]), |e| {
                    matches!(
                        e,
                        IoError::Nameless(
                            NamelessError::NotLive { .. } | NamelessError::Stale { .. }
                        )
                    )
                })
            }
        };
        match r {
            Ok(()) => panic!("bad request {kind} accepted"),
            Err(e) if is_cut(&e) => return Err(e),
            Err(e) => assert!(ok(&e), "bad request {kind}: {e:?}"),
        }
        let after = self.ftl().stats();
        assert_eq!(after.nameless_live_blocks, before.nameless_live_blocks);
        assert_eq!(after.nameless_write_blocks, before.nameless_write_blocks);
        assert_eq!(after.nameless_free_blocks, before.nameless_free_blocks);
        self.counts.errors_checked += 1;
        Ok(())
    }

    fn commit(&mut self) -> Result<(), IoError> {
        self.m.commit_sent();
        self.ftl().nameless_commit()?;
        self.m.committed();
        Ok(())
    }

    fn flush(&mut self) -> Result<(), IoError> {
        self.ftl().flush()?;
        self.m.flush();
        Ok(())
    }

    /// Acknowledges a delivered move, or (none pending) a dead address: a
    /// no-op that changes nothing. (Not a live one: it may be the old side
    /// of a move not delivered yet, and acking that would lose the block.)
    fn ack(&mut self, pick: usize) -> Result<(), IoError> {
        let Some(old) = Model::nth(&self.m.moved, pick) else {
            let mut dead = self.m.gone.clone();
            dead.extend(&self.m.acked);
            let Some(a) = Model::nth_set(&dead, pick) else {
                return Ok(());
            };
            let before = self.ftl().stats();
            self.ftl().nameless_ack(&[a])?;
            let after = self.ftl().stats();
            assert_eq!(after.nameless_live_blocks, before.nameless_live_blocks);
            assert!(after.nameless_remap_entries >= before.nameless_remap_entries);
            return Ok(());
        };
        let new = self.m.moved.remove(&old).unwrap();
        self.m.acking.insert(old, new);
        self.ftl().nameless_ack(&[old])?;
        self.m.acking.remove(&old);
        self.m.acked.insert(old);
        self.counts.acks += 1;
        Ok(())
    }

    fn events(&mut self, max: u8) -> Result<(), IoError> {
        let events = match max {
            0 => self.ftl().poll_event().into_iter().collect(),
            max => self.ftl().next_events(usize::from(max))?,
        };
        for e in events {
            match e {
                NamelessEvent::Migrated { old, new, md } => self.on_migrated(old, new, &md),
                other => panic!("{other:?} outside a hand-over"),
            }
        }
        Ok(())
    }

    /// A move delivered: the client repoints its block from `old` to `new`
    /// (a repeat after a mount finds it repointed already).
    fn on_migrated(&mut self, old: NamelessAddr, new: NamelessAddr, md: &[u8]) {
        self.counts.migrated_events += 1;
        let (key, version) = md_names(md);
        if let Some(b) = self.m.live.remove(&old) {
            assert_eq!((b.key, b.version), (key, version), "md of {old:?} moved");
            self.check_fresh(new);
            self.m.live.insert(new, b);
        } else {
            let b = self.m.live.get(&new).unwrap_or_else(|| {
                panic!("move {old:?} -> {new:?} of a block the client does not hold")
            });
            assert_eq!((b.key, b.version), (key, version), "md of {new:?} moved");
        }
        self.m.acking.remove(&old);
        self.m.moved.insert(old, new);
    }

    /// Submits `reqs` together (targets distinct), then waits for every
    /// answer, or (`cut`) turns the loop that many times and cuts the
    /// power with whatever is in flight.
    fn batch(&mut self, reqs: &[Req], cut: Option<u8>) -> Result<(), IoError> {
        let pre_live: Vec<NamelessAddr> = self.m.live.keys().copied().collect();
        let pre_freeing: Vec<NamelessAddr> = self.m.freeing.keys().copied().collect();
        let mut taken = BTreeSet::new();
        let mut overwritten = Vec::new();
        let mut sent: Vec<(u64, Sent)> = Vec::new();
        let mut failed: Option<IoError> = None;
        for r in reqs {
            let Some((request, s)) = self.prepare(r, &mut taken, &mut overwritten) else {
                continue;
            };
            match self.ftl().submit(request) {
                Ok(id) => sent.push((id, s)),
                // Refused at admission: nothing of it is written.
                Err(
                    IoError::NoSpace | IoError::Nameless(NamelessError::MovesUnacknowledged { .. }),
                ) => self.counts.no_space += 1,
                // The overwrite it races landed first: nothing to free.
                Err(IoError::Nameless(NamelessError::NotLive { .. }))
                    if matches!(s, Sent::Free(_, true)) => {}
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let mut answers: BTreeMap<u64, Result<ReplyData, IoError>> = BTreeMap::new();
        match (cut, &failed) {
            (None, None) => {
                for &(id, _) in &sent {
                    match self.ftl().wait_for(id) {
                        Err(e) if is_cut(&e) => {
                            failed = Some(e);
                            break;
                        }
                        r => answers.insert(id, r),
                    };
                }
            }
            (Some(turns), None) => {
                for _ in 0..turns {
                    if self.ftl().turn().is_err() {
                        break;
                    }
                }
            }
            _ => {}
        }
        let ftl = self.ftl();
        while let Some(reply) = ftl.take_reply() {
            answers.entry(reply.id).or_insert(reply.result);
        }
        if cut.is_some() {
            self.ftl().backend_mut().power_cut();
        }
        self.answered_batch(sent, answers, &pre_live, &pre_freeing);
        match (cut, failed) {
            (Some(_), _) => {
                self.crash(if self.armed { self.mount_cut } else { None });
                Ok(())
            }
            (None, Some(e)) => Err(e),
            (None, None) => Ok(()),
        }
    }

    /// The request of `r`, its targets kept distinct from the batch's
    /// others.
    fn prepare(
        &mut self,
        r: &Req,
        taken: &mut BTreeSet<NamelessAddr>,
        overwritten: &mut Vec<NamelessAddr>,
    ) -> Option<(Request, Sent)> {
        fn pick_free(
            m: &Model,
            taken: &mut BTreeSet<NamelessAddr>,
            pick: usize,
        ) -> Option<NamelessAddr> {
            let a = Model::nth(&m.live, pick)?;
            taken.insert(a).then_some(a)
        }
        Some(match *r {
            Req::Write { blocks } => {
                let (names, data, md) = self.new_blocks(u64::from(blocks));
                (
                    nameless_request(None, &data, &md, false),
                    Sent::Write(names),
                )
            }
            Req::Overwrite { pick } => {
                let old = pick_free(&self.m, taken, pick)?;
                overwritten.push(old);
                let key = self.m.live[&old].key;
                let version = self.next_version();
                let (data, md) = (self.data(key, version), self.md(key, version));
                let request = nameless_request(Some(&[old]), &data, &md, false);
                (request, Sent::Overwrite { old, key, version })
            }
            Req::Free { pick } => {
                let a = pick_free(&self.m, taken, pick)?;
                let request = Request::NamelessFree { addrs: vec![a] };
                (request, Sent::Free(a, false))
            }
            Req::FreeRacing => {
                let a = overwritten.pop()?;
                (
                    Request::NamelessFree { addrs: vec![a] },
                    Sent::Free(a, true),
                )
            }
            Req::Read { pick } => {
                let a = Model::nth(&self.m.live, pick).filter(|a| !taken.contains(a))?;
                (
                    Request::NamelessRead { addr: a },
                    Sent::Read(a, self.m.live[&a]),
                )
            }
            // One commit per batch: the model resolves one unanswered
            // commit after a cut (all it covers, or nothing).
            Req::Commit => {
                taken.insert(NamelessAddr::NONE).then_some(())?;
                (Request::NamelessCommit, Sent::Commit)
            }
            Req::Flush => (Request::Flush, Sent::Flush),
        })
    }

    /// Applies a batch's answers in submission order; a request without
    /// an answer may or may not have taken effect.
    fn answered_batch(
        &mut self,
        sent: Vec<(u64, Sent)>,
        mut answers: BTreeMap<u64, Result<ReplyData, IoError>>,
        pre_live: &[NamelessAddr],
        pre_freeing: &[NamelessAddr],
    ) {
        let mut unanswered_write = false;
        for (id, s) in sent {
            // An answer that is the cut's error says nothing either.
            let answer = answers
                .remove(&id)
                .filter(|r| !r.as_ref().is_err_and(is_cut));
            match (s, answer) {
                (Sent::Write(names), Some(Ok(ReplyData::Addrs(addrs)))) => {
                    self.answered_write(&names, &addrs, false)
                }
                (Sent::Write(names), answer) => {
                    unanswered_write |= answer.is_none();
                    if answer.is_some() {
                        self.m.refused.extend(names.iter().copied());
                    }
                    self.m.limbo.extend(names.into_iter().map(|n| (n, None)));
                }
                (Sent::Overwrite { old, key, version }, Some(Ok(ReplyData::Addrs(a)))) => {
                    self.answered_overwrite(old, key, version, a[0])
                }
                (Sent::Overwrite { old, key, version }, answer) => {
                    unanswered_write |= answer.is_none();
                    self.m.limbo.insert((key, version), Some(old));
                    self.m.overwriting.insert(old, (key, version));
                }
                (Sent::Free(a, racing), r) => {
                    assert!(
                        r.as_ref().is_none_or(|r| r.is_ok()),
                        "free of live {a:?}: {r:?}"
                    );
                    if racing {
                        // Freed by the free or by the overwrite's block:
                        // a cut may keep either, both or neither.
                        self.m.raced.insert(a);
                    }
                    if self.m.live.contains_key(&a) {
                        self.m.free(a);
                    }
                }
                (Sent::Read(a, b), Some(r)) => {
                    let got = r.map(|d| match d {
                        ReplyData::NamelessBlock { data, md } => (data, md),
                        other => panic!("a read answered {other:?}"),
                    });
                    let _ = self.read_expect(a, Expect::Block(b), got);
                }
                (Sent::Read(..), None) => {}
                (Sent::Commit, Some(Ok(_))) => {
                    assert!(
                        !unanswered_write,
                        "a commit answered before a write it covers"
                    );
                    self.m.committed();
                }
                (Sent::Commit, _) => self.m.commit_sent(),
                (Sent::Flush, Some(Ok(_))) => {
                    // It covers what was answered before the batch.
                    // (A block it made durable may have been freed or
                    // replaced by the batch since.)
                    for a in pre_live {
                        let m = &mut self.m;
                        if let Some(b) = m.live.get_mut(a).or(m.freeing.get_mut(a)) {
                            b.durable = true;
                            b.replaces = None;
                        }
                    }
                    for a in pre_freeing {
                        self.m.free_done(*a);
                    }
                }
                (Sent::Flush, _) => {}
            }
        }
    }

    /// Arms a cut `after_commands` device commands from now, or (0) cuts
    /// now.
    fn cut(&mut self, after_commands: u16, mount_cut: Option<u8>) {
        if after_commands == 0 {
            if self.armed {
                self.crash(self.mount_cut);
            }
            self.crash(mount_cut);
            return;
        }
        self.mount_cut = mount_cut;
        let seed = self.rng.next_u64();
        self.ftl().backend_mut().set_faults(Faults {
            seed,
            power_cut: PowerCut::AfterSubmits(u64::from(after_commands)),
            shuffle_completions: true,
            ..Faults::default()
        });
        self.armed = true;
    }

    /// The power goes (if it has not), comes back, and the volume mounts,
    /// the mount itself cut first when `mount_cut` says so.
    fn crash(&mut self, mount_cut: Option<u8>) {
        self.armed = false;
        self.counts.cuts += 1;
        let s = self.ftl().stats();
        self.counts.inplace_by_gc += s.nameless_inplace_gc_victims;
        self.counts.gap_fills += s.nameless_gap_fill_blocks;
        self.counts.overwrite_fills += s.nameless_overwrite_fill_blocks;
        let mut dev = self.ftl.take().expect("mounted").into_backend();
        dev.power_cut();
        dev.power_on().unwrap();
        if let Some(after) = mount_cut {
            self.cut_during_mount(&mut dev, u64::from(after) + 1);
        }
        dev.set_faults(Faults {
            seed: self.rng.next_u64(),
            shuffle_completions: true,
            ..Faults::default()
        });
        let ftl = Driver::mount(dev, self.cfg.clone()).expect("mount after a cut");
        self.ftl = Some(ftl);
        self.after_mount();
    }

    /// A mount cut after `after` device commands (replay, the hand-over's
    /// reads, the mount's checkpoint); if it finished, the client takes a
    /// few events before the power goes again: they come again.
    fn cut_during_mount(&mut self, dev: &mut SimDevice, after: u64) {
        dev.set_faults(Faults {
            seed: self.rng.next_u64(),
            power_cut: PowerCut::AfterSubmits(after),
            ..Faults::default()
        });
        match Driver::mount(&mut *dev, self.cfg.clone()) {
            Ok(mut ftl) => {
                let _ = ftl.next_events(4);
            }
            Err(MountError::Device { .. }) => self.counts.mount_cuts += 1,
            Err(e) => panic!("a mount cut short by a power cut reported: {e}"),
        }
        dev.power_cut();
        dev.power_on().unwrap();
    }

    /// Every event until none can come, by `next_events` of random sizes
    /// and `poll_event`: the hand-over by address, and the moves.
    fn drain_events(&mut self) -> (HandOver, Moves) {
        let (mut unrecorded, mut moves) = (BTreeMap::new(), Vec::new());
        loop {
            let events = match self.rng.below(4) {
                0 => {
                    self.ftl().settle().unwrap();
                    match self.ftl().poll_event() {
                        Some(e) => vec![e],
                        None => self.ftl().next_events(1).unwrap(),
                    }
                }
                n => self.ftl().next_events(1 << (2 * n)).unwrap(),
            };
            if events.is_empty() {
                return (unrecorded, moves);
            }
            for e in events {
                match e {
                    NamelessEvent::Unrecorded { addr, md } => {
                        let again = unrecorded.insert(addr, md);
                        assert!(again.is_none(), "{addr:?} handed over twice");
                    }
                    NamelessEvent::Migrated { old, new, md } => moves.push((old, new, md)),
                    other => panic!("unknown event {other:?}"),
                }
            }
        }
    }

    /// Whether `a` holds `b` (exactly: data and md), or holds no live
    /// block; anything else fails.
    fn holds(&mut self, a: NamelessAddr, b: &Block) -> bool {
        let got = self.ftl().nameless_read(a);
        match got {
            Ok(_) => {
                self.read_expect(a, Expect::Block(*b), got).unwrap();
                true
            }
            Err(IoError::Nameless(NamelessError::NotLive { .. } | NamelessError::Stale { .. })) => {
                false
            }
            Err(e) => panic!("read of {a:?} ({b:?}) after a mount: {e}"),
        }
    }

    /// After a mount: the hand-over, every block the client knows, the
    /// commit a cut left unanswered, the unanswered writes' blocks, the
    /// moves, and nothing leaked (module doc).
    fn after_mount(&mut self) {
        let (unrecorded, moves) = self.drain_events();
        self.counts.handed_over += unrecorded.len() as u64;
        // Each move the FTL has not had acknowledged comes again; one made
        // after the hand-over named its block names the old address, and
        // the hand-over is taken to name the new one.
        let to: Alias = moves.iter().map(|(old, new, _)| (*old, *new)).collect();
        assert_eq!(to.len(), moves.len(), "a move twice: {moves:?}");
        let then_moved = unrecorded.keys().filter(|a| to.contains_key(a)).count();
        self.counts.handed_over_then_moved += then_moved as u64;
        let unrecorded: HandOver = unrecorded
            .into_iter()
            .map(|(a, md)| (now(&to, a), md))
            .collect();
        let mut known: Vec<(NamelessAddr, Block, bool)> = Vec::new();
        known.extend(self.m.live.iter().map(|(&a, &b)| (a, b, false)));
        known.extend(self.m.freeing.iter().map(|(&a, &b)| (a, b, true)));
        // (An old address reaches its block until the ack.)
        let here: BTreeMap<NamelessAddr, bool> = known
            .iter()
            .map(|&(a, b, _)| (a, self.holds(a, &b)))
            .collect();
        for a in self.m.gone.clone() {
            assert!(!unrecorded.contains_key(&a), "freed {a:?} handed over");
            assert!(!to.contains_key(&a), "freed {a:?} moved");
            let got = self.ftl().nameless_read(a);
            self.read_expect(a, Expect::Dead, got).unwrap();
        }
        self.check_moves_again(&to, &here);
        let done = self.commit_done(&known, &here, &unrecorded, &to);
        self.check_known(&known, &here, &unrecorded, &to, done);
        let orphans = self.check_orphans(&known, &here, &unrecorded, &to);
        self.check_unanswered_overwrites(&here, &orphans);
        let lost = self.m.limbo.keys().filter(|n| !self.m.refused.contains(n));
        self.counts.in_flight_lost += lost.count() as u64;
        self.rebuild(known, &here, done, orphans, moves);
        self.check_no_leak();
    }

    /// Every move the client took and did not see acknowledged comes again
    /// after a mount, unless the client freed its block and the free
    /// survived; a move whose ack the cut left unanswered may.
    fn check_moves_again(&mut self, to: &Alias, here: &BTreeMap<NamelessAddr, bool>) {
        for (old, new) in &self.m.moved {
            assert_eq!(to.get(old), Some(new), "move {old:?} -> {new:?} not again");
        }
        for (old, new) in &self.m.unmoving {
            let back = here.get(new) == Some(&true);
            let again = to.get(old);
            match back {
                true => {
                    assert_eq!(
                        again,
                        Some(new),
                        "move {old:?} -> {new:?} (free lost) not again"
                    );
                    self.counts.moves_of_lost_frees += 1;
                }
                false => assert_eq!(
                    again, None,
                    "move {old:?} -> {new:?} of a freed block again"
                ),
            }
        }
        self.counts.moves_again += self.m.moved.len() as u64;
    }

    fn ack_now(&mut self, old: NamelessAddr) {
        self.ftl().nameless_ack(&[old]).unwrap();
        self.m.moved.remove(&old);
        self.m.acked.insert(old);
        self.counts.acks += 1;
    }

    /// Whether the commit a cut left unanswered happened: a block it would
    /// cover survives and is not handed over. (All or none is checked by
    /// `check_known`.)
    fn commit_done(
        &mut self,
        known: &[(NamelessAddr, Block, bool)],
        here: &BTreeMap<NamelessAddr, bool>,
        unrecorded: &HandOver,
        to: &Alias,
    ) -> bool {
        let Some(frees) = self.m.maybe_commit_frees.take() else {
            return false;
        };
        let done = known.iter().any(|&(a, b, _)| {
            b.commit == Commit::Maybe && here[&a] && !unrecorded.contains_key(&now(to, a))
        });
        if done {
            self.counts.commits_done += 1;
            for a in &frees {
                let back = here.get(a).copied().unwrap_or(false);
                assert!(!back, "{a:?} freed before a commit that happened is back");
            }
        } else {
            self.counts.commits_lost += 1;
        }
        done
    }

    /// The blocks the client knows: durable ones survive, those a commit
    /// does not cover are handed over with their md exactly if they
    /// survive, and an overwrite keeps both of its halves or neither.
    fn check_known(
        &mut self,
        known: &[(NamelessAddr, Block, bool)],
        here: &BTreeMap<NamelessAddr, bool>,
        unrecorded: &HandOver,
        to: &Alias,
        done: bool,
    ) {
        for &(a, b, freed) in known {
            let h = here[&a];
            let commit = match b.commit {
                Commit::Maybe if done => Commit::Yes,
                Commit::Maybe => Commit::No,
                c => c,
            };
            let durable = b.durable || (b.commit == Commit::Maybe && done);
            let must = !freed && durable && !self.m.overwriting.contains_key(&a);
            assert!(h || !must, "durable block {a:?} ({b:?}) lost");
            match (h, commit, unrecorded.get(&now(to, a))) {
                (false, _, Some(_)) => panic!("{a:?} ({b:?}) handed over, not live"),
                (true, Commit::Yes, Some(_)) => panic!("committed {a:?} ({b:?}) handed over"),
                (true, Commit::No, None) => panic!("{a:?} ({b:?}) not handed over"),
                (true, Commit::No, Some(md)) => {
                    assert_eq!(md, &self.md(b.key, b.version), "md of {a:?} handed over")
                }
                _ => {}
            }
            let Some(old) = b.replaces else { continue };
            let old_here = *here.get(&old).unwrap_or_else(|| {
                panic!("{a:?} ({b:?}) replaced {old:?}, which the client lost track of")
            });
            assert!(!(h && old_here), "overwrite {old:?} -> {a:?}: both live");
            let old_durable = self
                .m
                .freeing
                .get(&old)
                .expect("replaced, being freed")
                .durable;
            let lost = !h && !freed && !self.m.overwriting.contains_key(&a);
            let old_durable = old_durable && !self.m.raced.contains(&old);
            assert!(
                !(lost && old_durable && !old_here),
                "overwrite {old:?} -> {a:?}: both gone"
            );
        }
    }

    /// The handed-over blocks the client never held: each is a block of a
    /// write the cut left unanswered, whole, with its md, once; an
    /// overwrite's freed the block it replaces. Returns them, and for an
    /// overwrite's the block it replaced.
    fn check_orphans(
        &mut self,
        known: &[(NamelessAddr, Block, bool)],
        here: &BTreeMap<NamelessAddr, bool>,
        unrecorded: &HandOver,
        to: &Alias,
    ) -> Vec<Orphan> {
        let held: BTreeSet<NamelessAddr> = known.iter().map(|k| now(to, k.0)).collect();
        let mut orphans = Vec::new();
        for (&a, md) in unrecorded {
            if held.contains(&a) {
                continue;
            }
            assert!(!self.m.gone.contains(&a), "freed {a:?} handed over");
            let (key, version) = md_names(md);
            assert_eq!(md, &self.md(key, version), "md of {a:?} handed over");
            let origin = self.m.limbo.remove(&(key, version)).unwrap_or_else(|| {
                panic!("{a:?} handed over with md of ({key}, {version}), which no unanswered write made")
            });
            let b = Block {
                key,
                version,
                durable: true,
                commit: Commit::No,
                replaces: None,
            };
            assert!(self.holds(a, &b), "{a:?} handed over and not live");
            if let Some(old) = origin {
                assert!(
                    !here[&old],
                    "unanswered overwrite {old:?} -> {a:?}: both live"
                );
            }
            orphans.push((a, b, origin));
        }
        orphans
    }

    /// A durable block an unanswered overwrite named is gone only if the
    /// overwrite's new block came back.
    fn check_unanswered_overwrites(&self, here: &BTreeMap<NamelessAddr, bool>, orphans: &[Orphan]) {
        let replaced: BTreeSet<NamelessAddr> = orphans.iter().filter_map(|o| o.2).collect();
        for (old, new) in &self.m.overwriting {
            let durable = self.m.live.get(old).is_some_and(|b| b.durable);
            assert!(
                here.get(old) == Some(&true) || !durable || replaced.contains(old),
                "durable {old:?} gone, its unanswered overwrite {new:?} not handed over"
            );
        }
    }

    /// The model after the checks: what survived is durable; the client
    /// follows the moves (acking some now) and keeps some orphans, freeing
    /// the rest.
    fn rebuild(
        &mut self,
        known: Vec<(NamelessAddr, Block, bool)>,
        here: &BTreeMap<NamelessAddr, bool>,
        done: bool,
        orphans: Vec<Orphan>,
        moves: Moves,
    ) {
        self.m.live.clear();
        self.m.freeing.clear();
        for (a, b, _) in known {
            if !here[&a] {
                self.m.gone.insert(a);
                continue;
            }
            let commit = match b.commit {
                Commit::Maybe if done => Commit::Yes,
                Commit::Maybe => Commit::No,
                c => c,
            };
            let b = Block {
                durable: true,
                replaces: None,
                commit,
                ..b
            };
            self.m.live.insert(a, b);
        }
        for &(a, b, _) in &orphans {
            self.m.live.insert(a, b);
        }
        // The moves: all of them now (every entry is undelivered after a
        // mount); an old address that did not come again is dead.
        let before: Vec<NamelessAddr> = (self.m.moved.keys())
            .chain(self.m.unmoving.keys())
            .chain(self.m.acking.keys())
            .copied()
            .collect();
        self.m.moved.clear();
        self.m.unmoving.clear();
        self.m.acking.clear();
        for (old, new, md) in moves {
            self.on_migrated(old, new, &md);
            if self.rng.below(2) == 0 {
                self.ack_now(old);
            }
        }
        for old in before {
            if !self.m.moved.contains_key(&old) {
                self.m.acked.insert(old);
            }
        }
        for (a, _, _) in orphans {
            if self.rng.below(2) == 0 {
                self.counts.orphans_kept += 1;
            } else {
                self.ftl().nameless_free(&[a]).unwrap();
                self.m.free(a);
                self.counts.orphans_freed += 1;
            }
        }
        self.m.limbo.clear();
        self.m.refused.clear();
        self.m.raced.clear();
        self.m.overwriting.clear();
    }

    /// The FTL holds exactly the blocks the client holds (moves the client
    /// has not taken yet keep their blocks' count and commit state).
    fn check_no_leak(&mut self) {
        let s = self.ftl().stats();
        let live = self.m.live.len() as u64;
        assert_eq!(
            s.nameless_live_blocks, live,
            "live nameless blocks the client does not hold (leaked)"
        );
        let uncommitted = self.m.live.values().filter(|b| b.commit == Commit::No);
        assert_eq!(s.nameless_uncommitted_blocks, uncommitted.count() as u64);
        assert!(
            s.nameless_remap_entries >= self.m.moved.len() as u64,
            "{} remap entries, {} moves taken and not acknowledged",
            s.nameless_remap_entries,
            self.m.moved.len()
        );
    }
}

/// Moves that came after a mount: old address -> new.
type Alias = BTreeMap<NamelessAddr, NamelessAddr>;

/// Where the block the client knows at `a` is now.
fn now(to: &Alias, a: NamelessAddr) -> NamelessAddr {
    to.get(&a).copied().unwrap_or(a)
}

/// Whether an error is the one a bad request must get.
type ErrorCheck = fn(&IoError) -> bool;

/// The hand-over after a mount: address -> md.
type HandOver = BTreeMap<NamelessAddr, Vec<u8>>;

/// Moves delivered: (old, new, md).
type Moves = Vec<(NamelessAddr, NamelessAddr, Vec<u8>)>;

/// A handed-over block the client never held, and the block its
/// overwrite replaced.
type Orphan = (NamelessAddr, Block, Option<NamelessAddr>);

/// What the client expects a read to answer.
#[derive(Clone, Copy, Debug)]
enum Expect {
    Block(Block),
    /// Freed: not live, or stale once its zone was reset.
    Dead,
    /// Never handed out.
    NotLive,
    OutOfSegment,
    /// Garbage: any of the address errors.
    Any,
}

fn target() -> impl Strategy<Value = Target> {
    let i = any::<usize>();
    prop_oneof![
        8 => i.prop_map(Target::Live),
        3 => i.prop_map(Target::Freed),
        2 => i.prop_map(Target::Unborn),
        2 => any::<u8>().prop_map(Target::Outside),
        2 => any::<u64>().prop_map(Target::Garbage),
        1 => i.prop_map(Target::Moved),
        1 => i.prop_map(Target::Acked),
    ]
}

fn req() -> impl Strategy<Value = Req> {
    let i = any::<usize>();
    prop_oneof![
        4 => (1u8..4).prop_map(|blocks| Req::Write { blocks }),
        2 => i.prop_map(|pick| Req::Overwrite { pick }),
        2 => i.prop_map(|pick| Req::Free { pick }),
        1 => Just(Req::FreeRacing),
        1 => i.prop_map(|pick| Req::Read { pick }),
        1 => Just(Req::Commit),
        1 => Just(Req::Flush),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let i = any::<usize>();
    prop_oneof![
        25 => (1u8..5, prop::bool::weighted(0.1)).prop_map(|(blocks, fua)| Op::Write { blocks, fua }),
        // Big writes fill the volume: no space, nameless zones emptied
        // and reset (stale addresses).
        2 => (32u8..=160).prop_map(|blocks| Op::Write { blocks, fua: false }),
        7 => i.prop_map(|pick| Op::Overwrite { pick, blocks: 1 }),
        3 => (i, 2u8..9).prop_map(|(pick, blocks)| Op::Overwrite { pick, blocks }),
        12 => target().prop_map(|target| Op::Read { target }),
        10 => (i, 1u8..4).prop_map(|(pick, blocks)| Op::Free { pick, blocks }),
        3 => (any::<u8>(), i).prop_map(|(kind, pick)| Op::Bad { kind, pick }),
        5 => Just(Op::Commit),
        2 => i.prop_map(|pick| Op::Ack { pick }),
        2 => (0u8..4).prop_map(|max| Op::Events { max }),
        6 => Just(Op::Flush),
        2 => Just(Op::Settle),
        2 => i.prop_map(|pick| Op::InPlace { pick }),
        5 => (prop::collection::vec(req(), 1..6), prop::option::weighted(0.6, 0u8..6))
            .prop_map(|(reqs, cut)| Op::Batch { reqs, cut }),
        3 => (0u16..120, prop::option::weighted(0.4, 0u8..24))
            .prop_map(|(after_commands, mount_cut)| Op::Cut { after_commands, mount_cut }),
    ]
}

/// The property test's seed unless `PROPTEST_RNG_SEED` gives another.
const DEFAULT_RNG_SEED: u64 = 0x6E61_6D65_6C65_7373;

/// Cases of the property test by default (seconds in release on 2 cores).
const DEFAULT_CASES: u32 = 256;

/// Cases of the property test: `PROPTEST_CASES`, else [`DEFAULT_CASES`].
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_CASES)
}

/// The rig's FTL settings, with no checkpoint but the mount's when
/// `long_replay`.
fn config(long_replay: bool) -> FtlConfig {
    let mut cfg = ftl_config();
    if long_replay {
        cfg.checkpoint_interval_blocks = u64::MAX;
    }
    cfg
}

/// Random op sequences against the model: [`cases`] of them from a fixed
/// seed (module doc, "Replay"). Over the default cases the paths that
/// matter are taken (asserted at the end).
#[test]
fn nameless_api_matches_the_model_across_power_cuts() {
    model_cases("nameless_api_matches_the_model_across_power_cuts", true);
}

/// The same cases in band (md in the log and in md groups).
#[test]
fn nameless_api_matches_the_model_across_power_cuts_in_band() {
    model_cases(
        "nameless_api_matches_the_model_across_power_cuts_in_band",
        false,
    );
}

fn model_cases(test: &str, oob: bool) {
    use proptest::test_runner::{FileFailurePersistence, RngSeed, TestRunner};
    // A fixed seed unless PROPTEST_RNG_SEED gives one: the same cases on
    // every run, so a failure replays.
    let defaults = ProptestConfig::default();
    let rng_seed = match defaults.rng_seed {
        RngSeed::Random => RngSeed::Fixed(DEFAULT_RNG_SEED),
        fixed => fixed,
    };
    let config = ProptestConfig {
        cases: cases(),
        rng_seed,
        source_file: Some(file!()),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..defaults
    };
    let case = (
        any::<u64>(),
        any::<bool>(),
        prop::bool::weighted(0.3),
        prop::collection::vec(op(), 1..300),
    );
    let total = std::sync::Mutex::new(Counts::default());
    let mut runner = TestRunner::new(config.clone());
    let result = runner.run(&case, |(seed, timing, long_replay, ops)| {
        let mut cfg = self::config(long_replay);
        if seed % 4 == 1 {
            // Migrations stop at once: GC collects in place (both tag modes).
            cfg.nameless_remap_entries = 1;
        }
        let mut rig = Rig::new_in(seed, timing, cfg, oob);
        for op in &ops {
            rig.apply(op);
        }
        let counts = rig.finish();
        // (A failing case poisons nothing the next one needs.)
        total.lock().unwrap_or_else(|e| e.into_inner()).add(&counts);
        Ok(())
    });
    if let Err(e) = result {
        let seed = match config.rng_seed {
            RngSeed::Fixed(s) => s.to_string(),
            RngSeed::Random => "random".to_string(),
        };
        panic!(
            "{e}\nreplay: PROPTEST_RNG_SEED={seed} PROPTEST_CASES={} cargo test --release \
             --test nameless_model {test} -- --exact \
             (the regressions file runs the shrunk case first)",
            config.cases
        );
    }
    let c = *total.lock().unwrap_or_else(|e| e.into_inner());
    eprintln!("{test}: {} cases, {c:?}", config.cases);
    if config.cases >= DEFAULT_CASES {
        assert!(c.cuts > 0 && c.mount_cuts > 0, "{c:?}");
        assert!(
            c.handed_over > 0 && c.orphans_kept > 0 && c.orphans_freed > 0,
            "{c:?}"
        );
        assert!(
            c.in_flight_lost > 0 && c.commits_done > 0 && c.commits_lost > 0,
            "{c:?}"
        );
        assert!(c.stale_errors > 0 && c.no_space > 0, "{c:?}");
        // GC pressure: moves taken, and again after a mount.
        assert!(c.migrated_events > 0 && c.moves_again > 0, "{c:?}");
        if oob {
            assert!(c.gap_fills > 0, "{c:?}");
        }
        // Overwrites among the gap fills, in both tag modes.
        assert!(c.overwrite_fills > 0, "{c:?}");
    }
}

/// Runs `case` on the seeds (`ZFTL_SEED`, `ZFTL_SEEDS`, else 0..`seeds`),
/// printing the replay command of a failing one; the counts summed.
fn crash_point(test: &str, seeds: u64, mut case: impl FnMut(u64) -> Counts) -> Counts {
    let mut total = Counts::default();
    let list = seeds_to_run(0..seeds);
    run_listed_seeds(test, &list, |seed| {
        total.add(&case(seed));
        Coverage::default()
    });
    eprintln!("{test}: {} seeds, {total:?}", list.len());
    total
}

fn writes(n: u8) -> Vec<Op> {
    (0..n)
        .map(|i| Op::Write {
            blocks: 1 + i % 4,
            fua: i % 5 == 4,
        })
        .collect()
}

const CUT_NOW: Op = Op::Cut {
    after_commands: 0,
    mount_cut: None,
};

/// §6.7, "after a data block and its metadata": blocks written (md in the
/// same OOB), answered, some flushed, then the power goes with nothing in
/// flight. Every block survives and is handed over with its md.
#[test]
fn crash_point_after_data_and_md() {
    let c = crash_point("crash_point_after_data_and_md", 12, |seed| {
        // Odd seeds in band.
        let mut rig = Rig::new_in(seed, seed % 4 < 2, config(seed % 3 == 0), seed % 2 == 0);
        let mut ops = writes(6);
        ops.push(Op::Flush);
        ops.extend(writes(3));
        ops.push(CUT_NOW);
        for op in &ops {
            rig.apply(op);
        }
        let held = rig.m.live.len() as u64;
        assert_eq!(rig.counts.handed_over, held, "every block handed over");
        rig.finish()
    });
    assert!(c.handed_over > 0, "{c:?}");
}

/// §6.7, "after a data block before its metadata": with md in OOB the two
/// land in one program, so the point is a write in flight: cut at each
/// device command of a write of 4 blocks, and with appends in flight
/// after a few loop turns. Each block comes back whole with its md
/// (handed over) or not at all.
#[test]
fn crash_point_data_before_md() {
    let c = crash_point("crash_point_data_before_md", 8, |seed| {
        let mut counts = Counts::default();
        for after in 1..=6u16 {
            let oob = seed % 2 == 0; // odd seeds in band
            let mut rig = Rig::new_in(seed * 16 + u64::from(after), true, config(false), oob);
            let mut ops = writes(3);
            ops.push(Op::Flush);
            ops.push(Op::Cut {
                after_commands: after,
                mount_cut: None,
            });
            ops.push(Op::Write {
                blocks: 4,
                fua: false,
            });
            for op in &ops {
                rig.apply(op);
            }
            counts.add(&rig.finish());
        }
        for turns in 0..4u8 {
            let oob = seed % 2 == 0;
            let mut rig = Rig::new_in(seed * 16 + 8 + u64::from(turns), true, config(false), oob);
            rig.apply(&Op::Write {
                blocks: 2,
                fua: false,
            });
            rig.apply(&Op::Batch {
                reqs: vec![Req::Write { blocks: 3 }, Req::Write { blocks: 2 }],
                cut: Some(turns),
            });
            counts.add(&rig.finish());
        }
        counts
    });
    let orphans = c.orphans_kept + c.orphans_freed;
    assert!(orphans > 0 && c.in_flight_lost > 0, "{c:?}");
}

/// §6.7, "after the metadata was written but before commit": blocks
/// written and flushed, then a commit cut at each of its device commands
/// (0: before it is sent). The commit covers all of them or none: they
/// are all handed over, or none is.
#[test]
fn crash_point_md_written_before_commit() {
    let c = crash_point("crash_point_md_written_before_commit", 6, |seed| {
        let mut counts = Counts::default();
        for after in 0..=8u16 {
            let (oob, timing) = (seed % 4 < 2, seed % 2 == 0); // seeds 2, 3 in band
            let seed = seed * 16 + u64::from(after);
            let mut rig = Rig::new_in(seed, timing, config(false), oob);
            let mut ops = writes(5);
            ops.push(Op::Flush);
            ops.push(Op::Free { pick: 1, blocks: 2 });
            ops.push(Op::Cut {
                after_commands: after,
                mount_cut: None,
            });
            ops.push(Op::Commit);
            for op in &ops {
                rig.apply(op);
            }
            counts.add(&rig.finish());
        }
        counts
    });
    assert!(c.commits_done > 0 && c.commits_lost > 0, "{c:?}");
    assert!(c.handed_over > 0, "{c:?}");
}

/// §6.7, "after a migration before its acknowledgement": half the volume
/// live in nameless blocks freed at random, so GC makes room by migrating
/// the live blocks of partly live zones; the client takes the moves
/// (repoints, acks some, reads some old addresses), frees a few moved
/// blocks, then the power goes with moves taken and not acknowledged, at
/// once or during a commit (which would acknowledge them). After the
/// mount each comes again (also a freed block's, if the cut undid the
/// free), old addresses still reach the blocks until acked, then are
/// stale.
#[test]
fn crash_point_after_migration_before_ack() {
    crash_point_after_migration_before_ack_in("crash_point_after_migration_before_ack", true);
}

/// The same with md in band: a move's record is its notes and its entry
/// in the destination's md group.
#[test]
fn crash_point_after_migration_before_ack_in_band() {
    crash_point_after_migration_before_ack_in(
        "crash_point_after_migration_before_ack_in_band",
        false,
    );
}

fn crash_point_after_migration_before_ack_in(test: &str, oob: bool) {
    let c = crash_point(test, 4, |seed| {
        let mut rig = Rig::new_in(seed, seed % 2 == 0, config(false), oob);
        let half = rig.ftl().logical_blocks() / 2;
        let mut rng = Rng::new(seed ^ 0x4D49_4752);
        for round in 0..8u64 {
            for i in 0..64usize {
                rig.apply(&Op::Write {
                    blocks: 4,
                    fua: false,
                });
                while rig.m.live.len() as u64 > half {
                    let pick = rng.next_u64() as usize;
                    rig.apply(&Op::Free { pick, blocks: 1 });
                }
                if i % 8 == 7 {
                    rig.apply(&Op::Events { max: 16 });
                    rig.apply(&Op::Read {
                        target: Target::Moved(i),
                    });
                    if rng.below(3) == 0 {
                        let pick = rng.next_u64() as usize;
                        rig.apply(&Op::Ack { pick });
                    }
                }
            }
            rig.apply(&Op::Events { max: 64 });
            rig.apply(&Op::Flush);
            // Frees of moved blocks the cut may undo (then their moves
            // come again with them).
            for _ in 0..4 {
                let news: Vec<NamelessAddr> = rig.m.moved.values().copied().collect();
                if news.is_empty() {
                    break;
                }
                let new = news[rng.below(news.len() as u64) as usize];
                let pick = rig.m.live.keys().position(|&a| a == new).unwrap();
                rig.apply(&Op::Free { pick, blocks: 1 });
            }
            rig.apply(&Op::Cut {
                after_commands: (round % 4) as u16,
                mount_cut: None,
            });
            rig.apply(&Op::Commit);
        }
        rig.finish()
    });
    assert!(c.migrated_events > 0, "no block was migrated: {c:?}");
    assert!(c.moves_again > 0 && c.acks > 0, "{c:?}");
    assert!(c.moves_of_lost_frees > 0, "{c:?}");
    assert!(c.commits_done > 0 && c.commits_lost > 0, "{c:?}");
}

/// Found by the property test (helper-41, issue 31; fixed): an
/// overwrite's free of the block it replaces is recorded only in the new
/// block's tag (its link); a reset of the new blocks' zone once they were
/// freed erased that tag, and replay after a crash found the replaced
/// blocks live again (the checkpoint's bitmap), failing the mount with
/// `Damaged("nameless zone .. is reset with .. live blocks")`. An emptied
/// nameless zone now waits for a committed checkpoint younger than its
/// newest block before its reset (design.md, "Choosing a victim"): no
/// crash before that checkpoint brings the blocks back, nor one after it
/// and the resets.
#[test]
fn a_reset_of_an_emptied_zone_keeps_the_frees_its_overwrites_made() {
    let mut rig = Rig::new(1, false, config(true));
    let ftl = rig.ftl.as_mut().unwrap();
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let blocks = |v: u32| -> (Vec<u8>, Vec<u8>) {
        let data = (0..64).flat_map(|k| pattern(k, v, bs)).collect();
        let md = (0..64).flat_map(|k| md_of(k, v, mb)).collect();
        (data, md)
    };
    // Two zones of blocks, in a checkpoint.
    let (data, md) = blocks(1);
    let xs = ftl.nameless_write(&data, &md).unwrap();
    ftl.nameless_commit().unwrap();
    ftl.checkpoint().unwrap();
    // Overwritten (the frees are in the new blocks' tags), then the new
    // blocks freed and more written, so zones are emptied.
    let (data2, md2) = blocks(2);
    let ys = ftl.nameless_overwrite(&xs, &data2, &md2).unwrap();
    ftl.settle().unwrap();
    let zs = ftl.nameless_write(&data, &md).unwrap();
    ftl.nameless_free(&ys).unwrap();
    ftl.settle().unwrap();
    ftl.nameless_free(&zs).unwrap();
    ftl.flush().unwrap();
    ftl.settle().unwrap();
    assert_eq!(ftl.stats().nameless_live_blocks, 0);
    // A crash before any checkpoint, and a mount (which writes one); then
    // the emptied zones are reset, and another crash.
    let mut ftl = crash_and_mount(&mut rig, &xs);
    ftl.settle().unwrap();
    let resets = ftl.stats().erases;
    assert!(
        resets >= 2,
        "{resets} emptied zones reset after a checkpoint"
    );
    rig.ftl = Some(ftl);
    crash_and_mount(&mut rig, &xs);
}

/// A crash and a mount of `rig`'s volume, which holds no nameless block
/// (`xs` were overwritten).
fn crash_and_mount(rig: &mut Rig, xs: &[NamelessAddr]) -> Driver<SimDevice> {
    let dev = rig.ftl.take().unwrap().into_backend();
    let mut ftl = Driver::mount(dev, rig.cfg.clone()).expect("mount after a crash");
    assert_eq!(ftl.stats().nameless_live_blocks, 0, "freed blocks are back");
    for &x in xs {
        assert!(
            ftl.nameless_read(x).is_err(),
            "{x:?} overwritten, live again"
        );
    }
    ftl
}

/// The property test's shrunk case of the same bug (seed 4856609783222296051).
#[test]
fn found_by_the_model_a_mount_fails_on_a_reset_zone_with_live_blocks() {
    let w = |blocks| Op::Write { blocks, fua: false };
    let o = |pick, blocks| Op::Overwrite { pick, blocks };
    let f = |pick, blocks| Op::Free { pick, blocks };
    let cut = |turns| Op::Batch {
        reqs: vec![Req::Write { blocks: 1 }],
        cut: Some(turns),
    };
    let ops = [
        w(3),
        cut(0),
        w(3),
        w(3),
        w(2),
        w(2),
        w(3),
        o(0, 3),
        o(0, 1),
        o(0, 1),
        f(0, 2),
        w(2),
        o(0, 8),
        f(0, 2),
        f(0, 2),
        f(0, 2),
        f(0, 2),
        f(0, 2),
        f(0, 3),
        f(0, 3),
        w(2),
        w(3),
        o(116959441314093170, 1),
        w(2),
        w(1),
        f(1149277688517333801, 2),
        w(1),
        w(2),
        f(1407226346634912867, 1),
        cut(1),
    ];
    let mut rig = Rig::new(4856609783222296051, false, config(false));
    for op in &ops {
        rig.apply(op);
    }
    rig.finish();
}

/// The property test's shrunk case (seed 470316621035668531, long replay)
/// with GC's copies over four zone groups: a checkpoint fell due while an
/// in-place job ran (none may be captured inside its window), and the
/// extra lanes' zone opens and victim closes, a forced log block each,
/// filled the rest of the ring before the job ended: the log had no room
/// for the checkpoint, and the volume went read-only without a cut.
/// `Ftl::checkpoint_held` holds that work until the job ends.
#[test]
fn found_by_the_model_a_checkpoint_due_during_an_in_place_job_finds_log_room() {
    let w = |blocks| Op::Write { blocks, fua: false };
    let fua = |blocks| Op::Write { blocks, fua: true };
    let o = |pick, blocks| Op::Overwrite { pick, blocks };
    let f = |pick, blocks| Op::Free { pick, blocks };
    #[rustfmt::skip]
    let ops = [
        w(4), Op::Commit, w(2),
        Op::Batch { reqs: vec![Req::Write { blocks: 2 }, Req::Overwrite { pick: 986399451300127254 }, Req::Overwrite { pick: 311068040375419 }], cut: Some(2) },
        w(2), o(5945164141814072716, 1), w(71), f(6765130129066498971, 1),
        Op::Cut { after_commands: 37, mount_cut: None }, w(1), Op::Commit,
        f(6557170872636429171, 3), Op::Flush, w(4), w(3), w(2), w(4), w(2),
        f(3807509847814203664, 1), f(7443114637834990595, 3), w(32), f(13620261612820315675, 1),
        f(4962397056227817249, 2), o(966684315999199896, 3), w(3),
        Op::Read { target: Target::Live(18133444144431422142) },
        Op::Batch { reqs: vec![Req::Read { pick: 10121112707961788347 }, Req::Overwrite { pick: 2162884421455224887 }, Req::Free { pick: 12143998870947559517 }], cut: None },
        f(8704220796864177739, 1), w(1), w(4), o(10063363120225124971, 1), w(3), fua(1),
        Op::Flush, w(1),
        Op::Batch { reqs: vec![Req::Write { blocks: 3 }, Req::Overwrite { pick: 15911447588511850242 }, Req::Flush, Req::Overwrite { pick: 3565843738824123113 }, Req::Flush], cut: None },
        w(1), f(13675117975365344739, 2), o(501973852074958592, 1), w(3), w(2), w(3), w(1), w(3),
        o(12041523313368348775, 1), w(1),
        Op::Batch { reqs: vec![Req::Write { blocks: 1 }, Req::Commit, Req::Read { pick: 2488475987289280484 }, Req::FreeRacing], cut: Some(2) },
        Op::Commit, w(41), f(2166931327413124968, 1), w(102), fua(1), fua(3), w(3), w(138),
        Op::Batch { reqs: vec![Req::FreeRacing], cut: Some(2) }, w(3), f(7964848194043352820, 1),
        w(1), w(1), w(3), Op::Commit, w(49), o(2603974546018465108, 1),
        f(11244843206323126978, 2), w(2), w(1),
        Op::Batch { reqs: vec![Req::Write { blocks: 2 }, Req::Commit], cut: Some(5) },
        f(4728815452461954441, 2), w(2), w(1), w(4), o(14152971483730991985, 4), Op::Commit, w(1),
        Op::Commit, Op::Commit, Op::Commit, w(1), w(2), w(4), Op::Commit, w(3), w(87), Op::Commit,
        o(1200577696587524182, 1), w(1), w(67), w(2), w(135), Op::Settle,
        Op::Batch { reqs: vec![Req::Read { pick: 4215600604569895315 }, Req::Read { pick: 7808936532226281712 }, Req::Commit, Req::Flush], cut: Some(4) },
        w(4), w(2), Op::Batch { reqs: vec![Req::Write { blocks: 3 }], cut: Some(2) }, w(3),
        f(2854181104041070996, 3), fua(2),
        Op::Batch { reqs: vec![Req::Write { blocks: 1 }], cut: Some(3) },
        f(7431652495309737056, 1), o(5710100203185814750, 6), o(13847454727113096319, 1),
        o(14286875292128500806, 7), fua(1), w(2),
        Op::Batch { reqs: vec![Req::Free { pick: 17899819901650539192 }], cut: Some(4) },
        Op::Ack { pick: 11670865686560979900 }, w(1), w(1), w(4),
        Op::Ack { pick: 16645320316349837367 }, w(1), w(2), w(1),
        Op::Cut { after_commands: 14, mount_cut: Some(6) }, w(2), w(1),
        Op::Ack { pick: 13066990125261718624 },
        Op::Batch { reqs: vec![Req::Commit, Req::Write { blocks: 1 }], cut: Some(0) }, w(2),
        o(9613888688733268199, 1), w(2), w(1), w(2), w(2),
        Op::InPlace { pick: 7947483511692316521 }, Op::Commit,
        Op::Read { target: Target::Unborn(1244380376829508398) }, f(11880470496627772733, 1),
        w(3), f(10849902549817029438, 3), Op::Commit, w(3), fua(3), Op::Commit, w(2),
        Op::Cut { after_commands: 19, mount_cut: None }, o(7927020026922818935, 1), w(3),
        o(9056796245630691323, 1), w(1), w(2), w(119), w(3), o(1988080330836030620, 1), w(1),
        Op::Ack { pick: 5625900019651062750 }, Op::Cut { after_commands: 83, mount_cut: None },
        w(2), w(4), w(4), o(1115256307155774371, 1), w(2), w(156), o(12141967602216358075, 4),
        Op::InPlace { pick: 16651494336517119113 }, Op::Commit, o(12962480460572022514, 1), w(2),
        w(4), w(3), o(1427153371887191935, 2), o(1089183376277037242, 1), w(1),
        Op::Batch { reqs: vec![Req::Write { blocks: 2 }, Req::Flush, Req::FreeRacing, Req::Commit, Req::Flush], cut: None },
    ];
    let cfg = FtlConfig {
        gc_lanes: 4,
        ..config(true)
    };
    let mut rig = Rig::new(470316621035668531, false, cfg);
    for op in &ops {
        rig.apply(op);
    }
    rig.finish();
}
