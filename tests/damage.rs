//! Damaged images: a bit flipped in each on-media structure of a file-backed
//! simulator image, then mount and `check` on the reopened image.
//!
//! The rule (docs/design.md, "The invariants and the tests that guard them": 5 and 6): mount either fails with a
//! typed `MountError` naming the damaged structure, or succeeds and a
//! damaged data block reads back as `Corrupt`/`Misdirected`, never as wrong
//! data; `check()` reports the damage in every case; nothing panics.
//!
//! Case (f), both superblock copies' newest records damaged: mount falls
//! back to the newest record that still decodes (the previous generation),
//! whose checkpoint the log never reclaimed, and recovers every flushed
//! block by rolling the log forward from there; `check()` reports both
//! damaged records.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use zftl::core::addr::Ppa;
use zftl::core::backend::{Command, Completion, Outcome, SubmitError, ZoneId, ZoneInfo};
use zftl::core::check::{check, CheckReport, ProblemKind};
use zftl::core::note::{intact_log_seq, LogBlock, Note, LOG_HEADER_BYTES, LOG_TRAILER_BYTES};
use zftl::core::superblock::Superblock;
use zftl::core::{
    Backend, BackendExt, DeviceError, Driver, FormatError, FormatOptions, FtlConfig, Geometry,
    IoError, MountError,
};
use zftl::sim::image::ImageLayout;
use zftl::sim::rng::Rng;
use zftl::sim::{RuntimeOptions, SimConfig, SimDevice};

// ----- the image and where things are in it --------------------------------

fn sim_config(oob: u32) -> SimConfig {
    SimConfig {
        oob_size_bytes: oob,
        ..SimConfig::small_for_tests()
    }
}

/// Global page index of zone offset `off` (docs/format.md, "Addressing").
fn page_index(c: &SimConfig, zone: ZoneId, off: u64) -> u64 {
    let w = u64::from(c.zone_width_luns);
    let u = u64::from(c.program_unit_pages);
    let groups = u64::from(c.channels * c.luns_per_channel) / w;
    let (g, row) = (u64::from(zone) % groups, u64::from(zone) / groups);
    let unit = off / u;
    let lun = g * w + unit % w;
    let page = (unit / w) * u + off % u;
    (lun * u64::from(c.blocks_per_lun) + row) * u64::from(c.pages_per_block) + page
}

fn data_byte(c: &SimConfig, zone: ZoneId, off: u64, byte: u64) -> u64 {
    ImageLayout::for_config(c).data_offset
        + page_index(c, zone, off) * u64::from(c.page_size_bytes)
        + byte
}

fn oob_byte(c: &SimConfig, zone: ZoneId, off: u64, byte: u64) -> u64 {
    ImageLayout::for_config(c).oob_offset
        + page_index(c, zone, off) * u64::from(c.oob_size_bytes)
        + byte
}

fn flip(path: &Path, offset: u64, mask: u8) {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .expect("open image");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, offset).expect("read byte");
    b[0] ^= mask;
    f.write_all_at(&b, offset).expect("write byte");
}

fn open(path: &Path) -> SimDevice {
    SimDevice::open_file(path, RuntimeOptions::default()).expect("reopen image")
}

/// Every superblock record of zones 0 and 1 that decodes: (zone, offset, record).
fn superblocks(dev: &mut SimDevice) -> Vec<(ZoneId, u64, Superblock)> {
    let mut out = Vec::new();
    for z in [0, 1] {
        let wp = dev.zone_info(z).expect("zone info").write_pointer_blocks;
        for off in 0..wp {
            let (data, _) = dev.read_blocks(z, off, 1).expect("read superblock");
            if let Ok(sb) = Superblock::decode(&data) {
                out.push((z, off, sb));
            }
        }
    }
    out
}

fn newest(dev: &mut SimDevice) -> Superblock {
    superblocks(dev)
        .into_iter()
        .map(|(_, _, sb)| sb)
        .max_by_key(|sb| sb.generation)
        .expect("a superblock")
}

