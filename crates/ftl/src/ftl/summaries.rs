//! Zone summaries in band (see `crate::summary`): the writer side collects
//! the LBAs of each zone a lane fills and appends them once the zone's data
//! is on the media; the GC side turns a victim into an offset → LBA table,
//! from its summary when that agrees with the L2P, else by walking the L2P.

use super::{Ftl, Op};
use crate::addr::{Lba, Ppa};
use crate::backend::{Command, DeviceError, Outcome, ReadPriority, ZoneId};
use crate::summary::{self, NO_LBA};
use crate::superblock::TagMode;
use crate::zone::ZoneUse;

/// The summary of a zone a lane is filling, until it is on the media.
#[derive(Debug)]
pub(super) struct PendingSummary {
    zone: ZoneId,
    /// The LBA each data block was written for (`NO_LBA`: padding, or not
    /// yet completed).
    lbas: Box<[u32]>,
    /// Every data block is allocated: the summary goes out once the zone's
    /// appends have completed.
    sealed: bool,
    /// The summary blocks once encoded (zeros past the encoded ones).
    encoded: Vec<u8>,
    /// Blocks of it written so far: it goes out in appends of at most
    /// `max_append_blocks`, one at a time so they land in order.
    written_blocks: u64,
    in_flight: bool,
}

/// An append to `zone` completed at `offset`: its data blocks hold `lbas`,
/// in order. One lookup per append; nothing to do for a zone without a
/// summary being collected (OOB tags, or closed early). A free function so
/// the caller can feed it from its other fields.
pub(super) fn note_run(
    summaries: &mut [PendingSummary],
    zone: ZoneId,
    offset: u64,
    lbas: impl Iterator<Item = Lba>,
) {
    let Some(s) = summaries.iter_mut().find(|s| s.zone == zone) else {
        return;
    };
    let entries = s.lbas.iter_mut().skip(offset as usize);
    for (e, lba) in entries.zip(lbas) {
        *e = u32::try_from(lba).expect("in-band LBAs fit u32 (checked at format)");
    }
}

impl Ftl {
    /// Blocks of a data zone that hold data.
    pub(super) fn data_cap(&self) -> u64 {
        self.cap() - self.summary_blocks
    }

    /// Memory the summaries being collected hold (counted as map memory).
    pub(super) fn pending_summary_bytes(&self) -> u64 {
        let entries: usize = self.summaries.iter().map(|s| s.lbas.len()).sum();
        (self.summaries.capacity() * std::mem::size_of::<PendingSummary>() + 4 * entries) as u64
    }

    /// A lane opened `zone`: start collecting its summary. At most one per
    /// lane plus those waiting for their appends, so the table stays small.
    pub(super) fn summary_opened(&mut self, zone: ZoneId) {
        if self.tag_mode != TagMode::InBand {
            return;
        }
        assert!(
            self.summaries.iter().all(|s| s.zone != zone),
            "zone {zone} opened twice"
        );
        self.summaries.push(PendingSummary {
            zone,
            lbas: vec![NO_LBA; self.data_cap() as usize].into_boxed_slice(),
            sealed: false,
            encoded: Vec::new(),
            written_blocks: 0,
            in_flight: false,
        });
    }

    /// The lane allocated the zone's last data block.
    pub(super) fn summary_sealed(&mut self, zone: ZoneId) {
        if let Some(s) = self.summaries.iter_mut().find(|s| s.zone == zone) {
            s.sealed = true;
        }
    }

    /// The zone was closed early or failed: it gets no summary (GC walks
    /// the map for it instead).
    pub(super) fn summary_dropped(&mut self, zone: ZoneId) {
        self.summaries.retain(|s| s.zone != zone || s.in_flight);
    }

    /// Appends the next part of a sealed summary whose zone has no append
    /// in flight: the summary then lands right after the data, in the
    /// zone's last blocks, part after part.
    pub(super) fn next_summary_command(&mut self) -> Option<(Op, Command)> {
        if self.read_only {
            return None;
        }
        let total = self.summary_blocks;
        let bs = self.block_size();
        let max_blocks = u64::from(self.geo.max_append_blocks);
        let appends = &self.zone_appends;
        let s = self
            .summaries
            .iter_mut()
            .find(|s| s.sealed && !s.in_flight && appends[s.zone as usize] == 0)?;
        if s.encoded.is_empty() {
            s.encoded = summary::encode(s.zone, &s.lbas, bs);
            s.encoded.resize(total as usize * bs, 0);
        }
        let blocks = (total - s.written_blocks).min(max_blocks);
        let at = s.written_blocks as usize * bs;
        let data = s.encoded[at..at + blocks as usize * bs].to_vec();
        s.in_flight = true;
        let zone = s.zone;
        // In band the OOB (too small for a tag, if any) is left zero.
        let oob = vec![0; self.geo.oob_bytes(blocks)];
        self.zones.record_write(zone, blocks, 0);
        self.zone_appends[zone as usize] += 1;
        self.stats.media_write_blocks += blocks;
        self.stats.summary_write_blocks += blocks;
        Some((
            Op::SummaryWrite { zone, blocks },
            Command::Append {
                zone,
                data: data.into(),
                oob,
            },
        ))
    }

