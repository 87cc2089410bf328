//! The store's errors: bad input, a full table, damage found on the media,
//! and the FTL's own errors passed on.

use zftl::core::IoError;

/// What a store call can fail with. Bad input changes nothing.
#[allow(missing_docs)] // the fields are named for what they hold
#[derive(Debug, thiserror::Error)]
pub enum KvError {
    /// A key longer than [`MAX_KEY_BYTES`](crate::MAX_KEY_BYTES).
    #[error("key of {len_bytes} bytes; at most {max_bytes}")]
    KeyTooLong { len_bytes: usize, max_bytes: usize },
    /// A value longer than the volume's block.
    #[error("value of {len_bytes} bytes; at most {max_bytes} (one block)")]
    ValueTooLarge { len_bytes: usize, max_bytes: usize },
    /// Every bucket is full: delete keys, or create the store with more.
    #[error("the index is full ({buckets} buckets of {entries_per_bucket} entries)")]
    IndexFull {
        buckets: u32,
        entries_per_bucket: usize,
    },
    /// The logical value area is full (logical value placement only).
    #[error("the logical value area is full ({blocks} blocks)")]
    ValueAreaFull { blocks: u64 },
    /// The store's layout does not fit the volume, or asks for nothing.
    #[error("store layout: {0}")]
    Layout(String),
    /// No store header where one was expected (the block reads as zeros).
    #[error("no store at LBA {lba}")]
    NotAStore { lba: u64 },
    /// The store header fails its checks.
    #[error("store header at LBA {lba}: {reason}")]
    CorruptHeader { lba: u64, reason: String },
    /// An index bucket fails its checks.
    #[error("index bucket {bucket} (LBA {lba}): {reason}")]
    CorruptBucket {
        bucket: u32,
        lba: u64,
        reason: String,
    },
    /// The value an entry points at is not the one the entry describes
    /// (its metadata names another key, version or length).
    #[error("value of a key at {addr:#x}: {reason}")]
    ValueMismatch { addr: u64, reason: String },
    /// An FTL event this store does not expect: a hand-over event
    /// outside open, or an event of a kind added after this store.
    #[error("an FTL event the store does not follow: {0}")]
    UnexpectedEvent(String),
    /// The FTL's error, as it gave it.
    #[error(transparent)]
    Io(#[from] IoError),
}
