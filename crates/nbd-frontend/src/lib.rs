//! `zftl-nbd`: the Network Block Device server that exports zftl volumes.
//!
//! It speaks the fixed newstyle handshake (options `EXPORT_NAME`, `INFO`,
//! `GO`, `LIST`, `ABORT`, `STRUCTURED_REPLY`, `LIST_META_CONTEXT` and
//! `SET_META_CONTEXT` for `base:allocation`) and serves `READ`, `WRITE`,
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
//! `BLOCK_STATUS` answers from the volume's `Request::Extents`: blocks never
//! written or trimmed (or zeroed without `NO_HOLE`) are holes that read as
//! zeros (`NBD_STATE_HOLE | NBD_STATE_ZERO`), mapped blocks are data
//! (status 0). One request looks at most `MAX_EXTENT_QUERY_BLOCKS` blocks
//! ahead; the reply then covers the start of the range, as the spec allows.
//! READ replies always carry the data (no `NBD_REPLY_TYPE_OFFSET_HOLE`).

mod config;
mod export;
mod handshake;
mod metrics;
pub mod proto;
mod server;
mod tls;
mod transmission;

pub use config::{check_listen_address, ListenRefused, ServerConfig};
pub use export::{Export, ExportTable, ExportTableError, Volume, MAX_EXPORTS};
pub use metrics::{serve_metrics, Command, Metrics, LATENCY_BUCKETS_US};
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

    /// What the reader knows when it validates a request (mirror of the
    /// transmission phase's `Limits`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Limits {
        pub block_size: u64,
        pub size_bytes: u64,
        pub max_payload: u32,
        pub read_only: bool,
        pub structured: bool,
        pub base_allocation: bool,
    }

    /// A validated request (mirror of the transmission phase's `Op`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Op {
        Read {
            lba: u64,
            blocks: u64,
        },
        Write {
            lba: u64,
            blocks: u64,
            fua: bool,
        },
        Flush,
        Trim {
            lba: u64,
            blocks: u64,
            fua: bool,
        },
        Zero {
            lba: u64,
            blocks: u64,
            fua: bool,
            no_hole: bool,
        },
        BlockStatus {
            offset: u64,
            length: u32,
            req_one: bool,
        },
        Disc,
    }

    /// Validates `header` exactly as the server's reader does: the op to
    /// run, or the NBD error it is refused with.
    pub fn check(limits: &Limits, header: &RequestHeader) -> Result<Op, (Errno, String)> {
        use crate::transmission::Op as O;
        let l = crate::transmission::Limits {
            block_size: limits.block_size,
            size_bytes: limits.size_bytes,
            max_payload: limits.max_payload,
            read_only: limits.read_only,
            structured: limits.structured,
            base_allocation: limits.base_allocation,
        };
        match l.check(header) {
            Ok(op) => Ok(match op {
                O::Read { lba, blocks } => Op::Read { lba, blocks },
                O::Write { lba, blocks, fua } => Op::Write { lba, blocks, fua },
                O::Flush => Op::Flush,
                O::Trim { lba, blocks, fua } => Op::Trim { lba, blocks, fua },
                O::Zero {
                    lba,
                    blocks,
                    fua,
                    no_hole,
                } => Op::Zero {
                    lba,
                    blocks,
                    fua,
                    no_hole,
                },
                O::BlockStatus {
                    offset,
                    length,
                    req_one,
                } => Op::BlockStatus {
                    offset,
                    length,
                    req_one,
                },
                O::Disc => Op::Disc,
            }),
            Err(r) => Err((r.errno, r.message)),
        }
    }
}
