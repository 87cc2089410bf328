//! The bounded write buffer: host blocks acknowledged but not yet on media.
//!
//! One slot per buffered block. Reads look here first (`latest`), so a
//! buffered write is visible at once. A second write to a block whose slot is
//! still queued overwrites that slot in place (write coalescing); a write to a
//! block already in flight takes a new slot. Sequence numbers are assigned at
//! submission, so "in flight" slots are exactly those with a seq.
//!
//! Blocks of FUA writes wait in an urgent queue per temperature, sent ahead
//! of the others ([`WriteBuffer::pop_queued`] takes them first): a FUA
//! write waits for its own blocks only. A FUA write that overwrites a queued
//! slot in place moves it there; a buffered write that overwrites an urgent
//! slot leaves it there. Either way the slot keeps its oldest ticket, so a
//! flush still waits for every block admitted before it.
//!
//! A slot's data is the request's own buffer for a one-block write, and a
//! block-sized window into the request's buffer, shared by the request's
//! blocks, for a multi-block write ([`BlockData`]): admission copies no
//! bytes. A shared buffer lives until its last block leaves the buffer; the
//! blocks held that way are bounded ([`WriteBuffer::may_share`]), past that
//! bound blocks are copied as before.

use crate::addr::{Lba, Seq};
pub use crate::payload::BlockData;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

pub type SlotId = u32;

/// A fast keyed hash for the buffer's block index (SipHash is the largest
/// cost of a buffered 4 KiB write otherwise). Blocks of one aligned run of
/// [`LOCALITY_BLOCKS`] hash to consecutive buckets, so a multi-block
/// write's blocks share a few cache lines of the table instead of one
/// each; the runs themselves land where the keyed mix puts them.
#[derive(Clone, Copy)]
pub struct LbaHasherBuilder(u64);

pub struct LbaHasher {
    seed: u64,
    key: u64,
}

/// Blocks per run of neighbouring buckets (a power of two).
const LOCALITY_BLOCKS: u64 = 32;

impl std::hash::BuildHasher for LbaHasherBuilder {
    type Hasher = LbaHasher;
    fn build_hasher(&self) -> LbaHasher {
        LbaHasher {
            seed: self.0,
            key: 0,
        }
    }
}

