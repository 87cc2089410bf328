//! Snapshots and the versions they keep (docs/design.md, "Snapshots and
//! time"): the live snapshot list, each logical block's birth epoch, and
//! the history of versions that a snapshot still needs after the volume
//! replaced them.
//!
//! This module only keeps the books. It holds no blocks itself: a kept
//! version names a shared entry (or "unmapped"), and [`crate::mapping`]
//! takes and drops the references, so GC, reads and the checkpoint treat a
//! kept block like any shared block.
//!
//! Whether a version is needed is a pure function of its birth epoch, its
//! kill seq and the live snapshots ([`History::needed`]), so the running
//! FTL, which sweeps a delete in steps, and recovery's replay, which sweeps
//! it at once, end in the same state.

use crate::addr::{Epoch, Lba, Seq};
use crate::checkpoint::{HistoryRecord, SnapshotRecord, LEAF_ENTRIES};
use crate::kept::Kept;
use crate::shared::SharedId;
use std::collections::btree_map::Entry;
use std::collections::hash_map::Entry as HashEntry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, Hasher};

/// A snapshot's id: handed out in increasing order, never reused.
pub type SnapshotId = u32;

/// `parent` of a snapshot taken of the live volume.
pub const LIVE_VOLUME: SnapshotId = u32::MAX;

/// The most live snapshots a volume holds (bounds the table and the
/// per-kill search).
pub const MAX_SNAPSHOTS: usize = 4096;

/// One live snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub id: SnapshotId,
    pub name: String,
    /// The epoch it closed: writes of this epoch and older are in it.
    pub epoch: Epoch,
    /// The seq of its create: every version it holds has a smaller one.
    pub create_seq: Seq,
    /// Wall time of the create as the driver gave it (ns since the Unix
    /// epoch; 0 when none was given).
    pub wall_ns: u64,
    pub parent: SnapshotId,
}

/// The first character of a protection-window point's name; user
/// snapshot names may not start with it.
pub const POINT_PREFIX: char = '@';

impl Snapshot {
    /// Whether it is a point of the protection window (taken and dropped
    /// by the core, named `@` + its wall time) rather than a user's.
    pub fn is_point(&self) -> bool {
        self.name.starts_with(POINT_PREFIX)
    }
}

/// The name of the window point taken at `wall_ns`: `@` and the time in
/// RFC 3339 UTC to the second (`@2026-11-27T06:55:43Z`).
pub fn point_name(wall_ns: u64) -> String {
    format!("{POINT_PREFIX}{}", rfc3339_utc(wall_ns))
}

/// The wall time (ns since the Unix epoch) a point's name spells, or
/// `None` when it is not one.
pub fn point_time_ns(name: &str) -> Option<u64> {
    parse_rfc3339_utc(name.strip_prefix(POINT_PREFIX)?)
}

/// Parses `YYYY-MM-DDTHH:MM:SSZ` (what [`rfc3339_utc`] writes) to ns since
/// the Unix epoch; `None` for anything else or a time before 1970.
pub fn parse_rfc3339_utc(text: &str) -> Option<u64> {
    let b = text.as_bytes();
    if b.len() != 20 || !text.is_ascii() {
        return None;
    }
    let layout_ok = b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'Z';
    if !layout_ok {
        return None;
    }
    let num = |from: usize, to: usize| text[from..to].parse::<u64>().ok();
    let (year, month, day) = (num(0, 4)?, num(5, 7)?, num(8, 10)?);
    let (hour, minute, second) = (num(11, 13)?, num(14, 16)?, num(17, 19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    if second > 59 || year < 1970 {
        return None;
    }
    // Days since 1970-01-01 from the civil date (H. Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = (era * 146_097 + doe).checked_sub(719_468)?;
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second;
    secs.checked_mul(1_000_000_000)
}

/// A replaced version of a logical block that the history keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Version {
    /// Its block as a shared entry, or `None`: the block was unmapped.
    pub value: Option<SharedId>,
    /// The epoch of the change that gave the block these contents.
    pub birth: Epoch,
}

/// `wall_ns` (ns since the Unix epoch) as RFC 3339 UTC to the second,
/// e.g. `2026-11-27T06:55:43Z`.
pub fn rfc3339_utc(wall_ns: u64) -> String {
    let secs = wall_ns / 1_000_000_000;
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Why a snapshot change was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("no snapshot named {0:?}")]
    NoSuchName(String),
    #[error("no snapshot with id {0}")]
    NoSuchId(SnapshotId),
    #[error("a snapshot named {0:?} exists")]
    NameTaken(String),
    #[error("snapshot names are 1 to {max} bytes; {len} given")]
    BadName { len: usize, max: usize },
    #[error("the volume holds the most snapshots it may ({0})")]
    TooMany(usize),
    #[error("snapshot names starting with '@' are the protection window's; {0:?} given")]
    ReservedName(String),
    #[error("snapshot {snapshot:?} is the base of fork {fork:?}; delete the fork first")]
    HasForks { snapshot: String, fork: String },
}

