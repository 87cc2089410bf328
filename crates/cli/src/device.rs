//! Zoned drives: `zftl info DEVICE` and the `--device` forms of `format`,
//! `stats`, `check` and `serve`. The FTL code paths are the ones the
//! simulator uses (generic over the `Backend`), with a `zftl_zns::Device`
//! in place of a `SimDevice`: NVMe passthrough on `/dev/ngXnY` when it
//! works, else the zoned block device path (`/dev/nvmeXnY`, other zoned
//! block devices). Linux only: elsewhere every function fails with one
//! line saying so.

use std::path::Path;

use serde::Serialize;

use crate::args::FormatArgs;
use crate::error::CliError;
use crate::report::{geometry_text, GeometryReport, Text, ZoneCounts};
use crate::volume::{CheckOutput, FormatReport, StatsReport};
use zftl_core::tag::DataCrcImpl;
use zftl_core::FtlConfig;

/// What `zftl info DEVICE` prints.
#[derive(Serialize)]
pub struct ZnsInfoReport {
    pub device: String,
    /// `nvme-passthrough` or `zoned-block-device`.
    pub io_path: &'static str,
    /// The node driven (the `/dev/ngXnY` of a `/dev/nvmeXnY` on passthrough).
    pub io_device: String,
    /// Why the block path was used (null on passthrough).
    pub io_path_reason: Option<String>,
    /// NVMe namespace id (null on the block path).
    pub nsid: Option<u32>,
    pub namespace_blocks: u64,
    pub namespace_bytes: u64,
    /// Index of the LBA format in use (null on the block path).
    pub lba_format: Option<u8>,
    /// Per-block metadata bytes of the LBA format (the OOB area; 0 = none).
    pub metadata_bytes_per_block: u32,
    /// Maximum data transfer size of the controller (0 = no limit; null on
    /// the block path).
    pub mdts_bytes: Option<u64>,
    /// Zone append size limit of the controller (0 = MDTS; null on the
    /// block path, which emulates appends).
    pub zasl_bytes: Option<u64>,
    /// `queue/zoned` of the block device (null on passthrough).
    pub zoned_model: Option<String>,
    /// The NVMe controller's model number and firmware revision (null on
    /// the block path).
    pub controller_model: Option<String>,
    pub controller_firmware: Option<String>,
    /// Workarounds in force for known bugs of the controller.
    pub quirks: Vec<String>,
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
        t.line(format!("zoned device {} ({})", self.device, self.io_path));
        t.section("namespace");
        t.row("device", &self.device);
        t.row("io_path", self.io_path);
        t.row("io_device", &self.io_device);
        if let Some(why) = &self.io_path_reason {
            t.row("io_path_reason", why);
        }
        if let Some(nsid) = self.nsid {
            t.row("nsid", nsid);
        }
        if let Some(model) = &self.zoned_model {
            t.row("zoned_model", model);
        }
        if let Some(model) = &self.controller_model {
            t.row("controller_model", model);
        }
        if let Some(firmware) = &self.controller_firmware {
            t.row("controller_firmware", firmware);
        }
        for quirk in &self.quirks {
            t.row("quirk", quirk);
        }
        t.row("namespace_blocks", self.namespace_blocks);
        t.bytes("namespace_bytes", self.namespace_bytes);
        if let Some(f) = self.lba_format {
            t.row("lba_format", f);
        }
        t.row("metadata_bytes_per_block", self.metadata_bytes_per_block);
        let limit = |v: u64| {
            if v == 0 {
                "0 (none)".to_string()
            } else {
                format!("{v} ({})", crate::report::human_bytes(v))
            }
        };
        if let Some(v) = self.mdts_bytes {
            t.row("mdts_bytes", limit(v));
        }
        if let Some(v) = self.zasl_bytes {
            t.row("zasl_bytes", limit(v));
        }
        t.row("zone_capacity_min_blocks", self.zone_capacity_min_blocks);
        t.row("zone_capacity_max_blocks", self.zone_capacity_max_blocks);
        geometry_text(&self.geometry, &mut t);
        self.zones.text(&mut t);
        t.section("ftl");
        t.row("holds", self.ftl.as_deref().unwrap_or("no zftl FTL"));
        t
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use zftl_core::Backend;
    use zftl_zns::{Device, ZnsOptions};

    use crate::volume;

    /// How long a busy device is retried: a process that just exited may
    /// still hold it while the kernel tears its io_uring down
    /// (asynchronously, a few milliseconds), and `serve` restarted right
    /// after `serve` should not fail on that.
    const BUSY_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

