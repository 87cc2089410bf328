//! Host writes, trims and flushes up to the write buffer: admission, and
//! the waiters a flush holds until data, log and device are durable.

use super::ckpt::CkptState;
use super::request::{Reply, ReplyData};
use super::{Ftl, Op, ReplyTo};
use crate::addr::{Lba, Ppa};
use crate::backend::Command;
use crate::buffer::{BlockData, SlotId, Temp};
use crate::error::IoError;
use crate::note::Note;
use crate::tag;
use std::collections::VecDeque;

/// What the space account says of a write (`Ftl::space_for`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Room {
    Fits,
    /// The live blocks fit, but not beside the dead blocks GC cannot
    /// collect until the client acknowledges moves.
    HeldDead,
    /// The live blocks do not fit.
    Full,
}

/// What became of a waiting write offered to the buffer.
enum Admission {
    /// Admitted, answered or held behind a vector: it left the queue.
    Left,
    /// It waits for free slots.
    NoSlots(WaitingWrite),
    /// It waits for space being given back (a deleted snapshot's versions,
    /// a window point).
    NoSpace(WaitingWrite),
}

/// The share of the write buffer kept for FUA writes (1/64 of it): a
/// buffered write leaves that many slots free while others are in use, so
/// a FUA write finds room even while buffered writes wait for slots.
const FUA_KEPT_SHARE: u32 = 64;

#[derive(Debug)]
enum FlushStage {
    /// A FUA write: waits for its own blocks, each (slot, ticket), to leave
    /// the buffer (in the order they leave it, mostly).
    Blocks {
        pending: VecDeque<(SlotId, u64)>,
    },
    Data {
        ticket_barrier: u64,
    },
    Log {
        log_barrier: u64,
    },
    Device,
}

/// What admission looks up of each block of a write: whether the buffer
/// holds a version of it, where its version on media is, and whether it
/// takes a physical block without freeing one.
pub(super) type AdmitFact = (bool, Option<Ppa>, bool);

/// A host write accepted but not yet in the write buffer (no room yet).
#[derive(Debug)]
pub(super) struct WaitingWrite {
    pub(super) id: u64,
    pub(super) lba: Lba,
    data: Vec<u8>,
    /// The data CRC of each block, if the caller took them.
    crcs: Option<Vec<u32>>,
    fua: bool,
}

impl WaitingWrite {
    pub(super) fn block_count(&self, block_size: usize) -> u64 {
        (self.data.len() / block_size) as u64
    }
}

#[derive(Debug)]
pub(super) struct FlushWait {
    pub(super) to: ReplyTo,
    stage: FlushStage,
    /// What the reply carries once durable.
    reply: ReplyData,
}

impl Ftl {
    /// `crcs`: the data CRC of each block, if the caller took them.
    pub(super) fn start_write(
        &mut self,
        id: u64,
        lba: Lba,
        data: Vec<u8>,
        crcs: Option<Vec<u32>>,
        fua: bool,
    ) -> Result<Option<ReplyData>, IoError> {
        let bs = self.block_size();
        tag::check_whole_blocks(data.len(), bs)?;
        let count = (data.len() / bs) as u64;
        self.check_range(lba, count)?;
        if self.read_only {
            return Err(self.refusal());
        }
        if let Some(at) = self.attrs.first_immutable(lba, count) {
            return Err(IoError::Immutable { lba: at });
        }
        self.waiting_writes.push_back(WaitingWrite {
            id,
            lba,
            data,
            crcs,
            fua,
        });
        self.admit_writes();
        Ok(None)
    }

    /// Moves waiting writes into the buffer, in arrival order, while it has
    /// room; then FUA writes that may pass those waiting for slots.
    pub(super) fn admit_writes(&mut self) {
        // Each block's buffer slot and mapping, looked up once per request.
        let mut facts = std::mem::take(&mut self.admit_facts);
        let mut scratch = std::mem::take(&mut self.admit_crcs);
        while let Some(w) = self.waiting_writes.pop_front() {
            match self.admit_one(w, &mut facts, &mut scratch) {
                Admission::Left => {}
                Admission::NoSlots(w) => {
                    self.waiting_writes.push_front(w);
                    self.admit_fua_ahead(&mut facts, &mut scratch);
                    break;
                }
                Admission::NoSpace(w) => {
                    self.waiting_writes.push_front(w);
                    break;
                }
            }
        }
        self.admit_facts = facts;
        self.admit_crcs = scratch;
    }

