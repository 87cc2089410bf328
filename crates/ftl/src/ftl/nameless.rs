//! The physical segment: nameless writes, reads and frees (docs/design.md,
//! "Nameless space"). The FTL picks where each block goes and answers with
//! its address; in memory a block's validity bit is all there is of it.
//! Its metadata rides in OOB after its tag, which is the block's record for
//! recovery, as a host block's tag is.

use super::lane::Lane;
use super::md_groups::MdGroups;
use super::migrate::Moves;
use super::read::READ_ATTEMPTS;
use super::request::{Reply, ReplyData};
use super::write::Room;
use super::{Ftl, Op, ReplyTo};
use crate::addr::Ppa;
use crate::addr::Seq;
use crate::backend::HOST_ATTEMPTS;
use crate::backend::{Command, DeviceError, Outcome, Payload, ReadPriority, ZoneId};
use crate::births::Births;
use crate::error::{IoError, NamelessError};
use crate::nameless::{
    MdEntry, MdPlacement, NamelessHeader, NamelessImage, NamelessZoneKind, NamelessZoneRecord,
    OpenMdRecord,
};
use crate::nameless::{NamelessAddr, NamelessEvent, NamelessTag, NamelessTagKind};
use crate::note::Note;
use crate::payload::BlockData;
use crate::remap::RemapTable;
use crate::slab::{Key, Slab};
use crate::superblock::TagMode;
use crate::tag::TAG_BYTES;
use crate::zone::Stream;
use std::collections::{BTreeSet, VecDeque};

/// Metadata bytes stored with every nameless block (after its 32-byte tag
/// in OOB).
pub const NAMELESS_MD_BYTES: usize = 32;

/// Blocks of nameless writes admitted and not yet sent to the device: past
/// it a write is `Busy`.
pub(super) const NAMELESS_QUEUE_BLOCKS: u64 = 1024;

/// The physical segment's state in the core.
#[derive(Debug)]
pub(super) struct NamelessState {
    /// Whether the volume has the segment (tags in OOB with room for the
    /// metadata, or in band).
    pub(super) supported: bool,
    /// In band (md placement log): the md groups.
    pub(super) md: Option<MdGroups>,
    /// Per zone, the generation of its nameless data: the birth generation
    /// of every address in it (0: never held nameless data). It goes up each
    /// time the zone is opened for nameless data, so an address from before
    /// a reset is told apart from a block written after it.
    pub(super) gens: Vec<u32>,
    /// Per zone, blocks landed for nameless writes not answered yet. GC
    /// moves none of them: a write that fails frees its landed blocks at
    /// the addresses they landed at, and its client never held them.
    pub(super) unanswered_blocks: Vec<u32>,
    /// Per zone, the generation it was opened with (`base_gen`), and the
    /// live gap fills born with another (step 7 of the address check).
    pub(super) births: Births,
    /// Nameless zones opened whose `NamelessZone` note is not durable yet,
    /// with the log position that makes it so: replies that carry their
    /// generation wait for it, so no generation is handed out twice.
    opening: Vec<(ZoneId, u64)>,
    writes: Slab<NamelessWrite>,
    /// Writes with blocks not yet sent, oldest first.
    queue: VecDeque<Key>,
    /// Blocks of `queue` not yet sent (at most `NAMELESS_QUEUE_BLOCKS`):
    /// what gap fills may take.
    queued_blocks: u64,
    /// Of those, the blocks of plain writes (N_wait of GC's in-place score
    /// while migrations run: see `Ftl::inplace_arrivals`).
    queued_new_blocks: u64,
    /// Blocks of writes and overwrites admitted since mount, and of plain
    /// writes (S_write of GC's in-place score).
    pub(super) admitted_blocks: u64,
    pub(super) admitted_new_blocks: u64,
    /// Blocks admitted and not yet answered: counted against the media's
    /// room (an overwrite's new block lands before its old one goes).
    pending_blocks: u64,
    /// Of those, the blocks of plain writes (not overwrites): counted
    /// against the logical size too.
    pending_new_blocks: u64,
    /// Reads admitted and not yet issued (their zones are pinned).
    reads: VecDeque<NamelessRead>,
    /// Reads issued and not yet answered.
    reads_in_flight: usize,
    /// A nameless zone may hold nothing live: GC looks for one to reset.
    maybe_empty: bool,
    /// Nameless zones with nothing live (GC resets them): the space
    /// account leaves them out.
    empty_zones: u32,
    /// Some zone has held nameless data: checkpoints carry the sections.
    any_generation: bool,
    /// The uncommitted set: the live blocks written since the newest
    /// commit note, at most `uncommitted_capacity` (docs/design.md,
    /// "Recovery and the post-crash hand-over").
    uncommitted: BTreeSet<Ppa>,
    uncommitted_capacity: u64,
    /// Seq of the newest commit note (0: none).
    commit_seq: Seq,
    /// Admission number of the next nameless write: a commit covers the
    /// writes admitted before it.
    next_order: u64,
    /// Commits admitted and not yet logged, oldest first.
    commits: VecDeque<PendingCommit>,
    /// Blocks to read for an event after the mount, as (block, old): the
    /// recovered uncommitted set (old none: `Unrecorded`), then the new
    /// side of each recovered remap entry (`Migrated`).
    handover: VecDeque<(NamelessAddr, NamelessAddr)>,
    /// Of those, reads to issue again (a retry) and reads in flight.
    handover_retry: VecDeque<NamelessRead>,
    handover_reads: usize,
    /// Events prepared and not yet taken.
    pub(super) events: VecDeque<NamelessEvent>,
    /// `Request::NamelessEvents` waiting for one: (id, max).
    event_waiters: VecDeque<(u64, usize)>,
    /// Migrated blocks not yet acknowledged: old address -> new (step 2
    /// of the address check).
    pub(super) remap: RemapTable,
    /// Migrations in flight and moves not yet acknowledged.
    pub(super) moves: Moves,
}

/// What a mount recovered of the segment.
pub(super) struct Recovered {
    pub(super) gens: Vec<u32>,
    pub(super) births: Births,
    /// The uncommitted set (live blocks, increasing).
    pub(super) uncommitted: Vec<Ppa>,
    pub(super) commit_seq: Seq,
    /// The remap table: (old, new), old increasing.
    pub(super) remap: Vec<(NamelessAddr, NamelessAddr)>,
}

/// A `Request::NamelessCommit` until its note is pushed.
#[derive(Debug)]
struct PendingCommit {
    id: u64,
    /// It covers the writes admitted before write number `before`.
    before: u64,
    /// Of those, the writes not yet answered.
    ahead: usize,
    /// Its flush is under way.
    flushing: bool,
    /// The flush ahead of its acknowledgements is under way.
    acks_flushing: bool,
    /// The old addresses of the `Migrated` events delivered before it was
    /// admitted: it acknowledges them (at most the remap table's entries).
    acks: Vec<NamelessAddr>,
}

/// Handover reads in flight at most: they go beside the host's.
const HANDOVER_READS_IN_FLIGHT: usize = 8;

#[derive(Debug)]
struct NamelessWrite {
    id: u64,
    /// Admission number (`NamelessState::next_order`).
    order: u64,
    blocks: Vec<BlockData>,
    md: Vec<u8>,
    crcs: Vec<u32>,
    /// Per block, the address it replaces (`NamelessOverwrite`), or empty.
    old: Vec<NamelessAddr>,
    fua: bool,
    sent: usize,
    done: usize,
    addrs: Vec<NamelessAddr>,
    error: Option<IoError>,
    /// A block landed in a zone whose generation is not durable yet.
    needs_log: bool,
}

#[derive(Debug)]
pub(super) struct NamelessRead {
    id: u64,
    addr: NamelessAddr,
    /// For the read of a `Migrated` event, the old address (else none).
    old: NamelessAddr,
    attempts: u8,
    host_aborts: u8,
    /// In band, once the block is read and its md is not in memory: the
    /// block, while its md block is read.
    data: Option<Vec<u8>>,
}

/// Block `index` of write `key`, written as a gap fill at `offset` of the
/// in-place victim.
#[derive(Debug)]
pub(super) struct GapFill {
    key: Key,
    index: usize,
    offset: u64,
    /// Its seq (in band its NamelessWrite note's).
    seq: Seq,
    /// For an overwrite, the block it replaces (its link: freed once the
    /// job's `InPlaceDone` is durable), else none.
    replaced: NamelessAddr,
}

