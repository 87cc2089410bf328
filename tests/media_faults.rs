//! Media faults on the simulator: program failures, erase failures,
//! uncorrectable reads and worn-out blocks. The FTL rewrites failed data
//! elsewhere and retires the zone; read errors surface as typed I/O errors,
//! never as data; metadata write failures make the volume read-only until a
//! remount, which recovers it (or, once the superblock zones are gone, for
//! good: then it mounts read-only). Power cuts on such a device lose nothing
//! flushed. Every run checks every block against the model.

mod common;

use common::{sim_config, Rig};
use zftl::sim::Faults;

fn faulty_rig(seed: u64, faults: Faults, endurance_erases: u32) -> Rig {
    let mut cfg = sim_config(seed, seed.is_multiple_of(2), false);
    cfg.faults = Faults {
        seed,
        shuffle_completions: true,
        ..faults
    };
    cfg.endurance_erases = endurance_erases;
    let mut rig = Rig::with_config(seed, cfg);
    rig.media_faults = true;
    rig
}

/// Runs `f` for each seed (`ZFTL_SEED`, `ZFTL_SEEDS` as
/// `common::seeds_to_run`), printing the command that replays a seed that
/// fails; `test` is the calling test's name. Returns whether the seeds were
/// `default`: only then do the totals a test adds up (faults injected,
/// zones retired) have to be nonzero.
fn for_seeds(test: &str, default: std::ops::Range<u64>, mut f: impl FnMut(u64)) -> bool {
    let seeds = common::seeds_to_run(default.clone());
    common::run_listed_seeds(test, &seeds, |seed| {
        f(seed);
        common::Coverage::default()
    });
    seeds == default.collect::<Vec<_>>()
}

fn run(rig: &mut Rig, ops: usize) {
    for _ in 0..ops {
        let op = rig.random_op();
        rig.apply(op);
    }
    rig.finish();
}

#[test]
fn program_failures_rewrite_and_retire() {
    let mut retired = 0;
    let mut write_errors = 0;
    let all = for_seeds("program_failures_rewrite_and_retire", 0..24, |seed| {
        let faults = Faults {
            program_fail_per_million: 400,
            ..Faults::default()
        };
        let mut rig = faulty_rig(seed, faults, 100_000);
        run(&mut rig, 1500);
        let ftl = rig.ftl.as_ref().unwrap();
        retired += u64::from(ftl.stats().retired_zones);
        write_errors += ftl.backend().stats().program_failures;
    });
    if all {
        assert!(write_errors > 0, "no program failure was injected");
        assert!(retired > 0, "no zone was retired after program failures");
    }
}

#[test]
fn erase_failures_retire_zones() {
    for_seeds("erase_failures_retire_zones", 0..12, |seed| {
        let faults = Faults {
            erase_fail_per_million: 20_000,
            ..Faults::default()
        };
        let mut rig = faulty_rig(seed, faults, 100_000);
        run(&mut rig, 1500);
    });
}

#[test]
fn uncorrectable_reads_are_errors_never_data() {
    let mut errors = 0;
    let all = for_seeds("uncorrectable_reads_are_errors_never_data", 0..12, |seed| {
        let faults = Faults {
            uncorrectable_read_per_million: 150_000,
            ..Faults::default()
        };
        let mut rig = faulty_rig(seed, faults, 100_000);
        run(&mut rig, 1500);
        errors += rig.read_errors_seen;
    });
    assert!(
        !all || errors > 0,
        "a 15% uncorrectable-read rate never surfaced past the read retries"
    );
}

#[test]
fn worn_out_device_retires_zones_without_losing_data() {
    for_seeds(
        "worn_out_device_retires_zones_without_losing_data",
        0..6,
        |seed| {
            let mut rig = faulty_rig(seed, Faults::default(), 6);
            run(&mut rig, 3000);
        },
    );
}

/// Power cuts (during host I/O, GC, checkpoints and mounts) on a device
/// that also fails programs and erases: what was flushed survives every
/// cut and every failure, whichever comes first, up to the end of the
/// device's life (then it mounts read-only with every block readable).
#[test]
fn power_cuts_on_a_failing_device_lose_nothing_flushed() {
    let test = "power_cuts_on_a_failing_device_lose_nothing_flushed";
    let (seeds, total) = common::run_seeds(test, 100, |seed| {
        let faults = Faults {
            program_fail_per_million: 2_000,
            erase_fail_per_million: 10_000,
            ..Faults::default()
        };
        faulty_rig(seed, faults, 100_000).cut_rounds(3, 1500)
    });
    if seeds >= 100 {
        assert!(
            total.cuts >= seeds as u64 && total.during_recovery > 0,
            "too few power cuts, or none during a mount: {total:?}"
        );
    }
}
