//! Power cuts: only durable state survives, torn pages are unreadable.

mod common;

use common::*;
use zftl_core::{Backend, BackendExt, Command, DeviceError, Outcome, SubmitError, ZoneState};
use zftl_sim::rng::Rng;
use zftl_sim::{Faults, PowerCut, RuntimeOptions, SimConfig, SimDevice, Timing};

const ZONES: u32 = 4;

/// What the host knows per zone: blocks submitted and blocks acknowledged.
#[derive(Clone, Copy, Default, Debug)]
struct ZoneModel {
    submitted_end: u64,
    acked_end: u64,
}

/// Drives writes to a few zones until the planned power cut fires; returns
/// the host's model. Every completion is checked.
fn run_until_cut(d: &mut SimDevice, seed: u64) -> Vec<ZoneModel> {
    let g = d.geometry().clone();
    let mut rng = Rng::new(seed);
    let mut model = vec![ZoneModel::default(); ZONES as usize];
    let mut ends = std::collections::HashMap::new();
    let mut out = Vec::new();
    let mut tag = 0u64;
    loop {
        let zone = rng.below(u64::from(ZONES)) as u32;
        let m = &mut model[zone as usize];
        let count = (1 + rng.below(6)).min(g.zone_capacity_blocks - m.submitted_end);
        if count > 0 {
            let cmd = Command::Write {
                zone,
                offset_blocks: m.submitted_end,
                data: blocks(&g, zone, m.submitted_end, count, 0).into(),
                oob: oob(&g, zone, m.submitted_end, count),
            };
            match d.submit(tag, cmd) {
                Ok(()) => {}
                Err(SubmitError::DeviceGone) => break,
                Err(SubmitError::Busy) => panic!("queue is never full here"),
            }
            m.submitted_end += count;
            ends.insert(tag, (zone, m.submitted_end));
            tag += 1;
        }
        if rng.below(3) == 0 {
            if rng.below(2) == 0 {
                let _ = d.wait();
            }
            out.clear();
            d.reap(&mut out, rng.below(4) as usize);
            for c in &out {
                if c.result == Err(DeviceError::DeviceGone) {
                    continue; // the cut fired on the last submit
                }
                assert!(c.result.is_ok(), "seed {seed}: {c:?}");
                let (zone, end) = ends[&c.tag];
                let m = &mut model[zone as usize];
                // Writes of a zone execute in order (delivery may be
                // shuffled), so everything below an acked end is durable.
                m.acked_end = m.acked_end.max(end);
            }
        }
        if d.in_flight() >= 48 {
            // Keep the queue below its depth.
            let _ = d.wait();
            out.clear();
            d.reap(&mut out, usize::MAX);
            for c in &out {
                if c.result == Err(DeviceError::DeviceGone) {
                    continue;
                }
                assert!(c.result.is_ok(), "seed {seed}: {c:?}");
                let (zone, end) = ends[&c.tag];
                let m = &mut model[zone as usize];
                m.acked_end = m.acked_end.max(end);
            }
        }
        assert!(tag < 10_000, "seed {seed}: power cut never fired");
    }
    // Everything still in flight completes with DeviceGone.
    let rest = drain(d);
    assert!(
        rest.iter()
            .all(|c| c.result == Err(DeviceError::DeviceGone)),
        "seed {seed}"
    );
    assert_eq!(d.in_flight(), 0);
    model
}

/// Checks the device shows exactly durable state for the model.
fn check_durable(d: &mut SimDevice, model: &[ZoneModel], seed: u64) {
    let g = d.geometry().clone();
    for (zone, m) in model.iter().enumerate() {
        let zone = zone as u32;
        let info = d.zone_info(zone).expect("info");
        let wp = info.write_pointer_blocks;
        assert!(
            !info.state.is_open(),
            "seed {seed}: zone {zone} still open after power-on"
        );
        assert!(
            wp >= m.acked_end,
            "seed {seed}: zone {zone} lost acked data: wp {wp} < {}",
            m.acked_end
        );
        assert!(
            wp <= m.submitted_end,
            "seed {seed}: zone {zone} wp {wp} beyond submitted {}",
            m.submitted_end
        );
        for off in 0..g.zone_capacity_blocks {
            let r = d.read_blocks(zone, off, 1);
            if off < m.acked_end {
                let (data, o) =
                    r.unwrap_or_else(|e| panic!("seed {seed}: zone {zone} acked block {off}: {e}"));
                assert_eq!(
                    data,
                    block(&g, zone, off, 0),
                    "seed {seed}: zone {zone} block {off}"
                );
                assert_eq!(o, oob(&g, zone, off, 1));
            } else if off < wp {
                assert!(
                    is_uncorrectable(&r) || r.as_ref().ok() == Some(&(block(&g, zone, off, 0), oob(&g, zone, off, 1))),
                    "seed {seed}: zone {zone} block {off} below wp is neither written nor torn: {r:?}"
                );
            } else {
                let (data, _) = r.expect("above wp reads erased");
                assert!(
                    data.iter().all(|&b| b == 0xFF),
                    "seed {seed}: zone {zone} block {off} above wp"
                );
            }
        }
    }
}