/// The blocks of one nameless append: `count` blocks of write `key` from
/// its block `first`, then `pad_blocks` of padding.
#[derive(Debug)]
pub(super) struct NamelessAppend {
    zone: ZoneId,
    key: Key,
    first: usize,
    count: usize,
    pad_blocks: u64,
    /// The blocks its overwrites replace (`Moves::replacing`).
    replaced: Vec<Ppa>,
    /// Seq of its first block (the rest follow).
    first_seq: Seq,
}

impl NamelessState {
    /// `empty_zones`: the nameless zones that hold nothing live.
    /// Every block of the recovered uncommitted set is handed over (its
    /// event prepared by a read); the set's bound is the larger of
    /// `uncommitted_capacity` and what was recovered.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        r: Recovered,
        empty_zones: u32,
        supported: bool,
        md: Option<MdGroups>,
        max_requests: usize,
        uncommitted_capacity: u32,
        remap_capacity: u32,
        zone_capacity_blocks: u64,
    ) -> NamelessState {
        let handover = r
            .uncommitted
            .iter()
            .map(|&p| {
                let zone = p.zone(zone_capacity_blocks);
                let addr = NamelessAddr::new(p, r.births.birth(p, zone));
                (addr, NamelessAddr::NONE)
            })
            .chain(r.remap.iter().map(|&(old, new)| (new, old)))
            .collect();
        let capacity = u64::from(uncommitted_capacity.max(1)).max(r.uncommitted.len() as u64);
        NamelessState {
            empty_zones,
            any_generation: r.gens.iter().any(|&g| g > 0),
            supported,
            md,
            unanswered_blocks: vec![0; r.gens.len()],
            gens: r.gens,
            births: r.births,
            uncommitted: r.uncommitted.into_iter().collect(),
            uncommitted_capacity: capacity,
            commit_seq: r.commit_seq,
            next_order: 0,
            commits: VecDeque::new(),
            handover,
            handover_retry: VecDeque::new(),
            handover_reads: 0,
            events: VecDeque::new(),
            event_waiters: VecDeque::new(),
            opening: Vec::new(),
            writes: Slab::new(max_requests.max(1)),
            queue: VecDeque::new(),
            queued_blocks: 0,
            queued_new_blocks: 0,
            admitted_blocks: 0,
            admitted_new_blocks: 0,
            pending_blocks: 0,
            pending_new_blocks: 0,
            reads: VecDeque::new(),
            reads_in_flight: 0,
            maybe_empty: true,
            remap: RemapTable::recovered(remap_capacity, &r.remap),
            moves: Moves::recovered(&r.remap, zone_capacity_blocks),
        }
    }

    /// Requests admitted and not yet answered.
    pub(super) fn pending_requests(&self) -> usize {
        self.writes.len()
            + self.reads.len()
            + self.reads_in_flight
            + self.commits.len()
            + self.event_waiters.len()
    }

    pub(super) fn is_idle(&self) -> bool {
        self.pending_requests() == 0 && !self.handover_pending()
    }

    /// Events of the hand-over still to prepare.
    fn handover_pending(&self) -> bool {
        !self.handover.is_empty() || !self.handover_retry.is_empty() || self.handover_reads > 0
    }

    /// Blocks in the uncommitted set.
    pub(super) fn uncommitted_blocks(&self) -> u64 {
        self.uncommitted.len() as u64
    }

    /// Events prepared or still to prepare.
    pub(super) fn events_pending(&self) -> u64 {
        (self.events.len()
            + self.handover.len()
            + self.handover_retry.len()
            + self.handover_reads
            + self.moves.unlogged_events()) as u64
    }

    /// Of those, the blocks of plain writes, which add live blocks.
    pub(super) fn pending_new_blocks(&self) -> u64 {
        self.pending_new_blocks
    }

    pub(super) fn queued_blocks(&self) -> u64 {
        self.queued_blocks
    }

    pub(super) fn queued_new_blocks(&self) -> u64 {
        self.queued_new_blocks
    }

    /// `n` queued blocks were sent (or dropped), of a plain write if
    /// `plain`.
    fn dequeued(&mut self, n: u64, plain: bool) {
        self.queued_blocks -= n;
        if plain {
            self.queued_new_blocks -= n;
        }
    }
}

/// Where a volume of this tag mode and OOB size keeps nameless md, if it
/// has the physical segment: in OOB after the tag when there is room; in
/// band in md groups (docs/format.md §11). Tags in an OOB too small for
/// the md: no segment (their blocks would need both records).
pub(crate) fn segment_placement(tag_mode: TagMode, oob_size_bytes: usize) -> Option<MdPlacement> {
    match tag_mode {
        TagMode::Oob if oob_size_bytes >= TAG_BYTES + NAMELESS_MD_BYTES => Some(MdPlacement::Oob),
        TagMode::Oob => None,
        TagMode::InBand => Some(MdPlacement::Log),
    }
}

impl Ftl {
    /// Metadata bytes every nameless block carries.
    pub fn nameless_md_bytes(&self) -> usize {
        NAMELESS_MD_BYTES
    }

    /// Dead blocks of the nameless zones GC cannot collect now, which the
    /// space account counts as used: the written dead blocks of those
    /// holding a block awaiting acknowledgement (not migrated before it
    /// comes), and once migrations
    /// stopped for want of remap room, every nameless zone holding a live
    /// block (as a whole zone: the open one's tail too). O(zones pinned).
    pub(super) fn nameless_dead_blocks(&self) -> u64 {
        // Every logical write's admission asks: a volume without nameless
        // zones answers at once.
        if self.zones.nameless_zone_count() == 0 {
            return 0;
        }
        let cap = self.data_cap();
        if self.migration_stopped() {
            let held = self.zones.nameless_zone_count() - self.nameless.empty_zones;
            return (u64::from(held) * cap).saturating_sub(self.mapping.nameless_blocks());
        }
        // Written blocks only: the open zone's tail takes more moves.
        self.nameless
            .moves
            .pinned_zones()
            .map(|z| {
                let written = self.zones.get(z).write_pointer_blocks().min(cap);
                written.saturating_sub(self.mapping.valid_blocks(z))
            })
            .sum()
    }

    /// A migration moved the live block at `src` to `dst`: validity, the
    /// uncommitted set (the block stays in it, at its new place) and the
    /// zones' emptiness follow.
    pub(super) fn nameless_relocate(&mut self, src: Ppa, dst: Ppa) {
        let cap = self.cap();
        let fresh = self.mapping.nameless_set(dst);
        assert!(fresh, "migrated block {dst:?} landed on a live block");
        if self.mapping.valid_blocks(dst.zone(cap)) == 1 {
            self.nameless.empty_zones -= 1;
        }
        let cleared = self.mapping.nameless_clear(src);
        assert!(cleared, "migrated block {src:?} was not live");
        if self.nameless.uncommitted.remove(&src) {
            self.nameless.uncommitted.insert(dst);
        }
        self.nameless_cleared(src);
    }

    /// What the nameless sections (16–22, 24) add to a checkpoint at most:
    /// their headers, the header, a generation per zone, a record and a
    /// full bitmap per nameless zone, and 8 bytes per gap fill live or
    /// written by the running job. O(1); 0 before any nameless zone.
    pub(super) fn nameless_checkpoint_bytes(&self) -> u64 {
        if self.zones.nameless_zone_count() == 0 && !self.nameless.any_generation {
            return 0;
        }
        let zones = u64::from(self.geo.zone_count);
        let nameless = u64::from(self.zones.nameless_zone_count());
        let set = 16 + 8 + 4 * self.nameless.uncommitted_blocks();
        let remap = 16 + 8 + 16 * u64::from(self.nameless.remap.len());
        let open_md = self
            .nameless
            .md
            .as_ref()
            .map_or(0, |m| 16 + m.checkpoint_bytes());
        // Section 24: the live fills and those a running job may add.
        let fills = 16 + 8 + 8 * (self.nameless.births.fill_count() + self.inplace_fills_pending());
        4 * 16
            + 32
            + 8 * zones
            + 8
            + nameless * (24 + self.cap().div_ceil(64) * 8)
            + set
            + remap
            + open_md
            + fills
    }

    /// A nameless zone was reset or retired (it held nothing live).
    pub(super) fn nameless_zone_gone(&mut self, zone: ZoneId) {
        self.nameless.empty_zones -= 1;
        if let Some(m) = &mut self.nameless.md {
            m.zone_reset(zone);
        }
    }

    /// The nameless block at `ppa` is freed: its zone may be empty now,
    /// and it leaves the uncommitted set.
    fn nameless_cleared(&mut self, ppa: Ppa) {
        self.nameless.uncommitted.remove(&ppa);
        self.nameless.births.forget(ppa);
        // A moved block freed: its entry goes too (replay drops it with
        // the same free).
        if let Some(old) = self.nameless.moves.unpin(ppa, self.cap()) {
            self.nameless.remap.remove(old);
        }
        self.nameless.maybe_empty = true;
        if self.mapping.valid_blocks(ppa.zone(self.cap())) == 0 {
            self.nameless.empty_zones += 1;
        }
    }

