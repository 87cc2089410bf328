//! `zftl-sim`: a NAND flash device model that presents zones through
//! `zftl_core::Backend` (DESIGN.md §3).
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

#![deny(unsafe_code)]

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

pub use config::{Faults, PowerCut, RuntimeOptions, SimConfig, Timing};
pub use device::SimDevice;
pub use error::SimError;
pub use stats::SimStats;
