//! Command checks and execution: what each command does to the media and the
//! zone table when its time comes.

use std::io;

use zftl_core::backend::ZoneId;
use zftl_core::{Command, DeviceError, Outcome, Payload, ZoneState};

use crate::device::SimDevice;
use crate::faults::ProgramFate;
use crate::image::{PageState, EB_GROWN_BAD};
use crate::media::Piece;

impl SimDevice {
    /// Errors that depend only on the geometry, found at submit so a bad
    /// command never occupies a LUN.
    pub(crate) fn check_static(&self, command: &Command) -> Result<(), DeviceError> {
        let g = &self.geometry;
        if let Some(zone) = command.zone() {
            if zone >= g.zone_count {
                return Err(DeviceError::NoSuchZone { zone });
            }
        }
        let cap = g.zone_capacity_blocks;
        let wu = g.write_unit_blocks;
        match command {
            Command::Read {
                zone,
                offset_blocks,
                block_count,
                ..
            } => {
                let count = u64::from(*block_count);
                if count > u64::from(g.max_transfer_blocks) {
                    return Err(DeviceError::TooLarge {
                        block_count: count,
                        limit_blocks: g.max_transfer_blocks,
                    });
                }
                if count == 0 || *offset_blocks > cap || count > cap - offset_blocks {
                    return Err(DeviceError::OutOfRange {
                        zone: *zone,
                        offset_blocks: *offset_blocks,
                        block_count: count,
                    });
                }
            }
            Command::Write {
                zone,
                offset_blocks,
                data,
                oob,
            } => {
                let count = self.check_buffers(data, oob, g.max_transfer_blocks)?;
                if offset_blocks % u64::from(wu) != 0 || count % u64::from(wu) != 0 {
                    return Err(DeviceError::Misaligned {
                        zone: *zone,
                        offset_blocks: *offset_blocks,
                        block_count: count,
                        write_unit_blocks: wu,
                    });
                }
                if *offset_blocks > cap || count > cap - offset_blocks {
                    return Err(DeviceError::OutOfRange {
                        zone: *zone,
                        offset_blocks: *offset_blocks,
                        block_count: count,
                    });
                }
            }
            Command::Append { zone, data, oob } => {
                let count = self.check_buffers(data, oob, g.max_append_blocks)?;
                if count % u64::from(wu) != 0 {
                    return Err(DeviceError::Misaligned {
                        zone: *zone,
                        offset_blocks: 0,
                        block_count: count,
                        write_unit_blocks: wu,
                    });
                }
            }
            Command::Reset { .. }
            | Command::Finish { .. }
            | Command::Open { .. }
            | Command::Close { .. }
            | Command::Flush => {}
        }
        Ok(())
    }

    /// Checks data and OOB buffer sizes; returns the block count.
    fn check_buffers(
        &self,
        data: &Payload,
        oob: &[u8],
        limit_blocks: u32,
    ) -> Result<u64, DeviceError> {
        let bs = self.geometry.block_size_bytes as usize;
        if data.is_empty() || !data.len().is_multiple_of(bs) {
            return Err(DeviceError::BufferSize {
                expected_bytes: data.len().div_ceil(bs).max(1) * bs,
                actual_bytes: data.len(),
            });
        }
        let count = (data.len() / bs) as u64;
        if count > u64::from(limit_blocks) {
            return Err(DeviceError::TooLarge {
                block_count: count,
                limit_blocks,
            });
        }
        let oob_expected = data.len() / bs * self.geometry.oob_size_bytes as usize;
        if !oob.is_empty() && oob.len() != oob_expected {
            return Err(DeviceError::BufferSize {
                expected_bytes: oob_expected,
                actual_bytes: oob.len(),
            });
        }
        Ok(count)
    }

