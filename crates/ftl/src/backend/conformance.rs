//! Backend conformance suite: the behaviour every [`Backend`] must show.
//!
//! The suite is plain code, not a test-framework harness, so it runs in
//! `cargo test` against the simulator, from a small binary inside a QEMU
//! guest against the NVMe ZNS backend, and against anything else that
//! implements [`Backend`]. A [`Harness`] hands out fresh devices (and, when
//! it can, cuts their power); [`run_all`] runs every case in [`CASES`] on its
//! own fresh device and returns a [`Report`].
//!
//! Every case drives the device through `submit`/`reap`/`wait` and checks the
//! queue-pair rules on every call: each reaped tag was submitted and is
//! reaped exactly once, `reap` never moves more than `max` and appends to the
//! caller's vector, `in_flight()` equals "submitted and not yet reaped".
//! Data is a deterministic pattern per (seed, zone, offset or append id)
//! whose first bytes name those numbers, so a block read from the wrong
//! place is named in the failure message.
//!
//! A panic inside the backend (or the harness) during a case is caught and
//! reported as that case's failure; the remaining cases still run.
//!
//! Cost: `fill_to_capacity` writes and reads back one whole zone
//! (`zone_capacity_blocks` blocks in `max_transfer_blocks` chunks), and
//! `queue_full_is_busy` puts `queue_depth` reads in flight; everything else
//! touches a few write units per zone. On a ZNS drive with 1 GiB zones the
//! fill case moves 2 GiB; that is the price of checking the Full transition
//! on the real device.
//!
//! Zones that are `Offline` or `ReadOnly` on a fresh device are skipped.
//! Cases that use several zones at once never keep more zones open or active
//! than `max_open_zones` / `max_active_zones` allow, because NVMe ZNS lets
//! a device implicitly close an implicitly opened zone at the limit, a
//! behaviour the contract neither requires nor forbids; only
//! `open_close_limits` goes to the limits, with explicitly opened or closed
//! zones, where the outcome is defined.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::{
    Backend, Command, Completion, DeviceError, Geometry, Outcome, ReadPriority, SubmitError,
    ZoneId, ZoneInfo, ZoneState,
};
use crate::payload::{BlockData, Payload};

/// What the suite needs from the environment a backend lives in.
pub trait Harness {
    type Device: Backend;
    /// A device with every usable zone reset to Empty (offline zones may
    /// exist and must be skipped).
    fn fresh(&mut self) -> Self::Device;
    /// Cut power now (commands in flight are lost or torn) and power the
    /// device on again. `None` = this backend cannot simulate power cuts (the
    /// power-cut cases are then reported as skipped).
    fn power_cycle(&mut self, device: Self::Device) -> Option<Self::Device>;
}

/// The result of one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseReport {
    pub name: &'static str,
    pub outcome: CaseOutcome,
}

/// Passed, skipped (the geometry or harness makes the case impossible, with
/// the reason) or failed (expected vs observed, with zone and offset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseOutcome {
    Passed,
    Skipped(String),
    Failed(String),
}

/// The results of a run, one entry per case in run order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub cases: Vec<CaseReport>,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Passed))
    }

    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Failed(_)))
    }

    pub fn skipped(&self) -> usize {
        self.count(|o| matches!(o, CaseOutcome::Skipped(_)))
    }

    /// No case failed (skipped cases do not count against success).
    pub fn is_success(&self) -> bool {
        self.failed() == 0
    }

    fn count(&self, f: impl Fn(&CaseOutcome) -> bool) -> usize {
        self.cases.iter().filter(|c| f(&c.outcome)).count()
    }
}

impl fmt::Display for CaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            CaseOutcome::Passed => write!(f, "PASS {}", self.name),
            CaseOutcome::Skipped(why) => write!(f, "SKIP {}: {why}", self.name),
            CaseOutcome::Failed(why) => write!(f, "FAIL {}: {why}", self.name),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for case in &self.cases {
            writeln!(f, "{case}")?;
        }
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            self.passed(),
            self.failed(),
            self.skipped()
        )
    }
}

/// Names of every case, in the order [`run_all`] runs them.
pub const CASES: &[&str] = &[
    "geometry",
    "write_at_wp",
    "write_not_at_wp",
    "append_offsets",
    "many_in_flight",
    "queue_full_is_busy",
    "reset",
    "finish",
    "fill_to_capacity",
    "open_close_limits",
    "error_kinds",
    "flush",
    "power_cut",
    "reads_of_unwritten",
    "split_payloads",
];

type CaseFn<H> = fn(&mut H) -> Result<(), Failure>;

fn case_fn<H: Harness>(name: &str) -> Option<(&'static str, CaseFn<H>)> {
    let f: CaseFn<H> = match name {
        "geometry" => case_geometry::<H>,
        "write_at_wp" => case_write_at_wp::<H>,
        "write_not_at_wp" => case_write_not_at_wp::<H>,
        "append_offsets" => case_append_offsets::<H>,
        "many_in_flight" => case_many_in_flight::<H>,
        "queue_full_is_busy" => case_queue_full_is_busy::<H>,
        "reset" => case_reset::<H>,
        "finish" => case_finish::<H>,
        "fill_to_capacity" => case_fill_to_capacity::<H>,
        "open_close_limits" => case_open_close_limits::<H>,
        "error_kinds" => case_error_kinds::<H>,
        "flush" => case_flush::<H>,
        "power_cut" => case_power_cut::<H>,
        "reads_of_unwritten" => case_reads_of_unwritten::<H>,
        "split_payloads" => case_split_payloads::<H>,
        _ => return None,
    };
    let name = CASES.iter().copied().find(|n| *n == name)?;
    Some((name, f))
}

/// Run every case in [`CASES`], each on a fresh device.
pub fn run_all<H: Harness>(harness: &mut H) -> Report {
    let cases = CASES
        .iter()
        .map(|name| run_one(harness, name).expect("every listed case has a function"))
        .collect();
    Report { cases }
}

/// Run one case by name; `None` if no case has that name.
pub fn run_one<H: Harness>(harness: &mut H, name: &str) -> Option<CaseReport> {
    let (name, f) = case_fn::<H>(name)?;
    let outcome = match catch_unwind(AssertUnwindSafe(|| f(harness))) {
        Ok(Ok(())) => CaseOutcome::Passed,
        Ok(Err(Failure::Failed(why))) => CaseOutcome::Failed(why),
        Ok(Err(Failure::Skipped(why))) => CaseOutcome::Skipped(why),
        Err(panic) => CaseOutcome::Failed(format!("panicked: {}", panic_message(&*panic))),
    };
    Some(CaseReport { name, outcome })
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

// ---------------------------------------------------------------------------
// Failures

/// Why a case stopped before the end.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Failure {
    /// The backend broke the contract: expected vs observed.
    Failed(String),
    /// The geometry or harness makes the case impossible.
    Skipped(String),
}

macro_rules! fail {
    ($($arg:tt)+) => {
        return Err(Failure::Failed(format!($($arg)+)))
    };
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            fail!($($arg)+);
        }
    };
}

macro_rules! skip {
    ($($arg:tt)+) => {
        return Err(Failure::Skipped(format!($($arg)+)))
    };
}

trait Context<T> {
    /// Prefix a failure message with where it happened.
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, Failure>;
}

impl<T> Context<T> for Result<T, Failure> {
    fn ctx(self, what: impl FnOnce() -> String) -> Result<T, Failure> {
        self.map_err(|f| match f {
            Failure::Failed(m) => Failure::Failed(format!("{}: {m}", what())),
            skipped => skipped,
        })
    }
}

// ---------------------------------------------------------------------------
// Data patterns

const MAGIC: [u8; 8] = *b"zFTLconf";
/// MAGIC, seed (u64), zone (u32), key (u64), all little-endian.
const HEADER_BYTES: usize = 28;
/// Keys of appended blocks: `APPEND_KEY | id << 32 | block index`; keys of
/// written blocks are their offsets.
const APPEND_KEY: u64 = 1 << 63;

fn append_key(id: u64, index: u64) -> u64 {
    APPEND_KEY | (id << 32) | index
}

fn key_text(key: u64) -> String {
    if key & APPEND_KEY != 0 {
        format!(
            "append #{} block {}",
            (key & !APPEND_KEY) >> 32,
            key & 0xFFFF_FFFF
        )
    } else {
        format!("offset {key}")
    }
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn push_stream(out: &mut Vec<u8>, len: usize, mut state: u64) {
    let end = out.len() + len;
    while out.len() < end {
        let word = splitmix(&mut state).to_le_bytes();
        let take = (end - out.len()).min(8);
        out.extend_from_slice(&word[..take]);
    }
}

/// What one block should hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Expect {
    seed: u64,
    zone: ZoneId,
    key: u64,
    oob: Oob,
}

/// How a block's OOB was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Oob {
    /// A pattern (when the device has OOB bytes).
    Pattern,
    /// An empty OOB buffer: the device stores zeros.
    Empty,
}

impl Expect {
    fn state(&self) -> u64 {
        let mut s = self.seed ^ (u64::from(self.zone) << 40) ^ self.key.rotate_left(17);
        splitmix(&mut s)
    }

    fn push_data(&self, out: &mut Vec<u8>, block_bytes: usize) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.extend_from_slice(&self.zone.to_le_bytes());
        out.extend_from_slice(&self.key.to_le_bytes());
        push_stream(out, block_bytes - HEADER_BYTES, self.state());
    }

    fn push_oob(&self, out: &mut Vec<u8>, oob_bytes: usize) {
        match self.oob {
            Oob::Pattern => push_stream(out, oob_bytes, self.state() ^ 0x00B0_00B0_00B0_00B0),
            Oob::Empty => out.resize(out.len() + oob_bytes, 0),
        }
    }

    fn text(&self) -> String {
        format!(
            "the block of seed {:#x}, zone {}, {}",
            self.seed,
            self.zone,
            key_text(self.key)
        )
    }
}

fn decode(block: &[u8]) -> Option<(u64, ZoneId, u64)> {
    if block.len() < HEADER_BYTES || block[..8] != MAGIC {
        return None;
    }
    let seed = u64::from_le_bytes(block[8..16].try_into().ok()?);
    let zone = u32::from_le_bytes(block[16..20].try_into().ok()?);
    let key = u64::from_le_bytes(block[20..28].try_into().ok()?);
    Some((seed, zone, key))
}

fn is_fill(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0) || bytes.iter().all(|&b| b == 0xFF)
}

fn describe_block(block: &[u8]) -> String {
    if let Some((seed, zone, key)) = decode(block) {
        format!(
            "the block of seed {seed:#x}, zone {zone}, {}",
            key_text(key)
        )
    } else if block.iter().all(|&b| b == 0) {
        "zeros".to_string()
    } else if block.iter().all(|&b| b == 0xFF) {
        "0xFF fill".to_string()
    } else {
        format!(
            "unrecognised bytes {:02x?}...",
            &block[..block.len().min(16)]
        )
    }
}

fn describe_cmd(cmd: &Command) -> String {
    match cmd {
        Command::Read {
            zone,
            offset_blocks,
            block_count,
            priority,
        } => {
            format!("Read(zone {zone}, offset {offset_blocks}, {block_count} blocks, {priority:?})")
        }
        Command::Write {
            zone,
            offset_blocks,
            data,
            oob,
        } => format!(
            "Write(zone {zone}, offset {offset_blocks}, {} data bytes, {} OOB bytes)",
            data.len(),
            oob.len()
        ),
        Command::Append { zone, data, oob } => {
            format!(
                "Append(zone {zone}, {} data bytes, {} OOB bytes)",
                data.len(),
                oob.len()
            )
        }
        Command::Reset { zone } => format!("Reset(zone {zone})"),
        Command::Finish { zone } => format!("Finish(zone {zone})"),
        Command::Open { zone } => format!("Open(zone {zone})"),
        Command::Close { zone } => format!("Close(zone {zone})"),
        Command::Flush => "Flush".to_string(),
    }
}

fn describe_outcome(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Read { data, oob } => {
            format!("Read({} data bytes, {} OOB bytes)", data.len(), oob.len())
        }
        other => format!("{other:?}"),
    }
}

fn c32(n: u64) -> u32 {
    u32::try_from(n).expect("block count fits u32")
}

// ---------------------------------------------------------------------------
// The device under test, with the queue-pair rules checked on every call

/// Consecutive empty reaps after `wait()` before the suite calls it a hang.
const SPIN_LIMIT: u32 = 1_000_000;

struct Dev<B: Backend> {
    b: B,
    g: Geometry,
    next_tag: u64,
    /// Submitted, not yet reaped: tag -> command description.
    pending: BTreeMap<u64, String>,
}

type Done = BTreeMap<u64, Result<Outcome, DeviceError>>;

