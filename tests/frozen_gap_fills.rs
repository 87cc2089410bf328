//! The frozen images of gap fills (docs/format.md §9 and §11):
//! `tests/images/v3-oob-gap-fills.img.gz`, made by
//! [`make_frozen_gap_fill_image`] with the first build that fills gaps, is
//! a crash image (md in OOB) after two in-place collections whose gaps
//! took queued writes: the first job's fills in its last checkpoint's
//! section 24 (one of them freed in the log after it), the second job's
//! only in its victim's tags and the log. `v3-inband-gap-fills.img.gz`
//! ([`make_frozen_gap_fill_image_in_band`], the first build that collects
//! in place in band) is the same with tags in band: the victims' staging
//! indexes in their scratch zones, the second job's fills in its
//! victim's md blocks and their NamelessWrite notes only. Its client's record (live
//! addresses with their keys, and freed addresses a fill now sits on) is
//! in logical blocks from LBA 0. Every build must mount it: the live blocks
//! read back, the freed addresses answer `Stale` to a read, a free and an
//! overwrite, and `zftl check` is clean.
//!
//! `v3-oob-inplace-pending.img.gz` and `v3-inband-inplace-pending.img.gz`
//! ([`make_frozen_pending_job_image`], in each tag mode) are crash images
//! of an in-place job cut during its rewrite: its `InPlaceStaged` note
//! durable, its victim reset and written past half its capacity, its
//! `InPlaceDone` not written, gap fills queued and unanswered. `zftl
//! check` checks the pending job against its scratch zone; every build's
//! mount must redo it: the victim's live blocks read back at their
//! addresses, its freed ones answer `NotLive` or `Stale`.

use std::path::Path;
use zftl::core::backend::Backend;
use zftl::core::{Driver, FtlConfig, IoError, NamelessAddr, NamelessError, ReplyData, Request};
use zftl::sim::{Faults, PowerCut, SimDevice};

mod common;
use common::frozen::{
    data, format_options, freeze, md, read_index, sim_config, unpack, write_index,
};

/// The image of tags in OOB (md in OOB) or in band (md in the log).
fn image(oob: bool) -> &'static str {
    if oob {
        "v3-oob-gap-fills.img.gz"
    } else {
        "v3-inband-gap-fills.img.gz"
    }
}

/// The client's record: (address, key) of blocks that must read back
/// (key `u64::MAX`: a freed address a fill now sits on, `Stale`; key
/// [`FREED`]: a freed address, `NotLive` or `Stale`).
const FREED: u64 = u64::MAX - 1;

fn put(ftl: &mut Driver<SimDevice>, keys: &[u64]) -> Vec<NamelessAddr> {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let d: Vec<u8> = keys.iter().flat_map(|&k| data(k, bs)).collect();
    let m: Vec<u8> = keys.iter().flat_map(|&k| md(k, mb)).collect();
    ftl.nameless_write(&d, &m).unwrap()
}

/// A Full zone of mixed live and freed blocks, committed and older than
/// the checkpoint, for an in-place job. Returns the zone, the live blocks
/// (in it and beside it) and the freed addresses in it.
fn victim(
    ftl: &mut Driver<SimDevice>,
    first_key: u64,
) -> (u32, Vec<(NamelessAddr, u64)>, Vec<NamelessAddr>) {
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let mut addrs = Vec::new();
    for first in (first_key..first_key + cap * 3 / 2).step_by(8) {
        let keys: Vec<u64> = (first..first + 8).collect();
        addrs.extend(put(ftl, &keys).into_iter().zip(keys));
    }
    let zone = addrs[0].0.ppa().zone(cap);
    let (mut live, mut freed) = (Vec::new(), Vec::new());
    for (i, &(a, k)) in addrs.iter().enumerate() {
        if a.ppa().zone(cap) != zone {
            live.push((a, k));
        } else if i % 3 == 1 {
            freed.push(a);
        } else {
            live.push((a, k));
        }
    }
    ftl.nameless_free(&freed).unwrap();
    ftl.nameless_commit().unwrap();
    ftl.checkpoint().unwrap();
    (zone, live, freed)
}

