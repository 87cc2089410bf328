//! The simulated device's configuration: its media shape, limits, timing and
//! fault plan. Media fields are fixed for a device's life (and stored in an
//! image header); timing, faults and queue depth are run-time choices.

use serde::{Deserialize, Serialize};
use zftl_core::Geometry;

use crate::error::SimError;

/// Everything that defines a simulated device.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SimConfig {
    /// Channels (buses) of LUNs.
    pub channels: u32,
    /// LUNs (dies) on each channel; each works in parallel with the others.
    pub luns_per_channel: u32,
    /// Erase blocks per LUN.
    pub blocks_per_lun: u32,
    /// Pages per erase block.
    pub pages_per_block: u32,
    /// Bytes per page, which is the Backend block size.
    pub page_size_bytes: u32,
    /// Out-of-band bytes per page; 0 allowed.
    pub oob_size_bytes: u32,
    /// Minimum program unit in pages (`Geometry::write_unit_blocks`).
    pub program_unit_pages: u32,
    /// Erase blocks per zone, striped across this many LUNs.
    pub zone_width_luns: u32,
    /// Zone address span; `None` = the zone capacity.
    pub zone_size_blocks: Option<u64>,
    /// 0 = unlimited.
    pub max_open_zones: u32,
    /// 0 = unlimited.
    pub max_active_zones: u32,
    /// Largest zone append, in blocks.
    pub max_append_blocks: u32,
    /// Largest read or write, in blocks.
    pub max_transfer_blocks: u32,
    /// Commands in flight at most (`submit` answers `Busy` past it).
    pub queue_depth: u32,
    /// `None` = timing off: every command takes 0 ns.
    pub timing: Option<Timing>,
    /// An erase of a block already erased this many times fails.
    pub endurance_erases: u32,
    /// Seeded fraction (per 1000) of erase blocks that are bad from the start.
    pub factory_bad_block_per_mille: u32,
    /// Seeded faults.
    pub faults: Faults,
}

/// NAND operation latencies and how each LUN orders its queued operations.
/// Defaults from the nameless-writes paper, Table 2, and first in, first
/// out: each LUN runs its operations one at a time in the order they were
/// queued. Every field has a default, so a config written before a field
/// existed still loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Timing {
    /// Reading one page.
    pub read_ns: u64,
    /// Programming one page.
    pub program_ns: u64,
    /// Erasing one erase block.
    pub erase_ns: u64,
    /// The order in which a LUN runs its queued operations.
    pub scheduling: NandScheduling,
    /// `Suspend` only: from a read's arrival until the suspended program or
    /// erase has stopped and the read can start (the LUN is busy; the
    /// suspended operation ends this much later).
    pub suspend_ns: u64,
    /// `Suspend` only: what resuming a suspended program or erase adds to
    /// it after the reads it let through.
    pub resume_ns: u64,
    /// `ReadPriority` and `Suspend`: host reads, and as many background
    /// reads, that may start ahead of one program or erase after it was
    /// queued, by jumping its place in the queue or (host reads) by
    /// suspending it; further reads of that kind queue behind it. Also the
    /// host reads that may start ahead of one background read queued
    /// before them. This bounds how long reads can hold a program or erase
    /// back, and host reads a background read (docs/sim.md).
    pub max_reads_ahead: u32,
    /// `Suspend` only: suspensions one program or erase may take.
    pub max_suspends: u32,
}