    /// A nameless zone with nothing live, to reset (once GC may); none
    /// when no nameless block was freed since the last search found none.
    pub(super) fn empty_nameless_victim(&mut self) -> Option<ZoneId> {
        if !self.nameless.maybe_empty {
            return None;
        }
        let valid = |z: ZoneId| self.mapping.valid_blocks(z);
        // As for a migration victim: a zone written since the committed
        // checkpoint may hold the only record of a free (an overwrite's
        // tag link), which its reset would erase; it waits for the next
        // checkpoint (asked for here).
        let young = |z: ZoneId| self.zones.get(z).last_write_seq() >= self.committed_next_seq;
        let found = self
            .zones
            .pick_empty_nameless(valid, |z| self.excluded(z) || young(z));
        if found.is_some() {
            return found;
        }
        let waits = self
            .zones
            .pick_empty_nameless(valid, |z| self.excluded(z))
            .is_some();
        if waits && matches!(self.ckpt, super::ckpt::CkptState::Idle) {
            self.ckpt_requested = true;
        }
        // An excluded empty zone (a lane's, a victim's) is found again
        // after the next free; a young one after the checkpoint.
        self.nameless.maybe_empty = waits;
        None
    }

    /// The segment's state for a checkpoint (sections 16–19): every
    /// zone's generation and each nameless zone's validity. `recorded`
    /// tells which zones the checkpoint records as nameless (a victim whose
    /// reset is noted goes in as free).
    pub(super) fn nameless_image(&self, recorded: impl Fn(ZoneId) -> bool) -> NamelessImage {
        if !self.nameless.any_generation {
            return NamelessImage::default();
        }
        let zones = (0..self.geo.zone_count)
            .filter(|&z| recorded(z))
            .map(|z| {
                let (end, last_md_at, md_written) = match &self.nameless.md {
                    Some(m) => {
                        let (end, at) = m.tails[z as usize];
                        let open = m.group(z).is_some();
                        (
                            u64::from(end),
                            (at != u32::MAX).then_some(at),
                            end > 0 && !open,
                        )
                    }
                    None => (self.zones.get(z).write_pointer_blocks(), None, false),
                };
                NamelessZoneRecord {
                    zone: z,
                    data_end: u32::try_from(end).expect("zone capacity fits u32"),
                    last_md_at,
                    live_blocks: self.mapping.valid_blocks(z) as u32,
                    md_written,
                    held: self.lanes.iter().any(|l| l.zone == Some(z)),
                    valid: self.mapping.zone_bitmap(z, end),
                }
            })
            .collect();
        let uncommitted: Vec<Ppa> = self.nameless.uncommitted.iter().copied().collect();
        for &p in &uncommitted {
            assert!(
                self.mapping.is_live(p) && recorded(p.zone(self.cap())),
                "uncommitted block {p:?} is not a live block of a nameless zone"
            );
        }
        let mut open_md: Vec<OpenMdRecord> = self
            .nameless
            .md
            .iter()
            .flat_map(|m| &m.open)
            .filter(|g| recorded(g.zone))
            .map(|g| OpenMdRecord {
                zone: g.zone,
                entries: g.entries.clone(),
            })
            .collect();
        open_md.sort_by_key(|r| r.zone);
        let (placement, group_blocks) = match &self.nameless.md {
            Some(m) => (MdPlacement::Log, m.layout.group_blocks as u32),
            None => (MdPlacement::Oob, 0),
        };
        NamelessImage {
            header: Some(NamelessHeader {
                md_bytes: NAMELESS_MD_BYTES as u16,
                placement,
                group_blocks,
                remap_capacity: self.nameless.remap.capacity(),
                uncommitted_capacity: u32::try_from(self.nameless.uncommitted_capacity)
                    .expect("the uncommitted capacity fits u32"),
                commit_seq: self.nameless.commit_seq,
                fill_links: true,
            }),
            generations: self
                .nameless
                .gens
                .iter()
                .zip(self.nameless.births.bases())
                .map(|(&g, &base)| (g, base))
                .collect(),
            fills: self.nameless.births.fills().collect(),
            zones,
            remap: self.nameless.remap.entries(),
            uncommitted,
            open_md,
            ..NamelessImage::default()
        }
    }

    /// Offsets of a zone nameless blocks may have: in band the md groups
    /// lie among them (an md block's offset is never live).
    fn nameless_offset_limit(&self) -> u64 {
        if self.md_in_zones() {
            self.cap()
        } else {
            self.data_cap()
        }
    }

    fn nameless_supported(&self) -> Result<(), IoError> {
        if self.nameless.supported {
            return Ok(());
        }
        Err(NamelessError::Unsupported {
            needed_oob_bytes: TAG_BYTES + NAMELESS_MD_BYTES,
            oob_bytes: self.geo.oob_size_bytes as usize,
        }
        .into())
    }

    fn is_nameless_zone(&self, zone: ZoneId) -> bool {
        self.zones.get(zone).kind().is_nameless()
    }

    /// Checks an address a caller holds (docs/design.md, "The address a
    /// client holds"): the block it names, if that block is live.
    pub(super) fn nameless_check(&self, addr: NamelessAddr) -> Result<Ppa, NamelessError> {
        self.nameless_resolve(addr).map(NamelessAddr::ppa)
    }

    /// The address check, answering the address of the block itself: for
    /// an address with a remap entry, its new address (step 2). What the
    /// core logs for a free or an overwrite names that block (format.md
    /// §11, replay step 5).
    pub(super) fn nameless_resolve(
        &self,
        addr: NamelessAddr,
    ) -> Result<NamelessAddr, NamelessError> {
        self.nameless_check_outside(addr)?;
        // Step 2: a migrated block not yet acknowledged is reached by its
        // old address; the new one is checked from step 3 on.
        let addr = self.nameless.remap.get(addr).unwrap_or(addr);
        self.nameless_check_at(addr).map(|_| addr)
    }

    /// Step 1 of the address check: the address lies in the segment.
    fn nameless_check_outside(&self, addr: NamelessAddr) -> Result<(), NamelessError> {
        let cap = self.cap();
        let ppa = addr.ppa();
        let outside = addr.is_none()
            || addr.generation() == 0
            || ppa.0 >= self.mapping.physical_blocks()
            || ppa.zone(cap) < self.layout.first_data_zone()
            || ppa.offset_blocks(cap) >= self.nameless_offset_limit();
        if outside {
            return Err(NamelessError::OutOfSegment { addr });
        }
        Ok(())
    }

    /// Steps 3–6 of the address check (step 1 included: a remap entry's
    /// new address is in the segment, checked again as a guard).
    fn nameless_check_at(&self, addr: NamelessAddr) -> Result<Ppa, NamelessError> {
        self.nameless_check_outside(addr)?;
        let cap = self.cap();
        let ppa = addr.ppa();
        let zone = ppa.zone(cap);
        let generation = self.nameless.gens[zone as usize];
        let stale = || NamelessError::Stale {
            addr,
            zone_generation: generation,
        };
        if addr.generation() > generation {
            return Err(NamelessError::NotLive { addr });
        }
        if !self.is_nameless_zone(zone) || addr.generation() < self.nameless.births.base(zone) {
            return Err(stale());
        }
        if !self.mapping.is_live(ppa) {
            return Err(NamelessError::NotLive { addr });
        }
        // Steps 6 and 7: the block there now was born with the address's
        // generation (a gap fill's is in the map, any other's is the base).
        if self.nameless.births.birth(ppa, zone) != addr.generation() {
            return Err(stale());
        }
        Ok(ppa)
    }

