//! Notes and the blocks of the metadata log that carry them.
//!
//! A note is a fixed 32-byte record of one change to the FTL's state (a host
//! write in in-band tag mode, a trim, a GC relocation, a zone reset or
//! retirement). Notes are group-committed in log blocks; a log block is one
//! device block holding either notes or one chunk of a checkpoint stream.
//! Layouts: docs/format.md, "Notes" and "Log block".
//!
//! Adding a note kind (time travel, nameless migration acks):
//! add a code constant in [`note_kind`], a [`Note`] variant, and one arm in
//! each of `Note::to_raw`, `Note::from_raw` and `Note::seq`. Codes are never
//! reused; a reader that meets a code it does not know refuses the log
//! ([`FormatError::UnknownNoteKind`]) rather than skipping the note.

use crate::addr::{Lba, Ppa, Seq};
use crate::backend::ZoneId;
use crate::checkpoint::MAX_SNAPSHOT_NAME_BYTES;
pub use crate::codec::FormatError;
use crate::codec::{
    aligned, check_crc, get_bytes, get_u16, get_u32, get_u64, get_u8, is_erased, put_bytes,
    put_u16, put_u32, put_u64, put_u8, seal_crc, zero, zero_bytes,
};
use crate::nameless::{addr_field, valid_md_bytes, NamelessAddr, NamelessZoneKind};
use crate::range::{attr_bits, MergePolicy};

const NOTE: &str = "note";
const LOG_BLOCK: &str = "log block";

// ---- note layout ----------------------------------------------------------

const N_KIND_OFF: usize = 0;
const N_RESERVED_OFF: usize = N_KIND_OFF + 1;
const N_RESERVED_BYTES: usize = 3;
const N_A_OFF: usize = N_RESERVED_OFF + N_RESERVED_BYTES;
const N_SEQ_OFF: usize = N_A_OFF + 4;
const N_B_OFF: usize = N_SEQ_OFF + 8;
const N_C_OFF: usize = N_B_OFF + 8;

/// Encoded size of a note.
pub const NOTE_BYTES: usize = N_C_OFF + 8;

const _: () = assert!(NOTE_BYTES == 32);
const _: () =
    assert!(N_A_OFF == 4 && aligned(N_SEQ_OFF, 8) && aligned(N_B_OFF, 8) && aligned(N_C_OFF, 8));

/// Note kind codes (byte 0 of a note). Never reuse a code.
pub mod note_kind {
    pub const HOST_WRITE: u8 = 1;
    pub const TRIM: u8 = 2;
    pub const RELOC: u8 = 3;
    pub const ZONE_RESET: u8 = 4;
    pub const ZONE_RETIRE: u8 = 5;
    pub const RELOCATED: u8 = 6;
    pub const VECTOR_BEGIN: u8 = 7;
    pub const CLONE: u8 = 8;
    pub const MOVE: u8 = 9;
    pub const MERGE: u8 = 10;
    pub const MERGE_SOURCE: u8 = 11;
    pub const PIN: u8 = 12;
    pub const SHARED_RELOC: u8 = 13;
    pub const ATTR: u8 = 14;
    pub const SNAPSHOT_CREATE: u8 = 15;
    pub const SNAPSHOT_NAME: u8 = 16;
    pub const SNAPSHOT_DELETE: u8 = 17;
    pub const CLOCK: u8 = 18;
    pub const REVERT: u8 = 20;
    pub const FORK_CREATE: u8 = 22;
    pub const FORK_DELETE: u8 = 23;
    pub const NAMELESS_ZONE: u8 = 24;
    pub const NAMELESS_WRITE: u8 = 25;
    pub const NAMELESS_MD: u8 = 26;
    pub const NAMELESS_FREE: u8 = 27;
    pub const NAMELESS_MIGRATE: u8 = 28;
    pub const NAMELESS_ACK: u8 = 29;
    pub const IN_PLACE_STAGED: u8 = 30;
    pub const IN_PLACE_DONE: u8 = 31;
}

/// Md bytes one NamelessMd note carries (4 in `a`, 8 in `b`, 8 in `c`).
pub const NAMELESS_MD_NOTE_BYTES: usize = 20;

/// Name bytes one SnapshotName note carries (4 in `a`, 8 in `b`, 8 in `c`).
pub const SNAPSHOT_NAME_NOTE_BYTES: usize = 20;

/// One logged change. Every note carries the global seq it was given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Note {
    /// Host data for `lba` landed at `ppa` (in-band tag mode: the note stands
    /// in for the OOB tag). `ppa` is never `Ppa::NONE`.
    HostWrite {
        seq: Seq,
        lba: Lba,
        ppa: Ppa,
        data_crc: u32,
    },
    /// `block_count >= 1` blocks from `lba` read as zeros from now on.
    Trim {
        seq: Seq,
        lba: Lba,
        block_count: u64,
    },
    /// GC copied `lba` from `from` to `to` (`from != to`, neither NONE);
    /// applies only if the map still points at `from`. Written in band,
    /// where the map learns `from` from notes, which the log keeps.
    Reloc {
        seq: Seq,
        lba: Lba,
        from: Ppa,
        to: Ppa,
    },
    /// The zone was (about to be) reset; tags in it with a smaller seq are stale.
    ZoneReset {
        seq: Seq,
        zone: ZoneId,
        erase_count: u32,
    },
    /// The zone is retired (worn out or failed) and never used again.
    ZoneRetire { seq: Seq, zone: ZoneId },
    /// GC (or wear leveling) copied the version of `lba` written with seq
    /// `version_seq` to `to` (OOB tag mode; `to` is never NONE). Applies
    /// unless the map already holds a newer version of `lba`: it needs no
    /// trace of the old location, whose tag the victim's reset erases.
    Relocated {
        seq: Seq,
        lba: Lba,
        to: Ppa,
        version_seq: Seq,
    },
    /// Starts a range-operation vector of `note_count` more notes, all with
    /// this seq (docs/format.md, "Vectors"); a vector of one note has none.
    VectorBegin { seq: Seq, note_count: u32 },
    /// `dst..+block_count` name what `src..+block_count` name.
    Clone {
        seq: Seq,
        src: Lba,
        dst: Lba,
        block_count: u32,
    },
    /// `dst..+block_count` name what `src..+block_count` named; `src` is
    /// unmapped.
    Move {
        seq: Seq,
        src: Lba,
        dst: Lba,
        block_count: u32,
    },
    /// A merge into `dst..+block_count` of the `source_count` ranges named
    /// by the MergeSource notes that follow.
    Merge {
        seq: Seq,
        dst: Lba,
        block_count: u32,
        policy: MergePolicy,
        source_count: u32,
    },
    /// Source `index` of the merge before it.
    MergeSource { seq: Seq, lba: Lba, index: u32 },
    /// `lba` maps straight to `ppa` at this vector's seq (OOB tags: a block
    /// the vector reads whose version only its tag records).
    Pin { seq: Seq, lba: Lba, ppa: Ppa },
    /// GC moved the shared block at `from` to `to`.
    SharedReloc { seq: Seq, from: Ppa, to: Ppa },
    /// Sets the attribute bits `set` and clears `clear` on `lba..+block_count`.
    Attr {
        seq: Seq,
        lba: Lba,
        block_count: u64,
        set: u8,
        clear: u8,
    },
    /// Snapshot `id` of `parent` ([`crate::checkpoint::PARENT_LIVE_VOLUME`]:
    /// the live volume) is created at this seq. Its `name_len` (1 ..= 63)
    /// name bytes follow in `ceil(name_len / 20)` SnapshotName notes of the
    /// same vector ([`snapshot_create_notes`], [`snapshot_name`]).
    SnapshotCreate {
        seq: Seq,
        name_len: u32,
        id: u32,
        parent: u32,
    },
    /// 20 bytes of the name of the SnapshotCreate before it; bytes past the
    /// name's length are zero.
    SnapshotName {
        seq: Seq,
        bytes: [u8; SNAPSHOT_NAME_NOTE_BYTES],
    },
    /// Snapshot `id` is deleted at this seq.
    SnapshotDelete { seq: Seq, id: u32 },
    /// The wall time (ns since the Unix epoch) of the SnapshotCreate of
    /// its vector, after the name notes.
    Clock { seq: Seq, wall_ns: u64 },
    /// The live volume becomes what it was at `to_seq` (the create seq of a
    /// live snapshot), its changes taking seq `seq + 1`. Last in the vector
    /// of the SnapshotCreate that keeps the state it leaves.
    Revert { seq: Seq, to_seq: Seq },
    /// Fork `id` of snapshot `base` is created at this seq. Like a
    /// SnapshotCreate, its `name_len` (1 ..= 63) name bytes follow in
    /// SnapshotName notes of the same vector, then its Clock note.
    ForkCreate {
        seq: Seq,
        name_len: u32,
        id: u32,
        base: u32,
    },
    /// Fork `id` is deleted at this seq: its region is unmapped.
    ForkDelete { seq: Seq, id: u32 },
    /// `zone` is taken for nameless data of `kind` with generation
    /// `generation` (>= 1; replay: the zone's gen + 1, the zone was free).
    NamelessZone {
        seq: Seq,
        zone: ZoneId,
        generation: u32,
        kind: NamelessZoneKind,
    },
    /// A nameless block landed at `ppa` (never NONE) with birth generation
    /// `birth_gen` (>= 1), replacing `replaced` (an overwrite) or
    /// [`NamelessAddr::NONE`]. Md in the log only; followed by its
    /// `ceil(md_bytes / 20)` NamelessMd notes with its seq
    /// ([`nameless_md_notes`]), pushed together.
    NamelessWrite {
        seq: Seq,
        ppa: Ppa,
        data_crc: u32,
        birth_gen: u32,
        replaced: NamelessAddr,
    },
    /// 20 md bytes of the NamelessWrite or NamelessMigrate before it;
    /// bytes past the volume's md_bytes are zero ([`nameless_md`]).
    NamelessMd {
        seq: Seq,
        bytes: [u8; NAMELESS_MD_NOTE_BYTES],
    },
    /// The nameless block at `ppa` born in `birth_gen` (>= 1) is freed.
    NamelessFree { seq: Seq, ppa: Ppa, birth_gen: u32 },
    /// A migration copied `old` to `new_ppa` (never NONE, not `old`'s
    /// ppa), born there in `birth_gen` (>= 1); a remap entry redirects
    /// `old` until acknowledged. With md in the log its NamelessMd notes
    /// follow.
    NamelessMigrate {
        seq: Seq,
        new_ppa: Ppa,
        old: NamelessAddr,
        data_crc: u32,
        birth_gen: u32,
    },
    /// `commit == false`: the client acknowledged the remap entry of `old`
    /// (a = 1); `commit == true`: a commit (a = 2), `old` is
    /// [`NamelessAddr::NONE`].
    NamelessAck {
        seq: Seq,
        commit: bool,
        old: NamelessAddr,
    },
    /// An in-place collection of `victim` staged `staged_blocks` live
    /// blocks in `scratch` from `first_scratch_offset`; gap fills take
    /// generation `gap_gen` (0: none). `victim != scratch`.
    InPlaceStaged {
        seq: Seq,
        victim: ZoneId,
        scratch: ZoneId,
        gap_gen: u32,
        first_scratch_offset: u32,
        staged_blocks: u32,
    },
    /// The in-place collection of `victim` is done: its erase count after
    /// the reset, the pad blocks and gap-fill blocks it wrote.
    InPlaceDone {
        seq: Seq,
        victim: ZoneId,
        erase_count: u32,
        pad_blocks: u32,
        gap_fill_blocks: u32,
    },
}

