//! The control protocol of `zftl serve`: JSON lines over a Unix socket,
//! one reply line per request line, in order. It carries what NBD cannot:
//! range operations (clone, move, delete, merge, attributes, and vectors
//! of them as one atomic unit), snapshots (create, delete, list, read,
//! the blocks that changed between two, and a revert of the volume to
//! one), writable forks of snapshots (create, delete, list), the FTL's
//! statistics and its attribute ranges. Every field, unit, error kind and limit: `docs/control.md`.
//!
//! This module is the protocol without the socket, so that it can be
//! tested and fuzzed on its own: [`parse_line`] turns one line into a
//! [`Parsed`] request (bounded: nothing it allocates grows past the limits
//! below, whatever the line holds), [`execute`] runs it against a
//! [`Target`] (a [`Driver`], a [`Handle`] or an [`InlineHandle`]), and
//! [`ok_line`] / [`error_line`] render the reply. The `zftl` binary's socket
//! server and its `zftl range` command are built on these; the wire types
//! ([`WireRequest`], [`WireOp`]) are what a client serializes.
//!
//! ```
//! use zftl::control::{parse_line, Command};
//! let p = parse_line(br#"{"id":7,"op":"clone","ranges":[{"src":0,"dst":100,"blocks":8}]}"#)
//!     .unwrap();
//! assert!(matches!(p.command, Command::Range { op: "clone", ref ops } if ops.len() == 1));
//! let e = parse_line(br#"{"id":8,"op":"clone","ranges":[{"lba":0,"blocks":8}]}"#).unwrap_err();
//! assert_eq!(e.error.kind.as_str(), "parse");
//! ```

use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{json, Map, Value};
use zftl_core::addr::Lba;
use zftl_core::fork::Fork;
use zftl_core::history::{Snapshot, SnapshotError, SnapshotId};
use zftl_core::range::{attr_bits, MAX_MERGE_SOURCES, MAX_VECTOR_OPS};
use zftl_core::{
    join_runs, snapshot_data, snapshot_revert_request, Attribute, Backend, Driver, FtlStats,
    IoError, MergePolicy, RangeOp, Request as CoreRequest, MAX_EXTENT_QUERY_BLOCKS,
};

use crate::handle::{Handle, InlineHandle};

/// The protocol's version, in the `ping` reply.
pub const PROTOCOL_VERSION: u32 = 1;
/// The longest request line, in bytes, without its newline. A server
/// answers a longer one with a `too_long` error and closes the connection.
pub const MAX_LINE_BYTES: usize = 1 << 20;
/// The longest string `id`, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Most attribute ranges one `attrs` reply lists (and the default `max`).
pub const MAX_ATTRS_PER_REPLY: u64 = 4096;
/// The longest `error.message`, in bytes (longer ones are cut, with `…`).
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Most bytes of data one `snapshot_read` returns (before base64, which
/// makes 4 characters of 3 bytes); a longer read is refused `too_large`.
pub const MAX_SNAPSHOT_READ_BYTES: usize = 1 << 20;
/// Most runs of changed blocks one `snapshot_diff` reply lists (and the
/// default `max`); `next_lba` in the reply continues the listing.
pub const MAX_DIFF_RUNS_PER_REPLY: u64 = 32768;
/// Blocks a `snapshot_diff` asks the FTL about at a time. A window of
/// this many blocks holds at most half as many runs (runs are apart), so
/// a reply keeps at most [`MAX_DIFF_RUNS_PER_REPLY`] runs more than it
/// returns, whatever `max` is.
pub const DIFF_WINDOW_BLOCKS: u64 = 2 * MAX_DIFF_RUNS_PER_REPLY;
const _: () = assert!(DIFF_WINDOW_BLOCKS <= MAX_EXTENT_QUERY_BLOCKS as u64);
/// The longest reply line a server sends, in bytes: an `attrs` page of
/// [`MAX_ATTRS_PER_REPLY`] ranges, the stats, the snapshot list, a
/// `snapshot_read` of [`MAX_SNAPSHOT_READ_BYTES`] or a `snapshot_diff`
/// page of [`MAX_DIFF_RUNS_PER_REPLY`] runs fit with room to spare.
/// Clients may refuse longer lines.
pub const MAX_REPLY_BYTES: usize = 4 << 20;

// ----- wire types -------------------------------------------------------------

/// A request's `id`: a whole number or a string of at most
/// [`MAX_ID_BYTES`] bytes, echoed in its reply.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Id {
    /// A whole number.
    Number(u64),
    /// A string.
    Text(String),
}

impl Serialize for Id {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Id::Number(n) => s.serialize_u64(*n),
            Id::Text(t) => s.serialize_str(t),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(
                    f,
                    "a whole number from 0 to 2^64-1 or a string of at most {MAX_ID_BYTES} bytes"
                )
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id::Number(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Id, E> {
                u64::try_from(v)
                    .map(Id::Number)
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                if v.len() > MAX_ID_BYTES {
                    return Err(E::invalid_length(v.len(), &self));
                }
                Ok(Id::Text(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// The names of the operations, as `op` spells them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpName {
    /// Answers `ok`: the server is there.
    Ping,
    /// The FTL's statistics (`stats` in the reply).
    Stats,
    /// The attribute ranges, a page at a time.
    Attrs,
    /// Clone ranges (`ranges` of `src`, `dst`, `blocks`).
    Clone,
    /// Move ranges (`ranges` of `src`, `dst`, `blocks`).
    Move,
    /// Delete ranges (`ranges` of `lba`, `blocks`).
    Delete,
    /// Merge `sources` into `dst` (`blocks`, `policy`).
    Merge,
    /// Set or clear `attribute` on `ranges` of `lba`, `blocks`.
    Attr,
    /// Several operations (`ops`) as one atomic unit.
    Vector,
    /// Take a snapshot of the volume named `name`.
    SnapshotCreate,
    /// Delete the snapshot named `name`.
    SnapshotDelete,
    /// The live snapshots and the blocks they keep.
    Snapshots,
    /// Read `blocks` blocks from `lba` as snapshot `name` holds them.
    SnapshotRead,
    /// The runs of blocks that differ between snapshot `since` and
    /// snapshot `until` (absent: the live volume), a page at a time.
    SnapshotDiff,
    /// Make the live volume what snapshot `to` holds, first taking a
    /// snapshot of the state it leaves (`undo`).
    SnapshotRevert,
    /// Create a writable fork named `fork` of snapshot `snapshot`.
    ForkCreate,
    /// Delete the fork named `fork`.
    ForkDelete,
    /// The live forks.
    Forks,
}

impl OpName {
    /// Every operation, for tests and documentation.
    pub const ALL: [OpName; 18] = [
        OpName::Ping,
        OpName::Stats,
        OpName::Attrs,
        OpName::Clone,
        OpName::Move,
        OpName::Delete,
        OpName::Merge,
        OpName::Attr,
        OpName::Vector,
        OpName::SnapshotCreate,
        OpName::SnapshotDelete,
        OpName::Snapshots,
        OpName::SnapshotRead,
        OpName::SnapshotDiff,
        OpName::SnapshotRevert,
        OpName::ForkCreate,
        OpName::ForkDelete,
        OpName::Forks,
    ];

    /// The name as the protocol spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            OpName::Ping => "ping",
            OpName::Stats => "stats",
            OpName::Attrs => "attrs",
            OpName::Clone => "clone",
            OpName::Move => "move",
            OpName::Delete => "delete",
            OpName::Merge => "merge",
            OpName::Attr => "attr",
            OpName::Vector => "vector",
            OpName::SnapshotCreate => "snapshot_create",
            OpName::SnapshotDelete => "snapshot_delete",
            OpName::Snapshots => "snapshots",
            OpName::SnapshotRead => "snapshot_read",
            OpName::SnapshotDiff => "snapshot_diff",
            OpName::SnapshotRevert => "snapshot_revert",
            OpName::ForkCreate => "fork_create",
            OpName::ForkDelete => "fork_delete",
            OpName::Forks => "forks",
        }
    }

    /// The operations a `vector` may hold.
    fn in_vector(self) -> bool {
        matches!(
            self,
            OpName::Clone | OpName::Move | OpName::Delete | OpName::Merge | OpName::Attr
        )
    }
}

/// `op` as sent: a known name, or the (truncated) unknown one, which the
/// conversion answers with `unknown_op` rather than a parse error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpField {
    /// An operation this build knows.
    Known(OpName),
    /// Any other name (answered with `unknown_op`).
    Unknown(String),
}

impl From<OpName> for OpField {
    fn from(op: OpName) -> OpField {
        OpField::Known(op)
    }
}

impl Serialize for OpField {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            OpField::Known(op) => s.serialize_str(op.as_str()),
            OpField::Unknown(name) => s.serialize_str(name),
        }
    }
}

impl<'de> Deserialize<'de> for OpField {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OpField, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = OpField;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an operation name (a string)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<OpField, E> {
                Ok(match OpName::ALL.iter().find(|op| op.as_str() == v) {
                    Some(&op) => OpField::Known(op),
                    None => OpField::Unknown(v.chars().take(64).collect()),
                })
            }
        }
        d.deserialize_str(V)
    }
}

/// A list of at most `N` items as sent; further items are counted, not
/// kept, so a long list costs no memory and is answered with its length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bounded<T, const N: usize> {
    /// The items kept (at most `N`).
    pub items: Vec<T>,
    /// Items in the list as sent (more than `items.len()` when it was longer than `N`).
    pub sent: usize,
}

impl<T, const N: usize> Bounded<T, N> {
    /// Items to send (all kept).
    pub fn new(items: Vec<T>) -> Self {
        let sent = items.len();
        Bounded { items, sent }
    }

    /// The items, or a `bad_vector` error naming `what` when there were
    /// more than `N` of them, or none.
    fn checked(&self, what: &str) -> Result<&[T], ControlError> {
        if self.sent == 0 || self.sent > N {
            return Err(ControlError::new(
                ErrorKind::BadVector,
                format!("{what}: 1 to {N} allowed, {} sent", self.sent),
            ));
        }
        Ok(&self.items)
    }
}

impl<T: Serialize, const N: usize> Serialize for Bounded<T, N> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.items.serialize(s)
    }
}

impl<'de, T: Deserialize<'de>, const N: usize> Deserialize<'de> for Bounded<T, N> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T, const N: usize>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for V<T, N> {
            type Value = Bounded<T, N>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut items = Vec::new();
                let mut sent = 0usize;
                loop {
                    if sent < N {
                        match seq.next_element::<T>()? {
                            Some(t) => items.push(t),
                            None => break,
                        }
                    } else if seq.next_element::<IgnoredAny>()?.is_none() {
                        break;
                    }
                    sent += 1;
                }
                Ok(Bounded { items, sent })
            }
        }
        d.deserialize_seq(V::<T, N>(std::marker::PhantomData))
    }
}

/// One range of a request: `src`, `dst` and `blocks` for clone and move,
/// `lba` and `blocks` for delete and attr. Units: blocks of the volume.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireRange {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Source LBA (clone, move).
    pub src: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Destination LBA.
    pub dst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// First LBA (delete, attr).
    pub lba: Option<u64>,
    /// Length in blocks.
    pub blocks: u64,
}

impl WireRange {
    /// A clone or move range.
    pub fn pair(src: u64, dst: u64, blocks: u64) -> WireRange {
        WireRange {
            src: Some(src),
            dst: Some(dst),
            lba: None,
            blocks,
        }
    }

    /// A delete or attr range.
    pub fn span(lba: u64, blocks: u64) -> WireRange {
        WireRange {
            src: None,
            dst: None,
            lba: Some(lba),
            blocks,
        }
    }
}

/// A merge's conflict policy as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WirePolicy {
    /// `fail`: a conflict fails the request.
    Fail,
    /// `first-wins`: the first source that changed a block wins.
    FirstWins,
    /// `last-wins`: the last source that changed a block wins.
    LastWins,
}

impl From<WirePolicy> for MergePolicy {
    fn from(p: WirePolicy) -> MergePolicy {
        match p {
            WirePolicy::Fail => MergePolicy::FailOnConflict,
            WirePolicy::FirstWins => MergePolicy::FirstWins,
            WirePolicy::LastWins => MergePolicy::LastWins,
        }
    }
}

/// An attribute as sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WireAttribute {
    /// `immutable`: refuse changes.
    Immutable,
    /// `mutable`: clear immutable.
    Mutable,
    /// `non-persistent`: the contents do not survive a crash.
    NonPersistent,
    /// `persistent`: clear non-persistent.
    Persistent,
}