    /// Admits a nameless write (`old` empty) or overwrite.
    pub(super) fn start_nameless_write(
        &mut self,
        id: u64,
        data: Vec<u8>,
        md: Vec<u8>,
        old: Vec<NamelessAddr>,
        fua: bool,
    ) -> Result<(), IoError> {
        self.nameless_supported()?;
        let bs = self.block_size();
        crate::tag::check_whole_blocks(data.len(), bs)?;
        let n = data.len() / bs;
        if n as u64 > NAMELESS_QUEUE_BLOCKS {
            return Err(IoError::TooLarge {
                block_count: n as u64,
                max_blocks: NAMELESS_QUEUE_BLOCKS as u32,
            });
        }
        if md.len() != n * NAMELESS_MD_BYTES {
            return Err(NamelessError::MetadataSize {
                expected_bytes: n * NAMELESS_MD_BYTES,
                actual_bytes: md.len(),
            }
            .into());
        }
        if !old.is_empty() {
            self.check_replaced(&old, n)?;
        }
        if self.read_only {
            return Err(IoError::ReadOnly);
        }
        if self.nameless.queued_blocks + n as u64 > NAMELESS_QUEUE_BLOCKS
            || self.nameless.writes.len() >= self.cfg.max_host_requests as usize
            || !self.uncommitted_room(n as u64)
        {
            return Err(IoError::Busy);
        }
        // An overwrite frees as many blocks as it writes.
        let new_blocks = if old.is_empty() { n as u64 } else { 0 };
        match self.space_for(new_blocks, false) {
            Room::Fits => {}
            // With migrations stopped, GC's in-place victim collects the
            // held dead blocks for queued writes and overwrites (its gap
            // fills).
            Room::HeldDead if self.gap_fills_collect() => {}
            Room::HeldDead => {
                let entries = self.nameless.remap.len();
                if entries > 0 {
                    return Err(NamelessError::MovesUnacknowledged { entries }.into());
                }
                return Err(IoError::NoSpace);
            }
            Room::Full => return Err(IoError::NoSpace),
        }
        let mut crcs = vec![0u32; n];
        crate::tag::data_crcs(&data, bs, &mut crcs);
        let order = self.nameless.next_order;
        self.nameless.next_order += 1;
        let key = self.nameless.writes.insert(NamelessWrite {
            id,
            order,
            blocks: BlockData::blocks(data, bs),
            md,
            crcs,
            old,
            fua,
            sent: 0,
            done: 0,
            addrs: vec![NamelessAddr::NONE; n],
            error: None,
            needs_log: false,
        });
        let w = self.nameless.writes.get(key).expect("just admitted");
        self.nameless.moves.overwriting(&w.old);
        self.nameless.queue.push_back(key);
        self.nameless.queued_blocks += n as u64;
        self.nameless.queued_new_blocks += new_blocks;
        self.nameless.admitted_blocks += n as u64;
        self.nameless.admitted_new_blocks += new_blocks;
        self.nameless.pending_blocks += n as u64;
        self.nameless.pending_new_blocks += new_blocks;
        Ok(())
    }

    /// Whether the nameless zones' dead blocks the space account holds
    /// (`nameless_dead_blocks`) are room for writes and overwrites:
    /// migrations have stopped, and in-place collection fills gaps with
    /// them.
    fn gap_fills_collect(&self) -> bool {
        self.nameless.supported && self.migration_stopped()
    }

    /// Whether the uncommitted set, and its section in the next checkpoint,
    /// have room for `blocks` more beside the writes in flight.
    fn uncommitted_room(&self, blocks: u64) -> bool {
        let n = &self.nameless;
        let more = n.pending_blocks + blocks;
        n.uncommitted_blocks() + more <= n.uncommitted_capacity
            && 4 * more <= self.checkpoint_room_bytes()
    }

    /// The addresses an overwrite replaces: one per block, distinct, live.
    fn check_replaced(&self, old: &[NamelessAddr], blocks: usize) -> Result<(), IoError> {
        if old.len() != blocks {
            return Err(NamelessError::AddressCount {
                expected: blocks,
                actual: old.len(),
            }
            .into());
        }
        self.resolve_distinct(old).map(|_| ())
    }

    /// The blocks `addrs` name (step 2 resolved), if each checks and no
    /// two name the same block (an old address and its new one do).
    fn resolve_distinct(&self, addrs: &[NamelessAddr]) -> Result<Vec<NamelessAddr>, IoError> {
        let blocks: Vec<NamelessAddr> = addrs
            .iter()
            .map(|&a| self.nameless_resolve(a))
            .collect::<Result<_, _>>()?;
        let mut ppas: Vec<Ppa> = blocks.iter().map(|a| a.ppa()).collect();
        ppas.sort_unstable();
        if let Some(w) = ppas.windows(2).find(|w| w[0] == w[1]) {
            let at = blocks
                .iter()
                .position(|a| a.ppa() == w[0])
                .expect("in blocks");
            return Err(NamelessError::Duplicate { addr: addrs[at] }.into());
        }
        Ok(blocks)
    }

    /// The tag links of the next `n` blocks of write `key`: the blocks
    /// they replace, as the address of the block itself (step 2 resolved),
    /// so replay frees that block; an address that no longer checks goes
    /// in as given (replay finds it not live).
    fn replaced_links(&self, key: Key, n: usize) -> Vec<NamelessAddr> {
        let w = self.nameless.writes.get(key).expect("queued write");
        (w.sent..w.sent + n)
            .map(|i| match w.old.get(i) {
                Some(&o) => self.nameless_resolve(o).unwrap_or(o),
                None => NamelessAddr::NONE,
            })
            .collect()
    }

    /// The next append of queued nameless blocks, into the nameless lane.
    pub(super) fn next_nameless_append(&mut self) -> Option<(Op, Command)> {
        if self.read_only
            || matches!(self.ckpt, super::ckpt::CkptState::Draining)
            || self.checkpoint_held()
        {
            return None;
        }
        let key = *self.nameless.queue.front()?;
        let w = self.nameless.writes.get_mut(key).expect("queued write");
        if let Some(c) = self.nameless.commits.front() {
            if w.order >= c.before {
                // Written after the commit's note: it waits for the note.
                return None;
            }
        }
        let remaining = (w.blocks.len() - w.sent) as u64;
        let (lane, zone, room) = self.nameless_room(remaining)?;
        // Nameless appends keep the device's largest (`append_max_blocks`
        // bounds the logical lanes' only).
        let max_blocks = u64::from(self.geo.max_append_blocks);
        let (n, pad) = self.batch_size_within(max_blocks, remaining, room, true);
        if n == 0 {
            return None;
        }
        let generation = self.nameless.gens[zone as usize];
        let first_seq = self.next_seq;
        self.next_seq += n;
        let (mut data, mut oob) = (Payload::new(), self.alloc_oob(n + pad));
        let ob = self.geo.oob_size_bytes as usize;
        let links = self.replaced_links(key, n as usize);
        let replaced: Vec<Ppa> = links
            .iter()
            .filter(|l| !l.is_none())
            .map(|l| l.ppa())
            .collect();
        for &p in &replaced {
            self.nameless.moves.replacing(p);
        }
        let in_band = self.md_in_zones();
        let w = self.nameless.writes.get_mut(key).expect("queued write");
        let first = w.sent;
        for i in first..first + n as usize {
            data.push(w.blocks[i].clone());
            if in_band {
                // The record goes to the log once the block landed.
                oob.resize(oob.len() + ob, 0);
                continue;
            }
            let at = oob.len();
            oob.resize(at + ob, 0);
            let tag = NamelessTag {
                kind: NamelessTagKind::Data,
                birth_gen: generation,
                link: links[i - first],
                seq: first_seq + (i - first) as u64,
                data_crc: w.crcs[i],
            };
            let md = &w.md[i * NAMELESS_MD_BYTES..(i + 1) * NAMELESS_MD_BYTES];
            tag.encode(md, &mut oob[at..at + ob]);
        }
        w.sent += n as usize;
        if w.sent == w.blocks.len() {
            self.nameless.queue.pop_front();
        }
        let plain = w.old.is_empty();
        self.nameless.dequeued(n, plain);
        let bs = self.block_size();
        self.push_padding(&mut data, &mut oob, pad, bs);
        self.lane_commit(lane, zone, n + pad, first_seq + n - 1);
        self.host_appends_in_flight += 1;
        self.earn_gc_credit(n + pad);
        self.stats.media_write_blocks += n + pad;
        self.stats.pad_blocks += pad;
        self.stats.nameless_write_blocks += n;
        self.blocks_since_checkpoint += n + pad;
        let append = NamelessAppend {
            zone,
            key,
            first,
            count: n as usize,
            pad_blocks: pad,
            replaced,
            first_seq,
        };
        Some((
            Op::NamelessAppend(append),
            Command::Append { zone, data, oob },
        ))
    }

    /// Room for `blocks` nameless blocks: in the stripe
    /// `nameless_destination` picks, or, if it cannot open a zone (the
    /// open-zone budget, the reserve), in any stripe holding one.
    fn nameless_room(&mut self, blocks: u64) -> Option<(Lane, ZoneId, u64)> {
        let lane = self.nameless_destination();
        if let Some(room) = self.room_in(lane, blocks, false) {
            return Some(room);
        }
        let open: Vec<Lane> = self
            .nameless_lanes()
            .filter(|&l| l != lane && self.lanes[l.index()].zone.is_some())
            .collect();
        open.into_iter()
            .find_map(|l| self.room_in(l, blocks, false))
    }

