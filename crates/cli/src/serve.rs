//! `zftl serve`: export the FTL on a simulated device image over NBD.
//!
//! Steps: check the listen address (no TLS yet: loopback only unless
//! `--insecure-no-tls`), open or create the image, mount the FTL (format it
//! first if the image holds none) on a driver thread, serve until SIGINT or
//! SIGTERM, then drain the connections, flush and checkpoint (a clean
//! unmount) and sync the image.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use tracing::{info, warn};
use zftl::handle::{AsyncHandle, Handle};
use zftl_core::layout::SUPER_ZONES;
use zftl_core::superblock::Superblock;
use zftl_core::{
    Backend, BackendExt, FormatOptions, FtlConfig, IoError, MountError, ReplyData, Request,
};
use zftl_nbd::{check_listen_address, Export, ExportTable, Server, ServerConfig, Volume};
use zftl_sim::SimDevice;

use crate::args::ServeArgs;
use crate::error::CliError;
use crate::{image, volume};

/// The FTL's async handle as an NBD volume.
#[derive(Clone)]
struct FtlVolume {
    handle: AsyncHandle<SimDevice>,
    max_request_blocks: u32,
}

impl Volume for FtlVolume {
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
}

fn ftl_error(path: &Path, what: &str, e: impl std::fmt::Display) -> CliError {
    CliError::Ftl {
        path: path.to_path_buf(),
        reason: format!("{what}: {e}"),
    }
}

/// Whether the image holds a superblock record (then it is mounted, and a
/// damaged FTL is reported rather than formatted over).
fn holds_superblock(dev: &mut SimDevice) -> bool {
    SUPER_ZONES.iter().any(|&z| {
        let wp = dev.zone_info(z).map_or(0, |i| i.write_pointer_blocks);
        (0..wp).any(|off| {
            dev.read_blocks(z, off, 1)
                .is_ok_and(|(data, _)| Superblock::decode(&data).is_ok())
        })
    })
}

/// Mounts the FTL on the image, formatting it first if it holds none.
fn mount_or_format(path: &Path, mut dev: SimDevice) -> Result<Handle<SimDevice>, CliError> {
    let config = FtlConfig::default();
    if holds_superblock(&mut dev) {
        info!(image = %path.display(), "mounting");
        return Handle::mount(dev, config).map_err(|e| {
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
    Handle::format(dev, &FormatOptions::default(), config)
        .map_err(|e| ftl_error(path, "cannot format", e))
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

pub fn run(args: &ServeArgs, top_image: Option<&PathBuf>) -> Result<(), CliError> {
    init_logging();
    let listen: SocketAddr = args.listen;
    check_listen_address(listen, args.insecure_no_tls)
        .map_err(|e| CliError::InvalidArgument(e.to_string()))?;
    if !listen.ip().is_loopback() {
        warn!(%listen, "serving without TLS on a non-loopback address (--insecure-no-tls)");
    }
    let path = volume::image_path(&args.image, top_image)?;
    let (dev, action) = image::open_or_create(&path)?;
    info!(image = %path.display(), action = action.as_str(), "image");
    let handle = mount_or_format(&path, dev)?;
    let vol = FtlVolume {
        max_request_blocks: FtlConfig::default().max_request_blocks,
        handle: AsyncHandle::from(handle),
    };
    let export = Export::new(args.export.clone(), vol.clone())
        .read_only(args.read_only)
        .description(format!("zftl volume on {}", path.display()));
    let exports = ExportTable::new(vec![export], Some(&args.export))
        .map_err(|e| CliError::InvalidArgument(format!("--export: {e}")))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("zftl-nbd")
        .build()
        .map_err(|e| CliError::InvalidArgument(format!("cannot start the runtime: {e}")))?;
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| CliError::InvalidArgument(format!("cannot listen on {listen}: {e}")))?;
        let local = listener.local_addr().unwrap_or(listen);
        info!(
            listen = %local,
            export = %args.export,
            read_only = args.read_only,
            size_bytes = vol.logical_blocks() * vol.block_size() as u64,
            block_size = vol.block_size(),
            "serving NBD (nbd://{local}/{})",
            args.export
        );
        let server = Server::new(exports, ServerConfig::default());
        server
            .serve(listener, termination())
            .await
            .map_err(|e| CliError::InvalidArgument(format!("serving on {local}: {e}")))?;
        info!("connections drained: flushing and writing a checkpoint");
        drop(server);
        vol.handle
            .shutdown()
            .await
            .map_err(|e| ftl_error(&path, "shutdown", e))
    });
    let mut dev = served?;
    dev.sync()
        .map_err(|e| ftl_error(&path, "sync", crate::error::sim_reason(&e)))?;
    info!("clean shutdown");
    Ok(())
}
