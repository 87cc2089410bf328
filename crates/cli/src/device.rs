//! NVMe ZNS drives: `zftl info DEVICE` and the `--device` forms of
//! `format`, `stats`, `check` and `serve`. The FTL code paths are the ones
//! the simulator uses (generic over the `Backend`), with a
//! `zftl_zns::ZnsDevice` in place of a `SimDevice`. Linux only: elsewhere
//! every function fails with one line saying so.

use std::path::Path;

use serde::Serialize;

use crate::args::FormatArgs;
use crate::error::CliError;
use crate::report::{geometry_text, GeometryReport, Text, ZoneCounts};
use crate::volume::{CheckOutput, FormatReport, StatsReport};

/// What `zftl info DEVICE` prints.
#[derive(Serialize)]
pub struct ZnsInfoReport {
    pub device: String,
    pub nsid: u32,
    pub namespace_blocks: u64,
    pub namespace_bytes: u64,
    /// Index of the LBA format in use.
    pub lba_format: u8,
    /// Per-block metadata bytes of the LBA format (the OOB area; 0 = none).
    pub metadata_bytes_per_block: u32,
    /// Maximum data transfer size of the controller (0 = no limit).
    pub mdts_bytes: u64,
    /// Zone append size limit of the controller (0 = MDTS).
    pub zasl_bytes: u64,
    /// Smallest and largest zone capacity over the zones that are not offline.
    pub zone_capacity_min_blocks: u64,
    pub zone_capacity_max_blocks: u64,
    pub geometry: GeometryReport,
    pub zones: ZoneCounts,
    /// What the device holds: a zftl FTL, or null.
    pub ftl: Option<String>,
}

