//! `zftl serve`: export the FTL on a simulated device image over NBD.
//!
//! Steps: check the listen address (without TLS, loopback only unless
//! `--insecure-no-tls`), load the TLS files if any (then every client must
//! use NBD_OPT_STARTTLS), open or create the image, mount the FTL (format it
//! first if the image holds none), serve until SIGINT or SIGTERM, then drain
//! the connections, flush and checkpoint (a clean unmount) and sync the image.
//!
//! On a simulated image the FTL runs inline on the connections' runtime
//! thread ([`InlineHandle`]: the simulator never blocks, so a request costs
//! no thread hop; the runtime then has one thread, see `runtime_for`); on a
//! ZNS drive it runs on a driver thread ([`Handle`]), which waits on the
//! device's io_uring.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{info, warn};
use zftl::data_crc;
use zftl::handle::{AsyncHandle, Handle, InlineHandle};
use zftl_core::history::{Snapshot, SnapshotError};
use zftl_core::layout::SUPER_ZONES;
use zftl_core::superblock::Superblock;
use zftl_core::{
    Backend, BackendExt, Driver, FormatOptions, FtlConfig, FtlStats, IoError, MountError,
    ProtectWindow, ReplyData, Request,
};
use zftl_nbd::{
    check_listen_address, serve_metrics, tls_server_config, Export, ExportTable, MetricKind,
    Server, ServerConfig, TextWriter, TlsFiles, Volume,
};
use zftl_sim::SimDevice;

use crate::args::{ImageOpt, Protect, ServeArgs};
use crate::error::CliError;
use crate::{image, volume};

/// Where the FTL's loop runs (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Drive {
    /// On a driver thread: for devices that block in `wait`.
    Thread,
    /// On the calling runtime thread: for the simulator.
    Inline,
}

/// The FTL, driven one way or the other.
enum Core<B: Backend> {
    Thread(AsyncHandle<B>),
    Inline(InlineHandle<B>),
}

impl<B: Backend> Clone for Core<B> {
    fn clone(&self) -> Self {
        match self {
            Core::Thread(h) => Core::Thread(h.clone()),
            Core::Inline(h) => Core::Inline(h.clone()),
        }
    }
}

impl<B: Backend + Send + 'static> Core<B> {
    async fn call(&self, request: Request) -> Result<ReplyData, IoError> {
        match self {
            Core::Thread(h) => h.call(request).await,
            Core::Inline(h) => h.call(request),
        }
    }

    async fn stats(&self) -> Result<FtlStats, IoError> {
        match self {
            Core::Thread(h) => h.stats().await,
            Core::Inline(h) => h.stats(),
        }
    }

    async fn snapshots(&self) -> Result<Vec<Snapshot>, IoError> {
        match self {
            Core::Thread(h) => h.snapshots().await,
            Core::Inline(h) => h.snapshots(),
        }
    }

    async fn forks(&self) -> Result<Vec<zftl_core::Fork>, IoError> {
        match self {
            Core::Thread(h) => h.forks().await,
            Core::Inline(h) => h.forks(),
        }
    }

    async fn shutdown(self) -> Result<B, IoError> {
        match self {
            Core::Thread(h) => h.shutdown().await,
            Core::Inline(h) => h.shutdown(),
        }
    }

    fn block_size(&self) -> usize {
        match self {
            Core::Thread(h) => h.block_size(),
            Core::Inline(h) => h.block_size(),
        }
    }

    fn logical_blocks(&self) -> u64 {
        match self {
            Core::Thread(h) => h.logical_blocks(),
            Core::Inline(h) => h.logical_blocks(),
        }
    }
}

/// A request started on an inline handle; forgotten if its caller goes
/// away before the reply (forgetting a ticket already answered does
/// nothing).
struct Ticket<'a, B: Backend> {
    handle: &'a InlineHandle<B>,
    id: u64,
}

impl<B: Backend> Drop for Ticket<'_, B> {
    fn drop(&mut self) {
        self.handle.forget(self.id);
    }
}

/// Control requests run on the FTL: inline on a simulator (like NBD
/// requests), on a blocking thread beside a driver thread.
impl<B: Backend + Send + 'static> crate::control::Executor for Core<B> {
    async fn execute(
        &self,
        command: zftl::control::Command,
    ) -> Result<serde_json::Map<String, serde_json::Value>, zftl::control::ControlError> {
        match self {
            Core::Thread(h) => {
                let mut h = h.to_blocking();
                tokio::task::spawn_blocking(move || zftl::control::execute(&mut h, command))
                    .await
                    .unwrap_or_else(|e| {
                        warn!(error = %e, "control request task failed");
                        Err(IoError::DeviceGone.into())
                    })
            }
            // A range operation over a large range is applied in steps,
            // and a snapshot create waits for the write buffer to drain:
            // started on the inline handle and polled, so NBD requests on
            // this runtime thread go on in between (and move them on).
            Core::Inline(h) => match command {
                zftl::control::Command::Range { op, ops } => {
                    let body = zftl::control::range_body(op, &ops);
                    polled(h, Request::Range { ops }).await?;
                    Ok(body)
                }
                zftl::control::Command::SnapshotCreate { name } => {
                    match polled(h, zftl_core::snapshot_create_request(&name)).await? {
                        ReplyData::Snapshot(taken) => {
                            Ok(zftl::control::snapshot_create_body(&taken))
                        }
                        other => unreachable!("snapshot create answered with {other:?}"),
                    }
                }
                zftl::control::Command::SnapshotDelete { name } => {
                    let id = named_snapshot(h, &name)?.id;
                    polled(h, Request::SnapshotDelete { id }).await?;
                    Ok(zftl::control::snapshot_delete_body(&name))
                }
                // A revert drains and flushes as a create does.
                zftl::control::Command::SnapshotRevert { to, undo } => {
                    let target = named_snapshot(h, &to)?;
                    let request = zftl_core::snapshot_revert_request(target.id, undo.as_deref());
                    let undone = polled(h, request).await.map_err(|e| match e {
                        IoError::Snapshot(SnapshotError::NoSuchId(id)) if id == target.id => {
                            IoError::from(SnapshotError::NoSuchName(to.clone()))
                        }
                        other => other,
                    })?;
                    Ok(zftl::control::snapshot_revert_body(
                        &target,
                        &zftl_core::snapshot_data(undone),
                    ))
                }
                // A fork create drains and flushes as a snapshot create
                // does; a delete unmaps the fork's region.
                zftl::control::Command::ForkCreate { snapshot, fork } => {
                    let base = named_snapshot(h, &snapshot)?.id;
                    let created = polled(h, zftl_core::fork_create_request(base, &fork)).await?;
                    let created = zftl_core::fork_data(created);
                    Ok(zftl::control::fork_create_body(&created, &h.snapshots()?))
                }
                zftl::control::Command::ForkDelete { fork } => {
                    let id = zftl_core::fork_named(&h.forks()?, &fork)?.id;
                    polled(h, Request::ForkDelete { id }).await?;
                    Ok(zftl::control::fork_delete_body(&fork))
                }
                other => zftl::control::execute(&mut h.clone(), other),
            },
        }
    }
}

/// Runs `request` on an inline handle: started, then polled, yielding to
/// the other tasks of this runtime thread in between.
async fn polled<B: Backend>(h: &InlineHandle<B>, request: Request) -> Result<ReplyData, IoError> {
    let ticket = Ticket {
        handle: h,
        id: h.start(request)?,
    };
    loop {
        if let Some(result) = h.poll(ticket.id) {
            return result;
        }
        tokio::task::yield_now().await;
    }
}

/// The live snapshot named `name`.
fn named_snapshot<B: Backend>(
    h: &InlineHandle<B>,
    name: &str,
) -> Result<zftl_core::history::Snapshot, IoError> {
    h.snapshots()?
        .into_iter()
        .find(|s| s.name == name)
        .ok_or_else(|| zftl_core::history::SnapshotError::NoSuchName(name.to_string()).into())
}

