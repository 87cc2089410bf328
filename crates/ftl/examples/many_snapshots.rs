//! The many-snapshot volumes of `zftl bench snapshot --parts many`, for a
//! profiler: a 4 GiB simulated device in memory (timing off), the first
//! 4 × 4096 blocks written, then `LIVE` snapshots each followed by 4
//! overwritten blocks (each keeps 4 versions; with `LIVE` 1 and `KEPT`
//! above 0, the one snapshot keeps `KEPT` instead), then `ROUNDS` rounds
//! of create, 4 blocks overwritten, delete, and `ROUNDS` clean shutdowns
//! and mounts, then two overwrites (the first after a mount builds the
//! history's ordered maps, `crates/ftl/src/kept.rs`).
//!
//! ```text
//! many_snapshots LIVE KEPT ROUNDS [in-band]
//! valgrind --tool=callgrind --toggle-collect=many_snapshots::mount_once \
//!     target/release/examples/many_snapshots 4095 0 10
//! ```
//!
//! `create_once`, `delete_once` and `mount_once` are the three timed
//! calls, kept out of line so that a profiler can count them alone.

use std::time::Instant;

use zftl_core::{Driver, FormatOptions, FtlConfig, TagPlacement};
use zftl_sim::{SimConfig, SimDevice};

/// Blocks each snapshot keeps.
const KEPT_PER_SNAPSHOT: u64 = 4;
/// The region the kept blocks come from: 4 per snapshot, 4096 snapshots.
const REGION: u64 = 4096 * KEPT_PER_SNAPSHOT;

fn arg(args: &[String], i: usize, default: u64) -> u64 {
    match args.get(i) {
        Some(a) => a
            .parse()
            .unwrap_or_else(|_| panic!("argument {i}: {a:?} is not a number")),
        None => default,
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let live = arg(&args, 1, 4095).max(1);
    let kept = arg(&args, 2, 0);
    let rounds = arg(&args, 3, 10);
    let in_band = args.get(4).is_some_and(|a| a == "in-band");
    let sim = SimConfig {
        blocks_per_lun: 256,
        endurance_erases: u32::MAX,
        timing: None,
        ..SimConfig::default()
    };
    let opts = FormatOptions {
        tag_placement: if in_band {
            TagPlacement::InBand
        } else {
            TagPlacement::Auto
        },
        seed: 1,
        ..FormatOptions::default()
    };
    let config = FtlConfig::default();
    let dev = SimDevice::create_memory(sim).expect("the simulated device");
    let mut drv = Driver::format(dev, &opts, config.clone()).expect("format");
    let block = vec![7u8; drv.block_size()];
    for lba in 0..REGION + KEPT_PER_SNAPSHOT {
        drv.write(lba, &block).expect("write");
    }
    drv.flush().expect("flush");
    let mut cursor = 0u64;
    for i in 0..live {
        drv.snapshot_create(&format!("live-{i}")).expect("create");
        let n = if live == 1 && kept > 0 {
            kept
        } else {
            KEPT_PER_SNAPSHOT
        };
        for _ in 0..n {
            drv.write(cursor % REGION, &block).expect("write");
            cursor += 1;
        }
        drv.flush().expect("flush");
    }
    let s = drv.stats();
    println!(
        "{} snapshots, {} kept versions",
        s.snapshots, s.snapshot_versions
    );
    let (mut create_us, mut delete_us) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        drv.flush().expect("flush");
        drv.settle().expect("settle");
        let name = format!("round-{r}");
        let t = Instant::now();
        create_once(&mut drv, &name);
        create_us.push(t.elapsed().as_secs_f64() * 1e6);
        for b in 0..KEPT_PER_SNAPSHOT {
            drv.write(REGION + b, &block).expect("write");
        }
        drv.flush().expect("flush");
        drv.settle().expect("settle");
        let t = Instant::now();
        delete_once(&mut drv, &name);
        delete_us.push(t.elapsed().as_secs_f64() * 1e6);
        drv.settle().expect("settle");
    }
    let mut mount_ms = Vec::new();
    for _ in 0..rounds {
        let dev = drv.shutdown().expect("shutdown");
        let t = Instant::now();
        drv = mount_once(dev, &config);
        mount_ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    // The first overwrite after the mount keeps a version, which builds
    // the history's ordered maps from the array the mount loaded; the
    // second finds them built.
    let mut write_us = Vec::new();
    for _ in 0..2 {
        let t = Instant::now();
        drv.write(cursor % REGION, &block).expect("write");
        drv.flush().expect("flush");
        write_us.push(t.elapsed().as_secs_f64() * 1e6);
        cursor += 1;
    }
    println!(
        "first / second write and flush after the mount µs {:.1} / {:.1}",
        write_us[0], write_us[1]
    );
    println!("create µs median {:.2}", median(create_us));
    println!("delete µs median {:.2}", median(delete_us));
    println!("mount ms median {:.3}", median(mount_ms));
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

#[inline(never)]
fn create_once(drv: &mut Driver<SimDevice>, name: &str) {
    drv.snapshot_create(name).expect("create");
}

#[inline(never)]
fn delete_once(drv: &mut Driver<SimDevice>, name: &str) {
    drv.snapshot_delete(name).expect("delete");
}

#[inline(never)]
fn mount_once(dev: SimDevice, config: &FtlConfig) -> Driver<SimDevice> {
    Driver::mount(dev, config.clone()).expect("mount")
}