impl From<WireAttribute> for Attribute {
    fn from(a: WireAttribute) -> Attribute {
        match a {
            WireAttribute::Immutable => Attribute::Immutable,
            WireAttribute::Mutable => Attribute::Mutable,
            WireAttribute::NonPersistent => Attribute::NonPersistent,
            WireAttribute::Persistent => Attribute::Persistent,
        }
    }
}

/// Ranges of one operation as sent (at most [`MAX_VECTOR_OPS`]).
pub type WireRanges = Bounded<WireRange, MAX_VECTOR_OPS>;
/// Merge sources as sent (at most [`MAX_MERGE_SOURCES`]).
pub type WireSources = Bounded<u64, MAX_MERGE_SOURCES>;

/// One operation of a `vector`: clone, move, delete, merge or attr, with
/// the fields of that operation (the others absent).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireOp {
    /// The operation's name.
    pub op: OpField,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Ranges (clone, move, delete, attr).
    pub ranges: Option<WireRanges>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Merge sources.
    pub sources: Option<WireSources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Destination LBA.
    pub dst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Length in blocks (merge).
    pub blocks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Merge conflict policy.
    pub policy: Option<WirePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The attribute to set or clear (attr).
    pub attribute: Option<WireAttribute>,
}

impl WireOp {
    fn empty(op: OpName) -> WireOp {
        WireOp {
            op: op.into(),
            ranges: None,
            sources: None,
            dst: None,
            blocks: None,
            policy: None,
            attribute: None,
        }
    }

    /// `clone` or `move` of `(src, dst, blocks)` ranges.
    pub fn pairs(op: OpName, ranges: &[(u64, u64, u64)]) -> WireOp {
        WireOp {
            ranges: Some(Bounded::new(
                ranges
                    .iter()
                    .map(|&(s, d, n)| WireRange::pair(s, d, n))
                    .collect(),
            )),
            ..WireOp::empty(op)
        }
    }

    /// `delete` of `(lba, blocks)` ranges.
    pub fn delete(ranges: &[(u64, u64)]) -> WireOp {
        WireOp {
            ranges: Some(spans(ranges)),
            ..WireOp::empty(OpName::Delete)
        }
    }

    /// `merge` of `sources` into `dst`.
    pub fn merge(sources: &[u64], dst: u64, blocks: u64, policy: WirePolicy) -> WireOp {
        WireOp {
            sources: Some(Bounded::new(sources.to_vec())),
            dst: Some(dst),
            blocks: Some(blocks),
            policy: Some(policy),
            ..WireOp::empty(OpName::Merge)
        }
    }

    /// `attr` setting or clearing `attribute` on `(lba, blocks)` ranges.
    pub fn attr(attribute: WireAttribute, ranges: &[(u64, u64)]) -> WireOp {
        WireOp {
            ranges: Some(spans(ranges)),
            attribute: Some(attribute),
            ..WireOp::empty(OpName::Attr)
        }
    }
}

fn spans(ranges: &[(u64, u64)]) -> WireRanges {
    Bounded::new(ranges.iter().map(|&(l, n)| WireRange::span(l, n)).collect())
}

/// One request line as sent: an [`Id`], the `op`, and that operation's
/// fields. See `docs/control.md`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The request's id, echoed in the reply.
    pub id: Option<Id>,
    /// The operation's name.
    pub op: OpField,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Ranges (clone, move, delete, attr).
    pub ranges: Option<WireRanges>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Merge sources.
    pub sources: Option<WireSources>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Destination LBA.
    pub dst: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Length in blocks (merge).
    pub blocks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Merge conflict policy.
    pub policy: Option<WirePolicy>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The attribute to set or clear (attr).
    pub attribute: Option<WireAttribute>,
    /// `vector`: its operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<Bounded<WireOp, MAX_VECTOR_OPS>>,
    /// `attrs`: list the ranges that end after this block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u64>,
    /// `attrs`: list at most this many ranges; `snapshot_diff`: at most
    /// this many runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u64>,
    /// The snapshot's name (`snapshot_create`, `snapshot_delete`,
    /// `snapshot_read`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `snapshot_read`: the first LBA to read; `snapshot_diff`: the first
    /// LBA to compare.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lba: Option<u64>,
    /// `snapshot_diff`: the name of one snapshot compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// `snapshot_diff`: the name of the other (absent: the live volume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// `snapshot_revert`: the name of the snapshot to revert to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// `snapshot_revert`: the name of the undo snapshot (absent: `undo-ID`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undo: Option<String>,
    /// `fork_create`: the name of the snapshot to fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// `fork_create`, `fork_delete`: the fork's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork: Option<String>,
}

impl WireRequest {
    /// A request of `op` with no fields.
    pub fn bare(id: Option<Id>, op: OpName) -> WireRequest {
        WireRequest {
            id,
            op: op.into(),
            ranges: None,
            sources: None,
            dst: None,
            blocks: None,
            policy: None,
            attribute: None,
            ops: None,
            from: None,
            max: None,
            name: None,
            lba: None,
            since: None,
            until: None,
            to: None,
            undo: None,
            snapshot: None,
            fork: None,
        }
    }

    /// The request that runs `op` alone.
    pub fn single(id: Option<Id>, op: WireOp) -> WireRequest {
        let WireOp {
            op,
            ranges,
            sources,
            dst,
            blocks,
            policy,
            attribute,
        } = op;
        WireRequest {
            id,
            op,
            ranges,
            sources,
            dst,
            blocks,
            policy,
            attribute,
            ops: None,
            from: None,
            max: None,
            name: None,
            lba: None,
            since: None,
            until: None,
            to: None,
            undo: None,
            snapshot: None,
            fork: None,
        }
    }

    /// A `vector` of `ops`.
    pub fn vector(id: Option<Id>, ops: Vec<WireOp>) -> WireRequest {
        WireRequest {
            ops: Some(Bounded::new(ops)),
            ..WireRequest::bare(id, OpName::Vector)
        }
    }

    /// An `attrs` request.
    pub fn attrs(id: Option<Id>, from: Option<u64>, max: Option<u64>) -> WireRequest {
        WireRequest {
            from,
            max,
            ..WireRequest::bare(id, OpName::Attrs)
        }
    }

    /// A `snapshot_create` (`create`) or `snapshot_delete` of snapshot `name`.
    pub fn snapshot(id: Option<Id>, op: OpName, name: &str) -> WireRequest {
        WireRequest {
            name: Some(name.to_string()),
            ..WireRequest::bare(id, op)
        }
    }

    /// A `snapshot_read` of `blocks` blocks from `lba` of snapshot `name`.
    pub fn snapshot_read(id: Option<Id>, name: &str, lba: u64, blocks: u64) -> WireRequest {
        WireRequest {
            name: Some(name.to_string()),
            lba: Some(lba),
            blocks: Some(blocks),
            ..WireRequest::bare(id, OpName::SnapshotRead)
        }
    }

    /// A `snapshot_diff` of the blocks that differ between snapshot
    /// `since` and `until` (`None`: the live volume), in the window of
    /// `blocks` blocks from `lba` (`None`: from block 0, to the end of the
    /// volume), at most `max` runs.
    pub fn snapshot_diff(
        id: Option<Id>,
        since: &str,
        until: Option<&str>,
        lba: Option<u64>,
        blocks: Option<u64>,
        max: Option<u64>,
    ) -> WireRequest {
        WireRequest {
            since: Some(since.to_string()),
            until: until.map(str::to_string),
            lba,
            blocks,
            max,
            ..WireRequest::bare(id, OpName::SnapshotDiff)
        }
    }

    /// A `snapshot_revert` of the live volume to snapshot `to`, its undo
    /// snapshot named `undo` (`None`: `undo-ID`).
    pub fn snapshot_revert(id: Option<Id>, to: &str, undo: Option<&str>) -> WireRequest {
        WireRequest {
            to: Some(to.to_string()),
            undo: undo.map(str::to_string),
            ..WireRequest::bare(id, OpName::SnapshotRevert)
        }
    }

    /// A `fork_create` of a fork named `fork` of snapshot `snapshot`.
    pub fn fork_create(id: Option<Id>, snapshot: &str, fork: &str) -> WireRequest {
        WireRequest {
            snapshot: Some(snapshot.to_string()),
            fork: Some(fork.to_string()),
            ..WireRequest::bare(id, OpName::ForkCreate)
        }
    }

    /// A `fork_delete` of the fork named `fork`.
    pub fn fork_delete(id: Option<Id>, fork: &str) -> WireRequest {
        WireRequest {
            fork: Some(fork.to_string()),
            ..WireRequest::bare(id, OpName::ForkDelete)
        }
    }

    /// The request as one line, without its newline.
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("a request serializes")
    }

    /// The operation's own fields, as a vector item would carry them.
    fn as_op(&self) -> WireOp {
        WireOp {
            op: self.op.clone(),
            ranges: self.ranges.clone(),
            sources: self.sources.clone(),
            dst: self.dst,
            blocks: self.blocks,
            policy: self.policy,
            attribute: self.attribute,
        }
    }
}

// ----- errors -----------------------------------------------------------------

/// What went wrong, as the reply's `error.kind` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The line is not a request: not JSON, not an object, a field missing,
    /// unknown or of the wrong type, fields that do not fit the `op`.
    Parse,
    /// `op` names no operation this server knows.
    UnknownOp,
    /// The line is longer than [`MAX_LINE_BYTES`]; the connection is closed.
    TooLong,
    /// The server (or the FTL's queue) is full: too many connections, or
    /// too many requests in the core. Try again later.
    Busy,
    /// The server is shutting down; the connection is closed.
    ShuttingDown,
    /// A range lies outside the volume.
    OutOfRange,
    /// A request exceeds a size limit of the volume.
    TooLarge,
    /// A data buffer of the wrong size.
    BufferSize,
    /// The media is full.
    NoSpace,
    /// A media or device error (checksum, misdirected block, device error).
    Io,
    /// The volume (or the server) is read-only.
    ReadOnly,
    /// A range is immutable.
    Immutable,
    /// The vector breaks a rule (overlap, empty range, too many operations).
    BadVector,
    /// A fail-on-conflict merge met a block more than one source changed.
    MergeConflict,
    /// The shared-block table is full.
    SharingFull,
    /// The attribute table is full.
    AttributeTableFull,
    /// The device is gone.
    DeviceGone,
    /// Snapshots hold the space a write needs.
    SnapshotSpace,
    /// A snapshot request was refused (no such snapshot, name taken or
    /// malformed or starting with `@`, too many snapshots, a volume that
    /// cannot take them).
    Snapshot,
    /// A fork request was refused (no such fork, name taken or malformed,
    /// too many forks, a window point as its base, no room for its map).
    Fork,
}

impl ErrorKind {
    /// Every kind, for tests and documentation.
    pub const ALL: [ErrorKind; 20] = [
        ErrorKind::Parse,
        ErrorKind::UnknownOp,
        ErrorKind::TooLong,
        ErrorKind::Busy,
        ErrorKind::ShuttingDown,
        ErrorKind::OutOfRange,
        ErrorKind::TooLarge,
        ErrorKind::BufferSize,
        ErrorKind::NoSpace,
        ErrorKind::Io,
        ErrorKind::ReadOnly,
        ErrorKind::Immutable,
        ErrorKind::BadVector,
        ErrorKind::MergeConflict,
        ErrorKind::SharingFull,
        ErrorKind::AttributeTableFull,
        ErrorKind::DeviceGone,
        ErrorKind::SnapshotSpace,
        ErrorKind::Snapshot,
        ErrorKind::Fork,
    ];

    /// The name as the protocol spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Parse => "parse",
            ErrorKind::UnknownOp => "unknown_op",
            ErrorKind::TooLong => "too_long",
            ErrorKind::Busy => "busy",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::OutOfRange => "out_of_range",
            ErrorKind::TooLarge => "too_large",
            ErrorKind::BufferSize => "buffer_size",
            ErrorKind::NoSpace => "no_space",
            ErrorKind::Io => "io",
            ErrorKind::ReadOnly => "read_only",
            ErrorKind::Immutable => "immutable",
            ErrorKind::BadVector => "bad_vector",
            ErrorKind::MergeConflict => "merge_conflict",
            ErrorKind::SharingFull => "sharing_full",
            ErrorKind::SnapshotSpace => "snapshot_space",
            ErrorKind::Snapshot => "snapshot",
            ErrorKind::Fork => "fork",
            ErrorKind::AttributeTableFull => "attribute_table_full",
            ErrorKind::DeviceGone => "device_gone",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error reply's body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// One line for a person.
    pub message: String,
    /// The block the error is about, when it names one.
    pub lba: Option<Lba>,
}