    /// Runs a command that passed the static checks.
    pub(crate) fn execute(&mut self, command: Command) -> Result<Outcome, DeviceError> {
        match command {
            Command::Read {
                zone,
                offset_blocks,
                block_count,
                ..
            } => {
                self.stats.host_reads += 1;
                self.read(zone, offset_blocks, block_count)
            }
            Command::Write {
                zone,
                offset_blocks,
                data,
                oob,
            } => {
                self.stats.host_writes += 1;
                self.program(zone, Some(offset_blocks), &data, &oob, ProgramFate::Landed)
            }
            Command::Append { zone, data, oob } => {
                self.stats.host_appends += 1;
                self.program(zone, None, &data, &oob, ProgramFate::Landed)
            }
            Command::Reset { zone } => {
                self.stats.host_resets += 1;
                self.reset(zone)
            }
            Command::Finish { zone } => {
                self.stats.host_finishes += 1;
                let state = self.zones.finish(zone)?;
                self.set_zone(zone, state, self.zones.wp(zone))
            }
            Command::Open { zone } => {
                let state = self.zones.open(zone)?;
                self.set_zone(zone, state, self.zones.wp(zone))
            }
            Command::Close { zone } => {
                let state = self.zones.close(zone)?;
                self.set_zone(zone, state, self.zones.wp(zone))
            }
            Command::Flush => {
                self.stats.host_flushes += 1;
                Ok(Outcome::Done)
            }
        }
    }

    /// Records a host I/O failure on the image; the device goes down after
    /// the current command (see `SimDevice::io_failure`).
    fn host_io(&mut self, op: &'static str, e: io::Error) -> DeviceError {
        self.io_failure = Some(format!("{op}: {e}"));
        DeviceError::HostIo {
            op,
            kind: e.kind(),
            message: e.to_string(),
        }
    }

    /// Sets and persists a zone's state (the zone entry is the commit point).
    fn set_zone(
        &mut self,
        zone: ZoneId,
        state: ZoneState,
        wp: u64,
    ) -> Result<Outcome, DeviceError> {
        self.zones.set(zone, state, wp);
        self.media
            .store_zone(zone, state, wp)
            .map_err(|e| self.host_io("store zone", e))?;
        Ok(Outcome::Done)
    }

    fn read(
        &mut self,
        zone: ZoneId,
        offset: u64,
        block_count: u32,
    ) -> Result<Outcome, DeviceError> {
        if self.zones.state(zone) == ZoneState::Offline {
            return Err(DeviceError::ZoneOffline { zone });
        }
        let count = u64::from(block_count);
        if let Some(i) = self.faults.read_fails(count) {
            self.stats.uncorrectable_reads += 1;
            return Err(DeviceError::UncorrectableRead {
                zone,
                offset_blocks: offset + i,
            });
        }
        let (bs, os) = (
            self.geometry.block_size_bytes as usize,
            self.geometry.oob_size_bytes as usize,
        );
        let mut data = Vec::with_capacity(count as usize * bs);
        let mut oob = Vec::with_capacity(count as usize * os);
        let unit = self.layout.program_unit_pages;
        if self.media.is_file() {
            return self.read_image(zone, offset, count, data, oob);
        }
        let mut b = offset;
        while b < offset + count {
            // Pages of one program unit are consecutive on the media.
            let run = (unit - b % unit).min(offset + count - b);
            let (_, _, page) = self.layout.locate(zone, b);
            match self.media.read(page, run as usize, &mut data, &mut oob) {
                Ok(None) => {}
                Ok(Some(i)) => {
                    self.stats.uncorrectable_reads += 1;
                    return Err(DeviceError::UncorrectableRead {
                        zone,
                        offset_blocks: b + i,
                    });
                }
                Err(e) => {
                    return Err(DeviceError::HostIo {
                        op: "read",
                        kind: e.kind(),
                        message: e.to_string(),
                    })
                }
            }
            b += run;
        }
        assert_eq!(
            (data.len(), oob.len()),
            (count as usize * bs, count as usize * os)
        );
        self.stats.media_page_reads += count;
        self.stats.host_bytes_read += count * bs as u64;
        Ok(Outcome::Read { data, oob })
    }

