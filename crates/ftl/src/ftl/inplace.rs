//! In-place collection of a nameless zone on ZNS (docs/design.md,
//! "In-place collection on ZNS"): the victim's live blocks are staged in a
//! scratch zone, made durable and noted (`InPlaceStaged`), the victim is
//! reset and rewritten from offset 0 with every live block at its old
//! offset (its original tag), and `InPlaceDone` ends the job. Each gap
//! takes a block of a queued nameless write or overwrite (a gap fill, born
//! with the job's gap generation, answered once `InPlaceDone` is durable;
//! an overwrite's old block is freed then), or a pad block when none is
//! queued: the fills are the room a job frees.
//!
//! With md in the log (in band) no block carries a tag: the scratch zone
//! keeps a staging index (md blocks of kind 2) after each group of staged
//! blocks, the victim's entries come from its md blocks, the rewrite
//! writes each group's md blocks after it, and a gap fill's record is its
//! NamelessWrite and NamelessMd notes. Layout and crash analysis:
//! docs/format.md §11, crash step 9, "Placement log".
//!
//! One command of the job is in flight at a time. No checkpoint is
//! captured between the `InPlaceStaged` push and a durable `InPlaceDone`
//! (a mount redoes a pending job from the log alone: `recovery::inplace`,
//! which drops the fills: none was answered).

use super::nameless::GapFill;
use super::{Ftl, Op};
use crate::addr::Ppa;
use crate::backend::{Command, DeviceError, Outcome, Payload, ReadPriority, ZoneId};
use crate::error::IoError;
use crate::nameless::{
    MdBlock, MdBlockKind, MdEntry, MdLayout, NamelessAddr, NamelessTag, NamelessTagKind,
};
use crate::note::Note;
use crate::zone::{Stream, ZoneKind, ZoneUse};
use std::collections::VecDeque;

/// The most blocks one read or write of a job spans.
const INPLACE_SPAN_BLOCKS: u64 = 64;

/// A device command of the in-place job.
#[derive(Debug)]
pub(super) enum InPlaceOp {
    /// Live blocks of the victim, to stage.
    StageRead { first: u64, count: u32 },
    /// In band: the victim's md blocks holding the entries of a run to
    /// stage, `blocks` from `at`.
    StageMdRead { at: u64, blocks: u32 },
    /// In band: the staging index of a group of staged blocks, written
    /// after them.
    StageIndexWrite { count: u64 },
    /// In band: the staging index of group `group` of the scratch zone,
    /// read back before its blocks.
    ScratchIndexRead { group: u64, blocks: u32 },
    /// Staged copies written at the scratch zone's write pointer.
    StageWrite { count: u64 },
    /// The flush after staging or after the rewrite.
    Flush,
    /// The victim's reset.
    Reset { zone: ZoneId },
    /// Staged copies read back for the rewrite.
    ScratchRead { count: u32 },
    /// Blocks rewritten at the victim's write pointer.
    Rewrite { count: u64 },
}

