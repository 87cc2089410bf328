//! Mount step 5: notes and tags applied in seq order to the mapping
//! being rebuilt, through the same `Mapping` methods the running FTL uses.

use crate::addr::{physical_blocks, Lba, Ppa, Seq};
use crate::attr::AttrMap;
use crate::backend::{Geometry, ZoneId};
use crate::births::Births;
use crate::checkpoint::CheckpointImage;
use crate::checkpoint::ZoneKind as RecordKind;
use crate::error::MountError;
use crate::ftl::NAMELESS_MD_BYTES;
use crate::history::{History, SnapshotId, LIVE_VOLUME};
use crate::l2p::leaf_entries;
use crate::mapping::{Mapping, Target};
use crate::nameless::{MdPlacement, NamelessAddr, NamelessZoneKind};
use crate::note::{self, Note};
use crate::range::{self, Apply, RangeOp};
use crate::superblock::{Superblock, TagMode};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Bound on the attribute table of a mounted volume.
pub(crate) const MAX_ATTRIBUTE_RANGES: usize = 65_536;

/// A change to replay, from a note, a range-operation vector's notes, or
/// (OOB mode) a data block's tag.
pub(super) enum Event {
    Note(Note),
    Vector {
        seq: Seq,
        pins: Vec<(Lba, Ppa)>,
        ops: Vec<RangeOp>,
    },
    Tag {
        seq: Seq,
        lba: Lba,
        ppa: Ppa,
        crc: u32,
    },
    /// (OOB mode) a nameless block's tag: its birth generation and the
    /// address it replaced.
    NamelessTag {
        seq: Seq,
        ppa: Ppa,
        birth_gen: u32,
        link: NamelessAddr,
    },
    /// A SnapshotCreate note and its name, and the Revert note that may
    /// end its vector (the target seq).
    SnapshotCreate {
        seq: Seq,
        id: SnapshotId,
        parent: SnapshotId,
        name: String,
        /// Its wall time (0: the log has none, an older build wrote it).
        wall_ns: u64,
        revert_to: Option<Seq>,
    },
    /// A ForkCreate note, its name and its Clock note.
    ForkCreate {
        seq: Seq,
        id: u32,
        base: SnapshotId,
        name: String,
        wall_ns: u64,
    },
}

impl Event {
    pub(super) fn seq(&self) -> Seq {
        match self {
            Event::Note(n) => n.seq(),
            Event::Vector { seq, .. }
            | Event::Tag { seq, .. }
            | Event::NamelessTag { seq, .. }
            | Event::SnapshotCreate { seq, .. }
            | Event::ForkCreate { seq, .. } => *seq,
        }
    }
}

/// Whether `n` belongs to a range-operation vector when no VectorBegin
/// precedes it (a vector of one note).
fn lone_vector_note(n: &Note) -> bool {
    matches!(
        n,
        Note::Clone { .. } | Note::Move { .. } | Note::Attr { .. }
    )
}

/// Turns the notes of the log, in log order, into events: the notes of
/// each range-operation vector become one event, and a vector whose notes
/// are not all there (the log ends inside it) is dropped whole.
pub(super) fn group_vectors(notes: Vec<Note>) -> Result<Vec<Event>, MountError> {
    let mut events = Vec::with_capacity(notes.len());
    let mut it = notes.into_iter().peekable();
    while let Some(n) = it.next() {
        let (seq, body) = match n {
            Note::VectorBegin { seq, note_count } => {
                let body: Vec<Note> = it.by_ref().take(note_count as usize).collect();
                if body.len() < note_count as usize {
                    break; // cut short by a power cut: the vector never was
                }
                if let Some(stray) = body.iter().find(|b| b.seq() != seq) {
                    return Err(MountError::Damaged(format!(
                        "vector {seq}: a note of seq {} among its notes",
                        stray.seq()
                    )));
                }
                if let Some(&Note::SnapshotCreate { .. } | &Note::ForkCreate { .. }) = body.first()
                {
                    events.push(snapshot_create(seq, &body)?);
                    continue;
                }
                (seq, body)
            }
            n if lone_vector_note(&n) => (n.seq(), vec![n]),
            Note::Merge { .. }
            | Note::MergeSource { .. }
            | Note::Pin { .. }
            | Note::SnapshotCreate { .. }
            | Note::SnapshotName { .. }
            | Note::Clock { .. }
            | Note::Revert { .. }
            | Note::ForkCreate { .. } => {
                return Err(MountError::Damaged(format!(
                    "{n:?} outside a range-operation vector"
                )));
            }
            n => {
                events.push(Event::Note(n));
                continue;
            }
        };
        let (pins, ops) = range::vector_from_notes(&body)
            .map_err(|e| MountError::Damaged(format!("vector {seq}: {e}")))?;
        events.push(Event::Vector { seq, pins, ops });
    }
    Ok(events)
}

/// The event of a snapshot create's notes (a SnapshotCreate note, then
/// its name's notes, its Clock note (logs of older builds have none),
/// then for a revert a Revert note), or of a fork create's (a ForkCreate
/// note, its name's notes and its Clock note).
fn snapshot_create(seq: Seq, body: &[Note]) -> Result<Event, MountError> {
    let damaged = |what: String| MountError::Damaged(format!("snapshot create {seq}: {what}"));
    let (name_len, id, parent, fork, rest) = match body.split_first() {
        Some((
            &Note::SnapshotCreate {
                name_len,
                id,
                parent,
                ..
            },
            rest,
        )) => (name_len, id, parent, false, rest),
        Some((
            &Note::ForkCreate {
                name_len, id, base, ..
            },
            rest,
        )) => (name_len, id, base, true, rest),
        _ => unreachable!("called on a create's notes"),
    };
    let (revert_to, rest) = match rest.split_last() {
        Some((&Note::Revert { to_seq, .. }, names)) => (Some(to_seq), names),
        _ => (None, rest),
    };
    let (wall_ns, rest) = match rest.split_last() {
        Some((&Note::Clock { wall_ns, .. }, names)) => (wall_ns, names),
        _ => (0, rest),
    };
    let names: Vec<[u8; 20]> = rest
        .iter()
        .map(|n| match n {
            Note::SnapshotName { bytes, .. } => Ok(*bytes),
            other => Err(damaged(format!("{other:?} among its name notes"))),
        })
        .collect::<Result<_, _>>()?;
    let name = note::snapshot_name(name_len, &names).map_err(|e| damaged(e.to_string()))?;
    if fork {
        if revert_to.is_some() {
            return Err(damaged("a Revert note in a fork create".into()));
        }
        return Ok(Event::ForkCreate {
            seq,
            id,
            base: parent,
            name,
            wall_ns,
        });
    }
    Ok(Event::SnapshotCreate {
        seq,
        id,
        parent,
        name,
        wall_ns,
        revert_to,
    })
}

/// Seq of the newest ZoneReset note per zone: older tags there are stale.
pub(super) fn reset_seqs(events: &[Event]) -> HashMap<ZoneId, Seq> {
    let mut out = HashMap::new();
    for e in events {
        if let Event::Note(Note::ZoneReset { seq, zone, .. }) = e {
            out.insert(*zone, *seq);
        }
    }
    out
}

/// The zones the tag scan reads whatever the checkpoint recorded, and the
/// seq from which their tags count: those `resets` resets (from the
/// reset), and the victims of in-place jobs (from the first InPlaceStaged
/// note: a gap fill is newer; a kept block's tag is older than the
/// checkpoint). A zone with both takes the later seq.
pub(super) fn rescan_seqs(events: &[Event], resets: &HashMap<ZoneId, Seq>) -> HashMap<ZoneId, Seq> {
    let mut out = resets.clone();
    for e in events {
        if let Event::Note(Note::InPlaceStaged { seq, victim, .. }) = e {
            out.entry(*victim)
                .and_modify(|s| *s = (*s).max(*seq))
                .or_insert(*seq);
        }
    }
    out
}

