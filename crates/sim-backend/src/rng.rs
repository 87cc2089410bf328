//! The simulator's own PRNG: xoshiro256** seeded through splitmix64.
//!
//! We do not use the `rand` crate because its streams may change between
//! versions, and a failing seed must replay the same run forever.

/// One splitmix64 step; used to expand a 64-bit seed into xoshiro state.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xoshiro256** (Blackman & Vigna): small, fast, and good enough for faults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: [u64; 4],
}

impl Rng {
    /// A generator whose whole stream is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let state = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        // splitmix64 never yields four zero words in a row, so the state is valid.
        assert!(state.iter().any(|&w| w != 0));
        Rng { state }
    }

    /// A generator for one purpose (`stream`) derived from a shared seed, so
    /// that turning one kind of fault on does not shift the others' streams.
    pub fn stream(seed: u64, stream: u64) -> Self {
        let mut sm = seed ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03);
        Rng::new(splitmix64(&mut sm))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.state;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2^-32 for our `n`).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `per_million / 1_000_000`. Draws nothing when
    /// the rate is 0, so a disabled fault leaves the stream untouched.
    pub fn chance_per_million(&mut self, per_million: u32) -> bool {
        per_million > 0 && self.below(1_000_000) < u64::from(per_million)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_is_stable() {
        // Frozen values: if these change, every recorded failing seed is void.
        let mut r = Rng::new(0);
        let first: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut again = Rng::new(0);
        let second: Vec<u64> = (0..3).map(|_| again.next_u64()).collect();
        assert_eq!(first, second);
        assert_eq!(first[0], 0x99EC_5F36_CB75_F2B4);
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = Rng::new(42);
        let mut seen = [false; 7];
        for _ in 0..1000 {
            let v = r.below(7);
            assert!(v < 7);
            seen[v as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn streams_differ() {
        assert_ne!(Rng::stream(1, 1).next_u64(), Rng::stream(1, 2).next_u64());
    }

    #[test]
    fn zero_rate_draws_nothing() {
        let mut a = Rng::new(5);
        let b = a.clone();
        assert!(!a.chance_per_million(0));
        assert_eq!(a, b);
        assert!(a.chance_per_million(1_000_000));
    }
}
