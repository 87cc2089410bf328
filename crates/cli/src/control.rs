//! The control socket of `zftl serve` (protocol: `docs/control.md`,
//! `zftl::control`): a Unix socket, mode 0600, taking JSON-lines requests
//! and answering each with one line, in order, per connection.
//!
//! Bounds: at most [`MAX_CONNECTIONS`] connections (one more is answered
//! `busy` and closed), one request at a time per connection (so at most
//! that many in the FTL), lines of at most `MAX_LINE_BYTES` (a longer one
//! is answered `too_long` and its connection closed). A connection that
//! sends no request for [`IDLE_TIMEOUT`], or does not take a reply within
//! [`WRITE_TIMEOUT`], is closed, so clients that went away without closing
//! cannot hold every slot. On shutdown the
//! listener closes, each connection finishes the request it is running
//! and closes; the FTL shuts down after them.
//!
//! The socket file is created with mode 0600 from the start (the socket is
//! `fchmod`ed before `bind`, which Linux applies to the file it creates),
//! replaces a stale file of a server that is gone (nobody accepts on it),
//! refuses one that a live server listens on, and is removed when the
//! server exits (if it is still the file this server made).

use std::future::Future;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener as StdListener, UnixStream as StdStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::{debug, info, warn};
use zftl::control::{
    error_line, parse_line, reply_line, Command, ControlError, ErrorKind, MAX_LINE_BYTES,
};

use crate::error::CliError;
use crate::serve::Settings;

/// Most control connections open at once.
pub const MAX_CONNECTIONS: usize = 16;
/// A connection with no request line for this long is closed (a request
/// that is running does not count: a large range operation takes its time).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);
/// A reply the client does not take within this long closes its connection.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// `settings` with the default control socket of an image served from
/// `image` (its path with `.control` appended), unless one is given or
/// none is wanted.
pub fn with_default_path(settings: &Settings, image: &Path) -> Settings {
    let mut s = settings.clone();
    if s.control.is_none() && !s.no_control {
        let mut name = image.as_os_str().to_owned();
        name.push(".control");
        s.control = Some(PathBuf::from(name));
    }
    s
}

/// What runs a request: the served FTL.
pub trait Executor: Clone + Send + Sync + 'static {
    fn execute(
        &self,
        command: Command,
    ) -> impl Future<Output = Result<Map<String, Value>, ControlError>> + Send;
}

/// The served FTL as the socket sees it: on a `--read-only` export range
/// operations and snapshot creates, deletes and reverts are refused
/// (`read_only`), as NBD writes are; `ping`, `stats`, `attrs`,
/// `snapshots`, `snapshot_read` and `snapshot_diff` still answer. The
/// `ping` reply also names the NBD export and its URI, so that a client
/// can name a snapshot's view (`EXPORT@NAME`).
#[derive(Clone)]
pub struct Served<T> {
    pub target: T,
    pub read_only: bool,
    pub export: Option<ServedExport>,
}

/// The NBD export a server serves beside its control socket.
#[derive(Clone, Debug)]
pub struct ServedExport {
    /// Its name.
    pub name: String,
    /// `nbd://ADDR/NAME`, or `nbds://` when clients must use TLS.
    pub uri: String,
}

impl<T: Executor> Executor for Served<T> {
    async fn execute(&self, command: Command) -> Result<Map<String, Value>, ControlError> {
        if self.read_only && command.writes() {
            return Err(ControlError::new(
                ErrorKind::ReadOnly,
                "the volume is served read-only (--read-only): range operations and \
                 snapshot creates, deletes and reverts are refused",
            ));
        }
        let ping = matches!(command, Command::Ping);
        let mut body = self.target.execute(command).await?;
        if let (true, Some(e)) = (ping, &self.export) {
            body.insert("export".into(), e.name.clone().into());
            body.insert("uri".into(), e.uri.clone().into());
        }
        Ok(body)
    }
}

/// A bound control socket. Dropping it removes the socket file (if the file
/// at the path is still this one).
pub struct ControlSocket {
    listener: Option<StdListener>,
    path: PathBuf,
    /// `(dev, ino)` of the file bound.
    file: (u64, u64),
    timeouts: Timeouts,
}

/// How long a connection may sit idle, and take to accept a reply.
#[derive(Clone, Copy, Debug)]
struct Timeouts {
    idle: Duration,
    write: Duration,
}

fn socket_error(path: &Path, reason: impl std::fmt::Display) -> CliError {
    CliError::InvalidArgument(format!("control socket {}: {reason}", path.display()))
}

