//! In band (md placement log): the nameless blocks' records from the
//! checkpoint's open groups (section 22) and the NamelessWrite notes after
//! it, and, at mount, where each zone's last recovered group has its md on
//! the media (docs/format.md §11, crash analysis step 3).

use super::log_reader::read_one;
use super::replay::Rebuild;
use crate::addr::{Ppa, Seq};
use crate::backend::{Backend, BackendExt, Geometry, ZoneId, ZoneInfo, ZoneState};
use crate::error::MountError;
use crate::ftl::NAMELESS_MD_BYTES;
use crate::nameless::{MdBlock, MdBlockKind, MdEntry, MdLayout, NamelessAddr, NamelessImage};
use crate::note::{self, NAMELESS_MD_NOTE_BYTES};
use std::collections::BTreeMap;

/// What replay keeps of the md groups.
#[derive(Clone)]
pub(crate) struct RecoveredMd {
    pub(crate) layout: MdLayout,
    /// Per zone: data end and last md location, as the checkpoint has them.
    pub(crate) tails: Vec<(u32, u32)>,
    /// Per zone, its newest group with entries the media may lack: the
    /// checkpoint's open group, then the entries of NamelessWrite notes.
    /// An older group's md blocks went out before any block of a newer
    /// one was written, so a durable note of the newer one makes them
    /// durable too.
    pub(super) groups: BTreeMap<ZoneId, (u64, Vec<MdEntry>)>,
    /// A NamelessWrite note whose NamelessMd notes are still coming.
    pending: Option<PendingWrite>,
}

/// A NamelessWrite or NamelessMigrate note waiting for its md notes.
#[derive(Clone)]
struct PendingWrite {
    seq: Seq,
    ppa: Ppa,
    data_crc: u32,
    birth_gen: u32,
    /// A write: the address it replaced (or none); a migration: where the
    /// block moved from.
    link: Link,
    md: Vec<[u8; NAMELESS_MD_NOTE_BYTES]>,
}

#[derive(Clone, Copy)]
enum Link {
    Replaced(NamelessAddr),
    MovedFrom(NamelessAddr),
}

/// Blocks the mount reads past a group's stride, and before the write
/// pointer, looking for its md blocks: the most a group's md takes.
const MD_SCAN_SLACK_BLOCKS: u64 = crate::nameless::MD_BLOCKS_PER_GROUP;

/// NamelessMd notes after each NamelessWrite.
const MD_NOTES: usize = NAMELESS_MD_BYTES.div_ceil(NAMELESS_MD_NOTE_BYTES);

impl RecoveredMd {
    /// From a checkpoint with md placement log (or a fresh one).
    pub(super) fn from_image(g: &Geometry, n: &NamelessImage) -> RecoveredMd {
        let layout = MdLayout::new(
            g.block_size_bytes as usize,
            NAMELESS_MD_BYTES,
            g.zone_capacity_blocks,
        );
        let mut tails = vec![(0, u32::MAX); g.zone_count as usize];
        for r in &n.zones {
            tails[r.zone as usize] = (r.data_end, r.last_md_at.unwrap_or(u32::MAX));
        }
        let groups = n
            .open_md
            .iter()
            .map(|r| {
                let first = u64::from(r.entries[0].home_offset);
                (r.zone, (layout.group_of(first), r.entries.clone()))
            })
            .collect();
        RecoveredMd {
            layout,
            tails,
            groups,
            pending: None,
        }
    }

    /// `zone` was rewritten whole by an in-place job: its md blocks lie
    /// where a zone written full has them, and no group of it is left to
    /// settle.
    pub(crate) fn rewritten_full(&mut self, zone: ZoneId) {
        self.groups.remove(&zone);
        self.tails[zone as usize] = (self.layout.full_data_end() as u32, u32::MAX);
    }

    /// Tails that place every recovered group's blocks in their zone's
    /// last group (older groups are full, their md blocks regular).
    pub(crate) fn cover_groups(&mut self) {
        for (&zone, (k, entries)) in &self.groups {
            let end = (self.layout.group_start(*k) + entries.len() as u64) as u32;
            let t = &mut self.tails[zone as usize];
            if t.0 < end {
                *t = (end, u32::MAX);
            }
        }
    }

