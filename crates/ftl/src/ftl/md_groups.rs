//! Md groups: the record of nameless blocks without OOB (md placement log,
//! docs/format.md §11 "Md block"; docs/design.md "Nameless space", "In
//! band"). A block's seq, CRC, birth generation and md go to the log as a
//! NamelessWrite note and its NamelessMd notes before its write is
//! answered; the zone keeps them for as long as the block lives in md
//! blocks written after each group of `G` data blocks. Until a group's md
//! blocks are on the media its entries are here, in memory, and in every
//! checkpoint (section 22).

use super::{Ftl, Op};
use crate::backend::{Command, DeviceError, Outcome, ZoneId};
use crate::nameless::{MdBlock, MdBlockKind, MdEntry, MdLayout, NamelessAddr};

/// The open groups and where each nameless zone's last md landed.
#[derive(Debug)]
pub(super) struct MdGroups {
    pub(super) layout: MdLayout,
    pub(super) md_bytes: usize,
    /// Per zone: offset past its last data block, and where its last
    /// group's md blocks landed (`u32::MAX`: right after its data).
    pub(super) tails: Vec<(u32, u32)>,
    /// Groups whose md blocks are not on the media: at most one per zone
    /// (the lanes' zones, zones sealed early until their md is written,
    /// and a group whose md append failed).
    pub(super) open: Vec<OpenGroup>,
}

/// A group of a nameless zone whose md blocks are not written yet.
#[derive(Debug)]
pub(super) struct OpenGroup {
    pub(super) zone: ZoneId,
    pub(super) group: u64,
    /// One entry per data block allocated in the group, from its start
    /// (absent until the block lands).
    pub(super) entries: Vec<MdEntry>,
    /// No more data goes to the group: its md blocks go out once the
    /// zone's appends complete.
    sealed: bool,
    in_flight: bool,
    /// Md blocks of it written so far (appended one part at a time).
    written_blocks: u64,
    /// Where its first md block landed.
    md_at: Option<u64>,
    /// Its md append failed: it stays here (and in checkpoints) for as
    /// long as its zone holds a live block.
    pub(super) stuck: bool,
}

impl MdGroups {
    pub(super) fn new(layout: MdLayout, md_bytes: usize, zone_count: usize) -> MdGroups {
        MdGroups {
            layout,
            md_bytes,
            tails: vec![(0, u32::MAX); zone_count],
            open: Vec::new(),
        }
    }

    fn group_mut(&mut self, zone: ZoneId) -> Option<&mut OpenGroup> {
        self.open.iter_mut().find(|g| g.zone == zone)
    }

    pub(super) fn group(&self, zone: ZoneId) -> Option<&OpenGroup> {
        self.open.iter().find(|g| g.zone == zone)
    }

    /// A recovered group whose md is on the media nowhere the mount found.
    pub(super) fn add_stuck(&mut self, zone: ZoneId, group: u64, entries: Vec<MdEntry>) {
        self.open.push(OpenGroup {
            zone,
            group,
            entries,
            sealed: true,
            in_flight: false,
            written_blocks: 0,
            md_at: None,
            stuck: true,
        });
    }

    /// Data blocks a lane may still put in its zone at `allocated` (the
    /// offset its next block lands at): up to the end of the group's data
    /// blocks; 0 while the group's md blocks are due.
    pub(super) fn lane_room(&self, allocated: u64) -> u64 {
        let l = &self.layout;
        let k = l.group_of(allocated);
        let end = l.group_start(k) + l.group_data_blocks(k);
        end.saturating_sub(allocated)
    }

    /// `n` data blocks were allocated from `before` in `zone`.
    pub(super) fn allocated(&mut self, zone: ZoneId, before: u64, n: u64) {
        let (md_bytes, l) = (self.md_bytes, self.layout);
        let k = l.group_of(before);
        if self.group(zone).is_none() {
            self.open.push(OpenGroup {
                zone,
                group: k,
                entries: Vec::new(),
                sealed: false,
                in_flight: false,
                written_blocks: 0,
                md_at: None,
                stuck: false,
            });
        }
        let g = self.group_mut(zone).expect("just opened");
        assert!(
            g.group == k && !g.sealed,
            "zone {zone}: blocks allocated in group {k} beside open group {}",
            g.group
        );
        let start = l.group_start(k);
        for off in before..before + n {
            assert_eq!(
                off - start,
                g.entries.len() as u64,
                "zone {zone} allocation"
            );
            g.entries.push(MdEntry::absent(off as u32, md_bytes));
        }
        if before + n == start + l.group_data_blocks(k) {
            g.sealed = true;
        }
        self.tails[zone as usize] = ((before + n) as u32, u32::MAX);
    }

