//! The NBD server against the crate's own client (`zftl_nbd::client`), over
//! TCP on 127.0.0.1 (port 0), with a real FTL on the in-memory simulator
//! behind it.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use support::{format_volume, Vol, BS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use zftl::core::{Driver, FormatOptions, FtlConfig, IoError, ReplyData, Request};
use zftl::handle::{AsyncHandle, Handle, InlineHandle};
use zftl::sim::{SimConfig, SimDevice};
use zftl_nbd::client::{self as nbd, Reply};
use zftl_nbd::proto::*;
use zftl_nbd::{Export, ExportTable, Server, ServerConfig, Volume};

/// Small enough that "larger than the limit" tests are cheap (the
/// support module's `Vol` has the same limit).
const MAX_REQUEST_BLOCKS: u32 = 64;

// ----- the volume: the FTL's async handle (support's `Vol`) or inline ------------

/// The FTL driven on the server's own threads, as `zftl serve` drives it on
/// the simulator: a buffered write is answered within the call, so its
/// reply is queued by the time the reader reads on.
#[derive(Clone)]
struct InlineVol(InlineHandle<SimDevice>);

impl Volume for InlineVol {
    fn block_size(&self) -> usize {
        self.0.block_size()
    }
    fn logical_blocks(&self) -> u64 {
        self.0.logical_blocks()
    }
    fn max_request_blocks(&self) -> u32 {
        MAX_REQUEST_BLOCKS
    }
    fn call(
        &self,
        request: Request,
    ) -> impl std::future::Future<Output = Result<ReplyData, IoError>> + Send {
        std::future::ready(self.0.call(request))
    }
}

fn ftl_config() -> FtlConfig {
    FtlConfig {
        max_request_blocks: MAX_REQUEST_BLOCKS,
        ..FtlConfig::default()
    }
}

/// A server of the support module with the volume it serves.
struct Running<V = Vol> {
    addr: SocketAddr,
    server: support::Running,
    vol: V,
}

impl<V> Running<V> {
    async fn stop(self) -> V {
        self.server.stop().await;
        self.vol
    }
}

async fn start_on<V: Volume + Clone>(vol: V, config: ServerConfig) -> Running<V> {
    let exports = ExportTable::new(
        vec![
            Export::new("zftl", vol.clone()).description("the zftl volume"),
            Export::new("ro", vol.clone()).read_only(true),
        ],
        Some("zftl"),
    )
    .unwrap();
    let server = support::start(Server::new(exports, config)).await;
    Running {
        addr: server.addr,
        server,
        vol,
    }
}

async fn start() -> Running {
    start_on(format_volume().await, ServerConfig::default()).await
}

// ----- the client: zftl_nbd::client, unwrapped for the tests -----------------

async fn greet(addr: SocketAddr) -> TcpStream {
    let c = nbd::Client::greet(TcpStream::connect(addr).await.unwrap())
        .await
        .unwrap();
    assert_eq!(c.server_flags(), FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    c.into_inner()
}

async fn send_option(s: &mut TcpStream, option: u32, data: &[u8]) {
    nbd::Client::resume(s)
        .send_option(option, data)
        .await
        .unwrap();
}

async fn option_reply(s: &mut TcpStream) -> (u32, u32, Vec<u8>) {
    let r = nbd::Client::resume(s).option_reply().await.unwrap();
    (r.option, r.reply_type, r.data)
}

fn info_data(name: &str, infos: &[u16]) -> Vec<u8> {
    nbd::info_request(name, infos)
}

fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    nbd::meta_context_request(name, queries)
}

