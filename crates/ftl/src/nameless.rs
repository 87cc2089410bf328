//! The on-media encodings of the nameless space (docs/format.md §11):
//! the address a client holds ([`NamelessAddr`]), the nameless tag kinds
//! 5–7 with the associated metadata after them in OOB ([`NamelessTag`]),
//! the md block that carries the metadata when it lives in the log
//! placement ([`MdBlock`]), where the metadata goes ([`MdPlacement`]), and
//! the checkpoint's nameless state ([`NamelessImage`], sections 16–24).
//! The notes (kinds 24–31) are in [`crate::note`].
//!
//! Every decoder here follows the conventions of format.md Part 1: it
//! never panics on any input, checks reserved fields to be zero and returns
//! a typed [`FormatError`] naming the structure and the field.

use crate::addr::{Ppa, Seq};
use crate::backend::ZoneId;
pub use crate::codec::FormatError;
use crate::codec::{
    aligned, get_u16, get_u32, get_u64, get_u8, is_erased, need, put_u32, put_u64, put_u8, zero,
    zero_bytes, Reader, Writer,
};
use crate::tag::{Tag, TAG_BYTES, TAG_VERSION};

// ---- address ----------------------------------------------------------------

/// The address of a nameless block as a client holds it: a u64 (stored
/// little-endian) with the block's [`Ppa`] in bits 0..32 and its birth
/// generation (>= 1) in bits 32..64. [`NamelessAddr::NONE`] (`u64::MAX`)
/// means "none" in the fields that allow it. The value is opaque to the
/// client; it is valid only on the volume that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamelessAddr(u64);

impl NamelessAddr {
    /// "No address" (`u64::MAX`).
    pub const NONE: NamelessAddr = NamelessAddr(u64::MAX);

    /// The address of `ppa` born in `generation`. Panics (a bug) on
    /// [`Ppa::NONE`] or generation 0.
    pub fn new(ppa: Ppa, generation: u32) -> NamelessAddr {
        assert!(!ppa.is_none(), "a nameless address of Ppa::NONE");
        assert!(generation >= 1, "a nameless address of generation 0");
        NamelessAddr(u64::from(generation) << 32 | u64::from(ppa.0))
    }

    /// The block's physical address (bits 0..32).
    pub fn ppa(self) -> Ppa {
        Ppa(self.0 as u32)
    }

    /// The block's birth generation (bits 32..64).
    pub fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }

    pub fn is_none(self) -> bool {
        self == NamelessAddr::NONE
    }

    /// True for an address [`NamelessAddr::new`] can make: not none, its
    /// Ppa not [`Ppa::NONE`] and its generation at least 1. Any u64 is a
    /// `NamelessAddr` ([`NamelessAddr::from_u64`]); the fields that hold
    /// one on the media accept only well-formed ones (or none where the
    /// format allows it).
    pub fn is_well_formed(self) -> bool {
        !self.ppa().is_none() && self.generation() >= 1
    }

    pub fn to_le_bytes(self) -> [u8; 8] {
        self.0.to_le_bytes()
    }

    pub fn from_le_bytes(b: [u8; 8]) -> NamelessAddr {
        NamelessAddr(u64::from_le_bytes(b))
    }

    pub fn to_u64(self) -> u64 {
        self.0
    }

    pub fn from_u64(v: u64) -> NamelessAddr {
        NamelessAddr(v)
    }
}

impl std::fmt::Display for NamelessAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_none() {
            write!(f, "none")
        } else {
            write!(f, "{}@{}", self.ppa().0, self.generation())
        }
    }
}

/// What the FTL tells a nameless client besides replies
/// (docs/design.md, "Recovery and the post-crash hand-over"): taken with
/// `Driver::poll_event` or `Driver::next_events`. Delivery is at least
/// once: an event not covered by a `nameless_commit` before a power cut
/// comes again after the mount.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NamelessEvent {
    /// A live block written since the last `nameless_commit` before the
    /// mount: the client may never have recorded its address (the reply
    /// was lost with the power). It records the block (and commits) or
    /// frees it; either way its zone can be collected again.
    Unrecorded { addr: NamelessAddr, md: Vec<u8> },
    /// The block the client holds as `old` now lives at `new` (a migration
    /// by GC or wear leveling). Until the client acknowledges it
    /// (`nameless_ack(old)`, after making its pointer change durable),
    /// `old` still reads, frees and overwrites the block; then `old` is
    /// stale. After every mount each unacknowledged move comes again.
    Migrated {
        old: NamelessAddr,
        new: NamelessAddr,
        md: Vec<u8>,
    },
}

/// `v` as an address field that must hold a well-formed address
/// (`none_ok`: or none), else an `OutOfRange` error on `field`.
pub(crate) fn addr_field(
    structure: &'static str,
    field: &'static str,
    v: u64,
    none_ok: bool,
) -> Result<NamelessAddr, FormatError> {
    let a = NamelessAddr::from_u64(v);
    if a.is_well_formed() || (none_ok && a.is_none()) {
        return Ok(a);
    }
    Err(FormatError::OutOfRange {
        structure,
        field,
        value: v,
        rule: if none_ok {
            "none (u64::MAX), or a ppa other than Ppa::NONE in bits 0..32 and a generation >= 1 in bits 32..64"
        } else {
            "a ppa other than Ppa::NONE in bits 0..32 and a generation >= 1 in bits 32..64"
        },
    })
}

// ---- zone kinds ---------------------------------------------------------------

/// The kind of a nameless zone, as a NamelessZone note names it (the
/// checkpoint's zone kinds 7 and 8).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NamelessZoneKind {
    /// Nameless writes and gap fills (zone kind 7, data-nameless).
    Data,
    /// Migrated blocks (zone kind 8, data-nameless-moved).
    Moved,
}

impl NamelessZoneKind {
    /// The checkpoint zone kind code (7 or 8).
    pub fn zone_kind_code(self) -> u8 {
        match self {
            NamelessZoneKind::Data => 7,
            NamelessZoneKind::Moved => 8,
        }
    }

    pub fn from_zone_kind_code(code: u8) -> Option<NamelessZoneKind> {
        match code {
            7 => Some(NamelessZoneKind::Data),
            8 => Some(NamelessZoneKind::Moved),
            _ => None,
        }
    }
}

// ---- metadata size and placement ---------------------------------------------

/// Smallest and largest associated metadata per block, in bytes.
pub const MIN_MD_BYTES: usize = 4;
pub const MAX_MD_BYTES: usize = 64;

/// True when `n` bytes of associated metadata per block are allowed:
/// 4 ..= 64, a multiple of 4.
pub fn valid_md_bytes(n: usize) -> bool {
    (MIN_MD_BYTES..=MAX_MD_BYTES).contains(&n) && n.is_multiple_of(4)
}

/// Where a volume keeps the associated metadata of its nameless blocks
/// (checkpoint section 16; it never changes for a volume).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MdPlacement {
    /// After the nameless tag in the block's OOB, covered by its CRC.
    Oob = 1,
    /// In NamelessWrite / NamelessMd notes and in md blocks in the zone.
    Log = 2,
}

impl MdPlacement {
    /// OOB when tags are in OOB and the OOB holds the tag and the md
    /// (`oob_size_bytes >= 32 + md_bytes`); the log otherwise.
    pub fn for_device(tag_mode_is_oob: bool, oob_size_bytes: usize, md_bytes: usize) -> Self {
        if tag_mode_is_oob && oob_size_bytes >= TAG_BYTES + md_bytes {
            MdPlacement::Oob
        } else {
            MdPlacement::Log
        }
    }

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<MdPlacement> {
        match code {
            1 => Some(MdPlacement::Oob),
            2 => Some(MdPlacement::Log),
            _ => None,
        }
    }
}

// ---- nameless tag (kinds 5-7) --------------------------------------------------

const TAG: &str = "nameless tag";

/// What a nameless block holds (tag kinds 5–7; 1–4 are [`crate::tag::TagKind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NamelessTagKind {
    /// Nameless data: a write, an overwrite, a gap fill or an in-place
    /// rewrite of a live block. `link`: the address it replaced, or none.
    Data = 5,
    /// A migration's copy. `link`: the address it was moved from.
    Moved = 6,
    /// An in-place collection's staged copy in the scratch zone. `link`:
    /// its home address, whose generation is `birth_gen`.
    Staged = 7,
}

impl NamelessTagKind {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<NamelessTagKind> {
        Some(match code {
            5 => NamelessTagKind::Data,
            6 => NamelessTagKind::Moved,
            7 => NamelessTagKind::Staged,
            _ => return None,
        })
    }
}

const T_KIND_OFF: usize = 0;
const T_VERSION_OFF: usize = T_KIND_OFF + 1;
const T_MD_WORDS_OFF: usize = T_VERSION_OFF + 1;
const T_RESERVED_OFF: usize = T_MD_WORDS_OFF + 1;
const T_BIRTH_GEN_OFF: usize = T_RESERVED_OFF + 1;
const T_LINK_OFF: usize = T_BIRTH_GEN_OFF + 4;
const T_SEQ_OFF: usize = T_LINK_OFF + 8;
const T_DATA_CRC_OFF: usize = T_SEQ_OFF + 8;
const T_TAG_CRC_OFF: usize = T_DATA_CRC_OFF + 4;
const _: () = assert!(T_TAG_CRC_OFF + 4 == TAG_BYTES && T_TAG_CRC_OFF == 28);
const _: () = assert!(aligned(T_LINK_OFF, 8) && aligned(T_SEQ_OFF, 8) && T_BIRTH_GEN_OFF == 4);

/// Most md bytes a nameless tag can carry after it (`md_words` is a u8).
pub const MAX_TAG_MD_BYTES: usize = 4 * 255;

/// A decoded nameless tag (docs/format.md §11, "Tag kinds 5–7").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NamelessTag {
    pub kind: NamelessTagKind,
    /// The generation of the block's address (>= 1).
    pub birth_gen: u32,
    /// Kind 5: the address this write replaced, or none; kind 6: the
    /// address the block was moved from; kind 7: its home address
    /// (generation `birth_gen`).
    pub link: NamelessAddr,
    /// Seq of the write that made the data (kept by moves, stages, rewrites).
    pub seq: Seq,
    /// CRC32C of the block's data.
    pub data_crc: u32,
}

/// CRC of a nameless tag: CRC32C of its bytes 0..28 followed by the md.
fn nameless_tag_crc(head: &[u8], md: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&head[..T_TAG_CRC_OFF]), md)
}

fn tag_range(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: TAG,
        field,
        value,
        rule,
    }
}

