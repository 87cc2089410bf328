//! The transmission phase of one connection.
//!
//! ```text
//!  socket ─► reader loop ── validate ──► run each request (inline, or as
//!    ▲            │ (bounded: requests       its own task when it waits) ──► Volume
//!    │            │  and bytes in flight)                                   │
//!    └── outbox ◄─┴── error replies          replies (mpsc, out of order) ◄─┘
//! ```
//!
//! The reader task also writes the replies (see `outbox`): before each
//! read from the socket (a few may wait while the client keeps sending)
//! and whenever it waits.
//!
//! The reader checks every header before anything reaches the volume, so
//! bad input gets an NBD error (or, when the stream cannot be trusted any
//! more, a hard disconnect) and never a panic. A request's permits travel
//! with its reply and are released once the outbox has written it, so the
//! memory held by one connection is bounded end to end.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, BufReader, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, trace, warn};
use zftl_core::fork::{ForkError, ForkId};
use zftl_core::history::{SnapshotError, SnapshotId};
use zftl_core::{IoError, ReplyData, Request};

use crate::config::ServerConfig;
use crate::export::{Export, Volume};
use crate::handshake::{block_sizes, Session};
use crate::meta::{self, status_blocks, Selected};
use crate::metrics::{Command, Metrics};
use crate::outbox::{Backlog, Duplex, Outbox};
use crate::proto::*;

/// A decoded, validated request (public only through `fuzzing`). Byte
/// ranges are aligned to [`Limits::min_block_size`] and lie inside the
/// export; they need not be aligned to the volume's block size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read {
        offset: u64,
        length: u32,
    },
    Write {
        offset: u64,
        length: u32,
        fua: bool,
    },
    Flush,
    Trim {
        offset: u64,
        length: u32,
        fua: bool,
    },
    Zero {
        offset: u64,
        length: u32,
        fua: bool,
        no_hole: bool,
    },
    /// Any byte range inside the export (not even 512-aligned).
    BlockStatus {
        offset: u64,
        length: u32,
        req_one: bool,
    },
    Disc,
}

/// A request refused before it reaches the volume.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub errno: Errno,
    pub message: String,
}

fn refuse(errno: Errno, message: impl Into<String>) -> Refusal {
    Refusal {
        errno,
        message: message.into(),
    }
}

/// What the reader needs to know to validate requests (public only
/// through `fuzzing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The volume's block size (advertised as the preferred block size).
    pub block_size: u64,
    /// Requests must be aligned to this (the advertised minimum block
    /// size, 512).
    pub min_block_size: u64,
    pub size_bytes: u64,
    pub max_payload: u32,
    pub read_only: bool,
    pub structured: bool,
    /// Metadata contexts selected (`BLOCK_STATUS` needs one at least).
    pub meta_contexts: u32,
}

impl Limits {
    pub(crate) fn of<V: Volume>(session: &Session<V>, cfg: &ServerConfig) -> Limits {
        let sizes = block_sizes(&session.export, cfg);
        Limits {
            block_size: u64::from(sizes.preferred),
            min_block_size: u64::from(sizes.minimum),
            size_bytes: session.export.size_bytes(),
            max_payload: sizes.maximum,
            read_only: session.export.is_read_only(),
            structured: session.structured,
            meta_contexts: u32::try_from(session.contexts.len()).unwrap_or(u32::MAX),
        }
    }

    fn allowed_flags(&self, command: u16) -> Option<u16> {
        // FUA is accepted (and ignored where nothing is written) on every
        // command, as the protocol asks of servers that advertise it.
        let f = CMD_FLAG_FUA;
        Some(match command {
            CMD_READ if self.structured => f | CMD_FLAG_DF,
            CMD_READ | CMD_WRITE | CMD_FLUSH | CMD_TRIM | CMD_DISC => f,
            CMD_WRITE_ZEROES => f | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
            CMD_BLOCK_STATUS => f | CMD_FLAG_REQ_ONE,
            _ => return None,
        })
    }

