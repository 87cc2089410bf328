//! `zftl-zns`: the [`Backend`] for NVMe Zoned Namespace SSDs through io_uring
//! passthrough on the NVMe generic char device `/dev/ngXnY` ([`ZnsDevice`]),
//! and for zoned block devices through positional I/O and the zone ioctls
//! ([`ZonedBlockDevice`], module `blkdev`). [`open_device`] picks the path:
//! passthrough when it works, the block device otherwise ([`Device`]).
//!
//! The passthrough path:
//!
//! * Identify (controller, namespace, ZNS controller and namespace data) and
//!   a Zone Management Receive of every zone give the [`Geometry`]. NVMe ZNS
//!   reports a capacity per zone; the geometry takes the minimum over the
//!   zones that are not offline (QEMU and today's drives give one value for
//!   all zones), and [`Backend::zone_info`] reports each zone's own value.
//! * Read, Write, Zone Append, Zone Management Send (open, close, finish,
//!   reset) and Flush go through one io_uring (128-byte SQEs, 32-byte CQEs,
//!   `IORING_OP_URING_CMD` with `NVME_URING_CMD_IO`); the appended LBA comes
//!   back in the big CQE. Many commands are in flight at once; the queue
//!   depth of the geometry is the ring size.
//! * NVMe does not order commands. Commands that move a zone's write pointer
//!   or state in a way the caller orders (Write, Reset, Finish, Open, Close)
//!   are therefore sent one at a time per zone, each when the previous one
//!   of that zone has completed; reads and appends go out at once.
//! * Commands the device would reject for reasons the host can see (buffer
//!   sizes, zone numbers, transfer limits, reads outside the zone capacity)
//!   complete with their typed error without reaching the device. NVMe
//!   status codes are decoded into [`DeviceError`]s; errors whose typed form
//!   needs the zone's state (a write off the write pointer, an invalid state
//!   transition) read the zone's descriptor when they complete.
//! * A write whose bytes are in several buffers (an append of the FTL's
//!   write buffer holds the blocks of several host requests) goes as a
//!   vector of them (`NVME_URING_CMD_IO_VEC`) when the kernel can map them
//!   for the device as they are: every buffer after the first starts on a
//!   4 KiB page and every one before the last ends on one. Other writes of
//!   several buffers are copied into one page-aligned [`AlignedBuf`] first,
//!   as the kernel would do otherwise. (The FTL's callers' buffers come
//!   from the heap, which starts them 16 bytes into a page: most writes of
//!   several request buffers are copied.)
//! * Per-block metadata of the namespace's LBA format (separate buffer, not
//!   interleaved) is the OOB area: [`Geometry::oob_size_bytes`] is its size,
//!   0 without metadata.
//!
//! Limits of this version: transfers are capped at 256 KiB (an unaligned
//! user buffer of that size spans at most 65 pages, well inside the NVMe
//! driver's segment limit); the memory page size of the controller is
//! assumed to be 4 KiB when reading MDTS and ZASL; no registered buffers;
//! power cuts cannot be simulated on real hardware.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod sys;

mod aligned;
mod blkdev;
mod device;

pub use aligned::AlignedBuf;
pub use blkdev::{BlockInfo, ZonedBlockDevice};
pub use device::{open_device, Device, IoPath};
pub use sys::keep_freed_memory;

use std::cell::Cell;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use zftl_core::backend::{
    Backend, Command, Completion, DeviceError, Geometry, GeometryError, Outcome, Payload,
    SubmitError, ZoneId, ZoneInfo, ZoneState,
};

use sys::{NvmeCmd, Owned, Ring, WriteSource, NVME_IOCTL_ADMIN_CMD, NVME_IOCTL_IO_CMD};

/// NVMe opcodes (`include/linux/nvme.h`).
mod op {
    pub const FLUSH: u8 = 0x00;
    pub const WRITE: u8 = 0x01;
    pub const READ: u8 = 0x02;
    pub const ZONE_MGMT_SEND: u8 = 0x79;
    pub const ZONE_MGMT_RECV: u8 = 0x7a;
    pub const ZONE_APPEND: u8 = 0x7d;
    pub const ADMIN_IDENTIFY: u8 = 0x06;
}

/// Zone Send Actions.
mod zsa {
    pub const CLOSE: u32 = 1;
    pub const FINISH: u32 = 2;
    pub const OPEN: u32 = 3;
    pub const RESET: u32 = 4;
    /// Select All, bit 8 of CDW13.
    pub const SELECT_ALL: u32 = 1 << 8;
}

/// NVMe status codes: (Status Code Type << 8) | Status Code, as the kernel
/// returns them (without the phase bit; DNR is 0x4000, More 0x2000).
mod sc {
    pub const MASK: u16 = 0x7ff;
    pub const LBA_RANGE: u16 = 0x080;
    pub const ZONE_BOUNDARY_ERROR: u16 = 0x1b8;
    pub const ZONE_FULL: u16 = 0x1b9;
    pub const ZONE_READ_ONLY: u16 = 0x1ba;
    pub const ZONE_OFFLINE: u16 = 0x1bb;
    pub const ZONE_INVALID_WRITE: u16 = 0x1bc;
    pub const ZONE_TOO_MANY_ACTIVE: u16 = 0x1bd;
    pub const ZONE_TOO_MANY_OPEN: u16 = 0x1be;
    pub const ZONE_INVALID_TRANSITION: u16 = 0x1bf;
    pub const WRITE_FAULT: u16 = 0x280;
    pub const READ_ERROR: u16 = 0x281;
}

/// Command Set Identifier of Zoned Namespaces.
const CSI_ZNS: u32 = 2;
/// Identify data size.
const IDENTIFY_BYTES: usize = 4096;
/// Upper bound on one transfer (see the crate docs).
pub(crate) const MAX_TRANSFER_BYTES: u64 = 256 << 10;
/// Zone descriptors asked for per report while opening.
const REPORT_CHUNK_ZONES: u64 = 1024;
/// Default ring size (and queue depth).
pub const DEFAULT_QUEUE_DEPTH: u32 = 64;

