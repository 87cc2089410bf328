//! `zns-ftl-crash <device> [rounds] [seed]`: the FTL's crash test on an NVMe
//! ZNS namespace (`/dev/ngXnY`), run inside the test guest.
//!
//! The parent formats zftl on the device, then runs rounds. In each round a
//! child process (this binary again, role `writer`) mounts the FTL and
//! writes a deterministic pattern, flushing every [`FLUSH_EVERY`] writes
//! and printing `flushed SEQ` on stdout after each flush returns; the
//! parent kills it with SIGKILL after a random delay. A fresh child (role
//! `verify`) then mounts the FTL again and reads every block of the test
//! range: each must hold exactly what the write history allows (see
//! [`expected`]), i.e. the newest write that was flushed before the kill or
//! a write issued after it, never an older write and never another block's
//! data. The next writer continues after the last flushed write.
//!
//! Write `seq` (1, 2, ...) is a pure function of (seed, seq): its first
//! block, its length (1..=32 blocks) and the content of each block (a header
//! with a magic, the seed, seq and the block's own LBA, then a pseudo-random
//! fill). A writer that restarts at a sequence number rewrites exactly the
//! same data, so the history is known from the flushed sequence numbers
//! alone. Exit status: 0 pass, 1 a verification failed, 2 setup failed.

#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use zftl_core::{Driver, FormatOptions, FtlConfig};

mod crash;

/// Writes between two flushes.
const FLUSH_EVERY: u64 = 16;
/// Longest write, in blocks. Appends of the blocks of one write go as they
/// are, appends of several writes' blocks are gathered into one buffer:
/// the kills hit both.
const MAX_WRITE_BLOCKS: u64 = 32;
/// Blocks at the start of the volume the test writes (small, so blocks are
/// overwritten many times; capped at the volume's logical size).
const TEST_BLOCKS: u64 = 8192;
const MAGIC: &[u8; 8] = b"ZFTLCRSH";
const DEFAULT_ROUNDS: u32 = 6;

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The blocks write `seq` covers: (first LBA, block count).
fn write_of(seed: u64, seq: u64, blocks: u64) -> (u64, u64) {
    let r = mix(seed ^ mix(seq));
    let count = 1 + (r >> 40) % MAX_WRITE_BLOCKS;
    let first = (r % blocks).min(blocks - count);
    (first, count)
}

/// The content write `seq` puts in block `lba`.
fn block_of(seed: u64, seq: u64, lba: u64, block_size: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(block_size);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&seed.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(&lba.to_le_bytes());
    let mut x = mix(seed ^ mix(seq ^ mix(lba)));
    while b.len() < block_size {
        x = mix(x);
        let take = (block_size - b.len()).min(8);
        b.extend_from_slice(&x.to_le_bytes()[..take]);
    }
    b
}

/// What a block may hold: the seq of a write, or 0 for "never written".
///
/// `rounds[r]` is the last sequence number known flushed when round `r`'s
/// writer was killed. Round `r` wrote `rounds[r-1]+1 ..` (round 0 from 1):
/// every write up to `rounds[r]` was issued and flushed; writes after it up
/// to `rounds[r] + 2 * FLUSH_EVERY` may have been issued (the writer flushes
/// every FLUSH_EVERY writes and prints after the flush; a kill between the
/// flush and the print hides one flush), so they may or may not be there.
/// Walking the writes in issue order, a certain write makes the block's
/// value certain, a possible one adds a candidate.
fn expected(seed: u64, rounds: &[u64], blocks: u64) -> Vec<BTreeSet<u64>> {
    let mut possible: Vec<BTreeSet<u64>> = (0..blocks).map(|_| BTreeSet::from([0])).collect();
    let mut start = 1;
    for &flushed in rounds {
        let end = flushed + 2 * FLUSH_EVERY;
        for seq in start..=end {
            let (first, count) = write_of(seed, seq, blocks);
            for lba in first..first + count {
                let set = &mut possible[lba as usize];
                if seq <= flushed {
                    set.clear();
                }
                set.insert(seq);
            }
        }
        start = flushed + 1;
    }
    possible
}

fn parse_rounds(s: &str) -> Result<Vec<u64>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|x| x.parse().map_err(|_| format!("bad round list {s}")))
        .collect()
}

// ----- roles ------------------------------------------------------------------