/// The NamelessMd notes of `md` (the volume's md_bytes of one block):
/// `ceil(md.len() / 20)` notes with `seq`, the last zero padded. They
/// follow the block's NamelessWrite or NamelessMigrate note. Panics (a
/// bug) unless `md.len()` is a valid md size (4 ..= 64, a multiple of 4).
pub fn nameless_md_notes(md: &[u8], seq: Seq) -> Vec<Note> {
    assert!(
        valid_md_bytes(md.len()),
        "nameless md of {} bytes",
        md.len()
    );
    md.chunks(NAMELESS_MD_NOTE_BYTES)
        .map(|chunk| {
            let mut bytes = [0u8; NAMELESS_MD_NOTE_BYTES];
            bytes[..chunk.len()].copy_from_slice(chunk);
            Note::NamelessMd { seq, bytes }
        })
        .collect()
}

/// The `md_bytes` of md a NamelessWrite's or NamelessMigrate's
/// NamelessMd notes carry (`notes`: their bytes, in log order). `Err` when
/// `md_bytes` is not a valid md size, when there are not exactly
/// `ceil(md_bytes / 20)` notes, or when a byte past `md_bytes` is not zero.
pub fn nameless_md(
    md_bytes: usize,
    notes: &[[u8; NAMELESS_MD_NOTE_BYTES]],
) -> Result<Vec<u8>, FormatError> {
    const S: &str = "nameless md notes";
    if !valid_md_bytes(md_bytes) {
        return Err(FormatError::OutOfRange {
            structure: S,
            field: "md_bytes",
            value: md_bytes as u64,
            rule: "4 ..= 64, a multiple of 4",
        });
    }
    let count = md_bytes.div_ceil(NAMELESS_MD_NOTE_BYTES);
    if notes.len() != count {
        return Err(FormatError::Length {
            structure: "nameless md notes (ceil(md_bytes / 20) after the write or migrate)",
            expected: count as u64,
            actual: notes.len() as u64,
        });
    }
    let mut bytes: Vec<u8> = notes.iter().flatten().copied().collect();
    zero_bytes(S, "bytes past md_bytes", &bytes[md_bytes..])?;
    bytes.truncate(md_bytes);
    Ok(bytes)
}

/// The notes of a snapshot create: SnapshotCreate, then
/// `ceil(name.len() / 20)` SnapshotName notes, all with `seq`. Logged as
/// one vector: `VectorBegin { seq, note_count: notes.len() }` first (a
/// create always has at least two notes). Panics if the name is empty or
/// longer than [`crate::checkpoint::MAX_SNAPSHOT_NAME_BYTES`] bytes (the
/// caller checks user input first).
pub fn snapshot_create_notes(seq: Seq, id: u32, parent: u32, name: &str) -> Vec<Note> {
    let name_len = checked_name_len(name);
    let mut notes = vec![Note::SnapshotCreate {
        seq,
        name_len,
        id,
        parent,
    }];
    notes.extend(name_notes(seq, name));
    notes
}

/// The notes of a fork create: ForkCreate, then its name's SnapshotName
/// notes, as [`snapshot_create_notes`] (the caller adds the Clock note and
/// the VectorBegin).
pub fn fork_create_notes(seq: Seq, id: u32, base: u32, name: &str) -> Vec<Note> {
    let name_len = checked_name_len(name);
    let mut notes = vec![Note::ForkCreate {
        seq,
        name_len,
        id,
        base,
    }];
    notes.extend(name_notes(seq, name));
    notes
}

/// A create's name length; panics if it is not 1 ..= 63 bytes.
fn checked_name_len(name: &str) -> u32 {
    let n = name.len();
    assert!(
        (1..=MAX_SNAPSHOT_NAME_BYTES).contains(&n),
        "snapshot name of {n} bytes"
    );
    n as u32
}

/// `name` in SnapshotName notes of 20 bytes, the last zero padded.
fn name_notes(seq: Seq, name: &str) -> impl Iterator<Item = Note> + '_ {
    name.as_bytes()
        .chunks(SNAPSHOT_NAME_NOTE_BYTES)
        .map(move |chunk| {
            let mut b = [0u8; SNAPSHOT_NAME_NOTE_BYTES];
            b[..chunk.len()].copy_from_slice(chunk);
            Note::SnapshotName { seq, bytes: b }
        })
}

/// The name a SnapshotCreate of `name_len` bytes and its SnapshotName
/// notes' `names` spell. `Err` when `name_len` is not 1 ..= 63, when there
/// are not exactly `ceil(name_len / 20)` name notes, when a byte past
/// `name_len` is not zero, or when the name is not UTF-8.
pub fn snapshot_name(
    name_len: u32,
    names: &[[u8; SNAPSHOT_NAME_NOTE_BYTES]],
) -> Result<String, FormatError> {
    const S: &str = "snapshot name notes";
    let n = name_len as usize;
    if !(1..=MAX_SNAPSHOT_NAME_BYTES).contains(&n) {
        return Err(FormatError::OutOfRange {
            structure: S,
            field: "name_len",
            value: name_len.into(),
            rule: "1 ..= 63",
        });
    }
    let notes = n.div_ceil(SNAPSHOT_NAME_NOTE_BYTES);
    if names.len() != notes {
        return Err(FormatError::Length {
            structure: "snapshot name notes (ceil(name_len / 20) after the create)",
            expected: notes as u64,
            actual: names.len() as u64,
        });
    }
    let bytes: Vec<u8> = names.iter().flatten().copied().collect();
    zero_bytes(S, "bytes past name_len", &bytes[n..])?;
    String::from_utf8(bytes[..n].to_vec()).map_err(|e| FormatError::OutOfRange {
        structure: S,
        field: "name",
        value: e.utf8_error().valid_up_to() as u64,
        rule: "valid UTF-8 (value: bytes valid before the first bad one)",
    })
}

/// The generic note fields before interpretation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RawNote {
    kind: u8,
    a: u32,
    seq: u64,
    b: u64,
    c: u64,
}

impl Note {
    /// The note's global sequence number.
    pub fn seq(&self) -> Seq {
        match *self {
            Note::HostWrite { seq, .. }
            | Note::Trim { seq, .. }
            | Note::Reloc { seq, .. }
            | Note::ZoneReset { seq, .. }
            | Note::ZoneRetire { seq, .. }
            | Note::Relocated { seq, .. }
            | Note::VectorBegin { seq, .. }
            | Note::Clone { seq, .. }
            | Note::Move { seq, .. }
            | Note::Merge { seq, .. }
            | Note::MergeSource { seq, .. }
            | Note::Pin { seq, .. }
            | Note::SharedReloc { seq, .. }
            | Note::Attr { seq, .. }
            | Note::SnapshotCreate { seq, .. }
            | Note::SnapshotName { seq, .. }
            | Note::SnapshotDelete { seq, .. }
            | Note::Clock { seq, .. }
            | Note::Revert { seq, .. }
            | Note::ForkCreate { seq, .. }
            | Note::ForkDelete { seq, .. }
            | Note::NamelessZone { seq, .. }
            | Note::NamelessWrite { seq, .. }
            | Note::NamelessMd { seq, .. }
            | Note::NamelessFree { seq, .. }
            | Note::NamelessMigrate { seq, .. }
            | Note::NamelessAck { seq, .. }
            | Note::InPlaceStaged { seq, .. }
            | Note::InPlaceDone { seq, .. } => seq,
        }
    }

    /// The note's kind code ([`note_kind`]).
    pub fn kind(&self) -> u8 {
        self.to_raw().kind
    }

    fn to_raw(self) -> RawNote {
        use note_kind::*;
        let raw = |kind, a, seq, b, c| RawNote { kind, a, seq, b, c };
        match self {
            Note::HostWrite {
                seq,
                lba,
                ppa,
                data_crc,
            } => raw(HOST_WRITE, ppa.0, seq, lba, u64::from(data_crc)),
            Note::Trim {
                seq,
                lba,
                block_count,
            } => raw(TRIM, 0, seq, lba, block_count),
            Note::Reloc { seq, lba, from, to } => raw(RELOC, from.0, seq, lba, u64::from(to.0)),
            Note::ZoneReset {
                seq,
                zone,
                erase_count,
            } => raw(ZONE_RESET, zone, seq, u64::from(erase_count), 0),
            Note::ZoneRetire { seq, zone } => raw(ZONE_RETIRE, zone, seq, 0, 0),
            Note::Relocated {
                seq,
                lba,
                to,
                version_seq,
            } => raw(RELOCATED, to.0, seq, lba, version_seq),
            Note::VectorBegin { seq, note_count } => raw(VECTOR_BEGIN, note_count, seq, 0, 0),
            Note::Clone {
                seq,
                src,
                dst,
                block_count,
            } => raw(CLONE, block_count, seq, src, dst),
            Note::Move {
                seq,
                src,
                dst,
                block_count,
            } => raw(MOVE, block_count, seq, src, dst),
            Note::Merge {
                seq,
                dst,
                block_count,
                policy,
                source_count,
            } => raw(
                MERGE,
                block_count,
                seq,
                dst,
                u64::from(policy.code()) | u64::from(source_count) << 8,
            ),
            Note::MergeSource { seq, lba, index } => {
                raw(MERGE_SOURCE, 0, seq, lba, u64::from(index))
            }
            Note::Pin { seq, lba, ppa } => raw(PIN, ppa.0, seq, lba, 0),
            Note::SharedReloc { seq, from, to } => {
                raw(SHARED_RELOC, from.0, seq, 0, u64::from(to.0))
            }
            Note::Attr {
                seq,
                lba,
                block_count,
                set,
                clear,
            } => raw(
                ATTR,
                u32::from(set) | u32::from(clear) << 8,
                seq,
                lba,
                block_count,
            ),
            Note::SnapshotCreate {
                seq,
                name_len,
                id,
                parent,
            } => raw(
                SNAPSHOT_CREATE,
                name_len,
                seq,
                u64::from(id),
                u64::from(parent),
            ),
            Note::SnapshotName { seq, bytes } => raw(
                SNAPSHOT_NAME,
                u32::from_le_bytes(get_bytes::<4>(&bytes, 0)),
                seq,
                u64::from_le_bytes(get_bytes::<8>(&bytes, 4)),
                u64::from_le_bytes(get_bytes::<8>(&bytes, 12)),
            ),
            Note::SnapshotDelete { seq, id } => raw(SNAPSHOT_DELETE, 0, seq, u64::from(id), 0),
            Note::Clock { seq, wall_ns } => raw(CLOCK, 0, seq, wall_ns, 0),
            Note::Revert { seq, to_seq } => raw(REVERT, 0, seq, to_seq, 0),
            Note::ForkCreate {
                seq,
                name_len,
                id,
                base,
            } => raw(FORK_CREATE, name_len, seq, u64::from(id), u64::from(base)),
            Note::ForkDelete { seq, id } => raw(FORK_DELETE, 0, seq, u64::from(id), 0),
            Note::NamelessZone {
                seq,
                zone,
                generation,
                kind,
            } => raw(
                NAMELESS_ZONE,
                zone,
                seq,
                u64::from(generation),
                u64::from(kind.zone_kind_code()),
            ),
            Note::NamelessWrite {
                seq,
                ppa,
                data_crc,
                birth_gen,
                replaced,
            } => raw(
                NAMELESS_WRITE,
                ppa.0,
                seq,
                pair(data_crc, birth_gen),
                replaced.to_u64(),
            ),
            Note::NamelessMd { seq, bytes } => raw(
                NAMELESS_MD,
                u32::from_le_bytes(get_bytes::<4>(&bytes, 0)),
                seq,
                u64::from_le_bytes(get_bytes::<8>(&bytes, 4)),
                u64::from_le_bytes(get_bytes::<8>(&bytes, 12)),
            ),
            Note::NamelessFree {
                seq,
                ppa,
                birth_gen,
            } => raw(NAMELESS_FREE, ppa.0, seq, u64::from(birth_gen), 0),
            Note::NamelessMigrate {
                seq,
                new_ppa,
                old,
                data_crc,
                birth_gen,
            } => raw(
                NAMELESS_MIGRATE,
                new_ppa.0,
                seq,
                old.to_u64(),
                pair(data_crc, birth_gen),
            ),
            Note::NamelessAck { seq, commit, old } => {
                if commit {
                    raw(NAMELESS_ACK, ACK_COMMIT, seq, 0, 0)
                } else {
                    raw(NAMELESS_ACK, ACK_ENTRY, seq, old.to_u64(), 0)
                }
            }
            Note::InPlaceStaged {
                seq,
                victim,
                scratch,
                gap_gen,
                first_scratch_offset,
                staged_blocks,
            } => raw(
                IN_PLACE_STAGED,
                victim,
                seq,
                pair(scratch, gap_gen),
                pair(first_scratch_offset, staged_blocks),
            ),
            Note::InPlaceDone {
                seq,
                victim,
                erase_count,
                pad_blocks,
                gap_fill_blocks,
            } => raw(
                IN_PLACE_DONE,
                victim,
                seq,
                u64::from(erase_count),
                pair(pad_blocks, gap_fill_blocks),
            ),
        }
    }

