//! The folding loop: the crate's only `unsafe` (SIMD intrinsics behind a
//! runtime CPU feature check, and unaligned loads within a slice).
//!
//! The message is a polynomial over GF(2) whose first bit is its highest
//! term; a 16-byte lane loaded little-endian holds its first bit in bit 0.
//! Eight lanes (four 256-bit registers, 128 bytes) run side by side: each
//! round multiplies every lane by x^1024 modulo P (folding it onto the lane
//! 128 bytes further on) and adds that lane's next 16 bytes. The multiply
//! splits a lane into its two 64-bit halves, each times a 32-bit constant
//! (one carry-less multiply per half; see [`fold_constants`]). At the end
//! the eight lanes are folded onto the last one, and the `crc32`
//! instruction reduces its 128 bits to the CRC.

#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m128i, __m256i, _mm256_castsi256_si128, _mm256_clmulepi64_epi128, _mm256_extracti128_si256,
    _mm256_loadu_si256, _mm256_set_epi32, _mm256_set_epi64x, _mm256_xor_si256,
    _mm_clmulepi64_si128, _mm_crc32_u64, _mm_cvtsi128_si64, _mm_extract_epi64, _mm_set_epi64x,
    _mm_xor_si128,
};

/// CRC-32C's polynomial with its x^32 term.
const POLY: u64 = 0x1_1EDC_6F41;
/// Bytes per round: eight 16-byte lanes.
const ROUND_BYTES: usize = 128;
const LANES: usize = ROUND_BYTES / 16;

/// x^k mod P, highest term in bit 31.
const fn x_pow_mod(k: u32) -> u64 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < k {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= POLY;
        }
        i += 1;
    }
    r
}

/// A remainder (degree < 32) bit-reversed into 64 bits: x^d in bit 63 − d,
/// the order of the data in a lane.
const fn reflect(r: u64) -> u64 {
    let mut out = 0;
    let mut d = 0;
    while d < 32 {
        if r & (1 << d) != 0 {
            out |= 1 << (63 - d);
        }
        d += 1;
    }
    out
}

/// Multipliers that move a lane `bits` further on: (for its first 64-bit
/// half, for its second). The first half stands `64 + bits` bits before the
/// lane it lands on, the second `bits`. A carry-less product of two
/// bit-reversed 64-bit values comes out one place short of the 128-bit
/// lane's order (bit 127 stays empty), hence one power less.
const fn fold_constants(bits: u32) -> (u64, u64) {
    (
        reflect(x_pow_mod(64 + bits - 1)),
        reflect(x_pow_mod(bits - 1)),
    )
}

/// Multipliers for lane `i` of the last round onto the last lane, and (at
/// index 0) for a whole round.
const TO_LAST_LANE: [(u64, u64); LANES] = {
    let mut k = [(0, 0); LANES];
    k[0] = fold_constants(ROUND_BYTES as u32 * 8);
    let mut i = 1;
    while i < LANES {
        k[i] = fold_constants(((LANES - i) * 128) as u32);
        i += 1;
    }
    k
};
const ROUND: (u64, u64) = TO_LAST_LANE[0];

/// Proof that the CPU has what the folding runs: AVX2 with VPCLMULQDQ, and
/// SSE4.2 for the final `crc32`. Only [`Folder::detect`] makes one, so its
/// methods need not ask the CPU again on every call.
#[derive(Clone, Copy)]
pub(crate) struct Folder(());

impl Folder {
    #[inline]
    pub(crate) fn detect() -> Option<Folder> {
        let has = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
            && std::arch::is_x86_feature_detected!("sse4.2");
        has.then_some(Folder(()))
    }

