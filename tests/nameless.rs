//! The physical segment (nameless writes) end to end on the simulator
//! through `Driver`: blocks read back with their metadata at the addresses
//! they were given, overwrites and frees, stale and bad addresses get
//! typed errors, emptied zones come back, and both kinds of remount keep
//! every durable block at its address.

use std::collections::{BTreeMap, BTreeSet};
use zftl::core::{
    Driver, FormatOptions, FtlConfig, IoError, MountError, NamelessAddr, NamelessError,
    NamelessEvent, NamelessWear, TagPlacement,
};
use zftl::sim::rng::Rng;
use zftl::sim::{Faults, PowerCut, SimDevice};

mod common;
use common::{
    decode, format_on, ftl_config, pattern, run_seeds, sim_config, volume_config, Coverage, Model,
};

fn format(oob: bool) -> Driver<SimDevice> {
    format_on(oob, volume_config(oob))
}

/// Tags in an OOB with no room for the md after them: no segment.
fn small_oob() -> Driver<SimDevice> {
    let cfg = zftl::sim::SimConfig {
        oob_size_bytes: 32,
        ..volume_config(true)
    };
    format_on(true, cfg)
}

/// The metadata of block `key`, version `version`.
fn md(key: u64, version: u32, md_bytes: usize) -> Vec<u8> {
    let mut m = vec![0u8; md_bytes];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..12].copy_from_slice(&version.to_le_bytes());
    m
}

/// Writes one block per key of version `version`; its addresses.
fn put(ftl: &mut Driver<SimDevice>, keys: &[u64], version: u32) -> Vec<NamelessAddr> {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let data: Vec<u8> = keys.iter().flat_map(|&k| pattern(k, version, bs)).collect();
    let meta: Vec<u8> = keys.iter().flat_map(|&k| md(k, version, mb)).collect();
    ftl.nameless_write(&data, &meta).unwrap()
}

/// Writes keys `0..n` (version 1) 32 blocks a write, holds them and
/// commits; returns their addresses, key `k`'s at index `k`.
fn put_keys(
    ftl: &mut Driver<SimDevice>,
    n: u64,
    held: &mut BTreeMap<NamelessAddr, (u64, u32)>,
) -> Vec<NamelessAddr> {
    let mut addrs = Vec::with_capacity(n as usize);
    for first in (0..n).step_by(32) {
        let keys: Vec<u64> = (first..(first + 32).min(n)).collect();
        for (a, &k) in put(ftl, &keys, 1).into_iter().zip(&keys) {
            held.insert(a, (k, 1));
            addrs.push(a);
        }
    }
    ftl.nameless_commit().unwrap();
    addrs
}

fn holds(ftl: &mut Driver<SimDevice>, addr: NamelessAddr, key: u64, version: u32) {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let (data, meta) = ftl.nameless_read(addr).unwrap();
    assert_eq!(
        data,
        pattern(key, version, bs),
        "data of key {key} at {addr:?}"
    );
    assert_eq!(
        meta,
        md(key, version, mb),
        "metadata of key {key} at {addr:?}"
    );
}

fn nameless_error(r: Result<impl std::fmt::Debug, IoError>) -> NamelessError {
    match r {
        Err(IoError::Nameless(e)) => e,
        other => panic!("expected a nameless error, got {other:?}"),
    }
}

/// A nameless write refused for want of room (nothing happened): no
/// space, or dead blocks held by moves not yet acknowledged.
fn no_room(e: &IoError) -> bool {
    matches!(
        e,
        IoError::NoSpace | IoError::Nameless(NamelessError::MovesUnacknowledged { .. })
    )
}

fn blocks_read_back_with_their_metadata_and_frees_and_overwrites_take_effect_in(oob: bool) {
    let mut ftl = format(oob);
    let keys: Vec<u64> = (0..40).collect();
    let addrs = put(&mut ftl, &keys, 1);
    assert_eq!(addrs.len(), keys.len());
    let mut distinct = addrs.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        addrs.len(),
        "every block gets its own address"
    );
    for (&k, &a) in keys.iter().zip(&addrs) {
        holds(&mut ftl, a, k, 1);
    }
    // Overwrite the first ten: new addresses, the old ones freed.
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let data: Vec<u8> = (0..10).flat_map(|k| pattern(k, 2, bs)).collect();
    let meta: Vec<u8> = (0..10).flat_map(|k| md(k, 2, mb)).collect();
    let new = ftl.nameless_overwrite(&addrs[..10], &data, &meta).unwrap();
    for k in 0..10 {
        holds(&mut ftl, new[k], k as u64, 2);
        let e = nameless_error(ftl.nameless_read(addrs[k]));
        assert_eq!(e, NamelessError::NotLive { addr: addrs[k] });
    }
    // Free ten more: their addresses stop reading, the rest still do.
    ftl.nameless_free(&addrs[10..20]).unwrap();
    for &a in &addrs[10..20] {
        assert_eq!(
            nameless_error(ftl.nameless_read(a)),
            NamelessError::NotLive { addr: a }
        );
    }
    // A free of a freed block changes nothing, even beside a live one.
    let e = nameless_error(ftl.nameless_free(&[addrs[20], addrs[10]]));
    assert_eq!(e, NamelessError::NotLive { addr: addrs[10] });
    holds(&mut ftl, addrs[20], 20, 1);
    let s = ftl.stats();
    assert_eq!(s.nameless_live_blocks, 30);
    assert_eq!(s.nameless_write_blocks, 50);
    assert_eq!(s.nameless_free_blocks, 20);
    assert_eq!(s.mapped_blocks, 0, "nameless blocks map no logical block");
}

#[test]
fn blocks_read_back_with_their_metadata_and_frees_and_overwrites_take_effect() {
    blocks_read_back_with_their_metadata_and_frees_and_overwrites_take_effect_in(true);
}

#[test]
fn blocks_read_back_with_their_metadata_and_frees_and_overwrites_take_effect_in_band() {
    blocks_read_back_with_their_metadata_and_frees_and_overwrites_take_effect_in(false);
}

fn bad_requests_get_typed_errors_and_change_nothing_in(oob: bool) {
    let mut ftl = format(oob);
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let a = put(&mut ftl, &[7], 1)[0];
    // Metadata of the wrong size.
    let e = nameless_error(ftl.nameless_write(&pattern(1, 1, bs), &vec![0; mb - 4]));
    assert_eq!(
        e,
        NamelessError::MetadataSize {
            expected_bytes: mb,
            actual_bytes: mb - 4
        }
    );
    // A partial block.
    assert!(matches!(
        ftl.nameless_write(&[0u8; 100], &md(1, 1, mb)),
        Err(IoError::BufferSize { .. })
    ));
    // Addresses outside the segment, and one never handed out.
    for bad in [NamelessAddr::NONE, NamelessAddr::from_u64(1 << 32)] {
        assert_eq!(
            nameless_error(ftl.nameless_read(bad)),
            NamelessError::OutOfSegment { addr: bad }
        );
    }
    let later = NamelessAddr::new(a.ppa(), a.generation() + 1);
    assert_eq!(
        nameless_error(ftl.nameless_read(later)),
        NamelessError::NotLive { addr: later }
    );
    // An overwrite with an address per block, each once.
    let two: Vec<u8> = [pattern(1, 2, bs), pattern(2, 2, bs)].concat();
    let e = nameless_error(ftl.nameless_overwrite(&[a], &two, &vec![0; 2 * mb]));
    assert_eq!(
        e,
        NamelessError::AddressCount {
            expected: 2,
            actual: 1
        }
    );
    let e = nameless_error(ftl.nameless_overwrite(&[a, a], &two, &vec![0; 2 * mb]));
    assert_eq!(e, NamelessError::Duplicate { addr: a });
    holds(&mut ftl, a, 7, 1);
    // A volume with tags in an OOB too small for the md has no physical
    // segment.
    let mut small = small_oob();
    let e = nameless_error(small.nameless_write(&pattern(1, 1, bs), &md(1, 1, mb)));
    assert!(matches!(e, NamelessError::Unsupported { .. }), "{e:?}");
}

#[test]
fn bad_requests_get_typed_errors_and_change_nothing() {
    bad_requests_get_typed_errors_and_change_nothing_in(true);
}

#[test]
fn bad_requests_get_typed_errors_and_change_nothing_in_band() {
    bad_requests_get_typed_errors_and_change_nothing_in(false);
}

