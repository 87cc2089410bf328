//! Writable forks over NBD: each live fork of an export's volume is served
//! writable under its own name, appearing and going as forks are created
//! and deleted while the server runs. Its reads, writes (sector writes
//! too), trims, zeroing, flushes and `base:allocation` land in the fork's
//! region; the snapshot's view and the live export do not change; a
//! connection to a deleted fork gets `EIO`, also once a new fork takes the
//! deleted one's region. A real FTL (tags in band) on the in-memory
//! simulator behind the server, the crate's own client in front of it
//! over TCP on 127.0.0.1.

mod support;

use support::*;
use zftl_nbd::client::ClientError;
use zftl_nbd::proto::*;
use zftl_nbd::{Server, ServerConfig};

/// Blocks the tests write.
const BLOCKS: usize = 16;

fn names(listed: &[(String, String)]) -> Vec<&str> {
    listed.iter().map(|(n, _)| n.as_str()).collect()
}

/// Whether `NBD_OPT_GO` on `name` is refused as unknown.
async fn unknown(addr: std::net::SocketAddr, name: &str) -> bool {
    let mut c = client(addr).await;
    matches!(
        c.go(name, &[]).await,
        Err(ClientError::Refused { reply_type, .. }) if reply_type == REP_ERR_UNKNOWN
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_are_writable_exports_that_come_and_go() {
    let vol = format_volume_in_band().await;
    let server = start(Server::new(exports(&vol), ServerConfig::default())).await;
    let addr = server.addr;
    let len = BLOCKS * BS;
    let before = fill(0x5a, len);
    let later = fill(0xa5, 4 * BS);

    let (mut live, live_info) = open(addr, "zftl", true).await.unwrap();
    live.write(0, &before, CMD_FLAG_FUA).await.unwrap();
    vol.0.snapshot_create("s").await.unwrap();
    live.write(0, &later, 0).await.unwrap(); // the volume moves on
    assert!(unknown(addr, "dev").await);

    let fork = vol.0.fork_create("s", "dev").await.unwrap();
    let listed = list(addr).await;
    assert_eq!(names(&listed), ["zftl", "zftl@s", "dev"]);
    let d = &listed[2].1;
    assert!(
        d.starts_with("writable fork \"dev\" of snapshot \"s\""),
        "{d}"
    );
    assert!(d.ends_with('Z'), "{d}");

    // Writable, the volume's size, the live export's block sizes.
    let (mut f, info) = open(addr, "dev", true).await.unwrap();
    assert_eq!(info.size_bytes, live_info.size_bytes);
    assert_eq!(info.size_bytes, fork.block_count * BS as u64);
    assert_eq!(info.block_size, live_info.block_size);
    assert_eq!(info.flags & FLAG_READ_ONLY, 0);
    assert_ne!(info.flags & FLAG_SEND_FLUSH, 0);
    // Only base:allocation: a fork has no changed contexts.
    let mut c = client(addr).await;
    c.structured_replies().await.unwrap();
    assert_eq!(
        c.list_meta_context("dev", &[]).await.unwrap(),
        [META_BASE_ALLOCATION]
    );
    assert!(c
        .set_meta_context("dev", &["x-zftl:changed:s"])
        .await
        .unwrap()
        .is_empty());

    // It starts as the snapshot holds the volume.
    assert_eq!(f.read(0, len as u32).await.unwrap(), before);

    // Block 1 whole, one sector of block 2 (a read-modify-write), block 3
    // trimmed, block 5 zeroed, block 40 (never written) written.
    let mut model = before.clone();
    model.resize(41 * BS, 0);
    let one = fill(0x11, BS);
    f.write(BS as u64, &one, 0).await.unwrap();
    model[BS..2 * BS].copy_from_slice(&one);
    let sector = [0xee; 512];
    f.write(2 * BS as u64 + 1024, &sector, 0).await.unwrap();
    model[2 * BS + 1024..2 * BS + 1536].copy_from_slice(&sector);
    f.trim(3 * BS as u64, BS as u32).await.unwrap();
    model[3 * BS..4 * BS].fill(0);
    let r = f
        .call(CMD_WRITE_ZEROES, 0, 5 * BS as u64, BS as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, 0);
    model[5 * BS..6 * BS].fill(0);
    let far = fill(0x40, BS);
    f.write(40 * BS as u64, &far, CMD_FLAG_FUA).await.unwrap();
    model[40 * BS..].copy_from_slice(&far);
    f.flush().await.unwrap();
    assert_eq!(f.read(0, model.len() as u32).await.unwrap(), model);
    // A second connection to the fork sees the same.
    let (mut f2, _) = open(addr, "dev", true).await.unwrap();
    assert_eq!(f2.read(0, model.len() as u32).await.unwrap(), model);

    // base:allocation: the snapshot's data and the fork's writes are
    // data; the trim, the zeroing and what nobody wrote are holes.
    let r = f
        .call(CMD_BLOCK_STATUS, 0, 0, 48 * BS as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, 0);
    let hole = STATE_HOLE | STATE_ZERO;
    let b = BS as u32;
    assert_eq!(
        r.extents,
        [
            (3 * b, 0),
            (b, hole),
            (b, 0),
            (b, hole),
            (10 * b, 0),
            (24 * b, hole),
            (b, 0),
            (7 * b, hole)
        ]
    );

    // The live export and the snapshot's view did not change.
    let mut live_now = later.clone();
    live_now.extend_from_slice(&before[4 * BS..]);
    assert_eq!(live.read(0, len as u32).await.unwrap(), live_now);
    assert_eq!(
        live.read(40 * BS as u64, BS as u32).await.unwrap(),
        vec![0; BS]
    );
    let (mut view, _) = open(addr, "zftl@s", true).await.unwrap();
    assert_eq!(view.read(0, len as u32).await.unwrap(), before);

    // Past the fork's end: refused by the server, as on any export.
    let r = f
        .call(CMD_READ, 0, info.size_bytes, BS as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, Errno::Inval.code());

    // The snapshot cannot go while its fork lives.
    assert!(vol.0.snapshot_delete("s").await.is_err());

    // Deleted: gone from the listing, unknown to new clients, EIO to the
    // connections still open.
    vol.0.fork_delete("dev").await.unwrap();
    assert_eq!(names(&list(addr).await), ["zftl", "zftl@s"]);
    assert!(unknown(addr, "dev").await);
    let eio = Errno::Io.code();
    let r = f.call(CMD_READ, 0, 0, BS as u32, &[]).await.unwrap();
    assert_eq!(r.error, eio);
    let r = f.call(CMD_WRITE, 0, 0, BS as u32, &one).await.unwrap();
    assert_eq!(r.error, eio);

    // A new fork takes the deleted one's region: the old connections still
    // get EIO, and the new fork starts as its snapshot holds the volume.
    let next = vol.0.fork_create("s", "next").await.unwrap();
    assert_eq!(next.lba_offset, fork.lba_offset);
    let r = f2.call(CMD_WRITE, 0, 0, BS as u32, &one).await.unwrap();
    assert_eq!(r.error, eio);
    let r = f2.call(CMD_TRIM, 0, 0, BS as u32, &[]).await.unwrap();
    assert_eq!(r.error, eio);
    let r = f2
        .call(CMD_BLOCK_STATUS, 0, 0, BS as u32, &[])
        .await
        .unwrap();
    assert_eq!(r.error, eio);
    let (mut n, _) = open(addr, "next", true).await.unwrap();
    assert_eq!(n.read(0, len as u32).await.unwrap(), before);
    assert_eq!(
        n.read(40 * BS as u64, BS as u32).await.unwrap(),
        vec![0; BS]
    );
    assert_eq!(names(&list(addr).await), ["zftl", "zftl@s", "next"]);

    for c in [&mut live, &mut f, &mut f2, &mut view, &mut n] {
        c.disconnect().await.unwrap();
    }
    server.stop().await;
}
