//! Range operations end to end on the simulator: clone, move, delete,
//! merge and attributes through `Driver`, their errors, GC of shared
//! blocks, and what survives a clean remount and a power cut, in both tag
//! modes.

use zftl::core::{
    Attribute, Driver, FormatOptions, FtlConfig, IoError, MergePolicy, RangeOp, TagPlacement,
};
use zftl::sim::{SimConfig, SimDevice};

mod common;
use common::{assert_check_clean, block, remount_both_ways, volume_config as sim_config};

fn format(oob: bool) -> Driver<SimDevice> {
    let dev = SimDevice::create_memory(sim_config(oob)).unwrap();
    let opts = FormatOptions {
        tag_placement: TagPlacement::Auto,
        ..FormatOptions::default()
    };
    Driver::format(dev, &opts, FtlConfig::default()).unwrap()
}

fn both_modes(test: impl Fn(bool)) {
    for oob in [true, false] {
        test(oob);
    }
}

fn write(ftl: &mut Driver<SimDevice>, lba: u64, version: u32) {
    let bs = ftl.block_size();
    ftl.write(lba, &block(lba, version, bs)).unwrap();
}

/// The block `origin` wrote as `version`, as read from `lba`.
fn assert_holds(ftl: &mut Driver<SimDevice>, lba: u64, origin: u64, version: u32) {
    let bs = ftl.block_size();
    let got = ftl.read(lba, 1).unwrap();
    assert!(
        got == block(origin, version, bs),
        "block {lba} should hold block {origin} version {version}"
    );
}

fn assert_zeros(ftl: &mut Driver<SimDevice>, lba: u64) {
    let bs = ftl.block_size();
    assert_eq!(
        ftl.read(lba, 1).unwrap(),
        vec![0; bs],
        "block {lba} reads zeros"
    );
}

#[test]
fn clone_shares_blocks_and_writes_break_sharing_per_block() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        write(&mut ftl, 10, 1);
        write(&mut ftl, 11, 1);
        ftl.clone_ranges(&[(10, 400, 2)]).unwrap();
        assert_holds(&mut ftl, 400, 10, 1);
        assert_holds(&mut ftl, 401, 11, 1);
        let s = ftl.stats();
        assert_eq!((s.shared_blocks, s.shared_refs, s.live_blocks), (2, 4, 2));
        // A write to the copy changes the copy only.
        write(&mut ftl, 400, 2);
        assert_holds(&mut ftl, 10, 10, 1);
        assert_holds(&mut ftl, 400, 400, 2);
        assert_holds(&mut ftl, 401, 11, 1);
        let ftl = remount_both_ways(ftl, |ftl| {
            assert_holds(ftl, 10, 10, 1);
            assert_holds(ftl, 400, 400, 2);
            assert_holds(ftl, 401, 11, 1);
        });
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after clones");
    });
}

#[test]
fn move_leaves_zeros_and_delete_stays_deleted() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in 0..8 {
            write(&mut ftl, lba, 1);
        }
        ftl.move_ranges(&[(0, 100, 4)]).unwrap();
        ftl.delete_ranges(&[(4, 2)]).unwrap();
        let check = |ftl: &mut Driver<SimDevice>| {
            for lba in 0..4 {
                assert_zeros(ftl, lba);
                assert_holds(ftl, 100 + lba, lba, 1);
            }
            assert_zeros(ftl, 4);
            assert_zeros(ftl, 5);
            assert_holds(ftl, 6, 6, 1);
        };
        check(&mut ftl);
        remount_both_ways(ftl, check);
    });
}

#[test]
fn a_vector_of_moves_is_a_transaction() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        // Old contents at 0..4, new ones written to scratch 1000..1004.
        for lba in 0..4 {
            write(&mut ftl, lba, 1);
            write(&mut ftl, 1000 + lba, 2);
        }
        let ops = (0..4)
            .map(|i| RangeOp::Move {
                src: 1000 + i,
                dst: i,
                block_count: 1,
            })
            .collect();
        ftl.range_ops(ops).unwrap();
        // Acknowledged means durable: a crash right after keeps it.
        let dev = ftl.into_backend();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        for lba in 0..4 {
            assert_holds(&mut ftl, lba, 1000 + lba, 2);
            assert_zeros(&mut ftl, 1000 + lba);
        }
    });
}

