//! The physical segment: nameless writes, reads and frees (docs/design.md,
//! "Nameless space"). The FTL picks where each block goes and answers with
//! its address; in memory a block's validity bit is all there is of it.
//! Its metadata rides in OOB after its tag, which is the block's record for
//! recovery, as a host block's tag is.

use super::lane::Lane;
use super::read::READ_ATTEMPTS;
use super::request::{Reply, ReplyData};
use super::{Ftl, Op, ReplyTo};
use crate::addr::Ppa;
use crate::backend::HOST_ATTEMPTS;
use crate::backend::{Command, DeviceError, Outcome, Payload, ReadPriority, ZoneId};
use crate::error::{IoError, NamelessError};
use crate::nameless::{
    MdPlacement, NamelessHeader, NamelessImage, NamelessZoneKind, NamelessZoneRecord,
};
use crate::nameless::{NamelessAddr, NamelessTag, NamelessTagKind};
use crate::note::Note;
use crate::payload::BlockData;
use crate::slab::{Key, Slab};
use crate::superblock::TagMode;
use crate::tag::TAG_BYTES;
use crate::zone::NAMELESS;
use std::collections::VecDeque;

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
    /// metadata).
    supported: bool,
    /// Per zone, the generation of its nameless data: the birth generation
    /// of every address in it (0: never held nameless data). It goes up each
    /// time the zone is opened for nameless data, so an address from before
    /// a reset is told apart from a block written after it.
    gens: Vec<u32>,
    /// Nameless zones opened whose `NamelessZone` note is not durable yet,
    /// with the log position that makes it so: replies that carry their
    /// generation wait for it, so no generation is handed out twice.
    opening: Vec<(ZoneId, u64)>,
    writes: Slab<NamelessWrite>,
    /// Writes with blocks not yet sent, oldest first.
    queue: VecDeque<Key>,
    /// Blocks of `queue` not yet sent (at most `NAMELESS_QUEUE_BLOCKS`).
    queued_blocks: u64,
    /// Blocks admitted and not yet answered: counted against the space.
    pending_blocks: u64,
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
}

#[derive(Debug)]
struct NamelessWrite {
    id: u64,
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
    attempts: u8,
    host_aborts: u8,
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
}

impl NamelessState {
    /// `empty_zones`: the nameless zones that hold nothing live.
    pub(super) fn new(
        gens: Vec<u32>,
        empty_zones: u32,
        supported: bool,
        max_requests: usize,
    ) -> NamelessState {
        NamelessState {
            empty_zones,
            any_generation: gens.iter().any(|&g| g > 0),
            supported,
            gens,
            opening: Vec::new(),
            writes: Slab::new(max_requests.max(1)),
            queue: VecDeque::new(),
            queued_blocks: 0,
            pending_blocks: 0,
            reads: VecDeque::new(),
            reads_in_flight: 0,
            maybe_empty: true,
        }
    }

    /// Requests admitted and not yet answered.
    pub(super) fn pending_requests(&self) -> usize {
        self.writes.len() + self.reads.len() + self.reads_in_flight
    }

    pub(super) fn is_idle(&self) -> bool {
        self.pending_requests() == 0
    }

    /// Blocks of nameless writes admitted and not yet answered: the space
    /// account counts them with the live blocks.
    pub(super) fn pending_blocks(&self) -> u64 {
        self.pending_blocks
    }

    pub(super) fn queued_blocks(&self) -> u64 {
        self.queued_blocks
    }
}

/// Whether a volume of this tag mode and OOB size has the physical segment.
pub(super) fn segment_supported(tag_mode: TagMode, oob_size_bytes: usize) -> bool {
    tag_mode == TagMode::Oob && oob_size_bytes >= TAG_BYTES + NAMELESS_MD_BYTES
}

impl Ftl {
    /// Metadata bytes every nameless block carries.
    pub fn nameless_md_bytes(&self) -> usize {
        NAMELESS_MD_BYTES
    }

