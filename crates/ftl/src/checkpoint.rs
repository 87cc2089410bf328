//! The checkpoint: the FTL's in-memory state as one byte stream, written to
//! the metadata log as a run of checkpoint-chunk log blocks.
//!
//! ```text
//! header        80 bytes (magic "ZFTLCKPT", version, sizes, counters, log_seq)
//! zone table    zone_count x 32 bytes
//! map leaves    leaf_count x (u32 leaf_index + LEAF_ENTRIES x u32 map value)
//! crc table     mapped_blocks x u32 data_crc (only if flags bit 0)
//! shared table  shared_entries x 16 bytes (version 2)
//! attributes    attr_ranges x 24 bytes (version 2)
//! trailer       u32 CRC32C of everything before it
//! ```
//!
//! Version 1 (no shared or attribute table, reserved zeros in their counts'
//! place) is still read.
//!
//! Layout: docs/format.md, "Checkpoint". Decoding checks every count against
//! the stream length before allocating anything, so a damaged length cannot
//! make it allocate more than the stream's own size.

use crate::addr::{Epoch, Seq};
pub use crate::codec::FormatError;
use crate::codec::{aligned, check_crc, get_u32, get_u64, zero, Reader, Writer};
use crate::note::{chunk_payload_bytes, LogBlock};
use std::collections::HashMap;

const STRUCTURE: &str = "checkpoint";

/// "ZFTLCKPT".
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"ZFTLCKPT";
/// Checkpoint format version written by this build.
pub const CHECKPOINT_VERSION: u32 = 2;
/// The oldest checkpoint version this build reads.
pub const OLDEST_CHECKPOINT_VERSION: u32 = 1;
/// Map entries per leaf (one leaf covers LEAF_ENTRIES consecutive LBAs).
pub const LEAF_ENTRIES: usize = 1024;
/// Leaf entry meaning "unmapped" (`Ppa::NONE`).
pub const UNMAPPED: u32 = u32::MAX;
/// Header flag: the crc table is present.
pub const FLAG_CRC_TABLE: u32 = 1;
/// Header flag: written by a clean shutdown (version 2).
pub const FLAG_CLEAN: u32 = 2;

const MAGIC_OFF: usize = 0;
const VERSION_OFF: usize = MAGIC_OFF + 8;
const HEADER_BYTES_OFF: usize = VERSION_OFF + 4;
const STREAM_BYTES_OFF: usize = HEADER_BYTES_OFF + 4;
const NEXT_SEQ_OFF: usize = STREAM_BYTES_OFF + 8;
const EPOCH_OFF: usize = NEXT_SEQ_OFF + 8;
const ZONE_COUNT_OFF: usize = EPOCH_OFF + 4;
const LOGICAL_BLOCKS_OFF: usize = ZONE_COUNT_OFF + 4;
const MAPPED_BLOCKS_OFF: usize = LOGICAL_BLOCKS_OFF + 8;
const LEAF_COUNT_OFF: usize = MAPPED_BLOCKS_OFF + 8;
const FLAGS_OFF: usize = LEAF_COUNT_OFF + 4;
const LOG_SEQ_OFF: usize = FLAGS_OFF + 4;
const SHARED_ENTRIES_OFF: usize = LOG_SEQ_OFF + 8;
const ATTR_RANGES_OFF: usize = SHARED_ENTRIES_OFF + 4;
/// Bytes of the stream header.
pub const CHECKPOINT_HEADER_BYTES: usize = ATTR_RANGES_OFF + 4;
/// Bytes of one shared-table entry.
pub const SHARED_ENTRY_BYTES: usize = 16;
/// Bytes of one attribute range.
pub const ATTR_RANGE_BYTES: usize = 24;
/// Bytes of one zone table entry.
pub const ZONE_RECORD_BYTES: usize = 1 + 1 + 2 + 4 + 8 + 8 + 8;
/// Bytes of one map leaf.
pub const LEAF_BYTES: usize = 4 + LEAF_ENTRIES * 4;
/// Bytes of the trailer (CRC32C).
pub const CHECKPOINT_TRAILER_BYTES: usize = 4;

const _: () = assert!(CHECKPOINT_HEADER_BYTES == 80 && aligned(CHECKPOINT_HEADER_BYTES, 8));
const _: () = assert!(
    aligned(STREAM_BYTES_OFF, 8) && aligned(LOGICAL_BLOCKS_OFF, 8) && aligned(LOG_SEQ_OFF, 8)
);
const _: () = assert!(ZONE_RECORD_BYTES == 32 && LEAF_BYTES == 4100);
const _: () = assert!(SHARED_ENTRY_BYTES == 16 && ATTR_RANGE_BYTES == 24);
const _: () =
    assert!(CHECKPOINT_HEADER_BYTES <= chunk_payload_bytes(crate::note::MIN_LOG_BLOCK_BYTES));

