//! Runs the built `zftl` binary the way a user would.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `zftl` with a clean environment: the default image lives in `home`.
fn zftl(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zftl"))
        .args(args)
        .env("ZFTL_IMAGE", home.join("zftl").join("default.img"))
        .env_remove("XDG_DATA_HOME")
        .env("HOME", home)
        .output()
        .expect("run zftl")
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).expect("utf-8 stdout")
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).expect("utf-8 stderr")
}

fn json(out: &Output) -> Value {
    assert!(out.status.success(), "zftl failed: {}", stderr(out));
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON value")
}

const SMALL: &[&str] = &[
    "--channels",
    "2",
    "--luns-per-channel",
    "2",
    "--blocks-per-lun",
    "8",
    "--pages-per-block",
    "16",
    "--zone-width",
    "2",
    "--oob",
    "16",
];

fn create_small(dir: &Path, name: &str, extra: &[&str]) -> (std::path::PathBuf, Output) {
    let path = dir.join(name);
    let p = path.to_str().expect("utf-8 path");
    let mut args = vec!["sim", "create", p];
    args.extend_from_slice(SMALL);
    args.extend_from_slice(extra);
    let out = zftl(dir, &args);
    (path, out)
}

#[test]
fn first_run_creates_second_run_opens() {
    let dir = tempfile::tempdir().expect("tempdir");
    let image = dir.path().join("zftl").join("default.img");

    let started = Instant::now();
    let first = zftl(dir.path(), &[]);
    let took = started.elapsed();
    assert!(
        first.status.success(),
        "first run failed: {}",
        stderr(&first)
    );
    let text = stdout(&first);
    assert!(
        text.contains("created new simulated device image at"),
        "{text}"
    );
    assert!(text.contains(&image.display().to_string()), "{text}");
    assert!(text.contains("capacity_bytes:"), "{text}");
    assert!(text.contains("(4.0 GiB)"), "{text}");
    assert!(image.exists(), "the default image was not created");
    assert!(
        took < Duration::from_secs(5),
        "creating the default image took {took:?}"
    );

    let second = zftl(dir.path(), &[]);
    assert!(
        second.status.success(),
        "second run failed: {}",
        stderr(&second)
    );
    let text = stdout(&second);
    assert!(text.contains("opened simulated device image at"), "{text}");

    let report = json(&zftl(dir.path(), &["--json"]));
    assert_eq!(report["action"], "opened");
    assert_eq!(report["geometry"]["zone_count"], 1024);
    assert_eq!(report["geometry"]["capacity_bytes"], 4u64 << 30);
}

#[test]
fn default_path_follows_xdg_then_home() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |xdg: Option<&Path>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_zftl"));
        cmd.env_remove("ZFTL_IMAGE")
            .env("HOME", dir.path())
            .arg("--json");
        match xdg {
            Some(x) => cmd.env("XDG_DATA_HOME", x),
            None => cmd.env_remove("XDG_DATA_HOME"),
        };
        json(&cmd.output().expect("run zftl"))
    };
    let xdg = dir.path().join("xdg");
    let report = run(Some(&xdg));
    assert_eq!(
        report["image"],
        xdg.join("zftl/default.img").display().to_string()
    );
    let report = run(None);
    let home_image = dir.path().join(".local/share/zftl/default.img");
    assert_eq!(report["image"], home_image.display().to_string());
    assert!(home_image.exists());
}

#[test]
fn create_then_info_small_device() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, out) = create_small(dir.path(), "small.img", &["--json", "--seed", "9"]);
    let created = json(&out);
    assert_eq!(created["action"], "created");
    assert_eq!(created["config"]["faults"]["seed"], 9);
    // 2 x 2 LUNs / 2 wide = 2 zone groups x 8 blocks = 16 zones of 32 pages.
    assert_eq!(created["geometry"]["zone_count"], 16);
    assert_eq!(created["geometry"]["zone_capacity_blocks"], 32);
    assert_eq!(created["geometry"]["oob_size_bytes"], 16);
    assert_eq!(created["zones"]["empty"], 16);

    let p = path.to_str().expect("utf-8");
    let info = json(&zftl(dir.path(), &["sim", "info", p, "--json"]));
    assert_eq!(info["action"], "opened");
    assert_eq!(info["geometry"], created["geometry"]);
    assert_eq!(info["wear"]["erase_blocks"], 32);
    assert!(info["stats"]["host_writes"].is_u64());

    let text = stdout(&zftl(dir.path(), &["sim", "info", p]));
    for key in [
        "zone_capacity_blocks:",
        "capacity_bytes:",
        "erase_count_max:",
        "host_writes:",
    ] {
        assert!(text.contains(key), "missing {key} in\n{text}");
    }

    let counts = json(&zftl(dir.path(), &["sim", "erase-counts", p, "--json"]));
    assert_eq!(counts["erase_counts"].as_array().map(Vec::len), Some(32));
    assert_eq!(counts["luns"].as_array().map(Vec::len), Some(4));
    let text = stdout(&zftl(dir.path(), &["sim", "erase-counts", p]));
    assert!(text.contains("per_lun:"), "{text}");
}

