//! Old images stay readable (docs/format.md §9): images frozen by the
//! builds that wrote checkpoint versions 1, 2 and 3, one per tag mode,
//! mount, read back what was written to them, take new writes, and mount
//! again in the current format.
//!
//! Each image (`tests/images/v{1,2,3}-{oob,inband}.img.gz`) was made by
//! [`make_frozen_images`] on a small simulated device: a clean shutdown
//! after a first pass of writes and trims, then a second pass of writes
//! and a trim, flushed but not followed by a checkpoint, so mount rolls
//! that version's notes (or tags) forward too. Version-2 images also hold
//! shared blocks and an attribute in their checkpoint (a clone and an
//! immutable range in the first pass) and a move in the log (the second).
//! Version-3 images add, in the first pass (checkpoint): two
//! protection-window points, a snapshot made and deleted, a live one, one
//! deleted only in the second pass, and a fork of the live one with writes
//! of its own; in the second (log): more fork writes and a fork trim, that
//! delete and a new snapshot. The OOB image also holds nameless blocks in
//! both passes (written, freed, overwritten, then a commit, with the
//! image's client index in a logical block), and blocks written after the
//! second commit, which every mount hands over
//! (`NamelessEvent::Unrecorded`) until the client commits. The in-band
//! image holds no nameless blocks (the build that froze it kept md in OOB
//! only); the test writes, reads and frees one there after each mount.
//! `cargo test --release --test format_upgrade make_frozen_images -- --ignored`
//! writes the images of [`FROZEN_NOW`] again with the build at hand (so only
//! on a build that still writes that version).
//!
//! `v3-oob-migrated.img.gz`, made by [`make_frozen_migrated_image`] with
//! the first build that migrates nameless blocks, is a crash image of a
//! volume in the middle of migrations: remap entries in its last
//! checkpoint and in the log after it (some acknowledged there, some not,
//! some dropped by a free of the moved block), and blocks written after
//! the last commit, some of them moved. Its client's own record, a
//! [`MigrationIndex`] in logical blocks, says what the test must find.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use zftl::core::range::Attribute;
use zftl::core::{
    Driver, FormatOptions, FtlConfig, IoError, NamelessAddr, NamelessError, NamelessEvent,
    ProtectWindow, TagPlacement,
};
use zftl::sim::{RuntimeOptions, SimConfig, SimDevice};

const BLOCKS_WRITTEN: u64 = 300;

/// The checkpoint version [`make_frozen_images`] freezes: the one this
/// build writes.
const FROZEN_NOW: u32 = 3;

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

/// Version 3 images: snapshot `KEPT` of the end of the first pass, with
/// the fork `FORK` of it writing every fourth of its first `FORK_SPAN`
/// blocks in the first pass and every sixth in the second, where it also
/// trims `FORK_TRIM..+FORK_TRIM_BLOCKS`; `DROPPED` made and deleted in the
/// first pass, `GONE` made in the first and deleted in the second, `LATE`
/// made at the end of the second; two protection-window points: the first
/// taken at the first turn after the first write (block 0 only), the
/// second when the clock moves on after the first pass's writes and trim.
const KEPT: &str = "kept";
const DROPPED: &str = "dropped";
const GONE: &str = "gone";
const LATE: &str = "late";
const FORK: &str = "branch";
const FORK_SPAN: u64 = 60;
const FORK_TRIM: u64 = 40;
const FORK_TRIM_BLOCKS: u32 = 4;
/// Data versions of the fork's writes in each pass.
const FORK_VERSION: [u32; 2] = [11, 12];
/// The wall clock of the first pass (ns; 2026-11-27T10:00:00Z) and how
/// far it moves on, once, to take the window's point.
const T0_NS: u64 = 1_795_773_600_000_000_000;
const POINT_STEP_NS: u64 = 2_000_000_000;
/// The window's length: a point at most every second (its ÷ 1024).
const WINDOW_SECS: u64 = 1024;

/// Nameless state (v3 OOB image): the image's client keeps its index of
/// nameless blocks in logical block `NAMELESS_INDEX_LBA` (outside the
/// blocks checked), rewritten before each commit. Block data is
/// [`nameless_block`], md [`nameless_md`].
const NAMELESS_INDEX_LBA: u64 = 600;
/// First pass: keys 0..12 written; 0 and 1 freed, 2 and 3 overwritten;
/// a commit.
const NAMELESS_KEYS_1: std::ops::Range<u64> = 0..12;
/// Second pass: keys 20..26 written; 4 and 20 freed, 5 and 21 overwritten;
/// a commit; then keys 30..35 written, which the mount hands over.
const NAMELESS_KEYS_2: std::ops::Range<u64> = 20..26;
const NAMELESS_UNRECORDED: std::ops::Range<u64> = 30..35;
/// A key the upgrade test writes after the hand-over.
const NAMELESS_KEY_NEW: u64 = 40;

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

/// What block `b` of the fork holds after `pass`: the snapshot it was
/// made of, then its own writes and trim.
fn fork_expected(b: u64, pass: u32) -> Option<Vec<u8>> {
    let ours = b < FORK_SPAN;
    if pass == 2 && (FORK_TRIM..FORK_TRIM + u64::from(FORK_TRIM_BLOCKS)).contains(&b) {
        return None;
    }
    if pass == 2 && ours && b.is_multiple_of(6) {
        return Some(block(b, FORK_VERSION[1]));
    }
    if ours && b.is_multiple_of(4) {
        return Some(block(b, FORK_VERSION[0]));
    }
    expected(3, b, 1)
}

fn nameless_block(key: u64, version: u32) -> Vec<u8> {
    block(1_000_000 + key, version)
}

fn nameless_md(key: u64, version: u32, md_bytes: usize) -> Vec<u8> {
    let mut m = vec![0u8; md_bytes];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..12].copy_from_slice(&version.to_le_bytes());
    m
}

/// `(key, version)` of a block's md.
fn md_key(md: &[u8]) -> (u64, u32) {
    let key = u64::from_le_bytes(md[..8].try_into().unwrap());
    (key, u32::from_le_bytes(md[8..12].try_into().unwrap()))
}

/// Nameless blocks by key: their address and version (0: freed there).
type NamelessIndex = BTreeMap<u64, (NamelessAddr, u32)>;

