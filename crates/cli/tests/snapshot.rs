//! `zftl snapshot create|delete|list|read|diff`, `zftl revert` and `zftl
//! view` as a user runs them: on an image, and through the control socket
//! of a running `zftl serve`; text and `--json`; the errors (a name taken
//! or unknown, WHEN that names nothing, a read-only server, bad
//! arguments); both tag modes. Data is written and checked through the
//! library around the runs (protection-window points with a clock of the
//! test's own) and over NBD.

use std::path::Path;

use serde_json::Value;
use zftl_core::{Driver, FtlConfig, ProtectWindow};
use zftl_sim::{RuntimeOptions, SimDevice};

mod common;
use common::{
    blocks, json, names, ok, refused, sim_image, stdout, tagged_image, usage, with_volume, zftl,
    Served,
};

#[test]
fn create_list_read_delete_on_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = tagged_image(dir.path(), "s.img", false);
    let p = img.to_str().unwrap();
    let bs = with_volume(&img, |d| {
        let bs = d.block_size();
        d.write(0, &blocks(bs, &[1, 2, 3, 4])).unwrap();
        bs
    });

    let out = ok(zftl(
        dir.path(),
        &["snapshot", "create", "first", "--image", p],
    ));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!("snapshot \"first\" created on image {p}")),
        "{text}"
    );
    assert!(
        text.contains("created (UTC):") && text.contains('Z'),
        "{text}"
    );

    // The volume moves on: block 0 rewritten, 1 trimmed.
    with_volume(&img, |d| {
        d.write(0, &blocks(bs, &[9])).unwrap();
        d.trim(1, 1).unwrap();
    });
    let created = json(zftl(
        dir.path(),
        &["snapshot", "create", "second", "--image", p, "--json"],
    ));
    assert_eq!(created["image"], p);
    assert_eq!(created["op"], "snapshot_create");
    let s = &created["snapshot"];
    assert_eq!(s["name"], "second");
    for key in ["id", "epoch", "create_seq", "wall_ns"] {
        assert!(s[key].is_u64(), "{key}: {created}");
    }
    let created_at = s["created"].as_str().unwrap();
    assert_eq!(
        created_at.len(),
        "2026-01-01T00:00:00Z".len(),
        "{created_at}"
    );

    let list = json(zftl(
        dir.path(),
        &["snapshot", "list", "--image", p, "--json"],
    ));
    assert_eq!(list["image"], p);
    assert_eq!(list["op"], "snapshots");
    assert_eq!(names(&list, "snapshots"), ["first", "second"]);
    assert_eq!(&list["snapshots"][1], s);
    assert!(list["snapshots"][0]["id"].as_u64() < s["id"].as_u64());
    // The two blocks the volume replaced after "first" are kept for it.
    assert!(list["snapshot_versions"].as_u64().unwrap() >= 2, "{list}");
    assert!(list["snapshot_memory_bytes"].is_u64());

    let out = ok(zftl(dir.path(), &["snapshot", "list", "--image", p]));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!("snapshots on image {p}: 2")),
        "{text}"
    );
    assert!(
        lines[1].contains("ID") && lines[1].contains("NAME"),
        "{text}"
    );
    assert!(
        lines[1].contains("CREATED (UTC)") && lines[1].contains("EPOCH"),
        "{text}"
    );
    assert!(
        lines[2].contains("first") && lines[3].contains("second"),
        "{text}"
    );
    assert!(lines[3].contains(created_at), "{text}");

    // Read both snapshots into files: each as it was.
    let out_first = dir.path().join("first.bin");
    let out = ok(zftl(
        dir.path(),
        &[
            "snapshot",
            "read",
            "first",
            "--lba",
            "0",
            "--blocks",
            "5",
            "--out",
            out_first.to_str().unwrap(),
            "--image",
            p,
        ],
    ));
    assert!(
        stdout(&out).starts_with("read 5 block(s)"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        std::fs::read(&out_first).unwrap(),
        blocks(bs, &[1, 2, 3, 4, 0])
    );
    let out_second = dir.path().join("second.bin");
    let r = json(zftl(
        dir.path(),
        &[
            "snapshot",
            "read",
            "second",
            "--lba",
            "1",
            "--blocks",
            "3",
            "--out",
            out_second.to_str().unwrap(),
            "--image",
            p,
            "--json",
        ],
    ));
    assert_eq!(
        (
            r["op"].as_str(),
            r["lba"].as_u64(),
            r["blocks"].as_u64(),
            r["bytes"].as_u64()
        ),
        (Some("snapshot_read"), Some(1), Some(3), Some(3 * bs as u64))
    );
    assert_eq!(std::fs::read(&out_second).unwrap(), blocks(bs, &[0, 3, 4]));

    let out = ok(zftl(
        dir.path(),
        &["snapshot", "delete", "first", "--image", p],
    ));
    assert!(
        stdout(&out).starts_with(&format!("snapshot \"first\" deleted on image {p}")),
        "{}",
        stdout(&out)
    );
    let d = json(zftl(
        dir.path(),
        &["snapshot", "delete", "second", "--image", p, "--json"],
    ));
    assert_eq!(
        (d["op"].as_str(), d["name"].as_str()),
        (Some("snapshot_delete"), Some("second"))
    );
    let list = json(zftl(
        dir.path(),
        &["snapshot", "list", "--image", p, "--json"],
    ));
    assert_eq!(list["snapshots"], serde_json::json!([]));
    let text = stdout(&ok(zftl(dir.path(), &["snapshot", "list", "--image", p])));
    assert!(text.contains(": 0, keeping"), "{text}");
    // The live volume was never touched by any of it.
    with_volume(&img, |d| {
        assert_eq!(d.read(0, 4).unwrap(), blocks(bs, &[9, 0, 3, 4]));
        assert!(d.snapshots().is_empty());
    });
}

