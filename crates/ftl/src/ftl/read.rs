//! Host reads: planning them against the buffer and the map, the device
//! reads that serve them, and checking the blocks that come back.

use super::request::{Extent, Reply, ReplyData, MAX_EXTENT_QUERY_BLOCKS};
use super::{Ftl, Op};
use crate::addr::{Lba, Ppa};
use crate::backend::{Command, DeviceError, Outcome, ReadPriority, HOST_ATTEMPTS};
use crate::error::IoError;
use crate::history::{SnapshotError, SnapshotId};
use crate::mapping::Resolved;
use crate::slab::Key;
use crate::superblock::TagMode;
use crate::tag::{Tag, TAG_BYTES};

#[derive(Debug)]
pub(super) struct ReadReq {
    /// The host's request id, for the reply.
    pub(super) id: u64,
    /// The reply, assembled: buffered blocks, zeros, then each part's data.
    data: Vec<u8>,
    parts_left: u32,
    error: Option<IoError>,
}

#[derive(Debug)]
/// Blocks `first_lba..+count` of a request, at consecutive physical blocks.
pub(super) struct ReadPart {
    /// The request's key in `Ftl::reads`; `Key::NONE` when this part is the
    /// whole request (one device read serves it all): it replies to `id`
    /// with the device's buffer as is, with no entry in `Ftl::reads`.
    pub(super) req: Key,
    /// The host's request id.
    pub(super) id: u64,
    dst_block: u32,
    first_lba: Lba,
    count: u32,
    pub(super) ppa: Ppa,
    /// Data CRCs when the tag is not in OOB (empty in OOB mode).
    crcs: Vec<u32>,
    /// Which blocks were reached through a shared entry, whose tags name
    /// their origin rather than this LBA (empty when none was).
    shared: Vec<bool>,
    attempts: u8,
    /// Times the read failed on the host side (`DeviceError::HostIo`: a
    /// controller reset aborted it); counted apart from `attempts`, as the
    /// device's idempotent commands count them (`HOST_ATTEMPTS`).
    host_aborts: u8,
}

/// Attempts at a read that fails with a media error before its blocks are
/// given up on (NAND read errors are often transient: read retry).
pub(super) const READ_ATTEMPTS: u8 = 3;
/// Blocks looked up in the L2P in one pass when reads are planned (bounds
/// the scratch; a larger request is looked up alone).
const READ_LOOKUP_BATCH_BLOCKS: usize = 256;

impl Ftl {
    pub(super) fn extents(&self, lba: Lba, block_count: u32) -> Result<ReplyData, IoError> {
        let in_fork = self
            .mapping
            .forks()
            .holds_range(lba, u64::from(block_count));
        if !in_fork {
            self.check_map_query(lba, block_count)?;
        } else if block_count > MAX_EXTENT_QUERY_BLOCKS {
            self.check_map_query(0, block_count)?;
        }
        let mut runs: Vec<Extent> = Vec::new();
        for l in lba..lba + u64::from(block_count) {
            let on_media = if in_fork {
                self.mapping.resolve_live(l).is_some()
            } else {
                self.mapping.get(l).is_some()
            };
            let mapped = on_media || self.buffer.lookup(l).is_some();
            match runs.last_mut() {
                Some(run) if run.mapped == mapped => run.block_count += 1,
                _ => runs.push(Extent {
                    block_count: 1,
                    mapped,
                }),
            }
        }
        Ok(ReplyData::Extents(runs))
    }

    /// Answers `Request::Changed`.
    pub(super) fn changed(
        &self,
        since: SnapshotId,
        until: Option<SnapshotId>,
        lba: Lba,
        block_count: u32,
    ) -> Result<ReplyData, IoError> {
        self.check_map_query(lba, block_count)?;
        let history = self.mapping.history();
        let point = |id| {
            let s = history.by_id(id).ok_or(SnapshotError::NoSuchId(id))?;
            Ok::<_, IoError>((s.create_seq, s.epoch))
        };
        let a = point(since)?;
        let b = until.map(point).transpose()?;
        let (older, newer) = match b {
            Some(b) if b.0 < a.0 => (b, Some(a)),
            _ => (a, b),
        };
        let end = lba + u64::from(block_count);
        let mut changed = self.mapping.changed(lba, end, older, newer);
        if newer.is_none() {
            // Buffered writes came after every snapshot (a create drains).
            changed.extend(self.buffer.held_in(lba, end));
            changed.sort_unstable();
            changed.dedup();
        }
        let mut runs: Vec<(Lba, u64)> = Vec::new();
        for l in changed {
            match runs.last_mut() {
                Some((start, n)) if *start + *n == l => *n += 1,
                _ => runs.push((l, 1)),
            }
        }
        Ok(ReplyData::Changed(runs))
    }

