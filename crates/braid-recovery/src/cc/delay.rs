//! One-way delay bookkeeping for delay-based controllers (LEDBAT): the
//! base-delay history and the current-delay filter of RFC 6817 §2.4.2 and
//! §3.4.
//!
//! Samples are one-way delays *plus an unknown constant clock offset*
//! between the hosts (microseconds, possibly negative; see
//! [`super::Acked::one_way_delay_us`]). Only the difference between the
//! filtered current delay and the base delay is used, so the offset
//! cancels; a slowly drifting offset (clock skew) is absorbed because old
//! minima expire (RFC 6817 §3.4.1).
//!
//! - **Base delay** (§2.4.2 `update_base_delay`): the minimum of one bucket
//!   per minute of the clock, keeping the current bucket and the
//!   `base_history` before it, so every sample counts for at least
//!   `base_history` full minutes (RFC 6817 recommends 10; DTL uses 13).
//! - **Current delay** (§2.4.2 `update_current_delay`, §3.4.2): the
//!   minimum of the last `current_filter` samples, which removes upward
//!   noise (delayed acknowledgements, scheduling jitter) without delaying
//!   the reaction by more than a few samples.

use std::collections::VecDeque;

use braid_core::Instant;

/// One minute in nanoseconds: the base-history bucket width.
const MINUTE_NANOS: u64 = 60_000_000_000;

/// Default number of one-minute buckets of base-delay history (RFC 6817
/// §2.4.2 BASE_HISTORY).
pub(super) const DEFAULT_BASE_HISTORY: usize = 10;
/// Default length of the current-delay filter (DTL keeps the last 3).
pub(super) const DEFAULT_CURRENT_FILTER: usize = 3;
/// Accepted range of `base_history`, minutes.
pub(super) const BASE_HISTORY_RANGE: (usize, usize) = (2, 120);
/// Accepted range of `current_filter`, samples.
pub(super) const CURRENT_FILTER_RANGE: (usize, usize) = (1, 64);

/// Base-delay history and current-delay filter (RFC 6817 §2.4.2).
#[derive(Debug, Clone)]
pub(super) struct DelayEstimator {
    /// `(minute index, minimum sample in that minute)`, oldest first.
    base: VecDeque<(u64, i64)>,
    /// Minutes of history kept besides the current one.
    base_history: usize,
    /// The last samples, oldest first.
    current: VecDeque<i64>,
    current_filter: usize,
}

impl DelayEstimator {
    pub(super) fn new() -> Self {
        DelayEstimator {
            base: VecDeque::with_capacity(DEFAULT_BASE_HISTORY + 1),
            base_history: DEFAULT_BASE_HISTORY,
            current: VecDeque::with_capacity(DEFAULT_CURRENT_FILTER),
            current_filter: DEFAULT_CURRENT_FILTER,
        }
    }

    pub(super) fn base_history(&self) -> usize {
        self.base_history
    }

    pub(super) fn current_filter(&self) -> usize {
        self.current_filter
    }

    /// Keeps `minutes` of history (callers validate the range).
    pub(super) fn set_base_history(&mut self, minutes: usize) {
        self.base_history = minutes;
        if let Some(&(newest, _)) = self.base.back() {
            self.expire(newest);
        }
    }

    /// Filters over the last `samples` samples (callers validate the range).
    pub(super) fn set_current_filter(&mut self, samples: usize) {
        self.current_filter = samples;
        while self.current.len() > samples {
            self.current.pop_front();
        }
    }

    /// Records one sample taken at `now` (§2.4.2 `update_base_delay` and
    /// `update_current_delay`). Time running backwards (never from a real
    /// clock, but possible through the API) updates the newest bucket.
    pub(super) fn add(&mut self, now: Instant, sample_us: i64) {
        let minute = now.as_nanos() / MINUTE_NANOS;
        match self.base.back_mut() {
            Some((newest, min)) if minute <= *newest => *min = (*min).min(sample_us),
            _ => {
                self.base.push_back((minute, sample_us));
                self.expire(minute);
            }
        }
        self.current.push_back(sample_us);
        while self.current.len() > self.current_filter {
            self.current.pop_front();
        }
    }

    /// Drops buckets older than `base_history` minutes before `minute`.
    fn expire(&mut self, minute: u64) {
        let oldest_kept = minute.saturating_sub(self.base_history as u64);
        while self.base.front().is_some_and(|&(m, _)| m < oldest_kept) {
            self.base.pop_front();
        }
    }

