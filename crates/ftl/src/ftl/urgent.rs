//! Room for urgent blocks: a FUA write's blocks do not wait for GC to free
//! a zone.
//!
//! Once the free zones are down to the GC reserve the host lanes open no
//! zone, and host appends wait until GC frees one: during steady GC that
//! was hundreds of milliseconds, and a FUA write, which waits for its own
//! blocks, waited as long (`zftl bench media`, docs/bench.md). The urgent
//! lane holds one zone for FUA writes' blocks alone. It opens a zone only
//! when the host lanes have no room, and may then take it from the GC
//! reserve: at most one zone below it (it opens at the reserve, the host
//! lanes only above it, so a zone GC frees goes to it first) and never
//! one of the last `URGENT_MIN_FREE_ZONES` free zones (an extra GC lane
//! leaves GC the last one; this leaves one more). It leaves one zone of
//! the device's open-zone budget to GC's lane, not to the host lanes:
//! those wait for GC anyway when it opens; GC's extra lanes leave one to
//! it while it holds none. What it costs: one more open
//! zone while it holds one, and up to one zone of the GC reserve while its
//! zone fills.

use super::lane::Lane;
use super::Ftl;
use crate::backend::ZoneId;

/// Free zones the urgent lane leaves at least when it opens a zone.
const URGENT_MIN_FREE_ZONES: u64 = 2;

impl Ftl {
    /// Where the next append of `queued` urgent blocks of host lane `lane`
    /// goes: the urgent lane's zone while it holds one (so it fills and
    /// closes), else the host lane's room, else a zone the urgent lane
    /// opens.
    pub(super) fn urgent_room(&mut self, lane: Lane, queued: u64) -> Option<(Lane, ZoneId, u64)> {
        if self.lane_zone(Lane::Urgent).is_none() {
            if let Some(to) = self.room_in(lane, queued, false) {
                return Some(to);
            }
        }
        let (zone, room) = self.lane_room(Lane::Urgent, queued, true)?;
        Some((Lane::Urgent, zone, room))
    }

    /// Whether the urgent lane may open a zone with `free` zones free: at
    /// the GC reserve (one zone into it) and leaving `URGENT_MIN_FREE_ZONES`
    /// less one.
    pub(super) fn urgent_may_open(&self, free: u64) -> bool {
        free >= u64::from(self.gc_reserve_zones).max(URGENT_MIN_FREE_ZONES)
    }

    /// Open zones the urgent lane leaves when it opens one: one for GC's
    /// lane if that holds none.
    pub(super) fn urgent_open_headroom(&self) -> usize {
        usize::from(self.lane_zone(Lane::Gc).is_none())
    }
}
