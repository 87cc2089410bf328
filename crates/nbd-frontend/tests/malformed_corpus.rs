//! Regression suite of malformed inputs for the NBD parsers and the server:
//! truncated headers at every length, bad magics, oversized lengths, unknown
//! option and command codes, every flag bit, and offsets/lengths that would
//! overflow u32/u64 arithmetic. Each must be answered with an error value
//! (or a clean close) and never panic. The fuzz targets in `fuzz/` explore
//! the same parsers at random; inputs they find belong here.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zftl_core::{Extent, IoError, ReplyData, Request};
use zftl_nbd::fuzzing::{check, Limits, Op};
use zftl_nbd::proto::*;
use zftl_nbd::{Export, ExportTable, Server, ServerConfig, Volume};

// ----- pure parsers -----------------------------------------------------------

const COMMANDS: [u16; 7] = [
    CMD_READ,
    CMD_WRITE,
    CMD_DISC,
    CMD_FLUSH,
    CMD_TRIM,
    CMD_WRITE_ZEROES,
    CMD_BLOCK_STATUS,
];

fn limits() -> Limits {
    Limits {
        block_size: 4096,
        min_block_size: 512,
        size_bytes: 4096 * 1024,
        max_payload: 4096 * 16,
        read_only: false,
        structured: true,
        meta_contexts: 1,
    }
}

fn header(command: u16, flags: u16, offset: u64, length: u32) -> RequestHeader {
    RequestHeader {
        flags,
        command,
        cookie: 0xdead_beef,
        offset,
        length,
    }
}

/// An accepted op must be the request's range, inside the export and
/// aligned to the minimum block size.
fn assert_sane(l: &Limits, h: &RequestHeader, r: &Result<Op, (Errno, String)>) {
    let check_range = |offset: u64, length: u32| {
        assert!(length > 0, "{h:?}");
        assert_eq!((offset, length), (h.offset, h.length), "{h:?}");
        assert_eq!(offset % l.min_block_size, 0, "{h:?}");
        assert_eq!(u64::from(length) % l.min_block_size, 0, "{h:?}");
        let end = offset.checked_add(u64::from(length)).expect("overflow");
        assert!(end <= l.size_bytes, "{h:?} accepted beyond {l:?}");
    };
    match r {
        Ok(Op::Read { offset, length }) | Ok(Op::Write { offset, length, .. }) => {
            check_range(*offset, *length);
            assert!(h.length <= l.max_payload, "{h:?}");
        }
        Ok(Op::Trim { offset, length, .. }) => check_range(*offset, *length),
        Ok(Op::Zero { offset, length, .. }) => {
            check_range(*offset, *length);
            // FAST_ZERO only where no block is read and written back.
            if h.flags & CMD_FLAG_FAST_ZERO != 0 {
                assert_eq!(offset % l.block_size, 0, "{h:?}");
                assert_eq!(u64::from(*length) % l.block_size, 0, "{h:?}");
            }
        }
        Ok(Op::BlockStatus { offset, length, .. }) => {
            let end = offset.checked_add(u64::from(*length)).expect("overflow");
            assert!(*length > 0 && end <= l.size_bytes, "{h:?}");
        }
        Ok(Op::Flush) | Ok(Op::Disc) => {}
        Err((_, message)) => assert!(!message.is_empty()),
    }
}

#[test]
fn bad_request_magics_are_rejected() {
    let good = header(CMD_READ, 0, 0, 4096).encode();
    assert!(RequestHeader::decode(&good).is_ok());
    for byte in 0..4 {
        for bit in 0..8 {
            let mut b = good;
            b[byte] ^= 1 << bit;
            assert!(RequestHeader::decode(&b).is_err(), "byte {byte} bit {bit}");
        }
    }
    for magic in [
        0u32,
        u32::MAX,
        SIMPLE_REPLY_MAGIC,
        STRUCTURED_REPLY_MAGIC,
        REQUEST_MAGIC.swap_bytes(),
    ] {
        let mut b = good;
        b[..4].copy_from_slice(&magic.to_be_bytes());
        assert_eq!(RequestHeader::decode(&b), Err(BadRequestMagic(magic)));
    }
    assert!(RequestHeader::decode(&[0u8; REQUEST_HEADER_BYTES]).is_err());
    assert!(RequestHeader::decode(&[0xff; REQUEST_HEADER_BYTES]).is_err());
}