#[test]
fn create_refuses_an_existing_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, first) = create_small(dir.path(), "once.img", &[]);
    assert!(first.status.success(), "{}", stderr(&first));
    let (_, again) = create_small(dir.path(), "once.img", &[]);
    assert!(!again.status.success());
    let err = stderr(&again);
    assert!(err.starts_with("zftl: error: cannot create image"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains("already exists"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
fn garbage_image_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("garbage.img");
    std::fs::write(&path, vec![0x5a_u8; 64 * 1024]).expect("write garbage");
    let p = path.to_str().expect("utf-8");
    for args in [
        vec!["sim", "info", p],
        vec!["--image", p],
        vec!["sim", "erase-counts", p],
    ] {
        let out = zftl(dir.path(), &args);
        assert!(!out.status.success(), "{args:?} succeeded on garbage");
        let err = stderr(&out);
        assert!(err.starts_with("zftl: error: cannot open image "), "{err}");
        assert!(err.contains(p), "{err}");
        assert!(err.contains("bad magic"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn missing_and_empty_images_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("nope.img");
    let out = zftl(
        dir.path(),
        &["sim", "info", missing.to_str().expect("utf-8")],
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("nope.img"), "{}", stderr(&out));

    let empty = dir.path().join("empty.img");
    std::fs::write(&empty, b"").expect("write");
    let out = zftl(dir.path(), &["sim", "info", empty.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("empty.img") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn invalid_geometry_is_rejected_before_creating() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (path, out) = create_small(dir.path(), "bad.img", &["--zone-width", "3"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.starts_with("zftl: error: invalid device configuration"),
        "{err}"
    );
    assert!(!path.exists(), "a bad config left a file behind");
}

#[test]
fn config_file_and_flags_combine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let template = stdout(&zftl(dir.path(), &["sim", "default-config", "--small"]));
    let cfg = dir.path().join("small.toml");
    std::fs::write(&cfg, template).expect("write config");
    let path = dir.path().join("from-config.img");
    let args = [
        "sim",
        "create",
        path.to_str().expect("utf-8"),
        "--config",
        cfg.to_str().expect("utf-8"),
        "--endurance",
        "77",
        "--json",
    ];
    let report = json(&zftl(dir.path(), &args));
    assert_eq!(report["geometry"]["zone_count"], 32);
    assert_eq!(report["config"]["endurance_erases"], 77);

    std::fs::write(&cfg, "chanels = 4\n").expect("write config");
    let other = dir.path().join("typo.img");
    let args = [
        "sim",
        "create",
        other.to_str().expect("utf-8"),
        "--config",
        cfg.to_str().expect("utf-8"),
    ];
    let out = zftl(dir.path(), &args);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("unknown field `chanels`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_works_everywhere() {
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [
        vec!["--help"],
        vec!["sim", "--help"],
        vec!["sim", "create", "--help"],
        vec!["sim", "info", "--help"],
        vec!["sim", "erase-counts", "--help"],
        vec!["help", "sim"],
    ] {
        let out = zftl(dir.path(), &args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(
            stdout(&out).contains("Usage:"),
            "{args:?}: {}",
            stdout(&out)
        );
    }
    let help = stdout(&zftl(dir.path(), &["--help"]));
    assert!(help.contains("ZFTL_IMAGE"), "{help}");
    let out = zftl(dir.path(), &["--version"]);
    assert!(out.status.success());
    assert!(
        !dir.path().join("zftl").exists(),
        "--help must not create an image"
    );
}

#[test]
fn bad_usage_exits_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = zftl(dir.path(), &["sim", "frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    let out = zftl(
        dir.path(),
        &["sim", "create", "x.img", "--channels", "many"],
    );
    assert_eq!(out.status.code(), Some(2));
}