    pub(super) fn summary_write_done(
        &mut self,
        zone: ZoneId,
        blocks: u64,
        result: Result<Outcome, DeviceError>,
    ) {
        self.append_settled(zone);
        let total = self.summary_blocks;
        match Self::appended_at(result) {
            // Landing anywhere but the zone's end (a device that broke the
            // append contract) only costs GC a map walk: the summary is a hint.
            Ok(_) => {
                let s = self.summaries.iter_mut().find(|s| s.zone == zone);
                let s = s.expect("summary in flight");
                s.in_flight = false;
                s.written_blocks += blocks;
                if s.written_blocks == total {
                    self.summaries.retain(|s| s.zone != zone);
                }
            }
            Err(e) => {
                self.summaries.retain(|s| s.zone != zone);
                self.write_failed(zone, e);
            }
        }
    }

    /// Whether GC should read `zone`'s summary: in band, and the zone was
    /// filled to capacity (one closed early has none).
    pub(super) fn has_summary(&self, zone: ZoneId) -> bool {
        let z = self.zones.get(zone);
        self.tag_mode == TagMode::InBand
            && z.state() == ZoneUse::Full
            && z.write_pointer_blocks() == self.cap()
    }

    /// Blocks of a zone's summary that hold entries (the rest are zeros).
    pub(super) fn summary_encoded_blocks(&self) -> u64 {
        summary::encoded_blocks(self.data_cap(), self.block_size())
    }

    /// The next read of `zone`'s summary, from its block `first`: at most
    /// `max_transfer_blocks`. Returns the command and its block count.
    pub(super) fn summary_read(&self, zone: ZoneId, first: u64) -> (Command, u32) {
        let left = self.summary_encoded_blocks() - first;
        let count = left.min(u64::from(self.geo.max_transfer_blocks)) as u32;
        let cmd = Command::Read {
            zone,
            offset_blocks: self.data_cap() + first,
            block_count: count,
            priority: ReadPriority::Background,
        };
        (cmd, count)
    }

    /// The offset → LBA table of victim `zone` from its summary blocks
    /// (`read`: all of them, in order), if they decode and name every live
    /// block of the zone the way the map does; else from a walk of the map.
    /// `shared`: the shared entries of the zone by offset, which name the
    /// blocks the summary need not.
    pub(super) fn victim_lbas(
        &mut self,
        zone: ZoneId,
        read: Option<&[u8]>,
        shared: &[crate::shared::SharedId],
    ) -> Box<[u32]> {
        let bs = self.block_size();
        let decoded = read.and_then(|data| summary::decode(zone, self.data_cap(), data, bs).ok());
        if let Some(lbas) = decoded.filter(|l| self.names_every_live_block(zone, l, shared)) {
            return lbas;
        }
        self.stats.summary_map_walks += 1;
        self.lbas_from_map(zone)
    }

    fn names_every_live_block(
        &self,
        zone: ZoneId,
        lbas: &[u32],
        shared: &[crate::shared::SharedId],
    ) -> bool {
        let cap = self.cap();
        (0..cap).all(|off| {
            let ppa = Ppa::new(zone, off, cap);
            if !self.mapping.is_live(ppa) {
                return true;
            }
            let in_table = shared.get(off as usize).is_some_and(|&id| {
                self.mapping
                    .shared_entry(id)
                    .is_some_and(|(at, ..)| at == ppa)
            });
            let lba = lbas.get(off as usize).copied().unwrap_or(NO_LBA);
            in_table
                || (lba != NO_LBA
                    && u64::from(lba) < self.mapping.space_blocks()
                    && self.mapping.target(u64::from(lba))
                        == Some(crate::mapping::Target::Direct(ppa)))
        })
    }

    /// Every LBA whose direct entry names a block of `zone`, by offset:
    /// O(mapped blocks), for zones without a usable summary.
    fn lbas_from_map(&self, zone: ZoneId) -> Box<[u32]> {
        let cap = self.cap();
        let mut lbas = vec![NO_LBA; cap as usize].into_boxed_slice();
        for (lba, ppa) in self.mapping.direct_in_zone(zone) {
            lbas[ppa.offset_blocks(cap) as usize] = lba as u32;
        }
        lbas
    }
}
