//! Metadata contexts: which ones the server offers on an export
//! (`NBD_OPT_LIST_META_CONTEXT`), which ones a client selected
//! (`NBD_OPT_SET_META_CONTEXT`), and what `NBD_CMD_BLOCK_STATUS` answers for
//! each.
//!
//! - `base:allocation`: holes (never written, trimmed, or zeroed without
//!   `NO_HOLE`: `NBD_STATE_HOLE | NBD_STATE_ZERO`) and data (0), from the
//!   volume's `Request::Extents`. A snapshot's view reports its whole range
//!   as data (the volume maps only its live blocks). A fork's export asks
//!   about its blocks at the fork's offset; a block the fork has not
//!   changed is data where its snapshot maps it.
//! - `x-zftl:changed:NAME`, one per live snapshot `NAME` of the export's
//!   volume: [`STATE_CHANGED`] for the blocks whose contents differ between
//!   snapshot `NAME` and the export (the live volume, or the view's own
//!   snapshot), 0 for the others, from the volume's `Request::Changed`
//!   (whose cost follows what changed, not the range asked about). Queries:
//!   `x-zftl:changed:NAME` selects or lists that context when `NAME` is a
//!   live snapshot and is ignored otherwise; `x-zftl:` and
//!   `x-zftl:changed:` list every one and select none, as the spec asks of
//!   an empty leaf name. The snapshot is resolved to its id when the
//!   context is selected: if it is deleted later, `BLOCK_STATUS` fails with
//!   `EIO` (a new snapshot of the same name is another snapshot). A
//!   fork's export has none: it is not the volume its snapshots were
//!   taken of, so no changed context is listed or selected on it.
//!
//! `base:allocation` has the id [`META_BASE_ALLOCATION_ID`]; the changed
//! contexts of one selection get the ids after it, in the order selected.

use std::collections::HashSet;

use zftl_core::history::{Snapshot, SnapshotId};
use zftl_core::{IoError, ReplyData, Request, MAX_EXTENT_QUERY_BLOCKS};

use crate::export::{Export, Volume};
use crate::proto::*;

/// What a metadata context reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Context {
    BaseAllocation,
    /// The blocks that differ between snapshot `since` and the export.
    Changed {
        since: SnapshotId,
    },
}

/// A context a client selected: its id on this connection, its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Selected {
    pub id: u32,
    pub name: String,
    pub context: Context,
}

/// The name of the changed context of snapshot `snapshot`.
pub(crate) fn changed_name(snapshot: &str) -> String {
    format!("{META_CHANGED_PREFIX}{snapshot}")
}

/// The queries need the volume's snapshots to be answered.
pub(crate) fn needs_snapshots(queries: &[String], listing: bool) -> bool {
    (listing && queries.is_empty()) || queries.iter().any(|q| q.starts_with(META_ZFTL_NAMESPACE))
}

/// The contexts `queries` match on an export whose volume has `snapshots`,
/// each once, in the order first matched. `listing`: for
/// `NBD_OPT_LIST_META_CONTEXT` (no query lists every context; wildcards
/// list), else for `NBD_OPT_SET_META_CONTEXT` (wildcards select nothing).
/// Unknown namespaces, names and snapshots match nothing.
pub(crate) fn matching(
    queries: &[String],
    listing: bool,
    snapshots: &[Snapshot],
) -> Vec<(String, Context)> {
    let mut found = Found::default();
    let mut listed_every_changed = false;
    let mut every_changed = |found: &mut Found| {
        // Once: a wildcard repeated costs nothing more.
        if !std::mem::replace(&mut listed_every_changed, true) {
            for s in snapshots {
                found.add(changed_name(&s.name), Context::Changed { since: s.id });
            }
        }
    };
    let base =
        |found: &mut Found| found.add(META_BASE_ALLOCATION.to_string(), Context::BaseAllocation);
    if listing && queries.is_empty() {
        base(&mut found);
        every_changed(&mut found);
    }
    for q in queries {
        let q = q.as_str();
        if q == META_BASE_ALLOCATION || (listing && q == META_BASE_NAMESPACE) {
            base(&mut found);
        } else if listing && (q == META_ZFTL_NAMESPACE || q == META_CHANGED_PREFIX) {
            every_changed(&mut found);
        } else if let Some(name) = q.strip_prefix(META_CHANGED_PREFIX) {
            if let Some(s) = snapshots.iter().find(|s| s.name == name) {
                found.add(q.to_string(), Context::Changed { since: s.id });
            }
        }
    }
    found.contexts
}

