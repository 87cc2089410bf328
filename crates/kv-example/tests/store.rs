//! The store through the public API of `zftl` only: round trips of put,
//! get, delete and overwrite, reopen after a clean shutdown, bad input and
//! damage as typed errors, a full index, and the same store over a
//! threaded `Handle` and with its values in the logical segment.

use zftl::core::{Driver, FormatOptions, FtlConfig, IoError};
use zftl::handle::Handle;
use zftl::sim::{SimConfig, SimDevice};
use zftl_kv::{KvError, Store, StoreOptions, ValuePlacement, Volume, MAX_KEY_BYTES};

fn sim() -> SimConfig {
    SimConfig {
        channels: 2,
        luns_per_channel: 2,
        blocks_per_lun: 32,
        pages_per_block: 64,
        oob_size_bytes: 64,
        zone_width_luns: 1,
        max_append_blocks: 16,
        max_transfer_blocks: 32,
        ..SimConfig::small_for_tests()
    }
}

fn volume() -> Driver<SimDevice> {
    let dev = SimDevice::create_memory(sim()).unwrap();
    Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).unwrap()
}

fn options(buckets: u32, values: ValuePlacement) -> StoreOptions {
    StoreOptions {
        buckets,
        values,
        ..StoreOptions::default()
    }
}

/// The value of key `k`, version `v`: its length varies from 0 to a block.
fn value(k: u32, v: u32, block_size: usize) -> Vec<u8> {
    let len = (k as usize * 131 + v as usize * 17) % (block_size + 1);
    (0..len)
        .map(|i| (k ^ v.rotate_left(8)).wrapping_add(i as u32) as u8)
        .collect()
}

fn key(k: u32) -> Vec<u8> {
    // Distinct keys of lengths from 4 bytes to the longest allowed.
    let mut key = k.to_le_bytes().to_vec();
    key.resize(4 + (k as usize * 7) % (MAX_KEY_BYTES - 3), b'.');
    key
}

/// Puts, overwrites and deletes on `store` with 3 buckets (probing past
/// full ones), checked against a plain map, then again after a reopen.
fn round_trips<V: Volume>(mut store: Store<V>, reopen: impl Fn(V) -> Store<V>) {
    let bs = 4096;
    let keys = 120u32; // 3 buckets of 46: most keys probe past their home
    let mut model = std::collections::BTreeMap::new();
    for k in 0..keys {
        store.put(&key(k), &value(k, 1, bs)).unwrap();
        model.insert(k, value(k, 1, bs));
    }
    for k in (0..keys).step_by(3) {
        store.put(&key(k), &value(k, 2, bs)).unwrap();
        model.insert(k, value(k, 2, bs));
    }
    for k in (0..keys).step_by(5) {
        assert!(store.delete(&key(k)).unwrap(), "key {k} was there");
        model.remove(&k);
    }
    assert!(!store.delete(&key(0)).unwrap(), "deleted twice");
    // Keys deleted from full buckets make room; new keys fill it again.
    for k in keys..keys + 10 {
        store.put(&key(k), &value(k, 1, bs)).unwrap();
        model.insert(k, value(k, 1, bs));
    }
    let check = |store: &mut Store<V>| {
        assert_eq!(store.len(), model.len());
        for k in 0..keys + 20 {
            assert_eq!(
                store.get(&key(k)).unwrap().as_ref(),
                model.get(&k),
                "key {k}"
            );
        }
    };
    check(&mut store);
    store.sync().unwrap();
    check(&mut store);
    let mut store = reopen(store.close().unwrap());
    check(&mut store);
}

#[test]
fn puts_gets_deletes_and_overwrites_round_trip_and_survive_a_reopen() {
    let store = Store::create(volume(), 0, options(3, ValuePlacement::Nameless)).unwrap();
    round_trips(store, |v: Driver<SimDevice>| {
        let dev = v.shutdown().unwrap();
        let v = Driver::mount(dev, FtlConfig::default()).unwrap();
        Store::open(v, 0, 64).unwrap()
    });
}

#[test]
fn the_same_store_over_a_threaded_handle_and_with_logical_values() {
    let handle = Handle::spawn(volume());
    let store = Store::create(handle, 10, options(3, ValuePlacement::Nameless)).unwrap();
    round_trips(store, |h: Handle<SimDevice>| {
        Store::open(h, 10, 64).unwrap()
    });
    let logical = ValuePlacement::Logical { blocks: 300 };
    let store = Store::create(volume(), 0, options(3, logical)).unwrap();
    round_trips(store, |v: Driver<SimDevice>| {
        let dev = v.shutdown().unwrap();
        let v = Driver::mount(dev, FtlConfig::default()).unwrap();
        Store::open(v, 0, 64).unwrap()
    });
}