fn emptied_zones_come_back_and_their_old_addresses_go_stale_in(oob: bool) {
    let mut ftl = format(oob);
    // Write and free three times the volume's size: only resets of
    // emptied zones give the space back.
    let total_blocks = ftl.logical_blocks();
    let mut first: Option<NamelessAddr> = None;
    let mut written = 0u64;
    let mut round = 0u32;
    while written < 3 * total_blocks {
        round += 1;
        let keys: Vec<u64> = (0..256).collect();
        let addrs = put(&mut ftl, &keys, round);
        first.get_or_insert(addrs[0]);
        holds(&mut ftl, addrs[255], 255, round);
        ftl.nameless_free(&addrs).unwrap();
        written += 256;
    }
    ftl.settle().unwrap();
    let s = ftl.stats();
    assert_eq!(s.nameless_live_blocks, 0);
    assert!(s.erases > 0, "no zone was reset");
    let first = first.unwrap();
    match nameless_error(ftl.nameless_read(first)) {
        NamelessError::Stale { addr, .. } | NamelessError::NotLive { addr } => {
            assert_eq!(addr, first)
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn emptied_zones_come_back_and_their_old_addresses_go_stale() {
    emptied_zones_come_back_and_their_old_addresses_go_stale_in(true);
}

#[test]
fn emptied_zones_come_back_and_their_old_addresses_go_stale_in_band() {
    emptied_zones_come_back_and_their_old_addresses_go_stale_in(false);
}

/// A nameless block the host was answered for.
#[derive(Clone, Copy, Debug)]
struct Held {
    key: u64,
    version: u32,
    /// A flush (or its FUA write) since it was answered: a cut keeps it.
    durable: bool,
    /// The address this block's overwrite freed, until a flush.
    replaces: Option<NamelessAddr>,
    commit: Commit,
}

/// Whether a block is covered by a `nameless_commit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Commit {
    /// Written after the last commit that answered: handed over after a
    /// mount.
    No,
    /// Written before a commit a cut left unanswered.
    Maybe,
    /// Written before a commit that answered: never handed over.
    Yes,
}

/// What the host knows of the segment.
#[derive(Default)]
struct SegmentModel {
    live: BTreeMap<NamelessAddr, Held>,
    /// Freed (or replaced by an overwrite) since the last flush: a cut may
    /// bring them back.
    freeing: BTreeMap<NamelessAddr, Held>,
    /// Freed for good: never live again.
    gone: BTreeSet<NamelessAddr>,
}

impl SegmentModel {
    fn flush(&mut self) {
        for h in self.live.values_mut() {
            h.durable = true;
            h.replaces = None;
        }
        self.gone
            .extend(std::mem::take(&mut self.freeing).into_keys());
    }

    fn free(&mut self, addr: NamelessAddr) {
        let h = self.live.remove(&addr).expect("freed a live block");
        self.freeing.insert(addr, h);
    }

    /// Every block not committed is from `from` on `to`.
    /// GC moved the block at `old` to `new` (a `Migrated` event): the
    /// host follows it. Returns whether it held `old`.
    fn rekey(&mut self, old: NamelessAddr, new: NamelessAddr) -> bool {
        for h in self.live.values_mut() {
            if h.replaces == Some(old) {
                h.replaces = Some(new);
            }
        }
        if let Some(h) = self.live.remove(&old) {
            self.live.insert(new, h);
            return true;
        }
        if let Some(h) = self.freeing.remove(&old) {
            self.freeing.insert(new, h);
            return true;
        }
        false
    }

    fn commit(&mut self, from: Commit, to: Commit) {
        for h in self.live.values_mut().chain(self.freeing.values_mut()) {
            if h.commit == from {
                h.commit = to;
            }
        }
    }
}

/// Logical blocks the torture writes beside the segment (both share the
/// media, GC and the log).
const LOGICAL_BLOCKS: u64 = 256;

struct NamelessRig {
    ftl: Option<Driver<SimDevice>>,
    cfg: FtlConfig,
    model: SegmentModel,
    logical: Model,
    next_version: u32,
    rng: Rng,
    next_key: u64,
    armed: bool,
    /// The block an overwrite that got no answer was replacing: a cut may
    /// have kept that overwrite (and freed it).
    interrupted: Option<NamelessAddr>,
    cuts: u64,
    checked: u64,
    /// Mounts a cut interrupted, blocks handed over, and of those the
    /// blocks of unanswered writes.
    mount_cuts: u64,
    handed_over: u64,
    orphans: u64,
    /// `Migrated` events followed, and acknowledgements not yet sent.
    moves: u64,
    to_ack: Vec<NamelessAddr>,
    /// Blocks nameless wear leveling moved, before each cut.
    wl_moves: u64,
    /// In-place collections started (both tag modes), those GC started by
    /// itself, and the gap fills they wrote, before each cut.
    inplace_started: u64,
    inplace_by_gc: u64,
    gap_fills: u64,
    overwrite_fills: u64,
}

impl NamelessRig {
    fn new(seed: u64, oob: bool) -> NamelessRig {
        let mut cfg = ftl_config();
        if seed % 3 == 1 {
            // Long replays: no checkpoint but the mount's.
            cfg.checkpoint_interval_blocks = u64::MAX;
        }
        if seed % 4 == 3 {
            // Wear leveling of nameless data, due after a few erases.
            cfg.nameless_wear = Some(NamelessWear::paper(2));
        }
        if seed % 5 == 2 {
            // A remap table of one entry: migrations stop at once, and GC
            // collects nameless zones in place (both tag modes), its gap fills
            // taking queued writes.
            cfg.nameless_remap_entries = 1;
        }
        let mut sim = sim_config(seed, oob, false);
        if !oob && seed % 2 == 1 {
            // Zones of several md groups: 512-byte blocks (10 entries an
            // md block, groups of 80 data blocks) in zones of 128 (a
            // group of 80 and one of 36), few enough that GC migrates.
            sim.page_size_bytes = 512;
            sim.pages_per_block = 128;
            sim.blocks_per_lun = 6;
        }
        let dev = SimDevice::create_memory(sim).unwrap();
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
        NamelessRig {
            ftl: Some(ftl),
            cfg,
            model: SegmentModel::default(),
            logical: Model::new(LOGICAL_BLOCKS),
            next_version: 1,
            rng: Rng::new(seed ^ 0x5EED),
            next_key: 0,
            armed: false,
            interrupted: None,
            cuts: 0,
            checked: 0,
            mount_cuts: 0,
            handed_over: 0,
            orphans: 0,
            moves: 0,
            to_ack: Vec::new(),
            wl_moves: 0,
            inplace_started: 0,
            inplace_by_gc: 0,
            gap_fills: 0,
            overwrite_fills: 0,
        }
    }

    fn ftl(&mut self) -> &mut Driver<SimDevice> {
        self.ftl.as_mut().unwrap()
    }

    fn pick_live(&mut self) -> Option<NamelessAddr> {
        let n = self.model.live.len() as u64;
        (n > 0).then(|| {
            let i = self.rng.next_u64() % n;
            *self.model.live.keys().nth(i as usize).unwrap()
        })
    }

    /// A commit answered: what it covers is committed and flushed.
    fn committed(&mut self) {
        self.model.commit(Commit::Maybe, Commit::Yes);
        self.model.flush();
        self.logical.flush();
    }

    /// `n` new keys' blocks: (keys, data, md).
    fn new_blocks(&mut self, n: u64) -> (Vec<u64>, Vec<u8>, Vec<u8>) {
        let (bs, mb) = (self.ftl().block_size(), self.ftl().nameless_md_bytes());
        let keys: Vec<u64> = (self.next_key..self.next_key + n).collect();
        self.next_key += n;
        let data = keys.iter().flat_map(|&k| pattern(k, 1, bs)).collect();
        let meta = keys.iter().flat_map(|&k| md(k, 1, mb)).collect();
        (keys, data, meta)
    }

    /// A write, a commit and a write submitted together: the commit covers
    /// the first, not the second (answered after it was admitted).
    fn write_commit_write(&mut self) -> Result<(), IoError> {
        use zftl::core::{nameless_request, Request};
        let (n1, n2) = (1 + self.rng.next_u64() % 3, 1 + self.rng.next_u64() % 3);
        let (first, d1, m1) = self.new_blocks(n1);
        let (second, d2, m2) = self.new_blocks(n2);
        self.model.commit(Commit::No, Commit::Maybe);
        let ftl = self.ftl();
        let w1 = ftl.submit(nameless_request(None, &d1, &m1, false))?;
        let c = ftl.submit(Request::NamelessCommit)?;
        let w2 = ftl.submit(nameless_request(None, &d2, &m2, false))?;
        self.answered(w1, &first, Commit::Maybe)?;
        self.ftl().wait_for(c)?;
        self.committed();
        self.answered(w2, &second, Commit::No)
    }

    /// The answer to nameless write `id` of `keys`: its blocks are live
    /// (none when refused for room).
    fn answered(&mut self, id: u64, keys: &[u64], commit: Commit) -> Result<(), IoError> {
        let addrs = match self.ftl().wait_for(id) {
            Ok(zftl::core::ReplyData::Addrs(a)) => a,
            Err(e) if no_room(&e) => return Ok(()),
            Err(e) => return Err(e),
            Ok(other) => panic!("a nameless write answered {other:?}"),
        };
        for (&key, a) in keys.iter().zip(addrs) {
            let held = Held {
                key,
                version: 1,
                durable: false,
                replaces: None,
                commit,
            };
            assert!(self.model.live.insert(a, held).is_none(), "{a:?} twice");
        }
        Ok(())
    }

    /// A `Migrated` event: the host follows the move (its md names the
    /// block it held) and acknowledges it now or at a later step; one it
    /// holds nothing for (a write a cut left unanswered) is acknowledged
    /// too.
    fn follow(&mut self, old: NamelessAddr, new: NamelessAddr, m: &[u8]) {
        if self.model.rekey(old, new) {
            let h = self.model.live.get(&new).or(self.model.freeing.get(&new));
            let h = *h.unwrap();
            assert_eq!(m, md(h.key, h.version, m.len()), "md of {old:?} -> {new:?}");
        }
        if self.interrupted == Some(old) {
            self.interrupted = Some(new);
        }
        self.moves += 1;
        self.to_ack.push(old);
    }

    /// Takes the events ready now and acknowledges, at random, the moves
    /// followed so far.
    fn take_events(&mut self) -> Result<(), IoError> {
        while let Some(e) = self.ftl().poll_event() {
            match e {
                NamelessEvent::Migrated { old, new, md } => self.follow(old, new, &md),
                other => panic!("an event of another kind while running: {other:?}"),
            }
        }
        if !self.to_ack.is_empty() && self.rng.next_u64().is_multiple_of(3) {
            let olds = std::mem::take(&mut self.to_ack);
            self.ftl().nameless_ack(&olds)?;
        }
        Ok(())
    }

    /// One random operation; `Err` only from a power cut.
    fn step(&mut self) -> Result<(), IoError> {
        self.take_events()?;
        if self.rng.next_u64().is_multiple_of(40) {
            // An in-place collection of a live block's zone, if one may
            // start: it runs beside the next steps.
            if let Some(a) = self.pick_live() {
                let cap = self.ftl().ftl().geometry().zone_capacity_blocks;
                self.inplace_started += u64::from(self.ftl().start_in_place(a.ppa().zone(cap)));
            }
        }
        let (bs, mb) = (self.ftl().block_size(), self.ftl().nameless_md_bytes());
        match self.rng.next_u64() % 100 {
            0..=34 => {
                let n = 1 + self.rng.next_u64() % 4;
                let fua = self.rng.next_u64().is_multiple_of(10);
                let keys: Vec<u64> = (self.next_key..self.next_key + n).collect();
                self.next_key += n;
                let data: Vec<u8> = keys.iter().flat_map(|&k| pattern(k, 1, bs)).collect();
                let meta: Vec<u8> = keys.iter().flat_map(|&k| md(k, 1, mb)).collect();
                let ftl = self.ftl();
                let addrs = match fua {
                    true => ftl.nameless_write_fua(&data, &meta),
                    false => ftl.nameless_write(&data, &meta),
                };
                let addrs = match addrs {
                    Err(e) if no_room(&e) => return Ok(()),
                    other => other?,
                };
                for (&key, a) in keys.iter().zip(addrs) {
                    let held = Held {
                        key,
                        version: 1,
                        durable: fua,
                        replaces: None,
                        commit: Commit::No,
                    };
                    assert!(self.model.live.insert(a, held).is_none(), "{a:?} twice");
                }
            }
            35..=49 => {
                let Some(old) = self.pick_live() else {
                    return Ok(());
                };
                let h = self.model.live[&old];
                let v = h.version + 1;
                self.interrupted = Some(old);
                let new = self.ftl().nameless_overwrite(
                    &[old],
                    &pattern(h.key, v, bs),
                    &md(h.key, v, mb),
                );
                if new.as_ref().is_err_and(no_room) {
                    // Overwrites in flight hold a block more each.
                    self.interrupted = None;
                    return Ok(());
                }
                let new = new?[0];
                self.interrupted = None;
                self.model.free(old);
                let held = Held {
                    key: h.key,
                    version: v,
                    durable: false,
                    replaces: Some(old),
                    commit: Commit::No,
                };
                self.model.live.insert(new, held);
            }
            50..=74 => {
                let Some(a) = self.pick_live() else {
                    return Ok(());
                };
                // One cut short may or may not have been applied: a cut
                // decides, as for any free not yet flushed.
                let freed = self.ftl().nameless_free(&[a]);
                self.model.free(a);
                freed?;
            }
            82..=83 => {
                // A cut before the answer may or may not keep the commit.
                self.model.commit(Commit::No, Commit::Maybe);
                self.ftl().nameless_commit()?;
                self.committed();
            }
            84 => self.write_commit_write()?,
            75..=81 => {
                let Some(a) = self.pick_live() else {
                    return Ok(());
                };
                let h = self.model.live[&a];
                let (data, meta) = self.ftl().nameless_read(a)?;
                assert_eq!(data, pattern(h.key, h.version, bs), "read of {a:?}");
                assert_eq!(meta, md(h.key, h.version, mb), "metadata of {a:?}");
            }
            85..=94 => {
                let lba = self.rng.next_u64() % (LOGICAL_BLOCKS - 4);
                let n = 1 + self.rng.next_u64() % 4;
                let v = self.next_version;
                self.next_version += 1;
                let data: Vec<u8> = (lba..lba + n).flat_map(|l| pattern(l, v, bs)).collect();
                for l in lba..lba + n {
                    self.logical.write(l, v);
                }
                match self.ftl().write(lba, &data) {
                    Err(IoError::NoSpace) => (lba..lba + n).for_each(|l| self.logical.unwrite(l)),
                    other => other?,
                }
            }
            _ => {
                self.ftl().flush()?;
                self.model.flush();
                self.logical.flush();
            }
        }
        Ok(())
    }

    fn arm(&mut self) {
        let after = 1 + self.rng.next_u64() % 400;
        let seed = self.rng.next_u64();
        self.ftl().backend_mut().set_faults(Faults {
            seed,
            power_cut: PowerCut::AfterSubmits(after),
            shuffle_completions: true,
            ..Faults::default()
        });
        self.armed = true;
    }

    fn crash_and_check(&mut self) {
        self.cuts += 1;
        self.wl_moves += self.ftl().stats().wl_move_blocks;
        let s = self.ftl().stats();
        self.inplace_by_gc += s.nameless_inplace_gc_victims;
        self.gap_fills += s.nameless_gap_fill_blocks;
        self.overwrite_fills += s.nameless_overwrite_fill_blocks;
        // Unsent acks: their entries come back with their events.
        self.to_ack.clear();
        let mut dev = self.ftl.take().unwrap().into_backend();
        dev.power_cut();
        dev.power_on().unwrap();
        self.armed = false;
        if self.rng.next_u64().is_multiple_of(3) {
            self.cut_during_mount(&mut dev);
        }
        dev.set_faults(Faults::default());
        let ftl = Driver::mount(dev, self.cfg.clone()).expect("mount after a cut");
        self.ftl = Some(ftl);
        self.check_after_cut();
        self.check_handover();
    }

    /// Mounts with a power cut armed a few commands in (replay, the
    /// hand-over's reads, the mount's checkpoint); whether the mount
    /// finished or not, the power goes again.
    fn cut_during_mount(&mut self, dev: &mut SimDevice) {
        let after = 1 + self.rng.next_u64() % 120;
        dev.set_faults(Faults {
            seed: self.rng.next_u64(),
            power_cut: PowerCut::AfterSubmits(after),
            ..Faults::default()
        });
        match Driver::mount(&mut *dev, self.cfg.clone()) {
            Ok(mut ftl) => {
                // Take some of the hand-over before the power goes: a
                // delivered event comes again after the next mount.
                let _ = ftl.next_events(4);
            }
            Err(MountError::Device { .. }) => self.mount_cuts += 1,
            Err(e) => panic!("mount cut short by a power cut reported: {e}"),
        }
        dev.power_cut();
        dev.power_on().unwrap();
    }

    /// After a mount: the hand-over holds every surviving block written
    /// after the last commit that answered, with its md, and no block
    /// that commit covered; blocks of writes the cut left unanswered come
    /// too, and once the host frees them no nameless block is live that
    /// the host does not know of (nothing leaks).
    fn check_handover(&mut self) {
        let mut events = BTreeMap::new();
        loop {
            let batch = self.ftl().next_events(16).expect("events after a mount");
            if batch.is_empty() {
                break;
            }
            for e in batch {
                match e {
                    NamelessEvent::Unrecorded { addr, md } => assert!(
                        events.insert(addr, md).is_none(),
                        "{addr:?} handed over twice"
                    ),
                    NamelessEvent::Migrated { old, new, md } => {
                        // A block handed over, then moved (GC runs
                        // meanwhile): the host follows it too.
                        if let Some(m) = events.remove(&old) {
                            events.insert(new, m);
                        }
                        self.follow(old, new, &md);
                    }
                    other => panic!("an event of another kind after a mount: {other:?}"),
                }
            }
        }
        // The moves first: an uncommitted block GC moved is handed over
        // where it is now.
        let olds = std::mem::take(&mut self.to_ack);
        self.ftl().nameless_ack(&olds).unwrap();
        let mb = self.ftl().nameless_md_bytes();
        for (a, h) in self.model.live.iter_mut() {
            let given = events.get(a);
            match h.commit {
                Commit::Yes => {
                    assert!(given.is_none(), "committed block {a:?} ({h:?}) handed over")
                }
                Commit::No => {
                    let m = given.unwrap_or_else(|| panic!("{a:?} ({h:?}) not handed over"));
                    assert_eq!(m, &md(h.key, h.version, mb), "md of {a:?} handed over");
                }
                Commit::Maybe => {
                    if let Some(m) = given {
                        assert_eq!(m, &md(h.key, h.version, mb), "md of {a:?} handed over");
                    }
                    h.commit = if given.is_some() {
                        Commit::No
                    } else {
                        Commit::Yes
                    };
                }
            }
        }
        for (&a, m) in &events {
            assert!(
                !self.model.gone.contains(&a),
                "freed block {a:?} handed over"
            );
            if self.model.live.contains_key(&a) {
                continue;
            }
            // A write the cut left unanswered: its block holds what its md
            // says; the host does not want it.
            let key = u64::from_le_bytes(m[..8].try_into().unwrap());
            let version = u32::from_le_bytes(m[8..12].try_into().unwrap());
            let h = Held {
                key,
                version,
                durable: true,
                replaces: None,
                commit: Commit::No,
            };
            assert!(self.survives(a, &h), "{a:?} handed over and not live");
            self.ftl().nameless_free(&[a]).unwrap();
            self.model.freeing.insert(a, h);
            self.orphans += 1;
        }
        let s = self.ftl().stats();
        assert_eq!(
            s.nameless_live_blocks,
            self.model.live.len() as u64,
            "live nameless blocks the host does not know of (leaked)"
        );
        let uncommitted = self.model.live.values().filter(|h| h.commit == Commit::No);
        assert_eq!(s.nameless_uncommitted_blocks, uncommitted.count() as u64);
        // GC (leveling too) goes on moving blocks meanwhile: what is
        // pending now is moves, never more of the hand-over.
        while let Some(e) = self.ftl().poll_event() {
            match e {
                NamelessEvent::Migrated { old, new, md } => self.follow(old, new, &md),
                other => panic!("the hand-over after it was drained: {other:?}"),
            }
        }
        self.handed_over += events.len() as u64;
    }

    /// Whether `a` reads back as `h`; `false` when it holds no live block.
    /// Wrong data or metadata fails the test.
    fn survives(&mut self, a: NamelessAddr, h: &Held) -> bool {
        let (bs, mb) = (self.ftl().block_size(), self.ftl().nameless_md_bytes());
        self.checked += 1;
        match self.ftl().nameless_read(a) {
            Ok((data, meta)) => {
                assert_eq!(data, pattern(h.key, h.version, bs), "data at {a:?}");
                assert_eq!(meta, md(h.key, h.version, mb), "metadata at {a:?}");
                true
            }
            Err(IoError::Nameless(
                e @ (NamelessError::NotLive { .. } | NamelessError::Stale { .. }),
            )) => {
                let _ = e;
                false
            }
            Err(e) => panic!("read of {a:?} ({h:?}) after a cut: {e}"),
        }
    }

    /// After a mount: every durable block at its address, nothing freed
    /// for good back, an overwrite's new block and its free together.
    /// (`check_handover` then checks the count of live blocks.)
    fn check_after_cut(&mut self) {
        let live = std::mem::take(&mut self.model.live);
        let mut freeing = std::mem::take(&mut self.model.freeing);
        let mut kept = BTreeMap::new();
        for (a, h) in live {
            let here = self.survives(a, &h);
            let replaced = self.interrupted == Some(a);
            assert!(
                here || !h.durable || replaced,
                "durable block {a:?} ({h:?}) lost"
            );
            if let Some(old) = h.replaces {
                let o = freeing.remove(&old).unwrap_or_else(|| {
                    panic!(
                        "{a:?} ({h:?}) replaced {old:?}, not freed: live {:?}",
                        kept.get(&old)
                    )
                });
                let old_here = self.survives(old, &o);
                // Both gone: the overwrite in flight at the cut replaced
                // the new block too, or the old block was never durable
                // (in band its record is its notes, durable at a flush).
                assert!(
                    here != old_here || (replaced && !here) || (!here && !old_here && !o.durable),
                    "overwrite {old:?} -> {a:?}: new {here}, old {old_here}"
                );
                if old_here {
                    let o = Held {
                        durable: true,
                        replaces: None,
                        ..o
                    };
                    kept.insert(old, o);
                } else {
                    self.model.gone.insert(old);
                }
            }
            if here {
                kept.insert(
                    a,
                    Held {
                        durable: true,
                        replaces: None,
                        ..h
                    },
                );
            } else {
                self.model.gone.insert(a);
            }
        }
        for (a, h) in freeing {
            if self.survives(a, &h) {
                let h = Held {
                    durable: true,
                    replaces: None,
                    ..h
                };
                kept.insert(a, h);
            } else {
                self.model.gone.insert(a);
            }
        }
        let gone: Vec<NamelessAddr> = self.model.gone.iter().copied().collect();
        for a in gone {
            let h = Held {
                key: u64::MAX,
                version: 0,
                durable: false,
                replaces: None,
                commit: Commit::Yes,
            };
            assert!(!self.survives(a, &h), "freed block {a:?} is live again");
        }
        self.model.live = kept;
        self.interrupted = None;
        self.check_logical();
    }

    /// Every logical block holds a version the model allows; it is durable
    /// from here on.
    fn check_logical(&mut self) {
        let bs = self.ftl().block_size();
        let mut data = Vec::new();
        for at in (0..LOGICAL_BLOCKS).step_by(32) {
            data.extend(self.ftl().read(at, 32).unwrap());
        }
        for (l, block) in data.chunks_exact(bs).enumerate() {
            let l = l as u64;
            let v = decode(l, block).unwrap_or_else(|e| panic!("logical block {l}: {e}"));
            assert!(
                self.logical.allowed(l, v),
                "logical block {l} holds version {v}: {}",
                self.logical.describe(l)
            );
            self.logical.durable(l, v);
        }
    }

    fn run(mut self, rounds: u32) -> Coverage {
        for _ in 0..rounds {
            self.arm();
            for _ in 0..300 {
                match self.step() {
                    Ok(()) => {}
                    Err(IoError::DeviceGone | IoError::ReadOnly) if self.armed => {
                        self.crash_and_check();
                        break;
                    }
                    Err(e) => panic!("failed without a power cut: {e}"),
                }
            }
            if self.armed {
                self.crash_and_check();
            }
        }
        assert!(self.checked > 0, "checked no block after a cut");
        eprintln!(
            "in-place collections started: {}, by GC: {}, gap fills: {} ({} of overwrites)",
            self.inplace_started, self.inplace_by_gc, self.gap_fills, self.overwrite_fills
        );
        Coverage {
            cuts: self.cuts,
            during_recovery: self.mount_cuts,
            nameless_handed_over: self.handed_over,
            nameless_orphans: self.orphans,
            nameless_moves: self.moves,
            wl_moves: self.wl_moves,
            inplace_jobs: self.inplace_started + self.inplace_by_gc,
            inplace_gc_victims: self.inplace_by_gc,
            gap_fills: self.gap_fills,
            overwrite_fills: self.overwrite_fills,
            ..Coverage::default()
        }
    }
}

#[test]
fn crash_torture_with_nameless_blocks() {
    nameless_torture("crash_torture_with_nameless_blocks", true);
}

/// The nameless crash torture in one tag mode. Over the default seeds every
/// path is taken: cuts during mounts, hand-overs, and blocks of writes the
/// cut left unanswered.
fn nameless_torture(name: &str, oob: bool) {
    let (seeds, cov) = run_seeds(name, 60, |seed| NamelessRig::new(seed, oob).run(8));
    if seeds >= 60 {
        assert!(cov.cuts > 0 && cov.during_recovery > 0, "{cov:?}");
        assert!(
            cov.nameless_handed_over > 0
                && cov.nameless_orphans > 0
                && cov.nameless_moves > 0
                && cov.wl_moves > 0,
            "{cov:?}"
        );
        // In-place collections, GC's own among them, and their gap fills,
        // overwrites' among them.
        assert!(
            cov.inplace_jobs > 0
                && cov.inplace_gc_victims > 0
                && cov.gap_fills > 0
                && cov.overwrite_fills > 0,
            "{cov:?}"
        );
    }
}

fn both_kinds_of_remount_keep_blocks_at_their_addresses_and_generations_go_on_in(oob: bool) {
    let mut ftl = format(oob);
    let keys: Vec<u64> = (0..100).collect();
    let addrs = put(&mut ftl, &keys, 1);
    ftl.nameless_free(&addrs[..50]).unwrap();
    ftl.flush().unwrap();
    let check = |ftl: &mut Driver<SimDevice>| {
        for (k, &a) in addrs.iter().enumerate().skip(50) {
            holds(ftl, a, k as u64, 1);
        }
        for &a in &addrs[..50] {
            assert!(matches!(
                nameless_error(ftl.nameless_read(a)),
                NamelessError::NotLive { .. } | NamelessError::Stale { .. }
            ));
        }
        assert_eq!(ftl.stats().nameless_live_blocks, 50);
    };
    let mut ftl = common::remount_both_ways(ftl, check);
    // The segment goes on: new blocks never reuse an address handed out
    // before the remounts.
    let more = put(&mut ftl, &[1000, 1001], 1);
    for a in &more {
        assert!(!addrs.contains(a), "{a:?} handed out twice");
    }
    holds(&mut ftl, more[1], 1001, 1);
    let mut dev = ftl.shutdown().unwrap();
    common::assert_check_clean(&mut dev, "after nameless writes");
}

/// In band (md in the log and in md groups, also zones of several groups):
/// every path as with md in OOB, migrations and leveling moves included.
#[test]
fn crash_torture_with_nameless_blocks_in_band() {
    nameless_torture("crash_torture_with_nameless_blocks_in_band", false);
}

#[test]
fn both_kinds_of_remount_keep_blocks_at_their_addresses_and_generations_go_on() {
    both_kinds_of_remount_keep_blocks_at_their_addresses_and_generations_go_on_in(true);
}

#[test]
fn both_kinds_of_remount_keep_blocks_at_their_addresses_and_generations_go_on_in_band() {
    both_kinds_of_remount_keep_blocks_at_their_addresses_and_generations_go_on_in(false);
}

fn the_handles_write_read_overwrite_and_free_nameless_blocks_in(oob: bool) {
    use zftl::handle::{AsyncHandle, Handle, InlineHandle};
    let mb = zftl::core::NAMELESS_MD_BYTES;
    // Thread and inline handles, the same calls.
    let threaded = Handle::spawn(format(oob));
    let inline = InlineHandle::new(format(oob));
    macro_rules! exercise {
        ($ftl:expr) => {{
            let ftl = &$ftl;
            let bs = ftl.block_size();
            let data: Vec<u8> = [pattern(1, 1, bs), pattern(2, 1, bs)].concat();
            let meta: Vec<u8> = [md(1, 1, mb), md(2, 1, mb)].concat();
            let a = ftl.nameless_write(&data, &meta).unwrap();
            assert_eq!(
                ftl.nameless_read(a[1]).unwrap(),
                (pattern(2, 1, bs), md(2, 1, mb))
            );
            let b = ftl
                .nameless_overwrite(&a[..1], &pattern(1, 2, bs), &md(1, 2, mb))
                .unwrap();
            assert_eq!(ftl.nameless_read(b[0]).unwrap().0, pattern(1, 2, bs));
            let f = ftl
                .nameless_write_fua(&pattern(3, 1, bs), &md(3, 1, mb))
                .unwrap();
            ftl.nameless_free(&[a[1], f[0]]).unwrap();
            assert!(matches!(
                ftl.nameless_read(a[0]),
                Err(IoError::Nameless(NamelessError::NotLive { .. }))
            ));
            let e = ftl.nameless_overwrite(&[], &pattern(1, 3, bs), &md(1, 3, mb));
            assert!(matches!(
                e,
                Err(IoError::Nameless(NamelessError::AddressCount {
                    expected: 1,
                    actual: 0
                }))
            ));
            assert_eq!(ftl.stats().unwrap().nameless_live_blocks, 1);
        }};
    }
    exercise!(threaded);
    exercise!(inline);
    threaded.shutdown().unwrap();
    inline.shutdown().unwrap();
    // The async handle.
    let ftl = AsyncHandle::from(Handle::spawn(format(oob)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let bs = ftl.block_size();
        let a = ftl
            .nameless_write(&pattern(9, 1, bs), &md(9, 1, mb))
            .await
            .unwrap();
        let (data, meta) = ftl.nameless_read(a[0]).await.unwrap();
        assert_eq!((data, meta), (pattern(9, 1, bs), md(9, 1, mb)));
        ftl.nameless_free(&a).await.unwrap();
        ftl.shutdown().await.unwrap();
    });
}

#[test]
fn the_handles_write_read_overwrite_and_free_nameless_blocks() {
    the_handles_write_read_overwrite_and_free_nameless_blocks_in(true);
}

#[test]
fn the_handles_write_read_overwrite_and_free_nameless_blocks_in_band() {
    the_handles_write_read_overwrite_and_free_nameless_blocks_in(false);
}

/// The addresses and md of every event until none can come.
fn handover(ftl: &mut Driver<SimDevice>) -> BTreeMap<NamelessAddr, Vec<u8>> {
    let mut got = BTreeMap::new();
    loop {
        let events = ftl.next_events(3).unwrap();
        if events.is_empty() {
            return got;
        }
        for e in events {
            let NamelessEvent::Unrecorded { addr, md } = e else {
                panic!("{e:?}");
            };
            assert!(got.insert(addr, md).is_none(), "{addr:?} twice");
        }
    }
}

/// A crash (no checkpoint) and a mount.
fn crash_and_mount(ftl: Driver<SimDevice>, cfg: FtlConfig) -> Driver<SimDevice> {
    Driver::mount(ftl.into_backend(), cfg).unwrap()
}

fn a_full_uncommitted_set_answers_busy_until_a_commit_in(oob: bool) {
    let cfg = FtlConfig {
        nameless_uncommitted_blocks: 8,
        ..FtlConfig::default()
    };
    let mut ftl = crash_and_mount(format(oob), cfg);
    let a = put(&mut ftl, &[0, 1, 2, 3], 1);
    put(&mut ftl, &[4, 5, 6, 7], 1);
    assert_eq!(ftl.stats().nameless_uncommitted_blocks, 8);
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let one =
        |ftl: &mut Driver<SimDevice>, k| ftl.nameless_write(&pattern(k, 1, bs), &md(k, 1, mb));
    assert_eq!(one(&mut ftl, 8), Err(IoError::Busy));
    // A freed block leaves the set; an overwrite takes a place too.
    ftl.nameless_free(&a[..1]).unwrap();
    let b = one(&mut ftl, 9).unwrap();
    let e = ftl.nameless_overwrite(&b, &pattern(9, 2, bs), &md(9, 2, mb));
    assert_eq!(e, Err(IoError::Busy));
    assert_eq!(ftl.stats().nameless_uncommitted_blocks, 8);
    ftl.nameless_commit().unwrap();
    assert_eq!(ftl.stats().nameless_uncommitted_blocks, 0);
    put(&mut ftl, &[10, 11, 12, 13, 14, 15, 16, 17], 1);
    holds(&mut ftl, b[0], 9, 1);
    assert_eq!(ftl.stats().nameless_uncommitted_blocks, 8);
}

#[test]
fn a_full_uncommitted_set_answers_busy_until_a_commit() {
    a_full_uncommitted_set_answers_busy_until_a_commit_in(true);
}

#[test]
fn a_full_uncommitted_set_answers_busy_until_a_commit_in_band() {
    a_full_uncommitted_set_answers_busy_until_a_commit_in(false);
}

fn a_commit_covers_the_writes_before_it_and_the_rest_is_handed_over_after_every_mount_in(
    oob: bool,
) {
    let cfg = FtlConfig::default();
    let mut ftl = format(oob);
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let committed = put(&mut ftl, &(0..10).collect::<Vec<_>>(), 1);
    // A write admitted before the commit is covered by it; one admitted
    // after it is not, though both are answered after it was admitted.
    let data = |k| pattern(k, 1, bs);
    let before = ftl
        .submit(zftl::core::nameless_request(
            None,
            &data(10),
            &md(10, 1, mb),
            false,
        ))
        .unwrap();
    let commit = ftl.submit(zftl::core::Request::NamelessCommit).unwrap();
    let after = ftl
        .submit(zftl::core::nameless_request(
            None,
            &data(11),
            &md(11, 1, mb),
            false,
        ))
        .unwrap();
    let addr = |r: zftl::core::ReplyData| match r {
        zftl::core::ReplyData::Addrs(a) => a[0],
        other => panic!("{other:?}"),
    };
    let before = addr(ftl.wait_for(before).unwrap());
    ftl.wait_for(commit).unwrap();
    let after = addr(ftl.wait_for(after).unwrap());
    let more = put(&mut ftl, &[12, 13, 14, 15], 1);
    ftl.nameless_free(&more[..1]).unwrap();
    let over = ftl
        .nameless_overwrite(&more[1..2], &pattern(13, 2, bs), &md(13, 2, mb))
        .unwrap()[0];
    ftl.nameless_free(&committed[..2]).unwrap();
    ftl.flush().unwrap();
    assert_eq!(ftl.stats().nameless_uncommitted_blocks, 4);
    let expected: BTreeMap<NamelessAddr, Vec<u8>> = [
        (after, md(11, 1, mb)),
        (more[2], md(14, 1, mb)),
        (more[3], md(15, 1, mb)),
        (over, md(13, 2, mb)),
    ]
    .into_iter()
    .collect();
    // After a crash, and again after a clean shutdown: until a commit.
    let mut ftl = crash_and_mount(ftl, cfg.clone());
    assert_eq!(ftl.stats().nameless_events_pending, 4);
    assert_eq!(handover(&mut ftl), expected);
    assert_eq!(ftl.poll_event(), None);
    assert_eq!(ftl.stats().nameless_handover_blocks, 4);
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, cfg.clone()).unwrap();
    ftl.settle().unwrap();
    let mut polled = BTreeMap::new();
    while let Some(NamelessEvent::Unrecorded { addr, md }) = ftl.poll_event() {
        polled.insert(addr, md);
    }
    assert_eq!(polled, expected);
    assert!(!polled.contains_key(&before));
    // The host takes two and frees two: after a commit, nothing comes.
    ftl.nameless_free(&[more[2], over]).unwrap();
    ftl.nameless_commit().unwrap();
    assert_eq!(ftl.stats().nameless_uncommitted_blocks, 0);
    let mut ftl = crash_and_mount(ftl, cfg);
    assert!(ftl.next_events(8).unwrap().is_empty());
    holds(&mut ftl, after, 11, 1);
    holds(&mut ftl, before, 10, 1);
    holds(&mut ftl, more[3], 15, 1);
    let mut dev = ftl.shutdown().unwrap();
    common::assert_check_clean(&mut dev, "after a hand-over");
}

#[test]
fn a_commit_covers_the_writes_before_it_and_the_rest_is_handed_over_after_every_mount() {
    a_commit_covers_the_writes_before_it_and_the_rest_is_handed_over_after_every_mount_in(true);
}

#[test]
fn a_commit_covers_the_writes_before_it_and_the_rest_is_handed_over_after_every_mount_in_band() {
    a_commit_covers_the_writes_before_it_and_the_rest_is_handed_over_after_every_mount_in(false);
}

fn the_handles_commit_and_hand_over_each_event_to_one_waiter_in(oob: bool) {
    use zftl::handle::{AsyncHandle, Handle, InlineHandle};
    // A volume with `n` uncommitted blocks written before a crash.
    let crashed_with = |n: u64| -> Driver<SimDevice> {
        let mut ftl = format(oob);
        put(&mut ftl, &(0..n).collect::<Vec<_>>(), 1);
        ftl.flush().unwrap();
        crash_and_mount(ftl, FtlConfig::default())
    };
    let addrs = |events: Vec<NamelessEvent>| -> Vec<NamelessAddr> {
        let addr = |e| match e {
            NamelessEvent::Unrecorded { addr, .. } => addr,
            other => panic!("{other:?}"),
        };
        events.into_iter().map(addr).collect()
    };
    // Two threads wait on one handle: each event goes to one of them.
    let threaded = Handle::spawn(crashed_with(12));
    let takers: Vec<_> = (0..2)
        .map(|_| {
            let h = threaded.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                loop {
                    let got = h.next_events(1).unwrap();
                    if got.is_empty() {
                        return mine;
                    }
                    mine.extend(addrs(got));
                }
            })
        })
        .collect();
    let mut all: Vec<NamelessAddr> = takers.into_iter().flat_map(|t| t.join().unwrap()).collect();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 12, "each block once");
    threaded.nameless_commit().unwrap();
    assert!(threaded.next_events(4).unwrap().is_empty());
    threaded.shutdown().unwrap();
    let inline = InlineHandle::new(crashed_with(3));
    assert_eq!(addrs(inline.next_events(8).unwrap()).len(), 3);
    inline.nameless_commit().unwrap();
    assert!(inline.next_events(8).unwrap().is_empty());
    inline.shutdown().unwrap();
    let ftl = AsyncHandle::from(Handle::spawn(crashed_with(2)));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let first = ftl.next_events(1).await.unwrap();
        let second = ftl.next_events(8).await.unwrap();
        assert_eq!((first.len(), second.len()), (1, 1));
        ftl.nameless_commit().await.unwrap();
        assert!(ftl.next_events(8).await.unwrap().is_empty());
        ftl.shutdown().await.unwrap();
    });
}

