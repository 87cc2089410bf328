//! The Prometheus endpoint: counters and histograms move with the I/O a
//! client does, and bad HTTP gets an error status, never a panic.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zftl_nbd::proto::*;
use zftl_nbd::{serve_metrics, Server, ServerConfig};

/// Sends `request` raw and returns the whole response.
async fn http(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    // The server may answer (and close) before it has read everything.
    let _ = s.write_all(request).await;
    // Half-close: a truncated request ends here.
    let _ = s.shutdown().await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out))
        .await
        .expect("the metrics server answers");
    String::from_utf8_lossy(&out).into_owned()
}

/// The samples of a `GET /metrics`: `name{labels}` -> value.
async fn scrape(addr: SocketAddr) -> HashMap<String, f64> {
    let r = http(addr, b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
    assert!(r.contains("Content-Type: text/plain; version=0.0.4"));
    let body = r.split("\r\n\r\n").nth(1).unwrap();
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_string(), v.parse::<f64>().unwrap())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_move_with_io() {
    let vol = format_volume().await;
    let server = Server::new(exports(&vol), ServerConfig::default());
    let metrics = server.metrics();
    let running = start(server).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let maddr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let m = metrics.clone();
    let http_task = tokio::spawn(serve_metrics(
        listener,
        move || {
            let m = m.clone();
            async move {
                let mut out = String::new();
                m.render(&mut out);
                out
            }
        },
        async {
            let _ = stopped.await;
        },
    ));

    let before = scrape(maddr).await;
    assert_eq!(before["zftl_nbd_requests_total{command=\"write\"}"], 0.0);
    assert_eq!(before["zftl_nbd_connections_total"], 0.0);

    let mut s = TcpStream::connect(running.addr).await.unwrap();
    greet(&mut s).await;
    go(&mut s, "zftl").await;
    round_trip(&mut s, 9).await; // 8 KiB written and read, one flush
    assert_eq!(request(&mut s, CMD_TRIM, 0, BS as u32, &[], 0).await.0, 0);
    assert_eq!(
        request(&mut s, CMD_WRITE_ZEROES, 0, BS as u32, &[], 0)
            .await
            .0,
        0
    );
    // Misaligned: refused with EINVAL, counted as an error.
    assert_ne!(request(&mut s, CMD_READ, 1, BS as u32, &[], 0).await.0, 0);

    let after = scrape(maddr).await;
    let v = |k: &str| after.get(k).copied().unwrap_or_else(|| panic!("no {k}"));
    assert_eq!(v("zftl_nbd_requests_total{command=\"write\"}"), 1.0);
    assert_eq!(v("zftl_nbd_requests_total{command=\"read\"}"), 1.0);
    assert_eq!(v("zftl_nbd_requests_total{command=\"flush\"}"), 1.0);
    assert_eq!(v("zftl_nbd_requests_total{command=\"trim\"}"), 1.0);
    assert_eq!(v("zftl_nbd_requests_total{command=\"write_zeroes\"}"), 1.0);
    assert_eq!(v("zftl_nbd_requests_total{command=\"block_status\"}"), 0.0);
    assert_eq!(v("zftl_nbd_errors_total"), 1.0);
    assert_eq!(v("zftl_nbd_written_bytes_total"), (2 * BS) as f64);
    assert_eq!(v("zftl_nbd_read_bytes_total"), (2 * BS) as f64);
    assert_eq!(v("zftl_nbd_connections_open"), 1.0);
    assert_eq!(v("zftl_nbd_connections_total"), 1.0);
    let w = "command=\"write\"";
    assert_eq!(
        v(&format!(
            "zftl_nbd_request_duration_microseconds_bucket{{{w},le=\"+Inf\"}}"
        )),
        1.0
    );
    assert_eq!(
        v(&format!(
            "zftl_nbd_request_duration_microseconds_count{{{w}}}"
        )),
        1.0
    );
    assert!(
        v(&format!(
            "zftl_nbd_request_duration_microseconds_sum{{{w}}}"
        )) > 0.0
    );
    assert_eq!(metrics.commands(zftl_nbd::Command::Write), 1);

    drop(s);
    // The connection closes: the open gauge falls back.
    let mut open = 1.0;
    for _ in 0..100 {
        open = scrape(maddr).await["zftl_nbd_connections_open"];
        if open == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(open, 0.0);

    // Bad HTTP: an error status or a close, and the endpoint stays up.
    let big = format!("GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20000));
    let cases: Vec<(&[u8], &str)> = vec![
        (b"GET / HTTP/1.1\r\n\r\n", "404"),
        (b"POST /metrics HTTP/1.1\r\n\r\n", "405"),
        (b"garbage\r\n\r\n", "400"),
        (b"\xff\xfe\xfd\r\n\r\n", "400"),
        (b"GET /metrics HTTP/1.1 x\r\n\r\n", "400"),
        (big.as_bytes(), "431"),
        (b"GET /metr", ""),
        (b"", ""),
    ];
    for (req, status) in cases {
        let r = http(maddr, req).await;
        if status.is_empty() {
            assert!(r.is_empty(), "{r}");
        } else {
            assert!(
                r.starts_with(&format!("HTTP/1.1 {status}")),
                "{status}: {r}"
            );
        }
    }
    let head = http(maddr, b"HEAD /metrics HTTP/1.0\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200") && head.ends_with("\r\n\r\n"));
    assert!(scrape(maddr).await.contains_key("zftl_nbd_errors_total"));

    let _ = stop.send(());
    http_task.await.unwrap().unwrap();
    running.stop().await;
}