    fn from_raw(r: RawNote) -> Result<Note, FormatError> {
        use note_kind::*;
        let note = match r.kind {
            HOST_WRITE => Note::HostWrite {
                seq: r.seq,
                lba: r.b,
                ppa: ppa("ppa (a)", r.a)?,
                data_crc: low32("data_crc (c)", r.c)?,
            },
            TRIM => {
                zero(NOTE, "a", u64::from(r.a))?;
                if r.c == 0 || r.b.checked_add(r.c).is_none() {
                    return Err(out_of_range("block_count (c)", r.c, "1 ..= u64::MAX - lba"));
                }
                Note::Trim {
                    seq: r.seq,
                    lba: r.b,
                    block_count: r.c,
                }
            }
            RELOC => {
                let (from, to) = (ppa("from (a)", r.a)?, ppa("to (c)", low32("to (c)", r.c)?)?);
                if from == to {
                    return Err(out_of_range(
                        "to (c)",
                        r.c,
                        "a relocation moves to a different ppa",
                    ));
                }
                Note::Reloc {
                    seq: r.seq,
                    lba: r.b,
                    from,
                    to,
                }
            }
            ZONE_RESET => {
                zero(NOTE, "c", r.c)?;
                Note::ZoneReset {
                    seq: r.seq,
                    zone: r.a,
                    erase_count: low32("erase_count (b)", r.b)?,
                }
            }
            ZONE_RETIRE => {
                zero(NOTE, "b", r.b)?;
                zero(NOTE, "c", r.c)?;
                Note::ZoneRetire {
                    seq: r.seq,
                    zone: r.a,
                }
            }
            RELOCATED => {
                // The version was written before GC moved it.
                if r.c >= r.seq {
                    return Err(out_of_range(
                        "version seq (c)",
                        r.c,
                        "below the note's own seq",
                    ));
                }
                Note::Relocated {
                    seq: r.seq,
                    lba: r.b,
                    to: ppa("to (a)", r.a)?,
                    version_seq: r.c,
                }
            }
            VECTOR_BEGIN => {
                zero(NOTE, "b", r.b)?;
                zero(NOTE, "c", r.c)?;
                Note::VectorBegin {
                    seq: r.seq,
                    note_count: r.a,
                }
            }
            CLONE | MOVE => {
                let (src, dst, n) = (r.b, r.c, u64::from(r.a));
                let fits = |l: u64| l.checked_add(n).is_some();
                if n == 0 || !fits(src) || !fits(dst) {
                    return Err(out_of_range(
                        "block_count (a)",
                        n,
                        "1 ..= u32::MAX, ranges in u64",
                    ));
                }
                if src < dst + n && dst < src + n {
                    return Err(out_of_range(
                        "dst (c)",
                        dst,
                        "a range apart from the source",
                    ));
                }
                let (seq, block_count) = (r.seq, r.a);
                if r.kind == CLONE {
                    Note::Clone {
                        seq,
                        src,
                        dst,
                        block_count,
                    }
                } else {
                    Note::Move {
                        seq,
                        src,
                        dst,
                        block_count,
                    }
                }
            }
            MERGE => {
                let policy = MergePolicy::from_code(r.c as u8)
                    .ok_or_else(|| out_of_range("policy (c bits 0..8)", r.c & 0xFF, "1, 2 or 3"))?;
                let sources = r.c >> 8;
                if sources == 0 || sources > u64::from(u32::MAX) {
                    return Err(out_of_range(
                        "source count (c bits 8..40)",
                        sources,
                        "1 ..= u32::MAX",
                    ));
                }
                if r.a == 0 || r.b.checked_add(u64::from(r.a)).is_none() {
                    return Err(out_of_range(
                        "block_count (a)",
                        u64::from(r.a),
                        "1 ..= u32::MAX",
                    ));
                }
                Note::Merge {
                    seq: r.seq,
                    dst: r.b,
                    block_count: r.a,
                    policy,
                    source_count: sources as u32,
                }
            }
            MERGE_SOURCE => {
                zero(NOTE, "a", u64::from(r.a))?;
                Note::MergeSource {
                    seq: r.seq,
                    lba: r.b,
                    index: low32("index (c)", r.c)?,
                }
            }
            PIN => {
                zero(NOTE, "c", r.c)?;
                Note::Pin {
                    seq: r.seq,
                    lba: r.b,
                    ppa: ppa("ppa (a)", r.a)?,
                }
            }
            SHARED_RELOC => {
                zero(NOTE, "b", r.b)?;
                let (from, to) = (ppa("from (a)", r.a)?, ppa("to (c)", low32("to (c)", r.c)?)?);
                if from == to {
                    return Err(out_of_range(
                        "to (c)",
                        r.c,
                        "a relocation moves to a different ppa",
                    ));
                }
                Note::SharedReloc {
                    seq: r.seq,
                    from,
                    to,
                }
            }
            ATTR => {
                let (set, clear) = (r.a as u8, (r.a >> 8) as u8);
                let known = |m: u8| m & !attr_bits::ALL == 0;
                if r.a >> 16 != 0
                    || !known(set)
                    || !known(clear)
                    || set & clear != 0
                    || set | clear == 0
                {
                    return Err(out_of_range(
                        "masks (a)",
                        u64::from(r.a),
                        "known bits, set and clear apart, not both empty",
                    ));
                }
                if r.c == 0 || r.b.checked_add(r.c).is_none() {
                    return Err(out_of_range("block_count (c)", r.c, "1 ..= u64::MAX - lba"));
                }
                Note::Attr {
                    seq: r.seq,
                    lba: r.b,
                    block_count: r.c,
                    set,
                    clear,
                }
            }
            SNAPSHOT_CREATE => {
                if !(1..=MAX_SNAPSHOT_NAME_BYTES as u32).contains(&r.a) {
                    return Err(out_of_range("name_len (a)", u64::from(r.a), "1 ..= 63"));
                }
                Note::SnapshotCreate {
                    seq: r.seq,
                    name_len: r.a,
                    id: low32("id (b)", r.b)?,
                    parent: low32("parent (c)", r.c)?,
                }
            }
            SNAPSHOT_NAME => {
                let mut bytes = [0u8; SNAPSHOT_NAME_NOTE_BYTES];
                put_u32(&mut bytes, 0, r.a);
                put_u64(&mut bytes, 4, r.b);
                put_u64(&mut bytes, 12, r.c);
                Note::SnapshotName { seq: r.seq, bytes }
            }
            SNAPSHOT_DELETE => {
                zero(NOTE, "a", u64::from(r.a))?;
                zero(NOTE, "c", r.c)?;
                Note::SnapshotDelete {
                    seq: r.seq,
                    id: low32("id (b)", r.b)?,
                }
            }
            CLOCK => {
                zero(NOTE, "a", u64::from(r.a))?;
                zero(NOTE, "c", r.c)?;
                Note::Clock {
                    seq: r.seq,
                    wall_ns: r.b,
                }
            }
            REVERT => {
                zero(NOTE, "a", u64::from(r.a))?;
                zero(NOTE, "c", r.c)?;
                if r.b >= r.seq {
                    return Err(out_of_range("target seq (b)", r.b, "below the note's seq"));
                }
                Note::Revert {
                    seq: r.seq,
                    to_seq: r.b,
                }
            }
            FORK_CREATE => {
                if !(1..=MAX_SNAPSHOT_NAME_BYTES as u32).contains(&r.a) {
                    return Err(out_of_range("name_len (a)", u64::from(r.a), "1 ..= 63"));
                }
                Note::ForkCreate {
                    seq: r.seq,
                    name_len: r.a,
                    id: low32("id (b)", r.b)?,
                    base: low32("base (c)", r.c)?,
                }
            }
            FORK_DELETE => {
                zero(NOTE, "a", u64::from(r.a))?;
                zero(NOTE, "c", r.c)?;
                Note::ForkDelete {
                    seq: r.seq,
                    id: low32("id (b)", r.b)?,
                }
            }
            NAMELESS_ZONE => {
                let generation = low32("new generation (b)", r.b)?;
                if generation == 0 {
                    return Err(out_of_range("new generation (b)", 0, "at least 1"));
                }
                let kind = u8::try_from(r.c)
                    .ok()
                    .and_then(NamelessZoneKind::from_zone_kind_code)
                    .ok_or_else(|| out_of_range("zone kind (c)", r.c, "7 or 8"))?;
                Note::NamelessZone {
                    seq: r.seq,
                    zone: r.a,
                    generation,
                    kind,
                }
            }
            NAMELESS_WRITE => {
                let (data_crc, birth_gen) = split(r.b);
                if birth_gen == 0 {
                    return Err(out_of_range("birth gen (b bits 32..64)", 0, "at least 1"));
                }
                Note::NamelessWrite {
                    seq: r.seq,
                    ppa: ppa("ppa (a)", r.a)?,
                    data_crc,
                    birth_gen,
                    replaced: addr_field(NOTE, "replaced (c)", r.c, true)?,
                }
            }
            NAMELESS_MD => {
                let mut bytes = [0u8; NAMELESS_MD_NOTE_BYTES];
                put_u32(&mut bytes, 0, r.a);
                put_u64(&mut bytes, 4, r.b);
                put_u64(&mut bytes, 12, r.c);
                Note::NamelessMd { seq: r.seq, bytes }
            }
            NAMELESS_FREE => {
                zero(NOTE, "c", r.c)?;
                let birth_gen = low32("birth gen (b)", r.b)?;
                if birth_gen == 0 {
                    return Err(out_of_range("birth gen (b)", 0, "at least 1"));
                }
                Note::NamelessFree {
                    seq: r.seq,
                    ppa: ppa("ppa (a)", r.a)?,
                    birth_gen,
                }
            }
            NAMELESS_MIGRATE => {
                let new_ppa = ppa("new ppa (a)", r.a)?;
                let old = addr_field(NOTE, "old (b)", r.b, false)?;
                if old.ppa() == new_ppa {
                    return Err(out_of_range(
                        "new ppa (a)",
                        u64::from(r.a),
                        "a migration moves to a different ppa",
                    ));
                }
                let (data_crc, birth_gen) = split(r.c);
                if birth_gen == 0 {
                    return Err(out_of_range("birth gen (c bits 32..64)", 0, "at least 1"));
                }
                Note::NamelessMigrate {
                    seq: r.seq,
                    new_ppa,
                    old,
                    data_crc,
                    birth_gen,
                }
            }
            NAMELESS_ACK => {
                zero(NOTE, "c", r.c)?;
                match r.a {
                    ACK_ENTRY => Note::NamelessAck {
                        seq: r.seq,
                        commit: false,
                        old: addr_field(NOTE, "old (b)", r.b, false)?,
                    },
                    ACK_COMMIT => {
                        zero(NOTE, "b", r.b)?;
                        Note::NamelessAck {
                            seq: r.seq,
                            commit: true,
                            old: NamelessAddr::NONE,
                        }
                    }
                    a => return Err(out_of_range("a", a.into(), "1 (one entry) or 2 (commit)")),
                }
            }
            IN_PLACE_STAGED => {
                let (scratch, gap_gen) = split(r.b);
                let (first_scratch_offset, staged_blocks) = split(r.c);
                if scratch == r.a {
                    return Err(out_of_range(
                        "scratch zone (b bits 0..32)",
                        scratch.into(),
                        "a zone other than the victim",
                    ));
                }
                Note::InPlaceStaged {
                    seq: r.seq,
                    victim: r.a,
                    scratch,
                    gap_gen,
                    first_scratch_offset,
                    staged_blocks,
                }
            }
            IN_PLACE_DONE => {
                let (pad_blocks, gap_fill_blocks) = split(r.c);
                Note::InPlaceDone {
                    seq: r.seq,
                    victim: r.a,
                    erase_count: low32("erase count (b)", r.b)?,
                    pad_blocks,
                    gap_fill_blocks,
                }
            }
            kind => return Err(FormatError::UnknownNoteKind { kind }),
        };
        Ok(note)
    }

