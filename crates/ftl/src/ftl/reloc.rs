//! Relocation: garbage collection, static wear leveling and zone
//! retirement, from victim choice through copying to the victim's reset.

use super::lane::Lane;
use super::migrate::VictimMdStep;
use super::read::READ_ATTEMPTS;
use super::{Ftl, Op};
use crate::addr::{Lba, Ppa, Seq};
use crate::backend::{Command, DeviceError, Outcome, Payload, ReadPriority, ZoneId};
use crate::buffer::{BlockData, Temp};
use crate::mapping::Owner;
use crate::note::Note;
use crate::shared::SharedId;
use crate::superblock::TagMode;
use crate::tag::{Tag, TagKind, TAG_BYTES};
use std::collections::{BTreeSet, VecDeque};

#[derive(Debug)]
pub(super) struct RelocItem {
    /// Who the block belongs to: the entry GC updates once it is copied.
    owner: Owner,
    /// The LBA its tag names (kept on the copy): the owner's, or, for a
    /// shared block, its origin's (`NO_LBA` in band, where no tag is
    /// written and the summary names none).
    tag_lba: Lba,
    src: Ppa,
    /// The block's window into the GC read's buffer.
    data: BlockData,
    seq: Seq,
    crc: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum JobPurpose {
    Gc,
    StaticWl,
    Retire,
}

#[derive(Debug)]
pub(super) enum JobPhase {
    /// Tags in band: reading the victim's summary, a part at a time
    /// (`issued` while a part is on its way; the parts read so far are in
    /// `GcJob::summary`).
    Summary {
        issued: bool,
    },
    Copying,
    /// The ZoneReset/ZoneRetire note is packed; waits until the log is durable through `log_barrier`.
    Noting {
        log_barrier: u64,
    },
    /// Waits for host reads of the victim to finish, then flushes the device
    /// so the relocated copies are durable before the originals go.
    ReadyToFlush,
    Flushing,
    /// Flushed; the clock then (`Ftl::now_ns`), for how long a reset may
    /// wait for urgent appends (`FtlConfig::gc_reset_yields_to_urgent`);
    /// whether it has waited (`FtlStats::gc_resets_yielded`).
    ReadyToReset {
        since_ns: u64,
        yielded: bool,
    },
    Resetting,
}

#[derive(Debug)]
pub(super) struct GcJob {
    pub(super) victim: ZoneId,
    pub(super) purpose: JobPurpose,
    scan_offset: u64,
    pub(super) reads_in_flight: u32,
    pub(super) phase: JobPhase,
    /// Reads that failed, to issue again: (first block, count, attempts so far).
    retries: Vec<(Ppa, u32, u8)>,
    /// Live blocks that could not be read or failed their checksum.
    unreadable: BTreeSet<Ppa>,
    /// Tags in band: the LBA each block of the victim holds, by offset
    /// (checked against the map before use).
    lbas: Option<Box<[u32]>>,
    /// The shared entries whose blocks lie in the victim, by offset.
    shared: Box<[SharedId]>,
    /// The victim's summary blocks read so far.
    summary: Vec<u8>,
    /// How fast a collection keeps up with the host; `None` for leveling
    /// and retirement, which run at once.
    pace: Option<Pace>,
    /// Blocks read from the victim and not yet copied: queued, or in an
    /// append on its way.
    pending: u32,
    /// A migration (nameless victim): remap entries still reserved for
    /// its blocks.
    reserved_entries: u64,
}

/// Jobs whose copies are done that close (note, flush, reset) at once
/// while GC collects one victim at a time.
const CLOSING_JOBS: usize = 2;

/// The same with spread GC (`Ftl::gc_wide`), where closing victims no
/// longer count against `gc_victims`. Each close waits for the device's
/// queue three times over (the note's log append, the flush, the reset on
/// the victim's units); two at a time closed fewer victims a second than
/// GC copied (`zftl bench media`, docs/bench.md).
const CLOSING_JOBS_WIDE: usize = 16;

/// Most victims collected at once (`FtlConfig::gc_victims`).
pub(super) const MAX_GC_VICTIMS: u32 = 16;

/// With `FtlConfig::gc_reset_yields_to_urgent`, urgent appends count as
/// going on for this long after the last one: a FUA writer that waits for
/// each write and does a little in between (a read) leaves gaps of a few
/// hundred µs, and a reset let out in one erases under its next write.
const URGENT_QUIET_NS: u64 = 2_000_000;

/// The longest a victim's reset waits for urgent appends, so a steady FUA
/// stream delays the zone GC frees, never withholds it (the urgent zone
/// usually fills, and its lane moves on, well within this).
const RESET_YIELD_MAX_NS: u64 = 1_000_000_000;

/// While GC is busy, GC jobs between two static wear-leveling moves.
pub(super) const WL_EVERY_GC_JOBS: u32 = 4;

/// GC starts with at least this share (one part in it) of the blocks
/// without live data still spare. Two zones of cushion are too few on a
/// device of many small zones: the spare blocks count the open lanes'
/// unwritten tails, and with three lanes open those tails made up most of
/// the cushion, so each lane that filled took a free zone the reserve
/// needed. The free zones then sat at the reserve, where GC runs flat out
/// on the thread that answers requests, and random writes waited for it
/// (docs/bench-nbd.md, "When GC starts"). A share costs GC that share of
/// its room: on few large zones, or with little over-provisioning, two
/// zones stay the larger cushion.
const GC_START_ROOM_SHARE: u64 = 32;

/// A paced collection reads once it has this much credit, one run of live
/// blocks (a few, in a half-live victim) per read, so it moves a little
/// alongside each request. Reading on until the credit was spent (steps
/// of 32 blocks and more) answered fewer 4 KiB random writes
/// (docs/bench-nbd.md, "Paced GC reads").
const PACED_READ_BLOCKS: u64 = 32;

/// The most blocks one GC read spans.
const GC_READ_SPAN_BLOCKS: u64 = 64;

/// A GC append waits for this many blocks queued (or the device's largest
/// append, if smaller) until its victim has been read through: an append
/// per read left a few blocks per command, and the commands in flight,
/// not the media, bounded GC.
const GC_APPEND_BATCH_BLOCKS: u64 = 128;

/// Spread GC takes a victim on the zone group with the fewest free zones
/// and victims if it holds at most this share (one part in it) of a zone
/// more live blocks than the best victim (`Ftl::balanced_victim`), where
/// GC has room for them (`Ftl::victim_slack_blocks`).
const VICTIM_GROUP_SLACK_SHARE: u64 = 32;

/// `Ftl::gc_queues`' queue of blocks only snapshots hold, after the two
/// temperatures' (`Temp as usize`).
pub(super) const KEPT_QUEUE: usize = 2;

/// A collection's pace: collecting a victim with `valid` live blocks frees
/// `capacity - valid` blocks net, so while the host appends, GC moves
/// `valid / (capacity - valid)` blocks per host block, and a quarter more
/// to stay ahead. Kept as credit: `earn` per block the host appends, `cost`
/// per block GC reads. Paced, a collection moves in
/// small steps between host appends instead of all at once: the inline
/// handle runs it on the thread that answers requests, and a whole victim
/// at once held up the requests behind it (docs/bench-nbd.md, "Paced GC
/// reads"). Without the pace it runs only when the free zones fall to the
/// reserve.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Pace {
    earn: u64,
    cost: u64,
    /// What the collection may still read before it falls behind.
    credit: u64,
}

impl Pace {
    fn of(valid_blocks: u64, capacity_blocks: u64) -> Pace {
        let gain = capacity_blocks.saturating_sub(valid_blocks).max(1);
        Pace {
            earn: valid_blocks.saturating_mul(5),
            cost: gain.saturating_mul(4),
            credit: 0,
        }
    }

