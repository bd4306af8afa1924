//! The progress bar: done / failed / running / ETA, on stderr, only when a
//! person is watching (stderr is a terminal) and the caller wants it.
//!
//! The ETA starts from the templates' expected durations and corrects them
//! by how long finished experiments really took.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::plan::PlannedExperiment;

/// Progress of one run.
pub(crate) struct Progress {
    bar: ProgressBar,
    jobs: usize,
    done: u64,
    failed: u64,
    running: u64,
    /// Expected durations of what has not finished, run in parallel and
    /// run alone.
    left_shared: Duration,
    left_exclusive: Duration,
    /// Sums over finished experiments: how long they took, how long they
    /// were expected to.
    took: Duration,
    expected_done: Duration,
}

impl Progress {
    /// A bar for `pending` (drawn only if `show` and stderr is a terminal).
    pub fn new(pending: &[&PlannedExperiment], jobs: usize, show: bool) -> Progress {
        let target = if show && std::io::stderr().is_terminal() {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(pending.len() as u64), target);
        if let Ok(style) = ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        if !bar.is_hidden() {
            // The clock moves between experiments too.
            bar.enable_steady_tick(Duration::from_millis(500));
        }
        let (mut left_shared, mut left_exclusive) = (Duration::ZERO, Duration::ZERO);
        for e in pending {
            if e.exclusive {
                left_exclusive += e.expected;
            } else {
                left_shared += e.expected;
            }
        }
        let p = Progress {
            bar,
            jobs: jobs.max(1),
            done: 0,
            failed: 0,
            running: 0,
            left_shared,
            left_exclusive,
            took: Duration::ZERO,
            expected_done: Duration::ZERO,
        };
        p.redraw();
        p
    }

    /// An experiment was queued to start.
    pub fn started(&mut self) {
        self.running += 1;
        self.redraw();
    }

    /// A queued experiment was taken back before it started.
    pub fn cancelled(&mut self) {
        self.running = self.running.saturating_sub(1);
        self.redraw();
    }

    /// An experiment finished (stored), after `took`.
    pub fn finished(&mut self, experiment: &PlannedExperiment, failed: bool, took: Duration) {
        self.running = self.running.saturating_sub(1);
        self.done += 1;
        if failed {
            self.failed += 1;
        }
        if experiment.exclusive {
            self.left_exclusive = self.left_exclusive.saturating_sub(experiment.expected);
        } else {
            self.left_shared = self.left_shared.saturating_sub(experiment.expected);
        }
        self.took += took;
        self.expected_done += experiment.expected;
        self.bar.inc(1);
        self.redraw();
    }

    /// Remove the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    fn redraw(&self) {
        if self.bar.is_hidden() {
            return;
        }
        let eta = eta(self.left_shared, self.left_exclusive, self.jobs, self.took, self.expected_done);
        self.bar.set_message(format!(
            "done {} · failed {} · running {} · ETA {}",
            self.done,
            self.failed,
            // Started and not stored yet, of which at most `jobs` run.
            self.running.min(self.jobs as u64),
            clock(eta)
        ));
    }
}

/// Time left: shared work spread over `jobs`, exclusive work one at a
/// time, scaled by how long finished experiments took against what they
/// were expected to take.
pub(crate) fn eta(
    left_shared: Duration,
    left_exclusive: Duration,
    jobs: usize,
    took: Duration,
    expected_done: Duration,
) -> Duration {
    let speed =
        if expected_done.is_zero() || took.is_zero() { 1.0 } else { took.as_secs_f64() / expected_done.as_secs_f64() };
    let left = left_shared.as_secs_f64() / jobs.max(1) as f64 + left_exclusive.as_secs_f64();
    Duration::try_from_secs_f64(left * speed).unwrap_or(Duration::MAX)
}

/// `42s`, `3m10s`, `2h05m`.
pub(crate) fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        format!("{s}s")
    } else if s < 3600 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{}h{:02}m", s / 3600, s % 3600 / 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_spreads_shared_work_over_jobs() {
        let s = Duration::from_secs;
        assert_eq!(eta(s(100), s(0), 4, Duration::ZERO, Duration::ZERO), s(25));
        assert_eq!(eta(s(100), s(10), 4, Duration::ZERO, Duration::ZERO), s(35));
        // Experiments took twice as long as expected: so will the rest.
        assert_eq!(eta(s(100), s(10), 4, s(20), s(10)), s(70));
    }

    #[test]
    fn clock_reads_well() {
        assert_eq!(clock(Duration::from_secs(42)), "42s");
        assert_eq!(clock(Duration::from_secs(190)), "3m10s");
        assert_eq!(clock(Duration::from_secs(7500)), "2h05m");
    }
}
