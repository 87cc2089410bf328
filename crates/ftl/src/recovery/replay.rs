//! Mount step 5: notes and tags applied in seq order to the map being
//! rebuilt.

use crate::addr::{physical_blocks, Lba, Ppa, Seq};
use crate::backend::{Geometry, ZoneId};
use crate::checkpoint::CheckpointImage;
use crate::error::MountError;
use crate::l2p::{EntryFormat, L2p};
use crate::note::Note;
use crate::p2l::P2l;
use crate::superblock::{Superblock, TagMode};
use std::collections::{BTreeMap, HashMap};

/// A change to replay, from a note or (OOB mode) a data block's tag.
pub(super) enum Event {
    Note(Note),
    Tag {
        seq: Seq,
        lba: Lba,
        ppa: Ppa,
        crc: u32,
    },
}

impl Event {
    pub(super) fn seq(&self) -> Seq {
        match self {
            Event::Note(n) => n.seq(),
            Event::Tag { seq, .. } => *seq,
        }
    }
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

/// The map and reverse map being rebuilt.
pub(super) struct Rebuild {
    pub(super) l2p: L2p,
    pub(super) p2l: P2l,
    pub(super) next_seq: Seq,
    pub(super) erase_counts: HashMap<ZoneId, u32>,
    pub(super) retired: Vec<ZoneId>,
    pub(super) zone_capacity_blocks: u64,
    pub(super) in_band: bool,
    /// The seq of the version each block mapped by a replayed tag or
    /// Relocated note holds (OOB tags, where Relocated notes compare with
    /// it; in band, HostWrite notes need none).
    pub(super) versions: HashMap<Lba, Seq>,
    /// Zones a replayed ZoneReset note resets (by zone id), and the blocks
    /// mapped into them, by address: what such a note must unmap.
    pub(super) reset_zones: Vec<bool>,
    pub(super) in_reset_zones: BTreeMap<Ppa, Lba>,
}

impl Rebuild {
    pub(super) fn from_image(
        g: &Geometry,
        sb: &Superblock,
        image: &CheckpointImage,
        reset_zones: impl Iterator<Item = ZoneId>,
    ) -> Result<Rebuild, MountError> {
        if image.logical_blocks != sb.logical_blocks || image.zones.len() != g.zone_count as usize {
            return Err(MountError::Damaged(
                "checkpoint does not match the superblock".into(),
            ));
        }
        let physical = physical_blocks(g).expect("validated geometry");
        let in_band = sb.tag_mode == TagMode::InBand;
        let format = EntryFormat::for_device(physical, in_band);
        let crcs = image.crcs.as_deref().unwrap_or(&[]);
        let l2p = L2p::from_leaves(image.logical_blocks, format, &image.leaves, crcs)
            .map_err(|e| MountError::Damaged(format!("checkpoint map: {e}")))?;
        Ok(Rebuild::with_map(
            g,
            l2p,
            image.next_seq,
            in_band,
            reset_zones,
        ))
    }

    /// Replay state starting from `l2p` (the checkpoint's map).
    fn with_map(
        g: &Geometry,
        l2p: L2p,
        next_seq: Seq,
        in_band: bool,
        reset_zones: impl Iterator<Item = ZoneId>,
    ) -> Rebuild {
        let physical = physical_blocks(g).expect("validated geometry");
        let cap = g.zone_capacity_blocks;
        let mut is_reset = vec![false; g.zone_count as usize];
        for z in reset_zones {
            // A note naming a zone past the device is refused by the replay.
            if let Some(r) = is_reset.get_mut(z as usize) {
                *r = true;
            }
        }
        let mut in_reset_zones = BTreeMap::new();
        let mut p2l = P2l::new(physical);
        for (lba, ppa) in l2p.iter() {
            p2l.set(ppa);
            if is_reset[ppa.zone(cap) as usize] {
                in_reset_zones.insert(ppa, lba);
            }
        }
        Rebuild {
            l2p,
            p2l,
            next_seq,
            erase_counts: HashMap::new(),
            retired: Vec::new(),
            zone_capacity_blocks: cap,
            in_band,
            versions: HashMap::new(),
            reset_zones: is_reset,
            in_reset_zones,
        }
    }

    fn check_lba(&self, lba: Lba) -> Result<(), MountError> {
        if lba >= self.l2p.logical_blocks() {
            return Err(MountError::Damaged(format!(
                "a note or tag names block {lba}, past the logical end"
            )));
        }
        Ok(())
    }

    fn set(&mut self, lba: Lba, ppa: Ppa, crc: u32) {
        if let Some(old) = self.l2p.set(lba, ppa, crc) {
            self.cleared(old);
        }
        self.p2l.set(ppa);
        if self.reset_zones[ppa.zone(self.zone_capacity_blocks) as usize] {
            self.in_reset_zones.insert(ppa, lba);
        }
    }

    fn unmap(&mut self, lba: Lba) {
        if let Some(old) = self.l2p.unmap(lba) {
            self.cleared(old);
        }
    }

    fn cleared(&mut self, ppa: Ppa) {
        self.p2l.clear(ppa);
        self.in_reset_zones.remove(&ppa);
    }

    /// A version of `lba` with seq `version` is mapped at `ppa`.
    fn set_version(&mut self, lba: Lba, ppa: Ppa, crc: u32, version: Seq) {
        self.set(lba, ppa, crc);
        self.versions.insert(lba, version);
    }

