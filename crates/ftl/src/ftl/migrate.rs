//! Migration: GC collects a nameless zone by copying its live blocks to the
//! `NamelessMoved` lane and telling the client where each went
//! (docs/design.md, "Migration events and the remap table"). A remap entry
//! redirects the old address until the client acknowledges; the event goes
//! out once the `NamelessMigrate` note and the copy are durable. In band
//! (md placement log) the victim's CRCs and md come from its md blocks, a
//! group at a time, and a copy's record is its note with NamelessMd notes
//! and its entry in the destination zone's group (format.md §11, step 6).

use super::lane::Lane;
use super::nameless::NAMELESS_MD_BYTES;
use super::request::ReplyData;
use super::{Ftl, Op, ReplyTo};
use crate::addr::{Ppa, Seq};
use crate::backend::{Command, DeviceError, Outcome, Payload, ReadPriority, ZoneId};
use crate::buffer::BlockData;
use crate::config::NamelessWear;
use crate::error::IoError;
use crate::nameless::{
    MdBlock, MdBlockKind, MdEntry, NamelessAddr, NamelessEvent, NamelessTag, NamelessTagKind,
};
use crate::note::{Note, NOTE_BYTES};
use crate::zone::{ZoneKind, ZoneUse};
use std::collections::{BTreeMap, VecDeque};

/// A live block read from a migration victim, on its way to its copy.
#[derive(Debug)]
pub(super) struct MoveItem {
    src: Ppa,
    /// The address the client holds for it.
    old: NamelessAddr,
    data: BlockData,
    md: Box<[u8; NAMELESS_MD_BYTES]>,
    /// Seq of the write that made the data (a copy keeps it).
    seq: Seq,
    crc: u32,
}

/// What the core keeps for migrations in flight and moves not yet
/// acknowledged. Every part is bounded by the remap table's capacity or by
/// the GC queue's.
#[derive(Debug, Default)]
pub(super) struct Moves {
    /// Blocks read from victims and not yet appended.
    queue: VecDeque<MoveItem>,
    /// Remap entries the running migration jobs may still insert:
    /// reserved when a job starts, given back as its blocks land or die.
    reserved: u64,
    /// Per zone with any, the remap entries whose new side lies in it: its
    /// blocks are not migrated again before their acknowledgement.
    moved_in: BTreeMap<ZoneId, u32>,
    /// Each remap entry by its new side: freeing that block drops the
    /// entry (no event can name it then, so no ack would come).
    by_new: BTreeMap<Ppa, NamelessAddr>,
    /// Blocks of overwrites sent and not yet landed, by the block each
    /// replaces: a migration does not move a block an overwrite frees (the
    /// overwrite's tag names the block where it was).
    replacing: BTreeMap<Ppa, u32>,
    /// The addresses overwrites admitted and not yet answered name: a
    /// `Migrated` event of one waits (the overwrite frees its block).
    overwriting: BTreeMap<NamelessAddr, u32>,
    /// Events whose notes are not yet durable, by the log waiter that
    /// hands them out.
    unlogged: VecDeque<(u64, NamelessEvent)>,
    next_batch: u64,
    /// Migration stopped for want of remap room (for the statistic, which
    /// counts each stop once).
    stopped: bool,
    /// In band, per migration victim, the md group its job reads data in:
    /// one group (`G` entries) per job.
    victim_md: BTreeMap<ZoneId, VictimGroup>,
}

/// What a migration job does before reading its victim's data at an
/// offset (`Ftl::victim_md_ready`).
pub(super) enum VictimMdStep {
    /// The entries of the offset's group are at hand, up to `end` (the
    /// group's data end).
    Ready { end: u64 },
    /// The group's md blocks come first: this read.
    Read(Op, Command),
    /// Wait: for that read, or for the job's reads of the previous group
    /// (which still need its entries).
    Wait,
}