/// The FTL as an NBD volume.
struct FtlVolume<B: Backend> {
    handle: Core<B>,
    max_request_blocks: u32,
}

impl<B: Backend> Clone for FtlVolume<B> {
    fn clone(&self) -> Self {
        FtlVolume {
            handle: self.handle.clone(),
            max_request_blocks: self.max_request_blocks,
        }
    }
}

impl<B: Backend + Send + 'static> Volume for FtlVolume<B> {
    fn block_size(&self) -> usize {
        self.handle.block_size()
    }
    fn logical_blocks(&self) -> u64 {
        self.handle.logical_blocks()
    }
    fn max_request_blocks(&self) -> u32 {
        self.max_request_blocks
    }
    fn call(&self, request: Request) -> impl Future<Output = Result<ReplyData, IoError>> + Send {
        self.handle.call(request)
    }
    /// Each live snapshot is exported read-only as `EXPORT@SNAPSHOT`, also
    /// by a `--read-only` server.
    fn snapshots(&self) -> impl Future<Output = Result<Vec<Snapshot>, IoError>> + Send {
        self.handle.snapshots()
    }
    /// Each live fork is exported writable under its own name (read-only
    /// by a `--read-only` server).
    fn forks(&self) -> impl Future<Output = Result<Vec<zftl_core::Fork>, IoError>> + Send {
        self.handle.forks()
    }
}

fn ftl_error(path: &Path, what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::Ftl {
        path: path.to_path_buf(),
        reason: format!("{what}: {e}"),
    }
}

/// Whether the image holds a superblock record (then it is mounted, and a
/// damaged FTL is reported rather than formatted over).
fn holds_superblock<B: Backend>(dev: &mut B) -> bool {
    SUPER_ZONES.iter().any(|&z| {
        let wp = dev.zone_info(z).map_or(0, |i| i.write_pointer_blocks);
        (0..wp).any(|off| {
            dev.read_blocks(z, off, 1)
                .is_ok_and(|(data, _)| Superblock::decode(&data).is_ok())
        })
    })
}

/// Mounts the FTL on the image, formatting it first if it holds none, and
/// starts driving it.
fn mount_or_format<B: Backend + Send + 'static>(
    path: &Path,
    dev: B,
    format: &FormatOptions,
    config: FtlConfig,
    drive: Drive,
) -> Result<Core<B>, CliError> {
    match drive {
        Drive::Thread => open_ftl(path, dev, format, config, Handle::mount, Handle::format)
            .map(|h| Core::Thread(AsyncHandle::from(h))),
        Drive::Inline => open_ftl(path, dev, format, config, Driver::mount, Driver::format)
            .map(|d| Core::Inline(InlineHandle::new(d))),
    }
}

fn open_ftl<B: Backend, T>(
    path: &Path,
    mut dev: B,
    options: &FormatOptions,
    config: FtlConfig,
    mount: impl FnOnce(B, FtlConfig) -> Result<T, MountError>,
    format: impl FnOnce(B, &FormatOptions, FtlConfig) -> Result<T, MountError>,
) -> Result<T, CliError> {
    if holds_superblock(&mut dev) {
        info!(image = %path.display(), "mounting");
        return mount(dev, config).map_err(|e| {
            let hint = match e {
                MountError::Damaged(_) | MountError::Format { .. } => {
                    "; run `zftl check` for details"
                }
                _ => "",
            };
            ftl_error(path, "cannot mount", format!("{e}{hint}"))
        });
    }
    info!(image = %path.display(), "no FTL on the image yet: formatting");
    format(dev, options, config).map_err(|e| ftl_error(path, "cannot format", e))
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A second call (tests running `run` twice) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Completes on the first SIGINT or SIGTERM.
async fn termination() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                warn!(error = %e, "cannot watch SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT: shutting down"),
        () = term => info!("SIGTERM: shutting down"),
    }
}

/// What `zftl serve` runs with: the flags (and, later, a config file) resolved.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Settings {
    pub listen: SocketAddr,
    pub export: String,
    pub read_only: bool,
    pub insecure_no_tls: bool,
    pub tls: Option<TlsFiles>,
    pub metrics: Option<SocketAddr>,
    pub image: Option<PathBuf>,
    /// `--device`: serve an NVMe ZNS drive instead of an image.
    pub device: Option<PathBuf>,
    /// `--memory-mib`: serve an in-memory simulated device of this many MiB.
    pub memory_mib: Option<u64>,
    /// `--control`: the control socket (the image's default is added by
    /// `run_until` unless `no_control`).
    pub control: Option<PathBuf>,
    pub no_control: bool,
    pub ftl: FtlConfig,
    /// `--protect SIZE` (or `protect = "64GiB"`): a window in data written,
    /// in bytes, set in `ftl.protect_window` in blocks once the device's
    /// block size is known (`Settings::ftl_for`).
    pub protect_bytes: Option<u64>,
}

/// The default NBD address.
const DEFAULT_LISTEN: &str = "127.0.0.1:10809";
/// The default export name.
const DEFAULT_EXPORT: &str = "zftl";

/// `zftl serve --config FILE`: every key optional; unknown keys refused.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ServeFile {
    listen: Option<SocketAddr>,
    export: Option<String>,
    read_only: Option<bool>,
    insecure_no_tls: Option<bool>,
    image: Option<PathBuf>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    metrics: Option<SocketAddr>,
    control: Option<PathBuf>,
    protect: Option<String>,
    ftl: Option<toml::Table>,
}

fn config_error(path: &Path, reason: impl Into<String>) -> CliError {
    CliError::Config {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Reads a serve config file. Relative paths in it are relative to the
/// file's directory.
/// A `protect = "1h"` key sets `ftl.protect_window` (`protect = "64GiB"`:
/// the returned size, set once the block size is known).
fn load_serve_file(path: &Path) -> Result<(ServeFile, FtlConfig, Option<u64>), CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| config_error(path, e.to_string()))?;
    let mut file: ServeFile =
        toml::from_str(&text).map_err(|e| config_error(path, e.message().to_string()))?;
    let mut ftl = match file.ftl.take() {
        None => FtlConfig::default(),
        Some(table) => {
            let known = serde_json::to_value(FtlConfig::default())
                .map_err(|e| config_error(path, e.to_string()))?;
            for key in table.keys() {
                if known.get(key).is_none() {
                    return Err(config_error(
                        path,
                        format!(
                            "unknown key `ftl.{key}` (the [ftl] table takes the FTL's tunables)"
                        ),
                    ));
                }
            }
            table.try_into().map_err(|e: toml::de::Error| {
                config_error(path, format!("[ftl]: {}", e.message()))
            })?
        }
    };
    let mut protect_bytes = None;
    if let Some(text) = file.protect.take() {
        if ftl.protect_window.is_some() {
            return Err(config_error(
                path,
                "both `protect` and `ftl.protect_window` set the protection window; keep one",
            ));
        }
        let window = crate::args::parse_protect(&text)
            .map_err(|e| config_error(path, format!("protect: {e}, or \"off\"")))?;
        (ftl.protect_window, protect_bytes) = protect_settings(window);
    }
    let base = path.parent().unwrap_or(Path::new(""));
    for p in [
        &mut file.image,
        &mut file.tls_cert,
        &mut file.tls_key,
        &mut file.tls_client_ca,
        &mut file.control,
    ]
    .into_iter()
    .flatten()
    {
        if p.is_relative() {
            *p = base.join(&*p);
        }
    }
    Ok((file, ftl, protect_bytes))
}

