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
    /// The RTO is at least this many smoothed RTTs (0 = no such floor).
    srtt_floor: u32,
}

/// Clock granularity G of RFC 6298 (2.2): we use a 1 ms timer floor.
const GRANULARITY: Duration = Duration::from_millis(1);

impl RttEstimator {
    /// An estimator with `initial` standing in for SRTT until the first
    /// sample, and the RTO clamped to `min_rto..=max_rto`.
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
            srtt_floor: 0,
        }
    }

    /// Keep the RTO at least `multiple` smoothed RTTs. A protocol that
    /// recovers ordinary losses by other means (RACK, RFC 8985) and keeps
    /// the timer as a backstop uses 2, RFC 8985 §7.2's probe timeout: a
    /// timer fired spuriously by queueing delay alone resends a whole
    /// flight.
    pub fn with_srtt_floor(mut self, multiple: u32) -> Self {
        self.srtt_floor = multiple;
        self
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

    /// Consecutive timeouts since the last sample.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }

    /// Forget the backoff without a sample: the peer answered in another
    /// way (an acknowledgement that carried no usable RTT sample).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// True once a sample arrived.
    pub fn has_sample(&self) -> bool {
        self.srtt.is_some()
    }

    /// SRTT, or the initial RTT before any sample.
    pub fn smoothed(&self) -> Duration {
        self.srtt.unwrap_or(self.initial)
    }

    /// RTTVAR (the initial RTT's half before any sample).
    pub fn variation(&self) -> Duration {
        self.rttvar
    }

    /// The latest sample (the initial RTT before any).
    pub fn latest(&self) -> Duration {
        self.latest
    }

    /// The smallest sample (the initial RTT before any).
    pub fn min(&self) -> Duration {
        if self.min == Duration::MAX { self.initial } else { self.min }
    }

    /// RTO = SRTT + max(G, 4·RTTVAR) (2.3), at least `min_rto` (2.4), times
    /// 2^backoff, at most `max_rto` (2.5). Before any sample the initial RTT
    /// stands in for SRTT.
    pub fn rto(&self) -> Duration {
        let base = self.smoothed() + (self.rttvar * 4).max(GRANULARITY);
        let base = base.max(self.min_rto).max(self.smoothed() * self.srtt_floor);
        base.checked_mul(1 << self.backoff).unwrap_or(self.max_rto).min(self.max_rto)
    }

    /// The estimates a congestion controller is handed.
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

    #[test]
    fn the_srtt_floor_holds_the_rto_above_k_srtt() {
        let mut e = est().with_srtt_floor(2);
        e.update(Duration::from_millis(150));
        // 150 + 4 * 75 = 450 > 300: the floor does not bind.
        assert_eq!(e.rto(), Duration::from_millis(450));
        for _ in 0..30 {
            e.update(Duration::from_millis(150));
        }
        // RTTVAR decays towards 0: the RTO approaches SRTT + G, held at 2 SRTT.
        assert_eq!(e.rto(), Duration::from_millis(300));
    }
}