    /// The recovered entry of the block at `offset` of `zone`, if its group
    /// is one replay recovered.
    pub(crate) fn entry(&self, zone: ZoneId, offset: u64) -> Option<&MdEntry> {
        let (k, entries) = self.groups.get(&zone)?;
        if self.layout.group_of(offset) != *k {
            return None;
        }
        entries.get((offset - self.layout.group_start(*k)) as usize)
    }

    /// The block at `ppa` (offset in its zone) has entry `e`.
    fn record(&mut self, zone: ZoneId, offset: u64, e: MdEntry) {
        let l = self.layout;
        let k = l.group_of(offset);
        let i = (offset - l.group_start(k)) as usize;
        let slot = self.groups.entry(zone).or_insert((k, Vec::new()));
        if slot.0 < k {
            *slot = (k, Vec::new());
        } else if slot.0 > k {
            return; // an older group: written before the newer one's blocks
        }
        let entries = &mut slot.1;
        while entries.len() <= i {
            let off = l.group_start(k) + entries.len() as u64;
            entries.push(MdEntry::absent(off as u32, NAMELESS_MD_BYTES));
        }
        entries[i] = e;
    }
}

impl Rebuild {
    /// A NamelessWrite note: its NamelessMd notes follow (the group counts
    /// only whole, format.md §11).
    pub(super) fn nameless_write_note(
        &mut self,
        seq: Seq,
        ppa: Ppa,
        data_crc: u32,
        birth_gen: u32,
        replaced: NamelessAddr,
    ) -> Result<(), MountError> {
        self.nameless_md_pending(seq, ppa, data_crc, birth_gen, Link::Replaced(replaced))
    }

    /// A NamelessMigrate note with md placement log: its NamelessMd notes
    /// follow (the group counts only whole, format.md §11).
    pub(super) fn nameless_migrate_note(
        &mut self,
        seq: Seq,
        new: NamelessAddr,
        data_crc: u32,
        old: NamelessAddr,
    ) -> Result<(), MountError> {
        let (ppa, birth_gen) = (new.ppa(), new.generation());
        self.nameless_md_pending(seq, ppa, data_crc, birth_gen, Link::MovedFrom(old))
    }

    fn nameless_md_pending(
        &mut self,
        seq: Seq,
        ppa: Ppa,
        data_crc: u32,
        birth_gen: u32,
        link: Link,
    ) -> Result<(), MountError> {
        let Some(md) = self.nameless_md.as_mut() else {
            return Err(MountError::Damaged(format!(
                "NamelessWrite note {seq} on a volume with md in OOB"
            )));
        };
        // One still missing md notes was cut at the log's end (its notes,
        // of its seq, would have come right after it): it never counted.
        // Notes of higher seqs pushed before it in the log come after it
        // here, in seq order.
        md.pending = Some(PendingWrite {
            seq,
            ppa,
            data_crc,
            birth_gen,
            link,
            md: Vec::new(),
        });
        Ok(())
    }

    /// A NamelessMd note: the last of its group makes the block live.
    pub(super) fn nameless_md_note(
        &mut self,
        seq: Seq,
        bytes: [u8; NAMELESS_MD_NOTE_BYTES],
    ) -> Result<(), MountError> {
        let md = self.nameless_md.as_mut();
        let Some(p) = md.and_then(|m| m.pending.as_mut()).filter(|p| p.seq == seq) else {
            return Err(MountError::Damaged(format!(
                "NamelessMd note {seq} without its NamelessWrite or NamelessMigrate"
            )));
        };
        p.md.push(bytes);
        if p.md.len() < MD_NOTES {
            return Ok(());
        }
        let p = self
            .nameless_md
            .as_mut()
            .and_then(|m| m.pending.take())
            .expect("pending");
        let md = note::nameless_md(NAMELESS_MD_BYTES, &p.md)
            .map_err(|e| MountError::Damaged(format!("NamelessMd notes {seq}: {e}")))?;
        let cap = self.zone_capacity_blocks;
        let zone = p.ppa.zone(cap);
        let z = zone as usize;
        if z >= self.nameless_now.len()
            || !self.nameless_now[z]
            || p.birth_gen != self.nameless_gens[z]
        {
            return Err(MountError::Damaged(format!(
                "NamelessWrite note {seq}: block {} is not in a nameless zone of generation {}",
                p.ppa.0, p.birth_gen
            )));
        }
        let offset = p.ppa.offset_blocks(cap);
        match p.link {
            Link::Replaced(replaced) => self.nameless_tag(p.ppa, p.birth_gen, replaced)?,
            Link::MovedFrom(old) => {
                self.nameless_migrate(seq, old, NamelessAddr::new(p.ppa, p.birth_gen))?
            }
        }
        let entry = MdEntry {
            home_offset: offset as u32,
            data_crc: p.data_crc,
            birth_gen: p.birth_gen,
            md,
        };
        self.nameless_md
            .as_mut()
            .expect("md placement log")
            .record(zone, offset, entry);
        Ok(())
    }

