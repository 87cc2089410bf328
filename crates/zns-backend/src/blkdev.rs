//! The fallback [`Backend`] for zoned block devices (`/dev/nvmeXnY`, SMR
//! drives, anything with `queue/zoned` = host-managed or host-aware), used
//! when NVMe passthrough is not available.
//!
//! * The geometry comes from sysfs (`queue/…`: logical and physical block
//!   size, `max_open_zones`, `max_active_zones`, `max_sectors_kb`; `size`)
//!   and `BLKREPORTZONE` (zone size and count, and zone capacity with the
//!   v2 report's `BLK_ZONE_REP_CAPACITY` flag; zone length without it).
//! * Reads, writes and flushes go through an io_uring of positional
//!   reads/writes on the device opened with `O_DIRECT` (no page cache:
//!   buffered writes to a sequential zone could reach the device out of
//!   order). Buffers that miss the device's memory alignment are bounced.
//! * There is no zone append on this path. An append is a write at the
//!   write pointer the backend tracks per zone; writes, appends and zone
//!   actions of one zone go out one at a time, each when the previous one
//!   completed, so the tracked pointer is exact when the next one is sent
//!   and the completion reports the offset it was written at.
//! * Zone actions are the `BLK{RESET,OPEN,CLOSE,FINISH}ZONE` ioctls, run
//!   synchronously when their turn in the zone comes.
//! * No OOB: `oob_size_bytes` is 0 and the FTL keeps its tags in band.
//! * Errors the host can see (buffer sizes, limits, a write off the write
//!   pointer or to a full zone) complete without reaching the device; the
//!   kernel's errno of the rest is decoded with the zone's state.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use zftl_core::backend::{
    Backend, Command, Completion, DeviceError, Geometry, Outcome, Payload, SubmitError, ZoneId,
    ZoneInfo, ZoneState,
};

use crate::aligned::AlignedBuf;
use crate::sys::{self, BlkZone, BlkZoneRange, BlockOp, BlockRing};
use crate::{io_kind, OpenError, WriteBuffers, ZnsOptions, ZoneAction, MAX_TRANSFER_BYTES};

/// Bytes per sector in every zone ioctl and in `chunk_sectors`.
const SECTOR_BYTES: u64 = 512;

/// What sysfs says about a zoned block device, for `zftl info` and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// Kernel name (`nvme0n1`).
    pub name: String,
    /// `queue/zoned`: host-managed or host-aware.
    pub zoned_model: String,
    pub logical_block_bytes: u32,
    pub physical_block_bytes: u32,
    /// `queue/max_sectors_kb` in bytes.
    pub max_sectors_bytes: u64,
    /// Memory alignment O_DIRECT buffers need (`queue/dma_alignment` + 1).
    pub dma_alignment_bytes: usize,
    /// Device size in logical blocks.
    pub size_blocks: u64,
    /// `queue/max_open_zones` and `queue/max_active_zones` (0 = no limit).
    pub max_open_zones: u32,
    pub max_active_zones: u32,
    /// Zone capacities: (minimum, maximum) over the zones not offline.
    pub zone_capacity_range: (u64, u64),
    /// The kernel reported zone capacities (v2 report); else capacity = length.
    pub capacity_reported: bool,
}

/// `/sys/dev/block/MAJ:MIN`, the sysfs directory of a block device node.
pub(crate) fn sysfs_dir(meta: &std::fs::Metadata) -> PathBuf {
    let rdev = meta.rdev();
    // glibc's gnu_dev_major / gnu_dev_minor.
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    PathBuf::from(format!("/sys/dev/block/{major}:{minor}"))
}

/// The zoned model of `queue/zoned`, if the device is zoned.
pub(crate) fn parse_zoned_model(text: &str) -> Option<&'static str> {
    match text.trim() {
        "host-managed" => Some("host-managed"),
        "host-aware" => Some("host-aware"),
        _ => None,
    }
}

/// The NVMe generic char device of an NVMe block device name: `nvme0n1` →
/// `ng0n1`. `None` for names that are not NVMe namespaces (or partitions).
pub(crate) fn nvme_generic_name(block_name: &str) -> Option<String> {
    let rest = block_name.strip_prefix("nvme")?;
    let (ctrl, ns) = rest.split_once('n')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(ctrl) && digits(ns)).then(|| format!("ng{ctrl}n{ns}"))
}

/// The block device name of an NVMe generic char device name: `ng0n1` →
/// `nvme0n1`.
pub(crate) fn nvme_block_name(generic_name: &str) -> Option<String> {
    let rest = generic_name.strip_prefix("ng")?;
    let (ctrl, ns) = rest.split_once('n')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(ctrl) && digits(ns)).then(|| format!("nvme{ctrl}n{ns}"))
}

/// One sysfs queue attribute as a number.
fn queue_attr(dir: &Path, name: &str, path: &Path) -> Result<u64, OpenError> {
    let file = dir.join("queue").join(name);
    let text = std::fs::read_to_string(&file).map_err(|e| OpenError::Io {
        path: path.to_path_buf(),
        what: "reading sysfs",
        source: io::Error::new(e.kind(), format!("{}: {e}", file.display())),
    })?;
    text.trim().parse().map_err(|_| OpenError::Unsupported {
        path: path.to_path_buf(),
        reason: format!("{} reads {:?}, not a number", file.display(), text.trim()),
    })
}

/// The zone state of a `blk_zone` condition (the NVMe codes, shared by
/// ZBC/ZAC). `None`: a conventional zone or an unknown condition.
pub(crate) fn zone_state_of(cond: u8) -> Option<ZoneState> {
    match cond {
        0x1 => Some(ZoneState::Empty),
        0x2 => Some(ZoneState::ImplicitlyOpen),
        0x3 => Some(ZoneState::ExplicitlyOpen),
        0x4 => Some(ZoneState::Closed),
        0xd => Some(ZoneState::ReadOnly),
        0xe => Some(ZoneState::Full),
        0xf => Some(ZoneState::Offline),
        _ => None,
    }
}

