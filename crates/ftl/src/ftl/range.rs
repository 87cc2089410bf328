//! Range-operation vectors in the running core (docs/design.md, "Range
//! operations in the core"): the queue, the hold on a vector's ranges,
//! drain, check, pre-flush, apply in steps and commit.

use super::request::{Reply, ReplyData};
use super::write::WaitingWrite;
use super::{Ftl, Op, ReplyTo};
use crate::addr::{Lba, Ppa, Seq};
use crate::backend::{Command, DeviceError, Outcome};
use crate::error::IoError;
use crate::fork::{ForkError, ForkId};
use crate::history::{SnapshotError, SnapshotId, LIVE_VOLUME};
use crate::mapping::Target;
use crate::note::{self, Note};
use crate::range::{self, Apply, MergePolicy, RangeOp};
use crate::superblock::TagMode;
use std::collections::VecDeque;

/// Vectors waiting behind the one being run; past it: busy.
pub(super) const MAX_QUEUED_VECTORS: usize = 64;

/// Blocks a vector is checked or applied by per turn of the core, so reads
/// and writes to other ranges flow between steps of a large one.
pub(super) const RANGE_STEP_BLOCKS: u64 = 1 << 16;

/// A host write or trim that waits behind a vector whose ranges it touches.
#[derive(Debug)]
pub(super) enum Held {
    Write(WaitingWrite),
    Trim {
        id: u64,
        lba: Lba,
        block_count: u32,
        zeroes: bool,
        fua: bool,
    },
}

impl Held {
    fn range(&self, block_size: usize) -> (Lba, u64) {
        match self {
            Held::Write(w) => (w.lba, w.block_count(block_size)),
            Held::Trim {
                lba, block_count, ..
            } => (*lba, u64::from(*block_count)),
        }
    }
}

#[derive(Debug)]
enum Phase {
    /// Waits until no write acknowledged before it to its ranges is
    /// buffered or on its way.
    Drain,
    Check(Check),
    /// Too many pins: waits for a checkpoint captured after `target`.
    AwaitCheckpoint {
        target: Seq,
    },
    /// Data appended since the last flush must be durable before the notes.
    PreFlush {
        issued: bool,
    },
    Apply(Apply),
}

#[derive(Debug, Default)]
struct Check {
    attributes_done: bool,
    /// Every range the vector reads, merged where they overlap (each block
    /// is counted once however many operations read it).
    reads: Vec<(Lba, u64)>,
    range: usize,
    offset: u64,
    /// The fail-on-conflict merge being scanned, and where.
    merge_op: usize,
    merge_offset: u64,
    /// Direct blocks the vector may turn into shared entries.
    entries_needed: u64,
    /// Direct blocks it reads whose version only their tag records.
    pins: Vec<(Lba, Ppa)>,
    /// Versions a snapshot change retires (a revert's changed blocks).
    snapshot_kept: u64,
}

/// `ranges` sorted and merged where they overlap or touch.
fn union(mut ranges: Vec<(Lba, u64)>) -> Vec<(Lba, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(Lba, u64)> = Vec::with_capacity(ranges.len());
    for (l, n) in ranges {
        match out.last_mut() {
            Some((pl, pn)) if l <= *pl + *pn => *pn = (*pn).max(l + n - *pl),
            _ => out.push((l, n)),
        }
    }
    out
}

/// A snapshot change, run as a vector of no operations so it is ordered
/// with writes and range operations the same way (docs/design.md,
/// "Epochs and the snapshot boundary").
#[derive(Clone, Debug)]
pub(super) enum SnapshotChange {
    /// Its ranges are the whole volume: it waits until every write
    /// acknowledged before it is on the media, and later ones wait for it.
    Create {
        name: String,
        wall_ns: u64,
    },
    Delete {
        id: SnapshotId,
    },
    /// A create of `undo` (default `undo-ID`) and, in the same vector, a
    /// revert of the live volume to snapshot `to`; its range is the whole
    /// volume, as a create's.
    Revert {
        to: SnapshotId,
        undo: Option<String>,
        wall_ns: u64,
    },
    /// A fork of snapshot `base`: nothing to wait for (the snapshot is on
    /// the media), one vector of notes.
    ForkCreate {
        base: SnapshotId,
        name: String,
        wall_ns: u64,
    },
    /// Its range is the fork's region: the writes to it in the buffer land
    /// first, later ones wait and then fail.
    ForkDelete {
        id: ForkId,
    },
}

