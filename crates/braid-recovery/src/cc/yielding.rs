//! Less than best effort on any buffer: the delay controller LEDBAT (and
//! DTL's p = 0) uses with `adaptive = 1` (opt-in for now, see "Status").
//!
//! # The problem
//!
//! RFC 6817 backs off once the queuing delay passes a fixed TARGET (100 ms).
//! A path whose buffer holds less than that (a one-BDP buffer on a 60 ms
//! path holds 60 ms; an AQM such as CoDel holds 5 ms) never shows it the
//! target, so LEDBAT competes by loss like a TCP flow (issue 25 measured
//! competing TCP at 0.36–0.42 of the link). DTL's multiplicative decrease
//! (0.99 per acknowledged segment while above the target) also overshoots
//! on the way down: one round trip above the target costs `0.99^W`, which for
//! W = 100 is 63% of the window, and a flow alone on a shallow buffer then
//! leaves the link idle.
//!
//! # The model
//!
//! The controller works once per round trip (a round ends when a packet sent
//! after the previous decision is acknowledged), on the queuing delay `q`
//! (filtered one-way delay minus base delay, [`super::delay`]) and the base
//! RTT `R` (the smallest RTT seen):
//!
//! - **Threshold**: `q` counts as congestion above
//!   `θ = clamp(δ·q_max, ε, TARGET)`: TCP-LP's early-congestion threshold
//!   (Kuzmanovic and Knightly 2003: a fraction δ = 0.15 of the observed
//!   delay range), where `q_max` is the largest queuing delay seen (a full
//!   buffer shows its depth; a loss is a full buffer), capped by RFC 6817's
//!   TARGET so a deep buffer keeps the RFC's bound, and floored at `ε`, the
//!   noise floor: the largest of 1 ms, two packets' worth of our own sending
//!   (`2·SMSS·R/W`: our own packets queue that much at a bottleneck no
//!   faster than we send) and four times the mean difference between
//!   consecutive delay samples (jitter must not read as a queue).
//! - **Below θ**: additive increase, GAIN segments per round trip (RFC 6817).
//! - **Above θ, first round**: `W ← W·R/(R + q)`, the window that keeps the
//!   pipe full with an empty queue if the queue were all ours (the
//!   equilibrium of TCP Vegas and FAST). Alone, the next round sees an empty
//!   queue and a full link: the decrease never idles the link, on a shallow
//!   buffer or a deep one.
//! - **Above θ, consecutive rounds**: the queue did not go away although we
//!   removed ours, so another flow holds it: `W ← ½·W·R/(R + q)` every round
//!   it stays (TCP-LP's inference: a second indication within a round trip
//!   means cross traffic). Against TCP, whose queue stands for most of its
//!   sawtooth, the window decays geometrically; it grows back only while
//!   the queue is empty, i.e. on capacity TCP leaves unused. Under an AQM,
//!   which keeps a standing queue of its target (CoDel 5 ms, PIE 15 ms) while
//!   a TCP flow is present, the same rule applies as long as θ is below that
//!   queue.
//! - **Back below θ after yielding**: the cross traffic left; slow-start
//!   back to the window held before the streak (RFC 5681 slow start to
//!   ssthresh, as after a LEDBAT++ slowdown) instead of regaining a whole
//!   BDP one segment per round trip.
//! - **Loss**: `W ← β·W·R/(R + q)`: TCP's β = ½, and the queue removed too,
//!   so p = 0 always backs off further than the TCP flows it shares the
//!   loss with.

//!
//! # Status
//!
//! Measured in the simulator against CUBIC (`braid sim priority --scenario
//! polite --param adaptive=1`, 1 ms jitter): on a 60 ms, 20 Mbit/s path with
//! a one-BDP buffer TCP keeps 0.94 of the link (0.40 with DTL's AIMD), and
//! p = 0 alone reaches 0.93; with a 4-BDP buffer at 200 ms, 50 Mbit/s p = 0
//! alone reaches 0.80 (0.05) and TCP keeps 0.95. Not yet the default: two
//! p = 0 flows whose thresholds differ (learnt from different histories)
//! share unfairly (the `latecomer` scenario: Jain 0.73), and on buffers of a
//! few packets with jitter neither controller yields (TCP 0.30 of the link
//! with either).

use braid_core::Instant;

/// TCP-LP's δ: the threshold is this fraction of the largest queue seen.
const DELTA: f64 = 0.15;
/// Noise floor of the threshold, µs.
const NOISE_FLOOR_US: f64 = 1_000.0;
/// The threshold clears the measured delay noise by this factor: for
/// normal noise of σ, consecutive samples differ by 1.13σ on average, so 4×
/// that is 4.5σ.
const NOISE_MARGIN: f64 = 4.0;
/// EWMA gain of the noise estimate (RFC 6298's β for RTTVAR).
const NOISE_GAIN: f64 = 0.25;

/// The state of the yielding controller (see the module docs).
#[derive(Debug, Clone, Default)]
pub(super) struct Yielding {
    /// Largest queuing delay seen, µs.
    max_queuing_us: f64,
    /// When the last once-per-round decision was taken: a round ends when a
    /// packet sent after it is acknowledged.
    decided_at: Option<Instant>,
    /// Consecutive rounds above the threshold.
    high_rounds: u32,
    /// The window (bytes) before the current streak of rounds above the
    /// threshold started, if it went on long enough to be cross traffic.
    yielded_from: Option<f64>,
    /// Mean absolute difference between consecutive queuing-delay samples
    /// (EWMA, µs): the path's delay noise, which the threshold must clear.
    noise_us: f64,
    last_sample_us: Option<f64>,
}

