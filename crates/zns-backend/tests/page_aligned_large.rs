//! `PageAlignedLarge` as a program registers it: every heap block of
//! 64 KiB or more starts on a page, however it was made or grown, and
//! smaller ones work as before.

use zftl_zns::PageAlignedLarge;

#[global_allocator]
static ALLOC: PageAlignedLarge = PageAlignedLarge;

fn aligned(p: *const u8) -> bool {
    (p as usize).is_multiple_of(PageAlignedLarge::PAGE_BYTES)
}

#[test]
fn large_vectors_start_on_a_page() {
    for size in [64 << 10, 128 << 10, 512 << 10, (1 << 20) + 12] {
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
    let small: Vec<Box<[u8; 100]>> = (0..1000).map(|_| Box::new([7; 100])).collect();
    assert!(small.iter().all(|b| b.iter().all(|&x| x == 7)));
}