#[test]
fn the_handles_commit_and_hand_over_each_event_to_one_waiter() {
    the_handles_commit_and_hand_over_each_event_to_one_waiter_in(true);
}

#[test]
fn the_handles_commit_and_hand_over_each_event_to_one_waiter_in_band() {
    the_handles_commit_and_hand_over_each_event_to_one_waiter_in(false);
}

/// An ack of an address without a remap entry answers at once and
/// changes nothing; the table's
/// capacity is the configuration's, through clean and unclean remounts
/// (checkpoint section 16 carries it, section 20 stays out).
#[test]
fn an_ack_without_a_move_is_a_no_op_and_the_remap_table_is_bounded_by_the_config() {
    let cfg = FtlConfig {
        nameless_remap_entries: 100,
        ..FtlConfig::default()
    };
    let mut ftl = crash_and_mount(format(true), cfg.clone());
    assert_eq!(ftl.stats().nameless_remap_capacity, 100);
    let a = put(&mut ftl, &[0, 1, 2], 1);
    ftl.nameless_ack(&a).unwrap();
    ftl.nameless_ack(&[NamelessAddr::from_u64(u64::MAX - 1)])
        .unwrap();
    holds(&mut ftl, a[1], 1, 1);
    ftl.nameless_free(&a[..1]).unwrap();
    ftl.nameless_ack(&a[..1]).unwrap();
    assert!(matches!(
        nameless_error(ftl.nameless_read(a[0])),
        NamelessError::NotLive { .. }
    ));
    assert_eq!(ftl.stats().nameless_remap_entries, 0);
    ftl.nameless_commit().unwrap();
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, cfg).unwrap();
    holds(&mut ftl, a[2], 2, 1);
    let smaller = FtlConfig {
        nameless_remap_entries: 7,
        ..FtlConfig::default()
    };
    let mut ftl = crash_and_mount(ftl, smaller);
    assert_eq!(ftl.stats().nameless_remap_capacity, 7);
    assert_eq!(ftl.stats().nameless_remap_entries, 0);
    assert!(
        ftl.next_events(8).unwrap().is_empty(),
        "a commit covered every block and nothing moved"
    );
    holds(&mut ftl, a[1], 1, 1);
    // A volume without the segment refuses the ack like any nameless call.
    let mut small = small_oob();
    assert!(matches!(
        nameless_error(small.nameless_ack(&a)),
        NamelessError::Unsupported { .. }
    ));
}

