//! What the host asks of the core and what it gets back: requests,
//! replies and the extents a map query returns.

use crate::addr::Lba;
use crate::error::IoError;
use crate::fork::{Fork, ForkId};
use crate::history::{Snapshot, SnapshotId};
use crate::nameless::{NamelessAddr, NamelessEvent};
use crate::range::RangeOp;
use crate::tag::SummedBlocks;

/// A host request. Offsets and counts are in blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Read {
        lba: Lba,
        block_count: u32,
    },
    /// `fua`: reply only once the data is durable.
    Write {
        lba: Lba,
        data: Vec<u8>,
        fua: bool,
    },
    /// A `Write` whose data CRCs the caller took (on its own thread, see
    /// [`SummedBlocks`]); the core takes them again only if the blocks are
    /// not of the volume's block size.
    WriteSummed {
        lba: Lba,
        blocks: SummedBlocks,
        fua: bool,
    },
    /// Persistent trim: reads return zeros, also after a crash once flushed.
    Trim {
        lba: Lba,
        block_count: u32,
    },
    /// Reads return zeros; costs a note, no data writes.
    WriteZeroes {
        lba: Lba,
        block_count: u32,
        fua: bool,
    },
    /// Which blocks of the range hold data: runs of mapped (written, or
    /// buffered) and unmapped (never written or trimmed: they read as zeros)
    /// blocks, for NBD block status and tools. At most
    /// `MAX_EXTENT_QUERY_BLOCKS` per request.
    Extents {
        lba: Lba,
        block_count: u32,
    },
    /// Makes every acknowledged write, trim and zeroing durable.
    Flush,
    /// A vector of range operations, applied as one atomic unit and
    /// answered once durable (docs/design.md, "Shared blocks and range
    /// operations").
    Range {
        ops: Vec<RangeOp>,
    },
    /// Takes a snapshot named `name` of every write acknowledged before it
    /// (docs/design.md, "Snapshots and time"): a flush barrier and one
    /// note, answered once durable. `wall_ns`: the wall time to record
    /// (ns since the Unix epoch; the core has no clock).
    SnapshotCreate {
        name: String,
        wall_ns: u64,
    },
    /// Deletes snapshot `id`; the space it alone held comes back through
    /// GC.
    SnapshotDelete {
        id: SnapshotId,
    },
    /// Makes the live volume what snapshot `to` holds, first taking a
    /// snapshot named `undo` (default `undo-ID`, ID its id) of the state it
    /// leaves, so the revert can be undone; no data is copied. One atomic
    /// vector, answered with the undo snapshot once durable.
    SnapshotRevert {
        to: SnapshotId,
        undo: Option<String>,
        wall_ns: u64,
    },
    /// Reads blocks as snapshot `snapshot` holds them.
    ReadSnapshot {
        snapshot: SnapshotId,
        lba: Lba,
        block_count: u32,
    },
    /// The blocks of the range whose contents differ between snapshot
    /// `since` and snapshot `until` (`None`: the live volume, buffered
    /// writes included), in either order. At most
    /// `MAX_EXTENT_QUERY_BLOCKS` per request; costs what changed (the
    /// kept versions and births of the range), not the range.
    Changed {
        since: SnapshotId,
        until: Option<SnapshotId>,
        lba: Lba,
        block_count: u32,
    },
    /// Creates a writable fork named `name` of snapshot `snapshot`
    /// (docs/design.md, "Views, changed blocks and forks"): O(1), nothing
    /// is copied, and the snapshot never changes. Answered with the fork
    /// once durable. Its blocks are read, written and trimmed with the
    /// ordinary requests at `Fork::lba_offset + block`.
    ForkCreate {
        snapshot: SnapshotId,
        name: String,
        wall_ns: u64,
    },
    /// Deletes fork `id`: its region is unmapped once the writes to it
    /// in the buffer are on the media; its space comes back through GC.
    ForkDelete {
        id: ForkId,
    },
    /// `request` (a Read, Write, WriteSummed, Trim, WriteZeroes, Extents or
    /// Flush) for fork `fork`, its LBAs in the fork's region
    /// (`Fork::lba_offset + block`), taken only while that fork lives: once
    /// it is deleted its callers get `ForkError::NoSuchId`, also after a new
    /// fork took its region. (The plain request reaches whichever fork
    /// holds the region when it is admitted.)
    InFork {
        fork: ForkId,
        request: Box<Request>,
    },
    /// Writes whole blocks to the physical segment (docs/design.md,
    /// "Nameless space"): the FTL picks where each goes and answers with
    /// its address ([`ReplyData::Addrs`]). `md` holds
    /// [`Ftl::nameless_md_bytes`](crate::Ftl::nameless_md_bytes) bytes per
    /// block, stored with it. `fua`: reply only once the blocks are
    /// durable (else a later flush makes them so).
    NamelessWrite {
        data: Vec<u8>,
        md: Vec<u8>,
        fua: bool,
    },
    /// A `NamelessWrite` whose block `i` replaces (frees) `old[i]`: a power
    /// cut keeps both the new block and the free, or neither.
    NamelessOverwrite {
        old: Vec<NamelessAddr>,
        data: Vec<u8>,
        md: Vec<u8>,
        fua: bool,
    },
    /// Reads one block of the physical segment and its metadata
    /// ([`ReplyData::NamelessBlock`]).
    NamelessRead {
        addr: NamelessAddr,
    },
    /// Frees blocks of the physical segment; durable at the next flush.
    NamelessFree {
        addrs: Vec<NamelessAddr>,
    },
    /// Says that the client has recorded every address it was given, by
    /// reply or event (docs/design.md, "Recovery and the post-crash
    /// hand-over"): once every nameless write admitted before it is
    /// answered, a flush, then a durable commit note. Answered once the
    /// note is durable; the blocks of those writes are handed over no more.
    NamelessCommit,
    /// Acknowledges `Migrated` events by their old addresses: the remap
    /// entries go (an address without one is skipped) and the old
    /// addresses are stale. Answered once the acknowledgements are durable.
    NamelessAck {
        olds: Vec<NamelessAddr>,
    },
    /// Up to `max` events ([`NamelessEvent`]): waits until one is ready,
    /// or answers with none when none can come.
    NamelessEvents {
        max: usize,
    },
}