/// The index as its logical block: a u32 count, then per key the key
/// (u64), the address (u64) and the version (u32), little-endian.
fn encode_index(index: &NamelessIndex) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    b[..4].copy_from_slice(&(index.len() as u32).to_le_bytes());
    for (i, (key, (addr, version))) in index.iter().enumerate() {
        let at = 8 + 20 * i;
        b[at..at + 8].copy_from_slice(&key.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&addr.to_le_bytes());
        b[at + 16..at + 20].copy_from_slice(&version.to_le_bytes());
    }
    b
}

fn read_index(ftl: &mut Driver<SimDevice>) -> NamelessIndex {
    let b = ftl.read(NAMELESS_INDEX_LBA, 1).unwrap();
    let count = u32::from_le_bytes(b[..4].try_into().unwrap()) as usize;
    (0..count)
        .map(|i| {
            let at = 8 + 20 * i;
            let key = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
            let addr = NamelessAddr::from_le_bytes(b[at + 8..at + 16].try_into().unwrap());
            let version = u32::from_le_bytes(b[at + 16..at + 20].try_into().unwrap());
            (key, (addr, version))
        })
        .collect()
}

/// Writes version `version` of `keys`; their addresses, in order.
fn nameless_put(
    ftl: &mut Driver<SimDevice>,
    keys: impl Iterator<Item = u64> + Clone,
    version: u32,
) -> Vec<NamelessAddr> {
    let mb = ftl.nameless_md_bytes();
    let data: Vec<u8> = keys
        .clone()
        .flat_map(|k| nameless_block(k, version))
        .collect();
    let md: Vec<u8> = keys.flat_map(|k| nameless_md(k, version, mb)).collect();
    ftl.nameless_write(&data, &md).unwrap()
}

/// Writes `keys`, frees `freed`, overwrites `overwritten` (version 2),
/// records it all in the index block and commits.
fn nameless_pass(
    ftl: &mut Driver<SimDevice>,
    index: &mut NamelessIndex,
    keys: std::ops::Range<u64>,
    freed: [u64; 2],
    overwritten: [u64; 2],
) {
    let addrs = nameless_put(ftl, keys.clone(), 1);
    index.extend(keys.zip(addrs.into_iter().map(|a| (a, 1))));
    let old: Vec<NamelessAddr> = freed.iter().map(|k| index[k].0).collect();
    ftl.nameless_free(&old).unwrap();
    for k in freed {
        index.get_mut(&k).unwrap().1 = 0;
    }
    let mb = ftl.nameless_md_bytes();
    let old: Vec<NamelessAddr> = overwritten.iter().map(|k| index[k].0).collect();
    let data: Vec<u8> = overwritten
        .iter()
        .flat_map(|&k| nameless_block(k, 2))
        .collect();
    let md: Vec<u8> = overwritten
        .iter()
        .flat_map(|&k| nameless_md(k, 2, mb))
        .collect();
    let new = ftl.nameless_overwrite(&old, &data, &md).unwrap();
    for (k, a) in overwritten.into_iter().zip(new) {
        index.insert(k, (a, 2));
    }
    ftl.write(NAMELESS_INDEX_LBA, &encode_index(index)).unwrap();
    ftl.nameless_commit().unwrap();
}

fn fork_offset(ftl: &Driver<SimDevice>) -> u64 {
    let forks = ftl.forks();
    let fork = forks.iter().find(|f| f.name == FORK);
    fork.expect("the fork").lba_offset
}

/// The version-3 additions to the first pass: snapshots, the fork and
/// its writes, and (OOB) nameless blocks and a commit.
fn first_pass_v3(ftl: &mut Driver<SimDevice>, oob: bool) {
    ftl.snapshot_create(DROPPED).unwrap();
    ftl.snapshot_create(GONE).unwrap();
    ftl.snapshot_delete(DROPPED).unwrap();
    ftl.snapshot_create(KEPT).unwrap();
    let at = ftl.fork_create(KEPT, FORK).unwrap().lba_offset;
    for b in (0..FORK_SPAN).step_by(4) {
        ftl.write(at + b, &block(b, FORK_VERSION[0])).unwrap();
    }
    if oob {
        let mut index = NamelessIndex::new();
        nameless_pass(ftl, &mut index, NAMELESS_KEYS_1, [0, 1], [2, 3]);
    }
}

/// The version-3 additions to the second pass: the fork's writes and
/// trim, a snapshot deleted and one made, and (OOB) nameless writes, a
/// commit and writes after it.
fn second_pass_v3(ftl: &mut Driver<SimDevice>, oob: bool) {
    let at = fork_offset(ftl);
    for b in (0..FORK_SPAN).step_by(6) {
        ftl.write(at + b, &block(b, FORK_VERSION[1])).unwrap();
    }
    ftl.trim(at + FORK_TRIM, FORK_TRIM_BLOCKS).unwrap();
    ftl.snapshot_delete(GONE).unwrap();
    ftl.snapshot_create(LATE).unwrap();
    if oob {
        let mut index = read_index(ftl);
        nameless_pass(ftl, &mut index, NAMELESS_KEYS_2, [4, 20], [5, 21]);
        nameless_put(ftl, NAMELESS_UNRECORDED, 1);
    }
}

fn read_as(ftl: &mut Driver<SimDevice>, name: &str, lba: u64) -> Vec<u8> {
    let id = ftl.snapshot_named(name).unwrap().id;
    ftl.read_snapshot(id, lba, 1).unwrap()
}

