//! FUA writes go ahead of the write buffer: a FUA write is answered once
//! its own blocks (and what a mount needs to find them) are durable, not
//! once every older buffered write is. These tests cut the power right
//! after such a reply, with many older blocks still queued, and write one
//! block with buffered and FUA writes in both orders: the newest admitted
//! version must survive a flush and a cut, and a FUA write's block must
//! survive a cut right after its reply. Seeds shuffle the device's
//! completion order; `ZFTL_SEEDS` sets how many. A last test holds GC's
//! commands on the device while the free zones are at the GC reserve: a
//! FUA write still goes out (the urgent lane, `ftl/urgent.rs`).

use std::collections::VecDeque;

use zftl::core::{
    Backend, Command, Completion, DeviceError, Driver, FormatOptions, FtlConfig, Geometry,
    ReplyData, Request, SubmitError, TagPlacement, ZoneInfo,
};
use zftl::sim::{Faults, SimConfig, SimDevice};

mod common;
use common::{decode, decode_any, format_with, pattern, run_seeds, volume_config, Coverage};

/// Buffered writes submitted ahead of the FUA write, far more than the
/// core can have in flight at once (see `ftl_config`).
const OLDER_BLOCKS: u64 = 320;
/// Older blocks that must still be queued when the FUA write is answered.
const QUEUED_AT_REPLY: usize = 128;

/// Two commands in flight at most: the buffer drains slowly, so a FUA
/// write answered early shows it went ahead.
fn ftl_config() -> FtlConfig {
    FtlConfig {
        max_inflight_commands: 2,
        write_buffer_blocks: 512,
        ..FtlConfig::default()
    }
}

fn format(seed: u64, oob: bool) -> Driver<SimDevice> {
    let cfg = SimConfig {
        faults: Faults {
            seed,
            shuffle_completions: true,
            ..Faults::default()
        },
        ..volume_config(oob)
    };
    format_with(oob, cfg, ftl_config())
}

/// Cuts the power now and mounts what the cut left.
fn cut_and_mount(d: Driver<SimDevice>) -> Driver<SimDevice> {
    let mut dev = d.into_backend();
    dev.power_cut();
    dev.power_on().expect("power on");
    Driver::mount(dev, ftl_config()).expect("mount after the cut")
}

fn write(d: &mut Driver<SimDevice>, lba: u64, version: u32, fua: bool) -> u64 {
    let data = pattern(lba, version, d.block_size());
    d.submit(Request::Write { lba, data, fua }).expect("submit")
}

/// The version block `lba` holds (0: never written).
fn version_at(d: &mut Driver<SimDevice>, lba: u64) -> u32 {
    let data = d.read(lba, 1).expect("read");
    if data.iter().all(|&b| b == 0) {
        return 0;
    }
    decode(lba, &data).unwrap_or_else(|e| panic!("lba {lba}: {e}"))
}

fn both_tag_modes(test: &str, run: impl Fn(u64, bool)) {
    run_seeds(test, 8, |seed| {
        for oob in [true, false] {
            run(seed, oob);
        }
        Coverage {
            cuts: 2,
            ..Coverage::default()
        }
    });
}

/// A FUA write answered while at least `QUEUED_AT_REPLY` older buffered
/// blocks are still queued survives a cut right after its reply; each
/// older block reads as its old version or its new one.
#[test]
fn a_fua_write_ahead_of_queued_writes_survives_a_cut_after_its_reply() {
    both_tag_modes(
        "a_fua_write_ahead_of_queued_writes_survives_a_cut_after_its_reply",
        |seed, oob| {
            let mut d = format(seed, oob);
            for lba in 0..OLDER_BLOCKS {
                write(&mut d, lba, 1, false);
            }
            d.flush().expect("flush");
            for lba in 0..OLDER_BLOCKS {
                write(&mut d, lba, 2, false);
            }
            let fua_lba = OLDER_BLOCKS + 7;
            let id = write(&mut d, fua_lba, 3, true);
            assert_eq!(d.wait_for(id).expect("FUA write"), ReplyData::Done);
            let queued = d.ftl().queued_blocks();
            assert!(
                queued >= QUEUED_AT_REPLY,
                "seed {seed} oob {oob}: only {queued} older blocks queued at the FUA reply"
            );
            let mut d = cut_and_mount(d);
            assert_eq!(version_at(&mut d, fua_lba), 3, "seed {seed} oob {oob}");
            for lba in 0..OLDER_BLOCKS {
                let v = version_at(&mut d, lba);
                assert!(
                    v == 1 || v == 2,
                    "seed {seed} oob {oob}: lba {lba} holds v{v}"
                );
            }
        },
    );
}

