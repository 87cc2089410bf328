//! Range attributes (immutable, non-persistent): an interval map from
//! logical ranges to attribute bits, bounded in the number of ranges.
//! Logged as Attr notes and stored in checkpoints (docs/format.md).

use crate::addr::Lba;
use crate::range::attr_bits;
use std::collections::BTreeMap;

/// The attribute table would need more ranges than its bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttrTableFull;

/// Disjoint ranges with non-zero attribute bits; adjacent ranges with the
/// same bits are merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttrMap {
    /// start → (end, bits).
    ranges: BTreeMap<Lba, (Lba, u8)>,
    max_ranges: usize,
}

impl AttrMap {
    /// An empty map of at most `max_ranges` ranges.
    pub fn new(max_ranges: usize) -> AttrMap {
        AttrMap {
            ranges: BTreeMap::new(),
            max_ranges,
        }
    }

    /// The bound on ranges.
    pub fn max_ranges(&self) -> usize {
        self.max_ranges
    }

    /// Ranges held.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges overlapping `[lba, lba + n)`, as `(start, end, bits)`.
    fn overlapping(&self, lba: Lba, n: u64) -> impl Iterator<Item = (Lba, Lba, u8)> + '_ {
        let end = lba + n;
        let before = self
            .ranges
            .range(..lba)
            .next_back()
            .filter(|(_, &(e, _))| e > lba);
        before
            .into_iter()
            .chain(self.ranges.range(lba..end))
            .map(|(&s, &(e, b))| (s, e, b))
    }

    /// The first block of `[lba, lba + n)` that is immutable.
    #[inline]
    pub fn first_immutable(&self, lba: Lba, n: u64) -> Option<Lba> {
        if self.ranges.is_empty() {
            return None;
        }
        self.overlapping(lba, n)
            .find(|&(_, _, b)| b & attr_bits::IMMUTABLE != 0)
            .map(|(s, _, _)| s.max(lba))
    }

    /// Sets the bits `set` and clears the bits `clear` on `[lba, lba + n)`.
    /// Changes nothing when the result would exceed the bound.
    pub fn change(&mut self, lba: Lba, n: u64, set: u8, clear: u8) -> Result<(), AttrTableFull> {
        assert!(
            n > 0 && set & clear == 0,
            "attribute change {set:#x}/{clear:#x} of {n}"
        );
        let end = lba + n;
        // The affected stretch: the ranges overlapping or touching it.
        let lo = self
            .ranges
            .range(..lba)
            .next_back()
            .filter(|(_, &(e, _))| e >= lba)
            .map_or(lba, |(&s, _)| s);
        let old: Vec<(Lba, Lba, u8)> = self
            .ranges
            .range(lo..=end)
            .map(|(&s, &(e, b))| (s, e, b))
            .collect();
        let hi = old.iter().map(|r| r.1).max().map_or(end, |e| e.max(end));
        // Cut points of the stretch, then the bits of each piece.
        let mut cuts: Vec<Lba> = vec![lo, hi, lba, end];
        for &(s, e, _) in &old {
            cuts.push(s);
            cuts.push(e);
        }
        cuts.sort_unstable();
        cuts.dedup();
        let bits_at = |x: Lba| {
            old.iter()
                .find(|&&(s, e, _)| s <= x && x < e)
                .map_or(0, |&(_, _, b)| b)
        };
        let mut pieces: Vec<(Lba, Lba, u8)> = Vec::new();
        for w in cuts.windows(2) {
            let (s, e) = (w[0], w[1]);
            let mut b = bits_at(s);
            if s >= lba && e <= end {
                b = (b | set) & !clear;
            }
            if b == 0 {
                continue;
            }
            match pieces.last_mut() {
                Some(last) if last.1 == s && last.2 == b => last.1 = e,
                _ => pieces.push((s, e, b)),
            }
        }
        if self.ranges.len() - old.len() + pieces.len() > self.max_ranges {
            return Err(AttrTableFull);
        }
        for (s, ..) in &old {
            self.ranges.remove(s);
        }
        for (s, e, b) in pieces {
            self.ranges.insert(s, (e, b));
        }
        Ok(())
    }

    /// Every range `(lba, block_count, bits)`, in order.
    pub fn iter(&self) -> impl Iterator<Item = (Lba, u64, u8)> + '_ {
        self.ranges.iter().map(|(&s, &(e, b))| (s, e - s, b))
    }

    /// The ranges whose contents do not survive a crash.
    pub fn non_persistent(&self) -> impl Iterator<Item = (Lba, u64)> + '_ {
        self.iter()
            .filter(|&(_, _, b)| b & attr_bits::NON_PERSISTENT != 0)
            .map(|(l, n, _)| (l, n))
    }

    /// Rebuilds a map from stored ranges: sorted, disjoint, known non-zero
    /// bits, inside `logical_blocks`, at most `max_ranges`.
    pub fn from_ranges(
        max_ranges: usize,
        logical_blocks: u64,
        ranges: &[(Lba, u64, u8)],
    ) -> Result<AttrMap, String> {
        let mut map = AttrMap::new(max_ranges.max(ranges.len()));
        let mut next = 0;
        for &(lba, n, bits) in ranges {
            let end = lba.checked_add(n).filter(|&e| n > 0 && e <= logical_blocks);
            let Some(end) = end else {
                return Err(format!("attribute range {lba}+{n} outside the volume"));
            };
            if lba < next || bits == 0 || bits & !attr_bits::ALL != 0 {
                return Err(format!(
                    "attribute range {lba}+{n} with bits {bits:#x} out of order or unknown"
                ));
            }
            map.ranges.insert(lba, (end, bits));
            next = end;
        }
        Ok(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const I: u8 = attr_bits::IMMUTABLE;
    const P: u8 = attr_bits::NON_PERSISTENT;

    #[test]
    fn set_split_merge_and_clear() {
        let mut m = AttrMap::new(10);
        m.change(10, 10, I, 0).unwrap();
        m.change(20, 5, I, 0).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(10, 15, I)]);
        m.change(12, 2, P, 0).unwrap();
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            vec![(10, 2, I), (12, 2, I | P), (14, 11, I)]
        );
        assert_eq!(m.first_immutable(0, 11), Some(10));
        assert_eq!(m.first_immutable(0, 10), None);
        assert_eq!(m.first_immutable(24, 100), Some(24));
        m.change(0, 100, 0, I).unwrap();
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(12, 2, P)]);
        assert_eq!(m.non_persistent().collect::<Vec<_>>(), vec![(12, 2)]);
        m.change(12, 2, 0, P).unwrap();
        assert!(m.is_empty());
    }

    #[test]
    fn the_bound_holds_and_refusal_changes_nothing() {
        let mut m = AttrMap::new(2);
        m.change(0, 1, I, 0).unwrap();
        m.change(10, 1, I, 0).unwrap();
        assert_eq!(m.change(20, 1, I, 0), Err(AttrTableFull));
        assert_eq!(m.len(), 2);
        m.change(1, 9, I, 0).unwrap(); // merges all three into one
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(0, 11, I)]);
    }

    #[test]
    fn stored_ranges_are_checked() {
        assert!(AttrMap::from_ranges(8, 100, &[(0, 5, I), (5, 5, P)]).is_ok());
        assert!(AttrMap::from_ranges(8, 100, &[(0, 5, I), (4, 5, P)]).is_err());
        assert!(AttrMap::from_ranges(8, 100, &[(99, 2, I)]).is_err());
        assert!(AttrMap::from_ranges(8, 100, &[(0, 1, 0x80)]).is_err());
        assert!(AttrMap::from_ranges(8, 100, &[(0, 0, I)]).is_err());
    }

    proptest! {
        #[test]
        fn matches_a_per_block_model(ops in proptest::collection::vec((0u64..60, 1u64..20, 0u8..4, any::<bool>()), 1..40)) {
            let mut m = AttrMap::new(1000);
            let mut model = [0u8; 80];
            for (lba, n, bits, set) in ops {
                let bits = bits & attr_bits::ALL;
                if bits == 0 { continue; }
                let (s, c) = if set { (bits, 0) } else { (0, bits) };
                m.change(lba, n, s, c).unwrap();
                for b in &mut model[lba as usize..(lba + n) as usize] {
                    *b = (*b | s) & !c;
                }
            }
            let mut seen = [0u8; 80];
            let mut last_end = None;
            for (l, n, b) in m.iter() {
                prop_assert!(b != 0);
                if let Some((e, pb)) = last_end { prop_assert!(!(e == l && pb == b), "unmerged neighbours"); }
                for x in l..l + n { seen[x as usize] = b; }
                last_end = Some((l + n, b));
            }
            prop_assert_eq!(seen, model);
            for lba in 0..80u64 {
                let imm = model[lba as usize..].iter().position(|&b| b & I != 0).map(|p| lba + p as u64);
                prop_assert_eq!(m.first_immutable(lba, 80 - lba), imm);
            }
        }
    }
}
