//! The history's kept versions (docs/design.md, "Versions, births and the
//! history"): each keyed by `(lba, kill seq)`, with an index by
//! `(kill seq, lba)` that a delete's sweep walks.
//!
//! Versions a checkpoint loaded stay in the sorted array the mount checked
//! until a change needs the ordered maps (a keep or a sweep): reads of a
//! version, a diff's candidates, the count and the checkpoint's copy are
//! answered from the array by binary search, so a mount that changes none
//! of them (a clean one, or one whose replay keeps and sweeps nothing)
//! neither builds the maps nor sorts the index by kill seq. The first
//! change builds both, in bulk, from the array.

use crate::addr::{Lba, Seq};
use crate::history::Version;
use std::collections::{btree_map, BTreeMap, BTreeSet};
use std::ops::Range;

/// Versions by `(lba, kill seq)`.
type Entries = BTreeMap<(Lba, Seq), Version>;
/// The same keys by `(kill seq, lba)`.
type ByKill = BTreeSet<(Seq, Lba)>;

/// The kept versions: as loaded, or as the ordered maps changes use.
#[derive(Clone, Debug)]
pub enum Kept {
    /// Sorted by key, no key twice (checked by [`Kept::loaded`]).
    Loaded(Vec<((Lba, Seq), Version)>),
    Maps {
        entries: Entries,
        by_kill: ByKill,
    },
}

impl Default for Kept {
    fn default() -> Kept {
        Kept::Maps {
            entries: Entries::new(),
            by_kill: ByKill::new(),
        }
    }
}

/// [`Kept::range`]'s iterator over either form.
pub enum KeptIter<'a> {
    Loaded(std::slice::Iter<'a, ((Lba, Seq), Version)>),
    Maps(btree_map::Range<'a, (Lba, Seq), Version>),
}

impl Iterator for KeptIter<'_> {
    type Item = ((Lba, Seq), Version);

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            KeptIter::Loaded(it) => it.next().copied(),
            KeptIter::Maps(it) => it.next().map(|(&k, &v)| (k, v)),
        }
    }
}

impl Kept {
    /// The versions a checkpoint recorded, sorted here if they are not; a
    /// key given twice is an error.
    pub fn loaded(mut sorted: Vec<((Lba, Seq), Version)>) -> Result<Kept, String> {
        if !sorted.is_sorted_by(|a, b| a.0 < b.0) {
            sorted.sort_unstable_by_key(|&(k, _)| k);
            if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
                let (lba, seq) = w[0].0;
                return Err(format!("block {lba} replaced twice at seq {seq}"));
            }
        }
        Ok(Kept::Loaded(sorted))
    }

    pub fn len(&self) -> usize {
        match self {
            Kept::Loaded(v) => v.len(),
            Kept::Maps { entries, .. } => entries.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The versions with keys in `keys`, in key order.
    pub fn range(&self, keys: Range<(Lba, Seq)>) -> KeptIter<'_> {
        match self {
            Kept::Loaded(v) => {
                let from = v.partition_point(|(k, _)| *k < keys.start);
                let to = v.partition_point(|(k, _)| *k < keys.end);
                KeptIter::Loaded(v[from..to.max(from)].iter())
            }
            Kept::Maps { entries, .. } if keys.start < keys.end => {
                KeptIter::Maps(entries.range(keys))
            }
            Kept::Maps { entries, .. } => KeptIter::Maps(entries.range(keys.start..keys.start)),
        }
    }

    /// Every version, in key order.
    pub fn iter(&self) -> KeptIter<'_> {
        match self {
            Kept::Loaded(v) => KeptIter::Loaded(v.iter()),
            Kept::Maps { entries, .. } => KeptIter::Maps(entries.range(..)),
        }
    }

    /// The ordered maps, built from the loaded array on first use.
    pub fn maps(&mut self) -> (&mut Entries, &mut ByKill) {
        if let Kept::Loaded(v) = self {
            let sorted = std::mem::take(v);
            let mut kills: Vec<(Seq, Lba)> = sorted.iter().map(|&((l, q), _)| (q, l)).collect();
            kills.sort_unstable();
            // Both inputs are sorted and free of repeats: `from_iter` finds
            // them sorted in one pass and builds each tree leaf by leaf.
            *self = Kept::Maps {
                entries: sorted.into_iter().collect(),
                by_kill: kills.into_iter().collect(),
            };
        }
        match self {
            Kept::Maps { entries, by_kill } => (entries, by_kill),
            Kept::Loaded(_) => unreachable!("built above"),
        }
    }

    /// Heap bytes, the ordered maps' overhead estimated at one pointer per
    /// key (two keys per version: the entry and its index by kill seq).
    pub fn memory_bytes(&self) -> u64 {
        match self {
            Kept::Loaded(v) => (v.capacity() * std::mem::size_of::<((Lba, Seq), Version)>()) as u64,
            Kept::Maps { entries, .. } => {
                let entry = (16 + 8 + 8 + 8) as u64;
                let kill = (16 + 8) as u64;
                entries.len() as u64 * (entry + kill)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(value: u32, birth: u32) -> Version {
        Version {
            value: Some(value),
            birth,
        }
    }

    fn sample() -> Vec<((Lba, Seq), Version)> {
        vec![
            ((3, 12), v(1, 1)),
            ((3, 15), v(2, 2)),
            ((4, 11), v(3, 1)),
            ((9, 13), v(4, 1)),
        ]
    }

    fn all(k: &Kept, keys: Range<(Lba, Seq)>) -> Vec<((Lba, Seq), Version)> {
        k.range(keys).collect()
    }

    #[test]
    fn loaded_and_built_answer_every_range_alike() {
        let loaded = Kept::loaded(sample()).expect("sorted, no repeats");
        let mut built = loaded.clone();
        built.maps();
        assert!(matches!(loaded, Kept::Loaded(_)));
        assert!(matches!(built, Kept::Maps { .. }));
        for start in 0..11 {
            for end in 0..11 {
                for seq in [0, 12, 13, Seq::MAX] {
                    let keys = (start, seq)..(end, seq);
                    assert_eq!(
                        all(&loaded, keys.clone()),
                        all(&built, keys),
                        "{start}..{end} at {seq}"
                    );
                }
            }
        }
        assert_eq!(loaded.iter().collect::<Vec<_>>(), sample());
        assert_eq!(built.iter().collect::<Vec<_>>(), sample());
        assert_eq!((loaded.len(), built.len()), (4, 4));
    }

    #[test]
    fn maps_hold_the_loaded_versions_and_their_kill_index() {
        let mut k = Kept::loaded(sample()).expect("sorted");
        let (entries, by_kill) = k.maps();
        assert_eq!(entries.len(), 4);
        let kills: Vec<_> = by_kill.iter().copied().collect();
        assert_eq!(kills, vec![(11, 4), (12, 3), (13, 9), (15, 3)]);
    }

    #[test]
    fn loaded_sorts_an_unsorted_array_and_refuses_a_key_twice() {
        let mut shuffled = sample();
        shuffled.reverse();
        let k = Kept::loaded(shuffled).expect("sorted here");
        assert_eq!(k.iter().collect::<Vec<_>>(), sample());
        let mut twice = sample();
        twice.push(((3, 12), v(9, 1)));
        let e = Kept::loaded(twice).expect_err("key twice");
        assert!(e.contains("block 3 replaced twice at seq 12"), "{e}");
    }
}