/// Whether the server closed the connection (EOF or reset) within a while.
async fn closed(s: &mut TcpStream) -> bool {
    let mut b = [0u8; 1];
    matches!(
        tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// A connection in transmission, with what GO said about its export.
struct Client {
    nbd: nbd::Client<TcpStream>,
    size: u64,
    flags: u16,
    min_block: u32,
    preferred_block: u32,
    max_block: u32,
}

#[derive(Clone, Copy, Default)]
struct Opts {
    structured: bool,
    meta: bool,
}

async fn connect(addr: SocketAddr, name: &str, opts: Opts) -> Client {
    let mut nbd = nbd::Client::greet(TcpStream::connect(addr).await.unwrap())
        .await
        .unwrap();
    if opts.structured {
        nbd.structured_replies().await.unwrap();
    }
    if opts.meta {
        let contexts = nbd
            .set_meta_context(name, &[META_BASE_ALLOCATION])
            .await
            .unwrap();
        assert_eq!(contexts.len(), 1);
        assert_eq!(contexts[0].1, META_BASE_ALLOCATION);
    }
    let export = nbd.go(name, &[INFO_BLOCK_SIZE]).await.unwrap();
    let (min_block, preferred_block, max_block) = export.block_size.expect("NBD_INFO_BLOCK_SIZE");
    Client {
        nbd,
        size: export.size_bytes,
        flags: export.flags,
        min_block,
        preferred_block,
        max_block,
    }
}

impl Client {
    /// The connection, for bytes the client would not send.
    fn s(&mut self) -> &mut TcpStream {
        self.nbd.stream()
    }

    async fn send(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> u64 {
        self.nbd
            .send(command, flags, offset, length, payload)
            .await
            .unwrap()
    }

    /// Appends a request to `out` (to be sent later, alone or with others);
    /// returns its cookie.
    fn encode(
        &mut self,
        out: &mut Vec<u8>,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> u64 {
        self.nbd
            .encode(out, command, flags, offset, length, payload)
    }

    async fn reply(&mut self) -> Reply {
        self.nbd.reply().await.unwrap()
    }

    async fn call(
        &mut self,
        command: u16,
        flags: u16,
        offset: u64,
        length: u32,
        payload: &[u8],
    ) -> Reply {
        self.nbd
            .call(command, flags, offset, length, payload)
            .await
            .unwrap()
    }

    /// The NBD error of a write (0: written).
    async fn write(&mut self, offset: u64, data: &[u8], flags: u16) -> u32 {
        self.call(CMD_WRITE, flags, offset, data.len() as u32, data)
            .await
            .error
    }

    async fn read(&mut self, offset: u64, len: u32) -> Vec<u8> {
        self.nbd
            .read(offset, len)
            .await
            .unwrap_or_else(|e| panic!("read at {offset}+{len}: {e}"))
    }

    async fn disconnect(mut self) {
        self.nbd.disconnect().await.unwrap();
        assert!(closed(self.s()).await, "server closes after DISC");
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i / 7) as u8).wrapping_mul(31))
        .collect()
}

// ----- tests -----------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_simple_and_structured() {
    let server = start().await;
    for structured in [false, true] {
        let mut c = connect(
            server.addr,
            "",
            Opts {
                structured,
                meta: false,
            },
        )
        .await;
        assert!(c.size >= 64 * BS as u64);
        // 512-byte requests are accepted (a block's read-modify-write).
        assert_eq!(c.min_block, 512);
        assert_eq!(c.preferred_block as usize, BS);
        assert_eq!(c.max_block as usize, MAX_REQUEST_BLOCKS as usize * BS);
        for f in [
            FLAG_HAS_FLAGS,
            FLAG_SEND_FLUSH,
            FLAG_SEND_FUA,
            FLAG_SEND_TRIM,
            FLAG_SEND_WRITE_ZEROES,
            FLAG_CAN_MULTI_CONN,
            FLAG_SEND_FAST_ZERO,
        ] {
            assert_ne!(c.flags & f, 0, "flag {f:#x}");
        }
        assert_eq!(c.flags & FLAG_READ_ONLY, 0);
        assert_eq!(c.flags & FLAG_SEND_DF != 0, structured);

        let seed = u8::from(structured);
        let a = pattern(seed, 8 * BS);
        assert_eq!(c.write(0, &a, 0).await, 0);
        assert_eq!(c.write(8 * BS as u64, &a, CMD_FLAG_FUA).await, 0);
        assert_eq!(
            c.read(0, 16 * BS as u32).await,
            [a.clone(), a.clone()].concat()
        );
        let flush = c.call(CMD_FLUSH, 0, 0, 0, &[]).await;
        assert_eq!(flush.error, 0);
        // Successes without data are simple replies either way: 16 bytes,
        // which clients such as libnbd take in one receive, not two.
        assert!(flush.simple);

        // Trim and zeroing read back as zeros, with and without FUA/NO_HOLE.
        assert_eq!(c.call(CMD_TRIM, 0, 0, 2 * BS as u32, &[]).await.error, 0);
        assert_eq!(
            c.call(CMD_TRIM, CMD_FLAG_FUA, 2 * BS as u64, 2 * BS as u32, &[])
                .await
                .error,
            0
        );
        let z = CMD_FLAG_FAST_ZERO | CMD_FLAG_FUA;
        assert_eq!(
            c.call(CMD_WRITE_ZEROES, z, 4 * BS as u64, 2 * BS as u32, &[])
                .await
                .error,
            0
        );
        let nh = CMD_FLAG_NO_HOLE;
        assert_eq!(
            c.call(CMD_WRITE_ZEROES, nh, 6 * BS as u64, BS as u32, &[])
                .await
                .error,
            0
        );
        assert_eq!(
            c.call(
                CMD_WRITE_ZEROES,
                nh | CMD_FLAG_FAST_ZERO,
                7 * BS as u64,
                BS as u32,
                &[]
            )
            .await
            .error,
            Errno::NotSup.code()
        );
        let back = c.read(0, 8 * BS as u32).await;
        for (i, block) in back.chunks(BS).take(7).enumerate() {
            assert!(block.iter().all(|&b| b == 0), "block {i} reads as zeros");
        }
        assert_eq!(&back[7 * BS..], &a[7 * BS..]);

        // TRIM and WRITE_ZEROES larger than the payload limit are split.
        let big = 3 * MAX_REQUEST_BLOCKS * BS as u32;
        assert_eq!(c.call(CMD_WRITE_ZEROES, 0, 0, big, &[]).await.error, 0);
        assert_eq!(c.call(CMD_TRIM, CMD_FLAG_FUA, 0, big, &[]).await.error, 0);
        assert!(c
            .read(8 * BS as u64, 8 * BS as u32)
            .await
            .iter()
            .all(|&b| b == 0));
        c.disconnect().await;
    }
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_requests_in_flight_replies_by_cookie() {
    let server = start().await;
    let mut c = connect(
        server.addr,
        "zftl",
        Opts {
            structured: true,
            meta: false,
        },
    )
    .await;
    // 128 writes without waiting, then 128 reads without waiting.
    let n = 128u64;
    let mut writes = HashMap::new();
    for i in 0..n {
        let data = pattern(i as u8, BS);
        let cookie = c.send(CMD_WRITE, 0, i * BS as u64, BS as u32, &data).await;
        writes.insert(cookie, i);
    }
    for _ in 0..n {
        let r = c.reply().await;
        assert_eq!(r.error, 0);
        assert!(writes.remove(&r.cookie).is_some(), "one reply per cookie");
    }
    let mut reads = HashMap::new();
    // Mixed sizes so replies have reason to finish out of order.
    for i in 0..n {
        let len = if i % 8 == 0 { 32 * BS } else { BS };
        let offset = (i * BS as u64).min(c.size - len as u64);
        let cookie = c.send(CMD_READ, 0, offset, len as u32, &[]).await;
        reads.insert(cookie, (offset, len));
    }
    let mut order = Vec::new();
    for _ in 0..n {
        let r = c.reply().await;
        assert_eq!(r.error, 0);
        let (offset, len) = reads.remove(&r.cookie).expect("known cookie");
        assert_eq!(r.data.len(), len);
        let first = offset / BS as u64;
        if first < n {
            assert_eq!(&r.data[..BS], &pattern(first as u8, BS)[..]);
        }
        order.push(r.cookie);
    }
    assert!(reads.is_empty());
    let in_order = order.windows(2).all(|w| w[0] < w[1]);
    eprintln!("replies in request order: {in_order}");
    c.disconnect().await;
    server.stop().await;
}

/// Large writes sent back to back to an inline volume (as `zftl serve`
/// runs the simulator): replies wait for a few more while the socket holds
/// more requests (the outbox's backlog rule); every one still comes, the
/// last ones once the client stops sending, and the data reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_writes_back_to_back_all_get_replies() {
    let vol = tokio::task::spawn_blocking(|| {
        let dev = SimDevice::create_memory(SimConfig::small_for_tests()).unwrap();
        let driver = Driver::format(dev, &FormatOptions::default(), ftl_config()).unwrap();
        InlineVol(InlineHandle::new(driver))
    })
    .await
    .unwrap();
    let server = start_on(vol, ServerConfig::default()).await;
    let mut c = connect(
        server.addr,
        "zftl",
        Opts {
            structured: false,
            meta: false,
        },
    )
    .await;
    let blocks = 32u64;
    let len = blocks as usize * BS;
    for round in 0..3u64 {
        let n = 24u64;
        let mut writes = HashMap::new();
        // One send for all: the server finds them waiting on its socket.
        let mut burst = Vec::new();
        for i in 0..n {
            let data = pattern((round * n + i) as u8, len);
            let offset = i * len as u64;
            let cookie = c.encode(&mut burst, CMD_WRITE, 0, offset, len as u32, &data);
            writes.insert(cookie, i);
        }
        c.s().write_all(&burst).await.unwrap();
        for _ in 0..n {
            let r = c.reply().await;
            assert_eq!(r.error, 0);
            assert!(writes.remove(&r.cookie).is_some(), "one reply per cookie");
        }
        for i in [0, n / 2, n - 1] {
            let got = c.read(i * len as u64, len as u32).await;
            assert_eq!(
                got,
                pattern((round * n + i) as u8, len),
                "round {round} write {i}"
            );
        }
    }
    c.disconnect().await;
    server.stop().await;
}

/// A large WRITE's payload is read into its own buffer together with what
/// follows it, up to a header; replies go out in batches. Streams of
/// writes of every size around the receive buffer's, flushes, reads of
/// what the previous stream wrote, and refused writes past the end, sent
/// back to back and cut at random places (mostly a few bytes into the next
/// header): every request is answered once, as it should be, and the data
/// reads back. The streams and cuts come from a fixed generator: a failure
/// replays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn back_to_back_requests_cut_anywhere_read_back() {
    let server = start().await;
    let mut c = connect(server.addr, "zftl", Opts::default()).await;
    const HALF: u64 = 2 << 20;
    assert!(c.size >= 2 * HALF, "room for two streams' regions");
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    let mut previous: Vec<(u64, Vec<u8>)> = Vec::new();
    for seed in 0..8u64 {
        let mut stream = Vec::new();
        let mut regions = Vec::new();
        // cookie -> (expect success, data a read must return)
        let mut expected: HashMap<u64, (bool, Option<Vec<u8>>)> = HashMap::new();
        let mut ends = Vec::new();
        // Each stream writes its own half; reads take the other half's
        // data, acknowledged by the previous stream.
        let base = (seed % 2) * HALF;
        let mut offset = base;
        for i in 0..16u64 {
            let cookie = 1000 * (seed + 1) + i;
            // The receive buffer is 16 blocks: sizes below, at and above it.
            let blocks = [1, 15, 16, 17, 32, 32, 64, 64][next(8) as usize];
            let len = (blocks * BS) as u64;
            let (command, at, length, ok) = match next(10) {
                0 => (CMD_FLUSH, 0, 0, true),
                1 if !previous.is_empty() => {
                    let (at, data) = &previous[next(previous.len() as u64) as usize];
                    c.nbd.expect_read(cookie, data.len());
                    expected.insert(cookie, (true, Some(data.clone())));
                    (CMD_READ, *at, data.len() as u64, true)
                }
                // Past the end: refused, its payload skipped.
                2 => (CMD_WRITE, c.size - BS as u64, len.max(2 * BS as u64), false),
                _ if offset + len > base + HALF => (CMD_FLUSH, 0, 0, true),
                _ => {
                    offset += len;
                    (CMD_WRITE, offset - len, len, true)
                }
            };
            expected.entry(cookie).or_insert((ok, None));
            let h = RequestHeader {
                flags: 0,
                command,
                cookie,
                offset: at,
                length: length as u32,
            };
            stream.extend_from_slice(&h.encode());
            if command == CMD_WRITE {
                let data = pattern((seed * 16 + i) as u8, length as usize);
                stream.extend_from_slice(&data);
                if ok {
                    regions.push((at, data));
                }
            }
            ends.push(stream.len());
        }
        let mut cuts: Vec<usize> = ends
            .iter()
            .map(|&end| {
                // Mostly into the next header: partial lookaheads.
                let shift = next(48) as isize - 8;
                (end as isize + shift).clamp(1, stream.len() as isize) as usize
            })
            .collect();
        cuts.extend((0..8).map(|_| 1 + next(stream.len() as u64 - 1) as usize));
        cuts.sort_unstable();
        cuts.dedup();
        let mut from = 0;
        for cut in cuts.into_iter().chain([stream.len()]) {
            if cut > from {
                c.s().write_all(&stream[from..cut]).await.unwrap();
                c.s().flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                from = cut;
            }
        }
        for _ in 0..16 {
            let r = c.reply().await;
            let (ok, data) = expected
                .remove(&r.cookie)
                .unwrap_or_else(|| panic!("seed {seed}: reply to {} twice or unasked", r.cookie));
            assert_eq!(r.error == 0, ok, "seed {seed}: request {}", r.cookie);
            if let Some(data) = data {
                assert!(r.data == data, "seed {seed}: read {}", r.cookie);
            }
        }
        assert!(expected.is_empty(), "seed {seed}");
        for (offset, data) in &regions {
            let got = c.read(*offset, data.len() as u32).await;
            assert!(&got == data, "seed {seed}: data at {offset}");
        }
        previous = regions;
    }
    c.disconnect().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multiple_connections_share_one_volume() {
    let server = start().await;
    let opts = Opts {
        structured: true,
        meta: false,
    };
    let mut a = connect(server.addr, "zftl", opts).await;
    let mut b = connect(server.addr, "", opts).await;
    let mut others = Vec::new();
    for i in 0..4u8 {
        let mut c = connect(server.addr, "zftl", opts).await;
        let data = pattern(100 + i, BS);
        assert_eq!(c.write(u64::from(40 + i) * BS as u64, &data, 0).await, 0);
        others.push(c);
    }
    let data = pattern(7, 4 * BS);
    assert_eq!(a.write(20 * BS as u64, &data, 0).await, 0);
    // A flush on another connection covers writes acknowledged on this one.
    assert_eq!(b.call(CMD_FLUSH, 0, 0, 0, &[]).await.error, 0);
    assert_eq!(b.read(20 * BS as u64, 4 * BS as u32).await, data);
    for i in 0..4u8 {
        let got = b.read(u64::from(40 + i) * BS as u64, BS as u32).await;
        assert_eq!(got, pattern(100 + i, BS));
    }
    for c in others {
        c.disconnect().await;
    }
    a.disconnect().await;
    b.disconnect().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_info_and_meta_contexts() {
    let server = start().await;
    let mut s = greet(server.addr).await;
    send_option(&mut s, OPT_LIST, &[]).await;
    let mut names = Vec::new();
    loop {
        let (o, t, d) = option_reply(&mut s).await;
        assert_eq!(o, OPT_LIST);
        if t == REP_ACK {
            break;
        }
        assert_eq!(t, REP_SERVER);
        let len = u32::from_be_bytes(d[0..4].try_into().unwrap()) as usize;
        names.push(String::from_utf8(d[4..4 + len].to_vec()).unwrap());
    }
    assert_eq!(names, vec!["zftl".to_string(), "ro".to_string()]);

    // INFO for the read-only export, with its name.
    send_option(&mut s, OPT_INFO, &info_data("ro", &[INFO_NAME])).await;
    let mut saw_name = false;
    let mut ro_flags = 0;
    loop {
        let (_, t, d) = option_reply(&mut s).await;
        if t == REP_ACK {
            break;
        }
        assert_eq!(t, REP_INFO);
        match u16::from_be_bytes([d[0], d[1]]) {
            INFO_NAME => saw_name = &d[2..] == b"ro",
            INFO_EXPORT => ro_flags = u16::from_be_bytes([d[10], d[11]]),
            _ => {}
        }
    }
    assert!(saw_name);
    assert_ne!(ro_flags & FLAG_READ_ONLY, 0);
    assert_eq!(ro_flags & FLAG_SEND_TRIM, 0);

    // Meta contexts need structured replies first.
    send_option(&mut s, OPT_LIST_META_CONTEXT, &meta_data("", &[])).await;
    assert_eq!(option_reply(&mut s).await.1, REP_ERR_INVALID);
    send_option(&mut s, OPT_STRUCTURED_REPLY, &[]).await;
    assert_eq!(option_reply(&mut s).await.1, REP_ACK);
    send_option(&mut s, OPT_LIST_META_CONTEXT, &meta_data("", &[])).await;
    let (_, t, d) = option_reply(&mut s).await;
    assert_eq!(t, REP_META_CONTEXT);
    assert_eq!(&d[4..], META_BASE_ALLOCATION.as_bytes());
    assert_eq!(option_reply(&mut s).await.1, REP_ACK);
    // An unknown context selects nothing.
    send_option(&mut s, OPT_SET_META_CONTEXT, &meta_data("", &["x-foo:bar"])).await;
    assert_eq!(option_reply(&mut s).await.1, REP_ACK);
    // ABORT is acknowledged, then the server closes.
    send_option(&mut s, OPT_ABORT, &[]).await;
    assert_eq!(option_reply(&mut s).await.1, REP_ACK);
    assert!(closed(&mut s).await);

    // BLOCK_STATUS with base:allocation: a fresh volume is one hole.
    let mut c = connect(
        server.addr,
        "zftl",
        Opts {
            structured: true,
            meta: true,
        },
    )
    .await;
    let r = c.call(CMD_BLOCK_STATUS, 0, 0, 16 * BS as u32, &[]).await;
    assert_eq!(r.error, 0);
    assert_eq!(r.extents, vec![(16 * BS as u32, STATE_HOLE | STATE_ZERO)]);
    let r = c.call(CMD_BLOCK_STATUS, 0, c.size, BS as u32, &[]).await;
    assert_eq!(r.error, Errno::Inval.code());
    c.disconnect().await;
    server.stop().await;
}

/// `base:allocation` of `blocks` blocks from block `first`, as (blocks,
/// hole) runs, with or without REQ_ONE; checks the reply's invariants.
async fn status(c: &mut Client, first: u64, blocks: u32, flags: u16) -> Vec<(u32, bool)> {
    let length = blocks * BS as u32;
    let r = c
        .call(CMD_BLOCK_STATUS, flags, first * BS as u64, length, &[])
        .await;
    assert_eq!(r.error, 0);
    assert!(!r.extents.is_empty(), "at least one descriptor");
    if flags & CMD_FLAG_REQ_ONE != 0 {
        assert_eq!(r.extents.len(), 1, "REQ_ONE: exactly one descriptor");
    }
    let total: u64 = r.extents.iter().map(|&(l, _)| u64::from(l)).sum();
    assert!(total <= u64::from(length), "descriptors within the request");
    r.extents
        .iter()
        .map(|&(l, st)| {
            assert!(
                l > 0 && (l as usize).is_multiple_of(BS),
                "whole blocks: {l}"
            );
            assert!(st == 0 || st == STATE_HOLE | STATE_ZERO, "status {st}");
            (l / BS as u32, st != 0)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_status_reports_exactly_the_holes() {
    let server = start().await;
    let mut c = connect(
        server.addr,
        "zftl",
        Opts {
            structured: true,
            meta: true,
        },
    )
    .await;
    let b = |n: u64| n * BS as u64;
    assert_eq!(status(&mut c, 0, 32, 0).await, vec![(32, true)]);
    // Data at 4..12 and 20..24; then 6..8 trimmed, 10 zeroed (a hole too),
    // 30 zeroed with NO_HOLE (written as data).
    assert_eq!(c.write(b(4), &pattern(1, 8 * BS), 0).await, 0);
    assert_eq!(c.write(b(20), &pattern(2, 4 * BS), 0).await, 0);
    let bs = BS as u32;
    assert_eq!(c.call(CMD_TRIM, 0, b(6), 2 * bs, &[]).await.error, 0);
    assert_eq!(c.call(CMD_WRITE_ZEROES, 0, b(10), bs, &[]).await.error, 0);
    let nh = CMD_FLAG_NO_HOLE;
    assert_eq!(c.call(CMD_WRITE_ZEROES, nh, b(30), bs, &[]).await.error, 0);
    let want = vec![
        (4, true),
        (2, false),
        (2, true),
        (2, false),
        (1, true),
        (1, false),
        (8, true),
        (4, false),
        (6, true),
        (1, false),
        (1, true),
    ];
    assert_eq!(status(&mut c, 0, 32, 0).await, want);
    // The same once the buffered writes are flushed to flash.
    assert_eq!(c.call(CMD_FLUSH, 0, 0, 0, &[]).await.error, 0);
    assert_eq!(status(&mut c, 0, 32, 0).await, want);
    // A range starting inside runs, and one larger than the largest request
    // (the rest of the volume is a hole, merged with the last run).
    assert_eq!(
        status(&mut c, 5, 6, 0).await,
        vec![(1, false), (2, true), (2, false), (1, true)]
    );
    let big = 3 * MAX_REQUEST_BLOCKS;
    let got = status(&mut c, 0, big, 0).await;
    assert_eq!(got[..10], want[..10]);
    assert_eq!(got[10..], [(big - 31, true)]);
    // REQ_ONE: only the first run, clipped to the request.
    assert_eq!(
        status(&mut c, 0, 32, CMD_FLAG_REQ_ONE).await,
        vec![(4, true)]
    );
    assert_eq!(
        status(&mut c, 4, 32, CMD_FLAG_REQ_ONE).await,
        vec![(2, false)]
    );
    assert_eq!(
        status(&mut c, 5, 32, CMD_FLAG_REQ_ONE).await,
        vec![(1, false)]
    );
    assert_eq!(
        status(&mut c, 13, 3, CMD_FLAG_REQ_ONE).await,
        vec![(3, true)]
    );
    let fua = CMD_FLAG_REQ_ONE | CMD_FLAG_FUA;
    assert_eq!(status(&mut c, 21, 1, fua).await, vec![(1, false)]);
    // The whole export in one request: a short answer is allowed, but it
    // starts with what is known.
    let whole = (c.size.min(u64::from(u32::MAX)) / BS as u64) as u32;
    let got = status(&mut c, 0, whole, 0).await;
    assert_eq!(got[..10], want[..10]);
    // Holes read as zeros, data as written.
    assert!(c.read(b(6), 2 * bs).await.iter().all(|&x| x == 0));
    assert_eq!(
        c.read(b(8), 2 * bs).await,
        pattern(1, 8 * BS)[4 * BS..6 * BS]
    );
    // Overwriting a hole makes it data again.
    assert_eq!(c.write(b(6), &pattern(3, 2 * BS), 0).await, 0);
    assert_eq!(
        status(&mut c, 4, 8, 0).await,
        vec![(6, false), (1, true), (1, false)]
    );
    c.disconnect().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_export_refuses_writes_with_eperm() {
    let server = start().await;
    let mut rw = connect(server.addr, "zftl", Opts::default()).await;
    let data = pattern(9, BS);
    assert_eq!(rw.write(0, &data, CMD_FLAG_FUA).await, 0);
    for structured in [false, true] {
        let mut ro = connect(
            server.addr,
            "ro",
            Opts {
                structured,
                meta: false,
            },
        )
        .await;
        assert_ne!(ro.flags & FLAG_READ_ONLY, 0);
        assert_eq!(ro.write(0, &pattern(1, BS), 0).await, Errno::Perm.code());
        assert_eq!(
            ro.call(CMD_TRIM, 0, 0, BS as u32, &[]).await.error,
            Errno::Perm.code()
        );
        assert_eq!(
            ro.call(CMD_WRITE_ZEROES, 0, 0, BS as u32, &[]).await.error,
            Errno::Perm.code()
        );
        // The refused write's payload was consumed: the stream is in sync.
        assert_eq!(ro.read(0, BS as u32).await, data);
        assert_eq!(ro.call(CMD_FLUSH, 0, 0, 0, &[]).await.error, 0);
        ro.disconnect().await;
    }
    rw.disconnect().await;
    server.stop().await;
}

/// Every malformed input gets the protocol's error or a clean close, and the
/// server keeps serving: a healthy client checks after each case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_inputs_regression_suite() {
    let server = start().await;
    let addr = server.addr;
    let mut healthy = connect(addr, "zftl", Opts::default()).await;
    let known = pattern(42, BS);
    assert_eq!(healthy.write(BS as u64, &known, CMD_FLAG_FUA).await, 0);
    let check = |what: &'static str| {
        eprintln!("case done: {what}");
    };

    // Truncated handshake: half of the client flags, then gone.
    {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).await.unwrap();
        s.write_all(&[0, 0]).await.unwrap();
        drop(s);
        check("truncated handshake");
    }
    // Connect and leave at once, before the greeting is read.
    drop(TcpStream::connect(addr).await.unwrap());
    // Unknown client flags: the server must drop the connection.
    {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).await.unwrap();
        s.write_u32(0xffff_ffff).await.unwrap();
        assert!(closed(&mut s).await);
        check("unknown client flags");
    }
    // Bad option magic.
    {
        let mut s = greet(addr).await;
        s.write_all(&[0x55; 16]).await.unwrap();
        assert!(closed(&mut s).await);
        check("bad option magic");
    }
    // Unknown option, STARTTLS, malformed INFO, unknown export, LIST with
    // data, an option too big to read: errors, and the session goes on.
    {
        let mut s = greet(addr).await;
        send_option(&mut s, 0x4242, b"whatever").await;
        assert_eq!(option_reply(&mut s).await.1, REP_ERR_UNSUP);
        send_option(&mut s, OPT_STARTTLS, &[]).await;
        assert_eq!(option_reply(&mut s).await.1, REP_ERR_UNSUP);
        send_option(&mut s, OPT_INFO, &[0, 0, 0, 9, b'x']).await;
        assert_eq!(option_reply(&mut s).await.1, REP_ERR_INVALID);
        send_option(&mut s, OPT_GO, &info_data("nope", &[])).await;
        assert_eq!(option_reply(&mut s).await.1, REP_ERR_UNKNOWN);
        send_option(&mut s, OPT_LIST, b"x").await;
        assert_eq!(option_reply(&mut s).await.1, REP_ERR_INVALID);
        send_option(&mut s, OPT_STRUCTURED_REPLY, b"x").await;
        assert_eq!(option_reply(&mut s).await.1, REP_ERR_INVALID);
        send_option(&mut s, OPT_INFO, &vec![0u8; 200 << 10]).await;
        assert_eq!(option_reply(&mut s).await.1, REP_ERR_TOO_BIG);
        send_option(&mut s, OPT_GO, &info_data("zftl", &[])).await;
        loop {
            let (_, t, _) = option_reply(&mut s).await;
            if t == REP_ACK {
                break;
            }
            assert_eq!(t, REP_INFO);
        }
        check("option errors");
    }
    // Oversized option length: the server closes instead of reading 2 GiB.
    {
        let mut s = greet(addr).await;
        let mut b = IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&OPT_GO.to_be_bytes());
        b.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
        s.write_all(&b).await.unwrap();
        assert!(closed(&mut s).await);
        check("oversized option length");
    }
    // EXPORT_NAME of an unknown export cannot be answered: close.
    {
        let mut s = greet(addr).await;
        send_option(&mut s, OPT_EXPORT_NAME, b"nope").await;
        assert!(closed(&mut s).await);
        check("EXPORT_NAME unknown");
    }
    // EXPORT_NAME of a known export works (old clients).
    {
        let mut nbd = nbd::Client::resume(greet(addr).await);
        let export = nbd.export_name("zftl").await.unwrap();
        assert!(export.size_bytes > 0);
        assert_ne!(export.flags & FLAG_HAS_FLAGS, 0);
        let mut c = Client {
            nbd,
            size: export.size_bytes,
            flags: export.flags,
            min_block: 0,
            preferred_block: 0,
            max_block: 0,
        };
        assert_eq!(c.read(BS as u64, BS as u32).await, known);
        c.disconnect().await;
        check("EXPORT_NAME");
    }
    // Transmission errors, on both reply styles; the connection stays usable.
    for structured in [false, true] {
        let mut c = connect(
            addr,
            "zftl",
            Opts {
                structured,
                meta: false,
            },
        )
        .await;
        let size = c.size;
        let bs = BS as u32;
        let max = c.max_block;
        let cases: Vec<(&str, u16, u16, u64, u32, Errno)> = vec![
            ("unknown command", 0, 42, 0, bs, Errno::Inval),
            ("unknown flag", 1 << 12, CMD_READ, 0, bs, Errno::Inval),
            ("read beyond end", 0, CMD_READ, size, bs, Errno::Inval),
            (
                "read overflowing u64",
                0,
                CMD_READ,
                u64::MAX - 4095,
                bs,
                Errno::Inval,
            ),
            (
                "trim beyond end",
                0,
                CMD_TRIM,
                size - u64::from(bs),
                2 * bs,
                Errno::Inval,
            ),
            (
                "zeroes beyond end",
                0,
                CMD_WRITE_ZEROES,
                size,
                bs,
                Errno::NoSpc,
            ),
            ("offset not a sector", 0, CMD_READ, 100, bs, Errno::Inval),
            ("length not a sector", 0, CMD_READ, 0, 1000, Errno::Inval),
            ("zero length", 0, CMD_READ, 0, 0, Errno::Inval),
            (
                "read over the limit",
                0,
                CMD_READ,
                0,
                max + bs,
                Errno::Overflow,
            ),
            ("flush with length", 0, CMD_FLUSH, 0, bs, Errno::Inval),
            (
                "block status without context",
                0,
                CMD_BLOCK_STATUS,
                0,
                bs,
                Errno::Inval,
            ),
        ];
        for (what, flags, command, offset, length, errno) in cases {
            let r = c.call(command, flags, offset, length, &[]).await;
            assert_eq!(r.error, errno.code(), "{what}");
            assert!(r.data.is_empty(), "{what}: no data with an error");
        }
        // Refused writes: their payloads are skipped, the stream stays in sync.
        let big = vec![0xEE; (max + bs) as usize];
        assert_eq!(
            c.write(0, &big, 0).await,
            Errno::Overflow.code(),
            "write over the limit"
        );
        let past = vec![0xEE; BS];
        assert_eq!(
            c.write(size, &past, 0).await,
            Errno::NoSpc.code(),
            "write beyond end"
        );
        let odd = vec![0xEE; 1000];
        assert_eq!(
            c.write(0, &odd, 0).await,
            Errno::Inval.code(),
            "misaligned write"
        );
        assert_eq!(c.read(BS as u64, bs).await, known);
        c.disconnect().await;
        check("transmission errors");
    }
    // Bad request magic: the stream cannot be trusted, the server closes.
    {
        let mut c = connect(addr, "zftl", Opts::default()).await;
        c.s()
            .write_all(&[0xAB; REQUEST_HEADER_BYTES])
            .await
            .unwrap();
        assert!(closed(c.s()).await);
        check("bad request magic");
    }
    // A refused write with an absurd payload length: closed, not read.
    {
        let mut c = connect(addr, "zftl", Opts::default()).await;
        c.send(CMD_WRITE, 0, 0, u32::MAX, &[]).await;
        assert!(closed(c.s()).await);
        check("absurd write length");
    }
    // Disconnect in the middle of a write's payload: nothing of it lands.
    {
        let mut c = connect(addr, "zftl", Opts::default()).await;
        let h = RequestHeader {
            flags: CMD_FLAG_FUA,
            command: CMD_WRITE,
            cookie: 1,
            offset: 30 * BS as u64,
            length: 16 * BS as u32,
        };
        c.s().write_all(&h.encode()).await.unwrap();
        c.s().write_all(&vec![0x77; 3 * BS + 100]).await.unwrap();
        drop(c);
        check("disconnect mid-write");
    }
    // Disconnect with requests in flight and without reading replies.
    {
        let mut c = connect(
            addr,
            "zftl",
            Opts {
                structured: true,
                meta: false,
            },
        )
        .await;
        for i in 0..32u64 {
            c.send(CMD_READ, 0, i * BS as u64, 8 * BS as u32, &[]).await;
        }
        drop(c);
        check("disconnect with reads in flight");
    }
    // Garbage instead of a handshake.
    {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let mut g = [0u8; 18];
        s.read_exact(&mut g).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        assert!(closed(&mut s).await);
        check("HTTP request");
    }

    // The healthy client and a new one still work, and nothing was lost.
    assert_eq!(healthy.read(BS as u64, BS as u32).await, known);
    assert!(healthy
        .read(30 * BS as u64, 16 * BS as u32)
        .await
        .iter()
        .all(|&b| b == 0));
    let mut fresh = connect(
        addr,
        "",
        Opts {
            structured: true,
            meta: false,
        },
    )
    .await;
    assert_eq!(fresh.read(BS as u64, BS as u32).await, known);
    fresh.disconnect().await;
    healthy.disconnect().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_on_bytes_in_flight_hold_back_a_fast_writer() {
    // One request and one payload in flight at a time: everything is still
    // answered, just serially.
    let config = ServerConfig {
        max_inflight_requests_per_connection: 1,
        max_inflight_bytes_per_connection: 1,
        ..ServerConfig::default()
    };
    let server = start_on(format_volume().await, config).await;
    let mut c = connect(server.addr, "zftl", Opts::default()).await;
    for i in 0..64u64 {
        c.send(
            CMD_WRITE,
            0,
            i * BS as u64,
            BS as u32,
            &pattern(i as u8, BS),
        )
        .await;
    }
    for _ in 0..64 {
        assert_eq!(c.reply().await.error, 0);
    }
    assert_eq!(c.read(5 * BS as u64, BS as u32).await, pattern(5, BS));
    c.disconnect().await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_drains_then_the_volume_remounts_with_the_data() {
    let server = start().await;
    let addr = server.addr;
    let mut c = connect(addr, "zftl", Opts::default()).await;
    let data = pattern(3, 16 * BS);
    assert_eq!(c.write(0, &data, 0).await, 0);
    // Requests in flight when the server is told to stop still get replies.
    let mut cookies = Vec::new();
    for i in 0..16u64 {
        let d = pattern(50 + i as u8, BS);
        cookies.push(
            c.send(CMD_WRITE, 0, (32 + i) * BS as u64, BS as u32, &d)
                .await,
        );
    }
    for _ in 0..16 {
        assert_eq!(c.reply().await.error, 0);
    }
    let vol = server.stop().await;
    assert!(closed(c.s()).await, "connections are closed on shutdown");
    // A clean unmount (flush + checkpoint), then a fresh mount sees it all.
    let dev = vol.0.shutdown().await.unwrap();
    let again = tokio::task::spawn_blocking(move || Handle::mount(dev, ftl_config()).unwrap())
        .await
        .unwrap();
    let again = Vol(AsyncHandle::from(again));
    assert_eq!(again.0.read(0, 16).await.unwrap(), data);
    assert_eq!(again.0.read(40, 1).await.unwrap(), pattern(58, BS));
    again.0.shutdown().await.unwrap();
}