#[test]
fn overwrites_free_at_once_and_deletes_at_the_sync() {
    let mut store = Store::create(volume(), 0, options(4, ValuePlacement::Nameless)).unwrap();
    let live = |s: &mut Store<Driver<SimDevice>>| s.volume_mut().stats().nameless_live_blocks;
    for v in 1..=5 {
        store.put(b"k", &value(1, v, 4096)).unwrap();
        assert_eq!(
            live(&mut store),
            1,
            "an overwrite frees the value it replaces"
        );
    }
    store.put(b"gone", b"x").unwrap();
    store.delete(b"gone").unwrap();
    assert_eq!(
        live(&mut store),
        2,
        "the delete's tombstone waits for a sync"
    );
    store.sync().unwrap();
    assert_eq!(live(&mut store), 1, "the sync freed the tombstone");
    // A full list of tombstones syncs by itself.
    let opts = StoreOptions {
        max_replaced: 3,
        ..options(4, ValuePlacement::Nameless)
    };
    let mut store = Store::create(volume(), 0, opts).unwrap();
    for v in 1..=10 {
        store.put(b"k", &value(1, v, 4096)).unwrap();
        store.delete(b"k").unwrap();
        assert!(live(&mut store) <= 3, "at most 3 tombstones wait");
    }
    store.sync().unwrap();
    assert_eq!(live(&mut store), 0);
}

#[test]
fn bad_input_gets_typed_errors_and_changes_nothing() {
    let mut store = Store::create(volume(), 0, options(2, ValuePlacement::Nameless)).unwrap();
    store.put(b"k", b"v").unwrap();
    let long = vec![b'x'; MAX_KEY_BYTES + 1];
    assert!(matches!(
        store.put(&long, b"v"),
        Err(KvError::KeyTooLong {
            len_bytes: 65,
            max_bytes: 64
        })
    ));
    assert!(matches!(store.get(&long), Err(KvError::KeyTooLong { .. })));
    assert!(matches!(
        store.delete(&long),
        Err(KvError::KeyTooLong { .. })
    ));
    assert!(matches!(
        store.put(b"k", &vec![0; 4097]),
        Err(KvError::ValueTooLarge {
            len_bytes: 4097,
            max_bytes: 4096
        })
    ));
    assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
    // The empty key and the empty value are keys and values like others.
    store.put(b"", b"").unwrap();
    assert_eq!(store.get(b"").unwrap(), Some(Vec::new()));
    // A layout past the volume, or of nothing.
    let too_many = options(u32::MAX, ValuePlacement::Nameless);
    assert!(matches!(
        Store::create(volume(), 0, too_many),
        Err(KvError::Layout(_))
    ));
    assert!(matches!(
        Store::create(volume(), 0, options(0, ValuePlacement::Nameless)),
        Err(KvError::Layout(_))
    ));
    // No store where none was created.
    assert!(matches!(
        Store::open(volume(), 0, 64),
        Err(KvError::NotAStore { lba: 0 })
    ));
    // A volume without the physical segment (tags in an OOB with no room
    // for the md after them) answers the first put with the FTL's typed
    // error.
    let small_oob = SimConfig {
        oob_size_bytes: 32,
        ..sim()
    };
    let dev = SimDevice::create_memory(small_oob).unwrap();
    let no_segment = Driver::format(dev, &FormatOptions::default(), FtlConfig::default()).unwrap();
    let mut store = Store::create(no_segment, 0, options(2, ValuePlacement::Nameless)).unwrap();
    assert!(matches!(
        store.put(b"k", b"v"),
        Err(KvError::Io(IoError::Nameless(_)))
    ));
    assert_eq!(store.get(b"k").unwrap(), None);
}

