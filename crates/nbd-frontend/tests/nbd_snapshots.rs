//! Snapshot views over NBD: each live snapshot of an export's volume is
//! served read-only as `NAME@SNAPSHOT`, appearing and going as snapshots
//! are created and deleted while the server runs. A real FTL (tags in band)
//! on the in-memory simulator behind the server, the crate's own client in
//! front of it over TCP on 127.0.0.1.

mod support;

use std::future::Future;

use support::*;
use zftl::core::{IoError, ReplyData, Request};
use zftl_nbd::client::ClientError;
use zftl_nbd::proto::*;
use zftl_nbd::{Export, ExportTable, Server, ServerConfig, Volume};

/// Blocks the tests write before and after the snapshot.
const BLOCKS: usize = 16;

/// The option error `name` gets at `NBD_OPT_GO` (and at `NBD_OPT_INFO`).
async fn refused(addr: std::net::SocketAddr, name: &str) -> u32 {
    let mut c = client(addr).await;
    c.send_option(OPT_INFO, &zftl_nbd::client::info_request(name, &[]))
        .await
        .unwrap();
    let info = c.option_reply().await.unwrap();
    assert!(info.is_error(), "{name}: INFO refused");
    match c.go(name, &[]).await {
        Err(ClientError::Refused { reply_type, .. }) => {
            assert_eq!(reply_type, info.reply_type);
            reply_type
        }
        other => panic!("{name}: GO answered {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_views_come_and_go_with_their_snapshots() {
    let vol = format_volume_in_band().await;
    let server = start(Server::new(exports(&vol), ServerConfig::default())).await;
    let addr = server.addr;
    let len = BLOCKS * BS;
    let before = fill(0x5a, len);
    let after = fill(0xa5, len);

    // Before any snapshot: only the export itself is listed.
    assert_eq!(list(addr).await.len(), 1);
    assert_eq!(refused(addr, "zftl@s1").await, REP_ERR_UNKNOWN);

    let (mut live, _) = open(addr, "zftl", false).await.unwrap();
    live.write(0, &before, CMD_FLAG_FUA).await.unwrap();
    let s1 = vol.0.snapshot_create("s1").await.unwrap();
    // The live volume moves on: overwritten, and a trimmed range.
    live.write(0, &after, 0).await.unwrap();
    live.trim(4 * BS as u64, 4 * BS as u32).await.unwrap();
    live.flush().await.unwrap();
    vol.0.snapshot_create("s2").await.unwrap();
    live.write(0, &before[..BS], 0).await.unwrap();

    // OPT_LIST: the export, then one view per snapshot, oldest first.
    let listed = list(addr).await;
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["zftl", "zftl@s1", "zftl@s2"]);
    let (_, d1) = &listed[1];
    assert!(d1.contains("\"s1\"") && d1.contains("\"zftl\""), "{d1}");
    // Taken now (RFC 3339 UTC, to the second).
    assert!(s1.wall_ns > 0);
    assert!(d1.contains("T") && d1.ends_with('Z'), "{d1}");

    // The view: read-only, the same size and block sizes, nothing to flush.
    let (mut view, info) = open(addr, "zftl@s1", true).await.unwrap();
    let (_, live_info) = open(addr, "zftl", false).await.unwrap();
    assert_eq!(info.size_bytes, live_info.size_bytes);
    assert_eq!(info.block_size, live_info.block_size);
    assert_ne!(info.flags & FLAG_READ_ONLY, 0);
    assert_eq!(info.flags & FLAG_SEND_FLUSH, 0);
    assert_eq!(info.flags & (FLAG_SEND_TRIM | FLAG_SEND_WRITE_ZEROES), 0);
    assert_ne!(info.flags & FLAG_CAN_MULTI_CONN, 0);

    // It reads what the volume held when the snapshot was taken.
    assert_eq!(view.read(0, len as u32).await.unwrap(), before);
    // Sector-aligned reads inside a block too.
    assert_eq!(
        view.read(BS as u64 + 512, 1024).await.unwrap(),
        before[BS + 512..BS + 1536]
    );
    // The later snapshot and the live volume read their own contents.
    let (mut v2, _) = open(addr, "zftl@s2", false).await.unwrap();
    let mut at_s2 = after.clone();
    at_s2[4 * BS..8 * BS].fill(0);
    assert_eq!(v2.read(0, len as u32).await.unwrap(), at_s2);
    let mut now = at_s2.clone();
    now[..BS].copy_from_slice(&before[..BS]);
    assert_eq!(live.read(0, len as u32).await.unwrap(), now);

    // Writes, trims and zeroing are refused with EPERM; the stream stays
    // in sync (the refused write's payload was read).
    let perm = Errno::Perm.code();
    let r = view.call(CMD_WRITE, 0, 0, BS as u32, &after[..BS]).await;
    assert_eq!(r.unwrap().error, perm);
    let r = view.call(CMD_TRIM, 0, 0, BS as u32, &[]).await;
    assert_eq!(r.unwrap().error, perm);
    let r = view.call(CMD_WRITE_ZEROES, 0, 0, BS as u32, &[]).await;
    assert_eq!(r.unwrap().error, perm);
    assert_eq!(view.read(0, BS as u32).await.unwrap(), before[..BS]);
    // A flush (not advertised) changes nothing and succeeds.
    assert_eq!(view.call(CMD_FLUSH, 0, 0, 0, &[]).await.unwrap().error, 0);

    // BLOCK_STATUS on a view: the whole range as data.
    let r = view
        .call(CMD_BLOCK_STATUS, 0, 0, (64 * BS) as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, 0);
    assert_eq!(r.extents, vec![((64 * BS) as u32, 0)]);

    // Unknown views and bases are unknown exports.
    assert_eq!(refused(addr, "zftl@s3").await, REP_ERR_UNKNOWN);
    assert_eq!(refused(addr, "other@s1").await, REP_ERR_UNKNOWN);
    assert_eq!(refused(addr, "zftl@").await, REP_ERR_UNKNOWN);

    // Delete s1 while `view` is open: its reads now fail with EIO, and
    // the connection stays up; a new connection is refused as unknown.
    vol.0.snapshot_delete("s1").await.unwrap();
    let r = view.call(CMD_READ, 0, 0, BS as u32, &[]).await.unwrap();
    assert_eq!(r.error, Errno::Io.code());
    assert!(r.data.is_empty());
    let r = view.call(CMD_READ, 0, 0, BS as u32, &[]).await.unwrap();
    assert_eq!(r.error, Errno::Io.code());
    assert_eq!(refused(addr, "zftl@s1").await, REP_ERR_UNKNOWN);
    let names: Vec<String> = list(addr).await.into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["zftl", "zftl@s2"]);
    // s2 is untouched by s1's delete.
    assert_eq!(v2.read(0, len as u32).await.unwrap(), at_s2);

    // A new snapshot of the same name is a new view of the new contents.
    let s1b = vol.0.snapshot_create("s1").await.unwrap();
    assert_ne!(s1b.id, s1.id);
    let (mut view_b, _) = open(addr, "zftl@s1", false).await.unwrap();
    assert_eq!(view_b.read(0, len as u32).await.unwrap(), now);
    // The old connection still names the deleted snapshot, not the new one.
    let r = view.call(CMD_READ, 0, 0, BS as u32, &[]).await.unwrap();
    assert_eq!(r.error, Errno::Io.code());

    for mut c in [view, v2, view_b, live] {
        c.disconnect().await.unwrap();
    }
    server.stop().await;
}

