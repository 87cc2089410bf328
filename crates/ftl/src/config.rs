//! Tunables of a mounted FTL and of a format. Defaults are what a user gets
//! without a config file; every bound here is a bound on a table or queue.

use crate::tag::DataCrcImpl;
use crate::zone::VictimPolicy;
use serde::{Deserialize, Serialize};

/// Where block tags live (docs/format.md §1, "Tag mode").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TagPlacement {
    /// In OOB when the device has at least 32 OOB bytes per block, else in band.
    Auto,
    /// Always in band (HostWrite notes in the metadata log), even with OOB.
    InBand,
}

/// Options fixed at format time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FormatOptions {
    /// Logical size in blocks; `None` = the data capacity (less the GC
    /// reserve and the open zones) with 7 % over-provisioning on top. May
    /// exceed the media (thin provisioning).
    pub logical_blocks: Option<u64>,
    pub tag_placement: TagPlacement,
    /// Zones kept free so GC can always make progress at 100 % logical fill.
    pub gc_reserve_zones: u32,
    /// Seed of the device UUID (deterministic formats for tests).
    pub seed: u64,
}

impl Default for FormatOptions {
    fn default() -> Self {
        FormatOptions {
            logical_blocks: None,
            tag_placement: TagPlacement::Auto,
            gc_reserve_zones: 4,
            seed: 0,
        }
    }
}

/// The length of the protection window ([`FtlConfig::protect_window`]).
/// In a config file: `protect_window = { secs = 3600 }` or
/// `protect_window = { blocks = 16777216 }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProtectWindow {
    /// A point is dropped once it is older than this many seconds of wall
    /// time; points are taken at most every `max(1 s, window ÷
    /// MAX_WINDOW_POINTS)`.
    Secs(u64),
    /// A point is dropped once more than this many blocks were written
    /// by the host after it (host writes admitted; trims, zeroing and
    /// range operations write no data and count for nothing); points are
    /// taken at most every `max(MIN_POINT_INTERVAL_BLOCKS, window ÷
    /// MAX_WINDOW_POINTS)` blocks written, and at most one a second
    /// (their names are their time to the second).
    Blocks(u64),
}

impl ProtectWindow {
    /// Whether the window is off (its points are dropped).
    pub fn is_off(self) -> bool {
        matches!(self, ProtectWindow::Secs(0) | ProtectWindow::Blocks(0))
    }
}