/// What a zone is used for, as recorded in the checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ZoneKind {
    Free = 0,
    Superblock = 1,
    Meta = 2,
    /// Open for host data.
    DataHost = 3,
    /// Open for GC-relocated data.
    DataGc = 4,
    Retired = 5,
    /// Data zone no longer written (full or finished).
    DataClosed = 6,
}

impl ZoneKind {
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<ZoneKind> {
        Some(match code {
            0 => ZoneKind::Free,
            1 => ZoneKind::Superblock,
            2 => ZoneKind::Meta,
            3 => ZoneKind::DataHost,
            4 => ZoneKind::DataGc,
            5 => ZoneKind::Retired,
            6 => ZoneKind::DataClosed,
            _ => return None,
        })
    }
}

/// One zone in the checkpoint. `valid_blocks <= write_pointer_blocks <=
/// zone capacity`. `state` is owned by the zone module and stored as is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ZoneRecord {
    pub kind: ZoneKind,
    pub state: u8,
    pub erase_count: u32,
    pub write_pointer_blocks: u64,
    pub last_write_seq: Seq,
    pub valid_blocks: u64,
}

/// A map leaf: `(leaf_index, entries)`; entry `i` maps LBA
/// `leaf_index * LEAF_ENTRIES + i` to a map value (a ppa below the
/// device's physical blocks, `physical_blocks + id` for shared entry `id`),
/// or [`UNMAPPED`].
pub type Leaf = (u32, Box<[u32; LEAF_ENTRIES]>);

/// One entry of the shared table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SharedRecord {
    pub id: u32,
    pub ppa: u32,
    pub refs: u32,
    /// The block's data CRC (tags in band), else 0.
    pub crc: u32,
}

/// One range of the attribute table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttrRecord {
    pub lba: u64,
    pub block_count: u64,
    pub bits: u32,
}

/// The FTL state a checkpoint holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointImage {
    /// The next global seq to hand out.
    pub next_seq: Seq,
    pub epoch: Epoch,
    /// log_seq of chunk 0 of this checkpoint (its id).
    pub log_seq: u64,
    pub logical_blocks: u64,
    /// One record per device zone.
    pub zones: Vec<ZoneRecord>,
    /// Leaves in strictly increasing leaf_index order.
    pub leaves: Vec<Leaf>,
    /// When present: the data CRC of every mapped entry, in leaf order.
    pub crcs: Option<Vec<u32>>,
    /// The shared table, by id.
    pub shared: Vec<SharedRecord>,
    /// The attribute table, by lba.
    pub attrs: Vec<AttrRecord>,
    /// Written by a clean shutdown: nothing happened after it.
    pub clean: bool,
}

/// A fresh, all-unmapped leaf.
pub fn empty_leaf() -> Box<[u32; LEAF_ENTRIES]> {
    Box::new([UNMAPPED; LEAF_ENTRIES])
}

/// Leaves needed to cover `logical_blocks`.
pub fn leaves_for(logical_blocks: u64) -> u64 {
    logical_blocks.div_ceil(LEAF_ENTRIES as u64)
}

fn range(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: STRUCTURE,
        field,
        value,
        rule,
    }
}

/// The device bounds a decode checks against; `None` for the self-check in
/// `encode`, which has no device at hand.
#[derive(Clone, Copy)]
struct Bounds {
    physical_blocks: u64,
    zone_capacity_blocks: u64,
}

impl CheckpointImage {
    /// Entries that are mapped.
    pub fn mapped_blocks(&self) -> u64 {
        self.leaves
            .iter()
            .map(|(_, l)| l.iter().filter(|&&p| p != UNMAPPED).count() as u64)
            .sum()
    }

    /// Encodes the stream. Panics (a bug) if the image breaks the rules
    /// `decode` enforces; checks its own output by decoding it.
    pub fn encode(&self) -> Vec<u8> {
        let bytes = self.encode_unchecked();
        assert_eq!(
            decode_with(&bytes, None).as_ref(),
            Ok(self),
            "checkpoint does not round-trip"
        );
        bytes
    }