    /// Checks a byte range for alignment (to the minimum block size) and
    /// bounds. `beyond_end` is the error for a range past the end.
    fn range(&self, h: &RequestHeader, beyond_end: Errno) -> Result<(), Refusal> {
        let len = u64::from(h.length);
        if len == 0 {
            return Err(refuse(Errno::Inval, "zero-length request"));
        }
        let min = self.min_block_size;
        if !h.offset.is_multiple_of(min) || !len.is_multiple_of(min) {
            return Err(refuse(
                Errno::Inval,
                format!(
                    "offset {} or length {} not a multiple of the minimum block size {min}",
                    h.offset, len
                ),
            ));
        }
        match h.offset.checked_add(len) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(refuse(
                beyond_end,
                format!(
                    "{}+{} lies beyond the end of the export ({} bytes)",
                    h.offset, len, self.size_bytes
                ),
            )),
        }
    }

    /// Checks a header. Pure: the fuzz and unit tests drive it directly.
    pub(crate) fn check(&self, h: &RequestHeader) -> Result<Op, Refusal> {
        let Some(allowed) = self.allowed_flags(h.command) else {
            return Err(refuse(
                Errno::Inval,
                format!("unknown command {}", h.command),
            ));
        };
        if h.flags & !allowed != 0 {
            return Err(refuse(
                Errno::Inval,
                format!("flags {:#x} not valid for command {}", h.flags, h.command),
            ));
        }
        let fua = h.flags & CMD_FLAG_FUA != 0;
        let writes = matches!(h.command, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
        if writes && self.read_only {
            return Err(refuse(Errno::Perm, "the export is read-only"));
        }
        let payload = matches!(h.command, CMD_READ | CMD_WRITE);
        if payload && h.length > self.max_payload {
            return Err(refuse(
                Errno::Overflow,
                format!(
                    "length {} exceeds the maximum payload {}",
                    h.length, self.max_payload
                ),
            ));
        }
        let (offset, length) = (h.offset, h.length);
        match h.command {
            CMD_READ => {
                self.range(h, Errno::Inval)?;
                Ok(Op::Read { offset, length })
            }
            CMD_WRITE => {
                self.range(h, Errno::NoSpc)?;
                Ok(Op::Write {
                    offset,
                    length,
                    fua,
                })
            }
            CMD_TRIM => {
                self.range(h, Errno::Inval)?;
                Ok(Op::Trim {
                    offset,
                    length,
                    fua,
                })
            }
            CMD_WRITE_ZEROES => {
                self.range(h, Errno::NoSpc)?;
                let no_hole = h.flags & CMD_FLAG_NO_HOLE != 0;
                let fast = h.flags & CMD_FLAG_FAST_ZERO != 0;
                if no_hole && fast {
                    // Zeroes that must be allocated are written as data: not fast.
                    return Err(refuse(Errno::NotSup, "NO_HOLE zeroing is not fast"));
                }
                let span = Span::of(offset, u64::from(length), self.block_size);
                if fast && !span.aligned() {
                    return Err(refuse(
                        Errno::NotSup,
                        format!(
                            "zeroing part of a {}-byte block is a read-modify-write, not fast",
                            self.block_size
                        ),
                    ));
                }
                Ok(Op::Zero {
                    offset,
                    length,
                    fua,
                    no_hole,
                })
            }
            CMD_FLUSH => {
                if h.offset != 0 || h.length != 0 {
                    return Err(refuse(Errno::Inval, "FLUSH with nonzero offset or length"));
                }
                Ok(Op::Flush)
            }
            CMD_BLOCK_STATUS => {
                if !self.structured || self.meta_contexts == 0 {
                    return Err(refuse(
                        Errno::Inval,
                        "BLOCK_STATUS without a negotiated meta context",
                    ));
                }
                if h.length == 0 {
                    return Err(refuse(Errno::Inval, "zero-length request"));
                }
                match h.offset.checked_add(u64::from(h.length)) {
                    Some(end) if end <= self.size_bytes => Ok(Op::BlockStatus {
                        offset: h.offset,
                        length: h.length,
                        req_one: h.flags & CMD_FLAG_REQ_ONE != 0,
                    }),
                    _ => Err(refuse(Errno::Inval, "BLOCK_STATUS beyond the end")),
                }
            }
            CMD_DISC => Ok(Op::Disc),
            _ => unreachable!("allowed_flags knows every command"),
        }
    }
}

/// The NBD error for a volume error. A read of a snapshot that was deleted
/// (a view a client opened before the delete) gets `EIO`: the data is gone;
/// so does any request to a fork that was deleted. A fork whose map has no
/// more room in the metadata log gets `ENOSPC`.
pub fn errno_of(e: &IoError) -> Errno {
    match e {
        IoError::Snapshot(SnapshotError::NoSuchId(_)) => Errno::Io,
        IoError::Fork(ForkError::NoSuchId(_) | ForkError::NoSuchName(_)) => Errno::Io,
        IoError::Fork(ForkError::MapFull) => Errno::NoSpc,
        IoError::Fork(_) => Errno::Inval,
        IoError::OutOfRange { .. } | IoError::TooLarge { .. } | IoError::BufferSize { .. } => {
            Errno::Inval
        }
        IoError::NoSpace | IoError::SharingFull { .. } | IoError::SnapshotSpace => Errno::NoSpc,
        // The volume went read-only after a metadata write failure: writes
        // are refused as on a read-only export; so are writes to an
        // immutable range.
        IoError::ReadOnly | IoError::Immutable { .. } => Errno::Perm,
        IoError::BadVector { .. }
        | IoError::MergeConflict { .. }
        | IoError::AttributeTableFull { .. }
        | IoError::Snapshot(_) => Errno::Inval,
        // The server sends no request of the physical segment.
        IoError::Nameless(_) => Errno::Inval,
        IoError::Busy
        | IoError::Corrupt { .. }
        | IoError::Misdirected { .. }
        | IoError::Device { .. }
        | IoError::DeviceGone => Errno::Io,
    }
}

/// One reply for the outbox: a header (with any fixed fields), optional
/// data (a large read's sent from its own buffer), and the permits it holds
/// until sent.
pub(crate) struct Outgoing {
    pub(crate) head: Vec<u8>,
    pub(crate) data: Option<Vec<u8>>,
    /// Released once the reply is written.
    pub(crate) permits: Option<Permits>,
}

pub(crate) struct Permits {
    pub(crate) _request: OwnedSemaphorePermit,
    pub(crate) _bytes: Option<OwnedSemaphorePermit>,
}

/// Builds replies in the negotiated style.
#[derive(Clone, Copy)]
pub(crate) struct Replier {
    structured: bool,
}

impl Replier {
    /// Success without data. A simple reply even when structured replies
    /// were negotiated, as the protocol allows for any command but READ:
    /// 16 bytes instead of 20, which clients such as libnbd take in one
    /// receive instead of two.
    fn ok(self, cookie: u64) -> Vec<u8> {
        simple_reply(cookie, 0)
    }

    fn error(self, cookie: u64, r: &Refusal) -> Vec<u8> {
        if self.structured {
            error_chunk(cookie, r.errno, &r.message)
        } else {
            simple_reply(cookie, r.errno.code())
        }
    }

    fn read_data(self, cookie: u64, offset: u64, data: &[u8]) -> Vec<u8> {
        if self.structured {
            let len = u32::try_from(8 + data.len()).expect("payload bounded by max_payload");
            let mut h = chunk_header(cookie, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, len);
            h.extend_from_slice(&offset.to_be_bytes());
            h
        } else {
            simple_reply(cookie, 0)
        }
    }