/// Birth epochs, in leaves that exist only where a birth is not 0.
#[derive(Clone, Debug, Default)]
struct Births {
    leaves: HashMap<u32, Box<[Epoch; LEAF_ENTRIES]>>,
}

impl Births {
    fn get(&self, lba: Lba) -> Epoch {
        let (leaf, i) = split(lba);
        self.leaves.get(&leaf).map_or(0, |l| l[i])
    }

    fn set(&mut self, lba: Lba, epoch: Epoch) {
        let (leaf, i) = split(lba);
        if epoch == 0 {
            if let Some(l) = self.leaves.get_mut(&leaf) {
                l[i] = 0;
            }
            return;
        }
        self.leaves
            .entry(leaf)
            .or_insert_with(|| Box::new([0; LEAF_ENTRIES]))[i] = epoch;
    }
}

fn split(lba: Lba) -> (u32, usize) {
    let leaf = u32::try_from(lba / LEAF_ENTRIES as u64).expect("lba within the map");
    (leaf, (lba % LEAF_ENTRIES as u64) as usize)
}

/// A delete's sweep: the kept versions from `next` (a `(kill seq, lba)`
/// key, inclusive) through kill seq `to`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Sweep {
    next: (Seq, Lba),
    to: Seq,
}

/// 64-bit FNV-1a of a snapshot name, its bits mixed at the end so that
/// the low ones (which pick a bucket) and the high ones (which the table's
/// control bytes take) both depend on every byte.
fn name_hash(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 32;
    h = h.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^ (h >> 29)
}

/// Hashes a [`name_hash`] key as itself.
#[derive(Clone, Copy, Debug, Default)]
struct KeyHash;

impl BuildHasher for KeyHash {
    type Hasher = KeyHasher;
    fn build_hasher(&self) -> KeyHasher {
        KeyHasher(0)
    }
}

struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The live snapshots' ids by name, keyed by a hash of the name
/// ([`name_hash`]): a name is stored once, in its [`Snapshot`], and
/// compared there on a lookup. Bounded by [`MAX_SNAPSHOTS`] like the list.
#[derive(Clone, Debug)]
struct NameIndex {
    /// A name's hash → the id of the live snapshot of that name, or of the
    /// first of several whose names share the hash.
    first: HashMap<u64, SnapshotId, KeyHash>,
    /// The others of those (two names with one 64-bit hash: rare).
    more: Vec<SnapshotId>,
    hash: fn(&str) -> u64,
}

impl Default for NameIndex {
    fn default() -> NameIndex {
        NameIndex::with_hash(name_hash)
    }
}

impl NameIndex {
    fn with_hash(hash: fn(&str) -> u64) -> NameIndex {
        NameIndex {
            first: HashMap::default(),
            more: Vec::new(),
            hash,
        }
    }

    fn reserve(&mut self, n: usize) {
        self.first.reserve(n);
    }

    /// The id of the snapshot named `name`; `named(id)` gives a live id's
    /// name.
    fn get<'a>(&self, name: &str, named: impl Fn(SnapshotId) -> &'a str) -> Option<SnapshotId> {
        let id = *self.first.get(&(self.hash)(name))?;
        if named(id) == name {
            return Some(id);
        }
        self.more.iter().copied().find(|&m| named(m) == name)
    }

    /// Adds `id`, named `name` (no live snapshot has that name).
    fn insert(&mut self, name: &str, id: SnapshotId) {
        match self.first.entry((self.hash)(name)) {
            HashEntry::Occupied(_) => self.more.push(id),
            HashEntry::Vacant(slot) => {
                slot.insert(id);
            }
        }
    }

    /// Adds `id`, named `name`, unless a live snapshot has that name
    /// (`named(id)` gives a live id's name): one hash of the name for the
    /// look-up and the insert. Returns whether it was added.
    fn insert_new<'a>(
        &mut self,
        name: &str,
        id: SnapshotId,
        named: impl Fn(SnapshotId) -> &'a str,
    ) -> bool {
        match self.first.entry((self.hash)(name)) {
            HashEntry::Vacant(slot) => {
                slot.insert(id);
                true
            }
            HashEntry::Occupied(first) => {
                let taken =
                    named(*first.get()) == name || self.more.iter().any(|&m| named(m) == name);
                if !taken {
                    self.more.push(id);
                }
                !taken
            }
        }
    }

    /// Drops `id`, named `name`; `named` gives the names of the ids still
    /// live.
    fn remove<'a>(&mut self, name: &str, id: SnapshotId, named: impl Fn(SnapshotId) -> &'a str) {
        if let Some(i) = self.more.iter().position(|&m| m == id) {
            self.more.swap_remove(i);
            return;
        }
        let key = (self.hash)(name);
        if self.first.get(&key) != Some(&id) {
            return;
        }
        let hash = self.hash;
        match self.more.iter().position(|&m| hash(named(m)) == key) {
            Some(i) => {
                let next = self.more.swap_remove(i);
                self.first.insert(key, next);
            }
            None => {
                self.first.remove(&key);
            }
        }
    }
}