impl ControlError {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ControlError {
        ControlError {
            kind,
            message: message.into(),
            lba: None,
        }
    }

    fn parse(message: impl Into<String>) -> ControlError {
        ControlError::new(ErrorKind::Parse, message)
    }
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind)
    }
}

impl std::error::Error for ControlError {}

impl From<&IoError> for ControlError {
    fn from(e: &IoError) -> ControlError {
        let (kind, lba) = match e {
            IoError::OutOfRange { lba, .. } => (ErrorKind::OutOfRange, Some(*lba)),
            IoError::TooLarge { .. } => (ErrorKind::TooLarge, None),
            IoError::BufferSize { .. } => (ErrorKind::BufferSize, None),
            IoError::NoSpace => (ErrorKind::NoSpace, None),
            IoError::Busy => (ErrorKind::Busy, None),
            IoError::Corrupt { lba, .. }
            | IoError::Misdirected { lba, .. }
            | IoError::Device { lba, .. } => (ErrorKind::Io, Some(*lba)),
            IoError::ReadOnly => (ErrorKind::ReadOnly, None),
            IoError::Immutable { lba } => (ErrorKind::Immutable, Some(*lba)),
            IoError::BadVector { .. } => (ErrorKind::BadVector, None),
            IoError::MergeConflict { lba } => (ErrorKind::MergeConflict, Some(*lba)),
            IoError::SharingFull { .. } => (ErrorKind::SharingFull, None),
            IoError::AttributeTableFull { .. } => (ErrorKind::AttributeTableFull, None),
            IoError::DeviceGone => (ErrorKind::DeviceGone, None),
            IoError::SnapshotSpace => (ErrorKind::SnapshotSpace, None),
            IoError::Snapshot(_) => (ErrorKind::Snapshot, None),
            IoError::Fork(_) => (ErrorKind::Fork, None),
            // The channel sends no request of the physical segment, which
            // is an embedding API only.
            IoError::Nameless(_) => (ErrorKind::Io, None),
        };
        ControlError {
            kind,
            message: e.to_string(),
            lba,
        }
    }
}

impl From<IoError> for ControlError {
    fn from(e: IoError) -> ControlError {
        ControlError::from(&e)
    }
}

// ----- parsing ----------------------------------------------------------------

/// A request, checked and converted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Answers `ok`: the server is there.
    Ping,
    /// The FTL's statistics (`stats` in the reply).
    Stats,
    /// List the attribute ranges that end after `from`, at most `max`.
    Attrs {
        /// The first LBA to list from.
        from: Lba,
        /// At most this many ranges.
        max: u64,
    },
    /// A vector of range operations, one atomic unit; `op` is the request's
    /// `op` (`vector` for a mixed one).
    Range {
        /// The operation's name, for the reply.
        op: &'static str,
        /// The vector to apply.
        ops: Vec<RangeOp>,
    },
    /// Take a snapshot named `name`.
    SnapshotCreate {
        /// Its name.
        name: String,
    },
    /// Delete the snapshot named `name`.
    SnapshotDelete {
        /// Its name.
        name: String,
    },
    /// List the live snapshots.
    Snapshots,
    /// Read `blocks` blocks from `lba` as snapshot `name` holds them.
    SnapshotRead {
        /// The snapshot's name.
        name: String,
        /// The first LBA.
        lba: Lba,
        /// How many blocks (at least 1).
        blocks: u64,
    },
    /// List the runs of blocks that differ between snapshot `since` and
    /// snapshot `until` (`None`: the live volume), from `lba` to the end of
    /// the window, at most `max`.
    SnapshotDiff {
        /// One snapshot's name.
        since: String,
        /// The other's, or `None` for the live volume.
        until: Option<String>,
        /// The first LBA to compare.
        lba: Lba,
        /// How many blocks (at least 1); `None`: to the end of the volume.
        blocks: Option<u64>,
        /// At most this many runs (1 to [`MAX_DIFF_RUNS_PER_REPLY`]).
        max: u64,
    },
    /// Make the live volume what snapshot `to` holds, first taking a
    /// snapshot named `undo` (`None`: `undo-ID`) of the state it leaves.
    SnapshotRevert {
        /// The name of the snapshot to revert to.
        to: String,
        /// The undo snapshot's name.
        undo: Option<String>,
    },
    /// Create a writable fork named `fork` of the snapshot named `snapshot`.
    ForkCreate {
        /// The snapshot's name.
        snapshot: String,
        /// The fork's name.
        fork: String,
    },
    /// Delete the fork named `fork`.
    ForkDelete {
        /// The fork's name.
        fork: String,
    },
    /// List the live forks.
    Forks,
}

impl Command {
    /// Whether the command changes the volume (refused by a read-only
    /// server): range operations, snapshot creates, deletes and reverts,
    /// fork creates and deletes.
    pub fn writes(&self) -> bool {
        matches!(
            self,
            Command::Range { .. }
                | Command::SnapshotCreate { .. }
                | Command::SnapshotDelete { .. }
                | Command::SnapshotRevert { .. }
                | Command::ForkCreate { .. }
                | Command::ForkDelete { .. }
        )
    }
}

/// A parsed request line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// The request's id, echoed in the reply.
    pub id: Option<Id>,
    /// What to do.
    pub command: Command,
}

/// A line that is not a valid request: its error reply, with the line's
/// `id` when that could be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The request's id, echoed in the reply.
    pub id: Option<Id>,
    /// Why it was refused.
    pub error: ControlError,
}

/// Reads one request line (without its newline; a trailing `\r` is
/// ignored). Never panics; allocates at most a bounded multiple of the
/// limits, whatever the line holds.
pub fn parse_line(line: &[u8]) -> Result<Parsed, Rejected> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > MAX_LINE_BYTES {
        return Err(Rejected {
            id: None,
            error: ControlError::new(
                ErrorKind::TooLong,
                format!(
                    "request line of {} bytes; at most {MAX_LINE_BYTES}",
                    line.len()
                ),
            ),
        });
    }
    let wire: WireRequest = match serde_json::from_slice(line) {
        Ok(w) => w,
        Err(e) => {
            return Err(Rejected {
                id: probe_id(line),
                error: ControlError::parse(format!("not a valid request: {e}")),
            })
        }
    };
    let id = wire.id.clone();
    match convert(&wire) {
        Ok(command) => Ok(Parsed { id, command }),
        Err(error) => Err(Rejected { id, error }),
    }
}

/// The `id` of a line that does not parse as a request, if it has a
/// readable one (other fields are skipped without being kept).
fn probe_id(line: &[u8]) -> Option<Id> {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(default)]
        id: Option<Id>,
    }
    serde_json::from_slice::<Probe>(line).ok()?.id
}

/// Checks a request's fields against its `op` and builds its command.
pub fn convert(wire: &WireRequest) -> Result<Command, ControlError> {
    let op = match &wire.op {
        OpField::Known(op) => *op,
        OpField::Unknown(name) => return Err(unknown_op(name)),
    };
    let extra = |name: &str, present: bool| -> Result<(), ControlError> {
        if present {
            Err(ControlError::parse(format!(
                "`{}` takes no `{name}` field",
                op.as_str()
            )))
        } else {
            Ok(())
        }
    };
    if op != OpName::Vector {
        extra("ops", wire.ops.is_some())?;
    }
    if op != OpName::Attrs {
        extra("from", wire.from.is_some())?;
    }
    if op != OpName::Attrs && op != OpName::SnapshotDiff {
        extra("max", wire.max.is_some())?;
    }
    if op != OpName::SnapshotDiff {
        extra("since", wire.since.is_some())?;
        extra("until", wire.until.is_some())?;
    }
    if op != OpName::SnapshotRevert {
        extra("to", wire.to.is_some())?;
        extra("undo", wire.undo.is_some())?;
    }
    if op != OpName::ForkCreate {
        extra("snapshot", wire.snapshot.is_some())?;
    }
    if op != OpName::ForkCreate && op != OpName::ForkDelete {
        extra("fork", wire.fork.is_some())?;
    }
    let named = matches!(
        op,
        OpName::SnapshotCreate | OpName::SnapshotDelete | OpName::SnapshotRead
    );
    if !named {
        extra("name", wire.name.is_some())?;
    }
    if op != OpName::SnapshotRead && op != OpName::SnapshotDiff {
        extra("lba", wire.lba.is_some())?;
    }
    match op {
        OpName::Ping
        | OpName::Stats
        | OpName::Attrs
        | OpName::Vector
        | OpName::SnapshotCreate
        | OpName::SnapshotDelete
        | OpName::Snapshots
        | OpName::SnapshotRead
        | OpName::SnapshotDiff
        | OpName::SnapshotRevert
        | OpName::ForkCreate
        | OpName::ForkDelete
        | OpName::Forks => {
            let own = wire.as_op();
            for (name, present) in own.fields_present() {
                let takes_blocks = matches!(op, OpName::SnapshotRead | OpName::SnapshotDiff);
                let allowed = takes_blocks && name == "blocks";
                extra(name, present && !allowed)?;
            }
        }
        _ => {}
    }
    let need = |field: &str| ControlError::parse(format!("`{}` needs `{field}`", op.as_str()));
    match op {
        OpName::Ping => Ok(Command::Ping),
        OpName::Stats => Ok(Command::Stats),
        OpName::SnapshotCreate => Ok(Command::SnapshotCreate {
            name: wire.name.clone().ok_or_else(|| need("name"))?,
        }),
        OpName::SnapshotDelete => Ok(Command::SnapshotDelete {
            name: wire.name.clone().ok_or_else(|| need("name"))?,
        }),
        OpName::Snapshots => Ok(Command::Snapshots),
        OpName::SnapshotRevert => Ok(Command::SnapshotRevert {
            to: wire.to.clone().ok_or_else(|| need("to"))?,
            undo: wire.undo.clone(),
        }),
        OpName::ForkCreate => Ok(Command::ForkCreate {
            snapshot: wire.snapshot.clone().ok_or_else(|| need("snapshot"))?,
            fork: wire.fork.clone().ok_or_else(|| need("fork"))?,
        }),
        OpName::ForkDelete => Ok(Command::ForkDelete {
            fork: wire.fork.clone().ok_or_else(|| need("fork"))?,
        }),
        OpName::Forks => Ok(Command::Forks),
        OpName::SnapshotRead => {
            let name = wire.name.clone().ok_or_else(|| need("name"))?;
            let lba = wire.lba.ok_or_else(|| need("lba"))?;
            let blocks = wire.blocks.ok_or_else(|| need("blocks"))?;
            if blocks == 0 {
                return Err(ControlError::parse("`blocks` is at least 1"));
            }
            Ok(Command::SnapshotRead { name, lba, blocks })
        }
        OpName::SnapshotDiff => {
            let since = wire.since.clone().ok_or_else(|| need("since"))?;
            if wire.blocks == Some(0) {
                return Err(ControlError::parse("`blocks` is at least 1"));
            }
            let max = wire.max.unwrap_or(MAX_DIFF_RUNS_PER_REPLY);
            if max == 0 || max > MAX_DIFF_RUNS_PER_REPLY {
                return Err(ControlError::parse(format!(
                    "`max` is 1 to {MAX_DIFF_RUNS_PER_REPLY}, not {max}"
                )));
            }
            Ok(Command::SnapshotDiff {
                since,
                until: wire.until.clone(),
                lba: wire.lba.unwrap_or(0),
                blocks: wire.blocks,
                max,
            })
        }
        OpName::Attrs => {
            let max = wire.max.unwrap_or(MAX_ATTRS_PER_REPLY);
            if max == 0 || max > MAX_ATTRS_PER_REPLY {
                return Err(ControlError::parse(format!(
                    "`max` is 1 to {MAX_ATTRS_PER_REPLY}, not {max}"
                )));
            }
            Ok(Command::Attrs {
                from: wire.from.unwrap_or(0),
                max,
            })
        }
        OpName::Vector => {
            let items = wire
                .ops
                .as_ref()
                .ok_or_else(|| ControlError::parse("`vector` needs `ops`"))?
                .checked("operations in a vector")?;
            let mut ops = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let at = |e: ControlError| ControlError {
                    message: format!("operation {i}: {}", e.message),
                    ..e
                };
                let name = match &item.op {
                    OpField::Known(op) if op.in_vector() => *op,
                    OpField::Known(op) => {
                        return Err(at(ControlError::parse(format!(
                            "a vector holds clone, move, delete, merge and attr, not `{}`",
                            op.as_str()
                        ))))
                    }
                    OpField::Unknown(name) => return Err(at(unknown_op(name))),
                };
                range_ops(name, item, &mut ops).map_err(at)?;
                if ops.len() > MAX_VECTOR_OPS {
                    return Err(too_many_ops(ops.len()));
                }
            }
            Ok(Command::Range { op: "vector", ops })
        }
        range => {
            let mut ops = Vec::new();
            range_ops(range, &wire.as_op(), &mut ops)?;
            Ok(Command::Range {
                op: range.as_str(),
                ops,
            })
        }
    }
}