/// Valid log blocks of the ring from the newest checkpoint on, in order.
fn log_after_checkpoint(dev: &mut SimDevice) -> Vec<(ZoneId, u64, LogBlock)> {
    let sb = newest(dev);
    let cap = dev.geometry().zone_capacity_blocks;
    let ring: Vec<ZoneId> = (sb.meta_first_zone..sb.meta_first_zone + sb.meta_zone_count).collect();
    let mut i = ring.iter().position(|&z| z == sb.checkpoint_zone).unwrap();
    let mut off = sb.checkpoint_offset_blocks;
    let mut expected = sb.checkpoint_log_seq;
    let mut out = Vec::new();
    loop {
        if off == cap {
            (i, off) = ((i + 1) % ring.len(), 0);
        }
        let Ok((data, _)) = dev.read_blocks(ring[i], off, 1) else {
            return out;
        };
        match LogBlock::decode(&data) {
            Ok(b) if b.log_seq() == expected => out.push((ring[i], off, b)),
            _ => return out,
        }
        expected += 1;
        off += 1;
    }
}

fn pattern(lba: u64, version: u8, bs: usize) -> Vec<u8> {
    let mut b: Vec<u8> = (0..bs)
        .map(|i| (i as u8).wrapping_mul(31) ^ lba as u8 ^ version)
        .collect();
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b
}

const BLOCKS: u64 = 40;

struct Image {
    _dir: tempfile::TempDir,
    path: PathBuf,
    cfg: SimConfig,
    ppas: HashMap<u64, Ppa>,
    bs: usize,
}

/// A formatted image holding `pattern(lba, 1)` for lba < BLOCKS, flushed
/// and shut down cleanly, the device dropped.
fn image(oob: u32) -> Image {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let cfg = sim_config(oob);
    let dev = SimDevice::create_file(&path, cfg.clone()).expect("create image");
    let mut ftl =
        Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).expect("format");
    let bs = ftl.block_size();
    for lba in 0..BLOCKS {
        ftl.write(lba, &pattern(lba, 1, bs)).expect("write");
    }
    ftl.flush().expect("flush");
    let ppas = (0..BLOCKS)
        .map(|l| (l, ftl.ftl().lookup(l).expect("mapped")))
        .collect();
    drop(ftl.shutdown().expect("shutdown"));
    let img = Image {
        _dir: dir,
        path,
        cfg,
        ppas,
        bs,
    };
    img.assert_addressing();
    img
}

impl Image {
    fn cap(&self) -> u64 {
        self.cfg.zone_capacity_blocks()
    }

    fn at(&self, lba: u64) -> (ZoneId, u64) {
        let p = self.ppas[&lba];
        (p.zone(self.cap()), p.offset_blocks(self.cap()))
    }

    /// The test's addressing finds the block's bytes in the file.
    fn assert_addressing(&self) {
        let f = std::fs::File::open(&self.path).expect("open");
        for lba in [0, BLOCKS - 1] {
            let (z, o) = self.at(lba);
            let mut b = vec![0u8; self.bs];
            f.read_exact_at(&mut b, data_byte(&self.cfg, z, o, 0))
                .expect("read");
            assert_eq!(b, pattern(lba, 1, self.bs), "addressing of block {lba}");
        }
    }

    /// Check on the reopened image (before mount, which rewrites metadata).
    fn check(&self) -> (SimDevice, CheckReport) {
        Image::check_path(&self.path)
    }

    fn check_path(path: &Path) -> (SimDevice, CheckReport) {
        let mut dev = open(path);
        let report = check(&mut dev);
        (dev, report)
    }

    /// Every block reads back as written, or as an error for `damaged`.
    fn assert_reads(&self, ftl: &mut Driver<SimDevice>, damaged: Option<u64>) {
        for lba in 0..BLOCKS {
            match ftl.read(lba, 1) {
                Ok(d) => {
                    assert_ne!(Some(lba), damaged, "damaged block {lba} read as data");
                    assert_eq!(d, pattern(lba, 1, self.bs), "block {lba}");
                }
                Err(IoError::Corrupt { lba: l, .. } | IoError::Misdirected { lba: l, .. })
                    if Some(lba) == damaged =>
                {
                    assert_eq!(l, lba)
                }
                Err(e) => panic!("block {lba}: {e}"),
            }
        }
    }
}

fn problems_of(report: &CheckReport, kind: ProblemKind) -> Vec<&zftl::core::check::Problem> {
    report.problems.iter().filter(|p| p.what == kind).collect()
}

