//! Appends that fail on the host side (`DeviceError::HostIo`: the kernel's
//! `EINTR` for commands a controller reset aborted) are not media faults:
//! the FTL seals the zone and writes elsewhere, retires nothing, loses
//! nothing, and mounts again; a device that fails every append still ends
//! read-only instead of looping. The same failing backend also fails the
//! metadata log's writes on the media, to end a volume read-only and
//! remount it, and the superblock zones', to end it read-only for good.

use zftl::core::backend::ZoneId;
use zftl::core::{
    Backend, Command, Completion, DeviceError, Driver, FormatOptions, FtlConfig, Geometry, IoError,
    SubmitError, ZoneInfo, ZoneState,
};
use zftl::sim::rng::Rng;
use zftl::sim::{SimConfig, SimDevice};

mod common;
use common::{block, run_seeds, Coverage};

/// The simulator, with some commands reported as failed on the host side.
struct HostFailures {
    dev: SimDevice,
    fail: Fail,
    appends: u64,
    commands: u64,
    /// Tags of submitted commands to complete with `HostIo`.
    failing_tags: Vec<u64>,
    /// Failed completions not yet delivered: a stalled controller answers
    /// nothing until its reset, which then aborts everything at once.
    held: Vec<Completion>,
    /// Zone reports to fail on the host side, from the next one on.
    failing_reports: u32,
}

/// Which commands fail on the host side.
enum Fail {
    /// The appends numbered in the range (counting appends from 0): they
    /// run on the media, as an abort after the device wrote them would.
    Appends(std::ops::Range<u64>),
    /// Controller stalls: every command numbered in one of the ranges
    /// (counting all commands from 0), of any kind, fails; each one ran on
    /// the media or not, as the generator draws. Their completions come
    /// together when the range ends (the reset), or when the FTL waits
    /// with nothing else in flight (the stall's timeout).
    Stalls {
        ranges: Vec<std::ops::Range<u64>>,
        rng: Rng,
    },
    /// Every command fails at once, without running: a controller that
    /// resets again and again.
    All,
    /// The next `left` commands fail at once, without running: a
    /// controller that resets that many times in a row.
    Next { left: u64 },
    /// Writes outside the superblock zones (the metadata log's) fail with
    /// a program failure, a media fault, without running: all after the
    /// first `ok` of them.
    LogWrites { ok: u64 },
    /// The next `left` writes outside the superblock zones fail as under
    /// `LogWrites`; later ones go through.
    NextLogWrites { left: u64 },
    /// Both superblock zones failed: their writes and resets fail with a
    /// media fault without running, and their reports say read-only, as a
    /// device leaves a zone after a program failure.
    SuperZonesFailed,
}

impl HostFailures {
    fn new(dev: SimDevice) -> HostFailures {
        HostFailures {
            dev,
            fail: Fail::Appends(0..0),
            appends: 0,
            commands: 0,
            failing_tags: Vec::new(),
            held: Vec::new(),
            failing_reports: 0,
        }
    }

    /// How the command about to be submitted fails, if it does.
    fn fails(&mut self, command: &Command) -> Option<Failure> {
        let append = matches!(command, Command::Append { .. });
        let (n, c) = (self.appends, self.commands);
        self.appends += u64::from(append);
        self.commands += 1;
        match &mut self.fail {
            Fail::Appends(range) => (append && range.contains(&n)).then_some(Failure::AfterRunning),
            Fail::Stalls { ranges, rng } => ranges.iter().any(|r| r.contains(&c)).then(|| {
                if rng.below(2) == 0 {
                    Failure::AfterRunning
                } else {
                    Failure::Instead(abort())
                }
            }),
            Fail::All => Some(Failure::Instead(abort())),
            Fail::Next { left } => (*left > 0).then(|| {
                *left -= 1;
                Failure::Instead(abort())
            }),
            Fail::LogWrites { ok } => log_write_failure(ok, command).map(Failure::Instead),
            Fail::SuperZonesFailed => super_zone_failure(command).map(Failure::Instead),
            Fail::NextLogWrites { left } if *left > 0 => {
                let failure = log_write_failure(&mut 0, command);
                *left -= u64::from(failure.is_some());
                failure.map(Failure::Instead)
            }
            Fail::NextLogWrites { .. } => None,
        }
    }

