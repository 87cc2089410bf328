//! What the CLI tests share: running `zftl` as a user does, and reading
//! what it answered.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use zftl_core::{Driver, FtlConfig};
use zftl_sim::{RuntimeOptions, SimDevice};

/// Runs `zftl` with `home` as its home and default image directory.
pub fn zftl(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zftl"))
        .args(args)
        .env("ZFTL_IMAGE", home.join("default.img"))
        .env_remove("XDG_DATA_HOME")
        .env("HOME", home)
        .output()
        .expect("run zftl")
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

pub fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "zftl failed ({:?}): {}",
        out.status,
        stderr(&out)
    );
    out
}

pub fn json(out: Output) -> Value {
    serde_json::from_slice(&ok(out).stdout).expect("one JSON value")
}

/// Exit status 1 and one line on stderr, which is returned.
pub fn refused(out: Output) -> String {
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = stderr(&out);
    assert!(err.starts_with("zftl: error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(out.stdout.is_empty());
    err
}

/// Exit status 2 (a bad command line).
pub fn usage(out: Output) -> String {
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(out.stdout.is_empty());
    stderr(&out)
}

/// `zftl sim create dir/name`: 2 channels x 2 LUNs of `blocks_per_lun`
/// erase blocks of `pages_per_block` pages (4 KiB), zones 2 erase blocks
/// wide, and the `extra` flags.
pub fn sim_image(
    dir: &Path,
    name: &str,
    blocks_per_lun: &str,
    pages_per_block: &str,
    extra: &[&str],
) -> PathBuf {
    let path = dir.join(name);
    let mut args = vec![
        "sim",
        "create",
        path.to_str().unwrap(),
        "--channels",
        "2",
        "--luns-per-channel",
        "2",
        "--blocks-per-lun",
        blocks_per_lun,
        "--pages-per-block",
        pages_per_block,
        "--zone-width",
        "2",
    ];
    args.extend(extra);
    ok(zftl(dir, &args));
    path
}

/// A formatted image `dir/name` of 64 zones of 32 blocks (4 KiB): a
/// `sim_image` of 32 erase blocks of 16 pages a LUN with `oob` bytes of
/// OOB a page, then `zftl format` with `format_flags`. Returns the path
/// and what `zftl format` printed.
pub fn formatted_image(
    dir: &Path,
    name: &str,
    oob: &str,
    format_flags: &[&str],
) -> (PathBuf, Output) {
    let path = sim_image(dir, name, "32", "16", &["--oob", oob]);
    let mut format = vec!["format", "--image", path.to_str().unwrap()];
    format.extend(format_flags);
    let out = ok(zftl(dir, &format));
    (path, out)
}

/// A `formatted_image` with tags in band (16 bytes of OOB, `--tag-placement
/// in-band`) unless `oob` (64 bytes of OOB, which the default placement
/// puts them in); checks that `zftl format` says which.
pub fn tagged_image(dir: &Path, name: &str, oob: bool) -> PathBuf {
    let (path, out) = if oob {
        formatted_image(dir, name, "64", &[])
    } else {
        formatted_image(dir, name, "16", &["--tag-placement", "in-band"])
    };
    let want = if oob { "oob" } else { "in-band" };
    assert!(stdout(&out).contains(want), "{}", stdout(&out));
    path
}

/// Mounts the image in this process, runs `f`, shuts down cleanly.
pub fn with_volume<R>(path: &Path, f: impl FnOnce(&mut Driver<SimDevice>) -> R) -> R {
    let dev = SimDevice::open_file(path, RuntimeOptions::default()).unwrap();
    let mut d = Driver::mount(dev, FtlConfig::default()).unwrap();
    let r = f(&mut d);
    d.shutdown().unwrap().sync().unwrap();
    r
}

/// `tags.len()` blocks of `bs` bytes, block i holding `tags[i]` in every
/// byte.
pub fn blocks(bs: usize, tags: &[u8]) -> Vec<u8> {
    tags.iter().flat_map(|&t| vec![t; bs]).collect()
}

/// The names of the entries of a `--json` listing's array `key`.
pub fn names(list: &Value, key: &str) -> Vec<String> {
    list[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// How long a server gets to come up on a loaded machine.
pub const START_WITHIN: Duration = Duration::from_secs(120);

/// `zftl serve` on an image, with its NBD listener on a free port; killed
/// when dropped.
pub struct Served {
    pub child: Option<Child>,
    /// The control socket: `IMAGE.control`, or what `--control` names.
    pub socket: PathBuf,
    /// The server's stderr.
    pub log: PathBuf,
}

impl Served {
    /// Starts `zftl serve --image IMAGE --listen 127.0.0.1:0 EXTRA...` and
    /// returns once its control socket answers a ping.
    pub fn start(image: &Path, extra: &[&str]) -> Served {
        let log = image.with_extension(format!("log{}", std::process::id()));
        let child = Command::new(env!("CARGO_BIN_EXE_zftl"))
            .args(["serve", "--image", image.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn zftl serve");
        let socket = match extra.iter().position(|a| *a == "--control") {
            Some(i) => PathBuf::from(extra[i + 1]),
            None => {
                let mut socket = image.as_os_str().to_owned();
                socket.push(".control");
                PathBuf::from(socket)
            }
        };
        let mut s = Served {
            child: Some(child),
            socket,
            log,
        };
        s.wait_up();
        s
    }

    fn wait_up(&mut self) {
        let t0 = Instant::now();
        loop {
            if let Ok(s) = UnixStream::connect(&self.socket) {
                s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
                let mut w = s.try_clone().unwrap();
                w.write_all(b"{\"id\":0,\"op\":\"ping\"}\n").unwrap();
                let mut line = String::new();
                if BufReader::new(s).read_line(&mut line).is_ok()
                    && serde_json::from_str::<Value>(&line).is_ok_and(|v| v["ok"] == true)
                {
                    return;
                }
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("zftl serve exited ({status}): {}", self.log_text());
            }
            assert!(t0.elapsed() < START_WITHIN, "not up: {}", self.log_text());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM (a clean shutdown) and the exit status.
    pub fn stop(mut self) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        let pid = child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        child.wait().unwrap()
    }

    /// SIGKILL, as a crash.
    pub fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
