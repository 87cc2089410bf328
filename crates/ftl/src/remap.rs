//! The remap table of the nameless segment (docs/design.md, "Migration
//! events and the remap table"): for each migrated block whose move the
//! client has not acknowledged, its old address and its new one, and
//! whether its `Migrated` event was delivered since the mount.
//!
//! Fixed open addressing with linear probing over `2 × capacity` slots of
//! 16 bytes (old, new) plus a delivered bit per slot, never more than half
//! full: 32 bytes per entry of capacity, probes stay short, and removal
//! shifts the run back (no tombstones), so the table never degrades. It
//! never grows: a full table answers [`RemapFull`] and migrations stop.

use crate::nameless::NamelessAddr;

/// What an empty slot's `old` holds: never a well-formed address (a
/// well-formed address has a generation ≥ 1, so its u64 is ≥ 2^32).
const EMPTY: u64 = 0;

/// The table has no room for another entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemapFull;

/// The remap table. Keys are whole addresses (Ppa and generation): step 2
/// of the address check matches an entry for exactly the address given.
#[derive(Debug)]
pub struct RemapTable {
    /// Per slot, the old address (`EMPTY`: free) and the new one.
    old: Vec<u64>,
    new: Vec<u64>,
    /// Per slot, its event was delivered since the mount (bit i of word i/64).
    delivered: Vec<u64>,
    len: u32,
    capacity: u32,
}

impl RemapTable {
    /// An empty table for `capacity_entries` entries (at least 1).
    pub fn new(capacity_entries: u32) -> RemapTable {
        let capacity = capacity_entries.max(1);
        let slots = 2 * capacity as usize;
        RemapTable {
            // Zeroed vectors: the pages are touched only as entries come.
            old: vec![EMPTY; slots],
            new: vec![0; slots],
            delivered: vec![0; slots.div_ceil(64)],
            len: 0,
            capacity,
        }
    }

    /// A table holding the `entries` a mount recovered (every one
    /// undelivered: delivery is at least once), sized to them when they
    /// pass `capacity_entries`, so it is full and migrates nothing until
    /// the client drains it.
    pub fn recovered(
        capacity_entries: u32,
        entries: &[(NamelessAddr, NamelessAddr)],
    ) -> RemapTable {
        let count = u32::try_from(entries.len()).expect("remap entries fit u32");
        let mut table = RemapTable::new(capacity_entries.max(count));
        for &(old, new) in entries {
            table
                .insert(old, new)
                .expect("the table was sized to hold them");
        }
        table
    }

    /// Entries held.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entries the table holds at most.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Whether `entries` more fit.
    pub fn has_room_for(&self, entries: u64) -> bool {
        u64::from(self.len) + entries <= u64::from(self.capacity)
    }

    /// Bytes the table occupies (its slots and delivered bits).
    pub fn memory_bytes(&self) -> u64 {
        (self.old.len() * 16 + self.delivered.len() * 8) as u64
    }

    fn slots(&self) -> usize {
        self.old.len()
    }

    /// The slot a key's probe starts at (Fibonacci hashing: neighbouring
    /// Ppas spread over the table).
    fn home(&self, key: u64) -> usize {
        let h = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        ((u128::from(h) * self.slots() as u128) >> 64) as usize
    }

    fn next(&self, slot: usize) -> usize {
        if slot + 1 == self.slots() {
            0
        } else {
            slot + 1
        }
    }

    /// The slot holding `old`, if any. The probe ends at an empty slot,
    /// which exists because the table is at most half full.
    fn find(&self, old: NamelessAddr) -> Option<usize> {
        let key = old.to_u64();
        let mut slot = self.home(key);
        loop {
            match self.old[slot] {
                EMPTY => return None,
                k if k == key => return Some(slot),
                _ => slot = self.next(slot),
            }
        }
    }

    /// Records that the block at `old` now lives at `new` (undelivered).
    /// A bug if `old` has an entry already (a block on the old side of an
    /// entry is no longer live, so it is never migrated again).
    pub fn insert(&mut self, old: NamelessAddr, new: NamelessAddr) -> Result<(), RemapFull> {
        assert!(
            old.is_well_formed() && new.is_well_formed() && old.ppa() != new.ppa(),
            "remap entry {old:?} -> {new:?} is not a move"
        );
        if self.len == self.capacity {
            return Err(RemapFull);
        }
        let key = old.to_u64();
        let mut slot = self.home(key);
        while self.old[slot] != EMPTY {
            assert!(self.old[slot] != key, "{old:?} is remapped already");
            slot = self.next(slot);
        }
        self.old[slot] = key;
        self.new[slot] = new.to_u64();
        self.set_delivered(slot, false);
        self.len += 1;
        Ok(())
    }

