//! Old images stay readable (docs/format.md §9): images frozen by the build
//! that wrote checkpoint version 1, one per tag mode, mount, read back what
//! was written to them, take new writes, and mount again in the current
//! format.
//!
//! Each image (`tests/images/v1-{oob,inband}.img.gz`) was made by
//! [`make_frozen_images`] on a small simulated device: a clean shutdown
//! after a first pass of writes and trims, then a second pass of writes
//! and a trim, flushed but not followed by a checkpoint, so mount rolls
//! version-1 notes (or tags) forward too.
//! `cargo test --release --test format_upgrade make_frozen_images -- --ignored`
//! writes them again with the build at hand (so only on a build that still
//! writes version 1 does it make version-1 images).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use zftl::core::{Driver, FormatOptions, FtlConfig, TagPlacement};
use zftl::sim::{RuntimeOptions, SimConfig, SimDevice};

const BLOCKS_WRITTEN: u64 = 300;

fn sim_config(oob: bool) -> SimConfig {
    SimConfig {
        oob_size_bytes: if oob { 64 } else { 0 },
        ..SimConfig::small_for_tests()
    }
}

fn image_name(oob: bool) -> &'static str {
    if oob {
        "v1-oob.img.gz"
    } else {
        "v1-inband.img.gz"
    }
}

fn images_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images")
}

/// The contents block `lba` holds after `pass` (1 or 2) of the writes: a
/// byte pattern that compresses well, or `None` for zeros.
fn expected(lba: u64, pass: u32) -> Option<Vec<u8>> {
    let written_in_2 = lba.is_multiple_of(3);
    let trimmed_in_1 = (100..120).contains(&lba);
    let trimmed_in_2 = (200..210).contains(&lba);
    let version = match pass {
        1 if trimmed_in_1 => return None,
        1 => 1,
        _ if trimmed_in_2 => return None,
        _ if written_in_2 => 2,
        _ if trimmed_in_1 => return None,
        _ => 1,
    };
    Some(block(lba, version))
}

fn block(lba: u64, version: u32) -> Vec<u8> {
    let mut b = vec![(lba as u8).wrapping_mul(7) ^ version as u8; 4096];
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b
}

fn check_contents(ftl: &mut Driver<SimDevice>, pass: u32, what: &str) {
    for lba in 0..BLOCKS_WRITTEN {
        let got = ftl
            .read(lba, 1)
            .unwrap_or_else(|e| panic!("{what}: read {lba}: {e}"));
        let want = expected(lba, pass).unwrap_or_else(|| vec![0; 4096]);
        assert!(got == want, "{what}: block {lba} differs after pass {pass}");
    }
}

#[test]
#[ignore = "writes tests/images/; run by hand with a build that writes the format to freeze"]
fn make_frozen_images() {
    for oob in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image");
        let dev = SimDevice::create_file(&path, sim_config(oob)).unwrap();
        let opts = FormatOptions {
            tag_placement: TagPlacement::Auto,
            seed: 7,
            ..FormatOptions::default()
        };
        let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).unwrap();
        for lba in 0..BLOCKS_WRITTEN {
            ftl.write(lba, &block(lba, 1)).unwrap();
        }
        ftl.trim(100, 20).unwrap();
        let dev = ftl.shutdown().unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        for lba in (0..BLOCKS_WRITTEN).filter(|l| l.is_multiple_of(3)) {
            ftl.write(lba, &block(lba, 2)).unwrap();
        }
        ftl.trim(200, 10).unwrap();
        ftl.flush().unwrap();
        check_contents(&mut ftl, 2, "before freezing");
        drop(ftl.into_backend()); // no checkpoint: the notes stay after it
        let raw = std::fs::read(&path).unwrap();
        let out = std::fs::File::create(images_dir().join(image_name(oob))).unwrap();
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::best());
        gz.write_all(&raw).unwrap();
        gz.finish().unwrap();
    }
}

fn unpack(oob: bool, dir: &Path) -> PathBuf {
    let packed = std::fs::File::open(images_dir().join(image_name(oob))).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(packed)
        .read_to_end(&mut raw)
        .unwrap();
    let path = dir.join("image");
    std::fs::write(&path, raw).unwrap();
    path
}

#[test]
fn version_1_images_mount_read_and_upgrade() {
    for oob in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = unpack(oob, dir.path());
        let what = format!("{} image", image_name(oob));
        let dev = SimDevice::open_file_expecting(&path, &sim_config(oob)).unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default())
            .unwrap_or_else(|e| panic!("{what}: mount: {e}"));
        check_contents(&mut ftl, 2, &what);
        // New writes on the upgraded volume, then a clean cycle and a crash.
        ftl.write(5, &block(5, 3)).unwrap();
        let dev = ftl.shutdown().unwrap();
        drop(dev);
        let dev = SimDevice::open_file(&path, RuntimeOptions::default()).unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        assert_eq!(
            ftl.read(5, 1).unwrap(),
            block(5, 3),
            "{what}: after remount"
        );
        ftl.write(6, &block(6, 3)).unwrap();
        ftl.flush().unwrap();
        let dev = ftl.into_backend();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        assert_eq!(
            ftl.read(6, 1).unwrap(),
            block(6, 3),
            "{what}: after a crash"
        );
        let mut dev = ftl.shutdown().unwrap();
        assert!(
            zftl::core::check::check(&mut dev).is_clean(),
            "{what}: check"
        );
    }
}
