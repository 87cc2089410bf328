//! `zftl range …` on an image, as a user runs it: clone, move, delete,
//! merge, attr and attrs, text and `--json`, and its errors (bad arguments
//! exit 2, refusals of the FTL exit 1 with one line on stderr). The data
//! is written and read back through the library around the runs.

use std::path::{Path, PathBuf};

use serde_json::Value;
use zftl_core::Driver;
use zftl_sim::SimDevice;

mod common;
use common::{blocks, formatted_image, json, ok, refused, stdout, usage, with_volume, zftl};

/// A formatted image of 64 zones of 32 blocks (4 KiB, 16 bytes of OOB,
/// the default tag placement).
fn image(dir: &Path) -> PathBuf {
    formatted_image(dir, "r.img", "16", &[]).0
}

/// Block `lba + i` holds `tags[i]` in every byte.
fn fill(d: &mut Driver<SimDevice>, lba: u64, tags: &[u8]) {
    d.write(lba, &blocks(d.block_size(), tags)).unwrap();
}

/// The tag byte of each block from `lba` (0 for zeros), checking each
/// block is uniform.
fn tags(d: &mut Driver<SimDevice>, lba: u64, n: u32) -> Vec<u8> {
    let bs = d.block_size();
    let data = d.read(lba, n).unwrap();
    data.chunks(bs)
        .map(|b| {
            assert!(b.iter().all(|&x| x == b[0]), "a torn block");
            b[0]
        })
        .collect()
}

#[test]
fn clone_move_delete_on_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let p = img.to_str().unwrap();
    with_volume(&img, |d| fill(d, 0, &[1, 2, 3, 4, 5, 6, 7, 8]));

    let out = ok(zftl(
        dir.path(),
        &["range", "clone", "0:100:4", "4:200:4", "--image", p],
    ));
    let text = stdout(&out);
    assert!(text.contains("clone applied on image"), "{text}");
    assert!(text.contains("operations: 2"), "{text}");
    assert!(text.contains("blocks:     8"), "{text}");

    let v = json(zftl(
        dir.path(),
        &["range", "move", "100:300:2", "--image", p, "--json"],
    ));
    assert_eq!(v["op"], "move");
    assert_eq!(v["operations"], 1);
    assert_eq!(v["blocks"], 2);
    assert_eq!(v["image"], p);

    let v = json(zftl(
        dir.path(),
        &["--json", "range", "delete", "5:1", "7:1", "--image", p],
    ));
    assert_eq!(
        (v["op"].as_str(), v["blocks"].as_u64()),
        (Some("delete"), Some(2))
    );

    with_volume(&img, |d| {
        assert_eq!(tags(d, 0, 8), [1, 2, 3, 4, 5, 0, 7, 0]);
        assert_eq!(tags(d, 100, 4), [0, 0, 3, 4]);
        assert_eq!(tags(d, 200, 4), [5, 6, 7, 8]);
        assert_eq!(tags(d, 300, 2), [1, 2]);
        assert!(d.stats().shared_blocks >= 4);
    });
    // The image is clean after each command's shutdown.
    ok(zftl(dir.path(), &["check", "--image", p]));
}

#[test]
fn merge_with_each_policy() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let p = img.to_str().unwrap();
    // 0..4 the origin; 100.. and 200.. clones of it, each then written:
    // both change block 1, only 100 changes block 0, only 200 block 3.
    with_volume(&img, |d| {
        fill(d, 0, &[1, 2, 3, 4]);
        d.clone_ranges(&[(0, 100, 4), (0, 200, 4)]).unwrap();
        fill(d, 100, &[10, 11]);
        fill(d, 201, &[21]);
        fill(d, 203, &[23]);
    });
    let merge = |policy: &str| {
        zftl(
            dir.path(),
            &[
                "range", "merge", "--dst", "0", "--blocks", "4", "--policy", policy, "100", "200",
                "--image", p,
            ],
        )
    };
    let err = refused(merge("fail"));
    assert!(err.contains("merge conflict at block 1"), "{err}");
    with_volume(&img, |d| assert_eq!(tags(d, 0, 4), [1, 2, 3, 4]));
    // The default policy is fail.
    let err = refused(zftl(
        dir.path(),
        &[
            "range", "merge", "--dst", "0", "--blocks", "4", "100", "200", "--image", p,
        ],
    ));
    assert!(err.contains("merge conflict"), "{err}");
    let v = json(zftl(
        dir.path(),
        &[
            "range",
            "merge",
            "--dst",
            "0",
            "--blocks",
            "4",
            "--policy",
            "last-wins",
            "100",
            "200",
            "--image",
            p,
            "--json",
        ],
    ));
    assert_eq!(
        (v["op"].as_str(), v["operations"].as_u64()),
        (Some("merge"), Some(1))
    );
    with_volume(&img, |d| assert_eq!(tags(d, 0, 4), [10, 21, 3, 23]));
    with_volume(&img, |d| fill(d, 0, &[1, 2, 3, 4]));
    with_volume(&img, |d| {
        d.clone_ranges(&[(0, 100, 4), (0, 200, 4)]).unwrap()
    });
    with_volume(&img, |d| {
        fill(d, 100, &[10, 11]);
        fill(d, 201, &[21]);
    });
    ok(merge("first-wins"));
    with_volume(&img, |d| assert_eq!(tags(d, 0, 4), [10, 11, 3, 4]));
}

