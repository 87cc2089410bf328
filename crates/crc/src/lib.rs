//! CRC-32C (Castagnoli, the iSCSI CRC) folded 32 bytes at a time with
//! 256-bit carry-less multiplies (VPCLMULQDQ on AVX2), for CPUs that have
//! them but not AVX-512 (AMD Zen 3, Intel Alder Lake and later cores):
//! there the `crc32c` crate's `crc32` instruction loop and `crc-fast`'s
//! 128-bit folding are the only choices, and both are slower on 4 KiB
//! blocks (a loop over 4 KiB blocks in cache on an AMD EPYC of family 25:
//! `crc32c` 13–18 GB/s, [`crc32c()`] here 15–24 GB/s, [`crc32c_blocks`],
//! which runs the `crc32` instruction beside the folding, 20–31 GB/s, in
//! the same runs).
//!
//! Values are those of `crc32c::crc32c_append`; a CPU without the features,
//! or input too short to fold, is handed to the `crc32c` crate.
//!
//! ```
//! assert_eq!(zftl_crc::crc32c(b"123456789"), 0xE306_9283);
//! ```

#![deny(unsafe_code)]

#[cfg(target_arch = "x86_64")]
mod fold;

/// Shorter input goes to the `crc32c` crate: folding has a fixed cost (the
/// first 128 bytes load eight lanes that are folded together at the end).
pub const FOLD_MIN_BYTES: usize = 256;

/// CRC-32C of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// CRC-32C of the bytes whose CRC was `crc` followed by `data` (as
/// `crc32c::crc32c_append`).
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() >= FOLD_MIN_BYTES {
        if let Some(folder) = fold::Folder::detect() {
            return folder.append(crc, data);
        }
    }
    crc32c::crc32c_append(crc, data)
}

/// The CRC-32C of each `block_bytes`-long block of `data`, in order, into
/// `out` (one per block). Faster than a call per block where the CPU folds
/// and blocks are a multiple of 128 bytes: four blocks go at once, one
/// folded while the `crc32` instruction runs over the other three.
///
/// Panics (a bug) unless `data` holds exactly `out.len()` blocks.
pub fn crc32c_blocks(data: &[u8], block_bytes: usize, out: &mut [u32]) {
    check_blocks(data, block_bytes, out);
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if let Some(folder) = fold::Folder::detect()
        .filter(|_| block_bytes >= FOLD_MIN_BYTES && block_bytes.is_multiple_of(128))
    {
        for (group, crcs) in data
            .chunks_exact(4 * block_bytes)
            .zip(out.chunks_exact_mut(4))
        {
            crcs.copy_from_slice(&folder.four_blocks(group, block_bytes));
            done += 4;
        }
    }
    each_block(
        &data[done * block_bytes..],
        block_bytes,
        &mut out[done..],
        crc32c,
    );
}

/// `crc(block)` for each `block_bytes`-long block of `data`, into `out`:
/// [`crc32c_blocks`] with any checksum function, for callers that choose
/// among several. Panics (a bug) unless `data` holds exactly `out.len()`
/// blocks.
pub fn each_block(data: &[u8], block_bytes: usize, out: &mut [u32], crc: impl Fn(&[u8]) -> u32) {
    check_blocks(data, block_bytes, out);
    for (block, c) in data.chunks_exact(block_bytes).zip(out) {
        *c = crc(block);
    }
}

fn check_blocks(data: &[u8], block_bytes: usize, out: &[u32]) {
    assert!(
        block_bytes > 0 && Some(data.len()) == block_bytes.checked_mul(out.len()),
        "{} bytes are not {} blocks of {block_bytes}",
        data.len(),
        out.len()
    );
}

