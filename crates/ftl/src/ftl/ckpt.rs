//! Checkpoints: when one is due, capturing the image, and the log, flush
//! and superblock steps that commit it.

use super::reloc::{JobPhase, JobPurpose};
use super::{Ftl, Op};
use crate::backend::HOST_ATTEMPTS;
use crate::backend::{Command, DeviceError, Outcome, ZoneId};
use crate::checkpoint::{self, CheckpointImage};
use crate::layout::SUPER_ZONES;
use crate::superblock::{Superblock, TagMode};
use crate::zone::ZoneKind;

#[derive(Debug)]
pub(super) enum CkptState {
    Idle,
    Draining,
    Writing {
        id: u64,
        end_log_seq: u64,
        location: Option<(ZoneId, u64)>,
    },
    Flushing {
        id: u64,
        location: (ZoneId, u64),
        issued: bool,
    },
    Super {
        id: u64,
        location: (ZoneId, u64),
        copy: usize,
        busy: bool,
    },
}

impl Ftl {
    pub(super) fn checkpoint_due(&self) -> bool {
        // A range-operation vector being applied must land in one piece.
        if self.range_applying() {
            return false;
        }
        if self.ckpt_requested {
            return true;
        }
        if self.blocks_since_checkpoint >= self.cfg.checkpoint_interval_blocks {
            return true;
        }
        let est = self
            .checkpoint_bytes_bound()
            .div_ceil(self.geo.block_size_bytes as u64 - 64);
        self.log.free_blocks() < 2 * est + 2
    }

    /// A checkpoint is due but waits for the in-place job (none is captured
    /// inside its window, `Ftl::inplace_blocks_checkpoint`). The due rule
    /// left the log room for the checkpoint and a checkpoint's worth of
    /// notes; the job is bounded, the rest of the work is not: GC into
    /// extra lanes opens a zone and closes a victim, each a forced log
    /// block, several times in one job's window. So until the job's
    /// `InPlaceDone` is durable the work that would log more waits: host
    /// and nameless appends, GC's appends and jobs, flushes' packing. Only
    /// the job and the completions of commands in flight log.
    pub(super) fn checkpoint_held(&self) -> bool {
        matches!(self.ckpt, CkptState::Idle)
            && self.inplace_blocks_checkpoint()
            && self.checkpoint_due()
    }

    /// Upper bound of the next checkpoint's size: the fixed part at its
    /// largest, the tables as they are, and while snapshots keep books, a
    /// birth for every block.
    pub(super) fn checkpoint_bytes_bound(&self) -> u64 {
        use crate::layout;
        let logical = self.layout.logical_blocks;
        let history = self.mapping.history();
        let mut bytes = layout::max_checkpoint_bytes(&self.geo, logical)
            + 8
            + 16 * self.mapping.shared_blocks()
            + 24 * self.attrs.len() as u64;
        if !history.is_idle() || history.next_id() > 0 {
            bytes += 4 * 16 + 8 + 96 * history.snapshots().len() as u64;
            bytes += layout::births_bytes(logical);
            bytes += 24 * history.entry_count() + 16 * history.pending_sweeps().count() as u64;
        }
        if !self.mapping.forks().is_empty() || self.mapping.forks().next_id() > 0 {
            bytes += self.fork_checkpoint_bytes();
        }
        bytes + self.nameless_checkpoint_bytes()
    }

    /// What the forks add to a checkpoint at most: their section, their
    /// map leaves, and a leaf for each leaf a buffered fork write may take.
    fn fork_checkpoint_bytes(&self) -> u64 {
        use crate::checkpoint::{FORK_LEAF_BYTES, FORK_RECORD_BYTES, LEAF_BYTES};
        let forks = self.mapping.forks();
        let diverged = forks.diverged_leaf_count();
        let leaves = self.mapping.fork_leaf_count() + self.fork_leaves_pending.len() as u64;
        16 + 8
            + FORK_RECORD_BYTES as u64 * forks.iter().count() as u64
            + FORK_LEAF_BYTES as u64 * diverged
            + (LEAF_BYTES as u64 + 4) * leaves
    }

    /// Checkpoint bytes the metadata log's budget has left past the bound.
    pub(super) fn checkpoint_room_bytes(&self) -> u64 {
        let budget = crate::layout::checkpoint_budget_bytes(&self.geo, self.layout.meta_zone_count);
        budget.saturating_sub(self.checkpoint_bytes_bound())
    }

    /// Kept versions the next checkpoint still has room for, in the
    /// metadata log's budget for one checkpoint.
    pub(super) fn checkpoint_room_versions(&self) -> u64 {
        let budget = crate::layout::checkpoint_budget_bytes(&self.geo, self.layout.meta_zone_count);
        let mut bound = self.checkpoint_bytes_bound();
        if self.mapping.history().is_idle() {
            // The first create brings the births and the sections.
            bound += crate::layout::births_bytes(self.layout.logical_blocks) + 4 * 16 + 8;
        }
        budget.saturating_sub(bound) / crate::layout::KEPT_VERSION_BYTES
    }