    /// The base delay: the minimum over the history (§2.4.2 `MIN(base_delays)`).
    pub(super) fn base_delay_us(&self) -> Option<i64> {
        self.base.iter().map(|&(_, d)| d).min()
    }

    /// The filtered current delay (§2.4.2 `FILTER(current_delays)`, MIN).
    pub(super) fn current_delay_us(&self) -> Option<i64> {
        self.current.iter().copied().min()
    }

    /// Queuing delay estimate in microseconds: filtered current delay minus
    /// base delay, never negative. `None` before the first sample.
    pub(super) fn queuing_delay_us(&self) -> Option<u64> {
        let current = self.current_delay_us()?;
        let base = self.base_delay_us()?;
        Some(current.saturating_sub(base).max(0).unsigned_abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn at_secs(s: u64) -> Instant {
        Instant::ZERO + Duration::from_secs(s)
    }

    #[test]
    fn queuing_delay_is_the_filtered_current_minus_the_base() {
        let mut d = DelayEstimator::new();
        assert_eq!(d.queuing_delay_us(), None);
        d.add(at_secs(1), 20_000);
        assert_eq!(d.queuing_delay_us(), Some(0));
        // The filter takes the minimum of the last three samples.
        d.add(at_secs(2), 50_000);
        d.add(at_secs(3), 45_000);
        assert_eq!(d.current_delay_us(), Some(20_000));
        d.add(at_secs(4), 60_000);
        assert_eq!(d.current_delay_us(), Some(45_000));
        assert_eq!(d.queuing_delay_us(), Some(25_000));
        // One low outlier is enough to pull the filter down.
        d.add(at_secs(5), 21_000);
        assert_eq!(d.queuing_delay_us(), Some(1_000));
    }

    #[test]
    fn base_delay_is_remembered_for_the_history_then_forgotten() {
        let mut d = DelayEstimator::new();
        d.add(at_secs(0), 10_000);
        // Every later sample is higher; the first one stays the base for
        // ten full minutes...
        for s in (30..=659).step_by(30) {
            d.add(at_secs(s), 30_000);
            assert_eq!(d.base_delay_us(), Some(10_000), "at {s} s");
        }
        // ...and is forgotten in the eleventh.
        d.add(at_secs(660), 30_000);
        assert_eq!(d.base_delay_us(), Some(30_000));
        assert!(d.base.len() <= DEFAULT_BASE_HISTORY + 1);
    }

    #[test]
    fn shorter_history_and_filter_take_effect_at_once() {
        let mut d = DelayEstimator::new();
        d.add(at_secs(0), 10_000);
        d.add(at_secs(200), 30_000);
        d.add(at_secs(201), 35_000);
        d.set_base_history(2);
        assert_eq!(d.base_delay_us(), Some(30_000));
        d.set_current_filter(1);
        assert_eq!(d.current_delay_us(), Some(35_000));
        assert_eq!(d.queuing_delay_us(), Some(5_000));
    }

    #[test]
    fn time_running_backwards_updates_the_newest_bucket() {
        let mut d = DelayEstimator::new();
        d.add(at_secs(600), 10_000);
        d.add(at_secs(0), 5_000);
        assert_eq!(d.base_delay_us(), Some(5_000));
        assert_eq!(d.base.len(), 1);
    }

    proptest! {
        /// A constant clock offset between the hosts changes nothing.
        #[test]
        fn queuing_delay_ignores_a_constant_clock_offset(
            samples in prop::collection::vec((0u64..120_000, 0i64..2_000_000), 1..200),
            offset in -1_000_000_000_000i64..1_000_000_000_000,
        ) {
            let mut a = DelayEstimator::new();
            let mut b = DelayEstimator::new();
            let mut now = Instant::ZERO;
            for (dt_ms, delay) in samples {
                now += Duration::from_millis(dt_ms);
                a.add(now, delay);
                b.add(now, delay + offset);
                prop_assert_eq!(a.queuing_delay_us(), b.queuing_delay_us());
            }
        }

        #[test]
        fn arbitrary_samples_never_panic(
            samples in prop::collection::vec((any::<u64>(), any::<i64>()), 1..100),
        ) {
            let mut d = DelayEstimator::new();
            for (t, s) in samples {
                d.add(Instant::from_nanos(t), s);
                let _ = d.queuing_delay_us();
            }
        }
    }
}
