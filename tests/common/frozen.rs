//! What the frozen nameless images share (`tests/frozen_gap_fills.rs`,
//! `tests/frozen_overwrite_fills.rs`): their device, their blocks' data
//! and md by key, the client's record of addresses in logical blocks from
//! LBA 0, and packing an image into `tests/images/`.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use zftl::core::{Driver, FormatOptions, NamelessAddr, TagPlacement};
use zftl::sim::{SimConfig, SimDevice};

/// Where the client's record starts.
const INDEX_LBA: u64 = 0;

/// The device of the frozen nameless images, in each tag mode.
pub fn sim_config(oob: bool) -> SimConfig {
    SimConfig {
        pages_per_block: 16,
        ..super::volume_config(oob)
    }
}

pub fn format_options(oob: bool, seed: u64) -> FormatOptions {
    FormatOptions {
        tag_placement: if oob {
            TagPlacement::Auto
        } else {
            TagPlacement::InBand
        },
        seed,
        ..FormatOptions::default()
    }
}

/// Data of `key`: its bytes then the key's low byte (compresses well).
pub fn data(key: u64, bs: usize) -> Vec<u8> {
    let mut d = vec![key as u8; bs];
    d[..8].copy_from_slice(&key.to_le_bytes());
    d
}

pub fn md(key: u64, mb: usize) -> Vec<u8> {
    let mut m = vec![0u8; mb];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m
}

/// Writes the client's record: (address, key) pairs, the keys' meaning
/// the image's own.
pub fn write_index(ftl: &mut Driver<SimDevice>, entries: &[(NamelessAddr, u64)]) {
    let bs = ftl.block_size();
    let mut b: Vec<u8> = Vec::new();
    b.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for &(a, k) in entries {
        b.extend_from_slice(&a.to_u64().to_le_bytes());
        b.extend_from_slice(&k.to_le_bytes());
    }
    b.resize(b.len().div_ceil(bs) * bs, 0);
    ftl.write(INDEX_LBA, &b).unwrap();
}

pub fn read_index(ftl: &mut Driver<SimDevice>) -> Vec<(NamelessAddr, u64)> {
    let bs = ftl.block_size() as u64;
    let head = ftl.read(INDEX_LBA, 1).unwrap();
    let n = u64::from_le_bytes(head[..8].try_into().unwrap());
    let blocks = (8 + 16 * n).div_ceil(bs);
    let b = ftl.read(INDEX_LBA, blocks as u32).unwrap();
    (0..n as usize)
        .map(|i| {
            let at = 8 + 16 * i;
            let a = u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
            let k = u64::from_le_bytes(b[at + 8..at + 16].try_into().unwrap());
            (NamelessAddr::from_u64(a), k)
        })
        .collect()
}

fn images_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images")
}

/// Packs the image file at `path` into `tests/images/<name>`.
pub fn freeze(path: &Path, name: &str) {
    let raw = std::fs::read(path).unwrap();
    let out = std::fs::File::create(images_dir().join(name)).unwrap();
    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::best());
    gz.write_all(&raw).unwrap();
    gz.finish().unwrap();
}

/// `tests/images/<name>` unpacked into `dir`; returns the image file.
pub fn unpack(name: &str, dir: &Path) -> PathBuf {
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(images_dir().join(name)).unwrap())
        .read_to_end(&mut raw)
        .unwrap();
    let path = dir.join("image");
    std::fs::write(&path, raw).unwrap();
    path
}
