//! GC's victim resets beside FUA writes
//! (`FtlConfig::gc_reset_yields_to_urgent`): a reset is an erase on each
//! unit of the victim's zone group (1.5 ms on the simulator), and a FUA
//! write's append queued behind it waits for all of it. With the knob a
//! victim's reset waits while FUA writes' appends go to its zone group, so
//! no FUA append finds a victim's erase on its units; without it some do.
//! Counted in the simulator's virtual time, one FUA write at a time beside
//! buffered random writes that keep GC running.

use std::collections::HashMap;

use zftl::core::layout::Layout;
use zftl::core::{Command, Driver, FormatOptions, FtlConfig, FtlStats, Geometry, IoError, Request};
use zftl::sim::{SimConfig, SimDevice, Timing};

mod common;
use common::pattern;
use common::watch::{Watched, Watcher};

/// FUA writes counted in each run.
const FUA_WRITES: u64 = 3000;

/// Buffered random writes kept in flight beside the FUA writes.
const LOAD_DEPTH: u64 = 8;

/// What the FUA writes carry: this byte, then the write's number.
const FUA_MARK: u8 = 0xf7;

/// Watches the FUA writes' appends and the victims' resets.
#[derive(Default)]
struct FuaBehindErase {
    first_data_zone: u32,
    /// The data the FUA write in flight carries, once the test sends one.
    fua_data: Option<Vec<u8>>,
    /// Data zones' resets in flight: tag → zone group.
    resets: HashMap<u64, u32>,
    /// FUA appends sent to a zone group with a victim's reset in flight.
    fua_behind_erase: u64,
    fua_appends: u64,
}

impl Watcher for FuaBehindErase {
    fn submitted(&mut self, geometry: &Geometry, tag: u64, command: &Command) {
        let group = |zone: u32| zone % geometry.zone_groups;
        match command {
            Command::Reset { zone } if *zone >= self.first_data_zone => {
                self.resets.insert(tag, group(*zone));
            }
            Command::Append { zone, data, .. } => {
                let bs = geometry.block_size_bytes as usize;
                let bytes = data.to_vec();
                let fua = self
                    .fua_data
                    .as_ref()
                    .is_some_and(|f| bytes.chunks(bs).any(|b| b == &f[..]));
                if fua {
                    self.fua_appends += 1;
                    if self.resets.values().any(|&g| g == group(*zone)) {
                        self.fua_behind_erase += 1;
                    }
                }
            }
            _ => {}
        }
    }
    fn completed(&mut self, tag: u64) {
        self.resets.remove(&tag);
    }
}

/// What one run counted.
struct Run {
    /// FUA appends that found a victim's erase on their zone group.
    fua_behind_erase: u64,
    fua_appends: u64,
    stats: FtlStats,
}

/// Fills the volume, then runs random buffered writes beside random FUA
/// writes one at a time.
fn fua_appends_behind_an_erase(gc_reset_yields_to_urgent: bool, urgent_below_reserve: bool) -> Run {
    // The simulator's default shape (16 LUNs, zones 4 LUNs wide: 4 zone
    // groups), smaller.
    let sim = SimConfig {
        blocks_per_lun: 16,
        pages_per_block: 64,
        timing: Some(Timing::default()),
        ..SimConfig::default()
    };
    let geometry = sim.geometry().expect("geometry");
    let options = FormatOptions::default();
    let layout = Layout::plan(&geometry, None, options.gc_reserve_zones, false).expect("layout");
    let dev = Watched {
        inner: SimDevice::create_memory(sim).expect("device"),
        watcher: FuaBehindErase {
            first_data_zone: layout.first_data_zone(),
            ..FuaBehindErase::default()
        },
    };
    let cfg = FtlConfig {
        zone_max_appends: 1,
        append_max_blocks: 4,
        gc_read_max_blocks_per_group: 8,
        urgent_below_reserve,
        gc_reset_yields_to_urgent,
        write_buffer_blocks: 256,
        ..FtlConfig::default()
    };
    let mut d = Driver::format(dev, &options, cfg).expect("format");
    let (logical, bs) = (d.logical_blocks(), d.block_size());
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next_random = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % logical
    };
    const FUA_ID: u64 = u64::MAX;
    let (mut next_id, mut load_in_flight, mut filled) = (0u64, 0u64, 0u64);
    let (mut fua_in_flight, mut fua_sent) = (false, 0u64);
    while fua_sent < FUA_WRITES || fua_in_flight {
        // The fill first (in order), then random overwrites.
        while load_in_flight < LOAD_DEPTH {
            let lba = if filled < logical {
                filled
            } else {
                next_random()
            };
            let write = Request::Write {
                lba,
                data: pattern(lba, 1, bs),
                fua: false,
            };
            match d.try_submit(next_id, write) {
                Ok(()) => {
                    next_id += 1;
                    load_in_flight += 1;
                    filled = (filled + 1).min(logical);
                }
                Err(IoError::Busy) => break,
                Err(e) => panic!("write: {e}"),
            }
        }
        let gc_ran = d.stats().gc_copy_blocks > 0;
        if gc_ran && !fua_in_flight && fua_sent < FUA_WRITES {
            let mut data = vec![FUA_MARK; bs];
            data[..8].copy_from_slice(&fua_sent.to_le_bytes());
            d.backend_mut().watcher.fua_data = Some(data.clone());
            let lba = next_random();
            match d.try_submit(
                FUA_ID,
                Request::Write {
                    lba,
                    data,
                    fua: true,
                },
            ) {
                Ok(()) => {
                    fua_in_flight = true;
                    fua_sent += 1;
                }
                Err(IoError::Busy) => {}
                Err(e) => panic!("FUA write: {e}"),
            }
        }
        d.turn().expect("turn");
        while let Some(reply) = d.take_reply() {
            reply.result.expect("write answered");
            if reply.id == FUA_ID {
                fua_in_flight = false;
            } else {
                load_in_flight -= 1;
            }
        }
    }
    let w = &d.backend().watcher;
    Run {
        fua_behind_erase: w.fua_behind_erase,
        fua_appends: w.fua_appends,
        stats: d.stats(),
    }
}

#[test]
fn no_fua_append_queues_behind_a_victims_erase_when_resets_yield() {
    let run = fua_appends_behind_an_erase(false, true);
    assert!(run.stats.gc_copy_blocks > 0, "GC never ran");
    assert!(
        run.fua_appends >= FUA_WRITES,
        "{} FUA appends seen",
        run.fua_appends
    );
    let without = run.fua_behind_erase;
    assert!(
        without > 0,
        "without the knob no FUA append found an erase: the test shows nothing"
    );
    assert_eq!(run.stats.gc_resets_yielded, 0, "no knob, no yield");
    let run = fua_appends_behind_an_erase(true, true);
    assert!(run.stats.gc_copy_blocks > 0 && run.fua_appends >= FUA_WRITES);
    let with = run.fua_behind_erase;
    assert!(run.stats.gc_resets_yielded > 0, "{:?}", run.stats);
    assert_eq!(
        with, 0,
        "{with} FUA appends found a victim's erase on their zone group with resets yielding \
         ({without} without)"
    );
}
