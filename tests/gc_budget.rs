//! GC's device-time budget (`FtlConfig::gc_budget`) on the simulator with
//! its timing model on (virtual time): while it binds, GC's device time
//! stays within the burst plus the rate times the time elapsed, and at its
//! tightest (no rate, no burst) GC still makes the room the host's writes
//! need, once the free zones are down to the reserve.

use zftl::core::{Backend, Driver, FtlConfig, GcBudget, IoError, Request};
use zftl::sim::{SimConfig, SimDevice, Timing};

mod common;
use common::{decode, format_with, pattern, volume_config};

/// Four LUNs, zones one LUN wide, timing on.
fn device() -> SimConfig {
    SimConfig {
        timing: Some(Timing::default()),
        ..volume_config(true)
    }
}

/// A small write buffer, so overwrites reach the media rather than
/// replace each other in the buffer.
fn config(budget: Option<GcBudget>) -> FtlConfig {
    FtlConfig {
        gc_budget: budget,
        write_buffer_blocks: 64,
        ..FtlConfig::default()
    }
}

/// The addresses `version`'s overwrites go to, at random in `0..span`.
fn addresses(version: u32, span: u64) -> impl Iterator<Item = u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(version);
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % span
    })
}

/// Keeps `depth` 4 KiB writes in flight at `addresses(version, span)` until
/// `count` are answered, each the lba's pattern of `version`.
fn overwrite(d: &mut Driver<SimDevice>, span: u64, count: u64, depth: u64, version: u32) {
    write_at(d, addresses(version, span), count, depth, version, 0);
}

/// Keeps `depth` 4 KiB requests in flight at `lbas` until `count` are
/// answered: writes of the lba's pattern of `version`, or, with
/// `reads_per_write`, that many reads of the lba (its data unchecked)
/// before each write, so the host leaves the device room for GC.
fn write_at(
    d: &mut Driver<SimDevice>,
    mut lbas: impl Iterator<Item = u64>,
    count: u64,
    depth: u64,
    version: u32,
    reads_per_write: u64,
) {
    let bs = d.block_size();
    let (mut sent, mut answered) = (0u64, 0u64);
    let mut next = None;
    while answered < count {
        while sent < count && sent - answered < depth {
            let lba = *next.get_or_insert_with(|| lbas.next().expect("endless"));
            let request = if sent % (reads_per_write + 1) < reads_per_write {
                Request::Read {
                    lba,
                    block_count: 1,
                }
            } else {
                Request::Write {
                    lba,
                    data: pattern(lba, version, bs),
                    fua: false,
                }
            };
            match d.try_submit(sent, request) {
                Ok(()) => {
                    sent += 1;
                    next = None;
                }
                Err(IoError::Busy) => break,
                Err(e) => panic!("write {sent}: {e}"),
            }
        }
        let moved = d.turn().expect("turn");
        let mut replies = 0;
        while let Some(reply) = d.take_reply() {
            reply.result.expect("request answered");
            answered += 1;
            replies += 1;
        }
        assert!(moved || replies > 0, "stalled: {}", d.ftl().debug_state());
    }
}

/// Fills the volume in order, then overwrites it at random; returns GC's device
/// time that the budget held back (`gc_device_us - gc_unbudgeted_us`) and
/// the virtual µs the overwrites took.
fn budgeted_us_and_elapsed_us(budget: Option<GcBudget>) -> (u64, u64) {
    let mut d = format_with(true, device(), config(budget));
    let logical = d.logical_blocks();
    write_at(&mut d, 0..logical, logical, 16, 1, 0);
    let before = d.stats();
    let start_ns = d.backend().clock_ns();
    write_at(&mut d, addresses(2, logical / 8), 16 * logical, 16, 2, 15);
    let after = d.stats();
    assert!(
        after.gc_copy_blocks > before.gc_copy_blocks,
        "GC never ran: {after:?}"
    );
    let budgeted = |s: &zftl::core::FtlStats| s.gc_device_us - s.gc_unbudgeted_us;
    let elapsed_us = (d.backend().clock_ns() - start_ns) / 1000;
    (budgeted(&after) - budgeted(&before), elapsed_us)
}

/// The most GC's device time may pass the budget by: the read that found
/// tokens left (64 blocks read and copied) and the summary reads and
/// resets of the victims then closing, which go out unchecked.
const SLACK_US: u64 = 64 * (25 + 200) + 4 * 1500;

#[test]
fn the_budget_bounds_gcs_device_time_while_it_binds() {
    // A quarter of one LUN's time.
    let budget = GcBudget {
        device_us_per_ms: 250,
        burst_us: 2000,
    };
    let bound = |elapsed_us: u64| {
        u64::from(budget.burst_us)
            + elapsed_us * u64::from(budget.device_us_per_ms) / 1000
            + SLACK_US
    };
    let (free, free_elapsed) = budgeted_us_and_elapsed_us(None);
    assert!(
        free > bound(free_elapsed),
        "without a budget GC used {free} µs in {free_elapsed} µs, within the bound: \
         the test shows nothing"
    );
    let (limited, elapsed) = budgeted_us_and_elapsed_us(Some(budget));
    assert!(
        limited <= bound(elapsed),
        "GC used {limited} device µs the budget held back in {elapsed} µs, past {}",
        bound(elapsed)
    );
}

/// No rate and no burst: GC reads only while the free zones are at the
/// reserve (or nothing else is in flight). Three times the volume in random
/// overwrites are all answered, every block reads back its last version.
#[test]
fn gc_frees_room_at_the_tightest_budget() {
    let budget = GcBudget {
        device_us_per_ms: 0,
        burst_us: 0,
    };
    let mut d = format_with(true, device(), config(Some(budget)));
    let logical = d.logical_blocks();
    for version in 1..=3 {
        overwrite(&mut d, logical, logical, 16, version);
    }
    d.flush().expect("flush");
    let s = d.stats();
    assert!(s.gc_copy_blocks > 0 && s.erases > 0, "GC never ran: {s:?}");
    assert!(
        s.gc_budget_waits > 0,
        "the budget never held GC back: {s:?}"
    );
    assert_eq!(
        s.gc_device_us, s.gc_unbudgeted_us,
        "with no tokens GC ran only past the budget"
    );
    let bs = d.block_size();
    let mut written = std::collections::HashMap::new();
    for version in 1..=3u32 {
        for lba in addresses(version, logical).take(logical as usize) {
            written.insert(lba, version);
        }
    }
    for (&lba, &version) in &written {
        let data = d.read(lba, 1).expect("read");
        assert_eq!(data.len(), bs);
        assert_eq!(decode(lba, &data), Ok(version), "lba {lba}");
    }
}
