//! A small NBD client over any async byte stream: the fixed newstyle
//! handshake, and requests with simple or structured replies, built on the
//! server's own wire types ([`crate::proto`]).
//!
//! It is the one client zftl's own code uses: the NBD server's tests (plain
//! TCP and, on a stream the caller upgrades after `NBD_OPT_STARTTLS`, TLS),
//! `zftl serve`'s tests, `zftl bench nbd`'s probe that a server is up, and
//! `nbd-round-trip`, the guest's round trip through `zftl serve --device`.
//! It checks what the server sends and answers a protocol violation with a
//! [`ClientError`], never a panic; what it sends is what the caller asks
//! for, so a test can also send what a well-behaved client would not.
//!
//! Requests may be pipelined: [`Client::send`] (or [`Client::encode`] into a
//! buffer sent later) returns the request's cookie, and [`Client::reply`]
//! takes the next reply, whichever request it answers. The client remembers
//! the length of each READ it sent, which a simple reply does not carry.
//!
//! ```
//! use zftl_nbd::client::Client;
//! # async fn demo(stream: tokio::net::TcpStream) -> Result<(), zftl_nbd::client::ClientError> {
//! let mut nbd = Client::greet(stream).await?;
//! let export = nbd.go("zftl", &[]).await?;
//! nbd.write(0, &vec![0xAB; 4096], 0).await?;
//! nbd.flush().await?;
//! assert_eq!(nbd.read(0, 4096).await?, vec![0xAB; 4096]);
//! println!("{} bytes", export.size_bytes);
//! nbd.disconnect().await?;
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::io;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::proto::*;

/// Bytes of the server's greeting: `NBDMAGIC`, `IHAVEOPT`, handshake flags.
const GREETING_BYTES: usize = 18;
/// Largest option reply the client reads (a server's `NBD_REP_SERVER`
/// list entry or error message is far smaller).
const MAX_OPTION_REPLY_BYTES: u32 = 1 << 20;
/// Largest structured reply chunk the client reads: a READ's data of the
/// largest request (32 MiB) and its offset.
const MAX_CHUNK_BYTES: u32 = (32 << 20) + 8;
/// Zeroes after the `NBD_OPT_EXPORT_NAME` answer unless both sides set
/// `NO_ZEROES`.
const EXPORT_NAME_ZEROES: usize = 124;

/// What went wrong talking to a server.
#[derive(Debug)]
pub enum ClientError {
    /// The connection failed.
    Io(io::Error),
    /// The server sent something the protocol does not allow here.
    Protocol(String),
    /// The server answered an option with an error reply.
    Refused {
        option: u32,
        reply_type: u32,
        message: String,
    },
    /// The server answered a request with an NBD error.
    Nbd {
        command: u16,
        offset: u64,
        length: u32,
        errno: u32,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Io(e) => write!(f, "NBD connection: {e}"),
            ClientError::Protocol(what) => write!(f, "NBD protocol violation: {what}"),
            ClientError::Refused {
                option,
                reply_type,
                message,
            } => write!(
                f,
                "the server refused option {option} with reply {reply_type:#x}: {message}"
            ),
            ClientError::Nbd {
                command,
                offset,
                length,
                errno,
            } => write!(
                f,
                "command {command} at byte {offset} (+{length}): NBD error {errno}"
            ),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for ClientError {
    fn from(e: io::Error) -> Self {
        ClientError::Io(e)
    }
}

fn protocol(what: impl Into<String>) -> ClientError {
    ClientError::Protocol(what.into())
}

/// One option reply: the option it answers, its type and its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OptionReply {
    pub option: u32,
    pub reply_type: u32,
    pub data: Vec<u8>,
}

impl OptionReply {
    /// An error reply (`NBD_REP_ERR_*`).
    pub fn is_error(&self) -> bool {
        self.reply_type & (1 << 31) != 0
    }
}

/// What `NBD_OPT_GO` (or `NBD_OPT_EXPORT_NAME`) told about an export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportInfo {
    pub size_bytes: u64,
    /// Transmission flags (`FLAG_*` of [`crate::proto`]).
    pub flags: u16,
    /// `NBD_INFO_BLOCK_SIZE`, when asked for and sent: (minimum,
    /// preferred, maximum) in bytes.
    pub block_size: Option<(u32, u32, u32)>,
}

