//! The mapping state: which logical block names which physical block, which
//! physical blocks are live, how many live blocks each zone holds, and the
//! shared blocks (docs/design.md, "Shared blocks and range operations").
//!
//! This module owns the L2P, the validity bitmap, the zone live counts and
//! the shared table together, and every change of a mapping is one of its
//! methods: the running FTL and recovery's replay call the same ones, so
//! they cannot disagree on a rule. [`Mapping::is_live`] is the liveness
//! test: a physical block is live while a direct L2P entry or a shared
//! entry names it.
//!
//! An L2P entry holds a map value: below `physical_blocks` the block itself
//! (direct), at `physical_blocks + id` shared entry `id`.

use crate::addr::{Epoch, Lba, Ppa, Seq};
use crate::backend::ZoneId;
use crate::fork::{self, Fork, ForkId, Forks};
use crate::history::{History, SnapshotError, SnapshotId};
use crate::l2p::{leaf_entries, EntryFormat, L2p, Leaf};
use crate::p2l::P2l;
use crate::shared::{SharedId, SharedTable};

/// Where an L2P entry leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// The physical block itself; its tag names this logical block.
    Direct(Ppa),
    /// A shared entry.
    Shared(SharedId),
}

/// A logical block's physical block, data CRC (0 when the format keeps
/// none) and whether it was reached through a shared entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub ppa: Ppa,
    pub crc: u32,
    pub shared: bool,
}

/// Who holds a live physical block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    /// The one logical block whose direct entry names it.
    Direct(Lba),
    /// A shared entry.
    Shared(SharedId),
}

/// The shared table is full: a range operation needs more entries than
/// the map's value space holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the shared-block table is full ({capacity} entries)")]
pub struct SharedFull {
    pub capacity: u32,
}

/// The map format for a device of `physical_blocks` and the shared table's
/// capacity: the values a packed entry of the direct width can hold above
/// `physical_blocks`, or, when that is less than an eighth of the device,
/// one bit more. Never more entries than blocks, and every value below
/// `u32::MAX` (the checkpoint's "unmapped").
pub fn map_format(physical_blocks: u32, keeps_crc: bool) -> (EntryFormat, u32) {
    let direct = EntryFormat::for_device(physical_blocks, keeps_crc);
    let none_at = |bits: u32| {
        if bits >= 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        }
    };
    let spare = |bits: u32| none_at(bits).saturating_sub(physical_blocks);
    let bits = direct.address_bits();
    let wide = if spare(bits) >= physical_blocks / 8 || bits >= 32 {
        bits
    } else {
        bits + 1
    };
    let capacity = spare(wide).min(physical_blocks);
    let format = EntryFormat::for_device(physical_blocks + capacity, keeps_crc);
    assert!(format.address_bits() <= wide.max(bits));
    (format, capacity)
}

/// The mapping state. See the module documentation.
#[derive(Clone, Debug)]
pub struct Mapping {
    l2p: L2p,
    p2l: P2l,
    shared: SharedTable,
    /// Live blocks per zone.
    zone_valid: Vec<u32>,
    /// Sum of `zone_valid`.
    live_blocks: u64,
    /// Live blocks of the physical segment (nameless writes): no entry
    /// names them, their validity bit is the record.
    nameless_blocks: u64,
    physical_blocks: u32,
    zone_capacity_blocks: u64,
    /// Snapshots and the replaced versions they keep (each kept block
    /// holds one reference to a shared entry).
    history: History,
    /// The volume's size: the map's logical space past it holds the forks.
    volume_blocks: u64,
    /// Writable forks of snapshots, each in a region past the volume.
    forks: Forks,
}

impl Mapping {
    /// An empty mapping of `logical_blocks` over a device of `zone_count`
    /// zones of `zone_capacity_blocks`; `keeps_crc`: tags in band, so the
    /// map keeps each block's data CRC.
    pub fn new(
        logical_blocks: u64,
        zone_count: u32,
        zone_capacity_blocks: u64,
        keeps_crc: bool,
    ) -> Mapping {
        let physical = physical_of(zone_count, zone_capacity_blocks);
        let (format, capacity) = map_format(physical, keeps_crc);
        let slots = fork::slot_count(logical_blocks, keeps_crc);
        let space = fork::space_blocks(logical_blocks, keeps_crc);
        Mapping {
            l2p: L2p::sparse(space, logical_blocks, format),
            p2l: P2l::new(physical),
            shared: SharedTable::new(capacity, keeps_crc, zone_capacity_blocks),
            zone_valid: vec![0; zone_count as usize],
            live_blocks: 0,
            nameless_blocks: 0,
            physical_blocks: physical,
            zone_capacity_blocks,
            history: History::new(u64::from(capacity), 1),
            volume_blocks: logical_blocks,
            forks: Forks::new(logical_blocks, slots),
        }
    }

