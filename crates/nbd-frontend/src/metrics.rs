//! Prometheus metrics: the server's counters and latency histograms, the
//! writer of the text exposition format (version 0.0.4) that renders them
//! and anything else a program exports beside them ([`TextWriter`]: `zftl
//! serve` adds the FTL's statistics), and a minimal HTTP/1.1 responder that
//! serves the text at `GET /metrics` ([`serve_metrics`]).
//!
//! Everything is a relaxed atomic: recording costs a few uncontended adds
//! per request. (The `prometheus-client` crate would bring a registry and
//! the OpenMetrics format, but its histogram takes a lock per observation,
//! and the FTL's statistics, a struct read on each scrape, would need a
//! custom collector: more code than this writer, and a dependency.)

use std::fmt::Write as _;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tracing::{debug, warn};

/// Upper bounds of the latency buckets, in microseconds (`+Inf` follows).
pub const LATENCY_BUCKETS_US: [u64; 8] = [50, 100, 250, 500, 1000, 2500, 5000, 10000];

/// The command kinds counted, in the order of [`Command`].
const COMMANDS: [&str; 6] = [
    "read",
    "write",
    "flush",
    "trim",
    "write_zeroes",
    "block_status",
];

/// A command kind, for [`Metrics::record`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Read = 0,
    Write = 1,
    Flush = 2,
    Trim = 3,
    WriteZeroes = 4,
    BlockStatus = 5,
}

/// The type of a metric family, for its `# TYPE` line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    Counter,
    Gauge,
    Histogram,
}

impl MetricKind {
    fn name(self) -> &'static str {
        match self {
            MetricKind::Counter => "counter",
            MetricKind::Gauge => "gauge",
            MetricKind::Histogram => "histogram",
        }
    }
}

/// Appends metrics to a `String` in the Prometheus text exposition format
/// (0.0.4): a family's `# HELP` and `# TYPE` lines, then its samples.
/// Names are the caller's (`[a-zA-Z_:][a-zA-Z0-9_:]*`, checked in debug
/// builds); label values are escaped.
///
/// ```
/// use zftl_nbd::{MetricKind, TextWriter};
/// let mut out = String::new();
/// let mut w = TextWriter::new(&mut out);
/// w.metric("zftl_ftl_erases_total", MetricKind::Counter, "Zone erases.", 3);
/// w.family("zftl_x", MetricKind::Gauge, "By kind.");
/// w.sample("zftl_x", &[("kind", "a \"b\"")], 1.5);
/// let lines: Vec<&str> = out.lines().collect();
/// assert_eq!(
///     lines,
///     [
///         "# HELP zftl_ftl_erases_total Zone erases.",
///         "# TYPE zftl_ftl_erases_total counter",
///         "zftl_ftl_erases_total 3",
///         "# HELP zftl_x By kind.",
///         "# TYPE zftl_x gauge",
///         r#"zftl_x{kind="a \"b\""} 1.5"#,
///     ]
/// );
/// ```
pub struct TextWriter<'a> {
    out: &'a mut String,
}

impl<'a> TextWriter<'a> {
    pub fn new(out: &'a mut String) -> TextWriter<'a> {
        TextWriter { out }
    }

    /// The `# HELP` and `# TYPE` lines of the family `name`.
    pub fn family(&mut self, name: &str, kind: MetricKind, help: &str) {
        debug_assert!(valid_name(name), "metric name {name:?}");
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = writeln!(
            self.out,
            "# HELP {name} {help}\n# TYPE {name} {}",
            kind.name()
        );
    }

    /// One sample: `name{label="value",...} value`.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        debug_assert!(valid_name(name), "metric name {name:?}");
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                debug_assert!(valid_name(label), "label name {label:?}");
                if i > 0 {
                    self.out.push(',');
                }
                let v = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                let _ = write!(self.out, "{label}=\"{v}\"");
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A family of one unlabelled sample.
    pub fn metric(
        &mut self,
        name: &str,
        kind: MetricKind,
        help: &str,
        value: impl std::fmt::Display,
    ) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

/// A metric or label name as the format allows.
fn valid_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

#[derive(Default)]
struct Histogram {
    /// Observations per bucket (not cumulative); the last is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
    sum_us: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    fn observe(&self, us: u64) {
        let i = LATENCY_BUCKETS_US
            .iter()
            .position(|&le| us <= le)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
        self.count.fetch_add(1, Relaxed);
    }
}

/// The server's counters. One per [`crate::Server`], shared by every
/// connection; read them with [`Metrics::render`] or the accessors.
#[derive(Default)]
pub struct Metrics {
    latency: [Histogram; COMMANDS.len()],
    errors: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    connections_open: AtomicU64,
    connections_total: AtomicU64,
}

/// Counts a connection as open while it lives.
pub(crate) struct ConnectionGuard(Arc<Metrics>);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.connections_open.fetch_sub(1, Relaxed);
    }
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn connection(self: &Arc<Self>) -> ConnectionGuard {
        self.connections_open.fetch_add(1, Relaxed);
        self.connections_total.fetch_add(1, Relaxed);
        ConnectionGuard(Arc::clone(self))
    }

