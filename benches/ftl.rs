//! The FTL against the raw simulator, in the same bench groups so the ratio
//! is visible in one run (docs/design.md, "Choices and their reasons"). In memory, timing off: these are
//! CPU costs per 4 KiB block, not a model of NAND speed.
//!
//! - `write_4k/ftl`: random 4 KiB host writes through the `Driver` at steady
//!   state (filled at OP 0.28 and overwritten once, so GC runs), a few
//!   requests in flight; `write_4k/raw`: the same count of blocks as zone
//!   appends on an identical device (written through once first), replaying
//!   the device writes the FTL sent in its bench (their sizes, buffers and
//!   blocks in flight), zones reset when reused. The FTL's host rate × its
//!   write amplification against the raw rate is `zftl bench throughput`'s
//!   `write_efficiency`.
//! - `read_4k/ftl` vs `read_4k/raw`: 4 KiB random reads.
//! - `l2p`: one `L2p::get_with_crc` / `L2p::set` at a random LBA, with OOB
//!   tags and in band (bit-packed address + data CRC entries).
//!
//! Run: `cargo bench --bench ftl` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zftl_core::addr::Ppa;
use zftl_core::l2p::{EntryFormat, L2p};
use zftl_core::{Driver, FormatOptions, FtlConfig, VictimPolicy};
use zftl_sim::rng::Rng;
use zftl_sim::{SimConfig, SimDevice};

#[path = "../crates/cli/src/bench/pipe.rs"]
#[allow(dead_code)]
mod pipe;
/// The CLI's raw-device loops and pipelined FTL I/O, shared by path so the
/// bench and `zftl bench throughput` measure the same thing.
#[path = "../crates/cli/src/bench/raw.rs"]
#[allow(dead_code)]
mod raw;
#[path = "../crates/cli/src/bench/forward.rs"]
#[macro_use]
mod forward;
#[path = "../crates/cli/src/bench/shape.rs"]
#[allow(dead_code)]
mod shape;

/// Blocks moved per measured iteration.
const BLOCKS_PER_ITER: u64 = 4096;
/// Host requests in flight through the FTL (the CLI's default: deeper
/// queues outrun the untimed device and keep the write buffer full).
const FTL_DEPTH: usize = 8;
/// Host reads in flight through the FTL, and raw reads in flight.
const RAW_DEPTH: usize = 64;
const OP: f64 = 0.28;
const GC_RESERVE_ZONES: u32 = 2;

/// 128 zones of one 256-page erase block (1 MiB), one LUN; endurance out of
/// the way so a long run never wears the device out.
fn bench_config() -> SimConfig {
    SimConfig {
        channels: 1,
        luns_per_channel: 1,
        blocks_per_lun: 128,
        pages_per_block: 256,
        zone_width_luns: 1,
        max_append_blocks: 128,
        max_transfer_blocks: 256,
        queue_depth: 256,
        timing: None,
        endurance_erases: u32::MAX,
        ..SimConfig::default()
    }
}

fn new_device() -> SimDevice {
    SimDevice::create_memory(bench_config()).expect("bench config is valid")
}

/// A formatted FTL at OP 0.28 over the data zones, filled sequentially and
/// overwritten once at random so GC is at steady state.
fn steady_ftl(rng: &mut Rng) -> Driver<shape::Recorder<SimDevice>> {
    let device = shape::Recorder::new(new_device());
    let g = bench_config().geometry().expect("valid");
    let layout = zftl_core::layout::Layout::plan(&g, None, GC_RESERVE_ZONES, false).expect("plan");
    let data_blocks = u64::from(g.zone_count - 2 - layout.meta_zone_count) * g.zone_capacity_blocks;
    let logical = (data_blocks as f64 / (1.0 + OP)) as u64;
    let options = FormatOptions {
        logical_blocks: Some(logical),
        gc_reserve_zones: GC_RESERVE_ZONES,
        ..FormatOptions::default()
    };
    let config = FtlConfig {
        gc_policy: VictimPolicy::Greedy,
        ..FtlConfig::default()
    };
    let mut drv = Driver::format(device, &options, config).expect("format");
    let mut pipe = pipe::Pipeline::new(FTL_DEPTH, drv.block_size());
    let mut next = 0;
    pipe.write(
        &mut drv,
        logical,
        &mut || {
            next += 1;
            next - 1
        },
        &mut |_| true,
    )
    .expect("fill");
    pipe.write(&mut drv, logical, &mut || rng.below(logical), &mut |_| true)
        .expect("warm up");
    drv.flush().expect("flush");
    drv
}