    /// Rebuilds the mapping from a checkpoint's leaves (map values), data
    /// CRCs (in band), shared entries `(id, block, refs, crc)` and history
    /// (built by `history`, given the bound on its entries); every
    /// reference count and liveness claim is checked against the leaves and
    /// the history, and every block mapped past the volume lies in a live
    /// fork of `forks` (built by `forks`, given the volume's fork slots).
    #[allow(clippy::too_many_arguments)]
    pub fn from_checkpoint(
        logical_blocks: u64,
        zone_count: u32,
        zone_capacity_blocks: u64,
        keeps_crc: bool,
        leaves: &[(u32, Box<Leaf>)],
        crcs: &[u32],
        shared: &[(SharedId, Ppa, u32, u32)],
        history: impl FnOnce(u64) -> Result<History, String>,
        forks: impl FnOnce(usize) -> Result<Forks, String>,
    ) -> Result<Mapping, String> {
        let mut m = Mapping::new(logical_blocks, zone_count, zone_capacity_blocks, keeps_crc);
        m.history = history(u64::from(m.shared.capacity()))?;
        let forks = forks(fork::slot_count(logical_blocks, keeps_crc))?;
        for f in forks.iter() {
            if m.history.by_id(f.base).is_none() {
                return Err(format!(
                    "fork {:?} of snapshot {}, which does not exist",
                    f.name, f.base
                ));
            }
        }
        m.forks = forks;
        let format = m.l2p.format();
        let space = m.l2p.logical_blocks();
        m.l2p = L2p::from_leaves_sparse(space, logical_blocks, format, leaves, crcs)
            .map_err(|e| e.to_string())?;
        if let Some(lba) = m.outside_forks() {
            return Err(format!(
                "block {lba} is mapped past the volume, outside every fork"
            ));
        }
        let capacity = m.shared.capacity();
        m.shared = SharedTable::from_entries(
            capacity,
            keeps_crc,
            zone_capacity_blocks,
            shared.iter().copied(),
        )?;
        for &(id, ppa, _, _) in shared {
            if ppa.0 >= m.physical_blocks {
                return Err(format!(
                    "shared entry {id} names block {}, past the device",
                    ppa.0
                ));
            }
            m.take_checked(ppa)
                .map_err(|_| format!("two shared entries name block {}", ppa.0))?;
        }
        // The liveness claims come from the unpacked leaves the checkpoint
        // decoded, not from the packed map: one plain load per entry.
        // References are counted by id: `from_entries` took the ids in
        // increasing order below the table's capacity, and a live id is
        // one of them.
        let ids = shared.last().map_or(0, |&(id, ..)| id as usize + 1);
        let mut counted = vec![0u32; ids];
        for (lba, raw) in leaf_entries(leaves) {
            match m.target_of(Ppa(raw)) {
                Target::Direct(ppa) => m.take_checked(ppa).map_err(|_| {
                    format!(
                        "block {lba} maps to block {}, which another entry holds",
                        ppa.0
                    )
                })?,
                Target::Shared(id) if m.shared.is_live(id) => counted[id as usize] += 1,
                Target::Shared(id) => {
                    return Err(format!(
                        "block {lba} names shared entry {id}, which does not exist"
                    ))
                }
            }
        }
        for (lba, seq, v) in m.history.entries() {
            match v.value {
                Some(id) if m.shared.is_live(id) => {
                    counted[id as usize] += 1;
                    m.shared.add_kept(id);
                }
                Some(id) => {
                    return Err(format!(
                        "the version of block {lba} replaced at seq {seq} names shared entry {id}, which does not exist"
                    ))
                }
                None => {}
            }
        }
        for &(id, _, refs, _) in shared {
            let held = counted[id as usize];
            if held != refs {
                return Err(format!(
                    "shared entry {id} records {refs} references, the map holds {held}"
                ));
            }
        }
        Ok(m)
    }

    // ----- lookups ------------------------------------------------------

    /// Size of the volume, in blocks.
    pub fn logical_blocks(&self) -> u64 {
        self.volume_blocks
    }

    /// Size of the map's logical space, in blocks: the volume, then the
    /// fork regions.
    pub fn space_blocks(&self) -> u64 {
        self.l2p.logical_blocks()
    }

    /// The first block mapped past the volume outside every live fork.
    fn outside_forks(&self) -> Option<Lba> {
        let space = self.space_blocks();
        let mut at = self.volume_blocks;
        while let Some(lba) = self.l2p.next_mapped_before(at, space) {
            match self.forks.at(lba) {
                None => return Some(lba),
                Some(f) => at = f.lba_offset + f.block_count,
            }
        }
        None
    }

    /// Physical blocks of the device.
    pub fn physical_blocks(&self) -> u32 {
        self.physical_blocks
    }

    fn target_of(&self, value: Ppa) -> Target {
        if value.0 < self.physical_blocks {
            Target::Direct(value)
        } else {
            Target::Shared(value.0 - self.physical_blocks)
        }
    }

    fn shared_value(&self, id: SharedId) -> Ppa {
        Ppa(self.physical_blocks + id)
    }

    /// Where `lba`'s entry leads, if it is mapped.
    pub fn target(&self, lba: Lba) -> Option<Target> {
        self.l2p.get(lba).map(|v| self.target_of(v))
    }

    /// `lba`'s physical block, data CRC and how it is reached.
    #[inline]
    pub fn resolve(&self, lba: Lba) -> Option<Resolved> {
        let (value, crc) = self.l2p.get_with_crc(lba)?;
        Some(match self.target_of(value) {
            Target::Direct(ppa) => Resolved {
                ppa,
                crc,
                shared: false,
            },
            Target::Shared(id) => Resolved {
                ppa: self.shared.ppa(id),
                crc,
                shared: true,
            },
        })
    }

    /// `lba`'s physical block, if mapped.
    pub fn get(&self, lba: Lba) -> Option<Ppa> {
        self.resolve(lba).map(|r| r.ppa)
    }

    /// Where `lba`'s block is, and whether a write to `lba` takes a
    /// physical block without freeing one: it is unmapped, or shares its
    /// block with other owners.
    #[inline]
    pub fn write_facts(&self, lba: Lba) -> (Option<Ppa>, bool) {
        let (at, takes) = match self.target(lba) {
            None => (None, true),
            Some(Target::Direct(ppa)) => (Some(ppa), false),
            Some(Target::Shared(id)) => (Some(self.shared.ppa(id)), self.shared.refs(id) > 1),
        };
        // Without a snapshot nothing is kept: no call, no second lookup.
        let kept = self.history.keeps_versions() && self.keeps_on_change(lba);
        (at, takes || kept)
    }