/// `--protect`'s window: a time (or `off`) goes into the FTL's config, a
/// size waits for the block size.
fn protect_settings(p: Protect) -> (Option<ProtectWindow>, Option<u64>) {
    match p {
        Protect::Bytes(bytes) => (None, Some(bytes)),
        other => (Some(other.window(1)), None),
    }
}

impl Settings {
    /// The flags over the config file (if any) over the defaults.
    pub fn from_args(args: &ServeArgs) -> Result<Settings, CliError> {
        let (file, mut ftl, mut protect_bytes) = match &args.config {
            Some(path) => load_serve_file(path)?,
            None => (ServeFile::default(), FtlConfig::default(), None),
        };
        if let Some(window) = args.protect {
            (ftl.protect_window, protect_bytes) = protect_settings(window);
        }
        let tls = tls_files(
            args.tls_cert.clone().or(file.tls_cert),
            args.tls_key.clone().or(file.tls_key),
            args.tls_client_ca.clone().or(file.tls_client_ca),
        )?;
        Ok(Settings {
            listen: args
                .listen
                .or(file.listen)
                .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("a valid address")),
            export: args
                .export
                .clone()
                .or(file.export)
                .unwrap_or_else(|| DEFAULT_EXPORT.to_string()),
            read_only: args.read_only || file.read_only.unwrap_or(false),
            insecure_no_tls: args.insecure_no_tls || file.insecure_no_tls.unwrap_or(false),
            tls,
            metrics: args.metrics.or(file.metrics),
            image: args.image.image.clone().or(file.image),
            device: args.image.device.clone(),
            memory_mib: args.memory_mib,
            control: args.control.clone().or(file.control),
            no_control: args.no_control,
            ftl,
            protect_bytes,
        })
    }

    /// The FTL's config on a device of `block_size` bytes per block: a
    /// window in data written is counted in its blocks.
    pub fn ftl_for(&self, block_size: u32) -> FtlConfig {
        let mut ftl = self.ftl.clone();
        if let Some(bytes) = self.protect_bytes {
            ftl.protect_window = Some(Protect::Bytes(bytes).window(u64::from(block_size)));
        }
        ftl
    }
}

/// The TLS files, if any, checked for completeness.
fn tls_files(
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
) -> Result<Option<TlsFiles>, CliError> {
    match (cert, key) {
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert,
            key,
            client_ca,
        })),
        (None, None) if client_ca.is_none() => Ok(None),
        (None, None) => Err(CliError::InvalidArgument(
            "--tls-client-ca needs --tls-cert and --tls-key (the server's own certificate)".into(),
        )),
        (Some(_), None) => Err(CliError::InvalidArgument(
            "--tls-cert needs --tls-key (the certificate's private key)".into(),
        )),
        (None, Some(_)) => Err(CliError::InvalidArgument(
            "--tls-key needs --tls-cert (the server's certificate chain)".into(),
        )),
    }
}

