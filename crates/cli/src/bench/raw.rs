//! The raw backend, alone: 4 KiB programs at the write pointer and 4 KiB
//! random reads straight on a device, many commands in flight, no FTL code.
//! The baseline the FTL's rates are divided by (docs/design.md, "Choices and their reasons").
//!
//! Shared with `benches/ftl.rs` (included there by path), so it depends on
//! `zftl_core` and nothing of the CLI's.

use zftl_core::backend::ZoneId;
use zftl_core::{Backend, Command, Completion, Outcome, SubmitError};
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

/// Sequential writers over a ring of zones (one block per command, at the
/// write pointer); a full zone is left for the least recently used one,
/// which is reset first if it was written. State carries over between
/// calls, so the device cycles through fill and reset.
pub struct SeqWriter {
    streams: Vec<Stream>,
    next_zone: ZoneId,
    zone_count: u32,
    capacity_blocks: u64,
    queue_depth: usize,
    written: Vec<bool>,
    payload: Vec<u8>,
    done: Vec<Completion>,
}

impl SeqWriter {
    /// Keeps up to `queue_depth` commands in flight (at most the device's).
    pub fn new<B: Backend>(dev: &B, queue_depth: usize) -> Self {
        let g = dev.geometry();
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
        SeqWriter {
            streams,
            next_zone: WRITE_STREAMS as u32,
            zone_count: g.zone_count,
            capacity_blocks: g.zone_capacity_blocks,
            queue_depth: queue_depth.min(g.queue_depth as usize).max(1),
            written: vec![false; g.zone_count as usize],
            payload: vec![0xa5; g.block_size_bytes as usize],
            done: Vec::with_capacity(queue_depth),
        }
    }

    /// Writes `blocks` blocks and waits until all of them completed.
    pub fn write<B: Backend>(&mut self, dev: &mut B, blocks: u64) {
        let (mut submitted, mut completed, mut turn) = (0u64, 0u64, 0usize);
        while completed < blocks {
            while dev.in_flight() < self.queue_depth {
                let Some(s) = self.pick(turn, submitted < blocks) else {
                    break;
                };
                turn = s + 1;
                let stream = &mut self.streams[s];
                if stream.state == StreamState::NeedsReset {
                    stream.state = StreamState::Resetting;
                    submit(
                        dev,
                        RESET_TAG | s as u64,
                        Command::Reset { zone: stream.zone },
                    );
                    continue;
                }
                let command = Command::Write {
                    zone: stream.zone,
                    offset_blocks: stream.next_offset_blocks,
                    data: self.payload.clone().into(),
                    oob: Vec::new(),
                };
                submit(dev, s as u64, command);
                self.written[stream.zone as usize] = true;
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

    /// The next stream (round robin from `from`) with work to submit.
    fn pick(&self, from: usize, more_writes: bool) -> Option<usize> {
        (0..self.streams.len())
            .map(|i| (from + i) % self.streams.len())
            .find(|&s| {
                let stream = &self.streams[s];
                match stream.state {
                    StreamState::NeedsReset => more_writes,
                    StreamState::Writing => {
                        more_writes && stream.next_offset_blocks < self.capacity_blocks
                    }
                    StreamState::Resetting => false,
                }
            })
    }

    fn complete(&mut self, tag: u64) {
        let s = (tag & !RESET_TAG) as usize;
        let stream = &mut self.streams[s];
        if tag & RESET_TAG != 0 {
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
