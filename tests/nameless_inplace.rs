//! In-place collection of a nameless zone (docs/design.md, "In-place
//! collection on ZNS"), md in OOB on the simulator: a zone of mixed live
//! and dead blocks is staged, reset and rewritten while writes, reads and
//! frees arrive; every live block keeps its address, data and md, queued
//! writes fill the gaps (the freed addresses there answer `Stale`), and a
//! power cut after any device command of the job (and during the mount's
//! redo) loses none of them. GC starts jobs by itself once the remap table
//! is full. The job, the cuts and the controller resets run in band too
//! (md in the log: a staging index in the scratch zone, the fills' notes).
//! `ZFTL_SEEDS` widens the cut run.

use std::collections::{BTreeMap, BTreeSet};
use zftl::core::{Driver, FtlConfig, IoError, NamelessAddr, NamelessError, NamelessEvent, Request};
use zftl::sim::{Faults, PowerCut, SimDevice};

mod common;
use common::{assert_check_clean, format_on, pattern, volume_config};

fn md(key: u64, version: u32, md_bytes: usize) -> Vec<u8> {
    let mut m = vec![0u8; md_bytes];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..12].copy_from_slice(&version.to_le_bytes());
    m
}

fn put(ftl: &mut Driver<SimDevice>, keys: &[u64]) -> Result<Vec<NamelessAddr>, IoError> {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let data: Vec<u8> = keys.iter().flat_map(|&k| pattern(k, 1, bs)).collect();
    let meta: Vec<u8> = keys.iter().flat_map(|&k| md(k, 1, mb)).collect();
    ftl.nameless_write(&data, &meta)
}

fn holds(ftl: &mut Driver<SimDevice>, addr: NamelessAddr, key: u64, when: &str) {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let (data, meta) = ftl
        .nameless_read(addr)
        .unwrap_or_else(|e| panic!("{when}: read of key {key} at {addr:?}: {e}"));
    assert!(
        data == pattern(key, 1, bs),
        "{when}: data of key {key} at {addr:?}"
    );
    assert_eq!(meta, md(key, 1, mb), "{when}: md of key {key} at {addr:?}");
}

/// A volume with one Full nameless zone of mixed live and dead blocks,
/// flushed, committed and older than the committed checkpoint: the zone,
/// its live blocks by address (with their keys) and its freed addresses.
struct Victim {
    ftl: Driver<SimDevice>,
    zone: u32,
    live: BTreeMap<NamelessAddr, u64>,
    freed: Vec<NamelessAddr>,
}

/// With tags in OOB (md in OOB) or in band (md in the log).
fn victim_on(oob: bool) -> Victim {
    let mut ftl = format_on(oob, volume_config(oob));
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let mut addrs = Vec::new();
    // One write at a time stays in one zone; a zone and a half.
    for first in (0..cap * 3 / 2).step_by(8) {
        let keys: Vec<u64> = (first..first + 8).collect();
        addrs.extend(put(&mut ftl, &keys).unwrap().into_iter().zip(keys));
    }
    let zone = addrs[0].0.ppa().zone(cap);
    let mut live = BTreeMap::new();
    let mut freed = Vec::new();
    for (i, &(a, k)) in addrs.iter().enumerate() {
        if a.ppa().zone(cap) != zone {
            continue;
        }
        // Dead runs and single dead blocks among the live ones.
        if i % 3 == 1 || (i / 8) % 4 == 2 {
            freed.push(a);
        } else {
            live.insert(a, k);
        }
    }
    // In band the zone's md blocks take a few of its blocks.
    let data_blocks = (live.len() + freed.len()) as u64;
    assert!(
        data_blocks == cap || (!oob && data_blocks < cap && data_blocks > cap * 9 / 10),
        "the victim zone is written full ({data_blocks} of {cap} blocks)"
    );
    ftl.nameless_free(&freed).unwrap();
    ftl.nameless_commit().unwrap();
    ftl.checkpoint().unwrap();
    Victim {
        ftl,
        zone,
        live,
        freed,
    }
}

/// Every live block reads its data and md; every freed address answers
/// `Stale` to a read, a free and an overwrite where a gap fill (a live
/// block of `v.live` at the same offset) holds its offset now, `NotLive`
/// elsewhere.
fn check_victim(v: &mut Victim, when: &str) {
    let live: Vec<(NamelessAddr, u64)> = v.live.iter().map(|(&a, &k)| (a, k)).collect();
    for &(a, k) in &live {
        holds(&mut v.ftl, a, k, when);
    }
    let filled: BTreeSet<u32> = live.iter().map(|(a, _)| a.ppa().0).collect();
    let (bs, mb) = (v.ftl.block_size(), v.ftl.nameless_md_bytes());
    for &a in &v.freed {
        let stale = filled.contains(&a.ppa().0);
        let answers = [
            ("read", v.ftl.nameless_read(a).map(drop)),
            ("free", v.ftl.nameless_free(&[a])),
            (
                "overwrite",
                v.ftl
                    .nameless_overwrite(&[a], &pattern(9, 9, bs), &md(9, 9, mb))
                    .map(drop),
            ),
        ];
        for (op, answer) in answers {
            match answer {
                Err(IoError::Nameless(NamelessError::Stale { .. })) if stale => {}
                Err(IoError::Nameless(NamelessError::NotLive { .. })) if !stale => {}
                other => panic!("{when}: {op} of freed {a:?} (filled: {stale}): {other:?}"),
            }
        }
    }
}

