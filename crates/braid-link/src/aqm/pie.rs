//! PIE, "Proportional Integral controller Enhanced" (Pan, Natarajan,
//! Baker, White: RFC 8033, 2017): drops arriving packets with a
//! probability that a PI controller steers so the queueing delay settles
//! at a target.
//!
//! Model (RFC 8033 §4): every `t_update` (15 ms) the drop probability
//! moves by `alpha·(qdelay − target) + beta·(qdelay − qdelay_old)`
//! (alpha = 0.125, beta = 1.25, delays in seconds), the step scaled down
//! while the probability is small (the auto-tuning of §4.2: ÷2048 below
//! 10⁻⁶, … ÷2 below 0.1), capped at +2% once it is above 10%, decayed by
//! 2% per update while the queue stays empty, and bounded to [0, 1]. An
//! arriving packet is dropped with that probability (§4.1), except during
//! the burst allowance (150 ms, §4.4, restored once the probability is 0
//! and the delay is below half the target), when the last delay was below
//! half the target and the probability below 0.2, or when the queue holds
//! at most two packets (the work-conserving safeguards of §5.1). Drops are
//! de-randomized as in §5.4: a packet is never dropped while the
//! accumulated probability since the last drop is below 0.85, always once
//! it reaches 8.5.
//!
//! Queueing delay: RFC 8033 §4.3 estimates it as queue length / departure
//! rate (Linux now defaults to timestamps instead). Here the rate limiter's
//! own schedule gives it exactly: the delay at time T is how long the
//! bytes queued at T take to drain, `busy_until − T`, which is what both
//! estimators approximate (and is right on a rate trace too).
//! The optional activation/deactivation of §5.2 (PIE idle below a third
//! of the buffer) is left out, as in Linux.

use std::time::Duration;

use braid_core::{Instant, Rng, RngExt};

/// PIE's parameters (RFC 8033 §4 defaults except the target, which the
/// spec may set).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct PieParams {
    /// `QDELAY_REF`: the queueing delay to settle at (15 ms by default).
    pub target: Duration,
    /// `T_UPDATE`: how often the drop probability is recomputed.
    pub t_update: Duration,
    /// Weight of the distance from target, per second.
    pub alpha: f64,
    /// Weight of the delay's trend, per second.
    pub beta: f64,
    /// `MAX_BURST`: burst allowance.
    pub max_burst: Duration,
    /// `MEAN_PKTSIZE`, bytes: a queue of two such packets never drops.
    pub mean_packet: u64,
}

impl PieParams {
    /// RFC 8033's defaults with `target`.
    pub(crate) fn new(target: Duration, mean_packet: u64) -> PieParams {
        PieParams {
            target,
            t_update: Duration::from_millis(15),
            alpha: 0.125,
            beta: 1.25,
            max_burst: Duration::from_millis(150),
            mean_packet,
        }
    }
}

/// PIE's state (RFC 8033 §4 `PIE->` variables).
#[derive(Debug, Clone)]
pub(crate) struct Pie {
    params: PieParams,
    drop_prob: f64,
    qdelay_old: f64,
    burst_allowance: f64,
    accu_prob: f64,
    /// When the next probability update is due.
    next_update: Instant,
}

impl Pie {
    pub(crate) fn new(params: PieParams, now: Instant) -> Pie {
        Pie {
            params,
            drop_prob: 0.0,
            qdelay_old: 0.0,
            burst_allowance: params.max_burst.as_secs_f64(),
            accu_prob: 0.0,
            next_update: now + params.t_update,
        }
    }

    pub(crate) fn params(&self) -> PieParams {
        self.params
    }

    pub(crate) fn set_params(&mut self, params: PieParams) {
        self.params = params;
    }

    /// The drop probability now.
    #[cfg(test)]
    pub(crate) fn drop_prob(&self) -> f64 {
        self.drop_prob
    }

    /// Run the periodic updates due by `now`; `drains_at` is when the bytes
    /// queued now will have left (no arrival came since the last call, so
    /// it holds for every update in between).
    fn catch_up(&mut self, now: Instant, drains_at: Instant) {
        while self.next_update <= now {
            let t = self.next_update;
            let qdelay = drains_at.saturating_duration_since(t).as_secs_f64();
            // Once idle with nothing left to decay, later updates change
            // nothing: skip them.
            if qdelay == 0.0 && self.qdelay_old == 0.0 && self.drop_prob == 0.0 {
                self.burst_allowance = self.params.max_burst.as_secs_f64();
                let period = self.params.t_update.as_nanos().max(1) as u64;
                let behind = (now - t).as_nanos() as u64 / period;
                self.next_update = t + Duration::from_nanos((behind + 1) * period);
                break;
            }
            self.update(qdelay);
            self.next_update = t + self.params.t_update;
        }
    }