/// Index of snapshot `id` in `snapshots` (by id).
fn index_of(snapshots: &[Snapshot], id: SnapshotId) -> Option<usize> {
    snapshots.binary_search_by_key(&id, |s| s.id).ok()
}

/// The name of snapshot `id` in `snapshots` (by id), or "".
fn name_in(snapshots: &[Snapshot], id: SnapshotId) -> &str {
    index_of(snapshots, id).map_or("", |i| snapshots[i].name.as_str())
}

/// [`History::needed`] over `snapshots` (by id, so by create seq and by
/// epoch).
fn needed_by(snapshots: &[Snapshot], birth: Epoch, kill_seq: Seq) -> bool {
    // The newest snapshot created before the kill decides (it has the
    // largest epoch among those that qualify). Most kills come after the
    // newest snapshot: no search for those.
    match snapshots.last() {
        None => return false,
        Some(newest) if newest.create_seq < kill_seq => return birth <= newest.epoch,
        Some(_) => {}
    }
    let before = snapshots.partition_point(|s| s.create_seq < kill_seq);
    before > 0 && birth <= snapshots[before - 1].epoch
}

/// The snapshot books. See the module documentation.
#[derive(Clone, Debug)]
pub struct History {
    /// The admission epoch: 1 + the creates so far.
    epoch: Epoch,
    /// Live snapshots, by id (so by create seq and by epoch too).
    snapshots: Vec<Snapshot>,
    /// The live snapshots' ids by name.
    names: NameIndex,
    next_id: SnapshotId,
    births: Births,
    /// Kept versions by `(lba, kill seq)`, and by kill seq (what a sweep
    /// walks).
    kept: Kept,
    /// Kill-seq ranges whose entries a delete may have freed, not yet
    /// checked.
    sweeps: VecDeque<Sweep>,
    /// Bound on `entries`.
    capacity: u64,
}

impl History {
    /// Empty books holding at most `capacity` versions, at epoch `epoch`.
    pub fn new(capacity: u64, epoch: Epoch) -> History {
        History {
            epoch: epoch.max(1),
            snapshots: Vec::new(),
            names: NameIndex::default(),
            next_id: 0,
            births: Births::default(),
            kept: Kept::default(),
            sweeps: VecDeque::new(),
            capacity,
        }
    }

    /// The books a checkpoint recorded; checked for internal order. The
    /// birth leaves are taken, not copied.
    pub fn from_checkpoint(
        capacity: u64,
        epoch: Epoch,
        snapshots: Vec<SnapshotRecord>,
        next_id: SnapshotId,
        births: Vec<crate::checkpoint::Leaf>,
        entries: &[HistoryRecord],
        sweeps: &[(Seq, Seq)],
    ) -> Result<History, String> {
        let mut h = History::new(capacity, epoch);
        h.next_id = next_id;
        h.snapshots.reserve_exact(snapshots.len());
        h.names.reserve(snapshots.len());
        for s in snapshots {
            if s.deleting {
                return Err(format!("snapshot {} is marked deleting", s.id));
            }
            if h.snapshots.last().is_some_and(|p| p.id >= s.id) {
                return Err(format!("snapshot {} out of id order", s.id));
            }
            let list = &h.snapshots;
            let named = |id| name_in(list, id);
            let name = s.name.as_str();
            if !h.names.insert_new(name, s.id, named) {
                return Err(format!("two snapshots are named {name:?}"));
            }
            h.snapshots.push(Snapshot {
                id: s.id,
                name: name.to_owned(),
                epoch: s.epoch,
                create_seq: s.create_seq,
                wall_ns: s.wall_ns,
                parent: s.parent,
            });
        }
        h.births.leaves.extend(births);
        if entries.len() as u64 > capacity {
            return Err(format!(
                "{} history entries, above the bound of {capacity}",
                entries.len()
            ));
        }
        h.kept = Kept::loaded(
            entries
                .iter()
                .map(|e| {
                    let version = Version {
                        value: e.value,
                        birth: e.birth,
                    };
                    ((e.lba, e.kill_seq), version)
                })
                .collect(),
        )?;
        h.sweeps.extend(sweeps.iter().map(|&(from, to)| Sweep {
            next: (from + 1, 0),
            to,
        }));
        Ok(h)
    }

    // ----- queries --------------------------------------------------------

    /// The admission epoch.
    pub fn epoch(&self) -> Epoch {
        self.epoch
    }

    /// Whether replaced versions may be needed: a snapshot is live.
    #[inline]
    pub fn keeps_versions(&self) -> bool {
        !self.snapshots.is_empty()
    }

    /// Live snapshots, by id.
    pub fn snapshots(&self) -> &[Snapshot] {
        &self.snapshots
    }

    /// The next id a create takes.
    pub fn next_id(&self) -> SnapshotId {
        self.next_id
    }

    pub fn by_name(&self, name: &str) -> Option<&Snapshot> {
        let named = |id| name_in(&self.snapshots, id);
        let id = self.names.get(name, named)?;
        self.by_id(id)
    }