    /// Writes the note into `out[..NOTE_BYTES]`. Panics if `out` is short.
    pub fn encode(&self, out: &mut [u8]) {
        assert!(
            out.len() >= NOTE_BYTES,
            "note buffer of {} bytes",
            out.len()
        );
        let r = self.to_raw();
        put_u8(out, N_KIND_OFF, r.kind);
        put_bytes(out, N_RESERVED_OFF, &[0; N_RESERVED_BYTES]);
        put_u32(out, N_A_OFF, r.a);
        put_u64(out, N_SEQ_OFF, r.seq);
        put_u64(out, N_B_OFF, r.b);
        put_u64(out, N_C_OFF, r.c);
    }

    /// Decodes the note in `bytes[..NOTE_BYTES]`. Notes carry no CRC of their
    /// own: the log block's CRC covers them.
    pub fn decode(bytes: &[u8]) -> Result<Note, FormatError> {
        crate::codec::need(NOTE, bytes, NOTE_BYTES)?;
        zero_bytes(
            NOTE,
            "reserved bytes 1..4",
            &get_bytes::<N_RESERVED_BYTES>(bytes, N_RESERVED_OFF),
        )?;
        Note::from_raw(RawNote {
            kind: get_u8(bytes, N_KIND_OFF),
            a: get_u32(bytes, N_A_OFF),
            seq: get_u64(bytes, N_SEQ_OFF),
            b: get_u64(bytes, N_B_OFF),
            c: get_u64(bytes, N_C_OFF),
        })
    }
}

fn out_of_range(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: NOTE,
        field,
        value,
        rule,
    }
}

/// A NamelessAck's `a`: one remap entry, or a commit.
const ACK_ENTRY: u32 = 1;
const ACK_COMMIT: u32 = 2;

/// `lo` in bits 0..32 and `hi` in bits 32..64.
fn pair(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | u64::from(hi) << 32
}

/// Bits 0..32 and bits 32..64.
fn split(v: u64) -> (u32, u32) {
    (v as u32, (v >> 32) as u32)
}

fn low32(field: &'static str, v: u64) -> Result<u32, FormatError> {
    u32::try_from(v).map_err(|_| out_of_range(field, v, "a 32-bit value"))
}

fn ppa(field: &'static str, v: u32) -> Result<Ppa, FormatError> {
    if v == Ppa::NONE.0 {
        return Err(out_of_range(field, u64::from(v), "a ppa, not Ppa::NONE"));
    }
    Ok(Ppa(v))
}

// ---- log block layout -----------------------------------------------------

/// "ZLOG" as little-endian bytes.
pub const LOG_MAGIC: u32 = u32::from_le_bytes(*b"ZLOG");
/// Log block format version written by this build.
pub const LOG_VERSION: u16 = 1;
/// Smallest device block a log block may occupy.
pub const MIN_LOG_BLOCK_BYTES: usize = 512;

const LOG_KIND_NOTES: u16 = 1;
const LOG_KIND_CHUNK: u16 = 2;

const L_MAGIC_OFF: usize = 0;
const L_VERSION_OFF: usize = L_MAGIC_OFF + 4;
const L_KIND_OFF: usize = L_VERSION_OFF + 2;
const L_LOG_SEQ_OFF: usize = L_KIND_OFF + 2;
const L_PAYLOAD_BYTES_OFF: usize = L_LOG_SEQ_OFF + 8;
const L_COUNT_OFF: usize = L_PAYLOAD_BYTES_OFF + 4;
const L_AUX_OFF: usize = L_COUNT_OFF + 4;
/// Bytes before the payload of a log block.
pub const LOG_HEADER_BYTES: usize = L_AUX_OFF + 8;
/// Bytes after the payload (the CRC32C of everything before it).
pub const LOG_TRAILER_BYTES: usize = 4;

const _: () = assert!(LOG_MAGIC == 0x474F_4C5A);
const _: () = assert!(LOG_HEADER_BYTES == 32 && aligned(L_LOG_SEQ_OFF, 8) && aligned(L_AUX_OFF, 8));
const _: () = assert!(aligned(LOG_HEADER_BYTES, NOTE_BYTES));
const _: () = assert!(
    notes_per_block(MIN_LOG_BLOCK_BYTES) >= 1 && chunk_payload_bytes(MIN_LOG_BLOCK_BYTES) >= 256
);

/// Notes that fit one log block of `block_size` bytes.
pub const fn notes_per_block(block_size: usize) -> usize {
    (block_size - LOG_HEADER_BYTES - LOG_TRAILER_BYTES) / NOTE_BYTES
}

/// Checkpoint stream bytes that fit one log block of `block_size` bytes.
pub const fn chunk_payload_bytes(block_size: usize) -> usize {
    block_size - LOG_HEADER_BYTES - LOG_TRAILER_BYTES
}

/// One block of the metadata log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LogBlock {
    /// Group-committed notes, in seq order as the writer chose it.
    Notes { log_seq: u64, notes: Vec<Note> },
    /// Chunk `index` of the checkpoint whose chunk 0 has log_seq
    /// `checkpoint_id`.
    CheckpointChunk {
        log_seq: u64,
        checkpoint_id: u64,
        index: u32,
        payload: Vec<u8>,
    },
}

fn block_size_ok(block_size: usize) -> bool {
    block_size.is_power_of_two()
        && block_size >= MIN_LOG_BLOCK_BYTES
        && u32::try_from(block_size).is_ok()
}

impl LogBlock {
    /// The block's position in the log.
    pub fn log_seq(&self) -> u64 {
        match *self {
            LogBlock::Notes { log_seq, .. } | LogBlock::CheckpointChunk { log_seq, .. } => log_seq,
        }
    }

    /// Encodes into one block of `block_size` bytes (a power of two >= 512).
    /// Panics (a bug) if the payload does not fit or the chunk fields are
    /// inconsistent; checks its own output by decoding it.
    pub fn encode(&self, block_size: usize) -> Vec<u8> {
        match self {
            LogBlock::Notes { log_seq, notes } => {
                assert!(block_size_ok(block_size), "log block size {block_size}");
                assert!(
                    notes.len() <= notes_per_block(block_size),
                    "{} notes in a log block",
                    notes.len()
                );
                let mut b = vec![0u8; block_size];
                let payload_bytes = (notes.len() * NOTE_BYTES) as u32;
                let count = notes.len() as u32;
                put_header(&mut b, LOG_KIND_NOTES, *log_seq, payload_bytes, count, 0);
                for (i, note) in notes.iter().enumerate() {
                    note.encode(&mut b[LOG_HEADER_BYTES + i * NOTE_BYTES..]);
                }
                seal_crc(&mut b, block_size - LOG_TRAILER_BYTES);
                assert_eq!(
                    LogBlock::decode(&b).as_ref(),
                    Ok(self),
                    "log block does not round-trip"
                );
                b
            }
            LogBlock::CheckpointChunk {
                log_seq,
                checkpoint_id,
                index,
                payload,
            } => ChunkRef {
                log_seq: *log_seq,
                checkpoint_id: *checkpoint_id,
                index: *index,
                payload,
            }
            .encode(block_size),
        }
    }

