//! Address generators for the benchmarks: uniform, hot/cold and Zipf over a
//! logical space of `n` blocks. Every stream comes from a seeded
//! [`zftl_sim::rng::Rng`], so one seed replays the same addresses forever.

use zftl_sim::rng::Rng;

/// Which addresses the overwrite phase writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkloadKind {
    /// Uniform over the whole logical space.
    Uniform,
    /// `hot-access` of writes go to the first `hot-fraction` of the space,
    /// the rest to the remainder; uniform within each part.
    Hotcold,
    /// Zipf over blocks with exponent `zipf-theta`; rank 1 is block 0.
    Zipf,
}

impl WorkloadKind {
    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::Uniform => "uniform",
            WorkloadKind::Hotcold => "hotcold",
            WorkloadKind::Zipf => "zipf",
        }
    }
}

/// The parameters of a workload (only those of its kind are used).
#[derive(Clone, Copy, Debug)]
pub struct WorkloadSpec {
    pub kind: WorkloadKind,
    pub hot_fraction: f64,
    pub hot_access: f64,
    pub zipf_theta: f64,
}

impl WorkloadSpec {
    pub fn uniform() -> Self {
        WorkloadSpec {
            kind: WorkloadKind::Uniform,
            hot_fraction: 0.1,
            hot_access: 0.9,
            zipf_theta: 0.99,
        }
    }

    /// Checks the parameters of this kind; a message for the user otherwise.
    pub fn validate(&self) -> Result<(), String> {
        match self.kind {
            WorkloadKind::Uniform => Ok(()),
            WorkloadKind::Hotcold => {
                if !(self.hot_fraction > 0.0 && self.hot_fraction < 1.0) {
                    return Err(format!(
                        "--hot-fraction {} must lie strictly between 0 and 1",
                        self.hot_fraction
                    ));
                }
                if !(0.0..=1.0).contains(&self.hot_access) {
                    return Err(format!(
                        "--hot-access {} must lie between 0 and 1",
                        self.hot_access
                    ));
                }
                Ok(())
            }
            WorkloadKind::Zipf => {
                if !(self.zipf_theta > 0.0 && self.zipf_theta.is_finite()) {
                    return Err(format!(
                        "--zipf-theta {} must be a positive number",
                        self.zipf_theta
                    ));
                }
                Ok(())
            }
        }
    }
}

/// Draws logical block addresses in `0..n`.
pub struct AddressGen {
    rng: Rng,
    n: u64,
    kind: Kind,
}

enum Kind {
    Uniform,
    HotCold { hot_blocks: u64, hot_access: f64 },
    Zipf(Zipf),
}

impl AddressGen {
    /// A generator over `n >= 1` blocks (the spec must be valid).
    pub fn new(spec: &WorkloadSpec, n: u64, seed: u64) -> Self {
        assert!(n > 0, "empty address space");
        let kind = match spec.kind {
            WorkloadKind::Uniform => Kind::Uniform,
            WorkloadKind::Hotcold => {
                let hot_blocks = ((n as f64 * spec.hot_fraction) as u64).clamp(1, n);
                Kind::HotCold {
                    hot_blocks,
                    hot_access: spec.hot_access,
                }
            }
            WorkloadKind::Zipf => Kind::Zipf(Zipf::new(n, spec.zipf_theta)),
        };
        AddressGen {
            rng: Rng::stream(seed, 0x5a0_0ad0),
            n,
            kind,
        }
    }

    pub fn next_lba(&mut self) -> u64 {
        match &self.kind {
            Kind::Uniform => self.rng.below(self.n),
            Kind::HotCold {
                hot_blocks,
                hot_access,
            } => {
                let cold_blocks = self.n - hot_blocks;
                if cold_blocks == 0 || unit_f64(&mut self.rng) < *hot_access {
                    self.rng.below(*hot_blocks)
                } else {
                    hot_blocks + self.rng.below(cold_blocks)
                }
            }
            Kind::Zipf(z) => z.sample(&mut self.rng) - 1,
        }
    }
}

/// Uniform in [0, 1) with 53 random bits.
pub fn unit_f64(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Zipf over ranks `1..=n` with exponent `s`, by rejection-inversion
/// (Hörmann & Derflinger 1996, as in Apache Commons RNG): O(1) memory and
/// about one uniform draw per sample for any `n`.
struct Zipf {
    n: f64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s_div: f64,
}

impl Zipf {
    fn new(n: u64, s: f64) -> Zipf {
        let mut z = Zipf {
            n: n as f64,
            s,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            s_div: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n + 0.5);
        z.s_div = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + unit_f64(rng) * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s_div || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: WorkloadKind) -> WorkloadSpec {
        WorkloadSpec {
            kind,
            ..WorkloadSpec::uniform()
        }
    }

    #[test]
    fn addresses_stay_in_range_and_replay() {
        for kind in [
            WorkloadKind::Uniform,
            WorkloadKind::Hotcold,
            WorkloadKind::Zipf,
        ] {
            let mut a = AddressGen::new(&spec(kind), 1000, 7);
            let mut b = AddressGen::new(&spec(kind), 1000, 7);
            for _ in 0..10_000 {
                let x = a.next_lba();
                assert!(x < 1000);
                assert_eq!(x, b.next_lba());
            }
        }
    }

    #[test]
    fn hotcold_sends_the_hot_share_to_the_hot_part() {
        let mut g = AddressGen::new(&spec(WorkloadKind::Hotcold), 10_000, 1);
        let hot = (0..100_000).filter(|_| g.next_lba() < 1000).count();
        assert!((89_000..91_000).contains(&hot), "hot writes {hot}");
    }

    #[test]
    fn zipf_matches_its_distribution() {
        // P(rank 1) = 1 / H(n, s).
        let (n, s) = (1000u64, 0.99);
        let harmonic: f64 = (1..=n).map(|k| (k as f64).powf(-s)).sum();
        let mut g = AddressGen::new(
            &WorkloadSpec {
                zipf_theta: s,
                ..spec(WorkloadKind::Zipf)
            },
            n,
            3,
        );
        let draws = 200_000;
        let firsts = (0..draws).filter(|_| g.next_lba() == 0).count();
        let expected = draws as f64 / harmonic;
        assert!(
            (firsts as f64 - expected).abs() < 0.05 * expected,
            "rank 1 drawn {firsts} times, expected {expected:.0}"
        );
    }
}