/// Takes the events ready now: for each `Migrated`, checks its md names
/// the block `held` has at `old`, that `old` still reads it (redirected)
/// and re-keys it to `new`. Returns the moves, (old, new).
fn follow_moves(
    ftl: &mut Driver<SimDevice>,
    held: &mut BTreeMap<NamelessAddr, (u64, u32)>,
) -> Vec<(NamelessAddr, NamelessAddr)> {
    let mb = ftl.nameless_md_bytes();
    let mut olds = Vec::new();
    while let Some(e) = ftl.poll_event() {
        let NamelessEvent::Migrated { old, new, md: m } = e else {
            panic!("an event of another kind while running: {e:?}");
        };
        let (key, version) = held
            .remove(&old)
            .unwrap_or_else(|| panic!("{old:?} moved, not held"));
        assert_eq!(m, md(key, version, mb), "md of the move {old:?} -> {new:?}");
        holds(ftl, old, key, version);
        holds(ftl, new, key, version);
        held.insert(new, (key, version));
        olds.push((old, new));
    }
    olds
}

/// Random frees leave partly live nameless zones; GC collects them by
/// migrating their live blocks: the client is told by `Migrated` events,
/// the old address reaches the block until acknowledged and is stale
/// after, and the volume writes on far past its size without `NoSpace`.
/// Unacknowledged moves survive a crash (their events come again) and a
/// clean remount.
fn gc_migrates_partly_live_nameless_zones_and_the_client_follows_the_events_in(oob: bool) {
    let mut ftl = format(oob);
    let capacity = ftl.logical_blocks();
    let mut rng = Rng::new(7);
    let mut held: BTreeMap<NamelessAddr, (u64, u32)> = BTreeMap::new();
    let mut unacked: Vec<(NamelessAddr, NamelessAddr)> = Vec::new();
    let mut acked: Vec<(NamelessAddr, NamelessAddr)> = Vec::new();
    let mut key = 0u64;
    let mut written = 0u64;
    while written < 6 * capacity {
        let keys: Vec<u64> = (key..key + 32).collect();
        key += 32;
        for (a, &k) in put(&mut ftl, &keys, 1).into_iter().zip(&keys) {
            held.insert(a, (k, 1));
        }
        written += 32;
        // Keep about half the volume live, freed at random.
        while held.len() as u64 > capacity / 2 {
            let i = rng.next_u64() as usize % held.len();
            let a = *held.keys().nth(i).unwrap();
            held.remove(&a);
            ftl.nameless_free(&[a]).unwrap();
        }
        let moved = follow_moves(&mut ftl, &mut held);
        // Every other batch is acknowledged at once, the rest later (their
        // old addresses redirect meanwhile): by an ack, or by a commit,
        // which acknowledges the moves taken before it.
        match rng.next_u64() % 4 {
            0 | 1 => {
                let olds: Vec<NamelessAddr> = moved.iter().map(|m| m.0).collect();
                ftl.nameless_ack(&olds).unwrap();
                acked.extend(moved);
            }
            2 => unacked.extend(moved),
            _ => {
                unacked.extend(moved);
                ftl.nameless_commit().unwrap();
                acked.append(&mut unacked);
            }
        }
    }

    let s = ftl.stats();
    assert!(s.nameless_migrated_blocks > 0, "nothing migrated: {s:?}");
    assert!(s.erases > 0);
    assert_eq!(s.nameless_live_blocks, held.len() as u64);
    for &(old, _) in acked.iter().filter(|m| !held.contains_key(&m.0)).take(64) {
        match nameless_error(ftl.nameless_read(old)) {
            NamelessError::Stale { .. } | NamelessError::NotLive { .. } => {}
            other => panic!("acknowledged {old:?}: {other:?}"),
        }
    }
    // The moves not yet acknowledged survive a crash: their events come
    // again after the mount (with the blocks written since the last
    // commit), and their old addresses still redirect.
    let mut ftl = crash_and_mount(ftl, FtlConfig::default());
    let mut again = BTreeSet::new();
    loop {
        let batch = ftl.next_events(16).unwrap();
        if batch.is_empty() {
            break;
        }
        for e in batch {
            match e {
                NamelessEvent::Migrated { old, new, .. } => {
                    if let Some(h) = held.remove(&old) {
                        held.insert(new, h); // moved after the last follow
                    }
                    assert!(held.contains_key(&new), "{old:?} -> {new:?}: not held");
                    again.insert(old);
                }
                NamelessEvent::Unrecorded { addr, .. } => {
                    assert!(held.contains_key(&addr), "{addr:?} handed over, not held")
                }
                other => panic!("{other:?}"),
            }
        }
    }
    // (A move whose new block was freed since went with the free.)
    for (old, _) in unacked.iter().filter(|m| held.contains_key(&m.1)) {
        assert!(again.contains(old), "{old:?}: no event after the crash");
    }
    for (&a, &(k, v)) in held.iter().take(256) {
        holds(&mut ftl, a, k, v);
    }
    let olds: Vec<NamelessAddr> = again.into_iter().collect();
    ftl.nameless_ack(&olds).unwrap();
    assert_eq!(ftl.stats().nameless_remap_entries, 0);
    ftl.nameless_commit().unwrap();
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    assert!(ftl.next_events(8).unwrap().is_empty());
    for (&a, &(k, v)) in &held {
        holds(&mut ftl, a, k, v);
    }
    let mut dev = ftl.shutdown().unwrap();
    common::assert_check_clean(&mut dev, "after migrations");
}

