//! Spread GC (`gc_lanes`, `gc_victims`, `zone_max_appends`) keeps every
//! zone group's units busy under 4 KiB random overwrites at depth: a
//! victim's reads load its group and its reset frees a zone there, so
//! victims are taken from the group with the fewest free zones and victims
//! (`Ftl::balanced_victim`), and a GC queue whose zones are at their
//! appends in flight lets another queue's copies go. Measured on the
//! simulator's virtual clock (deterministic, no wall-clock timing): the
//! LUNs' busy time over a window of random writes at depth 64.

use zftl::core::{Backend, Driver, FormatOptions, FtlConfig, IoError, Request};
use zftl::sim::{SimConfig, SimDevice, Timing};

/// The default device's parallelism and timing (16 LUNs, zones 4 LUNs
/// wide: 4 zone groups), 64 erase blocks a LUN (256 zones of 4 MiB).
fn device() -> SimConfig {
    SimConfig {
        blocks_per_lun: 64,
        timing: Some(Timing::default()),
        endurance_erases: u32::MAX,
        ..SimConfig::default()
    }
}

/// xorshift64: the addresses of the random writes.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Writes `count` blocks, `depth` in flight: sequential from 0 when
/// `seq`, else at random.
fn write(d: &mut Driver<SimDevice>, count: u64, depth: u64, seq: bool, x: &mut u64) {
    let (logical, bs) = (d.logical_blocks(), d.block_size());
    let (mut sent, mut answered, mut id) = (0u64, 0u64, 0u64);
    let mut lba = if seq { 0 } else { next(x) % logical };
    while answered < count {
        while sent < count && sent - answered < depth {
            let request = Request::Write {
                lba,
                data: vec![0x5a; bs],
                fua: false,
            };
            match d.try_submit(id, request) {
                Ok(()) => {
                    sent += 1;
                    id += 1;
                    lba = if seq { sent } else { next(x) % logical };
                }
                Err(IoError::Busy) => break,
                Err(e) => panic!("write {sent}: {e}"),
            }
        }
        d.turn().expect("turn");
        while let Some(reply) = d.take_reply() {
            reply.result.expect("write answered");
            answered += 1;
        }
    }
}

/// Each LUN's busy time up to the virtual clock.
fn busy_ns(d: &Driver<SimDevice>) -> Vec<u64> {
    let dev = d.backend();
    let now = dev.clock_ns();
    dev.lun_busy_ns()
        .iter()
        .zip(dev.lun_queued_until_ns())
        .map(|(&busy, &until)| busy - until.saturating_sub(now))
        .collect()
}

/// Fills the volume, overwrites half of it at random, then measures
/// random writes at depth 64: each zone group's LUNs' busy time in the
/// window, and the window's length (virtual ns).
fn group_busy_ns(cfg: FtlConfig) -> (Vec<u64>, u64) {
    let sim = device();
    let width = sim.zone_width_luns as usize;
    let dev = SimDevice::create_memory(sim).expect("device");
    let mut d = Driver::format(dev, &FormatOptions::default(), cfg).expect("format");
    let logical = d.logical_blocks();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    write(&mut d, logical, 16, true, &mut x);
    write(&mut d, logical / 2, 64, false, &mut x);
    let before = busy_ns(&d);
    let start_ns = d.backend().clock_ns();
    let copies = d.stats().gc_copy_blocks;
    write(&mut d, logical / 8, 64, false, &mut x);
    assert!(d.stats().gc_copy_blocks > copies, "GC never ran");
    let after = busy_ns(&d);
    let elapsed_ns = d.backend().clock_ns() - start_ns;
    let luns: Vec<u64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    let groups = luns.chunks(width).map(|g| g.iter().sum()).collect();
    (groups, elapsed_ns)
}

#[test]
fn spread_gc_keeps_every_zone_group_busy() {
    let cfg = FtlConfig {
        gc_lanes: 4,
        gc_victims: 6,
        zone_max_appends: 2,
        ..FtlConfig::default()
    };
    let (groups, elapsed_ns) = group_busy_ns(cfg);
    assert_eq!(groups.len(), 4, "{groups:?}");
    // Busy LUN time over 16 LUNs' time: 0.76 before victims were balanced
    // over the zone groups and a busy GC queue let the other go, 0.85
    // with both.
    let busy: u64 = groups.iter().sum();
    let utilization = busy as f64 / (16.0 * elapsed_ns as f64);
    assert!(
        utilization >= 0.8,
        "media utilization {utilization:.3} over {elapsed_ns} ns: busy ns by zone group {groups:?}"
    );
}