    /// A request the volume ran: its latency, the payload bytes it moved,
    /// and whether it failed.
    pub fn record(&self, command: Command, latency: Duration, bytes: u64, failed: bool) {
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.latency[command as usize].observe(us);
        if failed {
            self.errors.fetch_add(1, Relaxed);
        } else {
            match command {
                Command::Read => self.bytes_read.fetch_add(bytes, Relaxed),
                Command::Write => self.bytes_written.fetch_add(bytes, Relaxed),
                _ => 0,
            };
        }
    }

    /// A request refused before it reached the volume (bad range, flags,
    /// read-only export, ...).
    pub fn record_refused(&self) {
        self.errors.fetch_add(1, Relaxed);
    }

    /// Requests of `command` the volume ran (succeeded or failed).
    pub fn commands(&self, command: Command) -> u64 {
        self.latency[command as usize].count.load(Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Relaxed)
    }

    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Relaxed)
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Relaxed)
    }

    pub fn connections_open(&self) -> u64 {
        self.connections_open.load(Relaxed)
    }

    pub fn connections_total(&self) -> u64 {
        self.connections_total.load(Relaxed)
    }

    /// Appends the metrics in the Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let mut w = TextWriter::new(out);
        let requests = "zftl_nbd_requests_total";
        w.family(
            requests,
            MetricKind::Counter,
            "Requests the volume ran, by command.",
        );
        for (i, name) in COMMANDS.iter().enumerate() {
            let n = self.latency[i].count.load(Relaxed);
            w.sample(requests, &[("command", name)], n);
        }
        let counters = [
            (
                "zftl_nbd_errors_total",
                "Requests answered with an error (refused or failed).",
                self.errors(),
            ),
            (
                "zftl_nbd_read_bytes_total",
                "Bytes read by clients.",
                self.bytes_read(),
            ),
            (
                "zftl_nbd_written_bytes_total",
                "Bytes written by clients.",
                self.bytes_written(),
            ),
        ];
        for (name, help, v) in counters {
            w.metric(name, MetricKind::Counter, help, v);
        }
        w.metric(
            "zftl_nbd_connections_open",
            MetricKind::Gauge,
            "Connections open now.",
            self.connections_open(),
        );
        w.metric(
            "zftl_nbd_connections_total",
            MetricKind::Counter,
            "Connections accepted.",
            self.connections_total(),
        );
        let duration = "zftl_nbd_request_duration_microseconds";
        w.family(
            duration,
            MetricKind::Histogram,
            "Time from a request's arrival to its reply being queued, by command.",
        );
        let (bucket, sum, count) = (
            format!("{duration}_bucket"),
            format!("{duration}_sum"),
            format!("{duration}_count"),
        );
        for (i, name) in COMMANDS.iter().enumerate() {
            let h = &self.latency[i];
            let mut cumulative = 0;
            for (j, b) in h.buckets.iter().enumerate() {
                cumulative += b.load(Relaxed);
                let le = LATENCY_BUCKETS_US
                    .get(j)
                    .map_or_else(|| "+Inf".to_string(), |v| v.to_string());
                w.sample(&bucket, &[("command", name), ("le", &le)], cumulative);
            }
            w.sample(&sum, &[("command", name)], h.sum_us.load(Relaxed));
            w.sample(&count, &[("command", name)], cumulative);
        }
    }
}