#[test]
fn gc_migrates_partly_live_nameless_zones_and_the_client_follows_the_events() {
    gc_migrates_partly_live_nameless_zones_and_the_client_follows_the_events_in(true);
}

#[test]
fn gc_migrates_partly_live_nameless_zones_and_the_client_follows_the_events_in_band() {
    gc_migrates_partly_live_nameless_zones_and_the_client_follows_the_events_in(false);
}

/// A client that follows moves but never acknowledges them leaves GC
/// zones it may not collect: writes then answer `MovesUnacknowledged`
/// (not `NoSpace`: the live blocks fit), and a commit, acknowledging the
/// moves delivered, lets them go on past the volume's size again.
fn unacknowledged_moves_holding_the_room_get_their_own_error_and_a_commit_frees_it_in(oob: bool) {
    let mut ftl = format(oob);
    let capacity = ftl.logical_blocks();
    let mut rng = Rng::new(11);
    let mut held: BTreeMap<NamelessAddr, (u64, u32)> = BTreeMap::new();
    let mut key = 0u64;
    let mut churn = |ftl: &mut Driver<SimDevice>,
                     held: &mut BTreeMap<NamelessAddr, (u64, u32)>,
                     key: &mut u64|
     -> Result<(), IoError> {
        let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
        let keys: Vec<u64> = (*key..*key + 32).collect();
        let data: Vec<u8> = keys.iter().flat_map(|&k| pattern(k, 1, bs)).collect();
        let meta: Vec<u8> = keys.iter().flat_map(|&k| md(k, 1, mb)).collect();
        let addrs = ftl.nameless_write(&data, &meta)?;
        *key += 32;
        for (a, &k) in addrs.into_iter().zip(&keys) {
            held.insert(a, (k, 1));
        }
        while held.len() as u64 > capacity * 3 / 4 {
            let i = rng.next_u64() as usize % held.len();
            let a = *held.keys().nth(i).unwrap();
            held.remove(&a);
            ftl.nameless_free(&[a]).unwrap();
        }
        follow_moves(ftl, held);
        Ok(())
    };
    let mut written = 0u64;
    let error = loop {
        assert!(
            written < 40 * capacity,
            "{written} blocks written with no move acknowledged: {:?}",
            ftl.stats()
        );
        match churn(&mut ftl, &mut held, &mut key) {
            Ok(()) => written += 32,
            Err(e) => break e,
        }
    };
    let s = ftl.stats();
    match error {
        IoError::Nameless(NamelessError::MovesUnacknowledged { entries }) => {
            assert!(entries > 0);
            assert_eq!(u64::from(entries), s.nameless_remap_entries);
        }
        other => panic!("after {written} blocks: {other:?} ({s:?})"),
    }
    assert!(s.nameless_live_blocks < capacity, "{s:?}");
    // The moves whose events were not out when the write failed (their
    // notes not yet durable) are taken first: a commit acknowledges only
    // those delivered.
    ftl.settle().unwrap();
    follow_moves(&mut ftl, &mut held);
    assert_eq!(ftl.stats().nameless_events_pending, 0);
    let before = ftl.stats().nameless_migrated_blocks;
    ftl.nameless_commit().unwrap();
    // Every entry left is of a move made while the commit flushed.
    let after = ftl.stats();
    assert!(
        after.nameless_remap_entries <= after.nameless_migrated_blocks - before,
        "{after:?}"
    );
    let mut more = 0u64;
    while more < 2 * capacity {
        churn(&mut ftl, &mut held, &mut key).unwrap();
        ftl.nameless_commit().unwrap();
        more += 32;
    }
    for (&a, &(k, v)) in held.iter().take(256) {
        holds(&mut ftl, a, k, v);
    }
}

