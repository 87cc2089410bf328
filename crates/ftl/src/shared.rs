//! The shared table: the virtual layer for physical blocks that several
//! logical blocks name, or that a logical block names whose tag names
//! another (a moved block). Layout and costs: docs/design.md, "Shared
//! blocks and range operations".
//!
//! An entry is an id (`0 .. capacity`) with the block's physical address,
//! its reference count (the L2P entries naming it) and, with tags in band,
//! its data CRC. Entries are kept in parallel arrays (6 or 10 bytes an
//! entry); a count that does not fit 16 bits spills into a small map.
//! Free ids are chained through the address array. Each zone keeps the ids
//! of the entries whose block it holds, so GC finds a victim's shared
//! blocks without a reverse map of the device; the lists are cleaned as
//! they are used (an id freed or moved elsewhere is dropped then).

use crate::addr::Ppa;
use crate::backend::ZoneId;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

/// The hash of the table's maps, whose keys are its own entry ids and the
/// zones of the blocks it holds: one multiply, where the standard SipHash
/// took a fifth of a checkpoint load's installs. Neither key is chosen by a
/// client (entry ids are allocated here, zones are the device's), and a
/// checkpoint's ids are checked against the table's capacity before they
/// are hashed; both maps hold at most one key per zone or per entry.
#[derive(Clone, Copy, Debug, Default)]
struct IdHash;

impl BuildHasher for IdHash {
    type Hasher = IdHasher;
    fn build_hasher(&self) -> IdHasher {
        IdHasher(0)
    }
}

struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u32(u32::from(b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0.rotate_left(32) ^ u64::from(n)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }

    fn finish(&self) -> u64 {
        // High bits folded into the low ones the buckets are picked by.
        self.0 ^ (self.0 >> 29)
    }
}

/// A shared entry's id.
pub type SharedId = u32;

/// Marks the end of the free chain.
const NO_ID: u32 = u32::MAX;
/// `refs` value meaning "look in `big_refs`".
const BIG: u16 = u16::MAX;

/// The shared table. Its size is bounded by `capacity` (set at mount from
/// the map's value space); a full table answers `None` to `alloc`.
#[derive(Clone, Debug)]
pub struct SharedTable {
    /// Live entry: its block. Free entry: the next free id (or `NO_ID`).
    ppa: Vec<u32>,
    /// 0 for a free entry.
    refs: Vec<u16>,
    /// Reference counts of `BIG` or more.
    big_refs: HashMap<SharedId, u32, IdHash>,
    /// Of `refs`, those the snapshot history holds (saturating at `BIG`,
    /// which then means "unknown, some"): an entry all of whose references
    /// are kept versions holds a block no live block names.
    kept: Vec<u16>,
    /// Data CRC per entry (tags in band; empty otherwise).
    crc: Vec<u32>,
    keeps_crc: bool,
    free_head: u32,
    live: u32,
    /// Sum of `refs` over live entries.
    total_refs: u64,
    capacity: u32,
    zone_capacity_blocks: u64,
    /// Ids whose block each zone holds (may also hold ids since freed or
    /// moved: checked on use).
    by_zone: HashMap<ZoneId, Vec<SharedId>, IdHash>,
}

impl SharedTable {
    /// An empty table of at most `capacity` entries.
    pub fn new(capacity: u32, keeps_crc: bool, zone_capacity_blocks: u64) -> SharedTable {
        assert!(capacity < NO_ID, "shared capacity {capacity}");
        SharedTable {
            ppa: Vec::new(),
            refs: Vec::new(),
            big_refs: HashMap::default(),
            kept: Vec::new(),
            crc: Vec::new(),
            keeps_crc,
            free_head: NO_ID,
            live: 0,
            total_refs: 0,
            capacity,
            zone_capacity_blocks,
            by_zone: HashMap::default(),
        }
    }

    /// Most entries the table may hold.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Live entries: physical blocks reached through the table.
    pub fn live(&self) -> u32 {
        self.live
    }

    /// Entries that can still be allocated.
    pub fn free(&self) -> u32 {
        self.capacity - self.live
    }

    /// L2P entries naming the table, over all entries.
    pub fn total_refs(&self) -> u64 {
        self.total_refs
    }

    /// Whether `id` names a live entry.
    pub fn is_live(&self, id: SharedId) -> bool {
        self.refs.get(id as usize).is_some_and(|&r| r != 0)
    }

    /// The block of live entry `id`.
    pub fn ppa(&self, id: SharedId) -> Ppa {
        assert!(self.is_live(id), "shared entry {id} is not live");
        Ppa(self.ppa[id as usize])
    }

    /// The data CRC of live entry `id` (0 when the table keeps none).
    pub fn crc(&self, id: SharedId) -> u32 {
        assert!(self.is_live(id), "shared entry {id} is not live");
        if self.keeps_crc {
            self.crc[id as usize]
        } else {
            0
        }
    }