/// Which zones the log resets, by zone id. A note naming a zone past the
/// device is refused by the replay, so it is not flagged here.
fn reset_flags(g: &Geometry, reset_zones: impl Iterator<Item = ZoneId>) -> Vec<bool> {
    let mut is_reset = vec![false; g.zone_count as usize];
    for z in reset_zones {
        if let Some(r) = is_reset.get_mut(z as usize) {
            *r = true;
        }
    }
    is_reset
}

/// The direct mappings `(lba, block)` whose blocks lie in a flagged zone,
/// by block; no walk at all when no zone is flagged.
fn direct_in(
    is_reset: &[bool],
    zone_capacity_blocks: u64,
    direct: impl Iterator<Item = (Lba, Ppa)>,
) -> BTreeMap<Ppa, Lba> {
    if !is_reset.contains(&true) {
        return BTreeMap::new();
    }
    direct
        .filter(|(_, ppa)| is_reset[ppa.zone(zone_capacity_blocks) as usize])
        .map(|(lba, ppa)| (ppa, lba))
        .collect()
}

/// The mapping being rebuilt.
pub(super) struct Rebuild {
    pub(super) mapping: Mapping,
    pub(super) attrs: AttrMap,
    pub(super) next_seq: Seq,
    pub(super) erase_counts: HashMap<ZoneId, u32>,
    pub(super) retired: Vec<ZoneId>,
    pub(super) zone_capacity_blocks: u64,
    pub(super) in_band: bool,
    /// The seq of the version each block mapped by a replayed tag or
    /// Relocated note holds (OOB tags, where Relocated notes compare with
    /// it; in band, HostWrite notes need none).
    pub(super) versions: HashMap<Lba, Seq>,
    /// Zones a replayed ZoneReset note resets (by zone id), and the direct
    /// mappings made into them, by address: what such a note must unmap
    /// (an entry is checked against the map when used).
    pub(super) reset_zones: Vec<bool>,
    pub(super) in_reset_zones: BTreeMap<Ppa, Lba>,
    /// Per zone: the generation of its nameless data (0: never), and
    /// whether it holds nameless data now.
    pub(super) nameless_gens: Vec<u32>,
    pub(super) nameless_now: Vec<bool>,
    /// Per zone its `base_gen`, and the live gap fills' birth generations
    /// (the checkpoint's section 24, then the fills of each job done).
    pub(super) nameless_births: Births,
    /// The gap fills of the pending in-place job, counted at its
    /// InPlaceDone (none of its writes was answered before): block, birth
    /// generation, and the block an overwrite fill replaces (its link,
    /// freed at that note) or none.
    pub(super) inplace_fills: Vec<(Ppa, u32, NamelessAddr)>,
    /// Of those, the zones of migrated blocks (zone kind 8).
    pub(super) nameless_moved: Vec<bool>,
    /// Nameless blocks written since the newest commit note (the
    /// checkpoint's set, then each counted tag; a commit note empties it);
    /// freed ones are dropped at the end (`live_uncommitted`).
    pub(super) nameless_uncommitted: BTreeSet<Ppa>,
    pub(super) nameless_commit_seq: Seq,
    /// The remap table: old address -> new, for each migration the client
    /// has not acknowledged (the checkpoint's section 20, then the
    /// NamelessMigrate and entry NamelessAck notes).
    pub(super) nameless_remap: BTreeMap<NamelessAddr, NamelessAddr>,
    /// The same entries by their new side: a free of that block drops its
    /// entry.
    pub(super) nameless_remap_by_new: BTreeMap<Ppa, NamelessAddr>,
    /// In band: the md groups' records (md placement log).
    pub(super) nameless_md: Option<super::md::RecoveredMd>,
    /// The in-place job the log leaves pending, if any.
    pub(super) inplace_pending: Option<super::inplace::PendingInPlace>,
}

impl Rebuild {
    pub(super) fn from_image(
        g: &Geometry,
        sb: &Superblock,
        image: &mut CheckpointImage,
        reset_zones: impl Iterator<Item = ZoneId>,
    ) -> Result<Rebuild, MountError> {
        if image.logical_blocks != sb.logical_blocks || image.zones.len() != g.zone_count as usize {
            return Err(MountError::Damaged(
                "checkpoint does not match the superblock".into(),
            ));
        }
        let in_band = sb.tag_mode == TagMode::InBand;
        let crcs = image.crcs.as_deref().unwrap_or(&[]);
        let shared: Vec<_> = image
            .shared
            .iter()
            .map(|e| (e.id, Ppa(e.ppa), e.refs, e.crc))
            .collect();
        let mut mapping = Mapping::from_checkpoint(
            image.logical_blocks,
            g.zone_count,
            g.zone_capacity_blocks,
            in_band,
            &image.leaves,
            crcs,
            &shared,
            |capacity| {
                History::from_checkpoint(
                    capacity,
                    image.epoch,
                    std::mem::take(&mut image.snapshots),
                    image.next_snapshot_id,
                    std::mem::take(&mut image.births),
                    &image.history,
                    &image.sweeps,
                )
            },
            |slots| {
                let records = image.forks.clone();
                crate::fork::Forks::from_records(
                    image.logical_blocks,
                    slots,
                    image.next_fork_id,
                    records,
                )
                .map_err(|e| format!("forks: {e}"))
            },
        )
        .map_err(|e| MountError::Damaged(format!("checkpoint map: {e}")))?;
        // The running FTL may have finished the checkpoint's pending
        // sweeps and reused the space: sweep them before anything else.
        mapping.sweep_all();
        let ranges: Vec<_> = image
            .attrs
            .iter()
            .map(|a| (a.lba, a.block_count, a.bits as u8))
            .collect();
        let attrs = AttrMap::from_ranges(MAX_ATTRIBUTE_RANGES, image.logical_blocks, &ranges)
            .map_err(|e| MountError::Damaged(format!("checkpoint attributes: {e}")))?;
        let is_reset = reset_flags(g, reset_zones);
        // The checkpoint's unpacked leaves are cheaper to walk than the
        // packed map; values below the device's size are direct entries.
        let physical = mapping.physical_blocks();
        let direct = leaf_entries(&image.leaves)
            .filter(|&(_, raw)| raw < physical)
            .map(|(lba, raw)| (lba, Ppa(raw)));
        let in_reset_zones = direct_in(&is_reset, g.zone_capacity_blocks, direct);
        let mut rebuild = Rebuild::new(
            g,
            mapping,
            attrs,
            image.next_seq,
            in_band,
            is_reset,
            in_reset_zones,
        );
        rebuild.load_nameless(image)?;
        if in_band {
            let md = super::md::RecoveredMd::from_image(g, &image.nameless);
            let g_recorded = image.nameless.header.map(|h| u64::from(h.group_blocks));
            if g_recorded.is_some_and(|gb| gb != md.layout.group_blocks) {
                return Err(MountError::Damaged(format!(
                    "checkpoint: md group of {g_recorded:?} blocks, this volume's is {}",
                    md.layout.group_blocks
                )));
            }
            rebuild.nameless_md = Some(md);
        }
        Ok(rebuild)
    }

