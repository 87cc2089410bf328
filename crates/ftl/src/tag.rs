//! The per-block tag: what a data block holds, for whom, and when.
//!
//! 32 bytes, little-endian, stored in the first [`TAG_BYTES`] of the block's
//! OOB area when the device has at least that much OOB (tag mode "OOB").
//! Layout (docs/format.md, "Tag"):
//!
//! ```text
//! 0  u8  kind      1 host data, 2 relocated data (GC), 3 pad, 4 metadata log block
//! 1  u8  version   1
//! 2  u16 flags     0 (reserved)
//! 4  u32 epoch
//! 8  u64 lba       u64::MAX for pad / meta
//! 16 u64 seq       seq of the host write that produced the data (GC copies keep it)
//! 24 u32 data_crc  CRC32C of the block's data
//! 28 u32 tag_crc   CRC32C of bytes 0..28
//! ```
//!
//! The tag has no magic: its kind, version and CRC identify it, and it is
//! only ever looked for at one place (the OOB of a block).
//!
//! Encoding is on the hot path, so `encode` does not decode its own output;
//! the round trip is checked by the tests and proptests below.

use crate::addr::{Epoch, Lba, Seq};
pub use crate::codec::FormatError;
use crate::codec::{
    aligned, check_crc, get_u16, get_u32, get_u64, get_u8, is_erased, need, put_u16, put_u32,
    put_u64, put_u8, seal_crc,
};
use crate::error::IoError;
use serde::{Deserialize, Serialize};

const STRUCTURE: &str = "tag";

/// Tag format version written by this build.
pub const TAG_VERSION: u8 = 1;

const KIND_OFF: usize = 0;
const VERSION_OFF: usize = KIND_OFF + 1;
const FLAGS_OFF: usize = VERSION_OFF + 1;
const EPOCH_OFF: usize = FLAGS_OFF + 2;
const LBA_OFF: usize = EPOCH_OFF + 4;
const SEQ_OFF: usize = LBA_OFF + 8;
const DATA_CRC_OFF: usize = SEQ_OFF + 8;
const TAG_CRC_OFF: usize = DATA_CRC_OFF + 4;

/// Encoded size of a tag.
pub const TAG_BYTES: usize = TAG_CRC_OFF + 4;

const _: () = assert!(TAG_BYTES == 32);
const _: () = assert!(aligned(LBA_OFF, 8) && aligned(SEQ_OFF, 8) && aligned(EPOCH_OFF, 4));
const _: () = assert!(TAG_CRC_OFF == 28);

/// The `lba` of tags that carry no logical address (pad, metadata).
pub const NO_LBA: Lba = u64::MAX;

/// What a block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TagKind {
    /// Host data written by a host write.
    HostData = 1,
    /// Host data copied by GC (keeps the original seq).
    Relocated = 2,
    /// Filler written to complete a write unit.
    Pad = 3,
    /// A block of the metadata log.
    Meta = 4,
}

impl TagKind {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<TagKind> {
        Some(match code {
            1 => TagKind::HostData,
            2 => TagKind::Relocated,
            3 => TagKind::Pad,
            4 => TagKind::Meta,
            _ => return None,
        })
    }

    /// Host data or relocated host data: the tag names a logical block.
    pub fn is_data(self) -> bool {
        matches!(self, TagKind::HostData | TagKind::Relocated)
    }
}

/// The decoded tag. For data kinds `lba` is a logical block (`!= NO_LBA`);
/// for pad and meta it is [`NO_LBA`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    pub kind: TagKind,
    pub epoch: Epoch,
    pub lba: Lba,
    pub seq: Seq,
    pub data_crc: u32,
}

/// CRC32C of a block's data, as stored in `Tag::data_crc` and in notes,
/// by [`DataCrcImpl::selected`]. A volume runs the implementation its
/// [`FtlConfig::data_crc`](crate::FtlConfig::data_crc) names instead; the
/// value is the same CRC-32C (iSCSI) whichever runs (`data_crc_is_crc32c`).
pub fn data_crc(data: &[u8]) -> u32 {
    DataCrcImpl::selected().checksum(data)
}

/// [`data_crc`] of each `block_bytes`-long block of `data`, into `out` (one
/// per block), by [`DataCrcImpl::selected`]. Panics (a bug) unless `data`
/// holds exactly `out.len()` blocks.
pub fn data_crcs(data: &[u8], block_bytes: usize, out: &mut [u32]) {
    DataCrcImpl::selected().checksum_blocks(data, block_bytes, out);
}

