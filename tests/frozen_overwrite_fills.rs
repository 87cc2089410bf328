//! The frozen images of overwrite fills (docs/format.md §9 and §11, crash
//! step 9, "Overwrite fills"): `tests/images/v3-oob-overwrite-fills.img.gz`
//! (md in OOB) and `v3-inband-overwrite-fills.img.gz` (tags in band), made
//! by [`make_frozen_overwrite_fill_image`] and
//! [`make_frozen_overwrite_fill_image_in_band`] with the first build whose
//! overwrites fill gaps, are crash images after an in-place collection
//! whose gaps took queued single-block overwrites, with no checkpoint
//! after it: each fill's tag (in band its NamelessWrite note) names the
//! block it replaced, which only its job's InPlaceDone frees. The client's
//! record (live addresses with their keys, and the replaced addresses) is
//! in logical blocks from LBA 0. Every build must mount them: the live
//! blocks read back, no replaced address reads (`NotLive`, or `Stale`
//! where a fill sits), and `zftl check` is clean.

use zftl::core::{Driver, FtlConfig, IoError, NamelessAddr, NamelessError, ReplyData, Request};
use zftl::sim::SimDevice;

mod common;
use common::frozen::{
    data, format_options, freeze, md, read_index, sim_config, unpack, write_index,
};

fn image(oob: bool) -> &'static str {
    if oob {
        "v3-oob-overwrite-fills.img.gz"
    } else {
        "v3-inband-overwrite-fills.img.gz"
    }
}

/// The client's record's key for an address an answered overwrite
/// replaced (else the key of the live block there).
const REPLACED: u64 = u64::MAX;

/// A Full zone of mixed live and freed blocks and five zones of other
/// live blocks, committed and older than the checkpoint; an in-place job
/// on it while single-block overwrites queue (of the other blocks, and
/// every third of the victim's once some zone was reset). Returns the
/// live blocks and the replaced addresses.
fn overwrite_in_place(
    ftl: &mut Driver<SimDevice>,
) -> (Vec<(NamelessAddr, u64)>, Vec<NamelessAddr>) {
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let mut addrs = Vec::new();
    for first in (0..cap * 6).step_by(8) {
        let keys: Vec<u64> = (first..first + 8).collect();
        let d: Vec<u8> = keys.iter().flat_map(|&k| data(k, bs)).collect();
        let m: Vec<u8> = keys.iter().flat_map(|&k| md(k, mb)).collect();
        addrs.extend(ftl.nameless_write(&d, &m).unwrap().into_iter().zip(keys));
    }
    let zone = addrs[0].0.ppa().zone(cap);
    let (mut victim, mut others, mut freed) = (Vec::new(), Vec::new(), Vec::new());
    for (i, &(a, k)) in addrs.iter().enumerate() {
        match (a.ppa().zone(cap) == zone, i % 3 == 1) {
            (true, true) => freed.push(a),
            (true, false) => victim.push((a, k)),
            (false, _) => others.push((a, k)),
        }
    }
    ftl.nameless_free(&freed).unwrap();
    ftl.nameless_commit().unwrap();
    ftl.checkpoint().unwrap();
    let checkpoints = ftl.stats().checkpoints;
    let erases = ftl.stats().erases;
    assert!(ftl.start_in_place(zone));
    let (mut victim, mut others) = (victim.into_iter(), others.into_iter());
    let mut ids = Vec::new();
    let mut key = 100_000;
    let mut turn = 0u64;
    while ftl.ftl().in_place_running() {
        for _ in 0..2 {
            turn += 1;
            let reset = ftl.stats().erases > erases;
            let next = match reset && turn.is_multiple_of(3) {
                true => victim.next().or_else(|| others.next()),
                false => others.next(),
            };
            let Some((old, _)) = next else { break };
            let request = Request::NamelessOverwrite {
                old: vec![old],
                data: data(key, bs),
                md: md(key, mb),
                fua: false,
            };
            ids.push((ftl.submit(request).unwrap(), old, key));
            key += 1;
        }
        ftl.turn().unwrap();
    }
    ftl.settle().unwrap();
    // The blocks not overwritten, then each overwrite's new block.
    let mut live: Vec<(NamelessAddr, u64)> = victim.chain(others).collect();
    let mut replaced = Vec::new();
    for (id, old, k) in ids {
        let Ok(ReplyData::Addrs(a)) = ftl.wait_for(id) else {
            panic!("overwrite of {old:?} (key {k})");
        };
        live.push((a[0], k));
        replaced.push(old);
    }
    let s = ftl.stats();
    assert!(
        s.nameless_overwrite_fill_blocks > 0,
        "no overwrite filled a gap: {s:?}"
    );
    ftl.nameless_commit().unwrap();
    assert_eq!(
        ftl.stats().checkpoints,
        checkpoints,
        "the fills are in the log only"
    );
    (live, replaced)
}