    /// The zone takes no more data: its open group's md goes out as is.
    pub(super) fn seal(&mut self, zone: ZoneId) {
        if let Some(g) = self.group_mut(zone) {
            g.sealed = true;
        }
    }

    /// The entry of the block at `offset` of `zone`, if its group is here.
    pub(super) fn entry(&self, zone: ZoneId, offset: u64) -> Option<&MdEntry> {
        let g = self.group(zone)?;
        let i = offset.checked_sub(self.layout.group_start(g.group))?;
        g.entries.get(i as usize)
    }

    /// Where the md block holding the entry of the block at `offset` of
    /// `zone` lies (its group's md written): (block offset, entry index).
    pub(super) fn md_location(&self, zone: ZoneId, offset: u64) -> Option<(u64, usize)> {
        let (data_end, last_md_at) = self.tails[zone as usize];
        self.layout.md_location(data_end, last_md_at, offset)
    }

    /// The data block at `offset` of `zone` landed with this record: its
    /// entry in the zone's open group (a write's, or a migration's copy).
    pub(super) fn landed(
        &mut self,
        zone: ZoneId,
        offset: u64,
        data_crc: u32,
        birth_gen: u32,
        md: Vec<u8>,
    ) {
        let start = self.layout.group_start(self.layout.group_of(offset));
        let g = self
            .group_mut(zone)
            .expect("the open group of a block that landed");
        let e = &mut g.entries[(offset - start) as usize];
        e.data_crc = data_crc;
        e.birth_gen = birth_gen;
        e.md = md;
    }

    /// The zone was reset: nothing of it is left.
    pub(super) fn zone_reset(&mut self, zone: ZoneId) {
        self.open.retain(|g| g.zone != zone);
        self.tails[zone as usize] = (0, u32::MAX);
    }

    /// Bytes section 22 may take by the next checkpoint: each open group
    /// at its full size, and one more per nameless lane (each may open a
    /// group meanwhile: the stripes, the moved and the leveling lane).
    /// O(1).
    pub(super) fn checkpoint_bytes(&self) -> u64 {
        let entry = MdEntry::encoded_bytes(self.md_bytes) as u64;
        let group = 8 + entry * self.layout.group_data_blocks(0);
        let lanes = u64::from(super::lane::NAMELESS_STRIPES) + 2;
        8 + (self.open.len() as u64 + lanes) * group
    }
}

impl Ftl {
    /// Whether nameless md lives in md groups (in band) rather than in OOB.
    pub(super) fn md_in_zones(&self) -> bool {
        self.nameless.md.is_some()
    }

    fn md_groups(&mut self) -> &mut MdGroups {
        self.nameless.md.as_mut().expect("md placement log")
    }

    /// A lane holding nameless `zone` booked `n` blocks from `before`.
    pub(super) fn md_allocated(&mut self, zone: ZoneId, before: u64, n: u64) {
        self.md_groups().allocated(zone, before, n);
    }

    /// Whether `zone` waits for its md blocks before its finish.
    pub(super) fn md_pending(&self, zone: ZoneId) -> bool {
        self.nameless
            .md
            .as_ref()
            .and_then(|m| m.group(zone))
            .is_some_and(|g| !g.stuck)
    }