/// Why a device could not be opened as a ZNS backend.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{path}: no such device")]
    NotFound { path: PathBuf },
    #[error("{path}: permission denied (zftl needs read-write access to the device; NVMe passthrough on kernels before 6.2 also needs CAP_SYS_ADMIN: run as root)")]
    PermissionDenied { path: PathBuf },
    #[error("{path}: the device is in use (busy, or locked by another zftl process)")]
    Busy { path: PathBuf },
    #[error("{path}: not a character device ({kind}); NVMe passthrough needs the generic char device /dev/ngXnY")]
    NotCharDevice { path: PathBuf, kind: &'static str },
    #[error("{path}: not a character device ({kind}) nor a block device; give an NVMe generic char device /dev/ngXnY or a zoned block device such as /dev/nvmeXnY")]
    NotADevice { path: PathBuf, kind: &'static str },
    #[error("{path}: not an NVMe device (the NVMe namespace-id ioctl failed: {source})")]
    NotNvme { path: PathBuf, source: io::Error },
    #[error("{path}: not a zoned (ZNS) namespace: {reason}")]
    NotZoned { path: PathBuf, reason: String },
    #[error("{path}: unsupported namespace: {reason}")]
    Unsupported { path: PathBuf, reason: String },
    #[error("{path}: {what} failed: {source}")]
    Io {
        path: PathBuf,
        what: &'static str,
        source: io::Error,
    },
    #[error("{path}: {what} failed with NVMe status {status:#x}")]
    Nvme {
        path: PathBuf,
        what: &'static str,
        status: u16,
    },
    #[error("{path}: the device's geometry is not usable: {source}")]
    Geometry {
        path: PathBuf,
        source: GeometryError,
    },
}

/// Options for [`ZnsDevice::open_with`].
#[derive(Clone, Debug)]
pub struct ZnsOptions {
    /// Ring size = commands in flight at once (a power of two, 1..=4096).
    pub queue_depth: u32,
}

impl Default for ZnsOptions {
    fn default() -> Self {
        ZnsOptions {
            queue_depth: DEFAULT_QUEUE_DEPTH,
        }
    }
}

/// What the Identify commands said, for `zftl info` and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamespaceInfo {
    pub nsid: u32,
    /// Namespace size in logical blocks.
    pub size_blocks: u64,
    /// Index of the LBA format in use.
    pub lba_format: u8,
    /// Maximum data transfer size reported by the controller, bytes (0 = none).
    pub mdts_bytes: u64,
    /// Zone append size limit reported by the controller, bytes (0 = MDTS).
    pub zasl_bytes: u64,
    /// Zone capacities seen at open: (minimum, maximum) over non-offline zones.
    pub zone_capacity_range: (u64, u64),
    /// The controller's model number and firmware revision, trimmed.
    pub model: String,
    pub firmware: String,
    /// Workarounds in force for known bugs of this controller, one
    /// sentence each.
    pub quirks: Vec<&'static str>,
}

/// The quirk `zftl info` lists on a QEMU controller with per-block
/// metadata: QEMU's emulated controller (7.2 at least) keeps only the first
/// `len % 512` bytes of a separate metadata buffer longer than 512 bytes
/// that is not a multiple of 512, so the backend caps each transfer at 512
/// bytes of metadata (docs/zns.md, "Known problems").
pub const QUIRK_QEMU_METADATA: &str = "QEMU's controller drops metadata bytes of transfers \
     with more than 512 of them (unless a multiple of 512): transfers capped at 512 bytes of \
     metadata";

/// The most blocks one transfer may carry on a controller with this model
/// number and `meta_bytes` of metadata per block, where a known bug limits
/// it. QEMU's emulated controller (7.2 at least; the model number carries
/// no version) keeps only the first `len % 512` bytes of a separate
/// metadata buffer longer than 512 bytes that is not a multiple of 512: a
/// write of 38 blocks with 16 bytes each kept the metadata of its first 6
/// blocks and left the other 32 zeroed; 33 and 40 blocks lost their last
/// 32 too, while 8, 20, 24, 32 and 64 came back whole (docs/zns.md;
/// measured, not traced in QEMU's source). At most 512 bytes of metadata
/// per transfer always arrive whole.
fn metadata_transfer_cap(model: &str, meta_bytes: u32) -> Option<u32> {
    (model.starts_with("QEMU NVMe") && (1..512).contains(&meta_bytes)).then(|| 512 / meta_bytes)
}

/// What one command is, kept with its buffers while it is in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    Append,
    Reset,
    Finish,
    Open,
    Close,
    Flush,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Append => "zone append",
            Kind::Reset => "reset",
            Kind::Finish => "finish",
            Kind::Open => "open",
            Kind::Close => "close",
            Kind::Flush => "flush",
        }
    }

    /// Sent one at a time per zone, in submission order.
    fn ordered(self) -> bool {
        matches!(
            self,
            Kind::Write | Kind::Reset | Kind::Finish | Kind::Open | Kind::Close
        )
    }
}

#[derive(Clone, Copy, Debug)]
struct Ctx {
    tag: u64,
    kind: Kind,
    zone: ZoneId,
    offset_blocks: u64,
    block_count: u32,
}

#[derive(Debug, Default)]
struct ZoneQueue {
    /// An ordered command of this zone is with the kernel.
    busy: bool,
    waiting: VecDeque<(NvmeCmd, Owned<Ctx>)>,
}

/// An NVMe ZNS namespace behind `/dev/ngXnY`, as a [`Backend`].
pub struct ZnsDevice {
    ring: Ring<Ctx>,
    path: PathBuf,
    nsid: u32,
    geometry: Geometry,
    info: NamespaceInfo,
    /// Per-block metadata bytes of the LBA format (= oob_size_bytes).
    meta_bytes: u32,
    /// Completions decided on the host, waiting to be reaped.
    ready: VecDeque<Completion>,
    zones: Vec<ZoneQueue>,
    /// Commands waiting in `zones[..].waiting`.
    waiting: usize,
    start: Instant,
    gone: bool,
    /// The block device node of the namespace, held open and flocked.
    _sibling_locks: Vec<File>,
    /// How writes reached the kernel (counted where they are prepared).
    write_buffers: Cell<WriteBuffers>,
}

