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
    pub const NAMELESS_FREE: u8 = 27;
}

/// `NamelessZone`'s kind: a zone of nameless writes.
pub const NAMELESS_ZONE_KIND_DATA: u8 = 7;

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
    /// Zone `zone` was opened for nameless data of generation `generation`.
    NamelessZone {
        seq: Seq,
        zone: ZoneId,
        generation: u32,
        kind: u8,
    },
    /// The nameless block at `ppa`, of generation `birth_gen`, was freed.
    NamelessFree { seq: Seq, ppa: Ppa, birth_gen: u32 },
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
            | Note::NamelessFree { seq, .. } => seq,
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
            } => raw(NAMELESS_ZONE, zone, seq, u64::from(generation), u64::from(kind)),
            Note::NamelessFree {
                seq,
                ppa,
                birth_gen,
            } => raw(NAMELESS_FREE, ppa.0, seq, u64::from(birth_gen), 0),
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
            NAMELESS_ZONE => Note::NamelessZone {
                seq: r.seq,
                zone: r.a,
                generation: low32("generation (b)", r.b)?,
                kind: low32("kind (c)", r.c)? as u8,
            },
            NAMELESS_FREE => Note::NamelessFree {
                seq: r.seq,
                ppa: Ppa(r.a),
                birth_gen: low32("birth gen (b)", r.b)?,
            },
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
        assert!(block_size_ok(block_size), "log block size {block_size}");
        let mut b = vec![0u8; block_size];
        put_u32(&mut b, L_MAGIC_OFF, LOG_MAGIC);
        put_u16(&mut b, L_VERSION_OFF, LOG_VERSION);
        put_u64(&mut b, L_LOG_SEQ_OFF, self.log_seq());
        match self {
            LogBlock::Notes { notes, .. } => {
                assert!(
                    notes.len() <= notes_per_block(block_size),
                    "{} notes in a log block",
                    notes.len()
                );
                put_u16(&mut b, L_KIND_OFF, LOG_KIND_NOTES);
                put_u32(
                    &mut b,
                    L_PAYLOAD_BYTES_OFF,
                    (notes.len() * NOTE_BYTES) as u32,
                );
                put_u32(&mut b, L_COUNT_OFF, notes.len() as u32);
                for (i, note) in notes.iter().enumerate() {
                    note.encode(&mut b[LOG_HEADER_BYTES + i * NOTE_BYTES..]);
                }
            }
            LogBlock::CheckpointChunk {
                checkpoint_id,
                index,
                payload,
                ..
            } => {
                assert!(
                    payload.len() <= chunk_payload_bytes(block_size),
                    "chunk payload of {} bytes",
                    payload.len()
                );
                put_u16(&mut b, L_KIND_OFF, LOG_KIND_CHUNK);
                put_u32(&mut b, L_PAYLOAD_BYTES_OFF, payload.len() as u32);
                put_u32(&mut b, L_COUNT_OFF, *index);
                put_u64(&mut b, L_AUX_OFF, *checkpoint_id);
                put_bytes(&mut b, LOG_HEADER_BYTES, payload);
            }
        }
        seal_crc(&mut b, block_size - LOG_TRAILER_BYTES);
        assert_eq!(
            LogBlock::decode(&b).as_ref(),
            Ok(self),
            "log block does not round-trip"
        );
        b
    }

    /// Decodes one whole log block. [`FormatError::Erased`] when the block
    /// is all 0x00 or all 0xFF (the end of the log).
    pub fn decode(bytes: &[u8]) -> Result<LogBlock, FormatError> {
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
        let log_seq = get_u64(bytes, L_LOG_SEQ_OFF);
        let payload_bytes = get_u32(bytes, L_PAYLOAD_BYTES_OFF) as usize;
        let count = get_u32(bytes, L_COUNT_OFF);
        let aux = get_u64(bytes, L_AUX_OFF);
        match get_u16(bytes, L_KIND_OFF) {
            LOG_KIND_NOTES => decode_notes(bytes, log_seq, payload_bytes, count, aux),
            LOG_KIND_CHUNK => decode_chunk(bytes, log_seq, payload_bytes, count, aux),
            kind => Err(FormatError::UnknownLogBlockKind { kind }),
        }
    }
}

fn log_range(field: &'static str, value: u64, rule: &'static str) -> FormatError {
    FormatError::OutOfRange {
        structure: LOG_BLOCK,
        field,
        value,
        rule,
    }
}

fn decode_notes(
    b: &[u8],
    log_seq: u64,
    payload_bytes: usize,
    count: u32,
    aux: u64,
) -> Result<LogBlock, FormatError> {
    zero(LOG_BLOCK, "aux (notes block)", aux)?;
    let count = count as usize;
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

fn decode_chunk(
    b: &[u8],
    log_seq: u64,
    payload_bytes: usize,
    index: u32,
    checkpoint_id: u64,
) -> Result<LogBlock, FormatError> {
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
    Ok(LogBlock::CheckpointChunk {
        log_seq,
        checkpoint_id,
        index,
        payload: b[LOG_HEADER_BYTES..end].to_vec(),
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
