//! Errors of the simulator's own API (creating, opening, syncing a device).
//! Command failures are `zftl_core::DeviceError`s in completions instead.

use std::io;
use std::path::PathBuf;

use zftl_core::GeometryError;

/// Why a simulated device could not be created, opened or synced.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid simulator config: {reason}")]
    InvalidConfig { reason: String },
    #[error("invalid geometry: {0}")]
    Geometry(#[from] GeometryError),
    #[error("image file {path} already exists")]
    ImageExists { path: PathBuf },
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not a zftl-sim image (bad magic)")]
    BadMagic { path: PathBuf },
    #[error(
        "image format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion { found: u32, supported: u32 },
    #[error("image header checksum mismatch: stored {expected:#010x}, computed {actual:#010x}")]
    HeaderChecksum { expected: u32, actual: u32 },
    #[error("image header field {field} has the impossible value {value}")]
    CorruptHeader { field: &'static str, value: u64 },
    #[error("image geometry differs: {field} is {image} in the image but {expected} was expected")]
    GeometryMismatch {
        field: &'static str,
        image: u64,
        expected: u64,
    },
    #[error(
        "image {path} is truncated: {actual_bytes} bytes where {expected_bytes} were expected"
    )]
    Truncated {
        path: PathBuf,
        expected_bytes: u64,
        actual_bytes: u64,
    },
    #[error("image table corrupt: {what} at index {index}")]
    CorruptTable { what: &'static str, index: u64 },
    #[error("the device failed and must be reopened from its image: {reason}")]
    DeviceFailed { reason: String },
}

impl SimError {
    pub(crate) fn io(op: &'static str, path: &std::path::Path, source: io::Error) -> Self {
        SimError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }
}
