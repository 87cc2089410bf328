//! A connection's replies on their way to the socket, sent by the
//! connection's reader task itself.
//!
//! The reader sends what is ready just before each read from the socket and
//! whenever it waits (for the socket, or for room under the in-flight
//! bounds). So a client that waits for replies before it sends more gets
//! them while the next requests arrive and run, instead of after the whole
//! burst it sent (a reply task on the same runtime thread would only run
//! once the reader ran dry); and the replies of a burst of small requests
//! still leave in one send. Requests that finish on their own tasks queue
//! their replies on the channel, whose wakeup brings the reader here.
//!
//! One exception: a few small replies are held back for the next read
//! while the socket already holds two more requests' worth of bytes beyond
//! it ([`Backlog`], FIONREAD). A client that sent that much keeps the
//! server busy for two more requests, so holding its replies costs it no
//! throughput, and on loopback a send also delivers to the client and
//! wakes it: with 128 KiB writes at iodepth 16, one send per reply took a
//! fifth of the server thread. A client with few requests in flight never
//! has that backlog, so it gets every reply at once: fixed batches (held
//! whatever the backlog) cost such clients their pipelining (128 KiB
//! writes at iodepth 4: 26 K IOPS against 36 K), since the server cannot
//! see a client's depth, only what the client has sent.
//!
//! Bounded: the outbox takes replies off the channel only while it holds
//! less than [`MAX_QUEUED_BYTES`]; past that the reader stops reading
//! requests until the socket takes more ([`Duplex`]).

use std::collections::VecDeque;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

use crate::transmission::{Outgoing, Permits};

/// Replies held before the reader stops reading requests.
pub(crate) const MAX_QUEUED_BYTES: usize = 1 << 20;

/// Small replies are copied together into chunks up to this size (one
/// send); larger read data goes out from its own buffer.
const COALESCE_BYTES: usize = 64 << 10;

/// Replies held back at most while the client keeps sending (a send per
/// this many replies at best).
const MAX_HELD_REPLIES: usize = 4;

/// A read counts as at least this large when the backlog it needs is
/// weighed: a header read alone must not hold replies on a few bytes.
const MIN_READ_BYTES: u64 = 64 << 10;

/// Bytes on their way out; the permits of the replies they end are
/// released once they are written.
struct Chunk {
    bytes: Vec<u8>,
    permits: Vec<Permits>,
}

pub(crate) struct Outbox<W> {
    w: W,
    rx: mpsc::Receiver<Outgoing>,
    chunks: VecDeque<Chunk>,
    /// Bytes of the front chunk already written.
    written: usize,
    queued_bytes: usize,
    /// Replies queued since the outbox was last empty.
    queued_replies: usize,
    /// Every sender is gone: no reply will come any more.
    closed: bool,
    /// The socket failed; nothing more is written.
    failed: Option<io::ErrorKind>,
}

impl<W: AsyncWrite + Unpin> Outbox<W> {
    pub(crate) fn new(w: W, rx: mpsc::Receiver<Outgoing>) -> Self {
        Outbox {
            w,
            rx,
            chunks: VecDeque::new(),
            written: 0,
            queued_bytes: 0,
            queued_replies: 0,
            closed: false,
            failed: None,
        }
    }

    /// Queues a reply: from the channel, or a refusal straight from the reader.
    pub(crate) fn push(&mut self, m: Outgoing) {
        let permits = m.permits;
        self.queued_replies += 1;
        self.queue_bytes(&m.head);
        match m.data {
            Some(d) if d.len() > COALESCE_BYTES => {
                self.queued_bytes += d.len();
                self.chunks.push_back(Chunk {
                    bytes: d,
                    permits: Vec::new(),
                });
            }
            Some(d) => self.queue_bytes(&d),
            None => {}
        }
        if let Some(p) = permits {
            match self.chunks.back_mut() {
                Some(c) => c.permits.push(p),
                None => drop(p), // nothing to send: done at once
            }
        }
    }

