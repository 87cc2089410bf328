//! The superblock: device identity, layout, and where the newest checkpoint is.
//!
//! Two copies live in zones 0 and 1. Each update appends one record (one
//! block, the 128-byte record then zeros) at the zone's write pointer; mount
//! takes the valid record with the highest generation over both zones.
//! Layout: docs/format.md, "Superblock".

use crate::backend::{Geometry, ZoneId};
pub use crate::codec::FormatError;
use crate::codec::{
    aligned, check_crc, get_bytes, get_u32, get_u64, is_erased, put_bytes, put_u32, put_u64,
    seal_crc, zero, zero_bytes,
};

const STRUCTURE: &str = "superblock";

/// "ZFTLSUPR".
pub const SUPERBLOCK_MAGIC: [u8; 8] = *b"ZFTLSUPR";
/// Superblock format version written by this build.
pub const SUPERBLOCK_VERSION: u32 = 1;
/// Superblock copies (zones `0..SUPER_ZONE_COUNT`).
pub const SUPER_ZONE_COUNT: u32 = 2;
/// Smallest number of metadata log zones: the log must be able to reset one
/// zone while another holds the newest checkpoint.
pub const MIN_META_ZONES: u32 = 2;
/// The smallest OOB that holds a tag (tag mode OOB needs it).
const OOB_TAG_BYTES: u32 = crate::tag::TAG_BYTES as u32;

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + 8;
const RECORD_BYTES_OFF: usize = VERSION_OFF + 4;
const GENERATION_OFF: usize = RECORD_BYTES_OFF + 4;
const UUID_OFF: usize = GENERATION_OFF + 8;
const UUID_BYTES: usize = 16;
const BLOCK_SIZE_OFF: usize = UUID_OFF + UUID_BYTES;
const ZONE_COUNT_OFF: usize = BLOCK_SIZE_OFF + 4;
const ZONE_CAPACITY_OFF: usize = ZONE_COUNT_OFF + 4;
const OOB_SIZE_OFF: usize = ZONE_CAPACITY_OFF + 8;
const WRITE_UNIT_OFF: usize = OOB_SIZE_OFF + 4;
const SUPER_ZONES_OFF: usize = WRITE_UNIT_OFF + 4;
const META_FIRST_OFF: usize = SUPER_ZONES_OFF + 4;
const META_COUNT_OFF: usize = META_FIRST_OFF + 4;
const TAG_MODE_OFF: usize = META_COUNT_OFF + 4;
const LOGICAL_BLOCKS_OFF: usize = TAG_MODE_OFF + 4;
const CKPT_LOG_SEQ_OFF: usize = LOGICAL_BLOCKS_OFF + 8;
const CKPT_ZONE_OFF: usize = CKPT_LOG_SEQ_OFF + 8;
const RESERVED_OFF: usize = CKPT_ZONE_OFF + 4;
const CKPT_OFFSET_OFF: usize = RESERVED_OFF + 4;
const FORMAT_TIME_SEQ_OFF: usize = CKPT_OFFSET_OFF + 8;
const FIELDS_END: usize = FORMAT_TIME_SEQ_OFF + 8;
/// Encoded record size (the CRC is its last 4 bytes); the block is zero-padded after it.
pub const SUPERBLOCK_RECORD_BYTES: usize = 128;
const CRC_OFF: usize = SUPERBLOCK_RECORD_BYTES - 4;

const _: () = assert!(FIELDS_END == 120 && FIELDS_END <= CRC_OFF);
const _: () = assert!(
    aligned(GENERATION_OFF, 8) && aligned(ZONE_CAPACITY_OFF, 8) && aligned(LOGICAL_BLOCKS_OFF, 8)
);
const _: () = assert!(CKPT_OFFSET_OFF == 104 && aligned(FORMAT_TIME_SEQ_OFF, 8));
const _: () = assert!(SUPERBLOCK_RECORD_BYTES <= 512);

/// Where the tags of data blocks live.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagMode {
    /// No usable OOB: HostWrite notes in the metadata log stand in for tags.
    InBand = 0,
    /// Tags in the first 32 bytes of each block's OOB.
    Oob = 1,
}

impl TagMode {
    pub fn code(self) -> u32 {
        self as u32
    }

    pub fn from_code(code: u32) -> Option<TagMode> {
        match code {
            0 => Some(TagMode::InBand),
            1 => Some(TagMode::Oob),
            _ => None,
        }
    }
}

