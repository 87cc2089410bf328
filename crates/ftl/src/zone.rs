//! The zone table: what each zone is used for, how full and how worn it is,
//! and the policies that pick zones (allocation with dynamic wear leveling,
//! GC victims, static wear-leveling victims).
//!
//! Zone fields change only through [`ZoneTable`] methods, so the free set and
//! the counters can never disagree with the zones.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::addr::Seq;
use crate::backend::ZoneId;

/// A write stream: data of one temperature/origin goes to its own zones, so
/// that zones die whole (Metis). Add variants here and decide in
/// [`Stream::gc_collects`] whether GC reclaims them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Stream {
    /// Host writes of blocks rewritten soon after their previous write (hot).
    Host,
    /// Host writes of blocks written for the first time or long ago (cold).
    HostCold,
    /// Blocks GC relocated (cold: they survived a collection).
    Gc,
    /// Blocks GC relocated that only snapshots held (no live block named
    /// them): they die when the snapshots holding them are deleted, not
    /// when the host writes. The checkpoint records these zones as GC
    /// zones; after a mount they are GC zones.
    Kept,
    /// The metadata log writer. Its zones are normally [`ZoneKind::Meta`] and
    /// are reclaimed by checkpointing, not by GC.
    Meta,
    /// Nameless writes (the physical segment): a block stays at the address
    /// it was given until GC migrates it (telling the client by an event),
    /// so the logical GC never copies these zones.
    Nameless,
    /// Nameless blocks GC migrated (a migration's copies): survivors, kept
    /// apart from fresh nameless writes as GC's are from the host's.
    NamelessMoved,
}

impl Stream {
    /// Whether GC picks victims among this stream's data zones.
    pub fn gc_collects(self) -> bool {
        match self {
            Stream::Host | Stream::HostCold | Stream::Gc | Stream::Kept => true,
            Stream::Meta | Stream::Nameless | Stream::NamelessMoved => false,
        }
    }

    /// Whether this stream's zones hold nameless blocks.
    pub fn is_nameless(self) -> bool {
        matches!(self, Stream::Nameless | Stream::NamelessMoved)
    }
}

/// The kind of a zone of nameless data.
pub const NAMELESS: ZoneKind = ZoneKind::Data {
    stream: Stream::Nameless,
};

/// The kind of a zone of migrated nameless blocks.
pub const NAMELESS_MOVED: ZoneKind = ZoneKind::Data {
    stream: Stream::NamelessMoved,
};

/// How many copies GC's victim choice counts for a live block of a kept
/// zone (`Stream::Kept`). Those blocks die, with no copy, when the
/// snapshots holding them are deleted: a kept zone with dead blocks is
/// one whose snapshots are going, and waiting for the rest to die costs
/// less than copying them into another kept zone that dies the same way.
/// Greedy still takes it before zones with more than this many times its
/// live blocks (cost-benefit counts its copies this many times), so a
/// snapshot kept for long does not keep a zone's dead blocks from GC. Measured on `zftl bench snapshot`'s hot/cold WA with 4 live
/// snapshots (docs/design.md, "The kept stream"): 2 and 8 do about as
/// well as 4, 1 copies far more.
pub const KEPT_COPY_WEIGHT: u64 = 4;

/// What a zone is used for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ZoneKind {
    /// In the free set, ready to be taken.
    Free,
    /// Holds a superblock copy.
    Superblock,
    /// Holds the metadata log (notes, checkpoints).
    Meta,
    /// Holds data written by `stream`.
    Data { stream: Stream },
    /// Worn out or failed; never used again.
    Retired,
}

impl ZoneKind {
    /// True for data zones GC may collect.
    pub fn is_gc_collected(self) -> bool {
        matches!(self, ZoneKind::Data { stream } if stream.gc_collects())
    }

    /// True for zones of nameless blocks (written or migrated).
    pub fn is_nameless(self) -> bool {
        matches!(self, ZoneKind::Data { stream } if stream.is_nameless())
    }

    fn is_in_use(self) -> bool {
        !matches!(self, ZoneKind::Free | ZoneKind::Retired)
    }
}

/// The FTL's view of a zone's fill state (not the device's `ZoneState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ZoneUse {
    /// Nothing written since the last reset.
    Empty,
    /// Being written.
    Open,
    /// No more writes until reset (written to capacity or finished).
    Full,
}

/// One zone's bookkeeping. Read through getters; change through [`ZoneTable`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Zone {
    kind: ZoneKind,
    state: ZoneUse,
    write_pointer_blocks: u64,
    erase_count: u32,
    last_write_seq: Seq,
    capacity_blocks: u64,
}

