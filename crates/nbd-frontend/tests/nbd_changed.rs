//! The `x-zftl:changed:SNAPSHOT` metadata context over NBD: negotiated
//! through a real handshake, its BLOCK_STATUS descriptors checked against
//! the writes made after the snapshot (a model kept by the test), with
//! `base:allocation` beside it, REQ_ONE, unaligned ranges, the live export
//! and snapshot views, unknown and deleted snapshots. A real FTL (tags in
//! band) on the in-memory simulator behind the server, the crate's own
//! client in front of it over TCP on 127.0.0.1.

mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use support::*;
use tokio::net::TcpStream;
use zftl::core::history::Snapshot;
use zftl::core::{IoError, ReplyData, Request};
use zftl_nbd::client::{Client, Reply};
use zftl_nbd::proto::*;
use zftl_nbd::{Export, ExportTable, Server, ServerConfig, Volume};

const BS64: u64 = BS as u64;

/// [`support::client`] with structured replies.
async fn client(addr: std::net::SocketAddr) -> Client<TcpStream> {
    let mut c = support::client(addr).await;
    c.structured_replies().await.unwrap();
    c
}

/// A connection in transmission on `export` with the contexts `queries`
/// select: the client and the (id, name) of each context selected.
async fn open(
    addr: std::net::SocketAddr,
    export: &str,
    queries: &[&str],
) -> (Client<TcpStream>, Vec<(u32, String)>) {
    let mut c = client(addr).await;
    let contexts = c.set_meta_context(export, queries).await.unwrap();
    c.go(export, &[]).await.unwrap();
    (c, contexts)
}

/// The id of context `name` among `contexts`.
fn id_of(contexts: &[(u32, String)], name: &str) -> u32 {
    contexts
        .iter()
        .find(|(_, n)| n == name)
        .unwrap_or_else(|| panic!("{name} not selected: {contexts:?}"))
        .0
}

/// The descriptors of context `id` in a BLOCK_STATUS reply (exactly one
/// chunk per context).
fn chunk(r: &Reply, id: u32) -> &[(u32, u32)] {
    assert_eq!(r.error, 0, "BLOCK_STATUS failed");
    let mut found = r.status.iter().filter(|(i, _)| *i == id);
    let (_, d) = found.next().unwrap_or_else(|| panic!("no chunk for {id}"));
    assert!(found.next().is_none(), "two chunks for {id}");
    d
}

/// The blocks flagged changed by whole-block descriptors from block
/// `first`.
fn changed_blocks(first: u64, descriptors: &[(u32, u32)]) -> BTreeSet<u64> {
    let mut out = BTreeSet::new();
    let mut at = first * BS64;
    for &(len, status) in descriptors {
        assert!(len > 0, "empty descriptor");
        assert_eq!(u64::from(len) % BS64, 0, "whole blocks: {descriptors:?}");
        assert!(status == 0 || status == STATE_CHANGED, "{status}");
        if status == STATE_CHANGED {
            out.extend(at / BS64..(at + u64::from(len)) / BS64);
        }
        at += u64::from(len);
    }
    out
}

/// BLOCK_STATUS of `blocks` blocks from `first`; without REQ_ONE every
/// chunk covers them exactly (the request is far below the volume's
/// per-query limit).
async fn status(c: &mut Client<TcpStream>, first: u64, blocks: u64, flags: u16) -> Reply {
    let r = c
        .call(
            CMD_BLOCK_STATUS,
            flags,
            first * BS64,
            (blocks * BS64) as u32,
            &[],
        )
        .await
        .unwrap();
    for (id, d) in r.status.iter().filter(|_| flags & CMD_FLAG_REQ_ONE == 0) {
        let covered: u64 = d.iter().map(|&(len, _)| u64::from(len)).sum();
        assert_eq!(covered, blocks * BS64, "context {id}: {d:?}");
    }
    r
}

fn set(blocks: impl IntoIterator<Item = u64>) -> BTreeSet<u64> {
    blocks.into_iter().collect()
}