fn unknown_op(name: &str) -> ControlError {
    let known: Vec<&str> = OpName::ALL.iter().map(|o| o.as_str()).collect();
    ControlError::new(
        ErrorKind::UnknownOp,
        format!("unknown op `{name}`; known: {}", known.join(", ")),
    )
}

fn too_many_ops(n: usize) -> ControlError {
    ControlError::new(
        ErrorKind::BadVector,
        format!("a vector holds 1 to {MAX_VECTOR_OPS} range operations, not {n} or more"),
    )
}

impl WireOp {
    /// Which of the operation fields are present, by name.
    fn fields_present(&self) -> [(&'static str, bool); 6] {
        [
            ("ranges", self.ranges.is_some()),
            ("sources", self.sources.is_some()),
            ("dst", self.dst.is_some()),
            ("blocks", self.blocks.is_some()),
            ("policy", self.policy.is_some()),
            ("attribute", self.attribute.is_some()),
        ]
    }
}

/// Appends the range operations `item` (of operation `op`) stands for.
fn range_ops(op: OpName, item: &WireOp, out: &mut Vec<RangeOp>) -> Result<(), ControlError> {
    let allowed: &[&str] = match op {
        OpName::Clone | OpName::Move | OpName::Delete => &["ranges"],
        OpName::Merge => &["sources", "dst", "blocks", "policy"],
        OpName::Attr => &["ranges", "attribute"],
        _ => unreachable!("not a range operation: {op:?}"),
    };
    for (name, present) in item.fields_present() {
        if present && !allowed.contains(&name) {
            return Err(ControlError::parse(format!(
                "`{}` takes no `{name}` field",
                op.as_str()
            )));
        }
    }
    let need = |name: &str| ControlError::parse(format!("`{}` needs `{name}`", op.as_str()));
    let ranges = || -> Result<&[WireRange], ControlError> {
        item.ranges
            .as_ref()
            .ok_or_else(|| need("ranges"))?
            .checked("ranges")
    };
    match op {
        OpName::Clone | OpName::Move => {
            for (i, r) in ranges()?.iter().enumerate() {
                let (Some(src), Some(dst), None) = (r.src, r.dst, r.lba) else {
                    return Err(ControlError::parse(format!(
                        "range {i}: a `{}` range is {{\"src\", \"dst\", \"blocks\"}}",
                        op.as_str()
                    )));
                };
                let block_count = r.blocks;
                out.push(if op == OpName::Clone {
                    RangeOp::Clone {
                        src,
                        dst,
                        block_count,
                    }
                } else {
                    RangeOp::Move {
                        src,
                        dst,
                        block_count,
                    }
                });
            }
        }
        OpName::Delete | OpName::Attr => {
            let attribute = match op {
                OpName::Attr => Some(item.attribute.ok_or_else(|| need("attribute"))?),
                _ => None,
            };
            for (i, r) in ranges()?.iter().enumerate() {
                let (None, None, Some(lba)) = (r.src, r.dst, r.lba) else {
                    return Err(ControlError::parse(format!(
                        "range {i}: a `{}` range is {{\"lba\", \"blocks\"}}",
                        op.as_str()
                    )));
                };
                let block_count = r.blocks;
                out.push(match attribute {
                    Some(a) => RangeOp::SetAttribute {
                        lba,
                        block_count,
                        attribute: a.into(),
                    },
                    None => RangeOp::Delete { lba, block_count },
                });
            }
        }
        OpName::Merge => {
            let sources = item
                .sources
                .as_ref()
                .ok_or_else(|| need("sources"))?
                .checked("merge sources")?;
            out.push(RangeOp::Merge {
                sources: sources.to_vec(),
                dst: item.dst.ok_or_else(|| need("dst"))?,
                block_count: item.blocks.ok_or_else(|| need("blocks"))?,
                policy: item.policy.ok_or_else(|| need("policy"))?.into(),
            });
        }
        _ => unreachable!(),
    }
    if out.len() > MAX_VECTOR_OPS {
        return Err(too_many_ops(out.len()));
    }
    Ok(())
}

// ----- replies ----------------------------------------------------------------

/// A successful reply line (without its newline): `id`, `"ok": true`, then
/// `body`'s fields.
pub fn ok_line(id: Option<&Id>, body: Map<String, Value>) -> String {
    // `id` and `ok` first, for people reading the lines.
    let mut line = format!("{{\"id\":{},\"ok\":true", id_value(id));
    for (k, v) in body.into_iter().filter(|(k, _)| k != "id" && k != "ok") {
        line.push(',');
        line.push_str(&Value::String(k).to_string());
        line.push(':');
        line.push_str(&v.to_string());
    }
    line.push('}');
    line
}

/// An error reply line (without its newline).
pub fn error_line(id: Option<&Id>, error: &ControlError) -> String {
    let mut e = Map::new();
    e.insert("kind".into(), error.kind.as_str().into());
    e.insert("message".into(), bounded_message(&error.message).into());
    if let Some(lba) = error.lba {
        e.insert("lba".into(), lba.into());
    }
    format!(
        "{{\"id\":{},\"ok\":false,\"error\":{}}}",
        id_value(id),
        Value::Object(e)
    )
}

/// `message` cut to [`MAX_MESSAGE_BYTES`] (on a character boundary).
fn bounded_message(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message.to_string();
    }
    let mut end = MAX_MESSAGE_BYTES - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

/// The reply line to a request's outcome.
pub fn reply_line(id: Option<&Id>, outcome: &Result<Map<String, Value>, ControlError>) -> String {
    match outcome {
        Ok(body) => ok_line(id, body.clone()),
        Err(e) => error_line(id, e),
    }
}

fn id_value(id: Option<&Id>) -> Value {
    match id {
        None => Value::Null,
        Some(Id::Number(n)) => (*n).into(),
        Some(Id::Text(t)) => t.clone().into(),
    }
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => unreachable!("not an object: {other}"),
    }
}

/// The body of a range operation's reply: its `op`, the operations in
/// the vector and the blocks they cover (summed over the ranges).
pub fn range_body(op: &str, ops: &[RangeOp]) -> Map<String, Value> {
    let blocks = ops
        .iter()
        .fold(0u64, |sum, o| sum.saturating_add(o.block_count()));
    object(json!({"op": op, "operations": ops.len(), "blocks": blocks}))
}

/// The body of the `ping` reply.
pub fn ping_body(block_size: usize, logical_blocks: u64) -> Map<String, Value> {
    object(json!({
        "op": "ping",
        "protocol": PROTOCOL_VERSION,
        "block_size": block_size,
        "logical_blocks": logical_blocks,
    }))
}

/// The body of the `stats` reply.
pub fn stats_body(stats: &FtlStats, block_size: usize, logical_blocks: u64) -> Map<String, Value> {
    object(json!({
        "op": "stats",
        "block_size": block_size,
        "logical_blocks": logical_blocks,
        "stats": stats,
    }))
}

/// The names of attribute `bits`, as `attr` spells them (unknown bits as
/// `bit-N`).
pub fn attribute_names(bits: u8) -> Vec<String> {
    let mut names = Vec::new();
    if bits & attr_bits::IMMUTABLE != 0 {
        names.push("immutable".to_string());
    }
    if bits & attr_bits::NON_PERSISTENT != 0 {
        names.push("non-persistent".to_string());
    }
    for bit in 0..8 {
        if bits & !attr_bits::ALL & (1 << bit) != 0 {
            names.push(format!("bit-{bit}"));
        }
    }
    names
}

/// The body of the `attrs` reply: the ranges of `all` (in order, as
/// `Ftl::attributes` lists them) that end after `from`, at most `max`, and
/// `next`, the `from` that lists the rest (null when none are left).
pub fn attrs_body(all: &[(Lba, u64, u8)], from: Lba, max: u64) -> Map<String, Value> {
    let first = all.partition_point(|&(lba, n, _)| lba.saturating_add(n) <= from);
    let rest = &all[first..];
    let take = rest.len().min(usize::try_from(max).unwrap_or(usize::MAX));
    let ranges: Vec<Value> = rest[..take]
        .iter()
        .map(|&(lba, blocks, bits)| {
            json!({"lba": lba, "blocks": blocks, "attributes": attribute_names(bits)})
        })
        .collect();
    let next = rest.get(take).map(|&(lba, _, _)| lba);
    object(json!({"op": "attrs", "ranges": ranges, "next": next}))
}

/// A snapshot as the replies show it: `id`, `name`, `kind` (`"point"`
/// for a point of the protection window, which the FTL takes and drops
/// itself, `"snapshot"` for a user's), `epoch`, `create_seq`, `wall_ns`
/// (ns since the Unix epoch, 0 when none was recorded) and `created`,
/// that time in RFC 3339 UTC (null when none was recorded).
pub fn snapshot_value(s: &Snapshot) -> Value {
    json!({
        "id": s.id,
        "name": s.name,
        "kind": if s.is_point() { "point" } else { "snapshot" },
        "epoch": s.epoch,
        "create_seq": s.create_seq,
        "wall_ns": s.wall_ns,
        "created": (s.wall_ns != 0).then(|| rfc3339_utc(s.wall_ns)),
    })
}

/// The body of the `snapshot_create` reply: the snapshot taken.
pub fn snapshot_create_body(taken: &Snapshot) -> Map<String, Value> {
    object(json!({"op": "snapshot_create", "snapshot": snapshot_value(taken)}))
}

/// The body of the `snapshot_revert` reply: `to`, the snapshot the
/// volume was reverted to, and `undo`, the snapshot taken of the state it
/// left (a revert to it undoes this one).
pub fn snapshot_revert_body(to: &Snapshot, undo: &Snapshot) -> Map<String, Value> {
    object(json!({
        "op": "snapshot_revert",
        "to": snapshot_value(to),
        "undo": snapshot_value(undo),
    }))
}

/// The body of the `snapshot_delete` reply.
pub fn snapshot_delete_body(name: &str) -> Map<String, Value> {
    object(json!({"op": "snapshot_delete", "name": name}))
}

/// The body of the `snapshot_read` reply: `data` (the blocks read) in
/// base64.
pub fn snapshot_read_body(name: &str, lba: Lba, blocks: u64, data: &[u8]) -> Map<String, Value> {
    object(json!({
        "op": "snapshot_read",
        "name": name,
        "lba": lba,
        "blocks": blocks,
        "data": encode_data(data),
    }))
}

/// The body of a `snapshot_diff` reply: the snapshots compared (`until`
/// `None`: the live volume, `null` in the reply), the block size, the
/// window (`lba`, `blocks`), the `runs` of changed blocks in it (in order,
/// as `{"lba", "blocks"}`), the blocks they cover, and `next_lba`: where
/// the listing goes on (`null` when the window is done).
pub fn snapshot_diff_body(
    since: &Snapshot,
    until: Option<&Snapshot>,
    block_size: usize,
    window: (Lba, u64),
    runs: &[(Lba, u64)],
    next_lba: Option<Lba>,
) -> Map<String, Value> {
    let changed_blocks = runs.iter().fold(0u64, |sum, r| sum.saturating_add(r.1));
    let runs: Vec<Value> = runs
        .iter()
        .map(|&(lba, blocks)| json!({"lba": lba, "blocks": blocks}))
        .collect();
    object(json!({
        "op": "snapshot_diff",
        "since": snapshot_value(since),
        "until": until.map(snapshot_value),
        "block_size": block_size,
        "lba": window.0,
        "blocks": window.1,
        "runs": runs,
        "changed_blocks": changed_blocks,
        "next_lba": next_lba,
    }))
}

/// The body of the `snapshots` reply: the live snapshots, oldest first,
/// and from `stats` the versions they keep and the memory of their books.
pub fn snapshots_body(list: &[Snapshot], stats: &FtlStats) -> Map<String, Value> {
    let snapshots: Vec<Value> = list.iter().map(snapshot_value).collect();
    object(json!({
        "op": "snapshots",
        "snapshots": snapshots,
        "snapshot_versions": stats.snapshot_versions,
        "snapshot_memory_bytes": stats.snapshot_memory_bytes,
    }))
}

