//! zftl: a host-side flash translation layer for zoned flash.
//!
//! This root crate re-exports the workspace's crates behind features:
//! [`core`] always (the FTL core and the `Backend` trait), [`sim`] with the
//! `sim` feature (default), `zns` and `nbd` with theirs.

pub use zftl_core as core;
#[cfg(feature = "nbd")]
pub use zftl_nbd as nbd;
#[cfg(feature = "sim")]
pub use zftl_sim as sim;
#[cfg(feature = "zns")]
pub use zftl_zns as zns;