/// Whether this CPU runs the folding code (else every call is the
/// `crc32c` crate's).
pub fn is_accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    return fold::Folder::detect().is_some();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut s = seed | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                s as u8
            })
            .collect()
    }

    /// Set to run the tests on a CPU that cannot fold: they then check
    /// nothing of the folding code, and say so on stderr.
    const ALLOW_NO_FOLD: &str = "ZFTL_CRC_ALLOW_NO_FOLD";

    /// Whether this CPU runs the folding code, which the tests that call
    /// this compare with the `crc32c` crate. On a CPU without AVX2,
    /// VPCLMULQDQ, PCLMULQDQ and SSE4.2 every call is the `crc32c` crate's,
    /// so those tests would compare the crate with itself and pass: they
    /// fail instead, unless `ZFTL_CRC_ALLOW_NO_FOLD` is set, which skips
    /// them (a line on stderr says which).
    pub(crate) fn cpu_folds() -> bool {
        if is_accelerated() {
            return true;
        }
        let allowed = std::env::var_os(ALLOW_NO_FOLD).is_some();
        assert!(
            allowed,
            "this CPU lacks AVX2 + VPCLMULQDQ (+ PCLMULQDQ, SSE4.2): zftl-crc's folding \
             code cannot run here, and comparing its fallback (the crc32c crate) with the \
             crc32c crate tests nothing; set {ALLOW_NO_FOLD}=1 to skip these tests"
        );
        eprintln!(
            "zftl-crc: SKIPPED: this CPU does not fold ({ALLOW_NO_FOLD} is set); \
             the folding code is not tested"
        );
        false
    }

    #[test]
    fn check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[]), 0);
    }

    /// Every length around the fold's steps (128-byte rounds, the 256-byte
    /// minimum), at every alignment, with and without a running CRC.
    #[test]
    fn matches_crc32c_crate() {
        if !cpu_folds() {
            return;
        }
        let data = bytes(8192 + 64, 7);
        for len in (0..1100).chain([4095, 4096, 4097, 8192]) {
            for start in [0, 1, 5, 8, 31, 32, 63] {
                let b = &data[start..start + len];
                assert_eq!(crc32c(b), crc32c::crc32c(b), "len {len} start {start}");
                assert_eq!(
                    crc32c_append(0xDEAD_BEEF, b),
                    crc32c::crc32c_append(0xDEAD_BEEF, b),
                    "append, len {len} start {start}"
                );
            }
        }
    }

    /// Whether this CPU folds, as the CPU's features say.
    #[test]
    fn reports_whether_it_folds() {
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            is_accelerated(),
            std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
                && std::arch::is_x86_feature_detected!("pclmulqdq")
                && std::arch::is_x86_feature_detected!("sse4.2")
        );
    }

    /// A single flipped bit anywhere changes the CRC (every lane and every
    /// fold step reaches the result).
    #[test]
    fn every_bit_counts() {
        if !cpu_folds() {
            return;
        }
        let mut data = bytes(4096, 3);
        let base = crc32c(&data);
        for bit in (0..4096 * 8).step_by(61) {
            data[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(crc32c(&data), base, "bit {bit}");
            assert_eq!(crc32c(&data), crc32c::crc32c(&data), "bit {bit}");
            data[bit / 8] ^= 1 << (bit % 8);
        }
    }

    #[test]
    fn blocks_match_one_call_each() {
        if !cpu_folds() {
            return;
        }
        let data = bytes(4096 * 9 + 7, 11);
        for block_bytes in [1, 8, 100, 128, 256, 384, 512, 640, 4096] {
            for count in 0..=9 {
                if block_bytes * count > 4096 * 9 {
                    continue;
                }
                for start in [0, 3] {
                    let d = &data[start..start + block_bytes * count];
                    let mut out = vec![0; count];
                    crc32c_blocks(d, block_bytes, &mut out);
                    let want: Vec<u32> = d.chunks_exact(block_bytes).map(crc32c::crc32c).collect();
                    assert_eq!(out, want, "{count} blocks of {block_bytes} at {start}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "are not 3 blocks")]
    fn blocks_must_fill_the_data() {
        crc32c_blocks(&[0; 100], 32, &mut [0; 3]);
    }

    #[test]
    #[should_panic(expected = "0 bytes are not 2 blocks of 0")]
    fn blocks_have_bytes() {
        each_block(&[], 0, &mut [0; 2], crc32c);
    }

    proptest! {
        #[test]
        fn any_input(data in proptest::collection::vec(any::<u8>(), 0..5000), crc in any::<u32>()) {
            if !cpu_folds() {
                return Ok(());
            }
            prop_assert_eq!(crc32c_append(crc, &data), crc32c::crc32c_append(crc, &data));
        }

        #[test]
        fn any_blocks(seed in any::<u64>(), count in 0usize..10, rounds in 1usize..6) {
            if !cpu_folds() {
                return Ok(());
            }
            let block_bytes = rounds * 128;
            let data = bytes(block_bytes * count, seed);
            let mut out = vec![0; count];
            crc32c_blocks(&data, block_bytes, &mut out);
            for (block, crc) in data.chunks_exact(block_bytes).zip(out) {
                prop_assert_eq!(crc, crc32c::crc32c(block));
            }
        }

        #[test]
        fn split_anywhere(len in 0usize..3000, cut in 0usize..3000, seed in any::<u64>()) {
            if !cpu_folds() {
                return Ok(());
            }
            let data = bytes(len, seed);
            let cut = cut.min(len);
            let (a, b) = data.split_at(cut);
            prop_assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data));
        }
    }
}
