//! The open zones data is appended to (one lane per stream): zone room,
//! temperature, and the host appends that drain the write buffer.

use super::ckpt::CkptState;
use super::{Ftl, Op};
use crate::addr::{Ppa, Seq};
use crate::backend::{Command, DeviceError, Outcome, Payload, ZoneId};
use crate::buffer::{SlotId, Temp};
use crate::note::Note;
use crate::superblock::TagMode;
use crate::tag::{Tag, TagKind, TAG_BYTES};
use crate::zone::{Stream, ZoneKind, ZoneUse};

/// Zones outside the data lanes that may be open at once: the metadata
/// log's current zone and the two superblock copies.
const META_OPEN_ZONES: u32 = 3;

/// Writes at least this long are parts of sequential streams (files,
/// logs, copies), whose blocks are rewritten a whole stream later, together:
/// their blocks go with the cold data whatever the age of the version they
/// replace. Age misjudges them where a stream starts again: a sequential
/// overwrite that wraps rewrites its first blocks soon after the wrap, not
/// soon again, and calling them hot opened a zone for them. On a volume of
/// few large zones that zone was the one GC needed, and GC ended up
/// copying the zones the host was about to overwrite.
const STREAM_WRITE_BYTES: u64 = 64 << 10;

/// GC's streams whose copies spread over the extra lanes: survivors
/// (`Lane::Gc`) and cold data (`Lane::HostCold`). An extra lane holds a
/// zone of one stream until it is full, so with one lane per zone group
/// the copies of the stream holding most of them waited at
/// `zone_max_appends` while the other stream's zones idled; `gc_lanes`
/// may ask for a lane per zone group for each.
const GC_STREAMS: u32 = 2;

/// Most zones GC writes into at once (`FtlConfig::gc_lanes`).
pub(super) const MAX_GC_LANES: u32 = 16;

/// Most zones nameless writes go to at once (at most one per zone group):
/// one zone programs on one group's units, so one open zone bounds the
/// segment's write rate at a group's.
pub(super) const NAMELESS_STRIPES: u8 = 4;

/// Most zones host writes of one temperature go to at once
/// (`FtlConfig::host_stripes`): one per zone group of the simulator's
/// default device.
pub(super) const HOST_STRIPES: u8 = 4;

/// Data zones per nameless stripe, and per GC lane, at least
/// (`Ftl::nameless_stripes`, `new_lanes`).
const DATA_ZONES_PER_STRIPE: u32 = 8;

/// Free zones (least worn first) a lane looks through for one on the zone
/// group its fellow lanes use least.
const SPREAD_SCAN_ZONES: usize = 64;

/// An open zone the core writes data into; each maps to a zone stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lane {
    /// Host writes of recently rewritten blocks.
    HostHot,
    /// First host writes and blocks rewritten after a long time; cold data GC moved.
    HostCold,
    /// Data GC moved that is not cold.
    Gc,
    /// Cold data static wear leveling parks on the most-worn free zones.
    WearLeveling,
    /// Blocks GC moved that only snapshots hold: kept apart from host data,
    /// so the zones empty when the snapshots go rather than stay mixed
    /// with data GC would copy again.
    Kept,
    /// Nameless writes: the physical segment's blocks.
    Nameless,
    /// Nameless blocks GC migrated.
    NamelessMoved,
    /// Nameless blocks wear leveling moves: opened on the most-worn free
    /// zone.
    NamelessLevel,
    /// FUA writes' blocks while the host lanes have no room (`ftl/urgent.rs`).
    Urgent,
    /// Another open zone nameless writes go to beside `Nameless`'s, on
    /// another zone group, while that zone's appends keep its units busy
    /// (`NAMELESS_STRIPES`).
    NamelessStripe(u8),
    /// Another open zone host writes go to beside `HostHot`'s or
    /// `HostCold`'s, on another zone group, while that zone's appends keep
    /// its units busy (`FtlConfig::host_stripes`). Its stream is set when
    /// it opens a zone.
    HostStripe(u8),
    /// One more zone GC writes into beside `Gc` or `HostCold`, on another
    /// zone group, while their zones' appends keep their units busy
    /// (`FtlConfig::gc_lanes`). Its stream is set when it opens a zone.
    Extra(u8),
}

impl Lane {
    /// The base lanes (with the nameless stripes), in `Ftl::lanes` order;
    /// the extra lanes follow.
    const BASE: u8 = 9 + NAMELESS_STRIPES - 1 + HOST_STRIPES - 1;

    pub(super) fn index(self) -> usize {
        match self {
            Lane::HostHot => 0,
            Lane::HostCold => 1,
            Lane::Gc => 2,
            Lane::WearLeveling => 3,
            Lane::Kept => 4,
            Lane::Nameless => 5,
            Lane::NamelessMoved => 6,
            Lane::NamelessLevel => 7,
            Lane::Urgent => 8,
            Lane::NamelessStripe(i) => 9 + usize::from(i),
            Lane::HostStripe(i) => usize::from(9 + NAMELESS_STRIPES - 1 + i),
            Lane::Extra(i) => usize::from(Lane::BASE + i),
        }
    }