    fn queue_bytes(&mut self, b: &[u8]) {
        if b.is_empty() {
            return; // an empty chunk would read as a socket taking nothing
        }
        self.queued_bytes += b.len();
        match self.chunks.back_mut() {
            Some(c) if c.bytes.len() + b.len() <= COALESCE_BYTES => c.bytes.extend_from_slice(b),
            _ => {
                let mut bytes = Vec::with_capacity(b.len().clamp(4096, COALESCE_BYTES));
                bytes.extend_from_slice(b);
                self.chunks.push_back(Chunk {
                    bytes,
                    permits: Vec::new(),
                });
            }
        }
    }

    /// Whether the outbox holds so much that the reader should wait.
    pub(crate) fn full(&self) -> bool {
        self.queued_bytes >= MAX_QUEUED_BYTES
    }

    /// Takes the replies ready on the channel and writes all it can.
    /// `Ready(Ok)`: nothing is left to write for now (the channel's waker is
    /// registered); `Pending`: the socket is full (its waker is registered).
    pub(crate) fn poll_send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(kind) = self.failed {
            // Nothing reaches the client any more: replies are dropped as
            // they come, so that their permits free up.
            while let Poll::Ready(Some(_)) = self.rx.poll_recv(cx) {}
            return Poll::Ready(Err(kind.into()));
        }
        loop {
            self.gather(cx);
            let Some(front) = self.chunks.front() else {
                self.queued_replies = 0;
                return Poll::Ready(Ok(()));
            };
            match Pin::new(&mut self.w).poll_write(cx, &front.bytes[self.written..]) {
                Poll::Ready(Ok(0)) => return self.fail(io::ErrorKind::WriteZero),
                Poll::Ready(Ok(n)) => {
                    self.written += n;
                    self.queued_bytes -= n;
                    if self.written == front.bytes.len() {
                        self.chunks.pop_front(); // releases its permits
                        self.written = 0;
                    }
                }
                Poll::Ready(Err(e)) => return self.fail(e.kind()),
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// Takes the replies ready on the channel (registering its waker when
    /// there are none) while there is room.
    fn gather(&mut self, cx: &mut Context<'_>) {
        while !self.full() && !self.closed {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(m)) => self.push(m),
                Poll::Ready(None) => self.closed = true,
                Poll::Pending => break,
            }
        }
    }

    /// Whether the replies queued may wait for the next read: a few small
    /// ones, none of them partly written, and what waits on the socket
    /// (`backlog`, asked only then) beyond the `read_bytes` about to be
    /// read is two more reads' worth (see the module doc).
    fn may_hold(&self, read_bytes: usize, backlog: impl FnOnce() -> Option<u64>) -> bool {
        let read_bytes = (read_bytes as u64).max(MIN_READ_BYTES);
        self.failed.is_none()
            && (1..MAX_HELD_REPLIES).contains(&self.queued_replies)
            && self.queued_bytes <= COALESCE_BYTES
            && self.written == 0
            && backlog().is_some_and(|b| b >= 3 * read_bytes)
    }

    fn fail(&mut self, kind: io::ErrorKind) -> Poll<io::Result<()>> {
        self.failed = Some(kind);
        self.chunks.clear();
        self.queued_bytes = 0;
        self.queued_replies = 0;
        Poll::Ready(Err(kind.into()))
    }

    /// Sends every reply still to come (each request in flight holds a
    /// sender), then shuts the write side down.
    pub(crate) async fn finish(mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| match self.poll_send(cx) {
            Poll::Ready(Ok(())) if self.closed && self.chunks.is_empty() => Poll::Ready(Ok(())),
            Poll::Ready(Ok(())) => Poll::Pending, // waits on the channel
            other => other,
        })
        .await?;
        tokio::io::AsyncWriteExt::shutdown(&mut self.w).await
    }
}

/// What the client has sent that the server has not read yet, in bytes:
/// the socket's FIONREAD.
pub(crate) enum Backlog {
    /// No way to tell (TLS, a stream that is not a socket): every reply
    /// leaves before the next read.
    Unknown,
    #[cfg(unix)]
    Socket(std::os::fd::OwnedFd),
    /// A fixed figure, for tests.
    #[cfg(test)]
    Fixed(u64),
}