#[test]
fn merge_takes_what_each_source_changed() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        for lba in 0..4 {
            write(&mut ftl, lba, 1);
        }
        ftl.clone_ranges(&[(0, 100, 4), (0, 200, 4)]).unwrap();
        write(&mut ftl, 101, 2); // source A changes block 1
        write(&mut ftl, 202, 3); // source B changes block 2
        write(&mut ftl, 103, 4); // both change block 3
        write(&mut ftl, 203, 5);
        let err = ftl
            .merge(&[100, 200], 0, 4, MergePolicy::FailOnConflict)
            .unwrap_err();
        assert_eq!(err, IoError::MergeConflict { lba: 3 });
        assert_holds(&mut ftl, 3, 3, 1); // nothing changed
        ftl.merge(&[100, 200], 0, 4, MergePolicy::LastWins).unwrap();
        let check = |ftl: &mut Driver<SimDevice>| {
            assert_holds(ftl, 0, 0, 1);
            assert_holds(ftl, 1, 101, 2);
            assert_holds(ftl, 2, 202, 3);
            assert_holds(ftl, 3, 203, 5);
            assert_holds(ftl, 101, 101, 2); // sources are left as they are
        };
        check(&mut ftl);
        let mut ftl = remount_both_ways(ftl, check);
        // First wins, on a fresh pair of sources.
        ftl.clone_ranges(&[(0, 300, 4), (0, 500, 4)]).unwrap();
        write(&mut ftl, 300, 6);
        write(&mut ftl, 500, 7);
        ftl.merge(&[300, 500], 0, 4, MergePolicy::FirstWins)
            .unwrap();
        assert_holds(&mut ftl, 0, 300, 6);
    });
}

#[test]
fn immutable_ranges_refuse_changes_and_non_persistent_ones_empty_after_a_crash() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        let bs = ftl.block_size();
        write(&mut ftl, 50, 1);
        write(&mut ftl, 60, 1);
        ftl.set_attribute(&[(50, 5)], Attribute::Immutable).unwrap();
        ftl.set_attribute(&[(60, 5)], Attribute::NonPersistent)
            .unwrap();
        let immutable = Err(IoError::Immutable { lba: 50 });
        assert_eq!(ftl.write(50, &block(50, 2, bs)), immutable);
        assert_eq!(ftl.trim(48, 4), Err(IoError::Immutable { lba: 50 }));
        assert_eq!(ftl.delete_ranges(&[(50, 1)]), immutable);
        assert_eq!(ftl.move_ranges(&[(50, 100, 1)]), immutable);
        assert_eq!(ftl.clone_ranges(&[(60, 50, 1)]), immutable);
        // Reading out of it is fine.
        ftl.clone_ranges(&[(50, 700, 1)]).unwrap();
        assert_holds(&mut ftl, 50, 50, 1);
        // Clean shutdown keeps both attributes and the non-persistent data.
        let dev = ftl.shutdown().unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        assert_eq!(
            ftl.write(51, &block(51, 2, bs)),
            Err(IoError::Immutable { lba: 51 })
        );
        assert_holds(&mut ftl, 60, 60, 1);
        // A crash empties the non-persistent range.
        ftl.flush().unwrap();
        let dev = ftl.into_backend();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        assert_zeros(&mut ftl, 60);
        assert_holds(&mut ftl, 50, 50, 1);
        ftl.set_attribute(&[(50, 5)], Attribute::Mutable).unwrap();
        write(&mut ftl, 50, 3);
        assert_holds(&mut ftl, 50, 50, 3);
    });
}

#[test]
fn bad_vectors_are_refused_whole() {
    let mut ftl = format(true);
    write(&mut ftl, 1, 1);
    let n = ftl.logical_blocks();
    let bad = |ftl: &mut Driver<SimDevice>, ops: Vec<RangeOp>| {
        let e = ftl.range_ops(ops).unwrap_err();
        assert!(
            matches!(e, IoError::BadVector { .. } | IoError::OutOfRange { .. }),
            "{e}"
        );
    };
    bad(&mut ftl, vec![]);
    bad(&mut ftl, zftl::core::range::clones(&[(0, 2, 4)])); // overlap
    bad(&mut ftl, zftl::core::range::clones(&[(0, n - 1, 2)])); // past the end
    bad(&mut ftl, zftl::core::range::clones(&[(u64::MAX - 1, 0, 2)]));
    bad(&mut ftl, zftl::core::range::deletes(&[(0, 0)]));
    bad(&mut ftl, zftl::core::range::deletes(&vec![(0, 1); 257]));
    bad(
        &mut ftl,
        vec![zftl::core::range::merge(
            &[10, 12],
            11,
            2,
            MergePolicy::LastWins,
        )],
    );
    // A valid operation after a bad one in the same vector: nothing done.
    let mixed = vec![
        RangeOp::Clone {
            src: 1,
            dst: 500,
            block_count: 1,
        },
        RangeOp::Delete {
            lba: n,
            block_count: 1,
        },
    ];
    bad(&mut ftl, mixed);
    assert_zeros(&mut ftl, 500);
    assert_holds(&mut ftl, 1, 1, 1);
}

