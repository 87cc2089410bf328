//! The whole server on one connection, driven by arbitrary client bytes
//! over an in-memory duplex: greeting, option haggling, then transmission,
//! against a dummy volume that panics on any request the server should have
//! refused (out of range, too many blocks, wrong buffer size). Requests
//! aligned to 512 bytes but not to the block size reach it as whole-block
//! reads and writes (read-modify-write).
//!
//! The first input byte picks the set-up:
//! - bit 0: block size 512 (else 4096);
//! - bits 1-2: 0 = the stream is raw (starts with the client flags);
//!   1 = a valid client-flags word is prepended; 2 = a valid negotiation
//!   (flags, STRUCTURED_REPLY, SET_META_CONTEXT base:allocation and
//!   x-zftl:changed:s, GO "zftl") is prepended, so the rest are
//!   transmission requests; 3 = the same but GO "ro" (the read-only
//!   export) without structured replies, or with bit 3 set, the
//!   negotiation of 2 on the fork "f".
//!
//! The volume has one snapshot, "s": the view "zftl@s" and the context
//! "x-zftl:changed:s" exist; and one fork of it, "f", whose blocks are the
//! volume's from `BLOCKS` on (a request reaching the volume must lie in
//! the volume or in the fork, never across).
#![no_main]

use std::future::Future;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zftl_core::fork::Fork;
use zftl_core::history::{Snapshot, SnapshotError, SnapshotId};
use zftl_core::{Extent, IoError, ReplyData, Request, MAX_EXTENT_QUERY_BLOCKS};
use zftl_nbd::proto::*;
use zftl_nbd::{Export, ExportTable, Server, ServerConfig, Volume};

const BLOCKS: u64 = 256;
const MAX_REQUEST_BLOCKS: u32 = 8;
/// The volume's one snapshot.
const SNAPSHOT: SnapshotId = 1;

#[derive(Clone)]
struct Dummy {
    bs: usize,
}

impl Dummy {
    fn range(&self, lba: u64, count: u32) {
        assert!(count > 0, "empty request reached the volume");
        assert!(
            count <= MAX_REQUEST_BLOCKS,
            "request of {count} blocks > max {MAX_REQUEST_BLOCKS}"
        );
        let end = lba.checked_add(u64::from(count)).expect("lba overflow");
        // The volume's blocks, or the fork's (from BLOCKS on).
        let region = lba / BLOCKS;
        assert!(
            region <= 1 && end <= (region + 1) * BLOCKS,
            "request {lba}+{count} beyond the volume and the fork"
        );
    }

    /// A map query's range (`Extents`, `Changed`): capped by
    /// MAX_EXTENT_QUERY_BLOCKS, not by max_request_blocks; the end is
    /// clipped to the volume like the FTL does.
    fn map_query(&self, lba: u64, count: u32) -> u64 {
        assert!(count > 0, "empty map query");
        assert!(
            count <= MAX_EXTENT_QUERY_BLOCKS,
            "map query of {count} blocks"
        );
        assert!(lba < 2 * BLOCKS, "map query at {lba} beyond the fork");
        (lba + u64::from(count)).min((lba / BLOCKS + 1) * BLOCKS)
    }
}

impl Volume for Dummy {
    fn block_size(&self) -> usize {
        self.bs
    }
    fn logical_blocks(&self) -> u64 {
        BLOCKS
    }
    fn max_request_blocks(&self) -> u32 {
        MAX_REQUEST_BLOCKS
    }
    fn call(&self, request: Request) -> impl Future<Output = Result<ReplyData, IoError>> + Send {
        std::future::ready(self.answer(request))
    }
    fn snapshots(&self) -> impl Future<Output = Result<Vec<Snapshot>, IoError>> + Send {
        std::future::ready(Ok(vec![Snapshot {
            id: SNAPSHOT,
            name: "s".into(),
            epoch: 1,
            create_seq: 1,
            wall_ns: 0,
            parent: 0,
        }]))
    }
    fn forks(&self) -> impl Future<Output = Result<Vec<Fork>, IoError>> + Send {
        std::future::ready(Ok(vec![Fork {
            id: 0,
            name: "f".into(),
            base: SNAPSHOT,
            slot: 0,
            lba_offset: BLOCKS,
            block_count: BLOCKS,
            create_seq: 2,
            wall_ns: 0,
        }]))
    }
}

