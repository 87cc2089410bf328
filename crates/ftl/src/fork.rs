//! Writable forks of snapshots (docs/design.md, "Views, changed blocks and
//! forks"): the fork table and each fork's record of the blocks it has
//! changed.
//!
//! A fork of snapshot *s* is a writable volume of the volume's size that
//! starts as *s* holds it and never changes *s*. It lives in a region of
//! the map's logical space past the volume (slot *k* covers
//! `[V·(k+1), V·(k+2))`, V the volume's blocks), so its writes, trims, GC
//! and recovery are those of any logical block. A block of the region the
//! fork has not changed since its create reads as *s* holds it: creating a
//! fork copies nothing and builds no map. The fork's *diverged* bits tell
//! the two apart once a trim has unmapped a changed block. The base
//! snapshot cannot be deleted while a fork of it lives.

use crate::addr::{Lba, Seq};
use crate::checkpoint::{LEAF_ENTRIES, MAX_SNAPSHOT_NAME_BYTES};
use crate::history::SnapshotId;

/// A fork's id: handed out in increasing order, never reused.
pub type ForkId = u32;

/// The most forks a volume holds at once (each takes one region of the
/// map's logical space).
pub const MAX_FORKS: usize = 15;

/// The largest logical space the map addresses: 2^42 blocks, and with
/// tags in band (`in_band`) what the zone summaries' u32 LBAs hold.
pub fn max_space_blocks(in_band: bool) -> u64 {
    if in_band {
        u64::from(crate::summary::NO_LBA)
    } else {
        1 << 42
    }
}

/// Fork slots a volume of `volume_blocks` has: [`MAX_FORKS`], fewer when
/// the regions would take the map's logical space past
/// [`max_space_blocks`].
pub fn slot_count(volume_blocks: u64, in_band: bool) -> usize {
    let regions = max_space_blocks(in_band) / volume_blocks.max(1);
    (regions.saturating_sub(1) as usize).min(MAX_FORKS)
}

/// Blocks of the map's logical space for a volume of `volume_blocks`:
/// the volume, then one region of its size per fork slot.
pub fn space_blocks(volume_blocks: u64, in_band: bool) -> u64 {
    volume_blocks * (1 + slot_count(volume_blocks, in_band) as u64)
}

/// Words of diverged bits per leaf of a fork's region.
const LEAF_WORDS: usize = LEAF_ENTRIES / 64;

/// Why a fork cannot be created, used or deleted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ForkError {
    #[error("no fork named {0:?}")]
    NoSuchName(String),
    #[error("no fork with id {0}")]
    NoSuchId(ForkId),
    #[error("a fork named {0:?} exists")]
    NameTaken(String),
    #[error("fork names are 1 to {max} bytes without '@' or '/'; {name:?} given")]
    BadName { name: String, max: usize },
    #[error("the volume holds the most forks it may ({0})")]
    TooMany(usize),
    #[error("snapshot {snapshot:?} is a protection-window point, which the window drops; fork a snapshot")]
    BaseIsPoint { snapshot: String },
    #[error("the metadata log has no room for more of the forks' map; delete a fork")]
    MapFull,
    #[error("only reads, writes, trims, write-zeroes, extents and flushes go to a fork")]
    NotBlockIo,
}

/// One live fork.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fork {
    pub id: ForkId,
    pub name: String,
    /// The snapshot it started from.
    pub base: SnapshotId,
    /// Its region of the map's logical space (0-based).
    pub slot: u32,
    /// Where its block 0 lies in the map's logical space: a request for
    /// block `b` of the fork names `lba_offset + b`.
    pub lba_offset: Lba,
    /// Its size (the volume's).
    pub block_count: u64,
    /// The seq of its create.
    pub create_seq: Seq,
    /// Wall time of the create as the driver gave it (ns since the Unix
    /// epoch; 0 when none was given).
    pub wall_ns: u64,
}

impl Fork {
    /// Whether `lba` (of the map's logical space) lies in its region.
    pub fn holds(&self, lba: Lba) -> bool {
        lba >= self.lba_offset && lba - self.lba_offset < self.block_count
    }
}

