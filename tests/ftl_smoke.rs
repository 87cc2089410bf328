//! End-to-end checks of the FTL on the simulator: format, I/O, GC, remount.

use zftl::core::tag::DataCrcImpl;
use zftl::core::{
    Backend, Driver, FormatOptions, FtlConfig, IoError, Request, SummedBlocks, TagPlacement,
};
use zftl::sim::rng::Rng;
use zftl::sim::{SimConfig, SimDevice};

mod common;
use common::watch::{Watched, Watcher};
use common::{assert_check_clean, block};

fn sim(oob: u32) -> SimDevice {
    sim_with_limits(oob, 8, 12)
}

fn sim_with_limits(oob: u32, max_open_zones: u32, max_active_zones: u32) -> SimDevice {
    let cfg = SimConfig {
        channels: 2,
        luns_per_channel: 2,
        blocks_per_lun: 32,
        pages_per_block: 64,
        oob_size_bytes: oob,
        zone_width_luns: 1,
        max_open_zones,
        max_active_zones,
        max_append_blocks: 16,
        max_transfer_blocks: 32,
        queue_depth: 64,
        ..SimConfig::small_for_tests()
    };
    SimDevice::create_memory(cfg).expect("sim")
}

/// Writes every logical block once, then `passes` × the logical size of
/// random overwrites (seeded): GC runs. Returns each block's version.
fn fill_and_churn(ftl: &mut Driver<SimDevice>, passes: u64, seed: u64) -> Vec<u32> {
    let bs = ftl.block_size();
    let n = ftl.logical_blocks();
    let mut version = vec![0u32; n as usize];
    for lba in 0..n {
        ftl.write(lba, &block(lba, 0, bs)).unwrap();
    }
    let mut x = seed;
    for i in 0..(passes * n) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let lba = (x >> 33) % n;
        version[lba as usize] += 1;
        ftl.write(lba, &block(lba, version[lba as usize], bs))
            .unwrap_or_else(|e| panic!("overwrite {i} of block {lba}: {e}"));
        if i % 97 == 0 {
            ftl.flush().unwrap();
        }
    }
    version
}

fn assert_versions(ftl: &mut Driver<SimDevice>, version: &[u32]) {
    let bs = ftl.block_size();
    for (lba, &v) in (0u64..).zip(version) {
        assert_eq!(ftl.read(lba, 1).unwrap(), block(lba, v, bs), "block {lba}");
    }
}