#[test]
fn unacknowledged_moves_holding_the_room_get_their_own_error_and_a_commit_frees_it() {
    unacknowledged_moves_holding_the_room_get_their_own_error_and_a_commit_frees_it_in(true);
}

#[test]
fn unacknowledged_moves_holding_the_room_get_their_own_error_and_a_commit_frees_it_in_band() {
    unacknowledged_moves_holding_the_room_get_their_own_error_and_a_commit_frees_it_in(false);
}

/// Erases of the least and most worn zones in service, and the blocks
/// leveling moved, after cold nameless blocks (written once, 40 % of the
/// volume) sit beside hot ones written and freed a zone at a time until
/// the most-worn zone has `erases` erases. The client follows every move
/// (a commit every round acknowledges them); the cold blocks read back.
fn hot_and_cold(oob: bool, wear: Option<NamelessWear>, erases: u32) -> zftl_core::FtlStats {
    let cfg = FtlConfig {
        nameless_wear: wear,
        ..FtlConfig::default()
    };
    let mut ftl = common::format_with(oob, volume_config(oob), cfg);
    let cold_blocks = ftl.logical_blocks() * 2 / 5;
    let mut held: BTreeMap<NamelessAddr, (u64, u32)> = BTreeMap::new();
    put_keys(&mut ftl, cold_blocks, &mut held);
    let mut round = 0u32;
    while ftl.stats().erase_count_max < erases {
        round += 1;
        let keys: Vec<u64> = (1 << 32..(1 << 32) + 64).collect();
        let hot = put(&mut ftl, &keys, round);
        ftl.nameless_free(&hot).unwrap();
        follow_moves(&mut ftl, &mut held);
        ftl.nameless_commit().unwrap();
        assert!(
            round < 100_000,
            "the most-worn zone never reached {erases} erases"
        );
    }
    ftl.settle().unwrap();
    follow_moves(&mut ftl, &mut held);
    ftl.nameless_commit().unwrap();
    assert_eq!(ftl.stats().nameless_live_blocks, cold_blocks);
    for (&a, &(k, v)) in &held {
        holds(&mut ftl, a, k, v);
    }
    ftl.stats()
}

