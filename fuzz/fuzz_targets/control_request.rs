//! One line of the control protocol, exactly as `zftl serve`'s control
//! socket parses it (`zftl::control::parse_line`), then what the server does
//! with the result short of running it: the vector check the core makes at
//! admission (`range::validate`) against several volume sizes, and the
//! reply line. Properties: nothing panics; an accepted request holds 1 to
//! `MAX_VECTOR_OPS` operations and re-reads the same from its own wire form;
//! every reply (snapshot replies carry the name as sent) is one line of
//! JSON that a client reads back with the request's id and, for an error,
//! its kind.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zftl::control::{
    error_line, ok_line, parse_line, parse_reply, range_body, Command, WireRequest,
    MAX_ATTRS_PER_REPLY, MAX_DIFF_RUNS_PER_REPLY, MAX_REPLY_BYTES,
};
use zftl_core::history::Snapshot;
use zftl_core::range::{validate, MAX_MERGE_SOURCES, MAX_VECTOR_OPS};
use zftl_core::RangeOp;

fn check_reply(line: &str, id: Option<&zftl::control::Id>) -> zftl::control::ParsedReply {
    assert!(!line.contains('\n'), "a reply spans lines: {line}");
    assert!(
        line.len() <= MAX_REPLY_BYTES,
        "a reply of {} bytes",
        line.len()
    );
    let reply = parse_reply(line.as_bytes()).expect("a client reads every reply");
    assert_eq!(reply.id.as_ref(), id, "the reply echoes the id");
    reply
}

/// A fork named `name` of snapshot 7 with the widest numbers.
fn fork(name: &str) -> zftl_core::Fork {
    zftl_core::Fork {
        id: u32::MAX,
        name: name.to_string(),
        base: 7,
        slot: u32::MAX,
        lba_offset: u64::MAX,
        block_count: u64::MAX,
        create_seq: u64::MAX,
        wall_ns: u64::MAX,
    }
}

/// A snapshot named `name` with the widest numbers.
fn snapshot(name: &str) -> Snapshot {
    Snapshot {
        id: 7,
        name: name.to_string(),
        epoch: 3,
        create_seq: u64::MAX,
        wall_ns: u64::MAX,
        parent: zftl_core::history::LIVE_VOLUME,
    }
}

fuzz_target!(|data: &[u8]| {
    match parse_line(data) {
        Ok(parsed) => {
            let body = match &parsed.command {
                Command::Range { op, ops } => {
                    assert!(
                        !ops.is_empty() && ops.len() <= MAX_VECTOR_OPS,
                        "{}",
                        ops.len()
                    );
                    for o in ops {
                        if let RangeOp::Merge { sources, .. } = o {
                            assert!(!sources.is_empty() && sources.len() <= MAX_MERGE_SOURCES);
                        }
                    }
                    for logical_blocks in [0, 1, 4096, 1 << 32, u64::MAX] {
                        let _ = validate(ops, logical_blocks);
                    }
                    range_body(op, ops)
                }
                Command::Attrs { max, .. } => {
                    assert!((1..=MAX_ATTRS_PER_REPLY).contains(max));
                    zftl::control::attrs_body(&[(0, 8, 1), (100, 1, 2)], 0, *max)
                }
                Command::Ping => zftl::control::ping_body(4096, 1 << 20),
                Command::Stats => zftl::control::ping_body(512, 0),
                Command::SnapshotCreate { name } => {
                    zftl::control::snapshot_create_body(&snapshot(name))
                }
                Command::SnapshotDelete { name } => zftl::control::snapshot_delete_body(name),
                Command::SnapshotRevert { to, undo } => zftl::control::snapshot_revert_body(
                    &snapshot(to),
                    &snapshot(undo.as_deref().unwrap_or("undo-7")),
                ),
                Command::Snapshots => zftl::control::snapshots_body(&[], &Default::default()),
                Command::ForkCreate {
                    snapshot: base,
                    fork: name,
                } => zftl::control::fork_create_body(&fork(name), &[snapshot(base)]),
                Command::ForkDelete { fork: name } => zftl::control::fork_delete_body(name),
                Command::Forks => zftl::control::forks_body(&[fork("a"), fork("b")], &[]),
                Command::SnapshotRead { name, lba, blocks } => {
                    assert!(*blocks >= 1);
                    let data = [0xa5u8; 4096];
                    let body = zftl::control::snapshot_read_body(name, *lba, *blocks, &data);
                    let back = body["data"].as_str().map(zftl::control::decode_data);
                    assert_eq!(back, Some(Ok(data.to_vec())));
                    body
                }
                Command::SnapshotDiff {
                    since,
                    until,
                    lba,
                    blocks,
                    max,
                } => {
                    assert!((1..=MAX_DIFF_RUNS_PER_REPLY).contains(max));
                    assert!(blocks.is_none_or(|b| b >= 1));
                    let until = until.as_deref().map(snapshot);
                    let runs = [(*lba, 1), (u64::MAX, u64::MAX)];
                    let end = blocks.map_or(u64::MAX, |b| lba.saturating_add(b));
                    zftl::control::snapshot_diff_body(
                        &snapshot(since),
                        until.as_ref(),
                        4096,
                        (*lba, end - lba),
                        &runs,
                        Some(*lba),
                    )
                }
            };
            let line = ok_line(parsed.id.as_ref(), body);
            assert!(check_reply(&line, parsed.id.as_ref()).result.is_ok());
            // The wire form a client would send parses to the same request.
            let wire: WireRequest =
                serde_json::from_slice(data).expect("an accepted line is a WireRequest");
            let again = parse_line(wire.to_line().as_bytes()).expect("its wire form is accepted");
            assert_eq!(again, parsed);
        }
        Err(rejected) => {
            let line = error_line(rejected.id.as_ref(), &rejected.error);
            let reply = check_reply(&line, rejected.id.as_ref());
            let e = reply.result.expect_err("an error reply");
            assert_eq!(e.kind, rejected.error.kind.as_str());
            assert_eq!(e.lba, rejected.error.lba);
        }
    }
});
