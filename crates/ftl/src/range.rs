//! Range operations as the host asks for them, their checks, and how they
//! are applied to the mapping state — by the running FTL in steps and by
//! recovery's replay in one go, through the same [`Apply`].
//! Semantics: docs/design.md, "Shared blocks and range operations".

use crate::addr::{Lba, Seq};
use crate::attr::AttrMap;
use crate::error::IoError;
use crate::mapping::{Mapping, SharedFull};

/// What a merge does where more than one source changed a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MergePolicy {
    /// The whole vector fails with [`IoError::MergeConflict`]; nothing changes.
    FailOnConflict,
    /// The first source in the list that changed the block wins.
    FirstWins,
    /// The last source in the list that changed the block wins.
    LastWins,
}

impl MergePolicy {
    /// The code a Merge note stores.
    pub fn code(self) -> u8 {
        match self {
            MergePolicy::FailOnConflict => 1,
            MergePolicy::FirstWins => 2,
            MergePolicy::LastWins => 3,
        }
    }

    pub fn from_code(code: u8) -> Option<MergePolicy> {
        Some(match code {
            1 => MergePolicy::FailOnConflict,
            2 => MergePolicy::FirstWins,
            3 => MergePolicy::LastWins,
            _ => return None,
        })
    }
}

/// A range attribute to set or clear.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attribute {
    /// Refuse writes, trims, moves out, deletes, and clones or merges into it.
    Immutable,
    /// Clear `Immutable`.
    Mutable,
    /// The range's contents do not survive a crash (unmapped by a mount
    /// that does not follow a clean shutdown).
    NonPersistent,
    /// Clear `NonPersistent`.
    Persistent,
}

/// Attribute bits as notes and checkpoints store them.
pub mod attr_bits {
    pub const IMMUTABLE: u8 = 1;
    pub const NON_PERSISTENT: u8 = 2;
    /// Every bit this build knows.
    pub const ALL: u8 = IMMUTABLE | NON_PERSISTENT;
}

impl Attribute {
    /// `(set, clear)` masks.
    pub fn masks(self) -> (u8, u8) {
        match self {
            Attribute::Immutable => (attr_bits::IMMUTABLE, 0),
            Attribute::Mutable => (0, attr_bits::IMMUTABLE),
            Attribute::NonPersistent => (attr_bits::NON_PERSISTENT, 0),
            Attribute::Persistent => (0, attr_bits::NON_PERSISTENT),
        }
    }
}

/// One operation of a vector. Counts are in blocks; ranges are
/// `[lba, lba + block_count)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RangeOp {
    /// `dst` names what `src` names; no data is copied.
    Clone {
        src: Lba,
        dst: Lba,
        block_count: u64,
    },
    /// `dst` names what `src` named; `src` reads as zeros.
    Move {
        src: Lba,
        dst: Lba,
        block_count: u64,
    },
    /// Persistent trim: reads as zeros, also after a crash.
    Delete { lba: Lba, block_count: u64 },
    /// Each block of `dst` takes the block of the source that changed it
    /// (differs from `dst`); `policy` decides where several did.
    Merge {
        sources: Vec<Lba>,
        dst: Lba,
        block_count: u64,
        policy: MergePolicy,
    },
    /// Sets or clears an attribute of the range.
    SetAttribute {
        lba: Lba,
        block_count: u64,
        attribute: Attribute,
    },
}

/// A vector of clones, from `(src, dst, block_count)` triples.
pub fn clones(ranges: &[(Lba, Lba, u64)]) -> Vec<RangeOp> {
    ranges
        .iter()
        .map(|&(src, dst, block_count)| RangeOp::Clone {
            src,
            dst,
            block_count,
        })
        .collect()
}

/// A vector of moves, from `(src, dst, block_count)` triples.
pub fn moves(ranges: &[(Lba, Lba, u64)]) -> Vec<RangeOp> {
    ranges
        .iter()
        .map(|&(src, dst, block_count)| RangeOp::Move {
            src,
            dst,
            block_count,
        })
        .collect()
}