/// A fork as the replies show it: `id`, `name`, `base` (the snapshot it
/// started from, as `{"id", "name"}`; `name` is null if that snapshot is
/// not among `snapshots`), `slot`, `lba_offset` (where its block 0 lies in
/// the map's logical space), `block_count`, `create_seq`, `wall_ns` (ns
/// since the Unix epoch, 0 when none was recorded) and `created`, that
/// time in RFC 3339 UTC (null when none was recorded).
pub fn fork_value(f: &Fork, snapshots: &[Snapshot]) -> Value {
    let base_name = snapshots
        .iter()
        .find(|s| s.id == f.base)
        .map(|s| s.name.clone());
    json!({
        "id": f.id,
        "name": f.name,
        "base": {"id": f.base, "name": base_name},
        "slot": f.slot,
        "lba_offset": f.lba_offset,
        "block_count": f.block_count,
        "create_seq": f.create_seq,
        "wall_ns": f.wall_ns,
        "created": (f.wall_ns != 0).then(|| rfc3339_utc(f.wall_ns)),
    })
}

/// The body of the `fork_create` reply: the fork created.
pub fn fork_create_body(created: &Fork, snapshots: &[Snapshot]) -> Map<String, Value> {
    object(json!({"op": "fork_create", "fork": fork_value(created, snapshots)}))
}

/// The body of the `fork_delete` reply.
pub fn fork_delete_body(name: &str) -> Map<String, Value> {
    object(json!({"op": "fork_delete", "name": name}))
}

/// The body of the `forks` reply: the live forks in id order.
pub fn forks_body(list: &[Fork], snapshots: &[Snapshot]) -> Map<String, Value> {
    let mut list: Vec<&Fork> = list.iter().collect();
    list.sort_by_key(|f| f.id);
    let forks: Vec<Value> = list.iter().map(|f| fork_value(f, snapshots)).collect();
    object(json!({"op": "forks", "forks": forks}))
}

pub use zftl_core::history::rfc3339_utc;

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// `data` in base64 (RFC 4648, standard alphabet, padded): the `data` of a
/// `snapshot_read` reply.
pub fn encode_data(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Reads base64 as [`encode_data`] writes it; `Err` says what is wrong.
pub fn decode_data(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return Err(format!(
            "base64 of {} characters (not a multiple of 4)",
            bytes.len()
        ));
    }
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (q, quad) in bytes.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && q + 1 != quads) {
            return Err(format!("base64 padding inside the text (group {q})"));
        }
        let mut n = 0u32;
        for &c in &quad[..4 - pad] {
            let v = value(c).ok_or_else(|| format!("not a base64 character: {:?}", c as char))?;
            n = (n << 6) | v;
        }
        n <<= 6 * pad as u32;
        let group = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&group[..3 - pad]);
    }
    Ok(out)
}

// ----- execution --------------------------------------------------------------

/// What a request runs against: the FTL through some driver or handle.
pub trait Target {
    /// Bytes per block.
    fn block_size(&self) -> usize;
    /// The volume's size in blocks.
    fn logical_blocks(&self) -> u64;
    /// Applies a vector of range operations; returns once it is durable.
    fn range_ops(&mut self, ops: Vec<RangeOp>) -> Result<(), IoError>;
    /// The FTL's statistics.
    fn stats(&mut self) -> Result<FtlStats, IoError>;
    /// The attribute ranges, `(lba, block_count, bits)`, in order.
    fn attributes(&mut self) -> Result<Vec<(Lba, u64, u8)>, IoError>;
    /// Takes a snapshot named `name`; returns it once durable.
    fn snapshot_create(&mut self, name: &str) -> Result<Snapshot, IoError>;
    /// Deletes the snapshot named `name`; returns once durable.
    fn snapshot_delete(&mut self, name: &str) -> Result<(), IoError>;
    /// The live snapshots, oldest first.
    fn snapshots(&mut self) -> Result<Vec<Snapshot>, IoError>;
    /// Makes the live volume what snapshot `to` holds, first taking a
    /// snapshot named `undo` (`None`: `undo-ID`) of the state it leaves;
    /// returns that undo snapshot once the revert is durable
    /// (`Request::SnapshotRevert`).
    fn snapshot_revert(&mut self, to: SnapshotId, undo: Option<&str>) -> Result<Snapshot, IoError>;
    /// Reads `block_count` blocks from `lba` as snapshot `snapshot` holds them.
    fn read_snapshot(
        &mut self,
        snapshot: SnapshotId,
        lba: Lba,
        block_count: u32,
    ) -> Result<Vec<u8>, IoError>;
    /// The runs `(lba, block_count)` of the range whose contents differ
    /// between snapshot `since` and `until` (`None`: the live volume); at
    /// most `MAX_EXTENT_QUERY_BLOCKS` blocks (`Request::Changed`).
    fn changed(
        &mut self,
        since: SnapshotId,
        until: Option<SnapshotId>,
        lba: Lba,
        block_count: u32,
    ) -> Result<Vec<(Lba, u64)>, IoError>;
    /// Creates a writable fork named `fork` of the snapshot named
    /// `snapshot`; returns it once durable.
    fn fork_create(&mut self, snapshot: &str, fork: &str) -> Result<Fork, IoError>;
    /// Deletes the fork named `name`; returns once durable.
    fn fork_delete(&mut self, name: &str) -> Result<(), IoError>;
    /// The live forks.
    fn forks(&mut self) -> Result<Vec<Fork>, IoError>;
}

/// Runs `command` against `target`; the reply body, or the error.
pub fn execute<T: Target + ?Sized>(
    target: &mut T,
    command: Command,
) -> Result<Map<String, Value>, ControlError> {
    match command {
        Command::Ping => Ok(ping_body(target.block_size(), target.logical_blocks())),
        Command::Stats => {
            let stats = target.stats()?;
            Ok(stats_body(
                &stats,
                target.block_size(),
                target.logical_blocks(),
            ))
        }
        Command::Attrs { from, max } => Ok(attrs_body(&target.attributes()?, from, max)),
        Command::Range { op, ops } => {
            let body = range_body(op, &ops);
            target.range_ops(ops)?;
            Ok(body)
        }
        Command::SnapshotCreate { name } => {
            let taken = target.snapshot_create(&name)?;
            Ok(snapshot_create_body(&taken))
        }
        Command::SnapshotDelete { name } => {
            target.snapshot_delete(&name)?;
            Ok(snapshot_delete_body(&name))
        }
        Command::Snapshots => {
            let list = target.snapshots()?;
            let stats = target.stats()?;
            Ok(snapshots_body(&list, &stats))
        }
        Command::SnapshotRead { name, lba, blocks } => {
            let block_size = target.block_size().max(1) as u64;
            let max_blocks = MAX_SNAPSHOT_READ_BYTES as u64 / block_size;
            if blocks > max_blocks {
                return Err(ControlError::new(
                    ErrorKind::TooLarge,
                    format!(
                        "a snapshot_read returns at most {MAX_SNAPSHOT_READ_BYTES} bytes \
                         ({max_blocks} blocks of {block_size} bytes); {blocks} blocks asked"
                    ),
                ));
            }
            let list = target.snapshots()?;
            let Some(snapshot) = list.iter().find(|s| s.name == name) else {
                return Err(IoError::Snapshot(SnapshotError::NoSuchName(name)).into());
            };
            let count = u32::try_from(blocks).expect("at most MAX_SNAPSHOT_READ_BYTES");
            let data = target.read_snapshot(snapshot.id, lba, count)?;
            Ok(snapshot_read_body(&name, lba, blocks, &data))
        }
        Command::SnapshotDiff {
            since,
            until,
            lba,
            blocks,
            max,
        } => snapshot_diff(target, &since, until.as_deref(), lba, blocks, max),
        Command::SnapshotRevert { to, undo } => {
            let list = target.snapshots()?;
            let Some(snapshot) = list.into_iter().find(|s| s.name == to) else {
                return Err(IoError::Snapshot(SnapshotError::NoSuchName(to)).into());
            };
            let undone = target
                .snapshot_revert(snapshot.id, undo.as_deref())
                .map_err(|e| match e {
                    // Deleted between the lookup and the revert.
                    IoError::Snapshot(SnapshotError::NoSuchId(id)) if id == snapshot.id => {
                        IoError::Snapshot(SnapshotError::NoSuchName(to.clone()))
                    }
                    other => other,
                })?;
            Ok(snapshot_revert_body(&snapshot, &undone))
        }
        Command::ForkCreate { snapshot, fork } => {
            let created = target.fork_create(&snapshot, &fork)?;
            Ok(fork_create_body(&created, &target.snapshots()?))
        }
        Command::ForkDelete { fork } => {
            target.fork_delete(&fork)?;
            Ok(fork_delete_body(&fork))
        }
        Command::Forks => {
            let list = target.forks()?;
            Ok(forks_body(&list, &target.snapshots()?))
        }
    }
}

/// Runs a `snapshot_diff`: the window from `lba` (`blocks`, or to the end
/// of the volume) asked of the FTL [`DIFF_WINDOW_BLOCKS`] at a time, runs
/// joined across those queries, until `max` runs are listed.
fn snapshot_diff<T: Target + ?Sized>(
    target: &mut T,
    since: &str,
    until: Option<&str>,
    lba: Lba,
    blocks: Option<u64>,
    max: u64,
) -> Result<Map<String, Value>, ControlError> {
    let logical_blocks = target.logical_blocks();
    let end = match blocks {
        Some(n) => lba.checked_add(n).filter(|&end| end <= logical_blocks),
        None => Some(logical_blocks).filter(|_| lba < logical_blocks),
    };
    let Some(end) = end else {
        return Err(IoError::OutOfRange {
            lba,
            // Without `blocks`, `lba` itself lies outside.
            block_count: blocks.unwrap_or(1),
            logical_blocks,
        }
        .into());
    };
    let list = target.snapshots()?;
    let named = |name: &str| {
        list.iter()
            .find(|s| s.name == name)
            .ok_or_else(|| IoError::Snapshot(SnapshotError::NoSuchName(name.to_string())))
    };
    let a = named(since)?;
    let b = until.map(named).transpose()?;
    // A delete between the lookup and a query: name the snapshot as asked.
    let gone = |e: IoError| match e {
        IoError::Snapshot(SnapshotError::NoSuchId(id)) => {
            let name = if id == a.id {
                since
            } else {
                until.unwrap_or(since)
            };
            IoError::Snapshot(SnapshotError::NoSuchName(name.to_string()))
        }
        other => other,
    };
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut runs: Vec<(Lba, u64)> = Vec::new();
    let mut at = lba;
    let mut next_lba = None;
    while at < end {
        if runs.len() >= max {
            next_lba = Some(at);
            break;
        }
        let n = (end - at).min(DIFF_WINDOW_BLOCKS);
        let count = u32::try_from(n).expect("a window fits a query");
        let found = target
            .changed(a.id, b.map(|s| s.id), at, count)
            .map_err(gone)?;
        join_runs(&mut runs, found);
        at += n;
        if runs.len() > max {
            // Runs are apart: the first one dropped starts the next page.
            next_lba = Some(runs[max].0);
            runs.truncate(max);
            break;
        }
    }
    Ok(snapshot_diff_body(
        a,
        b,
        target.block_size(),
        (lba, end - lba),
        &runs,
        next_lba,
    ))
}

impl<B: Backend> Target for Driver<B> {
    fn block_size(&self) -> usize {
        Driver::block_size(self)
    }
    fn logical_blocks(&self) -> u64 {
        Driver::logical_blocks(self)
    }
    fn range_ops(&mut self, ops: Vec<RangeOp>) -> Result<(), IoError> {
        self.call(CoreRequest::Range { ops }).map(drop)
    }
    fn stats(&mut self) -> Result<FtlStats, IoError> {
        Ok(Driver::stats(self))
    }
    fn attributes(&mut self) -> Result<Vec<(Lba, u64, u8)>, IoError> {
        Ok(self.ftl().attributes())
    }
    fn snapshot_create(&mut self, name: &str) -> Result<Snapshot, IoError> {
        Driver::snapshot_create(self, name)
    }
    fn snapshot_delete(&mut self, name: &str) -> Result<(), IoError> {
        Driver::snapshot_delete(self, name)
    }
    fn snapshots(&mut self) -> Result<Vec<Snapshot>, IoError> {
        Ok(Driver::snapshots(self))
    }
    fn snapshot_revert(&mut self, to: SnapshotId, undo: Option<&str>) -> Result<Snapshot, IoError> {
        self.call(snapshot_revert_request(to, undo))
            .map(snapshot_data)
    }
    fn read_snapshot(
        &mut self,
        snapshot: SnapshotId,
        lba: Lba,
        block_count: u32,
    ) -> Result<Vec<u8>, IoError> {
        Driver::read_snapshot(self, snapshot, lba, block_count)
    }
    fn changed(
        &mut self,
        since: SnapshotId,
        until: Option<SnapshotId>,
        lba: Lba,
        block_count: u32,
    ) -> Result<Vec<(Lba, u64)>, IoError> {
        Driver::changed(self, since, until, lba, block_count)
    }
    fn fork_create(&mut self, snapshot: &str, fork: &str) -> Result<Fork, IoError> {
        Driver::fork_create(self, snapshot, fork)
    }
    fn fork_delete(&mut self, name: &str) -> Result<(), IoError> {
        Driver::fork_delete(self, name)
    }
    fn forks(&mut self) -> Result<Vec<Fork>, IoError> {
        Ok(Driver::forks(self))
    }
}