impl SnapshotChange {
    /// Whether its range is the whole volume (it takes a snapshot).
    fn takes_snapshot(&self) -> bool {
        matches!(
            self,
            SnapshotChange::Create { .. } | SnapshotChange::Revert { .. }
        )
    }
}

#[derive(Debug)]
struct Queued {
    id: u64,
    /// One of the core's own (a window point's create or drop): its end
    /// goes to `Ftl::internal_reply`, never to the caller's replies.
    internal: bool,
    ops: Vec<RangeOp>,
    snapshot: Option<SnapshotChange>,
}

#[derive(Debug)]
struct Active {
    id: u64,
    internal: bool,
    ops: Vec<RangeOp>,
    snapshot: Option<SnapshotChange>,
    ranges: Vec<(Lba, u64)>,
    phase: Phase,
    pins: Vec<(Lba, Ppa)>,
    /// Versions its changes may keep for snapshots, set aside from the
    /// check until it is applied.
    kept_reserved: u64,
}

/// Range-operation state of the core.
#[derive(Debug, Default)]
pub(super) struct RangeState {
    queue: VecDeque<Queued>,
    active: Option<Active>,
    /// A vector that found no room while window points held some: it
    /// waits, its ranges still held, while the oldest point is dropped
    /// and swept, then is checked again (`window_gives_way_to_vector`).
    parked: Option<Active>,
    held: VecDeque<Held>,
}

impl RangeState {
    pub(super) fn new() -> RangeState {
        RangeState::default()
    }

    /// Vectors accepted and not yet answered.
    pub(super) fn pending(&self) -> usize {
        self.queue.len() + usize::from(self.active.is_some()) + usize::from(self.parked.is_some())
    }

    pub(super) fn queue_full(&self) -> bool {
        self.queue.len() >= MAX_QUEUED_VECTORS
    }

    pub(super) fn is_idle(&self) -> bool {
        self.queue.is_empty()
            && self.active.is_none()
            && self.parked.is_none()
            && self.held.is_empty()
    }

    pub(super) fn held_len(&self) -> usize {
        self.held.len()
    }

    /// Queues a snapshot change the core makes itself (a window point's
    /// create or drop), checked when its turn comes like any other.
    pub(super) fn queue_internal(&mut self, change: SnapshotChange) {
        self.queue.push_back(internal(change));
    }

    /// Queues a window point's drop ahead of every vector waiting.
    pub(super) fn queue_internal_front(&mut self, change: SnapshotChange) {
        self.queue.push_front(internal(change));
    }

    /// Moves a drop of snapshot `id` the core queued itself to the front
    /// of the queue; returns whether there was one.
    pub(super) fn hurry_internal_delete(&mut self, id: SnapshotId) -> bool {
        let at = self.queue.iter().position(|q| {
            q.internal && matches!(q.snapshot, Some(SnapshotChange::Delete { id: d }) if d == id)
        });
        if let Some(q) = at.and_then(|at| self.queue.remove(at)) {
            self.queue.push_front(q);
            return true;
        }
        false
    }

    /// Whether the vector at the front of the queue is one of the core's
    /// own point drops (it may run ahead of a parked vector).
    fn internal_delete_first(&self) -> bool {
        self.queue.front().is_some_and(|q| {
            q.internal && matches!(q.snapshot, Some(SnapshotChange::Delete { .. }))
        })
    }
}

fn reply_to(id: u64, internal: bool) -> ReplyTo {
    if internal {
        ReplyTo::Core
    } else {
        ReplyTo::Caller(id)
    }
}

fn internal(change: SnapshotChange) -> Queued {
    Queued {
        id: 0,
        internal: true,
        ops: Vec::new(),
        snapshot: Some(change),
    }
}

/// The name a revert's undo snapshot takes: the one asked for, or
/// `undo-ID`.
fn undo_name(mapping: &crate::mapping::Mapping, undo: &Option<String>) -> String {
    let id = mapping.history().next_id();
    undo.clone().unwrap_or_else(|| format!("undo-{id}"))
}

