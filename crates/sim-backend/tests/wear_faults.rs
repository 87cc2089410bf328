//! Wear-out, program/erase failures, uncorrectable reads, factory bad blocks.

mod common;

use common::*;
use zftl_core::{Backend, BackendExt, DeviceError, ZoneState};
use zftl_sim::{SimConfig, SimDevice};

#[test]
fn a_block_past_its_endurance_goes_bad_and_the_zone_offline() {
    let mut cfg = SimConfig::small_for_tests();
    cfg.endurance_erases = 3;
    let mut d = SimDevice::create_memory(cfg).expect("device");
    let g = d.geometry().clone();
    for cycle in 1..=3 {
        d.write_blocks(4, 0, blocks(&g, 4, 0, 2, 0), vec![])
            .expect("write");
        d.reset_zone(4).expect("reset within endurance");
        assert_eq!(d.zone_erase_count(4), cycle);
    }
    d.write_blocks(4, 0, blocks(&g, 4, 0, 2, 0), vec![])
        .expect("write");
    assert_eq!(d.reset_zone(4), Err(DeviceError::EraseFailed { zone: 4 }));
    assert_eq!(d.zone_info(4).expect("info").state, ZoneState::Offline);
    assert_eq!(
        d.read_blocks(4, 0, 1),
        Err(DeviceError::ZoneOffline { zone: 4 })
    );
    assert_eq!(
        d.write_blocks(4, 0, blocks(&g, 4, 0, 1, 0), vec![]),
        Err(DeviceError::ZoneOffline { zone: 4 })
    );
    assert_eq!(d.reset_zone(4), Err(DeviceError::ZoneOffline { zone: 4 }));
    let s = d.stats();
    assert_eq!(
        (s.erase_failures, s.bad_blocks, s.erase_count_max),
        (2, 2, 3)
    );
    assert_eq!(d.erase_counts().iter().filter(|&&c| c == 3).count(), 2);
    // Other zones are unaffected.
    d.write_blocks(5, 0, blocks(&g, 5, 0, 1, 0), vec![])
        .expect("other zone");
}

#[test]
fn program_failure_makes_the_zone_read_only() {
    let mut cfg = SimConfig::small_for_tests();
    cfg.faults.program_fail_per_million = 100_000;
    cfg.faults.seed = 3;
    let mut d = SimDevice::create_memory(cfg).expect("device");
    let g = d.geometry().clone();
    let mut failed = None;
    'outer: for zone in 0..8 {
        for off in 0..g.zone_capacity_blocks {
            match d.write_blocks(zone, off, blocks(&g, zone, off, 1, 0), vec![]) {
                Ok(()) => {}
                Err(DeviceError::ProgramFailed {
                    zone: z,
                    offset_blocks,
                }) => {
                    assert_eq!((z, offset_blocks), (zone, off));
                    failed = Some((zone, off));
                    break 'outer;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    let (zone, off) = failed.expect("a 10% failure rate fails within 512 programs");
    let info = d.zone_info(zone).expect("info");
    assert_eq!(
        (info.state, info.write_pointer_blocks),
        (ZoneState::ReadOnly, off + 1)
    );
    if off > 0 {
        assert_eq!(
            d.read_blocks(zone, 0, off as u32)
                .expect("readable below")
                .0,
            blocks(&g, zone, 0, off, 0)
        );
    }
    assert_eq!(
        d.read_blocks(zone, off, 1),
        Err(DeviceError::UncorrectableRead {
            zone,
            offset_blocks: off
        })
    );
    assert_eq!(
        d.write_blocks(zone, off + 1, blocks(&g, zone, 0, 1, 0), vec![]),
        Err(DeviceError::ZoneReadOnly { zone })
    );
    assert_eq!(
        d.append_blocks(zone, blocks(&g, zone, 0, 1, 0), vec![]),
        Err(DeviceError::ZoneReadOnly { zone })
    );
    assert_eq!(d.reset_zone(zone), Err(DeviceError::ZoneOffline { zone }));
    assert_eq!(d.zone_info(zone).expect("info").state, ZoneState::Offline);
    assert_eq!(d.stats().program_failures, 1);
    assert_eq!(d.stats().bad_blocks, 1);
}

#[test]
fn uncorrectable_read_rate_is_roughly_honoured_and_transient() {
    let mut cfg = SimConfig::small_for_tests();
    cfg.faults.uncorrectable_read_per_million = 200_000;
    let mut d = SimDevice::create_memory(cfg).expect("device");
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 4, 0), vec![])
        .expect("write");
    let mut errors = 0;
    for _ in 0..2000 {
        match d.read_blocks(0, 0, 4) {
            Ok((data, _)) => assert_eq!(data, blocks(&g, 0, 0, 4, 0)),
            Err(DeviceError::UncorrectableRead {
                zone: 0,
                offset_blocks,
            }) => {
                assert!(offset_blocks < 4);
                errors += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(
        (300..500).contains(&errors),
        "{errors} errors for a 20% rate"
    );
    assert_eq!(d.stats().uncorrectable_reads, errors);
}

#[test]
fn erase_failures_take_zones_offline() {
    let mut cfg = SimConfig::small_for_tests();
    cfg.faults.erase_fail_per_million = 300_000;
    let mut d = SimDevice::create_memory(cfg).expect("device");
    let g = d.geometry().clone();
    let mut offline = 0;
    for zone in 0..16 {
        d.write_blocks(zone, 0, blocks(&g, zone, 0, 1, 0), vec![])
            .expect("write");
        match d.reset_zone(zone) {
            Ok(()) => assert_eq!(d.zone_info(zone).expect("info").state, ZoneState::Empty),
            Err(DeviceError::EraseFailed { zone: z }) => {
                assert_eq!(z, zone);
                assert_eq!(d.zone_info(zone).expect("info").state, ZoneState::Offline);
                offline += 1;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(offline > 0 && offline < 16, "{offline}");
}

#[test]
fn factory_bad_blocks_make_zones_offline_deterministically() {
    let mut cfg = SimConfig::small_for_tests();
    cfg.factory_bad_block_per_mille = 100;
    cfg.faults.seed = 11;
    let offline = |cfg: &SimConfig| {
        let mut d = SimDevice::create_memory(cfg.clone()).expect("device");
        let zones: Vec<u32> = (0..d.geometry().zone_count)
            .filter(|&z| d.zone_info(z).expect("info").state == ZoneState::Offline)
            .collect();
        (zones, d.stats().bad_blocks)
    };
    let (zones, bad) = offline(&cfg);
    assert!(!zones.is_empty() && bad > 0);
    assert!(zones.len() as u64 <= bad);
    assert_eq!(
        offline(&cfg),
        (zones.clone(), bad),
        "same seed, same bad blocks"
    );
    let mut d = SimDevice::create_memory(cfg).expect("device");
    let g = d.geometry().clone();
    let z = zones[0];
    assert_eq!(
        d.read_blocks(z, 0, 1),
        Err(DeviceError::ZoneOffline { zone: z })
    );
    assert_eq!(
        d.write_blocks(z, 0, blocks(&g, z, 0, 1, 0), vec![]),
        Err(DeviceError::ZoneOffline { zone: z })
    );
}