    /// `crc32c::crc32c_append(crc, data)` for `data` of at least one round;
    /// whole rounds fold, the rest goes to the `crc32c` crate.
    pub(crate) fn append(self, crc: u32, data: &[u8]) -> u32 {
        assert!(
            data.len() >= ROUND_BYTES,
            "{} bytes: less than a round",
            data.len()
        );
        let (rounds, rest) = data.split_at(data.len() / ROUND_BYTES * ROUND_BYTES);
        // SAFETY: `self` proves the CPU has every feature `fold_rounds`
        // enables, and `rounds` is a non-empty multiple of `ROUND_BYTES`.
        let crc = unsafe { fold_rounds(crc, rounds) };
        if rest.is_empty() {
            return crc; // the usual case (whole blocks): no call for nothing
        }
        crc32c::crc32c_append(crc, rest)
    }

    /// The CRC-32C (from zero) of each of four blocks of `block_bytes` (a
    /// multiple of [`ROUND_BYTES`], at least one round) laid end to end in
    /// `data`: the first folds while the `crc32` instruction runs three
    /// chains over the others. The two use different execution units, so
    /// the four cost little more than the first alone (on an AMD EPYC of
    /// family 25: 1.2–1.3× the rate of folding block by block, in loop
    /// runs).
    pub(crate) fn four_blocks(self, data: &[u8], block_bytes: usize) -> [u32; 4] {
        assert!(block_bytes >= ROUND_BYTES && block_bytes.is_multiple_of(ROUND_BYTES));
        assert_eq!(
            data.len(),
            4 * block_bytes,
            "four blocks of {block_bytes} bytes"
        );
        let (first, chained) = data.split_at(block_bytes);
        let (b, rest) = chained.split_at(block_bytes);
        let (c, d) = rest.split_at(block_bytes);
        // SAFETY: `self` proves the features; `first` is a non-zero
        // multiple of `ROUND_BYTES`, and the chains are as long.
        let (a, [b, c, d]) = unsafe { fold_and_chain(0, first, [b, c, d]) };
        [a, b, c, d]
    }
}

/// `append` for whole rounds.
///
/// # Safety
/// The CPU must have AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `data.len()`
/// must be a non-zero multiple of [`ROUND_BYTES`] (checked).
#[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2")]
unsafe fn fold_rounds(crc: u32, data: &[u8]) -> u32 {
    // SAFETY: the caller's promise, passed on.
    unsafe { fold_and_chain(crc, data, []).0 }
}

