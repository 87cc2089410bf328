//! The embedding handles (`zftl::handle`): concurrency through clones,
//! shutdown and remount, closed handles, typed errors, device loss.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use zftl::core::{Driver, FormatOptions, FtlConfig, IoError};
use zftl::handle::{AsyncHandle, Handle};
use zftl::sim::{Faults, PowerCut, SimConfig, SimDevice};

mod common;
use common::block;

/// Generous: a hang shows as a failure, not a stuck test run.
const TIMEOUT: Duration = Duration::from_secs(120);

fn device() -> SimDevice {
    SimDevice::create_memory(SimConfig::small_for_tests()).expect("sim")
}

fn format(dev: SimDevice) -> Handle<SimDevice> {
    Handle::format(dev, &FormatOptions::default(), FtlConfig::default()).expect("format")
}

fn blocks(lba: u64, count: u64, version: u32, bs: usize) -> Vec<u8> {
    (lba..lba + count)
        .flat_map(|l| block(l, version, bs))
        .collect()
}

/// Runs `f` on its own thread; fails the test if it takes longer than
/// `TIMEOUT` (a hang) and re-raises its panic.
fn within_timeout<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(TIMEOUT) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(worker.join().expect_err("no value, so it panicked"))
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("hung for {TIMEOUT:?}"),
    }
}

const THREADS: u64 = 8;
const PER_THREAD: u64 = 48;