/// What the controller decides for one acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Step {
    /// Below the threshold: grow additively.
    Grow,
    /// Above it, first time this round: multiply the window by this factor.
    Shrink(f64),
    /// Above it, already decided this round: leave the window.
    Hold,
    /// The queue that made us yield is gone: slow-start back to this
    /// window (bytes), where we were before yielding.
    Restore(f64),
}

impl Yielding {
    /// Records a queuing-delay sample (µs).
    pub(super) fn observe(&mut self, queuing_us: u64) {
        let q = queuing_us as f64;
        self.max_queuing_us = self.max_queuing_us.max(q);
        if let Some(last) = self.last_sample_us {
            self.noise_us += NOISE_GAIN * ((q - last).abs() - self.noise_us);
        }
        self.last_sample_us = Some(q);
    }

    /// The congestion threshold θ in µs, for a window of `window_segments`
    /// segments, base RTT `base_rtt_us` and the configured TARGET.
    pub(super) fn threshold_us(&self, target_us: f64, base_rtt_us: f64, window_segments: f64) -> f64 {
        let own_queue = 2.0 * base_rtt_us / window_segments.max(1.0);
        let floor = NOISE_FLOOR_US
            .max(own_queue)
            .max(NOISE_MARGIN * self.noise_us)
            .min(target_us);
        (DELTA * self.max_queuing_us).clamp(floor, target_us)
    }

    /// The decision for an acknowledgement of a packet sent at `sent` at
    /// `now`, with queuing delay `q` and threshold `threshold` (µs) and the
    /// base RTT (µs).
    pub(super) fn step(
        &mut self,
        now: Instant,
        sent: Instant,
        window: f64,
        queuing_us: f64,
        threshold_us: f64,
        base_rtt_us: f64,
    ) -> Step {
        let new_round = self.decided_at.is_none_or(|at| sent > at);
        if queuing_us <= threshold_us {
            if new_round {
                self.high_rounds = 0;
                if let Some(from) = self.yielded_from.take() {
                    if window < from / 2.0 {
                        return Step::Restore(from);
                    }
                }
            }
            return Step::Grow;
        }
        if !new_round {
            return Step::Hold;
        }
        let drain = drain_factor(base_rtt_us, queuing_us);
        let factor = if self.high_rounds == 0 {
            drain
        } else {
            // Cross traffic: remember where we were, to come back fast.
            self.yielded_from.get_or_insert(window / drain);
            0.5 * drain
        };
        self.high_rounds = self.high_rounds.saturating_add(1);
        self.decided_at = Some(now);
        Step::Shrink(factor)
    }

    /// A loss: the factor to multiply the window by (`beta` is TCP's), and
    /// the queue it shows is the buffer's depth.
    pub(super) fn on_loss(&mut self, now: Instant, queuing_us: f64, base_rtt_us: f64, beta: f64) -> f64 {
        self.max_queuing_us = self.max_queuing_us.max(queuing_us);
        self.decided_at = Some(now);
        beta * drain_factor(base_rtt_us, queuing_us)
    }
}

/// `R/(R + q)`: the fraction of the window that is pipe, not queue.
fn drain_factor(base_rtt_us: f64, queuing_us: f64) -> f64 {
    if base_rtt_us > 0.0 && queuing_us > 0.0 {
        base_rtt_us / (base_rtt_us + queuing_us)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    #[test]
    fn the_threshold_follows_the_largest_queue_within_its_bounds() {
        let mut y = Yielding::default();
        // Nothing seen yet: the noise floor.
        assert_eq!(y.threshold_us(100_000.0, 40_000.0, 100.0), 1_000.0);
        // A 60 ms buffer: 9 ms.
        y.observe(60_000);
        assert!((y.threshold_us(100_000.0, 40_000.0, 100.0) - 9_000.0).abs() < 1e-6);
        // A 2 s buffer: capped at the target.
        y.observe(2_000_000);
        assert_eq!(y.threshold_us(100_000.0, 40_000.0, 100.0), 100_000.0);
        // A small window: its own packets' queue is the floor.
        let y = Yielding::default();
        assert_eq!(y.threshold_us(100_000.0, 10_000.0, 4.0), 5_000.0);
    }

    #[test]
    fn the_first_round_above_drains_and_later_ones_halve_too() {
        let mut y = Yielding::default();
        let (r, q) = (40_000.0, 10_000.0);
        assert_eq!(y.step(t(100), t(50), 100_000.0, 500.0, 1_000.0, r), Step::Grow);
        assert_eq!(y.step(t(101), t(51), 100_000.0, q, 1_000.0, r), Step::Shrink(0.8));
        // Same round (sent before the decision): hold.
        assert_eq!(y.step(t(110), t(60), 80_000.0, q, 1_000.0, r), Step::Hold);
        // Next round, still above: the queue is someone else's.
        assert_eq!(y.step(t(150), t(102), 80_000.0, q, 1_000.0, r), Step::Shrink(0.4));
        // Back below with the window well under where it was: restore it.
        assert_eq!(y.step(t(200), t(151), 32_000.0, 0.0, 1_000.0, r), Step::Restore(100_000.0));
        // Then growth, and the count starts over.
        assert_eq!(y.step(t(201), t(152), 32_000.0, 0.0, 1_000.0, r), Step::Grow);
        assert_eq!(y.step(t(250), t(202), 32_000.0, q, 1_000.0, r), Step::Shrink(0.8));
    }

    #[test]
    fn a_loss_backs_off_further_than_tcp_and_teaches_the_buffer_depth() {
        let mut y = Yielding::default();
        let f = y.on_loss(t(10), 20_000.0, 60_000.0, 0.5);
        assert!((f - 0.375).abs() < 1e-12);
        assert!((y.threshold_us(100_000.0, 60_000.0, 100.0) - 3_000.0).abs() < 1e-6);
    }
}