/// The hand-over's unrecorded blocks in the victim after a mount (gap
/// fills whose reply a cut took): recorded as live with the key their md
/// names. Returns how many.
fn take_unrecorded_fills(v: &mut Victim) -> usize {
    let cap = v.ftl.ftl().geometry().zone_capacity_blocks;
    v.ftl.settle().unwrap();
    let mut n = 0;
    while let Some(e) = v.ftl.poll_event() {
        if let NamelessEvent::Unrecorded { addr, md } = e {
            if addr.ppa().zone(cap) == v.zone {
                let key = u64::from_le_bytes(md[..8].try_into().unwrap());
                v.live.insert(addr, key);
                n += 1;
            }
        }
    }
    n
}

/// Addresses of a write answered while a job ran that landed in the victim
/// (gap fills): recorded as live with their keys. Returns how many.
fn record_fills(v: &mut Victim, addrs: &[NamelessAddr], keys: &[u64]) -> usize {
    let cap = v.ftl.ftl().geometry().zone_capacity_blocks;
    let mut n = 0;
    for (&a, &k) in addrs.iter().zip(keys) {
        if a.ppa().zone(cap) == v.zone {
            v.live.insert(a, k);
            n += 1;
        }
    }
    n
}

#[test]
fn in_place_collection_keeps_every_live_block_at_its_address_while_requests_arrive() {
    keeps_every_live_block_while_requests_arrive(true);
}

#[test]
fn in_place_collection_keeps_every_live_block_at_its_address_while_requests_arrive_in_band() {
    keeps_every_live_block_while_requests_arrive(false);
}

fn keeps_every_live_block_while_requests_arrive(oob: bool) {
    let mut v = victim_on(oob);
    let cap = v.ftl.ftl().geometry().zone_capacity_blocks;
    let erases = v.ftl.ftl().stats().erases;
    assert!(v.ftl.start_in_place(v.zone), "the job starts");
    assert!(!v.ftl.start_in_place(v.zone), "one job at a time");
    // Requests while it runs: writes (other zones), reads of the victim's
    // blocks (served from it, or parked until the rewrite passes them),
    // and a free of one of its live blocks (a gap, padded).
    let mut turns = 0;
    let mut next_key = 10_000;
    let mut freed_during = None;
    let mut fills = 0;
    while v.ftl.ftl().in_place_running() {
        let keys: Vec<u64> = (next_key..next_key + 2).collect();
        next_key += 2;
        let addrs = put(&mut v.ftl, &keys).unwrap();
        fills += record_fills(&mut v, &addrs, &keys);
        let (&a, &k) = v.live.iter().nth(turns % v.live.len()).unwrap();
        holds(&mut v.ftl, a, k, "during the job");
        if turns == 3 {
            let (&a, _) = v.live.iter().next_back().unwrap();
            v.ftl.nameless_free(&[a]).unwrap();
            v.live.remove(&a);
            v.freed.push(a);
            freed_during = Some(a);
        }
        v.ftl.turn().unwrap();
        turns += 1;
        assert!(turns < 10_000, "the job does not end");
    }
    assert!(freed_during.is_some(), "the job ran past a few requests");
    v.ftl.settle().unwrap();
    let s = v.ftl.ftl().stats();
    assert_eq!(s.nameless_inplace_jobs, 1);
    let kept = v.live.len() - fills;
    assert!(s.nameless_staged_blocks >= kept as u64);
    assert!(s.nameless_staged_blocks <= kept as u64 + 1);
    assert_eq!(s.nameless_gap_fill_blocks, fills as u64);
    if oob {
        assert_eq!(
            s.nameless_pad_blocks + s.nameless_gap_fill_blocks,
            cap - kept as u64
        );
    } else {
        // In band the zone's md blocks are rewritten too.
        let md_blocks = cap - kept as u64 - s.nameless_pad_blocks - s.nameless_gap_fill_blocks;
        assert!(
            (1..=8).contains(&md_blocks),
            "{md_blocks} md blocks rewritten"
        );
    }
    assert!(s.erases > erases, "the victim was reset");
    check_victim(&mut v, "after the job");
    // A crash (no checkpoint since the job) and a clean remount.
    let cfg = FtlConfig::default();
    v.ftl.flush().unwrap();
    v.ftl = Driver::mount(v.ftl.into_backend(), cfg.clone()).unwrap();
    check_victim(&mut v, "after a crash");
    let mut dev = v.ftl.shutdown().unwrap();
    assert_check_clean(&mut dev, "after the job");
    v.ftl = Driver::mount(dev, cfg).unwrap();
    check_victim(&mut v, "after a clean remount");
    // The zone can be collected in place again.
    v.ftl.checkpoint().unwrap();
    assert!(v.ftl.start_in_place(v.zone), "a second job starts");
    v.ftl.settle().unwrap();
    check_victim(&mut v, "after a second job");
}

