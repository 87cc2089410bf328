//! The metadata log writer: a ring of dedicated zones holding note blocks and
//! checkpoint chunks, each block numbered by `log_seq`.
//!
//! Notes are grouped into blocks (group commit); a block is written when full
//! or when a flush forces it. Writes go at the write pointer in log order, so
//! "durable through log_seq L" is a prefix property the flush path waits on.
//! A ring zone is reused only when everything in it is older than the
//! checkpoint both superblock copies point at.
//!
//! Writes go to one ring zone at a time: the writer moves on only when
//! every write to the current zone has completed. A write that fails takes
//! its ring zone out of the ring (a media failure) or just ends it (a
//! host-side failure such as a controller reset's abort, after which the
//! blocks may or may not be on the media). Either way the failed write and
//! every later one to that zone, completed or not, are written again with
//! the same log_seqs and bytes at the start of the next zone, once nothing
//! is in flight (so the rewrite keeps log order). Recovery follows: where
//! the expected log_seq is missing it looks for a ring zone that starts
//! with a copy of a block it has read, or with the expected log_seq itself.

use crate::backend::ZoneId;
use crate::note::{LogBlock, Note};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A command the log wants issued.
#[derive(Debug, PartialEq, Eq)]
pub enum LogCommand {
    /// Write `blocks` (encoded) at `offset_blocks` of `zone`; the first has `first_log_seq`.
    Write {
        zone: ZoneId,
        offset_blocks: u64,
        first_log_seq: u64,
        blocks: Vec<Vec<u8>>,
    },
    /// Reset the next ring zone before the log moves into it.
    Reset { zone: ZoneId },
    /// Finish a ring zone the log ended early after a host-side failure:
    /// still open on the device, it would count against the open-zone limit.
    Finish { zone: ZoneId },
}

#[derive(Debug)]
pub struct MetaLog {
    ring: Vec<ZoneId>,
    cur: usize,
    wp_blocks: u64,
    zone_capacity_blocks: u64,
    block_size: usize,
    max_write_blocks: usize,
    next_log_seq: u64,
    pending: Vec<Note>,
    notes_per_block: usize,
    /// Highest log_seq written into each ring zone (None: nothing live).
    newest_in: Vec<Option<u64>>,
    staged: VecDeque<(u64, Vec<u8>)>,
    completed: BTreeSet<u64>,
    durable_next: u64,
    reset_in_flight: bool,
    reset_target: usize,
    /// A ring zone ended early, to finish before the log moves on.
    finish_due: Option<usize>,
    finish_in_flight: bool,
    /// Checkpoint id both superblock copies point at.
    committed_checkpoint: u64,
    failed: bool,
    /// Ring zones taken out after a failed write or reset.
    dead: Vec<bool>,
    /// [`Self::free_zones`], kept up to date where its inputs change (the
    /// committed checkpoint, a dead zone, the current zone): the FTL asks
    /// for it on every turn.
    free_zones: usize,
    /// Writes not yet durable as a prefix, by first log_seq: kept, completed
    /// or not, until every block before them is durable, so that a failed
    /// write and all after it can be written again elsewhere (a later write
    /// may complete before an earlier one fails). All are to the current
    /// ring zone.
    unsettled: BTreeMap<u64, Unsettled>,
    /// First log_seqs of writes staged again while still in flight: the
    /// writer leaves their zone only once they have completed, so that no
    /// completion meets the rewrite's entry of the same log_seq.
    superseded: BTreeSet<u64>,
}

#[derive(Debug)]
struct Unsettled {
    ring_index: usize,
    blocks: Vec<Vec<u8>>,
    completed: bool,
}