/// Checks the snapshots, the window's point and the fork of a version-3
/// image after `pass`: every block each of them holds.
fn check_snapshots_and_fork(ftl: &mut Driver<SimDevice>, pass: u32, what: &str) {
    let snapshots = ftl.snapshots();
    let points: Vec<String> = snapshots
        .iter()
        .filter(|s| s.is_point())
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(points.len(), 2, "{what}: the window's points: {points:?}");

    let user: Vec<&str> = snapshots
        .iter()
        .filter(|s| !s.is_point())
        .map(|s| s.name.as_str())
        .collect();
    let live = if pass == 1 {
        [GONE, KEPT]
    } else {
        [KEPT, LATE]
    };
    assert!(user.starts_with(&live), "{what}: snapshots {user:?}");
    assert!(!user.contains(&DROPPED), "{what}: {DROPPED}");
    let zeros = || vec![0; 4096];
    for lba in 0..BLOCKS_CHECKED {
        let first = read_as(ftl, &points[0], lba);
        let want = if lba == 0 { block(0, 1) } else { zeros() };
        assert!(first == want, "{what}: the first point's block {lba}");
        let second = read_as(ftl, &points[1], lba);
        let before_clone = expected(1, lba, 1).unwrap_or_else(zeros);
        assert!(
            second == before_clone,
            "{what}: the second point's block {lba}"
        );
        let kept = read_as(ftl, KEPT, lba);
        let want = expected(3, lba, 1).unwrap_or_else(zeros);
        assert!(kept == want, "{what}: {KEPT}'s block {lba}");
        if pass == 2 {
            let late = read_as(ftl, LATE, lba);
            let want = expected(3, lba, 2).unwrap_or_else(zeros);
            assert!(late == want, "{what}: {LATE}'s block {lba}");
        }
    }
    let at = fork_offset(ftl);
    for b in 0..BLOCKS_CHECKED {
        let got = ftl.read(at + b, 1).unwrap();
        let want = fork_expected(b, pass).unwrap_or_else(zeros);
        assert!(
            got == want,
            "{what}: the fork's block {b} after pass {pass}"
        );
    }
}

/// Checks each block of `index` at its address: data and md, or (version
/// 0) a typed error for a freed block.
fn check_nameless(ftl: &mut Driver<SimDevice>, index: &NamelessIndex, what: &str) {
    let mb = ftl.nameless_md_bytes();
    for (&key, &(addr, version)) in index {
        let got = ftl.nameless_read(addr);
        if version == 0 {
            assert!(
                matches!(got, Err(IoError::Nameless(_))),
                "{what}: freed key {key} at {addr:?}: {got:?}"
            );
            continue;
        }
        let (data, md) = got.unwrap_or_else(|e| panic!("{what}: key {key} at {addr:?}: {e}"));
        assert!(
            data == nameless_block(key, version),
            "{what}: key {key}'s data"
        );
        assert_eq!(md, nameless_md(key, version, mb), "{what}: key {key}'s md");
    }
}

/// Every event until none can come: the hand-over, by address.
fn take_handover(ftl: &mut Driver<SimDevice>, what: &str) -> BTreeMap<NamelessAddr, Vec<u8>> {
    let mut got = BTreeMap::new();
    loop {
        let events = ftl.next_events(8).unwrap();
        if events.is_empty() {
            return got;
        }
        for e in events {
            let NamelessEvent::Unrecorded { addr, md } = e else {
                panic!("{what}: {e:?}");
            };
            assert!(got.insert(addr, md).is_none(), "{what}: {addr:?} twice");
        }
    }
}

/// What the upgrade test knows of a version-3 image's nameless blocks:
/// the image's index with the hand-over and the test's own free and write
/// recorded (empty in band).
struct V3State {
    nameless: NamelessIndex,
}

impl V3State {
    /// Checks a freshly mounted version-3 image (snapshots, the fork,
    /// nameless blocks), takes the hand-over (exactly the blocks written
    /// after the commit), records it, frees one and writes one more.
    fn after_mount(ftl: &mut Driver<SimDevice>, oob: bool, what: &str) -> V3State {
        check_snapshots_and_fork(ftl, 2, what);
        if !oob {
            // In band: the image holds no nameless blocks (its build kept
            // md in OOB only); this build writes, reads and frees one there
            // (md in the log and md groups).
            let mb = ftl.nameless_md_bytes();
            let md = nameless_md(0, 1, mb);
            let a = ftl.nameless_write(&nameless_block(0, 1), &md).unwrap();
            let got = ftl.nameless_read(a[0]).unwrap();
            assert_eq!(got, (nameless_block(0, 1), md), "{what}");
            ftl.nameless_free(&a).unwrap();
            return V3State {
                nameless: NamelessIndex::new(),
            };
        }
        let mut index = read_index(ftl);
        let keys = NAMELESS_KEYS_1.chain(NAMELESS_KEYS_2);
        assert!(index.keys().copied().eq(keys), "{what}: index {index:?}");
        check_nameless(ftl, &index, what);
        let handed = take_handover(ftl, what);
        let keys: Vec<(u64, u32)> = handed.values().map(|md| md_key(md)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        let want: Vec<(u64, u32)> = NAMELESS_UNRECORDED.map(|k| (k, 1)).collect();
        assert_eq!(sorted, want, "{what}: the hand-over");
        for ((addr, _), (key, version)) in handed.iter().zip(keys) {
            index.insert(key, (*addr, version));
        }
        let first = NAMELESS_UNRECORDED.start;
        ftl.nameless_free(&[index[&first].0]).unwrap();
        index.get_mut(&first).unwrap().1 = 0;
        let new = nameless_put(ftl, [NAMELESS_KEY_NEW].into_iter(), 3);
        index.insert(NAMELESS_KEY_NEW, (new[0], 3));
        ftl.write(NAMELESS_INDEX_LBA, &encode_index(&index))
            .unwrap();
        ftl.nameless_commit().unwrap();
        check_nameless(ftl, &index, what);
        V3State { nameless: index }
    }

    /// Checks it all again after a remount: nothing handed over now.
    fn check_again(&self, ftl: &mut Driver<SimDevice>, what: &str) {
        check_snapshots_and_fork(ftl, 2, what);
        if self.nameless.is_empty() {
            return; // in band
        }
        let handed = take_handover(ftl, what);
        assert!(handed.is_empty(), "{what}: a second hand-over");
        assert_eq!(read_index(ftl), self.nameless, "{what}: the index");
        check_nameless(ftl, &self.nameless, what);
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
        // Version 3: a protection window and a wall clock that moves on
        // once, for one point.
        let cfg = FtlConfig {
            protect_window: (FROZEN_NOW >= 3).then_some(ProtectWindow::Secs(WINDOW_SECS)),
            ..FtlConfig::default()
        };
        let mut ftl = Driver::format(dev, &opts, cfg).unwrap();
        let clock = Arc::new(AtomicU64::new(T0_NS));
        let wall = clock.clone();
        ftl.set_wall_clock(move || wall.load(Ordering::SeqCst));
        for lba in 0..BLOCKS_WRITTEN {
            ftl.write(lba, &block(lba, 1)).unwrap();
        }
        ftl.trim(100, 20).unwrap();
        if FROZEN_NOW >= 3 {
            clock.fetch_add(POINT_STEP_NS, Ordering::SeqCst);
            ftl.settle().unwrap();
        }
        if FROZEN_NOW >= 2 {
            ftl.clone_ranges(&[(CLONE_SRC, CLONE_DST, CLONE_BLOCKS)])
                .unwrap();
            let immutable = CLONE_DST + CLONE_BLOCKS - IMMUTABLE_BLOCKS;
            ftl.set_attribute(&[(immutable, IMMUTABLE_BLOCKS)], Attribute::Immutable)
                .unwrap();
        }
        if FROZEN_NOW >= 3 {
            first_pass_v3(&mut ftl, oob);
            check_snapshots_and_fork(&mut ftl, 1, "before the first shutdown");
        }
        let dev = ftl.shutdown().unwrap();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        let mount_checkpoints = ftl.stats().checkpoints;
        for lba in (0..BLOCKS_WRITTEN).filter(|l| l.is_multiple_of(3)) {
            ftl.write(lba, &block(lba, 2)).unwrap();
        }
        ftl.trim(200, 10).unwrap();
        if FROZEN_NOW >= 2 {
            ftl.move_ranges(&[(MOVE_SRC, MOVE_DST, MOVE_BLOCKS)])
                .unwrap();
        }
        if FROZEN_NOW >= 3 {
            second_pass_v3(&mut ftl, oob);
        }
        ftl.flush().unwrap();
        check_contents(&mut ftl, FROZEN_NOW, 2, "before freezing");
        if FROZEN_NOW >= 3 {
            check_snapshots_and_fork(&mut ftl, 2, "before freezing");
        }
        // No checkpoint after the mount's: the second pass stays in the log.
        assert_eq!(ftl.stats().checkpoints, mount_checkpoints);
        drop(ftl.into_backend());
        freeze(&path, &image_name(FROZEN_NOW, oob));
    }
}

/// Packs the image file at `path` into `tests/images/name`.
fn freeze(path: &Path, name: &str) {
    let raw = std::fs::read(path).unwrap();
    let out = std::fs::File::create(images_dir().join(name)).unwrap();
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::best());
    gz.write_all(&raw).unwrap();
    gz.finish().unwrap();
}

