//! In-place collection at mount (format.md §11, crash analysis step 9):
//! replay of the `InPlaceStaged` and `InPlaceDone` notes, and the redo of
//! a job the log leaves pending. The redo resets the victim and rewrites
//! it from the scratch zone's staged copies, every live block at its home
//! offset with its original tag and every gap padded, then flushes; the
//! mount's checkpoint then ends the job (a cut before it redoes it again:
//! the scratch zone is untouched until a job is over).

use super::replay::Rebuild;
use crate::addr::{Ppa, Seq};
use crate::backend::{again_after_abort, Backend, BackendExt, DeviceError, Geometry, ZoneId};
use crate::error::MountError;
use crate::ftl::NAMELESS_MD_BYTES;
use crate::mapping::Mapping;
use crate::nameless::{MdEntry, MdLayout, NamelessAddr, NamelessTag, NamelessTagKind};
use crate::tag::{DataCrcImpl, Tag, TagKind};
use crate::zone::ZoneTable;
use std::collections::VecDeque;

/// A job whose `InPlaceStaged` note the log holds and no `InPlaceDone`
/// after it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingInPlace {
    pub victim: ZoneId,
    pub scratch: ZoneId,
    /// Staged copies in the scratch zone, from offset 0.
    pub staged_blocks: u64,
    /// Seq of its `InPlaceStaged` note.
    pub staged_seq: Seq,
}

impl Rebuild {
    /// An `InPlaceStaged` note: the job is pending until its `InPlaceDone`,
    /// and the victim's `gen` is its gap generation (`gen + 1`; 0 from a
    /// build that filled no gap). `first_scratch_offset` is the note's
    /// (this build writes 0).
    pub(super) fn inplace_staged(
        &mut self,
        g: &Geometry,
        job: PendingInPlace,
        gap_gen: u32,
        first_scratch_offset: u32,
    ) -> Result<(), MountError> {
        let PendingInPlace {
            victim,
            scratch,
            staged_blocks,
            staged_seq: seq,
        } = job;
        let damaged = |why: &str| {
            MountError::Damaged(format!("InPlaceStaged note {seq} (victim {victim}): {why}"))
        };
        if self.inplace_pending.is_some() {
            return Err(damaged("another job is pending"));
        }
        if victim >= g.zone_count || scratch >= g.zone_count || victim == scratch {
            return Err(damaged("zones out of range"));
        }
        if !self.nameless_now[victim as usize] {
            return Err(damaged("the victim is not a nameless zone"));
        }
        let gen = self.nameless_gens[victim as usize];
        if gap_gen != 0 && Some(gap_gen) != gen.checked_add(1) {
            return Err(damaged("a gap generation other than the victim's gen + 1"));
        }
        // This build stages from the scratch zone's start.
        if first_scratch_offset != 0 {
            return Err(damaged("a scratch offset this build never writes"));
        }
        if staged_blocks > g.zone_capacity_blocks {
            return Err(damaged("more staged blocks than a zone holds"));
        }
        if gap_gen != 0 {
            self.nameless_gens[victim as usize] = gap_gen;
        }
        self.inplace_pending = Some(job);
        Ok(())
    }

