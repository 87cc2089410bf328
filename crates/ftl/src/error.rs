//! Errors the FTL reports to its callers. Device problems carry the zone,
//! offset and checksums; bad input says which argument and why.

use crate::addr::Lba;
use crate::backend::{DeviceError, ZoneId};

/// Why a host request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IoError {
    #[error(
        "blocks {lba}..+{block_count} lie outside the logical space of {logical_blocks} blocks"
    )]
    OutOfRange {
        lba: Lba,
        block_count: u64,
        logical_blocks: u64,
    },
    #[error("request of {block_count} blocks exceeds the limit of {max_blocks}")]
    TooLarge { block_count: u64, max_blocks: u32 },
    #[error("data buffer of {actual_bytes} bytes where {expected_bytes} were expected")]
    BufferSize {
        expected_bytes: usize,
        actual_bytes: usize,
    },
    #[error("no space left on the media (thin-provisioned volume is full)")]
    NoSpace,
    #[error("too many requests in flight")]
    Busy,
    #[error("block {lba} (zone {zone}, offset {offset_blocks}): checksum mismatch, expected {expected_crc:#010x}, found {actual_crc:#010x}")]
    Corrupt {
        lba: Lba,
        zone: ZoneId,
        offset_blocks: u64,
        expected_crc: u32,
        actual_crc: u32,
    },
    #[error("block {lba} (zone {zone}, offset {offset_blocks}): tag names block {found_lba}")]
    Misdirected {
        lba: Lba,
        zone: ZoneId,
        offset_blocks: u64,
        found_lba: Lba,
    },
    #[error("block {lba}: device error: {source}")]
    Device { lba: Lba, source: DeviceError },
    #[error("the volume is read-only after a metadata write failure; remount")]
    ReadOnly,
    #[error("block {lba} is in an immutable range")]
    Immutable { lba: Lba },
    #[error("bad range-operation vector: {reason}")]
    BadVector { reason: String },
    #[error("merge conflict at block {lba}: more than one source changed it")]
    MergeConflict { lba: Lba },
    #[error("the shared-block table is full ({capacity} entries): the vector needs {needed} more")]
    SharingFull { capacity: u32, needed: u64 },
    #[error("the attribute table is full ({max_ranges} ranges)")]
    AttributeTableFull { max_ranges: usize },
    #[error("the device is gone")]
    DeviceGone,
    #[error("snapshot: {0}")]
    Snapshot(#[from] crate::history::SnapshotError),
    #[error("fork: {0}")]
    Fork(#[from] crate::fork::ForkError),
    #[error("no space left on the media: snapshots hold the space (delete a snapshot to free it)")]
    SnapshotSpace,
}

/// Why format or mount failed.
#[derive(Debug, thiserror::Error)]
pub enum MountError {
    #[error("not a zftl device: {0}")]
    NotFormatted(String),
    #[error("damaged metadata: {0}")]
    Damaged(String),
    #[error("device geometry does not fit zftl: {0}")]
    Unsupported(String),
    #[error("device error during {step}: {source}")]
    Device {
        step: &'static str,
        source: DeviceError,
    },
    #[error("metadata format error during {step}: {source}")]
    Format {
        step: &'static str,
        source: crate::codec::FormatError,
    },
}
