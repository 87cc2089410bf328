//! Room for urgent blocks: a FUA write's blocks do not wait for GC to free
//! a zone.
//!
//! Once the free zones are down to the GC reserve the host lanes open no
//! zone, and host appends wait until GC frees one: during steady GC that
//! was hundreds of milliseconds, and a FUA write, which waits for its own
//! blocks, waited as long (`zftl bench media`, docs/bench.md). The urgent
//! lane holds one zone for FUA writes' blocks alone. It opens a zone only
//! when the host lanes have no room, and may then take it from the GC
//! reserve: at the reserve (one zone into it; the host lanes open only
//! above it, so a zone GC frees goes to it first), never one of the last
//! `URGENT_MIN_FREE_ZONES` free zones (an extra GC lane leaves GC the last
//! one; this leaves one more, and one zone always lets GC finish a
//! victim). It leaves one zone of the device's open-zone budget to GC's
//! lane, not to the host lanes: those wait for GC anyway when it opens;
//! GC's extra lanes leave one to it while it holds none. What it costs:
//! one more open zone while it holds one, and up to one zone of the GC
//! reserve while its zone fills.
//!
//! Below the reserve (GC holding part of it) it opens no zone by default:
//! a FUA write then waits while GC, its copies in one zone's units, climbs
//! back to the reserve (518 ms in `zftl bench media` with bounded zone
//! queues). With `FtlConfig::urgent_below_reserve` it opens one there, and
//! another only once a host lane has opened a zone or GC has refilled the
//! reserve, so FUA and buffered writes take turns for the zones GC frees;
//! the buffered writes then wait longer for the host lanes (GC must refill
//! the zone the urgent lane took before they open one).

use super::lane::Lane;
use super::Ftl;
use crate::backend::ZoneId;

/// Free zones the urgent lane leaves at least when it opens a zone.
const URGENT_MIN_FREE_ZONES: u64 = 2;

impl Ftl {
    /// Where the next append of `queued` urgent blocks of host lane `lane`
    /// goes: the urgent lane's zone while it holds one (so it fills and
    /// closes), else the host lane's room (its stripes' too, so a stripe a
    /// deeper load opened fills and closes under FUA writes alone), else a
    /// zone the urgent lane opens.
    pub(super) fn urgent_room(&mut self, lane: Lane, queued: u64) -> Option<(Lane, ZoneId, u64)> {
        if self.lane_zone(Lane::Urgent).is_none() {
            if let Some(to) = self.host_room(lane, queued) {
                return Some(to);
            }
        }
        let (zone, room) = self.lane_room(Lane::Urgent, queued, true)?;
        Some((Lane::Urgent, zone, room))
    }

    /// Whether the urgent lane may open a zone with `free` zones free: at
    /// the GC reserve, or (`FtlConfig::urgent_below_reserve`) below it if
    /// its last zone did not come from there; leaving
    /// `URGENT_MIN_FREE_ZONES` less one.
    pub(super) fn urgent_may_open(&self, free: u64) -> bool {
        let reserve = u64::from(self.gc_reserve_zones);
        let below_ok = self.cfg.urgent_below_reserve && !self.urgent_below_reserve;
        free >= URGENT_MIN_FREE_ZONES && (free >= reserve || below_ok)
    }

    /// Open zones the urgent lane leaves when it opens one: one for GC's
    /// lane if that holds none.
    pub(super) fn urgent_open_headroom(&self) -> usize {
        usize::from(self.lane_zone(Lane::Gc).is_none())
    }
}