/// A vector of deletes, from `(lba, block_count)` pairs.
pub fn deletes(ranges: &[(Lba, u64)]) -> Vec<RangeOp> {
    ranges
        .iter()
        .map(|&(lba, block_count)| RangeOp::Delete { lba, block_count })
        .collect()
}

/// One merge of `sources` into `dst`.
pub fn merge(sources: &[Lba], dst: Lba, block_count: u64, policy: MergePolicy) -> RangeOp {
    RangeOp::Merge {
        sources: sources.to_vec(),
        dst,
        block_count,
        policy,
    }
}

/// A vector setting or clearing `attribute` on `(lba, block_count)` ranges.
pub fn attributes(ranges: &[(Lba, u64)], attribute: Attribute) -> Vec<RangeOp> {
    ranges
        .iter()
        .map(|&(lba, block_count)| RangeOp::SetAttribute {
            lba,
            block_count,
            attribute,
        })
        .collect()
}

/// Most operations one vector may hold.
pub const MAX_VECTOR_OPS: usize = 256;
/// Most sources one merge may name.
pub const MAX_MERGE_SOURCES: usize = 16;

impl RangeOp {
    /// The ranges the operation changes, as `(lba, block_count)`.
    pub fn writes(&self) -> Ranges<'_> {
        match self {
            RangeOp::Clone {
                dst, block_count, ..
            }
            | RangeOp::Merge {
                dst, block_count, ..
            } => Ranges::of(&[*dst], *block_count),
            RangeOp::Move {
                src,
                dst,
                block_count,
            } => Ranges::of(&[*src, *dst], *block_count),
            RangeOp::Delete { lba, block_count }
            | RangeOp::SetAttribute {
                lba, block_count, ..
            } => Ranges::of(&[*lba], *block_count),
        }
    }

    /// Every range the operation reads or changes.
    pub fn ranges(&self) -> Ranges<'_> {
        match self {
            RangeOp::Clone {
                src,
                dst,
                block_count,
            } => Ranges::of(&[*src, *dst], *block_count),
            RangeOp::Merge {
                sources,
                dst,
                block_count,
                ..
            } => Ranges::of(&[*dst], *block_count).and(sources),
            other => other.writes(),
        }
    }

    /// The ranges whose blocks the operation reads (and so may share).
    pub fn reads(&self) -> Ranges<'_> {
        match self {
            RangeOp::Clone {
                src, block_count, ..
            }
            | RangeOp::Move {
                src, block_count, ..
            } => Ranges::of(&[*src], *block_count),
            RangeOp::Merge { .. } => self.ranges(),
            RangeOp::Delete { block_count, .. } | RangeOp::SetAttribute { block_count, .. } => {
                Ranges::of(&[], *block_count)
            }
        }
    }

    /// The ranges an immutable attribute forbids the operation to touch.
    fn guarded(&self) -> Ranges<'_> {
        match self {
            RangeOp::SetAttribute { block_count, .. } => Ranges::of(&[], *block_count),
            other => other.writes(),
        }
    }

    /// Blocks the operation covers (per range).
    pub fn block_count(&self) -> u64 {
        match self {
            RangeOp::Clone { block_count, .. }
            | RangeOp::Move { block_count, .. }
            | RangeOp::Delete { block_count, .. }
            | RangeOp::Merge { block_count, .. }
            | RangeOp::SetAttribute { block_count, .. } => *block_count,
        }
    }
}

/// An operation's ranges, `(lba, block_count)`, without allocating: up to
/// two fixed start addresses, then a merge's sources.
#[derive(Clone, Debug)]
pub struct Ranges<'a> {
    fixed: [Lba; 2],
    fixed_len: usize,
    pos: usize,
    more: std::slice::Iter<'a, Lba>,
    block_count: u64,
}