    /// Admits the FUA writes waiting behind a write that waits for slots,
    /// in arrival order, each only if no write ahead of it touches its
    /// blocks (NBD orders no requests in flight together; the newest
    /// admitted of one block stays the newest): they take the slots kept
    /// for them, so a FUA write never waits for the buffer to drain.
    fn admit_fua_ahead(&mut self, facts: &mut Vec<AdmitFact>, scratch: &mut Vec<u32>) {
        let bs = self.block_size();
        let mut i = 1;
        while i < self.waiting_writes.len() {
            let w = &self.waiting_writes[i];
            let (lba, end) = (w.lba, w.lba + w.block_count(bs));
            let overlaps = |o: &WaitingWrite| o.lba < end && lba < o.lba + o.block_count(bs);
            if !w.fua || self.waiting_writes.range(..i).any(overlaps) {
                i += 1;
                continue;
            }
            let w = self.waiting_writes.remove(i).expect("index in range");
            match self.admit_one(w, facts, scratch) {
                Admission::Left => {}
                Admission::NoSlots(w) | Admission::NoSpace(w) => {
                    self.waiting_writes.insert(i, w);
                    return;
                }
            }
        }
    }

    /// Slots a buffered (not FUA) write must leave free: the FUA writes'
    /// share, unless the buffer is empty (a write as large as the buffer
    /// must fit).
    fn fua_kept_slots(&self) -> usize {
        if self.buffer.used_slots() == 0 {
            0
        } else {
            (self.cfg.write_buffer_blocks / FUA_KEPT_SHARE) as usize
        }
    }

    /// Offers one waiting write to the buffer.
    fn admit_one(
        &mut self,
        w: WaitingWrite,
        facts: &mut Vec<AdmitFact>,
        scratch: &mut Vec<u32>,
    ) -> Admission {
        let bs = self.block_size();
        let (id, lba, fua) = (w.id, w.lba, w.fua);
        let count = (w.data.len() / bs) as u64;
        if self.range_blocks(lba, count) {
            // Behind a range-operation vector that touches its blocks.
            self.hold(super::range::Held::Write(w));
            return Admission::Left;
        }
        if let Err(e) = self.fork_lives(lba, count) {
            // Its fork was deleted while it waited.
            self.replies.push_back(Reply { id, result: Err(e) });
            return Admission::Left;
        }
        // A vector it waited behind may have made the range immutable.
        if let Some(at) = self.attrs.first_immutable(lba, count) {
            self.replies.push_back(Reply {
                id,
                result: Err(IoError::Immutable { lba: at }),
            });
            return Admission::Left;
        }
        facts.clear();
        let (mut needed, mut new_blocks) = (0usize, 0u64);
        for l in lba..lba + count {
            let buffered = self.buffer.latest_slot(l);
            let (mapped, takes_block) = self.mapping.write_facts(l);
            let new = buffered.is_none() && takes_block;
            needed += self.buffer.slots_needed(buffered);
            new_blocks += u64::from(new);
            facts.push((buffered.is_some(), mapped, new));
        }
        let kept = if fua { 0 } else { self.fua_kept_slots() };
        if needed + kept > self.buffer.free_slots() {
            assert!(
                count <= u64::from(self.cfg.write_buffer_blocks) || self.buffer.used_slots() > 0
            );
            return Admission::NoSlots(w);
        }
        if let Err(e) = self.room_for_write(count, new_blocks) {
            let space = matches!(e, IoError::SnapshotSpace | IoError::NoSpace);
            if space && self.mapping.history().sweeping() {
                // A deleted snapshot's versions are being released: it
                // waits for the space they give back.
                return Admission::NoSpace(w);
            }
            if e == IoError::SnapshotSpace && self.window_gives_way() {
                // It waits while a window point is dropped.
                return Admission::NoSpace(w);
            }
            self.replies.push_back(Reply { id, result: Err(e) });
            return Admission::Left;
        }
        if lba >= self.layout.logical_blocks {
            if let Err(e) = self.room_for_fork_leaves(lba, facts) {
                self.replies.push_back(Reply { id, result: Err(e) });
                return Admission::Left;
            }
        }
        let WaitingWrite { data, crcs, .. } = w;
        let crcs = match &crcs {
            Some(given) => given.as_slice(),
            None => {
                // Taken now, while the bytes just received are in cache.
                scratch.resize(count as usize, 0);
                tag::data_crcs(&data, bs, scratch);
                scratch.as_slice()
            }
        };
        assert_eq!(crcs.len() as u64, count);
        // A FUA write's blocks, to wait for (none kept otherwise).
        let mut fua_blocks = VecDeque::new();
        let mut buffer_block = |ftl: &mut Ftl, i: usize, block: BlockData| {
            let s = ftl.buffer_block(lba + i as u64, block, crcs[i], facts[i], count, fua);
            if fua {
                fua_blocks.push_back((s, ftl.buffer.ticket(s)));
            }
        };
        if count == 1 {
            buffer_block(self, 0, data.into()); // the request's own buffer, no copy
        } else if self.buffer.may_share(count as usize) {
            // Windows into the request's buffer, no copy.
            let blocks = self.buffer.share_blocks(data, bs);
            for (i, block) in blocks.into_iter().enumerate() {
                buffer_block(self, i, block);
            }
        } else {
            for (i, chunk) in data.chunks_exact(bs).enumerate() {
                let block = self.buffer.block_copy(chunk);
                buffer_block(self, i, block.into());
            }
        }
        self.stats.host_write_blocks += count;
        if fua {
            self.flushes.push(FlushWait {
                to: ReplyTo::Caller(id),
                stage: FlushStage::Blocks {
                    pending: fua_blocks,
                },
                reply: ReplyData::Done,
            });
        } else {
            self.replies.push_back(Reply {
                id,
                result: Ok(ReplyData::Done),
            });
        }
        Admission::Left
    }

