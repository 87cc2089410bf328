//! `zftl bench nameless`'s wear-leveling workloads (Zhang et al., FAST'12,
//! §6.6): the volume filled (to `fill_percent` of its logical size: at
//! 100 the nameless side runs out of room, docs/bench.md), then its first
//! 12.5 % (and, the second workload, its first 25 %) overwritten at
//! random, `passes` times its size, with blocks of `endurance` erase
//! cycles. Nameless: nameless writes, the paper's leveling policy
//! (`NamelessWear::paper`: from 75 % of the endurance on the most-worn
//! zone, cold nameless zones migrate onto worn free zones); page-mapped:
//! logical writes, the core's static leveling (`static_wl_threshold`: the
//! zone with the fewest erases is moved once the most-worn has more than
//! that many more; set to 75 % of the endurance, so with cold zones at no
//! erases it starts where the nameless policy does). The simulator's
//! blocks never wear out: only the policies see the endurance. Each side
//! also runs without its leveling, to show what leveling does to the
//! erase counts. The same command sizes, depth and commit (flush) cadence
//! on every side, in virtual time: one run is exact.

use serde::Serialize;
use zftl_core::{Backend, FtlConfig, FtlStats, NamelessWear};

use super::nameless_rw::{sim_config, Side};
use super::{progress, ratio, round, BenchError};

/// What the workloads are run with.
#[derive(Clone, Debug)]
pub struct WearSetup {
    /// Shares of the volume overwritten, in percent.
    pub hot_percents: Vec<f64>,
    /// Share of the volume's logical blocks the fill writes, in percent.
    pub fill_percent: u32,
    pub passes: u64,
    pub endurance_erases: u32,
    /// The page-mapped side's `static_wl_threshold`; `None`: 75 % of the
    /// endurance.
    pub page_threshold_erases: Option<u32>,
    pub depth: usize,
    pub blocks_per_lun: u32,
    /// Tags in band (the device has no OOB).
    pub in_band_tags: bool,
    pub seed: u64,
}

/// Bytes of memory a remap table takes per entry it holds
/// (`FtlConfig::nameless_remap_entries`: 32 per entry of capacity).
const REMAP_BYTES_PER_ENTRY: u64 = 32;

/// One side of one workload: the overwrites measured, the erase counts at
/// the end.
#[derive(Debug, Serialize)]
pub struct WearSide {
    /// Whether this side's leveling was on.
    pub leveling: bool,
    /// Overwrites per virtual second.
    pub writes_per_s: f64,
    pub write_amplification: f64,
    /// Blocks copied by leveling (cold data moved), and by GC for space
    /// (nameless: migrations of partly freed zones), while overwriting.
    pub wear_move_blocks: u64,
    pub gc_copy_blocks: u64,
    /// Nameless blocks migrated (both kinds; each an event followed).
    pub migrated_blocks: u64,
    /// Metadata log blocks written while overwriting (every note and
    /// checkpoint chunk, both sides).
    pub meta_write_blocks: u64,
    /// Of that metadata, what migrations cost (nameless): their notes (a
    /// `NamelessMigrate` per block moved, a `NamelessAck` per entry
    /// acknowledged) and the remap entries the checkpoints carried.
    pub migration_note_bytes: u64,
    pub remap_checkpoint_bytes: u64,
    /// The largest the remap table was during the run (fill included):
    /// entries, and the memory a table holding them takes.
    pub remap_peak_entries: u64,
    pub remap_peak_bytes: u64,
    /// Erase counts of the data and free zones at the end.
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_mean: f64,
}

#[derive(Debug, Serialize)]
pub struct WearRow {
    pub hot_percent: f64,
    /// Blocks overwritten (the first `hot_percent` of the logical size),
    /// the volume's logical size, and the blocks the fill wrote.
    pub hot_blocks: u64,
    pub logical_blocks: u64,
    pub filled_blocks: u64,
    /// Overwrites measured: `passes` × `hot_blocks`.
    pub writes: u64,
    pub page_mapped: WearSide,
    pub nameless: WearSide,
    /// Nameless writes per second ÷ page-mapped, both leveling (target
    /// ≥ 0.9; the paper: less than 9 % overhead).
    pub throughput_ratio: f64,
    /// The same sides without leveling (control).
    pub page_mapped_unleveled: WearSide,
    pub nameless_unleveled: WearSide,
}