#[test]
fn a_zone_that_is_not_a_full_nameless_zone_older_than_the_checkpoint_is_refused() {
    for oob in [true, false] {
        let mut v = victim_on(oob);
        let cap = v.ftl.ftl().geometry().zone_capacity_blocks;
        let zones = v.ftl.ftl().geometry().zone_count;
        assert!(!v.ftl.start_in_place(zones), "a zone past the device");
        assert!(!v.ftl.start_in_place(0), "a superblock zone");
        let fresh = put(&mut v.ftl, &[77]).unwrap()[0].ppa().zone(cap);
        assert!(!v.ftl.start_in_place(fresh), "a zone a lane holds");
        // Written since the committed checkpoint: it waits for the next.
        let last = put(&mut v.ftl, &[78]).unwrap()[0];
        let z = last.ppa().zone(cap);
        assert_ne!(z, v.zone);
        assert_eq!(v.ftl.ftl().stats().nameless_inplace_jobs, 0);
    }
}

/// Seeds of the cut run: `ZFTL_SEEDS=a..b` (a cut after each device
/// command of the job for every seed; the seed picks the requests that
/// arrive and whether the mount is cut too).
fn seeds() -> std::ops::Range<u64> {
    std::env::var("ZFTL_SEEDS")
        .ok()
        .and_then(|s| {
            let (a, b) = s.split_once("..")?;
            Some(a.parse().ok()?..b.parse().ok()?)
        })
        .unwrap_or(0..3)
}

#[test]
fn a_power_cut_after_any_command_of_the_job_or_of_the_mounts_redo_loses_no_live_block() {
    power_cut_after_any_command(true);
}

#[test]
fn a_power_cut_after_any_command_of_the_job_or_of_the_mounts_redo_loses_no_live_block_in_band() {
    power_cut_after_any_command(false);
}

fn power_cut_after_any_command(oob: bool) {
    let cfg = FtlConfig::default();
    let mut pending_seen = 0;
    let mut fills_seen = 0;
    let mut mount_cuts = 0;
    let mut cuts = 0;
    for seed in seeds() {
        for after in 1.. {
            let mut v = victim_on(oob);
            v.ftl.backend_mut().set_faults(Faults {
                seed: seed * 1_000 + after,
                power_cut: PowerCut::AfterSubmits(after),
                shuffle_completions: true,
                ..Faults::default()
            });
            assert!(v.ftl.start_in_place(v.zone));
            let mut k = 20_000;
            // Writes arrive while it runs (their blocks are not checked:
            // none was flushed).
            // An answered write in the victim is a gap fill: durable (its
            // InPlaceDone was), so it must survive the cut.
            while v.ftl.ftl().in_place_running() && v.ftl.backend().is_powered() {
                if seed % 2 == 0 {
                    match put(&mut v.ftl, &[k, k + 1]) {
                        Ok(addrs) => fills_seen += record_fills(&mut v, &addrs, &[k, k + 1]),
                        Err(_) => break,
                    }
                }
                k += 2;
                if v.ftl.turn().is_err() {
                    break;
                }
            }
            let _ = v.ftl.settle();
            let finished = v.ftl.backend().is_powered();
            let mut dev = v.ftl.into_backend();
            dev.power_cut();
            dev.power_on().unwrap();
            dev.set_faults(Faults::default());
            let crc = FtlConfig::default().data_crc_impl();
            let pending = zftl::core::recovery::recover_state(&mut dev, crc)
                .expect("recovery after a cut")
                .inplace_pending
                .is_some();
            pending_seen += u64::from(pending);
            if pending {
                // `zftl check` before the mount: the victim's live blocks
                // are checked in the scratch zone.
                assert_check_clean(&mut dev, "a pending job");
            }
            if pending && (seed + after) % 2 == 0 {
                // Cut the mount's redo too: the next mount redoes it again.
                dev.set_faults(Faults {
                    seed: seed ^ after,
                    power_cut: PowerCut::AfterSubmits(1 + (seed + after) % 9),
                    ..Faults::default()
                });
                if Driver::mount(&mut dev, cfg.clone()).is_err() {
                    mount_cuts += 1;
                }
                dev.power_cut();
                dev.power_on().unwrap();
                dev.set_faults(Faults::default());
            }
            let when = format!(
                "seed {seed}, cut after {after} commands (oob {oob}; replay: ZFTL_SEEDS={seed}..{})",
                seed + 1
            );
            v.ftl = Driver::mount(dev, cfg.clone()).unwrap_or_else(|e| panic!("{when}: {e}"));
            assert!(!v.ftl.ftl().in_place_running());
            // A fill whose reply the cut took survives once its
            // InPlaceDone was durable: handed over as unrecorded.
            fills_seen += take_unrecorded_fills(&mut v);
            check_victim(&mut v, &when);
            let mut dev = v.ftl.shutdown().unwrap();
            assert_check_clean(&mut dev, &when);
            cuts += 1;
            if finished {
                break; // the job ended before the cut
            }
        }
    }
    eprintln!(
        "in-place cuts: {cuts} ({pending_seen} with the job pending, {mount_cuts} mounts cut, \
         {fills_seen} gap fills kept)"
    );
    assert!(pending_seen > 0, "some cut left the job pending");
    assert!(fills_seen > 0, "some job filled a gap before its cut");
}