    /// The reference count of `id` (0 when free).
    pub fn refs(&self, id: SharedId) -> u32 {
        match self.refs.get(id as usize).copied() {
            None | Some(0) => 0,
            Some(BIG) => self.big_refs[&id],
            Some(r) => u32::from(r),
        }
    }

    /// A new entry for block `ppa`, named by one L2P entry (the caller's);
    /// `None` when the table is full.
    pub fn alloc(&mut self, ppa: Ppa, crc: u32) -> Option<SharedId> {
        assert!(!ppa.is_none(), "shared entry for Ppa::NONE");
        if self.live == self.capacity {
            return None;
        }
        let id = if self.free_head != NO_ID {
            let id = self.free_head;
            self.free_head = self.ppa[id as usize];
            id
        } else {
            let id = self.ppa.len() as u32;
            assert!(id < self.capacity, "free chain lost an entry");
            self.ppa.push(0);
            self.refs.push(0);
            self.kept.push(0);
            if self.keeps_crc {
                self.crc.push(0);
            }
            id
        };
        self.install(id, ppa, crc);
        self.add_ref(id);
        Some(id)
    }

    /// Puts a live entry at a chosen id, listed under its zone; the id
    /// must be free and the caller adds its references.
    fn install(&mut self, id: SharedId, ppa: Ppa, crc: u32) {
        self.set_live(id, ppa, crc);
        self.list(ppa, id);
    }

    /// `install` without listing the id under its zone.
    fn set_live(&mut self, id: SharedId, ppa: Ppa, crc: u32) {
        let i = id as usize;
        self.ppa[i] = ppa.0;
        // A live entry with no reference yet: `add_ref` follows at once.
        self.refs[i] = 0;
        self.kept[i] = 0;
        if self.keeps_crc {
            self.crc[i] = crc;
        }
        self.live += 1;
    }

    fn list(&mut self, ppa: Ppa, id: SharedId) {
        let zone = ppa.zone(self.zone_capacity_blocks);
        self.by_zone.entry(zone).or_default().push(id);
    }

    /// One of `id`'s references is (now) held by the snapshot history.
    pub fn add_kept(&mut self, id: SharedId) {
        let k = &mut self.kept[id as usize];
        *k = k.saturating_add(1);
    }

    /// The history dropped one of `id`'s references (before `drop_ref`).
    pub fn drop_kept(&mut self, id: SharedId) {
        let k = &mut self.kept[id as usize];
        if *k != BIG {
            *k = k.checked_sub(1).expect("a kept reference was counted");
        }
    }

    /// Whether only the history names `id`'s block: no live block does.
    pub fn kept_only(&self, id: SharedId) -> bool {
        let k = self.kept.get(id as usize).copied().unwrap_or(0);
        k != 0 && k != BIG && u32::from(k) == self.refs(id)
    }

    /// One more L2P entry names `id`.
    pub fn add_ref(&mut self, id: SharedId) {
        let i = id as usize;
        assert!(i < self.refs.len(), "shared entry {id} does not exist");
        self.total_refs += 1;
        match self.refs[i] {
            BIG => *self.big_refs.get_mut(&id).expect("big count") += 1,
            r if r == BIG - 1 => {
                self.refs[i] = BIG;
                self.big_refs.insert(id, u32::from(BIG));
            }
            r => self.refs[i] = r + 1,
        }
    }

    /// One L2P entry fewer names `id`; frees the entry when none is left
    /// and returns its block then.
    pub fn drop_ref(&mut self, id: SharedId) -> Option<Ppa> {
        let i = id as usize;
        assert!(self.is_live(id), "reference dropped from free entry {id}");
        self.total_refs -= 1;
        let left = match self.refs[i] {
            BIG => {
                let n = self.big_refs.get_mut(&id).expect("big count");
                *n -= 1;
                if *n < u32::from(BIG) {
                    self.refs[i] = *n as u16;
                    self.big_refs.remove(&id);
                }
                self.refs(id)
            }
            r => {
                self.refs[i] = r - 1;
                u32::from(r - 1)
            }
        };
        if left > 0 {
            return None;
        }
        let ppa = Ppa(self.ppa[i]);
        self.ppa[i] = self.free_head;
        self.free_head = id;
        self.live -= 1;
        Some(ppa)
    }

    /// Live entry `id`'s block moved to `to` (GC).
    pub fn relocate(&mut self, id: SharedId, to: Ppa) {
        assert!(self.is_live(id), "relocation of free entry {id}");
        self.ppa[id as usize] = to.0;
        self.list(to, id);
    }

