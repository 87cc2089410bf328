//! Fixed newstyle negotiation: the greeting, then option haggling until the
//! client picks an export (`NBD_OPT_EXPORT_NAME` / `NBD_OPT_GO`), aborts,
//! or breaks a rule and is disconnected.

use std::io;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::{debug, warn};

use crate::config::ServerConfig;
use crate::export::{snapshots_of, Export, ExportTable, Volume};
use crate::meta::{self, Selected};
use crate::proto::*;

/// What the handshake agreed on; the transmission phase runs on it.
pub(crate) struct Session<V> {
    pub export: Arc<Export<V>>,
    pub structured: bool,
    /// The metadata contexts selected for this export (none: the client
    /// may not send `BLOCK_STATUS`).
    pub contexts: Vec<Selected>,
}

/// Why a handshake ended without an export.
#[derive(Debug)]
pub(crate) enum HandshakeEnd {
    Io(io::Error),
    /// The client sent `NBD_OPT_ABORT` (answered) or closed the connection.
    ClientLeft,
    /// A rule was broken; the connection is closed (hard disconnect).
    Violation(String),
}

impl From<io::Error> for HandshakeEnd {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            HandshakeEnd::ClientLeft
        } else {
            HandshakeEnd::Io(e)
        }
    }
}

/// The smallest request alignment the server accepts (and advertises as
/// the minimum block size): 512 bytes, the sector size file systems and
/// block layers assume. Requests that cover part of a volume block are
/// read-modify-writes of that block (see `blocklock`).
pub(crate) const MIN_BLOCK_BYTES: u32 = 512;

/// The block sizes the server advertises for an export (`NBD_INFO_BLOCK_SIZE`)
/// and enforces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BlockSizes {
    /// Requests must be aligned to this: [`MIN_BLOCK_BYTES`] (or the
    /// volume's block size if that were smaller).
    pub minimum: u32,
    /// The volume's block size: requests aligned to it need no
    /// read-modify-write.
    pub preferred: u32,
    /// The largest READ or WRITE payload: the configured maximum capped by
    /// the volume's largest request, a multiple of the volume's block size.
    pub maximum: u32,
}

pub(crate) fn block_sizes<V: Volume>(export: &Export<V>, cfg: &ServerConfig) -> BlockSizes {
    let bs = export.volume.block_size() as u32;
    let by_volume = u64::from(export.volume.max_request_blocks().max(1)) * u64::from(bs);
    let max = u64::from(cfg.max_payload_bytes).min(by_volume);
    // A multiple of the block size, at least one block.
    let max = (max / u64::from(bs)).max(1) * u64::from(bs);
    BlockSizes {
        minimum: MIN_BLOCK_BYTES.min(bs),
        preferred: bs,
        maximum: u32::try_from(max).unwrap_or(u32::MAX / bs * bs),
    }
}

/// Transmission flags of `export` for a session. A snapshot's view has
/// nothing to flush: no `SEND_FLUSH`.
pub(crate) fn transmission_flags<V>(export: &Export<V>, structured: bool) -> u16 {
    let mut flags = FLAG_HAS_FLAGS | FLAG_CAN_MULTI_CONN;
    if export.snapshot.is_none() {
        flags |= FLAG_SEND_FLUSH;
    }
    if export.is_read_only() {
        flags |= FLAG_READ_ONLY;
    } else {
        flags |= FLAG_SEND_FUA | FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES | FLAG_SEND_FAST_ZERO;
    }
    if structured {
        flags |= FLAG_SEND_DF;
    }
    flags
}

struct Haggle<'a, S, V> {
    stream: &'a mut S,
    exports: &'a ExportTable<V>,
    cfg: &'a ServerConfig,
    neg: &'a mut Negotiation,
    structured: bool,
    /// The export the last `NBD_OPT_SET_META_CONTEXT` named, and the
    /// contexts it selected (at least one).
    meta: Option<(Arc<Export<V>>, Vec<Selected>)>,
}

/// What carries over from the greeting through a TLS upgrade.
pub(crate) struct Negotiation {
    no_zeroes: bool,
    /// Options the client may still send.
    options_left: u32,
    /// The server has TLS configured (then it is required).
    tls_configured: bool,
    /// `NBD_OPT_STARTTLS` succeeded and the stream is now TLS.
    tls_active: bool,
}

impl Negotiation {
    /// Marks the stream as upgraded to TLS.
    pub fn tls_started(&mut self) {
        self.tls_active = true;
    }
}