/// In band, the entries of the group of a migration victim whose data its
/// job reads now, from the group's md blocks (or from memory while those
/// are not written).
#[derive(Debug)]
struct VictimGroup {
    group: u64,
    /// Data blocks the group holds.
    data_blocks: u64,
    /// Entries 0.. of the group; an md block that could not be read or
    /// did not decode leaves its entries absent (those blocks are
    /// unreadable: the victim is retired).
    entries: Vec<MdEntry>,
    /// Md blocks read (or given up on) so far.
    read_blocks: u64,
    in_flight: bool,
    attempts: u8,
}

impl Moves {
    /// Moves recovered by a mount: `remap` as (old, new).
    pub(super) fn recovered(remap: &[(NamelessAddr, NamelessAddr)], cap: u64) -> Moves {
        let mut moves = Moves::default();
        for &(old, new) in remap {
            moves.pin(old, new, cap);
        }
        moves
    }

    /// A remap entry `old` -> `new` exists.
    fn pin(&mut self, old: NamelessAddr, new: NamelessAddr, cap: u64) {
        *self.moved_in.entry(new.ppa().zone(cap)).or_default() += 1;
        self.by_new.insert(new.ppa(), old);
    }

    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Events of landed migrations still waiting for their notes.
    pub(super) fn unlogged_events(&self) -> usize {
        self.unlogged.len()
    }

    /// An overwrite of `ppa` was sent.
    pub(super) fn replacing(&mut self, ppa: Ppa) {
        *self.replacing.entry(ppa).or_default() += 1;
    }

    /// That overwrite landed or failed.
    pub(super) fn replaced(&mut self, ppa: Ppa) {
        let n = self
            .replacing
            .get_mut(&ppa)
            .expect("an overwrite in flight");
        *n -= 1;
        if *n == 0 {
            self.replacing.remove(&ppa);
        }
    }

    /// An overwrite of `olds` was admitted.
    pub(super) fn overwriting(&mut self, olds: &[NamelessAddr]) {
        for &o in olds {
            *self.overwriting.entry(o).or_default() += 1;
        }
    }

    /// That overwrite was answered.
    pub(super) fn overwritten(&mut self, olds: &[NamelessAddr]) {
        for o in olds {
            let n = self.overwriting.get_mut(o).expect("an overwrite admitted");
            *n -= 1;
            if *n == 0 {
                self.overwriting.remove(o);
            }
        }
    }

    /// Whether an admitted overwrite names `old`.
    pub(super) fn is_overwriting(&self, old: NamelessAddr) -> bool {
        self.overwriting.contains_key(&old)
    }

    /// Zones holding the new side of a remap entry.
    pub(super) fn pinned_zones(&self) -> impl Iterator<Item = ZoneId> + '_ {
        self.moved_in.keys().copied()
    }

    /// The entry whose new side is `new` went (acknowledged, or that
    /// block freed); returns its old address.
    pub(super) fn unpin(&mut self, new: Ppa, cap: u64) -> Option<NamelessAddr> {
        let old = self.by_new.remove(&new)?;
        let zone = new.zone(cap);
        let n = self.moved_in.get_mut(&zone).expect("a pinned zone");
        *n -= 1;
        if *n == 0 {
            self.moved_in.remove(&zone);
        }
        Some(old)
    }
}

impl Ftl {
    /// Remap entries a migration may still reserve: the table's room (at
    /// most half its slots) and the next checkpoint's (16 bytes each),
    /// less what running jobs reserved. Computed once per decision: the
    /// checkpoint's bound is not free.
    fn remap_room_entries(&self) -> u64 {
        let r = &self.nameless.remap;
        let table = u64::from(r.capacity()).saturating_sub(u64::from(r.len()));
        let checkpoint = self.checkpoint_room_bytes() / 16;
        table
            .min(checkpoint)
            .saturating_sub(self.nameless.moves.reserved)
    }

    /// Whether migrations have stopped: the remap table (or the checkpoint)
    /// has no room for a zone's live blocks. Then the dead blocks of the
    /// nameless zones count as used (`nameless_dead_blocks`).
    pub(super) fn migration_stopped(&self) -> bool {
        self.remap_room_entries() < self.data_cap()
    }

