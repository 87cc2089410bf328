//! What the commands print: serde structs for `--json`, and aligned
//! `key: value` text for people. Keys carry their unit (`_bytes`, `_ns`).

use serde::Serialize;
use zftl_core::{Geometry, ZoneState};
use zftl_sim::{SimConfig, SimStats};

/// Text output: titled sections of `key: value` rows, values aligned.
#[derive(Default)]
pub struct Text {
    header: Vec<String>,
    sections: Vec<(String, Vec<(String, String)>)>,
}

impl Text {
    /// A line printed before the sections.
    pub fn line(&mut self, line: impl Into<String>) {
        self.header.push(line.into());
    }

    pub fn section(&mut self, title: &str) {
        self.sections.push((title.to_string(), Vec::new()));
    }

    pub fn row(&mut self, key: &str, value: impl ToString) {
        if self.sections.is_empty() {
            self.section("");
        }
        let rows = &mut self.sections.last_mut().expect("a section").1;
        rows.push((key.to_string(), value.to_string()));
    }

    pub fn bytes(&mut self, key: &str, bytes: u64) {
        self.row(key, format!("{bytes} ({})", human_bytes(bytes)));
    }

    pub fn nanos(&mut self, key: &str, ns: u64) {
        self.row(key, format!("{ns} ({})", human_nanos(ns)));
    }

    /// A limit where 0 means none.
    pub fn limit(&mut self, key: &str, value: u32) {
        if value == 0 {
            self.row(key, "0 (unlimited)");
        } else {
            self.row(key, value);
        }
    }

    pub fn render(&self) -> String {
        let width = self
            .sections
            .iter()
            .flat_map(|(_, rows)| rows.iter().map(|(k, _)| k.len()))
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for line in &self.header {
            out.push_str(line);
            out.push('\n');
        }
        for (title, rows) in &self.sections {
            if !out.is_empty() {
                out.push('\n');
            }
            let indent = if title.is_empty() { "" } else { "  " };
            if !title.is_empty() {
                out.push_str(title);
                out.push_str(":\n");
            }
            for (key, value) in rows {
                let pad = width - key.len();
                out.push_str(&format!("{indent}{key}:{:pad$} {value}\n", ""));
            }
        }
        out
    }
}

/// `4294967296` -> `4.0 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `1_500_000` -> `1.500 ms`.
pub fn human_nanos(ns: u64) -> String {
    let ns_f = ns as f64;
    match ns {
        0..=999 => format!("{ns} ns"),
        1_000..=999_999 => format!("{:.3} us", ns_f / 1e3),
        1_000_000..=999_999_999 => format!("{:.3} ms", ns_f / 1e6),
        _ => format!("{:.3} s", ns_f / 1e9),
    }
}

/// The Backend geometry plus what follows from it.
#[derive(Serialize)]
pub struct GeometryReport {
    #[serde(flatten)]
    pub geometry: Geometry,
    pub capacity_bytes: u64,
}

/// How many zones are in each state.
#[derive(Default, Serialize)]
pub struct ZoneCounts {
    pub empty: u32,
    pub open: u32,
    pub closed: u32,
    pub full: u32,
    pub read_only: u32,
    pub offline: u32,
}

impl ZoneCounts {
    pub fn add(&mut self, state: ZoneState) {
        let slot = match state {
            ZoneState::Empty => &mut self.empty,
            ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen => &mut self.open,
            ZoneState::Closed => &mut self.closed,
            ZoneState::Full => &mut self.full,
            ZoneState::ReadOnly => &mut self.read_only,
            ZoneState::Offline => &mut self.offline,
        };
        *slot += 1;
    }

    /// The `zones` section of a text report.
    pub fn text(&self, t: &mut Text) {
        t.section("zones");
        t.row("zones_empty", self.empty);
        t.row("zones_open", self.open);
        t.row("zones_closed", self.closed);
        t.row("zones_full", self.full);
        t.row("zones_read_only", self.read_only);
        t.row("zones_offline", self.offline);
    }
}

/// Erase counts summarised.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WearSummary {
    pub erase_blocks: u64,
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_mean: f64,
    pub erase_count_stddev: f64,
    pub erases_total: u64,
    pub endurance_erases: u32,
    /// Erase blocks at or past their endurance.
    pub worn_out_blocks: u64,
    /// The most-worn block's erase count as a percentage of the endurance.
    pub life_used_max_percent: f64,
}