    /// The stream without the decode check (`encode` adds it; tests use
    /// this to write a stream that breaks a rule).
    fn encode_unchecked(&self) -> Vec<u8> {
        let mapped = self.mapped_blocks();
        if let Some(crcs) = &self.crcs {
            assert_eq!(
                crcs.len() as u64,
                mapped,
                "checkpoint crc table does not match the mapped entries"
            );
        }
        let zone_count = u32::try_from(self.zones.len()).expect("zone count fits u32");
        let leaf_count = u32::try_from(self.leaves.len()).expect("leaf count fits u32");
        let crc_entries = self.crcs.as_ref().map_or(0, Vec::len);
        let total = CHECKPOINT_HEADER_BYTES
            + self.zones.len() * ZONE_RECORD_BYTES
            + self.leaves.len() * LEAF_BYTES
            + crc_entries * 4
            + self.shared.len() * SHARED_ENTRY_BYTES
            + self.attrs.len() * ATTR_RANGE_BYTES
            + CHECKPOINT_TRAILER_BYTES;
        let mut w = Writer::with_capacity(total);
        w.bytes.extend_from_slice(&CHECKPOINT_MAGIC);
        w.u32(CHECKPOINT_VERSION);
        w.u32(CHECKPOINT_HEADER_BYTES as u32);
        w.u64(total as u64);
        w.u64(self.next_seq);
        w.u32(self.epoch);
        w.u32(zone_count);
        w.u64(self.logical_blocks);
        w.u64(mapped);
        w.u32(leaf_count);
        let crc_flag = if self.crcs.is_some() {
            FLAG_CRC_TABLE
        } else {
            0
        };
        w.u32(crc_flag | if self.clean { FLAG_CLEAN } else { 0 });
        w.u64(self.log_seq);
        w.u32(u32::try_from(self.shared.len()).expect("shared entries fit u32"));
        w.u32(u32::try_from(self.attrs.len()).expect("attribute ranges fit u32"));
        assert_eq!(w.bytes.len(), CHECKPOINT_HEADER_BYTES);
        for z in &self.zones {
            w.u8(z.kind.code());
            w.u8(z.state);
            w.u16(0);
            w.u32(z.erase_count);
            w.u64(z.write_pointer_blocks);
            w.u64(z.last_write_seq);
            w.u64(z.valid_blocks);
        }
        for (index, leaf) in &self.leaves {
            w.u32(*index);
            leaf.iter().for_each(|&p| w.u32(p));
        }
        self.crcs.iter().flatten().for_each(|&c| w.u32(c));
        for e in &self.shared {
            w.u32(e.id);
            w.u32(e.ppa);
            w.u32(e.refs);
            w.u32(e.crc);
        }
        for a in &self.attrs {
            w.u64(a.lba);
            w.u64(a.block_count);
            w.u32(a.bits);
            w.u32(0);
        }
        let crc = crc32c::crc32c(&w.bytes);
        w.u32(crc);
        assert_eq!(w.bytes.len(), total);
        w.bytes
    }

    /// Decodes a whole stream (as [`join_chunks`] returns it) for a device of
    /// `physical_blocks` blocks (`zone_count * zone_capacity_blocks`, see
    /// `addr::physical_blocks`). Every ppa must be [`UNMAPPED`] or below it.
    pub fn decode(bytes: &[u8], physical_blocks: u32) -> Result<CheckpointImage, FormatError> {
        decode_with(bytes, Some(physical_blocks))
    }
}

/// Checks the stream header at the start of `bytes` (chunk 0's payload is
/// enough) and returns the total stream length, so a reader knows how many
/// chunks to collect.
pub fn peek_stream_bytes(bytes: &[u8]) -> Result<u64, FormatError> {
    crate::codec::need(STRUCTURE, bytes, CHECKPOINT_HEADER_BYTES)?;
    crate::codec::check_magic_versions(
        STRUCTURE,
        bytes,
        (MAGIC_OFF, CHECKPOINT_MAGIC),
        (VERSION_OFF, OLDEST_CHECKPOINT_VERSION, CHECKPOINT_VERSION),
    )?;
    let header_bytes = get_u32(bytes, HEADER_BYTES_OFF);
    if header_bytes as usize != CHECKPOINT_HEADER_BYTES {
        return Err(FormatError::Length {
            structure: "checkpoint header",
            expected: CHECKPOINT_HEADER_BYTES as u64,
            actual: header_bytes.into(),
        });
    }
    let stream_bytes = get_u64(bytes, STREAM_BYTES_OFF);
    let min = (CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES) as u64;
    if stream_bytes < min {
        return Err(range(
            "stream_bytes",
            stream_bytes,
            "at least header + trailer",
        ));
    }
    Ok(stream_bytes)
}

/// Log blocks of `block_size` bytes needed for a stream of `stream_bytes`.
pub fn chunks_for_stream(stream_bytes: u64, block_size: usize) -> u64 {
    stream_bytes.div_ceil(chunk_payload_bytes(block_size) as u64)
}

/// Stream length implied by the header counts, or `None` on overflow.
fn expected_stream_bytes(h: &Header) -> Option<u64> {
    let crc_entries = if h.crc_table { h.mapped_blocks } else { 0 };
    let zones = u64::from(h.zone_count).checked_mul(ZONE_RECORD_BYTES as u64)?;
    let leaves = u64::from(h.leaf_count).checked_mul(LEAF_BYTES as u64)?;
    let crcs = crc_entries.checked_mul(4)?;
    let shared = u64::from(h.shared_entries) * SHARED_ENTRY_BYTES as u64;
    let attrs = u64::from(h.attr_ranges) * ATTR_RANGE_BYTES as u64;
    ((CHECKPOINT_HEADER_BYTES + CHECKPOINT_TRAILER_BYTES) as u64)
        .checked_add(zones)?
        .checked_add(leaves)?
        .checked_add(crcs)?
        .checked_add(shared)?
        .checked_add(attrs)
}

struct Header {
    version: u32,
    clean: bool,
    shared_entries: u32,
    attr_ranges: u32,
    next_seq: u64,
    epoch: u32,
    zone_count: u32,
    logical_blocks: u64,
    mapped_blocks: u64,
    leaf_count: u32,
    crc_table: bool,
    log_seq: u64,
}