/// Every recorded block reads back; no replaced address reads.
fn check(ftl: &mut Driver<SimDevice>, index: &[(NamelessAddr, u64)], when: &str) {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    for &(a, k) in index {
        let read = ftl.nameless_read(a);
        if k == REPLACED {
            assert!(
                matches!(
                    read,
                    Err(IoError::Nameless(
                        NamelessError::NotLive { .. } | NamelessError::Stale { .. }
                    ))
                ),
                "{when}: replaced {a:?} answered {:?}",
                read.map(drop)
            );
            continue;
        }
        let (d, m) = read.unwrap_or_else(|e| panic!("{when}: read of key {k} at {a:?}: {e}"));
        assert!(d == data(k, bs), "{when}: data of key {k}");
        assert_eq!(m, md(k, mb), "{when}: md of key {k}");
    }
}

#[test]
#[ignore = "writes tests/images/v3-oob-overwrite-fills.img.gz; run by hand"]
fn make_frozen_overwrite_fill_image() {
    make_image(true);
}

#[test]
#[ignore = "writes tests/images/v3-inband-overwrite-fills.img.gz; run by hand"]
fn make_frozen_overwrite_fill_image_in_band() {
    make_image(false);
}

fn make_image(oob: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("image");
    let dev = SimDevice::create_file(&path, sim_config(oob)).unwrap();
    let mut ftl = Driver::format(dev, &format_options(oob, 13), FtlConfig::default()).unwrap();
    let (live, replaced) = overwrite_in_place(&mut ftl);
    let mut index = live;
    index.extend(replaced.iter().map(|&a| (a, REPLACED)));
    write_index(&mut ftl, &index);
    ftl.flush().unwrap();
    let index = read_index(&mut ftl);
    check(&mut ftl, &index, "before freezing");
    // A crash image: no shutdown.
    drop(ftl.into_backend());
    freeze(&path, image(oob));
}

#[test]
fn the_frozen_overwrite_fill_image_mounts_with_each_overwrites_new_block_only() {
    mount_image(true);
}

#[test]
fn the_frozen_overwrite_fill_image_mounts_with_each_overwrites_new_block_only_in_band() {
    mount_image(false);
}

fn mount_image(oob: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = unpack(image(oob), dir.path());
    let dev = SimDevice::open_file_expecting(&path, &sim_config(oob)).unwrap();
    let cfg = FtlConfig::default();
    let mut ftl = Driver::mount(dev, cfg.clone()).unwrap();
    let index = read_index(&mut ftl);
    assert!(index.iter().any(|&(_, k)| k == REPLACED));
    check(&mut ftl, &index, "after the crash");
    assert!(ftl.stats().nameless_fill_entries > 0);
    let mut dev = ftl.shutdown().unwrap();
    common::assert_check_clean(&mut dev, "the overwrite-fill image");
    let mut ftl = Driver::mount(dev, cfg).unwrap();
    check(&mut ftl, &index, "after a clean remount");
}
