//! The utility of one `adapt` experiment: how close a message workload
//! came to what the emulated link allows (seed 001 §6.4, the black-box
//! utility `u(E(R, w))` the learner maximizes).
//!
//! Model. A closed loop keeps `window` requests outstanding. With no
//! queueing and no loss, each exchange takes the link's round trip plus
//! the serialization of the request and the response at the bottleneck
//! rate, `ideal = rtt + (request + response) * 8 / rate`, so by Little's
//! law at most `window / ideal` exchanges complete per second; and all
//! outstanding exchanges share the bottleneck, which carries at most
//! `rate / (8 * (request + response))` of them per second. The bound is the
//! smaller of the two ([`exchange_bound`]): the first where the window
//! limits (small messages, long paths), the second where the link does
//! (large messages, many outstanding). The utility is the achieved rate
//! over that bound, in [0, 1]: 1 is the link's best, losses,
//! retransmissions, head-of-line blocking and a slow transport's set-up
//! all lower it. It is dimensionless, so environments
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

/// The most exchanges per second a closed loop of `window` outstanding
/// exchanges of `bytes` (both ways) can complete on a link of `rate_bps`
/// (0 = unlimited) where one exchange takes at least `ideal`: the smaller
/// of Little's law's `window / ideal` and the bottleneck's
/// `rate / (8 * bytes)`.
pub fn exchange_bound(window: u32, ideal: Duration, rate_bps: u64, bytes: u64) -> f64 {
    let by_window = f64::from(window) / ideal.as_secs_f64().max(1e-9);
    if rate_bps == 0 || bytes == 0 {
        return by_window;
    }
    by_window.min(rate_bps as f64 / (8.0 * bytes as f64))
}

/// Achieved exchanges per second over `bound` (exchanges per second, see
/// [`exchange_bound`]), clamped to [0, 1] (timing noise can put a perfect
/// run a hair above 1).
pub fn closed_loop(completed: u64, elapsed: Duration, bound: f64) -> f64 {
    if elapsed.is_zero() || bound <= 0.0 || !bound.is_finite() {
        return 0.0;
    }
    let achieved = completed as f64 / elapsed.as_secs_f64();
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
        let bound = exchange_bound(4, ideal, 0, 1000);
        assert!((bound - 200.0).abs() < 1e-9);
        assert!((closed_loop(400, Duration::from_secs(2), bound) - 1.0).abs() < 1e-9);
        assert!((closed_loop(200, Duration::from_secs(2), bound) - 0.5).abs() < 1e-9);
        assert_eq!(closed_loop(0, Duration::from_secs(2), bound), 0.0);
    }

    #[test]
    fn a_loop_that_fills_the_link_scores_one() {
        // 16 outstanding exchanges of 256 KiB + 512 B on 10 ms, 200 Mbit/s:
        // Little's law allows 16 / 20.5 ms = 780 a second, the link only
        // 200e6 / (8 * 262,656) = 95.2 of them.
        let bytes = (256 << 10) + 512;
        let ideal = ideal_exchange(Duration::from_millis(10), 200_000_000, bytes);
        let bound = exchange_bound(16, ideal, 200_000_000, bytes);
        assert!((bound - 95.18).abs() < 0.01, "{bound}");
        // A loop carrying 0.96 of the link's rate scores 0.96.
        let u = closed_loop((0.96 * bound * 2.0) as u64, Duration::from_secs(2), bound);
        assert!((u - 0.96).abs() < 0.01, "{u}");
        // With small messages the window is the limit, not the link.
        let ideal = ideal_exchange(Duration::from_millis(80), 50_000_000, 8704);
        assert!((exchange_bound(4, ideal, 50_000_000, 8704) - 4.0 / ideal.as_secs_f64()).abs() < 1e-9);
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
            let bound = exchange_bound(w, ideal, rate, bytes);
            prop_assert!(bound > 0.0 && bound <= f64::from(w) / ideal.as_secs_f64() + 1e-9);
            let u = closed_loop(done, Duration::from_millis(ms), bound);
            prop_assert!((0.0..=1.0).contains(&u));
            let l = latency(ideal, Some(Duration::from_millis(ms)));
            prop_assert!((0.0..=1.0).contains(&l));
        }
    }
}