    /// The host appended `blocks`; the credit is capped at four reads.
    fn earn(&mut self, blocks: u64) {
        let most = self.cost.saturating_mul(4 * PACED_READ_BLOCKS);
        self.credit = self
            .credit
            .saturating_add(blocks.saturating_mul(self.earn))
            .min(most);
    }

    /// Blocks the credit pays for.
    fn readable_blocks(&self) -> u64 {
        self.credit / self.cost.max(1)
    }

    /// GC read `blocks`.
    fn spend(&mut self, blocks: u64) {
        self.credit = self.credit.saturating_sub(blocks.saturating_mul(self.cost));
    }
}

impl Ftl {
    fn retire_zone(&mut self, zone: ZoneId) {
        self.zones.retire(zone);
        self.max_mapped_blocks = self.max_mapped_blocks.saturating_sub(self.data_cap());
        self.usable_blocks = self.usable_blocks.saturating_sub(self.data_cap());
    }

    /// A zone for static wear leveling to move, if leveling is due: when GC
    /// is idle, or as at most one job in `WL_EVERY_GC_JOBS + 1` while GC is
    /// busy (a leveling move frees the zone it empties, so it costs GC no
    /// space, only time).
    fn wl_victim(&self) -> Option<ZoneId> {
        if self.cfg.static_wl_threshold == 0 || self.zones.free_count() == 0 {
            return None;
        }
        if self.gc_needed() && self.jobs_since_wl < WL_EVERY_GC_JOBS {
            return None;
        }
        let ex = |z: ZoneId| self.excluded(z);
        self.zones
            .pick_static_wl_victim(self.cfg.static_wl_threshold, ex)
    }

    pub(super) fn gc_queued(&self) -> usize {
        self.gc_queues.iter().map(VecDeque::len).sum::<usize>() + self.nameless.moves.queued()
    }

    /// Blocks still to fill before the host reaches the reserve: the free
    /// zones' and the unwritten tails of the zones the lanes hold open. That
    /// is the data zones less the live blocks and the garbage in written
    /// zones, so GC starts on garbage, not on how it happens to be spread.
    /// Counting whole zones instead (free ones, and open lanes beyond the
    /// first), a sequential overwrite sat on the threshold with no more
    /// garbage than the zone under the host's cursor (the lane's tail and
    /// that zone's overwritten head add up to one zone), and GC copied each
    /// such zone just before the host overwrote it: 5 to 9 % more media
    /// writes than host writes on the guest bench's shape, and up to twice
    /// as many once a second lane was open.
    fn spare_blocks(&self) -> u64 {
        u64::from(self.zones.free_count()) * self.data_cap() + self.open_tails_blocks()
    }

    /// Blocks of the data zones that hold no live data: free, unwritten or
    /// garbage. Their share that GC keeps free costs write amplification
    /// in proportion.
    fn blocks_without_live_data(&self) -> u64 {
        let zones = u64::from(self.zones.data_zone_count() + self.zones.free_count());
        (zones * self.data_cap()).saturating_sub(self.mapping.live_blocks())
    }

    /// The spare blocks below which GC runs: the reserve, plus
    /// `gc_start_free_zones` zones or `1 / GC_START_ROOM_SHARE` of the
    /// blocks without live data, whichever is more.
    fn gc_start_blocks(&self) -> u64 {
        let data_cap = self.data_cap();
        let cushion = (u64::from(self.cfg.gc_start_free_zones) * data_cap)
            .max(self.blocks_without_live_data() / GC_START_ROOM_SHARE);
        u64::from(self.gc_reserve_zones) * data_cap + cushion
    }

    /// GC runs once the spare blocks fall below `gc_start_blocks`, and
    /// always once the free zones are down to the reserve (the host may not
    /// open zones then: GC must make room).
    pub(super) fn gc_needed(&self) -> bool {
        self.gc_urgent() || self.spare_blocks() < self.gc_start_blocks()
    }

    /// Called as a snapshot create of seq `seq` applies. With tags in OOB
    /// and the history idle, the blocks written since the committed
    /// checkpoint are known to recovery by their tags alone: once the
    /// books are kept, a kill replayed after GC had copied such a block and
    /// reset its zone would find no version to keep (the copy's tag is
    /// below its own zone's reset). From here on every change is noted
    /// (`notes_every_change`), so only those zones need their tags until a
    /// checkpoint covers them: GC takes no victim among them and resets
    /// none of them until then (the create itself waits for nothing).
    pub(super) fn fence_tag_only_zones(&mut self, seq: Seq) {
        if self.tag_mode == TagMode::Oob && self.mapping.history().is_idle() {
            self.tag_only_fence = Some(seq);
        }
    }

    /// Whether the fence is up: no checkpoint captured after it committed.
    fn tag_only_fence_up(&self) -> bool {
        self.tag_only_fence
            .is_some_and(|fence| self.committed_next_seq <= fence)
    }

    /// Zone `z` may hold a block known only by its tag while the fence is
    /// up (written since the committed checkpoint, as the range check's
    /// pins judge "young"); conservative for zones written after the fence.
    fn reset_fenced(&self, z: ZoneId) -> bool {
        self.tag_only_fence_up() && self.zones.get(z).last_write_seq() >= self.committed_next_seq
    }

    /// GC wants a zone the fence holds: bring the checkpoint that lifts it
    /// forward (one at a time; a checkpoint captured before the fence
    /// leaves it up and the next turn asks again).
    fn request_fence_checkpoint(&mut self) {
        if self.tag_only_fence_up() && matches!(self.ckpt, super::ckpt::CkptState::Idle) {
            self.ckpt_requested = true;
        }
    }

    pub(super) fn excluded(&self, z: ZoneId) -> bool {
        self.reset_fenced(z)
            || self.lanes.iter().any(|st| st.zone == Some(z))
            || self.closing.iter().any(|j| j.victim == z)
            || self.jobs.iter().any(|j| j.victim == z)
            || self.zone_appends[z as usize] > 0
            || self.finish_pending.contains(&z)
            || self.inplace_holds(z)
            || self.nameless.unanswered_blocks[z as usize] > 0
    }

    fn pick_job(&mut self) -> Option<GcJob> {
        // A zone to retire waits until its last append has completed: one
        // still in flight may yet fail (and name the zone again) or map
        // blocks into it that the job must move.
        let retire_ready = self.retire_queue.front().is_some_and(|&z| {
            self.zone_appends[z as usize] == 0 && !self.finish_pending.contains(&z)
        });
        let (victim, purpose) = if retire_ready {
            let z = self.retire_queue.pop_front().expect("front checked");
            (z, JobPurpose::Retire)
        } else if let Some(z) = self.wl_victim().or_else(|| self.nameless_wl_victim()) {
            self.jobs_since_wl = 0;
            (z, JobPurpose::StaticWl)
        } else if let Some(z) = self.empty_nameless_victim() {
            (z, JobPurpose::Gc)
        } else if self.gc_needed() {
            self.request_fence_checkpoint();
            // In band a zone full of live data still has fewer valid blocks
            // than its capacity (the summary): collecting it frees nothing.
            let data_cap = self.data_cap();
            let valid = |z: ZoneId| self.mapping.valid_blocks(z);
            let ex = |z: ZoneId| self.excluded(z) || valid(z) >= data_cap;
            let logical = self
                .zones
                .pick_victim(self.cfg.gc_policy, self.next_seq, valid, ex);
            let logical = logical.map(|z| self.balanced_victim(z));
            // Of the logical and the migration victim, the one that copies
            // fewer blocks (each frees a zone).
            let nameless = self.migration_victim();
            let valid = |z: ZoneId| self.mapping.valid_blocks(z);
            let pick = match (logical, nameless) {
                (Some(l), Some(n)) if valid(n) < valid(l) => Some(n),
                (Some(l), _) => Some(l),
                (None, n) => n,
            };
            // Migration keeps the choice when it wins; else the in-place
            // victim, if it frees more per block written than the logical
            // one (it runs beside GC's jobs, as its own job).
            if pick.is_none() || pick == logical {
                if let Some(ip) = self.inplace_victim() {
                    let valid = |z: ZoneId| self.mapping.valid_blocks(z);
                    let wins = pick.is_none_or(|l| ip.beats_logical(valid(l), data_cap));
                    if wins && self.start_in_place(ip.zone) {
                        self.stats.nameless_inplace_gc_victims += 1;
                        return None;
                    }
                }
            }
            let z = pick?;
            self.jobs_since_wl = self.jobs_since_wl.saturating_add(1);
            (z, JobPurpose::Gc)
        } else {
            return None;
        };
        Some(self.job_for(victim, purpose))
    }

