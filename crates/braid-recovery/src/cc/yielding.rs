//! Less than best effort on any buffer: the delay controller LEDBAT (and
//! DTL's p = 0) uses with `adaptive = 1` (opt-in for now, see "Status";
//! `adaptive = 0`, the default, is DTL's fixed-target AIMD, and
//! `delay_beta = 1` keeps RFC 6817's linear controller either way).
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
//! - **Threshold**: `q` counts as congestion above `θ`, the smallest queue
//!   that can be told from noise: the largest of 1 ms, two packets' worth of
//!   our own sending (`2·SMSS·R/W`: our own packets queue that much at a
//!   bottleneck no faster than we send) and four times the mean difference
//!   between consecutive *raw* delay samples (the path's jitter; the
//!   filtered samples change too little from one to the next to show it),
//!   capped by RFC 6817's TARGET. Nothing in θ depends on the buffer, so a
//!   buffer of any depth, or an AQM's short standing queue, shows it.
//!   An earlier design took TCP-LP's `δ·q_max` (Kuzmanovic and Knightly
//!   2003: a fraction of the largest queue seen). That is each flow's own
//!   history: a latecomer measures it over a base delay that holds the
//!   incumbent's standing queue, so two p = 0 flows learnt different
//!   thresholds and the one with the lower threshold yielded to the other
//!   (`latecomer`: Jain 0.73, 0.91 with the hold rule below, 1.00 with
//!   this threshold); under an AQM the largest queue is a slow-start burst,
//!   above the standing queue a TCP flow keeps there. θ's terms are the path's (jitter) or favour the
//!   smaller flow (its own queue ∝ 1/W), so the thresholds of flows sharing
//!   a bottleneck converge.
//! - **Below θ**: additive increase, GAIN segments per round trip (RFC 6817).
//! - **Above θ, first round**: `W ← W·R/(R + q)`, the window that keeps the
//!   pipe full with an empty queue if the queue were all ours (the
//!   equilibrium of TCP Vegas and FAST). Alone, the next round sees an empty
//!   queue and a full link: the decrease never idles the link, on a shallow
//!   buffer or a deep one.
//! - **Above θ, later rounds, the queue going down**: hold the window. Our
//!   queue is still leaving, or other yielding flows drain theirs too (each
//!   drained the whole queue, so together they empty it).
//! - **Above θ, later rounds, the queue rising**: `W ← ½·W·R/(R + q)`. We
//!   have held our window since our last decrease, so a queue that rises
//!   above its lowest point since then (by more than the noise margin) is
//!   another flow growing into it: one that does not yield (TCP-LP's
//!   inference of cross traffic from a second indication, made specific to
//!   growth). Against TCP, whose queue grows for most of its sawtooth, the
//!   window decays geometrically; it grows back only while the queue is
//!   below θ, i.e. on capacity TCP leaves unused. Two yielding flows never
//!   halve each other: both drain by the same factor, multiplicatively, so
//!   their windows converge (Chiu and Jain's argument for AIMD). Halving on
//!   any second round above θ instead made whichever flow's rounds fall
//!   later halve against the other's not yet drained queue.
//! - **Back below θ after yielding**: the cross traffic left; slow-start
//!   back to the window held before the streak (RFC 5681 slow start to
//!   ssthresh, as after a LEDBAT++ slowdown) instead of regaining a whole
//!   BDP one segment per round trip. That slow start ends at the larger of
//!   θ and δ = 0.15 of the largest queue seen (TCP-LP's early-congestion
//!   threshold; a loss shows the buffer's depth), not at the target, so it
//!   never fills a shallow buffer under someone else; ending at θ alone
//!   ended it on its own bursts, far below the pipe.
//! - **Loss**: `W ← β·W·R/(R + q)`: TCP's β = ½, and the queue removed too,
//!   so p = 0 always backs off further than the TCP flows it shares the
//!   loss with.
//! - **Where no queue shows** (a shallow buffer, an AQM, flow queueing):
//!   the flow's delivery rate at a loss, or at a queue rising while it
//!   holds, against the largest rate it has seen tells its own congestion
//!   from traffic that does not yield; contended, the window is capped at a
//!   small share of the path, and probes at doubling intervals find out
//!   when the other traffic has left ([`super::contention`]).
//!
//! # Rounds, not samples
//!
//! Each round is judged once, at its end, by its **lowest** raw sample
//! (raw one-way delay minus the base delay). Jitter lifts some samples
//! of a round; a standing queue lifts all of them. Judged sample by sample
//! (the earlier design), a path with jitter but no queue showed the
//! threshold every few rounds: on a 10 ms, 20 Mbit/s path with σ of one
//! packet time, the filtered samples at windows below the BDP had p50
//! 1.75 ms and p99 2.9 ms against a threshold near 2.6 ms, and p = 0 alone
//! moved 0.51 of the link (0.84 judged by the round's lowest sample). The
//! noise the threshold clears is measured the same way, between
//! consecutive rounds' lowest samples, and learnt after each round is
//! judged, so a rise is judged against the noise before it.
//!
//! # Status
//!
//! Opt-in (`adaptive = 1`). The p = 0 grid in the simulator
//! (`braid sim priority --grid --p 0 --aqm droptail,codel,pie,fq_codel
//! --param adaptive=1`: RTT 10/50/200 ms × 5/20/100 Mbit/s × 0.25/1/4 BDP,
//! CUBIC and NewReno, jitter σ of one packet time; 1,296 checks), judged
//! sample by sample → by rounds:
//! - misses 426 → 258;
//! - p = 0 alone, share of the link: mean 0.64 → 0.80 (41 misses, from
//!   149); after the TCP phase (`alone_again`) 71 misses, from 161, most
//!   on 200 ms paths, where the window regained one segment per round
//!   after a long yield is far below the BDP;
//! - competing TCP, share of what it reaches alone: mean 0.81 → 0.77,
//!   misses 115 → 141. Rounds judged at their end see a growing queue up
//!   to a round later, and a shallow buffer (0.25 BDP, or an AQM's 5 ms)
//!   holds too little queue to tell from the jitter at all, so there
//!   p = 0 competes by loss (it halves and drains, but regrows as fast as
//!   TCP);
//! - pairs of p = 0 flows: Jain ≥ 0.95 at all but 5 of 216 points (1 before).
//!
//! With the contention memory ([`super::contention`]), same grid: misses
//! 258 → 201; competing TCP, share of what it reaches alone: mean 0.77 →
//! 0.83, misses 141 → 89 (drop-tail 24 → 18, CoDel 44 → 29, PIE 28 → 11,
//! fq_codel 45 → 31); p = 0 alone unchanged (mean 0.80, 41 → 42 misses);
//! after the TCP phase 71 → 65 misses (mean 0.74 → 0.76); pairs 5 of 216
//! below Jain 0.95, as before. Variants tried on the 5 and 20 Mbit/s half of the
//! grid (864 checks, 190 misses before): entering contention on any round
//! above the threshold (165: pairs of p = 0 flows see each other's queue
//! appear), judging a probe by its rate alone (161) or by its window alone
//! (175: under flow queueing the flow's own queue lets its window grow at
//! half the link), a threshold relative to the share the flow reached
//! alone (181), an uncapped wait between probes (154–158; capped at 64
//! rounds: 147; and the sample under way counted at a signal: 143).
//!
//! What is left (issue 25): the misses that remain are mostly at 5 Mbit/s
//! and shallow buffers, where the jitter (σ of one packet time) makes a
//! buffer of a few packets drop at half the link even alone, so the rate at
//! a loss tells little; regrowth after a loss slower than TCP's where
//! no delay signal is visible (AIMD shares are in proportion to the
//! additive increases), a faster way back to the pipe after a long yield
//! on long paths (accelerating the additive increase per calm round was
//! tried and stole from TCP: misses 50 → 144 on drop-tail), and DTL
//! Fig. 7 (`five`), where the stall at the switch from p = 0 to p = 1 is
//! counted in the RTT the yielding controller keeps near the base RTT.

