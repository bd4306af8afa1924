//! Contention memory for the yielding controller ([`super::yielding`]):
//! whether a congestion signal is the flow's own queue or traffic that does
//! not yield, told by the flow's delivery rate against the largest it has
//! seen, where the queue itself is too small to tell (issue 25).
//!
//! # The problem
//!
//! The yielding controller backs off on the queuing delay it can tell from
//! noise. A shallow buffer (a quarter of a BDP), an AQM (CoDel and PIE
//! keep 5–15 ms) or flow queueing (fq_codel gives each flow its own queue)
//! hold too little of another flow's queue for that: there p = 0 met TCP
//! by loss, halved and drained, and then regrew as fast as TCP did, so the
//! two shared the link (competing TCP kept 0.45–0.85 of its alone rate
//! under CoDel in the p = 0 grid).
//!
//! # The model
//!
//! A flow alone on a path fills it: when it meets congestion (a loss, or
//! its queue rising while it holds its window) its delivery rate is near
//! the path's capacity. A flow that meets congestion at a small fraction of
//! the capacity it once had is sharing the path with traffic that takes the
//! rest (under flow queueing too, where its own queue builds once it sends
//! above its fair share). So:
//!
//! - **Capacity**: the delivery rate is sampled once per smoothed RTT (and
//!   at least [`MIN_SAMPLE_SEGMENTS`] segments, so that a small window's
//!   handful of packets per round does not quantize it), smoothed, and its
//!   largest value is the capacity this flow knows (BBR's bottleneck
//!   bandwidth, kept for the flow's life: a p = 0 flow that has seen more
//!   errs on the side of yielding). Acknowledged bytes per RTT are enough
//!   for a largest rate and a share of it; [`super::delivery_rate`]'s
//!   per-packet estimator (BBR's) would need a send snapshot of every
//!   packet kept by LEDBAT, which has no other use for one.
//! - **Contended**: a loss, or a queue that rises while the flow holds its
//!   window (the yielding controller's sign of a flow that does not
//!   yield), at a rate below [`CONTENDED_SHARE`] of the capacity: someone
//!   else holds most of the path. The window is then capped at
//!   [`CONTENDED_CAP`] of the capacity's BDP, so the other flow keeps what
//!   it would have alone, whatever the buffer or queue discipline. The
//!   first-round drain (a queue that merely appears) does not count: two
//!   yielding flows see each other's queue appear and both drain.
//! - **Probe**: the only sign that the other flow left is that congestion
//!   stops. After a wait of calm rounds (no round above the threshold, no
//!   loss; [`FIRST_WAIT_ROUNDS`]), the flow slow-starts back to the larger
//!   of the window it had and the capacity's BDP. A probe that meets a
//!   signal before reaching [`PROBE_SUCCESS`] of that window and of the
//!   capacity's rate failed: contended again, and the wait doubles (up to
//!   [`MAX_WAIT_ROUNDS`]), so a flow that stays pays less and less for
//!   looking; a probe that gets there ends contention. The window test
//!   alone passes under flow queueing (the flow's own queue lets its
//!   window grow while its rate stays at its half share), hence the rate
//!   test as well.
//!
//! The cost of looking is bounded: a failed probe is one slow start to
//! the first signal every `wait` rounds. The wait's cap bounds how long a
//! flow stays below the link after its competitor left.

use std::time::Duration;

use braid_core::Instant;

/// EWMA gain of the delivery-rate samples.
const RATE_GAIN: f64 = 0.25;
/// A rate sample spans at least this many segments.
pub(super) const MIN_SAMPLE_SEGMENTS: u64 = 16;
/// A strong signal at a rate below this share of the capacity: contended
/// (someone else holds about two thirds of the path or more).
const CONTENDED_SHARE: f64 = 0.35;
/// While contended, the window is at most this share of the capacity's BDP.
const CONTENDED_CAP: f64 = 0.05;
/// A probe succeeds once it holds this share of the window it probes back
/// to and its rate has reached this share of the capacity.
const PROBE_SUCCESS: f64 = 0.7;
/// A calm round at this share of the capacity also ends a probe.
const ALONE_SHARE: f64 = 0.8;
/// Calm rounds before the first probe.
const FIRST_WAIT_ROUNDS: u32 = 16;
/// The wait doubles after each failed probe, up to this.
const MAX_WAIT_ROUNDS: u32 = 64;

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub(super) struct Contention {
    /// When the current delivery-rate sample began.
    sample_start: Option<Instant>,
    /// Bytes acknowledged since the sample began.
    sample_bytes: u64,
    /// The last delivery-rate sample, bytes/s.
    last: f64,
    /// The largest sample since the last strong signal: where this cycle's
    /// rate peaked.
    peak: f64,
    /// Delivery rate, bytes/s: EWMA of the samples.
    rate: f64,
    /// The largest `rate` seen: the path's capacity as this flow knows it.
    capacity: f64,
    /// Traffic that does not yield holds the path: the window is capped.
    contended: bool,
    /// A probe is under way.
    probing: bool,
    /// Rounds since the last congestion signal (a round above the
    /// threshold or a loss).
    calm_rounds: u32,
    /// Calm rounds to wait, contended, before the next probe.
    wait_rounds: u32,
    /// The window to probe back to, bytes.
    before: f64,
    /// The smoothed RTT of the last acknowledgement.
    srtt: Duration,
}