    /// A nameless zone was opened: its generation goes up, logged before
    /// any address carrying it is answered.
    pub(super) fn nameless_zone_opened(&mut self, zone: ZoneId, stream: Stream) {
        let generation = self.nameless.gens[zone as usize]
            .checked_add(1)
            .expect("zone generations outlast the zone's erases");
        self.nameless.gens[zone as usize] = generation;
        self.nameless.births.set_base(zone, generation);
        self.nameless.any_generation = true;
        self.nameless.empty_zones += 1;
        let seq = self.take_seq();
        self.log.push_note(Note::NamelessZone {
            seq,
            zone,
            generation,
            kind: if stream == Stream::NamelessMoved {
                NamelessZoneKind::Moved
            } else {
                NamelessZoneKind::Data
            },
        });
        self.log.pack(true);
        let barrier = self.log.next_log_seq();
        self.nameless.opening.push((zone, barrier));
    }

    pub(super) fn nameless_append_done(
        &mut self,
        a: NamelessAppend,
        result: Result<Outcome, DeviceError>,
    ) {
        self.host_appends_in_flight -= 1;
        self.append_settled(a.zone);
        for &p in &a.replaced {
            self.nameless.moves.replaced(p);
        }
        let durable = self.log.durable_next();
        self.nameless
            .opening
            .retain(|&(_, barrier)| durable < barrier);
        let offset = match Self::appended_at(result) {
            Ok(offset) => Some(offset),
            Err(e) => {
                self.stats.media_write_blocks -= a.count as u64 + a.pad_blocks;
                self.stats.nameless_write_blocks -= a.count as u64;
                self.write_failed(a.zone, e.clone());
                let w = self
                    .nameless
                    .writes
                    .get_mut(a.key)
                    .expect("write in flight");
                w.error.get_or_insert(match e {
                    DeviceError::DeviceGone => IoError::DeviceGone,
                    e => IoError::Device {
                        lba: u64::MAX,
                        source: e,
                    },
                });
                None
            }
        };
        if let Some(offset) = offset {
            self.appends_done += 1;
            self.host_write_failures = 0;
            self.nameless_landed(&a, offset);
        }
        self.nameless_write_progress(a.key, a.count);
    }

    /// Makes the blocks of a completed append live, and frees what they
    /// replace (a racing free already did, or the old zone is gone).
    fn nameless_landed(&mut self, a: &NamelessAppend, offset: u64) {
        let cap = self.cap();
        let generation = self.nameless.gens[a.zone as usize];
        let opening = self.nameless.opening.iter().any(|&(z, _)| z == a.zone);
        for i in 0..a.count {
            let ppa = Ppa::new(a.zone, offset + i as u64, cap);
            let fresh = self.mapping.nameless_set(ppa);
            assert!(fresh, "nameless block {ppa:?} landed on a live block");
            self.nameless.uncommitted.insert(ppa);
            self.nameless.unanswered_blocks[a.zone as usize] += 1;
            if self.mapping.valid_blocks(a.zone) == 1 {
                self.nameless.empty_zones -= 1;
            }
            let w = self
                .nameless
                .writes
                .get_mut(a.key)
                .expect("write in flight");
            w.addrs[a.first + i] = NamelessAddr::new(ppa, generation);
            w.needs_log |= opening;
            let old = w.old.get(a.first + i).copied();
            let replaced = old.and_then(|o| self.nameless_resolve(o).ok());
            if self.md_in_zones() {
                self.nameless_record(a, i, ppa, replaced.unwrap_or(NamelessAddr::NONE));
            }
            if let Some(old) = replaced {
                if self.mapping.nameless_clear(old.ppa()) {
                    self.stats.nameless_free_blocks += 1;
                    self.nameless_cleared(old.ppa());
                }
            }
        }
    }

    /// In band, block `i` of append `a` landed at `ppa`: its record, as
    /// the NamelessWrite note and its NamelessMd notes (durable at the
    /// next flush, as the block is; the write is answered at once) and as its entry in the zone's
    /// open group (its md block's, later).
    fn nameless_record(&mut self, a: &NamelessAppend, i: usize, ppa: Ppa, replaced: NamelessAddr) {
        let cap = self.cap();
        let generation = self.nameless.gens[a.zone as usize];
        let w = self
            .nameless
            .writes
            .get_mut(a.key)
            .expect("write in flight");
        let b = a.first + i;
        let md = w.md[b * NAMELESS_MD_BYTES..(b + 1) * NAMELESS_MD_BYTES].to_vec();
        let data_crc = w.crcs[b];
        let seq = a.first_seq + i as u64;
        self.log.push_note(Note::NamelessWrite {
            seq,
            ppa,
            data_crc,
            birth_gen: generation,
            replaced,
        });
        for n in crate::note::nameless_md_notes(&md, seq) {
            self.log.push_note(n);
        }
        let m = self.nameless.md.as_mut().expect("md placement log");
        m.landed(a.zone, ppa.offset_blocks(cap), data_crc, generation, md);
    }

    /// `count` more blocks of write `key` are done: answers it once all
    /// are (an error frees the blocks that landed).
    fn nameless_write_progress(&mut self, key: Key, count: usize) {
        let w = self.nameless.writes.get_mut(key).expect("write in flight");
        w.done += count;
        if w.error.is_some() && w.sent < w.blocks.len() {
            // Send no more of it.
            let unsent = (w.blocks.len() - w.sent) as u64;
            w.done += w.blocks.len() - w.sent;
            w.sent = w.blocks.len();
            let plain = w.old.is_empty();
            self.nameless.dequeued(unsent, plain);
            self.nameless.queue.retain(|&k| k != key);
        }
        let w = self.nameless.writes.get_mut(key).expect("write in flight");
        if w.done < w.blocks.len() {
            return;
        }
        let w = self.nameless.writes.remove(key).expect("write in flight");
        let cap = self.cap();
        for a in w.addrs.iter().filter(|a| !a.is_none()) {
            self.nameless.unanswered_blocks[a.ppa().zone(cap) as usize] -= 1;
        }
        self.nameless.moves.overwritten(&w.old);
        self.nameless.pending_blocks -= w.blocks.len() as u64;
        if w.old.is_empty() {
            self.nameless.pending_new_blocks -= w.blocks.len() as u64;
        }
        for c in &mut self.nameless.commits {
            if w.order < c.before {
                c.ahead -= 1;
            }
        }
        if let Some(e) = w.error {
            let landed: Vec<NamelessAddr> =
                w.addrs.iter().copied().filter(|a| !a.is_none()).collect();
            self.nameless_release(&landed);
            self.replies.push_back(Reply {
                id: w.id,
                result: Err(e),
            });
            return;
        }
        let reply = ReplyData::Addrs(w.addrs);
        if w.fua || w.needs_log {
            self.add_log_waiter(ReplyTo::Caller(w.id), reply);
        } else {
            self.replies.push_back(Reply {
                id: w.id,
                result: Ok(reply),
            });
        }
    }

    /// The next block of the oldest queued nameless write, to fill the gap
    /// at `offset` of the in-place victim (docs/design.md, step 5), its
    /// tag written to `oob` (md in OOB; in band its entry is
    /// `gap_fill_entry`'s): birth generation `gap_gen`, a new seq, and
    /// link none, or for an overwrite the block it replaces, which stays
    /// live (and unmoved) until the job's `InPlaceDone` is durable: a cut
    /// before drops the fill and keeps the old block (format.md §11, step
    /// 9, "Overwrite fills"). Not a block a pending commit must precede.
    pub(super) fn take_gap_fill(
        &mut self,
        gap_gen: u32,
        offset: u64,
        oob: &mut [u8],
    ) -> Option<(GapFill, BlockData)> {
        let key = *self.nameless.queue.front()?;
        let w = self.nameless.writes.get(key).expect("queued write");
        let after_commit = self
            .nameless
            .commits
            .front()
            .is_some_and(|c| w.order >= c.before);
        if w.error.is_some() || after_commit {
            return None;
        }
        let replaced = self.replaced_links(key, 1)[0];
        if !replaced.is_none() {
            // No migration moves it before the fill is answered.
            self.nameless.moves.replacing(replaced.ppa());
        }
        let seq = self.take_seq();
        let w = self.nameless.writes.get_mut(key).expect("queued write");
        let index = w.sent;
        w.sent += 1;
        let tag = NamelessTag {
            kind: NamelessTagKind::Data,
            birth_gen: gap_gen,
            link: replaced,
            seq,
            data_crc: w.crcs[index],
        };
        if self.nameless.md.is_none() {
            tag.encode(
                &w.md[index * NAMELESS_MD_BYTES..(index + 1) * NAMELESS_MD_BYTES],
                oob,
            );
        }
        let block = w.blocks[index].clone();
        if w.sent == w.blocks.len() {
            self.nameless.queue.pop_front();
        }
        let plain = w.old.is_empty();
        self.nameless.dequeued(1, plain);
        self.stats.nameless_write_blocks += 1;
        let fill = GapFill {
            key,
            index,
            offset,
            seq,
            replaced,
        };
        Some((fill, block))
    }