    pub(super) fn stream(self) -> Stream {
        match self {
            Lane::HostHot | Lane::Urgent | Lane::HostStripe(_) => Stream::Host,
            Lane::HostCold => Stream::HostCold,
            Lane::Gc | Lane::WearLeveling | Lane::Extra(_) => Stream::Gc,
            Lane::Kept => Stream::Kept,
            Lane::Nameless | Lane::NamelessStripe(_) => Stream::Nameless,
            Lane::NamelessMoved | Lane::NamelessLevel => Stream::NamelessMoved,
        }
    }
}

/// The lanes of a mounted FTL: the base lanes and as many extra GC
/// lanes as `gc_lanes` asks, the device has zone groups for (one per
/// group for each of `GC_STREAMS`; none on a device of one group), and its
/// `data_zones` allow, one GC lane per `DATA_ZONES_PER_STRIPE` (an extra
/// lane's open zone is a tail GC's other copies cannot use: on a device
/// of 26 data zones, 4 of them GC's reserve, four GC lanes held three
/// zones part written while the free zones fell to the reserve, and GC
/// ran flat out after a fill that leaves 7 % free).
pub(super) fn new_lanes(gc_lanes: u32, zone_groups: u32, data_zones: u32) -> Vec<StreamState> {
    let by_size = (data_zones / DATA_ZONES_PER_STRIPE).max(1);
    let extra = gc_lanes
        .min(if zone_groups > 1 {
            zone_groups * GC_STREAMS
        } else {
            1
        })
        .min(by_size)
        .clamp(1, MAX_GC_LANES)
        - 1;
    (0..u32::from(Lane::BASE) + extra)
        .map(|_| StreamState::default())
        .collect()
}

/// Zones host writes of one temperature go to at once: `host_stripes`
/// asked, at most one per zone group, `HOST_STRIPES`, and one per
/// `DATA_ZONES_PER_STRIPE` data zones.
pub(super) fn host_stripes(host_stripes: u32, zone_groups: u32, data_zones: u32) -> u8 {
    let by_size = (data_zones / DATA_ZONES_PER_STRIPE).max(1);
    host_stripes
        .min(zone_groups)
        .min(by_size)
        .clamp(1, u32::from(HOST_STRIPES)) as u8
}

#[derive(Debug, Default)]
pub(super) struct StreamState {
    pub(super) zone: Option<ZoneId>,
    pub(super) allocated_blocks: u64,
    /// The zone came out of the GC reserve: only GC may fill it, or host
    /// writes sharing the lane would eat the reserve.
    gc_only: bool,
    /// The stream of the zone an extra lane holds (or opens next).
    stream: Option<Stream>,
}

impl Ftl {
    /// Zone and block count for the next append of a stream, opening a new
    /// zone when needed. Host streams may not dip into the GC reserve; an
    /// extra GC lane opens a zone only with a free zone and the device's
    /// open-zone budget left for the base lanes.
    pub(super) fn lane_room(
        &mut self,
        lane: Lane,
        wanted: u64,
        may_use_reserve: bool,
    ) -> Option<(ZoneId, u64)> {
        let data_cap = self.data_cap();
        let reserve = u64::from(self.gc_reserve_zones);
        let host_barred = !may_use_reserve && !self.reserve_unlocked;
        let above_reserve = self.zones.free_count() as u64 > reserve;
        if above_reserve {
            self.urgent_below_reserve = false;
        }
        let st = self.lane_mut(lane);
        if st.zone.is_some() && st.gc_only && host_barred {
            if !above_reserve {
                return None;
            }
            // The reserve has been refilled: the zone no longer stands in for it.
            st.gc_only = false;
        }
        if st.zone.is_none() {
            // The extra and kept lanes are optional: their data has a base
            // lane to go to. GC's extra lanes leave the urgent lane a zone
            // too, so a FUA write does not wait for them to fill.
            let urgent_closed = usize::from(self.lane_zone(Lane::Urgent).is_none());
            let headroom = match lane {
                Lane::Extra(_) | Lane::HostStripe(_) => self.base_lanes_closed() + urgent_closed,
                Lane::Kept => self.base_lanes_closed(),
                Lane::Urgent => self.urgent_open_headroom(),
                _ => 0,
            };
            if !self.may_open_data_zone(headroom) {
                return None; // busy: zones filled earlier are still draining
            }
            let free = self.zones.free_count() as u64;
            let from_reserve = free <= reserve;
            // An extra lane leaves the last free zone to the base lanes: with
            // it, GC can always finish a victim (less than a zone live).
            // The kept lane may take it: GC's other data may follow it
            // there (`Ftl::extra_lane_room`).
            let last_barred = matches!(lane, Lane::Extra(_) | Lane::HostStripe(_)) && free <= 1;
            let urgent_barred = lane == Lane::Urgent && !self.urgent_may_open(free);
            if free == 0 || (from_reserve && host_barred) || last_barred || urgent_barred {
                return None;
            }
            let stream = match lane {
                Lane::Extra(_) => self.lane_mut(lane).stream.unwrap_or(Stream::Gc),
                Lane::HostStripe(_) => self.lane_mut(lane).stream.unwrap_or(Stream::Host),
                _ => lane.stream(),
            };
            let kind = ZoneKind::Data { stream };
            let z = match lane {
                Lane::WearLeveling | Lane::NamelessLevel => self.zones.take_free_most_worn(kind)?,
                Lane::Nameless | Lane::NamelessStripe(_) if self.nameless_stripes() > 1 => {
                    self.take_free_spread(kind)?
                }
                Lane::Urgent => self.take_free_for_urgent(kind)?,
                Lane::HostHot | Lane::HostCold | Lane::HostStripe(_) if self.host_stripes > 1 => {
                    self.take_free_spread(kind)?
                }
                _ if !self.gc_wide() || stream.is_nameless() => self.zones.take_free(kind)?,
                _ => self.take_free_spread(kind)?,
            };
            self.zone_clock[z as usize] = 0;
            match lane {
                Lane::Urgent if free < reserve => self.urgent_below_reserve = true,
                Lane::HostHot | Lane::HostCold | Lane::HostStripe(_) => {
                    self.urgent_below_reserve = false
                }
                _ => {}
            }
            if stream.is_nameless() {
                self.nameless_zone_opened(z, stream);
            } else {
                self.summary_opened(z);
            }
            let st = self.lane_mut(lane);
            st.zone = Some(z);
            st.allocated_blocks = 0;
            st.gc_only = from_reserve && may_use_reserve;
            st.stream = Some(stream);
        }
        let zone = self.lane_mut(lane).zone.expect("lane zone");
        if self.zone_appends_full(lane, zone) {
            return None;
        }
        let allocated = self.lane_mut(lane).allocated_blocks;
        let left = match &self.nameless.md {
            // In band a nameless zone's data stops at each group's md blocks.
            Some(m) if self.zones.get(zone).kind().is_nameless() => m.lane_room(allocated),
            _ => data_cap - allocated,
        };
        Some((zone, wanted.min(left)))
    }