    /// One `NBD_REPLY_TYPE_BLOCK_STATUS` chunk per `(context id,
    /// descriptors)`, the last one flagged done; each has one descriptor
    /// at least.
    fn block_status(self, cookie: u64, chunks: &[(u32, Vec<(u32, u32)>)]) -> Vec<u8> {
        assert!(!chunks.is_empty(), "BLOCK_STATUS without a context");
        let total: usize = chunks.iter().map(|(_, d)| 20 + 4 + 8 * d.len()).sum();
        let mut h = Vec::with_capacity(total);
        for (i, (id, descriptors)) in chunks.iter().enumerate() {
            assert!(
                !descriptors.is_empty(),
                "a status chunk without descriptors"
            );
            let len = u32::try_from(4 + 8 * descriptors.len()).expect("descriptors are capped");
            let flags = if i + 1 == chunks.len() {
                REPLY_FLAG_DONE
            } else {
                0
            };
            h.extend_from_slice(&chunk_header(cookie, flags, REPLY_TYPE_BLOCK_STATUS, len));
            h.extend_from_slice(&id.to_be_bytes());
            for (length, status) in descriptors {
                h.extend_from_slice(&length.to_be_bytes());
                h.extend_from_slice(&status.to_be_bytes());
            }
        }
        h
    }
}

/// The volume blocks a byte range touches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    lba: u64,
    blocks: u64,
    /// Bytes of the first block before the range (0: it starts on a block).
    head: usize,
    /// Bytes of the last block after the range (0: it ends on a block).
    tail: usize,
}

impl Span {
    /// The span of `offset`+`length` bytes (`length > 0`, no overflow:
    /// `Limits::range` checked both) in blocks of `bs` bytes.
    fn of(offset: u64, length: u64, bs: u64) -> Span {
        let end = offset + length;
        let lba = offset / bs;
        Span {
            lba,
            blocks: end.div_ceil(bs) - lba,
            head: (offset % bs) as usize,
            tail: ((bs - end % bs) % bs) as usize,
        }
    }

    /// Starts and ends on block boundaries: no read-modify-write.
    fn aligned(&self) -> bool {
        self.head == 0 && self.tail == 0
    }

    fn end(&self) -> u64 {
        self.lba + self.blocks
    }

    /// The blocks the range covers whole: `(lba, count)`, `count` may be 0.
    fn whole(&self) -> (u64, u64) {
        let first = self.lba + u64::from(self.head > 0);
        let end = self.end() - u64::from(self.tail > 0);
        (first, end.saturating_sub(first))
    }

    /// The blocks the range covers only in part, as runs `(lba, count)`:
    /// none, the first block, the last, or both (one run when adjacent).
    fn partial_runs(&self) -> [Option<(u64, u64)>; 2] {
        let last = self.end() - 1;
        let first_partial = self.head > 0 || (self.blocks == 1 && self.tail > 0);
        let last_partial = self.tail > 0 && last != self.lba;
        match (first_partial, last_partial) {
            (true, true) if last == self.lba + 1 => [Some((self.lba, 2)), None],
            (true, true) => [Some((self.lba, 1)), Some((last, 1))],
            (true, false) => [Some((self.lba, 1)), None],
            (false, true) => [None, Some((last, 1))],
            (false, false) => [None, None],
        }
    }
}

/// The volume's requests for one NBD request: pieces of at most `max`
/// blocks, each block of the range in exactly one piece (a block's new
/// version is one volume write, so a power cut leaves the old or the new
/// block, never a mix of their sectors).
struct Blocks<'a, V> {
    vol: &'a V,
    bs: usize,
    max: u64,
    /// Reads are of this snapshot (a view), not of the live volume.
    snapshot: Option<SnapshotId>,
    /// The fork the export serves: its requests go as `Request::InFork`.
    fork: Option<ForkId>,
}

