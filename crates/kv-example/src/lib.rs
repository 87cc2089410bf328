//! zftl-kv: an example key-value store on zftl's two address spaces.
//!
//! Values (up to one block each) live in the physical segment, written by
//! nameless writes: the FTL keeps no map of them, the store's index holds
//! their addresses. The index lives in the logical segment: an
//! open-addressing hash table of one-block buckets of entries (key up to
//! 64 bytes, value length, version, address), read whole at open and
//! written through. Each value block carries 32 bytes of metadata: the
//! key's 128-bit hash, the version and the length.
//!
//! ```
//! use zftl::core::{Driver, FormatOptions, FtlConfig};
//! use zftl::sim::{SimConfig, SimDevice};
//! use zftl_kv::{Store, StoreOptions};
//!
//! // Nameless writes need 64 bytes of OOB per block (tag and metadata).
//! let sim = SimConfig { oob_size_bytes: 64, ..SimConfig::small_for_tests() };
//! let device = SimDevice::create_memory(sim)?;
//! let volume = Driver::format(device, &FormatOptions::default(), FtlConfig::default())?;
//! let mut store = Store::create(volume, 0, StoreOptions::default())?;
//! store.put(b"answer", b"42")?;
//! store.sync()?; // durable from here on
//! assert_eq!(store.get(b"answer")?, Some(b"42".to_vec()));
//! let volume = store.close()?;
//! let mut again = Store::open(volume, 0, StoreOptions::default().max_replaced)?;
//! assert_eq!(again.get(b"answer")?, Some(b"42".to_vec()));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! **Durability.** A put writes its value, then its key's bucket; a
//! delete writes the bucket. Both are durable after the next
//! [`Store::sync`] (nameless values: zftl's `nameless_commit`, which
//! flushes first). A put over a key frees the old value with the new
//! block (`nameless_overwrite`); a delete overwrites its value with a
//! *tombstone* (a block of zeros, md length `u32::MAX`) that the next sync
//! frees once the bucket is durable, before it commits. So a power cut
//! that keeps a free keeps the block written with it, and the FTL hands
//! that block back at the next open (`NamelessEvent::Unrecorded`, every
//! live block written since the last commit): [`Store::open`] repoints the
//! entry whose key hash the block's md names if the block's version is
//! newer (a tombstone drops the entry), leaves a block the entry already
//! names, frees any other, then commits. A reopened store (after a clean
//! shutdown or a cut, a cut while it opens included) holds, for each key,
//! its value of the last sync or of a put or delete after it, and every
//! live nameless block is a value its index names: nothing leaks.
//!
//! **Known limits.** The md holds the key's hash, not the key: a put of a
//! new key whose bucket a cut lost cannot be rebuilt and its value is
//! freed (the key is absent, as before the put). A handed-over block whose
//! read fails at open stays with the FTL until a later mount: the entry
//! may name a freed block until then (`get` answers `NotLive`). The
//! value's write must be durable before its bucket's: true of the
//! simulator (no volatile write cache), and of any device after a flush
//! between the two, which the store does not issue. The store is the only
//! user of its volume's physical segment (the hand-over frees blocks whose
//! md names no entry).
//!
//! **Migrations.** GC may move a value (`NamelessEvent::Migrated`); its
//! old address reaches it until the move is acknowledged. Each
//! [`Store::sync`] first follows the moves made since the last one (the
//! entry or waiting tombstone naming the old address is repointed), and
//! its commit acknowledges them once the buckets are durable; a move a cut
//! left unacknowledged comes again at open. Until a sync, reads go through
//! the old addresses.

#![deny(missing_docs)]

mod alloc;
mod bucket;
mod error;
mod hash;
mod header;
mod store;
mod volume;

pub use bucket::{entries_per_bucket, MAX_KEY_BYTES, VALUE_MD_BYTES};
pub use error::KvError;
pub use hash::key_hash;
pub use header::ValuePlacement;
pub use store::{Store, StoreOptions};
pub use volume::Volume;