    /// A free zone for `kind` on the zone group the open lanes use least.
    pub(super) fn take_free_spread(&mut self, kind: ZoneKind) -> Option<ZoneId> {
        let groups = self.open_zone_groups();
        let g = self.geo.zone_groups.max(1);
        self.zones
            .take_free_spread(kind, SPREAD_SCAN_ZONES, |z| groups[(z % g) as usize])
    }

    /// A free zone for the urgent lane: on the zone group the open lanes
    /// use least, and with `FtlConfig::gc_reset_yields_to_urgent` one
    /// where no GC victim, nor the metadata log's next ring zone, waits for
    /// its reset first (an erase there would hold the FUA writes' programs
    /// for milliseconds).
    fn take_free_for_urgent(&mut self, kind: ZoneKind) -> Option<ZoneId> {
        if !self.cfg.gc_reset_yields_to_urgent {
            return self.take_free_spread(kind);
        }
        let mut load = self.open_zone_groups();
        let victims = self.closing.iter().chain(&self.jobs).map(|j| j.victim);
        let log_erase = self.log.erase_due();
        for v in victims.chain(log_erase).collect::<Vec<_>>() {
            // Past any count of open lanes: a victim outweighs them all.
            load[self.zone_group(v)] += u32::from(u8::MAX);
        }
        let g = self.geo.zone_groups.max(1);
        self.zones
            .take_free_spread(kind, SPREAD_SCAN_ZONES, |z| load[(z % g) as usize])
    }

    /// Zones nameless writes may go to at once: one per zone group, at
    /// most `NAMELESS_STRIPES`, and one per `DATA_ZONES_PER_STRIPE` data
    /// zones (an open zone's unwritten tail is space no write can use
    /// until it fills: on a small device a few of them are a large share).
    pub(super) fn nameless_stripes(&self) -> u8 {
        let data_zones = self.geo.zone_count - self.layout.first_data_zone();
        let by_size = (data_zones / DATA_ZONES_PER_STRIPE).max(1);
        self.geo
            .zone_groups
            .clamp(1, u32::from(NAMELESS_STRIPES))
            .min(by_size) as u8
    }

    /// The lanes nameless writes go to: `Nameless` and its stripes.
    pub(super) fn nameless_lanes(&self) -> impl Iterator<Item = Lane> {
        (0..self.nameless_stripes()).map(|i| match i {
            0 => Lane::Nameless,
            i => Lane::NamelessStripe(i - 1),
        })
    }

    /// The lane the next nameless append goes to: of the stripes holding a
    /// zone, the one whose zone has the fewest appends in flight; once each
    /// has one in flight, a stripe without a zone (it opens one on the
    /// least used zone group). So nameless writes at depth keep several
    /// groups' units busy, and at depth 1 stay in one zone.
    pub(super) fn nameless_destination(&self) -> Lane {
        let mut best: Option<(u32, Lane)> = None;
        let mut closed = None;
        for lane in self.nameless_lanes() {
            match self.lanes[lane.index()].zone {
                Some(z) => {
                    let appends = self.zone_appends[z as usize];
                    if best.is_none_or(|(b, _)| appends < b) {
                        best = Some((appends, lane));
                    }
                }
                None => closed = closed.or(Some(lane)),
            }
        }
        match (best, closed) {
            (Some((0, lane)), _) | (Some((_, lane)), None) => lane,
            (_, Some(lane)) => lane,
            (None, None) => Lane::Nameless,
        }
    }