    /// Whether the controller is stalled: the next command falls in a range.
    fn stalled(&self) -> bool {
        match &self.fail {
            Fail::Appends(_)
            | Fail::All
            | Fail::Next { .. }
            | Fail::LogWrites { .. }
            | Fail::SuperZonesFailed
            | Fail::NextLogWrites { .. } => false,
            Fail::Stalls { ranges, .. } => ranges.iter().any(|r| r.contains(&self.commands)),
        }
    }

    /// The stall times out: its range ends here.
    fn time_out(&mut self) {
        if let Fail::Stalls { ranges, .. } = &mut self.fail {
            for r in ranges.iter_mut().filter(|r| r.contains(&self.commands)) {
                r.end = self.commands;
            }
        }
    }
}

/// How a command fails: on the host side once it ran on the media, or
/// with `error` instead of running.
enum Failure {
    AfterRunning,
    Instead(DeviceError),
}

/// The media failure of a metadata log write under `Fail::LogWrites`:
/// writes outside the superblock zones, once `ok` of them went through.
fn log_write_failure(ok: &mut u64, command: &Command) -> Option<DeviceError> {
    let &Command::Write {
        zone,
        offset_blocks,
        ..
    } = command
    else {
        return None;
    };
    if zone < 2 {
        return None; // a superblock copy
    }
    if *ok > 0 {
        *ok -= 1;
        return None;
    }
    Some(DeviceError::ProgramFailed {
        zone,
        offset_blocks,
    })
}

/// The media failure of a write or reset of a superblock zone under
/// `Fail::SuperZonesFailed`.
fn super_zone_failure(command: &Command) -> Option<DeviceError> {
    match *command {
        Command::Write {
            zone,
            offset_blocks,
            ..
        } if zone < 2 => Some(DeviceError::ProgramFailed {
            zone,
            offset_blocks,
        }),
        Command::Reset { zone } if zone < 2 => Some(DeviceError::EraseFailed { zone }),
        _ => None,
    }
}

fn abort() -> DeviceError {
    DeviceError::HostIo {
        op: "command",
        kind: std::io::ErrorKind::Interrupted,
        message: "aborted by a controller reset".into(),
    }
}

fn aborted(tag: u64) -> Completion {
    Completion {
        tag,
        result: Err(abort()),
    }
}

impl Backend for HostFailures {
    fn geometry(&self) -> &Geometry {
        self.dev.geometry()
    }
    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        if self.failing_reports > 0 {
            self.failing_reports -= 1;
            return Err(abort());
        }
        let info = self.dev.zone_info(zone)?;
        Ok(match self.fail {
            Fail::SuperZonesFailed if zone < 2 => ZoneInfo {
                state: ZoneState::ReadOnly,
                ..info
            },
            _ => info,
        })
    }
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        if self.in_flight() >= self.geometry().queue_depth as usize {
            return Err(SubmitError::Busy);
        }
        match self.fails(&command) {
            None => self.dev.submit(tag, command)?,
            Some(Failure::AfterRunning) => {
                self.dev.submit(tag, command)?;
                self.failing_tags.push(tag);
            }
            Some(Failure::Instead(error)) => self.held.push(Completion {
                tag,
                result: Err(error),
            }),
        }
        Ok(())
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let mut done = Vec::new();
        self.dev.reap(&mut done, usize::MAX);
        for c in done {
            match self.failing_tags.iter().position(|&t| t == c.tag) {
                Some(i) => {
                    self.failing_tags.swap_remove(i);
                    self.held.push(aborted(c.tag));
                }
                None => self.held.push(c),
            }
        }
        // Completions of commands that did not fail wait with the rest
        // only while stalled; otherwise all go out in order.
        let mut n = 0;
        let stalled = self.stalled();
        let mut i = 0;
        while i < self.held.len() && n < max {
            let failed = matches!(self.held[i].result, Err(DeviceError::HostIo { .. }));
            if stalled && failed {
                i += 1;
                continue;
            }
            out.push(self.held.remove(i));
            n += 1;
        }
        n
    }
    fn wait(&mut self) -> Result<(), DeviceError> {
        if self.held.is_empty() || self.dev.in_flight() > 0 {
            return self.dev.wait();
        }
        if self.stalled() {
            self.time_out();
        }
        Ok(())
    }
    fn in_flight(&self) -> usize {
        self.dev.in_flight() + self.held.len()
    }
    fn clock_ns(&self) -> u64 {
        self.dev.clock_ns()
    }
}