/// A snapshot change against the books, when its turn comes; `room`: the
/// versions the next checkpoint has room for. Returns the versions it
/// retires (a revert's changed blocks), all of which its undo snapshot
/// keeps.
fn check_snapshot_change(
    mapping: &crate::mapping::Mapping,
    change: &SnapshotChange,
    room: u64,
) -> Result<u64, IoError> {
    let history = mapping.history();
    match change {
        SnapshotChange::Create { name, .. } => {
            history.check_create(name)?;
            // Its record, and a few versions kept right after it.
            if room < 4 {
                return Err(IoError::SnapshotSpace);
            }
            Ok(0)
        }
        SnapshotChange::Delete { id } => {
            mapping.check_snapshot_delete(*id)?;
            Ok(0)
        }
        SnapshotChange::ForkCreate { base, name, .. } => {
            check_fork_base(mapping, *base)?;
            mapping.forks().check_create(name)?;
            Ok(0)
        }
        SnapshotChange::ForkDelete { id } => {
            mapping.forks().by_id(*id).ok_or(ForkError::NoSuchId(*id))?;
            Ok(0)
        }
        SnapshotChange::Revert { to, undo, .. } => {
            let target = history.by_id(*to).ok_or(SnapshotError::NoSuchId(*to))?;
            history.check_create(&undo_name(mapping, undo))?;
            let point = (target.create_seq, target.epoch);
            let changed = mapping.changed(0, mapping.logical_blocks(), point, None);
            let kept = changed.len() as u64;
            if kept + 4 > room || kept > mapping.history_room() {
                return Err(IoError::SnapshotSpace);
            }
            Ok(kept)
        }
    }
}

/// A fork's base: a live snapshot, not a window point (the window drops
/// those).
fn check_fork_base(mapping: &crate::mapping::Mapping, base: SnapshotId) -> Result<(), IoError> {
    let snapshot = mapping
        .history()
        .by_id(base)
        .ok_or(SnapshotError::NoSuchId(base))?;
    if snapshot.is_point() {
        let snapshot = snapshot.name.clone();
        return Err(ForkError::BaseIsPoint { snapshot }.into());
    }
    Ok(())
}

fn overlaps((a, n): (Lba, u64), (b, m): (Lba, u64)) -> bool {
    a < b + m && b < a + n
}

impl Ftl {
    /// Accepts a vector: checked against the volume now, run in turn.
    pub(super) fn start_range(
        &mut self,
        id: u64,
        ops: Vec<RangeOp>,
    ) -> Result<Option<ReplyData>, IoError> {
        range::validate(&ops, self.layout.logical_blocks)?;
        if self.read_only {
            return Err(self.refusal());
        }
        self.ranges.queue.push_back(Queued {
            id,
            internal: false,
            ops,
            snapshot: None,
        });
        Ok(None)
    }

    /// Accepts a snapshot create or delete: checked when its turn comes.
    pub(super) fn start_snapshot(
        &mut self,
        id: u64,
        change: SnapshotChange,
    ) -> Result<Option<ReplyData>, IoError> {
        if self.read_only {
            return Err(self.refusal());
        }
        match &change {
            SnapshotChange::Create { name, .. }
            | SnapshotChange::Revert {
                undo: Some(name), ..
            } => self.mapping.history().check_user_create(name)?,
            SnapshotChange::ForkCreate { base, name, .. } => {
                check_fork_base(&self.mapping, *base)?;
                self.mapping.forks().check_create(name)?;
            }
            _ => {}
        }
        self.ranges.queue.push_back(Queued {
            id,
            internal: false,
            ops: Vec::new(),
            snapshot: Some(change),
        });
        Ok(None)
    }

    /// Whether GC must leave `lba`'s direct block where it is: a vector is
    /// being applied to it in steps (its notes are in the log with the
    /// vector's seq, so recovery applies it before any later relocation).
    /// Before that GC may move it: its note precedes the vector's.
    pub(super) fn range_holds(&self, lba: Lba) -> bool {
        self.ranges.active.as_ref().is_some_and(|a| {
            matches!(a.phase, Phase::Apply(_)) && a.ranges.iter().any(|&r| overlaps(r, (lba, 1)))
        })
    }

    /// A vector's notes are pushed and its map changes are under way: no
    /// checkpoint may capture a state half-way through it.
    pub(super) fn range_applying(&self) -> bool {
        self.ranges
            .active
            .as_ref()
            .is_some_and(|a| matches!(a.phase, Phase::Apply(_)))
    }

    /// Whether a vector can move on without a device command: one waits to
    /// start, or is being checked or applied.
    pub(super) fn range_runnable(&self) -> bool {
        match &self.ranges.active {
            None => !self.ranges.queue.is_empty() || self.ranges.parked.is_some(),
            Some(a) => match &a.phase {
                Phase::Check(_) | Phase::Apply(_) => true,
                Phase::Drain => !self.buffer.holds_any(&a.ranges),
                Phase::AwaitCheckpoint { target } => self.committed_next_seq > *target,
                Phase::PreFlush { .. } => self.flushed_through >= self.appends_done,
            },
        }
    }