fn mount(dev: SimDevice) -> Result<Driver<SimDevice>, MountError> {
    Driver::mount(dev, FtlConfig::default())
}

// ----- the cases -------------------------------------------------------------

#[test]
fn clean_images_check_clean() {
    for oob in [64, 0] {
        let img = image(oob);
        let (dev, report) = img.check();
        assert!(report.is_clean(), "oob {oob}: {report:#?}");
        assert_eq!(report.summary.mapped_blocks_checked, BLOCKS);
        let mode = if oob == 0 { "in-band" } else { "oob" };
        assert_eq!(report.summary.tag_mode.as_deref(), Some(mode));
        let mut ftl = mount(dev).expect("mount");
        img.assert_reads(&mut ftl, None);
    }
}

/// (a) A checkpoint chunk.
#[test]
fn damaged_checkpoint_fails_mount_naming_it() {
    for oob in [64, 0] {
        let img = image(oob);
        let sb = newest(&mut open(&img.path));
        let (z, o) = (sb.checkpoint_zone, sb.checkpoint_offset_blocks);
        flip(&img.path, data_byte(&img.cfg, z, o, 200), 0x04);
        let (dev, report) = img.check();
        assert_eq!(report.problems.len(), 1, "{report:#?}");
        let p = &report.problems[0];
        assert_eq!(p.what, ProblemKind::Checkpoint, "{p:?}");
        assert_eq!((p.zone, p.offset_blocks), (Some(z), Some(o)), "{p:?}");
        assert!(p.detail.contains("CRC"), "{p:?}");
        match mount(dev) {
            Err(e @ MountError::Damaged(_)) | Err(e @ MountError::Format { .. }) => {
                assert!(e.to_string().contains("checkpoint"), "{e}")
            }
            Err(e) => panic!("untyped mount failure: {e}"),
            Ok(_) => panic!("mount accepted a damaged checkpoint"),
        }
    }
}

/// (b) A notes block after the checkpoint, with valid log blocks after it.
#[test]
fn damaged_note_block_in_the_log_is_reported() {
    for oob in [64, 0] {
        let img = image(oob);
        let mut ftl = mount(open(&img.path)).expect("mount");
        // Several group commits after the mount's checkpoint: each flush
        // makes the pending notes durable in their own log block.
        for round in 0..3u8 {
            let lba = BLOCKS + u64::from(round);
            ftl.write(lba, &pattern(lba, 2, img.bs)).expect("write");
            ftl.trim(u64::from(round) * 3, 1).expect("trim");
            ftl.flush().expect("flush");
        }
        drop(ftl.into_backend()); // no clean shutdown: notes stay after the checkpoint
        let log = log_after_checkpoint(&mut open(&img.path));
        let notes: Vec<_> = log
            .iter()
            .filter(|(_, _, b)| matches!(b, LogBlock::Notes { .. }))
            .collect();
        assert!(notes.len() >= 2, "oob {oob}: notes blocks {notes:?}");
        let (z, o, _) = notes[0];
        flip(&img.path, data_byte(&img.cfg, *z, *o, 40), 0x80);
        let (dev, report) = img.check();
        let found = problems_of(&report, ProblemKind::LogBlock);
        assert_eq!(found.len(), 1, "oob {oob}: {report:#?}");
        assert_eq!(
            (found[0].zone, found[0].offset_blocks),
            (Some(*z), Some(*o))
        );
        // Mount stops at the damaged block: a typed error or a volume whose
        // blocks hold data they were written with (never another block's).
        if let Ok(mut ftl) = mount(dev) {
            for lba in 0..BLOCKS + 3 {
                let d = ftl.read(lba, 1).expect("read");
                let ok = [0u8, 1, 2].iter().any(|&v| {
                    d == pattern(lba, v, img.bs) || (v == 0 && d.iter().all(|&x| x == 0))
                });
                assert!(ok, "block {lba} holds foreign data");
            }
        }
    }
}

/// (c) An OOB tag.
#[test]
fn damaged_tag_reads_as_corrupt() {
    let img = image(64);
    let lba = 17;
    let (z, o) = img.at(lba);
    flip(&img.path, oob_byte(&img.cfg, z, o, 9), 0x02);
    let (dev, report) = img.check();
    assert_eq!(report.problems.len(), 1, "{report:#?}");
    let p = &report.problems[0];
    assert_eq!((p.what, p.lba), (ProblemKind::Tag, Some(lba)), "{p:?}");
    assert_eq!((p.zone, p.offset_blocks), (Some(z), Some(o)));
    let mut ftl = mount(dev).expect("mount");
    img.assert_reads(&mut ftl, Some(lba));
}

