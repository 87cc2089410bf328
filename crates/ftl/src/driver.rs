//! A single-threaded driver: owns a [`Backend`] and an [`Ftl`] and moves
//! commands and completions between them. It is the blocking embedding API
//! (each call runs the loop until its reply arrives) and the building block
//! of threaded and async front ends.
//!
//! ```
//! use zftl_core::{Driver, FormatOptions, FtlConfig};
//! use zftl_sim::{SimConfig, SimDevice};
//!
//! let device = SimDevice::create_memory(SimConfig::small_for_tests())?;
//! let mut ftl = Driver::format(device, &FormatOptions::default(), FtlConfig::default())?;
//! let block = vec![0xAB; ftl.block_size()];
//! ftl.write(7, &block)?;
//! ftl.flush()?;
//! assert_eq!(ftl.read(7, 1)?, block);
//! let device = ftl.shutdown()?;
//! let mut ftl = Driver::mount(device, FtlConfig::default())?;
//! assert_eq!(ftl.read(7, 1)?, block);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::addr::Lba;
use crate::backend::{Backend, Completion, DeviceError, SubmitError};
use crate::error::IoError;
use crate::fork::{Fork, ForkError};
use crate::ftl::{Ftl, Reply, ReplyData, Request, MAX_EXTENT_QUERY_BLOCKS};
use crate::history::{Snapshot, SnapshotError, SnapshotId};
use crate::nameless::{NamelessAddr, NamelessEvent};
use crate::range::{self, RangeOp};
use crate::stats::FtlStats;
use std::collections::VecDeque;

/// Completions reaped per loop turn.
const REAP_BATCH: usize = 256;

pub struct Driver<B: Backend> {
    backend: B,
    ftl: Ftl,
    completions: Vec<Completion>,
    next_id: u64,
    /// Finished replies not yet taken, oldest first (few: callers take them).
    replies: VecDeque<Reply>,
    /// The wall time (ns since the Unix epoch) the core is told while a
    /// protection window is configured, once format or mount has returned
    /// (so a caller's own clock is the first the window sees).
    wall_clock: Box<dyn FnMut() -> u64 + Send>,
    wall_clock_on: bool,
}

impl<B: Backend> Driver<B> {
    pub(crate) fn new(backend: B, ftl: Ftl) -> Driver<B> {
        Driver {
            backend,
            ftl,
            completions: Vec::with_capacity(REAP_BATCH),
            next_id: 0,
            replies: VecDeque::new(),
            wall_clock: Box::new(wall_ns_now),
            wall_clock_on: false,
        }
    }

    pub(crate) fn start_wall_clock(&mut self) {
        self.wall_clock_on = true;
    }

    /// Replaces the wall clock (the system's by default) the protection
    /// window's points are timed by: a test or a simulation passes its own.
    pub fn set_wall_clock(&mut self, clock: impl FnMut() -> u64 + Send + 'static) {
        self.wall_clock = Box::new(clock);
    }

    pub fn ftl(&self) -> &Ftl {
        &self.ftl
    }