    /// Whether `zone`, open in `lane`, has `zone_max_appends` appends in
    /// flight (nameless zones excepted: their writes pick the least busy
    /// stripe).
    fn zone_appends_full(&self, lane: Lane, zone: ZoneId) -> bool {
        let most = self.cfg.zone_max_appends;
        most > 0 && !lane.stream().is_nameless() && self.zone_appends[zone as usize] >= most
    }

    /// Open lane zones per zone group (`Geometry::zone_groups` entries).
    fn open_zone_groups(&self) -> Vec<u32> {
        let g = self.geo.zone_groups.max(1);
        let mut groups = vec![0u32; g as usize];
        for z in self.lanes.iter().filter_map(|l| l.zone) {
            groups[(z % g) as usize] += 1;
        }
        groups
    }

    /// Base lanes other than wear leveling's and the kept lane's that hold
    /// no zone: the open zones an extra or the kept lane must leave them.
    fn base_lanes_closed(&self) -> usize {
        [Lane::HostHot, Lane::HostCold, Lane::Gc]
            .into_iter()
            .filter(|l| self.lanes[l.index()].zone.is_none())
            .count()
    }

    /// The extra GC lanes.
    pub(super) fn extra_lanes(&self) -> impl Iterator<Item = Lane> {
        (0..self.lanes.len().saturating_sub(usize::from(Lane::BASE))).map(|i| Lane::Extra(i as u8))
    }

    /// The zone `lane` holds and the stream it writes, if it holds one.
    pub(super) fn lane_zone(&self, lane: Lane) -> Option<(ZoneId, Option<Stream>)> {
        let st = &self.lanes[lane.index()];
        st.zone.map(|z| (z, st.stream))
    }

    /// Sets the stream an extra lane without a zone opens its next one for.
    pub(super) fn set_extra_stream(&mut self, lane: Lane, stream: Stream) {
        let st = self.lane_mut(lane);
        if st.zone.is_none() {
            st.stream = Some(stream);
        }
    }

    /// Blocks the open lanes' zones can still take: their unwritten tails.
    pub(super) fn open_tails_blocks(&self) -> u64 {
        let data_cap = self.data_cap();
        self.lanes
            .iter()
            .filter(|l| l.zone.is_some())
            .map(|l| data_cap - l.allocated_blocks)
            .sum()
    }

    /// Whether one more data zone may be open on the device. Its open and
    /// active zone limits must hold the metadata log's zone and both
    /// superblock zones too; the data zones counted are the lanes' and
    /// those still taking appends or waiting for their summary.
    /// `headroom`: open zones to leave for other lanes.
    pub(super) fn may_open_data_zone(&self, headroom: usize) -> bool {
        let limits = [self.geo.max_open_zones, self.geo.max_active_zones];
        let Some(limit) = limits.into_iter().filter(|&l| l != 0).min() else {
            return true;
        };
        let budget = limit.saturating_sub(META_OPEN_ZONES).max(1) as usize;
        let open = (self.layout.first_data_zone()..self.geo.zone_count)
            .filter(|&z| {
                let zone = self.zones.get(z);
                matches!(zone.kind(), ZoneKind::Data { .. })
                    && (zone.state() == ZoneUse::Open
                        || self.zone_appends[z as usize] > 0
                        || self.finish_pending.contains(&z)
                        || self.lanes.iter().any(|l| l.zone == Some(z))
                        || self.inplace_holds(z))
            })
            .count();
        open + headroom < budget
    }