impl<V: Volume> Blocks<'_, V> {
    async fn call(&self, request: Request) -> Result<ReplyData, IoError> {
        self.vol.call(in_fork(self.fork, request)).await
    }

    async fn read(&self, lba: u64, blocks: u64) -> Result<Vec<u8>, IoError> {
        if blocks <= self.max {
            return self.read_one(lba, blocks).await;
        }
        let mut out = Vec::with_capacity(blocks as usize * self.bs);
        for (l, n) in pieces(lba, blocks, self.max) {
            out.extend_from_slice(&self.read_one(l, n).await?);
        }
        Ok(out)
    }

    /// One volume read, checked to be as long as asked (the reply and the
    /// read-modify-writes rely on it).
    async fn read_one(&self, lba: u64, blocks: u64) -> Result<Vec<u8>, IoError> {
        let block_count = blocks as u32;
        let expected_bytes = blocks as usize * self.bs;
        let request = match self.snapshot {
            None => Request::Read { lba, block_count },
            Some(snapshot) => Request::ReadSnapshot {
                snapshot,
                lba,
                block_count,
            },
        };
        match self.call(request).await? {
            ReplyData::Read(data) if data.len() == expected_bytes => Ok(data),
            ReplyData::Read(data) => Err(IoError::BufferSize {
                expected_bytes,
                actual_bytes: data.len(),
            }),
            _ => Err(IoError::BufferSize {
                expected_bytes,
                actual_bytes: 0,
            }),
        }
    }

    async fn write(&self, lba: u64, data: Vec<u8>, fua: bool) -> Result<(), IoError> {
        let blocks = (data.len() / self.bs) as u64;
        if blocks <= self.max {
            self.call(Request::Write { lba, data, fua }).await?;
            return Ok(());
        }
        for (l, n) in pieces(lba, blocks, self.max) {
            let at = ((l - lba) as usize) * self.bs;
            let piece = data[at..at + n as usize * self.bs].to_vec();
            self.call(Request::Write {
                lba: l,
                data: piece,
                fua,
            })
            .await?;
        }
        Ok(())
    }

    async fn trim(&self, lba: u64, blocks: u64) -> Result<(), IoError> {
        for (l, n) in pieces(lba, blocks, self.max) {
            let block_count = n as u32;
            self.call(Request::Trim {
                lba: l,
                block_count,
            })
            .await?;
        }
        Ok(())
    }

    async fn zero(&self, lba: u64, blocks: u64, no_hole: bool, fua: bool) -> Result<(), IoError> {
        let single = blocks <= self.max;
        for (l, n) in pieces(lba, blocks, self.max) {
            let piece_fua = fua && single;
            let request = if no_hole {
                let data = vec![0u8; n as usize * self.bs];
                Request::Write {
                    lba: l,
                    data,
                    fua: piece_fua,
                }
            } else {
                Request::WriteZeroes {
                    lba: l,
                    block_count: n as u32,
                    fua: piece_fua,
                }
            };
            self.call(request).await?;
        }
        if fua && !single {
            self.call(Request::Flush).await?;
        }
        Ok(())
    }

    /// The blocks of `span` with the current contents of those it covers
    /// only in part (read together when adjacent); the rest is zeros, for
    /// the caller to fill.
    async fn read_partial(&self, span: &Span) -> Result<Vec<u8>, IoError> {
        let [a, b] = span.partial_runs();
        if a == Some((span.lba, span.blocks)) {
            // Every block of the span is partly covered (a write within one
            // block or across one boundary): the read is the buffer.
            return self.read_one(span.lba, span.blocks).await;
        }
        let mut buf = vec![0u8; span.blocks as usize * self.bs];
        let read = |run: Option<(u64, u64)>| async move {
            match run {
                Some((lba, n)) => self.read_one(lba, n).await.map(|d| Some((lba, d))),
                None => Ok(None),
            }
        };
        let (a, b) = tokio::join!(read(a), read(b));
        for (lba, old) in [a?, b?].into_iter().flatten() {
            let at = (lba - span.lba) as usize * self.bs;
            buf[at..at + old.len()].copy_from_slice(&old);
        }
        Ok(buf)
    }

    /// Zeroes the part of `span`'s partly covered blocks that the range
    /// covers: each such run is read, its covered bytes zeroed, and written
    /// back as data; a run that is then all zeros is trimmed (`trim`) or
    /// zeroed without data instead, unless `no_hole`.
    async fn zero_partial(&self, span: &Span, trim: bool, no_hole: bool) -> Result<(), IoError> {
        let bs = self.bs;
        let range_start = span.head;
        let range_end = span.blocks as usize * bs - span.tail;
        for (lba, n) in span.partial_runs().into_iter().flatten() {
            let mut data = self.read_one(lba, n).await?;
            // This run's bytes within the span, and the range's part of them.
            let run_start = (lba - span.lba) as usize * bs;
            let from = range_start.max(run_start) - run_start;
            let to = range_end.min(run_start + data.len()) - run_start;
            data[from..to].fill(0);
            if no_hole || data.iter().any(|&b| b != 0) {
                self.write(lba, data, false).await?;
            } else if trim {
                self.trim(lba, n).await?;
            } else {
                self.zero(lba, n, false, false).await?;
            }
        }
        Ok(())
    }
}

/// Runs a validated request on the volume. Writes, trims and zeroing lock
/// their blocks first (see `blocklock`): shared when the range is aligned to
/// the volume's blocks, exclusive when it is a read-modify-write; `tracked`
/// bounds the export's lock table.
async fn execute<V: Volume>(
    export: &Export<V>,
    op: Op,
    payload: Option<Vec<u8>>,
    tracked: usize,
) -> Result<Option<Vec<u8>>, IoError> {
    let vol = &export.volume;
    let fork = export.fork.as_ref().map(|f| f.id);
    let io = Blocks {
        vol,
        bs: vol.block_size(),
        max: u64::from(vol.max_request_blocks().max(1)),
        snapshot: export.snapshot,
        fork,
    };
    // A fork's blocks lie from its offset on (see `Volume::forks`).
    let base = export.lba_offset();
    let span = |offset: u64, length: u32| {
        let mut s = Span::of(offset, u64::from(length), io.bs as u64);
        s.lba += base;
        if !s.aligned() && !matches!(op, Op::Read { .. }) {
            trace!(?op, "read-modify-write");
        }
        s
    };
    let lock = |s: Span| export.locks.lock(s.lba, s.end(), !s.aligned(), tracked);
    match op {
        Op::Read { offset, length } => {
            let s = span(offset, length);
            let mut data = io.read(s.lba, s.blocks).await?;
            if !s.aligned() {
                let len = length as usize;
                data.copy_within(s.head..s.head + len, 0);
                data.truncate(len);
            }
            Ok(Some(data))
        }
        Op::Write {
            offset,
            length,
            fua,
        } => {
            let s = span(offset, length);
            let data = payload.unwrap_or_default();
            let _locked = lock(s).await;
            if s.aligned() {
                io.write(s.lba, data, fua).await?;
            } else {
                let mut blocks = io.read_partial(&s).await?;
                blocks[s.head..s.head + data.len()].copy_from_slice(&data);
                io.write(s.lba, blocks, fua).await?;
            }
            Ok(None)
        }
        // Nothing of a snapshot is ever written: nothing to make durable.
        Op::Flush if export.snapshot.is_some() => Ok(None),
        Op::Flush => io.call(Request::Flush).await.map(|_| None),
        Op::Trim {
            offset,
            length,
            fua,
        } => {
            let s = span(offset, length);
            let _locked = lock(s).await;
            io.zero_partial(&s, true, false).await?;
            let (lba, n) = s.whole();
            io.trim(lba, n).await?;
            if fua {
                io.call(Request::Flush).await?;
            }
            Ok(None)
        }
        Op::Zero {
            offset,
            length,
            fua,
            no_hole,
        } => {
            let s = span(offset, length);
            let _locked = lock(s).await;
            if s.aligned() {
                io.zero(s.lba, s.blocks, no_hole, fua).await?;
            } else {
                io.zero_partial(&s, false, no_hole).await?;
                let (lba, n) = s.whole();
                io.zero(lba, n, no_hole, false).await?;
                if fua {
                    io.call(Request::Flush).await?;
                }
            }
            Ok(None)
        }
        // Answered by `meta::block_status`; never executed here.
        Op::BlockStatus { .. } | Op::Disc => Ok(None),
    }
}

