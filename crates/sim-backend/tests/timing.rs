//! The timing model on the virtual clock.

mod common;

use common::*;
use zftl_core::{Backend, BackendExt, Command, ReadPriority};
use zftl_sim::{NandScheduling, SimConfig, SimDevice, Timing};

fn timed() -> SimDevice {
    let mut cfg = SimConfig::small_for_tests();
    cfg.timing = Some(Timing::default());
    SimDevice::create_memory(cfg).expect("device")
}

#[test]
fn one_program_takes_200us() {
    let mut d = timed();
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 1, 0), vec![])
        .expect("write");
    assert_eq!(d.clock_ns(), 200_000);
    d.read_blocks(0, 0, 1).expect("read");
    assert_eq!(d.clock_ns(), 225_000);
    d.reset_zone(0).expect("reset");
    assert_eq!(
        d.clock_ns(),
        225_000 + 1_500_000,
        "the zone's two erase blocks erase in parallel"
    );
}

#[test]
fn programs_on_different_luns_overlap_and_on_one_lun_serialize() {
    // Zones 0 and 1 use LUNs {0,1} and {2,3}: one block at offset 0 and 1
    // of each zone hits all four LUNs.
    let mut d = timed();
    let g = d.geometry().clone();
    for (tag, (zone, off)) in [(0, 0), (0, 1), (1, 0), (1, 1)].into_iter().enumerate() {
        let cmd = Command::Write {
            zone,
            offset_blocks: off,
            data: blocks(&g, zone, off, 1, 0).into(),
            oob: vec![],
        };
        d.submit(tag as u64, cmd).expect("submit");
    }
    let done = drain(&mut d);
    assert!(done.iter().all(|c| c.result.is_ok()));
    assert_eq!(d.clock_ns(), 200_000, "4 LUNs in parallel");

    let mut d = timed();
    // Offsets 0, 2, 4, 6 of zone 0 all sit on LUN 0.
    for (tag, off) in (0..8).enumerate() {
        let cmd = Command::Write {
            zone: 0,
            offset_blocks: off,
            data: blocks(&g, 0, off, 1, 0).into(),
            oob: vec![],
        };
        d.submit(tag as u64, cmd).expect("submit");
    }
    drain(&mut d);
    assert_eq!(d.clock_ns(), 4 * 200_000, "two LUNs, four programs each");
    assert_eq!(d.stats().busy_ns_total, 8 * 200_000);
}

#[test]
fn reap_only_delivers_what_is_due_and_a_flush_completes_at_once() {
    let mut d = timed();
    let g = d.geometry().clone();
    d.submit(
        1,
        Command::Write {
            zone: 0,
            offset_blocks: 0,
            data: blocks(&g, 0, 0, 1, 0).into(),
            oob: vec![],
        },
    )
    .expect("submit");
    d.submit(2, Command::Flush).expect("submit");
    let mut out = Vec::new();
    // No volatile cache: the flush covers only what completed before it.
    assert_eq!(d.reap(&mut out, 8), 1, "only the flush is done at t=0");
    assert_eq!(out[0].tag, 2);
    assert!(out[0].result.is_ok());
    d.advance_clock_to(199_999);
    assert_eq!(d.reap(&mut out, 8), 0);
    d.wait().expect("wait");
    assert_eq!(d.clock_ns(), 200_000);
    assert_eq!(d.reap(&mut out, 8), 1);
    assert_eq!(out.iter().map(|c| c.tag).collect::<Vec<_>>(), [2, 1]);
    d.advance_clock_to(5);
    assert_eq!(d.clock_ns(), 200_000, "the clock never goes back");
}

#[test]
fn timing_off_keeps_the_clock_still_and_commands_pending_until_reaped() {
    let mut d = SimDevice::create_memory(SimConfig::small_for_tests()).expect("device");
    let g = d.geometry().clone();
    d.submit(
        1,
        Command::Write {
            zone: 0,
            offset_blocks: 0,
            data: blocks(&g, 0, 0, 1, 0).into(),
            oob: vec![],
        },
    )
    .expect("submit");
    assert_eq!(d.stats().media_page_programs, 0, "not executed before reap");
    drain(&mut d);
    assert_eq!(d.stats().media_page_programs, 1);
    assert_eq!(d.clock_ns(), 0);
}

