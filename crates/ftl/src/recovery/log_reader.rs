//! Mount steps 2, 3 and 7: the metadata log ring, block by block — the
//! checkpoint's chunks, the roll-forward of the notes after it, and where
//! the writer continues.

use super::{dev, fmt_err, max_write_blocks};
use crate::addr::physical_blocks;
use crate::backend::{
    again_after_abort, Backend, BackendExt, DeviceError, Geometry, ZoneId, ZoneState,
};
use crate::checkpoint::{self, CheckpointImage};
use crate::error::MountError;
use crate::layout::Layout;
use crate::log::MetaLog;
use crate::note::{self, LogBlock, Note};

/// Walks the metadata log ring block by block, as mount rolls it forward
/// (`zftl check` walks it the same way).
pub(crate) struct LogReader {
    ring: Vec<ZoneId>,
    ring_index: usize,
    offset_blocks: u64,
    zone_capacity_blocks: u64,
    pub(super) next_log_seq: u64,
    newest_in: Vec<Option<u64>>,
    /// Where the last block read lies: (ring index, offset).
    last: Option<(usize, u64)>,
}

impl LogReader {
    pub(crate) fn new(
        g: &Geometry,
        layout: &Layout,
        zone: ZoneId,
        offset_blocks: u64,
    ) -> LogReader {
        let ring: Vec<ZoneId> = layout.meta_zones().collect();
        let ring_index = ring.iter().position(|&z| z == zone).unwrap_or(usize::MAX);
        LogReader {
            newest_in: vec![None; ring.len()],
            ring,
            ring_index,
            offset_blocks,
            zone_capacity_blocks: g.zone_capacity_blocks,
            next_log_seq: 0,
            last: None,
        }
    }

    /// The block with log_seq `expected`, or `None` at the log's end (an
    /// erased, torn, damaged or older block). A block that is intact (its
    /// header and CRC check) and carries `expected` but does not decode was
    /// written by a newer build (a note kind this one does not know): an
    /// error, not the log's end, which would drop the notes after it. After a failed write the
    /// writer ends its ring zone and writes that write and all after it
    /// again, same log_seqs and bytes, at the start of the next zone it can
    /// use; the failed write may have landed, in part or whole. So a miss
    /// here looks for a ring zone that starts with `expected`, or with a
    /// byte-for-byte copy of a block just read from the last zone (then
    /// `expected` lies as far into that zone as it would have in the last).
    pub(crate) fn next_block<B: Backend>(
        &mut self,
        backend: &mut B,
        expected: u64,
    ) -> Result<Option<LogBlock>, MountError> {
        if self.offset_blocks == self.zone_capacity_blocks {
            self.ring_index = (self.ring_index + 1) % self.ring.len();
            self.offset_blocks = 0;
        }
        let here = self.read_at(backend, self.ring_index, self.offset_blocks, expected)?;
        if let Some(block) = here.filter(|b| b.log_seq() == expected) {
            return Ok(Some(block));
        }
        for k in 0..self.ring.len() {
            let j = (self.ring_index + 1 + k) % self.ring.len();
            if self.last.is_some_and(|(i, _)| i == j) {
                continue;
            }
            let Some((first_bytes, first)) = self.read_raw_at(backend, j, 0, expected)? else {
                continue;
            };
            let s0 = first.log_seq();
            let (offset, found) = if s0 == expected {
                (0, Some(first))
            } else if self.is_copy_of_read(backend, s0, expected, &first_bytes)? {
                let at = expected - s0;
                (at, self.read_at(backend, j, at, expected)?)
            } else {
                continue;
            };
            if let Some(block) = found.filter(|b| b.log_seq() == expected) {
                self.ring_index = j;
                self.offset_blocks = offset;
                return Ok(Some(block));
            }
        }
        Ok(None)
    }

