//! End-to-end checks of the FTL on the simulator: format, I/O, GC, remount.

use zftl::core::{Driver, FormatOptions, FtlConfig, TagPlacement};
use zftl::sim::{SimConfig, SimDevice};

fn sim(oob: u32) -> SimDevice {
    let cfg = SimConfig {
        channels: 2,
        luns_per_channel: 2,
        blocks_per_lun: 32,
        pages_per_block: 64,
        oob_size_bytes: oob,
        zone_width_luns: 1,
        max_open_zones: 8,
        max_active_zones: 12,
        max_append_blocks: 16,
        max_transfer_blocks: 32,
        queue_depth: 64,
        ..SimConfig::small_for_tests()
    };
    SimDevice::create_memory(cfg).expect("sim")
}

fn block(lba: u64, version: u32, bs: usize) -> Vec<u8> {
    let mut b = vec![(lba as u8) ^ (version as u8); bs];
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b
}

fn roundtrip(oob: u32, placement: TagPlacement) {
    let opts = FormatOptions {
        tag_placement: placement,
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(sim(oob), &opts, FtlConfig::default()).expect("format");
    let bs = ftl.block_size();
    let n = ftl.logical_blocks();
    let mut version = vec![0u32; n as usize];
    // Fill, then overwrite a hot range many times to force GC.
    for lba in 0..n {
        ftl.write(lba, &block(lba, 0, bs)).unwrap();
    }
    let mut x: u64 = 1;
    for _ in 0..(4 * n) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let lba = (x >> 33) % n;
        version[lba as usize] += 1;
        ftl.write(lba, &block(lba, version[lba as usize], bs))
            .unwrap();
    }
    ftl.trim(3, 2).unwrap();
    ftl.flush().unwrap();
    let stats = ftl.stats();
    assert!(stats.gc_copy_blocks > 0, "GC never ran: {stats:?}");
    assert!(stats.erases > 0);
    let check = |ftl: &mut Driver<SimDevice>, version: &[u32]| {
        for lba in 0..n {
            let got = ftl.read(lba, 1).unwrap();
            if lba == 3 || lba == 4 {
                assert_eq!(got, vec![0; bs], "trimmed block {lba}");
            } else {
                assert_eq!(got, block(lba, version[lba as usize], bs), "block {lba}");
            }
        }
    };
    check(&mut ftl, &version);
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
    check(&mut ftl, &version);
    // Crash without shutdown after a flush: everything flushed survives.
    ftl.write(10, &block(10, 999, bs)).unwrap();
    version[10] = 999;
    ftl.flush().unwrap();
    let dev = ftl.into_backend();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount after crash");
    check(&mut ftl, &version);
}

#[test]
fn oob_tags_roundtrip_with_gc_and_remount() {
    roundtrip(64, TagPlacement::Auto);
}

#[test]
fn in_band_tags_roundtrip_with_gc_and_remount() {
    roundtrip(0, TagPlacement::Auto);
}

#[test]
fn extents_report_holes_and_thin_volume_runs_out_cleanly() {
    // A thin volume four times larger than its media.
    let dev = sim(64);
    let physical = dev.config().zone_capacity_blocks() * 128;
    let opts = FormatOptions {
        logical_blocks: Some(4 * physical),
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).expect("format");
    let bs = ftl.block_size();
    ftl.write(10, &block(10, 1, bs)).unwrap();
    ftl.write(11, &block(11, 1, bs)).unwrap();
    ftl.flush().unwrap();
    ftl.write(20, &block(20, 1, bs)).unwrap(); // still buffered: counts as mapped
    let runs = ftl.extents(8, 16).unwrap();
    let shape: Vec<(u32, bool)> = runs.iter().map(|e| (e.block_count, e.mapped)).collect();
    assert_eq!(
        shape,
        vec![(2, false), (2, true), (8, false), (1, true), (3, false)]
    );
    ftl.trim(10, 1).unwrap();
    let runs = ftl.extents(10, 2).unwrap();
    assert_eq!(
        runs.iter()
            .map(|e| (e.block_count, e.mapped))
            .collect::<Vec<_>>(),
        vec![(1, false), (1, true)]
    );

    // Fill new blocks until the media says no: every acknowledged block reads back.
    let mut written = Vec::new();
    let mut lba = 1000;
    loop {
        match ftl.write(lba, &block(lba, 7, bs)) {
            Ok(()) => written.push(lba),
            Err(zftl::core::IoError::NoSpace) => break,
            Err(e) => panic!("unexpected error filling a thin volume: {e}"),
        }
        lba += 3;
        assert!(
            lba < 4 * physical,
            "a thin volume 4x the media never ran out of space"
        );
    }
    ftl.flush().unwrap();
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
    for &l in &written {
        assert_eq!(ftl.read(l, 1).unwrap(), block(l, 7, bs), "block {l}");
    }
    assert_eq!(ftl.read(10, 1).unwrap(), vec![0; bs]);
}