/// An in-place job on a [`victim`] while single-block writes queue.
/// Returns the live blocks kept and filled, and the freed addresses a
/// fill sits on.
fn collect_in_place(
    ftl: &mut Driver<SimDevice>,
    first_key: u64,
) -> (Vec<(NamelessAddr, u64)>, Vec<NamelessAddr>) {
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let (zone, mut live, freed) = victim(ftl, first_key);
    let checkpoints = ftl.stats().checkpoints;
    assert!(ftl.start_in_place(zone));
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let mut ids = Vec::new();
    let mut key = first_key + 100_000;
    while ftl.ftl().in_place_running() {
        for _ in 0..2 {
            let request = Request::NamelessWrite {
                data: data(key, bs),
                md: md(key, mb),
                fua: false,
            };
            ids.push((ftl.submit(request).unwrap(), key));
            key += 1;
        }
        ftl.turn().unwrap();
    }
    ftl.settle().unwrap();
    let mut filled = Vec::new();
    for (id, k) in ids {
        let Ok(ReplyData::Addrs(a)) = ftl.wait_for(id) else {
            panic!("write of key {k}");
        };
        if a[0].ppa().zone(cap) == zone {
            filled.push(a[0].ppa());
        }
        live.push((a[0], k));
    }
    assert!(!filled.is_empty(), "no gap was filled");
    ftl.nameless_commit().unwrap();
    // The fills are in the log and their tags only, until the caller's
    // next checkpoint.
    assert_eq!(ftl.stats().checkpoints, checkpoints);
    let stale = freed
        .into_iter()
        .filter(|f| filled.contains(&f.ppa()))
        .collect();
    (live, stale)
}

/// Every recorded block reads back; every recorded stale address answers
/// `Stale` to a read, a free and an overwrite.
fn check(ftl: &mut Driver<SimDevice>, index: &[(NamelessAddr, u64)], when: &str) {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    for &(a, k) in index {
        if k == FREED {
            let answers = [
                ftl.nameless_read(a).map(drop),
                ftl.nameless_free(&[a]),
                ftl.nameless_overwrite(&[a], &data(9, bs), &md(9, mb))
                    .map(drop),
            ];
            for r in answers {
                assert!(
                    matches!(
                        r,
                        Err(IoError::Nameless(
                            NamelessError::NotLive { .. } | NamelessError::Stale { .. }
                        ))
                    ),
                    "{when}: freed {a:?} answered {r:?}"
                );
            }
            continue;
        }
        if k != u64::MAX {
            let (d, m) = ftl
                .nameless_read(a)
                .unwrap_or_else(|e| panic!("{when}: read of key {k} at {a:?}: {e}"));
            assert!(d == data(k, bs), "{when}: data of key {k}");
            assert_eq!(m, md(k, mb), "{when}: md of key {k}");
            continue;
        }
        let answers = [
            ftl.nameless_read(a).map(drop),
            ftl.nameless_free(&[a]),
            ftl.nameless_overwrite(&[a], &data(9, bs), &md(9, mb))
                .map(drop),
        ];
        for r in answers {
            assert!(
                matches!(r, Err(IoError::Nameless(NamelessError::Stale { .. }))),
                "{when}: {a:?} at a filled offset answered {r:?}"
            );
        }
    }
}

/// The image of a job cut during its rewrite, in each tag mode.
fn pending_image(oob: bool) -> &'static str {
    if oob {
        "v3-oob-inplace-pending.img.gz"
    } else {
        "v3-inband-inplace-pending.img.gz"
    }
}