impl Backlog {
    /// The backlog of `socket`, through a duplicate of its descriptor (the
    /// stream itself is split and wrapped later).
    pub(crate) fn of(socket: &tokio::net::TcpStream) -> Backlog {
        #[cfg(unix)]
        if let Ok(fd) = std::os::fd::AsFd::as_fd(socket).try_clone_to_owned() {
            return Backlog::Socket(fd);
        }
        let _ = socket;
        Backlog::Unknown
    }

    fn bytes(&self) -> Option<u64> {
        match self {
            Backlog::Unknown => None,
            #[cfg(unix)]
            Backlog::Socket(fd) => rustix::io::ioctl_fionread(fd).ok(),
            #[cfg(test)]
            Backlog::Fixed(n) => Some(*n),
        }
    }
}

/// The socket as the reader sees it: each read first sends the replies that
/// are ready (unless the backlog lets a few wait), and while the outbox is
/// full, reading waits for the socket to take replies.
pub(crate) struct Duplex<R, W> {
    pub(crate) r: R,
    pub(crate) out: Outbox<W>,
    pub(crate) backlog: Backlog,
    /// The last read took less than it asked for: the socket ran dry, so
    /// it is not worth asking for a backlog.
    pub(crate) ran_dry: bool,
}

impl<R, W: AsyncWrite + Unpin> Duplex<R, W> {
    /// Whether the replies queued may wait for this read (of up to
    /// `read_bytes`); asks the socket only when there are some.
    fn hold(&mut self, cx: &mut Context<'_>, read_bytes: usize) -> bool {
        if self.ran_dry || matches!(self.backlog, Backlog::Unknown) {
            return false;
        }
        self.out.gather(cx);
        self.out.may_hold(read_bytes, || self.backlog.bytes())
    }
}

