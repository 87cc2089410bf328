//! Old images stay readable (docs/format.md §9): images frozen by the
//! builds that wrote checkpoint versions 1 and 2, one per tag mode, mount,
//! read back what was written to them, take new writes, and mount again in
//! the current format.
//!
//! Each image (`tests/images/v{1,2}-{oob,inband}.img.gz`) was made by
//! [`make_frozen_images`] on a small simulated device: a clean shutdown
//! after a first pass of writes and trims, then a second pass of writes
//! and a trim, flushed but not followed by a checkpoint, so mount rolls
//! that version's notes (or tags) forward too. Version-2 images also hold
//! shared blocks and an attribute in their checkpoint (a clone and an
//! immutable range in the first pass) and a move in the log (the second).
//! `cargo test --release --test format_upgrade make_frozen_images -- --ignored`
//! writes the images of [`FROZEN_NOW`] again with the build at hand (so only
//! on a build that still writes that version).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use zftl::core::range::Attribute;
use zftl::core::{Driver, FormatOptions, FtlConfig, IoError, TagPlacement};
use zftl::sim::{RuntimeOptions, SimConfig, SimDevice};

const BLOCKS_WRITTEN: u64 = 300;

/// The checkpoint version [`make_frozen_images`] freezes: the one this
/// build writes.
const FROZEN_NOW: u32 = 2;

/// Version 2 images: `CLONE_SRC..+CLONE_BLOCKS` cloned to `CLONE_DST` in
/// the first pass, the clone's last `IMMUTABLE_BLOCKS` made immutable;
/// `MOVE_SRC..+MOVE_BLOCKS` moved to `MOVE_DST` at the end of the second.
const CLONE_SRC: u64 = 0;
const CLONE_DST: u64 = 400;
const CLONE_BLOCKS: u64 = 60;
const IMMUTABLE_BLOCKS: u64 = 10;
const MOVE_SRC: u64 = 250;
const MOVE_DST: u64 = 500;
const MOVE_BLOCKS: u64 = 20;
/// Blocks read back: every range above.
const BLOCKS_CHECKED: u64 = MOVE_DST + MOVE_BLOCKS + 10;

fn sim_config(oob: bool) -> SimConfig {
    SimConfig {
        oob_size_bytes: if oob { 64 } else { 0 },
        ..SimConfig::small_for_tests()
    }
}

fn image_name(version: u32, oob: bool) -> String {
    let mode = if oob { "oob" } else { "inband" };
    format!("v{version}-{mode}.img.gz")
}

fn images_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images")
}

/// The contents block `lba` holds after `pass` (1 or 2) of the writes to
/// an image of `version`: a byte pattern that compresses well, or `None`
/// for zeros.
fn expected(version: u32, lba: u64, pass: u32) -> Option<Vec<u8>> {
    if version >= 2 {
        if (CLONE_DST..CLONE_DST + CLONE_BLOCKS).contains(&lba) {
            return expected(1, lba - CLONE_DST + CLONE_SRC, 1);
        }
        if pass == 2 && (MOVE_SRC..MOVE_SRC + MOVE_BLOCKS).contains(&lba) {
            return None;
        }
        if pass == 2 && (MOVE_DST..MOVE_DST + MOVE_BLOCKS).contains(&lba) {
            return expected(1, lba - MOVE_DST + MOVE_SRC, 2);
        }
    }
    if lba >= BLOCKS_WRITTEN {
        return None;
    }
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

fn check_contents(ftl: &mut Driver<SimDevice>, version: u32, pass: u32, what: &str) {
    for lba in 0..BLOCKS_CHECKED {
        let got = ftl
            .read(lba, 1)
            .unwrap_or_else(|e| panic!("{what}: read {lba}: {e}"));
        let want = expected(version, lba, pass).unwrap_or_else(|| vec![0; 4096]);
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
        if FROZEN_NOW >= 2 {
            ftl.clone_ranges(&[(CLONE_SRC, CLONE_DST, CLONE_BLOCKS)])
                .unwrap();
            let immutable = CLONE_DST + CLONE_BLOCKS - IMMUTABLE_BLOCKS;
            ftl.set_attribute(&[(immutable, IMMUTABLE_BLOCKS)], Attribute::Immutable)
                .unwrap();
        }
        let dev = ftl.shutdown().unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        for lba in (0..BLOCKS_WRITTEN).filter(|l| l.is_multiple_of(3)) {
            ftl.write(lba, &block(lba, 2)).unwrap();
        }
        ftl.trim(200, 10).unwrap();
        if FROZEN_NOW >= 2 {
            ftl.move_ranges(&[(MOVE_SRC, MOVE_DST, MOVE_BLOCKS)])
                .unwrap();
        }
        ftl.flush().unwrap();
        check_contents(&mut ftl, FROZEN_NOW, 2, "before freezing");
        drop(ftl.into_backend()); // no checkpoint: the notes stay after it
        let raw = std::fs::read(&path).unwrap();
        let name = image_name(FROZEN_NOW, oob);
        let out = std::fs::File::create(images_dir().join(name)).unwrap();
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::best());
        gz.write_all(&raw).unwrap();
        gz.finish().unwrap();
    }
}

fn unpack(version: u32, oob: bool, dir: &Path) -> PathBuf {
    let packed = std::fs::File::open(images_dir().join(image_name(version, oob))).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(packed)
        .read_to_end(&mut raw)
        .unwrap();
    let path = dir.join("image");
    std::fs::write(&path, raw).unwrap();
    path
}

/// Mounts the frozen images of `version`, reads them back, writes, and
/// remounts after a clean shutdown and after a crash.
fn mount_read_and_upgrade(version: u32) {
    for oob in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let path = unpack(version, oob, dir.path());
        let what = format!("{} image", image_name(version, oob));
        let dev = SimDevice::open_file_expecting(&path, &sim_config(oob)).unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default())
            .unwrap_or_else(|e| panic!("{what}: mount: {e}"));
        check_contents(&mut ftl, version, 2, &what);
        if version >= 2 {
            let immutable = CLONE_DST + CLONE_BLOCKS - 1;
            assert_eq!(
                ftl.write(immutable, &block(immutable, 3)),
                Err(IoError::Immutable { lba: immutable }),
                "{what}: the immutable range"
            );
        }
        // A snapshot of the upgraded volume (tags in band: what snapshots
        // need), new writes, then a clean cycle and a crash.
        let snapshot = (!oob).then(|| ftl.snapshot_create("upgraded").unwrap().id);
        let before = expected(version, 5, 2).unwrap_or_else(|| vec![0; 4096]);
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
        if let Some(id) = snapshot {
            assert!(
                ftl.read_snapshot(id, 5, 1).unwrap() == before,
                "{what}: the snapshot keeps block 5"
            );
        }
        if version >= 2 {
            // The clone's blocks are still shared with their source.
            let dst = CLONE_DST + 7;
            assert_eq!(ftl.read(dst, 1).unwrap(), block(7, 1), "{what}: clone");
        }
        let mut dev = ftl.shutdown().unwrap();
        assert!(
            zftl::core::check::check(&mut dev).is_clean(),
            "{what}: check"
        );
    }
}

#[test]
fn version_1_images_mount_read_and_upgrade() {
    mount_read_and_upgrade(1);
}

#[test]
fn version_2_images_mount_read_and_upgrade() {
    mount_read_and_upgrade(2);
}