/// On a fresh image file at `path`: job A done (its fills answered), then
/// a job on a second victim with the power cut after `after` of its
/// commands. Returns whether the cut left the job pending with the victim
/// written past half its capacity.
fn cut_during_a_job(path: &Path, oob: bool, after: u64) -> bool {
    let dev = SimDevice::create_file(path, sim_config(oob)).unwrap();
    let mut ftl = Driver::format(dev, &format_options(oob, 13), FtlConfig::default()).unwrap();
    let (mut live, stale) = collect_in_place(&mut ftl, 0);
    ftl.checkpoint().unwrap();
    let (zone, live_b, freed_b) = victim(&mut ftl, 1_000_000);
    live.extend(live_b);
    live.extend(stale.iter().map(|&a| (a, u64::MAX)));
    live.extend(freed_b.iter().map(|&a| (a, FREED)));
    write_index(&mut ftl, &live);
    ftl.flush().unwrap();
    ftl.backend_mut().set_faults(Faults {
        seed: after,
        power_cut: PowerCut::AfterSubmits(after),
        ..Faults::default()
    });
    assert!(ftl.start_in_place(zone));
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let mut key = 2_000_000;
    while ftl.ftl().in_place_running() && ftl.backend().is_powered() {
        let request = Request::NamelessWrite {
            data: data(key, bs),
            md: md(key, mb),
            fua: false,
        };
        if ftl.submit(request).is_err() || ftl.turn().is_err() {
            break;
        }
        key += 1;
    }
    let _ = ftl.settle();
    let mut dev = ftl.into_backend();
    dev.power_cut();
    dev.power_on().unwrap();
    dev.set_faults(Faults::default());
    let crc = FtlConfig::default().data_crc_impl();
    let pending = zftl::core::recovery::recover_state(&mut dev, crc)
        .expect("recovery after the cut")
        .inplace_pending
        .is_some_and(|j| j.victim == zone);
    let cap = dev.geometry().zone_capacity_blocks;
    pending && dev.zone_info(zone).unwrap().write_pointer_blocks > cap / 2
}

#[test]
#[ignore = "writes tests/images/v3-oob-inplace-pending.img.gz; run by hand"]
fn make_frozen_pending_job_image() {
    make_pending_image(true);
}

#[test]
#[ignore = "writes tests/images/v3-inband-inplace-pending.img.gz; run by hand"]
fn make_frozen_pending_job_image_in_band() {
    make_pending_image(false);
}

/// The first cut that leaves the job pending past half its rewrite.
fn make_pending_image(oob: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("image");
    let after = (1..10_000)
        .find(|&after| {
            let _ = std::fs::remove_file(&path);
            cut_during_a_job(&path, oob, after)
        })
        .expect("a cut leaves the job pending during its rewrite");
    eprintln!("cut after {after} commands of the job");
    freeze(&path, pending_image(oob));
}

#[test]
fn the_frozen_pending_job_image_is_checked_then_redone_by_the_mount() {
    mount_pending_image(true);
}

#[test]
fn the_frozen_pending_job_image_is_checked_then_redone_by_the_mount_in_band() {
    mount_pending_image(false);
}

fn mount_pending_image(oob: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = unpack(pending_image(oob), dir.path());
    let mut dev = SimDevice::open_file_expecting(&path, &sim_config(oob)).unwrap();
    let crc = FtlConfig::default().data_crc_impl();
    let job = zftl::core::recovery::recover_state(&mut dev, crc)
        .expect("recovery of the frozen image")
        .inplace_pending
        .expect("the image leaves an in-place job pending");
    assert!(job.staged_blocks > 0);
    let victim_wp = dev.zone_info(job.victim).unwrap().write_pointer_blocks;
    assert!(victim_wp > 0, "the victim's rewrite had begun");
    common::assert_check_clean(&mut dev, "the pending-job image");
    let cfg = FtlConfig::default();
    let mut ftl = Driver::mount(dev, cfg.clone()).unwrap();
    assert!(!ftl.ftl().in_place_running());
    let index = read_index(&mut ftl);
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let in_victim = |(a, _): &&(NamelessAddr, u64)| a.ppa().zone(cap) == job.victim;
    let victim: Vec<(NamelessAddr, u64)> = index.iter().filter(in_victim).copied().collect();
    let freed = victim.iter().filter(|(_, k)| *k == FREED).count();
    assert!(
        freed > 0 && freed < victim.len(),
        "freed and live blocks in the victim"
    );
    check(&mut ftl, &index, "after the redo");
    let mut dev = ftl.shutdown().unwrap();
    common::assert_check_clean(&mut dev, "the pending-job image after its redo");
    let mut ftl = Driver::mount(dev, cfg).unwrap();
    check(&mut ftl, &index, "after a clean remount");
}

