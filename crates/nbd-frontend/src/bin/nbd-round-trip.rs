//! `nbd-round-trip write|verify ADDR EXPORT SEED`: a round trip through an
//! NBD export with `zftl_nbd::client`, for the guest's `zftl serve
//! --device` test (it links statically into the test guest).
//!
//! `write` writes a pattern (a function of SEED and the offset) to a spread
//! of extents of the export, flushes, reads every extent back and compares;
//! `verify` only reads and compares (after the server was restarted). The
//! handshake is `NBD_OPT_EXPORT_NAME`, the replies simple. Exit status: 0
//! pass, 1 a failure (no connection within two minutes, an NBD error, a
//! mismatch), 2 bad arguments.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use zftl_nbd::client::Client;

/// Extents written: (offset in 4 KiB blocks from a spread, length in bytes).
const EXTENTS: u64 = 64;
const EXTENT_BYTES: u32 = 128 << 10;

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn pattern(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut x = mix(seed ^ mix(offset));
    while out.len() < len {
        x = mix(x);
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Connects, retrying for up to two minutes while the server starts.
async fn connect(addr: &str) -> Result<TcpStream, String> {
    let t0 = Instant::now();
    loop {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                s.set_nodelay(true).ok();
                return Ok(s);
            }
            Err(_) if t0.elapsed() < Duration::from_secs(120) => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => return Err(format!("connect to {addr}: {e}")),
        }
    }
}

fn offsets(seed: u64, size: u64) -> Vec<u64> {
    let slots = size / u64::from(EXTENT_BYTES);
    // Distinct extents spread over the export (the first and the last too).
    let mut v: Vec<u64> = (0..EXTENTS)
        .map(|i| match i {
            0 => 0,
            1 => slots - 1,
            _ => mix(seed ^ i) % slots,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v.into_iter().map(|s| s * u64::from(EXTENT_BYTES)).collect()
}

async fn run(mode: &str, addr: &str, export: &str, seed: u64) -> Result<(), String> {
    let t0 = Instant::now();
    let stream = connect(addr).await?;
    let mut nbd = Client::greet(stream).await.map_err(|e| e.to_string())?;
    let size = nbd
        .export_name(export)
        .await
        .map_err(|e| format!("export {export}: {e}"))?
        .size_bytes;
    println!("nbd: connected to {addr}/{export}: {size} bytes");
    if size < u64::from(EXTENT_BYTES) * 2 {
        return Err(format!("export too small: {size} bytes"));
    }
    let offs = offsets(seed, size);
    let e = |e: zftl_nbd::client::ClientError| e.to_string();
    if mode == "write" {
        for &o in &offs {
            let data = pattern(seed, o, EXTENT_BYTES as usize);
            nbd.write(o, &data, 0).await.map_err(e)?;
        }
        nbd.flush().await.map_err(e)?;
    }
    for &o in &offs {
        let got = nbd.read(o, EXTENT_BYTES).await.map_err(e)?;
        if got != pattern(seed, o, EXTENT_BYTES as usize) {
            return Err(format!(
                "{mode}: data at byte {o} differs from what was written"
            ));
        }
    }
    nbd.disconnect().await.map_err(e)?;
    println!(
        "nbd: {mode}: {} extents of {} KiB {} and verified in {:.1} s",
        offs.len(),
        EXTENT_BYTES >> 10,
        if mode == "write" { "written" } else { "read" },
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(addr), Some(export), Some(seed)) = (
        args.get(1),
        args.get(2),
        args.get(3),
        args.get(4).and_then(|s| s.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: nbd-round-trip write|verify ADDR:PORT EXPORT SEED");
        return ExitCode::from(2);
    };
    if mode != "write" && mode != "verify" {
        eprintln!("nbd-round-trip: mode must be write or verify");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("nbd-round-trip: cannot start a runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(mode, addr, export, seed)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("nbd-round-trip: FAIL: {e}");
            ExitCode::from(1)
        }
    }
}