    /// Whether `bytes`, a block with log_seq `s0` that starts a ring zone,
    /// is a copy of the block with that log_seq in the zone read last, so
    /// that `expected` (the log_seq after the last block read) would lie
    /// `expected - s0` blocks into its zone.
    fn is_copy_of_read<B: Backend>(
        &self,
        backend: &mut B,
        s0: u64,
        expected: u64,
        bytes: &[u8],
    ) -> Result<bool, MountError> {
        let Some((i, last_offset)) = self.last else {
            return Ok(false);
        };
        if s0 >= expected || expected - s0 >= self.zone_capacity_blocks {
            return Ok(false);
        }
        let back = expected - 1 - s0; // from the last block read to the copy's original
        if back > last_offset {
            return Ok(false);
        }
        Ok(self
            .read_raw_at(backend, i, last_offset - back, expected)?
            .is_some_and(|(b, block)| block.log_seq() == s0 && b == bytes))
    }

    fn read_at<B: Backend>(
        &self,
        backend: &mut B,
        ring_index: usize,
        offset_blocks: u64,
        expected: u64,
    ) -> Result<Option<LogBlock>, MountError> {
        Ok(self
            .read_raw_at(backend, ring_index, offset_blocks, expected)?
            .map(|(_, block)| block))
    }

    /// A log block's bytes and decoded form; `None` if unreadable or
    /// invalid, an error if it is the intact block `expected` and does not
    /// decode.
    fn read_raw_at<B: Backend>(
        &self,
        backend: &mut B,
        ring_index: usize,
        offset_blocks: u64,
        expected: u64,
    ) -> Result<Option<(Vec<u8>, LogBlock)>, MountError> {
        let zone = self.ring[ring_index];
        let step = "mount: reading the metadata log";
        let Some((data, _)) = read_one(backend, zone, offset_blocks, step)? else {
            return Ok(None);
        };
        match LogBlock::decode(&data) {
            Ok(block) => Ok(Some((data, block))),
            Err(source) if note::intact_log_seq(&data) == Some(expected) => {
                Err(MountError::Format { step, source })
            }
            Err(_) => Ok(None),
        }
    }

    /// Where the next block is looked for first: the block after the last
    /// one read (the zone and offset the log ends at, once `next_block`
    /// found nothing). `None` if the reader started outside the ring.
    pub(crate) fn here(&self) -> Option<(ZoneId, u64)> {
        let zone = *self.ring.get(self.ring_index)?;
        if self.offset_blocks == self.zone_capacity_blocks {
            let next = (self.ring_index + 1) % self.ring.len();
            return Some((self.ring[next], 0));
        }
        Some((zone, self.offset_blocks))
    }

    pub(crate) fn consume(&mut self, block: &LogBlock) {
        let s = block.log_seq();
        let slot = &mut self.newest_in[self.ring_index];
        *slot = Some(slot.map_or(s, |n| n.max(s)));
        self.last = Some((self.ring_index, self.offset_blocks));
        self.offset_blocks += 1;
        self.next_log_seq = s + 1;
    }

    /// Step 2: the checkpoint the superblock names, chunk by chunk.
    pub(super) fn read_checkpoint<B: Backend>(
        &mut self,
        backend: &mut B,
        g: &Geometry,
        id: u64,
    ) -> Result<CheckpointImage, MountError> {
        if self.ring_index == usize::MAX {
            return Err(MountError::Damaged(
                "the superblock points at a zone outside the metadata log".into(),
            ));
        }
        let bs = g.block_size_bytes as usize;
        let damaged = |what: String| MountError::Damaged(format!("checkpoint {id}: {what}"));
        let mut chunks = Vec::new();
        let mut total = u64::MAX;
        while (chunks.len() as u64) < total {
            let expected = id + chunks.len() as u64;
            let block = self.next_block(backend, expected)?.ok_or_else(|| {
                damaged(format!(
                    "chunk with log_seq {expected} is unreadable or invalid"
                ))
            })?;
            match &block {
                LogBlock::CheckpointChunk {
                    log_seq,
                    checkpoint_id,
                    payload,
                    ..
                } if *log_seq == expected && *checkpoint_id == id => {
                    if chunks.is_empty() {
                        let stream = checkpoint::peek_stream_bytes(payload)
                            .map_err(fmt_err("mount: checkpoint header"))?;
                        total = checkpoint::chunks_for_stream(stream, bs);
                    }
                }
                other => {
                    return Err(damaged(format!(
                        "expected chunk with log_seq {expected}, found {other:?}"
                    )))
                }
            }
            self.consume(&block);
            chunks.push(block);
        }
        let stream =
            checkpoint::join_chunks(&chunks).map_err(fmt_err("mount: checkpoint chunks"))?;
        let physical = physical_blocks(g).expect("validated geometry");
        CheckpointImage::decode(&stream, physical).map_err(fmt_err("mount: checkpoint"))
    }