/// (d) A data block, with and without OOB.
#[test]
fn damaged_data_reads_as_corrupt() {
    for oob in [64, 0] {
        let img = image(oob);
        let lba = 23;
        let (z, o) = img.at(lba);
        flip(&img.path, data_byte(&img.cfg, z, o, 1000), 0x01);
        let (dev, report) = img.check();
        assert_eq!(report.problems.len(), 1, "oob {oob}: {report:#?}");
        let p = &report.problems[0];
        assert_eq!((p.what, p.lba), (ProblemKind::DataCrc, Some(lba)), "{p:?}");
        let mut ftl = mount(dev).expect("mount");
        img.assert_reads(&mut ftl, Some(lba));
    }
}

/// Writes `pattern(lba, v)` and remembers `v`.
fn write_version(ftl: &mut Driver<SimDevice>, versions: &mut HashMap<u64, u8>, lba: u64, v: u8) {
    ftl.write(lba, &pattern(lba, v, ftl.block_size()))
        .expect("write");
    versions.insert(lba, v);
}

/// Random overwrites of the whole logical space: GC runs.
fn churn(ftl: &mut Driver<SimDevice>, versions: &mut HashMap<u64, u8>, rng: &mut Rng, writes: u64) {
    let logical = ftl.logical_blocks();
    for _ in 0..writes {
        let lba = rng.below(logical);
        let v = versions[&lba].wrapping_add(1);
        write_version(ftl, versions, lba, v);
    }
}

fn assert_versions(ftl: &mut Driver<SimDevice>, versions: &HashMap<u64, u8>) {
    let bs = ftl.block_size();
    for (&lba, &v) in versions {
        assert_eq!(
            ftl.read(lba, 1).expect("read"),
            pattern(lba, v, bs),
            "block {lba}"
        );
    }
}

/// (h) A zone summary (tags in band). While summaries are good GC reads
/// them and never walks the map; a damaged one is reported by `check`, and
/// GC, which believes a summary only where the map agrees, walks the map
/// for that zone and loses nothing.
#[test]
fn damaged_zone_summary_is_reported_and_gc_walks_the_map() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("dev.img");
    let cfg = sim_config(0);
    let dev = SimDevice::create_file(&path, cfg.clone()).expect("create image");
    let mut ftl =
        Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).expect("format");
    let geometry = ftl.ftl().geometry().clone();
    let cap = geometry.zone_capacity_blocks;
    let data_cap = zftl::core::layout::data_blocks_per_zone(&geometry, true);
    assert!(data_cap < cap, "in band, zones end in a summary");
    let logical = ftl.logical_blocks();
    let mut versions = HashMap::new();
    for lba in 0..logical {
        write_version(&mut ftl, &mut versions, lba, 1);
    }
    let mut rng = Rng::new(7);
    churn(&mut ftl, &mut versions, &mut rng, 3 * logical);
    ftl.flush().expect("flush");
    let s = ftl.ftl().stats();
    assert!(
        s.summary_write_blocks > 0 && s.erases > 0 && s.gc_copy_blocks > 0,
        "{s:#?}"
    );
    assert_eq!(
        s.summary_map_walks, 0,
        "GC walked the map though every summary was good"
    );
    let live: Vec<ZoneId> = (0..logical)
        .map(|l| ftl.ftl().lookup(l).expect("mapped").zone(cap))
        .collect();
    drop(ftl.shutdown().expect("shutdown"));

    // Damage the summary of a full data zone that holds live blocks.
    let mut dev = open(&path);
    let zone = (0..geometry.zone_count)
        .filter(|&z| live.contains(&z))
        .find(|&z| {
            let info = dev.zone_info(z).expect("zone report");
            info.write_pointer_blocks == cap
        })
        .expect("a full data zone with live blocks");
    drop(dev);
    flip(&path, data_byte(&cfg, zone, data_cap, 40), 0x10);
    let (dev, report) = Image::check_path(&path);
    let found = problems_of(&report, ProblemKind::Summary);
    assert_eq!(found.len(), 1, "{report:#?}");
    assert_eq!(found[0].zone, Some(zone), "{report:#?}");
    assert_eq!(report.summary.problems_total, 1, "{report:#?}");

    // GC collects the zone anyway, from the map, and nothing is lost.
    let mut ftl = mount(dev).expect("mount");
    let walks_at_mount = ftl.ftl().stats().summary_map_walks;
    let mut rounds = 0;
    while (0..logical).any(|l| ftl.ftl().lookup(l).expect("mapped").zone(cap) == zone) {
        rounds += 1;
        assert!(rounds <= 20, "GC never collected zone {zone}");
        churn(&mut ftl, &mut versions, &mut rng, logical);
    }
    assert!(ftl.ftl().stats().summary_map_walks > walks_at_mount);
    assert_versions(&mut ftl, &versions);
    ftl.flush().expect("flush");
    drop(ftl.shutdown().expect("shutdown"));
    let (_, report) = Image::check_path(&path);
    assert!(report.is_clean(), "{report:#?}");
}