fn decode_header(bytes: &[u8]) -> Result<Header, FormatError> {
    let stream_bytes = peek_stream_bytes(bytes)?;
    if stream_bytes != bytes.len() as u64 {
        return Err(FormatError::Length {
            structure: STRUCTURE,
            expected: stream_bytes,
            actual: bytes.len() as u64,
        });
    }
    check_crc(STRUCTURE, bytes, bytes.len() - CHECKPOINT_TRAILER_BYTES)?;
    let version = get_u32(bytes, VERSION_OFF);
    let flags = get_u32(bytes, FLAGS_OFF);
    let known = if version >= 2 {
        FLAG_CRC_TABLE | FLAG_CLEAN
    } else {
        FLAG_CRC_TABLE
    };
    zero(STRUCTURE, "flags (unknown bits)", u64::from(flags & !known))?;
    let (shared_entries, attr_ranges) = (
        get_u32(bytes, SHARED_ENTRIES_OFF),
        get_u32(bytes, ATTR_RANGES_OFF),
    );
    if version < 2 {
        let reserved = u64::from(shared_entries) | u64::from(attr_ranges) << 32;
        zero(STRUCTURE, "reserved (offset 72)", reserved)?;
    }
    let h = Header {
        version,
        clean: flags & FLAG_CLEAN != 0,
        shared_entries,
        attr_ranges,
        next_seq: get_u64(bytes, NEXT_SEQ_OFF),
        epoch: get_u32(bytes, EPOCH_OFF),
        zone_count: get_u32(bytes, ZONE_COUNT_OFF),
        logical_blocks: get_u64(bytes, LOGICAL_BLOCKS_OFF),
        mapped_blocks: get_u64(bytes, MAPPED_BLOCKS_OFF),
        leaf_count: get_u32(bytes, LEAF_COUNT_OFF),
        crc_table: flags & FLAG_CRC_TABLE != 0,
        log_seq: get_u64(bytes, LOG_SEQ_OFF),
    };
    match expected_stream_bytes(&h) {
        Some(n) if n == stream_bytes => {}
        n => {
            return Err(FormatError::Length {
                structure: "checkpoint (stream size implied by the header counts)",
                expected: n.unwrap_or(u64::MAX),
                actual: stream_bytes,
            })
        }
    }
    if h.zone_count == 0 {
        return Err(range("zone_count", 0, "at least 1"));
    }
    if u64::from(h.leaf_count) > leaves_for(h.logical_blocks) {
        return Err(range(
            "leaf_count",
            h.leaf_count.into(),
            "at most ceil(logical_blocks / 1024)",
        ));
    }
    Ok(h)
}

fn decode_bounds(h: &Header, physical_blocks: Option<u32>) -> Result<Option<Bounds>, FormatError> {
    let Some(physical) = physical_blocks.map(u64::from) else {
        return Ok(None);
    };
    let zones = u64::from(h.zone_count);
    if physical == 0 || physical % zones != 0 {
        return Err(range(
            "zone_count",
            zones,
            "divides the device's physical block count",
        ));
    }
    Ok(Some(Bounds {
        physical_blocks: physical,
        zone_capacity_blocks: physical / zones,
    }))
}

fn decode_zone(
    r: &mut Reader,
    zone: u32,
    bounds: Option<Bounds>,
) -> Result<ZoneRecord, FormatError> {
    let code = r.u8();
    let kind =
        ZoneKind::from_code(code).ok_or(FormatError::UnknownZoneKind { zone, kind: code })?;
    let state = r.u8();
    zero(STRUCTURE, "zone flags", u64::from(r.u16()))?;
    let z = ZoneRecord {
        kind,
        state,
        erase_count: r.u32(),
        write_pointer_blocks: r.u64(),
        last_write_seq: r.u64(),
        valid_blocks: r.u64(),
    };
    if let Some(b) = bounds {
        if z.write_pointer_blocks > b.zone_capacity_blocks {
            return Err(range(
                "zone write_pointer_blocks",
                z.write_pointer_blocks,
                "at most the zone capacity",
            ));
        }
    }
    if z.valid_blocks > z.write_pointer_blocks {
        return Err(range(
            "zone valid_blocks",
            z.valid_blocks,
            "at most the zone's write pointer",
        ));
    }
    Ok(z)
}