/// `(lba, count)` pieces of at most `max` blocks covering the range.
fn pieces(lba: u64, blocks: u64, max: u64) -> impl Iterator<Item = (u64, u64)> {
    (0..blocks.div_ceil(max)).map(move |i| {
        let start = i * max;
        (lba + start, (blocks - start).min(max))
    })
}

/// Why the reader stopped.
#[derive(Debug)]
enum Stop {
    Disc,
    Eof,
    Shutdown,
    Io(io::Error),
    Violation(String),
}

/// What reading one request produced.
enum Next {
    Spawn {
        header: RequestHeader,
        op: Op,
        payload: Option<Vec<u8>>,
        permits: Permits,
    },
    Refused(Outgoing),
    Stop(Stop),
}

struct Reader<R> {
    inner: R,
    limits: Limits,
    replier: Replier,
    requests: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    max_write_skip: u64,
    /// The last request was a WRITE with a payload of at least the receive
    /// buffer's size.
    after_large_write: bool,
    /// The start of the next request's header, read together with a large
    /// WRITE's payload (`lookahead_bytes` of it): one receive instead of two.
    lookahead: [u8; REQUEST_HEADER_BYTES],
    lookahead_bytes: usize,
}

type Socket<S> = Duplex<ReadHalf<S>, WriteHalf<S>>;

impl<S: AsyncRead + AsyncWrite> Reader<BufReader<Socket<S>>> {
    fn outbox(&mut self) -> &mut Outbox<WriteHalf<S>> {
        &mut self.inner.get_mut().out
    }

    /// Takes `permit`, sending the replies that free permits while it
    /// waits (only then: replies of a burst go out together, before the
    /// next read from the socket).
    async fn sending_while<T>(&mut self, permit: impl std::future::Future<Output = T>) -> T {
        let mut permit = std::pin::pin!(permit);
        std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(p) = permit.as_mut().poll(cx) {
                return std::task::Poll::Ready(p);
            }
            // A failed socket shows on the next read; the wait goes on.
            let _ = self.outbox().poll_send(cx);
            permit.as_mut().poll(cx)
        })
        .await
    }

    async fn next(&mut self) -> Next {
        let mut raw = [0u8; REQUEST_HEADER_BYTES];
        let have = std::mem::take(&mut self.lookahead_bytes);
        raw[..have].copy_from_slice(&self.lookahead[..have]);
        let rest = &mut raw[have..];
        let got = if rest.is_empty() {
            Ok(0)
        } else if self.after_large_write && self.inner.buffer().is_empty() {
            // Likely another large write: its header alone, so that its
            // payload lands in its own buffer, not in ours and copied.
            self.inner.get_mut().read_exact(rest).await
        } else {
            self.inner.read_exact(rest).await
        };
        if let Err(e) = got {
            return Next::Stop(io_stop(e));
        }
        let header = match RequestHeader::decode(&raw) {
            Ok(h) => h,
            Err(BadRequestMagic(m)) => {
                return Next::Stop(Stop::Violation(format!("bad request magic {m:#010x}")))
            }
        };
        match self.limits.check(&header) {
            Ok(Op::Disc) => Next::Stop(Stop::Disc),
            Ok(op) => self.admit(header, op).await,
            Err(refusal) => self.refused(header, refusal).await,
        }
    }

    /// Takes the permits (waiting while the connection is at its bounds),
    /// then the payload.
    async fn admit(&mut self, header: RequestHeader, op: Op) -> Next {
        let cost = match op {
            Op::Read { .. } | Op::Write { .. } => header.length,
            Op::Zero { no_hole: true, .. } => header.length.min(self.limits.max_payload),
            // The volume's answer holds up to one run per block queried;
            // the contexts are queried one after the other.
            Op::BlockStatus { offset, length, .. } => {
                let (_, blocks) = status_blocks(offset, length, self.limits.block_size);
                let bytes = u64::from(blocks) * std::mem::size_of::<zftl_core::Extent>() as u64;
                bytes.min(u64::from(self.limits.max_payload)) as u32
            }
            _ => 0,
        };
        let requests = Arc::clone(&self.requests);
        let Ok(request) = self.sending_while(requests.acquire_owned()).await else {
            return Next::Stop(Stop::Shutdown);
        };
        let bytes = if cost > 0 {
            let bytes = Arc::clone(&self.bytes);
            match self.sending_while(bytes.acquire_many_owned(cost)).await {
                Ok(p) => Some(p),
                Err(_) => return Next::Stop(Stop::Shutdown),
            }
        } else {
            None
        };
        let permits = Permits {
            _request: request,
            _bytes: bytes,
        };
        let mut payload = None;
        self.after_large_write =
            header.command == CMD_WRITE && header.length as usize >= READ_BUFFER_BYTES;
        if header.command == CMD_WRITE {
            match self.payload(header.length as usize).await {
                Ok(buf) => payload = Some(buf),
                Err(stop) => return Next::Stop(stop),
            }
        }
        Next::Spawn {
            header,
            op,
            payload,
            permits,
        }
    }

    /// Reads a WRITE's `len`-byte payload. A large one that the receive
    /// buffer does not hold yet is read straight into its own buffer,
    /// together with up to a header's worth of what follows it.
    async fn payload(&mut self, len: usize) -> Result<Vec<u8>, Stop> {
        if len < READ_BUFFER_BYTES || !self.inner.buffer().is_empty() {
            let mut buf = Vec::with_capacity(len);
            return match (&mut self.inner)
                .take(len as u64)
                .read_to_end(&mut buf)
                .await
            {
                Ok(n) if n == len => Ok(buf),
                Ok(_) => Err(Stop::Eof),
                Err(e) => Err(io_stop(e)),
            };
        }
        assert_eq!(self.lookahead_bytes, 0, "the header came first");
        let mut buf = Vec::with_capacity(len + REQUEST_HEADER_BYTES);
        while buf.len() < len {
            // Room is left, so `read_buf` never grows the buffer.
            match self.inner.get_mut().read_buf(&mut buf).await {
                Ok(0) => return Err(Stop::Eof),
                Ok(_) => {}
                Err(e) => return Err(io_stop(e)),
            }
        }
        let extra = buf.len() - len;
        self.lookahead[..extra].copy_from_slice(&buf[len..]);
        self.lookahead_bytes = extra;
        buf.truncate(len);
        Ok(buf)
    }

    /// Answers a refused request; a refused WRITE's payload is read and
    /// dropped first (or the connection closed if it is absurdly large).
    async fn refused(&mut self, header: RequestHeader, refusal: Refusal) -> Next {
        debug!(
            cookie = header.cookie,
            command = header.command,
            errno = refusal.errno.code(),
            why = %refusal.message,
            "request refused"
        );
        if header.command == CMD_WRITE {
            let len = u64::from(header.length);
            if len > self.max_write_skip {
                return Next::Stop(Stop::Violation(format!(
                    "refused WRITE with a {len}-byte payload"
                )));
            }
            let skipped =
                tokio::io::copy(&mut (&mut self.inner).take(len), &mut tokio::io::sink()).await;
            match skipped {
                Ok(n) if n == len => {}
                Ok(_) => return Next::Stop(Stop::Eof),
                Err(e) => return Next::Stop(io_stop(e)),
            }
        }
        Next::Refused(Outgoing {
            head: self.replier.error(header.cookie, &refusal),
            data: None,
            permits: None,
        })
    }
}

