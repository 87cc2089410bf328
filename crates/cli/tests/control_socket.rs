//! The control socket of a running `zftl serve` (docs/control.md): the
//! corpus of malformed lines over a live connection (every line answered
//! with its error kind, the connection kept, the server still serving),
//! overlong lines, the connection limit, the socket file's mode, stale and
//! live files, removal at exit, and `zftl range --server`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;
use common::{Served, START_WITHIN};

const MAX_LINE_BYTES: usize = 1 << 20;

fn zftl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zftl"))
        .args(args)
        .output()
        .expect("run zftl")
}

/// A small unformatted image (`zftl serve` formats it).
fn small_image(dir: &Path) -> PathBuf {
    common::sim_image(dir, "c.img", "32", "16", &[])
}

/// A client connection.
struct Conn {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Conn {
    fn open(path: &Path) -> std::io::Result<Conn> {
        let s = UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Conn {
            w: s.try_clone()?,
            r: BufReader::new(s),
        })
    }

    fn send(&mut self, line: &[u8]) {
        self.w.write_all(line).unwrap();
        self.w.write_all(b"\n").unwrap();
    }

    /// The next reply line, or None at the end of the stream.
    fn reply(&mut self) -> Option<Value> {
        let mut line = String::new();
        if self.r.read_line(&mut line).unwrap() == 0 {
            return None;
        }
        assert!(line.ends_with('\n'), "{line}");
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}")))
    }

    fn request(&mut self, line: &str) -> Value {
        self.send(line.as_bytes());
        self.reply().expect("a reply")
    }

    /// Whether the server closed the connection (a reset counts: the
    /// server closed with part of our line unread).
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        match self.r.read(&mut b) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

/// `(kind, line)` of the repository's tests/data/control_malformed.txt.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let text = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/control_malformed.txt"
    ))
    .unwrap();
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        .map(|l| {
            let tab = l.iter().position(|&b| b == b'\t').unwrap();
            (
                String::from_utf8(l[..tab].to_vec()).unwrap(),
                l[tab + 1..].to_vec(),
            )
        })
        .collect()
}

fn kind(v: &Value) -> &str {
    assert_eq!(v["ok"], false, "{v}");
    v["error"]["kind"].as_str().unwrap()
}

