//! GC's victim reads in flight per zone group
//! (`FtlConfig::gc_read_max_blocks_per_group`): with a bound of 8 blocks no
//! zone group ever has more than 8 blocks of GC's reads on the device, under
//! random overwrites at depth that keep GC running flat out; without the
//! bound it has many more.

use std::collections::HashMap;

use zftl::core::{Command, Driver, FormatOptions, FtlConfig, Geometry, ReadPriority};
use zftl::sim::SimDevice;

mod common;
use common::volume_config;
use common::watch::{fill_then_random, write_at_depth, Watched, Watcher};

/// Counts the blocks of background (GC) reads in flight per zone group.
#[derive(Default)]
struct GcReads {
    /// Read tag → its zone group and blocks, while in flight.
    reads: HashMap<u64, (u32, u64)>,
    in_flight: HashMap<u32, u64>,
    /// The most blocks of background reads in flight on any zone group.
    most: u64,
}

impl Watcher for GcReads {
    fn submitted(&mut self, geometry: &Geometry, tag: u64, command: &Command) {
        if let Command::Read {
            zone,
            block_count,
            priority: ReadPriority::Background,
            ..
        } = command
        {
            let group = zone % geometry.zone_groups;
            self.reads.insert(tag, (group, u64::from(*block_count)));
            let n = self.in_flight.entry(group).or_default();
            *n += u64::from(*block_count);
            self.most = self.most.max(*n);
        }
    }
    fn completed(&mut self, tag: u64) {
        if let Some((group, blocks)) = self.reads.remove(&tag) {
            *self.in_flight.get_mut(&group).expect("counted") -= blocks;
        }
    }
}

/// Fills the volume and overwrites it at random twice over, 32 writes in
/// flight; returns the most blocks of GC's reads in flight on one zone
/// group, and the blocks GC copied.
fn most_gc_reads_per_group(gc_read_max_blocks_per_group: u32) -> (u64, u64) {
    let sim = volume_config(true);
    assert!(sim.geometry().expect("geometry").zone_groups > 1);
    let dev = Watched {
        inner: SimDevice::create_memory(sim).expect("device"),
        watcher: GcReads::default(),
    };
    let cfg = FtlConfig {
        gc_read_max_blocks_per_group,
        write_buffer_blocks: 256,
        ..FtlConfig::default()
    };
    let mut d = Driver::format(dev, &FormatOptions::default(), cfg).expect("format");
    let logical = d.logical_blocks();
    write_at_depth(&mut d, fill_then_random(logical), 3 * logical, 32);
    let copied = d.stats().gc_copy_blocks;
    (d.backend().watcher.most, copied)
}

#[test]
fn gc_reads_in_flight_per_zone_group_stay_within_the_bound() {
    let (bounded, copied) = most_gc_reads_per_group(8);
    assert!(copied > 0, "GC never ran");
    assert!(
        bounded <= 8,
        "{bounded} blocks of GC reads on one zone group"
    );
    let (free, copied) = most_gc_reads_per_group(0);
    assert!(copied > 0, "GC never ran");
    assert!(
        free > 2 * bounded,
        "without the bound only {free} blocks of GC reads per zone group: the test shows nothing"
    );
}