impl WearSummary {
    pub fn of(counts: &[u32], endurance_erases: u32) -> Self {
        let n = counts.len() as u64;
        let total: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        let mean = if n == 0 { 0.0 } else { total as f64 / n as f64 };
        let var = if n == 0 {
            0.0
        } else {
            counts
                .iter()
                .map(|&c| (f64::from(c) - mean).powi(2))
                .sum::<f64>()
                / n as f64
        };
        let max = counts.iter().copied().max().unwrap_or(0);
        WearSummary {
            erase_blocks: n,
            erase_count_min: counts.iter().copied().min().unwrap_or(0),
            erase_count_max: max,
            erase_count_mean: mean,
            erase_count_stddev: var.sqrt(),
            erases_total: total,
            endurance_erases,
            worn_out_blocks: counts.iter().filter(|&&c| c >= endurance_erases).count() as u64,
            life_used_max_percent: if endurance_erases == 0 {
                100.0
            } else {
                100.0 * f64::from(max) / f64::from(endurance_erases)
            },
        }
    }

    pub fn write(&self, text: &mut Text) {
        text.row("erase_blocks", self.erase_blocks);
        text.row("erase_count_min", self.erase_count_min);
        text.row("erase_count_max", self.erase_count_max);
        text.row("erase_count_mean", format!("{:.2}", self.erase_count_mean));
        text.row(
            "erase_count_stddev",
            format!("{:.2}", self.erase_count_stddev),
        );
        text.row("erases_total", self.erases_total);
        text.row("endurance_erases", self.endurance_erases);
        text.row("worn_out_blocks", self.worn_out_blocks);
        text.row(
            "life_used_max_percent",
            format!("{:.2}", self.life_used_max_percent),
        );
    }
}

/// `zftl` and `zftl sim info`.
#[derive(Serialize)]
pub struct InfoReport {
    /// "created" or "opened".
    pub action: &'static str,
    pub image: String,
    /// Apparent size of the image file.
    pub image_file_bytes: u64,
    /// Disk space the (sparse) image file really takes.
    pub image_allocated_bytes: u64,
    pub config: SimConfig,
    pub geometry: GeometryReport,
    pub zones: ZoneCounts,
    pub stats: SimStats,
    pub wear: WearSummary,
}

impl InfoReport {
    pub fn text(&self) -> Text {
        let mut t = Text::default();
        let verb = match self.action {
            "created" => "created new simulated device image at",
            _ => "opened simulated device image at",
        };
        t.line(format!("{verb} {}", self.image));
        t.section("image");
        t.row("path", &self.image);
        t.bytes("image_file_bytes", self.image_file_bytes);
        t.bytes("image_allocated_bytes", self.image_allocated_bytes);
        self.media(&mut t);
        self.geometry(&mut t);
        self.zones.text(&mut t);
        stats_text(&self.stats, &mut t);
        t.section("wear");
        self.wear.write(&mut t);
        t
    }

    fn media(&self, t: &mut Text) {
        let c = &self.config;
        t.section("media");
        t.row("channels", c.channels);
        t.row("luns_per_channel", c.luns_per_channel);
        t.row("blocks_per_lun", c.blocks_per_lun);
        t.row("pages_per_block", c.pages_per_block);
        t.row("page_size_bytes", c.page_size_bytes);
        t.row("oob_size_bytes", c.oob_size_bytes);
        t.row("program_unit_pages", c.program_unit_pages);
        t.row("zone_width_luns", c.zone_width_luns);
        t.row("endurance_erases", c.endurance_erases);
        t.row("factory_bad_block_per_mille", c.factory_bad_block_per_mille);
        t.row("fault_seed", c.faults.seed);
        let raw = c.page_count() * u64::from(c.page_size_bytes);
        t.bytes("raw_capacity_bytes", raw);
    }

    fn geometry(&self, t: &mut Text) {
        geometry_text(&self.geometry, t);
    }
}

/// The `geometry` section of `zftl sim info` and `zftl info`.
pub fn geometry_text(report: &GeometryReport, t: &mut Text) {
    {
        let g = &report.geometry;
        t.section("geometry");
        t.row("block_size_bytes", g.block_size_bytes);
        t.row("oob_size_bytes", g.oob_size_bytes);
        t.row("zone_count", g.zone_count);
        t.row("zone_size_blocks", g.zone_size_blocks);
        t.row("zone_capacity_blocks", g.zone_capacity_blocks);
        let zone_bytes = g.zone_capacity_blocks * u64::from(g.block_size_bytes);
        t.bytes("zone_capacity_bytes", zone_bytes);
        t.row("write_unit_blocks", g.write_unit_blocks);
        t.row("max_append_blocks", g.max_append_blocks);
        t.row("max_transfer_blocks", g.max_transfer_blocks);
        t.limit("max_open_zones", g.max_open_zones);
        t.limit("max_active_zones", g.max_active_zones);
        t.row("parallel_units", g.parallel_units);
        t.row("zone_groups", g.zone_groups);
        t.row("queue_depth", g.queue_depth);
        t.bytes("capacity_bytes", report.capacity_bytes);
    }
}