    /// Dead blocks the nameless zones hold: GC does not collect a nameless
    /// zone until nothing in it is live, so the space account counts them
    /// as used (every nameless zone that holds a live block as a whole
    /// zone: the open one's tail too). O(1).
    pub(super) fn nameless_dead_blocks(&self) -> u64 {
        let held = self.zones.nameless_zone_count() - self.nameless.empty_zones;
        (u64::from(held) * self.data_cap()).saturating_sub(self.mapping.nameless_blocks())
    }

    /// What the nameless sections (16–19) add to a checkpoint at most:
    /// their headers, the header, a generation per zone, and a record and
    /// a full bitmap per nameless zone. O(1); 0 before any nameless zone.
    pub(super) fn nameless_checkpoint_bytes(&self) -> u64 {
        if self.zones.nameless_zone_count() == 0 && !self.nameless.any_generation {
            return 0;
        }
        let zones = u64::from(self.geo.zone_count);
        let nameless = u64::from(self.zones.nameless_zone_count());
        4 * 16 + 32 + 8 * zones + 8 + nameless * (24 + self.cap().div_ceil(64) * 8)
    }

    /// A nameless zone was reset or retired (it held nothing live).
    pub(super) fn nameless_zone_gone(&mut self) {
        self.nameless.empty_zones -= 1;
    }

