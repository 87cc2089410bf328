//! Nameless-space encodings (docs/format.md §11). Placeholder of the
//! address and tag codec until the full codec lands.

use crate::addr::{Ppa, Seq};
use crate::codec::{check_crc, get_u32, get_u64, get_u8, is_erased, need, FormatError};
use crate::tag::{Tag, TAG_BYTES};

/// A block's address in the physical segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamelessAddr(u64);

impl NamelessAddr {
    pub const NONE: NamelessAddr = NamelessAddr(u64::MAX);

    pub fn new(ppa: Ppa, generation: u32) -> NamelessAddr {
        assert!(!ppa.is_none() && generation >= 1, "{ppa:?} gen {generation}");
        NamelessAddr(u64::from(ppa.0) | u64::from(generation) << 32)
    }
    pub fn ppa(self) -> Ppa {
        Ppa(self.0 as u32)
    }
    pub fn generation(self) -> u32 {
        (self.0 >> 32) as u32
    }
    pub fn is_none(self) -> bool {
        self == NamelessAddr::NONE
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamelessTagKind {
    Data = 5,
    Moved = 6,
    Staged = 7,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamelessTag {
    pub kind: NamelessTagKind,
    pub birth_gen: u32,
    pub link: NamelessAddr,
    pub seq: Seq,
    pub data_crc: u32,
}

impl NamelessTag {
    pub fn encode(&self, md: &[u8], out: &mut [u8]) {
        assert!(md.len() % 4 == 0 && md.len() <= 4 * 255);
        let out = &mut out[..TAG_BYTES + md.len()];
        out[0] = self.kind as u8;
        out[1] = 1;
        out[2] = (md.len() / 4) as u8;
        out[3] = 0;
        out[4..8].copy_from_slice(&self.birth_gen.to_le_bytes());
        out[8..16].copy_from_slice(&self.link.0.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        out[24..28].copy_from_slice(&self.data_crc.to_le_bytes());
        out[32..].copy_from_slice(md);
        let mut crc = crc32c::crc32c(&out[..28]);
        crc = crc32c::crc32c_append(crc, md);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
    }

    pub fn decode(oob: &[u8]) -> Result<Option<(NamelessTag, &[u8])>, FormatError> {
        need("nameless tag", oob, TAG_BYTES)?;
        if is_erased(&oob[..TAG_BYTES]) {
            return Ok(None);
        }
        let words = usize::from(get_u8(oob, 2));
        let end = TAG_BYTES + 4 * words;
        need("nameless tag", oob, end)?;
        let md = &oob[TAG_BYTES..end];
        let stored = get_u32(oob, 28);
        let computed = crc32c::crc32c_append(crc32c::crc32c(&oob[..28]), md);
        if stored != computed {
            return Err(FormatError::BadCrc {
                structure: "nameless tag",
                stored,
                computed,
            });
        }
        let _ = check_crc;
        let kind = match get_u8(oob, 0) {
            5 => NamelessTagKind::Data,
            6 => NamelessTagKind::Moved,
            7 => NamelessTagKind::Staged,
            k => return Err(FormatError::UnknownTagKind { kind: k }),
        };
        Ok(Some((
            NamelessTag {
                kind,
                birth_gen: get_u32(oob, 4),
                link: NamelessAddr(get_u64(oob, 8)),
                seq: get_u64(oob, 16),
                data_crc: get_u32(oob, 24),
            },
            md,
        )))
    }
}

pub enum AnyTag<'a> {
    Block(Tag),
    Nameless(NamelessTag, &'a [u8]),
}

pub fn decode_any_tag(oob: &[u8]) -> Result<Option<AnyTag<'_>>, FormatError> {
    need("tag", oob, TAG_BYTES)?;
    if (5..=7).contains(&oob[0]) {
        return Ok(NamelessTag::decode(oob)?.map(|(t, md)| AnyTag::Nameless(t, md)));
    }
    Ok(Tag::decode(oob)?.map(AnyTag::Block))
}
