//! A version written after the newest checkpoint and then moved by GC: with
//! OOB tags its only record was the tag in its first zone, which GC resets
//! once it has moved the version. Recovery must still find the version where
//! GC put it. (Lost before the Relocated note: `crash_torture` seed 5888 read
//! an older version of a block after a cut.)

use zftl::core::{Driver, FormatOptions, FtlConfig, TagPlacement};
use zftl::sim::{SimConfig, SimDevice};

mod common;
use common::block;

const WATCHED: u64 = 0;

fn device() -> SimDevice {
    let cfg = SimConfig {
        blocks_per_lun: 12,
        oob_size_bytes: 64,
        zone_width_luns: 1,
        max_append_blocks: 8,
        ..SimConfig::small_for_tests()
    };
    SimDevice::create_memory(cfg).expect("sim")
}

fn config() -> FtlConfig {
    FtlConfig {
        write_buffer_blocks: 64,
        // No checkpoint of its own between the explicit one and the cut.
        checkpoint_interval_blocks: 1 << 40,
        ..FtlConfig::default()
    }
}

#[test]
fn version_moved_twice_after_the_checkpoint_survives_a_cut() {
    let opts = FormatOptions {
        tag_placement: TagPlacement::Auto,
        gc_reserve_zones: 3,
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(device(), &opts, config()).expect("format");
    let (bs, n) = (ftl.block_size(), ftl.logical_blocks());
    let cap = ftl.ftl().geometry().zone_capacity_blocks;
    ftl.checkpoint().expect("checkpoint");
    let checkpoints = ftl.stats().checkpoints;

    ftl.write(WATCHED, &block(WATCHED, 1, bs)).expect("write");
    ftl.flush().expect("flush");
    let zone_of =
        |ftl: &Driver<SimDevice>| u64::from(ftl.ftl().lookup(WATCHED).expect("mapped").0) / cap;
    // Overwrite everything else until GC has moved the watched block out of
    // its first zone and out of the next: the first zone's job (and reset)
    // finished before the second move began.
    let mut zones = vec![zone_of(&ftl)];
    let mut x = 7u64;
    for i in 0..200 * n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        let lba = 1 + (x >> 33) % (n - 1);
        ftl.write(lba, &block(lba, i as u32, bs))
            .expect("overwrite");
        let z = zone_of(&ftl);
        if z != *zones.last().expect("zone") {
            zones.push(z);
        }
        if zones.len() == 3 {
            break;
        }
    }
    assert_eq!(zones.len(), 3, "GC moved the watched block twice");
    ftl.flush().expect("flush");
    assert_eq!(
        ftl.stats().checkpoints,
        checkpoints,
        "no checkpoint since the watched write (else it proves nothing)"
    );

    let mut dev = ftl.into_backend();
    dev.power_cut();
    dev.power_on().expect("power on");
    let mut ftl = Driver::mount(dev, config()).expect("mount");
    let got = ftl.read(WATCHED, 1).expect("read");
    assert!(
        got == block(WATCHED, 1, bs),
        "the watched block after the cut (moved through zones {zones:?}) starts {:?}",
        &got[..16]
    );
}