/// What a finished request returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplyData {
    Read(Vec<u8>),
    /// Answer to `Request::Extents`: consecutive runs covering the range.
    Extents(Vec<Extent>),
    /// Answer to `Request::SnapshotCreate` (the snapshot taken) and
    /// `Request::SnapshotRevert` (the undo snapshot).
    Snapshot(Snapshot),
    /// Answer to `Request::ForkCreate`.
    Fork(Fork),
    /// Answer to `Request::Changed`: the changed runs `(lba, block_count)`,
    /// in order, none touching the next.
    Changed(Vec<(Lba, u64)>),
    /// Answer to `Request::NamelessWrite` and `NamelessOverwrite`: each
    /// block's address, in order.
    Addrs(Vec<NamelessAddr>),
    /// Answer to `Request::NamelessRead`.
    NamelessBlock {
        data: Vec<u8>,
        md: Vec<u8>,
    },
    /// Answer to `Request::NamelessEvents`: at most `max`, oldest first.
    NamelessEvents(Vec<NamelessEvent>),
    Done,
}

/// A run of blocks that are all mapped or all unmapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub block_count: u32,
    pub mapped: bool,
}

/// The largest range one `Request::Extents` may ask about (bounds its loop).
pub const MAX_EXTENT_QUERY_BLOCKS: u32 = 1 << 20;

/// The answer to request `id`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub id: u64,
    pub result: Result<ReplyData, IoError>,
}
