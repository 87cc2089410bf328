//! The CLI's errors: one line each, naming the file involved.

use std::io;
use std::path::PathBuf;

use zftl_core::DeviceError;
use zftl_sim::SimError;

/// Everything that can make a command fail. `main` prints it as
/// `zftl: error: <message>` and exits non-zero.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("cannot open image {}: {reason}", path.display())]
    Open { path: PathBuf, reason: String },
    #[error("cannot create image {}: {reason}", path.display())]
    Create { path: PathBuf, reason: String },
    #[error("cannot read config {}: {reason}", path.display())]
    Config { path: PathBuf, reason: String },
    #[error("invalid device configuration: {reason}")]
    InvalidConfig { reason: String },
    #[error("cannot choose a default image path: {0}")]
    NoDefaultPath(&'static str),
    #[error("cannot create directory {}: {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("image {}: {source}", path.display())]
    Device {
        path: PathBuf,
        #[source]
        source: DeviceError,
    },
    #[error("image {}: {reason}", path.display())]
    Ftl { path: PathBuf, reason: String },
    #[error("image {} already holds {what}; pass --force to format it anyway (this destroys its data)", path.display())]
    AlreadyFormatted { path: PathBuf, what: String },
    #[error("image {}: check found {problems} problem(s): the volume is damaged", path.display())]
    Damaged { path: PathBuf, problems: u64 },
    /// A ZNS device that cannot be used; the message names the path.
    #[error("cannot open ZNS device {0}")]
    DeviceOpen(String),
    #[error("device {}: {reason}", path.display())]
    DeviceFtl { path: PathBuf, reason: String },
    #[error("device {} already holds {what}; pass --force to format it anyway (this destroys its data)", path.display())]
    DeviceAlreadyFormatted { path: PathBuf, what: String },
    #[error("device {}: check found {problems} problem(s): the volume is damaged", path.display())]
    DeviceDamaged { path: PathBuf, problems: u64 },
    #[error("{0}")]
    InvalidArgument(String),
    /// A bad command line found after clap parsed it; exits 2 as clap's do.
    #[error("{0}")]
    Usage(String),
    /// A control socket client's failure, or the server's error reply.
    #[error("server {}: {reason}", path.display())]
    Server { path: PathBuf, reason: String },
    #[error("cannot write output: {0}")]
    Output(#[source] io::Error),
}

/// What went wrong with an image, without repeating its path (the caller's
/// message already names it).
pub fn sim_reason(err: &SimError) -> String {
    match err {
        SimError::BadMagic { .. } => "bad magic: not a zftl simulator image".to_string(),
        SimError::ImageExists { .. } => {
            "the file already exists; remove it or choose another path".to_string()
        }
        SimError::ImageInUse { .. } => {
            "in use: another process (or handle) has it open; stop it first".to_string()
        }
        SimError::Io { op, source, .. } => format!("{op}: {source}"),
        SimError::Truncated {
            expected_bytes,
            actual_bytes,
            ..
        } => {
            format!("truncated: {actual_bytes} bytes where {expected_bytes} were expected")
        }
        other => other.to_string(),
    }
}

impl CliError {
    /// The same error worded for a device instead of an image.
    pub fn on_device(self) -> CliError {
        match self {
            CliError::Ftl { path, reason } => CliError::DeviceFtl { path, reason },
            CliError::AlreadyFormatted { path, what } => {
                CliError::DeviceAlreadyFormatted { path, what }
            }
            CliError::Damaged { path, problems } => CliError::DeviceDamaged { path, problems },
            CliError::Device { path, source } => CliError::DeviceFtl {
                path,
                reason: source.to_string(),
            },
            other => other,
        }
    }
}
