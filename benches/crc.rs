//! Every data CRC implementation zftl carries (`zftl_core::tag::DataCrcImpl`:
//! the `crc-fast` crate, the `crc32c` crate, the `crc` crate's slicing by 16
//! tables, and `zftl-crc`'s 256-bit folding) on 4 KiB blocks, the FTL's
//! block size: one block per call (`data_crc`, a read's check), and the 32
//! blocks of a 128 KiB write in one call (`data_crcs`, a write's
//! admission, where `zftl-crc` folds four blocks at a time). Implementations
//! that run no code of their own on this CPU (`DataCrcImpl::runs_here`:
//! `fold256` without AVX2 and VPCLMULQDQ is the `crc32c` crate) are left
//! out, and the bench prints which.
//!
//! Run: `cargo bench --bench crc` (add `-- --quick` for a short run).

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use zftl_core::tag::DataCrcImpl;

const BLOCK: usize = 4096;
const BLOCKS_PER_WRITE: usize = 32;

/// Bytes that are neither zeros nor a short repeating pattern.
fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 + (i >> 9)) as u8).collect()
}

fn implementations() -> Vec<DataCrcImpl> {
    let (here, not): (Vec<_>, Vec<_>) = DataCrcImpl::ALL.into_iter().partition(|i| i.runs_here());
    for imp in not {
        eprintln!(
            "crc bench: {} runs no code of its own on this CPU; left out",
            imp.name()
        );
    }
    here
}

fn one_block(c: &mut Criterion) {
    let block = data(BLOCK);
    let mut group = c.benchmark_group("data_crc_4k");
    group.throughput(Throughput::Bytes(BLOCK as u64));
    group.measurement_time(Duration::from_secs(3));
    for imp in implementations() {
        // Every implementation computes the same CRC-32C.
        assert_eq!(
            imp.checksum(&block),
            crc32c::crc32c(&block),
            "{}",
            imp.name()
        );
        group.bench_function(imp.name(), |b| {
            b.iter(|| imp.checksum(black_box(&block)));
        });
    }
    group.finish();
}

fn write_of_blocks(c: &mut Criterion) {
    let write = data(BLOCK * BLOCKS_PER_WRITE);
    let mut crcs = [0u32; BLOCKS_PER_WRITE];
    let mut group = c.benchmark_group("data_crcs_128k_of_4k_blocks");
    group.throughput(Throughput::Bytes(write.len() as u64));
    group.measurement_time(Duration::from_secs(3));
    for imp in implementations() {
        group.bench_function(imp.name(), |b| {
            b.iter(|| {
                imp.checksum_blocks(black_box(&write), BLOCK, &mut crcs);
                black_box(&crcs);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, one_block, write_of_blocks);
criterion_main!(benches);