    /// The live entry whose block is `ppa`, if any. O(entries listed for
    /// the zone).
    pub fn find(&self, ppa: Ppa) -> Option<SharedId> {
        let zone = ppa.zone(self.zone_capacity_blocks);
        self.by_zone
            .get(&zone)?
            .iter()
            .copied()
            .find(|&id| self.is_live(id) && self.ppa[id as usize] == ppa.0)
    }

    /// The live entries whose blocks lie in `zone`, by offset in the zone
    /// (`NO_ID` where none): what a GC job consults. Cleans the zone's list.
    pub fn zone_entries(&mut self, zone: ZoneId) -> Box<[SharedId]> {
        let cap = self.zone_capacity_blocks;
        let mut by_offset = vec![NO_ID; cap as usize].into_boxed_slice();
        let Some(list) = self.by_zone.get_mut(&zone) else {
            return by_offset;
        };
        let (ppa, refs) = (&self.ppa, &self.refs);
        list.retain(|&id| {
            let i = id as usize;
            let here = refs[i] != 0 && Ppa(ppa[i]).zone(cap) == zone;
            let slot = &mut by_offset[Ppa(ppa[i]).offset_blocks(cap) as usize];
            let first = here && *slot == NO_ID;
            if first {
                *slot = id;
            }
            first
        });
        if list.is_empty() {
            self.by_zone.remove(&zone);
        }
        by_offset
    }

    /// The zone was reset: nothing of the table may be left in it.
    pub fn forget_zone(&mut self, zone: ZoneId) {
        if let Some(list) = self.by_zone.remove(&zone) {
            let cap = self.zone_capacity_blocks;
            for id in list {
                assert!(
                    !(self.is_live(id) && Ppa(self.ppa[id as usize]).zone(cap) == zone),
                    "zone {zone} reset under shared entry {id}"
                );
            }
        }
    }