    /// Blocks of nameless zone `z` that hold no data (0 with md in OOB):
    /// in band its md blocks and, if it was sealed early, the offsets past
    /// its last group. No migration frees them for data.
    pub(super) fn nameless_non_data_blocks(&self, z: ZoneId) -> u64 {
        let Some(m) = self.nameless.md.as_ref().filter(|_| self.md_in_zones()) else {
            return 0;
        };
        let (l, end) = (m.layout, u64::from(m.tails[z as usize].0));
        if end == 0 {
            return 0;
        }
        let k = l.group_of(end - 1);
        let data = k * l.group_blocks + (end - l.group_start(k));
        self.cap().saturating_sub(data)
    }

    /// GC's migration victim, if one may be collected now: a Full nameless
    /// zone holding no block awaiting acknowledgement, whose newest block
    /// is older than the committed checkpoint (replay never needs a tag a
    /// reset erased), with room in the remap table for its live blocks.
    /// When the best is younger, asks for a checkpoint and takes none.
    pub(super) fn migration_victim(&mut self) -> Option<ZoneId> {
        if self.zones.nameless_zone_count() == 0 {
            return None;
        }
        let data_cap = self.data_cap();
        let room = self.remap_room_entries();
        // In band a zone's md blocks are no room a migration frees: counted
        // as live, a zone whose data all lives is no victim and scores none.
        let live = |z: ZoneId| self.mapping.valid_blocks(z);
        let valid = |z: ZoneId| live(z) + self.nameless_non_data_blocks(z);
        let ex = |z: ZoneId| {
            self.excluded(z)
                || self.nameless.moves.moved_in.contains_key(&z)
                || live(z) >= data_cap
                || valid(z) >= self.cap()
                || live(z) > room
        };
        let young = |z: ZoneId| self.zones.get(z).last_write_seq() >= self.committed_next_seq;
        let policy = self.cfg.gc_policy;
        let now = self.next_seq;
        // A young best victim waits for the next checkpoint rather than give
        // way to an older zone that frees less: most partly dead zones were
        // written since the last checkpoint, and the older candidates are
        // often zones of migrated blocks, mostly live.
        let best = self.zones.pick_nameless_victim(policy, now, valid, ex);
        match best {
            Some(z) if !young(z) => {
                self.nameless.moves.stopped = false;
                return Some(z);
            }
            Some(_) if matches!(self.ckpt, super::ckpt::CkptState::Idle) => {
                self.ckpt_requested = true;
            }
            _ => {}
        }
        if room < data_cap && !self.nameless.moves.stopped {
            self.nameless.moves.stopped = true;
            self.stats.nameless_remap_full_stops += 1;
        }
        None
    }

    /// A zone for nameless wear leveling to move (docs/design.md, "Wear
    /// leveling"), if `FtlConfig::nameless_wear` is set and leveling is
    /// due: the most-worn zone in service has used the trigger share of
    /// the endurance, and the zones the copies go to are worn. They go to
    /// the leveling lane's open zone (worn when leveling took it) and, what
    /// does not fit there, to the most-worn free zone, which must be worn
    /// now (`NamelessWear::is_worn`). A worn zone that holds data does not
    /// make leveling due: the cold data a move put there stays until the
    /// mean has passed its erase count. The victim is the coldest (oldest
    /// newest block) Full nameless zone less worn than the mean, which a
    /// migration can take now. It runs alone (no other job) and, while GC
    /// is busy, at most once in `WL_EVERY_GC_JOBS + 1` jobs. O(zones).
    pub(super) fn nameless_wl_victim(&self) -> Option<ZoneId> {
        let w = self.cfg.nameless_wear?;
        if !self.jobs.is_empty() {
            return None;
        }
        if self.gc_needed() && self.jobs_since_wl < super::reloc::WL_EVERY_GC_JOBS {
            return None;
        }
        let (count, erases, worn_free) = self.nameless_wear_tally(w)?;
        let tail = self.level_lane_tail_blocks();
        if !worn_free && tail == 0 {
            return None;
        }
        let room = self.remap_room_entries();
        let valid = |z: ZoneId| self.mapping.valid_blocks(z);
        self.zones
            .iter()
            .filter(|&(z, zone)| {
                zone.kind().is_nameless()
                    && zone.state() == ZoneUse::Full
                    && u64::from(zone.erase_count()) * count < erases
                    && zone.last_write_seq() < self.committed_next_seq
                    && valid(z) > 0
                    && (worn_free || valid(z) <= tail)
                    && !self.excluded(z)
                    && !self.nameless.moves.moved_in.contains_key(&z)
                    && valid(z) <= room
            })
            .min_by_key(|&(z, zone)| (zone.last_write_seq(), z))
            .map(|(z, _)| z)
    }