/// Contexts found, each once.
#[derive(Default)]
struct Found {
    contexts: Vec<(String, Context)>,
    seen: HashSet<String>,
}

impl Found {
    fn add(&mut self, name: String, context: Context) {
        // Names an NBD string cannot carry are never offered.
        let valid = name.len() <= MAX_STRING_BYTES && !name.contains('\0');
        if valid && !self.seen.contains(&name) {
            self.seen.insert(name.clone());
            self.contexts.push((name, context));
        }
    }
}

/// Gives the contexts of one `NBD_OPT_SET_META_CONTEXT` their ids:
/// `base:allocation` [`META_BASE_ALLOCATION_ID`], the others the ids after
/// it in order.
pub(crate) fn select(contexts: Vec<(String, Context)>) -> Vec<Selected> {
    let mut next = META_BASE_ALLOCATION_ID;
    let mut id_of = |context| match context {
        Context::BaseAllocation => META_BASE_ALLOCATION_ID,
        Context::Changed { .. } => {
            next += 1;
            next
        }
    };
    contexts
        .into_iter()
        .map(|(name, context)| Selected {
            id: id_of(context),
            name,
            context,
        })
        .collect()
}

/// Most descriptors in one BLOCK_STATUS reply, over all its chunks (1 MiB
/// of them); the spec lets the server describe less than the range asked
/// about.
const MAX_STATUS_DESCRIPTORS: usize = 1 << 17;

/// The blocks a BLOCK_STATUS of `offset`+`length` bytes asks the volume
/// about: those it touches, at most `MAX_EXTENT_QUERY_BLOCKS` (the reply
/// then covers only the start of the range, which the spec allows).
pub(crate) fn status_blocks(offset: u64, length: u32, block_size: u64) -> (u64, u32) {
    let lba = offset / block_size;
    let end = (offset + u64::from(length)).div_ceil(block_size);
    let blocks = (end - lba).min(u64::from(MAX_EXTENT_QUERY_BLOCKS));
    (lba, blocks as u32)
}

/// The `(context id, descriptors)` of each of `contexts` for a
/// BLOCK_STATUS of `offset`+`length` bytes of `export`: one volume query
/// per context, run one after the other. Any failure fails the whole
/// request (a reply has one chunk per context or none).
pub(crate) async fn block_status<V: Volume>(
    export: &Export<V>,
    contexts: &[Selected],
    offset: u64,
    length: u32,
    req_one: bool,
) -> Result<Vec<(u32, Vec<(u32, u32)>)>, IoError> {
    let per_context = (MAX_STATUS_DESCRIPTORS / contexts.len().max(1)).max(1);
    let max = if req_one { 1 } else { per_context };
    let mut chunks = Vec::with_capacity(contexts.len());
    for c in contexts {
        let q = Query {
            vol: &export.volume,
            lba_offset: export.lba_offset(),
            fork: export.fork.as_ref().map(|f| f.id),
            offset,
            length,
            max,
        };
        let descriptors = match c.context {
            // The volume maps only its live blocks: a view's whole range is
            // data, always a correct answer.
            Context::BaseAllocation if export.snapshot.is_some() => vec![(length, 0)],
            Context::BaseAllocation => q.allocation().await?,
            Context::Changed { since } => q.changed(since, export.snapshot).await?,
        };
        chunks.push((c.id, descriptors));
    }
    Ok(chunks)
}

/// One context's part of a BLOCK_STATUS.
struct Query<'a, V> {
    vol: &'a V,
    /// Where the export's block 0 lies among the volume's (a fork's
    /// offset, else 0).
    lba_offset: u64,
    /// The fork it serves, if any: block status asks through
    /// `Request::InFork`.
    fork: Option<zftl_core::fork::ForkId>,
    offset: u64,
    length: u32,
    /// Most descriptors.
    max: usize,
}

