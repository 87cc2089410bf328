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
    // The first run formatted the FTL; later runs mount it.
    assert!(
        stdout(&first).contains("formatted zftl"),
        "{}",
        stdout(&first)
    );
    assert_eq!(report["ftl"]["action"], "mounted");
    assert_eq!(report["ftl"]["volume"]["tag_mode"], "oob");
    assert!(report["ftl"]["stats"]["write_amplification"].is_number());
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
        vec!["format", "--help"],
        vec!["stats", "--help"],
        vec!["check", "--help"],
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

// ----- the FTL commands ------------------------------------------------------

/// A small OOB image formatted with `zftl format --json`; returns its path.
fn formatted_small(dir: &Path) -> std::path::PathBuf {
    let (path, out) = create_small(dir, "ftl.img", &["--oob", "64"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let p = path.to_str().expect("utf-8");
    let f = json(&zftl(
        dir,
        &["format", "--image", p, "--json", "--seed", "3"],
    ));
    assert_eq!(f["tag_mode"], "oob");
    assert_eq!(f["meta_first_zone"], 2);
    assert!(f["logical_blocks"].as_u64().unwrap() > 0);
    path
}

#[test]
fn format_stats_check_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = formatted_small(dir.path());
    let p = path.to_str().expect("utf-8");

    let stats = json(&zftl(dir.path(), &["stats", "--image", p, "--json"]));
    assert!(stats["ftl"]["write_amplification"].is_number(), "{stats}");
    assert!(stats["ftl"]["map_bytes_per_mapped_block"].is_number());
    assert!(stats["device"]["host_writes"].is_u64());
    assert_eq!(stats["volume"]["tag_mode"], "oob");

    let out = zftl(dir.path(), &["check", "--image", p, "--json"]);
    let report = json(&out);
    assert_eq!(report["clean"], true, "{report}");
    assert_eq!(report["problems"].as_array().map(Vec::len), Some(0));
    assert_eq!(report["summary"]["recovered"], true);
    let text = stdout(&zftl(dir.path(), &["check", "--image", p]));
    assert!(text.contains(": clean"), "{text}");
    assert!(text.contains("superblock_records:"), "{text}");
}

#[test]
fn format_refuses_a_formatted_image_without_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = formatted_small(dir.path());
    let p = path.to_str().expect("utf-8");
    let again = zftl(dir.path(), &["format", "--image", p]);
    assert_eq!(again.status.code(), Some(1));
    let err = stderr(&again);
    assert!(err.contains("already holds a zftl FTL"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let forced = json(&zftl(
        dir.path(),
        &[
            "format",
            "--image",
            p,
            "--force",
            "--tag-placement",
            "in-band",
            "--json",
        ],
    ));
    assert_eq!(forced["replaced_existing"], true);
    assert_eq!(forced["tag_mode"], "in-band");
    let bad = zftl(
        dir.path(),
        &["format", "--image", p, "--force", "--logical-size", "1000"],
    );
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        stderr(&bad).contains("multiple of the block size"),
        "{}",
        stderr(&bad)
    );
}

#[test]
fn check_refuses_garbage_and_unformatted_images() {
    let dir = tempfile::tempdir().expect("tempdir");
    let garbage = dir.path().join("garbage.img");
    std::fs::write(&garbage, vec![0x5a_u8; 64 * 1024]).expect("write garbage");
    let out = zftl(dir.path(), &["check", "--image", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("bad magic") && !err.contains("panicked"),
        "{err}"
    );

    let (blank, out) = create_small(dir.path(), "blank.img", &[]);
    assert!(out.status.success());
    let out = zftl(dir.path(), &["check", "--image", blank.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("not a zftl device"), "{err}");
    assert!(err.contains("zftl format"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

/// Global page of zone offset `off` in the image (docs/format.md, "Addressing").
fn page_index(c: &zftl_sim::SimConfig, zone: u32, off: u64) -> u64 {
    let w = u64::from(c.zone_width_luns);
    let u = u64::from(c.program_unit_pages);
    let groups = u64::from(c.channels * c.luns_per_channel) / w;
    let (g, row) = (u64::from(zone) % groups, u64::from(zone) / groups);
    let unit = off / u;
    let lun = g * w + unit % w;
    let page = (unit / w) * u + off % u;
    (lun * u64::from(c.blocks_per_lun) + row) * u64::from(c.pages_per_block) + page
}

#[test]
fn check_names_the_block_with_a_flipped_data_bit() {
    use std::os::unix::fs::FileExt;
    use zftl_core::{Driver, FtlConfig};
    use zftl_sim::{image::ImageLayout, RuntimeOptions, SimDevice};

    let dir = tempfile::tempdir().expect("tempdir");
    let path = formatted_small(dir.path());
    let p = path.to_str().expect("utf-8");
    let dev = SimDevice::open_file(&path, RuntimeOptions::default()).expect("open");
    let cfg = dev.config().clone();
    let mut ftl = Driver::mount(dev, FtlConfig::default()).expect("mount");
    let bs = ftl.block_size();
    for lba in 0..10u64 {
        ftl.write(lba, &vec![lba as u8 + 1; bs]).expect("write");
    }
    ftl.flush().expect("flush");
    let ppa = ftl.ftl().lookup(6).expect("mapped");
    drop(ftl.shutdown().expect("shutdown"));

    let cap = cfg.zone_capacity_blocks();
    let page = page_index(&cfg, ppa.zone(cap), ppa.offset_blocks(cap));
    let at = ImageLayout::for_config(&cfg).data_offset + page * u64::from(cfg.page_size_bytes) + 77;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open");
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).expect("read");
    assert_eq!(b[0], 7, "addressing");
    f.write_all_at(&[b[0] ^ 0x20], at).expect("write");
    drop(f);

    let out = zftl(dir.path(), &["check", "--image", p]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("data_crc") && text.contains("lba          6"),
        "{text}"
    );
    assert!(stderr(&out).contains("1 problem"), "{}", stderr(&out));
    let out = zftl(dir.path(), &["check", "--image", p, "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let report: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["clean"], false);
    assert_eq!(report["problems"][0]["what"], "data_crc");
    assert_eq!(report["problems"][0]["lba"], 6);
}

/// `zftl info DEVICE` and `--device` on what is not a ZNS namespace: one
/// line on stderr naming the path and the reason, exit status 1, and no
/// file created. (The real device is tested in the QEMU guest:
/// scripts/zns-guest.sh.)
#[cfg(target_os = "linux")]
#[test]
fn device_commands_refuse_what_is_not_a_zns_namespace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let plain = dir.path().join("plain.img");
    std::fs::write(&plain, vec![0u8; 8192]).expect("write");
    let plain_s = plain.to_str().expect("utf-8");
    let missing = dir.path().join("ng7n7");
    let missing_s = missing.to_str().expect("utf-8");
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["info", plain_s],
            format!("zftl: error: cannot open ZNS device {plain_s}: not a character device (a regular file)"),
        ),
        (
            vec!["info", missing_s],
            format!("zftl: error: cannot open ZNS device {missing_s}: no such device"),
        ),
        (
            vec!["format", "--device", missing_s],
            format!("zftl: error: cannot open ZNS device {missing_s}: no such device"),
        ),
        (
            vec!["stats", "--device", plain_s],
            format!("zftl: error: cannot open ZNS device {plain_s}: not a character device"),
        ),
        (
            vec!["check", "--device", plain_s],
            format!("zftl: error: cannot open ZNS device {plain_s}: not a character device"),
        ),
        (
            vec!["--json", "info", "/dev/null"],
            "zftl: error: cannot open ZNS device /dev/null: not an NVMe device".to_string(),
        ),
    ];
    for (args, prefix) in cases {
        let out = zftl(dir.path(), &args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with(&prefix), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(stdout(&out).is_empty(), "{args:?}");
    }
    assert!(!missing.exists());
    assert_eq!(std::fs::read(&plain).expect("read").len(), 8192);
    assert!(
        !dir.path().join("zftl").exists(),
        "no default image created"
    );
    // --device and --image exclude each other; info needs its DEVICE.
    let out = zftl(
        dir.path(),
        &["stats", "--device", missing_s, "--image", plain_s],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let out = zftl(dir.path(), &["info"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
