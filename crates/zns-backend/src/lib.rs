//! `zftl-zns`: the `Backend` for NVMe Zoned Namespace SSDs through io_uring
//! passthrough on `/dev/ngXnY`.
//!
//! Status: not yet implemented. This crate is a placeholder in the workspace
//! layout; it exports nothing, so nothing can mistake it for a working
//! backend. The work is tracked by the "ZNS backend" issue.