fn newest_record_at(dev: &mut SimDevice, zone: ZoneId) -> (u64, u64) {
    superblocks(dev)
        .into_iter()
        .filter(|(z, _, _)| *z == zone)
        .map(|(_, off, sb)| (off, sb.generation))
        .max_by_key(|&(_, g)| g)
        .expect("a record")
}

/// (e) The newest record of copy A: copy B's record of the same generation serves.
#[test]
fn damaged_newest_superblock_record_other_copy_serves() {
    let img = image(64);
    let (off, generation) = newest_record_at(&mut open(&img.path), 0);
    flip(&img.path, data_byte(&img.cfg, 0, off, 20), 0x01);
    let (dev, report) = img.check();
    assert_eq!(report.problems.len(), 1, "{report:#?}");
    let p = &report.problems[0];
    assert_eq!(p.what, ProblemKind::SuperblockRecord);
    assert_eq!((p.zone, p.offset_blocks), (Some(0), Some(off)));
    assert_eq!(report.summary.superblock_generation, Some(generation));
    let mut ftl = mount(dev).expect("mount");
    img.assert_reads(&mut ftl, None);
}

/// (f) The newest record of both copies: mount falls back to the previous
/// generation, whose checkpoint is intact, and rolls forward to the same
/// data.
#[test]
fn damaged_newest_superblock_in_both_copies_falls_back() {
    for oob in [64, 0] {
        let img = image(oob);
        let mut dev = open(&img.path);
        let (off_a, gen_a) = newest_record_at(&mut dev, 0);
        let (off_b, gen_b) = newest_record_at(&mut dev, 1);
        assert_eq!(gen_a, gen_b);
        drop(dev);
        flip(&img.path, data_byte(&img.cfg, 0, off_a, 20), 0x01);
        flip(&img.path, data_byte(&img.cfg, 1, off_b, 30), 0x01);
        let (dev, report) = img.check();
        let found = problems_of(&report, ProblemKind::SuperblockRecord);
        assert_eq!(found.len(), 2, "{report:#?}");
        assert_eq!(report.problems.len(), 2, "{report:#?}");
        assert_eq!(report.summary.superblock_generation, Some(gen_a - 1));
        let mut ftl = mount(dev).expect("mount falls back to the previous generation");
        img.assert_reads(&mut ftl, None);
    }
}

/// (g) Superblock copy A reset and never rewritten: what a cut leaves
/// between the reset of a full copy and its next record. Not damage: check
/// notes it, mount uses copy B.
#[test]
fn empty_superblock_copy_is_a_notice_and_the_other_copy_serves() {
    let img = image(64);
    let mut dev = open(&img.path);
    dev.reset_zone(0).expect("reset copy A");
    let report = check(&mut dev);
    assert!(report.is_clean(), "{report:#?}");
    assert!(
        report
            .notices
            .iter()
            .any(|n| n.what == ProblemKind::SuperblockCopyMissing && n.zone == Some(0)),
        "{report:#?}"
    );
    let mut ftl = mount(dev).expect("mount from copy B");
    img.assert_reads(&mut ftl, None);
}

// ----- random flips -------------------------------------------------------------

