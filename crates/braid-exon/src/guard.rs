//! Yielding to loss-based flows: loss *with a standing queue* is read as
//! congestion, loss without one as random.
//!
//! The BBR-style controller ignores loss, which is what Exon needs on a
//! lossy path, but next to a loss-based flow (TCP CUBIC) on a shallow
//! buffer it keeps `2 × BDP` in flight, fills the queue, and the TCP flow
//! takes every resulting drop as a signal to back off: TCP starves. This
//! guard caps the window when a packet-timed round (BBR's round trip, draft
//! §4.1.1.3) saw both loss and a queue that never drained: the smallest
//! RTT of the whole round above the propagation delay by a quarter (and
//! 1 ms). Random loss leaves the round's minimum RTT at the propagation
//! delay, because the paced flow itself does not keep a standing queue, so
//! it does not trigger the guard. The cap is cut multiplicatively (×0.7,
//! CUBIC's β, RFC 9438 §4.6), grows by one datagram per round (Reno's
//! additive increase, RFC 5681 §3.1) while the queue stands, by a quarter
//! per round after three rounds without one (the competing flow has gone
//! or backed off), and is lifted once it reaches the controller's window.
//! This is the delay-qualified variant of BBRv2's `inflight_hi` bound
//! (draft-cardwell-iccrg-bbr-congestion-control-02 §4.5.10).
//!
//! The BBR-style controller now keeps such a bound itself
//! (`braid_recovery::Bbr::inflight_hi`, on the same signal), so the guard
//! must not answer the same loss a second time: two multiplicative cuts per
//! episode starve Exon next to CUBIC instead of sharing. A round counts as
//! congested only when it lost more than 2% of its fragments (BBR's
//! `BBRLossThresh`, draft-cardwell-ccwg-bbr-00 §2.8), and the guard stands
//! aside when the controller's window fell during the round or is already
//! below what the round had in flight: the controller answered.

use std::time::Duration;

use braid_core::Instant;

/// Multiplicative decrease on a congested round.
const BETA: f64 = 0.7;
/// Loss rate of a round above which it counts as congested (BBR's
/// `BBRLossThresh`).
const LOSS_THRESH: f64 = 0.02;
/// Rounds without a standing queue before the cap grows multiplicatively.
const CALM_ROUNDS: u32 = 3;
/// How long the propagation-delay estimate stands without a new minimum.
const BASE_WINDOW: Duration = Duration::from_secs(10);

/// The guard of one path.
#[derive(Debug, Clone)]
pub struct QueueLossGuard {
    mss: u64,
    base: Option<Duration>,
    base_at: Instant,
    /// A round ends when a fragment sent at or after this is acknowledged.
    round_start: Instant,
    round_min: Option<Duration>,
    round_lost: u64,
    /// Fragments acknowledged this round.
    round_acked: u64,
    round_max_in_flight: u64,
    /// The controller's window when the round began.
    round_start_cwnd: Option<u64>,
    cap: Option<u64>,
    /// When the cap was last cut.
    cut_at: Option<Instant>,
    calm: u32,
    cuts: u64,
}

impl QueueLossGuard {
    /// A guard for datagrams of `mss` bytes.
    pub fn new(mss: u64) -> QueueLossGuard {
        QueueLossGuard {
            mss,
            base: None,
            base_at: Instant::ZERO,
            round_start: Instant::ZERO,
            round_min: None,
            round_lost: 0,
            round_acked: 0,
            round_max_in_flight: 0,
            round_start_cwnd: None,
            cap: None,
            cut_at: None,
            calm: 0,
            cuts: 0,
        }
    }

    /// The window to use instead of the controller's `cwnd`.
    pub fn limit(&self, cwnd: u64) -> u64 {
        self.cap.map_or(cwnd, |c| c.min(cwnd))
    }

    /// The current cap, if any.
    pub fn cap(&self) -> Option<u64> {
        self.cap
    }

    /// Congested rounds seen (each cut the cap).
    pub fn cuts(&self) -> u64 {
        self.cuts
    }

    /// `bytes_in_flight` after a send.
    pub fn on_sent(&mut self, bytes_in_flight: u64) {
        self.round_max_in_flight = self.round_max_in_flight.max(bytes_in_flight);
    }

    /// An RTT sample (first transmissions only).
    pub fn on_rtt(&mut self, now: Instant, rtt: Duration) {
        self.round_min = Some(self.round_min.map_or(rtt, |m| m.min(rtt)));
        let stale = now.saturating_duration_since(self.base_at) > BASE_WINDOW;
        if self.base.is_none_or(|b| rtt <= b) || stale {
            self.base = Some(rtt);
            self.base_at = now;
        }
    }

