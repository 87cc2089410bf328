//! Zone state machine, limits and command checks.

mod common;

use common::*;
use zftl_core::{
    Backend, BackendExt, Command, DeviceError, Outcome, ReadPriority, SubmitError, ZoneState,
};
use zftl_sim::{SimConfig, SimDevice};

fn dev() -> SimDevice {
    SimDevice::create_memory(SimConfig::small_for_tests()).expect("device")
}

#[test]
fn write_read_round_trip_with_oob_and_erased_reads_ff() {
    let mut d = dev();
    let g = d.geometry().clone();
    let data = blocks(&g, 3, 0, 4, 1);
    let o = oob(&g, 3, 0, 4);
    d.write_blocks(3, 0, data.clone(), o.clone())
        .expect("write");
    let (rd, ro) = d.read_blocks(3, 0, 4).expect("read");
    assert_eq!((rd, ro), (data, o));
    let (rd, ro) = d.read_blocks(3, 4, 2).expect("read above wp");
    assert!(rd.iter().all(|&b| b == 0xFF) && ro.iter().all(|&b| b == 0xFF));
    assert_eq!(ro.len(), 2 * 16);
    // Empty OOB writes zeros.
    d.write_blocks(3, 4, blocks(&g, 3, 4, 1, 1), vec![])
        .expect("write");
    assert!(d
        .read_blocks(3, 4, 1)
        .expect("read")
        .1
        .iter()
        .all(|&b| b == 0));
}

#[test]
fn state_machine_follows_zns() {
    let mut d = dev();
    let g = d.geometry().clone();
    let st = |d: &mut SimDevice, z| d.zone_info(z).expect("info").state;
    assert_eq!(st(&mut d, 0), ZoneState::Empty);
    d.write_blocks(0, 0, blocks(&g, 0, 0, 1, 0), vec![])
        .expect("write");
    assert_eq!(st(&mut d, 0), ZoneState::ImplicitlyOpen);
    d.execute(Command::Close { zone: 0 }).expect("close");
    assert_eq!(st(&mut d, 0), ZoneState::Closed);
    d.execute(Command::Open { zone: 0 }).expect("open");
    assert_eq!(st(&mut d, 0), ZoneState::ExplicitlyOpen);
    d.execute(Command::Open { zone: 1 }).expect("open");
    d.execute(Command::Close { zone: 1 }).expect("close");
    assert_eq!(
        st(&mut d, 1),
        ZoneState::Empty,
        "closing an unwritten open zone empties it"
    );
    assert!(matches!(
        d.execute(Command::Close { zone: 1 }),
        Err(DeviceError::InvalidTransition { .. })
    ));
    d.finish_zone(0).expect("finish");
    let info = d.zone_info(0).expect("info");
    assert_eq!(
        (info.state, info.write_pointer_blocks),
        (ZoneState::Full, g.zone_capacity_blocks)
    );
    assert_eq!(
        d.write_blocks(0, 1, blocks(&g, 0, 1, 1, 0), vec![]),
        Err(DeviceError::ZoneFull { zone: 0 })
    );
    d.reset_zone(0).expect("reset");
    assert_eq!(st(&mut d, 0), ZoneState::Empty);
    assert!(
        d.read_blocks(0, 0, 1)
            .expect("read")
            .0
            .iter()
            .all(|&b| b == 0xFF),
        "reset erased the data"
    );
    // Writing the last capacity block makes the zone Full.
    let cap = g.zone_capacity_blocks;
    for off in (0..cap).step_by(16) {
        d.append_blocks(2, blocks(&g, 2, off, 16, 0), vec![])
            .expect("append");
    }
    assert_eq!(st(&mut d, 2), ZoneState::Full);
    assert_eq!(
        d.append_blocks(2, blocks(&g, 2, 0, 1, 0), vec![]),
        Err(DeviceError::ZoneFull { zone: 2 })
    );
}

#[test]
fn write_pointer_alignment_and_ranges_are_enforced() {
    let mut cfg = SimConfig::small_for_tests();
    cfg.program_unit_pages = 4;
    let mut d = SimDevice::create_memory(cfg).expect("device");
    let g = d.geometry().clone();
    assert_eq!(g.write_unit_blocks, 4);
    assert!(matches!(
        d.write_blocks(0, 0, blocks(&g, 0, 0, 2, 0), vec![]),
        Err(DeviceError::Misaligned { .. })
    ));
    assert!(matches!(
        d.write_blocks(0, 4, blocks(&g, 0, 4, 4, 0), vec![]),
        Err(DeviceError::BadWritePointer {
            write_pointer_blocks: 0,
            ..
        })
    ));
    d.write_blocks(0, 0, blocks(&g, 0, 0, 8, 0), vec![])
        .expect("write");
    assert_eq!(d.append_blocks(0, blocks(&g, 0, 8, 4, 0), vec![]), Ok(8));
    assert_eq!(
        d.read_blocks(0, 0, 12).expect("read").0,
        blocks(&g, 0, 0, 12, 0)
    );
    assert!(matches!(
        d.write_blocks(0, 12, vec![0; 100], vec![]),
        Err(DeviceError::BufferSize { .. })
    ));
    assert!(matches!(
        d.write_blocks(0, 12, blocks(&g, 0, 0, 4, 0), vec![0; 3]),
        Err(DeviceError::BufferSize {
            expected_bytes: 64,
            actual_bytes: 3
        })
    ));
    assert!(matches!(
        d.write_blocks(0, 12, vec![0; 4096 * 36], vec![]),
        Err(DeviceError::TooLarge { .. })
    ));
    assert!(matches!(
        d.append_blocks(0, vec![0; 4096 * 20], vec![]),
        Err(DeviceError::TooLarge { .. })
    ));
    assert!(matches!(
        d.read_blocks(0, 60, 8),
        Err(DeviceError::OutOfRange { .. })
    ));
    assert!(matches!(
        d.read_blocks(0, 0, 0),
        Err(DeviceError::OutOfRange { .. })
    ));
    assert_eq!(
        d.read_blocks(99, 0, 1),
        Err(DeviceError::NoSuchZone { zone: 99 })
    );
    assert_eq!(d.zone_info(99), Err(DeviceError::NoSuchZone { zone: 99 }));
}

