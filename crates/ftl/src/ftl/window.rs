//! The protection window (docs/design.md, "Time and the protection
//! window"): while the volume changes, the core takes a *point* (a
//! snapshot named `@` + its wall time) at most once per interval of wall
//! time or of host blocks written, drops the points the window has left,
//! and drops the oldest point sooner when the kept versions crowd the
//! spare space or a write, trim or vector finds no room: the window gives
//! way first.

use super::range::SnapshotChange;
use super::request::ReplyData;
use super::Ftl;
use crate::config::ProtectWindow;
use crate::error::IoError;
use crate::history::{point_name, Snapshot, SnapshotId, MAX_SNAPSHOTS};
use std::collections::VecDeque;

/// The most points a window holds: the interval between points is at
/// least the window's length divided by this, and at least a second (or
/// [`MIN_POINT_INTERVAL_BLOCKS`]).
pub const MAX_WINDOW_POINTS: u64 = 1024;

/// The fewest host blocks written between two points of a window counted
/// in blocks ([`ProtectWindow::Blocks`]): a point costs a drain and a
/// flush, so not one per few writes (1 MiB of 4 KiB blocks).
pub const MIN_POINT_INTERVAL_BLOCKS: u64 = 256;

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
    /// Host blocks written since mount when the newest point was queued.
    blocks_at_point: u64,
    /// A window counted in blocks looks again once the host blocks written
    /// reach this (a point is due or the oldest expires), besides every
    /// `CHECK_EVERY_NS`.
    blocks_due: u64,
    /// The points taken since mount, oldest first, with the host blocks
    /// written since mount when each was created. A point not here was
    /// recovered by the mount: it counts as taken at the mount (0).
    taken: VecDeque<(SnapshotId, u64)>,
    /// Point creates and drops queued or running.
    pending: u32,
}

impl Ftl {
    /// The driver tells the core the wall time (ns since the Unix epoch).
    /// With a protection window configured
    /// ([`crate::FtlConfig::protect_window`]) this takes and drops the
    /// window's points; otherwise it does nothing.
    pub fn handle_wall_time(&mut self, wall_ns: u64) {
        let w = &mut self.window;
        // A clock set back is believed: points are named by the clock.
        let back = wall_ns < w.wall_ns;
        w.wall_ns = wall_ns;
        let blocks_due = self.stats.host_write_blocks >= w.blocks_due;
        if wall_ns < w.next_check_ns && !back && !blocks_due {
            return;
        }
        if wall_ns >= w.next_check_ns || back {
            w.next_check_ns = wall_ns.saturating_add(CHECK_EVERY_NS);
        }
        self.advance_window();
        self.window.blocks_due = self.next_blocks_due();
    }

    /// Whether the driver needs to pass the wall time.
    pub fn wants_wall_time(&self) -> bool {
        self.cfg.protect_window.is_some()
    }

    /// Host blocks written since mount: what a window counted in blocks
    /// ages its points by (host writes, counted as they are admitted).
    fn blocks_written(&self) -> u64 {
        self.stats.host_write_blocks
    }

    /// The host blocks written since mount when point `id` was created (0
    /// for a point the mount recovered); forgets the points before it.
    fn point_blocks(&mut self, id: SnapshotId) -> u64 {
        let taken = &mut self.window.taken;
        while taken.front().is_some_and(|&(t, _)| t < id) {
            taken.pop_front();
        }
        match taken.front() {
            Some(&(t, blocks)) if t == id => blocks,
            _ => 0,
        }
    }

    /// Host blocks written since the oldest point was created (since the
    /// mount for a point the mount recovered); 0 without a point.
    pub(super) fn window_reach_blocks(&self) -> u64 {
        let Some(oldest) = self.mapping.history().points().0 else {
            return 0;
        };
        let at = self
            .window
            .taken
            .iter()
            .find(|&&(t, _)| t >= oldest.id)
            .filter(|&&(t, _)| t == oldest.id)
            .map_or(0, |&(_, blocks)| blocks);
        self.blocks_written().saturating_sub(at)
    }