/// [`Target`] for a handle: each call passes to the handle's own method
/// (a revert by id goes through its `call`).
macro_rules! handle_target {
    ($handle:ident, $($bound:tt)+) => {
        impl<B: $($bound)+> Target for $handle<B> {
            fn block_size(&self) -> usize {
                $handle::block_size(self)
            }
            fn logical_blocks(&self) -> u64 {
                $handle::logical_blocks(self)
            }
            fn range_ops(&mut self, ops: Vec<RangeOp>) -> Result<(), IoError> {
                $handle::range_ops(self, ops)
            }
            fn stats(&mut self) -> Result<FtlStats, IoError> {
                $handle::stats(self)
            }
            fn attributes(&mut self) -> Result<Vec<(Lba, u64, u8)>, IoError> {
                $handle::attributes(self)
            }
            fn snapshot_create(&mut self, name: &str) -> Result<Snapshot, IoError> {
                $handle::snapshot_create(self, name)
            }
            fn snapshot_delete(&mut self, name: &str) -> Result<(), IoError> {
                $handle::snapshot_delete(self, name)
            }
            fn snapshots(&mut self) -> Result<Vec<Snapshot>, IoError> {
                $handle::snapshots(self)
            }
            fn snapshot_revert(
                &mut self,
                to: SnapshotId,
                undo: Option<&str>,
            ) -> Result<Snapshot, IoError> {
                self.call(snapshot_revert_request(to, undo)).map(snapshot_data)
            }
            fn read_snapshot(
                &mut self,
                snapshot: SnapshotId,
                lba: Lba,
                block_count: u32,
            ) -> Result<Vec<u8>, IoError> {
                $handle::read_snapshot(self, snapshot, lba, block_count)
            }
            fn changed(
                &mut self,
                since: SnapshotId,
                until: Option<SnapshotId>,
                lba: Lba,
                block_count: u32,
            ) -> Result<Vec<(Lba, u64)>, IoError> {
                $handle::changed(self, since, until, lba, block_count)
            }
            fn fork_create(&mut self, snapshot: &str, fork: &str) -> Result<Fork, IoError> {
                $handle::fork_create(self, snapshot, fork)
            }
            fn fork_delete(&mut self, name: &str) -> Result<(), IoError> {
                $handle::fork_delete(self, name)
            }
            fn forks(&mut self) -> Result<Vec<Fork>, IoError> {
                $handle::forks(self)
            }
        }
    };
}

handle_target!(Handle, Backend + Send + 'static);
handle_target!(InlineHandle, Backend);

// ----- the client's side ------------------------------------------------------

/// A reply line, read by a client.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedReply {
    /// The request's id, echoed in the reply.
    pub id: Option<Id>,
    /// The fields after `id` and `ok`, or the error.
    pub result: Result<Map<String, Value>, ReplyError>,
}

/// An error reply as a client reads it (`kind` may be one this build does
/// not know, from a newer server).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyError {
    /// The error kind, as the protocol spells it.
    pub kind: String,
    /// A one-line message.
    pub message: String,
    /// The block the error names, if any.
    pub lba: Option<Lba>,
}

impl fmt::Display for ReplyError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{} ({})", self.message, self.kind)
    }
}

