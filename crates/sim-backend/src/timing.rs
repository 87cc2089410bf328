//! The timing model: each LUN does one NAND operation at a time, so work
//! queues per LUN on a virtual clock. A command finishes when its last
//! operation does, and never before an earlier command of the same zone.
//!
//! With `NandScheduling::Fifo` a LUN runs its operations in the order they
//! were queued, so an operation's times are fixed when it is queued. With
//! `ReadPriority` and `Suspend` a read may start before programs and
//! erases queued earlier (or suspend the one running), and a host read
//! before background reads queued earlier, which moves their ends, and
//! the finish of their commands, later; never earlier. The
//! scheduler keeps each LUN's operations that have not ended, in the order
//! the LUN runs them, and each command's current finish; the device asks
//! for a command's finish again before it executes it (docs/sim.md).

use std::collections::{HashMap, VecDeque};

use crate::config::{NandScheduling, Timing};

/// The kind of NAND operation a command queues on a LUN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// A page read of a host read (`ReadPriority::Host`).
    Read,
    /// A page read of a background read (`ReadPriority::Background`).
    BackgroundRead,
    Program,
    Erase,
}

impl Op {
    fn is_read(self) -> bool {
        matches!(self, Op::Read | Op::BackgroundRead)
    }
}

/// One operation, or the part before a suspension of one, on a LUN.
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The sequence number of the command it belongs to.
    cmd: u64,
    op: Op,
    start_ns: u64,
    end_ns: u64,
    /// A program or erase: background reads that run right before it,
    /// between it and the operation before it. A background read: host
    /// reads queued after it that run before it.
    reads_ahead: u32,
    /// A program or erase: host reads that run right before it or inside
    /// its suspensions.
    host_ahead: u32,
    /// Suspensions this program or erase took.
    suspends: u32,
    /// The part of a program or erase before it was suspended (its end is
    /// the suspension, not the operation's end; it is never suspended).
    head: bool,
    /// A read: reads of its command queued on its LUN before it, not ended
    /// (reads of different commands take turns page by page).
    turn: u32,
}

/// A command's timing while it is pending.
#[derive(Debug)]
struct CmdTime {
    /// The latest end among its operations (`now` at queueing if none),
    /// and no earlier than the previous command of its zone.
    finish_ns: u64,
    zone: Option<u32>,
    /// The next command of its zone, while pending.
    next_in_zone: Option<u64>,
}

pub(crate) struct Scheduler {
    timing: Option<Timing>,
    /// When each LUN finishes the work already queued on it.
    pub lun_free_at_ns: Vec<u64>,
    /// Per LUN, the operations not known to have ended, in the order the
    /// LUN runs them (only when reads may pass: `ReadPriority`, `Suspend`).
    /// Bounded by the operations of the commands in flight.
    lun_ops: Vec<VecDeque<Slot>>,
    /// Pending commands by sequence number. Bounded by the queue depth.
    cmds: HashMap<u64, CmdTime>,
    /// The latest command queued per zone, while pending.
    zone_last: Vec<Option<u64>>,
    /// Finish time of the latest command queued per zone (ordering per zone).
    zone_last_finish_ns: Vec<u64>,
    /// The latest reset queued per zone, while pending.
    zone_reset: Vec<Option<u64>>,
    /// Per zone, the reads not ordered after its earlier commands
    /// (`read_unordered`) since its latest ordered command, while pending:
    /// the next ordered command of the zone finishes after them. Bounded
    /// by the commands in flight.
    zone_unordered: Vec<Vec<u64>>,
    /// Sum over LUNs of time spent on operations.
    pub busy_ns_total: u64,
    /// Time each LUN spent on operations.
    pub lun_busy_ns: Vec<u64>,
    /// Page reads run ahead of an operation queued or suspended before them.
    pub reads_passed: u64,
    /// Programs and erases suspended for a read.
    pub suspensions: u64,
    /// Host page reads that went ahead of a background read queued before.
    pub host_reads_first: u64,
    /// Scratch: commands whose operations moved, and their new ends.
    moved: Vec<(u64, u64)>,
}