#[test]
fn reads_larger_than_one_request_are_split() {
    let dir = tempfile::tempdir().unwrap();
    let img = tagged_image(dir.path(), "big.img", false);
    let p = img.to_str().unwrap();
    // 600 blocks of 4 KiB: more than one 1 MiB snapshot_read (256 blocks).
    let n = 600u64;
    let want = with_volume(&img, |d| {
        let bs = d.block_size();
        let data: Vec<u8> = (0..n as usize * bs).map(|i| (i / 7 % 251) as u8).collect();
        d.write(10, &data).unwrap();
        data
    });
    ok(zftl(dir.path(), &["snapshot", "create", "s", "--image", p]));
    with_volume(&img, |d| d.trim(10, n as u32).unwrap());
    let out = dir.path().join("s.bin");
    ok(zftl(
        dir.path(),
        &[
            "snapshot",
            "read",
            "s",
            "--lba",
            "10",
            "--blocks",
            &n.to_string(),
            "--out",
            out.to_str().unwrap(),
            "--image",
            p,
        ],
    ));
    assert!(std::fs::read(&out).unwrap() == want, "the copy differs");
}

#[test]
fn errors_are_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let img = tagged_image(dir.path(), "e.img", false);
    let p = img.to_str().unwrap();
    ok(zftl(dir.path(), &["snapshot", "create", "a", "--image", p]));

    let e = refused(zftl(dir.path(), &["snapshot", "create", "a", "--image", p]));
    assert!(
        e.contains(p) && e.contains("a snapshot named \"a\" exists"),
        "{e}"
    );
    let e = refused(zftl(
        dir.path(),
        &["snapshot", "delete", "nope", "--image", p],
    ));
    assert!(e.contains("no snapshot named \"nope\""), "{e}");
    let long = "x".repeat(64);
    let e = refused(zftl(
        dir.path(),
        &["snapshot", "create", &long, "--image", p],
    ));
    assert!(e.contains("1 to 63 bytes"), "{e}");
    let e = refused(zftl(dir.path(), &["snapshot", "create", "", "--image", p]));
    assert!(e.contains("1 to 63 bytes"), "{e}");

    // A failed read leaves no file behind.
    let out = dir.path().join("x.bin");
    let o = out.to_str().unwrap();
    let read = |name: &str, lba: &str| {
        zftl(
            dir.path(),
            &[
                "snapshot", "read", name, "--lba", lba, "--blocks", "2", "--out", o, "--image", p,
            ],
        )
    };
    let e = refused(read("nope", "0"));
    assert!(e.contains("no snapshot named \"nope\""), "{e}");
    assert!(!out.exists());
    let e = refused(read("a", "18446744073709551615"));
    assert!(e.contains("outside the logical space"), "{e}");
    assert!(!out.exists());
    let e = refused(zftl(
        dir.path(),
        &[
            "snapshot",
            "read",
            "a",
            "--blocks",
            "1",
            "--out",
            dir.path().join("no/such/dir/f").to_str().unwrap(),
            "--image",
            p,
        ],
    ));
    assert!(e.contains("cannot create"), "{e}");

    // Bad command lines: exit 2.
    for args in [
        &["snapshot", "read", "a", "--blocks", "0", "--out", o][..],
        &["snapshot", "read", "a", "--out", o],
        &["snapshot", "create"],
        &["snapshot", "list", "--image", p, "--server", "x.sock"],
    ] {
        let out = zftl(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }

    // Nothing above changed the list.
    let list = json(zftl(
        dir.path(),
        &["snapshot", "list", "--image", p, "--json"],
    ));
    assert_eq!(names(&list, "snapshots"), ["a"]);

    // A volume with tags in OOB takes snapshots too.
    let oob = tagged_image(dir.path(), "oob.img", true);
    let q = oob.to_str().unwrap();
    json(zftl(
        dir.path(),
        &["snapshot", "create", "a", "--image", q, "--json"],
    ));
    let list = json(zftl(
        dir.path(),
        &["snapshot", "list", "--image", q, "--json"],
    ));
    assert_eq!(names(&list, "snapshots"), ["a"]);
    assert_eq!(list["snapshot_versions"], 0);
}