fn decode_leaf(
    r: &mut Reader,
    h: &Header,
    bounds: Option<Bounds>,
    previous: Option<u32>,
) -> Result<Leaf, FormatError> {
    let index = r.u32();
    if let Some(previous) = previous.filter(|&p| index <= p) {
        return Err(FormatError::LeafOrder { previous, index });
    }
    if u64::from(index) >= leaves_for(h.logical_blocks) {
        return Err(range(
            "leaf_index",
            index.into(),
            "below ceil(logical_blocks / 1024)",
        ));
    }
    let first_lba = u64::from(index) * LEAF_ENTRIES as u64;
    let mut leaf = empty_leaf();
    for (i, slot) in leaf.iter_mut().enumerate() {
        let ppa = r.u32();
        if ppa == UNMAPPED {
            continue;
        }
        if first_lba + i as u64 >= h.logical_blocks {
            return Err(range(
                "leaf entry lba",
                first_lba + i as u64,
                "mapped entries lie below logical_blocks",
            ));
        }
        // Shared values (version 2) are checked against the shared table.
        if h.version < 2 && bounds.is_some_and(|b| u64::from(ppa) >= b.physical_blocks) {
            return Err(range(
                "leaf entry ppa",
                ppa.into(),
                "unmapped or below the device's physical blocks",
            ));
        }
        *slot = ppa;
    }
    Ok((index, leaf))
}

fn decode_with(bytes: &[u8], physical_blocks: Option<u32>) -> Result<CheckpointImage, FormatError> {
    let h = decode_header(bytes)?;
    let bounds = decode_bounds(&h, physical_blocks)?;
    // Every count below was checked against the stream length, so these
    // allocations are bounded by the stream's size.
    let mut r = Reader::new(bytes, CHECKPOINT_HEADER_BYTES);
    let zones = (0..h.zone_count)
        .map(|z| decode_zone(&mut r, z, bounds))
        .collect::<Result<Vec<_>, _>>()?;
    let mut leaves: Vec<Leaf> = Vec::with_capacity(h.leaf_count as usize);
    for _ in 0..h.leaf_count {
        let leaf = decode_leaf(&mut r, &h, bounds, leaves.last().map(|l| l.0))?;
        leaves.push(leaf);
    }
    let image = CheckpointImage {
        next_seq: h.next_seq,
        epoch: h.epoch,
        log_seq: h.log_seq,
        logical_blocks: h.logical_blocks,
        zones,
        leaves,
        crcs: None,
        shared: Vec::new(),
        attrs: Vec::new(),
        clean: false,
    };
    let counted = image.mapped_blocks();
    if counted != h.mapped_blocks {
        return Err(FormatError::MappedCount {
            header: h.mapped_blocks,
            counted,
        });
    }
    let crcs = h
        .crc_table
        .then(|| (0..counted).map(|_| r.u32()).collect::<Vec<_>>());
    let shared = (0..h.shared_entries)
        .map(|_| SharedRecord {
            id: r.u32(),
            ppa: r.u32(),
            refs: r.u32(),
            crc: r.u32(),
        })
        .collect::<Vec<_>>();
    let mut attrs = Vec::with_capacity(h.attr_ranges as usize);
    for _ in 0..h.attr_ranges {
        let a = AttrRecord {
            lba: r.u64(),
            block_count: r.u64(),
            bits: r.u32(),
        };
        zero(STRUCTURE, "attribute range reserved", u64::from(r.u32()))?;
        attrs.push(a);
    }
    assert_eq!(
        r.pos(),
        bytes.len() - CHECKPOINT_TRAILER_BYTES,
        "checkpoint sections do not fill the stream"
    );
    let image = CheckpointImage {
        crcs,
        shared,
        attrs,
        clean: h.clean,
        ..image
    };
    check_shared(&image, bounds)?;
    check_attrs(&image)?;
    Ok(image)
}

/// The shared table: ids increasing, addresses distinct and on the
/// device, and each count equal to the leaf entries naming its id (with a
/// device at hand, which tells shared values from addresses).
fn check_shared(image: &CheckpointImage, bounds: Option<Bounds>) -> Result<(), FormatError> {
    let bad = |what: String| Err(FormatError::SharedTable(what));
    let mut refs: HashMap<u32, u32> = HashMap::with_capacity(image.shared.len());
    let mut ppas = std::collections::HashSet::with_capacity(image.shared.len());
    let mut previous = None;
    for e in &image.shared {
        if previous.is_some_and(|p| e.id <= p) {
            return bad(format!("entry {} out of order", e.id));
        }
        previous = Some(e.id);
        if e.refs == 0 || !ppas.insert(e.ppa) {
            return bad(format!(
                "entry {} has no references or a block named twice",
                e.id
            ));
        }
        if let Some(b) = bounds {
            let id_room = u64::from(u32::MAX) - b.physical_blocks;
            if u64::from(e.ppa) >= b.physical_blocks || u64::from(e.id) >= id_room {
                return bad(format!(
                    "entry {} names block {} or an id past the device",
                    e.id, e.ppa
                ));
            }
        }
        refs.insert(e.id, 0);
    }
    let Some(b) = bounds else { return Ok(()) };
    for (_, leaf) in &image.leaves {
        for &v in leaf
            .iter()
            .filter(|&&v| v != UNMAPPED && u64::from(v) >= b.physical_blocks)
        {
            let id = v - b.physical_blocks as u32;
            match refs.get_mut(&id) {
                Some(n) => *n += 1,
                None => return bad(format!("a leaf names entry {id}, which the table lacks")),
            }
        }
    }
    for e in &image.shared {
        if refs[&e.id] != e.refs {
            return bad(format!(
                "entry {} records {} references, the leaves hold {}",
                e.id, e.refs, refs[&e.id]
            ));
        }
    }
    Ok(())
}