/// Whole blocks of a write with their data CRCs, taken where the bytes
/// come in, on the caller's thread: a
/// [`Request::WriteSummed`](crate::Request::WriteSummed) spares the thread
/// that runs the core the CRC, which is most of what it spends per byte
/// (half of a 128 KiB write's cost on an emulated CPU). Only
/// [`SummedBlocks::new`] makes one, so the CRCs are always the data's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SummedBlocks {
    data: Vec<u8>,
    block_bytes: usize,
    crcs: Vec<u32>,
}

impl SummedBlocks {
    /// Takes the CRC of each `block_bytes`-long block of `data` with `crc`,
    /// the implementation of the volume the write goes to (`Driver::data_crc`,
    /// which the handles use: any gives the same values, but the volume's
    /// is the one its owner chose to run). Fails with
    /// [`IoError::BufferSize`] unless `data` is one or more whole blocks.
    pub fn new(
        data: Vec<u8>,
        block_bytes: usize,
        crc: DataCrcImpl,
    ) -> Result<SummedBlocks, IoError> {
        check_whole_blocks(data.len(), block_bytes)?;
        let mut crcs = vec![0; data.len() / block_bytes];
        crc.checksum_blocks(&data, block_bytes, &mut crcs);
        Ok(SummedBlocks {
            data,
            block_bytes,
            crcs,
        })
    }

    pub fn data(&self) -> &[u8] {
        &self.data
    }

    pub fn block_bytes(&self) -> usize {
        self.block_bytes
    }

    /// The data and the CRC of each block, in order.
    pub fn into_parts(self) -> (Vec<u8>, Vec<u32>) {
        (self.data, self.crcs)
    }
}

/// `Ok` if `len_bytes` is one or more whole `block_bytes`-long blocks, else
/// the [`IoError::BufferSize`] a write of that length gets.
pub fn check_whole_blocks(len_bytes: usize, block_bytes: usize) -> Result<(), IoError> {
    if block_bytes == 0 || len_bytes == 0 || !len_bytes.is_multiple_of(block_bytes) {
        let bs = block_bytes.max(1);
        return Err(IoError::BufferSize {
            expected_bytes: len_bytes.div_ceil(bs).max(1) * bs,
            actual_bytes: len_bytes,
        });
    }
    Ok(())
}

/// The implementations of the data CRC: the same CRC-32C by different code
/// (`data_crc_is_crc32c` pins them together). A volume runs the one its
/// [`FtlConfig::data_crc`](crate::FtlConfig::data_crc) names; the core has
/// no clock to time them, so whoever runs it may (`zftl::data_crc`). Named
/// (`crc-fast`, `crc32c`, `table16`, `fold256`, also in a config file) so
/// that a benchmark can measure them where it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataCrcImpl {
    /// `crc-fast`: carry-less multiply folding (PCLMULQDQ, VPCLMULQDQ) when
    /// the CPU has it, else its table code.
    CrcFast,
    /// The `crc32c` crate: the SSE4.2 `crc32` instruction three ways in
    /// parallel when the CPU has it, else slicing by 8 tables.
    Crc32c,
    /// The `crc` crate's slicing by 16 tables: no special instruction.
    Table16,
    /// `zftl-crc`: 256-bit carry-less multiply folding (AVX2 + VPCLMULQDQ)
    /// where the CPU has it, else the `crc32c` crate.
    Fold256,
}

/// CRC-32C by 16 tables of 256 entries (16 KiB, built at compile time).
const CRC32C_TABLE16: crc::Crc<u32, crc::Table<16>> =
    crc::Crc::<u32, crc::Table<16>>::new(&crc::CRC_32_ISCSI);

impl DataCrcImpl {
    pub const ALL: [DataCrcImpl; 4] = [
        DataCrcImpl::CrcFast,
        DataCrcImpl::Crc32c,
        DataCrcImpl::Table16,
        DataCrcImpl::Fold256,
    ];

    /// Whether the implementation runs its own code on this CPU: without
    /// AVX2 and VPCLMULQDQ, `Fold256` is the `crc32c` crate under another
    /// name, and timing it would only show that name in a log.
    pub fn runs_here(self) -> bool {
        self != DataCrcImpl::Fold256 || zftl_crc::is_accelerated()
    }

