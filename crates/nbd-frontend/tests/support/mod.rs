//! Shared by the TLS and metrics tests: a real FTL on the in-memory
//! simulator as the volume, and a small NBD client over any stream.
#![allow(dead_code)]

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use zftl::core::{FormatOptions, FtlConfig, IoError, ReplyData, Request};
use zftl::handle::{AsyncHandle, Handle};
use zftl::sim::{SimConfig, SimDevice};
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
}

pub async fn format_volume() -> Vol {
    tokio::task::spawn_blocking(|| {
        let dev = SimDevice::create_memory(SimConfig::small_for_tests()).unwrap();
        let config = FtlConfig {
            max_request_blocks: 64,
            ..FtlConfig::default()
        };
        let h = Handle::format(dev, &FormatOptions::default(), config).unwrap();
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
pub async fn start(server: Server<Vol>) -> Running {
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

// ----- the client --------------------------------------------------------------

/// Reads the greeting and answers it.
pub async fn greet<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) {
    assert_eq!(s.read_u64().await.unwrap(), NBD_MAGIC);
    assert_eq!(s.read_u64().await.unwrap(), IHAVEOPT);
    assert_eq!(
        s.read_u16().await.unwrap(),
        FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES
    );
    s.write_u32(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
        .await
        .unwrap();
}

pub async fn send_option<S: AsyncWrite + Unpin>(s: &mut S, option: u32, data: &[u8]) {
    let mut b = Vec::new();
    b.extend_from_slice(&IHAVEOPT.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    s.write_all(&b).await.unwrap();
    s.flush().await.unwrap();
}

/// One option reply: (option, reply type, data), or the I/O error.
pub async fn try_read_reply<S: AsyncRead + Unpin>(
    s: &mut S,
) -> std::io::Result<(u32, u32, Vec<u8>)> {
    let magic = s.read_u64().await?;
    assert_eq!(magic, OPTION_REPLY_MAGIC);
    let option = s.read_u32().await?;
    let reply = s.read_u32().await?;
    let len = s.read_u32().await?;
    let mut data = vec![0; len as usize];
    s.read_exact(&mut data).await?;
    Ok((option, reply, data))
}

pub async fn read_reply<S: AsyncRead + Unpin>(s: &mut S) -> (u32, u32, Vec<u8>) {
    try_read_reply(s).await.unwrap()
}

pub fn go_data(name: &str) -> Vec<u8> {
    let mut d = Vec::new();
    d.extend_from_slice(&(name.len() as u32).to_be_bytes());
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    d
}

/// `NBD_OPT_GO` for `name`; returns the export size.
pub async fn go<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, name: &str) -> u64 {
    send_option(s, OPT_GO, &go_data(name)).await;
    let mut size = 0;
    loop {
        let (option, t, d) = read_reply(s).await;
        assert_eq!(option, OPT_GO);
        match t {
            REP_INFO if u16::from_be_bytes([d[0], d[1]]) == INFO_EXPORT => {
                size = u64::from_be_bytes(d[2..10].try_into().unwrap());
            }
            REP_INFO => {}
            REP_ACK => return size,
            other => panic!("GO failed: {other:#x} {}", String::from_utf8_lossy(&d)),
        }
    }
}

/// Sends one request (simple replies) and returns the reply's error and
/// the read data (`read_len` bytes on success).
pub async fn request<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    command: u16,
    offset: u64,
    length: u32,
    payload: &[u8],
    read_len: usize,
) -> (u32, Vec<u8>) {
    let mut b = Vec::with_capacity(28 + payload.len());
    b.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b.extend_from_slice(&0u16.to_be_bytes());
    b.extend_from_slice(&command.to_be_bytes());
    b.extend_from_slice(&7u64.to_be_bytes());
    b.extend_from_slice(&offset.to_be_bytes());
    b.extend_from_slice(&length.to_be_bytes());
    b.extend_from_slice(payload);
    s.write_all(&b).await.unwrap();
    s.flush().await.unwrap();
    assert_eq!(s.read_u32().await.unwrap(), SIMPLE_REPLY_MAGIC);
    let error = s.read_u32().await.unwrap();
    assert_eq!(s.read_u64().await.unwrap(), 7);
    let mut data = vec![0u8; if error == 0 { read_len } else { 0 }];
    s.read_exact(&mut data).await.unwrap();
    (error, data)
}

/// Writes a pattern at block 3, reads it back, flushes.
pub async fn round_trip<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S, seed: u8) {
    let data: Vec<u8> = (0..2 * BS)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect();
    let off = 3 * BS as u64;
    let len = data.len() as u32;
    assert_eq!(request(s, CMD_WRITE, off, len, &data, 0).await.0, 0);
    let (e, back) = request(s, CMD_READ, off, len, &[], data.len()).await;
    assert_eq!(e, 0);
    assert_eq!(back, data);
    assert_eq!(request(s, CMD_FLUSH, 0, 0, &[], 0).await.0, 0);
}
