//! What the server exports: the [`Volume`] trait a block store implements,
//! and the table of named exports with per-export flags, the read-only
//! views of each export's snapshots (`NAME@SNAPSHOT`) and the writable
//! forks of its volume (under their own names), resolved when a client
//! asks for them.

use std::future::Future;
use std::sync::Arc;

use zftl_core::fork::Fork;
use zftl_core::history::{Snapshot, SnapshotId};
use zftl_core::{IoError, ReplyData, Request};

use crate::blocklock::BlockLocks;

/// A block volume the server can export: a zftl FTL behind a driver, or
/// anything that answers the core's [`Request`]s the same way.
///
/// `zftl::handle::AsyncHandle` is the intended implementation; this crate
/// does not depend on the root crate (which depends on it), so the embedder
/// wraps the handle in a newtype that forwards these four methods.
///
/// Semantics the server relies on:
/// - a `Request::Flush` makes durable every write, trim and zeroing whose
///   reply was delivered before the flush was submitted, whichever clone or
///   connection sent it (this is what makes `NBD_FLAG_CAN_MULTI_CONN` safe);
/// - a write with `fua: true` is durable when it is answered;
/// - a read returns, for each block, the last write answered before the
///   read was submitted (or a later one);
/// - each block of a write is all or nothing across a power cut: after
///   power returns it holds its old or its new contents, never part of
///   each (the server's read-modify-writes of 512-byte sectors rely on it);
/// - requests may be in flight concurrently from many tasks.
pub trait Volume: Clone + Send + Sync + 'static {
    /// Bytes per block (a power of two).
    fn block_size(&self) -> usize;
    /// Size of the volume in blocks.
    fn logical_blocks(&self) -> u64;
    /// Largest `block_count` one request may carry.
    fn max_request_blocks(&self) -> u32;
    /// Runs one request.
    fn call(&self, request: Request) -> impl Future<Output = Result<ReplyData, IoError>> + Send;
    /// The volume's live snapshots, oldest first. Each is served read-only
    /// as `NAME@SNAPSHOT` beside an export `NAME` of this volume; reads of
    /// such a view are `Request::ReadSnapshot`. Asked at each `NBD_OPT_LIST`
    /// and whenever a client names a view, so snapshots appear and go while
    /// the server runs. The default: none.
    fn snapshots(&self) -> impl Future<Output = Result<Vec<Snapshot>, IoError>> + Send {
        async { Ok(Vec::new()) }
    }
    /// The volume's live forks. Each is served writable under its own
    /// name beside an export of this volume; its block `b` is the
    /// volume's block `Fork::lba_offset + b` for every request (reads,
    /// writes, trims, zeroing, `Request::Extents`). Asked at each
    /// `NBD_OPT_LIST`, whenever a client names a fork, and before each
    /// request on a fork's export (a fork deleted, and its region given to
    /// a new fork, must not take an old client's writes). The default:
    /// none.
    fn forks(&self) -> impl Future<Output = Result<Vec<Fork>, IoError>> + Send {
        async { Ok(Vec::new()) }
    }
}

/// One named export.
///
/// Clients may send requests aligned to 512 bytes; a write that covers
/// part of a volume block is a read-modify-write of that block, ordered
/// against every other write to it through this export (and its clones).
/// Two `Export`s built separately on one volume do not order their writes
/// against each other's: give a volume one writable export.
#[derive(Clone, Debug)]
pub struct Export<V> {
    pub name: String,
    /// Shown to humans by `NBD_OPT_LIST` and `NBD_INFO_DESCRIPTION`.
    pub description: String,
    pub volume: V,
    /// Writes, trims and zeroing are refused with `EPERM`.
    pub read_only: bool,
    /// Serve this snapshot of the volume instead of the live volume: reads
    /// are `Request::ReadSnapshot`, and the export is read-only whatever
    /// `read_only` says. The server sets it on the views it resolves
    /// (`NAME@SNAPSHOT`); a table export may set it to serve one snapshot
    /// under a fixed name.
    pub snapshot: Option<SnapshotId>,
    /// Serve this fork of the volume instead of the live volume: every
    /// request names the volume's blocks from `Fork::lba_offset`, the
    /// export has `Fork::block_count` blocks, and a request after the
    /// fork was deleted fails with `EIO`. The server sets it on the forks
    /// it resolves (by their names).
    pub fork: Option<Fork>,
    /// The writes in flight, by block range (see `blocklock`).
    pub(crate) locks: Arc<BlockLocks>,
}

impl<V> Export<V> {
    /// Writes, trims and zeroing are refused: a read-only export, or a
    /// snapshot's.
    pub fn is_read_only(&self) -> bool {
        self.read_only || self.snapshot.is_some()
    }
}

impl<V: Volume> Export<V> {
    pub fn new(name: impl Into<String>, volume: V) -> Self {
        Export {
            name: name.into(),
            description: String::new(),
            volume,
            read_only: false,
            snapshot: None,
            fork: None,
            locks: Arc::default(),
        }
    }

