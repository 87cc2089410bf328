//! Opening and creating simulated device images, and reading them out.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use zftl_core::Backend;
use zftl_sim::{RuntimeOptions, SimConfig, SimDevice, SimError};

use crate::error::{sim_reason, CliError};
use crate::report::{GeometryReport, InfoReport, WearSummary, ZoneCounts};

/// Whether a command made the image or found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Created,
    Opened,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Created => "created",
            Action::Opened => "opened",
        }
    }
}

pub fn open(path: &Path) -> Result<SimDevice, CliError> {
    SimDevice::open_file(path, RuntimeOptions::default()).map_err(|e| CliError::Open {
        path: path.to_path_buf(),
        reason: sim_reason(&e),
    })
}

/// Creates the image and makes its header durable.
pub fn create(path: &Path, cfg: SimConfig) -> Result<SimDevice, CliError> {
    let fail = |e: SimError| CliError::Create {
        path: path.to_path_buf(),
        reason: sim_reason(&e),
    };
    let mut dev = SimDevice::create_file(path, cfg).map_err(fail)?;
    dev.sync().map_err(fail)?;
    Ok(dev)
}

/// A simulated device for `size_mib` MiB of logical space: the default
/// shape (16 LUNs, 4 MiB zones) with timing off, no wear-out, and enough
/// erase blocks for about 50 % over-provisioning (format's default logical
/// size takes the data capacity less the GC reserve and the open zones).
pub fn memory_config(size_mib: u64) -> Result<SimConfig, CliError> {
    const MIB: u64 = 1 << 20;
    let base = SimConfig::default();
    let eb_mib = u64::from(base.pages_per_block) * u64::from(base.page_size_bytes) / MIB;
    let per_lun_mib = (u64::from(base.lun_count()) * eb_mib).max(1);
    let too_large = || CliError::InvalidArgument(format!("{size_mib} MiB is too large"));
    let blocks = size_mib
        .checked_mul(3)
        .ok_or_else(too_large)?
        .div_ceil(2)
        .div_ceil(per_lun_mib)
        .max(64);
    let blocks_per_lun = u32::try_from(blocks).map_err(|_| too_large())?;
    let cfg = SimConfig {
        blocks_per_lun,
        timing: None,
        endurance_erases: u32::MAX,
        ..base
    };
    cfg.geometry()
        .map_err(|e| CliError::InvalidArgument(format!("{size_mib} MiB: {}", sim_reason(&e))))?;
    Ok(cfg)
}

/// The main job's device: open the image, or create a default one (and its
/// directory) if there is no file at `path`.
pub fn open_or_create(path: &Path) -> Result<(SimDevice, Action), CliError> {
    let exists = path.try_exists().map_err(|e| CliError::Open {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    if exists {
        return Ok((open(path)?, Action::Opened));
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| CliError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
    }
    match SimDevice::create_file(path, SimConfig::default()) {
        Ok(mut dev) => {
            dev.sync().map_err(|e| CliError::Create {
                path: path.to_path_buf(),
                reason: sim_reason(&e),
            })?;
            Ok((dev, Action::Created))
        }
        // Another process created it between our check and our create.
        Err(SimError::ImageExists { .. }) => Ok((open(path)?, Action::Opened)),
        Err(e) => Err(CliError::Create {
            path: path.to_path_buf(),
            reason: sim_reason(&e),
        }),
    }
}

/// Everything `zftl sim info` prints.
pub fn info(path: &Path, dev: &mut SimDevice, action: Action) -> Result<InfoReport, CliError> {
    let geometry = dev.geometry().clone();
    let mut zones = ZoneCounts::default();
    for zone in 0..geometry.zone_count {
        let info = dev.zone_info(zone).map_err(|source| CliError::Device {
            path: path.to_path_buf(),
            source,
        })?;
        zones.add(info.state);
    }
    let config = dev.config().clone();
    let wear = WearSummary::of(&dev.erase_counts(), config.endurance_erases);
    let (image_file_bytes, image_allocated_bytes) = std::fs::metadata(path)
        .map(|m| (m.len(), m.blocks() * 512))
        .unwrap_or((0, 0));
    Ok(InfoReport {
        action: action.as_str(),
        image: path.display().to_string(),
        image_file_bytes,
        image_allocated_bytes,
        config,
        geometry: GeometryReport {
            capacity_bytes: geometry.capacity_bytes(),
            geometry,
        },
        zones,
        stats: dev.stats(),
        wear,
    })
}