    /// A logical zone GC may reset that holds nothing live (not one queued
    /// for retirement: its own job retires it).
    pub(super) fn empty_gc_victim(&self) -> Option<ZoneId> {
        let valid = |z: ZoneId| self.mapping.valid_blocks(z);
        let ex = |z: ZoneId| self.excluded(z) || valid(z) > 0 || self.retire_queue.contains(&z);
        self.zones
            .pick_victim(self.cfg.gc_policy, self.next_seq, valid, ex)
    }

    /// Starts a collection of a victim with nothing live beside any jobs
    /// `may_start_job` would wait for (up to `MAX_GC_VICTIMS` running): it
    /// copies nothing, so it needs no room, and its reset frees a zone.
    /// Held victims whose copies have nowhere to go otherwise wait for a
    /// zone no job will free (after a mount left no free zone or open lane,
    /// a victim with one live block did, and a FUA write was answered
    /// NoSpace beside six zones with nothing live). Returns whether it
    /// started one.
    pub(super) fn start_empty_job(&mut self) -> bool {
        if self.jobs.len() >= MAX_GC_VICTIMS as usize || self.reading_job().is_some() {
            return false;
        }
        let Some(victim) = self.empty_gc_victim() else {
            return false;
        };
        let job = self.job_for(victim, JobPurpose::Gc);
        self.jobs.push(job);
        true
    }

    /// A new job collecting `victim` for `purpose`.
    fn job_for(&mut self, victim: ZoneId, purpose: JobPurpose) -> GcJob {
        let reserved_entries = if self.zones.get(victim).kind().is_nameless() {
            self.reserve_moves(victim)
        } else {
            0
        };
        // A victim with nothing live has nothing to pace.
        let pace = (purpose == JobPurpose::Gc)
            .then(|| self.mapping.valid_blocks(victim))
            .filter(|&valid| valid > 0)
            .map(|valid| Pace::of(valid, self.data_cap()));
        // In band, GC learns what the victim holds from its summary, or,
        // for a zone without one, from the map; shared blocks from the
        // shared table.
        let shared = self.mapping.zone_shared(victim);
        let (phase, lbas) = match self.tag_mode {
            TagMode::Oob => (JobPhase::Copying, None),
            TagMode::InBand if self.has_summary(victim) => {
                (JobPhase::Summary { issued: false }, None)
            }
            TagMode::InBand => (
                JobPhase::Copying,
                Some(self.victim_lbas(victim, None, &shared)),
            ),
        };
        GcJob {
            victim,
            purpose,
            scan_offset: 0,
            reads_in_flight: 0,
            phase,
            retries: Vec::new(),
            unreadable: BTreeSet::new(),
            lbas,
            shared,
            summary: Vec::new(),
            pace,
            pending: 0,
            reserved_entries,
        }
    }

    /// Spread GC's victim: `best`, or the best victim of the zone group
    /// that has the fewest free zones and victims held if it copies at most
    /// `victim_slack_blocks` more. A victim's reads load its
    /// group's units and its reset frees a zone there; picked by score
    /// alone, victims written together sit on the groups the lanes used
    /// then, so their reads queue on one group while the free zones every
    /// lane opens from (a few at steady state) lie on the same groups and
    /// the others idle (`zftl bench media`, docs/bench.md).
    fn balanced_victim(&self, best: ZoneId) -> ZoneId {
        let g = self.geo.zone_groups.max(1);
        if g == 1 || !self.gc_wide() {
            return best;
        }
        let mut crowding = vec![0u32; g as usize];
        for z in self.zones.free_zones() {
            crowding[(z % g) as usize] += 1;
        }
        for j in self.jobs.iter().chain(&self.closing) {
            crowding[(j.victim % g) as usize] += 1;
        }
        let group = (0..g)
            .min_by_key(|&i| crowding[i as usize])
            .expect("groups");
        if best % g == group {
            return best;
        }
        let data_cap = self.data_cap();
        let valid = |z: ZoneId| self.mapping.valid_blocks(z);
        let ex = |z: ZoneId| z % g != group || self.excluded(z) || valid(z) >= data_cap;
        let Some(there) = self
            .zones
            .pick_victim(self.cfg.gc_policy, self.next_seq, valid, ex)
        else {
            return best;
        };
        if valid(there) <= valid(best) + self.victim_slack_blocks(valid(best), valid(there)) {
            there
        } else {
            best
        }
    }

    /// The live blocks `balanced_victim` may copy beyond the best
    /// victim's (`best_valid`) to take `there_valid`'s: a share of a zone,
    /// unless the best victim is empty (its reset frees a zone with no
    /// read or copy: traded for a victim with one live block after a mount
    /// that left no free zone or open lane, that block had nowhere to land
    /// and the media was declared full beside six empty zones) or GC's room
    /// would not hold the other's copies beside the held victims'.
    fn victim_slack_blocks(&self, best_valid: u64, there_valid: u64) -> u64 {
        if best_valid == 0 || self.gc_room_blocks() < self.held_live_blocks() + there_valid {
            0
        } else {
            self.data_cap() / VICTIM_GROUP_SLACK_SHARE
        }
    }

    /// Blocks GC can write into: the free zones and the open lanes' tails.
    fn gc_room_blocks(&self) -> u64 {
        u64::from(self.zones.free_count()) * self.data_cap() + self.open_tails_blocks()
    }

    /// The live blocks of the victims the running jobs hold.
    fn held_live_blocks(&self) -> u64 {
        self.jobs
            .iter()
            .map(|j| self.mapping.valid_blocks(j.victim))
            .sum()
    }

    /// The job collecting `zone`.
    pub(super) fn job_of(&mut self, zone: ZoneId) -> Option<&mut GcJob> {
        self.jobs.iter_mut().find(|j| j.victim == zone)
    }

    /// One block read from `zone`, a victim, is copied or dropped: its job
    /// has one block fewer pending. Returns whether it was a migration's
    /// (one remap entry fewer reserved).
    pub(super) fn job_settled(&mut self, zone: ZoneId) -> bool {
        let Some(job) = self.job_of(zone) else {
            return false;
        };
        job.pending -= 1;
        let reserved = job.reserved_entries > 0;
        job.reserved_entries -= u64::from(reserved);
        reserved
    }

    /// Whether a GC job still reads its victim, or a GC read is on its way.
    pub(super) fn gc_reading(&self) -> bool {
        self.reading_job().is_some() || self.gc_reads_in_flight()
    }

    /// The job that still has blocks to read (a retry, or the rest of its
    /// victim): the oldest such. New jobs start only when there is none.
    fn reading_job(&self) -> Option<usize> {
        self.jobs.iter().position(|j| match j.phase {
            JobPhase::Summary { .. } => true,
            JobPhase::Copying => {
                !j.retries.is_empty()
                    || j.scan_offset < self.zones.get(j.victim).write_pointer_blocks()
            }
            _ => false,
        })
    }