impl Zone {
    pub fn kind(&self) -> ZoneKind {
        self.kind
    }
    pub fn state(&self) -> ZoneUse {
        self.state
    }
    pub fn write_pointer_blocks(&self) -> u64 {
        self.write_pointer_blocks
    }
    /// Resets the FTL has counted (persisted by the caller).
    pub fn erase_count(&self) -> u32 {
        self.erase_count
    }
    /// Newest write sequence number in the zone (age for cost-benefit GC).
    pub fn last_write_seq(&self) -> Seq {
        self.last_write_seq
    }
    pub fn capacity_blocks(&self) -> u64 {
        self.capacity_blocks
    }

    /// What a checkpoint saves of this zone (valid counts are rebuilt from
    /// the map at mount).
    pub fn record(&self) -> ZoneRecord {
        ZoneRecord {
            kind: self.kind,
            state: self.state,
            write_pointer_blocks: self.write_pointer_blocks,
            erase_count: self.erase_count,
            last_write_seq: self.last_write_seq,
        }
    }

    /// What copying one of its live blocks costs GC's victim choice.
    fn copy_weight(&self) -> u64 {
        match self.kind {
            ZoneKind::Data {
                stream: Stream::Kept,
            } => KEPT_COPY_WEIGHT,
            _ => 1,
        }
    }

    fn is_gc_candidate(&self) -> bool {
        self.state == ZoneUse::Full && self.kind.is_gc_collected()
    }
}

/// The persisted part of a zone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZoneRecord {
    pub kind: ZoneKind,
    pub state: ZoneUse,
    pub write_pointer_blocks: u64,
    pub erase_count: u32,
    pub last_write_seq: Seq,
}

/// Why saved zone records cannot form a table (a damaged image).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    #[error("no zones")]
    NoZones,
    #[error(
        "{zone_count} zones of {zone_capacity_blocks} blocks do not fit 32-bit physical addresses"
    )]
    TooManyBlocks {
        zone_count: usize,
        zone_capacity_blocks: u64,
    },
    #[error(
        "zone {zone}: write pointer {write_pointer_blocks} past capacity {capacity_blocks} blocks"
    )]
    WritePointer {
        zone: ZoneId,
        write_pointer_blocks: u64,
        capacity_blocks: u64,
    },
    #[error("zone {zone}: a {kind:?} zone cannot be {state:?} with write pointer {write_pointer_blocks}")]
    Inconsistent {
        zone: ZoneId,
        kind: ZoneKind,
        state: ZoneUse,
        write_pointer_blocks: u64,
    },
}

/// How GC picks a victim zone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum VictimPolicy {
    /// Fewest valid blocks: cheapest to collect now.
    Greedy,
    /// Maximize `age * (1 - u) / 2u` (LFS): prefers old, cold zones whose
    /// remaining data is unlikely to be overwritten soon.
    #[default]
    CostBenefit,
}

impl VictimPolicy {
    fn name(self) -> &'static str {
        match self {
            VictimPolicy::Greedy => "greedy",
            VictimPolicy::CostBenefit => "cost-benefit",
        }
    }
}

impl fmt::Display for VictimPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown victim policy name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown victim policy {0:?} (expected \"greedy\" or \"cost-benefit\")")]
pub struct ParseVictimPolicyError(pub String);

impl FromStr for VictimPolicy {
    type Err = ParseVictimPolicyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [VictimPolicy::Greedy, VictimPolicy::CostBenefit]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| ParseVictimPolicyError(s.to_owned()))
    }
}

/// Erase-count spread over the zones that are not retired.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WearSpread {
    pub min_erases: u32,
    pub max_erases: u32,
    pub mean_erases: f64,
    pub stddev_erases: f64,
}

/// Every zone of the device, with the free set ordered by wear.
#[derive(Clone, Debug)]
pub struct ZoneTable {
    zones: Vec<Zone>,
    /// Free zones keyed `(erase_count, zone)`: the first is the least worn.
    free: BTreeSet<(u32, ZoneId)>,
    data_zones: u32,
    /// Zones of kind `Data { stream: Nameless }`.
    nameless_zones: u32,
}

impl ZoneTable {
    /// A fresh device: every zone free, never erased.
    pub fn new(zone_count: u32, zone_capacity_blocks: u64) -> ZoneTable {
        assert!(zone_count > 0 && zone_capacity_blocks > 0, "empty device");
        assert!(
            fits_ppa(zone_count as usize, zone_capacity_blocks),
            "device above 2^32 blocks"
        );
        let zone = Zone {
            kind: ZoneKind::Free,
            state: ZoneUse::Empty,
            write_pointer_blocks: 0,
            erase_count: 0,
            last_write_seq: 0,
            capacity_blocks: zone_capacity_blocks,
        };
        ZoneTable {
            zones: vec![zone; zone_count as usize],
            free: (0..zone_count).map(|z| (0, z)).collect(),
            data_zones: 0,
            nameless_zones: 0,
        }
    }

