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
//! [`Store::sync`] (an FTL flush). A value a put or delete replaced is
//! freed only by the sync after it, once no durable bucket names it, so a
//! power cut never leaves a synced key naming a freed block. A reopened
//! store (after a clean shutdown or a cut) holds, for each key, its value
//! of the last sync or of a put or delete after it.
//!
//! **Known limits.** Until zftl delivers the post-crash hand-over
//! (`NamelessEvent::Unrecorded`), a value written after the last sync
//! whose bucket a power cut lost, and a replaced value a cut caught before
//! its free was durable, keep their blocks used: nothing names them and
//! the store cannot learn their addresses. And the value's write must be
//! durable before its bucket's: true of the simulator (no volatile write
//! cache), and of any device after a flush between the two, which the
//! store does not issue.

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