    /// Whether another job may start: fewer than `gc_victims` victims held
    /// (copying or closing), and beside running jobs only a collection,
    /// once all of theirs are read (their copies still on their way), none
    /// of them leveling or retiring, and no retirement or leveling move due
    /// (a stream of overlapping collections must not hold those off).
    fn may_start_job(&self) -> bool {
        let most = self.cfg.gc_victims.clamp(1, MAX_GC_VICTIMS) as usize;
        // Spread, a victim copied through is no longer held: its close
        // waits on the device, not on GC.
        let closing = if self.gc_wide() {
            0
        } else {
            self.closing.len()
        };
        if self.jobs.len() + closing >= most {
            return false;
        }
        if self.jobs.is_empty() {
            return true;
        }
        // The running jobs' live blocks, and up to a zone's of the next
        // victim, must fit where GC can write: otherwise the victims read
        // through wait for room no reset will make.
        self.gc_room_blocks() >= self.held_live_blocks() + self.data_cap()
            && self.reading_job().is_none()
            && self.jobs.iter().all(|j| j.purpose == JobPurpose::Gc)
            && self.retire_queue.is_empty()
            && self.wl_victim().is_none()
    }

    pub(super) fn next_job_command(&mut self) -> Option<(Op, Command)> {
        if self.read_only {
            return None;
        }
        if let Some(c) = self.next_closing_command() {
            return Some(c);
        }
        if self.reading_job().is_none() {
            if self.may_start_job() {
                if let Some(job) = self.pick_job() {
                    self.jobs.push(job);
                }
            } else if self.gc_urgent() && self.gc_in_flight == 0 {
                // Only with nothing of GC's in flight (a held job waiting
                // for room): the scan is O(zones), and GC in flight frees
                // room or zones anyway.
                self.start_empty_job();
            }
        }
        let i = self.reading_job()?;
        let job = &self.jobs[i];
        let victim = job.victim;
        match job.phase {
            JobPhase::Summary { issued: false } => {
                let first = (job.summary.len() / self.block_size()) as u64;
                let (cmd, count) = self.summary_read(victim, first);
                self.jobs[i].phase = JobPhase::Summary { issued: true };
                let cost = u64::from(count) * u64::from(self.cfg.nameless_cost_us.read_us);
                self.charge_gc(cost, self.gc_budget_binds());
                Some((
                    Op::SummaryRead {
                        zone: victim,
                        count,
                    },
                    cmd,
                ))
            }
            JobPhase::Copying => self.next_gc_read(i),
            _ => None,
        }
    }

    /// The flush or reset of a job whose copies are done, when due.
    fn next_closing_command(&mut self) -> Option<(Op, Command)> {
        self.note_reset_yields();
        let readers = &self.zone_readers;
        let may_reset = !self.first_checkpoint_pending;
        let yields = |j: &GcJob, since_ns: u64| self.reset_yields(j.victim, since_ns);
        let i = self.closing.iter().position(|j| match j.phase {
            JobPhase::ReadyToFlush => readers[j.victim as usize] == 0,
            JobPhase::ReadyToReset { since_ns, .. } => may_reset && !yields(j, since_ns),
            _ => false,
        })?;
        let job = &mut self.closing[i];
        let victim = job.victim;
        if matches!(job.phase, JobPhase::ReadyToFlush) {
            job.phase = JobPhase::Flushing;
            return Some((Op::VictimFlush { zone: victim }, Command::Flush));
        }
        if let JobPhase::ReadyToReset { yielded, .. } = job.phase {
            self.stats.gc_resets_yielded += u64::from(yielded);
        }
        job.phase = JobPhase::Resetting;
        self.charge_gc(self.reset_cost_us(), self.gc_budget_binds());
        Some((
            Op::VictimReset { zone: victim },
            Command::Reset { zone: victim },
        ))
    }

    /// Marks the ready resets that wait now for urgent appends (counted as
    /// they go out).
    fn note_reset_yields(&mut self) {
        if !self.cfg.gc_reset_yields_to_urgent {
            return;
        }
        for i in 0..self.closing.len() {
            let victim = self.closing[i].victim;
            let JobPhase::ReadyToReset { since_ns, .. } = self.closing[i].phase else {
                continue;
            };
            if self.reset_yields(victim, since_ns) {
                if let JobPhase::ReadyToReset { yielded, .. } = &mut self.closing[i].phase {
                    *yielded = true;
                }
            }
        }
    }

    /// Whether `victim`'s reset, ready since `since_ns`, waits
    /// (`FtlConfig::gc_reset_yields_to_urgent`): urgent (FUA) appends went
    /// to its zone group within `URGENT_QUIET_NS`, and an erase there would
    /// hold each program queued behind it for milliseconds. Never with
    /// nothing in flight: the clock moves only with the device on some
    /// drivers.
    fn reset_yields(&self, victim: ZoneId, since_ns: u64) -> bool {
        if !self.cfg.gc_reset_yields_to_urgent || self.ops.is_empty() {
            return false;
        }
        let now = self.now_ns;
        let recent = self.urgent_appended_ns[self.zone_group(victim)]
            .is_some_and(|at| now.saturating_sub(at) < URGENT_QUIET_NS);
        recent && now.saturating_sub(since_ns) < RESET_YIELD_MAX_NS
    }

    /// Whether the metadata log's reset of its next ring zone ahead of
    /// time waits, as a victim's reset does (`reset_yields`) but with no
    /// limit: if it still waits when the log moves there, the move resets
    /// the zone itself.
    pub(super) fn log_reset_ahead_waits(&self, zone: ZoneId) -> bool {
        self.reset_yields(zone, self.now_ns)
    }

    /// The free zones are down to the reserve: GC runs flat out.
    fn gc_urgent(&self) -> bool {
        (self.zones.free_count() as u64) <= u64::from(self.gc_reserve_zones)
    }

    pub(super) fn gc_budget_left(&self) -> bool {
        let host_busy = self.buffer.queued() > 0 || !self.read_queue.is_empty();
        self.gc_urgent() || !host_busy || self.gc_in_flight < self.cfg.gc_max_inflight
    }

    /// Blocks the running collection may read now; `None`: no limit.
    fn paced_read_blocks(&self) -> Option<u64> {
        let pace = self.jobs.get(self.reading_job()?)?.pace.as_ref()?;
        (!self.gc_urgent()).then(|| pace.readable_blocks())
    }

    /// The running collection's pace, if it has one.
    fn pace_mut(&mut self) -> Option<&mut Pace> {
        let i = self
            .reading_job()
            .unwrap_or(self.jobs.len().checked_sub(1)?);
        self.jobs[i].pace.as_mut()
    }

    /// The host appended `blocks`: the running collection earns its pace.
    pub(super) fn earn_gc_credit(&mut self, blocks: u64) {
        if let Some(pace) = self.pace_mut() {
            pace.earn(blocks);
        }
    }

    /// Device µs of a zone reset: an erase on each parallel unit the zone
    /// spans.
    fn reset_cost_us(&self) -> u64 {
        let units = (self.geo.parallel_units / self.geo.zone_groups.max(1)).max(1);
        u64::from(self.cfg.nameless_cost_us.erase_us) * u64::from(units)
    }

    /// GC issued a command of `device_us` (`FtlConfig::gc_budget`); `binds`:
    /// the budget held it back until it had tokens (else the command went
    /// out whatever the budget said: `FtlStats::gc_unbudgeted_us`).
    pub(super) fn charge_gc(&mut self, device_us: u64, binds: bool) {
        self.stats.gc_device_us += device_us;
        if !binds {
            self.stats.gc_unbudgeted_us += device_us;
        }
        if let Some(bucket) = &mut self.gc_bucket {
            bucket.charge(device_us.saturating_mul(1000));
        }
    }

    /// Whether GC's device-time budget holds GC's commands back now: not
    /// while host writes wait for room in the write buffer (it drains only
    /// as fast as GC frees zones once the host lanes are down to the
    /// reserve), nor once GC has lent the reserve (the free zones below it),
    /// nor with nothing in flight (no completion would come to move a clock
    /// that only moves with the device). The free zones at the reserve do
    /// not lift it: GC starts with the spare blocks in the open lanes'
    /// tails, so they are at the reserve whenever GC runs.
    fn gc_budget_binds(&self) -> bool {
        let reserve_lent = u64::from(self.zones.free_count()) < u64::from(self.gc_reserve_zones);
        self.waiting_writes.is_empty() && !reserve_lent && !self.ops.is_empty()
    }