/// The runs of a `zftl snapshot diff --json`, as `(lba, blocks)`.
fn runs(diff: &Value) -> Vec<(u64, u64)> {
    diff["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["lba"].as_u64().unwrap(), r["blocks"].as_u64().unwrap()))
        .collect()
}

#[test]
fn diff_on_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = tagged_image(dir.path(), "d.img", false);
    let p = img.to_str().unwrap();
    let diff = |args: &[&str]| {
        let mut all = vec!["snapshot", "diff"];
        all.extend(args);
        all.extend(["--image", p]);
        zftl(dir.path(), &all)
    };
    let bs = with_volume(&img, |d| {
        let bs = d.block_size();
        d.write(0, &blocks(bs, &[1, 2, 3, 4, 5])).unwrap();
        bs
    });
    ok(zftl(dir.path(), &["snapshot", "create", "a", "--image", p]));
    let none = json(diff(&["a", "--json"]));
    assert_eq!(none["runs"], serde_json::json!([]));
    assert_eq!(
        (none["extents"].as_u64(), none["changed_bytes"].as_u64()),
        (Some(0), Some(0))
    );
    let text = stdout(&ok(diff(&["a"])));
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.ends_with("0 extent(s), 0 block(s), 0 bytes (0 B) changed\n"),
        "{text}"
    );

    // After "a": 1 and 2 rewritten, 3 trimmed, 10 written; after "b",
    // 20..23 written.
    with_volume(&img, |d| {
        d.write(1, &blocks(bs, &[7, 7])).unwrap();
        d.trim(3, 1).unwrap();
        d.write(10, &blocks(bs, &[7])).unwrap();
    });
    ok(zftl(dir.path(), &["snapshot", "create", "b", "--image", p]));
    with_volume(&img, |d| d.write(20, &blocks(bs, &[8, 8, 8])).unwrap());

    let live = json(diff(&["a", "--json"]));
    assert_eq!(live["image"], p);
    assert_eq!(live["op"], "snapshot_diff");
    assert_eq!(live["since"]["name"], "a");
    assert!(live["since"]["created"].is_string(), "{live}");
    assert_eq!(live["until"], Value::Null);
    assert_eq!(live["block_size"], bs as u64);
    assert_eq!(runs(&live), [(1, 3), (10, 1), (20, 3)]);
    assert_eq!(
        (
            live["extents"].as_u64(),
            live["changed_blocks"].as_u64(),
            live["changed_bytes"].as_u64()
        ),
        (Some(3), Some(7), Some(7 * bs as u64))
    );
    let text = stdout(&ok(diff(&["a"])));
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        format!("blocks changed on image {p} between snapshot \"a\" and the live volume (blocks of {bs} bytes):")
    );
    let head: Vec<&str> = lines[1]
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(head, ["LBA", "BLOCKS", "OFFSET (BYTES)", "LENGTH (BYTES)"]);
    let rows: Vec<Vec<u64>> = lines[2..5]
        .iter()
        .map(|l| l.split_whitespace().map(|c| c.parse().unwrap()).collect())
        .collect();
    let b = bs as u64;
    assert_eq!(
        rows,
        [[1, 3, b, 3 * b], [10, 1, 10 * b, b], [20, 3, 20 * b, 3 * b]]
    );
    assert!(
        lines[5].starts_with(&format!("3 extent(s), 7 block(s), {} bytes (", 7 * b)),
        "{text}"
    );
    assert_eq!(lines.len(), 6, "{text}");

    // Two snapshots, in either order; "b" against the live volume.
    for (x, y) in [("a", "b"), ("b", "a")] {
        let two = json(diff(&[x, y, "--json"]));
        assert_eq!(runs(&two), [(1, 3), (10, 1)], "{x} {y}");
        assert_eq!(two["until"]["name"], y);
    }
    let text = stdout(&ok(diff(&["a", "b"])));
    assert!(
        text.contains("between snapshot \"a\" and snapshot \"b\""),
        "{text}"
    );
    assert_eq!(runs(&json(diff(&["b", "--json"]))), [(20, 3)]);

    // Unknown names, either side: exit 1, one line; bad command lines: 2.
    for args in [&["nope"][..], &["a", "nope"]] {
        let e = refused(diff(args));
        assert!(
            e.contains(p)
                && e.contains("snapshot_diff")
                && e.contains("no snapshot named \"nope\""),
            "{e}"
        );
    }
    usage(zftl(dir.path(), &["snapshot", "diff", "--image", p]));
    usage(zftl(
        dir.path(),
        &["snapshot", "diff", "a", "b", "c", "--image", p],
    ));
    usage(diff(&["a", "--server", "x.sock"]));
    // The diff changed nothing.
    with_volume(&img, |d| {
        assert_eq!(d.read(0, 4).unwrap(), blocks(bs, &[1, 7, 7, 0]));
        assert_eq!(d.snapshots().len(), 2);
    });
    let help = stdout(&ok(zftl(dir.path(), &["snapshot", "diff", "--help"])));
    assert!(
        help.contains("[UNTIL]") && help.contains("live volume"),
        "{help}"
    );
}