    /// Room in `lane`, or else in its sibling: temperature separation is
    /// best effort, and must never hold up writing when one lane cannot get
    /// a zone (e.g. GC with one reserve zone left and both lanes full).
    pub(super) fn room_in(
        &mut self,
        lane: Lane,
        wanted: u64,
        may_use_reserve: bool,
    ) -> Option<(Lane, ZoneId, u64)> {
        let mut lane = lane;
        // A zone at its appends in flight is busy, not full: its data waits
        // rather than open a sibling's zone (a sequential stream split over
        // two zones leaves both half stale, and GC copies them).
        if let Some(zone) = self.lanes[lane.index()].zone {
            if self.zone_appends_full(lane, zone) {
                return None;
            }
        }
        if let Some((zone, room)) = self.lane_room(lane, wanted, may_use_reserve) {
            return Some((lane, zone, room));
        }
        if lane == Lane::Kept {
            // Kept blocks are cold: with no zone of their own they go with
            // GC's survivors, or wherever those go.
            lane = Lane::Gc;
            if let Some((zone, room)) = self.lane_room(lane, wanted, may_use_reserve) {
                return Some((lane, zone, room));
            }
        }
        let sibling = match lane {
            // Extra lanes are optional: the caller falls back to a base lane.
            // Nameless blocks go to nameless zones only.
            // The urgent lane's blocks took the host lanes' room first.
            Lane::Extra(_)
            | Lane::HostStripe(_)
            | Lane::Urgent
            | Lane::Nameless
            | Lane::NamelessMoved
            | Lane::NamelessStripe(_) => return None,
            Lane::HostHot => Lane::HostCold,
            Lane::HostCold if may_use_reserve => Lane::Gc,
            Lane::HostCold => Lane::HostHot,
            // (The kept lane became GC's above.)
            Lane::Gc | Lane::Kept => Lane::HostCold,
            // A nameless leveling move waits for no worn zone: its copies
            // go with GC's migrations.
            Lane::NamelessLevel => {
                let (zone, room) = self.lane_room(Lane::NamelessMoved, wanted, true)?;
                return Some((Lane::NamelessMoved, zone, room));
            }
            // Never let leveling wedge GC: park the data with GC's instead.
            Lane::WearLeveling => {
                let (zone, room) = self.lane_room(Lane::Gc, wanted, true)?;
                return Some((Lane::Gc, zone, room));
            }
        };
        if !self.cfg.temperature_streams || (sibling == Lane::Gc && !self.cfg.separate_gc_stream) {
            return None;
        }
        let (zone, room) = self.lane_room(sibling, wanted, may_use_reserve)?;
        Some((sibling, zone, room))
    }

    fn lane_mut(&mut self, lane: Lane) -> &mut StreamState {
        &mut self.lanes[lane.index()]
    }

    /// Hot if the block's previous version was written recently (see
    /// [`Self::age_temp`]; the time is that of the last host write into its
    /// zone) or is still in the buffer. First writes and blocks of long
    /// writes count as cold. No per-block memory: the estimate rides on the
    /// zone the old version is in. `buffered`: the block has a version in the
    /// write buffer; `mapped`: where its version on media is;
    /// `request_blocks`: the length of the write it came in.
    pub(super) fn temperature(
        &self,
        buffered: bool,
        mapped: Option<Ppa>,
        request_blocks: u64,
    ) -> Temp {
        if !self.cfg.temperature_streams || buffered {
            return Temp::Hot;
        }
        let Some(old) = mapped else {
            return Temp::Cold;
        };
        if request_blocks * self.block_size() as u64 >= STREAM_WRITE_BYTES {
            return Temp::Cold;
        }
        self.age_temp(self.zone_clock[old.zone(self.cap()) as usize])
    }

    /// Hot if data written at host clock `written_at` is younger than a
    /// third of the mapped space's worth of host writes. (Uniform random
    /// rewrites a block every mapped-space's worth of writes on average; in
    /// the 90/10 hot/cold case hot blocks come back after a ninth of it.)
    pub(super) fn age_temp(&self, written_at: u64) -> Temp {
        if !self.cfg.temperature_streams {
            return Temp::Hot;
        }
        let window = (self.mapping.live_blocks() / 3).max(1);
        if written_at > 0 && self.host_clock - written_at < window {
            Temp::Hot
        } else {
            Temp::Cold
        }
    }

    /// Books `n` blocks of the stream's zone; a zone with no room left is
    /// dropped by the stream and becomes Full once its appends (and, in
    /// band, its summary) complete. The zone table counts the blocks at
    /// submission (it becomes Full at capacity); `zone_appends` keeps GC off
    /// it until they complete.
    pub(super) fn lane_commit(&mut self, lane: Lane, zone: ZoneId, n: u64, seq: Seq) {
        let data_cap = self.data_cap();
        if self.md_in_zones() && self.zones.get(zone).kind().is_nameless() {
            // The lane keeps the zone past each group: its md blocks, then
            // the next group (`Ftl::next_md_command`).
            let st = self.lane_mut(lane);
            let before = st.allocated_blocks;
            st.allocated_blocks += n;
            self.md_allocated(zone, before, n);
            self.zones.record_write(zone, n, seq);
            self.zone_appends[zone as usize] += 1;
            return;
        }
        let st = self.lane_mut(lane);
        st.allocated_blocks += n;
        if st.allocated_blocks == data_cap {
            st.zone = None;
            self.summary_sealed(zone);
        }
        self.zones.record_write(zone, n, seq);
        self.zone_appends[zone as usize] += 1;
    }

    pub(super) fn append_settled(&mut self, zone: ZoneId) {
        self.zone_appends[zone as usize] -= 1;
    }

    /// Where a completed append landed, or the device's error.
    pub(super) fn appended_at(result: Result<Outcome, DeviceError>) -> Result<u64, DeviceError> {
        match result {
            Ok(Outcome::Written { offset_blocks, .. }) => Ok(offset_blocks),
            Ok(other) => panic!("append completed as {other:?}"),
            Err(e) => Err(e),
        }
    }

    fn write_unit(&self) -> u64 {
        u64::from(self.geo.write_unit_blocks)
    }

