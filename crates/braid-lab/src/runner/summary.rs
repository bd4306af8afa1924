//! What a run did: counts, elapsed time and the runner's own overhead per
//! experiment, as JSON (serde) and as table rows.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The outcome of [`run`](super::run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// Distinct experiments in the plan.
    pub planned: usize,
    /// Already stored (ok; failed too unless retrying), so not run.
    pub skipped: usize,
    /// Run now.
    pub ran: usize,
    /// Of those, succeeded.
    pub ok: usize,
    /// Failed (an error, a panic, a nonzero exit).
    pub failed: usize,
    /// Timed out.
    pub timed_out: usize,
    /// Failed or timed-out experiments stored earlier and deleted to run
    /// again (`retry_failed`).
    pub retried: u64,
    /// Wall-clock seconds of the whole run.
    pub elapsed_s: f64,
    /// The runner's time per experiment beyond the template's own (work
    /// directory, threads, spawning, reading records, storing), if any ran.
    pub overhead: Option<OverheadStats>,
}

/// The runner's overhead per experiment, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OverheadStats {
    /// Median.
    pub median_ms: f64,
    /// 95th percentile.
    pub p95_ms: f64,
    /// Largest.
    pub max_ms: f64,
}

impl OverheadStats {
    /// From per-experiment overheads (`None` if there are none).
    pub fn from_samples(samples: &[Duration]) -> Option<OverheadStats> {
        if samples.is_empty() {
            return None;
        }
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        Some(OverheadStats { median_ms: quantile(&ms, 0.5), p95_ms: quantile(&ms, 0.95), max_ms: ms[ms.len() - 1] })
    }
}

/// Linear interpolation between closest ranks; `sorted` is not empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl RunSummary {
    /// `(field, value)` rows for a two-column table.
    pub fn rows(&self) -> Vec<(String, String)> {
        let mut rows = vec![
            ("planned".to_string(), self.planned.to_string()),
            ("already stored".to_string(), self.skipped.to_string()),
            ("ran".to_string(), self.ran.to_string()),
            ("ok".to_string(), self.ok.to_string()),
            ("failed".to_string(), self.failed.to_string()),
            ("timed out".to_string(), self.timed_out.to_string()),
        ];
        if self.retried > 0 {
            rows.push(("retried".to_string(), self.retried.to_string()));
        }
        rows.push(("elapsed".to_string(), format!("{:.1} s", self.elapsed_s)));
        if let Some(o) = &self.overhead {
            rows.push((
                "runner overhead per experiment".to_string(),
                format!("median {:.2} ms, p95 {:.2} ms, max {:.2} ms", o.median_ms, o.p95_ms, o.max_ms),
            ));
        }
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn overhead_quantiles() {
        let samples: Vec<Duration> = (1..=5).map(Duration::from_millis).collect();
        let o = OverheadStats::from_samples(&samples).unwrap();
        assert!((o.median_ms - 3.0).abs() < 1e-9);
        assert!((o.p95_ms - 4.8).abs() < 1e-9);
        assert!((o.max_ms - 5.0).abs() < 1e-9);
        assert_eq!(OverheadStats::from_samples(&[]), None);
    }

    proptest! {
        #[test]
        fn quantiles_are_ordered(us in proptest::collection::vec(0u64..10_000_000, 1..50)) {
            let samples: Vec<Duration> = us.iter().map(|&u| Duration::from_micros(u)).collect();
            let o = OverheadStats::from_samples(&samples).unwrap();
            let min = *us.iter().min().unwrap() as f64 / 1e3;
            prop_assert!(min <= o.median_ms + 1e-9 && o.median_ms <= o.p95_ms + 1e-9 && o.p95_ms <= o.max_ms + 1e-9);
            prop_assert!((o.max_ms - *us.iter().max().unwrap() as f64 / 1e3).abs() < 1e-9);
        }
    }

    #[test]
    fn rows_name_every_count() {
        let s = RunSummary {
            planned: 10,
            skipped: 2,
            ran: 8,
            ok: 6,
            failed: 1,
            timed_out: 1,
            retried: 0,
            elapsed_s: 3.25,
            overhead: None,
        };
        let rows = s.rows();
        assert!(rows.contains(&("timed out".to_string(), "1".to_string())));
        assert!(
            rows.contains(&("elapsed".to_string(), "3.2 s".to_string()))
                || rows.contains(&("elapsed".to_string(), "3.3 s".to_string()))
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<RunSummary>(&json).unwrap(), s);
    }
}
