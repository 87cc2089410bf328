//! Writable forks of snapshots end to end on the simulator through
//! `Driver`: a fork reads its snapshot until it writes, its writes and
//! trims touch neither the snapshot nor the live volume, GC and both kinds
//! of remount keep all three apart, deletes give the space back, and bad
//! requests get typed errors.

use zftl::core::fork::ForkError;
use zftl::core::history::SnapshotError;
use zftl::core::{Driver, Extent, FtlConfig, IoError, Request};
use zftl::sim::{SimConfig, SimDevice, Timing};

mod common;
use common::{
    assert_check_clean, format_on, pattern, remount_both_ways_then_clean,
    volume_config as sim_config,
};

fn format(oob: bool) -> Driver<SimDevice> {
    format_on(oob, sim_config(oob))
}

fn both_modes(test: impl Fn(bool)) {
    for oob in [false, true] {
        test(oob);
    }
}

/// Writes version `version` of block `lba` (of the map's space: a fork's
/// blocks are at its offset) with the pattern of `origin`.
fn write_as(ftl: &mut Driver<SimDevice>, lba: u64, origin: u64, version: u32) {
    let bs = ftl.block_size();
    ftl.write(lba, &pattern(origin, version, bs)).unwrap();
}

/// What block `lba` of the map's space holds: `Some((origin, version))`,
/// or `None` for zeros.
fn holds(ftl: &mut Driver<SimDevice>, lba: u64) -> Option<(u64, u32)> {
    let data = ftl.read(lba, 1).unwrap();
    if data.iter().all(|&b| b == 0) {
        return None;
    }
    Some(common::decode_any(&data).unwrap())
}

fn snapshot_holds(ftl: &mut Driver<SimDevice>, name: &str, lba: u64) -> Option<(u64, u32)> {
    let id = ftl.snapshot_named(name).unwrap().id;
    let data = ftl.read_snapshot(id, lba, 1).unwrap();
    if data.iter().all(|&b| b == 0) {
        return None;
    }
    Some(common::decode_any(&data).unwrap())
}

fn offset(ftl: &Driver<SimDevice>, name: &str) -> u64 {
    ftl.forks()
        .into_iter()
        .find(|f| f.name == name)
        .unwrap()
        .lba_offset
}

#[test]
fn a_fork_starts_as_its_snapshot_and_keeps_its_own_changes() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        let n = 256;
        for lba in 0..n {
            write_as(&mut ftl, lba, lba, 1);
        }
        ftl.trim(200, 8).unwrap();
        ftl.snapshot_create("base").unwrap();
        for lba in 0..n / 2 {
            write_as(&mut ftl, lba, lba, 2); // the live volume moves on
        }
        let fork = ftl.fork_create("base", "dev").unwrap();
        assert_eq!(
            (fork.name.as_str(), fork.block_count),
            ("dev", ftl.logical_blocks())
        );
        let at = fork.lba_offset;
        assert!(at >= ftl.logical_blocks());
        for lba in 0..10 {
            write_as(&mut ftl, at + lba, lba, 3);
        }
        ftl.trim(at + 10, 10).unwrap();
        write_as(&mut ftl, at + 300, 300, 3); // unmapped in the snapshot
        for lba in 0..n / 4 {
            write_as(&mut ftl, lba, lba, 4); // the live volume again
        }
        let check = |ftl: &mut Driver<SimDevice>| {
            let at = offset(ftl, "dev");
            for lba in 0..n {
                let base = (!(200..208).contains(&lba)).then_some((lba, 1));
                let fork = match lba {
                    0..10 => Some((lba, 3)),
                    10..20 => None,
                    _ => base,
                };
                let live = match lba {
                    _ if lba < n / 4 => Some((lba, 4)),
                    _ if lba < n / 2 => Some((lba, 2)),
                    _ => base,
                };
                assert_eq!(holds(ftl, at + lba), fork, "fork {lba}");
                assert_eq!(snapshot_holds(ftl, "base", lba), base, "snapshot {lba}");
                assert_eq!(holds(ftl, lba), live, "live {lba}");
            }
            assert_eq!(holds(ftl, at + 300), Some((300, 3)));
            assert_eq!(holds(ftl, 300), None);
        };
        check(&mut ftl);
        let s = ftl.stats();
        assert_eq!((s.forks, s.fork_creates), (1, 1));
        remount_both_ways_then_clean(ftl, check, "with a fork");
    });
}