#[test]
fn attributes_set_listed_enforced_and_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let p = img.to_str().unwrap();
    with_volume(&img, |d| fill(d, 0, &[1, 2]));
    ok(zftl(
        dir.path(),
        &["range", "attr", "immutable", "100:8", "--image", p],
    ));
    ok(zftl(
        dir.path(),
        &[
            "range",
            "attr",
            "non-persistent",
            "300:2",
            "400:1",
            "--image",
            p,
        ],
    ));
    let text = stdout(&ok(zftl(dir.path(), &["range", "attrs", "--image", p])));
    assert!(text.contains("attribute ranges on image"), "{text}");
    assert!(text.contains(": 3"), "{text}");
    assert!(
        text.contains("immutable") && text.contains("non-persistent"),
        "{text}"
    );
    let v = json(zftl(
        dir.path(),
        &["range", "attrs", "--image", p, "--json"],
    ));
    assert_eq!(
        v["ranges"],
        serde_json::json!([
            {"lba": 100, "blocks": 8, "attributes": ["immutable"]},
            {"lba": 300, "blocks": 2, "attributes": ["non-persistent"]},
            {"lba": 400, "blocks": 1, "attributes": ["non-persistent"]},
        ])
    );
    assert_eq!(v["next"], Value::Null);
    // One page of --max ranges from --from, and where the rest start.
    let v = json(zftl(
        dir.path(),
        &[
            "range", "attrs", "--from", "101", "--max", "1", "--image", p, "--json",
        ],
    ));
    assert_eq!(v["ranges"][0]["lba"], 100);
    assert_eq!(v["ranges"].as_array().unwrap().len(), 1);
    assert_eq!(v["next"], 300);

    // Immutable: clones into it, moves out of it, deletes refused; nothing changed.
    for args in [
        vec!["range", "clone", "0:104:1"],
        vec!["range", "move", "100:0:1"],
        vec!["range", "delete", "90:20"],
    ] {
        let mut a = args.clone();
        a.extend(["--image", p]);
        let err = refused(zftl(dir.path(), &a));
        assert!(err.contains("immutable range"), "{args:?}: {err}");
        assert!(err.contains(p), "{err}");
    }
    with_volume(&img, |d| {
        assert_eq!(tags(d, 0, 2), [1, 2]);
        assert_eq!(tags(d, 104, 1), [0]);
    });
    ok(zftl(
        dir.path(),
        &["range", "attr", "mutable", "100:8", "--image", p],
    ));
    ok(zftl(
        dir.path(),
        &[
            "range",
            "attr",
            "persistent",
            "300:2",
            "400:1",
            "--image",
            p,
        ],
    ));
    let v = json(zftl(
        dir.path(),
        &["range", "attrs", "--image", p, "--json"],
    ));
    assert_eq!(v["ranges"], serde_json::json!([]));
    ok(zftl(
        dir.path(),
        &["range", "clone", "0:104:1", "--image", p],
    ));
    with_volume(&img, |d| assert_eq!(tags(d, 104, 1), [1]));
}

#[test]
fn the_default_image_is_used_without_image() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    std::fs::rename(&img, dir.path().join("default.img")).unwrap();
    let v = json(zftl(dir.path(), &["range", "attrs", "--json"]));
    assert_eq!(
        v["image"],
        dir.path().join("default.img").display().to_string()
    );
}