/// Run-time tunables of a mounted FTL.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FtlConfig {
    pub gc_policy: VictimPolicy,
    /// Separate GC-relocated data from host writes.
    pub separate_gc_stream: bool,
    /// Split host writes and GC output into hot and cold streams by the age
    /// of each block's previous version (Metis-style temperature separation).
    pub temperature_streams: bool,
    /// Host blocks buffered before they reach the media; FLUSH drains it.
    pub write_buffer_blocks: u32,
    /// Host requests accepted but not yet answered; past it: busy.
    pub max_host_requests: u32,
    /// Device commands the core keeps in flight at most.
    pub max_inflight_commands: u32,
    /// Appends the core keeps in flight to one open data zone at most (host
    /// and GC alike; 0, the default: no bound). A zone programs on its zone group's
    /// parallel units only, so appends queued past what keeps those busy
    /// only lengthen the device's queue, and whatever waits for that
    /// queue waits longer: a GC victim's note in the log, its flush and
    /// its reset (`zftl bench media`, docs/bench.md). GC's data then goes
    /// to another of GC's open zones or waits; the host's waits (a stream
    /// moved to another zone would leave both half stale). It helps GC
    /// spread over zone groups (`gc_lanes`, `gc_victims`); off by default,
    /// as holding host appends back cost the host's rate at depth (4 KiB
    /// random writes at depth 16 over a small working set: a quarter
    /// fewer with 2, `zftl bench nameless`).
    pub zone_max_appends: u32,
    /// Blocks one append of host or GC data carries at most (0, the
    /// default: the device's largest append; rounded down to the write
    /// unit). With `zone_max_appends` it bounds the programs queued on an
    /// open data zone's parallel units, so what waits behind them (a FUA
    /// write's append, a read of the same units) waits for a few programs,
    /// not hundreds (`zftl bench media`, docs/bench.md).
    pub append_max_blocks: u32,
    /// The urgent lane (FUA writes' blocks while the host lanes wait for
    /// GC) may open a zone below the GC reserve too, one at a time in turn
    /// with the host lanes, not only at it (docs/design.md, step 4 of a
    /// write). Off by default: a FUA write then waits while GC refills the
    /// reserve (up to 518 ms in `zftl bench media` with bounded zone
    /// queues), and on, the buffered writes wait longer for the host lanes
    /// (sequential writes at depth 64 fewer by 41 % there, docs/bench.md).
    pub urgent_below_reserve: bool,
    /// GC starts when the room left for writes above the reserve (the free
    /// zones and the unwritten tails of the open data zones, counted in
    /// blocks) falls below this many zones, or below 1/32 of the blocks
    /// that hold no live data if that is more (on a device of many small
    /// zones two zones are too thin a cushion; see `GC_START_ROOM_SHARE` in
    /// `ftl/reloc.rs`). A collection keeps pace with
    /// the host's appends (moving `valid / (capacity - valid)` blocks per
    /// host block, a quarter more) and runs flat out once the free zones are
    /// down to the reserve; with two, a paced collection mostly ends before
    /// that. With one, the host waits for GC more often and 4 KiB random
    /// writes run slower, though a sequential overwrite then copies nothing
    /// at all (docs/bench-nbd.md, "When GC starts").
    pub gc_start_free_zones: u32,
    /// Device commands GC may have in flight while the host is busy.
    pub gc_max_inflight: u32,
    /// Blocks of GC's victim reads in flight at most on one zone group's
    /// parallel units (`Geometry::zone_groups`; 0, the default: no bound).
    /// Once the free zones are down to the GC reserve, `gc_max_inflight`
    /// no longer holds GC back, and with `fifo` LUNs a burst of victim
    /// reads queued milliseconds of reads ahead of whatever the host
    /// appended to that group (a FUA write's program; `zftl bench media`,
    /// docs/bench.md). A read is cut to what the bound leaves.
    pub gc_read_max_blocks_per_group: u32,
    /// A GC victim's reset (an erase on each of its zone group's units,
    /// milliseconds long) waits while urgent appends (FUA writes' blocks,
    /// and those a flush waits for) went to that zone group in the last
    /// 2 ms, for at most 1 s, and the urgent lane opens its zone where no
    /// victim waits: a FUA write queued behind an erase waits for all of it
    /// (`zftl bench media`, docs/bench.md). Off by default: the zone GC
    /// frees comes later.
    pub gc_reset_yields_to_urgent: bool,
    /// Zones GC may write relocated data into at once, each on a zone group
    /// the other open data zones use least (`Geometry::zone_groups`): one
    /// zone programs on one group's parallel units only. Clamped to two per
    /// zone group (one for each GC stream, survivors and cold data), one
    /// per 8 data zones, and 16: a device of one zone group (every backend
    /// but the simulator) gets one whatever is asked. 1 = GC writes one
    /// zone per stream (the default; 4 lets GC's copies program on every
    /// LUN of the simulator's default device, 8 on every zone group for
    /// each stream; docs/bench.md "`bench media`" says why it is not the
    /// default).
    /// Above 1 (or with `gc_victims` above 1) GC also reads spans
    /// of up to 64 blocks, dead ones included, and appends 128 blocks at a
    /// time while reads are on their way, lanes open their zones on the
    /// zone group the open lanes use least, and a victim comes from the
    /// zone group with the fewest free zones and victims if it copies at
    /// most 1/32 of a zone more (docs/design.md, "A GC job").
    pub gc_lanes: u32,
    /// Zones host writes of one temperature may go to at once, each on a
    /// zone group the open zones use least: one zone programs on one
    /// group's parallel units only, so with one the host's programs keep a
    /// quarter of the simulator's default device busy. A write goes to the
    /// zone of its temperature with the fewest appends in flight, and a
    /// further zone opens only once each has one in flight, so a host at
    /// depth 1 stays in one zone. Clamped to the zone groups, 4, and one per
    /// 8 data zones (an open zone's unwritten tail is space no write can use
    /// until it fills); a device of one zone group (every backend but the
    /// simulator) gets one whatever is asked. 1 (the default) = one zone
    /// per temperature.
    pub host_stripes: u32,
    /// Victims GC holds at once, copying or waiting for their reset: the
    /// next starts once the running ones are read through, while their
    /// copies are still on their way, so the copies of several victims
    /// keep the zone groups busy. At most 16; leveling and retirement do
    /// not run beside other jobs. 1 = one victim at a time, from its
    /// choice through its reset.
    pub gc_victims: u32,
    /// Media blocks written between checkpoints.
    pub checkpoint_interval_blocks: u64,
    /// Static wear leveling: move cold data once max − min erase count exceeds this; 0 = off.
    pub static_wl_threshold: u32,
    /// Largest host request, in blocks (capped by `write_buffer_blocks`:
    /// see [`Self::request_blocks_limit`]).
    pub max_request_blocks: u32,
    /// The code that takes the data CRCs of the blocks written and read
    /// (every implementation gives the same CRC-32C; they differ in speed
    /// from CPU to CPU). `None`: [`DataCrcImpl::selected`], by the CPU's
    /// features. The core has no clock to time them; `zftl` times them at
    /// start-up and puts the fastest here (`zftl::data_crc`), unless its
    /// config file names one (`data_crc = "crc32c"`).
    pub data_crc: Option<DataCrcImpl>,
    /// The protection window (docs/design.md, "Time and the protection
    /// window"): while the volume changes the core takes points
    /// (snapshots named `@` + their time, to revert to or read) and drops
    /// those the window has left, by age or by host blocks written (see
    /// [`ProtectWindow`]). A window of 0 is off: the points there are
    /// dropped. `None` (the default): points are neither taken nor
    /// dropped. The wall time comes from the driver
    /// ([`crate::Ftl::handle_wall_time`]). Whatever this says, a write,
    /// trim or vector that finds no room drops the oldest point first.
    pub protect_window: Option<ProtectWindow>,
    /// Nameless blocks written since the client's last `nameless_commit`
    /// that the core keeps, to hand over after a mount (docs/design.md,
    /// "Recovery and the post-crash hand-over"): past it a nameless write
    /// answers `Busy` until a commit. At least 1.
    pub nameless_uncommitted_blocks: u32,
    /// Entries of the nameless remap table (docs/design.md, "Migration
    /// events and the remap table"): migrated blocks whose move the client
    /// has not acknowledged. 32 bytes of memory per entry; a full table
    /// stops migrations. At least 1.
    pub nameless_remap_entries: u32,
    /// Wear leveling of nameless data by migration (docs/design.md, "Wear
    /// leveling"; the paper's §6.6 policy); `None`: off.
    pub nameless_wear: Option<NamelessWear>,
    /// The device's read, program and erase times GC's in-place victim is
    /// scored with (docs/design.md, "Choosing a victim": the paper's §4.2
    /// cost and benefit), and GC's commands are costed with against
    /// `gc_budget`.
    pub nameless_cost_us: NamelessCostUs,
    /// A rate limit on GC's device time (docs/design.md, "GC's device-time
    /// budget"); `None` (the default): GC runs at its pace alone.
    pub gc_budget: Option<GcBudget>,
}