    /// The checkpoint's physical segment: generations, nameless zones and
    /// their live blocks.
    fn load_nameless(&mut self, image: &CheckpointImage) -> Result<(), MountError> {
        let n = &image.nameless;
        if n.is_empty() {
            return Ok(());
        }
        let placement = if self.in_band {
            MdPlacement::Log
        } else {
            MdPlacement::Oob
        };
        let oob_md = n.header.as_ref().is_some_and(|h| {
            h.placement == placement && usize::from(h.md_bytes) == NAMELESS_MD_BYTES
        });
        let scratch = image
            .zones
            .iter()
            .any(|z| z.kind == RecordKind::NamelessScratch);
        let unbuilt = !oob_md || scratch || n.job.is_some();
        if unbuilt {
            return Err(MountError::Unsupported(format!(
                "the checkpoint holds nameless state this build does not mount (md placed \
                 other than the tag mode has it, md of other than {NAMELESS_MD_BYTES} bytes or \
                 an in-place collection): {:?}",
                n.header
            )));
        }
        for (z, &(gen, base)) in n.generations.iter().enumerate() {
            self.nameless_gens[z] = gen;
            self.nameless_births.set_base(z as ZoneId, base);
        }
        let cap = self.zone_capacity_blocks;
        for r in &n.zones {
            self.nameless_now[r.zone as usize] = true;
            self.nameless_moved[r.zone as usize] = image
                .zones
                .get(r.zone as usize)
                .is_some_and(|z| z.kind == RecordKind::DataNamelessMoved);
            for off in 0..u64::from(r.data_end) {
                if r.valid[(off / 64) as usize] >> (off % 64) & 1 == 0 {
                    continue;
                }
                let ppa = Ppa::new(r.zone, off, cap);
                if !self.mapping.nameless_set(ppa) {
                    return Err(MountError::Damaged(format!(
                        "checkpoint: nameless block {} is also mapped",
                        ppa.0
                    )));
                }
            }
        }
        // The decoder checked each fill live, born between its zone's base
        // and gen.
        for &(ppa, birth_gen) in &n.fills {
            let zone = ppa.zone(cap);
            self.nameless_births.fill(ppa, zone, birth_gen);
        }
        // The decoder checked each to be live in a nameless zone.
        self.nameless_uncommitted = n.uncommitted.iter().copied().collect();
        self.nameless_commit_seq = n.header.as_ref().map_or(0, |h| h.commit_seq);
        // The decoder checked old increasing, new distinct and in range.
        self.nameless_remap = n.remap.iter().copied().collect();
        self.nameless_remap_by_new = n.remap.iter().map(|&(old, new)| (new.ppa(), old)).collect();
        Ok(())
    }

    /// Replay state starting from `mapping` (the checkpoint's).
    #[cfg(test)]
    fn with_mapping(
        g: &Geometry,
        mapping: Mapping,
        attrs: AttrMap,
        next_seq: Seq,
        in_band: bool,
        reset_zones: impl Iterator<Item = ZoneId>,
    ) -> Rebuild {
        let is_reset = reset_flags(g, reset_zones);
        let direct = mapping.iter().filter_map(|(lba, t)| match t {
            Target::Direct(ppa) => Some((lba, ppa)),
            Target::Shared(_) => None,
        });
        let in_reset_zones = direct_in(&is_reset, g.zone_capacity_blocks, direct);
        Rebuild::new(
            g,
            mapping,
            attrs,
            next_seq,
            in_band,
            is_reset,
            in_reset_zones,
        )
    }

    fn new(
        g: &Geometry,
        mapping: Mapping,
        attrs: AttrMap,
        next_seq: Seq,
        in_band: bool,
        is_reset: Vec<bool>,
        in_reset_zones: BTreeMap<Ppa, Lba>,
    ) -> Rebuild {
        let cap = g.zone_capacity_blocks;
        Rebuild {
            mapping,
            attrs,
            next_seq,
            erase_counts: HashMap::new(),
            retired: Vec::new(),
            zone_capacity_blocks: cap,
            in_band,
            versions: HashMap::new(),
            reset_zones: is_reset,
            in_reset_zones,
            nameless_gens: vec![0; g.zone_count as usize],
            nameless_now: vec![false; g.zone_count as usize],
            nameless_births: Births::new(g.zone_count),
            inplace_fills: Vec::new(),
            nameless_moved: vec![false; g.zone_count as usize],
            nameless_uncommitted: BTreeSet::new(),
            nameless_commit_seq: 0,
            nameless_remap: BTreeMap::new(),
            nameless_remap_by_new: BTreeMap::new(),
            nameless_md: None,
            inplace_pending: None,
        }
    }

    fn check_lba(&self, lba: Lba) -> Result<(), MountError> {
        let in_fork = || self.mapping.forks().at(lba).is_some();
        if lba >= self.mapping.logical_blocks() && !in_fork() {
            return Err(MountError::Damaged(format!(
                "a note or tag names block {lba}, past the logical end"
            )));
        }
        Ok(())
    }

    /// Maps `lba` straight to `ppa`, which nothing else may hold, by the
    /// change of seq `seq`.
    fn set(&mut self, lba: Lba, ppa: Ppa, crc: u32, seq: Seq) -> Result<(), MountError> {
        self.mapping
            .map_direct(lba, ppa, crc, seq)
            .map_err(|owner| {
                MountError::Damaged(format!(
                    "block {lba} maps to physical block {}, which {owner:?} holds",
                    ppa.0
                ))
            })?;
        self.note_direct(lba, ppa);
        Ok(())
    }

    fn note_direct(&mut self, lba: Lba, ppa: Ppa) {
        if self.reset_zones[ppa.zone(self.zone_capacity_blocks) as usize] {
            self.in_reset_zones.insert(ppa, lba);
        }
    }

    /// A version of `lba` with seq `version` is mapped at `ppa`.
    fn set_version(
        &mut self,
        lba: Lba,
        ppa: Ppa,
        crc: u32,
        version: Seq,
    ) -> Result<(), MountError> {
        self.set(lba, ppa, crc, version)?;
        self.versions.insert(lba, version);
        Ok(())
    }

    /// GC moved nothing live off a zone before its ZoneReset note, so any
    /// block still mapped into it here is stale: its newer place is a tag
    /// the reset of its own zone erased, which a later Relocated note
    /// restores. Left mapped, it would share the address with the zone's
    /// next data. A shared entry is never stale there (recovery replays
    /// every change of one exactly): one left in the zone is damage.
    fn zone_reset(&mut self, zone: ZoneId) -> Result<(), MountError> {
        let cap = self.zone_capacity_blocks;
        let first = Ppa::new(zone, 0, cap);
        let last = Ppa::new(zone, cap - 1, cap);
        let stale: Vec<(Ppa, Lba)> = self
            .in_reset_zones
            .range(first..=last)
            .map(|(&p, &l)| (p, l))
            .collect();
        for (ppa, lba) in stale {
            self.in_reset_zones.remove(&ppa);
            if self.mapping.target(lba) == Some(Target::Direct(ppa)) {
                self.mapping.forget(lba);
            }
        }
        if let Some(id) = self
            .mapping
            .zone_shared(zone)
            .iter()
            .find(|&&id| id != u32::MAX)
        {
            return Err(MountError::Damaged(format!(
                "zone {zone} is reset while shared entry {id} holds a block in it"
            )));
        }
        Ok(())
    }

    /// A NamelessZone note: the zone, free then, takes nameless data of
    /// the next generation.
    fn nameless_zone(
        &mut self,
        seq: Seq,
        zone: ZoneId,
        generation: u32,
        kind: NamelessZoneKind,
        g: &Geometry,
    ) -> Result<(), MountError> {
        let z = zone as usize;
        let fits = zone < g.zone_count
            && matches!(kind, NamelessZoneKind::Data | NamelessZoneKind::Moved)
            && !self.nameless_now[z]
            && Some(generation) == self.nameless_gens[z].checked_add(1);
        if !fits {
            return Err(MountError::Damaged(format!(
                "NamelessZone note {seq}: zone {zone} kind {kind:?} generation {generation} \
                 (the zone's is {}, holding nameless data: {})",
                self.nameless_gens.get(z).copied().unwrap_or(0),
                self.nameless_now.get(z).copied().unwrap_or(false)
            )));
        }
        self.nameless_gens[z] = generation;
        self.nameless_births.set_base(zone, generation);
        self.nameless_now[z] = true;
        self.nameless_moved[z] = kind == NamelessZoneKind::Moved;
        Ok(())
    }

