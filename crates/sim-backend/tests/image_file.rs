//! Image files: reopen identical, and every kind of damage is a typed error.

mod common;

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;

use common::*;
use proptest::prelude::*;
use zftl_core::{Backend, BackendExt, Command, ZoneState};
use zftl_sim::image::{ImageLayout, HEADER_BYTES};
use zftl_sim::{RuntimeOptions, SimConfig, SimDevice, SimError};

fn make_image(path: &Path) -> SimDevice {
    let mut cfg = SimConfig::small_for_tests();
    cfg.zone_size_blocks = Some(128);
    let mut d = SimDevice::create_file(path, cfg).expect("create");
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 10, 1), oob(&g, 0, 0, 10))
        .expect("write");
    d.write_blocks(1, 0, blocks(&g, 1, 0, 3, 2), vec![])
        .expect("write");
    d.execute(Command::Close { zone: 1 }).expect("close");
    for _ in 0..3 {
        d.reset_zone(2).ok();
        d.write_blocks(2, 0, blocks(&g, 2, 0, 5, 3), vec![])
            .expect("write");
    }
    d.finish_zone(3).expect("finish");
    d.execute(Command::Open { zone: 4 }).expect("open");
    d.sync().expect("sync");
    d
}

fn snapshot(d: &mut SimDevice) -> Vec<(ZoneState, u64, Vec<u8>, Vec<u8>)> {
    let g = d.geometry().clone();
    (0..g.zone_count)
        .map(|z| {
            let info = d.zone_info(z).expect("info");
            let (data, o) = d.read_blocks(z, 0, 16).expect("read");
            (info.state, info.write_pointer_blocks, data, o)
        })
        .collect()
}

#[test]
fn an_image_reopens_with_identical_contents_states_and_erase_counts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let mut d = make_image(&path);
    let before = snapshot(&mut d);
    let counts = d.erase_counts();
    let cfg = d.config().clone();
    drop(d);
    let mut d = SimDevice::open_file(&path, RuntimeOptions::default()).expect("open");
    let after = snapshot(&mut d);
    assert_eq!(d.erase_counts(), counts);
    assert_eq!(d.zone_erase_count(2), 2);
    assert_eq!(d.geometry(), &cfg.geometry().expect("geometry"));
    for (z, (b, a)) in before.iter().zip(&after).enumerate() {
        let expected_state = match b.0 {
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen if b.1 == 0 => ZoneState::Empty,
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen => ZoneState::Closed,
            s => s,
        };
        assert_eq!((a.0, a.1), (expected_state, b.1), "zone {z}");
        assert_eq!((&a.2, &a.3), (&b.2, &b.3), "zone {z} data/oob");
    }
    assert_eq!(after[0].0, ZoneState::Closed);
    assert_eq!(after[3].0, ZoneState::Full);
    // The device keeps working after reopen.
    let g = d.geometry().clone();
    d.write_blocks(0, 10, blocks(&g, 0, 10, 1, 1), vec![])
        .expect("continue writing");
    assert!(matches!(
        SimDevice::create_file(&path, SimConfig::small_for_tests()),
        Err(SimError::ImageExists { .. })
    ));
}

#[test]
fn open_file_expecting_checks_the_geometry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let cfg = make_image(&path).config().clone();
    SimDevice::open_file_expecting(&path, &cfg).expect("same geometry");
    let mut other = cfg.clone();
    other.blocks_per_lun = 32;
    match SimDevice::open_file_expecting(&path, &other) {
        Err(SimError::GeometryMismatch {
            field: "blocks_per_lun",
            image: 16,
            expected: 32,
        }) => {}
        r => panic!("{:?}", r.map(|_| ())),
    }
    let mut runtime_only = cfg.clone();
    runtime_only.queue_depth = 7;
    let d =
        SimDevice::open_file_expecting(&path, &runtime_only).expect("run-time fields may differ");
    assert_eq!(d.geometry().queue_depth, 7);
}

fn open_err(path: &Path) -> SimError {
    match SimDevice::open_file(path, RuntimeOptions::default()) {
        Ok(_) => panic!("damaged image opened"),
        Err(e) => e,
    }
}

fn patch(path: &Path, offset: u64, bytes: &[u8]) {
    let f = OpenOptions::new().write(true).open(path).expect("open");
    f.write_all_at(bytes, offset).expect("patch");
}