    /// A vector waits for the write buffer to give up blocks of its ranges:
    /// partial write units go out padded, as for a flush.
    pub(super) fn range_draining(&self) -> bool {
        self.ranges
            .active
            .as_ref()
            .is_some_and(|a| matches!(a.phase, Phase::Drain))
    }

    /// Whether a write or trim of `[lba, lba + n)` must wait behind the
    /// vector being run (it touches its ranges) or behind a held request
    /// (order among requests to one block is kept).
    pub(super) fn range_blocks(&self, lba: Lba, n: u64) -> bool {
        let bs = self.block_size();
        let active = [&self.ranges.active, &self.ranges.parked]
            .into_iter()
            .flatten()
            .any(|a| a.ranges.iter().any(|&r| overlaps(r, (lba, n))));
        active
            || self
                .ranges
                .held
                .iter()
                .any(|h| overlaps(h.range(bs), (lba, n)))
    }

    pub(super) fn hold(&mut self, held: Held) {
        self.ranges.held.push_back(held);
    }

    /// Lets held requests go, in order, while they no longer touch the
    /// vector being run; a trim waits for the writes before it to be
    /// admitted.
    fn release_held(&mut self) {
        let bs = self.block_size();
        while let Some(front) = self.ranges.held.front() {
            let r = front.range(bs);
            let blocked = [&self.ranges.active, &self.ranges.parked]
                .into_iter()
                .flatten()
                .any(|a| a.ranges.iter().any(|&x| overlaps(x, r)));
            if blocked {
                return;
            }
            if matches!(front, Held::Trim { .. })
                && self
                    .waiting_writes
                    .iter()
                    .any(|w| overlaps((w.lba, w.block_count(bs)), r))
            {
                return;
            }
            match self.ranges.held.pop_front().expect("front") {
                Held::Write(w) => self.waiting_writes.push_back(w),
                Held::Trim {
                    id,
                    lba,
                    block_count,
                    zeroes,
                    fua,
                } => {
                    let result = self.apply_trim(lba, block_count, zeroes);
                    self.answer_trim(id, result, fua);
                }
            }
        }
    }

    /// Fork `fork`, whose region is `region`, is being deleted: the writes
    /// and trims still waiting for the region get `NoSuchId` now, so none
    /// is admitted into a fork created there later.
    fn refuse_waiting_in(&mut self, region: (Lba, u64), fork: ForkId) {
        let bs = self.block_size();
        let gone = || Err(IoError::Fork(ForkError::NoSuchId(fork)));
        for h in std::mem::take(&mut self.ranges.held) {
            if !overlaps(h.range(bs), region) {
                self.ranges.held.push_back(h);
                continue;
            }
            let id = match h {
                Held::Write(w) => w.id,
                Held::Trim { id, .. } => id,
            };
            self.replies.push_back(Reply { id, result: gone() });
        }
        for w in std::mem::take(&mut self.waiting_writes) {
            if overlaps((w.lba, w.block_count(bs)), region) {
                self.replies.push_back(Reply {
                    id: w.id,
                    result: gone(),
                });
            } else {
                self.waiting_writes.push_back(w);
            }
        }
    }

    /// Nothing more reaches the media: answers every vector not yet being
    /// applied, and the requests held behind them, with `error`. A vector
    /// being applied finishes in memory and fails at its commit.
    pub(super) fn fail_ranges(&mut self, error: &IoError) {
        let applying = self.range_applying();
        if !applying {
            if let Some(a) = self.ranges.active.take() {
                self.answer(a.id, a.internal, Err(error.clone()));
            }
        }
        if let Some(a) = self.ranges.parked.take() {
            self.answer(a.id, a.internal, Err(error.clone()));
        }
        for q in std::mem::take(&mut self.ranges.queue) {
            self.answer(q.id, q.internal, Err(error.clone()));
        }
        if applying {
            return; // the held requests wait for it to end, then fail
        }
        for h in std::mem::take(&mut self.ranges.held) {
            let id = match h {
                Held::Write(w) => w.id,
                Held::Trim { id, .. } => id,
            };
            self.answer(id, false, Err(error.clone()));
        }
    }