    /// Versions a change may still keep: the history's bound, the shared
    /// table's room and the checkpoint's, less what the vector being run
    /// has set aside.
    pub(super) fn history_room(&self) -> u64 {
        let room = self
            .mapping
            .history_room()
            .min(self.checkpoint_room_versions());
        room.saturating_sub(self.kept_reserved())
    }

    pub(super) fn advance_checkpoint(&mut self) {
        match self.ckpt {
            CkptState::Idle
                if !self.read_only
                    && self.checkpoint_due()
                    && !self.inplace_blocks_checkpoint() =>
            {
                self.ckpt_requested = false;
                self.ckpt = CkptState::Draining;
                self.advance_checkpoint();
            }
            CkptState::Draining if self.host_appends_in_flight == 0 && !self.range_applying() => {
                self.capture_checkpoint()
            }
            CkptState::Writing {
                id,
                end_log_seq,
                location: Some(location),
            } if self.log.durable_next() >= end_log_seq => {
                self.ckpt = CkptState::Flushing {
                    id,
                    location,
                    issued: false,
                };
            }
            _ => {}
        }
    }

    /// Victims whose ZoneReset note precedes the checkpoint in the log: the
    /// checkpoint must call them free, or recovery would skip the new data a
    /// reused zone gets after the reset (they hold no live data: valid is 0).
    fn victims_noted(&self) -> Vec<ZoneId> {
        self.closing
            .iter()
            .filter(|j| {
                j.purpose != JobPurpose::Retire
                    && !matches!(j.phase, JobPhase::Summary { .. } | JobPhase::Copying)
            })
            .map(|j| j.victim)
            .collect()
    }

    fn capture_checkpoint(&mut self) {
        self.log.pack(true);
        let image = self.checkpoint_image();
        self.capture_next_seq = image.next_seq;
        let stream = image.encode();
        let chunk_payload = crate::note::chunk_payload_bytes(self.block_size());
        let n = stream.len().div_ceil(chunk_payload) as u64;
        let first = self.log.reserve_log_seqs(n);
        let blocks = checkpoint::encode_chunks(&stream, self.block_size(), first);
        assert_eq!(blocks.len() as u64, n);
        self.log.stage_encoded(first, blocks);
        self.blocks_since_checkpoint = 0;
        self.stats.checkpoints += 1;
        self.stats.nameless_remap_checkpoint_bytes += 16 * u64::from(self.nameless.remap.len());
        self.ckpt = CkptState::Writing {
            id: first,
            end_log_seq: first + n,
            location: None,
        };
    }

    fn checkpoint_image(&self) -> CheckpointImage {
        let noted = self.victims_noted();
        let zones: Vec<checkpoint::ZoneRecord> = (0..self.geo.zone_count)
            .map(|z| {
                let zone = self.zones.get(z);
                let mut record = zone.record();
                let valid = self.mapping.valid_blocks(z);
                if noted.contains(&z) {
                    assert_eq!(valid, 0, "noted victim {z} still holds data");
                    record = crate::zone::ZoneRecord {
                        kind: ZoneKind::Free,
                        state: crate::zone::ZoneUse::Empty,
                        write_pointer_blocks: 0,
                        erase_count: record.erase_count + 1,
                        last_write_seq: record.last_write_seq,
                    };
                }
                crate::recovery::zone_record_out(record, valid)
            })
            .collect();
        let leaves = self.mapping.leaves().collect();
        let in_band = self.tag_mode == TagMode::InBand;
        let crcs = in_band.then(|| self.mapping.crcs().collect());
        let shared = self
            .mapping
            .shared_entries()
            .map(|(id, ppa, refs, crc)| checkpoint::SharedRecord {
                id,
                ppa: ppa.0,
                refs,
                crc,
            })
            .collect();
        let attrs = self
            .attrs
            .iter()
            .map(|(lba, block_count, bits)| checkpoint::AttrRecord {
                lba,
                block_count,
                bits: u32::from(bits),
            })
            .collect();
        let history = self.mapping.history();
        let snapshots = history
            .snapshots()
            .iter()
            .map(|s| checkpoint::SnapshotRecord {
                id: s.id,
                epoch: s.epoch,
                create_seq: s.create_seq,
                wall_ns: s.wall_ns,
                parent: s.parent,
                deleting: false,
                name: checkpoint::SnapshotName::new(&s.name),
            })
            .collect();
        let kept = history
            .entries()
            .map(|(lba, kill_seq, v)| checkpoint::HistoryRecord {
                lba,
                kill_seq,
                value: v.value,
                birth: v.birth,
            })
            .collect();
        CheckpointImage {
            forks: self.mapping.forks().records(),
            next_fork_id: self.mapping.forks().next_id(),
            snapshots,
            next_snapshot_id: history.next_id(),
            births: history.birth_leaves(),
            history: kept,
            sweeps: history.pending_sweeps().collect(),
            next_seq: self.next_seq,
            epoch: self.epoch,
            log_seq: self.log.next_log_seq(),
            logical_blocks: self.layout.logical_blocks,
            leaves,
            crcs,
            shared,
            attrs,
            clean: self.clean_requested,
            nameless: self.nameless_image(|z| {
                matches!(
                    zones[z as usize].kind,
                    checkpoint::ZoneKind::DataNameless | checkpoint::ZoneKind::DataNamelessMoved
                )
            }),
            zones,
        }
    }