/// Appends the FTL's statistics in the Prometheus text format (`None`:
/// the FTL did not answer; only `zftl_ftl_up 0` is written).
fn render_ftl_stats(stats: Option<&FtlStats>, out: &mut String) {
    let mut w = TextWriter::new(out);
    let up = |w: &mut TextWriter, v: u8| {
        w.metric(
            "zftl_ftl_up",
            MetricKind::Gauge,
            "Whether the FTL answered.",
            v,
        )
    };
    let Some(s) = stats else {
        up(&mut w, 0);
        return;
    };
    up(&mut w, 1);
    let counters: &[(&str, &str, u64)] = &[
        (
            "snapshot_creates",
            "Snapshots created.",
            s.snapshot_creates,
        ),
        (
            "snapshot_deletes",
            "Snapshots deleted.",
            s.snapshot_deletes,
        ),
        (
            "snapshot_versions_released",
            "Kept blocks that snapshot deletes released.",
            s.snapshot_versions_released,
        ),
        (
            "snapshot_reverts",
            "Reverts of the volume to a snapshot or point.",
            s.snapshot_reverts,
        ),
        (
            "snapshot_revert_blocks",
            "Blocks reverts changed (no data copied).",
            s.snapshot_revert_blocks,
        ),
        ("fork_creates", "Forks created.", s.fork_creates),
        ("fork_deletes", "Forks deleted.", s.fork_deletes),
        (
            "fork_delete_blocks",
            "Blocks fork deletes unmapped.",
            s.fork_delete_blocks,
        ),
        (
            "window_points_expired",
            "Protection-window points dropped for age (or for the blocks written since).",
            s.window_points_expired,
        ),
        (
            "window_points_given_way",
            "Protection-window points dropped early because a write, trim or range operation needed their room.",
            s.window_points_given_way,
        ),
        (
            "window_point_failures",
            "Protection-window point creates or drops that failed.",
            s.window_point_failures,
        ),
        (
            "host_write_blocks",
            "Blocks written by the host.",
            s.host_write_blocks,
        ),
        (
            "host_read_blocks",
            "Blocks read by the host.",
            s.host_read_blocks,
        ),
        (
            "host_trim_blocks",
            "Blocks trimmed by the host.",
            s.host_trim_blocks,
        ),
        (
            "host_zero_blocks",
            "Blocks zeroed by the host.",
            s.host_zero_blocks,
        ),
        (
            "media_write_blocks",
            "Blocks written to media: host data, GC copies, padding, metadata.",
            s.media_write_blocks,
        ),
        (
            "gc_copy_blocks",
            "Blocks garbage collection copied.",
            s.gc_copy_blocks,
        ),
        (
            "wl_move_blocks",
            "Of the blocks GC copied, those static wear leveling moved.",
            s.wl_move_blocks,
        ),
        (
            "gc_kept_blocks",
            "Of the blocks GC copied, those only snapshots held (the kept stream).",
            s.gc_kept_blocks,
        ),
        (
            "meta_write_blocks",
            "Metadata blocks written.",
            s.meta_write_blocks,
        ),
        (
            "summary_write_blocks",
            "Zone summary blocks written (tags in band).",
            s.summary_write_blocks,
        ),
        (
            "summary_map_walks",
            "GC victims looked up by a walk of the map (no usable zone summary).",
            s.summary_map_walks,
        ),
        ("erases", "Zone erases (resets).", s.erases),
        (
            "gc_device_us",
            "GC's device time in microseconds, as its budget costs it (reads, copies, resets).",
            s.gc_device_us,
        ),
        (
            "gc_unbudgeted_us",
            "Of GC's device time, microseconds that went out whatever its budget said (free zones at the reserve, device idle).",
            s.gc_unbudgeted_us,
        ),
        (
            "gc_budget_waits",
            "Times a GC read waited for GC's device-time budget.",
            s.gc_budget_waits,
        ),
        (
            "gc_resets_yielded",
            "GC victims' resets that waited for FUA appends to their zone group.",
            s.gc_resets_yielded,
        ),
        ("flushes", "Flushes.", s.flushes),
        ("checkpoints", "Checkpoints written.", s.checkpoints),
        (
            "range_vectors",
            "Range-operation vectors applied.",
            s.range_vectors,
        ),
        (
            "range_vectors_refused",
            "Range-operation vectors refused by their check (immutable range, merge conflict, shared table full).",
            s.range_vectors_refused,
        ),
        ("range_clones", "Clone operations applied.", s.range_clones),
        ("range_moves", "Move operations applied.", s.range_moves),
        ("range_deletes", "Delete operations applied.", s.range_deletes),
        ("range_merges", "Merge operations applied.", s.range_merges),
        (
            "range_attribute_changes",
            "Attribute changes applied.",
            s.range_attribute_changes,
        ),
        (
            "range_commits",
            "Log packs that carried range-operation vectors' replies (group commits).",
            s.range_commits,
        ),
        (
            "nameless_write_blocks",
            "Blocks written to the physical segment (nameless writes).",
            s.nameless_write_blocks,
        ),
        (
            "nameless_read_blocks",
            "Blocks read from the physical segment.",
            s.nameless_read_blocks,
        ),
        (
            "nameless_free_blocks",
            "Blocks of the physical segment freed (by frees and overwrites).",
            s.nameless_free_blocks,
        ),
        (
            "nameless_handover_blocks",
            "Blocks handed over after a mount (written since the client's last nameless commit) and taken by the client.",
            s.nameless_handover_blocks,
        ),
        (
            "nameless_md_write_blocks",
            "In band: md blocks written after groups of nameless blocks.",
            s.nameless_md_write_blocks,
        ),
        (
            "nameless_md_stuck_groups",
            "In band: groups of nameless blocks whose md is kept in memory and checkpoints (its append failed).",
            s.nameless_md_stuck_groups,
        ),
        (
            "nameless_migrated_blocks",
            "Nameless blocks GC migrated (each told to the client by an event; also in gc_copy_blocks).",
            s.nameless_migrated_blocks,
        ),
        (
            "nameless_remap_full_stops",
            "Times migration stopped because the remap table had no room for a victim's live blocks (acknowledgements make room).",
            s.nameless_remap_full_stops,
        ),
        (
            "nameless_migration_note_bytes",
            "Bytes of the notes migrations logged: a NamelessMigrate per block moved, a NamelessAck per entry acknowledged.",
            s.nameless_migration_note_bytes,
        ),
        (
            "nameless_remap_checkpoint_bytes",
            "Bytes of remap entries the checkpoints written carried (16 per entry per checkpoint).",
            s.nameless_remap_checkpoint_bytes,
        ),
        (
            "nameless_inplace_jobs",
            "In-place collections of nameless zones finished (their live blocks kept their addresses).",
            s.nameless_inplace_jobs,
        ),
        (
            "nameless_staged_blocks",
            "Live blocks in-place collections staged in a scratch zone (also in media_write_blocks).",
            s.nameless_staged_blocks,
        ),
        (
            "nameless_pad_blocks",
            "Pad blocks in-place collections wrote into the gaps of their victims (wasted until collected again).",
            s.nameless_pad_blocks,
        ),
        (
            "nameless_gap_fill_blocks",
            "Queued nameless write blocks in-place collections wrote into their victims' gaps (room reclaimed).",
            s.nameless_gap_fill_blocks,
        ),
        (
            "nameless_overwrite_fill_blocks",
            "Of the gap fills, the blocks of overwrites (their old blocks freed once the job was done).",
            s.nameless_overwrite_fill_blocks,
        ),
        (
            "nameless_inplace_gc_victims",
            "In-place collections GC started by itself (its in-place victim).",
            s.nameless_inplace_gc_victims,
        ),
    ];
    for (name, help, v) in counters {
        w.metric(
            &format!("zftl_ftl_{name}_total"),
            MetricKind::Counter,
            &format!("{help} Since this mount."),
            *v,
        );
    }
    let gauges: [(&str, &str, f64); 33] = [
        (
            "write_amplification",
            "Media writes per host write since this mount (0 before any host write).",
            s.write_amplification,
        ),
        (
            "free_zones",
            "Zones free for writing.",
            f64::from(s.free_zones),
        ),
        (
            "retired_zones",
            "Zones taken out of service.",
            f64::from(s.retired_zones),
        ),
        (
            "mapped_blocks",
            "Logical blocks mapped to data.",
            s.mapped_blocks as f64,
        ),
        (
            "erase_count_min",
            "Lowest erase count of a data or free zone.",
            f64::from(s.erase_count_min),
        ),
        (
            "erase_count_mean",
            "Mean erase count of the data and free zones.",
            s.erase_count_mean,
        ),
        (
            "erase_count_max",
            "Highest erase count of a data or free zone.",
            f64::from(s.erase_count_max),
        ),
        (
            "metadata_erase_count_max",
            "Highest erase count of a superblock or metadata zone.",
            f64::from(s.metadata_erase_count_max),
        ),
        (
            "map_memory_bytes",
            "Bytes of memory the L2P and P2L maps use.",
            s.map_memory_bytes as f64,
        ),
        (
            "map_bytes_per_mapped_block",
            "Map memory per mapped block, in bytes.",
            s.map_bytes_per_mapped_block,
        ),
        (
            "live_blocks",
            "Physical blocks holding live data.",
            s.live_blocks as f64,
        ),
        (
            "read_only",
            "1 while the volume is read-only: after a metadata write failure (until a remount), or for good once its metadata can no longer be written.",
            f64::from(u8::from(s.read_only)),
        ),
        (
            "nameless_live_blocks",
            "Live blocks of the physical segment (nameless writes).",
            s.nameless_live_blocks as f64,
        ),
        (
            "nameless_zones",
            "Zones holding nameless data.",
            f64::from(s.nameless_zones),
        ),
        (
            "nameless_uncommitted_blocks",
            "Live nameless blocks written since the client's last nameless commit.",
            s.nameless_uncommitted_blocks as f64,
        ),
        (
            "nameless_events_pending",
            "Nameless events (the post-mount hand-over, migrations) not yet taken by the client.",
            s.nameless_events_pending as f64,
        ),
        (
            "nameless_remap_entries",
            "Remap table entries: migrated nameless blocks the client has not acknowledged.",
            s.nameless_remap_entries as f64,
        ),
        (
            "nameless_fill_entries",
            "Live gap fills: entries of the address check's birth-generation map (8 bytes each).",
            s.nameless_fill_entries as f64,
        ),
        (
            "nameless_remap_capacity",
            "Entries the remap table holds at most (full: migrations stop).",
            s.nameless_remap_capacity as f64,
        ),
        (
            "nameless_remap_peak_entries",
            "The most entries the remap table held since mount.",
            s.nameless_remap_peak_entries as f64,
        ),
        (
            "shared_blocks",
            "Physical blocks more than one logical block names (or a moved one), reached through the shared table.",
            s.shared_blocks as f64,
        ),
        (
            "shared_refs",
            "Logical blocks that name a shared block.",
            s.shared_refs as f64,
        ),
        (
            "shared_saved_bytes",
            "Media bytes sharing saves: logical blocks naming a shared block beyond one per block.",
            s.shared_saved_bytes as f64,
        ),
        (
            "vectors_per_commit",
            "Range-operation vectors per group commit.",
            s.vectors_per_commit,
        ),
        ("snapshots", "Live snapshots.", s.snapshots as f64),
        ("forks", "Live forks of snapshots.", s.forks as f64),
        (
            "kept_zones",
            "Data zones the kept stream took since mount (blocks only snapshots hold).",
            f64::from(s.kept_zones),
        ),
        (
            "snapshot_versions",
            "Blocks snapshots keep that the volume has replaced.",
            s.snapshot_versions as f64,
        ),
        (
            "snapshot_room_versions",
            "Replaced blocks snapshots may still keep before writes fail with no space.",
            s.snapshot_room_versions as f64,
        ),
        (
            "snapshot_memory_bytes",
            "Bytes of memory the snapshot books use (part of map_memory_bytes).",
            s.snapshot_memory_bytes as f64,
        ),
        (
            "window_points",
            "Protection-window points held (part of snapshots).",
            s.window_points as f64,
        ),
        (
            "window_oldest_timestamp_seconds",
            "Wall time of the oldest protection-window point, the oldest time a revert reaches, in s since the Unix epoch (0: no point).",
            s.window_oldest_ns as f64 / 1e9,
        ),
        (
            "window_reach_blocks",
            "Host blocks written since the oldest protection-window point (since the restart for a point taken before it).",
            s.window_reach_blocks as f64,
        ),
    ];
    for (name, help, v) in gauges {
        w.metric(&format!("zftl_ftl_{name}"), MetricKind::Gauge, help, v);
    }
}

