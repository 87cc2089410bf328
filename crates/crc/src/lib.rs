//! CRC-32C (Castagnoli, the iSCSI CRC) folded 32 bytes at a time with
//! 256-bit carry-less multiplies (VPCLMULQDQ on AVX2), for CPUs that have
//! them but not AVX-512 (AMD Zen 3, Intel Alder Lake and later cores):
//! there the `crc32c` crate's `crc32` instruction loop and `crc-fast`'s
//! 128-bit folding are the only choices, and both are slower on 4 KiB
//! blocks (a loop over 4 KiB blocks in cache on an AMD EPYC of family 25:
//! `crc32c` 14–17 GB/s, this code 18–23 GB/s, in the same runs).
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
    if data.len() >= FOLD_MIN_BYTES && fold::available() {
        return fold::append(crc, data);
    }
    crc32c::crc32c_append(crc, data)
}

/// Whether this CPU runs the folding code (else every call is the
/// `crc32c` crate's).
pub fn is_accelerated() -> bool {
    #[cfg(target_arch = "x86_64")]
    return fold::available();
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

    #[test]
    fn check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[]), 0);
    }

    /// Every length around the fold's steps (128-byte rounds, the 256-byte
    /// minimum), at every alignment, with and without a running CRC.
    #[test]
    fn matches_crc32c_crate() {
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

    /// The machines that build zftl fold; a CPU that does not would make
    /// every other test here compare the `crc32c` crate with itself.
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
        if !is_accelerated() {
            eprintln!("zftl-crc: this CPU does not fold; tests compare the fallback only");
        }
    }

    /// A single flipped bit anywhere changes the CRC (every lane and every
    /// fold step reaches the result).
    #[test]
    fn every_bit_counts() {
        let mut data = bytes(4096, 3);
        let base = crc32c(&data);
        for bit in (0..4096 * 8).step_by(61) {
            data[bit / 8] ^= 1 << (bit % 8);
            assert_ne!(crc32c(&data), base, "bit {bit}");
            assert_eq!(crc32c(&data), crc32c::crc32c(&data), "bit {bit}");
            data[bit / 8] ^= 1 << (bit % 8);
        }
    }

    proptest! {
        #[test]
        fn any_input(data in proptest::collection::vec(any::<u8>(), 0..5000), crc in any::<u32>()) {
            prop_assert_eq!(crc32c_append(crc, &data), crc32c::crc32c_append(crc, &data));
        }

        #[test]
        fn split_anywhere(len in 0usize..3000, cut in 0usize..3000, seed in any::<u64>()) {
            let data = bytes(len, seed);
            let cut = cut.min(len);
            let (a, b) = data.split_at(cut);
            prop_assert_eq!(crc32c_append(crc32c(a), b), crc32c(&data));
        }
    }
}