    /// Checks a map query's range (`Extents`, `Changed`).
    fn check_map_query(&self, lba: Lba, block_count: u32) -> Result<(), IoError> {
        if block_count > MAX_EXTENT_QUERY_BLOCKS {
            return Err(IoError::TooLarge {
                block_count: u64::from(block_count),
                max_blocks: MAX_EXTENT_QUERY_BLOCKS,
            });
        }
        let logical_blocks = self.layout.logical_blocks;
        if lba
            .checked_add(u64::from(block_count))
            .is_none_or(|end| end > logical_blocks)
        {
            return Err(IoError::OutOfRange {
                lba,
                block_count: u64::from(block_count),
                logical_blocks,
            });
        }
        Ok(())
    }

    /// Accepts a read; its blocks are looked up at the next poll.
    pub(super) fn start_read(
        &mut self,
        id: u64,
        lba: Lba,
        block_count: u32,
        snapshot: Option<SnapshotId>,
    ) -> Result<Option<ReplyData>, IoError> {
        self.check_range(lba, u64::from(block_count))?;
        let at = match snapshot {
            None => None,
            Some(_) if lba >= self.layout.logical_blocks => {
                // A snapshot is of the volume, not of its forks.
                return Err(IoError::OutOfRange {
                    lba,
                    block_count: u64::from(block_count),
                    logical_blocks: self.layout.logical_blocks,
                });
            }
            Some(s) => {
                let found = self.mapping.history().by_id(s);
                let snap = found.ok_or(SnapshotError::NoSuchId(s))?;
                Some((s, snap.create_seq, snap.epoch))
            }
        };
        if block_count == 0 {
            return Ok(Some(ReplyData::Read(Vec::new())));
        }
        self.stats.host_read_blocks += u64::from(block_count);
        self.unplanned_reads.push_back((id, lba, block_count, at));
        Ok(None)
    }

    /// Plans every accepted read, a batch at a time: first the L2P lookups
    /// of the whole batch in one tight loop (they are independent, so their
    /// cache misses overlap instead of stalling one request each), then
    /// each request's device reads. A read takes its snapshot of the map
    /// here, between its request and its reply.
    pub(super) fn plan_reads(&mut self) {
        while !self.unplanned_reads.is_empty() {
            let mut lookups = std::mem::take(&mut self.read_lookups);
            lookups.clear();
            let mut requests = 0;
            for &(_, lba, block_count, snapshot) in &self.unplanned_reads {
                let full = lookups.len() + block_count as usize > READ_LOOKUP_BATCH_BLOCKS;
                if full && requests > 0 {
                    break;
                }
                let blocks = lba..lba + u64::from(block_count);
                match snapshot {
                    None if lba >= self.layout.logical_blocks => {
                        // A fork: the blocks it has not changed are its base's.
                        lookups.extend(blocks.map(|l| self.mapping.resolve_live(l)))
                    }
                    None => lookups.extend(blocks.map(|l| self.mapping.resolve(l))),
                    Some((_, c, e)) => {
                        lookups.extend(blocks.map(|l| self.mapping.resolve_at(l, c, e)))
                    }
                }
                requests += 1;
            }
            let mut at = 0;
            for _ in 0..requests {
                let (id, lba, block_count, snapshot) =
                    self.unplanned_reads.pop_front().expect("counted");
                let ppas = &lookups[at..at + block_count as usize];
                at += ppas.len();
                // Deleted since the read was accepted: its sweep may have
                // released what the lookups would have found.
                if let Some((s, ..)) = snapshot {
                    if self.mapping.history().by_id(s).is_none() {
                        let result = Err(SnapshotError::NoSuchId(s).into());
                        self.replies.push_back(Reply { id, result });
                        continue;
                    }
                }
                // A snapshot's blocks are all on the media: its create
                // drained the buffer, and what the buffer holds is newer.
                let live = snapshot.is_none();
                if let Some(data) = self.plan_read(id, lba, ppas, live) {
                    self.replies.push_back(Reply {
                        id,
                        result: Ok(ReplyData::Read(data)),
                    });
                }
            }
            self.read_lookups = lookups;
        }
    }