#[test]
fn unknown_commands_are_refused_with_einval() {
    let l = limits();
    for command in 0..=u16::MAX {
        if COMMANDS.contains(&command) {
            continue;
        }
        let r = check(&l, &header(command, 0, 0, 4096));
        assert_eq!(r.map_err(|e| e.0), Err(Errno::Inval), "command {command}");
    }
}

#[test]
fn every_flag_bit_on_every_command() {
    for structured in [false, true] {
        for read_only in [false, true] {
            let l = Limits {
                structured,
                read_only,
                meta_contexts: u32::from(structured),
                ..limits()
            };
            for &command in &COMMANDS {
                for bit in 0..16 {
                    let flags = 1u16 << bit;
                    let (offset, length) = if command == CMD_FLUSH || command == CMD_DISC {
                        (0, 0)
                    } else {
                        (4096, 4096)
                    };
                    let h = header(command, flags, offset, length);
                    let r = check(&l, &h);
                    assert_sane(&l, &h, &r);
                    // Bits beyond the defined flags are always refused.
                    if bit >= 5 {
                        assert!(r.is_err(), "{h:?} accepted");
                    }
                }
                let h = header(command, u16::MAX, 4096, 4096);
                assert!(check(&l, &h).is_err(), "{h:?} accepted");
            }
        }
    }
}

#[test]
fn oversized_and_overflowing_ranges_are_refused() {
    let huge = Limits {
        size_bytes: u64::MAX,
        max_payload: u32::MAX / 4096 * 4096,
        ..limits()
    };
    let offsets = [
        0,
        4096,
        u64::MAX,
        u64::MAX - 1,
        u64::MAX - 4095,
        u64::MAX - 4096,
        u64::MAX / 4096 * 4096,
        u64::MAX - u64::from(u32::MAX),
        1 << 63,
        (1 << 32) - 4096,
        4096 * 1024,
        4096 * 1023,
        512,
        4096 * 1024 - 512,
        u64::MAX - 511,
        u64::MAX / 512 * 512,
        (1 << 32) - 512,
    ];
    let lengths = [
        0,
        1,
        4095,
        4096,
        8192,
        u32::MAX,
        u32::MAX - 4095,
        u32::MAX / 4096 * 4096,
        1 << 31,
        4096 * 17,
        511,
        512,
        513,
        1536,
        4096 * 16 + 512,
        u32::MAX - 511,
    ];
    for l in [limits(), huge] {
        for &command in &COMMANDS {
            for &offset in &offsets {
                for &length in &lengths {
                    for flags in [
                        0,
                        CMD_FLAG_FUA,
                        CMD_FLAG_REQ_ONE,
                        CMD_FLAG_NO_HOLE,
                        CMD_FLAG_FAST_ZERO,
                    ] {
                        let h = header(command, flags, offset, length);
                        let r = check(&l, &h);
                        assert_sane(&l, &h, &r);
                    }
                }
            }
        }
    }
    let l = limits();
    // Payloads beyond the advertised maximum: EOVERFLOW.
    for command in [CMD_READ, CMD_WRITE] {
        let r = check(&l, &header(command, 0, 0, u32::MAX));
        assert_eq!(r.map_err(|e| e.0), Err(Errno::Overflow));
    }
    // offset + length wraps u64: refused, not wrapped into range.
    for command in [CMD_READ, CMD_TRIM, CMD_BLOCK_STATUS] {
        let r = check(&huge, &header(command, 0, u64::MAX - 4095, 8192));
        assert_eq!(r.map_err(|e| e.0), Err(Errno::Inval), "command {command}");
    }
    for command in [CMD_WRITE, CMD_WRITE_ZEROES] {
        let r = check(&huge, &header(command, 0, u64::MAX - 4095, 8192));
        assert_eq!(r.map_err(|e| e.0), Err(Errno::NoSpc), "command {command}");
    }
}

