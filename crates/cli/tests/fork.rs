//! `zftl fork create|delete|list` as a user runs them on an image: text
//! and `--json`, the fork's blocks written and read through the library
//! between the runs, the errors (a name taken or malformed, an unknown
//! snapshot or fork, the base snapshot of a live fork, bad arguments),
//! the counters in `zftl stats`; both tag modes. Through `--server` they
//! send the same control requests (`tests/fork_cli.sh` runs them against
//! a live `zftl serve` with real NBD clients).

mod common;
use common::{json, names, ok, refused, stdout, tagged_image, usage, with_volume, zftl};

#[test]
fn fork_create_list_delete_on_an_image() {
    for oob in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let path = tagged_image(home, if oob { "oob.img" } else { "band.img" }, oob);
        let p = path.to_str().unwrap();
        let bs = with_volume(&path, |d| {
            let bs = d.block_size();
            for lba in 0..4u8 {
                d.write(u64::from(lba), &vec![lba + 1; bs]).unwrap();
            }
            bs
        });
        ok(zftl(home, &["snapshot", "create", "s", "--image", p]));
        with_volume(&path, |d| d.write(0, &vec![9; bs]).unwrap());

        let created = json(zftl(
            home,
            &["fork", "create", "s", "dev", "--image", p, "--json"],
        ));
        assert_eq!(created["op"], "fork_create");
        assert_eq!(created["image"], p);
        let fork = &created["fork"];
        assert_eq!(fork["name"], "dev");
        assert_eq!(fork["base"]["name"], "s");
        assert!(fork["created"].as_str().unwrap().ends_with('Z'));
        let at = fork["lba_offset"].as_u64().unwrap();
        let text = stdout(&ok(zftl(
            home,
            &["fork", "create", "s", "qa", "--image", p],
        )));
        assert!(
            text.starts_with(&format!(
                "fork \"qa\" of snapshot \"s\" created on image {p} (durable)"
            )),
            "{text}"
        );
        assert!(text.contains("lba_offset:"), "{text}");

        // The fork reads the snapshot; its writes are its own.
        with_volume(&path, |d| {
            assert_eq!(d.read(at, 1).unwrap(), vec![1; bs]);
            d.write(at + 1, &vec![7; bs]).unwrap();
            assert_eq!(d.read(1, 1).unwrap(), vec![2; bs]);
            assert_eq!(d.read(0, 1).unwrap(), vec![9; bs]);
        });

        let list = json(zftl(home, &["fork", "list", "--image", p, "--json"]));
        assert_eq!(names(&list, "forks"), ["dev", "qa"]);
        let text = stdout(&ok(zftl(home, &["fork", "list", "--image", p])));
        assert!(
            text.starts_with(&format!("forks on image {p}: 2\n")),
            "{text}"
        );
        let row = text.lines().find(|l| l.contains(" dev ")).unwrap();
        assert!(
            row.contains(" s ") && row.contains(&at.to_string()),
            "{row}"
        );
        let stats = stdout(&ok(zftl(home, &["stats", "--image", p])));
        assert!(
            stats
                .lines()
                .any(|l| l.split_whitespace().eq(["forks:", "2"])),
            "{stats}"
        );

        for (args, says) in [
            (
                vec!["fork", "create", "s", "dev"],
                "a fork named \"dev\" exists",
            ),
            (
                vec!["fork", "create", "s", "a/b"],
                "fork names are 1 to 63 bytes",
            ),
            (
                vec!["fork", "create", "nope", "x"],
                "no snapshot named \"nope\"",
            ),
            (vec!["fork", "delete", "nope"], "no fork named \"nope\""),
            (vec!["snapshot", "delete", "s"], "base of fork"),
        ] {
            let mut args = args.clone();
            args.extend(["--image", p]);
            let err = refused(zftl(home, &args));
            assert!(err.contains(says), "{args:?}: {err}");
        }
        let err = usage(zftl(home, &["fork", "create", "s", "--image", p]));
        assert!(err.contains("NAME"), "{err}");
        let help = stdout(&ok(zftl(home, &["fork", "--help"])));
        assert!(help.contains("NBD") && help.contains("--server"), "{help}");

        let out = stdout(&ok(zftl(home, &["fork", "delete", "dev", "--image", p])));
        assert!(out.starts_with("fork \"dev\" deleted on image"), "{out}");
        let list = json(zftl(home, &["fork", "list", "--image", p, "--json"]));
        assert_eq!(names(&list, "forks"), ["qa"]);
        ok(zftl(home, &["fork", "delete", "qa", "--image", p]));
        let text = stdout(&ok(zftl(home, &["fork", "list", "--image", p])));
        assert_eq!(text, format!("forks on image {p}: 0\n"));
        ok(zftl(home, &["snapshot", "delete", "s", "--image", p]));
        ok(zftl(home, &["check", "--image", p]));
    }
}