/// How a LUN orders the operations queued on it. In every mode a LUN does
/// one operation at a time, programs and erases run in the order they were
/// queued, and a command's data is on the media only once its last program
/// has ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NandScheduling {
    /// One operation after another in the order they were queued: a read
    /// waits for every program and erase queued before it.
    #[default]
    Fifo,
    /// A read starts before the programs and erases queued, not yet
    /// started, on its LUN, but waits for the operation running; a host
    /// read (`ReadPriority::Host`) also before the background reads not
    /// started; reads of one kind of different commands take turns page by
    /// page. Bounded by `Timing::max_reads_ahead`.
    ReadPriority,
    /// As `ReadPriority`, and a host read arriving while a program or erase
    /// runs suspends it: the read starts `suspend_ns` later, and the
    /// suspended operation resumes after the reads queued by then,
    /// `resume_ns` longer. Background reads do not suspend. Bounded by
    /// `Timing::max_suspends` and `Timing::max_reads_ahead`.
    Suspend,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            read_ns: 25_000,
            program_ns: 200_000,
            erase_ns: 1_500_000,
            scheduling: NandScheduling::Fifo,
            suspend_ns: 10_000,
            resume_ns: 10_000,
            max_reads_ahead: 16,
            max_suspends: 4,
        }
    }
}

/// The fault plan. All randomness comes from `seed`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Faults {
    /// Seed of every fault stream (and of the factory bad blocks).
    pub seed: u64,
    /// Per program unit.
    pub program_fail_per_million: u32,
    /// Per erase block erase.
    pub erase_fail_per_million: u32,
    /// Per read command (transient: a retry may succeed).
    pub uncorrectable_read_per_million: u32,
    /// When the simulator cuts power by itself.
    pub power_cut: PowerCut,
    /// Deliver completions that are ready together in a seeded random order.
    pub shuffle_completions: bool,
    /// Per accepted submit: the controller resets, as a real one does after
    /// a stall. Every command not yet reaped ends with `HostIo`
    /// (`Interrupted`, the kernel's `EINTR`): those already executed ran;
    /// each of the others runs or not, as the seeded stream draws.
    pub controller_reset_per_million: u32,
}

/// When the simulator cuts power by itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum PowerCut {
    #[default]
    /// Only when asked (`SimDevice::power_cut`).
    Never,
    /// Cut right after the Nth accepted submit (counted from creation, open
    /// or `set_faults`); fires once.
    AfterSubmits(u64),
    /// Cut after each accepted submit with this probability.
    RandomPerMillion(u32),
}

/// Run-time choices when opening an image (the media shape comes from it).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RuntimeOptions {
    /// `None` = timing off.
    pub timing: Option<Timing>,
    /// The fault plan for this run.
    pub faults: Faults,
    /// `None` = the queue depth stored in the image.
    pub queue_depth: Option<u32>,
}

impl Default for SimConfig {
    /// The device `zftl` creates by default: 8 ch x 2 LUN x 256 blocks x 256
    /// pages of 4 KiB = 4 GiB, 1024 zones of 4 MiB striped over 4 LUNs.
    fn default() -> Self {
        SimConfig {
            channels: 8,
            luns_per_channel: 2,
            blocks_per_lun: 256,
            pages_per_block: 256,
            page_size_bytes: 4096,
            oob_size_bytes: 64,
            program_unit_pages: 1,
            zone_width_luns: 4,
            zone_size_blocks: None,
            max_open_zones: 16,
            max_active_zones: 32,
            max_append_blocks: 128,
            max_transfer_blocks: 256,
            queue_depth: 256,
            timing: None,
            endurance_erases: 3000,
            factory_bad_block_per_mille: 0,
            faults: Faults::default(),
        }
    }
}

/// Largest number of pages a device may have, so every page index, table
/// size and byte offset fits in u64 and the in-memory tables stay sane.
const MAX_TOTAL_PAGES: u64 = 1 << 32;

impl SimConfig {
    /// A small, fast device for tests: 2 ch x 2 LUN x 16 blocks x 32 pages,
    /// zones 2 LUNs wide (64 blocks), 32 zones, 16-byte OOB.
    pub fn small_for_tests() -> Self {
        SimConfig {
            channels: 2,
            luns_per_channel: 2,
            blocks_per_lun: 16,
            pages_per_block: 32,
            page_size_bytes: 4096,
            oob_size_bytes: 16,
            program_unit_pages: 1,
            zone_width_luns: 2,
            zone_size_blocks: None,
            max_open_zones: 8,
            max_active_zones: 12,
            max_append_blocks: 16,
            max_transfer_blocks: 32,
            queue_depth: 64,
            timing: None,
            endurance_erases: 3000,
            factory_bad_block_per_mille: 0,
            faults: Faults::default(),
        }
    }

