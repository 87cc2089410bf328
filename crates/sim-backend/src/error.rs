//! Errors of the simulator's own API (creating, opening, syncing a device).
//! Command failures are `zftl_core::DeviceError`s in completions instead.

use std::io;
use std::path::PathBuf;

use zftl_core::GeometryError;

/// Why a simulated device could not be created, opened or synced. Field
/// names say what each value is; `path` is the image file.
#[derive(Debug, thiserror::Error)]
#[allow(missing_docs)] // the fields: named for what they hold
pub enum SimError {
    /// A config field is out of range or inconsistent.
    #[error("invalid simulator config: {reason}")]
    InvalidConfig { reason: String },
    /// The zone geometry the config implies is not usable.
    #[error("invalid geometry: {0}")]
    Geometry(#[from] GeometryError),
    /// `create_file` refuses to overwrite a file.
    #[error("image file {path} already exists")]
    ImageExists { path: PathBuf },
    /// Another open handle (this process or another) holds the image: two
    /// writers would interleave their writes and tables.
    #[error("image file {path} is in use by another process or handle")]
    ImageInUse { path: PathBuf },
    /// A file operation (`op`) on the image failed.
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file does not start with the image magic.
    #[error("{path} is not a zftl-sim image (bad magic)")]
    BadMagic { path: PathBuf },
    /// The image was written in a format version this build cannot read.
    #[error(
        "image format version {found} is not supported (this build reads version {supported})"
    )]
    UnsupportedVersion { found: u32, supported: u32 },
    /// The header's CRC does not match its bytes.
    #[error("image header checksum mismatch: stored {expected:#010x}, computed {actual:#010x}")]
    HeaderChecksum { expected: u32, actual: u32 },
    /// A header field holds a value no valid image has.
    #[error("image header field {field} has the impossible value {value}")]
    CorruptHeader { field: &'static str, value: u64 },
    /// The image's media shape is not the one asked for.
    #[error("image geometry differs: {field} is {image} in the image but {expected} was expected")]
    GeometryMismatch {
        field: &'static str,
        image: u64,
        expected: u64,
    },
    /// The image file is shorter than its layout.
    #[error(
        "image {path} is truncated: {actual_bytes} bytes where {expected_bytes} were expected"
    )]
    Truncated {
        path: PathBuf,
        expected_bytes: u64,
        actual_bytes: u64,
    },
    /// An erase-block or zone table entry is invalid.
    #[error("image table corrupt: {what} at index {index}")]
    CorruptTable { what: &'static str, index: u64 },
    /// Writing the image back failed; the device is unusable until it is
    /// reopened from its image.
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
