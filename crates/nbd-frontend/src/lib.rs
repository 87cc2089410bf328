//! `zftl-nbd`: the Network Block Device server that exports a zftl volume.
//!
//! Status: not yet implemented. This crate is a placeholder in the workspace
//! layout; it exports nothing, so nothing can mistake it for a working
//! server. The work is tracked by the "NBD server" issue.
