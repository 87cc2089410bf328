//! The metadata log writer: a ring of dedicated zones holding note blocks and
//! checkpoint chunks, each block numbered by `log_seq`.
//!
//! Notes are grouped into blocks (group commit); a block is written when full
//! or when a flush forces it. Writes go at the write pointer in log order, so
//! "durable through log_seq L" is a prefix property the flush path waits on.
//! A ring zone is reused only when everything in it is older than the
//! checkpoint both superblock copies point at. The next ring zone is reset
//! as soon as that holds, while the log still writes the current one, so
//! the move finds it empty: a log write (a FUA write's note) never waits
//! for an erase on its way into a new zone.
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
    /// The reset in flight is one ahead of time: its zone is not entered
    /// when it completes but kept empty for the move.
    reset_ahead: bool,
    /// A ring zone reset ahead of time and not yet entered: the move to it
    /// needs no reset.
    erased_ahead: Option<usize>,
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
            reset_ahead: false,
            erased_ahead: None,
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
        if self.erased_ahead == Some(i) {
            self.erased_ahead = None;
        }
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
    /// `reset_ahead_waits`: the reset ahead of time of the zone
    /// [`Self::reset_ahead_zone`] names waits for now (the reset at the
    /// move itself never does).
    pub fn next_command(&mut self, reset_ahead_waits: bool) -> Option<LogCommand> {
        if self.failed || self.finish_in_flight || (self.reset_in_flight && !self.reset_ahead) {
            return None;
        }
        if let Some(cmd) = self.reset_ahead_command(reset_ahead_waits) {
            return Some(cmd);
        }
        if self.staged.is_empty() {
            return None;
        }
        if self.wp_blocks == self.zone_capacity_blocks || self.dead[self.cur] {
            if self.reset_in_flight {
                return None; // the next zone's reset ahead completes first
            }
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
            if self.erased_ahead == Some(next) {
                self.enter(next);
                return self.next_command(reset_ahead_waits);
            }
            return Some(self.reset(next, false));
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

    /// The reset of the next ring zone ahead of time, once nothing
    /// recovery reads is in it (the condition the move itself checks; the
    /// committed checkpoint only grows, so it still holds at the move):
    /// the erase then runs while the log writes the current zone.
    fn reset_ahead_command(&mut self, waits: bool) -> Option<LogCommand> {
        let next = self.reset_ahead_due()?;
        (!waits).then(|| self.reset(next, true))
    }

    /// The ring zone a reset ahead of time is due for now, if any.
    pub fn reset_ahead_zone(&self) -> Option<ZoneId> {
        self.reset_ahead_due().map(|i| self.ring[i])
    }

    fn reset_ahead_due(&self) -> Option<usize> {
        if self.reset_in_flight {
            return None;
        }
        let next = self.next_live(self.cur)?;
        (self.erased_ahead != Some(next) && self.reclaimable(next)).then_some(next)
    }

    /// The ring zone whose erase is due, ahead of time or at the move
    /// (or in flight): the urgent lane keeps off its zone group.
    pub fn erase_due(&self) -> Option<ZoneId> {
        if self.reset_in_flight {
            return Some(self.ring[self.reset_target]);
        }
        self.reset_ahead_due().map(|i| self.ring[i])
    }

    fn reset(&mut self, i: usize, ahead: bool) -> LogCommand {
        self.reset_in_flight = true;
        self.reset_target = i;
        self.reset_ahead = ahead;
        LogCommand::Reset { zone: self.ring[i] }
    }

    /// The log moves into ring zone `i`, which is empty.
    fn enter(&mut self, i: usize) {
        self.cur = i;
        self.wp_blocks = 0;
        self.newest_in[i] = None;
        self.erased_ahead = None;
        self.recount_free_zones();
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
        if self.reset_ahead {
            self.erased_ahead = Some(self.reset_target);
        } else {
            self.enter(self.reset_target);
        }
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
            "cur {} wp {} next_log_seq {} durable_next {} staged {} pending {} free_zones {} reset_in_flight {} (ahead {}) erased_ahead {:?} committed {} newest {:?}",
            self.cur,
            self.wp_blocks,
            self.next_log_seq,
            self.durable_next,
            self.staged.len(),
            self.pending.len(),
            self.free_zones(),
            self.reset_in_flight,
            self.reset_ahead,
            self.erased_ahead,
            self.committed_checkpoint,
            self.newest_in
        )
    }

    /// A log write or reset failed: the log stops; the volume goes read-only.
    pub fn on_failure(&mut self) {
        self.failed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: u64 = 4;
    const BS: usize = 512;

    /// A 3-zone ring (zones 10, 11, 12) of 4-block zones, empty, written
    /// from zone 10; ring zones with a log_seq below `committed` are free.
    fn ring(committed: u64, newest_in: Vec<Option<u64>>) -> MetaLog {
        MetaLog::new(
            vec![10, 11, 12],
            0,
            0,
            CAP,
            BS,
            2,
            100,
            newest_in,
            committed,
        )
    }

    fn stage_one(log: &mut MetaLog) {
        let s = log.reserve_log_seqs(1);
        log.stage_encoded(s, vec![vec![0u8; BS]]);
    }

    /// Issues the log's commands and completes each at once; returns the
    /// resets issued as (zone, whether the log's current zone was full:
    /// a log write waited for that erase).
    fn drain(log: &mut MetaLog, erased: &mut BTreeSet<ZoneId>, waits: bool) -> Vec<(ZoneId, bool)> {
        let mut resets = Vec::new();
        while let Some(cmd) = log.next_command(waits) {
            match cmd {
                LogCommand::Write {
                    zone,
                    offset_blocks,
                    first_log_seq,
                    blocks,
                } => {
                    if offset_blocks == 0 {
                        assert!(erased.remove(&zone), "zone {zone} written unerased");
                    }
                    log.on_write_done(first_log_seq, blocks.len() as u64);
                }
                LogCommand::Reset { zone } => {
                    resets.push((zone, log.wp_blocks == CAP));
                    erased.insert(zone);
                    log.on_reset_done();
                }
                LogCommand::Finish { .. } => unreachable!("no write fails here"),
            }
        }
        resets
    }

    #[test]
    fn the_next_ring_zone_is_erased_before_the_log_moves_there() {
        let mut log = ring(u64::MAX, vec![None; 3]);
        let mut erased = BTreeSet::from([10]);
        let mut resets = Vec::new();
        for _ in 0..3 * 3 * CAP {
            stage_one(&mut log);
            resets.extend(drain(&mut log, &mut erased, false));
        }
        // Each move (8 in three laps) found its zone erased ahead.
        assert_eq!(resets.len(), 9);
        assert!(resets.iter().all(|&(_, cur_full)| !cur_full), "{resets:?}");
    }

    #[test]
    fn a_reset_ahead_waits_for_the_checkpoint_and_else_the_move_resets() {
        // Zone 11 holds log_seq 50: not free until checkpoint 51 commits.
        let mut log = ring(40, vec![None, Some(50), None]);
        let mut erased = BTreeSet::from([10]);
        stage_one(&mut log);
        assert!(drain(&mut log, &mut erased, false).is_empty());
        log.set_committed_checkpoint(51);
        assert_eq!(drain(&mut log, &mut erased, false), vec![(11, false)]);
        // Zone 12's reset ahead keeps waiting: the move resets it itself.
        for _ in 0..CAP {
            stage_one(&mut log);
        }
        let resets = drain(&mut log, &mut erased, true);
        assert_eq!(log.ring[log.cur], 11);
        for _ in 0..CAP {
            stage_one(&mut log);
        }
        let more = drain(&mut log, &mut erased, true);
        assert!(resets.is_empty());
        assert_eq!(more, vec![(12, true)]);
        assert_eq!(log.ring[log.cur], 12);
    }
}