    /// Opens the device; every failure is one line naming the path.
    pub fn open(path: &Path) -> Result<Device, CliError> {
        let t0 = std::time::Instant::now();
        loop {
            match zftl_zns::open_device(path, &ZnsOptions::default()) {
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
        // `zftl info` times no CRC implementation: the CPU's pick.
        let ftl = volume::existing_ftl(&mut dev, DataCrcImpl::selected());
        let io_device = dev.path().display().to_string();
        let mut report = ZnsInfoReport {
            device: path.display().to_string(),
            io_path: dev.io_path().name(),
            io_device,
            io_path_reason: None,
            nsid: None,
            namespace_blocks: 0,
            namespace_bytes: 0,
            lba_format: None,
            metadata_bytes_per_block: geometry.oob_size_bytes,
            mdts_bytes: None,
            zasl_bytes: None,
            zoned_model: None,
            controller_model: None,
            controller_firmware: None,
            quirks: Vec::new(),
            zone_capacity_min_blocks: 0,
            zone_capacity_max_blocks: 0,
            geometry: GeometryReport {
                capacity_bytes: geometry.capacity_bytes(),
                geometry: geometry.clone(),
            },
            zones,
            ftl,
        };
        match &dev {
            Device::Passthrough(d) => {
                let ns = d.namespace_info();
                report.nsid = Some(ns.nsid);
                report.namespace_blocks = ns.size_blocks;
                report.lba_format = Some(ns.lba_format);
                report.mdts_bytes = Some(ns.mdts_bytes);
                report.zasl_bytes = Some(ns.zasl_bytes);
                report.controller_model = Some(ns.model.clone());
                report.controller_firmware = Some(ns.firmware.clone());
                report.quirks = ns.quirks.iter().map(|q| q.to_string()).collect();
                report.zone_capacity_min_blocks = ns.zone_capacity_range.0;
                report.zone_capacity_max_blocks = ns.zone_capacity_range.1;
            }
            Device::Block { dev: d, why } => {
                let b = d.block_info();
                report.io_path_reason = Some(why.clone());
                report.zoned_model = Some(b.zoned_model.clone());
                report.namespace_blocks = b.size_blocks;
                report.zone_capacity_min_blocks = b.zone_capacity_range.0;
                report.zone_capacity_max_blocks = b.zone_capacity_range.1;
            }
        }
        report.namespace_bytes = report.namespace_blocks * u64::from(geometry.block_size_bytes);
        Ok(report)
    }

    pub fn format(
        args: &FormatArgs,
        path: &Path,
        ftl: &FtlConfig,
    ) -> Result<FormatReport, CliError> {
        let dev = open(path)?;
        volume::format_on(args, path, dev, "device", ftl)
            .map(|(report, _)| report)
            .map_err(CliError::on_device)
    }

    pub fn stats(path: &Path, ftl: &FtlConfig) -> Result<StatsReport, CliError> {
        let dev = open(path)?;
        volume::stats_on(path, dev, ftl)
            .map(|(report, _)| report)
            .map_err(CliError::on_device)
    }

    pub fn check(
        path: &Path,
        crc: DataCrcImpl,
    ) -> Result<(std::path::PathBuf, CheckOutput), CliError> {
        let mut dev = open(path)?;
        volume::check_on(path.to_path_buf(), &mut dev, crc).map_err(CliError::on_device)
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

    pub fn format(
        _args: &FormatArgs,
        path: &Path,
        _ftl: &FtlConfig,
    ) -> Result<FormatReport, CliError> {
        Err(unsupported(path))
    }

    pub fn stats(path: &Path, _ftl: &FtlConfig) -> Result<StatsReport, CliError> {
        Err(unsupported(path))
    }

    pub fn check(
        path: &Path,
        _crc: DataCrcImpl,
    ) -> Result<(std::path::PathBuf, CheckOutput), CliError> {
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
        assert!(stats(&path, &FtlConfig::default()).is_err());
        assert!(check(&path, DataCrcImpl::selected()).is_err());
    }

    #[test]
    fn a_regular_file_or_directory_is_refused_by_kind() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain.img");
        std::fs::write(&file, [0u8; 4096]).unwrap();
        let msg = open_err(&file);
        assert!(
            msg.starts_with(&format!(
                "cannot open ZNS device {}: not a character device (a regular file) nor a block device",
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