fn io_stop(e: io::Error) -> Stop {
    match e.kind() {
        io::ErrorKind::UnexpectedEof
        | io::ErrorKind::ConnectionReset
        | io::ErrorKind::ConnectionAborted
        | io::ErrorKind::BrokenPipe => Stop::Eof,
        _ => Stop::Io(e),
    }
}

/// What a request that succeeded answers.
enum Answer {
    /// Read data, or nothing.
    Data(Option<Vec<u8>>),
    /// BLOCK_STATUS descriptors, by context id.
    Status(Vec<(u32, Vec<(u32, u32)>)>),
}

/// What every request of one connection runs on.
struct Target<V> {
    export: Arc<Export<V>>,
    /// The metadata contexts selected, for BLOCK_STATUS.
    contexts: Vec<Selected>,
}

/// Runs one request and queues its reply.
#[allow(clippy::too_many_arguments)]
async fn serve_request<V: Volume>(
    target: Arc<Target<V>>,
    replier: Replier,
    header: RequestHeader,
    op: Op,
    payload: Option<Vec<u8>>,
    permits: Permits,
    tx: mpsc::Sender<Outgoing>,
    metrics: Arc<Metrics>,
    tracked: usize,
) {
    let cookie = header.cookie;
    let started = std::time::Instant::now();
    let kind = match op {
        Op::Read { .. } => Some(Command::Read),
        Op::Write { .. } => Some(Command::Write),
        Op::Flush => Some(Command::Flush),
        Op::Trim { .. } => Some(Command::Trim),
        Op::Zero { .. } => Some(Command::WriteZeroes),
        Op::BlockStatus { .. } => Some(Command::BlockStatus),
        Op::Disc => None,
    };
    let export = &target.export;
    let result = match op {
        Op::BlockStatus {
            offset,
            length,
            req_one,
        } => meta::block_status(export, &target.contexts, offset, length, req_one)
            .await
            .map(Answer::Status),
        op => execute(export, op, payload, tracked)
            .await
            .map(Answer::Data),
    };
    let failed = result.is_err();
    let (head, data) = match result {
        Ok(Answer::Status(d)) => (replier.block_status(cookie, &d), None),
        Ok(Answer::Data(Some(data))) => {
            (replier.read_data(cookie, header.offset, &data), Some(data))
        }
        Ok(Answer::Data(None)) => (replier.ok(cookie), None),
        Err(e) => {
            let errno = errno_of(&e);
            if errno == Errno::Io {
                warn!(cookie, command = header.command, error = %e, "request failed");
            } else {
                debug!(cookie, command = header.command, error = %e, "request failed");
            }
            let refusal = refuse(errno, e.to_string());
            (replier.error(cookie, &refusal), None)
        }
    };
    if let Some(kind) = kind {
        metrics.record(kind, started.elapsed(), u64::from(header.length), failed);
    }
    // The connection may be gone; the request itself is done either way.
    let _ = tx
        .send(Outgoing {
            head,
            data,
            permits: Some(permits),
        })
        .await;
}

/// `request` for the export's fork, if it serves one: the volume takes it
/// only while that fork lives (`NoSuchId`, `EIO`, once it is deleted, even
/// if a new fork took its region), not per request by a lookup here.
pub(crate) fn in_fork(fork: Option<ForkId>, request: Request) -> Request {
    match fork {
        Some(fork) => Request::InFork {
            fork,
            request: Box::new(request),
        },
        None => request,
    }
}