impl NamelessTag {
    /// Checks the field rules decode enforces (birth_gen, link); `Err`
    /// names the first one broken.
    fn check(&self) -> Result<(), FormatError> {
        if self.birth_gen == 0 {
            return Err(tag_range("birth_gen", 0, "at least 1"));
        }
        let link = self.link.to_u64();
        match self.kind {
            NamelessTagKind::Data => {
                addr_field(TAG, "link", link, true)?;
            }
            NamelessTagKind::Moved => {
                addr_field(TAG, "link", link, false)?;
            }
            NamelessTagKind::Staged => {
                addr_field(TAG, "link", link, false)?;
                if self.link.generation() != self.birth_gen {
                    return Err(tag_range(
                        "link",
                        link,
                        "a staged tag's home address has generation birth_gen",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Writes the 32-byte tag, then `md`, into `out[..32 + md.len()]`; the
    /// rest of `out` is untouched. Panics (a bug) if `md.len()` is not a
    /// multiple of 4 or above [`MAX_TAG_MD_BYTES`], if `out` is too short,
    /// or if the tag breaks a rule decode checks (birth_gen 0, a link that
    /// does not fit the kind).
    pub fn encode(&self, md: &[u8], out: &mut [u8]) {
        assert!(
            md.len().is_multiple_of(4) && md.len() <= MAX_TAG_MD_BYTES,
            "nameless tag md of {} bytes",
            md.len()
        );
        let end = TAG_BYTES + md.len();
        assert!(
            out.len() >= end,
            "nameless tag buffer of {} bytes",
            out.len()
        );
        if let Err(e) = self.check() {
            panic!("nameless tag {self:?} does not encode: {e}");
        }
        let out = &mut out[..end];
        put_u8(out, T_KIND_OFF, self.kind.code());
        put_u8(out, T_VERSION_OFF, TAG_VERSION);
        put_u8(out, T_MD_WORDS_OFF, (md.len() / 4) as u8);
        put_u8(out, T_RESERVED_OFF, 0);
        put_u32(out, T_BIRTH_GEN_OFF, self.birth_gen);
        put_u64(out, T_LINK_OFF, self.link.to_u64());
        put_u64(out, T_SEQ_OFF, self.seq);
        put_u32(out, T_DATA_CRC_OFF, self.data_crc);
        out[TAG_BYTES..].copy_from_slice(md);
        let crc = nameless_tag_crc(out, md);
        put_u32(out, T_TAG_CRC_OFF, crc);
    }

    /// Decodes the nameless tag at the start of a block's OOB bytes (the
    /// whole OOB area: its length is the device's `oob_size_bytes`).
    /// `Ok(None)` when the first 32 bytes are erased (all 0x00 or 0xFF).
    /// Otherwise the tag and its md (`4 × md_words` bytes after it), checked
    /// in the order of format.md §11: version, `32 + 4 × md_words <=
    /// oob.len()` (else `Length`), tag_crc, kind (5–7; another is
    /// `UnknownTagKind`), reserved zero, `birth_gen >= 1`, the link (kinds
    /// 6 and 7 have one; kind 7's carries `birth_gen`; a link is none or a
    /// well-formed address). Bytes past the md are not looked at.
    pub fn decode(oob: &[u8]) -> Result<Option<(NamelessTag, &[u8])>, FormatError> {
        need(TAG, oob, TAG_BYTES)?;
        if is_erased(&oob[..TAG_BYTES]) {
            return Ok(None);
        }
        let version = get_u8(oob, T_VERSION_OFF);
        if version != TAG_VERSION {
            return Err(tag_version_error(version));
        }
        let md_len = 4 * usize::from(get_u8(oob, T_MD_WORDS_OFF));
        need(
            "nameless tag (32 + 4 × md_words bytes of OOB)",
            oob,
            TAG_BYTES + md_len,
        )?;
        let md = &oob[TAG_BYTES..TAG_BYTES + md_len];
        let stored = get_u32(oob, T_TAG_CRC_OFF);
        let computed = nameless_tag_crc(oob, md);
        if stored != computed {
            return Err(FormatError::BadCrc {
                structure: TAG,
                stored,
                computed,
            });
        }
        let code = get_u8(oob, T_KIND_OFF);
        let kind =
            NamelessTagKind::from_code(code).ok_or(FormatError::UnknownTagKind { kind: code })?;
        zero(TAG, "reserved (byte 3)", get_u8(oob, T_RESERVED_OFF).into())?;
        let tag = NamelessTag {
            kind,
            birth_gen: get_u32(oob, T_BIRTH_GEN_OFF),
            link: NamelessAddr::from_u64(get_u64(oob, T_LINK_OFF)),
            seq: get_u64(oob, T_SEQ_OFF),
            data_crc: get_u32(oob, T_DATA_CRC_OFF),
        };
        tag.check()?;
        Ok(Some((tag, md)))
    }
}

fn tag_version_error(version: u8) -> FormatError {
    let (found, supported) = (u32::from(version), u32::from(TAG_VERSION));
    if found > supported {
        FormatError::NewerVersion {
            structure: TAG,
            found,
            supported,
        }
    } else {
        FormatError::BadVersion {
            structure: TAG,
            found,
            supported,
        }
    }
}

/// Either kind of tag, for code that scans a block's OOB without knowing
/// its zone's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnyTag<'a> {
    /// Tag kinds 1–4 ([`Tag`]).
    Block(Tag),
    /// Tag kinds 5–7 and the md after it.
    Nameless(NamelessTag, &'a [u8]),
}

/// Decodes whichever tag is at the start of `oob` (the block's whole OOB
/// area): kinds 5–7 as [`NamelessTag::decode`], anything else as
/// [`Tag::decode`] (which refuses a kind it does not know). `Ok(None)` when
/// the first 32 bytes are erased.
pub fn decode_any_tag(oob: &[u8]) -> Result<Option<AnyTag<'_>>, FormatError> {
    need(TAG, oob, TAG_BYTES)?;
    if NamelessTagKind::from_code(oob[T_KIND_OFF]).is_some() {
        Ok(NamelessTag::decode(oob)?.map(|(t, md)| AnyTag::Nameless(t, md)))
    } else {
        Ok(Tag::decode(oob)?.map(AnyTag::Block))
    }
}

// ---- md block (placement log) ---------------------------------------------------

const MD_BLOCK: &str = "nameless md block";

/// "ZFNM" as bytes Z F N M.
pub const MD_MAGIC: [u8; 4] = *b"ZFNM";
/// Md block format version written by this build.
pub const MD_VERSION: u16 = 1;
/// Md blocks after each full group of data blocks.
pub const MD_BLOCKS_PER_GROUP: u64 = 8;
/// An md entry's `birth_gen` meaning "no block here" (pad, torn, lost).
pub const NO_BLOCK_GEN: u32 = u32::MAX;
/// Bytes of an md entry before its md (home_offset, data_crc, birth_gen).
pub const MD_ENTRY_FIXED_BYTES: usize = 12;

const M_MAGIC_OFF: usize = 0;
const M_VERSION_OFF: usize = M_MAGIC_OFF + 4;
const M_KIND_OFF: usize = M_VERSION_OFF + 2;
const M_MD_WORDS_OFF: usize = M_KIND_OFF + 1;
const M_ZONE_OFF: usize = M_MD_WORDS_OFF + 1;
const M_GROUP_OFF: usize = M_ZONE_OFF + 4;
const M_FIRST_ENTRY_OFF: usize = M_GROUP_OFF + 4;
const M_ENTRY_COUNT_OFF: usize = M_FIRST_ENTRY_OFF + 4;
const M_GROUP_DATA_OFF: usize = M_ENTRY_COUNT_OFF + 4;
const M_CRC_OFF: usize = M_GROUP_DATA_OFF + 4;
/// Bytes of an md block before its entries.
pub const MD_HEADER_BYTES: usize = M_CRC_OFF + 4;
const _: () = assert!(MD_HEADER_BYTES == 32 && M_ZONE_OFF == 8 && M_CRC_OFF == 28);

/// Md entries that fit one md block: `E = (block_size - 32) / (12 +
/// md_bytes)` (92 for 4 KiB blocks and 32-byte md).
pub fn entries_per_md_block(block_size: usize, md_bytes: usize) -> usize {
    block_size.saturating_sub(MD_HEADER_BYTES) / MD_ENTRY_FIXED_BYTES.saturating_add(md_bytes)
}

/// Where the data blocks and md blocks of a nameless zone lie with md in
/// the log (docs/format.md §11, "Md block"): group `k` starts at offset
/// `k × (G + 8)`, `G = 8 × E` data blocks then their 8 md blocks; the
/// zone's last group holds, of the `r` blocks the capacity leaves,
/// `r - ceil(r / (E + 1))` data blocks, then `ceil(d / E)` md blocks. A
/// group closed early holds `d < G` data blocks with its `ceil(d / E)` md
/// blocks right after them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MdLayout {
    /// `E`: entries per md block (>= 1).
    pub entries_per_block: u64,
    /// `G = 8 × E`: data blocks of a full group.
    pub group_blocks: u64,
    pub zone_capacity_blocks: u64,
}

impl MdLayout {
    /// The layout for `block_size`-byte blocks and `md_bytes` of md in
    /// zones of `zone_capacity_blocks`. Panics (a bug) if no entry fits a
    /// block.
    pub fn new(block_size: usize, md_bytes: usize, zone_capacity_blocks: u64) -> MdLayout {
        let e = entries_per_md_block(block_size, md_bytes);
        assert!(
            e >= 1,
            "no md entry of {md_bytes} bytes fits a {block_size}-byte block"
        );
        MdLayout::from_group_blocks(8 * e as u64, zone_capacity_blocks)
    }

    /// The layout for a group size `G` as the checkpoint records it (a
    /// non-zero multiple of 8). Panics (a bug) otherwise.
    pub fn from_group_blocks(g: u64, zone_capacity_blocks: u64) -> MdLayout {
        assert!(g >= 8 && g.is_multiple_of(8), "md group of {g} blocks");
        MdLayout {
            entries_per_block: g / 8,
            group_blocks: g,
            zone_capacity_blocks,
        }
    }

    /// Blocks from one group's start to the next's: `G + 8`.
    pub fn group_stride(&self) -> u64 {
        self.group_blocks + MD_BLOCKS_PER_GROUP
    }

    /// Offset of group `k`'s first data block.
    pub fn group_start(&self, k: u64) -> u64 {
        k * self.group_stride()
    }

    /// The group an offset lies in.
    pub fn group_of(&self, offset: u64) -> u64 {
        offset / self.group_stride()
    }

    /// Md blocks after a group of `data_blocks` data blocks: `ceil(d / E)`.
    pub fn md_blocks_for(&self, data_blocks: u64) -> u64 {
        data_blocks.div_ceil(self.entries_per_block)
    }

    /// Data blocks group `k` holds in a zone written full (0 past the last).
    pub fn group_data_blocks(&self, k: u64) -> u64 {
        let full = self.zone_capacity_blocks / self.group_stride();
        let r = self.zone_capacity_blocks % self.group_stride();
        match k.cmp(&full) {
            std::cmp::Ordering::Less => self.group_blocks,
            std::cmp::Ordering::Equal => r - r.div_ceil(self.entries_per_block + 1),
            std::cmp::Ordering::Greater => 0,
        }
    }

    /// Groups with at least one data block in a zone written full.
    pub fn groups(&self) -> u64 {
        let full = self.zone_capacity_blocks / self.group_stride();
        full + u64::from(self.group_data_blocks(full) > 0)
    }

    /// Nameless data blocks a zone written full holds.
    pub fn data_blocks(&self) -> u64 {
        let full = self.zone_capacity_blocks / self.group_stride();
        full * self.group_blocks + self.group_data_blocks(full)
    }

    /// Offset past the last data block of a zone written full (its data
    /// end, with its last group's md blocks where the layout has them).
    pub fn full_data_end(&self) -> u64 {
        let last = self.groups().saturating_sub(1);
        self.group_start(last) + self.group_data_blocks(last)
    }

    /// True when a zone written full has a data block at `offset` (not an
    /// md block, not past the capacity, not a block the last group leaves
    /// unused).
    pub fn is_data_offset(&self, offset: u64) -> bool {
        offset < self.zone_capacity_blocks
            && offset % self.group_stride() < self.group_data_blocks(self.group_of(offset))
    }

    /// The md block holding the entry of the data block at `offset` of a
    /// group that holds `group_data_blocks` data blocks, written right
    /// after them: `(md block offset, entry index in that block)`. `None`
    /// when `offset` is not among the group's data blocks.
    pub fn md_entry_of(&self, offset: u64, group_data_blocks: u64) -> Option<(u64, usize)> {
        let k = self.group_of(offset);
        let j = offset - self.group_start(k);
        if j >= group_data_blocks.min(self.group_blocks) {
            return None;
        }
        let block = j / self.entries_per_block;
        let at = self.group_start(k) + group_data_blocks + block;
        Some((at, (j % self.entries_per_block) as usize))
    }
}

impl MdLayout {
    /// Where the md block holding the entry of the data block at `offset`
    /// lies in a zone whose data ends at `data_end` and whose last group's
    /// md blocks landed at `last_md_at` (`u32::MAX`: right after its data;
    /// section 18): (block offset, entry index). Every group before the
    /// last is full. `None` past the data end.
    pub fn md_location(&self, data_end: u32, last_md_at: u32, offset: u64) -> Option<(u64, usize)> {
        let data_end = u64::from(data_end);
        if offset >= data_end {
            return None;
        }
        let k = self.group_of(offset);
        let start = self.group_start(k);
        if k < self.group_of(data_end - 1) {
            return self.md_entry_of(offset, self.group_blocks);
        }
        let d = data_end - start;
        let (at, i) = self.md_entry_of(offset, d)?;
        if last_md_at == u32::MAX {
            return Some((at, i));
        }
        Some((u64::from(last_md_at) + (at - start - d), i))
    }

    /// The entry of the block at `offset` of `zone` in md block `bytes`, if
    /// it decodes as the md of that block's group.
    pub fn entry_in_block(
        &self,
        zone: ZoneId,
        offset: u64,
        bytes: &[u8],
        md_bytes: usize,
    ) -> Option<MdEntry> {
        let b = MdBlock::decode(bytes, md_bytes).ok()?;
        let k = self.group_of(offset);
        if b.kind != MdBlockKind::Group || b.zone != zone || u64::from(b.group) != k {
            return None;
        }
        let i = offset.checked_sub(self.group_start(k) + u64::from(b.first_entry))?;
        b.entries
            .into_iter()
            .nth(i as usize)
            .filter(|e| u64::from(e.home_offset) == offset)
    }
}

/// Data blocks group `group` of a zone of `zone_capacity_blocks` holds
/// when written full, with `block_size`-byte blocks and `md_bytes` of md
/// ([`MdLayout::group_data_blocks`]).
pub fn group_data_blocks(
    zone_capacity_blocks: u64,
    block_size: usize,
    md_bytes: usize,
    group: u64,
) -> u64 {
    MdLayout::new(block_size, md_bytes, zone_capacity_blocks).group_data_blocks(group)
}

/// What an md block indexes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MdBlockKind {
    /// The md of a group of a nameless zone.
    Group = 1,
    /// The staging index of an in-place collection (in the scratch zone).
    StagingIndex = 2,
}

impl MdBlockKind {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<MdBlockKind> {
        match code {
            1 => Some(MdBlockKind::Group),
            2 => Some(MdBlockKind::StagingIndex),
            _ => None,
        }
    }
}

/// One md entry: a data block's home offset, data CRC, birth generation
/// and md. An entry with `birth_gen` [`NO_BLOCK_GEN`] names no block (pad,
/// torn, lost); its CRC and md are zero.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MdEntry {
    pub home_offset: u32,
    pub data_crc: u32,
    pub birth_gen: u32,
    pub md: Vec<u8>,
}

impl MdEntry {
    /// The entry of a home offset that holds no block.
    pub fn absent(home_offset: u32, md_bytes: usize) -> MdEntry {
        MdEntry {
            home_offset,
            data_crc: 0,
            birth_gen: NO_BLOCK_GEN,
            md: vec![0; md_bytes],
        }
    }

    pub fn is_present(&self) -> bool {
        self.birth_gen != NO_BLOCK_GEN
    }

    /// Bytes of an encoded entry with `md_bytes` of md.
    pub fn encoded_bytes(md_bytes: usize) -> usize {
        MD_ENTRY_FIXED_BYTES + md_bytes
    }

    pub(crate) fn write(&self, w: &mut Writer) {
        w.u32(self.home_offset);
        w.u32(self.data_crc);
        w.u32(self.birth_gen);
        w.bytes.extend_from_slice(&self.md);
    }

    /// Reads one entry of `md_bytes` from `r` (whose length the caller
    /// checked) and checks it: `birth_gen >= 1`; an absent entry has CRC
    /// and md zero.
    pub(crate) fn read<'a>(
        structure: &'static str,
        bytes: &'a [u8],
        r: &mut Reader<'a>,
        md_bytes: usize,
    ) -> Result<MdEntry, FormatError> {
        let (home_offset, data_crc, birth_gen) = (r.u32(), r.u32(), r.u32());
        let at = r.pos();
        let md = bytes[at..at + md_bytes].to_vec();
        *r = Reader::new(bytes, at + md_bytes);
        let e = MdEntry {
            home_offset,
            data_crc,
            birth_gen,
            md,
        };
        e.check(structure)?;
        Ok(e)
    }

    fn check(&self, structure: &'static str) -> Result<(), FormatError> {
        if self.birth_gen == 0 {
            return Err(FormatError::OutOfRange {
                structure,
                field: "entry birth_gen",
                value: 0,
                rule: "at least 1 (u32::MAX: no block)",
            });
        }
        if !self.is_present() {
            zero(
                structure,
                "data_crc of an entry with no block",
                self.data_crc.into(),
            )?;
            zero_bytes(structure, "md of an entry with no block", &self.md)?;
        }
        Ok(())
    }
}

/// One md block (docs/format.md §11, "Md block").
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MdBlock {
    pub kind: MdBlockKind,
    /// Md bytes per entry (the volume's `md_bytes`).
    pub md_bytes: usize,
    /// The zone its entries' home offsets are in (staging index: the victim).
    pub zone: ZoneId,
    /// Group index in the zone (staging index: in the staging run).
    pub group: u32,
    /// Entry index of entry 0 within its group: a multiple of `E`.
    pub first_entry: u32,
    /// Data blocks the group holds (staging index: blocks the group of the
    /// run stages), 1 ..= `G`.
    pub group_data_blocks: u32,
    /// `min(E, group_data_blocks - first_entry)` entries. In a group's md
    /// (kind 1) entry `i` has home offset `group × (G + 8) + first_entry + i`.
    pub entries: Vec<MdEntry>,
}

fn md_range(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: MD_BLOCK,
        field,
        value,
        rule,
    }
}

