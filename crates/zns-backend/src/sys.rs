//! The only module with `unsafe`: the NVMe passthrough structure, the three
//! ioctls the backend uses, and an io_uring ring that owns the buffers of
//! every command the kernel holds.
//!
//! Layouts follow the kernel's UAPI (`include/uapi/linux/nvme_ioctl.h`):
//! `struct nvme_passthru_cmd` (the ioctl form, with `result` last) and
//! `struct nvme_uring_cmd` (the io_uring form, with a reserved word last) are
//! the same 72 bytes, so one Rust struct serves both.

use std::fs::File;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::AsRawFd;

use io_uring::{cqueue, opcode, squeue, types, IoUring};
use zftl_core::Payload;

use crate::aligned::AlignedBuf;

/// `struct nvme_passthru_cmd` / `struct nvme_uring_cmd`: 72 bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NvmeCmd {
    pub opcode: u8,
    pub flags: u8,
    pub rsvd1: u16,
    pub nsid: u32,
    pub cdw2: u32,
    pub cdw3: u32,
    pub metadata: u64,
    pub addr: u64,
    pub metadata_len: u32,
    pub data_len: u32,
    pub cdw10: u32,
    pub cdw11: u32,
    pub cdw12: u32,
    pub cdw13: u32,
    pub cdw14: u32,
    pub cdw15: u32,
    pub timeout_ms: u32,
    /// `result` (dword 0 of the completion) in the ioctl form; reserved in
    /// the io_uring form (the result comes back in the big CQE).
    pub result: u32,
}

const _: () = assert!(size_of::<NvmeCmd>() == 72);
const _: () = assert!(offset_of!(NvmeCmd, nsid) == 4);
const _: () = assert!(offset_of!(NvmeCmd, metadata) == 16);
const _: () = assert!(offset_of!(NvmeCmd, addr) == 24);
const _: () = assert!(offset_of!(NvmeCmd, metadata_len) == 32);
const _: () = assert!(offset_of!(NvmeCmd, data_len) == 36);
const _: () = assert!(offset_of!(NvmeCmd, cdw10) == 40);
const _: () = assert!(offset_of!(NvmeCmd, timeout_ms) == 64);
const _: () = assert!(offset_of!(NvmeCmd, result) == 68);

impl NvmeCmd {
    /// The command as the 80-byte command area of a 128-byte SQE (the
    /// structure, then zero padding), little-endian as on x86-64.
    fn to_sqe_cmd(self) -> [u8; 80] {
        let mut b = [0u8; 80];
        b[0] = self.opcode;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.rsvd1.to_ne_bytes());
        let words32 = [
            (4, self.nsid),
            (8, self.cdw2),
            (12, self.cdw3),
            (32, self.metadata_len),
            (36, self.data_len),
            (40, self.cdw10),
            (44, self.cdw11),
            (48, self.cdw12),
            (52, self.cdw13),
            (56, self.cdw14),
            (60, self.cdw15),
            (64, self.timeout_ms),
            (68, self.result),
        ];
        for (at, v) in words32 {
            b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        }
        b[16..24].copy_from_slice(&self.metadata.to_ne_bytes());
        b[24..32].copy_from_slice(&self.addr.to_ne_bytes());
        b
    }
}

/// `_IO('N', 0x40)`.
const NVME_IOCTL_ID: libc::c_ulong = 0x4E40;
/// `_IOWR('N', 0x41, struct nvme_passthru_cmd)`.
pub const NVME_IOCTL_ADMIN_CMD: libc::c_ulong = 0xC048_4E41;
/// `_IOWR('N', 0x43, struct nvme_passthru_cmd)`.
pub const NVME_IOCTL_IO_CMD: libc::c_ulong = 0xC048_4E43;
/// `_IOWR('N', 0x80, struct nvme_uring_cmd)`.
pub const NVME_URING_CMD_IO: u32 = 0xC048_4E80;
/// `_IOWR('N', 0x81, struct nvme_uring_cmd)`: as [`NVME_URING_CMD_IO`],
/// with `addr` the address of an array of `data_len` iovecs (both came
/// with io_uring passthrough, in Linux 5.19).
pub const NVME_URING_CMD_IO_VEC: u32 = 0xC048_4E81;

/// `struct iovec` as the kernel reads it: a base address and a length.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoVec {
    pub base: u64,
    pub len: u64,
}