#[test]
fn a_fork_reports_the_extents_it_reads() {
    let mut ftl = format(true);
    for lba in 0..64 {
        write_as(&mut ftl, lba, lba, 1);
    }
    ftl.snapshot_create("s").unwrap();
    let at = ftl.fork_create("s", "f").unwrap().lba_offset;
    ftl.trim(at + 8, 8).unwrap();
    write_as(&mut ftl, at + 100, 100, 2);
    let runs = ftl.extents(at, 128).unwrap();
    let want = [
        (8, true),
        (8, false),
        (48, true),
        (36, false),
        (1, true),
        (27, false),
    ];
    let want: Vec<Extent> = want
        .iter()
        .map(|&(block_count, mapped)| Extent {
            block_count,
            mapped,
        })
        .collect();
    assert_eq!(runs, want);
}

#[test]
fn gc_and_a_power_cut_keep_a_fork_its_snapshot_and_the_volume_apart() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        let n = 512;
        for lba in 0..n {
            write_as(&mut ftl, lba, lba, 1);
        }
        ftl.snapshot_create("s").unwrap();
        let at = ftl.fork_create("s", "f").unwrap().lba_offset;
        for lba in 0..n / 2 {
            write_as(&mut ftl, at + lba, lba, 2);
        }
        // Churn the live volume and the fork until GC has copied plenty.
        let span = ftl.logical_blocks() / 3;
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut round = 10;
        while ftl.stats().gc_copy_blocks < 4 * span {
            for _ in 0..span / 2 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let lba = n + x % (span - n);
                write_as(&mut ftl, lba, lba, round);
                write_as(&mut ftl, at + lba, lba, round + 1);
            }
            round += 2;
            assert!(round < 200, "GC did not run");
        }
        let last = round - 2;
        ftl.flush().unwrap();
        let check = |ftl: &mut Driver<SimDevice>| {
            let at = offset(ftl, "f");
            for lba in 0..n {
                let fork = if lba < n / 2 { (lba, 2) } else { (lba, 1) };
                assert_eq!(holds(ftl, at + lba), Some(fork), "fork {lba}");
                assert_eq!(
                    snapshot_holds(ftl, "s", lba),
                    Some((lba, 1)),
                    "snapshot {lba}"
                );
                assert_eq!(holds(ftl, lba), Some((lba, 1)), "live {lba}");
            }
            for lba in n..span {
                let (live, fork) = (holds(ftl, lba), holds(ftl, at + lba));
                if let Some((origin, version)) = live {
                    assert_eq!(origin, lba);
                    assert!(version >= 10 && version % 2 == 0 && version <= last);
                }
                if let Some((origin, version)) = fork {
                    assert_eq!(origin, lba);
                    assert!(version >= 11 && version % 2 == 1 && version <= last + 1);
                }
            }
        };
        check(&mut ftl);
        // A power cut: everything was flushed, so everything is back.
        let mut dev = ftl.into_backend();
        dev.power_cut();
        dev.power_on().unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        check(&mut ftl);
        remount_both_ways_then_clean(ftl, check, "after GC with a fork");
    });
}