/// GC's device-time budget: a token bucket in device time, filled by the
/// time the driver reports (`Ftl::handle_time`) and spent by GC's reads,
/// copies and resets at [`FtlConfig::nameless_cost_us`] (a block read, a
/// block program; a zone reset on each of the zone's parallel units). A
/// paced collection reads only with tokens left; once the free zones are
/// down to the GC reserve, or nothing is in flight on the device, it runs
/// whatever the budget says, so the host never waits on it for space and
/// a driver whose clock only moves with the device (the simulator's
/// virtual time) never stalls. In a config file: `gc_budget = {
/// device_us_per_ms = 4000, burst_us = 20000 }`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcBudget {
    /// Device time GC may spend per millisecond elapsed, in µs summed over
    /// the parallel units: 4000 lets GC keep four units busy on average.
    pub device_us_per_ms: u32,
    /// Device time GC may save up while it does not spend it, in µs.
    pub burst_us: u32,
}

/// Times of one block read, one block program and one zone reset, in µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamelessCostUs {
    pub read_us: u32,
    pub write_us: u32,
    pub erase_us: u32,
}

impl Default for NamelessCostUs {
    /// The simulator's timing model.
    fn default() -> Self {
        NamelessCostUs {
            read_us: 25,
            write_us: 200,
            erase_us: 1500,
        }
    }
}