fn cut_config(seed: u64, timing: Option<Timing>) -> SimConfig {
    let mut cfg = SimConfig::small_for_tests();
    cfg.timing = timing;
    cfg.faults = Faults {
        seed,
        power_cut: PowerCut::AfterSubmits(3 + seed * 7 % 60),
        shuffle_completions: seed % 2 == 1,
        ..Faults::default()
    };
    cfg
}

#[test]
fn power_cut_mid_writes_leaves_only_durable_state() {
    for timing in [None, Some(Timing::default())] {
        for seed in 0..24 {
            let mut d = SimDevice::create_memory(cut_config(seed, timing)).expect("device");
            let model = run_until_cut(&mut d, seed);
            assert!(!d.is_powered());
            assert_eq!(d.submit(0, Command::Flush), Err(SubmitError::DeviceGone));
            assert_eq!(d.zone_info(0), Err(DeviceError::DeviceGone));
            d.power_on().expect("power on");
            check_durable(&mut d, &model, seed);
            assert_eq!(d.stats().power_cuts, 1);
            // The fired trigger stays cleared: the device keeps working.
            for _ in 0..100 {
                d.flush().expect("no second cut");
            }
        }
    }
}

#[test]
fn random_power_cuts_also_leave_only_durable_state() {
    for seed in 100..110 {
        let mut cfg = cut_config(seed, None);
        cfg.faults.power_cut = PowerCut::RandomPerMillion(30_000);
        let mut d = SimDevice::create_memory(cfg).expect("device");
        let model = run_until_cut(&mut d, seed);
        d.power_on().expect("power on");
        d.set_faults(Faults::default());
        check_durable(&mut d, &model, seed);
    }
}

/// Submits one 8-block write and cuts power with it in flight.
fn cut_one_write(seed: u64) -> SimDevice {
    let mut cfg = SimConfig::small_for_tests();
    cfg.faults.seed = seed;
    let mut d = SimDevice::create_memory(cfg).expect("device");
    let g = d.geometry().clone();
    d.write_blocks(5, 0, blocks(&g, 5, 0, 2, 0), vec![])
        .expect("durable prefix");
    d.submit(
        1,
        Command::Write {
            zone: 5,
            offset_blocks: 2,
            data: blocks(&g, 5, 2, 8, 0).into(),
            oob: vec![],
        },
    )
    .expect("submit");
    d.power_cut();
    let done = drain(&mut d);
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].result, Err(DeviceError::DeviceGone));
    d.power_on().expect("power on");
    d
}

#[test]
fn a_torn_page_reads_as_uncorrectable_until_reset() {
    let g = SimConfig::small_for_tests().geometry().expect("geometry");
    let mut fates = [false; 3]; // lost, landed, torn
    for seed in 0..64 {
        let mut d = cut_one_write(seed);
        let wp = d.zone_info(5).expect("info").write_pointer_blocks;
        assert_eq!(d.zone_info(5).expect("info").state, ZoneState::Closed);
        let torn = (2..wp).find(|&off| is_uncorrectable(&d.read_blocks(5, off, 1)));
        match (wp, torn) {
            (2, None) => fates[0] = true,
            (10, None) => {
                fates[1] = true;
                assert_eq!(
                    d.read_blocks(5, 2, 8).expect("landed").0,
                    blocks(&g, 5, 2, 8, 0)
                );
            }
            (torn_end, Some(torn)) => {
                fates[2] = true;
                assert_eq!(
                    torn,
                    torn_end - 1,
                    "seed {seed}: the torn unit is the last one below wp"
                );
                assert_eq!(
                    d.read_blocks(5, 0, torn as u32).expect("prefix").0,
                    blocks(&g, 5, 0, torn, 0)
                );
                assert_eq!(
                    d.read_blocks(5, torn, 1),
                    Err(DeviceError::UncorrectableRead {
                        zone: 5,
                        offset_blocks: torn
                    }),
                    "seed {seed}"
                );
                // A read that spans the torn page fails at it.
                assert_eq!(
                    d.read_blocks(5, 0, 10),
                    Err(DeviceError::UncorrectableRead {
                        zone: 5,
                        offset_blocks: torn
                    })
                );
                // Writing continues after the torn unit.
                d.write_blocks(5, torn_end, blocks(&g, 5, torn_end, 1, 9), vec![])
                    .expect("write after torn");
                d.reset_zone(5).expect("reset");
                assert!(d
                    .read_blocks(5, torn, 1)
                    .expect("erased")
                    .0
                    .iter()
                    .all(|&b| b == 0xFF));
            }
            other => panic!("seed {seed}: impossible outcome {other:?}"),
        }
    }
    assert_eq!(
        fates, [true; 3],
        "64 seeds should show lost, landed and torn writes"
    );
}

