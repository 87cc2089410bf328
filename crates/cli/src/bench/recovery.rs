//! `zftl bench recovery`: mount time after a power cut, by device size.
//!
//! For each size: create an in-memory device (sparse: the simulator's page
//! store is a lazily allocated zeroed vector) → format → write `data_mib`
//! sequentially, flush, checkpoint → `history_writes` random 4 KiB
//! overwrites of that data, flush (the same history on every size) → power
//! cut → power on → time `Driver::mount` with the wall clock.

use std::time::Instant;

use serde::Serialize;
use zftl_core::{Driver, FormatOptions, FtlConfig};
use zftl_sim::{SimConfig, SimDevice};

use super::pipe::Pipeline;
use super::workload::{AddressGen, WorkloadSpec};
use super::{progress, ratio, round, BenchError, RecoveryArgs};
use crate::report::Text;

const MIB: u64 = 1 << 20;

#[derive(Debug, Serialize)]
pub struct RecoveryReport {
    pub data_mib: u64,
    pub history_writes: u64,
    pub seed: u64,
    pub sizes: Vec<SizeResult>,
    /// mount_ms of the largest size ÷ that of the smallest.
    pub mount_ratio_largest_over_smallest: f64,
    /// mount_ms at 16 GiB ÷ at 1 GiB, when both were measured.
    pub mount_ratio_16g_over_1g: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct SizeResult {
    pub device_bytes: u64,
    pub zones: u32,
    pub logical_blocks: u64,
    pub create_ms: f64,
    pub format_ms: f64,
    pub workload_ms: f64,
    pub mount_ms: f64,
    /// Mapped blocks after the mount (the data must all be there).
    pub mapped_blocks: u64,
}

/// The default device's shape (16 LUNs, 4 MiB zones 4 LUNs wide) with as
/// many erase blocks per LUN as `size_mib` needs.
fn device_config(size_mib: u64) -> Result<SimConfig, BenchError> {
    let base = SimConfig::default();
    let eb_mib = u64::from(base.pages_per_block) * u64::from(base.page_size_bytes) / MIB;
    let per_lun_mib = u64::from(base.lun_count()) * eb_mib;
    if size_mib == 0 || !size_mib.is_multiple_of(per_lun_mib) {
        return Err(BenchError::Args(format!(
            "device size {size_mib} MiB is not a positive multiple of {per_lun_mib} MiB"
        )));
    }
    let blocks_per_lun = u32::try_from(size_mib / per_lun_mib)
        .map_err(|_| BenchError::Args(format!("device size {size_mib} MiB is too large")))?;
    Ok(SimConfig {
        blocks_per_lun,
        endurance_erases: u32::MAX,
        ..base
    })
}

pub fn run(args: &RecoveryArgs, ftl: &FtlConfig) -> Result<RecoveryReport, BenchError> {
    if args.sizes_mib.is_empty() {
        return Err(BenchError::Args("--sizes-mib lists no size".into()));
    }
    let sizes = args
        .sizes_mib
        .iter()
        .map(|&mib| measure(mib, args, ftl))
        .collect::<Result<Vec<_>, _>>()?;
    let smallest = sizes
        .iter()
        .min_by_key(|s| s.device_bytes)
        .expect("non-empty");
    let largest = sizes
        .iter()
        .max_by_key(|s| s.device_bytes)
        .expect("non-empty");
    let at = |gib: u64| sizes.iter().find(|s| s.device_bytes == gib << 30);
    let ratio_16_1 = match (at(16), at(1)) {
        (Some(big), Some(small)) => Some(round(ratio(big.mount_ms, small.mount_ms), 3)),
        _ => None,
    };
    Ok(RecoveryReport {
        data_mib: args.data_mib,
        history_writes: args.history_writes,
        seed: args.seed,
        mount_ratio_largest_over_smallest: round(ratio(largest.mount_ms, smallest.mount_ms), 3),
        mount_ratio_16g_over_1g: ratio_16_1,
        sizes,
    })
}

fn ms(started: Instant) -> f64 {
    round(started.elapsed().as_secs_f64() * 1000.0, 3)
}

fn measure(size_mib: u64, args: &RecoveryArgs, ftl: &FtlConfig) -> Result<SizeResult, BenchError> {
    let cfg = device_config(size_mib)?;
    let started = Instant::now();
    let device = SimDevice::create_memory(cfg)?;
    let create_ms = ms(started);
    let zones = device.config().geometry()?.zone_count;

    let started = Instant::now();
    let mut drv = Driver::format(device, &FormatOptions::default(), ftl.clone())?;
    let format_ms = ms(started);
    let logical_blocks = drv.logical_blocks();
    let data_blocks = args.data_mib * MIB / drv.block_size() as u64;
    if data_blocks == 0 || data_blocks > logical_blocks {
        return Err(BenchError::Args(format!(
            "--data-mib {} does not fit a {size_mib} MiB device ({logical_blocks} logical blocks)",
            args.data_mib
        )));
    }

    let started = Instant::now();
    let mut pipe = Pipeline::new(64, drv.block_size());
    let bar = progress(data_blocks + args.history_writes, "recovery");
    let mut next = 0u64;
    pipe.write(
        &mut drv,
        data_blocks,
        &mut || {
            next += 1;
            next - 1
        },
        &mut |done| {
            bar.set_position(done);
            true
        },
    )?;
    drv.flush()?;
    drv.checkpoint()?;
    let mut addresses = AddressGen::new(&WorkloadSpec::uniform(), data_blocks, args.seed);
    pipe.write(
        &mut drv,
        args.history_writes,
        &mut || addresses.next_lba(),
        &mut |done| {
            bar.set_position(data_blocks + done);
            true
        },
    )?;
    drv.flush()?;
    bar.finish_and_clear();
    let workload_ms = ms(started);

    drv.backend_mut().power_cut();
    let mut device = drv.into_backend();
    device.power_on()?;
    let started = Instant::now();
    let drv = Driver::mount(device, ftl.clone())?;
    let mount_ms = ms(started);
    let mapped_blocks = drv.stats().mapped_blocks;
    if mapped_blocks != data_blocks {
        return Err(BenchError::Check(format!(
            "after the mount {mapped_blocks} blocks are mapped where {data_blocks} were written"
        )));
    }
    Ok(SizeResult {
        device_bytes: size_mib * MIB,
        zones,
        logical_blocks,
        create_ms,
        format_ms,
        workload_ms,
        mount_ms,
        mapped_blocks,
    })
}

impl RecoveryReport {
    pub fn text(&self) -> String {
        let mut t = Text::default();
        t.line(format!(
            "recovery: mount after a power cut; {} MiB of data, checkpoint, {} overwrites, flush",
            self.data_mib, self.history_writes
        ));
        for s in &self.sizes {
            t.section(&format!("{} MiB device", s.device_bytes / MIB));
            t.row("zones", s.zones);
            t.row("logical blocks", s.logical_blocks);
            t.row("create ms", s.create_ms);
            t.row("format ms", s.format_ms);
            t.row("workload ms", s.workload_ms);
            t.row("mount ms", s.mount_ms);
            t.row("mapped blocks", s.mapped_blocks);
        }
        t.section("ratios");
        t.row(
            "mount largest/smallest",
            self.mount_ratio_largest_over_smallest,
        );
        if let Some(r) = self.mount_ratio_16g_over_1g {
            t.row("mount 16 GiB/1 GiB", r);
        }
        t.render()
    }
}
