//! The listener: accepts connections (a bounded number at once), runs the
//! handshake and the transmission phase of each, and on shutdown stops
//! accepting and waits until every connection has drained.

use std::future::Future;
use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, info, warn, Instrument};

use crate::config::ServerConfig;
use crate::export::{ExportTable, Volume};
use crate::handshake::{greet, haggle, log_end, Agreed, HandshakeEnd, Session};
use crate::metrics::Metrics;
use crate::outbox::Backlog;
use crate::transmission::transmit;

/// An NBD server for a table of exports.
///
/// ```no_run
/// # async fn demo<V: zftl_nbd::Volume>(volume: V) -> Result<(), Box<dyn std::error::Error>> {
/// use zftl_nbd::{Export, ExportTable, Server, ServerConfig};
/// let exports = ExportTable::new(vec![Export::new("zftl", volume)], Some("zftl"))?;
/// let server = Server::new(exports, ServerConfig::default());
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:10809").await?;
/// server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await?;
/// # Ok(()) }
/// ```
pub struct Server<V> {
    exports: Arc<ExportTable<V>>,
    config: Arc<ServerConfig>,
    shutdown_tx: watch::Sender<bool>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    metrics: Arc<Metrics>,
}

impl<V: Volume> Server<V> {
    pub fn new(exports: ExportTable<V>, config: ServerConfig) -> Self {
        Server {
            exports: Arc::new(exports),
            config: Arc::new(config.normalized()),
            shutdown_tx: watch::channel(false).0,
            tls: None,
            metrics: Arc::new(Metrics::new()),
        }
    }

    /// Requires TLS (`NBD_OPT_STARTTLS`) on every connection, with this
    /// configuration (see [`crate::tls_server_config`]).
    pub fn with_tls(mut self, tls: Arc<rustls::ServerConfig>) -> Self {
        self.tls = Some(tokio_rustls::TlsAcceptor::from(tls));
        self
    }

    /// The server's counters (serve them with [`crate::serve_metrics`]).
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Whether connections must upgrade to TLS.
    pub fn requires_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The limits in force (after normalisation).
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Accepts connections on `listener` until `shutdown` completes, then
    /// stops accepting, lets every connection finish the requests it has
    /// read (their replies are sent), closes them and returns. Requests not
    /// yet read from a socket are not served.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()>,
    ) -> io::Result<()> {
        let slots = Arc::new(Semaphore::new(self.config.max_connections));
        let mut connections = JoinSet::new();
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(_) = connections.join_next(), if !connections.is_empty() => continue,
                accepted = accept(&listener, &slots) => accepted,
            };
            let (stream, peer, slot) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off, go on.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let backlog = Backlog::of(&stream);
            let span = tracing::info_span!("conn", %peer);
            let exports = Arc::clone(&self.exports);
            let config = Arc::clone(&self.config);
            let down = self.shutdown_tx.subscribe();
            let tls = self.tls.clone();
            let metrics = Arc::clone(&self.metrics);
            connections.spawn(
                async move {
                    debug!("connected");
                    let _open = metrics.connection();
                    serve_one(stream, backlog, &exports, &config, tls, &metrics, down).await;
                    debug!("closed");
                    drop(slot);
                }
                .instrument(span),
            );
        }
        drop(listener);
        info!(
            connections = connections.len(),
            "shutting down: draining connections"
        );
        self.shutdown_tx.send_replace(true);
        while let Some(done) = connections.join_next().await {
            if let Err(e) = done {
                warn!(error = %e, "connection task failed");
            }
        }
        Ok(())
    }

    /// Serves one already-connected stream (any transport: TCP, a Unix
    /// socket, an in-memory duplex in tests) until it closes or the
    /// server's [`Self::serve`] shuts down.
    pub async fn serve_stream<S>(&self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let down = self.shutdown_tx.subscribe();
        let tls = self.tls.clone();
        let _open = self.metrics.connection();
        serve_one(
            stream,
            Backlog::Unknown,
            &self.exports,
            &self.config,
            tls,
            &self.metrics,
            down,
        )
        .await;
    }
}

