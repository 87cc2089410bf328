//! The media model: a zoned device seen as a queue pair (docs/design.md, "The layers").
//!
//! A device has `zone_count` zones of `zone_size_blocks` blocks, of which the
//! first `zone_capacity_blocks` are writable. A zone is written only at its
//! write pointer (`Write`) or by `Append` (the device picks the offset and
//! returns it), and emptied only by `Reset`. Blocks are addressed as
//! `(zone, offset_blocks)` with the offset relative to the zone start, so no
//! caller does LBA arithmetic.
//!
//! Commands are submitted with a caller-chosen tag and complete later, in any
//! order, through [`Backend::reap`]. Buffers travel with the command and come
//! back with the completion, which is what io_uring needs (a buffer must stay
//! put while the kernel owns it) and what the simulator can honour cheaply.
//! The data of a write is a [`Payload`]: buffers shared with the write
//! buffer, gathered in order without copying.

#[cfg(feature = "conformance")]
pub mod conformance;

pub use crate::payload::Payload;
use serde::{Deserialize, Serialize};

/// Index of a zone, `0..zone_count`.
pub type ZoneId = u32;

/// The shape and limits of a zoned device. Every field carries its unit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// Bytes per logical block (the unit of every offset and count).
    pub block_size_bytes: u32,
    /// Out-of-band bytes stored with each block; 0 when the device has none.
    pub oob_size_bytes: u32,
    /// Number of zones.
    pub zone_count: u32,
    /// Address span of one zone, in blocks (a power of two on NVMe ZNS).
    pub zone_size_blocks: u64,
    /// Writable blocks at the start of each zone; `<= zone_size_blocks`.
    pub zone_capacity_blocks: u64,
    /// Writes and appends must start and end on multiples of this many blocks
    /// (the minimum program unit; 1 on ZNS, e.g. 4 on Open-Channel devices).
    pub write_unit_blocks: u32,
    /// Largest `Append`, in blocks.
    pub max_append_blocks: u32,
    /// Largest `Read` or `Write`, in blocks.
    pub max_transfer_blocks: u32,
    /// Zones that may be open at once; 0 means no limit.
    pub max_open_zones: u32,
    /// Zones that may be open or closed (active) at once; 0 means no limit.
    pub max_active_zones: u32,
    /// Independent units (LUNs, dies) that work in parallel.
    pub parallel_units: u32,
    /// Zones striped over disjoint sets of parallel units: zone `z` works
    /// on the units of group `z % zone_groups`, so zones whose ids differ
    /// modulo it program in parallel. 1 when the device does not say.
    #[serde(default = "one_group")]
    pub zone_groups: u32,
    /// Commands that may be in flight at once; `submit` answers `Busy` past it.
    pub queue_depth: u32,
}

fn one_group() -> u32 {
    1
}

/// Why a [`Geometry`] is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    #[error("block size {0} bytes is not a power of two between 512 and 65536")]
    BlockSize(u32),
    #[error("zone count must be at least 1")]
    NoZones,
    #[error("zone capacity {capacity_blocks} blocks exceeds zone size {size_blocks} blocks")]
    CapacityAboveSize {
        capacity_blocks: u64,
        size_blocks: u64,
    },
    #[error("zone capacity must be at least one write unit")]
    EmptyZone,
    #[error("write unit {write_unit_blocks} blocks does not divide zone capacity {capacity_blocks} blocks")]
    WriteUnit {
        write_unit_blocks: u32,
        capacity_blocks: u64,
    },
    #[error("max append {max_append_blocks} and max transfer {max_transfer_blocks} blocks must be non-zero multiples of the write unit {write_unit_blocks}")]
    TransferLimits {
        max_append_blocks: u32,
        max_transfer_blocks: u32,
        write_unit_blocks: u32,
    },
    #[error("max open zones {max_open} exceeds max active zones {max_active}")]
    OpenAboveActive { max_open: u32, max_active: u32 },
    #[error("parallel units, zone groups and queue depth must be at least 1")]
    Parallelism,
}