impl MdBlock {
    /// The entries of the md block of a group holding `group_data_blocks`
    /// that starts at entry `first_entry`: `min(E, group_data_blocks -
    /// first_entry)`.
    pub fn entry_count(
        block_size: usize,
        md_bytes: usize,
        group_data_blocks: u32,
        first_entry: u32,
    ) -> usize {
        let e = entries_per_md_block(block_size, md_bytes);
        e.min(group_data_blocks.saturating_sub(first_entry) as usize)
    }

    /// Checks the header fields and entries against the rules of decode.
    fn check(&self, block_size: usize) -> Result<(), FormatError> {
        if !valid_md_bytes(self.md_bytes) {
            return Err(md_range(
                "md_words",
                (self.md_bytes / 4) as u64,
                "the volume's md_bytes ÷ 4 (md_bytes 4 ..= 64, a multiple of 4)",
            ));
        }
        let e = entries_per_md_block(block_size, self.md_bytes) as u64;
        let g = 8 * e;
        let (first, data) = (
            u64::from(self.first_entry),
            u64::from(self.group_data_blocks),
        );
        if data == 0 || data > g {
            return Err(md_range("group_data_blocks", data, "1 ..= G (8 × E)"));
        }
        if !first.is_multiple_of(e) || first >= data {
            return Err(md_range(
                "first_entry",
                first,
                "a multiple of E below group_data_blocks",
            ));
        }
        let count = e.min(data - first);
        if self.entries.len() as u64 != count {
            return Err(md_range(
                "entry_count",
                self.entries.len() as u64,
                "min(E, group_data_blocks - first_entry)",
            ));
        }
        for (i, entry) in self.entries.iter().enumerate() {
            if entry.md.len() != self.md_bytes {
                return Err(md_range(
                    "entry md length",
                    entry.md.len() as u64,
                    "md_bytes",
                ));
            }
            entry.check(MD_BLOCK)?;
            if self.kind == MdBlockKind::Group {
                let home = u64::from(self.group) * (g + MD_BLOCKS_PER_GROUP) + first + i as u64;
                if u64::from(entry.home_offset) != home {
                    return Err(md_range(
                        "entry home_offset",
                        entry.home_offset.into(),
                        "group × (G + 8) + first_entry + the entry's index",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Encodes into one block of `block_size` bytes (a power of two >=
    /// 512). Panics (a bug) if the block breaks a rule decode checks;
    /// checks its own output by decoding it.
    pub fn encode(&self, block_size: usize) -> Vec<u8> {
        assert!(md_block_size_ok(block_size), "md block size {block_size}");
        if let Err(e) = self.check(block_size) {
            panic!("md block does not encode: {e}");
        }
        let mut w = Writer::with_capacity(block_size);
        w.bytes.extend_from_slice(&MD_MAGIC);
        w.u16(MD_VERSION);
        w.u8(self.kind.code());
        w.u8((self.md_bytes / 4) as u8);
        w.u32(self.zone);
        w.u32(self.group);
        w.u32(self.first_entry);
        w.u32(self.entries.len() as u32);
        w.u32(self.group_data_blocks);
        w.u32(0);
        self.entries.iter().for_each(|e| e.write(&mut w));
        let mut b = w.bytes;
        b.resize(block_size, 0);
        let crc = crc32c::crc32c(&b);
        put_u32(&mut b, M_CRC_OFF, crc);
        assert_eq!(
            MdBlock::decode(&b, self.md_bytes).as_ref(),
            Ok(self),
            "md block does not round-trip"
        );
        b
    }

    /// Decodes one whole md block of a volume with `md_bytes` of md.
    /// Order: block size (a power of two >= 512) → erased (`Erased`) →
    /// magic → version → CRC (of the whole block with the CRC field
    /// zeroed) → kind → `md_words × 4 == md_bytes` → `1 <= group_data_blocks
    /// <= G` → `first_entry` a multiple of `E` below it → `entry_count =
    /// min(E, group_data_blocks - first_entry)` → each entry (`birth_gen >=
    /// 1`; an absent entry's CRC and md zero; in a group's md the home
    /// offset its position gives) → padding zero.
    pub fn decode(bytes: &[u8], md_bytes: usize) -> Result<MdBlock, FormatError> {
        let block_size = bytes.len();
        if !md_block_size_ok(block_size) {
            return Err(md_range(
                "block size",
                block_size as u64,
                "a power of two >= 512",
            ));
        }
        if is_erased(bytes) {
            return Err(FormatError::Erased {
                structure: MD_BLOCK,
            });
        }
        let magic: [u8; 4] = crate::codec::get_bytes(bytes, M_MAGIC_OFF);
        if magic != MD_MAGIC {
            return Err(FormatError::BadMagic {
                structure: MD_BLOCK,
                expected: u32::from_le_bytes(MD_MAGIC).into(),
                found: u32::from_le_bytes(magic).into(),
            });
        }
        let version = get_u16(bytes, M_VERSION_OFF);
        if version != MD_VERSION {
            let (found, supported) = (u32::from(version), u32::from(MD_VERSION));
            return Err(if found > supported {
                FormatError::NewerVersion {
                    structure: MD_BLOCK,
                    found,
                    supported,
                }
            } else {
                FormatError::BadVersion {
                    structure: MD_BLOCK,
                    found,
                    supported,
                }
            });
        }
        let stored = get_u32(bytes, M_CRC_OFF);
        let mut crc = crc32c::crc32c(&bytes[..M_CRC_OFF]);
        crc = crc32c::crc32c_append(crc, &[0; 4]);
        let computed = crc32c::crc32c_append(crc, &bytes[MD_HEADER_BYTES..]);
        if stored != computed {
            return Err(FormatError::BadCrc {
                structure: MD_BLOCK,
                stored,
                computed,
            });
        }
        let code = get_u8(bytes, M_KIND_OFF);
        let kind = MdBlockKind::from_code(code)
            .ok_or_else(|| md_range("kind", code.into(), "1 group md, 2 staging index"))?;
        let words = usize::from(get_u8(bytes, M_MD_WORDS_OFF));
        if words * 4 != md_bytes || !valid_md_bytes(md_bytes) {
            return Err(md_range(
                "md_words",
                words as u64,
                "the volume's md_bytes ÷ 4 (md_bytes 4 ..= 64, a multiple of 4)",
            ));
        }
        let entry_bytes = MdEntry::encoded_bytes(md_bytes);
        let count = get_u32(bytes, M_ENTRY_COUNT_OFF) as usize;
        let e = entries_per_md_block(block_size, md_bytes);
        if count > e {
            return Err(md_range(
                "entry_count",
                count as u64,
                "at most E = (block_size - 32) / (12 + md_bytes)",
            ));
        }
        let end = MD_HEADER_BYTES + count * entry_bytes;
        let mut r = Reader::new(bytes, MD_HEADER_BYTES);
        let mut entries = Vec::with_capacity(count);
        for _ in 0..count {
            entries.push(MdEntry::read(MD_BLOCK, bytes, &mut r, md_bytes)?);
        }
        zero_bytes(MD_BLOCK, "padding after the entries", &bytes[end..])?;
        let block = MdBlock {
            kind,
            md_bytes,
            zone: get_u32(bytes, M_ZONE_OFF),
            group: get_u32(bytes, M_GROUP_OFF),
            first_entry: get_u32(bytes, M_FIRST_ENTRY_OFF),
            group_data_blocks: get_u32(bytes, M_GROUP_DATA_OFF),
            entries,
        };
        block.check(block_size)?;
        Ok(block)
    }
}

fn md_block_size_ok(block_size: usize) -> bool {
    block_size.is_power_of_two()
        && block_size >= crate::note::MIN_LOG_BLOCK_BYTES
        && u32::try_from(block_size).is_ok()
}

// ---- checkpoint sections 16-23 ---------------------------------------------------

/// Section kinds of the nameless state in a version-3 checkpoint.
pub mod nameless_section {
    pub const HEADER: u32 = 16;
    pub const GENERATIONS: u32 = 17;
    pub const ZONES: u32 = 18;
    pub const VALIDITY: u32 = 19;
    pub const REMAP: u32 = 20;
    pub const UNCOMMITTED: u32 = 21;
    pub const OPEN_MD: u32 = 22;
    pub const IN_PLACE_JOB: u32 = 23;
    pub const GAP_FILLS: u32 = 24;
}

/// Payload bytes of section 16.
pub const NAMELESS_HEADER_BYTES: usize = 32;

/// Section 16's flags, bit 0: a gap fill's link frees the block it names
/// at its job's `InPlaceDone` (overwrite fills, format.md §11 step 9).
const HEADER_FLAG_FILL_LINKS: u8 = 1;
/// Bytes of one zone record of section 18.
pub const NAMELESS_ZONE_RECORD_BYTES: usize = 24;
/// Bytes of one remap entry of section 20.
pub const REMAP_ENTRY_BYTES: usize = 16;
/// Payload bytes of section 23.
pub const IN_PLACE_JOB_BYTES: usize = 32;
/// Bytes of one gap fill of section 24.
pub const GAP_FILL_BYTES: usize = 8;
/// Section 18 flag: the zone's last group's md blocks are written.
pub const ZONE_FLAG_MD_WRITTEN: u32 = 1;
/// Section 18 flag: the zone is held by a lane.
pub const ZONE_FLAG_HELD: u32 = 2;

/// Section 16: the volume's nameless settings and its newest commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NamelessHeader {
    /// Md bytes per block ([`valid_md_bytes`]).
    pub md_bytes: u16,
    pub placement: MdPlacement,
    /// `G`, the data blocks of a full md group (placement log), else 0.
    pub group_blocks: u32,
    pub remap_capacity: u32,
    pub uncommitted_capacity: u32,
    /// Seq of the newest commit; 0: none. Below the checkpoint's next seq.
    pub commit_seq: Seq,
    /// Flags bit 0: a gap fill's link is freed at its job's `InPlaceDone`.
    /// This build sets it in every checkpoint (an older build refuses the
    /// nonzero byte rather than make such a fill live without its free)
    /// and reads either value alike (an older build's fills have none).
    pub fill_links: bool,
}

/// One nameless zone (section 18) and its validity bitmap (section 19).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NamelessZoneRecord {
    /// A zone of kind 7 or 8 in the zone table.
    pub zone: ZoneId,
    /// Offset past the zone's last data block.
    pub data_end: u32,
    /// Where the last group's md blocks landed when not right after its
    /// data blocks (after a cut); `None`: regular.
    pub last_md_at: Option<u32>,
    /// Set bits of `valid`.
    pub live_blocks: u32,
    /// The last group's md blocks are written (placement log).
    pub md_written: bool,
    /// Held by a lane.
    pub held: bool,
    /// `ceil(data_end / 64)` words; bit `i` of word `j` is offset `64j + i`.
    pub valid: Vec<u64>,
}

/// The md entries of an open zone's group whose md blocks had not been
/// written at capture (section 22).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OpenMdRecord {
    pub zone: ZoneId,
    /// Entries `0 .. n` of one group, in home-offset order from its start.
    pub entries: Vec<MdEntry>,
}

/// A pending in-place collection (section 23).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InPlaceJobRecord {
    pub victim: ZoneId,
    pub scratch: ZoneId,
    pub first_scratch_offset: u32,
    pub staged_blocks: u32,
    /// The generation of the job's gap fills; 0: none.
    pub gap_gen: u32,
    /// Seq of its InPlaceStaged note.
    pub staged_seq: Seq,
}

/// The nameless state of a checkpoint (sections 16–24). The default is
/// empty, and an empty image writes no section, so a volume without
/// nameless state encodes as before. A section is written only when its
/// part is non-empty; a reader takes an absent section as empty.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct NamelessImage {
    /// Section 16; every other section needs it.
    pub header: Option<NamelessHeader>,
    /// Section 17: `(gen, base_gen)` of every zone, or empty (all zero).
    pub generations: Vec<(u32, u32)>,
    /// Sections 18 and 19, zones strictly increasing.
    pub zones: Vec<NamelessZoneRecord>,
    /// Section 20: `(old, new)`, old strictly increasing.
    pub remap: Vec<(NamelessAddr, NamelessAddr)>,
    /// Section 21, strictly increasing.
    pub uncommitted: Vec<Ppa>,
    /// Section 22 (placement log), zones strictly increasing.
    pub open_md: Vec<OpenMdRecord>,
    /// Section 23.
    pub job: Option<InPlaceJobRecord>,
    /// Section 24: live gap fills as (block, birth generation), blocks
    /// strictly increasing.
    pub fills: Vec<(Ppa, u32)>,
}

/// Worst-case bytes the nameless sections add to a checkpoint
/// (format.md §11):
/// `8 × zone_count + 32 × data_zones + physical_blocks / 8 +
/// 16 × remap_capacity + 4 × uncommitted_capacity +
/// 2 × G × (12 + md_bytes) + 1 KiB`.
/// Not yet counted by `max_checkpoint_bytes`.
pub fn nameless_checkpoint_bytes_bound(
    zone_count: u64,
    data_zones: u64,
    physical_blocks: u64,
    remap_capacity: u64,
    uncommitted_capacity: u64,
    g: u64,
    md_bytes: u64,
) -> u64 {
    8 * zone_count
        + 32 * data_zones
        + physical_blocks / 8
        + 16 * remap_capacity
        + 4 * uncommitted_capacity
        + 2 * g * (MD_ENTRY_FIXED_BYTES as u64 + md_bytes)
        + 1024
}

/// What the checkpoint around the nameless sections says, for their rules.
pub(crate) struct SectionContext<'a> {
    pub next_seq: Seq,
    /// The zone table's kinds, one per zone.
    pub zone_kinds: &'a [u8],
    /// With a device at hand: its physical blocks and zone capacity.
    pub device: Option<(u64, u64)>,
}

const SECTION: &str = "checkpoint nameless section";

fn bad(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: SECTION,
        field,
        value,
        rule,
    }
}