/// The attribute table: sorted, disjoint, inside the volume, known bits.
fn check_attrs(image: &CheckpointImage) -> Result<(), FormatError> {
    let mut next = 0;
    for a in &image.attrs {
        let end = a.lba.checked_add(a.block_count);
        let inside = end.is_some_and(|e| a.block_count > 0 && e <= image.logical_blocks);
        let known = a.bits != 0 && a.bits & !u32::from(crate::range::attr_bits::ALL) == 0;
        if !inside || !known || a.lba < next {
            return Err(FormatError::AttributeTable(format!(
                "range {}+{} with bits {:#x} out of order, outside the volume or unknown",
                a.lba, a.block_count, a.bits
            )));
        }
        next = end.unwrap_or(u64::MAX);
    }
    Ok(())
}

/// Splits a stream into checkpoint-chunk log blocks with log_seq
/// `first_log_seq, first_log_seq + 1, ...` and checkpoint id
/// `first_log_seq`. The image's `log_seq` should equal `first_log_seq`.
pub fn split_into_chunks(stream: &[u8], block_size: usize, first_log_seq: u64) -> Vec<LogBlock> {
    assert!(!stream.is_empty(), "empty checkpoint stream");
    stream
        .chunks(chunk_payload_bytes(block_size))
        .enumerate()
        .map(|(i, payload)| LogBlock::CheckpointChunk {
            log_seq: first_log_seq
                .checked_add(i as u64)
                .expect("log_seq overflow"),
            checkpoint_id: first_log_seq,
            index: u32::try_from(i).expect("chunk index fits u32"),
            payload: payload.to_vec(),
        })
        .collect()
}

/// Joins the chunks of one checkpoint back into its stream. The chunks must
/// be given in index order `0, 1, ...` without gaps, all of the same
/// checkpoint (chunk 0's log_seq), with increasing log_seq.
pub fn join_chunks(chunks: &[LogBlock]) -> Result<Vec<u8>, FormatError> {
    if chunks.is_empty() {
        return Err(FormatError::NoChunks);
    }
    let mut stream = Vec::with_capacity(chunks.iter().map(chunk_len).sum());
    let mut expected_id = None;
    let mut last_log_seq = None;
    for (position, chunk) in chunks.iter().enumerate() {
        let LogBlock::CheckpointChunk {
            log_seq,
            checkpoint_id,
            index,
            payload,
        } = chunk
        else {
            return Err(FormatError::NotAChunk {
                log_seq: chunk.log_seq(),
            });
        };
        let position = u32::try_from(position).unwrap_or(u32::MAX);
        if *index != position {
            return Err(FormatError::ChunkIndex {
                position,
                index: *index,
            });
        }
        let expected = *expected_id.get_or_insert(*log_seq);
        if *checkpoint_id != expected {
            return Err(FormatError::ChunkCheckpoint {
                index: *index,
                expected,
                found: *checkpoint_id,
            });
        }
        if last_log_seq.is_some_and(|last| *log_seq <= last) {
            return Err(range(
                "chunk log_seq",
                *log_seq,
                "increasing from chunk to chunk",
            ));
        }
        last_log_seq = Some(*log_seq);
        stream.extend_from_slice(payload);
    }
    Ok(stream)
}