/// Buffered and FUA writes to one block, in both orders, with the older
/// still queued or already on its way: reads give the newest admitted at
/// once, after a cut right after the FUA reply (whichever of the two that
/// reply made durable), and after a flush and a cut.
#[test]
fn buffered_and_fua_writes_to_one_block_keep_the_newest_admitted() {
    both_tag_modes(
        "buffered_and_fua_writes_to_one_block_keep_the_newest_admitted",
        |seed, oob| {
            let lba = 5;
            for fua_first in [false, true] {
                for older_sent in [false, true] {
                    let case = format!(
                        "seed {seed} oob {oob} fua first {fua_first} older sent {older_sent}"
                    );
                    let mut d = format(seed, oob);
                    // Older writes of other blocks keep the buffer busy.
                    for other in 100..100 + OLDER_BLOCKS {
                        write(&mut d, other, 1, false);
                    }
                    let first = write(&mut d, lba, 1, fua_first);
                    if older_sent {
                        while d.ftl().queued_blocks() > 0 && d.turn().expect("turn") {}
                    }
                    let second = write(&mut d, lba, 2, !fua_first);
                    let fua = if fua_first { first } else { second };
                    assert_eq!(d.wait_for(fua).expect("FUA write"), ReplyData::Done);
                    assert_eq!(version_at(&mut d, lba), 2, "{case}: before the cut");
                    // The FUA reply made its version durable; the newer
                    // buffered one may have gone with it.
                    let durable = if fua_first { 1 } else { 2 };
                    let mut d = cut_and_mount(d);
                    let v = version_at(&mut d, lba);
                    assert!(
                        (durable..=2).contains(&v),
                        "{case}: v{v} after a cut right after the FUA reply"
                    );
                    write(&mut d, lba, 3, false);
                    let fua = write(&mut d, lba, 4, true);
                    write(&mut d, lba, 5, false);
                    d.wait_for(fua).expect("FUA write");
                    d.flush().expect("flush");
                    let mut d = cut_and_mount(d);
                    assert_eq!(
                        version_at(&mut d, lba),
                        5,
                        "{case}: after a flush and a cut"
                    );
                }
            }
        },
    );
}

/// A simulator whose completions can be held back: while `holding`, what it
/// completes waits here (GC's reads and copies with the rest, so GC frees
/// no zone); it records the blocks of every append sent meanwhile.
struct Holding {
    inner: SimDevice,
    holding: bool,
    held: VecDeque<Completion>,
    /// `(lba, version)` of each host block appended while holding.
    appended: Vec<(u64, u32)>,
}

impl Backend for Holding {
    fn geometry(&self) -> &Geometry {
        self.inner.geometry()
    }
    fn zone_info(&mut self, zone: u32) -> Result<ZoneInfo, DeviceError> {
        self.inner.zone_info(zone)
    }
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        if let (true, Command::Append { data, .. }) = (self.holding, &command) {
            let bs = self.inner.geometry().block_size_bytes as usize;
            let blocks = data.to_vec();
            self.appended.extend(
                blocks
                    .chunks_exact(bs)
                    .filter_map(|b| decode_any(b).ok())
                    .filter(|&(_, v)| v > 0),
            );
        }
        self.inner.submit(tag, command)
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        if self.holding {
            let mut done = Vec::new();
            while self.inner.reap(&mut done, usize::MAX) > 0 {}
            self.held.extend(done);
            return 0;
        }
        let n = max.min(self.held.len());
        out.extend(self.held.drain(..n));
        n + self.inner.reap(out, max - n)
    }
    fn wait(&mut self) -> Result<(), DeviceError> {
        self.inner.wait()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.held.len()
    }
    fn clock_ns(&self) -> u64 {
        self.inner.clock_ns()
    }
}

/// Buffered writes submitted while the device's completions are held.
const HELD_WRITES: usize = 64;

/// Turns the loop until nothing moves (completions held: it ends).
fn settle_held(d: &mut Driver<Holding>) {
    for _ in 0..10_000 {
        if !d.turn_nowait().expect("turn") {
            return;
        }
    }
    panic!("the loop kept moving with the device's completions held");
}

/// With the free zones at the GC reserve, the host lanes out of room and
/// every command on the device held (so GC frees nothing), a FUA write's
/// block still goes to the device: into the urgent lane's zone, which may
/// take one zone of the reserve. Once the device answers, the FUA write is
/// answered and its block survives a power cut right after.
#[test]
fn a_fua_write_goes_out_while_the_host_lanes_wait_for_gc() {
    run_seeds(
        "a_fua_write_goes_out_while_the_host_lanes_wait_for_gc",
        4,
        |seed| {
            for oob in [true, false] {
                fua_write_past_blocked_lanes(seed, oob);
            }
            Coverage::default()
        },
    );
}