    /// Whether job `i` may read now as far as GC's device-time budget
    /// goes; a retirement (a failing zone) reads whatever it says.
    fn gc_budget_allows(&mut self, i: usize) -> bool {
        let Some(bucket) = &self.gc_bucket else {
            return true;
        };
        let allows = bucket.allows()
            || !self.gc_budget_binds()
            || self.jobs[i].purpose == JobPurpose::Retire;
        if !allows && !self.gc_budget_waiting {
            self.stats.gc_budget_waits += 1;
        }
        self.gc_budget_waiting = !allows;
        allows
    }

    /// The next read of job `i`'s victim.
    fn next_gc_read(&mut self, i: usize) -> Option<(Op, Command)> {
        if !self.gc_budget_left() || self.gc_queued() >= 4 * self.geo.max_append_blocks as usize {
            return None;
        }
        let group_room = self.gc_read_room(self.jobs[i].victim)?;
        if !self.gc_budget_allows(i) {
            return None;
        }
        let paced = self.paced_read_blocks();
        if paced.is_some_and(|n| n < PACED_READ_BLOCKS) {
            return None;
        }
        let cap = self.cap();
        let read_us = u64::from(self.cfg.nameless_cost_us.read_us);
        let binds = self.gc_budget_binds() && self.jobs[i].purpose != JobPurpose::Retire;
        if let Some(&(ppa, count, attempts)) = self.jobs[i].retries.last() {
            // A retry is not cut: it waits for the group's reads to drain.
            if u64::from(count) > group_room && group_room < self.gc_read_bound() {
                return None;
            }
            self.jobs[i].retries.pop();
            self.charge_gc(u64::from(count) * read_us, binds);
            return Some(self.gc_read(ppa, count, attempts));
        }
        let job = &self.jobs[i];
        let (victim, wp) = (
            job.victim,
            self.zones.get(job.victim).write_pointer_blocks(),
        );
        let nameless = self.zones.get(victim).kind().is_nameless();
        let movable = |off: u64| {
            let p = Ppa::new(victim, off, cap);
            self.mapping.is_live(p)
                && !job.unreadable.contains(&p)
                && (!nameless || self.movable_nameless(p))
        };
        let mut off = job.scan_offset;
        while off < wp && !movable(off) {
            off += 1;
        }
        // In band a nameless victim's md comes first, a group at a time.
        let mut limit = wp;
        if nameless && off < wp {
            match self.victim_md_ready(victim, off, self.jobs[i].reads_in_flight) {
                VictimMdStep::Ready { end } => limit = limit.min(end),
                VictimMdStep::Read(op, cmd) => return Some((op, cmd)),
                VictimMdStep::Wait => return None,
            }
        }
        let job = &self.jobs[i];
        let movable = |off: u64| {
            let p = Ppa::new(victim, off, cap);
            self.mapping.is_live(p)
                && !job.unreadable.contains(&p)
                && (!nameless || self.movable_nameless(p))
        };
        // Wide, one read spans the live blocks of up to
        // `GC_READ_SPAN_BLOCKS`, the dead ones between them included: a read
        // command per run of live blocks took a few blocks each in a mostly
        // live victim, and the commands in flight, not the media, bounded GC.
        let start = off;
        let span = u64::from(self.geo.max_transfer_blocks)
            .min(GC_READ_SPAN_BLOCKS)
            .min(group_room);
        let most_live = paced.unwrap_or(u64::MAX);
        let wide = self.gc_wide();
        let (mut end, mut live) = (off, 0);
        while off < limit && off - start < span && live < most_live {
            if movable(off) {
                live += 1;
                end = off + 1;
            } else if !wide {
                break; // one run of live blocks per read
            }
            off += 1;
        }
        self.jobs[i].scan_offset = end;
        if start == end {
            return None; // scan finished; completion is checked in advance()
        }
        if let Some(pace) = self.pace_mut() {
            pace.spend(live);
        }
        // The copies the read leads to are paid for here, with it.
        let write_us = u64::from(self.cfg.nameless_cost_us.write_us);
        self.charge_gc((end - start) * read_us + live * write_us, binds);
        Some(self.gc_read(Ppa::new(victim, start, cap), (end - start) as u32, 0))
    }

    /// `FtlConfig::gc_read_max_blocks_per_group` as a bound (`u64::MAX`:
    /// none).
    fn gc_read_bound(&self) -> u64 {
        match self.cfg.gc_read_max_blocks_per_group {
            0 => u64::MAX,
            n => u64::from(n),
        }
    }

    /// Blocks GC may read from `victim` now as far as the bound on its zone
    /// group's reads in flight goes; `None`: none until some complete.
    fn gc_read_room(&self, victim: ZoneId) -> Option<u64> {
        let in_flight = u64::from(self.gc_read_blocks_by_group[self.zone_group(victim)]);
        let room = self.gc_read_bound().saturating_sub(in_flight);
        (room > 0).then_some(room)
    }

    /// The zone group whose parallel units hold `zone`.
    pub(super) fn zone_group(&self, zone: ZoneId) -> usize {
        (zone % self.geo.zone_groups.max(1)) as usize
    }

    fn gc_read(&mut self, ppa: Ppa, count: u32, attempts: u8) -> (Op, Command) {
        let cap = self.cap();
        let zone = ppa.zone(cap);
        if let Some(job) = self.job_of(zone) {
            job.reads_in_flight += 1;
        }
        self.gc_in_flight += 1;
        let group = self.zone_group(zone);
        self.gc_read_blocks_by_group[group] += count;
        self.zone_readers[zone as usize] += 1;
        let cmd = Command::Read {
            zone,
            offset_blocks: ppa.offset_blocks(cap),
            block_count: count,
            priority: ReadPriority::Background,
        };
        (
            Op::GcRead {
                ppa,
                count,
                attempts,
            },
            cmd,
        )
    }

    pub(super) fn gc_read_done(
        &mut self,
        first: Ppa,
        count: u32,
        attempts: u8,
        result: Result<Outcome, DeviceError>,
    ) {
        let cap = self.cap();
        self.gc_in_flight -= 1;
        let zone = first.zone(cap);
        self.zone_readers[zone as usize] -= 1;
        let group = self.zone_group(zone);
        self.gc_read_blocks_by_group[group] -= count;
        if let Some(job) = self.job_of(zone) {
            job.reads_in_flight -= 1;
        }
        let bs = self.block_size();
        let ob = self.geo.oob_size_bytes as usize;
        let (data, oob) = match result {
            Ok(Outcome::Read { data, oob }) => (data, oob),
            Ok(other) => panic!("read completed as {other:?}"),
            Err(DeviceError::DeviceGone) => return,
            Err(_) if attempts < READ_ATTEMPTS => {
                if let Some(job) = self.job_of(zone) {
                    job.retries.push((first, count, attempts));
                }
                return;
            }
            Err(_) if count > 1 => {
                // One bad page must not doom its neighbours: block by block.
                if let Some(job) = self.job_of(zone) {
                    job.retries
                        .extend((0..count).map(|i| (Ppa(first.0 + i), 1, 0)));
                }
                return;
            }
            Err(_) => (Vec::new(), Vec::new()),
        };
        let data = BlockData::blocks(data, bs);
        let nameless = self.zones.get(zone).kind().is_nameless();
        for i in 0..count as usize {
            let ppa = Ppa(first.0 + i as u32);
            if !self.mapping.is_live(ppa) {
                continue; // overwritten or trimmed since the scan
            }
            if nameless {
                self.nameless_victim_block(zone, ppa, data.get(i), &oob[..], i);
                continue;
            }
            // Who owns the block, and its data CRC, from the tag (OOB) or
            // the tables (in band), checked against the map. The CRC travels
            // with the data rather than being recomputed: a damaged block
            // moved by GC still fails its check when the host reads it, so
            // nothing is laundered. A block no owner claims is unreadable.
            let found = if i < data.len() {
                self.victim_owner(ppa, &oob[i * ob..(i + 1) * ob])
            } else {
                None
            };
            if let Some((owner, tag_lba, crc, seq)) = found {
                let item = RelocItem {
                    owner,
                    tag_lba,
                    src: ppa,
                    data: data[i].clone(),
                    seq,
                    crc,
                };
                let queue = self.gc_queue_of(owner, first);
                self.gc_queues[queue].push_back(item);
                if let Some(job) = self.job_of(zone) {
                    job.pending += 1;
                }
            } else {
                // Unreadable, or its tag names another block: it stays mapped
                // where it is (reads report the error) and the victim is
                // retired instead of reset.
                self.stats.read_errors += 1;
                if let Some(job) = self.job_of(zone) {
                    job.unreadable.insert(ppa);
                }
            }
        }
    }