    /// A nameless zone was reset: nothing of its md is left.
    pub(super) fn nameless_md_reset(&mut self, zone: ZoneId) {
        if let Some(m) = self.nameless_md.as_mut() {
            m.groups.remove(&zone);
            m.tails[zone as usize] = (0, u32::MAX);
        }
    }

    /// The log ended inside a NamelessWrite's notes: that write never
    /// counted (its reply waited for all of them).
    pub(super) fn nameless_md_end(&mut self) {
        if let Some(m) = self.nameless_md.as_mut() {
            m.pending = None;
        }
    }
}

/// Where the mount left each recovered group.
pub(crate) struct SettledMd {
    pub(crate) layout: MdLayout,
    pub(crate) tails: Vec<(u32, u32)>,
    /// Groups with md on the media nowhere and no room to write it.
    pub(crate) stuck: Vec<(ZoneId, u64, Vec<MdEntry>)>,
}

/// Mount: for each zone's newest recovered group with a live block, finds
/// md blocks on the media that hold every live entry as recovered (the
/// group's own, or a copy an earlier mount wrote), else writes them at
/// the write pointer (recorded as `last_md_at`), else keeps the group in
/// memory. Before the zones are finished: a zone written to its capacity
/// has its group's md blocks if any ever landed.
pub(crate) fn settle<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    md: RecoveredMd,
    inplace_victim: Option<ZoneId>,
    is_live: impl Fn(Ppa) -> bool,
    reports: &mut [ZoneInfo],
) -> Result<SettledMd, MountError> {
    let cap = g.zone_capacity_blocks;
    let mut md = md;
    if let Some(v) = inplace_victim {
        // The mount's redo rewrites it whole, its md with it.
        md.rewritten_full(v);
    }
    md.cover_groups();
    let l = md.layout;
    let mut tails = md.tails;
    let mut stuck = Vec::new();
    let mut wrote = false;
    for (zone, (k, entries)) in md.groups {
        let start = l.group_start(k);
        let live: Vec<&MdEntry> = entries
            .iter()
            .filter(|e| e.is_present() && is_live(Ppa::new(zone, u64::from(e.home_offset), cap)))
            .collect();
        let Some(last) = live.last().map(|e| u64::from(e.home_offset)) else {
            continue; // nothing of it lives: its md is never read
        };
        let wp = reports[zone as usize].write_pointer_blocks;
        if let Some((d, at)) = find_md(backend, &l, zone, k, last + 1, wp, &live)? {
            let regular = start + d;
            tails[zone as usize] = (
                regular as u32,
                if at == regular { u32::MAX } else { at as u32 },
            );
            continue;
        }
        // Its data blocks up to the last live one, entries from recovery.
        let d = last + 1 - start;
        let blocks = l.md_blocks_for(d);
        let full = matches!(
            reports[zone as usize].state,
            ZoneState::Full | ZoneState::ReadOnly
        );
        if full || wp + blocks > cap {
            let mut kept = entries;
            kept.truncate(d as usize);
            stuck.push((zone, k, kept));
            tails[zone as usize] = ((start + d) as u32, u32::MAX);
            continue;
        }
        let data = encode_group(g, &l, zone, k, &entries[..d as usize]);
        let at = append_in_parts(backend, g, zone, data, blocks)?;
        reports[zone as usize].write_pointer_blocks = at + blocks;
        tails[zone as usize] = ((start + d) as u32, at as u32);
        wrote = true;
    }
    if wrote {
        // Durable before the checkpoint that records where they are.
        backend.flush().map_err(|e| MountError::Device {
            step: "mount: flushing nameless md blocks",
            source: e,
        })?;
    }
    Ok(SettledMd {
        layout: l,
        tails,
        stuck,
    })
}