    /// The zones in service (free and data), their erases, and whether the
    /// most-worn free zone is worn; `None` before the trigger.
    fn nameless_wear_tally(&self, w: NamelessWear) -> Option<(u64, u64, bool)> {
        // One pass: zones in service, the most erases, their sum and the
        // remaining lives' sum.
        let (count, max, erases, life) = self
            .zones
            .iter()
            .filter(|(_, z)| matches!(z.kind(), ZoneKind::Free | ZoneKind::Data { .. }))
            .map(|(_, z)| z.erase_count())
            .fold((0u64, None, 0u64, 0u64), |(n, max, sum, life), e| {
                let left = u64::from(w.endurance_erases.saturating_sub(e));
                (n + 1, max.max(Some(e)), sum + u64::from(e), life + left)
            });
        if !w.triggered(max?) {
            return None;
        }
        let worn_free = self
            .zones
            .most_worn_free()
            .is_some_and(|(_, e)| w.is_worn(e, count, erases, life));
        Some((count, erases, worn_free))
    }

    /// Data blocks the nameless leveling lane's open zone can still take
    /// (0 without one).
    fn level_lane_tail_blocks(&self) -> u64 {
        let st = &self.lanes[Lane::NamelessLevel.index()];
        st.zone
            .map_or(0, |_| self.data_cap().saturating_sub(st.allocated_blocks))
    }

    /// A migration job starts on `victim`: its live blocks' entries are
    /// reserved. Returns what was reserved (given back by `moved_or_dropped`
    /// and at the job's end).
    pub(super) fn reserve_moves(&mut self, victim: ZoneId) -> u64 {
        let n = self.mapping.valid_blocks(victim);
        self.nameless.moves.reserved += n;
        n
    }

    /// The migration job of `victim` ends with `left` of its reservation
    /// unused.
    pub(super) fn release_moves(&mut self, victim: ZoneId, left: u64) {
        self.nameless.moves.reserved -= left;
        self.nameless.moves.victim_md.remove(&victim);
    }

    /// Whether GC reads `ppa` of a nameless victim: not while an
    /// overwrite that replaces it is on its way (it will be dead).
    pub(super) fn movable_nameless(&self, ppa: Ppa) -> bool {
        !self.nameless.moves.replacing.contains_key(&ppa)
    }

    /// A live block read from nameless victim `zone`: queued for its copy,
    /// or `false` if its record (its tag, or in band its md entry) does not
    /// name it (unreadable).
    pub(super) fn queue_move(&mut self, ppa: Ppa, data: BlockData, oob: &[u8]) -> bool {
        let cap = self.cap();
        let zone = ppa.zone(cap);
        // The block's own: a gap fill's differs from its zone's base.
        let generation = self.nameless.births.birth(ppa, zone);
        let record = if self.md_in_zones() {
            self.victim_entry(ppa, generation)
        } else {
            Self::victim_tag(oob, self.geo.oob_size_bytes as usize, generation)
        };
        let Some((crc, md, seq)) = record else {
            return false;
        };
        // In band a block's seq is not kept: its zone's newest stands in
        // (the victim is older than the committed checkpoint).
        let seq = seq.unwrap_or_else(|| self.zones.get(zone).last_write_seq());
        self.nameless.moves.queue.push_back(MoveItem {
            src: ppa,
            old: NamelessAddr::new(ppa, generation),
            data,
            md,
            seq,
            crc,
        });
        true
    }

