//! The physical segment (nameless writes) end to end on the simulator
//! through `Driver`: blocks read back with their metadata at the addresses
//! they were given, overwrites and frees, stale and bad addresses get
//! typed errors, emptied zones come back, and both kinds of remount keep
//! every durable block at its address.

use zftl::core::{
    Driver, FormatOptions, FtlConfig, IoError, NamelessAddr, NamelessError, TagPlacement,
};
use zftl::sim::SimDevice;

mod common;
use common::{pattern, volume_config};

fn format(oob: bool) -> Driver<SimDevice> {
    let tag_placement = if oob {
        TagPlacement::Auto
    } else {
        TagPlacement::InBand
    };
    let opts = FormatOptions {
        tag_placement,
        ..FormatOptions::default()
    };
    let dev = SimDevice::create_memory(volume_config(oob)).unwrap();
    Driver::format(dev, &opts, FtlConfig::default()).unwrap()
}

/// The metadata of block `key`, version `version`.
fn md(key: u64, version: u32, md_bytes: usize) -> Vec<u8> {
    let mut m = vec![0u8; md_bytes];
    m[..8].copy_from_slice(&key.to_le_bytes());
    m[8..12].copy_from_slice(&version.to_le_bytes());
    m
}

/// Writes one block per key of version `version`; its addresses.
fn put(ftl: &mut Driver<SimDevice>, keys: &[u64], version: u32) -> Vec<NamelessAddr> {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let data: Vec<u8> = keys.iter().flat_map(|&k| pattern(k, version, bs)).collect();
    let meta: Vec<u8> = keys.iter().flat_map(|&k| md(k, version, mb)).collect();
    ftl.nameless_write(&data, &meta).unwrap()
}

fn holds(ftl: &mut Driver<SimDevice>, addr: NamelessAddr, key: u64, version: u32) {
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let (data, meta) = ftl.nameless_read(addr).unwrap();
    assert_eq!(data, pattern(key, version, bs), "data of key {key} at {addr:?}");
    assert_eq!(meta, md(key, version, mb), "metadata of key {key} at {addr:?}");
}

fn nameless_error(r: Result<impl std::fmt::Debug, IoError>) -> NamelessError {
    match r {
        Err(IoError::Nameless(e)) => e,
        other => panic!("expected a nameless error, got {other:?}"),
    }
}

#[test]
fn blocks_read_back_with_their_metadata_and_frees_and_overwrites_take_effect() {
    let mut ftl = format(true);
    let keys: Vec<u64> = (0..40).collect();
    let addrs = put(&mut ftl, &keys, 1);
    assert_eq!(addrs.len(), keys.len());
    let mut distinct = addrs.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), addrs.len(), "every block gets its own address");
    for (&k, &a) in keys.iter().zip(&addrs) {
        holds(&mut ftl, a, k, 1);
    }
    // Overwrite the first ten: new addresses, the old ones freed.
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let data: Vec<u8> = (0..10).flat_map(|k| pattern(k, 2, bs)).collect();
    let meta: Vec<u8> = (0..10).flat_map(|k| md(k, 2, mb)).collect();
    let new = ftl.nameless_overwrite(&addrs[..10], &data, &meta).unwrap();
    for k in 0..10 {
        holds(&mut ftl, new[k], k as u64, 2);
        let e = nameless_error(ftl.nameless_read(addrs[k]));
        assert_eq!(e, NamelessError::NotLive { addr: addrs[k] });
    }
    // Free ten more: their addresses stop reading, the rest still do.
    ftl.nameless_free(&addrs[10..20]).unwrap();
    for &a in &addrs[10..20] {
        assert_eq!(
            nameless_error(ftl.nameless_read(a)),
            NamelessError::NotLive { addr: a }
        );
    }
    // A free of a freed block changes nothing, even beside a live one.
    let e = nameless_error(ftl.nameless_free(&[addrs[20], addrs[10]]));
    assert_eq!(e, NamelessError::NotLive { addr: addrs[10] });
    holds(&mut ftl, addrs[20], 20, 1);
    let s = ftl.stats();
    assert_eq!(s.nameless_live_blocks, 30);
    assert_eq!(s.nameless_write_blocks, 50);
    assert_eq!(s.nameless_free_blocks, 20);
    assert_eq!(s.mapped_blocks, 0, "nameless blocks map no logical block");
}

#[test]
fn bad_requests_get_typed_errors_and_change_nothing() {
    let mut ftl = format(true);
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let a = put(&mut ftl, &[7], 1)[0];
    // Metadata of the wrong size.
    let e = nameless_error(ftl.nameless_write(&pattern(1, 1, bs), &vec![0; mb - 4]));
    assert_eq!(
        e,
        NamelessError::MetadataSize {
            expected_bytes: mb,
            actual_bytes: mb - 4
        }
    );
    // A partial block.
    assert!(matches!(
        ftl.nameless_write(&[0u8; 100], &md(1, 1, mb)),
        Err(IoError::BufferSize { .. })
    ));
    // Addresses outside the segment, and one never handed out.
    for bad in [NamelessAddr::NONE, NamelessAddr::from_u64(1 << 32)] {
        assert_eq!(
            nameless_error(ftl.nameless_read(bad)),
            NamelessError::OutOfSegment { addr: bad }
        );
    }
    let later = NamelessAddr::new(a.ppa(), a.generation() + 1);
    assert_eq!(
        nameless_error(ftl.nameless_read(later)),
        NamelessError::NotLive { addr: later }
    );
    // An overwrite with an address per block, each once.
    let two: Vec<u8> = [pattern(1, 2, bs), pattern(2, 2, bs)].concat();
    let e = nameless_error(ftl.nameless_overwrite(&[a], &two, &vec![0; 2 * mb]));
    assert_eq!(
        e,
        NamelessError::AddressCount {
            expected: 2,
            actual: 1
        }
    );
    let e = nameless_error(ftl.nameless_overwrite(&[a, a], &two, &vec![0; 2 * mb]));
    assert_eq!(e, NamelessError::Duplicate { addr: a });
    holds(&mut ftl, a, 7, 1);
    // A volume with tags in band has no physical segment.
    let mut in_band = format(false);
    let e = nameless_error(in_band.nameless_write(&pattern(1, 1, bs), &md(1, 1, mb)));
    assert!(matches!(e, NamelessError::Unsupported { .. }), "{e:?}");
}

#[test]
fn emptied_zones_come_back_and_their_old_addresses_go_stale() {
    let mut ftl = format(true);
    // Write and free three times the volume's size: only resets of
    // emptied zones give the space back.
    let total_blocks = ftl.logical_blocks();
    let mut first: Option<NamelessAddr> = None;
    let mut written = 0u64;
    let mut round = 0u32;
    while written < 3 * total_blocks {
        round += 1;
        let keys: Vec<u64> = (0..256).collect();
        let addrs = put(&mut ftl, &keys, round);
        first.get_or_insert(addrs[0]);
        holds(&mut ftl, addrs[255], 255, round);
        ftl.nameless_free(&addrs).unwrap();
        written += 256;
    }
    ftl.settle().unwrap();
    let s = ftl.stats();
    assert_eq!(s.nameless_live_blocks, 0);
    assert!(s.erases > 0, "no zone was reset");
    let first = first.unwrap();
    match nameless_error(ftl.nameless_read(first)) {
        NamelessError::Stale { addr, .. } | NamelessError::NotLive { addr } => {
            assert_eq!(addr, first)
        }
        other => panic!("{other:?}"),
    }
}
