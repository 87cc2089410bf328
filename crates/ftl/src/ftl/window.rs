//! The protection window (docs/design.md, "Time and the protection
//! window"): while the volume changes, the core takes a *point* (a
//! snapshot named `@` + its wall time) at most once per interval, drops
//! the points older than the window, and drops the oldest point sooner
//! when the kept versions crowd the spare space or a write or trim finds
//! no room: the window gives way first.

use super::range::SnapshotChange;
use super::Ftl;
use crate::history::{point_name, Snapshot};

/// The id of the requests the core makes itself (point creates and
/// drops); their replies are dropped.
pub(super) const INTERNAL_REQUEST_ID: u64 = u64::MAX;

/// The most points a window holds: the interval between points is at
/// least the window's length divided by this, and at least a second.
pub const MAX_WINDOW_POINTS: u64 = 1024;

const NS_PER_SEC: u64 = 1_000_000_000;

/// How often the wall time is looked at (it arrives every turn).
const CHECK_EVERY_NS: u64 = NS_PER_SEC / 10;

#[derive(Debug, Default)]
pub(super) struct WindowState {
    wall_ns: u64,
    next_check_ns: u64,
    /// Host writes, trims and vectors accepted, and the count at the
    /// newest point: no change, no new point.
    pub(super) changes: u64,
    changes_at_point: u64,
    /// Point creates and drops queued or running.
    pending: u32,
}

impl Ftl {
    /// The driver tells the core the wall time (ns since the Unix epoch).
    /// With a protection window configured
    /// ([`crate::FtlConfig::protect_window_secs`]) this takes and drops
    /// the window's points; otherwise it does nothing.
    pub fn handle_wall_time(&mut self, wall_ns: u64) {
        let w = &mut self.window;
        // A clock set back is believed: points are named by the clock.
        let back = wall_ns < w.wall_ns;
        w.wall_ns = wall_ns;
        if wall_ns < w.next_check_ns && !back {
            return;
        }
        w.next_check_ns = wall_ns.saturating_add(CHECK_EVERY_NS);
        self.advance_window();
    }

    /// Whether the driver needs to pass the wall time.
    pub fn wants_wall_time(&self) -> bool {
        self.cfg.protect_window_secs.is_some()
    }

    fn advance_window(&mut self) {
        let Some(window_secs) = self.cfg.protect_window_secs else {
            return;
        };
        if self.read_only || self.window.pending > 0 {
            return;
        }
        let now = self.window.wall_ns;
        let window_ns = window_secs.saturating_mul(NS_PER_SEC);
        let crowded = self.window_crowded();
        let (oldest, newest) = self.mapping.history().points();
        if let Some(p) = oldest {
            let id = p.id;
            if window_secs == 0 || p.wall_ns.saturating_add(window_ns) < now {
                self.stats.window_points_expired += 1;
                self.queue_point_change(SnapshotChange::Delete { id });
                return;
            }
            if crowded {
                self.stats.window_points_given_way += 1;
                self.queue_point_change(SnapshotChange::Delete { id });
                return;
            }
        }
        if window_secs == 0 || self.window.changes == self.window.changes_at_point {
            return;
        }
        let interval = (window_ns / MAX_WINDOW_POINTS).max(NS_PER_SEC);
        if now < newest.map_or(0, |p| p.wall_ns.saturating_add(interval)) {
            return;
        }
        let name = point_name(now);
        // The same second again (the clock went back), or the table is
        // full: no point this time.
        if self.mapping.history().check_create(&name).is_err() {
            return;
        }
        self.window.changes_at_point = self.window.changes;
        self.queue_point_change(SnapshotChange::Create { name, wall_ns: now });
    }

    /// Whether the kept versions take more than half of what they may
    /// use: of the media the logical size leaves free, or of the
    /// history's room. The window then gives way before writes find no
    /// room: a window that filled the over-provisioning would leave GC
    /// no dead blocks to work with.
    fn window_crowded(&self) -> bool {
        let kept = self.mapping.history().entry_count();
        let spare = self.usable_blocks.saturating_sub(self.max_mapped_blocks);
        kept > spare / 2 || self.history_room() < kept
    }

    /// A write or trim found no room while window points hold some: drops
    /// the oldest point (one at a time). Returns whether the request
    /// should wait for that (or for a sweep under way) rather than fail.
    pub(super) fn window_gives_way(&mut self) -> bool {
        if self.window.pending > 0 || self.mapping.history().sweeping() {
            return true;
        }
        let Some(id) = self.mapping.history().points().0.map(|p| p.id) else {
            return false;
        };
        self.stats.window_points_given_way += 1;
        self.queue_point_change(SnapshotChange::Delete { id });
        true
    }

    fn queue_point_change(&mut self, change: SnapshotChange) {
        self.window.pending += 1;
        self.ranges.queue_internal(INTERNAL_REQUEST_ID, change);
    }

    /// A reply to one of the core's own requests arrived.
    pub(super) fn internal_reply(&mut self, ok: bool) {
        self.window.pending -= 1;
        if !ok {
            self.stats.window_point_failures += 1;
        }
    }

    /// The oldest point the window still holds.
    pub fn oldest_point(&self) -> Option<&Snapshot> {
        self.mapping.history().points().0
    }
}