/// Frozen image `name` unpacked into `dir`; its path.
fn unpack(name: &str, dir: &Path) -> PathBuf {
    let packed = std::fs::File::open(images_dir().join(name)).unwrap();
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
        let path = unpack(&image_name(version, oob), dir.path());
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
        let v3 = (version >= 3).then(|| V3State::after_mount(&mut ftl, oob, &what));
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
        if let Some(v3) = &v3 {
            v3.check_again(&mut ftl, &format!("{what} after remount"));
        }
        ftl.write(6, &block(6, 3)).unwrap();
        ftl.flush().unwrap();
        let dev = ftl.into_backend();
        let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
        assert_eq!(
            ftl.read(6, 1).unwrap(),
            block(6, 3),
            "{what}: after a crash"
        );
        if let Some(v3) = &v3 {
            v3.check_again(&mut ftl, &format!("{what} after a crash"));
        }
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

#[test]
fn version_3_images_mount_read_and_upgrade() {
    mount_read_and_upgrade(3);
}

// ----- the frozen version-3 image with migration state ----------------------

/// The OOB image that holds migration state: [`make_frozen_migrated_image`]
/// writes it, [`version_3_migrated_image_mounts_and_follows_its_moves`]
/// mounts a copy.
const MIGRATED_IMAGE: &str = "v3-oob-migrated.img.gz";
/// The image's client keeps its [`MigrationIndex`] in logical blocks
/// `MIGRATION_INDEX_LBA..+MIGRATION_INDEX_BLOCKS`.
const MIGRATION_INDEX_LBA: u64 = 0;
const MIGRATION_INDEX_BLOCKS: u64 = 8;
/// New keys per nameless write; the client frees keys at random to keep
/// at most `LIVE_KEYS` live, so the nameless zones stay partly live and GC
/// migrates them.
const KEYS_PER_BATCH: u64 = 16;
const LIVE_KEYS: usize = 250;

/// The device of the image: 64 bytes of OOB (md in OOB), and half the
/// pages of [`sim_config`] (zones of 32 blocks), since GC migrates only
/// once the device is full, so every page is written.
fn migrated_sim_config() -> SimConfig {
    SimConfig {
        pages_per_block: 16,
        ..sim_config(true)
    }
}

/// What became of a move (a `Migrated` event) the client knows of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MoveState {
    /// Not acknowledged: the old address redirects, and the event comes
    /// again after a mount.
    Unacked = 1,
    /// Acknowledged (by `nameless_ack` or a commit): the old address is
    /// stale.
    Acked = 2,
    /// The moved block was freed before an ack: the entry went with it.
    Freed = 3,
}

