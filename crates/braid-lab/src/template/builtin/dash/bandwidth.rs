//! Link rates over time for the `dash` template, written as Mahimahi
//! delivery-opportunity traces (the format `trace=FILE` of a link spec
//! takes; see `braid_link::trace`).
//!
//! - [`rate_process`]: the study's bandwidth environment (seed 001 ch. 8:
//!   bandwidth mean × variance). Model: the rate is constant for one
//!   second, then redrawn, independently, from a gamma distribution with
//!   the given mean μ and variance σ² (shape k = μ²/σ², scale θ = σ²/μ: a
//!   non-negative, right-skewed rate like a cellular link's), truncated
//!   below at a floor (a link that never quite stops: the floor stays far
//!   below the lowest representation, so it still forces stalls). σ² = 0
//!   is the constant rate μ. Truncation raises the realized mean slightly
//!   when σ is large next to μ; the realized mean and variance are
//!   returned so the lab records what the link really did.
//! - [`outage`]: the stall test's link cut as a trace: no delivery
//!   opportunity for the cut's length (packets wait in the queue, as on a
//!   cellular link in a dead zone), then a steady rate. Waiting instead of
//!   dropping matters: dropped packets make TCP back its retransmission
//!   timer off exponentially, so the flow would resume seconds after the
//!   link does and the stall would measure TCP's backoff, not the cut.