fn pattern(seed: u8, blocks: u64) -> Vec<u8> {
    (0..blocks as usize * BS)
        .map(|i| seed ^ (i as u8) ^ ((i >> 12) as u8))
        .collect()
}

/// Blocks every test looks at.
const SPAN: u64 = 64;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_context_lists_the_blocks_written_since_the_snapshot() {
    let vol = format_volume_in_band().await;
    let server = start(Server::new(exports(&vol), ServerConfig::default())).await;
    let addr = server.addr;

    // Before any snapshot only base:allocation is offered.
    let mut c = client(addr).await;
    assert_eq!(
        c.list_meta_context("zftl", &[]).await.unwrap(),
        [META_BASE_ALLOCATION]
    );

    let (mut live, _) = open(addr, "zftl", &[]).await;
    live.write(0, &pattern(1, 16), CMD_FLAG_FUA).await.unwrap();
    vol.0.snapshot_create("s1").await.unwrap();
    // After the snapshot: whole blocks 2, 3 and 9; one sector of block 12
    // (a read-modify-write of the block); a trim of 14 (data before); block
    // 40 (never written before).
    let mut want = set([2, 3, 9, 12, 14, 40]);
    live.write(2 * BS64, &pattern(2, 2), 0).await.unwrap();
    live.write(9 * BS64, &pattern(3, 1), 0).await.unwrap();
    live.write(12 * BS64 + 1024, &[0xee; 512], 0).await.unwrap();
    live.trim(14 * BS64, BS as u32).await.unwrap();
    live.write(40 * BS64, &pattern(4, 1), 0).await.unwrap();
    // Unchanged: a trim of blocks never written, and a block never written
    // before the snapshot that is written and trimmed after it.
    live.trim(50 * BS64, (4 * BS) as u32).await.unwrap();
    live.write(45 * BS64, &pattern(7, 1), 0).await.unwrap();
    live.trim(45 * BS64, BS as u32).await.unwrap();

    // LIST: everything, or zftl's namespace; unknown names list nothing.
    let changed = "x-zftl:changed:s1";
    assert_eq!(
        c.list_meta_context("zftl", &[]).await.unwrap(),
        [META_BASE_ALLOCATION, changed]
    );
    for wild in ["x-zftl:", "x-zftl:changed:"] {
        assert_eq!(
            c.list_meta_context("zftl", &[wild]).await.unwrap(),
            [changed]
        );
    }
    assert_eq!(
        c.list_meta_context("zftl", &[changed, "base:"])
            .await
            .unwrap(),
        [changed, META_BASE_ALLOCATION]
    );
    for none in [
        "x-zftl:changed:s2",
        "x-zftl:other:s1",
        "x-zftl:changed:s",
        "qemu:x",
    ] {
        let listed = c.list_meta_context("zftl", &[none]).await.unwrap();
        assert!(listed.is_empty(), "{none}: {listed:?}");
    }

    // SET: both contexts, each with its own id; the unknown name and the
    // duplicate are not selected.
    let queries = [
        META_BASE_ALLOCATION,
        changed,
        "x-zftl:changed:nope",
        changed,
    ];
    let (mut b, contexts) = open(addr, "zftl", &queries).await;
    assert_eq!(contexts.len(), 2, "{contexts:?}");
    let (base_id, changed_id) = (
        id_of(&contexts, META_BASE_ALLOCATION),
        id_of(&contexts, changed),
    );
    assert_ne!(base_id, changed_id);

    let r = status(&mut b, 0, SPAN, 0).await;
    assert_eq!(r.status.len(), 2, "one chunk per context");
    assert_eq!(changed_blocks(0, chunk(&r, changed_id)), want);
    // base:allocation beside it: blocks 0..16 and 40 hold data, but 14.
    let hz = STATE_HOLE | STATE_ZERO;
    let bs = BS as u32;
    assert_eq!(
        chunk(&r, base_id),
        [
            (14 * bs, 0),
            (bs, hz),
            (bs, 0),
            (24 * bs, hz),
            (bs, 0),
            (23 * bs, hz)
        ]
    );

    // REQ_ONE: one descriptor per chunk, no longer than the request.
    let r = status(&mut b, 0, SPAN, CMD_FLAG_REQ_ONE).await;
    assert_eq!(chunk(&r, changed_id), [(2 * bs, 0)]);
    assert_eq!(chunk(&r, base_id), [(14 * bs, 0)]);
    let r = status(&mut b, 2, SPAN, CMD_FLAG_REQ_ONE).await;
    assert_eq!(chunk(&r, changed_id), [(2 * bs, STATE_CHANGED)]);
    let r = b
        .call(
            CMD_BLOCK_STATUS,
            CMD_FLAG_REQ_ONE,
            2 * BS64 + 512,
            1024,
            &[],
        )
        .await
        .unwrap();
    assert_eq!(chunk(&r, changed_id), [(1024, STATE_CHANGED)]);

    // A range starting and ending inside blocks: clipped to the bytes.
    let r = b
        .call(CMD_BLOCK_STATUS, 0, 3 * BS64 + 512, 2 * bs, &[])
        .await
        .unwrap();
    assert_eq!(
        chunk(&r, changed_id),
        [(bs - 512, STATE_CHANGED), (bs + 512, 0)]
    );

    // The live volume moves on; the context follows it.
    live.write(20 * BS64, &pattern(5, 1), 0).await.unwrap();
    want.insert(20);
    let r = status(&mut b, 0, SPAN, 0).await;
    assert_eq!(changed_blocks(0, chunk(&r, changed_id)), want);

    // A later snapshot: its own context on the live volume; the older one
    // still sees everything since s1.
    vol.0.snapshot_create("s2").await.unwrap();
    live.write(30 * BS64, &pattern(6, 1), 0).await.unwrap();
    let (mut both, contexts) =
        open(addr, "zftl", &["x-zftl:changed:s2", "x-zftl:changed:s1"]).await;
    let r = status(&mut both, 0, SPAN, 0).await;
    assert_eq!(
        changed_blocks(0, chunk(&r, id_of(&contexts, "x-zftl:changed:s2"))),
        set([30])
    );
    want.insert(30);
    assert_eq!(
        changed_blocks(0, chunk(&r, id_of(&contexts, changed))),
        want
    );

    // The snapshot goes while the context is selected: BLOCK_STATUS fails
    // with EIO (no wrong answer), the connection stays up.
    vol.0.snapshot_delete("s1").await.unwrap();
    let r = b
        .call(CMD_BLOCK_STATUS, 0, 0, (SPAN * BS64) as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, Errno::Io.code());
    assert!(r.status.is_empty());
    assert_eq!(b.read(0, bs).await.unwrap(), pattern(1, 1));
    // A new snapshot of the same name is another snapshot.
    vol.0.snapshot_create("s1").await.unwrap();
    let r = b.call(CMD_BLOCK_STATUS, 0, 0, bs, &[]).await.unwrap();
    assert_eq!(r.error, Errno::Io.code());
    // A new connection selects the new one: nothing changed since.
    let (mut fresh, contexts) = open(addr, "zftl", &[changed]).await;
    let r = status(&mut fresh, 0, SPAN, 0).await;
    assert!(changed_blocks(0, chunk(&r, id_of(&contexts, changed))).is_empty());

    for mut x in [c, live, b, both, fresh] {
        x.disconnect().await.unwrap();
    }
    server.stop().await;
}

