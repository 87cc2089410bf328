//! Seeded crash torture: many runs, each with power cuts at random device
//! commands (during host I/O, GC, checkpoints and recovery itself), with and
//! without OOB, timing on and off. A failing seed is printed; replay it with
//! `ZFTL_SEED=<seed> cargo test --release --test crash_torture`.
//! `ZFTL_SEEDS=<n>` changes how many seeds run (default 1000).

mod common;

use common::{Op, Rig};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn run_seed(seed: u64) -> common::Coverage {
    let oob = seed.is_multiple_of(2);
    let timing = seed.is_multiple_of(5);
    let mut rig = Rig::new(seed, oob, timing);
    let rounds = 3;
    for _ in 0..rounds {
        let after = 1 + rig.rng().next_u64() % 1500;
        rig.apply(Op::Cut {
            after_commands: after,
        });
        for _ in 0..400 {
            let op = rig.random_op();
            rig.apply(op);
        }
    }
    rig.finish();
    rig.coverage
}

#[test]
fn crash_torture() {
    let seeds: Vec<u64> = match std::env::var("ZFTL_SEED") {
        Ok(s) => vec![s.parse().expect("ZFTL_SEED must be a number")],
        Err(_) => {
            let n = std::env::var("ZFTL_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(1000);
            (0..n).collect()
        }
    };
    let mut total = common::Coverage::default();
    for &seed in &seeds {
        let cov = catch_unwind(AssertUnwindSafe(|| run_seed(seed))).unwrap_or_else(|e| {
            eprintln!("\ncrash torture FAILED at seed {seed}; replay: ZFTL_SEED={seed} cargo test --release --test crash_torture");
            std::panic::resume_unwind(e)
        });
        total.cuts += cov.cuts;
        total.during_gc += cov.during_gc;
        total.during_checkpoint += cov.during_checkpoint;
        total.during_recovery += cov.during_recovery;
        total.gc_copies += cov.gc_copies;
    }
    eprintln!("crash torture: {} seeds, {total:?}", seeds.len());
    if seeds.len() >= 100 {
        assert!(
            total.cuts >= seeds.len() as u64,
            "too few power cuts: {total:?}"
        );
        assert!(
            total.during_gc > 0 && total.during_checkpoint > 0 && total.during_recovery > 0,
            "cuts missed GC, checkpoint or recovery: {total:?}"
        );
    }
}