    /// In band, the md entry of gap fill `f`, born with `gap_gen`.
    pub(super) fn gap_fill_entry(&self, f: &GapFill, gap_gen: u32) -> crate::nameless::MdEntry {
        let w = self.nameless.writes.get(f.key).expect("a fill's write");
        crate::nameless::MdEntry {
            home_offset: f.offset as u32,
            data_crc: w.crcs[f.index],
            birth_gen: gap_gen,
            md: w.md[f.index * NAMELESS_MD_BYTES..(f.index + 1) * NAMELESS_MD_BYTES].to_vec(),
        }
    }

    /// Gap fills of in-place victim `zone` were written: live at their
    /// offsets, born with `gap_gen` (in the map of step 7), in the
    /// uncommitted set. Their writes are answered later
    /// (`answer_gap_fills`).
    pub(super) fn gap_fills_landed(&mut self, zone: ZoneId, gap_gen: u32, fills: &[GapFill]) {
        let cap = self.cap();
        for f in fills {
            let ppa = Ppa::new(zone, f.offset, cap);
            let fresh = self.mapping.nameless_set(ppa);
            assert!(fresh, "gap fill {ppa:?} landed on a live block");
            if self.mapping.valid_blocks(zone) == 1 {
                self.nameless.empty_zones -= 1;
            }
            self.nameless.uncommitted.insert(ppa);
            self.nameless.unanswered_blocks[zone as usize] += 1;
            self.nameless.births.fill(ppa, zone, gap_gen);
            if self.md_in_zones() {
                // In band its record is its NamelessWrite and NamelessMd
                // notes (before InPlaceDone, which makes it live at replay)
                // and its entry in the victim's md blocks.
                let e = self.gap_fill_entry(f, gap_gen);
                self.log.push_note(Note::NamelessWrite {
                    seq: f.seq,
                    ppa,
                    data_crc: e.data_crc,
                    birth_gen: gap_gen,
                    replaced: f.replaced,
                });
                for n in crate::note::nameless_md_notes(&e.md, f.seq) {
                    self.log.push_note(n);
                }
            }
            let w = self.nameless.writes.get_mut(f.key).expect("a fill's write");
            w.addrs[f.index] = NamelessAddr::new(ppa, gap_gen);
        }
        self.stats.nameless_gap_fill_blocks += fills.len() as u64;
        let overwrites = fills.iter().filter(|f| !f.replaced.is_none()).count();
        self.stats.nameless_overwrite_fill_blocks += overwrites as u64;
    }

    /// A job's gap fills are answered: its `InPlaceDone` is durable
    /// (`error` none: an overwrite fill's replaced block is freed now, as
    /// replay frees it at that note), or the job stopped (their writes
    /// fail with `error`; the replaced blocks stay live).
    pub(super) fn answer_gap_fills(&mut self, fills: Vec<GapFill>, error: Option<&IoError>) {
        for f in fills {
            if !f.replaced.is_none() {
                self.nameless.moves.replaced(f.replaced.ppa());
                if error.is_none() {
                    self.free_replaced_by_fill(f.replaced);
                }
            }
            if let Some(e) = error {
                let w = self.nameless.writes.get_mut(f.key).expect("a fill's write");
                w.error.get_or_insert_with(|| e.clone());
            }
            self.nameless_write_progress(f.key, 1);
        }
    }

    /// Frees the block an overwrite fill replaced (its link), if it is
    /// still the live block of that generation: a racing free or overwrite
    /// may have ended it first (replay's rule, format.md §11 step 9). No
    /// note: the fill's record and `InPlaceDone` are the free's.
    fn free_replaced_by_fill(&mut self, link: NamelessAddr) {
        if self.nameless_check_at(link).is_err() {
            return;
        }
        if self.mapping.nameless_clear(link.ppa()) {
            self.stats.nameless_free_blocks += 1;
            self.nameless_cleared(link.ppa());
        }
    }

    /// The device has no room for the queued nameless writes and GC nothing
    /// to collect (nameless zones that still hold a live block are never
    /// collected): they are answered `NoSpace`, before anything else stalls.
    pub(super) fn nameless_stalled(&mut self) -> bool {
        if self.nameless.queue.is_empty() || self.buffer.queued() > 0 || self.gc_queued() > 0 {
            return false;
        }
        self.fail_nameless_writes(&IoError::NoSpace);
        true
    }

    /// The volume went read-only: queued writes are answered with `error`
    /// (their blocks that landed are freed) once their appends in flight
    /// complete.
    pub(super) fn fail_nameless_writes(&mut self, error: &IoError) {
        for key in std::mem::take(&mut self.nameless.queue) {
            let w = self.nameless.writes.get_mut(key).expect("queued write");
            w.error.get_or_insert_with(|| error.clone());
            self.nameless_write_progress(key, 0);
        }
    }

    /// Frees live nameless blocks (checked by the caller), each with a
    /// `NamelessFree` note: durable at the next flush.
    fn nameless_release(&mut self, addrs: &[NamelessAddr]) {
        for &a in addrs {
            // A read-only core logs nothing more (a write it fails leaves
            // its landed blocks live on the media after a remount).
            if !self.mapping.nameless_clear(a.ppa()) {
                continue;
            }
            self.nameless_cleared(a.ppa());
            if !self.read_only {
                let seq = self.take_seq();
                self.log.push_note(Note::NamelessFree {
                    seq,
                    ppa: a.ppa(),
                    birth_gen: a.generation(),
                });
                self.stats.nameless_free_blocks += 1;
            }
        }
    }

    /// `Request::NamelessFree`: all of `addrs` or none.
    pub(super) fn nameless_free(&mut self, addrs: Vec<NamelessAddr>) -> Result<(), IoError> {
        self.nameless_supported()?;
        if self.read_only {
            return Err(IoError::ReadOnly);
        }
        let blocks = self.resolve_distinct(&addrs)?;
        self.nameless_release(&blocks);
        Ok(())
    }

    /// `Request::NamelessRead`: the block's zone stays pinned (no reset)
    /// until the read is answered.
    pub(super) fn start_nameless_read(
        &mut self,
        id: u64,
        addr: NamelessAddr,
    ) -> Result<(), IoError> {
        self.nameless_supported()?;
        // The read goes to the block itself: its tag carries the new
        // address's generation.
        let block = self.nameless_resolve(addr)?;
        let zone = block.ppa().zone(self.cap());
        self.zone_readers[zone as usize] += 1;
        self.nameless.reads.push_back(NamelessRead {
            id,
            addr: block,
            old: NamelessAddr::NONE,
            attempts: 0,
            host_aborts: 0,
            data: None,
        });
        Ok(())
    }

    pub(super) fn next_nameless_read(&mut self) -> Option<(Op, Command)> {
        // A block of an in-place victim not yet rewritten: the reads wait
        // (at most one zone's rewrite).
        let first = self.nameless.reads.front()?;
        if self.inplace_parks(first.addr.ppa()) {
            return None;
        }
        let r = self.nameless.reads.pop_front()?;
        self.nameless.reads_in_flight += 1;
        let cmd = self.nameless_read_command(&r);
        Some((Op::NamelessRead(r), cmd))
    }

    /// The read of `r`'s block, or, once that is read (in band), of the
    /// md block holding its entry.
    fn nameless_read_command(&self, r: &NamelessRead) -> Command {
        let cap = self.cap();
        let ppa = r.addr.ppa();
        let (zone, offset) = (ppa.zone(cap), ppa.offset_blocks(cap));
        let offset_blocks = match (&r.data, &self.nameless.md) {
            // A live block below its zone's data end has a location (the
            // caller found no entry in memory); offset 0 reads a block
            // that fails the check otherwise.
            (Some(_), Some(m)) => m.md_location(zone, offset).map_or(0, |(at, _)| at),
            _ => offset,
        };
        Command::Read {
            zone,
            offset_blocks,
            block_count: 1,
            priority: ReadPriority::Host,
        }
    }

