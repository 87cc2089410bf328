//! Snapshots end to end on the simulator through `Driver`: what a snapshot
//! reads after writes, trims and range operations replaced its blocks,
//! deletes and the space they give back, GC of kept blocks, the errors,
//! and what survives a clean remount and a power cut.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use zftl::core::zone::{Stream, ZoneKind};
use zftl::core::{Driver, FormatOptions, FtlConfig, IoError, ProtectWindow, TagPlacement};
use zftl::sim::SimDevice;

mod common;
use common::{
    assert_check_clean, pattern, remount_both_ways, remount_both_ways_then_clean,
    volume_config as sim_config,
};

fn format_with(oob: bool, opts: FormatOptions) -> Driver<SimDevice> {
    let dev = SimDevice::create_memory(sim_config(oob)).unwrap();
    Driver::format(dev, &opts, FtlConfig::default()).unwrap()
}

/// Tags in OOB (`oob`) or in band.
fn format_options(oob: bool) -> FormatOptions {
    let tag_placement = if oob {
        TagPlacement::Auto
    } else {
        TagPlacement::InBand
    };
    FormatOptions {
        tag_placement,
        ..FormatOptions::default()
    }
}

fn format(oob: bool) -> Driver<SimDevice> {
    format_with(oob, format_options(oob))
}

fn both_modes(test: impl Fn(bool)) {
    for oob in [false, true] {
        test(oob);
    }
}

fn write(ftl: &mut Driver<SimDevice>, lba: u64, version: u32) {
    let bs = ftl.block_size();
    ftl.write(lba, &pattern(lba, version, bs)).unwrap();
}

/// What block `lba` of snapshot `name` (or the live volume: `None`) holds:
/// `Some((origin, version))`, or `None` for zeros.
fn holds(ftl: &mut Driver<SimDevice>, name: Option<&str>, lba: u64) -> Option<(u64, u32)> {
    let data = match name {
        None => ftl.read(lba, 1).unwrap(),
        Some(n) => {
            let id = ftl.snapshot_named(n).unwrap().id;
            ftl.read_snapshot(id, lba, 1).unwrap()
        }
    };
    if data.iter().all(|&b| b == 0) {
        return None;
    }
    let (origin, version) = common::decode_any(&data).unwrap();
    Some((origin, version))
}

#[test]
fn a_snapshot_reads_what_was_acknowledged_before_it() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in 0..8 {
            write(&mut ftl, lba, 1);
        }
        // Acknowledged, not flushed: the create makes it durable and keeps it.
        write(&mut ftl, 8, 1);
        let a = ftl.snapshot_create("a").unwrap();
        assert_eq!((a.name.as_str(), a.id), ("a", 0));
        write(&mut ftl, 0, 2);
        ftl.trim(1, 1).unwrap();
        ftl.clone_ranges(&[(4, 2, 1)]).unwrap();
        ftl.move_ranges(&[(5, 20, 1)]).unwrap();
        write(&mut ftl, 30, 2); // never written before the snapshot
        let check = |ftl: &mut Driver<SimDevice>| {
            for lba in 0..9 {
                assert_eq!(holds(ftl, Some("a"), lba), Some((lba, 1)), "a: {lba}");
            }
            assert_eq!(holds(ftl, Some("a"), 20), None);
            assert_eq!(holds(ftl, Some("a"), 30), None);
            assert_eq!(holds(ftl, None, 0), Some((0, 2)));
            assert_eq!(holds(ftl, None, 1), None);
            assert_eq!(holds(ftl, None, 2), Some((4, 1)));
            assert_eq!(holds(ftl, None, 5), None);
            assert_eq!(holds(ftl, None, 20), Some((5, 1)));
            assert_eq!(holds(ftl, None, 30), Some((30, 2)));
        };
        check(&mut ftl);
        let s = ftl.stats();
        assert_eq!(s.snapshots, 1);
        // Kept: 0 (write), 1 (trim), 2 (clone), 5 (move); 20 and 30 were
        // unmapped, which their births tell.
        assert_eq!(s.snapshot_versions, 4);
        remount_both_ways_then_clean(ftl, check, "after snapshots");
    });
}

#[test]
fn each_snapshot_keeps_its_own_version() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        write(&mut ftl, 3, 1);
        ftl.snapshot_create("one").unwrap();
        write(&mut ftl, 3, 2);
        ftl.snapshot_create("two").unwrap();
        write(&mut ftl, 3, 3);
        write(&mut ftl, 3, 4); // replaces a version no snapshot holds
        ftl.snapshot_create("three").unwrap();
        ftl.trim(3, 1).unwrap();
        let check = |ftl: &mut Driver<SimDevice>| {
            assert_eq!(holds(ftl, Some("one"), 3), Some((3, 1)));
            assert_eq!(holds(ftl, Some("two"), 3), Some((3, 2)));
            assert_eq!(holds(ftl, Some("three"), 3), Some((3, 4)));
            assert_eq!(holds(ftl, None, 3), None);
        };
        check(&mut ftl);
        assert_eq!(ftl.stats().snapshot_versions, 3);
        let mut ftl = remount_both_ways(ftl, check);
        // Deleting the middle one keeps what the others need.
        ftl.snapshot_delete("two").unwrap();
        ftl.settle().unwrap();
        let check = |ftl: &mut Driver<SimDevice>| {
            assert_eq!(holds(ftl, Some("one"), 3), Some((3, 1)));
            assert_eq!(holds(ftl, Some("three"), 3), Some((3, 4)));
            let names: Vec<String> = ftl.snapshots().into_iter().map(|s| s.name).collect();
            assert_eq!(names, ["one", "three"]);
            assert_eq!(ftl.stats().snapshot_versions, 2);
        };
        check(&mut ftl);
        remount_both_ways_then_clean(ftl, check, "after a delete");
    });
}