#[test]
fn malformed_lines_over_a_live_socket() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_image(dir.path());
    let served = Served::start(&img, &[]);
    let corpus = corpus();
    assert!(corpus.len() > 60);

    // One at a time: each answered with its kind, the connection kept.
    let mut c = Conn::open(&served.socket).unwrap();
    for (want, line) in &corpus {
        let v = c.request_bytes(line);
        assert_eq!(kind(&v), want, "{}: {v}", String::from_utf8_lossy(line));
    }
    assert_eq!(c.request(r#"{"id":"after","op":"ping"}"#)["id"], "after");

    // All at once, pipelined: the replies come in order.
    let mut all = Vec::new();
    for (i, (_, line)) in corpus.iter().enumerate() {
        all.extend_from_slice(line);
        all.push(b'\n');
        all.extend_from_slice(format!(r#"{{"id":{i},"op":"ping"}}"#).as_bytes());
        all.push(b'\n');
    }
    let mut c = Conn::open(&served.socket).unwrap();
    let writer = {
        let mut w = c.w.try_clone().unwrap();
        std::thread::spawn(move || w.write_all(&all).unwrap())
    };
    for (i, (want, _)) in corpus.iter().enumerate() {
        assert_eq!(kind(&c.reply().unwrap()), want);
        let pong = c.reply().unwrap();
        assert_eq!(
            (pong["ok"].as_bool(), pong["id"].as_u64()),
            (Some(true), Some(i as u64))
        );
    }
    writer.join().unwrap();

    // Requests the FTL refuses, with the block they name.
    let v =
        c.request(r#"{"id":1,"op":"delete","ranges":[{"lba":18446744073709551615,"blocks":1}]}"#);
    assert_eq!(
        (kind(&v), v["error"]["lba"].as_u64()),
        ("out_of_range", Some(u64::MAX))
    );
    let v = c.request(r#"{"id":2,"op":"clone","ranges":[{"src":0,"dst":2,"blocks":4}]}"#);
    assert_eq!(kind(&v), "bad_vector");
    let v = c.request(r#"{"id":3,"op":"delete","ranges":[{"lba":0,"blocks":0}]}"#);
    assert_eq!(kind(&v), "bad_vector");
    let v = c.request(
        r#"{"id":4,"op":"attr","attribute":"immutable","ranges":[{"lba":10,"blocks":2}]}"#,
    );
    assert_eq!(v["ok"], true, "{v}");
    let v = c.request(r#"{"id":5,"op":"clone","ranges":[{"src":0,"dst":11,"blocks":1}]}"#);
    assert_eq!(
        (kind(&v), v["error"]["lba"].as_u64(), v["id"].as_u64()),
        ("immutable", Some(11), Some(5))
    );

    // Overlong: answered, then closed; the server goes on.
    let mut long = br#"{"op":"ping"}"#.to_vec();
    long.resize(MAX_LINE_BYTES + 10, b' ');
    let mut c = Conn::open(&served.socket).unwrap();
    // The server may close before it has read all of it.
    let _ = c.w.write_all(&long).and_then(|()| c.w.write_all(b"\n"));
    assert_eq!(kind(&c.reply().unwrap()), "too_long");
    assert!(c.closed());
    // A huge line without a newline at all: the server does not keep it.
    let mut c = Conn::open(&served.socket).unwrap();
    let junk = vec![b'['; 4 * MAX_LINE_BYTES];
    let _ = c.w.write_all(&junk);
    assert_eq!(kind(&c.reply().unwrap()), "too_long");
    assert!(c.closed());
    let mut c = Conn::open(&served.socket).unwrap();
    let stats = c.request(r#"{"id":9,"op":"stats"}"#);
    assert_eq!(stats["ok"], true);
    assert!(stats["stats"]["range_vectors_refused"].as_u64().unwrap() >= 1);
    assert!(served.stop().success());
}

impl Conn {
    fn request_bytes(&mut self, line: &[u8]) -> Value {
        self.send(line);
        self.reply().expect("a reply")
    }
}

#[test]
fn connection_limit_socket_file_and_cli_client() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_image(dir.path());
    let served = Served::start(&img, &[]);
    let sock = served.socket.clone();
    let meta = std::fs::metadata(&sock).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);

    // 16 connections are served; the 17th is told busy and closed.
    let mut open: Vec<Conn> = (0..16)
        .map(|i| {
            let mut c = Conn::open(&sock).unwrap();
            assert_eq!(
                c.request(&format!(r#"{{"id":{i},"op":"ping"}}"#))["ok"],
                true
            );
            c
        })
        .collect();
    let mut extra = Conn::open(&sock).unwrap();
    let v = extra.reply().expect("a busy line");
    assert_eq!((kind(&v), &v["id"]), ("busy", &Value::Null));
    assert!(extra.closed());
    // Closing one makes room (the server notices the close when it reaps).
    drop(open.pop());
    let t0 = Instant::now();
    loop {
        let mut c = Conn::open(&sock).unwrap();
        c.send(br#"{"id":"again","op":"ping"}"#);
        let v = c.reply().unwrap();
        if v["ok"] == true {
            assert_eq!(v["id"], "again");
            break;
        }
        assert_eq!(kind(&v), "busy");
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no room after a close"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(open);

    // A second server on the same socket refuses to start; the first goes on.
    let other = dir.path().join("other.img");
    std::fs::copy(&img, &other).unwrap();
    let out = zftl(&[
        "serve",
        "--image",
        other.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--control",
        sock.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use"), "{err}");

    // The CLI as a client; on the image itself it refuses, pointing here.
    let s = sock.to_str().unwrap();
    let out = zftl(&[
        "range",
        "clone",
        "0:100:8",
        "--image",
        img.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("in use by a running `zftl serve`") && err.contains(&format!("--server {s}")),
        "{err}"
    );
    let out = zftl(&["range", "clone", "0:100:8", "--server", s, "--json"]);
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["op"].as_str(), v["blocks"].as_u64()),
        (Some("clone"), Some(8))
    );
    assert_eq!(v["server"], s);
    assert!(
        zftl(&["range", "attr", "immutable", "100:8", "--server", s])
            .status
            .success()
    );
    let out = zftl(&["range", "clone", "0:100:8", "--server", s]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with(&format!(
            "zftl: error: server {s}: clone: block 100 is in an immutable range"
        )),
        "{err}"
    );
    let out = zftl(&["range", "attrs", "--server", s]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("immutable"),
        "{out:?}"
    );

    // Removed at a clean exit.
    assert!(served.stop().success());
    assert!(!sock.exists());
}

#[test]
fn a_stale_socket_is_replaced_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let img = small_image(dir.path());
    let sock = dir.path().join("ctl.sock");
    let s = sock.to_str().unwrap();
    let served = Served::start(&img, &["--control", s]);
    let mut c = Conn::open(&sock).unwrap();
    let v = c
        .request(r#"{"id":1,"op":"attr","attribute":"immutable","ranges":[{"lba":5,"blocks":1}]}"#);
    assert_eq!(v["ok"], true, "{v}");
    drop(c);
    served.kill();
    assert!(sock.exists(), "kill -9 leaves the file");
    // The restart replaces it, and the acknowledged attribute survived.
    let served = Served::start(&img, &["--control", s]);
    let mut c = Conn::open(&sock).unwrap();
    let v = c.request(r#"{"id":2,"op":"attrs"}"#);
    assert_eq!(
        v["ranges"],
        serde_json::json!([{"lba": 5, "blocks": 1, "attributes": ["immutable"]}])
    );
    drop(c);
    assert!(served.stop().success());
    assert!(!sock.exists());
    // --read-only: range operations refused, queries answered.
    let served = Served::start(&img, &["--control", s, "--read-only"]);
    let mut c = Conn::open(&sock).unwrap();
    let v = c.request(r#"{"id":3,"op":"delete","ranges":[{"lba":0,"blocks":1}]}"#);
    assert_eq!(kind(&v), "read_only");
    let v = c.request(r#"{"id":4,"op":"attrs"}"#);
    assert_eq!(v["ranges"][0]["lba"], 5);
    drop(c);
    assert!(served.stop().success());
    // --no-control: no socket at all.
    let served = Served::start_without_control(&img);
    let mut default = img.as_os_str().to_owned();
    default.push(".control");
    assert!(!Path::new(&default).exists());
    assert!(served.stop().success());
}

impl Served {
    /// `--no-control`: waits for the NBD listener's log line instead.
    fn start_without_control(image: &Path) -> Served {
        let log = image.with_extension("nolog");
        let child = Command::new(env!("CARGO_BIN_EXE_zftl"))
            .args(["serve", "--no-control", "--image", image.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let s = Served {
            child: Some(child),
            socket: PathBuf::new(),
            log,
        };
        let t0 = Instant::now();
        while !s.log_text().contains("serving NBD") {
            assert!(t0.elapsed() < START_WITHIN, "not up: {}", s.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
        s
    }
}