const _: () = assert!(size_of::<IoVec>() == size_of::<libc::iovec>());
const _: () = assert!(offset_of!(IoVec, len) == offset_of!(libc::iovec, iov_len));

/// The namespace id behind an NVMe char or block device; fails (ENOTTY) on
/// anything that is not NVMe.
pub fn nvme_nsid(file: &File) -> io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument and only returns a number; the
    // fd is open for the duration of the call.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), NVME_IOCTL_ID as _) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as u32)
    }
}

/// Makes glibc's allocator keep the memory a process frees for its next
/// allocations: blocks up to `mmap_threshold_bytes` come from the heap (not
/// a fresh `mmap` each, faulted in page by page and unmapped on free), and
/// the heap is never trimmed (freed memory at its top is not handed back to
/// the kernel only to be faulted in again). Worth it where page faults are
/// dear, as under an emulated CPU. Returns whether the allocator took both
/// settings (false on a libc other than glibc).
pub fn keep_freed_memory(mmap_threshold_bytes: u32) -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mmap = libc::c_int::try_from(mmap_threshold_bytes).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets allocator parameters; both parameter
        // numbers are glibc's, and it validates the values itself.
        let mmap_ok = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) } == 1;
        // SAFETY: as above; the largest value turns trimming off.
        let trim_ok = unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) } == 1;
        mmap_ok && trim_ok
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        let _ = mmap_threshold_bytes;
        false
    }
}

