//! The inline handle (`zftl::handle::InlineHandle`): the FTL driven on the
//! callers' threads. Data through clones, shutdown and remount, the final
//! flush of the last clone, and power cuts at many points: every call
//! answers, every FLUSH- or FUA-acknowledged write survives, nothing older
//! comes back.

use std::collections::HashMap;
use std::thread;

use zftl::core::{Driver, FormatOptions, FtlConfig, IoError};
use zftl::handle::InlineHandle;
use zftl::sim::rng::Rng;
use zftl::sim::{Faults, PowerCut, SimConfig, SimDevice};

mod common;
use common::block;

fn device() -> SimDevice {
    SimDevice::create_memory(SimConfig::small_for_tests()).expect("sim")
}

/// Zones of 256 blocks and appends of up to 64 (256 KiB): room for the
/// handle's append size to follow the size of the writes.
fn device_with_large_appends() -> SimDevice {
    SimDevice::create_memory(SimConfig {
        pages_per_block: 128,
        max_append_blocks: 64,
        max_transfer_blocks: 64,
        ..SimConfig::small_for_tests()
    })
    .expect("sim")
}

fn format(dev: SimDevice) -> InlineHandle<SimDevice> {
    let driver =
        Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).expect("format");
    InlineHandle::new(driver)
}

fn write(ftl: &InlineHandle<SimDevice>, lba: u64, data: Vec<u8>, fua: bool) -> Result<(), IoError> {
    ftl.call(zftl::core::Request::Write { lba, data, fua })
        .map(drop)
}

fn read(ftl: &InlineHandle<SimDevice>, lba: u64, block_count: u32) -> Result<Vec<u8>, IoError> {
    match ftl.call(zftl::core::Request::Read { lba, block_count })? {
        zftl::core::ReplyData::Read(data) => Ok(data),
        other => panic!("read answered {other:?}"),
    }
}

fn flush(ftl: &InlineHandle<SimDevice>) -> Result<(), IoError> {
    ftl.call(zftl::core::Request::Flush).map(drop)
}

