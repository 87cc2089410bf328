//! Power loss and power-on: which in-flight commands survive a cut.
//!
//! At a cut, commands not yet executed are resolved in submission order, per
//! zone, with the seeded fate stream: a program lands, is torn (a prefix of
//! its units lands, the next unit is torn, the rest are lost) or is lost; a
//! zone management command happens or not. After the first command of a
//! zone that did not fully happen, every later command of that zone is lost,
//! so each zone keeps a prefix of its queue. Every command in flight then
//! completes with `DeviceGone`.

use zftl_core::{Command, Completion, DeviceError};

use crate::device::SimDevice;
use crate::error::SimError;
use crate::faults::ProgramFate;

impl SimDevice {
    /// Cuts power now. Does nothing if the power is already off.
    pub fn power_cut(&mut self) {
        if !self.powered {
            return;
        }
        self.powered = false;
        self.stats.power_cuts += 1;
        let mut unfinished: Vec<_> = std::mem::take(&mut self.pending).into_vec();
        self.stats.commands_cut += unfinished.len() as u64;
        unfinished.sort_by_key(|p| p.seq);
        let mut zone_stopped = vec![false; self.geometry.zone_count as usize];
        for p in &unfinished {
            if p.early.is_some() {
                continue;
            }
            if let Some(zone) = p.command.zone() {
                if !zone_stopped[zone as usize] && !self.resolve(&p.command) {
                    zone_stopped[zone as usize] = true;
                }
            }
        }
        for c in self.ready.iter_mut() {
            c.result = Err(DeviceError::DeviceGone);
        }
        self.ready
            .extend(unfinished.into_iter().map(|p| Completion {
                tag: p.tag,
                result: Err(DeviceError::DeviceGone),
            }));
        self.sched.clear(self.clock_ns);
    }

    /// Applies the fate of one unfinished zone command; returns whether it
    /// fully happened (later commands of its zone may then still happen).
    fn resolve(&mut self, command: &Command) -> bool {
        let bs = u64::from(self.geometry.block_size_bytes);
        let (zone, offset, data, oob) = match command {
            Command::Read { .. } | Command::Flush => return true,
            Command::Write {
                zone,
                offset_blocks,
                data,
                oob,
            } => (*zone, Some(*offset_blocks), data, oob),
            Command::Append { zone, data, oob } => (*zone, None, data, oob),
            Command::Reset { .. }
            | Command::Finish { .. }
            | Command::Open { .. }
            | Command::Close { .. } => {
                if !self.faults.other_happens() {
                    return false;
                }
                // The outcome (including an error such as EraseFailed) has
                // taken effect on the media; nobody sees the result.
                let _ = self.execute(command.clone());
                return true;
            }
        };
        let units = data.len() as u64 / bs / self.layout.program_unit_pages;
        match self.faults.program_fate(units) {
            ProgramFate::Lost => false,
            fate => {
                let _ = self.program(zone, offset, data, oob, fate);
                fate == ProgramFate::Landed
            }
        }
    }

    /// Powers the device back on with exactly its durable state; open zones
    /// come back Closed (or Empty if nothing was written). The queue pair is
    /// new: `DeviceGone` completions not reaped before this call are dropped,
    /// so the device starts with nothing in flight.
    pub fn power_on(&mut self) -> Result<(), SimError> {
        if self.powered {
            return Ok(());
        }
        if let Some(reason) = &self.io_failure {
            return Err(SimError::DeviceFailed {
                reason: reason.clone(),
            });
        }
        for zone in self.zones.close_all_open() {
            let (state, wp) = (self.zones.state(zone), self.zones.wp(zone));
            self.media
                .store_zone(zone, state, wp)
                .map_err(|e| SimError::DeviceFailed {
                    reason: format!("store zone: {e}"),
                })?;
        }
        self.ready.clear();
        self.sched.clear(self.clock_ns);
        self.sched_wp
            .iter_mut()
            .zip(0..)
            .for_each(|(w, z)| *w = self.zones.wp(z));
        self.powered = true;
        Ok(())
    }
}