/// Take an advisory exclusive lock on the device without blocking, so that
/// two zftl processes do not drive one namespace. `Ok(false)` = another
/// process holds it.
pub fn try_lock_exclusive(file: &File) -> io::Result<bool> {
    // SAFETY: flock only reads the fd, which is open for the call.
    let r = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// A synchronous passthrough command (`NVME_IOCTL_ADMIN_CMD` or
/// `NVME_IOCTL_IO_CMD`) moving `data` (device-to-host or host-to-device per
/// the opcode). Returns the NVMe status (0 = success) and dword 0 of the
/// completion; an `Err` is an errno from the kernel.
pub fn passthru(
    file: &File,
    request: libc::c_ulong,
    mut cmd: NvmeCmd,
    data: &mut [u8],
) -> io::Result<(u16, u32)> {
    cmd.addr = if data.is_empty() {
        0
    } else {
        data.as_mut_ptr() as u64
    };
    cmd.data_len = u32::try_from(data.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
    cmd.metadata = 0;
    cmd.metadata_len = 0;
    // SAFETY: `cmd` is a valid `struct nvme_passthru_cmd` (size checked
    // above) that lives across the call; `addr`/`data_len` describe `data`,
    // which is exclusively borrowed for the call, so the kernel may read or
    // write exactly that range. The ioctl is synchronous: nothing refers to
    // either buffer after it returns.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), request as _, &mut cmd as *mut NvmeCmd) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok((r as u16, cmd.result))
    }
}

/// The bytes of a write, as the passthrough command takes them.
#[derive(Debug)]
pub enum WriteSource {
    /// Shared with the FTL's write buffer: in one buffer, or in parts that
    /// meet the controller's page rule (`crate::vectorable`), which go as
    /// a vector.
    Shared(Payload),
    /// Copied into one page-aligned buffer: parts that could not go as a
    /// vector.
    Bounce(AlignedBuf),
}

impl WriteSource {
    /// No bytes (a command that is not a write).
    pub fn none() -> WriteSource {
        WriteSource::Shared(Payload::new())
    }
}

/// Buffers and caller context of one command while the kernel owns it.
#[derive(Debug)]
pub struct Owned<T> {
    /// The bytes a write sends (the kernel only reads them); empty for
    /// other commands.
    pub source: WriteSource,
    /// The vector of a write whose source is in more than one part; filled
    /// in by [`Ring::push`].
    pub iovecs: Vec<IoVec>,
    /// The buffer a read fills; empty for other commands.
    pub data: Vec<u8>,
    pub meta: Vec<u8>,
    pub ctx: T,
}

/// A command the kernel finished, with its buffers handed back.
#[derive(Debug)]
pub struct Finished<T> {
    pub owned: Owned<T>,
    /// The CQE result: 0 success, > 0 an NVMe status, < 0 a negated errno.
    pub res: i32,
    /// The 64-bit command result from the big CQE (the LBA of an append).
    pub result: u64,
}

/// An io_uring whose slot table owns what every queued entry points into
/// (`V`: buffers and caller context) until the entry's CQE is consumed;
/// dropping the ring waits for the kernel first. The NVMe passthrough ring
/// and the block device ring are this with their own entry types.
struct SlotRing<S: squeue::EntryMarker, C: cqueue::EntryMarker, V> {
    ring: IoUring<S, C>,
    file: File,
    slots: Vec<Option<V>>,
    free: Vec<u32>,
    /// Entries pushed and not yet completed (in the SQ or in the kernel).
    in_kernel: usize,
    /// SQEs pushed since the last `io_uring_enter`.
    unsubmitted: usize,
}

impl<S: squeue::EntryMarker, C: cqueue::EntryMarker, V> SlotRing<S, C, V> {
    /// A ring of `entries` submission slots (the completion queue is twice
    /// that, so it cannot overflow: at most `entries` entries are held).
    fn new(file: File, entries: u32) -> io::Result<Self> {
        Ok(SlotRing {
            ring: IoUring::<S, C>::builder().build(entries)?,
            file,
            slots: (0..entries).map(|_| None).collect(),
            free: (0..entries).rev().collect(),
            in_kernel: 0,
            unsubmitted: 0,
        })
    }

    /// Queues the entry `build` makes from `value` and the entry's
    /// user_data; gives `value` back when every slot is taken.
    ///
    /// # Safety
    /// Every address the entry passes to the kernel must lie in heap
    /// storage owned by `value` (which moving `value` does not move).
    unsafe fn push_with(
        &mut self,
        mut value: V,
        build: impl FnOnce(&mut V, u64) -> S,
    ) -> Result<(), V> {
        let Some(slot) = self.free.pop() else {
            return Err(value);
        };
        let entry = build(&mut value, u64::from(slot));
        // The value moves into the slot table; its heap storage (what the
        // SQE points at) does not move with it.
        self.slots[slot as usize] = Some(value);
        loop {
            // SAFETY: by the caller's contract the SQE points only into the
            // value now in `slots[slot]`; that entry is only taken out in
            // `pop`, after the kernel posted the CQE with this slot's
            // user_data, and `Drop` waits for every pushed entry before the
            // slot table is freed. The fd stays open as long as `self.file`.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                break;
            }
            // SQ full of unsubmitted entries: hand them to the kernel.
            // Failing cannot happen with in_kernel <= entries; keep trying
            // rather than lose track of the buffers.
            if let Err(e) = self.ring.submit() {
                if !matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN)) {
                    std::thread::yield_now();
                }
            }
        }
        self.in_kernel += 1;
        self.unsubmitted += 1;
        Ok(())
    }

    /// Hand pushed SQEs to the kernel without waiting.
    fn flush(&mut self) -> io::Result<()> {
        if self.unsubmitted == 0 {
            return Ok(());
        }
        loop {
            match self.ring.submit() {
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
            }
        }
        self.unsubmitted = self.ring.submission().len();
        Ok(())
    }

    fn has_completion(&mut self) -> bool {
        !self.ring.completion().is_empty()
    }

    /// Submit pushed SQEs and block until at least one CQE is ready.
    fn wait_one(&mut self) -> io::Result<()> {
        loop {
            if self.has_completion() || self.in_kernel == 0 {
                return Ok(());
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => self.unsubmitted = self.ring.submission().len(),
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The next completion and the value of its entry; never blocks.
    fn pop(&mut self) -> Option<(V, C)> {
        let cqe = self.ring.completion().next()?;
        let slot = cqe.user_data() as usize;
        let value = self.slots[slot]
            .take()
            .expect("CQE for a slot that holds no entry");
        self.free.push(slot as u32);
        self.in_kernel -= 1;
        Some((value, cqe))
    }
}

impl<S: squeue::EntryMarker, C: cqueue::EntryMarker, V> Drop for SlotRing<S, C, V> {
    fn drop(&mut self) {
        // The kernel may still DMA into buffers of entries in flight: wait
        // for every one before the slot table (and its buffers) goes.
        while self.in_kernel > 0 {
            while self.pop().is_some() {}
            if self.in_kernel == 0 {
                break;
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                Err(_) => {
                    // The ring is unusable; leaking the buffers is the only
                    // safe way out (the kernel may still write to them).
                    std::mem::forget(std::mem::take(&mut self.slots));
                    return;
                }
            }
        }
    }
}

/// An io_uring with 128-byte SQEs and 32-byte CQEs over one NVMe char
/// device. Every buffer a queued command refers to is owned here until its
/// CQE has been consumed; dropping the ring waits for the kernel first.
pub struct Ring<T> {
    inner: SlotRing<squeue::Entry128, cqueue::Entry32, Owned<T>>,
}

impl<T> Ring<T> {
    /// A ring of `entries` submission slots.
    pub fn new(file: File, entries: u32) -> io::Result<Self> {
        Ok(Ring {
            inner: SlotRing::new(file, entries)?,
        })
    }

    pub fn file(&self) -> &File {
        &self.inner.file
    }

    /// Commands pushed and not yet popped.
    pub fn in_kernel(&self) -> usize {
        self.inner.in_kernel
    }

    /// Queue `cmd` with the buffers of `owned` as its data and metadata
    /// (their addresses and lengths are filled in here). Gives `owned` back
    /// when every slot is taken.
    pub fn push(&mut self, mut cmd: NvmeCmd, owned: Owned<T>) -> Result<(), Owned<T>> {
        let fd = types::Fd(self.inner.file.as_raw_fd());
        let build = |owned: &mut Owned<T>, user_data: u64| {
            let mut cmd_op = NVME_URING_CMD_IO;
            let shared = match &owned.source {
                WriteSource::Shared(p) => p,
                WriteSource::Bounce(_) => &Payload::new(),
            };
            (cmd.addr, cmd.data_len) = if shared.part_count() > 1 {
                owned.iovecs = shared
                    .parts()
                    .map(|p| IoVec {
                        base: p.as_ptr() as u64,
                        len: p.len() as u64,
                    })
                    .collect();
                cmd_op = NVME_URING_CMD_IO_VEC;
                (owned.iovecs.as_ptr() as u64, owned.iovecs.len() as u32)
            } else if let Some(bytes) = shared.as_contiguous().filter(|b| !b.is_empty()) {
                (bytes.as_ptr() as u64, bytes.len() as u32)
            } else if let WriteSource::Bounce(b) = &owned.source {
                (b.as_ptr() as u64, b.len() as u32)
            } else if owned.data.is_empty() {
                (0, 0)
            } else {
                (owned.data.as_mut_ptr() as u64, owned.data.len() as u32)
            };
            cmd.metadata = if owned.meta.is_empty() {
                0
            } else {
                owned.meta.as_mut_ptr() as u64
            };
            cmd.metadata_len = owned.meta.len() as u32;
            opcode::UringCmd80::new(fd, cmd_op)
                .cmd(cmd.to_sqe_cmd())
                .build()
                .user_data(user_data)
        };
        // SAFETY: the command's only addresses are the heap storage of
        // `owned.source` (which the device only reads: the command writes
        // it to the media), `owned.iovecs` (which point into
        // that storage and are not changed again), `owned.data` and
        // `owned.meta`; the
        // ring keeps `owned` until the CQE, and the source's buffers cannot
        // move or be freed while `owned.source` holds them.
        unsafe { self.inner.push_with(owned, build) }
    }

    /// Hand pushed SQEs to the kernel without waiting.
    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// Submit pushed SQEs and block until at least one CQE is ready.
    pub fn wait_one(&mut self) -> io::Result<()> {
        self.inner.wait_one()
    }

    /// The next finished command, if any; never blocks.
    pub fn pop(&mut self) -> Option<Finished<T>> {
        let (owned, cqe) = self.inner.pop()?;
        Some(Finished {
            owned,
            res: cqe.result(),
            result: cqe.big_cqe()[0],
        })
    }
}

// ---------------------------------------------------------------------------
// Zoned block devices: `include/uapi/linux/blkzoned.h` and an io_uring of
// plain positional reads and writes.
// ---------------------------------------------------------------------------

/// `struct blk_zone`: one zone of a `BLKREPORTZONE` answer. Sectors are
/// 512 bytes whatever the logical block size.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlkZone {
    pub start_sectors: u64,
    pub len_sectors: u64,
    pub wp_sectors: u64,
    pub zone_type: u8,
    pub cond: u8,
    pub non_seq: u8,
    pub reset: u8,
    pub resv: [u8; 4],
    /// Valid when the report's flags carry `BLK_ZONE_REP_CAPACITY`.
    pub capacity_sectors: u64,
    pub reserved: [u8; 24],
}

const _: () = assert!(size_of::<BlkZone>() == 64);
const _: () = assert!(offset_of!(BlkZone, len_sectors) == 8);
const _: () = assert!(offset_of!(BlkZone, wp_sectors) == 16);
const _: () = assert!(offset_of!(BlkZone, zone_type) == 24);
const _: () = assert!(offset_of!(BlkZone, cond) == 25);
const _: () = assert!(offset_of!(BlkZone, capacity_sectors) == 32);

/// `struct blk_zone_report` without its flexible array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlkZoneReport {
    pub sector: u64,
    pub nr_zones: u32,
    pub flags: u32,
}

