//! `zns-nameless-crash <device> [rounds] [seed]`: nameless writes killed
//! mid-stream on an NVMe ZNS namespace (`/dev/ngXnY`), run inside the test
//! guest. On a namespace without per-block metadata the FTL keeps its tags
//! in band, so the blocks' md goes to the log and the zones' md groups
//! (docs/format.md §11, placement log).
//!
//! The parent formats zftl on the device, then runs rounds. In each round a
//! child (role `writer`) mounts the FTL, takes the hand-over and commits,
//! then writes one nameless block per sequence number (data and 32 bytes of
//! md a pure function of seed and seq), printing `wrote SEQ ADDR` after
//! each reply and `flushed SEQ` after each flush of every [`FLUSH_EVERY`]
//! writes; the parent kills it with SIGKILL after a random delay. A fresh
//! child (role `verify`) mounts again and reads every block whose write was
//! flushed: each must hold its data and md at the address it was given.
//! Every block it is handed over (`NamelessEvent::Unrecorded`) must hold
//! the data its md names. Exit status: 0 pass, 1 a check failed, 2 setup.
//!
//! So that zones hold dead blocks, after each flush the writer frees three
//! in four blocks of the batch flushed two flushes before (printing
//! `freeing SEQ…` before the call; the verifier skips them, freed or not).
//! It also asks for an in-place collection of a zone after each flush
//! (`Driver::start_in_place`, docs/design.md "In-place collection on ZNS"),
//! in either tag mode, printing `inplace ZONE` when one starts, so kills
//! land in the middle of jobs and the verifier's mount redoes them; the run
//! fails if none started (the namespace's zones must be small enough to
//! fill between kills).

#![forbid(unsafe_code)]

use std::collections::{BTreeSet, VecDeque};
use std::io::Write;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use zftl_core::{Driver, FormatOptions, FtlConfig, NamelessAddr, NamelessEvent};
use zftl_zns::ZnsDevice;

mod crash;

/// Writes between two flushes.
const FLUSH_EVERY: u64 = 16;
/// Writes per round at most (then the writer waits for its kill): the
/// writer frees nothing, so the volume must not fill.
const ROUND_WRITES: u64 = 3000;
const MAGIC: &[u8; 8] = b"ZFTLNMLS";
const DEFAULT_ROUNDS: u32 = 6;

fn mix(mut x: u64) -> u64 {
    // splitmix64
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The block write `seq` puts.
fn block_of(seed: u64, seq: u64, block_size: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(block_size);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&seed.to_le_bytes());
    b.extend_from_slice(&seq.to_le_bytes());
    let mut x = mix(seed ^ mix(seq));
    while b.len() < block_size {
        x = mix(x);
        let take = (block_size - b.len()).min(8);
        b.extend_from_slice(&x.to_le_bytes()[..take]);
    }
    b
}

/// The md of write `seq`: seed, seq, then a fill.
fn md_of(seed: u64, seq: u64, md_bytes: usize) -> Vec<u8> {
    let mut m = Vec::with_capacity(md_bytes);
    m.extend_from_slice(&seed.to_le_bytes());
    m.extend_from_slice(&seq.to_le_bytes());
    m.extend_from_slice(&mix(seed ^ seq).to_le_bytes());
    m.resize(md_bytes, 0x5a);
    m
}

/// Takes the hand-over: each block must hold what its md names. Returns
/// the blocks handed over.
fn take_handover(ftl: &mut Driver<ZnsDevice>, seed: u64) -> Result<u64, String> {
    let bs = ftl.block_size();
    let mut n = 0;
    loop {
        let events = ftl.next_events(64).map_err(|e| format!("events: {e}"))?;
        if events.is_empty() {
            return Ok(n);
        }
        for e in events {
            let NamelessEvent::Unrecorded { addr, md } = e else {
                return Err(format!("an event of another kind: {e:?}"));
            };
            let seq = u64::from_le_bytes(md[8..16].try_into().expect("8 bytes"));
            if md != md_of(seed, seq, md.len()) {
                return Err(format!("{addr:?} handed over with md naming no write"));
            }
            let (data, got_md) = ftl
                .nameless_read(addr)
                .map_err(|e| format!("read of handed-over {addr:?}: {e}"))?;
            if data != block_of(seed, seq, bs) || got_md != md {
                return Err(format!("handed-over {addr:?} does not hold write {seq}"));
            }
            n += 1;
        }
    }
}