impl<V: Volume> Query<'_, V> {
    fn bs(&self) -> u64 {
        self.vol.block_size() as u64
    }

    /// `base:allocation`, from the volume's mapped/unmapped runs: an
    /// unmapped run is a hole that reads as zeros, a mapped one data.
    async fn allocation(&self) -> Result<Vec<(u32, u32)>, IoError> {
        let (lba, block_count) = status_blocks(self.offset, self.length, self.bs());
        let request = crate::transmission::in_fork(
            self.fork,
            Request::Extents {
                lba: lba + self.lba_offset,
                block_count,
            },
        );
        let runs = match self.vol.call(request).await? {
            ReplyData::Extents(runs) => runs,
            // A volume that cannot tell: allocated data, always correct.
            _ => return Ok(vec![(self.length, 0)]),
        };
        let runs = runs.iter().map(|r| {
            let status = if r.mapped { 0 } else { STATE_HOLE | STATE_ZERO };
            (u64::from(r.block_count), status)
        });
        Ok(self.descriptors(lba, runs, 0))
    }

    /// `x-zftl:changed:…`: the blocks that differ between snapshot `since`
    /// and `until` (`None`: the live volume).
    async fn changed(
        &self,
        since: SnapshotId,
        until: Option<SnapshotId>,
    ) -> Result<Vec<(u32, u32)>, IoError> {
        let (lba, block_count) = status_blocks(self.offset, self.length, self.bs());
        let request = Request::Changed {
            since,
            until,
            lba,
            block_count,
        };
        let changed = match self.vol.call(request).await? {
            ReplyData::Changed(runs) => runs,
            // A volume that cannot tell: all changed, which an incremental
            // backup can always act on.
            _ => return Ok(vec![(self.length, STATE_CHANGED)]),
        };
        let runs = changed_runs(lba, u64::from(block_count), &changed);
        Ok(self.descriptors(lba, runs, STATE_CHANGED))
    }

    fn descriptors(
        &self,
        lba: u64,
        runs: impl IntoIterator<Item = (u64, u32)>,
        unknown: u32,
    ) -> Vec<(u32, u32)> {
        let (offset, length) = (self.offset, self.length);
        descriptors(offset, length, self.bs(), lba, runs, self.max, unknown)
    }
}

/// The `(block_count, status)` runs of the `block_count` blocks from `lba`
/// given the changed runs `(lba, block_count)` among them (in order, as
/// `Request::Changed` answers): unchanged gaps (0) between changed runs
/// ([`STATE_CHANGED`]), to the end of the range.
fn changed_runs(lba: u64, block_count: u64, changed: &[(u64, u64)]) -> Vec<(u64, u32)> {
    let end = lba + block_count;
    let mut out = Vec::with_capacity(2 * changed.len() + 1);
    let mut at = lba;
    for &(first, n) in changed {
        let stop = first.saturating_add(n).min(end);
        let start = first.clamp(at, end);
        if start > at {
            out.push((start - at, 0));
        }
        if stop > start {
            out.push((stop - start, STATE_CHANGED));
            at = stop;
        }
    }
    if end > at {
        out.push((end - at, 0));
    }
    out
}