/// The connection's receive buffer.
const READ_BUFFER_BYTES: usize = 64 << 10;

/// Runs a request to its end here when it needs no waiting (a volume that
/// answers at once, a reply queue with room), and as its own task when it
/// does: the first poll, with a waker that does nothing, only decides
/// which; a future that is not ready is polled again by its task, which
/// registers the real waker then.
fn run_or_spawn<F>(mut request: std::pin::Pin<Box<F>>)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    if request.as_mut().poll(&mut cx).is_pending() {
        tokio::spawn(request);
    }
}

/// Serves requests until the client disconnects, breaks the protocol, or
/// the server shuts down; then finishes every request in flight, sends its
/// reply, and closes.
pub(crate) async fn transmit<S, V>(
    stream: S,
    backlog: Backlog,
    session: Session<V>,
    cfg: &ServerConfig,
    metrics: &Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Send + 'static,
    V: Volume,
{
    let limits = Limits::of(&session, cfg);
    let replier = Replier {
        structured: session.structured,
    };
    let target = Arc::new(Target {
        export: session.export,
        contexts: session.contexts,
    });
    let (read_half, write_half) = tokio::io::split(stream);
    let depth = cfg.max_inflight_requests_per_connection as usize;
    let tracked = cfg.max_tracked_writes();
    // Replies of requests in flight: at most `depth`, as many as permits.
    let (tx, rx) = mpsc::channel::<Outgoing>(depth);
    let socket = Duplex {
        r: read_half,
        out: Outbox::new(write_half, rx),
        backlog,
        ran_dry: true,
    };
    let mut reader = Reader {
        // Many small requests per receive; a payload at least this large
        // goes straight into its own buffer.
        inner: BufReader::with_capacity(READ_BUFFER_BYTES, socket),
        limits,
        replier,
        requests: Arc::new(Semaphore::new(depth)),
        bytes: Arc::new(Semaphore::new(
            cfg.max_inflight_bytes_per_connection as usize,
        )),
        max_write_skip: cfg.max_write_skip_bytes,
        after_large_write: false,
        lookahead: [0; REQUEST_HEADER_BYTES],
        lookahead_bytes: 0,
    };
    let stop = loop {
        let next = tokio::select! {
            biased;
            _ = shutdown.wait_for(|down| *down) => Next::Stop(Stop::Shutdown),
            n = reader.next() => n,
        };
        match next {
            Next::Spawn {
                header,
                op,
                payload,
                permits,
            } => {
                let tx = tx.clone();
                run_or_spawn(Box::pin(serve_request(
                    Arc::clone(&target),
                    replier,
                    header,
                    op,
                    payload,
                    permits,
                    tx,
                    Arc::clone(metrics),
                    tracked,
                )));
            }
            Next::Refused(out) => {
                metrics.record_refused();
                reader.outbox().push(out);
            }
            Next::Stop(stop) => break stop,
        }
    };
    match &stop {
        Stop::Violation(why) => warn!(%why, "protocol violation; closing"),
        Stop::Io(e) => debug!(error = %e, "read error; closing"),
        other => debug!(?other, "transmission ending"),
    }
    // Requests in flight hold clones of `tx`; the outbox is done after the
    // last of them has queued its reply.
    drop(tx);
    let outbox = reader.inner.into_inner().out;
    if let Err(e) = outbox.finish().await {
        debug!(error = %e, "writing replies failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            block_size: 4096,
            min_block_size: 512,
            size_bytes: 4096 * 100,
            max_payload: 4096 * 8,
            read_only: false,
            structured: true,
            meta_contexts: 0,
        }
    }

    fn h(command: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
        RequestHeader {
            flags,
            command,
            cookie: 1,
            offset,
            length,
        }
    }

    fn errno(r: Result<Op, Refusal>) -> Option<Errno> {
        r.err().map(|r| r.errno)
    }

    #[test]
    fn good_requests_decode() {
        let l = limits();
        assert_eq!(
            l.check(&h(CMD_READ, 0, 4096, 8192)),
            Ok(Op::Read {
                offset: 4096,
                length: 8192
            })
        );
        assert_eq!(
            l.check(&h(CMD_WRITE, CMD_FLAG_FUA, 0, 4096)),
            Ok(Op::Write {
                offset: 0,
                length: 4096,
                fua: true
            })
        );
        assert_eq!(l.check(&h(CMD_FLUSH, 0, 0, 0)), Ok(Op::Flush));
        // TRIM and WRITE_ZEROES carry no payload: larger than the maximum is fine.
        assert!(l.check(&h(CMD_TRIM, 0, 0, 4096 * 100)).is_ok());
        assert!(l
            .check(&h(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 4096 * 100))
            .is_ok());
    }

    #[test]
    fn sector_aligned_requests_decode() {
        let l = limits();
        assert_eq!(
            l.check(&h(CMD_READ, 0, 512, 1024)),
            Ok(Op::Read {
                offset: 512,
                length: 1024
            })
        );
        assert_eq!(
            l.check(&h(CMD_WRITE, 0, 4096 * 99 + 3584, 512)),
            Ok(Op::Write {
                offset: 4096 * 99 + 3584,
                length: 512,
                fua: false
            })
        );
        assert!(l.check(&h(CMD_TRIM, 0, 512, 4096 * 50)).is_ok());
        assert!(l.check(&h(CMD_WRITE_ZEROES, 0, 1024, 512)).is_ok());
        // Zeroing part of a block reads and writes it: not fast.
        for (offset, length) in [(512, 4096), (0, 512), (4096, 4096 + 512)] {
            assert_eq!(
                errno(l.check(&h(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, offset, length))),
                Some(Errno::NotSup),
                "{offset}+{length}"
            );
        }
        // Not multiples of 512: EINVAL.
        for (offset, length) in [(1, 512), (0, 511), (511, 1), (4096, 4097), (256, 4096)] {
            for command in [CMD_READ, CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] {
                assert_eq!(
                    errno(l.check(&h(command, 0, offset, length))),
                    Some(Errno::Inval),
                    "{command} {offset}+{length}"
                );
            }
        }
    }

    #[test]
    fn bad_requests_get_the_spec_errors() {
        let l = limits();
        assert_eq!(errno(l.check(&h(99, 0, 0, 4096))), Some(Errno::Inval));
        assert_eq!(
            errno(l.check(&h(CMD_READ, 1 << 9, 0, 4096))),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(l.check(&h(CMD_READ, 0, 100, 4096))),
            Some(Errno::Inval)
        );
        assert_eq!(errno(l.check(&h(CMD_READ, 0, 0, 100))), Some(Errno::Inval));
        assert_eq!(errno(l.check(&h(CMD_READ, 0, 0, 0))), Some(Errno::Inval));
        assert_eq!(
            errno(l.check(&h(CMD_READ, 0, 4096 * 99, 8192))),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(l.check(&h(CMD_WRITE, 0, 4096 * 99, 8192))),
            Some(Errno::NoSpc)
        );
        assert_eq!(
            errno(l.check(&h(CMD_WRITE, 0, 4096 * 100 - 512, 1024))),
            Some(Errno::NoSpc)
        );
        assert_eq!(
            errno(l.check(&h(CMD_READ, 0, u64::MAX - 4095, 4096))),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(l.check(&h(CMD_WRITE, 0, 0, 4096 * 9))),
            Some(Errno::Overflow)
        );
        assert_eq!(errno(l.check(&h(CMD_FLUSH, 0, 1, 0))), Some(Errno::Inval));
        assert_eq!(
            errno(l.check(&h(CMD_BLOCK_STATUS, 0, 0, 4096))),
            Some(Errno::Inval)
        );
        assert_eq!(
            errno(l.check(&h(
                CMD_WRITE_ZEROES,
                CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
                0,
                4096
            ))),
            Some(Errno::NotSup)
        );
        let ro = Limits {
            read_only: true,
            ..limits()
        };
        assert_eq!(
            errno(ro.check(&h(CMD_WRITE, 0, 0, 4096))),
            Some(Errno::Perm)
        );
        assert_eq!(errno(ro.check(&h(CMD_TRIM, 0, 0, 4096))), Some(Errno::Perm));
        assert!(ro.check(&h(CMD_READ, 0, 0, 4096)).is_ok());
        assert!(ro.check(&h(CMD_FLUSH, 0, 0, 0)).is_ok());
        let simple = Limits {
            structured: false,
            ..limits()
        };
        assert_eq!(
            errno(simple.check(&h(CMD_READ, CMD_FLAG_DF, 0, 4096))),
            Some(Errno::Inval)
        );
    }

    #[test]
    fn spans_split_ranges_into_whole_and_partial_blocks() {
        let bs = 4096;
        let span = |o: u64, l: u64| Span::of(o, l, bs);
        // Aligned.
        let s = span(4096, 8192);
        assert!(s.aligned());
        assert_eq!((s.lba, s.blocks, s.whole()), (1, 2, (1, 2)));
        assert_eq!(s.partial_runs(), [None, None]);
        // Inside one block.
        let s = span(512, 1024);
        assert_eq!((s.lba, s.blocks, s.head, s.tail), (0, 1, 512, 2560));
        assert_eq!(s.whole().1, 0);
        assert_eq!(s.partial_runs(), [Some((0, 1)), None]);
        let s = span(0, 512);
        assert_eq!((s.head, s.tail, s.whole().1), (0, 3584, 0));
        assert_eq!(s.partial_runs(), [Some((0, 1)), None]);
        let s = span(3584, 512);
        assert_eq!((s.head, s.tail, s.whole().1), (3584, 0, 0));
        assert_eq!(s.partial_runs(), [Some((0, 1)), None]);
        // Across one boundary: two partial blocks, read together.
        let s = span(3584, 1024);
        assert_eq!((s.lba, s.blocks, s.whole().1), (0, 2, 0));
        assert_eq!(s.partial_runs(), [Some((0, 2)), None]);
        // Partial ends around whole blocks.
        let s = span(4096 + 512, 3 * 4096);
        assert_eq!((s.lba, s.blocks, s.whole()), (1, 4, (2, 2)));
        assert_eq!(s.partial_runs(), [Some((1, 1)), Some((4, 1))]);
        // One partial end.
        let s = span(4096, 4096 + 512);
        assert_eq!((s.blocks, s.whole()), (2, (1, 1)));
        assert_eq!(s.partial_runs(), [None, Some((2, 1))]);
        let s = span(512, 2 * 4096 - 512);
        assert_eq!((s.blocks, s.whole()), (2, (1, 1)));
        assert_eq!(s.partial_runs(), [Some((0, 1)), None]);
    }

    #[test]
    fn block_status_decodes_req_one() {
        let l = Limits {
            meta_contexts: 2,
            ..limits()
        };
        assert_eq!(
            l.check(&h(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 4096, 8192)),
            Ok(Op::BlockStatus {
                offset: 4096,
                length: 8192,
                req_one: true
            })
        );
        assert_eq!(
            errno(l.check(&h(CMD_BLOCK_STATUS, 0, 4096 * 99, 8192))),
            Some(Errno::Inval)
        );
    }

    #[test]
    fn pieces_cover_the_range() {
        let p: Vec<_> = pieces(10, 7, 3).collect();
        assert_eq!(p, vec![(10, 3), (13, 3), (16, 1)]);
        assert_eq!(pieces(0, 3, 3).count(), 1);
    }
}