    /// Rebuilds the table from checkpoint records, one per zone. Valid counts
    /// start at 0: the caller adds them back from the map.
    pub fn from_records(
        zone_capacity_blocks: u64,
        records: &[ZoneRecord],
    ) -> Result<ZoneTable, ZoneError> {
        if records.is_empty() || zone_capacity_blocks == 0 {
            return Err(ZoneError::NoZones);
        }
        if !fits_ppa(records.len(), zone_capacity_blocks) {
            return Err(ZoneError::TooManyBlocks {
                zone_count: records.len(),
                zone_capacity_blocks,
            });
        }
        let mut table = ZoneTable::new(records.len() as u32, zone_capacity_blocks);
        for (z, record) in records.iter().enumerate() {
            check_record(z as ZoneId, zone_capacity_blocks, record)?;
            table.restore(z as ZoneId, record);
        }
        table.assert_consistent();
        Ok(table)
    }

    pub fn zone_count(&self) -> u32 {
        self.zones.len() as u32
    }

    pub fn capacity_blocks(&self) -> u64 {
        self.zones[0].capacity_blocks
    }

    pub fn get(&self, z: ZoneId) -> &Zone {
        assert!((z as usize) < self.zones.len(), "zone {z} does not exist");
        &self.zones[z as usize]
    }