async fn accept(
    listener: &TcpListener,
    slots: &Arc<Semaphore>,
) -> io::Result<(
    tokio::net::TcpStream,
    std::net::SocketAddr,
    tokio::sync::OwnedSemaphorePermit,
)> {
    let slot = Arc::clone(slots)
        .acquire_owned()
        .await
        .map_err(|_| io::Error::other("connection slots closed"))?;
    let (stream, peer) = listener.accept().await?;
    Ok((stream, peer, slot))
}

/// Where a handshake ended up.
enum Negotiated<S, V> {
    Plain(S, Session<V>),
    Tls(Box<tokio_rustls::server::TlsStream<S>>, Session<V>),
}

/// The handshake, with the TLS upgrade in the middle when TLS is
/// configured. `Ok(None)`: the client aborted.
async fn negotiate<S, V>(
    mut stream: S,
    exports: &ExportTable<V>,
    config: &ServerConfig,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Result<Option<Negotiated<S, V>>, HandshakeEnd>
where
    S: AsyncRead + AsyncWrite + Unpin,
    V: Volume,
{
    let mut neg = greet(&mut stream, config, tls.is_some()).await?;
    let session = match haggle(&mut stream, exports, config, &mut neg).await? {
        Agreed::Session(s) => return Ok(Some(Negotiated::Plain(stream, s))),
        Agreed::Abort => return Ok(None),
        Agreed::StartTls => {
            let Some(acceptor) = tls else {
                return Err(HandshakeEnd::Violation("STARTTLS without TLS".into()));
            };
            let mut secure = acceptor
                .accept(stream)
                .await
                .map_err(|e| HandshakeEnd::Violation(format!("TLS handshake failed: {e}")))?;
            debug!("TLS established");
            neg.tls_started();
            match haggle(&mut secure, exports, config, &mut neg).await? {
                Agreed::Session(s) => Negotiated::Tls(Box::new(secure), s),
                Agreed::Abort => {
                    let _ = tokio::io::AsyncWriteExt::shutdown(&mut secure).await;
                    return Ok(None);
                }
                Agreed::StartTls => return Err(HandshakeEnd::Violation("STARTTLS twice".into())),
            }
        }
    };
    Ok(Some(session))
}

/// Serves `stream`; `backlog` tells the bytes waiting on it (of no use
/// once TLS wraps it).
async fn serve_one<S, V>(
    stream: S,
    backlog: Backlog,
    exports: &ExportTable<V>,
    config: &ServerConfig,
    tls: Option<tokio_rustls::TlsAcceptor>,
    metrics: &Arc<Metrics>,
    mut down: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    V: Volume,
{
    let agreed = tokio::select! {
        biased;
        _ = down.wait_for(|d| *d) => return,
        r = tokio::time::timeout(config.handshake_timeout, negotiate(stream, exports, config, tls)) => r,
    };
    let negotiated = match agreed {
        Err(_) => {
            warn!("handshake timed out; closing");
            return;
        }
        Ok(Err(end)) => {
            log_end(&end);
            return;
        }
        Ok(Ok(None)) => {
            debug!("client aborted the handshake");
            return;
        }
        Ok(Ok(Some(n))) => n,
    };
    match negotiated {
        Negotiated::Plain(stream, session) => {
            log_session(&session, false);
            transmit(stream, backlog, session, config, metrics, down).await;
        }
        Negotiated::Tls(stream, session) => {
            log_session(&session, true);
            transmit(*stream, Backlog::Unknown, session, config, metrics, down).await;
        }
    }
}

fn log_session<V>(session: &Session<V>, tls: bool) {
    debug!(
        export = %session.export.name,
        structured = session.structured,
        read_only = session.export.is_read_only(),
        snapshot = ?session.export.snapshot,
        tls,
        "transmission"
    );
}