#[test]
fn controller_resets_during_the_job_repeat_its_flushes_and_reset_or_leave_the_volume_read_only() {
    controller_resets_during_the_job(true);
}

#[test]
fn controller_resets_during_the_job_repeat_its_flushes_and_reset_or_leave_the_volume_read_only_in_band(
) {
    controller_resets_during_the_job(false);
}

fn controller_resets_during_the_job(oob: bool) {
    let cfg = FtlConfig::default();
    let (mut finished, mut stopped) = (0, 0);
    for seed in seeds().map(|s| s * 7 + 1).chain(10..30) {
        let mut v = victim_on(oob);
        v.ftl.backend_mut().set_faults(Faults {
            seed,
            controller_reset_per_million: 30_000,
            ..Faults::default()
        });
        assert!(v.ftl.start_in_place(v.zone));
        let settled = v.ftl.settle();
        let when = format!("controller resets, seed {seed}");
        if settled.is_ok() && !v.ftl.ftl().is_read_only() {
            assert!(!v.ftl.ftl().in_place_running(), "{when}: the job ends");
            finished += 1;
        } else {
            stopped += 1;
        }
        let mut dev = v.ftl.into_backend();
        dev.set_faults(Faults::default());
        v.ftl = Driver::mount(dev, cfg.clone()).unwrap_or_else(|e| panic!("{when}: {e}"));
        check_victim(&mut v, &when);
        let mut dev = v.ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, &when);
    }
    eprintln!("controller resets: {finished} jobs finished, {stopped} stopped read-only");
    assert!(finished > 0, "some job finished through the resets");
}

/// Writes queued while a job runs fill the victim's gaps: their addresses
/// are in the victim, of a generation above every address it held, and
/// read back; the freed address at a filled offset answers `Stale` to a
/// read, a free and an overwrite (at an unfilled one `NotLive`), before
/// and after a crash and a clean remount, and `zftl check` agrees.
#[test]
fn queued_writes_fill_the_gaps_and_the_freed_addresses_there_answer_stale() {
    queued_writes_fill_the_gaps(true);
}

#[test]
fn queued_writes_fill_the_gaps_and_the_freed_addresses_there_answer_stale_in_band() {
    queued_writes_fill_the_gaps(false);
}

fn queued_writes_fill_the_gaps(oob: bool) {
    let mut v = victim_on(oob);
    let (bs, mb) = (v.ftl.block_size(), v.ftl.nameless_md_bytes());
    let old_gen = v.freed[0].generation();
    assert!(v.ftl.start_in_place(v.zone));
    let mut ids = Vec::new();
    let mut key = 50_000u64;
    while v.ftl.ftl().in_place_running() {
        // A few single-block writes queued each turn: those queued when
        // the rewrite reaches a gap fill it.
        for _ in 0..4 {
            if ids.len() < 600 {
                let request = Request::NamelessWrite {
                    data: pattern(key, 1, bs),
                    md: md(key, 1, mb),
                    fua: false,
                };
                ids.push((v.ftl.submit(request).unwrap(), key));
                key += 1;
            }
        }
        v.ftl.turn().unwrap();
    }
    v.ftl.settle().unwrap();
    let mut fills = Vec::new();
    for (id, k) in ids {
        let Ok(zftl::core::ReplyData::Addrs(addrs)) = v.ftl.wait_for(id) else {
            panic!("write of key {k} failed");
        };
        if record_fills(&mut v, &addrs, &[k]) > 0 {
            fills.push(addrs[0]);
        }
    }
    let s = v.ftl.ftl().stats();
    assert!(!fills.is_empty(), "no queued write filled a gap: {s:?}");
    assert_eq!(s.nameless_gap_fill_blocks, fills.len() as u64);
    assert_eq!(s.nameless_fill_entries, fills.len() as u64);
    for a in &fills {
        assert_eq!(a.generation(), old_gen + 1, "a fill's generation");
    }
    let filled_freed = v
        .freed
        .iter()
        .filter(|f| fills.iter().any(|a| a.ppa() == f.ppa()))
        .count();
    assert_eq!(
        filled_freed,
        fills.len(),
        "each fill sits on a freed offset"
    );
    check_victim(&mut v, "after the job");
    let cfg = FtlConfig::default();
    v.ftl.flush().unwrap();
    v.ftl = Driver::mount(v.ftl.into_backend(), cfg.clone()).unwrap();
    check_victim(&mut v, "after a crash");
    assert_eq!(
        v.ftl.ftl().stats().nameless_fill_entries,
        fills.len() as u64
    );
    let mut dev = v.ftl.shutdown().unwrap();
    assert_check_clean(&mut dev, "after the job with fills");
    v.ftl = Driver::mount(dev, cfg).unwrap();
    check_victim(&mut v, "after a clean remount (fills from the checkpoint)");
    assert_eq!(
        v.ftl.ftl().stats().nameless_fill_entries,
        fills.len() as u64
    );
    // A fill freed leaves the map; its old address stays stale.
    let gone = fills[0];
    v.ftl.nameless_free(&[gone]).unwrap();
    v.live.remove(&gone);
    v.freed.push(gone);
    assert_eq!(
        v.ftl.ftl().stats().nameless_fill_entries,
        fills.len() as u64 - 1
    );
    check_victim(&mut v, "after a fill's free");
}