#[test]
fn bad_arguments_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let p = img.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["range", "clone", "0:100"], "SRC:DST:BLOCKS"),
        (vec!["range", "clone", "0:100:0"], "at least 1"),
        (vec!["range", "clone", "a:100:1"], "not a whole number"),
        (vec!["range", "clone", "-1:100:1"], ""),
        (vec!["range", "clone"], "required"),
        (vec!["range", "delete", "5"], "LBA:BLOCKS"),
        (vec!["range", "attr", "frozen", "0:1"], "frozen"),
        (vec!["range", "attr", "immutable"], "required"),
        (vec!["range", "merge", "--blocks", "1", "8"], "--dst"),
        (
            vec!["range", "merge", "--dst", "0", "--blocks", "0", "8"],
            "--blocks",
        ),
        (
            vec![
                "range", "merge", "--dst", "0", "--blocks", "1", "--policy", "newest", "8",
            ],
            "newest",
        ),
        (vec!["range", "attrs", "--max", "0"], "--max"),
        (vec!["range", "attrs", "--max", "5000"], "--max"),
        (
            vec!["range", "attrs", "--image", p, "--server", "s"],
            "cannot be used with",
        ),
        (vec!["range", "snapshot"], "snapshot"),
    ];
    for (args, want) in cases {
        let err = usage(zftl(dir.path(), &args));
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // Past the protocol's bounds: checked before anything is opened.
    let many: Vec<String> = (0..257).map(|i| format!("{i}:1")).collect();
    let mut args = vec!["range", "delete"];
    args.extend(many.iter().map(String::as_str));
    args.extend(["--image", "/nonexistent.img"]);
    let err = usage(zftl(dir.path(), &args));
    assert!(err.contains("1 to 256") && err.contains("257"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let sources: Vec<String> = (1..=17).map(|i| (i * 10).to_string()).collect();
    let mut args = vec!["range", "merge", "--dst", "0", "--blocks", "1"];
    args.extend(sources.iter().map(String::as_str));
    let err = usage(zftl(dir.path(), &args));
    assert!(err.contains("1 to 16"), "{err}");
}

#[test]
fn refusals_and_missing_volumes_exit_1_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let p = img.to_str().unwrap();
    let err = refused(zftl(
        dir.path(),
        &["range", "clone", "0:18446744073709551615:1", "--image", p],
    ));
    assert!(err.contains("outside the logical space"), "{err}");
    let err = refused(zftl(dir.path(), &["range", "move", "0:2:4", "--image", p]));
    assert!(err.contains("overlap"), "{err}");
    let missing = dir.path().join("none.img");
    let err = refused(zftl(
        dir.path(),
        &[
            "range",
            "delete",
            "0:1",
            "--image",
            missing.to_str().unwrap(),
        ],
    ));
    assert!(err.contains("cannot open image"), "{err}");
    // An image without an FTL.
    let blank = dir.path().join("blank.img");
    ok(zftl(
        dir.path(),
        &[
            "sim",
            "create",
            blank.to_str().unwrap(),
            "--blocks-per-lun",
            "4",
        ],
    ));
    let err = refused(zftl(
        dir.path(),
        &["range", "attrs", "--image", blank.to_str().unwrap()],
    ));
    assert!(err.contains("zftl format"), "{err}");
    // No server at the socket.
    let err = refused(zftl(
        dir.path(),
        &[
            "range",
            "attrs",
            "--server",
            dir.path().join("no.control").to_str().unwrap(),
        ],
    ));
    assert!(err.contains("cannot connect"), "{err}");
}

#[test]
fn help_explains_units_and_shows_examples() {
    let dir = tempfile::tempdir().unwrap();
    let text = stdout(&ok(zftl(dir.path(), &["range", "--help"])));
    for want in [
        "blocks of the volume's block size",
        "atomic",
        "--server",
        "zftl range clone 0:1000:256",
        "zftl range merge --dst 0 --blocks 256 --policy last-wins",
        "zftl range attr immutable",
        "Exit status",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    let text = stdout(&ok(zftl(dir.path(), &["range", "merge", "--help"])));
    assert!(
        text.contains("first-wins") && text.contains("last-wins"),
        "{text}"
    );
}