impl ZnsInfoReport {
    pub fn text(&self) -> Text {
        let mut t = Text::default();
        t.line(format!("NVMe ZNS namespace {}", self.device));
        t.section("namespace");
        t.row("device", &self.device);
        t.row("nsid", self.nsid);
        t.row("namespace_blocks", self.namespace_blocks);
        t.bytes("namespace_bytes", self.namespace_bytes);
        t.row("lba_format", self.lba_format);
        t.row("metadata_bytes_per_block", self.metadata_bytes_per_block);
        let limit = |v: u64| {
            if v == 0 {
                "0 (none)".to_string()
            } else {
                format!("{v} ({})", crate::report::human_bytes(v))
            }
        };
        t.row("mdts_bytes", limit(self.mdts_bytes));
        t.row("zasl_bytes", limit(self.zasl_bytes));
        t.row("zone_capacity_min_blocks", self.zone_capacity_min_blocks);
        t.row("zone_capacity_max_blocks", self.zone_capacity_max_blocks);
        geometry_text(&self.geometry, &mut t);
        t.section("zones");
        let z = &self.zones;
        t.row("zones_empty", z.empty);
        t.row("zones_open", z.open);
        t.row("zones_closed", z.closed);
        t.row("zones_full", z.full);
        t.row("zones_read_only", z.read_only);
        t.row("zones_offline", z.offline);
        t.section("ftl");
        t.row("holds", self.ftl.as_deref().unwrap_or("no zftl FTL"));
        t
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use zftl_core::Backend;
    use zftl_zns::ZnsDevice;

    use crate::volume;

    /// How long a busy device is retried: a process that just exited may
    /// still hold it while the kernel tears its io_uring down
    /// (asynchronously, a few milliseconds), and `serve` restarted right
    /// after `serve` should not fail on that.
    const BUSY_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

    /// Opens the device; every failure is one line naming the path.
    pub fn open(path: &Path) -> Result<ZnsDevice, CliError> {
        let t0 = std::time::Instant::now();
        loop {
            match ZnsDevice::open(path) {
                Ok(dev) => return Ok(dev),
                Err(zftl_zns::OpenError::Busy { .. }) if t0.elapsed() < BUSY_GRACE => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(CliError::DeviceOpen(e.to_string())),
            }
        }
    }

    pub fn info(path: &Path) -> Result<ZnsInfoReport, CliError> {
        let mut dev = open(path)?;
        let geometry = dev.geometry().clone();
        let mut zones = ZoneCounts::default();
        for zone in 0..geometry.zone_count {
            let info = dev.zone_info(zone).map_err(|source| {
                CliError::Device {
                    path: path.to_path_buf(),
                    source,
                }
                .on_device()
            })?;
            zones.add(info.state);
        }
        let ns = dev.namespace_info().clone();
        let ftl = volume::existing_ftl(&mut dev);
        Ok(ZnsInfoReport {
            device: path.display().to_string(),
            nsid: ns.nsid,
            namespace_blocks: ns.size_blocks,
            namespace_bytes: ns.size_blocks * u64::from(geometry.block_size_bytes),
            lba_format: ns.lba_format,
            metadata_bytes_per_block: geometry.oob_size_bytes,
            mdts_bytes: ns.mdts_bytes,
            zasl_bytes: ns.zasl_bytes,
            zone_capacity_min_blocks: ns.zone_capacity_range.0,
            zone_capacity_max_blocks: ns.zone_capacity_range.1,
            geometry: GeometryReport {
                capacity_bytes: geometry.capacity_bytes(),
                geometry,
            },
            zones,
            ftl,
        })
    }

    pub fn format(args: &FormatArgs, path: &Path) -> Result<FormatReport, CliError> {
        let dev = open(path)?;
        volume::format_on(args, path, dev, "device")
            .map(|(report, _)| report)
            .map_err(CliError::on_device)
    }

    pub fn stats(path: &Path) -> Result<StatsReport, CliError> {
        let dev = open(path)?;
        volume::stats_on(path, dev)
            .map(|(report, _)| report)
            .map_err(CliError::on_device)
    }

    pub fn check(path: &Path) -> Result<(std::path::PathBuf, CheckOutput), CliError> {
        let mut dev = open(path)?;
        volume::check_on(path.to_path_buf(), &mut dev).map_err(CliError::on_device)
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use super::*;

    fn unsupported(path: &Path) -> CliError {
        CliError::DeviceOpen(format!(
            "{}: NVMe ZNS devices are supported on Linux only",
            path.display()
        ))
    }

    pub fn info(path: &Path) -> Result<ZnsInfoReport, CliError> {
        Err(unsupported(path))
    }

    pub fn format(_args: &FormatArgs, path: &Path) -> Result<FormatReport, CliError> {
        Err(unsupported(path))
    }

    pub fn stats(path: &Path) -> Result<StatsReport, CliError> {
        Err(unsupported(path))
    }

    pub fn check(path: &Path) -> Result<(std::path::PathBuf, CheckOutput), CliError> {
        Err(unsupported(path))
    }
}

pub use imp::*;

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    fn open_err(path: &Path) -> String {
        match open(path) {
            Ok(_) => panic!("{} opened as a ZNS device", path.display()),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_missing_path_is_one_clear_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ng9n9");
        let msg = open_err(&path);
        assert_eq!(
            msg,
            format!("cannot open ZNS device {}: no such device", path.display())
        );
        assert!(!msg.contains('\n'));
        assert!(info(&path).is_err());
        assert!(stats(&path).is_err());
        assert!(check(&path).is_err());
    }

    #[test]
    fn a_regular_file_or_directory_is_refused_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain.img");
        std::fs::write(&file, [0u8; 4096]).unwrap();
        let msg = open_err(&file);
        assert!(
            msg.starts_with(&format!(
                "cannot open ZNS device {}: not a character device (a regular file)",
                file.display()
            )),
            "{msg}"
        );
        assert!(msg.contains("/dev/ngXnY"), "{msg}");
        assert!(!msg.contains('\n'));
        // A directory cannot be opened read-write at all.
        let msg = open_err(dir.path());
        assert!(msg.starts_with("cannot open ZNS device "), "{msg}");
        assert!(!msg.contains('\n'));
    }

    #[test]
    fn a_char_device_that_is_not_nvme_is_refused() {
        // /dev/null: a character device, but not an NVMe namespace.
        let msg = open_err(Path::new("/dev/null"));
        assert!(
            msg.starts_with("cannot open ZNS device /dev/null: not an NVMe device"),
            "{msg}"
        );
    }
}