fn timed_with(scheduling: NandScheduling) -> SimDevice {
    let mut cfg = SimConfig::small_for_tests();
    cfg.timing = Some(Timing {
        scheduling,
        ..Timing::default()
    });
    SimDevice::create_memory(cfg).expect("device")
}

/// Reaps until every tag of `tags` completed; returns the clock at each
/// completion, by tag, and the order they completed in.
fn completion_times(d: &mut SimDevice, tags: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let mut at = vec![u64::MAX; tags.len()];
    let mut order = Vec::new();
    let mut out = Vec::new();
    while at.contains(&u64::MAX) {
        if d.reap(&mut out, usize::MAX) == 0 {
            d.wait().expect("wait");
            continue;
        }
        for c in out.drain(..) {
            assert!(c.result.is_ok(), "tag {}: {:?}", c.tag, c.result);
            let i = tags.iter().position(|&t| t == c.tag).expect("known tag");
            at[i] = d.clock_ns();
            order.push(c.tag);
        }
    }
    (at, order)
}

fn write(zone: u32, offset: u64, count: u64, g: &zftl_core::Geometry) -> Command {
    Command::Write {
        zone,
        offset_blocks: offset,
        data: blocks(g, zone, offset, count, 3).into(),
        oob: vec![],
    }
}

fn read(zone: u32, offset: u64) -> Command {
    Command::Read {
        zone,
        offset_blocks: offset,
        block_count: 1,
        priority: ReadPriority::Host,
    }
}

/// Zone 0 lies on LUNs 0 and 1 (even offsets on LUN 0). Four writes of
/// two blocks queue four programs on each LUN; 50 µs later a read of a
/// block on LUN 0 comes, then a flush (done at once: no volatile cache).
fn read_behind_four_programs(scheduling: NandScheduling) -> (Vec<u64>, Vec<u64>) {
    let mut d = timed_with(scheduling);
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 2, 3), vec![])
        .expect("first write");
    let t0 = d.clock_ns();
    assert_eq!(t0, 200_000);
    for (tag, off) in [2, 4, 6, 8].into_iter().enumerate() {
        d.submit(tag as u64, write(0, off, 2, &g)).expect("submit");
    }
    d.advance_clock_to(t0 + 50_000);
    d.submit(10, read(0, 0)).expect("submit read");
    d.submit(11, Command::Flush).expect("submit flush");
    let (at, order) = completion_times(&mut d, &[0, 1, 2, 3, 10, 11]);
    // Programs still complete in order, and what they wrote is there.
    let writes: Vec<u64> = order.iter().copied().filter(|&t| t < 4).collect();
    assert_eq!(writes, [0, 1, 2, 3]);
    let (data, _) = d.read_blocks(0, 0, 10).expect("read back");
    assert_eq!(data, blocks(&g, 0, 0, 10, 3));
    (at.iter().map(|a| a - t0).collect(), order)
}

#[test]
fn fifo_read_waits_for_every_program_queued_before_it() {
    let (at, _) = read_behind_four_programs(NandScheduling::Fifo);
    // Writes at 200, 400, 600, 800 µs; the read after all four; the flush
    // at once (it covers none of them).
    assert_eq!(at, [200_000, 400_000, 600_000, 800_000, 825_000, 50_000]);
}

#[test]
fn read_priority_read_waits_for_the_running_program_only() {
    let (at, _) = read_behind_four_programs(NandScheduling::ReadPriority);
    // The read runs right after the first program; the three programs
    // queued behind it (on LUN 0) end 25 µs later; the flush at once.
    assert_eq!(at, [200_000, 425_000, 625_000, 825_000, 225_000, 50_000]);
}

#[test]
fn suspend_read_takes_the_suspend_latency_and_delays_the_programs() {
    let t = Timing::default();
    let (at, order) = read_behind_four_programs(NandScheduling::Suspend);
    let read_done = 50_000 + t.suspend_ns + t.read_ns;
    assert_eq!(read_done, 85_000);
    // The running program pays suspend + read + resume; the rest follow.
    let more = t.suspend_ns + t.read_ns + t.resume_ns;
    assert_eq!(
        at,
        [
            200_000 + more,
            400_000 + more,
            600_000 + more,
            800_000 + more,
            read_done,
            50_000
        ]
    );
    assert_eq!(order[..2], [11, 10], "the flush at once, then the read");
}