/// The descriptors of the `(block_count, status)` runs starting at block
/// `lba`, clipped to the byte range `offset`+`length`, at most `max`;
/// adjacent runs of one status are merged. Runs that describe nothing of
/// the range give one descriptor of it with the status `unknown` (the
/// context's answer that is always correct).
fn descriptors(
    offset: u64,
    length: u32,
    bs: u64,
    lba: u64,
    runs: impl IntoIterator<Item = (u64, u32)>,
    max: usize,
    unknown: u32,
) -> Vec<(u32, u32)> {
    let end = offset + u64::from(length);
    let mut out: Vec<(u32, u32)> = Vec::new();
    let mut at = offset;
    let mut run_end = lba * bs;
    for (block_count, status) in runs {
        run_end = run_end.saturating_add(block_count.saturating_mul(bs));
        let stop = run_end.min(end);
        if stop <= at {
            continue;
        }
        let len = (stop - at) as u32;
        if let Some(last) = out.last_mut().filter(|last| last.1 == status) {
            last.0 += len;
        } else if out.len() < max {
            out.push((len, status));
        } else {
            break;
        }
        at = stop;
        if at == end {
            break;
        }
    }
    if out.is_empty() {
        out.push((length, unknown));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(id: SnapshotId, name: &str) -> Snapshot {
        Snapshot {
            id,
            name: name.into(),
            epoch: 0,
            create_seq: 0,
            wall_ns: 0,
            parent: 0,
        }
    }

    fn names(found: &[(String, Context)]) -> Vec<&str> {
        found.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn q(queries: &[&str]) -> Vec<String> {
        queries.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn queries_match_live_snapshots_only() {
        let snaps = [snap(3, "a"), snap(7, "b:c")];
        // LIST without queries: everything.
        let all = matching(&[], true, &snaps);
        assert_eq!(
            names(&all),
            ["base:allocation", "x-zftl:changed:a", "x-zftl:changed:b:c"]
        );
        assert_eq!(all[2].1, Context::Changed { since: 7 });
        // SET without queries: nothing.
        assert!(matching(&[], false, &snaps).is_empty());
        // Wildcards list and never select.
        for wild in ["x-zftl:", "x-zftl:changed:"] {
            let listed = matching(&q(&[wild]), true, &snaps);
            assert_eq!(names(&listed), ["x-zftl:changed:a", "x-zftl:changed:b:c"]);
            assert!(matching(&q(&[wild]), false, &snaps).is_empty());
        }
        assert_eq!(
            names(&matching(&q(&["base:"]), true, &snaps)),
            ["base:allocation"]
        );
        assert!(matching(&q(&["base:"]), false, &snaps).is_empty());
        // Names: exact, a colon in the snapshot's name included; unknown
        // names and namespaces are ignored; each context once.
        let set = matching(
            &q(&[
                "x-zftl:changed:b:c",
                "x-zftl:changed:nope",
                "x-zftl:changed:b",
                "qemu:dirty-bitmap:a",
                "x-zftl:changed:a",
                "base:allocation",
                "x-zftl:changed:a",
            ]),
            false,
            &snaps,
        );
        assert_eq!(
            names(&set),
            ["x-zftl:changed:b:c", "x-zftl:changed:a", "base:allocation"]
        );
        let selected = select(set);
        let ids: Vec<u32> = selected.iter().map(|s| s.id).collect();
        assert_eq!(ids, [2, 3, META_BASE_ALLOCATION_ID]);
        assert_eq!(selected[1].context, Context::Changed { since: 3 });
        assert!(needs_snapshots(&q(&["x-zftl:changed:a"]), false));
        assert!(needs_snapshots(&[], true));
        assert!(!needs_snapshots(&q(&["base:allocation"]), true));
        assert!(!needs_snapshots(&[], false));
    }

    #[test]
    fn changed_runs_fill_the_gaps() {
        const C: u32 = STATE_CHANGED;
        assert_eq!(changed_runs(10, 5, &[]), vec![(5, 0)]);
        assert_eq!(changed_runs(10, 5, &[(10, 5)]), vec![(5, C)]);
        assert_eq!(
            changed_runs(10, 10, &[(11, 2), (15, 1)]),
            vec![(1, 0), (2, C), (2, 0), (1, C), (4, 0)]
        );
        // Runs reaching outside the range are clipped to it.
        assert_eq!(
            changed_runs(10, 4, &[(8, 3), (13, 9)]),
            vec![(1, C), (2, 0), (1, C)]
        );
    }

    #[test]
    fn descriptors_are_bytes_clipped_to_the_request() {
        const HZ: u32 = STATE_HOLE | STATE_ZERO;
        const MAX: usize = MAX_STATUS_DESCRIPTORS;
        let runs = [(2, 0), (3, HZ), (1, 0)];
        // Aligned: one descriptor per run, in bytes.
        assert_eq!(
            descriptors(0, 6 * 4096, 4096, 0, runs, MAX, 0),
            vec![(8192, 0), (3 * 4096, HZ), (4096, 0)]
        );
        // REQ_ONE: only the first.
        assert_eq!(
            descriptors(0, 6 * 4096, 4096, 0, runs, 1, 0),
            vec![(8192, 0)]
        );
        // Unaligned start and end inside blocks: clipped to the request.
        assert_eq!(
            descriptors(4096 + 100, 3 * 4096, 4096, 1, [(1, 0), (3, HZ)], MAX, 0),
            vec![(4096 - 100, 0), (2 * 4096 + 100, HZ)]
        );
        // Runs of one status merge; a short answer covers a prefix.
        assert_eq!(
            descriptors(0, 10 * 4096, 4096, 0, [(1, HZ), (1, HZ), (1, 0)], MAX, 0),
            vec![(8192, HZ), (4096, 0)]
        );
        // Nothing described: the whole range with the status given.
        assert_eq!(descriptors(0, 4096, 4096, 0, [], MAX, 0), vec![(4096, 0)]);
        assert_eq!(
            descriptors(0, 4096, 4096, 0, [], MAX, STATE_CHANGED),
            vec![(4096, STATE_CHANGED)]
        );
        // A cap on descriptors: the reply covers a prefix.
        assert_eq!(
            descriptors(0, 6 * 4096, 4096, 0, runs, 2, 0),
            vec![(8192, 0), (3 * 4096, HZ)]
        );
    }

    #[test]
    fn status_queries_are_capped() {
        assert_eq!(status_blocks(4096 + 1, 4096, 4096), (1, 2));
        assert_eq!(status_blocks(0, 4096, 4096), (0, 1));
        let (_, n) = status_blocks(0, u32::MAX, 512);
        assert_eq!(n, MAX_EXTENT_QUERY_BLOCKS);
    }
}
