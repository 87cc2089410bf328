//! zftl: a host-side flash translation layer for zoned flash.
//!
//! This root crate re-exports the workspace's crates behind features:
//! [`core`] always (the FTL core and the `Backend` trait), [`sim`] with the
//! `sim` feature (default), `zns` and `nbd` with theirs, and holds the
//! embedding handles ([`handle`]).
//!
//! # Embedding
//!
//! The core is sans-IO; something must own the device and run the loop.
//! Three ways, from the simplest:
//!
//! - [`core::Driver`]: single-threaded and blocking; each call runs the loop
//!   until its reply arrives. One request at a time.
//! - [`handle::Handle`]: a blocking, cloneable, `Send + Sync` handle. A
//!   driver thread owns the `Driver`; requests from every clone and thread
//!   are in the core at once, over a bounded channel.
//! - [`handle::AsyncHandle`]: the same operations as `async fn`s on the same
//!   driver thread, for any async runtime.
//!
//! ```
//! use zftl::core::{FormatOptions, FtlConfig};
//! use zftl::handle::Handle;
//! use zftl::sim::{SimConfig, SimDevice};
//!
//! let device = SimDevice::create_memory(SimConfig::small_for_tests())?;
//! let ftl = Handle::format(device, &FormatOptions::default(), FtlConfig::default())?;
//! let block = vec![0xAB; ftl.block_size()];
//! ftl.write(7, &block)?;
//! ftl.flush()?;
//! assert_eq!(ftl.read(7, 1)?, block);
//! let _device = ftl.shutdown()?; // flush + checkpoint, the device comes back
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Errors are typed ([`core::IoError`]); a lost device and a closed handle
//! both answer [`core::IoError::DeviceGone`]. Dropping the last handle
//! flushes but writes no checkpoint: see [`handle`] for the details.
//!
//! Every block written or read pays a CRC-32C; call
//! [`data_crc::choose_fastest`] once at startup (about 5 ms) and put the
//! implementation that is fastest on this CPU in
//! [`core::FtlConfig::data_crc`], as the `zftl` binary does.

#![deny(missing_docs)]

pub mod control;
pub mod data_crc;
pub mod handle;
pub mod transaction;

pub use handle::{AsyncHandle, Handle, InlineHandle};
pub use zftl_core as core;
#[cfg(feature = "nbd")]
pub use zftl_nbd as nbd;
#[cfg(feature = "sim")]
pub use zftl_sim as sim;
#[cfg(feature = "zns")]
pub use zftl_zns as zns;