fn info_data(name: &[u8], requests: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name);
    d.extend_from_slice(&(requests.len() as u16).to_be_bytes());
    for r in requests {
        d.extend_from_slice(&r.to_be_bytes());
    }
    d
}

fn meta_data(name: &[u8], queries: &[&[u8]]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name);
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q);
    }
    d
}

#[test]
fn option_data_truncated_at_every_length_or_extended_is_invalid() {
    let info = info_data(b"zftl", &[INFO_NAME, INFO_BLOCK_SIZE, 0xffff]);
    assert!(InfoRequest::decode(&info).is_ok());
    let meta = meta_data(b"zftl", &[b"base:allocation", b"base:"]);
    assert!(MetaContextRequest::decode(&meta).is_ok());
    for n in 0..info.len() {
        assert_eq!(InfoRequest::decode(&info[..n]), Err(InvalidOption), "{n}");
    }
    for n in 0..meta.len() {
        assert_eq!(
            MetaContextRequest::decode(&meta[..n]),
            Err(InvalidOption),
            "{n}"
        );
    }
    for extra in [&[0u8][..], &[0, 0], &[0xff; 7]] {
        let mut i = info.clone();
        i.extend_from_slice(extra);
        assert_eq!(InfoRequest::decode(&i), Err(InvalidOption));
        let mut m = meta.clone();
        m.extend_from_slice(extra);
        assert_eq!(MetaContextRequest::decode(&m), Err(InvalidOption));
    }
}