impl Scheduler {
    pub fn new(timing: Option<Timing>, luns: usize, zones: usize) -> Self {
        Scheduler {
            timing,
            lun_free_at_ns: vec![0; luns],
            lun_ops: vec![VecDeque::new(); luns],
            cmds: HashMap::new(),
            zone_last: vec![None; zones],
            zone_last_finish_ns: vec![0; zones],
            zone_reset: vec![None; zones],
            zone_unordered: vec![Vec::new(); zones],
            busy_ns_total: 0,
            lun_busy_ns: vec![0; luns],
            reads_passed: 0,
            suspensions: 0,
            host_reads_first: 0,
            moved: Vec::new(),
        }
    }

    pub fn enabled(&self) -> bool {
        self.timing.is_some()
    }

    /// Whether reads may pass programs and erases (times may move).
    fn reads_pass(&self) -> bool {
        self.timing
            .is_some_and(|t| t.scheduling != NandScheduling::Fifo)
    }

    fn add_busy(&mut self, lun: usize, ns: u64) {
        self.busy_ns_total = self.busy_ns_total.saturating_add(ns);
        let busy = &mut self.lun_busy_ns[lun];
        *busy = busy.saturating_add(ns);
    }

    /// Queues one operation of command `cmd` on `lun` no earlier than
    /// `now_ns`; returns its end as of now. With timing off everything
    /// finishes at `now_ns`.
    pub fn queue(&mut self, cmd: u64, lun: u64, op: Op, now_ns: u64) -> u64 {
        let Some(t) = self.timing else { return now_ns };
        let lun = lun as usize;
        if self.reads_pass() {
            let q = &mut self.lun_ops[lun];
            while q.front().is_some_and(|s| s.end_ns <= now_ns) {
                q.pop_front();
            }
            if op.is_read() && !q.is_empty() {
                return self.queue_read_ahead(cmd, lun, op, &t, now_ns);
            }
        }
        let cost = match op {
            Op::Read | Op::BackgroundRead => t.read_ns,
            Op::Program => t.program_ns,
            Op::Erase => t.erase_ns,
        };
        let free = &mut self.lun_free_at_ns[lun];
        let start = (*free).max(now_ns);
        let finish = start.saturating_add(cost);
        *free = finish;
        self.add_busy(lun, cost);
        if self.reads_pass() {
            self.lun_ops[lun].push_back(Slot {
                cmd,
                op,
                start_ns: start,
                end_ns: finish,
                reads_ahead: 0,
                host_ahead: 0,
                suspends: 0,
                head: false,
                turn: 0,
            });
        }
        finish
    }