#[test]
fn diff_of_more_runs_than_one_reply_holds() {
    // 33000 runs (every other block written after the snapshot): more than
    // one snapshot_diff reply lists (32768), so the CLI joins two pages.
    let dir = tempfile::tempdir().unwrap();
    let img = sim_image(dir.path(), "wide.img", "64", "256", &[]);
    let p = img.to_str().unwrap();
    // Thin: more logical blocks than the media holds, of which half are
    // written.
    ok(zftl(
        dir.path(),
        &["format", "--image", p, "--logical-blocks", "66000"],
    ));
    ok(zftl(
        dir.path(),
        &["snapshot", "create", "empty", "--image", p],
    ));
    let n = 33_000u64;
    with_volume(&img, |d| {
        assert!(d.logical_blocks() >= 2 * n, "{}", d.logical_blocks());
        let bs = d.block_size();
        for i in 0..n {
            d.write(2 * i, &vec![1; bs]).unwrap();
        }
    });
    let out = json(zftl(
        dir.path(),
        &["snapshot", "diff", "empty", "--image", p, "--json"],
    ));
    let want: Vec<(u64, u64)> = (0..n).map(|i| (2 * i, 1)).collect();
    assert!(runs(&out) == want, "{} runs", runs(&out).len());
    assert_eq!(
        (out["extents"].as_u64(), out["changed_blocks"].as_u64()),
        (Some(n), Some(n))
    );
}

