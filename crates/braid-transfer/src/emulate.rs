//! Storage emulation for benchmarks: a sleeping token bucket per worker, optionally under a
//! shared total (`--emulate-read PER_WORKER_RATE[,TOTAL_RATE]`).
//!
//! The paper's testbeds throttled each reader/writer so that concurrency matters (seed 002 §4:
//! "we throttle per process disk read throughput"); a scenario's optimum is then known by
//! construction: `total / per_worker` workers. The authors' implementation busy-waits to
//! throttle, burning the CPU it then measures; here a worker that is ahead of its rate *sleeps*
//! (`tokio::time::sleep`) until its tokens are due.
//!
//! Model: a device that moves `rate` bytes/s. An operation of `n` bytes that started at `s`
//! finishes at `max(free, s − slack) + n / rate`, where `free` is when the device finished its
//! previous operation and `slack` (10 ms of the rate) lets a worker that a late timer held back
//! catch up; the worker sleeps until then. This is a token bucket (burst = `slack · rate`) kept as
//! the time the device is next free. The real work the operation did (the `write` itself, the
//! journal) counts towards its `n / rate`: a worker's rate is what it moves, not what it moves on
//! top of the real cost, so a scenario's optimum stays `total / per_worker` however slow the
//! machine's own file system or scheduler is that day. With a shared total, the worker waits for
//! the later of its own and the shared finish time.

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
    /// How far behind the rate a worker may fall and still catch up (see the module comment).
    slack: Duration,
    /// When the device finishes the work given to it so far.
    free: Instant,
}

impl Bucket {
    fn new(rate: f64) -> Self {
        // 10 ms of the rate: enough to absorb timer slack, small enough that a second's average
        // stays within a percent of the rate.
        Bucket { rate, slack: Duration::from_millis(10), free: Instant::now() }
    }

    /// Books `bytes` for an operation that started at `started` and returns how long the taker
    /// must still wait at `now` for the device to have moved them.
    fn take(&mut self, bytes: u64, started: Instant, now: Instant) -> Duration {
        let earliest = started.checked_sub(self.slack).unwrap_or(started);
        let busy = Duration::try_from_secs_f64(bytes as f64 / self.rate).unwrap_or(Duration::MAX);
        self.free = self.free.max(earliest).checked_add(busy).unwrap_or(self.free);
        self.free.saturating_duration_since(now)
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
    /// Accounts `bytes` about to be moved, sleeping until the rates allow them.
    pub async fn consume(&mut self, bytes: u64) {
        self.consume_since(bytes, Instant::now()).await;
    }

    /// Accounts `bytes` that an operation started at `started` just read or wrote, sleeping
    /// until the rates allow them: the time the real operation took counts towards the
    /// emulated one.
    pub async fn consume_since(&mut self, bytes: u64, started: Instant) {
        let now = Instant::now();
        let mut wait = self.own.take(bytes, started, now);
        if let Some(total) = &self.total {
            let shared = total.lock().unwrap_or_else(PoisonError::into_inner).take(bytes, started, now);
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
    fn the_real_work_of_an_operation_counts_towards_its_time() {
        runtime().block_on(async {
            // 64 KiB at 1 MB/s is 65.5 ms; the operation itself already took 50 of them.
            let mut worker = Throttle::new(1e6, Some(1e6)).unwrap().worker();
            let started = Instant::now();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let before = Instant::now();
            worker.consume_since(64 << 10, started).await;
            let waited = before.elapsed();
            assert!(waited < Duration::from_millis(40), "waited {waited:?}, expected about 15 ms");
            // The next operation starts now: its whole 65.5 ms are still owed.
            let before = Instant::now();
            worker.consume_since(64 << 10, before).await;
            assert!(before.elapsed() >= Duration::from_millis(55), "waited {:?}", before.elapsed());
        });
    }

    #[test]
    fn bad_rates_are_named() {
        assert!(Throttle::new(0.0, None).unwrap_err().to_string().contains("per-worker"));
        assert!(Throttle::new(1.0, Some(f64::NAN)).unwrap_err().to_string().contains("total"));
    }
}