impl MoveState {
    fn from_code(code: u32) -> MoveState {
        [MoveState::Unacked, MoveState::Acked, MoveState::Freed]
            .into_iter()
            .find(|s| *s as u32 == code)
            .unwrap_or_else(|| panic!("move state {code}"))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Held {
    addr: NamelessAddr,
    version: u32,
    /// Written before the last commit (else the mount hands it over).
    committed: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Move {
    new: NamelessAddr,
    key: u64,
    state: MoveState,
    /// The image's maker saw its entry in the image's last checkpoint
    /// (else it is only in the log after it).
    in_checkpoint: bool,
}

/// The image's client's record: every live key, and the moves it was told
/// of since its last phase began (by old address).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct MigrationIndex {
    keys: BTreeMap<u64, Held>,
    moves: BTreeMap<NamelessAddr, Move>,
}

const HELD_BYTES: usize = 24;
const MOVE_BYTES: usize = 32;

impl MigrationIndex {
    /// As its logical blocks: u32 key count, u32 move count; per key the
    /// key (u64), address (u64), version (u32), committed (u32); per move
    /// the old address, the new (u64 each), the key (u64), the state
    /// (u32), in_checkpoint (u32); little-endian, zeros after.
    fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(4096 * MIGRATION_INDEX_BLOCKS as usize);
        b.extend_from_slice(&(self.keys.len() as u32).to_le_bytes());
        b.extend_from_slice(&(self.moves.len() as u32).to_le_bytes());
        for (key, h) in &self.keys {
            b.extend_from_slice(&key.to_le_bytes());
            b.extend_from_slice(&h.addr.to_le_bytes());
            b.extend_from_slice(&h.version.to_le_bytes());
            b.extend_from_slice(&u32::from(h.committed).to_le_bytes());
        }
        for (old, m) in &self.moves {
            b.extend_from_slice(&old.to_le_bytes());
            b.extend_from_slice(&m.new.to_le_bytes());
            b.extend_from_slice(&m.key.to_le_bytes());
            b.extend_from_slice(&(m.state as u32).to_le_bytes());
            b.extend_from_slice(&u32::from(m.in_checkpoint).to_le_bytes());
        }
        let room = 4096 * MIGRATION_INDEX_BLOCKS as usize;
        assert!(b.len() <= room, "the index outgrew its {room} bytes");
        b.resize(room, 0);
        b
    }

    fn decode(b: &[u8]) -> MigrationIndex {
        let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
        let (key_count, move_count) = (u32_at(0) as usize, u32_at(4) as usize);
        let keys = (0..key_count).map(|i| {
            let at = 8 + HELD_BYTES * i;
            let held = Held {
                addr: NamelessAddr::from_u64(u64_at(at + 8)),
                version: u32_at(at + 16),
                committed: u32_at(at + 20) == 1,
            };
            (u64_at(at), held)
        });
        let moves_at = 8 + HELD_BYTES * key_count;
        let moves = (0..move_count).map(|i| {
            let at = moves_at + MOVE_BYTES * i;
            let m = Move {
                new: NamelessAddr::from_u64(u64_at(at + 8)),
                key: u64_at(at + 16),
                state: MoveState::from_code(u32_at(at + 24)),
                in_checkpoint: u32_at(at + 28) == 1,
            };
            (NamelessAddr::from_u64(u64_at(at)), m)
        });
        MigrationIndex {
            keys: keys.collect(),
            moves: moves.collect(),
        }
    }

    fn save(&self, ftl: &mut Driver<SimDevice>) {
        ftl.write(MIGRATION_INDEX_LBA, &self.encode()).unwrap();
    }

    fn load(ftl: &mut Driver<SimDevice>) -> MigrationIndex {
        let blocks = MIGRATION_INDEX_BLOCKS as u32;
        MigrationIndex::decode(&ftl.read(MIGRATION_INDEX_LBA, blocks).unwrap())
    }

    /// The moves in `state`, by old address.
    fn moves_in(&self, state: MoveState) -> impl Iterator<Item = (NamelessAddr, Move)> + '_ {
        self.moves
            .iter()
            .filter(move |(_, m)| m.state == state)
            .map(|(&old, &m)| (old, m))
    }
}

/// The image's client at work: it writes new keys, frees at random, and
/// follows moves.
struct Client {
    index: MigrationIndex,
    rng: zftl::sim::rng::Rng,
    next_key: u64,
}

impl Client {
    /// Writes a batch of new keys (uncommitted), then frees keys at random
    /// down to [`LIVE_KEYS`] (a moved key by its new address if the client
    /// knows of the move, else by the old: it redirects).
    fn batch(&mut self, ftl: &mut Driver<SimDevice>) {
        let keys = self.next_key..self.next_key + KEYS_PER_BATCH;
        self.next_key = keys.end;
        for (key, addr) in keys.clone().zip(nameless_put(ftl, keys, 1)) {
            let held = Held {
                addr,
                version: 1,
                committed: false,
            };
            self.index.keys.insert(key, held);
        }
        while self.index.keys.len() > LIVE_KEYS {
            let i = self.rng.below(self.index.keys.len() as u64) as usize;
            let key = *self.index.keys.keys().nth(i).unwrap();
            self.free(ftl, key);
        }
    }

    /// Frees all but an eighth of the last batch's keys, at random: their
    /// zones are the sparsest, so GC migrates them first.
    fn thin_newest(&mut self, ftl: &mut Driver<SimDevice>) {
        let newest = self.next_key - KEYS_PER_BATCH..self.next_key;
        for key in newest {
            if self.rng.below(8) != 0 && self.index.keys.contains_key(&key) {
                self.free(ftl, key);
            }
        }
    }

    fn free(&mut self, ftl: &mut Driver<SimDevice>, key: u64) {
        let held = self.index.keys.remove(&key).unwrap();
        ftl.nameless_free(&[held.addr]).unwrap();
        // A pending move of it ends with it.
        for m in self.index.moves.values_mut() {
            if m.new == held.addr && m.state == MoveState::Unacked {
                m.state = MoveState::Freed;
            }
        }
    }

    /// Takes the ready `Migrated` events: each key moves to its new
    /// address, the move is recorded unacknowledged. Their old addresses.
    fn follow(&mut self, ftl: &mut Driver<SimDevice>, what: &str) -> Vec<NamelessAddr> {
        let mb = ftl.nameless_md_bytes();
        let mut olds = Vec::new();
        while let Some(e) = ftl.poll_event() {
            let NamelessEvent::Migrated { old, new, md } = e else {
                panic!("{what}: {e:?} while running");
            };
            let (key, version) = md_key(&md);
            let held = self.index.keys.get_mut(&key);
            let held = held.unwrap_or_else(|| panic!("{what}: key {key} moved, not held"));
            assert_eq!(held.addr, old, "{what}: key {key}'s move");
            assert_eq!(
                md,
                nameless_md(key, held.version, mb),
                "{what}: md of {key}"
            );
            assert_eq!(version, held.version);
            held.addr = new;
            let m = Move {
                new,
                key,
                state: MoveState::Unacked,
                in_checkpoint: false,
            };
            self.index.moves.insert(old, m);
            olds.push(old);
        }
        olds
    }

    /// Acknowledges the moves of `olds`.
    fn ack(&mut self, ftl: &mut Driver<SimDevice>, olds: &[NamelessAddr]) {
        ftl.nameless_ack(olds).unwrap();
        for old in olds {
            self.index.moves.get_mut(old).unwrap().state = MoveState::Acked;
        }
    }

    /// Saves the index and commits: every key is committed, every move
    /// delivered so far acknowledged.
    fn commit(&mut self, ftl: &mut Driver<SimDevice>) {
        for held in self.index.keys.values_mut() {
            held.committed = true;
        }
        for m in self.index.moves.values_mut() {
            if m.state == MoveState::Unacked {
                m.state = MoveState::Acked;
            }
        }
        self.index.save(ftl);
        ftl.nameless_commit().unwrap();
    }