/// `writer DEV SEED START BLOCKS`: mount, write from START on, flushing and
/// reporting; runs until killed.
fn writer(dev: &str, seed: u64, start: u64, blocks: u64) -> Result<(), String> {
    let d = crash::open_device(dev, "zns-ftl-crash")?;
    let mut ftl = Driver::mount(d, FtlConfig::default()).map_err(|e| format!("mount: {e}"))?;
    let bs = ftl.block_size();
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock, line: String| {
        // The parent may be gone; nothing to do about it then.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    say(&mut out, "mounted".to_string());
    let mut seq = start;
    loop {
        let (first, count) = write_of(seed, seq, blocks);
        let mut data = Vec::with_capacity(bs * count as usize);
        for lba in first..first + count {
            data.extend_from_slice(&block_of(seed, seq, lba, bs));
        }
        ftl.write(first, &data)
            .map_err(|e| format!("write seq {seq} at lba {first}+{count}: {e}"))?;
        if (seq - start + 1).is_multiple_of(FLUSH_EVERY) {
            ftl.flush()
                .map_err(|e| format!("flush after seq {seq}: {e}"))?;
            say(&mut out, format!("flushed {seq}"));
        }
        seq += 1;
    }
}

/// `verify DEV SEED BLOCKS ROUNDS`: mount and compare every block of the
/// test range with what the history allows; clean shutdown after.
fn verify(dev: &str, seed: u64, blocks: u64, rounds: &[u64], quiet: bool) -> Result<(), String> {
    let t0 = Instant::now();
    let possible = expected(seed, rounds, blocks);
    let d = crash::open_device(dev, "zns-ftl-crash")?;
    let mut ftl = Driver::mount(d, FtlConfig::default()).map_err(|e| format!("mount: {e}"))?;
    let mounted = t0.elapsed();
    let bs = ftl.block_size();
    let zero = vec![0u8; bs];
    let mut bad = 0u64;
    let (mut certain, mut newer, mut unwritten) = (0u64, 0u64, 0u64);
    const CHUNK: u64 = 64;
    let mut lba = 0;
    while lba < blocks {
        let n = CHUNK.min(blocks - lba);
        let data = ftl
            .read(lba, n as u32)
            .map_err(|e| format!("read lba {lba}+{n}: {e}"))?;
        for (i, got) in data.chunks(bs).enumerate() {
            let l = lba + i as u64;
            let allowed = &possible[l as usize];
            let found = if got == zero.as_slice() {
                Some(0)
            } else if &got[..8] == MAGIC {
                let g_seed = u64::from_le_bytes(got[8..16].try_into().expect("8 bytes"));
                let g_seq = u64::from_le_bytes(got[16..24].try_into().expect("8 bytes"));
                let g_lba = u64::from_le_bytes(got[24..32].try_into().expect("8 bytes"));
                if g_seed == seed && got == block_of(seed, g_seq, g_lba, bs).as_slice() {
                    if g_lba != l {
                        if bad < 20 && !quiet {
                            println!("lba {l}: holds the data of lba {g_lba} (write {g_seq})");
                        }
                        bad += 1;
                        continue;
                    }
                    Some(g_seq)
                } else {
                    None
                }
            } else {
                None
            };
            match found {
                Some(v) if allowed.contains(&v) => {
                    if allowed.len() == 1 {
                        certain += 1;
                    } else if v == 0 {
                        unwritten += 1;
                    } else {
                        newer += 1;
                    }
                }
                other => {
                    if bad < 20 && !quiet {
                        let what = match other {
                            Some(0) => "zeroes".to_string(),
                            Some(v) => format!("write {v}"),
                            None => "corrupt data".to_string(),
                        };
                        println!("lba {l}: holds {what}, expected one of {allowed:?}");
                    }
                    bad += 1;
                }
            }
        }
        lba += n;
    }
    let stats = ftl.stats();
    ftl.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    println!(
        "verify: {blocks} blocks in {:.1} s (mount {:.1} s): {certain} as flushed, \
         {newer} from writes after the last flush, {unwritten} never written, {bad} wrong; \
         mapped {} blocks, {} checkpoints, {} media writes",
        t0.elapsed().as_secs_f64(),
        mounted.as_secs_f64(),
        stats.mapped_blocks,
        stats.checkpoints,
        stats.media_write_blocks,
    );
    if bad > 0 {
        return Err(format!("{bad} block(s) read back wrong"));
    }
    Ok(())
}

// ----- the parent -------------------------------------------------------------

/// One round: start a writer at `start`, kill it `delay` after it mounted;
/// returns the last sequence number it reported flushed (or `start - 1`).
fn round(
    dev: &str,
    seed: u64,
    start: u64,
    blocks: u64,
    delay: Duration,
) -> Result<(u64, u64), String> {
    let args = [
        "writer".to_string(),
        dev.to_string(),
        seed.to_string(),
        start.to_string(),
        blocks.to_string(),
    ];
    let mut flushed = start - 1;
    let mut flushes = 0u64;
    let status = crash::kill_round(&args, delay, |line| {
        if let Some(s) = line.strip_prefix("flushed ") {
            if let Ok(s) = s.parse::<u64>() {
                flushed = s;
                flushes += 1;
            }
        }
    })?;
    use std::os::unix::process::ExitStatusExt;
    if status.signal() != Some(libc::SIGKILL) {
        return Err(format!("writer ended with {status}, not SIGKILL"));
    }
    Ok((flushed, flushes))
}

fn run_verify(
    dev: &str,
    seed: u64,
    blocks: u64,
    rounds: &[u64],
    quiet: bool,
) -> Result<(), String> {
    let list: Vec<String> = rounds.iter().map(u64::to_string).collect();
    let mut cmd = Command::new(crash::self_exe()?);
    cmd.args([
        "verify",
        dev,
        &seed.to_string(),
        &blocks.to_string(),
        &list.join(","),
    ]);
    if quiet {
        cmd.arg("quiet");
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start the verifier: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("verification failed ({status})"))
    }
}

