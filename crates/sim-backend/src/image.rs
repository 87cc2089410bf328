//! The image file's header and region layout (docs/format.md, part 2).
//!
//! Encode and decode live side by side and `encode_header` asserts that its
//! output decodes back to the same header, so the two cannot drift apart.

use zftl_core::ZoneState;

use crate::config::{Faults, SimConfig};
use crate::error::SimError;

/// The first 8 bytes of an image file.
pub const MAGIC: [u8; 8] = *b"ZFTLSIM\0";
/// The image format version this build writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the header at the start of the file.
pub const HEADER_BYTES: u64 = 4096;
/// Every region starts on this boundary (page-cache and O_DIRECT friendly).
pub const REGION_ALIGN_BYTES: u64 = 4096;
/// Bytes of one erase-block table entry.
pub const ERASE_ENTRY_BYTES: u64 = 8;
/// Bytes of one zone table entry.
pub const ZONE_ENTRY_BYTES: u64 = 16;
const CRC_OFFSET: usize = 4092;
/// Bytes 144..4092 of the header are reserved and must be zero.
const FIELDS_END: usize = 144;

/// Erase-block table flag: bad since creation.
pub const EB_FACTORY_BAD: u8 = 1;
/// Erase-block table flag: went bad in use (program or erase failure).
pub const EB_GROWN_BAD: u8 = 2;

/// Page-state table values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum PageState {
    /// Erased (reads as 0xFF). 0 so a sparse, zero-filled table is all-erased.
    Erased = 0,
    /// Holds data.
    Programmed = 1,
    /// Program interrupted by a power cut: reads fail until the block is erased.
    Torn = 2,
    /// Program failed: reads fail until the block is erased.
    Failed = 3,
}

impl PageState {
    /// The state a table byte stores; `None` for an unknown value.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(PageState::Erased),
            1 => Some(PageState::Programmed),
            2 => Some(PageState::Torn),
            3 => Some(PageState::Failed),
            _ => None,
        }
    }
}

/// Zone state as stored in the zone table.
pub fn zone_state_to_byte(s: ZoneState) -> u8 {
    match s {
        ZoneState::Empty => 0,
        ZoneState::ImplicitlyOpen => 1,
        ZoneState::ExplicitlyOpen => 2,
        ZoneState::Closed => 3,
        ZoneState::Full => 4,
        ZoneState::ReadOnly => 5,
        ZoneState::Offline => 6,
    }
}

/// The zone state a zone table byte stores; `None` for an unknown value.
pub fn zone_state_from_byte(b: u8) -> Option<ZoneState> {
    Some(match b {
        0 => ZoneState::Empty,
        1 => ZoneState::ImplicitlyOpen,
        2 => ZoneState::ExplicitlyOpen,
        3 => ZoneState::Closed,
        4 => ZoneState::Full,
        5 => ZoneState::ReadOnly,
        6 => ZoneState::Offline,
        _ => return None,
    })
}

/// Byte offsets of the image regions, all derived from the media sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImageLayout {
    /// Erase-block table: an erase count and flags per erase block.
    pub erase_table_offset: u64,
    /// Zone table: state and write pointer per zone.
    pub zone_table_offset: u64,
    /// Page-state table: one byte per page.
    pub page_state_offset: u64,
    /// OOB bytes of every page.
    pub oob_offset: u64,
    /// Data bytes of every page.
    pub data_offset: u64,
    /// The whole file.
    pub image_size_bytes: u64,
}

fn align_up(n: u64) -> u64 {
    n.div_ceil(REGION_ALIGN_BYTES) * REGION_ALIGN_BYTES
}

impl ImageLayout {
    /// Offsets for a validated config (sizes are bounded, so nothing overflows).
    pub fn for_config(cfg: &SimConfig) -> Self {
        let erase_blocks = cfg.erase_block_count();
        let zones = erase_blocks / u64::from(cfg.zone_width_luns);
        let pages = cfg.page_count();
        let erase_table_offset = HEADER_BYTES;
        let zone_table_offset = erase_table_offset + align_up(erase_blocks * ERASE_ENTRY_BYTES);
        let page_state_offset = zone_table_offset + align_up(zones * ZONE_ENTRY_BYTES);
        let oob_offset = page_state_offset + align_up(pages);
        let data_offset = oob_offset + align_up(pages * u64::from(cfg.oob_size_bytes));
        let image_size_bytes = data_offset + pages * u64::from(cfg.page_size_bytes);
        ImageLayout {
            erase_table_offset,
            zone_table_offset,
            page_state_offset,
            oob_offset,
            data_offset,
            image_size_bytes,
        }
    }
}