#[test]
fn through_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let img = tagged_image(dir.path(), "srv.img", false);
    let p = img.to_str().unwrap();
    let bs = with_volume(&img, |d| {
        let bs = d.block_size();
        d.write(0, &blocks(bs, &[5, 6, 7])).unwrap();
        bs
    });
    let served = Served::start(&img, &[]);
    let sock = served.socket.to_str().unwrap().to_string();
    let s = sock.as_str();

    // The image is in use: without --server the command points at it.
    let e = refused(zftl(dir.path(), &["snapshot", "list", "--image", p]));
    assert!(e.contains("--server"), "{e}");

    let created = json(zftl(
        dir.path(),
        &["snapshot", "create", "live", "--server", s, "--json"],
    ));
    assert_eq!(created["server"], s);
    assert_eq!(created["snapshot"]["name"], "live");
    let e = refused(zftl(
        dir.path(),
        &["snapshot", "create", "live", "--server", s],
    ));
    assert_eq!(
        e.trim_end(),
        format!(
            "zftl: error: server {s}: snapshot_create: snapshot: a snapshot named \"live\" exists (snapshot)"
        )
    );
    // The volume moves on through the same socket: 0..2 deleted.
    ok(zftl(dir.path(), &["range", "delete", "0:2", "--server", s]));
    let list = json(zftl(
        dir.path(),
        &["snapshot", "list", "--server", s, "--json"],
    ));
    assert_eq!(list["server"], s);
    assert_eq!(names(&list, "snapshots"), ["live"]);
    assert!(list["snapshot_versions"].as_u64().unwrap() >= 2, "{list}");
    let text = stdout(&ok(zftl(dir.path(), &["snapshot", "list", "--server", s])));
    assert!(
        text.starts_with(&format!("snapshots on server {s}: 1")),
        "{text}"
    );
    let diff = json(zftl(
        dir.path(),
        &["snapshot", "diff", "live", "--server", s, "--json"],
    ));
    assert_eq!(diff["server"], s);
    assert_eq!(runs(&diff), [(0, 2)]);
    let e = refused(zftl(
        dir.path(),
        &["snapshot", "diff", "live", "gone", "--server", s],
    ));
    assert!(
        e.contains(&format!("server {s}: snapshot_diff"))
            && e.contains("no snapshot named \"gone\""),
        "{e}"
    );

    let out = dir.path().join("live.bin");
    ok(zftl(
        dir.path(),
        &[
            "snapshot",
            "read",
            "live",
            "--blocks",
            "4",
            "--out",
            out.to_str().unwrap(),
            "--server",
            s,
        ],
    ));
    assert_eq!(std::fs::read(&out).unwrap(), blocks(bs, &[5, 6, 7, 0]));
    let e = refused(zftl(
        dir.path(),
        &["snapshot", "delete", "gone", "--server", s],
    ));
    assert!(e.contains("no snapshot named \"gone\""), "{e}");
    ok(zftl(
        dir.path(),
        &["snapshot", "create", "kept", "--server", s],
    ));
    ok(zftl(
        dir.path(),
        &["snapshot", "delete", "live", "--server", s],
    ));
    assert!(served.stop().success());

    // What the server did is on the image after its clean shutdown.
    let list = json(zftl(
        dir.path(),
        &["snapshot", "list", "--image", p, "--json"],
    ));
    assert_eq!(names(&list, "snapshots"), ["kept"]);
    with_volume(&img, |d| {
        assert_eq!(d.read(0, 3).unwrap(), blocks(bs, &[0, 0, 7]));
    });

    // A read-only server lists and reads, and refuses create and delete.
    let served = Served::start(&img, &["--read-only"]);
    let e = refused(zftl(
        dir.path(),
        &["snapshot", "create", "x", "--server", s],
    ));
    assert!(e.contains("read_only") && e.contains("read-only"), "{e}");
    let e = refused(zftl(
        dir.path(),
        &["snapshot", "delete", "kept", "--server", s],
    ));
    assert!(e.contains("read_only"), "{e}");
    let list = json(zftl(
        dir.path(),
        &["snapshot", "list", "--server", s, "--json"],
    ));
    assert_eq!(names(&list, "snapshots"), ["kept"]);
    let out = dir.path().join("kept.bin");
    ok(zftl(
        dir.path(),
        &[
            "snapshot",
            "read",
            "kept",
            "--blocks",
            "3",
            "--out",
            out.to_str().unwrap(),
            "--server",
            s,
        ],
    ));
    assert_eq!(std::fs::read(&out).unwrap(), blocks(bs, &[0, 0, 7]));
    let text = stdout(&ok(zftl(
        dir.path(),
        &["snapshot", "diff", "kept", "--server", s],
    )));
    assert!(
        text.starts_with(&format!(
            "blocks changed on server {s} between snapshot \"kept\" and the live volume"
        )),
        "{text}"
    );
    assert!(
        text.ends_with("0 extent(s), 0 block(s), 0 bytes (0 B) changed\n"),
        "{text}"
    );
    assert!(served.stop().success());
}

const SEC: u64 = 1_000_000_000;
/// 2026-01-01T00:00:00Z: a time in the past for the points of the tests.
const T0: u64 = 1_767_225_600 * SEC;