#[test]
fn gc_moves_a_shared_block_once_for_both_owners() {
    both_modes(|oob| {
        let mut ftl = format(oob);
        write(&mut ftl, 10, 1);
        write(&mut ftl, 11, 1);
        ftl.clone_ranges(&[(10, 400, 2)]).unwrap();
        let before = ftl.ftl().lookup(10).unwrap();
        assert_eq!(ftl.ftl().lookup(400), Some(before));
        // Random overwrites of everything else until GC has collected the
        // zone (sequential passes would free whole zones and copy nothing).
        let n = ftl.logical_blocks();
        let mut rng = zftl::sim::rng::Rng::new(7);
        let mut version = 2;
        while ftl.ftl().lookup(10) == Some(before) {
            for _ in 0..n {
                let lba = 20 + rng.next_u64() % (n - 20);
                if !(400..402).contains(&lba) {
                    write(&mut ftl, lba, version);
                }
            }
            version += 1;
            assert!(
                version < 20,
                "GC never moved the shared block (oob {oob}): {:?}",
                ftl.stats()
            );
        }
        let after = ftl.ftl().lookup(10).unwrap();
        assert_eq!(
            ftl.ftl().lookup(400),
            Some(after),
            "both owners follow the copy"
        );
        assert_eq!(ftl.ftl().lookup(11), ftl.ftl().lookup(401));
        assert_holds(&mut ftl, 400, 10, 1);
        assert_holds(&mut ftl, 401, 11, 1);
        assert_eq!(ftl.stats().shared_blocks, 2, "one copy each, not two");
        let mut ftl = remount_both_ways(ftl, |ftl| {
            assert_holds(ftl, 10, 10, 1);
            assert_holds(ftl, 400, 10, 1);
        });
        ftl.flush().unwrap();
        let mut dev = ftl.shutdown().unwrap();
        assert_check_clean(&mut dev, "after GC of shared blocks");
    });
}

#[test]
fn a_large_clone_of_a_thin_volume_is_cheap() {
    // 4 GiB of logical space on 8 MiB of media: a clone of half of it.
    let dev = SimDevice::create_memory(sim_config(true)).unwrap();
    let opts = FormatOptions {
        logical_blocks: Some(1 << 20),
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).unwrap();
    for lba in [0, 1, 5000, (1 << 19) - 1] {
        write(&mut ftl, lba, 1);
    }
    ftl.clone_ranges(&[(0, 1 << 19, 1 << 19)]).unwrap();
    for lba in [0, 1, 5000, (1 << 19) - 1] {
        assert_holds(&mut ftl, (1 << 19) + lba, lba, 1);
    }
    assert_zeros(&mut ftl, (1 << 19) + 2);
    assert_eq!(ftl.stats().shared_blocks, 4);
}

/// GC copies of a run where `clones` clones of a 256 MiB range keep its
/// blocks alive while the range is overwritten at random.
fn gc_copies_with_clones(clones: u64) -> (u64, u64) {
    // 1 GiB of media (256 zones of 1024 blocks); the range and its clones
    // are 65536 blocks each.
    let cfg = SimConfig {
        channels: 4,
        luns_per_channel: 2,
        blocks_per_lun: 64,
        pages_per_block: 512,
        oob_size_bytes: 64,
        zone_width_luns: 2,
        max_append_blocks: 64,
        max_transfer_blocks: 64,
        ..SimConfig::small_for_tests()
    };
    let dev = SimDevice::create_memory(cfg).unwrap();
    let opts = FormatOptions {
        logical_blocks: Some(10 * 65536),
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).unwrap();
    let bs = ftl.block_size();
    const N: u64 = 65536;
    for lba in (0..N).step_by(64) {
        let data: Vec<u8> = (lba..lba + 64).flat_map(|l| block(l, 1, bs)).collect();
        ftl.write(lba, &data).unwrap();
    }
    let targets: Vec<(u64, u64, u64)> = (1..=clones).map(|k| (0, k * N, N)).collect();
    ftl.clone_ranges(&targets).unwrap();
    let before = ftl.stats().gc_copy_blocks;
    let mut rng = zftl::sim::rng::Rng::new(11);
    for i in 0..2 * N {
        let lba = rng.next_u64() % N;
        ftl.write(lba, &block(lba, 2, bs)).unwrap();
        if i % 4096 == 0 {
            ftl.flush().unwrap();
        }
    }
    ftl.flush().unwrap();
    for k in 1..=clones {
        assert_holds(&mut ftl, k * N + 5, 5, 1);
    }
    let s = ftl.stats();
    (s.gc_copy_blocks - before, s.shared_blocks)
}

#[test]
fn eight_clones_cost_gc_no_more_than_one() {
    let (one, shared_one) = gc_copies_with_clones(1);
    let (eight, shared_eight) = gc_copies_with_clones(8);
    assert_eq!(shared_one, shared_eight, "the same blocks are shared");
    let (lo, hi) = (one as f64 * 0.99, one as f64 * 1.01 + 64.0);
    assert!(
        (lo..=hi).contains(&(eight as f64)),
        "GC copied {eight} blocks with 8 clones, {one} with 1"
    );
}