fn format() -> Driver<HostFailures> {
    format_with(FtlConfig::default())
}

fn format_with(cfg: FtlConfig) -> Driver<HostFailures> {
    let dev = SimDevice::create_memory(SimConfig::small_for_tests()).expect("sim");
    Driver::format(HostFailures::new(dev), &FormatOptions::default(), cfg).expect("format")
}

/// Writes every logical block with `version`, a flush every 64 blocks.
fn write_all(ftl: &mut Driver<HostFailures>, version: u32) -> Result<(), IoError> {
    let bs = ftl.block_size();
    for lba in 0..ftl.logical_blocks() {
        ftl.write(lba, &block(lba, version, bs))?;
        if lba % 64 == 63 {
            ftl.flush()?;
        }
    }
    ftl.flush()
}

fn assert_all(ftl: &mut Driver<HostFailures>, version: u32) {
    let bs = ftl.block_size();
    for lba in 0..ftl.logical_blocks() {
        assert_eq!(
            ftl.read(lba, 1).unwrap(),
            block(lba, version, bs),
            "block {lba}"
        );
    }
}

#[test]
fn a_burst_of_aborted_appends_retires_nothing_and_loses_nothing() {
    let mut ftl = format();
    write_all(&mut ftl, 1).unwrap();
    // As many aborted appends as there are zones beyond the GC reserve:
    // retired, they would leave the full volume no room.
    let burst = u64::from(ftl.backend().geometry().zone_count) / 2;
    let next = ftl.backend().appends;
    ftl.backend_mut().fail = Fail::Appends(next + 3..next + 3 + burst);
    for version in 2..4 {
        write_all(&mut ftl, version).expect("writes go on after the aborted appends");
    }
    let stats = ftl.stats();
    assert_eq!(stats.write_errors, burst, "{stats:?}");
    assert_eq!(stats.retired_zones, 0, "{stats:?}");
    assert_all(&mut ftl, 3);
    // The aborted appends' blocks are on the media, older than their
    // rewrites: recovery must not bring them back.
    let dev = ftl.into_backend();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
    assert_all(&mut ftl, 3);
}

#[test]
fn a_device_failing_every_append_ends_read_only() {
    // Each failed append seals a zone, and the core retires zones once
    // `max_inflight_commands` appends in a row failed. With GC starting two
    // zones above the reserve, or GC's appends spread over the zone groups
    // (`gc_lanes` above 1: fewer, longer appends per zone), this small
    // device runs out of zones (NoSpace) first: it ends read-only either
    // way, and with one GC lane it gets to retiring, which is tested too.
    for gc_lanes in [1, 4] {
        let mut ftl = format_with(FtlConfig {
            gc_start_free_zones: 1,
            gc_lanes,
            ..FtlConfig::default()
        });
        write_all(&mut ftl, 1).unwrap();
        ftl.backend_mut().fail = Fail::Appends(ftl.backend().appends..u64::MAX);
        let err = write_all(&mut ftl, 2).expect_err("a dead device cannot take writes");
        assert!(
            matches!(
                err,
                IoError::NoSpace | IoError::ReadOnly | IoError::Device { .. }
            ),
            "gc_lanes {gc_lanes}: {err:?}"
        );
        assert!(ftl.ftl().is_read_only(), "gc_lanes {gc_lanes}");
        if gc_lanes == 1 {
            assert!(ftl.stats().retired_zones > 0);
        }
    }
}