#[test]
fn deleting_every_snapshot_gives_the_space_back() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in 0..256 {
            write(&mut ftl, lba, 1);
        }
        ftl.snapshot_create("base").unwrap();
        for lba in 0..256 {
            write(&mut ftl, lba, 2);
        }
        // A clone keeps one old block live: the snapshot does not alone
        // hold it.
        ftl.snapshot_create("second").unwrap();
        ftl.clone_ranges(&[(0, 300, 1)]).unwrap();
        write(&mut ftl, 0, 3);
        ftl.flush().unwrap();
        let s = ftl.stats();
        assert_eq!((s.live_blocks, s.snapshot_versions), (513, 257));
        assert_eq!(s.snapshot_retained_blocks, 256);
        ftl.snapshot_delete("second").unwrap();
        ftl.snapshot_delete("base").unwrap();
        ftl.settle().unwrap();
        let s = ftl.stats();
        assert_eq!(
            (s.live_blocks, s.snapshot_versions, s.snapshots),
            (257, 0, 0)
        );
        assert_eq!(s.snapshot_retained_blocks, 0);
        assert_eq!(s.snapshot_versions_released, 257);
        let ftl = remount_both_ways(ftl, |ftl| {
            assert_eq!(ftl.stats().live_blocks, 257);
            assert_eq!(holds(ftl, None, 7), Some((7, 2)));
        });
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after deleting every snapshot");
    });
}

#[test]
fn gc_moves_kept_blocks_and_a_crash_keeps_them() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        let n = 512;
        for lba in 0..n {
            write(&mut ftl, lba, 1);
        }
        ftl.snapshot_create("old").unwrap();
        for lba in 0..n {
            write(&mut ftl, lba, 2);
        }
        // Churn the rest of the volume until GC has collected every zone the
        // kept blocks were in at least once.
        let span = ftl.logical_blocks() * 3 / 4 - n;
        // Random blocks of the span, so zones die partly and GC copies.
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for round in 3..9 {
            for _ in 0..span {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                write(&mut ftl, n + x % span, round);
            }
        }
        ftl.flush().unwrap();
        let s = ftl.stats();
        assert!(s.gc_copy_blocks > 0, "GC never ran: {s:?}");
        let check = |ftl: &mut Driver<SimDevice>| {
            for lba in 0..n {
                assert_eq!(holds(ftl, Some("old"), lba), Some((lba, 1)), "old: {lba}");
                assert_eq!(holds(ftl, None, lba), Some((lba, 2)), "live: {lba}");
            }
        };
        check(&mut ftl);
        remount_both_ways_then_clean(ftl, check, "after GC of kept blocks");
    });
}

/// The data zones of the kept stream (blocks GC moved that only snapshots
/// held).
fn kept_zones(ftl: &Driver<SimDevice>) -> Vec<u32> {
    let kept = ZoneKind::Data {
        stream: Stream::Kept,
    };
    let zones = ftl.ftl().geometry().zone_count;
    (0..zones)
        .filter(|&z| ftl.ftl().zone_kind(z) == Some(kept))
        .collect()
}

/// Zones holding a block some live LBA maps to, or a shared entry the live
/// volume names (not only the history).
fn zones_live_data_is_in(ftl: &Driver<SimDevice>) -> BTreeSet<u32> {
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    let m = ftl.ftl().mapping();
    let direct = (0..ftl.logical_blocks()).filter_map(|lba| ftl.ftl().lookup(lba));
    let shared = m
        .shared_entries()
        .filter(|&(id, ..)| !m.kept_only(id))
        .map(|(_, ppa, ..)| ppa);
    direct.chain(shared).map(|ppa| ppa.zone(cap)).collect()
}

#[test]
fn gc_moves_blocks_only_snapshots_hold_to_zones_of_their_own() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        let n = 512;
        let span = ftl.logical_blocks() * 3 / 4 - n;
        // The snapshot's blocks interleaved with blocks trimmed before it
        // (no snapshot keeps them), so their zones are half dead and GC
        // collects them.
        for lba in 0..n {
            write(&mut ftl, lba, 1);
            write(&mut ftl, n + lba, 1);
        }
        ftl.trim(n, n as u32).unwrap();
        ftl.snapshot_create("old").unwrap();
        for lba in 0..n {
            write(&mut ftl, lba, 2);
        }
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for round in 3..7 {
            for _ in 0..span {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                write(&mut ftl, n + x % span, round);
            }
        }
        ftl.flush().unwrap();
        ftl.settle().unwrap();
        let s = ftl.stats();
        assert!(s.gc_kept_blocks > 0, "GC moved no kept block: {s:?}");
        let kept = kept_zones(&ftl);
        assert!(!kept.is_empty(), "no kept zone: {s:?}");
        assert_eq!(s.kept_zones as usize, kept.len());
        // Only blocks the snapshot alone holds are in them: no live data.
        let live = zones_live_data_is_in(&ftl);
        assert!(
            kept.iter().all(|z| !live.contains(z)),
            "live data in kept zones {kept:?}"
        );
        let cap = ftl.ftl().geometry().zone_capacity_blocks;
        let m = ftl.ftl().mapping();
        let moved = m
            .shared_entries()
            .filter(|&(id, ppa, ..)| m.kept_only(id) && kept.contains(&ppa.zone(cap)))
            .count();
        assert!(moved > 0, "no kept block in a kept zone");
        let reads = |ftl: &mut Driver<SimDevice>| {
            for lba in 0..n {
                assert_eq!(holds(ftl, Some("old"), lba), Some((lba, 1)), "old: {lba}");
                assert_eq!(holds(ftl, None, lba), Some((lba, 2)), "live: {lba}");
            }
        };
        reads(&mut ftl);
        let mut ftl = remount_both_ways(ftl, |ftl| {
            reads(ftl);
            // The checkpoint records kept zones as GC zones.
            assert!(kept_zones(ftl).is_empty());
            assert_eq!(ftl.stats().kept_zones, 0);
        });
        // Deleting the snapshot leaves those zones without data: GC
        // resets them without copying.
        ftl.snapshot_delete("old").unwrap();
        ftl.settle().unwrap();
        let m = ftl.ftl().mapping();
        let held: BTreeSet<u32> = m
            .shared_entries()
            .map(|(_, ppa, ..)| ppa.zone(cap))
            .collect();
        let live = zones_live_data_is_in(&ftl);
        for &z in &kept {
            let kind = ftl.ftl().zone_kind(z);
            let empty = !held.contains(&z) && !live.contains(&z);
            assert!(
                kind == Some(ZoneKind::Free) || empty,
                "zone {z} ({kind:?}) still holds data"
            );
        }
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after GC moved kept blocks to kept zones");
    });
}