/// With a remap table of one entry migrations stop at once, and only
/// in-place collection reclaims the nameless zones' dead blocks: a client
/// that keeps three quarters of the volume live and never acknowledges a
/// move writes four volumes' worth, GC choosing in-place victims by itself
/// and filling their gaps; everything held reads back, after a remount
/// too, and `zftl check` agrees.
#[test]
fn gc_collects_in_place_by_itself_when_the_remap_table_is_full() {
    gc_collects_in_place_by_itself(true);
}

#[test]
fn gc_collects_in_place_by_itself_when_the_remap_table_is_full_in_band() {
    gc_collects_in_place_by_itself(false);
}

fn gc_collects_in_place_by_itself(oob: bool) {
    let cfg = FtlConfig {
        nameless_remap_entries: 1,
        ..FtlConfig::default()
    };
    let mut ftl = common::format_with(oob, volume_config(oob), cfg.clone());
    let capacity = ftl.logical_blocks();
    let mut held: BTreeMap<NamelessAddr, u64> = BTreeMap::new();
    let mut key = 0u64;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut written = 0u64;
    while written < 4 * capacity {
        let keys: Vec<u64> = (key..key + 8).collect();
        let addrs = put(&mut ftl, &keys).unwrap_or_else(|e| {
            panic!(
                "after {written} blocks written: {e} ({:?})",
                ftl.ftl().stats()
            )
        });
        key += 8;
        written += 8;
        held.extend(addrs.into_iter().zip(keys));
        while held.len() as u64 > capacity * 3 / 4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = *held.keys().nth(x as usize % held.len()).unwrap();
            held.remove(&a);
            ftl.nameless_free(&[a]).unwrap();
        }
        if written.is_multiple_of(512) {
            ftl.nameless_commit().unwrap();
        }
    }
    let s = ftl.ftl().stats();
    eprintln!(
        "in-place by GC (oob {oob}): {} victims, {} jobs, {} gap fills, {} pads, {} staged, {} migrated, \
         {} remap stops; written {written}, capacity {capacity}",
        s.nameless_inplace_gc_victims,
        s.nameless_inplace_jobs,
        s.nameless_gap_fill_blocks,
        s.nameless_pad_blocks,
        s.nameless_staged_blocks,
        s.nameless_migrated_blocks,
        s.nameless_remap_full_stops
    );
    assert!(s.nameless_inplace_gc_victims > 0, "{s:?}");
    assert!(s.nameless_gap_fill_blocks > 0, "{s:?}");
    assert!(s.nameless_remap_full_stops > 0, "{s:?}");
    for (&a, &k) in &held {
        holds(&mut ftl, a, k, "after the churn");
    }
    let mut dev = ftl.shutdown().unwrap();
    assert_check_clean(&mut dev, "after in-place GC");
    let mut ftl = Driver::mount(dev, cfg).unwrap();
    for (&a, &k) in &held {
        holds(&mut ftl, a, k, "after a remount");
    }
}

/// Single-block overwrites a job may take as gap fills, each (old
/// address, old key, new key): of `v`'s live blocks in the victim, sent
/// once the victim is reset (the rewrite takes fills from then on), and
/// of `others`, sent before and after them.
struct OverwritePlan {
    victim: std::vec::IntoIter<(NamelessAddr, u64, u64)>,
    others: std::vec::IntoIter<(NamelessAddr, u64, u64)>,
    erases: u64,
    in_band: bool,
    turn: u64,
}

impl OverwritePlan {
    fn new(v: &Victim, others: &BTreeMap<NamelessAddr, u64>, oob: bool) -> OverwritePlan {
        let key = |i: usize| 70_000 + i as u64;
        let victim: Vec<_> = v.live.iter().map(|(&a, &k)| (a, k)).collect();
        let n = victim.len();
        OverwritePlan {
            victim: (victim.into_iter().enumerate())
                .map(|(i, (a, k))| (a, k, key(i)))
                .collect::<Vec<_>>()
                .into_iter(),
            others: (others.iter().enumerate())
                .map(|(i, (&a, &k))| (a, k, key(n + i)))
                .collect::<Vec<_>>()
                .into_iter(),
            erases: v.ftl.ftl().stats().erases,
            in_band: !oob,
            turn: 0,
        }
    }

    /// The next overwrite to send: of the victim once it was reset (in
    /// band, every other one once staging began: its rewrite takes a group
    /// at once).
    fn next(&mut self, ftl: &Driver<SimDevice>) -> Option<(NamelessAddr, u64, u64)> {
        let s = ftl.ftl().stats();
        self.turn += 1;
        let due = match self.in_band {
            true => s.erases > self.erases && self.turn.is_multiple_of(2),
            false => s.erases > self.erases,
        };
        if due {
            if let Some(o) = self.victim.next() {
                return Some(o);
            }
        }
        self.others.next()
    }
}