    /// The first mapped LBA in `from..end` (unmapped leaves are skipped
    /// whole).
    pub fn next_mapped(&self, from: Lba, end: Lba) -> Option<Lba> {
        self.l2p.next_mapped_before(from, end)
    }

    /// Whether a live mapping names `ppa`: the one liveness test.
    pub fn is_live(&self, ppa: Ppa) -> bool {
        self.p2l.is_valid(ppa)
    }

    /// Live blocks in `zone`.
    pub fn valid_blocks(&self, zone: ZoneId) -> u64 {
        u64::from(self.zone_valid[zone as usize])
    }

    /// Live physical blocks on the device.
    pub fn live_blocks(&self) -> u64 {
        self.live_blocks
    }

    /// Live blocks of the physical segment (nameless writes).
    pub fn nameless_blocks(&self) -> u64 {
        self.nameless_blocks
    }

    /// A nameless block at `ppa` became live (its write completed, or
    /// replay met it); `false`, nothing changed, when something already
    /// holds the block (recovery reports damage).
    pub fn nameless_set(&mut self, ppa: Ppa) -> bool {
        assert!(ppa.0 < self.physical_blocks, "{ppa:?} past the device");
        if self.take_checked(ppa).is_err() {
            return false;
        }
        self.nameless_blocks += 1;
        true
    }

    /// Validity of blocks `0..end_blocks` of `zone`, 64 to a word (bit
    /// `i` of word `j`: offset `64 j + i`): a nameless zone's record.
    pub fn zone_bitmap(&self, zone: ZoneId, end_blocks: u64) -> Vec<u64> {
        let mut words = vec![0u64; end_blocks.div_ceil(64) as usize];
        for off in 0..end_blocks {
            if self
                .p2l
                .is_valid(Ppa::new(zone, off, self.zone_capacity_blocks))
            {
                words[(off / 64) as usize] |= 1 << (off % 64);
            }
        }
        words
    }

    /// The nameless block at `ppa` was freed or overwritten; whether it
    /// was live. The caller knows `ppa` lies in a nameless zone, where no
    /// entry names a block.
    pub fn nameless_clear(&mut self, ppa: Ppa) -> bool {
        if ppa.0 >= self.physical_blocks || !self.p2l.is_valid(ppa) {
            return false;
        }
        self.release_block(ppa);
        self.nameless_blocks -= 1;
        true
    }

    /// Mapped logical blocks.
    pub fn mapped_blocks(&self) -> u64 {
        self.l2p.mapped_blocks()
    }

    /// Physical blocks reached through the shared table.
    pub fn shared_blocks(&self) -> u64 {
        u64::from(self.shared.live())
    }

    /// Logical blocks that name a shared block.
    pub fn shared_refs(&self) -> u64 {
        self.shared.total_refs()
    }

    /// Shared entries a range operation may still create.
    pub fn shared_free(&self) -> u32 {
        self.shared.free()
    }

    /// The shared table's bound.
    pub fn shared_capacity(&self) -> u32 {
        self.shared.capacity()
    }

    /// The shared entry `id`: its block, reference count and data CRC.
    pub fn shared_entry(&self, id: SharedId) -> Option<(Ppa, u32, u32)> {
        self.shared.is_live(id).then(|| {
            (
                self.shared.ppa(id),
                self.shared.refs(id),
                self.shared.crc(id),
            )
        })
    }

    /// Who holds live block `ppa`: the direct owner `hint` (the LBA its tag
    /// or summary names) if its entry names the block, else a shared entry.
    pub fn owner(&self, ppa: Ppa, hint: Option<Lba>) -> Option<Owner> {
        let hinted = hint.filter(|&l| l < self.space_blocks());
        if let Some(lba) = hinted {
            if self.target(lba) == Some(Target::Direct(ppa)) {
                return Some(Owner::Direct(lba));
            }
        }
        self.shared.find(ppa).map(Owner::Shared)
    }

    /// Who holds live block `ppa`, in words (for reports): O(mapped blocks)
    /// when a direct entry holds it.
    pub fn owner_of_live(&self, ppa: Ppa) -> String {
        if let Some(id) = self.shared.find(ppa) {
            return format!("shared entry {id} (block {})", ppa.0);
        }
        match self.iter().find(|&(_, t)| t == Target::Direct(ppa)) {
            Some((lba, _)) => format!("block {lba}"),
            None => format!("physical block {}", ppa.0),
        }
    }

    /// The shared entries whose blocks lie in `zone`, by offset (`u32::MAX`
    /// where none): what a GC job of that zone consults.
    pub fn zone_shared(&mut self, zone: ZoneId) -> Box<[SharedId]> {
        self.shared.zone_entries(zone)
    }