impl<R: AsyncRead + Unpin, W: AsyncWrite + Unpin> AsyncRead for Duplex<R, W> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.hold(cx, buf.remaining()) {
            // Never waits with replies held: a read that would wait sends
            // them first, below.
            if let ready @ Poll::Ready(_) = Pin::new(&mut this.r).poll_read(cx, buf) {
                this.ran_dry = buf.remaining() > 0;
                return ready;
            }
        }
        match this.out.poll_send(cx) {
            // A failed write side: the read side is about to fail too;
            // reading on lets the reader see the end of the stream.
            Poll::Ready(_) => {}
            Poll::Pending if this.out.full() => return Poll::Pending,
            Poll::Pending => {}
        }
        let read = Pin::new(&mut this.r).poll_read(cx, buf);
        if read.is_ready() {
            this.ran_dry = buf.remaining() > 0;
        }
        read
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use tokio::sync::Semaphore;

    /// A socket write side that records each write, or takes nothing.
    #[derive(Default)]
    struct Sink {
        writes: Vec<Vec<u8>>,
        full: bool,
        broken: bool,
    }

    impl AsyncWrite for Sink {
        fn poll_write(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            if self.broken {
                return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
            }
            if self.full {
                return Poll::Pending;
            }
            self.writes.push(buf.to_vec());
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn reply(head: &[u8], data: Option<Vec<u8>>, permits: &Arc<Semaphore>) -> Outgoing {
        Outgoing {
            head: head.to_vec(),
            data,
            permits: Some(Permits {
                _request: Arc::clone(permits).try_acquire_owned().expect("a permit"),
                _bytes: None,
            }),
        }
    }

    fn cx() -> Context<'static> {
        Context::from_waker(std::task::Waker::noop())
    }

    #[test]
    fn small_replies_leave_in_one_write_and_big_data_from_its_own_buffer() {
        let permits = Arc::new(Semaphore::new(8));
        let (tx, rx) = mpsc::channel(8);
        let mut out = Outbox::new(Sink::default(), rx);
        tx.try_send(reply(b"aa", None, &permits)).unwrap();
        tx.try_send(reply(b"bb", Some(vec![1; 10]), &permits))
            .unwrap();
        let big = vec![7u8; COALESCE_BYTES + 1];
        tx.try_send(reply(b"cc", Some(big.clone()), &permits))
            .unwrap();
        tx.try_send(reply(b"dd", None, &permits)).unwrap();
        assert_eq!(permits.available_permits(), 4);
        assert!(out.poll_send(&mut cx()).is_ready());
        let mut first = b"aabb".to_vec();
        first.extend_from_slice(&[1; 10]);
        first.extend_from_slice(b"cc");
        assert_eq!(out.w.writes, vec![first, big, b"dd".to_vec()]);
        assert_eq!(
            permits.available_permits(),
            8,
            "written replies free their permits"
        );
        drop(tx);
        assert!(out.poll_send(&mut cx()).is_ready());
        assert!(out.closed);
    }

    #[test]
    fn a_full_socket_keeps_replies_and_permits_and_stops_the_reader() {
        let permits = Arc::new(Semaphore::new(64));
        let (tx, rx) = mpsc::channel(64);
        let sink = Sink {
            full: true,
            ..Sink::default()
        };
        let mut socket = Duplex {
            r: &b"request bytes"[..],
            out: Outbox::new(sink, rx),
            backlog: Backlog::Unknown,
            ran_dry: true,
        };
        let mut buf = [0u8; 4];
        let mut read = ReadBuf::new(&mut buf);
        assert!(
            Pin::new(&mut socket)
                .poll_read(&mut cx(), &mut read)
                .is_ready(),
            "little queued: reading goes on"
        );
        let chunk = vec![0u8; COALESCE_BYTES + 1];
        for _ in 0..MAX_QUEUED_BYTES / chunk.len() + 1 {
            tx.try_send(reply(b"h", Some(chunk.clone()), &permits))
                .unwrap();
        }
        let mut read = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut socket)
            .poll_read(&mut cx(), &mut read)
            .is_pending());
        assert!(socket.out.full());
        assert!(
            permits.available_permits() < 64,
            "unwritten replies keep their permits"
        );
        socket.out.w.full = false;
        let mut read = ReadBuf::new(&mut buf);
        assert!(Pin::new(&mut socket)
            .poll_read(&mut cx(), &mut read)
            .is_ready());
        assert_eq!(permits.available_permits(), 64);
        assert!(!socket.out.full());
    }

    #[test]
    fn an_empty_reply_writes_nothing_and_frees_its_permit() {
        let permits = Arc::new(Semaphore::new(1));
        let (_tx, rx) = mpsc::channel(1);
        let mut out = Outbox::new(Sink::default(), rx);
        out.push(reply(b"", Some(Vec::new()), &permits));
        assert!(matches!(out.poll_send(&mut cx()), Poll::Ready(Ok(()))));
        assert!(out.w.writes.is_empty());
        assert_eq!(permits.available_permits(), 1);
    }

    #[test]
    fn a_broken_socket_drops_replies_so_permits_come_back() {
        let permits = Arc::new(Semaphore::new(4));
        let (tx, rx) = mpsc::channel(4);
        let sink = Sink {
            broken: true,
            ..Sink::default()
        };
        let mut out = Outbox::new(sink, rx);
        tx.try_send(reply(b"x", None, &permits)).unwrap();
        assert!(matches!(out.poll_send(&mut cx()), Poll::Ready(Err(_))));
        tx.try_send(reply(b"y", None, &permits)).unwrap();
        assert!(matches!(out.poll_send(&mut cx()), Poll::Ready(Err(_))));
        assert_eq!(permits.available_permits(), 4);
    }

    /// A socket read side with `ready` bytes to give, then nothing yet.
    struct Incoming {
        ready: usize,
    }

    impl AsyncRead for Incoming {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            if self.ready == 0 {
                return Poll::Pending;
            }
            let n = self.ready.min(buf.remaining());
            buf.put_slice(&vec![0; n]);
            self.ready -= n;
            Poll::Ready(Ok(()))
        }
    }

    const READ: usize = 128 << 10;

    fn duplex(ready: usize, backlog: u64) -> (Duplex<Incoming, Sink>, mpsc::Sender<Outgoing>) {
        let (tx, rx) = mpsc::channel(16);
        let socket = Duplex {
            r: Incoming { ready },
            out: Outbox::new(Sink::default(), rx),
            backlog: Backlog::Fixed(backlog),
            ran_dry: false,
        };
        (socket, tx)
    }

    /// One read of up to [`READ`] bytes; whether it completed.
    fn read(socket: &mut Duplex<Incoming, Sink>) -> bool {
        let mut buf = vec![0u8; READ];
        let mut read = ReadBuf::new(&mut buf);
        Pin::new(socket).poll_read(&mut cx(), &mut read).is_ready()
    }

    #[test]
    fn a_few_replies_wait_while_two_more_reads_wait_on_the_socket() {
        let permits = Arc::new(Semaphore::new(16));
        let (mut socket, tx) = duplex(8 * READ, 3 * READ as u64);
        for i in 0..MAX_HELD_REPLIES - 1 {
            tx.try_send(reply(&[i as u8], None, &permits)).unwrap();
            assert!(read(&mut socket));
            assert!(socket.out.w.writes.is_empty(), "reply {i} is held");
        }
        tx.try_send(reply(b"x", None, &permits)).unwrap();
        assert!(read(&mut socket));
        assert_eq!(
            socket.out.w.writes,
            vec![vec![0, 1, 2, b'x']],
            "a full batch leaves in one send"
        );
        assert_eq!(permits.available_permits(), 16);
    }

    #[test]
    fn replies_leave_at_once_without_two_more_reads_waiting() {
        let permits = Arc::new(Semaphore::new(16));
        let (mut socket, tx) = duplex(8 * READ, 3 * READ as u64 - 1);
        tx.try_send(reply(b"a", None, &permits)).unwrap();
        assert!(read(&mut socket));
        assert_eq!(socket.out.w.writes, vec![b"a".to_vec()]);
    }

    #[test]
    fn held_replies_leave_before_a_read_that_waits() {
        let permits = Arc::new(Semaphore::new(16));
        // The backlog says more is there; the read finds nothing yet.
        let (mut socket, tx) = duplex(0, 8 * READ as u64);
        tx.try_send(reply(b"a", None, &permits)).unwrap();
        assert!(!read(&mut socket));
        assert_eq!(socket.out.w.writes, vec![b"a".to_vec()]);
    }

    #[test]
    fn after_a_short_read_replies_leave_at_once() {
        let permits = Arc::new(Semaphore::new(16));
        let (mut socket, tx) = duplex(READ + 1, 8 * READ as u64);
        tx.try_send(reply(b"a", None, &permits)).unwrap();
        assert!(read(&mut socket), "a full read");
        assert!(socket.out.w.writes.is_empty());
        assert!(read(&mut socket), "a short read: the socket ran dry");
        tx.try_send(reply(b"b", None, &permits)).unwrap();
        assert!(!read(&mut socket));
        assert_eq!(socket.out.w.writes, vec![b"ab".to_vec()]);
    }

    #[test]
    fn large_replies_are_not_held() {
        let permits = Arc::new(Semaphore::new(16));
        let (mut socket, tx) = duplex(8 * READ, 8 * READ as u64);
        let data = vec![5u8; COALESCE_BYTES];
        tx.try_send(reply(b"h", Some(data), &permits)).unwrap();
        assert!(read(&mut socket));
        assert!(!socket.out.w.writes.is_empty(), "read data leaves at once");
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn the_backlog_of_a_socket_is_what_waits_unread() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let backlog = Backlog::of(&server);
        assert_eq!(backlog.bytes(), Some(0));
        client.write_all(&[7; 1000]).await.unwrap();
        let mut waited = 0;
        while backlog.bytes() != Some(1000) && waited < 200 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            waited += 1;
        }
        assert_eq!(backlog.bytes(), Some(1000));
    }
}