impl std::hash::Hasher for LbaHasher {
    fn finish(&self) -> u64 {
        let run = (self.key / LOCALITY_BLOCKS) ^ self.seed;
        let x = run.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let x = (x ^ (x >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        let mixed = x ^ (x >> 32);
        // The low bits pick the bucket, the top 7 the tag byte: the mix
        // supplies both, the block's place in its run offsets the bucket.
        (mixed & !(LOCALITY_BLOCKS - 1)) | (self.key % LOCALITY_BLOCKS)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.key = self.key.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ n;
    }
}

/// How soon a block is expected to be rewritten; picks its write stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Temp {
    Hot = 0,
    Cold = 1,
}

#[derive(Debug)]
pub struct Slot {
    pub lba: Lba,
    pub data: BlockData,
    /// `tag::data_crc(&data)`, taken at admission (see `insert`).
    pub data_crc: u32,
    /// Set when the slot is handed to the device.
    pub seq: Option<Seq>,
    /// The block was unmapped and unbuffered when admitted (space accounting).
    pub counted_new: bool,
    /// Admission order, for flush barriers.
    pub ticket: u64,
    pub temp: Temp,
    /// A FUA write wrote it: it waits in the urgent queue.
    pub urgent: bool,
}

#[derive(Debug)]
pub struct WriteBuffer {
    slots: Vec<Option<Slot>>,
    free: Vec<SlotId>,
    /// Slots waiting for submission, per temperature.
    queues: [VecDeque<SlotId>; 2],
    /// Slots of FUA writes waiting for submission, per temperature: sent first.
    urgent: [VecDeque<SlotId>; 2],
    latest: HashMap<Lba, SlotId, LbaHasherBuilder>,
    next_ticket: u64,
    /// (ticket, slot) in ticket order, for the oldest unfinished ticket.
    /// An entry is stale once its slot is free or holds a newer ticket;
    /// the front is never stale, and stale entries are swept out before
    /// they outnumber the slots (see `note_ticket`).
    tickets: VecDeque<(u64, SlotId)>,
    /// Block buffers of released slots, reused for the blocks of
    /// multi-block writes that are copied (see `may_share`) instead of one
    /// allocation each. At most one per slot: the pool never holds more
    /// than a full buffer would.
    spare: Vec<Vec<u8>>,
    /// Blocks of the multi-block request buffers that buffered blocks
    /// share (each buffer counted whole, until its last block goes).
    shared_blocks: Arc<AtomicUsize>,
    /// The bound on `shared_blocks`.
    max_shared_blocks: usize,
}

/// Blocks of shared request buffers the buffer may hold per slot: a
/// request's blocks leave the buffer together unless they are overwritten
/// or go to different streams, so little is held beyond the live blocks.
const SHARED_BLOCKS_PER_SLOT: usize = 2;

impl WriteBuffer {
    /// `seed` keys the block-index hash (the host chooses the keys; the
    /// table is bounded by `capacity_blocks`, a seed keeps it from being
    /// trivially aimed at).
    pub fn new(capacity_blocks: u32, seed: u64) -> WriteBuffer {
        assert!(capacity_blocks > 0);
        WriteBuffer {
            slots: (0..capacity_blocks).map(|_| None).collect(),
            free: (0..capacity_blocks).rev().collect(),
            queues: [VecDeque::new(), VecDeque::new()],
            urgent: [VecDeque::new(), VecDeque::new()],
            latest: HashMap::with_capacity_and_hasher(
                capacity_blocks as usize,
                LbaHasherBuilder(seed),
            ),
            next_ticket: 0,
            tickets: Default::default(),
            spare: Vec::new(),
            shared_blocks: Arc::new(AtomicUsize::new(0)),
            max_shared_blocks: capacity_blocks as usize * SHARED_BLOCKS_PER_SLOT,
        }
    }

    /// Whether a request of `blocks` blocks may be buffered without a copy
    /// (its blocks sharing its buffer): while the shared buffers stay within
    /// their bound.
    pub fn may_share(&self, blocks: usize) -> bool {
        self.shared_blocks.load(Ordering::Relaxed) + blocks <= self.max_shared_blocks
    }

    /// Splits a request's buffer into block-sized windows that share it
    /// (no copy). `data.len()` is a nonzero multiple of `block_bytes`.
    pub fn share_blocks(&mut self, data: Vec<u8>, block_bytes: usize) -> Vec<BlockData> {
        BlockData::split(data, block_bytes, &self.shared_blocks)
    }

    /// Blocks the shared request buffers hold now.
    #[cfg(test)]
    pub fn shared_blocks(&self) -> usize {
        self.shared_blocks.load(Ordering::Relaxed)
    }

    /// A copy of `block` in a reused buffer when one is spare.
    pub fn block_copy(&mut self, block: &[u8]) -> Vec<u8> {
        match self.spare.pop() {
            Some(mut v) => {
                v.clear();
                v.extend_from_slice(block);
                v
            }
            None => block.to_vec(),
        }
    }