/// On `path`, with a protection window of an hour timed by a clock of the
/// test's own from T0: blocks 0..3 hold 1 and a point is taken
/// (`@2026-01-01T00:00:00Z`), then 2 and a point (`…00:04Z`, 3.5 s being
/// a 1 h window's interval), then 3 with no point after it. Returns the
/// block size and the points' create_seq.
fn window_history(path: &Path) -> (usize, Vec<u64>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let dev = SimDevice::open_file(path, RuntimeOptions::default()).unwrap();
    let cfg = FtlConfig {
        protect_window: Some(ProtectWindow::Secs(3600)),
        ..FtlConfig::default()
    };
    let mut d = Driver::mount(dev, cfg).unwrap();
    let clock = Arc::new(AtomicU64::new(T0));
    let c = clock.clone();
    d.set_wall_clock(move || c.load(Ordering::SeqCst));
    let bs = d.block_size();
    for b in 1..=2u8 {
        d.write(0, &blocks(bs, &[b; 3])).unwrap();
        for _ in 0..20 {
            clock.fetch_add(SEC / 5, Ordering::SeqCst);
            d.settle().unwrap();
        }
    }
    d.write(0, &blocks(bs, &[3; 3])).unwrap();
    let points: Vec<(String, u64)> = d
        .snapshots()
        .into_iter()
        .map(|s| (s.name, s.create_seq))
        .collect();
    let names: Vec<&str> = points.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, ["@2026-01-01T00:00:00Z", "@2026-01-01T00:00:04Z"]);
    d.shutdown().unwrap().sync().unwrap();
    (bs, points.into_iter().map(|p| p.1).collect())
}

/// What blocks 0..3 of the image hold, as one tag each.
fn head(path: &Path) -> Vec<u8> {
    with_volume(path, |d| {
        let bs = d.block_size();
        let data = d.read(0, 3).unwrap();
        (0..3).map(|i| data[i * bs]).collect()
    })
}