    /// Commits until no move is left unacknowledged: a commit's own
    /// writes may let GC migrate.
    fn commit_all(&mut self, ftl: &mut Driver<SimDevice>, what: &str) {
        loop {
            self.commit(ftl);
            ftl.settle().unwrap();
            if self.follow(ftl, what).is_empty() {
                return;
            }
        }
    }

    /// Runs the volume until it is quiet, following every move, and saves
    /// the index: no event is left that the index does not hold.
    fn quiesce(&mut self, ftl: &mut Driver<SimDevice>, what: &str) {
        loop {
            ftl.settle().unwrap();
            ftl.flush().unwrap();
            if self.follow(ftl, what).is_empty() {
                break;
            }
            self.index.save(ftl);
        }
        self.index.save(ftl);
        ftl.flush().unwrap();
        assert!(ftl.poll_event().is_none(), "{what}: a move while saving");
    }
}

/// Phase A of the image ends once GC has migrated this many blocks.
const MIGRATED_BEFORE_IMAGE: u64 = 100;
/// Batches written after the image's last commit and before its last
/// checkpoint (uncommitted; full zones, which GC may migrate after it).
const BATCHES_BEFORE_CHECKPOINT: u64 = 24;
/// Blocks GC migrates, at least, after the image's last checkpoint (and
/// after the test's mount).
const MIGRATED_AFTER: u64 = 8;

/// Acknowledges every third of the moves not yet acknowledged, and frees
/// the moved block of the first of the rest.
fn ack_some_free_one(client: &mut Client, ftl: &mut Driver<SimDevice>, olds: &[NamelessAddr]) {
    let pending: Vec<NamelessAddr> = olds
        .iter()
        .copied()
        .filter(|old| client.index.moves[old].state == MoveState::Unacked)
        .collect();
    let acked: Vec<NamelessAddr> = pending.iter().copied().step_by(3).collect();
    client.ack(ftl, &acked);
    let rest = pending.iter().find(|old| !acked.contains(old));
    let key = client.index.moves[rest.expect("a move left to free")].key;
    client.free(ftl, key);
}

#[test]
#[ignore = "writes tests/images/v3-oob-migrated.img.gz; run by hand"]
fn make_frozen_migrated_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("image");
    let dev = SimDevice::create_file(&path, migrated_sim_config()).unwrap();
    let opts = FormatOptions {
        tag_placement: TagPlacement::Auto,
        seed: 7,
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).unwrap();
    let mut client = Client {
        index: MigrationIndex::default(),
        rng: zftl::sim::rng::Rng::new(31),
        next_key: 0,
    };
    let what = "making the image";
    // A: churn, acks and commits, until GC migrates.
    let mut rounds = 0;
    while ftl.stats().nameless_migrated_blocks < MIGRATED_BEFORE_IMAGE {
        rounds += 1;
        assert!(rounds < 200, "{what}: no migrations: {:?}", ftl.stats());
        client.index.moves.clear();
        client.batch(&mut ftl);
        let moved = client.follow(&mut ftl, what);
        if client.rng.below(2) == 0 {
            client.ack(&mut ftl, &moved);
        }
        client.commit(&mut ftl);
    }
    // B: the last commit is behind; uncommitted writes fill zones, moves
    // are followed and left unacknowledged, then the last checkpoint.
    for _ in 0..BATCHES_BEFORE_CHECKPOINT {
        client.batch(&mut ftl);
        client.thin_newest(&mut ftl);
        client.follow(&mut ftl, what);
    }
    ftl.settle().unwrap();
    client.follow(&mut ftl, what);
    ftl.checkpoint().unwrap();
    let checkpoints = ftl.stats().checkpoints;
    let in_checkpoint = ftl.stats().nameless_remap_entries;
    let olds = client.follow(&mut ftl, what);
    assert!(olds.is_empty(), "{what}: a move during the checkpoint");
    let checkpointed: Vec<NamelessAddr> = client
        .index
        .moves_in(MoveState::Unacked)
        .map(|(old, _)| old)
        .collect();
    assert_eq!(checkpointed.len() as u64, in_checkpoint, "{what}");
    for old in &checkpointed {
        client.index.moves.get_mut(old).unwrap().in_checkpoint = true;
    }
    // Some of the checkpoint's entries acknowledged in the log, one
    // dropped by a free.
    ack_some_free_one(&mut client, &mut ftl, &checkpointed);
    // C: more writes until GC migrates again (entries in the log only).
    let migrated = ftl.stats().nameless_migrated_blocks;
    let mut logged = Vec::new();
    while ftl.stats().nameless_migrated_blocks < migrated + MIGRATED_AFTER {
        assert!(
            logged.len() < 1000,
            "{what}: no migration after the checkpoint"
        );
        client.batch(&mut ftl);
        logged.extend(client.follow(&mut ftl, what));
    }
    client.quiesce(&mut ftl, what);
    ack_some_free_one(&mut client, &mut ftl, &logged);
    client.quiesce(&mut ftl, what);
    assert_eq!(ftl.stats().checkpoints, checkpoints, "{what}: a checkpoint");
    let s = ftl.stats();
    eprintln!(
        "{what}: {in_checkpoint} remap entries in the checkpoint, {} moves after it; \
         at the cut {} entries, {} uncommitted and {} live blocks",
        logged.len(),
        s.nameless_remap_entries,
        s.nameless_uncommitted_blocks,
        s.nameless_live_blocks
    );
    assert_image_holds_migration_state(&client.index, what);
    drop(ftl.into_backend());
    freeze(&path, MIGRATED_IMAGE);
}

/// The image holds what it is frozen for: moves acknowledged, not
/// acknowledged and freed, both among the entries of its checkpoint and
/// among those of its log, and an uncommitted block that moved.
fn assert_image_holds_migration_state(index: &MigrationIndex, what: &str) {
    for state in [MoveState::Unacked, MoveState::Acked, MoveState::Freed] {
        let (ckpt, log): (Vec<_>, Vec<_>) =
            index.moves_in(state).partition(|(_, m)| m.in_checkpoint);
        assert!(
            !ckpt.is_empty(),
            "{what}: no {state:?} move in the checkpoint"
        );
        assert!(!log.is_empty(), "{what}: no {state:?} move in the log");
    }
    let mut moved_uncommitted = index
        .moves_in(MoveState::Unacked)
        .filter(|(_, m)| !index.keys[&m.key].committed);
    assert!(
        moved_uncommitted.next().is_some(),
        "{what}: no uncommitted block moved"
    );
}