/// Zone table kinds (format.md §11): 7 data-nameless, 8
/// data-nameless-moved, 9 nameless-scratch.
const ZONE_KIND_NAMELESS: u8 = 7;
const ZONE_KIND_NAMELESS_MOVED: u8 = 8;
const ZONE_KIND_SCRATCH: u8 = 9;

/// The group size `G` of a volume with `md_bytes` of md and some block
/// size this format allows (a power of two in 512 ..= 65536).
fn is_group_size(g: u32, md_bytes: usize) -> bool {
    (9..=16).any(|shift| 8 * entries_per_md_block(1 << shift, md_bytes) as u64 == u64::from(g))
}

/// `payload.len() == fixed + count × record`, checked before allocating.
fn sized(
    structure: &'static str,
    payload: &[u8],
    fixed: u64,
    count: u64,
    record: u64,
) -> Result<(), FormatError> {
    let implied = count.checked_mul(record).and_then(|n| n.checked_add(fixed));
    if implied != Some(payload.len() as u64) {
        return Err(FormatError::Length {
            structure,
            expected: implied.unwrap_or(u64::MAX),
            actual: payload.len() as u64,
        });
    }
    Ok(())
}

/// A `u32 count, u32 reserved` prefix: the count, with the reserved word
/// zero and the count at least 1 (a section is written only with content).
fn counted(structure: &'static str, payload: &[u8]) -> Result<u32, FormatError> {
    need(structure, payload, 8)?;
    zero(
        SECTION,
        "reserved (after the count)",
        get_u32(payload, 4).into(),
    )?;
    let count = get_u32(payload, 0);
    if count == 0 {
        return Err(bad(
            "count",
            0,
            "a section is written only when it has content",
        ));
    }
    Ok(count)
}

impl NamelessImage {
    pub fn is_empty(&self) -> bool {
        *self == NamelessImage::default()
    }

    /// The sections this image writes, `(kind, payload)` in kind order.
    pub(crate) fn sections(&self) -> Vec<(u32, Vec<u8>)> {
        use nameless_section::*;
        let mut out = Vec::new();
        // Without a header the other parts must be empty (decode refuses
        // them otherwise, and `CheckpointImage::encode` checks its output).
        if let Some(h) = self.header {
            let mut w = Writer::with_capacity(NAMELESS_HEADER_BYTES);
            w.u16(h.md_bytes);
            w.u8(h.placement.code());
            w.u8(if h.fill_links {
                HEADER_FLAG_FILL_LINKS
            } else {
                0
            });
            w.u32(h.group_blocks);
            w.u32(h.remap_capacity);
            w.u32(h.uncommitted_capacity);
            w.u64(h.commit_seq);
            w.u64(0);
            out.push((HEADER, w.bytes));
        }
        if !self.generations.is_empty() {
            let mut w = Writer::with_capacity(8 * self.generations.len());
            for &(gen, base) in &self.generations {
                w.u32(gen);
                w.u32(base);
            }
            out.push((GENERATIONS, w.bytes));
        }
        if !self.zones.is_empty() {
            let n = self.zones.len();
            let mut w = Writer::with_capacity(8 + n * NAMELESS_ZONE_RECORD_BYTES);
            w.u32(u32::try_from(n).expect("nameless zones fit u32"));
            w.u32(0);
            for z in &self.zones {
                w.u32(z.zone);
                w.u32(z.data_end);
                w.u32(z.last_md_at.unwrap_or(u32::MAX));
                w.u32(z.live_blocks);
                let flags = if z.md_written {
                    ZONE_FLAG_MD_WRITTEN
                } else {
                    0
                } | if z.held { ZONE_FLAG_HELD } else { 0 };
                w.u32(flags);
                w.u32(0);
            }
            out.push((ZONES, w.bytes));
            let words: usize = self.zones.iter().map(|z| z.valid.len()).sum();
            if words > 0 {
                let mut w = Writer::with_capacity(8 * words);
                self.zones
                    .iter()
                    .flat_map(|z| &z.valid)
                    .for_each(|&word| w.u64(word));
                out.push((VALIDITY, w.bytes));
            }
        }
        if !self.remap.is_empty() {
            let n = self.remap.len();
            let mut w = Writer::with_capacity(8 + n * REMAP_ENTRY_BYTES);
            w.u32(u32::try_from(n).expect("remap entries fit u32"));
            w.u32(0);
            for &(old, new) in &self.remap {
                w.u64(old.to_u64());
                w.u64(new.to_u64());
            }
            out.push((REMAP, w.bytes));
        }
        if !self.uncommitted.is_empty() {
            let n = self.uncommitted.len();
            let mut w = Writer::with_capacity(8 + 4 * n);
            w.u32(u32::try_from(n).expect("uncommitted blocks fit u32"));
            w.u32(0);
            self.uncommitted.iter().for_each(|p| w.u32(p.0));
            out.push((UNCOMMITTED, w.bytes));
        }
        if !self.open_md.is_empty() {
            let mut w = Writer::with_capacity(8);
            w.u32(u32::try_from(self.open_md.len()).expect("open zones fit u32"));
            w.u32(0);
            for z in &self.open_md {
                w.u32(z.zone);
                w.u32(u32::try_from(z.entries.len()).expect("entries fit u32"));
                z.entries.iter().for_each(|e| e.write(&mut w));
            }
            out.push((OPEN_MD, w.bytes));
        }
        if let Some(j) = self.job {
            let mut w = Writer::with_capacity(IN_PLACE_JOB_BYTES);
            w.u32(j.victim);
            w.u32(j.scratch);
            w.u32(j.first_scratch_offset);
            w.u32(j.staged_blocks);
            w.u32(j.gap_gen);
            w.u32(0);
            w.u64(j.staged_seq);
            out.push((IN_PLACE_JOB, w.bytes));
        }
        if !self.fills.is_empty() {
            let n = self.fills.len();
            let mut w = Writer::with_capacity(8 + GAP_FILL_BYTES * n);
            w.u32(u32::try_from(n).expect("gap fills fit u32"));
            w.u32(0);
            for &(ppa, birth_gen) in &self.fills {
                w.u32(ppa.0);
                w.u32(birth_gen);
            }
            out.push((GAP_FILLS, w.bytes));
        }
        out
    }