    /// The record in a victim block's OOB, if its tag names it: (data
    /// CRC, md, seq).
    fn victim_tag(
        oob: &[u8],
        oob_bytes: usize,
        generation: u32,
    ) -> Option<(u32, Box<[u8; NAMELESS_MD_BYTES]>, Option<Seq>)> {
        let ob = oob_bytes.min(oob.len());
        let (tag, md) = NamelessTag::decode(&oob[..ob]).ok().flatten()?;
        let named = matches!(tag.kind, NamelessTagKind::Data | NamelessTagKind::Moved)
            && tag.birth_gen == generation
            && md.len() == NAMELESS_MD_BYTES;
        if !named {
            return None;
        }
        let mut md_bytes = Box::new([0u8; NAMELESS_MD_BYTES]);
        md_bytes.copy_from_slice(md);
        Some((tag.data_crc, md_bytes, Some(tag.seq)))
    }

    /// In band, the record of victim block `ppa` in its job's group, if
    /// its entry names it: (data CRC, md, no seq).
    fn victim_entry(
        &self,
        ppa: Ppa,
        generation: u32,
    ) -> Option<(u32, Box<[u8; NAMELESS_MD_BYTES]>, Option<Seq>)> {
        let cap = self.cap();
        let (zone, offset) = (ppa.zone(cap), ppa.offset_blocks(cap));
        let layout = self.nameless.md.as_ref()?.layout;
        let v = self.nameless.moves.victim_md.get(&zone)?;
        let i = offset.checked_sub(layout.group_start(v.group))?;
        let e = v.entries.get(i as usize)?;
        let named = e.is_present()
            && u64::from(e.home_offset) == offset
            && e.birth_gen == generation
            && e.md.len() == NAMELESS_MD_BYTES;
        if !named {
            return None;
        }
        let mut md_bytes = Box::new([0u8; NAMELESS_MD_BYTES]);
        md_bytes.copy_from_slice(&e.md);
        Some((e.data_crc, md_bytes, None))
    }

    /// In band, before a migration job reads `victim`'s data from
    /// `offset`: whether the entries of that group are at hand, or its md
    /// blocks come first. With md in OOB, no limit.
    pub(super) fn victim_md_ready(
        &mut self,
        victim: ZoneId,
        offset: u64,
        reads_in_flight: u32,
    ) -> VictimMdStep {
        let Some(m) = self.nameless.md.as_ref() else {
            return VictimMdStep::Ready { end: u64::MAX };
        };
        let layout = m.layout;
        let k = layout.group_of(offset);
        let start = layout.group_start(k);
        assert!(
            offset < u64::from(m.tails[victim as usize].0),
            "zone {victim}: a live block at {offset}, past the zone's data end"
        );
        let current = self.nameless.moves.victim_md.get(&victim);
        match current {
            Some(v) if v.group == k => {
                if v.read_blocks == layout.md_blocks_for(v.data_blocks) {
                    return VictimMdStep::Ready {
                        end: start + v.data_blocks,
                    };
                }
                if v.in_flight {
                    return VictimMdStep::Wait;
                }
            }
            _ if reads_in_flight > 0 => return VictimMdStep::Wait,
            _ => {
                let v = self.victim_group(victim, k);
                let done = v.read_blocks == layout.md_blocks_for(v.data_blocks);
                let end = start + v.data_blocks;
                self.nameless.moves.victim_md.insert(victim, v);
                if done {
                    return VictimMdStep::Ready { end };
                }
            }
        }
        let (op, cmd) = self.victim_md_read(victim);
        VictimMdStep::Read(op, cmd)
    }