/// Largest request head read; a longer one is answered 431 and closed.
const MAX_REQUEST_HEAD: usize = 8192;
/// Scrapes served at once; more wait in the listen backlog.
const MAX_SCRAPES: usize = 16;
/// Time a client has to send its request and read the answer.
const SCRAPE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `GET /metrics` on `listener` (plain HTTP/1.1, one request per
/// connection) with the text `render` produces, until `shutdown`
/// completes. Anything else gets 404, 405 or 400; nothing a client sends
/// can make it panic.
pub async fn serve_metrics<F, Fut>(
    listener: TcpListener,
    render: F,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()>
where
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = String> + Send,
{
    let slots = Arc::new(Semaphore::new(MAX_SCRAPES));
    let mut tasks = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
            s = Arc::clone(&slots).acquire_owned() => s,
        };
        let Ok(slot) = slot else { break };
        let accepted = tokio::select! {
            biased;
            () = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (mut stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let render = render.clone();
        tasks.spawn(async move {
            let served = tokio::time::timeout(SCRAPE_TIMEOUT, scrape(&mut stream, render)).await;
            if !matches!(served, Ok(Ok(()))) {
                debug!(%peer, "metrics: scrape failed or timed out");
            }
            drop(slot);
        });
    }
    tasks.shutdown().await;
    Ok(())
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    Metrics { head: bool },
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// Parses the request line of an HTTP/1.x request head.
pub(crate) fn route(head: &[u8]) -> Route {
    let Ok(text) = std::str::from_utf8(head) else {
        return Route::BadRequest;
    };
    let line = text.split("\r\n").next().unwrap_or("");
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or(target);
    let head = match method {
        "GET" => false,
        "HEAD" => true,
        m if !m.is_empty() && m.bytes().all(|b| b.is_ascii_uppercase()) => {
            return Route::MethodNotAllowed
        }
        _ => return Route::BadRequest,
    };
    if path == "/metrics" {
        Route::Metrics { head }
    } else {
        Route::NotFound
    }
}

async fn scrape<F, Fut>(stream: &mut tokio::net::TcpStream, render: F) -> std::io::Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = String>,
{
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let complete = loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") {
            break true;
        }
        if head.len() >= MAX_REQUEST_HEAD {
            break false;
        }
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    };
    let (status, body, head_only) = if !complete {
        ("431 Request Header Fields Too Large", String::new(), false)
    } else {
        match route(&head) {
            Route::Metrics { head } => ("200 OK", render().await, head),
            Route::NotFound => ("404 Not Found", "not found: try /metrics\n".into(), false),
            Route::MethodNotAllowed => (
                "405 Method Not Allowed",
                "only GET /metrics\n".into(),
                false,
            ),
            Route::BadRequest => ("400 Bad Request", "bad request\n".into(), false),
        }
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        response.push_str("Allow: GET, HEAD\r\n");
    }
    response.push_str("\r\n");
    if !head_only {
        response.push_str(&body);
    }
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await?;
    // A lingering close: unread input (an oversized head) would make the
    // kernel reset the connection and could destroy the response in
    // flight, so read and drop a bounded amount first.
    let drain = async {
        let mut left = 64usize << 10;
        while left > 0 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), drain).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(
            route(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics { head: false }
        );
        assert_eq!(
            route(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Route::Metrics { head: true }
        );
        assert_eq!(route(b"GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed
        );
        for bad in [
            &b""[..],
            b"\r\n\r\n",
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET metrics HTTP/1.1\r\n\r\n",
            b"GET /metrics SPDY/3\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
            b"get /metrics HTTP/1.1\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(route(bad), Route::BadRequest, "{bad:?}");
        }
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let m = Metrics::new();
        for us in [10, 50, 51, 20_000] {
            m.record(Command::Read, Duration::from_micros(us), 4096, false);
        }
        m.record(Command::Write, Duration::from_micros(1), 8192, true);
        let mut out = String::new();
        m.render(&mut out);
        let line = |s: &str| out.lines().any(|l| l == s);
        assert!(line(
            "zftl_nbd_request_duration_microseconds_bucket{command=\"read\",le=\"50\"} 2"
        ));
        assert!(line(
            "zftl_nbd_request_duration_microseconds_bucket{command=\"read\",le=\"100\"} 3"
        ));
        assert!(line(
            "zftl_nbd_request_duration_microseconds_bucket{command=\"read\",le=\"+Inf\"} 4"
        ));
        assert!(line(
            "zftl_nbd_request_duration_microseconds_sum{command=\"read\"} 20111"
        ));
        assert!(line("zftl_nbd_requests_total{command=\"write\"} 1"));
        assert!(line("zftl_nbd_errors_total 1"));
        assert!(line("zftl_nbd_read_bytes_total 16384"));
        assert!(line("zftl_nbd_written_bytes_total 0"));
    }
}