impl Dummy {
    /// What the volume answers to `request`.
    fn answer(&self, request: Request) -> Result<ReplyData, IoError> {
        match request {
            Request::Read { lba, block_count } => {
                self.range(lba, block_count);
                // Some block reads fail, so error replies are exercised.
                if lba == 7 {
                    Err(IoError::NoSpace)
                } else {
                    Ok(ReplyData::Read(vec![0xa5; block_count as usize * self.bs]))
                }
            }
            Request::Write { lba, data, .. } => {
                assert_eq!(data.len() % self.bs, 0, "write buffer not whole blocks");
                self.range(lba, (data.len() / self.bs) as u32);
                Ok(ReplyData::Done)
            }
            Request::WriteSummed { lba, blocks, .. } => {
                self.range(lba, (blocks.data().len() / self.bs) as u32);
                Ok(ReplyData::Done)
            }
            Request::Trim { lba, block_count }
            | Request::WriteZeroes {
                lba, block_count, ..
            } => {
                self.range(lba, block_count);
                Ok(ReplyData::Done)
            }
            Request::Extents { lba, block_count } => {
                let end = self.map_query(lba, block_count);
                let mut runs = Vec::new();
                let mut at = lba;
                let mut mapped = lba % 2 == 0;
                while at < end {
                    let n = ((at % 3) + 1).min(end - at);
                    runs.push(Extent {
                        block_count: n as u32,
                        mapped,
                    });
                    mapped = !mapped;
                    at += n;
                }
                Ok(ReplyData::Extents(runs))
            }
            Request::Changed {
                since,
                until,
                lba,
                block_count,
            } => {
                assert!(lba < BLOCKS, "a changed query on the fork");
                let end = self.map_query(lba, block_count);
                assert!(until.is_none() || until == Some(SNAPSHOT), "{until:?}");
                if since != SNAPSHOT {
                    Err(SnapshotError::NoSuchId(since).into())
                } else {
                    // Runs of 1-2 changed blocks at every fifth block.
                    let runs = (lba..end)
                        .filter(|l| l % 5 == 0)
                        .map(|l| (l, (1 + l % 2).min(end - l)))
                        .collect();
                    Ok(ReplyData::Changed(runs))
                }
            }
            Request::ReadSnapshot {
                snapshot,
                lba,
                block_count,
            } => {
                assert_eq!(snapshot, SNAPSHOT, "a read of a snapshot never listed");
                self.range(lba, block_count);
                Ok(ReplyData::Read(vec![0x5a; block_count as usize * self.bs]))
            }
            // A fork export's requests name the fork the server resolved.
            Request::InFork { fork, request } => {
                assert_eq!(fork, 0, "a request for a fork never listed");
                self.answer(*request)
            }
            Request::Flush => Ok(ReplyData::Done),
            // NBD has no range operations: the server never sends one.
            Request::Range { ops } => panic!("the NBD server sent range operations: {ops:?}"),
            // Nor snapshot or fork changes.
            r @ (Request::SnapshotCreate { .. }
            | Request::SnapshotDelete { .. }
            | Request::SnapshotRevert { .. }
            | Request::ForkCreate { .. }
            | Request::ForkDelete { .. }) => {
                panic!("the NBD server sent {r:?}")
            }
            // Nor requests of the physical segment, an embedding API only.
            r @ (Request::NamelessWrite { .. }
            | Request::NamelessOverwrite { .. }
            | Request::NamelessRead { .. }
            | Request::NamelessFree { .. }
            | Request::NamelessCommit
            | Request::NamelessAck { .. }
            | Request::NamelessEvents { .. }) => panic!("the NBD server sent {r:?}"),
        }
    }
}

fn option(b: &mut Vec<u8>, option: u32, data: &[u8]) {
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
}

fn go(b: &mut Vec<u8>, name: &str) {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    option(b, OPT_GO, &d);
}

fn client_bytes(data: &[u8]) -> (usize, Vec<u8>) {
    let Some((&knobs, rest)) = data.split_first() else {
        return (4096, Vec::new());
    };
    let bs = if knobs & 1 != 0 { 512 } else { 4096 };
    let mut b = Vec::with_capacity(rest.len() + 128);
    let flags = (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes();
    match (knobs >> 1) & 3 {
        0 => {}
        1 => b.extend_from_slice(&flags),
        2 | 3 if (knobs >> 1) & 3 == 2 || knobs & 8 != 0 => {
            let export = if (knobs >> 1) & 3 == 2 { "zftl" } else { "f" };
            b.extend_from_slice(&flags);
            option(&mut b, OPT_STRUCTURED_REPLY, &[]);
            let mut d = (export.len() as u32).to_be_bytes().to_vec();
            d.extend_from_slice(export.as_bytes());
            d.extend_from_slice(&2u32.to_be_bytes());
            for context in [META_BASE_ALLOCATION, "x-zftl:changed:s"] {
                d.extend_from_slice(&(context.len() as u32).to_be_bytes());
                d.extend_from_slice(context.as_bytes());
            }
            option(&mut b, OPT_SET_META_CONTEXT, &d);
            go(&mut b, export);
        }
        _ => {
            b.extend_from_slice(&flags);
            go(&mut b, "ro");
        }
    }
    b.extend_from_slice(rest);
    (bs, b)
}

fn server(bs: usize) -> Server<Dummy> {
    let vol = Dummy { bs };
    let exports = ExportTable::new(
        vec![
            Export::new("zftl", vol.clone()),
            Export::new("ro", vol)
                .read_only(true)
                .description("read-only view"),
        ],
        Some("zftl"),
    )
    .unwrap();
    // Small bounds, so the fuzzer reaches every limit.
    let config = ServerConfig {
        max_payload_bytes: 4 * bs as u32,
        max_inflight_bytes_per_connection: 8 * bs as u32,
        max_inflight_requests_per_connection: 4,
        max_connections: 1,
        handshake_timeout: Duration::from_secs(5),
        max_options_per_handshake: 32,
        max_option_bytes: 4096 + 64,
        max_option_skip_bytes: 16 << 10,
        max_write_skip_bytes: 16 << 10,
    };
    Server::new(exports, config)
}

thread_local! {
    static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
}

fuzz_target!(|data: &[u8]| {
    let (bs, input) = client_bytes(data);
    let server = server(bs);
    RT.with(|rt| {
        rt.block_on(async {
            let (client, server_end) = tokio::io::duplex(64 << 10);
            let (mut rd, mut wr) = tokio::io::split(client);
            let serve = server.serve_stream(server_end);
            let write = async {
                // The server may close first: broken pipes are fine.
                let _ = wr.write_all(&input).await;
                let _ = wr.shutdown().await;
            };
            let read = async {
                let mut sink = Vec::new();
                let _ = rd.read_to_end(&mut sink).await;
            };
            let all = async { tokio::join!(serve, write, read) };
            tokio::time::timeout(Duration::from_secs(20), all)
                .await
                .expect("the connection hangs");
        })
    });
});