    /// Live block `ppa` of nameless victim `zone`, the `i`th of a read
    /// (`data` none: the read failed): queued for its copy, or, when its
    /// tag does not name it, unreadable (it stays; the victim is retired).
    /// A block an overwrite on its way replaces is left to die.
    fn nameless_victim_block(
        &mut self,
        zone: ZoneId,
        ppa: Ppa,
        data: Option<&BlockData>,
        oob: &[u8],
        i: usize,
    ) {
        if !self.movable_nameless(ppa) {
            return;
        }
        let ob = self.geo.oob_size_bytes as usize;
        let queued = data.is_some_and(|d| {
            let tag = oob.get(i * ob..(i + 1) * ob).unwrap_or(&[]);
            self.queue_move(ppa, d.clone(), tag)
        });
        if !queued {
            self.stats.read_errors += 1;
        }
        if let Some(job) = self.job_of(zone) {
            if queued {
                job.pending += 1;
            } else {
                job.unreadable.insert(ppa);
            }
        }
    }

    /// The owner of live victim block `ppa`, the LBA its copy's tag names,
    /// its data CRC and its version's seq (0 in band, where none is known),
    /// from its OOB bytes (tags in OOB) or the job's tables (in band).
    fn victim_owner(&self, ppa: Ppa, oob: &[u8]) -> Option<(Owner, Lba, u32, Seq)> {
        let cap = self.cap();
        let job = self.jobs.iter().find(|j| j.victim == ppa.zone(cap))?;
        let off = ppa.offset_blocks(cap) as usize;
        let direct = |lba: Lba| {
            lba < self.mapping.space_blocks()
                && self.mapping.target(lba) == Some(crate::mapping::Target::Direct(ppa))
        };
        // Entries made since the job started are not in its table.
        let shared = || {
            let listed = job.shared.get(off).copied().filter(|&id| {
                self.mapping
                    .shared_entry(id)
                    .is_some_and(|(at, ..)| at == ppa)
            });
            listed.or_else(|| self.mapping.find_shared(ppa))
        };
        match self.tag_mode {
            TagMode::Oob => {
                let t = Tag::decode(&oob[..TAG_BYTES]).ok().flatten()?;
                if !t.kind.is_data() {
                    return None;
                }
                let owner = if direct(t.lba) {
                    Owner::Direct(t.lba)
                } else {
                    Owner::Shared(shared()?)
                };
                Some((owner, t.lba, t.data_crc, t.seq))
            }
            TagMode::InBand => {
                let hint = job
                    .lbas
                    .as_ref()
                    .and_then(|l| l.get(off))
                    .map(|&l| Lba::from(l));
                if let Some(lba) = hint.filter(|&l| direct(l)) {
                    let crc = self.mapping.resolve(lba)?.crc;
                    return Some((Owner::Direct(lba), lba, crc, 0));
                }
                let id = shared()?;
                let (_, _, crc) = self.mapping.shared_entry(id)?;
                let no_lba = u64::from(crate::summary::NO_LBA);
                Some((Owner::Shared(id), no_lba, crc, 0))
            }
        }
    }

    /// The GC queue a victim block of `owner` read from the span at `first`
    /// joins: the kept queue when only snapshots hold it (and GC has
    /// streams of its own), else that of the victim's temperature.
    fn gc_queue_of(&self, owner: Owner, first: Ppa) -> usize {
        let streams = self.cfg.separate_gc_stream && self.cfg.temperature_streams;
        match owner {
            Owner::Shared(id) if streams && self.mapping.kept_only(id) => KEPT_QUEUE,
            _ => self.age_temp(self.zone_clock[first.zone(self.cap()) as usize]) as usize,
        }
    }

    pub(super) fn next_gc_append(&mut self) -> Option<(Op, Command)> {
        let copies_queued = self.gc_queues.iter().any(|q| !q.is_empty());
        if self.read_only || !copies_queued || !self.gc_budget_left() {
            return None;
        }
        // Leveling runs alone (`may_start_job`): its blocks are all queued.
        let wl = self
            .jobs
            .first()
            .is_some_and(|j| j.purpose == JobPurpose::StaticWl);
        // The longest queue goes first (ties to the hot one); one whose
        // zones are busy (`zone_max_appends`) lets a shorter one go.
        let mut queues: [usize; 3] = std::array::from_fn(|q| q);
        queues.sort_by_key(|&q| (std::cmp::Reverse(self.gc_queues[q].len()), q));
        queues.into_iter().find_map(|q| {
            (!self.gc_queues[q].is_empty())
                .then(|| self.gc_append_of(q, wl))
                .flatten()
        })
    }

    /// A GC append of queue `queue`'s blocks, if its lanes have room.
    fn gc_append_of(&mut self, queue: usize, wl: bool) -> Option<(Op, Command)> {
        // Relocated data joins the stream of its temperature: cold with cold
        // host writes, the rest in the GC stream (survivors of a collection);
        // blocks only snapshots hold in a stream of their own.
        let lane = match (wl, self.cfg.separate_gc_stream, queue) {
            (true, _, _) => Lane::WearLeveling,
            (false, false, _) => Lane::HostHot,
            (false, true, KEPT_QUEUE) => Lane::Kept,
            (false, true, q) if q == Temp::Cold as usize && self.cfg.temperature_streams => {
                Lane::HostCold
            }
            (false, true, _) => Lane::Gc,
        };
        let queued = self.gc_queues[queue].len() as u64;
        // Every victim read through: the last blocks go out padded.
        let urgent = self.reading_job().is_none() && !self.gc_reads_in_flight();
        // With no read on its way (the victims are read through, or the
        // pace waits for the host) the queue goes out as it is.
        let more_coming = self.gc_wide() && self.gc_reads_in_flight();
        let batch = if self.gc_wide() {
            GC_APPEND_BATCH_BLOCKS.min(self.append_max_blocks())
        } else {
            1
        };
        // GC and leveling (which frees what it moves) may use the reserve.
        let spread = self.gc_destination(lane);
        let wanted = queued.max(batch);
        let (lane, zone, room) = self
            .room_in(spread, wanted, true)
            .or_else(|| (spread != lane).then(|| self.room_in(lane, wanted, true))?)
            .or_else(|| self.extra_lane_room(wanted))?;
        let (n, pad) = self.batch_size(queued, room, urgent);
        if n == 0 || (more_coming && n < batch.min(room)) {
            return None;
        }
        let (mut data, mut oob) = (Payload::new(), self.alloc_oob(n + pad));
        let items: Vec<RelocItem> = self.gc_queues[queue].drain(..n as usize).collect();
        for it in &items {
            data.push(it.data.clone()); // a window of the GC read: no copy
            let t = Tag {
                kind: TagKind::Relocated,
                epoch: self.epoch,
                lba: it.tag_lba,
                seq: it.seq,
                data_crc: it.crc,
            };
            self.push_tag(&mut oob, &t);
        }
        self.push_padding(&mut data, &mut oob, pad, self.block_size());
        let newest = items.iter().map(|it| it.seq).max().unwrap_or(0);
        // Relocated data keeps the age of its youngest source: a hot block
        // GC moved must not look cold on its next write (erring hot is
        // cheaper than polluting cold zones).
        let cap = self.cap();
        let youngest = items
            .iter()
            .map(|it| self.zone_clock[it.src.zone(cap) as usize])
            .max()
            .unwrap_or(0);
        let clock = &mut self.zone_clock[zone as usize];
        *clock = (*clock).max(youngest);
        self.lane_commit(lane, zone, n + pad, newest);
        self.gc_in_flight += 1;
        self.stats.media_write_blocks += n + pad;
        self.stats.gc_copy_blocks += n;
        self.stats.wl_move_blocks += if wl { n } else { 0 };
        self.stats.gc_kept_blocks += if lane == Lane::Kept { n } else { 0 };
        self.stats.pad_blocks += pad;
        self.blocks_since_checkpoint += n + pad;
        Some((
            Op::GcAppend {
                zone,
                items,
                pad_blocks: pad as u32,
            },
            Command::Append { zone, data, oob },
        ))
    }