    /// Blocks to send now: full write units; a partial unit is padded only
    /// when something waits for durability.
    pub(super) fn batch_size(&self, queued: u64, room: u64, urgent: bool) -> (u64, u64) {
        self.batch_size_within(self.append_max_blocks(), queued, room, urgent)
    }

    /// Blocks one data append carries at most: the device's largest
    /// append, or `FtlConfig::append_max_blocks` if set and smaller (at
    /// least one write unit).
    pub(super) fn append_max_blocks(&self) -> u64 {
        let device = u64::from(self.geo.max_append_blocks);
        match u64::from(self.cfg.append_max_blocks) {
            0 => device,
            most => {
                let wu = self.write_unit();
                (most / wu * wu).max(wu).min(device)
            }
        }
    }

    /// `batch_size` with appends of at most `max_blocks`.
    pub(super) fn batch_size_within(
        &self,
        max_blocks: u64,
        queued: u64,
        room: u64,
        urgent: bool,
    ) -> (u64, u64) {
        let wu = self.write_unit();
        let max = max_blocks.min(room);
        let take = queued.min(max);
        let full = take / wu * wu;
        if full > 0 || !urgent || take == 0 {
            return (full, 0);
        }
        (take, wu - take % wu)
    }

    pub(super) fn next_host_append(&mut self) -> Option<(Op, Command)> {
        if self.buffer.queued() == 0 {
            return None;
        }
        let temp = if self.buffer.queued_in(Temp::Hot) >= self.buffer.queued_in(Temp::Cold) {
            Temp::Hot
        } else {
            Temp::Cold
        };
        let queued = self.buffer.queued_in(temp) as u64;
        let urgent = self.host_flush_waiting();
        self.host_append(temp, queued, urgent)
    }

    /// An append of the blocks of FUA writes alone, padded to the write
    /// unit: sent ahead of reads and GC, so a FUA write waits for its own
    /// blocks, not for the buffer (`buffer::WriteBuffer::pop_queued` takes
    /// them first in any host append).
    pub(super) fn next_urgent_append(&mut self) -> Option<(Op, Command)> {
        let temp = [Temp::Hot, Temp::Cold]
            .into_iter()
            .find(|&t| self.buffer.urgent_in(t) > 0)?;
        if !self.may_append_host() {
            return None;
        }
        let queued = self.buffer.urgent_in(temp) as u64;
        let to = self.urgent_room(Self::host_lane(temp), queued)?;
        self.host_append_to(to, temp, queued, true)
    }

    /// Whether host data may go to the device now.
    fn may_append_host(&self) -> bool {
        !self.read_only && !matches!(self.ckpt, CkptState::Draining) && !self.checkpoint_held()
    }

    pub(super) fn host_lane(temp: Temp) -> Lane {
        match temp {
            Temp::Hot => Lane::HostHot,
            Temp::Cold => Lane::HostCold,
        }
    }

    /// An append of up to `queued` blocks of the buffer's `temp` queues,
    /// urgent ones first; `urgent`: pad a partial write unit.
    fn host_append(&mut self, temp: Temp, queued: u64, urgent: bool) -> Option<(Op, Command)> {
        if !self.may_append_host() {
            return None;
        }
        let to = self.host_room(Self::host_lane(temp), queued)?;
        self.host_append_to(to, temp, queued, urgent)
    }

    /// Room for `queued` blocks of host lane `base`'s stream: in the zone
    /// `host_destination` picks (a stripe's, with host stripes), else in
    /// `base` or its sibling (`room_in`).
    pub(super) fn host_room(&mut self, base: Lane, queued: u64) -> Option<(Lane, ZoneId, u64)> {
        let to = match self.host_destination(base) {
            stripe @ Lane::HostStripe(_) => self.room_in(stripe, queued, false),
            _ => None,
        };
        to.or_else(|| self.room_in(base, queued, false))
    }

    /// The lane the next host append of `base`'s stream goes to: of the
    /// lanes holding a zone of that stream (`base` and its stripes), the
    /// one whose zone has the fewest appends in flight, the fullest of
    /// those; once each has one in flight, a stripe without a zone (it
    /// opens one on the zone group the open zones use least). So host
    /// writes at depth keep several groups' units busy, and at depth 1 fill
    /// one zone after another: the stripes a deeper load opened close as
    /// they fill instead of holding their unwritten tails, space GC cannot
    /// use, while the load stays low.
    fn host_destination(&mut self, base: Lane) -> Lane {
        if self.host_stripes <= 1 {
            return base;
        }
        let stream = base.stream();
        let lanes = (0..self.host_stripes - 1).map(Lane::HostStripe);
        // (appends in flight, blocks left in the zone, lane): least first.
        let mut best: Option<(u32, u64, Lane)> = None;
        let mut closed = None;
        for lane in std::iter::once(base).chain(lanes) {
            let st = &self.lanes[lane.index()];
            match st.zone {
                Some(z) if lane == base || st.stream == Some(stream) => {
                    let load = (
                        self.zone_appends[z as usize],
                        u64::MAX - st.allocated_blocks,
                    );
                    if best.is_none_or(|(a, l, _)| load < (a, l)) {
                        best = Some((load.0, load.1, lane));
                    }
                }
                Some(_) => {}
                None if lane != base => closed = closed.or(Some(lane)),
                None => {}
            }
        }
        match (best.map(|(a, _, lane)| (a, lane)), closed) {
            (Some((0, lane)), _) | (Some((_, lane)), None) => lane,
            (Some(_), Some(lane)) => {
                self.lanes[lane.index()].stream = Some(stream);
                lane
            }
            (None, _) => base,
        }
    }