#[test]
fn a_full_index_and_a_full_value_area_are_errors_not_growth() {
    let mut store = Store::create(volume(), 0, options(2, ValuePlacement::Nameless)).unwrap();
    let capacity = store.capacity() as u32;
    assert_eq!(capacity, 92);
    for k in 0..capacity {
        store.put(&key(k), b"v").unwrap();
    }
    assert!(matches!(
        store.put(&key(capacity), b"v"),
        Err(KvError::IndexFull {
            buckets: 2,
            entries_per_bucket: 46
        })
    ));
    // Replacing a key still works; a delete makes room.
    store.put(&key(7), b"w").unwrap();
    store.delete(&key(8)).unwrap();
    store.put(&key(capacity), b"v").unwrap();
    assert_eq!(store.get(&key(7)).unwrap(), Some(b"w".to_vec()));
    assert_eq!(store.get(&key(capacity)).unwrap(), Some(b"v".to_vec()));
    let logical = ValuePlacement::Logical { blocks: 4 };
    let mut store = Store::create(volume(), 0, options(2, logical)).unwrap();
    for k in 0..4 {
        store.put(&key(k), b"v").unwrap();
    }
    // A replace needs a new block before the old one is freed.
    assert!(matches!(
        store.put(&key(0), b"w"),
        Err(KvError::ValueAreaFull { blocks: 4 })
    ));
    store.delete(&key(1)).unwrap();
    store.sync().unwrap();
    store.put(&key(0), b"w").unwrap();
    assert_eq!(store.get(&key(0)).unwrap(), Some(b"w".to_vec()));
}

#[test]
fn damaged_buckets_and_headers_are_found_at_open() {
    let mut store = Store::create(volume(), 0, options(2, ValuePlacement::Nameless)).unwrap();
    store.put(b"k", b"v").unwrap();
    let mut v = store.close().unwrap();
    // Flip a byte of each bucket in turn, then of the header.
    for lba in [1u64, 2, 0] {
        let good = v.read(lba, 1).unwrap();
        let mut bad = good.clone();
        bad[40] ^= 0x10;
        v.write(lba, &bad).unwrap();
        let Err(e) = Store::open(v, 0, 64) else {
            panic!("LBA {lba} damaged, the store opened");
        };
        match (lba, &e) {
            (0, KvError::CorruptHeader { lba: 0, .. }) => {}
            (1 | 2, KvError::CorruptBucket { lba: at, .. }) if *at == lba => {}
            _ => panic!("LBA {lba}: {e}"),
        }
        // `open` gave the volume up with the error: format a fresh one with
        // the same store to go on.
        let mut store = Store::create(volume(), 0, options(2, ValuePlacement::Nameless)).unwrap();
        store.put(b"k", b"v").unwrap();
        v = store.close().unwrap();
    }
    // A value block that is not the entry's: copy one key's bucket over
    // another store whose entry then names a block of another key.
    let mut a = Store::create(volume(), 0, options(1, ValuePlacement::Nameless)).unwrap();
    a.put(b"one", b"1").unwrap();
    a.put(b"two", b"2").unwrap();
    let mut v = a.close().unwrap();
    let mut bucket = v.read(1, 1).unwrap();
    // Swap the two entries' addresses (entries at 32 and 120, address at +8).
    let (x, y) = (32 + 8, 120 + 8);
    let ax: [u8; 8] = bucket[x..x + 8].try_into().unwrap();
    let ay: [u8; 8] = bucket[y..y + 8].try_into().unwrap();
    bucket[x..x + 8].copy_from_slice(&ay);
    bucket[y..y + 8].copy_from_slice(&ax);
    bucket[28..32].fill(0);
    let crc = crc32c(&bucket);
    bucket[28..32].copy_from_slice(&crc.to_le_bytes());
    v.write(1, &bucket).unwrap();
    let mut a = Store::open(v, 0, 64).unwrap();
    assert!(matches!(a.get(b"one"), Err(KvError::ValueMismatch { .. })));
}

/// CRC-32C (Castagnoli), bitwise: the tests rebuild a bucket's checksum.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82F6_3B78 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// The home bucket of `key` among `buckets` (the store's rule: the high
/// half of the key's hash, modulo the count).
fn home(key: &[u8], buckets: u32) -> u32 {
    ((zftl_kv::key_hash(key) >> 64) as u64 % u64::from(buckets)) as u32
}