    /// An `InPlaceDone` note: the pending job is over, and its gap fills
    /// (`gap_fill_blocks` of them, the note says) are live; the blocks its
    /// overwrite fills replace are freed now, not at the fills' seqs
    /// (format.md §11, step 9, "Overwrite fills").
    pub(super) fn inplace_done(
        &mut self,
        seq: Seq,
        victim: ZoneId,
        erase_count: u32,
        gap_fill_blocks: u32,
    ) -> Result<(), MountError> {
        match self.inplace_pending.take() {
            Some(job) if job.victim == victim => {
                self.erase_counts.insert(victim, erase_count);
                if let Some(md) = self.nameless_md.as_mut() {
                    // The rewrite wrote every group's md blocks where the
                    // full layout has them, durable before this note.
                    md.rewritten_full(victim);
                }
                let fills = std::mem::take(&mut self.inplace_fills);
                // The victim's scan finds at most the fills the job wrote
                // (fewer where a later reset of the zone erased them).
                if fills.len() > gap_fill_blocks as usize {
                    return Err(MountError::Damaged(format!(
                        "InPlaceDone note {seq} for zone {victim}: {gap_fill_blocks} gap fills \
                         noted, {} found in the zone",
                        fills.len()
                    )));
                }
                for (ppa, birth_gen, link) in fills {
                    self.nameless_live(ppa, birth_gen)?;
                    if !link.is_none() {
                        self.nameless_free(link.ppa(), link.generation());
                    }
                }
                Ok(())
            }
            _ => Err(MountError::Damaged(format!(
                "InPlaceDone note {seq} for zone {victim}: no job pending for it"
            ))),
        }
    }
}

fn dev(step: &'static str) -> impl Fn(DeviceError) -> MountError {
    move |source| MountError::Device { step, source }
}

/// A staged copy read back from the scratch zone.
struct Staged {
    home: u64,
    data: Vec<u8>,
    tag: NamelessTag,
    md: Vec<u8>,
}

/// Redoes `job` (format.md §11, crash step 9): resets the victim, rewrites
/// it to its capacity from the staged copies (a block `mapping` holds
/// live at its home offset, a pad block elsewhere), flushes, and counts
/// the erase and the writes in `zones`.
///
/// In band (`layout` given) the blocks and their entries come from the
/// scratch zone's staging index, and the victim is written in the
/// full-zone layout with every group's md blocks (format.md §11, crash
/// step 9, "Placement log").
pub(crate) fn redo<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    job: &PendingInPlace,
    mapping: &Mapping,
    zones: &mut ZoneTable,
    crc: DataCrcImpl,
    layout: Option<MdLayout>,
) -> Result<(), MountError> {
    if let Some(l) = layout {
        return redo_in_band(backend, g, job, mapping, zones, crc, &l);
    }
    let cap = g.zone_capacity_blocks;
    let span = u64::from(g.max_transfer_blocks.min(g.max_append_blocks)).clamp(1, 64);
    again_after_abort(|| backend.reset_zone(job.victim)).map_err(dev("mount: in-place reset"))?;
    let mut staged = std::collections::VecDeque::new();
    let mut read_back = 0;
    let mut newest = 0;
    let mut at = 0;
    while at < cap {
        if staged.is_empty() && read_back < job.staged_blocks {
            let n = span.min(job.staged_blocks - read_back);
            staged.extend(read_staged(backend, g, job, read_back, n)?);
            read_back += n;
        }
        let end = (at + span).min(cap);
        let (mut data, mut oob) = (Vec::new(), Vec::new());
        let mut o = at;
        while o < end {
            if staged.is_empty() && read_back < job.staged_blocks {
                break;
            }
            let home = staged.front().is_some_and(|s: &Staged| s.home == o);
            let s = if home { staged.pop_front() } else { None };
            match s.filter(|_| mapping.is_live(Ppa::new(job.victim, o, cap))) {
                Some(s) => {
                    let tag = NamelessTag {
                        kind: NamelessTagKind::Data,
                        link: NamelessAddr::NONE,
                        ..s.tag
                    };
                    push_block(&mut data, &mut oob, g, &s.data, |out| {
                        tag.encode(&s.md, out)
                    });
                    newest = newest.max(tag.seq);
                }
                None => {
                    let zeros = vec![0u8; g.block_size_bytes as usize];
                    let pad = Tag {
                        kind: TagKind::Pad,
                        epoch: 0,
                        lba: u64::MAX,
                        seq: 0,
                        data_crc: crc.checksum(&zeros),
                    };
                    push_block(&mut data, &mut oob, g, &zeros, |out| pad.encode(out));
                }
            }
            o += 1;
        }
        if o > at {
            backend
                .write_blocks(job.victim, at, data, oob)
                .map_err(dev("mount: in-place rewrite"))?;
            at = o;
        }
    }
    again_after_abort(|| backend.flush()).map_err(dev("mount: in-place flush"))?;
    zones.reset_in_place(job.victim);
    zones.record_write(job.victim, cap, newest);
    Ok(())
}

