//! `LbaAllocator`: the logical value area's blocks, one bit each, for a
//! store that keeps its values in the logical segment. Rebuilt at open
//! from the index (the entries are the truth).

/// Used and free blocks of `[first, first + blocks)`.
#[derive(Debug)]
pub struct LbaAllocator {
    first_lba: u64,
    blocks: u64,
    used: Vec<u64>,
    used_count: u64,
    /// Where the next search starts: allocation goes round the area.
    cursor: u64,
}

impl LbaAllocator {
    pub fn new(first_lba: u64, blocks: u64) -> LbaAllocator {
        let words = usize::try_from(blocks.div_ceil(64)).expect("value area fits memory");
        LbaAllocator {
            first_lba,
            blocks,
            used: vec![0; words],
            used_count: 0,
            cursor: 0,
        }
    }

    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Whether `lba` is in the area.
    pub fn holds(&self, lba: u64) -> bool {
        lba.checked_sub(self.first_lba)
            .is_some_and(|i| i < self.blocks)
    }

    /// Marks `lba` used; `false` if it was already (or is outside).
    pub fn take(&mut self, lba: u64) -> bool {
        if !self.holds(lba) {
            return false;
        }
        let i = lba - self.first_lba;
        let (w, bit) = ((i / 64) as usize, 1u64 << (i % 64));
        if self.used[w] & bit != 0 {
            return false;
        }
        self.used[w] |= bit;
        self.used_count += 1;
        true
    }

    /// A free block, now used; `None` when the area is full.
    pub fn allocate(&mut self) -> Option<u64> {
        if self.used_count == self.blocks {
            return None;
        }
        let words = self.used.len();
        let start = (self.cursor / 64) as usize;
        for k in 0..=words {
            let w = (start + k) % words;
            let free = !self.used[w];
            if free == 0 {
                continue;
            }
            let i = w as u64 * 64 + u64::from(free.trailing_zeros());
            if i >= self.blocks {
                continue;
            }
            let lba = self.first_lba + i;
            assert!(self.take(lba));
            self.cursor = (i + 1) % self.blocks;
            return Some(lba);
        }
        unreachable!("{} of {} used, no free bit", self.used_count, self.blocks)
    }

    /// Gives `lba` back.
    pub fn release(&mut self, lba: u64) {
        assert!(self.holds(lba), "LBA {lba} outside the value area");
        let i = lba - self.first_lba;
        let (w, bit) = ((i / 64) as usize, 1u64 << (i % 64));
        assert!(self.used[w] & bit != 0, "LBA {lba} released twice");
        self.used[w] &= !bit;
        self.used_count -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_every_block_once_then_reuses_released_ones() {
        let mut a = LbaAllocator::new(100, 70);
        let got: Vec<u64> = (0..70).map(|_| a.allocate().unwrap()).collect();
        let mut sorted = got.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (100..170).collect::<Vec<_>>());
        assert_eq!(a.allocate(), None);
        a.release(137);
        assert_eq!(a.allocate(), Some(137));
        assert!(!a.take(137) && !a.take(99) && !a.take(170));
    }
}