    /// Decodes one whole log block. [`FormatError::Erased`] when the block
    /// is all 0x00 or all 0xFF (the end of the log).
    pub fn decode(bytes: &[u8]) -> Result<LogBlock, FormatError> {
        let h = decode_header(bytes)?;
        match h.kind {
            LOG_KIND_NOTES => decode_notes(bytes, &h),
            LOG_KIND_CHUNK => decode_chunk(bytes, &h).map(ChunkRef::to_block),
            kind => Err(FormatError::UnknownLogBlockKind { kind }),
        }
    }
}

/// The log_seq of a log block whose header and CRC check, whatever its
/// kind and notes: `None` for an erased, torn, damaged or older-version
/// block. Tells a block a newer build wrote (intact, not decodable here)
/// from the log's end.
pub fn intact_log_seq(bytes: &[u8]) -> Option<u64> {
    decode_header(bytes).ok().map(|h| h.log_seq)
}

/// A checkpoint chunk with its payload borrowed: what a checkpoint's
/// writer encodes straight from the stream, without a copy per chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef<'a> {
    pub log_seq: u64,
    pub checkpoint_id: u64,
    pub index: u32,
    pub payload: &'a [u8],
}

impl ChunkRef<'_> {
    /// Encodes into one block of `block_size` bytes, as
    /// [`LogBlock::encode`] does a `CheckpointChunk`, and checks its own
    /// output by decoding it with the same rules as [`LogBlock::decode`]
    /// (the payload compared in place, not copied).
    pub fn encode(&self, block_size: usize) -> Vec<u8> {
        assert!(block_size_ok(block_size), "log block size {block_size}");
        assert!(
            self.payload.len() <= chunk_payload_bytes(block_size),
            "chunk payload of {} bytes",
            self.payload.len()
        );
        // Built in place: only the header's reserved bytes and the tail
        // after the payload are zeroed, not the whole block first (a
        // checkpoint's blocks are mostly payload).
        let mut b = Vec::with_capacity(block_size);
        b.resize(LOG_HEADER_BYTES, 0);
        b.extend_from_slice(self.payload);
        b.resize(block_size, 0);
        let payload_bytes = self.payload.len() as u32;
        put_header(
            &mut b,
            LOG_KIND_CHUNK,
            self.log_seq,
            payload_bytes,
            self.index,
            self.checkpoint_id,
        );
        seal_crc(&mut b, block_size - LOG_TRAILER_BYTES);
        let decoded = decode_header(&b).and_then(|h| match h.kind {
            LOG_KIND_CHUNK => decode_chunk(&b, &h),
            kind => Err(FormatError::UnknownLogBlockKind { kind }),
        });
        assert_eq!(decoded, Ok(*self), "log block does not round-trip");
        b
    }

    fn to_block(self) -> LogBlock {
        LogBlock::CheckpointChunk {
            log_seq: self.log_seq,
            checkpoint_id: self.checkpoint_id,
            index: self.index,
            payload: self.payload.to_vec(),
        }
    }
}

/// The fields of a log block's header.
struct Header {
    kind: u16,
    log_seq: u64,
    payload_bytes: usize,
    count: u32,
    aux: u64,
}

fn put_header(b: &mut [u8], kind: u16, log_seq: u64, payload_bytes: u32, count: u32, aux: u64) {
    put_u32(b, L_MAGIC_OFF, LOG_MAGIC);
    put_u16(b, L_VERSION_OFF, LOG_VERSION);
    put_u16(b, L_KIND_OFF, kind);
    put_u64(b, L_LOG_SEQ_OFF, log_seq);
    put_u32(b, L_PAYLOAD_BYTES_OFF, payload_bytes);
    put_u32(b, L_COUNT_OFF, count);
    put_u64(b, L_AUX_OFF, aux);
}

/// The checks every log block passes whatever its kind: size, not erased,
/// magic, version and CRC.
fn decode_header(bytes: &[u8]) -> Result<Header, FormatError> {
    let block_size = bytes.len();
    if !block_size_ok(block_size) {
        return Err(FormatError::OutOfRange {
            structure: LOG_BLOCK,
            field: "block size",
            value: block_size as u64,
            rule: "a power of two >= 512",
        });
    }
    if is_erased(bytes) {
        return Err(FormatError::Erased {
            structure: LOG_BLOCK,
        });
    }
    let magic = get_u32(bytes, L_MAGIC_OFF);
    if magic != LOG_MAGIC {
        return Err(FormatError::BadMagic {
            structure: LOG_BLOCK,
            expected: LOG_MAGIC.into(),
            found: magic.into(),
        });
    }
    let version = get_u16(bytes, L_VERSION_OFF);
    if version != LOG_VERSION {
        let (found, supported) = (u32::from(version), u32::from(LOG_VERSION));
        return Err(if found > supported {
            FormatError::NewerVersion {
                structure: LOG_BLOCK,
                found,
                supported,
            }
        } else {
            FormatError::BadVersion {
                structure: LOG_BLOCK,
                found,
                supported,
            }
        });
    }
    check_crc(LOG_BLOCK, bytes, block_size - LOG_TRAILER_BYTES)?;
    Ok(Header {
        kind: get_u16(bytes, L_KIND_OFF),
        log_seq: get_u64(bytes, L_LOG_SEQ_OFF),
        payload_bytes: get_u32(bytes, L_PAYLOAD_BYTES_OFF) as usize,
        count: get_u32(bytes, L_COUNT_OFF),
        aux: get_u64(bytes, L_AUX_OFF),
    })
}

fn log_range(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: LOG_BLOCK,
        field,
        value,
        rule,
    }
}

fn decode_notes(b: &[u8], h: &Header) -> Result<LogBlock, FormatError> {
    let (log_seq, payload_bytes) = (h.log_seq, h.payload_bytes);
    zero(LOG_BLOCK, "aux (notes block)", h.aux)?;
    let count = h.count as usize;
    if count > notes_per_block(b.len()) {
        return Err(log_range(
            "count",
            count as u64,
            "at most notes_per_block(block size) notes",
        ));
    }
    if payload_bytes != count * NOTE_BYTES {
        return Err(FormatError::Length {
            structure: LOG_BLOCK,
            expected: (count * NOTE_BYTES) as u64,
            actual: payload_bytes as u64,
        });
    }
    let end = LOG_HEADER_BYTES + payload_bytes;
    zero_bytes(
        LOG_BLOCK,
        "padding after the notes",
        &b[end..b.len() - LOG_TRAILER_BYTES],
    )?;
    let notes = b[LOG_HEADER_BYTES..end]
        .chunks_exact(NOTE_BYTES)
        .map(Note::decode)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LogBlock::Notes { log_seq, notes })
}

