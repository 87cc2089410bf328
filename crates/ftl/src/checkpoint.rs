//! The checkpoint: the FTL's in-memory state as one byte stream, written to
//! the metadata log as a run of checkpoint-chunk log blocks.
//!
//! ```text
//! header        88 bytes (magic "ZFTLCKPT", version, sizes, counters, log_seq,
//!               section_count)
//! zone table    zone_count x 32 bytes
//! map leaves    leaf_count x (u32 leaf_index + LEAF_ENTRIES x u32 map value)
//! crc table     mapped_blocks x u32 data_crc (only if flags bit 0)
//! shared table  shared_entries x 16 bytes (version 2)
//! attributes    attr_ranges x 24 bytes (version 2)
//! sections      section_count x (u32 kind, u32 flags, u64 payload_bytes, payload)
//!               (version 3), kinds strictly increasing:
//!               1 snapshot table, 2 births, 3 history, 4 pending sweeps,
//!               7 forks, 16 ..= 24 the nameless state ([`NamelessImage`],
//!               codecs in `nameless.rs`)
//! trailer       u32 CRC32C of everything before it
//! ```
//!
//! Versions 1 and 2 (an 80-byte header without section_count, no sections;
//! version 1 also without the shared and attribute tables, reserved zeros in
//! their counts' place) are still read.
//!
//! Layout: docs/format.md, "Checkpoint" and "Snapshots and time". Decoding
//! checks every count against the stream length before allocating anything,
//! so a damaged length cannot make it allocate more than the stream's own
//! size. A section of a kind this build does not know refuses the whole
//! checkpoint: it may hold state that skipping it would lose.

use crate::addr::{Epoch, Seq};
pub use crate::codec::FormatError;
use crate::codec::{aligned, check_crc, get_u32, get_u64, zero, Reader, Writer};
pub use crate::nameless::NamelessImage;
use crate::nameless::{nameless_section, SectionContext};
use crate::note::{chunk_payload_bytes, ChunkRef, LogBlock};

/// The nameless space's section kinds (docs/format.md §11).
const NAMELESS_SECTIONS: std::ops::RangeInclusive<u32> =
    nameless_section::HEADER..=nameless_section::GAP_FILLS;

const STRUCTURE: &str = "checkpoint";

/// "ZFTLCKPT".
pub const CHECKPOINT_MAGIC: [u8; 8] = *b"ZFTLCKPT";
/// Checkpoint format version written by this build.
pub const CHECKPOINT_VERSION: u32 = 3;
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
const SECTION_COUNT_OFF: usize = ATTR_RANGES_OFF + 4;
const HEADER_RESERVED_OFF: usize = SECTION_COUNT_OFF + 4;
/// Bytes of the stream header (version 3).
pub const CHECKPOINT_HEADER_BYTES: usize = HEADER_RESERVED_OFF + 4;
/// Bytes of the stream header of versions 1 and 2 (no section_count).
pub const CHECKPOINT_V2_HEADER_BYTES: usize = SECTION_COUNT_OFF;
/// Bytes before a section's payload (kind, flags, payload_bytes).
pub const SECTION_HEADER_BYTES: usize = 16;
/// Bytes of one snapshot-table record.
pub const SNAPSHOT_RECORD_BYTES: usize = 96;
/// Bytes of one history entry.
pub const HISTORY_RECORD_BYTES: usize = 24;
/// Bytes of one pending sweep.
pub const SWEEP_BYTES: usize = 16;
/// Longest snapshot name, in UTF-8 bytes (the snapshot record's name field).
pub const MAX_SNAPSHOT_NAME_BYTES: usize = 63;
/// Snapshot record flag: the snapshot is being deleted (its sweep pends).
pub const SNAPSHOT_FLAG_DELETING: u32 = 1;
/// A snapshot's `parent` when it was taken of the live volume.
pub const PARENT_LIVE_VOLUME: u32 = u32::MAX;

use crate::fork::space_blocks;
pub use crate::fork::ForkRecord;

/// Section kinds of checkpoint version 3 (docs/format.md, "Snapshots and
/// time"). Never reuse a code; a reader refuses a kind it does not know.
pub mod section_kind {
    pub const SNAPSHOTS: u32 = 1;
    pub const BIRTHS: u32 = 2;
    pub const HISTORY: u32 = 3;
    pub const SWEEPS: u32 = 4;
    // 5 and 6 are kept for the clock and window sections.
    pub const FORKS: u32 = 7;
}

/// Bytes of one fork record in the fork section.
pub const FORK_RECORD_BYTES: usize = 96;
/// Bytes of one diverged leaf in the fork section: leaf index, 1024 bits.
pub const FORK_LEAF_BYTES: usize = 4 + LEAF_ENTRIES / 8;
const _: () = assert!(FORK_RECORD_BYTES == 4 + 4 + 4 + 4 + 8 + 8 + 1 + MAX_SNAPSHOT_NAME_BYTES);
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

const _: () = assert!(CHECKPOINT_HEADER_BYTES == 88 && aligned(CHECKPOINT_HEADER_BYTES, 8));
const _: () = assert!(CHECKPOINT_V2_HEADER_BYTES == 80);
const _: () = assert!(
    SNAPSHOT_RECORD_BYTES == 4 + 4 + 8 + 8 + 4 + 4 + 1 + MAX_SNAPSHOT_NAME_BYTES
        && HISTORY_RECORD_BYTES == 8 + 8 + 4 + 4
        && SWEEP_BYTES == 8 + 8
);
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
    /// Nameless writes and gap fills (docs/format.md §11).
    DataNameless = 7,
    /// Migrated nameless blocks.
    DataNamelessMoved = 8,
    /// The scratch zone of in-place collection.
    NamelessScratch = 9,
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
            7 => ZoneKind::DataNameless,
            8 => ZoneKind::DataNamelessMoved,
            9 => ZoneKind::NamelessScratch,
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

/// One snapshot of the snapshot table (section 1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SnapshotRecord {
    /// Handed out in increasing order, never reused; below the table's
    /// `next_snapshot_id`.
    pub id: u32,
    /// The epoch the snapshot closed; below the checkpoint's epoch.
    pub epoch: u32,
    /// Seq of its create; below the checkpoint's `next_seq`.
    pub create_seq: Seq,
    /// Wall time of the create, ns since 1970-01-01 UTC.
    pub wall_ns: u64,
    /// The snapshot it was taken of, or [`PARENT_LIVE_VOLUME`].
    pub parent: u32,
    /// A delete was logged; its sweep has not finished.
    pub deleting: bool,
    /// 1 ..= [`MAX_SNAPSHOT_NAME_BYTES`] bytes of UTF-8.
    pub name: SnapshotName,
}

/// A snapshot's name as the snapshot table holds it: at most
/// [`MAX_SNAPSHOT_NAME_BYTES`] bytes of UTF-8 in place, zeros after them,
/// so that a record is decoded, copied and compared without an allocation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SnapshotName {
    len: u8,
    bytes: [u8; MAX_SNAPSHOT_NAME_BYTES],
}

impl SnapshotName {
    /// `name`; panics (a bug) past [`MAX_SNAPSHOT_NAME_BYTES`] bytes.
    pub fn new(name: &str) -> SnapshotName {
        let len = name.len();
        assert!(
            len <= MAX_SNAPSHOT_NAME_BYTES,
            "snapshot name of {len} bytes"
        );
        let mut bytes = [0; MAX_SNAPSHOT_NAME_BYTES];
        bytes[..len].copy_from_slice(name.as_bytes());
        SnapshotName {
            len: len as u8,
            bytes,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).expect("a name is built from UTF-8")
    }
}

impl From<&str> for SnapshotName {
    fn from(name: &str) -> SnapshotName {
        SnapshotName::new(name)
    }
}

impl From<String> for SnapshotName {
    fn from(name: String) -> SnapshotName {
        SnapshotName::new(&name)
    }
}

impl std::fmt::Debug for SnapshotName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