#[test]
fn deleting_a_fork_gives_its_space_back_and_frees_its_snapshot() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in 0..128 {
            write_as(&mut ftl, lba, lba, 1);
        }
        ftl.snapshot_create("s").unwrap();
        let live_before = ftl.stats().live_blocks;
        let at = ftl.fork_create("s", "f").unwrap().lba_offset;
        for lba in 0..300 {
            write_as(&mut ftl, at + lba, lba, 2);
        }
        ftl.flush().unwrap();
        assert_eq!(ftl.stats().live_blocks, live_before + 300);
        let e = ftl.snapshot_delete("s").unwrap_err();
        assert!(
            matches!(&e, IoError::Snapshot(SnapshotError::HasForks { fork, .. }) if fork == "f"),
            "{e:?}"
        );
        ftl.fork_delete("f").unwrap();
        let s = ftl.stats();
        assert_eq!(
            (s.live_blocks, s.forks, s.fork_delete_blocks),
            (live_before, 0, 300)
        );
        // Its region is closed to I/O, and its name is free again.
        assert!(matches!(ftl.read(at, 1), Err(IoError::OutOfRange { .. })));
        let bs = ftl.block_size();
        assert!(matches!(
            ftl.write(at, &vec![1; bs]),
            Err(IoError::OutOfRange { .. })
        ));
        let again = ftl.fork_create("s", "f").unwrap();
        assert_eq!(again.lba_offset, at, "the slot is reused");
        assert_eq!(holds(&mut ftl, at), Some((0, 1)), "a new fork starts clean");
        ftl.fork_delete("f").unwrap();
        ftl.snapshot_delete("s").unwrap();
        let check = |ftl: &mut Driver<SimDevice>| {
            assert!(ftl.forks().is_empty());
            assert!(ftl.snapshots().is_empty());
            for lba in 0..128 {
                assert_eq!(holds(ftl, lba), Some((lba, 1)));
            }
        };
        check(&mut ftl);
        remount_both_ways_then_clean(ftl, check, "after a fork delete");
    });
}