    /// The implementation to run when none was chosen, by the CPU's
    /// features: `crc-fast` where it has carry-less multiply (PCLMULQDQ and
    /// SSE4.1, what `crc-fast` folds with), else the `crc32c` crate (SSE4.2
    /// `crc32`, or slicing by 8 on a CPU with neither, such as QEMU's
    /// default `qemu64` model, where that beats `crc-fast`'s table code).
    /// Features alone rank them wrongly on some CPUs, which is why `zftl`
    /// times them (docs/zns.md has the figures).
    pub fn selected() -> DataCrcImpl {
        #[cfg(target_arch = "x86_64")]
        if !(std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.1"))
        {
            return DataCrcImpl::Crc32c;
        }
        DataCrcImpl::CrcFast
    }

    pub fn name(self) -> &'static str {
        match self {
            DataCrcImpl::CrcFast => "crc-fast",
            DataCrcImpl::Crc32c => "crc32c",
            DataCrcImpl::Table16 => "table16",
            DataCrcImpl::Fold256 => "fold256",
        }
    }

    /// CRC-32C of `data`.
    pub fn checksum(self, data: &[u8]) -> u32 {
        match self {
            DataCrcImpl::CrcFast => {
                let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data);
                u32::try_from(crc).expect("a CRC-32 fits in 32 bits")
            }
            DataCrcImpl::Crc32c => crc32c::crc32c(data),
            DataCrcImpl::Table16 => CRC32C_TABLE16.checksum(data),
            DataCrcImpl::Fold256 => zftl_crc::crc32c(data),
        }
    }

    /// CRC-32C of each `block_bytes`-long block of `data`, into `out`.
    pub fn checksum_blocks(self, data: &[u8], block_bytes: usize, out: &mut [u32]) {
        match self {
            DataCrcImpl::Fold256 => zftl_crc::crc32c_blocks(data, block_bytes, out),
            _ => zftl_crc::each_block(data, block_bytes, out, |block| self.checksum(block)),
        }
    }
}

impl Tag {
    /// Writes the tag into `out[..TAG_BYTES]`; the rest of `out` is untouched.
    /// Panics (a bug) if `out` is shorter than [`TAG_BYTES`] or the lba does
    /// not fit the kind.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(out.len() >= TAG_BYTES, "tag buffer of {} bytes", out.len());
        assert_eq!(
            self.kind.is_data(),
            self.lba != NO_LBA,
            "tag lba {} does not fit kind {:?}",
            self.lba,
            self.kind
        );
        let out = &mut out[..TAG_BYTES];
        put_u8(out, KIND_OFF, self.kind.code());
        put_u8(out, VERSION_OFF, TAG_VERSION);
        put_u16(out, FLAGS_OFF, 0);
        put_u32(out, EPOCH_OFF, self.epoch);
        put_u64(out, LBA_OFF, self.lba);
        put_u64(out, SEQ_OFF, self.seq);
        put_u32(out, DATA_CRC_OFF, self.data_crc);
        seal_crc(out, TAG_CRC_OFF);
    }

    /// The tag as a 32-byte array.
    pub fn to_bytes(&self) -> [u8; TAG_BYTES] {
        let mut out = [0u8; TAG_BYTES];
        self.encode(&mut out);
        out
    }

    /// Decodes the tag in `bytes[..TAG_BYTES]`. `Ok(None)` when those bytes
    /// are all 0x00 or all 0xFF (erased, or written without OOB).
    pub fn decode(bytes: &[u8]) -> Result<Option<Tag>, FormatError> {
        need(STRUCTURE, bytes, TAG_BYTES)?;
        let b = &bytes[..TAG_BYTES];
        if is_erased(b) {
            return Ok(None);
        }
        let version = get_u8(b, VERSION_OFF);
        if version != TAG_VERSION {
            return Err(version_error(version));
        }
        check_crc(STRUCTURE, b, TAG_CRC_OFF)?;
        let code = get_u8(b, KIND_OFF);
        let kind = TagKind::from_code(code).ok_or(FormatError::UnknownTagKind { kind: code })?;
        crate::codec::zero(STRUCTURE, "flags", u64::from(get_u16(b, FLAGS_OFF)))?;
        let lba = get_u64(b, LBA_OFF);
        if kind.is_data() && lba == NO_LBA {
            return Err(FormatError::OutOfRange {
                structure: STRUCTURE,
                field: "lba",
                value: lba,
                rule: "a data tag needs an lba below u64::MAX",
            });
        }
        if !kind.is_data() && lba != NO_LBA {
            return Err(FormatError::OutOfRange {
                structure: STRUCTURE,
                field: "lba",
                value: lba,
                rule: "pad and meta tags have lba u64::MAX",
            });
        }
        Ok(Some(Tag {
            kind,
            epoch: get_u32(b, EPOCH_OFF),
            lba,
            seq: get_u64(b, SEQ_OFF),
            data_crc: get_u32(b, DATA_CRC_OFF),
        }))
    }
}