/// One retained version (section 3): what `lba` held until the change of
/// seq `kill_seq` replaced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HistoryRecord {
    pub lba: u64,
    pub kill_seq: Seq,
    /// The shared-table id holding the version, or `None`: `lba` was unmapped.
    pub value: Option<u32>,
    /// The epoch of the version.
    pub birth: u32,
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
    /// The snapshot table, by id (version 3).
    pub snapshots: Vec<SnapshotRecord>,
    /// The id the next snapshot create gets (version 3).
    pub next_snapshot_id: u32,
    /// Birth epochs, as leaves of per-lba epochs in strictly increasing
    /// leaf_index order; only leaves with a non-zero birth (version 3).
    pub births: Vec<Leaf>,
    /// Retained versions, by (lba, kill_seq) (version 3).
    pub history: Vec<HistoryRecord>,
    /// Kill-seq ranges `(from, to)` a delete or window move has not swept
    /// yet, by `from`, disjoint (version 3).
    pub sweeps: Vec<(Seq, Seq)>,
    /// The live forks, by slot, with their diverged leaves (version 3).
    pub forks: Vec<ForkRecord>,
    /// The id the next fork create gets (version 3).
    pub next_fork_id: u32,
    /// The nameless state, sections 16–24 (version 3; docs/format.md §11).
    /// Empty by default, and then no section is written.
    pub nameless: NamelessImage,
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
        self.encode_version(CHECKPOINT_VERSION)
    }

    /// True when the image holds state only version 3 can record.
    fn has_snapshot_state(&self) -> bool {
        !self.snapshots.is_empty()
            || self.next_snapshot_id > 0
            || !self.births.is_empty()
            || !self.history.is_empty()
            || !self.sweeps.is_empty()
            || !self.forks.is_empty()
            || self.next_fork_id > 0
            || !self.nameless.is_empty()
    }

    /// The sections this image writes, `(kind, payload)` in kind order: a
    /// section only when it has content.
    fn sections(&self) -> Vec<(u32, Vec<u8>)> {
        let mut out = Vec::new();
        if !self.snapshots.is_empty() || self.next_snapshot_id > 0 {
            let count = u32::try_from(self.snapshots.len()).expect("snapshots fit u32");
            let mut w = Writer::with_capacity(8 + self.snapshots.len() * SNAPSHOT_RECORD_BYTES);
            w.u32(count);
            w.u32(self.next_snapshot_id);
            for s in &self.snapshots {
                let name = s.name.as_bytes();
                assert!(
                    (1..=MAX_SNAPSHOT_NAME_BYTES).contains(&name.len()),
                    "snapshot name of {} bytes",
                    name.len()
                );
                w.u32(s.id);
                w.u32(s.epoch);
                w.u64(s.create_seq);
                w.u64(s.wall_ns);
                w.u32(s.parent);
                w.u32(if s.deleting {
                    SNAPSHOT_FLAG_DELETING
                } else {
                    0
                });
                w.u8(name.len() as u8);
                w.bytes.extend_from_slice(name);
                w.bytes
                    .resize(w.bytes.len() + MAX_SNAPSHOT_NAME_BYTES - name.len(), 0);
            }
            out.push((section_kind::SNAPSHOTS, w.bytes));
        }
        if !self.births.is_empty() {
            let count = u32::try_from(self.births.len()).expect("birth leaves fit u32");
            let mut w = Writer::with_capacity(4 + self.births.len() * LEAF_BYTES);
            w.u32(count);
            for (index, leaf) in &self.births {
                w.u32(*index);
                leaf.iter().for_each(|&e| w.u32(e));
            }
            out.push((section_kind::BIRTHS, w.bytes));
        }
        if !self.history.is_empty() {
            let mut w = Writer::with_capacity(8 + self.history.len() * HISTORY_RECORD_BYTES);
            w.u64(self.history.len() as u64);
            for h in &self.history {
                assert_ne!(h.value, Some(UNMAPPED), "history value u32::MAX is None");
                w.u64(h.lba);
                w.u64(h.kill_seq);
                w.u32(h.value.unwrap_or(UNMAPPED));
                w.u32(h.birth);
            }
            out.push((section_kind::HISTORY, w.bytes));
        }
        if !self.sweeps.is_empty() {
            let count = u32::try_from(self.sweeps.len()).expect("sweeps fit u32");
            let mut w = Writer::with_capacity(4 + self.sweeps.len() * SWEEP_BYTES);
            w.u32(count);
            for &(from, to) in &self.sweeps {
                w.u64(from);
                w.u64(to);
            }
            out.push((section_kind::SWEEPS, w.bytes));
        }
        if !self.forks.is_empty() || self.next_fork_id > 0 {
            out.push((section_kind::FORKS, self.encode_forks()));
        }
        out.extend(self.nameless.sections());
        out
    }

    /// Section 7: `u32 count, u32 next_id`, `count` 96-byte records, then
    /// each record's diverged leaves in record order.
    fn encode_forks(&self) -> Vec<u8> {
        let leaves: usize = self.forks.iter().map(|f| f.diverged.len()).sum();
        let bytes = 8 + self.forks.len() * FORK_RECORD_BYTES + leaves * FORK_LEAF_BYTES;
        let mut w = Writer::with_capacity(bytes);
        w.u32(u32::try_from(self.forks.len()).expect("forks fit u32"));
        w.u32(self.next_fork_id);
        for r in &self.forks {
            let f = &r.fork;
            let name = f.name.as_bytes();
            assert!((1..=MAX_SNAPSHOT_NAME_BYTES).contains(&name.len()));
            w.u32(f.id);
            w.u32(f.slot);
            w.u32(f.base);
            w.u32(u32::try_from(r.diverged.len()).expect("leaves fit u32"));
            w.u64(f.create_seq);
            w.u64(f.wall_ns);
            w.u8(name.len() as u8);
            w.bytes.extend_from_slice(name);
            w.bytes
                .resize(w.bytes.len() + MAX_SNAPSHOT_NAME_BYTES - name.len(), 0);
        }
        for (index, words) in self.forks.iter().flat_map(|r| &r.diverged) {
            w.u32(*index);
            words.iter().for_each(|&word| w.u64(word));
        }
        assert_eq!(w.bytes.len(), bytes);
        w.bytes
    }

    /// The stream in checkpoint format `version` (1, 2 or 3) without the
    /// decode check; the image must hold nothing the version cannot record.
    fn encode_version(&self, version: u32) -> Vec<u8> {
        assert!((OLDEST_CHECKPOINT_VERSION..=CHECKPOINT_VERSION).contains(&version));
        assert!(
            version >= 3 || !self.has_snapshot_state(),
            "snapshot and nameless state need checkpoint version 3"
        );
        assert!(
            version >= 2 || (self.shared.is_empty() && self.attrs.is_empty() && !self.clean),
            "shared, attribute and clean state need checkpoint version 2"
        );
        let mapped = self.mapped_blocks();
        if let Some(crcs) = &self.crcs {
            assert_eq!(
                crcs.len() as u64,
                mapped,
                "checkpoint crc table does not match the mapped entries"
            );
        }
        let header_bytes = header_bytes_of(version);
        let sections = if version >= 3 {
            self.sections()
        } else {
            Vec::new()
        };
        let zone_count = u32::try_from(self.zones.len()).expect("zone count fits u32");
        let leaf_count = u32::try_from(self.leaves.len()).expect("leaf count fits u32");
        let crc_entries = self.crcs.as_ref().map_or(0, Vec::len);
        let total = header_bytes
            + self.zones.len() * ZONE_RECORD_BYTES
            + self.leaves.len() * LEAF_BYTES
            + crc_entries * 4
            + self.shared.len() * SHARED_ENTRY_BYTES
            + self.attrs.len() * ATTR_RANGE_BYTES
            + sections
                .iter()
                .map(|(_, p)| SECTION_HEADER_BYTES + p.len())
                .sum::<usize>()
            + CHECKPOINT_TRAILER_BYTES;
        let mut w = Writer::with_capacity(total);
        w.bytes.extend_from_slice(&CHECKPOINT_MAGIC);
        w.u32(version);
        w.u32(header_bytes as u32);
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
        if version >= 3 {
            w.u32(sections.len() as u32);
            w.u32(0);
        }
        assert_eq!(w.bytes.len(), header_bytes);
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
        for (kind, payload) in &sections {
            w.u32(*kind);
            w.u32(0);
            w.u64(payload.len() as u64);
            w.bytes.extend_from_slice(payload);
        }
        let crc = zftl_crc::crc32c(&w.bytes);
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
    crate::codec::need(STRUCTURE, bytes, CHECKPOINT_V2_HEADER_BYTES)?;
    let version = crate::codec::check_magic_versions(
        STRUCTURE,
        bytes,
        (MAGIC_OFF, CHECKPOINT_MAGIC),
        (VERSION_OFF, OLDEST_CHECKPOINT_VERSION, CHECKPOINT_VERSION),
    )?;
    let expected = header_bytes_of(version);
    let header_bytes = get_u32(bytes, HEADER_BYTES_OFF);
    if header_bytes as usize != expected {
        return Err(FormatError::Length {
            structure: "checkpoint header",
            expected: expected as u64,
            actual: header_bytes.into(),
        });
    }
    crate::codec::need(STRUCTURE, bytes, expected)?;
    let stream_bytes = get_u64(bytes, STREAM_BYTES_OFF);
    let min = (expected + CHECKPOINT_TRAILER_BYTES) as u64;
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

/// Bytes of the stream header in checkpoint format `version`.
fn header_bytes_of(version: u32) -> usize {
    if version >= 3 {
        CHECKPOINT_HEADER_BYTES
    } else {
        CHECKPOINT_V2_HEADER_BYTES
    }
}

/// Stream length implied by the header counts, sections aside (each adds
/// `SECTION_HEADER_BYTES + payload_bytes`), or `None` on overflow.
fn expected_stream_bytes(h: &Header) -> Option<u64> {
    let crc_entries = if h.crc_table { h.mapped_blocks } else { 0 };
    let zones = u64::from(h.zone_count).checked_mul(ZONE_RECORD_BYTES as u64)?;
    let leaves = u64::from(h.leaf_count).checked_mul(LEAF_BYTES as u64)?;
    let crcs = crc_entries.checked_mul(4)?;
    let shared = u64::from(h.shared_entries) * SHARED_ENTRY_BYTES as u64;
    let attrs = u64::from(h.attr_ranges) * ATTR_RANGE_BYTES as u64;
    ((header_bytes_of(h.version) + CHECKPOINT_TRAILER_BYTES) as u64)
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
    /// Sections after the tables (version 3; 0 before).
    section_count: u32,
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
    let section_count = if version >= 3 {
        zero(
            STRUCTURE,
            "reserved (offset 84)",
            get_u32(bytes, HEADER_RESERVED_OFF).into(),
        )?;
        get_u32(bytes, SECTION_COUNT_OFF)
    } else {
        0
    };
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
        section_count,
    };
    // Every section takes at least its 16-byte header; the payloads make up
    // the rest, which the section walk checks exactly.
    let implied = expected_stream_bytes(&h)
        .and_then(|n| n.checked_add(u64::from(h.section_count) * SECTION_HEADER_BYTES as u64));
    let fits = match implied {
        Some(n) if h.section_count == 0 => n == stream_bytes,
        Some(n) => n <= stream_bytes,
        None => false,
    };
    if !fits {
        return Err(FormatError::Length {
            structure: "checkpoint (stream size implied by the header counts)",
            expected: implied.unwrap_or(u64::MAX),
            actual: stream_bytes,
        });
    }
    if h.zone_count == 0 {
        return Err(range("zone_count", 0, "at least 1"));
    }
    if u64::from(h.leaf_count) > leaves_for(space_blocks(h.logical_blocks, h.crc_table)) {
        return Err(range(
            "leaf_count",
            h.leaf_count.into(),
            "at most ceil(logical_blocks × (1 + fork slots) / 1024)",
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
    let space = space_blocks(h.logical_blocks, h.crc_table);
    if u64::from(index) >= leaves_for(space) {
        return Err(range(
            "leaf_index",
            index.into(),
            "below ceil(logical_blocks × (1 + fork slots) / 1024)",
        ));
    }
    let first_lba = u64::from(index) * LEAF_ENTRIES as u64;
    let mut leaf = empty_leaf();
    for (i, slot) in leaf.iter_mut().enumerate() {
        let ppa = r.u32();
        if ppa == UNMAPPED {
            continue;
        }
        if first_lba + i as u64 >= space {
            return Err(range(
                "leaf entry lba",
                first_lba + i as u64,
                "mapped entries lie below logical_blocks × (1 + fork slots)",
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
    let mut r = Reader::new(bytes, header_bytes_of(h.version));
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
        snapshots: Vec::new(),
        next_snapshot_id: 0,
        births: Vec::new(),
        history: Vec::new(),
        sweeps: Vec::new(),
        forks: Vec::new(),
        next_fork_id: 0,
        nameless: NamelessImage::default(),
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
    let sections = decode_sections(&bytes[r.pos()..bytes.len() - CHECKPOINT_TRAILER_BYTES], &h)?;
    let zone_kinds: Vec<u8> = image.zones.iter().map(|z| z.kind.code()).collect();
    let nameless = NamelessImage::decode(
        &sections.nameless,
        &SectionContext {
            next_seq: h.next_seq,
            zone_kinds: &zone_kinds,
            device: bounds.map(|b| (b.physical_blocks, b.zone_capacity_blocks)),
        },
    )?;
    let image = CheckpointImage {
        crcs,
        shared,
        attrs,
        clean: h.clean,
        snapshots: sections.snapshots,
        next_snapshot_id: sections.next_snapshot_id,
        births: sections.births,
        history: sections.history,
        sweeps: sections.sweeps,
        forks: sections.forks,
        next_fork_id: sections.next_fork_id,
        nameless,
        ..image
    };
    check_shared(&image, bounds)?;
    check_attrs(&image)?;
    Ok(image)
}

/// The version-3 sections' contents; the nameless sections' payloads
/// (kinds 16 ..= 24) are decoded after the walk, with the zone table.
#[derive(Default)]
struct Sections<'a> {
    nameless: [Option<&'a [u8]>; 9],
    snapshots: Vec<SnapshotRecord>,
    next_snapshot_id: u32,
    births: Vec<Leaf>,
    history: Vec<HistoryRecord>,
    sweeps: Vec<(Seq, Seq)>,
    forks: Vec<ForkRecord>,
    next_fork_id: u32,
}

fn section_range(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: "checkpoint section",
        field,
        value,
        rule,
    }
}

/// Walks the `h.section_count` sections in `rest` (the bytes between the
/// attribute table and the trailer), which they must fill exactly.
fn decode_sections<'a>(mut rest: &'a [u8], h: &Header) -> Result<Sections<'a>, FormatError> {
    let mut out = Sections::default();
    let mut previous = 0;
    for _ in 0..h.section_count {
        crate::codec::need("checkpoint section header", rest, SECTION_HEADER_BYTES)?;
        let kind = get_u32(rest, 0);
        let known = (section_kind::SNAPSHOTS..=section_kind::SWEEPS).contains(&kind)
            || kind == section_kind::FORKS
            || NAMELESS_SECTIONS.contains(&kind);
        if !known {
            return Err(section_range(
                "kind",
                kind.into(),
                "a section kind this build knows (1 ..= 4, 7, 16 ..= 24); a newer zftl wrote it, and skipping it could lose state",
            ));
        }
        if kind <= previous {
            return Err(section_range(
                "kind",
                kind.into(),
                "strictly increasing from section to section",
            ));
        }
        zero("checkpoint section", "flags", get_u32(rest, 4).into())?;
        let payload_bytes = get_u64(rest, 8);
        let available = (rest.len() - SECTION_HEADER_BYTES) as u64;
        if payload_bytes > available {
            return Err(FormatError::Length {
                structure: "checkpoint section (payload_bytes past the stream's end)",
                expected: available,
                actual: payload_bytes,
            });
        }
        previous = kind;
        let end = SECTION_HEADER_BYTES + payload_bytes as usize;
        let payload = &rest[SECTION_HEADER_BYTES..end];
        match kind {
            section_kind::SNAPSHOTS => {
                (out.snapshots, out.next_snapshot_id) = decode_snapshot_table(payload, h)?
            }
            section_kind::BIRTHS => out.births = decode_births(payload, h)?,
            section_kind::HISTORY => out.history = decode_history(payload, h)?,
            section_kind::SWEEPS => out.sweeps = decode_sweeps(payload, h)?,
            section_kind::FORKS => (out.forks, out.next_fork_id) = decode_forks(payload, h)?,
            k if NAMELESS_SECTIONS.contains(&k) => {
                out.nameless[(k - nameless_section::HEADER) as usize] = Some(payload)
            }
            _ => unreachable!("section kind {kind} checked above"),
        }
        rest = &rest[end..];
    }
    if !rest.is_empty() {
        return Err(FormatError::Length {
            structure: "checkpoint sections (bytes left before the trailer)",
            expected: 0,
            actual: rest.len() as u64,
        });
    }
    Ok(out)
}

/// Checks that `payload` is `fixed + count * record` bytes, so that `count`
/// records can be allocated: a damaged count never allocates more than the
/// stream holds.
fn payload_fits(
    structure: &'static str,
    payload: &[u8],
    fixed: usize,
    count: u64,
    record: usize,
) -> Result<(), FormatError> {
    let implied = count
        .checked_mul(record as u64)
        .and_then(|n| n.checked_add(fixed as u64));
    if implied != Some(payload.len() as u64) {
        return Err(FormatError::Length {
            structure,
            expected: implied.unwrap_or(u64::MAX),
            actual: payload.len() as u64,
        });
    }
    if count == 0 {
        return Err(section_range(
            "count",
            0,
            "a section is written only when it has content",
        ));
    }
    Ok(())
}

/// Section 7: `u32 count, u32 next_id`, `count` 96-byte fork records,
/// then each record's diverged leaves, in record order.
fn decode_forks(payload: &[u8], h: &Header) -> Result<(Vec<ForkRecord>, u32), FormatError> {
    const S: &str = "checkpoint fork table (payload size implied by its counts)";
    crate::codec::need(S, payload, 8)?;
    let (count, next_id) = (get_u32(payload, 0), get_u32(payload, 4));
    let bad = |field, value: u64, rule| section_range(field, value, rule);
    if count == 0 && next_id == 0 {
        return Err(bad(
            "fork table",
            0,
            "written only with a fork or a next id above 0",
        ));
    }
    if count as usize > crate::fork::MAX_FORKS {
        return Err(bad("fork count", count.into(), "at most MAX_FORKS (15)"));
    }
    let records_end = 8 + count as usize * FORK_RECORD_BYTES;
    crate::codec::need(S, payload, records_end)?;
    let mut out: Vec<ForkRecord> = Vec::with_capacity(count as usize);
    let mut leaf_counts = Vec::with_capacity(count as usize);
    for record in payload[8..records_end].chunks_exact(FORK_RECORD_BYTES) {
        let mut r = Reader::new(record, 0);
        let (id, slot, base, leaves) = (r.u32(), r.u32(), r.u32(), r.u32());
        let (create_seq, wall_ns) = (r.u64(), r.u64());
        let name_len = usize::from(r.u8());
        let field = &record[r.pos()..];
        if !(1..=MAX_SNAPSHOT_NAME_BYTES).contains(&name_len) {
            return Err(bad("fork name_len", name_len as u64, "1 ..= 63"));
        }
        crate::codec::zero_bytes(
            "checkpoint fork table",
            "fork name padding",
            &field[name_len..],
        )?;
        let name = std::str::from_utf8(&field[..name_len])
            .map_err(|_| bad("fork name", id.into(), "valid UTF-8"))?;
        if create_seq >= h.next_seq {
            return Err(bad(
                "fork create seq",
                create_seq,
                "below the checkpoint's next seq",
            ));
        }
        let volume = h.logical_blocks;
        let fork = crate::fork::Fork {
            id,
            name: name.to_string(),
            base,
            slot,
            lba_offset: volume.saturating_mul(u64::from(slot) + 1),
            block_count: volume,
            create_seq,
            wall_ns,
        };
        leaf_counts.push(u64::from(leaves));
        out.push(ForkRecord {
            fork,
            diverged: Vec::new(),
        });
    }
    let total: u64 = leaf_counts.iter().sum();
    let implied = total
        .checked_mul(FORK_LEAF_BYTES as u64)
        .and_then(|n| n.checked_add(records_end as u64));
    if implied != Some(payload.len() as u64) {
        return Err(FormatError::Length {
            structure: S,
            expected: implied.unwrap_or(u64::MAX),
            actual: payload.len() as u64,
        });
    }
    let leaves_per_region = leaves_for(h.logical_blocks);
    let mut r = Reader::new(payload, records_end);
    for (record, &n) in out.iter_mut().zip(&leaf_counts) {
        for _ in 0..n {
            let index = r.u32();
            let mut words = [0u64; LEAF_ENTRIES / 64];
            words.iter_mut().for_each(|w| *w = r.u64());
            if u64::from(index) >= leaves_per_region {
                return Err(bad(
                    "fork diverged leaf",
                    index.into(),
                    "inside the fork's region",
                ));
            }
            if record.diverged.last().is_some_and(|&(p, _)| index <= p) {
                return Err(bad(
                    "fork diverged leaf",
                    index.into(),
                    "strictly increasing",
                ));
            }
            record.diverged.push((index, words));
        }
    }
    Ok((out, next_id))
}

/// Section 1: `u32 count, u32 next_id`, then `count` 96-byte records.
fn decode_snapshot_table(
    payload: &[u8],
    h: &Header,
) -> Result<(Vec<SnapshotRecord>, u32), FormatError> {
    const S: &str = "checkpoint snapshot table (payload size implied by its count)";
    crate::codec::need(S, payload, 8)?;
    let (count, next_id) = (get_u32(payload, 0), get_u32(payload, 4));
    if count == 0 && next_id == 0 {
        return Err(section_range(
            "snapshot table",
            0,
            "written only with a snapshot or a next id above 0",
        ));
    }
    if count > 0 {
        payload_fits(S, payload, 8, count.into(), SNAPSHOT_RECORD_BYTES)?;
    } else if payload.len() != 8 {
        return Err(FormatError::Length {
            structure: S,
            expected: 8,
            actual: payload.len() as u64,
        });
    }
    let bad = |field, value: u64, rule| section_range(field, value, rule);
    let mut out: Vec<SnapshotRecord> = Vec::with_capacity(count as usize);
    for record in payload[8..].chunks_exact(SNAPSHOT_RECORD_BYTES) {
        let mut r = Reader::new(record, 0);
        let (id, epoch, create_seq, wall_ns, parent, flags) =
            (r.u32(), r.u32(), r.u64(), r.u64(), r.u32(), r.u32());
        let name_len = usize::from(r.u8());
        let field = &record[r.pos()..];
        zero(
            "checkpoint snapshot table",
            "snapshot flags (unknown bits)",
            u64::from(flags & !SNAPSHOT_FLAG_DELETING),
        )?;
        if !(1..=MAX_SNAPSHOT_NAME_BYTES).contains(&name_len) {
            return Err(bad("snapshot name_len", name_len as u64, "1 ..= 63"));
        }
        // The padding is checked as a whole (one OR over it); the byte at
        // fault is looked for only when it is not all zero.
        let padding = &field[name_len..];
        if padding.iter().fold(0u8, |acc, &b| acc | b) != 0 {
            crate::codec::zero_bytes(
                "checkpoint snapshot table",
                "snapshot name padding",
                padding,
            )?;
        }
        std::str::from_utf8(&field[..name_len])
            .map_err(|_| bad("snapshot name", id.into(), "valid UTF-8"))?;
        let bytes = field[..MAX_SNAPSHOT_NAME_BYTES]
            .try_into()
            .expect("a record holds the whole name field");
        if id >= next_id {
            return Err(bad("snapshot id", id.into(), "below the table's next id"));
        }
        if let Some(p) = out.last() {
            if id <= p.id || epoch <= p.epoch || create_seq <= p.create_seq {
                return Err(bad(
                    "snapshot id",
                    id.into(),
                    "ids, epochs and create seqs strictly increasing",
                ));
            }
        }
        if create_seq >= h.next_seq {
            return Err(bad(
                "snapshot create_seq",
                create_seq,
                "below the checkpoint's next_seq",
            ));
        }
        if epoch >= h.epoch {
            return Err(bad(
                "snapshot epoch",
                epoch.into(),
                "below the checkpoint's epoch",
            ));
        }
        if parent != PARENT_LIVE_VOLUME && parent >= next_id {
            return Err(bad(
                "snapshot parent",
                parent.into(),
                "the live volume (u32::MAX) or an id below the table's next id",
            ));
        }
        out.push(SnapshotRecord {
            id,
            epoch,
            create_seq,
            wall_ns,
            parent,
            deleting: flags & SNAPSHOT_FLAG_DELETING != 0,
            // Zeros after the name: the padding was checked.
            name: SnapshotName {
                len: name_len as u8,
                bytes,
            },
        });
    }
    Ok((out, next_id))
}

/// Section 2: `u32 leaf_count`, then leaves of birth epochs.
fn decode_births(payload: &[u8], h: &Header) -> Result<Vec<Leaf>, FormatError> {
    const S: &str = "checkpoint births (payload size implied by its leaf count)";
    crate::codec::need(S, payload, 4)?;
    let count = get_u32(payload, 0);
    payload_fits(S, payload, 4, count.into(), LEAF_BYTES)?;
    let mut r = Reader::new(payload, 4);
    let mut out: Vec<Leaf> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let index = r.u32();
        if let Some(previous) = out.last().map(|l| l.0).filter(|&p| index <= p) {
            return Err(FormatError::LeafOrder { previous, index });
        }
        if u64::from(index) >= leaves_for(h.logical_blocks) {
            return Err(section_range(
                "births leaf_index",
                index.into(),
                "below ceil(logical_blocks / 1024)",
            ));
        }
        let first_lba = u64::from(index) * LEAF_ENTRIES as u64;
        let mut leaf = Box::new([0u32; LEAF_ENTRIES]);
        for (i, slot) in leaf.iter_mut().enumerate() {
            let birth = r.u32();
            if birth > h.epoch {
                return Err(section_range(
                    "birth epoch",
                    birth.into(),
                    "at most the checkpoint's epoch",
                ));
            }
            if birth != 0 && first_lba + i as u64 >= h.logical_blocks {
                return Err(section_range(
                    "birth lba",
                    first_lba + i as u64,
                    "births lie below logical_blocks",
                ));
            }
            *slot = birth;
        }
        if leaf.iter().all(|&b| b == 0) {
            return Err(section_range(
                "births leaf_index",
                index.into(),
                "a leaf with at least one non-zero birth",
            ));
        }
        out.push((index, leaf));
    }
    Ok(out)
}

/// Section 3: `u64 count`, then 24-byte history entries.
fn decode_history(payload: &[u8], h: &Header) -> Result<Vec<HistoryRecord>, FormatError> {
    const S: &str = "checkpoint history (payload size implied by its count)";
    crate::codec::need(S, payload, 8)?;
    let count = get_u64(payload, 0);
    payload_fits(S, payload, 8, count, HISTORY_RECORD_BYTES)?;
    let mut out: Vec<HistoryRecord> = Vec::with_capacity(count as usize);
    for record in payload[8..].chunks_exact(HISTORY_RECORD_BYTES) {
        let record: &[u8; HISTORY_RECORD_BYTES] = record.try_into().expect("an exact chunk");
        let (lba, kill_seq, value, birth) = (
            get_u64(record, 0),
            get_u64(record, 8),
            get_u32(record, 16),
            get_u32(record, 20),
        );
        if out
            .last()
            .is_some_and(|p| (lba, kill_seq) <= (p.lba, p.kill_seq))
        {
            return Err(section_range(
                "history lba",
                lba,
                "entries strictly increasing by (lba, kill seq)",
            ));
        }
        if lba >= h.logical_blocks {
            return Err(section_range("history lba", lba, "below logical_blocks"));
        }
        if kill_seq >= h.next_seq {
            return Err(section_range(
                "history kill_seq",
                kill_seq,
                "below the checkpoint's next_seq",
            ));
        }
        if birth > h.epoch {
            return Err(section_range(
                "history birth",
                birth.into(),
                "at most the checkpoint's epoch",
            ));
        }
        out.push(HistoryRecord {
            lba,
            kill_seq,
            value: (value != UNMAPPED).then_some(value),
            birth,
        });
    }
    Ok(out)
}

/// Section 4: `u32 count`, then `(from, to)` seq ranges.
fn decode_sweeps(payload: &[u8], h: &Header) -> Result<Vec<(Seq, Seq)>, FormatError> {
    const S: &str = "checkpoint pending sweeps (payload size implied by its count)";
    crate::codec::need(S, payload, 4)?;
    let count = get_u32(payload, 0);
    payload_fits(S, payload, 4, count.into(), SWEEP_BYTES)?;
    let mut r = Reader::new(payload, 4);
    let mut out: Vec<(Seq, Seq)> = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let (from, to) = (r.u64(), r.u64());
        if from >= to || to > h.next_seq {
            return Err(section_range(
                "sweep to",
                to,
                "from < to <= the checkpoint's next_seq",
            ));
        }
        if out.last().is_some_and(|&(_, end)| from < end) {
            return Err(section_range(
                "sweep from",
                from,
                "ranges sorted by from and disjoint",
            ));
        }
        out.push((from, to));
    }
    Ok(out)
}

/// The shared table: ids increasing, addresses distinct and on the
/// device, and each count equal to the leaf entries naming its id (with a
/// device at hand, which tells shared values from addresses).
fn check_shared(image: &CheckpointImage, bounds: Option<Bounds>) -> Result<(), FormatError> {
    let bad = |what: String| Err(FormatError::SharedTable(what));
    let mut previous = None;
    for e in &image.shared {
        if previous.is_some_and(|p| e.id <= p) {
            return bad(format!("entry {} out of order", e.id));
        }
        previous = Some(e.id);
        if e.refs == 0 {
            return bad(format!("entry {} has no references", e.id));
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
    }
    let mut ppas: Vec<u32> = image.shared.iter().map(|e| e.ppa).collect();
    ppas.sort_unstable();
    if let Some(w) = ppas.windows(2).find(|w| w[0] == w[1]) {
        return bad(format!("block {} named by two entries", w[0]));
    }
    // The ids increase strictly (checked above), so an id's entry is found
    // by its offset from the first when they are dense, else by a binary
    // search; `refs` counts by entry.
    let len = image.shared.len();
    let first = image.shared.first().map_or(0, |e| e.id);
    let dense = image
        .shared
        .last()
        .is_none_or(|e| (e.id - first) as usize + 1 == len);
    let index = |id: u32| -> Option<usize> {
        if dense {
            id.checked_sub(first)
                .map(|i| i as usize)
                .filter(|&i| i < len)
        } else {
            image.shared.binary_search_by_key(&id, |e| e.id).ok()
        }
    };
    let mut refs = vec![0u32; len];
    // A history entry holds a reference of its own (format.md, "Snapshots
    // and time"): refs counts them with the leaf entries.
    for h in &image.history {
        if let Some(id) = h.value {
            match index(id) {
                Some(i) => refs[i] = refs[i].saturating_add(1),
                None => {
                    return bad(format!(
                    "history entry (lba {}, kill seq {}) names entry {id}, which the table lacks",
                    h.lba, h.kill_seq
                ))
                }
            }
        }
    }
    let Some(b) = bounds else { return Ok(()) };
    for (_, leaf) in &image.leaves {
        for &v in leaf
            .iter()
            .filter(|&&v| v != UNMAPPED && u64::from(v) >= b.physical_blocks)
        {
            let id = v - b.physical_blocks as u32;
            match index(id) {
                Some(i) => refs[i] = refs[i].saturating_add(1),
                None => return bad(format!("a leaf names entry {id}, which the table lacks")),
            }
        }
    }
    for (e, &held) in image.shared.iter().zip(&refs) {
        if held != e.refs {
            return bad(format!(
                "entry {} records {} references, the leaves and the history hold {held}",
                e.id, e.refs
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

/// The log blocks of [`split_into_chunks`], encoded straight from the
/// stream's slices (each checked as [`ChunkRef::encode`] does).
pub fn encode_chunks(stream: &[u8], block_size: usize, first_log_seq: u64) -> Vec<Vec<u8>> {
    assert!(!stream.is_empty(), "empty checkpoint stream");
    stream
        .chunks(chunk_payload_bytes(block_size))
        .enumerate()
        .map(|(i, payload)| {
            ChunkRef {
                log_seq: first_log_seq
                    .checked_add(i as u64)
                    .expect("log_seq overflow"),
                checkpoint_id: first_log_seq,
                index: u32::try_from(i).expect("chunk index fits u32"),
                payload,
            }
            .encode(block_size)
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
            snapshots: Vec::new(),
            next_snapshot_id: 0,
            births: Vec::new(),
            history: Vec::new(),
            sweeps: Vec::new(),
            forks: Vec::new(),
            next_fork_id: 0,
            nameless: NamelessImage::default(),
        }
    }

    /// `small_image` with every section: two snapshots, a births leaf, two
    /// history entries (one holding shared entry 3) and a pending sweep.
    fn snapshot_image() -> CheckpointImage {
        let mut image = small_image();
        image.epoch = 3;
        image.shared = vec![SharedRecord {
            id: 3,
            ppa: 40,
            refs: 1,
            crc: 0,
        }];
        image.snapshots = vec![
            SnapshotRecord {
                id: 0,
                epoch: 1,
                create_seq: 100,
                wall_ns: 1_700_000_000_000_000_000,
                parent: PARENT_LIVE_VOLUME,
                deleting: false,
                name: "nightly".into(),
            },
            SnapshotRecord {
                id: 2,
                epoch: 2,
                create_seq: 500,
                wall_ns: 1_700_000_001_000_000_000,
                parent: 0,
                deleting: true,
                name: "é".repeat(31).into(),
            },
        ];
        image.next_snapshot_id = 3;
        let mut births = Box::new([0u32; LEAF_ENTRIES]);
        births[0] = 1;
        births[7] = 3;
        image.births = vec![(1, births)];
        image.history = vec![
            HistoryRecord {
                lba: 1024,
                kill_seq: 600,
                value: Some(3),
                birth: 1,
            },
            HistoryRecord {
                lba: 1024,
                kill_seq: 700,
                value: None,
                birth: 3,
            },
        ];
        image.sweeps = vec![(100, 500), (500, 900)];
        image
    }

    /// `image` encoded (it must have no sections of its own) with `sections`
    /// `(kind, flags, payload)` spliced in before the trailer, counts and
    /// CRC fixed up: a stream a future or a damaged writer could produce.
    fn with_sections(image: &CheckpointImage, sections: &[(u32, u32, Vec<u8>)]) -> Vec<u8> {
        let mut b = image.encode();
        assert_eq!(get_u32(&b, SECTION_COUNT_OFF), 0);
        b.truncate(b.len() - CHECKPOINT_TRAILER_BYTES);
        for (kind, flags, payload) in sections {
            b.extend_from_slice(&kind.to_le_bytes());
            b.extend_from_slice(&flags.to_le_bytes());
            b.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            b.extend_from_slice(payload);
        }
        b.extend_from_slice(&[0; CHECKPOINT_TRAILER_BYTES]);
        crate::codec::put_u32(&mut b, SECTION_COUNT_OFF, sections.len() as u32);
        let n = b.len() as u64;
        crate::codec::put_u64(&mut b, STREAM_BYTES_OFF, n);
        reseal(&mut b);
        b
    }

    /// A pending-sweeps payload: `count`, then the given ranges.
    fn sweeps_payload(count: u32, ranges: &[(u64, u64)]) -> Vec<u8> {
        let mut p = count.to_le_bytes().to_vec();
        for (from, to) in ranges {
            p.extend_from_slice(&from.to_le_bytes());
            p.extend_from_slice(&to.to_le_bytes());
        }
        p
    }

    /// Snapshot-state parts for `arb_image`, shaped there to the image.
    #[derive(Clone, Debug)]
    struct SnapParts {
        names: Vec<(String, u64, u32, bool, u32)>,
        extra_ids: u32,
        births: Vec<(u32, Vec<(usize, u32)>)>,
        shared: usize,
        history: Vec<(u64, u64, Option<usize>, u32)>,
        sweeps: Vec<u64>,
    }

    fn arb_snap_parts() -> impl Strategy<Value = Option<SnapParts>> {
        let parts = (
            vec(
                (
                    "\\PC{1,21}",
                    any::<u64>(),
                    any::<u32>(),
                    any::<bool>(),
                    0u32..3,
                ),
                0..4,
            ),
            0u32..3,
            vec(
                (
                    any::<u32>(),
                    vec((0usize..LEAF_ENTRIES, any::<u32>()), 1..10),
                ),
                0..3,
            ),
            0usize..4,
            vec(
                (
                    any::<u64>(),
                    any::<u64>(),
                    proptest::option::of(any::<usize>()),
                    any::<u32>(),
                ),
                0..10,
            ),
            vec(any::<u64>(), 0..8),
        )
            .prop_map(
                |(names, extra_ids, births, shared, history, sweeps)| SnapParts {
                    names,
                    extra_ids,
                    births,
                    shared,
                    history,
                    sweeps,
                },
            );
        proptest::option::of(parts)
    }

    /// Gives `image` the snapshot state `parts` describes, made consistent
    /// with the rules `decode` checks.
    fn add_snapshot_state(image: &mut CheckpointImage, parts: SnapParts, physical: u32) {
        let n = parts.names.len();
        image.epoch = image.epoch.max(n as u32 + 1);
        image.next_seq = image.next_seq.max(1000);
        let (epoch, next_seq) = (image.epoch, image.next_seq);
        let epoch_step = (epoch - 1) / n.max(1) as u32;
        let seq_step = next_seq / n.max(1) as u64;
        let mut id = 0u32;
        for (i, (name, wall_ns, parent, deleting, gap)) in parts.names.into_iter().enumerate() {
            id += gap;
            let mut end = name.len().min(MAX_SNAPSHOT_NAME_BYTES);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            image.snapshots.push(SnapshotRecord {
                id,
                epoch: 1 + i as u32 * epoch_step,
                create_seq: i as u64 * seq_step,
                wall_ns,
                parent: if parent % 2 == 0 {
                    PARENT_LIVE_VOLUME
                } else {
                    parent % (id + 1)
                },
                deleting,
                name: name[..end].into(),
            });
            id += 1;
        }
        image.next_snapshot_id = id + parts.extra_ids;
        let birth = |pick: u32| (u64::from(pick) % (u64::from(epoch) + 1)) as u32;
        let leaf_total = leaves_for(image.logical_blocks) as u32;
        let mut births: Vec<Leaf> = Vec::new();
        for (pick, entries) in parts.births {
            let index = pick % leaf_total;
            if births.iter().any(|l| l.0 == index) {
                continue;
            }
            let mut leaf = Box::new([0u32; LEAF_ENTRIES]);
            for (off, b) in entries {
                if u64::from(index) * LEAF_ENTRIES as u64 + (off as u64) < image.logical_blocks {
                    leaf[off] = birth(b);
                }
            }
            if leaf.iter().any(|&b| b != 0) {
                births.push((index, leaf));
            }
        }
        births.sort_by_key(|l| l.0);
        image.births = births;
        let ids: Vec<u32> = (0..parts.shared as u32).map(|i| 3 * i + 1).collect();
        let mut history: Vec<HistoryRecord> = parts
            .history
            .into_iter()
            .map(|(lba, kill, value, b)| HistoryRecord {
                lba: lba % image.logical_blocks,
                kill_seq: kill % next_seq,
                value: value
                    .filter(|_| !ids.is_empty())
                    .map(|v| ids[v % ids.len()]),
                birth: birth(b),
            })
            .collect();
        history.sort_by_key(|h| (h.lba, h.kill_seq));
        history.dedup_by_key(|h| (h.lba, h.kill_seq));
        image.history = history;
        image.shared = ids
            .iter()
            .enumerate()
            .map(|(i, &id)| SharedRecord {
                id,
                ppa: (physical - 1 - i as u32),
                refs: image.history.iter().filter(|h| h.value == Some(id)).count() as u32,
                crc: id,
            })
            .filter(|e| e.refs > 0)
            .collect();
        let mut points: Vec<u64> = parts.sweeps.iter().map(|p| p % next_seq + 1).collect();
        points.sort_unstable();
        points.dedup();
        image.sweeps = points.chunks_exact(2).map(|p| (p[0], p[1])).collect();
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
            snap in arb_snap_parts(),
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
                snapshots: Vec::new(), next_snapshot_id: 0, births: Vec::new(),
                history: Vec::new(), sweeps: Vec::new(), forks: Vec::new(), next_fork_id: 0,
                nameless: NamelessImage::default(),
            };
            if let Some(parts) = snap {
                add_snapshot_state(&mut image, parts, physical);
            }
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
        assert_eq!(get_u32(&b, VERSION_OFF), 3);
        assert_eq!(get_u32(&b, HEADER_BYTES_OFF), 88);
        assert_eq!(get_u64(&b, STREAM_BYTES_OFF), b.len() as u64);
        // A volume that never had a snapshot writes no section.
        assert_eq!(get_u32(&b, SECTION_COUNT_OFF), 0);
        assert_eq!(b.len(), 88 + 8 * 32 + 4100 + 2 * 4 + 4);
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
    fn sections_are_laid_out_as_documented() {
        let image = snapshot_image();
        let b = image.encode();
        assert_eq!(CheckpointImage::decode(&b, 800), Ok(image.clone()));
        assert_eq!(get_u32(&b, SECTION_COUNT_OFF), 4);
        assert_eq!(get_u32(&b, HEADER_RESERVED_OFF), 0);
        let tables = 88 + 8 * 32 + 4100 + 2 * 4 + 16;
        let sizes = [8 + 2 * 96, 4 + 4100, 8 + 2 * 24, 4 + 2 * 16];
        let mut at = tables;
        for (kind, size) in (1u32..).zip(sizes) {
            assert_eq!(get_u32(&b, at), kind);
            assert_eq!(get_u32(&b, at + 4), 0);
            assert_eq!(get_u64(&b, at + 8), size as u64);
            at += 16 + size;
        }
        assert_eq!(at + 4, b.len());
        // Section 1: count, next id, then the first record.
        let s1 = tables + 16;
        assert_eq!((get_u32(&b, s1), get_u32(&b, s1 + 4)), (2, 3));
        let rec = s1 + 8;
        assert_eq!(get_u32(&b, rec), 0);
        assert_eq!(get_u32(&b, rec + 4), 1);
        assert_eq!(get_u64(&b, rec + 8), 100);
        assert_eq!(get_u32(&b, rec + 24), PARENT_LIVE_VOLUME);
        assert_eq!(get_u32(&b, rec + 28), 0);
        assert_eq!(b[rec + 32], 7);
        assert_eq!(&b[rec + 33..rec + 40], b"nightly");
        assert!(b[rec + 40..rec + 96].iter().all(|&x| x == 0));
        assert_eq!(get_u32(&b, rec + 96 + 28), SNAPSHOT_FLAG_DELETING);
        assert_eq!(b[rec + 96 + 32], 62);
        // Section 3: an unmapped history value is u32::MAX.
        let s3 = tables + 16 + sizes[0] + 16 + sizes[1] + 16;
        assert_eq!(get_u64(&b, s3), 2);
        assert_eq!(get_u32(&b, s3 + 8 + 16), 3);
        assert_eq!(get_u32(&b, s3 + 8 + 24 + 16), UNMAPPED);
        // Only the sections with content are written.
        let mut some = snapshot_image();
        some.births.clear();
        some.sweeps.clear();
        let b = some.encode();
        assert_eq!(get_u32(&b, SECTION_COUNT_OFF), 2);
        assert_eq!(CheckpointImage::decode(&b, 800), Ok(some));
        let mut only_next = small_image();
        only_next.next_snapshot_id = 5;
        let b = only_next.encode();
        assert_eq!(get_u32(&b, SECTION_COUNT_OFF), 1);
        assert_eq!(CheckpointImage::decode(&b, 800), Ok(only_next));
    }

    #[test]
    fn the_fork_section_round_trips_and_is_checked() {
        let mut image = small_image();
        let mut bits = [0u64; LEAF_ENTRIES / 64];
        bits[3] = 0b101;
        let fork = |id: u32, slot: u32, name: &str| crate::fork::Fork {
            id,
            name: name.to_string(),
            base: 0,
            slot,
            lba_offset: 1500 * (u64::from(slot) + 1),
            block_count: 1500,
            create_seq: 900 + u64::from(id),
            wall_ns: 77,
        };
        image.forks = vec![
            ForkRecord {
                fork: fork(1, 0, "dev"),
                diverged: vec![(0, bits), (1, bits)],
            },
            ForkRecord {
                fork: fork(4, 2, "test"),
                diverged: Vec::new(),
            },
        ];
        image.next_fork_id = 5;
        // A fork's block mapped in its region (slot 0: blocks 1500..3000).
        let mut leaf = empty_leaf();
        leaf[1] = 6;
        image.leaves.push((2, leaf));
        if let Some(crcs) = &mut image.crcs {
            crcs.push(0xabcd);
        }
        let b = image.encode();
        assert_eq!(CheckpointImage::decode(&b, 800), Ok(image.clone()));
        // A diverged leaf past the region, and a count past MAX_FORKS.
        let mut past = image.clone();
        past.forks[0].diverged[1].0 = 2;
        let e = CheckpointImage::decode(&past.encode_version(CHECKPOINT_VERSION), 800);
        assert!(
            matches!(
                e,
                Err(FormatError::OutOfRange {
                    field: "fork diverged leaf",
                    ..
                })
            ),
            "{e:?}"
        );
        let mut many = b.clone();
        let at =
            b.len() - CHECKPOINT_TRAILER_BYTES - (8 + 2 * FORK_RECORD_BYTES + 2 * FORK_LEAF_BYTES);
        crate::codec::put_u32(&mut many, at, 16);
        reseal(&mut many);
        assert!(CheckpointImage::decode(&many, 800).is_err());
    }

    #[test]
    fn unknown_section_kind_is_refused() {
        // Kinds 5 (clock) and 6 (window) are not built yet: refused, not skipped.
        for kind in [0, 5, 6, 25, u32::MAX] {
            let b = with_sections(&small_image(), &[(kind, 0, vec![0; 24])]);
            assert_eq!(
                CheckpointImage::decode(&b, 800),
                Err(section_range(
                    "kind",
                    kind.into(),
                    "a section kind this build knows (1 ..= 4, 7, 16 ..= 24); a newer zftl wrote it, and skipping it could lose state",
                )),
                "kind {kind}"
            );
        }
        let sweeps = sweeps_payload(1, &[(1, 2)]);
        let b = with_sections(&small_image(), &[(4, 0, sweeps.clone())]);
        assert_eq!(
            CheckpointImage::decode(&b, 800).map(|i| i.sweeps),
            Ok(vec![(1, 2)])
        );
        let b = with_sections(&small_image(), &[(4, 0, sweeps.clone()), (9, 0, vec![])]);
        assert!(CheckpointImage::decode(&b, 800).is_err());
        // Section flags are reserved.
        let b = with_sections(&small_image(), &[(4, 1, sweeps)]);
        assert!(matches!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::Reserved { .. })
        ));
    }

    #[test]
    fn sections_out_of_order_are_refused() {
        let sweeps = sweeps_payload(1, &[(1, 2)]);
        let mut births = vec![1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0];
        births.resize(4 + LEAF_BYTES, 0);
        for sections in [
            vec![(4, 0, sweeps.clone()), (2, 0, births.clone())],
            vec![(4, 0, sweeps.clone()), (4, 0, sweeps.clone())],
        ] {
            let b = with_sections(&small_image(), &sections);
            assert!(
                matches!(
                    CheckpointImage::decode(&b, 800),
                    Err(FormatError::OutOfRange { field: "kind", .. })
                ),
                "{:?}",
                sections.iter().map(|s| s.0).collect::<Vec<_>>()
            );
        }
        let mut base = small_image();
        base.epoch = 1;
        let b = with_sections(&base, &[(2, 0, births), (4, 0, sweeps)]);
        let image = CheckpointImage::decode(&b, 800).expect("in order");
        assert_eq!(image.births.len(), 1);
        assert_eq!(image.births[0].1[0], 1);
        assert_eq!(image.births[0].1[1], 0);
        assert_eq!((image.births[0].0, image.sweeps.len()), (1, 1));
    }

    #[test]
    fn section_size_must_match_its_counts() {
        // Two sweeps counted, one stored.
        let b = with_sections(&small_image(), &[(4, 0, sweeps_payload(2, &[(1, 2)]))]);
        assert!(matches!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::Length { .. })
        ));
        // One counted, two stored.
        let b = with_sections(
            &small_image(),
            &[(4, 0, sweeps_payload(1, &[(1, 2), (3, 4)]))],
        );
        assert!(matches!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::Length { .. })
        ));
        // A payload_bytes that disagrees with the stream: the sections no
        // longer fill it exactly.
        let good = with_sections(&small_image(), &[(4, 0, sweeps_payload(1, &[(1, 2)]))]);
        let at = good.len() - CHECKPOINT_TRAILER_BYTES - 20 - 8;
        assert_eq!(get_u64(&good, at), 20);
        for wrong in [16, 21, u64::MAX] {
            let mut b = good.clone();
            crate::codec::put_u64(&mut b, at, wrong);
            reseal(&mut b);
            assert!(
                matches!(
                    CheckpointImage::decode(&b, 800),
                    Err(FormatError::Length { .. })
                ),
                "payload_bytes {wrong}"
            );
        }
        // A section count the stream cannot hold.
        let mut b = good;
        crate::codec::put_u32(&mut b, SECTION_COUNT_OFF, 2);
        reseal(&mut b);
        assert!(matches!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::Length { .. })
        ));
        // An empty section is never written, so it is refused.
        let b = with_sections(&small_image(), &[(4, 0, sweeps_payload(0, &[]))]);
        assert!(CheckpointImage::decode(&b, 800).is_err());
    }

    #[test]
    fn shared_entries_are_found_with_sparse_and_dense_ids() {
        // Leaf entries 9, 10, 11 of leaf 1 name the entries `ids` (800
        // physical blocks), one reference each, blocks 40, 41, 42.
        let image_with = |ids: [u32; 3], named: [u32; 3]| {
            let mut image = small_image();
            for (i, id) in named.into_iter().enumerate() {
                image.leaves[0].1[9 + i] = 800 + id;
            }
            image.crcs = Some(vec![1, 2, 3, 4, 5]);
            image.shared = (0..3)
                .map(|i| SharedRecord {
                    id: ids[i],
                    ppa: 40 + i as u32,
                    refs: 1,
                    crc: 0,
                })
                .collect();
            image
        };
        let unchecked = |x: CheckpointImage| x.encode_unchecked();
        for ids in [[3, 5, 9], [3, 4, 5]] {
            let image = image_with(ids, ids);
            assert_eq!(
                CheckpointImage::decode(&image.encode(), 800),
                Ok(image.clone())
            );
        }
        // A leaf naming an id the table lacks: between, below or past the
        // ids, sparse or dense.
        for (ids, named) in [
            ([3, 5, 9], [3, 4, 9]),
            ([3, 5, 9], [2, 5, 9]),
            ([3, 5, 9], [3, 5, 10]),
            ([3, 4, 5], [2, 4, 5]),
            ([3, 4, 5], [3, 4, 6]),
        ] {
            assert!(
                matches!(
                    CheckpointImage::decode(&unchecked(image_with(ids, named)), 800),
                    Err(FormatError::SharedTable(_))
                ),
                "ids {ids:?}, leaves name {named:?}"
            );
        }
        // Two entries naming one block.
        let mut wrong = image_with([3, 5, 9], [3, 5, 9]);
        wrong.shared[2].ppa = 40;
        assert!(matches!(
            CheckpointImage::decode(&unchecked(wrong), 800),
            Err(FormatError::SharedTable(_))
        ));
        // A count that disagrees with the leaves, in the middle of the table.
        let mut wrong = image_with([3, 5, 9], [3, 5, 9]);
        wrong.shared[1].refs = 2;
        assert!(matches!(
            CheckpointImage::decode(&unchecked(wrong), 800),
            Err(FormatError::SharedTable(_))
        ));
    }

    #[test]
    fn history_value_must_name_a_shared_entry() {
        let unchecked = |x: CheckpointImage| x.encode_unchecked();
        let mut wrong = snapshot_image();
        wrong.history[0].value = Some(4);
        let b = unchecked(wrong.clone());
        assert!(matches!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::SharedTable(_))
        ));
        // Refused without a device too (the encoder's self-check).
        assert!(matches!(
            decode_with(&b, None),
            Err(FormatError::SharedTable(_))
        ));
        // The history's reference is counted in refs.
        let mut wrong = snapshot_image();
        wrong.history[1].value = Some(3);
        assert!(matches!(
            CheckpointImage::decode(&unchecked(wrong), 800),
            Err(FormatError::SharedTable(_))
        ));
        let mut right = snapshot_image();
        right.history[1].value = Some(3);
        right.shared[0].refs = 2;
        assert_eq!(
            CheckpointImage::decode(&right.encode(), 800),
            Ok(right.clone())
        );
    }

    #[test]
    fn section_records_are_checked() {
        let unchecked = |x: CheckpointImage| x.encode_unchecked();
        let refused = |x: CheckpointImage| CheckpointImage::decode(&unchecked(x), 800).is_err();
        type Break = fn(&mut CheckpointImage);
        let breaks: Vec<(&str, Break)> = vec![
            ("id at next id", |i| i.next_snapshot_id = 2),
            ("ids out of order", |i| i.snapshots[1].id = 0),
            ("epochs out of order", |i| i.snapshots[1].epoch = 1),
            ("create seqs out of order", |i| {
                i.snapshots[1].create_seq = 100
            }),
            ("create seq at next_seq", |i| {
                i.snapshots[1].create_seq = 1000
            }),
            ("epoch at the checkpoint's", |i| i.snapshots[1].epoch = 3),
            ("parent past next id", |i| i.snapshots[1].parent = 3),
            ("birth past the epoch", |i| i.births[0].1[3] = 4),
            ("birth past the volume", |i| i.births[0].1[500] = 1),
            ("births leaf past the volume", |i| i.births[0].0 = 2),
            ("births leaf all zero", |i| {
                *i.births[0].1 = [0; LEAF_ENTRIES]
            }),
            ("history out of order", |i| i.history[1].kill_seq = 600),
            ("history past the volume", |i| {
                i.history[0].lba = 1500;
                i.history[1].lba = 1501
            }),
            ("history kill at next_seq", |i| i.history[1].kill_seq = 1000),
            ("history birth past the epoch", |i| i.history[1].birth = 4),
            ("sweep empty", |i| i.sweeps[0] = (100, 100)),
            ("sweep past next_seq", |i| i.sweeps[1] = (500, 1001)),
            ("sweeps overlap", |i| i.sweeps[1] = (499, 900)),
            ("sweeps out of order", |i| {
                i.sweeps = vec![(500, 900), (100, 500)]
            }),
        ];
        assert!(!refused(snapshot_image()));
        for (what, break_it) in breaks {
            let mut image = snapshot_image();
            break_it(&mut image);
            assert!(refused(image), "{what} accepted");
        }
        // Byte-level rules the image type cannot express.
        let b = snapshot_image().encode();
        let rec = 88 + 8 * 32 + 4100 + 2 * 4 + 16 + 16 + 8;
        let patch = |at: usize, v: u8| {
            let mut f = b.clone();
            f[at] = v;
            reseal(&mut f);
            CheckpointImage::decode(&f, 800)
        };
        assert!(matches!(
            patch(rec + 28, 2),
            Err(FormatError::Reserved { .. })
        ));
        assert!(patch(rec + 32, 0).is_err(), "name_len 0");
        assert!(patch(rec + 32, 64).is_err(), "name_len 64");
        assert!(patch(rec + 32, 6).is_err(), "non-zero padding");
        assert!(patch(rec + 33, 0xFF).is_err(), "invalid UTF-8");
        // A multi-byte character cut by name_len is not UTF-8.
        assert!(patch(rec + 96 + 32, 61).is_err(), "cut character");
        assert!(patch(rec + 40, 0).is_ok());
        let reserved = b.clone();
        let mut f = reserved;
        f[HEADER_RESERVED_OFF] = 1;
        reseal(&mut f);
        assert!(matches!(
            CheckpointImage::decode(&f, 800),
            Err(FormatError::Reserved { .. })
        ));
    }

    #[test]
    fn huge_section_counts_do_not_allocate() {
        let mut huge_history = u64::MAX.to_le_bytes().to_vec();
        huge_history.extend_from_slice(&[0; 24]);
        let mut huge_births = u32::MAX.to_le_bytes().to_vec();
        huge_births.extend_from_slice(&[0; LEAF_BYTES]);
        let mut huge_table = u32::MAX.to_le_bytes().to_vec();
        huge_table.extend_from_slice(&[0; 4 + 96]);
        for (kind, payload) in [
            (1, huge_table),
            (2, huge_births),
            (3, huge_history),
            (4, sweeps_payload(u32::MAX, &[(1, 2)])),
            (4, sweeps_payload(1 << 28, &[(1, 2)])),
        ] {
            let b = with_sections(&small_image(), &[(kind, 0, payload)]);
            assert!(
                matches!(
                    CheckpointImage::decode(&b, 800),
                    Err(FormatError::Length { .. })
                ),
                "kind {kind}"
            );
        }
        let mut b = with_sections(&small_image(), &[(4, 0, sweeps_payload(1, &[(1, 2)]))]);
        crate::codec::put_u32(&mut b, SECTION_COUNT_OFF, u32::MAX);
        reseal(&mut b);
        assert!(matches!(
            CheckpointImage::decode(&b, 800),
            Err(FormatError::Length { .. })
        ));
    }

    #[test]
    fn version_2_streams_are_read() {
        let mut image = small_image();
        image.leaves[0].1[9] = 800 + 3;
        image.crcs = Some(vec![1, 2, 3]);
        image.shared = vec![SharedRecord {
            id: 3,
            ppa: 40,
            refs: 1,
            crc: 9,
        }];
        image.attrs = vec![AttrRecord {
            lba: 1024,
            block_count: 10,
            bits: 1,
        }];
        image.clean = true;
        let b = image.encode_version(2);
        assert_eq!(get_u32(&b, VERSION_OFF), 2);
        assert_eq!(get_u32(&b, HEADER_BYTES_OFF), 80);
        assert_eq!(peek_stream_bytes(&b), Ok(b.len() as u64));
        let read = CheckpointImage::decode(&b, 800).expect("version 2");
        assert!(read.snapshots.is_empty() && read.births.is_empty());
        assert!(read.history.is_empty() && read.sweeps.is_empty());
        assert_eq!(read.next_snapshot_id, 0);
        assert_eq!(read, image);
        // The header size must match the version, both ways.
        let mut wrong = b.clone();
        crate::codec::put_u32(&mut wrong, HEADER_BYTES_OFF, 88);
        reseal(&mut wrong);
        assert!(matches!(
            CheckpointImage::decode(&wrong, 800),
            Err(FormatError::Length { .. })
        ));
        let mut wrong = image.encode();
        crate::codec::put_u32(&mut wrong, HEADER_BYTES_OFF, 80);
        reseal(&mut wrong);
        assert!(CheckpointImage::decode(&wrong, 800).is_err());
        let mut wrong = image.encode();
        crate::codec::put_u32(&mut wrong, VERSION_OFF, 2);
        reseal(&mut wrong);
        assert!(CheckpointImage::decode(&wrong, 800).is_err());
        // Version 4 is newer than this build.
        let mut newer = image.encode();
        crate::codec::put_u32(&mut newer, VERSION_OFF, 4);
        reseal(&mut newer);
        assert!(matches!(
            CheckpointImage::decode(&newer, 800),
            Err(FormatError::NewerVersion { found: 4, .. })
        ));
    }

    #[test]
    fn version_1_streams_are_read() {
        let image = small_image();
        let b = image.encode_version(1);
        assert_eq!(get_u32(&b, VERSION_OFF), 1);
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
    fn chunks_encoded_from_the_stream_are_the_split_chunks_encoded() {
        let b = snapshot_image().encode();
        for block_size in [512, 4096] {
            let blocks = encode_chunks(&b, block_size, 40);
            let split: Vec<Vec<u8>> = split_into_chunks(&b, block_size, 40)
                .iter()
                .map(|c| c.encode(block_size))
                .collect();
            assert_eq!(blocks, split);
            let decoded: Vec<LogBlock> = blocks
                .iter()
                .map(|x| LogBlock::decode(x).expect("chunk"))
                .collect();
            assert_eq!(join_chunks(&decoded).as_deref(), Ok(&b[..]));
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
        fn sealed_damage_never_panics(
            (physical, image) in arb_image(),
            damage in vec((any::<usize>(), any::<u8>()), 1..8),
            sections in proptest::option::of(0u32..8),
        ) {
            let mut b = image.encode();
            let body = b.len() - CHECKPOINT_TRAILER_BYTES;
            for (at, v) in damage {
                // Past the header, where the section walk reads.
                let at = CHECKPOINT_HEADER_BYTES + at % (body - CHECKPOINT_HEADER_BYTES);
                b[at] = v;
            }
            if let Some(n) = sections {
                crate::codec::put_u32(&mut b, SECTION_COUNT_OFF, n);
            }
            reseal(&mut b);
            let _ = CheckpointImage::decode(&b, physical);
        }

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

/// The nameless sections (16–24) in the checkpoint stream.
#[cfg(test)]
mod nameless_tests {
    use super::*;
    use crate::addr::Ppa;
    use crate::nameless::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    const PHYSICAL: u32 = 800; // 8 zones of 100 blocks
    const ZONE_BLOCKS: u32 = 100;

    fn reseal(b: &mut [u8]) {
        let n = b.len() - CHECKPOINT_TRAILER_BYTES;
        crate::codec::seal_crc(b, n);
    }

    fn base_image() -> CheckpointImage {
        let zones = (0..8u64)
            .map(|z| ZoneRecord {
                kind: match z {
                    0 | 1 => ZoneKind::Superblock,
                    2 => ZoneKind::Meta,
                    3 => ZoneKind::DataNameless,
                    4 => ZoneKind::DataNamelessMoved,
                    5 => ZoneKind::NamelessScratch,
                    _ => ZoneKind::DataHost,
                },
                state: 1,
                erase_count: z as u32,
                write_pointer_blocks: 90,
                last_write_seq: z * 3,
                valid_blocks: 0,
            })
            .collect();
        CheckpointImage {
            next_seq: 1000,
            epoch: 1,
            log_seq: 12,
            logical_blocks: 1500,
            zones,
            leaves: Vec::new(),
            crcs: None,
            shared: Vec::new(),
            attrs: Vec::new(),
            clean: false,
            snapshots: Vec::new(),
            next_snapshot_id: 0,
            births: Vec::new(),
            history: Vec::new(),
            sweeps: Vec::new(),
            forks: Vec::new(),
            next_fork_id: 0,
            nameless: NamelessImage::default(),
        }
    }

    fn bits(offsets: &[u32], data_end: u32) -> Vec<u64> {
        let mut w = vec![0u64; data_end.div_ceil(64) as usize];
        for &o in offsets {
            w[o as usize / 64] |= 1 << (o % 64);
        }
        w
    }

    fn addr(ppa: u32, gen: u32) -> NamelessAddr {
        NamelessAddr::new(Ppa(ppa), gen)
    }

    /// Every nameless section with content. Placement log: 512-byte
    /// blocks and 32-byte md give E = 10, G = 80, groups every 88 blocks;
    /// a 100-block zone's last group holds 10 data blocks (88..98).
    fn nameless_image(placement: MdPlacement) -> CheckpointImage {
        let log = placement == MdPlacement::Log;
        let mut image = base_image();
        let mut generations = vec![(0, 0); 8];
        generations[3] = (5, 4);
        generations[4] = (2, 2);
        generations[6] = (1, 1);
        let present = MdEntry {
            home_offset: 88,
            data_crc: 0xC0FFEE,
            birth_gen: 4,
            md: (0..32).collect(),
        };
        image.nameless = NamelessImage {
            header: Some(NamelessHeader {
                md_bytes: 32,
                placement,
                group_blocks: if log { 80 } else { 0 },
                remap_capacity: 64,
                uncommitted_capacity: 128,
                commit_seq: 900,
                fill_links: true,
            }),
            generations,
            zones: vec![
                NamelessZoneRecord {
                    zone: 3,
                    data_end: 90,
                    last_md_at: None,
                    live_blocks: 4,
                    md_written: false,
                    held: true,
                    valid: bits(&[0, 5, 79, 89], 90),
                },
                NamelessZoneRecord {
                    zone: 4,
                    data_end: 10,
                    last_md_at: log.then_some(12),
                    live_blocks: 2,
                    md_written: log,
                    held: false,
                    valid: bits(&[1, 2], 10),
                },
            ],
            remap: vec![(addr(310, 3), addr(401, 2)), (addr(305, 4), addr(402, 2))],
            uncommitted: vec![Ppa(300), Ppa(389), Ppa(401)],
            open_md: if log {
                vec![OpenMdRecord {
                    zone: 3,
                    entries: vec![present, MdEntry::absent(89, 32)],
                }]
            } else {
                Vec::new()
            },
            job: Some(InPlaceJobRecord {
                victim: 3,
                scratch: 5,
                first_scratch_offset: 7,
                staged_blocks: 4,
                gap_gen: 5,
                staged_seq: 990,
            }),
            // Zone 3: base 4, gen 5; block 305 is a gap fill.
            fills: vec![(Ppa(305), 5)],
        };
        image
    }

    /// `(kind, payload)` of every section of a version-3 stream.
    fn sections_of(b: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mapped = get_u64(b, MAPPED_BLOCKS_OFF) as usize;
        let crcs = if get_u32(b, FLAGS_OFF) & FLAG_CRC_TABLE != 0 {
            4 * mapped
        } else {
            0
        };
        let mut at = CHECKPOINT_HEADER_BYTES
            + get_u32(b, ZONE_COUNT_OFF) as usize * ZONE_RECORD_BYTES
            + get_u32(b, LEAF_COUNT_OFF) as usize * LEAF_BYTES
            + crcs
            + get_u32(b, SHARED_ENTRIES_OFF) as usize * SHARED_ENTRY_BYTES
            + get_u32(b, ATTR_RANGES_OFF) as usize * ATTR_RANGE_BYTES;
        let mut out = Vec::new();
        for _ in 0..get_u32(b, SECTION_COUNT_OFF) {
            let (kind, n) = (get_u32(b, at), get_u64(b, at + 8) as usize);
            assert_eq!(get_u32(b, at + 4), 0, "section flags");
            out.push((kind, b[at + 16..at + 16 + n].to_vec()));
            at += 16 + n;
        }
        assert_eq!(at + CHECKPOINT_TRAILER_BYTES, b.len());
        out
    }

    fn u32s(p: &[u8]) -> Vec<u32> {
        p.chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Section 16's flags byte: bit 0 (a gap fill's link frees at its
    /// job's InPlaceDone) as written, and 0 (an older build's) read alike.
    #[test]
    fn the_nameless_headers_fill_links_flag_round_trips() {
        let mut image = nameless_image(MdPlacement::Oob);
        for links in [false, true] {
            image.nameless.header.as_mut().unwrap().fill_links = links;
            let b = image.encode();
            assert_eq!(CheckpointImage::decode(&b, PHYSICAL), Ok(image.clone()));
            let header = &sections_of(&b)[0];
            assert_eq!((header.0, header.1[3]), (16, u8::from(links)));
        }
    }

    #[test]
    fn nameless_sections_are_laid_out_as_documented() {
        let image = nameless_image(MdPlacement::Log);
        let b = image.encode();
        assert_eq!(CheckpointImage::decode(&b, PHYSICAL), Ok(image.clone()));
        let sections = sections_of(&b);
        let kinds: Vec<u32> = sections.iter().map(|s| s.0).collect();
        assert_eq!(kinds, (16..=24).collect::<Vec<_>>());
        let p = |k: u32| &sections[(k - 16) as usize].1[..];
        // 16: md_bytes u16, placement u8, flags u8 (bit 0: fill links), G, remap and
        // uncommitted capacity, commit seq, reserved u64.
        let h = p(16);
        assert_eq!(h.len(), 32);
        assert_eq!(&h[..4], &[32, 0, 2, 1]);
        assert_eq!(u32s(&h[4..16]), [80, 64, 128]);
        assert_eq!(&h[16..24], &900u64.to_le_bytes());
        assert_eq!(&h[24..32], &[0; 8]);
        // 17: gen, base_gen per zone.
        let g = u32s(p(17));
        assert_eq!(g.len(), 16);
        assert_eq!((g[6], g[7], g[8], g[9], g[12]), (5, 4, 2, 2, 1));
        // 18: count, reserved, 24-byte records.
        let z = u32s(p(18));
        assert_eq!(z, [2, 0, 3, 90, u32::MAX, 4, 2, 0, 4, 10, 12, 2, 1, 0]);
        // 19: ceil(90 / 64) + ceil(10 / 64) words, in record order.
        let v = p(19);
        assert_eq!(v.len(), 3 * 8);
        assert_eq!(&v[..8], &(1u64 | 1 << 5).to_le_bytes());
        assert_eq!(
            &v[8..16],
            &(1u64 << (79 - 64) | 1 << (89 - 64)).to_le_bytes()
        );
        assert_eq!(&v[16..24], &0b110u64.to_le_bytes());
        // 20: count, reserved, (old, new) u64 pairs.
        let r = p(20);
        assert_eq!(u32s(&r[..8]), [2, 0]);
        assert_eq!(&r[8..16], &addr(310, 3).to_le_bytes());
        assert_eq!(&r[16..24], &addr(401, 2).to_le_bytes());
        assert_eq!(&r[24..32], &addr(305, 4).to_le_bytes());
        assert_eq!(r.len(), 8 + 2 * 16);
        // 21: count, reserved, ppas.
        assert_eq!(u32s(p(21)), [3, 0, 300, 389, 401]);
        // 22: zone count, reserved, then zone, entry_count and entries.
        let o = p(22);
        assert_eq!(u32s(&o[..16]), [1, 0, 3, 2]);
        assert_eq!(u32s(&o[16..28]), [88, 0xC0FFEE, 4]);
        assert_eq!(&o[28..60], &(0..32).collect::<Vec<u8>>()[..]);
        assert_eq!(u32s(&o[60..72]), [89, 0, u32::MAX]);
        assert_eq!(o.len(), 16 + 2 * 44);
        // 23: victim, scratch, first offset, staged, gap gen, reserved, seq.
        let j = p(23);
        assert_eq!(u32s(&j[..24]), [3, 5, 7, 4, 5, 0]);
        assert_eq!(&j[24..32], &990u64.to_le_bytes());
        // 24: count, reserved, (ppa, birth_gen) pairs.
        assert_eq!(u32s(p(24)), [1, 0, 305, 5]);
        // The zone table records kinds 7, 8 and 9.
        let zone = |z: usize| b[CHECKPOINT_HEADER_BYTES + z * ZONE_RECORD_BYTES];
        assert_eq!((zone(3), zone(4), zone(5)), (7, 8, 9));
    }

    #[test]
    fn nameless_sections_round_trip_in_both_placements() {
        for placement in [MdPlacement::Oob, MdPlacement::Log] {
            let image = nameless_image(placement);
            let b = image.encode();
            assert_eq!(CheckpointImage::decode(&b, PHYSICAL), Ok(image.clone()));
            // Parts left empty leave their sections out.
            let mut sparse = image.clone();
            sparse.nameless.remap.clear();
            sparse.nameless.uncommitted.clear();
            sparse.nameless.open_md.clear();
            sparse.nameless.job = None;
            sparse.nameless.fills.clear();
            sparse.zones[5].kind = ZoneKind::Free;
            let b = sparse.encode();
            let kinds: Vec<u32> = sections_of(&b).iter().map(|s| s.0).collect();
            assert_eq!(kinds, [16, 17, 18, 19], "{placement:?}");
            assert_eq!(CheckpointImage::decode(&b, PHYSICAL), Ok(sparse));
        }
        // A header alone: a volume with nameless settings and no data yet.
        let mut bare = base_image();
        for z in 3..6 {
            bare.zones[z].kind = ZoneKind::Free;
        }
        bare.nameless.header = nameless_image(MdPlacement::Oob).nameless.header;
        let b = bare.encode();
        assert_eq!(sections_of(&b).len(), 1);
        assert_eq!(CheckpointImage::decode(&b, PHYSICAL), Ok(bare));
    }

    #[test]
    fn no_nameless_state_writes_no_section() {
        let mut image = base_image();
        for z in 3..6 {
            image.zones[z].kind = ZoneKind::DataHost;
        }
        let b = image.encode();
        assert_eq!(get_u32(&b, SECTION_COUNT_OFF), 0);
        assert_eq!(CheckpointImage::decode(&b, PHYSICAL), Ok(image));
    }

    /// `edit` applied to the Log image, written without the encoder's
    /// self-check: what decode says.
    fn decode_edited(
        edit: impl FnOnce(&mut CheckpointImage),
    ) -> Result<CheckpointImage, FormatError> {
        let mut image = nameless_image(MdPlacement::Log);
        edit(&mut image);
        CheckpointImage::decode(&image.encode_unchecked(), PHYSICAL)
    }

    fn field(r: Result<CheckpointImage, FormatError>) -> String {
        match r {
            Err(FormatError::OutOfRange { field, .. } | FormatError::Reserved { field, .. }) => {
                field.to_string()
            }
            Err(FormatError::Length { structure, .. }) => format!("length: {structure}"),
            other => panic!("{other:?} is not a field error"),
        }
    }

    #[test]
    fn every_section_rule_is_checked() {
        type Edit = Box<dyn FnOnce(&mut CheckpointImage)>;
        let n = |f: fn(&mut NamelessImage)| -> Edit { Box::new(move |i| f(&mut i.nameless)) };
        let header = |f: fn(&mut NamelessHeader)| -> Edit {
            Box::new(move |i| f(i.nameless.header.as_mut().unwrap()))
        };
        let cases: Vec<(&str, Edit)> = vec![
            // Section 16.
            ("md_bytes", header(|h| h.md_bytes = 6)),
            ("md_bytes", header(|h| h.md_bytes = 68)),
            ("G", header(|h| h.group_blocks = 88)),
            ("G", header(|h| h.group_blocks = 0)),
            ("commit seq", header(|h| h.commit_seq = 1000)),
            // Without section 16 no other nameless section, no zone of kind 7..9.
            ("kind", n(|n| n.header = None)),
            (
                "zone table kind",
                Box::new(|i| i.nameless = NamelessImage::default()),
            ),
            // Section 17.
            ("base_gen", n(|n| n.generations[3] = (4, 5))),
            (
                "length: checkpoint zone generations (section 17)",
                n(|n| {
                    n.generations.pop();
                }),
            ),
            // Section 18.
            (
                "nameless zone",
                Box::new(|i| i.zones[3].kind = ZoneKind::DataHost),
            ),
            ("nameless zone", n(|n| n.zones.swap(0, 1))),
            ("nameless zone", n(|n| n.generations[4] = (0, 0))),
            (
                "zone table kind",
                Box::new(|i| i.zones[6].kind = ZoneKind::DataNameless),
            ),
            (
                "data_end",
                n(|n| {
                    n.zones[0].data_end = 101;
                    n.zones[0].valid = bits(&[0, 5, 79, 89], 101);
                }),
            ),
            ("data_end", n(|n| n.zones[0].data_end = 85)), // past md block 84
            ("live_blocks", n(|n| n.zones[1].live_blocks = 11)),
            ("last_md_at", n(|n| n.zones[1].last_md_at = Some(9))),
            ("last_md_at", n(|n| n.zones[1].last_md_at = Some(100))),
            ("last_md_at", n(|n| n.zones[1].md_written = false)),
            // Section 19.
            ("live_blocks", n(|n| n.zones[0].live_blocks = 3)),
            (
                "validity bit",
                n(|n| {
                    n.zones[0].valid[1] |= 1 << 30;
                    n.zones[0].live_blocks = 5;
                }),
            ),
            (
                "validity bit",
                n(|n| {
                    n.zones[0].valid[1] |= 1 << (80 - 64);
                    n.zones[0].live_blocks = 5;
                }),
            ),
            (
                "length: checkpoint nameless validity (section 19)",
                n(|n| n.zones[1].valid.push(0)),
            ),
            // Section 20.
            ("remap old", n(|n| n.remap.swap(0, 1))),
            (
                "remap old",
                n(|n| n.remap[0].0 = NamelessAddr::from_u64(310)),
            ),
            ("remap new", n(|n| n.remap[0].1 = n.remap[1].1)),
            ("remap new", n(|n| n.remap[0].1 = addr(401, 3))),
            ("remap new", n(|n| n.remap[0].1 = addr(310, 2))),
            ("remap old", n(|n| n.remap[1].0 = addr(900, 5))),
            // Section 21.
            ("uncommitted ppa", n(|n| n.uncommitted.swap(0, 1))),
            ("uncommitted ppa", n(|n| n.uncommitted[0] = Ppa(301))),
            ("uncommitted ppa", n(|n| n.uncommitted[2] = Ppa(601))),
            // Section 22.
            (
                "kind",
                n(|n| {
                    let h = n.header.as_mut().unwrap();
                    h.placement = MdPlacement::Oob;
                    h.group_blocks = 0;
                    n.zones[1].last_md_at = None;
                    n.zones[1].md_written = false;
                }),
            ),
            ("open md home_offset", n(|n| n.open_md[0].zone = 4)), // past its data_end
            ("open md zone", n(|n| n.open_md[0].zone = 6)),
            (
                "open md home_offset",
                n(|n| n.open_md[0].entries.swap(0, 1)),
            ),
            (
                "open md home_offset",
                n(|n| n.open_md[0].entries[0].home_offset = 87),
            ),
            (
                "open md home_offset",
                n(|n| n.open_md[0].entries.push(MdEntry::absent(90, 32))),
            ),
            ("open md entry_count", n(|n| n.open_md[0].entries.clear())),
            (
                "entry birth_gen",
                n(|n| n.open_md[0].entries[0].birth_gen = 0),
            ),
            (
                "data_crc of an entry with no block",
                n(|n| n.open_md[0].entries[1].data_crc = 1),
            ),
            // Section 23.
            ("victim", n(|n| n.job.as_mut().unwrap().victim = 6)),
            ("scratch", n(|n| n.job.as_mut().unwrap().scratch = 4)),
            ("gap generation", n(|n| n.job.as_mut().unwrap().gap_gen = 6)),
            (
                "staged seq",
                n(|n| n.job.as_mut().unwrap().staged_seq = 1000),
            ),
            (
                "staged blocks",
                n(|n| n.job.as_mut().unwrap().staged_blocks = 94),
            ),
            // Section 24.
            ("gap fill ppa", n(|n| n.fills[0].0 = Ppa(301))), // not live
            ("gap fill ppa", n(|n| n.fills.push((Ppa(300), 5)))), // not increasing
            ("gap fill birth_gen", n(|n| n.fills[0].1 = 4)),  // the base
            ("gap fill birth_gen", n(|n| n.fills[0].1 = 6)),  // above gen
        ];
        for (i, (want, edit)) in cases.into_iter().enumerate() {
            assert_eq!(field(decode_edited(edit)), want, "case {i}");
        }
        // Placement OOB has no md blocks.
        let mut oob = nameless_image(MdPlacement::Oob);
        oob.nameless.zones[1].md_written = true;
        assert_eq!(
            field(CheckpointImage::decode(&oob.encode_unchecked(), PHYSICAL)),
            "last_md_at / flags bit 0"
        );
        // A gap generation of 0 needs no generation.
        assert!(decode_edited(|i| i.nameless.job.as_mut().unwrap().gap_gen = 0).is_ok());
    }

    /// The Log image's stream with section `kind`'s payload replaced.
    fn with_payload(kind: u32, payload: Vec<u8>) -> Vec<u8> {
        let image = nameless_image(MdPlacement::Log);
        let b = image.encode();
        let mut out = b[..b.len() - CHECKPOINT_TRAILER_BYTES].to_vec();
        let sections = sections_of(&b);
        let first = out.len() - sections.iter().map(|(_, p)| 16 + p.len()).sum::<usize>();
        out.truncate(first);
        for (k, p) in sections {
            let p = if k == kind { payload.clone() } else { p };
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&0u32.to_le_bytes());
            out.extend_from_slice(&(p.len() as u64).to_le_bytes());
            out.extend_from_slice(&p);
        }
        out.extend_from_slice(&[0; 4]);
        let n = out.len() as u64;
        crate::codec::put_u64(&mut out, STREAM_BYTES_OFF, n);
        reseal(&mut out);
        out
    }

    #[test]
    fn huge_or_damaged_counts_do_not_allocate() {
        let huge = |count: u32, rest: usize| {
            let mut p = count.to_le_bytes().to_vec();
            p.extend_from_slice(&[0; 4]);
            p.resize(8 + rest, 0);
            p
        };
        for kind in [18, 20, 21, 22] {
            for payload in [huge(u32::MAX, 24), huge(1 << 30, 16), huge(3, 2)] {
                let b = with_payload(kind, payload);
                assert!(
                    matches!(
                        CheckpointImage::decode(&b, PHYSICAL),
                        Err(FormatError::Length { .. })
                    ),
                    "kind {kind}"
                );
            }
            // A count of 0 is never written.
            let b = with_payload(kind, huge(0, 0));
            assert_eq!(
                field(CheckpointImage::decode(&b, PHYSICAL)),
                "count",
                "kind {kind}"
            );
            // The reserved word after the count.
            let mut p = sections_of(&nameless_image(MdPlacement::Log).encode())
                [(kind - 16) as usize]
                .1
                .clone();
            p[4] = 1;
            assert!(matches!(
                CheckpointImage::decode(&with_payload(kind, p), PHYSICAL),
                Err(FormatError::Reserved { .. })
            ));
        }
        // An open-md zone whose entry count runs past the payload.
        let mut p = sections_of(&nameless_image(MdPlacement::Log).encode())[6]
            .1
            .clone();
        p[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(
            CheckpointImage::decode(&with_payload(22, p), PHYSICAL),
            Err(FormatError::Length { .. })
        ));
        for kind in [16, 17, 19, 23] {
            let b = with_payload(kind, vec![0; 7]);
            assert!(
                matches!(
                    CheckpointImage::decode(&b, PHYSICAL),
                    Err(FormatError::Length { .. })
                ),
                "kind {kind}"
            );
        }
        // Empty 19 is never written.
        assert_eq!(
            field(CheckpointImage::decode(&with_payload(19, vec![]), PHYSICAL)),
            "count"
        );
    }

    #[test]
    fn every_single_bit_flip_of_the_nameless_sections_is_detected() {
        let b = nameless_image(MdPlacement::Log).encode();
        let sections: usize = sections_of(&b).iter().map(|(_, p)| 16 + p.len()).sum();
        let start = b.len() - CHECKPOINT_TRAILER_BYTES - sections;
        for bit in start * 8..b.len() * 8 {
            let mut f = b.clone();
            f[bit / 8] ^= 1 << (bit % 8);
            assert!(CheckpointImage::decode(&f, PHYSICAL).is_err(), "bit {bit}");
            if bit / 8 >= b.len() - CHECKPOINT_TRAILER_BYTES {
                continue;
            }
            // Resealed (damage the CRC missed): a rule or a changed image,
            // never a panic.
            reseal(&mut f);
            if let Ok(image) = CheckpointImage::decode(&f, PHYSICAL) {
                assert_ne!(
                    image,
                    nameless_image(MdPlacement::Log),
                    "bit {bit} (byte {} of the sections)",
                    bit / 8 - start
                );
            }
        }
    }

    #[test]
    fn the_bound_follows_the_format() {
        // The formula of format.md §11.
        let b = nameless_checkpoint_bytes_bound(8, 5, 800, 64, 128, 80, 32);
        assert_eq!(b, 64 + 160 + 100 + 1024 + 512 + 2 * 80 * 44 + 1024);
        // It holds what the fullest image of that volume writes: every zone
        // of data with every bit set, the remap table and uncommitted set
        // full, two open groups of G entries, a job.
        let mut image = nameless_image(MdPlacement::Log);
        let n = &mut image.nameless;
        n.header.as_mut().unwrap().commit_seq = 0;
        for z in &mut n.zones {
            z.data_end = 98;
            let data: Vec<u32> = (0..98).filter(|&o| !(80..88).contains(&o)).collect();
            z.valid = bits(&data, 98);
            z.live_blocks = 90;
            z.last_md_at = None;
            z.md_written = false;
        }
        let entries = |start: u32, k: u32| -> Vec<MdEntry> {
            (0..k).map(|i| MdEntry::absent(start + i, 32)).collect()
        };
        n.open_md = vec![
            OpenMdRecord {
                zone: 3,
                entries: entries(0, 80),
            },
            OpenMdRecord {
                zone: 4,
                entries: entries(0, 80),
            },
        ];
        let mut plain = base_image();
        (3..6).for_each(|z| plain.zones[z].kind = ZoneKind::DataHost);
        let used = image.encode().len() - plain.encode().len();
        let bound = nameless_checkpoint_bytes_bound(8, 2, 2 * u64::from(ZONE_BLOCKS), 2, 3, 80, 32);
        assert!(used as u64 <= bound, "{used} > {bound}");
    }

    /// A valid image with random nameless state, from `seed`: either
    /// placement, zones 3..=7 nameless (kind 7 or 8) or not, random data
    /// ends and bitmaps, remap entries onto live blocks, an uncommitted
    /// subset, open md (placement log) and maybe a job with zone 7 as the
    /// scratch zone.
    fn random_nameless_image(seed: u64) -> CheckpointImage {
        let state = std::cell::Cell::new(seed | 1);
        let next = || {
            let mut x = state.get();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            state.set(x);
            x
        };
        let log = next() % 2 == 0;
        let layout = MdLayout::from_group_blocks(80, u64::from(ZONE_BLOCKS));
        let job = next() % 3 == 0;
        let mut image = base_image();
        let mut generations = vec![(0, 0); 8];
        let mut zones = Vec::new();
        for z in 3..8u32 {
            let zi = z as usize;
            image.zones[zi].kind = ZoneKind::DataHost;
            if z == 7 && job {
                image.zones[zi].kind = ZoneKind::NamelessScratch;
                continue;
            }
            if next() % 4 == 0 {
                continue;
            }
            image.zones[zi].kind = if next() % 2 == 0 {
                ZoneKind::DataNameless
            } else {
                ZoneKind::DataNamelessMoved
            };
            let gen = 1 + (next() % 9) as u32;
            generations[zi] = (gen, 1 + (next() % u64::from(gen)) as u32);
            let mut data_end = (next() % 99) as u32;
            if log && data_end > 0 && !layout.is_data_offset(u64::from(data_end) - 1) {
                data_end = 80;
            }
            let mut valid = vec![0u64; data_end.div_ceil(64) as usize];
            for o in 0..data_end {
                if (!log || layout.is_data_offset(o.into())) && next() % 3 == 0 {
                    valid[o as usize / 64] |= 1 << (o % 64);
                }
            }
            let live_blocks = valid.iter().map(|w| w.count_ones()).sum();
            let last_md_at = (log && data_end < ZONE_BLOCKS && next() % 2 == 0)
                .then(|| data_end + (next() % u64::from(ZONE_BLOCKS - data_end)) as u32);
            zones.push(NamelessZoneRecord {
                zone: z,
                data_end,
                last_md_at,
                live_blocks,
                md_written: last_md_at.is_some() || (log && next() % 2 == 0),
                held: next() % 2 == 0,
                valid,
            });
        }
        let live: Vec<(Ppa, u32)> = zones
            .iter()
            .flat_map(|z| {
                let gen = generations[z.zone as usize].0;
                (0..z.data_end)
                    .filter(|&o| z.valid[o as usize / 64] >> (o % 64) & 1 == 1)
                    .map(move |o| (Ppa(z.zone * ZONE_BLOCKS + o), gen))
            })
            .collect();
        let mut remap: Vec<(NamelessAddr, NamelessAddr)> = live
            .iter()
            .filter(|_| next() % 4 == 0)
            .map(|&(ppa, gen)| {
                let old = addr(ppa.0 % 300 + 1, 1 + (next() % 50) as u32);
                (old, addr(ppa.0, 1 + (next() % u64::from(gen)) as u32))
            })
            .collect();
        remap.sort();
        remap.dedup_by_key(|e| e.0);
        let uncommitted: Vec<Ppa> = live
            .iter()
            .filter(|_| next() % 3 == 0)
            .map(|l| l.0)
            .collect();
        let open_md = if log {
            zones
                .iter()
                .filter(|z| z.data_end > 0 && next() % 2 == 0)
                // The bound counts two open groups: the two nameless lanes'.
                .take(2)
                .map(|z| {
                    let start = layout.group_start(layout.group_of(u64::from(z.data_end) - 1));
                    let entries = (start as u32..z.data_end)
                        .map(|o| {
                            if next() % 3 == 0 {
                                MdEntry::absent(o, 32)
                            } else {
                                MdEntry {
                                    home_offset: o,
                                    data_crc: next() as u32,
                                    birth_gen: 1 + (next() % 100) as u32,
                                    md: (0..32).map(|_| next() as u8).collect(),
                                }
                            }
                        })
                        .collect();
                    OpenMdRecord {
                        zone: z.zone,
                        entries,
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let job = (job && !zones.is_empty()).then(|| {
            let victim = zones[0].zone;
            let gen = generations[victim as usize].0;
            InPlaceJobRecord {
                victim,
                scratch: 7,
                first_scratch_offset: (next() % 50) as u32,
                staged_blocks: (next() % 50) as u32,
                gap_gen: if next() % 2 == 0 { gen } else { 0 },
                staged_seq: next() % 1000,
            }
        });
        image.nameless = NamelessImage {
            header: Some(NamelessHeader {
                md_bytes: 32,
                placement: if log {
                    MdPlacement::Log
                } else {
                    MdPlacement::Oob
                },
                group_blocks: if log { 80 } else { 0 },
                remap_capacity: next() as u32,
                uncommitted_capacity: next() as u32,
                commit_seq: next() % 1000,
                fill_links: next() % 2 == 1,
            }),
            generations,
            zones,
            remap,
            uncommitted,
            open_md,
            job,
            fills: Vec::new(),
        };
        image
    }

    fn arb_payloads() -> impl Strategy<Value = Vec<(u32, Vec<u8>)>> {
        vec((16u32..=24, vec(any::<u8>(), 0..200)), 0..4)
    }

    proptest! {
        #[test]
        fn arbitrary_nameless_payloads_never_panic(parts in arb_payloads(), count in any::<u32>()) {
            for (kind, mut payload) in parts {
                if payload.len() >= 4 && kind != 16 && kind != 17 && kind != 19 && kind != 23 {
                    payload[..4].copy_from_slice(&(count % 8).to_le_bytes());
                }
                let b = with_payload(kind, payload);
                let _ = CheckpointImage::decode(&b, PHYSICAL);
                let _ = CheckpointImage::decode(&b, 80_000);
            }
        }

        #[test]
        fn random_nameless_images_round_trip(seed in any::<u64>(), bit in any::<usize>()) {
            let image = random_nameless_image(seed);
            let b = image.encode();
            prop_assert_eq!(CheckpointImage::decode(&b, PHYSICAL), Ok(image.clone()));
            let mut f = b.clone();
            let bit = bit % (f.len() * 8);
            f[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(CheckpointImage::decode(&f, PHYSICAL).is_err());
            // The image's parts fit the bound of its volume.
            let n = &image.nameless;
            let h = n.header.unwrap();
            let plain = {
                let mut p = image.clone();
                p.nameless = NamelessImage::default();
                p.zones.iter_mut().filter(|z| z.kind.code() >= 7).for_each(|z| z.kind = ZoneKind::DataHost);
                p.encode().len()
            };
            let bound = nameless_checkpoint_bytes_bound(
                8, 5, u64::from(PHYSICAL), n.remap.len() as u64, n.uncommitted.len() as u64,
                u64::from(h.group_blocks), u64::from(h.md_bytes),
            );
            prop_assert!((b.len() - plain) as u64 <= bound);
        }

        #[test]
        fn sealed_section_damage_never_panics(at in any::<usize>(), byte in any::<u8>(), oob in any::<bool>()) {
            let placement = if oob { MdPlacement::Oob } else { MdPlacement::Log };
            let mut b = nameless_image(placement).encode();
            let sections: usize = sections_of(&b).iter().map(|(_, p)| 16 + p.len()).sum();
            let start = b.len() - CHECKPOINT_TRAILER_BYTES - sections;
            let i = start + at % sections;
            b[i] = byte;
            reseal(&mut b);
            let _ = CheckpointImage::decode(&b, PHYSICAL);
        }
    }
}