fn chunk_len(block: &LogBlock) -> usize {
    match block {
        LogBlock::CheckpointChunk { payload, .. } => payload.len(),
        LogBlock::Notes { .. } => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    const CAP: u64 = 100;

    fn reseal(b: &mut [u8]) {
        let n = b.len() - CHECKPOINT_TRAILER_BYTES;
        crate::codec::seal_crc(b, n);
    }

    fn small_image() -> CheckpointImage {
        let mut leaf = empty_leaf();
        leaf[0] = 5;
        leaf[7] = 799;
        CheckpointImage {
            next_seq: 1000,
            epoch: 0,
            log_seq: 12,
            logical_blocks: 1500,
            zones: (0..8u64)
                .map(|z| ZoneRecord {
                    kind: if z < 2 {
                        ZoneKind::Superblock
                    } else {
                        ZoneKind::DataHost
                    },
                    state: 1,
                    erase_count: z as u32,
                    write_pointer_blocks: z * 10,
                    last_write_seq: z * 3,
                    valid_blocks: z,
                })
                .collect(),
            leaves: vec![(1, leaf)],
            crcs: Some(vec![0xAAAA, 0xBBBB]),
            shared: Vec::new(),
            attrs: Vec::new(),
            clean: false,
        }
    }

    fn arb_zone() -> impl Strategy<Value = ZoneRecord> {
        (
            0u8..=6,
            any::<u8>(),
            any::<u32>(),
            0..=CAP,
            any::<u64>(),
            any::<u64>(),
        )
            .prop_map(|(k, state, erase_count, wp, seq, v)| ZoneRecord {
                kind: ZoneKind::from_code(k).expect("valid code"),
                state,
                erase_count,
                write_pointer_blocks: wp,
                last_write_seq: seq,
                valid_blocks: if wp == 0 { 0 } else { v % (wp + 1) },
            })
    }

    prop_compose! {
        fn arb_image()(
            zone_count in 1u32..6,
            logical_blocks in 1u64..5000,
            next_seq in any::<u64>(),
            epoch in any::<u32>(),
            log_seq in any::<u64>(),
            with_crcs in any::<bool>(),
            zones in vec(arb_zone(), 6),
            picks in vec((any::<u32>(), vec((0usize..LEAF_ENTRIES, any::<u32>()), 0..20)), 0..4),
            crc_seed in any::<u32>(),
        ) -> (u32, CheckpointImage) {
            let physical = zone_count * CAP as u32;
            let leaf_total = leaves_for(logical_blocks) as u32;
            let mut indices: Vec<u32> = picks.iter().map(|(i, _)| i % leaf_total).collect();
            indices.sort_unstable();
            indices.dedup();
            let leaves: Vec<Leaf> = indices.iter().zip(&picks).map(|(&index, (_, entries))| {
                let mut leaf = empty_leaf();
                for &(off, ppa) in entries {
                    if u64::from(index) * LEAF_ENTRIES as u64 + off as u64 >= logical_blocks { continue; }
                    leaf[off] = ppa % physical;
                }
                (index, leaf)
            }).collect();
            let mut image = CheckpointImage {
                next_seq, epoch, log_seq, logical_blocks,
                zones: zones[..zone_count as usize].to_vec(),
                leaves, crcs: None, shared: Vec::new(), attrs: Vec::new(), clean: false,
            };
            if with_crcs {
                let n = image.mapped_blocks() as u32;
                image.crcs = Some((0..n).map(|i| crc_seed.wrapping_mul(i + 1)).collect());
            }
            (physical, image)
        }
    }

    #[test]
    fn layout_is_documented() {
        let b = small_image().encode();
        assert_eq!(&b[..8], b"ZFTLCKPT");
        assert_eq!(get_u32(&b, HEADER_BYTES_OFF), 80);
        assert_eq!(get_u64(&b, STREAM_BYTES_OFF), b.len() as u64);
        assert_eq!(b.len(), 80 + 8 * 32 + 4100 + 2 * 4 + 4);
        assert_eq!(get_u64(&b, MAPPED_BLOCKS_OFF), 2);
        assert_eq!(get_u32(&b, FLAGS_OFF), FLAG_CRC_TABLE);
        assert_eq!(get_u32(&b, b.len() - 4), crc32c::crc32c(&b[..b.len() - 4]));
        assert_eq!(CheckpointImage::decode(&b, 800), Ok(small_image()));
    }

    #[test]
    fn shared_and_attribute_tables_round_trip_and_are_checked() {
        let mut image = small_image();
        // Entry 3 is the shared block 40, named by two leaf entries.
        image.leaves[0].1[9] = 800 + 3;
        image.leaves[0].1[10] = 800 + 3;
        image.crcs = Some(vec![1, 2, 3, 4]);
        image.shared = vec![SharedRecord {
            id: 3,
            ppa: 40,
            refs: 2,
            crc: 9,
        }];
        image.attrs = vec![AttrRecord {
            lba: 1024,
            block_count: 10,
            bits: 1,
        }];
        image.clean = true;
        let b = image.encode();
        assert_eq!(CheckpointImage::decode(&b, 800), Ok(image.clone()));
        let unchecked = |x: CheckpointImage| x.encode_unchecked();
        let mut wrong = image.clone();
        wrong.shared[0].refs = 1;
        assert!(matches!(
            CheckpointImage::decode(&unchecked(wrong), 800),
            Err(FormatError::SharedTable(_))
        ));
        let mut wrong = image.clone();
        wrong.attrs[0].block_count = 1000;
        assert!(matches!(
            CheckpointImage::decode(&unchecked(wrong), 800),
            Err(FormatError::AttributeTable(_))
        ));
    }

    #[test]
    fn version_1_streams_are_read() {
        let image = small_image();
        let mut b = image.encode();
        b[VERSION_OFF..VERSION_OFF + 4].copy_from_slice(&1u32.to_le_bytes());
        reseal(&mut b);
        assert_eq!(CheckpointImage::decode(&b, 800), Ok(image));
        // Version 1 has no clean flag and reserved zeros at offset 72.
        let mut flagged = b.clone();
        flagged[FLAGS_OFF] |= FLAG_CLEAN as u8;
        reseal(&mut flagged);
        assert!(CheckpointImage::decode(&flagged, 800).is_err());
        let mut counted = b;
        counted[SHARED_ENTRIES_OFF] = 1;
        reseal(&mut counted);
        assert!(CheckpointImage::decode(&counted, 800).is_err());
    }

    #[test]
    fn device_bounds_are_enforced() {
        let b = small_image().encode();
        // ppa 799 needs at least 800 physical blocks; on 8 zones of 80
        // blocks it is a shared value naming an entry the table lacks.
        assert!(matches!(
            CheckpointImage::decode(&b, 640),
            Err(FormatError::SharedTable(_))
        ));
        // 8 zones do not divide 804 blocks.
        assert!(matches!(
            CheckpointImage::decode(&b, 804),
            Err(FormatError::OutOfRange {
                field: "zone_count",
                ..
            })
        ));
    }

    #[test]
    fn damaged_lengths_do_not_allocate() {
        let mut b = small_image().encode();
        // A huge leaf count with a fixed-up CRC must be refused by the size check.
        crate::codec::put_u32(&mut b, LEAF_COUNT_OFF, u32::MAX);
        reseal(&mut b);
        assert!(matches!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::Length { .. })
        ));
        let mut b = small_image().encode();
        crate::codec::put_u64(&mut b, MAPPED_BLOCKS_OFF, u64::MAX);
        reseal(&mut b);
        assert!(matches!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::Length { .. })
        ));
    }

    #[test]
    fn mapped_count_must_match() {
        let mut img = small_image();
        img.crcs = None;
        let mut b = img.encode();
        crate::codec::put_u64(&mut b, MAPPED_BLOCKS_OFF, 3);
        reseal(&mut b);
        assert_eq!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::MappedCount {
                header: 3,
                counted: 2
            })
        );
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let b = small_image().encode();
        for bit in 0..b.len() * 8 {
            let mut f = b.clone();
            f[bit / 8] ^= 1 << (bit % 8);
            assert!(
                CheckpointImage::decode(&f, 800).is_err(),
                "bit {bit} undetected"
            );
        }
    }

    #[test]
    fn chunks_split_and_join() {
        let b = small_image().encode();
        let chunks = split_into_chunks(&b, 512, 40);
        assert_eq!(chunks.len() as u64, chunks_for_stream(b.len() as u64, 512));
        let first = match &chunks[0] {
            LogBlock::CheckpointChunk { payload, .. } => payload.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!(peek_stream_bytes(&first), Ok(b.len() as u64));
        let blocks: Vec<Vec<u8>> = chunks.iter().map(|c| c.encode(512)).collect();
        let decoded: Vec<LogBlock> = blocks
            .iter()
            .map(|x| LogBlock::decode(x).expect("chunk"))
            .collect();
        assert_eq!(join_chunks(&decoded).as_deref(), Ok(&b[..]));
        assert_eq!(join_chunks(&[]), Err(FormatError::NoChunks));
        let mut gap = decoded.clone();
        gap.remove(1);
        assert_eq!(
            join_chunks(&gap),
            Err(FormatError::ChunkIndex {
                position: 1,
                index: 2
            })
        );
        let mut foreign = decoded.clone();
        if let LogBlock::CheckpointChunk { checkpoint_id, .. } = &mut foreign[2] {
            *checkpoint_id = 7;
        }
        assert!(matches!(
            join_chunks(&foreign),
            Err(FormatError::ChunkCheckpoint {
                index: 2,
                expected: 40,
                found: 7
            })
        ));
        let notes = LogBlock::Notes {
            log_seq: 41,
            notes: vec![],
        };
        assert_eq!(
            join_chunks(&[decoded[0].clone(), notes]),
            Err(FormatError::NotAChunk { log_seq: 41 })
        );
    }

    proptest! {
        #[test]
        fn round_trips((physical, image) in arb_image()) {
            let b = image.encode();
            prop_assert_eq!(CheckpointImage::decode(&b, physical), Ok(image));
        }

        #[test]
        fn chunks_round_trip((_p, image) in arb_image(), shift in 9u32..=12, first in 0u64..(1 << 60)) {
            let b = image.encode();
            let chunks = split_into_chunks(&b, 1 << shift, first);
            prop_assert_eq!(join_chunks(&chunks), Ok(b));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..9000), physical in any::<u32>(), sealed in any::<bool>()) {
            let mut b = bytes;
            if sealed && b.len() >= CHECKPOINT_HEADER_BYTES + 4 {
                // Pass the magic, version, length and CRC gates to reach the count checks.
                b[..8].copy_from_slice(&CHECKPOINT_MAGIC);
                crate::codec::put_u32(&mut b, VERSION_OFF, CHECKPOINT_VERSION);
                crate::codec::put_u32(&mut b, HEADER_BYTES_OFF, CHECKPOINT_HEADER_BYTES as u32);
                let n = b.len() as u64;
                crate::codec::put_u64(&mut b, STREAM_BYTES_OFF, n);
                reseal(&mut b);
            }
            let _ = CheckpointImage::decode(&b, physical);
            let _ = peek_stream_bytes(&b);
        }

        #[test]
        fn bit_flips_are_detected((physical, image) in arb_image(), bit in any::<usize>()) {
            let mut b = image.encode();
            let bit = bit % (b.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(CheckpointImage::decode(&b, physical).is_err());
        }
    }
}
