//! Errors the FTL reports to its callers. Device problems carry the zone,
//! offset and checksums; bad input says which argument and why.

use crate::addr::Lba;
use crate::backend::{DeviceError, ZoneId};
use crate::nameless::NamelessAddr;

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
    #[error("nameless: {0}")]
    Nameless(#[from] NamelessError),
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

/// Why a request of the physical segment (nameless writes) failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NamelessError {
    #[error("this volume has no physical segment: nameless writes need tags in OOB with {needed_oob_bytes} bytes of OOB per block ({oob_bytes} here)")]
    Unsupported {
        needed_oob_bytes: usize,
        oob_bytes: usize,
    },
    #[error("address {:#018x} lies outside the physical segment", .addr.to_u64())]
    OutOfSegment { addr: NamelessAddr },
    #[error("address {:#018x} holds no live block (never written, or freed)", .addr.to_u64())]
    NotLive { addr: NamelessAddr },
    #[error("address {:#018x} is stale: its zone has been rewritten since (generation {zone_generation})", .addr.to_u64())]
    Stale {
        addr: NamelessAddr,
        zone_generation: u32,
    },
    #[error("{actual} addresses where {expected} (one per block) were expected")]
    AddressCount { expected: usize, actual: usize },
    #[error("address {:#018x} is named twice in one request", .addr.to_u64())]
    Duplicate { addr: NamelessAddr },
    #[error("metadata of {actual_bytes} bytes where {expected_bytes} were expected")]
    MetadataSize {
        expected_bytes: usize,
        actual_bytes: usize,
    },
    #[error("the media's free room is held by dead blocks GC may not collect before {entries} moved blocks are acknowledged: acknowledge the Migrated events delivered (NamelessAck, or a commit)")]
    MovesUnacknowledged { entries: u32 },
    #[error("address {:#018x} (zone {zone}, offset {offset_blocks}): checksum mismatch, expected {expected_crc:#010x}, found {actual_crc:#010x}", .addr.to_u64())]
    Corrupt {
        addr: NamelessAddr,
        zone: ZoneId,
        offset_blocks: u64,
        expected_crc: u32,
        actual_crc: u32,
    },
}