fn roundtrip(oob: u32, placement: TagPlacement) {
    let opts = FormatOptions {
        tag_placement: placement,
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(sim(oob), &opts, FtlConfig::default()).expect("format");
    let bs = ftl.block_size();
    let n = ftl.logical_blocks();
    // Fill, then overwrite at random to force GC.
    let mut version = fill_and_churn(&mut ftl, 4, 1);
    ftl.trim(3, 2).unwrap();
    ftl.flush().unwrap();
    let stats = ftl.stats();
    assert!(stats.gc_copy_blocks > 0, "GC never ran: {stats:?}");
    assert!(stats.erases > 0);
    let check = |ftl: &mut Driver<SimDevice>, version: &[u32]| {
        for lba in 0..n {
            let got = ftl.read(lba, 1).unwrap();
            if lba == 3 || lba == 4 {
                assert_eq!(got, vec![0; bs], "trimmed block {lba}");
            } else {
                assert_eq!(got, block(lba, version[lba as usize], bs), "block {lba}");
            }
        }
    };
    check(&mut ftl, &version);
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
    check(&mut ftl, &version);
    // Crash without shutdown after a flush: everything flushed survives.
    ftl.write(10, &block(10, 999, bs)).unwrap();
    version[10] = 999;
    ftl.flush().unwrap();
    let dev = ftl.into_backend();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount after crash");
    check(&mut ftl, &version);
}

#[test]
fn oob_tags_roundtrip_with_gc_and_remount() {
    roundtrip(64, TagPlacement::Auto);
}

#[test]
fn in_band_tags_roundtrip_with_gc_and_remount() {
    roundtrip(0, TagPlacement::Auto);
}

/// Writes whose data CRCs the caller took read back, pass `zftl check`
/// (which compares each block with its tag's CRC) and survive a crash;
/// CRCs taken over other block sizes are taken again by the core, and a
/// length that is not whole blocks of the volume is refused.
#[test]
fn summed_writes_read_back_check_clean_and_survive_a_crash() {
    for oob in [0, 16] {
        let mut ftl = Driver::format(sim(oob), &FormatOptions::default(), FtlConfig::default())
            .expect("format");
        let bs = ftl.block_size();
        let crc = ftl.data_crc();
        let summed = |lba: u64, blocks: &[u8], sum_bytes: usize| Request::WriteSummed {
            lba,
            blocks: SummedBlocks::new(blocks.to_vec(), sum_bytes, crc).unwrap(),
            fua: false,
        };
        let data: Vec<u8> = (0..8).flat_map(|l| block(l, 1, bs)).collect();
        ftl.call(summed(0, &data, bs)).unwrap();
        ftl.call(summed(8, &block(8, 1, bs), bs)).unwrap();
        let other: Vec<u8> = (9..13).flat_map(|l| block(l, 1, bs)).collect();
        ftl.call(summed(9, &other, 2 * bs)).unwrap();
        assert_eq!(
            ftl.call(summed(13, &vec![7; bs + bs / 2], bs / 2)),
            Err(IoError::BufferSize {
                expected_bytes: 2 * bs,
                actual_bytes: bs + bs / 2
            })
        );
        assert_eq!(
            SummedBlocks::new(vec![1; 3], 2, crc),
            Err(IoError::BufferSize {
                expected_bytes: 4,
                actual_bytes: 3
            })
        );
        ftl.flush().unwrap();
        let mut dev = ftl.into_backend();
        assert_check_clean(&mut dev, &format!("after summed writes (oob {oob})"));
        let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount after crash");
        for lba in 0..13 {
            assert_eq!(ftl.read(lba, 1).unwrap(), block(lba, 1, bs), "block {lba}");
        }
        assert_eq!(ftl.read(13, 1).unwrap(), vec![0; bs], "the refused write");
    }
}

/// Each volume runs the data CRC implementation its configuration names,
/// side by side in one process, and a volume remounted with another reads
/// the same blocks back (every implementation gives the same CRC-32C).
#[test]
fn volumes_in_one_process_run_their_own_data_crc() {
    let config = |crc| FtlConfig {
        data_crc: crc,
        ..FtlConfig::default()
    };
    let defaulted = Driver::format(sim(64), &FormatOptions::default(), config(None)).unwrap();
    assert_eq!(defaulted.data_crc(), DataCrcImpl::selected());
    let mut volumes: Vec<(DataCrcImpl, Driver<SimDevice>)> = DataCrcImpl::ALL
        .into_iter()
        .enumerate()
        .map(|(i, imp)| {
            let oob = if i % 2 == 0 { 64 } else { 0 };
            let opts = FormatOptions::default();
            (
                imp,
                Driver::format(sim(oob), &opts, config(Some(imp))).unwrap(),
            )
        })
        .collect();
    for (imp, ftl) in &mut volumes {
        assert_eq!(ftl.data_crc(), *imp);
        let bs = ftl.block_size();
        ftl.write(0, &block(0, 1, bs)).unwrap();
        let blocks = SummedBlocks::new(block(1, 1, bs), bs, ftl.data_crc()).unwrap();
        let fua = false;
        ftl.call(Request::WriteSummed {
            lba: 1,
            blocks,
            fua,
        })
        .unwrap();
        ftl.flush().unwrap();
    }
    for (i, (imp, ftl)) in volumes.into_iter().enumerate() {
        let bs = ftl.block_size();
        let mut dev = ftl.into_backend();
        assert_check_clean(&mut dev, &format!("written with {imp:?}"));
        let other = DataCrcImpl::ALL[(i + 1) % DataCrcImpl::ALL.len()];
        let mut ftl = Driver::mount(dev, config(Some(other))).expect("mount");
        assert_eq!(ftl.data_crc(), other);
        for lba in 0..2 {
            let got = ftl.read(lba, 1).unwrap();
            assert_eq!(
                got,
                block(lba, 1, bs),
                "{imp:?} then {other:?}: block {lba}"
            );
        }
    }
}

#[test]
fn extents_report_holes_and_thin_volume_runs_out_cleanly() {
    // A thin volume four times larger than its media.
    let dev = sim(64);
    let physical = dev.config().zone_capacity_blocks() * 128;
    let opts = FormatOptions {
        logical_blocks: Some(4 * physical),
        ..FormatOptions::default()
    };
    let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).expect("format");
    let bs = ftl.block_size();
    ftl.write(10, &block(10, 1, bs)).unwrap();
    ftl.write(11, &block(11, 1, bs)).unwrap();
    ftl.flush().unwrap();
    ftl.write(20, &block(20, 1, bs)).unwrap(); // still buffered: counts as mapped
    let runs = ftl.extents(8, 16).unwrap();
    let shape: Vec<(u32, bool)> = runs.iter().map(|e| (e.block_count, e.mapped)).collect();
    assert_eq!(
        shape,
        vec![(2, false), (2, true), (8, false), (1, true), (3, false)]
    );
    ftl.trim(10, 1).unwrap();
    let runs = ftl.extents(10, 2).unwrap();
    assert_eq!(
        runs.iter()
            .map(|e| (e.block_count, e.mapped))
            .collect::<Vec<_>>(),
        vec![(1, false), (1, true)]
    );

    // Fill new blocks until the media says no: every acknowledged block reads back.
    let mut written = Vec::new();
    let mut lba = 1000;
    loop {
        match ftl.write(lba, &block(lba, 7, bs)) {
            Ok(()) => written.push(lba),
            Err(zftl::core::IoError::NoSpace) => break,
            Err(e) => panic!("unexpected error filling a thin volume: {e}"),
        }
        lba += 3;
        assert!(
            lba < 4 * physical,
            "a thin volume 4x the media never ran out of space"
        );
    }
    ftl.flush().unwrap();
    let dev = ftl.shutdown().unwrap();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
    for &l in &written {
        assert_eq!(ftl.read(l, 1).unwrap(), block(l, 7, bs), "block {l}");
    }
    assert_eq!(ftl.read(10, 1).unwrap(), vec![0; bs]);
}