/// The protection window as the start-up line shows it, on a volume of
/// `block_size` bytes per block.
fn protect_text(window: Option<ProtectWindow>, block_size: u32) -> String {
    match window {
        None => "none (no points taken; those on the volume kept)".into(),
        Some(w) if w.is_off() => "off (points dropped)".into(),
        Some(ProtectWindow::Secs(secs)) => {
            let every = (secs as f64 / zftl_core::MAX_WINDOW_POINTS as f64).max(1.0);
            format!(
                "{} (a point at most every {every:.1} s while the volume changes)",
                crate::when::duration_text(secs)
            )
        }
        Some(ProtectWindow::Blocks(blocks)) => {
            let every =
                (blocks / zftl_core::MAX_WINDOW_POINTS).max(zftl_core::MIN_POINT_INTERVAL_BLOCKS);
            let bytes =
                |b: u64| crate::report::human_bytes(b.saturating_mul(u64::from(block_size)));
            format!(
                "{} written ({blocks} blocks; a point at most every {every} blocks ({}) written \
                 and a second)",
                bytes(blocks),
                bytes(every)
            )
        }
    }
}

/// Where the server ended up listening (ports may have been 0).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bound {
    #[allow(dead_code)] // read by the tests
    pub nbd: SocketAddr,
    #[allow(dead_code)] // read by the tests
    pub metrics: Option<SocketAddr>,
}

/// `crc`: how the data CRC implementations timed (fastest first). The
/// volume runs the fastest unless the config file's `[ftl]` table names
/// one (`data_crc`).
pub fn run(
    args: &ServeArgs,
    top_image: Option<&PathBuf>,
    crc: &[data_crc::Timing],
) -> Result<(), CliError> {
    init_logging();
    let mut settings = Settings::from_args(args)?;
    match settings.ftl.data_crc {
        Some(named) => info!(
            "data CRC: {} (the config file's; timed: {})",
            named.name(),
            data_crc::describe(crc)
        ),
        None => info!("data CRC: {}", data_crc::describe(crc)),
    }
    if let Some(fastest) = crc.first() {
        settings.ftl.data_crc.get_or_insert(fastest.imp);
    }
    run_until(&settings, top_image, termination(), |_| {})
}

/// Serves until `shutdown` completes; `ready` is told the bound addresses
/// once the listeners are up.
pub(crate) fn run_until(
    settings: &Settings,
    top_image: Option<&PathBuf>,
    shutdown: impl Future<Output = ()>,
    ready: impl FnOnce(Bound),
) -> Result<(), CliError> {
    let listen = settings.listen;
    check_listen_address(listen, settings.tls.is_some(), settings.insecure_no_tls)
        .map_err(|e| CliError::InvalidArgument(e.to_string()))?;
    let tls = match &settings.tls {
        Some(files) => {
            Some(tls_server_config(files).map_err(|e| CliError::InvalidArgument(e.to_string()))?)
        }
        None => None,
    };
    if !listen.ip().is_loopback() && tls.is_none() {
        warn!(%listen, "serving without TLS on a non-loopback address (--insecure-no-tls)");
    }
    if let Some(device) = &settings.device {
        return serve_device(settings, device, tls, shutdown, ready);
    }
    if let Some(size_mib) = settings.memory_mib {
        return serve_memory(settings, size_mib, tls, shutdown, ready);
    }
    let path = volume::image_path(
        &ImageOpt {
            image: settings.image.clone(),
            device: None,
        },
        top_image,
    )?;
    let settings = &crate::control::with_default_path(settings, &path);
    let (dev, action) = image::open_or_create(&path)?;
    info!(image = %path.display(), action = action.as_str(), "image");
    let mut dev = serve_on(settings, &path, dev, Drive::Inline, tls, shutdown, ready)?;
    dev.sync()
        .map_err(|e| ftl_error(&path, "sync", crate::error::sim_reason(&e)))?;
    info!("clean shutdown");
    Ok(())
}

/// `--memory-mib`: a fresh in-memory simulated device, formatted now and
/// gone at exit (the shutdown still drains, flushes and checkpoints, so the
/// FTL's exit path is the same as on an image).
fn serve_memory(
    settings: &Settings,
    size_mib: u64,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
    ready: impl FnOnce(Bound),
) -> Result<(), CliError> {
    let cfg = image::memory_config(size_mib)
        .map_err(|e| CliError::InvalidArgument(format!("--memory-mib: {e}")))?;
    let path = Path::new("(memory)");
    let dev = SimDevice::create_memory(cfg)
        .map_err(|e| ftl_error(path, "create", crate::error::sim_reason(&e)))?;
    info!(
        size_mib,
        "serving an in-memory simulated device (gone at exit)"
    );
    serve_on(settings, path, dev, Drive::Inline, tls, shutdown, ready)?;
    info!("clean shutdown");
    Ok(())
}