    /// Group `k` of `victim`, its entries from memory if its md blocks are
    /// not written, else to be read.
    fn victim_group(&self, victim: ZoneId, k: u64) -> VictimGroup {
        let m = self.nameless.md.as_ref().expect("md placement log");
        let layout = m.layout;
        let start = layout.group_start(k);
        let data_end = u64::from(m.tails[victim as usize].0);
        let last = layout.group_of(data_end.saturating_sub(1).max(start));
        let data_blocks = if k < last {
            layout.group_blocks
        } else {
            data_end.saturating_sub(start)
        };
        let absent = |i: u64| MdEntry::absent((start + i) as u32, NAMELESS_MD_BYTES);
        let mut entries: Vec<MdEntry> = (0..data_blocks).map(absent).collect();
        let mut read_blocks = 0;
        if let Some(g) = m.group(victim).filter(|g| g.group == k) {
            for (slot, e) in entries.iter_mut().zip(&g.entries) {
                *slot = e.clone();
            }
            read_blocks = layout.md_blocks_for(data_blocks);
        }
        VictimGroup {
            group: k,
            data_blocks,
            entries,
            read_blocks,
            in_flight: false,
            attempts: 0,
        }
    }

    /// The next read of `victim`'s current group's md blocks (they lie
    /// together: after the group's data, or where the zone's last group's
    /// landed).
    fn victim_md_read(&mut self, victim: ZoneId) -> (Op, Command) {
        let m = self.nameless.md.as_ref().expect("md placement log");
        let (layout, tails) = (m.layout, m.tails[victim as usize]);
        let v = self
            .nameless
            .moves
            .victim_md
            .get_mut(&victim)
            .expect("the victim's group");
        let first_entry = layout.group_start(v.group) + v.read_blocks * layout.entries_per_block;
        let (at, _) = layout
            .md_location(tails.0, tails.1, first_entry)
            .expect("a data block below the zone's data end");
        let total = layout.md_blocks_for(v.data_blocks);
        let max = u64::from(self.geo.max_transfer_blocks).max(1);
        let blocks = (total - v.read_blocks).min(max);
        v.in_flight = true;
        let first_block = v.read_blocks;
        self.gc_in_flight += 1;
        self.zone_readers[victim as usize] += 1;
        if let Some(job) = self.job_of(victim) {
            job.reads_in_flight += 1;
        }
        (
            Op::VictimMdRead {
                zone: victim,
                first_block,
                blocks,
            },
            Command::Read {
                zone: victim,
                offset_blocks: at,
                block_count: blocks as u32,
                priority: ReadPriority::Background,
            },
        )
    }

    /// Md blocks `first_block ..` of a migration victim's current group
    /// were read: their entries are at hand. A failed read is tried again
    /// up to `READ_ATTEMPTS` times, then its blocks' entries stay absent.
    pub(super) fn victim_md_read_done(
        &mut self,
        zone: ZoneId,
        first_block: u64,
        blocks: u64,
        result: Result<Outcome, DeviceError>,
    ) {
        self.gc_in_flight -= 1;
        self.zone_readers[zone as usize] -= 1;
        if let Some(job) = self.job_of(zone) {
            job.reads_in_flight -= 1;
        }
        let bs = self.block_size();
        let m = self.nameless.md.as_ref().expect("md placement log");
        let (layout, md_bytes) = (m.layout, m.md_bytes);
        let Some(v) = self.nameless.moves.victim_md.get_mut(&zone) else {
            return; // the job is over
        };
        v.in_flight = false;
        let data = match result {
            Ok(Outcome::Read { data, .. }) => data,
            Ok(other) => panic!("read completed as {other:?}"),
            Err(DeviceError::DeviceGone) => return,
            Err(_) if v.attempts + 1 < super::read::READ_ATTEMPTS => {
                v.attempts += 1;
                return;
            }
            Err(_) => Vec::new(),
        };
        let (e, group, d) = (layout.entries_per_block, v.group, v.data_blocks);
        for j in 0..blocks {
            let i = first_block + j;
            let bytes = data.get((j as usize) * bs..(j as usize + 1) * bs);
            let decoded = bytes.and_then(|b| MdBlock::decode(b, md_bytes).ok());
            let fits = |b: &MdBlock| {
                b.kind == MdBlockKind::Group
                    && b.zone == zone
                    && u64::from(b.group) == group
                    && u64::from(b.first_entry) == i * e
                    && u64::from(b.group_data_blocks) == d
            };
            if let Some(b) = decoded.filter(fits) {
                let at = (i * e) as usize;
                for (slot, entry) in v.entries[at..].iter_mut().zip(b.entries) {
                    *slot = entry;
                }
            }
        }
        v.read_blocks = first_block + blocks;
        v.attempts = 0;
    }