use std::fmt::Write as _;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Bytes one delivery opportunity carries (Mahimahi's MTU-sized packet).
const BYTES_PER_OPPORTUNITY: f64 = 1500.0;

/// How often the rate is redrawn, milliseconds.
pub const REDRAW_MS: u64 = 1000;

/// A generated trace: the file's text and what the rate process did.
#[derive(Debug, Clone, PartialEq)]
pub struct RateTrace {
    /// The Mahimahi trace (one millisecond time per line).
    pub text: String,
    /// The rate of each redraw interval, Mbit/s.
    pub rates_mbps: Vec<f64>,
}

impl RateTrace {
    /// Mean of the drawn rates, Mbit/s.
    pub fn mean_mbps(&self) -> f64 {
        if self.rates_mbps.is_empty() {
            return 0.0;
        }
        self.rates_mbps.iter().sum::<f64>() / self.rates_mbps.len() as f64
    }

    /// Variance of the drawn rates, (Mbit/s)².
    pub fn variance(&self) -> f64 {
        let n = self.rates_mbps.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean_mbps();
        self.rates_mbps.iter().map(|r| (r - m) * (r - m)).sum::<f64>() / (n - 1) as f64
    }
}

/// `seconds` of the rate process with `mean_mbps` and `variance`
/// ((Mbit/s)²), floored at `floor_mbps`, from `seed`. The caller checks
/// the arguments (positive mean, non-negative variance, floor below mean).
pub fn rate_process(mean_mbps: f64, variance: f64, floor_mbps: f64, seconds: u64, seed: u64) -> RateTrace {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let steps = seconds.max(1) * 1000 / REDRAW_MS;
    let rates_mbps: Vec<f64> = (0..steps)
        .map(|_| {
            let r = if variance > 0.0 {
                let shape = mean_mbps * mean_mbps / variance;
                let scale = variance / mean_mbps;
                gamma(&mut rng, shape) * scale
            } else {
                mean_mbps
            };
            r.max(floor_mbps)
        })
        .collect();
    let text = opportunities(rates_mbps.iter().map(|&r| (REDRAW_MS, r)));
    RateTrace { text, rates_mbps }
}

/// The link cut: nothing for `cut_ms`, then `after_mbps` for `after_ms`.
pub fn outage(cut_ms: u64, after_mbps: f64, after_ms: u64) -> String {
    opportunities([(cut_ms, 0.0), (after_ms.max(1), after_mbps)].into_iter())
}

/// A Mahimahi trace of consecutive (milliseconds, Mbit/s) pieces: an
/// opportunity whenever the bits the rate has carried since the last one
/// reach a packet. The last line is the trace's period (the total length),
/// so the pieces repeat with their own timing.
fn opportunities(pieces: impl Iterator<Item = (u64, f64)>) -> String {
    let mut text = String::new();
    let mut t = 0u64;
    let mut credit = 0.0f64;
    let mut last = None;
    for (ms, mbps) in pieces {
        // Packets per millisecond at this rate.
        let per_ms = mbps.max(0.0) * 1e6 / 8.0 / BYTES_PER_OPPORTUNITY / 1000.0;
        for _ in 0..ms {
            t += 1;
            credit += per_ms;
            while credit >= 1.0 {
                credit -= 1.0;
                let _ = writeln!(text, "{t}");
                last = Some(t);
            }
        }
    }
    // The period must be the whole length even if its end carried nothing.
    if last != Some(t) && t > 0 {
        let _ = writeln!(text, "{t}");
    }
    text
}

/// A uniform draw in (0, 1).
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    // 53 random bits, shifted off zero.
    ((rng.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
}

/// A standard normal draw (Box–Muller).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let (u, v) = (unit(rng), unit(rng));
    (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
}

/// A Gamma(shape, 1) draw: Marsaglia and Tsang, "A Simple Method for
/// Generating Gamma Variables" (ACM TOMS 26(3), 2000), with the usual
/// boost `Gamma(k) = Gamma(k + 1) · U^(1/k)` for shape below 1.
fn gamma(rng: &mut ChaCha8Rng, shape: f64) -> f64 {
    if shape < 1.0 {
        let boost = unit(rng).powf(1.0 / shape);
        return gamma(rng, shape + 1.0) * boost;
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        let u = unit(rng);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &str) -> Vec<u64> {
        text.lines().map(|l| l.parse().unwrap()).collect()
    }

    #[test]
    fn a_constant_rate_carries_its_bits() {
        // 12 Mbit/s is one 1500-byte packet per millisecond.
        let t = rate_process(12.0, 0.0, 0.1, 10, 1);
        let times = parse(&t.text);
        assert_eq!(times.len(), 10_000);
        assert_eq!(times[0], 1);
        assert_eq!(*times.last().unwrap(), 10_000);
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(t.variance(), 0.0);
    }

    #[test]
    fn the_outage_carries_nothing_then_its_rate() {
        let times = parse(&outage(10_000, 12.0, 2_000));
        assert_eq!(times[0], 10_001);
        assert_eq!(times.len(), 2_000);
        assert_eq!(*times.last().unwrap(), 12_000);
    }

    #[test]
    fn the_trace_is_accepted_by_the_link_model() {
        let dir = std::env::temp_dir().join(format!("braid-dash-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, text) in [("p", rate_process(2.0, 2.0, 0.1, 30, 3).text), ("o", outage(10_000, 5.0, 1000))] {
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            let spec: braid::LinkSpec = format!("rtt=20ms,trace={}", path.display()).parse().unwrap();
            assert!(spec.to_string().contains("trace="));
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The drawn rates have the asked mean and variance (the floor is
        /// set far below, so truncation does not bias them), and the trace
        /// carries the drawn bits.
        #[test]
        fn the_process_has_its_mean_and_variance(
            mean in 1.0f64..10.0, cv in 0.0f64..0.6, seed in any::<u64>()
        ) {
            let variance = (cv * mean).powi(2);
            let t = rate_process(mean, variance, 1e-6, 3000, seed);
            let m = t.mean_mbps();
            // Standard error of the mean of 3000 draws: σ/√3000 < 0.02 σ.
            prop_assert!((m - mean).abs() <= 0.1 * cv * mean + 1e-9, "mean {m} vs {mean}");
            if variance > 0.01 {
                prop_assert!((t.variance() / variance - 1.0).abs() < 0.2, "variance {} vs {variance}", t.variance());
            }
            let bits = parse(&t.text).len() as f64 * 1500.0 * 8.0;
            let expected: f64 = t.rates_mbps.iter().sum::<f64>() * 1e6;
            prop_assert!((bits - expected).abs() <= 1500.0 * 8.0 * 2.0, "{bits} vs {expected}");
        }

        #[test]
        fn the_floor_holds(mean in 0.5f64..5.0, variance in 0.0f64..10.0, seed in any::<u64>()) {
            let t = rate_process(mean, variance, 0.1, 200, seed);
            prop_assert!(t.rates_mbps.iter().all(|&r| r >= 0.1));
        }
    }
}