impl Geometry {
    /// Checks the relationships every backend and the FTL rely on.
    pub fn validate(&self) -> Result<(), GeometryError> {
        let bs = self.block_size_bytes;
        if !bs.is_power_of_two() || !(512..=65536).contains(&bs) {
            return Err(GeometryError::BlockSize(bs));
        }
        if self.zone_count == 0 {
            return Err(GeometryError::NoZones);
        }
        if self.zone_capacity_blocks > self.zone_size_blocks {
            return Err(GeometryError::CapacityAboveSize {
                capacity_blocks: self.zone_capacity_blocks,
                size_blocks: self.zone_size_blocks,
            });
        }
        let wu = u64::from(self.write_unit_blocks);
        if wu == 0 || self.zone_capacity_blocks < wu {
            return Err(GeometryError::EmptyZone);
        }
        if !self.zone_capacity_blocks.is_multiple_of(wu) {
            return Err(GeometryError::WriteUnit {
                write_unit_blocks: self.write_unit_blocks,
                capacity_blocks: self.zone_capacity_blocks,
            });
        }
        let limits_ok = |n: u32| n != 0 && u64::from(n) % wu == 0;
        if !limits_ok(self.max_append_blocks) || !limits_ok(self.max_transfer_blocks) {
            return Err(GeometryError::TransferLimits {
                max_append_blocks: self.max_append_blocks,
                max_transfer_blocks: self.max_transfer_blocks,
                write_unit_blocks: self.write_unit_blocks,
            });
        }
        if self.max_open_zones != 0
            && self.max_active_zones != 0
            && self.max_open_zones > self.max_active_zones
        {
            return Err(GeometryError::OpenAboveActive {
                max_open: self.max_open_zones,
                max_active: self.max_active_zones,
            });
        }
        if self.parallel_units == 0 || self.queue_depth == 0 || self.zone_groups == 0 {
            return Err(GeometryError::Parallelism);
        }
        Ok(())
    }

    /// Writable bytes on the whole device.
    pub fn capacity_bytes(&self) -> u64 {
        u64::from(self.zone_count) * self.zone_capacity_blocks * u64::from(self.block_size_bytes)
    }

    /// Bytes a data buffer must have for `block_count` blocks.
    pub fn data_bytes(&self, block_count: u64) -> usize {
        usize::try_from(block_count * u64::from(self.block_size_bytes)).expect("buffer size")
    }

    /// Bytes an OOB buffer must have for `block_count` blocks.
    pub fn oob_bytes(&self, block_count: u64) -> usize {
        usize::try_from(block_count * u64::from(self.oob_size_bytes)).expect("oob size")
    }
}

/// Zone states, as NVMe ZNS defines them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ZoneState {
    Empty,
    ImplicitlyOpen,
    ExplicitlyOpen,
    Closed,
    Full,
    /// Readable up to the write pointer, never writable again (grown defect).
    ReadOnly,
    /// Neither readable nor writable.
    Offline,
}

impl ZoneState {
    /// Open zones count against `max_open_zones`.
    pub fn is_open(self) -> bool {
        matches!(self, ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen)
    }

    /// Open and closed zones count against `max_active_zones`.
    pub fn is_active(self) -> bool {
        self.is_open() || self == ZoneState::Closed
    }
}

/// One zone as the device reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneInfo {
    pub zone: ZoneId,
    pub state: ZoneState,
    /// Next writable offset, relative to the zone start.
    pub write_pointer_blocks: u64,
    /// Writable blocks of this zone.
    pub capacity_blocks: u64,
}

/// Whom a read serves. The simulator's `read-priority` and `suspend`
/// scheduling serve host reads ahead of background ones queued on the same
/// LUN (bounded, docs/sim.md); a device without such a queue ignores it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReadPriority {
    /// A read a host request waits for (the default).
    #[default]
    Host,
    /// A read of the FTL's own: GC's copies and zone summaries.
    Background,
}

