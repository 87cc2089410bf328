//! `zns-nbd-client write|verify ADDR EXPORT SEED`: a minimal NBD client (std
//! only, so it links statically into the test guest) for the guest's
//! `zftl serve --device` test. Fixed newstyle handshake with
//! `NBD_OPT_EXPORT_NAME`, simple replies only.
//!
//! `write` writes a pattern (a function of SEED, the offset and the pass)
//! to a spread of extents of the export, flushes, reads every extent back
//! and compares; `verify` only reads and compares (after the server was
//! restarted). Exit status: 0 pass, 1 a mismatch or an NBD error, 2 cannot
//! connect.

#![forbid(unsafe_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const OPT_MAGIC: u64 = 0x4948_4156_454F_5054; // "IHAVEOPT"
const REQUEST_MAGIC: u32 = 0x2560_9513;
const REPLY_MAGIC: u32 = 0x6744_6698;
const FLAG_FIXED_NEWSTYLE: u16 = 1;
const FLAG_NO_ZEROES: u16 = 2;
const OPT_EXPORT_NAME: u32 = 1;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;
const CMD_FLUSH: u16 = 3;

/// Extents written: (offset in 4 KiB blocks from a spread, length in bytes).
const EXTENTS: u64 = 64;
const EXTENT_BYTES: u32 = 128 << 10;

struct Nbd {
    s: TcpStream,
    size: u64,
    handle: u64,
}

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

fn err(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

impl Nbd {
    fn connect(addr: &str, export: &str) -> Result<Nbd, String> {
        let t0 = Instant::now();
        let mut s = loop {
            match TcpStream::connect(addr) {
                Ok(s) => break s,
                Err(_) if t0.elapsed() < Duration::from_secs(120) => {
                    std::thread::sleep(Duration::from_millis(100))
                }
                Err(e) => return Err(err(&format!("connect to {addr}"), e)),
            }
        };
        s.set_nodelay(true).ok();
        let mut hello = [0u8; 18];
        s.read_exact(&mut hello).map_err(|e| err("greeting", e))?;
        if &hello[..8] != b"NBDMAGIC" || &hello[8..16] != b"IHAVEOPT" {
            return Err("not a newstyle NBD server".to_string());
        }
        let flags = u16::from_be_bytes([hello[16], hello[17]]);
        if flags & FLAG_FIXED_NEWSTYLE == 0 {
            return Err("server is not fixed newstyle".to_string());
        }
        let no_zeroes = flags & FLAG_NO_ZEROES != 0;
        let client_flags = u32::from(FLAG_FIXED_NEWSTYLE | (flags & FLAG_NO_ZEROES));
        let mut msg = client_flags.to_be_bytes().to_vec();
        msg.extend_from_slice(&OPT_MAGIC.to_be_bytes());
        msg.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
        msg.extend_from_slice(&(export.len() as u32).to_be_bytes());
        msg.extend_from_slice(export.as_bytes());
        s.write_all(&msg).map_err(|e| err("option", e))?;
        let mut reply = vec![0u8; if no_zeroes { 10 } else { 134 }];
        s.read_exact(&mut reply)
            .map_err(|e| err("export reply (unknown export?)", e))?;
        let size = u64::from_be_bytes(reply[..8].try_into().expect("8 bytes"));
        Ok(Nbd { s, size, handle: 0 })
    }

    fn request(&mut self, cmd: u16, offset: u64, len: u32, data: &[u8]) -> Result<Vec<u8>, String> {
        self.handle += 1;
        let mut msg = Vec::with_capacity(28 + data.len());
        msg.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        msg.extend_from_slice(&0u16.to_be_bytes());
        msg.extend_from_slice(&cmd.to_be_bytes());
        msg.extend_from_slice(&self.handle.to_be_bytes());
        msg.extend_from_slice(&offset.to_be_bytes());
        msg.extend_from_slice(&len.to_be_bytes());
        msg.extend_from_slice(data);
        self.s.write_all(&msg).map_err(|e| err("request", e))?;
        if cmd == CMD_DISC {
            return Ok(Vec::new());
        }
        let mut r = [0u8; 16];
        self.s.read_exact(&mut r).map_err(|e| err("reply", e))?;
        let magic = u32::from_be_bytes(r[..4].try_into().expect("4 bytes"));
        let error = u32::from_be_bytes(r[4..8].try_into().expect("4 bytes"));
        let handle = u64::from_be_bytes(r[8..16].try_into().expect("8 bytes"));
        if magic != REPLY_MAGIC || handle != self.handle {
            return Err(format!("bad reply (magic {magic:#x}, handle {handle})"));
        }
        if error != 0 {
            return Err(format!(
                "command {cmd} at {offset}+{len}: NBD error {error}"
            ));
        }
        let mut out = Vec::new();
        if cmd == CMD_READ {
            out = vec![0u8; len as usize];
            self.s
                .read_exact(&mut out)
                .map_err(|e| err("read data", e))?;
        }
        Ok(out)
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

fn run(mode: &str, addr: &str, export: &str, seed: u64) -> Result<(), String> {
    let t0 = Instant::now();
    let mut nbd = Nbd::connect(addr, export)?;
    println!("nbd: connected to {addr}/{export}: {} bytes", nbd.size);
    if nbd.size < u64::from(EXTENT_BYTES) * 2 {
        return Err(format!("export too small: {} bytes", nbd.size));
    }
    let offs = offsets(seed, nbd.size);
    if mode == "write" {
        for &o in &offs {
            let data = pattern(seed, o, EXTENT_BYTES as usize);
            nbd.request(CMD_WRITE, o, EXTENT_BYTES, &data)?;
        }
        nbd.request(CMD_FLUSH, 0, 0, &[])?;
    }
    for &o in &offs {
        let got = nbd.request(CMD_READ, o, EXTENT_BYTES, &[])?;
        if got != pattern(seed, o, EXTENT_BYTES as usize) {
            return Err(format!(
                "{mode}: data at byte {o} differs from what was written"
            ));
        }
    }
    nbd.request(CMD_DISC, 0, 0, &[])?;
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
        eprintln!("usage: zns-nbd-client write|verify ADDR:PORT EXPORT SEED");
        return ExitCode::from(2);
    };
    if mode != "write" && mode != "verify" {
        eprintln!("zns-nbd-client: mode must be write or verify");
        return ExitCode::from(2);
    }
    match run(mode, addr, export, seed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("zns-nbd-client: FAIL: {e}");
            ExitCode::from(1)
        }
    }
}