    /// A read on a LUN with operations queued, when reads may pass: it
    /// goes after the operation running, right before the first program or
    /// erase not started that has not let `max_reads_ahead` reads of its
    /// kind (host or background) run right before it. Among the reads not
    /// started queued there, a host read (`Op::Read`) goes before the
    /// background ones that have not let `max_reads_ahead` host reads run
    /// before them; reads of one kind of different commands take turns
    /// page by page (its command's `n`th page read on the LUN goes after
    /// the others' `n`th ones, before their later ones). With `Suspend`, a
    /// host read that this puts right behind a program or erase running
    /// suspends that operation if it may take one more suspension and one
    /// more host read; background reads never suspend. So reads run before
    /// the programs and erases queued, in groups of at most
    /// `max_reads_ahead` of each kind between two of them, every program,
    /// erase and background read starts in bounded time, and a one-page
    /// host read waits for at most one page of each other host read
    /// command queued there, and for background reads only when they have
    /// let `max_reads_ahead` host reads pass. Returns the read's end.
    fn queue_read_ahead(&mut self, cmd: u64, lun: usize, op: Op, t: &Timing, now_ns: u64) -> u64 {
        let q = &mut self.lun_ops[lun];
        let max = t.max_reads_ahead;
        let host = op == Op::Read;
        let passable = |s: &Slot| {
            s.op.is_read()
                || if host {
                    s.host_ahead < max
                } else {
                    s.reads_ahead < max
                }
        };
        // The first program or erase not started, past the reads queued
        // and the programs and erases that let their share of reads ahead.
        let mut at = q
            .iter()
            .position(|s| s.start_ns > now_ns && !s.op.is_read())
            .unwrap_or(q.len());
        while at < q.len() && (q[at].op.is_read() || !passable(&q[at])) {
            at += 1;
        }
        // Back past the reads not started that it goes before.
        let turn = q.iter().filter(|s| s.cmd == cmd && s.op.is_read()).count() as u32;
        let goes_before = |s: &Slot| {
            s.op.is_read()
                && s.start_ns > now_ns
                && if host && s.op == Op::BackgroundRead {
                    s.reads_ahead < max
                } else {
                    s.op == op && s.turn > turn
                }
        };
        let mut background_passed = false;
        while at > 0 && goes_before(&q[at - 1]) {
            at -= 1;
            if q[at].op != op {
                // A host read ahead of a background one.
                q[at].reads_ahead += 1;
                background_passed = true;
            }
        }
        let running = q[0];
        let suspend = t.scheduling == NandScheduling::Suspend
            && host
            && at == 1
            && !running.op.is_read()
            && !running.head
            && running.start_ns <= now_ns
            && running.suspends < t.max_suspends
            && passable(&running)
            && now_ns.saturating_add(t.suspend_ns) < running.end_ns;
        if background_passed {
            self.host_reads_first += 1;
        }
        let (read_end, resume_at) = if suspend {
            // The running operation stops at `now + suspend_ns`, the read
            // runs, then the operation resumes: what remained of it plus
            // `resume_ns`.
            let remaining = running.end_ns - now_ns;
            let read_start = now_ns.saturating_add(t.suspend_ns);
            let read_end = read_start.saturating_add(t.read_ns);
            q[0].end_ns = read_start;
            q[0].head = true;
            let tail = Slot {
                start_ns: read_end,
                end_ns: read_end
                    .saturating_add(t.resume_ns)
                    .saturating_add(remaining),
                host_ahead: running.host_ahead + 1,
                suspends: running.suspends + 1,
                head: false,
                ..running
            };
            q.insert(1, read_slot(cmd, op, read_start, read_end, 0));
            q.insert(2, tail);
            self.suspensions += 1;
            if background_passed {
                self.reads_passed += 1;
            }
            self.moved.push((running.cmd, tail.end_ns));
            (read_end, 3)
        } else {
            let start = if at == 0 {
                now_ns
            } else {
                q[at - 1].end_ns.max(now_ns)
            };
            let read_end = start.saturating_add(t.read_ns);
            q.insert(at, read_slot(cmd, op, start, read_end, turn));
            if at + 1 < q.len() {
                self.reads_passed += 1;
            }
            // The program or erase right after its group of reads lets one
            // more read of its kind ahead.
            if let Some(next) = q.range_mut(at + 1..).find(|s| !s.op.is_read()) {
                let n = if host {
                    &mut next.host_ahead
                } else {
                    &mut next.reads_ahead
                };
                *n = n.saturating_add(1);
            }
            (read_end, at + 1)
        };
        // Everything after moves later, back to back.
        let mut cur = q[resume_at - 1].end_ns;
        for s in q.range_mut(resume_at..) {
            if s.start_ns < cur {
                let d = cur - s.start_ns;
                s.start_ns = cur;
                s.end_ns = s.end_ns.saturating_add(d);
                self.moved.push((s.cmd, s.end_ns));
            }
            cur = s.end_ns;
        }
        let last = q.back().map_or(0, |s| s.end_ns);
        let free = &mut self.lun_free_at_ns[lun];
        *free = (*free).max(last);
        let cost = if suspend {
            t.suspend_ns
                .saturating_add(t.read_ns)
                .saturating_add(t.resume_ns)
        } else {
            t.read_ns
        };
        self.add_busy(lun, cost);
        let mut moved = std::mem::take(&mut self.moved);
        for (c, end) in moved.drain(..) {
            self.raise(c, end);
        }
        self.moved = moved;
        read_end
    }

