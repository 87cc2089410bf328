//! A backend that passes every command to the simulator and lets a test
//! watch them: what was submitted, and when each completed.

use zftl::core::{Backend, Command, Completion, DeviceError, Geometry, SubmitError, ZoneInfo};
use zftl::sim::SimDevice;

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