    /// Keeps a released block's buffer for `block_copy`: only one of its
    /// own of exactly one block (`block_bytes`) that nothing else holds
    /// (an append still in flight may), and no more than there are slots.
    /// A shared window just drops its reference.
    pub fn recycle(&mut self, data: BlockData, block_bytes: usize) {
        if let Ok(data) = data.into_unique_vec() {
            if data.capacity() == block_bytes && self.spare.len() < self.slots.len() {
                self.spare.push(data);
            }
        }
    }

    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    pub fn used_slots(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Slots waiting for submission, urgent or not.
    pub fn queued(&self) -> usize {
        self.queued_in(Temp::Hot) + self.queued_in(Temp::Cold)
    }

    /// Slots of `temp` waiting for submission, urgent or not.
    pub fn queued_in(&self, temp: Temp) -> usize {
        self.queues[temp as usize].len() + self.urgent[temp as usize].len()
    }

    /// Slots of FUA writes of `temp` waiting for submission.
    pub fn urgent_in(&self, temp: Temp) -> usize {
        self.urgent[temp as usize].len()
    }

    /// The queue a waiting slot is in.
    fn queue_of(&mut self, s: SlotId) -> &mut VecDeque<SlotId> {
        let slot = self.slot(s);
        let temp = slot.temp as usize;
        if slot.urgent {
            &mut self.urgent[temp]
        } else {
            &mut self.queues[temp]
        }
    }

    /// Slots a write of a block needs, given the block's newest slot
    /// ([`Self::latest_slot`]): a queued one is overwritten in place.
    pub fn slots_needed(&self, latest: Option<SlotId>) -> usize {
        match latest {
            Some(s) if self.slot(s).seq.is_none() => 0,
            _ => 1,
        }
    }

    /// Buffers one block; `urgent`: a FUA write's (see the module
    /// documentation). The caller checked `slots_needed` against `free_slots`.
    /// `data_crc` is `tag::data_crc(&data)`, taken by the caller when the
    /// write is admitted, just after its bytes came in: by the time a full
    /// append leaves, a burst of writes has pushed them out of the cache
    /// (`perf` of `zftl serve` under 128 KiB writes at iodepth 16: the
    /// CRC's share fell from 13.8 % to 12.3 %).
    pub fn insert(
        &mut self,
        lba: Lba,
        data: BlockData,
        data_crc: u32,
        counted_new: bool,
        temp: Temp,
        urgent: bool,
    ) -> SlotId {
        use std::collections::hash_map::Entry;
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let entry = self.latest.entry(lba);
        if let Entry::Occupied(e) = &entry {
            let s = *e.get();
            let old = self.slots[s as usize].as_mut().expect("slot in use");
            if old.seq.is_none() {
                // Queued, not yet sent: overwritten in place (coalescing).
                // It keeps its ticket: a flush admitted after the data it
                // held waits for the slot.
                old.data = data;
                old.data_crc = data_crc;
                if urgent && !old.urgent {
                    self.make_urgent(s);
                }
                return s;
            }
        }
        let s = self.free.pop().expect("caller checked free slots");
        match entry {
            Entry::Occupied(mut e) => *e.get_mut() = s,
            Entry::Vacant(e) => {
                e.insert(s);
            }
        }
        self.slots[s as usize] = Some(Slot {
            lba,
            data,
            data_crc,
            seq: None,
            counted_new,
            ticket,
            temp,
            urgent,
        });
        self.note_ticket(ticket, s);
        self.queue_of(s).push_back(s);
        s
    }

    /// Moves queued slot `s` to the back of its urgent queue.
    fn make_urgent(&mut self, s: SlotId) {
        self.remove_queued(s);
        self.slot_mut(s).urgent = true;
        self.queue_of(s).push_back(s);
    }

    /// Takes queued slot `s` out of its queue: O(queued slots), as a trim
    /// or a FUA write overwriting a queued block needs.
    fn remove_queued(&mut self, s: SlotId) {
        let queue = self.queue_of(s);
        let at = queue.iter().position(|&q| q == s).expect("slot queued");
        queue.remove(at);
    }

    /// The slot holding the newest buffered version of `lba`.
    pub fn latest_slot(&self, lba: Lba) -> Option<SlotId> {
        self.latest.get(&lba).copied()
    }

    /// Whether a version of any block of `ranges` (`(lba, block_count)`)
    /// is buffered or on its way to the media. O(blocks of the ranges) or
    /// O(buffered blocks), whichever is less.
    pub fn holds_any(&self, ranges: &[(Lba, u64)]) -> bool {
        let blocks: u64 = ranges.iter().map(|&(_, n)| n).sum();
        if blocks <= self.latest.len() as u64 {
            ranges
                .iter()
                .any(|&(l, n)| (l..l + n).any(|lba| self.latest.contains_key(&lba)))
        } else {
            self.latest
                .keys()
                .any(|&lba| ranges.iter().any(|&(l, n)| l <= lba && lba < l + n))
        }
    }

    /// The blocks of `[start, end)` with a version buffered or on its way
    /// to the media, in no order. O(blocks of the range) or O(buffered
    /// blocks), whichever is less.
    pub fn held_in(&self, start: Lba, end: Lba) -> Vec<Lba> {
        if end.saturating_sub(start) <= self.latest.len() as u64 {
            (start..end)
                .filter(|lba| self.latest.contains_key(lba))
                .collect()
        } else {
            let inside = |lba: &Lba| (start..end).contains(lba);
            self.latest.keys().copied().filter(inside).collect()
        }
    }

    /// Newest buffered data for `lba`.
    pub fn lookup(&self, lba: Lba) -> Option<&[u8]> {
        self.latest.get(&lba).map(|&s| &*self.slot(s).data)
    }

    /// Forgets the newest version of `lba` (trim). A queued slot is dropped;
    /// an in-flight one stays until its completion but no longer wins.
    /// Returns whether a dropped slot had been counted as new space.
    pub fn discard(&mut self, lba: Lba) -> bool {
        let Some(s) = self.latest.remove(&lba) else {
            return false;
        };
        if self.slot(s).seq.is_some() {
            return false;
        }
        self.remove_queued(s);
        self.release(s).counted_new
    }

    /// Takes the next queued slot of `temp` for submission, urgent ones
    /// first, stamping its seq.
    pub fn pop_queued(&mut self, temp: Temp, seq: Seq) -> Option<SlotId> {
        let t = temp as usize;
        let s = self.urgent[t]
            .pop_front()
            .or_else(|| self.queues[t].pop_front())?;
        self.slot_mut(s).seq = Some(seq);
        Some(s)
    }

    /// Puts an in-flight slot back at the head of its queue (failed write).
    /// A slot whose block was written again meanwhile is released instead,
    /// and returned: sent again, it would get a seq above its newer
    /// version's (sent first, from the urgent queue or the other
    /// temperature's) and replay would take it for the newest. The newer
    /// version's slot, if still here, takes over its ticket, so a flush
    /// that waited for it waits for that one.
    pub fn requeue_front(&mut self, s: SlotId) -> Option<Slot> {
        let newer = match self.latest.get(&self.slot(s).lba) {
            Some(&n) if n == s => {
                self.slot_mut(s).seq = None;
                self.queue_of(s).push_front(s);
                return None;
            }
            newer => newer.copied(),
        };
        if let Some(n) = newer {
            self.hand_ticket(s, n);
        }
        Some(self.release(s))
    }

    /// Gives slot `n` the ticket of slot `s` if it is older than its own,
    /// in `s`'s place in the ticket queue; `n`'s own entry goes stale.
    /// (`n` may hold an older one already, handed on by another failed
    /// slot of its block.)
    fn hand_ticket(&mut self, s: SlotId, n: SlotId) {
        let ticket = self.slot(s).ticket;
        if ticket > self.slot(n).ticket {
            return;
        }
        let entry = self
            .tickets
            .iter_mut()
            .find(|e| **e == (ticket, s))
            .expect("a live slot's ticket is queued");
        *entry = (ticket, n);
        self.slot_mut(n).ticket = ticket;
    }

    /// Frees a slot whose data reached the media; `latest` is cleared only if
    /// it still names this slot.
    pub fn release(&mut self, s: SlotId) -> Slot {
        self.release_latest(s).0
    }

    /// [`Self::release`], also saying whether the slot held the newest
    /// version of its block (one index lookup for both).
    pub fn release_latest(&mut self, s: SlotId) -> (Slot, bool) {
        use std::collections::hash_map::Entry;
        let slot = self.slots[s as usize]
            .take()
            .expect("release of a free slot");
        let latest = match self.latest.entry(slot.lba) {
            Entry::Occupied(e) if *e.get() == s => {
                e.remove();
                true
            }
            _ => false,
        };
        self.free.push(s);
        self.drop_stale_tickets();
        (slot, latest)
    }

    pub fn slot(&self, s: SlotId) -> &Slot {
        self.slots[s as usize].as_ref().expect("slot in use")
    }

    fn slot_mut(&mut self, s: SlotId) -> &mut Slot {
        self.slots[s as usize].as_mut().expect("slot in use")
    }

    /// The ticket the next admitted block will get (a flush barrier).
    pub fn next_ticket(&self) -> u64 {
        self.next_ticket
    }

    /// The ticket slot `s` holds (with [`Self::holds`], what a FUA write
    /// waits for).
    pub fn ticket(&self, s: SlotId) -> u64 {
        self.slot(s).ticket
    }

    /// Whether slot `s` still holds `ticket`: the block admitted with it
    /// (or a newer version that took its slot in place) has not left.
    pub fn holds(&self, s: SlotId, ticket: u64) -> bool {
        self.ticket_is_live((ticket, s))
    }

    /// Whether every block admitted before `barrier` has left the buffer.
    pub fn drained_before(&self, barrier: u64) -> bool {
        self.tickets.front().is_none_or(|&(t, _)| t >= barrier)
    }

    fn ticket_is_live(&self, (ticket, s): (u64, SlotId)) -> bool {
        self.slots[s as usize]
            .as_ref()
            .is_some_and(|slot| slot.ticket == ticket)
    }

    /// Records slot `s`'s new ticket (the newest); its older entry, if
    /// any, went stale. Sweeps the stale entries once they could outnumber
    /// the slots, which bounds the queue at twice the slots.
    fn note_ticket(&mut self, ticket: u64, s: SlotId) {
        self.drop_stale_tickets();
        if self.tickets.len() >= 2 * self.slots.len() {
            let mut tickets = std::mem::take(&mut self.tickets);
            tickets.retain(|&e| self.ticket_is_live(e));
            self.tickets = tickets;
        }
        self.tickets.push_back((ticket, s));
    }

    /// Keeps the front entry live.
    fn drop_stale_tickets(&mut self) {
        while let Some(&e) = self.tickets.front() {
            if self.ticket_is_live(e) {
                break;
            }
            self.tickets.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tag;

    /// `WriteBuffer::insert` with the CRC admission takes.
    fn insert(b: &mut WriteBuffer, lba: Lba, data: BlockData, new: bool, temp: Temp) -> SlotId {
        let crc = tag::data_crc(&data);
        b.insert(lba, data, crc, new, temp, false)
    }

    /// A FUA write's block.
    fn insert_urgent(b: &mut WriteBuffer, lba: Lba, data: u8) -> SlotId {
        let crc = tag::data_crc(&[data]);
        b.insert(lba, vec![data].into(), crc, false, Temp::Hot, true)
    }

    /// FUA blocks go out first; a FUA write over a queued block moves its
    /// slot to the urgent queue, a buffered write over an urgent slot
    /// leaves it there; a failed urgent slot goes back to the urgent queue.
    #[test]
    fn urgent_slots_go_first_and_stay_urgent() {
        let mut b = WriteBuffer::new(8, 1);
        let a = insert(&mut b, 1, vec![1].into(), true, Temp::Hot);
        let c = insert(&mut b, 2, vec![1].into(), true, Temp::Hot);
        let u = insert_urgent(&mut b, 3, 1);
        assert_eq!((b.urgent_in(Temp::Hot), b.queued_in(Temp::Hot)), (1, 3));
        assert_eq!(insert_urgent(&mut b, 2, 2), c, "overwritten in place");
        assert_eq!(insert(&mut b, 3, vec![2].into(), false, Temp::Hot), u);
        assert_eq!((b.urgent_in(Temp::Hot), b.queued()), (2, 3));
        assert_eq!(b.pop_queued(Temp::Hot, 1), Some(u));
        b.requeue_front(u);
        assert_eq!(b.pop_queued(Temp::Hot, 2), Some(u), "back in front");
        assert_eq!(b.pop_queued(Temp::Hot, 3), Some(c));
        assert_eq!(b.urgent_in(Temp::Hot), 0);
        assert_eq!(b.pop_queued(Temp::Hot, 4), Some(a));
        assert_eq!(b.lookup(2), Some(&[2u8][..]));
        assert_eq!(b.lookup(3), Some(&[2u8][..]));
    }

    /// A FUA write's block is done once its slot no longer holds its
    /// ticket; a flush admitted before it still waits for older blocks.
    #[test]
    fn a_fua_block_is_done_when_its_slot_leaves() {
        let mut b = WriteBuffer::new(4, 1);
        let old = insert(&mut b, 1, vec![1].into(), true, Temp::Hot);
        let barrier = b.next_ticket();
        let u = insert_urgent(&mut b, 2, 1);
        let ticket = b.ticket(u);
        assert!(b.holds(u, ticket));
        assert_eq!(b.pop_queued(Temp::Hot, 1), Some(u));
        b.release(u);
        assert!(!b.holds(u, ticket));
        assert!(!b.drained_before(barrier), "the older block is queued");
        assert_eq!(insert(&mut b, 5, vec![1].into(), true, Temp::Hot), u);
        assert!(!b.holds(u, ticket), "slot reused with a newer ticket");
        assert_eq!(b.pop_queued(Temp::Hot, 2), Some(old));
        b.release(old);
        assert!(b.drained_before(barrier));
    }

    /// A failed slot whose block was written again is dropped, not sent
    /// again after its newer version; the newer one holds its ticket.
    #[test]
    fn a_failed_slot_written_again_is_dropped_and_hands_on_its_ticket() {
        let mut b = WriteBuffer::new(4, 1);
        let old = insert(&mut b, 7, vec![1].into(), true, Temp::Cold);
        let barrier = b.next_ticket();
        assert_eq!(b.pop_queued(Temp::Cold, 1), Some(old));
        let newer = insert_urgent(&mut b, 7, 2);
        let dropped = b.requeue_front(old).expect("superseded");
        assert_eq!((dropped.lba, &*dropped.data), (7, &[1u8][..]));
        assert_eq!((b.queued(), b.used_slots()), (1, 1));
        assert!(
            !b.drained_before(barrier),
            "the newer slot holds the ticket"
        );
        assert_eq!(b.pop_queued(Temp::Hot, 2), Some(newer));
        assert!(b.requeue_front(newer).is_none(), "the newest goes back");
        assert_eq!(b.pop_queued(Temp::Hot, 3), Some(newer));
        b.release(newer);
        assert!(b.drained_before(barrier));
    }

    /// A trim drops a queued urgent slot from its queue.
    #[test]
    fn discard_drops_an_urgent_slot() {
        let mut b = WriteBuffer::new(2, 1);
        insert_urgent(&mut b, 5, 1);
        assert!(!b.discard(5));
        assert_eq!(
            (b.queued(), b.urgent_in(Temp::Hot), b.free_slots()),
            (0, 0, 2)
        );
    }

    /// A flush admitted between two writes to a block waits for the slot
    /// the second overwrote in place: it holds data the flush covers.
    #[test]
    fn a_barrier_waits_for_a_slot_overwritten_in_place() {
        let mut b = WriteBuffer::new(4, 1);
        let s = insert(&mut b, 7, vec![1].into(), true, Temp::Hot);
        let barrier = b.next_ticket();
        assert_eq!(insert(&mut b, 7, vec![2].into(), false, Temp::Hot), s);
        assert!(!b.drained_before(barrier));
        b.pop_queued(Temp::Hot, 1);
        b.release(s);
        assert!(b.drained_before(barrier));
    }

    #[test]
    fn coalesces_queued_and_keeps_inflight() {
        let mut b = WriteBuffer::new(4, 1);
        let s1 = insert(&mut b, 7, vec![1].into(), true, Temp::Hot);
        assert_eq!(b.slots_needed(b.latest_slot(7)), 0);
        let s2 = insert(&mut b, 7, vec![2].into(), false, Temp::Hot);
        assert_eq!(s1, s2);
        assert_eq!(b.lookup(7), Some(&[2u8][..]));
        assert_eq!(b.pop_queued(Temp::Hot, 10), Some(s1));
        assert_eq!(b.slots_needed(b.latest_slot(7)), 1);
        let s3 = insert(&mut b, 7, vec![3].into(), false, Temp::Hot);
        assert_ne!(s3, s1);
        assert_ne!(b.latest_slot(7), Some(s1));
        b.release(s1);
        assert_eq!(b.lookup(7), Some(&[3u8][..]));
    }

    /// The slot keeps the CRC it was given with its data, also when a
    /// queued block is overwritten in place.
    #[test]
    fn slot_crc_is_its_data_crc() {
        let mut b = WriteBuffer::new(4, 1);
        let s = insert(&mut b, 7, vec![1; 8].into(), true, Temp::Hot);
        assert_eq!(b.slot(s).data_crc, tag::data_crc(&[1; 8]));
        assert_eq!(insert(&mut b, 7, vec![2; 8].into(), false, Temp::Hot), s);
        assert_eq!(b.slot(s).data_crc, tag::data_crc(&[2; 8]));
        assert_ne!(tag::data_crc(&[1; 8]), tag::data_crc(&[2; 8]));
    }

    #[test]
    fn barrier_waits_for_older_tickets() {
        let mut b = WriteBuffer::new(4, 1);
        let s = insert(&mut b, 1, vec![0].into(), true, Temp::Cold);
        let barrier = b.next_ticket();
        insert(&mut b, 2, vec![0].into(), true, Temp::Cold);
        assert!(!b.drained_before(barrier));
        b.pop_queued(Temp::Cold, 1);
        b.release(s);
        assert!(b.drained_before(barrier));
    }

    #[test]
    fn recycled_block_buffers_are_bounded_and_reused() {
        let mut b = WriteBuffer::new(2, 1);
        for _ in 0..5 {
            b.recycle(Vec::with_capacity(8).into(), 8);
        }
        b.recycle(Vec::with_capacity(16).into(), 8); // not one block: dropped
        assert_eq!(b.spare.len(), 2, "at most one spare buffer per slot");
        let copy = b.block_copy(&[7; 8]);
        assert_eq!((copy.as_slice(), copy.capacity()), (&[7u8; 8][..], 8));
        assert_eq!(b.spare.len(), 1);
    }

    #[test]
    fn shared_blocks_read_as_their_window_and_are_bounded() {
        let mut b = WriteBuffer::new(2, 1);
        assert!(
            b.may_share(4) && !b.may_share(5),
            "2 blocks of shared buffers per slot"
        );
        let data: Vec<u8> = (0..4 * 8).map(|i| i as u8).collect();
        let blocks = b.share_blocks(data.clone(), 8);
        assert_eq!(b.shared_blocks(), 4);
        assert!(!b.may_share(1));
        let mut blocks = blocks.into_iter();
        let s0 = insert(&mut b, 10, blocks.next().unwrap(), true, Temp::Hot);
        let _s1 = insert(&mut b, 11, blocks.next().unwrap(), true, Temp::Hot);
        drop(blocks); // two windows never buffered
        assert_eq!(b.lookup(10), Some(&data[..8]));
        assert_eq!(b.lookup(11), Some(&data[8..16]));
        assert_eq!(b.shared_blocks(), 4, "alive while any window is");
        insert(&mut b, 11, vec![9; 8].into(), false, Temp::Hot); // coalesced in place
        assert_eq!(b.shared_blocks(), 4);
        b.pop_queued(Temp::Hot, 1);
        let slot = b.release(s0);
        b.recycle(slot.data, 8);
        assert_eq!(b.shared_blocks(), 0, "the last window freed the buffer");
        assert!(b.spare.is_empty(), "shared windows are not pooled");
        assert_eq!(b.lookup(11), Some(&[9u8; 8][..]));
    }

    #[test]
    fn a_run_of_blocks_hashes_to_neighbouring_buckets_placed_by_the_seed() {
        use std::hash::BuildHasher;
        let (a, b) = (LbaHasherBuilder(1), LbaHasherBuilder(2));
        let run: Vec<u64> = (64..64 + LOCALITY_BLOCKS).map(|l| a.hash_one(l)).collect();
        assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "consecutive");
        assert_ne!(
            a.hash_one(64u64) >> 57,
            a.hash_one(96u64) >> 57,
            "runs mixed"
        );
        assert_ne!(a.hash_one(64u64), b.hash_one(64u64), "keyed");
    }

    /// `drained_before` against the oldest ticket of the occupied slots,
    /// found by brute force, through random admissions (coalescing many,
    /// some urgent), submissions, completions, failed appends and trims; the ticket queue stays bounded
    /// while the oldest slot stays in flight.
    #[test]
    fn barriers_match_the_oldest_occupied_ticket_and_tickets_stay_bounded() {
        let cap = 8u32;
        let mut b = WriteBuffer::new(cap, 7);
        let mut rng = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut in_flight: Vec<SlotId> = Vec::new();
        let mut seq = 0;
        for step in 0..20_000 {
            let lba = next(12);
            match next(10) {
                0..=4 => {
                    if b.slots_needed(b.latest_slot(lba)) <= b.free_slots() {
                        let urgent = next(4) == 0;
                        b.insert(lba, vec![0].into(), 0, false, Temp::Hot, urgent);
                    }
                }
                5 | 6 => {
                    seq += 1;
                    in_flight.extend(b.pop_queued(Temp::Hot, seq));
                }
                // Completions, but never of the first slot sent while
                // step < 10000: the oldest ticket stays put meanwhile.
                7 | 8 if in_flight.len() > usize::from(step < 10_000) => {
                    let i = usize::from(step < 10_000)
                        + next((in_flight.len() - usize::from(step < 10_000)) as u64) as usize;
                    b.release(in_flight.swap_remove(i));
                }
                // A failed append: back in its queue, or dropped if
                // written again (its ticket handed on).
                9 if next(2) == 0 && in_flight.len() > usize::from(step < 10_000) => {
                    let i = usize::from(step < 10_000)
                        + next((in_flight.len() - usize::from(step < 10_000)) as u64) as usize;
                    b.requeue_front(in_flight.swap_remove(i));
                }
                _ => {
                    b.discard(lba);
                }
            }
            let oldest = b.slots.iter().flatten().map(|slot| slot.ticket).min();
            for barrier in [0, b.next_ticket() / 2, b.next_ticket()] {
                let want = oldest.is_none_or(|t| t >= barrier);
                assert_eq!(b.drained_before(barrier), want, "step {step}");
            }
            assert!(b.tickets.len() <= 2 * cap as usize + 1, "step {step}");
        }
    }

    #[test]
    fn discard_drops_queued_slot() {
        let mut b = WriteBuffer::new(2, 1);
        insert(&mut b, 5, vec![0].into(), true, Temp::Hot);
        assert!(b.discard(5));
        assert_eq!(b.free_slots(), 2);
        assert_eq!(b.queued(), 0);
        assert!(b.lookup(5).is_none());
    }
}