pub fn stats_text(s: &SimStats, t: &mut Text) {
    t.section("stats");
    t.row("host_reads", s.host_reads);
    t.row("host_writes", s.host_writes);
    t.row("host_appends", s.host_appends);
    t.row("host_resets", s.host_resets);
    t.row("host_finishes", s.host_finishes);
    t.row("host_flushes", s.host_flushes);
    t.bytes("host_bytes_read", s.host_bytes_read);
    t.bytes("host_bytes_written", s.host_bytes_written);
    t.row("media_page_reads", s.media_page_reads);
    t.row("media_page_programs", s.media_page_programs);
    t.row("media_block_erases", s.media_block_erases);
    t.row("program_failures", s.program_failures);
    t.row("erase_failures", s.erase_failures);
    t.row("uncorrectable_reads", s.uncorrectable_reads);
    t.row("power_cuts", s.power_cuts);
    t.row("controller_resets", s.controller_resets);
    t.row("bad_blocks", s.bad_blocks);
    t.nanos("clock_ns", s.clock_ns);
    t.nanos("busy_ns_total", s.busy_ns_total);
}

/// Wear of one LUN (`zftl sim erase-counts`).
#[derive(Serialize)]
pub struct LunWear {
    pub lun: u32,
    pub channel: u32,
    #[serde(flatten)]
    pub wear: WearSummary,
}

/// `zftl sim erase-counts`.
#[derive(Serialize)]
pub struct EraseCountsReport {
    pub image: String,
    pub wear: WearSummary,
    pub luns: Vec<LunWear>,
    /// Indexed by erase block `lun * blocks_per_lun + block`.
    pub erase_counts: Vec<u32>,
}

impl EraseCountsReport {
    pub fn new(image: String, cfg: &SimConfig, counts: Vec<u32>) -> Self {
        let per_lun = (cfg.blocks_per_lun as usize).max(1);
        let channels = cfg.channels.max(1);
        let luns = counts
            .chunks(per_lun)
            .zip(0u32..)
            .map(|(chunk, lun)| LunWear {
                lun,
                channel: lun % channels,
                wear: WearSummary::of(chunk, cfg.endurance_erases),
            })
            .collect();
        EraseCountsReport {
            image,
            wear: WearSummary::of(&counts, cfg.endurance_erases),
            luns,
            erase_counts: counts,
        }
    }

    pub fn render(&self) -> String {
        let mut t = Text::default();
        t.line(format!("erase counts of {}", self.image));
        t.section("device");
        self.wear.write(&mut t);
        let mut out = t.render();
        out.push_str("\nper_lun:\n");
        out.push_str("  lun  channel  erase_count_min  erase_count_max  erase_count_mean\n");
        for l in &self.luns {
            let w = &l.wear;
            out.push_str(&format!(
                "  {:>3}  {:>7}  {:>15}  {:>15}  {:>16.2}\n",
                l.lun, l.channel, w.erase_count_min, w.erase_count_max, w.erase_count_mean
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(4 << 30), "4.0 GiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn nanos_pick_a_unit() {
        assert_eq!(human_nanos(12), "12 ns");
        assert_eq!(human_nanos(25_000), "25.000 us");
        assert_eq!(human_nanos(1_500_000), "1.500 ms");
        assert_eq!(human_nanos(2_000_000_000), "2.000 s");
    }

    #[test]
    fn wear_summary() {
        let w = WearSummary::of(&[1, 3, 3, 1], 3);
        assert_eq!(
            (w.erase_count_min, w.erase_count_max, w.erases_total),
            (1, 3, 8)
        );
        assert_eq!(w.erase_count_mean, 2.0);
        assert_eq!(w.erase_count_stddev, 1.0);
        assert_eq!(w.worn_out_blocks, 2);
        assert_eq!(w.life_used_max_percent, 100.0);
        assert_eq!(WearSummary::of(&[], 10).erase_blocks, 0);
    }

    #[test]
    fn text_aligns_values() {
        let mut t = Text::default();
        t.section("s");
        t.row("a", 1);
        t.row("longer_key", 2);
        assert_eq!(t.render(), "s:\n  a:          1\n  longer_key: 2\n");
    }
}