    /// `read` on an image: the program units' pages gathered into runs of
    /// the media, so each erase block's part of the read is one file read.
    fn read_image(
        &mut self,
        zone: ZoneId,
        offset: u64,
        count: u64,
        mut data: Vec<u8>,
        mut oob: Vec<u8>,
    ) -> Result<Outcome, DeviceError> {
        let unit = self.layout.program_unit_pages;
        let mut runs = Vec::with_capacity(count.div_ceil(unit) as usize + 1);
        let mut b = offset;
        while b < offset + count {
            // Pages of one program unit are consecutive on the media.
            let run = (unit - b % unit).min(offset + count - b);
            let (_, _, page) = self.layout.locate(zone, b);
            runs.push((page, run as usize));
            b += run;
        }
        match self.media.read_runs(&runs, &mut data, &mut oob) {
            Ok(None) => {}
            Ok(Some(i)) => {
                self.stats.uncorrectable_reads += 1;
                return Err(DeviceError::UncorrectableRead {
                    zone,
                    offset_blocks: offset + i,
                });
            }
            Err(e) => {
                return Err(DeviceError::HostIo {
                    op: "read",
                    kind: e.kind(),
                    message: e.to_string(),
                })
            }
        }
        let bs = self.geometry.block_size_bytes as u64;
        self.stats.media_page_reads += count;
        self.stats.host_bytes_read += count * bs;
        Ok(Outcome::Read { data, oob })
    }

    /// A write (`offset = Some`) or append. `fate` is `Landed` in normal
    /// operation and `Torn` when a power cut interrupts the command.
    pub(crate) fn program(
        &mut self,
        zone: ZoneId,
        offset: Option<u64>,
        data: &Payload,
        oob: &[u8],
        fate: ProgramFate,
    ) -> Result<Outcome, DeviceError> {
        let open_state = self.zones.begin_write(zone)?;
        let wp = self.zones.wp(zone);
        let bs = self.geometry.block_size_bytes as usize;
        let count = (data.len() / bs) as u64;
        match offset {
            Some(o) if o != wp => {
                return Err(DeviceError::BadWritePointer {
                    zone,
                    offset_blocks: o,
                    write_pointer_blocks: wp,
                })
            }
            None if wp + count > self.geometry.zone_capacity_blocks => {
                return Err(DeviceError::OutOfRange {
                    zone,
                    offset_blocks: wp,
                    block_count: count,
                })
            }
            _ => {}
        }
        // Pages are programmed from whole blocks; a payload split inside a
        // block (no FTL does that) is gathered into one buffer first.
        let gathered;
        let data = if data.parts().all(|p| p.len().is_multiple_of(bs)) {
            data
        } else {
            gathered = Payload::from(data.to_vec());
            &gathered
        };
        let unit = self.layout.program_unit_pages;
        let units = count / unit;
        let landed = match fate {
            ProgramFate::Landed => units,
            ProgramFate::Torn { landed_units } => landed_units.min(units - 1),
            ProgramFate::Lost => unreachable!("a lost program is never executed"),
        };
        let os = self.geometry.oob_size_bytes as usize;
        let unit_bytes = unit as usize * bs;
        let unit_oob = unit as usize * os;
        // The units land in one batch of image writes (see `Media::program_many`);
        // a failing unit ends the batch after the units before it.
        let mut pieces: Vec<Piece<'_>> = Vec::with_capacity(landed as usize);
        let mut failed = None;
        for u in 0..landed {
            let b = wp + u * unit;
            let (_, eb, page) = self.layout.locate(zone, b);
            if self.faults.program_fails() {
                failed = Some((b, eb, page));
                break;
            }
            // A unit's bytes may lie in several buffers: a piece each.
            let u = u as usize;
            let mut done_pages = 0;
            for d in data.pieces(u * unit_bytes, (u + 1) * unit_bytes) {
                let n = d.len() / bs;
                let o = if oob.is_empty() {
                    &[][..]
                } else {
                    let at = u * unit_oob + done_pages * os;
                    &oob[at..at + n * os]
                };
                pieces.push((page + done_pages as u64, d, o));
                done_pages += n;
            }
        }
        self.media
            .program_many(&pieces)
            .map_err(|e| self.host_io("program", e))?;
        self.stats.media_page_programs += pieces.len() as u64 * unit;
        if let Some((b, eb, page)) = failed {
            return self.program_failed(zone, b, eb, page);
        }
        let mut done = landed * unit;
        if landed < units {
            let (_, _, page) = self.layout.locate(zone, wp + done);
            self.media
                .set_states(page, unit, PageState::Torn)
                .map_err(|e| self.host_io("tear", e))?;
            done += unit;
        }
        self.zones.advance(zone, open_state, done);
        let (state, new_wp) = (self.zones.state(zone), self.zones.wp(zone));
        self.media
            .store_zone(zone, state, new_wp)
            .map_err(|e| self.host_io("store zone", e))?;
        self.stats.host_bytes_written += done * bs as u64;
        Ok(Outcome::Written {
            zone,
            offset_blocks: wp,
            block_count: count as u32,
        })
    }