    /// Every zone with its id.
    pub fn iter(&self) -> impl Iterator<Item = (ZoneId, &Zone)> + '_ {
        self.zones
            .iter()
            .enumerate()
            .map(|(z, zone)| (z as ZoneId, zone))
    }

    /// The free zones, least worn first.
    pub fn free_zones(&self) -> impl Iterator<Item = ZoneId> + '_ {
        self.free.iter().map(|&(_, z)| z)
    }

    /// Zones in the free set.
    pub fn free_count(&self) -> u32 {
        self.free.len() as u32
    }

    /// Zones holding nameless data, written or migrated (or opened for it).
    pub fn nameless_zone_count(&self) -> u32 {
        self.nameless_zones
    }

    /// Zones of kind `Data` (any stream).
    pub fn data_zone_count(&self) -> u32 {
        self.data_zones
    }

    /// Dynamic wear leveling: takes the least-worn free zone (ties: lowest
    /// id) for `kind` and opens it. O(log zones).
    pub fn take_free(&mut self, kind: ZoneKind) -> Option<ZoneId> {
        let &(_, z) = self.free.first()?;
        self.claim(z, kind);
        Some(z)
    }

    /// Like [`Self::take_free`], but among the `scan` least-worn free zones
    /// the one with the lowest `crowding` (ties to the least worn, then the
    /// lowest id): the lanes spread their open zones over the device's
    /// parallel units. O(scan + log zones).
    pub fn take_free_spread(
        &mut self,
        kind: ZoneKind,
        scan: usize,
        crowding: impl Fn(ZoneId) -> u32,
    ) -> Option<ZoneId> {
        let &(_, z) = self
            .free
            .iter()
            .take(scan.max(1))
            .min_by_key(|&&(_, z)| crowding(z))?;
        self.claim(z, kind);
        Some(z)
    }

    /// The most-worn free zone and its erase count, left free. O(log zones).
    pub fn most_worn_free(&self) -> Option<(ZoneId, u32)> {
        self.free.last().map(|&(erases, z)| (z, erases))
    }

    /// Static wear leveling's destination: the most-worn free zone, where
    /// cold data rests and stops adding erases. O(log zones).
    pub fn take_free_most_worn(&mut self, kind: ZoneKind) -> Option<ZoneId> {
        let &(_, z) = self.free.last()?;
        self.claim(z, kind);
        Some(z)
    }

    /// Takes a specific free zone for `kind` (fixed superblock places,
    /// recovery replaying an allocation) and opens it.
    pub fn claim(&mut self, z: ZoneId, kind: ZoneKind) {
        assert!(kind.is_in_use(), "cannot claim a zone as {kind:?}");
        let zone = self.get(z);
        assert_eq!(zone.kind, ZoneKind::Free, "zone {z} is not free");
        assert!(
            self.free.remove(&(zone.erase_count, z)),
            "free zone {z} missing from the free set"
        );
        self.set_kind(z, kind);
        self.zones[z as usize].state = ZoneUse::Open;
    }

    /// Records `blocks` written at zone `z`'s write pointer with sequence
    /// number `seq`; the zone becomes Full when it reaches capacity.
    pub fn record_write(&mut self, z: ZoneId, blocks: u64, seq: Seq) {
        let zone = self.zone_mut(z);
        assert!(zone.kind.is_in_use(), "write to a {:?} zone {z}", zone.kind);
        assert_ne!(zone.state, ZoneUse::Full, "write to full zone {z}");
        zone.write_pointer_blocks += blocks;
        assert!(
            zone.write_pointer_blocks <= zone.capacity_blocks,
            "zone {z}: write past capacity"
        );
        zone.last_write_seq = zone.last_write_seq.max(seq);
        zone.state = if zone.write_pointer_blocks == zone.capacity_blocks {
            ZoneUse::Full
        } else {
            ZoneUse::Open
        };
    }

    /// Marks zone `z` Full before it reaches capacity (a zone finish).
    pub fn finish(&mut self, z: ZoneId) {
        let zone = self.zone_mut(z);
        assert!(
            zone.kind.is_in_use(),
            "finish of a {:?} zone {z}",
            zone.kind
        );
        zone.state = ZoneUse::Full;
    }

    /// After the FTL reset zone `z` to reuse it for the same kind (e.g. a
    /// superblock zone): counts the erase, empties it, keeps its kind.
    pub fn reset_in_place(&mut self, z: ZoneId) {
        let zone = self.zone_mut(z);
        assert!(
            zone.kind.is_in_use(),
            "in-place reset of a {:?} zone {z}",
            zone.kind
        );
        empty_after_reset(z, zone);
    }

    /// After the FTL reset zone `z`: counts the erase and returns it to the
    /// free set. It must hold no live data.
    pub fn release(&mut self, z: ZoneId) {
        let zone = self.zone_mut(z);
        assert!(
            zone.kind.is_in_use(),
            "release of a {:?} zone {z}",
            zone.kind
        );
        empty_after_reset(z, zone);
        let erase_count = zone.erase_count;
        self.set_kind(z, ZoneKind::Free);
        self.free.insert((erase_count, z));
    }

    /// Takes zone `z` out of service for good (it may still hold live data
    /// the FTL moves off it).
    pub fn retire(&mut self, z: ZoneId) {
        let zone = self.get(z);
        assert_ne!(zone.kind, ZoneKind::Retired, "zone {z} retired twice");
        self.free.remove(&(zone.erase_count, z));
        self.set_kind(z, ZoneKind::Retired);
    }

    /// GC victim among Full data zones of collected streams, skipping
    /// `exclude`d zones and zones whose every block is live (`valid` gives
    /// a zone's live blocks: the mapping owns them). A kept zone's live
    /// blocks cost [`KEPT_COPY_WEIGHT`] copies each. Ties go to the lowest
    /// id. O(zones) per call: GC asks once per zone of writes.
    pub fn pick_victim(
        &self,
        policy: VictimPolicy,
        now_seq: Seq,
        valid: impl Fn(ZoneId) -> u64,
        exclude: impl Fn(ZoneId) -> bool,
    ) -> Option<ZoneId> {
        self.pick_among(policy, now_seq, Zone::is_gc_candidate, valid, exclude)
    }

    /// GC's migration victim: by `policy`, the Full nameless zone (either
    /// nameless stream) not `exclude`d with the best score. O(zones).
    pub fn pick_nameless_victim(
        &self,
        policy: VictimPolicy,
        now_seq: Seq,
        valid: impl Fn(ZoneId) -> u64,
        exclude: impl Fn(ZoneId) -> bool,
    ) -> Option<ZoneId> {
        let candidate = |zone: &Zone| zone.state == ZoneUse::Full && zone.kind.is_nameless();
        self.pick_among(policy, now_seq, candidate, valid, exclude)
    }

    fn pick_among(
        &self,
        policy: VictimPolicy,
        now_seq: Seq,
        candidate: impl Fn(&Zone) -> bool,
        valid: impl Fn(ZoneId) -> u64,
        exclude: impl Fn(ZoneId) -> bool,
    ) -> Option<ZoneId> {
        let candidates = self.iter().filter_map(|(z, zone)| {
            let live = valid(z);
            (candidate(zone) && live < zone.capacity_blocks && !exclude(z))
                .then_some((z, zone, live))
        });
        match policy {
            VictimPolicy::Greedy => candidates
                .min_by_key(|&(_, zone, live)| live.saturating_mul(zone.copy_weight()))
                .map(|(z, ..)| z),
            VictimPolicy::CostBenefit => {
                let scored =
                    candidates.map(|(z, zone, live)| (z, CostBenefit::of(z, zone, live, now_seq)));
                let best =
                    scored.reduce(|best, next| if next.1.beats(&best.1) { next } else { best });
                best.map(|(z, _)| z)
            }
        }
    }

    /// Erase-count spread over the data and free zones (all zeros when
    /// there are none). O(zones).
    pub fn wear_spread(&self) -> WearSpread {
        let counts: Vec<f64> = self
            .in_service()
            .map(|zone| f64::from(zone.erase_count))
            .collect();
        if counts.is_empty() {
            return WearSpread::default();
        }
        let n = counts.len() as f64;
        let mean = counts.iter().sum::<f64>() / n;
        let variance = counts.iter().map(|c| (c - mean) * (c - mean)).sum::<f64>() / n;
        WearSpread {
            min_erases: self
                .in_service()
                .map(|zone| zone.erase_count)
                .min()
                .unwrap_or(0),
            max_erases: self
                .in_service()
                .map(|zone| zone.erase_count)
                .max()
                .unwrap_or(0),
            mean_erases: mean,
            stddev_erases: variance.sqrt(),
        }
    }

    /// A Full nameless zone with nothing live, not `exclude`d, least worn
    /// first: resetting it frees a zone and copies nothing. O(zones).
    pub fn pick_empty_nameless(
        &self,
        valid: impl Fn(ZoneId) -> u64,
        exclude: impl Fn(ZoneId) -> bool,
    ) -> Option<ZoneId> {
        self.iter()
            .filter(|&(z, zone)| {
                zone.kind.is_nameless()
                    && zone.state == ZoneUse::Full
                    && valid(z) == 0
                    && !exclude(z)
            })
            .min_by_key(|&(_, zone)| zone.erase_count)
            .map(|(z, _)| z)
    }

    /// Static wear leveling: the Full data zone (collected streams, not
    /// `exclude`d) with the fewest erases, if it trails the most-worn zone in
    /// service by more than `threshold_erases`. Its data is cold; moving it
    /// lets the young zone take hot writes. O(zones).
    pub fn pick_static_wl_victim(
        &self,
        threshold_erases: u32,
        exclude: impl Fn(ZoneId) -> bool,
    ) -> Option<ZoneId> {
        let max_erases = self.in_service().map(|zone| zone.erase_count).max()?;
        let (z, coldest) = self
            .iter()
            .filter(|&(z, zone)| zone.is_gc_candidate() && !exclude(z))
            .min_by_key(|&(_, zone)| zone.erase_count)?;
        (max_erases - coldest.erase_count > threshold_erases).then_some(z)
    }

    /// Checks the free set and counters against the zones. O(zones); for
    /// tests and after rebuilding.
    pub fn assert_consistent(&self) {
        let free: BTreeSet<(u32, ZoneId)> = self
            .iter()
            .filter(|(_, zone)| zone.kind == ZoneKind::Free)
            .map(|(z, zone)| (zone.erase_count, z))
            .collect();
        assert_eq!(free, self.free, "free set out of step with the zones");
        let data = self
            .iter()
            .filter(|(_, zone)| matches!(zone.kind, ZoneKind::Data { .. }))
            .count();
        assert_eq!(
            data, self.data_zones as usize,
            "data zone count out of step"
        );
        let nameless = self
            .iter()
            .filter(|(_, zone)| zone.kind.is_nameless())
            .count();
        assert_eq!(
            nameless, self.nameless_zones as usize,
            "nameless zone count out of step"
        );
        for (z, zone) in self.iter() {
            assert!(
                zone.write_pointer_blocks <= zone.capacity_blocks,
                "zone {z}: write pointer past capacity"
            );
        }
    }

    /// Zones that hold or may hold data: what wear leveling evens out. The
    /// superblock and metadata zones wear on their own schedule (the log
    /// ring rotates over its zones) and are left out.
    fn in_service(&self) -> impl Iterator<Item = &Zone> + '_ {
        self.zones
            .iter()
            .filter(|zone| matches!(zone.kind, ZoneKind::Free | ZoneKind::Data { .. }))
    }

    /// Highest erase count among the superblock and metadata zones.
    pub fn metadata_erase_max(&self) -> u32 {
        self.zones
            .iter()
            .filter(|zone| matches!(zone.kind, ZoneKind::Superblock | ZoneKind::Meta))
            .map(|zone| zone.erase_count)
            .max()
            .unwrap_or(0)
    }

    fn zone_mut(&mut self, z: ZoneId) -> &mut Zone {
        assert!((z as usize) < self.zones.len(), "zone {z} does not exist");
        &mut self.zones[z as usize]
    }

    /// The one place a kind changes, so the data-zone count follows.
    fn set_kind(&mut self, z: ZoneId, kind: ZoneKind) {
        let zone = self.zone_mut(z);
        let was_data = matches!(zone.kind, ZoneKind::Data { .. });
        let was_nameless = zone.kind.is_nameless();
        zone.kind = kind;
        let is_data = matches!(kind, ZoneKind::Data { .. });
        self.data_zones = self.data_zones + u32::from(is_data) - u32::from(was_data);
        self.nameless_zones =
            self.nameless_zones + u32::from(kind.is_nameless()) - u32::from(was_nameless);
    }

    /// Overwrites a fresh zone with a checked record.
    fn restore(&mut self, z: ZoneId, record: &ZoneRecord) {
        assert!(self.free.remove(&(0, z)), "restore of a zone not fresh");
        let zone = self.zone_mut(z);
        zone.state = record.state;
        zone.write_pointer_blocks = record.write_pointer_blocks;
        zone.erase_count = record.erase_count;
        zone.last_write_seq = record.last_write_seq;
        self.set_kind(z, record.kind);
        if record.kind == ZoneKind::Free {
            self.free.insert((record.erase_count, z));
        }
    }
}