/// Reads one reply line; `Err` says why it is not one.
pub fn parse_reply(line: &[u8]) -> Result<ParsedReply, String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(mut m) = v else {
        return Err("not a JSON object".into());
    };
    let id = match m.remove("id") {
        None | Some(Value::Null) => None,
        Some(v) => Some(Id::deserialize(v).map_err(|e| format!("bad id: {e}"))?),
    };
    let ok = match m.remove("ok") {
        Some(Value::Bool(ok)) => ok,
        _ => return Err("no boolean `ok`".into()),
    };
    if ok {
        return Ok(ParsedReply { id, result: Ok(m) });
    }
    let e = m.get("error").ok_or("an error reply without `error`")?;
    let text = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_string);
    Ok(ParsedReply {
        id,
        result: Err(ReplyError {
            kind: text("kind").ok_or("an error without `kind`")?,
            message: text("message").unwrap_or_default(),
            lba: e.get("lba").and_then(Value::as_u64),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Parsed {
        parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e:?}"))
    }

    fn err(line: &str) -> Rejected {
        match parse_line(line.as_bytes()) {
            Ok(p) => panic!("{line} parsed as {p:?}"),
            Err(r) => r,
        }
    }

    #[test]
    fn every_op_parses() {
        let p = ok(r#"{"id":1,"op":"ping"}"#);
        assert_eq!(p.id, Some(Id::Number(1)));
        assert_eq!(p.command, Command::Ping);
        assert_eq!(ok(r#"{"op":"stats","id":"s"}"#).command, Command::Stats);
        assert_eq!(ok(r#"{"op":"stats"}"#).id, None);
        assert_eq!(
            ok(r#"{"op":"attrs"}"#).command,
            Command::Attrs {
                from: 0,
                max: MAX_ATTRS_PER_REPLY
            }
        );
        assert_eq!(
            ok(r#"{"op":"attrs","from":5,"max":2}"#).command,
            Command::Attrs { from: 5, max: 2 }
        );
        let c = ok(
            r#"{"op":"clone","ranges":[{"src":1,"dst":10,"blocks":2},{"src":3,"dst":20,"blocks":1}]}"#,
        );
        assert_eq!(
            c.command,
            Command::Range {
                op: "clone",
                ops: zftl_core::range::clones(&[(1, 10, 2), (3, 20, 1)])
            }
        );
        let m = ok(r#"{"op":"move","ranges":[{"dst":10,"blocks":2,"src":1}]}"#);
        assert_eq!(
            m.command,
            Command::Range {
                op: "move",
                ops: zftl_core::range::moves(&[(1, 10, 2)])
            }
        );
        let d = ok(r#"{"op":"delete","ranges":[{"lba":4,"blocks":4}]}"#);
        assert_eq!(
            d.command,
            Command::Range {
                op: "delete",
                ops: zftl_core::range::deletes(&[(4, 4)])
            }
        );
        let g = ok(r#"{"op":"merge","sources":[100,200],"dst":0,"blocks":8,"policy":"last-wins"}"#);
        assert_eq!(
            g.command,
            Command::Range {
                op: "merge",
                ops: vec![zftl_core::range::merge(
                    &[100, 200],
                    0,
                    8,
                    MergePolicy::LastWins
                )]
            }
        );
        for (name, a) in [
            ("immutable", Attribute::Immutable),
            ("mutable", Attribute::Mutable),
            ("non-persistent", Attribute::NonPersistent),
            ("persistent", Attribute::Persistent),
        ] {
            let line = format!(
                r#"{{"op":"attr","attribute":"{name}","ranges":[{{"lba":7,"blocks":3}}]}}"#
            );
            assert_eq!(
                ok(&line).command,
                Command::Range {
                    op: "attr",
                    ops: zftl_core::range::attributes(&[(7, 3)], a)
                }
            );
        }
        let v = ok(concat!(
            r#"{"id":"tx","op":"vector","ops":["#,
            r#"{"op":"move","ranges":[{"src":100,"dst":0,"blocks":4}]},"#,
            r#"{"op":"delete","ranges":[{"lba":200,"blocks":1},{"lba":300,"blocks":1}]},"#,
            r#"{"op":"attr","attribute":"immutable","ranges":[{"lba":0,"blocks":4}]},"#,
            r#"{"op":"merge","sources":[8],"dst":16,"blocks":1,"policy":"fail"}]}"#
        ));
        assert_eq!(v.id, Some(Id::Text("tx".into())));
        let Command::Range { op: "vector", ops } = v.command else {
            panic!("{v:?}")
        };
        assert_eq!(ops.len(), 5);
        assert!(matches!(ops[4], RangeOp::Merge { .. }));
    }

    #[test]
    fn wire_requests_round_trip() {
        let reqs = [
            WireRequest::single(
                Some(Id::Number(3)),
                WireOp::pairs(OpName::Clone, &[(1, 2, 3)]),
            ),
            WireRequest::single(None, WireOp::delete(&[(5, 6)])),
            WireRequest::single(None, WireOp::merge(&[1, 2], 3, 4, WirePolicy::FirstWins)),
            WireRequest::single(None, WireOp::attr(WireAttribute::NonPersistent, &[(9, 9)])),
            WireRequest::vector(
                Some(Id::Text("v".into())),
                vec![
                    WireOp::pairs(OpName::Move, &[(1, 2, 1)]),
                    WireOp::delete(&[(1, 1)]),
                ],
            ),
            WireRequest::attrs(None, Some(3), Some(10)),
            WireRequest::bare(None, OpName::Ping),
        ];
        for r in reqs {
            let line = r.to_line();
            let back: WireRequest = serde_json::from_str(&line).unwrap();
            assert_eq!(back, r, "{line}");
            let parsed = ok(&line);
            assert_eq!(parsed.command, convert(&r).unwrap());
        }
    }

    #[test]
    fn malformed_requests_get_typed_errors_with_their_id() {
        let cases: &[(&str, ErrorKind, Option<Id>)] = &[
            ("", ErrorKind::Parse, None),
            ("not json", ErrorKind::Parse, None),
            ("[1,2]", ErrorKind::Parse, None),
            ("{}", ErrorKind::Parse, None),
            (r#"{"id":5}"#, ErrorKind::Parse, Some(Id::Number(5))),
            (
                r#"{"id":5,"op":"frobnicate"}"#,
                ErrorKind::UnknownOp,
                Some(Id::Number(5)),
            ),
            (r#"{"id":5,"op":7}"#, ErrorKind::Parse, Some(Id::Number(5))),
            (r#"{"id":-1,"op":"ping"}"#, ErrorKind::Parse, None),
            (r#"{"id":1.5,"op":"ping"}"#, ErrorKind::Parse, None),
            (r#"{"id":[1],"op":"ping"}"#, ErrorKind::Parse, None),
            (
                r#"{"id":2,"op":"ping","extra":1}"#,
                ErrorKind::Parse,
                Some(Id::Number(2)),
            ),
            (
                r#"{"id":2,"op":"ping","op":"ping"}"#,
                ErrorKind::Parse,
                Some(Id::Number(2)),
            ),
            (
                r#"{"id":2,"op":"ping","ranges":[]}"#,
                ErrorKind::Parse,
                Some(Id::Number(2)),
            ),
            (
                r#"{"id":3,"op":"clone"}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"clone","ranges":[]}"#,
                ErrorKind::BadVector,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"clone","ranges":[{"lba":1,"blocks":1}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"clone","ranges":[{"src":1,"dst":2}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"clone","ranges":[{"src":-1,"dst":2,"blocks":1}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"clone","ranges":[{"src":1e3,"dst":2,"blocks":1}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"clone","ranges":[{"src":18446744073709551616,"dst":2,"blocks":1}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"clone","ranges":[{"src":"1","dst":2,"blocks":1}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"clone","ranges":{"src":1}}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"delete","ranges":[{"src":1,"dst":2,"blocks":1}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":3,"op":"delete","ranges":[{"lba":1,"blocks":1}],"policy":"fail"}"#,
                ErrorKind::Parse,
                Some(Id::Number(3)),
            ),
            (
                r#"{"id":4,"op":"merge","sources":[1],"dst":2,"blocks":1}"#,
                ErrorKind::Parse,
                Some(Id::Number(4)),
            ),
            (
                r#"{"id":4,"op":"merge","sources":[1],"dst":2,"blocks":1,"policy":"random"}"#,
                ErrorKind::Parse,
                Some(Id::Number(4)),
            ),
            (
                r#"{"id":4,"op":"merge","sources":[],"dst":2,"blocks":1,"policy":"fail"}"#,
                ErrorKind::BadVector,
                Some(Id::Number(4)),
            ),
            (
                r#"{"id":4,"op":"attr","ranges":[{"lba":1,"blocks":1}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(4)),
            ),
            (
                r#"{"id":4,"op":"attr","attribute":"frozen","ranges":[{"lba":1,"blocks":1}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(4)),
            ),
            (
                r#"{"id":5,"op":"vector"}"#,
                ErrorKind::Parse,
                Some(Id::Number(5)),
            ),
            (
                r#"{"id":5,"op":"vector","ops":[]}"#,
                ErrorKind::BadVector,
                Some(Id::Number(5)),
            ),
            (
                r#"{"id":5,"op":"vector","ops":[{"op":"ping"}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(5)),
            ),
            (
                r#"{"id":5,"op":"vector","ops":[{"op":"vector","ops":[]}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(5)),
            ),
            (
                r#"{"id":5,"op":"vector","ops":[{"op":"zap"}]}"#,
                ErrorKind::UnknownOp,
                Some(Id::Number(5)),
            ),
            (
                r#"{"id":5,"op":"vector","ops":[{"op":"delete","ranges":[{"lba":1,"blocks":1}],"id":2}]}"#,
                ErrorKind::Parse,
                Some(Id::Number(5)),
            ),
            (
                r#"{"id":6,"op":"attrs","max":0}"#,
                ErrorKind::Parse,
                Some(Id::Number(6)),
            ),
            (
                r#"{"id":6,"op":"attrs","max":4097}"#,
                ErrorKind::Parse,
                Some(Id::Number(6)),
            ),
            (
                r#"{"id":6,"op":"stats","from":1}"#,
                ErrorKind::Parse,
                Some(Id::Number(6)),
            ),
            (r#"{"id":7,"op":"ping"} trailing"#, ErrorKind::Parse, None),
            (
                "{\"id\":8,\"op\":\"ping\"}\n{\"id\":9}",
                ErrorKind::Parse,
                None,
            ),
        ];
        for (line, kind, id) in cases {
            let r = err(line);
            assert_eq!(r.error.kind, *kind, "{line}: {r:?}");
            assert_eq!(&r.id, id, "{line}: {r:?}");
            assert!(!r.error.message.is_empty());
        }
        let long_id = format!(r#"{{"id":"{}","op":"ping"}}"#, "x".repeat(MAX_ID_BYTES + 1));
        assert_eq!(err(&long_id).error.kind, ErrorKind::Parse);
        let max_id = format!(r#"{{"id":"{}","op":"ping"}}"#, "x".repeat(MAX_ID_BYTES));
        assert!(matches!(ok(&max_id).id, Some(Id::Text(t)) if t.len() == MAX_ID_BYTES));
        // Not UTF-8.
        assert_eq!(
            err("{\"id\":1,\"op\":\"p\u{e9}\"}").error.kind,
            ErrorKind::UnknownOp
        );
        let r = parse_line(b"{\"op\":\"\xff\xfe\"}").unwrap_err();
        assert_eq!(r.error.kind, ErrorKind::Parse);
    }

    #[test]
    fn lists_past_their_bound_are_counted_not_kept() {
        let ranges: Vec<String> = (0..MAX_VECTOR_OPS + 1)
            .map(|i| format!(r#"{{"lba":{i},"blocks":1}}"#))
            .collect();
        let line = format!(
            r#"{{"id":1,"op":"delete","ranges":[{}]}}"#,
            ranges.join(",")
        );
        let r = err(&line);
        assert_eq!(r.error.kind, ErrorKind::BadVector);
        assert!(r.error.message.contains("257 sent"), "{}", r.error.message);
        let w: WireRequest = serde_json::from_str(&line).unwrap();
        let kept = w.ranges.unwrap();
        assert_eq!(
            (kept.items.len(), kept.sent),
            (MAX_VECTOR_OPS, MAX_VECTOR_OPS + 1)
        );
        // Exactly the bound is fine.
        let line = format!(
            r#"{{"op":"delete","ranges":[{}]}}"#,
            ranges[..MAX_VECTOR_OPS].join(",")
        );
        assert!(
            matches!(ok(&line).command, Command::Range { ref ops, .. } if ops.len() == MAX_VECTOR_OPS)
        );
        // A vector whose operations hold more ranges than a vector may.
        let half: Vec<String> = (0..MAX_VECTOR_OPS / 2 + 1)
            .map(|i| format!(r#"{{"lba":{i},"blocks":1}}"#))
            .collect();
        let item = format!(r#"{{"op":"delete","ranges":[{}]}}"#, half.join(","));
        let line = format!(r#"{{"id":2,"op":"vector","ops":[{item},{item}]}}"#);
        assert_eq!(err(&line).error.kind, ErrorKind::BadVector);
        // Merge sources.
        let sources: Vec<String> = (0..=MAX_MERGE_SOURCES)
            .map(|i| (i * 10).to_string())
            .collect();
        let line = format!(
            r#"{{"op":"merge","sources":[{}],"dst":1000,"blocks":1,"policy":"fail"}}"#,
            sources.join(",")
        );
        assert_eq!(err(&line).error.kind, ErrorKind::BadVector);
        // A huge list of junk is skipped without being kept.
        let junk = format!(
            r#"{{"id":9,"op":"delete","ranges":[{}]}}"#,
            vec!["[[[]]]"; 100_000].join(",")
        );
        let r = err(&junk);
        assert_eq!(r.id, Some(Id::Number(9)));
    }

    #[test]
    fn overlong_lines_are_refused_before_parsing() {
        let mut line = br#"{"op":"ping","id":1}"#.to_vec();
        line.resize(MAX_LINE_BYTES, b' ');
        assert_eq!(
            ok(std::str::from_utf8(&line).unwrap()).command,
            Command::Ping
        );
        line.push(b' ');
        let r = parse_line(&line).unwrap_err();
        assert_eq!(r.error.kind, ErrorKind::TooLong);
        assert_eq!(r.id, None);
        // A trailing carriage return is not part of the line.
        assert_eq!(ok("{\"op\":\"ping\"}\r").command, Command::Ping);
    }

    #[test]
    fn io_errors_map_to_kinds_with_their_block() {
        let e = ControlError::from(IoError::Immutable { lba: 42 });
        assert_eq!((e.kind, e.lba), (ErrorKind::Immutable, Some(42)));
        let e = ControlError::from(IoError::MergeConflict { lba: 7 });
        assert_eq!((e.kind, e.lba), (ErrorKind::MergeConflict, Some(7)));
        let e = ControlError::from(IoError::OutOfRange {
            lba: 9,
            block_count: 2,
            logical_blocks: 10,
        });
        assert_eq!((e.kind, e.lba), (ErrorKind::OutOfRange, Some(9)));
        let e = ControlError::from(IoError::SharingFull {
            capacity: 1,
            needed: 2,
        });
        assert_eq!(e.kind, ErrorKind::SharingFull);
        let e = ControlError::from(IoError::AttributeTableFull { max_ranges: 3 });
        assert_eq!(e.kind, ErrorKind::AttributeTableFull);
        assert_eq!(ControlError::from(IoError::Busy).kind, ErrorKind::Busy);
        let kinds: std::collections::HashSet<&str> =
            ErrorKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(kinds.len(), ErrorKind::ALL.len());
    }

    #[test]
    fn replies_are_one_line_and_read_back() {
        let line = error_line(
            Some(&Id::Text("a\nb\"c".into())),
            &ControlError {
                kind: ErrorKind::Immutable,
                message: "block 5\nis immutable".into(),
                lba: Some(5),
            },
        );
        assert!(!line.contains('\n'), "{line}");
        let r = parse_reply(line.as_bytes()).unwrap();
        assert_eq!(r.id, Some(Id::Text("a\nb\"c".into())));
        let e = r.result.unwrap_err();
        assert_eq!((e.kind.as_str(), e.lba), ("immutable", Some(5)));
        let ops = zftl_core::range::clones(&[(0, 10, 4), (4, 20, u64::MAX)]);
        let line = ok_line(Some(&Id::Number(u64::MAX)), range_body("clone", &ops));
        let r = parse_reply(line.as_bytes()).unwrap();
        assert_eq!(r.id, Some(Id::Number(u64::MAX)));
        let body = r.result.unwrap();
        assert_eq!(body["op"], "clone");
        assert_eq!(body["operations"], 2);
        assert_eq!(body["blocks"], u64::MAX);
        let line = ok_line(None, ping_body(4096, 100));
        assert!(line.starts_with(r#"{"id":null,"ok":true,"#), "{line}");
        assert!(parse_reply(b"{\"ok\":1}").is_err());
        // Messages are bounded, whatever the request quoted.
        let long = ControlError::parse("é".repeat(MAX_MESSAGE_BYTES));
        let r = parse_reply(error_line(None, &long).as_bytes()).unwrap();
        let m = r.result.unwrap_err().message;
        assert!(
            m.len() <= MAX_MESSAGE_BYTES && m.ends_with('…'),
            "{}",
            m.len()
        );
        assert!(parse_reply(b"nope").is_err());
    }

    #[test]
    fn snapshot_ops_parse() {
        let c = ok(r#"{"id":1,"op":"snapshot_create","name":"before-upgrade"}"#);
        assert_eq!(c.id, Some(Id::Number(1)));
        assert_eq!(
            c.command,
            Command::SnapshotCreate {
                name: "before-upgrade".into()
            }
        );
        assert!(c.command.writes());
        let d = ok(r#"{"op":"snapshot_delete","name":"x"}"#).command;
        assert_eq!(d, Command::SnapshotDelete { name: "x".into() });
        assert!(d.writes());
        let l = ok(r#"{"op":"snapshots"}"#).command;
        assert_eq!(l, Command::Snapshots);
        assert!(!l.writes());
        let r = ok(r#"{"op":"snapshot_read","name":"x","lba":5,"blocks":3}"#).command;
        assert_eq!(
            r,
            Command::SnapshotRead {
                name: "x".into(),
                lba: 5,
                blocks: 3
            }
        );
        assert!(!r.writes());
        assert!(!Command::Stats.writes());
        assert!(ok(r#"{"op":"delete","ranges":[{"lba":0,"blocks":1}]}"#)
            .command
            .writes());
        // Names are the core's to judge (empty, too long, taken): they
        // parse, and the create is refused with `snapshot`.
        assert_eq!(
            ok(r#"{"op":"snapshot_create","name":""}"#).command,
            Command::SnapshotCreate { name: "".into() }
        );
        for line in [
            r#"{"op":"snapshot_create"}"#,
            r#"{"op":"snapshot_create","name":null}"#,
            r#"{"op":"snapshot_create","name":["a"]}"#,
            r#"{"op":"snapshot_create","name":"a","blocks":1}"#,
            r#"{"op":"snapshot_create","name":"a","lba":1}"#,
            r#"{"op":"snapshot_delete","name":"a","from":1}"#,
            r#"{"op":"snapshot_delete"}"#,
            r#"{"op":"snapshots","name":"a"}"#,
            r#"{"op":"snapshots","lba":0}"#,
            r#"{"op":"snapshot_read","name":"a","lba":0}"#,
            r#"{"op":"snapshot_read","name":"a","blocks":1}"#,
            r#"{"op":"snapshot_read","lba":0,"blocks":1}"#,
            r#"{"op":"snapshot_read","name":"a","lba":0,"blocks":0}"#,
            r#"{"op":"snapshot_read","name":"a","lba":0,"blocks":1,"ranges":[]}"#,
            r#"{"op":"stats","name":"a"}"#,
            r#"{"op":"clone","ranges":[{"src":0,"dst":1,"blocks":1}],"name":"a"}"#,
            r#"{"op":"vector","ops":[{"op":"snapshot_delete"}]}"#,
        ] {
            let r = err(line);
            assert_eq!(r.error.kind, ErrorKind::Parse, "{line}: {r:?}");
        }
        let m = err(r#"{"op":"snapshot_read","name":"a","blocks":1}"#)
            .error
            .message;
        assert!(m.contains("`snapshot_read` needs `lba`"), "{m}");
        let m = err(r#"{"op":"snapshots","name":"a"}"#).error.message;
        assert!(m.contains("`snapshots` takes no `name` field"), "{m}");
        // Round trips of the wire forms the CLI sends.
        for r in [
            WireRequest::snapshot(None, OpName::SnapshotCreate, "a b"),
            WireRequest::snapshot(Some(Id::Number(2)), OpName::SnapshotDelete, "é"),
            WireRequest::bare(None, OpName::Snapshots),
            WireRequest::snapshot_read(None, "a", 7, 9),
        ] {
            let line = r.to_line();
            let back: WireRequest = serde_json::from_str(&line).unwrap();
            assert_eq!(back, r, "{line}");
            assert_eq!(ok(&line).command, convert(&r).unwrap());
        }
    }

    #[test]
    fn snapshot_revert_parses() {
        let r = ok(r#"{"id":5,"op":"snapshot_revert","to":"@2026-11-27T10:00:01Z"}"#);
        assert_eq!(r.id, Some(Id::Number(5)));
        assert_eq!(
            r.command,
            Command::SnapshotRevert {
                to: "@2026-11-27T10:00:01Z".into(),
                undo: None
            }
        );
        assert!(r.command.writes());
        assert_eq!(
            ok(r#"{"op":"snapshot_revert","to":"a","undo":"before-revert"}"#).command,
            Command::SnapshotRevert {
                to: "a".into(),
                undo: Some("before-revert".into())
            }
        );
        for line in [
            r#"{"op":"snapshot_revert"}"#,
            r#"{"op":"snapshot_revert","undo":"u"}"#,
            r#"{"op":"snapshot_revert","to":null}"#,
            r#"{"op":"snapshot_revert","to":3}"#,
            r#"{"op":"snapshot_revert","to":"a","undo":["u"]}"#,
            r#"{"op":"snapshot_revert","to":"a","name":"a"}"#,
            r#"{"op":"snapshot_revert","to":"a","lba":0}"#,
            r#"{"op":"snapshot_revert","to":"a","blocks":1}"#,
            r#"{"op":"snapshot_revert","to":"a","since":"b"}"#,
            r#"{"op":"snapshot_create","name":"a","to":"b"}"#,
            r#"{"op":"snapshot_create","name":"a","undo":"b"}"#,
            r#"{"op":"vector","ops":[{"op":"snapshot_revert","to":"a"}]}"#,
        ] {
            let r = err(line);
            assert_eq!(r.error.kind, ErrorKind::Parse, "{line}: {r:?}");
        }
        let m = err(r#"{"op":"snapshot_revert","undo":"u"}"#).error.message;
        assert!(m.contains("`snapshot_revert` needs `to`"), "{m}");
        let m = err(r#"{"op":"snapshots","to":"a"}"#).error.message;
        assert!(m.contains("`snapshots` takes no `to` field"), "{m}");
        for r in [
            WireRequest::snapshot_revert(None, "a", None),
            WireRequest::snapshot_revert(Some(Id::Text("r".into())), "@x", Some("u")),
        ] {
            let line = r.to_line();
            let back: WireRequest = serde_json::from_str(&line).unwrap();
            assert_eq!(back, r, "{line}");
            assert_eq!(ok(&line).command, convert(&r).unwrap());
        }
    }

    #[test]
    fn snapshot_diff_parses() {
        let d = ok(r#"{"id":4,"op":"snapshot_diff","since":"a"}"#).command;
        assert_eq!(
            d,
            Command::SnapshotDiff {
                since: "a".into(),
                until: None,
                lba: 0,
                blocks: None,
                max: MAX_DIFF_RUNS_PER_REPLY
            }
        );
        assert!(!d.writes());
        assert_eq!(
            ok(r#"{"op":"snapshot_diff","since":"a","until":"b","lba":9,"blocks":3,"max":1}"#)
                .command,
            Command::SnapshotDiff {
                since: "a".into(),
                until: Some("b".into()),
                lba: 9,
                blocks: Some(3),
                max: 1
            }
        );
        for line in [
            r#"{"op":"snapshot_diff"}"#,
            r#"{"op":"snapshot_diff","until":"b"}"#,
            r#"{"op":"snapshot_diff","since":null}"#,
            r#"{"op":"snapshot_diff","since":7}"#,
            r#"{"op":"snapshot_diff","since":"a","until":["b"]}"#,
            r#"{"op":"snapshot_diff","since":"a","blocks":0}"#,
            r#"{"op":"snapshot_diff","since":"a","max":0}"#,
            r#"{"op":"snapshot_diff","since":"a","max":32769}"#,
            r#"{"op":"snapshot_diff","since":"a","name":"b"}"#,
            r#"{"op":"snapshot_diff","since":"a","from":0}"#,
            r#"{"op":"snapshot_diff","since":"a","dst":0}"#,
            r#"{"op":"snapshot_diff","since":"a","lba":-1}"#,
            r#"{"op":"snapshot_read","name":"a","lba":0,"blocks":1,"since":"b"}"#,
            r#"{"op":"snapshot_read","name":"a","lba":0,"blocks":1,"max":1}"#,
            r#"{"op":"snapshots","until":"b"}"#,
            r#"{"op":"vector","ops":[{"op":"snapshot_diff","since":"a"}]}"#,
        ] {
            let r = err(line);
            assert_eq!(r.error.kind, ErrorKind::Parse, "{line}: {r:?}");
        }
        let m = err(r#"{"op":"snapshot_diff","until":"b"}"#).error.message;
        assert!(m.contains("`snapshot_diff` needs `since`"), "{m}");
        let m = err(r#"{"op":"snapshot_diff","since":"a","max":0}"#)
            .error
            .message;
        assert!(m.contains("`max` is 1 to 32768"), "{m}");
        for r in [
            WireRequest::snapshot_diff(None, "a", None, None, None, None),
            WireRequest::snapshot_diff(
                Some(Id::Number(3)),
                "a",
                Some("b"),
                Some(7),
                Some(9),
                Some(2),
            ),
        ] {
            let line = r.to_line();
            let back: WireRequest = serde_json::from_str(&line).unwrap();
            assert_eq!(back, r, "{line}");
            assert_eq!(ok(&line).command, convert(&r).unwrap());
        }
    }

    #[test]
    fn a_full_diff_page_fits_a_reply_line() {
        let s = |name: &str| Snapshot {
            id: u32::MAX,
            name: name.into(),
            epoch: u32::MAX,
            create_seq: u64::MAX,
            wall_ns: u64::MAX,
            parent: zftl_core::history::LIVE_VOLUME,
        };
        let (a, b) = (s(&"a".repeat(63)), s(&"é".repeat(31)));
        let runs = vec![(u64::MAX, u64::MAX); MAX_DIFF_RUNS_PER_REPLY as usize];
        let body = snapshot_diff_body(&a, Some(&b), 4096, (0, u64::MAX), &runs, Some(u64::MAX));
        let line = ok_line(Some(&Id::Text("i".repeat(MAX_ID_BYTES))), body);
        assert!(line.len() <= MAX_REPLY_BYTES, "{} bytes", line.len());
        let back = parse_reply(line.as_bytes()).unwrap().result.unwrap();
        assert_eq!(back["runs"].as_array().unwrap().len(), runs.len());
        assert_eq!(back["changed_blocks"], u64::MAX, "the sum saturates");
        assert_eq!(back["until"]["name"], b.name.as_str());
        let body = snapshot_diff_body(&a, None, 512, (5, 1), &[], None);
        assert_eq!(body["until"], Value::Null);
        assert_eq!(body["next_lba"], Value::Null);
        assert_eq!(body["runs"], json!([]));
    }

    #[test]
    fn a_full_snapshot_list_fits_a_reply_line() {
        // 4096 snapshots (the most a volume holds) with the longest JSON
        // each: 63 bytes of control characters (6 bytes escaped) and the
        // widest numbers.
        let list: Vec<Snapshot> = (0..4096u32)
            .map(|i| Snapshot {
                id: u32::MAX - i,
                name: "\u{1}".repeat(63),
                epoch: u32::MAX,
                create_seq: u64::MAX,
                wall_ns: u64::MAX,
                parent: zftl_core::history::LIVE_VOLUME,
            })
            .collect();
        let stats = FtlStats {
            snapshot_versions: u64::MAX,
            snapshot_memory_bytes: u64::MAX,
            ..FtlStats::default()
        };
        let line = ok_line(
            Some(&Id::Text("i".repeat(MAX_ID_BYTES))),
            snapshots_body(&list, &stats),
        );
        // docs/control.md gives it as at most about 2.1 MiB.
        assert!(line.len() <= (22 << 20) / 10, "{} bytes", line.len());
        let back = parse_reply(line.as_bytes()).unwrap().result.unwrap();
        assert_eq!(back["snapshots"].as_array().unwrap().len(), 4096);
        // A revert's reply is two snapshots.
        let body = snapshot_revert_body(&list[0], &list[1]);
        let line = ok_line(None, body);
        assert!(line.len() < 2048, "{} bytes", line.len());
        let back = parse_reply(line.as_bytes()).unwrap().result.unwrap();
        assert_eq!(back["undo"]["id"], u32::MAX - 1);
    }

    #[test]
    fn snapshot_errors_map_to_the_snapshot_kinds() {
        let e = ControlError::from(IoError::Snapshot(SnapshotError::NameTaken("a".into())));
        assert_eq!(e.kind, ErrorKind::Snapshot);
        assert!(e.message.contains("\"a\""), "{}", e.message);
        let e = ControlError::from(IoError::Snapshot(SnapshotError::NoSuchId(7)));
        assert_eq!(e.kind, ErrorKind::Snapshot);
        assert!(e.message.contains('7'), "{}", e.message);
        assert_eq!(
            ControlError::from(IoError::SnapshotSpace).kind,
            ErrorKind::SnapshotSpace
        );
    }

    #[test]
    fn snapshots_show_their_wall_time_in_rfc3339() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400_000_000_000), "2000-02-29T00:00:00Z");
        assert_eq!(
            rfc3339_utc(1_709_251_199_999_999_999),
            "2024-02-29T23:59:59Z"
        );
        assert_eq!(
            rfc3339_utc(1_798_761_600_000_000_000),
            "2027-01-01T00:00:00Z"
        );
        assert_eq!(
            rfc3339_utc(4_107_542_399_000_000_000),
            "2100-02-28T23:59:59Z"
        );
        assert_eq!(
            rfc3339_utc(4_107_542_400_000_000_000),
            "2100-03-01T00:00:00Z"
        );
        assert_eq!(rfc3339_utc(u64::MAX), "2554-07-21T23:34:33Z");
        let s = Snapshot {
            id: 3,
            name: "n".into(),
            epoch: 4,
            create_seq: 99,
            wall_ns: 1_798_761_600_123_456_789,
            parent: zftl_core::history::LIVE_VOLUME,
        };
        let v = snapshot_value(&s);
        assert_eq!(
            v,
            json!({"id": 3, "name": "n", "kind": "snapshot", "epoch": 4, "create_seq": 99,
                   "wall_ns": 1_798_761_600_123_456_789u64, "created": "2027-01-01T00:00:00Z"})
        );
        let point = snapshot_value(&Snapshot {
            name: "@2027-01-01T00:00:00Z".into(),
            ..s.clone()
        });
        assert_eq!(point["kind"], "point");
        let none = snapshot_value(&Snapshot {
            wall_ns: 0,
            ..s.clone()
        });
        assert_eq!(none["created"], Value::Null);
        let stats = FtlStats {
            snapshot_versions: 12,
            snapshot_memory_bytes: 3400,
            ..FtlStats::default()
        };
        let body = snapshots_body(&[s.clone(), s], &stats);
        assert_eq!(body["op"], "snapshots");
        assert_eq!(body["snapshots"].as_array().unwrap().len(), 2);
        assert_eq!(body["snapshot_versions"], 12);
        assert_eq!(body["snapshot_memory_bytes"], 3400);
    }

    #[test]
    fn snapshot_data_is_base64() {
        // RFC 4648's test vectors.
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode_data(plain.as_bytes()), coded);
            assert_eq!(decode_data(coded).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255u8).cycle().take(4099).collect();
        assert_eq!(decode_data(&encode_data(&all)).unwrap(), all);
        for bad in ["Zg=", "Zg==Zg==", "Z===", "Zm9v!A==", "Zm 9", "=Zm9"] {
            assert!(decode_data(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn attrs_pages_through_the_ranges() {
        let all = [(0, 4, 1), (10, 2, 2), (20, 5, 3), (30, 1, 1 | 0x80)];
        let page = attrs_body(&all, 0, 2);
        assert_eq!(page["ranges"].as_array().unwrap().len(), 2);
        assert_eq!(page["ranges"][1]["lba"], 10);
        assert_eq!(page["ranges"][1]["attributes"], json!(["non-persistent"]));
        assert_eq!(page["next"], 20);
        let page = attrs_body(&all, 20, 2);
        assert_eq!(
            page["ranges"][0]["attributes"],
            json!(["immutable", "non-persistent"])
        );
        assert_eq!(
            page["ranges"][1]["attributes"],
            json!(["immutable", "bit-7"])
        );
        assert_eq!(page["next"], Value::Null);
        // `from` inside a range lists that range.
        let page = attrs_body(&all, 22, 10);
        assert_eq!(page["ranges"][0]["lba"], 20);
        let page = attrs_body(&all, u64::MAX, 10);
        assert_eq!(page["ranges"], json!([]));
        assert_eq!(page["next"], Value::Null);
    }
}
