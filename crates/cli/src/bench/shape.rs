//! What a driver asks of its device, recorded by a [`Backend`] wrapper:
//! each write command's size and parts, and the blocks in flight when the
//! device is polled. `bench throughput` records the FTL's shape and gives
//! the raw side the same one, then records the raw side too, so both
//! shapes are in the report.
//!
//! Shared with `benches/ftl.rs` (included there by path), so it depends on
//! `zftl_core` and nothing of the CLI's.

use std::collections::HashMap;

use zftl_core::{Backend, Command, Completion, SubmitError};

/// Write commands whose (blocks, parts) are kept for a replay; the counts
/// go on past it.
pub const MAX_RECORDED_WRITES: usize = 1 << 20;

/// One write or append: its blocks, the buffers (parts) they come in, and
/// whether it was the last sent before the device was polled (with timing
/// off, the end of a batch that completes together).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteCmd {
    pub blocks: u32,
    pub parts: u32,
    pub last_in_batch: bool,
}

/// The commands of a window.
#[derive(Clone, Debug, Default)]
pub struct Shape {
    /// The first [`MAX_RECORDED_WRITES`] writes and appends, in order.
    pub writes: Vec<WriteCmd>,
    pub write_commands: u64,
    pub write_blocks: u64,
    pub write_parts: u64,
    pub read_commands: u64,
    pub read_blocks: u64,
    pub resets: u64,
    /// Polls of the device (reaps) with writes in flight, and the write
    /// blocks in flight summed over them.
    polls_with_writes: u64,
    write_blocks_at_polls: u64,
    polls_with_reads: u64,
    read_commands_at_polls: u64,
}

impl Shape {
    /// Mean blocks per write command.
    pub fn blocks_per_write(&self) -> f64 {
        ratio(self.write_blocks, self.write_commands)
    }

    /// Mean buffers per write command.
    pub fn parts_per_write(&self) -> f64 {
        ratio(self.write_parts, self.write_commands)
    }

    /// Mean write blocks in flight when the device was polled with any in
    /// flight: with timing off every command submitted before a poll
    /// completes at it, so this is the blocks sent per batch.
    pub fn write_blocks_in_flight(&self) -> f64 {
        ratio(self.write_blocks_at_polls, self.polls_with_writes)
    }

    /// Mean read commands in flight when the device was polled with any.
    pub fn reads_in_flight(&self) -> f64 {
        ratio(self.read_commands_at_polls, self.polls_with_reads)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// A command as the counts see it.
#[derive(Clone, Copy)]
enum Sent {
    Write(WriteCmd),
    Read(u32),
    Reset,
    Other,
}

/// Kind and blocks of a command in flight.
#[derive(Clone, Copy)]
enum InFlight {
    Write(u32),
    Read,
    Other,
}

/// A backend that records the [`Shape`] of what is sent through it.
pub struct Recorder<B> {
    pub inner: B,
    shape: Shape,
    in_flight: HashMap<u64, InFlight>,
    write_blocks_in_flight: u64,
    reads_in_flight: u64,
    /// A recorded write was sent since the last poll.
    batch_open: bool,
}

impl<B: Backend> Recorder<B> {
    pub fn new(inner: B) -> Recorder<B> {
        Recorder {
            inner,
            shape: Shape::default(),
            in_flight: HashMap::new(),
            write_blocks_in_flight: 0,
            reads_in_flight: 0,
            batch_open: false,
        }
    }

    /// The shape recorded since the last call; starts a new one.
    pub fn take_shape(&mut self) -> Shape {
        self.batch_open = false;
        std::mem::take(&mut self.shape)
    }

    /// What `command` is, for the counts (taken before it moves).
    fn describe(&self, command: &Command) -> Sent {
        let bs = self.inner.geometry().block_size_bytes as usize;
        match command {
            Command::Write { data, .. } | Command::Append { data, .. } => Sent::Write(WriteCmd {
                blocks: (data.len() / bs.max(1)) as u32,
                parts: data.part_count() as u32,
                last_in_batch: false,
            }),
            Command::Read { block_count, .. } => Sent::Read(*block_count),
            Command::Reset { .. } => Sent::Reset,
            _ => Sent::Other,
        }
    }

    /// Counts a command the device took.
    fn note(&mut self, tag: u64, sent: Sent) {
        let s = &mut self.shape;
        let kind = match sent {
            Sent::Write(w) => {
                s.write_commands += 1;
                s.write_blocks += u64::from(w.blocks);
                s.write_parts += u64::from(w.parts);
                if s.writes.len() < MAX_RECORDED_WRITES {
                    s.writes.push(w);
                    self.batch_open = true;
                }
                self.write_blocks_in_flight += u64::from(w.blocks);
                InFlight::Write(w.blocks)
            }
            Sent::Read(blocks) => {
                s.read_commands += 1;
                s.read_blocks += u64::from(blocks);
                self.reads_in_flight += 1;
                InFlight::Read
            }
            Sent::Reset => {
                s.resets += 1;
                InFlight::Other
            }
            Sent::Other => InFlight::Other,
        };
        if let Some(old) = self.in_flight.insert(tag, kind) {
            // A tag reused while in flight: the driver's bug, not the
            // device's; keep the counts right.
            self.forget(old);
        }
    }

    fn forget(&mut self, kind: InFlight) {
        match kind {
            InFlight::Write(blocks) => self.write_blocks_in_flight -= u64::from(blocks),
            InFlight::Read => self.reads_in_flight -= 1,
            InFlight::Other => {}
        }
    }
}

impl<B: Backend> Backend for Recorder<B> {
    forward_backend!(inner: geometry, zone_info);
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        let sent = self.describe(&command);
        self.inner.submit(tag, command)?;
        self.note(tag, sent);
        Ok(())
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let s = &mut self.shape;
        if std::mem::take(&mut self.batch_open) {
            if let Some(last) = s.writes.last_mut() {
                last.last_in_batch = true;
            }
        }
        if self.write_blocks_in_flight > 0 {
            s.polls_with_writes += 1;
            s.write_blocks_at_polls += self.write_blocks_in_flight;
        }
        if self.reads_in_flight > 0 {
            s.polls_with_reads += 1;
            s.read_commands_at_polls += self.reads_in_flight;
        }
        let first = out.len();
        let n = self.inner.reap(out, max);
        for done in &out[first..] {
            if let Some(kind) = self.in_flight.remove(&done.tag) {
                self.forget(kind);
            }
        }
        n
    }
    forward_backend!(inner: wait, in_flight, clock_ns);
}
