//! Storage emulation for benchmarks: a sleeping token bucket per worker, optionally under a
//! shared total (`--emulate-read PER_WORKER_RATE[,TOTAL_RATE]`).
//!
//! The paper's testbeds throttled each reader/writer so that concurrency matters (seed 002 §4:
//! "we throttle per process disk read throughput"); a scenario's optimum is then known by
//! construction: `total / per_worker` workers. The authors' implementation busy-waits to
//! throttle, burning the CPU it then measures; here a worker that is ahead of its rate *sleeps*
//! (`tokio::time::sleep`) until its tokens are due.
//!
//! Model: a token bucket of `rate` bytes/s with a burst of `burst` bytes. Taking `n` bytes may
//! drive the balance negative (a debt); the taker then sleeps for `debt / rate`. With a shared
//! total bucket, the worker waits for the later of its own and the shared deadline.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use thiserror::Error;
use tokio::time::Instant;

/// A rate that cannot be used.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum RateError {
    /// Not a positive finite number.
    #[error("`{field}` rate {value} bytes/s: must be a finite number > 0")]
    NotPositive {
        /// Which rate.
        field: &'static str,
        /// Its value.
        value: f64,
    },
}

fn check(field: &'static str, value: f64) -> Result<f64, RateError> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(RateError::NotPositive { field, value })
    }
}

#[derive(Debug)]
struct Bucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    updated: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Self {
        // A burst of 10 ms of the rate: enough to absorb timer slack, small enough that a
        // second's average stays within a percent of the rate.
        let burst = rate * 0.01;
        Bucket { rate, burst, tokens: burst, updated: Instant::now() }
    }

    /// Takes `bytes` and returns how long the taker must wait for them.
    fn take(&mut self, bytes: u64, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.updated = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.tokens -= bytes as f64;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

/// The throttle of one stage: a per-worker rate and an optional total.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use braid_transfer::emulate::Throttle;
///
/// let throttle = Throttle::new(1_000_000.0, Some(4_000_000.0)).unwrap();
/// let mut worker = throttle.worker();
/// worker.consume(10_000).await; // about 10 ms at 1 MB/s
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct Throttle {
    per_worker: f64,
    total: Option<Arc<Mutex<Bucket>>>,
}

impl Throttle {
    /// `per_worker` bytes/s for each worker, and at most `total` bytes/s over all of them.
    pub fn new(per_worker: f64, total: Option<f64>) -> Result<Self, RateError> {
        let per_worker = check("per-worker", per_worker)?;
        let total = total.map(|t| check("total", t)).transpose()?;
        Ok(Throttle { per_worker, total: total.map(|t| Arc::new(Mutex::new(Bucket::new(t)))) })
    }

    /// A handle for one worker, with its own bucket.
    pub fn worker(&self) -> WorkerThrottle {
        WorkerThrottle { own: Bucket::new(self.per_worker), total: self.total.clone() }
    }

    /// The per-worker rate in bytes/s.
    pub fn per_worker(&self) -> f64 {
        self.per_worker
    }
}

/// One worker's throttle.
#[derive(Debug)]
pub struct WorkerThrottle {
    own: Bucket,
    total: Option<Arc<Mutex<Bucket>>>,
}

impl WorkerThrottle {
    /// Accounts `bytes` just read or written, sleeping until the rates allow them.
    pub async fn consume(&mut self, bytes: u64) {
        let now = Instant::now();
        let mut wait = self.own.take(bytes, now);
        if let Some(total) = &self.total {
            let shared = total.lock().unwrap_or_else(PoisonError::into_inner).take(bytes, now);
            wait = wait.max(shared);
        }
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
    }

    /// Runs `workers` workers moving 64 KiB blocks for one second; returns bytes moved and the
    /// CPU time the process used (sleeping, not spinning, keeps it small).
    fn measure(throttle: &Throttle, workers: usize) -> u64 {
        runtime().block_on(async {
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut tasks = Vec::new();
            for _ in 0..workers {
                let mut worker = throttle.worker();
                tasks.push(tokio::spawn(async move {
                    let mut moved = 0u64;
                    while Instant::now() < deadline {
                        worker.consume(64 << 10).await;
                        moved += 64 << 10;
                    }
                    moved
                }));
            }
            let mut total = 0;
            for t in tasks {
                total += t.await.unwrap();
            }
            total
        })
    }

    fn cpu_seconds() -> f64 {
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is a valid, writable rusage; RUSAGE_SELF is a valid target.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        assert_eq!(rc, 0);
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(usage.ru_utime) + tv(usage.ru_stime)
    }

    #[test]
    fn per_worker_rate_within_ten_percent() {
        let throttle = Throttle::new(8e6, None).unwrap();
        let cpu = cpu_seconds();
        let moved = measure(&throttle, 4) as f64;
        let cpu = cpu_seconds() - cpu;
        assert!((moved / 32e6 - 1.0).abs() < 0.1, "moved {moved} bytes, expected 32e6");
        // Sleeping: four throttled workers for a second use a small fraction of a core.
        assert!(cpu < 0.3, "{cpu} CPU seconds");
    }

    #[test]
    fn total_rate_caps_the_workers() {
        let throttle = Throttle::new(8e6, Some(12e6)).unwrap();
        let moved = measure(&throttle, 4) as f64;
        assert!((moved / 12e6 - 1.0).abs() < 0.1, "moved {moved} bytes, expected 12e6");
    }

    #[test]
    fn bad_rates_are_named() {
        assert!(Throttle::new(0.0, None).unwrap_err().to_string().contains("per-worker"));
        assert!(Throttle::new(1.0, Some(f64::NAN)).unwrap_err().to_string().contains("total"));
    }
}
