//! `SimDevice`: the simulated zoned device and its `Backend` implementation.
//!
//! Commands are checked for static errors at submit, queued with a finish
//! time from the timing model, and executed (media changed) when the virtual
//! clock reaches that time, at the next `reap` or `wait`. Execution order is
//! `(finish_ns, submission seq)`, which keeps each zone's commands in
//! submission order. There is no volatile write cache: an executed command
//! is durable, so a `Flush` completes at submit, ahead of the commands
//! still pending (NVMe's Flush covers only the commands completed before
//! it was submitted; docs/sim.md).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use zftl_core::backend::ZoneId;
use zftl_core::{
    Backend, Command, Completion, DeviceError, Geometry, ReadPriority, SubmitError, ZoneInfo,
    ZoneState,
};

use crate::config::{Faults, RuntimeOptions, SimConfig};
use crate::error::SimError;
use crate::faults::FaultState;
use crate::image::{self, ImageHeader, PageState, EB_FACTORY_BAD, HEADER_BYTES};
use crate::layout::Layout;
use crate::media::Media;
use crate::rng::Rng;
use crate::stats::SimStats;
use crate::timing::{Op, Scheduler};
use crate::zone::ZoneTable;

/// A submitted command waiting for its finish time.
pub(crate) struct Pending {
    pub finish_ns: u64,
    pub seq: u64,
    pub tag: u64,
    pub command: Command,
    /// A static error found at submit; the command then touches nothing.
    pub early: Option<DeviceError>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    /// Reversed so `BinaryHeap` pops the earliest `(finish_ns, seq)` first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.finish_ns, other.seq).cmp(&(self.finish_ns, self.seq))
    }
}

/// A simulated NAND device presenting zones (see the crate docs).
pub struct SimDevice {
    pub(crate) cfg: SimConfig,
    pub(crate) geometry: Geometry,
    pub(crate) layout: Layout,
    pub(crate) media: Media,
    pub(crate) zones: ZoneTable,
    pub(crate) sched: Scheduler,
    pub(crate) faults: FaultState,
    pub(crate) pending: BinaryHeap<Pending>,
    pub(crate) ready: VecDeque<Completion>,
    pub(crate) next_seq: u64,
    pub(crate) clock_ns: u64,
    pub(crate) powered: bool,
    /// Set when host I/O on the image failed mid-change: the in-memory state
    /// may then disagree with the file, so the device stays down.
    pub(crate) io_failure: Option<String>,
    pub(crate) stats: SimStats,
    /// Predicted write pointer per zone, only to place appends on LUNs in
    /// the timing model.
    pub(crate) sched_wp: Vec<u64>,
}