use std::time::Duration;

use braid_core::Instant;

use super::contention::{Contention, MIN_SAMPLE_SEGMENTS};

/// TCP-LP's δ: a slow start back to an earlier window ends at this
/// fraction of the largest queue seen.
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
    /// Largest queuing delay seen, µs (a loss shows the buffer's depth).
    max_queuing_us: f64,
    /// Lowest queuing delay at a once-per-round decision since the last
    /// decrease, µs: while we hold our window, a queue rising above it is
    /// someone else growing. One sample per round, as the one it is compared
    /// with: the minimum over every sample of a round trip dips into the
    /// noise, and a large window's round holds hundreds of samples.
    low_since_decrease_us: f64,
    /// When the last once-per-round decision was taken: a round ends when a
    /// packet sent after it is acknowledged.
    decided_at: Option<Instant>,
    /// Consecutive rounds above the threshold.
    high_rounds: u32,
    /// The window (bytes) before the current streak of rounds above the
    /// threshold started, if it went on long enough to be cross traffic.
    yielded_from: Option<f64>,
    /// Mean absolute difference between consecutive rounds' lowest
    /// queuing delays (EWMA, µs): the path's delay noise as the decisions
    /// see it, which the threshold must clear.
    noise_us: f64,
    /// The lowest raw queuing delay of the previous round, µs.
    last_round_low_us: Option<f64>,
    /// The lowest raw queuing delay of the current round so far, µs.
    round_low_us: Option<f64>,
    /// The last round was judged congested: hold the window until the next
    /// decision (else grow).
    congested: bool,
    /// Whether a signal is this flow's own queue or traffic that does not
    /// yield, from its delivery rate ([`super::contention`]).
    contention: Contention,
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
    /// Records a queuing-delay sample (µs): `queuing_us` filtered (what the
    /// controller acts on), `raw_us` the unfiltered sample minus the base
    /// delay. The noise is measured on the raw samples: the filter (the
    /// minimum of the last few) changes little from one sample to the next
    /// even on a path whose delay jitters, so differences of filtered
    /// samples under-read the jitter, and a threshold inside the jitter
    /// makes every round look congested.
    pub(super) fn observe(&mut self, queuing_us: u64, raw_us: u64) {
        let q = queuing_us as f64;
        self.max_queuing_us = self.max_queuing_us.max(q);
        let raw = raw_us as f64;
        self.round_low_us = Some(self.round_low_us.map_or(raw, |low| low.min(raw)));
    }

    /// Counts `bytes` acknowledged at `now` toward the delivery rate
    /// (`srtt` the smoothed RTT, `smss` the segment size); an
    /// application-limited acknowledgement restarts the sample instead.
    pub(super) fn count_acked(&mut self, now: Instant, bytes: u64, app_limited: bool, srtt: Duration, smss: u64) {
        if app_limited {
            self.contention.restart_sample();
        } else {
            self.contention
                .count_acked(now, bytes, srtt, MIN_SAMPLE_SEGMENTS * smss);
        }
    }

    /// The largest window (bytes) contention allows, over base RTT
    /// `base_rtt_us` (`None`: no cap).
    pub(super) fn window_cap(&self, base_rtt_us: f64) -> Option<f64> {
        self.contention.window_cap(base_rtt_us)
    }

    /// Ends a round: its lowest raw sample (or `fallback_us` if it had
    /// none).
    fn end_round(&mut self, fallback_us: f64) -> f64 {
        self.round_low_us.take().unwrap_or(fallback_us)
    }

    /// Learns the noise from a round's lowest sample, after the round was
    /// judged: a rise is judged against the noise seen before it.
    fn learn_noise(&mut self, low: f64) {
        if let Some(last) = self.last_round_low_us {
            self.noise_us += NOISE_GAIN * ((low - last).abs() - self.noise_us);
        }
        self.last_round_low_us = Some(low);
    }

    /// The congestion threshold θ in µs, for a window of `window_segments`
    /// segments, base RTT `base_rtt_us` and the configured TARGET.
    pub(super) fn threshold_us(&self, target_us: f64, base_rtt_us: f64, window_segments: f64) -> f64 {
        let own_queue = 2.0 * base_rtt_us / window_segments.max(1.0);
        NOISE_FLOOR_US
            .max(own_queue)
            .max(NOISE_MARGIN * self.noise_us)
            .min(target_us)
    }

    /// Where a slow start back to an earlier window ends, µs: at the
    /// threshold, or at δ of the largest queue seen if that is more. A slow
    /// start's own bursts queue packets even below the pipe's size (it sends
    /// two for each one acknowledged), so ending at the first queue it can
    /// tell from noise ends it far below the pipe, and a long path then
    /// regains the rest one segment per round trip; a fraction δ of the
    /// buffer's depth (TCP-LP's early-congestion threshold) still ends it
    /// well before the buffer overflows under another flow.
    pub(super) fn slow_start_exit_us(&self, target_us: f64, base_rtt_us: f64, window_segments: f64) -> f64 {
        self.threshold_us(target_us, base_rtt_us, window_segments)
            .max((DELTA * self.max_queuing_us).min(target_us))
    }

    /// The margin by which a queue must rise above its low point to count
    /// as growth rather than noise, µs.
    fn rise_margin_us(&self) -> f64 {
        NOISE_FLOOR_US.max(NOISE_MARGIN * self.noise_us)
    }

    /// The decision for an acknowledgement of a packet sent at `sent` at
    /// `now`, with the filtered queuing delay `queuing_us` (used only for a
    /// round without samples), threshold `threshold_us` and the base RTT
    /// (µs). Between decisions the window grows (the last round was below
    /// the threshold) or holds; a decision is taken once per round, on
    /// the round's lowest raw sample.
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
        if !new_round {
            return if self.congested { Step::Hold } else { Step::Grow };
        }
        self.decided_at = Some(now);
        let low = self.end_round(queuing_us);
        let step = self.judge_round(now, low, window, threshold_us, base_rtt_us);
        self.learn_noise(low);
        step
    }

    /// The decision at the end of a round whose lowest sample was `low`.
    fn judge_round(&mut self, now: Instant, low: f64, window: f64, threshold_us: f64, base_rtt_us: f64) -> Step {
        if low <= threshold_us {
            self.congested = false;
            self.high_rounds = 0;
            if let Some(before) = self.contention.calm_round(window) {
                // Contended long enough without a signal: probe whether the
                // other traffic left.
                self.yielded_from = None;
                return if window < before / 2.0 {
                    Step::Restore(before)
                } else {
                    Step::Grow
                };
            }
            if let Some(from) = self.yielded_from.take() {
                if window < from / 2.0 {
                    return Step::Restore(from);
                }
            }
            return Step::Grow;
        }
        self.congested = true;
        self.contention.congested_round();
        let drain = drain_factor(base_rtt_us, low);
        let first = self.high_rounds == 0;
        self.high_rounds = self.high_rounds.saturating_add(1);
        let factor = if first {
            drain
        } else if low > self.low_since_decrease_us + self.rise_margin_us() {
            // We held our window and the queue grew: a flow that does not
            // yield is growing. Remember where we were, to come back fast.
            self.yielded_from.get_or_insert(window / drain);
            self.contention.strong_signal(now, window / drain, base_rtt_us);
            0.5 * drain
        } else {
            // The queue is going down: the others are draining too
            // (delay-based flows), or ours is still leaving. Hold.
            self.low_since_decrease_us = self.low_since_decrease_us.min(low);
            return Step::Hold;
        };
        self.low_since_decrease_us = low;
        Step::Shrink(factor)
    }

    /// A loss with the window at `window` bytes: the factor to multiply the
    /// window by (`beta` is TCP's), and the queue it shows is the buffer's
    /// depth.
    pub(super) fn on_loss(&mut self, now: Instant, window: f64, queuing_us: f64, base_rtt_us: f64, beta: f64) -> f64 {
        self.max_queuing_us = self.max_queuing_us.max(queuing_us);
        self.contention.strong_signal(now, window, base_rtt_us);
        self.decided_at = Some(now);
        self.round_low_us = None;
        self.congested = true;
        self.low_since_decrease_us = queuing_us;
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
    fn the_threshold_is_the_noise_floor_within_its_bounds() {
        let mut y = Yielding::default();
        // Nothing seen yet: 1 ms.
        assert_eq!(y.threshold_us(100_000.0, 40_000.0, 100.0), 1_000.0);
        // A deep queue alone does not raise it: whatever the buffer, the
        // flow backs off at the first queue it can tell from noise.
        y.observe(60_000, 60_000);
        y.observe(60_000, 60_000);
        assert_eq!(y.threshold_us(100_000.0, 40_000.0, 100.0), 1_000.0);
        // A small window: its own packets' queue is the floor.
        assert_eq!(y.threshold_us(100_000.0, 10_000.0, 4.0), 5_000.0);
        // Never above the target (RFC 6817's bound).
        assert_eq!(y.threshold_us(3_000.0, 10_000.0, 4.0), 3_000.0);
    }

    #[test]
    fn a_slow_start_back_ends_at_a_fraction_of_the_largest_queue() {
        let mut y = Yielding::default();
        assert_eq!(y.slow_start_exit_us(100_000.0, 40_000.0, 100.0), 1_000.0);
        // A 60 ms buffer: 9 ms, above the 1 ms threshold.
        y.observe(60_000, 60_000);
        assert!((y.slow_start_exit_us(100_000.0, 40_000.0, 100.0) - 9_000.0).abs() < 1e-6);
        // Never above the target.
        y.observe(2_000_000, 2_000_000);
        assert_eq!(y.slow_start_exit_us(100_000.0, 40_000.0, 100.0), 100_000.0);
    }

    /// One acknowledgement: `q` (µs) observed (filtered and raw alike),
    /// then the decision for a packet sent at `sent_ms`, at `now_ms`.
    fn ack(y: &mut Yielding, now_ms: u64, sent_ms: u64, window: f64, q: u64) -> Step {
        y.observe(q, q);
        y.step(t(now_ms), t(sent_ms), window, q as f64, 1_000.0, 40_000.0)
    }

    #[test]
    fn the_first_round_above_drains_and_later_ones_halve_while_the_queue_grows() {
        let mut y = Yielding::default();
        assert_eq!(ack(&mut y, 100, 50, 100_000.0, 500), Step::Grow);
        // Still the round that ended at 100 ms (sent before it): no new
        // decision, whatever one sample says.
        assert_eq!(ack(&mut y, 101, 51, 100_000.0, 10_000), Step::Grow);
        // The next round's lowest sample is 10 ms: drain.
        assert_eq!(ack(&mut y, 150, 101, 100_000.0, 12_000), Step::Shrink(0.8));
        // Same round (sent before the decision): hold.
        assert_eq!(ack(&mut y, 160, 120, 80_000.0, 10_000), Step::Hold);
        // The queue goes down (ours leaving, or other yielding flows
        // draining theirs): next round, still above, but not growing: hold.
        assert_eq!(ack(&mut y, 200, 151, 80_000.0, 8_000), Step::Hold);
        // Within the noise margin of that round's low point: still hold.
        assert_eq!(ack(&mut y, 250, 201, 80_000.0, 8_500), Step::Hold);
        // We held, and the queue rose above its low point: someone is
        // growing into it. Halve (and drain).
        assert_eq!(ack(&mut y, 300, 251, 80_000.0, 20_000), Step::Shrink(0.5 * 40.0 / 60.0));
        // Back below with the window well under where it was: restore it.
        assert_eq!(ack(&mut y, 350, 301, 32_000.0, 0), Step::Restore(120_000.0));
        // Then growth until the round ends, and the count starts over.
        assert_eq!(ack(&mut y, 360, 320, 32_000.0, 10_000), Step::Grow);
        assert_eq!(ack(&mut y, 400, 351, 32_000.0, 10_000), Step::Shrink(0.8));
    }

    /// A round is judged by its lowest sample: jitter that lifts some
    /// samples above the threshold does not make the round congested, and
    /// a standing queue lifts them all.
    #[test]
    fn a_round_is_judged_by_its_lowest_sample() {
        let mut y = Yielding::default();
        assert_eq!(ack(&mut y, 100, 50, 100_000.0, 0), Step::Grow);
        for (i, q) in [5_000, 200, 7_000, 3_000].into_iter().enumerate() {
            assert_eq!(ack(&mut y, 101 + i as u64, 60, 100_000.0, q), Step::Grow);
        }
        assert_eq!(ack(&mut y, 150, 101, 100_000.0, 4_000), Step::Grow);
        for (i, q) in [5_000, 3_000, 7_000].into_iter().enumerate() {
            assert_eq!(ack(&mut y, 151 + i as u64, 120, 100_000.0, q), Step::Grow);
        }
        assert_eq!(ack(&mut y, 200, 151, 100_000.0, 4_000), Step::Shrink(40.0 / 43.0));
    }

    /// The noise floor comes from the rounds' lowest samples: a path
    /// whose delay jitters from round to round raises the threshold above
    /// its jitter.
    #[test]
    fn jitter_between_rounds_raises_the_threshold() {
        let mut y = Yielding::default();
        for i in 0..200u64 {
            // One sample a round, alternating 0 and 6 ms.
            let q = if i % 2 == 0 { 0 } else { 6_000 };
            y.observe(q, q);
            let low = y.end_round(0.0);
            y.learn_noise(low);
        }
        let th = y.threshold_us(100_000.0, 40_000.0, 100.0);
        assert!(th > 20_000.0, "{th}");
    }

    #[test]
    fn a_loss_backs_off_further_than_tcp() {
        let mut y = Yielding::default();
        let f = y.on_loss(t(10), 10_000.0, 20_000.0, 60_000.0, 0.5);
        assert!((f - 0.375).abs() < 1e-12);
        // And counts as a decision of its round.
        assert_eq!(y.step(t(20), t(5), 10_000.0, 5_000.0, 1_000.0, 60_000.0), Step::Hold);
    }
}
