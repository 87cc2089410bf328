//! FUA writes go ahead of the write buffer: a FUA write is answered once
//! its own blocks (and what a mount needs to find them) are durable, not
//! once every older buffered write is. These tests cut the power right
//! after such a reply, with many older blocks still queued, and write one
//! block with buffered and FUA writes in both orders: the newest admitted
//! version must survive a flush and a cut, and a FUA write's block must
//! survive a cut right after its reply. Seeds shuffle the device's
//! completion order; `ZFTL_SEEDS` sets how many.

use zftl::core::{Driver, FtlConfig, ReplyData, Request};
use zftl::sim::{Faults, SimConfig, SimDevice};

mod common;
use common::{decode, format_with, pattern, run_seeds, volume_config, Coverage};

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