/// Media config fields an image must agree on with an expected config.
fn media_fields(c: &SimConfig) -> [(&'static str, u64); 15] {
    [
        ("channels", c.channels.into()),
        ("luns_per_channel", c.luns_per_channel.into()),
        ("blocks_per_lun", c.blocks_per_lun.into()),
        ("pages_per_block", c.pages_per_block.into()),
        ("page_size_bytes", c.page_size_bytes.into()),
        ("oob_size_bytes", c.oob_size_bytes.into()),
        ("program_unit_pages", c.program_unit_pages.into()),
        ("zone_width_luns", c.zone_width_luns.into()),
        ("zone_size_blocks", c.zone_size_blocks.unwrap_or(0)),
        ("max_open_zones", c.max_open_zones.into()),
        ("max_active_zones", c.max_active_zones.into()),
        ("max_append_blocks", c.max_append_blocks.into()),
        ("max_transfer_blocks", c.max_transfer_blocks.into()),
        ("endurance_erases", c.endurance_erases.into()),
        (
            "factory_bad_block_per_mille",
            c.factory_bad_block_per_mille.into(),
        ),
    ]
}

impl SimDevice {
    fn build(cfg: SimConfig, media: Media) -> Result<Self, SimError> {
        let geometry = cfg.geometry()?;
        let layout = Layout::new(&cfg);
        let zone_count = geometry.zone_count as usize;
        let zones = ZoneTable::new(
            zone_count,
            geometry.zone_capacity_blocks,
            geometry.max_open_zones,
            geometry.max_active_zones,
        );
        let queue_depth = cfg.queue_depth as usize;
        Ok(SimDevice {
            sched: Scheduler::new(cfg.timing, cfg.lun_count() as usize, zone_count),
            faults: FaultState::new(cfg.faults.clone()),
            pending: BinaryHeap::with_capacity(queue_depth),
            ready: VecDeque::with_capacity(queue_depth),
            next_seq: 0,
            clock_ns: 0,
            powered: true,
            io_failure: None,
            stats: SimStats::default(),
            sched_wp: vec![0; zone_count],
            cfg,
            geometry,
            layout,
            media,
            zones,
        })
    }

    /// A fresh device in memory.
    pub fn create_memory(cfg: SimConfig) -> Result<Self, SimError> {
        cfg.validate()?;
        let media = Media::new_memory(&cfg)?;
        let mut dev = Self::build(cfg, media)?;
        dev.make_factory_bad_blocks()
            .map_err(|e| SimError::io("write", Path::new("<memory>"), e))?;
        Ok(dev)
    }

    /// A fresh device on a new image file; refuses an existing file.
    pub fn create_file(path: &Path, cfg: SimConfig) -> Result<Self, SimError> {
        cfg.validate()?;
        let file = match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(SimError::ImageExists {
                    path: path.to_path_buf(),
                })
            }
            Err(e) => return Err(SimError::io("create", path, e)),
        };
        lock_image(&file, path)?;
        let made = Self::format_file(path, file, cfg);
        if made.is_err() {
            // Undo: never leave a half-made image behind.
            let _ = std::fs::remove_file(path);
        }
        made
    }

    /// The steps of formatting a new image: size it, write the header, pick
    /// factory bad blocks, fsync.
    fn format_file(path: &Path, file: File, cfg: SimConfig) -> Result<Self, SimError> {
        let header = ImageHeader::new(&cfg);
        file.set_len(header.layout.image_size_bytes)
            .map_err(|e| SimError::io("set_len", path, e))?;
        let media = Media::new_file(&cfg, file, path)?;
        media.store_header(&image::encode_header(&header))?;
        let mut dev = Self::build(cfg, media)?;
        dev.make_factory_bad_blocks()
            .map_err(|e| SimError::io("write", path, e))?;
        dev.media.sync()?;
        Ok(dev)
    }

    /// Marks the seeded factory bad blocks and takes their zones offline.
    fn make_factory_bad_blocks(&mut self) -> io::Result<()> {
        let per_mille = u64::from(self.cfg.factory_bad_block_per_mille);
        if per_mille == 0 {
            return Ok(());
        }
        let mut rng = Rng::stream(self.cfg.faults.seed, 0);
        for eb in 0..self.cfg.erase_block_count() {
            if rng.below(1000) < per_mille {
                self.media.mark_bad(eb, EB_FACTORY_BAD)?;
                let zone = self.layout.zone_of_erase_block(eb);
                self.zones.set(zone, ZoneState::Offline, 0);
                self.media.store_zone(zone, ZoneState::Offline, 0)?;
            }
        }
        Ok(())
    }

    /// Opens an image; the media shape comes from its header. The image is
    /// locked (an exclusive advisory lock, released when the device is
    /// dropped or the process dies): a second open fails with
    /// [`SimError::ImageInUse`].
    pub fn open_file(path: &Path, runtime: RuntimeOptions) -> Result<Self, SimError> {
        Self::open_impl(path, runtime, None)
    }

    /// Opens an image that must have `cfg`'s media shape; timing, faults and
    /// queue depth come from `cfg`.
    pub fn open_file_expecting(path: &Path, cfg: &SimConfig) -> Result<Self, SimError> {
        cfg.validate()?;
        let runtime = RuntimeOptions {
            timing: cfg.timing,
            faults: cfg.faults.clone(),
            queue_depth: Some(cfg.queue_depth),
        };
        Self::open_impl(path, runtime, Some(cfg))
    }

    fn open_impl(
        path: &Path,
        runtime: RuntimeOptions,
        expect: Option<&SimConfig>,
    ) -> Result<Self, SimError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| SimError::io("open", path, e))?;
        lock_image(&file, path)?;
        let len = file
            .metadata()
            .map_err(|e| SimError::io("stat", path, e))?
            .len();
        let truncated = |expected_bytes| SimError::Truncated {
            path: path.to_path_buf(),
            expected_bytes,
            actual_bytes: len,
        };
        if len < HEADER_BYTES {
            return Err(truncated(HEADER_BYTES));
        }
        let mut buf = vec![0u8; HEADER_BYTES as usize];
        file.read_exact_at(&mut buf, 0)
            .map_err(|e| SimError::io("read header", path, e))?;
        let header = image::decode_header(&buf, path)?;
        if let Some(expected) = expect {
            for ((field, image), (_, want)) in media_fields(&header.media)
                .into_iter()
                .zip(media_fields(expected))
            {
                if image != want {
                    return Err(SimError::GeometryMismatch {
                        field,
                        image,
                        expected: want,
                    });
                }
            }
        }
        if len < header.layout.image_size_bytes {
            return Err(truncated(header.layout.image_size_bytes));
        }
        let mut cfg = header.media.clone();
        cfg.timing = runtime.timing;
        cfg.faults = runtime.faults;
        cfg.queue_depth = runtime.queue_depth.unwrap_or(cfg.queue_depth);
        cfg.validate()?;
        let (media, zone_table) = Media::open_file(&cfg, file, path, header.layout)?;
        let mut dev = Self::build(cfg, media)?;
        dev.load_zones(&zone_table)?;
        dev.recover()
            .map_err(|e| SimError::io("recover", path, e))?;
        Ok(dev)
    }

    /// Loads and range-checks the zone table.
    fn load_zones(&mut self, table: &[u8]) -> Result<(), SimError> {
        let cap = self.geometry.zone_capacity_blocks;
        for (i, entry) in table
            .chunks_exact(image::ZONE_ENTRY_BYTES as usize)
            .enumerate()
        {
            let corrupt = |what| SimError::CorruptTable {
                what,
                index: i as u64,
            };
            let (state, wp) = image::decode_zone_entry(entry).ok_or(corrupt("zone entry"))?;
            if wp > cap || (state == ZoneState::Empty && wp != 0) {
                return Err(corrupt("zone write pointer"));
            }
            self.zones.set(i as ZoneId, state, wp);
        }
        Ok(())
    }

    /// Brings the tables to a consistent state after a process kill (see
    /// docs/format.md, part 2, "Crash analysis"): zones with bad blocks are
    /// offline, open zones are closed, and page states above a zone's write
    /// pointer (programs never committed) are erased.
    fn recover(&mut self) -> io::Result<()> {
        let width = self.layout.zone_width_luns;
        for zone in 0..self.geometry.zone_count {
            let (state, wp) = (self.zones.state(zone), self.zones.wp(zone));
            let bad = (0..width).any(|j| self.media.is_bad(self.layout.zone_erase_block(zone, j)));
            let fixed = match state {
                ZoneState::Offline | ZoneState::ReadOnly => state,
                _ if bad => ZoneState::Offline,
                ZoneState::Full => ZoneState::Full,
                _ if wp == 0 => ZoneState::Empty,
                _ => ZoneState::Closed,
            };
            if fixed != state {
                self.zones.set(zone, fixed, wp);
                self.media.store_zone(zone, fixed, wp)?;
            }
            if fixed != ZoneState::Offline {
                self.erase_uncommitted(zone, wp)?;
            }
        }
        Ok(())
    }

    fn erase_uncommitted(&mut self, zone: ZoneId, wp: u64) -> io::Result<()> {
        for offset in wp..self.geometry.zone_capacity_blocks {
            let (_, _, page) = self.layout.locate(zone, offset);
            if self.media.page_state(page) != PageState::Erased {
                self.media.set_states(page, 1, PageState::Erased)?;
            }
        }
        Ok(())
    }

    /// The effective config (media shape plus run-time choices).
    /// The device's config (media shape and run-time choices).
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Whether the device is on (off after a power cut until `power_on`).
    pub fn is_powered(&self) -> bool {
        self.powered
    }

    /// Replaces the fault plan; streams restart from its seed and
    /// `PowerCut::AfterSubmits` counts from this call.
    pub fn set_faults(&mut self, faults: Faults) {
        self.faults = FaultState::new(faults.clone());
        self.cfg.faults = faults;
    }

    /// What the device has done so far.
    pub fn stats(&self) -> SimStats {
        let mut s = self.stats.clone();
        s.bad_blocks = self.media.bad_block_count();
        s.set_erase_counts(self.media.erase_counts());
        s.clock_ns = self.clock_ns;
        s.busy_ns_total = self.sched.busy_ns_total;
        s.reads_passed = self.sched.reads_passed;
        s.suspensions = self.sched.suspensions;
        s.host_reads_first = self.sched.host_reads_first;
        s
    }

    /// Time each LUN has spent on NAND operations (timing model on), by
    /// LUN number; the sum is `SimStats::busy_ns_total`.
    pub fn lun_busy_ns(&self) -> &[u64] {
        &self.sched.lun_busy_ns
    }

    /// When each LUN finishes the work queued on it (timing model on): from
    /// the clock until then it is busy without a gap, since work is queued
    /// when it is submitted and each operation starts when the one before
    /// it on its LUN ends (a read that passes others included).
    pub fn lun_queued_until_ns(&self) -> &[u64] {
        &self.sched.lun_free_at_ns
    }

    /// Erase count per erase block, in physical order.
    pub fn erase_counts(&self) -> Vec<u32> {
        self.media.erase_counts().to_vec()
    }

    /// The highest erase count among the zone's erase blocks.
    pub fn zone_erase_count(&self, zone: ZoneId) -> u32 {
        assert!(
            zone < self.geometry.zone_count,
            "zone {zone} does not exist"
        );
        (0..self.layout.zone_width_luns)
            .map(|j| {
                self.media
                    .erase_count(self.layout.zone_erase_block(zone, j))
            })
            .max()
            .unwrap_or(0)
    }

    /// fsync the image (data and tables); a no-op in memory.
    pub fn sync(&mut self) -> Result<(), SimError> {
        self.media.sync()
    }

    /// Lets idle time pass; the virtual clock never goes back.
    pub fn advance_clock_to(&mut self, ns: u64) {
        self.clock_ns = self.clock_ns.max(ns);
    }

    /// A controller reset (fault injection): every command not yet reaped
    /// ends with the kernel's `EINTR`. Those executed already ran; each of
    /// the others runs now or never, as the fault stream draws.
    fn reset_controller(&mut self) {
        self.stats.controller_resets += 1;
        let aborted = || DeviceError::HostIo {
            op: "command",
            kind: io::ErrorKind::Interrupted,
            message: "aborted by a controller reset (simulated)".into(),
        };
        for c in &mut self.ready {
            c.result = Err(aborted());
        }
        while let Some(p) = self.pending.pop() {
            self.sched.retire(p.seq);
            if p.early.is_none() && self.faults.aborted_command_ran() {
                let _ = self.execute(p.command);
            }
            self.ready.push_back(Completion {
                tag: p.tag,
                result: Err(aborted()),
            });
            if self.io_failure.is_some() {
                self.power_cut();
                return;
            }
        }
    }

    /// Executes every pending command whose finish time has come. A
    /// command's finish may have moved later since it was queued (a read
    /// passed its operations, see `timing`): it then goes back in line.
    pub(crate) fn run_due(&mut self) {
        while self
            .pending
            .peek()
            .is_some_and(|p| p.finish_ns <= self.clock_ns)
        {
            let mut p = self.pending.pop().expect("peeked");
            if let Some(finish) = self.sched.finish_of(p.seq) {
                if finish > p.finish_ns {
                    p.finish_ns = finish;
                    self.pending.push(p);
                    continue;
                }
            }
            self.sched.retire(p.seq);
            let result = match p.early {
                Some(e) => Err(e),
                None => self.execute(p.command),
            };
            self.ready.push_back(Completion { tag: p.tag, result });
            if self.io_failure.is_some() {
                self.power_cut();
                return;
            }
        }
    }

    /// Finish time of command `seq` from the timing model (clock when off).
    fn schedule(&mut self, seq: u64, command: &Command) -> u64 {
        let now = self.clock_ns;
        if !self.sched.enabled() {
            return now;
        }
        let mut finish = now;
        let bs = u64::from(self.geometry.block_size_bytes);
        let cap = self.geometry.zone_capacity_blocks;
        let unit = self.layout.program_unit_pages;
        match command {
            Command::Read {
                zone,
                offset_blocks,
                block_count,
                priority,
            } => {
                let op = match priority {
                    ReadPriority::Host => Op::Read,
                    ReadPriority::Background => Op::BackgroundRead,
                };
                for b in *offset_blocks..offset_blocks + u64::from(*block_count) {
                    let (lun, _, _) = self.layout.locate(*zone, b);
                    finish = finish.max(self.sched.queue(seq, lun, op, now));
                }
            }
            Command::Write {
                zone,
                offset_blocks,
                data,
                ..
            } => {
                let count = data.len() as u64 / bs;
                finish = self.queue_programs(seq, *zone, *offset_blocks, count);
                self.sched_wp[*zone as usize] = (offset_blocks + count).min(cap);
            }
            Command::Append { zone, data, .. } => {
                let count = data.len() as u64 / bs;
                let start = self.sched_wp[*zone as usize] % cap;
                finish = self.queue_programs(seq, *zone, start, count);
                self.sched_wp[*zone as usize] = (start + count).min(cap);
            }
            Command::Reset { zone } => {
                for j in 0..self.layout.zone_width_luns {
                    let eb = self.layout.zone_erase_block(*zone, j);
                    finish = finish.max(self.sched.queue(
                        seq,
                        eb / self.layout.blocks_per_lun,
                        Op::Erase,
                        now,
                    ));
                }
                self.sched_wp[*zone as usize] = 0;
            }
            Command::Finish { zone } => self.sched_wp[*zone as usize] = cap,
            Command::Open { .. } | Command::Close { .. } => {}
            // Completed at submit (`submit`); nothing to queue.
            Command::Flush => return now,
        }
        debug_assert!(unit > 0);
        if let Command::Read {
            zone,
            offset_blocks,
            block_count,
            ..
        } = command
        {
            let held = match self.zones.state(*zone) {
                ZoneState::Full => cap,
                _ => self.zones.wp(*zone),
            };
            if offset_blocks + u64::from(*block_count) <= held {
                if let Some(finish) = self.sched.read_unordered(seq, *zone, finish) {
                    return finish;
                }
            }
        }
        let reset = matches!(command, Command::Reset { .. });
        self.sched.command(seq, command.zone(), finish, reset)
    }

    fn queue_programs(&mut self, seq: u64, zone: ZoneId, start: u64, count: u64) -> u64 {
        let now = self.clock_ns;
        let cap = self.geometry.zone_capacity_blocks;
        let unit = self.layout.program_unit_pages;
        let mut finish = now;
        let mut b = 0;
        while b < count {
            let (lun, _, _) = self.layout.locate(zone, (start + b) % cap);
            finish = finish.max(self.sched.queue(seq, lun, Op::Program, now));
            b += unit;
        }
        finish
    }
}