    /// Queues the device reads of request `id` at `lba`, whose blocks map
    /// to `ppas` (`live`: the buffer's blocks stand in front of them);
    /// returns the reply when no device read is needed.
    fn plan_read(
        &mut self,
        id: u64,
        lba: Lba,
        ppas: &[Option<Resolved>],
        live: bool,
    ) -> Option<Vec<u8>> {
        let block_count = ppas.len() as u32;
        let mut parts = std::mem::take(&mut self.read_plan);
        debug_assert!(parts.is_empty());
        let media_blocks = self.plan_parts(id, lba, ppas, live, &mut parts);
        let cap = self.cap();
        if parts.len() == 1 && media_blocks == block_count {
            let p = parts.pop().expect("one part");
            self.zone_readers[p.ppa.zone(cap) as usize] += 1;
            self.whole_reads += 1;
            self.read_queue.push_back(p);
            self.read_plan = parts;
            return None;
        }
        let data = self.assemble_read(lba, block_count, live);
        if parts.is_empty() {
            self.read_plan = parts;
            return Some(data);
        }
        let req = self.reads.insert(ReadReq {
            id,
            data,
            parts_left: parts.len() as u32,
            error: None,
        });
        for mut p in parts.drain(..) {
            self.zone_readers[p.ppa.zone(cap) as usize] += 1;
            p.req = req;
            self.read_queue.push_back(p);
        }
        self.read_plan = parts;
        None
    }

    /// Device reads for the mapped, unbuffered blocks of a request, merged
    /// where physical blocks are consecutive, appended to `parts` (their
    /// `req` not yet set); returns how many blocks they cover.
    fn plan_parts(
        &self,
        id: u64,
        lba: Lba,
        ppas: &[Option<Resolved>],
        live: bool,
        parts: &mut Vec<ReadPart>,
    ) -> u32 {
        let cap = self.cap();
        let in_band = self.tag_mode == TagMode::InBand;
        let buffered = live && self.buffer.used_slots() > 0;
        let mut media_blocks = 0;
        for (i, ppa) in (0u32..).zip(ppas) {
            let l = lba + u64::from(i);
            if buffered && self.buffer.lookup(l).is_some() {
                continue;
            }
            let Some(Resolved { ppa, crc, shared }) = *ppa else {
                continue;
            };
            media_blocks += 1;
            let crc = in_band.then_some(crc);
            if let Some(p) = parts.last_mut() {
                let contiguous = p.ppa.0 + p.count == ppa.0
                    && p.ppa.zone(cap) == ppa.zone(cap)
                    && p.dst_block + p.count == i
                    && p.count < self.geo.max_transfer_blocks;
                if contiguous {
                    p.count += 1;
                    p.crcs.extend(crc);
                    if shared || !p.shared.is_empty() {
                        p.shared.resize(p.count as usize - 1, false);
                        p.shared.push(shared);
                    }
                    continue;
                }
            }
            parts.push(ReadPart {
                req: Key::NONE,
                id,
                dst_block: i,
                first_lba: l,
                count: 1,
                ppa,
                crcs: crc.into_iter().collect(),
                shared: if shared { vec![true] } else { Vec::new() },
                attempts: 0,
                host_aborts: 0,
            });
        }
        media_blocks
    }

    /// The reply buffer: buffered blocks copied in (`live`), unmapped
    /// ones zero.
    fn assemble_read(&self, lba: Lba, block_count: u32, live: bool) -> Vec<u8> {
        let bs = self.block_size();
        let mut data = vec![0u8; block_count as usize * bs];
        if !live {
            return data;
        }
        for (i, dst) in data.chunks_exact_mut(bs).enumerate() {
            if let Some(buffered) = self.buffer.lookup(lba + i as u64) {
                dst.copy_from_slice(buffered);
            }
        }
        data
    }