    pub fn by_id(&self, id: SnapshotId) -> Option<&Snapshot> {
        index_of(&self.snapshots, id).map(|i| &self.snapshots[i])
    }

    /// Kept versions.
    pub fn entry_count(&self) -> u64 {
        self.kept.len() as u64
    }

    /// Versions that may still be kept before the bound.
    pub fn room(&self) -> u64 {
        self.capacity - self.entry_count()
    }

    /// `lba`'s birth epoch (0: before any snapshot).
    pub fn birth(&self, lba: Lba) -> Epoch {
        self.births.get(lba)
    }

    /// Whether a version born in `birth` and killed at `kill_seq` is needed
    /// by a live snapshot: one has `birth <= e_s` and `c_s < kill_seq`.
    pub fn needed(&self, birth: Epoch, kill_seq: Seq) -> bool {
        needed_by(&self.snapshots, birth, kill_seq)
    }

    /// The version of `lba` at the snapshot of create seq `create_seq`
    /// and epoch `epoch`: `Some(value)` from the history (`Some(None)`:
    /// unmapped), `None` when the live entry is that version.
    ///
    /// The version live at the snapshot, if it was mapped, is needed by it
    /// and so kept when replaced, with the smallest kill seq above the
    /// create's of all versions born by then. An unmapped version is never
    /// kept: a block whose first later version (kept or live) was born
    /// after the snapshot was unmapped at it.
    pub fn version_at(&self, lba: Lba, create_seq: Seq, epoch: Epoch) -> Option<Option<SharedId>> {
        let first = self
            .kept
            .range((lba, create_seq.saturating_add(1))..(lba + 1, 0))
            .next()
            .map(|(_, v)| v);
        match first {
            Some(v) if v.birth <= epoch => Some(v.value),
            Some(_) => Some(None),
            None if self.birth(lba) <= epoch => None,
            None => Some(None),
        }
    }