#[test]
fn damaged_images_are_typed_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fresh = |name: &str| {
        let path = dir.path().join(name);
        drop(make_image(&path));
        path
    };
    let p = fresh("magic");
    patch(&p, 0, b"NOTANIMG");
    assert!(matches!(open_err(&p), SimError::BadMagic { .. }));

    let p = fresh("crc");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, 20).expect("read");
    f.write_all_at(&[b[0] ^ 0x10], 20).expect("flip");
    assert!(matches!(open_err(&p), SimError::HeaderChecksum { .. }));

    let p = fresh("version");
    patch(&p, 8, &2u32.to_le_bytes());
    assert!(matches!(
        open_err(&p),
        SimError::UnsupportedVersion {
            found: 2,
            supported: 1
        }
    ));

    let p = fresh("truncated");
    let len = std::fs::metadata(&p).expect("stat").len();
    OpenOptions::new()
        .write(true)
        .open(&p)
        .expect("open")
        .set_len(len - 1)
        .expect("truncate");
    assert!(
        matches!(open_err(&p), SimError::Truncated { actual_bytes, .. } if actual_bytes == len - 1)
    );

    let p = dir.path().join("empty");
    std::fs::write(&p, b"").expect("write");
    assert!(matches!(
        open_err(&p),
        SimError::Truncated {
            expected_bytes: HEADER_BYTES,
            actual_bytes: 0,
            ..
        }
    ));

    let p = dir.path().join("missing");
    assert!(matches!(open_err(&p), SimError::Io { op: "open", .. }));

    let layout = ImageLayout::for_config(&SimConfig {
        zone_size_blocks: Some(128),
        ..SimConfig::small_for_tests()
    });
    let p = fresh("zone-state");
    patch(&p, layout.zone_table_offset + 16 * 3 + 8, &[42]);
    assert!(matches!(
        open_err(&p),
        SimError::CorruptTable {
            what: "zone entry",
            index: 3
        }
    ));

    let p = fresh("zone-wp");
    patch(
        &p,
        layout.zone_table_offset + 16 * 5,
        &1000u64.to_le_bytes(),
    );
    assert!(matches!(
        open_err(&p),
        SimError::CorruptTable {
            what: "zone write pointer",
            index: 5
        }
    ));

    let p = fresh("erase-flags");
    patch(&p, layout.erase_table_offset + 8 * 9 + 4, &[0x80]);
    assert!(matches!(
        open_err(&p),
        SimError::CorruptTable {
            what: "erase-block entry",
            index: 9
        }
    ));

    let p = fresh("page-state");
    patch(&p, layout.page_state_offset + 77, &[9]);
    assert!(matches!(
        open_err(&p),
        SimError::CorruptTable {
            what: "page state",
            index: 77
        }
    ));
}

#[test]
fn uncommitted_pages_above_the_write_pointer_are_erased_on_open() {
    // A process killed after programming pages but before the zone entry
    // moved the write pointer: the pages must not resurface.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kill.img");
    let cfg = SimConfig {
        zone_size_blocks: Some(128),
        ..SimConfig::small_for_tests()
    };
    let mut d = make_image(&path);
    let g = d.geometry().clone();
    d.write_blocks(6, 0, blocks(&g, 6, 0, 4, 0), vec![])
        .expect("write");
    drop(d);
    let layout = ImageLayout::for_config(&cfg);
    // Roll zone 6's entry back to Empty, as if the commit never happened.
    patch(&path, layout.zone_table_offset + 16 * 6, &[0u8; 16]);
    let mut d = SimDevice::open_file(&path, RuntimeOptions::default()).expect("open");
    let info = d.zone_info(6).expect("info");
    assert_eq!(
        (info.state, info.write_pointer_blocks),
        (ZoneState::Empty, 0)
    );
    assert!(d
        .read_blocks(6, 0, 4)
        .expect("read")
        .0
        .iter()
        .all(|&b| b == 0xFF));
    d.write_blocks(6, 0, blocks(&g, 6, 0, 4, 5), vec![])
        .expect("rewrite without panic");
}

fn valid_header() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("h.img");
    drop(SimDevice::create_file(&path, SimConfig::small_for_tests()).expect("create"));
    std::fs::read(&path).expect("read")[..HEADER_BYTES as usize].to_vec()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes_never_open(bytes in proptest::collection::vec(any::<u8>(), 0..6000)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("junk.img");
        std::fs::write(&path, &bytes).expect("write");
        prop_assert!(SimDevice::open_file(&path, RuntimeOptions::default()).is_err());
    }

    #[test]
    fn corrupted_headers_are_typed_errors(at in 0usize..4096, xor in 1u8..=255) {
        let mut header = valid_header();
        header[at] ^= xor;
        let r = zftl_sim::image::decode_header(&header, Path::new("h"));
        prop_assert!(r.is_err(), "a corrupted header at byte {} decoded", at);
    }
}

#[test]
fn a_header_with_valid_crc_but_impossible_values_is_rejected() {
    let mut header = valid_header();
    header[16..20].copy_from_slice(&0u32.to_le_bytes()); // channels = 0
    let crc = crc32c_of(&header[..4092]);
    header[4092..].copy_from_slice(&crc.to_le_bytes());
    assert!(matches!(
        zftl_sim::image::decode_header(&header, Path::new("h")),
        Err(SimError::InvalidConfig { .. })
    ));
}

/// CRC32C (Castagnoli), bitwise, so the test does not share the crate's code.
fn crc32c_of(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// A lock that goes away soon (as one kept by a child forked from another
/// thread does when the child execs) is waited out, not reported.
#[test]
fn an_open_waits_out_a_lock_released_soon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    drop(make_image(&path));
    let other = std::fs::File::open(&path).expect("second description");
    other.lock().expect("hold the lock");
    let release = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(other);
    });
    let dev = SimDevice::open_file(&path, RuntimeOptions::default());
    release.join().unwrap();
    assert!(dev.is_ok(), "{:?}", dev.map(|_| ()));
}

#[test]
fn an_image_opens_once_at_a_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let first = make_image(&path);
    match SimDevice::open_file(&path, RuntimeOptions::default()) {
        Err(SimError::ImageInUse { path: p }) => assert_eq!(p, path),
        r => panic!(
            "a second open while the first holds the image: {:?}",
            r.map(|_| ())
        ),
    }
    drop(first);
    let again = SimDevice::open_file(&path, RuntimeOptions::default()).expect("reopen after drop");
    assert!(matches!(
        SimDevice::open_file_expecting(&path, again.config()),
        Err(SimError::ImageInUse { .. })
    ));
}