/// The answer to one request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    pub cookie: u64,
    /// 0, or the NBD error.
    pub error: u32,
    /// A READ's data (empty after an error).
    pub data: Vec<u8>,
    /// (length, status) descriptors of a `BLOCK_STATUS` reply, those of
    /// every chunk in the order received (with one context selected: that
    /// context's).
    pub extents: Vec<(u32, u32)>,
    /// The chunks of a `BLOCK_STATUS` reply: (context id, descriptors), in
    /// the order received.
    pub status: Vec<(u32, Vec<(u32, u32)>)>,
    /// A simple reply, not structured chunks.
    pub simple: bool,
}

/// The data of `NBD_OPT_GO` / `NBD_OPT_INFO`: the export name and the
/// information items asked for.
pub fn info_request(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut d = Vec::with_capacity(6 + name.len() + 2 * infos.len());
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`.
pub fn meta_context_request(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

fn be_u16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be_u64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// An NBD client on `stream` (a `TcpStream`, a TLS stream, or `&mut` of
/// either). See the module docs.
pub struct Client<S> {
    stream: S,
    server_flags: u16,
    /// Zeroes after an `NBD_OPT_EXPORT_NAME` answer are left out.
    no_zeroes: bool,
    /// Structured replies were negotiated.
    structured: bool,
    /// Length of each READ sent and not yet answered, by cookie.
    reads: HashMap<u64, usize>,
    next_cookie: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    /// Reads the server's greeting and answers it: fixed newstyle, and no
    /// zeroes when the server offers that.
    pub async fn greet(mut stream: S) -> Result<Client<S>, ClientError> {
        let mut hello = [0u8; GREETING_BYTES];
        stream.read_exact(&mut hello).await?;
        if be_u64(&hello[..8]) != NBD_MAGIC || be_u64(&hello[8..16]) != IHAVEOPT {
            return Err(protocol("not a newstyle NBD server"));
        }
        let server_flags = be_u16(&hello[16..]);
        if server_flags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err(protocol("the server is not fixed newstyle"));
        }
        let no_zeroes = server_flags & FLAG_NO_ZEROES != 0;
        let client_flags = FLAG_C_FIXED_NEWSTYLE | if no_zeroes { FLAG_C_NO_ZEROES } else { 0 };
        stream.write_all(&client_flags.to_be_bytes()).await?;
        stream.flush().await?;
        let mut c = Client::resume(stream);
        c.server_flags = server_flags;
        c.no_zeroes = no_zeroes;
        Ok(c)
    }

    /// A client on a stream whose greeting was already answered (after
    /// `NBD_OPT_STARTTLS`, on the TLS stream), assuming a server that
    /// offered fixed newstyle and no zeroes, as zftl's does.
    pub fn resume(stream: S) -> Client<S> {
        Client {
            stream,
            server_flags: FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES,
            no_zeroes: true,
            structured: false,
            reads: HashMap::new(),
            next_cookie: 1,
        }
    }

    /// The handshake flags of the server's greeting.
    pub fn server_flags(&self) -> u16 {
        self.server_flags
    }

    /// The stream, to send or read bytes the client would not.
    pub fn stream(&mut self) -> &mut S {
        &mut self.stream
    }

    /// The stream back (to wrap it in TLS after `NBD_OPT_STARTTLS`).
    pub fn into_inner(self) -> S {
        self.stream
    }

    // ----- handshake --------------------------------------------------------

    /// Sends one option.
    pub async fn send_option(&mut self, option: u32, data: &[u8]) -> Result<(), ClientError> {
        let len = u32::try_from(data.len()).map_err(|_| protocol("option data over 4 GiB"))?;
        let mut b = Vec::with_capacity(OPTION_HEADER_BYTES + data.len());
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(data);
        self.stream.write_all(&b).await?;
        self.stream.flush().await?;
        Ok(())
    }

    /// Reads one option reply.
    pub async fn option_reply(&mut self) -> Result<OptionReply, ClientError> {
        let mut h = [0u8; 20];
        self.stream.read_exact(&mut h).await?;
        if be_u64(&h) != OPTION_REPLY_MAGIC {
            return Err(protocol(format!("option reply magic {:#x}", be_u64(&h))));
        }
        let len = be_u32(&h[16..]);
        if len > MAX_OPTION_REPLY_BYTES {
            return Err(protocol(format!("option reply of {len} bytes")));
        }
        let mut data = vec![0; len as usize];
        self.stream.read_exact(&mut data).await?;
        Ok(OptionReply {
            option: be_u32(&h[8..]),
            reply_type: be_u32(&h[12..]),
            data,
        })
    }

    /// Sends `option` and reads its one reply, which must be an ACK.
    async fn acked(&mut self, option: u32, data: &[u8]) -> Result<(), ClientError> {
        self.send_option(option, data).await?;
        let r = self.option_reply().await?;
        self.expect_answer(option, &r)?;
        match r.reply_type {
            REP_ACK => Ok(()),
            other => Err(protocol(format!("option {option} answered {other:#x}"))),
        }
    }

    /// A reply to `option`, and not an error.
    fn expect_answer(&self, option: u32, r: &OptionReply) -> Result<(), ClientError> {
        if r.option != option {
            return Err(protocol(format!(
                "a reply to option {} where {option} was sent",
                r.option
            )));
        }
        if r.is_error() {
            return Err(ClientError::Refused {
                option,
                reply_type: r.reply_type,
                message: String::from_utf8_lossy(&r.data).into_owned(),
            });
        }
        Ok(())
    }

    /// `NBD_OPT_STRUCTURED_REPLY`: replies come as chunks from now on.
    pub async fn structured_replies(&mut self) -> Result<(), ClientError> {
        self.acked(OPT_STRUCTURED_REPLY, &[]).await?;
        self.structured = true;
        Ok(())
    }

    /// `NBD_OPT_SET_META_CONTEXT` for `export`: the (id, name) of each
    /// context the server selected.
    pub async fn set_meta_context(
        &mut self,
        export: &str,
        queries: &[&str],
    ) -> Result<Vec<(u32, String)>, ClientError> {
        self.meta_context(OPT_SET_META_CONTEXT, export, queries)
            .await
    }

    /// `NBD_OPT_LIST_META_CONTEXT` for `export`: the names of the contexts
    /// the server offers that match `queries` (every one without queries).
    pub async fn list_meta_context(
        &mut self,
        export: &str,
        queries: &[&str],
    ) -> Result<Vec<String>, ClientError> {
        let listed = self
            .meta_context(OPT_LIST_META_CONTEXT, export, queries)
            .await?;
        Ok(listed.into_iter().map(|(_, name)| name).collect())
    }

    async fn meta_context(
        &mut self,
        option: u32,
        export: &str,
        queries: &[&str],
    ) -> Result<Vec<(u32, String)>, ClientError> {
        self.send_option(option, &meta_context_request(export, queries))
            .await?;
        let mut contexts = Vec::new();
        loop {
            let r = self.option_reply().await?;
            self.expect_answer(option, &r)?;
            match r.reply_type {
                REP_META_CONTEXT if r.data.len() >= 4 => {
                    let name = String::from_utf8_lossy(&r.data[4..]).into_owned();
                    contexts.push((be_u32(&r.data), name));
                }
                REP_ACK => return Ok(contexts),
                other => return Err(protocol(format!("meta context reply {other:#x}"))),
            }
        }
    }

    /// `NBD_OPT_GO` for `export`, asking for the `infos` items: what the
    /// server said about the export. Transmission starts.
    pub async fn go(&mut self, export: &str, infos: &[u16]) -> Result<ExportInfo, ClientError> {
        self.send_option(OPT_GO, &info_request(export, infos))
            .await?;
        let mut info = None;
        let mut block_size = None;
        loop {
            let r = self.option_reply().await?;
            self.expect_answer(OPT_GO, &r)?;
            let d = &r.data;
            match r.reply_type {
                REP_INFO if d.len() < 2 => return Err(protocol("empty NBD_REP_INFO")),
                REP_INFO => match be_u16(d) {
                    INFO_EXPORT if d.len() == 12 => {
                        info = Some((be_u64(&d[2..]), be_u16(&d[10..])))
                    }
                    INFO_BLOCK_SIZE if d.len() == 14 => {
                        block_size = Some((be_u32(&d[2..]), be_u32(&d[6..]), be_u32(&d[10..])));
                    }
                    INFO_EXPORT | INFO_BLOCK_SIZE => {
                        return Err(protocol(format!("NBD_REP_INFO of {} bytes", d.len())))
                    }
                    _ => {}
                },
                REP_ACK => break,
                other => return Err(protocol(format!("NBD_OPT_GO answered {other:#x}"))),
            }
        }
        let (size_bytes, flags) =
            info.ok_or_else(|| protocol("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT"))?;
        Ok(ExportInfo {
            size_bytes,
            flags,
            block_size,
        })
    }

    /// `NBD_OPT_EXPORT_NAME` (the oldest way in, which every server
    /// knows): the export's size and flags. Transmission starts; a server
    /// that does not know the export closes the connection.
    pub async fn export_name(&mut self, export: &str) -> Result<ExportInfo, ClientError> {
        let len = u32::try_from(export.len()).map_err(|_| protocol("export name too long"))?;
        let mut b = Vec::with_capacity(OPTION_HEADER_BYTES + export.len());
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(export.as_bytes());
        self.stream.write_all(&b).await?;
        self.stream.flush().await?;
        let mut reply = [0u8; 10];
        self.stream.read_exact(&mut reply).await?;
        if !self.no_zeroes {
            let mut zeroes = [0u8; EXPORT_NAME_ZEROES];
            self.stream.read_exact(&mut zeroes).await?;
        }
        Ok(ExportInfo {
            size_bytes: be_u64(&reply),
            flags: be_u16(&reply[8..]),
            block_size: None,
        })
    }

    // ----- transmission -----------------------------------------------------

    /// Appends a request to `out` (to be sent later, alone or with others);
    /// returns its cookie. A READ's length is remembered for its reply.
    pub fn encode(
        &mut self,
        out: &mut Vec<u8>,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> u64 {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        if command == CMD_READ {
            self.expect_read(cookie, length as usize);
        }
        let h = RequestHeader {
            flags,
            command,
            cookie,
            offset,
            length,
        };
        out.extend_from_slice(&h.encode());
        out.extend_from_slice(payload);
        cookie
    }

    /// Notes that the request `cookie`, sent by hand, is a READ of `len`
    /// bytes (a simple reply does not say how much data follows it).
    pub fn expect_read(&mut self, cookie: u64, len: usize) {
        self.reads.insert(cookie, len);
    }

    /// Sends one request; returns its cookie.
    pub async fn send(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> Result<u64, ClientError> {
        let mut b = Vec::with_capacity(REQUEST_HEADER_BYTES + payload.len());
        let cookie = self.encode(&mut b, command, flags, offset, length, payload);
        self.stream.write_all(&b).await?;
        self.stream.flush().await?;
        Ok(cookie)
    }

    /// Reads the next reply, simple or structured (all of its chunks).
    pub async fn reply(&mut self) -> Result<Reply, ClientError> {
        let magic = self.stream.read_u32().await?;
        if magic == SIMPLE_REPLY_MAGIC {
            let error = self.stream.read_u32().await?;
            let cookie = self.stream.read_u64().await?;
            let len = self.reads.remove(&cookie).unwrap_or(0);
            let mut data = Vec::new();
            if error == 0 && len > 0 {
                data = vec![0; len];
                self.stream.read_exact(&mut data).await?;
            }
            return Ok(Reply {
                cookie,
                error,
                data,
                extents: Vec::new(),
                status: Vec::new(),
                simple: true,
            });
        }
        if magic != STRUCTURED_REPLY_MAGIC {
            return Err(protocol(format!("reply magic {magic:#x}")));
        }
        if !self.structured {
            return Err(protocol("a structured reply without negotiation"));
        }
        let mut r = Reply::default();
        loop {
            let flags = self.stream.read_u16().await?;
            let chunk_type = self.stream.read_u16().await?;
            r.cookie = self.stream.read_u64().await?;
            let len = self.stream.read_u32().await?;
            if len > MAX_CHUNK_BYTES {
                return Err(protocol(format!("a reply chunk of {len} bytes")));
            }
            let mut p = vec![0; len as usize];
            self.stream.read_exact(&mut p).await?;
            Self::chunk(&mut r, chunk_type, &p)?;
            if flags & REPLY_FLAG_DONE != 0 {
                break;
            }
            let magic = self.stream.read_u32().await?;
            if magic != STRUCTURED_REPLY_MAGIC {
                return Err(protocol(format!("chunk magic {magic:#x}")));
            }
        }
        self.reads.remove(&r.cookie);
        Ok(r)
    }

    /// Adds one structured reply chunk's payload `p` to `r`.
    fn chunk(r: &mut Reply, chunk_type: u16, p: &[u8]) -> Result<(), ClientError> {
        let short = |what: &str| protocol(format!("{what} chunk of {} bytes", p.len()));
        match chunk_type {
            REPLY_TYPE_NONE if p.is_empty() => {}
            REPLY_TYPE_NONE => return Err(short("a NONE")),
            REPLY_TYPE_OFFSET_DATA if p.len() >= 8 => r.data.extend_from_slice(&p[8..]),
            REPLY_TYPE_OFFSET_DATA => return Err(short("an OFFSET_DATA")),
            REPLY_TYPE_BLOCK_STATUS if p.len() >= 12 && (p.len() - 4).is_multiple_of(8) => {
                let descriptors: Vec<(u32, u32)> = p[4..]
                    .chunks_exact(8)
                    .map(|d| (be_u32(d), be_u32(&d[4..])))
                    .collect();
                r.extents.extend_from_slice(&descriptors);
                r.status.push((be_u32(p), descriptors));
            }
            REPLY_TYPE_BLOCK_STATUS => return Err(short("a BLOCK_STATUS")),
            REPLY_TYPE_ERROR if p.len() >= 6 && 6 + usize::from(be_u16(&p[4..])) <= p.len() => {
                r.error = be_u32(p);
            }
            REPLY_TYPE_ERROR => return Err(short("an ERROR")),
            other => return Err(protocol(format!("reply chunk type {other}"))),
        }
        Ok(())
    }

    /// Sends one request and reads its reply (nothing else in flight).
    pub async fn call(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> Result<Reply, ClientError> {
        let cookie = self.send(command, flags, offset, length, payload).await?;
        let r = self.reply().await?;
        if r.cookie != cookie {
            return Err(protocol(format!(
                "a reply to request {} where {cookie} was the only one",
                r.cookie
            )));
        }
        Ok(r)
    }

    /// [`Self::call`], an NBD error being a [`ClientError::Nbd`].
    async fn call_ok(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> Result<Reply, ClientError> {
        let r = self.call(command, flags, offset, length, payload).await?;
        if r.error != 0 {
            return Err(ClientError::Nbd {
                command,
                offset,
                length,
                errno: r.error,
            });
        }
        Ok(r)
    }

    /// Reads `length` bytes at `offset`.
    pub async fn read(&mut self, offset: u64, length: u32) -> Result<Vec<u8>, ClientError> {
        let r = self.call_ok(CMD_READ, 0, offset, length, &[]).await?;
        if r.data.len() != length as usize {
            return Err(protocol(format!(
                "a READ of {length} bytes answered with {}",
                r.data.len()
            )));
        }
        Ok(r.data)
    }

    /// Writes `data` at `offset` with the command `flags` (`CMD_FLAG_FUA`).
    pub async fn write(&mut self, offset: u64, data: &[u8], flags: u16) -> Result<(), ClientError> {
        let length = u32::try_from(data.len()).map_err(|_| protocol("a write over 4 GiB"))?;
        self.call_ok(CMD_WRITE, flags, offset, length, data)
            .await
            .map(drop)
    }

    /// `NBD_CMD_FLUSH`.
    pub async fn flush(&mut self) -> Result<(), ClientError> {
        self.call_ok(CMD_FLUSH, 0, 0, 0, &[]).await.map(drop)
    }

    /// `NBD_CMD_TRIM` of `length` bytes at `offset`.
    pub async fn trim(&mut self, offset: u64, length: u32) -> Result<(), ClientError> {
        self.call_ok(CMD_TRIM, 0, offset, length, &[])
            .await
            .map(drop)
    }

    /// `NBD_CMD_DISC`: the server closes the connection after the requests
    /// before it (no reply).
    pub async fn disconnect(&mut self) -> Result<(), ClientError> {
        self.send(CMD_DISC, 0, 0, 0, &[]).await.map(drop)
    }
}

impl<S> fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("server_flags", &self.server_flags)
            .field("structured", &self.structured)
            .field("reads_in_flight", &self.reads.len())
            .finish()
    }
}