    /// Bytes declared lost, the latest of them sent at `sent_at`. Losses
    /// of fragments sent before the latest cut were answered by it (one
    /// reduction per loss episode, as RFC 6582 §3.2 does for NewReno).
    pub fn on_loss(&mut self, bytes: u64, sent_at: Instant) {
        if self.cut_at.is_none_or(|c| sent_at > c) {
            self.round_lost += bytes;
        }
    }

    /// An acknowledgement of a fragment sent at `sent_at`; `cwnd` is the
    /// controller's window.
    pub fn on_ack(&mut self, now: Instant, sent_at: Instant, cwnd: u64) {
        self.round_acked += 1;
        if sent_at < self.round_start {
            return;
        }
        // The round ends.
        let queued = match (self.round_min, self.base) {
            (Some(m), Some(b)) => m > b + (b / 4).max(Duration::from_millis(1)),
            _ => false,
        };
        let floor = 4 * self.mss;
        let lost = self.round_lost.div_ceil(self.mss) as f64;
        let lossy = lost > LOSS_THRESH * (lost + self.round_acked as f64);
        // The controller cut its window during the round, or already holds
        // less in flight than the round had: it answered this loss itself.
        let answered =
            cwnd < self.round_max_in_flight || self.round_start_cwnd.is_some_and(|c| cwnd < c);
        if lossy && queued && !answered {
            let w = self.limit(cwnd).min(self.round_max_in_flight.max(floor));
            self.cap = Some(((w as f64 * BETA) as u64).max(floor));
            self.calm = 0;
            self.cuts += 1;
            self.cut_at = Some(now);
        } else if let Some(c) = self.cap {
            // Additive increase while the queue stands; once it has been
            // gone for a few rounds (the other flow backed off or left),
            // grow by a quarter per round, like BBR's bandwidth probing,
            // until the controller's own window is the limit again.
            self.calm = if queued { 0 } else { self.calm + 1 };
            let grown = if self.calm >= CALM_ROUNDS {
                c + c / 4
            } else {
                c + self.mss
            };
            self.cap = (grown < cwnd).then_some(grown);
        }
        self.round_start = now;
        self.round_min = None;
        self.round_lost = 0;
        self.round_acked = 0;
        self.round_max_in_flight = 0;
        self.round_start_cwnd = Some(cwnd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1000;

    /// Runs `rounds` rounds of 10 RTT samples with RTT `rtt(round)`
    /// and `loss(round)` bytes lost, at `in_flight` bytes.
    fn drive(
        g: &mut QueueLossGuard,
        t: &mut Instant,
        rounds: u32,
        rtt: impl Fn(u32) -> Duration,
        loss: impl Fn(u32) -> u64,
        in_flight: u64,
    ) {
        for r in 0..rounds {
            let start = *t;
            g.on_sent(in_flight);
            *t += Duration::from_micros(1);
            g.on_loss(loss(r), *t);
            for _ in 0..10 {
                *t += Duration::from_millis(2);
                g.on_rtt(*t, rtt(r));
            }
            // The round ends with the acknowledgement of its first send.
            g.on_ack(*t, start, 200 * MSS);
        }
    }

    #[test]
    fn random_loss_without_queue_never_caps() {
        let mut g = QueueLossGuard::new(MSS);
        let mut t = Instant::ZERO;
        drive(
            &mut g,
            &mut t,
            200,
            |_| Duration::from_millis(20),
            |_| 5 * MSS,
            150 * MSS,
        );
        assert_eq!(g.cap(), None);
        assert_eq!(g.limit(200 * MSS), 200 * MSS);
    }

    #[test]
    fn queue_without_loss_never_caps() {
        let mut g = QueueLossGuard::new(MSS);
        let mut t = Instant::ZERO;
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(20),
            |_| 0,
            100 * MSS,
        );
        drive(
            &mut g,
            &mut t,
            50,
            |_| Duration::from_millis(40),
            |_| 0,
            200 * MSS,
        );
        assert_eq!(g.cap(), None);
    }

    #[test]
    fn loss_with_standing_queue_cuts_then_grows_then_lifts() {
        let mut g = QueueLossGuard::new(MSS);
        let mut t = Instant::ZERO;
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(20),
            |_| 0,
            100 * MSS,
        );
        // A queue that never drains, and tail drops.
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(40),
            |_| MSS,
            200 * MSS,
        );
        assert_eq!(g.cap(), Some(140 * MSS));
        assert_eq!(g.cuts(), 1);
        // Queue stays, no loss: one datagram per round.
        drive(
            &mut g,
            &mut t,
            5,
            |_| Duration::from_millis(40),
            |_| 0,
            140 * MSS,
        );
        assert_eq!(g.cap(), Some(145 * MSS));
        assert_eq!(g.limit(120 * MSS), 120 * MSS);
        // The queue is gone: after three rounds the cap grows by a quarter
        // per round, and is lifted at the controller's window (200).
        drive(
            &mut g,
            &mut t,
            3,
            |_| Duration::from_millis(21),
            |_| 0,
            140 * MSS,
        );
        assert_eq!(g.cap(), Some(147 * MSS + 147 * MSS / 4));
        drive(
            &mut g,
            &mut t,
            2,
            |_| Duration::from_millis(21),
            |_| 0,
            140 * MSS,
        );
        assert_eq!(g.cap(), None);
    }

    #[test]
    fn losses_sent_before_a_cut_do_not_cut_again() {
        let mut g = QueueLossGuard::new(MSS);
        let mut t = Instant::ZERO;
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(20),
            |_| 0,
            100 * MSS,
        );
        let early = t;
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(40),
            |_| MSS,
            200 * MSS,
        );
        assert_eq!(g.cap(), Some(140 * MSS));
        // The same episode's losses, detected a round later.
        g.on_loss(5 * MSS, early);
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(40),
            |_| 0,
            140 * MSS,
        );
        assert_eq!((g.cap(), g.cuts()), (Some(141 * MSS), 1));
    }

    #[test]
    fn loss_under_two_percent_of_the_round_is_not_congestion() {
        let mut g = QueueLossGuard::new(MSS);
        let mut t = Instant::ZERO;
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(20),
            |_| 0,
            100 * MSS,
        );
        // A standing queue, one fragment lost among 60 acknowledged.
        let start = t;
        g.on_sent(200 * MSS);
        t += Duration::from_micros(1);
        g.on_loss(MSS, t);
        for _ in 0..60 {
            t += Duration::from_millis(1);
            g.on_rtt(t, Duration::from_millis(40));
            g.on_ack(t, start - Duration::from_micros(1), 200 * MSS);
        }
        g.on_ack(t, start, 200 * MSS);
        assert_eq!((g.cap(), g.cuts()), (None, 0));
    }

    #[test]
    fn a_controller_that_answered_is_not_cut_again() {
        let mut g = QueueLossGuard::new(MSS);
        let mut t = Instant::ZERO;
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(20),
            |_| 0,
            100 * MSS,
        );
        // Loss with a standing queue, but the controller's window (150)
        // is already below the 200 the round had in flight.
        let start = t;
        g.on_sent(200 * MSS);
        g.on_loss(MSS, t + Duration::from_micros(1));
        g.on_rtt(t + Duration::from_millis(2), Duration::from_millis(40));
        g.on_ack(t + Duration::from_millis(2), start, 150 * MSS);
        assert_eq!((g.cap(), g.cuts()), (None, 0));
    }

    #[test]
    fn a_controller_that_cut_its_window_in_the_round_is_not_cut_again() {
        let mut g = QueueLossGuard::new(MSS);
        let mut t = Instant::ZERO;
        // The round begins with the controller at 300.
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(20),
            |_| 0,
            100 * MSS,
        );
        g.on_ack(t, t, 300 * MSS);
        // Loss with a standing queue at 200 in flight; the controller is
        // at 250 now, above what was in flight but below where it began.
        let start = t;
        g.on_sent(200 * MSS);
        g.on_loss(MSS, t + Duration::from_micros(1));
        g.on_rtt(t + Duration::from_millis(2), Duration::from_millis(40));
        g.on_ack(t + Duration::from_millis(2), start, 250 * MSS);
        assert_eq!((g.cap(), g.cuts()), (None, 0));
    }

    #[test]
    fn cap_never_below_four_datagrams() {
        let mut g = QueueLossGuard::new(MSS);
        let mut t = Instant::ZERO;
        drive(
            &mut g,
            &mut t,
            1,
            |_| Duration::from_millis(20),
            |_| 0,
            10 * MSS,
        );
        drive(
            &mut g,
            &mut t,
            40,
            |_| Duration::from_millis(60),
            |_| MSS,
            2 * MSS,
        );
        assert_eq!(g.cap(), Some(4 * MSS));
    }
}