/// Unknown names select nothing (and BLOCK_STATUS is then refused with
/// EINVAL, the connection kept); a later SET replaces an earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_snapshots_are_not_selected() {
    let vol = format_volume_in_band().await;
    vol.0.snapshot_create("s").await.unwrap();
    let server = start(Server::new(exports(&vol), ServerConfig::default())).await;
    let addr = server.addr;

    let queries = [
        "x-zftl:changed:nope",
        "x-zftl:changed:",
        "x-zftl:",
        "x-zftl:changed:S",
    ];
    let (mut c, contexts) = open(addr, "zftl", &queries).await;
    assert!(contexts.is_empty(), "{contexts:?}");
    let r = c
        .call(CMD_BLOCK_STATUS, 0, 0, BS as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, Errno::Inval.code());
    assert_eq!(c.read(0, BS as u32).await.unwrap(), vec![0; BS]);

    // Selected, then replaced by a SET that selects nothing.
    let mut c2 = client(addr).await;
    let first = c2
        .set_meta_context("zftl", &["x-zftl:changed:s"])
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    let second = c2
        .set_meta_context("zftl", &["x-zftl:changed:gone"])
        .await
        .unwrap();
    assert!(second.is_empty());
    c2.go("zftl", &[]).await.unwrap();
    let r = c2
        .call(CMD_BLOCK_STATUS, 0, 0, BS as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, Errno::Inval.code());

    // Selected for another export than the one entered: not selected.
    let mut c3 = client(addr).await;
    let sel = c3
        .set_meta_context("zftl@s", &["x-zftl:changed:s"])
        .await
        .unwrap();
    assert_eq!(sel.len(), 1);
    c3.go("zftl", &[]).await.unwrap();
    let r = c3
        .call(CMD_BLOCK_STATUS, 0, 0, BS as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, Errno::Inval.code());

    for mut x in [c, c2, c3] {
        x.disconnect().await.unwrap();
    }
    server.stop().await;
}