impl<B: Backend> Dev<B> {
    fn new(b: B) -> Result<Self, Failure> {
        let g = b.geometry().clone();
        if let Err(e) = g.validate() {
            fail!("geometry() is invalid: {e} ({g:?})");
        }
        let in_flight = b.in_flight();
        ensure!(
            in_flight == 0,
            "a new device reports {in_flight} commands in flight"
        );
        Ok(Dev {
            b,
            g,
            next_tag: 0x7A60_0000,
            pending: BTreeMap::new(),
        })
    }

    fn into_inner(self) -> B {
        self.b
    }

    fn bs(&self) -> usize {
        self.g.block_size_bytes as usize
    }

    fn wu(&self) -> u64 {
        u64::from(self.g.write_unit_blocks)
    }

    fn cap(&self) -> u64 {
        self.g.zone_capacity_blocks
    }

    fn max_transfer(&self) -> u64 {
        u64::from(self.g.max_transfer_blocks)
    }

    /// How many zones may be open and active at once, up to `want`.
    fn budget(&self, want: usize) -> usize {
        let mut n = want;
        for limit in [self.g.max_open_zones, self.g.max_active_zones] {
            if limit != 0 {
                n = n.min(limit as usize);
            }
        }
        n
    }

    // -- queue pair ---------------------------------------------------------

    fn try_submit(&mut self, cmd: Command) -> Result<u64, SubmitError> {
        let tag = self.next_tag;
        self.next_tag += 1;
        let desc = describe_cmd(&cmd);
        self.b.submit(tag, cmd)?;
        self.pending.insert(tag, desc);
        Ok(tag)
    }

    fn submit(&mut self, cmd: Command) -> Result<u64, Failure> {
        let desc = describe_cmd(&cmd);
        let n = self.pending.len();
        match self.try_submit(cmd) {
            Ok(tag) => Ok(tag),
            Err(e) => fail!(
                "submit({desc}) with {n} commands in flight (queue_depth {}) answered {e:?}",
                self.g.queue_depth
            ),
        }
    }

    fn reap(&mut self, max: usize) -> Result<Vec<Completion>, Failure> {
        let sentinel = Completion {
            tag: u64::MAX - 7,
            result: Err(DeviceError::DeviceGone),
        };
        let mut out = vec![sentinel.clone()];
        let n = self.b.reap(&mut out, max);
        ensure!(
            out.first() == Some(&sentinel),
            "reap() disturbed completions already in the caller's vector (it must append)"
        );
        let got = out.split_off(1);
        ensure!(
            n == got.len(),
            "reap(max {max}) returned {n} but moved {} completions",
            got.len()
        );
        ensure!(n <= max, "reap(max {max}) moved {n} completions");
        for c in &got {
            ensure!(
                self.pending.remove(&c.tag).is_some(),
                "reap() returned tag {:#x} ({:?}), which is not in flight (already reaped, \
                 refused with Busy, or never submitted)",
                c.tag,
                c.result.as_ref().map(describe_outcome)
            );
        }
        let in_flight = self.b.in_flight();
        ensure!(
            in_flight == self.pending.len(),
            "in_flight() is {in_flight} but {} commands are submitted and not reaped",
            self.pending.len()
        );
        Ok(got)
    }

    fn wait(&mut self) -> Result<(), Failure> {
        match self.b.wait() {
            Ok(()) => Ok(()),
            Err(e) => fail!("wait() failed with {} in flight: {e:?}", self.pending.len()),
        }
    }

    /// Reap until nothing is in flight; every completion by tag.
    fn drain(&mut self) -> Result<Done, Failure> {
        const MAXES: [usize; 4] = [1, 3, 64, 4096];
        let mut done = Done::new();
        let mut idle = 0u32;
        let mut turn = 0usize;
        while !self.pending.is_empty() {
            let got = self.reap(MAXES[turn % MAXES.len()])?;
            turn += 1;
            if got.is_empty() {
                idle += 1;
                if idle > SPIN_LIMIT {
                    let (tag, first) = self.pending.iter().next().expect("pending");
                    fail!(
                        "{} commands never complete: wait() keeps returning with nothing to \
                         reap (e.g. tag {tag:#x}: {first})",
                        self.pending.len()
                    );
                }
                self.wait()?;
            } else {
                idle = 0;
            }
            for c in got {
                done.insert(c.tag, c.result);
            }
        }
        Ok(done)
    }

    /// One command on an idle queue.
    fn exec(&mut self, cmd: Command) -> Result<Result<Outcome, DeviceError>, Failure> {
        assert!(
            self.pending.is_empty(),
            "suite bug: exec() with commands in flight"
        );
        let tag = self.submit(cmd)?;
        let mut done = self.drain()?;
        Ok(done.remove(&tag).expect("drain returns every tag"))
    }

    fn exec_ok(&mut self, cmd: Command) -> Result<Outcome, Failure> {
        let desc = describe_cmd(&cmd);
        match self.exec(cmd)? {
            Ok(o) => Ok(o),
            Err(e) => fail!("{desc} failed: {e:?}"),
        }
    }

    /// Run `cmd` and expect it to fail as `pred` describes.
    fn exec_err(
        &mut self,
        cmd: Command,
        expected: &str,
        pred: impl Fn(&DeviceError) -> bool,
    ) -> Result<DeviceError, Failure> {
        let desc = describe_cmd(&cmd);
        match self.exec(cmd)? {
            Ok(o) => fail!(
                "{desc}: expected {expected}, but it succeeded ({})",
                describe_outcome(&o)
            ),
            Err(e) if pred(&e) => Ok(e),
            Err(e) => fail!("{desc}: expected {expected}, got {e:?}"),
        }
    }

    fn done_ok(&mut self, cmd: Command) -> Result<(), Failure> {
        let desc = describe_cmd(&cmd);
        match self.exec_ok(cmd)? {
            Outcome::Done => Ok(()),
            o => fail!(
                "{desc} completed as {} instead of Done",
                describe_outcome(&o)
            ),
        }
    }

    // -- zones --------------------------------------------------------------

    fn info(&mut self, zone: ZoneId) -> Result<ZoneInfo, Failure> {
        match self.b.zone_info(zone) {
            Ok(i) => {
                ensure!(
                    i.zone == zone,
                    "zone_info({zone}) describes zone {}",
                    i.zone
                );
                ensure!(
                    i.state == ZoneState::Offline || i.capacity_blocks == self.cap(),
                    "zone_info({zone}) reports capacity {} blocks, geometry says {}",
                    i.capacity_blocks,
                    self.cap()
                );
                Ok(i)
            }
            Err(e) => fail!("zone_info({zone}) failed: {e:?}"),
        }
    }

    /// Check state and (unless `None`) write pointer.
    fn expect_zone(
        &mut self,
        zone: ZoneId,
        state: ZoneState,
        wp: Option<u64>,
    ) -> Result<(), Failure> {
        let i = self.info(zone)?;
        ensure!(
            i.state == state && wp.is_none_or(|wp| i.write_pointer_blocks == wp),
            "zone {zone}: expected state {state:?}{}, found {:?} with write pointer {}",
            wp.map(|wp| format!(" with write pointer {wp}"))
                .unwrap_or_default(),
            i.state,
            i.write_pointer_blocks
        );
        Ok(())
    }

    /// Up to `n` usable zones (not Offline/ReadOnly), each checked to be
    /// Empty at write pointer 0 as `fresh()` promises.
    fn usable(&mut self, n: usize) -> Result<Vec<ZoneId>, Failure> {
        let mut zones = Vec::with_capacity(n);
        for z in 0..self.g.zone_count {
            if zones.len() == n {
                break;
            }
            let i = self.info(z)?;
            match i.state {
                ZoneState::Offline | ZoneState::ReadOnly => continue,
                ZoneState::Empty if i.write_pointer_blocks == 0 => zones.push(z),
                s => fail!(
                    "fresh device: zone {z} is {s:?} with write pointer {}, expected Empty at 0",
                    i.write_pointer_blocks
                ),
            }
        }
        Ok(zones)
    }

    /// Exactly `n` usable zones, or skip the case.
    fn pick(&mut self, n: usize) -> Result<Vec<ZoneId>, Failure> {
        let zones = self.usable(n)?;
        if zones.len() < n {
            skip!("needs {n} usable zones, the device has {}", zones.len());
        }
        Ok(zones)
    }

    // -- data ---------------------------------------------------------------

    fn exps(
        &self,
        zone: ZoneId,
        seed: u64,
        keys: impl Iterator<Item = u64>,
        oob: Oob,
    ) -> Vec<Expect> {
        keys.map(|key| Expect {
            seed,
            zone,
            key,
            oob,
        })
        .collect()
    }

    /// Data and OOB buffers for writing `exps`.
    fn buffers(&self, exps: &[Expect]) -> (Vec<u8>, Vec<u8>) {
        let bs = self.bs();
        let os = self.g.oob_size_bytes as usize;
        let mut data = Vec::with_capacity(bs * exps.len());
        let mut oob = Vec::new();
        for e in exps {
            e.push_data(&mut data, bs);
            if os > 0 && e.oob == Oob::Pattern {
                e.push_oob(&mut oob, os);
            }
        }
        (data, oob)
    }

    fn write_cmd(&self, zone: ZoneId, offset: u64, exps: &[Expect]) -> Command {
        let (data, oob) = self.buffers(exps);
        Command::Write {
            zone,
            offset_blocks: offset,
            data: data.into(),
            oob,
        }
    }

    fn append_cmd(&self, zone: ZoneId, exps: &[Expect]) -> Command {
        let (data, oob) = self.buffers(exps);
        Command::Append {
            zone,
            data: data.into(),
            oob,
        }
    }

    /// The data of `exps` in one buffer per entry of `parts` (blocks each,
    /// in order), as the FTL's write buffer hands a device the blocks of
    /// several host requests; and the OOB bytes.
    fn split_buffers(&self, exps: &[Expect], parts: &[u64]) -> (Payload, Vec<u8>) {
        let (data, oob) = self.buffers(exps);
        let bs = self.bs();
        let mut payload = Payload::new();
        let mut at = 0;
        for &n in parts {
            let end = at + n as usize * bs;
            payload.push(BlockData::from(data[at..end].to_vec()));
            at = end;
        }
        assert_eq!(at, data.len(), "parts cover the blocks");
        (payload, oob)
    }

    /// Check a Written outcome; returns the offset.
    fn check_written(
        &self,
        what: &str,
        outcome: &Outcome,
        zone: ZoneId,
        offset: Option<u64>,
        n: u64,
    ) -> Result<u64, Failure> {
        match *outcome {
            Outcome::Written {
                zone: z,
                offset_blocks,
                block_count,
            } if z == zone
                && u64::from(block_count) == n
                && offset.is_none_or(|o| o == offset_blocks) =>
            {
                Ok(offset_blocks)
            }
            ref o => fail!(
                "{what} completed as {}, expected Written(zone {zone}{}, {n} blocks)",
                describe_outcome(o),
                offset.map(|o| format!(", offset {o}")).unwrap_or_default()
            ),
        }
    }

    /// Write blocks keyed by offset at `offset` and expect success.
    fn write(
        &mut self,
        zone: ZoneId,
        offset: u64,
        n: u64,
        seed: u64,
        oob: Oob,
    ) -> Result<(), Failure> {
        let exps = self.exps(zone, seed, offset..offset + n, oob);
        let cmd = self.write_cmd(zone, offset, &exps);
        let what = describe_cmd(&cmd);
        let o = self.exec_ok(cmd)?;
        self.check_written(&what, &o, zone, Some(offset), n)
            .map(|_| ())
    }

    /// Append `exps` and expect success; returns the offset.
    fn append(&mut self, zone: ZoneId, exps: &[Expect]) -> Result<u64, Failure> {
        let cmd = self.append_cmd(zone, exps);
        let what = describe_cmd(&cmd);
        let o = self.exec_ok(cmd)?;
        self.check_written(&what, &o, zone, None, exps.len() as u64)
    }

    /// Check a Read outcome's shape; returns (data, oob).
    fn check_read(
        &self,
        what: &str,
        outcome: Outcome,
        n: u64,
    ) -> Result<(Vec<u8>, Vec<u8>), Failure> {
        match outcome {
            Outcome::Read { data, oob } => {
                let want_data = self.g.data_bytes(n);
                let want_oob = self.g.oob_bytes(n);
                ensure!(
                    data.len() == want_data && oob.len() == want_oob,
                    "{what} returned {} data and {} OOB bytes, expected {want_data} and {want_oob}",
                    data.len(),
                    oob.len()
                );
                Ok((data, oob))
            }
            o => fail!(
                "{what} completed as {} instead of Read",
                describe_outcome(&o)
            ),
        }
    }

