//! Choosing the I/O path for a device the user names: NVMe passthrough on
//! the generic char device when it works, the zoned block device otherwise.

use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use zftl_core::backend::{
    Backend, Command, Completion, DeviceError, Geometry, SubmitError, ZoneId, ZoneInfo,
};

use crate::blkdev::{nvme_generic_name, sysfs_dir};
use crate::{
    file_kind, open_error, OpenError, ZnsDevice, ZnsOptions, ZoneAction, ZonedBlockDevice,
};

/// Which kernel interface a [`Device`] drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoPath {
    /// io_uring NVMe passthrough on `/dev/ngXnY`.
    Passthrough,
    /// Positional I/O and zone ioctls on a zoned block device.
    Block,
}

impl IoPath {
    pub fn name(self) -> &'static str {
        match self {
            IoPath::Passthrough => "nvme-passthrough",
            IoPath::Block => "zoned-block-device",
        }
    }
}

/// A zoned device on whichever path [`open_device`] chose.
#[derive(Debug)]
pub enum Device {
    Passthrough(ZnsDevice),
    Block {
        dev: ZonedBlockDevice,
        /// Why passthrough was not used.
        why: String,
    },
}

/// Open `path` on the best path available:
///
/// * an NVMe generic char device (`/dev/ngXnY`): passthrough;
/// * an NVMe block device (`/dev/nvmeXnY`): passthrough on its `/dev/ngXnY`
///   if that opens and has the block device's size, else the block path;
/// * any other zoned block device: the block path.
///
/// A namespace in use by another zftl (on either node) is `Busy`, never a
/// reason to fall back.
pub fn open_device(path: impl AsRef<Path>, opts: &ZnsOptions) -> Result<Device, OpenError> {
    let path = path.as_ref();
    let meta = std::fs::metadata(path).map_err(|e| open_error(path, e))?;
    let ft = meta.file_type();
    if ft.is_char_device() {
        return ZnsDevice::open_with(path, opts).map(Device::Passthrough);
    }
    if !ft.is_block_device() {
        return Err(OpenError::NotADevice {
            path: path.to_path_buf(),
            kind: file_kind(&ft),
        });
    }
    let dir = sysfs_dir(&meta);
    let name = std::fs::canonicalize(&dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let why = match nvme_generic_name(&name) {
        None => format!("{name} is not an NVMe namespace"),
        Some(ng) => {
            let ng_path = PathBuf::from("/dev").join(&ng);
            match try_passthrough(&ng_path, &dir, opts) {
                Ok(dev) => return Ok(Device::Passthrough(dev)),
                Err(PassthroughUnavailable::Busy) => {
                    return Err(OpenError::Busy {
                        path: path.to_path_buf(),
                    })
                }
                Err(PassthroughUnavailable::Because(why)) => why,
            }
        }
    };
    ZonedBlockDevice::open_with(path, opts).map(|dev| Device::Block { dev, why })
}

enum PassthroughUnavailable {
    Busy,
    Because(String),
}

/// Passthrough on `ng_path` if it opens and matches the block device whose
/// sysfs directory is `dir` (same size in bytes).
fn try_passthrough(
    ng_path: &Path,
    dir: &Path,
    opts: &ZnsOptions,
) -> Result<ZnsDevice, PassthroughUnavailable> {
    if !ng_path.exists() {
        return Err(PassthroughUnavailable::Because(format!(
            "{} does not exist",
            ng_path.display()
        )));
    }
    let dev = match ZnsDevice::open_with(ng_path, opts) {
        Ok(dev) => dev,
        Err(OpenError::Busy { .. }) => return Err(PassthroughUnavailable::Busy),
        Err(e) => return Err(PassthroughUnavailable::Because(e.to_string())),
    };
    let bdev_bytes = std::fs::read_to_string(dir.join("size"))
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(|sectors| sectors * 512);
    let ns_bytes = dev.namespace_info().size_blocks * u64::from(dev.geometry().block_size_bytes);
    if bdev_bytes != Some(ns_bytes) {
        return Err(PassthroughUnavailable::Because(format!(
            "{} has {ns_bytes} bytes, the block device {:?}: not the same namespace",
            ng_path.display(),
            bdev_bytes
        )));
    }
    Ok(dev)
}

impl Device {
    pub fn io_path(&self) -> IoPath {
        match self {
            Device::Passthrough(_) => IoPath::Passthrough,
            Device::Block { .. } => IoPath::Block,
        }
    }

    /// How the writes sent so far reached the kernel.
    pub fn write_buffers(&self) -> crate::WriteBuffers {
        match self {
            Device::Passthrough(d) => d.write_buffers(),
            Device::Block { dev, .. } => dev.write_buffers(),
        }
    }

    /// The node actually driven (`/dev/ngXnY` for passthrough).
    pub fn path(&self) -> &Path {
        match self {
            Device::Passthrough(d) => d.path(),
            Device::Block { dev, .. } => dev.path(),
        }
    }

    pub fn zone_action_sync(
        &mut self,
        zone: Option<ZoneId>,
        action: ZoneAction,
    ) -> Result<(), DeviceError> {
        match self {
            Device::Passthrough(d) => d.zone_action_sync(zone, action),
            Device::Block { dev, .. } => dev.zone_action_sync(zone, action),
        }
    }

    pub fn reset_all(&mut self) -> Result<(), DeviceError> {
        match self {
            Device::Passthrough(d) => d.reset_all(),
            Device::Block { dev, .. } => dev.reset_all(),
        }
    }
}

/// Both paths are the same backend to the FTL.
macro_rules! each {
    ($self:ident, $d:ident => $e:expr) => {
        match $self {
            Device::Passthrough($d) => $e,
            Device::Block { dev: $d, .. } => $e,
        }
    };
}

impl Backend for Device {
    fn geometry(&self) -> &Geometry {
        each!(self, d => d.geometry())
    }
    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        each!(self, d => d.zone_info(zone))
    }
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        each!(self, d => d.submit(tag, command))
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        each!(self, d => d.reap(out, max))
    }
    fn wait(&mut self) -> Result<(), DeviceError> {
        each!(self, d => d.wait())
    }
    fn in_flight(&self) -> usize {
        each!(self, d => d.in_flight())
    }
    fn clock_ns(&self) -> u64 {
        each!(self, d => d.clock_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_is_not_a_device() {
        let path = std::env::temp_dir().join(format!("zftl-dev-test-{}", std::process::id()));
        std::fs::write(&path, b"x").unwrap();
        let e = open_device(&path, &ZnsOptions::default()).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(
            matches!(
                e,
                OpenError::NotADevice {
                    kind: "a regular file",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("/dev/ngXnY"), "{e}");
    }

    #[test]
    fn a_char_device_goes_to_passthrough_and_is_named() {
        let e = open_device("/dev/null", &ZnsOptions::default()).unwrap_err();
        assert!(matches!(e, OpenError::NotNvme { .. }), "{e}");
    }

    #[test]
    fn a_missing_path_is_not_found() {
        let e = open_device("/dev/nvme-does-not-exist", &ZnsOptions::default()).unwrap_err();
        assert!(matches!(e, OpenError::NotFound { .. }), "{e}");
    }
}