/// In band, a zone summary larger than one append or one read (small
/// blocks, big zones) goes out in several appends, in order, and comes back
/// in several reads: GC believes every summary (no map walk), nothing is
/// lost, and `check` finds every summary sound.
#[test]
fn in_band_summaries_span_several_commands() {
    let cfg = SimConfig {
        channels: 2,
        luns_per_channel: 2,
        blocks_per_lun: 16,
        pages_per_block: 512,
        page_size_bytes: 512,
        oob_size_bytes: 0,
        program_unit_pages: 1,
        zone_width_luns: 2,
        max_open_zones: 8,
        max_active_zones: 12,
        max_append_blocks: 4,
        max_transfer_blocks: 4,
        queue_depth: 64,
        ..SimConfig::small_for_tests()
    };
    let dev = SimDevice::create_memory(cfg).expect("sim");
    let g = dev.geometry().clone();
    let summary_blocks = zftl::core::layout::summary_blocks_per_zone(&g, true);
    assert!(
        summary_blocks > u64::from(g.max_append_blocks)
            && summary_blocks > u64::from(g.max_transfer_blocks),
        "{summary_blocks} summary blocks"
    );
    let mut ftl =
        Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).expect("format");
    let version = fill_and_churn(&mut ftl, 3, 7);
    ftl.flush().unwrap();
    let s = ftl.stats();
    assert!(s.erases > 0 && s.summary_write_blocks > 0, "{s:#?}");
    assert_eq!(s.summary_map_walks, 0, "{s:#?}");
    assert_eq!(s.write_errors, 0, "{s:#?}");
    assert_versions(&mut ftl, &version);
    let mut dev = ftl.shutdown().unwrap();
    let report = zftl::core::check::check(&mut dev);
    assert!(report.is_clean(), "{report:#?}");
}

/// A device that only takes writes of several blocks is refused at format
/// with a reason, not half-formatted.
#[test]
fn write_unit_above_one_block_is_refused_clearly() {
    let cfg = SimConfig {
        program_unit_pages: 4,
        ..SimConfig::small_for_tests()
    };
    let dev = SimDevice::create_memory(cfg).expect("sim");
    match Driver::format(dev, &FormatOptions::default(), FtlConfig::default()) {
        Err(zftl::core::MountError::Unsupported(why)) => {
            assert!(why.contains("write unit of 4 blocks"), "{why}")
        }
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("formatted a device with a 4-block write unit"),
    }
}