/// One superblock record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// +1 per update; the highest valid generation wins at mount.
    pub generation: u64,
    /// Device identity, from the format seed ([`uuid_from_seed`]).
    pub uuid: [u8; 16],
    pub block_size_bytes: u32,
    pub zone_count: u32,
    pub zone_capacity_blocks: u64,
    pub oob_size_bytes: u32,
    pub write_unit_blocks: u32,
    /// Always [`SUPER_ZONE_COUNT`].
    pub super_zone_count: u32,
    pub meta_first_zone: ZoneId,
    pub meta_zone_count: u32,
    pub tag_mode: TagMode,
    /// Size of the logical address space (thin-provisioned).
    pub logical_blocks: u64,
    /// log_seq of chunk 0 of the newest complete checkpoint (its id).
    pub checkpoint_log_seq: u64,
    /// Where that chunk 0 is.
    pub checkpoint_zone: ZoneId,
    pub checkpoint_offset_blocks: u64,
    /// Reserved for a format timestamp in seq units; 0.
    pub format_time_seq: u64,
}

/// A device identity derived from the format seed (splitmix64, twice), so a
/// seeded simulation formats the same device every time.
pub fn uuid_from_seed(seed: u64) -> [u8; 16] {
    fn splitmix(x: &mut u64) -> u64 {
        *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    let mut state = seed;
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&splitmix(&mut state).to_le_bytes());
    out[8..].copy_from_slice(&splitmix(&mut state).to_le_bytes());
    out
}

fn range(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: STRUCTURE,
        field,
        value,
        rule,
    }
}

impl Superblock {
    /// Encodes into one block of `block_size` bytes, which must equal
    /// `self.block_size_bytes`. Panics (a bug) if the record is not valid;
    /// checks its own output by decoding it.
    pub fn encode(&self, block_size: usize) -> Vec<u8> {
        assert_eq!(
            block_size, self.block_size_bytes as usize,
            "superblock encoded for another block size"
        );
        let mut b = vec![0u8; block_size];
        put_bytes(&mut b, MAGIC_OFF, &SUPERBLOCK_MAGIC);
        put_u32(&mut b, VERSION_OFF, SUPERBLOCK_VERSION);
        put_u32(&mut b, RECORD_BYTES_OFF, SUPERBLOCK_RECORD_BYTES as u32);
        put_u64(&mut b, GENERATION_OFF, self.generation);
        put_bytes(&mut b, UUID_OFF, &self.uuid);
        put_u32(&mut b, BLOCK_SIZE_OFF, self.block_size_bytes);
        put_u32(&mut b, ZONE_COUNT_OFF, self.zone_count);
        put_u64(&mut b, ZONE_CAPACITY_OFF, self.zone_capacity_blocks);
        put_u32(&mut b, OOB_SIZE_OFF, self.oob_size_bytes);
        put_u32(&mut b, WRITE_UNIT_OFF, self.write_unit_blocks);
        put_u32(&mut b, SUPER_ZONES_OFF, self.super_zone_count);
        put_u32(&mut b, META_FIRST_OFF, self.meta_first_zone);
        put_u32(&mut b, META_COUNT_OFF, self.meta_zone_count);
        put_u32(&mut b, TAG_MODE_OFF, self.tag_mode.code());
        put_u64(&mut b, LOGICAL_BLOCKS_OFF, self.logical_blocks);
        put_u64(&mut b, CKPT_LOG_SEQ_OFF, self.checkpoint_log_seq);
        put_u32(&mut b, CKPT_ZONE_OFF, self.checkpoint_zone);
        put_u64(&mut b, CKPT_OFFSET_OFF, self.checkpoint_offset_blocks);
        put_u64(&mut b, FORMAT_TIME_SEQ_OFF, self.format_time_seq);
        seal_crc(&mut b, CRC_OFF);
        assert_eq!(
            Superblock::decode(&b).as_ref(),
            Ok(self),
            "superblock does not round-trip"
        );
        b
    }