    /// The next append of migrated blocks, into the `NamelessMoved` lane.
    pub(super) fn next_migrate_append(&mut self) -> Option<(Op, Command)> {
        let queued = self.nameless.moves.queue.len() as u64;
        if self.read_only || queued == 0 || !self.gc_budget_left() {
            return None;
        }
        let urgent = !self.gc_reading();
        // Leveling runs alone: its copies go to the most-worn free zone.
        let leveling = self
            .jobs
            .first()
            .is_some_and(|j| j.purpose == super::reloc::JobPurpose::StaticWl);
        let base = if leveling {
            Lane::NamelessLevel
        } else {
            Lane::NamelessMoved
        };
        let (lane, zone, room) = self.room_in(base, queued, true)?;
        let (n, pad) = self.batch_size(queued, room, urgent);
        if n == 0 {
            return None;
        }
        let generation = self.nameless.gens[zone as usize];
        let ob = self.geo.oob_size_bytes as usize;
        let (mut data, mut oob) = (Payload::new(), self.alloc_oob(n + pad));
        let items: Vec<MoveItem> = self.nameless.moves.queue.drain(..n as usize).collect();
        let in_band = self.md_in_zones();
        for it in &items {
            data.push(it.data.clone());
            let at = oob.len();
            oob.resize(at + ob, 0);
            if in_band {
                continue; // the record goes to the log once the copy landed
            }
            let tag = NamelessTag {
                kind: NamelessTagKind::Moved,
                birth_gen: generation,
                link: it.old,
                seq: it.seq,
                data_crc: it.crc,
            };
            tag.encode(&it.md[..], &mut oob[at..at + ob]);
        }
        self.push_padding(&mut data, &mut oob, pad, self.block_size());
        let newest = items.iter().map(|it| it.seq).max().unwrap_or(0);
        self.lane_commit(lane, zone, n + pad, newest);
        self.gc_in_flight += 1;
        self.stats.media_write_blocks += n + pad;
        self.stats.gc_copy_blocks += n;
        self.stats.wl_move_blocks += if leveling { n } else { 0 };
        self.stats.pad_blocks += pad;
        self.blocks_since_checkpoint += n + pad;
        Some((
            Op::MigrateAppend {
                zone,
                items,
                pad_blocks: pad as u32,
            },
            Command::Append { zone, data, oob },
        ))
    }

    /// A migration append completed: each block whose original is still
    /// live (a racing free or overwrite wins) moves, with a remap entry, a
    /// `NamelessMigrate` note and an event handed out once durable.
    pub(super) fn migrate_append_done(
        &mut self,
        zone: ZoneId,
        items: Vec<MoveItem>,
        pad: u32,
        result: Result<Outcome, DeviceError>,
    ) {
        self.gc_in_flight -= 1;
        self.append_settled(zone);
        let offset = match Self::appended_at(result) {
            Ok(offset) => offset,
            Err(e) => {
                let n = items.len() as u64;
                self.stats.media_write_blocks -= n + u64::from(pad);
                self.stats.gc_copy_blocks -= n;
                for it in items.into_iter().rev() {
                    self.nameless.moves.queue.push_front(it);
                }
                self.write_failed(zone, e);
                return;
            }
        };
        self.appends_done += 1;
        self.host_write_failures = 0;
        let cap = self.cap();
        let batch = self.nameless.moves.next_batch;
        let mut moved = 0;
        for (i, it) in items.into_iter().enumerate() {
            let dst = Ppa::new(zone, offset + i as u64, cap);
            self.moved_or_dropped(it.src);
            if let Some(event) = self.move_block(it, dst) {
                self.nameless.moves.unlogged.push_back((batch, event));
                moved += 1;
            }
        }
        if moved > 0 {
            self.nameless.moves.next_batch += 1;
            self.add_log_waiter(ReplyTo::Migrated(batch), ReplyData::Done);
        }
    }