    /// `calculate_drop_prob` (RFC 8033 §4.2 and Appendix A) with the
    /// current queueing delay `qdelay`, seconds.
    fn update(&mut self, qdelay: f64) {
        let p = &self.params;
        let target = p.target.as_secs_f64();
        let mut step = p.alpha * (qdelay - target) + p.beta * (qdelay - self.qdelay_old);
        // Auto-tuning: small probabilities move in small steps.
        let scale = [
            (0.000_001, 2048.0),
            (0.000_01, 512.0),
            (0.000_1, 128.0),
            (0.001, 32.0),
            (0.01, 8.0),
            (0.1, 2.0),
        ]
        .into_iter()
        .find(|&(below, _)| self.drop_prob < below)
        .map_or(1.0, |(_, s)| s);
        step /= scale;
        // Never more than +2% at once when already above 10%.
        if self.drop_prob >= 0.1 && step > 0.02 {
            step = 0.02;
        }
        self.drop_prob += step;
        // Decay while the queue stays empty.
        if qdelay == 0.0 && self.qdelay_old == 0.0 {
            self.drop_prob *= 0.98;
        }
        self.drop_prob = self.drop_prob.clamp(0.0, 1.0);
        if self.burst_allowance > 0.0 {
            self.burst_allowance = (self.burst_allowance - p.t_update.as_secs_f64()).max(0.0);
        } else if self.drop_prob == 0.0 && qdelay < target / 2.0 && self.qdelay_old < target / 2.0 {
            self.burst_allowance = p.max_burst.as_secs_f64();
        }
        self.qdelay_old = qdelay;
    }

    /// Whether to drop a packet arriving at `now` to a queue of
    /// `backlog_bytes` that drains at `drains_at` (`drop_early`, §4.1 with
    /// §5.1 and §5.4).
    pub(crate) fn drop_early(
        &mut self,
        now: Instant,
        backlog_bytes: u64,
        drains_at: Instant,
        rng: &mut Rng,
    ) -> bool {
        self.catch_up(now, drains_at);
        let p = &self.params;
        if self.burst_allowance > 0.0 {
            return false;
        }
        if (self.qdelay_old < p.target.as_secs_f64() / 2.0 && self.drop_prob < 0.2)
            || backlog_bytes <= 2 * p.mean_packet
        {
            return false;
        }
        if self.drop_prob == 0.0 {
            self.accu_prob = 0.0;
        }
        self.accu_prob += self.drop_prob;
        if self.accu_prob < 0.85 {
            return false;
        }
        if self.accu_prob >= 8.5 || rng.random::<f64>() < self.drop_prob {
            self.accu_prob = 0.0;
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::SeedableRng;

    #[test]
    fn drop_probability_rises_above_target_and_decays_when_idle() {
        let mut rng = Rng::seed_from_u64(1);
        let mut pie = Pie::new(
            PieParams::new(Duration::from_millis(15), 1500),
            Instant::ZERO,
        );
        let ms = |x: u64| Instant::ZERO + Duration::from_millis(x);
        // A standing 50 ms queue for 2 s: every update raises the
        // probability (alpha·35 ms > 0, no trend).
        let mut last = 0.0;
        for t in (5..=2000).step_by(5) {
            pie.drop_early(ms(t), 100_000, ms(t) + Duration::from_millis(50), &mut rng);
            assert!(pie.drop_prob() >= last, "fell at {t} ms");
            last = pie.drop_prob();
        }
        // Auto-tuning: 0.125·0.035 per update is 0.0044; divided by 2048
        // at first, it reaches 0.1 within 2 s only thanks to the larger
        // steps as the probability grows.
        assert!(last > 0.1, "probability {last}");
        // No arrival after 2 s: the queue drains by 2.05 s, then stays
        // empty for 10 s; the negative proportional term and the 2%
        // decay per update empty the probability.
        pie.drop_early(ms(12_000), 0, ms(2050), &mut rng);
        assert_eq!(pie.drop_prob(), 0.0);
    }

    #[test]
    fn burst_allowance_and_small_queues_are_never_dropped() {
        let mut rng = Rng::seed_from_u64(2);
        let mut pie = Pie::new(
            PieParams::new(Duration::from_millis(15), 1500),
            Instant::ZERO,
        );
        let ms = |x: u64| Instant::ZERO + Duration::from_millis(x);
        // Within the first 150 ms nothing is dropped, however deep the queue.
        for t in 0..150 {
            assert!(!pie.drop_early(ms(t), 1_000_000, ms(t) + Duration::from_secs(1), &mut rng));
        }
        // Later, with a high probability, a queue of two packets still passes.
        for t in 150..3000 {
            pie.drop_early(ms(t), 1_000_000, ms(t) + Duration::from_secs(1), &mut rng);
        }
        assert!(pie.drop_prob() > 0.5);
        assert!(!pie.drop_early(ms(3000), 3000, ms(3000) + Duration::from_secs(1), &mut rng));
    }
}