/// Checks every key of `index` at its address (data and md), and every
/// move: an unacknowledged one's old address reaches the block, an
/// acknowledged one's is stale, and both addresses of a freed one are.
fn check_migration_index(ftl: &mut Driver<SimDevice>, index: &MigrationIndex, what: &str) {
    let mb = ftl.nameless_md_bytes();
    let holds = |ftl: &mut Driver<SimDevice>, addr: NamelessAddr, key: u64, version: u32| {
        let got = ftl.nameless_read(addr);
        let (data, md) = got.unwrap_or_else(|e| panic!("{what}: key {key} at {addr:?}: {e}"));
        assert!(
            data == nameless_block(key, version),
            "{what}: key {key}'s data"
        );
        assert_eq!(md, nameless_md(key, version, mb), "{what}: key {key}'s md");
    };
    let gone = |ftl: &mut Driver<SimDevice>, addr: NamelessAddr, whose: &str| match ftl
        .nameless_read(addr)
    {
        Err(IoError::Nameless(NamelessError::Stale { .. } | NamelessError::NotLive { .. })) => {}
        other => panic!(
            "{what}: {whose} at {addr:?}: {:?}",
            other.map(|_| "a block")
        ),
    };
    for (&key, held) in &index.keys {
        holds(ftl, held.addr, key, held.version);
    }
    for (old, m) in &index.moves {
        let whose = format!("key {}'s move, {:?}", m.key, m.state);
        match m.state {
            MoveState::Unacked => {
                let held = index.keys[&m.key];
                assert_eq!(held.addr, m.new, "{what}: {whose}");
                holds(ftl, *old, m.key, held.version);
            }
            MoveState::Acked => gone(ftl, *old, &whose),
            MoveState::Freed => {
                assert!(!index.keys.contains_key(&m.key), "{what}: {whose}");
                gone(ftl, *old, &whose);
                gone(ftl, m.new, &whose);
            }
        }
    }
}

/// Every event until none can come: the hand-over (`Unrecorded`, by
/// address) and the moves (`Migrated`, by old address), each with its md.
type Events = (
    BTreeMap<NamelessAddr, Vec<u8>>,
    BTreeMap<NamelessAddr, (NamelessAddr, Vec<u8>)>,
);

fn take_events(ftl: &mut Driver<SimDevice>, what: &str) -> Events {
    let (mut unrecorded, mut migrated) = (BTreeMap::new(), BTreeMap::new());
    loop {
        let events = ftl.next_events(16).unwrap();
        if events.is_empty() {
            return (unrecorded, migrated);
        }
        for e in events {
            let twice = match e {
                NamelessEvent::Unrecorded { addr, md } => unrecorded.insert(addr, md).is_some(),
                NamelessEvent::Migrated { old, new, md } => {
                    migrated.insert(old, (new, md)).is_some()
                }
                other => panic!("{what}: {other:?}"),
            };
            assert!(!twice, "{what}: an event twice");
        }
    }
}

/// The events a mount of a volume holding `index` hands out: every
/// uncommitted key's block, and every unacknowledged move.
fn expected_events(index: &MigrationIndex, md_bytes: usize) -> Events {
    let md = |key: u64| nameless_md(key, index.keys[&key].version, md_bytes);
    let unrecorded = index.keys.iter().filter(|(_, h)| !h.committed);
    let unacked = index.moves_in(MoveState::Unacked);
    (
        unrecorded.map(|(&key, h)| (h.addr, md(key))).collect(),
        unacked.map(|(old, m)| (old, (m.new, md(m.key)))).collect(),
    )
}

/// Checks a freshly mounted volume against `index`: its blocks and moves,
/// that the mount recovered exactly the remap entries and uncommitted set
/// `index` expects (a freed block's entry dropped: its old address reads
/// `NotLive` either way), and that its events are exactly those.
fn check_mounted(ftl: &mut Driver<SimDevice>, index: &MigrationIndex, what: &str) {
    check_migration_index(ftl, index, what);
    let want = expected_events(index, ftl.nameless_md_bytes());
    let s = ftl.stats();
    let recovered = (s.nameless_uncommitted_blocks, s.nameless_remap_entries);
    let expected = (want.0.len() as u64, want.1.len() as u64);
    assert_eq!(recovered, expected, "{what}: uncommitted, remap entries");
    assert_eq!(take_events(ftl, what), want, "{what}: the events");
}

/// Mounts `dev`, finds `index` in it and checks it ([`check_mounted`]).
fn mount_and_check(dev: SimDevice, index: &MigrationIndex, what: &str) -> Driver<SimDevice> {
    let mut ftl =
        Driver::mount(dev, FtlConfig::default()).unwrap_or_else(|e| panic!("{what}: mount: {e}"));
    assert_eq!(&MigrationIndex::load(&mut ftl), index, "{what}: the index");
    check_mounted(&mut ftl, index, what);
    ftl
}

