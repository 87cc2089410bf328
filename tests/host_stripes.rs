//! Host writes striped over zone groups (`FtlConfig::host_stripes`): 4 KiB
//! writes at depth to a fresh volume have their appends in flight on as
//! many zone groups at once as stripes are asked (one zone programs on one
//! group's units only); with one stripe, on one group.

use std::collections::HashMap;

use zftl::core::layout::Layout;
use zftl::core::{Command, Driver, FormatOptions, FtlConfig, Geometry};
use zftl::sim::{SimConfig, SimDevice, Timing};

mod common;
use common::watch::{write_at_depth, Watched, Watcher};
use common::{pattern, volume_config};

/// The zone groups with data appends in flight at once, at most.
#[derive(Default)]
struct Groups {
    first_data_zone: u32,
    /// Append tag → its zone group, while in flight.
    appends: HashMap<u64, u32>,
    most: usize,
}

impl Watcher for Groups {
    fn submitted(&mut self, geometry: &Geometry, tag: u64, command: &Command) {
        if let Command::Append { zone, .. } = command {
            if *zone >= self.first_data_zone {
                self.appends.insert(tag, zone % geometry.zone_groups);
                let mut groups: Vec<u32> = self.appends.values().copied().collect();
                groups.sort_unstable();
                groups.dedup();
                self.most = self.most.max(groups.len());
            }
        }
    }
    fn completed(&mut self, tag: u64) {
        self.appends.remove(&tag);
    }
}

/// 4 KiB writes to a fresh volume, in half a zone's worth.
const WRITES: u64 = 256;

/// Writes `WRITES` blocks to a fresh volume, 4 KiB each, 32 in flight;
/// returns the most zone groups with appends in flight at once, after
/// checking every block reads back.
fn most_groups_while_writing(host_stripes: u32) -> usize {
    // Zones of 512 blocks, more than the writes fill: one zone takes
    // them all unless stripes open others. Open zones for the stripes
    // beside the base lanes' and the log's.
    let sim = SimConfig {
        blocks_per_lun: 16,
        pages_per_block: 512,
        max_open_zones: 16,
        max_active_zones: 16,
        timing: Some(Timing::default()),
        ..volume_config(true)
    };
    let geometry = sim.geometry().expect("geometry");
    assert_eq!(geometry.zone_groups, 4);
    let options = FormatOptions::default();
    let layout = Layout::plan(&geometry, None, options.gc_reserve_zones, false).expect("layout");
    let dev = Watched {
        inner: SimDevice::create_memory(sim).expect("device"),
        watcher: Groups {
            first_data_zone: layout.first_data_zone(),
            ..Groups::default()
        },
    };
    let cfg = FtlConfig {
        host_stripes,
        write_buffer_blocks: 256,
        ..FtlConfig::default()
    };
    let mut d = Driver::format(dev, &options, cfg).expect("format");
    let bs = d.block_size();
    assert!(geometry.zone_capacity_blocks >= 2 * WRITES);
    write_at_depth(&mut d, 0..WRITES, WRITES, 32);
    d.flush().expect("flush");
    assert_eq!(d.stats().gc_copy_blocks, 0, "GC ran during the fill");
    for lba in 0..WRITES {
        assert_eq!(
            d.read(lba, 1).expect("read"),
            pattern(lba, 1, bs),
            "block {lba}"
        );
    }
    d.backend().watcher.most
}

#[test]
fn host_writes_program_on_as_many_zone_groups_as_stripes() {
    let one = most_groups_while_writing(1);
    assert_eq!(one, 1, "one stripe: appends on {one} zone groups at once");
    let four = most_groups_while_writing(4);
    assert_eq!(
        four, 4,
        "four stripes: appends on {four} zone groups at once"
    );
}