/// A volume as `victim_on`'s with, outside the victim, `n` more live
/// blocks written and committed: their addresses and keys.
fn victim_with_others(oob: bool, n: u64) -> (Victim, BTreeMap<NamelessAddr, u64>) {
    let mut v = victim_on(oob);
    let mut others = BTreeMap::new();
    for first in (90_000..90_000 + n).step_by(8) {
        let keys: Vec<u64> = (first..first + 8).collect();
        others.extend(put(&mut v.ftl, &keys).unwrap().into_iter().zip(keys));
    }
    v.ftl.nameless_commit().unwrap();
    (v, others)
}

fn submit_overwrite(ftl: &mut Driver<SimDevice>, old: NamelessAddr, key: u64) -> u64 {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let request = Request::NamelessOverwrite {
        old: vec![old],
        data: pattern(key, 1, bs),
        md: md(key, 1, mb),
        fua: false,
    };
    ftl.submit(request).unwrap()
}

/// The address `addr` a client freed or replaced names no live block:
/// `NotLive`, or `Stale` once a gap fill holds its offset.
fn gone(ftl: &mut Driver<SimDevice>, addr: NamelessAddr, when: &str) {
    match ftl.nameless_read(addr) {
        Err(IoError::Nameless(NamelessError::NotLive { .. } | NamelessError::Stale { .. })) => {}
        other => panic!("{when}: the replaced {addr:?} reads {:?}", other.map(drop)),
    }
}

/// Overwrites queued while a job runs fill the victim's gaps (docs/design.md,
/// "In-place collection on ZNS"): each answered overwrite's new block
/// holds its data (in the victim, of the gap generation, where it filled
/// a gap) and its old block is gone, whether that lay in the victim itself
/// or elsewhere, with a racing free and a racing overwrite of the same old
/// block; so after a crash and a clean remount, and `zftl check` agrees.
#[test]
fn queued_overwrites_fill_the_gaps_and_free_their_old_blocks_once_the_job_is_done() {
    queued_overwrites_fill_the_gaps(true);
}

#[test]
fn queued_overwrites_fill_the_gaps_and_free_their_old_blocks_once_the_job_is_done_in_band() {
    queued_overwrites_fill_the_gaps(false);
}

fn queued_overwrites_fill_the_gaps(oob: bool) {
    let (mut v, mut others) = victim_with_others(oob, 256);
    let cap = v.ftl.ftl().geometry().zone_capacity_blocks;
    let gap_gen = v.freed[0].generation() + 1;
    let mut plan = OverwritePlan::new(&v, &others, oob);
    assert!(v.ftl.start_in_place(v.zone));
    let mut sent = Vec::new();
    let mut raced_free = None;
    let mut raced_twice = None;
    while v.ftl.ftl().in_place_running() {
        for _ in 0..3 {
            let Some((old, old_key, key)) = plan.next(&v.ftl) else {
                break;
            };
            sent.push((submit_overwrite(&mut v.ftl, old, key), old, old_key, key));
            // The first overwrite of a block elsewhere: the client frees
            // its old block while it waits.
            if raced_free.is_none() && old.ppa().zone(cap) != v.zone && sent.len() > 20 {
                v.ftl.nameless_free(&[old]).unwrap();
                raced_free = Some(old);
            }
            // The first of the victim: a second overwrite of the same block.
            if raced_twice.is_none() && old.ppa().zone(cap) == v.zone && sent.len() > 20 {
                let id = submit_overwrite(&mut v.ftl, old, key + 100_000);
                sent.push((id, old, old_key, key + 100_000));
                raced_twice = Some(old);
            }
        }
        v.ftl.turn().unwrap();
    }
    v.ftl.settle().unwrap();
    assert!(raced_free.is_some() && raced_twice.is_some());
    let mut fills = 0;
    let mut fills_of_victim = 0;
    let mut new = Vec::new();
    for (id, old, _, key) in sent {
        let Ok(zftl::core::ReplyData::Addrs(addrs)) = v.ftl.wait_for(id) else {
            panic!("overwrite of {old:?} (key {key}) failed");
        };
        let a = addrs[0];
        if a.ppa().zone(cap) == v.zone {
            assert_eq!(a.generation(), gap_gen, "a fill's generation");
            fills += 1;
            fills_of_victim += usize::from(old.ppa().zone(cap) == v.zone);
            v.live.insert(a, key);
        } else {
            others.insert(a, key);
        }
        if v.live.remove(&old).is_some() {
            v.freed.push(old);
        }
        others.remove(&old);
        new.push((old, a, key));
    }
    let s = v.ftl.ftl().stats();
    eprintln!(
        "overwrite fills (oob {oob}): {fills} of {} overwrites, {fills_of_victim} replacing a \
         block of the victim; {} pads",
        new.len(),
        s.nameless_pad_blocks
    );
    assert!(fills > 0, "no overwrite filled a gap: {s:?}");
    assert!(
        fills_of_victim > 0,
        "no fill replaced a block of the victim"
    );
    assert_eq!(s.nameless_gap_fill_blocks, fills as u64);
    assert_eq!(s.nameless_overwrite_fill_blocks, fills as u64);
    let check = |v: &mut Victim, when: &str| {
        check_victim(v, when);
        for &(old, a, key) in &new {
            gone(&mut v.ftl, old, when);
            holds(&mut v.ftl, a, key, when);
        }
        for (&a, &k) in &others {
            holds(&mut v.ftl, a, k, when);
        }
    };
    check(&mut v, "after the job");
    let cfg = FtlConfig::default();
    v.ftl.flush().unwrap();
    v.ftl = Driver::mount(v.ftl.into_backend(), cfg.clone()).unwrap();
    check(&mut v, "after a crash");
    let mut dev = v.ftl.shutdown().unwrap();
    assert_check_clean(&mut dev, "after overwrite fills");
    v.ftl = Driver::mount(dev, cfg).unwrap();
    check(&mut v, "after a clean remount");
}