impl Contention {
    /// Counts `bytes` acknowledged at `now` (not application-limited); a
    /// sample closes once it spans `srtt` and at least `min_bytes`.
    pub(super) fn count_acked(&mut self, now: Instant, bytes: u64, srtt: Duration, min_bytes: u64) {
        self.sample_bytes += bytes;
        self.srtt = srtt;
        let start = *self.sample_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed < srtt || elapsed.is_zero() || self.sample_bytes < min_bytes {
            return;
        }
        let sample = self.sample_bytes as f64 / elapsed.as_secs_f64();
        self.last = sample;
        self.peak = self.peak.max(sample);
        self.rate = if self.rate == 0.0 {
            sample
        } else {
            self.rate + RATE_GAIN * (sample - self.rate)
        };
        self.capacity = self.capacity.max(self.rate);
        self.sample_bytes = 0;
        self.sample_start = Some(now);
    }

    /// The sender was application-limited: the sample under way does not
    /// measure the path.
    pub(super) fn restart_sample(&mut self) {
        self.sample_start = None;
        self.sample_bytes = 0;
    }

    /// `x` bytes/s as a share of the capacity (1 before any is known).
    fn share_of_capacity(&self, x: f64) -> f64 {
        if self.capacity > 0.0 {
            x / self.capacity
        } else {
            1.0
        }
    }

    /// A round above the threshold (any): the calm is over.
    pub(super) fn congested_round(&mut self) {
        self.calm_rounds = 0;
    }

    /// The rate of the sample under way at `now`, if it spans half a
    /// smoothed RTT: a signal often comes before the sample that saw the
    /// path full has closed (a slow start's loss is found a round after
    /// the overflow, while the window has doubled since the last sample).
    fn partial_rate(&self, now: Instant) -> f64 {
        match self.sample_start {
            Some(start) => {
                let elapsed = now.saturating_duration_since(start);
                if elapsed.is_zero() || elapsed < self.srtt / 2 {
                    0.0
                } else {
                    self.sample_bytes as f64 / elapsed.as_secs_f64()
                }
            }
            None => 0.0,
        }
    }

    /// A strong signal at `now` (a loss, or the queue rising while the
    /// window was held) with the window at `window` bytes over base RTT
    /// `base_rtt_us`.
    pub(super) fn strong_signal(&mut self, now: Instant, window: f64, base_rtt_us: f64) {
        let bdp = self.capacity * base_rtt_us / 1e6;
        self.before = self.before.max(bdp);
        self.calm_rounds = 0;
        let latest = self.last.max(self.partial_rate(now).min(self.capacity));
        let peak = self.share_of_capacity(self.peak.max(latest));
        let share = self.share_of_capacity(self.rate.max(latest));
        self.peak = 0.0;
        if self.probing {
            self.probing = false;
            if window < PROBE_SUCCESS * self.before || peak < PROBE_SUCCESS {
                self.contended = true;
                self.wait_rounds = self.wait_rounds.saturating_mul(2).min(MAX_WAIT_ROUNDS);
            } else {
                self.before = 0.0;
            }
        } else if !self.contended && share < CONTENDED_SHARE {
            self.contended = true;
            self.wait_rounds = FIRST_WAIT_ROUNDS;
            self.before = self.before.max(window);
        }
    }

    /// A round below the threshold with the window at `window` bytes:
    /// `Some(w)` when the wait is over and a probe back to `w` bytes starts.
    pub(super) fn calm_round(&mut self, window: f64) -> Option<f64> {
        self.calm_rounds = self.calm_rounds.saturating_add(1);
        if self.probing {
            let peak = self.share_of_capacity(self.peak.max(self.last));
            let share = self.share_of_capacity(self.rate.max(self.last));
            let reached = window >= PROBE_SUCCESS * self.before && peak >= PROBE_SUCCESS;
            if reached || share >= ALONE_SHARE {
                self.probing = false;
                self.before = 0.0;
            }
        }
        if self.contended && self.calm_rounds >= self.wait_rounds {
            self.contended = false;
            self.probing = true;
            return Some(self.before);
        }
        None
    }