/// Whether `zone_count * zone_capacity_blocks` fits `Ppa` (below `u32::MAX`,
/// which is `Ppa::NONE`).
fn fits_ppa(zone_count: usize, zone_capacity_blocks: u64) -> bool {
    (zone_count as u64)
        .checked_mul(zone_capacity_blocks)
        .is_some_and(|blocks| blocks < u64::from(u32::MAX))
}

/// Empties a zone the FTL just reset and counts the erase.
fn empty_after_reset(_z: ZoneId, zone: &mut Zone) {
    zone.erase_count += 1;
    zone.state = ZoneUse::Empty;
    zone.write_pointer_blocks = 0;
}

/// Refuses a record no correct FTL could have saved.
fn check_record(z: ZoneId, capacity_blocks: u64, record: &ZoneRecord) -> Result<(), ZoneError> {
    let wp = record.write_pointer_blocks;
    if wp > capacity_blocks {
        return Err(ZoneError::WritePointer {
            zone: z,
            write_pointer_blocks: wp,
            capacity_blocks,
        });
    }
    let consistent = match (record.kind, record.state) {
        (ZoneKind::Retired, _) => true,
        (ZoneKind::Free, state) => state == ZoneUse::Empty && wp == 0,
        (_, ZoneUse::Empty) => wp == 0,
        (_, ZoneUse::Open) => wp < capacity_blocks,
        (_, ZoneUse::Full) => true,
    };
    if !consistent {
        return Err(ZoneError::Inconsistent {
            zone: z,
            kind: record.kind,
            state: record.state,
            write_pointer_blocks: wp,
        });
    }
    Ok(())
}