/// How option haggling ended well.
pub(crate) enum Agreed<V> {
    /// Enter transmission.
    Session(Session<V>),
    /// The client aborted.
    Abort,
    /// `NBD_OPT_STARTTLS` was acknowledged: the caller runs the TLS
    /// handshake on the stream, then calls [`haggle`] again on it.
    StartTls,
}

/// Sends the greeting and reads the client's flags.
pub(crate) async fn greet<S>(
    stream: &mut S,
    cfg: &ServerConfig,
    tls_configured: bool,
) -> Result<Negotiation, HandshakeEnd>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBD_MAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    stream.write_all(&greeting).await?;
    stream.flush().await?;

    let client_flags = stream.read_u32().await?;
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(HandshakeEnd::Violation(format!(
            "unknown client flags {client_flags:#x}"
        )));
    }
    Ok(Negotiation {
        no_zeroes: client_flags & FLAG_C_NO_ZEROES != 0,
        options_left: cfg.max_options_per_handshake,
        tls_configured,
        tls_active: false,
    })
}

/// Option haggling on `stream` until the client picks an export, aborts or
/// asks for TLS. After a TLS upgrade it is called again on the TLS stream
/// and starts from a clean slate: nothing negotiated in plain text
/// (structured replies, meta contexts) carries over.
pub(crate) async fn haggle<S, V>(
    stream: &mut S,
    exports: &ExportTable<V>,
    cfg: &ServerConfig,
    neg: &mut Negotiation,
) -> Result<Agreed<V>, HandshakeEnd>
where
    S: AsyncRead + AsyncWrite + Unpin,
    V: Volume,
{
    let mut h = Haggle {
        stream,
        exports,
        cfg,
        neg,
        structured: false,
        meta: None,
    };
    while h.neg.options_left > 0 {
        h.neg.options_left -= 1;
        match h.one_option().await? {
            Step::Continue => {}
            Step::Done(session) => return Ok(Agreed::Session(session)),
            Step::Abort => return Ok(Agreed::Abort),
            Step::StartTls => return Ok(Agreed::StartTls),
        }
    }
    Err(HandshakeEnd::Violation(format!(
        "more than {} options",
        cfg.max_options_per_handshake
    )))
}

enum Step<V> {
    Continue,
    Done(Session<V>),
    Abort,
    StartTls,
}