/// Checks a name for a new fork: 1 to 63 bytes, no `@` (views of
/// snapshots are named `EXPORT@SNAPSHOT`) and no `/`.
pub fn check_name(name: &str) -> Result<(), ForkError> {
    let bad = name.is_empty()
        || name.len() > MAX_SNAPSHOT_NAME_BYTES
        || name.contains(['@', '/'])
        || name.chars().any(char::is_control);
    if bad {
        return Err(ForkError::BadName {
            name: name.to_string(),
            max: MAX_SNAPSHOT_NAME_BYTES,
        });
    }
    Ok(())
}

/// The diverged bits of one fork's region, in leaves allocated when a bit
/// is first set.
#[derive(Clone, Debug, Default)]
struct Diverged {
    leaves: Vec<Option<Box<[u64; LEAF_WORDS]>>>,
    /// Allocated leaves.
    leaf_count: u64,
}

impl Diverged {
    fn get(&self, block: u64) -> bool {
        let (leaf, word, bit) = split(block);
        self.leaves
            .get(leaf)
            .and_then(Option::as_ref)
            .is_some_and(|l| l[word] >> bit & 1 == 1)
    }

    fn set(&mut self, block: u64) {
        let (leaf, word, bit) = split(block);
        if self.leaves.len() <= leaf {
            self.leaves.resize_with(leaf + 1, || None);
        }
        let l = self.leaves[leaf].get_or_insert_with(|| {
            self.leaf_count += 1;
            Box::new([0; LEAF_WORDS])
        });
        l[word] |= 1 << bit;
    }

    fn iter(&self) -> impl Iterator<Item = (u32, &[u64; LEAF_WORDS])> + '_ {
        let leaves = self.leaves.iter().enumerate();
        leaves.filter_map(|(i, l)| l.as_deref().map(|l| (i as u32, l)))
    }

    fn memory_bytes(&self) -> u64 {
        (self.leaves.len() * 8) as u64 + self.leaf_count * (LEAF_WORDS as u64 * 8)
    }
}

fn split(block: u64) -> (usize, usize, u32) {
    let leaf = (block / LEAF_ENTRIES as u64) as usize;
    let i = (block % LEAF_ENTRIES as u64) as usize;
    (leaf, i / 64, (i % 64) as u32)
}

/// A fork's record in a checkpoint: the fork and its diverged leaves
/// (leaf index within its region, 1024 bits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRecord {
    pub fork: Fork,
    pub diverged: Vec<(u32, [u64; LEAF_WORDS])>,
}

/// The fork table. See the module documentation.
#[derive(Clone, Debug)]
pub struct Forks {
    volume_blocks: u64,
    /// By slot.
    slots: Vec<Option<(Fork, Diverged)>>,
    next_id: ForkId,
}

impl Forks {
    /// No forks, over a volume of `volume_blocks` with `slots` fork slots
    /// ([`slot_count`]).
    pub fn new(volume_blocks: u64, slots: usize) -> Forks {
        Forks {
            volume_blocks,
            slots: vec![None; slots],
            next_id: 0,
        }
    }

    /// The table a checkpoint recorded; `Err` names the rule broken.
    pub fn from_records(
        volume_blocks: u64,
        slots: usize,
        next_id: ForkId,
        records: Vec<ForkRecord>,
    ) -> Result<Forks, String> {
        let mut forks = Forks::new(volume_blocks, slots);
        forks.next_id = next_id;
        for r in records {
            let f = r.fork;
            let slot = f.slot as usize;
            if forks.slots.get(slot).is_none_or(Option::is_some) {
                return Err(format!(
                    "fork {} in slot {slot}: taken, or past the slots",
                    f.id
                ));
            }
            if f.id >= next_id || forks.by_id(f.id).is_some() || forks.by_name(&f.name).is_some() {
                return Err(format!(
                    "fork {} {:?} repeated or not below next id",
                    f.id, f.name
                ));
            }
            check_name(&f.name).map_err(|e| e.to_string())?;
            let mut d = Diverged::default();
            let leaves = volume_blocks.div_ceil(LEAF_ENTRIES as u64);
            for (leaf, words) in r.diverged {
                if u64::from(leaf) >= leaves {
                    return Err(format!(
                        "fork {} diverged leaf {leaf} past its region",
                        f.id
                    ));
                }
                for (w, &word) in words.iter().enumerate() {
                    for bit in 0..64 {
                        let block = u64::from(leaf) * LEAF_ENTRIES as u64 + (w * 64 + bit) as u64;
                        if word >> bit & 1 == 1 && block < volume_blocks {
                            d.set(block);
                        }
                    }
                }
            }
            let fork = forks.fork_in(f.id, f.name, f.base, f.slot, f.create_seq, f.wall_ns);
            forks.slots[slot] = Some((fork, d));
        }
        Ok(forks)
    }