    /// The nameless block at `ppa` is freed: its zone may be empty now.
    fn nameless_cleared(&mut self, ppa: Ppa) {
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
        let found = self.zones.pick_empty_nameless(valid, |z| self.excluded(z));
        // An excluded empty zone (a lane's, a victim's) is found again
        // after the next free.
        self.nameless.maybe_empty = found.is_some();
        found
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
                let end = self.zones.get(z).write_pointer_blocks();
                NamelessZoneRecord {
                    zone: z,
                    data_end: u32::try_from(end).expect("zone capacity fits u32"),
                    last_md_at: None,
                    live_blocks: self.mapping.valid_blocks(z) as u32,
                    md_written: false,
                    held: self.lanes[Lane::Nameless.index()].zone == Some(z),
                    valid: self.mapping.zone_bitmap(z, end),
                }
            })
            .collect();
        NamelessImage {
            header: Some(NamelessHeader {
                md_bytes: NAMELESS_MD_BYTES as u16,
                placement: MdPlacement::Oob,
                group_blocks: 0,
                remap_capacity: 0,
                uncommitted_capacity: 0,
                commit_seq: 0,
            }),
            generations: self.nameless.gens.iter().map(|&g| (g, g)).collect(),
            zones,
            ..NamelessImage::default()
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
        self.zones.get(zone).kind() == NAMELESS
    }

    /// Checks an address a caller holds (docs/design.md, "The address a
    /// client holds"): the block it names, if that block is live.
    pub(super) fn nameless_check(&self, addr: NamelessAddr) -> Result<Ppa, NamelessError> {
        let cap = self.cap();
        let ppa = addr.ppa();
        let outside = addr.is_none()
            || addr.generation() == 0
            || ppa.0 >= self.mapping.physical_blocks()
            || ppa.zone(cap) < self.layout.first_data_zone()
            || ppa.offset_blocks(cap) >= self.data_cap();
        if outside {
            return Err(NamelessError::OutOfSegment { addr });
        }
        let zone = ppa.zone(cap);
        let generation = self.nameless.gens[zone as usize];
        if addr.generation() > generation {
            return Err(NamelessError::NotLive { addr });
        }
        if !self.is_nameless_zone(zone) || addr.generation() < generation {
            return Err(NamelessError::Stale {
                addr,
                zone_generation: generation,
            });
        }
        if !self.mapping.is_live(ppa) {
            return Err(NamelessError::NotLive { addr });
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
        {
            return Err(IoError::Busy);
        }
        // An overwrite frees as many blocks as it writes.
        let new_blocks = if old.is_empty() { n as u64 } else { 0 };
        let used = self.mapping.live_blocks()
            + self.buffered_new
            + self.nameless.pending_blocks
            + self.nameless_dead_blocks();
        if used + new_blocks > self.max_mapped_blocks {
            return Err(IoError::NoSpace);
        }
        let mut crcs = vec![0u32; n];
        crate::tag::data_crcs(&data, bs, &mut crcs);
        let key = self.nameless.writes.insert(NamelessWrite {
            id,
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
        self.nameless.queue.push_back(key);
        self.nameless.queued_blocks += n as u64;
        self.nameless.pending_blocks += n as u64;
        Ok(())
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
        let mut sorted: Vec<Ppa> = Vec::with_capacity(old.len());
        for &a in old {
            sorted.push(self.nameless_check(a)?);
        }
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            let addr = *old.iter().find(|a| a.ppa() == w[0]).expect("in old");
            return Err(NamelessError::Duplicate { addr }.into());
        }
        Ok(())
    }

    /// The next append of queued nameless blocks, into the nameless lane.
    pub(super) fn next_nameless_append(&mut self) -> Option<(Op, Command)> {
        if self.read_only || matches!(self.ckpt, super::ckpt::CkptState::Draining) {
            return None;
        }
        let key = *self.nameless.queue.front()?;
        let w = self.nameless.writes.get_mut(key).expect("queued write");
        let remaining = (w.blocks.len() - w.sent) as u64;
        let (lane, zone, room) = self.room_in(Lane::Nameless, remaining, false)?;
        let (n, pad) = self.batch_size(remaining, room, true);
        if n == 0 {
            return None;
        }
        let generation = self.nameless.gens[zone as usize];
        let first_seq = self.next_seq;
        self.next_seq += n;
        let (mut data, mut oob) = (Payload::new(), self.alloc_oob(n + pad));
        let ob = self.geo.oob_size_bytes as usize;
        let w = self.nameless.writes.get_mut(key).expect("queued write");
        let first = w.sent;
        for i in first..first + n as usize {
            data.push(w.blocks[i].clone());
            let at = oob.len();
            oob.resize(at + ob, 0);
            let tag = NamelessTag {
                kind: NamelessTagKind::Data,
                birth_gen: generation,
                link: w.old.get(i).copied().unwrap_or(NamelessAddr::NONE),
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
        self.nameless.queued_blocks -= n;
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
        };
        Some((
            Op::NamelessAppend(append),
            Command::Append { zone, data, oob },
        ))
    }

    /// A nameless zone was opened: its generation goes up, logged before
    /// any address carrying it is answered.
    pub(super) fn nameless_zone_opened(&mut self, zone: ZoneId) {
        let generation = self.nameless.gens[zone as usize]
            .checked_add(1)
            .expect("zone generations outlast the zone's erases");
        self.nameless.gens[zone as usize] = generation;
        self.nameless.any_generation = true;
        self.nameless.empty_zones += 1;
        let seq = self.take_seq();
        self.log.push_note(Note::NamelessZone {
            seq,
            zone,
            generation,
            kind: NamelessZoneKind::Data,
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
            if let Some(old) = old {
                if self.nameless_check(old).is_ok() && self.mapping.nameless_clear(old.ppa()) {
                    self.stats.nameless_free_blocks += 1;
                    self.nameless_cleared(old.ppa());
                }
            }
        }
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
            self.nameless.queued_blocks -= unsent;
            self.nameless.queue.retain(|&k| k != key);
        }
        let w = self.nameless.writes.get_mut(key).expect("write in flight");
        if w.done < w.blocks.len() {
            return;
        }
        let w = self.nameless.writes.remove(key).expect("write in flight");
        self.nameless.pending_blocks -= w.blocks.len() as u64;
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
        let mut ppas = Vec::with_capacity(addrs.len());
        for &a in &addrs {
            ppas.push(self.nameless_check(a)?);
        }
        ppas.sort_unstable();
        if let Some(w) = ppas.windows(2).find(|w| w[0] == w[1]) {
            let addr = *addrs.iter().find(|a| a.ppa() == w[0]).expect("in addrs");
            return Err(NamelessError::Duplicate { addr }.into());
        }
        self.nameless_release(&addrs);
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
        let ppa = self.nameless_check(addr)?;
        let zone = ppa.zone(self.cap());
        self.zone_readers[zone as usize] += 1;
        self.nameless.reads.push_back(NamelessRead {
            id,
            addr,
            attempts: 0,
            host_aborts: 0,
        });
        Ok(())
    }

    pub(super) fn next_nameless_read(&mut self) -> Option<(Op, Command)> {
        let r = self.nameless.reads.pop_front()?;
        let cap = self.cap();
        let ppa = r.addr.ppa();
        self.nameless.reads_in_flight += 1;
        let cmd = Command::Read {
            zone: ppa.zone(cap),
            offset_blocks: ppa.offset_blocks(cap),
            block_count: 1,
            priority: ReadPriority::Host,
        };
        Some((Op::NamelessRead(r), cmd))
    }

    pub(super) fn nameless_read_done(
        &mut self,
        mut r: NamelessRead,
        result: Result<Outcome, DeviceError>,
    ) {
        self.nameless.reads_in_flight -= 1;
        if matches!(result, Err(DeviceError::HostIo { .. })) && r.host_aborts < HOST_ATTEMPTS {
            r.host_aborts += 1;
            self.stats.host_retries += 1;
            self.nameless.reads.push_front(r);
            return;
        }
        let media_error = matches!(result, Err(ref e) if *e != DeviceError::DeviceGone);
        if media_error && r.attempts + 1 < READ_ATTEMPTS {
            r.attempts += 1;
            self.nameless.reads.push_front(r);
            return;
        }
        let cap = self.cap();
        self.zone_readers[r.addr.ppa().zone(cap) as usize] -= 1;
        let result = match result {
            Ok(Outcome::Read { data, oob }) => self.nameless_verify(r.addr, data, &oob),
            Ok(other) => panic!("read completed as {other:?}"),
            Err(DeviceError::DeviceGone) => Err(IoError::DeviceGone),
            Err(e) => Err(IoError::Device {
                lba: u64::MAX,
                source: e,
            }),
        };
        self.stats.read_errors += u64::from(result.is_err());
        if result.is_ok() {
            self.stats.nameless_read_blocks += 1;
        }
        self.replies.push_back(Reply { id: r.id, result });
    }

    /// The block read at `addr` is the one the address names (its tag's
    /// birth generation) and is intact (its CRC).
    fn nameless_verify(
        &self,
        addr: NamelessAddr,
        data: Vec<u8>,
        oob: &[u8],
    ) -> Result<ReplyData, IoError> {
        let cap = self.cap();
        let (zone, offset_blocks) = (addr.ppa().zone(cap), addr.ppa().offset_blocks(cap));
        let actual_crc = self.data_crc().checksum(&data);
        let ob = (self.geo.oob_size_bytes as usize).min(oob.len());
        let corrupt = |expected_crc| NamelessError::Corrupt {
            addr,
            zone,
            offset_blocks,
            expected_crc,
            actual_crc,
        };
        let (tag, md) = match NamelessTag::decode(&oob[..ob]) {
            Ok(Some(found)) => found,
            Ok(None) | Err(_) => return Err(corrupt(0).into()),
        };
        if tag.birth_gen != addr.generation() || tag.kind == NamelessTagKind::Staged {
            return Err(NamelessError::Stale {
                addr,
                zone_generation: self.nameless.gens[zone as usize],
            }
            .into());
        }
        if tag.data_crc != actual_crc {
            return Err(corrupt(tag.data_crc).into());
        }
        Ok(ReplyData::NamelessBlock {
            data,
            md: md.to_vec(),
        })
    }
}