    /// An operation of pending command `cmd` now ends at `end_ns`: its
    /// finish, and that of the later commands of its zone, move with it.
    fn raise(&mut self, cmd: u64, end_ns: u64) {
        let mut at = cmd;
        let finish = end_ns;
        while let Some(c) = self.cmds.get_mut(&at) {
            if c.finish_ns >= finish {
                break;
            }
            c.finish_ns = finish;
            if let Some(z) = c.zone {
                if self.zone_last[z as usize] == Some(at) {
                    let last = &mut self.zone_last_finish_ns[z as usize];
                    *last = (*last).max(finish);
                }
            }
            match c.next_in_zone {
                Some(next) => at = next,
                None => break,
            }
        }
    }

    /// Records command `cmd` whose operations (queued with `queue`) end by
    /// `ops_end_ns`; orders it after earlier commands of its zone. Returns
    /// its finish as of now.
    pub fn command(&mut self, cmd: u64, zone: Option<u32>, ops_end_ns: u64, reset: bool) -> u64 {
        let mut finish = ops_end_ns;
        if let Some(z) = zone {
            let z = z as usize;
            if reset {
                self.zone_reset[z] = Some(cmd);
            }
            // After the reads queued before it that skipped the zone order;
            // if one of them moves later, it moves with it.
            for r in std::mem::take(&mut self.zone_unordered[z]) {
                if let Some(read) = self.cmds.get_mut(&r) {
                    finish = finish.max(read.finish_ns);
                    read.next_in_zone.get_or_insert(cmd);
                }
            }
            finish = finish.max(self.zone_last_finish_ns[z]);
            if let Some(prev) = self.zone_last[z].and_then(|p| self.cmds.get_mut(&p)) {
                prev.next_in_zone = Some(cmd);
            }
            self.zone_last[z] = Some(cmd);
            self.zone_last_finish_ns[z] = finish;
        }
        self.cmds.insert(
            cmd,
            CmdTime {
                finish_ns: finish,
                zone,
                next_in_zone: None,
            },
        );
        finish
    }

    /// Records read `cmd` of blocks its zone holds already (below the write
    /// pointer of the commands executed), whose operations end by
    /// `ops_end_ns`, when reads may pass: no earlier write of its zone
    /// changes what it reads, so it is not ordered after them, unless a
    /// reset of the zone is pending. Later commands of the zone still
    /// finish after it. Returns its finish, or `None` if it must be ordered
    /// (then call `command`).
    pub fn read_unordered(&mut self, cmd: u64, zone: u32, ops_end_ns: u64) -> Option<u64> {
        let z = zone as usize;
        if !self.reads_pass() || self.zone_reset[z].is_some_and(|r| self.cmds.contains_key(&r)) {
            return None;
        }
        let cmds = &self.cmds;
        self.zone_unordered[z].retain(|r| cmds.contains_key(r));
        self.zone_unordered[z].push(cmd);
        self.cmds.insert(
            cmd,
            CmdTime {
                finish_ns: ops_end_ns,
                zone: None,
                next_in_zone: None,
            },
        );
        Some(ops_end_ns)
    }

    /// A pending command's finish as of now (`None` if not recorded).
    pub fn finish_of(&self, cmd: u64) -> Option<u64> {
        self.cmds.get(&cmd).map(|c| c.finish_ns)
    }

    /// The command ran (or was dropped): forget it.
    pub fn retire(&mut self, cmd: u64) {
        if let Some(c) = self.cmds.remove(&cmd) {
            if let Some(z) = c.zone {
                if self.zone_last[z as usize] == Some(cmd) {
                    self.zone_last[z as usize] = None;
                }
            }
        }
    }