    /// Runs vectors: the one active, then those queued, within one step's
    /// budget of blocks.
    pub(super) fn advance_ranges(&mut self) {
        self.release_held();
        let mut budget = RANGE_STEP_BLOCKS;
        while budget > 0 {
            if self.ranges.active.is_none()
                && self.ranges.parked.is_some()
                && !self.ranges.internal_delete_first()
            {
                if self.mapping.history().sweeping() {
                    break; // the parked vector waits for the room
                }
                self.ranges.active = self.ranges.parked.take();
            }
            if self.ranges.active.is_none() {
                let Some(Queued {
                    id,
                    internal,
                    ops,
                    snapshot,
                }) = self.ranges.queue.pop_front()
                else {
                    break;
                };
                if self.read_only {
                    let e = self.refusal();
                    self.answer(id, internal, Err(e));
                    continue;
                }
                let mut ranges: Vec<(Lba, u64)> = ops.iter().flat_map(|o| o.ranges()).collect();
                if snapshot
                    .as_ref()
                    .is_some_and(SnapshotChange::takes_snapshot)
                {
                    ranges.push((0, self.layout.logical_blocks));
                }
                if let Some(SnapshotChange::ForkDelete { id }) = &snapshot {
                    if let Some(f) = self.mapping.forks().by_id(*id) {
                        ranges.push((f.lba_offset, f.block_count));
                    }
                }
                ranges.sort_unstable();
                ranges.dedup();
                self.ranges.active = Some(Active {
                    id,
                    internal,
                    ops,
                    snapshot,
                    ranges,
                    phase: Phase::Drain,
                    pins: Vec::new(),
                    kept_reserved: 0,
                });
            }
            if !self.step_vector(&mut budget) {
                break;
            }
        }
        self.release_held();
    }

    /// Answers vector `id`: the caller, or the window for one of the
    /// core's own.
    fn answer(&mut self, id: u64, internal: bool, result: Result<ReplyData, IoError>) {
        self.deliver(reply_to(id, internal), result);
    }

    /// The vector being checked found no room: `Ok` and it is parked
    /// while window points give way, or `Err` and it fails. Only the
    /// caller's vectors wait; the core's own fail.
    fn no_room(&mut self, error: IoError) -> Result<(), IoError> {
        let a = self.ranges.active.as_ref().expect("active vector");
        let room = matches!(
            error,
            IoError::SnapshotSpace | IoError::Snapshot(SnapshotError::TooMany(_))
        );
        if !room || a.internal {
            return Err(error);
        }
        // A revert never gives way with the point it goes back to.
        let keep = match a.snapshot {
            Some(SnapshotChange::Revert { to, .. }) => Some(to),
            _ => None,
        };
        if !self.window_gives_way_to_vector(keep) {
            return Err(error);
        }
        let mut a = self.ranges.active.take().expect("active vector");
        a.phase = Phase::Drain;
        a.pins.clear();
        a.kept_reserved = 0;
        self.ranges.parked = Some(a);
        Ok(())
    }

    /// Moves the active vector on; returns whether it finished (so the
    /// next may start) rather than waits.
    fn step_vector(&mut self, budget: &mut u64) -> bool {
        let a = self.ranges.active.as_mut().expect("active vector");
        match &mut a.phase {
            Phase::Drain => {
                if self.buffer.holds_any(&a.ranges) {
                    return false;
                }
                a.phase = Phase::Check(Check::default());
                self.step_vector(budget)
            }
            Phase::Check(_) => match self.check_step(budget) {
                Ok(false) => false,
                Ok(true) => self.after_check(budget),
                Err(e) => {
                    if let Err(e) = self.no_room(e) {
                        let a = self.ranges.active.take().expect("active vector");
                        self.stats.range_vectors_refused += 1;
                        self.answer(a.id, a.internal, Err(e));
                    }
                    true
                }
            },
            Phase::AwaitCheckpoint { target } => {
                if self.committed_next_seq <= *target {
                    self.ckpt_requested = true;
                    return false;
                }
                a.phase = Phase::Check(Check::default());
                self.step_vector(budget)
            }
            Phase::PreFlush { .. } => {
                if self.flushed_through < self.appends_done {
                    return false;
                }
                self.begin_apply();
                self.step_vector(budget)
            }
            Phase::Apply(_) => self.apply_step(budget),
        }
    }