    /// Whether the media and the snapshot books have room for a write of
    /// `count` blocks, `new_blocks` of which take a block without freeing
    /// one. While a snapshot is live every buffered block may keep a
    /// version when it lands, so the books must hold them all.
    fn room_for_write(&self, count: u64, new_blocks: u64) -> Result<(), IoError> {
        let keeps = self.mapping.history().keeps_versions();
        let kept_at_most = self.buffer.used_slots() as u64 + count;
        if keeps && self.history_room() < kept_at_most {
            return Err(IoError::SnapshotSpace);
        }
        if self.space_for(new_blocks, keeps) != Room::Fits {
            return Err(if keeps {
                IoError::SnapshotSpace
            } else {
                IoError::NoSpace
            });
        }
        Ok(())
    }

    /// Whether `new_blocks` more blocks fit. The live blocks, with the
    /// buffered writes of new LBAs and the plain nameless writes admitted,
    /// stay within the logical size (kept versions, `keeps`, may use the
    /// room it leaves on the media). An overwrite's new block is not
    /// counted (it frees the old one when it lands), as a buffered
    /// overwrite of a mapped LBA is not: the GC reserve holds both until
    /// then. With them, the dead blocks GC cannot collect now (nameless
    /// ones behind unacknowledged moves, `nameless_dead_blocks`) stay
    /// within the media's room less [`super::KEPT_SLACK_ZONES`] zones, so
    /// GC still finds dead blocks to collect: those wait on the client,
    /// not on GC, so they take the room the logical size leaves before
    /// they take the logical size's own.
    pub(super) fn space_for(&self, new_blocks: u64, keeps: bool) -> Room {
        let slack = super::KEPT_SLACK_ZONES * self.data_cap();
        let media = self
            .max_mapped_blocks
            .max(self.usable_blocks.saturating_sub(slack));
        let limit = if keeps { media } else { self.max_mapped_blocks };
        let live = self.mapping.live_blocks() + self.buffered_new + new_blocks;
        let live = live + self.nameless.pending_new_blocks();
        if live > limit {
            Room::Full
        } else if live + self.nameless_dead_blocks() > media {
            Room::HeldDead
        } else {
            Room::Fits
        }
    }

    /// A request past the volume lies in a live fork (it was checked at
    /// its start; a fork delete may have run while it waited).
    pub(super) fn fork_lives(&self, lba: Lba, count: u64) -> Result<(), IoError> {
        let past = lba >= self.layout.logical_blocks;
        if past && !self.mapping.forks().holds_range(lba, count) {
            return Err(IoError::OutOfRange {
                lba,
                block_count: count,
                logical_blocks: self.layout.logical_blocks,
            });
        }
        Ok(())
    }