    /// After a power cut nothing is queued any more.
    pub fn clear(&mut self, now_ns: u64) {
        self.lun_free_at_ns.fill(now_ns);
        self.zone_last_finish_ns.fill(now_ns);
        self.zone_last.fill(None);
        self.zone_reset.fill(None);
        self.zone_unordered.iter_mut().for_each(Vec::clear);
        self.lun_ops.iter_mut().for_each(VecDeque::clear);
        self.cmds.clear();
    }
}

fn read_slot(cmd: u64, op: Op, start_ns: u64, end_ns: u64, turn: u32) -> Slot {
    Slot {
        cmd,
        op,
        start_ns,
        end_ns,
        reads_ahead: 0,
        host_ahead: 0,
        suspends: 0,
        head: false,
        turn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(scheduling: NandScheduling) -> Timing {
        Timing {
            scheduling,
            ..Timing::default()
        }
    }

    #[test]
    fn luns_overlap_and_serialize() {
        let mut s = Scheduler::new(Some(Timing::default()), 2, 1);
        assert_eq!(s.queue(0, 0, Op::Program, 0), 200_000);
        assert_eq!(s.queue(1, 1, Op::Program, 0), 200_000);
        assert_eq!(s.queue(2, 0, Op::Program, 0), 400_000);
        assert_eq!(s.busy_ns_total, 600_000);
        assert_eq!(s.lun_busy_ns, [400_000, 200_000]);
        assert_eq!(s.command(4, Some(0), 10, false), 10);
        assert_eq!(s.command(5, Some(0), 5, false), 10);
    }

    #[test]
    fn timing_off_costs_nothing() {
        let mut s = Scheduler::new(None, 1, 1);
        assert_eq!(s.queue(0, 0, Op::Erase, 7), 7);
        assert_eq!(s.busy_ns_total, 0);
    }

    /// Three programs of three commands on one LUN, then a read at 50 µs.
    fn programs_then_read(t: Timing) -> (Scheduler, u64) {
        let mut s = Scheduler::new(Some(t), 1, 3);
        for c in 0..3 {
            let end = s.queue(c, 0, Op::Program, 0);
            s.command(c, Some(c as u32), end, false);
        }
        let read = s.queue(9, 0, Op::Read, 50_000);
        s.command(9, None, read, false);
        (s, read)
    }

    #[test]
    fn fifo_read_waits_for_every_program() {
        let (s, read) = programs_then_read(with(NandScheduling::Fifo));
        assert_eq!(read, 625_000);
        assert_eq!((s.reads_passed, s.suspensions), (0, 0));
        assert_eq!(s.finish_of(2), Some(600_000));
    }

    #[test]
    fn read_priority_waits_for_the_running_program_only() {
        let (s, read) = programs_then_read(with(NandScheduling::ReadPriority));
        assert_eq!(read, 225_000);
        assert_eq!(s.finish_of(0), Some(200_000));
        assert_eq!(s.finish_of(1), Some(425_000));
        assert_eq!(s.finish_of(2), Some(625_000));
        assert_eq!(s.busy_ns_total, 625_000);
        assert_eq!(s.lun_free_at_ns, [625_000]);
        assert_eq!((s.reads_passed, s.suspensions), (1, 0));
    }

    #[test]
    fn suspend_stops_the_running_program() {
        let t = with(NandScheduling::Suspend);
        let (s, read) = programs_then_read(t);
        assert_eq!(read, 50_000 + 10_000 + 25_000);
        let more = 10_000 + 25_000 + 10_000;
        assert_eq!(s.finish_of(0), Some(200_000 + more));
        assert_eq!(s.finish_of(1), Some(400_000 + more));
        assert_eq!(s.finish_of(2), Some(600_000 + more));
        assert_eq!(s.busy_ns_total, 600_000 + more);
        assert_eq!((s.reads_passed, s.suspensions), (0, 1));
    }
}