/// A power cut after any device command of a job that overwrites fill
/// (and of the mount's redo): each overwrite keeps its new block or its
/// old one, never both and never neither. One whose new block survived
/// (the mount hands it over: `Unrecorded`) has lost its old block, and an
/// answered fill always survives (its InPlaceDone was durable); any other
/// keeps its old block with its old data.
#[test]
fn a_power_cut_at_any_step_keeps_each_overwrite_fills_new_block_or_its_old_one() {
    overwrite_cut_after_any_command(true);
}

#[test]
fn a_power_cut_at_any_step_keeps_each_overwrite_fills_new_block_or_its_old_one_in_band() {
    overwrite_cut_after_any_command(false);
}

fn overwrite_cut_after_any_command(oob: bool) {
    let cfg = FtlConfig::default();
    let (mut fills_seen, mut kept_old, mut pending_seen, mut cuts) = (0, 0, 0, 0);
    for seed in seeds() {
        for after in 1.. {
            let (mut v, others) = victim_with_others(oob, 128);
            let cap = v.ftl.ftl().geometry().zone_capacity_blocks;
            v.ftl.backend_mut().set_faults(Faults {
                seed: seed * 1_000 + after,
                power_cut: PowerCut::AfterSubmits(after),
                shuffle_completions: true,
                ..Faults::default()
            });
            let mut plan = OverwritePlan::new(&v, &others, oob);
            let mut sent = Vec::new();
            assert!(v.ftl.start_in_place(v.zone));
            while v.ftl.ftl().in_place_running() && v.ftl.backend().is_powered() {
                for _ in 0..1 + seed % 3 {
                    if let Some((old, old_key, key)) = plan.next(&v.ftl) {
                        let id = submit_overwrite(&mut v.ftl, old, key);
                        sent.push((id, old, old_key, key));
                    }
                }
                if v.ftl.turn().is_err() {
                    break;
                }
            }
            let _ = v.ftl.settle();
            // The answers the client saw before the cut.
            let mut answered = BTreeMap::new();
            while let Some(r) = v.ftl.take_reply() {
                if let Ok(zftl::core::ReplyData::Addrs(a)) = r.result {
                    answered.insert(r.id, a[0]);
                }
            }
            let finished = v.ftl.backend().is_powered();
            let mut dev = v.ftl.into_backend();
            dev.power_cut();
            dev.power_on().unwrap();
            dev.set_faults(Faults::default());
            let crc = FtlConfig::default().data_crc_impl();
            let pending = zftl::core::recovery::recover_state(&mut dev, crc)
                .expect("recovery after a cut")
                .inplace_pending
                .is_some();
            pending_seen += u64::from(pending);
            if pending && (seed + after) % 2 == 0 {
                dev.set_faults(Faults {
                    seed: seed ^ after,
                    power_cut: PowerCut::AfterSubmits(1 + (seed + after) % 9),
                    ..Faults::default()
                });
                let _ = Driver::mount(&mut dev, cfg.clone());
                dev.power_cut();
                dev.power_on().unwrap();
                dev.set_faults(Faults::default());
            }
            let when = format!(
                "seed {seed}, cut after {after} commands (oob {oob}; replay: ZFTL_SEEDS={seed}..{})",
                seed + 1
            );
            v.ftl = Driver::mount(dev, cfg.clone()).unwrap_or_else(|e| panic!("{when}: {e}"));
            // Blocks written since the commit and recovered: by key.
            v.ftl.settle().unwrap();
            let mut handed: BTreeMap<u64, NamelessAddr> = BTreeMap::new();
            while let Some(e) = v.ftl.poll_event() {
                if let NamelessEvent::Unrecorded { addr, md } = e {
                    handed.insert(u64::from_le_bytes(md[..8].try_into().unwrap()), addr);
                }
            }
            for &(id, old, old_key, key) in &sent {
                // Every block written since the commit that survived is
                // handed over; an answered fill must have (its InPlaceDone
                // was durable), an answered append need not (no flush).
                let new = handed.get(&key).copied();
                if let Some(&a) = answered.get(&id) {
                    if a.ppa().zone(cap) == v.zone {
                        assert_eq!(new, Some(a), "{when}: answered fill of key {key} lost");
                    }
                }
                match new {
                    Some(a) => {
                        holds(&mut v.ftl, a, key, &when);
                        gone(&mut v.ftl, old, &when);
                        fills_seen += usize::from(a.ppa().zone(cap) == v.zone);
                        if v.live.remove(&old).is_some() {
                            v.freed.push(old);
                        }
                        if a.ppa().zone(cap) == v.zone {
                            v.live.insert(a, key);
                        }
                    }
                    None => {
                        holds(&mut v.ftl, old, old_key, &when);
                        kept_old += 1;
                    }
                }
            }
            // The victim's other blocks (it may have been reset since, once
            // every block in it was replaced: its old addresses are gone).
            for (&a, &k) in &v.live {
                holds(&mut v.ftl, a, k, &when);
            }
            for &a in &v.freed {
                gone(&mut v.ftl, a, &when);
            }
            let mut dev = v.ftl.shutdown().unwrap();
            assert_check_clean(&mut dev, &when);
            cuts += 1;
            if finished {
                break;
            }
        }
    }
    eprintln!(
        "overwrite fill cuts (oob {oob}): {cuts} ({pending_seen} with the job pending, \
         {fills_seen} fills kept, {kept_old} overwrites kept their old block)"
    );
    assert!(pending_seen > 0, "some cut left the job pending");
    assert!(fills_seen > 0, "some overwrite filled a gap before its cut");
    assert!(kept_old > 0, "some cut kept an old block");
}