    /// Where the block at `old` went, if it has an entry.
    pub fn get(&self, old: NamelessAddr) -> Option<NamelessAddr> {
        self.find(old)
            .map(|slot| NamelessAddr::from_u64(self.new[slot]))
    }

    /// Whether `old`'s event was delivered since the mount (`None`: no entry).
    pub fn is_delivered(&self, old: NamelessAddr) -> Option<bool> {
        self.find(old).map(|slot| self.delivered_at(slot))
    }

    /// Marks `old`'s event delivered; false if it has no entry (acked since).
    pub fn mark_delivered(&mut self, old: NamelessAddr) -> bool {
        match self.find(old) {
            Some(slot) => {
                self.set_delivered(slot, true);
                true
            }
            None => false,
        }
    }

    /// Drops `old`'s entry (acknowledged); its new address, if it had one.
    pub fn remove(&mut self, old: NamelessAddr) -> Option<NamelessAddr> {
        let slot = self.find(old)?;
        let new = NamelessAddr::from_u64(self.new[slot]);
        self.shift_back(slot);
        self.len -= 1;
        Some(new)
    }

    /// Empties `hole` and moves later members of its probe run back into
    /// it where their home allows (backward-shift deletion), so every
    /// remaining key is still found before the first empty slot.
    fn shift_back(&mut self, mut hole: usize) {
        let mut slot = self.next(hole);
        while self.old[slot] != EMPTY {
            let home = self.home(self.old[slot]);
            // The entry may move to `hole` if `hole` lies on its probe path,
            // that is cyclically within [home, slot).
            let on_path = if home <= slot {
                home <= hole && hole < slot
            } else {
                hole >= home || hole < slot
            };
            if on_path {
                self.old[hole] = self.old[slot];
                self.new[hole] = self.new[slot];
                let d = self.delivered_at(slot);
                self.set_delivered(hole, d);
                hole = slot;
            }
            slot = self.next(slot);
        }
        self.old[hole] = EMPTY;
        self.new[hole] = 0;
        self.set_delivered(hole, false);
    }

    fn delivered_at(&self, slot: usize) -> bool {
        self.delivered[slot / 64] >> (slot % 64) & 1 == 1
    }

    fn set_delivered(&mut self, slot: usize, on: bool) {
        let bit = 1u64 << (slot % 64);
        if on {
            self.delivered[slot / 64] |= bit;
        } else {
            self.delivered[slot / 64] &= !bit;
        }
    }

    /// Every entry as (old, new), old increasing: checkpoint section 20.
    pub fn entries(&self) -> Vec<(NamelessAddr, NamelessAddr)> {
        let mut out: Vec<(NamelessAddr, NamelessAddr)> = (0..self.slots())
            .filter(|&s| self.old[s] != EMPTY)
            .map(|s| {
                (
                    NamelessAddr::from_u64(self.old[s]),
                    NamelessAddr::from_u64(self.new[s]),
                )
            })
            .collect();
        out.sort_unstable_by_key(|&(old, _)| old.to_u64());
        out
    }