#[test]
fn a_key_a_cut_left_in_two_buckets_keeps_its_newer_entry() {
    // Bucket 0 full of keys whose home it is, then the key deleted and
    // put again after another key took its slot: the new entry goes to
    // bucket 1. The old bucket 0 (as a cut can leave it, with the delete
    // lost and the later put kept) is written back under the store.
    let mut store = Store::create(volume(), 0, options(2, ValuePlacement::Nameless)).unwrap();
    let homed: Vec<Vec<u8>> = (0u32..)
        .map(key)
        .filter(|k| home(k, 2) == 0)
        .take(47)
        .collect();
    let (k, rest) = homed.split_first().unwrap();
    store.put(k, b"old").unwrap();
    for other in &rest[..45] {
        store.put(other, b"x").unwrap();
    }
    store.sync().unwrap();
    let old_bucket = store.volume_mut().read(1, 1).unwrap();
    store.delete(k).unwrap();
    store.put(&rest[45], b"x").unwrap();
    store.put(k, b"new").unwrap();
    let mut v = store.into_volume();
    v.flush().unwrap();
    v.write(1, &old_bucket).unwrap();
    // A remount: its hand-over gives back what was written since the sync.
    let v = Driver::mount(v.shutdown().unwrap(), FtlConfig::default()).unwrap();
    // Live: the 45, the delete's tombstone, the lost put's value, "new".
    assert_eq!(v.stats().nameless_live_blocks, 48);
    let mut store = Store::open(v, 0, 64).unwrap();
    assert_eq!(store.get(k).unwrap(), Some(b"new".to_vec()));
    assert_eq!(
        store.len(),
        46,
        "the key once, the other 45 of the old bucket"
    );
    assert_eq!(
        store.volume_mut().stats().nameless_live_blocks,
        46,
        "the hand-over freed the tombstone and the value no bucket names"
    );
    let mut store = Store::open(store.close().unwrap(), 0, 64).unwrap();
    assert_eq!(store.get(k).unwrap(), Some(b"new".to_vec()));
}

#[test]
fn the_hand_over_repoints_newer_values_and_frees_older_blocks() {
    let remount =
        |v: Driver<SimDevice>| Driver::mount(v.shutdown().unwrap(), FtlConfig::default()).unwrap();
    let live = |v: &mut Driver<SimDevice>| v.stats().nameless_live_blocks;
    // One bucket: every key's entry is in block 1.
    let mut store = Store::create(volume(), 0, options(1, ValuePlacement::Nameless)).unwrap();
    for k in [&b"a"[..], b"b", b"c"] {
        store.put(k, &[k, b"1"].concat()).unwrap();
    }
    store.sync().unwrap();
    let synced = store.volume_mut().read(1, 1).unwrap();
    store.put(b"a", b"a2").unwrap(); // a newer value of a synced key
    store.put(b"n", b"n1").unwrap(); // a new key
    assert!(store.delete(b"b").unwrap()); // a tombstone over b1
                                          // The bucket as a cut that kept the value blocks and lost its write
                                          // leaves it: it names a1 and b1, both freed by the overwrites.
    let mut v = store.into_volume();
    v.write(1, &synced).unwrap();
    let mut v = remount(v);
    assert_eq!(live(&mut v), 4, "c1, a2, n1 and the tombstone");
    let mut store = Store::open(v, 0, 64).unwrap();
    assert_eq!(store.get(b"a").unwrap(), Some(b"a2".to_vec()), "repointed");
    assert_eq!(store.get(b"b").unwrap(), None, "the tombstone dropped b");
    assert_eq!(store.get(b"c").unwrap(), Some(b"c1".to_vec()));
    // The md holds the key's hash, not the key: no entry can be made.
    assert_eq!(store.get(b"n").unwrap(), None, "freed");
    assert_eq!(store.len(), 2);
    assert_eq!(live(store.volume_mut()), 2, "n1 and the tombstone freed");
    // An older block: a tombstone its key's new entry outdates is freed,
    // the entry stays.
    assert!(store.delete(b"c").unwrap());
    store.put(b"c", b"c2").unwrap();
    let mut v = remount(store.into_volume());
    assert_eq!(live(&mut v), 3, "a2, the tombstone and c2");
    let handed_over = v.stats().nameless_handover_blocks;
    let mut store = Store::open(v, 0, 64).unwrap();
    assert_eq!(
        store.volume_mut().stats().nameless_handover_blocks - handed_over,
        2,
        "the tombstone and c2 (recorded: it stays)"
    );
    assert_eq!(store.get(b"c").unwrap(), Some(b"c2".to_vec()));
    assert_eq!(live(store.volume_mut()), 2);
    // The open committed: nothing comes again, and the repair is durable.
    let v = remount(store.into_volume());
    let handed_over = v.stats().nameless_handover_blocks;
    let mut store = Store::open(v, 0, 64).unwrap();
    assert_eq!(
        store.volume_mut().stats().nameless_handover_blocks,
        handed_over
    );
    assert_eq!(store.get(b"a").unwrap(), Some(b"a2".to_vec()));
    assert_eq!(store.get(b"b").unwrap(), None);
    assert_eq!(live(store.volume_mut()), 2);
}
