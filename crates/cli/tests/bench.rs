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
    ];
    args.extend_from_slice(TINY);
    let v = json(&args);
    for key in [
        "raw_write_blocks_per_s",
        "raw_read_blocks_per_s",
        "ftl_host_writes_per_s",
        "ftl_host_reads_per_s",
        "ftl_backend_cmds_per_s",
        "write_efficiency",
        "read_ratio",
    ] {
        assert!(num(&v, key) > 0.0, "{key} not positive: {v}");
    }
    assert_eq!(num(&v, "raw_write_blocks"), 2000.0);
    assert!(num(&v, "ftl_write_blocks") >= 2000.0);
    assert!(num(&v, "ftl_write_window_wa") >= 1.0, "{v}");
}

#[test]
fn recovery_mounts_every_size() {
    let v = json(&[
        "bench",
        "recovery",
        "--json",
        "--sizes-mib",
        "256,512",
        "--data-mib",
        "4",
        "--history-writes",
        "256",
    ]);
    let sizes = v["sizes"].as_array().expect("sizes array");
    assert_eq!(sizes.len(), 2);
    for s in sizes {
        assert!(num(s, "mount_ms") > 0.0);
        assert_eq!(num(s, "mapped_blocks"), 1024.0);
    }
    assert_eq!(num(&sizes[1], "device_bytes"), 512.0 * 1024.0 * 1024.0);
    assert!(num(&v, "mount_ratio_largest_over_smallest") > 0.0);
}