/// Eight stalls of 1 to 16 commands each, at random points of the next
/// three passes over the volume (`commands`: those of the first pass).
fn stall_ranges(rng: &mut Rng, commands: u64) -> Vec<std::ops::Range<u64>> {
    (0..8)
        .map(|_| {
            let at = commands + rng.below(3 * commands);
            at..at + 1 + rng.below(16)
        })
        .collect()
}

/// A controller reset aborts every command in flight, of every kind (the
/// kernel completes each with `EINTR`; the device ran it or not). Flushes
/// and zone resets are issued again, appends rewritten elsewhere: the
/// writes and flushes all succeed, no zone is retired, nothing is lost,
/// `zftl check` finds nothing wrong (the log holds rewrites whose aborted
/// originals may have landed) and the volume mounts again.
#[test]
fn controller_resets_abort_commands_of_every_kind_and_lose_nothing() {
    run_seeds(
        "controller_resets_abort_commands_of_every_kind_and_lose_nothing",
        24,
        |seed| {
            let mut ftl = format();
            write_all(&mut ftl, 1).unwrap();
            let mut rng = Rng::new(seed);
            let ranges = stall_ranges(&mut rng, ftl.backend().commands);
            ftl.backend_mut().fail = Fail::Stalls { ranges, rng };
            for version in 2..5 {
                if let Err(e) = write_all(&mut ftl, version) {
                    panic!(
                        "writes and flushes go on after aborts: {e:?} {:?}",
                        ftl.stats()
                    );
                }
            }
            let stats = ftl.stats();
            assert!(stats.write_errors > 0, "no abort landed: {stats:?}");
            assert_eq!(stats.retired_zones, 0, "{stats:?}");
            assert_all(&mut ftl, 4);
            let mut dev = ftl.into_backend();
            dev.fail = Fail::Appends(0..0);
            common::assert_check_clean(&mut dev, "after aborts");
            let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
            assert_all(&mut ftl, 4);
            Coverage::default()
        },
    );
}

/// The same stalls, then a power cut at a random point of the writes:
/// mount finds every block at least at the version its last flush made
/// durable and at most at the last version written, however the aborted
/// writes (landed or not, rewritten or not) lie on the media.
#[test]
fn a_power_cut_after_controller_resets_keeps_every_flushed_write() {
    run_seeds(
        "a_power_cut_after_controller_resets_keeps_every_flushed_write",
        24,
        |seed| {
            let mut ftl = format();
            write_all(&mut ftl, 1).unwrap();
            let blocks = ftl.logical_blocks();
            let mut rng = Rng::new(seed);
            let ranges = stall_ranges(&mut rng, ftl.backend().commands);
            let cut_at = rng.below(3 * blocks);
            ftl.backend_mut().fail = Fail::Stalls { ranges, rng };
            let bs = ftl.block_size();
            let (mut durable, mut written) =
                (vec![1u32; blocks as usize], vec![1u32; blocks as usize]);
            let mut n = 0;
            'writes: for version in 2..5 {
                for lba in 0..blocks {
                    if n == cut_at {
                        break 'writes;
                    }
                    n += 1;
                    ftl.write(lba, &common::pattern(lba, version, bs))
                        .expect("write");
                    written[lba as usize] = version;
                    if lba % 64 == 63 {
                        ftl.flush().expect("flush");
                        durable.clone_from(&written);
                    }
                }
            }
            let mut dev = ftl.into_backend();
            dev.fail = Fail::Appends(0..0);
            dev.held.clear();
            dev.failing_tags.clear();
            dev.dev.power_cut();
            dev.dev.power_on().expect("power on");
            let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
            for lba in 0..blocks {
                let data = ftl.read(lba, 1).expect("read");
                let v = if data == block(lba, 1, bs) {
                    1 // written by `write_all`, with `block`
                } else {
                    common::decode(lba, &data).unwrap_or_else(|e| panic!("{e}"))
                };
                let (d, w) = (durable[lba as usize], written[lba as usize]);
                assert!(
                    d <= v && v <= w,
                    "block {lba}: version {v}, flushed {d}, written {w}"
                );
            }
            Coverage::default()
        },
    );
}