#[cfg(target_os = "linux")]
fn serve_device(
    settings: &Settings,
    device: &Path,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
    ready: impl FnOnce(Bound),
) -> Result<(), CliError> {
    let dev = crate::device::open(device)?;
    info!(device = %device.display(), "ZNS device");
    serve_on(settings, device, dev, Drive::Thread, tls, shutdown, ready)
        .map_err(CliError::on_device)?;
    info!("clean shutdown");
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn serve_device(
    _settings: &Settings,
    device: &Path,
    _tls: Option<Arc<rustls::ServerConfig>>,
    _shutdown: impl Future<Output = ()>,
    _ready: impl FnOnce(Bound),
) -> Result<(), CliError> {
    Err(CliError::DeviceOpen(format!(
        "{}: NVMe ZNS devices are supported on Linux only",
        device.display()
    )))
}

/// The runtime the connections run on. With the FTL inline, one thread:
/// the FTL's lock serializes the requests anyway, and a second runtime
/// thread would only wake on socket events to hand them over, taking CPU
/// from the clients (measured with fio over loopback on 2 cores). With a
/// driver thread, the runtime moves bytes only: a thread per CPU.
fn runtime_for(drive: Drive) -> tokio::runtime::Builder {
    match drive {
        Drive::Inline => tokio::runtime::Builder::new_current_thread(),
        Drive::Thread => tokio::runtime::Builder::new_multi_thread(),
    }
}

/// How to format a device that holds no FTL yet: `--memory-mib` asks for
/// that much logical space (the simulator is made half as large again, see
/// `image::memory_config`); otherwise all the device allows.
fn format_options(settings: &Settings, block_size_bytes: u32) -> FormatOptions {
    let logical_blocks = settings
        .memory_mib
        .map(|mib| mib.saturating_mul(1 << 20) / u64::from(block_size_bytes.max(1)));
    FormatOptions {
        logical_blocks,
        ..FormatOptions::default()
    }
}

/// Mounts (or formats) the FTL on `dev`, serves it until `shutdown`, then
/// shuts it down cleanly and hands the device back.
fn serve_on<B: Backend + Send + 'static>(
    settings: &Settings,
    path: &Path,
    dev: B,
    drive: Drive,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl Future<Output = ()>,
    ready: impl FnOnce(Bound),
) -> Result<B, CliError> {
    let listen = settings.listen;
    let block_size = dev.geometry().block_size_bytes;
    let format = format_options(settings, block_size);
    let ftl = settings.ftl_for(block_size);
    let control = match settings.control.as_deref().filter(|_| !settings.no_control) {
        Some(p) => Some(crate::control::ControlSocket::bind(p)?),
        None => None,
    };
    let handle = mount_or_format(path, dev, &format, ftl.clone(), drive)?;
    let end_of_life = match &handle {
        Core::Thread(h) => h.to_blocking().stats(),
        Core::Inline(h) => h.stats(),
    }
    .is_ok_and(|s| s.read_only);
    if end_of_life {
        warn!(
            image = %path.display(),
            "the volume's metadata can no longer be written (end of life): serving it read-only; copy the data off"
        );
    }
    let vol = FtlVolume {
        max_request_blocks: settings.ftl.request_blocks_limit(),
        handle,
    };
    let export = Export::new(settings.export.clone(), vol.clone())
        .read_only(settings.read_only || end_of_life)
        .description(format!("zftl volume on {}", path.display()));
    let exports = ExportTable::new(vec![export], Some(&settings.export))
        .map_err(|e| CliError::InvalidArgument(format!("--export: {e}")))?;
    let runtime = runtime_for(drive)
        .enable_all()
        .thread_name("zftl-nbd")
        .build()
        .map_err(|e| CliError::InvalidArgument(format!("cannot start the runtime: {e}")))?;
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| CliError::InvalidArgument(format!("cannot listen on {listen}: {e}")))?;
        let local = listener.local_addr().unwrap_or(listen);
        let scheme = if tls.is_some() { "nbds" } else { "nbd" };
        info!(
            listen = %local,
            export = %settings.export,
            read_only = settings.read_only,
            protect = %protect_text(ftl.protect_window, block_size),
            tls = tls.is_some(),
            client_certificates = settings.tls.as_ref().is_some_and(|t| t.client_ca.is_some()),
            size_bytes = vol.logical_blocks() * vol.block_size() as u64,
            block_size = vol.block_size(),
            "serving NBD ({scheme}://{local}/{})",
            settings.export
        );
        let mut server = Server::new(exports, ServerConfig::default());
        if let Some(tls) = tls {
            server = server.with_tls(tls);
        }
        let (metrics_stop, metrics_stopped) = tokio::sync::oneshot::channel::<()>();
        let mut metrics_task = None;
        let mut metrics_addr = None;
        if let Some(addr) = settings.metrics {
            let l = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                CliError::InvalidArgument(format!("cannot listen on {addr} (--metrics): {e}"))
            })?;
            let local = l.local_addr().unwrap_or(addr);
            if !local.ip().is_loopback() {
                warn!(metrics = %local, "metrics are served in plain HTTP on a non-loopback address");
            }
            info!(metrics = %local, "serving Prometheus metrics (http://{local}/metrics)");
            metrics_addr = Some(local);
            let nbd = server.metrics();
            let handle = vol.handle.clone();
            let render = move || {
                let nbd = Arc::clone(&nbd);
                let handle = handle.clone();
                async move {
                    let mut out = String::with_capacity(8192);
                    nbd.render(&mut out);
                    render_ftl_stats(handle.stats().await.ok().as_ref(), &mut out);
                    out
                }
            };
            metrics_task = Some(tokio::spawn(serve_metrics(l, render, async {
                let _ = metrics_stopped.await;
            })));
        }
        let (control_stop, control_stopped) = tokio::sync::watch::channel(false);
        let control_task = control.map(|mut socket| {
            let target = crate::control::Served {
                target: vol.handle.clone(),
                read_only: settings.read_only,
                export: Some(crate::control::ServedExport {
                    name: settings.export.clone(),
                    uri: format!("{scheme}://{local}/{}", settings.export),
                }),
            };
            tokio::spawn(async move { socket.serve(target, control_stopped).await })
        });
        ready(Bound {
            nbd: local,
            metrics: metrics_addr,
        });
        let shutdown = async {
            shutdown.await;
            let _ = control_stop.send(true);
        };
        let served = server.serve(listener, shutdown).await;
        let _ = control_stop.send(true);
        if let Some(task) = control_task {
            if let Ok(Err(e)) = task.await {
                warn!(error = %e, "control socket");
            }
        }
        let _ = metrics_stop.send(());
        if let Some(task) = metrics_task {
            let _ = task.await;
        }
        served.map_err(|e| CliError::InvalidArgument(format!("serving on {local}: {e}")))?;
        info!("connections drained: flushing and writing a checkpoint");
        drop(server);
        vol.handle
            .shutdown()
            .await
            .map_err(|e| ftl_error(path, "shutdown", e))
    });
    served
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use clap::Parser;

    use super::*;
    use crate::args::{Cli, Command};
    use zftl_core::tag::DataCrcImpl;

    fn serve_args(extra: &[&str]) -> Result<ServeArgs, clap::Error> {
        let argv = ["zftl", "serve"].iter().chain(extra).copied();
        match Cli::try_parse_from(argv)?.command {
            Some(Command::Serve(a)) => Ok(a),
            other => panic!("not serve: {other:?}"),
        }
    }

    fn settings(extra: &[&str]) -> Result<Settings, String> {
        Settings::from_args(&serve_args(extra).unwrap()).map_err(|e| e.to_string())
    }

    /// Settings for `device` (its flags) served and measured on free
    /// loopback ports.
    fn with_metrics_on_free_ports(device: &[&str]) -> Settings {
        let ports = ["--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0"];
        settings(&[device, &ports[..]].concat()).unwrap()
    }

    #[test]
    fn tls_flags_come_in_pairs() {
        assert!(settings(&[]).unwrap().tls.is_none());
        let e = settings(&["--tls-cert", "c.pem"]).unwrap_err();
        assert!(e.contains("--tls-key"), "{e}");
        let e = settings(&["--tls-key", "k.pem"]).unwrap_err();
        assert!(e.contains("--tls-cert"), "{e}");
        let e = settings(&["--tls-client-ca", "ca.pem"]).unwrap_err();
        assert!(e.contains("--tls-cert"), "{e}");
        let s = settings(&[
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-client-ca",
            "ca.pem",
        ])
        .unwrap();
        let tls = s.tls.unwrap();
        assert_eq!(tls.cert, PathBuf::from("c.pem"));
        assert_eq!(tls.client_ca, Some(PathBuf::from("ca.pem")));
    }

    #[test]
    fn bad_tls_files_are_named_before_anything_is_created() {
        let dir = tempfile::tempdir().unwrap();
        let cert = dir.path().join("cert.pem");
        std::fs::write(&cert, "garbage").unwrap();
        let img = dir.path().join("never.img");
        let s = settings(&[
            "--image",
            img.to_str().unwrap(),
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            dir.path().join("missing.key").to_str().unwrap(),
        ])
        .unwrap();
        let e = run_until(&s, None, async {}, |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("cert.pem"), "{e}");
        assert!(!img.exists());
    }

    #[test]
    fn non_loopback_needs_tls_or_the_override() {
        let s = settings(&["--listen", "0.0.0.0:0"]).unwrap();
        let e = run_until(&s, None, async {}, |_| {})
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--tls-cert") && e.contains("--insecure-no-tls"),
            "{e}"
        );
    }

    /// An NBD client (`zftl_nbd::client`): greet, GO the default export,
    /// then one write of `blocks` blocks at 0 and a flush. Returns the
    /// export's size.
    fn write_over_nbd(addr: SocketAddr, blocks: usize) -> u64 {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let mut nbd = zftl_nbd::client::Client::greet(stream).await.unwrap();
            let size = nbd.go("", &[]).await.expect("GO").size_bytes;
            nbd.write(0, &vec![0x5au8; blocks * 4096], 0).await.unwrap();
            nbd.flush().await.unwrap();
            size
        })
    }

    fn get_metrics(addr: SocketAddr) -> HashMap<String, f64> {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
            .unwrap();
        let mut r = String::new();
        s.read_to_string(&mut r).unwrap();
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        r.split("\r\n\r\n")
            .nth(1)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.rsplit_once(' '))
            .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
            .collect()
    }

    /// Runs `run_until` on a thread until `stop` is sent; returns where it
    /// listens once it is up.
    fn start(
        s: Settings,
    ) -> (
        Bound,
        tokio::sync::oneshot::Sender<()>,
        std::thread::JoinHandle<Result<(), CliError>>,
    ) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let server = std::thread::spawn(move || {
            run_until(
                &s,
                None,
                async {
                    let _ = stopped.await;
                },
                move |b| bound_tx.send(b).unwrap(),
            )
        });
        let bound = bound_rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the server starts");
        (bound, stop, server)
    }

    #[test]
    fn memory_device_serves_and_conflicts_with_an_image() {
        let e = serve_args(&["--memory-mib", "64", "--image", "x.img"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        let e = serve_args(&["--memory-mib", "64", "--device", "/dev/ng0n1"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ArgumentConflict);
        let e = serve_args(&["--memory-mib", "0"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let too_big = settings(&["--memory-mib", &u64::MAX.to_string()]).unwrap();
        let e = run_until(&too_big, None, async {}, |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains("--memory-mib") && e.contains("too large"), "{e}");

        let s = with_metrics_on_free_ports(&["--memory-mib", "64"]);
        let (bound, stop, server) = start(s);
        // As much logical space as asked for, like `nbdkit memory 64M`.
        assert_eq!(write_over_nbd(bound.nbd, 8), 64 << 20);
        let m = get_metrics(bound.metrics.unwrap());
        assert_eq!(m["zftl_ftl_host_write_blocks_total"], 8.0);
        assert_eq!(m["zftl_ftl_mapped_blocks"], 8.0);
        stop.send(()).unwrap();
        server.join().unwrap().expect("clean shutdown");
    }

    #[test]
    fn serve_exports_metrics_of_the_server_and_the_ftl() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("m.img");
        let s = with_metrics_on_free_ports(&["--image", img.to_str().unwrap()]);
        let (bound, stop, server) = start(s);
        let maddr = bound.metrics.unwrap();
        let before = get_metrics(maddr);
        assert_eq!(before["zftl_ftl_up"], 1.0);
        assert_eq!(before["zftl_ftl_host_write_blocks_total"], 0.0);
        write_over_nbd(bound.nbd, 4);
        let after = get_metrics(maddr);
        assert_eq!(after["zftl_nbd_requests_total{command=\"write\"}"], 1.0);
        assert_eq!(after["zftl_nbd_written_bytes_total"], 4.0 * 4096.0);
        assert_eq!(after["zftl_ftl_host_write_blocks_total"], 4.0);
        assert!(after["zftl_ftl_media_write_blocks_total"] >= 4.0);
        assert!(after["zftl_ftl_write_amplification"] >= 1.0);
        assert!(after["zftl_ftl_mapped_blocks"] >= 4.0);
        assert!(after["zftl_ftl_free_zones"] > 0.0);
        assert!(after.contains_key("zftl_ftl_erase_count_mean"));
        assert_eq!(after["zftl_ftl_snapshot_reverts_total"], 0.0);
        assert_eq!(after["zftl_ftl_window_points"], 0.0);
        assert_eq!(after["zftl_ftl_window_oldest_timestamp_seconds"], 0.0);
        assert!(after.contains_key("zftl_ftl_window_points_given_way_total"));
        assert_eq!(after["zftl_ftl_forks"], 0.0);
        assert_eq!(after["zftl_ftl_fork_creates_total"], 0.0);
        assert_eq!(after["zftl_ftl_fork_deletes_total"], 0.0);
        assert_eq!(after["zftl_ftl_fork_delete_blocks_total"], 0.0);
        assert_eq!(after["zftl_ftl_gc_kept_blocks_total"], 0.0);
        assert_eq!(after["zftl_ftl_kept_zones"], 0.0);
        assert_eq!(after["zftl_ftl_nameless_uncommitted_blocks"], 0.0);
        assert_eq!(after["zftl_ftl_nameless_events_pending"], 0.0);
        assert_eq!(after["zftl_ftl_nameless_remap_entries"], 0.0);
        assert!(after["zftl_ftl_nameless_remap_capacity"] >= 1.0);
        assert_eq!(after["zftl_ftl_nameless_handover_blocks_total"], 0.0);
        assert!(after.contains_key("zftl_ftl_map_bytes_per_mapped_block"));
        assert!(after.contains_key(
            "zftl_nbd_request_duration_microseconds_bucket{command=\"write\",le=\"+Inf\"}"
        ));
        stop.send(()).unwrap();
        server.join().unwrap().unwrap();
        // The metrics listener closed with the server.
        assert!(std::net::TcpStream::connect(maddr).is_err());
    }

    /// A `--read-only` server still exports each snapshot of the image as
    /// `EXPORT@SNAPSHOT` (views are read-only anyway), and each fork
    /// under its name, read-only, listed after the
    /// export, reading what the volume held when it was taken.
    #[test]
    fn read_only_serve_exports_snapshot_views() {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("snap.img");
        let block = |b: u8| vec![b; 4 * 4096];
        {
            let dev = image::create(&img, zftl_sim::SimConfig::small_for_tests()).unwrap();
            let options = FormatOptions {
                tag_placement: zftl_core::TagPlacement::InBand,
                ..FormatOptions::default()
            };
            let mut ftl = Driver::format(dev, &options, FtlConfig::default()).unwrap();
            ftl.write(0, &block(0x11)).unwrap();
            ftl.snapshot_create("before").unwrap();
            ftl.write(0, &block(0x22)).unwrap();
            let fork = ftl.fork_create("before", "dev").unwrap();
            ftl.write(fork.lba_offset, &block(0x33)).unwrap();
            ftl.shutdown().unwrap().sync().unwrap();
        }
        let s = settings(&[
            "--image",
            img.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--read-only",
            "--no-control",
        ])
        .unwrap();
        let (bound, stop, server) = start(s);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            use zftl_nbd::client::Client;
            use zftl_nbd::proto::{FLAG_READ_ONLY, OPT_LIST, REP_ACK};
            let connect = || async {
                let stream = tokio::net::TcpStream::connect(bound.nbd).await.unwrap();
                Client::greet(stream).await.unwrap()
            };
            let mut list = connect().await;
            list.send_option(OPT_LIST, &[]).await.unwrap();
            let mut names = Vec::new();
            loop {
                let r = list.option_reply().await.unwrap();
                if r.reply_type == REP_ACK {
                    break;
                }
                let len = u32::from_be_bytes(r.data[..4].try_into().unwrap()) as usize;
                names.push(String::from_utf8(r.data[4..4 + len].to_vec()).unwrap());
            }
            assert_eq!(names, ["zftl", "zftl@before", "dev"]);
            let mut view = connect().await;
            let info = view.go("zftl@before", &[]).await.unwrap();
            assert_ne!(info.flags & FLAG_READ_ONLY, 0);
            assert_eq!(view.read(0, 4 * 4096).await.unwrap(), block(0x11));
            let mut live = connect().await;
            live.go("zftl", &[]).await.unwrap();
            assert_eq!(live.read(0, 4 * 4096).await.unwrap(), block(0x22));
            // A fork is exported read-only by a read-only server.
            let mut fork = connect().await;
            let info = fork.go("dev", &[]).await.unwrap();
            assert_ne!(info.flags & FLAG_READ_ONLY, 0);
            assert_eq!(fork.read(0, 4 * 4096).await.unwrap(), block(0x33));
            view.disconnect().await.unwrap();
            live.disconnect().await.unwrap();
            fork.disconnect().await.unwrap();
        });
        stop.send(()).unwrap();
        server.join().unwrap().expect("clean shutdown");
    }

    #[test]
    fn config_file_with_flags_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("serve.toml");
        std::fs::write(
            &cfg,
            r#"
listen = "127.0.0.1:10900"
export = "disk"
read_only = true
image = "img/z.img"
tls_cert = "/etc/zftl/cert.pem"
tls_key = "key.pem"
tls_client_ca = "ca.pem"
metrics = "127.0.0.1:9100"

[ftl]
write_buffer_blocks = 77
gc_policy = "greedy"
data_crc = "table16"
"#,
        )
        .unwrap();
        let c = cfg.to_str().unwrap();
        let s = settings(&["--config", c]).unwrap();
        assert_eq!(s.listen, "127.0.0.1:10900".parse().unwrap());
        assert_eq!(s.export, "disk");
        assert!(s.read_only);
        assert_eq!(s.image, Some(dir.path().join("img/z.img")));
        let tls = s.tls.unwrap();
        assert_eq!(tls.cert, PathBuf::from("/etc/zftl/cert.pem"));
        assert_eq!(tls.key, dir.path().join("key.pem"));
        assert_eq!(tls.client_ca, Some(dir.path().join("ca.pem")));
        assert_eq!(s.metrics, Some("127.0.0.1:9100".parse().unwrap()));
        assert_eq!(s.ftl.write_buffer_blocks, 77);
        assert_eq!(s.ftl.data_crc, Some(DataCrcImpl::Table16));
        assert_eq!(
            s.ftl.max_request_blocks,
            FtlConfig::default().max_request_blocks
        );
        assert_ne!(s.ftl, FtlConfig::default());

        // Flags win.
        let s = settings(&[
            "--config",
            c,
            "--listen",
            "127.0.0.1:1",
            "--export",
            "other",
            "--metrics",
            "127.0.0.1:2",
            "--tls-key",
            "/k.pem",
        ])
        .unwrap();
        assert_eq!(s.listen, "127.0.0.1:1".parse().unwrap());
        assert_eq!(s.export, "other");
        assert_eq!(s.metrics, Some("127.0.0.1:2".parse().unwrap()));
        assert_eq!(s.tls.unwrap().key, PathBuf::from("/k.pem"));

        // No file, no flags: the defaults.
        let s = settings(&[]).unwrap();
        assert_eq!(s.listen, DEFAULT_LISTEN.parse().unwrap());
        assert_eq!(s.export, DEFAULT_EXPORT);
        assert!(!s.read_only && s.metrics.is_none() && s.tls.is_none());
        assert_eq!(s.ftl, FtlConfig::default());
    }

    #[test]
    fn protect_sets_the_window_from_the_flag_or_the_file() {
        assert_eq!(settings(&[]).unwrap().ftl.protect_window, None);
        for (flag, secs) in [
            ("1h", 3600),
            ("30m", 1800),
            ("90s", 90),
            ("1h30m", 5400),
            ("off", 0),
        ] {
            let s = settings(&["--protect", flag]).unwrap();
            assert_eq!(
                s.ftl.protect_window,
                Some(ProtectWindow::Secs(secs)),
                "{flag}"
            );
            assert_eq!(s.ftl_for(4096), s.ftl, "{flag}");
        }
        // A size of data written: blocks of the device's size.
        for (flag, blocks_4k) in [
            ("64GiB", 16 << 20),
            ("500MiB", 128_000),
            ("1TB", 1 << 28),
            ("2kb", 1),
            ("100B", 1),
        ] {
            let s = settings(&["--protect", flag]).unwrap();
            assert_eq!(
                s.ftl.protect_window, None,
                "{flag}: set once the block size is known"
            );
            let ftl = s.ftl_for(4096);
            assert_eq!(
                ftl.protect_window,
                Some(ProtectWindow::Blocks(blocks_4k)),
                "{flag}"
            );
        }
        let s = settings(&["--protect", "64GiB"]).unwrap();
        assert_eq!(
            s.ftl_for(512).protect_window,
            Some(ProtectWindow::Blocks(128 << 20))
        );
        for bad in [
            "3600", "1x", "", "0s", "1h-", "0GiB", "64G", "GiB", "64XB", "1hB",
        ] {
            let e = serve_args(&["--protect", bad]).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation, "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("p.toml");
        let c = cfg.to_str().unwrap();
        std::fs::write(&cfg, "protect = \"2h\"\n").unwrap();
        assert_eq!(
            settings(&["--config", c]).unwrap().ftl.protect_window,
            Some(ProtectWindow::Secs(7200))
        );
        // The flag wins over the file.
        let s = settings(&["--config", c, "--protect", "off"]).unwrap();
        assert_eq!(s.ftl.protect_window, Some(ProtectWindow::Secs(0)));
        std::fs::write(&cfg, "protect = \"1GiB\"\n").unwrap();
        let s = settings(&["--config", c]).unwrap();
        assert_eq!(
            s.ftl_for(4096).protect_window,
            Some(ProtectWindow::Blocks(1 << 18))
        );
        let s = settings(&["--config", c, "--protect", "1h"]).unwrap();
        assert_eq!(
            s.ftl_for(4096).protect_window,
            Some(ProtectWindow::Secs(3600))
        );
        std::fs::write(&cfg, "[ftl]\nprotect_window = { secs = 60 }\n").unwrap();
        assert_eq!(
            settings(&["--config", c]).unwrap().ftl.protect_window,
            Some(ProtectWindow::Secs(60))
        );
        std::fs::write(&cfg, "[ftl]\nprotect_window = { blocks = 4096 }\n").unwrap();
        assert_eq!(
            settings(&["--config", c]).unwrap().ftl.protect_window,
            Some(ProtectWindow::Blocks(4096))
        );
        std::fs::write(
            &cfg,
            "protect = \"1h\"\n[ftl]\nprotect_window = { secs = 60 }\n",
        )
        .unwrap();
        let e = settings(&["--config", c]).unwrap_err();
        assert!(e.contains("keep one") && e.contains("p.toml"), "{e}");
        std::fs::write(&cfg, "protect = \"an hour\"\n").unwrap();
        let e = settings(&["--config", c]).unwrap_err();
        assert!(
            e.contains("protect:") && e.contains("an hour") && e.contains("off"),
            "{e}"
        );
        let text = |w| protect_text(Some(w), 4096);
        assert!(text(ProtectWindow::Secs(3600)).starts_with("1h (a point at most every 3.5 s"));
        assert!(text(ProtectWindow::Secs(600)).starts_with("10m (a point at most every 1.0 s"));
        assert!(text(ProtectWindow::Secs(0)).starts_with("off"));
        assert!(text(ProtectWindow::Blocks(0)).starts_with("off"));
        assert_eq!(
            text(ProtectWindow::Blocks(16 << 20)),
            "64.0 GiB written (16777216 blocks; a point at most every 16384 blocks (64.0 MiB) \
             written and a second)"
        );
        assert!(text(ProtectWindow::Blocks(1000)).contains("every 256 blocks (1.0 MiB)"));
        assert!(protect_text(None, 4096).starts_with("none"));
    }

    #[test]
    fn config_file_errors_name_the_key_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("bad.toml");
        let c = cfg.to_str().unwrap();
        let err = |text: &str| {
            std::fs::write(&cfg, text).unwrap();
            settings(&["--config", c]).unwrap_err()
        };
        let e = err("listne = \"127.0.0.1:1\"\n");
        assert!(e.contains("listne") && e.contains("bad.toml"), "{e}");
        let e = err("[ftl]\nwrite_bufer_blocks = 1\n");
        assert!(e.contains("ftl.write_bufer_blocks"), "{e}");
        let e = err("[ftl]\nwrite_buffer_blocks = \"many\"\n");
        assert!(e.contains("[ftl]") && e.contains("bad.toml"), "{e}");
        let e = err("[ftl]\ndata_crc = \"crc64\"\n");
        assert!(e.contains("crc64") && e.contains("table16"), "{e}");
        let e = err("listen = \"nowhere\"\n");
        assert!(e.contains("bad.toml"), "{e}");
        let e = err("tls_cert = \"c.pem\"\n");
        assert!(e.contains("--tls-key"), "{e}");
        let e =
            settings(&["--config", dir.path().join("none.toml").to_str().unwrap()]).unwrap_err();
        assert!(e.contains("none.toml"), "{e}");
    }
}