    /// The read-only view of `snapshot` of this export's volume, named
    /// `NAME@SNAPSHOT`.
    pub fn view(&self, snapshot: &Snapshot) -> Self {
        Export {
            name: format!("{}{VIEW_SEPARATOR}{}", self.name, snapshot.name),
            description: format!(
                "snapshot {:?} of {:?}, taken {}",
                snapshot.name,
                self.name,
                utc(snapshot.wall_ns)
            ),
            volume: self.volume.clone(),
            read_only: true,
            snapshot: Some(snapshot.id),
            fork: None,
            locks: Arc::default(),
        }
    }

    /// The writable export of `fork` of this export's volume, named as the
    /// fork; `base` is the name of its snapshot, if known. Read-only if
    /// this export is. Its writes lock their blocks (at the fork's offset)
    /// in this export's table, so every connection to the fork orders its
    /// read-modify-writes against the others'.
    pub fn fork(&self, fork: &Fork, base: Option<&str>) -> Self {
        let base = match base {
            Some(name) => format!("{name:?}"),
            None => format!("#{} (deleted)", fork.base),
        };
        Export {
            name: fork.name.clone(),
            description: format!(
                "writable fork {:?} of snapshot {base} of {:?}, created {}",
                fork.name,
                self.name,
                utc(fork.wall_ns)
            ),
            volume: self.volume.clone(),
            read_only: self.read_only,
            snapshot: None,
            fork: Some(fork.clone()),
            locks: Arc::clone(&self.locks),
        }
    }

    /// Where the export's block 0 lies among the volume's blocks: a fork's
    /// offset, else 0.
    pub fn lba_offset(&self) -> u64 {
        self.fork.as_ref().map_or(0, |f| f.lba_offset)
    }

    /// Size in blocks: a fork's, else the volume's.
    pub fn blocks(&self) -> u64 {
        match &self.fork {
            Some(f) => f.block_count,
            None => self.volume.logical_blocks(),
        }
    }

    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.blocks()
            .saturating_mul(self.volume.block_size() as u64)
    }
}

/// Why an export table cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExportTableError {
    DuplicateName(String),
    /// Names are NBD strings: UTF-8, no NUL, at most 4096 bytes; the empty
    /// name is reserved for the default export.
    InvalidName(String),
    UnknownDefault(String),
    /// The volume's block size is not a power of two in 512..=65536, the
    /// range NBD clients accept as a minimum block size.
    UnsupportedBlockSize(usize),
}

impl std::fmt::Display for ExportTableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExportTableError::DuplicateName(n) => write!(f, "export name {n:?} is used twice"),
            ExportTableError::InvalidName(n) => write!(
                f,
                "export name {n:?} is not allowed (empty, contains NUL or longer than 4096 bytes)"
            ),
            ExportTableError::UnknownDefault(n) => {
                write!(f, "the default export {n:?} is not in the table")
            }
            ExportTableError::UnsupportedBlockSize(b) => write!(
                f,
                "block size {b} is not a power of two between 512 and 65536"
            ),
        }
    }
}

impl std::error::Error for ExportTableError {}

/// The exports of a server, by name, and which one the empty name (the NBD
/// "default export") selects.
#[derive(Clone, Debug)]
pub struct ExportTable<V> {
    exports: Vec<Arc<Export<V>>>,
    default: Option<usize>,
}

/// Exports one table may hold.
pub const MAX_EXPORTS: usize = 1024;

impl<V: Volume> ExportTable<V> {
    /// A table of `exports`; `default` names the export the empty name
    /// selects (`None`: the empty name selects nothing).
    pub fn new(exports: Vec<Export<V>>, default: Option<&str>) -> Result<Self, ExportTableError> {
        if exports.len() > MAX_EXPORTS {
            return Err(ExportTableError::InvalidName(format!(
                "({} exports, at most {MAX_EXPORTS})",
                exports.len()
            )));
        }
        let mut names = std::collections::HashSet::new();
        for e in &exports {
            let bad = e.name.is_empty()
                || e.name.len() > crate::proto::MAX_STRING_BYTES
                || e.name.contains('\0');
            if bad {
                return Err(ExportTableError::InvalidName(e.name.clone()));
            }
            if !names.insert(e.name.clone()) {
                return Err(ExportTableError::DuplicateName(e.name.clone()));
            }
            let bs = e.volume.block_size();
            if !bs.is_power_of_two() || !(512..=65536).contains(&bs) {
                return Err(ExportTableError::UnsupportedBlockSize(bs));
            }
        }
        let default = match default {
            None => None,
            Some(d) => Some(
                exports
                    .iter()
                    .position(|e| e.name == d)
                    .ok_or_else(|| ExportTableError::UnknownDefault(d.to_string()))?,
            ),
        };
        Ok(ExportTable {
            exports: exports.into_iter().map(Arc::new).collect(),
            default,
        })
    }

