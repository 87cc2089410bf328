//! The control protocol (`zftl::control`, docs/control.md) end to end
//! without a socket: a corpus of malformed lines against the parser, then
//! every request run against a `Driver`, a `Handle` and an `InlineHandle`
//! on the simulator, with the replies a client reads back.

use serde_json::Value;
use zftl::control::{
    error_line, execute, parse_line, parse_reply, reply_line, Command, Id, Target, MAX_LINE_BYTES,
};
use zftl::core::{Driver, FormatOptions, FtlConfig, ProtectWindow};
use zftl::handle::{Handle, InlineHandle};
use zftl::sim::{SimConfig, SimDevice};

/// `(kind, line)` of tests/data/control_malformed.txt.
fn corpus() -> Vec<(String, Vec<u8>)> {
    let text = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/control_malformed.txt"
    ))
    .expect("the corpus");
    text.split(|&b| b == b'\n')
        .filter(|l| !l.is_empty() && !l.starts_with(b"#"))
        .map(|l| {
            let tab = l.iter().position(|&b| b == b'\t').expect("KIND<TAB>LINE");
            (
                String::from_utf8(l[..tab].to_vec()).unwrap(),
                l[tab + 1..].to_vec(),
            )
        })
        .collect()
}

/// Lines made here: too long to keep in a file, or numerous.
fn generated() -> Vec<(&'static str, Vec<u8>)> {
    let mut v = Vec::new();
    // One byte past the limit, and far past it.
    let mut long = br#"{"op":"ping"}"#.to_vec();
    long.resize(MAX_LINE_BYTES + 1, b' ');
    v.push(("too_long", long));
    let mut huge = br#"{"op":"delete","ranges":["#.to_vec();
    while huge.len() < 3 * MAX_LINE_BYTES {
        huge.extend_from_slice(br#"{"lba":0,"blocks":1},"#);
    }
    v.push(("too_long", huge));
    // 257 ranges, 300 vector items, 100000 junk items: bad_vector or parse,
    // never kept.
    let ranges: Vec<String> = (0..257)
        .map(|i| format!(r#"{{"lba":{i},"blocks":1}}"#))
        .collect();
    v.push((
        "bad_vector",
        format!(
            r#"{{"id":1,"op":"delete","ranges":[{}]}}"#,
            ranges.join(",")
        )
        .into_bytes(),
    ));
    let item = r#"{"op":"delete","ranges":[{"lba":0,"blocks":1}]}"#;
    v.push((
        "bad_vector",
        format!(r#"{{"op":"vector","ops":[{}]}}"#, vec![item; 300].join(",")).into_bytes(),
    ));
    v.push((
        "parse",
        format!(
            r#"{{"op":"delete","ranges":[{}]}}"#,
            vec!["7"; 100_000].join(",")
        )
        .into_bytes(),
    ));
    // Numbers of every size where a whole number is wanted.
    for n in [
        "1.0",
        "-0",
        "1e3",
        "0x10",
        "18446744073709551616",
        "1e308",
        "NaN",
    ] {
        v.push((
            "parse",
            format!(r#"{{"op":"clone","ranges":[{{"src":{n},"dst":0,"blocks":1}}]}}"#).into_bytes(),
        ));
    }
    v
}

#[test]
fn malformed_lines_get_the_error_kind_the_corpus_names() {
    let all: Vec<(String, Vec<u8>)> = corpus()
        .into_iter()
        .chain(generated().into_iter().map(|(k, l)| (k.to_string(), l)))
        .collect();
    assert!(all.len() > 60, "{} lines", all.len());
    for (kind, line) in &all {
        let shown = String::from_utf8_lossy(&line[..line.len().min(120)]).into_owned();
        let rejected = match parse_line(line) {
            Ok(p) => panic!("accepted {shown}: {p:?}"),
            Err(r) => r,
        };
        assert_eq!(rejected.error.kind.as_str(), kind, "{shown}: {rejected:?}");
        assert!(!rejected.error.message.is_empty());
        // The reply is one line a client reads back.
        let reply = error_line(rejected.id.as_ref(), &rejected.error);
        assert!(!reply.contains('\n'));
        let back = parse_reply(reply.as_bytes()).unwrap();
        assert_eq!(back.id, rejected.id);
        assert_eq!(back.result.unwrap_err().kind, *kind);
    }
}

#[test]
fn ids_come_back_on_errors_when_they_can_be_read() {
    let r =
        parse_line(br#"{"id":"abc","op":"clone","ranges":[{"lba":1,"blocks":1}]}"#).unwrap_err();
    assert_eq!(r.id, Some(Id::Text("abc".into())));
    let r = parse_line(br#"{"id":9,"op":"clone","ranges":[{"src":"x"}]}"#).unwrap_err();
    assert_eq!(r.id, Some(Id::Number(9)));
    let r = parse_line(br#"{"id":9,"op":"clone""#).unwrap_err();
    assert_eq!(r.id, None);
}

fn sim() -> SimDevice {
    SimDevice::create_memory(SimConfig::small_for_tests()).unwrap()
}

/// Blocks in and out of each kind of target, through its own calls.
trait Blocks: Target {
    /// Writes `data`, whole blocks, from `lba`.
    fn put_data(&mut self, lba: u64, data: Vec<u8>);
    /// Reads the block at `lba`.
    fn get(&mut self, lba: u64) -> Vec<u8>;
    /// Writes one block of `byte`s at `lba`.
    fn put(&mut self, lba: u64, byte: u8) {
        let bs = Target::block_size(self);
        self.put_data(lba, vec![byte; bs]);
    }
}

/// `Blocks` for targets with their own `write(lba, data)` and
/// `read(lba, blocks)`.
macro_rules! blocks_by_write_and_read {
    ($($target:ty),*) => {$(
        impl Blocks for $target {
            fn put_data(&mut self, lba: u64, data: Vec<u8>) {
                self.write(lba, &data).unwrap();
            }
            fn get(&mut self, lba: u64) -> Vec<u8> {
                self.read(lba, 1).unwrap()
            }
        }
    )*};
}
blocks_by_write_and_read!(Driver<SimDevice>, Handle<SimDevice>);

impl Blocks for InlineHandle<SimDevice> {
    fn put_data(&mut self, lba: u64, data: Vec<u8>) {
        self.call(zftl::core::Request::Write {
            lba,
            data,
            fua: false,
        })
        .unwrap();
    }
    fn get(&mut self, lba: u64) -> Vec<u8> {
        match self
            .call(zftl::core::Request::Read {
                lba,
                block_count: 1,
            })
            .unwrap()
        {
            zftl::core::ReplyData::Read(d) => d,
            other => panic!("{other:?}"),
        }
    }
}

/// Runs `on_handle` on a `Handle` formatted with `opts` on `dev`, then
/// `on_inline` on an `InlineHandle` formatted anew on the same device,
/// each through a clone of the handle and with its block size, and shuts
/// both down.
fn on_handles(
    dev: SimDevice,
    opts: &FormatOptions,
    on_handle: fn(&mut Handle<SimDevice>, usize),
    on_inline: fn(&mut InlineHandle<SimDevice>, usize),
) {
    let h = Handle::format(dev, opts, FtlConfig::default()).unwrap();
    let mut t = h.clone();
    on_handle(&mut t, h.block_size());
    drop(t);
    let dev = h.shutdown().unwrap();

    let h = InlineHandle::new(Driver::format(dev, opts, FtlConfig::default()).unwrap());
    let mut t = h.clone();
    on_inline(&mut t, h.block_size());
    drop(t);
    h.shutdown().unwrap();
}

/// Runs one request line against `t` and returns the reply a client reads.
fn request<T: Target>(t: &mut T, line: &str) -> Result<serde_json::Map<String, Value>, String> {
    let parsed = parse_line(line.as_bytes()).map_err(|r| r.error.kind.to_string())?;
    let id = parsed.id.clone();
    let outcome = execute(t, parsed.command);
    let reply = parse_reply(reply_line(id.as_ref(), &outcome).as_bytes()).unwrap();
    assert_eq!(reply.id, id);
    reply.result.map_err(|e| e.kind)
}

/// The same script on any target of `bs`-byte blocks: data written
/// beforehand (`written_script`).
fn script<T: Blocks>(t: &mut T, bs: usize) {
    let ping = request(t, r#"{"id":1,"op":"ping"}"#).unwrap();
    assert_eq!(ping["block_size"], bs as u64);
    assert_eq!(ping["protocol"], 1);
    let logical = ping["logical_blocks"].as_u64().unwrap();

    let r = request(
        t,
        r#"{"id":2,"op":"clone","ranges":[{"src":0,"dst":100,"blocks":4},{"src":4,"dst":200,"blocks":4}]}"#,
    )
    .unwrap();
    assert_eq!(
        (
            r["op"].as_str(),
            r["operations"].as_u64(),
            r["blocks"].as_u64()
        ),
        (Some("clone"), Some(2), Some(8))
    );
    for i in 0..4 {
        assert_eq!(t.get(100 + i), t.get(i));
        assert_eq!(t.get(200 + i), t.get(4 + i));
    }
    assert_ne!(t.get(100), vec![0; bs]);

    let stats = request(t, r#"{"op":"stats"}"#).unwrap();
    assert_eq!(stats["stats"]["range_clones"], 2);
    assert!(stats["stats"]["shared_blocks"].as_u64().unwrap() >= 8);

    request(
        t,
        r#"{"op":"attr","attribute":"immutable","ranges":[{"lba":100,"blocks":4}]}"#,
    )
    .unwrap();
    assert_eq!(
        request(
            t,
            r#"{"op":"move","ranges":[{"src":100,"dst":300,"blocks":1}]}"#
        ),
        Err("immutable".into())
    );
    assert_eq!(
        request(t, r#"{"op":"delete","ranges":[{"lba":103,"blocks":1}]}"#),
        Err("immutable".into())
    );
    // An atomic vector whose last operation fails changes nothing.
    let before = t.get(0);
    assert_eq!(
        request(
            t,
            r#"{"op":"vector","ops":[{"op":"delete","ranges":[{"lba":0,"blocks":1}]},{"op":"clone","ranges":[{"src":4,"dst":102,"blocks":1}]}]}"#
        ),
        Err("immutable".into())
    );
    assert_eq!(t.get(0), before);
    let attrs = request(t, r#"{"op":"attrs"}"#).unwrap();
    assert_eq!(
        attrs["ranges"],
        serde_json::json!([{"lba": 100, "blocks": 4, "attributes": ["immutable"]}])
    );
    assert_eq!(attrs["next"], Value::Null);

    // Out of range, overlapping, zero blocks: the core's admission.
    let past = format!(
        r#"{{"op":"delete","ranges":[{{"lba":{},"blocks":2}}]}}"#,
        logical - 1
    );
    assert_eq!(request(t, &past), Err("out_of_range".into()));
    assert_eq!(
        request(
            t,
            r#"{"op":"clone","ranges":[{"src":0,"dst":2,"blocks":4}]}"#
        ),
        Err("bad_vector".into())
    );
    assert_eq!(
        request(t, r#"{"op":"delete","ranges":[{"lba":0,"blocks":0}]}"#),
        Err("bad_vector".into())
    );

    // A merge: 400..404 cloned from 0..4, then 0..2 moved away from the
    // origin by a clone of 200..202 into 500 and a merge back.
    for (src, dst, blocks) in [
        (0, 400, 4),
        (200, 400, 2),
        (4, 401, 1),
        (0, 500, 4),
        (6, 501, 1),
    ] {
        let clone =
            format!(r#"{{"op":"clone","ranges":[{{"src":{src},"dst":{dst},"blocks":{blocks}}}]}}"#);
        request(t, &clone).unwrap();
    }
    // Sources 400 and 500 both changed block 1 (to different data).
    let merge = |policy: &str| {
        format!(r#"{{"op":"merge","sources":[400,500],"dst":0,"blocks":4,"policy":"{policy}"}}"#)
    };
    assert_eq!(request(t, &merge("fail")), Err("merge_conflict".into()));
    let want_400 = t.get(401);
    request(t, &merge("first-wins")).unwrap();
    assert_eq!(t.get(1), want_400);
    assert_eq!(t.get(0), t.get(200));

    // Clear and list again.
    request(
        t,
        r#"{"op":"attr","attribute":"mutable","ranges":[{"lba":100,"blocks":4}]}"#,
    )
    .unwrap();
    let attrs = request(t, r#"{"op":"attrs"}"#).unwrap();
    assert_eq!(attrs["ranges"], serde_json::json!([]));
    request(
        t,
        r#"{"op":"move","ranges":[{"src":100,"dst":300,"blocks":4}]}"#,
    )
    .unwrap();
    assert_eq!(t.get(100), vec![0; bs]);
}

/// `script` after 8 blocks written from 0, block i holding i + 1.
fn written_script<T: Blocks>(t: &mut T, bs: usize) {
    t.put_data(0, (0..8u8).flat_map(|i| vec![i + 1; bs]).collect());
    script(t, bs);
}

#[test]
fn requests_run_on_a_driver() {
    let mut d = Driver::format(sim(), &FormatOptions::default(), FtlConfig::default()).unwrap();
    let bs = d.block_size();
    written_script(&mut d, bs);
    // A clean remount keeps what the control requests did.
    let want = d.read(1, 1).unwrap();
    let mut d = Driver::mount(d.shutdown().unwrap(), FtlConfig::default()).unwrap();
    assert_eq!(d.read(1, 1).unwrap(), want);
    // 300.. took what 100.. named: the first blocks as first written.
    assert_eq!(d.read(300, 1).unwrap(), vec![1; bs]);
    assert_eq!(d.read(301, 1).unwrap(), vec![2; bs]);
    assert_eq!(d.ftl().attributes(), Vec::new());
}

#[test]
fn requests_run_on_a_handle_and_an_inline_handle() {
    on_handles(
        sim(),
        &FormatOptions::default(),
        written_script,
        written_script,
    );
    assert!(matches!(
        parse_line(br#"{"op":"stats"}"#).unwrap().command,
        Command::Stats
    ));
}

/// Snapshot requests on any target of `bs`-byte blocks formatted with
/// tags in band.
fn snapshot_script<T: Blocks>(t: &mut T, bs: usize) {
    t.put(0, 1);
    t.put(1, 2);
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let c = request(t, r#"{"id":1,"op":"snapshot_create","name":"first"}"#).unwrap();
    assert_eq!(c["op"], "snapshot_create");
    let first = &c["snapshot"];
    assert_eq!(first["name"], "first");
    assert!(first["wall_ns"].as_u64().unwrap() >= before);
    assert!(first["created"].as_str().unwrap().ends_with('Z'));
    for key in ["id", "epoch", "create_seq"] {
        assert!(first[key].is_u64(), "{key}: {c:?}");
    }
    // Replace block 0 and trim block 1: the snapshot keeps both.
    t.put(0, 9);
    request(t, r#"{"op":"delete","ranges":[{"lba":1,"blocks":1}]}"#).unwrap();
    let second = request(t, r#"{"op":"snapshot_create","name":"second"}"#).unwrap();
    assert!(second["snapshot"]["id"].as_u64() > first["id"].as_u64());
    assert!(second["snapshot"]["create_seq"].as_u64() > first["create_seq"].as_u64());
    assert_eq!(
        request(t, r#"{"op":"snapshot_create","name":"first"}"#),
        Err("snapshot".into())
    );
    assert_eq!(
        request(t, r#"{"op":"snapshot_create","name":""}"#),
        Err("snapshot".into())
    );

    let list = request(t, r#"{"op":"snapshots"}"#).unwrap();
    let names: Vec<&str> = list["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["first", "second"]);
    assert_eq!(&list["snapshots"][0], first);
    assert!(list["snapshot_versions"].as_u64().unwrap() >= 2, "{list:?}");
    assert!(list["snapshot_memory_bytes"].is_u64());

    let r = request(
        t,
        r#"{"op":"snapshot_read","name":"first","lba":0,"blocks":3}"#,
    )
    .unwrap();
    assert_eq!(
        (r["lba"].as_u64(), r["blocks"].as_u64()),
        (Some(0), Some(3))
    );
    let data = zftl::control::decode_data(r["data"].as_str().unwrap()).unwrap();
    let want: Vec<u8> = [1u8, 2, 0].iter().flat_map(|&b| vec![b; bs]).collect();
    assert_eq!(data, want);
    let r = request(
        t,
        r#"{"op":"snapshot_read","name":"second","lba":0,"blocks":2}"#,
    )
    .unwrap();
    let data = zftl::control::decode_data(r["data"].as_str().unwrap()).unwrap();
    assert_eq!(&data[..bs], &vec![9; bs][..]);
    assert_eq!(&data[bs..], &vec![0; bs][..]);
    assert_eq!(t.get(0), vec![9; bs]);
    assert_eq!(
        request(
            t,
            r#"{"op":"snapshot_read","name":"third","lba":0,"blocks":1}"#
        ),
        Err("snapshot".into())
    );
    let too_many = zftl::control::MAX_SNAPSHOT_READ_BYTES / bs + 1;
    assert_eq!(
        request(
            t,
            &format!(r#"{{"op":"snapshot_read","name":"first","lba":0,"blocks":{too_many}}}"#)
        ),
        Err("too_large".into())
    );
    let ping = request(t, r#"{"op":"ping"}"#).unwrap();
    let past = ping["logical_blocks"].as_u64().unwrap();
    assert_eq!(
        request(
            t,
            &format!(r#"{{"op":"snapshot_read","name":"first","lba":{past},"blocks":1}}"#)
        ),
        Err("out_of_range".into())
    );

    let d = request(t, r#"{"op":"snapshot_delete","name":"first"}"#).unwrap();
    assert_eq!(
        (d["op"].as_str(), d["name"].as_str()),
        (Some("snapshot_delete"), Some("first"))
    );
    assert_eq!(
        request(t, r#"{"op":"snapshot_delete","name":"first"}"#),
        Err("snapshot".into())
    );
    let list = request(t, r#"{"op":"snapshots"}"#).unwrap();
    assert_eq!(list["snapshots"].as_array().unwrap().len(), 1);
    let stats = request(t, r#"{"op":"stats"}"#).unwrap();
    assert_eq!(stats["stats"]["snapshots"], 1);
    assert_eq!(stats["stats"]["snapshot_creates"], 2);
    assert_eq!(stats["stats"]["snapshot_deletes"], 1);
}

fn in_band() -> FormatOptions {
    FormatOptions {
        tag_placement: zftl::core::TagPlacement::InBand,
        ..FormatOptions::default()
    }
}

#[test]
fn snapshot_requests_run_on_a_driver_a_handle_and_an_inline_handle() {
    let mut d = Driver::format(sim(), &in_band(), FtlConfig::default()).unwrap();
    let bs = d.block_size();
    snapshot_script(&mut d, bs);
    // What the requests did survives a clean remount.
    let d = Driver::mount(d.shutdown().unwrap(), FtlConfig::default()).unwrap();
    let names: Vec<String> = d.snapshots().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["second"]);
    let dev = d.shutdown().unwrap();

    on_handles(dev, &in_band(), snapshot_script, snapshot_script);
}

/// `snapshot_revert` on any target formatted with tags in band: the
/// volume goes back to a snapshot, the undo snapshot (named or `undo-ID`)
/// takes it forward again, and refusals change nothing.
fn revert_script<T: Blocks>(t: &mut T, bs: usize) {
    let block = |b: u8| vec![b; bs];
    t.put(0, 1);
    t.put(1, 2);
    request(t, r#"{"op":"snapshot_create","name":"a"}"#).unwrap();
    // Since "a": 0 rewritten, 1 deleted, 2 written where nothing was.
    t.put(0, 9);
    request(t, r#"{"op":"delete","ranges":[{"lba":1,"blocks":1}]}"#).unwrap();
    t.put(2, 3);
    let after = |t: &mut T| (0..3).map(|lba| t.get(lba)).collect::<Vec<_>>();
    let later = vec![block(9), block(0), block(3)];
    assert_eq!(after(t), later);

    let r = request(
        t,
        r#"{"id":1,"op":"snapshot_revert","to":"a","undo":"before-revert"}"#,
    )
    .unwrap();
    assert_eq!(r["op"], "snapshot_revert");
    assert_eq!(
        (&r["to"]["name"], &r["to"]["kind"]),
        (&"a".into(), &"snapshot".into())
    );
    let undo = &r["undo"];
    assert_eq!(undo["name"], "before-revert");
    assert_eq!(undo["kind"], "snapshot");
    assert!(undo["created"].as_str().unwrap().ends_with('Z'));
    assert!(undo["create_seq"].as_u64() > r["to"]["create_seq"].as_u64());
    assert_eq!(after(t), vec![block(1), block(2), block(0)]);
    // Nothing changed since "a" now.
    let d = request(t, r#"{"op":"snapshot_diff","since":"a"}"#).unwrap();
    assert_eq!(d["changed_blocks"], 0);

    // Refused: nothing changes, no undo snapshot is left.
    for (line, kind) in [
        (r#"{"op":"snapshot_revert","to":"nope"}"#, "snapshot"),
        (
            r#"{"op":"snapshot_revert","to":"a","undo":"a"}"#,
            "snapshot",
        ),
        (
            r#"{"op":"snapshot_revert","to":"a","undo":"@2026-11-27T10:00:00Z"}"#,
            "snapshot",
        ),
        (r#"{"op":"snapshot_revert","to":"a","undo":""}"#, "snapshot"),
        (r#"{"op":"snapshot_revert","undo":"x"}"#, "parse"),
    ] {
        assert_eq!(request(t, line), Err(kind.into()), "{line}");
    }
    assert_eq!(after(t), vec![block(1), block(2), block(0)]);

    // Undo the revert: the default undo name is undo-ID.
    let r = request(t, r#"{"op":"snapshot_revert","to":"before-revert"}"#).unwrap();
    let id = r["undo"]["id"].as_u64().unwrap();
    assert_eq!(r["undo"]["name"], format!("undo-{id}"));
    assert_eq!(after(t), later);
    let list = request(t, r#"{"op":"snapshots"}"#).unwrap();
    let names: Vec<&str> = list["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "before-revert", format!("undo-{id}").as_str()]);
    let stats = request(t, r#"{"op":"stats"}"#).unwrap();
    assert_eq!(stats["stats"]["snapshot_reverts"], 2);
    assert_eq!(stats["stats"]["snapshot_revert_blocks"], 6);
}

#[test]
fn snapshot_revert_runs_on_a_driver_a_handle_and_an_inline_handle() {
    let mut d = Driver::format(sim(), &in_band(), FtlConfig::default()).unwrap();
    let bs = d.block_size();
    revert_script(&mut d, bs);
    // A remount keeps the reverted volume and the undo snapshots.
    let mut d = Driver::mount(d.shutdown().unwrap(), FtlConfig::default()).unwrap();
    assert_eq!(d.read(0, 1).unwrap(), vec![9; bs]);
    assert_eq!(d.snapshots().len(), 3);
    let dev = d.shutdown().unwrap();

    on_handles(dev, &in_band(), revert_script, revert_script);
}

/// The protection window's points are listed with kind `point` and
/// revert like any snapshot (a wall clock of the test's own times them).
#[test]
fn points_are_listed_as_points_and_revert_by_name() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    const SEC: u64 = 1_000_000_000;
    // 2026-01-01T00:00:00Z.
    let clock = Arc::new(AtomicU64::new(1_767_225_600 * SEC));
    let cfg = FtlConfig {
        protect_window: Some(ProtectWindow::Secs(3600)),
        ..FtlConfig::default()
    };
    let mut d = Driver::format(sim(), &FormatOptions::default(), cfg).unwrap();
    let c = clock.clone();
    d.set_wall_clock(move || c.load(Ordering::SeqCst));
    let bs = d.block_size();
    // 3.5 s apart (the interval of a 1 h window): a point after each.
    for b in 1..=2u8 {
        d.write(0, &vec![b; bs]).unwrap();
        for _ in 0..20 {
            clock.fetch_add(SEC / 5, Ordering::SeqCst);
            d.settle().unwrap();
        }
    }
    d.write(0, &vec![3; bs]).unwrap();
    let list = request(&mut d, r#"{"op":"snapshots"}"#).unwrap();
    let points: Vec<(&str, &str)> = list["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        points,
        [
            ("@2026-01-01T00:00:00Z", "point"),
            ("@2026-01-01T00:00:04Z", "point")
        ]
    );
    let r = request(
        &mut d,
        r#"{"op":"snapshot_revert","to":"@2026-01-01T00:00:00Z"}"#,
    )
    .unwrap();
    assert_eq!(r["to"]["kind"], "point");
    assert_eq!(r["undo"]["kind"], "snapshot");
    assert_eq!(d.read(0, 1).unwrap(), vec![1; bs]);
    d.shutdown().unwrap();
}

#[test]
fn snapshot_requests_on_a_volume_with_tags_in_oob() {
    let oob = SimConfig {
        oob_size_bytes: 64,
        ..SimConfig::small_for_tests()
    };
    let dev = SimDevice::create_memory(oob).unwrap();
    let mut d = Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).unwrap();
    let parsed = parse_line(br#"{"id":3,"op":"snapshot_create","name":"a"}"#).unwrap();
    execute(&mut d, parsed.command).unwrap();
    let parsed = parse_line(br#"{"id":4,"op":"snapshot_create","name":"a"}"#).unwrap();
    let e = execute(&mut d, parsed.command).unwrap_err();
    assert_eq!(e.kind.as_str(), "snapshot");
    assert!(e.message.contains("\"a\""), "{}", e.message);
    let list = request(&mut d, r#"{"op":"snapshots"}"#).unwrap();
    assert_eq!(list["snapshots"].as_array().map(Vec::len), Some(1));
}

#[test]
fn attrs_pages_through_a_full_listing() {
    let mut d = Driver::format(sim(), &FormatOptions::default(), FtlConfig::default()).unwrap();
    // 10 separate ranges, listed 3 at a time.
    for i in 0..10u64 {
        request(
            &mut d,
            &format!(r#"{{"op":"attr","attribute":"non-persistent","ranges":[{{"lba":{},"blocks":2}}]}}"#, i * 5),
        )
        .unwrap();
    }
    let mut from = 0;
    let mut seen = Vec::new();
    loop {
        let page = request(
            &mut d,
            &format!(r#"{{"op":"attrs","from":{from},"max":3}}"#),
        )
        .unwrap();
        let ranges = page["ranges"].as_array().unwrap();
        assert!(ranges.len() <= 3);
        seen.extend(ranges.iter().map(|r| r["lba"].as_u64().unwrap()));
        match page["next"].as_u64() {
            Some(next) => from = next,
            None => break,
        }
    }
    assert_eq!(seen, (0..10).map(|i| i * 5).collect::<Vec<_>>());
}

#[test]
fn async_handles_list_attributes_too() {
    let h = Handle::format(sim(), &FormatOptions::default(), FtlConfig::default()).unwrap();
    let a = h.to_async();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let listed = rt.block_on(async {
        a.set_attribute(&[(8, 4)], zftl::core::Attribute::Immutable)
            .await
            .unwrap();
        a.attributes().await.unwrap()
    });
    assert_eq!(
        listed,
        vec![(8, 4, zftl::core::range::attr_bits::IMMUTABLE)]
    );
    assert_eq!(h.attributes().unwrap(), listed);
    drop(a);
    h.shutdown().unwrap();
}

/// The runs of a `snapshot_diff` reply, as `(lba, blocks)`.
fn runs_of(reply: &serde_json::Map<String, Value>) -> Vec<(u64, u64)> {
    reply["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["lba"].as_u64().unwrap(), r["blocks"].as_u64().unwrap()))
        .collect()
}

/// Every page of a `snapshot_diff` (`fields` after `since`), at most `max`
/// runs each, joined.
fn diff_pages<T: Target>(t: &mut T, fields: &str, max: u64) -> (Vec<(u64, u64)>, usize) {
    let mut all: Vec<(u64, u64)> = Vec::new();
    let mut lba = 0;
    let mut pages = 0;
    loop {
        let line = format!(r#"{{"op":"snapshot_diff",{fields},"lba":{lba},"max":{max}}}"#);
        let page = request(t, &line).unwrap();
        pages += 1;
        let runs = runs_of(&page);
        assert!(runs.len() as u64 <= max, "{line}: {} runs", runs.len());
        assert!(runs.iter().all(|&(l, _)| l >= lba), "{line}: {runs:?}");
        zftl::core::join_runs(&mut all, runs);
        match page["next_lba"].as_u64() {
            Some(next) => {
                assert!(next > lba, "{line}: the listing does not advance");
                lba = next;
            }
            None => return (all, pages),
        }
    }
}

/// `snapshot_diff` on any target of more than two diff windows' blocks;
fn diff_script<T: Blocks>(t: &mut T) {
    let w = zftl::control::DIFF_WINDOW_BLOCKS;
    let ping = request(t, r#"{"op":"ping"}"#).unwrap();
    let logical = ping["logical_blocks"].as_u64().unwrap();
    assert!(logical > 2 * w + 10, "{logical} blocks");
    for lba in 0..5 {
        t.put(lba, 1);
    }
    request(t, r#"{"op":"snapshot_create","name":"a"}"#).unwrap();
    let d = request(t, r#"{"id":5,"op":"snapshot_diff","since":"a"}"#).unwrap();
    assert_eq!(d["op"], "snapshot_diff");
    assert_eq!(d["since"]["name"], "a");
    assert_eq!(d["until"], Value::Null);
    assert_eq!(d["block_size"], ping["block_size"]);
    assert_eq!(
        (d["lba"].as_u64(), d["blocks"].as_u64()),
        (Some(0), Some(logical))
    );
    assert_eq!(runs_of(&d), []);
    assert_eq!(
        (d["changed_blocks"].as_u64(), &d["next_lba"]),
        (Some(0), &Value::Null)
    );

    // Blocks 1 and 2 rewritten, 3 trimmed, 10 written, and a run across
    // the boundary of the FTL queries (w - 1, w): one run in the reply.
    t.put(1, 2);
    t.put(2, 2);
    request(t, r#"{"op":"delete","ranges":[{"lba":3,"blocks":1}]}"#).unwrap();
    t.put(10, 2);
    t.put(w - 1, 2);
    t.put(w, 2);
    let want = vec![(1, 3), (10, 1), (w - 1, 2)];
    let d = request(t, r#"{"op":"snapshot_diff","since":"a"}"#).unwrap();
    assert_eq!(runs_of(&d), want);
    assert_eq!(d["changed_blocks"], 6);
    assert_eq!(d["next_lba"], Value::Null);

    request(t, r#"{"op":"snapshot_create","name":"b"}"#).unwrap();
    t.put(30, 3);
    for fields in [r#""since":"a","until":"b""#, r#""since":"b","until":"a""#] {
        let d = request(t, &format!(r#"{{"op":"snapshot_diff",{fields}}}"#)).unwrap();
        assert_eq!(runs_of(&d), want, "{fields}");
        assert!(d["until"]["name"].is_string(), "{d:?}");
    }
    let d = request(t, r#"{"op":"snapshot_diff","since":"b"}"#).unwrap();
    assert_eq!(runs_of(&d), [(30, 1)]);
    let d = request(t, r#"{"op":"snapshot_diff","since":"a"}"#).unwrap();
    assert_eq!(runs_of(&d), [(1, 3), (10, 1), (30, 1), (w - 1, 2)]);

    // A window: the runs inside it, cut at its edges.
    let d = request(
        t,
        r#"{"op":"snapshot_diff","since":"a","until":"b","lba":2,"blocks":9}"#,
    )
    .unwrap();
    assert_eq!(runs_of(&d), [(2, 2), (10, 1)]);
    assert_eq!(
        (d["lba"].as_u64(), d["blocks"].as_u64()),
        (Some(2), Some(9))
    );
    let d = request(
        t,
        &format!(r#"{{"op":"snapshot_diff","since":"a","until":"b","lba":{w},"blocks":1}}"#),
    )
    .unwrap();
    assert_eq!(runs_of(&d), [(w, 1)]);

    // Pages: one run at a time, then two; joined, the whole listing.
    let (all, pages) = diff_pages(t, r#""since":"a","until":"b""#, 1);
    assert_eq!(all, want);
    assert!(pages >= 3, "{pages} pages");
    let first = request(
        t,
        r#"{"op":"snapshot_diff","since":"a","until":"b","max":1}"#,
    )
    .unwrap();
    assert_eq!(runs_of(&first), [(1, 3)]);
    assert_eq!(first["next_lba"], 10);
    assert_eq!(first["changed_blocks"], 3);
    let (all, _) = diff_pages(t, r#""since":"a""#, 2);
    assert_eq!(all, [(1, 3), (10, 1), (30, 1), (w - 1, 2)]);

    // Errors: names (either side), the window, max.
    for (line, kind) in [
        (
            r#"{"op":"snapshot_diff","since":"nope"}"#.to_string(),
            "snapshot",
        ),
        (
            r#"{"op":"snapshot_diff","since":"a","until":"nope"}"#.to_string(),
            "snapshot",
        ),
        (
            format!(r#"{{"op":"snapshot_diff","since":"a","lba":{logical}}}"#),
            "out_of_range",
        ),
        (
            format!(
                r#"{{"op":"snapshot_diff","since":"a","lba":{},"blocks":2}}"#,
                logical - 1
            ),
            "out_of_range",
        ),
        (
            r#"{"op":"snapshot_diff","since":"a","lba":18446744073709551615,"blocks":2}"#
                .to_string(),
            "out_of_range",
        ),
        (
            r#"{"op":"snapshot_diff","since":"a","max":32769}"#.to_string(),
            "parse",
        ),
        (
            r#"{"op":"snapshot_diff","since":"a","blocks":0}"#.to_string(),
            "parse",
        ),
    ] {
        assert_eq!(request(t, &line), Err(kind.to_string()), "{line}");
    }
    let parsed = parse_line(br#"{"op":"snapshot_diff","since":"a","until":"gone"}"#).unwrap();
    let e = execute(t, parsed.command).unwrap_err();
    assert!(
        e.message.contains("no snapshot named \"gone\""),
        "{}",
        e.message
    );
    request(t, r#"{"op":"snapshot_delete","name":"a"}"#).unwrap();
    assert_eq!(
        request(t, r#"{"op":"snapshot_diff","since":"b","until":"a"}"#),
        Err("snapshot".into())
    );
    let d = request(t, r#"{"op":"snapshot_diff","since":"b"}"#).unwrap();
    assert_eq!(runs_of(&d), [(30, 1)]);
}

/// In band, thin: more logical blocks than two diff windows.
fn wide() -> FormatOptions {
    FormatOptions {
        logical_blocks: Some(3 * zftl::control::DIFF_WINDOW_BLOCKS),
        ..in_band()
    }
}

#[test]
fn snapshot_diff_runs_on_a_driver_a_handle_and_an_inline_handle() {
    let mut d = Driver::format(sim(), &wide(), FtlConfig::default()).unwrap();
    diff_script(&mut d);
    let dev = d.shutdown().unwrap();
    on_handles(dev, &wide(), |t, _| diff_script(t), |t, _| diff_script(t));
}

#[test]
fn snapshot_diff_pages_a_fragmented_volume() {
    // Every other block of 1000 rewritten after the snapshot: 500 runs,
    // listed 64 at a time and in one page; the same as the core's diff.
    let room = SimConfig {
        blocks_per_lun: 64,
        ..SimConfig::small_for_tests()
    };
    let dev = SimDevice::create_memory(room).unwrap();
    let mut d = Driver::format(dev, &in_band(), FtlConfig::default()).unwrap();
    let bs = d.block_size();
    d.write(0, &vec![1; 1000 * bs]).unwrap();
    d.snapshot_create("s").unwrap();
    for lba in (0..1000).step_by(2) {
        d.write(lba, &vec![2; bs]).unwrap();
    }
    let want: Vec<(u64, u64)> = (0..1000).step_by(2).map(|l| (l, 1)).collect();
    assert_eq!(d.snapshot_diff("s", None).unwrap(), want);
    let (all, pages) = diff_pages(&mut d, r#""since":"s""#, 64);
    assert_eq!(all, want);
    assert_eq!(pages, 500usize.div_ceil(64));
    let one = request(&mut d, r#"{"op":"snapshot_diff","since":"s"}"#).unwrap();
    assert_eq!(runs_of(&one), want);
    assert_eq!(one["changed_blocks"], 500);
}

/// Fork requests on any target formatted with tags in band: a fork
/// listed with its base and region, written at its offset without
/// touching the snapshot or the volume, refusals typed, and a delete.
fn fork_script<T: Blocks>(t: &mut T, bs: usize) {
    let block = |b: u8| vec![b; bs];
    t.put(0, 1);
    t.put(1, 2);
    let s = request(t, r#"{"op":"snapshot_create","name":"base"}"#).unwrap();
    let base_id = s["snapshot"]["id"].as_u64().unwrap();
    t.put(0, 7); // the volume moves on
    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let c = request(
        t,
        r#"{"id":5,"op":"fork_create","snapshot":"base","fork":"dev"}"#,
    )
    .unwrap();
    assert_eq!(c["op"], "fork_create");
    let fork = &c["fork"];
    assert_eq!(fork["name"], "dev");
    assert_eq!(fork["base"]["name"], "base");
    assert_eq!(fork["base"]["id"], base_id);
    assert!(fork["wall_ns"].as_u64().unwrap() >= before);
    assert!(fork["created"].as_str().unwrap().ends_with('Z'));
    let logical = request(t, r#"{"op":"ping"}"#).unwrap()["logical_blocks"]
        .as_u64()
        .unwrap();
    assert_eq!(fork["block_count"], logical);
    let at = fork["lba_offset"].as_u64().unwrap();
    assert!(at >= logical, "{fork:?}");
    for key in ["id", "slot", "create_seq"] {
        assert!(fork[key].is_u64(), "{key}: {fork:?}");
    }

    // The fork reads the snapshot, and its writes stay its own.
    assert_eq!(t.get(at), block(1));
    assert_eq!(t.get(at + 1), block(2));
    t.put(at + 1, 5);
    assert_eq!(t.get(at + 1), block(5));
    assert_eq!(t.get(1), block(2));
    assert_eq!(t.get(0), block(7));
    let r = request(
        t,
        r#"{"op":"snapshot_read","name":"base","lba":0,"blocks":2}"#,
    )
    .unwrap();
    let data = zftl::control::decode_data(r["data"].as_str().unwrap()).unwrap();
    assert_eq!(data, [block(1), block(2)].concat());

    let list = request(t, r#"{"op":"forks"}"#).unwrap();
    assert_eq!(list["op"], "forks");
    assert_eq!(list["forks"].as_array().unwrap().len(), 1);
    assert_eq!(&list["forks"][0], fork);

    for (line, kind) in [
        (
            r#"{"op":"fork_create","snapshot":"base","fork":"dev"}"#,
            "fork",
        ),
        (
            r#"{"op":"fork_create","snapshot":"base","fork":"a@b"}"#,
            "fork",
        ),
        (
            r#"{"op":"fork_create","snapshot":"base","fork":""}"#,
            "fork",
        ),
        (
            r#"{"op":"fork_create","snapshot":"nope","fork":"x"}"#,
            "snapshot",
        ),
        (r#"{"op":"fork_create","fork":"x"}"#, "parse"),
        (r#"{"op":"fork_create","snapshot":"base"}"#, "parse"),
        (r#"{"op":"fork_delete","fork":"nope"}"#, "fork"),
        (r#"{"op":"fork_delete","name":"dev"}"#, "parse"),
        (r#"{"op":"forks","fork":"dev"}"#, "parse"),
        (r#"{"op":"snapshot_delete","name":"base"}"#, "snapshot"),
    ] {
        assert_eq!(request(t, line), Err(kind.into()), "{line}");
    }

    let d = request(t, r#"{"op":"fork_delete","fork":"dev"}"#).unwrap();
    assert_eq!(
        (d["op"].as_str(), d["name"].as_str()),
        (Some("fork_delete"), Some("dev"))
    );
    let list = request(t, r#"{"op":"forks"}"#).unwrap();
    assert_eq!(list["forks"].as_array().unwrap().len(), 0);
    let stats = request(t, r#"{"op":"stats"}"#).unwrap();
    assert_eq!(stats["stats"]["forks"], 0);
    assert_eq!(stats["stats"]["fork_creates"], 1);
    assert_eq!(stats["stats"]["fork_deletes"], 1);
    // With its fork gone, the snapshot may go.
    request(t, r#"{"op":"snapshot_delete","name":"base"}"#).unwrap();
}

#[test]
fn fork_requests_run_on_a_driver_a_handle_and_an_inline_handle() {
    let mut d = Driver::format(sim(), &in_band(), FtlConfig::default()).unwrap();
    let bs = d.block_size();
    fork_script(&mut d, bs);
    let dev = d.shutdown().unwrap();

    on_handles(dev, &in_band(), fork_script, fork_script);
}