#[test]
fn when_snapshots_hold_the_media_writes_fail_until_one_is_deleted() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        let n = ftl.logical_blocks() / 2;
        let bs = ftl.block_size();
        for lba in 0..n {
            write(&mut ftl, lba, 1);
        }
        ftl.snapshot_create("full").unwrap();
        let mut refused = None;
        'fill: for round in 2..10 {
            for lba in 0..n {
                match ftl.write(lba, &pattern(lba, round, bs)) {
                    Ok(()) => {}
                    Err(e) => {
                        refused = Some(e);
                        break 'fill;
                    }
                }
            }
        }
        assert_eq!(refused, Some(IoError::SnapshotSpace));
        let message = IoError::SnapshotSpace.to_string();
        assert!(message.contains("snapshots hold the space"), "{message}");
        assert_eq!(holds(&mut ftl, Some("full"), 1), Some((1, 1)));
        // Writes right after the delete wait while its sweep gives the
        // space back, rather than fail.
        ftl.snapshot_delete("full").unwrap();
        for lba in 0..n {
            write(&mut ftl, lba, 20);
        }
        ftl.flush().unwrap();
        assert_eq!(holds(&mut ftl, None, n - 1), Some((n - 1, 20)));
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after a full device");
    });
}

#[test]
fn bad_snapshot_requests_get_typed_errors() {
    both_modes(|oob| {
        use zftl::core::history::SnapshotError;
        let mut ftl = format(oob);
        write(&mut ftl, 0, 1);
        ftl.snapshot_create("x").unwrap();
        let err = |e: SnapshotError| Err(IoError::Snapshot(e));
        assert_eq!(
            ftl.snapshot_create("x").map(drop),
            err(SnapshotError::NameTaken("x".into()))
        );
        assert_eq!(
            ftl.snapshot_create("").map(drop),
            err(SnapshotError::BadName { len: 0, max: 63 })
        );
        assert_eq!(
            ftl.snapshot_create(&"n".repeat(64)).map(drop),
            err(SnapshotError::BadName { len: 64, max: 63 })
        );
        assert_eq!(
            ftl.snapshot_delete("nope"),
            err(SnapshotError::NoSuchName("nope".into()))
        );
        assert_eq!(
            ftl.read_snapshot(9, 0, 1),
            Err(IoError::Snapshot(SnapshotError::NoSuchId(9)))
        );
        let end = ftl.logical_blocks();
        assert!(matches!(
            ftl.read_snapshot(0, end, 1),
            Err(IoError::OutOfRange { .. })
        ));
        // Ids are never reused, also across a remount.
        ftl.snapshot_delete("x").unwrap();
        let dev = ftl.shutdown().unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        assert_eq!(ftl.snapshot_create("x").unwrap().id, 1);
    });
}

/// Overwrites random blocks of `from..from + span` until GC has copied at
/// least `copies` more blocks: "force cleaning".
fn churn_until_gc(ftl: &mut Driver<SimDevice>, from: u64, span: u64, copies: u64) {
    let start = ftl.stats().gc_copy_blocks;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut version = 1000;
    while ftl.stats().gc_copy_blocks < start + copies {
        for _ in 0..span {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            write(ftl, from + x % span, version);
        }
        version += 1;
        assert!(version < 1100, "GC did not copy {copies} blocks");
    }
    ftl.flush().unwrap();
}

/// With tags in OOB a create that finds no snapshot live writes its note
/// and waits for no checkpoint, though the blocks written since the last
/// checkpoint are known to recovery by their tags alone. GC then copies
/// them, empties their zones and the host overwrites them (the snapshot
/// keeps them) before any periodic checkpoint, and power is cut: the
/// snapshot still reads them. (GC leaves their zones alone until a
/// checkpoint covers them.)
#[test]
fn a_first_create_keeps_blocks_known_by_tags_alone_through_gc_and_a_cut() {
    let config = FtlConfig {
        checkpoint_interval_blocks: 1 << 40,
        ..FtlConfig::default()
    };
    let dev = SimDevice::create_memory(sim_config(true)).unwrap();
    let mut ftl = Driver::format(dev, &format_options(true), config).unwrap();
    // The rest of the volume written and trimmed, then checkpointed, so GC
    // is near; targets interleaved with fillers that die before the
    // create, so their zones are the first GC copies from.
    let n = 128;
    let fillers = 7 * n;
    let rest = n + fillers..ftl.logical_blocks() * 7 / 8;
    for lba in rest.clone() {
        write(&mut ftl, lba, 1);
    }
    for lba in rest.clone().step_by(1024) {
        ftl.trim(lba, (rest.end - lba).min(1024) as u32).unwrap();
    }
    ftl.checkpoint().unwrap();
    for lba in 0..n {
        write(&mut ftl, lba, 1);
        for f in 0..7 {
            write(&mut ftl, n + 7 * lba + f, 1);
        }
    }
    for lba in n..n + fillers {
        write(&mut ftl, lba, 2);
    }
    ftl.flush().unwrap();
    let at_create: Vec<_> = (0..n).map(|lba| ftl.ftl().lookup(lba)).collect();
    let checkpoints = ftl.stats().checkpoints;
    ftl.snapshot_create("s").unwrap();
    assert_eq!(
        ftl.stats().checkpoints,
        checkpoints,
        "the create waited for a checkpoint"
    );
    // Overwrites of the rest until GC has moved every target.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut version = 2;
    while (0..n).any(|lba| ftl.ftl().lookup(lba) == at_create[lba as usize]) {
        for _ in 0..64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            write(&mut ftl, rest.start + x % (rest.end - rest.start), version);
        }
        version += 1;
        assert!(version < 1000, "GC did not move the targets");
    }
    for lba in 0..n {
        write(&mut ftl, lba, 3);
    }
    ftl.flush().unwrap();
    let check = |ftl: &mut Driver<SimDevice>| {
        for lba in 0..n {
            assert_eq!(holds(ftl, Some("s"), lba), Some((lba, 1)), "s: {lba}");
            assert_eq!(holds(ftl, None, lba), Some((lba, 3)), "live: {lba}");
        }
    };
    check(&mut ftl);
    let mut dev = ftl.into_backend();
    assert_check_clean(&mut dev, "after a cut");
    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    check(&mut ftl);
    let mut dev = ftl.shutdown().unwrap();
    assert_check_clean(&mut dev, "after the remount");
}