/// An overwrite-only client (a KV store updating in place) with a remap
/// table of one entry: migrations stop at once and only in-place
/// collection reclaims the nameless zones' dead blocks, for the overwrites
/// queued (their gap fills). With three quarters of the volume live it
/// overwrites four volumes' worth (it got `NoSpace` when only plain
/// writes filled gaps); everything held reads back, after a remount too,
/// and `zftl check` agrees.
#[test]
fn an_overwrite_only_client_keeps_writing_when_the_remap_table_is_full() {
    overwrite_only_client(true);
}

#[test]
fn an_overwrite_only_client_keeps_writing_when_the_remap_table_is_full_in_band() {
    overwrite_only_client(false);
}

fn overwrite_only_client(oob: bool) {
    let cfg = FtlConfig {
        nameless_remap_entries: 1,
        ..FtlConfig::default()
    };
    let mut ftl = common::format_with(oob, volume_config(oob), cfg.clone());
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let capacity = ftl.logical_blocks();
    let mut held: Vec<(NamelessAddr, u64)> = Vec::new();
    let mut key = 0u64;
    while (held.len() as u64) < capacity * 3 / 4 {
        let keys: Vec<u64> = (key..key + 8).collect();
        held.extend(put(&mut ftl, &keys).unwrap().into_iter().zip(keys));
        key += 8;
    }
    ftl.nameless_commit().unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut written = 0u64;
    while written < 4 * capacity {
        // 8 distinct held blocks, replaced by new keys.
        let mut picks: Vec<usize> = Vec::new();
        while picks.len() < 8 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let i = x as usize % held.len();
            if !picks.contains(&i) {
                picks.push(i);
            }
        }
        let keys: Vec<u64> = (key..key + 8).collect();
        let olds: Vec<NamelessAddr> = picks.iter().map(|&i| held[i].0).collect();
        let data: Vec<u8> = keys.iter().flat_map(|&k| pattern(k, 1, bs)).collect();
        let meta: Vec<u8> = keys.iter().flat_map(|&k| md(k, 1, mb)).collect();
        let addrs = ftl
            .nameless_overwrite(&olds, &data, &meta)
            .unwrap_or_else(|e| {
                panic!(
                    "after {written} blocks overwritten: {e} ({:?})",
                    ftl.ftl().stats()
                )
            });
        for ((&i, a), k) in picks.iter().zip(addrs).zip(keys) {
            held[i] = (a, k);
        }
        key += 8;
        written += 8;
        if written.is_multiple_of(512) {
            ftl.nameless_commit().unwrap();
        }
    }
    let s = ftl.ftl().stats();
    eprintln!(
        "overwrite-only client (oob {oob}): {} victims, {} jobs, {} gap fills, {} pads, {} staged, \
         {} migrated, {} remap stops; overwritten {written}, capacity {capacity}",
        s.nameless_inplace_gc_victims,
        s.nameless_inplace_jobs,
        s.nameless_gap_fill_blocks,
        s.nameless_pad_blocks,
        s.nameless_staged_blocks,
        s.nameless_migrated_blocks,
        s.nameless_remap_full_stops
    );
    assert!(s.nameless_inplace_gc_victims > 0, "{s:?}");
    assert!(s.nameless_overwrite_fill_blocks > 0, "{s:?}");
    assert_eq!(s.nameless_overwrite_fill_blocks, s.nameless_gap_fill_blocks);
    assert!(s.nameless_remap_full_stops > 0, "{s:?}");
    for &(a, k) in &held {
        holds(&mut ftl, a, k, "after the churn");
    }
    let mut dev = ftl.shutdown().unwrap();
    assert_check_clean(&mut dev, "after in-place GC of overwrites");
    let mut ftl = Driver::mount(dev, cfg).unwrap();
    for &(a, k) in &held {
        holds(&mut ftl, a, k, "after a remount");
    }
}