    /// Step 3: notes after the checkpoint, up to the first block that is
    /// erased, unreadable, damaged or out of sequence (the log's end).
    pub(super) fn roll_forward<B: Backend>(
        &mut self,
        backend: &mut B,
    ) -> Result<Vec<Note>, MountError> {
        let mut notes = Vec::new();
        while let Some(block) = self.next_block(backend, self.next_log_seq)? {
            if let LogBlock::Notes { notes: n, .. } = &block {
                notes.extend(n.iter().cloned());
            }
            self.consume(&block);
        }
        Ok(notes)
    }

    /// Step 7: the writer continues after the last valid block, past any
    /// torn block (at the zone's write pointer) or in the next ring zone.
    pub(super) fn writer<B: Backend>(
        self,
        backend: &mut B,
        g: &Geometry,
        committed: u64,
    ) -> Result<MetaLog, MountError> {
        let zone = self.ring[self.ring_index];
        let info =
            again_after_abort(|| backend.zone_info(zone)).map_err(dev("mount: log zone report"))?;
        let writable = !matches!(info.state, ZoneState::ReadOnly | ZoneState::Offline);
        let mut cur = self.ring_index;
        let mut wp = if writable {
            info.write_pointer_blocks.max(self.offset_blocks)
        } else {
            g.zone_capacity_blocks
        };
        if self.offset_blocks == 0 && self.newest_in[cur].is_none() && wp > 0 {
            // The log ended at the very end of a ring zone and the reader
            // stepped into the next one, which holds only blocks of an
            // older pass (the cut came before the writer reset it).
            // Appending after them would put new blocks where no reader
            // looks; continue as the writer would have, from the full zone
            // before it, so the next log write resets this zone first.
            cur = (cur + self.ring.len() - 1) % self.ring.len();
            wp = g.zone_capacity_blocks;
        }
        let ring = self.ring.clone();
        let mut log = MetaLog::new(
            self.ring,
            cur,
            wp,
            g.zone_capacity_blocks,
            g.block_size_bytes as usize,
            max_write_blocks(g),
            self.next_log_seq,
            self.newest_in,
            committed,
        );
        for (i, &z) in ring.iter().enumerate() {
            let state = again_after_abort(|| backend.zone_info(z))
                .map_err(dev("mount: log zone report"))?
                .state;
            if matches!(state, ZoneState::ReadOnly | ZoneState::Offline) {
                log.mark_dead(i);
            }
        }
        Ok(log)
    }
}

/// A block's data and OOB bytes.
type DataAndOob = (Vec<u8>, Vec<u8>);

/// Attempts at reading a metadata block before it counts as unreadable.
/// NAND read errors are often transient (read retry); treating one as the
/// end of the log would silently drop every note after it.
const METADATA_READ_ATTEMPTS: u32 = 8;

/// Reads one block; `None` when the media cannot return it after retries
/// (a torn or failed page), an error for anything else. A host-side
/// failure (a read a controller reset aborted) is retried too, and is the
/// error if the last attempt fails so.
pub(super) fn read_one<B: Backend>(
    backend: &mut B,
    zone: ZoneId,
    offset_blocks: u64,
    step: &'static str,
) -> Result<Option<DataAndOob>, MountError> {
    let mut host_failure = None;
    for _ in 0..METADATA_READ_ATTEMPTS {
        match backend.read_blocks(zone, offset_blocks, 1) {
            Ok(r) => return Ok(Some(r)),
            Err(DeviceError::UncorrectableRead { .. }) => host_failure = None,
            Err(e @ DeviceError::HostIo { .. }) => host_failure = Some(e),
            Err(DeviceError::ZoneOffline { .. }) => return Ok(None),
            Err(e) => return Err(MountError::Device { step, source: e }),
        }
    }
    match host_failure {
        Some(source) => Err(MountError::Device { step, source }),
        None => Ok(None),
    }
}