    /// Copied victims that may close at once.
    fn closing_jobs_max(&self) -> usize {
        if self.gc_wide() {
            CLOSING_JOBS_WIDE
        } else {
            CLOSING_JOBS
        }
    }

    /// GC spreads over zone groups and victims (`gc_lanes` or `gc_victims`
    /// above 1): it also reads spans and appends in batches.
    pub(super) fn gc_wide(&self) -> bool {
        self.cfg.gc_victims > 1 || self.extra_lanes().next().is_some()
    }

    /// Whether a GC read is on its way.
    fn gc_reads_in_flight(&self) -> bool {
        self.jobs.iter().any(|j| j.reads_in_flight > 0)
    }

    /// The lane a GC append of `base`'s stream goes to: of `base` and the
    /// extra lanes holding a zone of that stream, the one whose zone has the
    /// fewest appends in flight; once each has one in flight, an extra lane
    /// without a zone (it opens one on a zone group the open zones use
    /// least). One zone programs on one group's units: spread, GC's copies
    /// keep every group busy instead of queueing behind one zone.
    fn gc_destination(&mut self, base: Lane) -> Lane {
        if !matches!(base, Lane::Gc | Lane::HostCold) {
            return base;
        }
        let stream = base.stream();
        // A base lane without a zone opens one unless an extra lane of its
        // stream has room.
        let mut best = match self.lane_zone(base) {
            Some((zone, _)) => (self.zone_appends[zone as usize], base),
            None => (u32::MAX, base),
        };
        let mut closed = None;
        for lane in self.extra_lanes() {
            match self.lane_zone(lane) {
                Some((z, s)) if s == Some(stream) => {
                    let appends = self.zone_appends[z as usize];
                    if appends < best.0 {
                        best = (appends, lane);
                    }
                }
                Some(_) => {}
                None => closed = closed.or(Some(lane)),
            }
        }
        match (best, closed) {
            ((0, lane), _) | ((_, lane), None) | ((u32::MAX, lane), _) => lane,
            (_, Some(lane)) => {
                self.set_extra_stream(lane, stream);
                lane
            }
        }
    }

    /// Room in any extra lane or the kept lane that holds a zone, whatever
    /// its stream: the base lanes found no zone, and GC must not wait while
    /// an open zone has room (the kept lane may have taken the last free
    /// zone, which then holds what is left of the victim).
    fn extra_lane_room(&mut self, wanted: u64) -> Option<(Lane, ZoneId, u64)> {
        let mut lanes = self.extra_lanes().chain([Lane::Kept]);
        let lane = lanes.find(|&l| self.lane_zone(l).is_some())?;
        self.room_in(lane, wanted, true)
    }

    /// GC may use the reserve; with a shared stream it writes where the host does.
    pub(super) fn gc_append_done(
        &mut self,
        zone: ZoneId,
        items: Vec<RelocItem>,
        pad: u32,
        result: Result<Outcome, DeviceError>,
    ) {
        self.gc_in_flight -= 1;
        self.append_settled(zone);
        let cap = self.cap();
        let offset = match Self::appended_at(result) {
            Ok(offset) => offset,
            Err(e) => {
                self.stats.media_write_blocks -= items.len() as u64 + u64::from(pad);
                for it in items.into_iter().rev() {
                    self.gc_queues[Temp::Hot as usize].push_front(it);
                }
                self.write_failed(zone, e);
                return;
            }
        };
        self.appends_done += 1;
        self.host_write_failures = 0;
        let lbas = items.iter().map(|it| match it.owner {
            Owner::Direct(lba) => lba,
            Owner::Shared(_) => u64::from(crate::summary::NO_LBA),
        });
        super::summaries::note_run(&mut self.summaries, zone, offset, lbas);
        for it in &items {
            self.job_settled(it.src.zone(cap));
        }
        for (i, it) in items.into_iter().enumerate() {
            let dst = Ppa::new(zone, offset + i as u64, cap);
            // A host write, trim or range operation that won the race keeps
            // its mapping; the copy is dead space.
            let note = match it.owner {
                Owner::Direct(lba) => {
                    if self.range_holds(lba)
                        || !self.mapping.relocate_direct(lba, it.src, dst, it.crc)
                    {
                        continue;
                    }
                    self.relocation_note(lba, &it, dst)
                }
                Owner::Shared(id) => {
                    if !self.mapping.relocate_shared(id, it.src, dst) {
                        continue;
                    }
                    Note::SharedReloc {
                        seq: self.take_seq(),
                        from: it.src,
                        to: dst,
                    }
                }
            };
            self.log.push_note(note);
        }
    }

    /// The note that moves `it`'s mapping to `dst` in recovery. With OOB
    /// tags recovery may know a version written since the checkpoint only
    /// from its tag, which the victim's reset erases: the note names the
    /// version (its seq) rather than the old location. In band the version's
    /// own note stays in the log, and GC does not know its seq.
    fn relocation_note(&mut self, lba: Lba, it: &RelocItem, dst: Ppa) -> Note {
        let seq = self.take_seq();
        match self.tag_mode {
            // A tag's seq at or past the present is damage its CRC missed:
            // then the older rule, which needs no version (never a panic).
            // While snapshots keep books every version's place is logged
            // (`notes_every_change`), and a copy must name where it came
            // from: a kept version may be what moved.
            TagMode::Oob if it.seq < seq && !self.notes_every_change() => Note::Relocated {
                seq,
                lba,
                to: dst,
                version_seq: it.seq,
            },
            _ => Note::Reloc {
                seq,
                lba,
                from: it.src,
                to: dst,
            },
        }
    }