    /// The old addresses whose events were delivered, increasing: what a
    /// commit acknowledges (docs/design.md, "Recovery and the post-crash
    /// hand-over").
    pub fn delivered_olds(&self) -> Vec<NamelessAddr> {
        let mut out: Vec<NamelessAddr> = (0..self.slots())
            .filter(|&s| self.old[s] != EMPTY && self.delivered_at(s))
            .map(|s| NamelessAddr::from_u64(self.old[s]))
            .collect();
        out.sort_unstable_by_key(|a| a.to_u64());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::Ppa;
    use std::collections::BTreeMap;

    fn addr(ppa: u32, generation: u32) -> NamelessAddr {
        NamelessAddr::new(Ppa(ppa), generation)
    }

    #[test]
    fn insert_get_remove() {
        let mut t = RemapTable::new(4);
        assert_eq!(t.capacity(), 4);
        assert!(t.is_empty());
        t.insert(addr(10, 1), addr(500, 3)).unwrap();
        t.insert(addr(11, 1), addr(501, 3)).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(addr(10, 1)), Some(addr(500, 3)));
        // Another generation at the same Ppa is another address.
        assert_eq!(t.get(addr(10, 2)), None);
        assert_eq!(t.remove(addr(10, 1)), Some(addr(500, 3)));
        assert_eq!(t.get(addr(10, 1)), None);
        assert_eq!(t.remove(addr(10, 1)), None, "a second ack is a no-op");
        assert_eq!(t.get(addr(11, 1)), Some(addr(501, 3)));
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn full_means_full_and_never_grows() {
        let mut t = RemapTable::new(3);
        for i in 0..3 {
            t.insert(addr(i, 1), addr(100 + i, 1)).unwrap();
        }
        assert!(!t.has_room_for(1));
        assert_eq!(t.insert(addr(9, 1), addr(109, 1)), Err(RemapFull));
        assert_eq!(t.len(), 3);
        let bytes = t.memory_bytes();
        t.remove(addr(1, 1)).unwrap();
        assert!(t.has_room_for(1) && !t.has_room_for(2));
        t.insert(addr(9, 1), addr(109, 1)).unwrap();
        assert_eq!(t.memory_bytes(), bytes);
    }

    #[test]
    fn delivered_bits_follow_their_entries() {
        let mut t = RemapTable::new(8);
        for i in 0..8 {
            t.insert(addr(i, 2), addr(200 + i, 1)).unwrap();
        }
        assert!(t.mark_delivered(addr(3, 2)));
        assert!(t.mark_delivered(addr(6, 2)));
        assert!(!t.mark_delivered(addr(6, 1)));
        // Removals shift entries back; the bits move with them.
        t.remove(addr(2, 2)).unwrap();
        t.remove(addr(5, 2)).unwrap();
        assert_eq!(t.delivered_olds(), vec![addr(3, 2), addr(6, 2)]);
        assert_eq!(t.is_delivered(addr(4, 2)), Some(false));
        assert_eq!(t.is_delivered(addr(2, 2)), None);
        t.remove(addr(3, 2)).unwrap();
        // A re-inserted key starts undelivered.
        t.insert(addr(3, 2), addr(203, 1)).unwrap();
        assert_eq!(t.is_delivered(addr(3, 2)), Some(false));
    }

    #[test]
    fn recovered_table_is_undelivered_and_sized_to_its_entries() {
        let entries: Vec<_> = (0..5).map(|i| (addr(i, 1), addr(50 + i, 1))).collect();
        let t = RemapTable::recovered(2, &entries);
        assert_eq!(t.capacity(), 5);
        assert!(
            !t.has_room_for(1),
            "full: it migrates nothing until drained"
        );
        assert_eq!(t.entries(), entries);
        assert!(t.delivered_olds().is_empty());
        let t = RemapTable::recovered(64, &entries);
        assert_eq!(t.capacity(), 64);
    }

    /// Random inserts, removals and deliveries against a BTreeMap: the
    /// backward shift never loses or misplaces an entry, even with the
    /// probe runs wrapping around the end of a small table.
    #[test]
    fn agrees_with_a_model_under_churn() {
        let mut rng = 0x1234_5678_9abc_def0u64;
        let mut step = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for capacity in [1u32, 2, 7, 64] {
            let mut t = RemapTable::new(capacity);
            let mut model: BTreeMap<u64, (NamelessAddr, bool)> = BTreeMap::new();
            for _ in 0..20_000 {
                let r = step();
                let old = addr((r % 40) as u32, 1 + (r >> 8) as u32 % 2);
                match r >> 20 & 3 {
                    0 | 1 if !model.contains_key(&old.to_u64()) => {
                        let new = addr(1000 + (r >> 24) as u32 % 1000, 1);
                        let res = t.insert(old, new);
                        if model.len() == capacity as usize {
                            assert_eq!(res, Err(RemapFull));
                        } else {
                            res.unwrap();
                            model.insert(old.to_u64(), (new, false));
                        }
                    }
                    2 => {
                        let want = model.get_mut(&old.to_u64()).map(|e| {
                            e.1 = true;
                        });
                        assert_eq!(t.mark_delivered(old), want.is_some());
                    }
                    _ => {
                        let want = model.remove(&old.to_u64()).map(|e| e.0);
                        assert_eq!(t.remove(old), want);
                    }
                }
                assert_eq!(t.len() as usize, model.len());
            }
            let want: Vec<_> = model
                .iter()
                .map(|(&o, &(n, _))| (NamelessAddr::from_u64(o), n))
                .collect();
            assert_eq!(t.entries(), want);
            let delivered: Vec<_> = model
                .iter()
                .filter(|(_, e)| e.1)
                .map(|(&o, _)| NamelessAddr::from_u64(o))
                .collect();
            assert_eq!(t.delivered_olds(), delivered);
            for (&o, &(n, d)) in &model {
                let o = NamelessAddr::from_u64(o);
                assert_eq!(t.get(o), Some(n));
                assert_eq!(t.is_delivered(o), Some(d));
            }
        }
    }
}