    fn fork_in(
        &self,
        id: ForkId,
        name: String,
        base: SnapshotId,
        slot: u32,
        create_seq: Seq,
        wall_ns: u64,
    ) -> Fork {
        Fork {
            id,
            name,
            base,
            slot,
            lba_offset: self.volume_blocks * (u64::from(slot) + 1),
            block_count: self.volume_blocks,
            create_seq,
            wall_ns,
        }
    }

    /// The volume's size in blocks.
    pub fn volume_blocks(&self) -> u64 {
        self.volume_blocks
    }

    /// The id the next create takes.
    pub fn next_id(&self) -> ForkId {
        self.next_id
    }

    /// The live forks, by slot.
    pub fn iter(&self) -> impl Iterator<Item = &Fork> + '_ {
        self.slots.iter().flatten().map(|(f, _)| f)
    }

    /// Whether no fork lives.
    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    pub fn by_id(&self, id: ForkId) -> Option<&Fork> {
        self.iter().find(|f| f.id == id)
    }

    pub fn by_name(&self, name: &str) -> Option<&Fork> {
        self.iter().find(|f| f.name == name)
    }

    /// A live fork made from `snapshot`.
    pub fn of_base(&self, snapshot: SnapshotId) -> Option<&Fork> {
        self.iter().find(|f| f.base == snapshot)
    }

    /// The fork whose region holds `lba` (of the map's logical space), if
    /// one lives there.
    pub fn at(&self, lba: Lba) -> Option<&Fork> {
        self.entry_at(lba).map(|(f, _)| f)
    }

    fn entry_at(&self, lba: Lba) -> Option<&(Fork, Diverged)> {
        let slot = (lba / self.volume_blocks.max(1)).checked_sub(1)?;
        self.slots.get(slot as usize)?.as_ref()
    }

    /// Whether `[lba, lba + block_count)` lies inside one live fork.
    pub fn holds_range(&self, lba: Lba, block_count: u64) -> bool {
        let end = lba.checked_add(block_count.max(1) - 1);
        self.at(lba)
            .is_some_and(|f| end.is_some_and(|e| f.holds(e)))
    }

    /// Whether a create named `name` may go ahead (the base is checked by
    /// the caller).
    pub fn check_create(&self, name: &str) -> Result<(), ForkError> {
        check_name(name)?;
        if self.by_name(name).is_some() {
            return Err(ForkError::NameTaken(name.to_string()));
        }
        if self.free_slot().is_none() {
            return Err(ForkError::TooMany(self.slots.len()));
        }
        Ok(())
    }

    fn free_slot(&self) -> Option<u32> {
        self.slots
            .iter()
            .position(Option::is_none)
            .map(|s| s as u32)
    }

    /// Creates fork `id` of `base` in the lowest free slot (checked).
    pub fn create(
        &mut self,
        id: ForkId,
        name: &str,
        base: SnapshotId,
        seq: Seq,
        wall_ns: u64,
    ) -> Fork {
        assert!(id >= self.next_id, "fork id {id} reused");
        let slot = self.free_slot().expect("a free slot was checked");
        let fork = self.fork_in(id, name.to_string(), base, slot, seq, wall_ns);
        self.slots[slot as usize] = Some((fork.clone(), Diverged::default()));
        self.next_id = id + 1;
        fork
    }

    /// Drops fork `id`; its region must have been unmapped.
    pub fn delete(&mut self, id: ForkId) -> Result<Fork, ForkError> {
        let slot = self.by_id(id).ok_or(ForkError::NoSuchId(id))?.slot;
        let (fork, _) = self.slots[slot as usize].take().expect("found");
        Ok(fork)
    }

    /// Marks `lba` (in a live fork's region) as changed by the fork.
    pub fn mark(&mut self, lba: Lba) {
        let v = self.volume_blocks.max(1);
        let Some(slot) = (lba / v).checked_sub(1) else {
            return;
        };
        if let Some(Some((_, d))) = self.slots.get_mut(slot as usize) {
            d.set(lba % v);
        }
    }

    /// Whether the fork holding `lba` has changed it since its create.
    pub fn diverged(&self, lba: Lba) -> bool {
        let v = self.volume_blocks.max(1);
        self.entry_at(lba).is_some_and(|(_, d)| d.get(lba % v))
    }

    /// The checkpoint's records of the live forks.
    pub fn records(&self) -> Vec<ForkRecord> {
        let entries = self.slots.iter().flatten();
        entries
            .map(|(f, d)| ForkRecord {
                fork: f.clone(),
                diverged: d.iter().map(|(i, w)| (i, *w)).collect(),
            })
            .collect()
    }

    /// Leaves of diverged bits the forks hold (a checkpoint records each).
    pub fn diverged_leaf_count(&self) -> u64 {
        let leaves = self.slots.iter().flatten();
        leaves.map(|(_, d)| d.leaf_count).sum()
    }

    /// Bytes the diverged bits take.
    pub fn memory_bytes(&self) -> u64 {
        self.slots
            .iter()
            .flatten()
            .map(|(_, d)| d.memory_bytes())
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forks_take_the_lowest_free_slot_and_ids_are_not_reused() {
        let mut forks = Forks::new(5000, MAX_FORKS);
        let a = forks.create(0, "a", 1, 10, 0);
        let b = forks.create(1, "b", 1, 11, 0);
        assert_eq!((a.slot, a.lba_offset), (0, 5000));
        assert_eq!((b.slot, b.lba_offset), (1, 10_000));
        forks.delete(0).unwrap();
        let c = forks.create(forks.next_id(), "c", 2, 12, 0);
        assert_eq!((c.id, c.slot), (2, 0));
        assert_eq!(forks.at(5000).map(|f| f.id), Some(2));
        assert_eq!(forks.at(4999), None);
        assert_eq!(forks.at(15_000), None);
        assert!(forks.holds_range(10_000, 5000));
        assert!(!forks.holds_range(10_000, 5001));
        assert_eq!(forks.delete(7), Err(ForkError::NoSuchId(7)));
    }

    #[test]
    fn diverged_bits_belong_to_their_fork_and_round_trip() {
        let mut forks = Forks::new(3000, MAX_FORKS);
        forks.create(0, "a", 1, 10, 0);
        forks.mark(3000 + 2047);
        forks.mark(100); // the volume's own blocks have none
        assert!(forks.diverged(3000 + 2047));
        assert!(!forks.diverged(3000 + 2046));
        assert!(!forks.diverged(100));
        let again = Forks::from_records(3000, MAX_FORKS, forks.next_id(), forks.records()).unwrap();
        assert!(again.diverged(3000 + 2047));
        assert_eq!(again.records(), forks.records());
    }

    #[test]
    fn big_volumes_have_fewer_slots() {
        assert_eq!(slot_count(1 << 20, false), MAX_FORKS);
        assert_eq!(slot_count(1 << 30, true), 2);
        assert_eq!(slot_count(1 << 31, true), 0);
        assert_eq!(slot_count(1 << 40, false), 3);
        assert_eq!(space_blocks(1 << 30, true), 3 << 30);
    }

    #[test]
    fn names_and_tables_are_checked() {
        let forks = Forks::new(10, MAX_FORKS);
        assert!(forks.check_create("ok-1").is_ok());
        for bad in ["", "a@b", "a/b", &"x".repeat(64)] {
            assert!(matches!(
                forks.check_create(bad),
                Err(ForkError::BadName { .. })
            ));
        }
        let mut full = Forks::new(10, MAX_FORKS);
        for i in 0..MAX_FORKS as u32 {
            full.create(i, &format!("f{i}"), 0, 1, 0);
        }
        assert_eq!(
            full.check_create("one-more"),
            Err(ForkError::TooMany(MAX_FORKS))
        );
        let records = full.records();
        assert!(
            Forks::from_records(10, MAX_FORKS, 3, records).is_err(),
            "ids must be below next_id"
        );
    }
}