/// The core keeps within the device's open and active zone limits: lanes,
/// zones draining their appends or waiting for their summary, and zones
/// sealed early never push the device past them (a refused append would
/// retire a healthy zone), and a lane waiting for the limit never wedges
/// the core.
#[test]
fn tight_zone_limits_are_never_exceeded() {
    for (oob, placement) in [(64, TagPlacement::Auto), (0, TagPlacement::InBand)] {
        for (max_open, max_active) in [(4, 4), (5, 6), (8, 8)] {
            let what = format!("oob {oob}, open {max_open}, active {max_active}");
            let opts = FormatOptions {
                tag_placement: placement,
                gc_reserve_zones: 2,
                ..FormatOptions::default()
            };
            let dev = sim_with_limits(oob, max_open, max_active);
            let mut ftl = Driver::format(dev, &opts, FtlConfig::default()).expect("format");
            let version = fill_and_churn(&mut ftl, 6, u64::from(max_open));
            ftl.flush().unwrap();
            let s = ftl.stats();
            assert!(s.erases > 0, "{what}: GC never ran");
            assert_eq!(s.write_errors, 0, "{what}: {s:#?}");
            assert_eq!(s.retired_zones, 0, "{what}: {s:#?}");
            assert_versions(&mut ftl, &version);
        }
    }
}

/// A block rewritten soon after its last write is hot when it comes in a
/// short write, and cold in a write of 64 KiB or more: that is part of a
/// sequential stream, rewritten a whole stream later.
#[test]
fn soon_rewritten_blocks_are_hot_only_in_short_writes() {
    for (write_bytes, hot_expected) in [(4096, true), (32 << 10, true), (64 << 10, false)] {
        let mut ftl = Driver::format(sim(64), &FormatOptions::default(), FtlConfig::default())
            .expect("format");
        let bs = ftl.block_size();
        let blocks_per_write = (write_bytes / bs) as u64;
        let region_blocks = 64; // one zone: every block's old version is young
        let mut hot = 0;
        for pass in 0..2u64 {
            let before = ftl.stats().host_hot_blocks;
            for lba in (0..region_blocks).step_by(blocks_per_write as usize) {
                ftl.write(lba, &vec![pass as u8; write_bytes]).unwrap();
            }
            ftl.flush().unwrap();
            hot = ftl.stats().host_hot_blocks - before;
            if pass == 0 {
                assert_eq!(hot, 0, "{write_bytes}-byte writes: first writes went hot");
            }
        }
        assert_eq!(
            hot > 0,
            hot_expected,
            "{write_bytes}-byte writes: {hot} of {region_blocks} rewritten blocks went hot"
        );
    }
}

/// Sequential overwrites from block 0, in rounds of a little more than the
/// logical size, 32 requests in flight (as `zftl bench zns` writes), on the
/// guest bench's geometry in blocks (28 zones of 16384 blocks, with
/// 512-byte blocks to keep it small): every block reaches the media once.
/// GC used to start as soon as a second write stream (here for the few
/// blocks written twice in a row at the wrap) took a zone, then copied
/// each zone just before the host overwrote it: 1.76 to 2.54 media blocks
/// per host block in these rounds.
#[test]
fn sequential_overwrites_of_large_zones_are_not_collected() {
    let dev = guest_bench_shape(4096, 512);
    let mut ftl = Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).unwrap();
    let slots = ftl.logical_blocks() / 32;
    for round in 0..4 {
        let (host, copies, _) = sequential_round(&mut ftl, 32, slots + 23);
        assert!(
            copies * 20 <= host,
            "round {round}: GC copied {copies} blocks for {host} host blocks"
        );
    }
}

/// 28 zones of 4 parallel units, as the guest's bench namespace has, with
/// `pages_per_block` pages of `block_bytes` per unit (a zone is four units).
fn guest_bench_shape(pages_per_block: u32, block_bytes: u32) -> SimDevice {
    let cfg = SimConfig {
        channels: 4,
        luns_per_channel: 1,
        blocks_per_lun: 28,
        pages_per_block,
        page_size_bytes: block_bytes,
        zone_width_luns: 4,
        max_open_zones: 16,
        max_active_zones: 24,
        max_append_blocks: 128,
        max_transfer_blocks: 128,
        ..SimConfig::default()
    };
    SimDevice::create_memory(cfg).expect("sim")
}