impl<S, V> Haggle<'_, S, V>
where
    S: AsyncRead + AsyncWrite + Unpin,
    V: Volume,
{
    async fn reply(&mut self, option: u32, reply_type: u32, data: &[u8]) -> io::Result<()> {
        self.stream
            .write_all(&option_reply(option, reply_type, data))
            .await
    }

    async fn finish_reply(&mut self, option: u32, reply_type: u32, data: &[u8]) -> io::Result<()> {
        self.reply(option, reply_type, data).await?;
        self.stream.flush().await
    }

    async fn error(&mut self, option: u32, reply_type: u32, message: &str) -> io::Result<()> {
        debug!(option, reply_type, message, "option refused");
        self.finish_reply(option, reply_type, message.as_bytes())
            .await
    }

    async fn one_option(&mut self) -> Result<Step<V>, HandshakeEnd> {
        let magic = self.stream.read_u64().await?;
        if magic != IHAVEOPT {
            return Err(HandshakeEnd::Violation(format!(
                "bad option magic {magic:#018x}"
            )));
        }
        let option = self.stream.read_u32().await?;
        let length = self.stream.read_u32().await?;
        if length > self.cfg.max_option_bytes {
            if length > self.cfg.max_option_skip_bytes {
                return Err(HandshakeEnd::Violation(format!(
                    "option {option} of {length} bytes"
                )));
            }
            let skipped = tokio::io::copy(
                &mut (&mut *self.stream).take(u64::from(length)),
                &mut tokio::io::sink(),
            )
            .await?;
            if skipped != u64::from(length) {
                return Err(HandshakeEnd::ClientLeft);
            }
            self.error(option, REP_ERR_TOO_BIG, "option data too large")
                .await?;
            return Ok(Step::Continue);
        }
        let mut data = vec![0u8; length as usize];
        self.stream.read_exact(&mut data).await?;
        debug!(option, length, "option");
        self.dispatch(option, &data).await
    }

    async fn dispatch(&mut self, option: u32, data: &[u8]) -> Result<Step<V>, HandshakeEnd> {
        if self.neg.tls_configured && !self.neg.tls_active {
            return self.before_tls(option, data).await;
        }
        match option {
            OPT_EXPORT_NAME => self.export_name(data).await,
            OPT_ABORT => {
                // The client may already be gone; either way we are done.
                let _ = self.finish_reply(option, REP_ACK, &[]).await;
                Ok(Step::Abort)
            }
            OPT_LIST => {
                self.list(data).await?;
                Ok(Step::Continue)
            }
            OPT_INFO | OPT_GO => self.info_or_go(option, data).await,
            OPT_STRUCTURED_REPLY => {
                if data.is_empty() {
                    self.structured = true;
                    self.finish_reply(option, REP_ACK, &[]).await?;
                } else {
                    self.error(option, REP_ERR_INVALID, "STRUCTURED_REPLY takes no data")
                        .await?;
                }
                Ok(Step::Continue)
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                self.meta_context(option, data).await?;
                Ok(Step::Continue)
            }
            OPT_STARTTLS => {
                let (reply, message) = if self.neg.tls_active {
                    (REP_ERR_INVALID, "TLS is already in use on this connection")
                } else {
                    (REP_ERR_UNSUP, "TLS is not configured on this server")
                };
                self.error(option, reply, message).await?;
                Ok(Step::Continue)
            }
            _ => {
                self.error(option, REP_ERR_UNSUP, "unknown option").await?;
                Ok(Step::Continue)
            }
        }
    }

    /// "TLS required" mode, before the upgrade: only STARTTLS and ABORT.
    async fn before_tls(&mut self, option: u32, data: &[u8]) -> Result<Step<V>, HandshakeEnd> {
        match option {
            OPT_STARTTLS if data.is_empty() => {
                // Nothing may follow the ACK in plain text.
                self.finish_reply(option, REP_ACK, &[]).await?;
                Ok(Step::StartTls)
            }
            OPT_STARTTLS => {
                self.error(option, REP_ERR_INVALID, "STARTTLS takes no data")
                    .await?;
                Ok(Step::Continue)
            }
            OPT_ABORT => {
                let _ = self.finish_reply(option, REP_ACK, &[]).await;
                Ok(Step::Abort)
            }
            // It cannot be answered with an error: close instead.
            OPT_EXPORT_NAME => Err(HandshakeEnd::Violation(
                "EXPORT_NAME before STARTTLS on a server that requires TLS".into(),
            )),
            _ => {
                self.error(
                    option,
                    REP_ERR_TLS_REQD,
                    "this server requires TLS: send NBD_OPT_STARTTLS first",
                )
                .await?;
                Ok(Step::Continue)
            }
        }
    }

    async fn export_name(&mut self, data: &[u8]) -> Result<Step<V>, HandshakeEnd> {
        let Ok(name) = decode_export_name(data) else {
            return Err(HandshakeEnd::Violation(
                "EXPORT_NAME with an invalid name".into(),
            ));
        };
        // This option cannot answer with an error: close instead.
        let Some(export) = self.exports.resolve(&name).await else {
            return Err(HandshakeEnd::Violation(format!(
                "EXPORT_NAME of unknown export {name:?}"
            )));
        };
        let mut b = Vec::with_capacity(10 + 124);
        b.extend_from_slice(&export.size_bytes().to_be_bytes());
        b.extend_from_slice(&transmission_flags(&export, self.structured).to_be_bytes());
        if !self.neg.no_zeroes {
            b.extend_from_slice(&[0u8; 124]);
        }
        self.stream.write_all(&b).await?;
        self.stream.flush().await?;
        Ok(Step::Done(self.session(export)))
    }

    fn session(&mut self, export: Arc<Export<V>>) -> Session<V> {
        // A view or fork is built anew each time it is named: the same view
        // is the same name and snapshot, the same fork the same name and
        // fork id.
        let same = |m: &Arc<Export<V>>| {
            let fork_id = |e: &Export<V>| e.fork.as_ref().map(|f| f.id);
            Arc::ptr_eq(m, &export)
                || (m.snapshot.is_some() && m.snapshot == export.snapshot && m.name == export.name)
                || (m.fork.is_some() && fork_id(m) == fork_id(&export) && m.name == export.name)
        };
        let contexts = match self.meta.take() {
            Some((m, contexts)) if same(&m) => contexts,
            _ => Vec::new(),
        };
        Session {
            export,
            structured: self.structured,
            contexts,
        }
    }

    async fn list(&mut self, data: &[u8]) -> io::Result<()> {
        if !data.is_empty() {
            return self
                .error(OPT_LIST, REP_ERR_INVALID, "LIST takes no data")
                .await;
        }
        // The table's exports, then the views of their live snapshots.
        for (name, description) in self.exports.listing().await {
            let entry = rep_server_data(&name, &description);
            self.reply(OPT_LIST, REP_SERVER, &entry).await?;
        }
        self.finish_reply(OPT_LIST, REP_ACK, &[]).await
    }

    async fn info_or_go(&mut self, option: u32, data: &[u8]) -> Result<Step<V>, HandshakeEnd> {
        let Ok(request) = InfoRequest::decode(data) else {
            self.error(option, REP_ERR_INVALID, "malformed INFO/GO request")
                .await?;
            return Ok(Step::Continue);
        };
        let Some(export) = self.exports.resolve(&request.name).await else {
            let msg = format!("no export named {:?}", request.name);
            self.error(option, REP_ERR_UNKNOWN, &msg).await?;
            return Ok(Step::Continue);
        };
        let flags = transmission_flags(&export, self.structured);
        self.reply(option, REP_INFO, &info_export(export.size_bytes(), flags))
            .await?;
        // Block sizes are sent whether or not they were asked for (the
        // protocol allows it), and enforced.
        let sizes = block_sizes(&export, self.cfg);
        let info = info_block_size(sizes.minimum, sizes.preferred, sizes.maximum);
        self.reply(option, REP_INFO, &info).await?;
        if request.requests.contains(&INFO_NAME) {
            let d = info_string(INFO_NAME, &export.name);
            self.reply(option, REP_INFO, &d).await?;
        }
        if request.requests.contains(&INFO_DESCRIPTION) && !export.description.is_empty() {
            let d = info_string(INFO_DESCRIPTION, &export.description);
            self.reply(option, REP_INFO, &d).await?;
        }
        self.finish_reply(option, REP_ACK, &[]).await?;
        if option == OPT_GO {
            return Ok(Step::Done(self.session(export)));
        }
        Ok(Step::Continue)
    }

    async fn meta_context(&mut self, option: u32, data: &[u8]) -> io::Result<()> {
        let listing = option == OPT_LIST_META_CONTEXT;
        if !listing {
            // A SET replaces the selection, even when it fails.
            self.meta = None;
        }
        if !self.structured {
            return self
                .error(
                    option,
                    REP_ERR_INVALID,
                    "negotiate STRUCTURED_REPLY before meta contexts",
                )
                .await;
        }
        let Ok(request) = MetaContextRequest::decode(data) else {
            return self
                .error(option, REP_ERR_INVALID, "malformed meta context request")
                .await;
        };
        let Some(export) = self.exports.resolve(&request.name).await else {
            let msg = format!("no export named {:?}", request.name);
            return self.error(option, REP_ERR_UNKNOWN, &msg).await;
        };
        // A fork is not the volume any snapshot was taken of: it has no
        // `x-zftl:changed:` contexts (only `base:allocation`).
        let snapshots = if export.fork.is_none() && meta::needs_snapshots(&request.queries, listing)
        {
            snapshots_of(&export.volume).await
        } else {
            Vec::new()
        };
        let found = meta::matching(&request.queries, listing, &snapshots);
        if listing {
            // The context id of a listing is reserved: zero.
            for (name, _) in &found {
                self.reply(option, REP_META_CONTEXT, &meta_context_data(0, name))
                    .await?;
            }
            return self.finish_reply(option, REP_ACK, &[]).await;
        }
        let selected = meta::select(found);
        for s in &selected {
            let d = meta_context_data(s.id, &s.name);
            self.reply(option, REP_META_CONTEXT, &d).await?;
        }
        if !selected.is_empty() {
            self.meta = Some((export, selected));
        }
        self.finish_reply(option, REP_ACK, &[]).await
    }
}

/// Logs how a handshake ended.
pub(crate) fn log_end(end: &HandshakeEnd) {
    match end {
        HandshakeEnd::ClientLeft => debug!("client left during the handshake"),
        HandshakeEnd::Io(e) => debug!(error = %e, "handshake I/O error"),
        HandshakeEnd::Violation(why) => warn!(%why, "handshake refused; closing"),
    }
}