    /// A program unit failed: its pages become unreadable, its erase block
    /// goes bad and the zone becomes read-only just past the failed unit.
    fn program_failed(
        &mut self,
        zone: ZoneId,
        offset: u64,
        eb: u64,
        page: u64,
    ) -> Result<Outcome, DeviceError> {
        let unit = self.layout.program_unit_pages;
        self.stats.program_failures += 1;
        self.media
            .set_states(page, unit, PageState::Failed)
            .map_err(|e| self.host_io("fail", e))?;
        self.media
            .mark_bad(eb, EB_GROWN_BAD)
            .map_err(|e| self.host_io("mark bad", e))?;
        self.set_zone(zone, ZoneState::ReadOnly, offset + unit)?;
        Err(DeviceError::ProgramFailed {
            zone,
            offset_blocks: offset,
        })
    }

    /// Erases every erase block of the zone. An empty zone needs no erase.
    /// Order on the image: erase table, zone entry (commit), page states.
    pub(crate) fn reset(&mut self, zone: ZoneId) -> Result<Outcome, DeviceError> {
        match self.zones.state(zone) {
            ZoneState::Offline => return Err(DeviceError::ZoneOffline { zone }),
            ZoneState::ReadOnly => {
                self.set_zone(zone, ZoneState::Offline, self.zones.wp(zone))?;
                return Err(DeviceError::ZoneOffline { zone });
            }
            ZoneState::Empty => return Ok(Outcome::Done),
            _ => {}
        }
        let mut failed = false;
        for j in 0..self.layout.zone_width_luns {
            let eb = self.layout.zone_erase_block(zone, j);
            let worn_out = self.media.erase_count(eb) >= self.cfg.endurance_erases;
            let result = if worn_out || self.faults.erase_fails() {
                failed = true;
                self.stats.erase_failures += 1;
                self.media.mark_bad(eb, EB_GROWN_BAD)
            } else {
                self.stats.media_block_erases += 1;
                self.media.count_erase(eb)
            };
            result.map_err(|e| self.host_io("erase", e))?;
        }
        if failed {
            self.set_zone(zone, ZoneState::Offline, self.zones.wp(zone))?;
            return Err(DeviceError::EraseFailed { zone });
        }
        self.set_zone(zone, ZoneState::Empty, 0)?;
        for j in 0..self.layout.zone_width_luns {
            let eb = self.layout.zone_erase_block(zone, j);
            self.media
                .clear_block(eb)
                .map_err(|e| self.host_io("erase", e))?;
        }
        Ok(Outcome::Done)
    }
}