/// One stall over the next `commands` commands (run or not as `seed` draws).
fn stall_next(dev: &mut HostFailures, commands: u64, seed: u64) {
    let first = dev.commands;
    dev.fail = Fail::Stalls {
        ranges: std::iter::once(first..first + commands).collect(),
        rng: Rng::new(seed),
    };
}

/// A stall while mounting: the mount's first zone reports and first reads
/// (the superblocks) are aborted on the host side; mount asks again and
/// succeeds.
#[test]
fn a_mount_reads_again_what_a_controller_reset_aborted() {
    let mut ftl = format();
    write_all(&mut ftl, 1).unwrap();
    let mut dev = ftl.shutdown().expect("shutdown");
    stall_next(&mut dev, 3, 7);
    dev.failing_reports = 3;
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount after aborted reads");
    assert_all(&mut ftl, 1);
}

/// A host read aborted on the host side more times than a media error is
/// retried (a controller that resets again while the read is retried): it
/// is read again, `HOST_ATTEMPTS` times, apart from the media retries.
/// Before, the aborts counted as media attempts and the third failed the
/// read; `crash_torture_with_controller_resets` at 2 % resets failed so at
/// its seed 12.
#[test]
fn a_host_read_is_read_again_after_repeated_controller_resets() {
    let mut ftl = format();
    write_all(&mut ftl, 1).unwrap();
    let dev = ftl.shutdown().expect("shutdown");
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
    let bs = ftl.block_size();
    let retries = ftl.stats().host_retries;
    for lba in [0, 77, ftl.logical_blocks() - 1] {
        ftl.backend_mut().fail = Fail::Next { left: 4 };
        let got = ftl.read(lba, 1).expect("read after four aborts");
        assert_eq!(got, block(lba, 1, bs), "block {lba}");
    }
    assert_eq!(
        ftl.stats().host_retries,
        retries + 12,
        "each read retried 4 times"
    );
}

/// A stall under `zftl check`: its first zone reports and reads are
/// aborted on the host side; check asks again and finds the volume clean.
#[test]
fn a_check_reads_again_what_a_controller_reset_aborted() {
    let mut ftl = format();
    write_all(&mut ftl, 1).unwrap();
    let mut dev = ftl.shutdown().expect("shutdown");
    let first = dev.commands;
    stall_next(&mut dev, 3, 7);
    dev.failing_reports = 3;
    common::assert_check_clean(&mut dev, "after aborted reads");
    assert!(
        dev.commands > first + 3,
        "the stall did not cover the reads"
    );
}

/// Both superblock zones fail: the next checkpoint cannot be recorded and
/// the volume goes read-only, losing nothing flushed. It stays so: a mount
/// finds no zone to record its checkpoint in and mounts read-only (every
/// flushed block reads back, writes answer `ReadOnly`) without committing
/// anything, so a second mount still finds the last record's checkpoint
/// whole.
#[test]
fn a_volume_whose_superblock_zones_failed_mounts_read_only_and_keeps_every_flushed_write() {
    let mut ftl = format();
    write_all(&mut ftl, 1).unwrap();
    write_all(&mut ftl, 2).unwrap();
    ftl.backend_mut().fail = Fail::SuperZonesFailed;
    assert_eq!(ftl.checkpoint(), Err(IoError::ReadOnly));
    let bs = ftl.block_size();
    for _ in 0..2 {
        let dev = ftl.into_backend();
        ftl = Driver::mount(dev, FtlConfig::default()).expect("a read-only mount");
        assert!(ftl.ftl().is_read_only(), "mounted writable");
        assert_all(&mut ftl, 2);
        assert_eq!(ftl.write(0, &block(0, 3, bs)), Err(IoError::ReadOnly));
        assert_eq!(ftl.flush(), Err(IoError::ReadOnly));
    }
    let mut dev = ftl.into_backend();
    dev.fail = Fail::Appends(0..0);
    common::assert_check_clean(&mut dev, "after two read-only mounts");
}