    fn read(&mut self, zone: ZoneId, offset: u64, n: u64) -> Result<(Vec<u8>, Vec<u8>), Failure> {
        let cmd = Command::Read {
            zone,
            offset_blocks: offset,
            block_count: c32(n),
            priority: ReadPriority::Host,
        };
        let what = describe_cmd(&cmd);
        let o = self.exec_ok(cmd)?;
        self.check_read(&what, o, n)
    }

    /// Compare read buffers for blocks starting at `offset` with `exps`.
    fn compare(
        &self,
        zone: ZoneId,
        offset: u64,
        exps: &[Expect],
        data: &[u8],
        oob: &[u8],
    ) -> Result<(), Failure> {
        let bs = self.bs();
        let os = self.g.oob_size_bytes as usize;
        let mut want = Vec::with_capacity(bs.max(os));
        for (i, e) in exps.iter().enumerate() {
            let off = offset + i as u64;
            let got = &data[i * bs..(i + 1) * bs];
            want.clear();
            e.push_data(&mut want, bs);
            if got != want.as_slice() {
                let seen = if decode(got) == Some((e.seed, e.zone, e.key)) {
                    let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
                    format!("a corrupted copy of it (first difference at byte {at})")
                } else {
                    describe_block(got)
                };
                fail!(
                    "zone {zone} offset {off}: expected {} but read {seen}",
                    e.text()
                );
            }
            if os > 0 {
                let got = &oob[i * os..(i + 1) * os];
                want.clear();
                e.push_oob(&mut want, os);
                ensure!(
                    got == want.as_slice(),
                    "zone {zone} offset {off}: data right but OOB differs ({:?} OOB written): \
                     expected {:02x?}... read {:02x?}...",
                    e.oob,
                    &want[..os.min(16)],
                    &got[..os.min(16)]
                );
            }
        }
        Ok(())
    }

    /// Read `exps.len()` blocks from `offset` in max_transfer chunks and compare.
    fn verify(&mut self, zone: ZoneId, offset: u64, exps: &[Expect]) -> Result<(), Failure> {
        let mt = self.max_transfer() as usize;
        for (i, chunk) in exps.chunks(mt).enumerate() {
            let off = offset + (i * mt) as u64;
            let (data, oob) = self.read(zone, off, chunk.len() as u64)?;
            self.compare(zone, off, chunk, &data, &oob)?;
        }
        Ok(())
    }

    /// Verify blocks keyed by offset.
    fn verify_written(
        &mut self,
        zone: ZoneId,
        offset: u64,
        n: u64,
        seed: u64,
        oob: Oob,
    ) -> Result<(), Failure> {
        let exps = self.exps(zone, seed, offset..offset + n, oob);
        self.verify(zone, offset, &exps)
    }

    /// Blocks that were never written (or were reset) must not return data
    /// of any block: an error, zeros or 0xFF fill are fine.
    fn check_unwritten(&mut self, zone: ZoneId, offset: u64, n: u64) -> Result<(), Failure> {
        let cmd = Command::Read {
            zone,
            offset_blocks: offset,
            block_count: c32(n),
            priority: ReadPriority::Host,
        };
        let what = describe_cmd(&cmd);
        let (data, oob) = match self.exec(cmd)? {
            Err(_) => return Ok(()),
            Ok(o) => self.check_read(&what, o, n)?,
        };
        let bs = self.bs();
        let os = self.g.oob_size_bytes as usize;
        for i in 0..n as usize {
            let block = &data[i * bs..(i + 1) * bs];
            ensure!(
                is_fill(block),
                "zone {zone} offset {}: an unwritten block read as {} (expected an error, zeros \
                 or 0xFF fill)",
                offset + i as u64,
                describe_block(block)
            );
            if os > 0 {
                let o = &oob[i * os..(i + 1) * os];
                ensure!(
                    is_fill(o),
                    "zone {zone} offset {}: the OOB of an unwritten block read as {:02x?}...",
                    offset + i as u64,
                    &o[..os.min(16)]
                );
            }
        }
        Ok(())
    }
}

fn limit_open_or_active(
    zone: ZoneId,
    g: &Geometry,
    active_full: bool,
) -> impl Fn(&DeviceError) -> bool {
    let (mo, ma) = (g.max_open_zones, g.max_active_zones);
    move |e| match *e {
        DeviceError::TooManyOpenZones { zone: z, limit } => z == zone && limit == mo,
        DeviceError::TooManyActiveZones { zone: z, limit } => {
            active_full && z == zone && limit == ma
        }
        _ => false,
    }
}

/// An expected-error test chosen at run time.
type Pred = Box<dyn Fn(&DeviceError) -> bool>;

fn too_many_active(zone: ZoneId, limit: u32) -> impl Fn(&DeviceError) -> bool {
    move |e| matches!(*e, DeviceError::TooManyActiveZones { zone: z, limit: l } if z == zone && l == limit)
}

fn zone_full(zone: ZoneId) -> impl Fn(&DeviceError) -> bool {
    move |e| matches!(*e, DeviceError::ZoneFull { zone: z } if z == zone)
}

fn out_of_range(zone: ZoneId, offset: u64, n: u64) -> impl Fn(&DeviceError) -> bool {
    move |e| {
        matches!(*e, DeviceError::OutOfRange { zone: z, offset_blocks: o, block_count: c }
            if z == zone && o == offset && c == n)
    }
}

fn too_large(n: u64, limit: u32) -> impl Fn(&DeviceError) -> bool {
    move |e| matches!(*e, DeviceError::TooLarge { block_count: c, limit_blocks: l } if c == n && l == limit)
}

fn is_out_of_range(zone: ZoneId) -> impl Fn(&DeviceError) -> bool {
    move |e| matches!(*e, DeviceError::OutOfRange { zone: z, .. } if z == zone)
}

// ---------------------------------------------------------------------------
// Cases

fn case_geometry<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let g = d.g.clone();
    ensure!(d.b.geometry() == &g, "geometry() changed between two calls");
    d.wait().ctx(|| "wait() on an idle queue".into())?;
    let in_flight = d.b.in_flight();
    ensure!(
        in_flight == 0,
        "in_flight() is {in_flight} on an idle device"
    );
    let t0 = d.b.clock_ns();
    let mut usable = 0u32;
    for z in 0..g.zone_count {
        let i = d.info(z)?;
        match i.state {
            ZoneState::Offline => ensure!(
                i.capacity_blocks == g.zone_capacity_blocks || i.capacity_blocks == 0,
                "offline zone {z} reports capacity {} blocks",
                i.capacity_blocks
            ),
            ZoneState::ReadOnly => {}
            state => {
                ensure!(
                    state == ZoneState::Empty && i.write_pointer_blocks == 0,
                    "fresh device: zone {z} is {state:?} with write pointer {}, expected Empty at 0",
                    i.write_pointer_blocks
                );
                usable += 1;
            }
        }
    }
    ensure!(usable > 0, "no usable zone among {}", g.zone_count);
    let mut beyond = vec![g.zone_count, u32::MAX];
    beyond.dedup();
    for z in beyond {
        match d.b.zone_info(z) {
            Err(DeviceError::NoSuchZone { zone }) if zone == z => {}
            other => fail!(
                "zone_info({z}) with zone_count {}: expected NoSuchZone, got {other:?}",
                g.zone_count
            ),
        }
    }
    let t1 = d.b.clock_ns();
    ensure!(t1 >= t0, "clock_ns() went backwards from {t0} to {t1}");
    Ok(())
}

fn case_write_at_wp<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let zones = d.usable(2)?;
    let Some(&z) = zones.first() else {
        skip!("no usable zone")
    };
    let (wu, cap, mt) = (d.wu(), d.cap(), d.max_transfer());
    let seed = 0x0200;
    // (offset, blocks, oob) of every write, in order.
    let mut writes = Vec::new();
    let mut wp = 0;
    for (i, size) in [wu, wu, 2 * wu, 3 * wu, mt, wu].into_iter().enumerate() {
        let n = size.min(cap - wp);
        if n == 0 {
            break;
        }
        let oob = if i == 2 { Oob::Empty } else { Oob::Pattern };
        d.write(z, wp, n, seed, oob).ctx(|| format!("write #{i}"))?;
        writes.push((wp, n, oob));
        wp += n;
        if wp == cap {
            d.expect_zone(z, ZoneState::Full, None)?;
        } else {
            d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(wp))?;
        }
    }
    let mut model = Vec::new();
    for &(off, n, oob) in &writes {
        model.extend(d.exps(z, seed, off..off + n, oob));
        d.verify(z, off, &model[off as usize..])?;
    }
    // Whole range, then unaligned single blocks and a range that starts mid-write.
    d.verify(z, 0, &model)?;
    for off in [1, wp / 2, wp - 1] {
        if off < wp {
            let n = (wp - off).min(3).min(mt);
            d.verify(z, off, &model[off as usize..(off + n) as usize])?;
        }
    }
    // A second zone must not alias the first.
    if let (Some(&z2), true) = (zones.get(1), d.budget(2) >= 2 && wp < cap) {
        d.write(z2, 0, wu, seed + 1, Oob::Pattern)?;
        d.expect_zone(z2, ZoneState::ImplicitlyOpen, Some(wu))?;
        d.verify_written(z2, 0, wu, seed + 1, Oob::Pattern)?;
        d.verify(z, 0, &model)?;
    }
    Ok(())
}

fn case_write_not_at_wp<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let z = d.pick(1)?[0];
    let (wu, cap) = (d.wu(), d.cap());
    let (good, bad) = (0x0300, 0x0301);
    let bad_wp = |offset: u64, wp: u64| {
        move |e: &DeviceError| {
            matches!(*e, DeviceError::BadWritePointer { zone, offset_blocks, write_pointer_blocks }
                if zone == z && offset_blocks == offset && write_pointer_blocks == wp)
        }
    };
    // Ahead of the write pointer of an empty zone.
    if 2 * wu <= cap {
        let exps = d.exps(z, bad, wu..2 * wu, Oob::Pattern);
        let cmd = d.write_cmd(z, wu, &exps);
        d.exec_err(
            cmd,
            &format!("BadWritePointer(zone {z}, offset {wu}, write pointer 0)"),
            bad_wp(wu, 0),
        )?;
        d.expect_zone(z, ZoneState::Empty, Some(0))
            .ctx(|| "after a rejected write to an empty zone".into())?;
        d.check_unwritten(z, wu, wu)?;
    }
    d.write(z, 0, wu, good, Oob::Pattern)?;
    d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(wu))?;
    // Ahead of the write pointer.
    if 3 * wu <= cap {
        let exps = d.exps(z, bad, 2 * wu..3 * wu, Oob::Pattern);
        let cmd = d.write_cmd(z, 2 * wu, &exps);
        let expected = format!(
            "BadWritePointer(zone {z}, offset {}, write pointer {wu})",
            2 * wu
        );
        d.exec_err(cmd, &expected, bad_wp(2 * wu, wu))?;
        d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(wu))
            .ctx(|| "after a write ahead of the write pointer".into())?;
        d.check_unwritten(z, 2 * wu, wu)?;
    }
    // Behind the write pointer: must not overwrite.
    let exps = d.exps(z, bad, 0..wu, Oob::Pattern);
    let cmd = d.write_cmd(z, 0, &exps);
    d.exec_err(
        cmd,
        &format!("BadWritePointer(zone {z}, offset 0, write pointer {wu})"),
        bad_wp(0, wu),
    )?;
    d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(wu))
        .ctx(|| "after a write behind the write pointer".into())?;
    d.verify_written(z, 0, wu, good, Oob::Pattern)
        .ctx(|| "after a rejected write behind the write pointer".into())?;
    // The right offset still works.
    if 2 * wu <= cap {
        d.write(z, wu, wu, good, Oob::Pattern)?;
        d.verify_written(z, 0, 2 * wu, good, Oob::Pattern)?;
    }
    Ok(())
}