/// Appends `blocks` blocks of `data` to `zone` in appends the device takes,
/// one after another (so they land in order); where the first landed.
fn append_in_parts<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    zone: ZoneId,
    data: Vec<u8>,
    blocks: u64,
) -> Result<u64, MountError> {
    let bs = g.block_size_bytes as usize;
    let max = u64::from(g.max_append_blocks).max(1);
    let mut first = None;
    let mut done = 0;
    while done < blocks {
        let n = (blocks - done).min(max);
        let part = data[done as usize * bs..(done + n) as usize * bs].to_vec();
        let at = backend
            .append_blocks(zone, part, vec![0; g.oob_bytes(n)])
            .map_err(|e| MountError::Device {
                step: "mount: writing a nameless group's md blocks",
                source: e,
            })?;
        first.get_or_insert(at);
        done += n;
    }
    Ok(first.expect("at least one md block"))
}

/// The md blocks of group `k` of `zone` holding `entries` 0 .. d.
pub(super) fn encode_group(
    g: &Geometry,
    l: &MdLayout,
    zone: ZoneId,
    k: u64,
    entries: &[MdEntry],
) -> Vec<u8> {
    let bs = g.block_size_bytes as usize;
    let e = l.entries_per_block as usize;
    let d = entries.len();
    entries
        .chunks(e)
        .enumerate()
        .flat_map(|(i, chunk)| {
            MdBlock {
                kind: MdBlockKind::Group,
                md_bytes: NAMELESS_MD_BYTES,
                zone,
                group: k as u32,
                first_entry: (i * e) as u32,
                group_data_blocks: d as u32,
                entries: chunk.to_vec(),
            }
            .encode(bs)
        })
        .collect()
}

/// The newest run of md blocks of group `k` of `zone` between `from` and
/// the write pointer whose entries match every live one: (the group's data
/// blocks, the run's first offset).
#[allow(clippy::too_many_arguments)]
fn find_md<B: Backend>(
    backend: &mut B,
    l: &MdLayout,
    zone: ZoneId,
    k: u64,
    from: u64,
    wp: u64,
    live: &[&MdEntry],
) -> Result<Option<(u64, u64)>, MountError> {
    let mut blocks: BTreeMap<u64, MdBlock> = BTreeMap::new();
    // Where the group's md lands (its md blocks follow its data) and the
    // last blocks before the write pointer (a copy an earlier mount
    // wrote): a bounded number of reads per zone.
    let window = l.group_start(k) + l.group_stride() + MD_SCAN_SLACK_BLOCKS;
    let tail = wp.saturating_sub(MD_SCAN_SLACK_BLOCKS).max(from);
    let offsets = (from..wp.min(window)).chain(tail.max(window)..wp);
    for off in offsets {
        let Some((data, _)) = read_one(backend, zone, off, "mount: reading md blocks")? else {
            continue;
        };
        match MdBlock::decode(&data, NAMELESS_MD_BYTES) {
            Ok(b) if b.kind == MdBlockKind::Group && b.zone == zone && u64::from(b.group) == k => {
                blocks.insert(off, b);
            }
            _ => {}
        }
    }
    let e = l.entries_per_block;
    // Each block with first_entry 0 may start a run.
    for (&at, first) in blocks.iter().rev() {
        if first.first_entry != 0 {
            continue;
        }
        let d = u64::from(first.group_data_blocks);
        let n = l.md_blocks_for(d);
        let run: Option<Vec<&MdBlock>> = (0..n)
            .map(|i| {
                blocks.get(&(at + i)).filter(|b| {
                    u64::from(b.first_entry) == i * e && u64::from(b.group_data_blocks) == d
                })
            })
            .collect();
        let Some(run) = run else { continue };
        let start = l.group_start(k);
        let holds = |want: &&MdEntry| {
            let j = u64::from(want.home_offset) - start;
            j < d && run[(j / e) as usize].entries.get((j % e) as usize) == Some(*want)
        };
        if live.iter().all(holds) {
            return Ok(Some((d, at)));
        }
    }
    Ok(None)
}
