//! The utility of one `adapt` experiment: how close a message workload
//! came to what the emulated link allows (seed 001 §6.4, the black-box
//! utility `u(E(R, w))` the learner maximizes).
//!
//! Model. A closed loop keeps `window` requests outstanding. With no
//! queueing and no loss, each exchange takes the link's round trip plus
//! the serialization of the request and the response at the bottleneck
//! rate, `ideal = rtt + (request + response) * 8 / rate`, so by Little's
//! law at most `window / ideal` exchanges complete per second. The
//! utility is the achieved rate over that bound, in [0, 1]: 1 is the link's
//! best, losses, retransmissions, head-of-line blocking and a slow
//! transport's set-up all lower it. It is dimensionless, so environments
//! with different RTTs and rates aggregate fairly (mean, minimum,
//! quantile), and bounded, so the learner can abort hopeless rule sets.

use std::time::Duration;

/// The best time for one exchange on a link of `rtt` and `rate_bps`
/// (0 = unlimited) carrying `bytes` both ways; at least 1 µs, so a zero
/// RTT link still has a finite bound.
pub fn ideal_exchange(rtt: Duration, rate_bps: u64, bytes: u64) -> Duration {
    let tx = if rate_bps == 0 { 0.0 } else { bytes as f64 * 8.0 / rate_bps as f64 };
    (rtt + Duration::from_secs_f64(tx)).max(Duration::from_micros(1))
}

/// Achieved exchanges per second over the bound `window / ideal`, clamped
/// to [0, 1] (timing noise can put a perfect run a hair above 1).
pub fn closed_loop(completed: u64, elapsed: Duration, window: u32, ideal: Duration) -> f64 {
    if elapsed.is_zero() || window == 0 {
        return 0.0;
    }
    let achieved = completed as f64 / elapsed.as_secs_f64();
    let bound = f64::from(window) / ideal.as_secs_f64();
    (achieved / bound).clamp(0.0, 1.0)
}

/// The `q`-quantile (nearest rank) of `xs`, `None` when empty.
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).saturating_sub(1).min(v.len() - 1);
    Some(v[i])
}

/// Latency utility of interactive messages: the ideal exchange over the
/// measured `p95`, in (0, 1]; 0 when none was answered.
pub fn latency(ideal: Duration, p95: Option<Duration>) -> f64 {
    match p95 {
        Some(p) if !p.is_zero() => (ideal.as_secs_f64() / p.as_secs_f64()).clamp(0.0, 1.0),
        Some(_) => 1.0,
        None => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_perfect_loop_scores_one_and_half_the_rate_scores_half() {
        let ideal = ideal_exchange(Duration::from_millis(20), 0, 1000);
        assert_eq!(ideal, Duration::from_millis(20));
        // 4 outstanding over 20 ms: 200 per second at best.
        assert!((closed_loop(400, Duration::from_secs(2), 4, ideal) - 1.0).abs() < 1e-9);
        assert!((closed_loop(200, Duration::from_secs(2), 4, ideal) - 0.5).abs() < 1e-9);
        assert_eq!(closed_loop(0, Duration::from_secs(2), 4, ideal), 0.0);
    }

    #[test]
    fn serialization_at_the_bottleneck_is_part_of_the_ideal() {
        // 10 kB at 8 Mbit/s: 10 ms on top of the RTT.
        let ideal = ideal_exchange(Duration::from_millis(20), 8_000_000, 10_000);
        assert_eq!(ideal, Duration::from_millis(30));
    }

    #[test]
    fn latency_utility_is_ideal_over_p95() {
        let ideal = Duration::from_millis(10);
        assert!((latency(ideal, Some(Duration::from_millis(40))) - 0.25).abs() < 1e-9);
        assert_eq!(latency(ideal, None), 0.0);
        assert_eq!(quantile(&[3.0, 1.0, 2.0, 4.0], 0.5), Some(2.0));
        assert_eq!(quantile(&[], 0.5), None);
    }

    proptest! {
        #[test]
        fn utilities_stay_in_the_unit_interval(done in 0u64..1_000_000, ms in 1u64..100_000, w in 1u32..512, rtt in 0u64..2_000, rate in 0u64..10_000_000_000, bytes in 0u64..10_000_000) {
            let ideal = ideal_exchange(Duration::from_millis(rtt), rate, bytes);
            let u = closed_loop(done, Duration::from_millis(ms), w, ideal);
            prop_assert!((0.0..=1.0).contains(&u));
            let l = latency(ideal, Some(Duration::from_millis(ms)));
            prop_assert!((0.0..=1.0).contains(&l));
        }
    }
}
