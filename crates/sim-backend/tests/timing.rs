//! The timing model on the virtual clock.

mod common;

use common::*;
use zftl_core::{Backend, BackendExt, Command};
use zftl_sim::{SimConfig, SimDevice, Timing};

fn timed() -> SimDevice {
    let mut cfg = SimConfig::small_for_tests();
    cfg.timing = Some(Timing::default());
    SimDevice::create_memory(cfg).expect("device")
}

#[test]
fn one_program_takes_200us() {
    let mut d = timed();
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 1, 0), vec![])
        .expect("write");
    assert_eq!(d.clock_ns(), 200_000);
    d.read_blocks(0, 0, 1).expect("read");
    assert_eq!(d.clock_ns(), 225_000);
    d.reset_zone(0).expect("reset");
    assert_eq!(
        d.clock_ns(),
        225_000 + 1_500_000,
        "the zone's two erase blocks erase in parallel"
    );
}

#[test]
fn programs_on_different_luns_overlap_and_on_one_lun_serialize() {
    // Zones 0 and 1 use LUNs {0,1} and {2,3}: one block at offset 0 and 1
    // of each zone hits all four LUNs.
    let mut d = timed();
    let g = d.geometry().clone();
    for (tag, (zone, off)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
        let cmd = Command::Write {
            zone,
            offset_blocks: off,
            data: blocks(&g, zone, off, 1, 0).into(),
            oob: vec![],
        };
        d.submit(tag as u64, cmd).expect("submit");
    }
    let done = drain(&mut d);
    assert!(done.iter().all(|c| c.result.is_ok()));
    assert_eq!(d.clock_ns(), 200_000, "4 LUNs in parallel");

    let mut d = timed();
    // Offsets 0, 2, 4, 6 of zone 0 all sit on LUN 0.
    for (tag, off) in (0..8).enumerate() {
        let cmd = Command::Write {
            zone: 0,
            offset_blocks: off,
            data: blocks(&g, 0, off, 1, 0).into(),
            oob: vec![],
        };
        d.submit(tag as u64, cmd).expect("submit");
    }
    drain(&mut d);
    assert_eq!(d.clock_ns(), 4 * 200_000, "two LUNs, four programs each");
    assert_eq!(d.stats().busy_ns_total, 8 * 200_000);
}

#[test]
fn reap_only_delivers_what_is_due_and_flush_waits_for_programs() {
    let mut d = timed();
    let g = d.geometry().clone();
    d.submit(
        1,
        Command::Write {
            zone: 0,
            offset_blocks: 0,
            data: blocks(&g, 0, 0, 1, 0).into(),
            oob: vec![],
        },
    )
    .expect("submit");
    d.submit(2, Command::Flush).expect("submit");
    let mut out = Vec::new();
    assert_eq!(d.reap(&mut out, 8), 0, "nothing is due at t=0");
    d.advance_clock_to(199_999);
    assert_eq!(d.reap(&mut out, 8), 0);
    d.wait().expect("wait");
    assert_eq!(d.clock_ns(), 200_000);
    assert_eq!(d.reap(&mut out, 8), 2);
    assert_eq!(out.iter().map(|c| c.tag).collect::<Vec<_>>(), [1, 2]);
    d.advance_clock_to(5);
    assert_eq!(d.clock_ns(), 200_000, "the clock never goes back");
}

#[test]
fn timing_off_keeps_the_clock_still_and_commands_pending_until_reaped() {
    let mut d = SimDevice::create_memory(SimConfig::small_for_tests()).expect("device");
    let g = d.geometry().clone();
    d.submit(
        1,
        Command::Write {
            zone: 0,
            offset_blocks: 0,
            data: blocks(&g, 0, 0, 1, 0).into(),
            oob: vec![],
        },
    )
    .expect("submit");
    assert_eq!(d.stats().media_page_programs, 0, "not executed before reap");
    drain(&mut d);
    assert_eq!(d.stats().media_page_programs, 1);
    assert_eq!(d.clock_ns(), 0);
}
