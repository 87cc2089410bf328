//! GC's device-time budget (`FtlConfig::gc_budget`): a token bucket in
//! device time that the driver's clock fills and GC's commands drain, so GC
//! takes a bounded share of the device beside the host.

use crate::config::GcBudget;

/// The bucket. Tokens are device nanoseconds; they may go below zero by
/// one command's cost (a command is charged when it is issued, whole), and
/// a collection then waits until the clock has paid it back.
#[derive(Debug)]
pub(super) struct GcBucket {
    /// Device ns GC may spend per µs elapsed (= `device_us_per_ms`).
    device_ns_per_us: u64,
    burst_ns: i64,
    tokens_ns: i64,
    /// The clock at the last refill; `None` before the first.
    refilled_at_ns: Option<u64>,
}

impl GcBucket {
    /// A full bucket.
    pub(super) fn new(budget: GcBudget) -> GcBucket {
        let burst_ns = i64::from(budget.burst_us) * 1000;
        GcBucket {
            device_ns_per_us: u64::from(budget.device_us_per_ms),
            burst_ns,
            tokens_ns: burst_ns,
            refilled_at_ns: None,
        }
    }

    /// The clock reads `now_ns`: what elapsed since the last refill earns
    /// its share, up to the burst.
    pub(super) fn refill(&mut self, now_ns: u64) {
        let since = self.refilled_at_ns.unwrap_or(now_ns);
        let elapsed_us = now_ns.saturating_sub(since) / 1000;
        // Whole µs only: the rest stays for the next refill.
        self.refilled_at_ns = Some(since + elapsed_us * 1000);
        let earned = elapsed_us.saturating_mul(self.device_ns_per_us);
        let earned = i64::try_from(earned).unwrap_or(i64::MAX);
        self.tokens_ns = self.tokens_ns.saturating_add(earned).min(self.burst_ns);
    }

    /// Whether GC may issue another command the budget pays for.
    pub(super) fn allows(&self) -> bool {
        self.tokens_ns > 0
    }

    /// GC issued a command of `device_ns`.
    pub(super) fn charge(&mut self, device_ns: u64) {
        let cost = i64::try_from(device_ns).unwrap_or(i64::MAX);
        self.tokens_ns = self.tokens_ns.saturating_sub(cost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket(device_us_per_ms: u32, burst_us: u32) -> GcBucket {
        GcBucket::new(GcBudget {
            device_us_per_ms,
            burst_us,
        })
    }

    #[test]
    fn starts_full_and_stops_once_spent() {
        let mut b = bucket(1000, 500);
        b.refill(0);
        assert!(b.allows());
        b.charge(400_000);
        assert!(b.allows());
        b.charge(200_000); // 100 µs in debt
        assert!(!b.allows());
    }

    #[test]
    fn refills_at_its_rate_up_to_the_burst() {
        // 250 device µs per ms: 4 elapsed µs earn one device µs.
        let mut b = bucket(250, 1000);
        b.refill(1_000_000);
        b.charge(1_100_000); // 100 µs in debt
        b.refill(1_000_000 + 399_000);
        assert!(!b.allows(), "399 µs earn 99.75 µs");
        b.refill(1_000_000 + 401_000);
        assert!(b.allows());
        b.refill(u64::MAX / 2);
        b.charge(1_000_000);
        assert!(!b.allows(), "the burst caps what a pause saves");
    }

    #[test]
    fn a_clock_that_goes_back_earns_nothing() {
        let mut b = bucket(1000, 100);
        b.refill(5_000_000);
        b.charge(200_000);
        b.refill(1_000_000);
        assert!(!b.allows());
    }

    #[test]
    fn a_zero_rate_never_refills() {
        let mut b = bucket(0, 0);
        b.refill(0);
        assert!(!b.allows());
        b.refill(1 << 40);
        assert!(!b.allows());
    }
}