/// ioSnap (Subramanian's dissertation) Fig 3.3: write 10, 20, 30;
/// snapshot; write 10, 40, 60, 70; force cleaning; the snapshot still
/// returns the old 10.
#[test]
fn fig_3_3_a_snapshot_outlives_cleaning() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in [10, 20, 30] {
            write(&mut ftl, lba, 1);
        }
        ftl.snapshot_create("s").unwrap();
        for lba in [10, 40, 60, 70] {
            write(&mut ftl, lba, 2);
        }
        let span = ftl.logical_blocks() / 2;
        churn_until_gc(&mut ftl, 1000, span, 4 * span);
        let check = |ftl: &mut Driver<SimDevice>| {
            assert_eq!(holds(ftl, Some("s"), 10), Some((10, 1)));
            for lba in [20, 30] {
                assert_eq!(holds(ftl, Some("s"), lba), Some((lba, 1)));
            }
            for lba in [40, 60, 70] {
                assert_eq!(holds(ftl, Some("s"), lba), None);
                assert_eq!(holds(ftl, None, lba), Some((lba, 2)));
            }
            assert_eq!(holds(ftl, None, 10), Some((10, 2)));
        };
        check(&mut ftl);
        remount_both_ways_then_clean(ftl, check, "after Fig 3.3");
    });
}

/// ioSnap Fig 3.6: cleaning with a deleted parent epoch and a live child.
/// The parent's blocks the child still needs survive cleaning; those only
/// the parent held come back.
#[test]
fn fig_3_6_cleaning_with_a_deleted_parent_and_a_live_child() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in 0..64 {
            write(&mut ftl, lba, 1);
        }
        ftl.snapshot_create("parent").unwrap();
        // Epoch 2: half the blocks change, the child sees that.
        for lba in 0..32 {
            write(&mut ftl, lba, 2);
        }
        ftl.snapshot_create("child").unwrap();
        // Epoch 3: every block changes.
        for lba in 0..64 {
            write(&mut ftl, lba, 3);
        }
        ftl.flush().unwrap();
        // Parent keeps 0..64 at version 1; the child 0..32 at 2, 32..64 at 1
        // (shared with the parent).
        assert_eq!(ftl.stats().snapshot_versions, 96);
        ftl.snapshot_delete("parent").unwrap();
        ftl.settle().unwrap();
        // Only version 1 of 0..32 was the parent's alone.
        assert_eq!(ftl.stats().snapshot_versions, 64);
        assert_eq!(ftl.stats().snapshot_versions_released, 32);
        let span = ftl.logical_blocks() / 2;
        churn_until_gc(&mut ftl, 1000, span, 4 * span);
        let check = |ftl: &mut Driver<SimDevice>| {
            for lba in 0..64 {
                let child = if lba < 32 { 2 } else { 1 };
                assert_eq!(
                    holds(ftl, Some("child"), lba),
                    Some((lba, child)),
                    "child: {lba}"
                );
                assert_eq!(holds(ftl, None, lba), Some((lba, 3)), "live: {lba}");
            }
            assert_eq!(ftl.stats().snapshot_versions, 64);
        };
        check(&mut ftl);
        remount_both_ways_then_clean(ftl, check, "after Fig 3.6");
    });
}

/// The handles take, list, read and delete snapshots as `Driver` does.
#[test]
fn the_handles_take_read_and_delete_snapshots() {
    use zftl::{Handle, InlineHandle};
    let bs = 4096;
    let handle = Handle::spawn(format(false));
    handle.write(3, &pattern(3, 1, bs)).unwrap();
    let s = handle.snapshot_create("h").unwrap();
    handle.write(3, &pattern(3, 2, bs)).unwrap();
    assert_eq!(handle.read_snapshot(s.id, 3, 1).unwrap(), pattern(3, 1, bs));
    let names: Vec<String> = handle
        .snapshots()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["h"]);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let a = handle.to_async();
    runtime.block_on(async {
        let t = a.snapshot_create("a").await.unwrap();
        a.write(3, &pattern(3, 3, bs)).await.unwrap();
        assert_eq!(
            a.read_snapshot(t.id, 3, 1).await.unwrap(),
            pattern(3, 2, bs)
        );
        a.snapshot_delete("h").await.unwrap();
        assert_eq!(a.snapshots().await.unwrap().len(), 1);
    });
    let driver_back = handle.shutdown().unwrap();
    let inline = InlineHandle::new(Driver::mount(driver_back, FtlConfig::default()).unwrap());
    let t = inline.snapshots().unwrap()[0].clone();
    assert_eq!(t.name, "a");
    assert_eq!(inline.read_snapshot(t.id, 3, 1).unwrap(), pattern(3, 2, bs));
    inline.snapshot_delete("a").unwrap();
    assert!(inline.snapshots().unwrap().is_empty());
    assert!(matches!(
        inline.snapshot_delete("a"),
        Err(IoError::Snapshot(_))
    ));
}

/// A volume written end to end still takes overwrites while a snapshot
/// keeps the blocks they replace: kept versions use the room the logical
/// size leaves on the media.
#[test]
fn a_full_volume_overwrites_while_a_snapshot_keeps_the_old_blocks() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        let n = ftl.logical_blocks();
        let bs = ftl.block_size();
        for lba in (0..n).step_by(64) {
            let blocks: Vec<u8> = (lba..(lba + 64).min(n))
                .flat_map(|l| pattern(l, 1, bs))
                .collect();
            ftl.write(lba, &blocks).unwrap();
        }
        ftl.snapshot_create("full").unwrap();
        // The test device's over-provisioning is about 8 %: a thirty-second
        // of the volume fits beside it.
        let kept = n / 32;
        for lba in 0..kept {
            write(&mut ftl, lba * 16, 2);
        }
        ftl.flush().unwrap();
        assert_eq!(ftl.stats().snapshot_versions, kept);
        assert_eq!(holds(&mut ftl, Some("full"), 16), Some((16, 1)));
        assert_eq!(holds(&mut ftl, None, 16), Some((16, 2)));
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after overwrites of a full volume");
    });
}