#[test]
fn threads_write_through_clones_and_the_data_survives_shutdown() {
    let ftl = format(device());
    let bs = ftl.block_size();
    // Enough rounds that the buffer goes out in full appends and GC runs.
    let rounds = 6 * ftl.logical_blocks() / 4;
    let workers: Vec<_> = (0..4u64)
        .map(|t| {
            let ftl = ftl.clone();
            thread::spawn(move || {
                let span = ftl.logical_blocks() / 4;
                for round in 0..rounds / 4 {
                    let lba = t * span + (round * 7) % span;
                    let v = (round / span) as u32 + 1;
                    write(&ftl, lba, block(lba, v, bs), false).expect("write");
                    assert_eq!(read(&ftl, lba, 1).expect("read"), block(lba, v, bs));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    flush(&ftl).expect("flush");
    let stats = ftl.stats().expect("stats");
    assert!(
        stats.gc_copy_blocks > 0 || stats.erases > 0,
        "GC ran: {stats:?}"
    );
    let expected: Vec<Vec<u8>> = (0..ftl.logical_blocks())
        .map(|lba| read(&ftl, lba, 1).expect("read"))
        .collect();
    let dev = ftl.shutdown().expect("shutdown");
    let mut again = Driver::mount(dev, FtlConfig::default()).expect("mount");
    for (lba, want) in expected.iter().enumerate() {
        assert_eq!(&again.read(lba as u64, 1).expect("read"), want, "lba {lba}");
    }
}

#[test]
fn dropping_the_last_clone_flushes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let cfg = SimConfig::small_for_tests();
    let ftl = format(SimDevice::create_file(&path, cfg.clone()).expect("create"));
    let bs = ftl.block_size();
    let clone = ftl.clone();
    write(&ftl, 10, block(10, 2, bs), false).expect("write");
    drop(ftl);
    write(&clone, 30, block(30, 3, bs), false).expect("write");
    drop(clone);
    let dev = SimDevice::open_file_expecting(&path, &cfg).expect("reopen");
    let mut again = Driver::mount(dev, FtlConfig::default()).expect("mount");
    assert_eq!(again.read(10, 1).expect("read"), block(10, 2, bs));
    assert_eq!(again.read(30, 1).expect("read"), block(30, 3, bs));
}

#[test]
fn bad_input_is_typed_and_shutdown_closes_every_clone() {
    let ftl = format(device());
    let bs = ftl.block_size();
    let end = ftl.logical_blocks();
    assert!(matches!(
        read(&ftl, end, 1),
        Err(IoError::OutOfRange { .. })
    ));
    assert!(matches!(
        write(&ftl, 0, vec![0; bs - 1], false),
        Err(IoError::BufferSize { .. })
    ));
    let clone = ftl.clone();
    ftl.shutdown().expect("shutdown");
    assert_eq!(read(&clone, 0, 1), Err(IoError::DeviceGone));
    assert_eq!(clone.stats().err(), Some(IoError::DeviceGone));
}

/// Power cuts after many different submit counts, under a mix of
/// single-block writes, FUA writes, flushes and reads checked against a
/// model. The sweep covers several laps of the metadata log ring (cuts
/// between a log zone filling and the next one's reset once wedged the
/// mount; see `tests/log_wrap_cuts.rs`).
#[test]
fn power_cuts_keep_every_durable_write_and_never_hang() {
    power_cut_sweep(device, (20..8000).step_by(11), 1);
}

/// The same with writes of up to 32 blocks among them, on a device whose
/// appends take 64: after writes of more than 8 blocks the handle waits
/// for more than its 32-block floor before it sends an append.
#[test]
fn power_cuts_under_large_writes_keep_every_durable_write() {
    power_cut_sweep(device_with_large_appends, (20..3000).step_by(13), 32);
}

/// Formats `device()`, cuts its power after each of `cuts` submits in
/// turn, and checks the model after the remount. Every 17th request is a
/// write of 1 to `max_write_blocks` blocks.
fn power_cut_sweep(
    device: fn() -> SimDevice,
    cuts: impl Iterator<Item = u64>,
    max_write_blocks: u64,
) {
    for cut in cuts {
        let mut driver = Driver::format(device(), &FormatOptions::default(), FtlConfig::default())
            .expect("format");
        driver.backend_mut().set_faults(Faults {
            power_cut: PowerCut::AfterSubmits(cut),
            ..Faults::default()
        });
        let ftl = InlineHandle::new(driver);
        let bs = ftl.block_size();
        let span = 300u64.min(ftl.logical_blocks());
        // lba -> (newest acknowledged version, newest durable version)
        let mut model: HashMap<u64, (u32, u32)> = HashMap::new();
        let mut round = 0u32;
        let lost = loop {
            round += 1;
            assert!(round < 200_000, "cut {cut}: no power cut");
            let lba = u64::from(round.wrapping_mul(2_654_435_761)) % span;
            let outcome = match round % 17 {
                0 => flush(&ftl).map(|()| {
                    for v in model.values_mut() {
                        v.1 = v.0;
                    }
                }),
                1..=3 => read(&ftl, lba, 1).map(|data| {
                    let want = model.get(&lba).map_or(vec![0; bs], |v| block(lba, v.0, bs));
                    assert!(data == want, "cut {cut}: read of {lba} is stale");
                }),
                4 => write(&ftl, lba, block(lba, round, bs), true).map(|()| {
                    model.insert(lba, (round, round));
                }),
                5 => {
                    let count = (1 + u64::from(round / 17) % max_write_blocks).min(span - lba);
                    let data: Vec<u8> = (lba..lba + count)
                        .flat_map(|l| block(l, round, bs))
                        .collect();
                    write(&ftl, lba, data, false).map(|()| {
                        for l in lba..lba + count {
                            let durable = model.get(&l).map_or(0, |v| v.1);
                            model.insert(l, (round, durable));
                        }
                    })
                }
                _ => write(&ftl, lba, block(lba, round, bs), false).map(|()| {
                    let durable = model.get(&lba).map_or(0, |v| v.1);
                    model.insert(lba, (round, durable));
                }),
            };
            match outcome {
                Ok(()) => {}
                Err(IoError::DeviceGone) => break round,
                Err(e) => panic!("cut {cut}: unexpected error {e}"),
            }
        };
        assert_eq!(
            flush(&ftl),
            Err(IoError::DeviceGone),
            "cut {cut}: after the loss"
        );
        let mut dev = ftl.into_backend().expect("backend after a cut");
        dev.power_on().expect("power on");
        let mut again = Driver::mount(dev, FtlConfig::default()).expect("mount after cut");
        for (&lba, &(newest, durable)) in &model {
            let data = again.read(lba, 1).expect("read");
            if durable == 0 {
                continue; // never made durable: anything acknowledged before may show
            }
            let v = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
            // The write that met the cut was not acknowledged: it may or
            // may not have landed.
            let in_doubt = v == lost;
            assert!(
                ((durable..=newest).contains(&v) || in_doubt) && data == block(lba, v, bs),
                "cut {cut} (lost at round {lost}): lba {lba} holds v{v}, durable v{durable}, newest v{newest}"
            );
        }
    }
}

#[test]
fn gc_moves_a_victim_in_steps_between_requests() {
    // Zones of 1024 blocks, far more than a paced step moves, and the
    // volume two thirds of the default size, as `zftl serve --memory-mib`
    // formats it: victims hold about half their blocks live.
    let cfg = SimConfig {
        blocks_per_lun: 24,
        pages_per_block: 256,
        zone_width_luns: 4,
        max_append_blocks: 128,
        max_transfer_blocks: 256,
        ..SimConfig::small_for_tests()
    };
    let full = format(SimDevice::create_memory(cfg.clone()).expect("sim")).logical_blocks();
    let options = FormatOptions {
        logical_blocks: Some(full * 2 / 3),
        ..FormatOptions::default()
    };
    let dev = SimDevice::create_memory(cfg).expect("sim");
    let ftl =
        InlineHandle::new(Driver::format(dev, &options, FtlConfig::default()).expect("format"));
    let (bs, n) = (ftl.block_size(), ftl.logical_blocks());
    for lba in 0..n {
        write(&ftl, lba, block(lba, 0, bs), false).unwrap();
    }
    let mut versions = vec![0u32; n as usize];
    let before = ftl.stats().unwrap();
    let (mut steps, mut rng) = (0u64, Rng::new(16));
    for version in 1..=(3 * n) as u32 {
        let lba = rng.below(n);
        let moved_before = ftl.stats().unwrap().gc_copy_blocks;
        write(&ftl, lba, block(lba, version, bs), false).unwrap();
        versions[lba as usize] = version;
        steps += u64::from(ftl.stats().unwrap().gc_copy_blocks > moved_before);
    }
    let after = ftl.stats().unwrap();
    let (jobs, moved) = (
        after.erases - before.erases,
        after.gc_copy_blocks - before.gc_copy_blocks,
    );
    assert!(
        jobs >= 10 && moved >= 100 * 32,
        "jobs {jobs}, moved {moved}"
    );
    // Unpaced, a collection runs inside the one or two requests that find
    // it due; paced, in steps between many.
    assert!(
        steps >= 4 * jobs,
        "{moved} blocks of {jobs} collections moved in {steps} requests"
    );
    flush(&ftl).unwrap();
    for (lba, &version) in versions.iter().enumerate() {
        let lba = lba as u64;
        assert_eq!(
            read(&ftl, lba, 1).unwrap(),
            block(lba, version, bs),
            "lba {lba}"
        );
    }
}

/// A range operation over a large range, started and polled: it is applied
/// in steps, and requests made with `call` in between (outside its ranges)
/// are answered before it ends (they move it on too).
#[test]
fn a_large_range_operation_lets_other_requests_through() {
    // 1 GiB of media; 2^21 blocks of logical space.
    let dev = SimDevice::create_memory(SimConfig {
        blocks_per_lun: 64,
        pages_per_block: 1024,
        max_append_blocks: 64,
        max_transfer_blocks: 64,
        ..SimConfig::small_for_tests()
    })
    .expect("sim");
    let opts = FormatOptions {
        logical_blocks: Some(1 << 21),
        ..FormatOptions::default()
    };
    let driver = Driver::format(dev, &opts, FtlConfig::default()).expect("format");
    let ftl = InlineHandle::new(driver);
    let bs = ftl.block_size();
    // 160 Ki mapped blocks to clone: several steps of the core's budget.
    let mapped = 160u64 << 10;
    for lba in (0..mapped).step_by(256) {
        let data: Vec<u8> = (lba..lba + 256).flat_map(|l| block(l, 1, bs)).collect();
        write(&ftl, lba, data, false).unwrap();
    }
    let (src, dst, n) = (0u64, 1u64 << 19, 1u64 << 19);
    let other = 1u64 << 20; // outside both ranges
    let ticket = ftl
        .start(zftl::core::Request::Range {
            ops: zftl::core::range::clones(&[(src, dst, n)]),
        })
        .unwrap();
    let mut answered_while_running = 0;
    let result = loop {
        if let Some(result) = ftl.poll(ticket) {
            break result;
        }
        write(&ftl, other, block(other, 2, bs), false).unwrap();
        assert_eq!(read(&ftl, other, 1).unwrap(), block(other, 2, bs));
        answered_while_running += 1;
    };
    result.unwrap();
    assert!(
        answered_while_running > 0,
        "the clone finished within one poll: nothing was let through"
    );
    for lba in [0, 1, 5000, mapped - 1] {
        assert_eq!(read(&ftl, dst + lba, 1).unwrap(), block(lba, 1, bs));
    }
    assert_eq!(read(&ftl, dst + mapped, 1).unwrap(), vec![0; bs]);
    assert_eq!(
        ftl.poll(ticket),
        Some(Err(IoError::DeviceGone)),
        "a ticket is answered once"
    );
}

/// A forgotten ticket's request still completes; its slot is freed and
/// its reply dropped, so forgotten tickets never fill the table. The
/// table's bound answers `Busy`.
#[test]
fn forgotten_tickets_free_their_slots() {
    let ftl = format(device());
    let bs = ftl.block_size();
    let max = zftl::handle::MAX_TICKETS as u64;
    write(&ftl, 0, block(0, 1, bs), false).unwrap();
    let clone_to = |dst: u64| {
        ftl.start(zftl::core::Request::Range {
            ops: zftl::core::range::clones(&[(0, dst, 1)]),
        })
    };
    let mut dst = 100;
    for _round in 0..3 {
        for _ in 0..max - 1 {
            let ticket = clone_to(dst).unwrap();
            ftl.forget(ticket);
            dst += 1;
        }
        // Operations run in order: once the last is answered, the
        // forgotten ones before it were applied.
        let last = clone_to(dst).unwrap();
        dst += 1;
        assert_eq!(clone_to(dst), Err(IoError::Busy), "the table is full");
        while ftl.poll(last).is_none() {}
        for lba in dst - max..dst {
            assert_eq!(read(&ftl, lba, 1).unwrap(), block(0, 1, bs), "lba {lba}");
        }
    }
    assert_eq!(
        ftl.poll(0),
        Some(Err(IoError::DeviceGone)),
        "an unknown ticket"
    );
}