    /// The append of `host_append` into `(lane, zone, room)`.
    fn host_append_to(
        &mut self,
        (lane, zone, room): (Lane, ZoneId, u64),
        temp: Temp,
        queued: u64,
        urgent: bool,
    ) -> Option<(Op, Command)> {
        let (n, pad) = self.batch_size(queued, room, urgent);
        if n == 0 {
            return None;
        }
        let mut slots = Vec::with_capacity(n as usize);
        let (mut data, mut oob) = (Payload::new(), self.alloc_oob(n + pad));
        let bs = self.block_size();
        for _ in 0..n {
            let seq = self.take_seq();
            let s = self.buffer.pop_queued(temp, seq).expect("queued slot");
            let slot = self.buffer.slot(s);
            let crc = slot.data_crc;
            data.push(slot.data.clone()); // the slot's bytes, shared: no copy
            let t = Tag {
                kind: TagKind::HostData,
                epoch: self.epoch,
                lba: slot.lba,
                seq,
                data_crc: crc,
            };
            self.push_tag(&mut oob, &t);
            slots.push((s, seq, crc));
        }
        self.push_padding(&mut data, &mut oob, pad, bs);
        self.lane_commit(lane, zone, n + pad, self.next_seq.saturating_sub(1));
        self.zone_clock[zone as usize] = self.host_clock;
        self.host_appends_in_flight += 1;
        self.earn_gc_credit(n + pad);
        self.stats.media_write_blocks += n + pad;
        self.stats.pad_blocks += pad;
        if lane == Lane::Urgent {
            self.stats.urgent_lane_blocks += n + pad;
        }
        if urgent {
            let group = self.zone_group(zone);
            self.urgent_appended_ns[group] = Some(self.now_ns);
        }
        self.blocks_since_checkpoint += n + pad;
        Some((
            Op::HostAppend {
                zone,
                slots,
                pad_blocks: pad as u32,
            },
            Command::Append { zone, data, oob },
        ))
    }

    /// An empty OOB buffer for `blocks` tags (none when the device has no OOB).
    pub(super) fn alloc_oob(&self, blocks: u64) -> Vec<u8> {
        if self.geo.oob_size_bytes > 0 {
            Vec::with_capacity(self.geo.oob_bytes(blocks))
        } else {
            Vec::new()
        }
    }

    pub(super) fn push_tag(&self, oob: &mut Vec<u8>, t: &Tag) {
        let ob = self.geo.oob_size_bytes as usize;
        if ob == 0 {
            return;
        }
        let at = oob.len();
        oob.resize(at + ob, 0);
        if self.tag_mode == TagMode::Oob {
            t.encode(&mut oob[at..at + TAG_BYTES]);
        }
    }

    pub(super) fn push_padding(&self, data: &mut Payload, oob: &mut Vec<u8>, pad: u64, bs: usize) {
        if pad == 0 {
            return;
        }
        let zeros = vec![0; pad as usize * bs];
        let t = Tag {
            kind: TagKind::Pad,
            epoch: self.epoch,
            lba: u64::MAX,
            seq: 0,
            data_crc: self.data_crc().checksum(&zeros[..bs]),
        };
        data.push(zeros.into());
        for _ in 0..pad {
            self.push_tag(oob, &t);
        }
    }

    pub(super) fn host_append_done(
        &mut self,
        zone: ZoneId,
        slots: Vec<(SlotId, Seq, u32)>,
        pad: u32,
        result: Result<Outcome, DeviceError>,
    ) {
        self.host_appends_in_flight -= 1;
        self.append_settled(zone);
        let offset = match Self::appended_at(result) {
            Ok(offset) => offset,
            Err(e) => {
                // Each back at the head of its queue (urgent or not), in
                // order; one written again meanwhile is dropped.
                for &(s, _, _) in slots.iter().rev() {
                    if let Some(slot) = self.buffer.requeue_front(s) {
                        self.buffered_new -= u64::from(slot.counted_new);
                        let bs = self.geo.block_size_bytes as usize;
                        self.buffer.recycle(slot.data, bs);
                    }
                }
                self.stats.media_write_blocks -= slots.len() as u64 + u64::from(pad);
                self.write_failed(zone, e);
                return;
            }
        };
        self.appends_done += 1;
        self.host_write_failures = 0;
        let lbas = slots.iter().map(|&(s, ..)| self.buffer.slot(s).lba);
        super::summaries::note_run(&mut self.summaries, zone, offset, lbas);
        let noted = self.notes_every_change();
        for (i, &(s, seq, crc)) in slots.iter().enumerate() {
            let ppa = Ppa::new(zone, offset + i as u64, self.cap());
            let (slot, latest) = self.buffer.release_latest(s);
            let lba = slot.lba;
            if slot.counted_new {
                self.buffered_new -= 1;
            }
            self.buffer
                .recycle(slot.data, self.geo.block_size_bytes as usize);
            if latest {
                self.map(lba, ppa, crc, seq);
                if noted {
                    self.log.push_note(Note::HostWrite {
                        seq,
                        lba,
                        ppa,
                        data_crc: crc,
                    });
                }
            }
        }
        self.admit_writes();
    }