/// `BLK_ZONE_TYPE_CONVENTIONAL`.
const ZONE_TYPE_CONVENTIONAL: u8 = 1;

/// A zone as the host tracks it, in logical blocks relative to the zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Tracked {
    pub state: ZoneState,
    pub wp_blocks: u64,
    pub capacity_blocks: u64,
}

/// A `blk_zone` in logical blocks relative to its zone start.
pub(crate) fn tracked_of(
    z: &BlkZone,
    capacity_reported: bool,
    sectors_per_block: u64,
) -> Option<Tracked> {
    let state = zone_state_of(z.cond)?;
    if z.zone_type == ZONE_TYPE_CONVENTIONAL {
        return None;
    }
    let cap_sectors = if capacity_reported {
        z.capacity_sectors
    } else {
        z.len_sectors
    };
    let capacity_blocks = cap_sectors / sectors_per_block;
    let wp_blocks = match state {
        ZoneState::Empty | ZoneState::Offline => 0,
        // The write pointer of a full or read-only zone is not valid.
        ZoneState::Full | ZoneState::ReadOnly => capacity_blocks,
        _ => {
            (z.wp_sectors.saturating_sub(z.start_sectors) / sectors_per_block).min(capacity_blocks)
        }
    };
    Some(Tracked {
        state,
        wp_blocks,
        capacity_blocks,
    })
}

/// Zone ids map to sectors as id × length: every zone must start where that
/// puts it, and only the last may be shorter.
fn check_zone_layout(zones: &[BlkZone], zone_len_sectors: u64) -> Result<(), String> {
    let last = zones.len().saturating_sub(1);
    for (i, z) in zones.iter().enumerate() {
        let start = i as u64 * zone_len_sectors;
        let len_ok =
            z.len_sectors == zone_len_sectors || (i == last && z.len_sectors < zone_len_sectors);
        if z.start_sectors != start || !len_ok {
            return Err(format!(
                "zone {i} spans sectors {}+{}, not {start}+{zone_len_sectors} (zones of different \
                 sizes)",
                z.start_sectors, z.len_sectors
            ));
        }
    }
    Ok(())
}

/// What an ordered command does once its turn comes.
#[derive(Debug)]
enum Pending {
    Write {
        offset_blocks: u64,
        buf: AlignedBuf,
        block_count: u32,
    },
    Append {
        buf: AlignedBuf,
        block_count: u32,
    },
    Action(ZoneAction),
}

#[derive(Clone, Copy, Debug)]
struct Ctx {
    tag: u64,
    zone: ZoneId,
    offset_blocks: u64,
    block_count: u32,
    what: What,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum What {
    Read,
    Write,
    Append,
    Flush,
}

#[derive(Debug, Default)]
struct ZoneQueue {
    /// A write or append of this zone is with the kernel.
    busy: bool,
    waiting: VecDeque<(u64, Pending)>,
    /// The zone as of the last command that completed; `None` = ask the
    /// device (after an error or a zone action).
    tracked: Option<Tracked>,
}

/// A zoned block device as a [`Backend`].
pub struct ZonedBlockDevice {
    ring: BlockRing<Ctx>,
    path: PathBuf,
    geometry: Geometry,
    info: BlockInfo,
    /// Other device nodes of the same namespace, held open and flocked.
    _sibling_locks: Vec<File>,
    ready: VecDeque<Completion>,
    zones: Vec<ZoneQueue>,
    waiting: usize,
    start: Instant,
    gone: bool,
    /// How writes reached the kernel (counted where they are prepared).
    write_buffers: Cell<WriteBuffers>,
}

impl ZonedBlockDevice {
    /// Open `path`, a zoned block device, as a backend.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(path, &ZnsOptions::default())
    }