#[derive(Debug, Serialize)]
pub struct WearLeveling {
    pub device_bytes: u64,
    pub in_band_tags: bool,
    pub endurance_erases: u32,
    pub fill_percent: u32,
    pub nameless_trigger_percent: u32,
    pub nameless_candidate_percent: u32,
    pub page_static_wl_threshold: u32,
    pub passes: u64,
    pub depth: usize,
    pub commit_every_writes: u64,
    pub rows: Vec<WearRow>,
}

impl WearSetup {
    /// Refuses shares outside (0, 100] and zero passes, endurance, depth
    /// or fill (before any part of the bench runs).
    pub fn check(&self) -> Result<(), BenchError> {
        let bad_share = |p: &f64| !(*p > 0.0 && *p <= 100.0);
        if self.hot_percents.is_empty()
            || self.hot_percents.iter().any(bad_share)
            || self.passes == 0
            || self.endurance_erases == 0
            || self.depth == 0
            || self.fill_percent == 0
            || self.fill_percent > 100
        {
            return Err(BenchError::Args(
                "--wear-hot-percents lists shares in (0, 100], --wear-fill-percent is \
                 1..=100, --wear-passes and --wear-endurance are at least 1"
                    .into(),
            ));
        }
        Ok(())
    }
}

pub fn run(w: &WearSetup, ftl: &FtlConfig) -> Result<WearLeveling, BenchError> {
    w.check()?;
    let policy = NamelessWear::paper(w.endurance_erases);
    let threshold = w
        .page_threshold_erases
        .unwrap_or(w.endurance_erases * policy.trigger_percent / 100);
    let cfg = sim_config(w.blocks_per_lun, w.in_band_tags);
    let g = cfg.geometry()?;
    let device_bytes =
        u64::from(g.zone_count) * g.zone_capacity_blocks * u64::from(g.block_size_bytes);
    let leveled = |nameless: bool, on: bool| FtlConfig {
        static_wl_threshold: if !nameless && on { threshold } else { 0 },
        nameless_wear: (nameless && on).then_some(policy),
        ..ftl.clone()
    };
    let mut rows = Vec::new();
    let mut commit_every = 0;
    for &pct in &w.hot_percents {
        let side = |nameless, on| run_side(w, &cfg, &leveled(nameless, on), pct, nameless);
        let page = side(false, true)?;
        let nameless = side(true, true)?;
        commit_every = page.commit_every;
        rows.push(WearRow {
            hot_percent: pct,
            hot_blocks: page.hot_blocks,
            logical_blocks: page.logical_blocks,
            filled_blocks: page.filled_blocks,
            writes: page.hot_blocks * w.passes,
            throughput_ratio: round(ratio(nameless.side.writes_per_s, page.side.writes_per_s), 4),
            page_mapped: page.side,
            nameless: nameless.side,
            page_mapped_unleveled: side(false, false)?.side,
            nameless_unleveled: side(true, false)?.side,
        });
    }
    Ok(WearLeveling {
        device_bytes,
        in_band_tags: w.in_band_tags,
        endurance_erases: w.endurance_erases,
        fill_percent: w.fill_percent,
        nameless_trigger_percent: policy.trigger_percent,
        nameless_candidate_percent: policy.candidate_percent,
        page_static_wl_threshold: threshold,
        passes: w.passes,
        depth: w.depth,
        commit_every_writes: commit_every,
        rows,
    })
}

struct SideRun {
    side: WearSide,
    hot_blocks: u64,
    logical_blocks: u64,
    filled_blocks: u64,
    commit_every: u64,
}