impl Backend for SimDevice {
    fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
        if !self.powered {
            return Err(DeviceError::DeviceGone);
        }
        if zone >= self.geometry.zone_count {
            return Err(DeviceError::NoSuchZone { zone });
        }
        let state = self.zones.state(zone);
        let capacity_blocks = self.geometry.zone_capacity_blocks;
        let write_pointer_blocks = if state == ZoneState::Full {
            capacity_blocks
        } else {
            self.zones.wp(zone)
        };
        Ok(ZoneInfo {
            zone,
            state,
            write_pointer_blocks,
            capacity_blocks,
        })
    }

    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        if !self.powered {
            return Err(SubmitError::DeviceGone);
        }
        if self.in_flight() >= self.geometry.queue_depth as usize {
            return Err(SubmitError::Busy);
        }
        let early = self.check_static(&command).err();
        let seq = self.next_seq;
        self.next_seq += 1;
        if early.is_none() && matches!(command, Command::Flush) {
            // No volatile cache: every command completed before it is on
            // the media already, and a flush need not cover the others.
            let result = self.execute(command);
            self.ready.push_back(Completion { tag, result });
        } else {
            let finish_ns = if early.is_some() {
                self.clock_ns
            } else {
                self.schedule(seq, &command)
            };
            self.pending.push(Pending {
                finish_ns,
                seq,
                tag,
                command,
                early,
            });
        }
        if self.faults.controller_resets() {
            self.reset_controller();
        }
        if self.faults.cut_after_submit() {
            self.power_cut();
        }
        Ok(())
    }

    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        self.run_due();
        let mut moved = 0;
        while moved < max && !self.ready.is_empty() {
            let i = self.faults.pick(self.ready.len());
            let done = if i == 0 {
                self.ready.pop_front()
            } else {
                self.ready.swap_remove_back(i)
            };
            out.push(done.expect("index within ready"));
            moved += 1;
        }
        moved
    }

    fn wait(&mut self) -> Result<(), DeviceError> {
        if !self.ready.is_empty() {
            return Ok(());
        }
        let Some(next) = self.pending.peek() else {
            return if self.powered {
                Ok(())
            } else {
                Err(DeviceError::DeviceGone)
            };
        };
        self.clock_ns = self.clock_ns.max(next.finish_ns);
        self.run_due();
        // A command whose finish moved went back in line: wait for the next.
        while self.ready.is_empty() {
            let Some(next) = self.pending.peek() else {
                break;
            };
            self.clock_ns = self.clock_ns.max(next.finish_ns);
            self.run_due();
        }
        Ok(())
    }

    fn in_flight(&self) -> usize {
        self.pending.len() + self.ready.len()
    }

    fn clock_ns(&self) -> u64 {
        self.clock_ns
    }
}

/// How long an open waits for a held image lock before it reports
/// [`SimError::ImageInUse`]. A `flock` follows the open file description,
/// so a child forked by any thread of this process keeps a just-closed
/// image locked until it execs; the wait outlasts that window.
const IMAGE_LOCK_WAIT: Duration = Duration::from_secs(2);

/// Takes the image's exclusive advisory lock (`flock`), so two devices
/// never write one image. A file system that cannot lock (some network
/// and FUSE file systems) gets no lock rather than no image.
fn lock_image(file: &File, path: &Path) -> Result<(), SimError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(()),
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < IMAGE_LOCK_WAIT => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(SimError::ImageInUse {
                    path: path.to_path_buf(),
                })
            }
            Err(std::fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {
                return Ok(())
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(SimError::io("lock", path, e)),
        }
    }
}
