//! Static wear leveling on a device of many small zones: once the host
//! stops, leveling finishes and the volume settles, and every block still
//! reads its last version.
//!
//! The shape is `zftl bench wa`'s smallest (256 data zones of 16 blocks,
//! 14 % over-provisioning, cost-benefit victims, hot/cold writes, a spread
//! of 4 erases). There the metadata log ring turns over its few zones many
//! times per data-zone erase: leveling that counted the ring's zones in the
//! spread it evens out never got the spread below its threshold, since
//! every move's notes wore the ring further, and moved cold data forever.

use zftl::core::{Driver, FormatOptions, FtlConfig, VictimPolicy};
use zftl::sim::{SimConfig, SimDevice};

const DATA_ZONES: u32 = 256;
const ZONE_BLOCKS: u32 = 16;
/// Zones format needs besides the data zones (two superblock zones and a
/// metadata ring of four on this shape).
const OTHER_ZONES: u32 = 6;
const STATIC_WL_THRESHOLD: u32 = 4;

/// One zone per erase block on one LUN, no timing: `zftl bench wa`'s device.
fn device() -> SimDevice {
    let config = SimConfig {
        channels: 1,
        luns_per_channel: 1,
        blocks_per_lun: DATA_ZONES + OTHER_ZONES,
        pages_per_block: ZONE_BLOCKS,
        zone_width_luns: 1,
        max_append_blocks: ZONE_BLOCKS,
        max_transfer_blocks: ZONE_BLOCKS,
        queue_depth: 256,
        timing: None,
        endurance_erases: u32::MAX,
        ..SimConfig::default()
    };
    SimDevice::create_memory(config).expect("simulated device")
}

/// A block's contents: its LBA and version, so a read shows which it got.
fn block(lba: u64, version: u32, bs: usize) -> Vec<u8> {
    let mut b = vec![(lba as u8) ^ (version as u8); bs];
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..12].copy_from_slice(&version.to_le_bytes());
    b
}

/// xorshift64*: a fixed address stream.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// Far more turns than settling this volume takes (about 1,300): each
/// leveling move erases a zone that trails the most-worn one by more than
/// the threshold, and none wears the most-worn zone further, so there are
/// at most a few hundred moves.
const SETTLE_TURNS: u64 = 100_000;

#[test]
fn leveling_on_small_zones_settles() {
    let logical = u64::from(DATA_ZONES * ZONE_BLOCKS) * 100 / 114;
    let options = FormatOptions {
        logical_blocks: Some(logical),
        gc_reserve_zones: 1,
        seed: 1,
        ..FormatOptions::default()
    };
    let config = FtlConfig {
        gc_policy: VictimPolicy::CostBenefit,
        static_wl_threshold: STATIC_WL_THRESHOLD,
        write_buffer_blocks: 64,
        ..FtlConfig::default()
    };
    let mut drv = Driver::format(device(), &options, config).expect("format");
    let bs = drv.block_size();
    let mut versions = vec![0u32; logical as usize];
    for lba in 0..logical {
        drv.write(lba, &block(lba, 0, bs)).expect("fill");
    }
    // Nine writes in ten to the first tenth: its zones wear, the rest's
    // stay cold and are what leveling moves.
    let hot = logical / 10;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for _ in 0..logical {
        let lba = if rng.below(10) < 9 {
            rng.below(hot)
        } else {
            hot + rng.below(logical - hot)
        };
        versions[lba as usize] += 1;
        drv.write(lba, &block(lba, versions[lba as usize], bs))
            .expect("overwrite");
    }
    drv.flush().expect("flush");
    let before = drv.stats();

    let mut turns = 0;
    while drv.turn().expect("turn") {
        turns += 1;
        assert!(
            turns < SETTLE_TURNS,
            "no end to settling after {turns} turns: {:?}",
            drv.stats()
        );
    }
    let after = drv.stats();
    eprintln!(
        "settled in {turns} turns; leveling moved {} blocks while settling, {} in all",
        after.wl_move_blocks - before.wl_move_blocks,
        after.wl_move_blocks
    );
    assert!(
        after.wl_move_blocks > 0,
        "the run leveled nothing: {after:?}"
    );
    for (lba, &version) in versions.iter().enumerate() {
        let lba = lba as u64;
        assert_eq!(
            drv.read(lba, 1).expect("read"),
            block(lba, version, bs),
            "block {lba}"
        );
    }
}