    /// Decodes sections 16–24 from their payloads (`payloads[k - 16]`,
    /// `None` when absent) and checks every rule of format.md §11's section
    /// table against the rest of the checkpoint (`ctx`). Each payload's
    /// size is checked against its own counts (section 19's against
    /// section 18's) before anything is allocated.
    pub(crate) fn decode(
        payloads: &[Option<&[u8]>; 9],
        ctx: &SectionContext,
    ) -> Result<NamelessImage, FormatError> {
        let [header, gens, zones, validity, remap, uncommitted, open_md, job, fills] = *payloads;
        let nameless_kind = |k: &u8| (ZONE_KIND_NAMELESS..=ZONE_KIND_SCRATCH).contains(k);
        let Some(header) = header else {
            if let Some(k) = payloads.iter().position(Option::is_some) {
                return Err(bad(
                    "kind",
                    k as u64 + 16,
                    "nameless sections 17 ..= 24 only with section 16",
                ));
            }
            if let Some(z) = ctx.zone_kinds.iter().position(nameless_kind) {
                return Err(bad(
                    "zone table kind",
                    ctx.zone_kinds[z].into(),
                    "nameless zone kinds 7 ..= 9 only with section 16",
                ));
            }
            return Ok(NamelessImage::default());
        };
        let header = decode_header(header, ctx)?;
        let mut image = NamelessImage {
            header: Some(header),
            ..NamelessImage::default()
        };
        if let Some(p) = gens {
            image.generations = decode_generations(p, ctx)?;
        }
        if let Some(p) = zones {
            image.zones = decode_zones(p, &image, ctx)?;
        }
        decode_validity(validity, &mut image, ctx)?;
        let covered: Vec<ZoneId> = image.zones.iter().map(|z| z.zone).collect();
        for (z, kind) in ctx.zone_kinds.iter().enumerate() {
            let z = z as ZoneId;
            let data = matches!(*kind, ZONE_KIND_NAMELESS | ZONE_KIND_NAMELESS_MOVED);
            if data && covered.binary_search(&z).is_err() {
                return Err(bad(
                    "zone table kind",
                    (*kind).into(),
                    "every zone of kind 7 or 8 has a record in section 18",
                ));
            }
        }
        if let Some(p) = remap {
            image.remap = decode_remap(p, &image, ctx)?;
        }
        if let Some(p) = uncommitted {
            image.uncommitted = decode_uncommitted(p, &image, ctx)?;
        }
        if let Some(p) = open_md {
            image.open_md = decode_open_md(p, &image)?;
        }
        if let Some(p) = job {
            image.job = Some(decode_job(p, &image, ctx)?);
        }
        if let Some(p) = fills {
            image.fills = decode_fills(p, &image, ctx)?;
        }
        Ok(image)
    }

    /// `(gen, base_gen)` of `zone` (0, 0 when section 17 is absent).
    fn generation(&self, zone: ZoneId) -> Option<(u32, u32)> {
        if self.generations.is_empty() {
            return Some((0, 0));
        }
        self.generations.get(zone as usize).copied()
    }

    fn zone_record(&self, zone: ZoneId) -> Option<&NamelessZoneRecord> {
        self.zones
            .binary_search_by_key(&zone, |z| z.zone)
            .ok()
            .map(|i| &self.zones[i])
    }

    /// The md layout of placement log for a zone capacity (`None`: no
    /// device at hand, the regular groups only), or `None` for placement OOB.
    fn layout(&self, capacity: Option<u64>) -> Option<MdLayout> {
        let h = self.header?;
        (h.placement == MdPlacement::Log).then(|| {
            MdLayout::from_group_blocks(
                h.group_blocks.into(),
                capacity.unwrap_or(u64::from(u32::MAX)),
            )
        })
    }
}

fn decode_header(p: &[u8], ctx: &SectionContext) -> Result<NamelessHeader, FormatError> {
    sized(
        "checkpoint nameless header (section 16)",
        p,
        0,
        1,
        NAMELESS_HEADER_BYTES as u64,
    )?;
    let mut r = Reader::new(p, 0);
    let md_bytes = r.u16();
    let placement_code = r.u8();
    // Flags: 0 from an older build (its fills have no link) reads alike.
    let flags = r.u8();
    if flags & !HEADER_FLAG_FILL_LINKS != 0 {
        return Err(bad("flags (byte 3)", flags.into(), "only bit 0"));
    }
    let group_blocks = r.u32();
    let remap_capacity = r.u32();
    let uncommitted_capacity = r.u32();
    let commit_seq = r.u64();
    zero(SECTION, "header reserved (bytes 24..32)", r.u64())?;
    if !valid_md_bytes(md_bytes.into()) {
        return Err(bad(
            "md_bytes",
            md_bytes.into(),
            "4 ..= 64, a multiple of 4",
        ));
    }
    let placement = MdPlacement::from_code(placement_code)
        .ok_or_else(|| bad("placement", placement_code.into(), "1 OOB, 2 log"))?;
    let g_ok = match placement {
        MdPlacement::Oob => group_blocks == 0,
        MdPlacement::Log => is_group_size(group_blocks, md_bytes.into()),
    };
    if !g_ok {
        return Err(bad(
            "G",
            group_blocks.into(),
            "placement OOB: 0; placement log: 8 × (block_size - 32) / (12 + md_bytes) for a block size of 512 ..= 65536",
        ));
    }
    if commit_seq >= ctx.next_seq && commit_seq != 0 {
        return Err(bad(
            "commit seq",
            commit_seq,
            "0, or below the checkpoint's next seq",
        ));
    }
    Ok(NamelessHeader {
        md_bytes,
        placement,
        group_blocks,
        remap_capacity,
        uncommitted_capacity,
        commit_seq,
        fill_links: flags & HEADER_FLAG_FILL_LINKS != 0,
    })
}

fn decode_generations(p: &[u8], ctx: &SectionContext) -> Result<Vec<(u32, u32)>, FormatError> {
    let zones = ctx.zone_kinds.len() as u64;
    sized("checkpoint zone generations (section 17)", p, 0, zones, 8)?;
    let mut r = Reader::new(p, 0);
    let mut out = Vec::with_capacity(zones as usize);
    for _ in 0..zones {
        let (gen, base) = (r.u32(), r.u32());
        if base > gen {
            return Err(bad("base_gen", base.into(), "at most the zone's gen"));
        }
        out.push((gen, base));
    }
    Ok(out)
}

fn decode_zones(
    p: &[u8],
    image: &NamelessImage,
    ctx: &SectionContext,
) -> Result<Vec<NamelessZoneRecord>, FormatError> {
    const S: &str = "checkpoint nameless zones (section 18)";
    let count = counted(S, p)?;
    sized(S, p, 8, count.into(), NAMELESS_ZONE_RECORD_BYTES as u64)?;
    let placement = image.header.map(|h| h.placement);
    let capacity = ctx.device.map(|d| d.1);
    let layout = image.layout(capacity);
    let mut r = Reader::new(p, 8);
    let mut out: Vec<NamelessZoneRecord> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (zone, data_end, last_md_at, live_blocks, flags) =
            (r.u32(), r.u32(), r.u32(), r.u32(), r.u32());
        zero(SECTION, "zone record reserved", r.u32().into())?;
        let kind = ctx.zone_kinds.get(zone as usize).copied();
        if !matches!(kind, Some(ZONE_KIND_NAMELESS | ZONE_KIND_NAMELESS_MOVED)) {
            return Err(bad(
                "nameless zone",
                zone.into(),
                "a zone of kind 7 or 8 in the zone table",
            ));
        }
        if out.last().is_some_and(|z| zone <= z.zone) {
            return Err(bad("nameless zone", zone.into(), "strictly increasing"));
        }
        if image.generation(zone).is_none_or(|(gen, _)| gen == 0) {
            return Err(bad(
                "nameless zone",
                zone.into(),
                "a zone with a generation >= 1 in section 17",
            ));
        }
        if capacity.is_some_and(|c| u64::from(data_end) > c) {
            return Err(bad(
                "data_end",
                data_end.into(),
                "at most the zone capacity",
            ));
        }
        if let Some(l) = layout {
            if data_end > 0 && !l.is_data_offset(u64::from(data_end) - 1) {
                return Err(bad(
                    "data_end",
                    data_end.into(),
                    "past a data block of the md layout (placement log)",
                ));
            }
        }
        if live_blocks > data_end {
            return Err(bad("live_blocks", live_blocks.into(), "at most data_end"));
        }
        if flags & !(ZONE_FLAG_MD_WRITTEN | ZONE_FLAG_HELD) != 0 {
            return Err(bad("zone flags", flags.into(), "bits 0 and 1 only"));
        }
        let md_written = flags & ZONE_FLAG_MD_WRITTEN != 0;
        if placement == Some(MdPlacement::Oob) && (md_written || last_md_at != u32::MAX) {
            return Err(bad(
                "last_md_at / flags bit 0",
                last_md_at.into(),
                "placement OOB has no md blocks: u32::MAX and bit 0 clear",
            ));
        }
        let last_md_at = (last_md_at != u32::MAX).then_some(last_md_at);
        if let Some(at) = last_md_at {
            if at < data_end || !md_written || capacity.is_some_and(|c| u64::from(at) >= c) {
                return Err(bad(
                    "last_md_at",
                    at.into(),
                    "at or past data_end, below the zone capacity, with flags bit 0 set",
                ));
            }
        }
        out.push(NamelessZoneRecord {
            zone,
            data_end,
            last_md_at,
            live_blocks,
            md_written,
            held: flags & ZONE_FLAG_HELD != 0,
            valid: Vec::new(),
        });
    }
    Ok(out)
}

fn decode_validity(
    p: Option<&[u8]>,
    image: &mut NamelessImage,
    ctx: &SectionContext,
) -> Result<(), FormatError> {
    const S: &str = "checkpoint nameless validity (section 19)";
    let words: u64 = image
        .zones
        .iter()
        .map(|z| u64::from(z.data_end).div_ceil(64))
        .sum();
    let p = match p {
        None if words == 0 => return Ok(()),
        None => &[][..],
        Some([]) => {
            return Err(bad(
                "count",
                0,
                "a section is written only when it has content",
            ))
        }
        Some(p) => p,
    };
    sized(S, p, 0, words, 8)?;
    let layout = image.layout(ctx.device.map(|d| d.1));
    let mut r = Reader::new(p, 0);
    for z in &mut image.zones {
        let n = u64::from(z.data_end).div_ceil(64) as usize;
        z.valid = (0..n).map(|_| r.u64()).collect();
        let mut live = 0u64;
        for (j, &word) in z.valid.iter().enumerate() {
            live += u64::from(word.count_ones());
            let first = 64 * j as u64;
            let mut rest = word;
            while rest != 0 {
                let offset = first + u64::from(rest.trailing_zeros());
                rest &= rest - 1;
                if offset >= u64::from(z.data_end) {
                    return Err(bad("validity bit", offset, "below the zone's data_end"));
                }
                if layout.is_some_and(|l| !l.is_data_offset(offset)) {
                    return Err(bad(
                        "validity bit",
                        offset,
                        "on a data block, not an md block (placement log)",
                    ));
                }
            }
        }
        if live != u64::from(z.live_blocks) {
            return Err(bad(
                "live_blocks",
                z.live_blocks.into(),
                "the number of validity bits set",
            ));
        }
    }
    Ok(())
}

