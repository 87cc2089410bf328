//! Little-endian field access and the error type shared by the on-media
//! structures (`tag`, `note`, `superblock`, `checkpoint`).
//!
//! Offsets are constants checked by the callers before any access, so the
//! accessors here assert their bounds: an out-of-range offset is a bug in the
//! caller, never a property of the bytes being decoded.

/// Why bytes read from the media are not a valid structure. Every variant
/// names the structure and the field, with the expected and the found value.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// All bytes are 0x00 or all are 0xFF: never written (or erased).
    /// Recovery uses this to stop scanning cleanly.
    #[error("{structure}: the block is erased (never written)")]
    Erased { structure: &'static str },
    #[error("{structure}: bad magic {found:#x}, expected {expected:#x}: not a zftl {structure} (not a zftl device, or a damaged one)")]
    BadMagic {
        structure: &'static str,
        expected: u64,
        found: u64,
    },
    #[error("{structure}: format version {found} is newer than this build reads (version {supported}); upgrade zftl")]
    NewerVersion {
        structure: &'static str,
        found: u32,
        supported: u32,
    },
    #[error("{structure}: format version {found} is not a valid version (this build reads version {supported})")]
    BadVersion {
        structure: &'static str,
        found: u32,
        supported: u32,
    },
    #[error("{structure}: CRC32C mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    BadCrc {
        structure: &'static str,
        stored: u32,
        computed: u32,
    },
    #[error("{structure}: {actual} bytes where {expected} were expected")]
    Length {
        structure: &'static str,
        expected: u64,
        actual: u64,
    },
    #[error("{structure}: reserved field {field} is {value:#x}, expected 0")]
    Reserved {
        structure: &'static str,
        field: &'static str,
        value: u64,
    },
    #[error("{structure}: field {field} = {value} is out of range ({rule})")]
    OutOfRange {
        structure: &'static str,
        field: &'static str,
        value: u64,
        rule: &'static str,
    },
    #[error("tag: unknown tag kind {kind}")]
    UnknownTagKind { kind: u8 },
    /// A note kind this build does not know: written by a newer format.
    /// Recovery refuses it rather than skipping it.
    #[error("note: unknown note kind {kind} (written by a newer zftl?); refusing to skip it")]
    UnknownNoteKind { kind: u8 },
    #[error("log block: unknown log block kind {kind}")]
    UnknownLogBlockKind { kind: u16 },
    #[error("checkpoint: zone {zone}: unknown zone kind {kind}")]
    UnknownZoneKind { zone: u32, kind: u8 },
    #[error("superblock: unknown tag mode {mode}")]
    UnknownTagMode { mode: u32 },
    #[error("checkpoint: header says {header} mapped blocks, the leaves hold {counted}")]
    MappedCount { header: u64, counted: u64 },
    #[error("checkpoint: leaf index {index} follows leaf index {previous}; leaves must be in strictly increasing order")]
    LeafOrder { previous: u32, index: u32 },
    #[error("checkpoint: shared table: {0}")]
    SharedTable(String),
    #[error("checkpoint: attribute table: {0}")]
    AttributeTable(String),
    #[error("checkpoint: no chunks to join")]
    NoChunks,
    #[error("checkpoint: log block {log_seq} is a notes block, not a checkpoint chunk")]
    NotAChunk { log_seq: u64 },
    #[error("checkpoint: chunk at position {position} has index {index}: chunks missing, duplicated or out of order")]
    ChunkIndex { position: u32, index: u32 },
    #[error(
        "checkpoint: chunk {index} belongs to checkpoint {found}, expected checkpoint {expected}"
    )]
    ChunkCheckpoint {
        index: u32,
        expected: u64,
        found: u64,
    },
    #[error("superblock: geometry mismatch: {field} is {on_media} on the media but {device} on the device")]
    GeometryMismatch {
        field: &'static str,
        on_media: u64,
        device: u64,
    },
}

/// True when `off` is a multiple of `align` (a power of two); for the
/// compile-time layout checks.
pub(crate) const fn aligned(off: usize, align: usize) -> bool {
    assert!(align.is_power_of_two());
    off & (align - 1) == 0
}

/// True when every byte is 0x00 or every byte is 0xFF (an empty slice is
/// erased too).
pub(crate) fn is_erased(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0x00) || bytes.iter().all(|&b| b == 0xFF)
}

/// Fails with [`FormatError::Length`] unless `bytes.len() >= min`.
pub(crate) fn need(structure: &'static str, bytes: &[u8], min: usize) -> Result<(), FormatError> {
    if bytes.len() < min {
        return Err(FormatError::Length {
            structure,
            expected: min as u64,
            actual: bytes.len() as u64,
        });
    }
    Ok(())
}

/// Fails with [`FormatError::Reserved`] unless `value == 0`.
pub(crate) fn zero(
    structure: &'static str,
    field: &'static str,
    value: u64,
) -> Result<(), FormatError> {
    if value != 0 {
        return Err(FormatError::Reserved {
            structure,
            field,
            value,
        });
    }
    Ok(())
}

/// Fails with [`FormatError::Reserved`] unless every byte is zero.
pub(crate) fn zero_bytes(
    structure: &'static str,
    field: &'static str,
    bytes: &[u8],
) -> Result<(), FormatError> {
    match bytes.iter().find(|&&b| b != 0) {
        None => Ok(()),
        Some(&b) => Err(FormatError::Reserved {
            structure,
            field,
            value: u64::from(b),
        }),
    }
}