/// The volume filled, then `passes` × its first `pct` % overwritten at
/// random (one-block commands, `depth` in flight), measured in virtual
/// time from the end of the fill.
fn run_side(
    w: &WearSetup,
    cfg: &zftl_sim::SimConfig,
    ftl: &FtlConfig,
    pct: f64,
    nameless: bool,
) -> Result<SideRun, BenchError> {
    let mut side = Side::format(cfg, ftl, w.seed, w.depth, nameless)?;
    let logical = side.drv.logical_blocks();
    let filled = logical * u64::from(w.fill_percent) / 100;
    let hot = ((logical as f64 * pct / 100.0).round() as u64).clamp(1, filled.max(1));
    side.set_working_set(filled, hot, w.seed ^ pct.to_bits());
    let leveling = ftl.static_wl_threshold > 0 || ftl.nameless_wear.is_some();
    side.label = format!(
        "wear {pct}% {}{}",
        side.kind(),
        if leveling { "" } else { " (no leveling)" }
    );
    side.fill()?;
    let writes = hot * w.passes;
    let bar = progress(writes, &side.label);
    let (t0, s0) = (side.drv.backend().clock_ns(), side.drv.stats());
    side.overwrite(writes, &bar)?;
    bar.finish_and_clear();
    let (t1, s1) = (side.drv.backend().clock_ns(), side.drv.stats());
    let d = |f: fn(&FtlStats) -> u64| f(&s1) - f(&s0);
    let host = d(|s| s.host_write_blocks + s.nameless_write_blocks);
    let wear = d(|s| s.wl_move_blocks);
    Ok(SideRun {
        side: WearSide {
            leveling,
            writes_per_s: round(writes as f64 * 1e9 / (t1 - t0).max(1) as f64, 1),
            write_amplification: round(ratio(d(|s| s.media_write_blocks) as f64, host as f64), 4),
            wear_move_blocks: wear,
            gc_copy_blocks: d(|s| s.gc_copy_blocks) - wear,
            migrated_blocks: d(|s| s.nameless_migrated_blocks),
            meta_write_blocks: d(|s| s.meta_write_blocks),
            migration_note_bytes: d(|s| s.nameless_migration_note_bytes),
            remap_checkpoint_bytes: d(|s| s.nameless_remap_checkpoint_bytes),
            remap_peak_entries: s1.nameless_remap_peak_entries,
            remap_peak_bytes: s1.nameless_remap_peak_entries * REMAP_BYTES_PER_ENTRY,
            erase_count_min: s1.erase_count_min,
            erase_count_max: s1.erase_count_max,
            erase_count_mean: round(s1.erase_count_mean, 2),
        },
        hot_blocks: hot,
        logical_blocks: logical,
        filled_blocks: filled,
        commit_every: side.commit_every,
    })
}

impl WearSide {
    fn text(&self) -> String {
        format!(
            "writes/s {}, WA {}; moved for wear {}, GC copies {}; metadata blocks {} \
             (migration notes {} B, remap in checkpoints {} B); remap peak {} entries ({} B); \
             erases {}..{} mean {}",
            self.writes_per_s,
            self.write_amplification,
            self.wear_move_blocks,
            self.gc_copy_blocks,
            self.meta_write_blocks,
            self.migration_note_bytes,
            self.remap_checkpoint_bytes,
            self.remap_peak_entries,
            self.remap_peak_bytes,
            self.erase_count_min,
            self.erase_count_max,
            self.erase_count_mean
        )
    }
}

impl WearLeveling {
    pub(super) fn text(&self, t: &mut crate::report::Text) {
        t.section(&format!(
            "wear leveling (§6.6), nameless vs page-mapped ({} simulated, timing on, virtual time; \
             {} % of the volume filled, then a share of it overwritten {} times, 4 KiB at random, depth {}; \
             commit / flush every {} writes; endurance {} erases: nameless from {} % of it, \
             candidates below {} % of the mean remaining life; page-mapped static threshold {})",
            crate::report::human_bytes(self.device_bytes),
            self.fill_percent,
            self.passes,
            self.depth,
            self.commit_every_writes,
            self.endurance_erases,
            self.nameless_trigger_percent,
            self.nameless_candidate_percent,
            self.page_static_wl_threshold
        ));
        for r in &self.rows {
            let p = r.hot_percent;
            t.row(
                &format!("hot_{p}%"),
                format!(
                    "{} of {} blocks ({} filled), {} writes; throughput ratio {}",
                    r.hot_blocks, r.logical_blocks, r.filled_blocks, r.writes, r.throughput_ratio
                ),
            );
            t.row(&format!("hot_{p}%_page_mapped"), r.page_mapped.text());
            t.row(&format!("hot_{p}%_nameless"), r.nameless.text());
            t.row(
                &format!("hot_{p}%_page_mapped_unleveled"),
                r.page_mapped_unleveled.text(),
            );
            t.row(
                &format!("hot_{p}%_nameless_unleveled"),
                r.nameless_unleveled.text(),
            );
        }
    }
}