/// When GC moves cold nameless data onto worn zones (docs/design.md,
/// "Wear leveling"): once the most-worn zone in service has used
/// `trigger_percent` of `endurance_erases`, while the most-worn free zone
/// is worn (its remaining life below `candidate_percent` of the mean
/// remaining life, and more than one erase above the mean), the coldest
/// Full nameless zone less worn than the mean is migrated into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamelessWear {
    pub endurance_erases: u32,
    pub trigger_percent: u32,
    pub candidate_percent: u32,
}

impl NamelessWear {
    /// The paper's policy for a device of `endurance_erases`: trigger at
    /// 75 % of the lifetime, candidates below 90 % of the mean remaining
    /// life.
    pub fn paper(endurance_erases: u32) -> NamelessWear {
        NamelessWear {
            endurance_erases,
            trigger_percent: 75,
            candidate_percent: 90,
        }
    }

    /// Whether leveling may act at all: the most-worn zone in service
    /// (`max_erases`) has used `trigger_percent` of the endurance.
    pub fn triggered(&self, max_erases: u32) -> bool {
        u64::from(max_erases) * 100
            >= u64::from(self.endurance_erases) * u64::from(self.trigger_percent)
    }

    /// Whether a zone of `erases` is worn among `zones` zones in service
    /// that hold `total_erases` and `total_life` remaining erases (each
    /// zone's `endurance - erases`, at least 0): the paper's test,
    /// remaining life below `candidate_percent` of the mean remaining
    /// life, stated on erase counts as `erases - mean > (1 - candidate) ×
    /// mean remaining life`, and by more than one erase. On remaining
    /// lives, a zone past the endurance (life 0) would be worn while any
    /// zone has life left, and near the endurance a tenth of the mean
    /// remaining life is under an erase: every zone above the mean worn.
    pub fn is_worn(&self, erases: u32, zones: u64, total_erases: u64, total_life: u64) -> bool {
        // Every term × 100 × zones, in whole numbers.
        let above_mean = (u64::from(erases) * zones).saturating_sub(total_erases);
        let spare = 100u64.saturating_sub(u64::from(self.candidate_percent));
        let margin = (spare * total_life).max(100 * zones);
        100 * above_mean > margin
    }
}

impl FtlConfig {
    /// The largest request the core takes, in blocks: `max_request_blocks`,
    /// but no more than the write buffer holds (a write is buffered whole).
    pub fn request_blocks_limit(&self) -> u32 {
        self.max_request_blocks.min(self.write_buffer_blocks).max(1)
    }

    /// The data CRC implementation this configuration runs.
    pub fn data_crc_impl(&self) -> DataCrcImpl {
        self.data_crc.unwrap_or_else(DataCrcImpl::selected)
    }
}