/// Appends one block and its OOB (written by `tag`) to a write's buffers.
fn push_block(
    data: &mut Vec<u8>,
    oob: &mut Vec<u8>,
    g: &Geometry,
    block: &[u8],
    tag: impl FnOnce(&mut [u8]),
) {
    data.extend_from_slice(block);
    let at = oob.len();
    oob.resize(at + g.oob_size_bytes as usize, 0);
    tag(&mut oob[at..]);
}

/// `n` staged copies of `job` from scratch offset `first`.
fn read_staged<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    job: &PendingInPlace,
    first: u64,
    n: u64,
) -> Result<Vec<Staged>, MountError> {
    let (bs, ob, cap) = (
        g.block_size_bytes as usize,
        g.oob_size_bytes as usize,
        g.zone_capacity_blocks,
    );
    let (data, oob) = again_after_abort(|| backend.read_blocks(job.scratch, first, n as u32))
        .map_err(dev("mount: reading staged copies"))?;
    (0..n as usize)
        .map(|i| {
            let damaged = || {
                MountError::Damaged(format!(
                    "in-place job of zone {}: scratch zone {} offset {} holds no staged copy",
                    job.victim,
                    job.scratch,
                    first + i as u64
                ))
            };
            let (tag, md) = NamelessTag::decode(&oob[i * ob..(i + 1) * ob])
                .ok()
                .flatten()
                .ok_or_else(damaged)?;
            let home = tag.link.ppa();
            if tag.kind != NamelessTagKind::Staged || home.zone(cap) != job.victim {
                return Err(damaged());
            }
            Ok(Staged {
                home: home.offset_blocks(cap),
                data: data[i * bs..(i + 1) * bs].to_vec(),
                tag,
                md: md.to_vec(),
            })
        })
        .collect()
}

/// The redo in band: the victim reset, then written group by group (each
/// data offset a block the replay holds live, from the scratch zone, or a
/// pad; then the group's md blocks), the blocks past the last group
/// padded, and a flush.
fn redo_in_band<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    job: &PendingInPlace,
    mapping: &Mapping,
    zones: &mut ZoneTable,
    crc: DataCrcImpl,
    l: &MdLayout,
) -> Result<(), MountError> {
    let (cap, bs) = (g.zone_capacity_blocks, g.block_size_bytes as usize);
    again_after_abort(|| backend.reset_zone(job.victim)).map_err(dev("mount: in-place reset"))?;
    let scratch_groups = job.staged_blocks.div_ceil(l.group_blocks);
    let (mut staged, mut next_group) = (VecDeque::new(), 0);
    let mut at = 0;
    for k in 0..l.groups() {
        let (start, d) = (l.group_start(k), l.group_data_blocks(k));
        let mut entries = Vec::with_capacity(d as usize);
        let mut data = Vec::with_capacity((d as usize + 8) * bs);
        for o in start..start + d {
            while staged.is_empty() && next_group < scratch_groups {
                staged.extend(read_staged_group(backend, g, l, job, next_group, crc)?);
                next_group += 1;
            }
            let s = match staged.front() {
                Some((e, _)) if u64::from(e.home_offset) == o => staged.pop_front(),
                _ => None,
            };
            match s.filter(|_| mapping.is_live(Ppa::new(job.victim, o, cap))) {
                Some((e, block)) => {
                    data.extend_from_slice(&block);
                    entries.push(e);
                }
                None => {
                    data.resize(data.len() + bs, 0);
                    entries.push(MdEntry::absent(o as u32, NAMELESS_MD_BYTES));
                }
            }
        }
        data.extend(super::md::encode_group(g, l, job.victim, k, &entries));
        at = write_run(backend, g, job.victim, at, data)?;
    }
    // Blocks the last group leaves over.
    let rest = vec![0; (cap - at) as usize * bs];
    write_run(backend, g, job.victim, at, rest)?;
    if let Some((e, _)) = staged.front() {
        return Err(MountError::Damaged(format!(
            "in-place job of zone {}: staged block of home offset {} is no data block",
            job.victim, e.home_offset
        )));
    }
    again_after_abort(|| backend.flush()).map_err(dev("mount: in-place flush"))?;
    zones.reset_in_place(job.victim);
    zones.record_write(job.victim, cap, 0);
    Ok(())
}

