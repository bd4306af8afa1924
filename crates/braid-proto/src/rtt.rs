//! RTT estimation and the retransmission timeout of RFC 6298.
//!
//! Karn's rule (RFC 6298 §3) forbids RTT samples from retransmitted
//! segments because an ACK cannot say which transmission it answers. Braid
//! gives every transmission a fresh packet number, so every sample is
//! unambiguous and the rule holds by construction; what remains of it is
//! the backoff (§5.5): a backed-off RTO is kept until a sample from a new
//! acknowledgement arrives (§5.7).

use std::time::Duration;

use crate::cc::RttEstimate;

/// RFC 6298 estimator with backoff.
#[derive(Debug, Clone)]
pub struct RttEstimator {
    srtt: Option<Duration>,
    rttvar: Duration,
    latest: Duration,
    min: Duration,
    initial: Duration,
    min_rto: Duration,
    max_rto: Duration,
    /// Consecutive RTO expirations: the RTO is multiplied by 2^backoff.
    backoff: u32,
}

/// Clock granularity G of RFC 6298 (2.2): we use a 1 ms timer floor.
const GRANULARITY: Duration = Duration::from_millis(1);

impl RttEstimator {
    pub fn new(initial: Duration, min_rto: Duration, max_rto: Duration) -> Self {
        RttEstimator {
            srtt: None,
            rttvar: initial / 2,
            latest: initial,
            min: Duration::MAX,
            initial,
            min_rto,
            max_rto,
            backoff: 0,
        }
    }

    /// Feeds one sample (RFC 6298 (2.2) for the first, (2.3) afterwards).
    /// The sample also ends any backoff (§5.7).
    pub fn update(&mut self, sample: Duration) {
        let sample = sample.max(Duration::from_micros(1));
        self.latest = sample;
        self.min = self.min.min(sample);
        self.backoff = 0;
        match self.srtt {
            None => {
                self.srtt = Some(sample);
                self.rttvar = sample / 2;
            }
            Some(srtt) => {
                // RTTVAR <- (1 - 1/4) * RTTVAR + 1/4 * |SRTT - R'|
                let diff = srtt.abs_diff(sample);
                self.rttvar = self.rttvar * 3 / 4 + diff / 4;
                // SRTT <- (1 - 1/8) * SRTT + 1/8 * R'
                self.srtt = Some(srtt * 7 / 8 + sample / 8);
            }
        }
    }

    /// The RTO timer expired: double the timeout (§5.5).
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(16);
    }

    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    pub fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    pub fn smoothed(&self) -> Duration {
        self.srtt.unwrap_or(self.initial)
    }

    /// RTTVAR (the initial RTT's half before any sample).
    pub fn variation(&self) -> Duration {
        self.rttvar
    }

    pub fn latest(&self) -> Duration {
        self.latest
    }

    pub fn min(&self) -> Duration {
        if self.min == Duration::MAX { self.initial } else { self.min }
    }

    /// RTO = SRTT + max(G, 4·RTTVAR) (2.3), at least `min_rto` (2.4), times
    /// 2^backoff, at most `max_rto` (2.5). Before any sample the initial RTT
    /// stands in for SRTT.
    pub fn rto(&self) -> Duration {
        let base = self.smoothed() + (self.rttvar * 4).max(GRANULARITY);
        let base = base.max(self.min_rto);
        base.checked_mul(1 << self.backoff).unwrap_or(self.max_rto).min(self.max_rto)
    }

    pub fn estimate(&self) -> RttEstimate {
        RttEstimate { latest: self.latest, smoothed: self.smoothed(), min: self.min() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est() -> RttEstimator {
        RttEstimator::new(Duration::from_millis(333), Duration::from_millis(200), Duration::from_secs(60))
    }

    #[test]
    fn first_sample_sets_srtt_and_half_variance() {
        let mut e = est();
        e.update(Duration::from_millis(100));
        assert_eq!(e.smoothed(), Duration::from_millis(100));
        // RTO = 100 + 4 * 50 = 300 ms
        assert_eq!(e.rto(), Duration::from_millis(300));
    }

    #[test]
    fn later_samples_follow_the_ewma() {
        let mut e = est();
        e.update(Duration::from_millis(100));
        e.update(Duration::from_millis(200));
        // RTTVAR = 3/4*50 + 1/4*100 = 62.5; SRTT = 7/8*100 + 1/8*200 = 112.5
        assert_eq!(e.smoothed(), Duration::from_micros(112_500));
        assert_eq!(e.rto(), Duration::from_micros(112_500 + 250_000));
    }

    #[test]
    fn backoff_doubles_until_the_cap_and_a_sample_resets_it() {
        let mut e = est();
        e.update(Duration::from_millis(10));
        assert_eq!(e.rto(), Duration::from_millis(200)); // min RTO
        e.back_off();
        assert_eq!(e.rto(), Duration::from_millis(400));
        for _ in 0..20 {
            e.back_off();
        }
        assert_eq!(e.rto(), Duration::from_secs(60));
        e.update(Duration::from_millis(10));
        assert_eq!(e.rto(), Duration::from_millis(200));
    }
}