/// GC migrates partly live zones, never one whose data all lives: with md
/// in band a zone's md blocks are no room to free (scored as dead they
/// made every cold zone a candidate, and the only one old enough while the
/// hot zones were younger than the committed checkpoint).
fn gc_never_migrates_a_zone_whose_data_all_lives_in(oob: bool) {
    // Cost-benefit favours old zones: the cold ones are the oldest.
    let cfg = FtlConfig {
        gc_policy: zftl_core::VictimPolicy::CostBenefit,
        ..FtlConfig::default()
    };
    // Zones of 1 024 blocks (as `bench nameless`'s): in band 13 md blocks
    // each, more than the 8 of a logical zone's summary.
    let sim = zftl::sim::SimConfig {
        blocks_per_lun: 16,
        oob_size_bytes: if oob { 64 } else { 0 },
        ..zftl::sim::SimConfig::default()
    };
    let mut ftl = common::format_with(oob, sim, cfg);
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    // A zone's use (zone, generation) that ever held a block that is freed
    // later; cold blocks never are, so a use outside it has all its data live.
    let use_of = |a: NamelessAddr| (a.ppa().zone(cap), a.generation());
    let mut mixed: BTreeSet<(u32, u32)> = BTreeSet::new();
    // §6.6's workload: 90 % of the logical size written, then its first
    // eighth (the hot keys) overwritten at random, a commit every 1 024.
    let hot_keys = ftl.logical_blocks() / 8;
    let all_keys = ftl.logical_blocks() * 9 / 10;
    let mut held: BTreeMap<NamelessAddr, (u64, u32)> = BTreeMap::new();
    let mut at: Vec<(NamelessAddr, u32)> = put_keys(&mut ftl, all_keys, &mut held)
        .into_iter()
        .map(|a| (a, 1))
        .collect();
    mixed.extend(at[..hot_keys as usize].iter().map(|&(a, _)| use_of(a)));
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let (mut moves, mut all_live_moves) = (0u64, 0u64);
    for round in 0..hot_keys * 20 / 16 {
        let mut keys: Vec<u64> = (0..16)
            .map(|_| {
                rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                (rng >> 33) % hot_keys
            })
            .collect();
        keys.sort_unstable();
        keys.dedup();
        let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
        let old: Vec<NamelessAddr> = keys.iter().map(|&k| at[k as usize].0).collect();
        let v: Vec<u32> = keys.iter().map(|&k| at[k as usize].1 + 1).collect();
        let data: Vec<u8> = keys
            .iter()
            .zip(&v)
            .flat_map(|(&k, &v)| pattern(k, v, bs))
            .collect();
        let meta: Vec<u8> = keys
            .iter()
            .zip(&v)
            .flat_map(|(&k, &v)| md(k, v, mb))
            .collect();
        let new = ftl.nameless_overwrite(&old, &data, &meta).unwrap();
        for ((&k, &v), (o, a)) in keys.iter().zip(&v).zip(old.iter().zip(new)) {
            held.remove(o);
            held.insert(a, (k, v));
            at[k as usize] = (a, v);
            mixed.insert(use_of(a));
        }
        for (old, new) in follow_moves(&mut ftl, &mut held) {
            moves += 1;
            all_live_moves += u64::from(!mixed.contains(&use_of(old)));
            let (k, v) = held[&new];
            at[k as usize] = (new, v);
            if k < hot_keys {
                mixed.insert(use_of(new));
            }
        }
        if round % 64 == 63 {
            ftl.nameless_commit().unwrap();
        }
    }
    assert!(moves > 0, "GC migrated nothing: {:?}", ftl.stats());
    assert_eq!(
        all_live_moves,
        0,
        "blocks migrated from zones whose data all lives: {all_live_moves} of {moves} {:?}",
        ftl.stats()
    );
    for (&a, &(k, v)) in &held {
        holds(&mut ftl, a, k, v);
    }
}

#[test]
fn gc_never_migrates_a_zone_whose_data_all_lives() {
    gc_never_migrates_a_zone_whose_data_all_lives_in(true);
}

#[test]
fn gc_never_migrates_a_zone_whose_data_all_lives_in_band() {
    gc_never_migrates_a_zone_whose_data_all_lives_in(false);
}