impl ControlSocket {
    /// Binds `path` (mode 0600), replacing a stale socket file.
    pub fn bind(path: &Path) -> Result<ControlSocket, CliError> {
        clear_stale(path)?;
        let listener = bind_0600(path).map_err(|e| socket_error(path, e))?;
        // Where fchmod before bind has no effect, this still closes the
        // window quickly; on Linux the file was made 0600.
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| socket_error(path, format!("chmod 0600: {e}")))?;
        let meta = std::fs::symlink_metadata(path).map_err(|e| socket_error(path, e))?;
        Ok(ControlSocket {
            listener: Some(listener),
            path: path.to_path_buf(),
            file: (meta.dev(), meta.ino()),
            timeouts: Timeouts {
                idle: IDLE_TIMEOUT,
                write: WRITE_TIMEOUT,
            },
        })
    }

    /// Other limits than [`IDLE_TIMEOUT`] and [`WRITE_TIMEOUT`] (tests).
    #[cfg(test)]
    fn with_timeouts(mut self, idle: Duration, write: Duration) -> ControlSocket {
        self.timeouts = Timeouts { idle, write };
        self
    }

    /// Serves requests with `target` until `stop` turns true; then lets
    /// each connection finish the request it is running. Call inside a
    /// tokio runtime.
    pub async fn serve<T: Executor>(
        &mut self,
        target: T,
        stop: watch::Receiver<bool>,
    ) -> io::Result<()> {
        let std = self.listener.take().expect("served once");
        std.set_nonblocking(true)?;
        let listener = UnixListener::from_std(std)?;
        info!(control = %self.path.display(), "control socket (JSON lines, docs/control.md)");
        accept_loop(listener, target, stop, self.timeouts).await;
        Ok(())
    }
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path)
            .is_ok_and(|m| (m.dev(), m.ino()) == self.file && m.file_type().is_socket());
        if ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                warn!(control = %self.path.display(), error = %e, "cannot remove the control socket");
            }
        }
    }
}

/// Removes a socket file nobody listens on; refuses a live one and
/// anything that is not a socket.
fn clear_stale(path: &Path) -> Result<(), CliError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(socket_error(path, e)),
    };
    if !meta.file_type().is_socket() {
        return Err(socket_error(
            path,
            "exists and is not a socket; remove it or choose another --control path",
        ));
    }
    match StdStream::connect(path) {
        Ok(_) => Err(socket_error(
            path,
            "in use: another zftl serve listens on it (stop it, or choose another --control path)",
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            info!(control = %path.display(), "replacing a stale control socket");
            std::fs::remove_file(path).map_err(|e| socket_error(path, format!("remove stale: {e}")))
        }
        Err(e) => Err(socket_error(
            path,
            format!("exists and cannot be probed: {e}"),
        )),
    }
}

/// A listening Unix socket at `path` whose file is created with mode 0600.
fn bind_0600(path: &Path) -> io::Result<StdListener> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC,
        None,
    )?;
    rustix::fs::fchmod(&fd, rustix::fs::Mode::from_raw_mode(0o600))?;
    let addr = SocketAddrUnix::new(path).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("not a usable socket path (at most 107 bytes): {e}"),
        )
    })?;
    rustix::net::bind(&fd, &addr)?;
    rustix::net::listen(&fd, 64)?;
    Ok(StdListener::from(fd))
}

