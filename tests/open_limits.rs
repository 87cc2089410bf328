//! The core keeps within the device's open and active zone limits: lanes,
//! zones draining their appends or waiting for their summary, and zones
//! sealed early must never push the device past them (a refused append
//! would retire a healthy zone).

use zftl::core::{Driver, FormatOptions, FtlConfig, TagPlacement};
use zftl::sim::rng::Rng;
use zftl::sim::{SimConfig, SimDevice};

fn sim(oob: u32, max_open: u32, max_active: u32) -> SimDevice {
    let cfg = SimConfig {
        channels: 2,
        luns_per_channel: 2,
        blocks_per_lun: 24,
        pages_per_block: 32,
        oob_size_bytes: oob,
        zone_width_luns: 1,
        max_open_zones: max_open,
        max_active_zones: max_active,
        max_append_blocks: 8,
        max_transfer_blocks: 16,
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

#[test]
fn tight_zone_limits_are_never_exceeded() {
    for (oob, placement) in [(64, TagPlacement::Auto), (0, TagPlacement::InBand)] {
        for (max_open, max_active) in [(4, 4), (5, 6), (8, 8)] {
            let what = format!("oob {oob}, open {max_open}, active {max_active}");
            let opts = FormatOptions {
                tag_placement: placement,
                gc_reserve_zones: 2,
                ..FormatOptions::default()
            };
            let dev = sim(oob, max_open, max_active);
            let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).expect("format");
            let bs = ftl.block_size();
            let n = ftl.logical_blocks();
            let mut version = vec![0u32; n as usize];
            for lba in 0..n {
                ftl.write(lba, &block(lba, 0, bs)).unwrap();
            }
            let mut rng = Rng::new(u64::from(max_open));
            for i in 0..6 * n {
                let lba = rng.below(n);
                version[lba as usize] += 1;
                ftl.write(lba, &block(lba, version[lba as usize], bs))
                    .unwrap_or_else(|e| panic!("{what}: write {i}: {e}"));
                if i % 97 == 0 {
                    ftl.flush().unwrap();
                }
            }
            ftl.flush().unwrap();
            let s = ftl.stats();
            assert!(s.erases > 0, "{what}: GC never ran");
            assert_eq!(s.write_errors, 0, "{what}: {s:#?}");
            assert_eq!(s.retired_zones, 0, "{what}: {s:#?}");
            for lba in 0..n {
                let v = version[lba as usize];
                assert_eq!(
                    ftl.read(lba, 1).unwrap(),
                    block(lba, v, bs),
                    "{what}: block {lba}"
                );
            }
        }
    }
}