    /// Decodes one whole superblock block (its length must be the recorded
    /// block size). [`FormatError::Erased`] when the block is all 0x00 or all
    /// 0xFF; [`FormatError::BadMagic`] when it is not a zftl superblock.
    pub fn decode(bytes: &[u8]) -> Result<Superblock, FormatError> {
        crate::codec::need(STRUCTURE, bytes, SUPERBLOCK_RECORD_BYTES)?;
        if is_erased(bytes) {
            return Err(FormatError::Erased {
                structure: STRUCTURE,
            });
        }
        crate::codec::check_magic_version(
            STRUCTURE,
            bytes,
            (MAGIC_OFF, SUPERBLOCK_MAGIC),
            (VERSION_OFF, SUPERBLOCK_VERSION),
        )?;
        let record_bytes = get_u32(bytes, RECORD_BYTES_OFF);
        if record_bytes as usize != SUPERBLOCK_RECORD_BYTES {
            return Err(FormatError::Length {
                structure: STRUCTURE,
                expected: SUPERBLOCK_RECORD_BYTES as u64,
                actual: u64::from(record_bytes),
            });
        }
        check_crc(STRUCTURE, bytes, CRC_OFF)?;
        zero(
            STRUCTURE,
            "reserved (offset 100)",
            u64::from(get_u32(bytes, RESERVED_OFF)),
        )?;
        zero_bytes(STRUCTURE, "record padding", &bytes[FIELDS_END..CRC_OFF])?;
        zero_bytes(
            STRUCTURE,
            "block padding",
            &bytes[SUPERBLOCK_RECORD_BYTES..],
        )?;
        let mode = get_u32(bytes, TAG_MODE_OFF);
        let sb = Superblock {
            generation: get_u64(bytes, GENERATION_OFF),
            uuid: get_bytes::<UUID_BYTES>(bytes, UUID_OFF),
            block_size_bytes: get_u32(bytes, BLOCK_SIZE_OFF),
            zone_count: get_u32(bytes, ZONE_COUNT_OFF),
            zone_capacity_blocks: get_u64(bytes, ZONE_CAPACITY_OFF),
            oob_size_bytes: get_u32(bytes, OOB_SIZE_OFF),
            write_unit_blocks: get_u32(bytes, WRITE_UNIT_OFF),
            super_zone_count: get_u32(bytes, SUPER_ZONES_OFF),
            meta_first_zone: get_u32(bytes, META_FIRST_OFF),
            meta_zone_count: get_u32(bytes, META_COUNT_OFF),
            tag_mode: TagMode::from_code(mode).ok_or(FormatError::UnknownTagMode { mode })?,
            logical_blocks: get_u64(bytes, LOGICAL_BLOCKS_OFF),
            checkpoint_log_seq: get_u64(bytes, CKPT_LOG_SEQ_OFF),
            checkpoint_zone: get_u32(bytes, CKPT_ZONE_OFF),
            checkpoint_offset_blocks: get_u64(bytes, CKPT_OFFSET_OFF),
            format_time_seq: get_u64(bytes, FORMAT_TIME_SEQ_OFF),
        };
        if bytes.len() as u64 != u64::from(sb.block_size_bytes) {
            return Err(FormatError::Length {
                structure: STRUCTURE,
                expected: u64::from(sb.block_size_bytes),
                actual: bytes.len() as u64,
            });
        }
        sb.check_fields()?;
        Ok(sb)
    }