impl<'a> Ranges<'a> {
    fn of(starts: &[Lba], block_count: u64) -> Ranges<'a> {
        let mut fixed = [0; 2];
        fixed[..starts.len()].copy_from_slice(starts);
        Ranges {
            fixed,
            fixed_len: starts.len(),
            pos: 0,
            more: [].iter(),
            block_count,
        }
    }

    fn and(mut self, more: &'a [Lba]) -> Ranges<'a> {
        self.more = more.iter();
        self
    }
}

impl Iterator for Ranges<'_> {
    type Item = (Lba, u64);

    fn next(&mut self) -> Option<(Lba, u64)> {
        if self.pos < self.fixed_len {
            self.pos += 1;
            return Some((self.fixed[self.pos - 1], self.block_count));
        }
        self.more.next().map(|&l| (l, self.block_count))
    }
}

fn overlaps((a, n): (Lba, u64), (b, m): (Lba, u64)) -> bool {
    a < b + m && b < a + n
}

/// Checks a vector against the logical size before anything happens:
/// bounds, lengths, overlaps, sizes. The answer to a bad vector.
pub fn validate(ops: &[RangeOp], logical_blocks: u64) -> Result<(), IoError> {
    if ops.is_empty() || ops.len() > MAX_VECTOR_OPS {
        return Err(IoError::BadVector {
            reason: format!(
                "a vector holds 1 to {MAX_VECTOR_OPS} operations, not {}",
                ops.len()
            ),
        });
    }
    for (i, op) in ops.iter().enumerate() {
        let bad = |reason: String| IoError::BadVector {
            reason: format!("operation {i}: {reason}"),
        };
        if op.block_count() == 0 {
            return Err(bad("a range of 0 blocks".into()));
        }
        for (lba, n) in op.ranges() {
            if lba.checked_add(n).is_none_or(|end| end > logical_blocks) {
                return Err(IoError::OutOfRange {
                    lba,
                    block_count: n,
                    logical_blocks,
                });
            }
        }
        match op {
            RangeOp::Clone {
                src,
                dst,
                block_count,
            }
            | RangeOp::Move {
                src,
                dst,
                block_count,
            } if overlaps((*src, *block_count), (*dst, *block_count)) => {
                return Err(bad(format!(
                    "source {src} and destination {dst} of {block_count} blocks overlap"
                )));
            }
            RangeOp::Merge {
                sources,
                dst,
                block_count,
                policy,
            } => {
                if sources.is_empty() || sources.len() > MAX_MERGE_SOURCES {
                    return Err(bad(format!(
                        "a merge takes 1 to {MAX_MERGE_SOURCES} sources, not {}",
                        sources.len()
                    )));
                }
                let all: Vec<(Lba, u64)> = op.ranges().collect();
                for (a, ra) in all.iter().enumerate() {
                    if all[a + 1..].iter().any(|&rb| overlaps(*ra, rb)) {
                        return Err(bad(format!(
                            "merge ranges of {block_count} blocks at {dst} and {sources:?} overlap"
                        )));
                    }
                }
                // A fail-on-conflict merge is judged on the state before the
                // vector: no earlier operation of it may change its ranges.
                let earlier = ops[..i].iter().flat_map(|o| o.writes());
                if *policy == MergePolicy::FailOnConflict
                    && earlier.clone().any(|w| all.iter().any(|&r| overlaps(r, w)))
                {
                    return Err(bad(
                        "a fail-on-conflict merge of ranges an earlier operation of the vector changes"
                            .into(),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks a vector against the attributes, in order (an earlier operation
/// of the vector may set or clear one).
pub fn check_attributes(ops: &[RangeOp], attrs: &AttrMap) -> Result<(), IoError> {
    let changes = ops
        .iter()
        .any(|o| matches!(o, RangeOp::SetAttribute { .. }));
    if !changes {
        // The common case: nothing to simulate, no copy of the table.
        for op in ops {
            for (lba, n) in op.guarded() {
                if let Some(at) = attrs.first_immutable(lba, n) {
                    return Err(IoError::Immutable { lba: at });
                }
            }
        }
        return Ok(());
    }
    let mut attrs = attrs.clone();
    for op in ops {
        for (lba, n) in op.guarded() {
            if let Some(at) = attrs.first_immutable(lba, n) {
                return Err(IoError::Immutable { lba: at });
            }
        }
        if let RangeOp::SetAttribute {
            lba,
            block_count,
            attribute,
        } = op
        {
            let (set, clear) = attribute.masks();
            attrs.change(*lba, *block_count, set, clear).map_err(|_| {
                IoError::AttributeTableFull {
                    max_ranges: attrs.max_ranges(),
                }
            })?;
        }
    }
    Ok(())
}

/// What a merge does at one offset of its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MergeChoice {
    /// No source changed the block.
    Keep,
    /// Take the block of this source LBA.
    CloneFrom(Lba),
    /// The chosen source is unmapped there: unmap the destination.
    Unmap,
    /// Sources disagree and the policy is to fail.
    Conflict,
}

/// The merge's choice at `offset`: a source changed a block when it
/// resolves to another physical block than `dst` (or one is unmapped).
pub fn merge_choice(
    mapping: &Mapping,
    sources: &[Lba],
    dst: Lba,
    offset: u64,
    policy: MergePolicy,
) -> MergeChoice {
    let here = |lba: Lba| mapping.get(lba + offset);
    let base = here(dst);
    let mut chosen: Option<(Lba, Option<crate::addr::Ppa>)> = None;
    for &s in sources {
        let v = here(s);
        if v == base {
            continue;
        }
        match chosen {
            None => chosen = Some((s, v)),
            Some((_, seen)) if seen == v => {}
            Some(_) => match policy {
                MergePolicy::FailOnConflict => return MergeChoice::Conflict,
                MergePolicy::FirstWins => {}
                MergePolicy::LastWins => chosen = Some((s, v)),
            },
        }
    }
    match chosen {
        None => MergeChoice::Keep,
        Some((s, Some(_))) => MergeChoice::CloneFrom(s + offset),
        Some((_, None)) => MergeChoice::Unmap,
    }
}

/// Where an application of a vector is: the operation and the offset in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Apply {
    op: usize,
    offset: u64,
    /// The vector's seq: the seq of every change it makes.
    seq: Seq,
}

impl Apply {
    /// Applies the vector of seq `seq`.
    pub fn new(seq: Seq) -> Apply {
        Apply {
            op: 0,
            offset: 0,
            seq,
        }
    }

    /// Whether every operation is applied.
    pub fn done(&self, ops: &[RangeOp]) -> bool {
        self.op >= ops.len()
    }

    /// Applies up to `budget` blocks of `ops` (unmapped stretches are
    /// skipped a leaf at a time and count little), taking what it spends
    /// from `budget`; returns whether the vector is done. The running FTL
    /// and recovery both apply vectors through this, so they apply them
    /// the same way.
    pub fn step(
        &mut self,
        ops: &[RangeOp],
        mapping: &mut Mapping,
        attrs: &mut AttrMap,
        budget: &mut u64,
    ) -> Result<bool, SharedFull> {
        while *budget > 0 && !self.done(ops) {
            let op = &ops[self.op];
            let n = op.block_count();
            if self.offset >= n {
                self.op += 1;
                self.offset = 0;
                continue;
            }
            let spent = self.apply_some(op, mapping, attrs, *budget)?;
            *budget = budget.saturating_sub(spent.max(1));
        }
        Ok(self.done(ops))
    }

    /// Applies some blocks of `op` from `self.offset`; returns the cost.
    fn apply_some(
        &mut self,
        op: &RangeOp,
        mapping: &mut Mapping,
        attrs: &mut AttrMap,
        budget: u64,
    ) -> Result<u64, SharedFull> {
        let n = op.block_count();
        let j = self.offset;
        match op {
            RangeOp::SetAttribute {
                lba,
                block_count,
                attribute,
            } => {
                let (set, clear) = attribute.masks();
                // Checked before the vector started (`check_attributes`).
                attrs
                    .change(*lba, *block_count, set, clear)
                    .expect("attribute table room checked");
                self.offset = n;
                Ok(1)
            }
            RangeOp::Merge {
                sources,
                dst,
                policy,
                ..
            } => {
                let end = j.saturating_add(budget).min(n);
                for k in j..end {
                    match merge_choice(mapping, sources, *dst, k, *policy) {
                        MergeChoice::Keep => {}
                        MergeChoice::CloneFrom(src) => {
                            mapping.clone_block(src, dst + k, self.seq)?
                        }
                        MergeChoice::Unmap => {
                            mapping.unmap(dst + k, self.seq);
                        }
                        // Fail-on-conflict merges are checked before the
                        // vector, against a state no earlier operation of
                        // it changes (`validate`).
                        MergeChoice::Conflict => {
                            panic!("merge conflict at {} after its check", dst + k)
                        }
                    }
                }
                self.offset = end;
                Ok(end - j)
            }
            RangeOp::Clone {
                src,
                dst,
                block_count,
            }
            | RangeOp::Move {
                src,
                dst,
                block_count,
            } => {
                // Skip to the next offset where either side is mapped.
                let Some(k) = next_mapped_offset(mapping, &[*src, *dst], j, *block_count) else {
                    self.offset = n;
                    return Ok(1);
                };
                let end = k.saturating_add(budget).min(n);
                let moving = matches!(op, RangeOp::Move { .. });
                for i in k..end {
                    if moving {
                        mapping.move_block(src + i, dst + i, self.seq)?;
                    } else {
                        mapping.clone_block(src + i, dst + i, self.seq)?;
                    }
                }
                self.offset = end;
                Ok(end - k + 1)
            }
            RangeOp::Delete { lba, block_count } => {
                let Some(k) = next_mapped_offset(mapping, &[*lba], j, *block_count) else {
                    self.offset = n;
                    return Ok(1);
                };
                let end = k.saturating_add(budget).min(n);
                for i in k..end {
                    mapping.unmap(lba + i, self.seq);
                }
                self.offset = end;
                Ok(end - k + 1)
            }
        }
    }
}

/// The smallest offset in `from..count` at which any of `bases + offset` is
/// mapped.
fn next_mapped_offset(mapping: &Mapping, bases: &[Lba], from: u64, count: u64) -> Option<u64> {
    bases
        .iter()
        .filter_map(|&b| mapping.next_mapped(b + from, b + count).map(|l| l - b))
        .min()
}

/// The direct blocks a vector reads whose versions only their tags record,
/// as `(lba, ppa)`: logged as Pin notes.
pub type Pins = Vec<(Lba, crate::addr::Ppa)>;

/// The notes that log a vector applied with `seq`: the Pin notes, then its
/// operations (ranges longer than a note holds split into several notes),
/// behind a VectorBegin note when there is more than one.
pub fn vector_notes(
    seq: crate::addr::Seq,
    ops: &[RangeOp],
    pins: &[(Lba, crate::addr::Ppa)],
) -> Vec<crate::note::Note> {
    use crate::note::Note;
    const MAX: u64 = u32::MAX as u64;
    let mut body: Vec<Note> = pins
        .iter()
        .map(|&(lba, ppa)| Note::Pin { seq, lba, ppa })
        .collect();
    for op in ops {
        let n = op.block_count();
        let parts = (0..n.div_ceil(MAX)).map(|i| (i * MAX, (n - i * MAX).min(MAX) as u32));
        match op {
            RangeOp::Clone { src, dst, .. } => body.extend(parts.map(|(o, k)| Note::Clone {
                seq,
                src: src + o,
                dst: dst + o,
                block_count: k,
            })),
            RangeOp::Move { src, dst, .. } => body.extend(parts.map(|(o, k)| Note::Move {
                seq,
                src: src + o,
                dst: dst + o,
                block_count: k,
            })),
            RangeOp::Delete { lba, block_count } => body.push(Note::Trim {
                seq,
                lba: *lba,
                block_count: *block_count,
            }),
            RangeOp::Merge {
                sources,
                dst,
                policy,
                ..
            } => {
                for (o, k) in parts {
                    body.push(Note::Merge {
                        seq,
                        dst: dst + o,
                        block_count: k,
                        policy: *policy,
                        source_count: sources.len() as u32,
                    });
                    body.extend(sources.iter().enumerate().map(|(i, s)| Note::MergeSource {
                        seq,
                        lba: s + o,
                        index: i as u32,
                    }));
                }
            }
            RangeOp::SetAttribute {
                lba,
                block_count,
                attribute,
            } => {
                let (set, clear) = attribute.masks();
                body.push(Note::Attr {
                    seq,
                    lba: *lba,
                    block_count: *block_count,
                    set,
                    clear,
                });
            }
        }
    }
    if body.len() > 1 {
        let note_count = u32::try_from(body.len()).expect("a vector's notes fit u32");
        body.insert(0, Note::VectorBegin { seq, note_count });
    }
    body
}

/// The pins and operations a vector's notes log (all but VectorBegin), as
/// [`vector_notes`] wrote them; `Err` names what does not fit together.
pub fn vector_from_notes(notes: &[crate::note::Note]) -> Result<(Pins, Vec<RangeOp>), String> {
    use crate::note::Note;
    let mut pins = Vec::new();
    let mut ops = Vec::new();
    let mut i = 0;
    while i < notes.len() {
        let op = match notes[i] {
            Note::Pin { lba, ppa, .. } => {
                pins.push((lba, ppa));
                i += 1;
                continue;
            }
            Note::Clone {
                src,
                dst,
                block_count,
                ..
            } => RangeOp::Clone {
                src,
                dst,
                block_count: u64::from(block_count),
            },
            Note::Move {
                src,
                dst,
                block_count,
                ..
            } => RangeOp::Move {
                src,
                dst,
                block_count: u64::from(block_count),
            },
            Note::Trim {
                lba, block_count, ..
            } => RangeOp::Delete { lba, block_count },
            Note::Attr {
                lba,
                block_count,
                set,
                clear,
                ..
            } => {
                let attribute = match (set, clear) {
                    (attr_bits::IMMUTABLE, 0) => Attribute::Immutable,
                    (0, attr_bits::IMMUTABLE) => Attribute::Mutable,
                    (attr_bits::NON_PERSISTENT, 0) => Attribute::NonPersistent,
                    (0, attr_bits::NON_PERSISTENT) => Attribute::Persistent,
                    _ => {
                        return Err(format!(
                            "attribute note sets {set:#x} and clears {clear:#x}"
                        ))
                    }
                };
                RangeOp::SetAttribute {
                    lba,
                    block_count,
                    attribute,
                }
            }
            Note::Merge {
                dst,
                block_count,
                policy,
                source_count,
                ..
            } => {
                let k = source_count as usize;
                if k == 0 || k > MAX_MERGE_SOURCES || notes.len() < i + 1 + k {
                    return Err(format!(
                        "merge of {k} sources with {} notes left",
                        notes.len() - i - 1
                    ));
                }
                let mut sources = Vec::with_capacity(k);
                for (n, note) in notes[i + 1..i + 1 + k].iter().enumerate() {
                    match *note {
                        Note::MergeSource { lba, index, .. } if index as usize == n => {
                            sources.push(lba)
                        }
                        other => return Err(format!("merge source {n} is {other:?}")),
                    }
                }
                i += k;
                RangeOp::Merge {
                    sources,
                    dst,
                    block_count: u64::from(block_count),
                    policy,
                }
            }
            other => return Err(format!("{other:?} in a range-operation vector")),
        };
        ops.push(op);
        i += 1;
    }
    Ok((pins, ops))
}
