//! What the CLI tests share: running `zftl` as a user does, and reading
//! what it answered.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

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