/// What the header records: the media config (run-time fields zeroed, except
/// `faults.seed`, which chose the factory bad blocks) and the region layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageHeader {
    /// The media config.
    pub media: SimConfig,
    /// Where each region is.
    pub layout: ImageLayout,
}

impl ImageHeader {
    /// The header for a new image of `cfg` (which must be valid).
    pub fn new(cfg: &SimConfig) -> Self {
        ImageHeader {
            media: media_only(cfg),
            layout: ImageLayout::for_config(cfg),
        }
    }
}

/// `cfg` with the fields an image does not store reset to their defaults.
pub fn media_only(cfg: &SimConfig) -> SimConfig {
    SimConfig {
        timing: None,
        faults: Faults {
            seed: cfg.faults.seed,
            ..Faults::default()
        },
        ..cfg.clone()
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u32(&mut self) -> u32 {
        let v = u32::from_le_bytes(self.buf[self.at..self.at + 4].try_into().expect("4 bytes"));
        self.at += 4;
        v
    }
    fn u64(&mut self) -> u64 {
        let v = u64::from_le_bytes(self.buf[self.at..self.at + 8].try_into().expect("8 bytes"));
        self.at += 8;
        v
    }
}

/// The 4096-byte header block for `header`.
pub fn encode_header(header: &ImageHeader) -> Vec<u8> {
    let m = &header.media;
    let l = &header.layout;
    let mut buf = vec![0u8; HEADER_BYTES as usize];
    let mut w = Writer {
        buf: &mut buf,
        at: 0,
    };
    w.bytes(&MAGIC);
    w.u32(VERSION);
    w.u32(HEADER_BYTES as u32);
    for v in [
        m.channels,
        m.luns_per_channel,
        m.blocks_per_lun,
        m.pages_per_block,
        m.page_size_bytes,
        m.oob_size_bytes,
        m.program_unit_pages,
        m.zone_width_luns,
    ] {
        w.u32(v);
    }
    w.u64(m.zone_size_blocks.unwrap_or(0));
    for v in [
        m.max_open_zones,
        m.max_active_zones,
        m.max_append_blocks,
        m.max_transfer_blocks,
        m.queue_depth,
        m.endurance_erases,
        m.factory_bad_block_per_mille,
        0,
    ] {
        w.u32(v);
    }
    w.u64(m.faults.seed);
    for v in [
        l.erase_table_offset,
        l.zone_table_offset,
        l.page_state_offset,
        l.oob_offset,
        l.data_offset,
        l.image_size_bytes,
    ] {
        w.u64(v);
    }
    assert_eq!(w.at, FIELDS_END);
    let crc = crc32c::crc32c(&buf[..CRC_OFFSET]);
    buf[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
    let decoded =
        decode_header(&buf, std::path::Path::new("<encode>")).expect("an encoded header decodes");
    assert_eq!(&decoded, header, "header encode/decode disagree");
    buf
}

/// Parses and checks a header block. `path` is only used in errors.
pub fn decode_header(buf: &[u8], path: &std::path::Path) -> Result<ImageHeader, SimError> {
    if (buf.len() as u64) < HEADER_BYTES {
        return Err(SimError::Truncated {
            path: path.to_path_buf(),
            expected_bytes: HEADER_BYTES,
            actual_bytes: buf.len() as u64,
        });
    }
    let buf = &buf[..HEADER_BYTES as usize];
    if buf[..8] != MAGIC {
        return Err(SimError::BadMagic {
            path: path.to_path_buf(),
        });
    }
    let mut r = Reader { buf, at: 8 };
    let version = r.u32();
    if version != VERSION {
        return Err(SimError::UnsupportedVersion {
            found: version,
            supported: VERSION,
        });
    }
    let stored_crc = u32::from_le_bytes(buf[CRC_OFFSET..].try_into().expect("4 bytes"));
    let actual_crc = crc32c::crc32c(&buf[..CRC_OFFSET]);
    if stored_crc != actual_crc {
        return Err(SimError::HeaderChecksum {
            expected: stored_crc,
            actual: actual_crc,
        });
    }
    let header_bytes = r.u32();
    if u64::from(header_bytes) != HEADER_BYTES {
        return Err(SimError::CorruptHeader {
            field: "header_size_bytes",
            value: header_bytes.into(),
        });
    }
    if let Some(i) = buf[FIELDS_END..CRC_OFFSET].iter().position(|&b| b != 0) {
        return Err(SimError::CorruptHeader {
            field: "reserved",
            value: (FIELDS_END + i) as u64,
        });
    }
    let mut m = SimConfig {
        channels: r.u32(),
        luns_per_channel: r.u32(),
        blocks_per_lun: r.u32(),
        pages_per_block: r.u32(),
        page_size_bytes: r.u32(),
        oob_size_bytes: r.u32(),
        program_unit_pages: r.u32(),
        zone_width_luns: r.u32(),
        ..SimConfig::default()
    };
    m.zone_size_blocks = match r.u64() {
        0 => None,
        n => Some(n),
    };
    m.max_open_zones = r.u32();
    m.max_active_zones = r.u32();
    m.max_append_blocks = r.u32();
    m.max_transfer_blocks = r.u32();
    m.queue_depth = r.u32();
    m.endurance_erases = r.u32();
    m.factory_bad_block_per_mille = r.u32();
    let reserved = r.u32();
    if reserved != 0 {
        return Err(SimError::CorruptHeader {
            field: "reserved",
            value: reserved.into(),
        });
    }
    m.timing = None;
    m.faults = Faults {
        seed: r.u64(),
        ..Faults::default()
    };
    m.validate()?;
    let expected = ImageLayout::for_config(&m);
    let stored = [
        ("erase_table_offset", expected.erase_table_offset),
        ("zone_table_offset", expected.zone_table_offset),
        ("page_state_offset", expected.page_state_offset),
        ("oob_offset", expected.oob_offset),
        ("data_offset", expected.data_offset),
        ("image_size_bytes", expected.image_size_bytes),
    ];
    for (field, want) in stored {
        let value = r.u64();
        if value != want {
            return Err(SimError::CorruptHeader { field, value });
        }
    }
    assert_eq!(r.at, FIELDS_END);
    Ok(ImageHeader {
        media: m,
        layout: expected,
    })
}

/// One erase-block table entry.
pub fn encode_erase_entry(erase_count: u32, flags: u8) -> [u8; ERASE_ENTRY_BYTES as usize] {
    let mut e = [0u8; ERASE_ENTRY_BYTES as usize];
    e[..4].copy_from_slice(&erase_count.to_le_bytes());
    e[4] = flags;
    e
}

/// `(erase_count, flags)`, or `None` if the entry holds impossible values.
pub fn decode_erase_entry(e: &[u8]) -> Option<(u32, u8)> {
    let count = u32::from_le_bytes(e[..4].try_into().ok()?);
    let flags = e[4];
    let clean = flags & !(EB_FACTORY_BAD | EB_GROWN_BAD) == 0 && e[5..8].iter().all(|&b| b == 0);
    clean.then_some((count, flags))
}

/// One zone table entry.
pub fn encode_zone_entry(state: ZoneState, wp_blocks: u64) -> [u8; ZONE_ENTRY_BYTES as usize] {
    let mut e = [0u8; ZONE_ENTRY_BYTES as usize];
    e[..8].copy_from_slice(&wp_blocks.to_le_bytes());
    e[8] = zone_state_to_byte(state);
    e
}

/// `(state, wp_blocks)`, or `None` if the entry holds impossible values
/// (the caller checks the write pointer against the capacity).
pub fn decode_zone_entry(e: &[u8]) -> Option<(ZoneState, u64)> {
    let wp = u64::from_le_bytes(e[..8].try_into().ok()?);
    let state = zone_state_from_byte(e[8])?;
    e[9..16].iter().all(|&b| b == 0).then_some((state, wp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn header_round_trips() {
        let mut cfg = SimConfig::small_for_tests();
        cfg.zone_size_blocks = Some(128);
        cfg.faults.seed = 77;
        let h = ImageHeader::new(&cfg);
        let buf = encode_header(&h);
        assert_eq!(buf.len(), 4096);
        assert_eq!(decode_header(&buf, Path::new("x")).expect("decodes"), h);
    }

    #[test]
    fn regions_are_aligned_and_ordered() {
        let l = ImageLayout::for_config(&SimConfig::default());
        let offs = [
            l.erase_table_offset,
            l.zone_table_offset,
            l.page_state_offset,
            l.oob_offset,
            l.data_offset,
        ];
        assert!(offs.iter().all(|o| o % 4096 == 0));
        assert!(offs.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(l.image_size_bytes - l.data_offset, 4 << 30);
    }

    #[test]
    fn entries_round_trip_and_reject_junk() {
        let e = encode_zone_entry(ZoneState::Closed, 17);
        assert_eq!(decode_zone_entry(&e), Some((ZoneState::Closed, 17)));
        let mut bad = e;
        bad[8] = 9;
        assert_eq!(decode_zone_entry(&bad), None);
        let e = encode_erase_entry(5, EB_GROWN_BAD);
        assert_eq!(decode_erase_entry(&e), Some((5, EB_GROWN_BAD)));
        let mut bad = e;
        bad[4] = 0x80;
        assert_eq!(decode_erase_entry(&bad), None);
    }
}