/// On a view `zftl@B`, `x-zftl:changed:A` is what differs between A and
/// B, whichever is older; the view's own snapshot changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_report_the_changes_between_two_snapshots() {
    let vol = format_volume_in_band().await;
    let server = start(Server::new(exports(&vol), ServerConfig::default())).await;
    let addr = server.addr;
    let (mut live, _) = open(addr, "zftl", &[]).await;
    live.write(0, &pattern(1, 8), 0).await.unwrap();
    vol.0.snapshot_create("a").await.unwrap();
    live.write(4 * BS64, &pattern(2, 2), 0).await.unwrap();
    live.trim(0, BS as u32).await.unwrap();
    live.write(33 * BS64, &pattern(3, 1), 0).await.unwrap();
    vol.0.snapshot_create("b").await.unwrap();
    // After b: not in either view's answer.
    live.write(10 * BS64, &pattern(4, 1), 0).await.unwrap();
    let between = set([0, 4, 5, 33]);

    let mut c = client(addr).await;
    assert_eq!(
        c.list_meta_context("zftl@b", &[]).await.unwrap(),
        [META_BASE_ALLOCATION, "x-zftl:changed:a", "x-zftl:changed:b"]
    );
    let queries = ["x-zftl:changed:a", "x-zftl:changed:b", META_BASE_ALLOCATION];
    for (view, other, own) in [
        ("zftl@b", "x-zftl:changed:a", "x-zftl:changed:b"),
        ("zftl@a", "x-zftl:changed:b", "x-zftl:changed:a"),
    ] {
        let (mut v, contexts) = open(addr, view, &queries).await;
        assert_eq!(contexts.len(), 3, "{view}");
        let r = status(&mut v, 0, SPAN, 0).await;
        assert_eq!(r.status.len(), 3);
        assert_eq!(
            changed_blocks(0, chunk(&r, id_of(&contexts, other))),
            between,
            "{view}"
        );
        assert!(changed_blocks(0, chunk(&r, id_of(&contexts, own))).is_empty());
        // base:allocation on a view: the whole range as data.
        let base = chunk(&r, id_of(&contexts, META_BASE_ALLOCATION));
        assert_eq!(base, [((SPAN * BS64) as u32, 0)]);
        v.disconnect().await.unwrap();
    }
    // The live export against each: since a, since b.
    let (mut l, contexts) = open(addr, "zftl", &queries[..2]).await;
    let r = status(&mut l, 0, SPAN, 0).await;
    let mut since_a = between.clone();
    since_a.insert(10);
    let a_id = id_of(&contexts, "x-zftl:changed:a");
    assert_eq!(changed_blocks(0, chunk(&r, a_id)), since_a);
    let b_id = id_of(&contexts, "x-zftl:changed:b");
    assert_eq!(changed_blocks(0, chunk(&r, b_id)), set([10]));

    // The view's own snapshot deleted: its BLOCK_STATUS fails with EIO.
    let (mut v, contexts) = open(addr, "zftl@b", &["x-zftl:changed:a"]).await;
    assert_eq!(contexts.len(), 1);
    vol.0.snapshot_delete("b").await.unwrap();
    let r = v
        .call(CMD_BLOCK_STATUS, 0, 0, BS as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, Errno::Io.code());

    for mut x in [c, live, l, v] {
        x.disconnect().await.unwrap();
    }
    server.stop().await;
}