    /// When a window counted in blocks next has something to do: a point
    /// due or the oldest expiring. `u64::MAX` for a window in time, and
    /// while nothing can be done before the next look at the clock.
    fn next_blocks_due(&mut self) -> u64 {
        let Some(ProtectWindow::Blocks(n)) = self.cfg.protect_window else {
            return u64::MAX;
        };
        if n == 0 || self.read_only || self.window.pending > 0 {
            // The reply to a pending change looks again (`internal_reply`).
            return u64::MAX;
        }
        let oldest = self.mapping.history().points().0.map(|p| p.id);
        let expires = match oldest {
            Some(id) => self.point_blocks(id).saturating_add(n).saturating_add(1),
            None => u64::MAX,
        };
        let next_point = self
            .window
            .blocks_at_point
            .saturating_add(blocks_interval(n));
        let due = expires.min(next_point);
        // Due already and still not done (a point's name taken this
        // second, or no change since the last point): the clock's next
        // look tries again.
        if due <= self.blocks_written() {
            u64::MAX
        } else {
            due
        }
    }

    fn advance_window(&mut self) {
        let Some(window) = self.cfg.protect_window else {
            return;
        };
        if self.read_only || self.window.pending > 0 {
            return;
        }
        let now = self.window.wall_ns;
        let written = self.blocks_written();
        let crowded = self.window_crowded();
        let (oldest, newest) = self.mapping.history().points();
        let (oldest, newest) = (oldest.cloned(), newest.map(|p| p.wall_ns));
        if let Some(p) = oldest {
            let id = p.id;
            let expired = match window {
                ProtectWindow::Secs(secs) => {
                    secs == 0 || p.wall_ns.saturating_add(secs.saturating_mul(NS_PER_SEC)) < now
                }
                ProtectWindow::Blocks(n) => {
                    n == 0 || written.saturating_sub(self.point_blocks(id)) > n
                }
            };
            if expired {
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
        if window.is_off() || self.window.changes == self.window.changes_at_point {
            return;
        }
        if let Some(newest_ns) = newest {
            let due = match window {
                ProtectWindow::Secs(secs) => {
                    let interval =
                        (secs.saturating_mul(NS_PER_SEC) / MAX_WINDOW_POINTS).max(NS_PER_SEC);
                    now >= newest_ns.saturating_add(interval)
                }
                ProtectWindow::Blocks(n) => {
                    written
                        >= self
                            .window
                            .blocks_at_point
                            .saturating_add(blocks_interval(n))
                }
            };
            if !due {
                return;
            }
        }
        let name = point_name(now);
        // The same second again (the clock went back, or a window in
        // blocks written fast), or the table is full: no point this time.
        if self.mapping.history().check_create(&name).is_err() {
            return;
        }
        self.window.changes_at_point = self.window.changes;
        self.window.blocks_at_point = written;
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

    /// The vector being checked found no room (`SnapshotSpace`) while
    /// window points hold some: the oldest point's drop goes ahead of the
    /// queue (a drop of it already queued is moved there), and the vector
    /// runs again behind it once its sweep is done. Returns whether it
    /// should (false: no point left, or the one left is what `keep`
    /// names, the snapshot the vector reverts to).
    pub(super) fn window_gives_way_to_vector(&mut self, keep: Option<SnapshotId>) -> bool {
        let Some(id) = self.mapping.history().points().0.map(|p| p.id) else {
            return false;
        };
        if keep == Some(id) {
            return false;
        }
        if !self.ranges.hurry_internal_delete(id) {
            self.stats.window_points_given_way += 1;
            self.window.pending += 1;
            self.ranges
                .queue_internal_front(SnapshotChange::Delete { id });
        }
        true
    }

    fn queue_point_change(&mut self, change: SnapshotChange) {
        self.window.pending += 1;
        self.ranges.queue_internal(change);
    }

    /// One of the core's own snapshot changes ended (applied, or failed).
    pub(super) fn internal_reply(&mut self, result: Result<&ReplyData, &IoError>) {
        self.window.pending -= 1;
        self.window.blocks_due = 0; // look again at the next turn
        match result {
            Ok(ReplyData::Snapshot(s)) if s.is_point() => {
                let written = self.blocks_written();
                let taken = &mut self.window.taken;
                if taken.len() >= MAX_SNAPSHOTS {
                    taken.pop_front(); // then counts as taken at the mount
                }
                taken.push_back((s.id, written));
            }
            Ok(_) => {}
            Err(_) => self.stats.window_point_failures += 1,
        }
    }

    /// The oldest point the window still holds.
    pub fn oldest_point(&self) -> Option<&Snapshot> {
        self.mapping.history().points().0
    }
}

/// The fewest host blocks written between two points of a window of `n`
/// blocks.
fn blocks_interval(n: u64) -> u64 {
    (n / MAX_WINDOW_POINTS).max(MIN_POINT_INTERVAL_BLOCKS)
}