    /// The answer to read `r` once `block` is read: with md in OOB, at
    /// once; in band, from the entry in memory, or (`None`) after a read
    /// of the md block (`r` keeps the data; the caller issues it again).
    fn nameless_read_result(
        &self,
        r: &mut NamelessRead,
        block: Vec<u8>,
        oob: &[u8],
    ) -> Option<Result<ReplyData, IoError>> {
        if !self.md_in_zones() {
            return Some(self.nameless_verify(r.addr, block, oob));
        }
        let Some(data) = r.data.take() else {
            if let Some(e) = self.md_in_memory(r.addr) {
                return Some(self.nameless_verify_entry(r.addr, block, Some(e)));
            }
            r.data = Some(block);
            r.attempts = 0;
            return None;
        };
        let entry = self.md_entry_in_block(r.addr, &block);
        Some(self.nameless_verify_entry(r.addr, data, entry.as_ref()))
    }

    /// The entry of `addr`'s block in the md block `bytes`, if it decodes
    /// as the md of that block's group.
    fn md_entry_in_block(&self, addr: NamelessAddr, bytes: &[u8]) -> Option<MdEntry> {
        let m = self.nameless.md.as_ref()?;
        let cap = self.cap();
        let (zone, offset) = (addr.ppa().zone(cap), addr.ppa().offset_blocks(cap));
        m.layout.entry_in_block(zone, offset, bytes, m.md_bytes)
    }

    /// In band: the block read at `addr` against its entry (none: its md
    /// block did not hold it).
    fn nameless_verify_entry(
        &self,
        addr: NamelessAddr,
        data: Vec<u8>,
        entry: Option<&MdEntry>,
    ) -> Result<ReplyData, IoError> {
        let found = entry
            .filter(|e| e.is_present())
            .map(|e| (e.birth_gen, e.data_crc, e.md.as_slice()));
        self.nameless_accept(addr, data, found)
    }

    /// Whether read `r` goes again after `result`: a host-side abort, or
    /// a media error, within their attempts.
    fn read_again(&mut self, r: &mut NamelessRead, result: &Result<Outcome, DeviceError>) -> bool {
        if matches!(result, Err(DeviceError::HostIo { .. })) && r.host_aborts < HOST_ATTEMPTS {
            r.host_aborts += 1;
            self.stats.host_retries += 1;
            return true;
        }
        let media_error = matches!(result, Err(ref e) if *e != DeviceError::DeviceGone);
        if media_error && r.attempts + 1 < READ_ATTEMPTS {
            r.attempts += 1;
            return true;
        }
        false
    }

    pub(super) fn nameless_read_done(
        &mut self,
        mut r: NamelessRead,
        result: Result<Outcome, DeviceError>,
    ) {
        self.nameless.reads_in_flight -= 1;
        if self.read_again(&mut r, &result) {
            self.nameless.reads.push_front(r);
            return;
        }
        let cap = self.cap();
        let result = match result {
            Ok(Outcome::Read { data, oob }) => {
                match self.nameless_read_result(&mut r, data, &oob) {
                    Some(result) => result,
                    None => {
                        self.nameless.reads.push_front(r);
                        return;
                    }
                }
            }
            Ok(other) => panic!("read completed as {other:?}"),
            Err(DeviceError::DeviceGone) => Err(IoError::DeviceGone),
            Err(e) => Err(IoError::Device {
                lba: u64::MAX,
                source: e,
            }),
        };
        self.zone_readers[r.addr.ppa().zone(cap) as usize] -= 1;
        self.stats.read_errors += u64::from(result.is_err());
        if result.is_ok() {
            self.stats.nameless_read_blocks += 1;
        }
        self.replies.push_back(Reply { id: r.id, result });
    }

    /// The block read at `addr` against its tag in `oob` (a staged copy's
    /// tag names no address a client holds).
    fn nameless_verify(
        &self,
        addr: NamelessAddr,
        data: Vec<u8>,
        oob: &[u8],
    ) -> Result<ReplyData, IoError> {
        let ob = (self.geo.oob_size_bytes as usize).min(oob.len());
        let found = match NamelessTag::decode(&oob[..ob]) {
            Ok(Some((tag, md))) if tag.kind == NamelessTagKind::Staged => {
                Some((0, tag.data_crc, md))
            }
            Ok(Some((tag, md))) => Some((tag.birth_gen, tag.data_crc, md)),
            Ok(None) | Err(_) => None,
        };
        self.nameless_accept(addr, data, found)
    }

    /// The block read at `addr` is the one the address names (the birth
    /// generation its record gives) and is intact (the record's CRC);
    /// `found`: the record as (birth generation, data CRC, md), none if
    /// unreadable.
    fn nameless_accept(
        &self,
        addr: NamelessAddr,
        data: Vec<u8>,
        found: Option<(u32, u32, &[u8])>,
    ) -> Result<ReplyData, IoError> {
        let cap = self.cap();
        let (zone, offset_blocks) = (addr.ppa().zone(cap), addr.ppa().offset_blocks(cap));
        let actual_crc = self.data_crc().checksum(&data);
        let corrupt = |expected_crc| NamelessError::Corrupt {
            addr,
            zone,
            offset_blocks,
            expected_crc,
            actual_crc,
        };
        let Some((birth_gen, data_crc, md)) = found else {
            return Err(corrupt(0).into());
        };
        if birth_gen != addr.generation() {
            return Err(NamelessError::Stale {
                addr,
                zone_generation: self.nameless.gens[zone as usize],
            }
            .into());
        }
        if data_crc != actual_crc {
            return Err(corrupt(data_crc).into());
        }
        Ok(ReplyData::NamelessBlock {
            data,
            md: md.to_vec(),
        })
    }
}

// ----- commits and the post-crash hand-over --------------------------------

impl Ftl {
    /// `Request::NamelessCommit`: covers every nameless write admitted
    /// before it. Writes admitted after it wait (unsent) until its note is
    /// pushed, so the note's seq is above every block it covers and below
    /// every block it does not: replay, applying tags and notes in seq
    /// order, empties the same set.
    pub(super) fn start_nameless_commit(&mut self, id: u64) -> Result<(), IoError> {
        self.nameless_supported()?;
        if self.read_only {
            return Err(self.refusal());
        }
        let n = &mut self.nameless;
        let acks = n.remap.delivered_olds();
        let acks_flushing = !acks.is_empty();
        n.commits.push_back(PendingCommit {
            id,
            before: n.next_order,
            ahead: n.writes.len(),
            flushing: false,
            acks_flushing,
            acks,
        });
        // The acknowledgements need only what the client recorded before
        // the commit to be durable, not the writes it covers: held behind
        // those, they kept the zones the moves pinned from GC, which those
        // writes could be waiting for.
        if acks_flushing {
            self.add_flush_for(ReplyTo::NamelessCommitAcks(id));
        }
        Ok(())
    }

    /// The flush ahead of commit `id`'s acknowledgements is done: they are
    /// logged now. A failed flush fails the commit.
    pub(super) fn nameless_commit_acks_flushed(
        &mut self,
        id: u64,
        result: Result<ReplyData, IoError>,
    ) {
        let i = self
            .nameless
            .commits
            .iter()
            .position(|c| c.id == id)
            .expect("a commit whose acks flush");
        let result = match result {
            Ok(_) if self.read_only => Err(self.refusal()),
            other => other,
        };
        if let Err(e) = result {
            self.nameless.commits.remove(i);
            self.replies.push_back(Reply { id, result: Err(e) });
            return;
        }
        let c = &mut self.nameless.commits[i];
        c.acks_flushing = false;
        let acks = std::mem::take(&mut c.acks);
        self.log_acks(&acks);
    }

    /// Starts the oldest commit's flush once the writes it covers are all
    /// answered (and its acknowledgements are logged).
    pub(super) fn advance_nameless_commits(&mut self) {
        let Some(c) = self.nameless.commits.front_mut() else {
            return;
        };
        if c.flushing || c.acks_flushing || c.ahead > 0 {
            return;
        }
        c.flushing = true;
        let id = c.id;
        self.add_flush_for(ReplyTo::NamelessCommit(id));
    }