/// One write of two blocks (a program on LUNs 0 and 1), then reads of a
/// block on LUN 0 from 50 µs on.
fn program_then(scheduling: NandScheduling) -> (SimDevice, u64) {
    let mut d = timed_with(scheduling);
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 2, 3), vec![])
        .expect("first write");
    let t0 = d.clock_ns();
    d.submit(0, write(0, 2, 2, &g)).expect("submit");
    d.advance_clock_to(t0 + 50_000);
    (d, t0)
}

#[test]
fn reads_one_after_another_suspend_a_program_at_most_max_suspends_times() {
    let t = Timing::default();
    let (mut d, t0) = program_then(NandScheduling::Suspend);
    // A reader with one read in flight: each read suspends the program
    // again, until it has taken `max_suspends`; the next waits for it.
    let per = t.suspend_ns + t.read_ns + t.resume_ns;
    let mut now = t0 + 50_000;
    for i in 0..u64::from(t.max_suspends) {
        d.submit(100 + i, read(0, 0)).expect("read");
        let (at, _) = completion_times(&mut d, &[100 + i]);
        assert_eq!(at[0], now + t.suspend_ns + t.read_ns, "read {i}");
        now = at[0];
    }
    let program_end = t0 + t.program_ns + u64::from(t.max_suspends) * per;
    d.submit(200, read(0, 0)).expect("read");
    let (at, order) = completion_times(&mut d, &[0, 200]);
    assert_eq!(at, [program_end, program_end + t.read_ns]);
    assert_eq!(order, [0, 200]);
}

#[test]
fn a_burst_of_reads_passes_a_program_at_most_max_reads_ahead_times() {
    let t = Timing::default();
    let burst = 2 * u64::from(t.max_reads_ahead);
    let tags: Vec<u64> = (0..=burst).collect();
    // Suspend: the first read suspends the program, the next
    // `max_reads_ahead - 1` join that suspension, the rest wait.
    let (mut d, t0) = program_then(NandScheduling::Suspend);
    for tag in 1..=burst {
        d.submit(tag, read(0, 0)).expect("read");
    }
    let (at, _) = completion_times(&mut d, &tags);
    let ahead = u64::from(t.max_reads_ahead);
    let program_end = t0 + t.program_ns + t.suspend_ns + ahead * t.read_ns + t.resume_ns;
    assert_eq!(at[0], program_end);
    for r in 1..=burst {
        let expect = if r <= ahead {
            t0 + 50_000 + t.suspend_ns + r * t.read_ns
        } else {
            program_end + (r - ahead) * t.read_ns
        };
        assert_eq!(at[r as usize], expect, "read {r}");
    }
    // One suspension; the reads after the first joined it.
    assert_eq!(
        (d.stats().suspensions, d.stats().reads_passed),
        (1, ahead - 1)
    );

    // Read priority: the programs not started (the second and third on
    // LUN 0) let `max_reads_ahead` reads run right before each, no more:
    // the reads run in groups between the programs.
    let mut d = timed_with(NandScheduling::ReadPriority);
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 2, 3), vec![])
        .expect("first write");
    let t0 = d.clock_ns();
    d.submit(0, write(0, 2, 2, &g)).expect("submit");
    d.submit(1000, write(0, 4, 2, &g)).expect("submit");
    d.submit(1001, write(0, 6, 2, &g)).expect("submit");
    d.advance_clock_to(t0 + 50_000);
    for tag in 1..=burst {
        d.submit(tag, read(0, 0)).expect("read");
    }
    let mut tags = tags;
    tags.extend([1000, 1001]);
    let (at, order) = completion_times(&mut d, &tags);
    let first_end = t0 + t.program_ns;
    let second_end = first_end + ahead * t.read_ns + t.program_ns;
    let third_end = second_end + ahead * t.read_ns + t.program_ns;
    assert_eq!(at[0], first_end);
    assert_eq!(at[tags.len() - 2..], [second_end, third_end]);
    for r in 1..=burst {
        let expect = if r <= ahead {
            first_end + r * t.read_ns
        } else {
            second_end + (r - ahead) * t.read_ns
        };
        assert_eq!(at[r as usize], expect, "read {r}");
    }
    let writes: Vec<u64> = order.into_iter().filter(|&t| t == 0 || t >= 1000).collect();
    assert_eq!(writes, [0, 1000, 1001], "programs in order");
    assert_eq!((d.stats().suspensions, d.stats().reads_passed), (0, burst));
}