/// Writes `requests` writes of `blocks_per_write` from block 0 on, going
/// round to block 0 at the end of the volume, 32 in flight, then flushes:
/// (host blocks, GC copies, host blocks that went hot) of the round.
fn sequential_round<B: Backend>(
    ftl: &mut Driver<B>,
    blocks_per_write: u64,
    requests: u64,
) -> (u64, u64, u64) {
    let slots = ftl.logical_blocks() / blocks_per_write;
    let before = ftl.stats();
    let lba_of = |i: u64| (i % slots) * blocks_per_write;
    write_requests(ftl, 32, blocks_per_write, requests, lba_of, |_| {});
    let after = ftl.stats();
    (
        after.host_write_blocks - before.host_write_blocks,
        after.gc_copy_blocks - before.gc_copy_blocks,
        after.host_hot_blocks - before.host_hot_blocks,
    )
}

/// Writes `requests` writes of `blocks_per_write` blocks at `lba_of(i)`,
/// `depth` in flight, calling `after_turn` after each turn of the core;
/// then flushes.
fn write_requests<B: Backend>(
    ftl: &mut Driver<B>,
    depth: u32,
    blocks_per_write: u64,
    requests: u64,
    mut lba_of: impl FnMut(u64) -> u64,
    mut after_turn: impl FnMut(&Driver<B>),
) {
    let data = vec![0x5a; ftl.block_size() * blocks_per_write as usize];
    let (mut submitted, mut in_flight) = (0u64, 0u32);
    while submitted < requests || in_flight > 0 {
        while submitted < requests && in_flight < depth {
            let request = Request::Write {
                lba: lba_of(submitted),
                data: data.clone(),
                fua: false,
            };
            match ftl.try_submit(submitted, request) {
                Ok(()) => (submitted, in_flight) = (submitted + 1, in_flight + 1),
                Err(IoError::Busy) => break,
                Err(e) => panic!("write {submitted}: {e}"),
            }
        }
        ftl.turn().unwrap();
        after_turn(ftl);
        while let Some(reply) = ftl.take_reply() {
            reply.result.unwrap();
            in_flight -= 1;
        }
    }
    ftl.flush().unwrap();
}

/// Rounds of 128 KiB writes that each start again at block 0 and run past
/// the end of the volume, by 10 % and by 30 % of it, 32 requests in flight:
/// `zftl bench zns`'s time-based rounds, on its geometry in zones (28) with
/// zones of 8192 4 KiB blocks (half its size). Each round rewrites at once
/// what the round before wrote past the end. Those blocks looked hot and
/// opened a zone of their own; GC, counting whole free zones, sat on its
/// threshold all through a sequential overwrite already, and now copied
/// zones just before the host overwrote them: up to 1.57 media blocks per
/// host block in a round (1.0 to 1.025 now: what GC still copies is the
/// zone that holds both the end of the volume and the blocks past it).
#[test]
fn sequential_rounds_that_wrap_are_not_collected() {
    for overshoot_percent in [10, 30] {
        let dev = guest_bench_shape(2048, 4096);
        let mut ftl = Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).unwrap();
        let slots = ftl.logical_blocks() / 32;
        for round in 0..5 {
            let requests = slots * (100 + overshoot_percent) / 100;
            let (host, copies, hot) = sequential_round(&mut ftl, 32, requests);
            let what = format!("{overshoot_percent} % past the end, round {round}");
            assert_eq!(hot, 0, "{what}: {hot} of {host} host blocks went hot");
            assert!(
                copies * 25 <= host,
                "{what}: GC copied {copies} blocks for {host} host blocks"
            );
        }
    }
}

/// 4 KiB random writes, 16 in flight (as `zftl bench nbd`'s fio jobs), on
/// the device `zftl serve --memory-mib 1024` serves: 384 zones of 1024
/// blocks, a third of them spare. GC must start early enough that the
/// zones the write lanes open never leave the free zones at the reserve,
/// where GC runs flat out on the thread that answers requests. Starting two
/// zones above the reserve, the lanes' unwritten tails made up most of
/// that cushion: the free zones sat at the reserve after 1082 of the
/// second pass's 8192 turns.
#[test]
fn random_writes_on_many_small_zones_keep_the_reserve_free() {
    let cfg = SimConfig {
        blocks_per_lun: 96,
        timing: None,
        ..SimConfig::default()
    };
    let zone_blocks = u64::from(cfg.zone_width_luns * cfg.pages_per_block);
    let zones = u64::from(cfg.lun_count() * cfg.blocks_per_lun / cfg.zone_width_luns);
    let options = FormatOptions {
        logical_blocks: Some(zones * zone_blocks * 2 / 3),
        ..FormatOptions::default()
    };
    let reserve = options.gc_reserve_zones;
    let dev = SimDevice::create_memory(cfg).expect("simulator");
    let mut ftl = Driver::format(dev, &options, FtlConfig::default()).unwrap();
    let logical = ftl.logical_blocks();
    for _ in 0..2 {
        write_requests(&mut ftl, 16, 32, logical / 32, |i| i * 32, |_| {});
    }
    let mut rng = Rng::new(23);
    for pass in 0..3 {
        let mut turns_at_reserve = 0u64;
        let count = |f: &Driver<SimDevice>| {
            turns_at_reserve += u64::from(f.stats().free_zones <= reserve);
        };
        write_requests(&mut ftl, 16, 1, logical / 2, |_| rng.below(logical), count);
        // The first pass turns the sequential layout into a random one.
        if pass > 0 {
            assert_eq!(turns_at_reserve, 0, "pass {pass}: turns at the reserve");
        }
    }
}

