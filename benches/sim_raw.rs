//! The raw simulator, alone: no FTL code. This is the baseline every later
//! layer is judged against (DESIGN.md §6: report ratios measured in one run).
//!
//! The device lives in memory with timing off, so these numbers are the
//! simulator's own CPU cost per 4 KiB block, not a model of NAND speed.
//!
//! - `program_4k`: 4 KiB writes at the write pointer, spread over several
//!   open zones, many commands in flight through submit/reap; a zone that
//!   fills is reset and reused (resets are part of the cost, as on a device).
//! - `random_read_4k`: 4 KiB reads at random offsets of a full device, many
//!   in flight.
//!
//! Run: `cargo bench --bench sim_raw` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zftl::core::backend::ZoneId;
use zftl::core::{Backend, Command, Completion, Outcome, SubmitError};
use zftl::sim::{SimConfig, SimDevice};

/// Blocks moved per measured iteration.
const BLOCKS_PER_ITER: u64 = 4096;
/// Commands kept in flight.
const QUEUE_DEPTH: u32 = 64;
/// Zones written at once by the program benchmark.
const WRITE_STREAMS: usize = 8;
const BLOCK_BYTES: u32 = 4096;

/// 8 LUNs x 64 erase blocks x 64 pages of 4 KiB = 128 MiB; zones 4 LUNs wide
/// (256 blocks = 1 MiB), 128 zones. Endurance is out of the way so a long
/// run never wears the device out.
fn bench_config() -> SimConfig {
    SimConfig {
        channels: 4,
        luns_per_channel: 2,
        blocks_per_lun: 64,
        pages_per_block: 64,
        page_size_bytes: BLOCK_BYTES,
        oob_size_bytes: 64,
        program_unit_pages: 1,
        zone_width_luns: 4,
        zone_size_blocks: None,
        max_open_zones: 16,
        max_active_zones: 32,
        max_append_blocks: 128,
        max_transfer_blocks: 256,
        queue_depth: QUEUE_DEPTH,
        timing: None,
        endurance_erases: u32::MAX,
        factory_bad_block_per_mille: 0,
        ..SimConfig::default()
    }
}

fn new_device() -> SimDevice {
    SimDevice::create_memory(bench_config()).expect("bench config is valid")
}

/// Reaps what is ready, waiting if nothing is; panics on a failed command
/// (in this benchmark a failure is a bug).
fn reap_some(dev: &mut SimDevice, out: &mut Vec<Completion>) {
    out.clear();
    if dev.reap(out, usize::MAX) == 0 {
        dev.wait().expect("wait");
        dev.reap(out, usize::MAX);
    }
    for done in out.iter() {
        if let Err(e) = &done.result {
            panic!("command {} failed: {e}", done.tag);
        }
    }
}

fn submit(dev: &mut SimDevice, tag: u64, command: Command) {
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

/// Sequential writers over a ring of zones; state carries over between
/// iterations so the device cycles through fill and reset.
struct SeqWriter {
    streams: Vec<Stream>,
    next_zone: ZoneId,
    zone_count: u32,
    capacity_blocks: u64,
    written: Vec<bool>,
    payload: Vec<u8>,
    done: Vec<Completion>,
}

const RESET_TAG: u64 = 1 << 63;

impl SeqWriter {
    fn new(dev: &SimDevice) -> Self {
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
            written: vec![false; g.zone_count as usize],
            payload: vec![0xa5; BLOCK_BYTES as usize],
            done: Vec::with_capacity(QUEUE_DEPTH as usize),
        }
    }

    /// Writes `blocks` blocks and waits until all of them completed.
    fn write(&mut self, dev: &mut SimDevice, blocks: u64) {
        let (mut submitted, mut completed, mut turn) = (0u64, 0u64, 0usize);
        while completed < blocks {
            while dev.in_flight() < QUEUE_DEPTH as usize {
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
                    data: self.payload.clone(),
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
        if tag & RESET_TAG != 0 {
            let stream = &mut self.streams[s];
            stream.state = StreamState::Writing;
            stream.next_offset_blocks = 0;
            return;
        }
        let stream = &mut self.streams[s];
        stream.in_flight -= 1;
        if stream.in_flight == 0 && stream.next_offset_blocks == self.capacity_blocks {
            // Full: move to the least recently used zone in the ring, which
            // no stream holds (the ring has more zones than streams).
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
fn fill_device(dev: &mut SimDevice) {
    let zones = u64::from(dev.geometry().zone_count);
    let capacity = dev.geometry().zone_capacity_blocks;
    let mut writer = SeqWriter::new(dev);
    writer.write(dev, zones * capacity);
    assert_eq!(dev.in_flight(), 0);
    for zone in 0..zones as ZoneId {
        let info = dev.zone_info(zone).expect("zone info");
        assert_eq!(info.write_pointer_blocks, capacity, "zone {zone} not full");
    }
}

/// xorshift64*: a fixed, dependency-free random stream.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Reads `blocks` random blocks with up to `QUEUE_DEPTH` in flight.
fn random_reads(dev: &mut SimDevice, rng: &mut Rng, done: &mut Vec<Completion>, blocks: u64) {
    let zones = u64::from(dev.geometry().zone_count);
    let capacity = dev.geometry().zone_capacity_blocks;
    let (mut submitted, mut completed) = (0u64, 0u64);
    while completed < blocks {
        while submitted < blocks && dev.in_flight() < QUEUE_DEPTH as usize {
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
                black_box(data);
            }
            completed += 1;
        }
    }
}

fn sim_raw(c: &mut Criterion) {
    let mut group = c.benchmark_group("sim_raw");
    group.throughput(Throughput::Elements(BLOCKS_PER_ITER));
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));

    let mut dev = new_device();
    let mut writer = SeqWriter::new(&dev);
    group.bench_function("program_4k_qd64", |b| {
        b.iter(|| writer.write(&mut dev, BLOCKS_PER_ITER));
    });
    drop(dev);

    let mut dev = new_device();
    fill_device(&mut dev);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut done = Vec::with_capacity(QUEUE_DEPTH as usize);
    group.bench_function("random_read_4k_qd64", |b| {
        b.iter(|| random_reads(&mut dev, &mut rng, &mut done, BLOCKS_PER_ITER));
    });
    group.finish();
}

criterion_group!(benches, sim_raw);
criterion_main!(benches);
