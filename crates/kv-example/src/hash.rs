//! The 128-bit key hash: FNV-1a 128, fixed forever, since it is on the
//! media (in every value's metadata) and picks each key's home bucket.

const FNV128_OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const FNV128_PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

/// FNV-1a 128 of `key`.
pub fn key_hash(key: &[u8]) -> u128 {
    key.iter().fold(FNV128_OFFSET, |h, &b| {
        (h ^ u128::from(b)).wrapping_mul(FNV128_PRIME)
    })
}

/// The bucket a key with `hash` goes to first, of `buckets`.
pub fn home_bucket(hash: u128, buckets: u32) -> u32 {
    assert!(buckets > 0, "a store has at least one bucket");
    // The high half: FNV's low bits mix least.
    ((hash >> 64) as u64 % u64::from(buckets)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // The FNV-1a 128 test vectors (draft-eastlake-fnv).
        assert_eq!(key_hash(b""), FNV128_OFFSET);
        assert_eq!(key_hash(b"a"), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
        assert_eq!(
            key_hash(b"foobar"),
            0x343e_1662_793c_64bf_6f0d_3597_ba44_6f18
        );
    }

    #[test]
    fn homes_stay_in_range() {
        for n in [1, 2, 7, 1000] {
            for k in 0..100u32 {
                assert!(home_bucket(key_hash(&k.to_le_bytes()), n) < n);
            }
        }
    }
}