    /// The export a client asked for by name (`""` = the default export).
    pub fn find(&self, name: &str) -> Option<Arc<Export<V>>> {
        if name.is_empty() {
            return self.default.map(|i| Arc::clone(&self.exports[i]));
        }
        self.exports.iter().find(|e| e.name == name).cloned()
    }

    /// Every export, in table order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export<V>>> {
        self.exports.iter()
    }

    /// The table exports whose volumes' views and forks are exported:
    /// those of the live volume.
    fn bases(&self) -> impl Iterator<Item = &Arc<Export<V>>> {
        self.exports
            .iter()
            .filter(|e| e.snapshot.is_none() && e.fork.is_none())
    }

    /// The export a client asked for by name: one of the table, the view
    /// `BASE@SNAPSHOT` of a live snapshot of the table export `BASE`, or a
    /// live fork of a table export's volume (a table name wins over a view
    /// or fork of the same name; fork names hold no `@`). `None` for a
    /// name that is none of these, or when the volume cannot list its
    /// snapshots or forks.
    pub async fn resolve(&self, name: &str) -> Option<Arc<Export<V>>> {
        if let Some(e) = self.find(name) {
            return Some(e);
        }
        if !name.is_empty() && !name.contains(VIEW_SEPARATOR) {
            for base in self.bases() {
                let forks = forks_of(&base.volume).await;
                if let Some(f) = forks.iter().find(|f| f.name == name) {
                    let snapshots = snapshots_of(&base.volume).await;
                    let snap = snapshots.iter().find(|s| s.id == f.base);
                    return Some(Arc::new(base.fork(f, snap.map(|s| s.name.as_str()))));
                }
            }
            return None;
        }
        for (at, _) in name.match_indices(VIEW_SEPARATOR) {
            let (base, snap) = (&name[..at], &name[at + VIEW_SEPARATOR.len_utf8()..]);
            let Some(base) = self.exports.iter().find(|e| e.name == base) else {
                continue;
            };
            if base.snapshot.is_some() || base.fork.is_some() {
                continue;
            }
            let snapshots = snapshots_of(&base.volume).await;
            if let Some(s) = snapshots.iter().find(|s| s.name == snap) {
                return Some(Arc::new(base.view(s)));
            }
        }
        None
    }

    /// Every export of the table followed by the views of each one's live
    /// snapshots (oldest first) and the forks of its volume (in id order),
    /// for `NBD_OPT_LIST`: `(name, description)`.
    pub async fn listing(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .exports
            .iter()
            .map(|e| (e.name.clone(), e.description.clone()))
            .collect();
        let mut forks_listed = std::collections::HashSet::new();
        for base in self.bases() {
            let snapshots = snapshots_of(&base.volume).await;
            for s in &snapshots {
                let view = base.view(s);
                // A table export of the same name hides the view.
                if self.find(&view.name).is_none() {
                    out.push((view.name, view.description));
                }
            }
            let mut forks = forks_of(&base.volume).await;
            forks.sort_by_key(|f| f.id);
            for f in forks {
                // A table export of the same name hides the fork; two table
                // exports of one volume list its forks once.
                if self.find(&f.name).is_some() || !forks_listed.insert(f.name.clone()) {
                    continue;
                }
                let snap = snapshots.iter().find(|s| s.id == f.base);
                let export = base.fork(&f, snap.map(|s| s.name.as_str()));
                out.push((export.name, export.description));
            }
        }
        out
    }
}

/// Between an export's name and its snapshot's in a view's name.
pub const VIEW_SEPARATOR: char = '@';

/// The volume's snapshots; none (logged) when it cannot tell.
pub(crate) async fn snapshots_of<V: Volume>(volume: &V) -> Vec<Snapshot> {
    match volume.snapshots().await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list the volume's snapshots");
            Vec::new()
        }
    }
}

/// The volume's forks; none (logged) when it cannot tell.
pub(crate) async fn forks_of<V: Volume>(volume: &V) -> Vec<Fork> {
    match volume.forks().await {
        Ok(f) => f,
        Err(e) => {
            tracing::debug!(error = %e, "cannot list the volume's forks");
            Vec::new()
        }
    }
}

/// `wall_ns` (ns since the Unix epoch) as RFC 3339 UTC to the second;
/// "at an unknown time" for 0 (no time was recorded).
fn utc(wall_ns: u64) -> String {
    if wall_ns == 0 {
        return "at an unknown time".into();
    }
    zftl_core::history::rfc3339_utc(wall_ns)
}

#[cfg(test)]
mod tests {
    use super::utc;

    #[test]
    fn wall_times_print_as_rfc3339_utc() {
        assert_eq!(utc(0), "at an unknown time");
        assert_eq!(utc(1), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day of a century leap year) 12:34:56.
        assert_eq!(utc(951_827_696 * 1_000_000_000), "2000-02-29T12:34:56Z");
        assert_eq!(utc(1_798_675_200 * 1_000_000_000), "2026-12-31T00:00:00Z");
        assert_eq!(
            utc(1_798_761_599 * 1_000_000_000 + 999),
            "2026-12-31T23:59:59Z"
        );
    }
}
