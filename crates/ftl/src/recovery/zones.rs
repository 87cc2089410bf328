//! Mount step 6: the zone table, from the checkpoint's records, the
//! replayed notes and the device's zone report.

use super::replay::Rebuild;
use super::RecordKind;
use crate::backend::{Geometry, ZoneId, ZoneState};
use crate::checkpoint::CheckpointImage;
use crate::error::MountError;
use crate::layout::{Layout, SUPER_ZONES};
use crate::zone::{Stream, ZoneKind, ZoneRecord, ZoneTable, ZoneUse};

impl Rebuild {
    /// Step 6: zone table from checkpoint records, replayed notes and the
    /// device's report; every mapped block must lie below its zone's write
    /// pointer. Returns the table and the zones to finish.
    pub(super) fn zone_table(
        &mut self,
        g: &Geometry,
        layout: &Layout,
        image: &CheckpointImage,
        reports: &[crate::backend::ZoneInfo],
    ) -> Result<(ZoneTable, Vec<ZoneId>), MountError> {
        let mut records = Vec::with_capacity(g.zone_count as usize);
        let mut finish = Vec::new();
        let mut retire = Vec::new();
        for z in 0..g.zone_count {
            let rec = &image.zones[z as usize];
            let rep = &reports[z as usize];
            let erase_count = self
                .erase_counts
                .get(&z)
                .copied()
                .unwrap_or(rec.erase_count);
            let gone = matches!(rep.state, ZoneState::Offline)
                || rec.kind == RecordKind::Retired
                || self.retired.contains(&z);
            let fixed = SUPER_ZONES.contains(&z) || layout.is_meta(z);
            let (kind, state, wp) = if fixed {
                let kind = if SUPER_ZONES.contains(&z) {
                    ZoneKind::Superblock
                } else {
                    ZoneKind::Meta
                };
                let wp = rep.write_pointer_blocks;
                let state = match wp {
                    0 => ZoneUse::Empty,
                    w if w == g.zone_capacity_blocks => ZoneUse::Full,
                    _ => ZoneUse::Open,
                };
                (kind, state, wp)
            } else if gone {
                // Retired zones may still hold blocks that could not be moved
                // off (reads of them report the device's error).
                retire.push(z);
                (
                    ZoneKind::Data {
                        stream: Stream::Host,
                    },
                    ZoneUse::Full,
                    g.zone_capacity_blocks,
                )
            } else if self.inplace_pending.is_some_and(|j| j.victim == z) {
                // Reset or half rewritten: the mount redoes it from the
                // scratch zone before anything reads it.
                let stream = if self.nameless_moved[z as usize] {
                    Stream::NamelessMoved
                } else {
                    Stream::Nameless
                };
                (
                    ZoneKind::Data { stream },
                    ZoneUse::Full,
                    g.zone_capacity_blocks,
                )
            } else if rep.write_pointer_blocks == 0 {
                (ZoneKind::Free, ZoneUse::Empty, 0)
            } else {
                if rep.state != ZoneState::Full && rep.state != ZoneState::ReadOnly {
                    finish.push(z);
                }
                let stream = if self.nameless_moved[z as usize] {
                    Stream::NamelessMoved
                } else if self.nameless_now[z as usize] {
                    Stream::Nameless
                } else if rec.kind == RecordKind::DataGc {
                    Stream::Gc
                } else {
                    Stream::Host
                };
                (
                    ZoneKind::Data { stream },
                    ZoneUse::Full,
                    rep.write_pointer_blocks,
                )
            };
            records.push(ZoneRecord {
                kind,
                state,
                write_pointer_blocks: wp,
                erase_count,
                last_write_seq: rec.last_write_seq,
            });
        }
        let mut table = ZoneTable::from_records(g.zone_capacity_blocks, &records)
            .map_err(|e| MountError::Damaged(format!("zone table: {e}")))?;
        let cap = g.zone_capacity_blocks;
        for ppa in self.mapping.live() {
            let z = ppa.zone(cap);
            let zone = table.get(z);
            if !matches!(zone.kind(), ZoneKind::Data { .. })
                || ppa.offset_blocks(cap) >= zone.write_pointer_blocks()
            {
                let owner = self.mapping.owner_of_live(ppa);
                return Err(MountError::Damaged(format!(
                    "{owner} maps to zone {z} offset {}, which holds no data (zone {:?}, write pointer {})",
                    ppa.offset_blocks(cap),
                    zone.kind(),
                    zone.write_pointer_blocks()
                )));
            }
        }
        for z in retire {
            table.retire(z);
        }
        Ok((table, finish))
    }
}
