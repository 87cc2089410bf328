//! Power cuts swept across many laps of the metadata log ring under a
//! flush-heavy workload (small writes, FUA writes, a FLUSH every 17
//! requests), so that some cut lands just as the log fills a ring zone and
//! before the writer resets the next one. Mount must then continue the log
//! in that zone (not append after its older blocks, where no reader looks)
//! and every FLUSH- or FUA-acknowledged write must read back.
//!
//! The cut points are deterministic; a failure names its cut, and
//! `ZFTL_LOG_CUTS=FROM..TO` replays a range.

use std::collections::HashMap;

use zftl::core::{Driver, FormatOptions, FtlConfig, IoError};
use zftl::sim::{Faults, PowerCut, SimConfig, SimDevice};

mod common;
use common::block;

fn cut_range() -> std::ops::Range<u64> {
    let from_env = std::env::var("ZFTL_LOG_CUTS").ok().and_then(|s| {
        let (a, b) = s.split_once("..")?;
        Some(a.parse().ok()?..b.parse().ok()?)
    });
    from_env.unwrap_or(20..12_000)
}

/// lba -> (newest acknowledged version, newest durable version).
type Model = HashMap<u64, (u32, u32)>;

/// Runs the workload until the cut; returns the model and the round the
/// cut answered (that write may or may not have landed).
fn run_until_cut(d: &mut Driver<SimDevice>, cut: u64) -> (Model, u32) {
    let bs = d.block_size();
    let span = 300u64.min(d.logical_blocks());
    let mut model = Model::new();
    let mut round = 0u32;
    loop {
        round += 1;
        assert!(round < 1_000_000, "cut {cut}: the power cut never came");
        let lba = u64::from(round.wrapping_mul(2_654_435_761)) % span;
        let outcome = match round % 17 {
            0 => d.flush().map(|()| {
                for v in model.values_mut() {
                    v.1 = v.0;
                }
            }),
            1..=3 => d.read(lba, 1).map(drop),
            4 => d.write_fua(lba, &block(lba, round, bs)).map(|()| {
                model.insert(lba, (round, round));
            }),
            _ => d.write(lba, &block(lba, round, bs)).map(|()| {
                let durable = model.get(&lba).map_or(0, |v| v.1);
                model.insert(lba, (round, durable));
            }),
        };
        match outcome {
            Ok(()) => {}
            Err(IoError::DeviceGone) => return (model, round),
            Err(e) => panic!("cut {cut}: unexpected error before the cut: {e}"),
        }
    }
}

#[test]
fn cuts_at_every_point_of_many_log_laps_keep_durable_writes() {
    for cut in cut_range().step_by(23) {
        let dev = SimDevice::create_memory(SimConfig::small_for_tests()).expect("sim");
        let mut d =
            Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).expect("format");
        d.backend_mut().set_faults(Faults {
            power_cut: PowerCut::AfterSubmits(cut),
            ..Faults::default()
        });
        let bs = d.block_size();
        let (model, lost) = run_until_cut(&mut d, cut);
        let mut dev = d.into_backend();
        dev.power_on().expect("power on");
        let mut again = Driver::mount(dev, FtlConfig::default())
            .unwrap_or_else(|e| panic!("cut {cut}: mount failed: {e}"));
        for (&lba, &(newest, durable)) in &model {
            if durable == 0 {
                continue;
            }
            let data = again.read(lba, 1).expect("read");
            let v = u32::from_le_bytes(data[8..12].try_into().expect("4 bytes"));
            assert!(
                ((durable..=newest).contains(&v) || v == lost) && data == block(lba, v, bs),
                "cut {cut}: lba {lba} holds v{v}, durable v{durable}, newest v{newest}"
            );
        }
        // The log keeps working after the mount: a write and a checkpoint.
        again
            .write_fua(0, &block(0, u32::MAX, bs))
            .expect("write after mount");
        again
            .checkpoint()
            .unwrap_or_else(|e| panic!("cut {cut}: checkpoint: {e}"));
    }
}