    /// Total LUNs (parallel units).
    pub fn lun_count(&self) -> u32 {
        self.channels.saturating_mul(self.luns_per_channel)
    }

    /// Total erase blocks.
    pub fn erase_block_count(&self) -> u64 {
        u64::from(self.lun_count()) * u64::from(self.blocks_per_lun)
    }

    /// Total pages (= Backend blocks of raw media).
    pub fn page_count(&self) -> u64 {
        self.erase_block_count() * u64::from(self.pages_per_block)
    }

    /// Writable blocks per zone.
    pub fn zone_capacity_blocks(&self) -> u64 {
        u64::from(self.zone_width_luns) * u64::from(self.pages_per_block)
    }

    /// Checks everything the device model relies on; never panics.
    pub fn validate(&self) -> Result<(), SimError> {
        self.validate_media()?;
        self.geometry_unchecked().validate()?;
        Ok(())
    }

    fn validate_media(&self) -> Result<(), SimError> {
        let bad = |reason: String| Err(SimError::InvalidConfig { reason });
        let nonzero = [
            ("channels", self.channels),
            ("luns_per_channel", self.luns_per_channel),
            ("blocks_per_lun", self.blocks_per_lun),
            ("pages_per_block", self.pages_per_block),
            ("program_unit_pages", self.program_unit_pages),
            ("zone_width_luns", self.zone_width_luns),
            ("queue_depth", self.queue_depth),
        ];
        for (name, value) in nonzero {
            if value == 0 {
                return bad(format!("{name} must be at least 1"));
            }
        }
        let luns = u64::from(self.channels) * u64::from(self.luns_per_channel);
        if luns > u64::from(u32::MAX) {
            return bad(format!("{luns} LUNs is too many"));
        }
        if luns % u64::from(self.zone_width_luns) != 0 {
            return bad(format!(
                "zone_width_luns {} does not divide the {luns} LUNs",
                self.zone_width_luns
            ));
        }
        if !self.pages_per_block.is_multiple_of(self.program_unit_pages) {
            return bad(format!(
                "program_unit_pages {} does not divide pages_per_block {}",
                self.program_unit_pages, self.pages_per_block
            ));
        }
        let pages = luns * u64::from(self.blocks_per_lun) * u64::from(self.pages_per_block);
        if pages > MAX_TOTAL_PAGES {
            return bad(format!(
                "{pages} pages exceeds the limit of {MAX_TOTAL_PAGES}"
            ));
        }
        let zones = (luns / u64::from(self.zone_width_luns)) * u64::from(self.blocks_per_lun);
        if zones > u64::from(u32::MAX) {
            return bad(format!("{zones} zones is too many"));
        }
        if self.oob_size_bytes > self.page_size_bytes {
            return bad(format!(
                "oob_size_bytes {} exceeds page_size_bytes {}",
                self.oob_size_bytes, self.page_size_bytes
            ));
        }
        if let Some(size) = self.zone_size_blocks {
            if size < self.zone_capacity_blocks() {
                return bad(format!(
                    "zone_size_blocks {size} is below the zone capacity {}",
                    self.zone_capacity_blocks()
                ));
            }
            if size > u64::from(u32::MAX) * u64::from(self.pages_per_block) {
                return bad(format!("zone_size_blocks {size} is absurdly large"));
            }
        }
        if self.factory_bad_block_per_mille > 1000 {
            return bad(format!(
                "factory_bad_block_per_mille {} exceeds 1000",
                self.factory_bad_block_per_mille
            ));
        }
        let rates = [
            (
                "program_fail_per_million",
                self.faults.program_fail_per_million,
            ),
            ("erase_fail_per_million", self.faults.erase_fail_per_million),
            (
                "uncorrectable_read_per_million",
                self.faults.uncorrectable_read_per_million,
            ),
            (
                "controller_reset_per_million",
                self.faults.controller_reset_per_million,
            ),
        ];
        for (name, rate) in rates {
            if rate > 1_000_000 {
                return bad(format!("{name} {rate} exceeds 1000000"));
            }
        }
        if let PowerCut::RandomPerMillion(rate) = self.faults.power_cut {
            if rate > 1_000_000 {
                return bad(format!("power cut rate {rate} exceeds 1000000"));
            }
        }
        Ok(())
    }

