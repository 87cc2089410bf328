//! Birth generations of nameless blocks (docs/design.md, "The address a
//! client holds", step 7): every zone's `base_gen`, and the live blocks
//! born with another generation — gap fills of an in-place collection —
//! 8 bytes each (checkpoint section 24, docs/format.md §11). A block not
//! in the map was born with its zone's `base_gen`; so a free, overwrite or
//! read of an address is checked exactly, without reading the block.

use crate::addr::Ppa;
use crate::backend::ZoneId;
use std::collections::BTreeMap;

/// Zones' base generations and the gap fills' birth generations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Births {
    /// Per zone, the generation it took when it was last opened for
    /// nameless data (0: never).
    base: Vec<u32>,
    /// Live blocks whose birth generation is not their zone's `base_gen`:
    /// Ppa -> birth generation (above it).
    fills: BTreeMap<Ppa, u32>,
}

impl Births {
    /// No zone ever nameless, no fill.
    pub fn new(zone_count: u32) -> Births {
        Births {
            base: vec![0; zone_count as usize],
            fills: BTreeMap::new(),
        }
    }

    /// From a checkpoint's `base_gen` per zone and gap fills (section 24).
    pub fn from_parts(base: Vec<u32>, fills: impl IntoIterator<Item = (Ppa, u32)>) -> Births {
        Births {
            base,
            fills: fills.into_iter().collect(),
        }
    }

    /// The `base_gen` of `zone`.
    pub fn base(&self, zone: ZoneId) -> u32 {
        self.base[zone as usize]
    }

    /// `zone` was opened for nameless data with generation `gen`: its blocks
    /// (none live) are born with it from now on.
    pub fn set_base(&mut self, zone: ZoneId, generation: u32) {
        self.base[zone as usize] = generation;
    }

    /// The birth generation of the live block at `ppa` in `zone`.
    pub fn birth(&self, ppa: Ppa, zone: ZoneId) -> u32 {
        self.fills
            .get(&ppa)
            .copied()
            .unwrap_or(self.base[zone as usize])
    }

    /// A gap fill of generation `generation` (not its zone's base) is live at
    /// `ppa`.
    pub fn fill(&mut self, ppa: Ppa, zone: ZoneId, generation: u32) {
        assert!(
            generation > self.base[zone as usize],
            "gap fill {ppa:?} of generation {generation} at or below its zone's base"
        );
        let before = self.fills.insert(ppa, generation);
        assert!(before.is_none(), "gap fill {ppa:?} over a live fill");
    }

    /// The block at `ppa` is no longer live (freed, moved): its entry goes.
    pub fn forget(&mut self, ppa: Ppa) {
        self.fills.remove(&ppa);
    }

    /// Gap fills live now.
    pub fn fill_count(&self) -> u64 {
        self.fills.len() as u64
    }

    /// The gap fills, Ppa increasing.
    pub fn fills(&self) -> impl Iterator<Item = (Ppa, u32)> + '_ {
        self.fills.iter().map(|(&p, &g)| (p, g))
    }

    /// Every zone's `base_gen`.
    pub fn bases(&self) -> &[u32] {
        &self.base
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_born_with_its_zone_base_unless_it_is_a_fill() {
        let mut b = Births::new(4);
        b.set_base(2, 5);
        let (p, q) = (Ppa(2 * 8 + 1), Ppa(2 * 8 + 2));
        assert_eq!(b.birth(p, 2), 5);
        b.fill(q, 2, 6);
        assert_eq!((b.birth(p, 2), b.birth(q, 2)), (5, 6));
        assert_eq!(b.fill_count(), 1);
        b.forget(q);
        assert_eq!(b.birth(q, 2), 5);
        assert_eq!(b.fill_count(), 0);
    }

    #[test]
    #[should_panic(expected = "at or below its zone's base")]
    fn a_fill_of_the_base_generation_is_a_bug() {
        let mut b = Births::new(1);
        b.set_base(0, 3);
        b.fill(Ppa(1), 0, 3);
    }
}