/// The support volume, counting the `Request::Changed` it answers and
/// every other request.
#[derive(Clone)]
struct Counting {
    vol: Vol,
    changed: Arc<AtomicU64>,
    other: Arc<AtomicU64>,
}

impl Volume for Counting {
    fn block_size(&self) -> usize {
        self.vol.block_size()
    }
    fn logical_blocks(&self) -> u64 {
        self.vol.logical_blocks()
    }
    fn max_request_blocks(&self) -> u32 {
        self.vol.max_request_blocks()
    }
    fn call(&self, request: Request) -> impl Future<Output = Result<ReplyData, IoError>> + Send {
        let counter = match request {
            Request::Changed { .. } => &self.changed,
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.vol.call(request)
    }
    fn snapshots(&self) -> impl Future<Output = Result<Vec<Snapshot>, IoError>> + Send {
        self.vol.snapshots()
    }
}

/// A client walking the whole export as `nbdinfo --map` does (requests of
/// up to 4 GiB - 512 bytes, each continuing where the last reply ended),
/// or in requests of 100 blocks, gets exactly the blocks written since the
/// snapshot, at one `Request::Changed` per request and no other volume
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_export_map_costs_one_query_per_request() {
    let vol = format_volume_in_band().await;
    let counting = Counting {
        vol: vol.clone(),
        changed: Arc::default(),
        other: Arc::default(),
    };
    let table = ExportTable::new(vec![Export::new("zftl", counting.clone())], None).unwrap();
    let server = start(Server::new(table, ServerConfig::default())).await;
    let addr = server.addr;

    let blocks = vol.logical_blocks();
    let mut live = client(addr).await;
    live.go("zftl", &[]).await.unwrap();
    live.write(0, &pattern(1, 32), 0).await.unwrap();
    vol.0.snapshot_create("base").await.unwrap();
    let mut want = BTreeSet::new();
    for (lba, n) in [(0, 1), (7, 3), (31, 2), (blocks / 2, 5), (blocks - 1, 1)] {
        live.write(lba * BS64, &pattern(lba as u8, n), 0)
            .await
            .unwrap();
        want.extend(lba..lba + n);
    }

    let (mut c, contexts) = open(addr, "zftl", &["x-zftl:changed:base"]).await;
    let id = contexts[0].0;
    let size = blocks * BS64;
    for max_len in [u64::from(u32::MAX) - 511, 100 * BS64] {
        let (changed_before, other_before) = (
            counting.changed.load(Ordering::Relaxed),
            counting.other.load(Ordering::Relaxed),
        );
        let (mut offset, mut requests, mut got) = (0u64, 0u64, BTreeSet::new());
        while offset < size {
            let len = (size - offset).min(max_len) as u32;
            let r = c.call(CMD_BLOCK_STATUS, 0, offset, len, &[]).await.unwrap();
            requests += 1;
            let d = chunk(&r, id);
            got.extend(changed_blocks(offset / BS64, d));
            offset += d.iter().map(|&(l, _)| u64::from(l)).sum::<u64>();
        }
        assert_eq!(offset, size);
        assert_eq!(got, want, "requests of {max_len} bytes");
        assert_eq!(
            requests,
            size.div_ceil(max_len),
            "each reply covers its request"
        );
        assert_eq!(
            counting.changed.load(Ordering::Relaxed) - changed_before,
            requests
        );
        assert_eq!(counting.other.load(Ordering::Relaxed), other_before);
    }

    for mut x in [live, c] {
        x.disconnect().await.unwrap();
    }
    server.stop().await;
}
