//! Worker slots of one stage whose size the tuner changes while the transfer runs, and the busy
//! time meter that measures the stage for the tuner.
//!
//! # Stage throughput (what the tuner's `T` is)
//! A stage is *busy* while at least one of its workers is moving data: the storage read (and its
//! emulated throttle) for a reader, the socket write for a network worker, the storage write and
//! `fsync` for a writer. Time in which no worker is moving data — every reader blocked on a full
//! staging area, every network worker waiting for a chunk — is idle time spent on another stage.
//! Over a probe interval the stage throughput is `bytes moved / busy time`, the busy time being
//! the union of the workers' busy periods.
//!
//! Why not wall time: a stage starved or blocked by a slower neighbour would look slow itself,
//! and its tuner would chase the other stage's noise. Why not the per-worker extrapolation
//! `n · bytes / Σ busy`: under a shared cap (a disk's total bandwidth) workers that are busy one
//! at a time each get the whole cap, so the extrapolation grows with `n` without bound and the
//! tuner would add workers forever. The union is exact in both cases the paper's stage model
//! covers: with every worker busy it is the wall time, and while a shared cap binds it measures
//! the cap.
//!
//! # Workers in use
//! The meter also integrates the number of busy workers over time: over an interval, the mean
//! number of workers busy (Σ busy time / interval). A stage whose workers are busy most of the
//! time is saturated; one whose mean is well below its count has workers with nothing to do,
//! starved by a slower neighbour or held back by a full staging area, and the tuner cuts them
//! (see `tuner`, "Idle workers").

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Worker slots `0..target`; a worker runs while its slot index is below the target.
#[derive(Debug, Default)]
pub struct WorkerSlots {
    target: AtomicUsize,
    alive: Mutex<Vec<bool>>,
}

impl WorkerSlots {
    /// Slots with `target` wanted workers.
    pub fn new(target: usize) -> Self {
        WorkerSlots { target: AtomicUsize::new(target), alive: Mutex::new(Vec::new()) }
    }

    /// Sets the wanted count; returns the slots to start (now marked alive).
    pub fn set_target(&self, target: usize) -> Vec<usize> {
        self.target.store(target, Ordering::Release);
        let mut alive = self.alive.lock().unwrap_or_else(PoisonError::into_inner);
        if alive.len() < target {
            alive.resize(target, false);
        }
        let mut start = Vec::new();
        for (i, slot) in alive.iter_mut().enumerate().take(target) {
            if !*slot {
                *slot = true;
                start.push(i);
            }
        }
        start
    }

    /// The wanted count.
    pub fn target(&self) -> usize {
        self.target.load(Ordering::Acquire)
    }

    /// Whether worker `slot` should keep running.
    pub fn keep(&self, slot: usize) -> bool {
        slot < self.target()
    }

    /// Worker `slot` has stopped.
    pub fn release(&self, slot: usize) {
        let mut alive = self.alive.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = alive.get_mut(slot) {
            *s = false;
        }
    }

    /// Workers running now.
    pub fn running(&self) -> usize {
        self.alive.lock().unwrap_or_else(PoisonError::into_inner).iter().filter(|&&a| a).count()
    }
}

#[derive(Debug)]
struct Union {
    busy_workers: usize,
    since: Instant,
    busy: Duration,
    bytes: u64,
    /// Σ busy workers × time since the last take, up to `changed`.
    worker_time: Duration,
    changed: Instant,
    interval_start: Instant,
}

impl Union {
    /// Adds the busy workers' time since the last change, up to `now`.
    fn integrate(&mut self, now: Instant) {
        let span = now.saturating_duration_since(self.changed);
        self.worker_time += span * u32::try_from(self.busy_workers).unwrap_or(u32::MAX);
        self.changed = now;
    }
}

/// One stage over one probe interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageSample {
    /// Bytes per second over busy time (see the module documentation); 0 when idle.
    pub throughput: f64,
    /// Mean number of workers busy over the interval.
    pub in_use: f64,
}

/// Bytes and busy time (the union of the workers' busy periods) of one stage since the last
/// [`BusyMeter::take`].
#[derive(Debug)]
pub struct BusyMeter {
    union: Mutex<Union>,
    total: AtomicU64,
}

impl Default for BusyMeter {
    fn default() -> Self {
        let now = Instant::now();
        BusyMeter {
            union: Mutex::new(Union {
                busy_workers: 0,
                since: now,
                busy: Duration::ZERO,
                bytes: 0,
                worker_time: Duration::ZERO,
                changed: now,
                interval_start: now,
            }),
            total: AtomicU64::new(0),
        }
    }
}

/// One worker's busy period; ends with [`Busy::done`] (or, moving nothing, when dropped).
#[derive(Debug)]
pub struct Busy<'a> {
    meter: &'a BusyMeter,
    bytes: u64,
}

impl Busy<'_> {
    /// The period ends having moved `bytes`.
    pub fn done(mut self, bytes: u64) {
        self.bytes = bytes;
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        let mut guard = self.meter.union.lock().unwrap_or_else(PoisonError::into_inner);
        let u = &mut *guard;
        u.integrate(now);
        u.bytes += self.bytes;
        u.busy_workers = u.busy_workers.saturating_sub(1);
        if u.busy_workers == 0 {
            u.busy += now.saturating_duration_since(u.since);
        }
        drop(guard);
        self.meter.total.fetch_add(self.bytes, Ordering::AcqRel);
    }
}

