//! `zftl-core`: the flash translation layer core of zftl.
//!
//! The core is sans-IO: it does no I/O, reads no clock, starts no threads and
//! contains no `unsafe`. Devices are reached through the [`Backend`] trait, a
//! queue pair over zones that drivers own and feed to the core.
//!
//! This crate also holds the backend conformance suite that every `Backend`
//! implementation must pass (`backend::conformance`, behind the cargo
//! feature `conformance`, which the backends' tests turn on).

#![forbid(unsafe_code)]

pub mod addr;
pub mod attr;
pub mod backend;
pub mod births;
mod buffer;
pub mod check;
pub mod checkpoint;
pub mod codec;
pub mod config;
mod driver;
pub mod error;
pub mod fork;
mod ftl;
pub mod history;
mod kept;
pub mod l2p;
pub mod layout;
mod log;
pub mod mapping;
pub mod nameless;
pub mod note;
pub mod p2l;
pub mod payload;
pub mod range;
pub mod recovery;
pub mod remap;
pub mod shared;
mod slab;
pub mod stats;
pub mod summary;
pub mod superblock;
pub mod tag;
pub mod zone;

pub use backend::{
    Backend, BackendExt, Command, Completion, DeviceError, Geometry, GeometryError, Outcome,
    Payload, ReadPriority, SubmitError, ZoneInfo, ZoneState,
};
pub use codec::FormatError;
pub use config::{
    FormatOptions, FtlConfig, GcBudget, NamelessCostUs, NamelessWear, ProtectWindow, TagPlacement,
};
pub use driver::{
    changed_runs, diff_requests, diff_volume, fork_create_request, fork_data, fork_named,
    join_runs, nameless_events, nameless_request, snapshot_create_request, snapshot_data,
    snapshot_revert_request, Driver,
};
pub use error::{IoError, MountError, NamelessError};
pub use fork::{Fork, ForkError, ForkId};
pub use ftl::{
    Activity, Extent, Ftl, Reply, ReplyData, Request, MAX_EXTENT_QUERY_BLOCKS, MAX_WINDOW_POINTS,
    MIN_POINT_INTERVAL_BLOCKS, NAMELESS_MD_BYTES,
};
pub use nameless::{NamelessAddr, NamelessEvent};
pub use range::{Attribute, MergePolicy, RangeOp};
pub use stats::FtlStats;
pub use tag::SummedBlocks;
pub use zone::VictimPolicy;