#[test]
fn option_lengths_that_lie_are_invalid() {
    let long_name = vec![b'a'; MAX_STRING_BYTES + 1];
    let max_name = vec![b'a'; MAX_STRING_BYTES];
    assert!(InfoRequest::decode(&info_data(&max_name, &[])).is_ok());
    assert_eq!(
        InfoRequest::decode(&info_data(&long_name, &[])),
        Err(InvalidOption)
    );
    assert_eq!(
        MetaContextRequest::decode(&meta_data(b"", &[&long_name])),
        Err(InvalidOption)
    );
    assert_eq!(decode_export_name(&long_name), Err(InvalidOption));
    // Name lengths past the data, up to u32::MAX (and usize overflow of at+len).
    for len in [5u32, 4096, 4097, 1 << 31, u32::MAX - 3, u32::MAX] {
        let mut d = len.to_be_bytes().to_vec();
        d.extend_from_slice(b"zftl\0\0");
        assert_eq!(InfoRequest::decode(&d), Err(InvalidOption), "{len}");
        assert_eq!(MetaContextRequest::decode(&d), Err(InvalidOption), "{len}");
    }
    // Counts that promise more than is there.
    let mut d = info_data(b"", &[]);
    d[4..6].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(InfoRequest::decode(&d), Err(InvalidOption));
    for count in [MAX_META_QUERIES + 1, 1 << 31, u32::MAX] {
        let mut m = meta_data(b"", &[]);
        m[4..8].copy_from_slice(&count.to_be_bytes());
        assert_eq!(
            MetaContextRequest::decode(&m),
            Err(InvalidOption),
            "{count}"
        );
    }
    let many: Vec<&[u8]> = vec![b"base:allocation"; MAX_META_QUERIES as usize + 1];
    assert_eq!(
        MetaContextRequest::decode(&meta_data(b"", &many)),
        Err(InvalidOption)
    );
    let query_len_lies = {
        let mut m = meta_data(b"", &[b"base:allocation"]);
        m[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        m
    };
    assert_eq!(
        MetaContextRequest::decode(&query_len_lies),
        Err(InvalidOption)
    );
    // NUL and invalid UTF-8 in names and queries.
    for bad in [&b"a\0"[..], &[0xc3], &[0xff, 0xfe], &[0xed, 0xa0, 0x80]] {
        assert_eq!(
            InfoRequest::decode(&info_data(bad, &[])),
            Err(InvalidOption)
        );
        assert_eq!(
            MetaContextRequest::decode(&meta_data(bad, &[])),
            Err(InvalidOption)
        );
        assert_eq!(
            MetaContextRequest::decode(&meta_data(b"", &[bad])),
            Err(InvalidOption)
        );
        assert_eq!(decode_export_name(bad), Err(InvalidOption));
    }
}

// ----- the server, end to end -------------------------------------------------

const BS: usize = 4096;
const BLOCKS: u64 = 64;

/// A volume that counts requests the server should never have let through.
#[derive(Clone, Default)]
struct Dummy {
    bad: Arc<AtomicU64>,
}

impl Dummy {
    fn range(&self, lba: u64, count: u32) {
        let ok = count > 0
            && count <= 8
            && lba
                .checked_add(u64::from(count))
                .is_some_and(|e| e <= BLOCKS);
        if !ok {
            self.bad.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Volume for Dummy {
    fn block_size(&self) -> usize {
        BS
    }
    fn logical_blocks(&self) -> u64 {
        BLOCKS
    }
    fn max_request_blocks(&self) -> u32 {
        8
    }
    fn call(&self, request: Request) -> impl Future<Output = Result<ReplyData, IoError>> + Send {
        let reply = match request {
            Request::Read { lba, block_count } => {
                self.range(lba, block_count);
                ReplyData::Read(vec![0; block_count as usize * BS])
            }
            Request::Write { lba, data, .. } => {
                self.range(lba, (data.len() / BS) as u32);
                ReplyData::Done
            }
            Request::WriteSummed { lba, blocks, .. } => {
                self.range(lba, (blocks.data().len() / BS) as u32);
                ReplyData::Done
            }
            Request::Trim { lba, block_count }
            | Request::WriteZeroes {
                lba, block_count, ..
            } => {
                self.range(lba, block_count);
                ReplyData::Done
            }
            Request::Extents { lba, block_count } => ReplyData::Extents(vec![Extent {
                block_count: block_count.min((BLOCKS - lba.min(BLOCKS)) as u32),
                mapped: true,
            }]),
            Request::Flush => ReplyData::Done,
            // NBD has no range operations, snapshot changes or nameless
            // blocks, and this volume has no snapshots to view: the server
            // never sends one.
            Request::Range { .. }
            | Request::NamelessWrite { .. }
            | Request::NamelessOverwrite { .. }
            | Request::NamelessRead { .. }
            | Request::NamelessFree { .. }
            | Request::NamelessCommit
            | Request::NamelessAck { .. }
            | Request::NamelessEvents { .. }
            | Request::SnapshotCreate { .. }
            | Request::SnapshotDelete { .. }
            | Request::SnapshotRevert { .. }
            | Request::ForkCreate { .. }
            | Request::ForkDelete { .. }
            | Request::InFork { .. }
            | Request::ReadSnapshot { .. }
            | Request::Changed { .. } => {
                self.bad.fetch_add(1, Ordering::SeqCst);
                ReplyData::Done
            }
        };
        std::future::ready(Ok(reply))
    }
}

fn server(vol: &Dummy) -> Server<Dummy> {
    let exports = ExportTable::new(
        vec![
            Export::new("zftl", vol.clone()),
            Export::new("ro", vol.clone()).read_only(true),
        ],
        Some("zftl"),
    )
    .unwrap();
    let config = ServerConfig {
        max_payload_bytes: 8 * BS as u32,
        max_option_bytes: 4096 + 64,
        max_option_skip_bytes: 16 << 10,
        max_write_skip_bytes: 16 << 10,
        handshake_timeout: Duration::from_secs(5),
        ..ServerConfig::default()
    };
    Server::new(exports, config)
}

/// Feeds `input` as the whole client stream (then EOF) and returns all the
/// server sent; the connection must end on its own.
async fn session(input: Vec<u8>) -> Vec<u8> {
    let vol = Dummy::default();
    let server = server(&vol);
    let (client, server_end) = tokio::io::duplex(64 << 10);
    let (mut rd, mut wr) = tokio::io::split(client);
    let write = async move {
        let _ = wr.write_all(&input).await;
        let _ = wr.shutdown().await;
    };
    let read = async move {
        let mut out = Vec::new();
        let _ = rd.read_to_end(&mut out).await;
        out
    };
    let (_, _, out) = tokio::time::timeout(Duration::from_secs(20), async {
        tokio::join!(server.serve_stream(server_end), write, read)
    })
    .await
    .expect("the connection ends");
    assert_eq!(
        vol.bad.load(Ordering::SeqCst),
        0,
        "a bad request reached the volume"
    );
    out
}

fn option(b: &mut Vec<u8>, option: u32, data: &[u8]) {
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
}

fn flags() -> Vec<u8> {
    (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec()
}

/// Client flags, structured replies, base:allocation and GO `name`.
fn negotiated(name: &str) -> Vec<u8> {
    let mut b = flags();
    option(&mut b, OPT_STRUCTURED_REPLY, &[]);
    option(
        &mut b,
        OPT_SET_META_CONTEXT,
        &meta_data(name.as_bytes(), &[b"base:allocation"]),
    );
    option(&mut b, OPT_GO, &info_data(name.as_bytes(), &[]));
    b
}

/// The option replies in `out` after the 18-byte greeting: (option, type).
fn option_replies(out: &[u8]) -> Vec<(u32, u32)> {
    let mut at = 18;
    let mut replies = Vec::new();
    while out.len() >= at + 20 && out[at..at + 8] == OPTION_REPLY_MAGIC.to_be_bytes() {
        let option = u32::from_be_bytes(out[at + 8..at + 12].try_into().unwrap());
        let kind = u32::from_be_bytes(out[at + 12..at + 16].try_into().unwrap());
        let len = u32::from_be_bytes(out[at + 16..at + 20].try_into().unwrap()) as usize;
        replies.push((option, kind));
        at += 20 + len;
    }
    replies
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn truncated_handshakes_at_every_length_close_cleanly() {
    let rt = rt();
    let mut full = negotiated("zftl");
    let mut req = header(CMD_READ, 0, 0, 4096).encode().to_vec();
    full.append(&mut req);
    for n in 0..full.len() {
        rt.block_on(session(full[..n].to_vec()));
    }
    // The whole stream is served: the READ gets its data chunk.
    let out = rt.block_on(session(full));
    let mut chunk = STRUCTURED_REPLY_MAGIC.to_be_bytes().to_vec();
    chunk.extend_from_slice(&REPLY_FLAG_DONE.to_be_bytes());
    chunk.extend_from_slice(&REPLY_TYPE_OFFSET_DATA.to_be_bytes());
    assert!(out.windows(8).any(|w| w == chunk), "no READ reply");
}

#[test]
fn truncated_request_headers_and_payloads_close_cleanly() {
    let rt = rt();
    let base = negotiated("zftl");
    let mut write = header(CMD_WRITE, 0, 0, 2 * BS as u32).encode().to_vec();
    write.extend_from_slice(&[0x5a; 2 * BS]);
    for n in 0..write.len() {
        let mut input = base.clone();
        input.extend_from_slice(&write[..n]);
        rt.block_on(session(input));
    }
}

#[test]
fn bad_magics_in_the_stream_disconnect() {
    let rt = rt();
    // Bad option magic.
    let mut b = flags();
    b.extend_from_slice(&NBD_MAGIC.to_be_bytes());
    b.extend_from_slice(&[0; 8]);
    let out = rt.block_on(session(b));
    assert!(option_replies(&out).is_empty());
    // Unknown client flags.
    for bit in 2..32 {
        let out = rt.block_on(session((1u32 << bit).to_be_bytes().to_vec()));
        assert_eq!(out.len(), 18, "bit {bit}: only the greeting");
    }
    // Bad request magic after GO: the connection closes without a reply.
    let mut b = negotiated("zftl");
    let mut h = header(CMD_READ, 0, 0, 4096).encode();
    h[0] ^= 0x80;
    b.extend_from_slice(&h);
    b.extend_from_slice(&header(CMD_READ, 0, 0, 4096).encode());
    let out = rt.block_on(session(b));
    assert!(!out.windows(4).any(
        |w| w == STRUCTURED_REPLY_MAGIC.to_be_bytes() || w == SIMPLE_REPLY_MAGIC.to_be_bytes()
    ));
}

#[test]
fn unknown_and_oversized_options_get_errors() {
    let rt = rt();
    let mut b = flags();
    for code in [0u32, 4, 11, 12, 255, 1 << 31, u32::MAX] {
        option(&mut b, code, b"junk");
    }
    // Too big for the option buffer but skippable: NBD_REP_ERR_TOO_BIG.
    option(&mut b, OPT_INFO, &vec![0; 8 << 10]);
    // Options with data that does not parse.
    option(&mut b, OPT_GO, &[0xff; 3]);
    option(&mut b, OPT_LIST, b"x");
    option(&mut b, OPT_STRUCTURED_REPLY, b"x");
    option(&mut b, OPT_SET_META_CONTEXT, &meta_data(b"zftl", &[]));
    option(&mut b, OPT_ABORT, &[]);
    let replies = rt.block_on(session(b));
    let kinds: Vec<u32> = option_replies(&replies).iter().map(|r| r.1).collect();
    let mut want = vec![REP_ERR_UNSUP; 7];
    want.extend([
        REP_ERR_TOO_BIG,
        REP_ERR_INVALID,
        REP_ERR_INVALID,
        REP_ERR_INVALID,
        REP_ERR_INVALID,
        REP_ACK,
    ]);
    assert_eq!(kinds, want);
    // Larger than anything the server skips: the connection closes.
    for len in [(16u32 << 10) + 1, 1 << 31, u32::MAX] {
        let mut b = flags();
        b.extend_from_slice(&IHAVEOPT.to_be_bytes());
        b.extend_from_slice(&OPT_GO.to_be_bytes());
        b.extend_from_slice(&len.to_be_bytes());
        b.extend_from_slice(&[0; 64]);
        assert!(option_replies(&rt.block_on(session(b))).is_empty());
    }
}

#[test]
fn malformed_requests_get_errors_and_never_reach_the_volume() {
    let rt = rt();
    for name in ["zftl", "ro"] {
        let mut b = negotiated(name);
        let mut expected = 0;
        let mut add = |h: RequestHeader, payload: usize| {
            b.extend_from_slice(&h.encode());
            b.extend_from_slice(&vec![0x11; payload]);
            expected += 1;
        };
        let size = BLOCKS * BS as u64;
        for &command in &COMMANDS {
            if command == CMD_DISC {
                continue;
            }
            for bit in 0..16 {
                add(
                    header(command, 1 << bit, size - BS as u64, BS as u32),
                    if command == CMD_WRITE { BS } else { 0 },
                );
            }
            for (offset, length) in [
                (size, BS as u32),
                (size - BS as u64, 2 * BS as u32),
                (u64::MAX - 4095, 8192),
                (u64::MAX, u32::MAX),
                (1, 4096),
                (0, 1),
                (0, 0),
                (511, 512),
                (512, 511),
                (size - 512, 1024),
                (u64::MAX - 511, 1024),
                (0, 9 * BS as u32),
            ] {
                // WRITE payloads up to the skip bound are sent (and dropped).
                let payload = if command == CMD_WRITE && length <= 16 << 10 {
                    length as usize
                } else {
                    0
                };
                if command == CMD_WRITE && payload == 0 && length != 0 {
                    continue;
                }
                add(header(command, 0, offset, length), payload);
            }
        }
        for command in [5u16, 8, 9, 0x100, u16::MAX] {
            add(header(command, 0, 0, 4096), 0);
        }
        let out = rt.block_on(session(b));
        // Errors come as structured chunks, successes as simple replies.
        let replies = out
            .windows(4)
            .filter(|w| {
                *w == STRUCTURED_REPLY_MAGIC.to_be_bytes() || *w == SIMPLE_REPLY_MAGIC.to_be_bytes()
            })
            .count();
        assert!(
            replies >= expected,
            "{name}: {replies} replies to {expected} requests"
        );
    }
    // A WRITE refused with a payload larger than the skip bound: closed.
    let mut b = negotiated("ro");
    b.extend_from_slice(&header(CMD_WRITE, 0, 0, u32::MAX).encode());
    b.extend_from_slice(&[0; 4096]);
    rt.block_on(session(b));
}
