//! RED, "Random Early Detection Gateways for Congestion Avoidance" (Floyd
//! & Jacobson, IEEE/ACM ToN 1993), in the "gentle" mode Linux's `red`
//! qdisc offers (Floyd, "Optimum functioning of RED", 2000).
//!
//! Model: each arrival updates an exponentially weighted average of the
//! queue size, `avg ← (1 − w_q)·avg + w_q·q` (§4); after an idle period
//! the average decays as if `m` packets of `avpkt` had arrived to an empty
//! queue, `m` = idle time / one such packet's transmission time (§11).
//! Below `min_th` nothing is dropped; between `min_th` and `max_th` the
//! drop probability rises linearly to `max_p`
//! (`p_b = max_p·(avg − min_th)/(max_th − min_th)`); gentle mode continues
//! linearly from `max_p` at `max_th` to 1 at `2·max_th`, and above that
//! every arrival is dropped. Drops are spread out by counting packets
//! since the last drop (`p_a = p_b / (1 − count·p_b)`, §7, count
//! incremented before use as in the paper's Fig. 2), so the gap between
//! drops is uniform on 1..1/p_b − 1 instead of geometric: the mean drop
//! rate at a given `p_b` is 2·p_b.
//!
//! Defaults, from the queue limit as iproute2's `tc red` derives them when
//! thresholds are not given (`q_red.c`): `max_th = limit/4`,
//! `min_th = max_th/3` (= limit/12, Floyd's advice of max_th = 3·min_th),
//! `burst = (2·min_th + max_th)/(3·avpkt)` packets, and `w_q = 2^−Wlog`
//! with the smallest Wlog for which a burst of `burst` packets arriving
//! to an empty queue leaves the average below `min_th`
//! (`tc_red_eval_ewma`); `max_p` = 0.1, `avpkt` = 1000 bytes (tc's
//! defaults). With a limit in packets, sizes count packets and
//! `avpkt` = 1.

use std::time::Duration;

use braid_core::{Instant, Rng, RngExt};

use crate::spec::ResolvedQueue;
use crate::units::Rate;

/// RED's parameters, in the unit of the queue limit (bytes or packets).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct RedParams {
    pub min_th: f64,
    pub max_th: f64,
    pub max_p: f64,
    pub w_q: f64,
    /// Size of a typical packet, in the limit's unit.
    pub avpkt: f64,
    /// Transmission time of a typical packet (for the idle decay).
    pub avpkt_time: Duration,
}

/// The average packet size `tc red` assumes, bytes.
const AVPKT_BYTES: u64 = 1000;

/// `tc_red_eval_ewma`: the smallest Wlog such that `burst` packets
/// arriving to an empty queue keep the average below `min_th`.
fn eval_wlog(min_th: f64, burst: f64, avpkt: f64) -> u32 {
    let a = burst + 1.0 - min_th / avpkt;
    let mut w = 0.5f64;
    for wlog in 1..32 {
        if a <= (1.0 - (1.0 - w).powf(burst)) / w {
            return wlog;
        }
        w /= 2.0;
    }
    // Out of range (a tiny queue): Floyd's suggested w_q = 0.002 ≈ 2^−9.
    9
}

impl RedParams {
    /// Linux `tc red`'s defaults for a queue of `limit` served at `rate`.
    pub(crate) fn from_limit(limit: ResolvedQueue, rate: Rate) -> RedParams {
        let (limit, avpkt) = match limit {
            ResolvedQueue::Bytes(b) => (b as f64, AVPKT_BYTES as f64),
            ResolvedQueue::Packets(p) => (p as f64, 1.0),
        };
        let max_th = limit / 4.0;
        let min_th = max_th / 3.0;
        let burst = ((2.0 * min_th + max_th) / (3.0 * avpkt)).floor().max(1.0);
        let wlog = eval_wlog(min_th, burst, avpkt);
        RedParams {
            min_th,
            max_th,
            max_p: 0.1,
            w_q: 0.5f64.powi(wlog as i32),
            avpkt,
            avpkt_time: rate.transmit_time(AVPKT_BYTES),
        }
    }
}

/// RED's state.
#[derive(Debug, Clone)]
pub(crate) struct Red {
    params: RedParams,
    avg: f64,
    /// Packets since the last drop while avg was in the drop region;
    /// `None` outside it (Floyd's `count = −1`).
    count: Option<u64>,
}

impl Red {
    pub(crate) fn new(params: RedParams) -> Red {
        Red {
            params,
            avg: 0.0,
            count: None,
        }
    }

    pub(crate) fn params(&self) -> RedParams {
        self.params
    }

    pub(crate) fn set_params(&mut self, params: RedParams) {
        self.params = params;
    }

    /// The average queue size.
    #[cfg(test)]
    pub(crate) fn avg(&self) -> f64 {
        self.avg
    }

    /// The probability `p_b` at the current average (1 above 2·max_th).
    fn p_b(&self) -> f64 {
        let p = &self.params;
        if self.avg < p.min_th {
            0.0
        } else if self.avg < p.max_th {
            p.max_p * (self.avg - p.min_th) / (p.max_th - p.min_th).max(f64::MIN_POSITIVE)
        } else if self.avg < 2.0 * p.max_th {
            p.max_p + (1.0 - p.max_p) * (self.avg - p.max_th) / p.max_th.max(f64::MIN_POSITIVE)
        } else {
            1.0
        }
    }