    #[cfg(test)]
    pub(crate) fn ftl_mut(&mut self) -> &mut Ftl {
        &mut self.ftl
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Starts an in-place collection of nameless zone `zone`
    /// ([`Ftl::start_in_place`]); it runs as the loop turns (`settle`).
    /// Returns whether it started.
    pub fn start_in_place(&mut self, zone: crate::backend::ZoneId) -> bool {
        self.ftl.start_in_place(zone)
    }

    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    pub fn block_size(&self) -> usize {
        self.ftl.block_size()
    }

    /// The implementation that takes this volume's data CRCs (see
    /// [`Ftl::data_crc`]).
    pub fn data_crc(&self) -> crate::tag::DataCrcImpl {
        self.ftl.data_crc()
    }

    pub fn logical_blocks(&self) -> u64 {
        self.ftl.logical_blocks()
    }

    pub fn stats(&self) -> FtlStats {
        self.ftl.stats()
    }

    /// One turn of the loop: submit what the core asks for while the device
    /// has room, hand completions back, and wait on the device if nothing
    /// moved. Returns whether anything happened.
    pub fn turn(&mut self) -> Result<bool, IoError> {
        let moved = self.turn_nowait()?;
        if !moved && self.backend.in_flight() > 0 {
            self.backend.wait().map_err(device_gone)?;
            return Ok(true);
        }
        Ok(moved)
    }

    fn submit_commands(&mut self) -> Result<bool, IoError> {
        let depth = self.backend.geometry().queue_depth as usize;
        let mut moved = false;
        while self.backend.in_flight() < depth {
            let Some((tag, command)) = self.ftl.poll_command() else {
                break;
            };
            match self.backend.submit(tag, command) {
                Ok(()) => moved = true,
                Err(SubmitError::Busy) => panic!("device busy below its queue depth"),
                Err(SubmitError::DeviceGone) => {
                    self.ftl.handle_completion(Completion {
                        tag,
                        result: Err(DeviceError::DeviceGone),
                    });
                    return Err(IoError::DeviceGone);
                }
            }
        }
        Ok(moved)
    }

    /// Hands a request to the core without running the loop; `Err(Busy)`
    /// when the core's request table is full. For drivers that own the loop
    /// (threads, async runtimes); the answer arrives through [`Self::take_reply`].
    pub fn try_submit(&mut self, id: u64, request: Request) -> Result<(), IoError> {
        self.ftl.handle_request(id, request)
    }

    /// Moves one finished reply out, if any: one collected by
    /// [`Self::turn`] or [`Self::turn_nowait`], else one the core answered
    /// at once (a buffered write, a bad argument), without turning the loop.
    pub fn take_reply(&mut self) -> Option<Reply> {
        self.replies.pop_front().or_else(|| self.ftl.poll_reply())
    }

    /// Like [`Self::turn`] but never waits on the device. Returns whether
    /// anything moved.
    pub fn turn_nowait(&mut self) -> Result<bool, IoError> {
        self.ftl.handle_time(self.backend.clock_ns());
        if self.wall_clock_on && self.ftl.wants_wall_time() {
            self.ftl.handle_wall_time((self.wall_clock)());
        }
        let mut moved = self.ftl.poll_work();
        moved |= self.submit_commands()?;
        let reaped = self.backend.reap(&mut self.completions, REAP_BATCH);
        for c in self.completions.drain(..) {
            self.ftl.handle_completion(c);
        }
        moved |= reaped > 0;
        while let Some(reply) = self.ftl.poll_reply() {
            self.replies.push_back(reply);
            moved = true;
        }
        Ok(moved)
    }

    /// Blocks until the device completes something (returns at once when
    /// nothing is in flight).
    pub fn wait_device(&mut self) -> Result<(), IoError> {
        self.backend.wait().map_err(device_gone)
    }

    /// Commands in flight on the device.
    pub fn device_in_flight(&self) -> usize {
        self.backend.in_flight()
    }

    /// Queues a request; returns its id. Runs the loop while the core is busy.
    pub fn submit(&mut self, request: Request) -> Result<u64, IoError> {
        let id = self.next_id;
        self.next_id += 1;
        loop {
            match self.ftl.handle_request(id, request.clone()) {
                Ok(()) => return Ok(id),
                Err(IoError::Busy) => {
                    if !self.turn()? {
                        panic!(
                            "FTL busy with nothing in flight: {}",
                            self.ftl.debug_state()
                        );
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The reply to `id`, running the loop until it arrives.
    pub fn wait_for(&mut self, id: u64) -> Result<ReplyData, IoError> {
        loop {
            if let Some(i) = self.replies.iter().position(|r| r.id == id) {
                return self.replies.remove(i).expect("present").result;
            }
            if !self.turn()? {
                panic!(
                    "FTL stalled: request {id} unanswered with nothing in flight: {}",
                    self.ftl.debug_state()
                );
            }
        }
    }

    /// Submits and waits: the blocking API.
    pub fn call(&mut self, request: Request) -> Result<ReplyData, IoError> {
        let id = self.submit(request)?;
        self.wait_for(id)
    }

    pub fn read(&mut self, lba: Lba, block_count: u32) -> Result<Vec<u8>, IoError> {
        match self.call(Request::Read { lba, block_count })? {
            ReplyData::Read(data) => Ok(data),
            other => unreachable!("read answered with {other:?}"),
        }
    }

    /// Runs of mapped and unmapped blocks in the range (see `Request::Extents`).
    pub fn extents(
        &mut self,
        lba: Lba,
        block_count: u32,
    ) -> Result<Vec<crate::ftl::Extent>, IoError> {
        match self.call(Request::Extents { lba, block_count })? {
            ReplyData::Extents(runs) => Ok(runs),
            other => unreachable!("extent query answered with {other:?}"),
        }
    }

    pub fn write(&mut self, lba: Lba, data: &[u8]) -> Result<(), IoError> {
        self.call(Request::Write {
            lba,
            data: data.to_vec(),
            fua: false,
        })
        .map(drop)
    }

    /// Write with force-unit-access: durable when this returns.
    pub fn write_fua(&mut self, lba: Lba, data: &[u8]) -> Result<(), IoError> {
        self.call(Request::Write {
            lba,
            data: data.to_vec(),
            fua: true,
        })
        .map(drop)
    }

    /// Metadata bytes every nameless block carries.
    pub fn nameless_md_bytes(&self) -> usize {
        self.ftl.nameless_md_bytes()
    }

    /// Writes whole blocks to the physical segment, each with
    /// [`Self::nameless_md_bytes`] of `md`; returns their addresses. They
    /// are durable after the next flush.
    pub fn nameless_write(&mut self, data: &[u8], md: &[u8]) -> Result<Vec<NamelessAddr>, IoError> {
        self.nameless_call(None, data, md, false)
    }

    /// [`Self::nameless_write`], durable when this returns.
    pub fn nameless_write_fua(
        &mut self,
        data: &[u8],
        md: &[u8],
    ) -> Result<Vec<NamelessAddr>, IoError> {
        self.nameless_call(None, data, md, true)
    }

    /// Writes blocks that replace (free) `old`, one address per block: a
    /// power cut keeps each new block and the free of the one it replaces,
    /// or neither.
    pub fn nameless_overwrite(
        &mut self,
        old: &[NamelessAddr],
        data: &[u8],
        md: &[u8],
    ) -> Result<Vec<NamelessAddr>, IoError> {
        self.nameless_call(Some(old), data, md, false)
    }

    fn nameless_call(
        &mut self,
        old: Option<&[NamelessAddr]>,
        data: &[u8],
        md: &[u8],
        fua: bool,
    ) -> Result<Vec<NamelessAddr>, IoError> {
        match self.call(nameless_request(old, data, md, fua))? {
            ReplyData::Addrs(addrs) => Ok(addrs),
            other => panic!("nameless write answered {other:?}"),
        }
    }

    /// Reads a block of the physical segment: its data and metadata.
    pub fn nameless_read(&mut self, addr: NamelessAddr) -> Result<(Vec<u8>, Vec<u8>), IoError> {
        match self.call(Request::NamelessRead { addr })? {
            ReplyData::NamelessBlock { data, md } => Ok((data, md)),
            other => panic!("nameless read answered {other:?}"),
        }
    }

    /// Frees blocks of the physical segment (all or none); durable after
    /// the next flush.
    pub fn nameless_free(&mut self, addrs: &[NamelessAddr]) -> Result<(), IoError> {
        self.call(Request::NamelessFree {
            addrs: addrs.to_vec(),
        })
        .map(drop)
    }

    /// Tells the FTL that every address it gave, by reply or event, is
    /// recorded: the blocks of the nameless writes answered before this
    /// call are not handed over after a power cut any more. A flush, then
    /// a commit note; returns once the note is durable. Nameless writes
    /// made meanwhile wait for the note (docs/design.md, "Recovery and the
    /// post-crash hand-over").
    pub fn nameless_commit(&mut self) -> Result<(), IoError> {
        self.call(Request::NamelessCommit).map(drop)
    }

    /// Acknowledges `NamelessEvent::Migrated` events by their old
    /// addresses, once the client's pointer changes are durable: returns
    /// once the acknowledgements are durable; from then on each old
    /// address is stale. An address with no pending move is skipped (a
    /// repeated ack is harmless). A commit also acknowledges the events
    /// delivered before it.
    pub fn nameless_ack(&mut self, olds: &[NamelessAddr]) -> Result<(), IoError> {
        self.call(Request::NamelessAck {
            olds: olds.to_vec(),
        })
        .map(drop)
    }

    /// The next ready event, if any. Never runs the loop: events are
    /// prepared while it runs (by any call, or [`Self::settle`]).
    pub fn poll_event(&mut self) -> Option<NamelessEvent> {
        self.ftl.poll_event()
    }

    /// Up to `max` events: runs the loop until at least one is ready, or
    /// returns none once none can come.
    pub fn next_events(&mut self, max: usize) -> Result<Vec<NamelessEvent>, IoError> {
        self.call(Request::NamelessEvents { max })
            .map(nameless_events)
    }

    pub fn trim(&mut self, lba: Lba, block_count: u32) -> Result<(), IoError> {
        self.call(Request::Trim { lba, block_count }).map(drop)
    }

    pub fn write_zeroes(&mut self, lba: Lba, block_count: u32) -> Result<(), IoError> {
        self.call(Request::WriteZeroes {
            lba,
            block_count,
            fua: false,
        })
        .map(drop)
    }

    pub fn flush(&mut self) -> Result<(), IoError> {
        self.call(Request::Flush).map(drop)
    }

    /// Applies a vector of range operations as one atomic unit; returns
    /// once it is durable (see [`crate::range`]).
    pub fn range_ops(&mut self, ops: Vec<RangeOp>) -> Result<(), IoError> {
        self.call(Request::Range { ops }).map(drop)
    }

    /// `(src, dst, block_count)`: each `dst` range names what its `src`
    /// names; no data is copied. One atomic, durable vector.
    pub fn clone_ranges(&mut self, ranges: &[(Lba, Lba, u64)]) -> Result<(), IoError> {
        self.range_ops(range::clones(ranges))
    }

    /// `(src, dst, block_count)`: each `dst` range takes what its `src`
    /// named, and `src` reads as zeros. One atomic, durable vector.
    pub fn move_ranges(&mut self, ranges: &[(Lba, Lba, u64)]) -> Result<(), IoError> {
        self.range_ops(range::moves(ranges))
    }

    /// `(lba, block_count)`: persistent trim of each range, atomic and durable.
    pub fn delete_ranges(&mut self, ranges: &[(Lba, u64)]) -> Result<(), IoError> {
        self.range_ops(range::deletes(ranges))
    }

    /// Merges `sources` (ranges of `block_count` blocks) into `dst`: each
    /// block of `dst` takes the block a source changed (see
    /// [`range::RangeOp::Merge`]).
    pub fn merge(
        &mut self,
        sources: &[Lba],
        dst: Lba,
        block_count: u64,
        policy: range::MergePolicy,
    ) -> Result<(), IoError> {
        self.range_ops(vec![range::merge(sources, dst, block_count, policy)])
    }

    /// Sets or clears `attribute` on each `(lba, block_count)` range, atomically.
    pub fn set_attribute(
        &mut self,
        ranges: &[(Lba, u64)],
        attribute: range::Attribute,
    ) -> Result<(), IoError> {
        self.range_ops(range::attributes(ranges, attribute))
    }

    /// Takes a snapshot named `name` of every write acknowledged before
    /// this call; returns once it is durable. The foreground cost is a
    /// flush and one note: nothing is copied.
    pub fn snapshot_create(&mut self, name: &str) -> Result<Snapshot, IoError> {
        self.call(snapshot_create_request(name)).map(snapshot_data)
    }

    /// Deletes the snapshot named `name`; returns once the delete is
    /// durable (its space comes back through GC).
    pub fn snapshot_delete(&mut self, name: &str) -> Result<(), IoError> {
        let id = self.snapshot_named(name)?.id;
        self.call(Request::SnapshotDelete { id }).map(drop)
    }

    /// Makes the live volume what snapshot `to` holds, first taking a
    /// snapshot of the state it leaves (named `undo`, default `undo-ID`),
    /// so a revert can be undone by reverting to it. No data is copied:
    /// the cost follows the blocks changed since `to`. Returns the undo
    /// snapshot once the revert is durable.
    pub fn snapshot_revert(&mut self, to: &str, undo: Option<&str>) -> Result<Snapshot, IoError> {
        let to = self.snapshot_named(to)?.id;
        self.call(snapshot_revert_request(to, undo))
            .map(snapshot_data)
    }

    /// Creates a writable fork named `fork` of the snapshot named
    /// `snapshot`; returns it once durable. O(1): nothing is copied, and
    /// the snapshot never changes. Read, write and trim its blocks with
    /// the ordinary calls at [`Fork::lba_offset`] + block.
    pub fn fork_create(&mut self, snapshot: &str, fork: &str) -> Result<Fork, IoError> {
        let base = self.snapshot_named(snapshot)?.id;
        self.call(fork_create_request(base, fork)).map(fork_data)
    }

    /// Deletes the fork named `name`; returns once durable.
    pub fn fork_delete(&mut self, name: &str) -> Result<(), IoError> {
        let id = fork_named(&self.forks(), name)?.id;
        self.call(Request::ForkDelete { id }).map(drop)
    }

    /// The live forks.
    pub fn forks(&self) -> Vec<Fork> {
        self.ftl.mapping().forks().iter().cloned().collect()
    }

    /// The live snapshots, oldest first.
    pub fn snapshots(&self) -> Vec<Snapshot> {
        self.ftl.mapping().history().snapshots().to_vec()
    }

    /// The live snapshot named `name`.
    pub fn snapshot_named(&self, name: &str) -> Result<Snapshot, IoError> {
        let history = self.ftl.mapping().history();
        let found = history.by_name(name).cloned();
        found.ok_or_else(|| SnapshotError::NoSuchName(name.to_string()).into())
    }

    /// The runs `(lba, block_count)` of the range whose contents differ
    /// between snapshot `since` and `until` (`None`: the live volume); see
    /// `Request::Changed`.
    pub fn changed(
        &mut self,
        since: SnapshotId,
        until: Option<SnapshotId>,
        lba: Lba,
        block_count: u32,
    ) -> Result<Vec<(Lba, u64)>, IoError> {
        let request = Request::Changed {
            since,
            until,
            lba,
            block_count,
        };
        self.call(request).map(changed_runs)
    }

    /// Every run of blocks that differs between the snapshots named
    /// `since` and `until` (`None`: the live volume), one
    /// `Request::Changed` per `MAX_EXTENT_QUERY_BLOCKS`.
    pub fn snapshot_diff(
        &mut self,
        since: &str,
        until: Option<&str>,
    ) -> Result<Vec<(Lba, u64)>, IoError> {
        let since = self.snapshot_named(since)?.id;
        let until = until.map(|n| self.snapshot_named(n)).transpose()?;
        let blocks = self.logical_blocks();
        diff_volume(since, until.map(|s| s.id), blocks, |r| self.call(r))
    }

    /// Reads blocks as snapshot `snapshot` holds them.
    pub fn read_snapshot(
        &mut self,
        snapshot: SnapshotId,
        lba: Lba,
        block_count: u32,
    ) -> Result<Vec<u8>, IoError> {
        let request = Request::ReadSnapshot {
            snapshot,
            lba,
            block_count,
        };
        match self.call(request)? {
            ReplyData::Read(data) => Ok(data),
            other => unreachable!("read answered with {other:?}"),
        }
    }

    /// Runs until the core has nothing left to do (buffer drained, GC and
    /// checkpoint steps finished or waiting on new requests).
    pub fn settle(&mut self) -> Result<(), IoError> {
        while self.turn()? {}
        Ok(())
    }

    /// Writes a checkpoint now and waits for it to commit.
    pub fn checkpoint(&mut self) -> Result<(), IoError> {
        self.ftl.request_checkpoint();
        while !self.ftl.checkpoint_idle() {
            if let Some(e) = self.ftl.failure() {
                return Err(e);
            }
            // A turn that issued nothing may still have finished the
            // checkpoint (its last superblock copy dead: skipped, then
            // committed) or given up (read-only: an error, not a stall).
            if !self.turn()? && !self.ftl.checkpoint_idle() {
                if let Some(e) = self.ftl.failure() {
                    return Err(e);
                }
                panic!(
                    "checkpoint stalled with nothing in flight: {}",
                    self.ftl.debug_state()
                );
            }
        }
        match self.ftl.failure() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Clean shutdown: flush, a checkpoint marked clean, hand the device back.
    pub fn shutdown(mut self) -> Result<B, IoError> {
        self.flush()?;
        self.ftl.request_clean_checkpoint();
        self.checkpoint()?;
        self.settle()?;
        Ok(self.backend)
    }

    /// Drops the FTL state without any writes, as a crash would.
    pub fn into_backend(self) -> B {
        self.backend
    }
}

/// The events a `Request::NamelessEvents` was answered with.
pub fn nameless_events(reply: ReplyData) -> Vec<NamelessEvent> {
    match reply {
        ReplyData::NamelessEvents(events) => events,
        other => unreachable!("an events request answered with {other:?}"),
    }
}

/// The request of a nameless write (`old` is `None`) or of an overwrite of
/// `old` (the core refuses one without an address per block).
pub fn nameless_request(
    old: Option<&[NamelessAddr]>,
    data: &[u8],
    md: &[u8],
    fua: bool,
) -> Request {
    let (data, md) = (data.to_vec(), md.to_vec());
    match old {
        None => Request::NamelessWrite { data, md, fua },
        Some(old) => Request::NamelessOverwrite {
            old: old.to_vec(),
            data,
            md,
            fua,
        },
    }
}

/// A create of snapshot `name` stamped with the wall time now: the core
/// has no clock, so drivers give it the time to record.
pub fn snapshot_create_request(name: &str) -> Request {
    Request::SnapshotCreate {
        name: name.to_string(),
        wall_ns: wall_ns_now(),
    }
}

/// A `Request::SnapshotRevert` to snapshot `to`, its undo snapshot named
/// `undo` (default `undo-ID`) and stamped with the wall time now.
/// The request that creates a fork named `name` of snapshot `snapshot`,
/// stamped with the wall time now.
pub fn fork_create_request(snapshot: SnapshotId, name: &str) -> Request {
    Request::ForkCreate {
        snapshot,
        name: name.to_string(),
        wall_ns: wall_ns_now(),
    }
}

/// The fork a fork create answered with.
pub fn fork_data(reply: ReplyData) -> Fork {
    match reply {
        ReplyData::Fork(f) => f,
        other => unreachable!("fork create answered with {other:?}"),
    }
}

/// The live fork named `name` among `forks`.
pub fn fork_named(forks: &[Fork], name: &str) -> Result<Fork, IoError> {
    let found = forks.iter().find(|f| f.name == name).cloned();
    found.ok_or_else(|| ForkError::NoSuchName(name.to_string()).into())
}

pub fn snapshot_revert_request(to: SnapshotId, undo: Option<&str>) -> Request {
    Request::SnapshotRevert {
        to,
        undo: undo.map(str::to_string),
        wall_ns: wall_ns_now(),
    }
}

fn wall_ns_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The `Request::Changed` queries that cover a volume of `logical_blocks`
/// blocks, in order (a whole-volume diff; see [`Driver::snapshot_diff`]).
pub fn diff_requests(
    since: SnapshotId,
    until: Option<SnapshotId>,
    logical_blocks: u64,
) -> impl Iterator<Item = Request> {
    let step = u64::from(MAX_EXTENT_QUERY_BLOCKS);
    (0..logical_blocks.div_ceil(step)).map(move |i| {
        let lba = i * step;
        let block_count = (logical_blocks - lba).min(step);
        Request::Changed {
            since,
            until,
            lba,
            block_count: u32::try_from(block_count).expect("at most one query's blocks"),
        }
    })
}

/// The snapshot a `Request::SnapshotCreate` or `SnapshotRevert` answer
/// holds.
pub fn snapshot_data(reply: ReplyData) -> Snapshot {
    match reply {
        ReplyData::Snapshot(s) => s,
        other => unreachable!("snapshot change answered with {other:?}"),
    }
}

/// Every run of blocks that differs between snapshot `since` and `until`
/// (`None`: the live volume) on a volume of `logical_blocks`, asking
/// `call` the [`diff_requests`] in turn (a blocking caller's whole-volume
/// diff).
pub fn diff_volume(
    since: SnapshotId,
    until: Option<SnapshotId>,
    logical_blocks: u64,
    mut call: impl FnMut(Request) -> Result<ReplyData, IoError>,
) -> Result<Vec<(Lba, u64)>, IoError> {
    let mut runs = Vec::new();
    for request in diff_requests(since, until, logical_blocks) {
        join_runs(&mut runs, changed_runs(call(request)?));
    }
    Ok(runs)
}

/// The runs of a `Request::Changed` answer.
pub fn changed_runs(reply: ReplyData) -> Vec<(Lba, u64)> {
    match reply {
        ReplyData::Changed(runs) => runs,
        other => unreachable!("changed query answered with {other:?}"),
    }
}

/// Appends the runs of the next query of [`diff_requests`] to `out`,
/// joining a run that continues across the queries' boundary.
pub fn join_runs(out: &mut Vec<(Lba, u64)>, runs: Vec<(Lba, u64)>) {
    for (lba, block_count) in runs {
        match out.last_mut() {
            Some((start, n)) if *start + *n == lba => *n += block_count,
            _ => out.push((lba, block_count)),
        }
    }
}

fn device_gone(e: DeviceError) -> IoError {
    match e {
        DeviceError::DeviceGone => IoError::DeviceGone,
        other => IoError::Device {
            lba: 0,
            source: other,
        },
    }
}