const _: () = assert!(size_of::<BlkZoneReport>() == 16);
const _: () = assert!(offset_of!(BlkZoneReport, nr_zones) == 8);
const _: () = assert!(offset_of!(BlkZoneReport, flags) == 12);

/// `struct blk_zone_range`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlkZoneRange {
    pub sector: u64,
    pub nr_sectors: u64,
}

const _: () = assert!(size_of::<BlkZoneRange>() == 16);
const _: () = assert!(offset_of!(BlkZoneRange, nr_sectors) == 8);

/// Zones asked for per `BLKREPORTZONE`.
pub const REPORT_BATCH_ZONES: usize = 128;

/// The header and its zones as one buffer, as the ioctl expects them.
#[repr(C)]
struct ReportBuf {
    hdr: BlkZoneReport,
    zones: [BlkZone; REPORT_BATCH_ZONES],
}

const _: () = assert!(offset_of!(ReportBuf, zones) == 16);
const _: () = assert!(size_of::<ReportBuf>() == 16 + 64 * REPORT_BATCH_ZONES);

/// `BLK_ZONE_REP_CAPACITY`: the kernel filled in `capacity_sectors`.
pub const BLK_ZONE_REP_CAPACITY: u32 = 1 << 0;

/// `_IOC(dir, type, nr, size)` of `include/uapi/asm-generic/ioctl.h`.
const fn ioc(dir: u64, ty: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (ty << 8) | nr
}
const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