    /// The blocks of `[start, end)` that may differ from the snapshot of
    /// create seq `create_seq` and epoch `epoch`: those with a version
    /// killed after it (kept, so some snapshot needs it) or born after it.
    /// Any block changed since is among them (its version at the snapshot
    /// was mapped and kept when replaced, or unmapped and the change gave
    /// it a birth). In lba order, no repeats. Costs the kept versions of
    /// the range and a look at each birth of its leaves.
    pub fn changed_candidates(
        &self,
        start: Lba,
        end: Lba,
        create_seq: Seq,
        epoch: Epoch,
    ) -> Vec<Lba> {
        let mut out: Vec<Lba> = self
            .kept
            .range((start, 0)..(end, 0))
            .filter(|&((_, kill_seq), _)| kill_seq > create_seq)
            .map(|((lba, _), _)| lba)
            .collect();
        if start < end {
            let (first, _) = split(start);
            let (last, _) = split(end - 1);
            for index in first..=last {
                let Some(leaf) = self.births.leaves.get(&index) else {
                    continue;
                };
                let base = u64::from(index) * LEAF_ENTRIES as u64;
                let born_after = leaf.iter().enumerate().filter(|(_, &b)| b > epoch);
                out.extend(
                    born_after
                        .map(|(i, _)| base + i as u64)
                        .filter(|lba| (start..end).contains(lba)),
                );
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Every kept version `(lba, kill seq, version)`, by lba then kill seq.
    pub fn entries(&self) -> impl Iterator<Item = (Lba, Seq, Version)> + '_ {
        self.kept.iter().map(|((l, q), v)| (l, q, v))
    }

    /// Leaves of births, for the checkpoint (by leaf index).
    pub fn birth_leaves(&self) -> Vec<crate::checkpoint::Leaf> {
        let mut out: Vec<_> = self
            .births
            .leaves
            .iter()
            .filter(|(_, l)| l.iter().any(|&b| b != 0))
            .map(|(&i, l)| (i, l.clone()))
            .collect();
        out.sort_unstable_by_key(|(i, _)| *i);
        out
    }

    /// Delete sweeps not yet run, as kill-seq ranges `(from, to]`.
    pub fn pending_sweeps(&self) -> impl Iterator<Item = (Seq, Seq)> + '_ {
        self.sweeps.iter().map(|s| (s.next.0 - 1, s.to))
    }

    /// Bytes the books hold (the kept versions' as `kept.rs` counts them:
    /// the loaded array, or the ordered maps).
    pub fn memory_bytes(&self) -> u64 {
        let leaves = self.births.leaves.len() as u64 * (4 * LEAF_ENTRIES as u64 + 16);
        self.kept.memory_bytes() + leaves + self.snapshots.len() as u64 * 96
    }

    // ----- changes --------------------------------------------------------

    /// A change of epoch `self.epoch()` gave `lba` new contents. Births are
    /// kept from the first create until the books are empty again.
    #[inline]
    pub fn born(&mut self, lba: Lba) {
        if !self.is_idle() {
            self.births.set(lba, self.epoch);
        }
    }

    /// Keeps `lba`'s version replaced at `kill_seq` (`None`: unmapped; the
    /// running core keeps none of those, see [`Self::version_at`]).
    pub fn keep(&mut self, lba: Lba, kill_seq: Seq, value: Option<SharedId>, birth: Epoch) {
        assert!(self.room() > 0, "history kept past its bound");
        self.insert(lba, kill_seq, value, birth);
    }

    fn insert(&mut self, lba: Lba, kill_seq: Seq, value: Option<SharedId>, birth: Epoch) {
        let (entries, by_kill) = self.kept.maps();
        let old = entries.insert((lba, kill_seq), Version { value, birth });
        assert!(
            old.is_none(),
            "block {lba} replaced twice at seq {kill_seq}"
        );
        by_kill.insert((kill_seq, lba));
    }

    /// Checks a create's arguments against the books.
    pub fn check_create(&self, name: &str) -> Result<(), SnapshotError> {
        let max = crate::checkpoint::MAX_SNAPSHOT_NAME_BYTES;
        if name.is_empty() || name.len() > max {
            return Err(SnapshotError::BadName {
                len: name.len(),
                max,
            });
        }
        if self.by_name(name).is_some() {
            return Err(SnapshotError::NameTaken(name.to_string()));
        }
        if self.snapshots.len() >= MAX_SNAPSHOTS {
            return Err(SnapshotError::TooMany(MAX_SNAPSHOTS));
        }
        Ok(())
    }

    /// Checks a name a user gives a snapshot: as [`Self::check_create`],
    /// and not a window point's.
    pub fn check_user_create(&self, name: &str) -> Result<(), SnapshotError> {
        if name.starts_with(POINT_PREFIX) {
            return Err(SnapshotError::ReservedName(name.to_string()));
        }
        self.check_create(name)
    }

    /// The oldest and the newest window point.
    pub fn points(&self) -> (Option<&Snapshot>, Option<&Snapshot>) {
        let mut points = self.snapshots.iter().filter(|s| s.is_point());
        let oldest = points.next();
        (oldest, points.next_back().or(oldest))
    }

    /// Takes snapshot `id` at `create_seq`: it closes the current epoch.
    pub fn create(&mut self, id: SnapshotId, name: &str, create_seq: Seq, wall_ns: u64) {
        assert!(id >= self.next_id, "snapshot id {id} reused");
        assert!(
            self.snapshots
                .last()
                .is_none_or(|s| s.create_seq < create_seq),
            "snapshot created out of seq order"
        );
        self.names.insert(name, id);
        // Replay knows a point's time from its name.
        let wall_ns = match point_time_ns(name) {
            Some(t) if wall_ns == 0 => t,
            _ => wall_ns,
        };
        self.snapshots.push(Snapshot {
            id,
            name: name.to_string(),
            epoch: self.epoch,
            create_seq,
            wall_ns,
            parent: LIVE_VOLUME,
        });
        self.next_id = id + 1;
        self.epoch += 1;
    }

    /// Drops snapshot `id` at `delete_seq`; the versions it alone needed
    /// are released by later sweep steps.
    pub fn delete(&mut self, id: SnapshotId, delete_seq: Seq) -> Result<(), SnapshotError> {
        let i = index_of(&self.snapshots, id).ok_or(SnapshotError::NoSuchId(id))?;
        let s = self.snapshots.remove(i);
        let snapshots = &self.snapshots;
        self.names
            .remove(&s.name, s.id, |id| name_in(snapshots, id));
        // Older kills never needed it; newer ones it needed, the next
        // snapshot needs too.
        let to = self.snapshots.get(i).map_or(delete_seq, |n| n.create_seq);
        self.sweeps.push_back(Sweep {
            next: (s.create_seq + 1, 0),
            to,
        });
        Ok(())
    }

    /// Checks up to `budget` kept versions of the pending sweeps; returns
    /// the values of those no longer needed (the caller drops their
    /// references). Once no snapshot is left and the sweeps are done, the
    /// births are dropped.
    pub fn sweep_step(&mut self, budget: &mut u64) -> Vec<Option<SharedId>> {
        let mut freed = Vec::new();
        if self.sweeps.is_empty() {
            self.drop_births_if_idle();
            return Vec::new();
        }
        let (entries, by_kill) = self.kept.maps();
        while let Some(&Sweep { next, to }) = self.sweeps.front() {
            let mut resume = None;
            for &(q, lba) in by_kill.range(next..) {
                if q > to {
                    break;
                }
                if *budget == 0 {
                    resume = Some((q, lba));
                    break;
                }
                *budget -= 1;
                // One search finds the entry and, when freed, removes it.
                // Sweeps may overlap (a delete of an older snapshot after
                // a newer one's, before the newer one's sweep ran): an
                // entry an earlier sweep of this step freed is gone.
                let Entry::Occupied(entry) = entries.entry((lba, q)) else {
                    continue;
                };
                if !needed_by(&self.snapshots, entry.get().birth, q) {
                    freed.push((q, lba, entry.remove().value));
                }
            }
            match resume {
                Some(at) => self.sweeps[0].next = at,
                None => {
                    self.sweeps.pop_front();
                }
            }
            if resume.is_some() || *budget == 0 {
                break;
            }
        }
        // Released in kill-seq order, whatever the order of the sweeps.
        freed.sort_unstable_by_key(|&(q, lba, _)| (q, lba));
        let values = freed
            .into_iter()
            .map(|(q, lba, value)| {
                by_kill.remove(&(q, lba));
                value
            })
            .collect();
        self.drop_births_if_idle();
        values
    }

    /// Runs every pending sweep at once (replay).
    pub fn sweep_all(&mut self) -> Vec<Option<SharedId>> {
        let mut budget = u64::MAX;
        self.sweep_step(&mut budget)
    }

    pub fn sweeping(&self) -> bool {
        !self.sweeps.is_empty()
    }

    /// No snapshot, kept version or sweep: births are not needed.
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.snapshots.is_empty() && self.kept.is_empty() && self.sweeps.is_empty()
    }

