//! The programs queued per open data zone (`FtlConfig::zone_max_appends`
//! with `append_max_blocks`): with one append of at most 4 blocks per
//! zone, no data zone ever has more than 4 blocks of appends on the
//! device, host writes and GC copies alike, under random overwrites at
//! depth that keep GC running; without the bound it has many more.

use std::collections::HashMap;

use zftl::core::layout::Layout;
use zftl::core::{Command, Driver, FormatOptions, FtlConfig, Geometry};
use zftl::sim::SimDevice;

mod common;
use common::volume_config;
use common::watch::{fill_then_random, write_at_depth, Watched, Watcher};

/// Counts the blocks of appends in flight per zone.
#[derive(Default)]
struct Appends {
    /// Append tag → its zone and blocks, while in flight.
    appends: HashMap<u64, (u32, u64)>,
    in_flight: HashMap<u32, u64>,
    /// The most blocks of appends in flight to any data zone.
    most_data: u64,
    first_data_zone: u32,
}

impl Watcher for Appends {
    fn submitted(&mut self, geometry: &Geometry, tag: u64, command: &Command) {
        if let Command::Append { zone, data, .. } = command {
            let blocks = (data.len() / geometry.block_size_bytes as usize) as u64;
            self.appends.insert(tag, (*zone, blocks));
            let n = self.in_flight.entry(*zone).or_default();
            *n += blocks;
            if *zone >= self.first_data_zone {
                self.most_data = self.most_data.max(*n);
            }
        }
    }
    fn completed(&mut self, tag: u64) {
        if let Some((zone, blocks)) = self.appends.remove(&tag) {
            *self.in_flight.get_mut(&zone).expect("counted") -= blocks;
        }
    }
}

/// Fills the volume and overwrites it at random twice over, 32 writes in
/// flight; returns the most blocks of appends in flight to one data zone.
fn most_queued_per_zone(zone_max_appends: u32, append_max_blocks: u32) -> u64 {
    let sim = volume_config(true);
    let geometry = sim.geometry().expect("geometry");
    let options = FormatOptions::default();
    let layout = Layout::plan(&geometry, None, options.gc_reserve_zones, false).expect("layout");
    let dev = Watched {
        inner: SimDevice::create_memory(sim).expect("device"),
        watcher: Appends {
            first_data_zone: layout.first_data_zone(),
            ..Appends::default()
        },
    };
    let cfg = FtlConfig {
        zone_max_appends,
        append_max_blocks,
        write_buffer_blocks: 256,
        ..FtlConfig::default()
    };
    let mut d = Driver::format(dev, &options, cfg).expect("format");
    let logical = d.logical_blocks();
    write_at_depth(&mut d, fill_then_random(logical), 3 * logical, 32);
    assert!(d.stats().gc_copy_blocks > 0, "GC never ran");
    d.backend().watcher.most_data
}

#[test]
fn one_short_append_per_zone_bounds_its_queue() {
    let bounded = most_queued_per_zone(1, 4);
    assert!(bounded <= 4, "{bounded} blocks queued on one data zone");
    let free = most_queued_per_zone(0, 0);
    assert!(
        free > 4 * bounded,
        "without the bound only {free} blocks queued per zone: the test shows nothing"
    );
}