fn case_append_offsets<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let z = d.pick(1)?[0];
    let (wu, cap, ma) = (d.wu(), d.cap(), u64::from(d.g.max_append_blocks));
    let seed = 0x0400;
    let mut next = 0u64;
    let mut id = 0u64;
    // Sequential appends (synchronous), in at most half the zone.
    let half = (cap / 2 / wu * wu).max(wu);
    for size in [wu, wu, (2 * wu).min(ma), ma, wu] {
        if next + size > half {
            continue;
        }
        let exps = d.exps(z, seed, (0..size).map(|i| append_key(id, i)), Oob::Pattern);
        let off = d.append(z, &exps).ctx(|| format!("append #{id}"))?;
        ensure!(
            off == next,
            "append #{id} ({size} blocks) landed at offset {off}, expected {next}"
        );
        next += size;
        if next == cap {
            d.expect_zone(z, ZoneState::Full, None)?;
        } else {
            d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(next))?;
        }
        d.verify(z, off, &exps)?;
        id += 1;
    }
    // Many appends in flight at once.
    let qd = d.g.queue_depth as usize;
    let start = next;
    let mut batch: BTreeMap<u64, Vec<Expect>> = BTreeMap::new();
    let mut planned = start;
    for i in 0..qd.min(16) as u64 {
        let size = if i % 2 == 1 && 2 * wu <= ma {
            2 * wu
        } else {
            wu
        };
        if planned + size > cap {
            break;
        }
        let exps = d.exps(z, seed, (0..size).map(|j| append_key(id, j)), Oob::Pattern);
        let tag = d.submit(d.append_cmd(z, &exps))?;
        batch.insert(tag, exps);
        planned += size;
        id += 1;
    }
    if batch.is_empty() {
        return Ok(());
    }
    let done = d.drain()?;
    let mut placed = Vec::new();
    for (tag, exps) in &batch {
        let what = format!("append tag {tag:#x} ({} blocks)", exps.len());
        let outcome = match &done[tag] {
            Ok(o) => o,
            Err(e) => fail!("{what} in a batch failed: {e:?}"),
        };
        let off = d.check_written(&what, outcome, z, None, exps.len() as u64)?;
        placed.push((off, exps.len() as u64, *tag));
    }
    placed.sort();
    let mut expect_off = start;
    for &(off, n, tag) in &placed {
        ensure!(
            off == expect_off,
            "{} appends in flight at once should tile offsets {start}..{planned}; sorted by offset \
             they are {:?} (offset, blocks, tag), breaking at {expect_off}",
            batch.len(),
            placed,
        );
        d.verify(z, off, &batch[&tag])
            .ctx(|| format!("append tag {tag:#x}"))?;
        expect_off += n;
    }
    if planned == cap {
        d.expect_zone(z, ZoneState::Full, None)?;
    } else {
        d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(planned))?;
    }
    Ok(())
}

/// Writes and appends whose data is in several buffers, as the FTL's write
/// buffer hands a device the blocks of several host requests without
/// copying them: the parts must reach the media in order. Parts of one
/// block, parts of 64 KiB or more (which a backend may send as a vector
/// when the program aligns large buffers), a mix, and more parts than a
/// vector is likely to take.
fn case_split_payloads<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let z = d.pick(1)?[0];
    let (wu, cap) = (d.wu(), d.cap());
    let limit = d.max_transfer().min(u64::from(d.g.max_append_blocks));
    let large = (64u64 << 10).div_ceil(d.bs() as u64).max(1);
    let seed = 0x0F00;
    let splits: [Vec<u64>; 4] = [
        vec![1; 8],
        vec![large; 4],
        vec![1, large, 3, large, 2],
        vec![1; 24],
    ];
    let mut wp = 0;
    let mut id = 0u64;
    for parts in splits {
        // Trim to what one command takes and to whole write units.
        let mut parts: Vec<u64> = parts
            .iter()
            .scan(0u64, |total, &n| {
                let n = n.min(limit - *total);
                *total += n;
                Some(n)
            })
            .filter(|&n| n > 0)
            .collect();
        let total: u64 = parts.iter().sum();
        let short = total % wu;
        if short > 0 {
            let last = parts.last_mut().expect("a part");
            if *last > short {
                *last -= short;
            } else {
                parts.pop();
            }
        }
        let n: u64 = parts.iter().sum();
        if n == 0 || wp + 2 * n > cap {
            continue;
        }
        let what = format!("{} blocks in parts {parts:?}", n);
        // A write at the write pointer...
        let exps = d.exps(z, seed, wp..wp + n, Oob::Pattern);
        let (data, oob) = d.split_buffers(&exps, &parts);
        let o = d.exec_ok(Command::Write {
            zone: z,
            offset_blocks: wp,
            data,
            oob,
        })?;
        d.check_written(&format!("write of {what}"), &o, z, Some(wp), n)?;
        d.verify(z, wp, &exps).ctx(|| format!("write of {what}"))?;
        wp += n;
        // ...and an append.
        let exps = d.exps(z, seed, (0..n).map(|i| append_key(id, i)), Oob::Pattern);
        let (data, oob) = d.split_buffers(&exps, &parts);
        let o = d.exec_ok(Command::Append { zone: z, data, oob })?;
        let off = d.check_written(&format!("append of {what}"), &o, z, None, n)?;
        ensure!(off == wp, "append of {what} landed at {off}, expected {wp}");
        d.verify(z, off, &exps)
            .ctx(|| format!("append of {what}"))?;
        wp += n;
        id += 1;
    }
    ensure!(
        wp > 0,
        "no split fitted the zone (capacity {cap}, limit {limit})"
    );
    Ok(())
}

fn case_many_in_flight<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let k = d.budget(4);
    let zones = d.usable(k)?;
    if zones.is_empty() {
        skip!("no usable zone");
    }
    let (wu, cap, mt) = (d.wu(), d.cap(), d.max_transfer());
    let seed = 0x0500;
    let prefix = if cap >= 4 * wu { 2 * wu } else { wu };
    for &z in &zones {
        d.write(z, 0, prefix, seed, Oob::Pattern)?;
    }
    enum Planned {
        Write { zone: ZoneId, offset: u64, n: u64 },
        Read { zone: ZoneId, offset: u64, n: u64 },
    }
    let total = (d.g.queue_depth as usize).min(128);
    let mut wps: Vec<u64> = vec![prefix; zones.len()];
    let mut plan = BTreeMap::new();
    for i in 0..total {
        let zi = i % zones.len();
        let z = zones[zi];
        let want_write = (i / zones.len()) % 2 == 0;
        let size = if i % 3 == 2 && 2 * wu <= mt {
            2 * wu
        } else {
            wu
        };
        let cmd = if want_write && wps[zi] + size <= cap {
            let offset = wps[zi];
            wps[zi] += size;
            let exps = d.exps(z, seed, offset..offset + size, Oob::Pattern);
            (
                d.write_cmd(z, offset, &exps),
                Planned::Write {
                    zone: z,
                    offset,
                    n: size,
                },
            )
        } else {
            let offset = (i as u64 * 7) % prefix;
            let n = (1 + i as u64 % 3).min(prefix - offset).min(mt);
            let cmd = Command::Read {
                zone: z,
                offset_blocks: offset,
                block_count: c32(n),
                // Both kinds: a device that serves host reads first must
                // still return what every read asked for.
                priority: if i % 4 < 2 {
                    ReadPriority::Host
                } else {
                    ReadPriority::Background
                },
            };
            (cmd, Planned::Read { zone: z, offset, n })
        };
        let tag = d.submit(cmd.0)?;
        plan.insert(tag, cmd.1);
    }
    let in_flight = d.b.in_flight();
    ensure!(
        in_flight == total,
        "in_flight() is {in_flight} after {total} submissions without a reap"
    );
    let done = d.drain()?;
    ensure!(
        done.len() == total,
        "{} completions for {total} commands",
        done.len()
    );
    for (tag, p) in &plan {
        let result = done[tag].clone();
        match *p {
            Planned::Write { zone, offset, n } => {
                let what = format!("tag {tag:#x}: write of {n} blocks to zone {zone} at {offset}");
                match result {
                    Ok(o) => d
                        .check_written(&what, &o, zone, Some(offset), n)
                        .map(|_| ())?,
                    Err(e) => {
                        fail!("{what} (submitted in order behind earlier writes) failed: {e:?}")
                    }
                }
            }
            Planned::Read { zone, offset, n } => {
                let what = format!("tag {tag:#x}: read of {n} blocks of zone {zone} at {offset}");
                let o = match result {
                    Ok(o) => o,
                    Err(e) => fail!("{what} failed: {e:?}"),
                };
                let (data, oob) = d.check_read(&what, o, n)?;
                let exps = d.exps(zone, seed, offset..offset + n, Oob::Pattern);
                d.compare(zone, offset, &exps, &data, &oob)
                    .ctx(|| what.clone())?;
            }
        }
    }
    for (zi, &z) in zones.iter().enumerate() {
        let wp = wps[zi];
        if wp == cap {
            d.expect_zone(z, ZoneState::Full, None)?;
        } else {
            d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(wp))?;
        }
        d.verify_written(z, 0, wp, seed, Oob::Pattern)
            .ctx(|| "after the batch".into())?;
    }
    Ok(())
}

fn case_queue_full_is_busy<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let z = d.pick(1)?[0];
    let wu = d.wu();
    let seed = 0x0600;
    d.write(z, 0, wu, seed, Oob::Pattern)?;
    let qd = d.g.queue_depth as usize;
    let read = || Command::Read {
        zone: z,
        offset_blocks: 0,
        block_count: 1,
        priority: ReadPriority::Host,
    };
    for _ in 0..qd {
        d.submit(read())?;
    }
    let expect_busy = |d: &mut Dev<H::Device>, when: &str| -> Result<(), Failure> {
        match d.try_submit(read()) {
            Err(SubmitError::Busy) => Ok(()),
            Ok(tag) => fail!(
                "{when}: submit with queue_depth {qd} commands in flight was accepted (tag \
                 {tag:#x}), expected Busy"
            ),
            Err(e) => fail!("{when}: submit with a full queue answered {e:?}, expected Busy"),
        }
    };
    expect_busy(&mut d, "full queue")?;
    expect_busy(&mut d, "full queue, second try")?;
    let in_flight = d.b.in_flight();
    ensure!(
        in_flight == qd,
        "in_flight() is {in_flight} with a full queue of {qd}"
    );
    d.wait()?;
    expect_busy(&mut d, "after wait() but before any reap")?;
    // Reap exactly one, then one submission fits again.
    let mut idle = 0;
    let first = loop {
        let got = d.reap(1)?;
        if let Some(c) = got.into_iter().next() {
            break c;
        }
        idle += 1;
        ensure!(
            idle <= SPIN_LIMIT,
            "nothing to reap after wait() with a full queue"
        );
        d.wait()?;
    };
    d.submit(read())
        .ctx(|| "after reaping one completion from a full queue".into())?;
    expect_busy(&mut d, "full again after one reap and one submit")?;
    let mut done = d.drain()?;
    done.insert(first.tag, first.result);
    ensure!(
        done.len() == qd + 1,
        "{} completions for {} accepted reads",
        done.len(),
        qd + 1
    );
    let exps = d.exps(z, seed, 0..1, Oob::Pattern);
    for (tag, result) in done {
        let what = format!("read tag {tag:#x}");
        match result {
            Ok(o) => {
                let (data, oob) = d.check_read(&what, o, 1)?;
                d.compare(z, 0, &exps, &data, &oob).ctx(|| what.clone())?;
            }
            Err(e) => fail!("{what} failed: {e:?}"),
        }
    }
    Ok(())
}

fn case_reset<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let z = d.pick(1)?[0];
    let (wu, cap, mt) = (d.wu(), d.cap(), d.max_transfer());
    let (old, new) = (0x0700, 0x0701);
    let first = wu;
    let second = (mt / wu * wu).min(cap - first);
    d.write(z, 0, first, old, Oob::Pattern)?;
    if second > 0 {
        d.write(z, first, second, old, Oob::Pattern)?;
    }
    let written = first + second;
    d.done_ok(Command::Reset { zone: z })?;
    d.expect_zone(z, ZoneState::Empty, Some(0))
        .ctx(|| "after reset".into())?;
    d.check_unwritten(z, 0, written.min(mt))
        .ctx(|| "after reset".into())?;
    d.write(z, 0, wu, new, Oob::Pattern)
        .ctx(|| "first write after reset".into())?;
    if wu == cap {
        d.expect_zone(z, ZoneState::Full, None)?;
    } else {
        d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(wu))?;
    }
    d.verify_written(z, 0, wu, new, Oob::Pattern)
        .ctx(|| "after reset and rewrite".into())?;
    if written > wu {
        d.check_unwritten(z, wu, (written - wu).min(mt))
            .ctx(|| "after reset and rewrite".into())?;
    }
    d.done_ok(Command::Reset { zone: z })?;
    d.expect_zone(z, ZoneState::Empty, Some(0))?;
    d.done_ok(Command::Reset { zone: z })
        .ctx(|| "reset of an empty zone".into())?;
    d.expect_zone(z, ZoneState::Empty, Some(0))
        .ctx(|| "after resetting an empty zone".into())?;
    Ok(())
}