fn decode_remap(
    p: &[u8],
    image: &NamelessImage,
    ctx: &SectionContext,
) -> Result<Vec<(NamelessAddr, NamelessAddr)>, FormatError> {
    const S: &str = "checkpoint remap table (section 20)";
    let count = counted(S, p)?;
    sized(S, p, 8, count.into(), REMAP_ENTRY_BYTES as u64)?;
    let mut r = Reader::new(p, 8);
    let mut out: Vec<(NamelessAddr, NamelessAddr)> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let old = addr_field(SECTION, "remap old", r.u64(), false)?;
        let new = addr_field(SECTION, "remap new", r.u64(), false)?;
        if out.last().is_some_and(|&(o, _)| old <= o) {
            return Err(bad("remap old", old.to_u64(), "strictly increasing"));
        }
        if old.ppa() == new.ppa() {
            return Err(bad("remap new", new.to_u64(), "a block other than old's"));
        }
        if let Some((physical, capacity)) = ctx.device {
            for (field, a) in [("remap old", old), ("remap new", new)] {
                if u64::from(a.ppa().0) >= physical {
                    return Err(bad(field, a.to_u64(), "a ppa below the device's blocks"));
                }
            }
            let zone = new.ppa().zone(capacity);
            if image
                .generation(zone)
                .is_none_or(|(gen, _)| new.generation() > gen)
            {
                return Err(bad(
                    "remap new",
                    new.to_u64(),
                    "a generation at most its zone's gen (section 17)",
                ));
            }
        }
        out.push((old, new));
    }
    let mut news: Vec<u64> = out.iter().map(|(_, n)| n.to_u64()).collect();
    news.sort_unstable();
    if let Some(w) = news.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad("remap new", w[0], "distinct across entries"));
    }
    Ok(out)
}

fn decode_uncommitted(
    p: &[u8],
    image: &NamelessImage,
    ctx: &SectionContext,
) -> Result<Vec<Ppa>, FormatError> {
    const S: &str = "checkpoint uncommitted set (section 21)";
    let count = counted(S, p)?;
    sized(S, p, 8, count.into(), 4)?;
    let mut r = Reader::new(p, 8);
    let mut out: Vec<Ppa> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let ppa = Ppa(r.u32());
        if ppa.is_none() || out.last().is_some_and(|&p| ppa <= p) {
            return Err(bad(
                "uncommitted ppa",
                ppa.0.into(),
                "strictly increasing, not Ppa::NONE",
            ));
        }
        if let Some((_, capacity)) = ctx.device {
            let offset = ppa.offset_blocks(capacity);
            let live = image.zone_record(ppa.zone(capacity)).is_some_and(|z| {
                z.valid
                    .get((offset / 64) as usize)
                    .is_some_and(|w| w >> (offset % 64) & 1 == 1)
            });
            if !live {
                return Err(bad(
                    "uncommitted ppa",
                    ppa.0.into(),
                    "a live block of a zone of section 18",
                ));
            }
        }
        out.push(ppa);
    }
    Ok(out)
}

fn decode_open_md(p: &[u8], image: &NamelessImage) -> Result<Vec<OpenMdRecord>, FormatError> {
    const S: &str = "checkpoint open md (section 22)";
    let count = counted(S, p)?;
    let h = image.header.expect("section 16 decoded first");
    let Some(layout) = image.layout(None) else {
        return Err(bad("kind", 22, "open md only with placement log"));
    };
    let md_bytes = usize::from(h.md_bytes);
    let entry_bytes = MdEntry::encoded_bytes(md_bytes) as u64;
    // Each zone takes at least 8 bytes: the count cannot allocate more
    // than the payload holds.
    if u64::from(count) > (p.len() as u64 - 8) / 8 {
        return Err(FormatError::Length {
            structure: S,
            expected: 8 + 8 * u64::from(count),
            actual: p.len() as u64,
        });
    }
    let mut out: Vec<OpenMdRecord> = Vec::with_capacity(count as usize);
    let mut r = Reader::new(p, 8);
    for _ in 0..count {
        need(S, p, r.pos() + 8)?;
        let (zone, n) = (r.u32(), r.u32());
        let body = u64::from(n) * entry_bytes;
        if body > (p.len() - r.pos()) as u64 {
            return Err(FormatError::Length {
                structure: S,
                expected: r.pos() as u64 + body,
                actual: p.len() as u64,
            });
        }
        if out.last().is_some_and(|z| zone <= z.zone) {
            return Err(bad("open md zone", zone.into(), "strictly increasing"));
        }
        let Some(record) = image.zone_record(zone) else {
            return Err(bad("open md zone", zone.into(), "a zone of section 18"));
        };
        if n == 0 || u64::from(n) > layout.group_blocks {
            return Err(bad("open md entry_count", n.into(), "1 ..= G"));
        }
        let mut entries: Vec<MdEntry> = Vec::with_capacity(n as usize);
        for i in 0..n {
            let e = MdEntry::read(SECTION, p, &mut r, md_bytes)?;
            let start = match entries.first() {
                None => u64::from(e.home_offset),
                Some(first) => u64::from(first.home_offset),
            };
            let home = u64::from(e.home_offset);
            if !start.is_multiple_of(layout.group_stride()) || home != start + u64::from(i) {
                return Err(bad(
                    "open md home_offset",
                    home,
                    "entries 0, 1, ... of one group, from its start",
                ));
            }
            if home >= u64::from(record.data_end) {
                return Err(bad(
                    "open md home_offset",
                    home,
                    "below the zone's data_end",
                ));
            }
            entries.push(e);
        }
        out.push(OpenMdRecord { zone, entries });
    }
    if r.pos() != p.len() {
        return Err(FormatError::Length {
            structure: S,
            expected: r.pos() as u64,
            actual: p.len() as u64,
        });
    }
    Ok(out)
}

fn decode_job(
    p: &[u8],
    image: &NamelessImage,
    ctx: &SectionContext,
) -> Result<InPlaceJobRecord, FormatError> {
    sized(
        "checkpoint in-place job (section 23)",
        p,
        0,
        1,
        IN_PLACE_JOB_BYTES as u64,
    )?;
    let mut r = Reader::new(p, 0);
    let (victim, scratch, first_scratch_offset, staged_blocks, gap_gen) =
        (r.u32(), r.u32(), r.u32(), r.u32(), r.u32());
    zero(SECTION, "in-place job reserved", r.u32().into())?;
    let staged_seq = r.u64();
    if image.zone_record(victim).is_none() {
        return Err(bad("victim", victim.into(), "a zone of section 18"));
    }
    if ctx.zone_kinds.get(scratch as usize) != Some(&ZONE_KIND_SCRATCH) {
        return Err(bad(
            "scratch",
            scratch.into(),
            "a zone of kind 9 in the zone table",
        ));
    }
    if gap_gen != 0
        && image
            .generation(victim)
            .is_none_or(|(gen, _)| gen != gap_gen)
    {
        return Err(bad(
            "gap generation",
            gap_gen.into(),
            "0, or the victim's gen (section 17)",
        ));
    }
    if staged_seq >= ctx.next_seq {
        return Err(bad(
            "staged seq",
            staged_seq,
            "below the checkpoint's next seq",
        ));
    }
    let end = u64::from(first_scratch_offset) + u64::from(staged_blocks);
    if ctx.device.is_some_and(|(_, c)| end > c) {
        return Err(bad(
            "staged blocks",
            staged_blocks.into(),
            "first scratch offset + staged blocks within the zone capacity",
        ));
    }
    Ok(InPlaceJobRecord {
        victim,
        scratch,
        first_scratch_offset,
        staged_blocks,
        gap_gen,
        staged_seq,
    })
}

