//! Runs each `zftl bench` subcommand with tiny parameters and checks the
//! JSON it prints: the fields are there and the values are sane. No timing
//! assertions (shared machines drift).

use std::process::{Command, Output};

use serde_json::Value;

fn zftl(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zftl"))
        .args(args)
        .output()
        .expect("run zftl")
}

fn json(args: &[&str]) -> Value {
    let out = zftl(args);
    assert!(
        out.status.success(),
        "zftl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "no progress bar when stderr is not a terminal: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("stdout is one JSON value")
}

fn num(v: &Value, key: &str) -> f64 {
    v.get(key)
        .unwrap_or_else(|| panic!("field {key} missing in {v}"))
        .as_f64()
        .unwrap_or_else(|| panic!("field {key} is not a number in {v}"))
}

const TINY: &[&str] = &["--zones", "256", "--zone-blocks", "16"];

fn wa(extra: &[&str]) -> Value {
    // A write buffer smaller than the tiny logical space, so rewrites it
    // absorbs cannot push WA below 1.
    let mut args = vec![
        "bench",
        "wa",
        "--json",
        "--overwrites",
        "1",
        "--write-buffer-blocks",
        "64",
    ];
    args.extend_from_slice(TINY);
    args.extend_from_slice(extra);
    json(&args)
}

fn check_wa(v: &Value) {
    for key in [
        "wa",
        "host_writes",
        "media_writes",
        "gc_copies",
        "erases",
        "erase_max",
        "erase_mean",
        "zone_count",
        "zone_blocks",
        "erase_min",
        "erase_stddev",
        "erase_max_over_mean",
        "device_erase_max",
        "device_erase_mean",
        "logical_blocks",
        "op",
        "elapsed_s",
        "seed",
    ] {
        num(v, key);
    }
    assert!(v["workload"].is_string() && v["policy"].is_string());
    assert!(num(v, "wa") >= 1.0, "WA below 1: {v}");
    let logical = num(v, "logical_blocks");
    assert_eq!(
        num(v, "host_writes"),
        logical,
        "--overwrites 1 writes the logical size"
    );
    assert!(num(v, "media_writes") >= num(v, "host_writes") * 0.5);
    assert_eq!(num(v, "zone_count"), 256.0);
    let zone_blocks = num(v, "zone_blocks");
    assert!(num(v, "erase_max") >= num(v, "erase_mean"));
    assert!(num(v, "erase_mean") >= num(v, "erase_min"));
    // OP = (data blocks − logical) ÷ logical, data = 256 zones × zone_blocks.
    let op = (256.0 * zone_blocks - logical) / logical;
    assert!(
        (op - num(v, "op")).abs() < 0.01,
        "OP {op} vs {}",
        num(v, "op")
    );
}

#[test]
fn wa_uniform_greedy() {
    let v = wa(&[
        "--workload",
        "uniform",
        "--op",
        "0.28",
        "--policy",
        "greedy",
    ]);
    check_wa(&v);
    assert_eq!(v["workload"], "uniform");
    assert_eq!(v["policy"], "greedy");
}

#[test]
fn wa_hotcold_cost_benefit_with_static_wl() {
    let v = wa(&[
        "--workload",
        "hotcold",
        "--op",
        "0.14",
        "--policy",
        "cost-benefit",
        "--static-wl-threshold",
        "4",
    ]);
    check_wa(&v);
    assert_eq!(v["policy"], "cost-benefit");
    assert_eq!(num(&v, "hot_fraction"), 0.1);
    assert_eq!(num(&v, "static_wl_threshold"), 4.0);
    assert!(num(&v, "wl_moves") > 0.0, "nothing leveled: {v}");
}

#[test]
fn wa_zipf_is_deterministic() {
    let a = wa(&["--workload", "zipf", "--op", "0.07", "--seed", "9"]);
    check_wa(&a);
    let b = wa(&["--workload", "zipf", "--op", "0.07", "--seed", "9"]);
    for key in ["wa", "media_writes", "gc_copies", "erases"] {
        assert_eq!(a[key], b[key], "{key} differs between identical runs");
    }
}

#[test]
fn wa_with_gc_spread_over_lanes_and_victims() {
    let v = wa(&["--gc-lanes", "2", "--gc-victims", "3"]);
    check_wa(&v);
    assert_eq!(
        (num(&v, "gc_lanes"), num(&v, "gc_victims")),
        (2.0, 3.0),
        "{v}"
    );
    assert!(num(&v, "gc_copies") > 0.0, "GC ran: {v}");
    let plain = wa(&[]);
    assert_eq!(
        (num(&plain, "gc_lanes"), num(&plain, "gc_victims")),
        (1.0, 1.0)
    );
}

#[test]
fn wa_rejects_bad_arguments() {
    let out = zftl(&["bench", "wa", "--zones", "100", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("256"), "{err}");
    let out = zftl(&["bench", "wa", "--workload", "nope"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn wa_text_output() {
    let mut args = vec!["bench", "wa", "--overwrites", "0.5"];
    args.extend_from_slice(TINY);
    let out = zftl(&args);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("WA:"), "{text}");
}

#[test]
fn throughput_reports_rates_and_ratios() {
    let mut args = vec![
        "bench",
        "throughput",
        "--json",
        "--ops",
        "2000",
        "--warmup",
        "0.5",
        "--rounds",
        "4",
    ];
    args.extend_from_slice(TINY);
    let v = json(&args);
    for key in [
        "raw_write_blocks_per_s",
        "raw_read_blocks_per_s",
        "ftl_host_writes_per_s",
        "ftl_host_reads_per_s",
        "raw_first_pass_blocks_per_s",
        "write_efficiency",
        "write_efficiency_min",
        "host_write_ratio",
        "read_ratio",
        "read_ratio_min",
    ] {
        assert!(num(&v, key) > 0.0, "{key} not positive: {v}");
    }
    assert!(num(&v, "write_efficiency_min") <= num(&v, "write_efficiency"));
    assert!(num(&v, "read_ratio_min") <= num(&v, "read_ratio"));
    // Each round's raw window writes at least its share, by whole commands.
    assert!(num(&v, "raw_write_blocks") >= 2000.0, "{v}");
    assert!(num(&v, "ftl_write_blocks") >= 2000.0);
    assert!(num(&v, "ftl_write_window_wa") >= 1.0, "{v}");
    let rounds = v["per_round"].as_array().expect("per_round");
    assert_eq!(rounds.len(), 4);
    for r in rounds {
        let wa = num(r, "ftl_write_wa");
        let host = num(r, "ftl_host_writes_per_s");
        let raw = num(r, "raw_write_blocks_per_s");
        let eff = num(r, "write_efficiency");
        assert!(
            (eff - host * wa / raw).abs() <= 1e-3 * eff.max(1.0),
            "write_efficiency is host × WA ÷ raw: {r}"
        );
        // The raw side sent the FTL's command shape: as many blocks in
        // flight, and commands no larger (a command that does not fit a
        // zone's rest is cut; these zones hold 16 blocks).
        let (f, w) = (&r["ftl_write_shape"], &r["raw_write_shape"]);
        let (fi, wi) = (
            num(f, "write_blocks_in_flight"),
            num(w, "write_blocks_in_flight"),
        );
        assert!(
            (fi - wi).abs() <= 0.25 * fi,
            "blocks in flight {fi} vs {wi}"
        );
        assert!(num(w, "blocks_per_write") <= num(f, "blocks_per_write") + 0.01);
        assert!(num(w, "blocks_per_write") >= 0.6 * num(f, "blocks_per_write"));
        let (fr, wr) = (&r["ftl_read_shape"], &r["raw_read_shape"]);
        assert!(
            (num(fr, "reads_in_flight") - num(wr, "reads_in_flight")).abs()
                <= 0.5 + 0.1 * num(fr, "reads_in_flight"),
            "reads in flight: {r}"
        );
    }
}

#[test]
fn recovery_mounts_full_volumes_after_a_cut_during_gc() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let v = json(&[
        "bench",
        "recovery",
        "--json",
        "--sizes-mib",
        "64,128",
        "--checkpoint-interval-blocks",
        "8192",
        "--image-dir",
        dir_arg,
        "--rounds",
        "2",
    ]);
    let runs = v["runs"].as_array().expect("runs array");
    assert_eq!(runs.len(), 4, "two sizes, two tag modes");
    for r in runs {
        // The cut lands during GC: it is armed while GC copies, and GC
        // sends reads (the load only writes) or copies before it comes.
        assert!(
            num(r, "gc_reads_at_cut") + num(r, "gc_copy_blocks_at_cut") > 0.0,
            "{r}"
        );
        // Every round is reported; the headline is the fastest.
        let rounds = r["rounds"].as_array().expect("rounds array");
        assert_eq!(rounds.len(), 2, "{r}");
        let fastest = rounds
            .iter()
            .map(|x| num(x, "mount_ms"))
            .fold(f64::INFINITY, f64::min);
        assert!(fastest > 0.0 && fastest == num(r, "mount_ms"), "{r}");
        let logical = num(r, "logical_blocks");
        assert_eq!(num(r, "mapped_blocks"), logical, "fully mapped: {r}");
        assert_eq!(logical * 4096.0, num(r, "volume_bytes"));
        assert!(num(r, "device_bytes") > num(r, "volume_bytes"));
        assert!(num(r, "gc_copy_blocks_before_cut") > 0.0, "GC ran: {r}");
        assert!(num(r, "commands_in_flight_at_cut") > 0.0, "{r}");
        // The cut comes with the next checkpoint about due.
        let (since, between) = (
            num(r, "data_blocks_since_checkpoint"),
            num(r, "data_blocks_between_checkpoints"),
        );
        assert!(between > 0.0 && between <= 8192.0 + 4096.0, "{r}");
        assert!(since >= 0.5 * between, "{r}");
        let s = &r["mount_steps"];
        let parts = [
            "superblock_ms",
            "checkpoint_and_log_ms",
            "tag_scan_ms",
            "rebuild_ms",
            "finish_and_checkpoint_ms",
        ]
        .map(|k| num(s, k));
        assert!(
            parts.iter().sum::<f64>() <= num(r, "mount_ms") + 0.01,
            "{r}"
        );
        assert!(num(s, "blocks_read_meta") > 0.0 && num(s, "blocks_written") > 0.0);
        assert!(
            rounds.iter().all(|x| num(x, "first_fua_write_ms") > 0.0),
            "{r}"
        );
        if r["tags"] == "oob" {
            // The tag scan reads the data written since the checkpoint.
            assert!(num(s, "blocks_read_data") >= 0.5 * since, "{r}");
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "images deleted"
    );
    let out = zftl(&["bench", "recovery", "--sizes-mib", "0", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let out = zftl(&["bench", "recovery", "--rounds", "0", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rounds"));
}

/// A small device of the default's parallelism and timing, short windows.
fn media(extra: &[&str]) -> Value {
    let mut args = vec![
        "bench",
        "media",
        "--json",
        "--blocks-per-lun",
        "8",
        "--window-ms",
        "40",
        "--probes",
        "50",
        "--warmup",
        "0.2",
        "--depths",
        "1,16",
        "--gc-probe-ms",
        "2000",
    ];
    args.extend_from_slice(extra);
    json(&args)
}

#[test]
fn media_reports_utilization_limits_and_latency_in_virtual_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svg = dir.path().join("media.svg");
    let svg_arg = svg.to_str().expect("utf-8 path");
    let v = media(&["--svg", svg_arg]);
    assert_eq!(num(&v, "luns"), 16.0);
    assert_eq!(num(&v, "program_limit_blocks_per_s"), 80_000.0);
    assert_eq!(num(&v, "read_limit_blocks_per_s"), 640_000.0);
    let series = v["series"].as_array().expect("series");
    let names: Vec<&str> = series
        .iter()
        .map(|s| s["workload"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "randwrite_4k",
            "randwrite_4k_fua",
            "seqwrite_128k",
            "randread_4k"
        ]
    );
    for s in series {
        let windows = s["windows"].as_array().expect("windows");
        assert_eq!(windows.len(), 2);
        for w in windows {
            let u = num(w, "utilization");
            assert!((0.0..=1.0).contains(&u), "utilization {u}: {w}");
            for l in w["lun_utilization"].as_array().expect("per LUN") {
                let l = l.as_f64().expect("number");
                assert!((0.0..=1.0 + 1e-9).contains(&l), "{w}");
            }
            assert!(num(w, "elapsed_ms") >= 40.0, "{w}");
        }
    }
    // Reads: one at a time keeps one LUN of 16 busy, 25 µs each.
    let reads = &series[3]["windows"][0];
    assert_eq!(num(reads, "depth"), 1.0);
    assert!(
        (num(reads, "utilization") - 1.0 / 16.0).abs() < 0.01,
        "{reads}"
    );
    assert!((num(reads, "host_vs_limit") - num(reads, "utilization")).abs() < 0.01);
    let l = &v["latency"];
    for k in ["read_idle", "write_idle", "read_gc", "write_gc"] {
        let p = &l[k];
        assert!(num(p, "samples") > 0.0, "{k}");
        assert!(num(p, "p50_us") <= num(p, "p99_us") && num(p, "p99_us") <= num(p, "p999_us"));
    }
    // Idle: a read is one page read, a FUA write one program.
    assert_eq!(num(&l["read_idle"], "p50_us"), 25.0);
    assert_eq!(num(&l["write_idle"], "p50_us"), 200.0);
    assert_eq!(num(l, "gc_copy_blocks_during_idle_probes"), 0.0);
    assert!(num(l, "gc_copy_blocks_during_probes") > 0.0, "GC ran: {l}");
    let plot = std::fs::read_to_string(&svg).expect("svg written");
    assert!(plot.contains("<svg") && plot.contains("randread_4k") && plot.contains("during GC"));
    // Virtual time: the same run gives the same figures.
    let again = media(&[]);
    assert_eq!(v["series"], again["series"]);
    assert_eq!(v["latency"], again["latency"]);
}

#[test]
fn media_with_reads_passing_programs_cuts_the_read_tail_during_gc() {
    // The sequential fill writes every address once, whatever order the
    // LUNs answer in, so it leaves no stale block and GC copies nothing.
    let filled_once = |v: &Value| {
        assert_eq!(num(v, "fill_blocks"), num(v, "logical_blocks"), "{v}");
        assert_eq!(num(v, "fill_gc_copy_blocks"), 0.0, "{v}");
    };
    let fifo = media(&[]);
    assert_eq!(fifo["timing"]["scheduling"], "fifo");
    filled_once(&fifo);
    let p999 = |v: &Value, k: &str| num(&v["latency"][k], "p999_us");
    for mode in ["read-priority", "suspend"] {
        let v = media(&["--nand-scheduling", mode]);
        assert_eq!(v["timing"]["scheduling"], mode);
        filled_once(&v);
        let l = &v["latency"];
        assert_eq!(num(&l["read_idle"], "p50_us"), 25.0);
        assert!(num(l, "gc_copy_blocks_during_probes") > 0.0, "GC ran: {l}");
        assert!(
            p999(&v, "read_gc") < p999(&fifo, "read_gc"),
            "{mode}: read p99.9 during GC {} against {} in order",
            p999(&v, "read_gc"),
            p999(&fifo, "read_gc")
        );
        if mode == "suspend" {
            // A read never waits for a whole program when it can suspend it.
            assert!(p999(&v, "read_idle") < 200.0, "{l}");
        }
    }
    let out = zftl(&["bench", "media", "--nand-scheduling", "lifo"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "an unknown mode is a usage error"
    );
}

#[test]
fn range_reports_moves_clones_journaling_and_memory() {
    let v = json(&[
        "bench",
        "range",
        "--json",
        "--moves",
        "2000",
        "--depths",
        "1,8",
        "--max-clone-mib",
        "2",
        "--transactions",
        "4",
        "--rounds",
        "2",
    ]);
    let moves = v["moves"].as_array().expect("moves");
    assert_eq!(moves.len(), 2);
    for m in moves {
        let rates = m["moves_per_s"]["rounds"].as_array().expect("rounds");
        assert_eq!(rates.len(), 2, "every round is printed: {m}");
        assert!(num(&m["moves_per_s"], "min") > 0.0, "{m}");
        assert!(num(&m["moves_per_s"], "min") <= num(&m["moves_per_s"], "median"));
        assert_eq!(num(m, "notes_per_vector"), 1.0, "one Move note each: {m}");
        assert!(num(m, "commits_per_vector") <= 1.0, "{m}");
    }
    // 4 KiB, 64 KiB, 1 MiB, then the largest size itself.
    let sizes: Vec<f64> = v["clone_vs_copy"]
        .as_array()
        .expect("clone_vs_copy")
        .iter()
        .map(|c| num(c, "bytes"))
        .collect();
    assert_eq!(sizes, [4096.0, 65536.0, 1048576.0, 2097152.0]);
    for c in v["clone_vs_copy"].as_array().unwrap() {
        assert!(
            num(c, "clone_meta_blocks") >= 1.0,
            "a clone is durable: {c}"
        );
    }
    let clocks: Vec<&str> = v["journaling"]
        .as_array()
        .expect("journaling")
        .iter()
        .map(|j| j["clock"].as_str().expect("clock"))
        .collect();
    assert_eq!(clocks.iter().filter(|&&c| c == "wall").count(), 5);
    assert_eq!(clocks.iter().filter(|&&c| c == "virtual").count(), 5);
    for j in v["journaling"].as_array().unwrap() {
        // Single-write journaling writes each data block once, double-write
        // twice, plus a commit block.
        assert!(
            num(j, "single_write_media_blocks_per_tx") < num(j, "double_write_media_blocks_per_tx"),
            "{j}"
        );
        assert!(num(&j["speedup"], "min") > 0.0, "{j}");
    }
    assert!(num(&v, "map_bytes_per_mapped_block_unshared") > 0.0);
    let shared = num(&v, "bytes_per_shared_block");
    assert!(
        shared > 0.0 && shared <= 16.0,
        "bytes per shared block {shared}"
    );
}

#[test]
fn range_rejects_bad_arguments() {
    let out = zftl(&["bench", "range", "--rounds", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rounds"));
}

#[test]
fn snapshot_reports_latency_blocks_mount_memory_and_wa() {
    let v = json(&[
        "bench",
        "snapshot",
        "--json",
        "--device-mib",
        "256",
        "--small-mib",
        "1",
        "--large-mib",
        "8",
        "--rounds",
        "2",
        "--many",
        "8",
        "--wa-zone-blocks",
        "16",
        "--wa-overwrites",
        "1",
        "--wa-interval",
        "0.02",
        "--parts",
        "latency,many,wa",
    ]);
    let modes = v["modes"].as_array().expect("modes");
    let names: Vec<&str> = modes
        .iter()
        .map(|m| m["tag_mode"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["oob", "in-band"], "--tags both is the default");
    let check_op = |op: &Value, what: &str| {
        let rounds = op["us"]["rounds"].as_array().expect("rounds");
        assert_eq!(rounds.len(), 2, "every round is printed: {what} {op}");
        assert!(num(&op["us"], "min") > 0.0, "{what} {op}");
        assert!(num(&op["us"], "min") <= num(&op["us"], "median"), "{what}");
        let meta = op["meta_blocks"].as_array().expect("meta_blocks");
        assert_eq!(meta.len(), 2, "{what}");
        // Durable: every create and delete logs at least its note.
        assert!(meta.iter().all(|b| b.as_u64().unwrap() >= 1), "{what} {op}");
        assert_eq!(op["pad_blocks"].as_array().unwrap().len(), 2);
        assert_eq!(op["other_blocks"].as_array().unwrap().len(), 2);
    };
    for m in modes {
        let mode = m["tag_mode"].as_str().unwrap();
        let lat = &m["latency"];
        assert_eq!(num(&lat["small"], "written_bytes"), 1048576.0);
        assert_eq!(num(&lat["large"], "written_bytes"), 8388608.0);
        for size in ["small", "large"] {
            for live in ["none_live", "one_live"] {
                let cd = &lat[size][live];
                check_op(&cd["create"], &format!("{mode} {size} {live} create"));
                check_op(&cd["delete"], &format!("{mode} {size} {live} delete"));
            }
            // With a snapshot already live a create is its one note.
            let one = lat[size]["one_live"]["create"]["meta_blocks"]
                .as_array()
                .unwrap();
            assert!(one.iter().all(|b| b.as_u64() == Some(1)), "{mode} {one:?}");
        }
        for live in ["none_live_ratio", "one_live_ratio"] {
            for op in ["create", "delete"] {
                let r = &lat[live][op];
                assert_eq!(r["rounds"].as_array().unwrap().len(), 2, "{r}");
                assert!(num(r, "min") > 0.0, "{lat}");
            }
        }
        let many = &m["many"];
        assert_eq!(num(many, "asked"), 8.0);
        assert_eq!(num(many, "built"), 7.0, "room for 8 snapshots: {many}");
        assert!(many["refused"].is_null(), "{many}");
        assert_eq!(num(&many["one"], "live_before"), 1.0);
        assert_eq!(num(&many["many"], "live_before"), 7.0);
        // Each snapshot keeps the blocks overwritten after it.
        assert!(num(&many["many"], "kept_versions") >= 7.0 * 4.0, "{many}");
        for w in [&many["one"], &many["many"]] {
            check_op(&w["create"], mode);
            check_op(&w["delete"], mode);
            assert_eq!(w["mount_ms"]["rounds"].as_array().unwrap().len(), 2);
            assert!(num(&w["mount_ms"], "min") > 0.0);
        }
        // The volumes' rounds ran in turn: a ratio per round.
        let ratios = &many["ratios"];
        for r in [
            "create",
            "delete",
            "mount",
            "mount_cpu",
            "mount_same_kept",
            "mount_same_kept_cpu",
        ] {
            assert_eq!(ratios[r]["rounds"].as_array().unwrap().len(), 2, "{r}");
            assert!(num(&ratios[r], "min") > 0.0, "{r}: {ratios}");
        }
        // One snapshot keeping what the many keep, on a volume of its own.
        let same = &many["one_same_kept"];
        assert_eq!(num(same, "live_before"), 1.0, "{same}");
        assert_eq!(
            num(same, "kept_versions"),
            num(&many["many"], "kept_versions"),
            "{many}"
        );
        assert_eq!(same["mount_ms"]["rounds"].as_array().unwrap().len(), 2);
        assert!(many["mount_us_per_kept_version"].is_number(), "{many}");
        for w in [&many["one"], &many["many"], same] {
            assert_eq!(w["mount_cpu_ms"]["rounds"].as_array().unwrap().len(), 2);
            assert!(num(&w["mount_cpu_ms"], "min") > 0.0, "{w}");
        }
        let per = num(many, "memory_bytes_per_kept_block");
        assert!(per > 0.0 && per < 4096.0, "{mode}: {per} B per kept block");
        // After a clean mount the versions are still the loaded array,
        // smaller than the ordered maps changes build.
        let mounted = num(many, "memory_bytes_per_kept_block_mounted");
        assert!(
            mounted > 0.0 && mounted < per,
            "{mode}: {mounted} B after a mount, {per} B"
        );
        assert!(num(many, "room_versions") > 0.0);
        let wa = &m["wa"];
        assert!(num(wa, "used_blocks") < num(wa, "logical_blocks"));
        let cases = wa["cases"].as_array().expect("cases");
        let lives: Vec<f64> = cases.iter().map(|c| num(c, "live")).collect();
        assert_eq!(lives, [0.0, 1.0, 4.0]);
        for c in cases {
            assert_eq!(num(c, "host_writes"), num(wa, "used_blocks"), "{c}");
            assert!(num(c, "wa") >= 1.0, "{mode}: {c}");
            assert!(num(c, "meta_blocks_per_host_write") > 0.0, "{c}");
            assert!(c["stopped"].is_null(), "{mode}: {c}");
        }
        assert_eq!(num(&cases[0], "creates"), 0.0);
        assert!(num(&cases[0], "interval_flushes") > 0.0);
        assert!(num(&cases[2], "creates") > 0.0);
        assert!(num(&cases[2], "max_kept_versions") > 0.0, "{}", cases[2]);
    }
}

#[test]
fn snapshot_reports_revert_diff_views_and_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let image_dir = dir.path().to_str().expect("utf-8 path");
    let v = json(&[
        "bench",
        "snapshot",
        "--json",
        "--rounds",
        "2",
        "--parts",
        "revert,diff,views,window",
        "--revert-device-mib",
        "256",
        "--revert-base-mib",
        "16",
        "--revert-written-mib",
        "8",
        "--diff-volume-mib",
        "64",
        "--image-dir",
        image_dir,
        "--view-mib",
        "16,32",
        "--view-reads",
        "64",
        "--window-secs",
        "60",
        "--window-device-mib",
        "256",
        "--window-write-mib",
        "64",
        "--window-rounds",
        "2",
        "--window-wa-rate",
        "1000",
        "--wa-zone-blocks",
        "16",
        "--wa-overwrites",
        "1",
    ]);
    for m in v["modes"].as_array().expect("modes") {
        let mode = m["tag_mode"].as_str().unwrap();
        for skipped in ["latency", "many", "wa"] {
            assert!(m[skipped].is_null(), "{mode}: {skipped} was not asked for");
        }
        let r = &m["revert"];
        let changed = num(r, "changed_blocks");
        // 2048 random writes over 4096 blocks change about 1 - e^-1/2 of
        // them (1612).
        assert!(changed > 1400.0 && changed < 1800.0, "{mode}: {r}");
        for what in ["revert", "undo"] {
            let c = &r[what];
            assert_eq!(c["ms"]["rounds"].as_array().unwrap().len(), 2, "{c}");
            for (key, want) in [
                ("revert_blocks", Some(changed)),
                ("host_write_blocks", Some(0.0)),
                ("data_blocks", Some(0.0)),
                ("meta_blocks", None),
            ] {
                let per_round = c[key].as_array().expect(key);
                assert_eq!(per_round.len(), 2);
                for n in per_round {
                    let n = n.as_f64().unwrap();
                    match want {
                        Some(want) => assert_eq!(n, want, "{mode} {what} {key}: {c}"),
                        // Durable: the revert's vector is logged.
                        None => assert!(n >= 1.0, "{mode} {what} {key}: {c}"),
                    }
                }
            }
        }
        assert_eq!(
            num(r, "host_write_blocks_before"),
            num(r, "host_write_blocks_after")
        );
        let d = &m["diff"];
        // 1 % of a 64 MiB volume's 16384 blocks.
        assert_eq!(num(d, "changed_blocks"), 164.0, "{mode}: {d}");
        let runs = num(d, "runs");
        assert!((1.0..=164.0).contains(&runs), "{mode}: {d}");
        assert_eq!(num(d, "kept_versions"), 164.0, "{mode}: {d}");
        for key in ["between_ms", "since_ms"] {
            assert_eq!(d[key]["rounds"].as_array().unwrap().len(), 2, "{d}");
            assert!(num(&d[key], "min") > 0.0, "{d}");
        }
        let views = m["views"].as_array().expect("views");
        let sizes: Vec<f64> = views.iter().map(|c| num(c, "data_bytes")).collect();
        assert_eq!(sizes, [16.0 * 1048576.0, 32.0 * 1048576.0]);
        for c in views {
            assert_eq!(num(c, "reads_per_round"), 64.0);
            for key in ["create_ms", "first_read_us", "view_read_us", "live_read_us"] {
                assert_eq!(c[key]["rounds"].as_array().unwrap().len(), 2, "{c}");
                assert!(num(&c[key], "min") > 0.0, "{mode} {key}: {c}");
            }
            assert!(num(c, "first_read_ms_per_gib") > 0.0, "{c}");
        }
        let w = &m["window"];
        assert!(w["off"]["window_secs"].is_null(), "{w}");
        assert_eq!(num(&w["on"], "window_secs"), 60.0, "{w}");
        for (side, taken) in [("off", false), ("on", true)] {
            let run = &w[side];
            assert!(num(&run["host_writes_per_virtual_s"], "min") > 0.0, "{run}");
            let points = run["points"].as_array().expect("points");
            assert_eq!(points.len(), 2);
            for p in points {
                // 16384 writes take more than a second of virtual time:
                // the window (a point a second at most) takes some.
                assert_eq!(num(p, "taken") > 0.0, taken, "{mode} {side}: {p}");
            }
        }
        assert_eq!(
            w["on_over_off_virtual"]["rounds"].as_array().unwrap().len(),
            2
        );
        let wa = &m["window_wa"];
        assert_eq!(num(&wa["off"]["window"]["points"], "taken"), 0.0, "{wa}");
        assert!(
            num(&wa["on"]["window"]["points"], "taken") > 0.0,
            "{mode}: {wa}"
        );
        assert_eq!(num(&wa["on"]["window"], "clock_ns_per_host_write"), 1e6);
        for side in ["off", "on"] {
            // The write buffer (4096 blocks) holds much of this small
            // volume's hot part, so WA may be below 1; it is not 0.
            assert!(num(&wa[side], "wa") > 0.0, "{wa}");
            assert!(wa[side]["stopped"].is_null(), "{wa}");
        }
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "the image is deleted"
    );
}

#[test]
fn snapshot_reports_forks() {
    let v = json(&[
        "bench",
        "snapshot",
        "--json",
        "--rounds",
        "2",
        "--parts",
        "forks",
        "--fork-mib",
        "256,512",
        "--fork-reads",
        "256",
        "--fork-write-blocks",
        "128",
        "--fork-writes",
        "256",
        "--fork-queue-depth",
        "8",
    ]);
    let modes = v["modes"].as_array().expect("modes");
    assert_eq!(modes.len(), 2, "both tag modes by default");
    for m in modes {
        let mode = m["tag_mode"].as_str().unwrap();
        for skipped in ["latency", "many", "wa", "revert", "diff", "views", "window"] {
            assert!(m[skipped].is_null(), "{mode}: {skipped} was not asked for");
        }
        let cases = m["forks"].as_array().expect("forks");
        let sizes: Vec<f64> = cases.iter().map(|c| num(c, "data_bytes")).collect();
        assert_eq!(sizes, [256.0 * 1048576.0, 512.0 * 1048576.0]);
        for (i, c) in cases.iter().enumerate() {
            assert!(num(c, "device_bytes") > num(c, "data_bytes"), "{c}");
            for key in ["create", "delete"] {
                let op = &c[key];
                assert_eq!(op["us"]["rounds"].as_array().unwrap().len(), 2, "{op}");
                assert!(num(&op["us"], "min") > 0.0, "{mode} {key}: {op}");
                // One vector of notes, durable: one metadata block, no
                // data, however much the volume holds.
                for n in op["meta_blocks"].as_array().unwrap() {
                    assert!(n.as_f64().unwrap() >= 1.0, "{mode} {key}: {op}");
                }
                for n in op["other_blocks"].as_array().unwrap() {
                    assert_eq!(n.as_f64().unwrap(), 0.0, "{mode} {key}: {op}");
                }
            }
            let ratios = c["create_ratio"]["rounds"].as_array().unwrap();
            assert_eq!(ratios.len(), 2);
            if i == 0 {
                assert!(ratios.iter().all(|r| r.as_f64() == Some(1.0)), "{c}");
            }
            assert_eq!(c["first_read_us"]["rounds"].as_array().unwrap().len(), 2);
            assert!(num(&c["first_read_us"], "min") > 0.0, "{c}");
            assert_eq!(c["first_read_media_blocks"].as_array().unwrap().len(), 2);
            assert!(num(c, "first_read_ms_per_gib") > 0.0, "{c}");
            assert_eq!(num(c, "target_ms_per_gib"), 50.0);
            assert_eq!(num(c, "write_blocks"), 128.0);
            for (key, per_round) in [("reads", 256.0), ("first_writes", 64.0), ("writes", 256.0)] {
                let vs = &c[key];
                assert_eq!(num(vs, "requests_per_round"), per_round, "{key}: {vs}");
                assert_eq!(num(vs, "depth"), 8.0);
                for side in ["fork", "live"] {
                    for rate in ["per_s", "per_cpu_s"] {
                        let r = &vs[side][rate];
                        assert_eq!(r["rounds"].as_array().unwrap().len(), 2, "{r}");
                        assert!(num(r, "min") > 0.0, "{mode} {key} {side} {rate}: {r}");
                    }
                }
                for ratio in ["ratio", "cpu_ratio"] {
                    let r = &vs[ratio];
                    assert_eq!(r["rounds"].as_array().unwrap().len(), 2, "{r}");
                    assert!(num(r, "min") > 0.0, "{mode} {key} {ratio}: {r}");
                }
            }
        }
    }
}

#[test]
fn snapshot_rejects_bad_arguments() {
    for args in [
        ["--rounds", "0"],
        ["--device-mib", "100"],
        ["--many", "1"],
        ["--wa-used", "1.5"],
        ["--diff-changed", "0"],
        ["--revert-device-mib", "100"],
        ["--view-mib", "0"],
        ["--window-wa-rate", "0"],
        ["--fork-mib", "0"],
        ["--fork-queue-depth", "0"],
    ] {
        let mut all = vec!["bench", "snapshot"];
        all.extend_from_slice(&args);
        let out = zftl(&all);
        assert!(!out.status.success(), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(args[0]),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn nameless_reports_map_memory_and_the_store_on_both_segments() {
    let v = json(&[
        "bench",
        "nameless",
        "--json",
        // Past the FTL's default bound on nameless blocks written since
        // the last commit (65 536 of 4 KiB): the nameless side commits.
        "--stored-mib",
        "320",
        "--keys",
        "300",
        "--sync-every",
        "16",
        "--rounds",
        "2",
        "--working-sets",
        "20,80",
        "--rw-blocks-per-lun",
        "8",
        // Wear leveling: a low endurance, so the nameless policy's trigger
        // (75 % of it) is reached on this small volume.
        "--wear-blocks-per-lun",
        "8",
        "--wear-hot-percents",
        "25",
        "--wear-passes",
        "16",
        "--wear-endurance",
        "6",
    ]);
    let m = &v["memory"];
    assert_eq!(num(m, "stored_bytes"), 320.0 * 1048576.0);
    assert!(num(m, "p2l_bytes") > 0.0, "{m}");
    // The logical side's L2P grows with the data; the nameless side's map
    // memory does not (its blocks need only their validity bits).
    assert!(
        num(m, "page_level_map_bytes") > num(m, "page_level_fresh_map_bytes"),
        "{m}"
    );
    assert_eq!(
        num(m, "nameless_map_bytes"),
        num(m, "nameless_fresh_map_bytes"),
        "{m}"
    );
    assert!(num(m, "nameless_generation_bytes") > 0.0, "{m}");
    let r = num(m, "nameless_over_page_level");
    assert!(
        r > 0.0 && r < num(m, "nameless_over_page_level_totals"),
        "{m}"
    );
    let s = &v["store"];
    assert_eq!(num(s, "puts_per_round"), 600.0);
    for rate in [
        "nameless_puts_per_cpu_s",
        "logical_puts_per_cpu_s",
        "puts_ratio_cpu",
        "nameless_gets_per_cpu_s",
        "logical_gets_per_cpu_s",
        "gets_ratio_cpu",
        "nameless_puts_per_s",
        "logical_puts_per_s",
        "puts_ratio",
        "nameless_gets_per_s",
        "logical_gets_per_s",
        "gets_ratio",
    ] {
        let rounds = s[rate]["rounds"].as_array().expect("rounds");
        assert_eq!(rounds.len(), 2, "every round is printed: {rate}");
        assert!(num(&s[rate], "min") > 0.0, "{rate}: {s}");
        assert!(num(&s[rate], "min") <= num(&s[rate], "median"), "{rate}");
    }
    // A value and a bucket per put on both sides, and a little more.
    for side in ["nameless", "logical"] {
        let blocks = num(s, &format!("{side}_media_blocks_per_put"));
        assert!(
            (2.0..3.0).contains(&blocks),
            "{side}: {blocks} media blocks per put"
        );
    }
    assert!(
        num(s, "nameless_map_bytes") <= num(s, "logical_map_bytes"),
        "{s}"
    );
    // Random writes: both sides measured at each working set, the
    // nameless side following GC's moves where the volume is full enough
    // for GC to run.
    let w = &v["random_writes"];
    let rows = w["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{w}");
    for r in rows {
        for side in ["page_mapped", "nameless"] {
            assert!(num(&r[side], "writes_per_s") > 0.0, "{r}");
            assert!(num(&r[side], "write_amplification") > 0.0, "{r}");
        }
        let ratio = num(r, "throughput_ratio");
        let expected = num(&r["nameless"], "writes_per_s") / num(&r["page_mapped"], "writes_per_s");
        assert!((ratio - expected).abs() < 1e-3, "{r}");
    }
    assert_eq!(num(&rows[0], "working_set_percent"), 20.0);
    assert!(num(&rows[1], "nameless_moves_followed") > 0.0, "{w}");
    assert!(
        num(&rows[1]["nameless"], "gc_copies_per_write") > 0.0,
        "{w}"
    );
    // Wear leveling: the nameless side moved cold data for wear, its
    // migrations cost notes and held remap entries, and leveling narrowed
    // its erase counts against the same run without it.
    let w = &v["wear_leveling"];
    assert_eq!(num(w, "page_static_wl_threshold"), 4.0, "{w}");
    let rows = w["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{w}");
    let r = &rows[0];
    assert_eq!(num(r, "writes"), 16.0 * num(r, "hot_blocks"), "{r}");
    assert!(num(r, "hot_blocks") < num(r, "filled_blocks"), "{r}");
    let (n, off) = (&r["nameless"], &r["nameless_unleveled"]);
    assert!(num(n, "wear_move_blocks") > 0.0, "{r}");
    assert_eq!(num(off, "wear_move_blocks"), 0.0, "{r}");
    assert!(num(n, "migration_note_bytes") > 0.0, "{r}");
    assert!(num(n, "remap_peak_entries") > 0.0, "{r}");
    assert_eq!(
        num(n, "remap_peak_bytes"),
        32.0 * num(n, "remap_peak_entries"),
        "{r}"
    );
    let spread = |s: &Value| num(s, "erase_count_max") - num(s, "erase_count_min");
    assert!(spread(n) < spread(off), "{r}");
    for side in ["page_mapped", "page_mapped_unleveled"] {
        assert!(num(&r[side], "writes_per_s") > 0.0, "{r}");
        assert_eq!(num(&r[side], "migrated_blocks"), 0.0, "{r}");
        assert_eq!(num(&r[side], "remap_peak_entries"), 0.0, "{r}");
    }
    let expected = num(n, "writes_per_s") / num(&r["page_mapped"], "writes_per_s");
    assert!((num(r, "throughput_ratio") - expected).abs() < 1e-3, "{r}");
    let out = zftl(&["bench", "nameless", "--wear-hot-percents", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--wear-hot-percents"));
    let out = zftl(&["bench", "nameless", "--working-sets", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--working-sets"));
    let out = zftl(&["bench", "nameless", "--rounds", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rounds"));
}