fn case_finish<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let z = d.pick(1)?[0];
    let (wu, cap) = (d.wu(), d.cap());
    let seed = 0x0800;
    if cap < 2 * wu {
        skip!("zone capacity {cap} is below two write units");
    }
    d.write(z, 0, wu, seed, Oob::Pattern)?;
    d.done_ok(Command::Finish { zone: z })?;
    d.expect_zone(z, ZoneState::Full, None)
        .ctx(|| "after finish".into())?;
    let exps = d.exps(z, seed + 1, wu..2 * wu, Oob::Pattern);
    let expected = format!("ZoneFull(zone {z})");
    d.exec_err(d.write_cmd(z, wu, &exps), &expected, zone_full(z))
        .ctx(|| "write to a finished zone".into())?;
    d.exec_err(d.append_cmd(z, &exps), &expected, zone_full(z))
        .ctx(|| "append to a finished zone".into())?;
    d.expect_zone(z, ZoneState::Full, None)?;
    d.verify_written(z, 0, wu, seed, Oob::Pattern)
        .ctx(|| "after finish".into())?;
    d.done_ok(Command::Reset { zone: z })
        .ctx(|| "reset of a full zone".into())?;
    d.expect_zone(z, ZoneState::Empty, Some(0))?;
    d.write(z, 0, wu, seed + 2, Oob::Pattern)
        .ctx(|| "after finish and reset".into())?;
    d.verify_written(z, 0, wu, seed + 2, Oob::Pattern)?;
    d.done_ok(Command::Reset { zone: z })?;
    // Finishing an empty zone is a valid transition too.
    d.done_ok(Command::Finish { zone: z })
        .ctx(|| "finish of an empty zone".into())?;
    d.expect_zone(z, ZoneState::Full, None)?;
    d.done_ok(Command::Reset { zone: z })?;
    d.expect_zone(z, ZoneState::Empty, Some(0))?;
    Ok(())
}

fn case_fill_to_capacity<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let z = d.pick(1)?[0];
    let (wu, cap, mt) = (d.wu(), d.cap(), d.max_transfer());
    let size = d.g.zone_size_blocks;
    let seed = 0x0900;
    let mut wp = 0;
    while wp < cap {
        let n = mt.min(cap - wp);
        d.write(z, wp, n, seed, Oob::Pattern)?;
        wp += n;
        if wp < cap {
            d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(wp))?;
        }
    }
    d.expect_zone(z, ZoneState::Full, None)
        .ctx(|| "after writing the whole capacity".into())?;
    let mut off = 0;
    while off < cap {
        let n = mt.min(cap - off);
        d.verify_written(z, off, n, seed, Oob::Pattern)?;
        off += n;
    }
    let exps = d.exps(z, seed + 1, cap..cap + wu, Oob::Pattern);
    let full_or_range = |e: &DeviceError| matches!(*e, DeviceError::ZoneFull { zone } | DeviceError::OutOfRange { zone, .. } if zone == z);
    d.exec_err(
        d.write_cmd(z, cap, &exps),
        "ZoneFull or OutOfRange",
        full_or_range,
    )?;
    d.exec_err(
        d.append_cmd(z, &exps),
        &format!("ZoneFull(zone {z})"),
        zone_full(z),
    )?;
    let mut beyond = vec![(size, 1)];
    if size > cap {
        beyond.push((cap, 1));
    }
    if mt >= 2 {
        beyond.push((cap - 1, 2));
    }
    for (offset, n) in beyond {
        let cmd = Command::Read {
            zone: z,
            offset_blocks: offset,
            block_count: c32(n),
            priority: ReadPriority::Host,
        };
        let expected = format!("OutOfRange(zone {z}, offset {offset}, {n} blocks)");
        d.exec_err(cmd, &expected, out_of_range(z, offset, n))?;
    }
    d.expect_zone(z, ZoneState::Full, None)
        .ctx(|| "after rejected commands".into())?;
    d.done_ok(Command::Reset { zone: z })?;
    d.expect_zone(z, ZoneState::Empty, Some(0))?;
    Ok(())
}

fn case_open_close_limits<H: Harness>(h: &mut H) -> Result<(), Failure> {
    use ZoneState::{Closed, Empty, ExplicitlyOpen, Full, ImplicitlyOpen};
    let mut d = Dev::new(h.fresh())?;
    let (wu, cap) = (d.wu(), d.cap());
    let (mo, ma) = (d.g.max_open_zones, d.g.max_active_zones);
    let seed = 0x0A00;
    if cap < 3 * wu {
        skip!("zone capacity {cap} is below three write units");
    }
    let open = |zone| Command::Open { zone };
    let close = |zone| Command::Close { zone };

    // Part A: the transitions themselves.
    let z = d.pick(1)?[0];
    d.done_ok(open(z))?;
    d.expect_zone(z, ExplicitlyOpen, Some(0))
        .ctx(|| "after Open".into())?;
    d.write(z, 0, wu, seed, Oob::Pattern)?;
    d.expect_zone(z, ExplicitlyOpen, Some(wu))
        .ctx(|| "after writing an explicitly open zone".into())?;
    d.done_ok(close(z))?;
    d.expect_zone(z, Closed, Some(wu))
        .ctx(|| "after Close".into())?;
    d.write(z, wu, wu, seed, Oob::Pattern)
        .ctx(|| "write to a closed zone".into())?;
    d.expect_zone(z, ImplicitlyOpen, Some(2 * wu))
        .ctx(|| "after writing a closed zone".into())?;
    d.done_ok(close(z))?;
    d.expect_zone(z, Closed, Some(2 * wu))?;
    d.done_ok(open(z)).ctx(|| "open of a closed zone".into())?;
    d.expect_zone(z, ExplicitlyOpen, Some(2 * wu))?;
    d.done_ok(close(z))?;
    d.verify_written(z, 0, 2 * wu, seed, Oob::Pattern)?;
    d.done_ok(Command::Reset { zone: z })?;
    d.expect_zone(z, Empty, Some(0))?;

    // Part B: max_open_zones with explicitly opened zones.
    if mo > 0 {
        let zs = d.usable(mo as usize + 1)?;
        if zs.len() == mo as usize + 1 {
            let extra = zs[mo as usize];
            let active_full = ma == mo;
            let seed = seed + 1;
            for &z in &zs[..mo as usize] {
                d.done_ok(open(z))?;
                d.write(z, 0, wu, seed, Oob::Pattern)?;
                d.expect_zone(z, ExplicitlyOpen, Some(wu))?;
            }
            let expected = format!("TooManyOpenZones(zone {extra}, limit {mo})");
            let g = d.g.clone();
            let pred = || limit_open_or_active(extra, &g, active_full);
            d.exec_err(open(extra), &expected, pred())
                .ctx(|| format!("{mo} zones explicitly open"))?;
            d.expect_zone(extra, Empty, Some(0))?;
            let exps = d.exps(extra, seed, 0..wu, Oob::Pattern);
            d.exec_err(d.write_cmd(extra, 0, &exps), &expected, pred())
                .ctx(|| format!("implicit open with {mo} zones explicitly open"))?;
            d.exec_err(d.append_cmd(extra, &exps), &expected, pred())
                .ctx(|| format!("implicit open by append with {mo} zones explicitly open"))?;
            d.expect_zone(extra, Empty, Some(0))?;
            let z0 = zs[0];
            d.write(z0, wu, wu, seed, Oob::Pattern)
                .ctx(|| "write to an open zone at the limit".into())?;
            if active_full {
                d.done_ok(Command::Finish { zone: z0 })?;
                d.expect_zone(z0, Full, None)?;
            } else {
                d.done_ok(close(z0))?;
                d.expect_zone(z0, Closed, Some(2 * wu))?;
            }
            d.done_ok(open(extra))
                .ctx(|| "open after freeing a slot".into())?;
            d.expect_zone(extra, ExplicitlyOpen, Some(0))?;
            d.write(extra, 0, wu, seed, Oob::Pattern)?;
            if !active_full {
                d.done_ok(close(extra))?;
                d.expect_zone(extra, Closed, Some(wu))?;
                d.write(z0, 2 * wu, wu, seed, Oob::Pattern)
                    .ctx(|| "write reopening a closed zone".into())?;
                d.expect_zone(z0, ImplicitlyOpen, Some(3 * wu))?;
                d.verify_written(z0, 0, 3 * wu, seed, Oob::Pattern)?;
            }
            d.verify_written(extra, 0, wu, seed, Oob::Pattern)?;
            for &z in &zs {
                d.done_ok(Command::Reset { zone: z })?;
                d.expect_zone(z, Empty, Some(0))?;
            }
        }
    }

    // Part C: max_active_zones with closed zones.
    if ma > 0 {
        let zs = d.usable(ma as usize + 1)?;
        if zs.len() == ma as usize + 1 {
            let extra = zs[ma as usize];
            let seed = seed + 2;
            for &z in &zs[..ma as usize] {
                d.write(z, 0, wu, seed, Oob::Pattern)?;
                d.done_ok(close(z))?;
                d.expect_zone(z, Closed, Some(wu))?;
            }
            let expected = |z| format!("TooManyActiveZones(zone {z}, limit {ma})");
            let ctx = || format!("{ma} zones closed (active)");
            d.exec_err(open(extra), &expected(extra), too_many_active(extra, ma))
                .ctx(ctx)?;
            let exps = d.exps(extra, seed, 0..wu, Oob::Pattern);
            d.exec_err(
                d.write_cmd(extra, 0, &exps),
                &expected(extra),
                too_many_active(extra, ma),
            )
            .ctx(ctx)?;
            d.exec_err(
                d.append_cmd(extra, &exps),
                &expected(extra),
                too_many_active(extra, ma),
            )
            .ctx(ctx)?;
            d.expect_zone(extra, Empty, Some(0))?;
            // Reopening a closed zone needs no new active slot.
            let z0 = zs[0];
            d.write(z0, wu, wu, seed, Oob::Pattern)
                .ctx(|| "write to a closed zone at the active limit".into())?;
            d.expect_zone(z0, ImplicitlyOpen, Some(2 * wu))?;
            d.done_ok(close(z0))?;
            // Finishing frees a slot.
            d.done_ok(Command::Finish { zone: z0 })?;
            d.expect_zone(z0, Full, None)?;
            d.done_ok(open(extra))
                .ctx(|| "open after finishing an active zone".into())?;
            d.write(extra, 0, wu, seed, Oob::Pattern)?;
            d.done_ok(close(extra))?;
            d.expect_zone(extra, Closed, Some(wu))?;
            // Resetting frees a slot (resetting a Full zone does not).
            d.done_ok(Command::Reset { zone: z0 })?;
            d.exec_err(open(z0), &expected(z0), too_many_active(z0, ma))
                .ctx(|| format!("{ma} zones active again"))?;
            let victim = if ma >= 2 { zs[1] } else { extra };
            d.done_ok(Command::Reset { zone: victim })?;
            d.done_ok(open(z0))
                .ctx(|| "open after resetting an active zone".into())?;
            d.write(z0, 0, wu, seed + 1, Oob::Pattern)?;
            d.verify_written(z0, 0, wu, seed + 1, Oob::Pattern)?;
            for &z in &zs {
                d.done_ok(Command::Reset { zone: z })?;
                d.expect_zone(z, Empty, Some(0))?;
            }
        }
    }
    Ok(())
}

