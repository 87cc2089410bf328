//! The store header: the first block of the store's logical range.
//!
//! ```text
//!  0  magic "zftl-kv\0"   8  layout version (u32)   12  value placement (u32: 1 nameless, 2 logical)
//! 16  buckets (u32)      20  block size (u32)       24  logical value blocks (u64)
//! 32  CRC-32C of bytes 0..32 (u32); the rest of the block zero
//! ```
//!
//! The buckets follow the header, then (logical placement) the value area.

use crate::error::KvError;

const MAGIC: [u8; 8] = *b"zftl-kv\0";
const LAYOUT_VERSION: u32 = 1;
const CRC_AT: usize = 32;

/// Where a store keeps its values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValuePlacement {
    /// In the physical segment, by nameless writes: the FTL keeps no map
    /// of them, the index holds their addresses.
    Nameless,
    /// In a range of `blocks` logical blocks after the buckets, through an
    /// allocator of the store's own: the index holds LBAs and the FTL maps
    /// each (what a store without nameless writes does).
    Logical {
        /// Blocks of the value area: at most this many keys.
        blocks: u64,
    },
}

/// The header's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub buckets: u32,
    pub block_size: u32,
    pub values: ValuePlacement,
}

impl Header {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; self.block_size as usize];
        let (code, blocks) = match self.values {
            ValuePlacement::Nameless => (1u32, 0u64),
            ValuePlacement::Logical { blocks } => (2, blocks),
        };
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&LAYOUT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&code.to_le_bytes());
        b[16..20].copy_from_slice(&self.buckets.to_le_bytes());
        b[20..24].copy_from_slice(&self.block_size.to_le_bytes());
        b[24..32].copy_from_slice(&blocks.to_le_bytes());
        let crc = crc32c::crc32c(&b[..CRC_AT]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The header in `block`, read from `lba`.
    pub fn decode(block: &[u8], lba: u64) -> Result<Header, KvError> {
        let bad = |reason: String| KvError::CorruptHeader { lba, reason };
        if block.iter().all(|&x| x == 0) {
            return Err(KvError::NotAStore { lba });
        }
        if block.len() < CRC_AT + 4 || block[0..8] != MAGIC {
            return Err(bad("no store magic".into()));
        }
        let u32_at = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().unwrap());
        let stored = u32_at(CRC_AT);
        let actual = crc32c::crc32c(&block[..CRC_AT]);
        if stored != actual || block[CRC_AT + 4..].iter().any(|&x| x != 0) {
            return Err(bad(format!(
                "CRC {actual:#010x}, header says {stored:#010x}"
            )));
        }
        if u32_at(8) != LAYOUT_VERSION {
            return Err(bad(format!("layout version {}", u32_at(8))));
        }
        let blocks = u64::from_le_bytes(block[24..32].try_into().unwrap());
        let values = match (u32_at(12), blocks) {
            (1, 0) => ValuePlacement::Nameless,
            (2, blocks) if blocks > 0 => ValuePlacement::Logical { blocks },
            (code, _) => return Err(bad(format!("value placement {code}, {blocks} blocks"))),
        };
        if u32_at(16) == 0 || u32_at(20) as usize != block.len() {
            return Err(bad(format!(
                "{} buckets of {} bytes",
                u32_at(16),
                u32_at(20)
            )));
        }
        Ok(Header {
            buckets: u32_at(16),
            block_size: u32_at(20),
            values,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_bit_flip() {
        for values in [
            ValuePlacement::Nameless,
            ValuePlacement::Logical { blocks: 9 },
        ] {
            let h = Header {
                buckets: 17,
                block_size: 4096,
                values,
            };
            let b = h.encode();
            assert_eq!(Header::decode(&b, 3).unwrap(), h);
            for bit in 0..b.len() * 8 {
                let mut bad = b.clone();
                bad[bit / 8] ^= 1 << (bit % 8);
                assert!(Header::decode(&bad, 3).is_err(), "bit {bit}");
            }
        }
        assert!(matches!(
            Header::decode(&[0; 4096], 3),
            Err(KvError::NotAStore { lba: 3 })
        ));
    }
}
