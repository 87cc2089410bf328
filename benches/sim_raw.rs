//! The raw simulator, alone: no FTL code. This is the baseline every later
//! layer is judged against (docs/design.md, "Choices and their reasons": ratios measured in one run).
//!
//! The device lives in memory with timing off, so these numbers are the
//! simulator's own CPU cost per 4 KiB block, not a model of NAND speed.
//!
//! - `program_4k`: 4 KiB writes at the write pointer, spread over several
//!   open zones, many commands in flight through submit/reap; a zone that
//!   fills is reset and reused (resets are part of the cost, as on a device).
//! - `random_read_4k`: 4 KiB reads at random offsets of a full device, many
//!   in flight.
//!
//! Run: `cargo bench --bench sim_raw` (add `-- --quick` for a short run).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zftl::sim::rng::Rng;
use zftl::sim::{SimConfig, SimDevice};

/// The CLI's raw-device loops (`zftl bench throughput` uses the same ones),
/// shared by path so both measure the backend the same way.
#[allow(dead_code)]
#[path = "../crates/cli/src/bench/raw.rs"]
mod raw;
#[path = "../crates/cli/src/bench/forward.rs"]
#[macro_use]
mod forward;
#[path = "../crates/cli/src/bench/shape.rs"]
#[allow(dead_code)]
mod shape;

/// Blocks moved per measured iteration.
const BLOCKS_PER_ITER: u64 = 4096;
/// Commands kept in flight.
const QUEUE_DEPTH: u32 = 64;
const BLOCK_BYTES: u32 = 4096;

/// 8 LUNs x 64 erase blocks x 64 pages of 4 KiB = 128 MiB; zones 4 LUNs wide
/// (256 blocks = 1 MiB), 128 zones. Endurance is out of the way so a long
/// run never wears the device out.
fn bench_config() -> SimConfig {
    SimConfig {
        channels: 4,
        luns_per_channel: 2,
        blocks_per_lun: 64,
        pages_per_block: 64,
        page_size_bytes: BLOCK_BYTES,
        oob_size_bytes: 64,
        program_unit_pages: 1,
        zone_width_luns: 4,
        zone_size_blocks: None,
        max_open_zones: 16,
        max_active_zones: 32,
        max_append_blocks: 128,
        max_transfer_blocks: 256,
        queue_depth: QUEUE_DEPTH,
        timing: None,
        endurance_erases: u32::MAX,
        factory_bad_block_per_mille: 0,
        ..SimConfig::default()
    }
}

fn new_device() -> SimDevice {
    SimDevice::create_memory(bench_config()).expect("bench config is valid")
}

/// Reaps what is ready, waiting if nothing is; panics on a failed command
/// (in this benchmark a failure is a bug).
fn sim_raw(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim_raw");
    group.throughput(Throughput::Elements(BLOCKS_PER_ITER));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));

    let depth = QUEUE_DEPTH as usize;
    let mut dev = new_device();
    let mut writer = raw::SeqWriter::new(&dev, depth);
    group.bench_function("program_4k_qd64", |b| {
        b.iter(|| writer.write(&mut dev, BLOCKS_PER_ITER));
    });
    drop(dev);

    let mut dev = new_device();
    raw::fill_device(&mut dev, depth);
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut done = Vec::with_capacity(depth);
    group.bench_function("random_read_4k_qd64", |b| {
        b.iter(|| {
            std::hint::black_box(raw::random_reads(
                &mut dev,
                &mut rng,
                &mut done,
                depth,
                BLOCKS_PER_ITER,
            ))
        });
    });
    group.finish();
}

criterion_group!(benches, sim_raw);
criterion_main!(benches);