#[test]
fn revert_on_an_image_by_time_name_and_seq() {
    let dir = tempfile::tempdir().unwrap();
    let img = tagged_image(dir.path(), "r.img", false);
    let p = img.to_str().unwrap();
    let (_, seqs) = window_history(&img);
    let revert = |args: &[&str]| {
        let mut all = vec!["revert"];
        all.extend(args);
        all.extend(["--image", p]);
        zftl(dir.path(), &all)
    };

    // The list marks the points.
    let list = json(zftl(
        dir.path(),
        &["snapshot", "list", "--image", p, "--json"],
    ));
    let kinds: Vec<&str> = list["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["point", "point"]);
    let text = stdout(&ok(zftl(dir.path(), &["snapshot", "list", "--image", p])));
    assert!(text.lines().nth(1).unwrap().contains("KIND"), "{text}");
    assert!(
        text.lines()
            .any(|l| l.contains(" point ") && l.contains("@2026-01-01T00:00:04Z")),
        "{text}"
    );
    assert!(text.contains("2 of them point(s)"), "{text}");

    // By a time: 00:00:03 reaches back to the point of 00:00:00.
    let r = json(revert(&["--to", "2026-01-01T00:00:03Z", "--json"]));
    assert_eq!(r["image"], p);
    assert_eq!(r["op"], "snapshot_revert");
    assert_eq!(r["resolved"]["by"], "time");
    assert_eq!(r["resolved"]["time"], "2026-01-01T00:00:03Z");
    assert_eq!(r["to"]["name"], "@2026-01-01T00:00:00Z");
    assert_eq!(r["to"]["kind"], "point");
    let undo = r["undo"]["name"].as_str().unwrap().to_string();
    assert_eq!(undo, format!("undo-{}", r["undo"]["id"]));
    assert_eq!(r["undo"]["kind"], "snapshot");
    assert_eq!(head(&img), [1, 1, 1]);

    // By name: the undo snapshot takes the volume forward again.
    let out = ok(revert(&["--to", &undo]));
    let text = stdout(&out);
    assert!(
        text.starts_with(&format!(
            "reverted image {p} to snapshot \"{undo}\" (durable; no data copied)"
        )),
        "{text}"
    );
    assert!(text.contains(&format!("by name ({undo})")), "{text}");
    assert!(
        text.contains("undo snapshot:") && text.contains("undoes this revert"),
        "{text}"
    );
    assert_eq!(head(&img), [3, 3, 3]);

    // By seq, with an undo name of our own: the point of 00:00:04.
    let r = json(revert(&[
        "--to",
        &format!("seq:{}", seqs[1]),
        "--undo",
        "mine",
        "--json",
    ]));
    assert_eq!(r["resolved"]["by"], "seq");
    assert_eq!(r["to"]["name"], "@2026-01-01T00:00:04Z");
    assert_eq!(r["undo"]["name"], "mine");
    assert_eq!(head(&img), [2, 2, 2]);
    // A point's name that is no live point reads as its time.
    let r = json(revert(&["--to", "@2026-01-01T00:00:02Z", "--json"]));
    assert_eq!(
        (r["resolved"]["by"].as_str(), r["to"]["name"].as_str()),
        (Some("time"), Some("@2026-01-01T00:00:00Z"))
    );
    assert_eq!(head(&img), [1, 1, 1]);
    // "mine" holds what the revert by seq left.
    let r = json(revert(&["--to", "mine", "--json"]));
    assert_eq!(r["to"]["name"], "mine");
    assert_eq!(head(&img), [3, 3, 3]);

    // WHEN that names nothing: exit 1, one line, nothing changed.
    let before = json(zftl(
        dir.path(),
        &["snapshot", "list", "--image", p, "--json"],
    ));
    let e = refused(revert(&["--to", "2025-12-31T23:59:59Z"]));
    assert!(
        e.contains("--to 2025-12-31T23:59:59Z: nothing reaches back to 2025-12-31T23:59:59Z")
            && e.contains("the oldest reachable time is 2026-01-01T00:00:00Z"),
        "{e}"
    );
    let e = refused(revert(&["--to", "-400d"]));
    assert!(
        e.contains("oldest reachable time is 2026-01-01T00:00:00Z"),
        "{e}"
    );
    let e = refused(revert(&["--to", "2099-01-01T00:00:00Z"]));
    assert!(e.contains("in the future"), "{e}");
    let e = refused(revert(&["--to", "seq:0"]));
    assert!(
        e.contains("no snapshot or point was created at or before seq 0"),
        "{e}"
    );
    for bad in ["nope", "-5x", "seq:x", "2026-01-01 00:00:00"] {
        let e = refused(revert(&["--to", bad]));
        assert!(
            e.contains("no live snapshot's name") && e.contains("seq:N"),
            "{bad}: {e}"
        );
    }
    let e = refused(revert(&["--to", "mine", "--undo", "@x"]));
    assert!(e.contains("snapshot_revert") && e.contains("'@'"), "{e}");
    let e = refused(revert(&["--to", "mine", "--undo", "mine"]));
    assert!(e.contains("a snapshot named \"mine\" exists"), "{e}");
    usage(zftl(dir.path(), &["revert", "--image", p]));
    usage(revert(&["--to", "mine", "--server", "x.sock"]));
    let after = json(zftl(
        dir.path(),
        &["snapshot", "list", "--image", p, "--json"],
    ));
    assert_eq!(before["snapshots"], after["snapshots"]);
    assert_eq!(head(&img), [3, 3, 3]);

    let help = stdout(&ok(zftl(dir.path(), &["revert", "--help"])));
    assert!(
        help.contains("WHEN is one of") && help.contains("-5m") && help.contains("seq:N"),
        "{help}"
    );
    let help = stdout(&ok(zftl(dir.path(), &["view", "--help"])));
    assert!(
        help.contains("No data is copied") && help.contains("EXPORT@NAME"),
        "{help}"
    );
}

/// Reads `blocks` blocks from 0 of export `name` at `uri`'s server.
fn nbd_read(uri: &str, name: &str, bytes: u32) -> Vec<u8> {
    let addr = uri
        .strip_prefix("nbd://")
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("{uri}"))
        .to_string();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let mut c = zftl_nbd::client::Client::greet(stream).await.unwrap();
        c.go(name, &[]).await.unwrap();
        let data = c.read(0, bytes).await.unwrap();
        c.disconnect().await.unwrap();
        data
    })
}