/// The frozen image of a volume in the middle of migrations mounts: its
/// blocks read back at their addresses, the moves it was not told were
/// acknowledged come again and still redirect, the acknowledged and freed
/// ones are stale, the hand-over is exactly the uncommitted blocks (some
/// of them moved); then it takes writes that GC migrates, and mounts
/// again after a clean shutdown and after a crash.
#[test]
fn version_3_migrated_image_mounts_and_follows_its_moves() {
    let dir = tempfile::tempdir().unwrap();
    let path = unpack(MIGRATED_IMAGE, dir.path());
    let what = MIGRATED_IMAGE;
    let mut dev = SimDevice::open_file_expecting(&path, &migrated_sim_config()).unwrap();
    let report = zftl::core::check::check(&mut dev);
    assert!(report.is_clean(), "{what}: check: {:?}", report.problems);

    // The image as frozen: its index says what it holds.
    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    let index = MigrationIndex::load(&mut ftl);
    assert_image_holds_migration_state(&index, what);
    check_mounted(&mut ftl, &index, what);

    // The client records what it was handed and commits (which also
    // acknowledges every move delivered); then writes on until GC
    // migrates again, acknowledging as it goes.
    let next_key = index
        .keys
        .keys()
        .chain(index.moves.values().map(|m| &m.key))
        .max()
        .unwrap()
        + 1;
    let mut client = Client {
        index,
        rng: zftl::sim::rng::Rng::new(32),
        next_key,
    };
    client.commit_all(&mut ftl, what);
    check_migration_index(&mut ftl, &client.index, what);
    let migrated = ftl.stats().nameless_migrated_blocks;
    for round in 0.. {
        if ftl.stats().nameless_migrated_blocks >= migrated + MIGRATED_AFTER {
            break;
        }
        assert!(round < 200, "{what}: no migration after the mount");
        client
            .index
            .moves
            .retain(|_, m| m.state == MoveState::Unacked);
        client.batch(&mut ftl);
        let moved = client.follow(&mut ftl, what);
        if client.rng.below(2) == 0 {
            client.ack(&mut ftl, &moved);
        }
        client.commit(&mut ftl);
    }
    client.commit_all(&mut ftl, what);
    check_migration_index(&mut ftl, &client.index, what);

    let dev = ftl.shutdown().unwrap();
    let mut ftl = mount_and_check(dev, &client.index, &format!("{what} after remount"));
    // One more batch, uncommitted, then a crash: it is handed over.
    client.index.moves.clear();
    client.batch(&mut ftl);
    client.quiesce(&mut ftl, what);
    let dev = ftl.into_backend();
    let ftl = mount_and_check(dev, &client.index, &format!("{what} after a crash"));
    let mut dev = ftl.shutdown().unwrap();
    let report = zftl::core::check::check(&mut dev);
    assert!(report.is_clean(), "{what}: check: {:?}", report.problems);
}

/// The frozen image with nameless md in the log (tags in band, md groups
/// in the zones): the first build that writes them froze it
/// (`make_frozen_inband_md_image`).
const INBAND_MD_IMAGE: &str = "v3-inband-md.img.gz";
/// First pass: fillers written and freed (zones filled, their groups' md
/// blocks written), keys written (groups left open), two freed, two
/// overwritten, a commit; a clean shutdown (its checkpoint holds the open
/// groups). The index block holds at most 204 keys.
const INBAND_MD_KEYS_1: std::ops::Range<u64> = 0..120;
/// Second pass, after the mount: the same on these keys, a commit, then
/// `NAMELESS_UNRECORDED` written (handed over), all in the log.
const INBAND_MD_KEYS_2: std::ops::Range<u64> = 200..250;
/// Written and freed before the first pass.
const INBAND_MD_FILLERS: std::ops::Range<u64> = 1000..1400;

#[test]
#[ignore = "writes tests/images/; run by hand with a build that writes the format to freeze"]
fn make_frozen_inband_md_image() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("image");
    let dev = SimDevice::create_file(&path, sim_config(false)).unwrap();
    let opts = FormatOptions {
        tag_placement: TagPlacement::Auto,
        seed: 7,
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).unwrap();
    // Fillers, freed at once, so the lanes' zones fill (their groups' md
    // blocks written) while the index stays within its block.
    let fillers = nameless_put(&mut ftl, INBAND_MD_FILLERS, 1);
    ftl.nameless_free(&fillers).unwrap();
    let mut index = NamelessIndex::new();
    nameless_pass(&mut ftl, &mut index, INBAND_MD_KEYS_1, [0, 1], [2, 3]);
    assert!(
        ftl.stats().nameless_md_write_blocks > 0,
        "no md block written"
    );
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    let mount_checkpoints = ftl.stats().checkpoints;
    nameless_pass(&mut ftl, &mut index, INBAND_MD_KEYS_2, [4, 200], [5, 201]);
    nameless_put(&mut ftl, NAMELESS_UNRECORDED, 1);
    ftl.flush().unwrap();
    check_nameless(&mut ftl, &index, "before freezing");
    // No checkpoint after the mount's: the second pass stays in the log.
    assert_eq!(ftl.stats().checkpoints, mount_checkpoints);
    drop(ftl.into_backend());
    freeze(&path, INBAND_MD_IMAGE);
}

/// The in-band md image mounts clean: every recorded block reads back
/// with its md (from md blocks, the checkpoint's open group and the log's
/// notes), the blocks written after the last commit are handed over with
/// theirs, and it takes writes, a free and a commit, across a clean
/// remount and a crash.
#[test]
fn version_3_inband_md_image_mounts_and_reads_its_md() {
    let dir = tempfile::tempdir().unwrap();
    let path = unpack(INBAND_MD_IMAGE, dir.path());
    let what = INBAND_MD_IMAGE;
    let mut dev = SimDevice::open_file_expecting(&path, &sim_config(false)).unwrap();
    let report = zftl::core::check::check(&mut dev);
    assert!(report.is_clean(), "{what}: check: {:?}", report.problems);

    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    let mut index = read_index(&mut ftl);
    let keys = INBAND_MD_KEYS_1.chain(INBAND_MD_KEYS_2);
    assert!(index.keys().copied().eq(keys), "{what}: index {index:?}");
    check_nameless(&mut ftl, &index, what);
    let handed = take_handover(&mut ftl, what);
    let mut got: Vec<(u64, u32)> = handed.values().map(|md| md_key(md)).collect();
    got.sort();
    let want: Vec<(u64, u32)> = NAMELESS_UNRECORDED.map(|k| (k, 1)).collect();
    assert_eq!(got, want, "{what}: the hand-over");
    for (addr, md) in &handed {
        let (key, version) = md_key(md);
        index.insert(key, (*addr, version));
    }
    let first = NAMELESS_UNRECORDED.start;
    ftl.nameless_free(&[index[&first].0]).unwrap();
    index.get_mut(&first).unwrap().1 = 0;
    let new = nameless_put(&mut ftl, [NAMELESS_KEY_NEW].into_iter(), 3);
    index.insert(NAMELESS_KEY_NEW, (new[0], 3));
    ftl.write(NAMELESS_INDEX_LBA, &encode_index(&index))
        .unwrap();
    ftl.nameless_commit().unwrap();
    check_nameless(&mut ftl, &index, what);

    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    assert!(
        take_handover(&mut ftl, what).is_empty(),
        "{what}: a second hand-over"
    );
    assert_eq!(
        read_index(&mut ftl),
        index,
        "{what}: the index after a remount"
    );
    check_nameless(&mut ftl, &index, what);
    let dev = ftl.into_backend();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).unwrap();
    assert!(
        take_handover(&mut ftl, what).is_empty(),
        "{what}: a hand-over after a crash"
    );
    check_nameless(&mut ftl, &index, what);
}
