//! Zone summaries: with tags in band, the last blocks of every data zone
//! list the LBA of each of the zone's data blocks (docs/format.md §zone
//! summary).
//!
//! GC must know which LBA each live block of a victim holds. With OOB tags
//! the block's tag says so; in band, keeping an LBA per physical block in
//! memory would cost 4 bytes per block. Instead the writer collects the
//! LBAs of the zone it fills and writes them after the zone's data, and GC
//! reads them back. A summary is only a hint: GC believes an entry only if
//! the L2P still maps that LBA to that block, and a zone without a valid
//! summary (closed early, torn by a power cut, damaged) is looked up by a
//! walk of the L2P instead. Recovery never reads summaries.

use crate::backend::ZoneId;

pub const SUMMARY_MAGIC: [u8; 4] = *b"ZFSM";
pub const SUMMARY_VERSION: u16 = 1;
/// Header bytes at the start of each summary block.
pub const SUMMARY_HEADER_BYTES: usize = 32;
/// An entry for a block that holds no data the summary can name (padding,
/// or written before a remount left the summary incomplete).
pub const NO_LBA: u32 = u32::MAX;

/// LBAs one summary block holds.
pub fn entries_per_block(block_size_bytes: usize) -> u64 {
    ((block_size_bytes - SUMMARY_HEADER_BYTES) / 4) as u64
}

/// Summary blocks at the end of a zone of `zone_capacity_blocks`: the
/// fewest `s` with `s × entries ≥ capacity − s`, rounded up to the write
/// unit (every write is whole write units). Blocks past the encoded ones
/// ([`encoded_blocks`]) are zeros.
pub fn summary_blocks(
    zone_capacity_blocks: u64,
    block_size_bytes: usize,
    write_unit_blocks: u64,
) -> u64 {
    let needed = zone_capacity_blocks.div_ceil(entries_per_block(block_size_bytes) + 1);
    needed.div_ceil(write_unit_blocks.max(1)) * write_unit_blocks.max(1)
}

/// Blocks [`encode`] produces for a zone of `data_blocks` data blocks.
pub fn encoded_blocks(data_blocks: u64, block_size_bytes: usize) -> u64 {
    data_blocks
        .div_ceil(entries_per_block(block_size_bytes))
        .max(1)
}

/// Why summary blocks were not believed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SummaryError {
    #[error("summary block {index}: no summary magic (zone closed before its summary)")]
    NoMagic { index: u64 },
    #[error("summary block {index}: version {version} (this build reads {SUMMARY_VERSION})")]
    Version { index: u64, version: u16 },
    #[error("summary block {index}: CRC32C {actual:#010x}, header says {stored:#010x}")]
    Crc {
        index: u64,
        stored: u32,
        actual: u32,
    },
    #[error("summary block {index}: {what} is {found}, expected {expected}")]
    Mismatch {
        index: u64,
        what: &'static str,
        found: u64,
        expected: u64,
    },
    #[error("summary: {got} bytes, expected {expected}")]
    Length { got: usize, expected: usize },
}

/// Encodes the summary of `zone`: `lbas[i]` is what data block `i` holds.
/// Returns `encoded_blocks(lbas.len())` blocks.
pub fn encode(zone: ZoneId, lbas: &[u32], block_size_bytes: usize) -> Vec<u8> {
    let per = entries_per_block(block_size_bytes) as usize;
    let blocks = encoded_blocks(lbas.len() as u64, block_size_bytes) as usize;
    let mut out = vec![0u8; blocks * block_size_bytes];
    for (index, block) in out.chunks_exact_mut(block_size_bytes).enumerate() {
        let first = index * per;
        let entries = &lbas[first.min(lbas.len())..(first + per).min(lbas.len())];
        block[0..4].copy_from_slice(&SUMMARY_MAGIC);
        block[4..6].copy_from_slice(&SUMMARY_VERSION.to_le_bytes());
        block[8..12].copy_from_slice(&zone.to_le_bytes());
        block[12..16].copy_from_slice(&(index as u32).to_le_bytes());
        block[16..20].copy_from_slice(&(first as u32).to_le_bytes());
        block[20..24].copy_from_slice(&(entries.len() as u32).to_le_bytes());
        block[24..28].copy_from_slice(&(lbas.len() as u32).to_le_bytes());
        for (slot, lba) in block[SUMMARY_HEADER_BYTES..]
            .chunks_exact_mut(4)
            .zip(entries)
        {
            slot.copy_from_slice(&lba.to_le_bytes());
        }
        let crc = crc32c::crc32c(block);
        block[28..32].copy_from_slice(&crc.to_le_bytes());
    }
    let decoded = decode(zone, lbas.len() as u64, &out, block_size_bytes);
    assert!(
        decoded.as_deref() == Ok(lbas),
        "summary encode/decode disagree"
    );
    out
}