/// `snapshot diff` and `Request::Changed`: exactly the blocks written,
/// trimmed or cloned onto since a snapshot, between two snapshots in
/// either order and against the live volume (buffered writes included),
/// not the blocks GC moved, across a remount and a crash.
#[test]
fn a_diff_lists_exactly_the_blocks_changed() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in 0..64 {
            write(&mut ftl, lba, 1);
        }
        ftl.trim(100, 1).unwrap();
        ftl.snapshot_create("a").unwrap();
        write(&mut ftl, 3, 2); // mapped, overwritten
        write(&mut ftl, 4, 1); // the same data again: a new version
        ftl.trim(5, 2).unwrap(); // mapped, trimmed
        ftl.trim(200, 1).unwrap(); // never written: no change
        write(&mut ftl, 300, 2); // unmapped, written
        write(&mut ftl, 301, 2);
        ftl.trim(301, 1).unwrap(); // written and trimmed again: no change
        ftl.clone_ranges(&[(10, 20, 2)]).unwrap(); // 20, 21 changed
        ftl.flush().unwrap();
        ftl.snapshot_create("b").unwrap();
        write(&mut ftl, 40, 3);
        write(&mut ftl, 400, 3);
        let a_b = vec![(3, 4), (20, 2), (300, 1)];
        let b_live = vec![(40, 1), (400, 1)];
        let a_live = vec![(3, 4), (20, 2), (40, 1), (300, 1), (400, 1)];
        let check = |ftl: &mut Driver<SimDevice>| {
            assert_eq!(ftl.snapshot_diff("a", Some("b")).unwrap(), a_b);
            assert_eq!(ftl.snapshot_diff("b", Some("a")).unwrap(), a_b);
            assert_eq!(ftl.snapshot_diff("b", None).unwrap(), b_live);
            assert_eq!(ftl.snapshot_diff("a", None).unwrap(), a_live);
            assert_eq!(ftl.snapshot_diff("a", Some("a")).unwrap(), vec![]);
            let a = ftl.snapshot_named("a").unwrap().id;
            // A range query sees only its range.
            assert_eq!(ftl.changed(a, None, 4, 17).unwrap(), vec![(4, 3), (20, 1)]);
        };
        // Before the flush the new writes may still be buffered.
        check(&mut ftl);
        let span = ftl.logical_blocks() / 2;
        churn_until_gc(&mut ftl, 1000, span, 2 * span);
        let b = ftl.snapshot_named("b").unwrap().id;
        let churned = ftl.changed(b, None, 0, 1000).unwrap();
        assert_eq!(churned, b_live, "GC's moves are not changes");
        // The churn rewrote 1000.. after both snapshots.
        let a = ftl.snapshot_named("a").unwrap().id;
        assert_eq!(ftl.changed(a, Some(b), 1000, 1000).unwrap(), vec![]);
        assert!(!ftl.changed(a, None, 1000, 1000).unwrap().is_empty());
        let check = |ftl: &mut Driver<SimDevice>| {
            assert_eq!(ftl.snapshot_diff("a", Some("b")).unwrap(), a_b);
            assert_eq!(ftl.changed(b, None, 0, 1000).unwrap(), b_live);
        };
        let mut ftl = remount_both_ways(ftl, check);
        // Deleting the older snapshot leaves the diff from the newer one.
        ftl.snapshot_delete("a").unwrap();
        assert_eq!(ftl.changed(b, None, 0, 1000).unwrap(), b_live);
        assert!(matches!(
            ftl.changed(a, None, 0, 1),
            Err(IoError::Snapshot(_))
        ));
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after diffs");
    });
}

#[test]
fn bad_diff_requests_get_typed_errors() {
    let mut ftl = format(true);
    ftl.snapshot_create("a").unwrap();
    let a = ftl.snapshot_named("a").unwrap().id;
    let blocks = ftl.logical_blocks();
    assert!(matches!(
        ftl.snapshot_diff("nope", None),
        Err(IoError::Snapshot(_))
    ));
    assert!(matches!(
        ftl.snapshot_diff("a", Some("nope")),
        Err(IoError::Snapshot(_))
    ));
    assert!(matches!(
        ftl.changed(a, Some(a + 7), 0, 1),
        Err(IoError::Snapshot(_))
    ));
    assert!(matches!(
        ftl.changed(a, None, blocks - 1, 2),
        Err(IoError::OutOfRange { .. })
    ));
    assert!(matches!(
        ftl.changed(a, None, 0, zftl::core::MAX_EXTENT_QUERY_BLOCKS + 1),
        Err(IoError::TooLarge { .. })
    ));
    assert_eq!(ftl.changed(a, None, 0, 0).unwrap(), vec![]);
}

/// A revert makes the live volume what a snapshot holds (writes, trims and
/// clones since undone, no data copied), keeps the state it leaves as an
/// undo snapshot to revert back to, and survives a remount and a crash.
#[test]
fn a_revert_brings_a_snapshot_back_and_can_be_undone() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in 0..32 {
            write(&mut ftl, lba, 1);
        }
        ftl.snapshot_create("t").unwrap();
        write(&mut ftl, 3, 2);
        ftl.trim(4, 1).unwrap();
        write(&mut ftl, 100, 2);
        ftl.clone_ranges(&[(10, 20, 2)]).unwrap();
        ftl.snapshot_create("later").unwrap();
        write(&mut ftl, 5, 3);
        let writes_before = ftl.stats().host_write_blocks;
        let undo = ftl.snapshot_revert("t", None).unwrap();
        assert_eq!(undo.name, format!("undo-{}", undo.id));
        assert_eq!(
            ftl.stats().host_write_blocks,
            writes_before,
            "no data copied"
        );
        assert_eq!(ftl.stats().snapshot_revert_blocks, 6); // 3, 4, 5, 20, 21, 100
        let reverted = |ftl: &mut Driver<SimDevice>| {
            for lba in 0..32 {
                assert_eq!(holds(ftl, None, lba), Some((lba, 1)), "block {lba}");
            }
            assert_eq!(holds(ftl, None, 100), None);
            assert_eq!(ftl.snapshot_diff("t", None).unwrap(), vec![]);
            // The undo snapshot holds the state the revert left.
            let undo = ftl.snapshots().last().unwrap().name.clone();
            assert_eq!(holds(ftl, Some(&undo), 3), Some((3, 2)));
            assert_eq!(holds(ftl, Some(&undo), 4), None);
            assert_eq!(holds(ftl, Some(&undo), 5), Some((5, 3)));
            assert_eq!(holds(ftl, Some(&undo), 20), Some((10, 1)));
            assert_eq!(holds(ftl, Some("later"), 5), Some((5, 1)));
        };
        reverted(&mut ftl);
        // Writes after the revert go on from the reverted state.
        write(&mut ftl, 6, 4);
        let span = ftl.logical_blocks() / 2;
        churn_until_gc(&mut ftl, 1000, span, 2 * span);
        let check = |ftl: &mut Driver<SimDevice>| {
            assert_eq!(holds(ftl, None, 6), Some((6, 4)));
            assert_eq!(holds(ftl, None, 3), Some((3, 1)));
            assert_eq!(holds(ftl, Some(&undo.name), 3), Some((3, 2)));
        };
        let mut ftl = remount_both_ways(ftl, check);
        // Undoing the churn would keep all of it for the new undo snapshot.
        ftl.trim(1000, span as u32).unwrap();
        // Undo: back to the state before the revert, under a chosen name.
        let again = ftl.snapshot_revert(&undo.name, Some("after-undo")).unwrap();
        assert_eq!(again.name, "after-undo");
        let undone = |ftl: &mut Driver<SimDevice>| {
            assert_eq!(holds(ftl, None, 3), Some((3, 2)));
            assert_eq!(holds(ftl, None, 4), None);
            assert_eq!(holds(ftl, None, 5), Some((5, 3)));
            assert_eq!(holds(ftl, None, 100), Some((100, 2)));
            assert_eq!(holds(ftl, None, 6), Some((6, 1)));
        };
        let undone_and_kept = |ftl: &mut Driver<SimDevice>| {
            undone(ftl);
            assert_eq!(holds(ftl, Some("after-undo"), 6), Some((6, 4)));
        };
        undone_and_kept(&mut ftl);
        let mut ftl = remount_both_ways(ftl, undone_and_kept);
        for name in ["t", "later", &undo.name, "after-undo"] {
            ftl.snapshot_delete(name).unwrap();
        }
        undone(&mut ftl);
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after reverts");
    });
}