/// Folds `data` (continuing from `crc`) and, in the same rounds, runs the
/// `crc32` instruction over each of `chains` (each as long as `data`, each
/// from zero). Returns the CRC of `data` and of each chain.
///
/// # Safety
/// The CPU must have AVX2, VPCLMULQDQ, PCLMULQDQ and SSE4.2; `data.len()`
/// must be a non-zero multiple of [`ROUND_BYTES`] and every chain exactly
/// as long (both checked).
#[target_feature(enable = "avx2,vpclmulqdq,pclmulqdq,sse4.2")]
unsafe fn fold_and_chain<const CHAINS: usize>(
    crc: u32,
    data: &[u8],
    chains: [&[u8]; CHAINS],
) -> (u32, [u32; CHAINS]) {
    assert!(!data.is_empty() && data.len().is_multiple_of(ROUND_BYTES));
    assert!(chains.iter().all(|c| c.len() == data.len()));
    let at = data.as_ptr().cast::<__m256i>();
    // SAFETY (all loads): `at.add(4 * r + j)` for j < 4 and r below the
    // round count reads 32 bytes inside `data`; loadu needs no alignment.
    let load = |r: usize, j: usize| unsafe { _mm256_loadu_si256(at.add(4 * r + j)) };
    // The chains read 8 bytes at a time: a round is 16 words of each.
    let words = chains.map(|c| c.as_ptr().cast::<u64>());
    // SAFETY: word `w` < `data.len() / 8` of a chain lies inside it (all
    // chains are as long as `data`); read_unaligned needs no alignment.
    let word = |c: usize, w: usize| unsafe { words[c].add(w).read_unaligned() };
    let mut sums = [u64::from(!0u32); CHAINS];
    // The running CRC (complemented, as CRC-32C starts from all ones)
    // enters as an xor into the first 32 bits of the message.
    let first = _mm256_set_epi32(0, 0, 0, 0, 0, 0, 0, !crc as i32);
    let mut acc = [
        _mm256_xor_si256(load(0, 0), first),
        load(0, 1),
        load(0, 2),
        load(0, 3),
    ];
    let k = _mm256_set_epi64x(
        ROUND.1 as i64,
        ROUND.0 as i64,
        ROUND.1 as i64,
        ROUND.0 as i64,
    );
    const ROUND_WORDS: usize = ROUND_BYTES / 8;
    for r in 0..data.len() / ROUND_BYTES {
        if r > 0 {
            for (j, a) in acc.iter_mut().enumerate() {
                *a = fold256(*a, k, load(r, j));
            }
        }
        for w in r * ROUND_WORDS..(r + 1) * ROUND_WORDS {
            for (c, sum) in sums.iter_mut().enumerate() {
                *sum = _mm_crc32_u64(*sum, word(c, w));
            }
        }
    }
    let lanes: [__m128i; LANES] = [
        _mm256_castsi256_si128(acc[0]),
        _mm256_extracti128_si256(acc[0], 1),
        _mm256_castsi256_si128(acc[1]),
        _mm256_extracti128_si256(acc[1], 1),
        _mm256_castsi256_si128(acc[2]),
        _mm256_extracti128_si256(acc[2], 1),
        _mm256_castsi256_si128(acc[3]),
        _mm256_extracti128_si256(acc[3], 1),
    ];
    let mut last = lanes[LANES - 1];
    for (i, &lane) in lanes[..LANES - 1].iter().enumerate() {
        let (k0, k1) = TO_LAST_LANE[i + 1];
        let k = _mm_set_epi64x(k1 as i64, k0 as i64);
        let lo = _mm_clmulepi64_si128(lane, k, 0x00);
        let hi = _mm_clmulepi64_si128(lane, k, 0x11);
        last = _mm_xor_si128(_mm_xor_si128(lo, hi), last);
    }
    // What is left is congruent to the message; its CRC (from zero, no
    // final complement) is the message's.
    let c = _mm_crc32_u64(0, _mm_cvtsi128_si64(last) as u64);
    let c = _mm_crc32_u64(c, _mm_extract_epi64(last, 1) as u64);
    (!(c as u32), sums.map(|s| !(s as u32)))
}

/// Two lanes times their multipliers, plus the data they land on.
#[target_feature(enable = "avx2,vpclmulqdq")]
fn fold256(acc: __m256i, k: __m256i, data: __m256i) -> __m256i {
    let lo = _mm256_clmulepi64_epi128(acc, k, 0x00);
    let hi = _mm256_clmulepi64_epi128(acc, k, 0x11);
    _mm256_xor_si256(_mm256_xor_si256(lo, hi), data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Folding a lane by 128 bits is multiplying by x^128: the constants
    /// for one lane's distance, derived independently.
    #[test]
    fn constants_are_powers_of_x() {
        assert_eq!(x_pow_mod(0), 1);
        assert_eq!(x_pow_mod(31), 1 << 31);
        assert_eq!(x_pow_mod(32), POLY & 0xFFFF_FFFF);
        assert_eq!(reflect(1), 1 << 63);
        assert_eq!(reflect(1 << 31), 1 << 32);
        assert_eq!(TO_LAST_LANE[LANES - 1], fold_constants(128));
        assert_eq!(ROUND, fold_constants(1024));
    }

    #[test]
    fn short_input_is_refused() {
        if !crate::tests::cpu_folds() {
            return;
        }
        let folder = Folder::detect().expect("the CPU folds");
        assert!(std::panic::catch_unwind(|| folder.append(0, &[0; 100])).is_err());
    }
}