#[test]
fn a_seed_replays_the_same_times_with_reads_passing() {
    for scheduling in [NandScheduling::ReadPriority, NandScheduling::Suspend] {
        assert_eq!(
            read_behind_four_programs(scheduling),
            read_behind_four_programs(scheduling)
        );
    }
}

#[test]
fn timing_written_before_the_scheduling_fields_still_loads() {
    let old: Timing =
        serde_json::from_str(r#"{"read_ns":1,"program_ns":2,"erase_ns":3}"#).expect("old timing");
    assert_eq!(old.scheduling, NandScheduling::Fifo);
    assert_eq!((old.read_ns, old.program_ns, old.erase_ns), (1, 2, 3));
    assert_eq!(old.max_reads_ahead, Timing::default().max_reads_ahead);
    let new: Timing = serde_json::from_str(r#"{"scheduling":"read-priority","max_suspends":1}"#)
        .expect("new timing");
    assert_eq!(new.scheduling, NandScheduling::ReadPriority);
    assert_eq!(new.max_suspends, 1);
    assert!(serde_json::from_str::<Timing>(r#"{"scheduling":"lifo"}"#).is_err());
}

#[test]
fn a_suspended_program_is_on_the_media_only_at_its_moved_end() {
    let t = Timing::default();
    let (mut d, t0) = program_then(NandScheduling::Suspend);
    d.submit(1, read(0, 0)).expect("read");
    let (at, _) = completion_times(&mut d, &[1]);
    assert_eq!(at[0], t0 + 50_000 + t.suspend_ns + t.read_ns);
    d.advance_clock_to(t0 + t.program_ns);
    let mut out = Vec::new();
    assert_eq!(d.reap(&mut out, 8), 0, "not done at its unsuspended end");
    assert_eq!(d.stats().media_page_programs, 2, "the first write only");
    let moved = t0 + t.program_ns + t.suspend_ns + t.read_ns + t.resume_ns;
    d.advance_clock_to(moved - 1);
    assert_eq!(d.reap(&mut out, 8), 0);
    d.advance_clock_to(moved);
    assert_eq!(d.reap(&mut out, 8), 1);
    assert_eq!(d.stats().media_page_programs, 4);
}

#[test]
fn reads_of_different_commands_take_turns_page_by_page() {
    let t = Timing::default();
    for scheduling in [
        NandScheduling::Fifo,
        NandScheduling::ReadPriority,
        NandScheduling::Suspend,
    ] {
        // 16 blocks: 8 page reads on each LUN; then one block on LUN 0.
        let (mut d, at) = big_host_read_then(scheduling, read(0, 2));
        let g = d.geometry().clone();
        if scheduling == NandScheduling::Fifo {
            assert_eq!(at, [8 * t.read_ns, 9 * t.read_ns]);
        } else {
            // The small read runs after the big one's first page on LUN 0.
            assert_eq!(at, [9 * t.read_ns, 2 * t.read_ns], "{scheduling:?}");
        }
        let mut out = Vec::new();
        let _ = d.reap(&mut out, 8);
        let (data, _) = d.read_blocks(0, 0, 16).expect("read back");
        assert_eq!(data, blocks(&g, 0, 0, 16, 3));
    }
}

#[test]
fn a_reset_queued_after_a_read_waits_for_it_even_when_the_read_moves() {
    // Zone 0 is full, so a read of it skips the zone order. A reset of the
    // zone comes next, then a one-block read of the zone, ordered after the
    // reset (pending), whose page on LUN 0 still runs before the first
    // read's later pages there and moves them back: the reset waits.
    for scheduling in [NandScheduling::ReadPriority, NandScheduling::Suspend] {
        let mut d = timed_with(scheduling);
        let g = d.geometry().clone();
        for off in (0..g.zone_capacity_blocks).step_by(32) {
            d.write_blocks(0, off, blocks(&g, 0, off, 32, 3), vec![])
                .expect("fill zone 0");
        }
        let big = Command::Read {
            zone: 0,
            offset_blocks: 0,
            block_count: 16,
            priority: ReadPriority::Host,
        };
        d.submit(1, big).expect("read");
        d.submit(2, Command::Reset { zone: 0 }).expect("reset");
        d.submit(3, read(0, 2)).expect("read");
        let mut out = Vec::new();
        while d.in_flight() > 0 {
            if d.reap(&mut out, usize::MAX) == 0 {
                d.wait().expect("wait");
            }
        }
        let tags: Vec<u64> = out.iter().map(|c| c.tag).collect();
        assert_eq!(tags, [1, 2, 3], "{scheduling:?}");
        match &out[0].result {
            Ok(zftl_core::Outcome::Read { data, .. }) => {
                assert_eq!(data, &blocks(&g, 0, 0, 16, 3), "read before the reset")
            }
            other => panic!("read: {other:?}"),
        }
        assert!(out[1].result.is_ok());
        match &out[2].result {
            Ok(zftl_core::Outcome::Read { data, .. }) => {
                assert!(data.iter().all(|&b| b == 0xFF), "read after the reset")
            }
            other => panic!("read: {other:?}"),
        }
    }
}

/// Zone 0 holds 32 blocks, 16 pages on each of LUNs 0 and 1. A 16-block
/// host read of it (tag 1), then `then` (tag 2), submitted at once;
/// returns the device and their completion times after the write.
fn big_host_read_then(scheduling: NandScheduling, then: Command) -> (SimDevice, Vec<u64>) {
    let mut d = timed_with(scheduling);
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 32, 3), vec![])
        .expect("write");
    let t0 = d.clock_ns();
    d.submit(
        1,
        Command::Read {
            zone: 0,
            offset_blocks: 0,
            block_count: 16,
            priority: ReadPriority::Host,
        },
    )
    .expect("big read");
    d.submit(2, then).expect("second command");
    let (at, _) = completion_times(&mut d, &[1, 2]);
    (d, at.iter().map(|a| a - t0).collect())
}

fn background_read(zone: u32, offset: u64) -> Command {
    Command::Read {
        zone,
        offset_blocks: offset,
        block_count: 1,
        priority: ReadPriority::Background,
    }
}

/// Zone 0 holds 32 blocks (even offsets on LUN 0). Background one-block
/// reads of LUN 0 (tags 1..=`background`), then host one-block reads of it
/// (tags 101..=100 + `host`), all submitted at once; returns the
/// completion times after the write, by tag in that order, and the device.
fn background_then_host_reads(
    scheduling: NandScheduling,
    background: u64,
    host: u64,
) -> (Vec<u64>, SimDevice) {
    let mut d = timed_with(scheduling);
    let g = d.geometry().clone();
    d.write_blocks(0, 0, blocks(&g, 0, 0, 32, 3), vec![])
        .expect("write");
    let t0 = d.clock_ns();
    let mut tags = Vec::new();
    for i in 1..=background {
        d.submit(i, background_read(0, 2 * (i % 16)))
            .expect("background read");
        tags.push(i);
    }
    for i in 1..=host {
        d.submit(100 + i, read(0, 2 * (i % 16))).expect("host read");
        tags.push(100 + i);
    }
    let (at, _) = completion_times(&mut d, &tags);
    (at.iter().map(|a| a - t0).collect(), d)
}

#[test]
fn host_reads_go_ahead_of_background_reads_queued_before_them() {
    let t = Timing::default();
    let r = t.read_ns;
    // Fifo: one after another in the order submitted.
    let (at, d) = background_then_host_reads(NandScheduling::Fifo, 8, 1);
    assert_eq!(at, (1..=9).map(|n| n * r).collect::<Vec<_>>());
    assert_eq!(d.stats().host_reads_first, 0);
    for scheduling in [NandScheduling::ReadPriority, NandScheduling::Suspend] {
        // The first background read is running; the host read goes next,
        // the other seven background reads after it.
        let (at, d) = background_then_host_reads(scheduling, 8, 1);
        let mut expect = vec![r];
        expect.extend((3..=9).map(|n| n * r));
        expect.push(2 * r);
        assert_eq!(at, expect, "{scheduling:?}");
        assert_eq!(d.stats().host_reads_first, 1, "{scheduling:?}");
    }
}

#[test]
fn a_background_read_lets_at_most_max_reads_ahead_host_reads_pass() {
    let t = Timing::default();
    let r = t.read_ns;
    let ahead = u64::from(t.max_reads_ahead);
    for scheduling in [NandScheduling::ReadPriority, NandScheduling::Suspend] {
        // Two background reads: the first runs, the second waits; then
        // twice `max_reads_ahead` host reads. The first `max_reads_ahead`
        // of them pass the waiting background read, in the order
        // submitted; the rest follow it.
        let (at, mut d) = background_then_host_reads(scheduling, 2, 2 * ahead);
        assert_eq!(at[0], r);
        assert_eq!(
            at[1],
            (2 + ahead) * r,
            "{scheduling:?}: the background read"
        );
        for h in 1..=2 * ahead {
            let expect = if h <= ahead { 1 + h } else { 2 + h } * r;
            assert_eq!(at[1 + h as usize], expect, "{scheduling:?}: host read {h}");
        }
        assert_eq!(d.stats().host_reads_first, ahead);
        let (data, _) = d.read_blocks(0, 0, 32).expect("read back");
        assert_eq!(data, blocks(d.geometry(), 0, 0, 32, 3));
    }
}

#[test]
fn background_reads_do_not_pass_host_reads() {
    let t = Timing::default();
    let r = t.read_ns;
    for scheduling in [NandScheduling::ReadPriority, NandScheduling::Suspend] {
        // A 16-block host read: 8 pages on LUN 0; then a one-block
        // background read there. Reads of one kind take turns, but a
        // background read waits for the host read's pages.
        let (_, at) = big_host_read_then(scheduling, background_read(0, 2));
        assert_eq!(at, [8 * r, 9 * r], "{scheduling:?}");
    }
}

#[test]
fn background_reads_do_not_suspend_a_program() {
    let t = Timing::default();
    let (mut d, t0) = program_then(NandScheduling::Suspend);
    d.submit(1, background_read(0, 0)).expect("background read");
    let (at, order) = completion_times(&mut d, &[0, 1]);
    assert_eq!(at, [t0 + t.program_ns, t0 + t.program_ns + t.read_ns]);
    assert_eq!(order, [0, 1]);
    assert_eq!(d.stats().suspensions, 0);
}

#[test]
fn a_program_lets_max_reads_ahead_of_each_kind_run_before_it() {
    let t = Timing::default();
    let r = t.read_ns;
    let ahead = u64::from(t.max_reads_ahead);
    for scheduling in [NandScheduling::ReadPriority, NandScheduling::Suspend] {
        // One program running on LUN 0, two queued; 50 µs in, twice
        // `max_reads_ahead` background reads, then a host read.
        let mut d = timed_with(scheduling);
        let g = d.geometry().clone();
        d.write_blocks(0, 0, blocks(&g, 0, 0, 2, 3), vec![])
            .expect("first write");
        let t0 = d.clock_ns();
        d.submit(0, write(0, 2, 2, &g)).expect("submit");
        d.submit(1000, write(0, 4, 2, &g)).expect("submit");
        d.submit(1001, write(0, 6, 2, &g)).expect("submit");
        d.advance_clock_to(t0 + 50_000);
        let mut tags = vec![0, 1000, 1001];
        for i in 1..=2 * ahead {
            // Block 0 is written; the others are in the writes queued.
            d.submit(i, background_read(0, 0)).expect("background read");
            tags.push(i);
        }
        d.submit(500, read(0, 0)).expect("host read");
        tags.push(500);
        let (at, order) = completion_times(&mut d, &tags);
        // The first `max_reads_ahead` background reads fill the second
        // program's share, the rest the third's (background reads do not
        // suspend the running one); the host read still goes before the
        // second program, and before the background reads there: after
        // the running program, or with `Suspend` inside it.
        let first_end = t0 + t.program_ns;
        let (host_end, running_end, lead, suspensions) = match scheduling {
            NandScheduling::Suspend => {
                let moved = first_end + t.suspend_ns + r + t.resume_ns;
                (t0 + 50_000 + t.suspend_ns + r, moved, moved, 1)
            }
            _ => (first_end + r, first_end, first_end + r, 0),
        };
        let second_end = lead + ahead * r + t.program_ns;
        let third_end = second_end + ahead * r + t.program_ns;
        assert_eq!(
            at[..3],
            [running_end, second_end, third_end],
            "{scheduling:?}"
        );
        for i in 1..=2 * ahead {
            let expect = if i <= ahead {
                lead + i * r
            } else {
                second_end + (i - ahead) * r
            };
            assert_eq!(
                at[2 + i as usize],
                expect,
                "{scheduling:?}: background read {i}"
            );
        }
        assert_eq!(at[tags.len() - 1], host_end, "{scheduling:?}: host read");
        let writes: Vec<u64> = order.into_iter().filter(|&t| t == 0 || t >= 1000).collect();
        assert_eq!(writes, [0, 1000, 1001], "programs in order");
        assert_eq!(d.stats().host_reads_first, 1);
        assert_eq!(d.stats().suspensions, suspensions);
    }
}
