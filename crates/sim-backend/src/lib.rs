//! `zftl-sim`: a NAND flash device model that presents zones through
//! `zftl_core::Backend` (docs/design.md, "The layers").
//!
//! The device is channels x LUNs x erase blocks x pages with OOB bytes per
//! page. A zone is `zone_width_luns` erase blocks (one per LUN, same row),
//! striped by program unit. The model enforces program order, erase before
//! program and the ZNS zone state machine; it counts erases per block with
//! an endurance limit, has factory and grown bad blocks, a per-LUN timing
//! model on a virtual clock, and seeded faults: program/erase failures,
//! uncorrectable reads and power cuts that lose or tear in-flight commands.
//! It runs in memory or on an image file (docs/format.md, part 2).
//!
//! Reading blocks that were never programmed (below the zone capacity)
//! returns 0xFF data and 0xFF OOB, as erased NAND does. Torn and failed
//! pages fail with `UncorrectableRead` until their zone is reset.
//!
//! ```
//! use zftl_core::{Backend, BackendExt};
//! use zftl_sim::{SimConfig, SimDevice};
//!
//! let mut dev = SimDevice::create_memory(SimConfig::small_for_tests())?;
//! let bs = dev.geometry().block_size_bytes as usize;
//! let unit = dev.geometry().write_unit_blocks as usize;
//! // Zone 3, at its write pointer (0): one program unit of 0xAB.
//! dev.write_blocks(3, 0, vec![0xAB; unit * bs], Vec::new())?;
//! let (data, _oob) = dev.read_blocks(3, 0, 1)?;
//! assert_eq!(data, vec![0xAB; bs]);
//! // A write away from the write pointer fails, as on a ZNS drive.
//! assert!(dev.write_blocks(3, 7 * unit as u64, vec![0; unit * bs], Vec::new()).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(unsafe_code)]
#![deny(missing_docs)]

mod config;
mod device;
mod error;
mod exec;
mod faults;
mod hugepages;
pub mod image;
mod layout;
mod media;
mod power;
pub mod rng;
mod stats;
mod streaming;
mod timing;
mod zone;

pub use config::{Faults, NandScheduling, PowerCut, RuntimeOptions, SimConfig, Timing};
pub use device::SimDevice;
pub use error::SimError;
pub use stats::SimStats;
