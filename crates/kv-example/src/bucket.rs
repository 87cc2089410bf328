//! Index buckets: one logical block each, a fixed header and fixed-size
//! entries, CRC-32C over the block. Layout (little-endian):
//!
//! ```text
//! header (32 bytes)
//!   0  magic "ZKVB"          4  layout version (u16)   6  entry count (u16)
//!   8  bucket index (u32)   12  zero (4 bytes)        16  highest version (u64)
//!  24  zero (4 bytes)       28  CRC-32C of the block with these 4 bytes zero
//! entries from byte 32, 88 bytes each
//!   0  version (u64)         8  value address (u64)   16  value length (u32)
//!  20  key length (u8)      21  zero (3 bytes)        24  key, zero padded (64)
//! ```
//!
//! A block of zeros is an empty bucket (never written). The highest
//! version ever written into the bucket survives deletes, so a reopened
//! store never hands out a version twice.

use crate::hash::key_hash;

/// Longest key, in bytes.
pub const MAX_KEY_BYTES: usize = 64;
const MAGIC: [u8; 4] = *b"ZKVB";
const LAYOUT_VERSION: u16 = 1;
pub const HEADER_BYTES: usize = 32;
pub const ENTRY_BYTES: usize = 88;
const CRC_AT: usize = 28;
const KEY_AT: usize = 24;

/// One key's entry: where its value is and which version it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub key: Vec<u8>,
    pub version: u64,
    /// A `NamelessAddr` (nameless values) or an LBA (logical values).
    pub addr: u64,
    pub value_len: u32,
}

/// A bucket as the store holds it in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bucket {
    pub entries: Vec<Entry>,
    /// Entries whose home bucket comes before this one and that sit after
    /// it (linear probing over buckets): a lookup goes on past this bucket
    /// only while it is above 0, so deletes need no tombstones. In memory
    /// only: counted again from the entries at open, so no write order
    /// between buckets matters.
    pub probes_past: u32,
    pub max_version: u64,
}

/// Entries that fit a bucket of `block_size` bytes.
pub fn entries_per_bucket(block_size: usize) -> usize {
    block_size.saturating_sub(HEADER_BYTES) / ENTRY_BYTES
}