    /// The relationships between fields that every valid record satisfies.
    fn check_fields(&self) -> Result<(), FormatError> {
        let bs = self.block_size_bytes;
        if !bs.is_power_of_two() || !(512..=65536).contains(&bs) {
            return Err(range(
                "block_size_bytes",
                bs.into(),
                "a power of two in 512..=65536",
            ));
        }
        let cap = self.zone_capacity_blocks;
        let wu = u64::from(self.write_unit_blocks);
        if cap == 0 || cap.checked_rem(wu) != Some(0) {
            return Err(range(
                "zone_capacity_blocks",
                cap,
                "a non-zero multiple of write_unit_blocks (>= 1)",
            ));
        }
        let physical = u64::from(self.zone_count).checked_mul(cap);
        if physical.is_none_or(|p| p >= u64::from(u32::MAX)) {
            return Err(range(
                "zone_capacity_blocks",
                cap,
                "zone_count * zone_capacity_blocks below 2^32 - 1",
            ));
        }
        if self.super_zone_count != SUPER_ZONE_COUNT {
            return Err(range(
                "super_zone_count",
                self.super_zone_count.into(),
                "exactly 2",
            ));
        }
        if self.meta_first_zone < self.super_zone_count {
            return Err(range(
                "meta_first_zone",
                self.meta_first_zone.into(),
                "after the superblock zones",
            ));
        }
        let meta_end = u64::from(self.meta_first_zone) + u64::from(self.meta_zone_count);
        if self.meta_zone_count < MIN_META_ZONES || meta_end >= u64::from(self.zone_count) {
            return Err(range(
                "meta_zone_count",
                self.meta_zone_count.into(),
                ">= 2, leaving at least one data zone",
            ));
        }
        if self.tag_mode == TagMode::Oob && self.oob_size_bytes < OOB_TAG_BYTES {
            return Err(range(
                "oob_size_bytes",
                self.oob_size_bytes.into(),
                "at least 32 bytes in tag mode OOB",
            ));
        }
        let max_logical = (u64::from(u32::MAX) + 1) * crate::checkpoint::LEAF_ENTRIES as u64;
        if self.logical_blocks == 0 || self.logical_blocks > max_logical {
            return Err(range(
                "logical_blocks",
                self.logical_blocks,
                "1 ..= 2^32 map leaves",
            ));
        }
        let z = u64::from(self.checkpoint_zone);
        if z < u64::from(self.meta_first_zone) || z >= meta_end {
            return Err(range("checkpoint_zone", z, "a metadata log zone"));
        }
        if self.checkpoint_offset_blocks >= cap {
            return Err(range(
                "checkpoint_offset_blocks",
                self.checkpoint_offset_blocks,
                "below zone_capacity_blocks",
            ));
        }
        Ok(())
    }