    /// One step of the check; `Ok(true)` once every range is checked.
    fn check_step(&mut self, budget: &mut u64) -> Result<bool, IoError> {
        let young_from = self.committed_next_seq;
        let oob = self.tag_mode == TagMode::Oob;
        let cap = self.cap();
        let room = self.checkpoint_room_versions();
        let a = self.ranges.active.as_mut().expect("active vector");
        let Phase::Check(c) = &mut a.phase else {
            unreachable!()
        };
        if !c.attributes_done {
            if let Some(change) = &a.snapshot {
                c.snapshot_kept = check_snapshot_change(&self.mapping, change, room)?;
            }
            range::check_attributes(&a.ops, &self.attrs)?;
            c.reads = union(a.ops.iter().flat_map(|o| o.reads()).collect());
            c.attributes_done = true;
        }
        // Each block read: direct ones may need a shared entry and (OOB,
        // written since the committed checkpoint) a pin.
        while let Some(&(lba, n)) = c.reads.get(c.range) {
            if *budget == 0 {
                return Ok(false);
            }
            *budget -= 1;
            let next = self.mapping.next_mapped(lba + c.offset, lba + n);
            let Some(next) = next else {
                c.range += 1;
                c.offset = 0;
                continue;
            };
            c.offset = next - lba + 1;
            if let Some(Target::Direct(ppa)) = self.mapping.target(next) {
                c.entries_needed += 1;
                let young = self.zones.get(ppa.zone(cap)).last_write_seq() >= young_from;
                if oob && young {
                    c.pins.push((next, ppa));
                }
            }
        }
        // Fail-on-conflict merges, judged on the state before the vector.
        while let Some(op) = a.ops.get(c.merge_op) {
            let RangeOp::Merge {
                sources,
                dst,
                block_count,
                policy: MergePolicy::FailOnConflict,
            } = op
            else {
                c.merge_op += 1;
                continue;
            };
            while c.merge_offset < *block_count {
                if *budget == 0 {
                    return Ok(false);
                }
                *budget -= 1;
                let k = c.merge_offset;
                let choice = range::merge_choice(
                    &self.mapping,
                    sources,
                    *dst,
                    k,
                    MergePolicy::FailOnConflict,
                );
                if choice == range::MergeChoice::Conflict {
                    return Err(IoError::MergeConflict { lba: dst + k });
                }
                c.merge_offset += 1;
            }
            c.merge_op += 1;
            c.merge_offset = 0;
        }
        Ok(true)
    }

    /// The check passed: room for the shared entries, then (OOB) room in
    /// the log for the pins, then the pre-flush.
    fn after_check(&mut self, budget: &mut u64) -> bool {
        let free = u64::from(self.mapping.shared_free());
        let keeps = self.mapping.history().keeps_versions();
        let room = self.history_room();
        let buffered = self.buffer.used_slots() as u64;
        let a = self.ranges.active.as_mut().expect("active vector");
        let Phase::Check(c) = std::mem::replace(&mut a.phase, Phase::Drain) else {
            unreachable!()
        };
        // Each block the vector changes may keep a version for a snapshot,
        // and so may each buffered block when it lands.
        let changed: u64 = a.ops.iter().flat_map(|o| o.ranges()).map(|(_, n)| n).sum();
        let kept = if keeps {
            changed + c.entries_needed + c.snapshot_kept
        } else {
            0
        };
        if keeps && kept + buffered > room {
            a.phase = Phase::Check(c);
            if let Err(e) = self.no_room(IoError::SnapshotSpace) {
                let a = self.ranges.active.take().expect("active vector");
                self.stats.range_vectors_refused += 1;
                self.answer(a.id, a.internal, Err(e));
            }
            return true;
        }
        if c.entries_needed > free {
            let a = self.ranges.active.take().expect("active vector");
            self.stats.range_vectors_refused += 1;
            let capacity = self.mapping.shared_capacity();
            self.answer(
                a.id,
                a.internal,
                Err(IoError::SharingFull {
                    capacity,
                    needed: c.entries_needed - free,
                }),
            );
            return true;
        }
        let notes_per_block = crate::note::notes_per_block(self.block_size()) as u64;
        let too_many_pins = !c.pins.is_empty()
            && c.pins.len() as u64 > self.log.free_blocks() / 4 * notes_per_block;
        let next_seq = self.next_seq;
        let a = self.ranges.active.as_mut().expect("active vector");
        if too_many_pins {
            // After a checkpoint the blocks need no pins.
            a.phase = Phase::AwaitCheckpoint { target: next_seq };
            self.ckpt_requested = true;
            return false;
        }
        a.kept_reserved = kept;
        a.pins = c.pins;
        a.phase = Phase::PreFlush { issued: false };
        self.step_vector(budget)
    }

    /// The device flush a vector waits for before its notes.
    pub(super) fn next_range_command(&mut self) -> Option<(Op, Command)> {
        let a = self.ranges.active.as_mut()?;
        match &mut a.phase {
            Phase::PreFlush { issued } if !*issued && self.flushed_through < self.appends_done => {
                *issued = true;
                self.stats.flushes += 1;
                Some((Op::RangeFlush, Command::Flush))
            }
            _ => None,
        }
    }

