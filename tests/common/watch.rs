//! A backend that passes every command to the simulator and lets a test
//! watch them: what was submitted, and when each completed; and the write
//! load the watching tests run under it.

use zftl::core::{
    Backend, Command, Completion, DeviceError, Driver, Geometry, IoError, Request, SubmitError,
    ZoneInfo,
};
use zftl::sim::SimDevice;

/// Every block of a volume of `logical` blocks in order, then random
/// blocks (xorshift, the same every run) without end.
pub fn fill_then_random(logical: u64) -> impl Iterator<Item = u64> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    (0..logical).chain(std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % logical
    }))
}

/// Writes the first `count` blocks of `lbas`, 4 KiB each
/// (`super::pattern` version 1), `depth` in flight; a busy refusal sends
/// the same block again after a turn.
pub fn write_at_depth<B: Backend>(
    d: &mut Driver<B>,
    lbas: impl Iterator<Item = u64>,
    count: u64,
    depth: u64,
) {
    let bs = d.block_size();
    let mut lbas = lbas.peekable();
    let (mut sent, mut answered) = (0u64, 0u64);
    while answered < count {
        while sent < count && sent - answered < depth {
            let lba = *lbas.peek().expect("enough blocks to write");
            let request = Request::Write {
                lba,
                data: super::pattern(lba, 1, bs),
                fua: false,
            };
            match d.try_submit(sent, request) {
                Ok(()) => {
                    sent += 1;
                    lbas.next();
                }
                Err(IoError::Busy) => break,
                Err(e) => panic!("write {sent}: {e}"),
            }
        }
        d.turn().expect("turn");
        while let Some(reply) = d.take_reply() {
            reply.result.expect("write answered");
            answered += 1;
        }
    }
}

/// What a test counts as commands go by.
pub trait Watcher {
    /// `command` is about to be submitted with `tag`.
    fn submitted(&mut self, geometry: &Geometry, tag: u64, command: &Command);
    /// The command with `tag` completed (or its submission was refused).
    fn completed(&mut self, tag: u64);
}

/// The simulator with a [`Watcher`] on its commands.
pub struct Watched<W> {
    pub inner: SimDevice,
    pub watcher: W,
}

impl<W: Watcher> Backend for Watched<W> {
    fn geometry(&self) -> &Geometry {
        self.inner.geometry()
    }
    fn zone_info(&mut self, zone: u32) -> Result<ZoneInfo, DeviceError> {
        self.inner.zone_info(zone)
    }
    fn submit(&mut self, tag: u64, command: Command) -> Result<(), SubmitError> {
        self.watcher.submitted(self.inner.geometry(), tag, &command);
        let submitted = self.inner.submit(tag, command);
        if submitted.is_err() {
            self.watcher.completed(tag); // never in flight
        }
        submitted
    }
    fn reap(&mut self, out: &mut Vec<Completion>, max: usize) -> usize {
        let from = out.len();
        let n = self.inner.reap(out, max);
        for c in &out[from..] {
            self.watcher.completed(c.tag);
        }
        n
    }
    fn wait(&mut self) -> Result<(), DeviceError> {
        self.inner.wait()
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
    fn clock_ns(&self) -> u64 {
        self.inner.clock_ns()
    }
}
