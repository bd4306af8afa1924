//! The offered load: `concurrency` clients, each running one round after
//! another until `secs` have passed since the start or `limit` rounds were
//! started in all, and what they measured: rounds completed, the time
//! until the last one ended, and each round's latency.
//!
//! Closed loop on purpose: a client starts its next connection when the
//! previous one is done, so the rate is what the peer sustains, never a
//! queue of connection attempts the peer cannot keep up with.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;

use crate::analysis::stats::percentile_sorted;
use crate::template::TemplateError;

/// Longest a round may take before the run fails: a handshake on loopback
/// takes well under a millisecond; one that hangs is a bug to report, not
/// a slow sample.
pub const ROUND_LIMIT: Duration = Duration::from_secs(10);

/// What a load measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// Rounds completed.
    pub connections: u64,
    /// From the first connect to the end of the last round.
    pub elapsed: Duration,
    /// Median round latency, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
}

/// Run `round` from `concurrency` clients at once. `round` is handed the
/// round's number and returns its latency; the first failure ends the run.
/// `progress` is told the fraction of `secs` elapsed now and then.
pub async fn run<R, F>(
    concurrency: usize,
    secs: Duration,
    limit: u64,
    round: R,
    progress: &dyn Fn(f64),
) -> Result<Measured, TemplateError>
where
    R: Fn(u64) -> F,
    F: Future<Output = Result<Duration, TemplateError>>,
{
    let started = AtomicU64::new(0);
    let start = Instant::now();
    let stop = start + secs;
    let client = |_| async {
        let mut latencies = Vec::new();
        loop {
            if Instant::now() >= stop {
                break;
            }
            let n = started.fetch_add(1, Ordering::Relaxed);
            if n >= limit {
                break;
            }
            let latency = match tokio::time::timeout(ROUND_LIMIT, round(n)).await {
                Ok(r) => r.map_err(|e| TemplateError::Failed(format!("connection {}: {e}", n + 1)))?,
                Err(_) => {
                    return Err(TemplateError::Failed(format!(
                        "connection {} not done after {} s",
                        n + 1,
                        ROUND_LIMIT.as_secs()
                    )))
                }
            };
            latencies.push(latency.as_secs_f64() * 1e6);
        }
        Ok::<_, TemplateError>(latencies)
    };
    let clients = try_join_all((0..concurrency).map(client));
    tokio::pin!(clients);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let per_client = loop {
        tokio::select! {
            r = &mut clients => break r?,
            _ = tick.tick() => progress((start.elapsed().as_secs_f64() / secs.as_secs_f64()).min(1.0)),
        }
    };
    let elapsed = start.elapsed();
    let mut all: Vec<f64> = per_client.into_iter().flatten().collect();
    all.sort_by(f64::total_cmp);
    let quantile = |p| percentile_sorted(&all, p).unwrap_or(0.0);
    Ok(Measured { connections: all.len() as u64, elapsed, p50_us: quantile(0.5), p99_us: quantile(0.99) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_rounds_and_orders_latencies() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let m = rt
            .block_on(run(
                3,
                Duration::from_secs(30),
                100,
                |n| async move { Ok(Duration::from_micros(n + 1)) },
                &|_| {},
            ))
            .unwrap();
        // The limit, not the 30 s, ended it: every round numbered once.
        assert_eq!(m.connections, 100);
        assert!((m.p50_us - 50.5).abs() < 1e-6, "{m:?}");
        assert!((m.p99_us - 99.01).abs() < 1e-6, "{m:?}");
    }

    #[test]
    fn time_ends_the_run_and_a_failure_names_its_round() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let slow = |_| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(Duration::from_millis(20))
        };
        let m = rt.block_on(run(2, Duration::from_millis(100), u64::MAX, slow, &|_| {})).unwrap();
        assert!((6..=14).contains(&m.connections), "{m:?}");
        assert!(m.elapsed >= Duration::from_millis(100));
        let failing = |n| async move {
            if n == 4 {
                Err(TemplateError::Failed("refused".into()))
            } else {
                Ok(Duration::from_micros(1))
            }
        };
        let e = rt.block_on(run(1, Duration::from_secs(30), 10, failing, &|_| {})).unwrap_err();
        assert_eq!(e.to_string(), "connection 5: refused");
    }
}