/// A device command. Buffers are owned by the command while it is in flight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Read `block_count` blocks; completes with [`Outcome::Read`].
    Read {
        zone: ZoneId,
        offset_blocks: u64,
        block_count: u32,
        /// Whom the read serves; a device that orders its queue may serve
        /// host reads first, others ignore it.
        priority: ReadPriority,
    },
    /// Write at the write pointer. `oob` is empty or exactly
    /// `block_count * oob_size_bytes` (empty writes zeros).
    Write {
        zone: ZoneId,
        offset_blocks: u64,
        data: Payload,
        oob: Vec<u8>,
    },
    /// Zone append: the device picks the offset and returns it in
    /// [`Outcome::Written`].
    Append {
        zone: ZoneId,
        data: Payload,
        oob: Vec<u8>,
    },
    /// Erase the zone: write pointer back to 0, state `Empty`.
    Reset { zone: ZoneId },
    /// Move the zone to `Full` without writing the rest.
    Finish { zone: ZoneId },
    /// Explicitly open the zone.
    Open { zone: ZoneId },
    /// Close an open zone (it stays active).
    Close { zone: ZoneId },
    /// Make every write completed before this command durable.
    Flush,
}

impl Command {
    /// The zone the command targets, if any.
    pub fn zone(&self) -> Option<ZoneId> {
        match *self {
            Command::Read { zone, .. }
            | Command::Write { zone, .. }
            | Command::Append { zone, .. }
            | Command::Reset { zone }
            | Command::Finish { zone }
            | Command::Open { zone }
            | Command::Close { zone } => Some(zone),
            Command::Flush => None,
        }
    }
}

/// What a successful command produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Data and OOB bytes (OOB empty when the device has none).
    Read { data: Vec<u8>, oob: Vec<u8> },
    /// Where a write or append landed.
    Written {
        zone: ZoneId,
        offset_blocks: u64,
        block_count: u32,
    },
    /// Reset, finish, open, close or flush done.
    Done,
}

/// A finished command, matched to its submission by `tag`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub tag: u64,
    pub result: Result<Outcome, DeviceError>,
}

/// Why a command failed. Typed, with the location, never a bare string.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("zone {zone} is full")]
    ZoneFull { zone: ZoneId },
    #[error("zone {zone}: write at offset {offset_blocks} but the write pointer is at {write_pointer_blocks}")]
    BadWritePointer {
        zone: ZoneId,
        offset_blocks: u64,
        write_pointer_blocks: u64,
    },
    #[error("zone {zone}: uncorrectable read at offset {offset_blocks}")]
    UncorrectableRead { zone: ZoneId, offset_blocks: u64 },
    #[error("zone {zone}: program failed at offset {offset_blocks}")]
    ProgramFailed { zone: ZoneId, offset_blocks: u64 },
    #[error("zone {zone}: erase failed")]
    EraseFailed { zone: ZoneId },
    #[error("zone {zone} is offline")]
    ZoneOffline { zone: ZoneId },
    #[error("zone {zone} is read-only")]
    ZoneReadOnly { zone: ZoneId },
    #[error("zone {zone}: too many open zones (limit {limit})")]
    TooManyOpenZones { zone: ZoneId, limit: u32 },
    #[error("zone {zone}: too many active zones (limit {limit})")]
    TooManyActiveZones { zone: ZoneId, limit: u32 },
    #[error("zone {zone} does not exist")]
    NoSuchZone { zone: ZoneId },
    #[error("zone {zone}: blocks {offset_blocks}..+{block_count} lie outside the zone capacity")]
    OutOfRange {
        zone: ZoneId,
        offset_blocks: u64,
        block_count: u64,
    },
    #[error("zone {zone}: {block_count} blocks at {offset_blocks} are not aligned to the write unit of {write_unit_blocks} blocks")]
    Misaligned {
        zone: ZoneId,
        offset_blocks: u64,
        block_count: u64,
        write_unit_blocks: u32,
    },
    #[error("transfer of {block_count} blocks exceeds the limit of {limit_blocks}")]
    TooLarge { block_count: u64, limit_blocks: u32 },
    #[error("buffer of {actual_bytes} bytes where {expected_bytes} were expected")]
    BufferSize {
        expected_bytes: usize,
        actual_bytes: usize,
    },
    #[error("zone {zone}: cannot {action} a zone in state {state:?}")]
    InvalidTransition {
        zone: ZoneId,
        state: ZoneState,
        action: &'static str,
    },
    #[error("the device is gone (power cut or removal)")]
    DeviceGone,
    #[error("host I/O error during {op}: {kind:?}: {message}")]
    HostIo {
        op: &'static str,
        kind: std::io::ErrorKind,
        message: String,
    },
}

