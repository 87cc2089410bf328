//! Counters the simulator keeps, and the snapshot it reports.

use serde::Serialize;

/// A snapshot of what the device has done. Command counts include commands
/// that failed; byte counts only successful transfers.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SimStats {
    /// Read commands.
    pub host_reads: u64,
    /// Write commands.
    pub host_writes: u64,
    /// Zone append commands.
    pub host_appends: u64,
    /// Zone reset commands.
    pub host_resets: u64,
    /// Zone finish commands.
    pub host_finishes: u64,
    /// Flush commands.
    pub host_flushes: u64,
    /// NAND pages read.
    pub media_page_reads: u64,
    /// NAND pages programmed.
    pub media_page_programs: u64,
    /// NAND erase blocks erased.
    pub media_block_erases: u64,
    /// Bytes returned by successful reads.
    pub host_bytes_read: u64,
    /// Bytes stored by successful writes and appends.
    pub host_bytes_written: u64,
    /// Programs that failed (seeded faults, worn-out blocks).
    pub program_failures: u64,
    /// Erases that failed.
    pub erase_failures: u64,
    /// Reads that failed as uncorrectable.
    pub uncorrectable_reads: u64,
    /// Power cuts, injected or by `power_cut`.
    pub power_cuts: u64,
    /// Commands in flight (submitted, not yet executed) at power cuts:
    /// each landed, tore or was lost.
    pub commands_cut: u64,
    /// Controller resets injected.
    pub controller_resets: u64,
    /// Erase blocks that are bad now (factory and grown).
    pub bad_blocks: u64,
    /// Lowest erase count of an erase block.
    pub erase_count_min: u32,
    /// Highest erase count of an erase block.
    pub erase_count_max: u32,
    /// Mean erase count of the erase blocks.
    pub erase_count_mean: f64,
    /// The device clock (simulated time), in nanoseconds.
    pub clock_ns: u64,
    /// Sum over LUNs of time spent on NAND operations.
    pub busy_ns_total: u64,
    /// Page reads run ahead of an operation queued or suspended before them:
    /// a program, an erase or another command's later page read
    /// (`NandScheduling::ReadPriority`, `Suspend`).
    pub reads_passed: u64,
    /// Programs and erases suspended for a read (`NandScheduling::Suspend`).
    pub suspensions: u64,
    /// Host page reads (`ReadPriority::Host`) that went ahead of a
    /// background read queued on their LUN before them
    /// (`NandScheduling::ReadPriority`, `Suspend`).
    pub host_reads_first: u64,
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