/// Checks the CRC32C stored at `bytes[crc_off..crc_off + 4]` against the
/// CRC32C of `bytes[..crc_off]`.
pub(crate) fn check_crc(
    structure: &'static str,
    bytes: &[u8],
    crc_off: usize,
) -> Result<(), FormatError> {
    let stored = get_u32(bytes, crc_off);
    let computed = zftl_crc::crc32c(&bytes[..crc_off]);
    if stored != computed {
        return Err(FormatError::BadCrc {
            structure,
            stored,
            computed,
        });
    }
    Ok(())
}

/// Stores the CRC32C of `bytes[..crc_off]` at `crc_off`.
/// Checks an 8-byte magic at `magic_off` and a `u32` version at
/// `version_off`: a foreign structure, a newer one, or an invalid version.
pub(crate) fn check_magic_version(
    structure: &'static str,
    bytes: &[u8],
    magic: (usize, [u8; 8]),
    (version_off, supported): (usize, u32),
) -> Result<(), FormatError> {
    check_magic_versions(structure, bytes, magic, (version_off, supported, supported)).map(drop)
}

/// Like [`check_magic_version`] for a structure this build reads in
/// versions `oldest..=newest`; returns the version found.
pub(crate) fn check_magic_versions(
    structure: &'static str,
    bytes: &[u8],
    (magic_off, magic): (usize, [u8; 8]),
    (version_off, oldest, newest): (usize, u32, u32),
) -> Result<u32, FormatError> {
    let found = get_bytes::<8>(bytes, magic_off);
    if found != magic {
        return Err(FormatError::BadMagic {
            structure,
            expected: u64::from_le_bytes(magic),
            found: u64::from_le_bytes(found),
        });
    }
    let version = get_u32(bytes, version_off);
    if version > newest {
        return Err(FormatError::NewerVersion {
            structure,
            found: version,
            supported: newest,
        });
    }
    if version < oldest {
        return Err(FormatError::BadVersion {
            structure,
            found: version,
            supported: newest,
        });
    }
    Ok(version)
}

pub(crate) fn seal_crc(bytes: &mut [u8], crc_off: usize) {
    let crc = zftl_crc::crc32c(&bytes[..crc_off]);
    put_u32(bytes, crc_off, crc);
}

fn array<const N: usize>(bytes: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[off..off + N]);
    out
}

pub(crate) fn get_u8(bytes: &[u8], off: usize) -> u8 {
    bytes[off]
}

pub(crate) fn get_u16(bytes: &[u8], off: usize) -> u16 {
    u16::from_le_bytes(array(bytes, off))
}

pub(crate) fn get_u32(bytes: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(array(bytes, off))
}

pub(crate) fn get_u64(bytes: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(array(bytes, off))
}

pub(crate) fn get_bytes<const N: usize>(bytes: &[u8], off: usize) -> [u8; N] {
    array(bytes, off)
}

pub(crate) fn put_u8(bytes: &mut [u8], off: usize, v: u8) {
    bytes[off] = v;
}

pub(crate) fn put_u16(bytes: &mut [u8], off: usize, v: u16) {
    bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(bytes: &mut [u8], off: usize, v: u32) {
    bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(bytes: &mut [u8], off: usize, v: u64) {
    bytes[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_bytes(bytes: &mut [u8], off: usize, v: &[u8]) {
    bytes[off..off + v.len()].copy_from_slice(v);
}

/// A forward cursor over bytes whose total length the caller has already
/// checked; reading past the end is a bug and panics.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], pos: usize) -> Self {
        Reader { bytes, pos }
    }

    pub(crate) fn pos(&self) -> usize {
        self.pos
    }

    fn take(&mut self, n: usize) -> usize {
        let at = self.pos;
        assert!(
            at + n <= self.bytes.len(),
            "read past a length-checked buffer"
        );
        self.pos += n;
        at
    }

    pub(crate) fn u8(&mut self) -> u8 {
        let at = self.take(1);
        get_u8(self.bytes, at)
    }

    pub(crate) fn u16(&mut self) -> u16 {
        let at = self.take(2);
        get_u16(self.bytes, at)
    }

    pub(crate) fn u32(&mut self) -> u32 {
        let at = self.take(4);
        get_u32(self.bytes, at)
    }

    pub(crate) fn u64(&mut self) -> u64 {
        let at = self.take(8);
        get_u64(self.bytes, at)
    }
}

/// Appends little-endian values to a byte vector.
pub(crate) struct Writer {
    pub(crate) bytes: Vec<u8>,
}

impl Writer {
    pub(crate) fn with_capacity(n: usize) -> Self {
        Writer {
            bytes: Vec::with_capacity(n),
        }
    }

    pub(crate) fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }

    pub(crate) fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_little_endian() {
        let mut b = [0u8; 16];
        put_u16(&mut b, 0, 0x0102);
        put_u32(&mut b, 2, 0x0304_0506);
        put_u64(&mut b, 6, 0x0708_090a_0b0c_0d0e);
        assert_eq!(b[0], 0x02);
        assert_eq!(get_u16(&b, 0), 0x0102);
        assert_eq!(get_u32(&b, 2), 0x0304_0506);
        assert_eq!(get_u64(&b, 6), 0x0708_090a_0b0c_0d0e);
    }

    #[test]
    fn erased_detection() {
        assert!(is_erased(&[0xFF; 8]));
        assert!(is_erased(&[0; 8]));
        assert!(!is_erased(&[0, 0xFF]));
    }
}