fn case_error_kinds<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let z = d.pick(1)?[0];
    let g = d.g.clone();
    let (wu, cap, mt) = (d.wu(), d.cap(), d.max_transfer());
    let (bs, os) = (d.bs(), g.oob_size_bytes as usize);
    let seed = 0x0B00;
    if cap < 2 * wu {
        skip!("zone capacity {cap} is below two write units");
    }
    d.write(z, 0, wu, seed, Oob::Pattern)?;
    let unchanged = |d: &mut Dev<H::Device>, after: &str| -> Result<(), Failure> {
        d.expect_zone(z, ZoneState::ImplicitlyOpen, Some(wu))
            .and_then(|()| d.verify_written(z, 0, wu, seed, Oob::Pattern))
            .ctx(|| format!("after a rejected {after}"))
    };
    let bad = d.exps(z, seed + 1, wu..2 * wu, Oob::Pattern);
    let (data, oob) = d.buffers(&bad);
    let buffer_size = |actual: usize| move |e: &DeviceError| matches!(*e, DeviceError::BufferSize { actual_bytes, .. } if actual_bytes == actual);

    // Wrong data buffer sizes.
    for len in [data.len() - 1, data.len() + 1] {
        let mut short = data.clone();
        short.resize(len, 0xA5);
        let cmd = Command::Write {
            zone: z,
            offset_blocks: wu,
            data: short.clone().into(),
            oob: Vec::new(),
        };
        d.exec_err(cmd, &format!("BufferSize(actual {len})"), buffer_size(len))?;
        unchanged(&mut d, "write with a bad data buffer")?;
        let cmd = Command::Append {
            zone: z,
            data: short.into(),
            oob: Vec::new(),
        };
        d.exec_err(cmd, &format!("BufferSize(actual {len})"), buffer_size(len))?;
        unchanged(&mut d, "append with a bad data buffer")?;
    }
    // Wrong non-empty OOB sizes.
    let oob_lens = if os > 0 {
        vec![oob.len() + 1, oob.len() - 1]
    } else {
        vec![8]
    };
    for len in oob_lens.into_iter().filter(|&l| l > 0) {
        let mut bad_oob = oob.clone();
        bad_oob.resize(len, 0x5A);
        let cmd = Command::Write {
            zone: z,
            offset_blocks: wu,
            data: data.clone().into(),
            oob: bad_oob.clone(),
        };
        d.exec_err(
            cmd,
            &format!("BufferSize(actual {len}) for the OOB"),
            buffer_size(len),
        )?;
        unchanged(&mut d, "write with a bad OOB buffer")?;
        let cmd = Command::Append {
            zone: z,
            data: data.clone().into(),
            oob: bad_oob,
        };
        d.exec_err(
            cmd,
            &format!("BufferSize(actual {len}) for the OOB"),
            buffer_size(len),
        )?;
        unchanged(&mut d, "append with a bad OOB buffer")?;
    }
    // Zones that do not exist.
    let nz = g.zone_count;
    let no_zone = |e: &DeviceError| matches!(*e, DeviceError::NoSuchZone { zone } if zone == nz);
    let (one, one_oob) = d.buffers(&bad[..wu as usize]);
    for cmd in [
        Command::Read {
            zone: nz,
            offset_blocks: 0,
            block_count: 1,
            priority: ReadPriority::Host,
        },
        Command::Write {
            zone: nz,
            offset_blocks: 0,
            data: one.clone().into(),
            oob: one_oob.clone(),
        },
        Command::Append {
            zone: nz,
            data: one.into(),
            oob: one_oob,
        },
        Command::Reset { zone: nz },
        Command::Finish { zone: nz },
        Command::Open { zone: nz },
        Command::Close { zone: nz },
    ] {
        d.exec_err(cmd, &format!("NoSuchZone(zone {nz})"), no_zone)?;
    }
    // Reads outside the capacity.
    let mut ranges = vec![(cap, 1), (g.zone_size_blocks, 1)];
    if mt >= 2 {
        ranges.push((cap - 1, 2));
    }
    for (offset, n) in ranges {
        let cmd = Command::Read {
            zone: z,
            offset_blocks: offset,
            block_count: c32(n),
            priority: ReadPriority::Host,
        };
        d.exec_err(
            cmd,
            &format!("OutOfRange(zone {z}, offset {offset}, {n} blocks)"),
            out_of_range(z, offset, n),
        )?;
    }
    unchanged(&mut d, "read")?;
    // Transfers above the limits. When the transfer also crosses the zone
    // capacity, either error is right.
    const MAX_TEST_BUFFER: u64 = 256 << 20;
    if let Some(n) = mt.checked_add(1).filter(|&n| n <= u64::from(u32::MAX)) {
        let cmd = Command::Read {
            zone: z,
            offset_blocks: 0,
            block_count: c32(n),
            priority: ReadPriority::Host,
        };
        let (pred, expected): (Pred, _) = if n <= cap {
            (
                Box::new(too_large(n, g.max_transfer_blocks)),
                format!("TooLarge({n} blocks, limit {mt})"),
            )
        } else {
            let (a, b) = (too_large(n, g.max_transfer_blocks), is_out_of_range(z));
            (
                Box::new(move |e: &DeviceError| a(e) || b(e)),
                "TooLarge or OutOfRange".to_string(),
            )
        };
        d.exec_err(cmd, &expected, pred)?;
    }
    for (append, limit) in [(false, g.max_transfer_blocks), (true, g.max_append_blocks)] {
        let n = u64::from(limit) + wu;
        if n * bs as u64 > MAX_TEST_BUFFER {
            continue;
        }
        let exps = d.exps(z, seed + 2, wu..wu + n, Oob::Pattern);
        let cmd = if append {
            d.append_cmd(z, &exps)
        } else {
            d.write_cmd(z, wu, &exps)
        };
        let (pred, expected): (Pred, _) = if wu + n <= cap {
            (
                Box::new(too_large(n, limit)),
                format!("TooLarge({n} blocks, limit {limit})"),
            )
        } else {
            let (a, b) = (too_large(n, limit), is_out_of_range(z));
            (
                Box::new(move |e: &DeviceError| a(e) || b(e)),
                "TooLarge or OutOfRange".to_string(),
            )
        };
        d.exec_err(cmd, &expected, pred)?;
        unchanged(
            &mut d,
            if append {
                "oversized append"
            } else {
                "oversized write"
            },
        )?;
    }
    // Partial write units.
    if wu > 1 {
        let misaligned = |e: &DeviceError| {
            matches!(*e, DeviceError::Misaligned { zone, write_unit_blocks, .. }
                if zone == z && write_unit_blocks == g.write_unit_blocks)
        };
        let exps = &bad[..1];
        let expected = format!("Misaligned(zone {z}, write unit {wu})");
        d.exec_err(d.write_cmd(z, wu, exps), &expected, misaligned)?;
        unchanged(&mut d, "partial-unit write")?;
        d.exec_err(d.append_cmd(z, exps), &expected, misaligned)?;
        unchanged(&mut d, "partial-unit append")?;
    }
    // Invalid transitions.
    d.done_ok(Command::Reset { zone: z })?;
    let invalid = |state: ZoneState| move |e: &DeviceError| matches!(*e, DeviceError::InvalidTransition { zone, state: s, .. } if zone == z && s == state);
    d.exec_err(
        Command::Close { zone: z },
        "InvalidTransition from Empty",
        invalid(ZoneState::Empty),
    )?;
    d.expect_zone(z, ZoneState::Empty, Some(0))?;
    d.done_ok(Command::Finish { zone: z })?;
    d.exec_err(
        Command::Open { zone: z },
        "InvalidTransition from Full",
        invalid(ZoneState::Full),
    )?;
    d.exec_err(
        Command::Close { zone: z },
        "InvalidTransition from Full",
        invalid(ZoneState::Full),
    )?;
    d.expect_zone(z, ZoneState::Full, None)?;
    d.done_ok(Command::Reset { zone: z })?;
    d.write(z, 0, wu, seed + 3, Oob::Pattern)
        .ctx(|| "after the rejected commands".into())?;
    d.verify_written(z, 0, wu, seed + 3, Oob::Pattern)?;
    Ok(())
}

fn case_flush<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let zones = d.usable(d.budget(2))?;
    if zones.is_empty() {
        skip!("no usable zone");
    }
    let (wu, cap) = (d.wu(), d.cap());
    let seed = 0x0C00;
    d.done_ok(Command::Flush)
        .ctx(|| "flush of an idle, empty device".into())?;
    let per_zone = ((d.g.queue_depth as u64 - 1) / zones.len() as u64)
        .min(3)
        .min(cap / wu);
    if per_zone == 0 {
        skip!(
            "queue depth {} leaves no room for a write next to a flush",
            d.g.queue_depth
        );
    }
    let mut writes = BTreeMap::new();
    for i in 0..per_zone {
        for &z in &zones {
            let off = i * wu;
            let exps = d.exps(z, seed, off..off + wu, Oob::Pattern);
            writes.insert(d.submit(d.write_cmd(z, off, &exps))?, (z, off));
        }
    }
    let flush = d.submit(Command::Flush)?;
    let done = d.drain()?;
    match &done[&flush] {
        Ok(Outcome::Done) => {}
        other => fail!(
            "flush with {} writes in flight completed as {other:?}",
            writes.len()
        ),
    }
    for (tag, &(z, off)) in &writes {
        match &done[tag] {
            Ok(o) => d
                .check_written(&format!("write tag {tag:#x}"), o, z, Some(off), wu)
                .map(|_| ())?,
            Err(e) => fail!("write to zone {z} at {off} next to a flush failed: {e:?}"),
        }
    }
    d.done_ok(Command::Flush)?;
    for &z in &zones {
        d.verify_written(z, 0, per_zone * wu, seed, Oob::Pattern)
            .ctx(|| "after flush".into())?;
    }
    Ok(())
}

/// One zone's contents as far as the power-cut case knows them.
struct CutZone {
    zone: ZoneId,
    /// Appends (odd zones) or writes (even zones) in flight at the cut.
    appends: bool,
    wp: u64,
    /// Per block below `wp`: its content, or `None` if it read as torn.
    known: Vec<Option<Expect>>,
}

fn case_power_cut<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let zones = d.usable(d.budget(3))?;
    if zones.is_empty() {
        skip!("no usable zone");
    }
    let (wu, cap, qd) = (d.wu(), d.cap(), d.g.queue_depth as usize);
    let per_round = 6 * wu;
    let rounds = (cap / per_round).min(3);
    if rounds == 0 {
        skip!("zone capacity {cap} is below six write units");
    }
    let in_flight_per_zone = ((qd / zones.len()) as u64).min(2);
    let mut model: Vec<CutZone> = zones
        .iter()
        .enumerate()
        .map(|(i, &zone)| CutZone {
            zone,
            appends: i % 2 == 1,
            wp: 0,
            known: Vec::new(),
        })
        .collect();
    let mut append_id = 0u64;
    for round in 0..rounds {
        let seed = 0x0D00 + round;
        let at = |what: &str| format!("round {round}: {what}");
        // Durable: written, reaped, flushed.
        for m in &mut model {
            for _ in 0..2 {
                let off = m.wp;
                d.write(m.zone, off, wu, seed, Oob::Pattern)
                    .ctx(|| at("durable write"))?;
                m.known.extend(
                    d.exps(m.zone, seed, off..off + wu, Oob::Pattern)
                        .into_iter()
                        .map(Some),
                );
                m.wp += wu;
            }
        }
        d.done_ok(Command::Flush).ctx(|| at("flush"))?;
        let durable: Vec<u64> = model.iter().map(|m| m.wp).collect();
        // Completed but not flushed, then in flight at the cut: may be lost.
        let mut candidates: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); model.len()];
        let mut upper = durable.clone();
        for (i, m) in model.iter().enumerate() {
            if m.appends {
                let exps = d.exps(
                    m.zone,
                    seed,
                    (0..wu).map(|j| append_key(append_id, j)),
                    Oob::Pattern,
                );
                let off = d.append(m.zone, &exps).ctx(|| at("unflushed append"))?;
                ensure!(
                    off == upper[i],
                    "round {round}: append to zone {} landed at {off}, write pointer was {}",
                    m.zone,
                    upper[i]
                );
                candidates[i].extend(exps.iter().map(|e| e.key));
                append_id += 1;
            } else {
                d.write(m.zone, upper[i], wu, seed, Oob::Pattern)
                    .ctx(|| at("unflushed write"))?;
                candidates[i].extend(upper[i]..upper[i] + wu);
            }
            upper[i] += wu;
        }
        for _ in 0..in_flight_per_zone {
            for (i, m) in model.iter().enumerate() {
                let cmd = if m.appends {
                    let exps = d.exps(
                        m.zone,
                        seed,
                        (0..wu).map(|j| append_key(append_id, j)),
                        Oob::Pattern,
                    );
                    candidates[i].extend(exps.iter().map(|e| e.key));
                    append_id += 1;
                    d.append_cmd(m.zone, &exps)
                } else {
                    let exps = d.exps(m.zone, seed, upper[i]..upper[i] + wu, Oob::Pattern);
                    candidates[i].extend(upper[i]..upper[i] + wu);
                    d.write_cmd(m.zone, upper[i], &exps)
                };
                d.submit(cmd).ctx(|| at("in-flight command"))?;
                upper[i] += wu;
            }
        }
        // Cut.
        let geometry = d.g.clone();
        let Some(dev) = h.power_cycle(d.into_inner()) else {
            if round == 0 {
                skip!("the harness cannot cut power");
            }
            fail!("round {round}: power_cycle() returned None after succeeding before");
        };
        d = Dev::new(dev).ctx(|| at("after power-on"))?;
        ensure!(
            d.g == geometry,
            "round {round}: the geometry changed across a power cycle"
        );
        let stale = d.reap(4096).ctx(|| at("after power-on"))?;
        ensure!(
            stale.is_empty(),
            "round {round}: a powered-on device returned {} completions",
            stale.len()
        );
        for (i, m) in model.iter_mut().enumerate() {
            let z = m.zone;
            let info = d.info(z)?;
            let wp = info.write_pointer_blocks;
            ensure!(
                (durable[i]..=upper[i]).contains(&wp) && wp.is_multiple_of(wu),
                "round {round}: zone {z} has write pointer {wp} after the cut; flushed data \
                 reached {} and {} blocks were completed or in flight after it",
                durable[i],
                upper[i] - durable[i]
            );
            let state_ok = match info.state {
                ZoneState::Closed => wp < cap,
                ZoneState::Full => wp == cap,
                _ => false,
            };
            ensure!(state_ok, "round {round}: zone {z} is {:?} with write pointer {wp} after power-on (expected Closed, or Full at capacity)", info.state);
            // Flushed blocks (from every round) read back exactly.
            for (off, e) in m.known.iter().enumerate().take(durable[i] as usize) {
                if let Some(e) = e {
                    let (data, oob) = d.read(z, off as u64, 1).ctx(|| at("flushed block"))?;
                    d.compare(z, off as u64, std::slice::from_ref(e), &data, &oob)
                        .ctx(|| at("flushed data after a power cut"))?;
                }
            }
            // Blocks after the flushed ones: their data, or torn.
            m.known.truncate(durable[i] as usize);
            let mut append_base: BTreeMap<u64, u64> = BTreeMap::new();
            for off in durable[i]..wp {
                let cmd = Command::Read {
                    zone: z,
                    offset_blocks: off,
                    block_count: 1,
                    priority: ReadPriority::Host,
                };
                let what =
                    format!("round {round}: zone {z} offset {off} (written after the flush)");
                let (data, oob) = match d.exec(cmd)? {
                    Err(DeviceError::UncorrectableRead {
                        zone,
                        offset_blocks,
                    }) if zone == z && offset_blocks == off => {
                        m.known.push(None);
                        continue;
                    }
                    Err(e) => fail!("{what}: expected its data or UncorrectableRead, got {e:?}"),
                    Ok(o) => d.check_read(&what, o, 1)?,
                };
                let key = match decode(&data) {
                    Some((s, zz, key)) if s == seed && zz == z && candidates[i].contains(&key) => {
                        key
                    }
                    _ => fail!(
                        "{what}: expected data written in this round or UncorrectableRead, read {}",
                        describe_block(&data)
                    ),
                };
                if m.appends {
                    let (id, index) = ((key & !APPEND_KEY) >> 32, key & 0xFFFF_FFFF);
                    let base = *append_base.entry(id).or_insert(off - index);
                    ensure!(base + index == off, "{what}: {} is not contiguous with the rest of its append (which starts at {base})", key_text(key));
                    candidates[i].remove(&key);
                } else {
                    ensure!(
                        key == off,
                        "{what}: read the block written for {}",
                        key_text(key)
                    );
                }
                let e = Expect {
                    seed,
                    zone: z,
                    key,
                    oob: Oob::Pattern,
                };
                d.compare(z, off, std::slice::from_ref(&e), &data, &oob)
                    .ctx(|| what.clone())?;
                m.known.push(Some(e));
            }
            m.wp = wp;
            if wp < cap {
                d.check_unwritten(z, wp, 1)
                    .ctx(|| at("block at the write pointer after power-on"))?;
            }
        }
        // The device takes writes at the new write pointers.
        for m in &mut model {
            if m.wp + wu > cap {
                continue;
            }
            let off = m.wp;
            let exps = if m.appends {
                let exps = d.exps(
                    m.zone,
                    seed,
                    (0..wu).map(|j| append_key(append_id, j)),
                    Oob::Pattern,
                );
                append_id += 1;
                let got = d
                    .append(m.zone, &exps)
                    .ctx(|| at("append after power-on"))?;
                ensure!(got == off, "round {round}: append to zone {} after power-on landed at {got}, write pointer is {off}", m.zone);
                exps
            } else {
                d.write(m.zone, off, wu, seed + 0x100, Oob::Pattern)
                    .ctx(|| at("write after power-on"))?;
                d.exps(m.zone, seed + 0x100, off..off + wu, Oob::Pattern)
            };
            d.verify(m.zone, off, &exps).ctx(|| at("after power-on"))?;
            m.known.extend(exps.into_iter().map(Some));
            m.wp += wu;
        }
    }
    Ok(())
}