#[test]
fn cut_with_reset_in_flight_either_resets_or_not() {
    let mut seen = [false; 2];
    for seed in 0..32 {
        let mut cfg = SimConfig::small_for_tests();
        cfg.faults.seed = seed;
        let mut d = SimDevice::create_memory(cfg).expect("device");
        let g = d.geometry().clone();
        d.write_blocks(0, 0, blocks(&g, 0, 0, 4, 0), vec![])
            .expect("write");
        d.submit(1, Command::Reset { zone: 0 }).expect("submit");
        d.power_cut();
        drain(&mut d);
        d.power_on().expect("power on");
        let info = d.zone_info(0).expect("info");
        match info.state {
            ZoneState::Empty => {
                seen[0] = true;
                assert_eq!(d.zone_erase_count(0), 1);
            }
            ZoneState::Closed => {
                seen[1] = true;
                assert_eq!(
                    d.read_blocks(0, 0, 4).expect("read").0,
                    blocks(&g, 0, 0, 4, 0)
                );
            }
            s => panic!("seed {seed}: {s:?}"),
        }
    }
    assert_eq!(seen, [true; 2]);
}

#[test]
fn completed_but_unreaped_commands_complete_with_device_gone() {
    let mut d = SimDevice::create_memory(SimConfig::small_for_tests()).expect("device");
    let g = d.geometry().clone();
    d.submit(
        7,
        Command::Write {
            zone: 0,
            offset_blocks: 0,
            data: blocks(&g, 0, 0, 1, 0).into(),
            oob: vec![],
        },
    )
    .expect("submit");
    d.wait().expect("wait");
    d.power_cut();
    let done = drain(&mut d);
    assert_eq!(done.len(), 1);
    assert_eq!(
        (done[0].tag, &done[0].result),
        (7, &Err(DeviceError::DeviceGone))
    );
    assert_eq!(d.wait(), Err(DeviceError::DeviceGone));
    d.power_on().expect("power on");
    // It had executed, so it is durable.
    assert_eq!(d.read_blocks(0, 0, 1).expect("read").0, block(&g, 0, 0, 0));
}

#[test]
fn set_faults_arms_a_cut_counting_from_the_call() {
    let mut d = SimDevice::create_memory(SimConfig::small_for_tests()).expect("device");
    for i in 0..10 {
        d.submit(i, Command::Flush).expect("submit");
    }
    drain(&mut d);
    d.set_faults(Faults {
        power_cut: PowerCut::AfterSubmits(2),
        ..Faults::default()
    });
    d.submit(0, Command::Flush).expect("first");
    assert!(d.is_powered());
    d.submit(1, Command::Flush)
        .expect("second is accepted, then power goes");
    assert!(!d.is_powered());
    assert_eq!(d.submit(2, Command::Flush), Err(SubmitError::DeviceGone));
    let done = drain(&mut d);
    assert!(
        done.iter()
            .all(|c| c.result == Err(DeviceError::DeviceGone))
            && done.len() == 2
    );
    d.power_on().expect("on");
    assert!(d.is_powered());
    assert_eq!(d.execute(Command::Flush), Ok(Outcome::Done));
}

#[test]
fn power_cut_then_reopen_from_file_shows_only_durable_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    for seed in 0..6 {
        let path = dir.path().join(format!("cut{seed}.img"));
        let mut d = SimDevice::create_file(&path, cut_config(seed, None)).expect("create");
        let model = run_until_cut(&mut d, seed);
        let counts = d.erase_counts();
        drop(d);
        let mut d = SimDevice::open_file(&path, RuntimeOptions::default()).expect("reopen");
        check_durable(&mut d, &model, seed);
        assert_eq!(d.erase_counts(), counts);
    }
}

#[test]
fn power_on_starts_a_new_queue_pair() {
    let mut d = SimDevice::create_memory(SimConfig::small_for_tests()).expect("device");
    for i in 0..5 {
        d.submit(i, Command::Flush).expect("submit");
    }
    d.power_cut();
    assert_eq!(
        d.in_flight(),
        5,
        "every command in flight completes with DeviceGone"
    );
    d.power_on().expect("power on");
    assert_eq!(
        d.in_flight(),
        0,
        "unreaped completions of the old queue are dropped"
    );
    d.power_on()
        .expect("powering on a powered device is a no-op");
}