/// A write larger than the write buffer is refused with `TooLarge`
/// (the limit the volume reports), not admitted forever or panicked on,
/// even when `max_request_blocks` says more.
#[test]
fn a_write_larger_than_the_buffer_is_refused_clearly() {
    let cfg = FtlConfig {
        write_buffer_blocks: 64,
        max_request_blocks: 256,
        ..FtlConfig::default()
    };
    let mut ftl = Driver::format(sim(64), &FormatOptions::default(), cfg).unwrap();
    assert_eq!(ftl.ftl().max_request_blocks(), 64);
    let bs = ftl.block_size();
    assert!(matches!(
        ftl.write(0, &vec![7; 65 * bs]),
        Err(IoError::TooLarge { max_blocks: 64, .. })
    ));
    ftl.write(0, &vec![7; 64 * bs]).unwrap();
    assert_eq!(ftl.read(63, 1).unwrap(), vec![7; bs]);
}

/// Counts the appends in flight to each zone and keeps the most it saw.
#[derive(Default)]
struct AppendCounter {
    zone_of: std::collections::HashMap<u64, u32>,
    in_flight: std::collections::HashMap<u32, u32>,
    most: u32,
}

impl Watcher for AppendCounter {
    fn submitted(&mut self, _: &zftl::core::Geometry, tag: u64, command: &zftl::core::Command) {
        if let zftl::core::Command::Append { zone, .. } = command {
            self.zone_of.insert(tag, *zone);
            let n = self.in_flight.entry(*zone).or_default();
            *n += 1;
            self.most = self.most.max(*n);
        }
    }
    fn completed(&mut self, tag: u64) {
        if let Some(zone) = self.zone_of.remove(&tag) {
            *self.in_flight.get_mut(&zone).expect("counted") -= 1;
        }
    }
}

/// The most appends in flight to one zone while a volume on a device with
/// timing on is filled with 64 KiB writes and rewritten at random (GC
/// running), with `FtlConfig::zone_max_appends` = `most`.
fn most_appends_per_zone(most: u32) -> u32 {
    let cfg = SimConfig {
        timing: Some(zftl::sim::Timing::default()),
        ..sim(64).config().clone()
    };
    let dev = Watched {
        inner: SimDevice::create_memory(cfg).expect("sim"),
        watcher: AppendCounter::default(),
    };
    let ftl_cfg = FtlConfig {
        zone_max_appends: most,
        ..FtlConfig::default()
    };
    let mut ftl = Driver::format(dev, &FormatOptions::default(), ftl_cfg).expect("format");
    let bs = ftl.block_size();
    let n = ftl.logical_blocks();
    for lba in (0..n).step_by(16) {
        let count = 16.min(n - lba);
        let data: Vec<u8> = (lba..lba + count).flat_map(|b| block(b, 0, bs)).collect();
        ftl.write(lba, &data).unwrap();
    }
    let mut rng = Rng::new(7);
    for _ in 0..n {
        let lba = rng.below(n);
        ftl.write(lba, &block(lba, 1, bs)).unwrap();
    }
    ftl.flush().unwrap();
    assert!(ftl.stats().gc_copy_blocks > 0, "GC never ran");
    ftl.backend().watcher.most
}

#[test]
fn zone_max_appends_bounds_the_appends_in_flight_per_zone() {
    let unbounded = most_appends_per_zone(0);
    assert!(unbounded > 2, "without a bound only {unbounded} in flight");
    for most in [1, 2] {
        let seen = most_appends_per_zone(most);
        assert!(
            seen <= most,
            "bound {most}: {seen} appends in flight to a zone"
        );
    }
}
