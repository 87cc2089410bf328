//! `zftl-nbd`: the Network Block Device server that exports zftl volumes.
//!
//! It speaks the fixed newstyle handshake (options `EXPORT_NAME`, `INFO`,
//! `GO`, `LIST`, `ABORT`, `STRUCTURED_REPLY`, `LIST_META_CONTEXT` and
//! `SET_META_CONTEXT` for `base:allocation` and `x-zftl:changed:SNAPSHOT`)
//! and serves `READ`, `WRITE`,
//! `FLUSH`, `TRIM`, `WRITE_ZEROES` (with `FAST_ZERO` and `NO_HOLE`),
//! `BLOCK_STATUS` and `DISC`, with `FUA` and `CAN_MULTI_CONN`, many requests
//! in flight per connection and replies out of order. The protocol is
//! `doc/proto.md` of the NetworkBlockDevice project.
//!
//! The server is generic over a [`Volume`] (the FTL behind a driver:
//! `zftl::handle::AsyncHandle` wrapped in a newtype), exports a table of
//! named [`Export`]s with per-export flags, and holds every bound in
//! [`ServerConfig`]. With [`Server::with_tls`] (a configuration from
//! [`tls_server_config`]: certificate, key, optional client CA) the server
//! requires `NBD_OPT_STARTTLS` before anything else; [`check_listen_address`]
//! refuses non-loopback addresses without TLS unless the operator opts out.
//! [`Server::metrics`] counts requests, bytes, latencies and connections;
//! [`serve_metrics`] serves them (and anything else) as Prometheus text.
//!
//! [`client`] is a small client of the same protocol, for tests and tools.
//!
//! Each live snapshot of an export's volume ([`Volume::snapshots`]) is also
//! an export: `NAME@SNAPSHOT`, read-only (`READ_ONLY`, no `SEND_FLUSH`,
//! `CAN_MULTI_CONN`), resolved when a client names it at `NBD_OPT_GO`,
//! `NBD_OPT_INFO`, `NBD_OPT_EXPORT_NAME` or a meta-context option, and
//! listed by `NBD_OPT_LIST` after the table's exports, so views appear and
//! go as snapshots are created and deleted. Its reads are
//! `Request::ReadSnapshot`; writes, trims and zeroing get `EPERM`;
//! `base:allocation` reports its whole range as data (the volume answers
//! `Request::Extents` for its live map only); a read after the snapshot
//! was deleted gets `EIO`, and the name is then unknown to new
//! connections. A table export of the same name wins over a view.
//!
//! Each live fork of an export's volume ([`Volume::forks`]) is an export
//! too, under the fork's own name: writable (read-only when the table
//! export is), the fork's size, listed by `NBD_OPT_LIST` after the views
//! (`writable fork "F" of snapshot "S" of "NAME", created TIME`), resolved
//! like a view. Every request of it names the volume's blocks from the
//! fork's `lba_offset` (reads, writes and their read-modify-writes, trims,
//! zeroing, `base:allocation`); it has no `x-zftl:changed` contexts.
//! Each request goes to the volume as `Request::InFork`, taken only while
//! the fork it was resolved with lives: a connection to a deleted fork
//! gets `EIO`, also once a new fork has taken the region, and the name is
//! then unknown to new connections. A table export of the same name wins
//! over a fork.
//!
//! Each live snapshot `S` of an export's volume is also a metadata context
//! of the export and of its views, `x-zftl:changed:S`: `BLOCK_STATUS`
//! flags with `STATE_CHANGED` (1) the blocks whose contents differ
//! between `S` and the export (the live volume, or the view's snapshot),
//! from the volume's `Request::Changed`, so `nbdinfo
//! --map=x-zftl:changed:S` lists what an incremental backup since `S` must
//! copy. `LIST_META_CONTEXT` without queries, or with `x-zftl:` or
//! `x-zftl:changed:`, lists one per live snapshot; a name that is not a
//! live snapshot is not selected; once selected, a deleted snapshot's
//! context answers `BLOCK_STATUS` with `EIO`. Several contexts may be
//! selected at once, each with its own id and chunk.
//!
//! Requests need only be aligned to 512 bytes (the advertised minimum block
//! size; the preferred one is the volume's block size, 4 KiB for zftl). A
//! read of part of a block reads the block; a write, trim or zeroing of
//! part of a block reads it, changes the covered bytes and writes it back,
//! in the same volume write as the request's other blocks. Every write
//! locks the blocks it touches (shared for whole blocks, exclusive for a
//! read-modify-write) so two requests on different sectors of one block
//! never lose each other's bytes, and each block's new version is one
//! volume write, so a power cut leaves the old or the new block, never a
//! mix. Requests not aligned to 512 bytes are refused with `EINVAL`.
//!
//! `base:allocation` answers from the volume's `Request::Extents`: blocks
//! never written or trimmed (or zeroed without `NO_HOLE`) are holes that
//! read as zeros (`NBD_STATE_HOLE | NBD_STATE_ZERO`), mapped blocks are
//! data (status 0). One request asks the volume about at most
//! `MAX_EXTENT_QUERY_BLOCKS` blocks per context; the reply then covers the
//! start of the range, as the spec allows.
//! READ replies always carry the data (no `NBD_REPLY_TYPE_OFFSET_HOLE`).
//! With structured replies negotiated, READ and `BLOCK_STATUS` answers and
//! every error are structured chunks; other successes are simple replies,
//! as the protocol allows (16 bytes, which a client reads in one receive).

mod blocklock;
pub mod client;
mod config;
mod export;
mod handshake;
mod meta;
mod metrics;
mod outbox;
pub mod proto;
mod server;
mod tls;
mod transmission;

pub use config::{check_listen_address, ListenRefused, ServerConfig};
pub use export::{Export, ExportTable, ExportTableError, Volume, MAX_EXPORTS, VIEW_SEPARATOR};
pub use metrics::{serve_metrics, Command, MetricKind, Metrics, TextWriter, LATENCY_BUCKETS_US};
pub use server::Server;
pub use tls::{server_config as tls_server_config, TlsError, TlsFiles};
pub use transmission::errno_of;

/// Entry points for the fuzz targets (`fuzz/`) and the malformed-input
/// regression suite (`tests/malformed_corpus.rs`): public mirrors of the
/// request validation, which is otherwise crate-private. Not a stable API.
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::proto::{
        decode_export_name, BadRequestMagic, Errno, InfoRequest, InvalidOption, MetaContextRequest,
        RequestHeader, REQUEST_HEADER_BYTES,
    };

    pub use crate::transmission::{Limits, Op};

    /// Validates `header` exactly as the server's reader does: the op to
    /// run, or the NBD error it is refused with.
    pub fn check(limits: &Limits, header: &RequestHeader) -> Result<Op, (Errno, String)> {
        limits.check(header).map_err(|r| (r.errno, r.message))
    }
}