#[test]
fn bad_fork_requests_get_typed_errors() {
    let mut ftl = format(false);
    write_as(&mut ftl, 0, 0, 1);
    assert!(matches!(
        ftl.fork_create("none", "f"),
        Err(IoError::Snapshot(SnapshotError::NoSuchName(_)))
    ));
    ftl.snapshot_create("s").unwrap();
    for bad in ["", "a@b", "a/b", &"x".repeat(64)] {
        let e = ftl.fork_create("s", bad).unwrap_err();
        assert!(
            matches!(e, IoError::Fork(ForkError::BadName { .. })),
            "{bad:?}: {e:?}"
        );
    }
    let f = ftl.fork_create("s", "f").unwrap();
    assert!(matches!(
        ftl.fork_create("s", "f"),
        Err(IoError::Fork(ForkError::NameTaken(_)))
    ));
    assert!(matches!(
        ftl.fork_delete("g"),
        Err(IoError::Fork(ForkError::NoSuchName(_)))
    ));
    // Past the fork's end, straddling its start, and a snapshot read of it.
    let end = f.lba_offset + f.block_count;
    assert!(matches!(
        ftl.read(end - 1, 2),
        Err(IoError::OutOfRange { .. })
    ));
    assert!(matches!(
        ftl.read(f.lba_offset - 1, 2),
        Err(IoError::OutOfRange { .. })
    ));
    let s = ftl.snapshot_named("s").unwrap().id;
    assert!(matches!(
        ftl.read_snapshot(s, f.lba_offset, 1),
        Err(IoError::OutOfRange { .. })
    ));
    // Range operations stay inside the volume.
    assert!(ftl.clone_ranges(&[(0, f.lba_offset, 1)]).is_err());
    let mut n = 1;
    loop {
        match ftl.fork_create("s", &format!("f{n}")) {
            Ok(_) => n += 1,
            Err(IoError::Fork(ForkError::TooMany(max))) => {
                assert_eq!(max, n);
                break;
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(ftl.forks().len(), n);
}

/// `Request::InFork` reaches its fork only while that fork lives: after a
/// delete, and a new fork taking the same region, a request for the old
/// one gets `NoSuchId` and leaves the new fork alone; so does a write that
/// was waiting behind the delete when the new fork was created.
#[test]
fn requests_for_a_deleted_fork_never_reach_the_fork_that_takes_its_region() {
    both_modes(|oob| {
        // Timing on: the delete waits for the writes it drains in virtual
        // time, so requests arrive while it is under way.
        let cfg = SimConfig {
            timing: Some(Timing::default()),
            ..sim_config(oob)
        };
        let mut ftl = format_on(oob, cfg);
        let bs = ftl.block_size();
        write_as(&mut ftl, 0, 0, 1);
        ftl.snapshot_create("s").unwrap();
        let a = ftl.fork_create("s", "a").unwrap();
        let in_a = |request: Request| Request::InFork {
            fork: a.id,
            request: Box::new(request),
        };
        let write = |lba: u64, version: u32| Request::Write {
            lba,
            data: pattern(lba, version, bs),
            fua: false,
        };
        ftl.call(in_a(write(a.lba_offset + 1, 2))).unwrap();
        assert_eq!(
            holds(&mut ftl, a.lba_offset + 1),
            Some((a.lba_offset + 1, 2))
        );
        // Outside its region, and requests that are not block I/O.
        for bad in [
            in_a(write(a.lba_offset + a.block_count, 2)),
            in_a(write(0, 2)),
            in_a(Request::SnapshotDelete { id: a.base }),
            in_a(in_a(Request::Flush)),
        ] {
            let e = ftl.call(bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    IoError::OutOfRange { .. } | IoError::Fork(ForkError::NotBlockIo)
                ),
                "{e:?}"
            );
        }
        // The delete under way (one turn of the loop), writes to A's region
        // held behind it, and a create of B, which takes A's region.
        for lba in 8..16 {
            ftl.submit(in_a(write(a.lba_offset + lba, 2))).unwrap();
        }
        let delete = ftl.submit(Request::ForkDelete { id: a.id }).unwrap();
        ftl.turn_nowait().unwrap();
        assert_eq!(
            ftl.forks().len(),
            1,
            "the delete did not wait for A's writes"
        );
        let late = ftl.submit(in_a(write(a.lba_offset + 2, 3))).unwrap();
        let plain = ftl.submit(write(a.lba_offset + 3, 3)).unwrap();
        let create = ftl
            .submit(Request::ForkCreate {
                snapshot: a.base,
                name: "b".into(),
                wall_ns: 0,
            })
            .unwrap();
        ftl.wait_for(delete).unwrap();
        let b = match ftl.wait_for(create).unwrap() {
            zftl::core::ReplyData::Fork(f) => f,
            other => panic!("{other:?}"),
        };
        assert_eq!(b.lba_offset, a.lba_offset, "B did not take A's region");
        let e = ftl.wait_for(late).unwrap_err();
        assert!(
            matches!(e, IoError::Fork(ForkError::NoSuchId(id)) if id == a.id),
            "{e:?}"
        );
        // The plain write named the region, not the fork: refused too
        // (it waited behind the delete).
        assert!(ftl.wait_for(plain).is_err());
        let e = ftl.call(in_a(write(a.lba_offset + 1, 4))).unwrap_err();
        assert!(matches!(e, IoError::Fork(ForkError::NoSuchId(_))), "{e:?}");
        // B is its snapshot's, untouched by A's requests.
        for lba in 1..4 {
            assert_eq!(holds(&mut ftl, b.lba_offset + lba), None, "b: {lba}");
        }
        assert_eq!(holds(&mut ftl, b.lba_offset), Some((0, 1)));
        let in_b = Request::InFork {
            fork: b.id,
            request: Box::new(write(b.lba_offset + 2, 5)),
        };
        ftl.call(in_b).unwrap();
        assert_eq!(
            holds(&mut ftl, b.lba_offset + 2),
            Some((b.lba_offset + 2, 5))
        );
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after fork requests");
    });
}