    /// Drives a job to its note, flush and reset once its copies are done.
    /// The note on it hands the job to `closing` (at most
    /// `closing_jobs_max`; another copied job waits), and the running jobs go on copying while
    /// it waits for the log, the flush and the reset.
    pub(super) fn advance_job(&mut self) {
        self.advance_closing();
        if self.closing.len() >= self.closing_jobs_max() {
            return;
        }
        // What a mount changed without a note (non-persistent ranges
        // dropped after a crash) only its checkpoint records: a ZoneReset
        // note before that commits would be replayed against shared
        // entries the next mount's replay still holds.
        if self.first_checkpoint_pending {
            return;
        }
        // A job is copied once its victim is read through and every block
        // read from it has been copied (its appends completed).
        let copied = |j: &GcJob| {
            matches!(j.phase, JobPhase::Copying)
                && j.scan_offset >= self.zones.get(j.victim).write_pointer_blocks()
                && j.reads_in_flight == 0
                && j.retries.is_empty()
                && j.pending == 0
        };
        // A job started before the fence went up may hold a fenced victim:
        // its note waits (the note, not only the reset, ends the tags'
        // worth to replay).
        let fenced = self
            .jobs
            .iter()
            .any(|j| copied(j) && self.reset_fenced(j.victim));
        let ready = self
            .jobs
            .iter()
            .position(|j| copied(j) && !self.reset_fenced(j.victim));
        if fenced {
            self.request_fence_checkpoint();
        }
        let Some(i) = ready else { return };
        let victim = self.jobs[i].victim;
        let job = &mut self.jobs[i];
        job.unreadable.retain(|&p| self.mapping.is_live(p));
        let stuck = job.unreadable.len() as u64;
        if self.mapping.valid_blocks(victim) > stuck {
            // Blocks became live behind the scan (cannot happen for a
            // Full zone) or a write raced: rescan.
            job.scan_offset = 0;
            return;
        }
        if stuck > 0 {
            job.purpose = JobPurpose::Retire;
        }
        let purpose = job.purpose;
        let seq = self.take_seq();
        let note = if purpose == JobPurpose::Retire {
            Note::ZoneRetire { seq, zone: victim }
        } else {
            Note::ZoneReset {
                seq,
                zone: victim,
                erase_count: self.zones.get(victim).erase_count() + 1,
            }
        };
        self.log.push_note(note);
        self.log.pack(true);
        let log_barrier = self.log.next_log_seq();
        let mut job = self.jobs.remove(i);
        self.release_moves(job.victim, job.reserved_entries);
        job.reserved_entries = 0;
        job.phase = JobPhase::Noting { log_barrier };
        self.closing.push(job);
        self.advance_closing();
    }

    /// A closing job's note is durable: retire its victim, or go on to the
    /// flush and reset.
    fn advance_closing(&mut self) {
        let durable = self.log.durable_next();
        let mut retired = Vec::new();
        self.closing.retain_mut(|job| match job.phase {
            JobPhase::Noting { log_barrier } if durable >= log_barrier => {
                if job.purpose == JobPurpose::Retire {
                    retired.push(job.victim);
                    return false;
                }
                job.phase = JobPhase::ReadyToFlush;
                true
            }
            _ => true,
        });
        for victim in retired {
            self.retire_zone(victim);
        }
    }

    /// A part of the victim's summary was read: read the next, or, with
    /// all of it (or a failed read), build its LBA table and start copying.
    pub(super) fn victim_summary_read(
        &mut self,
        zone: ZoneId,
        count: u32,
        result: Result<Outcome, DeviceError>,
    ) {
        let bs = self.block_size();
        let want = self.summary_encoded_blocks() as usize * bs;
        let job = self.job_of(zone).expect("summary read of a running job");
        let mut summary = std::mem::take(&mut job.summary);
        let ok = match result {
            Ok(Outcome::Read { data, .. }) if data.len() == count as usize * bs => {
                summary.extend_from_slice(&data);
                true
            }
            _ => false,
        };
        if ok && summary.len() < want {
            let job = self.job_of(zone).expect("job");
            job.summary = summary;
            job.phase = JobPhase::Summary { issued: false };
            return;
        }
        let shared = std::mem::take(&mut self.job_of(zone).expect("job").shared);
        let lbas = self.victim_lbas(zone, ok.then_some(&summary[..]), &shared);
        let job = self.job_of(zone).expect("job");
        job.lbas = Some(lbas);
        job.shared = shared;
        job.phase = JobPhase::Copying;
    }

    pub(super) fn victim_flushed(&mut self, zone: ZoneId, result: Result<Outcome, DeviceError>) {
        if result.is_err() {
            self.metadata_failed();
            return;
        }
        let since_ns = self.now_ns;
        if let Some(job) = self.closing.iter_mut().find(|j| j.victim == zone) {
            job.phase = JobPhase::ReadyToReset {
                since_ns,
                yielded: false,
            };
        }
    }

    pub(super) fn victim_reset_done(&mut self, zone: ZoneId, result: Result<Outcome, DeviceError>) {
        self.closing.retain(|j| j.victim != zone);
        let was_nameless = self.zones.get(zone).kind().is_nameless();
        match result {
            Ok(_) => {
                self.mapping.zone_reset(zone);
                self.zones.release(zone);
                self.stats.erases += 1;
            }
            Err(DeviceError::DeviceGone) => {}
            Err(_) => {
                let seq = self.take_seq();
                self.log.push_note(Note::ZoneRetire { seq, zone });
                self.retire_zone(zone);
            }
        }
        if was_nameless && !self.zones.get(zone).kind().is_nameless() {
            self.nameless_zone_gone(zone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::conformance::tests::{Quirks, RefDevice};
    use crate::backend::Geometry;
    use crate::config::{FormatOptions, FtlConfig};
    use crate::zone::ZoneUse;
    use crate::Driver;

    const ZONE_BLOCKS: u64 = 32;

    fn geometry() -> Geometry {
        Geometry {
            block_size_bytes: 512,
            oob_size_bytes: 64,
            zone_count: 24,
            zone_size_blocks: ZONE_BLOCKS,
            zone_capacity_blocks: ZONE_BLOCKS,
            write_unit_blocks: 1,
            max_append_blocks: 8,
            max_transfer_blocks: 16,
            max_open_zones: 0,
            max_active_zones: 0,
            parallel_units: 1,
            zone_groups: 1,
            queue_depth: 8,
        }
    }

    /// A full data zone whose live blocks number within `live`.
    fn full_zone(ftl: &Ftl, live: std::ops::Range<u64>) -> Option<ZoneId> {
        ftl.zones
            .iter()
            .find(|&(z, zone)| {
                zone.state() == ZoneUse::Full
                    && zone.kind().is_gc_collected()
                    && live.contains(&ftl.mapping.valid_blocks(z))
            })
            .map(|(z, _)| z)
    }

    /// GC holds a victim whose live blocks wait for room and may start no
    /// other job: a zone with nothing live is still collected beside it
    /// (its job copies nothing, and its reset frees a zone).
    #[test]
    fn an_empty_victim_starts_beside_a_held_one() {
        let mut quirks = Quirks::default();
        quirks.all_online = true;
        let device = RefDevice::new(geometry(), quirks, 1);
        let cfg = FtlConfig {
            gc_victims: 1,
            ..FtlConfig::default()
        };
        let mut driver = Driver::format(device, &FormatOptions::default(), cfg).expect("format");
        let block = vec![0x5A; 512];
        for lba in 0..ZONE_BLOCKS * 3 {
            driver.write(lba, &block).expect("write");
        }
        // The first zone's LBAs written again leave it with nothing live;
        // a trim leaves the next one a victim with live blocks.
        for lba in 0..ZONE_BLOCKS {
            driver.write(lba, &block).expect("overwrite");
        }
        driver.trim(ZONE_BLOCKS, 1).expect("trim");
        driver.flush().expect("flush");
        let ftl = driver.ftl_mut();
        assert!(ftl.jobs.is_empty() && ftl.closing.is_empty());
        let empty = full_zone(ftl, 0..1).expect("a full zone with nothing live");
        let held = full_zone(ftl, 1..ZONE_BLOCKS).expect("a full zone with live blocks");
        // The held victim is read through; its copies wait for room.
        let mut job = ftl.job_for(held, JobPurpose::Gc);
        job.scan_offset = ftl.zones.get(held).write_pointer_blocks();
        ftl.jobs.push(job);
        // Free zones at the reserve: GC is urgent.
        ftl.gc_reserve_zones = ftl.zones.free_count();
        assert!(ftl.reading_job().is_none() && !ftl.may_start_job());
        assert_eq!(ftl.empty_gc_victim(), Some(empty));
        let _ = ftl.next_job_command();
        assert!(
            ftl.jobs.iter().any(|j| j.victim == empty),
            "no job for zone {empty}, which holds nothing live: {}",
            ftl.debug_state()
        );
    }
}