fn decode_chunk<'a>(b: &'a [u8], h: &Header) -> Result<ChunkRef<'a>, FormatError> {
    let (log_seq, payload_bytes) = (h.log_seq, h.payload_bytes);
    let (index, checkpoint_id) = (h.count, h.aux);
    if payload_bytes > chunk_payload_bytes(b.len()) {
        return Err(log_range(
            "payload_bytes",
            payload_bytes as u64,
            "at most chunk_payload_bytes(block size)",
        ));
    }
    if index == 0 && checkpoint_id != log_seq {
        return Err(log_range(
            "aux (checkpoint id)",
            checkpoint_id,
            "chunk 0 has checkpoint id == its own log_seq",
        ));
    }
    if index > 0 && checkpoint_id >= log_seq {
        return Err(log_range(
            "aux (checkpoint id)",
            checkpoint_id,
            "a later chunk follows chunk 0 in the log",
        ));
    }
    let end = LOG_HEADER_BYTES + payload_bytes;
    zero_bytes(
        LOG_BLOCK,
        "padding after the chunk",
        &b[end..b.len() - LOG_TRAILER_BYTES],
    )?;
    Ok(ChunkRef {
        log_seq,
        checkpoint_id,
        index,
        payload: &b[LOG_HEADER_BYTES..end],
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;

    fn arb_ppa() -> impl Strategy<Value = Ppa> {
        (0..u32::MAX).prop_map(Ppa)
    }

    pub(crate) fn arb_note() -> impl Strategy<Value = Note> {
        prop_oneof![
            (any::<u64>(), any::<u64>(), arb_ppa(), any::<u32>()).prop_map(
                |(seq, lba, ppa, data_crc)| Note::HostWrite {
                    seq,
                    lba,
                    ppa,
                    data_crc
                }
            ),
            (any::<u64>(), 0..u64::MAX - 1)
                .prop_flat_map(|(seq, lba)| (Just(seq), Just(lba), 1..=u64::MAX - lba))
                .prop_map(|(seq, lba, block_count)| Note::Trim {
                    seq,
                    lba,
                    block_count
                }),
            (any::<u64>(), any::<u64>(), arb_ppa(), arb_ppa())
                .prop_filter("distinct", |(_, _, f, t)| f != t)
                .prop_map(|(seq, lba, from, to)| Note::Reloc { seq, lba, from, to }),
            (any::<u64>(), any::<u32>(), any::<u32>()).prop_map(|(seq, zone, erase_count)| {
                Note::ZoneReset {
                    seq,
                    zone,
                    erase_count,
                }
            }),
            (any::<u64>(), any::<u32>()).prop_map(|(seq, zone)| Note::ZoneRetire { seq, zone }),
            (1..u64::MAX, any::<u64>(), arb_ppa())
                .prop_flat_map(|(seq, lba, to)| (Just(seq), Just(lba), Just(to), 0..seq))
                .prop_map(|(seq, lba, to, version_seq)| Note::Relocated {
                    seq,
                    lba,
                    to,
                    version_seq
                }),
            (any::<u64>(), any::<u32>())
                .prop_map(|(seq, note_count)| Note::VectorBegin { seq, note_count }),
            (
                any::<u64>(),
                0..u64::MAX / 2,
                1..=u32::MAX,
                any::<bool>(),
                any::<bool>()
            )
                .prop_map(|(seq, src, block_count, before, moving)| {
                    let n = u64::from(block_count);
                    let dst = if before {
                        src.saturating_sub(n)
                    } else {
                        src + n
                    };
                    let dst = if dst + n > src && src + n > dst {
                        src + n
                    } else {
                        dst
                    };
                    if moving {
                        Note::Move {
                            seq,
                            src,
                            dst,
                            block_count,
                        }
                    } else {
                        Note::Clone {
                            seq,
                            src,
                            dst,
                            block_count,
                        }
                    }
                }),
            (
                any::<u64>(),
                0..u64::MAX / 2,
                1..=u32::MAX,
                1u8..=3,
                1..=u32::MAX
            )
                .prop_map(|(seq, dst, block_count, policy, source_count)| {
                    Note::Merge {
                        seq,
                        dst,
                        block_count,
                        policy: MergePolicy::from_code(policy).unwrap(),
                        source_count,
                    }
                }),
            (any::<u64>(), any::<u64>(), any::<u32>())
                .prop_map(|(seq, lba, index)| Note::MergeSource { seq, lba, index }),
            (any::<u64>(), any::<u64>(), arb_ppa()).prop_map(|(seq, lba, ppa)| Note::Pin {
                seq,
                lba,
                ppa
            }),
            (any::<u64>(), arb_ppa(), arb_ppa())
                .prop_filter("distinct", |(_, f, t)| f != t)
                .prop_map(|(seq, from, to)| Note::SharedReloc { seq, from, to }),
            (any::<u64>(), 0..u64::MAX / 2, 1..u64::MAX / 2, 0u8..3).prop_map(
                |(seq, lba, block_count, which)| {
                    let (set, clear) = match which {
                        0 => (attr_bits::IMMUTABLE, attr_bits::NON_PERSISTENT),
                        1 => (0, attr_bits::IMMUTABLE),
                        _ => (attr_bits::ALL, 0),
                    };
                    Note::Attr {
                        seq,
                        lba,
                        block_count,
                        set,
                        clear,
                    }
                }
            ),
            (
                any::<u64>(),
                1..=MAX_SNAPSHOT_NAME_BYTES as u32,
                any::<u32>(),
                any::<u32>()
            )
                .prop_map(|(seq, name_len, id, parent)| Note::SnapshotCreate {
                    seq,
                    name_len,
                    id,
                    parent
                }),
            (any::<u64>(), any::<[u8; SNAPSHOT_NAME_NOTE_BYTES]>())
                .prop_map(|(seq, bytes)| Note::SnapshotName { seq, bytes }),
            (any::<u64>(), any::<u32>()).prop_map(|(seq, id)| Note::SnapshotDelete { seq, id }),
            (any::<u64>(), any::<u64>()).prop_map(|(seq, wall_ns)| Note::Clock { seq, wall_ns }),
            (1..u64::MAX, any::<u64>()).prop_map(|(seq, t)| Note::Revert {
                seq,
                to_seq: t % seq
            }),
            (
                any::<u64>(),
                1..=MAX_SNAPSHOT_NAME_BYTES as u32,
                any::<u32>(),
                any::<u32>()
            )
                .prop_map(|(seq, name_len, id, base)| Note::ForkCreate {
                    seq,
                    name_len,
                    id,
                    base
                }),
            (any::<u64>(), any::<u32>()).prop_map(|(seq, id)| Note::ForkDelete { seq, id }),
            arb_nameless_note(),
        ]
    }

    fn arb_addr() -> impl Strategy<Value = NamelessAddr> {
        (0..u32::MAX, 1..=u32::MAX).prop_map(|(p, g)| NamelessAddr::new(Ppa(p), g))
    }

    /// The nameless notes (kinds 24-31).
    pub(crate) fn arb_nameless_note() -> impl Strategy<Value = Note> {
        prop_oneof![
            (any::<u64>(), any::<u32>(), 1..=u32::MAX, any::<bool>()).prop_map(
                |(seq, zone, generation, moved)| Note::NamelessZone {
                    seq,
                    zone,
                    generation,
                    kind: if moved {
                        NamelessZoneKind::Moved
                    } else {
                        NamelessZoneKind::Data
                    },
                }
            ),
            (
                any::<u64>(),
                arb_ppa(),
                any::<u32>(),
                1..=u32::MAX,
                proptest::option::of(arb_addr())
            )
                .prop_map(|(seq, ppa, data_crc, birth_gen, replaced)| {
                    Note::NamelessWrite {
                        seq,
                        ppa,
                        data_crc,
                        birth_gen,
                        replaced: replaced.unwrap_or(NamelessAddr::NONE),
                    }
                }),
            (any::<u64>(), any::<[u8; NAMELESS_MD_NOTE_BYTES]>())
                .prop_map(|(seq, bytes)| Note::NamelessMd { seq, bytes }),
            (any::<u64>(), arb_ppa(), 1..=u32::MAX).prop_map(|(seq, ppa, birth_gen)| {
                Note::NamelessFree {
                    seq,
                    ppa,
                    birth_gen,
                }
            }),
            (
                any::<u64>(),
                arb_ppa(),
                arb_addr(),
                any::<u32>(),
                1..=u32::MAX
            )
                .prop_filter("moves", |(_, p, old, _, _)| old.ppa() != *p)
                .prop_map(|(seq, new_ppa, old, data_crc, birth_gen)| {
                    Note::NamelessMigrate {
                        seq,
                        new_ppa,
                        old,
                        data_crc,
                        birth_gen,
                    }
                }),
            (any::<u64>(), any::<bool>(), arb_addr()).prop_map(|(seq, commit, old)| {
                Note::NamelessAck {
                    seq,
                    commit,
                    old: if commit { NamelessAddr::NONE } else { old },
                }
            }),
            (
                any::<u64>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>()
            )
                .prop_filter("apart", |(_, v, s, ..)| v != s)
                .prop_map(
                    |(seq, victim, scratch, gap_gen, first_scratch_offset, staged_blocks)| {
                        Note::InPlaceStaged {
                            seq,
                            victim,
                            scratch,
                            gap_gen,
                            first_scratch_offset,
                            staged_blocks,
                        }
                    }
                ),
            (
                any::<u64>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>(),
                any::<u32>()
            )
                .prop_map(|(seq, victim, erase_count, pad_blocks, gap_fill_blocks)| {
                    Note::InPlaceDone {
                        seq,
                        victim,
                        erase_count,
                        pad_blocks,
                        gap_fill_blocks,
                    }
                }),
        ]
    }

    /// Encodes and decodes every note, as the log does.
    fn through_bytes(notes: &[Note]) -> Vec<Note> {
        notes
            .iter()
            .map(|n| {
                let mut b = [0u8; NOTE_BYTES];
                n.encode(&mut b);
                Note::decode(&b).expect("a note this build wrote")
            })
            .collect()
    }

    /// The name a create's notes spell, as replay would read it.
    fn name_of(notes: &[Note]) -> Result<String, FormatError> {
        let Note::SnapshotCreate { name_len, .. } = notes[0] else {
            panic!("{:?} is not a create", notes[0]);
        };
        let names: Vec<[u8; SNAPSHOT_NAME_NOTE_BYTES]> = notes[1..]
            .iter()
            .map(|n| match *n {
                Note::SnapshotName { bytes, .. } => bytes,
                other => panic!("{other:?} is not a name note"),
            })
            .collect();
        snapshot_name(name_len, &names)
    }

    fn arb_block_size() -> impl Strategy<Value = usize> {
        (9u32..=13).prop_map(|s| 1usize << s)
    }

    fn arb_log_block() -> impl Strategy<Value = (usize, LogBlock)> {
        arb_block_size().prop_flat_map(|bs| {
            let notes = (any::<u64>(), vec(arb_note(), 0..=notes_per_block(bs)))
                .prop_map(|(log_seq, notes)| LogBlock::Notes { log_seq, notes });
            let chunk = (
                1..u64::MAX,
                0u32..4,
                vec(any::<u8>(), 0..=chunk_payload_bytes(bs)),
            )
                .prop_map(|(log_seq, index, payload)| {
                    let checkpoint_id = log_seq - u64::from(index.min(1));
                    LogBlock::CheckpointChunk {
                        log_seq,
                        checkpoint_id,
                        index,
                        payload,
                    }
                });
            (Just(bs), prop_oneof![notes, chunk])
        })
    }

    #[test]
    fn note_layout_is_documented() {
        let n = Note::Reloc {
            seq: 5,
            lba: 6,
            from: Ppa(7),
            to: Ppa(8),
        };
        let mut b = [0u8; NOTE_BYTES];
        n.encode(&mut b);
        assert_eq!(&b[..8], &[3, 0, 0, 0, 7, 0, 0, 0]);
        assert_eq!(&b[8..16], &5u64.to_le_bytes());
        assert_eq!(&b[16..24], &6u64.to_le_bytes());
        assert_eq!(&b[24..32], &8u64.to_le_bytes());
        assert_eq!(n.seq(), 5);
        let n = Note::Relocated {
            seq: 9,
            lba: 10,
            to: Ppa(11),
            version_seq: 3,
        };
        n.encode(&mut b);
        assert_eq!(&b[..8], &[6, 0, 0, 0, 11, 0, 0, 0]);
        assert_eq!(&b[8..16], &9u64.to_le_bytes());
        assert_eq!(&b[16..24], &10u64.to_le_bytes());
        assert_eq!(&b[24..32], &3u64.to_le_bytes());
        assert_eq!(Note::decode(&b), Ok(n));
        let mut late = b;
        late[24..32].copy_from_slice(&9u64.to_le_bytes());
        assert!(matches!(
            Note::decode(&late),
            Err(FormatError::OutOfRange { .. })
        ));
        b[4..8].copy_from_slice(&Ppa::NONE.0.to_le_bytes());
        assert!(matches!(
            Note::decode(&b),
            Err(FormatError::OutOfRange { .. })
        ));
    }

    #[test]
    fn range_notes_are_laid_out_and_checked() {
        let mut b = [0u8; NOTE_BYTES];
        let clone = Note::Clone {
            seq: 9,
            src: 100,
            dst: 200,
            block_count: 50,
        };
        clone.encode(&mut b);
        assert_eq!(&b[..8], &[8, 0, 0, 0, 50, 0, 0, 0]);
        assert_eq!(&b[16..24], &100u64.to_le_bytes());
        assert_eq!(&b[24..32], &200u64.to_le_bytes());
        assert_eq!(Note::decode(&b), Ok(clone));
        // Overlapping ranges and empty ones are refused.
        let overlap = Note::Clone {
            seq: 9,
            src: 100,
            dst: 120,
            block_count: 50,
        };
        overlap.encode(&mut b);
        assert!(matches!(
            Note::decode(&b),
            Err(FormatError::OutOfRange { .. })
        ));
        let merge = Note::Merge {
            seq: 1,
            dst: 7,
            block_count: 3,
            policy: MergePolicy::LastWins,
            source_count: 2,
        };
        merge.encode(&mut b);
        assert_eq!(&b[24..32], &(3u64 | 2 << 8).to_le_bytes());
        assert_eq!(Note::decode(&b), Ok(merge));
        b[24] = 4; // no such policy
        assert!(matches!(
            Note::decode(&b),
            Err(FormatError::OutOfRange { .. })
        ));
        let attr = Note::Attr {
            seq: 1,
            lba: 5,
            block_count: 6,
            set: attr_bits::IMMUTABLE,
            clear: attr_bits::NON_PERSISTENT,
        };
        attr.encode(&mut b);
        assert_eq!(&b[4..8], &(1u32 | 2 << 8).to_le_bytes());
        assert_eq!(Note::decode(&b), Ok(attr));
        b[4] = 3; // a bit both set and cleared
        assert!(matches!(
            Note::decode(&b),
            Err(FormatError::OutOfRange { .. })
        ));
    }

    #[test]
    fn snapshot_notes_are_laid_out_and_checked() {
        let mut b = [0u8; NOTE_BYTES];
        let create = Note::SnapshotCreate {
            seq: 9,
            name_len: 21,
            id: 7,
            parent: u32::MAX,
        };
        create.encode(&mut b);
        assert_eq!(&b[..8], &[15, 0, 0, 0, 21, 0, 0, 0]);
        assert_eq!(&b[8..16], &9u64.to_le_bytes());
        assert_eq!(&b[16..24], &7u64.to_le_bytes());
        assert_eq!(&b[24..32], &u64::from(u32::MAX).to_le_bytes());
        assert_eq!(Note::decode(&b), Ok(create));
        assert_eq!(
            (create.seq(), create.kind()),
            (9, note_kind::SNAPSHOT_CREATE)
        );
        for name_len in [0u32, 64, u32::MAX] {
            let mut f = b;
            f[4..8].copy_from_slice(&name_len.to_le_bytes());
            assert!(
                matches!(
                    Note::decode(&f),
                    Err(FormatError::OutOfRange {
                        field: "name_len (a)",
                        ..
                    })
                ),
                "name_len {name_len}"
            );
        }
        let mut f = b;
        f[16..24].copy_from_slice(&(1u64 << 32).to_le_bytes());
        assert!(matches!(
            Note::decode(&f),
            Err(FormatError::OutOfRange {
                field: "id (b)",
                ..
            })
        ));
        let mut f = b;
        f[24..32].copy_from_slice(&(1u64 << 32).to_le_bytes());
        assert!(matches!(
            Note::decode(&f),
            Err(FormatError::OutOfRange {
                field: "parent (c)",
                ..
            })
        ));
        // A name note: a, b and c are the name's bytes 0..4, 4..12, 12..20.
        let bytes: [u8; 20] = std::array::from_fn(|i| i as u8 + 1);
        let name = Note::SnapshotName { seq: 9, bytes };
        name.encode(&mut b);
        assert_eq!(b[0], 16);
        assert_eq!(&b[4..8], &bytes[..4]);
        assert_eq!(&b[16..32], &bytes[4..]);
        assert_eq!(Note::decode(&b), Ok(name));
        let delete = Note::SnapshotDelete { seq: 10, id: 7 };
        delete.encode(&mut b);
        assert_eq!(&b[..8], &[17, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[16..24], &7u64.to_le_bytes());
        assert_eq!(&b[24..32], &[0; 8]);
        assert_eq!(Note::decode(&b), Ok(delete));
        for (at, what) in [(4, "a"), (24, "c")] {
            let mut f = b;
            f[at] = 1;
            assert!(
                matches!(Note::decode(&f), Err(FormatError::Reserved { .. })),
                "{what}"
            );
        }
        let mut f = b;
        f[20] = 1; // id 2^32 + 7
        assert!(matches!(
            Note::decode(&f),
            Err(FormatError::OutOfRange {
                field: "id (b)",
                ..
            })
        ));
    }

    #[test]
    fn snapshot_names_round_trip_through_notes() {
        for name in [
            "a".to_string(),
            "b".repeat(20),
            "c".repeat(21),
            "d".repeat(40),
            "e".repeat(63),
            "é".repeat(31),
            "日本語".repeat(7),
            "🦀 crab".into(),
        ] {
            let notes = snapshot_create_notes(5, 2, 1, &name);
            let len = name.len();
            assert_eq!(notes.len(), 1 + len.div_ceil(20), "{name}");
            assert!(notes.iter().all(|n| n.seq() == 5));
            assert_eq!(
                notes[0],
                Note::SnapshotCreate {
                    seq: 5,
                    name_len: len as u32,
                    id: 2,
                    parent: 1
                }
            );
            let read = through_bytes(&notes);
            assert_eq!(read, notes);
            assert_eq!(name_of(&read), Ok(name));
        }
    }

    #[test]
    fn snapshot_name_refuses_what_does_not_fit() {
        let notes = snapshot_create_notes(5, 2, 1, &"x".repeat(21));
        let names: Vec<[u8; 20]> = notes[1..]
            .iter()
            .map(|n| match *n {
                Note::SnapshotName { bytes, .. } => bytes,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            snapshot_name(21, &names).as_deref(),
            Ok(&"x".repeat(21)[..])
        );
        // A missing and an extra name note.
        assert!(matches!(
            snapshot_name(21, &names[..1]),
            Err(FormatError::Length {
                expected: 2,
                actual: 1,
                ..
            })
        ));
        assert!(matches!(
            snapshot_name(20, &names),
            Err(FormatError::Length {
                expected: 1,
                actual: 2,
                ..
            })
        ));
        // name_len 0 and 64 (64 would fit 4 notes of 20 bytes).
        assert!(snapshot_name(0, &[]).is_err());
        assert!(snapshot_name(64, &[[b'y'; 20]; 4]).is_err());
        // A byte past name_len.
        let mut padded = names.clone();
        padded[1][1] = b'!';
        assert!(matches!(
            snapshot_name(21, &padded),
            Err(FormatError::Reserved { .. })
        ));
        // Not UTF-8: a bad byte, and a character cut by name_len.
        let mut bad = names.clone();
        bad[0][3] = 0xFF;
        assert!(matches!(
            snapshot_name(21, &bad),
            Err(FormatError::OutOfRange { field: "name", .. })
        ));
        let cut = snapshot_create_notes(5, 2, 1, "ab\u{e9}");
        let Note::SnapshotName { mut bytes, .. } = cut[1] else {
            panic!("{:?}", cut[1]);
        };
        bytes[3] = 0; // keep "ab" and the first byte of "é"
        assert!(matches!(
            snapshot_name(3, &[bytes]),
            Err(FormatError::OutOfRange { field: "name", .. })
        ));
    }

    #[test]
    #[should_panic(expected = "snapshot name of 64 bytes")]
    fn snapshot_create_notes_refuses_a_long_name() {
        snapshot_create_notes(1, 0, u32::MAX, &"z".repeat(64));
    }

    /// `n` encoded, then `edit`ed: what decode makes of it.
    fn decode_edited(n: Note, edit: impl Fn(&mut [u8; NOTE_BYTES])) -> Result<Note, FormatError> {
        let mut b = [0u8; NOTE_BYTES];
        n.encode(&mut b);
        edit(&mut b);
        Note::decode(&b)
    }

    fn field_of(r: Result<Note, FormatError>) -> &'static str {
        match r {
            Err(FormatError::OutOfRange { field, .. } | FormatError::Reserved { field, .. }) => {
                field
            }
            other => panic!("{other:?} is not a field error"),
        }
    }

    #[test]
    fn nameless_notes_are_laid_out_as_documented() {
        let addr = NamelessAddr::new(Ppa(0x44), 0x55);
        // (note, kind, a, b, c) as format.md §11's table gives them.
        let cases = [
            (
                Note::NamelessZone {
                    seq: 1,
                    zone: 9,
                    generation: 3,
                    kind: NamelessZoneKind::Moved,
                },
                24,
                9,
                3,
                8,
            ),
            (
                Note::NamelessWrite {
                    seq: 2,
                    ppa: Ppa(7),
                    data_crc: 0xDEAD_BEEF,
                    birth_gen: 4,
                    replaced: addr,
                },
                25,
                7,
                0x4_DEAD_BEEF,
                addr.to_u64(),
            ),
            (
                Note::NamelessWrite {
                    seq: 2,
                    ppa: Ppa(7),
                    data_crc: 1,
                    birth_gen: 1,
                    replaced: NamelessAddr::NONE,
                },
                25,
                7,
                1 << 32 | 1,
                u64::MAX,
            ),
            (
                Note::NamelessMd {
                    seq: 3,
                    bytes: std::array::from_fn(|i| i as u8 + 1),
                },
                26,
                u32::from_le_bytes([1, 2, 3, 4]),
                u64::from_le_bytes([5, 6, 7, 8, 9, 10, 11, 12]),
                u64::from_le_bytes([13, 14, 15, 16, 17, 18, 19, 20]),
            ),
            (
                Note::NamelessFree {
                    seq: 4,
                    ppa: Ppa(8),
                    birth_gen: 2,
                },
                27,
                8,
                2,
                0,
            ),
            (
                Note::NamelessMigrate {
                    seq: 5,
                    new_ppa: Ppa(10),
                    old: addr,
                    data_crc: 0x1234,
                    birth_gen: 6,
                },
                28,
                10,
                addr.to_u64(),
                6 << 32 | 0x1234,
            ),
            (
                Note::NamelessAck {
                    seq: 6,
                    commit: false,
                    old: addr,
                },
                29,
                1,
                addr.to_u64(),
                0,
            ),
            (
                Note::NamelessAck {
                    seq: 6,
                    commit: true,
                    old: NamelessAddr::NONE,
                },
                29,
                2,
                0,
                0,
            ),
            (
                Note::InPlaceStaged {
                    seq: 7,
                    victim: 11,
                    scratch: 12,
                    gap_gen: 13,
                    first_scratch_offset: 14,
                    staged_blocks: 15,
                },
                30,
                11,
                13 << 32 | 12,
                15 << 32 | 14,
            ),
            (
                Note::InPlaceDone {
                    seq: 8,
                    victim: 11,
                    erase_count: 40,
                    pad_blocks: 3,
                    gap_fill_blocks: 5,
                },
                31,
                11,
                40,
                5 << 32 | 3,
            ),
        ];
        for (n, kind, a, b, c) in cases {
            let mut bytes = [0u8; NOTE_BYTES];
            n.encode(&mut bytes);
            assert_eq!(&bytes[..4], &[kind, 0, 0, 0], "{n:?}");
            assert_eq!(&bytes[4..8], &a.to_le_bytes(), "{n:?} a");
            assert_eq!(&bytes[8..16], &n.seq().to_le_bytes(), "{n:?} seq");
            assert_eq!(&bytes[16..24], &b.to_le_bytes(), "{n:?} b");
            assert_eq!(&bytes[24..32], &c.to_le_bytes(), "{n:?} c");
            assert_eq!(n.kind(), kind);
            assert_eq!(Note::decode(&bytes), Ok(n));
        }
    }

    #[test]
    fn nameless_note_rules_are_checked() {
        let addr = NamelessAddr::new(Ppa(0x44), 0x55);
        let zone = Note::NamelessZone {
            seq: 1,
            zone: 9,
            generation: 3,
            kind: NamelessZoneKind::Data,
        };
        assert_eq!(
            field_of(decode_edited(zone, |b| b[16..24].fill(0))),
            "new generation (b)"
        );
        assert_eq!(
            field_of(decode_edited(zone, |b| b[20] = 1)),
            "new generation (b)"
        );
        for k in [0u8, 6, 9] {
            assert_eq!(
                field_of(decode_edited(zone, |b| b[24] = k)),
                "zone kind (c)"
            );
        }
        assert_eq!(
            field_of(decode_edited(zone, |b| b[31] = 1)),
            "zone kind (c)"
        );
        let write = Note::NamelessWrite {
            seq: 2,
            ppa: Ppa(7),
            data_crc: 5,
            birth_gen: 4,
            replaced: addr,
        };
        assert_eq!(
            field_of(decode_edited(write, |b| b[4..8].fill(0xFF))),
            "ppa (a)"
        );
        assert_eq!(
            field_of(decode_edited(write, |b| b[20..24].fill(0))),
            "birth gen (b bits 32..64)"
        );
        // replaced: none, or a well-formed address.
        assert_eq!(
            field_of(decode_edited(write, |b| b[28..32].fill(0))),
            "replaced (c)"
        );
        assert_eq!(
            field_of(decode_edited(write, |b| b[24..28].fill(0xFF))),
            "replaced (c)"
        );
        let free = Note::NamelessFree {
            seq: 4,
            ppa: Ppa(8),
            birth_gen: 2,
        };
        assert_eq!(
            field_of(decode_edited(free, |b| b[4..8].fill(0xFF))),
            "ppa (a)"
        );
        assert_eq!(
            field_of(decode_edited(free, |b| b[16] = 0)),
            "birth gen (b)"
        );
        assert_eq!(
            field_of(decode_edited(free, |b| b[20] = 1)),
            "birth gen (b)"
        );
        assert_eq!(field_of(decode_edited(free, |b| b[24] = 1)), "c");
        let migrate = Note::NamelessMigrate {
            seq: 5,
            new_ppa: Ppa(10),
            old: addr,
            data_crc: 1,
            birth_gen: 6,
        };
        assert_eq!(
            field_of(decode_edited(migrate, |b| b[4..8].fill(0xFF))),
            "new ppa (a)"
        );
        assert_eq!(
            field_of(decode_edited(migrate, |b| b[4] = 0x44)),
            "new ppa (a)"
        );
        assert_eq!(
            field_of(decode_edited(migrate, |b| b[16..24].fill(0xFF))),
            "old (b)"
        );
        assert_eq!(
            field_of(decode_edited(migrate, |b| b[20..24].fill(0))),
            "old (b)"
        );
        assert_eq!(
            field_of(decode_edited(migrate, |b| b[28..32].fill(0))),
            "birth gen (c bits 32..64)"
        );
        let ack = Note::NamelessAck {
            seq: 6,
            commit: false,
            old: addr,
        };
        for a in [0u8, 3] {
            assert_eq!(field_of(decode_edited(ack, |b| b[4] = a)), "a");
        }
        assert_eq!(
            field_of(decode_edited(ack, |b| b[16..24].fill(0xFF))),
            "old (b)"
        );
        assert_eq!(field_of(decode_edited(ack, |b| b[24] = 1)), "c");
        // A commit names no address.
        assert_eq!(field_of(decode_edited(ack, |b| b[4] = 2)), "b");
        let staged = Note::InPlaceStaged {
            seq: 7,
            victim: 11,
            scratch: 12,
            gap_gen: 0,
            first_scratch_offset: 0,
            staged_blocks: 0,
        };
        assert_eq!(
            Note::decode(&{
                let mut b = [0; NOTE_BYTES];
                staged.encode(&mut b);
                b
            }),
            Ok(staged)
        );
        assert_eq!(
            field_of(decode_edited(staged, |b| b[16] = 11)),
            "scratch zone (b bits 0..32)"
        );
        let done = Note::InPlaceDone {
            seq: 8,
            victim: 11,
            erase_count: 40,
            pad_blocks: 3,
            gap_fill_blocks: 5,
        };
        assert_eq!(
            field_of(decode_edited(done, |b| b[20] = 1)),
            "erase count (b)"
        );
    }

    #[test]
    fn nameless_md_round_trips_through_notes() {
        for md_bytes in (4usize..=64).step_by(4) {
            let md: Vec<u8> = (0..md_bytes).map(|i| (i * 13 + 1) as u8).collect();
            let notes = nameless_md_notes(&md, 77);
            assert_eq!(notes.len(), md_bytes.div_ceil(20), "{md_bytes}");
            assert!(notes.iter().all(|n| n.seq() == 77 && n.kind() == 26));
            let read = through_bytes(&notes);
            assert_eq!(read, notes);
            let bytes: Vec<[u8; 20]> = read
                .iter()
                .map(|n| match *n {
                    Note::NamelessMd { bytes, .. } => bytes,
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(nameless_md(md_bytes, &bytes), Ok(md.clone()));
            // One note missing or extra; a byte past md_bytes; a bad size.
            assert!(matches!(
                nameless_md(md_bytes, &bytes[1..]),
                Err(FormatError::Length { .. })
            ));
            let mut more = bytes.clone();
            more.push([0; 20]);
            assert!(matches!(
                nameless_md(md_bytes, &more),
                Err(FormatError::Length { .. })
            ));
            if !md_bytes.is_multiple_of(20) {
                let mut past = bytes.clone();
                past.last_mut().unwrap()[19] = 1;
                assert!(matches!(
                    nameless_md(md_bytes, &past),
                    Err(FormatError::Reserved { .. })
                ));
            }
        }
        assert!(nameless_md(6, &[[0; 20]]).is_err());
        assert!(nameless_md(0, &[]).is_err());
    }

    #[test]
    #[should_panic(expected = "nameless md of 3 bytes")]
    fn nameless_md_notes_refuse_a_bad_size() {
        nameless_md_notes(&[1, 2, 3], 1);
    }

    #[test]
    fn every_single_bit_flip_of_a_nameless_log_block_is_detected() {
        let addr = NamelessAddr::new(Ppa(3), 2);
        let mut notes = vec![Note::NamelessWrite {
            seq: 9,
            ppa: Ppa(4),
            data_crc: 1,
            birth_gen: 2,
            replaced: addr,
        }];
        notes.extend(nameless_md_notes(&[0xA5; 32], 9));
        notes.push(Note::NamelessAck {
            seq: 10,
            commit: true,
            old: NamelessAddr::NONE,
        });
        notes.push(Note::InPlaceStaged {
            seq: 11,
            victim: 5,
            scratch: 6,
            gap_gen: 3,
            first_scratch_offset: 0,
            staged_blocks: 40,
        });
        let b = LogBlock::Notes { log_seq: 5, notes }.encode(512);
        for bit in 0..b.len() * 8 {
            let mut f = b.clone();
            f[bit / 8] ^= 1 << (bit % 8);
            assert!(LogBlock::decode(&f).is_err(), "bit {bit} undetected");
        }
    }

    #[test]
    fn unknown_note_kind_and_reserved_bytes_are_refused() {
        let mut b = [0u8; NOTE_BYTES];
        Note::ZoneRetire { seq: 1, zone: 2 }.encode(&mut b);
        let mut unknown = b;
        unknown[0] = 99;
        assert_eq!(
            Note::decode(&unknown),
            Err(FormatError::UnknownNoteKind { kind: 99 })
        );
        let mut reserved = b;
        reserved[2] = 1;
        assert!(matches!(
            Note::decode(&reserved),
            Err(FormatError::Reserved { .. })
        ));
    }

    #[test]
    fn log_magic_spells_zlog() {
        let b = LogBlock::Notes {
            log_seq: 1,
            notes: vec![],
        }
        .encode(512);
        assert_eq!(&b[..4], b"ZLOG");
        assert_eq!(notes_per_block(512), 14);
        assert_eq!(chunk_payload_bytes(4096), 4060);
    }

    #[test]
    fn erased_block_is_reported_as_erased() {
        assert_eq!(
            LogBlock::decode(&[0xFF; 512]),
            Err(FormatError::Erased {
                structure: LOG_BLOCK
            })
        );
        assert_eq!(
            LogBlock::decode(&[0; 1024]),
            Err(FormatError::Erased {
                structure: LOG_BLOCK
            })
        );
        assert!(matches!(
            LogBlock::decode(&[0; 100]),
            Err(FormatError::OutOfRange { .. })
        ));
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let notes = (0..14)
            .map(|i| Note::HostWrite {
                seq: i,
                lba: i * 3,
                ppa: Ppa(i as u32),
                data_crc: 7,
            })
            .collect();
        let b = LogBlock::Notes { log_seq: 77, notes }.encode(512);
        for bit in 0..b.len() * 8 {
            let mut f = b.clone();
            f[bit / 8] ^= 1 << (bit % 8);
            assert!(LogBlock::decode(&f).is_err(), "bit {bit} undetected");
        }
    }

    proptest! {
        #[test]
        fn notes_round_trip(n in arb_note()) {
            let mut b = [0u8; NOTE_BYTES];
            n.encode(&mut b);
            prop_assert_eq!(Note::decode(&b), Ok(n));
        }

        #[test]
        fn snapshot_create_notes_round_trip(seq in any::<u64>(), id in any::<u32>(), parent in any::<u32>(), name in "\\PC{1,40}") {
            let mut end = name.len().min(MAX_SNAPSHOT_NAME_BYTES);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            let name = &name[..end];
            let notes = snapshot_create_notes(seq, id, parent, name);
            let read = through_bytes(&notes);
            prop_assert_eq!(&read, &notes);
            prop_assert_eq!(name_of(&read), Ok(name.to_string()));
        }

        #[test]
        fn arbitrary_note_bytes_never_panic(bytes in vec(any::<u8>(), 0..40)) {
            let _ = Note::decode(&bytes);
        }

        #[test]
        fn nameless_notes_round_trip(n in arb_nameless_note()) {
            let mut b = [0u8; NOTE_BYTES];
            n.encode(&mut b);
            prop_assert_eq!(Note::decode(&b), Ok(n));
        }

        #[test]
        fn arbitrary_nameless_note_fields_never_panic(kind in 24u8..=31, body in any::<[u8; 28]>()) {
            let mut b = [0u8; NOTE_BYTES];
            b[0] = kind;
            b[4..].copy_from_slice(&body);
            if let Ok(n) = Note::decode(&b) {
                // Whatever decodes encodes back to the same bytes.
                let mut again = [0u8; NOTE_BYTES];
                n.encode(&mut again);
                prop_assert_eq!(again, b);
            }
        }

        #[test]
        fn log_blocks_round_trip((bs, block) in arb_log_block()) {
            let b = block.encode(bs);
            prop_assert_eq!(b.len(), bs);
            prop_assert_eq!(LogBlock::decode(&b), Ok(block));
        }

        #[test]
        fn arbitrary_log_bytes_never_panic(bs in arb_block_size(), fill in any::<u8>(), head in vec(any::<u8>(), 0..64)) {
            let mut b = vec![fill; bs];
            b[..head.len()].copy_from_slice(&head);
            let _ = LogBlock::decode(&b);
            // A valid magic, version and CRC over arbitrary fields exercise the field checks.
            put_u32(&mut b, L_MAGIC_OFF, LOG_MAGIC);
            put_u16(&mut b, L_VERSION_OFF, LOG_VERSION);
            seal_crc(&mut b, bs - LOG_TRAILER_BYTES);
            let _ = LogBlock::decode(&b);
        }

        #[test]
        fn log_bit_flips_are_detected((bs, block) in arb_log_block(), bit in any::<usize>()) {
            let mut b = block.encode(bs);
            let bit = bit % (bs * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(LogBlock::decode(&b).is_err());
        }
    }
}