    pub fn open_with(path: impl AsRef<Path>, opts: &ZnsOptions) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let meta = std::fs::metadata(&path).map_err(|e| crate::open_error(&path, e))?;
        if !meta.file_type().is_block_device() {
            return Err(OpenError::NotADevice {
                path,
                kind: crate::file_kind(&meta.file_type()),
            });
        }
        let dir = sysfs_dir(&meta);
        let info = read_sysfs(&dir, &path)?;
        // O_EXCL on a block device: refused while it is mounted or claimed.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT | libc::O_EXCL)
            .open(&path)
            .map_err(|e| crate::open_error(&path, e))?;
        crate::lock(&file, &path)?;
        let siblings = match nvme_generic_name(&info.name) {
            Some(ng) => crate::lock_sibling(&Path::new("/dev").join(ng))?,
            None => Vec::new(),
        };
        Self::finish_open(file, path, info, siblings, opts)
    }

    fn finish_open(
        file: File,
        path: PathBuf,
        mut info: BlockInfo,
        siblings: Vec<File>,
        opts: &ZnsOptions,
    ) -> Result<Self, OpenError> {
        let p = || path.clone();
        let lbs = u64::from(info.logical_block_bytes);
        let spb = lbs / SECTOR_BYTES;
        let (zones, capacity_reported) = report_all(&file, &path, info.size_blocks * spb)?;
        if zones.is_empty() {
            return Err(OpenError::NotZoned {
                path: p(),
                reason: "the zone report is empty".into(),
            });
        }
        let zone_len_sectors = zones[0].len_sectors;
        if zone_len_sectors == 0 || zone_len_sectors % spb != 0 {
            return Err(OpenError::Unsupported {
                path: p(),
                reason: format!("zone length of {zone_len_sectors} sectors"),
            });
        }
        check_zone_layout(&zones, zone_len_sectors)
            .map_err(|reason| OpenError::Unsupported { path: p(), reason })?;
        let mut tracked = Vec::with_capacity(zones.len());
        for (i, z) in zones.iter().enumerate() {
            match tracked_of(z, capacity_reported, spb) {
                Some(t) => tracked.push(t),
                None => {
                    return Err(OpenError::Unsupported {
                        path: p(),
                        reason: format!(
                            "zone {i} is conventional (type {}, condition {:#x}); zftl needs every \
                             zone to be sequential",
                            z.zone_type, z.cond
                        ),
                    })
                }
            }
        }
        let usable = tracked.iter().filter(|t| t.state != ZoneState::Offline);
        let cap_min = usable.clone().map(|t| t.capacity_blocks).min();
        let cap_max = usable.map(|t| t.capacity_blocks).max().unwrap_or(0);
        let Some(cap_min) = cap_min else {
            return Err(OpenError::Unsupported {
                path: p(),
                reason: "every zone is offline".into(),
            });
        };
        info.zone_capacity_range = (cap_min, cap_max);
        info.capacity_reported = capacity_reported;
        let geometry = block_geometry(&info, &tracked, zone_len_sectors / spb, opts, &path)?;
        let ring = BlockRing::new(file, geometry.queue_depth).map_err(|e| OpenError::Io {
            path: p(),
            what: "io_uring setup",
            source: e,
        })?;
        Ok(ZonedBlockDevice {
            ring,
            path,
            zones: tracked
                .into_iter()
                .map(|t| ZoneQueue {
                    tracked: Some(t),
                    ..ZoneQueue::default()
                })
                .collect(),
            geometry,
            info,
            _sibling_locks: siblings,
            ready: VecDeque::new(),
            waiting: 0,
            start: Instant::now(),
            gone: false,
            write_buffers: Cell::default(),
        })
    }

    /// How the writes sent so far reached the kernel: in their own buffer
    /// or copied into an aligned one (this path sends no vectors).
    pub fn write_buffers(&self) -> WriteBuffers {
        self.write_buffers.get()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn block_info(&self) -> &BlockInfo {
        &self.info
    }

    fn sectors_per_block(&self) -> u64 {
        u64::from(self.geometry.block_size_bytes) / SECTOR_BYTES
    }

    fn zone_start_sectors(&self, zone: ZoneId) -> u64 {
        u64::from(zone) * self.geometry.zone_size_blocks * self.sectors_per_block()
    }

    fn zone_start_bytes(&self, zone: ZoneId) -> u64 {
        self.zone_start_sectors(zone) * SECTOR_BYTES
    }

    /// The zone as the device reports it now.
    fn report_zone(&self, zone: ZoneId) -> Result<Tracked, DeviceError> {
        let start = self.zone_start_sectors(zone);
        let (zones, flags) = sys::blk_report_zones(self.ring.file(), start)
            .map_err(|e| errno_error("zone report", e.raw_os_error().unwrap_or(libc::EIO)))?;
        let z = zones.first().filter(|z| z.start_sectors == start);
        z.and_then(|z| {
            tracked_of(
                z,
                flags & sys::BLK_ZONE_REP_CAPACITY != 0,
                self.sectors_per_block(),
            )
        })
        .ok_or_else(|| DeviceError::HostIo {
            op: "zone report",
            kind: io::ErrorKind::InvalidData,
            message: format!(
                "report for zone {zone} (sector {start}) returned {} zones{}",
                zones.len(),
                zones
                    .first()
                    .map(|z| format!(
                        ", the first at sector {} condition {:#x}",
                        z.start_sectors, z.cond
                    ))
                    .unwrap_or_default()
            ),
        })
    }

    /// The tracked state of `zone`, asking the device if it is not known.
    fn tracked(&mut self, zone: ZoneId) -> Result<Tracked, DeviceError> {
        if let Some(t) = self.zones[zone as usize].tracked {
            return Ok(t);
        }
        let t = self.report_zone(zone)?;
        self.zones[zone as usize].tracked = Some(t);
        Ok(t)
    }

    /// A synchronous zone action outside the queue (`None` = every zone).
    /// Needs no command of the zone(s) in flight.
    pub fn zone_action_sync(
        &mut self,
        zone: Option<ZoneId>,
        action: ZoneAction,
    ) -> Result<(), DeviceError> {
        match zone {
            Some(z) if z >= self.geometry.zone_count => Err(DeviceError::NoSuchZone { zone: z }),
            Some(z) => self.zone_action(z, action),
            None => {
                for z in 0..self.geometry.zone_count {
                    let t = self.tracked(z)?;
                    if action_applies_to_all(action, t.state) {
                        self.zone_action(z, action)?;
                    }
                }
                Ok(())
            }
        }
    }

    /// Reset every zone that is not empty, read-only or offline.
    pub fn reset_all(&mut self) -> Result<(), DeviceError> {
        self.zone_action_sync(None, ZoneAction::Reset)
    }

    /// Run one zone action now (its ioctl) and track the result.
    fn zone_action(&mut self, zone: ZoneId, action: ZoneAction) -> Result<(), DeviceError> {
        let spb = self.sectors_per_block();
        let range = BlkZoneRange {
            sector: self.zone_start_sectors(zone),
            nr_sectors: self.geometry.zone_size_blocks * spb,
        };
        let request = match action {
            ZoneAction::Reset => sys::BLKRESETZONE,
            ZoneAction::Open => sys::BLKOPENZONE,
            ZoneAction::Close => sys::BLKCLOSEZONE,
            ZoneAction::Finish => sys::BLKFINISHZONE,
        };
        let result = sys::blk_zone_mgmt(self.ring.file(), request, range);
        // Whatever happened, the device knows the zone's state better.
        self.zones[zone as usize].tracked = None;
        match result {
            Ok(()) => Ok(()),
            Err(e) => Err(self.action_error(zone, action, e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }

    fn action_error(&mut self, zone: ZoneId, action: ZoneAction, errno: i32) -> DeviceError {
        if let Some(e) = self.limit_error(zone, errno) {
            return e;
        }
        if errno != libc::EIO {
            return errno_error(action.name(), errno);
        }
        let state = match self.tracked(zone) {
            Ok(t) => t.state,
            Err(e) => return e,
        };
        match state {
            ZoneState::Offline => DeviceError::ZoneOffline { zone },
            ZoneState::ReadOnly => DeviceError::ZoneReadOnly { zone },
            s if !action_valid_from(action, s) => DeviceError::InvalidTransition {
                zone,
                state: s,
                action: action.name(),
            },
            _ if action == ZoneAction::Reset => DeviceError::EraseFailed { zone },
            _ => errno_error(action.name(), errno),
        }
    }

    /// The open/active-zone errors (BLK_STS_ZONE_*_RESOURCE).
    fn limit_error(&mut self, zone: ZoneId, errno: i32) -> Option<DeviceError> {
        match errno {
            libc::ETOOMANYREFS => Some(DeviceError::TooManyOpenZones {
                zone,
                limit: self.geometry.max_open_zones,
            }),
            libc::EOVERFLOW => Some(DeviceError::TooManyActiveZones {
                zone,
                limit: self.geometry.max_active_zones,
            }),
            libc::ENODEV | libc::ENXIO => {
                self.gone = true;
                Some(DeviceError::DeviceGone)
            }
            _ => None,
        }
    }

    /// Checks of a write or append buffer; the block count.
    fn program_blocks(
        &self,
        zone: ZoneId,
        data_bytes: usize,
        oob: &[u8],
        limit: u32,
    ) -> Result<u32, DeviceError> {
        let g = &self.geometry;
        let bs = g.block_size_bytes as usize;
        if data_bytes == 0 || !data_bytes.is_multiple_of(bs) {
            return Err(DeviceError::BufferSize {
                expected_bytes: data_bytes.div_ceil(bs).max(1) * bs,
                actual_bytes: data_bytes,
            });
        }
        if !oob.is_empty() {
            // No OOB on this path: tags live in band.
            return Err(DeviceError::BufferSize {
                expected_bytes: 0,
                actual_bytes: oob.len(),
            });
        }
        let n = (data_bytes / bs) as u64;
        if n > u64::from(limit) {
            return Err(DeviceError::TooLarge {
                block_count: n,
                limit_blocks: limit,
            });
        }
        if !n.is_multiple_of(u64::from(g.write_unit_blocks)) {
            return Err(DeviceError::Misaligned {
                zone,
                offset_blocks: 0,
                block_count: n,
                write_unit_blocks: g.write_unit_blocks,
            });
        }
        Ok(n as u32)
    }

    /// `data` as an I/O buffer the device can DMA from: its own buffer when
    /// it has one that starts on the queue's `dma_alignment`, else a copy
    /// into an [`AlignedBuf`] (a bounce buffer; this path sends no vectors).
    fn io_buf(&self, data: Payload) -> AlignedBuf {
        let align = self.info.dma_alignment_bytes;
        let mut counts = self.write_buffers.get();
        let data = match data.try_into_vec().map(|v| AlignedBuf::from_vec(v, align)) {
            Ok(Ok(buf)) => {
                counts.whole += 1;
                self.write_buffers.set(counts);
                return buf;
            }
            Ok(Err(vec)) => Payload::from(vec),
            Err(data) => data,
        };
        counts.copied += 1;
        self.write_buffers.set(counts);
        AlignedBuf::gather(data.parts(), align)
    }

    /// A zeroed buffer of `len` bytes that meets the queue's alignment.
    fn aligned_buf(&self, len: usize) -> AlignedBuf {
        AlignedBuf::zeroed(len, self.info.dma_alignment_bytes)
    }

    /// Checks and queues a command; errors the host can see complete it.
    fn submit_checked(&mut self, tag: u64, command: Command) -> Result<(), DeviceError> {
        let g = self.geometry.clone();
        if let Some(z) = command.zone() {
            if z >= g.zone_count {
                return Err(DeviceError::NoSuchZone { zone: z });
            }
        }
        match command {
            // `priority` is not passed on: the zoned block device has no
            // per-command read priority the FTL could use.
            Command::Read {
                zone,
                offset_blocks,
                block_count,
                priority: _,
            } => self.submit_read(tag, zone, offset_blocks, block_count),
            Command::Write {
                zone,
                offset_blocks,
                data,
                oob,
            } => {
                let n = self.program_blocks(zone, data.len(), &oob, g.max_transfer_blocks)?;
                if offset_blocks.saturating_add(u64::from(n)) > g.zone_size_blocks {
                    return Err(DeviceError::OutOfRange {
                        zone,
                        offset_blocks,
                        block_count: u64::from(n),
                    });
                }
                let buf = self.io_buf(data);
                self.enqueue(
                    zone,
                    tag,
                    Pending::Write {
                        offset_blocks,
                        buf,
                        block_count: n,
                    },
                );
                Ok(())
            }
            Command::Append { zone, data, oob } => {
                let n = self.program_blocks(zone, data.len(), &oob, g.max_append_blocks)?;
                let buf = self.io_buf(data);
                self.enqueue(
                    zone,
                    tag,
                    Pending::Append {
                        buf,
                        block_count: n,
                    },
                );
                Ok(())
            }
            Command::Reset { zone } => {
                self.enqueue(zone, tag, Pending::Action(ZoneAction::Reset));
                Ok(())
            }
            Command::Finish { zone } => {
                self.enqueue(zone, tag, Pending::Action(ZoneAction::Finish));
                Ok(())
            }
            Command::Open { zone } => {
                self.enqueue(zone, tag, Pending::Action(ZoneAction::Open));
                Ok(())
            }
            Command::Close { zone } => {
                self.enqueue(zone, tag, Pending::Action(ZoneAction::Close));
                Ok(())
            }
            Command::Flush => {
                let ctx = Ctx {
                    tag,
                    zone: 0,
                    offset_blocks: 0,
                    block_count: 0,
                    what: What::Flush,
                };
                self.push(BlockOp::Fsync, AlignedBuf::default(), ctx);
                Ok(())
            }
        }
    }

    fn submit_read(
        &mut self,
        tag: u64,
        zone: ZoneId,
        offset_blocks: u64,
        block_count: u32,
    ) -> Result<(), DeviceError> {
        let g = &self.geometry;
        let n = u64::from(block_count);
        if block_count > g.max_transfer_blocks {
            return Err(DeviceError::TooLarge {
                block_count: n,
                limit_blocks: g.max_transfer_blocks,
            });
        }
        if block_count == 0 || offset_blocks.saturating_add(n) > g.zone_capacity_blocks {
            return Err(DeviceError::OutOfRange {
                zone,
                offset_blocks,
                block_count: n,
            });
        }
        let bs = u64::from(g.block_size_bytes);
        let buf = self.aligned_buf((n * bs) as usize);
        let op = BlockOp::Read {
            offset_bytes: self.zone_start_bytes(zone) + offset_blocks * bs,
        };
        let ctx = Ctx {
            tag,
            zone,
            offset_blocks,
            block_count,
            what: What::Read,
        };
        self.push(op, buf, ctx);
        Ok(())
    }

    /// Queue an ordered command behind the zone's earlier ones.
    fn enqueue(&mut self, zone: ZoneId, tag: u64, pending: Pending) {
        let q = &mut self.zones[zone as usize];
        if q.busy || !q.waiting.is_empty() {
            q.waiting.push_back((tag, pending));
            self.waiting += 1;
            return;
        }
        self.issue(zone, tag, pending);
        self.pump(zone);
    }

    /// Send the zone's waiting commands until one is with the kernel.
    fn pump(&mut self, zone: ZoneId) {
        while !self.zones[zone as usize].busy {
            let Some((tag, pending)) = self.zones[zone as usize].waiting.pop_front() else {
                return;
            };
            self.waiting -= 1;
            self.issue(zone, tag, pending);
        }
    }

    /// The zone's turn for `pending`: a zone action runs now; a write or
    /// append is checked against the tracked write pointer and sent.
    fn issue(&mut self, zone: ZoneId, tag: u64, pending: Pending) {
        let result = match pending {
            Pending::Action(action) => self.zone_action(zone, action).map(|()| Outcome::Done),
            Pending::Write {
                offset_blocks,
                buf,
                block_count,
            } => match self.send_write(zone, tag, Some(offset_blocks), buf, block_count) {
                Ok(()) => return,
                Err(e) => Err(e),
            },
            Pending::Append { buf, block_count } => {
                match self.send_write(zone, tag, None, buf, block_count) {
                    Ok(()) => return,
                    Err(e) => Err(e),
                }
            }
        };
        self.ready.push_back(Completion { tag, result });
    }

    /// Check a write (`Some(offset)`) or append (`None`) against the
    /// tracked zone and hand it to the kernel.
    fn send_write(
        &mut self,
        zone: ZoneId,
        tag: u64,
        offset: Option<u64>,
        buf: AlignedBuf,
        block_count: u32,
    ) -> Result<(), DeviceError> {
        let t = self.tracked(zone)?;
        let n = u64::from(block_count);
        match t.state {
            ZoneState::Full => return Err(DeviceError::ZoneFull { zone }),
            ZoneState::ReadOnly => return Err(DeviceError::ZoneReadOnly { zone }),
            ZoneState::Offline => return Err(DeviceError::ZoneOffline { zone }),
            _ => {}
        }
        let offset_blocks = offset.unwrap_or(t.wp_blocks);
        if offset_blocks != t.wp_blocks {
            return Err(DeviceError::BadWritePointer {
                zone,
                offset_blocks,
                write_pointer_blocks: t.wp_blocks,
            });
        }
        if offset_blocks + n > t.capacity_blocks {
            return Err(DeviceError::OutOfRange {
                zone,
                offset_blocks,
                block_count: n,
            });
        }
        let bs = u64::from(self.geometry.block_size_bytes);
        let op = BlockOp::Write {
            offset_bytes: self.zone_start_bytes(zone) + offset_blocks * bs,
        };
        let what = if offset.is_some() {
            What::Write
        } else {
            What::Append
        };
        let ctx = Ctx {
            tag,
            zone,
            offset_blocks,
            block_count,
            what,
        };
        self.zones[zone as usize].busy = true;
        self.push(op, buf, ctx);
        Ok(())
    }

    fn push(&mut self, op: BlockOp, buf: AlignedBuf, ctx: Ctx) {
        if self.ring.push(op, buf, ctx).is_err() {
            // submit() keeps in_flight() <= queue depth = ring slots.
            unreachable!("block ring full below the queue depth");
        }
    }

    /// The completion of an operation the kernel finished.
    fn complete(&mut self, f: sys::BlockFinished<Ctx>) -> Completion {
        let c = f.ctx;
        let bs = self.geometry.block_size_bytes as usize;
        let want = c.block_count as usize * bs;
        let result = if f.res < 0 {
            Err(self.io_error(&c, -f.res))
        } else if c.what != What::Flush && f.res as usize != want {
            Err(DeviceError::HostIo {
                op: c.what.name(),
                kind: io::ErrorKind::UnexpectedEof,
                message: format!(
                    "zone {} offset {}: {} of {want} bytes transferred",
                    c.zone, c.offset_blocks, f.res
                ),
            })
        } else {
            Ok(self.outcome(&c, f.buf))
        };
        if matches!(c.what, What::Write | What::Append) {
            let q = &mut self.zones[c.zone as usize];
            q.busy = false;
            q.tracked = match (&result, q.tracked) {
                (Ok(_), Some(t)) => Some(advanced(t, u64::from(c.block_count))),
                _ => None,
            };
            self.pump(c.zone);
        }
        Completion { tag: c.tag, result }
    }

    fn outcome(&self, c: &Ctx, buf: AlignedBuf) -> Outcome {
        match c.what {
            What::Read => Outcome::Read {
                data: buf.into_vec(),
                oob: Vec::new(),
            },
            What::Write | What::Append => Outcome::Written {
                zone: c.zone,
                offset_blocks: c.offset_blocks,
                block_count: c.block_count,
            },
            What::Flush => Outcome::Done,
        }
    }

    /// The typed error of a failed read, write or flush.
    fn io_error(&mut self, c: &Ctx, errno: i32) -> DeviceError {
        if let Some(e) = self.limit_error(c.zone, errno) {
            return e;
        }
        match (c.what, errno) {
            (What::Read, libc::EIO) => DeviceError::UncorrectableRead {
                zone: c.zone,
                offset_blocks: c.offset_blocks,
            },
            (What::Write | What::Append, libc::EIO) => match self.report_zone(c.zone) {
                Ok(t) => write_error(c, t),
                Err(e) => e,
            },
            _ => errno_error(c.what.name(), errno),
        }
    }
}

/// The zone after `n` blocks were written at its write pointer.
fn advanced(t: Tracked, n: u64) -> Tracked {
    let wp_blocks = t.wp_blocks + n;
    let state = if wp_blocks >= t.capacity_blocks {
        ZoneState::Full
    } else if t.state == ZoneState::ExplicitlyOpen {
        ZoneState::ExplicitlyOpen
    } else {
        ZoneState::ImplicitlyOpen
    };
    Tracked {
        state,
        wp_blocks,
        capacity_blocks: t.capacity_blocks,
    }
}

/// Why a write the host thought valid failed (EIO), from the zone now.
fn write_error(c: &Ctx, t: Tracked) -> DeviceError {
    let zone = c.zone;
    match t.state {
        ZoneState::Full => DeviceError::ZoneFull { zone },
        ZoneState::ReadOnly => DeviceError::ZoneReadOnly { zone },
        ZoneState::Offline => DeviceError::ZoneOffline { zone },
        _ if t.wp_blocks != c.offset_blocks => DeviceError::BadWritePointer {
            zone,
            offset_blocks: c.offset_blocks,
            write_pointer_blocks: t.wp_blocks,
        },
        _ => DeviceError::ProgramFailed {
            zone,
            offset_blocks: c.offset_blocks,
        },
    }
}

/// Whether `action` is a valid transition from `state` (NVMe ZNS 2.1).
fn action_valid_from(action: ZoneAction, state: ZoneState) -> bool {
    use ZoneState::*;
    match action {
        ZoneAction::Open => matches!(state, Empty | ImplicitlyOpen | ExplicitlyOpen | Closed),
        ZoneAction::Close => matches!(state, ImplicitlyOpen | ExplicitlyOpen | Closed),
        ZoneAction::Finish => matches!(
            state,
            Empty | ImplicitlyOpen | ExplicitlyOpen | Closed | Full
        ),
        ZoneAction::Reset => !matches!(state, ReadOnly | Offline),
    }
}

/// Which zones an all-zones action touches (as NVMe's Select All does).
fn action_applies_to_all(action: ZoneAction, state: ZoneState) -> bool {
    use ZoneState::*;
    match action {
        ZoneAction::Reset => matches!(state, ImplicitlyOpen | ExplicitlyOpen | Closed | Full),
        ZoneAction::Finish | ZoneAction::Close => {
            matches!(state, ImplicitlyOpen | ExplicitlyOpen | Closed)
        }
        ZoneAction::Open => state == Closed,
    }
}

impl What {
    fn name(self) -> &'static str {
        match self {
            What::Read => "read",
            What::Write => "write",
            What::Append => "append (emulated)",
            What::Flush => "flush",
        }
    }
}

fn errno_error(op: &'static str, errno: i32) -> DeviceError {
    match errno {
        libc::ENODEV | libc::ENXIO => DeviceError::DeviceGone,
        _ => DeviceError::HostIo {
            op,
            kind: io_kind(errno),
            message: io::Error::from_raw_os_error(errno).to_string(),
        },
    }
}

/// Every zone of the device (`size_sectors` long), and whether the kernel
/// reported capacities.
fn report_all(
    file: &File,
    path: &Path,
    size_sectors: u64,
) -> Result<(Vec<BlkZone>, bool), OpenError> {
    let mut zones = Vec::new();
    let mut capacity_reported = true;
    let mut sector = 0;
    while sector < size_sectors {
        let (batch, flags) = sys::blk_report_zones(file, sector).map_err(|e| OpenError::Io {
            path: path.to_path_buf(),
            what: "BLKREPORTZONE",
            source: e,
        })?;
        let Some(last) = batch.last() else { break };
        let next = last.start_sectors + last.len_sectors;
        if next <= sector {
            return Err(OpenError::Unsupported {
                path: path.to_path_buf(),
                reason: format!("the zone report does not advance past sector {sector}"),
            });
        }
        capacity_reported &= flags & sys::BLK_ZONE_REP_CAPACITY != 0;
        zones.extend(batch);
        sector = next;
    }
    Ok((zones, capacity_reported))
}

/// What sysfs says about the device at `dir`; refuses a device that is not
/// zoned.
fn read_sysfs(dir: &Path, path: &Path) -> Result<BlockInfo, OpenError> {
    let p = || path.to_path_buf();
    let name = std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let zoned = std::fs::read_to_string(dir.join("queue/zoned")).unwrap_or_else(|_| "none".into());
    let Some(model) = parse_zoned_model(&zoned) else {
        return Err(OpenError::NotZoned {
            path: p(),
            reason: format!(
                "block device {name} is not zoned (queue/zoned reads {:?})",
                zoned.trim()
            ),
        });
    };
    let lbs = queue_attr(dir, "logical_block_size", path)?;
    let pbs = queue_attr(dir, "physical_block_size", path).unwrap_or(lbs);
    if !(512..=65536).contains(&lbs) || !lbs.is_power_of_two() {
        return Err(OpenError::Unsupported {
            path: p(),
            reason: format!("logical block size {lbs}"),
        });
    }
    let size_sectors = std::fs::read_to_string(dir.join("size"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    // dma_alignment is a mask; absent on older kernels: the logical block
    // size is always enough.
    let dma_alignment_bytes = queue_attr(dir, "dma_alignment", path)
        .map(|m| m as usize + 1)
        .unwrap_or(lbs as usize)
        .clamp(1, 1 << 16)
        .next_power_of_two();
    Ok(BlockInfo {
        name,
        zoned_model: model.to_string(),
        logical_block_bytes: lbs as u32,
        physical_block_bytes: pbs.max(lbs) as u32,
        max_sectors_bytes: queue_attr(dir, "max_sectors_kb", path)? * 1024,
        dma_alignment_bytes,
        size_blocks: size_sectors * SECTOR_BYTES / lbs,
        max_open_zones: zone_limit(dir, "max_open_zones", path)?,
        max_active_zones: zone_limit(dir, "max_active_zones", path)?,
        zone_capacity_range: (0, 0),
        capacity_reported: false,
    })
}

/// An open/active zone limit; kernels before 5.9 have neither (0 = none).
fn zone_limit(dir: &Path, name: &str, path: &Path) -> Result<u32, OpenError> {
    if !dir.join("queue").join(name).exists() {
        return Ok(0);
    }
    let v = queue_attr(dir, name, path)?;
    u32::try_from(v).map_err(|_| OpenError::Unsupported {
        path: path.to_path_buf(),
        reason: format!("queue/{name} = {v}"),
    })
}

/// The geometry of the device from sysfs, its zones and the options.
fn block_geometry(
    info: &BlockInfo,
    zones: &[Tracked],
    zone_size_blocks: u64,
    opts: &ZnsOptions,
    path: &Path,
) -> Result<Geometry, OpenError> {
    let lbs = u64::from(info.logical_block_bytes);
    let write_unit_blocks = (u64::from(info.physical_block_bytes) / lbs).max(1) as u32;
    let transfer_bytes = info.max_sectors_bytes.clamp(lbs, MAX_TRANSFER_BYTES);
    // Whole write units, so that a largest write is never misaligned.
    let max_transfer_blocks = ((transfer_bytes / lbs) as u32 / write_unit_blocks
        * write_unit_blocks)
        .max(write_unit_blocks);
    let zone_count = u32::try_from(zones.len()).map_err(|_| OpenError::Unsupported {
        path: path.to_path_buf(),
        reason: format!("{} zones", zones.len()),
    })?;
    let geometry = Geometry {
        block_size_bytes: info.logical_block_bytes,
        oob_size_bytes: 0,
        zone_count,
        zone_size_blocks,
        zone_capacity_blocks: info.zone_capacity_range.0,
        write_unit_blocks,
        max_append_blocks: max_transfer_blocks,
        max_transfer_blocks,
        max_open_zones: info.max_open_zones,
        max_active_zones: info.max_active_zones,
        parallel_units: 1,
        zone_groups: 1,
        queue_depth: opts.queue_depth.clamp(1, 4096).next_power_of_two(),
    };
    geometry.validate().map_err(|e| OpenError::Geometry {
        path: path.to_path_buf(),
        source: e,
    })?;
    Ok(geometry)
}

impl Backend for ZonedBlockDevice {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        if zone >= self.geometry.zone_count {
            return Err(DeviceError::NoSuchZone { zone });
        }
        let t = self.report_zone(zone)?;
        let q = &mut self.zones[zone as usize];
        if !q.busy && q.waiting.is_empty() {
            q.tracked = Some(t);
        }
        Ok(ZoneInfo {
            zone,
            state: t.state,
            write_pointer_blocks: t.wp_blocks,
            capacity_blocks: t.capacity_blocks,
        })
    }

    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        if self.gone {
            return Err(SubmitError::DeviceGone);
        }
        if self.in_flight() >= self.geometry.queue_depth as usize {
            return Err(SubmitError::Busy);
        }
        if let Err(e) = self.submit_checked(tag, command) {
            self.ready.push_back(Completion {
                tag,
                result: Err(e),
            });
        }
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        self.flush_ring();
        let mut moved = 0;
        while moved < max {
            if let Some(c) = self.ready.pop_front() {
                out.push(c);
                moved += 1;
                continue;
            }
            match self.ring.pop() {
                Some(f) => {
                    let c = self.complete(f);
                    out.push(c);
                    moved += 1;
                }
                None => break,
            }
        }
        // Writes released by these completions.
        self.flush_ring();
        moved
    }

    fn wait(&mut self) -> Result<(), DeviceError> {
        if !self.ready.is_empty() || self.ring.in_kernel() == 0 {
            return Ok(());
        }
        self.ring.wait_one().map_err(|e| {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            if matches!(errno, libc::ENODEV | libc::ENXIO) {
                self.gone = true;
            }
            errno_error("wait", errno)
        })
    }

    fn in_flight(&self) -> usize {
        self.ready.len() + self.ring.in_kernel() + self.waiting
    }

    fn clock_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl ZonedBlockDevice {
    fn flush_ring(&mut self) {
        if let Err(e) = self.ring.flush() {
            if matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::ENXIO)) {
                self.gone = true;
            }
        }
    }
}

impl std::fmt::Debug for ZonedBlockDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZonedBlockDevice")
            .field("path", &self.path)
            .field("geometry", &self.geometry)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(start: u64, len: u64, wp: u64, cond: u8, cap: u64) -> BlkZone {
        BlkZone {
            start_sectors: start,
            len_sectors: len,
            wp_sectors: wp,
            zone_type: 2,
            cond,
            capacity_sectors: cap,
            ..BlkZone::default()
        }
    }

    #[test]
    fn zoned_models_parse() {
        assert_eq!(parse_zoned_model("host-managed\n"), Some("host-managed"));
        assert_eq!(parse_zoned_model("host-aware"), Some("host-aware"));
        assert_eq!(parse_zoned_model("none\n"), None);
        assert_eq!(parse_zoned_model(""), None);
    }

    #[test]
    fn nvme_names_map_both_ways() {
        assert_eq!(nvme_generic_name("nvme0n1").as_deref(), Some("ng0n1"));
        assert_eq!(nvme_generic_name("nvme12n3").as_deref(), Some("ng12n3"));
        assert_eq!(nvme_generic_name("nvme0n1p1"), None);
        assert_eq!(nvme_generic_name("sda"), None);
        assert_eq!(nvme_generic_name("nvmen1"), None);
        assert_eq!(nvme_block_name("ng0n1").as_deref(), Some("nvme0n1"));
        assert_eq!(nvme_block_name("null"), None);
    }

    #[test]
    fn blk_zones_become_tracked_zones_in_blocks() {
        // 4 KiB blocks = 8 sectors; zone 1 of 64 MiB zones, capacity 48 MiB.
        let (start, len, cap) = (131072, 131072, 98304);
        let open = zone(start, len, start + 80, 0x2, cap);
        let t = tracked_of(&open, true, 8).unwrap();
        assert_eq!(
            t,
            Tracked {
                state: ZoneState::ImplicitlyOpen,
                wp_blocks: 10,
                capacity_blocks: 12288
            }
        );
        // Without the capacity flag the length is the capacity.
        assert_eq!(tracked_of(&open, false, 8).unwrap().capacity_blocks, 16384);
        let full = zone(start, len, start + len, 0xe, cap);
        assert_eq!(tracked_of(&full, true, 8).unwrap().wp_blocks, 12288);
        let empty = zone(start, len, start, 0x1, cap);
        assert_eq!(tracked_of(&empty, true, 8).unwrap().state, ZoneState::Empty);
        let offline = zone(start, len, u64::MAX, 0xf, cap);
        assert_eq!(tracked_of(&offline, true, 8).unwrap().wp_blocks, 0);
        let mut conventional = zone(0, len, 0, 0x0, len);
        conventional.zone_type = ZONE_TYPE_CONVENTIONAL;
        assert_eq!(tracked_of(&conventional, true, 8), None);
    }

    #[test]
    fn zones_of_one_size_are_required() {
        let z = |start, len| zone(start, len, start, 0x1, len);
        assert!(check_zone_layout(&[z(0, 8), z(8, 8), z(16, 4)], 8).is_ok());
        assert!(check_zone_layout(&[z(0, 8), z(8, 4), z(12, 8)], 8).is_err());
        assert!(check_zone_layout(&[z(0, 8), z(16, 8)], 8).is_err());
    }

    #[test]
    fn writes_advance_the_tracked_write_pointer() {
        let t = Tracked {
            state: ZoneState::Empty,
            wp_blocks: 0,
            capacity_blocks: 8,
        };
        let t = advanced(t, 3);
        assert_eq!((t.state, t.wp_blocks), (ZoneState::ImplicitlyOpen, 3));
        let t = advanced(
            Tracked {
                state: ZoneState::ExplicitlyOpen,
                ..t
            },
            1,
        );
        assert_eq!((t.state, t.wp_blocks), (ZoneState::ExplicitlyOpen, 4));
        let t = advanced(t, 4);
        assert_eq!((t.state, t.wp_blocks), (ZoneState::Full, 8));
    }

    #[test]
    fn transitions_follow_the_zns_state_machine() {
        use ZoneState::*;
        assert!(!action_valid_from(ZoneAction::Close, Empty));
        assert!(!action_valid_from(ZoneAction::Open, Full));
        assert!(action_valid_from(ZoneAction::Finish, Empty));
        assert!(action_valid_from(ZoneAction::Reset, Full));
        assert!(!action_valid_from(ZoneAction::Reset, Offline));
        assert!(action_applies_to_all(ZoneAction::Reset, Full));
        assert!(!action_applies_to_all(ZoneAction::Reset, Empty));
    }

    #[test]
    fn a_failed_write_is_typed_from_the_zone_state() {
        let c = Ctx {
            tag: 1,
            zone: 3,
            offset_blocks: 5,
            block_count: 1,
            what: What::Write,
        };
        let t = |state, wp_blocks| Tracked {
            state,
            wp_blocks,
            capacity_blocks: 16,
        };
        assert!(matches!(
            write_error(&c, t(ZoneState::Full, 16)),
            DeviceError::ZoneFull { zone: 3 }
        ));
        assert!(matches!(
            write_error(&c, t(ZoneState::ImplicitlyOpen, 7)),
            DeviceError::BadWritePointer {
                zone: 3,
                offset_blocks: 5,
                write_pointer_blocks: 7
            }
        ));
        assert!(matches!(
            write_error(&c, t(ZoneState::ImplicitlyOpen, 5)),
            DeviceError::ProgramFailed {
                zone: 3,
                offset_blocks: 5
            }
        ));
    }

    #[test]
    fn a_block_device_that_is_not_zoned_is_refused_without_opening_it() {
        // Loop devices exist on most Linux hosts and are never zoned.
        let Some(dev) = (0..8)
            .map(|i| PathBuf::from(format!("/dev/loop{i}")))
            .find(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_block_device()))
        else {
            eprintln!("no /dev/loopN here; skipped");
            return;
        };
        let e = ZonedBlockDevice::open(&dev).unwrap_err();
        assert!(matches!(e, OpenError::NotZoned { .. }), "{e}");
        assert!(e.to_string().contains("not zoned"), "{e}");
    }

    #[test]
    fn a_regular_file_is_not_a_block_device() {
        let path = std::env::temp_dir().join(format!("zftl-blk-test-{}", std::process::id()));
        std::fs::write(&path, b"x").unwrap();
        let e = ZonedBlockDevice::open(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(e, OpenError::NotADevice { .. }), "{e}");
    }
}