/// How the writes and appends sent so far reached the kernel, in commands
/// ([`ZnsDevice::write_buffers`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteBuffers {
    /// In the one buffer their bytes were in.
    pub whole: u64,
    /// As a vector of the buffers their bytes were in, without a copy.
    pub vectored: u64,
    /// Copied into one buffer first.
    pub copied: u64,
}

impl WriteBuffers {
    /// The commands counted since `earlier` (a count taken before this one).
    pub fn since(self, earlier: WriteBuffers) -> WriteBuffers {
        WriteBuffers {
            whole: self.whole - earlier.whole,
            vectored: self.vectored - earlier.vectored,
            copied: self.copied - earlier.copied,
        }
    }

    /// Both counts added up.
    pub fn plus(self, other: WriteBuffers) -> WriteBuffers {
        WriteBuffers {
            whole: self.whole + other.whole,
            vectored: self.vectored + other.vectored,
            copied: self.copied + other.copied,
        }
    }

    /// All commands counted.
    pub fn total(self) -> u64 {
        self.whole + self.vectored + self.copied
    }
}

/// A write's bytes as the passthrough command takes them: a payload in one
/// buffer (a metadata write, or an append within one host request's
/// buffer) or in parts that can go as a vector ([`vectorable`]) goes as it
/// is; others are copied into one page-aligned buffer (a bounce buffer).
/// Counts which in `counts`.
fn gathered(data: Payload, counts: &Cell<WriteBuffers>) -> WriteSource {
    let mut c = counts.get();
    let out = if data.as_contiguous().is_some() {
        c.whole += 1;
        WriteSource::Shared(data)
    } else if vectorable(&data) {
        c.vectored += 1;
        WriteSource::Shared(data)
    } else {
        c.copied += 1;
        WriteSource::Bounce(AlignedBuf::gather(data.parts(), AlignedBuf::PAGE_BYTES))
    };
    counts.set(c);
    out
}

/// Most parts a vectored write may have; a payload of more is copied into
/// one buffer. An append of the FTL's write buffer holds one part per host
/// request it takes blocks of: 2 for 128 KiB requests in a 256 KiB append
/// (`MAX_TRANSFER_BYTES`).
const MAX_VECTOR_PARTS: usize = 16;

/// The NVMe controller page the kernel maps a vectored command's buffers
/// in (its `virt_boundary`; Linux's NVMe driver always uses 4 KiB).
const CTRL_PAGE_BYTES: usize = 4096;

/// Whether the kernel can map `data`'s parts for the device as they are:
/// each part but the first must start on a controller page and each but
/// the last end on one (the device's data pointers address whole pages
/// after the first), and the first start on a 4-byte boundary. Otherwise
/// the kernel would copy them into a bounce buffer, which costs what
/// copying them here does. The FTL's payload parts are windows of its
/// callers' write buffers, which meet this only where those buffers happen
/// to start and end on pages.
fn vectorable(data: &Payload) -> bool {
    data.part_count() <= MAX_VECTOR_PARTS
        && pages_chain(
            data.part_count(),
            data.parts().map(|p| (p.as_ptr() as usize, p.len())),
        )
}

/// Whether `count` parts at these (address, length) pairs, two or more,
/// meet the rule of [`vectorable`].
fn pages_chain(count: usize, parts: impl Iterator<Item = (usize, usize)>) -> bool {
    count >= 2
        && parts.enumerate().all(|(i, (start, len))| {
            let start_align = if i == 0 { 4 } else { CTRL_PAGE_BYTES };
            start.is_multiple_of(start_align)
                && (i + 1 == count || (start + len).is_multiple_of(CTRL_PAGE_BYTES))
        })
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// One zone descriptor of a Zone Management Receive report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ZoneDesc {
    state: Option<ZoneState>,
    capacity: u64,
    start: u64,
    wp: u64,
}

fn parse_zone_desc(d: &[u8]) -> ZoneDesc {
    let state = match d[1] >> 4 {
        0x1 => Some(ZoneState::Empty),
        0x2 => Some(ZoneState::ImplicitlyOpen),
        0x3 => Some(ZoneState::ExplicitlyOpen),
        0x4 => Some(ZoneState::Closed),
        0xd => Some(ZoneState::ReadOnly),
        0xe => Some(ZoneState::Full),
        0xf => Some(ZoneState::Offline),
        _ => None,
    };
    ZoneDesc {
        state,
        capacity: le64(d, 8),
        start: le64(d, 16),
        wp: le64(d, 24),
    }
}

fn io_kind(errno: i32) -> io::ErrorKind {
    io::Error::from_raw_os_error(errno).kind()
}

/// The typed error of a failed open (or stat) of `path`.
pub(crate) fn open_error(path: &Path, e: io::Error) -> OpenError {
    let path = path.to_path_buf();
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENXIO) | Some(libc::ENODEV) => OpenError::NotFound { path },
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EROFS) => {
            OpenError::PermissionDenied { path }
        }
        Some(libc::EBUSY) => OpenError::Busy { path },
        _ => OpenError::Io {
            path,
            what: "open",
            source: e,
        },
    }
}

/// Words for a file type in error messages.
pub(crate) fn file_kind(ft: &std::fs::FileType) -> &'static str {
    if ft.is_block_device() {
        "a block device"
    } else if ft.is_char_device() {
        "a character device"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "another kind of file"
    }
}

