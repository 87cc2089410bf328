//! 4 KiB random writes and reads through the FTL with nothing shared: the
//! workload `scripts/bench-unshared.sh` runs on this build and on the build
//! before shared blocks existed, to compare them. Uses only the API both
//! builds have.
//!
//! The default simulated device (4 GiB) in memory with timing off: 1 GiB
//! written sequentially, then `WRITES` (1 M) random 4 KiB overwrites of it
//! and `READS` (2 M) random 4 KiB reads, `DEPTH` requests in flight. Prints one JSON
//! line: `{"writes_per_s": .., "reads_per_s": .., "writes_per_user_s": ..,
//! "reads_per_user_s": ..}`, the rates per wall second and per second of
//! this thread's user CPU time (which other processes' load and the
//! kernel's page faults on the in-memory device do not move).
//!
//! `cargo run --release --example unshared_io [WRITES [READS [SEED]]]`

use std::time::Instant;

use zftl::core::{Driver, FormatOptions, FtlConfig, IoError, ReplyData, Request};
use zftl::sim::rng::Rng;
use zftl::sim::{SimConfig, SimDevice};

const DEPTH: u64 = 16;
const REGION_BLOCKS: u64 = 1 << 18;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |i: usize, default: u64| -> u64 {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let (writes, reads, seed) = (arg(1, 1_000_000), arg(2, 2_000_000), arg(3, 1));
    let dev = SimDevice::create_memory(SimConfig::default())?;
    let mut ftl = Driver::format(dev, &FormatOptions::default(), FtlConfig::default())?;
    let bs = ftl.block_size();
    let chunk = 256u64;
    for lba in (0..REGION_BLOCKS).step_by(chunk as usize) {
        ftl.write(lba, &vec![(lba % 251) as u8; chunk as usize * bs])?;
    }
    ftl.flush()?;
    let mut rng = Rng::new(seed);
    let block = vec![0x5Au8; bs];
    let (t, u) = (Instant::now(), user_cpu_s());
    run(&mut ftl, writes, |_| Request::Write {
        lba: rng.next_u64() % REGION_BLOCKS,
        data: block.clone(),
        fua: false,
    })?;
    ftl.flush()?;
    let writes_per_s = writes as f64 / t.elapsed().as_secs_f64();
    let writes_per_user_s = writes as f64 / (user_cpu_s() - u);
    let mut rng = Rng::new(seed ^ 0xFEED);
    let (t, u) = (Instant::now(), user_cpu_s());
    run(&mut ftl, reads, |_| Request::Read {
        lba: rng.next_u64() % REGION_BLOCKS,
        block_count: 1,
    })?;
    let reads_per_s = reads as f64 / t.elapsed().as_secs_f64();
    let reads_per_user_s = reads as f64 / (user_cpu_s() - u);
    println!(
        "{{\"writes_per_s\": {writes_per_s:.1}, \"reads_per_s\": {reads_per_s:.1}, \
         \"writes_per_user_s\": {writes_per_user_s:.1}, \"reads_per_user_s\": {reads_per_user_s:.1}}}"
    );
    Ok(())
}

/// Issues `count` requests from `next`, `DEPTH` in flight.
fn run(
    ftl: &mut Driver<SimDevice>,
    count: u64,
    mut next: impl FnMut(u64) -> Request,
) -> Result<(), IoError> {
    let (mut sent, mut done, mut in_flight) = (0u64, 0u64, 0u64);
    while done < count {
        while in_flight < DEPTH && sent < count {
            match ftl.try_submit(sent, next(sent)) {
                Ok(()) => {
                    sent += 1;
                    in_flight += 1;
                }
                Err(IoError::Busy) => break,
                Err(e) => return Err(e),
            }
        }
        ftl.turn()?;
        while let Some(reply) = ftl.take_reply() {
            match reply.result? {
                ReplyData::Read(_) | ReplyData::Done => {}
                other => panic!("unexpected reply {other:?}"),
            }
            done += 1;
            in_flight -= 1;
        }
    }
    Ok(())
}

/// This thread's user CPU time in seconds (`utime` of
/// `/proc/thread-self/stat`, in clock ticks of 10 ms; the runs take
/// seconds). Linux only, as the script that runs this example.
fn user_cpu_s() -> f64 {
    let stat =
        std::fs::read_to_string("/proc/thread-self/stat").expect("read /proc/thread-self/stat");
    // Fields after the command name (which may hold spaces) end with ')'.
    let rest = &stat[stat.rfind(')').expect("stat has a command name") + 2..];
    let utime: f64 = rest
        .split(' ')
        .nth(11)
        .and_then(|f| f.parse().ok())
        .expect("utime is field 14 of stat");
    utime / 100.0
}