/// Decodes the summary blocks of `zone` (a zone of `data_blocks` data
/// blocks): the LBA per data block. Refuses anything not written for
/// exactly this zone and size.
pub fn decode(
    zone: ZoneId,
    data_blocks: u64,
    bytes: &[u8],
    block_size_bytes: usize,
) -> Result<Box<[u32]>, SummaryError> {
    let per = entries_per_block(block_size_bytes);
    let blocks = encoded_blocks(data_blocks, block_size_bytes);
    let expected = blocks as usize * block_size_bytes;
    if bytes.len() != expected {
        return Err(SummaryError::Length {
            got: bytes.len(),
            expected,
        });
    }
    let mut lbas = Vec::with_capacity(data_blocks as usize);
    for (index, block) in (0u64..).zip(bytes.chunks_exact(block_size_bytes)) {
        let first = index * per;
        let count = data_blocks.saturating_sub(first).min(per);
        check_header(block, index, zone, first, count, data_blocks)?;
        let entries = &block[SUMMARY_HEADER_BYTES..SUMMARY_HEADER_BYTES + 4 * count as usize];
        lbas.extend(
            entries
                .chunks_exact(4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))),
        );
    }
    Ok(lbas.into_boxed_slice())
}

fn check_header(
    block: &[u8],
    index: u64,
    zone: ZoneId,
    first: u64,
    count: u64,
    data_blocks: u64,
) -> Result<(), SummaryError> {
    let u16_at = |at: usize| u16::from_le_bytes(block[at..at + 2].try_into().expect("2 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().expect("4 bytes"));
    if block[0..4] != SUMMARY_MAGIC {
        return Err(SummaryError::NoMagic { index });
    }
    if u16_at(4) != SUMMARY_VERSION {
        return Err(SummaryError::Version {
            index,
            version: u16_at(4),
        });
    }
    let stored = u32_at(28);
    let mut copy = block.to_vec();
    copy[28..32].fill(0);
    let actual = crc32c::crc32c(&copy);
    if stored != actual {
        return Err(SummaryError::Crc {
            index,
            stored,
            actual,
        });
    }
    let fields = [
        ("zone", u64::from(u32_at(8)), u64::from(zone)),
        ("block index", u64::from(u32_at(12)), index),
        ("first entry", u64::from(u32_at(16)), first),
        ("entry count", u64::from(u32_at(20)), count),
        ("data blocks", u64::from(u32_at(24)), data_blocks),
    ];
    for (what, found, expected) in fields {
        if found != expected {
            return Err(SummaryError::Mismatch {
                index,
                what,
                found,
                expected,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn sizes_leave_room_for_every_data_block() {
        assert_eq!(entries_per_block(4096), 1016);
        assert_eq!(summary_blocks(1024, 4096, 1), 2);
        assert_eq!(summary_blocks(1017, 4096, 1), 1);
        assert_eq!(summary_blocks(1018, 4096, 1), 2);
        assert_eq!(summary_blocks(1, 4096, 1), 1);
        assert_eq!(summary_blocks(1024, 4096, 4), 4, "whole write units");
        for cap in 1..5000u64 {
            let s = summary_blocks(cap, 512, 1);
            assert!(s * entries_per_block(512) >= cap - s, "cap {cap}");
            assert!(s == 1 || (s - 1) * entries_per_block(512) < cap - (s - 1));
            assert!(encoded_blocks(cap - s, 512) <= s, "cap {cap}");
            let aligned = summary_blocks(cap, 512, 4);
            assert!(aligned.is_multiple_of(4) && aligned >= s && aligned < s + 4);
        }
    }

    #[test]
    fn damage_is_refused() {
        let lbas: Vec<u32> = (0..2000).collect();
        let good = encode(7, &lbas, 4096);
        assert_eq!(good.len(), 2 * 4096);
        let mut bad = good.clone();
        bad[4096 + 100] ^= 1;
        assert!(matches!(
            decode(7, 2000, &bad, 4096),
            Err(SummaryError::Crc { index: 1, .. })
        ));
        assert!(matches!(
            decode(8, 2000, &good, 4096),
            Err(SummaryError::Mismatch { what: "zone", .. })
        ));
        assert!(matches!(
            decode(7, 1999, &good, 4096),
            Err(SummaryError::Mismatch { .. })
        ));
        assert!(matches!(
            decode(7, 2000, &vec![0; 8192], 4096),
            Err(SummaryError::NoMagic { index: 0 })
        ));
        assert!(matches!(
            decode(7, 2000, &good[..4096], 4096),
            Err(SummaryError::Length { .. })
        ));
    }

    proptest! {
        #[test]
        fn round_trips(lbas in proptest::collection::vec(any::<u32>(), 0..3000), bs in prop_oneof![Just(512usize), Just(4096)]) {
            let bytes = encode(3, &lbas, bs);
            prop_assert_eq!(&*decode(3, lbas.len() as u64, &bytes, bs).unwrap(), &lbas[..]);
        }
    }
}