    /// Stops writing `zone` before it is full (or a write to it failed): no
    /// lane takes it again, it gets no summary, and it is finished on the
    /// device once its appends complete, so it stops counting against the
    /// open zone limits (until then GC leaves it alone).
    pub(super) fn seal_zone(&mut self, zone: ZoneId) {
        for st in &mut self.lanes {
            if st.zone == Some(zone) {
                st.zone = None;
            }
        }
        if let Some(m) = &mut self.nameless.md {
            m.seal(zone);
        }
        // A nameless zone's open group is written first (the table marks
        // the zone full when its finish goes out).
        if !self.md_pending(zone) {
            self.zones.finish(zone);
        }
        self.summary_dropped(zone);
        if !self.finish_pending.contains(&zone) {
            self.finish_pending.push(zone);
        }
    }

    /// The device Finish of a sealed zone whose appends have all completed.
    pub(super) fn next_finish_command(&mut self) -> Option<(Op, Command)> {
        // A nameless zone's open group gets its md blocks first.
        let at = (0..self.finish_pending.len()).find(|&i| {
            let z = self.finish_pending[i];
            self.zone_appends[z as usize] == 0 && !self.md_pending(z)
        })?;
        let zone = self.finish_pending.swap_remove(at);
        if self.zones.get(zone).state() != crate::zone::ZoneUse::Full {
            self.zones.finish(zone);
        }
        self.zone_appends[zone as usize] += 1; // settles on completion
        Some((Op::ZoneFinish { zone }, Command::Finish { zone }))
    }

    /// A data zone refused a write: stop using it, move its live data out and
    /// retire it (docs/format.md §8, media failures). A host-side failure (the
    /// kernel's `EINTR` for the commands a controller reset aborted) says
    /// nothing about the media: the zone is only sealed, and GC resets it
    /// like any other. Retiring those let one controller stall on a device
    /// of 28 zones retire more zones than the GC reserve and fill the
    /// volume. Past as many host-side failures in a row as commands can be
    /// in flight, the device is failing for real and zones retire again,
    /// so a dead device still ends read-only instead of sealing zones
    /// forever.
    pub(super) fn write_failed(&mut self, zone: ZoneId, error: DeviceError) {
        if error == DeviceError::DeviceGone {
            return;
        }
        self.stats.write_errors += 1;
        self.seal_zone(zone);
        if matches!(error, DeviceError::HostIo { .. })
            && self.host_write_failures < self.cfg.max_inflight_commands
        {
            self.host_write_failures += 1;
            return;
        }
        let victim = self
            .jobs
            .iter()
            .chain(&self.closing)
            .any(|j| j.victim == zone);
        // Nameless blocks keep their addresses: their zone is retired once
        // nothing in it is live (GC resets it then, and the reset fails).
        let nameless = self.zones.get(zone).kind().is_nameless();
        if !self.retire_queue.contains(&zone) && !victim && !nameless {
            self.retire_queue.push_back(zone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gc_lanes_reach_one_per_zone_group_for_each_gc_stream() {
        let extra = |gc_lanes, groups, data_zones| {
            new_lanes(gc_lanes, groups, data_zones).len() - usize::from(Lane::BASE)
        };
        assert_eq!(extra(1, 4, 1000), 0);
        assert_eq!(extra(4, 4, 1000), 3);
        assert_eq!(extra(8, 4, 1000), 7);
        // Two per zone group at most, one per 8 data zones, and 16.
        assert_eq!(extra(12, 4, 1000), 7);
        assert_eq!(extra(8, 4, 40), 4);
        assert_eq!(extra(8, 1, 1000), 0);
        assert_eq!(extra(64, 16, 1000), MAX_GC_LANES as usize - 1);
    }

    #[test]
    fn host_stripes_reach_one_per_zone_group_at_most_four() {
        assert_eq!(host_stripes(1, 4, 1000), 1);
        assert_eq!(host_stripes(0, 4, 1000), 1);
        assert_eq!(host_stripes(4, 4, 1000), 4);
        assert_eq!(host_stripes(8, 16, 1000), HOST_STRIPES);
        assert_eq!(host_stripes(4, 2, 1000), 2);
        assert_eq!(host_stripes(4, 1, 1000), 1);
        // One per 8 data zones.
        assert_eq!(host_stripes(4, 4, 26), 3);
        assert_eq!(host_stripes(4, 4, 7), 1);
    }
}