    /// A nameless block's tag: live, unless its zone's NamelessZone note
    /// did not survive (no reply carried its generation); frees what it
    /// replaced.
    pub(super) fn nameless_tag(
        &mut self,
        ppa: Ppa,
        birth_gen: u32,
        link: NamelessAddr,
    ) -> Result<(), MountError> {
        let z = ppa.zone(self.zone_capacity_blocks) as usize;
        if !self.nameless_now[z] || birth_gen != self.nameless_gens[z] {
            return Ok(());
        }
        // A gap fill of the pending job (seq above its InPlaceStaged note's:
        // the victim's scan reads no older tag) counts at its InPlaceDone.
        if self.inplace_pending.is_some_and(|j| j.victim as usize == z) {
            self.inplace_fills.push((ppa, birth_gen, link));
            return Ok(());
        }
        self.nameless_live(ppa, birth_gen)?;
        if !link.is_none() {
            self.nameless_free(link.ppa(), link.generation());
        }
        Ok(())
    }

    /// The nameless block at `ppa`, born with `birth_gen`, is live (a tag,
    /// or a gap fill of a job done): in the uncommitted set, and in the
    /// births map if it is a fill.
    pub(super) fn nameless_live(&mut self, ppa: Ppa, birth_gen: u32) -> Result<(), MountError> {
        let zone = ppa.zone(self.zone_capacity_blocks);
        if !self.mapping.nameless_set(ppa) {
            return Err(MountError::Damaged(format!(
                "nameless block {} is held twice",
                ppa.0
            )));
        }
        self.nameless_uncommitted.insert(ppa);
        if birth_gen != self.nameless_births.base(zone) {
            self.nameless_births.fill(ppa, zone, birth_gen);
        }
        Ok(())
    }

    /// A NamelessMigrate note (placement OOB; with placement log once its
    /// md notes are all there, `Rebuild::nameless_migrate_note`): the
    /// block at `old` moved to `new`, which the copy's tag does not make
    /// live (kind 6 never counts, format.md §11), so the note does: old
    /// bit cleared, new set, the entry inserted and `new` in the
    /// uncommitted set in place of `old`. A move whose victim's tag a reset
    /// erased finds `old` not live and still makes `new` live.
    pub(super) fn nameless_migrate(
        &mut self,
        seq: Seq,
        old: NamelessAddr,
        new: NamelessAddr,
    ) -> Result<(), MountError> {
        let cap = self.zone_capacity_blocks;
        let z = new.ppa().zone(cap) as usize;
        if !self.nameless_now[z] || new.generation() != self.nameless_gens[z] {
            return Err(MountError::Damaged(format!(
                "NamelessMigrate note {seq}: {new:?} is not in a nameless zone of its generation"
            )));
        }
        if self.nameless_remap.contains_key(&old) || !self.mapping.nameless_set(new.ppa()) {
            return Err(MountError::Damaged(format!(
                "NamelessMigrate note {seq}: {old:?} moved twice, or {new:?} held twice"
            )));
        }
        let uncommitted = self.nameless_uncommitted.contains(&old.ppa());
        self.nameless_free(old.ppa(), old.generation());
        if uncommitted {
            self.nameless_uncommitted.insert(new.ppa());
        }
        self.nameless_remap.insert(old, new);
        self.nameless_remap_by_new.insert(new.ppa(), old);
        Ok(())
    }

    /// A commit note: every nameless block before it is recorded by the
    /// client (the running core sent no block of a later write before the
    /// note, format.md §11).
    fn nameless_commit(&mut self, seq: Seq) {
        self.nameless_uncommitted.clear();
        self.nameless_commit_seq = seq;
    }

    /// The uncommitted set as the running core has it: its live blocks.
    pub(super) fn live_uncommitted(&self) -> Vec<Ppa> {
        let cap = self.zone_capacity_blocks;
        let live = |p: &&Ppa| self.nameless_now[p.zone(cap) as usize] && self.mapping.is_live(**p);
        self.nameless_uncommitted
            .iter()
            .filter(live)
            .copied()
            .collect()
    }

    /// Frees the nameless block at `ppa` of generation `birth_gen` if it
    /// is live: the running core logged only frees of live blocks, but a
    /// block whose tag a later reset erased is not live here.
    pub(super) fn nameless_free(&mut self, ppa: Ppa, birth_gen: u32) {
        let cap = self.zone_capacity_blocks;
        let z = ppa.zone(cap) as usize;
        let in_segment = u64::from(ppa.0) < u64::from(self.mapping.physical_blocks())
            && self.nameless_now[z]
            && self.nameless_births.birth(ppa, z as ZoneId) == birth_gen;
        if in_segment && self.mapping.nameless_clear(ppa) {
            self.nameless_births.forget(ppa);
            // Out of the set too: a migration may make a later block live
            // at this Ppa without a tag that adds it.
            self.nameless_uncommitted.remove(&ppa);
            // A moved block freed takes its remap entry along.
            if let Some(old) = self.nameless_remap_by_new.remove(&ppa) {
                self.nameless_remap.remove(&old);
            }
        }
    }

    /// A ZoneReset note of a nameless zone: GC resets one only once nothing
    /// in it is live.
    fn nameless_zone_reset(&mut self, zone: ZoneId) -> Result<(), MountError> {
        let z = zone as usize;
        if !self.nameless_now[z] {
            return Ok(());
        }
        let live = self.mapping.valid_blocks(zone);
        if live > 0 {
            return Err(MountError::Damaged(format!(
                "nameless zone {zone} is reset with {live} live blocks"
            )));
        }
        self.nameless_now[z] = false;
        self.nameless_moved[z] = false;
        Ok(())
    }

    /// After a crash the non-persistent ranges read as zeros: unmaps them;
    /// returns the blocks that held data.
    pub(super) fn drop_non_persistent(&mut self) -> u64 {
        let ranges: Vec<(Lba, u64)> = self.attrs.non_persistent().collect();
        let mut dropped = 0;
        for (lba, n) in ranges {
            let mut at = lba;
            while let Some(l) = self.mapping.next_mapped(at, lba + n) {
                self.mapping.forget(l);
                dropped += 1;
                at = l + 1;
            }
        }
        dropped
    }

    /// Step 5: apply notes, vectors and tags in seq order.
    pub(super) fn replay(&mut self, events: &[Event], g: &Geometry) -> Result<(), MountError> {
        let physical = u64::from(physical_blocks(g).expect("validated geometry"));
        let ppa_ok = |p: Ppa, what: &str| {
            if u64::from(p.0) < physical {
                Ok(())
            } else {
                Err(MountError::Damaged(format!("{what} names block {}", p.0)))
            }
        };
        for e in events {
            self.next_seq = self.next_seq.max(e.seq() + 1);
            match e {
                Event::Tag { seq, lba, ppa, crc } => {
                    self.check_lba(*lba)?;
                    self.set_version(*lba, *ppa, *crc, *seq)?;
                }
                Event::NamelessTag {
                    ppa,
                    birth_gen,
                    link,
                    ..
                } => self.nameless_tag(*ppa, *birth_gen, *link)?,
                Event::Vector { seq, pins, ops } => self.vector(*seq, pins, ops, &ppa_ok)?,
                Event::SnapshotCreate {
                    seq,
                    id,
                    parent,
                    name,
                    wall_ns,
                    revert_to,
                } => {
                    self.snapshot_create(*seq, *id, *parent, name, *wall_ns)?;
                    if let Some(to_seq) = revert_to {
                        self.revert(*seq, *to_seq)?;
                    }
                }
                Event::ForkCreate {
                    seq,
                    id,
                    base,
                    name,
                    wall_ns,
                } => self.fork_create(*seq, *id, *base, name, *wall_ns)?,
                Event::Note(n) => self.note(n, g, &ppa_ok)?,
            }
        }
        self.nameless_md_end();
        Ok(())
    }