#[test]
fn open_and_active_limits() {
    let mut d = dev(); // max_open 8, max_active 12
    let g = d.geometry().clone();
    for z in 0..8 {
        d.write_blocks(z, 0, blocks(&g, z, 0, 1, 0), vec![])
            .expect("write");
    }
    assert_eq!(
        d.write_blocks(8, 0, blocks(&g, 8, 0, 1, 0), vec![]),
        Err(DeviceError::TooManyOpenZones { zone: 8, limit: 8 })
    );
    assert_eq!(
        d.execute(Command::Open { zone: 8 }),
        Err(DeviceError::TooManyOpenZones { zone: 8, limit: 8 })
    );
    for z in 0..4 {
        d.execute(Command::Close { zone: z }).expect("close");
    }
    for z in 8..12 {
        d.write_blocks(z, 0, blocks(&g, z, 0, 1, 0), vec![])
            .expect("write");
    }
    d.execute(Command::Close { zone: 8 }).expect("close");
    assert_eq!(
        d.write_blocks(12, 0, blocks(&g, 12, 0, 1, 0), vec![]),
        Err(DeviceError::TooManyActiveZones {
            zone: 12,
            limit: 12
        })
    );
    // Finishing frees an active slot.
    d.finish_zone(0).expect("finish");
    d.write_blocks(12, 0, blocks(&g, 12, 0, 1, 0), vec![])
        .expect("write");
}

#[test]
fn queue_depth_is_bounded_and_commands_keep_zone_order() {
    let mut d = dev();
    let g = d.geometry().clone();
    for i in 0..g.queue_depth as u64 {
        let cmd = Command::Append {
            zone: 1,
            data: blocks(&g, 1, i, 1, 0).into(),
            oob: vec![],
        };
        d.submit(i, cmd).expect("submit");
    }
    assert_eq!(d.submit(999, Command::Flush), Err(SubmitError::Busy));
    assert_eq!(d.in_flight(), g.queue_depth as usize);
    let done = drain(&mut d);
    assert_eq!(done.len(), 64);
    for c in &done {
        let Ok(Outcome::Written { offset_blocks, .. }) = c.result else {
            panic!("{c:?}")
        };
        assert_eq!(offset_blocks, c.tag, "appends land in submission order");
    }
    assert_eq!(d.in_flight(), 0);
    assert_eq!(
        d.wait(),
        Ok(()),
        "wait with nothing in flight returns at once"
    );
}

#[test]
fn shuffled_completions_are_a_seeded_permutation() {
    let run = |seed| {
        let mut cfg = SimConfig::small_for_tests();
        cfg.faults.shuffle_completions = true;
        cfg.faults.seed = seed;
        let mut d = SimDevice::create_memory(cfg).expect("device");
        for i in 0..32 {
            d.submit(
                i,
                Command::Read {
                    zone: 0,
                    offset_blocks: 0,
                    block_count: 1,
                    priority: ReadPriority::Host,
                },
            )
            .expect("submit");
        }
        drain(&mut d).into_iter().map(|c| c.tag).collect::<Vec<_>>()
    };
    let a = run(1);
    assert_eq!(a, run(1));
    assert_ne!(a, (0..32).collect::<Vec<_>>());
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, (0..32).collect::<Vec<_>>());
}

#[test]
fn stats_count_commands_and_media_work() {
    let mut d = dev();
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 4, 0), vec![])
        .expect("write");
    d.read_blocks(0, 0, 2).expect("read");
    d.reset_zone(0).expect("reset");
    d.flush().expect("flush");
    let s = d.stats();
    assert_eq!(
        (s.host_writes, s.host_reads, s.host_resets, s.host_flushes),
        (1, 1, 1, 1)
    );
    assert_eq!(
        (
            s.media_page_programs,
            s.media_page_reads,
            s.media_block_erases
        ),
        (4, 2, 2)
    );
    assert_eq!(
        (s.host_bytes_written, s.host_bytes_read),
        (4 * 4096, 2 * 4096)
    );
    assert_eq!(s.erase_count_max, 1);
    assert_eq!(d.zone_erase_count(0), 1);
}