/// Why `submit` did not take a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The submission queue is full: reap completions, then retry.
    #[error("submission queue is full")]
    Busy,
    /// The device is gone; nothing will be accepted again.
    #[error("the device is gone")]
    DeviceGone,
}

/// A zoned device as a queue pair.
///
/// Invalid commands are accepted by `submit` and fail in their completion,
/// as on NVMe. `submit` refuses only when the queue is full or the device is
/// gone. After a power cut every command in flight completes with
/// [`DeviceError::DeviceGone`].
pub trait Backend {
    /// The device's shape and limits (constant for the device's life).
    fn geometry(&self) -> &Geometry;

    /// The current state of one zone.
    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError>;

    /// Queue a command. `tag` comes back in its completion.
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError>;

    /// Move up to `max` finished commands into `out`; never blocks.
    /// Returns how many were moved.
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize;

    /// Block (or, on a simulated clock, advance time) until at least one
    /// completion can be reaped. Returns at once when nothing is in flight.
    fn wait(&mut self) -> Result<(), DeviceError>;

    /// Commands submitted and not yet reaped.
    fn in_flight(&self) -> usize;

    /// The backend's clock in nanoseconds: simulated time on the simulator,
    /// monotonic time since open on a real device. The FTL core is told time
    /// by its driver, which reads it here.
    fn clock_ns(&self) -> u64;
}

/// A borrowed backend is a backend: callers can lend a device to a driver
/// and keep it when the driver is gone (e.g. after a failed mount).
impl<B: Backend + ?Sized> Backend for &mut B {
    fn geometry(&self) -> &Geometry {
        (**self).geometry()
    }
    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        (**self).zone_info(zone)
    }
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        (**self).submit(tag, command)
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        (**self).reap(out, max)
    }
    fn wait(&mut self) -> Result<(), DeviceError> {
        (**self).wait()
    }
    fn in_flight(&self) -> usize {
        (**self).in_flight()
    }
    fn clock_ns(&self) -> u64 {
        (**self).clock_ns()
    }
}

/// Attempts of an idempotent command (flush, zone reset, finish, zone
/// report) that keeps failing on the host side (`DeviceError::HostIo`: the
/// kernel's `EINTR` for a command a controller reset aborted) before the
/// failure counts as the device's. The core's repeats, its superblock
/// rewrites and the synchronous calls of format, mount and check use it.
pub(crate) const HOST_ATTEMPTS: u8 = 4;

/// Runs an idempotent synchronous device call again after a host-side
/// failure, up to [`HOST_ATTEMPTS`] attempts.
pub(crate) fn again_after_abort<T>(
    mut call: impl FnMut() -> Result<T, DeviceError>,
) -> Result<T, DeviceError> {
    let mut attempts = 1;
    loop {
        match call() {
            Err(DeviceError::HostIo { .. }) if attempts < HOST_ATTEMPTS => attempts += 1,
            other => return other,
        }
    }
}

/// Synchronous conveniences over the queue pair, for tools and tests. Each
/// call requires an idle queue: it owns the queue until its command is done.
pub trait BackendExt: Backend {
    /// Submit one command and wait for its completion.
    fn execute(&mut self, command: Command) -> Result<Outcome, DeviceError> {
        const TAG: u64 = u64::MAX;
        assert_eq!(self.in_flight(), 0, "execute() needs an idle queue");
        match self.submit(TAG, command) {
            Ok(()) => {}
            Err(SubmitError::DeviceGone) => return Err(DeviceError::DeviceGone),
            Err(SubmitError::Busy) => unreachable!("idle queue answered busy"),
        }
        let mut out = Vec::with_capacity(1);
        loop {
            if self.reap(&mut out, 1) == 1 {
                let done = out.pop().expect("one completion");
                assert_eq!(done.tag, TAG, "completion for a command never submitted");
                return done.result;
            }
            self.wait()?;
        }
    }