/// A zone's cost-benefit score `age * (1 - u) / 2u` as the exact fraction
/// `age * free / valid` (the common factors cancel), compared without floats.
struct CostBenefit {
    zone: ZoneId,
    age: u128,
    free_blocks: u128,
    valid_blocks: u128,
}

impl CostBenefit {
    fn of(z: ZoneId, zone: &Zone, valid_blocks: u64, now_seq: Seq) -> CostBenefit {
        assert!(
            now_seq >= zone.last_write_seq,
            "zone {z} written after now ({now_seq})"
        );
        CostBenefit {
            zone: z,
            age: u128::from(now_seq - zone.last_write_seq) + 1,
            free_blocks: u128::from(zone.capacity_blocks - valid_blocks),
            // The cost: the copies (weighted; `Zone::copy_weight`).
            valid_blocks: u128::from(valid_blocks) * u128::from(zone.copy_weight()),
        }
    }

    /// Strictly better than `other`; an empty zone (u = 0) beats any other,
    /// and equal scores go to the lower zone id.
    fn beats(&self, other: &CostBenefit) -> bool {
        // Capacity < 2^32 blocks, weighted valid blocks < 2^35 and age <=
        // 2^64: a product may pass 2^128 only with an age no volume
        // reaches (2^61 writes), and then saturates.
        let mine = (self.age * self.free_blocks).saturating_mul(other.valid_blocks);
        let theirs = (other.age * other.free_blocks).saturating_mul(self.valid_blocks);
        match (self.valid_blocks, other.valid_blocks) {
            (0, 0) => self.zone < other.zone,
            (0, _) => true,
            (_, 0) => false,
            _ => mine > theirs || (mine == theirs && self.zone < other.zone),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOST: ZoneKind = ZoneKind::Data {
        stream: Stream::Host,
    };
    const CAP: u64 = 100;

    /// Takes zone `z` for host data, fills it, and records `valid` live
    /// blocks last written at `seq` in `live`.
    fn fill(table: &mut ZoneTable, live: &mut [u64], z: ZoneId, valid: u64, seq: Seq) {
        table.claim(z, HOST);
        table.record_write(z, CAP, seq);
        live[z as usize] = valid;
    }

    /// Takes `z`, empties it, and gives it back: one more erase.
    fn wear(table: &mut ZoneTable, z: ZoneId, erases: u32) {
        for _ in 0..erases {
            table.claim(z, HOST);
            table.release(z);
        }
    }

    #[test]
    fn allocation_takes_the_least_worn_zone() {
        let mut table = ZoneTable::new(4, CAP);
        wear(&mut table, 0, 3);
        wear(&mut table, 1, 1);
        wear(&mut table, 3, 1);
        assert_eq!(table.take_free(HOST), Some(2));
        assert_eq!(table.take_free(HOST), Some(1), "ties go to the lowest id");
        assert_eq!(table.take_free(ZoneKind::Meta), Some(3));
        assert_eq!(table.take_free(HOST), Some(0));
        assert_eq!(table.take_free(HOST), None);
        assert_eq!(table.get(1).state(), ZoneUse::Open);
        assert_eq!(table.data_zone_count(), 3);
        table.assert_consistent();
    }

    #[test]
    fn take_free_spread_picks_the_least_crowded_group() {
        let mut table = ZoneTable::new(8, CAP);
        // Two zone groups (z % 2); group 0 is crowded.
        let crowding = |z: ZoneId| if z.is_multiple_of(2) { 3 } else { 0 };
        assert_eq!(table.take_free_spread(HOST, 8, crowding), Some(1));
        assert_eq!(table.take_free_spread(HOST, 8, crowding), Some(3));
        // Only zone 0 looked at: it is taken though crowded.
        assert_eq!(table.take_free_spread(HOST, 1, crowding), Some(0));
        // Equal crowding: the least worn, then the lowest id, as take_free.
        assert_eq!(table.take_free_spread(HOST, 8, |_| 0), Some(2));
        table.assert_consistent();
    }

    #[test]
    fn release_and_retire_keep_the_sets_right() {
        let mut table = ZoneTable::new(3, CAP);
        let z = table.take_free(HOST).unwrap();
        table.record_write(z, CAP, 5);
        assert_eq!(table.get(z).state(), ZoneUse::Full);
        table.release(z);
        assert_eq!(table.get(z).erase_count(), 1);
        assert_eq!((table.free_count(), table.data_zone_count()), (3, 0));
        table.retire(1);
        assert_eq!(table.free_count(), 2);
        assert_eq!(table.take_free(HOST), Some(2));
        assert_eq!(table.take_free(HOST), Some(0));
        assert_eq!(table.take_free(HOST), None);
        table.assert_consistent();
    }

    #[test]
    fn greedy_picks_fewest_valid() {
        let mut table = ZoneTable::new(4, CAP);
        let mut live = [0u64; 4];
        fill(&mut table, &mut live, 0, 50, 1);
        fill(&mut table, &mut live, 1, 10, 2);
        fill(&mut table, &mut live, 2, 30, 3);
        assert_eq!(
            table.pick_victim(VictimPolicy::Greedy, 10, |z| live[z as usize], |_| false),
            Some(1)
        );
        assert_eq!(
            table.pick_victim(VictimPolicy::Greedy, 10, |z| live[z as usize], |z| z == 1),
            Some(2)
        );
    }

    #[test]
    fn a_kept_zone_waits_while_another_costs_less_than_its_weighted_copies() {
        let kept = ZoneKind::Data {
            stream: Stream::Kept,
        };
        let mut table = ZoneTable::new(4, CAP);
        let mut live = [0u64; 4];
        table.claim(0, kept);
        table.record_write(0, CAP, 1);
        live[0] = 20;
        fill(&mut table, &mut live, 1, 20 * KEPT_COPY_WEIGHT - 1, 1);
        let pick = |table: &ZoneTable, live: &[u64; 4], policy| {
            table.pick_victim(policy, 10, |z| live[z as usize], |_| false)
        };
        // Greedy: the kept zone waits while the other holds fewer than
        // the weight times its live blocks.
        assert_eq!(pick(&table, &live, VictimPolicy::Greedy), Some(1));
        live[1] = 20 * KEPT_COPY_WEIGHT + 1;
        assert_eq!(pick(&table, &live, VictimPolicy::Greedy), Some(0));
        // Cost-benefit: as full and as old, the host zone goes first (the
        // tie would go to the kept zone's lower id).
        live[1] = 20;
        assert_eq!(pick(&table, &live, VictimPolicy::CostBenefit), Some(1));
        // A kept zone the snapshots' deletes emptied goes first.
        live[0] = 0;
        live[1] = 1;
        for policy in [VictimPolicy::Greedy, VictimPolicy::CostBenefit] {
            assert_eq!(pick(&table, &live, policy), Some(0), "{policy:?}");
        }
    }

    #[test]
    fn open_meta_and_full_valid_zones_are_never_victims() {
        let mut table = ZoneTable::new(4, CAP);
        let mut live = [0u64; 4];
        fill(&mut table, &mut live, 0, CAP, 1);
        table.claim(1, HOST);
        table.record_write(1, 10, 2);
        table.claim(2, ZoneKind::Meta);
        table.record_write(2, CAP, 3);
        for policy in [VictimPolicy::Greedy, VictimPolicy::CostBenefit] {
            assert_eq!(
                table.pick_victim(policy, 10, |z| live[z as usize], |_| false),
                None
            );
        }
    }

    #[test]
    fn cost_benefit_prefers_old_cold_zones() {
        let mut table = ZoneTable::new(4, CAP);
        let mut live = [0u64; 4];
        fill(&mut table, &mut live, 0, 50, 90);
        fill(&mut table, &mut live, 1, 50, 10);
        fill(&mut table, &mut live, 2, 40, 95);
        // Zone 1: age 91 * 50/50 beats zone 2: age 6 * 60/40 and zone 0.
        assert_eq!(
            table.pick_victim(
                VictimPolicy::CostBenefit,
                100,
                |z| live[z as usize],
                |_| false
            ),
            Some(1)
        );
        assert_eq!(
            table.pick_victim(VictimPolicy::Greedy, 100, |z| live[z as usize], |_| false),
            Some(2)
        );
    }

    #[test]
    fn cost_benefit_takes_empty_zones_first() {
        let mut table = ZoneTable::new(4, CAP);
        let mut live = [0u64; 4];
        fill(&mut table, &mut live, 0, 1, 0);
        fill(&mut table, &mut live, 1, 0, 99);
        assert_eq!(
            table.pick_victim(
                VictimPolicy::CostBenefit,
                100,
                |z| live[z as usize],
                |_| false
            ),
            Some(1)
        );
    }

    #[test]
    fn static_wl_waits_for_the_threshold() {
        let mut table = ZoneTable::new(4, CAP);
        let mut live = [0u64; 4];
        wear(&mut table, 0, 10);
        wear(&mut table, 1, 2);
        wear(&mut table, 2, 4);
        fill(&mut table, &mut live, 1, CAP, 1);
        fill(&mut table, &mut live, 2, 20, 2);
        let spread = table.wear_spread();
        assert_eq!((spread.min_erases, spread.max_erases), (0, 10));
        assert_eq!(spread.mean_erases, 4.0);
        assert!((spread.stddev_erases - 14f64.sqrt()).abs() < 1e-9);
        // Zone 1 (2 erases, full of cold data) trails the max by 8.
        assert_eq!(table.pick_static_wl_victim(7, |_| false), Some(1));
        assert_eq!(table.pick_static_wl_victim(8, |_| false), None);
        assert_eq!(table.pick_static_wl_victim(5, |z| z == 1), Some(2));
    }

    /// The superblock and metadata zones wear on their own schedule: the
    /// log ring turns over a few zones many times per data-zone erase, and
    /// leveling cannot move what they hold. Counted in the spread, they
    /// kept it above any threshold on a device of small zones, and leveling
    /// moved cold data forever (`tests/wear_leveling.rs`).
    #[test]
    fn static_wl_ignores_metadata_wear() {
        let mut table = ZoneTable::new(4, CAP);
        let mut live = [0u64; 4];
        wear(&mut table, 0, 50);
        table.claim(0, ZoneKind::Meta);
        wear(&mut table, 3, 3);
        fill(&mut table, &mut live, 1, CAP, 1);
        fill(&mut table, &mut live, 2, CAP, 2);
        assert_eq!(table.metadata_erase_max(), 50);
        let spread = table.wear_spread();
        assert_eq!((spread.min_erases, spread.max_erases), (0, 3));
        assert_eq!(table.pick_static_wl_victim(2, |_| false), Some(1));
        assert_eq!(table.pick_static_wl_victim(3, |_| false), None);
    }

    #[test]
    fn policies_parse_and_print() {
        for policy in [VictimPolicy::Greedy, VictimPolicy::CostBenefit] {
            assert_eq!(policy.to_string().parse::<VictimPolicy>(), Ok(policy));
        }
        assert!("fifo".parse::<VictimPolicy>().is_err());
    }

    #[test]
    fn records_round_trip_and_are_checked() {
        let mut table = ZoneTable::new(3, CAP);
        let mut live = [0u64; 3];
        wear(&mut table, 2, 2);
        fill(&mut table, &mut live, 0, 5, 7);
        table.retire(1);
        let records: Vec<_> = table.iter().map(|(_, zone)| zone.record()).collect();
        let copy = ZoneTable::from_records(CAP, &records).unwrap();
        assert_eq!(copy.free_count(), 1);
        assert_eq!(copy.get(2).erase_count(), 2);
        let mut bad = records.clone();
        bad[0].write_pointer_blocks = CAP + 1;
        assert!(matches!(
            ZoneTable::from_records(CAP, &bad),
            Err(ZoneError::WritePointer { zone: 0, .. })
        ));
        let mut bad = records;
        bad[2].state = ZoneUse::Open;
        assert!(matches!(
            ZoneTable::from_records(CAP, &bad),
            Err(ZoneError::Inconsistent { zone: 2, .. })
        ));
        assert_eq!(
            ZoneTable::from_records(CAP, &[]).unwrap_err(),
            ZoneError::NoZones
        );
    }

    proptest! {
        /// Allocation always takes a zone no more worn than any other free one.
        #[test]
        fn take_free_is_least_worn(ops in proptest::collection::vec(any::<bool>(), 1..200)) {
            let mut table = ZoneTable::new(8, CAP);
            let mut taken = Vec::new();
            for take in ops {
                if take {
                    let min_free = table.iter().filter(|(_, z)| z.kind() == ZoneKind::Free).map(|(_, z)| z.erase_count()).min();
                    let got = table.take_free(HOST);
                    prop_assert_eq!(got.map(|z| table.get(z).erase_count()), min_free);
                    taken.extend(got);
                } else if let Some(z) = taken.pop() {
                    table.release(z);
                }
            }
            table.assert_consistent();
        }
    }
}
