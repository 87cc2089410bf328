//! A bounded slab: values in reusable slots, found by a key that carries the
//! slot index and a generation, so a lookup is an index and a compare
//! (no hashing), and a stale key (its slot freed and reused) finds nothing.
//!
//! The core keeps its in-flight device commands (keyed by command tag) and
//! its pending host reads here. The capacity is fixed at start-up; slots are
//! allocated on first use and reused most-recently-freed first.

/// Bits of a key that hold the slot index.
const INDEX_BITS: u32 = 32;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

/// A value's handle: `generation << 32 | index`. Never [`Key::NONE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key(pub u64);

impl Key {
    /// No slot; what a key is before its value is inserted.
    pub const NONE: Key = Key(u64::MAX);

    pub(crate) fn index(self) -> usize {
        (self.0 & INDEX_MASK) as usize
    }
}

#[derive(Debug)]
struct Entry<T> {
    /// Bumped each time the slot is filled; 0 never names a live value.
    generation: u32,
    value: Option<T>,
}

#[derive(Debug)]
pub(crate) struct Slab<T> {
    entries: Vec<Entry<T>>,
    /// Empty slot indexes, the most recently freed last.
    free: Vec<u32>,
    len: usize,
    capacity: usize,
}

impl<T> Slab<T> {
    /// A slab of at most `capacity` values.
    pub fn new(capacity: usize) -> Slab<T> {
        assert!(
            capacity > 0 && capacity as u64 <= INDEX_MASK,
            "slab capacity {capacity}"
        );
        Slab {
            entries: Vec::new(),
            free: Vec::new(),
            len: 0,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stores `value`. Panics when full: callers check [`Self::len`] against
    /// the bound they were built with before inserting.
    pub fn insert(&mut self, value: T) -> Key {
        assert!(
            self.len < self.capacity,
            "slab full ({} values)",
            self.capacity
        );
        let index = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.entries.push(Entry {
                    generation: 0,
                    value: None,
                });
                self.entries.len() - 1
            }
        };
        let entry = &mut self.entries[index];
        debug_assert!(entry.value.is_none());
        entry.generation = entry.generation.wrapping_add(1).max(1);
        entry.value = Some(value);
        self.len += 1;
        let key = Key(u64::from(entry.generation) << INDEX_BITS | index as u64);
        assert_ne!(key, Key::NONE);
        key
    }

    pub fn get(&self, key: Key) -> Option<&T> {
        let entry = self.entries.get(key.index())?;
        if u64::from(entry.generation) != key.0 >> INDEX_BITS {
            return None;
        }
        entry.value.as_ref()
    }

    pub fn get_mut(&mut self, key: Key) -> Option<&mut T> {
        let entry = self.entries.get_mut(key.index())?;
        if u64::from(entry.generation) != key.0 >> INDEX_BITS {
            return None;
        }
        entry.value.as_mut()
    }

    /// Takes the value out and frees its slot; `None` for a stale or
    /// unknown key.
    pub fn remove(&mut self, key: Key) -> Option<T> {
        let index = key.index();
        let entry = self.entries.get_mut(index)?;
        if u64::from(entry.generation) != key.0 >> INDEX_BITS {
            return None;
        }
        let value = entry.value.take()?;
        self.free.push(index as u32);
        self.len -= 1;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_get_remove_reuse() {
        let mut s = Slab::new(2);
        let a = s.insert("a");
        let b = s.insert("b");
        assert_eq!(s.len(), 2);
        assert_eq!(s.get_mut(a).copied(), Some("a"));
        assert_eq!(s.remove(a), Some("a"));
        assert_eq!(s.remove(a), None, "removed twice");
        let c = s.insert("c");
        assert_eq!(c.index(), a.index(), "freed slot reused");
        assert_ne!(c, a);
        assert_eq!(s.get_mut(a), None, "a stale key finds nothing");
        assert_eq!(s.remove(Key::NONE), None);
        assert_eq!(s.len(), 2);
        assert_eq!(s.remove(b), Some("b"));
        assert_eq!(s.remove(c), Some("c"));
        assert!(s.is_empty());
    }

    #[test]
    #[should_panic(expected = "slab full")]
    fn full_panics() {
        let mut s = Slab::new(1);
        s.insert(1);
        s.insert(2);
    }
}