#[test]
#[ignore = "writes tests/images/v3-oob-gap-fills.img.gz; run by hand"]
fn make_frozen_gap_fill_image() {
    make_image(true);
}

#[test]
#[ignore = "writes tests/images/v3-inband-gap-fills.img.gz; run by hand"]
fn make_frozen_gap_fill_image_in_band() {
    make_image(false);
}

fn make_image(oob: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("image");
    let dev = SimDevice::create_file(&path, sim_config(oob)).unwrap();
    let mut ftl = Driver::format(dev, &format_options(oob, 11), FtlConfig::default()).unwrap();
    // Job A, then a checkpoint: its fills in section 24; one freed after.
    let (mut live, mut stale) = collect_in_place(&mut ftl, 0);
    ftl.checkpoint().unwrap();
    let fills_a = ftl.stats().nameless_fill_entries;
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let zone_a = stale[0].ppa().zone(cap);
    let at = live
        .iter()
        .position(|(a, _)| a.ppa().zone(cap) == zone_a && a.generation() > stale[0].generation())
        .expect("a fill of job A");
    let (gone, _) = live.remove(at);
    ftl.nameless_free(&[gone]).unwrap();
    // Its offset holds nothing now: the address freed there is `NotLive`.
    stale.retain(|a| a.ppa() != gone.ppa());
    // Job B, no checkpoint after: its fills in its victim's tags only.
    let (live_b, stale_b) = collect_in_place(&mut ftl, 1_000_000);
    live.extend(live_b);
    stale.extend(stale_b);
    live.extend(stale.iter().map(|&a| (a, u64::MAX)));
    write_index(&mut ftl, &live);
    ftl.flush().unwrap();
    let fills = ftl.stats().nameless_fill_entries;
    assert!(fills_a > 1 && fills > fills_a, "{fills_a} then {fills}");
    let index = read_index(&mut ftl);
    check(&mut ftl, &index, "before freezing");
    // A crash image: no shutdown.
    drop(ftl.into_backend());
    freeze(&path, image(oob));
}

#[test]
fn the_frozen_gap_fill_image_mounts_with_its_fills_and_stale_addresses() {
    mount_image(true);
}

#[test]
fn the_frozen_gap_fill_image_mounts_with_its_fills_and_stale_addresses_in_band() {
    mount_image(false);
}

fn mount_image(oob: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = unpack(image(oob), dir.path());
    let dev = SimDevice::open_file_expecting(&path, &sim_config(oob)).unwrap();
    let cfg = FtlConfig::default();
    let mut ftl = Driver::mount(dev, cfg.clone()).unwrap();
    let index = read_index(&mut ftl);
    assert!(index.iter().any(|&(_, k)| k == u64::MAX));
    check(&mut ftl, &index, "after the crash");
    assert!(ftl.stats().nameless_fill_entries > 0);
    let mut dev = ftl.shutdown().unwrap();
    common::assert_check_clean(&mut dev, "the gap-fill image");
    let mut ftl = Driver::mount(dev, cfg).unwrap();
    check(&mut ftl, &index, "after a clean remount");
}