#[test]
fn revert_and_view_through_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let img = tagged_image(dir.path(), "v.img", false);
    let p = img.to_str().unwrap();
    let (bs, _) = window_history(&img);
    let three = 3 * bs as u32;
    let served = Served::start(&img, &[]);
    let sock = served.socket.to_str().unwrap().to_string();
    let s = sock.as_str();

    // The view of 00:00:05 is the point of 00:00:04, exported as
    // zftl@@2026-01-01T00:00:04Z; the server says where.
    let v = json(zftl(
        dir.path(),
        &[
            "view",
            "--at",
            "2026-01-01T00:00:05Z",
            "--server",
            s,
            "--json",
        ],
    ));
    assert_eq!(v["server"], s);
    assert_eq!(v["op"], "view");
    assert_eq!(v["resolved"]["snapshot"]["name"], "@2026-01-01T00:00:04Z");
    assert_eq!(v["export"], "zftl@@2026-01-01T00:00:04Z");
    let uri = v["uri"].as_str().unwrap();
    assert!(
        uri.starts_with("nbd://127.0.0.1:")
            && uri.ends_with("/zftl@@2026-01-01T00:00:04Z")
            && !uri.starts_with("nbd://127.0.0.1:0/"),
        "{uri}"
    );
    assert_eq!(
        nbd_read(uri, "zftl@@2026-01-01T00:00:04Z", three),
        blocks(bs, &[2, 2, 2])
    );
    assert_eq!(nbd_read(uri, "zftl", three), blocks(bs, &[3, 3, 3]));
    // The same through --image (its default socket), as text.
    let text = stdout(&ok(zftl(
        dir.path(),
        &["view", "--at", "@2026-01-01T00:00:00Z", "--image", p],
    )));
    assert!(
        text.starts_with(&format!(
            "read-only view of point \"@2026-01-01T00:00:00Z\" (taken 2026-01-01T00:00:00Z) on server {s}"
        )),
        "{text}"
    );
    assert!(
        text.contains("export:   zftl@@2026-01-01T00:00:00Z"),
        "{text}"
    );
    assert!(text.contains("uri:      nbd://127.0.0.1:"), "{text}");
    let e = refused(zftl(dir.path(), &["view", "--at", "-400d", "--server", s]));
    assert!(
        e.contains("--at -400d") && e.contains("oldest reachable time is 2026-01-01T00:00:00Z"),
        "{e}"
    );

    // A revert through the server: the live export reads the point.
    let r = json(zftl(
        dir.path(),
        &[
            "revert",
            "--to",
            "2026-01-01T00:00:01Z",
            "--server",
            s,
            "--json",
        ],
    ));
    assert_eq!(r["server"], s);
    assert_eq!(r["to"]["name"], "@2026-01-01T00:00:00Z");
    let undo = r["undo"]["name"].as_str().unwrap().to_string();
    assert_eq!(nbd_read(uri, "zftl", three), blocks(bs, &[1, 1, 1]));
    // The undo snapshot is a view too, of what the volume left.
    let v = json(zftl(
        dir.path(),
        &["view", "--at", &undo, "--server", s, "--json"],
    ));
    let export = v["export"].as_str().unwrap();
    assert_eq!(export, format!("zftl@{undo}"));
    assert_eq!(nbd_read(uri, export, three), blocks(bs, &[3, 3, 3]));
    let e = refused(zftl(dir.path(), &["revert", "--to", "nope", "--server", s]));
    assert!(
        e.contains("--to nope") && e.contains("no live snapshot's name"),
        "{e}"
    );
    let stats = json(zftl(
        dir.path(),
        &["snapshot", "list", "--server", s, "--json"],
    ));
    assert_eq!(stats["snapshots"].as_array().unwrap().len(), 3);
    assert!(served.stop().success());
    assert_eq!(head(&img), [1, 1, 1]);

    // A read-only server refuses a revert and still names views; it logs
    // its window setting at start.
    let served = Served::start(&img, &["--read-only", "--protect", "1h"]);
    let e = refused(zftl(dir.path(), &["revert", "--to", &undo, "--server", s]));
    assert!(e.contains("read_only") && e.contains("reverts"), "{e}");
    json(zftl(
        dir.path(),
        &["view", "--at", &undo, "--server", s, "--json"],
    ));
    assert!(
        served
            .log_text()
            .contains("protect=1h (a point at most every 3.5 s"),
        "{}",
        served.log_text()
    );
    assert!(served.stop().success());
    assert_eq!(head(&img), [1, 1, 1]);

    // No server: the socket does not answer.
    let e = refused(zftl(dir.path(), &["view", "--at", &undo, "--image", p]));
    assert!(
        e.contains("cannot connect") && e.contains(".control"),
        "{e}"
    );
}