    /// Every live entry: `(id, block, refs, crc)`, by id.
    pub fn entries(&self) -> impl Iterator<Item = (SharedId, Ppa, u32, u32)> + '_ {
        (0..self.refs.len() as u32)
            .filter(|&id| self.is_live(id))
            .map(|id| (id, Ppa(self.ppa[id as usize]), self.refs(id), self.crc(id)))
    }

    /// Rebuilds a table from checkpointed entries `(id, block, refs, crc)`,
    /// ids strictly increasing and below `capacity`, counts at least 1.
    pub fn from_entries(
        capacity: u32,
        keeps_crc: bool,
        zone_capacity_blocks: u64,
        entries: impl Iterator<Item = (SharedId, Ppa, u32, u32)>,
    ) -> Result<SharedTable, String> {
        let mut t = SharedTable::new(capacity, keeps_crc, zone_capacity_blocks);
        t.reserve(entries.size_hint().0);
        // Entries come by id, and a run of them usually lies in one zone:
        // the run's ids are listed together, in id order as one by one.
        let mut run: (Option<ZoneId>, Vec<SharedId>) = (None, Vec::new());
        let mut next = 0u32;
        for (id, ppa, refs, crc) in entries {
            if id < next || id >= capacity {
                return Err(format!(
                    "shared entry {id} out of order or past the table's {capacity} entries"
                ));
            }
            if refs == 0 {
                return Err(format!("shared entry {id} has no references"));
            }
            // Ids skipped in between are free.
            for free in next..=id {
                t.ppa.push(t.free_head);
                t.refs.push(0);
                t.kept.push(0);
                if keeps_crc {
                    t.crc.push(0);
                }
                if free < id {
                    t.free_head = free;
                }
            }
            t.set_live(id, ppa, crc);
            let zone = ppa.zone(zone_capacity_blocks);
            if run.0 != Some(zone) {
                t.list_run(&mut run);
                run.0 = Some(zone);
            }
            run.1.push(id);
            if refs >= u32::from(BIG) {
                t.refs[id as usize] = BIG;
                t.big_refs.insert(id, refs);
            } else {
                t.refs[id as usize] = refs as u16;
            }
            t.total_refs += u64::from(refs);
            next = id + 1;
        }
        t.list_run(&mut run);
        Ok(t)
    }

    fn reserve(&mut self, entries: usize) {
        self.ppa.reserve(entries);
        self.refs.reserve(entries);
        self.kept.reserve(entries);
        if self.keeps_crc {
            self.crc.reserve(entries);
        }
    }

    /// Lists a run of ids of one zone (and empties it).
    fn list_run(&mut self, (zone, ids): &mut (Option<ZoneId>, Vec<SharedId>)) {
        if let Some(zone) = *zone {
            self.by_zone.entry(zone).or_default().append(ids);
        }
    }

    /// Heap bytes the table holds.
    pub fn memory_bytes(&self) -> u64 {
        let arrays = self.ppa.capacity() * 4
            + self.refs.capacity() * 2
            + self.kept.capacity() * 2
            + self.crc.capacity() * 4;
        let lists: usize = self
            .by_zone
            .values()
            .map(|l| l.capacity() * 4 + std::mem::size_of::<Vec<u32>>() + 8)
            .sum();
        let big = self.big_refs.capacity() * 12;
        (arrays + lists + big) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_and_go_and_ids_are_reused() {
        let mut t = SharedTable::new(3, true, 8);
        let a = t.alloc(Ppa(3), 11).unwrap();
        t.add_ref(a);
        let b = t.alloc(Ppa(9), 22).unwrap();
        assert_eq!((t.live(), t.total_refs()), (2, 3));
        assert_eq!((t.ppa(a), t.crc(a), t.refs(a)), (Ppa(3), 11, 2));
        assert_eq!(t.find(Ppa(9)), Some(b));
        assert_eq!(t.drop_ref(a), None);
        assert_eq!(t.drop_ref(a), Some(Ppa(3)));
        assert!(!t.is_live(a));
        assert_eq!(t.find(Ppa(3)), None);
        let c = t.alloc(Ppa(4), 0).unwrap();
        assert_eq!(c, a, "freed ids are reused");
        t.alloc(Ppa(5), 0).unwrap();
        assert_eq!(t.alloc(Ppa(6), 0), None, "full");
    }

    #[test]
    fn large_counts_spill_and_come_back() {
        let mut t = SharedTable::new(1, false, 8);
        let id = t.alloc(Ppa(1), 0).unwrap();
        for _ in 1..70_000 {
            t.add_ref(id);
        }
        assert_eq!(t.refs(id), 70_000);
        for _ in 0..69_999 {
            assert_eq!(t.drop_ref(id), None);
        }
        assert_eq!(t.refs(id), 1);
        assert!(t.big_refs.is_empty());
        assert_eq!(t.drop_ref(id), Some(Ppa(1)));
    }

    #[test]
    fn zone_lists_follow_relocations() {
        let mut t = SharedTable::new(8, false, 8);
        let a = t.alloc(Ppa(2), 0).unwrap();
        let b = t.alloc(Ppa(5), 0).unwrap();
        t.relocate(a, Ppa(17));
        let zone0 = t.zone_entries(0);
        assert_eq!(zone0[5], b);
        assert_eq!(zone0.iter().filter(|&&i| i != NO_ID).count(), 1);
        assert_eq!(t.zone_entries(2)[1], a);
        assert_eq!(t.find(Ppa(17)), Some(a));
        t.drop_ref(b);
        t.forget_zone(0);
        assert!(t.zone_entries(0).iter().all(|&i| i == NO_ID));
    }

    #[test]
    #[should_panic(expected = "reset under shared entry")]
    fn a_zone_is_never_reset_under_a_live_entry() {
        let mut t = SharedTable::new(8, false, 8);
        t.alloc(Ppa(2), 0).unwrap();
        t.forget_zone(0);
    }

    #[test]
    fn checkpointed_entries_keep_their_ids() {
        let t = SharedTable::from_entries(
            10,
            true,
            8,
            [(2, Ppa(7), 1, 5), (6, Ppa(9), 2, 6)].into_iter(),
        )
        .unwrap();
        assert_eq!(t.live(), 2);
        assert_eq!((t.ppa(2), t.crc(6)), (Ppa(7), 6));
        let mut t = t;
        let ids: Vec<_> = (0..5).map(|_| t.alloc(Ppa(1), 0).unwrap()).collect();
        assert!(!ids.contains(&2) && !ids.contains(&6));
        assert!(SharedTable::from_entries(
            10,
            false,
            8,
            [(3, Ppa(1), 1, 0), (3, Ppa(2), 1, 0)].into_iter()
        )
        .is_err());
        assert!(SharedTable::from_entries(4, false, 8, [(4, Ppa(1), 1, 0)].into_iter()).is_err());
    }

    #[test]
    fn checkpointed_entries_are_listed_by_zone_as_one_by_one() {
        // Zones of 8 blocks: runs in zones 0, 1, 0 and 2, with free ids.
        let entries = [
            (0, Ppa(1), 1, 0),
            (1, Ppa(2), 1, 0),
            (3, Ppa(9), 1, 0),
            (4, Ppa(3), 1, 0),
            (5, Ppa(4), 1, 0),
            (7, Ppa(17), 1, 0),
        ];
        let t = SharedTable::from_entries(10, false, 8, entries.into_iter()).unwrap();
        let mut one_by_one = SharedTable::new(10, false, 8);
        for &(id, ppa, ..) in &entries {
            one_by_one.list(ppa, id);
        }
        assert_eq!(t.by_zone, one_by_one.by_zone);
        assert_eq!(t.by_zone[&0], vec![0, 1, 4, 5]);
        for &(id, ppa, ..) in &entries {
            assert_eq!(t.find(ppa), Some(id));
        }
    }
}