    /// Whether the next checkpoint has room for the map leaves a fork write
    /// at `lba` (its blocks' admission `facts`) may take; takes them.
    fn room_for_fork_leaves(&mut self, lba: Lba, facts: &[AdmitFact]) -> Result<(), IoError> {
        if self.buffer.used_slots() == 0 {
            self.fork_leaves_pending.clear();
        }
        let leaf_blocks = crate::checkpoint::LEAF_ENTRIES as u64;
        let mut leaves: Vec<u64> = (lba..)
            .zip(facts)
            .filter(|&(l, &(_, _, new))| new && self.mapping.takes_leaf(l))
            .map(|(l, _)| l / leaf_blocks)
            .filter(|leaf| !self.fork_leaves_pending.contains(leaf))
            .collect();
        leaves.dedup();
        let bytes = (crate::checkpoint::LEAF_BYTES as u64 + 4) * leaves.len() as u64;
        if bytes > 0 && bytes > self.checkpoint_room_bytes() {
            return Err(crate::fork::ForkError::MapFull.into());
        }
        self.fork_leaves_pending.extend(leaves);
        Ok(())
    }

    /// Buffers one block of an admitted write of `request_blocks` and its
    /// data CRC, urgent if the write is `fua`; `(buffered, mapped,
    /// is_new)`: whether the buffer holds a version of it, where its
    /// version on media is, and whether it will take a physical block
    /// without freeing one, as looked up at admission. Returns its slot.
    fn buffer_block(
        &mut self,
        lba: Lba,
        block: BlockData,
        data_crc: u32,
        (buffered, mapped, is_new): AdmitFact,
        request_blocks: u64,
        fua: bool,
    ) -> SlotId {
        let temp = self.temperature(buffered, mapped, request_blocks);
        let s = self.buffer.insert(lba, block, data_crc, is_new, temp, fua);
        self.host_clock += 1;
        self.stats.host_hot_blocks += u64::from(temp == Temp::Hot);
        self.buffered_new += u64::from(is_new);
        s
    }

    /// A trim or write-zeroes: applied now, or held behind a range-operation
    /// vector that touches its blocks.
    pub(super) fn start_trim(
        &mut self,
        id: u64,
        lba: Lba,
        block_count: u32,
        zeroes: bool,
        fua: bool,
    ) -> Result<Option<ReplyData>, IoError> {
        self.check_range(lba, u64::from(block_count))?;
        if self.read_only {
            return Err(self.refusal());
        }
        if let Some(at) = self.attrs.first_immutable(lba, u64::from(block_count)) {
            return Err(IoError::Immutable { lba: at });
        }
        if self.range_blocks(lba, u64::from(block_count)) {
            self.hold(super::range::Held::Trim {
                id,
                lba,
                block_count,
                zeroes,
                fua,
            });
            return Ok(None);
        }
        self.apply_trim(lba, block_count, zeroes)?;
        if fua {
            self.add_flush(id);
            return Ok(None);
        }
        Ok(Some(ReplyData::Done))
    }

    /// Answers a trim released from behind a vector.
    pub(super) fn answer_trim(&mut self, id: u64, result: Result<(), IoError>, fua: bool) {
        match result {
            Ok(()) if fua => self.add_flush(id),
            Ok(()) => self.replies.push_back(Reply {
                id,
                result: Ok(ReplyData::Done),
            }),
            Err(e) => self.replies.push_back(Reply { id, result: Err(e) }),
        }
    }

    pub(super) fn apply_trim(
        &mut self,
        lba: Lba,
        block_count: u32,
        zeroes: bool,
    ) -> Result<(), IoError> {
        if self.read_only {
            return Err(self.refusal());
        }
        self.fork_lives(lba, u64::from(block_count))?;
        if let Some(at) = self.attrs.first_immutable(lba, u64::from(block_count)) {
            return Err(IoError::Immutable { lba: at });
        }
        if self.mapping.history().keeps_versions() {
            // Only blocks whose version a snapshot needs keep one (a
            // range written since the newest snapshot trims for free);
            // every buffered block may keep one when it lands.
            let end = lba + u64::from(block_count);
            let kept = (lba..end)
                .filter(|&l| self.mapping.keeps_on_change(l))
                .count() as u64;
            if self.history_room() < self.buffer.used_slots() as u64 + kept {
                return Err(IoError::SnapshotSpace);
            }
        }
        let seq = self.take_seq();
        for l in lba..lba + u64::from(block_count) {
            if self.buffer.discard(l) {
                self.buffered_new -= 1;
            }
            self.mapping.unmap(l, seq);
        }
        self.log.push_note(Note::Trim {
            seq,
            lba,
            block_count: u64::from(block_count),
        });
        if zeroes {
            self.stats.host_zero_blocks += u64::from(block_count);
        } else {
            self.stats.host_trim_blocks += u64::from(block_count);
        }
        Ok(())
    }

