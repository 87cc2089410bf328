//! Fault injection: every decision comes from a seeded stream, one stream
//! per kind of fault, so a seed replays a whole run.

use crate::config::{Faults, PowerCut};
use crate::rng::Rng;

/// What a power cut does to a program command that had not finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProgramFate {
    /// Every program unit landed.
    Landed,
    /// `landed_units` units landed, the next one is torn, the rest are lost.
    Torn { landed_units: u64 },
    /// Nothing landed.
    Lost,
}

pub(crate) struct FaultState {
    plan: Faults,
    media_rng: Rng,
    cut_rng: Rng,
    fate_rng: Rng,
    shuffle_rng: Rng,
    reset_rng: Rng,
    submits_since_arm: u64,
    after_submits_fired: bool,
}

impl FaultState {
    pub fn new(plan: Faults) -> Self {
        let seed = plan.seed;
        FaultState {
            plan,
            media_rng: Rng::stream(seed, 1),
            cut_rng: Rng::stream(seed, 2),
            fate_rng: Rng::stream(seed, 3),
            shuffle_rng: Rng::stream(seed, 4),
            reset_rng: Rng::stream(seed, 5),
            submits_since_arm: 0,
            after_submits_fired: false,
        }
    }

    pub fn program_fails(&mut self) -> bool {
        self.media_rng
            .chance_per_million(self.plan.program_fail_per_million)
    }

    pub fn erase_fails(&mut self) -> bool {
        self.media_rng
            .chance_per_million(self.plan.erase_fail_per_million)
    }

    /// A transient uncorrectable read: `Some(block index within the read)`.
    pub fn read_fails(&mut self, block_count: u64) -> Option<u64> {
        self.media_rng
            .chance_per_million(self.plan.uncorrectable_read_per_million)
            .then(|| self.media_rng.below(block_count.max(1)))
    }

    /// Called after each accepted submit; true means "reset the controller now".
    pub fn controller_resets(&mut self) -> bool {
        self.reset_rng
            .chance_per_million(self.plan.controller_reset_per_million)
    }

    /// Whether a command a controller reset aborts before it finished ran.
    pub fn aborted_command_ran(&mut self) -> bool {
        self.reset_rng.below(2) == 0
    }

    /// Called after each accepted submit; true means "cut power now".
    pub fn cut_after_submit(&mut self) -> bool {
        self.submits_since_arm += 1;
        match self.plan.power_cut {
            PowerCut::Never => false,
            PowerCut::AfterSubmits(n) => {
                let fire = !self.after_submits_fired && self.submits_since_arm >= n;
                self.after_submits_fired |= fire;
                fire
            }
            PowerCut::RandomPerMillion(rate) => self.cut_rng.chance_per_million(rate),
        }
    }

    /// The fate of an unfinished program of `units` program units.
    pub fn program_fate(&mut self, units: u64) -> ProgramFate {
        match self.fate_rng.below(4) {
            0 | 1 => ProgramFate::Landed,
            2 => ProgramFate::Torn {
                landed_units: self.fate_rng.below(units.max(1)),
            },
            _ => ProgramFate::Lost,
        }
    }

    /// Whether an unfinished reset/finish/open/close took effect.
    pub fn other_happens(&mut self) -> bool {
        self.fate_rng.below(2) == 0
    }

    /// Which of `ready` completions to deliver next.
    pub fn pick(&mut self, ready: usize) -> usize {
        if self.plan.shuffle_completions && ready > 1 {
            self.shuffle_rng.below(ready as u64) as usize
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_submits_fires_once() {
        let mut f = FaultState::new(Faults {
            power_cut: PowerCut::AfterSubmits(3),
            ..Faults::default()
        });
        let fired: Vec<bool> = (0..6).map(|_| f.cut_after_submit()).collect();
        assert_eq!(fired, [false, false, true, false, false, false]);
    }

    #[test]
    fn fates_cover_all_kinds() {
        let mut f = FaultState::new(Faults::default());
        let fates: Vec<ProgramFate> = (0..64).map(|_| f.program_fate(4)).collect();
        assert!(fates.contains(&ProgramFate::Landed));
        assert!(fates.contains(&ProgramFate::Lost));
        assert!(fates.iter().any(|f| matches!(f, ProgramFate::Torn { .. })));
    }
}