fn case_reads_of_unwritten<H: Harness>(h: &mut H) -> Result<(), Failure> {
    let mut d = Dev::new(h.fresh())?;
    let zones = d.usable(2)?;
    let Some(&z) = zones.first() else {
        skip!("no usable zone")
    };
    let (wu, cap, mt) = (d.wu(), d.cap(), d.max_transfer());
    let seed = 0x0E00;
    let written = if cap >= 3 * wu { 2 * wu } else { wu };
    d.write(z, 0, written, seed, Oob::Pattern)?;
    if written < cap {
        d.check_unwritten(z, written, 1)?;
        d.check_unwritten(z, written, (cap - written).min(mt))?;
        d.check_unwritten(z, cap - 1, 1)?;
        if mt >= 2 {
            // A read straddling the write pointer: an error, or the written
            // block followed by a fill.
            let cmd = Command::Read {
                zone: z,
                offset_blocks: written - 1,
                block_count: 2,
                priority: ReadPriority::Host,
            };
            let what = describe_cmd(&cmd);
            if let Ok(o) = d.exec(cmd)? {
                let (data, oob) = d.check_read(&what, o, 2)?;
                let bs = d.bs();
                let os = d.g.oob_size_bytes as usize;
                let exps = d.exps(z, seed, written - 1..written, Oob::Pattern);
                d.compare(z, written - 1, &exps, &data[..bs], &oob[..os])
                    .ctx(|| what.clone())?;
                ensure!(
                    is_fill(&data[bs..]),
                    "{what}: the block at the write pointer read as {} (expected zeros or 0xFF fill)",
                    describe_block(&data[bs..])
                );
            }
        }
    }
    if let Some(&z2) = zones.get(1) {
        d.check_unwritten(z2, 0, written.min(mt))?;
        d.check_unwritten(z2, cap - 1, 1)?;
    }
    d.verify_written(z, 0, written, seed, Oob::Pattern)?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    //! A small, correct in-memory zoned device (`RefDevice`) that must pass
    //! the whole suite, and broken variants of it that must fail it (the
    //! core's own tests run on it too).
    use super::*;

    #[derive(Clone, Copy, Debug, Default)]
    pub(crate) struct Quirks {
        append_off_by_one: bool,
        ignore_wp: bool,
        never_busy: bool,
        reset_keeps_data: bool,
        panic_on_finish: bool,
        no_open_limits: bool,
        loses_flushed_data: bool,
        busy_one_early: bool,
        parts_reversed: bool,
        /// Zone 1 online too (the core keeps its metadata there).
        pub(crate) all_online: bool,
    }

    struct ModelZone {
        state: ZoneState,
        wp: u64,
        durable_wp: u64,
        data: Vec<u8>,
        oob: Vec<u8>,
        torn: Vec<bool>,
    }

    /// Commands run at submit; completions wait, reaped in pseudo-random order.
    pub(crate) struct RefDevice {
        g: Geometry,
        zones: Vec<ModelZone>,
        done: Vec<Completion>,
        rng: u64,
        clock: u64,
        q: Quirks,
    }

    impl RefDevice {
        pub(crate) fn new(g: Geometry, q: Quirks, seed: u64) -> Self {
            let (bs, os, size) = (
                g.block_size_bytes as usize,
                g.oob_size_bytes as usize,
                g.zone_size_blocks as usize,
            );
            let zones = (0..g.zone_count)
                .map(|z| ModelZone {
                    state: if z == 1 && !q.all_online {
                        ZoneState::Offline
                    } else {
                        ZoneState::Empty
                    },
                    wp: 0,
                    durable_wp: 0,
                    data: vec![0; bs * size],
                    oob: vec![0; os * size],
                    torn: vec![false; size],
                })
                .collect();
            RefDevice {
                g,
                zones,
                done: Vec::new(),
                rng: seed | 1,
                clock: 0,
                q,
            }
        }

        fn rand(&mut self) -> u64 {
            splitmix(&mut self.rng)
        }

        fn count(&self, f: fn(ZoneState) -> bool) -> u32 {
            self.zones.iter().filter(|z| f(z.state)).count() as u32
        }

        /// Resources for a zone leaving Empty (`active`) or becoming open.
        fn need(&self, zone: ZoneId, active: bool) -> Result<(), DeviceError> {
            let g = &self.g;
            if self.q.no_open_limits {
                return Ok(());
            }
            if active
                && g.max_active_zones != 0
                && self.count(ZoneState::is_active) >= g.max_active_zones
            {
                return Err(DeviceError::TooManyActiveZones {
                    zone,
                    limit: g.max_active_zones,
                });
            }
            if g.max_open_zones != 0 && self.count(ZoneState::is_open) >= g.max_open_zones {
                return Err(DeviceError::TooManyOpenZones {
                    zone,
                    limit: g.max_open_zones,
                });
            }
            Ok(())
        }

        fn zone(&self, zone: ZoneId) -> Result<&ModelZone, DeviceError> {
            let z = self
                .zones
                .get(zone as usize)
                .ok_or(DeviceError::NoSuchZone { zone })?;
            if z.state == ZoneState::Offline {
                return Err(DeviceError::ZoneOffline { zone });
            }
            Ok(z)
        }

        fn exec(&mut self, cmd: Command) -> Result<Outcome, DeviceError> {
            let g = self.g.clone();
            let (bs, os) = (g.block_size_bytes as usize, g.oob_size_bytes as usize);
            let invalid = |zone, state, action| DeviceError::InvalidTransition {
                zone,
                state,
                action,
            };
            match cmd {
                Command::Read {
                    zone,
                    offset_blocks: off,
                    block_count,
                    ..
                } => {
                    let z = self.zone(zone)?;
                    let n = u64::from(block_count);
                    if block_count > g.max_transfer_blocks {
                        return Err(DeviceError::TooLarge {
                            block_count: n,
                            limit_blocks: g.max_transfer_blocks,
                        });
                    }
                    if off + n > g.zone_capacity_blocks {
                        return Err(DeviceError::OutOfRange {
                            zone,
                            offset_blocks: off,
                            block_count: n,
                        });
                    }
                    let (a, b) = (off as usize, (off + n) as usize);
                    if let Some(i) = z.torn[a..b].iter().position(|&t| t) {
                        return Err(DeviceError::UncorrectableRead {
                            zone,
                            offset_blocks: off + i as u64,
                        });
                    }
                    Ok(Outcome::Read {
                        data: z.data[a * bs..b * bs].to_vec(),
                        oob: z.oob[a * os..b * os].to_vec(),
                    })
                }
                Command::Write {
                    zone,
                    offset_blocks,
                    data,
                    oob,
                } => {
                    let data = self.bytes(data);
                    self.program(zone, Some(offset_blocks), data, oob, g.max_transfer_blocks)
                }
                Command::Append { zone, data, oob } => {
                    let data = self.bytes(data);
                    self.program(zone, None, data, oob, g.max_append_blocks)
                }
                Command::Reset { zone } => {
                    self.zone(zone)?;
                    let keep = self.q.reset_keeps_data;
                    let z = &mut self.zones[zone as usize];
                    (z.state, z.wp, z.durable_wp) = (ZoneState::Empty, 0, 0);
                    if !keep {
                        z.data.fill(0);
                        z.oob.fill(0);
                    }
                    z.torn.fill(false);
                    Ok(Outcome::Done)
                }
                Command::Finish { zone } => {
                    assert!(!self.q.panic_on_finish, "finish is broken in this device");
                    self.zone(zone)?;
                    self.zones[zone as usize].state = ZoneState::Full;
                    Ok(Outcome::Done)
                }
                Command::Open { zone } => {
                    let state = self.zone(zone)?.state;
                    match state {
                        ZoneState::Empty => self.need(zone, true)?,
                        ZoneState::Closed => self.need(zone, false)?,
                        ZoneState::ImplicitlyOpen | ZoneState::ExplicitlyOpen => {}
                        s => return Err(invalid(zone, s, "open")),
                    }
                    self.zones[zone as usize].state = ZoneState::ExplicitlyOpen;
                    Ok(Outcome::Done)
                }
                Command::Close { zone } => {
                    self.zone(zone)?;
                    let z = &mut self.zones[zone as usize];
                    match z.state {
                        s if s.is_open() => {
                            z.state = if z.wp == 0 {
                                ZoneState::Empty
                            } else {
                                ZoneState::Closed
                            }
                        }
                        ZoneState::Closed => {}
                        s => return Err(invalid(zone, s, "close")),
                    }
                    Ok(Outcome::Done)
                }
                Command::Flush => {
                    self.zones.iter_mut().for_each(|z| z.durable_wp = z.wp);
                    Ok(Outcome::Done)
                }
            }
        }

        /// A write's bytes; with `parts_reversed`, its parts in reverse
        /// order (a gather that walks its list the wrong way).
        fn bytes(&self, data: Payload) -> Vec<u8> {
            if !self.q.parts_reversed {
                return data.into_vec();
            }
            let parts: Vec<&[u8]> = data.parts().collect();
            parts.into_iter().rev().flatten().copied().collect()
        }

        fn program(
            &mut self,
            zone: ZoneId,
            at: Option<u64>,
            data: Vec<u8>,
            oob: Vec<u8>,
            limit: u32,
        ) -> Result<Outcome, DeviceError> {
            let g = self.g.clone();
            let (bs, os, wu) = (
                g.block_size_bytes as usize,
                g.oob_size_bytes as usize,
                u64::from(g.write_unit_blocks),
            );
            let z = self.zone(zone)?;
            if data.is_empty() || !data.len().is_multiple_of(bs) {
                let expected = data.len().div_ceil(bs).max(1) * bs;
                return Err(DeviceError::BufferSize {
                    expected_bytes: expected,
                    actual_bytes: data.len(),
                });
            }
            let n = (data.len() / bs) as u64;
            if !oob.is_empty() && oob.len() != n as usize * os {
                return Err(DeviceError::BufferSize {
                    expected_bytes: n as usize * os,
                    actual_bytes: oob.len(),
                });
            }
            if n > u64::from(limit) {
                return Err(DeviceError::TooLarge {
                    block_count: n,
                    limit_blocks: limit,
                });
            }
            let off = at.unwrap_or(z.wp);
            if !off.is_multiple_of(wu) || !n.is_multiple_of(wu) {
                let write_unit_blocks = g.write_unit_blocks;
                return Err(DeviceError::Misaligned {
                    zone,
                    offset_blocks: off,
                    block_count: n,
                    write_unit_blocks,
                });
            }
            match z.state {
                ZoneState::Full => return Err(DeviceError::ZoneFull { zone }),
                ZoneState::ReadOnly => return Err(DeviceError::ZoneReadOnly { zone }),
                _ => {}
            }
            if off != z.wp && !self.q.ignore_wp {
                return Err(DeviceError::BadWritePointer {
                    zone,
                    offset_blocks: off,
                    write_pointer_blocks: z.wp,
                });
            }
            if off + n > g.zone_capacity_blocks {
                return Err(DeviceError::OutOfRange {
                    zone,
                    offset_blocks: off,
                    block_count: n,
                });
            }
            match z.state {
                ZoneState::Empty => self.need(zone, true)?,
                ZoneState::Closed => self.need(zone, false)?,
                _ => {}
            }
            let z = &mut self.zones[zone as usize];
            let (a, b) = (off as usize, (off + n) as usize);
            z.data[a * bs..b * bs].copy_from_slice(&data);
            if oob.is_empty() {
                z.oob[a * os..b * os].fill(0);
            } else {
                z.oob[a * os..b * os].copy_from_slice(&oob);
            }
            z.torn[a..b].fill(false);
            z.wp = z.wp.max(off + n);
            z.state = match z.state {
                _ if z.wp == g.zone_capacity_blocks => ZoneState::Full,
                ZoneState::ExplicitlyOpen => ZoneState::ExplicitlyOpen,
                _ => ZoneState::ImplicitlyOpen,
            };
            let reported = off + u64::from(at.is_none() && self.q.append_off_by_one);
            Ok(Outcome::Written {
                zone,
                offset_blocks: reported,
                block_count: n as u32,
            })
        }

        /// Unflushed writes are kept up to a random point, the last kept
        /// block maybe torn; open zones close.
        fn power_cycle(mut self) -> Self {
            self.done.clear();
            let (bs, os, wu) = (
                self.g.block_size_bytes as usize,
                self.g.oob_size_bytes as usize,
                u64::from(self.g.write_unit_blocks),
            );
            let lossy = self.q.loses_flushed_data;
            for i in 0..self.zones.len() {
                let r = self.rand();
                let z = &mut self.zones[i];
                if !(z.state.is_active()) {
                    continue;
                }
                if z.wp > z.durable_wp || lossy {
                    let keep = (z.durable_wp + r % (z.wp - z.durable_wp + 1)) / wu * wu;
                    let keep = keep.max(z.durable_wp);
                    let keep = if lossy {
                        z.durable_wp.saturating_sub(wu)
                    } else {
                        keep
                    };
                    let (a, b) = (keep as usize, z.wp as usize);
                    z.data[a * bs..b * bs].fill(0);
                    z.oob[a * os..b * os].fill(0);
                    z.wp = keep;
                    if keep > z.durable_wp && (r >> 32).is_multiple_of(2) {
                        z.torn[a - 1] = true;
                    }
                }
                z.state = if z.wp == 0 {
                    ZoneState::Empty
                } else {
                    ZoneState::Closed
                };
            }
            self
        }
    }

    impl Backend for RefDevice {
        fn geometry(&self) -> &Geometry {
            &self.g
        }

        fn zone_info(&mut self, zone: ZoneId) -> Result<ZoneInfo, DeviceError> {
            let z = self
                .zones
                .get(zone as usize)
                .ok_or(DeviceError::NoSuchZone { zone })?;
            Ok(ZoneInfo {
                zone,
                state: z.state,
                write_pointer_blocks: z.wp,
                capacity_blocks: self.g.zone_capacity_blocks,
            })
        }

        fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
            let depth = self.g.queue_depth as usize - usize::from(self.q.busy_one_early);
            if self.done.len() >= depth && !self.q.never_busy {
                return Err(SubmitError::Busy);
            }
            let result = self.exec(command);
            self.done.push(Completion { tag, result });
            self.clock += 1_000;
            Ok(())
        }

        fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
            let mut n = 0;
            while n < max && !self.done.is_empty() {
                let i = (self.rand() % self.done.len() as u64) as usize;
                out.push(self.done.swap_remove(i));
                n += 1;
            }
            n
        }

        fn wait(&mut self) -> Result<(), DeviceError> {
            Ok(())
        }

        fn in_flight(&self) -> usize {
            self.done.len()
        }

        fn clock_ns(&self) -> u64 {
            self.clock
        }
    }

    struct RefHarness {
        g: Geometry,
        q: Quirks,
        seed: u64,
        power: bool,
    }

    impl Harness for RefHarness {
        type Device = RefDevice;

        fn fresh(&mut self) -> RefDevice {
            self.seed += 1;
            RefDevice::new(self.g.clone(), self.q, self.seed)
        }

        fn power_cycle(&mut self, device: RefDevice) -> Option<RefDevice> {
            self.power.then(|| device.power_cycle())
        }
    }

    /// OOB, write unit 2, open and active limits, zone size above capacity.
    fn geometry_a() -> Geometry {
        Geometry {
            block_size_bytes: 512,
            oob_size_bytes: 16,
            zone_count: 8,
            zone_size_blocks: 64,
            zone_capacity_blocks: 48,
            write_unit_blocks: 2,
            max_append_blocks: 8,
            max_transfer_blocks: 16,
            max_open_zones: 3,
            max_active_zones: 4,
            parallel_units: 2,
            zone_groups: 1,
            queue_depth: 8,
        }
    }

    /// No OOB, write unit 1, no limits, size equal to capacity, tiny queue.
    fn geometry_b() -> Geometry {
        Geometry {
            block_size_bytes: 4096,
            oob_size_bytes: 0,
            zone_count: 6,
            zone_size_blocks: 32,
            zone_capacity_blocks: 32,
            write_unit_blocks: 1,
            max_append_blocks: 4,
            max_transfer_blocks: 8,
            max_open_zones: 0,
            max_active_zones: 0,
            parallel_units: 1,
            zone_groups: 1,
            queue_depth: 3,
        }
    }

    /// Open limit equal to the active limit.
    fn geometry_c() -> Geometry {
        Geometry {
            block_size_bytes: 512,
            oob_size_bytes: 8,
            zone_count: 5,
            zone_size_blocks: 32,
            zone_capacity_blocks: 24,
            write_unit_blocks: 1,
            max_append_blocks: 4,
            max_transfer_blocks: 8,
            max_open_zones: 2,
            max_active_zones: 2,
            parallel_units: 4,
            zone_groups: 1,
            queue_depth: 16,
        }
    }

    fn harness(g: Geometry, q: Quirks) -> RefHarness {
        RefHarness {
            g,
            q,
            seed: 0,
            power: true,
        }
    }

    #[test]
    fn case_table_matches_names() {
        for name in CASES {
            assert!(case_fn::<RefHarness>(name).is_some(), "{name}");
        }
        let unique: BTreeSet<_> = CASES.iter().collect();
        assert_eq!(unique.len(), CASES.len());
        assert!(run_one(
            &mut harness(geometry_a(), Quirks::default()),
            "no_such_case"
        )
        .is_none());
    }

    #[test]
    fn reference_device_passes() {
        for g in [geometry_a(), geometry_b(), geometry_c()] {
            // Several seeds, so the power-cut and completion-order randomness varies.
            for seed in [0, 100, 200] {
                let mut h = RefHarness {
                    seed,
                    ..harness(g.clone(), Quirks::default())
                };
                let report = run_all(&mut h);
                assert!(
                    report.is_success() && report.skipped() == 0,
                    "{g:?}\n{report}"
                );
                assert_eq!(report.passed(), CASES.len());
            }
        }
    }

    #[test]
    fn power_cut_skips_without_a_power_switch() {
        let mut h = RefHarness {
            power: false,
            ..harness(geometry_a(), Quirks::default())
        };
        let report = run_one(&mut h, "power_cut").unwrap();
        assert!(
            matches!(report.outcome, CaseOutcome::Skipped(_)),
            "{report}"
        );
        let all = run_all(&mut h);
        assert!(all.is_success());
        assert_eq!((all.passed(), all.skipped()), (CASES.len() - 1, 1));
        assert!(
            all.to_string()
                .ends_with(&format!("{} passed, 0 failed, 1 skipped", CASES.len() - 1)),
            "{all}"
        );
    }

    fn expect_failure(q: Quirks, case: &str, needle: &str) {
        for g in [geometry_a(), geometry_b()] {
            let report = run_one(&mut harness(g, q), case).unwrap();
            match &report.outcome {
                CaseOutcome::Failed(why) => assert!(why.contains(needle), "{q:?}: {report}"),
                _ => panic!("{q:?}: expected {case} to fail, got {report}"),
            }
        }
    }

    #[test]
    fn a_device_that_gathers_parts_out_of_order_fails() {
        let q = Quirks {
            parts_reversed: true,
            ..Quirks::default()
        };
        expect_failure(q, "split_payloads", "but read the block of seed 0xf00");
    }

    #[test]
    fn wrong_append_offset_fails() {
        let q = Quirks {
            append_off_by_one: true,
            ..Quirks::default()
        };
        expect_failure(q, "append_offsets", "landed at offset 1, expected 0");
    }

    #[test]
    fn ignoring_the_write_pointer_fails() {
        let q = Quirks {
            ignore_wp: true,
            ..Quirks::default()
        };
        expect_failure(q, "write_not_at_wp", "expected BadWritePointer");
    }

    #[test]
    fn never_busy_fails() {
        let q = Quirks {
            never_busy: true,
            ..Quirks::default()
        };
        expect_failure(q, "queue_full_is_busy", "expected Busy");
    }

    #[test]
    fn stale_data_after_reset_fails() {
        let q = Quirks {
            reset_keeps_data: true,
            ..Quirks::default()
        };
        expect_failure(
            q,
            "reset",
            "an unwritten block read as the block of seed 0x700",
        );
    }

    #[test]
    fn a_panicking_backend_fails_one_case_not_the_run() {
        let q = Quirks {
            panic_on_finish: true,
            ..Quirks::default()
        };
        expect_failure(q, "finish", "panicked: finish is broken in this device");
        let report = run_all(&mut harness(geometry_a(), q));
        assert_eq!(report.cases.len(), CASES.len());
        assert!(!report.is_success());
        let failed: Vec<_> = report
            .cases
            .iter()
            .filter(|c| matches!(c.outcome, CaseOutcome::Failed(_)))
            .map(|c| c.name)
            .collect();
        assert!(
            failed.contains(&"finish") && !failed.contains(&"geometry"),
            "{report}"
        );
        assert!(
            report.to_string().contains("FAIL finish: panicked"),
            "{report}"
        );
    }

    #[test]
    fn missing_open_limits_fail() {
        let q = Quirks {
            no_open_limits: true,
            ..Quirks::default()
        };
        let report = run_one(&mut harness(geometry_a(), q), "open_close_limits").unwrap();
        assert!(
            matches!(&report.outcome, CaseOutcome::Failed(why) if why.contains("expected TooManyOpenZones")),
            "{report}"
        );
    }

    #[test]
    fn losing_flushed_data_fails() {
        let q = Quirks {
            loses_flushed_data: true,
            ..Quirks::default()
        };
        expect_failure(q, "power_cut", "flushed data reached");
    }

    #[test]
    fn busy_below_queue_depth_fails() {
        let q = Quirks {
            busy_one_early: true,
            ..Quirks::default()
        };
        expect_failure(q, "many_in_flight", "answered Busy");
        expect_failure(q, "queue_full_is_busy", "answered Busy");
    }

    #[test]
    #[ignore = "prints a report for eyeballing"]
    fn print_report() {
        let mut h = harness(
            geometry_a(),
            Quirks {
                append_off_by_one: true,
                ..Quirks::default()
            },
        );
        println!("{}", run_all(&mut h));
    }
}