    fn drop_births_if_idle(&mut self) {
        if self.is_idle() {
            self.births.leaves.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_follows_birth_and_kill() {
        let mut h = History::new(100, 1);
        assert!(!h.needed(0, 5), "no snapshot, nothing needed");
        h.create(0, "a", 10, 0); // closes epoch 1
        h.create(1, "b", 20, 0); // closes epoch 2
        assert_eq!(h.epoch(), 3);
        assert!(h.needed(1, 11), "born in a, killed after a");
        assert!(!h.needed(2, 15), "born after a, killed before b");
        assert!(h.needed(2, 21), "born before b, killed after");
        assert!(!h.needed(3, 25), "born after every snapshot");
        assert!(!h.needed(1, 9), "killed before every snapshot");
        h.delete(1, 30).unwrap();
        assert!(!h.needed(2, 21));
        assert!(h.needed(1, 21), "a still needs what it held");
    }

    #[test]
    fn version_at_takes_the_first_kill_after_the_snapshot() {
        let mut h = History::new(100, 1);
        h.create(0, "a", 10, 0);
        h.keep(7, 12, Some(3), 1);
        h.born(7);
        h.create(1, "b", 20, 0);
        h.keep(7, 25, Some(4), 2);
        h.born(7);
        // Written after b, replaced, and the first version after a.
        h.born(9);
        h.create(2, "c", 30, 0);
        h.keep(9, 31, Some(5), 3);
        h.born(9);
        assert_eq!(h.version_at(7, 10, 1), Some(Some(3)));
        assert_eq!(h.version_at(7, 20, 2), Some(Some(4)));
        assert_eq!(h.version_at(7, 30, 3), None, "the live entry");
        assert_eq!(h.version_at(8, 10, 1), None, "never changed: live");
        assert_eq!(h.version_at(9, 10, 1), Some(None), "unmapped at a");
        assert_eq!(h.version_at(9, 30, 3), Some(Some(5)));
    }

    #[test]
    fn delete_sweeps_what_only_it_needed_in_steps() {
        let mut h = History::new(100, 1);
        h.create(0, "a", 10, 0);
        for lba in 0..5 {
            h.keep(lba, 11 + lba, Some(lba as u32), 1);
        }
        h.create(1, "b", 20, 0);
        h.keep(9, 21, Some(9), 1); // needed by both
        h.keep(8, 22, Some(8), 2); // needed by b alone
        h.delete(0, 200).unwrap();
        let mut freed = Vec::new();
        let mut steps = 0;
        while h.sweeping() {
            let mut budget = 2;
            freed.extend(h.sweep_step(&mut budget));
            steps += 1;
        }
        freed.sort();
        assert_eq!(freed, (0..5).map(Some).collect::<Vec<_>>());
        assert!(steps >= 3, "a budget of 2 takes several steps");
        assert_eq!(h.entry_count(), 2);
        h.delete(1, 200).unwrap();
        let mut rest = h.sweep_all();
        rest.sort();
        assert_eq!(rest, vec![Some(8), Some(9)]);
        assert_eq!(h.birth_leaves().len(), 0);
    }

    #[test]
    fn overlapping_sweeps_release_an_entry_once() {
        let mut h = History::new(100, 1);
        h.create(0, "a", 10, 0);
        h.keep(1, 11, Some(1), 1);
        h.create(1, "b", 20, 0);
        h.keep(2, 21, Some(2), 1);
        h.create(2, "c", 30, 0);
        // b's sweep is (20, 30]; a's, deleted after, (10, 30].
        h.delete(1, 40).unwrap();
        h.delete(0, 41).unwrap();
        // (21, lba 2) is in both ranges; c needs neither version.
        let mut freed = h.sweep_all();
        freed.sort();
        assert_eq!(freed, vec![Some(1), Some(2)]);
        assert_eq!(h.entry_count(), 0);
    }

    #[test]
    fn a_sweep_step_never_exceeds_its_budget() {
        let mut h = History::new(1000, 1);
        h.create(0, "a", 10, 0);
        for lba in 0..300 {
            h.keep(lba, 100, Some(lba as u32), 1); // one kill seq, many blocks
        }
        h.delete(0, 200).unwrap();
        let mut total = 0;
        while h.sweeping() {
            let mut budget = 7;
            total += h.sweep_step(&mut budget).len();
            assert!(budget <= 7);
        }
        assert_eq!(total, 300);
        assert_eq!(h.entry_count(), 0);
    }

    #[test]
    fn from_checkpoint_loads_records_in_any_order_and_refuses_repeats() {
        let record = |lba, kill_seq, value| HistoryRecord {
            lba,
            kill_seq,
            value,
            birth: 1,
        };
        let snapshot = SnapshotRecord {
            id: 0,
            epoch: 1,
            create_seq: 10,
            wall_ns: 0,
            parent: LIVE_VOLUME,
            deleting: false,
            name: "a".into(),
        };
        let load = |entries: &[HistoryRecord]| {
            History::from_checkpoint(100, 2, vec![snapshot.clone()], 1, Vec::new(), entries, &[])
        };
        let sorted = [
            record(3, 12, Some(1)),
            record(3, 15, Some(2)),
            record(4, 11, None),
            record(9, 13, Some(3)),
        ];
        let mut shuffled = sorted;
        shuffled.reverse();
        shuffled.swap(0, 2);
        for entries in [&sorted[..], &shuffled[..]] {
            let mut h = load(entries).unwrap();
            assert!(matches!(h.kept, Kept::Loaded(_)), "loaded as an array");
            // The same answers from the loaded array and, after the maps
            // are built, from the maps.
            for built in [false, true] {
                let kept: Vec<_> = h.entries().map(|(l, q, v)| (l, q, v.value)).collect();
                assert_eq!(
                    kept,
                    vec![
                        (3, 12, Some(1)),
                        (3, 15, Some(2)),
                        (4, 11, None),
                        (9, 13, Some(3))
                    ],
                    "built {built}"
                );
                assert_eq!(h.version_at(3, 10, 1), Some(Some(1)));
                assert_eq!(h.version_at(3, 12, 1), Some(Some(2)));
                assert_eq!(h.version_at(3, 15, 1), None);
                assert_eq!(h.version_at(4, 10, 1), Some(None));
                assert_eq!(h.changed_candidates(0, 10, 11, 1), vec![3, 9]);
                assert_eq!(h.changed_candidates(4, 9, 10, 1), vec![4]);
                assert_eq!(h.entry_count(), 4);
                let (_, by_kill) = h.kept.maps();
                let by_kill: Vec<_> = by_kill.iter().copied().collect();
                assert_eq!(by_kill, vec![(11, 4), (12, 3), (13, 9), (15, 3)]);
            }
        }
        let mut repeated = sorted.to_vec();
        repeated.push(record(3, 15, Some(7)));
        assert!(
            load(&repeated).is_err(),
            "one block replaced twice at one seq"
        );
        assert!(
            History::from_checkpoint(3, 2, Vec::new(), 1, Vec::new(), &sorted, &[]).is_err(),
            "more entries than the bound"
        );
    }

    #[test]
    fn a_loaded_history_keeps_and_sweeps_as_a_built_one() {
        let record = |lba, kill_seq| HistoryRecord {
            lba,
            kill_seq,
            value: Some(lba as u32),
            birth: 1,
        };
        let snapshot = SnapshotRecord {
            id: 0,
            epoch: 1,
            create_seq: 10,
            wall_ns: 0,
            parent: LIVE_VOLUME,
            deleting: false,
            name: "a".into(),
        };
        let records = [record(3, 12), record(4, 11), record(9, 13)];
        let load = || {
            History::from_checkpoint(100, 2, vec![snapshot.clone()], 1, Vec::new(), &records, &[])
                .unwrap()
        };
        let mut built = load();
        built.kept.maps();
        for mut h in [load(), built] {
            h.keep(5, 14, Some(5), 1);
            assert_eq!(h.version_at(5, 10, 1), Some(Some(5)));
            assert_eq!(h.entry_count(), 4);
            h.delete(0, 20).unwrap();
            let mut freed = h.sweep_all();
            freed.sort_unstable();
            assert_eq!(freed, vec![Some(3), Some(4), Some(5), Some(9)]);
            assert!(h.is_idle());
        }
    }

    #[test]
    fn names_that_share_a_hash_are_told_apart() {
        let names = ["a", "b", "c", "d"];
        let named = |id: SnapshotId| names.get(id as usize).copied().unwrap_or("");
        // Every name hashes alike: all but the first go to `more`.
        let mut index = NameIndex::with_hash(|_| 7);
        for (id, name) in names.iter().enumerate() {
            index.insert(name, id as SnapshotId);
        }
        for (id, name) in names.iter().enumerate() {
            assert_eq!(index.get(name, named), Some(id as SnapshotId));
        }
        assert_eq!(index.get("e", named), None);
        // Dropping the first promotes another of its hash.
        index.remove("a", 0, named);
        assert_eq!(index.get("a", named), None);
        for (id, name) in names.iter().enumerate().skip(1) {
            assert_eq!(index.get(name, named), Some(id as SnapshotId));
        }
        index.remove("c", 2, named);
        index.remove("b", 1, named);
        assert_eq!(index.get("d", named), Some(3));
        assert_eq!((index.get("b", named), index.get("c", named)), (None, None));
        index.remove("d", 3, named);
        assert!(index.first.is_empty() && index.more.is_empty());
    }

    #[test]
    fn a_name_is_added_once_whatever_its_hash_shares() {
        let names = ["a", "b", "c"];
        let named = |id: SnapshotId| names.get(id as usize).copied().unwrap_or("");
        let mut index = NameIndex::with_hash(|_| 7);
        assert!(index.insert_new("a", 0, named));
        assert!(index.insert_new("b", 1, named), "another name, same hash");
        assert!(!index.insert_new("a", 2, named), "the first of the hash");
        assert!(!index.insert_new("b", 2, named), "one in `more`");
        assert!(index.insert_new("c", 2, named));
        assert_eq!(index.more, vec![1, 2]);
        for (id, name) in names.iter().enumerate() {
            assert_eq!(index.get(name, named), Some(id as SnapshotId));
        }
    }

    #[test]
    fn a_checkpoint_with_a_name_twice_is_refused() {
        let record = |id: u32, name: &str| SnapshotRecord {
            id,
            epoch: id + 1,
            create_seq: u64::from(id) + 10,
            wall_ns: 0,
            parent: LIVE_VOLUME,
            deleting: false,
            name: name.into(),
        };
        let load = |records: Vec<SnapshotRecord>| {
            History::from_checkpoint(10, 5, records, 4, Vec::new(), &[], &[])
        };
        let h = load(vec![record(0, "a"), record(1, "b"), record(3, "c")]).unwrap();
        assert_eq!(h.by_name("c").map(|s| s.id), Some(3));
        assert_eq!(h.by_id(1).map(|s| s.name.as_str()), Some("b"));
        assert!(load(vec![record(0, "a"), record(1, "b"), record(2, "a")]).is_err());
        assert!(
            load(vec![record(1, "a"), record(0, "b")]).is_err(),
            "id order"
        );
    }

    #[test]
    fn deletes_keep_the_list_and_its_searches_right() {
        let mut h = History::new(10, 1);
        for id in 0..50u32 {
            h.create(id, &format!("s{id}"), 10 * u64::from(id) + 1, 0);
        }
        for id in [0, 7, 8, 49, 20] {
            h.delete(id, 1000).unwrap();
        }
        assert_eq!(h.delete(7, 1001), Err(SnapshotError::NoSuchId(7)));
        assert_eq!(h.snapshots().len(), 45);
        assert_eq!(h.by_id(9).map(|s| s.name.as_str()), Some("s9"));
        // A kill after snapshot 9 (created at seq 91), before 10's create.
        assert!(h.needed(10, 95) && !h.needed(11, 95));
    }

    #[test]
    fn names_are_found_after_creates_and_deletes() {
        let mut h = History::new(10, 1);
        for id in 0..300u32 {
            h.create(id, &format!("s{id}"), u64::from(id) + 1, 0);
        }
        for id in (0..300u32).step_by(3) {
            h.delete(id, 1000 + u64::from(id)).unwrap();
        }
        for id in 0..300u32 {
            let found = h.by_name(&format!("s{id}")).map(|s| s.id);
            assert_eq!(found, (id % 3 != 0).then_some(id), "s{id}");
        }
        assert_eq!(h.check_create("s3"), Ok(()));
        assert_eq!(
            h.check_create("s4"),
            Err(SnapshotError::NameTaken("s4".into()))
        );
    }

    #[test]
    fn create_checks_names_and_bounds() {
        let mut h = History::new(10, 1);
        assert!(matches!(
            h.check_create(""),
            Err(SnapshotError::BadName { .. })
        ));
        assert!(matches!(
            h.check_create(&"x".repeat(64)),
            Err(SnapshotError::BadName { .. })
        ));
        h.create(0, "a", 1, 0);
        assert_eq!(
            h.check_create("a"),
            Err(SnapshotError::NameTaken("a".into()))
        );
        assert_eq!(h.delete(5, 9), Err(SnapshotError::NoSuchId(5)));
    }
}

#[cfg(test)]
mod point_tests {
    use super::*;

    #[test]
    fn point_names_spell_their_time_to_the_second() {
        for secs in [0u64, 59, 951_782_400, 1_795_760_143, 4_102_444_800] {
            let ns = secs * 1_000_000_000;
            let name = point_name(ns + 123);
            assert_eq!(point_time_ns(&name), Some(ns), "{name}");
        }
        assert_eq!(
            point_name(1_795_760_143_000_000_000),
            "@2026-11-27T06:15:43Z"
        );
        for bad in [
            "2026-11-27T06:55:43Z",
            "@2026-13-27T06:55:43Z",
            "@2026-11-27 06:55:43Z",
            "@x",
        ] {
            assert_eq!(point_time_ns(bad), None, "{bad}");
        }
    }
}