#[test]
fn bad_reverts_get_typed_errors() {
    let mut ftl = format(true);
    ftl.snapshot_create("t").unwrap();
    write(&mut ftl, 1, 2);
    for (to, undo) in [("nope", None), ("t", Some("t")), ("t", Some(""))] {
        assert!(
            matches!(ftl.snapshot_revert(to, undo), Err(IoError::Snapshot(_))),
            "revert to {to:?}, undo {undo:?}"
        );
    }
    assert_eq!(holds(&mut ftl, None, 1), Some((1, 2)), "nothing changed");
    assert_eq!(ftl.snapshots().len(), 1);
}

fn format_window(oob: bool, window: ProtectWindow, clock: &Arc<AtomicU64>) -> Driver<SimDevice> {
    let opts = format_options(oob);
    let cfg = FtlConfig {
        protect_window: Some(window),
        ..FtlConfig::default()
    };
    let dev = SimDevice::create_memory(sim_config(oob)).unwrap();
    let mut ftl = Driver::format(dev, &opts, cfg).unwrap();
    follow(&mut ftl, clock);
    ftl
}

/// Mounts `dev` with `window`, its wall clock `clock`.
fn mount_window(
    dev: SimDevice,
    window: ProtectWindow,
    clock: &Arc<AtomicU64>,
) -> Driver<SimDevice> {
    let cfg = FtlConfig {
        protect_window: Some(window),
        ..FtlConfig::default()
    };
    let mut ftl = Driver::mount(dev, cfg).unwrap();
    follow(&mut ftl, clock);
    ftl
}

/// Gives `ftl` the wall clock `clock`.
fn follow(ftl: &mut Driver<SimDevice>, clock: &Arc<AtomicU64>) {
    let c = clock.clone();
    ftl.set_wall_clock(move || c.load(Ordering::SeqCst));
}

const SEC: u64 = 1_000_000_000;
/// 2026-11-27T10:00:00Z.
const T0: u64 = 1_795_773_600 * SEC;

/// Moves the wall clock on by `ns` in steps of 200 ms, letting the core
/// take and drop points at each.
fn pass_time(ftl: &mut Driver<SimDevice>, clock: &AtomicU64, ns: u64) {
    let end = clock.load(Ordering::SeqCst) + ns;
    while clock.load(Ordering::SeqCst) < end {
        clock.fetch_add(SEC / 5, Ordering::SeqCst);
        ftl.settle().unwrap();
    }
}

fn points(ftl: &Driver<SimDevice>) -> Vec<String> {
    let snapshots = ftl.snapshots().into_iter();
    snapshots.filter(|s| s.is_point()).map(|s| s.name).collect()
}

/// The protection window: a point while the volume changes (none while it
/// does not), named by its time; a revert to one; points older than the
/// window dropped; points and their times kept across a remount and a
/// crash; user names may not look like points.
#[test]
fn the_protection_window_keeps_points_to_revert_to() {
    both_modes(|oob| {
        let clock = Arc::new(AtomicU64::new(T0));
        let mut ftl = format_window(oob, ProtectWindow::Secs(10), &clock);
        for lba in 0..4 {
            write(&mut ftl, lba, 1);
        }
        pass_time(&mut ftl, &clock, SEC / 5);
        write(&mut ftl, 0, 2);
        pass_time(&mut ftl, &clock, 2 * SEC);
        write(&mut ftl, 1, 3);
        ftl.trim(2, 1).unwrap();
        pass_time(&mut ftl, &clock, 2 * SEC);
        pass_time(&mut ftl, &clock, 3 * SEC); // no change: no point
                                              // A point at the first look at the clock a second or more after
                                              // the last (every 200 ms here).
        assert_eq!(
            points(&ftl),
            [
                "@2026-11-27T10:00:00Z",
                "@2026-11-27T10:00:01Z",
                "@2026-11-27T10:00:02Z"
            ]
        );
        let oldest = ftl.stats().window_oldest_ns;
        assert!((T0..T0 + SEC).contains(&oldest), "{oldest}");
        assert!(matches!(
            ftl.snapshot_create("@mine"),
            Err(IoError::Snapshot(_))
        ));
        // Back to 10:00:01: block 0 is v2, 1 and 2 are v1 again.
        ftl.snapshot_revert("@2026-11-27T10:00:01Z", None).unwrap();
        let at_2 = |ftl: &mut Driver<SimDevice>| {
            assert_eq!(holds(ftl, None, 0), Some((0, 2)));
            assert_eq!(holds(ftl, None, 1), Some((1, 1)));
            assert_eq!(holds(ftl, None, 2), Some((2, 1)));
            assert_eq!(holds(ftl, Some("@2026-11-27T10:00:00Z"), 0), Some((0, 1)));
            assert_eq!(holds(ftl, Some("@2026-11-27T10:00:02Z"), 1), Some((1, 3)));
        };
        at_2(&mut ftl);
        let mut ftl = remount_both_ways(ftl, at_2);
        follow(&mut ftl, &clock);
        let snaps = ftl.snapshots();
        let p2 = snaps.iter().find(|s| s.name == "@2026-11-27T10:00:02Z");
        let t2 = p2.unwrap().wall_ns;
        assert!((T0 + 2 * SEC..T0 + 3 * SEC).contains(&t2), "{t2}");
        // A remount with the window configured again (the test's default
        // mount has none): 9.5 to 9.9 s after the third point, the first
        // two are older than 10 s and the third is not.
        let dev = ftl.shutdown().unwrap();
        let mut ftl = mount_window(dev, ProtectWindow::Secs(10), &clock);
        clock.store(t2 + 9 * SEC + SEC / 2, Ordering::SeqCst);
        pass_time(&mut ftl, &clock, 2 * SEC / 5);
        assert_eq!(points(&ftl), ["@2026-11-27T10:00:02Z"]);
        assert_eq!(ftl.stats().window_points_expired, 2);
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after the window");
    });
}