    /// The commit's flush is done: its note, answered once durable. From
    /// the note on, the blocks written before it are not handed over.
    pub(super) fn nameless_commit_flushed(&mut self, id: u64, result: Result<ReplyData, IoError>) {
        let c = self
            .nameless
            .commits
            .pop_front()
            .expect("a commit flushing");
        assert!(c.flushing && c.id == id, "commit {id} flushed out of turn");
        let result = match result {
            Ok(_) if self.read_only => Err(self.refusal()),
            other => other,
        };
        if let Err(e) = result {
            self.replies.push_back(Reply { id, result: Err(e) });
            return;
        }
        // The acks first: "every address given by event is recorded" covers
        // the moves delivered before the commit (logged already after their
        // own flush, unless it was empty).
        self.log_acks(&c.acks);
        let seq = self.take_seq();
        self.log.push_note(Note::NamelessAck {
            seq,
            commit: true,
            old: NamelessAddr::NONE,
        });
        self.nameless.uncommitted.clear();
        self.nameless.commit_seq = seq;
        self.add_log_waiter(ReplyTo::Caller(id), ReplyData::Done);
    }

    /// Nothing more reaches the media: commits not yet flushing are
    /// answered `error` (one flushing is, when its flush completes).
    pub(super) fn fail_nameless_commits(&mut self, error: &IoError) {
        let commits = std::mem::take(&mut self.nameless.commits);
        for c in commits {
            if c.flushing || c.acks_flushing {
                self.nameless.commits.push_back(c);
            } else {
                self.replies.push_back(Reply {
                    id: c.id,
                    result: Err(error.clone()),
                });
            }
        }
    }

    /// The next read that prepares a hand-over event; a block freed since
    /// the mount is skipped.
    pub(super) fn next_handover_read(&mut self) -> Option<(Op, Command)> {
        if self.inplace_rewriting() {
            return None; // its block may be in the victim (reads park)
        }
        let r = match self.nameless.handover_retry.pop_front() {
            Some(r) => r,
            None => {
                if self.nameless.handover_reads >= HANDOVER_READS_IN_FLIGHT {
                    return None;
                }
                let (addr, old) = self.next_handover_addr()?;
                let zone = addr.ppa().zone(self.cap());
                self.zone_readers[zone as usize] += 1;
                NamelessRead {
                    id: 0,
                    addr,
                    old,
                    attempts: 0,
                    host_aborts: 0,
                    data: None,
                }
            }
        };
        self.nameless.handover_reads += 1;
        let cmd = self.nameless_read_command(&r);
        Some((Op::HandoverRead(r), cmd))
    }

    /// The next block to read for an event after the mount, still live
    /// (and for a move, not acknowledged since): (block, old or none). A
    /// block migrated since the mount is read, and handed over, where it
    /// is now (its `Migrated` event follows).
    fn next_handover_addr(&mut self) -> Option<(NamelessAddr, NamelessAddr)> {
        while let Some((addr, old)) = self.nameless.handover.pop_front() {
            if !self.event_current(addr, old) {
                continue;
            }
            if old.is_none() {
                let block = self.nameless_resolve(addr).expect("current");
                return Some((block, old));
            }
            return Some((addr, old));
        }
        self.serve_event_waiters(); // none may come now
        None
    }

    pub(super) fn handover_read_done(
        &mut self,
        mut r: NamelessRead,
        result: Result<Outcome, DeviceError>,
    ) {
        self.nameless.handover_reads -= 1;
        if self.read_again(&mut r, &result) {
            self.nameless.handover_retry.push_front(r);
            return;
        }
        let block = match result {
            Ok(Outcome::Read { data, oob }) => {
                match self.nameless_read_result(&mut r, data, &oob) {
                    Some(result) => result,
                    None => {
                        self.nameless.handover_retry.push_front(r);
                        return;
                    }
                }
            }
            Ok(other) => panic!("read completed as {other:?}"),
            Err(e) => Err(IoError::Device {
                lba: u64::MAX,
                source: e,
            }),
        };
        match block {
            // Freed (or acknowledged) while it was read: no event.
            Ok(_) if !self.event_current(r.addr, r.old) => {}
            Ok(ReplyData::NamelessBlock { md, .. }) if r.old.is_none() => {
                let event = NamelessEvent::Unrecorded { addr: r.addr, md };
                self.nameless.events.push_back(event);
            }
            Ok(ReplyData::NamelessBlock { md, .. }) => {
                let (old, new) = (r.old, r.addr);
                let event = NamelessEvent::Migrated { old, new, md };
                self.nameless.events.push_back(event);
            }
            Ok(other) => unreachable!("a nameless block verified as {other:?}"),
            // It stays in the set: the next mount tries again.
            Err(_) => self.stats.read_errors += 1,
        }
        let zone = r.addr.ppa().zone(self.cap());
        self.zone_readers[zone as usize] -= 1;
        self.serve_event_waiters();
    }

    /// Up to `max` prepared events whose blocks are still live, oldest
    /// first.
    fn take_events(&mut self, max: usize) -> Vec<NamelessEvent> {
        let mut taken = Vec::new();
        let mut deferred = Vec::new();
        while taken.len() < max {
            let Some(event) = self.nameless.events.pop_front() else {
                break;
            };
            match event {
                // The client's overwrite of `old` frees the block: the move
                // is news only if that overwrite fails.
                NamelessEvent::Migrated { old, .. } if self.nameless.moves.is_overwriting(old) => {
                    deferred.push(event)
                }
                NamelessEvent::Unrecorded { addr, .. }
                    if self.event_current(addr, NamelessAddr::NONE) =>
                {
                    self.stats.nameless_handover_blocks += 1;
                    taken.push(event);
                }
                NamelessEvent::Migrated { old, new, .. } if self.event_current(new, old) => {
                    // What a later commit acknowledges.
                    self.nameless.remap.mark_delivered(old);
                    taken.push(event);
                }
                _ => {}
            }
        }
        self.nameless.events.extend(deferred);
        taken
    }

    /// Whether an event about block `addr` still has news: the block is
    /// live and, for a move (`old` not none), the move is not acknowledged.
    fn event_current(&self, addr: NamelessAddr, old: NamelessAddr) -> bool {
        if old.is_none() {
            return self.nameless_check(addr).is_ok();
        }
        self.nameless.remap.get(old) == Some(addr) && self.nameless_check(addr).is_ok()
    }

    /// `Request::NamelessAck`: drops the remap entries of `olds` (an
    /// address without one is skipped), each with a `NamelessAck` note;
    /// answered once they are durable (at once when none was logged).
    pub(super) fn nameless_ack(
        &mut self,
        id: u64,
        olds: Vec<NamelessAddr>,
    ) -> Result<Option<ReplyData>, IoError> {
        self.nameless_supported()?;
        if self.read_only {
            return Err(self.refusal());
        }
        if self.log_acks(&olds) == 0 {
            return Ok(Some(ReplyData::Done));
        }
        self.add_log_waiter(ReplyTo::Caller(id), ReplyData::Done);
        Ok(None)
    }

    /// Drops the remap entries of `olds` that exist, each with a
    /// `NamelessAck` note: from here on the old address is stale (format.md
    /// §11, step 7: a cut before the note is durable brings the entry
    /// back, and its event). Returns the notes pushed.
    fn log_acks(&mut self, olds: &[NamelessAddr]) -> usize {
        let mut logged = 0;
        for &old in olds {
            let Some(new) = self.nameless.remap.remove(old) else {
                continue;
            };
            self.nameless.moves.unpin(new.ppa(), self.cap());
            let seq = self.take_seq();
            self.log.push_note(Note::NamelessAck {
                seq,
                commit: false,
                old,
            });
            self.stats.nameless_migration_note_bytes += crate::note::NOTE_BYTES as u64;
            logged += 1;
        }
        logged
    }

    /// The next prepared event, if one is ready; never waits.
    pub fn poll_event(&mut self) -> Option<NamelessEvent> {
        let event = self.take_events(1).pop();
        if event.is_some() {
            // Waiters are answered only with events; none left for them.
            self.serve_event_waiters();
        }
        event
    }

    /// `Request::NamelessEvents`: answered now if an event is ready or
    /// none can come, else once one is.
    pub(super) fn nameless_events(&mut self, id: u64, max: usize) -> Result<(), IoError> {
        self.nameless_supported()?;
        self.nameless.event_waiters.push_back((id, max));
        self.serve_event_waiters();
        Ok(())
    }

    /// Gives prepared events to the waiters, oldest first, each event to
    /// one; once none can come, the rest are answered with none.
    pub(super) fn serve_event_waiters(&mut self) {
        while let Some(&(id, max)) = self.nameless.event_waiters.front() {
            let events = self.take_events(max);
            let more = self.nameless.handover_pending()
                || !self.nameless.events.is_empty()
                || self.nameless.moves.unlogged_events() > 0;
            if events.is_empty() && max > 0 && more {
                return;
            }
            self.nameless.event_waiters.pop_front();
            self.replies.push_back(Reply {
                id,
                result: Ok(ReplyData::NamelessEvents(events)),
            });
        }
    }
}