impl Bucket {
    /// The slot holding `key`.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        self.entries.iter().position(|e| e.key == key)
    }

    /// The bucket as block `index` of `block_size` bytes.
    pub fn encode(&self, index: u32, block_size: usize) -> Vec<u8> {
        assert!(self.entries.len() <= entries_per_bucket(block_size));
        let mut b = vec![0u8; block_size];
        b[0..4].copy_from_slice(&MAGIC);
        b[4..6].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        let count = u16::try_from(self.entries.len()).expect("entries fit u16");
        b[6..8].copy_from_slice(&count.to_le_bytes());
        b[8..12].copy_from_slice(&index.to_le_bytes());
        b[16..24].copy_from_slice(&self.max_version.to_le_bytes());
        for (i, e) in self.entries.iter().enumerate() {
            assert!(e.key.len() <= MAX_KEY_BYTES && e.version <= self.max_version);
            let o = &mut b[HEADER_BYTES + i * ENTRY_BYTES..][..ENTRY_BYTES];
            o[0..8].copy_from_slice(&e.version.to_le_bytes());
            o[8..16].copy_from_slice(&e.addr.to_le_bytes());
            o[16..20].copy_from_slice(&e.value_len.to_le_bytes());
            o[20] = e.key.len() as u8;
            o[KEY_AT..KEY_AT + e.key.len()].copy_from_slice(&e.key);
        }
        let crc = crc32c::crc32c(&b);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Block `index` read back; `Err` says what is wrong with it. Its
    /// `probes_past` is 0: the store counts it.
    pub fn decode(block: &[u8], index: u32, max_value_len: u32) -> Result<Bucket, String> {
        if block.iter().all(|&x| x == 0) {
            return Ok(Bucket::default());
        }
        if block.len() < HEADER_BYTES {
            return Err(format!("a block of {} bytes", block.len()));
        }
        if block[0..4] != MAGIC {
            return Err(format!("magic {:02x?}", &block[0..4]));
        }
        let stored = u32::from_le_bytes(block[CRC_AT..CRC_AT + 4].try_into().unwrap());
        let mut zeroed = block.to_vec();
        zeroed[CRC_AT..CRC_AT + 4].fill(0);
        let actual = crc32c::crc32c(&zeroed);
        if stored != actual {
            return Err(format!("CRC {actual:#010x}, header says {stored:#010x}"));
        }
        let u16_at = |at: usize| u16::from_le_bytes(block[at..at + 2].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(block[at..at + 8].try_into().unwrap());
        if u16_at(4) != LAYOUT_VERSION {
            return Err(format!("layout version {}", u16_at(4)));
        }
        if u32_at(8) != index {
            return Err(format!("holds bucket {}", u32_at(8)));
        }
        let count = usize::from(u16_at(6));
        if count > entries_per_bucket(block.len()) || u32_at(12) != 0 {
            return Err(format!("{count} entries, reserved {:#x}", u32_at(12)));
        }
        let max_version = u64_at(16);
        let mut entries = Vec::with_capacity(count);
        for i in 0..count {
            let at = HEADER_BYTES + i * ENTRY_BYTES;
            let e = decode_entry(&block[at..at + ENTRY_BYTES], max_version, max_value_len)
                .map_err(|why| format!("entry {i}: {why}"))?;
            if entries.iter().any(|o: &Entry| o.key == e.key) {
                return Err(format!("entry {i}: a key twice"));
            }
            entries.push(e);
        }
        Ok(Bucket {
            entries,
            probes_past: 0,
            max_version,
        })
    }
}

fn decode_entry(o: &[u8], max_version: u64, max_value_len: u32) -> Result<Entry, String> {
    let version = u64::from_le_bytes(o[0..8].try_into().unwrap());
    let value_len = u32::from_le_bytes(o[16..20].try_into().unwrap());
    let key_len = usize::from(o[20]);
    if version == 0 || version > max_version {
        return Err(format!(
            "version {version} (bucket's highest {max_version})"
        ));
    }
    if value_len > max_value_len {
        return Err(format!("value length {value_len}"));
    }
    if key_len > MAX_KEY_BYTES {
        return Err(format!("key length {key_len}"));
    }
    Ok(Entry {
        key: o[KEY_AT..KEY_AT + key_len].to_vec(),
        version,
        addr: u64::from_le_bytes(o[8..16].try_into().unwrap()),
        value_len,
    })
}

/// The metadata of a value block (32 bytes): key hash (16), version (8),
/// value length (4), zero (4). What the FTL hands back with the block, and
/// with a migration or hand-over event.
pub const VALUE_MD_BYTES: usize = 32;

/// The value length in the metadata of a *tombstone*: the block of zeros
/// a delete writes over the value it drops, so that a cut which kept the
/// free and lost the bucket hands the delete back (a value is at most a
/// block, far below it).
pub const TOMBSTONE_LEN: u32 = u32::MAX;

/// The metadata of `key`'s value `version` of `value_len` bytes.
pub fn value_md(key: &[u8], version: u64, value_len: u32) -> [u8; VALUE_MD_BYTES] {
    let mut md = [0u8; VALUE_MD_BYTES];
    md[0..16].copy_from_slice(&key_hash(key).to_le_bytes());
    md[16..24].copy_from_slice(&version.to_le_bytes());
    md[24..28].copy_from_slice(&value_len.to_le_bytes());
    md
}

/// `(key hash, version, value length)` of value metadata.
pub fn decode_value_md(md: &[u8]) -> Result<(u128, u64, u32), String> {
    if md.len() != VALUE_MD_BYTES || md[28..32] != [0; 4] {
        return Err(format!("metadata {md:02x?}"));
    }
    Ok((
        u128::from_le_bytes(md[0..16].try_into().unwrap()),
        u64::from_le_bytes(md[16..24].try_into().unwrap()),
        u32::from_le_bytes(md[24..28].try_into().unwrap()),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Bucket {
        Bucket {
            entries: (0..entries_per_bucket(4096) as u64)
                .map(|i| Entry {
                    key: vec![i as u8; (i as usize) % (MAX_KEY_BYTES + 1)],
                    version: i + 1,
                    addr: i * 77,
                    value_len: (i * 31 % 4097) as u32,
                })
                .collect(),
            probes_past: 0,
            max_version: 1000,
        }
    }

    #[test]
    fn round_trip_and_the_empty_block() {
        let b = sample();
        assert_eq!(b.entries.len(), 46);
        assert_eq!(Bucket::decode(&b.encode(5, 4096), 5, 4096), Ok(b));
        assert_eq!(Bucket::decode(&[0; 4096], 9, 4096), Ok(Bucket::default()));
    }

    #[test]
    fn every_bit_flip_is_caught() {
        let block = sample().encode(5, 4096);
        for bit in 0..block.len() * 8 {
            let mut bad = block.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Bucket::decode(&bad, 5, 4096).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn a_bucket_in_the_wrong_place_or_arbitrary_bytes_are_errors() {
        let block = sample().encode(5, 4096);
        assert!(Bucket::decode(&block, 6, 4096).is_err());
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..200 {
            let junk: Vec<u8> = (0..4096)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            assert!(Bucket::decode(&junk, 0, 4096).is_err());
        }
    }

    #[test]
    fn value_metadata_round_trips() {
        let md = value_md(b"key", 7, 100);
        assert_eq!(decode_value_md(&md), Ok((key_hash(b"key"), 7, 100)));
        let mut bad = md;
        bad[30] = 1;
        assert!(decode_value_md(&bad).is_err());
    }
}