    pub(super) fn next_checkpoint_command(&mut self) -> Option<(Op, Command)> {
        match &mut self.ckpt {
            CkptState::Flushing { issued, .. } if !*issued => {
                *issued = true;
                return Some((Op::CkptFlush, Command::Flush));
            }
            CkptState::Super { busy, .. } if !*busy => *busy = true,
            _ => return None,
        }
        let CkptState::Super {
            id, location, copy, ..
        } = self.ckpt
        else {
            unreachable!()
        };
        if self.super_dead[copy] {
            if self.super_dead.iter().all(|&d| d) {
                // No copy can carry this checkpoint (both zones failed, as
                // a mount finds them): committing it would let the log
                // reuse zones the last record still points into.
                self.metadata_failed();
                return None;
            }
            self.super_step_done(copy);
            return self.next_checkpoint_command();
        }
        let zone = SUPER_ZONES[copy];
        if self.super_wp_blocks[copy] == self.cap() {
            return Some((Op::SuperReset { copy }, Command::Reset { zone }));
        }
        let sb = self.superblock_record(id, location);
        let data = sb.encode(self.block_size());
        self.stats.media_write_blocks += 1;
        self.stats.meta_write_blocks += 1;
        let cmd = Command::Write {
            zone,
            offset_blocks: self.super_wp_blocks[copy],
            data: data.into(),
            oob: self.meta_oob(1),
        };
        Some((Op::SuperWrite { copy }, cmd))
    }

    fn superblock_record(&self, checkpoint_id: u64, (zone, offset): (ZoneId, u64)) -> Superblock {
        Superblock {
            generation: self.super_generation + 1,
            uuid: self.uuid,
            block_size_bytes: self.geo.block_size_bytes,
            zone_count: self.geo.zone_count,
            zone_capacity_blocks: self.geo.zone_capacity_blocks,
            oob_size_bytes: self.geo.oob_size_bytes,
            write_unit_blocks: self.geo.write_unit_blocks,
            super_zone_count: 2,
            meta_first_zone: self.layout.meta_first_zone,
            meta_zone_count: self.layout.meta_zone_count,
            tag_mode: self.tag_mode,
            logical_blocks: self.layout.logical_blocks,
            checkpoint_log_seq: checkpoint_id,
            checkpoint_zone: zone,
            checkpoint_offset_blocks: offset,
            format_time_seq: 0,
        }
    }

    pub(super) fn checkpoint_flushed(&mut self, result: Result<Outcome, DeviceError>) {
        if result.is_err() {
            self.metadata_failed();
            return;
        }
        let CkptState::Flushing { id, location, .. } = self.ckpt else {
            panic!("checkpoint flush out of order")
        };
        self.ckpt = CkptState::Super {
            id,
            location,
            copy: 0,
            busy: false,
        };
    }

    pub(super) fn super_write_done(&mut self, copy: usize, result: Result<Outcome, DeviceError>) {
        match result {
            Ok(_) => {
                self.super_wp_blocks[copy] += 1;
                self.super_aborts[copy] = 0;
            }
            Err(DeviceError::HostIo { .. }) if self.super_aborts[copy] + 1 < HOST_ATTEMPTS => {
                // Aborted on the host side: the record may or may not be on
                // the media. Write it again at the start of the zone, after
                // a reset; until then the other copy holds the last record.
                self.super_aborts[copy] += 1;
                self.stats.write_errors += 1;
                self.super_wp_blocks[copy] = self.cap();
                if let CkptState::Super { busy, .. } = &mut self.ckpt {
                    *busy = false;
                }
                return;
            }
            Err(e) => return self.super_failed(copy, e),
        }
        self.super_step_done(copy);
    }

    /// A superblock zone failed: the other copy carries on alone (mount
    /// takes the newest valid record of either); with both gone the volume
    /// is read-only.
    pub(super) fn super_failed(&mut self, copy: usize, error: DeviceError) {
        if error == DeviceError::DeviceGone {
            return self.metadata_failed();
        }
        self.stats.write_errors += 1;
        self.super_dead[copy] = true;
        if self.super_dead.iter().all(|&d| d) {
            return self.metadata_failed();
        }
        self.super_step_done(copy);
    }

    /// Copy `copy` has the new record (or is dead): on to the next, or commit.
    fn super_step_done(&mut self, copy: usize) {
        let CkptState::Super { id, location, .. } = self.ckpt else {
            panic!("superblock write out of order")
        };
        if copy == 0 {
            self.ckpt = CkptState::Super {
                id,
                location,
                copy: 1,
                busy: false,
            };
        } else {
            self.super_generation += 1;
            self.log.set_committed_checkpoint(id);
            self.committed_next_seq = self.capture_next_seq;
            self.first_checkpoint_pending = false;
            self.ckpt = CkptState::Idle;
        }
    }
}