/// `_IOWR(0x12, 130, struct blk_zone_report)`.
pub const BLKREPORTZONE: u64 = ioc(IOC_READ | IOC_WRITE, 0x12, 130, size_of::<BlkZoneReport>());
/// `_IOW(0x12, 131, struct blk_zone_range)`.
pub const BLKRESETZONE: u64 = ioc(IOC_WRITE, 0x12, 131, size_of::<BlkZoneRange>());
/// `_IOW(0x12, 134, struct blk_zone_range)`.
pub const BLKOPENZONE: u64 = ioc(IOC_WRITE, 0x12, 134, size_of::<BlkZoneRange>());
/// `_IOW(0x12, 135, struct blk_zone_range)`.
pub const BLKCLOSEZONE: u64 = ioc(IOC_WRITE, 0x12, 135, size_of::<BlkZoneRange>());
/// `_IOW(0x12, 136, struct blk_zone_range)`.
pub const BLKFINISHZONE: u64 = ioc(IOC_WRITE, 0x12, 136, size_of::<BlkZoneRange>());

// The values the kernel headers expand to on x86-64.
const _: () = assert!(BLKREPORTZONE == 0xC010_1282);
const _: () = assert!(BLKRESETZONE == 0x4010_1283);
const _: () = assert!(BLKOPENZONE == 0x4010_1286);
const _: () = assert!(BLKCLOSEZONE == 0x4010_1287);
const _: () = assert!(BLKFINISHZONE == 0x4010_1288);

