//! Appends that fail on the host side (`DeviceError::HostIo`: the kernel's
//! `EINTR` for commands a controller reset aborted) are not media faults:
//! the FTL seals the zone and writes elsewhere, retires nothing, loses
//! nothing, and mounts again; a device that fails every append still ends
//! read-only instead of looping.

use zftl::core::backend::ZoneId;
use zftl::core::{
    Backend, Command, Completion, DeviceError, Driver, FormatOptions, FtlConfig, Geometry, IoError,
    SubmitError, ZoneInfo,
};
use zftl::sim::{SimConfig, SimDevice};

mod common;
use common::block;

/// The simulator, with the appends numbered `fail` (counting from 0) run
/// on the media but reported as failed on the host side, as an abort after
/// the device wrote them would be.
struct HostFailures {
    dev: SimDevice,
    appends: u64,
    fail: std::ops::Range<u64>,
    failing_tags: Vec<u64>,
}

impl HostFailures {
    fn new(dev: SimDevice) -> HostFailures {
        HostFailures {
            dev,
            appends: 0,
            fail: 0..0,
            failing_tags: Vec::new(),
        }
    }
}

impl Backend for HostFailures {
    fn geometry(&self) -> &Geometry {
        self.dev.geometry()
    }
    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        self.dev.zone_info(zone)
    }
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        let append = matches!(command, Command::Append { .. });
        self.dev.submit(tag, command)?;
        if append {
            if self.fail.contains(&self.appends) {
                self.failing_tags.push(tag);
            }
            self.appends += 1;
        }
        Ok(())
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let first = out.len();
        let n = self.dev.reap(out, max);
        for c in &mut out[first..] {
            if let Some(i) = self.failing_tags.iter().position(|&t| t == c.tag) {
                self.failing_tags.swap_remove(i);
                c.result = Err(DeviceError::HostIo {
                    op: "append",
                    kind: std::io::ErrorKind::Interrupted,
                    message: "aborted by a controller reset".into(),
                });
            }
        }
        n
    }
    fn wait(&mut self) -> Result<(), DeviceError> {
        self.dev.wait()
    }
    fn in_flight(&self) -> usize {
        self.dev.in_flight()
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
    ftl.backend_mut().fail = next + 3..next + 3 + burst;
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
    // Each failed append seals a zone. With GC starting two zones above
    // the reserve, this small device runs out of zones (NoSpace) before
    // enough failures make the core retire one; retiring is what is tested.
    let mut ftl = format_with(FtlConfig {
        gc_start_free_zones: 1,
        ..FtlConfig::default()
    });
    write_all(&mut ftl, 1).unwrap();
    ftl.backend_mut().fail = ftl.backend().appends..u64::MAX;
    let err = write_all(&mut ftl, 2).expect_err("a dead device cannot take writes");
    assert!(
        matches!(
            err,
            IoError::NoSpace | IoError::ReadOnly | IoError::Device { .. }
        ),
        "{err:?}"
    );
    assert!(ftl.stats().retired_zones > 0);
}