/// Section 24: each gap fill a live block of a zone of section 18, with a
/// birth generation above its zone's `base_gen` and at most its `gen`.
fn decode_fills(
    p: &[u8],
    image: &NamelessImage,
    ctx: &SectionContext,
) -> Result<Vec<(Ppa, u32)>, FormatError> {
    const S: &str = "checkpoint gap fills (section 24)";
    let count = counted(S, p)?;
    sized(S, p, 8, count.into(), GAP_FILL_BYTES as u64)?;
    let mut r = Reader::new(p, 8);
    let mut out: Vec<(Ppa, u32)> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (ppa, birth_gen) = (Ppa(r.u32()), r.u32());
        if ppa.is_none() || out.last().is_some_and(|&(p, _)| ppa <= p) {
            return Err(bad(
                "gap fill ppa",
                ppa.0.into(),
                "strictly increasing, not Ppa::NONE",
            ));
        }
        if let Some((_, capacity)) = ctx.device {
            let (zone, offset) = (ppa.zone(capacity), ppa.offset_blocks(capacity));
            let live = image.zone_record(zone).is_some_and(|z| {
                z.valid
                    .get((offset / 64) as usize)
                    .is_some_and(|w| w >> (offset % 64) & 1 == 1)
            });
            if !live {
                return Err(bad(
                    "gap fill ppa",
                    ppa.0.into(),
                    "a live block of a zone of section 18",
                ));
            }
            let fits = image
                .generation(zone)
                .is_some_and(|(gen, base)| base < birth_gen && birth_gen <= gen);
            if !fits {
                return Err(bad(
                    "gap fill birth_gen",
                    birth_gen.into(),
                    "above its zone's base_gen, at most its gen (section 17)",
                ));
            }
        }
        out.push((ppa, birth_gen));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::seal_crc;
    use crate::tag::TagKind;
    use proptest::collection::vec;
    use proptest::prelude::*;

    #[test]
    fn addr_bit_layout() {
        let a = NamelessAddr::new(Ppa(0x0102_0304), 0x0A0B_0C0D);
        assert_eq!(a.to_u64(), 0x0A0B_0C0D_0102_0304);
        assert_eq!(
            a.to_le_bytes(),
            [0x04, 0x03, 0x02, 0x01, 0x0D, 0x0C, 0x0B, 0x0A]
        );
        assert_eq!((a.ppa(), a.generation()), (Ppa(0x0102_0304), 0x0A0B_0C0D));
        assert_eq!(NamelessAddr::from_le_bytes(a.to_le_bytes()), a);
        assert_eq!(NamelessAddr::from_u64(a.to_u64()), a);
        assert!(!a.is_none() && a.is_well_formed());
        assert_eq!(NamelessAddr::NONE.to_u64(), u64::MAX);
        assert!(NamelessAddr::NONE.is_none() && !NamelessAddr::NONE.is_well_formed());
        assert!(!NamelessAddr::from_u64(7).is_well_formed()); // generation 0
        assert!(!NamelessAddr::from_u64(1 << 32 | u64::from(u32::MAX)).is_well_formed());
        // Ordered as the u64 (generation first), as section 20 sorts them.
        assert!(NamelessAddr::new(Ppa(9), 1) < NamelessAddr::new(Ppa(1), 2));
        assert_eq!(NamelessAddr::new(Ppa(5), 3).to_string(), "5@3");
    }

    #[test]
    #[should_panic(expected = "Ppa::NONE")]
    fn addr_of_ppa_none_is_a_bug() {
        NamelessAddr::new(Ppa::NONE, 1);
    }

    #[test]
    #[should_panic(expected = "generation 0")]
    fn addr_of_generation_0_is_a_bug() {
        NamelessAddr::new(Ppa(1), 0);
    }

    #[test]
    fn md_sizes_and_placement() {
        let ok: Vec<usize> = (0..=80).filter(|&n| valid_md_bytes(n)).collect();
        assert_eq!(ok, (1..=16).map(|w| 4 * w).collect::<Vec<_>>());
        assert_eq!(MdPlacement::for_device(true, 64, 32), MdPlacement::Oob);
        assert_eq!(MdPlacement::for_device(true, 64, 36), MdPlacement::Log);
        assert_eq!(MdPlacement::for_device(true, 32, 4), MdPlacement::Log);
        assert_eq!(MdPlacement::for_device(false, 128, 4), MdPlacement::Log);
        for p in [MdPlacement::Oob, MdPlacement::Log] {
            assert_eq!(MdPlacement::from_code(p.code()), Some(p));
        }
        assert_eq!((MdPlacement::Oob.code(), MdPlacement::Log.code()), (1, 2));
        assert_eq!(MdPlacement::from_code(0), None);
    }

    fn sample_tag() -> NamelessTag {
        NamelessTag {
            kind: NamelessTagKind::Moved,
            birth_gen: 3,
            link: NamelessAddr::new(Ppa(77), 2),
            seq: 0x1122_3344_5566,
            data_crc: 0xAABB_CCDD,
        }
    }

    #[test]
    fn tag_layout_is_documented() {
        let t = sample_tag();
        let md: Vec<u8> = (1..=32).collect();
        let mut oob = [0xEEu8; 80];
        t.encode(&md, &mut oob);
        assert_eq!(&oob[..4], &[6, 1, 8, 0]);
        assert_eq!(&oob[4..8], &3u32.to_le_bytes());
        assert_eq!(&oob[8..16], &NamelessAddr::new(Ppa(77), 2).to_le_bytes());
        assert_eq!(&oob[16..24], &0x1122_3344_5566u64.to_le_bytes());
        assert_eq!(&oob[24..28], &0xAABB_CCDDu32.to_le_bytes());
        let mut covered = oob[..28].to_vec();
        covered.extend_from_slice(&md);
        assert_eq!(&oob[28..32], &crc32c::crc32c(&covered).to_le_bytes());
        assert_eq!(&oob[32..64], &md[..]);
        assert!(
            oob[64..].iter().all(|&b| b == 0xEE),
            "past the md untouched"
        );
        assert_eq!(NamelessTag::decode(&oob), Ok(Some((t, &md[..]))));
        // The md is read by md_words, not by the OOB's length.
        assert_eq!(NamelessTag::decode(&oob[..64]), Ok(Some((t, &md[..]))));
        assert!(matches!(
            NamelessTag::decode(&oob[..63]),
            Err(FormatError::Length {
                expected: 64,
                actual: 63,
                ..
            })
        ));
        // Placement log: no md after the tag.
        let mut bare = [0u8; 32];
        t.encode(&[], &mut bare);
        assert_eq!(bare[2], 0);
        assert_eq!(&bare[28..32], &crc32c::crc32c(&bare[..28]).to_le_bytes());
        assert_eq!(NamelessTag::decode(&bare), Ok(Some((t, &[][..]))));
    }

    #[test]
    fn tag_rules_are_checked() {
        let md = [5u8; 8];
        let decode_after = |edit: &dyn Fn(&mut [u8])| {
            let mut oob = [0u8; 64];
            sample_tag().encode(&md, &mut oob);
            edit(&mut oob);
            let crc = nameless_tag_crc(&oob, &oob[32..40]);
            put_u32(&mut oob, T_TAG_CRC_OFF, crc);
            NamelessTag::decode(&oob).map(|t| t.map(|(t, _)| t))
        };
        assert_eq!(decode_after(&|_| ()), Ok(Some(sample_tag())));
        assert!(matches!(
            decode_after(&|b| b[3] = 1),
            Err(FormatError::Reserved { .. })
        ));
        assert_eq!(
            decode_after(&|b| b[0] = 8),
            Err(FormatError::UnknownTagKind { kind: 8 })
        );
        assert!(matches!(
            decode_after(&|b| put_u32(b, 4, 0)),
            Err(FormatError::OutOfRange {
                field: "birth_gen",
                ..
            })
        ));
        // Kind 6 needs a link; kind 5 may have none.
        let none = |b: &mut [u8]| put_u64(b, 8, u64::MAX);
        assert!(matches!(
            decode_after(&none),
            Err(FormatError::OutOfRange { field: "link", .. })
        ));
        let data = decode_after(&|b| {
            none(b);
            b[0] = 5;
        });
        assert_eq!(
            data.map(|t| t.map(|t| (t.kind, t.link))),
            Ok(Some((NamelessTagKind::Data, NamelessAddr::NONE)))
        );
        // A link of generation 0 or of Ppa::NONE is not an address.
        for bad in [77u64, 2 << 32 | u64::from(u32::MAX)] {
            assert!(matches!(
                decode_after(&|b| {
                    put_u64(b, 8, bad);
                    b[0] = 5;
                }),
                Err(FormatError::OutOfRange { field: "link", .. })
            ));
        }
        // Kind 7's link carries birth_gen.
        assert!(matches!(
            decode_after(&|b| b[0] = 7),
            Err(FormatError::OutOfRange { field: "link", .. })
        ));
        let staged = decode_after(&|b| {
            b[0] = 7;
            put_u32(b, 4, 2);
        });
        assert_eq!(
            staged.map(|t| t.map(|t| t.kind)),
            Ok(Some(NamelessTagKind::Staged))
        );
        // Version before everything but erasure; newer is reported as such.
        let mut oob = [0u8; 64];
        sample_tag().encode(&md, &mut oob);
        oob[1] = 2;
        assert!(matches!(
            NamelessTag::decode(&oob),
            Err(FormatError::NewerVersion { found: 2, .. })
        ));
        oob[1] = 0;
        assert!(matches!(
            NamelessTag::decode(&oob),
            Err(FormatError::BadVersion { found: 0, .. })
        ));
    }

    #[test]
    fn erased_and_short_oob() {
        assert_eq!(NamelessTag::decode(&[0xFF; 64]), Ok(None));
        assert_eq!(NamelessTag::decode(&[0; 32]), Ok(None));
        assert_eq!(decode_any_tag(&[0; 64]), Ok(None));
        assert!(matches!(
            NamelessTag::decode(&[5; 31]),
            Err(FormatError::Length { .. })
        ));
        assert!(matches!(
            decode_any_tag(&[5; 31]),
            Err(FormatError::Length { .. })
        ));
    }

    #[test]
    #[should_panic(expected = "md of 6 bytes")]
    fn tag_md_not_in_words_is_a_bug() {
        sample_tag().encode(&[0; 6], &mut [0; 64]);
    }

    #[test]
    #[should_panic(expected = "does not encode")]
    fn tag_breaking_a_rule_is_a_bug() {
        let t = NamelessTag {
            birth_gen: 0,
            ..sample_tag()
        };
        t.encode(&[], &mut [0; 32]);
    }

    #[test]
    fn any_tag_tells_the_kinds_apart() {
        let block = Tag {
            kind: TagKind::HostData,
            epoch: 1,
            lba: 9,
            seq: 4,
            data_crc: 5,
        };
        let mut oob = [0u8; 64];
        block.encode(&mut oob);
        assert_eq!(decode_any_tag(&oob), Ok(Some(AnyTag::Block(block))));
        let md = [1u8; 32];
        sample_tag().encode(&md, &mut oob);
        assert_eq!(
            decode_any_tag(&oob),
            Ok(Some(AnyTag::Nameless(sample_tag(), &md[..])))
        );
        // The block tag decoder refuses a nameless tag: by its CRC when md
        // follows it (the CRC covers the md), by its kind when none does.
        assert!(matches!(Tag::decode(&oob), Err(FormatError::BadCrc { .. })));
        let mut bare = [0u8; 32];
        sample_tag().encode(&[], &mut bare);
        assert_eq!(
            Tag::decode(&bare),
            Err(FormatError::UnknownTagKind { kind: 6 })
        );
        // Kind 8 is neither: refused.
        oob[0] = 8;
        seal_crc(&mut oob, 28);
        assert_eq!(
            decode_any_tag(&oob),
            Err(FormatError::UnknownTagKind { kind: 8 })
        );
    }

    #[test]
    fn every_single_bit_flip_of_a_tag_is_detected() {
        let md: Vec<u8> = (0..32).map(|i| i * 7).collect();
        for t in [
            sample_tag(),
            NamelessTag {
                kind: NamelessTagKind::Data,
                link: NamelessAddr::NONE,
                ..sample_tag()
            },
            NamelessTag {
                kind: NamelessTagKind::Staged,
                link: NamelessAddr::new(Ppa(1), 3),
                ..sample_tag()
            },
        ] {
            let mut oob = [0u8; 64];
            t.encode(&md, &mut oob);
            for bit in 0..64 * 8 {
                let mut f = oob;
                f[bit / 8] ^= 1 << (bit % 8);
                assert!(NamelessTag::decode(&f).is_err(), "{t:?} bit {bit}");
                assert!(decode_any_tag(&f).is_err(), "{t:?} bit {bit} (any)");
            }
        }
    }

    #[test]
    fn md_layout_follows_the_format() {
        assert_eq!(entries_per_md_block(4096, 32), 92);
        assert_eq!(entries_per_md_block(512, 64), 6);
        assert_eq!(entries_per_md_block(16, 4), 0);
        assert_eq!(entries_per_md_block(4096, usize::MAX), 0);
        let l = MdLayout::new(4096, 32, 1024);
        assert_eq!(
            (l.entries_per_block, l.group_blocks, l.group_stride()),
            (92, 736, 744)
        );
        // The last group: r = 280 blocks, 280 - ceil(280 / 93) = 276 data
        // blocks, then ceil(276 / 92) = 3 md blocks (one block unused).
        assert_eq!(l.group_data_blocks(0), 736);
        assert_eq!(l.full_data_end(), 744 + 276);
        // Groups of 80 in zones of 128: 80, then 40 - ceil(40 / 11) = 36.
        assert_eq!(
            MdLayout::from_group_blocks(80, 128).full_data_end(),
            88 + 36
        );
        // One group: 64 - ceil(64 / 93) = 63 data blocks.
        assert_eq!(MdLayout::new(4096, 32, 64).full_data_end(), 63);
        assert_eq!(l.group_data_blocks(1), 276);
        assert_eq!(l.group_data_blocks(2), 0);
        assert_eq!(group_data_blocks(1024, 4096, 32, 1), 276);
        assert_eq!((l.groups(), l.data_blocks()), (2, 1012));
        assert_eq!(l.md_blocks_for(276), 3);
        let data: Vec<u64> = (0..1024).filter(|&o| l.is_data_offset(o)).collect();
        assert_eq!(data.len(), 1012);
        assert_eq!(data[735..737], [735, 744]);
        assert_eq!(*data.last().unwrap(), 744 + 275);
        assert!(!l.is_data_offset(1024));
        // Every block of the zone is a data block, one of its md blocks or
        // one the last group leaves unused.
        let md = l.md_blocks_for(736) + l.md_blocks_for(276);
        assert_eq!(1012 + md, 1023);
        // Entries: the group's md blocks right after its data blocks.
        assert_eq!(l.md_entry_of(0, 736), Some((736, 0)));
        assert_eq!(l.md_entry_of(93, 736), Some((737, 1)));
        assert_eq!(l.md_entry_of(735, 736), Some((743, 91)));
        assert_eq!(l.md_entry_of(736, 736), None);
        assert_eq!(l.md_entry_of(744 + 275, 276), Some((744 + 276 + 2, 91)));
        // A group closed early after 10 blocks: its md block at offset 10.
        assert_eq!(l.md_entry_of(9, 10), Some((10, 9)));
        assert_eq!(l.md_entry_of(10, 10), None);
        // A capacity that leaves one block after the full groups: no data in it.
        let l = MdLayout::new(4096, 32, 745);
        assert_eq!(
            (l.groups(), l.data_blocks(), l.group_data_blocks(1)),
            (1, 736, 0)
        );
    }

    fn sample_md_block(kind: MdBlockKind, md_bytes: usize, block_size: usize) -> MdBlock {
        let e = entries_per_md_block(block_size, md_bytes) as u32;
        let (group, first, data) = (2u32, e, e + e / 2);
        let stride = 8 * e + 8;
        let entries = (0..MdBlock::entry_count(block_size, md_bytes, data, first))
            .map(|i| {
                let home = if kind == MdBlockKind::Group {
                    group * stride + first + i as u32
                } else {
                    1000 - 3 * i as u32
                };
                if i % 5 == 3 {
                    MdEntry::absent(home, md_bytes)
                } else {
                    MdEntry {
                        home_offset: home,
                        data_crc: 0xC0DE_0000 + i as u32,
                        birth_gen: 1 + i as u32,
                        md: (0..md_bytes).map(|b| (b + i) as u8).collect(),
                    }
                }
            })
            .collect();
        MdBlock {
            kind,
            md_bytes,
            zone: 17,
            group,
            first_entry: first,
            group_data_blocks: data,
            entries,
        }
    }

    #[test]
    fn md_block_layout_is_documented() {
        let m = sample_md_block(MdBlockKind::Group, 32, 4096);
        let b = m.encode(4096);
        assert_eq!(b.len(), 4096);
        assert_eq!(&b[..4], b"ZFNM");
        assert_eq!(&b[4..8], &[1, 0, 1, 8]);
        assert_eq!(&b[8..12], &17u32.to_le_bytes());
        assert_eq!(&b[12..16], &2u32.to_le_bytes());
        assert_eq!(&b[16..20], &92u32.to_le_bytes());
        assert_eq!(&b[20..24], &46u32.to_le_bytes());
        assert_eq!(&b[24..28], &138u32.to_le_bytes());
        let mut zeroed = b.clone();
        zeroed[28..32].fill(0);
        assert_eq!(&b[28..32], &crc32c::crc32c(&zeroed).to_le_bytes());
        // Entry 0 at 32: home offset 2 × 744 + 92, CRC, generation, md.
        assert_eq!(&b[32..36], &(2u32 * 744 + 92).to_le_bytes());
        assert_eq!(&b[36..40], &0xC0DE_0000u32.to_le_bytes());
        assert_eq!(&b[40..44], &1u32.to_le_bytes());
        assert_eq!(&b[44..76], &m.entries[0].md[..]);
        // Entry 3 is absent: generation u32::MAX, CRC and md zero.
        let e3 = 32 + 3 * 44;
        assert_eq!(&b[e3 + 4..e3 + 12], &[0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(b[e3 + 12..e3 + 44].iter().all(|&x| x == 0));
        assert!(b[32 + 46 * 44..].iter().all(|&x| x == 0));
        assert_eq!(MdBlock::decode(&b, 32), Ok(m));
    }

    #[test]
    fn md_block_rules_are_checked() {
        // E = 17 entries per 512-byte block with 16-byte md: G = 136; the
        // sample is the md block of entries 17..25 of a 25-block group.
        let m = sample_md_block(MdBlockKind::Group, 16, 512);
        assert_eq!(
            (m.first_entry, m.group_data_blocks, m.entries.len()),
            (17, 25, 8)
        );
        let b = m.encode(512);
        let reseal = |b: &mut Vec<u8>| {
            b[28..32].fill(0);
            let crc = crc32c::crc32c(b);
            put_u32(b, M_CRC_OFF, crc);
        };
        let after = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut f = b.clone();
            edit(&mut f);
            reseal(&mut f);
            MdBlock::decode(&f, 16)
        };
        assert_eq!(after(&|_| ()), Ok(m.clone()));
        assert!(matches!(
            MdBlock::decode(&b, 20),
            Err(FormatError::OutOfRange {
                field: "md_words",
                ..
            })
        ));
        assert!(matches!(
            after(&|f| f[6] = 3),
            Err(FormatError::OutOfRange { field: "kind", .. })
        ));
        assert!(matches!(
            after(&|f| f[0] = b'X'),
            Err(FormatError::BadMagic { .. })
        ));
        assert!(matches!(
            after(&|f| f[4] = 2),
            Err(FormatError::NewerVersion { .. })
        ));
        // first_entry not a multiple of E, or past the group's blocks.
        assert!(matches!(
            after(&|f| put_u32(f, 16, 11)),
            Err(FormatError::OutOfRange {
                field: "first_entry",
                ..
            })
        ));
        assert!(matches!(
            after(&|f| put_u32(f, 24, 10)),
            Err(FormatError::OutOfRange {
                field: "first_entry",
                ..
            })
        ));
        // group_data_blocks 0 or above G; an entry count that does not follow.
        assert!(matches!(
            after(&|f| put_u32(f, 24, 0)),
            Err(FormatError::OutOfRange {
                field: "group_data_blocks",
                ..
            })
        ));
        assert!(matches!(
            after(&|f| put_u32(f, 24, 137)),
            Err(FormatError::OutOfRange {
                field: "group_data_blocks",
                ..
            })
        ));
        assert!(matches!(
            after(&|f| put_u32(f, 24, 40)),
            Err(FormatError::OutOfRange {
                field: "entry_count",
                ..
            })
        ));
        assert!(after(&|f| put_u32(f, 20, 7)).is_err());
        // A group's entry must sit at its home offset; a staging index's need not.
        assert!(matches!(
            after(&|f| put_u32(f, 32, 0)),
            Err(FormatError::OutOfRange {
                field: "entry home_offset",
                ..
            })
        ));
        assert!(after(&|f| {
            put_u32(f, 32, 0);
            f[6] = 2;
        })
        .is_ok());
        assert!(matches!(
            after(&|f| put_u32(f, 12, 3)),
            Err(FormatError::OutOfRange {
                field: "entry home_offset",
                ..
            })
        ));
        // Generation 0; an absent entry with a CRC or md.
        assert!(matches!(
            after(&|f| put_u32(f, 40, 0)),
            Err(FormatError::OutOfRange {
                field: "entry birth_gen",
                ..
            })
        ));
        let absent = 32 + 3 * 28;
        assert!(matches!(
            after(&|f| f[absent + 4] = 1),
            Err(FormatError::Reserved { .. })
        ));
        assert!(matches!(
            after(&|f| f[absent + 20] = 1),
            Err(FormatError::Reserved { .. })
        ));
        // Padding after the entries.
        assert!(matches!(
            after(&|f| f[500] = 1),
            Err(FormatError::Reserved { .. })
        ));
        assert_eq!(
            MdBlock::decode(&[0xFF; 512], 16),
            Err(FormatError::Erased {
                structure: MD_BLOCK
            })
        );
        assert!(matches!(
            MdBlock::decode(&[1; 500], 16),
            Err(FormatError::OutOfRange {
                field: "block size",
                ..
            })
        ));
    }

    #[test]
    fn every_single_bit_flip_of_an_md_block_is_detected() {
        for kind in [MdBlockKind::Group, MdBlockKind::StagingIndex] {
            let b = sample_md_block(kind, 32, 512).encode(512);
            for bit in 0..b.len() * 8 {
                let mut f = b.clone();
                f[bit / 8] ^= 1 << (bit % 8);
                assert!(MdBlock::decode(&f, 32).is_err(), "{kind:?} bit {bit}");
            }
        }
    }

    #[test]
    #[should_panic(expected = "md block does not encode")]
    fn md_block_breaking_a_rule_is_a_bug() {
        let mut m = sample_md_block(MdBlockKind::Group, 32, 512);
        m.entries.pop();
        m.encode(512);
    }

    fn arb_md_block() -> impl Strategy<Value = (usize, MdBlock)> {
        (
            9u32..=13,
            1usize..=16,
            any::<bool>(),
            any::<u32>(),
            any::<u32>(),
        )
            .prop_flat_map(|(shift, words, group_md, zone, group)| {
                let (bs, md_bytes) = (1usize << shift, 4 * words);
                let e = entries_per_md_block(bs, md_bytes) as u32;
                (
                    Just((bs, md_bytes, group_md, zone, group % 1000, e)),
                    1..=8 * e,
                )
            })
            .prop_flat_map(|((bs, md, group_md, zone, group, e), data)| {
                let first = (0..data.div_ceil(e)).prop_map(move |k| k * e);
                (
                    Just((bs, md, group_md, zone, group, e, data)),
                    first,
                    any::<u64>(),
                )
            })
            .prop_map(
                |((bs, md_bytes, group_md, zone, group, e, data), first, seed)| {
                    let kind = if group_md {
                        MdBlockKind::Group
                    } else {
                        MdBlockKind::StagingIndex
                    };
                    let n = MdBlock::entry_count(bs, md_bytes, data, first);
                    let entries = (0..n)
                        .map(|i| {
                            let x = seed.wrapping_mul(i as u64 + 1).rotate_left(i as u32);
                            let home = if group_md {
                                group * (8 * e + 8) + first + i as u32
                            } else {
                                x as u32
                            };
                            if x % 7 == 0 {
                                MdEntry::absent(home, md_bytes)
                            } else {
                                MdEntry {
                                    home_offset: home,
                                    data_crc: (x >> 8) as u32,
                                    birth_gen: ((x >> 40) as u32 % (u32::MAX - 1)) + 1,
                                    md: (0..md_bytes).map(|b| (x >> (b % 8)) as u8).collect(),
                                }
                            }
                        })
                        .collect();
                    (
                        bs,
                        MdBlock {
                            kind,
                            md_bytes,
                            zone,
                            group,
                            first_entry: first,
                            group_data_blocks: data,
                            entries,
                        },
                    )
                },
            )
    }

    pub(crate) fn arb_addr() -> impl Strategy<Value = NamelessAddr> {
        (0..u32::MAX, 1..=u32::MAX).prop_map(|(p, g)| NamelessAddr::new(Ppa(p), g))
    }

    fn arb_tag() -> impl Strategy<Value = NamelessTag> {
        (
            5u8..=7,
            1..=u32::MAX,
            arb_addr(),
            any::<bool>(),
            any::<u64>(),
            any::<u32>(),
        )
            .prop_map(|(k, birth_gen, link, none, seq, data_crc)| {
                let kind = NamelessTagKind::from_code(k).unwrap();
                let link = match kind {
                    NamelessTagKind::Data if none => NamelessAddr::NONE,
                    NamelessTagKind::Staged => NamelessAddr::new(link.ppa(), birth_gen),
                    _ => link,
                };
                NamelessTag {
                    kind,
                    birth_gen,
                    link,
                    seq,
                    data_crc,
                }
            })
    }

    proptest! {
        #[test]
        fn addr_round_trips(v in any::<u64>()) {
            let a = NamelessAddr::from_u64(v);
            prop_assert_eq!(NamelessAddr::from_le_bytes(a.to_le_bytes()), a);
            prop_assert_eq!(u64::from(a.generation()) << 32 | u64::from(a.ppa().0), v);
            if a.is_well_formed() {
                prop_assert_eq!(NamelessAddr::new(a.ppa(), a.generation()), a);
            }
        }

        #[test]
        fn tags_round_trip(t in arb_tag(), words in 0usize..=16, fill in any::<u8>(), extra in 0usize..8) {
            let md: Vec<u8> = (0..4 * words).map(|i| fill.wrapping_add(i as u8)).collect();
            let mut oob = vec![0xEEu8; TAG_BYTES + md.len() + extra];
            t.encode(&md, &mut oob);
            prop_assert!(oob[TAG_BYTES + md.len()..].iter().all(|&b| b == 0xEE));
            prop_assert_eq!(NamelessTag::decode(&oob), Ok(Some((t, &md[..]))));
            prop_assert_eq!(decode_any_tag(&oob), Ok(Some(AnyTag::Nameless(t, &md[..]))));
        }

        #[test]
        fn tag_bit_flips_are_detected(t in arb_tag(), words in 0usize..=16, bit in any::<usize>()) {
            let md = vec![0x5Au8; 4 * words];
            let mut oob = vec![0u8; TAG_BYTES + md.len()];
            t.encode(&md, &mut oob);
            let bit = bit % (oob.len() * 8);
            oob[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(NamelessTag::decode(&oob).is_err());
        }

        #[test]
        fn md_blocks_round_trip((bs, m) in arb_md_block()) {
            let b = m.encode(bs);
            prop_assert_eq!(MdBlock::decode(&b, m.md_bytes), Ok(m));
        }

        #[test]
        fn md_block_bit_flips_are_detected((bs, m) in arb_md_block(), bit in any::<usize>()) {
            let mut b = m.encode(bs);
            let bit = bit % (bs * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(MdBlock::decode(&b, m.md_bytes).is_err());
        }

        #[test]
        fn arbitrary_md_blocks_never_panic(shift in 9u32..=12, fill in any::<u8>(), head in vec(any::<u8>(), 0..96), md in 0usize..80) {
            let mut b = vec![fill; 1 << shift];
            b[..head.len()].copy_from_slice(&head);
            let _ = MdBlock::decode(&b, md);
            // A valid magic, version and CRC over arbitrary fields exercise the field checks.
            b[..4].copy_from_slice(&MD_MAGIC);
            b[4..6].copy_from_slice(&MD_VERSION.to_le_bytes());
            b[28..32].fill(0);
            let crc = crc32c::crc32c(&b);
            put_u32(&mut b, M_CRC_OFF, crc);
            let _ = MdBlock::decode(&b, md);
        }

        #[test]
        fn arbitrary_oob_never_panics(bytes in vec(any::<u8>(), 0..128), kind in 5u8..=7, words in any::<u8>()) {
            let _ = NamelessTag::decode(&bytes);
            let _ = decode_any_tag(&bytes);
            if bytes.len() >= TAG_BYTES {
                // A valid kind, version and CRC over arbitrary fields exercise the field checks.
                let mut b = bytes;
                b[0] = kind;
                b[1] = TAG_VERSION;
                b[2] = words % ((b.len() - TAG_BYTES) / 4 + 1) as u8;
                let md_end = TAG_BYTES + 4 * usize::from(b[2]);
                let crc = nameless_tag_crc(&b, &b[TAG_BYTES..md_end]);
                put_u32(&mut b, T_TAG_CRC_OFF, crc);
                let _ = NamelessTag::decode(&b);
                let _ = decode_any_tag(&b);
            }
        }
    }
}