fn write_4k(c: &mut Criterion) {
    let mut group = c.benchmark_group("write_4k");
    group.throughput(Throughput::Elements(BLOCKS_PER_ITER));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));

    let mut rng = Rng::new(1);
    let mut drv = steady_ftl(&mut rng);
    let logical = drv.logical_blocks();
    let mut pipe = pipe::Pipeline::new(FTL_DEPTH, drv.block_size());
    group.bench_function("ftl", |b| {
        b.iter(|| {
            pipe.write(
                &mut drv,
                BLOCKS_PER_ITER,
                &mut || rng.below(logical),
                &mut |_| true,
            )
            .expect("write")
        });
    });
    let shape = drv.backend_mut().take_shape();
    drop(drv);

    let mut dev = new_device();
    let mut writer = raw::ShapedWriter::new(&dev);
    let g = bench_config().geometry().expect("valid");
    writer.write(
        &mut dev,
        u64::from(g.zone_count) * g.zone_capacity_blocks,
        &shape.writes,
    );
    group.bench_function("raw", |b| {
        b.iter(|| writer.write(&mut dev, BLOCKS_PER_ITER, &shape.writes));
    });
    group.finish();
}

fn read_4k(c: &mut Criterion) {
    let mut group = c.benchmark_group("read_4k");
    group.throughput(Throughput::Elements(BLOCKS_PER_ITER));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));

    let mut rng = Rng::new(2);
    let mut drv = steady_ftl(&mut rng);
    let logical = drv.logical_blocks();
    let mut pipe = pipe::Pipeline::new(RAW_DEPTH, drv.block_size());
    group.bench_function("ftl", |b| {
        b.iter(|| {
            pipe.read(
                &mut drv,
                BLOCKS_PER_ITER,
                &mut || rng.below(logical),
                &mut |_| true,
            )
            .expect("read")
        });
    });
    drop(drv);

    let mut dev = new_device();
    raw::fill_device(&mut dev, RAW_DEPTH);
    let mut done = Vec::with_capacity(RAW_DEPTH);
    group.bench_function("raw", |b| {
        b.iter(|| raw::random_reads(&mut dev, &mut rng, &mut done, RAW_DEPTH, BLOCKS_PER_ITER));
    });
    group.finish();
}

fn l2p(c: &mut Criterion) {
    const LOGICAL: u64 = 1 << 22; // 16 GiB of 4 KiB blocks
    const OPS: u64 = 4096;
    const PHYSICAL: u32 = (LOGICAL + LOGICAL / 4) as u32;
    let mut group = c.benchmark_group("l2p");
    group.throughput(Throughput::Elements(OPS));
    // OOB tags (23-bit addresses) and in band (addresses + data CRCs).
    for (name, crc) in [("oob", false), ("in_band", true)] {
        let mut map = L2p::with_format(LOGICAL, EntryFormat::for_device(PHYSICAL, crc));
        let mut rng = Rng::new(3);
        for lba in 0..LOGICAL {
            map.set(lba, Ppa(lba as u32), lba as u32);
        }
        group.bench_function(format!("get_{name}"), |b| {
            b.iter(|| {
                for _ in 0..OPS {
                    black_box(map.get_with_crc(rng.below(LOGICAL)));
                }
            });
        });
        group.bench_function(format!("set_{name}"), |b| {
            b.iter(|| {
                for _ in 0..OPS {
                    let lba = rng.below(LOGICAL);
                    black_box(map.set(lba, Ppa((lba ^ 1) as u32), 7));
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, write_4k, read_4k, l2p);
criterion_main!(benches);