impl Default for FtlConfig {
    fn default() -> Self {
        FtlConfig {
            gc_policy: VictimPolicy::CostBenefit,
            separate_gc_stream: true,
            temperature_streams: true,
            write_buffer_blocks: 4096,
            max_host_requests: 1024,
            max_inflight_commands: 128,
            zone_max_appends: 0,
            append_max_blocks: 0,
            urgent_below_reserve: false,
            gc_start_free_zones: 2,
            gc_max_inflight: 32,
            gc_read_max_blocks_per_group: 0,
            gc_reset_yields_to_urgent: false,
            gc_lanes: 1,
            host_stripes: 1,
            gc_victims: 1,
            checkpoint_interval_blocks: 1 << 18,
            static_wl_threshold: 0,
            max_request_blocks: 8192,
            data_crc: None,
            protect_window: None,
            nameless_uncommitted_blocks: 1 << 16,
            nameless_remap_entries: 1 << 16,
            nameless_wear: None,
            nameless_cost_us: NamelessCostUs::default(),
            gc_budget: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NamelessWear;

    /// Totals of erases and remaining life (at least 0) over `zones`.
    fn totals(w: &NamelessWear, zones: &[u32]) -> (u64, u64, u64) {
        let erases = zones.iter().map(|&e| u64::from(e)).sum();
        let life = zones
            .iter()
            .map(|&e| u64::from(w.endurance_erases.saturating_sub(e)))
            .sum();
        (zones.len() as u64, erases, life)
    }

    /// The paper's test on remaining lives, as the policy stated it before
    /// (life × 100 × zones < candidate × total life).
    fn paper_worn(w: &NamelessWear, e: u32, zones: &[u32]) -> bool {
        let (n, _, life) = totals(w, zones);
        let own = u64::from(w.endurance_erases.saturating_sub(e));
        own * 100 * n < u64::from(w.candidate_percent) * life
    }

    #[test]
    fn worn_is_the_papers_test_while_a_tenth_of_the_mean_life_is_an_erase_or_more() {
        let w = NamelessWear::paper(50);
        for low in 0..=30u32 {
            let zones = [low, low, low + 5, low + 10, low + 15];
            let (n, erases, life) = totals(&w, &zones);
            assert!(life >= 10 * n, "mean life under 10 erases: {zones:?}");
            for e in low..=50 {
                assert_eq!(
                    w.is_worn(e, n, erases, life),
                    paper_worn(&w, e, &zones),
                    "{e} among {zones:?}"
                );
            }
        }
    }

    #[test]
    fn past_the_endurance_only_a_zone_more_than_an_erase_above_the_mean_is_worn() {
        let w = NamelessWear::paper(16);
        // Mean 20.5, every zone past the endurance.
        let zones = [18, 20, 21, 23];
        let (n, erases, life) = totals(&w, &zones);
        assert_eq!(life, 0);
        // Remaining lives would call every zone worn: 0 < 90 % of 0 is
        // false for all, and with one zone below the endurance true for all.
        for e in [18, 20, 21] {
            assert!(!w.is_worn(e, n, erases, life), "{e} of {zones:?}");
        }
        assert!(w.is_worn(23, n, erases, life));
        let zones = [15, 20, 21, 23];
        assert!(paper_worn(&w, 20, &zones), "the old test: worn");
        let (n, erases, life) = totals(&w, &zones);
        assert!(!w.is_worn(20, n, erases, life));
        assert!(w.is_worn(23, n, erases, life));
    }

    #[test]
    fn near_the_endurance_a_zone_within_an_erase_of_the_mean_is_not_worn() {
        let w = NamelessWear::paper(16);
        // Mean 13, mean remaining life 3: a tenth of it is 0.3 erase.
        let zones = [12, 13, 13, 14];
        let (n, erases, life) = totals(&w, &zones);
        assert!(paper_worn(&w, 14, &zones), "the old test: worn");
        assert!(!w.is_worn(14, n, erases, life));
        assert!(!w.is_worn(13, n, erases, life));
        let zones = [12, 12, 13, 15];
        let (n, erases, life) = totals(&w, &zones);
        assert!(w.is_worn(15, n, erases, life), "mean 13, 15 is 2 above");
    }

    #[test]
    fn triggered_at_the_share_of_the_endurance() {
        let w = NamelessWear::paper(16);
        assert!(!w.triggered(11));
        assert!(w.triggered(12));
        let w = NamelessWear::paper(50);
        assert!(!w.triggered(37));
        assert!(w.triggered(38));
    }
}