    /// The Backend geometry this device presents.
    pub fn geometry(&self) -> Result<Geometry, SimError> {
        self.validate()?;
        Ok(self.geometry_unchecked())
    }

    /// Only meaningful after `validate_media` passed (it bounds the products).
    fn geometry_unchecked(&self) -> Geometry {
        let capacity = self.zone_capacity_blocks();
        let zone_count = (self.lun_count() / self.zone_width_luns.max(1)) as u64
            * u64::from(self.blocks_per_lun);
        Geometry {
            block_size_bytes: self.page_size_bytes,
            oob_size_bytes: self.oob_size_bytes,
            zone_count: u32::try_from(zone_count).unwrap_or(u32::MAX),
            zone_size_blocks: self.zone_size_blocks.unwrap_or(capacity),
            zone_capacity_blocks: capacity,
            write_unit_blocks: self.program_unit_pages,
            max_append_blocks: self.max_append_blocks,
            max_transfer_blocks: self.max_transfer_blocks,
            max_open_zones: self.max_open_zones,
            max_active_zones: self.max_active_zones,
            parallel_units: self.lun_count(),
            zone_groups: (self.lun_count() / self.zone_width_luns.max(1)).max(1),
            queue_depth: self.queue_depth,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zftl_core::GeometryError;

    #[test]
    fn default_device_is_4gib_of_1024_zones() {
        let g = SimConfig::default().geometry().expect("default is valid");
        assert_eq!(g.zone_count, 1024);
        assert_eq!(g.zone_capacity_blocks, 1024);
        assert_eq!(g.capacity_bytes(), 4 << 30);
        assert_eq!(g.parallel_units, 16);
    }

    #[test]
    fn small_for_tests_is_valid() {
        let g = SimConfig::small_for_tests().geometry().expect("valid");
        assert_eq!(g.zone_count, 32);
        assert_eq!(g.zone_capacity_blocks, 64);
    }

    #[test]
    fn bad_configs_are_typed_errors() {
        let mut c = SimConfig::small_for_tests();
        c.zone_width_luns = 3;
        assert!(matches!(c.validate(), Err(SimError::InvalidConfig { .. })));
        let mut c = SimConfig::small_for_tests();
        c.channels = 0;
        assert!(matches!(c.validate(), Err(SimError::InvalidConfig { .. })));
        let mut c = SimConfig::small_for_tests();
        c.page_size_bytes = 1000;
        assert!(matches!(
            c.validate(),
            Err(SimError::Geometry(GeometryError::BlockSize(1000)))
        ));
        let mut c = SimConfig::small_for_tests();
        c.zone_size_blocks = Some(10);
        assert!(matches!(c.validate(), Err(SimError::InvalidConfig { .. })));
        let mut c = SimConfig::small_for_tests();
        c.program_unit_pages = 3;
        assert!(matches!(c.validate(), Err(SimError::InvalidConfig { .. })));
        let mut c = SimConfig::small_for_tests();
        c.channels = u32::MAX;
        c.luns_per_channel = u32::MAX;
        assert!(matches!(c.validate(), Err(SimError::InvalidConfig { .. })));
        let mut c = SimConfig::small_for_tests();
        c.program_unit_pages = 4;
        c.max_append_blocks = 6;
        assert!(matches!(
            c.validate(),
            Err(SimError::Geometry(GeometryError::TransferLimits { .. }))
        ));
    }
}