async fn accept_loop<T: Executor>(
    listener: UnixListener,
    target: T,
    stop: watch::Receiver<bool>,
    timeouts: Timeouts,
) {
    let mut connections = JoinSet::new();
    let mut stopped = stop.clone();
    loop {
        tokio::select! {
            () = stopping(&mut stopped) => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    while connections.try_join_next().is_some() {}
                    if connections.len() >= MAX_CONNECTIONS {
                        refuse(&stream);
                        continue;
                    }
                    connections.spawn(connection(stream, target.clone(), stop.clone(), timeouts));
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little
                    // rather than spin.
                    warn!(error = %e, "control socket: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
}

/// Completes once `stop` turns true (or its sender is gone).
async fn stopping(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// Answers a connection over the limit with one `busy` line and closes it.
fn refuse(stream: &UnixStream) {
    let error = ControlError::new(
        ErrorKind::Busy,
        format!("too many control connections (at most {MAX_CONNECTIONS})"),
    );
    let line = error_line(None, &error) + "\n";
    // Best effort: a fresh socket's buffer takes one short line.
    let _ = stream.try_write(line.as_bytes());
    debug!("control connection refused: {MAX_CONNECTIONS} open");
}

/// One line read from a connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Line {
    /// The bytes before the newline (or before the end of the stream).
    Complete,
    /// Longer than the limit; the rest of it was not read.
    TooLong,
    /// The stream ended.
    End,
}

/// Reads one line into `buf`, keeping at most `MAX_LINE_BYTES + 1` bytes (a
/// line may end in `\r\n`).
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    buf: &mut Vec<u8>,
) -> io::Result<Line> {
    const CAP: usize = MAX_LINE_BYTES + 1;
    buf.clear();
    loop {
        let chunk = r.fill_buf().await?;
        if chunk.is_empty() {
            return Ok(if buf.is_empty() {
                Line::End
            } else {
                Line::Complete
            });
        }
        let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
            Some(i) => (i, true),
            None => (chunk.len(), false),
        };
        if buf.len() + take > CAP {
            let n = chunk.len();
            r.consume(n);
            return Ok(Line::TooLong);
        }
        buf.extend_from_slice(&chunk[..take]);
        r.consume(if done { take + 1 } else { take });
        if done {
            return Ok(Line::Complete);
        }
    }
}

async fn connection<T: Executor>(
    stream: UnixStream,
    target: T,
    mut stop: watch::Receiver<bool>,
    timeouts: Timeouts,
) {
    let (r, mut w) = stream.into_split();
    let mut r = BufReader::with_capacity(64 << 10, r);
    let mut buf = Vec::new();
    loop {
        let line = tokio::select! {
            () = stopping(&mut stop) => return,
            line = tokio::time::timeout(timeouts.idle, read_line(&mut r, &mut buf)) => match line {
                Ok(line) => line,
                Err(_) => {
                    debug!("control connection closed: idle for {:?}", timeouts.idle);
                    let _ = w.shutdown().await;
                    return;
                }
            },
        };
        let (reply, close) = match line {
            Ok(Line::End) | Err(_) => return,
            Ok(Line::TooLong) => {
                let e = ControlError::new(
                    ErrorKind::TooLong,
                    format!("request line longer than {MAX_LINE_BYTES} bytes; closing"),
                );
                (error_line(None, &e), true)
            }
            Ok(Line::Complete) if *stop.borrow() => {
                let e = ControlError::new(ErrorKind::ShuttingDown, "the server is shutting down");
                (error_line(None, &e), true)
            }
            Ok(Line::Complete) => match parse_line(&buf) {
                Ok(p) => {
                    let outcome = target.execute(p.command).await;
                    if let Err(e) = &outcome {
                        debug!(kind = %e.kind, "control request failed: {}", e.message);
                    }
                    (reply_line(p.id.as_ref(), &outcome), false)
                }
                Err(rejected) => {
                    let close = rejected.error.kind == ErrorKind::TooLong;
                    (error_line(rejected.id.as_ref(), &rejected.error), close)
                }
            },
        };
        let line = reply + "\n";
        let written = tokio::time::timeout(timeouts.write, w.write_all(line.as_bytes())).await;
        if !matches!(written, Ok(Ok(()))) || close {
            let _ = w.shutdown().await;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_read_whole_and_bounded() {
        let mut input = b"{\"op\":\"ping\"}\r\n\nlast".to_vec();
        let mut long = vec![b'x'; MAX_LINE_BYTES + 2];
        long.push(b'\n');
        let mut r = BufReader::with_capacity(4096, &input[..]);
        let mut buf = Vec::new();
        assert_eq!(read_line(&mut r, &mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"{\"op\":\"ping\"}\r");
        assert_eq!(read_line(&mut r, &mut buf).await.unwrap(), Line::Complete);
        assert!(buf.is_empty());
        assert_eq!(read_line(&mut r, &mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf, b"last");
        assert_eq!(read_line(&mut r, &mut buf).await.unwrap(), Line::End);
        input = long;
        let mut r = BufReader::with_capacity(4096, &input[..]);
        assert_eq!(read_line(&mut r, &mut buf).await.unwrap(), Line::TooLong);
        assert!(buf.len() <= MAX_LINE_BYTES + 1);
        // Exactly the limit plus a carriage return is one line.
        let mut ok = vec![b' '; MAX_LINE_BYTES];
        ok.extend_from_slice(b"\r\n");
        let mut r = BufReader::with_capacity(4096, &ok[..]);
        assert_eq!(read_line(&mut r, &mut buf).await.unwrap(), Line::Complete);
        assert_eq!(buf.len(), MAX_LINE_BYTES + 1);
    }

    /// Answers every request with an empty body.
    #[derive(Clone)]
    struct Nothing;

    impl Executor for Nothing {
        async fn execute(&self, _: Command) -> Result<Map<String, Value>, ControlError> {
            Ok(Map::new())
        }
    }

    /// Sends a ping, returns the reply.
    async fn ping(s: &mut UnixStream) -> String {
        use tokio::io::AsyncReadExt;
        s.write_all(b"{\"op\":\"ping\"}\n").await.unwrap();
        let mut reply = [0u8; 256];
        let n = s.read(&mut reply).await.unwrap();
        String::from_utf8_lossy(&reply[..n]).into_owned()
    }

    #[tokio::test]
    async fn an_idle_connection_is_closed_and_a_busy_one_is_not() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl");
        let idle = Duration::from_millis(300);
        let mut socket = ControlSocket::bind(&path)
            .unwrap()
            .with_timeouts(idle, Duration::from_secs(5));
        let (stop_tx, stop) = watch::channel(false);
        let server = tokio::spawn(async move { socket.serve(Nothing, stop).await });
        let mut quiet = UnixStream::connect(&path).await.unwrap();
        let mut busy = UnixStream::connect(&path).await.unwrap();
        assert!(ping(&mut quiet).await.contains("\"ok\":true"));
        // `busy` sends a request every third of the limit, across twice the
        // limit: it stays open; `quiet` says nothing and is closed.
        for _ in 0..6 {
            tokio::time::sleep(idle / 3).await;
            assert!(ping(&mut busy).await.contains("\"ok\":true"));
        }
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), quiet.read_to_end(&mut rest))
            .await
            .expect("the idle connection was closed")
            .unwrap();
        assert_eq!(n, 0, "nothing more on the idle connection");
        stop_tx.send(true).unwrap();
        server.await.unwrap().unwrap();
    }

    fn settings(argv: &[&str]) -> Settings {
        use clap::Parser;
        let argv = ["zftl", "serve"].iter().chain(argv).copied();
        match crate::args::Cli::try_parse_from(argv).unwrap().command {
            Some(crate::args::Command::Serve(a)) => Settings::from_args(&a).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_default_socket_sits_next_to_the_image() {
        let img = Path::new("/data/vol.img");
        let s = with_default_path(&settings(&[]), img);
        assert_eq!(s.control, Some(PathBuf::from("/data/vol.img.control")));
        let s = with_default_path(&settings(&["--control", "/run/z.sock"]), img);
        assert_eq!(s.control, Some(PathBuf::from("/run/z.sock")));
        let s = with_default_path(&settings(&["--no-control"]), img);
        assert_eq!(s.control, None);
        // --memory-mib and --device get none unless asked (run_until adds
        // the default for images only).
        assert_eq!(settings(&["--memory-mib", "64"]).control, None);
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("serve.toml");
        std::fs::write(&cfg, "control = \"ctl/z.sock\"\n").unwrap();
        let s = settings(&["--config", cfg.to_str().unwrap()]);
        assert_eq!(s.control, Some(dir.path().join("ctl/z.sock")));
        let s = settings(&["--config", cfg.to_str().unwrap(), "--control", "x"]);
        assert_eq!(s.control, Some(PathBuf::from("x")));
    }

    #[test]
    fn bind_makes_a_0600_socket_replaces_stale_ones_and_refuses_live_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.control");
        let first = ControlSocket::bind(&path).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        // Live: someone listens (the backlog accepts the probe).
        let e = ControlSocket::bind(&path).err().unwrap().to_string();
        assert!(e.contains("in use"), "{e}");
        // Stale: the listener is gone but the file stayed (as after kill -9).
        drop(first);
        assert!(!path.exists(), "removed when dropped");
        drop(StdListener::bind(&path).unwrap());
        assert!(path.exists());
        let second = ControlSocket::bind(&path).unwrap();
        assert!(StdStream::connect(&path).is_ok());
        drop(second);
        assert!(!path.exists(), "removed at exit");
        // Not a socket: left alone.
        std::fs::write(&path, b"data").unwrap();
        let e = ControlSocket::bind(&path).err().unwrap().to_string();
        assert!(e.contains("not a socket"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"data");
        // Too long for a socket address.
        let long = dir.path().join("x".repeat(120));
        let e = ControlSocket::bind(&long).err().unwrap().to_string();
        assert!(e.contains("107 bytes"), "{e}");
    }
}