    /// The largest window (bytes) while contended, over base RTT
    /// `base_rtt_us`.
    pub(super) fn window_cap(&self, base_rtt_us: f64) -> Option<f64> {
        self.contended
            .then(|| CONTENDED_CAP * self.capacity * base_rtt_us / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Acknowledgements of 1,000 bytes every `gap_us` for `ms` ms from
    /// `from_ms`, with a 10 ms smoothed RTT; returns the end time (ms).
    fn deliver(c: &mut Contention, from_ms: u64, ms: u64, gap_us: u64) -> u64 {
        let mut t = from_ms * 1000;
        while t < (from_ms + ms) * 1000 {
            c.count_acked(Instant::from_micros(t), 1000, 10 * MS, 16_000);
            t += gap_us;
        }
        from_ms + ms
    }

    #[test]
    fn the_capacity_is_the_largest_smoothed_rate() {
        let mut c = Contention::default();
        // 1,000 bytes per 100 µs: 10 MB/s.
        let t = deliver(&mut c, 0, 200, 100);
        assert!((c.capacity - 10e6).abs() / 10e6 < 0.02, "{}", c.capacity);
        // A slower stretch leaves the capacity where it was.
        deliver(&mut c, t, 200, 400);
        assert!((c.capacity - 10e6).abs() / 10e6 < 0.02, "{}", c.capacity);
        assert!((c.rate - 2.5e6).abs() / 2.5e6 < 0.05, "{}", c.rate);
    }

    /// The path at full rate, then at a fifth of it, a loss (contended),
    /// and calm rounds until the probe starts; returns the time (ms).
    fn contended_until_probe(c: &mut Contention) -> u64 {
        let t = deliver(c, 0, 200, 100);
        let t = deliver(c, t, 200, 500);
        c.strong_signal(Instant::from_micros(t * 1000), 20_000.0, 10_000.0);
        while c.calm_round(5_000.0).is_none() {}
        t
    }

    #[test]
    fn a_loss_at_the_full_rate_is_the_flows_own() {
        let mut c = Contention::default();
        deliver(&mut c, 0, 200, 100);
        c.strong_signal(Instant::from_micros(0), 100_000.0, 10_000.0);
        assert_eq!(c.window_cap(10_000.0), None);
    }

    #[test]
    fn a_loss_at_a_small_share_caps_the_window_until_a_probe_reaches_the_path() {
        let mut c = Contention::default();
        let t = deliver(&mut c, 0, 200, 100);
        // Someone else took the path: the rate fell to a fifth.
        let t = deliver(&mut c, t, 200, 500);
        c.strong_signal(Instant::from_micros(0), 20_000.0, 10_000.0);
        // 5% of 10 MB/s over 10 ms.
        let cap = c.window_cap(10_000.0).unwrap();
        assert!((cap - 5_000.0).abs() < 100.0, "{cap}");
        // The wait: 16 calm rounds, then a probe back to the BDP (100 kB).
        for _ in 0..FIRST_WAIT_ROUNDS - 1 {
            assert_eq!(c.calm_round(5_000.0), None);
        }
        let before = c.calm_round(5_000.0).unwrap();
        assert!((before - 100_000.0).abs() < 2_000.0, "{before}");
        assert_eq!(c.window_cap(10_000.0), None);
        // The probe meets a loss at a small window: contended again, and
        // the next wait is twice as long.
        deliver(&mut c, t, 30, 500);
        c.strong_signal(Instant::from_micros(0), 20_000.0, 10_000.0);
        assert!(c.window_cap(10_000.0).is_some());
        assert_eq!(c.wait_rounds, 2 * FIRST_WAIT_ROUNDS);
        for _ in 0..10 {
            c.strong_signal(Instant::from_micros(0), 5_000.0, 10_000.0);
            for _ in 0..MAX_WAIT_ROUNDS {
                if c.calm_round(5_000.0).is_some() {
                    break;
                }
            }
        }
        assert_eq!(c.wait_rounds, MAX_WAIT_ROUNDS);
    }

    #[test]
    fn a_probe_that_gets_the_path_back_ends_contention() {
        let mut c = Contention::default();
        let t = contended_until_probe(&mut c);
        // The other flow left: the rate and window come back.
        deliver(&mut c, t, 50, 100);
        assert_eq!(c.calm_round(90_000.0), None);
        assert!(!c.probing && !c.contended);
        // Its own queue's loss later is not contention.
        c.strong_signal(Instant::from_micros(0), 120_000.0, 10_000.0);
        assert_eq!(c.window_cap(10_000.0), None);
    }

    /// A probe's loss is found a round after the overflow, often before
    /// the sample that saw the path full has closed: the sample under way
    /// counts.
    #[test]
    fn a_signal_counts_the_sample_under_way() {
        let mut c = Contention::default();
        let t = contended_until_probe(&mut c);
        // 10 ms at a fifth of the path closes a sample; then 8 ms at the
        // full rate, and the probe's loss.
        let t = deliver(&mut c, t, 10, 500);
        let t = deliver(&mut c, t, 8, 100);
        c.strong_signal(Instant::from_micros(t * 1000), 90_000.0, 10_000.0);
        assert!(!c.contended && !c.probing);
    }

    #[test]
    fn a_queue_that_merely_appears_does_not_count() {
        let mut c = Contention::default();
        let t = deliver(&mut c, 0, 200, 100);
        deliver(&mut c, t, 200, 500);
        // Rounds above the threshold without a strong signal.
        for _ in 0..100 {
            c.congested_round();
        }
        assert_eq!(c.window_cap(10_000.0), None);
    }
}
