//! Shared by the NBD tests: a real FTL on the in-memory simulator as the
//! volume, a server on 127.0.0.1, and helpers over `zftl_nbd::client` on
//! any stream (plain or TLS) or on a TCP connection.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use zftl::core::history::Snapshot;
use zftl::core::{FormatOptions, FtlConfig, IoError, ReplyData, Request, TagPlacement};
use zftl::handle::{AsyncHandle, Handle};
use zftl::sim::{SimConfig, SimDevice};
use zftl_nbd::client::{info_request, Client, ClientError, ExportInfo};
use zftl_nbd::proto::*;
use zftl_nbd::{Export, ExportTable, Server, Volume};

pub const BS: usize = 4096;

#[derive(Clone)]
pub struct Vol(pub AsyncHandle<SimDevice>);

impl Volume for Vol {
    fn block_size(&self) -> usize {
        self.0.block_size()
    }
    fn logical_blocks(&self) -> u64 {
        self.0.logical_blocks()
    }
    fn max_request_blocks(&self) -> u32 {
        64
    }
    fn call(&self, request: Request) -> impl Future<Output = Result<ReplyData, IoError>> + Send {
        self.0.call(request)
    }
    fn snapshots(&self) -> impl Future<Output = Result<Vec<Snapshot>, IoError>> + Send {
        self.0.snapshots()
    }
    fn forks(&self) -> impl Future<Output = Result<Vec<zftl::core::Fork>, IoError>> + Send {
        self.0.forks()
    }
}

pub async fn format_volume() -> Vol {
    format_volume_with(FormatOptions::default()).await
}

/// A volume with tags in band: one that takes snapshots.
pub async fn format_volume_in_band() -> Vol {
    format_volume_with(FormatOptions {
        tag_placement: TagPlacement::InBand,
        ..FormatOptions::default()
    })
    .await
}

async fn format_volume_with(options: FormatOptions) -> Vol {
    tokio::task::spawn_blocking(move || {
        let dev = SimDevice::create_memory(SimConfig::small_for_tests()).unwrap();
        let config = FtlConfig {
            max_request_blocks: 64,
            ..FtlConfig::default()
        };
        let h = Handle::format(dev, &options, config).unwrap();
        Vol(AsyncHandle::from(h))
    })
    .await
    .unwrap()
}

pub fn exports(vol: &Vol) -> ExportTable<Vol> {
    ExportTable::new(vec![Export::new("zftl", vol.clone())], Some("zftl")).unwrap()
}

pub struct Running {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(20), self.task)
            .await
            .expect("server drains and stops")
            .unwrap()
            .unwrap();
    }
}

/// Serves `server` on 127.0.0.1, port 0.
pub async fn start<V: Volume>(server: Server<V>) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        server
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await
    });
    Running {
        addr,
        stop: Some(stop),
        task,
    }
}

// ----- the client: zftl_nbd::client on a borrowed stream -----------------------

fn on<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> Client<&mut S> {
    Client::resume(s)
}

/// Reads the greeting and answers it; zftl's server offers no zeroes.
pub async fn greet<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    let c = Client::greet(s).await.unwrap();
    assert_eq!(c.server_flags(), FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
}

pub async fn send_option<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, option: u32, data: &[u8]) {
    on(s).send_option(option, data).await.unwrap();
}

/// One option reply: (option, reply type, data), or the error.
pub async fn try_read_reply<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
) -> Result<(u32, u32, Vec<u8>), ClientError> {
    let r = on(s).option_reply().await?;
    Ok((r.option, r.reply_type, r.data))
}

pub async fn read_reply<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> (u32, u32, Vec<u8>) {
    try_read_reply(s).await.unwrap()
}

pub fn go_data(name: &str) -> Vec<u8> {
    info_request(name, &[])
}

/// `NBD_OPT_GO` for `name`; returns the export size.
pub async fn go<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, name: &str) -> u64 {
    on(s).go(name, &[]).await.unwrap().size_bytes
}

/// Sends one request (simple replies) and returns the reply's error and
/// its data (`read_len` bytes of a successful READ).
pub async fn request<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    command: u16,
    offset: u64,
    length: u32,
    payload: &[u8],
    read_len: usize,
) -> (u32, Vec<u8>) {
    let r = on(s)
        .call(command, 0, offset, length, payload)
        .await
        .unwrap();
    assert!(r.simple, "simple replies only");
    if r.error == 0 {
        assert_eq!(r.data.len(), read_len);
    }
    (r.error, r.data)
}

/// Writes a pattern at block 3, reads it back, flushes.
pub async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, seed: u8) {
    let data: Vec<u8> = (0..2 * BS)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let off = 3 * BS as u64;
    let mut c = on(s);
    c.write(off, &data, 0).await.unwrap();
    assert_eq!(c.read(off, data.len() as u32).await.unwrap(), data);
    c.flush().await.unwrap();
}

// ----- the client on a TCP connection ------------------------------------------

/// `len` bytes of a pattern that differs with `seed` and along the bytes.
pub fn fill(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed ^ (i as u8) ^ ((i >> 8) as u8))
        .collect()
}

/// A connection to `addr`, greeted.
pub async fn client(addr: SocketAddr) -> Client<TcpStream> {
    Client::greet(TcpStream::connect(addr).await.unwrap())
        .await
        .unwrap()
}

/// A connection in transmission on `export` (structured replies, and
/// `base:allocation` when `meta`).
pub async fn open(
    addr: SocketAddr,
    export: &str,
    meta: bool,
) -> Result<(Client<TcpStream>, ExportInfo), ClientError> {
    let mut c = client(addr).await;
    c.structured_replies().await?;
    if meta {
        let contexts = c.set_meta_context(export, &[META_BASE_ALLOCATION]).await?;
        assert_eq!(contexts.len(), 1, "{export}: base:allocation selected");
    }
    let info = c.go(export, &[INFO_BLOCK_SIZE]).await?;
    Ok((c, info))
}

/// `NBD_OPT_LIST`: (name, description) of each export, in order.
pub async fn list(addr: SocketAddr) -> Vec<(String, String)> {
    let mut c = client(addr).await;
    c.send_option(OPT_LIST, &[]).await.unwrap();
    let mut out = Vec::new();
    loop {
        let r = c.option_reply().await.unwrap();
        assert_eq!(r.option, OPT_LIST);
        if r.reply_type == REP_ACK {
            break;
        }
        assert_eq!(r.reply_type, REP_SERVER);
        let len = u32::from_be_bytes(r.data[0..4].try_into().unwrap()) as usize;
        let name = String::from_utf8(r.data[4..4 + len].to_vec()).unwrap();
        let description = String::from_utf8(r.data[4 + len..].to_vec()).unwrap();
        out.push((name, description));
    }
    out
}
