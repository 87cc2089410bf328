//! The timing model: each LUN does one NAND operation at a time, so work
//! queues per LUN on a virtual clock. A command finishes when its last
//! operation does, and never before an earlier command of the same zone.

use crate::config::Timing;

pub(crate) struct Scheduler {
    timing: Option<Timing>,
    /// When each LUN finishes the work already queued on it.
    pub lun_free_at_ns: Vec<u64>,
    /// Finish time of the latest command queued per zone (ordering per zone).
    zone_last_finish_ns: Vec<u64>,
    /// Finish time of the latest program queued anywhere (for Flush).
    last_program_finish_ns: u64,
    /// Sum over LUNs of time spent on operations.
    pub busy_ns_total: u64,
    /// Time each LUN spent on operations.
    pub lun_busy_ns: Vec<u64>,
}

/// The kind of NAND operation a command queues on a LUN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Program,
    Erase,
}

impl Scheduler {
    pub fn new(timing: Option<Timing>, luns: usize, zones: usize) -> Self {
        Scheduler {
            timing,
            lun_free_at_ns: vec![0; luns],
            zone_last_finish_ns: vec![0; zones],
            last_program_finish_ns: 0,
            busy_ns_total: 0,
            lun_busy_ns: vec![0; luns],
        }
    }

    pub fn enabled(&self) -> bool {
        self.timing.is_some()
    }

    /// Queues one operation on `lun` no earlier than `now_ns`; returns its
    /// finish time. With timing off everything finishes at `now_ns`.
    pub fn queue(&mut self, lun: u64, op: Op, now_ns: u64) -> u64 {
        let Some(t) = self.timing else { return now_ns };
        let cost = match op {
            Op::Read => t.read_ns,
            Op::Program => t.program_ns,
            Op::Erase => t.erase_ns,
        };
        let free = &mut self.lun_free_at_ns[lun as usize];
        let finish = (*free).max(now_ns).saturating_add(cost);
        *free = finish;
        self.busy_ns_total = self.busy_ns_total.saturating_add(cost);
        let busy = &mut self.lun_busy_ns[lun as usize];
        *busy = busy.saturating_add(cost);
        if op == Op::Program {
            self.last_program_finish_ns = self.last_program_finish_ns.max(finish);
        }
        finish
    }

    /// Orders a command after earlier ones of its zone; returns its finish.
    pub fn order_in_zone(&mut self, zone: Option<u32>, finish_ns: u64) -> u64 {
        let Some(zone) = zone else { return finish_ns };
        let last = &mut self.zone_last_finish_ns[zone as usize];
        let finish = finish_ns.max(*last);
        *last = finish;
        finish
    }

    /// A flush finishes once every program queued before it has.
    pub fn flush_finish(&self, now_ns: u64) -> u64 {
        now_ns.max(self.last_program_finish_ns)
    }

    /// After a power cut nothing is queued any more.
    pub fn clear(&mut self, now_ns: u64) {
        self.lun_free_at_ns.fill(now_ns);
        self.zone_last_finish_ns.fill(now_ns);
        self.last_program_finish_ns = now_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn luns_overlap_and_serialize() {
        let mut s = Scheduler::new(Some(Timing::default()), 2, 1);
        assert_eq!(s.queue(0, Op::Program, 0), 200_000);
        assert_eq!(s.queue(1, Op::Program, 0), 200_000);
        assert_eq!(s.queue(0, Op::Program, 0), 400_000);
        assert_eq!(s.flush_finish(0), 400_000);
        assert_eq!(s.busy_ns_total, 600_000);
        assert_eq!(s.lun_busy_ns, [400_000, 200_000]);
        assert_eq!(s.order_in_zone(Some(0), 10), 10);
        assert_eq!(s.order_in_zone(Some(0), 5), 10);
    }

    #[test]
    fn timing_off_costs_nothing() {
        let mut s = Scheduler::new(None, 1, 1);
        assert_eq!(s.queue(0, Op::Erase, 7), 7);
        assert_eq!(s.busy_ns_total, 0);
    }
}