    fn note(
        &mut self,
        n: &Note,
        g: &Geometry,
        ppa_ok: &impl Fn(Ppa, &str) -> Result<(), MountError>,
    ) -> Result<(), MountError> {
        match *n {
            Note::HostWrite {
                seq,
                lba,
                ppa,
                data_crc,
            } => {
                self.check_lba(lba)?;
                ppa_ok(ppa, "HostWrite note")?;
                self.set_version(lba, ppa, data_crc, seq)?;
            }
            Note::Trim {
                seq,
                lba,
                block_count,
            } => {
                let end = lba.checked_add(block_count).filter(|&e| {
                    e <= self.mapping.logical_blocks()
                        || self.mapping.forks().holds_range(lba, block_count)
                });
                let Some(end) = end else {
                    return Err(MountError::Damaged(format!(
                        "Trim note {lba}+{block_count} past the end"
                    )));
                };
                for l in lba..end {
                    self.mapping.unmap(l, seq);
                }
            }
            Note::Reloc { lba, from, to, .. } => {
                self.check_lba(lba)?;
                ppa_ok(to, "Reloc note")?;
                if let Some(r) = self.mapping.resolve(lba).filter(|r| !r.shared) {
                    if r.ppa == from && self.mapping.relocate_direct(lba, from, to, r.crc) {
                        self.note_direct(lba, to);
                        return Ok(());
                    }
                }
                // A host write of a smaller seq that landed after the copy
                // replaced the version here first, and a snapshot keeps it:
                // the kept block moved as the run's did.
                if let Some(id) = self.mapping.find_shared(from) {
                    self.mapping.relocate_shared(id, from, to);
                }
            }
            Note::Relocated {
                lba,
                to,
                version_seq,
                ..
            } => {
                self.check_lba(lba)?;
                if self.in_band {
                    return Err(MountError::Damaged(
                        "a Relocated note in a volume with in-band tags".into(),
                    ));
                }
                ppa_ok(to, "Relocated note")?;
                // A write of `lba` in flight when GC moved this version
                // has a larger seq and was replayed already: it wins.
                let newer = self.versions.get(&lba).is_some_and(|&v| v > version_seq);
                if !newer {
                    self.set_version(lba, to, 0, version_seq)?;
                }
            }
            Note::SharedReloc { from, to, .. } => {
                ppa_ok(to, "SharedReloc note")?;
                if let Some(id) = self.mapping.find_shared(from) {
                    self.mapping.relocate_shared(id, from, to);
                }
            }
            Note::ZoneReset {
                zone, erase_count, ..
            } => {
                if zone >= g.zone_count {
                    return Err(MountError::Damaged(format!(
                        "ZoneReset note names zone {zone} of {}",
                        g.zone_count
                    )));
                }
                self.erase_counts.insert(zone, erase_count);
                self.zone_reset(zone)?;
                self.nameless_zone_reset(zone)?;
                self.nameless_md_reset(zone);
            }
            Note::NamelessZone {
                seq,
                zone,
                generation,
                kind,
            } => self.nameless_zone(seq, zone, generation, kind, g)?,
            Note::NamelessFree { ppa, birth_gen, .. } => {
                ppa_ok(ppa, "NamelessFree note")?;
                self.nameless_free(ppa, birth_gen);
            }
            Note::ZoneRetire { zone, .. } => self.retired.push(zone),
            Note::SnapshotDelete { seq, id } => {
                self.mapping
                    .snapshot_delete(id, seq)
                    .map_err(|e| MountError::Damaged(format!("SnapshotDelete note {seq}: {e}")))?;
                // The running FTL sweeps in steps; the result is the same
                // (needing is a pure function of the snapshots).
                self.mapping.sweep_all();
            }
            Note::ForkDelete { seq, id } => {
                self.mapping
                    .fork_delete(id)
                    .map_err(|e| MountError::Damaged(format!("ForkDelete note {seq}: {e}")))?;
            }
            Note::NamelessAck {
                seq, commit: true, ..
            } => self.nameless_commit(seq),
            Note::NamelessAck {
                commit: false, old, ..
            } => {
                // An ack without an entry was a no-op when it was logged.
                if let Some(new) = self.nameless_remap.remove(&old) {
                    self.nameless_remap_by_new.remove(&new.ppa());
                }
            }
            Note::NamelessMigrate {
                seq,
                new_ppa,
                old,
                data_crc,
                birth_gen,
            } => {
                ppa_ok(new_ppa, "NamelessMigrate note")?;
                let new = NamelessAddr::new(new_ppa, birth_gen);
                if self.nameless_md.is_some() {
                    self.nameless_migrate_note(seq, new, data_crc, old)?;
                } else {
                    self.nameless_migrate(seq, old, new)?;
                }
            }
            Note::NamelessWrite {
                seq,
                ppa,
                data_crc,
                birth_gen,
                replaced,
            } => {
                ppa_ok(ppa, "NamelessWrite note")?;
                self.nameless_write_note(seq, ppa, data_crc, birth_gen, replaced)?;
            }
            Note::NamelessMd { seq, bytes } => self.nameless_md_note(seq, bytes)?,
            Note::InPlaceStaged {
                seq,
                victim,
                scratch,
                gap_gen,
                first_scratch_offset,
                staged_blocks,
            } => {
                let job = super::inplace::PendingInPlace {
                    victim,
                    scratch,
                    staged_blocks: u64::from(staged_blocks),
                    staged_seq: seq,
                };
                self.inplace_staged(g, job, gap_gen, first_scratch_offset)?
            }
            Note::InPlaceDone {
                seq,
                victim,
                erase_count,
                gap_fill_blocks,
                ..
            } => self.inplace_done(seq, victim, erase_count, gap_fill_blocks)?,
            Note::VectorBegin { .. }
            | Note::ForkCreate { .. }
            | Note::Clone { .. }
            | Note::Move { .. }
            | Note::Merge { .. }
            | Note::MergeSource { .. }
            | Note::Pin { .. }
            | Note::Attr { .. }
            | Note::SnapshotCreate { .. }
            | Note::SnapshotName { .. }
            | Note::Clock { .. }
            | Note::Revert { .. } => unreachable!("grouped into vectors"),
        }
        Ok(())
    }

    fn snapshot_create(
        &mut self,
        seq: Seq,
        id: SnapshotId,
        parent: SnapshotId,
        name: &str,
        wall_ns: u64,
    ) -> Result<(), MountError> {
        let damaged = |what: String| MountError::Damaged(format!("snapshot create {seq}: {what}"));
        let history = self.mapping.history();
        if id < history.next_id() || parent != LIVE_VOLUME {
            return Err(damaged(format!("id {id}, parent {parent}")));
        }
        history
            .check_create(name)
            .map_err(|e| damaged(e.to_string()))?;
        if history
            .snapshots()
            .last()
            .is_some_and(|s| s.create_seq >= seq)
        {
            return Err(damaged("created before the newest snapshot".into()));
        }
        self.mapping.snapshot_create(id, name, seq, wall_ns);
        Ok(())
    }

    fn fork_create(
        &mut self,
        seq: Seq,
        id: u32,
        base: SnapshotId,
        name: &str,
        wall_ns: u64,
    ) -> Result<(), MountError> {
        let damaged = |what: String| MountError::Damaged(format!("fork create {seq}: {what}"));
        let forks = self.mapping.forks();
        if id < forks.next_id() {
            return Err(damaged(format!(
                "id {id} below the next id {}",
                forks.next_id()
            )));
        }
        forks
            .check_create(name)
            .map_err(|e| damaged(e.to_string()))?;
        if self.mapping.history().by_id(base).is_none() {
            return Err(damaged(format!("snapshot {base} does not exist")));
        }
        self.mapping.fork_create(id, name, base, seq, wall_ns);
        Ok(())
    }

