//! Power cuts while zone summaries (tags in band) are written in several
//! appends: 512-byte blocks in 256-block zones make each zone's summary 3
//! blocks, sent as 1-block appends, so cuts land between a summary's parts,
//! inside the data just before it, and in GC reading one back (16 zones:
//! GC runs early). Recovery never reads
//! summaries, and GC believes one only where the map agrees, so every
//! flushed block must survive and nothing else may be read back.
//! A failing seed is printed; replay it with
//! `ZFTL_SEED=<seed> cargo test --release --test summary_cuts`.

mod common;

use common::{Op, Rig};
use std::panic::{catch_unwind, AssertUnwindSafe};
use zftl::sim::SimConfig;

fn config(seed: u64) -> SimConfig {
    SimConfig {
        page_size_bytes: 512,
        pages_per_block: 256,
        blocks_per_lun: 4,
        max_append_blocks: 1,
        max_transfer_blocks: 1,
        ..common::sim_config(seed, false, seed.is_multiple_of(3))
    }
}

fn run_seed(seed: u64) -> common::Coverage {
    let mut rig = Rig::with_config(seed, config(seed));
    for _ in 0..3 {
        let after = 1 + rig.rng().next_u64() % 3000;
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
fn summary_cuts() {
    let seeds: Vec<u64> = match std::env::var("ZFTL_SEED") {
        Ok(s) => vec![s.parse().expect("ZFTL_SEED must be a number")],
        Err(_) => (0..300).collect(),
    };
    let mut total = common::Coverage::default();
    for &seed in &seeds {
        let cov = catch_unwind(AssertUnwindSafe(|| run_seed(seed))).unwrap_or_else(|e| {
            eprintln!("\nsummary cuts FAILED at seed {seed}; replay: ZFTL_SEED={seed} cargo test --release --test summary_cuts");
            std::panic::resume_unwind(e)
        });
        total.cuts += cov.cuts;
        total.during_gc += cov.during_gc;
        total.gc_copies += cov.gc_copies;
    }
    eprintln!("summary cuts: {} seeds, {total:?}", seeds.len());
    if seeds.len() > 1 {
        assert!(total.cuts >= seeds.len() as u64, "too few cuts: {total:?}");
        assert!(
            total.during_gc > 0 && total.gc_copies > 0,
            "GC never ran: {total:?}"
        );
    }
}
