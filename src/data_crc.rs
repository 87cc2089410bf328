//! Times the data CRC implementations on this CPU, so that a volume can run
//! the fastest: every block written or read pays one CRC, and CPU features
//! alone ([`DataCrcImpl::selected`], what a volume runs when none is named)
//! rank the implementations wrongly on some CPUs. The core has no clock to
//! time them itself; the choice goes into
//! [`FtlConfig::data_crc`](zftl_core::FtlConfig::data_crc), per volume.
//!
//! ```
//! use zftl::core::FtlConfig;
//!
//! let timings = zftl::data_crc::choose_fastest();
//! println!("data CRC: {}", zftl::data_crc::describe(&timings));
//! let config = FtlConfig {
//!     data_crc: Some(timings[0].imp),
//!     ..FtlConfig::default()
//! };
//! # let _ = config;
//! ```

use std::hint::black_box;
use std::time::{Duration, Instant};

use zftl_core::tag::DataCrcImpl;

/// The FTL's block size: what each call checksums.
const BLOCK_BYTES: usize = 4096;
/// Blocks per timed pass: a 128 KiB write's worth, in cache as a write's
/// blocks are when their CRC is taken.
const BLOCKS_PER_PASS: usize = 32;
/// Passes per implementation at least, interleaved so that a slow spell of
/// a shared machine slows every implementation alike; each keeps its best
/// pass. More passes follow until [`MIN_TIMING`] has gone by: single
/// passes of a few microseconds ranked the two fast implementations
/// differently from run to run on a shared machine.
const PASSES: usize = 15;
const MIN_TIMING: Duration = Duration::from_millis(5);
/// Untimed passes first: an implementation's first calls run slower
/// (tables and code not yet in cache) and would rank it too low.
const WARMUP_PASSES: usize = 3;

/// One implementation's best pass.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The implementation.
    pub imp: DataCrcImpl,
    /// Its best pass over 4 KiB blocks, in MiB/s.
    pub mib_per_s: f64,
}

/// Times every implementation that runs its own code on this CPU
/// (`DataCrcImpl::runs_here`); returns the timings, fastest first (never
/// empty): put `timings[0].imp` in [`FtlConfig::data_crc`]. About 5 ms on a
/// real CPU. Changes nothing by itself.
///
/// [`FtlConfig::data_crc`]: zftl_core::FtlConfig::data_crc
pub fn choose_fastest() -> Vec<Timing> {
    let data: Vec<u8> = (0..BLOCK_BYTES * BLOCKS_PER_PASS)
        .map(|i| (i * 131 + (i >> 9)) as u8)
        .collect();
    let imps: Vec<DataCrcImpl> = DataCrcImpl::ALL
        .into_iter()
        .filter(|imp| imp.runs_here())
        .collect();
    for &imp in &imps {
        for _ in 0..WARMUP_PASSES {
            time_pass(imp, &data);
        }
    }
    let mut best = vec![Duration::MAX; imps.len()];
    let start = Instant::now();
    let mut passes = 0;
    while passes < PASSES || start.elapsed() < MIN_TIMING {
        for (imp, best) in imps.iter().zip(&mut best) {
            *best = (*best).min(time_pass(*imp, &data));
        }
        passes += 1;
    }
    let mut timings: Vec<Timing> = imps
        .iter()
        .zip(best)
        .map(|(&imp, t)| Timing {
            imp,
            mib_per_s: data.len() as f64 / (1 << 20) as f64 / t.as_secs_f64().max(1e-9),
        })
        .collect();
    timings.sort_by(|a, b| b.mib_per_s.total_cmp(&a.mib_per_s));
    timings
}

/// One pass: the blocks' CRCs in one call, as a write of several blocks
/// takes them at admission or on the caller's thread (`SummedBlocks`).
fn time_pass(imp: DataCrcImpl, data: &[u8]) -> Duration {
    let mut crcs = [0u32; BLOCKS_PER_PASS];
    let t0 = Instant::now();
    imp.checksum_blocks(black_box(data), BLOCK_BYTES, &mut crcs);
    black_box(crcs);
    t0.elapsed()
}

/// "crc32c (13847 MiB/s on 4 KiB blocks; crc-fast 11477, table16 2419)":
/// for a log line.
pub fn describe(timings: &[Timing]) -> String {
    let rest: Vec<String> = timings[1..]
        .iter()
        .map(|t| format!("{} {:.0}", t.imp.name(), t.mib_per_s))
        .collect();
    format!(
        "{} ({:.0} MiB/s on 4 KiB blocks; {})",
        timings[0].imp.name(),
        timings[0].mib_per_s,
        rest.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fastest_is_chosen_and_listed_first() {
        let timings = choose_fastest();
        let here = DataCrcImpl::ALL.iter().filter(|imp| imp.runs_here());
        assert_eq!(timings.len(), here.count());
        assert!(timings.windows(2).all(|w| w[0].mib_per_s >= w[1].mib_per_s));
        assert!(timings.iter().all(|t| t.mib_per_s > 0.0));
        assert!(describe(&timings).starts_with(timings[0].imp.name()));
    }
}