/// How long an open waits for a held node lock before it answers Busy:
/// a `flock` follows the open file description, so a child forked by any
/// thread of this process keeps a just-closed node locked until it execs.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// flock `file` (the device node being opened) or answer Busy.
pub(crate) fn lock(file: &File, path: &Path) -> Result<(), OpenError> {
    let started = std::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match sys::try_lock_exclusive(file) {
            Ok(true) => return Ok(()),
            Ok(false) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            Ok(false) => {
                return Err(OpenError::Busy {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => {
                return Err(OpenError::Io {
                    path: path.to_path_buf(),
                    what: "flock",
                    source: e,
                })
            }
        }
    }
}

/// The other node of the same NVMe namespace (`/dev/nvmeXnY` for
/// `/dev/ngXnY` and back) is locked too, so that a zftl on one path and a
/// zftl on the other cannot drive one namespace. A node that does not
/// exist or cannot be opened locks nothing.
pub(crate) fn lock_sibling(sibling: &Path) -> Result<Vec<File>, OpenError> {
    let Ok(file) = File::open(sibling) else {
        return Ok(Vec::new());
    };
    lock(&file, sibling)?;
    Ok(vec![file])
}

impl ZnsDevice {
    /// Open `path` (an NVMe generic char device of a zoned namespace) with
    /// the default options.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        Self::open_with(path, &ZnsOptions::default())
    }

    pub fn open_with(path: impl AsRef<Path>, opts: &ZnsOptions) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let p = || path.clone();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| open_error(&path, e))?;
        let ft = file
            .metadata()
            .map_err(|e| OpenError::Io {
                path: p(),
                what: "stat",
                source: e,
            })?
            .file_type();
        if !ft.is_char_device() {
            return Err(OpenError::NotCharDevice {
                path: p(),
                kind: file_kind(&ft),
            });
        }
        let nsid = sys::nvme_nsid(&file).map_err(|e| OpenError::NotNvme {
            path: p(),
            source: e,
        })?;
        lock(&file, &path)?;
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        let siblings = match name.as_deref().and_then(blkdev::nvme_block_name) {
            Some(b) => lock_sibling(&Path::new("/dev").join(b))?,
            None => Vec::new(),
        };

        let admin = |what: &'static str, cmd: NvmeCmd| -> Result<Vec<u8>, OpenError> {
            let mut buf = vec![0u8; IDENTIFY_BYTES];
            match sys::passthru(&file, NVME_IOCTL_ADMIN_CMD, cmd, &mut buf) {
                Ok((0, _)) => Ok(buf),
                Ok((status, _)) => Err(OpenError::Nvme {
                    path: p(),
                    what,
                    status,
                }),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) => {
                    Err(OpenError::PermissionDenied { path: p() })
                }
                Err(e) => Err(OpenError::Io {
                    path: p(),
                    what,
                    source: e,
                }),
            }
        };
        let identify = |cns: u32, nsid: u32, csi: u32| NvmeCmd {
            opcode: op::ADMIN_IDENTIFY,
            nsid,
            cdw10: cns,
            cdw11: csi << 24,
            ..NvmeCmd::default()
        };
        // Identify Controller: MDTS (byte 77), in units of the minimum memory
        // page size (assumed 4 KiB).
        let ctrl = admin("Identify Controller", identify(1, 0, 0))?;
        let mdts = ctrl[77];
        let mdts_bytes = if mdts == 0 { 0 } else { 4096u64 << mdts };
        let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
        let (model, firmware) = (text(&ctrl[24..64]), text(&ctrl[64..72]));
        // Identify Namespace: size, LBA format, metadata.
        let ns = admin("Identify Namespace", identify(0, nsid, 0))?;
        let nsze = le64(&ns, 0);
        let flbas = ns[26];
        let nlbaf = ns[25];
        let fmt = (flbas & 0x0f) | (((flbas >> 5) & 0x3) << 4);
        if fmt > nlbaf.max(63) {
            return Err(OpenError::Unsupported {
                path: p(),
                reason: format!("LBA format index {fmt} out of range"),
            });
        }
        let lbaf = 128 + 4 * fmt as usize;
        let meta_bytes = u32::from(le16(&ns, lbaf));
        let lbads = ns[lbaf + 2];
        if !(9..=16).contains(&lbads) {
            return Err(OpenError::Unsupported {
                path: p(),
                reason: format!("LBA data size 2^{lbads} bytes"),
            });
        }
        let block_bytes = 1u32 << lbads;
        if meta_bytes > 0 && flbas & 0x10 != 0 {
            return Err(OpenError::Unsupported {
                path: p(),
                reason: format!(
                    "{meta_bytes} bytes of metadata interleaved with the data (extended LBA); \
                     only a separate metadata buffer is supported"
                ),
            });
        }
        // ZNS controller and namespace data.
        let not_zoned = |e: OpenError| match e {
            OpenError::Nvme { status, what, .. } => OpenError::NotZoned {
                path: p(),
                reason: format!(
                    "{what} answered NVMe status {status:#x} (the namespace does not use the \
                     Zoned command set)"
                ),
            },
            other => other,
        };
        let zns_ns = admin(
            "Identify Namespace (ZNS command set)",
            identify(5, nsid, CSI_ZNS),
        )
        .map_err(not_zoned)?;
        let zns_ctrl = admin(
            "Identify Controller (ZNS command set)",
            identify(6, 0, CSI_ZNS),
        )
        .map_err(not_zoned)?;
        let zasl = zns_ctrl[0];
        let zasl_bytes = if zasl == 0 { 0 } else { 4096u64 << zasl };
        let mar = le32(&zns_ns, 4);
        let mor = le32(&zns_ns, 8);
        let zone_size = le64(&zns_ns, 2816 + 16 * fmt as usize);
        if zone_size == 0 {
            return Err(OpenError::NotZoned {
                path: p(),
                reason: "zone size 0 in the ZNS namespace data".into(),
            });
        }
        let zone_count = u32::try_from(nsze / zone_size).map_err(|_| OpenError::Unsupported {
            path: p(),
            reason: format!("{} zones", nsze / zone_size),
        })?;
        // Zone capacities (QEMU: one for all; take the minimum otherwise).
        let mut cap_min = u64::MAX;
        let mut cap_max = 0;
        let mut zone = 0u64;
        while zone < u64::from(zone_count) {
            let n = REPORT_CHUNK_ZONES.min(u64::from(zone_count) - zone);
            let descs = report_zones(&file, nsid, zone * zone_size, n as usize).map_err(|e| {
                OpenError::Io {
                    path: p(),
                    what: "Zone Management Receive",
                    source: e,
                }
            })?;
            if descs.is_empty() {
                break;
            }
            for d in &descs {
                if d.state != Some(ZoneState::Offline) {
                    cap_min = cap_min.min(d.capacity);
                    cap_max = cap_max.max(d.capacity);
                }
            }
            zone += descs.len() as u64;
        }
        if cap_min == u64::MAX {
            return Err(OpenError::Unsupported {
                path: p(),
                reason: "every zone is offline".into(),
            });
        }
        let limit_blocks = |bytes: u64| -> u32 {
            let b = if bytes == 0 {
                MAX_TRANSFER_BYTES
            } else {
                bytes.min(MAX_TRANSFER_BYTES)
            };
            (b / u64::from(block_bytes)).clamp(1, 65536) as u32
        };
        let mut quirks = Vec::new();
        let mut max_transfer_blocks = limit_blocks(mdts_bytes);
        if let Some(cap) = metadata_transfer_cap(&model, meta_bytes) {
            max_transfer_blocks = max_transfer_blocks.min(cap);
            quirks.push(QUIRK_QEMU_METADATA);
        }
        let max_append_blocks = limit_blocks(if zasl_bytes == 0 {
            mdts_bytes
        } else {
            zasl_bytes
        })
        .min(max_transfer_blocks);
        // MAR/MOR are 0-based; all ones = no limit.
        let limit = |v: u32| if v == u32::MAX { 0 } else { v + 1 };
        let qd = opts.queue_depth.clamp(1, 4096).next_power_of_two();
        let geometry = Geometry {
            block_size_bytes: block_bytes,
            oob_size_bytes: meta_bytes,
            zone_count,
            zone_size_blocks: zone_size,
            zone_capacity_blocks: cap_min,
            write_unit_blocks: 1,
            max_append_blocks,
            max_transfer_blocks,
            max_open_zones: limit(mor),
            max_active_zones: limit(mar),
            parallel_units: 1,
            zone_groups: 1,
            queue_depth: qd,
        };
        geometry.validate().map_err(|e| OpenError::Geometry {
            path: p(),
            source: e,
        })?;
        let info = NamespaceInfo {
            nsid,
            size_blocks: nsze,
            lba_format: fmt,
            mdts_bytes,
            zasl_bytes,
            zone_capacity_range: (cap_min, cap_max),
            model,
            firmware,
            quirks,
        };
        let ring = Ring::new(file, qd).map_err(|e| OpenError::Io {
            path: p(),
            what: "io_uring setup (128-byte SQEs, 32-byte CQEs)",
            source: e,
        })?;
        Ok(ZnsDevice {
            ring,
            path,
            nsid,
            geometry,
            info,
            meta_bytes,
            ready: VecDeque::new(),
            zones: (0..zone_count).map(|_| ZoneQueue::default()).collect(),
            waiting: 0,
            start: Instant::now(),
            gone: false,
            _sibling_locks: siblings,
            write_buffers: Cell::default(),
        })
    }

    /// How the writes and appends sent so far reached the kernel.
    pub fn write_buffers(&self) -> WriteBuffers {
        self.write_buffers.get()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn namespace_info(&self) -> &NamespaceInfo {
        &self.info
    }

    fn zone_start(&self, zone: ZoneId) -> u64 {
        u64::from(zone) * self.geometry.zone_size_blocks
    }

    /// Synchronous Zone Management Send on an idle or busy queue (outside
    /// the ring). `zone = None` selects all zones.
    pub fn zone_action_sync(
        &mut self,
        zone: Option<ZoneId>,
        action: ZoneAction,
    ) -> Result<(), DeviceError> {
        let (slba, all) = match zone {
            Some(z) if z >= self.geometry.zone_count => {
                return Err(DeviceError::NoSuchZone { zone: z })
            }
            Some(z) => (self.zone_start(z), 0),
            None => (0, zsa::SELECT_ALL),
        };
        let cmd = NvmeCmd {
            opcode: op::ZONE_MGMT_SEND,
            nsid: self.nsid,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            cdw13: action.code() | all,
            ..NvmeCmd::default()
        };
        match sys::passthru(self.ring.file(), NVME_IOCTL_IO_CMD, cmd, &mut []) {
            Ok((0, _)) => Ok(()),
            Ok((status, _)) => {
                let ctx = Ctx {
                    tag: 0,
                    kind: action.kind(),
                    zone: zone.unwrap_or(0),
                    offset_blocks: 0,
                    block_count: 0,
                };
                Err(self.decode_status(&ctx, status))
            }
            Err(e) => Err(self.errno_error(action.kind(), e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }

    /// Reset every zone that is not empty, read-only or offline (one Zone
    /// Management Send with Select All).
    pub fn reset_all(&mut self) -> Result<(), DeviceError> {
        self.zone_action_sync(None, ZoneAction::Reset)
    }

    fn report_zone(&self, zone: ZoneId) -> Result<ZoneDesc, DeviceError> {
        let start = self.zone_start(zone);
        match report_zones(self.ring.file(), self.nsid, start, 1) {
            Ok(d) if d.len() == 1 && d[0].start == start => Ok(d[0]),
            Ok(d) => Err(DeviceError::HostIo {
                op: "zone report",
                kind: io::ErrorKind::InvalidData,
                message: format!(
                    "report for zone {zone} (LBA {start}) returned {} descriptors{}",
                    d.len(),
                    d.first()
                        .map(|d| format!(", the first at LBA {}", d.start))
                        .unwrap_or_default()
                ),
            }),
            Err(e) => Err(self.errno_error(Kind::Read, e.raw_os_error().unwrap_or(libc::EIO))),
        }
    }

    fn errno_error(&self, kind: Kind, errno: i32) -> DeviceError {
        match errno {
            libc::ENODEV | libc::ENXIO | libc::EIO => DeviceError::DeviceGone,
            _ => DeviceError::HostIo {
                op: kind.name(),
                kind: io_kind(errno),
                message: io::Error::from_raw_os_error(errno).to_string(),
            },
        }
    }

    /// The typed error of an NVMe status for the command `c`.
    fn decode_status(&self, c: &Ctx, status: u16) -> DeviceError {
        let zone = c.zone;
        let n = u64::from(c.block_count);
        // The write pointer now, for errors that name it.
        let wp = || -> Result<u64, DeviceError> {
            let d = self.report_zone(zone)?;
            Ok(d.wp.saturating_sub(d.start))
        };
        match status & sc::MASK {
            sc::ZONE_FULL => DeviceError::ZoneFull { zone },
            sc::ZONE_READ_ONLY => DeviceError::ZoneReadOnly { zone },
            sc::ZONE_OFFLINE => DeviceError::ZoneOffline { zone },
            sc::ZONE_TOO_MANY_ACTIVE => DeviceError::TooManyActiveZones {
                zone,
                limit: self.geometry.max_active_zones,
            },
            sc::ZONE_TOO_MANY_OPEN => DeviceError::TooManyOpenZones {
                zone,
                limit: self.geometry.max_open_zones,
            },
            sc::ZONE_INVALID_WRITE => match wp() {
                Ok(wp) => DeviceError::BadWritePointer {
                    zone,
                    offset_blocks: c.offset_blocks,
                    write_pointer_blocks: wp,
                },
                Err(e) => e,
            },
            sc::ZONE_BOUNDARY_ERROR | sc::LBA_RANGE => {
                let offset_blocks = if c.kind == Kind::Append {
                    match wp() {
                        Ok(wp) => wp,
                        Err(e) => return e,
                    }
                } else {
                    c.offset_blocks
                };
                DeviceError::OutOfRange {
                    zone,
                    offset_blocks,
                    block_count: n,
                }
            }
            sc::ZONE_INVALID_TRANSITION => match self.report_zone(zone) {
                Ok(d) => DeviceError::InvalidTransition {
                    zone,
                    state: d.state.unwrap_or(ZoneState::Offline),
                    action: c.kind.name(),
                },
                Err(e) => e,
            },
            sc::READ_ERROR => DeviceError::UncorrectableRead {
                zone,
                offset_blocks: c.offset_blocks,
            },
            sc::WRITE_FAULT if c.kind == Kind::Reset => DeviceError::EraseFailed { zone },
            sc::WRITE_FAULT => DeviceError::ProgramFailed {
                zone,
                offset_blocks: c.offset_blocks,
            },
            _ => DeviceError::HostIo {
                op: c.kind.name(),
                kind: io::ErrorKind::Other,
                message: format!(
                    "NVMe status {status:#06x} (type {:#x}, code {:#04x}{}) on zone {zone}",
                    (status >> 8) & 0x7,
                    status & 0xff,
                    if status & 0x4000 != 0 {
                        ", do not retry"
                    } else {
                        ""
                    }
                ),
            },
        }
    }

    /// Check what the host can check; the command, the buffers and the
    /// context to send, or the error to complete with.
    #[allow(clippy::type_complexity)]
    fn prepare(&self, tag: u64, command: Command) -> Result<(NvmeCmd, Owned<Ctx>), DeviceError> {
        let g = &self.geometry;
        let bs = g.block_size_bytes as usize;
        let ms = self.meta_bytes as usize;
        if let Some(z) = command.zone() {
            if z >= g.zone_count {
                return Err(DeviceError::NoSuchZone { zone: z });
            }
        }
        let rw = |opcode: u8, slba: u64, nlb: u32| NvmeCmd {
            opcode,
            nsid: self.nsid,
            cdw10: slba as u32,
            cdw11: (slba >> 32) as u32,
            cdw12: nlb - 1,
            ..NvmeCmd::default()
        };
        let ctx = |kind, zone, offset_blocks, block_count| Ctx {
            tag,
            kind,
            zone,
            offset_blocks,
            block_count,
        };
        // Data and metadata buffers of a write or append.
        let program = |data: &Payload, oob: &mut Vec<u8>, limit: u32| -> Result<u32, DeviceError> {
            if data.is_empty() || !data.len().is_multiple_of(bs) {
                return Err(DeviceError::BufferSize {
                    expected_bytes: data.len().div_ceil(bs).max(1) * bs,
                    actual_bytes: data.len(),
                });
            }
            let n = data.len() / bs;
            if !oob.is_empty() && oob.len() != n * ms {
                return Err(DeviceError::BufferSize {
                    expected_bytes: n * ms,
                    actual_bytes: oob.len(),
                });
            }
            if n as u64 > u64::from(limit) {
                return Err(DeviceError::TooLarge {
                    block_count: n as u64,
                    limit_blocks: limit,
                });
            }
            if ms > 0 && oob.is_empty() {
                oob.resize(n * ms, 0);
            }
            Ok(n as u32)
        };
        let mgmt = |zone: ZoneId, action: ZoneAction| {
            let slba = self.zone_start(zone);
            let cmd = NvmeCmd {
                opcode: op::ZONE_MGMT_SEND,
                nsid: self.nsid,
                cdw10: slba as u32,
                cdw11: (slba >> 32) as u32,
                cdw13: action.code(),
                ..NvmeCmd::default()
            };
            Ok((
                cmd,
                Owned {
                    source: WriteSource::none(),
                    data: Vec::new(),
                    meta: Vec::new(),
                    iovecs: Vec::new(),
                    ctx: ctx(action.kind(), zone, 0, 0),
                },
            ))
        };
        match command {
            // `priority` is not passed on: an NVMe read has no priority
            // field (NVMe arbitrates between submission queues, not commands).
            Command::Read {
                zone,
                offset_blocks,
                block_count,
                priority: _,
            } => {
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
                let cmd = rw(op::READ, self.zone_start(zone) + offset_blocks, block_count);
                Ok((
                    cmd,
                    Owned {
                        source: WriteSource::none(),
                        data: vec![0; block_count as usize * bs],
                        meta: vec![0; block_count as usize * ms],
                        iovecs: Vec::new(),
                        ctx: ctx(Kind::Read, zone, offset_blocks, block_count),
                    },
                ))
            }
            Command::Write {
                zone,
                offset_blocks,
                data,
                mut oob,
            } => {
                let n = program(&data, &mut oob, g.max_transfer_blocks)?;
                if offset_blocks.saturating_add(u64::from(n)) > g.zone_size_blocks {
                    // Not addressable inside the zone at all.
                    return Err(DeviceError::OutOfRange {
                        zone,
                        offset_blocks,
                        block_count: u64::from(n),
                    });
                }
                let cmd = rw(op::WRITE, self.zone_start(zone) + offset_blocks, n);
                let source = gathered(data, &self.write_buffers);
                Ok((
                    cmd,
                    Owned {
                        source,
                        data: Vec::new(),
                        meta: oob,
                        iovecs: Vec::new(),
                        ctx: ctx(Kind::Write, zone, offset_blocks, n),
                    },
                ))
            }
            Command::Append {
                zone,
                data,
                mut oob,
            } => {
                let n = program(&data, &mut oob, g.max_append_blocks)?;
                let cmd = rw(op::ZONE_APPEND, self.zone_start(zone), n);
                let source = gathered(data, &self.write_buffers);
                Ok((
                    cmd,
                    Owned {
                        source,
                        data: Vec::new(),
                        meta: oob,
                        iovecs: Vec::new(),
                        ctx: ctx(Kind::Append, zone, 0, n),
                    },
                ))
            }
            Command::Reset { zone } => mgmt(zone, ZoneAction::Reset),
            Command::Finish { zone } => mgmt(zone, ZoneAction::Finish),
            Command::Open { zone } => mgmt(zone, ZoneAction::Open),
            Command::Close { zone } => mgmt(zone, ZoneAction::Close),
            Command::Flush => Ok((
                NvmeCmd {
                    opcode: op::FLUSH,
                    nsid: self.nsid,
                    ..NvmeCmd::default()
                },
                Owned {
                    source: WriteSource::none(),
                    data: Vec::new(),
                    meta: Vec::new(),
                    iovecs: Vec::new(),
                    ctx: ctx(Kind::Flush, 0, 0, 0),
                },
            )),
        }
    }

    /// The completion of a command the kernel finished.
    fn complete(&mut self, f: sys::Finished<Ctx>) -> Completion {
        let c = f.owned.ctx;
        let result = if f.res < 0 {
            let errno = -f.res;
            if matches!(errno, libc::ENODEV | libc::ENXIO) {
                self.gone = true;
            }
            Err(self.errno_error(c.kind, errno))
        } else if f.res > 0 {
            Err(self.decode_status(&c, f.res as u16))
        } else {
            match c.kind {
                Kind::Read => Ok(Outcome::Read {
                    data: f.owned.data,
                    oob: f.owned.meta,
                }),
                Kind::Write => Ok(Outcome::Written {
                    zone: c.zone,
                    offset_blocks: c.offset_blocks,
                    block_count: c.block_count,
                }),
                Kind::Append => {
                    let start = self.zone_start(c.zone);
                    match f.result.checked_sub(start) {
                        Some(off) if off < self.geometry.zone_size_blocks => Ok(Outcome::Written {
                            zone: c.zone,
                            offset_blocks: off,
                            block_count: c.block_count,
                        }),
                        _ => Err(DeviceError::HostIo {
                            op: "zone append",
                            kind: io::ErrorKind::InvalidData,
                            message: format!(
                                "the device reported LBA {} for an append to zone {} (LBAs {start}..{})",
                                f.result,
                                c.zone,
                                start + self.geometry.zone_size_blocks
                            ),
                        }),
                    }
                }
                _ => Ok(Outcome::Done),
            }
        };
        if c.kind.ordered() {
            self.next_in_zone(c.zone);
        }
        Completion { tag: c.tag, result }
    }

    /// The zone's ordered command finished: send the next one, if any.
    fn next_in_zone(&mut self, zone: ZoneId) {
        let q = &mut self.zones[zone as usize];
        match q.waiting.pop_front() {
            Some((cmd, owned)) => {
                self.waiting -= 1;
                if let Err(owned) = self.ring.push(cmd, owned) {
                    // Cannot happen: a slot was just freed.
                    let q = &mut self.zones[zone as usize];
                    q.waiting.push_front((cmd, owned));
                    self.waiting += 1;
                    q.busy = false;
                }
            }
            None => q.busy = false,
        }
    }

    fn flush_ring(&mut self) {
        if let Err(e) = self.ring.flush() {
            if matches!(e.raw_os_error(), Some(libc::ENODEV) | Some(libc::ENXIO)) {
                self.gone = true;
            }
        }
    }
}

/// A Zone Management Send action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneAction {
    Open,
    Close,
    Finish,
    Reset,
}

impl ZoneAction {
    fn code(self) -> u32 {
        match self {
            ZoneAction::Open => zsa::OPEN,
            ZoneAction::Close => zsa::CLOSE,
            ZoneAction::Finish => zsa::FINISH,
            ZoneAction::Reset => zsa::RESET,
        }
    }

    fn name(self) -> &'static str {
        self.kind().name()
    }

    fn kind(self) -> Kind {
        match self {
            ZoneAction::Open => Kind::Open,
            ZoneAction::Close => Kind::Close,
            ZoneAction::Finish => Kind::Finish,
            ZoneAction::Reset => Kind::Reset,
        }
    }
}

/// Zone Management Receive (report zones, all states, partial report) of up
/// to `max` zones from `slba`.
fn report_zones(file: &File, nsid: u32, slba: u64, max: usize) -> io::Result<Vec<ZoneDesc>> {
    let mut buf = vec![0u8; 64 + 64 * max];
    let cmd = NvmeCmd {
        opcode: op::ZONE_MGMT_RECV,
        nsid,
        cdw10: slba as u32,
        cdw11: (slba >> 32) as u32,
        cdw12: (buf.len() / 4 - 1) as u32,
        // Report Zones (ZRA 0), all states (ZRASF 0), partial report (bit 16).
        cdw13: 1 << 16,
        ..NvmeCmd::default()
    };
    let (status, _) = sys::passthru(file, NVME_IOCTL_IO_CMD, cmd, &mut buf)?;
    if status != 0 {
        return Err(io::Error::other(format!(
            "Zone Management Receive answered NVMe status {status:#x}"
        )));
    }
    let n = (le64(&buf, 0) as usize).min(max);
    Ok((0..n)
        .map(|i| parse_zone_desc(&buf[64 + 64 * i..128 + 64 * i]))
        .collect())
}

impl Backend for ZnsDevice {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        if zone >= self.geometry.zone_count {
            return Err(DeviceError::NoSuchZone { zone });
        }
        let d = self.report_zone(zone)?;
        let state = d.state.ok_or_else(|| DeviceError::HostIo {
            op: "zone report",
            kind: io::ErrorKind::InvalidData,
            message: format!("zone {zone} reports an unknown state"),
        })?;
        let write_pointer_blocks = match state {
            ZoneState::Empty => 0,
            // The write pointer of full, read-only and offline zones is not
            // valid in NVMe; full zones are written up to their capacity.
            ZoneState::Full => d.capacity,
            ZoneState::Offline => 0,
            _ => d.wp.saturating_sub(d.start).min(d.capacity),
        };
        Ok(ZoneInfo {
            zone,
            state,
            write_pointer_blocks,
            capacity_blocks: d.capacity,
        })
    }

    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        if self.gone {
            return Err(SubmitError::DeviceGone);
        }
        if self.in_flight() >= self.geometry.queue_depth as usize {
            return Err(SubmitError::Busy);
        }
        let (cmd, owned) = match self.prepare(tag, command) {
            Ok(x) => x,
            Err(e) => {
                self.ready.push_back(Completion {
                    tag,
                    result: Err(e),
                });
                return Ok(());
            }
        };
        let kind = owned.ctx.kind;
        let zone = owned.ctx.zone;
        if kind.ordered() {
            let q = &mut self.zones[zone as usize];
            if q.busy {
                q.waiting.push_back((cmd, owned));
                self.waiting += 1;
                return Ok(());
            }
            q.busy = true;
        }
        if self.ring.push(cmd, owned).is_err() {
            // The ring holds at most queue_depth commands and in_flight()
            // counts them all, so a slot is always free here.
            unreachable!("ring full below the queue depth");
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
        // Ordered commands released by these completions.
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
            self.errno_error(Kind::Read, errno)
        })
    }

    fn in_flight(&self) -> usize {
        self.ready.len() + self.ring.in_kernel() + self.waiting
    }

    fn clock_ns(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl std::fmt::Debug for ZnsDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZnsDevice")
            .field("path", &self.path)
            .field("nsid", &self.nsid)
            .field("geometry", &self.geometry)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_with_metadata_caps_transfers_at_512_bytes_of_it() {
        assert_eq!(metadata_transfer_cap("QEMU NVMe Ctrl", 16), Some(32));
        assert_eq!(metadata_transfer_cap("QEMU NVMe Ctrl", 8), Some(64));
        assert_eq!(metadata_transfer_cap("QEMU NVMe Ctrl", 0), None);
        assert_eq!(metadata_transfer_cap("QEMU NVMe Ctrl", 512), None);
        assert_eq!(metadata_transfer_cap("Samsung ZNS SSD", 16), None);
    }

    #[test]
    fn parts_chain_on_controller_pages() {
        const P: usize = CTRL_PAGE_BYTES;
        let chain = |parts: &[(usize, usize)]| pages_chain(parts.len(), parts.iter().copied());
        // Page-aligned 128 KiB buffers; a first part may start anywhere
        // dword-aligned, a last part may end anywhere.
        assert!(chain(&[(8 * P, 32 * P), (40 * P, 32 * P)]));
        assert!(chain(&[(8 * P + 16, 4 * P - 16), (P, 100)]));
        // One part goes as it is, not as a vector.
        assert!(!chain(&[(8 * P, 32 * P)]));
        // Heap blocks at 16 bytes into a page: a later part starts off a page.
        assert!(!chain(&[(8 * P + 16, 32 * P), (48 * P + 16, 32 * P)]));
        // A first part that does not end on a page.
        assert!(!chain(&[(8 * P, 32 * P + 512), (48 * P, 32 * P)]));
        // A middle part that does not end on a page.
        assert!(!chain(&[(0, P), (4 * P, P + 8), (8 * P, P)]));
        // A first part off a dword.
        assert!(!chain(&[(8 * P + 2, 4 * P - 2), (P, P)]));
    }

    #[test]
    fn zone_descriptor_parses() {
        let mut d = [0u8; 64];
        d[0] = 0x2;
        d[1] = 0x2 << 4;
        d[8..16].copy_from_slice(&100u64.to_le_bytes());
        d[16..24].copy_from_slice(&16384u64.to_le_bytes());
        d[24..32].copy_from_slice(&16390u64.to_le_bytes());
        let z = parse_zone_desc(&d);
        assert_eq!(z.state, Some(ZoneState::ImplicitlyOpen));
        assert_eq!((z.capacity, z.start, z.wp), (100, 16384, 16390));
    }

    #[test]
    fn opening_a_regular_file_is_a_clear_error() {
        let path = std::env::temp_dir().join(format!("zftl-zns-test-{}", std::process::id()));
        std::fs::write(&path, b"x").unwrap();
        let e = ZnsDevice::open(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(e, OpenError::NotCharDevice { .. }), "{e}");
    }

    #[test]
    fn a_missing_device_is_not_found() {
        let e = ZnsDevice::open("/dev/ng-does-not-exist").unwrap_err();
        assert!(matches!(e, OpenError::NotFound { .. }), "{e}");
    }

    #[test]
    fn a_second_open_of_a_locked_device_is_busy() {
        // Any file can be locked; a regular file stands in for the device.
        let path = std::env::temp_dir().join(format!("zftl-zns-lock-{}", std::process::id()));
        std::fs::write(&path, b"x").unwrap();
        let a = File::open(&path).unwrap();
        let b = File::open(&path).unwrap();
        assert!(sys::try_lock_exclusive(&a).unwrap());
        assert!(!sys::try_lock_exclusive(&b).unwrap());
        drop(a);
        assert!(sys::try_lock_exclusive(&b).unwrap());
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_char_device_that_is_not_nvme_is_named() {
        let e = ZnsDevice::open("/dev/null").unwrap_err();
        assert!(matches!(e, OpenError::NotNvme { .. }), "{e}");
    }
}