/// `BLKREPORTZONE` from `sector`: up to [`REPORT_BATCH_ZONES`] zones and
/// the report's flags.
pub fn blk_report_zones(file: &File, sector: u64) -> io::Result<(Vec<BlkZone>, u32)> {
    let mut buf = Box::new(ReportBuf {
        hdr: BlkZoneReport {
            sector,
            nr_zones: REPORT_BATCH_ZONES as u32,
            flags: 0,
        },
        zones: [BlkZone::default(); REPORT_BATCH_ZONES],
    });
    // SAFETY: `buf` is a `struct blk_zone_report` followed by room for
    // `nr_zones` `struct blk_zone`s (layouts asserted above); the kernel
    // writes at most `nr_zones` zones and updates the header. The ioctl is
    // synchronous and `buf` outlives it.
    let r = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            BLKREPORTZONE as _,
            &mut *buf as *mut ReportBuf,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = (buf.hdr.nr_zones as usize).min(REPORT_BATCH_ZONES);
    Ok((buf.zones[..n].to_vec(), buf.hdr.flags))
}

/// One of `BLKRESETZONE`, `BLKOPENZONE`, `BLKCLOSEZONE`, `BLKFINISHZONE`
/// on the sectors `range` (whole zones).
pub fn blk_zone_mgmt(file: &File, request: u64, range: BlkZoneRange) -> io::Result<()> {
    debug_assert!([BLKRESETZONE, BLKOPENZONE, BLKCLOSEZONE, BLKFINISHZONE].contains(&request));
    // SAFETY: the four requests read one `struct blk_zone_range` (layout
    // asserted above), which lives across the synchronous call.
    let r = unsafe {
        libc::ioctl(
            file.as_raw_fd(),
            request as _,
            &range as *const BlkZoneRange,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// A positional operation on the block device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockOp {
    Read {
        offset_bytes: u64,
    },
    Write {
        offset_bytes: u64,
    },
    /// A cache flush (fsync of the block device).
    Fsync,
}

/// A finished block operation with its buffer handed back.
#[derive(Debug)]
pub struct BlockFinished<T> {
    pub buf: AlignedBuf,
    pub ctx: T,
    /// Bytes moved, or a negated errno.
    pub res: i32,
}

/// An io_uring of plain 64-byte SQEs over one block device (opened with
/// O_DIRECT). Every buffer of a queued operation is owned here until its
/// CQE is consumed; dropping the ring waits for the kernel first.
pub struct BlockRing<T> {
    inner: SlotRing<squeue::Entry, cqueue::Entry, (AlignedBuf, T)>,
}

impl<T> BlockRing<T> {
    pub fn new(file: File, entries: u32) -> io::Result<Self> {
        Ok(BlockRing {
            inner: SlotRing::new(file, entries)?,
        })
    }

    pub fn file(&self) -> &File {
        &self.inner.file
    }

    pub fn in_kernel(&self) -> usize {
        self.inner.in_kernel
    }

    /// Queue `op` on the window of `buf`. Gives the buffer back when every
    /// slot is taken.
    pub fn push(&mut self, op: BlockOp, buf: AlignedBuf, ctx: T) -> Result<(), (AlignedBuf, T)> {
        let len = u32::try_from(buf.len()).expect("transfers are capped far below 4 GiB");
        let fd = types::Fd(self.inner.file.as_raw_fd());
        let build = |(buf, _): &mut (AlignedBuf, T), user_data: u64| {
            let ptr = buf.as_mut_ptr();
            match op {
                BlockOp::Read { offset_bytes } => {
                    opcode::Read::new(fd, ptr, len).offset(offset_bytes).build()
                }
                BlockOp::Write { offset_bytes } => opcode::Write::new(fd, ptr, len)
                    .offset(offset_bytes)
                    .build(),
                BlockOp::Fsync => opcode::Fsync::new(fd).build(),
            }
            .user_data(user_data)
        };
        // SAFETY: the operation's only address is `buf`'s bytes (`len` of
        // them), heap storage that does not move while the ring keeps `buf`,
        // until the CQE.
        unsafe { self.inner.push_with((buf, ctx), build) }
    }

    /// Hand pushed SQEs to the kernel without waiting.
    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    /// Submit pushed SQEs and block until at least one CQE is ready.
    pub fn wait_one(&mut self) -> io::Result<()> {
        self.inner.wait_one()
    }

    /// The next finished operation, if any; never blocks.
    pub fn pop(&mut self) -> Option<BlockFinished<T>> {
        let ((buf, ctx), cqe) = self.inner.pop()?;
        Some(BlockFinished {
            buf,
            ctx,
            res: cqe.result(),
        })
    }
}