#[test]
fn threads_write_disjoint_ranges_through_clones() {
    within_timeout(|| {
        let ftl = format(device());
        let bs = ftl.block_size();
        assert!(ftl.logical_blocks() >= THREADS * PER_THREAD);
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let ftl = ftl.clone();
                thread::spawn(move || {
                    let first = t * PER_THREAD;
                    // Version 1 in runs of 4 blocks, then version 2 block by
                    // block over half of it, so later writes must win.
                    for lba in (first..first + PER_THREAD).step_by(4) {
                        ftl.write(lba, &blocks(lba, 4, 1, bs)).expect("write v1");
                    }
                    for lba in first..first + PER_THREAD / 2 {
                        ftl.write(lba, &block(lba, 2, bs)).expect("write v2");
                    }
                    for lba in first..first + PER_THREAD {
                        let v = if lba < first + PER_THREAD / 2 { 2 } else { 1 };
                        assert_eq!(ftl.read(lba, 1).expect("read"), block(lba, v, bs));
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
        ftl.flush().expect("flush");
        for t in 0..THREADS {
            let first = t * PER_THREAD;
            let got = ftl.read(first, PER_THREAD as u32).expect("read back");
            let mut want = blocks(first, PER_THREAD / 2, 2, bs);
            want.extend(blocks(first + PER_THREAD / 2, PER_THREAD / 2, 1, bs));
            assert!(got == want, "range of thread {t} differs");
        }
        let stats = ftl.stats().expect("stats");
        assert_eq!(
            stats.host_write_blocks,
            THREADS * (PER_THREAD + PER_THREAD / 2)
        );
        ftl.shutdown().expect("shutdown");
    });
}

#[test]
fn async_tasks_write_disjoint_ranges() {
    let ftl = AsyncHandle::from(format(device()));
    let bs = ftl.block_size();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_time()
        .build()
        .expect("runtime");
    let dev = runtime.block_on(async move {
        tokio::time::timeout(TIMEOUT, async move {
            let tasks: Vec<_> = (0..THREADS * 2)
                .map(|t| {
                    let ftl = ftl.clone();
                    tokio::spawn(async move {
                        let per = PER_THREAD / 2;
                        let first = t * per;
                        for lba in first..first + per {
                            ftl.write(lba, &block(lba, 7, bs)).await.expect("write");
                        }
                        ftl.flush().await.expect("flush");
                        let got = ftl.read(first, per as u32).await.expect("read");
                        assert!(got == blocks(first, per, 7, bs), "task {t} reads back");
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("task");
            }
            let got = ftl
                .read(0, (THREADS * PER_THREAD) as u32)
                .await
                .expect("read all");
            assert!(got == blocks(0, THREADS * PER_THREAD, 7, bs));
            ftl.shutdown().await.expect("shutdown")
        })
        .await
        .expect("async run hung")
    });
    let mut again = Driver::mount(dev, FtlConfig::default()).expect("mount");
    assert_eq!(again.read(5, 1).expect("read"), block(5, 7, bs));
}

#[test]
fn shutdown_returns_a_backend_that_mounts_with_the_data() {
    within_timeout(|| {
        let ftl = format(device());
        let bs = ftl.block_size();
        ftl.write(0, &blocks(0, 16, 1, bs)).expect("write");
        ftl.flush().expect("flush");
        // Acknowledged but not flushed: shutdown must flush it.
        ftl.write(100, &blocks(100, 8, 3, bs)).expect("write");
        ftl.trim(4, 4).expect("trim");
        ftl.write_zeroes(8, 2).expect("zeroes");
        ftl.write_fua(200, &block(200, 9, bs)).expect("fua");
        let dev = ftl.shutdown().expect("shutdown");

        let mut again = Driver::mount(dev, FtlConfig::default()).expect("mount");
        let mut want = blocks(0, 16, 1, bs);
        want[4 * bs..10 * bs].fill(0);
        assert!(again.read(0, 16).expect("read") == want);
        assert!(again.read(100, 8).expect("read") == blocks(100, 8, 3, bs));
        assert_eq!(again.read(200, 1).expect("read"), block(200, 9, bs));

        // And through a handle again.
        let dev = again.shutdown().expect("driver shutdown");
        let ftl = Handle::mount(dev, FtlConfig::default()).expect("handle mount");
        assert!(ftl.read(100, 8).expect("read") == blocks(100, 8, 3, bs));
        ftl.shutdown().expect("shutdown");
    });
}

#[test]
fn requests_after_another_clone_shut_down_fail_with_an_error() {
    within_timeout(|| {
        let ftl = format(device());
        let bs = ftl.block_size();
        let other = ftl.clone();
        let other_async = ftl.to_async();
        assert!(!other.is_closed());
        ftl.write(0, &block(0, 1, bs)).expect("write");
        ftl.shutdown().expect("shutdown");

        assert!(other.is_closed());
        assert_eq!(other.read(0, 1), Err(IoError::DeviceGone));
        assert_eq!(other.write(0, &block(0, 2, bs)), Err(IoError::DeviceGone));
        assert_eq!(other.flush(), Err(IoError::DeviceGone));
        assert_eq!(other.trim(0, 1), Err(IoError::DeviceGone));
        assert!(matches!(other.stats(), Err(IoError::DeviceGone)));
        // Geometry is still known.
        assert_eq!(other.block_size(), bs);
        assert!(matches!(
            other.clone().into_backend(),
            Err(IoError::DeviceGone)
        ));
        assert!(matches!(other.shutdown(), Err(IoError::DeviceGone)));

        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            assert!(other_async.is_closed());
            assert_eq!(other_async.read(0, 1).await, Err(IoError::DeviceGone));
            assert_eq!(other_async.flush().await, Err(IoError::DeviceGone));
            assert!(matches!(
                other_async.shutdown().await,
                Err(IoError::DeviceGone)
            ));
        });
    });
}

#[test]
fn bad_input_comes_back_typed() {
    within_timeout(|| {
        let ftl = format(device());
        let bs = ftl.block_size();
        let n = ftl.logical_blocks();
        assert!(matches!(
            ftl.read(n, 1),
            Err(IoError::OutOfRange { lba, .. }) if lba == n
        ));
        assert!(matches!(
            ftl.write(n - 1, &blocks(n - 1, 2, 1, bs)),
            Err(IoError::OutOfRange { .. })
        ));
        assert!(matches!(ftl.trim(n, 1), Err(IoError::OutOfRange { .. })));
        assert_eq!(
            ftl.write(0, &vec![1; bs + 1]),
            Err(IoError::BufferSize {
                expected_bytes: 2 * bs,
                actual_bytes: bs + 1
            })
        );
        assert!(matches!(
            ftl.write_fua(0, &[]),
            Err(IoError::BufferSize { .. })
        ));
        // The handle still works after refusals.
        ftl.write(n - 1, &block(n - 1, 4, bs))
            .expect("write at the end");
        assert_eq!(ftl.read(n - 1, 1).expect("read"), block(n - 1, 4, bs));

        let async_ftl = ftl.to_async();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            assert!(matches!(
                async_ftl.read(n, 1).await,
                Err(IoError::OutOfRange { .. })
            ));
            assert!(matches!(
                async_ftl.write(0, &[0; 3]).await,
                Err(IoError::BufferSize { .. })
            ));
        });
        drop(async_ftl);
        ftl.shutdown().expect("shutdown");
    });
}

#[test]
fn a_tiny_queue_blocks_callers_without_losing_requests() {
    within_timeout(|| {
        let dev = device();
        let driver =
            Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).expect("format");
        let ftl = Handle::spawn_with_capacity(driver, 1);
        let bs = ftl.block_size();
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let ftl = ftl.clone();
                thread::spawn(move || {
                    for lba in t * 32..t * 32 + 32 {
                        ftl.write(lba, &block(lba, 5, bs)).expect("write");
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
        assert!(ftl.read(0, 128).expect("read") == blocks(0, 128, 5, bs));
        ftl.shutdown().expect("shutdown");
    });
}

#[test]
fn core_busy_requests_are_retried_not_lost() {
    // Two host requests at most in the core: with eight writers and FUA
    // writes (which wait in the core) the core answers Busy often.
    within_timeout(|| {
        let config = FtlConfig {
            max_host_requests: 2,
            ..FtlConfig::default()
        };
        let driver = Driver::format(device(), &FormatOptions::default(), config).expect("format");
        // `spawn` does not know the limit, `mount` does: try both paths.
        {
            let ftl = Handle::spawn(driver);
            let bs = ftl.block_size();
            let workers: Vec<_> = (0..8u64)
                .map(|t| {
                    let ftl = ftl.clone();
                    thread::spawn(move || {
                        for lba in t * 8..t * 8 + 8 {
                            ftl.write_fua(lba, &block(lba, 6, bs)).expect("write");
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().expect("worker");
            }
            assert!(ftl.read(0, 64).expect("read") == blocks(0, 64, 6, bs));
            let dev = ftl.shutdown().expect("shutdown");
            let ftl = Handle::mount(
                dev,
                FtlConfig {
                    max_host_requests: 2,
                    ..FtlConfig::default()
                },
            )
            .expect("mount");
            let workers: Vec<_> = (0..8u64)
                .map(|t| {
                    let ftl = ftl.clone();
                    thread::spawn(move || {
                        for lba in t * 8..t * 8 + 8 {
                            ftl.write_fua(lba, &block(lba, 8, bs)).expect("write");
                        }
                    })
                })
                .collect();
            for w in workers {
                w.join().expect("worker");
            }
            assert!(ftl.read(0, 64).expect("read") == blocks(0, 64, 8, bs));
            ftl.shutdown().expect("shutdown");
        }
    });
}

#[test]
fn dropping_the_last_handle_flushes() {
    within_timeout(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("dev.img");
        let cfg = SimConfig::small_for_tests();
        let dev = SimDevice::create_file(&path, cfg.clone()).expect("create");
        let ftl = format(dev);
        let bs = ftl.block_size();
        let clone = ftl.clone();
        ftl.write(10, &blocks(10, 6, 2, bs)).expect("write");
        drop(ftl);
        clone.write(30, &block(30, 3, bs)).expect("write");
        drop(clone); // last one: flush, no checkpoint, backend dropped

        let dev = SimDevice::open_file_expecting(&path, &cfg).expect("reopen");
        let mut again = Driver::mount(dev, FtlConfig::default()).expect("mount");
        assert!(again.read(10, 6).expect("read") == blocks(10, 6, 2, bs));
        assert_eq!(again.read(30, 1).expect("read"), block(30, 3, bs));
    });
}

#[test]
fn into_backend_is_a_crash_that_keeps_flushed_data() {
    within_timeout(|| {
        let ftl = format(device());
        let bs = ftl.block_size();
        ftl.write(0, &blocks(0, 8, 1, bs)).expect("write");
        ftl.flush().expect("flush");
        let dev = ftl.into_backend().expect("into_backend");
        let mut again = Driver::mount(dev, FtlConfig::default()).expect("mount");
        assert!(again.read(0, 8).expect("read") == blocks(0, 8, 1, bs));
    });
}

/// Formats, then arms a power cut after 50 device submits and hands the
/// driver to a handle.
fn armed_handle() -> Handle<SimDevice> {
    let mut driver =
        Driver::format(device(), &FormatOptions::default(), FtlConfig::default()).expect("format");
    driver.backend_mut().set_faults(Faults {
        power_cut: PowerCut::AfterSubmits(50),
        ..Faults::default()
    });
    Handle::spawn(driver)
}

#[test]
fn power_cut_fails_requests_with_device_gone_and_never_hangs() {
    within_timeout(|| {
        let ftl = armed_handle();
        let bs = ftl.block_size();
        // Writers keep going until their handle says the device is gone.
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let ftl = ftl.clone();
                thread::spawn(move || {
                    for round in 1..=10_000u32 {
                        let lba = t * 16 + u64::from(round % 16);
                        match ftl.write_fua(lba, &block(lba, round, bs)) {
                            Ok(()) => {}
                            Err(IoError::DeviceGone) => return,
                            Err(e) => panic!("unexpected error {e}"),
                        }
                    }
                    panic!("10000 FUA writes without reaching the power cut");
                })
            })
            .collect();
        for w in workers {
            w.join().expect("worker");
        }
        // Everything fails from now on, typed.
        assert_eq!(ftl.write(0, &block(0, 1, bs)), Err(IoError::DeviceGone));
        assert_eq!(ftl.flush(), Err(IoError::DeviceGone));
        assert_eq!(ftl.read(0, 4), Err(IoError::DeviceGone));
        assert!(!ftl.is_closed(), "a lost device does not close the handle");
        assert!(ftl.stats().is_ok(), "stats still answer");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime");
        let async_ftl = ftl.to_async();
        runtime.block_on(async {
            assert_eq!(async_ftl.flush().await, Err(IoError::DeviceGone));
        });
        drop(async_ftl);
        assert!(matches!(ftl.clone().shutdown(), Err(IoError::DeviceGone)));
        assert!(ftl.is_closed());
        assert!(matches!(ftl.into_backend(), Err(IoError::DeviceGone)));
    });
}

#[test]
fn power_cut_then_into_backend_remounts_with_durable_writes() {
    within_timeout(|| {
        let ftl = armed_handle();
        let bs = ftl.block_size();
        let mut durable = std::collections::HashMap::new();
        let mut round = 0u32;
        loop {
            round += 1;
            let lba = u64::from(round % 40);
            match ftl.write_fua(lba, &block(lba, round, bs)) {
                Ok(()) => {
                    durable.insert(lba, round);
                }
                Err(IoError::DeviceGone) => break,
                Err(e) => panic!("unexpected error {e}"),
            }
            assert!(round < 10_000, "no power cut");
        }
        let mut dev = ftl.into_backend().expect("backend after a cut");
        assert!(!dev.is_powered());
        dev.power_on().expect("power on");
        let mut again = Driver::mount(dev, FtlConfig::default()).expect("mount after cut");
        for (&lba, &v) in &durable {
            assert_eq!(
                again.read(lba, 1).expect("read"),
                block(lba, v, bs),
                "FUA-acknowledged block {lba} v{v}"
            );
        }
    });
}

#[test]
fn power_cut_under_async_load_never_hangs() {
    let ftl = armed_handle().to_async();
    let bs = ftl.block_size();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        tokio::time::timeout(TIMEOUT, async move {
            let tasks: Vec<_> = (0..8u64)
                .map(|t| {
                    let ftl = ftl.clone();
                    tokio::spawn(async move {
                        for round in 1..=10_000u32 {
                            let lba = t * 8 + u64::from(round % 8);
                            let r = if round % 5 == 0 {
                                ftl.flush().await
                            } else {
                                ftl.write(lba, &block(lba, round, bs)).await
                            };
                            match r {
                                Ok(()) => {}
                                Err(IoError::DeviceGone) => return,
                                Err(e) => panic!("unexpected error {e}"),
                            }
                        }
                        panic!("no power cut");
                    })
                })
                .collect();
            for t in tasks {
                t.await.expect("task");
            }
            assert_eq!(ftl.read(0, 1).await, Err(IoError::DeviceGone));
            let dev = ftl.into_backend().await.expect("backend");
            assert!(!dev.is_powered());
        })
        .await
        .expect("hung after a power cut");
    });
}

#[test]
fn handles_are_send_sync_clone() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Handle<SimDevice>>();
    check::<AsyncHandle<SimDevice>>();
}

/// Forks through a blocking and an async handle: created from a snapshot,
/// listed by both, written at their offset, deleted; refusals typed.
#[test]
fn forks_through_blocking_and_async_handles() {
    within_timeout(|| {
        let ftl = format(device());
        let bs = ftl.block_size();
        ftl.write(0, &blocks(0, 4, 1, bs)).unwrap();
        ftl.snapshot_create("s").unwrap();
        ftl.write(0, &blocks(0, 1, 2, bs)).unwrap();
        let fork = ftl.fork_create("s", "blocking").unwrap();
        assert_eq!(fork.block_count, ftl.logical_blocks());
        assert_eq!(ftl.read(fork.lba_offset, 4).unwrap(), blocks(0, 4, 1, bs));
        ftl.write(fork.lba_offset + 3, &blocks(3, 1, 3, bs))
            .unwrap();
        assert_eq!(ftl.read(3, 1).unwrap(), blocks(3, 1, 1, bs));
        assert!(matches!(
            ftl.fork_create("nope", "x"),
            Err(IoError::Snapshot(_))
        ));
        assert!(matches!(
            ftl.fork_create("s", "blocking"),
            Err(IoError::Fork(_))
        ));

        let async_ftl = ftl.to_async();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        runtime.block_on(async {
            let other = async_ftl.fork_create("s", "async").await.unwrap();
            assert_ne!(other.lba_offset, fork.lba_offset);
            let names: Vec<String> = async_ftl
                .forks()
                .await
                .unwrap()
                .into_iter()
                .map(|f| f.name)
                .collect();
            assert_eq!(names.len(), 2);
            assert!(names.contains(&"async".to_string()));
            let data = async_ftl.read(other.lba_offset + 3, 1).await.unwrap();
            assert_eq!(data, blocks(3, 1, 1, bs));
            async_ftl.fork_delete("async").await.unwrap();
            assert!(matches!(
                async_ftl.fork_delete("async").await,
                Err(IoError::Fork(_))
            ));
        });
        let left: Vec<String> = ftl.forks().unwrap().into_iter().map(|f| f.name).collect();
        assert_eq!(left, ["blocking"]);
        ftl.fork_delete("blocking").unwrap();
        assert!(ftl.forks().unwrap().is_empty());
        ftl.snapshot_delete("s").unwrap();
        ftl.shutdown().unwrap();
    });
}