    /// A block read from a victim is settled (moved or dropped): its job
    /// has one block fewer pending and one entry fewer reserved.
    fn moved_or_dropped(&mut self, src: Ppa) {
        let zone = src.zone(self.cap());
        if self.job_settled(zone) {
            self.nameless.moves.reserved -= 1;
        }
    }

    /// Moves `it` to its copy at `dst` if the original is still the live
    /// block the client holds; returns the event.
    fn move_block(&mut self, it: MoveItem, dst: Ppa) -> Option<NamelessEvent> {
        let current = self.mapping.is_live(it.src)
            && !self.nameless.moves.replacing.contains_key(&it.src)
            && self.nameless.remap.get(it.old).is_none();
        if !current {
            return None; // the copy is dead space
        }
        let cap = self.cap();
        let dst_zone = dst.zone(cap);
        let new = NamelessAddr::new(dst, self.nameless.gens[dst_zone as usize]);
        self.nameless
            .remap
            .insert(it.old, new)
            .expect("remap room was reserved");
        self.nameless.moves.pin(it.old, new, cap);
        self.nameless_relocate(it.src, dst);
        let seq = self.take_seq();
        self.log.push_note(Note::NamelessMigrate {
            seq,
            new_ppa: dst,
            old: it.old,
            data_crc: it.crc,
            birth_gen: new.generation(),
        });
        let mut notes = 1;
        if self.md_in_zones() {
            notes += self.moved_record(&it, new, seq);
        }
        self.stats.nameless_migrated_blocks += 1;
        self.stats.nameless_migration_note_bytes += notes * NOTE_BYTES as u64;
        let entries = u64::from(self.nameless.remap.len());
        let peak = &mut self.stats.nameless_remap_peak_entries;
        *peak = (*peak).max(entries);
        Some(NamelessEvent::Migrated {
            old: it.old,
            new,
            md: it.md.to_vec(),
        })
    }

    /// In band, the rest of a moved block's record (format.md §11, step
    /// 6): its NamelessMd notes after its NamelessMigrate note `seq`, and
    /// its entry in the destination zone's open group. Returns the notes
    /// pushed.
    fn moved_record(&mut self, it: &MoveItem, new: NamelessAddr, seq: Seq) -> u64 {
        let notes = crate::note::nameless_md_notes(&it.md[..], seq);
        let pushed = notes.len() as u64;
        for n in notes {
            self.log.push_note(n);
        }
        let cap = self.cap();
        let (zone, offset) = (new.ppa().zone(cap), new.ppa().offset_blocks(cap));
        let m = self.nameless.md.as_mut().expect("md placement log");
        m.landed(zone, offset, it.crc, new.generation(), it.md.to_vec());
        pushed
    }

    /// The notes of batch `batch` are durable (or the core went read-only:
    /// the events come after the next mount): its events are ready.
    pub(super) fn migrations_logged(&mut self, batch: u64, result: Result<ReplyData, IoError>) {
        let moves = &mut self.nameless.moves;
        while moves.unlogged.front().is_some_and(|&(b, _)| b <= batch) {
            let (_, event) = moves.unlogged.pop_front().expect("front checked");
            if result.is_ok() {
                self.nameless.events.push_back(event);
            }
        }
        self.serve_event_waiters();
    }
}
