//! The zone table and the NVMe ZNS zone state machine, with open/active
//! counts kept incrementally so no command scans all zones.

use zftl_core::backend::ZoneId;
use zftl_core::{DeviceError, ZoneState};

pub(crate) struct ZoneTable {
    state: Vec<ZoneState>,
    /// Blocks written (programmed, torn or failed) from the zone start. For a
    /// `Full` zone this may be below capacity (finished early); `zone_info`
    /// reports capacity then.
    wp_blocks: Vec<u64>,
    open_zones: u32,
    active_zones: u32,
    max_open_zones: u32,
    max_active_zones: u32,
    capacity_blocks: u64,
}

impl ZoneTable {
    pub fn new(
        zone_count: usize,
        capacity_blocks: u64,
        max_open_zones: u32,
        max_active_zones: u32,
    ) -> Self {
        ZoneTable {
            state: vec![ZoneState::Empty; zone_count],
            wp_blocks: vec![0; zone_count],
            open_zones: 0,
            active_zones: 0,
            max_open_zones,
            max_active_zones,
            capacity_blocks,
        }
    }

    pub fn state(&self, zone: ZoneId) -> ZoneState {
        self.state[zone as usize]
    }

    pub fn wp(&self, zone: ZoneId) -> u64 {
        self.wp_blocks[zone as usize]
    }

    #[cfg(test)]
    pub fn open_zones(&self) -> u32 {
        self.open_zones
    }

    #[cfg(test)]
    pub fn active_zones(&self) -> u32 {
        self.active_zones
    }

    /// Sets a zone's state and write pointer, keeping the counts right.
    pub fn set(&mut self, zone: ZoneId, state: ZoneState, wp_blocks: u64) {
        assert!(
            wp_blocks <= self.capacity_blocks,
            "zone {zone}: wp {wp_blocks} past capacity"
        );
        assert!(
            state != ZoneState::Empty || wp_blocks == 0,
            "zone {zone}: empty with wp {wp_blocks}"
        );
        let old = self.state[zone as usize];
        self.open_zones = self.open_zones - u32::from(old.is_open()) + u32::from(state.is_open());
        self.active_zones =
            self.active_zones - u32::from(old.is_active()) + u32::from(state.is_active());
        self.state[zone as usize] = state;
        self.wp_blocks[zone as usize] = wp_blocks;
    }

    /// Errors for commands on zones that are out of service.
    fn usable(&self, zone: ZoneId) -> Result<ZoneState, DeviceError> {
        match self.state(zone) {
            ZoneState::Offline => Err(DeviceError::ZoneOffline { zone }),
            ZoneState::ReadOnly => Err(DeviceError::ZoneReadOnly { zone }),
            s => Ok(s),
        }
    }

    /// Whether `zone`, currently `from`, may become open.
    fn may_open(&self, zone: ZoneId, from: ZoneState) -> Result<(), DeviceError> {
        if from == ZoneState::Empty
            && self.max_active_zones != 0
            && self.active_zones >= self.max_active_zones
        {
            return Err(DeviceError::TooManyActiveZones {
                zone,
                limit: self.max_active_zones,
            });
        }
        if !from.is_open() && self.max_open_zones != 0 && self.open_zones >= self.max_open_zones {
            return Err(DeviceError::TooManyOpenZones {
                zone,
                limit: self.max_open_zones,
            });
        }
        Ok(())
    }

    /// Checks a write or append may start; returns the state to apply while
    /// it runs (an empty or closed zone opens implicitly).
    pub fn begin_write(&self, zone: ZoneId) -> Result<ZoneState, DeviceError> {
        match self.usable(zone)? {
            ZoneState::Full => Err(DeviceError::ZoneFull { zone }),
            s @ (ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen) => Ok(s),
            s => {
                self.may_open(zone, s)?;
                Ok(ZoneState::ImplicitlyOpen)
            }
        }
    }

    /// Moves a zone after `blocks` were written at its write pointer.
    pub fn advance(&mut self, zone: ZoneId, open_state: ZoneState, blocks: u64) {
        let wp = self.wp(zone) + blocks;
        let state = if wp == self.capacity_blocks {
            ZoneState::Full
        } else {
            open_state
        };
        self.set(zone, state, wp);
    }

    /// The Open command: `(new_state, wp)`.
    pub fn open(&self, zone: ZoneId) -> Result<ZoneState, DeviceError> {
        match self.usable(zone)? {
            ZoneState::Full => Err(DeviceError::InvalidTransition {
                zone,
                state: ZoneState::Full,
                action: "open",
            }),
            s => {
                self.may_open(zone, s)?;
                Ok(ZoneState::ExplicitlyOpen)
            }
        }
    }

    /// The Close command. Closing a zone with nothing written empties it.
    pub fn close(&self, zone: ZoneId) -> Result<ZoneState, DeviceError> {
        match self.usable(zone)? {
            s if s.is_open() && self.wp(zone) == 0 => Ok(ZoneState::Empty),
            s if s.is_open() => Ok(ZoneState::Closed),
            ZoneState::Closed => Ok(ZoneState::Closed),
            state => Err(DeviceError::InvalidTransition {
                zone,
                state,
                action: "close",
            }),
        }
    }

    /// The Finish command: any writable zone becomes Full.
    pub fn finish(&self, zone: ZoneId) -> Result<ZoneState, DeviceError> {
        self.usable(zone).map(|_| ZoneState::Full)
    }

    /// After a power loss: open zones come back Closed (or Empty if nothing
    /// was written).
    pub fn close_all_open(&mut self) -> Vec<ZoneId> {
        let mut changed = Vec::new();
        for zone in 0..self.state.len() as ZoneId {
            if self.state(zone).is_open() {
                let wp = self.wp(zone);
                let state = if wp == 0 {
                    ZoneState::Empty
                } else {
                    ZoneState::Closed
                };
                self.set(zone, state, wp);
                changed.push(zone);
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_and_counts() {
        let mut t = ZoneTable::new(4, 8, 1, 2);
        assert_eq!(t.begin_write(0), Ok(ZoneState::ImplicitlyOpen));
        t.advance(0, ZoneState::ImplicitlyOpen, 2);
        assert_eq!(
            t.begin_write(1),
            Err(DeviceError::TooManyOpenZones { zone: 1, limit: 1 })
        );
        t.set(0, t.close(0).expect("close"), 2);
        assert_eq!(t.state(0), ZoneState::Closed);
        assert_eq!((t.open_zones(), t.active_zones()), (0, 1));
        t.set(1, t.open(1).expect("open"), 0);
        t.set(1, t.close(1).expect("close"), 0);
        assert_eq!(t.state(1), ZoneState::Empty);
        t.set(1, ZoneState::Closed, 1);
        assert_eq!(
            t.begin_write(2),
            Err(DeviceError::TooManyActiveZones { zone: 2, limit: 2 })
        );
        t.advance(0, ZoneState::ImplicitlyOpen, 6);
        assert_eq!(t.state(0), ZoneState::Full);
        assert_eq!(t.begin_write(0), Err(DeviceError::ZoneFull { zone: 0 }));
        assert_eq!((t.open_zones(), t.active_zones()), (0, 1));
    }
}