    pub(super) fn next_read_command(&mut self) -> Option<(Op, Command)> {
        let part = self.read_queue.pop_front()?;
        let cap = self.cap();
        let cmd = Command::Read {
            zone: part.ppa.zone(cap),
            offset_blocks: part.ppa.offset_blocks(cap),
            block_count: part.count,
            priority: ReadPriority::Host,
        };
        Some((Op::HostRead(part), cmd))
    }

    pub(super) fn host_read_done(
        &mut self,
        mut part: ReadPart,
        result: Result<Outcome, DeviceError>,
    ) {
        let cap = self.cap();
        let zone = part.ppa.zone(cap);
        // Retries keep the zone pinned by this reader.
        if matches!(result, Err(DeviceError::HostIo { .. })) && part.host_aborts < HOST_ATTEMPTS {
            part.host_aborts += 1;
            self.stats.host_retries += 1;
            self.read_queue.push_front(part);
            return;
        }
        let media_error = matches!(result, Err(ref e) if *e != DeviceError::DeviceGone);
        if media_error && part.attempts + 1 < READ_ATTEMPTS {
            part.attempts += 1; // read retry
            self.read_queue.push_front(part);
            return;
        }
        self.zone_readers[zone as usize] -= 1;
        let bs = self.block_size();
        let checked = match result {
            Ok(Outcome::Read { data, oob }) => self.verify_blocks(&part, &data, &oob).map(|_| data),
            Ok(other) => panic!("read completed as {other:?}"),
            Err(DeviceError::DeviceGone) => Err(IoError::DeviceGone),
            Err(e) => Err(IoError::Device {
                lba: part.first_lba,
                source: e,
            }),
        };
        if part.req == Key::NONE {
            self.whole_reads -= 1;
            let result = checked.map(ReplyData::Read);
            self.stats.read_errors += u64::from(result.is_err());
            self.replies.push_back(Reply {
                id: part.id,
                result,
            });
            return;
        }
        let Some(req) = self.reads.get_mut(part.req) else {
            return; // answered already (the device went away)
        };
        match checked {
            Ok(data) => {
                let at = part.dst_block as usize * bs;
                req.data[at..at + data.len()].copy_from_slice(&data);
            }
            Err(e) => {
                self.stats.read_errors += 1;
                req.error.get_or_insert(e);
            }
        }
        req.parts_left -= 1;
        if req.parts_left == 0 {
            let req = self.reads.remove(part.req).expect("read request");
            let result = match req.error {
                Some(e) => Err(e),
                None => Ok(ReplyData::Read(req.data)),
            };
            self.replies.push_back(Reply { id: req.id, result });
        }
    }

    /// Checks each block's CRC and, with OOB tags, that it is the block
    /// asked for: its tag names this LBA, or, for a block reached through a
    /// shared entry, it is a data tag (naming the block's origin).
    fn verify_blocks(&self, part: &ReadPart, data: &[u8], oob: &[u8]) -> Result<(), IoError> {
        let bs = self.block_size();
        let ob = self.geo.oob_size_bytes as usize;
        let cap = self.cap();
        for i in 0..part.count as usize {
            let lba = part.first_lba + i as u64;
            let ppa = Ppa(part.ppa.0 + i as u32);
            let (zone, offset_blocks) = (ppa.zone(cap), ppa.offset_blocks(cap));
            let block = &data[i * bs..(i + 1) * bs];
            let actual_crc = self.data_crc().checksum(block);
            let expected_crc = match self.tag_mode {
                TagMode::Oob => match Tag::decode(&oob[i * ob..i * ob + TAG_BYTES]) {
                    Ok(Some(t)) if t.lba == lba => t.data_crc,
                    Ok(Some(t)) if t.kind.is_data() && part.shared.get(i) == Some(&true) => {
                        t.data_crc
                    }
                    Ok(Some(t)) => {
                        return Err(IoError::Misdirected {
                            lba,
                            zone,
                            offset_blocks,
                            found_lba: t.lba,
                        })
                    }
                    Ok(None) | Err(_) => {
                        return Err(IoError::Corrupt {
                            lba,
                            zone,
                            offset_blocks,
                            expected_crc: 0,
                            actual_crc,
                        })
                    }
                },
                TagMode::InBand => part.crcs[i],
            };
            if expected_crc != actual_crc {
                return Err(IoError::Corrupt {
                    lba,
                    zone,
                    offset_blocks,
                    expected_crc,
                    actual_crc,
                });
            }
        }
        Ok(())
    }
}