impl MetaLog {
    /// A log that continues at `(ring[cur], wp_blocks)` with `next_log_seq`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ring: Vec<ZoneId>,
        cur: usize,
        wp_blocks: u64,
        zone_capacity_blocks: u64,
        block_size: usize,
        max_write_blocks: usize,
        next_log_seq: u64,
        newest_in: Vec<Option<u64>>,
        committed_checkpoint: u64,
    ) -> MetaLog {
        assert!(!ring.is_empty() && cur < ring.len() && newest_in.len() == ring.len());
        assert!(wp_blocks <= zone_capacity_blocks && max_write_blocks > 0);
        let newest_in_len = newest_in.len();
        let mut log = MetaLog {
            notes_per_block: crate::note::notes_per_block(block_size),
            ring,
            cur,
            wp_blocks,
            zone_capacity_blocks,
            block_size,
            max_write_blocks,
            next_log_seq,
            pending: Vec::new(),
            newest_in,
            staged: VecDeque::new(),
            completed: BTreeSet::new(),
            durable_next: next_log_seq,
            reset_in_flight: false,
            reset_target: 0,
            finish_due: None,
            finish_in_flight: false,
            committed_checkpoint,
            failed: false,
            dead: vec![false; newest_in_len],
            unsettled: BTreeMap::new(),
            superseded: BTreeSet::new(),
            free_zones: 0,
        };
        log.recount_free_zones();
        log
    }

    pub fn push_note(&mut self, note: Note) {
        self.pending.push(note);
        if self.pending.len() >= self.notes_per_block {
            self.pack(false);
        }
    }

    /// Moves pending notes into blocks; `force` also packs a partial block.
    pub fn pack(&mut self, force: bool) {
        while self.pending.len() >= self.notes_per_block || (force && !self.pending.is_empty()) {
            let n = self.pending.len().min(self.notes_per_block);
            let notes: Vec<Note> = self.pending.drain(..n).collect();
            let log_seq = self.take_log_seq();
            let block = LogBlock::Notes { log_seq, notes }.encode(self.block_size);
            self.staged.push_back((log_seq, block));
        }
    }

    /// Reserves `n` consecutive log sequence numbers (checkpoint chunks).
    pub fn reserve_log_seqs(&mut self, n: u64) -> u64 {
        let first = self.next_log_seq;
        self.next_log_seq += n;
        first
    }

    /// Stages already-encoded blocks whose log_seqs were reserved in order.
    pub fn stage_encoded(&mut self, first_log_seq: u64, blocks: Vec<Vec<u8>>) {
        for (i, b) in blocks.into_iter().enumerate() {
            assert_eq!(b.len(), self.block_size);
            self.staged.push_back((first_log_seq + i as u64, b));
        }
    }

    fn take_log_seq(&mut self) -> u64 {
        self.reserve_log_seqs(1)
    }

    /// Whether log writes are in flight or staged.
    pub fn writing(&self) -> bool {
        !self.unsettled.is_empty() || !self.staged.is_empty()
    }

    /// Every block with a smaller log_seq is durable.
    pub fn durable_next(&self) -> u64 {
        self.durable_next
    }

    /// The log_seq the next block will get: a barrier for "all notes so far".
    pub fn next_log_seq(&self) -> u64 {
        self.next_log_seq
    }

    pub fn set_committed_checkpoint(&mut self, checkpoint_id: u64) {
        self.committed_checkpoint = checkpoint_id;
        self.recount_free_zones();
    }

    fn reclaimable(&self, i: usize) -> bool {
        !self.dead[i] && self.newest_in[i].is_none_or(|s| s < self.committed_checkpoint)
    }

    /// Takes ring zone `i` out (found read-only or offline at mount).
    pub fn mark_dead(&mut self, i: usize) {
        self.dead[i] = true;
        self.recount_free_zones();
        if i == self.cur {
            self.wp_blocks = self.zone_capacity_blocks;
        }
        if self.dead.iter().all(|&d| d) {
            self.failed = true;
        }
    }

    /// Ring zones the log can still fill before it must wait for a checkpoint.
    pub fn free_zones(&self) -> usize {
        debug_assert_eq!(self.free_zones, self.count_free_zones());
        self.free_zones
    }

    /// The ring zones other than the current one that are reclaimable. A
    /// write changes only the current zone's `newest_in`, which this leaves
    /// out; the other inputs call [`Self::recount_free_zones`].
    fn count_free_zones(&self) -> usize {
        (1..self.ring.len())
            .filter(|&k| self.reclaimable((self.cur + k) % self.ring.len()))
            .count()
    }

    fn recount_free_zones(&mut self) {
        self.free_zones = self.count_free_zones();
    }

    pub fn free_blocks(&self) -> u64 {
        self.free_zones() as u64 * self.zone_capacity_blocks
            + (self.zone_capacity_blocks - self.wp_blocks)
    }

    /// The next device command, if the log has work and room.
    pub fn next_command(&mut self) -> Option<LogCommand> {
        if self.failed || self.reset_in_flight || self.finish_in_flight || self.staged.is_empty() {
            return None;
        }
        if self.wp_blocks == self.zone_capacity_blocks || self.dead[self.cur] {
            if !self.unsettled.is_empty() || !self.superseded.is_empty() {
                return None; // one zone at a time: its writes complete first
            }
            if let Some(i) = self.finish_due.take() {
                self.finish_in_flight = true;
                return Some(LogCommand::Finish { zone: self.ring[i] });
            }
            let next = self.next_live(self.cur)?;
            if !self.reclaimable(next) {
                return None; // waits for a checkpoint to commit
            }
            self.reset_in_flight = true;
            self.reset_target = next;
            return Some(LogCommand::Reset {
                zone: self.ring[next],
            });
        }
        let room = (self.zone_capacity_blocks - self.wp_blocks) as usize;
        let n = self.staged.len().min(room).min(self.max_write_blocks);
        let first_log_seq = self.staged[0].0;
        let blocks: Vec<Vec<u8>> = self.staged.drain(..n).map(|(_, b)| b).collect();
        let unsettled = Unsettled {
            ring_index: self.cur,
            blocks: blocks.clone(),
            completed: false,
        };
        self.unsettled.insert(first_log_seq, unsettled);
        let cmd = LogCommand::Write {
            zone: self.ring[self.cur],
            offset_blocks: self.wp_blocks,
            first_log_seq,
            blocks,
        };
        self.wp_blocks += n as u64;
        let last = first_log_seq + n as u64 - 1;
        self.newest_in[self.cur] = Some(self.newest_in[self.cur].map_or(last, |s| s.max(last)));
        Some(cmd)
    }

    /// The next ring zone after `i` that is not dead.
    fn next_live(&self, i: usize) -> Option<usize> {
        (1..=self.ring.len())
            .map(|k| (i + k) % self.ring.len())
            .find(|&j| !self.dead[j] && j != i)
    }

    pub fn on_reset_done(&mut self) {
        assert!(self.reset_in_flight);
        self.reset_in_flight = false;
        self.cur = self.reset_target;
        self.wp_blocks = 0;
        self.newest_in[self.cur] = None;
        self.recount_free_zones();
    }

    /// The finish of a zone ended early completed. A failure changes nothing
    /// the log relies on: the zone is reset before it is written again.
    pub fn on_finish_done(&mut self) {
        assert!(self.finish_in_flight);
        self.finish_in_flight = false;
    }

    /// The ring zone refused its reset: take it out and try the next.
    pub fn on_reset_failed(&mut self) {
        assert!(self.reset_in_flight);
        self.reset_in_flight = false;
        self.mark_dead(self.reset_target);
        self.check_room();
    }

    pub fn on_write_done(&mut self, first_log_seq: u64, count: u64) {
        if self.superseded.remove(&first_log_seq) {
            return; // staged again after an earlier write failed
        }
        let u = self
            .unsettled
            .get_mut(&first_log_seq)
            .expect("log write in flight");
        assert_eq!(u.blocks.len() as u64, count);
        u.completed = true;
        for s in first_log_seq..first_log_seq + count {
            assert!(
                s >= self.durable_next && !self.completed.contains(&s),
                "log block {s} completed twice"
            );
            self.completed.insert(s);
        }
        while self.completed.remove(&self.durable_next) {
            self.durable_next += 1;
        }
        while let Some(e) = self.unsettled.first_entry() {
            if *e.key() + e.get().blocks.len() as u64 > self.durable_next {
                break;
            }
            e.remove();
        }
    }

    /// Whether the log has blocks to write but no zone to put them in and
    /// no way to get one: every other live ring zone still holds the
    /// committed checkpoint or later blocks. Only a checkpoint commit frees
    /// space, and a checkpoint needs log space: a dead end.
    pub fn blocked(&self) -> bool {
        if self.failed
            || self.staged.is_empty()
            || self.reset_in_flight
            || self.finish_in_flight
            || self.finish_due.is_some()
            || !self.unsettled.is_empty()
            || !self.superseded.is_empty()
        {
            return false;
        }
        let cur_full = self.wp_blocks == self.zone_capacity_blocks || self.dead[self.cur];
        cur_full
            && self
                .next_live(self.cur)
                .is_none_or(|next| !self.reclaimable(next))
    }

    /// A write failed: it and every later write to its zone, completed or
    /// not, are staged again in log order, for the start of the next zone.
    /// The zone ends here and is finished first; a media failure (`media`)
    /// also takes it out of the ring; after a host-side one it is reset
    /// when the ring comes round. The completions of writes staged again find nothing
    /// to do.
    pub fn on_write_failed(&mut self, first_log_seq: u64, media: bool) {
        if self.superseded.remove(&first_log_seq) {
            return;
        }
        let Some(zone_index) = self.unsettled.get(&first_log_seq).map(|u| u.ring_index) else {
            return;
        };
        let again: Vec<u64> = self
            .unsettled
            .range(first_log_seq..)
            .map(|(&s, _)| s)
            .collect();
        for s in again {
            let u = self.unsettled.remove(&s).expect("unsettled");
            if !u.completed && s != first_log_seq {
                self.superseded.insert(s);
            }
            assert_eq!(
                u.ring_index, zone_index,
                "log writes in flight to two zones"
            );
            for (k, b) in u.blocks.into_iter().enumerate() {
                let seq = s + k as u64;
                self.completed.remove(&seq);
                self.staged.push_back((seq, b));
            }
        }
        self.staged.make_contiguous().sort_by_key(|&(s, _)| s);
        if media {
            self.mark_dead(zone_index);
        }
        if zone_index == self.cur {
            // Finished before the log moves on, so it does not hold one of
            // the device's open zones (a write failure may leave it open).
            self.wp_blocks = self.zone_capacity_blocks;
            self.finish_due = Some(zone_index);
        }
        self.check_room();
    }

    /// Fewer than two live ring zones cannot hold a checkpoint and notes.
    fn check_room(&mut self) {
        if self.dead.iter().filter(|&&d| !d).count() < 2 {
            self.failed = true;
        }
    }

    pub fn failed(&self) -> bool {
        self.failed
    }

    pub fn debug_state(&self) -> String {
        format!(
            "cur {} wp {} next_log_seq {} durable_next {} staged {} pending {} free_zones {} reset_in_flight {} committed {} newest {:?}",
            self.cur,
            self.wp_blocks,
            self.next_log_seq,
            self.durable_next,
            self.staged.len(),
            self.pending.len(),
            self.free_zones(),
            self.reset_in_flight,
            self.committed_checkpoint,
            self.newest_in
        )
    }

    /// A log write or reset failed: the log stops; the volume goes read-only.
    pub fn on_failure(&mut self) {
        self.failed = true;
    }
}