/// A volume with a window of an hour, every block written three times two
/// seconds apart, the window's points holding the versions they keep.
fn window_of_overwrites(oob: bool) -> Driver<SimDevice> {
    let clock = Arc::new(AtomicU64::new(T0));
    let mut ftl = format_window(oob, ProtectWindow::Secs(3600), &clock);
    let blocks = ftl.logical_blocks();
    for round in 1..=3u32 {
        for lba in 0..blocks {
            write(&mut ftl, lba, round);
        }
        pass_time(&mut ftl, &clock, 2 * SEC);
    }
    ftl
}

/// When points hold the room a write needs, the oldest points are dropped
/// and the write goes through; a user snapshot never gives way.
#[test]
fn the_window_gives_way_before_a_write_fails() {
    both_modes(|oob| {
        let mut ftl = window_of_overwrites(oob);
        let blocks = ftl.logical_blocks();
        let stats = ftl.stats();
        assert!(stats.window_points_given_way > 0, "{stats:?}");
        assert!(!points(&ftl).is_empty());
        for lba in (0..blocks).step_by(97) {
            assert_eq!(holds(&mut ftl, None, lba), Some((lba, 3)));
        }
        ftl.snapshot_create("keep").unwrap();
        let bs = ftl.block_size();
        let refused = (0..blocks).find_map(|lba| ftl.write(lba, &pattern(lba, 4, bs)).err());
        assert_eq!(refused, Some(IoError::SnapshotSpace));
        assert!(points(&ftl).is_empty(), "every point gave way first");
        assert_eq!(holds(&mut ftl, Some("keep"), 0), Some((0, 3)));
    });
}

/// A range-operation vector that finds no room while window points hold
/// some waits while the oldest points are dropped, and goes through; with
/// a user snapshot holding the room it fails with `SnapshotSpace`, once
/// every point gave way.
#[test]
fn a_vector_gives_way_to_window_points_before_it_fails() {
    both_modes(|oob| {
        let mut ftl = window_of_overwrites(oob);
        let blocks = ftl.logical_blocks();
        ftl.flush().unwrap();
        let before = ftl.stats();
        assert!(
            before.window_points > 0 && before.snapshot_versions >= 2,
            "{before:?}"
        );
        // Each block a vector changes may keep a version: more than the
        // room left, less than the room without the points' versions.
        let n = before.snapshot_room_versions + before.snapshot_versions / 2;
        assert!(n < blocks, "{before:?}");
        ftl.delete_ranges(&[(0, n)]).unwrap();
        let after = ftl.stats();
        assert!(
            after.window_points_given_way > before.window_points_given_way,
            "{after:?}"
        );
        assert_eq!(after.range_vectors_refused, 0);
        assert_eq!(holds(&mut ftl, None, n - 1), None);
        assert_eq!(holds(&mut ftl, None, n), Some((n, 3)));
        // A user snapshot never gives way.
        ftl.snapshot_create("keep").unwrap();
        // More than the room there is with every point dropped.
        let s = ftl.stats();
        assert!(
            s.snapshot_room_versions + s.snapshot_versions < blocks / 2,
            "{s:?}"
        );
        let refused = ftl.delete_ranges(&[(0, blocks)]);
        assert_eq!(refused, Err(IoError::SnapshotSpace));
        assert!(points(&ftl).is_empty(), "every point gave way first");
        assert_eq!(holds(&mut ftl, Some("keep"), n), Some((n, 3)));
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after the vectors");
    });
}

/// Writes `n` blocks, one request each, from `*written` on (modulo the
/// volume), each the version of its pass over the volume.
fn write_blocks(ftl: &mut Driver<SimDevice>, written: &mut u64, n: u64) {
    let blocks = ftl.logical_blocks();
    for _ in 0..n {
        let lba = *written % blocks;
        write(ftl, lba, (*written / blocks) as u32 + 1);
        *written += 1;
    }
}

/// A window of host blocks written: a point once `max(256, N / 1024)`
/// blocks were written since the last (and a second passed), each dropped
/// once more than N blocks were written after it; after a remount the
/// points from before it count as taken at the mount.
#[test]
fn a_window_in_blocks_written_takes_and_expires_points() {
    both_modes(|oob| {
        let clock = Arc::new(AtomicU64::new(T0));
        let window = ProtectWindow::Blocks(1024);
        let mut ftl = format_window(oob, window, &clock);
        let tick = |ftl: &mut Driver<SimDevice>| pass_time(ftl, &clock, SEC + SEC / 5);
        let mut written = 0;
        write_blocks(&mut ftl, &mut written, 10);
        tick(&mut ftl);
        // The first change takes a point at once (it holds the first write
        // or more: the clock was looked at as it came).
        assert_eq!(points(&ftl).len(), 1);
        let first = ftl.snapshots()[0].clone();
        write_blocks(&mut ftl, &mut written, 200);
        tick(&mut ftl);
        assert_eq!(points(&ftl).len(), 1, "fewer than 256 blocks since");
        let reach = ftl.stats().window_reach_blocks;
        assert!((200..=210).contains(&reach), "{reach}");
        let at_first = written - reach; // host blocks written before it
        write_blocks(&mut ftl, &mut written, 70);
        tick(&mut ftl);
        assert_eq!(points(&ftl).len(), 2, "256 blocks since the first");
        // Up to 1024 blocks after the first point it stays.
        while written + 64 <= at_first + 1024 {
            write_blocks(&mut ftl, &mut written, 64);
            tick(&mut ftl);
        }
        assert_eq!(ftl.snapshots()[0].id, first.id, "{written}");
        let kept = points(&ftl).len();
        assert!((4..=5).contains(&kept), "{kept} points");
        let rest = at_first + 1025 - written;
        write_blocks(&mut ftl, &mut written, rest);
        tick(&mut ftl);
        let s = ftl.stats();
        assert_ne!(ftl.snapshots()[0].id, first.id, "expired at {written}");
        assert_eq!(s.window_points_expired, 1);
        assert!(s.window_reach_blocks <= 1024, "{s:?}");
        // A remount: the points recovered count as taken at the mount, so
        // the window then reaches back further until 1024 more blocks are
        // written.
        let recovered = points(&ftl);
        let dev = ftl.shutdown().unwrap();
        let mut ftl = mount_window(dev, window, &clock);
        assert_eq!(points(&ftl), recovered);
        // Fresh blocks: no version kept, nothing crowds the window.
        let mounted_at = written;
        while written - mounted_at + 64 <= 1024 {
            write_blocks(&mut ftl, &mut written, 64);
            tick(&mut ftl);
        }
        let now = points(&ftl);
        assert!(
            recovered.iter().all(|p| now.contains(p)),
            "{recovered:?} {now:?} {:?}",
            ftl.stats()
        );
        assert_eq!(ftl.stats().window_points_expired, 0);
        assert_eq!(ftl.stats().window_reach_blocks, 1024);
        write_blocks(&mut ftl, &mut written, 1);
        tick(&mut ftl);
        let now = points(&ftl);
        assert!(recovered.iter().all(|p| !now.contains(p)), "{now:?}");
        assert!(!now.is_empty(), "points taken since the mount stay");
        assert_eq!(ftl.stats().window_points_expired, recovered.len() as u64);
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after the window");
    });
}

