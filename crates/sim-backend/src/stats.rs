//! Counters the simulator keeps, and the snapshot it reports.

use serde::Serialize;

/// A snapshot of what the device has done. Command counts include commands
/// that failed; byte counts only successful transfers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SimStats {
    pub host_reads: u64,
    pub host_writes: u64,
    pub host_appends: u64,
    pub host_resets: u64,
    pub host_finishes: u64,
    pub host_flushes: u64,
    pub media_page_reads: u64,
    pub media_page_programs: u64,
    pub media_block_erases: u64,
    pub host_bytes_read: u64,
    pub host_bytes_written: u64,
    pub program_failures: u64,
    pub erase_failures: u64,
    pub uncorrectable_reads: u64,
    pub power_cuts: u64,
    /// Commands in flight (submitted, not yet executed) at power cuts:
    /// each landed, tore or was lost.
    pub commands_cut: u64,
    pub controller_resets: u64,
    pub bad_blocks: u64,
    pub erase_count_min: u32,
    pub erase_count_max: u32,
    pub erase_count_mean: f64,
    pub clock_ns: u64,
    /// Sum over LUNs of time spent on NAND operations.
    pub busy_ns_total: u64,
}

impl SimStats {
    /// Fills the erase-count summary from per-block counts.
    pub(crate) fn set_erase_counts(&mut self, counts: &[u32]) {
        self.erase_count_min = counts.iter().copied().min().unwrap_or(0);
        self.erase_count_max = counts.iter().copied().max().unwrap_or(0);
        let sum: u64 = counts.iter().map(|&c| u64::from(c)).sum();
        self.erase_count_mean = if counts.is_empty() {
            0.0
        } else {
            sum as f64 / counts.len() as f64
        };
    }
}