/// As above with GC holding one zone of the reserve (the free zones one
/// below it, where steady GC spends much of its time): the urgent lane
/// still opens a zone, so the FUA write does not wait for GC to refill
/// the reserve (`zftl bench media` saw a 518 ms FUA write waiting so).
#[test]
fn a_fua_write_goes_out_while_gc_holds_part_of_the_reserve() {
    run_seeds(
        "a_fua_write_goes_out_while_gc_holds_part_of_the_reserve",
        4,
        |seed| {
            for oob in [true, false] {
                fua_write_past_blocked_lanes_at(seed, oob, 1);
            }
            Coverage::default()
        },
    );
}

fn fua_write_past_blocked_lanes(seed: u64, oob: bool) {
    fua_write_past_blocked_lanes_at(seed, oob, 0);
}

/// The FUA write goes in with the free zones `below` under the reserve.
fn fua_write_past_blocked_lanes_at(seed: u64, oob: bool, below: u32) {
    let case = format!("seed {seed} oob {oob} below {below}");
    let opts = FormatOptions {
        tag_placement: if oob {
            TagPlacement::Auto
        } else {
            TagPlacement::InBand
        },
        seed,
        ..FormatOptions::default()
    };
    let reserve = opts.gc_reserve_zones - below;
    let ftl = FtlConfig {
        write_buffer_blocks: 512,
        urgent_below_reserve: below > 0,
        ..FtlConfig::default()
    };
    let dev = Holding {
        inner: SimDevice::create_memory(volume_config(oob)).expect("device"),
        holding: false,
        held: VecDeque::new(),
        appended: Vec::new(),
    };
    let mut d = Driver::format(dev, &opts, ftl).expect("format");
    let bs = d.block_size();
    let logical = d.logical_blocks();
    let mut versions = vec![0u32; logical as usize];
    for lba in 0..logical {
        versions[lba as usize] = 1;
        d.write(lba, &pattern(lba, 1, bs)).expect("fill");
    }
    // Random overwrites until, with every completion held, buffered blocks
    // wait for room while the free zones are exactly at the reserve.
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next_lba = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % logical
    };
    let mut held_lbas = Vec::new();
    for _ in 0..40 * logical {
        let lba = next_lba();
        versions[lba as usize] += 1;
        d.write(lba, &pattern(lba, versions[lba as usize], bs))
            .expect("buffered write");
        if d.stats().free_zones != reserve {
            continue;
        }
        // Not waited for: with completions held the buffer may fill.
        d.backend_mut().holding = true;
        held_lbas.clear();
        for _ in 0..HELD_WRITES {
            let lba = next_lba();
            versions[lba as usize] += 1;
            let data = pattern(lba, versions[lba as usize], bs);
            d.submit(Request::Write {
                lba,
                data,
                fua: false,
            })
            .expect("submit a buffered write");
            held_lbas.push(lba);
        }
        settle_held(&mut d);
        if d.stats().free_zones == reserve && d.ftl().queued_blocks() > 0 {
            break;
        }
        d.backend_mut().holding = false;
    }
    assert!(
        d.backend().holding,
        "{case}: never held with the host lanes waiting at {reserve} free zones"
    );
    // A block no held write touches: the FUA write passes those waiting.
    let lba = std::iter::repeat_with(&mut next_lba)
        .find(|l| !held_lbas.contains(l))
        .expect("a block");
    versions[lba as usize] += 1;
    let version = versions[lba as usize];
    let id = d
        .submit(Request::Write {
            lba,
            data: pattern(lba, version, bs),
            fua: true,
        })
        .expect("submit the FUA write");
    settle_held(&mut d);
    let sent = d.backend().appended.contains(&(lba, version));
    assert!(
        sent,
        "{case}: the FUA write's block waited for GC: {}",
        d.ftl().debug_state()
    );
    assert!(
        d.stats().urgent_lane_blocks > 0,
        "{case}: not in the urgent lane"
    );
    assert!(
        d.ftl().queued_blocks() > 0,
        "{case}: the buffered blocks went too"
    );
    d.backend_mut().holding = false;
    assert_eq!(d.wait_for(id).expect("FUA write"), ReplyData::Done);
    let mut dev = d.into_backend().inner;
    dev.power_cut();
    dev.power_on().expect("power on");
    let mut d = Driver::mount(dev, FtlConfig::default()).expect("mount after the cut");
    let data = d.read(lba, 1).expect("read");
    assert_eq!(
        decode(lba, &data),
        Ok(version),
        "{case}: the FUA block after the cut"
    );
}