/// GC's best migration victim written since the committed checkpoint waits
/// for the next one: GC does not migrate an older zone with more live
/// blocks meanwhile (docs/design.md, "Choosing a victim"). Greedy victims;
/// cold zones one block short of full, checkpointed; then hot zones
/// written and mostly freed (after that checkpoint). Taking the best old
/// zone instead, GC migrated the cold zones (every one a candidate) while
/// the hot ones were young.
fn gc_waits_for_a_checkpoint_rather_than_migrate_an_older_fuller_zone_in(oob: bool) {
    let cfg = FtlConfig {
        gc_policy: zftl_core::VictimPolicy::Greedy,
        ..FtlConfig::default()
    };
    let mut ftl = common::format_with(oob, volume_config(oob), cfg);
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let use_of = |a: NamelessAddr| (a.ppa().zone(cap), a.generation());
    let mut held: BTreeMap<NamelessAddr, (u64, u32)> = BTreeMap::new();
    let logical = ftl.logical_blocks();
    let cold = put_keys(&mut ftl, logical * 3 / 5, &mut held);
    let mut cold_uses = BTreeSet::new();
    for &a in &cold {
        if cold_uses.insert(use_of(a)) {
            held.remove(&a);
            ftl.nameless_free(&[a]).unwrap();
        }
    }
    // The last cold zone takes hot blocks too.
    cold_uses.remove(&use_of(*cold.last().unwrap()));
    ftl.nameless_commit().unwrap();
    ftl.checkpoint().unwrap();
    // Hot rounds of a zone's worth, each keeping an eighth; the oldest
    // survivors freed once they pass a tenth of the volume.
    let mut survivors: std::collections::VecDeque<NamelessAddr> = Default::default();
    let (mut moved, mut cold_moved) = (0u64, 0u64);
    let mut key = 1u64 << 32;
    for round in 1..=300u32 {
        let keys: Vec<u64> = (key..key + cap).collect();
        key += cap;
        let addrs = put(&mut ftl, &keys, round);
        for (i, (&a, &k)) in addrs.iter().zip(&keys).enumerate() {
            if i % 8 == 0 {
                held.insert(a, (k, round));
                survivors.push_back(a);
            } else {
                ftl.nameless_free(&[a]).unwrap();
            }
        }
        while survivors.len() as u64 > logical / 10 {
            let a = survivors.pop_front().unwrap();
            // (Moved since: the client holds its new address.)
            if held.remove(&a).is_some() {
                ftl.nameless_free(&[a]).unwrap();
            }
        }
        for (old, new) in follow_moves(&mut ftl, &mut held) {
            moved += 1;
            cold_moved += u64::from(cold_uses.contains(&use_of(old)));
            if let Some(s) = survivors.iter_mut().find(|s| **s == old) {
                *s = new;
            }
        }
        ftl.nameless_commit().unwrap();
    }
    let s = ftl.stats();
    assert!(moved > 0 && s.erases > 0, "GC migrated nothing: {s:?}");
    assert_eq!(
        cold_moved, 0,
        "GC migrated {cold_moved} blocks of old, nearly full zones ({moved} in all): {s:?}"
    );
    for (&a, &(k, v)) in &held {
        holds(&mut ftl, a, k, v);
    }
}

#[test]
fn gc_waits_for_a_checkpoint_rather_than_migrate_an_older_fuller_zone() {
    gc_waits_for_a_checkpoint_rather_than_migrate_an_older_fuller_zone_in(true);
}

#[test]
fn gc_waits_for_a_checkpoint_rather_than_migrate_an_older_fuller_zone_in_band() {
    gc_waits_for_a_checkpoint_rather_than_migrate_an_older_fuller_zone_in(false);
}

/// The paper's §6.6 policy (`FtlConfig::nameless_wear`): once the most
/// worn zone has used 75 % of its endurance, GC moves cold nameless zones
/// onto the most-worn free zones, so the zones the cold data held take
/// erases too: the spread of erase counts narrows against the same run
/// without it, and every cold block follows its moves.
fn nameless_wear_leveling_moves_cold_data_onto_worn_zones_in(oob: bool) {
    let endurance = 24;
    let off = hot_and_cold(oob, None, endurance);
    let on = hot_and_cold(oob, Some(NamelessWear::paper(endurance)), endurance);
    let (min_off, max_off, moved_off) =
        (off.erase_count_min, off.erase_count_max, off.wl_move_blocks);
    let (min_on, max_on, moved_on) = (on.erase_count_min, on.erase_count_max, on.wl_move_blocks);
    eprintln!(
        "erases without leveling {min_off}..{max_off}, with {min_on}..{max_on} \
         ({moved_on} blocks moved)"
    );
    assert_eq!(moved_off, 0);
    assert_eq!(min_off, 0, "cold zones take no erase without leveling");
    assert!(moved_on > 0, "leveling moved nothing");
    assert!(
        min_on > 0,
        "a cold zone was never moved: min {min_on} max {max_on}"
    );
    assert!(
        max_on - min_on < max_off - min_off,
        "spread with leveling {min_on}..{max_on}, without {min_off}..{max_off}"
    );
    // What the moves cost in metadata: a NamelessMigrate note per block
    // moved (in band with its two NamelessMd notes) and one NamelessAck
    // per entry acknowledged (every move is followed and acknowledged
    // here), and the peak of the remap table.
    assert_eq!(off.nameless_migration_note_bytes, 0);
    assert_eq!(off.nameless_remap_peak_entries, 0);
    let notes = on.nameless_migration_note_bytes;
    let moved = on.nameless_migrated_blocks;
    let per_move = if oob { 32 } else { 96 };
    assert!(
        notes > per_move * moved && notes <= (per_move + 32) * moved,
        "{on:?}"
    );
    assert!(on.nameless_remap_peak_entries > 0, "{on:?}");
    assert!(on.nameless_remap_peak_entries <= on.nameless_migrated_blocks);
    assert_eq!(on.nameless_remap_entries, 0, "every move acknowledged");
}

#[test]
fn nameless_wear_leveling_moves_cold_data_onto_worn_zones() {
    nameless_wear_leveling_moves_cold_data_onto_worn_zones_in(true);
}

#[test]
fn nameless_wear_leveling_moves_cold_data_onto_worn_zones_in_band() {
    nameless_wear_leveling_moves_cold_data_onto_worn_zones_in(false);
}

/// Past the endurance (these blocks never wear out) leveling still acts
/// only where it helps: it copies a zone's data onto zones that were more
/// than one erase above the mean when leveling took them (worn), off a
/// zone below the mean, so a block it moved waits for the mean to pass
/// the zone it went to: between two leveling moves of one block the mean
/// of the zones in service gains more than an erase since its zone was
/// taken. And it goes on once every zone is past the endurance, on erase
/// counts. (Before, remaining lives decided: a zone past the endurance had
/// none left and stayed worn while any zone had some, so leveling copied
/// onto whatever free zone was most worn; once none had any, nothing was
/// worn and leveling stopped, the least-worn zones left behind.) Cold
/// blocks (40 %) written once, hot ones written and freed a zone at a
/// time, so every move is leveling's: GC collects the hot zones empty.
fn nameless_leveling_past_the_endurance_goes_on_and_waits_for_the_mean_in(oob: bool) {
    let endurance = 6;
    let cfg = FtlConfig {
        nameless_wear: Some(NamelessWear::paper(endurance)),
        ..FtlConfig::default()
    };
    let mut ftl = common::format_with(oob, volume_config(oob), cfg);
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let cold_blocks = ftl.logical_blocks() * 2 / 5;
    let mut held: BTreeMap<NamelessAddr, (u64, u32)> = BTreeMap::new();
    put_keys(&mut ftl, cold_blocks, &mut held);
    // Per zone leveling copies into: the mean seen before the first copy
    // (when leveling took it, the mean was at least that). Per cold key:
    // that mean of the zone it went to.
    let mut taken_at: BTreeMap<u32, f64> = BTreeMap::new();
    let mut placed_at: BTreeMap<u64, f64> = BTreeMap::new();
    let (mut again, mut least_gain) = (0u64, f64::MAX);
    let mut mean_seen = ftl.stats().erase_count_mean;
    let mut round = 0u32;
    // Blocks leveling had moved when every zone had reached the endurance.
    let mut moved_at_end_of_life = None;
    while ftl.stats().erase_count_max < 4 * endurance {
        round += 1;
        let s = ftl.stats();
        if s.erase_count_min >= endurance && moved_at_end_of_life.is_none() {
            moved_at_end_of_life = Some(s.wl_move_blocks);
        }
        let keys: Vec<u64> = (1 << 32..(1 << 32) + 64).collect();
        let hot = put(&mut ftl, &keys, round);
        ftl.nameless_free(&hot).unwrap();
        // The moves followed here were made since the last look, at a
        // mean between the one seen then and the one now.
        let mean_now = ftl.stats().erase_count_mean;
        for (old, new) in follow_moves(&mut ftl, &mut held) {
            let key = held[&new].0;
            assert!(key < cold_blocks, "hot key {key} moved");
            // The zone moved off is reset: a later copy into it is to a
            // zone taken anew.
            taken_at.remove(&old.ppa().zone(cap));
            let taken = *taken_at.entry(new.ppa().zone(cap)).or_insert(mean_seen);
            if let Some(before) = placed_at.insert(key, taken) {
                again += 1;
                least_gain = least_gain.min(mean_now - before);
                assert!(
                    mean_now - before > 1.0,
                    "key {key} moved again at mean {mean_now:.2}, its zone taken at mean \
                     {before:.2} or more (round {round})"
                );
            }
        }
        mean_seen = mean_now;
        ftl.nameless_commit().unwrap();
        assert!(round < 200_000, "no zone reached {} erases", 4 * endurance);
    }
    let s = ftl.stats();
    eprintln!(
        "erases {}..{} (mean {:.2}): {} blocks moved, {again} of them moved before, \
         the mean gained {least_gain:.2} or more in between",
        s.erase_count_min, s.erase_count_max, s.erase_count_mean, s.wl_move_blocks
    );
    assert_eq!(s.wl_move_blocks, s.nameless_migrated_blocks, "{s:?}");
    assert!(
        again > 0,
        "no block moved twice: the property went untested"
    );
    let before = moved_at_end_of_life.expect("every zone reached the endurance");
    assert!(
        s.wl_move_blocks > before,
        "leveling stopped once every zone was past the endurance: erases {}..{}",
        s.erase_count_min,
        s.erase_count_max
    );
    ftl.settle().unwrap();
    follow_moves(&mut ftl, &mut held);
    ftl.nameless_commit().unwrap();
    for (&a, &(k, v)) in &held {
        holds(&mut ftl, a, k, v);
    }
}

#[test]
fn nameless_leveling_past_the_endurance_goes_on_and_waits_for_the_mean() {
    nameless_leveling_past_the_endurance_goes_on_and_waits_for_the_mean_in(true);
}

#[test]
fn nameless_leveling_past_the_endurance_goes_on_and_waits_for_the_mean_in_band() {
    nameless_leveling_past_the_endurance_goes_on_and_waits_for_the_mean_in(false);
}