    /// GC moved nothing live off a zone before its ZoneReset note, so any
    /// block still mapped into it here is stale: its newer place is a tag
    /// the reset of its own zone erased, which a later Relocated note
    /// restores. Left mapped, it would share the address with the zone's
    /// next data.
    fn zone_reset(&mut self, zone: ZoneId) {
        let cap = self.zone_capacity_blocks;
        let first = Ppa::new(zone, 0, cap);
        let last = Ppa::new(zone, cap - 1, cap);
        let stale: Vec<Lba> = self
            .in_reset_zones
            .range(first..=last)
            .map(|(_, &l)| l)
            .collect();
        for lba in stale {
            self.unmap(lba);
        }
    }

    /// Step 5: apply notes and tags in seq order.
    pub(super) fn replay(&mut self, events: &[Event], g: &Geometry) -> Result<(), MountError> {
        let physical = u64::from(physical_blocks(g).expect("validated geometry"));
        let ppa_ok = |p: Ppa| u64::from(p.0) < physical;
        for e in events {
            self.next_seq = self.next_seq.max(e.seq() + 1);
            match *e {
                Event::Tag { seq, lba, ppa, crc } => {
                    self.check_lba(lba)?;
                    self.set_version(lba, ppa, crc, seq);
                }
                Event::Note(Note::HostWrite {
                    lba, ppa, data_crc, ..
                }) => {
                    self.check_lba(lba)?;
                    if !ppa_ok(ppa) {
                        return Err(MountError::Damaged(format!(
                            "HostWrite note names block {}",
                            ppa.0
                        )));
                    }
                    self.set(lba, ppa, data_crc);
                }
                Event::Note(Note::Trim {
                    lba, block_count, ..
                }) => {
                    let end = lba
                        .checked_add(block_count)
                        .filter(|&e| e <= self.l2p.logical_blocks());
                    let Some(end) = end else {
                        return Err(MountError::Damaged(format!(
                            "Trim note {lba}+{block_count} past the end"
                        )));
                    };
                    for l in lba..end {
                        self.unmap(l);
                    }
                }
                Event::Note(Note::Reloc { lba, from, to, .. }) => {
                    self.check_lba(lba)?;
                    if !ppa_ok(to) {
                        return Err(MountError::Damaged(format!(
                            "Reloc note names block {}",
                            to.0
                        )));
                    }
                    if let Some((at, crc)) = self.l2p.get_with_crc(lba) {
                        if at == from {
                            self.set(lba, to, crc);
                        }
                    }
                }
                Event::Note(Note::Relocated {
                    lba,
                    to,
                    version_seq,
                    ..
                }) => {
                    self.check_lba(lba)?;
                    if self.in_band {
                        return Err(MountError::Damaged(
                            "a Relocated note in a volume with in-band tags".into(),
                        ));
                    }
                    if !ppa_ok(to) {
                        return Err(MountError::Damaged(format!(
                            "Relocated note names block {}",
                            to.0
                        )));
                    }
                    // A write of `lba` in flight when GC moved this version
                    // has a larger seq and was replayed already: it wins.
                    let newer = self.versions.get(&lba).is_some_and(|&v| v > version_seq);
                    if !newer {
                        self.set_version(lba, to, 0, version_seq);
                    }
                }
                Event::Note(Note::ZoneReset {
                    zone, erase_count, ..
                }) => {
                    if zone >= g.zone_count {
                        return Err(MountError::Damaged(format!(
                            "ZoneReset note names zone {zone} of {}",
                            g.zone_count
                        )));
                    }
                    self.erase_counts.insert(zone, erase_count);
                    self.zone_reset(zone);
                }
                Event::Note(Note::ZoneRetire { zone, .. }) => self.retired.push(zone),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 zones of 8 blocks, OOB tags; the checkpoint maps what `map` says.
    fn rebuild(map: &[(Lba, u32)], events: &[Event]) -> Rebuild {
        let g = Geometry {
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
            queue_depth: 8,
        };
        let mut l2p = L2p::with_format(16, EntryFormat::for_device(32, false));
        for &(lba, ppa) in map {
            l2p.set(lba, Ppa(ppa), 0);
        }
        let notes: Vec<Event> = events
            .iter()
            .filter_map(|e| match e {
                Event::Note(n) => Some(Event::Note(*n)),
                Event::Tag { .. } => None,
            })
            .collect();
        let resets = reset_seqs(&notes);
        let mut r = Rebuild::with_map(&g, l2p, 10, false, resets.keys().copied());
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

    /// Every mapped block is live in the reverse map and nothing else is.
    fn assert_consistent(r: &Rebuild) {
        let mapped: Vec<Ppa> = r.l2p.iter().map(|(_, p)| p).collect();
        for p in 0..32 {
            let live = r.p2l.is_valid(Ppa(p));
            assert_eq!(live, mapped.contains(&Ppa(p)), "block {p}");
        }
    }

    #[test]
    fn relocated_version_is_found_though_its_tag_is_gone() {
        // Block 1: in the checkpoint at 2; rewritten at seq 12 into zone 1
        // (tag erased with zone 1), moved by GC to 17.
        let r = rebuild(&[(1, 2)], &[relocated(20, 1, 17, 12), zone_reset(21, 1)]);
        assert_eq!(r.l2p.get(1), Some(Ppa(17)));
        assert_consistent(&r);
    }

    #[test]
    fn relocated_loses_to_a_newer_write() {
        // The write of seq 15 was in flight when GC moved version 12.
        let r = rebuild(&[(1, 2)], &[tag(15, 1, 9), relocated(20, 1, 17, 12)]);
        assert_eq!(r.l2p.get(1), Some(Ppa(9)));
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
        assert_eq!(r.l2p.get(1), Some(Ppa(17)));
        assert_eq!(r.l2p.get(5), Some(Ppa(2)));
        assert_consistent(&r);
    }
}