fn version_error(version: u8) -> FormatError {
    let (found, supported) = (u32::from(version), u32::from(TAG_VERSION));
    if found > supported {
        FormatError::NewerVersion {
            structure: STRUCTURE,
            found,
            supported,
        }
    } else {
        FormatError::BadVersion {
            structure: STRUCTURE,
            found,
            supported,
        }
    }
}

#[cfg(test)]
mod tests {

    /// CRC-32C bit by bit: a reference that shares no code with any
    /// implementation (the `crc32c` crate is one of them).
    fn reference_crc32c(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = (crc >> 1) ^ (0x82F6_3B78 & (crc & 1).wrapping_neg());
            }
        }
        !crc
    }

    /// Whether this CPU runs `imp`'s own fast code, the code most CPUs
    /// run. Where it cannot, `imp` runs a fallback: `crc-fast` its tables,
    /// `crc32c` its slicing by 8, `fold256` the `crc32c` crate.
    fn runs_fast_code(imp: DataCrcImpl) -> bool {
        #[cfg(target_arch = "x86_64")]
        let (crc_fast, crc32c) = {
            use std::arch::is_x86_feature_detected as has;
            let crc32c = has!("sse4.2");
            (crc32c && has!("sse4.1") && has!("pclmulqdq"), crc32c)
        };
        #[cfg(target_arch = "aarch64")]
        let (crc_fast, crc32c) = {
            use std::arch::is_aarch64_feature_detected as has;
            (has!("aes"), has!("crc"))
        };
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let (crc_fast, crc32c) = (false, false);
        match imp {
            DataCrcImpl::CrcFast => crc_fast,
            DataCrcImpl::Crc32c => crc32c,
            DataCrcImpl::Table16 => true,
            DataCrcImpl::Fold256 => zftl_crc::is_accelerated(),
        }
    }

    /// Set to run `data_crc_is_crc32c` on a CPU that lacks the instructions
    /// of some implementations (as for `zftl-crc`'s tests): their fallbacks
    /// are checked, their fast code is not, and the test says so.
    const ALLOW_NO_FOLD: &str = "ZFTL_CRC_ALLOW_NO_FOLD";

    /// Fails unless every implementation runs its own fast code here, or
    /// `ZFTL_CRC_ALLOW_NO_FOLD` is set (then a line on stderr names what
    /// goes untested): a pass on a CPU where they all run fallbacks would
    /// say nothing of the code other CPUs run.
    fn fast_code_runs_or_allowed() {
        use std::io::Write;
        let missing: Vec<&str> = DataCrcImpl::ALL
            .into_iter()
            .filter(|&imp| !runs_fast_code(imp))
            .map(DataCrcImpl::name)
            .collect();
        if missing.is_empty() {
            return;
        }
        let names = missing.join(", ");
        assert!(
            std::env::var_os(ALLOW_NO_FOLD).is_some(),
            "this CPU lacks the instructions of the data CRC implementations {names}: \
             they run fallbacks here, and their fast code cannot be tested; \
             set {ALLOW_NO_FOLD}=1 to test the fallbacks only"
        );
        // Straight to stderr: the test harness captures `eprintln!` of a
        // test that passes, and this line must be seen.
        let _ = writeln!(
            std::io::stderr(),
            "zftl-core: SKIPPED: the fast code of {names} does not run on this CPU \
             ({ALLOW_NO_FOLD} is set); only their fallbacks are tested"
        );
    }

    #[test]
    fn data_crc_is_crc32c() {
        fast_code_runs_or_allowed();
        let bytes: Vec<u8> = (0..8192u32).map(|i| (i * 31 + i / 7) as u8).collect();
        for len in (0..300).chain([511, 512, 4095, 4096, 4097, 8192]) {
            for start in [0, 1, 3, 8] {
                let b = &bytes[start.min(len)..len];
                let want = reference_crc32c(b);
                assert_eq!(data_crc(b), want, "len {len} start {start}");
                for imp in DataCrcImpl::ALL {
                    assert_eq!(imp.checksum(b), want, "{imp:?} len {len} start {start}");
                }
            }
        }
        assert_eq!(reference_crc32c(b"123456789"), 0xE306_9283); // CRC-32C check value
        for block_bytes in [1, 100, 512, 4096] {
            let blocks = bytes.len() / block_bytes;
            let data = &bytes[..blocks * block_bytes];
            let want: Vec<u32> = data
                .chunks_exact(block_bytes)
                .map(reference_crc32c)
                .collect();
            for imp in DataCrcImpl::ALL {
                let mut crcs = vec![0; blocks];
                imp.checksum_blocks(data, block_bytes, &mut crcs);
                assert_eq!(crcs, want, "{imp:?} blocks of {block_bytes}");
            }
        }
        for imp in DataCrcImpl::ALL {
            assert_eq!(imp.checksum(b"123456789"), 0xE306_9283, "{imp:?}");
        }
    }

    use super::*;
    use proptest::prelude::*;

    fn arb_tag() -> impl Strategy<Value = Tag> {
        (1u8..=4, any::<u32>(), 0..NO_LBA, any::<u64>(), any::<u32>()).prop_map(
            |(k, epoch, lba, seq, data_crc)| {
                let kind = TagKind::from_code(k).expect("valid code");
                let lba = if kind.is_data() { lba } else { NO_LBA };
                Tag {
                    kind,
                    epoch,
                    lba,
                    seq,
                    data_crc,
                }
            },
        )
    }

    #[test]
    fn layout_is_documented() {
        let t = Tag {
            kind: TagKind::HostData,
            epoch: 7,
            lba: 0x0102,
            seq: 9,
            data_crc: 0xAABB_CCDD,
        };
        let b = t.to_bytes();
        assert_eq!(&b[..4], &[1, 1, 0, 0]);
        assert_eq!(&b[4..8], &7u32.to_le_bytes());
        assert_eq!(&b[8..16], &0x0102u64.to_le_bytes());
        assert_eq!(&b[16..24], &9u64.to_le_bytes());
        assert_eq!(&b[24..28], &0xAABB_CCDDu32.to_le_bytes());
        assert_eq!(&b[28..32], &crc32c::crc32c(&b[..28]).to_le_bytes());
    }

    #[test]
    fn erased_is_none_and_short_is_error() {
        assert_eq!(Tag::decode(&[0xFF; 64]), Ok(None));
        assert_eq!(Tag::decode(&[0; 32]), Ok(None));
        assert!(matches!(
            Tag::decode(&[0; 31]),
            Err(FormatError::Length { .. })
        ));
    }

    #[test]
    fn newer_version_is_reported() {
        let mut b = Tag {
            kind: TagKind::Pad,
            epoch: 0,
            lba: NO_LBA,
            seq: 1,
            data_crc: 0,
        }
        .to_bytes();
        b[VERSION_OFF] = 2;
        seal_crc(&mut b, TAG_CRC_OFF);
        assert!(matches!(
            Tag::decode(&b),
            Err(FormatError::NewerVersion { found: 2, .. })
        ));
    }

    #[test]
    fn unknown_kind_is_reported() {
        let mut b = Tag {
            kind: TagKind::Pad,
            epoch: 0,
            lba: NO_LBA,
            seq: 1,
            data_crc: 0,
        }
        .to_bytes();
        b[KIND_OFF] = 9;
        seal_crc(&mut b, TAG_CRC_OFF);
        assert_eq!(
            Tag::decode(&b),
            Err(FormatError::UnknownTagKind { kind: 9 })
        );
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let t = Tag {
            kind: TagKind::Relocated,
            epoch: 3,
            lba: 42,
            seq: 1 << 40,
            data_crc: data_crc(b"x"),
        };
        let b = t.to_bytes();
        for bit in 0..TAG_BYTES * 8 {
            let mut f = b;
            f[bit / 8] ^= 1 << (bit % 8);
            assert!(Tag::decode(&f).is_err(), "bit {bit} undetected");
        }
    }

    proptest! {
        #[test]
        fn round_trips(t in arb_tag(), extra in 0usize..16) {
            let mut buf = vec![0xEEu8; TAG_BYTES + extra];
            t.encode(&mut buf);
            prop_assert!(buf[TAG_BYTES..].iter().all(|&b| b == 0xEE));
            prop_assert_eq!(Tag::decode(&buf), Ok(Some(t)));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Tag::decode(&bytes);
            if bytes.len() >= TAG_BYTES {
                // A valid version and CRC over arbitrary fields exercise the field checks.
                let mut b = bytes;
                b[VERSION_OFF] = TAG_VERSION;
                seal_crc(&mut b, TAG_CRC_OFF);
                let _ = Tag::decode(&b);
            }
        }

        #[test]
        fn bit_flips_are_detected(t in arb_tag(), bit in 0..TAG_BYTES * 8) {
            let mut b = t.to_bytes();
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(Tag::decode(&b).is_err());
        }
    }
}