    /// The revert ending the create vector of seq `seq`: to the live
    /// snapshot created at `to_seq`, its changes at `seq + 1`, with the
    /// function the running FTL applies it with.
    fn revert(&mut self, seq: Seq, to_seq: Seq) -> Result<(), MountError> {
        let history = self.mapping.history();
        let Some(target) = history.snapshots().iter().find(|s| s.create_seq == to_seq) else {
            return Err(MountError::Damaged(format!(
                "revert {seq}: no live snapshot was created at seq {to_seq}"
            )));
        };
        let (create_seq, epoch) = (target.create_seq, target.epoch);
        self.mapping
            .revert_to(create_seq, epoch, seq + 1)
            .map_err(|needed| {
                MountError::Damaged(format!(
                    "revert {seq}: {needed} versions to keep, room for {}",
                    self.mapping.history_room()
                ))
            })?;
        self.next_seq = self.next_seq.max(seq + 2);
        Ok(())
    }

    /// A whole range-operation vector: its pins, then its operations, with
    /// the function the running FTL applies them with.
    fn vector(
        &mut self,
        seq: Seq,
        pins: &[(Lba, Ppa)],
        ops: &[RangeOp],
        ppa_ok: &impl Fn(Ppa, &str) -> Result<(), MountError>,
    ) -> Result<(), MountError> {
        let damaged = |what: String| MountError::Damaged(format!("vector {seq}: {what}"));
        if self.in_band && !pins.is_empty() {
            return Err(damaged("a Pin note in a volume with in-band tags".into()));
        }
        for &(lba, ppa) in pins {
            self.check_lba(lba)?;
            ppa_ok(ppa, "Pin note")?;
            self.set(lba, ppa, 0, seq)?;
        }
        range::validate(ops, self.mapping.logical_blocks()).map_err(|e| damaged(e.to_string()))?;
        // The running FTL checked the vector against the same state; only
        // a damaged log can overflow the attribute table here.
        let mut attrs = self.attrs.clone();
        for op in ops {
            if let RangeOp::SetAttribute {
                lba,
                block_count,
                attribute,
            } = op
            {
                let (set, clear) = attribute.masks();
                attrs
                    .change(*lba, *block_count, set, clear)
                    .map_err(|_| damaged("the attribute table overflows".into()))?;
            }
        }
        let mut budget = u64::MAX;
        Apply::new(seq)
            .step(ops, &mut self.mapping, &mut self.attrs, &mut budget)
            .map_err(|e| damaged(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 zones of 8 blocks, 64 bytes of OOB.
    fn small_geometry() -> Geometry {
        Geometry {
            block_size_bytes: 4096,
            oob_size_bytes: 64,
            zone_count: 4,
            zone_size_blocks: 8,
            zone_capacity_blocks: 8,
            write_unit_blocks: 1,
            max_append_blocks: 8,
            max_transfer_blocks: 8,
            max_open_zones: 0,
            max_active_zones: 0,
            parallel_units: 1,
            zone_groups: 1,
            queue_depth: 8,
        }
    }

    /// 4 zones of 8 blocks, OOB tags; the checkpoint maps what `map` says.
    fn rebuild(map: &[(Lba, u32)], events: &[Event]) -> Rebuild {
        let g = small_geometry();
        let mut mapping = Mapping::new(16, 4, 8, false);
        for &(lba, ppa) in map {
            mapping.map_direct(lba, Ppa(ppa), 0, 1).unwrap();
        }
        let notes: Vec<Event> = events
            .iter()
            .filter_map(|e| match e {
                Event::Note(n) => Some(Event::Note(*n)),
                _ => None,
            })
            .collect();
        let resets = reset_seqs(&notes);
        let attrs = AttrMap::new(8);
        let mut r = Rebuild::with_mapping(&g, mapping, attrs, 10, false, resets.keys().copied());
        r.replay(events, &g).expect("replay");
        r
    }

    fn tag(seq: Seq, lba: Lba, ppa: u32) -> Event {
        Event::Tag {
            seq,
            lba,
            ppa: Ppa(ppa),
            crc: 0,
        }
    }

    fn relocated(seq: Seq, lba: Lba, to: u32, version_seq: Seq) -> Event {
        Event::Note(Note::Relocated {
            seq,
            lba,
            to: Ppa(to),
            version_seq,
        })
    }

    fn zone_reset(seq: Seq, zone: ZoneId) -> Event {
        Event::Note(Note::ZoneReset {
            seq,
            zone,
            erase_count: 1,
        })
    }

    /// Every mapped block is live and nothing else is.
    fn assert_consistent(r: &Rebuild) {
        r.mapping.assert_consistent();
    }

    #[test]
    fn relocated_version_is_found_though_its_tag_is_gone() {
        // Block 1: in the checkpoint at 2; rewritten at seq 12 into zone 1
        // (tag erased with zone 1), moved by GC to 17.
        let r = rebuild(&[(1, 2)], &[relocated(20, 1, 17, 12), zone_reset(21, 1)]);
        assert_eq!(r.mapping.get(1), Some(Ppa(17)));
        assert_consistent(&r);
    }

    #[test]
    fn relocated_loses_to_a_newer_write() {
        // The write of seq 15 was in flight when GC moved version 12.
        let r = rebuild(&[(1, 2)], &[tag(15, 1, 9), relocated(20, 1, 17, 12)]);
        assert_eq!(r.mapping.get(1), Some(Ppa(9)));
        assert_consistent(&r);
    }

    #[test]
    fn zone_reset_unmaps_stale_blocks_before_the_zone_is_reused() {
        // Block 1 sits at 2 (zone 0) in the checkpoint; its newer version
        // (seq 12, zone 1) lost its tag. Zone 0 is reset and block 5 lands
        // at 2; then GC moves block 1's version to 17. Without the unmap at
        // the reset, blocks 1 and 5 share 2 until the move, which then
        // clears 2 in the reverse map under block 5.
        let r = rebuild(
            &[(1, 2)],
            &[
                zone_reset(14, 0),
                tag(16, 5, 2),
                relocated(20, 1, 17, 12),
                zone_reset(21, 1),
            ],
        );
        assert_eq!(r.mapping.get(1), Some(Ppa(17)));
        assert_eq!(r.mapping.get(5), Some(Ppa(2)));
        assert_consistent(&r);
    }

    fn nameless_zone(seq: Seq, zone: ZoneId) -> Event {
        Event::Note(Note::NamelessZone {
            seq,
            zone,
            generation: 1,
            kind: NamelessZoneKind::Data,
        })
    }

    fn nameless_tag(seq: Seq, ppa: u32) -> Event {
        Event::NamelessTag {
            seq,
            ppa: Ppa(ppa),
            birth_gen: 1,
            link: NamelessAddr::NONE,
        }
    }

    fn migrate(seq: Seq, old: u32, new: u32) -> Event {
        Event::Note(Note::NamelessMigrate {
            seq,
            new_ppa: Ppa(new),
            old: NamelessAddr::new(Ppa(old), 1),
            data_crc: 0,
            birth_gen: 1,
        })
    }

    fn ack(seq: Seq, old: u32) -> Event {
        Event::Note(Note::NamelessAck {
            seq,
            commit: false,
            old: NamelessAddr::new(Ppa(old), 1),
        })
    }

    /// Zones 2 and 3 nameless; blocks 16 and 17 written into zone 2.
    fn nameless_events(more: Vec<Event>) -> Vec<Event> {
        let mut e = vec![
            nameless_zone(11, 2),
            nameless_tag(12, 16),
            nameless_tag(13, 17),
            nameless_zone(14, 3),
        ];
        e.extend(more);
        e
    }

    fn try_rebuild(events: &[Event]) -> Result<Rebuild, MountError> {
        let g = small_geometry();
        let mapping = Mapping::new(16, 4, 8, false);
        let mut r =
            Rebuild::with_mapping(&g, mapping, AttrMap::new(8), 10, false, std::iter::empty());
        r.replay(events, &g)?;
        Ok(r)
    }

    #[test]
    fn nameless_migrate_moves_the_block_and_inserts_an_entry() {
        let r = try_rebuild(&nameless_events(vec![migrate(20, 16, 24)])).unwrap();
        let (old, new) = (NamelessAddr::new(Ppa(16), 1), NamelessAddr::new(Ppa(24), 1));
        assert!(!r.mapping.is_live(Ppa(16)));
        assert!(r.mapping.is_live(Ppa(24)) && r.mapping.is_live(Ppa(17)));
        assert_eq!(r.nameless_remap.get(&old), Some(&new));
        // The moved block takes the old one's place in the uncommitted set.
        assert_eq!(r.live_uncommitted(), vec![Ppa(17), Ppa(24)]);
    }

    #[test]
    fn nameless_ack_drops_the_entry_and_a_repeated_ack_is_a_no_op() {
        let events = nameless_events(vec![
            migrate(20, 16, 24),
            ack(21, 16),
            ack(22, 16),
            ack(23, 17),
        ]);
        let r = try_rebuild(&events).unwrap();
        assert!(r.nameless_remap.is_empty());
        assert!(r.mapping.is_live(Ppa(24)) && !r.mapping.is_live(Ppa(16)));
    }

    /// A NamelessWrite note at `seq` for block `ppa` and its md notes
    /// (`md_notes` of them: a group the log's end cut short has fewer).
    fn nameless_write(seq: Seq, ppa: u32, md_notes: usize) -> Vec<Event> {
        let w = Note::NamelessWrite {
            seq,
            ppa: Ppa(ppa),
            data_crc: 7,
            birth_gen: 1,
            replaced: NamelessAddr::NONE,
        };
        let md = note::nameless_md_notes(&[seq as u8; NAMELESS_MD_BYTES], seq);
        std::iter::once(w)
            .chain(md.into_iter().take(md_notes))
            .map(Event::Note)
            .collect()
    }

    /// In band: zone 2 nameless, md groups with no checkpoint state.
    fn try_rebuild_in_band(events: &[Event]) -> Result<Rebuild, MountError> {
        let g = Geometry {
            oob_size_bytes: 0,
            ..small_geometry()
        };
        let mapping = Mapping::new(16, 4, 8, true);
        let mut r =
            Rebuild::with_mapping(&g, mapping, AttrMap::new(8), 10, true, std::iter::empty());
        r.nameless_md = Some(super::super::md::RecoveredMd::from_image(
            &g,
            &crate::nameless::NamelessImage::default(),
        ));
        let mut events: Vec<Event> = events
            .iter()
            .map(|e| match e {
                Event::Note(n) => Event::Note(*n),
                _ => unreachable!("notes only"),
            })
            .collect();
        events.sort_by_key(Event::seq);
        r.replay(&events, &g)?;
        Ok(r)
    }

    #[test]
    fn nameless_write_notes_make_blocks_live_and_a_group_the_log_cut_short_does_not() {
        let full = 32usize.div_ceil(note::NAMELESS_MD_NOTE_BYTES);
        let mut events = vec![nameless_zone(11, 2)];
        // Pushed in completion order: the block of seq 14 before 12's,
        // whose group the log's end cut short.
        events.extend(nameless_write(14, 17, full));
        events.extend(nameless_write(12, 16, full - 1));
        let r = try_rebuild_in_band(&events).unwrap();
        assert!(r.mapping.is_live(Ppa(17)) && !r.mapping.is_live(Ppa(16)));
        assert_eq!(r.live_uncommitted(), vec![Ppa(17)]);
        let md = r.nameless_md.as_ref().unwrap();
        let (group, entries) = &md.groups[&2];
        assert_eq!(*group, 0);
        assert!(!entries[0].is_present(), "the torn block has no entry");
        assert_eq!(
            (entries[1].data_crc, entries[1].md[0]),
            (7, 14),
            "the block's CRC and md from its notes"
        );
        // An md note without its write, or a write outside a nameless zone.
        let stray = vec![nameless_zone(11, 2), nameless_write(12, 16, full).remove(1)];
        assert!(matches!(
            try_rebuild_in_band(&stray),
            Err(MountError::Damaged(_))
        ));
        let outside = nameless_write(12, 8, full);
        assert!(matches!(
            try_rebuild_in_band(&outside),
            Err(MountError::Damaged(_))
        ));
    }

    /// In band: a NamelessMigrate note at `seq` moving `old` to `new` (zone
    /// generation 1) and `md_notes` of its md notes.
    fn migrate_in_band(seq: Seq, old: u32, new: u32, md_notes: usize) -> Vec<Event> {
        let Event::Note(m) = migrate(seq, old, new) else {
            unreachable!("a note")
        };
        let md = note::nameless_md_notes(&[0x5A; NAMELESS_MD_BYTES], seq);
        std::iter::once(m)
            .chain(md.into_iter().take(md_notes))
            .map(Event::Note)
            .collect()
    }

    #[test]
    fn in_band_a_move_counts_once_its_md_notes_are_all_there_and_its_entry_joins_the_new_zone() {
        let full = 32usize.div_ceil(note::NAMELESS_MD_NOTE_BYTES);
        let zone3 = || {
            Event::Note(Note::NamelessZone {
                seq: 13,
                zone: 3,
                generation: 1,
                kind: NamelessZoneKind::Moved,
            })
        };
        let mut events = vec![nameless_zone(11, 2), zone3()];
        events.extend(nameless_write(12, 16, full));
        events.extend(migrate_in_band(20, 16, 24, full));
        let r = try_rebuild_in_band(&events).unwrap();
        let (old, new) = (NamelessAddr::new(Ppa(16), 1), NamelessAddr::new(Ppa(24), 1));
        assert!(!r.mapping.is_live(Ppa(16)) && r.mapping.is_live(Ppa(24)));
        assert_eq!(r.nameless_remap.get(&old), Some(&new));
        assert_eq!(r.live_uncommitted(), vec![Ppa(24)]);
        let md = r.nameless_md.as_ref().unwrap();
        let e = md.entry(3, 0).expect("the copy's entry in zone 3's group");
        assert_eq!((e.home_offset, e.birth_gen, e.md[0]), (0, 1, 0x5A));
        // Cut inside the move's md notes: it never happened.
        let mut cut = vec![nameless_zone(11, 2), zone3()];
        cut.extend(nameless_write(12, 16, full));
        cut.extend(migrate_in_band(20, 16, 24, full - 1));
        let r = try_rebuild_in_band(&cut).unwrap();
        assert!(r.mapping.is_live(Ppa(16)) && !r.mapping.is_live(Ppa(24)));
        assert!(r.nameless_remap.is_empty());
        assert!(r.nameless_md.as_ref().unwrap().entry(3, 0).is_none());
    }

    #[test]
    fn nameless_migrate_refuses_a_second_move_or_a_target_outside_the_segment() {
        let twice = nameless_events(vec![migrate(20, 16, 24), migrate(21, 16, 25)]);
        assert!(matches!(try_rebuild(&twice), Err(MountError::Damaged(_))));
        // Zone 1 holds no nameless data.
        let outside = nameless_events(vec![migrate(20, 16, 9)]);
        assert!(matches!(try_rebuild(&outside), Err(MountError::Damaged(_))));
        let held = nameless_events(vec![migrate(20, 16, 17)]);
        assert!(matches!(try_rebuild(&held), Err(MountError::Damaged(_))));
    }

    fn staged(seq: Seq, victim: ZoneId, scratch: ZoneId, gap_gen: u32) -> Event {
        Event::Note(Note::InPlaceStaged {
            seq,
            victim,
            scratch,
            gap_gen,
            first_scratch_offset: 0,
            staged_blocks: 2,
        })
    }

    fn done(seq: Seq, victim: ZoneId, erase_count: u32) -> Event {
        Event::Note(Note::InPlaceDone {
            seq,
            victim,
            erase_count,
            pad_blocks: 6,
            gap_fill_blocks: 0,
        })
    }

    #[test]
    fn in_place_notes_leave_a_job_pending_until_its_done_note() {
        // Zone 2 holds nameless blocks 16 and 17; zone 1 is the scratch.
        let r = try_rebuild(&nameless_events(vec![staged(20, 2, 1, 0)])).unwrap();
        let job = r.inplace_pending.expect("a pending job");
        assert_eq!(
            (job.victim, job.scratch, job.staged_blocks, job.staged_seq),
            (2, 1, 2, 20)
        );
        assert!(r.mapping.is_live(Ppa(16)) && r.mapping.is_live(Ppa(17)));
        let r = try_rebuild(&nameless_events(vec![staged(20, 2, 1, 0), done(21, 2, 5)])).unwrap();
        assert!(r.inplace_pending.is_none());
        assert_eq!(r.erase_counts.get(&2), Some(&5), "the victim's erase count");
        assert!(r.mapping.is_live(Ppa(16)) && r.mapping.is_live(Ppa(17)));
    }

    fn fill(seq: Seq, ppa: u32, birth_gen: u32) -> Event {
        Event::NamelessTag {
            seq,
            ppa: Ppa(ppa),
            birth_gen,
            link: NamelessAddr::NONE,
        }
    }

    fn free(seq: Seq, ppa: u32, birth_gen: u32) -> Event {
        Event::Note(Note::NamelessFree {
            seq,
            ppa: Ppa(ppa),
            birth_gen,
        })
    }

    #[test]
    fn gap_fills_count_at_their_jobs_done_note_and_only_their_own_address_frees_them() {
        // Zone 2 (generation 1) holds 16 and 17; 18 and 19 are gaps the
        // job (gap generation 2) fills; the done note counts `noted`.
        let job = |noted: Option<u32>, more: Vec<Event>| {
            let mut e = vec![staged(20, 2, 1, 2), fill(21, 18, 2), fill(22, 19, 2)];
            if let Some(n) = noted {
                e.push(Event::Note(Note::InPlaceDone {
                    seq: 23,
                    victim: 2,
                    erase_count: 5,
                    pad_blocks: 4,
                    gap_fill_blocks: n,
                }));
            }
            e.extend(more);
            nameless_events(e)
        };
        let r = try_rebuild(&job(Some(2), vec![])).unwrap();
        assert!(r.inplace_pending.is_none());
        assert!(r.mapping.is_live(Ppa(18)) && r.mapping.is_live(Ppa(19)));
        assert_eq!(r.nameless_gens[2], 2);
        assert_eq!(r.nameless_births.base(2), 1);
        assert_eq!(r.nameless_births.birth(Ppa(18), 2), 2);
        assert_eq!(r.nameless_births.birth(Ppa(16), 2), 1);
        assert!(r.live_uncommitted().contains(&Ppa(18)));
        // A free of an older address at a filled offset frees nothing;
        // the fill's own address does, and its entry goes.
        let r = try_rebuild(&job(Some(2), vec![free(24, 18, 1), free(25, 19, 2)])).unwrap();
        assert!(r.mapping.is_live(Ppa(18)) && !r.mapping.is_live(Ppa(19)));
        assert_eq!(r.nameless_births.fill_count(), 1);
        // The job left pending: its fills never count.
        let r = try_rebuild(&job(None, vec![])).unwrap();
        assert!(r.inplace_pending.is_some());
        assert!(!r.mapping.is_live(Ppa(18)) && !r.mapping.is_live(Ppa(19)));
        assert_eq!(r.nameless_births.fill_count(), 0);
        assert_eq!(
            r.nameless_gens[2], 2,
            "the gap generation is never handed out again"
        );
        // More fills found than the done note counts: damage.
        assert!(matches!(
            try_rebuild(&job(Some(1), vec![])),
            Err(MountError::Damaged(_))
        ));
    }

    /// An overwrite fill (format.md §11, step 9, "Overwrite fills"): its
    /// link frees the block it replaces at its job's done note, not at its
    /// own seq; a job left pending keeps the replaced block; a free that
    /// ended the block first leaves nothing for the link to free.
    #[test]
    fn an_overwrite_fills_link_frees_its_old_block_at_the_done_note_only() {
        // Zone 2 (generation 1) holds 16 and 17; the job fills gap 18 with
        // an overwrite of 17 (in the victim itself), then `more`, then its
        // done note if `ended`.
        let job = |more: Vec<Event>, ended: bool| {
            let mut e = vec![
                staged(20, 2, 1, 2),
                Event::NamelessTag {
                    seq: 21,
                    ppa: Ppa(18),
                    birth_gen: 2,
                    link: NamelessAddr::new(Ppa(17), 1),
                },
            ];
            e.extend(more);
            if ended {
                e.push(Event::Note(Note::InPlaceDone {
                    seq: 23,
                    victim: 2,
                    erase_count: 5,
                    pad_blocks: 5,
                    gap_fill_blocks: 1,
                }));
            }
            try_rebuild(&nameless_events(e)).unwrap()
        };
        let r = job(vec![], false);
        assert!(r.inplace_pending.is_some());
        assert!(r.mapping.is_live(Ppa(17)) && !r.mapping.is_live(Ppa(18)));
        let r = job(vec![], true);
        assert!(!r.mapping.is_live(Ppa(17)) && r.mapping.is_live(Ppa(18)));
        assert!(r.mapping.is_live(Ppa(16)));
        // A racing free of 17 before the done note wins.
        let r = job(vec![free(22, 17, 1)], true);
        assert!(!r.mapping.is_live(Ppa(17)) && r.mapping.is_live(Ppa(18)));
        assert!(r.mapping.is_live(Ppa(16)));
    }

    #[test]
    fn in_place_notes_out_of_order_are_refused_in_both_tag_modes() {
        let refused = [
            vec![done(20, 2, 1)],                           // no job pending
            vec![staged(20, 2, 1, 0), done(21, 3, 1)],      // another victim
            vec![staged(20, 2, 1, 0), staged(21, 3, 1, 0)], // two at once
            vec![staged(20, 1, 3, 0)],                      // not a nameless zone
            vec![staged(20, 2, 2, 0)],                      // victim == scratch
            vec![staged(20, 2, 9, 0)],                      // scratch past the device
            vec![staged(20, 2, 1, 3)],                      // gap gen not gen + 1
        ];
        for (i, events) in refused.into_iter().enumerate() {
            let r = try_rebuild(&nameless_events(events));
            assert!(matches!(r, Err(MountError::Damaged(_))), "case {i}");
        }
        // In band the job is pending until its done note, which sets the
        // victim's md where a zone written full has it; the same refusals
        // hold.
        let band = vec![nameless_zone(11, 2), staged(20, 2, 1, 2)];
        let r = try_rebuild_in_band(&band).unwrap();
        assert_eq!(r.inplace_pending.map(|j| j.victim), Some(2));
        let mut band = band;
        band.push(done(21, 2, 5));
        let r = try_rebuild_in_band(&band).unwrap();
        assert!(r.inplace_pending.is_none());
        let md = r.nameless_md.as_ref().unwrap();
        assert_eq!(
            md.tails[2],
            (md.layout.full_data_end() as u32, u32::MAX),
            "the victim's md after the rewrite"
        );
        for bad in [staged(21, 2, 1, 3), staged(21, 2, 2, 0), done(21, 3, 1)] {
            let band = vec![nameless_zone(11, 2), staged(20, 2, 1, 0), bad];
            assert!(matches!(
                try_rebuild_in_band(&band),
                Err(MountError::Damaged(_))
            ));
        }
    }
}