/// `writer DEV SEED START`: mount, take the hand-over and commit, then
/// write from START on, reporting; runs until killed.
fn writer(dev: &str, seed: u64, start: u64) -> Result<(), String> {
    let d = crash::open_device(dev, "zns-nameless-crash")?;
    let mut ftl = Driver::mount(d, FtlConfig::default()).map_err(|e| format!("mount: {e}"))?;
    take_handover(&mut ftl, seed)?;
    ftl.nameless_commit().map_err(|e| format!("commit: {e}"))?;
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let zone_count = ftl.ftl().geometry().zone_count;
    let mut out = std::io::stdout().lock();
    let say = |out: &mut std::io::StdoutLock, line: String| {
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    say(&mut out, "mounted".to_string());
    // The batches flushed, newest last: (seq, address) each.
    let mut flushed: VecDeque<Vec<(u64, NamelessAddr)>> = VecDeque::new();
    let mut batch = Vec::new();
    let mut next_zone = (mix(seed ^ start) % u64::from(zone_count)) as u32;
    for seq in start..start + ROUND_WRITES {
        let a = ftl
            .nameless_write(&block_of(seed, seq, bs), &md_of(seed, seq, mb))
            .map_err(|e| format!("nameless write {seq}: {e}"))?;
        say(&mut out, format!("wrote {seq} {}", a[0].to_u64()));
        batch.push((seq, a[0]));
        if (seq - start + 1).is_multiple_of(FLUSH_EVERY) {
            ftl.flush()
                .map_err(|e| format!("flush after seq {seq}: {e}"))?;
            say(&mut out, format!("flushed {seq}"));
            flushed.push_back(std::mem::take(&mut batch));
            if flushed.len() > 2 {
                let old = flushed.pop_front().expect("three batches");
                let (seqs, addrs): (Vec<u64>, Vec<NamelessAddr>) =
                    old.into_iter().filter(|(s, _)| s % 4 != 0).unzip();
                let list: Vec<String> = seqs.iter().map(u64::to_string).collect();
                say(&mut out, format!("freeing {}", list.join(" ")));
                ftl.nameless_free(&addrs)
                    .map_err(|e| format!("free of {seqs:?}: {e}"))?;
            }
            // In-place collection: the first zone, from a point that
            // moves, that may start one now.
            for _ in 0..zone_count {
                next_zone = (next_zone + 1) % zone_count;
                if ftl.start_in_place(next_zone) {
                    say(&mut out, format!("inplace {next_zone}"));
                    break;
                }
            }
        }
    }
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// `verify DEV SEED FILE`: mount, take the hand-over, then read every
/// `SEQ ADDR` line of FILE (the flushed writes); clean shutdown after.
fn verify(dev: &str, seed: u64, file: &str) -> Result<(), String> {
    let t0 = Instant::now();
    let list = std::fs::read_to_string(file).map_err(|e| format!("{file}: {e}"))?;
    let d = crash::open_device(dev, "zns-nameless-crash")?;
    let mut ftl = Driver::mount(d, FtlConfig::default()).map_err(|e| format!("mount: {e}"))?;
    let handed = take_handover(&mut ftl, seed)?;
    let (bs, mb) = (ftl.block_size(), ftl.nameless_md_bytes());
    let mut checked = 0u64;
    for line in list.lines() {
        let mut it = line.split(' ');
        let (Some(seq), Some(addr)) = (it.next(), it.next()) else {
            continue;
        };
        let seq: u64 = seq.parse().map_err(|_| format!("bad line {line:?}"))?;
        let raw: u64 = addr.parse().map_err(|_| format!("bad line {line:?}"))?;
        let addr = NamelessAddr::from_u64(raw);
        let got = ftl
            .nameless_read(addr)
            .map_err(|e| format!("flushed write {seq} at {addr:?}: {e}"))?;
        if got != (block_of(seed, seq, bs), md_of(seed, seq, mb)) {
            return Err(format!("flushed write {seq} at {addr:?}: other data or md"));
        }
        checked += 1;
    }
    let stats = ftl.stats();
    let tags = ftl.ftl().tag_mode();
    ftl.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    println!(
        "verify: {checked} flushed blocks at their addresses, {handed} handed over, in {:.1} s; \
         {} live nameless blocks, {} stuck md groups, tags {tags:?}",
        t0.elapsed().as_secs_f64(),
        stats.nameless_live_blocks,
        stats.nameless_md_stuck_groups,
    );
    Ok(())
}

// ----- the parent -------------------------------------------------------------

/// What a writer reported before its kill.
struct Round {
    /// The last seq reported flushed.
    flushed: u64,
    /// Every (seq, addr) reported written.
    wrote: Vec<(u64, u64)>,
    /// Every seq whose free was asked for (done or not).
    freed: Vec<u64>,
    /// In-place collections started.
    inplace: u64,
}

/// One round: a writer from `start`, killed `delay` after it mounted.
fn round(dev: &str, seed: u64, start: u64, delay: Duration) -> Result<Round, String> {
    let args = [
        "writer".to_string(),
        dev.to_string(),
        seed.to_string(),
        start.to_string(),
    ];
    let mut r = Round {
        flushed: start - 1,
        wrote: Vec::new(),
        freed: Vec::new(),
        inplace: 0,
    };
    crash::kill_round(&args, delay, |line| {
        let words: Vec<&str> = line.split(' ').collect();
        match words.as_slice() {
            ["flushed", s] => r.flushed = s.parse().unwrap_or(r.flushed),
            ["wrote", s, a] => {
                if let (Ok(s), Ok(a)) = (s.parse(), a.parse()) {
                    r.wrote.push((s, a));
                }
            }
            ["freeing", seqs @ ..] => r
                .freed
                .extend(seqs.iter().filter_map(|s| s.parse::<u64>().ok())),
            ["inplace", _] => r.inplace += 1,
            _ => {}
        }
    })?;
    Ok(r)
}

fn run_verify(dev: &str, seed: u64, known: &[(u64, u64)]) -> Result<(), String> {
    // (The guest's initramfs may have no /tmp yet.)
    let dir = std::env::temp_dir();
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let file = dir.join("zns-nameless-crash.list");
    let text: String = known.iter().map(|(s, a)| format!("{s} {a}\n")).collect();
    std::fs::write(&file, text).map_err(|e| format!("{}: {e}", file.display()))?;
    let status = Command::new(crash::self_exe()?)
        .args(["verify", dev, &seed.to_string(), &file.to_string_lossy()])
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
    println!("zns-nameless-crash: {dev}: {rounds} rounds, seed {seed}");
    let tags = {
        let d = crash::open_device(dev, "zns-nameless-crash")?;
        let ftl = Driver::format(d, &FormatOptions::default(), FtlConfig::default())
            .map_err(|e| format!("format: {e}"))?;
        println!(
            "formatted: blocks of {} bytes, tags {:?}, {} md bytes per nameless block",
            ftl.block_size(),
            ftl.ftl().tag_mode(),
            ftl.nameless_md_bytes()
        );
        let tags = ftl.ftl().tag_mode();
        ftl.shutdown().map_err(|e| format!("shutdown: {e}"))?;
        tags
    };
    // Every write known flushed and never freed: (seq, address).
    let mut known: Vec<(u64, u64)> = Vec::new();
    let mut freed: BTreeSet<u64> = BTreeSet::new();
    let mut inplace = 0u64;
    let mut next = 1u64;
    let mut rng = mix(seed ^ 0x5eed);
    for r in 0..rounds {
        rng = mix(rng);
        let delay = Duration::from_millis(300 + rng % 4000);
        let t = Instant::now();
        let w = round(dev, seed, next, delay)?;
        freed.extend(&w.freed);
        inplace += w.inplace;
        let before = known.len();
        known.extend(w.wrote.iter().copied().filter(|&(s, _)| s <= w.flushed));
        known.retain(|(s, _)| !freed.contains(s));
        println!(
            "round {r}: writer killed after {:.1} s: {} writes answered, {} flushed and kept, \
             {} freed, {} in-place collections started",
            delay.as_secs_f64(),
            w.wrote.len(),
            known.len().saturating_sub(before),
            w.freed.len(),
            w.inplace
        );
        // Seqs are never reused: a later round's write differs in seq.
        next += ROUND_WRITES;
        run_verify(dev, seed, &known).map_err(|e| format!("round {r}: {e}"))?;
        println!("round {r}: verified ({:.1} s)", t.elapsed().as_secs_f64());
    }
    if known.is_empty() {
        return Err("no write was ever flushed: the test proved nothing".to_string());
    }
    // The writer asks for in-place collections; a run where none started
    // tested none.
    if inplace == 0 {
        return Err("no in-place collection started: the test proved nothing of them".to_string());
    }
    // The verifier must notice a lie: a flushed write claimed at another
    // write's address.
    if known.len() >= 2 {
        let mut lie = known.clone();
        lie[0].1 = known[1].1;
        println!("self-check: a write claimed at another's address (must fail)");
        if run_verify(dev, seed, &lie).is_ok() {
            return Err("the verifier accepted a false address: it checks nothing".to_string());
        }
        println!("self-check: the verifier rejected it");
    }
    println!(
        "zns-nameless-crash: {rounds} kills survived (tags {tags:?}), {} flushed blocks \
         checked, {} freed, {inplace} in-place collections started, {:.1} s",
        known.len(),
        freed.len(),
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
        Some("writer") => (|| writer(&args[2], num(3)?, num(4)?))(),
        Some("verify") => (|| verify(&args[2], num(3)?, &args[4]))(),
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
            return match parent(dev, rounds, seed) {
                Ok(()) => {
                    println!("ZFTL NAMELESS CRASH: PASS");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    println!("ZFTL NAMELESS CRASH: FAIL: {e} (seed {seed})");
                    ExitCode::from(1)
                }
            };
        }
        _ => {
            eprintln!("usage: zns-nameless-crash /dev/ngXnY [rounds] [seed]");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("zns-nameless-crash {}: {e}", args[1]);
            ExitCode::from(1)
        }
    }
}