    pub(super) fn add_flush(&mut self, id: u64) {
        self.add_flush_for(ReplyTo::Caller(id));
    }

    /// A flush answered to `to` once the writes buffered before it, the
    /// log and the device are durable.
    pub(super) fn add_flush_for(&mut self, to: ReplyTo) {
        let ticket_barrier = self.buffer.next_ticket();
        self.flushes.push(FlushWait {
            to,
            stage: FlushStage::Data { ticket_barrier },
            reply: ReplyData::Done,
        });
    }

    /// Whether something waits for the buffered writes, the log or the
    /// device (not counting FUA writes: they wait for urgent blocks only,
    /// which go out padded anyway).
    pub(super) fn host_flush_waiting(&self) -> bool {
        let fua = |f: &FlushWait| matches!(f.stage, FlushStage::Blocks { .. });
        !self.flushes.iter().all(fua)
            || matches!(self.ckpt, CkptState::Draining)
            || self.range_draining()
    }

    /// A range-operation vector's reply: once the log is durable through its
    /// notes and a device flush after them completed. Such waiters pack
    /// their log block only while no log write is in flight, so at depth
    /// the vectors applied meanwhile share the next block (group commit).
    pub(super) fn add_log_waiter(&mut self, to: ReplyTo, reply: ReplyData) {
        self.flushes.push(FlushWait {
            to,
            stage: FlushStage::Log {
                log_barrier: u64::MAX,
            },
            reply,
        });
    }

    pub(super) fn next_flush_command(&mut self) -> Option<(Op, Command)> {
        if !self
            .flushes
            .iter()
            .any(|f| matches!(f.stage, FlushStage::Device))
        {
            return None;
        }
        let (ready, waiting) = std::mem::take(&mut self.flushes)
            .into_iter()
            .partition(|f| matches!(f.stage, FlushStage::Device));
        self.flushes = waiting;
        let waiters = ready
            .into_iter()
            .map(|f: FlushWait| (f.to, f.reply))
            .collect();
        self.stats.flushes += 1;
        Some((Op::HostFlush { waiters }, Command::Flush))
    }

    /// Moves flush waiters through data → log → device stages.
    pub(super) fn advance_flushes(&mut self) {
        let mut need_pack = false;
        for f in &mut self.flushes {
            let drained = match &mut f.stage {
                FlushStage::Data { ticket_barrier } => self.buffer.drained_before(*ticket_barrier),
                FlushStage::Blocks { pending } => {
                    while let Some(&(s, ticket)) = pending.front() {
                        if self.buffer.holds(s, ticket) {
                            break;
                        }
                        pending.pop_front();
                    }
                    pending.is_empty()
                }
                _ => false,
            };
            if drained {
                need_pack = true;
                f.stage = FlushStage::Log {
                    log_barrier: u64::MAX,
                };
            }
        }
        let unpacked = |f: &FlushWait| {
            matches!(
                f.stage,
                FlushStage::Log {
                    log_barrier: u64::MAX
                }
            )
        };
        if !need_pack
            && !self.log.writing()
            && self.flushes.iter().any(unpacked)
            && !self.checkpoint_held()
        {
            need_pack = true;
            self.stats.range_commits += 1;
        }
        // (A held checkpoint keeps the log's room: the flushes wait for it.)
        if need_pack && !self.checkpoint_held() {
            self.log.pack(true);
            let barrier = self.log.next_log_seq();
            for f in &mut self.flushes {
                if let FlushStage::Log { log_barrier } = &mut f.stage {
                    if *log_barrier == u64::MAX {
                        *log_barrier = barrier;
                    }
                }
            }
        }
        // A read-only core has already failed every waiter (`fail_waiters`).
        let durable = self.log.durable_next();
        for f in &mut self.flushes {
            if let FlushStage::Log { log_barrier } = f.stage {
                if durable >= log_barrier {
                    f.stage = FlushStage::Device;
                }
            }
        }
    }
}