/// Seeded bit flips anywhere in the metadata zones (superblocks and log,
/// data and OOB bytes): mount and check never panic, and a mounted volume
/// never returns another block's data.
#[test]
fn random_metadata_flips_never_panic() {
    let base = image(64);
    let base_in_band = image(0);
    let mut rng = Rng::new(0x5eed_da4a);
    for case in 0..50u64 {
        let img = if case % 2 == 0 { &base } else { &base_in_band };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("case.img");
        std::fs::copy(&img.path, &path).expect("copy image");
        let mut dev = open(&path);
        let sb = newest(&mut dev);
        let meta_end = sb.meta_first_zone + sb.meta_zone_count;
        let zone = rng.below(u64::from(meta_end)) as ZoneId;
        let wp = dev.zone_info(zone).expect("zone").write_pointer_blocks;
        drop(dev);
        let off = rng.below(wp.max(1));
        let in_oob = img.cfg.oob_size_bytes > 0 && rng.below(8) == 0;
        let at = if in_oob {
            oob_byte(
                &img.cfg,
                zone,
                off,
                rng.below(u64::from(img.cfg.oob_size_bytes)),
            )
        } else {
            data_byte(&img.cfg, zone, off, rng.below(img.bs as u64))
        };
        flip(&path, at, 1 << rng.below(8));
        let what = format!("case {case}: zone {zone} offset {off} oob {in_oob}");
        let mut dev = open(&path);
        let report = check(&mut dev);
        match mount(dev) {
            Ok(mut ftl) => {
                for lba in 0..BLOCKS {
                    if let Ok(d) = ftl.read(lba, 1) {
                        assert_eq!(d, pattern(lba, 1, img.bs), "{what}: block {lba}");
                    }
                }
            }
            Err(e) => assert!(
                !report.is_clean(),
                "{what}: mount failed ({e}), check clean"
            ),
        }
    }
}

// ----- check is read-only -------------------------------------------------------

/// A device that refuses everything but reads.
struct ReadOnly(SimDevice);

impl Backend for ReadOnly {
    fn geometry(&self) -> &Geometry {
        self.0.geometry()
    }
    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        self.0.zone_info(zone)
    }
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        assert!(
            matches!(command, Command::Read { .. }),
            "check sent {command:?}"
        );
        self.0.submit(tag, command)
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let n = self.0.reap(out, max);
        assert!(out
            .iter()
            .all(|c| !matches!(c.result, Ok(Outcome::Written { .. }))));
        n
    }
    fn wait(&mut self) -> Result<(), DeviceError> {
        self.0.wait()
    }
    fn in_flight(&self) -> usize {
        self.0.in_flight()
    }
    fn clock_ns(&self) -> u64 {
        self.0.clock_ns()
    }
}

#[test]
fn check_only_reads_and_names_an_unformatted_device() {
    let dev = SimDevice::create_memory(SimConfig::small_for_tests()).expect("sim");
    let report = check(&mut ReadOnly(dev));
    assert_eq!(report.problems.len(), 1, "{report:#?}");
    assert_eq!(report.problems[0].what, ProblemKind::NotFormatted);
    assert!(!report.summary.formatted);

    let img = image(64);
    let report = check(&mut ReadOnly(open(&img.path)));
    assert!(report.is_clean(), "{report:#?}");
}