fn parent(dev: &str, rounds: u32, seed: u64) -> Result<(), String> {
    let t0 = Instant::now();
    println!("zns-ftl-crash: {dev}: {rounds} rounds, seed {seed}");
    let blocks = {
        let d = crash::open_device(dev, "zns-ftl-crash")?;
        let ftl = Driver::format(d, &FormatOptions::default(), FtlConfig::default())
            .map_err(|e| format!("format: {e}"))?;
        let logical = ftl.logical_blocks();
        println!(
            "formatted: {logical} logical blocks of {} bytes, tags {:?}",
            ftl.block_size(),
            ftl.ftl().tag_mode()
        );
        ftl.shutdown().map_err(|e| format!("shutdown: {e}"))?;
        logical.min(TEST_BLOCKS)
    };
    let mut history: Vec<u64> = Vec::new();
    let mut flushed = 0u64;
    let mut rng = mix(seed ^ 0x5eed);
    for r in 0..rounds {
        rng = mix(rng);
        // 0.3 .. 4.3 s of writing after the mount.
        let delay = Duration::from_millis(300 + rng % 4000);
        let t = Instant::now();
        let (f, flushes) = round(dev, seed, flushed + 1, blocks, delay)?;
        println!(
            "round {r}: writer killed after {:.1} s of writing: {} writes flushed ({flushes} flushes), \
             last flushed write {f}",
            delay.as_secs_f64(),
            f - flushed
        );
        flushed = f;
        history.push(f);
        run_verify(dev, seed, blocks, &history, false).map_err(|e| format!("round {r}: {e}"))?;
        println!("round {r}: verified ({:.1} s)", t.elapsed().as_secs_f64());
    }
    if flushed == 0 {
        return Err("no writer ever completed a flush: the test proved nothing".to_string());
    }
    // The verifier must notice a lie: a history claiming writes flushed
    // that no writer ever issued (past the last round's 2 * FLUSH_EVERY
    // window) must fail.
    let mut lie = history.clone();
    *lie.last_mut().expect("a round") += 20 * FLUSH_EVERY;
    println!(
        "self-check: verifying against a history that claims {} more flushed writes (must fail)",
        20 * FLUSH_EVERY
    );
    if run_verify(dev, seed, blocks, &lie, true).is_ok() {
        return Err("the verifier accepted a false history: it checks nothing".to_string());
    }
    println!("self-check: the verifier rejected it");
    println!(
        "zns-ftl-crash: {rounds} kills survived, {flushed} writes flushed, {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize| -> Result<u64, String> {
        args.get(i)
            .ok_or_else(|| "missing argument".to_string())?
            .parse()
            .map_err(|_| format!("argument {i} is not a number"))
    };
    let result = match args.get(1).map(String::as_str) {
        Some("writer") => (|| writer(&args[2], num(3)?, num(4)?, num(5)?))(),
        Some("verify") => (|| {
            let rounds = parse_rounds(args.get(5).map_or("", String::as_str))?;
            let quiet = args.get(6).is_some_and(|a| a == "quiet");
            verify(&args[2], num(3)?, num(4)?, &rounds, quiet)
        })(),
        Some(dev) if dev.starts_with('/') => {
            let rounds = args
                .get(2)
                .and_then(|s| s.parse().ok())
                .unwrap_or(DEFAULT_ROUNDS);
            let seed = args.get(3).and_then(|s| s.parse().ok()).unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            });
            match parent(dev, rounds, seed) {
                Ok(()) => {
                    println!("ZFTL CRASH: PASS");
                    return ExitCode::SUCCESS;
                }
                Err(e) => {
                    println!("ZFTL CRASH: FAIL: {e} (seed {seed})");
                    return ExitCode::from(1);
                }
            }
        }
        _ => {
            eprintln!("usage: zns-ftl-crash /dev/ngXnY [rounds] [seed]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zns-ftl-crash {}: {e}", args[1]);
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_makes_flushed_writes_certain() {
        let seed = 7;
        let blocks = 256;
        let p = expected(seed, &[32], blocks);
        // Every block written by 1..=32 and not by a later write has one value.
        for seq in 1..=32 {
            let (first, count) = write_of(seed, seq, blocks);
            assert!(first + count <= blocks);
            for lba in first..first + count {
                assert!(p[lba as usize].iter().all(|&s| s >= seq));
            }
        }
        let b = block_of(seed, 3, 9, 4096);
        assert_eq!(b.len(), 4096);
        assert_eq!(&b[..8], MAGIC);
        assert_ne!(b, block_of(seed, 3, 10, 4096));
        assert_eq!(parse_rounds("1,2,30").unwrap(), vec![1, 2, 30]);
    }
}