/// The core's own requests (the window's points) never answer through
/// the caller's replies: a caller may use every id, `u64::MAX` too.
#[test]
fn every_request_id_is_the_callers() {
    let clock = Arc::new(AtomicU64::new(T0));
    let mut ftl = format_window(false, ProtectWindow::Secs(10), &clock);
    write(&mut ftl, 0, 1);
    pass_time(&mut ftl, &clock, SEC);
    assert_eq!(points(&ftl).len(), 1);
    let bs = ftl.block_size();
    let data = pattern(1, 1, bs);
    let requests = [
        zftl::core::Request::Write {
            lba: 1,
            data,
            fua: true,
        },
        zftl::core::Request::SnapshotCreate {
            name: "max".into(),
            wall_ns: T0 + SEC,
        },
    ];
    for request in requests {
        ftl.try_submit(u64::MAX, request).unwrap();
        assert!(ftl.wait_for(u64::MAX).is_ok());
    }
    write(&mut ftl, 2, 1);
    pass_time(&mut ftl, &clock, 11 * SEC);
    // Points were still taken and dropped meanwhile.
    let s = ftl.stats();
    assert!(
        s.window_points_expired >= 1 && s.window_point_failures == 0,
        "{s:?}"
    );
    assert!(ftl.snapshot_named("max").is_ok());
}

/// A snapshot's wall time survives a crash before any checkpoint recorded
/// it: its create vector logs it (a Clock note), for the undo snapshot of
/// a revert too.
#[test]
fn a_snapshot_keeps_its_time_through_a_crash() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        write(&mut ftl, 1, 1);
        let s = ftl.snapshot_create("t").unwrap();
        write(&mut ftl, 1, 2);
        let undo = ftl.snapshot_revert("t", None).unwrap();
        assert!(s.wall_ns > 0 && undo.wall_ns >= s.wall_ns);
        let dev = ftl.into_backend();
        let ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        let times: Vec<u64> = ftl.snapshots().iter().map(|s| s.wall_ns).collect();
        assert_eq!(times, [s.wall_ns, undo.wall_ns]);
    });
}

/// After a clean mount the kept versions stay in the array the checkpoint
/// loaded until a change needs the ordered maps (crates/ftl/src/kept.rs):
/// reads of every snapshot, diffs and a revert answer from that array, and
/// the keeps, deletes and sweeps that come after build the maps and agree
/// with the model, through a clean remount and a crash.
#[test]
fn snapshots_read_diff_and_revert_from_the_versions_a_mount_loaded() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        // Snapshot `s{i}` sees version `i + 1` of blocks `i * 4 ..` and
        // version `i` (or 1) of later ones: each keeps 4 versions.
        let snapshots = 24u64;
        let span = snapshots * 4;
        for lba in 0..span {
            write(&mut ftl, lba, 1);
        }
        for i in 0..snapshots {
            ftl.snapshot_create(&format!("s{i}")).unwrap();
            for lba in i * 4..i * 4 + 4 {
                write(&mut ftl, lba, 2);
            }
        }
        ftl.flush().unwrap();
        let expect = |s: u64, lba: u64| if lba < s * 4 { 2 } else { 1 };
        let check_snapshots = move |ftl: &mut Driver<SimDevice>| {
            for s in [0, 1, snapshots / 2, snapshots - 1] {
                let name = format!("s{s}");
                for lba in 0..span {
                    let want = Some((lba, expect(s, lba)));
                    assert_eq!(holds(ftl, Some(&name), lba), want, "{name} block {lba}");
                }
            }
            assert_eq!(ftl.snapshot_diff("s0", Some("s1")).unwrap(), vec![(0, 4)]);
        };
        let dev = ftl.shutdown().unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        check_snapshots(&mut ftl);
        let newest_but_one = format!("s{}", snapshots - 2);
        let to_live = ftl.snapshot_diff(&newest_but_one, None).unwrap();
        assert_eq!(to_live, vec![((snapshots - 2) * 4, 8)]);
        // A revert after the mount: the live volume reads as s0 again.
        ftl.snapshot_revert("s0", Some("before-revert")).unwrap();
        for lba in 0..span {
            assert_eq!(holds(&mut ftl, None, lba), Some((lba, 1)), "block {lba}");
            assert_eq!(holds(&mut ftl, Some("before-revert"), lba), Some((lba, 2)));
        }
        ftl.snapshot_delete("before-revert").unwrap();
        // A keep (the first change) and a delete's sweep after the mount.
        write(&mut ftl, 0, 3);
        ftl.snapshot_delete(&format!("s{}", snapshots / 2 + 1))
            .unwrap();
        ftl.settle().unwrap();
        let check_after = move |ftl: &mut Driver<SimDevice>| {
            check_snapshots(ftl);
            assert_eq!(holds(ftl, None, 0), Some((0, 3)));
            for lba in 1..span {
                assert_eq!(holds(ftl, None, lba), Some((lba, 1)), "block {lba}");
            }
            assert_eq!(ftl.snapshot_diff("s0", None).unwrap(), vec![(0, 1)]);
        };
        remount_both_ways_then_clean(ftl, check_after, "after the loaded versions changed");
    });
}
