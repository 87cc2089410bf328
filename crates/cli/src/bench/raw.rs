//! The raw backend, alone: 4 KiB programs at the write pointer and 4 KiB
//! random reads straight on a device, many commands in flight, no FTL code.
//! The baseline the FTL's rates are divided by (docs/design.md, "Choices and their reasons").
//!
//! Shared with `benches/ftl.rs` (included there by path), so it depends on
//! `zftl_core` and nothing of the CLI's.

use zftl_core::backend::{Geometry, ZoneId};
use zftl_core::payload::{BlockData, Payload};
use zftl_core::{Backend, Command, Completion, Outcome, ReadPriority, SubmitError};

use super::shape::WriteCmd;
use zftl_sim::rng::Rng;

/// Zones written at once by [`SeqWriter`].
pub const WRITE_STREAMS: usize = 8;

const RESET_TAG: u64 = 1 << 63;

/// Reaps what is ready, waiting if nothing is; panics on a failed command
/// (on a fault-free simulator a failure is a bug of the benchmark).
fn reap_some<B: Backend>(dev: &mut B, out: &mut Vec<Completion>) {
    out.clear();
    if dev.reap(out, usize::MAX) == 0 {
        dev.wait().expect("wait");
        dev.reap(out, usize::MAX);
    }
    for done in out.iter() {
        if let Err(e) = &done.result {
            panic!("raw command {} failed: {e}", done.tag);
        }
    }
}