/// A metadata log write fails during a mount: the log writes it again in
/// its next ring zone and the volume comes up writable, every flushed
/// block in place (only metadata that can no longer be written at all
/// leaves a mount read-only).
#[test]
fn a_metadata_write_failure_during_a_mount_leaves_the_volume_writable() {
    let mut ftl = format();
    write_all(&mut ftl, 1).unwrap();
    let mut dev = ftl.into_backend();
    dev.fail = Fail::NextLogWrites { left: 1 };
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
    assert!(
        matches!(ftl.backend_mut().fail, Fail::NextLogWrites { left: 0 }),
        "the mount wrote no metadata"
    );
    assert!(!ftl.ftl().is_read_only(), "mounted read-only");
    assert_all(&mut ftl, 1);
    write_all(&mut ftl, 2).expect("writes again");
    assert_all(&mut ftl, 2);
}

/// The metadata log's writes start failing on the media after a few
/// flushes: the log runs out of ring zones and the volume goes read-only,
/// losing nothing flushed. A
/// remount (on a healthy device again) starts a fresh log and reads every
/// flushed block, and the rest as written before or after.
#[test]
fn a_failing_metadata_log_ends_read_only_and_a_remount_keeps_every_flushed_write() {
    let mut ftl = format();
    write_all(&mut ftl, 1).unwrap();
    ftl.flush().unwrap();
    ftl.backend_mut().fail = Fail::LogWrites { ok: 8 };
    let bs = ftl.block_size();
    let mut flushed_to = 0; // blocks below are durable at version 2
    let mut failed = None;
    for lba in 0..ftl.logical_blocks() {
        let done = ftl.write(lba, &block(lba, 2, bs)).and_then(|()| {
            if lba % 16 == 15 {
                ftl.flush()?;
                flushed_to = lba + 1;
            }
            Ok(())
        });
        if let Err(e) = done {
            failed = Some(e);
            break;
        }
    }
    assert_eq!(failed, Some(IoError::ReadOnly), "the log never ran out");
    assert!(
        flushed_to >= 64,
        "flushes before the failures: {flushed_to} blocks"
    );
    assert!(ftl.stats().write_errors >= 4, "every ring zone failed");
    let mut dev = ftl.into_backend();
    dev.fail = Fail::Appends(0..0);
    common::assert_check_clean(&mut dev, "after the log failed");
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("remount");
    for lba in 0..ftl.logical_blocks() {
        let got = ftl.read(lba, 1).unwrap();
        if lba < flushed_to {
            assert_eq!(got, block(lba, 2, bs), "flushed block {lba}");
        } else {
            assert!(
                got == block(lba, 1, bs) || got == block(lba, 2, bs),
                "block {lba}"
            );
        }
    }
    ftl.write(0, &block(0, 3, bs)).expect("writes again");
    ftl.flush().expect("flushes again");
}

/// A stall while formatting a used device: its first zone resets are
/// aborted on the host side; format resets them again and retires nothing.
#[test]
fn a_format_resets_again_what_a_controller_reset_aborted() {
    let mut ftl = format();
    let logical_blocks = ftl.logical_blocks();
    write_all(&mut ftl, 1).unwrap();
    let mut dev = ftl.shutdown().expect("shutdown");
    let first = dev.commands;
    stall_next(&mut dev, 6, 11);
    let ftl = Driver::format(dev, &FormatOptions::default(), FtlConfig::default())
        .expect("format after aborted resets");
    assert_eq!(ftl.stats().retired_zones, 0);
    assert_eq!(ftl.logical_blocks(), logical_blocks);
    assert!(
        ftl.backend().commands > first + 6,
        "the stall did not cover the resets"
    );
}

/// A device whose resets keep failing on the host side: format refuses it
/// with an error that says the superblock zone could not be reset, and why.
#[test]
fn a_format_that_cannot_reset_a_superblock_zone_says_so() {
    let mut ftl = format();
    write_all(&mut ftl, 1).unwrap();
    let mut dev = ftl.shutdown().expect("shutdown");
    dev.fail = Fail::All;
    let err = Driver::format(dev, &FormatOptions::default(), FtlConfig::default())
        .err()
        .expect("format cannot succeed");
    let text = err.to_string();
    assert!(
        text.contains("zone 0 could not be reset") && text.contains("controller reset"),
        "{text}"
    );
}