/// Writes `data` at `at` of `zone` in commands the device takes; returns
/// the offset past it.
fn write_run<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    zone: ZoneId,
    at: u64,
    data: Vec<u8>,
) -> Result<u64, MountError> {
    let bs = g.block_size_bytes as usize;
    let span = u64::from(g.max_transfer_blocks.min(g.max_append_blocks)).clamp(1, 64);
    let mut at = at;
    for part in data.chunks(span as usize * bs) {
        let n = (part.len() / bs) as u64;
        backend
            .write_blocks(zone, at, part.to_vec(), vec![0; g.oob_bytes(n)])
            .map_err(dev("mount: in-place rewrite"))?;
        at += n;
    }
    Ok(at)
}

/// In band: the staged blocks of scratch group `k` with their entries,
/// from its staging index; the index must decode as that group's and each
/// block's CRC match its entry (the scratch zone was flushed before the
/// job's note), else `Damaged`.
fn read_staged_group<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    l: &MdLayout,
    job: &PendingInPlace,
    k: u64,
    crc: DataCrcImpl,
) -> Result<Vec<(MdEntry, Vec<u8>)>, MountError> {
    let bs = g.block_size_bytes as usize;
    let d = job
        .staged_blocks
        .saturating_sub(k * l.group_blocks)
        .min(l.group_blocks);
    let start = l.group_start(k);
    let damaged = |what: String| {
        MountError::Damaged(format!(
            "in-place job of zone {}: scratch zone {} group {k}: {what}",
            job.victim, job.scratch
        ))
    };
    let md_blocks = l.md_blocks_for(d);
    let index = read_scratch(backend, g, job.scratch, start + d, md_blocks)?;
    let entries =
        crate::ftl::staging_index_entries(&index, bs, l, NAMELESS_MD_BYTES, job.victim, k, d)
            .ok_or_else(|| damaged("no staging index".into()))?;
    let data = read_scratch(backend, g, job.scratch, start, d)?;
    entries
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let block = data[i * bs..(i + 1) * bs].to_vec();
            if crc.checksum(&block) != e.data_crc {
                return Err(damaged(format!("staged block {i} does not match its CRC")));
            }
            Ok((e, block))
        })
        .collect()
}

/// `n` blocks of the scratch zone from `first`, read in commands the
/// device takes.
fn read_scratch<B: Backend>(
    backend: &mut B,
    g: &Geometry,
    zone: ZoneId,
    first: u64,
    n: u64,
) -> Result<Vec<u8>, MountError> {
    let span = u64::from(g.max_transfer_blocks).clamp(1, 64);
    let mut out = Vec::with_capacity(n as usize * g.block_size_bytes as usize);
    let mut at = first;
    while at < first + n {
        let k = span.min(first + n - at);
        let (data, _) = again_after_abort(|| backend.read_blocks(zone, at, k as u32))
            .map_err(dev("mount: reading staged copies"))?;
        out.extend_from_slice(&data);
        at += k;
    }
    Ok(out)
}