    /// Read blocks; returns `(data, oob)`.
    fn read_blocks(
        &mut self,
        zone: ZoneId,
        offset_blocks: u64,
        block_count: u32,
    ) -> Result<(Vec<u8>, Vec<u8>), DeviceError> {
        match self.execute(Command::Read {
            zone,
            offset_blocks,
            block_count,
            priority: ReadPriority::Host,
        })? {
            Outcome::Read { data, oob } => Ok((data, oob)),
            other => panic!("read completed as {other:?}"),
        }
    }

    /// Write at `offset_blocks`, which must be the write pointer.
    fn write_blocks(
        &mut self,
        zone: ZoneId,
        offset_blocks: u64,
        data: Vec<u8>,
        oob: Vec<u8>,
    ) -> Result<(), DeviceError> {
        self.execute(Command::Write {
            zone,
            offset_blocks,
            data: data.into(),
            oob,
        })
        .map(|_| ())
    }

    /// Append; returns the offset the device chose.
    fn append_blocks(
        &mut self,
        zone: ZoneId,
        data: Vec<u8>,
        oob: Vec<u8>,
    ) -> Result<u64, DeviceError> {
        match self.execute(Command::Append {
            zone,
            data: data.into(),
            oob,
        })? {
            Outcome::Written { offset_blocks, .. } => Ok(offset_blocks),
            other => panic!("append completed as {other:?}"),
        }
    }

    /// Reset (erase) a zone.
    fn reset_zone(&mut self, zone: ZoneId) -> Result<(), DeviceError> {
        self.execute(Command::Reset { zone }).map(|_| ())
    }

    /// Finish a zone.
    fn finish_zone(&mut self, zone: ZoneId) -> Result<(), DeviceError> {
        self.execute(Command::Finish { zone }).map(|_| ())
    }

    /// Flush the device's volatile state.
    fn flush(&mut self) -> Result<(), DeviceError> {
        self.execute(Command::Flush).map(|_| ())
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}

#[cfg(test)]
mod tests {
    use super::*;

    fn zns_like() -> Geometry {
        Geometry {
            block_size_bytes: 4096,
            oob_size_bytes: 0,
            zone_count: 32,
            zone_size_blocks: 16384,
            zone_capacity_blocks: 12288,
            write_unit_blocks: 1,
            max_append_blocks: 128,
            max_transfer_blocks: 256,
            max_open_zones: 16,
            max_active_zones: 32,
            parallel_units: 8,
            zone_groups: 1,
            queue_depth: 64,
        }
    }

    #[test]
    fn valid_geometry_passes() {
        assert_eq!(zns_like().validate(), Ok(()));
        assert_eq!(zns_like().capacity_bytes(), 32 * 12288 * 4096);
    }

    #[test]
    fn geometry_errors_are_specific() {
        let mut g = zns_like();
        g.block_size_bytes = 3000;
        assert_eq!(g.validate(), Err(GeometryError::BlockSize(3000)));
        let mut g = zns_like();
        g.zone_capacity_blocks = g.zone_size_blocks + 1;
        assert!(matches!(
            g.validate(),
            Err(GeometryError::CapacityAboveSize { .. })
        ));
        let mut g = zns_like();
        g.write_unit_blocks = 5;
        assert!(matches!(g.validate(), Err(GeometryError::WriteUnit { .. })));
        let mut g = zns_like();
        g.max_open_zones = 40;
        assert!(matches!(
            g.validate(),
            Err(GeometryError::OpenAboveActive { .. })
        ));
        let mut g = zns_like();
        g.zone_count = 0;
        assert_eq!(g.validate(), Err(GeometryError::NoZones));
    }

    #[test]
    fn open_and_active_states() {
        assert!(ZoneState::ImplicitlyOpen.is_open());
        assert!(ZoneState::Closed.is_active() && !ZoneState::Closed.is_open());
        assert!(!ZoneState::Full.is_active());
    }
}