    /// The next part of a sealed group's md blocks, once its zone's appends
    /// have completed (so they land after its data, in order).
    pub(super) fn next_md_command(&mut self) -> Option<(Op, Command)> {
        if self.read_only || !self.md_in_zones() {
            return None;
        }
        let bs = self.block_size();
        let max_blocks = u64::from(self.geo.max_append_blocks);
        let appends = &self.zone_appends;
        let m = self.nameless.md.as_mut().expect("md placement log");
        let (layout, md_bytes) = (m.layout, m.md_bytes);
        let g = m
            .open
            .iter_mut()
            .find(|g| g.sealed && !g.in_flight && !g.stuck && appends[g.zone as usize] == 0)?;
        let d = g.entries.len() as u64;
        if d == 0 || g.entries.iter().all(|e| !e.is_present()) {
            // Nothing of it lives: no md to keep.
            let zone = g.zone;
            m.open.retain(|g| g.zone != zone);
            self.md_group_done(zone, None);
            return None;
        }
        let total = layout.md_blocks_for(d);
        let first = g.written_blocks;
        let blocks = (total - first).min(max_blocks);
        let e = layout.entries_per_block;
        let mut data = Vec::with_capacity(blocks as usize * bs);
        for i in first..first + blocks {
            let lo = (i * e) as usize;
            let hi = ((i + 1) * e).min(d) as usize;
            let block = MdBlock {
                kind: MdBlockKind::Group,
                md_bytes,
                zone: g.zone,
                group: g.group as u32,
                first_entry: lo as u32,
                group_data_blocks: d as u32,
                entries: g.entries[lo..hi].to_vec(),
            };
            data.extend_from_slice(&block.encode(bs));
        }
        g.in_flight = true;
        let zone = g.zone;
        let oob = vec![0; self.geo.oob_bytes(blocks)];
        self.zones.record_write(zone, blocks, 0);
        self.zone_appends[zone as usize] += 1;
        self.stats.media_write_blocks += blocks;
        self.stats.nameless_md_write_blocks += blocks;
        Some((
            Op::MdWrite { zone, blocks },
            Command::Append {
                zone,
                data: data.into(),
                oob,
            },
        ))
    }

    pub(super) fn md_write_done(
        &mut self,
        zone: ZoneId,
        blocks: u64,
        result: Result<Outcome, DeviceError>,
    ) {
        self.append_settled(zone);
        let offset = match Self::appended_at(result) {
            Ok(offset) => offset,
            Err(e) => {
                // Kept in memory and in every checkpoint while its blocks
                // live: nothing of the record is lost.
                let g = self.md_groups().group_mut(zone).expect("md in flight");
                g.in_flight = false;
                g.stuck = true;
                self.stats.nameless_md_stuck_groups += 1;
                self.write_failed(zone, e);
                return;
            }
        };
        let m = self.md_groups();
        let layout = m.layout;
        let g = m.group_mut(zone).expect("md in flight");
        g.in_flight = false;
        let at = *g.md_at.get_or_insert(offset);
        g.written_blocks += blocks;
        let d = g.entries.len() as u64;
        if g.written_blocks < layout.md_blocks_for(d) {
            return;
        }
        let start = layout.group_start(g.group);
        m.open.retain(|g| g.zone != zone);
        let regular = start + d;
        m.tails[zone as usize] = (
            regular as u32,
            if at == regular { u32::MAX } else { at as u32 },
        );
        let end = at + layout.md_blocks_for(d);
        self.md_group_done(zone, (at == regular).then_some(end));
    }

    /// A group's md is done: written where the layout has it, up to
    /// `regular_end` (the lane holding the zone goes on with its next
    /// group if the zone has one), or elsewhere or not needed (`None`: the
    /// lane lets the zone go, finished if it is not full).
    fn md_group_done(&mut self, zone: ZoneId, regular_end: Option<u64>) {
        let layout = self.nameless.md.as_ref().expect("md placement log").layout;
        let cap = self.cap();
        let Some(st) = self.lanes.iter_mut().find(|l| l.zone == Some(zone)) else {
            return; // sealed: its finish was waiting for the md
        };
        let next = regular_end.unwrap_or(cap);
        let k = layout.group_of(next);
        let more = next < cap && layout.group_start(k) == next && layout.group_data_blocks(k) > 0;
        if more {
            st.allocated_blocks = next;
            return;
        }
        st.zone = None;
        if self.zones.get(zone).write_pointer_blocks() < cap {
            self.seal_zone(zone);
        }
    }

    /// The entry (data CRC, birth generation, md) of the nameless block at
    /// `addr` from memory, if its group's md blocks are not written.
    pub(super) fn md_in_memory(&self, addr: NamelessAddr) -> Option<&MdEntry> {
        let cap = self.cap();
        let ppa = addr.ppa();
        self.nameless
            .md
            .as_ref()?
            .entry(ppa.zone(cap), ppa.offset_blocks(cap))
    }
}