/// A read-only export has views too (they are read-only anyway); a name of
/// the table wins over a view of the same name; the old-style
/// `NBD_OPT_EXPORT_NAME` reaches views as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_exports_have_views_and_table_names_win() {
    let vol = format_volume_in_band().await;
    let data = fill(0x33, 4 * BS);
    let table = ExportTable::new(
        vec![
            Export::new("ro", vol.clone()).read_only(true),
            Export::new("rw", vol.clone()),
            Export::new("ro@snap", vol.clone()).description("a table export"),
        ],
        Some("rw"),
    )
    .unwrap();
    let server = start(Server::new(table, ServerConfig::default())).await;
    let addr = server.addr;

    let (mut rw, _) = open(addr, "rw", false).await.unwrap();
    rw.write(0, &data, CMD_FLAG_FUA).await.unwrap();
    vol.0.snapshot_create("snap").await.unwrap();
    rw.write(0, &fill(0x44, 4 * BS), CMD_FLAG_FUA)
        .await
        .unwrap();

    let listed = list(addr).await;
    let names: Vec<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    // Each export's views after the table, but for the view the table's
    // "ro@snap" hides; that export (of the live volume) has its own.
    assert_eq!(names, ["ro", "rw", "ro@snap", "rw@snap", "ro@snap@snap"]);
    assert_eq!(listed[2].1, "a table export");

    // "ro@snap" is the table's writable export of the live volume.
    let (mut table_export, info) = open(addr, "ro@snap", false).await.unwrap();
    assert_eq!(info.flags & FLAG_READ_ONLY, 0);
    assert_eq!(
        table_export.read(0, BS as u32).await.unwrap(),
        fill(0x44, 4 * BS)[..BS]
    );

    // "rw@snap" by NBD_OPT_EXPORT_NAME.
    let mut c = client(addr).await;
    let info = c.export_name("rw@snap").await.unwrap();
    assert_ne!(info.flags & FLAG_READ_ONLY, 0);
    assert_eq!(c.read(0, (4 * BS) as u32).await.unwrap(), data);
    // A view is no base: "rw@snap@snap" is unknown.
    assert_eq!(refused(addr, "rw@snap@snap").await, REP_ERR_UNKNOWN);

    for mut x in [rw, table_export, c] {
        x.disconnect().await.unwrap();
    }
    server.stop().await;
}

/// `Vol` without `Volume::snapshots`: the default, no snapshots.
#[derive(Clone)]
struct Unlisted(Vol);

impl Volume for Unlisted {
    fn block_size(&self) -> usize {
        self.0.block_size()
    }
    fn logical_blocks(&self) -> u64 {
        self.0.logical_blocks()
    }
    fn max_request_blocks(&self) -> u32 {
        self.0.max_request_blocks()
    }
    fn call(&self, request: Request) -> impl Future<Output = Result<ReplyData, IoError>> + Send {
        self.0.call(request)
    }
}

/// A volume that lists no snapshots has no views, whatever it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_that_list_no_snapshots_have_no_views() {
    let vol = format_volume_in_band().await;
    vol.0.snapshot_create("s").await.unwrap();
    let table = ExportTable::new(vec![Export::new("zftl", Unlisted(vol))], None).unwrap();
    let server = start(Server::new(table, ServerConfig::default())).await;
    let addr = server.addr;
    let names: Vec<String> = list(addr).await.into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["zftl"]);
    assert_eq!(refused(addr, "zftl@s").await, REP_ERR_UNKNOWN);
    server.stop().await;
}