    pub(super) fn range_flushed(&mut self, result: Result<Outcome, DeviceError>) {
        let Some(a) = self.ranges.active.as_mut() else {
            return;
        };
        if let Err(e) = result {
            let a = self.ranges.active.take().expect("active vector");
            let error = match e {
                DeviceError::DeviceGone => IoError::DeviceGone,
                source => IoError::Device { lba: 0, source },
            };
            self.answer(a.id, a.internal, Err(error));
            return;
        }
        if let Phase::PreFlush { issued } = &mut a.phase {
            // Flushed through the mark taken when it was issued (the
            // completion handler advanced `flushed_through`); a later
            // append may need another.
            *issued = false;
        }
    }

    /// Takes the vector's seq, logs its notes and starts changing the map.
    fn begin_apply(&mut self) {
        let seq = self.take_seq();
        let a = self.ranges.active.as_mut().expect("active vector");
        // GC may have moved a pinned block since the check (its Relocated
        // note precedes the vector's): pin where the map says now.
        let mapping = &self.mapping;
        a.pins.retain_mut(|(lba, ppa)| match mapping.target(*lba) {
            Some(Target::Direct(now)) => {
                *ppa = now;
                true
            }
            _ => false,
        });
        let notes = match a.snapshot.clone() {
            None => range::vector_notes(seq, &a.ops, &a.pins),
            Some(change) => {
                if matches!(change, SnapshotChange::Create { .. }) {
                    self.fence_tag_only_zones(seq);
                }
                let notes = self.snapshot_notes(seq, &change);
                self.apply_snapshot(seq, &change);
                notes
            }
        };
        let a = self.ranges.active.as_mut().expect("active vector");
        a.phase = Phase::Apply(Apply::new(seq));
        self.stats.range_notes += notes.len() as u64;
        self.stats.range_pins += a.pins.len() as u64;
        for note in notes {
            self.log.push_note(note);
        }
    }

    fn apply_step(&mut self, budget: &mut u64) -> bool {
        let a = self.ranges.active.as_mut().expect("active vector");
        let Phase::Apply(apply) = &mut a.phase else {
            unreachable!()
        };
        let done = apply
            .step(&a.ops, &mut self.mapping, &mut self.attrs, budget)
            .unwrap_or_else(|e| panic!("vector applied past its check: {e}"));
        if !done {
            return false;
        }
        let a = self.ranges.active.take().expect("active vector");
        self.count_vector(&a.ops);
        let reply = match &a.snapshot {
            Some(SnapshotChange::Create { .. } | SnapshotChange::Revert { .. }) => {
                // The create or the undo snapshot: the newest.
                let taken = self.mapping.history().snapshots().last().cloned();
                ReplyData::Snapshot(taken.expect("the snapshot just created"))
            }
            Some(SnapshotChange::ForkCreate { name, .. }) => {
                let fork = self.mapping.forks().by_name(name).cloned();
                ReplyData::Fork(fork.expect("the fork just created"))
            }
            _ => ReplyData::Done,
        };
        self.add_log_waiter(reply_to(a.id, a.internal), reply);
        true
    }

    /// Versions the vector being run has set aside room for.
    pub(super) fn kept_reserved(&self) -> u64 {
        self.ranges.active.as_ref().map_or(0, |a| a.kept_reserved)
    }

    /// A snapshot change's notes at `seq`.
    fn snapshot_notes(&self, seq: Seq, change: &SnapshotChange) -> Vec<Note> {
        match change {
            SnapshotChange::Create { name, wall_ns } => {
                let id = self.mapping.history().next_id();
                let mut notes = note::snapshot_create_notes(seq, id, LIVE_VOLUME, name);
                notes.push(Note::Clock {
                    seq,
                    wall_ns: *wall_ns,
                });
                // One atomic unit: a torn name never reaches replay.
                let note_count = notes.len() as u32;
                notes.insert(0, Note::VectorBegin { seq, note_count });
                notes
            }
            SnapshotChange::Delete { id } => vec![Note::SnapshotDelete { seq, id: *id }],
            SnapshotChange::ForkCreate {
                base,
                name,
                wall_ns,
            } => {
                let id = self.mapping.forks().next_id();
                let mut notes = note::fork_create_notes(seq, id, *base, name);
                notes.push(Note::Clock {
                    seq,
                    wall_ns: *wall_ns,
                });
                let note_count = notes.len() as u32;
                notes.insert(0, Note::VectorBegin { seq, note_count });
                notes
            }
            SnapshotChange::ForkDelete { id } => vec![Note::ForkDelete { seq, id: *id }],
            SnapshotChange::Revert { to, undo, wall_ns } => {
                let history = self.mapping.history();
                let id = history.next_id();
                let name = undo_name(&self.mapping, undo);
                let to_seq = history.by_id(*to).expect("checked").create_seq;
                let mut notes = note::snapshot_create_notes(seq, id, LIVE_VOLUME, &name);
                notes.push(Note::Clock {
                    seq,
                    wall_ns: *wall_ns,
                });
                notes.push(Note::Revert { seq, to_seq });
                let note_count = notes.len() as u32;
                notes.insert(0, Note::VectorBegin { seq, note_count });
                notes
            }
        }
    }