impl InPlaceOp {
    /// The command to issue again after a host-side failure: the
    /// idempotent ones (the flushes and the victim's reset).
    pub(super) fn repeatable(&self) -> Option<Command> {
        match *self {
            InPlaceOp::Flush => Some(Command::Flush),
            InPlaceOp::Reset { zone } => Some(Command::Reset { zone }),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Staging,
    StageFlush,
    /// `InPlaceStaged` is pushed; waits until the log is durable through it.
    Noting {
        log_barrier: u64,
    },
    /// Waits for the victim's readers, then resets it.
    Reset,
    Rewriting,
    RewriteFlush,
    /// `InPlaceDone` is pushed; waits until the log is durable through it.
    Done {
        log_barrier: u64,
    },
}

/// A staged block read back: its home offset, data and OOB (kind 7 tag).
#[derive(Debug)]
struct Staged {
    home: u64,
    data: Vec<u8>,
    tag: NamelessTag,
    md: Vec<u8>,
}

/// A candidate of GC's in-place victim: `benefit` blocks reclaimed for
/// `cost` µs, `valid` live blocks to stage and rewrite.
#[derive(Clone, Copy, Debug)]
pub(super) struct InPlaceScore {
    pub(super) zone: ZoneId,
    pub(super) valid: u64,
    pub(super) benefit: u64,
    cost: u128,
}

impl InPlaceScore {
    /// A better benefit per cost (exact: cross-multiplied).
    fn beats(&self, other: &InPlaceScore) -> bool {
        u128::from(self.benefit) * other.cost > u128::from(other.benefit) * self.cost
    }

    /// Frees more blocks per block written than a logical victim with
    /// `valid` of `cap` blocks live: `benefit / (2 × N_valid)` (stage and
    /// rewrite) against `(cap - valid) / valid`.
    pub(super) fn beats_logical(&self, valid: u64, cap: u64) -> bool {
        u128::from(self.benefit) * u128::from(valid)
            > 2 * u128::from(self.valid) * u128::from(cap - valid)
    }
}

/// The nameless blocks that may fill gaps arriving per time (S_write,
/// `Ftl::inplace_arrivals`): over the last window of
/// `ARRIVAL_WINDOW_BLOCKS` media writes, from the times the driver passes
/// in (`Ftl::handle_time`).
#[derive(Debug, Default)]
pub(super) struct Arrivals {
    since_ns: u64,
    since_blocks: u64,
    since_media: u64,
    /// The last window's nameless blocks and ns.
    blocks: u64,
    ns: u64,
}

/// Media write blocks per window of the arrival rate.
const ARRIVAL_WINDOW_BLOCKS: u64 = 4096;

impl Arrivals {
    /// The last full window's (blocks, ns), the window moved on when due.
    /// `admitted`: nameless blocks admitted so far; `media`: media
    /// write blocks so far.
    fn rate(&mut self, now_ns: u64, admitted: u64, media: u64) -> (u64, u64) {
        if media >= self.since_media + ARRIVAL_WINDOW_BLOCKS {
            // `admitted` counts other blocks once migrations stop or
            // resume: that window's rate is off, never negative.
            self.blocks = admitted.saturating_sub(self.since_blocks);
            self.ns = now_ns.saturating_sub(self.since_ns);
            self.since_ns = now_ns;
            self.since_blocks = admitted;
            self.since_media = media;
        }
        (self.blocks, self.ns)
    }
}

/// The running in-place job (at most one).
#[derive(Debug)]
pub(super) struct InPlaceJob {
    victim: ZoneId,
    scratch: ZoneId,
    phase: Phase,
    /// A command of the job is in flight.
    busy: bool,
    /// Staging: the next offset of the victim to look at.
    scan: u64,
    /// Staging: blocks read and waiting for their write to the scratch zone.
    to_stage: Option<(Payload, Vec<u8>, u64)>,
    /// Blocks staged in the scratch zone (from offset 0).
    staged: u64,
    /// Rewrite: staged blocks read back so far, and those not yet rewritten.
    read_back: u64,
    ready: VecDeque<Staged>,
    /// Rewrite: the victim's write pointer after the writes completed, and
    /// after those issued.
    rewritten: u64,
    rewrite_issued: u64,
    pads: u64,
    /// The generation of the job's gap fills (the victim's `gen + 1`,
    /// logged in `InPlaceStaged`); 0 before the note.
    gap_gen: u32,
    /// Gap fills of the rewrite command in flight, and those written,
    /// waiting for `InPlaceDone` to be durable to be answered.
    fills_in_flight: Vec<GapFill>,
    fills: Vec<GapFill>,
    /// Gap fills so far: the next in-place victim's score takes them as
    /// N_last.
    fill_blocks: u64,
    /// With md in the log: the staging index and the victim's md groups.
    band: Option<Band>,
}

/// The in-band part of a job: at most a group's entries at each step.
#[derive(Debug)]
struct Band {
    layout: MdLayout,
    md_bytes: usize,
    /// Staging: the run of the victim to stage next, and its entries once
    /// known (from memory or its md blocks).
    run: Option<(u64, u64, Option<Vec<MdEntry>>)>,
    /// Staging: the entries of the scratch zone's group being staged (its
    /// staging index), and that group's index.
    index: Vec<MdEntry>,
    index_group: u64,
    /// Staging: encoded index blocks not yet written.
    index_out: VecDeque<Vec<u8>>,
    /// Rewrite: the staging index of the scratch group being read back,
    /// entries not yet matched with their blocks.
    back_index: VecDeque<MdEntry>,
    /// Rewrite: the entries of the victim's group being rewritten.
    group: Vec<MdEntry>,
}

/// What an offset of the victim's rewrite holds (`Ftl::inplace_band_slot`).
enum BandSlot {
    Data,
    Md(Vec<u8>),
    Leftover,
}

/// The next read back from the scratch zone: staged copies (in band, of
/// the scratch group whose index was read), or, in band at a group's
/// start, that group's staging index.
fn scratch_read_back(job: &InPlaceJob, scratch: ZoneId, span: u64) -> (InPlaceOp, Command) {
    let read = |op, offset_blocks, block_count| {
        let cmd = Command::Read {
            zone: scratch,
            offset_blocks,
            block_count,
            priority: ReadPriority::Background,
        };
        (op, cmd)
    };
    let Some(b) = job.band.as_ref() else {
        let count = span.min(job.staged - job.read_back) as u32;
        return read(InPlaceOp::ScratchRead { count }, job.read_back, count);
    };
    if b.back_index.is_empty() {
        let group = job.read_back / b.layout.group_blocks;
        let d = b.staged_in_group(group, job.staged);
        let blocks = b.layout.md_blocks_for(d) as u32;
        let at = b.layout.group_start(group) + d;
        return read(InPlaceOp::ScratchIndexRead { group, blocks }, at, blocks);
    }
    let count = span.min(b.back_index.len() as u64) as u32;
    let at = b.staged_offset(job.read_back);
    read(InPlaceOp::ScratchRead { count }, at, count)
}

/// The read of `count` live blocks of `victim` from `first`, to stage.
fn stage_read(victim: ZoneId, first: u64, count: u64) -> (InPlaceOp, Command) {
    (
        InPlaceOp::StageRead {
            first,
            count: count as u32,
        },
        Command::Read {
            zone: victim,
            offset_blocks: first,
            block_count: count as u32,
            priority: ReadPriority::Background,
        },
    )
}

impl Band {
    /// The staging group's entries are complete: its index blocks are
    /// encoded for writing and the next group starts.
    fn seal_index(&mut self, victim: ZoneId, bs: usize) {
        let entries = std::mem::take(&mut self.index);
        let blocks = self.encode_group(
            MdBlockKind::StagingIndex,
            victim,
            self.index_group,
            &entries,
            bs,
        );
        self.index_out.extend(blocks);
        self.index_group += 1;
    }

    /// The scratch offset of staged block `i` (data offset `i` of the
    /// full-zone layout).
    fn staged_offset(&self, i: u64) -> u64 {
        let g = self.layout.group_blocks;
        self.layout.group_start(i / g) + i % g
    }

    /// Staged blocks of scratch group `k` when `staged` were staged.
    fn staged_in_group(&self, k: u64, staged: u64) -> u64 {
        let g = self.layout.group_blocks;
        staged.saturating_sub(k * g).min(g)
    }

    /// The md blocks of group `group` of `zone` (`kind`) for `entries`,
    /// encoded.
    fn encode_group(
        &self,
        kind: MdBlockKind,
        zone: ZoneId,
        group: u64,
        entries: &[MdEntry],
        bs: usize,
    ) -> Vec<Vec<u8>> {
        let e = self.layout.entries_per_block as usize;
        entries
            .chunks(e)
            .enumerate()
            .map(|(i, chunk)| {
                MdBlock {
                    kind,
                    md_bytes: self.md_bytes,
                    zone,
                    group: group as u32,
                    first_entry: (i * e) as u32,
                    group_data_blocks: entries.len() as u32,
                    entries: chunk.to_vec(),
                }
                .encode(bs)
            })
            .collect()
    }
}

impl Ftl {
    /// Starts an in-place collection of nameless zone `zone`, if one may
    /// run now: no job running, the zone Full, not held by a
    /// lane or another job, its newest block older than the committed
    /// checkpoint, a free zone for scratch and two open zones of the
    /// device's budget, no checkpoint due.
    /// Returns whether it started.
    pub fn start_in_place(&mut self, zone: ZoneId) -> bool {
        let ok = self.inplace_may_start()
            && zone < self.geo.zone_count
            && self.zones.get(zone).kind().is_nameless()
            && self.zones.get(zone).state() == ZoneUse::Full
            && self.zones.get(zone).last_write_seq() < self.committed_next_seq
            && !self.excluded(zone);
        if !ok {
            return false;
        }
        let kind = ZoneKind::Data {
            stream: Stream::Host,
        };
        let Some(scratch) = self.zones.take_free(kind) else {
            return false;
        };
        self.inplace = Some(InPlaceJob {
            victim: zone,
            scratch,
            phase: Phase::Staging,
            busy: false,
            scan: 0,
            to_stage: None,
            staged: 0,
            read_back: 0,
            ready: VecDeque::new(),
            rewritten: 0,
            rewrite_issued: 0,
            pads: 0,
            gap_gen: 0,
            fills_in_flight: Vec::new(),
            fills: Vec::new(),
            fill_blocks: 0,
            band: self.nameless.md.as_ref().map(|m| Band {
                layout: m.layout,
                md_bytes: m.md_bytes,
                run: None,
                index: Vec::new(),
                index_group: 0,
                index_out: VecDeque::new(),
                back_index: VecDeque::new(),
                group: Vec::new(),
            }),
        });
        self.advanced_then_read = false;
        true
    }

    /// Whether a job may start on some zone: none running, a free zone for
    /// scratch and two open zones of the device's budget, no checkpoint
    /// due.
    fn inplace_may_start(&self) -> bool {
        self.nameless.supported
            && self.inplace.is_none()
            && !self.read_only
            && !self.first_checkpoint_pending
            && self.zones.free_count() > 0
            // The log keeps its room for two checkpoints while none may
            // be captured (the job's notes and the host's meanwhile).
            && !self.checkpoint_due()
            // The scratch zone and the victim's rewrite each hold an open
            // zone of the device's budget for the whole job.
            && self.may_open_data_zone(1)
    }

    /// GC's in-place victim (docs/design.md, "Choosing a victim"): of the
    /// Full nameless zones a job may take, the one of the best ratio of
    /// the paper's §4.2 benefit (blocks the gap fills reclaim) to cost
    /// (µs of the job), with the benefit; none when no zone would free a
    /// block. Asks for a checkpoint when only a younger zone would do.
    /// O(zones).
    pub(super) fn inplace_victim(&mut self) -> Option<InPlaceScore> {
        if self.zones.nameless_zone_count() == 0 || !self.inplace_may_start() {
            return None;
        }
        let (cap, t) = (self.data_cap(), self.cfg.nameless_cost_us);
        let (n_wait, admitted) = self.inplace_arrivals();
        let n_last = self.last_inplace_fills;
        let media = self.stats.media_write_blocks;
        let (rate_blocks, rate_ns) = self.arrivals.rate(self.now_ns, admitted, media);
        let score = |z: ZoneId, n_valid: u64, data_blocks: u64| {
            // Blocks arriving while the job writes: T_write × (N_valid +
            // N_wait) µs at S_write blocks per µs.
            let arriving = (u128::from(t.write_us)
                * u128::from(n_valid + n_wait)
                * u128::from(rate_blocks)
                * 1000)
                .checked_div(u128::from(rate_ns))
                .unwrap_or(0);
            let dead = data_blocks.saturating_sub(n_valid);
            let benefit = u128::from(dead).min(u128::from(n_wait + n_last) + arriving);
            let cost =
                u128::from(t.erase_us) + u128::from(t.read_us + t.write_us) * u128::from(n_valid);
            InPlaceScore {
                zone: z,
                valid: n_valid,
                benefit: benefit as u64,
                cost: cost.max(1),
            }
        };
        let young = |z: ZoneId| self.zones.get(z).last_write_seq() >= self.committed_next_seq;
        let mut best: Option<InPlaceScore> = None;
        let mut waits = false;
        for (z, zone) in self.zones.iter() {
            let n_valid = self.mapping.valid_blocks(z);
            if !zone.kind().is_nameless()
                || zone.state() != ZoneUse::Full
                || n_valid >= cap
                || self.excluded(z)
            {
                continue;
            }
            // In band its md blocks hold no data (and no zone summary is
            // written): only dead data blocks can be filled.
            let data_blocks = match self.md_in_zones() {
                true => self.cap() - self.nameless_non_data_blocks(z),
                false => cap,
            };
            let s = score(z, n_valid, data_blocks);
            if s.benefit == 0 {
                continue;
            }
            if young(z) {
                waits = true;
                continue;
            }
            if best.as_ref().is_none_or(|b| s.beats(b)) {
                best = Some(s);
            }
        }
        if best.is_none() && waits && matches!(self.ckpt, super::ckpt::CkptState::Idle) {
            self.ckpt_requested = true;
        }
        best
    }

    /// N_wait and the admitted blocks S_write is taken from: of writes and
    /// overwrites once migrations stopped (both are admitted past the dead
    /// blocks unacknowledged moves hold, for gap fills to reclaim them),
    /// of plain writes while migrations run (an overwrite frees its old
    /// block wherever it lands: counting it made GC pick in-place victims
    /// a migration collects for less, as `zftl bench nameless` measured).
    fn inplace_arrivals(&self) -> (u64, u64) {
        let n = &self.nameless;
        match self.migration_stopped() {
            true => (n.queued_blocks(), n.admitted_blocks),
            false => (n.queued_new_blocks(), n.admitted_new_blocks),
        }
    }

    /// Whether an in-place job is running.
    pub fn in_place_running(&self) -> bool {
        self.inplace.is_some()
    }

    /// Zones the in-place job holds (victim and scratch): no other job
    /// takes them.
    pub(super) fn inplace_holds(&self, zone: ZoneId) -> bool {
        self.inplace
            .as_ref()
            .is_some_and(|j| j.victim == zone || j.scratch == zone)
    }

    /// No checkpoint is captured from the `InPlaceStaged` push until
    /// `InPlaceDone` is durable (the mount redoes the job from the log):
    /// none starts once the staging flush is issued, which waits for one
    /// being captured.
    pub(super) fn inplace_blocks_checkpoint(&self) -> bool {
        self.inplace
            .as_ref()
            .is_some_and(|j| j.phase != Phase::Staging)
    }

    /// A read of `ppa` waits: its block is in a victim being reset or
    /// rewritten, and the rewrite has not passed it. Not once the volume is
    /// read-only: the job stops, and such a read gets the device's error
    /// or a checksum mismatch (the mount redoes the job).
    pub(super) fn inplace_parks(&self, ppa: Ppa) -> bool {
        let cap = self.cap();
        !self.read_only
            && self.inplace_rewriting()
            && self.inplace.as_ref().is_some_and(|j| {
                let offset = ppa.offset_blocks(cap);
                // In band a block's entry is read from its group's md
                // blocks: they must be rewritten too.
                let needs = j.band.as_ref().map_or(offset, |b| {
                    let l = &b.layout;
                    let k = l.group_of(offset);
                    let d = l.group_data_blocks(k);
                    l.group_start(k) + d + l.md_blocks_for(d) - 1
                });
                ppa.zone(cap) == j.victim && needs >= j.rewritten
            })
    }

    /// Whether the victim is being reset or rewritten: hand-over reads wait.
    pub(super) fn inplace_rewriting(&self) -> bool {
        self.inplace.as_ref().is_some_and(|j| {
            matches!(
                j.phase,
                Phase::Rewriting | Phase::RewriteFlush | Phase::Done { .. }
            ) || (j.phase == Phase::Reset && j.busy)
        })
    }

    /// The next command of the in-place job, if one is due.
    pub(super) fn next_inplace_command(&mut self) -> Option<(Op, Command)> {
        if self.read_only {
            return None;
        }
        self.advance_inplace();
        let job = self.inplace.as_ref()?;
        if job.busy {
            return None;
        }
        let (victim, scratch) = (job.victim, job.scratch);
        let (op, cmd) = match job.phase {
            Phase::Staging => self.next_stage_command(victim, scratch)?,
            Phase::StageFlush | Phase::RewriteFlush => (InPlaceOp::Flush, Command::Flush),
            Phase::Noting { .. } | Phase::Done { .. } => return None,
            Phase::Reset => {
                if self.zone_readers[victim as usize] > 0 || self.zone_appends[victim as usize] > 0
                {
                    return None;
                }
                (
                    InPlaceOp::Reset { zone: victim },
                    Command::Reset { zone: victim },
                )
            }
            Phase::Rewriting => self.next_rewrite_command(victim, scratch)?,
        };
        self.inplace.as_mut().expect("job").busy = true;
        Some((Op::InPlace(op), cmd))
    }

    /// Staging: write what was read, or read the next run of live blocks,
    /// or, once the victim is read through, go on to the flush. In band a
    /// run's entries come first, and each full group of staged blocks, and
    /// the last, is followed by its staging index.
    fn next_stage_command(
        &mut self,
        victim: ZoneId,
        scratch: ZoneId,
    ) -> Option<(InPlaceOp, Command)> {
        let cap = self.cap();
        let scratch_wp = self.zones.get(scratch).write_pointer_blocks();
        let span = self.inplace_span();
        let job = self.inplace.as_mut().expect("job");
        if let Some((data, oob, count)) = job.to_stage.take() {
            return Some((
                InPlaceOp::StageWrite { count },
                Command::Write {
                    zone: scratch,
                    offset_blocks: scratch_wp,
                    data,
                    oob,
                },
            ));
        }
        if let Some(b) = job.band.as_mut() {
            if !b.index_out.is_empty() {
                let n = span.min(b.index_out.len() as u64);
                let mut data = Payload::new();
                for _ in 0..n {
                    data.push(b.index_out.pop_front().expect("an index block").into());
                }
                return Some((
                    InPlaceOp::StageIndexWrite { count: n },
                    Command::Write {
                        zone: scratch,
                        offset_blocks: scratch_wp,
                        data,
                        oob: vec![0; self.geo.oob_bytes(n)],
                    },
                ));
            }
            if let Some((first, count, Some(_))) = b.run {
                return Some(stage_read(victim, first, count));
            }
        }
        let end = self.zones.get(victim).write_pointer_blocks();
        // In band a run stays within the scratch zone's group.
        let room = self
            .inplace
            .as_ref()
            .expect("job")
            .band
            .as_ref()
            .map_or(span, |b| {
                span.min(b.layout.group_blocks - b.index.len() as u64)
            });
        let live = |o: u64| self.mapping.is_live(Ppa::new(victim, o, cap));
        let mut first = self.inplace.as_ref().expect("job").scan;
        while first < end && !live(first) {
            first += 1;
        }
        if first >= end {
            if self.inplace_index_due(victim) {
                return self.next_stage_command(victim, scratch);
            }
            if matches!(self.ckpt, super::ckpt::CkptState::Draining) {
                return None; // the note must follow the capture
            }
            let job = self.inplace.as_mut().expect("job");
            job.scan = end;
            job.phase = Phase::StageFlush;
            return Some((InPlaceOp::Flush, Command::Flush));
        }
        let mut count = 1;
        while count < room && first + count < end && live(first + count) {
            count += 1;
        }
        self.inplace.as_mut().expect("job").scan = first + count;
        if self.md_in_zones() {
            return Some(self.stage_run_md(victim, first, count));
        }
        Some(stage_read(victim, first, count))
    }

    /// In band, a run of `count` live blocks from `first` of the victim:
    /// its entries from memory (a group whose md blocks are not written),
    /// then its data read; or its md blocks read first.
    fn stage_run_md(&mut self, victim: ZoneId, first: u64, count: u64) -> (InPlaceOp, Command) {
        let m = self.nameless.md.as_ref().expect("md placement log");
        let known: Option<Vec<MdEntry>> = (first..first + count)
            .map(|o| m.entry(victim, o).filter(|e| e.is_present()).cloned())
            .collect();
        let located = (
            m.md_location(victim, first),
            m.md_location(victim, first + count - 1),
        );
        let b = self
            .inplace
            .as_mut()
            .expect("job")
            .band
            .as_mut()
            .expect("in band");
        if known.is_some() {
            b.run = Some((first, count, known));
            return stage_read(victim, first, count);
        }
        b.run = Some((first, count, None));
        let (Some((at, _)), Some((last, _))) = located else {
            // A live block past its zone's data end: a bug.
            panic!("zone {victim}: live blocks {first}..+{count} have no md location");
        };
        let blocks = (last + 1 - at) as u32;
        (
            InPlaceOp::StageMdRead { at, blocks },
            Command::Read {
                zone: victim,
                offset_blocks: at,
                block_count: blocks,
                priority: ReadPriority::Background,
            },
        )
    }

    /// In band, once the victim is read through: the last group's staging
    /// index, if it is not written yet, is encoded for writing. Returns
    /// whether it was.
    fn inplace_index_due(&mut self, victim: ZoneId) -> bool {
        let bs = self.block_size();
        let Some(b) = self.inplace.as_mut().and_then(|j| j.band.as_mut()) else {
            return false;
        };
        if b.index.is_empty() {
            return false;
        }
        b.seal_index(victim, bs);
        true
    }

    /// Rewriting: the next run of the victim from its write pointer (live
    /// staged blocks at their offsets with their original tags, pads in the
    /// gaps), or staged copies read back first, or, once the victim is
    /// written to its capacity, the flush.
    fn next_rewrite_command(
        &mut self,
        victim: ZoneId,
        scratch: ZoneId,
    ) -> Option<(InPlaceOp, Command)> {
        let cap = self.cap();
        let span = self.inplace_span();
        let job = self.inplace.as_ref().expect("job");
        let at = job.rewrite_issued;
        if at >= cap {
            self.inplace.as_mut().expect("job").phase = Phase::RewriteFlush;
            return Some((InPlaceOp::Flush, Command::Flush));
        }
        if job.ready.is_empty() && job.read_back < job.staged {
            return Some(scratch_read_back(job, scratch, span));
        }
        let (bs, ob) = (self.block_size(), self.geo.oob_size_bytes as usize);
        let (mut data, mut oob) = (Payload::new(), Vec::new());
        let (mut pads, mut newest) = (0, 0);
        // Each fill takes 8 bytes of every checkpoint (section 24) until
        // freed: past the room left, gaps are padded.
        let mut fill_room = self.checkpoint_room_bytes() / 8;
        let (gap_gen, in_band) = (job.gap_gen, job.band.is_some());
        let mut fills = Vec::new();
        let mut o = at;
        while o < (at + span).min(cap) {
            // In band: the group md blocks, and blocks past the last group.
            match self.inplace_band_slot(victim, o) {
                BandSlot::Data => {}
                BandSlot::Md(block) => {
                    let at_oob = oob.len();
                    oob.resize(at_oob + ob, 0);
                    data.push(block.into());
                    self.stats.nameless_md_write_blocks += 1;
                    o += 1;
                    continue;
                }
                BandSlot::Leftover => {
                    self.push_padding(&mut data, &mut oob, 1, bs);
                    pads += 1;
                    o += 1;
                    continue;
                }
            }
            let job = self.inplace.as_mut().expect("job");
            if job.ready.is_empty() && job.read_back < job.staged {
                break; // which offsets are gaps is known once read back
            }
            let home = job.ready.front().is_some_and(|s| s.home == o);
            let staged = if home { job.ready.pop_front() } else { None };
            let staged = staged.filter(|_| self.mapping.is_live(Ppa::new(victim, o, cap)));
            if let Some(b) = job.band.as_mut() {
                b.group.push(match &staged {
                    Some(s) => MdEntry {
                        home_offset: o as u32,
                        data_crc: s.tag.data_crc,
                        birth_gen: s.tag.birth_gen,
                        md: s.md.clone(),
                    },
                    None => MdEntry::absent(o as u32, b.md_bytes),
                });
            }
            match staged {
                Some(s) => {
                    let tag = NamelessTag {
                        kind: NamelessTagKind::Data,
                        link: NamelessAddr::NONE,
                        ..s.tag
                    };
                    let at_oob = oob.len();
                    oob.resize(at_oob + ob, 0);
                    if !in_band {
                        tag.encode(&s.md, &mut oob[at_oob..at_oob + ob]);
                    }
                    data.push(s.data.into());
                    newest = newest.max(tag.seq);
                }
                // A gap, or a block freed since it was staged: a queued
                // write's block if there is one, else a pad.
                None => {
                    let at_oob = oob.len();
                    oob.resize(at_oob + ob, 0);
                    let fill = (fill_room > 0)
                        .then(|| self.take_gap_fill(gap_gen, o, &mut oob[at_oob..]))
                        .flatten();
                    match fill {
                        Some((fill, block)) => {
                            fill_room -= 1;
                            if in_band {
                                // The gap's entry is the fill's.
                                let e = self.gap_fill_entry(&fill, gap_gen);
                                let job = self.inplace.as_mut().expect("job");
                                let b = job.band.as_mut().expect("in band");
                                *b.group.last_mut().expect("the gap's entry") = e;
                            }
                            data.push(block);
                            fills.push(fill);
                            newest = newest.max(self.next_seq - 1);
                        }
                        None => {
                            oob.truncate(at_oob);
                            self.push_padding(&mut data, &mut oob, 1, bs);
                            pads += 1;
                        }
                    }
                }
            }
            o += 1;
        }
        let count = o - at;
        let job = self.inplace.as_mut().expect("job");
        job.rewrite_issued = o;
        job.pads += pads;
        job.fill_blocks += fills.len() as u64;
        job.fills_in_flight = fills;
        self.zones.record_write(victim, count, newest);
        self.stats.media_write_blocks += count;
        self.stats.nameless_pad_blocks += pads;
        Some((
            InPlaceOp::Rewrite { count },
            Command::Write {
                zone: victim,
                offset_blocks: at,
                data,
                oob,
            },
        ))
    }

    /// In band, what offset `o` of the victim's full layout holds: a data
    /// block, or an md block of the group just rewritten (encoded from its
    /// entries), or a block past the last group's md (padded). With md in
    /// OOB every offset is a data block.
    fn inplace_band_slot(&mut self, victim: ZoneId, o: u64) -> BandSlot {
        let bs = self.block_size();
        let Some(b) = self.inplace.as_mut().and_then(|j| j.band.as_mut()) else {
            return BandSlot::Data;
        };
        let l = b.layout;
        let k = l.group_of(o);
        let (d, j) = (l.group_data_blocks(k), o - l.group_start(k));
        if j < d {
            return BandSlot::Data;
        }
        let md_blocks = l.md_blocks_for(d);
        if j >= d + md_blocks {
            return BandSlot::Leftover;
        }
        assert_eq!(
            b.group.len() as u64,
            d,
            "zone {victim}: group {k} rewritten"
        );
        let i = (j - d) as usize;
        let block = b
            .encode_group(MdBlockKind::Group, victim, k, &b.group, bs)
            .swap_remove(i);
        if i as u64 + 1 == md_blocks {
            b.group.clear();
        }
        BandSlot::Md(block)
    }

    /// The victim's gap generation, `gen + 1`: its `gen` from now on (no
    /// address carries it before `InPlaceDone` is durable, and the note
    /// that logs it is durable before any fill is written).
    fn take_gap_gen(&mut self, victim: ZoneId) -> u32 {
        let gap_gen = self.nameless.gens[victim as usize]
            .checked_add(1)
            .expect("zone generations outlast the zone's erases");
        self.nameless.gens[victim as usize] = gap_gen;
        self.inplace.as_mut().expect("job").gap_gen = gap_gen;
        gap_gen
    }

    /// Gap fills the running job holds beside the map (written or in
    /// flight): the next checkpoint's section 24 takes them.
    pub(super) fn inplace_fills_pending(&self) -> u64 {
        self.inplace
            .as_ref()
            .map_or(0, |j| (j.fills.len() + j.fills_in_flight.len()) as u64)
    }

    /// The job stops (the volume is read-only): the writes of its gap fills
    /// fail with `error` (a remount drops the fills).
    pub(super) fn fail_inplace_fills(&mut self, error: &IoError) {
        let Some(job) = self.inplace.as_mut() else {
            return;
        };
        let mut fills = std::mem::take(&mut job.fills);
        fills.append(&mut job.fills_in_flight);
        self.answer_gap_fills(fills, Some(error));
    }

    /// The most blocks one command of a job moves.
    fn inplace_span(&self) -> u64 {
        INPLACE_SPAN_BLOCKS
            .min(u64::from(self.geo.max_append_blocks))
            .min(u64::from(self.geo.max_transfer_blocks))
    }

    /// Moves the job on where it waits for the log, and ends it once its
    /// `InPlaceDone` is durable.
    fn advance_inplace(&mut self) {
        let durable = self.log.durable_next();
        let Some(job) = self.inplace.as_mut() else {
            return;
        };
        match job.phase {
            Phase::Noting { log_barrier } if durable >= log_barrier => job.phase = Phase::Reset,
            Phase::Done { log_barrier } if durable >= log_barrier => {
                let mut job = self.inplace.take().expect("job");
                self.last_inplace_fills = job.fill_blocks;
                self.answer_gap_fills(std::mem::take(&mut job.fills), None);
                // The scratch copies are dead: the zone is finished and
                // goes to GC as a full data zone with nothing live.
                if self.zones.get(job.scratch).state() != ZoneUse::Full {
                    self.finish_pending.push(job.scratch);
                }
                self.stats.nameless_inplace_jobs += 1;
                self.advanced_then_read = false;
            }
            _ => {}
        }
    }

    /// A command of the in-place job completed.
    pub(super) fn inplace_done(&mut self, op: InPlaceOp, result: Result<Outcome, DeviceError>) {
        let job = self.inplace.as_mut().expect("a command of a running job");
        job.busy = false;
        if result.is_err() {
            // A job that cannot go on leaves the volume read-only: a
            // remount redoes or forgets it (format.md §11, crash step 9),
            // its gap fills dropped.
            self.metadata_failed();
            self.fail_inplace_fills(&IoError::ReadOnly);
            return;
        }
        match op {
            InPlaceOp::StageRead { first, count } => self.stage_read_done(first, count, result),
            InPlaceOp::StageMdRead { at, blocks } => self.stage_md_read_done(at, blocks, result),
            InPlaceOp::StageIndexWrite { count } => {
                let scratch = self.inplace.as_ref().expect("job").scratch;
                self.zones.record_write(scratch, count, 0);
                self.stats.media_write_blocks += count;
                self.stats.nameless_md_write_blocks += count;
            }
            InPlaceOp::ScratchIndexRead { group, blocks } => {
                self.scratch_index_read_done(group, blocks, result)
            }
            InPlaceOp::StageWrite { count } => {
                let job = self.inplace.as_mut().expect("job");
                job.staged += count;
                let scratch = job.scratch;
                self.zones.record_write(scratch, count, 0);
                self.stats.media_write_blocks += count;
                self.stats.nameless_staged_blocks += count;
            }
            InPlaceOp::Flush => self.inplace_flushed(),
            InPlaceOp::Reset { .. } => {
                let job = self.inplace.as_ref().expect("job");
                let victim = job.victim;
                if let Some(end) = job.band.as_ref().map(|b| b.layout.full_data_end()) {
                    // Its open or stuck group is staged; the rewrite writes
                    // every group's md blocks where the full layout has them.
                    let m = self.nameless.md.as_mut().expect("md placement log");
                    m.zone_reset(victim);
                    m.tails[victim as usize] = (end as u32, u32::MAX);
                }
                self.zones.reset_in_place(victim);
                self.stats.erases += 1;
                self.inplace.as_mut().expect("job").phase = Phase::Rewriting;
            }
            InPlaceOp::ScratchRead { count } => self.scratch_read_done(count, result),
            InPlaceOp::Rewrite { count } => {
                let job = self.inplace.as_mut().expect("job");
                job.rewritten += count;
                let (victim, gap_gen) = (job.victim, job.gap_gen);
                let fills = std::mem::take(&mut job.fills_in_flight);
                self.gap_fills_landed(victim, gap_gen, &fills);
                self.inplace.as_mut().expect("job").fills.extend(fills);
            }
        }
    }

    /// Live blocks read from the victim: their staged copies (kind 7 tags
    /// naming their home) are built for the scratch zone.
    fn stage_read_done(&mut self, first: u64, count: u32, result: Result<Outcome, DeviceError>) {
        let Ok(Outcome::Read { data, oob }) = result else {
            unreachable!("a read completes with data")
        };
        let cap = self.cap();
        let bs = self.block_size();
        let ob = self.geo.oob_size_bytes as usize;
        let victim = self.inplace.as_ref().expect("job").victim;
        let mut payload = Payload::new();
        let mut out = Vec::with_capacity(count as usize * ob);
        let mut n = 0;
        let job = self.inplace.as_mut().expect("job");
        if let Some(b) = job.band.as_mut() {
            // In band: the blocks go as they are, their entries to the
            // group's staging index.
            let (_, _, entries) = b.run.take().expect("the run read");
            b.index.extend(entries.expect("the run's entries"));
            if b.index.len() as u64 == b.layout.group_blocks {
                b.seal_index(victim, bs);
            }
            for i in 0..count as usize {
                payload.push(data[i * bs..(i + 1) * bs].to_vec().into());
            }
            let n = u64::from(count);
            job.to_stage = Some((payload, vec![0; self.geo.oob_bytes(n)], n));
            return;
        }
        for i in 0..count as usize {
            let home = Ppa::new(victim, first + i as u64, cap);
            let Ok(Some((tag, md))) = NamelessTag::decode(&oob[i * ob..(i + 1) * ob]) else {
                // A live block with no tag: the job cannot keep it.
                self.metadata_failed();
                return;
            };
            assert!(
                matches!(tag.kind, NamelessTagKind::Data | NamelessTagKind::Moved),
                "live block {home:?} holds a {:?} tag",
                tag.kind
            );
            let staged = NamelessTag {
                kind: NamelessTagKind::Staged,
                birth_gen: tag.birth_gen,
                link: NamelessAddr::new(home, tag.birth_gen),
                seq: tag.seq,
                data_crc: tag.data_crc,
            };
            let at = out.len();
            out.resize(at + ob, 0);
            staged.encode(md, &mut out[at..at + ob]);
            payload.push(data[i * bs..(i + 1) * bs].to_vec().into());
            n += 1;
        }
        self.inplace.as_mut().expect("job").to_stage = Some((payload, out, n));
    }

    /// In band, the md blocks of the victim from `at` holding the entries
    /// of the run to stage: each live block of the run must have its entry
    /// there, else the job cannot keep it (the volume goes read-only; a
    /// remount forgets the job, whose note is not logged yet).
    fn stage_md_read_done(&mut self, at: u64, blocks: u32, result: Result<Outcome, DeviceError>) {
        let Ok(Outcome::Read { data, .. }) = result else {
            unreachable!("a read completes with data")
        };
        let bs = self.block_size();
        let job = self.inplace.as_ref().expect("job");
        let victim = job.victim;
        let b = job.band.as_ref().expect("in band");
        let (layout, md_bytes) = (b.layout, b.md_bytes);
        let (first, count, _) = b.run.clone().expect("a run");
        let m = self.nameless.md.as_ref().expect("md placement log");
        let entries: Option<Vec<MdEntry>> = (first..first + count)
            .map(|o| {
                let (blk, _) = m.md_location(victim, o)?;
                let i = usize::try_from(blk.checked_sub(at)?).ok()?;
                (i < blocks as usize).then_some(())?;
                layout
                    .entry_in_block(victim, o, &data[i * bs..(i + 1) * bs], md_bytes)
                    .filter(MdEntry::is_present)
            })
            .collect();
        let Some(entries) = entries else {
            self.metadata_failed();
            return;
        };
        let b = self
            .inplace
            .as_mut()
            .and_then(|j| j.band.as_mut())
            .expect("in band");
        b.run = Some((first, count, Some(entries)));
    }

    /// In band, the staging index of scratch group `group`: its entries,
    /// in staging order, wait for their blocks. One that does not decode
    /// as that group's leaves the volume read-only (the mount redoes the
    /// job, reading it again).
    fn scratch_index_read_done(
        &mut self,
        group: u64,
        blocks: u32,
        result: Result<Outcome, DeviceError>,
    ) {
        let Ok(Outcome::Read { data, .. }) = result else {
            unreachable!("a read completes with data")
        };
        let bs = self.block_size();
        let job = self.inplace.as_mut().expect("job");
        let (victim, staged) = (job.victim, job.staged);
        let b = job.band.as_mut().expect("in band");
        let d = b.staged_in_group(group, staged);
        match staging_index(&data, bs, blocks, b, victim, group, d) {
            Some(entries) => b.back_index.extend(entries),
            None => self.metadata_failed(),
        }
    }

    /// Staged copies read back: queued for the rewrite, in home order.
    fn scratch_read_done(&mut self, count: u32, result: Result<Outcome, DeviceError>) {
        let Ok(Outcome::Read { data, oob }) = result else {
            unreachable!("a read completes with data")
        };
        let cap = self.cap();
        let bs = self.block_size();
        let ob = self.geo.oob_size_bytes as usize;
        let crc = self.data_crc();
        let job = self.inplace.as_mut().expect("job");
        if let Some(b) = job.band.as_mut() {
            for i in 0..count as usize {
                let e = b.back_index.pop_front().expect("an entry per staged block");
                let data = data[i * bs..(i + 1) * bs].to_vec();
                if crc.checksum(&data) != e.data_crc {
                    // S was flushed before the note: a media error. The
                    // remount redoes the job (and reports it if it lasts).
                    self.metadata_failed();
                    return;
                }
                job.ready.push_back(Staged {
                    home: u64::from(e.home_offset),
                    data,
                    tag: NamelessTag {
                        kind: NamelessTagKind::Staged,
                        birth_gen: e.birth_gen,
                        link: NamelessAddr::NONE,
                        seq: 0,
                        data_crc: e.data_crc,
                    },
                    md: e.md,
                });
            }
            job.read_back += u64::from(count);
            return;
        }
        for i in 0..count as usize {
            let Ok(Some((tag, md))) = NamelessTag::decode(&oob[i * ob..(i + 1) * ob]) else {
                panic!(
                    "staged copy {} of the scratch zone has no tag",
                    job.read_back
                );
            };
            assert_eq!(tag.kind, NamelessTagKind::Staged, "a staged copy's tag");
            let home = tag.link.ppa().offset_blocks(cap);
            job.ready.push_back(Staged {
                home,
                data: data[i * bs..(i + 1) * bs].to_vec(),
                tag,
                md: md.to_vec(),
            });
        }
        job.read_back += u64::from(count);
    }

    /// The flush after staging (then the note) or after the rewrite (then
    /// the end note) completed.
    fn inplace_flushed(&mut self) {
        let seq = self.take_seq();
        let job = self.inplace.as_ref().expect("job");
        let (victim, scratch, staged) = (job.victim, job.scratch, job.staged);
        if job.phase == Phase::StageFlush {
            self.take_gap_gen(victim);
        }
        let job = self.inplace.as_ref().expect("job");
        let note = match job.phase {
            Phase::StageFlush => Note::InPlaceStaged {
                seq,
                victim,
                scratch,
                gap_gen: job.gap_gen,
                first_scratch_offset: 0,
                staged_blocks: u32::try_from(staged).expect("a zone's blocks fit u32"),
            },
            Phase::RewriteFlush => Note::InPlaceDone {
                seq,
                victim,
                erase_count: self.zones.get(victim).erase_count(),
                pad_blocks: u32::try_from(job.pads).expect("a zone's blocks fit u32"),
                gap_fill_blocks: u32::try_from(job.fills.len()).expect("a zone's blocks fit u32"),
            },
            other => unreachable!("an in-place flush in phase {other:?}"),
        };
        let staging = job.phase == Phase::StageFlush;
        self.log.push_note(note);
        self.log.pack(true);
        let log_barrier = self.log.next_log_seq();
        let job = self.inplace.as_mut().expect("job");
        job.phase = if staging {
            Phase::Noting { log_barrier }
        } else {
            Phase::Done { log_barrier }
        };
    }
}

/// The entries of staging index group `group` (`d` staged blocks) of a
/// job of `victim`, from its `blocks` md blocks read as `data`; `None` if
/// one does not decode as that group's (kind 2, the victim, the group, the
/// count).
pub(crate) fn staging_index_entries(
    data: &[u8],
    bs: usize,
    layout: &MdLayout,
    md_bytes: usize,
    victim: ZoneId,
    group: u64,
    d: u64,
) -> Option<Vec<MdEntry>> {
    let blocks = layout.md_blocks_for(d) as usize;
    let mut entries = Vec::with_capacity(d as usize);
    for i in 0..blocks {
        let b = MdBlock::decode(data.get(i * bs..(i + 1) * bs)?, md_bytes).ok()?;
        let fits = b.kind == MdBlockKind::StagingIndex
            && b.zone == victim
            && u64::from(b.group) == group
            && u64::from(b.group_data_blocks) == d
            && u64::from(b.first_entry) == i as u64 * layout.entries_per_block
            && b.entries.iter().all(MdEntry::is_present);
        if !fits {
            return None;
        }
        entries.extend(b.entries);
    }
    Some(entries)
}

fn staging_index(
    data: &[u8],
    bs: usize,
    blocks: u32,
    b: &Band,
    victim: ZoneId,
    group: u64,
    d: u64,
) -> Option<Vec<MdEntry>> {
    debug_assert_eq!(u64::from(blocks), b.layout.md_blocks_for(d));
    staging_index_entries(data, bs, &b.layout, b.md_bytes, victim, group, d)
}