impl BusyMeter {
    /// A worker starts moving data.
    pub fn start(&self) -> Busy<'_> {
        let now = Instant::now();
        let mut u = self.union.lock().unwrap_or_else(PoisonError::into_inner);
        u.integrate(now);
        if u.busy_workers == 0 {
            u.since = now;
        }
        u.busy_workers += 1;
        Busy { meter: self, bytes: 0 }
    }

    /// The stage throughput (bytes/s over busy time, see the module comment) since the last
    /// call; resets the interval.
    pub fn take(&self) -> f64 {
        self.take_sample().throughput
    }

    /// The stage's throughput and workers in use since the last take; resets the interval.
    pub fn take_sample(&self) -> StageSample {
        let now = Instant::now();
        let mut guard = self.union.lock().unwrap_or_else(PoisonError::into_inner);
        let u = &mut *guard;
        u.integrate(now);
        let wall = now.saturating_duration_since(u.interval_start).as_secs_f64();
        let in_use = if wall > 0.0 { u.worker_time.as_secs_f64() / wall } else { 0.0 };
        u.worker_time = Duration::ZERO;
        u.interval_start = now;
        let mut busy = u.busy;
        if u.busy_workers > 0 {
            // Count the running period up to now; the rest goes to the next interval.
            busy += now.saturating_duration_since(u.since);
            u.since = now;
        }
        let bytes = u.bytes;
        u.busy = Duration::ZERO;
        u.bytes = 0;
        StageSample { throughput: stage_throughput(bytes, busy.as_secs_f64()), in_use }
    }

    /// Bytes moved since creation.
    pub fn total_bytes(&self) -> u64 {
        self.total.load(Ordering::Acquire)
    }
}

/// `bytes / busy_seconds`; 0 when nothing was busy.
pub fn stage_throughput(bytes: u64, busy_seconds: f64) -> f64 {
    if busy_seconds <= 0.0 || bytes == 0 {
        0.0
    } else {
        bytes as f64 / busy_seconds
    }
}

/// CPU seconds (user + system) this process has used so far (`getrusage(RUSAGE_SELF)`); both
/// ends of a transfer in one process count together.
pub fn cpu_seconds() -> f64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a writable rusage; RUSAGE_SELF is a valid target.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) };
    if rc != 0 {
        return 0.0;
    }
    // SAFETY: zero-initialised and written by the kernel; plain integers.
    let usage = unsafe { usage.assume_init() };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_start_missing_workers_and_stop_extra_ones() {
        let slots = WorkerSlots::new(0);
        assert_eq!(slots.set_target(3), [0, 1, 2]);
        assert_eq!(slots.set_target(1), Vec::<usize>::new());
        assert!(slots.keep(0) && !slots.keep(1));
        // Worker 2 has not noticed yet; raising the target again must not start a second one.
        slots.release(1);
        assert_eq!(slots.set_target(3), [1]);
        assert_eq!(slots.running(), 3);
    }

    #[test]
    fn throughput_is_over_the_union_of_busy_periods() {
        let meter = BusyMeter::default();
        // Two overlapping periods of about 50 ms, then 50 ms idle, then one of about 50 ms:
        // busy ≈ 100 ms of the 150 ms, 3 MB moved → about 30 MB/s, not 20 (wall) and not the
        // per-worker extrapolation.
        let a = meter.start();
        let b = meter.start();
        std::thread::sleep(Duration::from_millis(50));
        a.done(1_000_000);
        b.done(1_000_000);
        std::thread::sleep(Duration::from_millis(50));
        let c = meter.start();
        std::thread::sleep(Duration::from_millis(50));
        c.done(1_000_000);
        let t = meter.take();
        assert!(t > 20e6 && t <= 30.5e6, "{t}");
        assert_eq!(meter.take(), 0.0);
        assert_eq!(meter.total_bytes(), 3_000_000);
        // A period still running when the interval ends counts up to then.
        let d = meter.start();
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(meter.take(), 0.0);
        d.done(500);
        assert!(meter.take() > 0.0);
        assert!(cpu_seconds() > 0.0);
    }

    #[test]
    fn workers_in_use_is_the_mean_number_busy() {
        let meter = BusyMeter::default();
        // Two workers busy for about half of a 100 ms interval, then none: about one in use.
        let a = meter.start();
        let b = meter.start();
        std::thread::sleep(Duration::from_millis(50));
        a.done(1);
        b.done(1);
        std::thread::sleep(Duration::from_millis(50));
        let s = meter.take_sample();
        assert!(s.in_use > 0.7 && s.in_use <= 1.05, "{s:?}");
        // One worker busy through a whole interval is one in use, even before it finishes.
        let c = meter.start();
        std::thread::sleep(Duration::from_millis(30));
        let s = meter.take_sample();
        assert!(s.in_use > 0.95 && s.in_use <= 1.0001, "{s:?}");
        std::thread::sleep(Duration::from_millis(30));
        c.done(1);
        assert!(meter.take_sample().in_use > 0.9);
        std::thread::sleep(Duration::from_millis(10));
        assert_eq!(meter.take_sample().in_use, 0.0);
    }
}