    /// Whether to drop a packet arriving to a queue of `queued` (in the
    /// limit's unit) that has been empty since `idle_since` if `queued` is
    /// zero.
    pub(crate) fn drop_on_arrival(
        &mut self,
        now: Instant,
        queued: f64,
        idle_since: Instant,
        rng: &mut Rng,
    ) -> bool {
        let p = self.params;
        if queued > 0.0 {
            self.avg += p.w_q * (queued - self.avg);
        } else {
            let idle = now.saturating_duration_since(idle_since).as_secs_f64();
            let m = idle / p.avpkt_time.as_secs_f64().max(1e-12);
            self.avg *= (1.0 - p.w_q).powf(m);
        }
        let p_b = self.p_b();
        if p_b <= 0.0 {
            self.count = None;
            return false;
        }
        if p_b >= 1.0 {
            self.count = Some(0);
            return true;
        }
        let count = self.count.map_or(0, |c| c + 1);
        let denom = 1.0 - count as f64 * p_b;
        let p_a = if denom <= 0.0 { 1.0 } else { p_b / denom };
        if rng.random::<f64>() < p_a {
            self.count = Some(0);
            true
        } else {
            self.count = Some(count);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_core::SeedableRng;

    fn red(limit: u64) -> Red {
        Red::new(RedParams::from_limit(
            ResolvedQueue::Bytes(limit),
            Rate::from_mbit(10),
        ))
    }

    /// Fraction dropped of `n` arrivals to a queue held at `q` bytes
    /// (after the average has converged to it).
    fn drop_rate(r: &mut Red, q: f64, n: u64, rng: &mut Rng) -> f64 {
        for _ in 0..20_000 {
            r.drop_on_arrival(Instant::ZERO, q, Instant::ZERO, rng);
        }
        assert!(
            (r.avg() - q).abs() < 1e-6 * q.max(1.0),
            "avg {} q {q}",
            r.avg()
        );
        let drops = (0..n)
            .filter(|_| r.drop_on_arrival(Instant::ZERO, q, Instant::ZERO, rng))
            .count();
        drops as f64 / n as f64
    }

    #[test]
    fn thresholds_follow_tc_red_defaults() {
        let p = RedParams::from_limit(ResolvedQueue::Bytes(1_200_000), Rate::from_mbit(10));
        assert_eq!(p.max_th, 300_000.0);
        assert_eq!(p.min_th, 100_000.0);
        assert_eq!(p.max_p, 0.1);
        // burst = (2·100 kB + 300 kB)/3 kB = 166 packets; w_q is the
        // largest power of two with (1 − (1 − w)^166)/w ≥ 166 + 1 − 100.
        let ok = |w: f64| (1.0 - (1.0 - w).powf(166.0)) / w >= 67.0;
        assert!(ok(p.w_q) && !ok(2.0 * p.w_q), "w_q {}", p.w_q);
        assert_eq!(p.w_q, 0.5f64.powi(7));
    }

    /// The long-run drop rate of the count-based spreading at a fixed
    /// `p_b`: one over the mean gap between drops.
    fn spread_rate(p_b: f64) -> f64 {
        let (mut survive, mut mean) = (1.0, 0.0);
        // The n-th packet after a drop has count = n (Floyd's Fig. 2
        // increments count before computing p_a).
        for n in 1..10_000u32 {
            let denom = 1.0 - f64::from(n) * p_b;
            let p_a = if denom <= 0.0 {
                1.0
            } else {
                (p_b / denom).min(1.0)
            };
            mean += f64::from(n) * survive * p_a;
            survive *= 1.0 - p_a;
        }
        1.0 / mean
    }

    #[test]
    fn no_drops_below_min_th_about_max_p_near_max_th_all_above_twice_max() {
        let mut rng = Rng::seed_from_u64(1);
        let mut r = red(1_200_000);
        assert_eq!(drop_rate(&mut r, 99_000.0, 50_000, &mut rng), 0.0);
        // Just below max_th, p_b → max_p = 0.1: with the count-based
        // spreading the gap between drops is uniform on 1..9 packets,
        // a rate of 1/5 = 2·max_p.
        assert!((spread_rate(0.1) - 0.2).abs() < 1e-9);
        let rate = drop_rate(&mut r, 299_999.0, 200_000, &mut rng);
        assert!((rate - 0.2).abs() < 0.01, "rate {rate}");
        // Gentle region: halfway from max_th to 2·max_th, p_b = 0.55.
        let rate = drop_rate(&mut r, 450_000.0, 200_000, &mut rng);
        let want = spread_rate(0.55);
        assert!((rate - want).abs() < 0.01, "rate {rate} want {want}");
        assert_eq!(drop_rate(&mut r, 600_001.0, 10_000, &mut rng), 1.0);
    }

    #[test]
    fn average_decays_over_idle_time() {
        let mut rng = Rng::seed_from_u64(2);
        let mut r = red(1_200_000);
        for _ in 0..20_000 {
            r.drop_on_arrival(Instant::ZERO, 200_000.0, Instant::ZERO, &mut rng);
        }
        // Idle for 1000 packet times (0.8 ms each at 10 Mbit/s).
        let later = Instant::ZERO + Duration::from_millis(800);
        r.drop_on_arrival(later, 0.0, Instant::ZERO, &mut rng);
        let want = 200_000.0 * (1.0 - r.params.w_q).powf(1000.0);
        assert!((r.avg() - want).abs() < 1.0, "{} vs {want}", r.avg());
    }
}