    /// Every mapped `(lba, target)`, in LBA order.
    pub fn iter(&self) -> impl Iterator<Item = (Lba, Target)> + '_ {
        self.l2p.iter().map(|(l, v)| (l, self.target_of(v)))
    }

    /// Every mapped `(lba, resolved)`, in LBA order.
    pub fn iter_resolved(&self) -> impl Iterator<Item = (Lba, Resolved)> + '_ {
        self.l2p
            .iter()
            .map(|(l, _)| (l, self.resolve(l).expect("mapped")))
    }

    /// Every live shared entry `(id, block, refs, crc)`, by id.
    pub fn shared_entries(&self) -> impl Iterator<Item = (SharedId, Ppa, u32, u32)> + '_ {
        self.shared.entries()
    }

    /// Every live physical block, in address order.
    pub fn live(&self) -> impl Iterator<Item = Ppa> + '_ {
        self.p2l.live()
    }

    /// The leaves as a checkpoint stores them (map values).
    pub fn leaves(&self) -> impl Iterator<Item = (u32, Box<Leaf>)> + '_ {
        self.l2p.leaves()
    }

    /// The data CRC of every mapped entry in LBA order (in band).
    pub fn crcs(&self) -> impl Iterator<Item = u32> + '_ {
        self.l2p.iter_with_crc().map(|(.., crc)| crc)
    }

    /// Bytes the mapping holds: L2P, validity bitmap, shared table, counts.
    pub fn memory_bytes(&self) -> u64 {
        self.l2p.memory_bytes()
            + self.p2l.memory_bytes()
            + self.shared.memory_bytes()
            + self.history.memory_bytes()
            + self.forks.memory_bytes()
            + 4 * self.zone_valid.capacity() as u64
    }

    /// Bytes of the shared table alone.
    pub fn shared_memory_bytes(&self) -> u64 {
        self.shared.memory_bytes()
    }

    /// The snapshot books.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// The writable forks.
    pub fn forks(&self) -> &Forks {
        &self.forks
    }

    /// Map leaves the forks' regions hold.
    pub fn fork_leaf_count(&self) -> u64 {
        u64::from(self.l2p.far_leaf_count())
    }

    /// Whether mapping `lba` (in a fork's region) would take a new map leaf.
    pub fn takes_leaf(&self, lba: Lba) -> bool {
        !self.l2p.has_leaf(lba)
    }

    /// `lba` of the map's logical space as a live read sees it: in a fork's
    /// region, a block the fork has not changed reads as its base snapshot
    /// holds it.
    pub fn resolve_live(&self, lba: Lba) -> Option<Resolved> {
        if lba < self.volume_blocks {
            return self.resolve(lba);
        }
        let own = self.resolve(lba);
        if own.is_some() || self.forks.diverged(lba) {
            return own;
        }
        let fork = self.forks.at(lba)?;
        let base = self.history.by_id(fork.base).expect("a fork's base lives");
        let resolved = self.resolve_at(lba - fork.lba_offset, base.create_seq, base.epoch)?;
        // Its tag names the volume's block, not this one.
        Some(Resolved {
            shared: true,
            ..resolved
        })
    }

    /// Creates fork `id` named `name` of snapshot `base` by the change of
    /// seq `seq` (checked by the caller): O(1), nothing is copied.
    pub fn fork_create(
        &mut self,
        id: ForkId,
        name: &str,
        base: SnapshotId,
        seq: Seq,
        wall_ns: u64,
    ) -> Fork {
        assert!(
            self.history.by_id(base).is_some(),
            "fork of a snapshot that is gone"
        );
        self.forks.create(id, name, base, seq, wall_ns)
    }

    /// Deletes fork `id`: unmaps its region (its blocks come back through
    /// GC); returns the blocks unmapped. Costs the blocks it mapped.
    pub fn fork_delete(&mut self, id: ForkId) -> Result<u64, crate::fork::ForkError> {
        let fork = self
            .forks
            .by_id(id)
            .ok_or(crate::fork::ForkError::NoSuchId(id))?;
        let (start, end) = (fork.lba_offset, fork.lba_offset + fork.block_count);
        let mut unmapped = 0;
        let mut at = start;
        while let Some(lba) = self.l2p.next_mapped_before(at, end) {
            self.forget(lba);
            unmapped += 1;
            at = lba + 1;
        }
        self.forks.delete(id)?;
        Ok(unmapped)
    }

    /// `lba` as the snapshot of create seq `create_seq` and epoch `epoch`
    /// saw it: its block, CRC and whether it is reached through a shared
    /// entry (a kept version always is).
    pub fn resolve_at(&self, lba: Lba, create_seq: Seq, epoch: Epoch) -> Option<Resolved> {
        match self.history.version_at(lba, create_seq, epoch) {
            None => self.resolve(lba),
            Some(None) => None,
            Some(Some(id)) => Some(Resolved {
                ppa: self.shared.ppa(id),
                crc: self.shared.crc(id),
                shared: true,
            }),
        }
    }

    /// The blocks of `[start, end)` whose contents differ between the
    /// snapshot `older` (create seq, epoch) and `newer` (a later snapshot,
    /// or `None`: the live map), in lba order. Costs what
    /// [`History::changed_candidates`] costs, not the range.
    pub fn changed(
        &self,
        start: Lba,
        end: Lba,
        older: (Seq, Epoch),
        newer: Option<(Seq, Epoch)>,
    ) -> Vec<Lba> {
        let block_at = |lba, point: Option<(Seq, Epoch)>| {
            let resolved = match point {
                Some((seq, epoch)) => self.resolve_at(lba, seq, epoch),
                None => self.resolve(lba),
            };
            resolved.map(|r| r.ppa)
        };
        let mut candidates = self
            .history
            .changed_candidates(start, end, older.0, older.1);
        candidates.retain(|&lba| block_at(lba, Some(older)) != block_at(lba, newer));
        candidates
    }

    /// Whether replacing `lba`'s contents now keeps its version (a live
    /// snapshot holds it): the change then frees nothing and takes a
    /// history entry, and a direct block a shared entry.
    pub fn keeps_on_change(&self, lba: Lba) -> bool {
        self.history.keeps_versions()
            && lba < self.volume_blocks
            && self.l2p.get(lba).is_some()
            && self.history.needed(self.history.birth(lba), Seq::MAX)
    }

    /// Whether the block of shared entry `id` is held only by kept
    /// versions: no live block names it.
    pub fn kept_only(&self, id: SharedId) -> bool {
        self.shared.kept_only(id)
    }

    /// Blocks only the snapshots hold (no live block names them): the
    /// space deleting every snapshot would give back. O(shared entries).
    pub fn retained_blocks(&self) -> u64 {
        let ids = self.shared_entries().map(|(id, ..)| id);
        ids.filter(|&id| self.kept_only(id)).count() as u64
    }

    /// History entries and shared entries a change may still take.
    pub fn history_room(&self) -> u64 {
        self.history.room().min(u64::from(self.shared.free()))
    }

    // ----- changes --------------------------------------------------------

    fn take_block(&mut self, ppa: Ppa) {
        assert!(!self.p2l.is_valid(ppa), "block {} taken twice", ppa.0);
        self.p2l.set(ppa);
        self.zone_valid[ppa.zone(self.zone_capacity_blocks) as usize] += 1;
        self.live_blocks += 1;
    }

    fn take_checked(&mut self, ppa: Ppa) -> Result<(), ()> {
        if self.p2l.is_valid(ppa) {
            return Err(());
        }
        self.take_block(ppa);
        Ok(())
    }

    fn release_block(&mut self, ppa: Ppa) {
        assert!(self.p2l.is_valid(ppa), "block {} released twice", ppa.0);
        self.p2l.clear(ppa);
        self.zone_valid[ppa.zone(self.zone_capacity_blocks) as usize] -= 1;
        self.live_blocks -= 1;
    }

    /// Drops what an L2P entry held: its block, or a reference.
    fn release_value(&mut self, value: Ppa) {
        match self.target_of(value) {
            Target::Direct(ppa) => self.release_block(ppa),
            Target::Shared(id) => {
                if let Some(ppa) = self.shared.drop_ref(id) {
                    self.release_block(ppa);
                }
            }
        }
    }

    /// The change of seq `seq` replaced `lba`'s contents, which were
    /// `old` (a map value and its CRC, or unmapped): keeps that version if a snapshot needs
    /// it, else drops what it held. The one place a version ends.
    #[inline]
    fn retire(&mut self, lba: Lba, old: Option<(Ppa, u32)>, seq: Seq) {
        if lba >= self.volume_blocks {
            self.retire_forked(lba, old);
            return;
        }
        if !self.history.keeps_versions() {
            // No snapshot: nothing is kept (the write path without
            // snapshots costs no birth lookup, and no call: this part is
            // inlined into the write path).
            if let Some((raw, _)) = old {
                self.release_value(raw);
            }
            self.history.born(lba);
            return;
        }
        self.retire_kept(lba, old, seq);
    }

    /// [`Self::retire`] in a fork's region: no snapshot keeps its versions,
    /// and the block no longer reads as the fork's base holds it.
    #[cold]
    fn retire_forked(&mut self, lba: Lba, old: Option<(Ppa, u32)>) {
        if let Some((raw, _)) = old {
            self.release_value(raw);
        }
        self.forks.mark(lba);
    }

    /// [`Self::retire`] while a snapshot is live.
    #[inline(never)]
    fn retire_kept(&mut self, lba: Lba, old: Option<(Ppa, u32)>, seq: Seq) {
        let birth = self.history.birth(lba);
        // An unmapped version is never kept: `History::version_at` tells
        // it from the births.
        if let Some((raw, crc)) = old {
            if self.history.needed(birth, seq) {
                let id = match self.target_of(raw) {
                    // The history holds the L2P entry's reference now.
                    Target::Shared(id) => id,
                    Target::Direct(ppa) => {
                        let capacity = self.shared.capacity();
                        self.shared.alloc(ppa, crc).unwrap_or_else(|| {
                            panic!("shared table full ({capacity}) keeping a version")
                        })
                    }
                };
                self.shared.add_kept(id);
                self.history.keep(lba, seq, Some(id), birth);
            } else {
                self.release_value(raw);
            }
        }
        self.history.born(lba);
    }

    /// Maps `lba` straight to block `ppa` (a host write, a tag or note in
    /// replay) by the change of seq `seq`, retiring what it held. `ppa`
    /// must not be live under another entry (`Err` then, nothing changed:
    /// recovery reports damage).
    pub fn map_direct(&mut self, lba: Lba, ppa: Ppa, crc: u32, seq: Seq) -> Result<(), Owner> {
        assert!(ppa.0 < self.physical_blocks, "{ppa:?} past the device");
        if self.p2l.is_valid(ppa) {
            // A live block: only `lba`'s own entry may name it again.
            if self.target(lba) == Some(Target::Direct(ppa)) {
                self.l2p.set(lba, ppa, crc);
                return Ok(());
            }
            return Err(self.owner(ppa, None).unwrap_or(Owner::Direct(u64::MAX)));
        }
        // No entry names a block that is not live: the entry changes (one
        // lookup of it, the old value and CRC read as the new one goes in).
        let old = self.l2p.replace(lba, ppa, crc);
        self.retire(lba, old, seq);
        self.take_block(ppa);
        Ok(())
    }

    /// Unmaps `lba` by the change of seq `seq`; whether it was mapped.
    pub fn unmap(&mut self, lba: Lba, seq: Seq) -> bool {
        let old = self.l2p.get_with_crc(lba);
        if old.is_none() {
            if lba >= self.volume_blocks {
                // A fork's trim hides its base's block.
                self.forks.mark(lba);
            }
            return false;
        }
        self.l2p.unmap(lba);
        self.retire(lba, old, seq);
        true
    }

    /// Unmaps `lba` without a change of contents: recovery dropping a
    /// mapping that is stale, or data that does not outlive a crash.
    pub fn forget(&mut self, lba: Lba) -> bool {
        match self.l2p.unmap(lba) {
            Some(old) => {
                self.release_value(old);
                true
            }
            None => false,
        }
    }

    /// GC moved `lba`'s block from `from` to `to`: applies only while its
    /// direct entry still names `from` (a racing change wins).
    pub fn relocate_direct(&mut self, lba: Lba, from: Ppa, to: Ppa, crc: u32) -> bool {
        if self.target(lba) != Some(Target::Direct(from)) {
            return false;
        }
        self.l2p.set(lba, to, crc);
        self.release_block(from);
        self.take_block(to);
        true
    }

    /// GC moved shared entry `id`'s block from `from` to `to`: applies only
    /// while the entry still holds `from`.
    pub fn relocate_shared(&mut self, id: SharedId, from: Ppa, to: Ppa) -> bool {
        if !self.shared.is_live(id) || self.shared.ppa(id) != from {
            return false;
        }
        self.shared.relocate(id, to);
        self.release_block(from);
        self.take_block(to);
        true
    }

    /// The shared entry that holds `ppa`, if one does.
    pub fn find_shared(&self, ppa: Ppa) -> Option<SharedId> {
        self.shared.find(ppa)
    }

    /// Whether making `lba`'s block shared takes a new shared entry (its
    /// entry is direct).
    pub fn needs_entry(&self, lba: Lba) -> bool {
        matches!(self.target(lba), Some(Target::Direct(_)))
    }

    /// `lba`'s block as a shared entry (creating one from a direct entry),
    /// with its CRC; `None` when unmapped.
    fn share(&mut self, lba: Lba) -> Result<Option<(SharedId, u32)>, SharedFull> {
        let Some((value, crc)) = self.l2p.get_with_crc(lba) else {
            return Ok(None);
        };
        let id = match self.target_of(value) {
            Target::Shared(id) => id,
            Target::Direct(ppa) => {
                let capacity = self.shared.capacity();
                let id = self.shared.alloc(ppa, crc).ok_or(SharedFull { capacity })?;
                self.l2p.set(lba, self.shared_value(id), crc);
                id
            }
        };
        Ok(Some((id, crc)))
    }

    /// Points `lba` at shared entry `id` by the change of seq `seq`,
    /// retiring what it held.
    fn point_at(&mut self, lba: Lba, id: SharedId, crc: u32, seq: Seq) {
        let value = self.shared_value(id);
        if self.l2p.get(lba) == Some(value) {
            return;
        }
        let old = self.l2p.replace(lba, value, crc);
        self.shared.add_ref(id);
        self.retire(lba, old, seq);
    }

    /// `dst` names what `src` names (unmapped if `src` is), by the change
    /// of seq `seq`.
    pub fn clone_block(&mut self, src: Lba, dst: Lba, seq: Seq) -> Result<(), SharedFull> {
        assert_ne!(src, dst, "clone of a block onto itself");
        match self.share(src)? {
            Some((id, crc)) => self.point_at(dst, id, crc, seq),
            None => {
                self.unmap(dst, seq);
            }
        }
        Ok(())
    }

    /// `dst` names what `src` named, and `src` is unmapped, by the change
    /// of seq `seq`.
    pub fn move_block(&mut self, src: Lba, dst: Lba, seq: Seq) -> Result<(), SharedFull> {
        self.clone_block(src, dst, seq)?;
        self.unmap(src, seq);
        Ok(())
    }

    /// Makes the live map what the snapshot of create seq `create_seq` and
    /// epoch `epoch` holds, by the change of seq `seq`; returns the blocks
    /// changed. No data moves: each block takes the snapshot's version (a
    /// kept shared entry) or is unmapped, and the version it replaces is
    /// retired like any other (kept when a snapshot needs it). Costs what
    /// [`Self::changed`] costs. `Err(blocks)`, nothing changed, when the
    /// history has no room to keep every version replaced.
    pub fn revert_to(&mut self, create_seq: Seq, epoch: Epoch, seq: Seq) -> Result<u64, u64> {
        let end = self.logical_blocks();
        let changed = self.changed(0, end, (create_seq, epoch), None);
        if changed.len() as u64 > self.history_room() {
            return Err(changed.len() as u64);
        }
        for &lba in &changed {
            match self.history.version_at(lba, create_seq, epoch) {
                Some(None) => {
                    self.unmap(lba, seq);
                }
                Some(Some(id)) => {
                    let crc = self.shared.crc(id);
                    self.point_at(lba, id, crc, seq);
                }
                None => unreachable!("block {lba} changed but holds the snapshot's version"),
            }
        }
        Ok(changed.len() as u64)
    }

    /// Takes snapshot `id` named `name` by the change of seq `seq`: O(1),
    /// it only closes the epoch.
    pub fn snapshot_create(&mut self, id: SnapshotId, name: &str, seq: Seq, wall_ns: u64) {
        self.history.create(id, name, seq, wall_ns);
    }

    /// Drops snapshot `id` by the change of seq `seq`; what it alone kept
    /// is released by [`Self::sweep_step`].
    pub fn snapshot_delete(&mut self, id: SnapshotId, seq: Seq) -> Result<(), SnapshotError> {
        self.check_snapshot_delete(id)?;
        self.history.delete(id, seq)
    }

    /// Whether snapshot `id` may be deleted: it lives and no fork is made
    /// from it.
    pub fn check_snapshot_delete(&self, id: SnapshotId) -> Result<(), SnapshotError> {
        let snapshot = self.history.by_id(id).ok_or(SnapshotError::NoSuchId(id))?;
        match self.forks.of_base(id) {
            Some(f) => Err(SnapshotError::HasForks {
                snapshot: snapshot.name.clone(),
                fork: f.name.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Releases up to `budget` kept versions no live snapshot needs any
    /// more; returns how many were released.
    pub fn sweep_step(&mut self, budget: &mut u64) -> u64 {
        let freed = self.history.sweep_step(budget);
        self.release_kept(freed)
    }

    /// Runs every pending sweep at once (replay).
    pub fn sweep_all(&mut self) -> u64 {
        let freed = self.history.sweep_all();
        self.release_kept(freed)
    }

    fn release_kept(&mut self, freed: Vec<Option<SharedId>>) -> u64 {
        let n = freed.len() as u64;
        for id in freed.into_iter().flatten() {
            self.shared.drop_kept(id);
            self.release_value(self.shared_value(id));
        }
        n
    }

    /// Zone `zone` was reset: nothing in it may still be live.
    pub fn zone_reset(&mut self, zone: ZoneId) {
        assert_eq!(
            self.zone_valid[zone as usize], 0,
            "zone {zone} reset with live data"
        );
        self.p2l.clear_zone(zone, self.zone_capacity_blocks);
        self.shared.forget_zone(zone);
    }

    /// The direct entries that name blocks of `zone`, as `(lba, block)`:
    /// O(mapped blocks), for recovery's stale-mapping rule and GC's walk of
    /// a zone without a usable summary.
    pub fn direct_in_zone(&self, zone: ZoneId) -> impl Iterator<Item = (Lba, Ppa)> + '_ {
        let cap = self.zone_capacity_blocks;
        self.l2p
            .iter()
            .filter_map(move |(l, v)| match self.target_of(v) {
                Target::Direct(p) if p.zone(cap) == zone => Some((l, p)),
                _ => None,
            })
    }

    /// Checks the counts against the map (tests, and after a rebuild).
    pub fn assert_consistent(&self) {
        assert_eq!(
            self.outside_forks(),
            None,
            "a block mapped outside the forks"
        );
        for f in self.forks.iter() {
            assert!(
                self.history.by_id(f.base).is_some(),
                "fork {} lost its base",
                f.id
            );
        }
        let mut valid = vec![0u32; self.zone_valid.len()];
        let mut live = 0u64;
        for ppa in self.p2l.live() {
            valid[ppa.zone(self.zone_capacity_blocks) as usize] += 1;
            live += 1;
        }
        assert_eq!(valid, self.zone_valid, "zone live counts out of step");
        assert_eq!(live, self.live_blocks, "live block count out of step");
        let direct = self
            .iter()
            .filter(|(_, t)| matches!(t, Target::Direct(_)))
            .count() as u64;
        assert_eq!(
            direct + self.shared_blocks() + self.nameless_blocks,
            live,
            "live blocks are not the direct entries, shared entries and nameless blocks"
        );
        let mut refs: std::collections::HashMap<SharedId, u32> = Default::default();
        for (_, t) in self.iter() {
            if let Target::Shared(id) = t {
                *refs.entry(id).or_default() += 1;
            }
        }
        let mut kept: std::collections::HashMap<SharedId, u32> = Default::default();
        for (_, _, v) in self.history.entries() {
            if let Some(id) = v.value {
                *refs.entry(id).or_default() += 1;
                *kept.entry(id).or_default() += 1;
            }
        }
        for (id, _, n, _) in self.shared_entries() {
            let refs = refs.get(&id).copied().unwrap_or(0);
            assert_eq!(refs, n, "shared entry {id}'s count");
            let kept = kept.get(&id).copied().unwrap_or(0);
            assert_eq!(
                self.kept_only(id),
                kept != 0 && kept == n && kept < u32::from(u16::MAX),
                "shared entry {id}: {kept} of {n} references kept"
            );
        }
    }
}

fn physical_of(zone_count: u32, zone_capacity_blocks: u64) -> u32 {
    let total = u64::from(zone_count) * zone_capacity_blocks;
    u32::try_from(total)
        .ok()
        .filter(|&n| n < u32::MAX)
        .expect("device above 2^32 - 1 blocks (refused at format)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_history(capacity: u64) -> Result<History, String> {
        Ok(History::new(capacity, 1))
    }

    fn no_forks(slots: usize) -> Result<Forks, String> {
        Ok(Forks::new(3000, slots))
    }

    fn mapping() -> Mapping {
        // 4 zones of 8 blocks.
        Mapping::new(64, 4, 8, false)
    }

    #[test]
    fn formats_keep_the_direct_width_when_they_can() {
        // 2^18 blocks: 19 bits hold 2^18 - 1 spare values, enough.
        let (f, cap) = map_format(1 << 18, false);
        assert_eq!(f.width_bits(), 19);
        assert_eq!(cap, (1 << 18) - 1);
        // 2^18 - 1 blocks: no spare value in 18 bits: one more bit.
        let (f, cap) = map_format((1 << 18) - 1, false);
        assert_eq!(f.width_bits(), 19);
        assert_eq!(cap, (1 << 18) - 1);
        // Near 2^32 the value space is what is left below u32::MAX.
        let (_, cap) = map_format(u32::MAX - 10, false);
        assert_eq!(cap, 10);
    }

    #[test]
    fn clone_shares_one_block_and_overwrites_break_it() {
        let mut m = mapping();
        m.map_direct(10, Ppa(3), 0, 1).unwrap();
        m.clone_block(10, 40, 1).unwrap();
        assert_eq!(m.get(10), Some(Ppa(3)));
        assert_eq!(m.get(40), Some(Ppa(3)));
        assert!(m.resolve(40).unwrap().shared);
        assert_eq!(
            (m.live_blocks(), m.shared_blocks(), m.shared_refs()),
            (1, 1, 2)
        );
        m.clone_block(40, 41, 1).unwrap();
        assert_eq!(m.shared_refs(), 3);
        // A write to one owner breaks sharing for that block only.
        m.map_direct(40, Ppa(9), 0, 1).unwrap();
        assert_eq!(
            (m.get(40), m.get(41), m.get(10)),
            (Some(Ppa(9)), Some(Ppa(3)), Some(Ppa(3)))
        );
        assert_eq!((m.live_blocks(), m.shared_refs()), (2, 2));
        m.unmap(10, 1);
        m.unmap(41, 1);
        assert_eq!((m.live_blocks(), m.shared_blocks()), (1, 0));
        assert!(!m.is_live(Ppa(3)));
        m.assert_consistent();
    }

    #[test]
    fn a_block_only_snapshots_hold_is_kept_only() {
        let mut m = mapping();
        m.map_direct(1, Ppa(1), 0, 1).unwrap();
        m.map_direct(2, Ppa(2), 0, 2).unwrap();
        m.clone_block(2, 3, 3).unwrap();
        m.snapshot_create(0, "s", 4, 0);
        m.map_direct(1, Ppa(5), 0, 5).unwrap(); // block 1's old block: kept only
        m.map_direct(2, Ppa(6), 0, 6).unwrap(); // 2's old block: 3 still names it
        let kept: Vec<SharedId> = m
            .history()
            .entries()
            .filter_map(|(_, _, v)| v.value)
            .collect();
        assert_eq!(kept.len(), 2);
        let only: Vec<bool> = kept.iter().map(|&id| m.kept_only(id)).collect();
        assert_eq!(only, [true, false]);
        m.assert_consistent();
        m.unmap(3, 7); // now only the history names it
        assert!(m.kept_only(kept[1]));
        m.assert_consistent();
        // A revert names the kept blocks from the live map again.
        m.snapshot_create(1, "undo", 8, 0);
        m.revert_to(4, 1, 9).unwrap();
        assert!(!m.kept_only(kept[0]) && !m.kept_only(kept[1]));
        m.assert_consistent();
        m.snapshot_delete(0, 10).unwrap();
        m.snapshot_delete(1, 11).unwrap();
        m.sweep_all();
        m.assert_consistent();
    }

    #[test]
    fn gc_moves_a_shared_block_once_for_every_owner() {
        let mut m = mapping();
        m.map_direct(1, Ppa(2), 0, 1).unwrap();
        for dst in 20..28 {
            m.clone_block(1, dst, 1).unwrap();
        }
        let Some(Owner::Shared(id)) = m.owner(Ppa(2), Some(1)) else {
            panic!("owner")
        };
        assert!(m.relocate_shared(id, Ppa(2), Ppa(17)));
        for lba in [1].into_iter().chain(20..28) {
            assert_eq!(m.get(lba), Some(Ppa(17)));
        }
        assert_eq!((m.valid_blocks(0), m.valid_blocks(2)), (0, 1));
        assert!(
            !m.relocate_shared(id, Ppa(2), Ppa(18)),
            "a stale move loses"
        );
        m.zone_reset(0);
        m.assert_consistent();
    }

    #[test]
    fn move_leaves_the_source_unmapped() {
        let mut m = mapping();
        m.map_direct(5, Ppa(4), 0, 1).unwrap();
        m.move_block(5, 6, 1).unwrap();
        assert_eq!((m.get(5), m.get(6)), (None, Some(Ppa(4))));
        assert_eq!(
            m.owner(Ppa(4), Some(5)),
            m.find_shared(Ppa(4)).map(Owner::Shared)
        );
        // Moving an unmapped block unmaps the destination.
        m.map_direct(7, Ppa(5), 0, 1).unwrap();
        m.move_block(5, 7, 1).unwrap();
        assert_eq!(m.get(7), None);
        assert!(!m.is_live(Ppa(5)));
        m.assert_consistent();
    }

    #[test]
    fn a_block_live_elsewhere_is_not_mapped_again() {
        let mut m = mapping();
        m.map_direct(1, Ppa(2), 0, 1).unwrap();
        assert_eq!(m.map_direct(3, Ppa(2), 0, 1), Err(Owner::Direct(u64::MAX)));
        assert_eq!(m.get(3), None);
    }

    #[test]
    fn checkpoint_round_trip_checks_counts() {
        let mut m = Mapping::new(3000, 4, 8, true);
        m.map_direct(1, Ppa(2), 7, 1).unwrap();
        m.map_direct(2000, Ppa(9), 8, 1).unwrap();
        m.clone_block(1, 2500, 1).unwrap();
        let leaves: Vec<_> = m.leaves().collect();
        let crcs: Vec<_> = m.crcs().collect();
        let shared: Vec<_> = m.shared_entries().collect();
        let copy = Mapping::from_checkpoint(
            3000, 4, 8, true, &leaves, &crcs, &shared, no_history, no_forks,
        )
        .unwrap();
        assert_eq!(copy.resolve(2500), m.resolve(2500));
        assert_eq!(copy.live_blocks(), 2);
        copy.assert_consistent();
        let mut wrong = shared.clone();
        wrong[0].2 = 3;
        assert!(Mapping::from_checkpoint(
            3000, 4, 8, true, &leaves, &crcs, &wrong, no_history, no_forks
        )
        .is_err());
        assert!(Mapping::from_checkpoint(
            3000,
            4,
            8,
            true,
            &leaves,
            &crcs,
            &[],
            no_history,
            no_forks
        )
        .is_err());
    }
}