/// (g) A range-operation vector in the log: a flipped bit is a damaged log
/// block like any other; a note that decodes but names blocks past the end
/// of the volume (resealed, as a bug would write it) fails mount and check
/// as damage, never as a panic.
#[test]
fn damaged_range_notes_are_detected() {
    for oob in [64, 0] {
        for resealed in [false, true] {
            let img = image(oob);
            let mut ftl = mount(open(&img.path)).expect("mount");
            ftl.clone_ranges(&[(0, BLOCKS + 100, 4)]).expect("clone");
            // Later log blocks, so the damaged one is not the log's end
            // (which a power cut can leave torn).
            for round in 0..2 {
                ftl.write(BLOCKS + 10, &pattern(BLOCKS + 10, 2, img.bs))
                    .expect("write");
                ftl.trim(BLOCKS + 20 + round, 1).expect("trim");
                ftl.flush().expect("flush");
            }
            let logical = ftl.logical_blocks();
            drop(ftl.into_backend());
            let log = log_after_checkpoint(&mut open(&img.path));
            let (z, o, block) = log
                .iter()
                .find(|(_, _, b)| match b {
                    LogBlock::Notes { notes, .. } => {
                        notes.iter().any(|n| matches!(n, Note::Clone { .. }))
                    }
                    _ => false,
                })
                .expect("the clone's note block");
            if resealed {
                let LogBlock::Notes { log_seq, notes } = block else {
                    unreachable!()
                };
                let notes = notes
                    .iter()
                    .map(|n| match *n {
                        Note::Clone {
                            seq,
                            src,
                            block_count,
                            ..
                        } => Note::Clone {
                            seq,
                            src,
                            dst: logical,
                            block_count,
                        },
                        other => other,
                    })
                    .collect();
                let bytes = LogBlock::Notes {
                    log_seq: *log_seq,
                    notes,
                }
                .encode(img.bs);
                let f = OpenOptions::new().write(true).open(&img.path).unwrap();
                f.write_all_at(&bytes, data_byte(&img.cfg, *z, *o, 0))
                    .unwrap();
            } else {
                flip(&img.path, data_byte(&img.cfg, *z, *o, 40), 0x80);
            }
            let (dev, report) = img.check();
            assert!(!report.is_clean(), "oob {oob} resealed {resealed}: clean");
            let kind = if resealed {
                ProblemKind::Recovery
            } else {
                ProblemKind::LogBlock
            };
            assert!(
                !problems_of(&report, kind).is_empty(),
                "oob {oob} resealed {resealed}: {report:#?}"
            );
            if resealed {
                match mount(dev) {
                    Err(MountError::Damaged(why)) => assert!(why.contains("vector"), "{why}"),
                    Err(e) => panic!("untyped mount failure: {e}"),
                    Ok(_) => panic!("mount accepted a clone past the end"),
                }
            }
        }
    }
}

/// A note block a newer build wrote (a note kind this build does not know,
/// the block's CRC intact) in the middle of the log: mount refuses the log
/// with a typed error rather than take the block for the log's end and
/// drop the notes after it (docs/format.md: "it never skips what it does
/// not know"), and `check()` reports it.
#[test]
fn unknown_note_kind_in_the_log_refuses_the_mount() {
    const UNKNOWN_NOTE_KIND: u8 = 0xee;
    for oob in [64, 0] {
        let img = image(oob);
        let mut ftl = mount(open(&img.path)).expect("mount");
        for round in 0..3u8 {
            let lba = BLOCKS + u64::from(round);
            ftl.write(lba, &pattern(lba, 2, img.bs)).expect("write");
            ftl.trim(u64::from(round) * 3, 1).expect("trim");
            ftl.flush().expect("flush");
        }
        drop(ftl.into_backend()); // no clean shutdown: notes stay after the checkpoint
        let log = log_after_checkpoint(&mut open(&img.path));
        let notes: Vec<_> = log
            .iter()
            .filter(|(_, _, b)| matches!(b, LogBlock::Notes { .. }))
            .collect();
        assert!(notes.len() >= 2, "oob {oob}: notes blocks {notes:?}");
        let (z, o, block) = notes[0];
        let mut bytes = block.encode(img.bs);
        bytes[LOG_HEADER_BYTES] = UNKNOWN_NOTE_KIND; // the first note's kind
        let crc_off = img.bs - LOG_TRAILER_BYTES;
        let crc = crc32c::crc32c(&bytes[..crc_off]);
        bytes[crc_off..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(intact_log_seq(&bytes), Some(block.log_seq()));
        let f = OpenOptions::new().write(true).open(&img.path).unwrap();
        f.write_all_at(&bytes, data_byte(&img.cfg, *z, *o, 0))
            .unwrap();
        let (dev, report) = img.check();
        assert!(
            problems_of(&report, ProblemKind::LogBlock)
                .iter()
                .any(|p| p.detail.contains("unknown note kind")),
            "oob {oob}: {report:#?}"
        );
        match mount(dev) {
            Err(MountError::Format {
                source: FormatError::UnknownNoteKind { kind },
                ..
            }) => assert_eq!(kind, UNKNOWN_NOTE_KIND),
            Err(e) => panic!("oob {oob}: mount failed otherwise: {e}"),
            Ok(_) => panic!("oob {oob}: mount took an unknown note for the log's end"),
        }
    }
}