    /// Checks that the record describes `geometry`; a mismatch names the
    /// field and both values.
    pub fn validate_against(&self, geometry: &Geometry) -> Result<(), FormatError> {
        let fields: [(&'static str, u64, u64); 5] = [
            (
                "block_size_bytes",
                self.block_size_bytes.into(),
                geometry.block_size_bytes.into(),
            ),
            (
                "zone_count",
                self.zone_count.into(),
                geometry.zone_count.into(),
            ),
            (
                "zone_capacity_blocks",
                self.zone_capacity_blocks,
                geometry.zone_capacity_blocks,
            ),
            (
                "oob_size_bytes",
                self.oob_size_bytes.into(),
                geometry.oob_size_bytes.into(),
            ),
            (
                "write_unit_blocks",
                self.write_unit_blocks.into(),
                geometry.write_unit_blocks.into(),
            ),
        ];
        for (field, on_media, device) in fields {
            if on_media != device {
                return Err(FormatError::GeometryMismatch {
                    field,
                    on_media,
                    device,
                });
            }
        }
        Ok(())
    }

    /// Physical blocks of the device (`zone_count * zone_capacity_blocks`),
    /// the bound of every `Ppa`.
    pub fn physical_blocks(&self) -> u32 {
        u32::try_from(u64::from(self.zone_count) * self.zone_capacity_blocks)
            .expect("checked at decode")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn sample() -> Superblock {
        Superblock {
            generation: 3,
            uuid: uuid_from_seed(42),
            block_size_bytes: 4096,
            zone_count: 32,
            zone_capacity_blocks: 1024,
            oob_size_bytes: 64,
            write_unit_blocks: 4,
            super_zone_count: 2,
            meta_first_zone: 2,
            meta_zone_count: 4,
            tag_mode: TagMode::Oob,
            logical_blocks: 20_000,
            checkpoint_log_seq: 9,
            checkpoint_zone: 3,
            checkpoint_offset_blocks: 17,
            format_time_seq: 0,
        }
    }

    fn geometry() -> Geometry {
        Geometry {
            block_size_bytes: 4096,
            oob_size_bytes: 64,
            zone_count: 32,
            zone_size_blocks: 2048,
            zone_capacity_blocks: 1024,
            write_unit_blocks: 4,
            max_append_blocks: 64,
            max_transfer_blocks: 64,
            max_open_zones: 8,
            max_active_zones: 8,
            parallel_units: 4,
            zone_groups: 1,
            queue_depth: 32,
        }
    }

    prop_compose! {
        fn arb_superblock()(
            bs_shift in 9u32..=12,
            zone_count in 6u32..4096,
            wu in 1u32..=8,
            cap_units in 1u64..512,
            meta_zone_count in 2u32..4,
            oob in 0u32..128,
            in_band in any::<bool>(),
            generation in any::<u64>(),
            uuid in any::<[u8; 16]>(),
            logical_blocks in 1u64..(1 << 40),
            checkpoint_log_seq in any::<u64>(),
            z in any::<u32>(),
            off in any::<u64>(),
            format_time_seq in any::<u64>(),
        ) -> Superblock {
            let cap = cap_units * u64::from(wu);
            let tag_mode = if in_band || oob < 32 { TagMode::InBand } else { TagMode::Oob };
            Superblock {
                generation, uuid, block_size_bytes: 1 << bs_shift, zone_count,
                zone_capacity_blocks: cap, oob_size_bytes: oob, write_unit_blocks: wu,
                super_zone_count: 2, meta_first_zone: 2, meta_zone_count, tag_mode, logical_blocks,
                checkpoint_log_seq, checkpoint_zone: 2 + z % meta_zone_count,
                checkpoint_offset_blocks: off % cap, format_time_seq,
            }
        }
    }

    #[test]
    fn layout_is_documented() {
        let b = sample().encode(4096);
        assert_eq!(&b[..8], b"ZFTLSUPR");
        assert_eq!(get_u32(&b, 12), 128);
        assert_eq!(get_u32(&b, 96), 3);
        assert_eq!(get_u64(&b, 104), 17);
        assert_eq!(get_u32(&b, 124), crc32c::crc32c(&b[..124]));
        assert!(b[128..].iter().all(|&x| x == 0));
        assert_eq!(sample().physical_blocks(), 32 * 1024);
    }

    #[test]
    fn erased_and_foreign_blocks() {
        assert_eq!(
            Superblock::decode(&[0xFF; 4096]),
            Err(FormatError::Erased {
                structure: STRUCTURE
            })
        );
        let mut b = sample().encode(4096);
        b[0] = b'X';
        let err = Superblock::decode(&b).unwrap_err();
        assert!(matches!(err, FormatError::BadMagic { .. }));
        assert!(err.to_string().contains("not a zftl device"), "{err}");
    }

    #[test]
    fn newer_version_says_so() {
        let mut b = sample().encode(4096);
        put_u32(&mut b, VERSION_OFF, 2);
        seal_crc(&mut b, CRC_OFF);
        let err = Superblock::decode(&b).unwrap_err();
        assert_eq!(
            err,
            FormatError::NewerVersion {
                structure: STRUCTURE,
                found: 2,
                supported: 1
            }
        );
        assert!(err.to_string().contains("newer"));
    }

    #[test]
    fn geometry_mismatch_names_the_field() {
        let sb = sample();
        assert_eq!(sb.validate_against(&geometry()), Ok(()));
        let mut g = geometry();
        g.zone_capacity_blocks = 2048;
        let err = sb.validate_against(&g).unwrap_err();
        assert_eq!(
            err,
            FormatError::GeometryMismatch {
                field: "zone_capacity_blocks",
                on_media: 1024,
                device: 2048
            }
        );
        assert!(err
            .to_string()
            .contains("zone_capacity_blocks is 1024 on the media but 2048 on the device"));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let mut sb = sample();
        sb.block_size_bytes = 512;
        let b = sb.encode(512);
        for bit in 0..b.len() * 8 {
            let mut f = b.clone();
            f[bit / 8] ^= 1 << (bit % 8);
            assert!(Superblock::decode(&f).is_err(), "bit {bit} undetected");
        }
    }

    proptest! {
        #[test]
        fn round_trips(sb in arb_superblock()) {
            let b = sb.encode(sb.block_size_bytes as usize);
            prop_assert_eq!(Superblock::decode(&b), Ok(sb));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..600), sealed in any::<bool>()) {
            let mut b = bytes;
            if sealed && b.len() >= SUPERBLOCK_RECORD_BYTES {
                // Pass the magic, version, length and CRC gates to reach the field checks.
                put_bytes(&mut b, MAGIC_OFF, &SUPERBLOCK_MAGIC);
                put_u32(&mut b, VERSION_OFF, SUPERBLOCK_VERSION);
                put_u32(&mut b, RECORD_BYTES_OFF, SUPERBLOCK_RECORD_BYTES as u32);
                seal_crc(&mut b, CRC_OFF);
            }
            let _ = Superblock::decode(&b);
        }

        #[test]
        fn bit_flips_are_detected(sb in arb_superblock(), bit in any::<usize>()) {
            let mut b = sb.encode(sb.block_size_bytes as usize);
            let bit = bit % (b.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Superblock::decode(&b).is_err());
        }
    }
}
