//! `PageAlignedLarge` as a program registers it: every heap block of
//! 64 KiB to 1 MiB starts on a page, however it was made or grown, and
//! smaller and larger ones work as before.

use zftl_zns::PageAlignedLarge;

#[global_allocator]
static ALLOC: PageAlignedLarge = PageAlignedLarge;

fn aligned(p: *const u8) -> bool {
    (p as usize).is_multiple_of(PageAlignedLarge::PAGE_BYTES)
}

#[test]
fn large_vectors_start_on_a_page() {
    for size in [64 << 10, 128 << 10, 512 << 10, 1 << 20] {
        assert!(aligned(vec![0u8; size].as_ptr()), "vec![0; {size}]");
        assert!(
            aligned(Vec::<u8>::with_capacity(size).as_ptr()),
            "with_capacity({size})"
        );
    }
    let mut grown = Vec::new();
    for i in 0..300_000u32 {
        grown.push(i as u8);
    }
    assert!(aligned(grown.as_ptr()), "a vector grown past 64 KiB");
    assert!(grown.iter().enumerate().all(|(i, &b)| b == i as u8));
    grown.truncate(10);
    grown.shrink_to_fit();
    assert_eq!(grown, (0..10).collect::<Vec<u8>>());
    let large = vec![0u8; 64 << 20];
    assert!(
        large.iter().step_by(4096).all(|&b| b == 0),
        "a large zeroed block"
    );
    let small: Vec<Box<[u8; 100]>> = (0..1000).map(|_| Box::new([7; 100])).collect();
    assert!(small.iter().all(|b| b.iter().all(|&x| x == 7)));
}

/// Resident memory of this process, in bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .expect("resident")
        .parse()
        .expect("a number");
    pages * 4096
}

#[test]
fn a_large_zeroed_block_is_not_touched_whole() {
    // Past MAX_BYTES the system allocator maps it and the kernel zeroes
    // pages as they are used, as a simulated device's memory needs.
    let before = resident_bytes();
    let large = vec![0u8; 256 << 20];
    let grew = resident_bytes().saturating_sub(before);
    assert!(
        grew < 32 << 20,
        "a 256 MiB zeroed block made {grew} bytes resident"
    );
    assert_eq!(large[large.len() - 1], 0);
}