fn submit<B: Backend>(dev: &mut B, tag: u64, command: Command) {
    match dev.submit(tag, command) {
        Ok(()) => {}
        Err(SubmitError::Busy) => panic!("submit busy below the queue depth"),
        Err(SubmitError::DeviceGone) => panic!("device gone"),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum StreamState {
    Writing,
    NeedsReset,
    Resetting,
}

/// One open zone being filled sequentially.
struct Stream {
    zone: ZoneId,
    next_offset_blocks: u64,
    in_flight: u32,
    state: StreamState,
}

/// The zones the writers fill: `WRITE_STREAMS` open zones, and the ring of
/// the rest they move on to; a zone written before is reset first.
struct ZoneRing {
    streams: Vec<Stream>,
    next_zone: ZoneId,
    zone_count: u32,
    capacity_blocks: u64,
    written: Vec<bool>,
}

impl ZoneRing {
    fn new(g: &Geometry) -> Self {
        assert!(
            g.zone_count as usize > WRITE_STREAMS,
            "need a spare zone in the ring"
        );
        let streams = (0..WRITE_STREAMS as u32)
            .map(|zone| Stream {
                zone,
                next_offset_blocks: 0,
                in_flight: 0,
                state: StreamState::Writing,
            })
            .collect();
        ZoneRing {
            streams,
            next_zone: WRITE_STREAMS as u32,
            zone_count: g.zone_count,
            capacity_blocks: g.zone_capacity_blocks,
            written: vec![false; g.zone_count as usize],
        }
    }

    /// Blocks stream `s` can take now (a zone waiting for its reset takes
    /// a whole zone once reset).
    fn room(&self, s: usize) -> u64 {
        let stream = &self.streams[s];
        match stream.state {
            StreamState::NeedsReset => self.capacity_blocks,
            StreamState::Writing => self.capacity_blocks - stream.next_offset_blocks,
            StreamState::Resetting => 0,
        }
    }

    /// The next stream (round robin from `from`) that can take a command:
    /// one with room for `blocks`, else any with room.
    fn pick(&self, from: usize, blocks: u64) -> Option<usize> {
        let order = (0..self.streams.len()).map(|i| (from + i) % self.streams.len());
        order
            .clone()
            .find(|&s| self.room(s) >= blocks)
            .or_else(|| order.clone().find(|&s| self.room(s) > 0))
    }

    /// Sends stream `s`'s zone its reset if it waits for one; whether it
    /// did.
    fn reset_if_due<B: Backend>(&mut self, dev: &mut B, s: usize) -> bool {
        let stream = &mut self.streams[s];
        if stream.state != StreamState::NeedsReset {
            return false;
        }
        stream.state = StreamState::Resetting;
        let reset = Command::Reset { zone: stream.zone };
        submit(dev, RESET_TAG | s as u64, reset);
        true
    }

    /// Stream `s`'s command completed (`reset`: its zone's reset): a full
    /// zone with nothing in flight is left for the next one of the ring.
    fn complete(&mut self, s: usize, reset: bool) {
        let stream = &mut self.streams[s];
        if reset {
            stream.state = StreamState::Writing;
            stream.next_offset_blocks = 0;
            return;
        }
        stream.in_flight -= 1;
        if stream.in_flight == 0 && stream.next_offset_blocks == self.capacity_blocks {
            let zone = self.next_zone;
            self.next_zone = (self.next_zone + 1) % self.zone_count;
            stream.zone = zone;
            stream.next_offset_blocks = 0;
            stream.state = if self.written[zone as usize] {
                StreamState::NeedsReset
            } else {
                StreamState::Writing
            };
        }
    }
}

/// Sequential writers over a ring of zones (one block per command, at the
/// write pointer); a full zone is left for the least recently used one,
/// which is reset first if it was written. State carries over between
/// calls, so the device cycles through fill and reset.
pub struct SeqWriter {
    ring: ZoneRing,
    queue_depth: usize,
    payload: Vec<u8>,
    done: Vec<Completion>,
}

impl SeqWriter {
    /// Keeps up to `queue_depth` commands in flight (at most the device's).
    pub fn new<B: Backend>(dev: &B, queue_depth: usize) -> Self {
        let g = dev.geometry();
        SeqWriter {
            ring: ZoneRing::new(g),
            queue_depth: queue_depth.min(g.queue_depth as usize).max(1),
            payload: vec![0xa5; g.block_size_bytes as usize],
            done: Vec::with_capacity(queue_depth),
        }
    }

    /// Writes `blocks` blocks and waits until all of them completed.
    pub fn write<B: Backend>(&mut self, dev: &mut B, blocks: u64) {
        let (mut submitted, mut completed, mut turn) = (0u64, 0u64, 0usize);
        while completed < blocks {
            while dev.in_flight() < self.queue_depth {
                let more = submitted < blocks;
                let Some(s) = more.then(|| self.ring.pick(turn, 1)).flatten() else {
                    break;
                };
                turn = s + 1;
                if self.ring.reset_if_due(dev, s) {
                    continue;
                }
                let stream = &mut self.ring.streams[s];
                let command = Command::Write {
                    zone: stream.zone,
                    offset_blocks: stream.next_offset_blocks,
                    data: self.payload.clone().into(),
                    oob: Vec::new(),
                };
                submit(dev, s as u64, command);
                self.ring.written[stream.zone as usize] = true;
                stream.next_offset_blocks += 1;
                stream.in_flight += 1;
                submitted += 1;
            }
            reap_some(dev, &mut self.done);
            for i in 0..self.done.len() {
                let tag = self.done[i].tag;
                completed += u64::from(tag & RESET_TAG == 0);
                self.complete(tag);
            }
        }
    }

    fn complete(&mut self, tag: u64) {
        self.ring
            .complete((tag & !RESET_TAG) as usize, tag & RESET_TAG != 0);
    }
}

/// Fills every zone to its capacity, so any block can be read.
pub fn fill_device<B: Backend>(dev: &mut B, queue_depth: usize) {
    let zones = u64::from(dev.geometry().zone_count);
    let capacity = dev.geometry().zone_capacity_blocks;
    let mut writer = SeqWriter::new(dev, queue_depth);
    writer.write(dev, zones * capacity);
    assert_eq!(dev.in_flight(), 0);
}

/// Reads `blocks` random single blocks of the whole device with up to
/// `queue_depth` in flight; returns the bytes read (so the work is used).
pub fn random_reads<B: Backend>(
    dev: &mut B,
    rng: &mut Rng,
    done: &mut Vec<Completion>,
    queue_depth: usize,
    blocks: u64,
) -> u64 {
    let zones = u64::from(dev.geometry().zone_count);
    let capacity = dev.geometry().zone_capacity_blocks;
    let depth = queue_depth.min(dev.geometry().queue_depth as usize).max(1);
    let (mut submitted, mut completed, mut bytes) = (0u64, 0u64, 0u64);
    while completed < blocks {
        while submitted < blocks && dev.in_flight() < depth {
            let zone = rng.below(zones) as ZoneId;
            let offset_blocks = rng.below(capacity);
            submit(
                dev,
                submitted,
                Command::Read {
                    zone,
                    offset_blocks,
                    block_count: 1,
                    priority: ReadPriority::Host,
                },
            );
            submitted += 1;
        }
        reap_some(dev, done);
        for c in done.drain(..) {
            if let Ok(Outcome::Read { data, .. }) = c.result {
                bytes += data.len() as u64;
            }
            completed += 1;
        }
    }
    bytes
}

/// Tag bits of a [`ShapedWriter`] append: its blocks above its number.
const BLOCKS_SHIFT: u32 = 40;
/// Its stream: the low bits; the command's number above them keeps tags
/// unique while in flight.
const STREAM_BITS: u32 = 8;

/// Zone appends replaying recorded write commands (`shape::Recorder`):
/// the raw side of a comparison with a driver. Each append has the
/// recorded command's blocks, its data is in as many buffers as the
/// recorded command's was (shared windows, no copy), and the device is
/// polled where the driver polled it, so the same blocks are in flight.
/// Appends go to a ring of zones, a zone used until appends fill it; a
/// command that does not fit the zone's rest is cut there and continues in
/// the next zone.
pub struct ShapedWriter {
    ring: ZoneRing,
    max_append_blocks: u32,
    queue_depth: usize,
    block_bytes: usize,
    /// `windows[k]`: one buffer of k blocks, shared by every part of that size.
    windows: Vec<Option<BlockData>>,
    done: Vec<Completion>,
    /// Where the replay stands, and blocks of that command still to send
    /// (one cut at a zone's end).
    at: usize,
    carry: u32,
    sent: u64,
}

impl ShapedWriter {
    pub fn new<B: Backend>(dev: &B) -> Self {
        let g = dev.geometry();
        const { assert!(WRITE_STREAMS < 1 << STREAM_BITS, "stream ids fit the tag") };
        ShapedWriter {
            ring: ZoneRing::new(g),
            max_append_blocks: g.max_append_blocks,
            queue_depth: g.queue_depth as usize,
            block_bytes: g.block_size_bytes as usize,
            windows: vec![None; g.max_append_blocks as usize + 1],
            done: Vec::new(),
            at: 0,
            carry: 0,
            sent: 0,
        }
    }

    /// Appends at least `blocks` blocks by replaying `shape` (from where
    /// the last call stopped, round and round), polling the device after
    /// each recorded batch, and waits until all completed; returns the
    /// blocks written.
    pub fn write<B: Backend>(&mut self, dev: &mut B, blocks: u64, shape: &[WriteCmd]) -> u64 {
        assert!(!shape.is_empty(), "a shape to replay");
        let (mut submitted, mut completed, mut turn) = (0u64, 0u64, 0usize);
        while completed < submitted || submitted < blocks {
            while submitted < blocks && dev.in_flight() < self.queue_depth {
                let cmd = shape[self.at % shape.len()];
                let want = match self.carry {
                    0 => cmd.blocks.clamp(1, self.max_append_blocks),
                    rest => rest,
                };
                let Some(s) = self.ring.pick(turn, u64::from(want)) else {
                    break;
                };
                turn = s + 1;
                if self.ring.reset_if_due(dev, s) {
                    continue;
                }
                let stream = &mut self.ring.streams[s];
                let room = self.ring.capacity_blocks - stream.next_offset_blocks;
                let n = u64::from(want).min(room) as u32;
                let zone = stream.zone;
                stream.next_offset_blocks += u64::from(n);
                stream.in_flight += 1;
                self.ring.written[zone as usize] = true;
                let data = self.payload(n, cmd.parts.clamp(1, n));
                self.sent += 1;
                let tag = (u64::from(n) << BLOCKS_SHIFT)
                    | ((self.sent << STREAM_BITS) & ((1 << BLOCKS_SHIFT) - 1))
                    | s as u64;
                submit(
                    dev,
                    tag,
                    Command::Append {
                        zone,
                        data,
                        oob: Vec::new(),
                    },
                );
                submitted += u64::from(n);
                self.carry = want - n;
                if self.carry == 0 {
                    self.at += 1;
                    if cmd.last_in_batch {
                        break;
                    }
                }
            }
            reap_some(dev, &mut self.done);
            for i in 0..self.done.len() {
                let tag = self.done[i].tag;
                if tag & RESET_TAG == 0 {
                    completed += (tag & !RESET_TAG) >> BLOCKS_SHIFT;
                }
                self.complete(tag);
            }
        }
        completed
    }

    /// An append's data: `n` blocks in `parts` shared buffers.
    fn payload(&mut self, n: u32, parts: u32) -> Payload {
        let base = n / parts;
        let extra = n % parts;
        let mut p = Payload::new();
        for i in 0..parts {
            let k = base + u32::from(i < extra);
            p.push(self.window(k));
        }
        p
    }

    fn window(&mut self, k: u32) -> BlockData {
        let bytes = k as usize * self.block_bytes;
        self.windows[k as usize]
            .get_or_insert_with(|| BlockData::from(vec![0xa5; bytes]))
            .clone()
    }

    fn complete(&mut self, tag: u64) {
        self.ring.complete(
            (tag & ((1 << STREAM_BITS) - 1)) as usize,
            tag & RESET_TAG != 0,
        );
    }
}