    /// Applies a snapshot change at `seq` (checked already).
    fn apply_snapshot(&mut self, seq: Seq, change: &SnapshotChange) {
        match change {
            SnapshotChange::Create { name, wall_ns } => {
                let id = self.mapping.history().next_id();
                self.mapping.snapshot_create(id, name, seq, *wall_ns);
                self.epoch = self.mapping.history().epoch();
                self.stats.snapshot_creates += 1;
            }
            SnapshotChange::Delete { id } => {
                self.mapping
                    .snapshot_delete(*id, seq)
                    .expect("snapshot checked before its notes");
                self.stats.snapshot_deletes += 1;
            }
            SnapshotChange::ForkCreate {
                base,
                name,
                wall_ns,
            } => {
                let id = self.mapping.forks().next_id();
                self.mapping.fork_create(id, name, *base, seq, *wall_ns);
                self.stats.fork_creates += 1;
            }
            SnapshotChange::ForkDelete { id } => {
                let fork = self.mapping.forks().by_id(*id).expect("fork checked");
                let region = (fork.lba_offset, fork.block_count);
                self.refuse_waiting_in(region, *id);
                let blocks = self
                    .mapping
                    .fork_delete(*id)
                    .expect("fork checked before its notes");
                self.stats.fork_deletes += 1;
                self.stats.fork_delete_blocks += blocks;
            }
            SnapshotChange::Revert { to, undo, wall_ns } => {
                let target = self.mapping.history().by_id(*to).expect("checked");
                let point = (target.create_seq, target.epoch);
                let id = self.mapping.history().next_id();
                let name = undo_name(&self.mapping, undo);
                self.mapping.snapshot_create(id, &name, seq, *wall_ns);
                self.epoch = self.mapping.history().epoch();
                // The changes take the seq after the undo snapshot's, so
                // it keeps every version they replace (docs/format.md §10).
                let revert_seq = self.take_seq();
                assert_eq!(revert_seq, seq + 1, "a revert's seq is reserved");
                let blocks = self
                    .mapping
                    .revert_to(point.0, point.1, revert_seq)
                    .expect("room checked before the notes");
                self.stats.snapshot_creates += 1;
                self.stats.snapshot_reverts += 1;
                self.stats.snapshot_revert_blocks += blocks;
            }
        }
    }

    /// Releases a step's worth of the versions deleted snapshots kept.
    pub(super) fn sweep_history(&mut self) {
        if self.mapping.history().sweeping() {
            let mut budget = RANGE_STEP_BLOCKS;
            self.stats.snapshot_versions_released += self.mapping.sweep_step(&mut budget);
        }
    }

    fn count_vector(&mut self, ops: &[RangeOp]) {
        self.stats.range_vectors += 1;
        for op in ops {
            let n = op.block_count();
            let s = &mut self.stats;
            match op {
                RangeOp::Clone { .. } => {
                    (s.range_clones, s.range_clone_blocks) =
                        (s.range_clones + 1, s.range_clone_blocks + n)
                }
                RangeOp::Move { .. } => {
                    (s.range_moves, s.range_move_blocks) =
                        (s.range_moves + 1, s.range_move_blocks + n)
                }
                RangeOp::Delete { .. } => {
                    (s.range_deletes, s.range_delete_blocks) =
                        (s.range_deletes + 1, s.range_delete_blocks + n)
                }
                RangeOp::Merge { .. } => {
                    (s.range_merges, s.range_merge_blocks) =
                        (s.range_merges + 1, s.range_merge_blocks + n)
                }
                RangeOp::SetAttribute { .. } => s.range_attribute_changes += 1,
            }
        }
    }
}
