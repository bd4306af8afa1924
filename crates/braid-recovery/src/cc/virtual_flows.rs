//! N virtual flows inside one congestion window: MulTCP's idea taken
//! literally, so that p = N takes N shares whatever the bottleneck does with
//! its losses.
//!
//! # Why the aggregate formulas are not enough
//!
//! MulTCP (Crowcroft and Oechslin, 1998) and MulTCP2 (Nabeshima et al.)
//! give one window AIMD parameters `(a, b)` chosen so that its *mean* window
//! is N times a TCP flow's. The choice depends on how losses fall:
//!
//! - **independent losses** (random loss, RED): each loss hits one flow, and
//!   AIMD(a, b) keeps the mean window `√(a(2−b)/(2bp))`; MulTCP2's
//!   `a = N, b = 2/(3N+1)` makes that N times TCP's `√(3/(2p))`;
//! - **synchronised losses** (a drop-tail queue overflowing: every flow
//!   sending at that moment loses a packet in the same round trip): all
//!   flows cut in the same congestion epochs of `T` round trips, each grows
//!   `a·T` and gives up `b·W`, so `W = a·T/b` and the share goes as `a/b`.
//!   MulTCP2's parameters then give `N(3N+1)/4` shares, 7.5 for N = 3: the
//!   7.7–8.1× measured against CUBIC behind a drop-tail queue (issue 25).
//!
//! No single `(a, b)` gives N in both regimes (`a/b = 2N` and
//! `a(2−b)/b = 3N²` have no common solution past N = 4/3). N real flows do,
//! because each of them reacts to *its own* losses.
//!
//! # The model
//!
//! The window is partitioned into `⌈N⌉` virtual flows (the last one of
//! weight `N − ⌊N⌋` when N is not whole), each with its own window, its own
//! recovery period (RFC 6582: at most one reduction per round trip) and, for
//! CUBIC flows, its own RFC 9438 state (W_max, K, epoch, W_est). Per
//! acknowledgement every flow receives its share of the acknowledged bytes
//! in proportion to its window, exactly as each of N real flows is clocked
//! by its own packets, and grows as one Reno or CUBIC flow does (a fractional
//! flow scales its growth by its weight). Each of the `k` packets a
//! congestion event loses belongs to flow j with probability `w_j/W` (it is
//! one packet of the flight; the draw hashes the packet's identity, so it is
//! deterministic); a flow reduces once per recovery period, so one random loss reduces one flow (`β_N` of MulTCP's
//! analysis, without its size-bias error) and an overflow that drops N or
//! more packets reduces them all (each by TCP's β), as it would N real
//! flows. The window is the sum of the flows'.
//!
//! Anything else that changes the window (slow start, a timeout, persistent
//! congestion, a switch from LEDBAT, the minimum window) is taken over by
//! rescaling the flows to the new total.

use std::time::Duration;

use braid_core::Instant;

use super::newreno::Window;
use super::Acked;

/// RFC 9438 §4.2 C, segments per second cubed.
const CUBIC_C: f64 = 0.4;
/// RFC 9438 §4.6 β_cubic.
const CUBIC_BETA: f64 = 0.7;
/// RFC 5681 β of a Reno flow.
const RENO_BETA: f64 = 0.5;

/// What each virtual flow is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlowKind {
    /// RFC 5681 Reno: one segment per round trip, halve on loss.
    Reno,
    /// RFC 9438 CUBIC.
    Cubic,
}

impl FlowKind {
    /// The multiplicative decrease: the fraction of its window a flow keeps.
    pub(super) fn beta(self) -> f64 {
        match self {
            FlowKind::Reno => RENO_BETA,
            FlowKind::Cubic => CUBIC_BETA,
        }
    }
}

/// One virtual flow's state; windows in bytes.
#[derive(Debug, Clone)]
struct Flow {
    /// 1, or the fractional part of N for the last flow.
    weight: f64,
    window: f64,
    /// When its current (or last) recovery period began.
    recovery_start: Option<Instant>,
    /// CUBIC: W_max (bytes), K (s), the epoch start, W_est and cwnd_prior.
    w_max: f64,
    k: f64,
    epoch: Option<Instant>,
    w_est: f64,
    prior: f64,
}

impl Flow {
    fn new(weight: f64, window: f64) -> Flow {
        Flow {
            weight,
            window,
            recovery_start: None,
            w_max: window,
            k: 0.0,
            epoch: None,
            w_est: window,
            prior: window,
        }
    }

    fn in_recovery_for(&self, lost_sent_time: Instant) -> bool {
        self.recovery_start.is_some_and(|start| lost_sent_time <= start)
    }
}

/// The virtual flows of one window, see the module docs.
#[derive(Debug, Clone)]
pub(super) struct VirtualFlows {
    kind: FlowKind,
    n: f64,
    flows: Vec<Flow>,
    /// The window the flows summed to after their last update: a different
    /// `Window::cwnd` means someone else changed it (rescale).
    synced: u64,
    /// Latest acknowledgement, for removing application-limited time from
    /// CUBIC's clock (RFC 9438 §5.8).
    last_ack: Option<Instant>,
}

impl VirtualFlows {
    /// `n` virtual flows of `kind` (callers validate `n > 0`).
    pub(super) fn new(n: f64, kind: FlowKind) -> Self {
        VirtualFlows {
            kind,
            n,
            flows: weights(n).map(|w| Flow::new(w, 0.0)).collect(),
            synced: 0,
            last_ack: None,
        }
    }

    pub(super) fn kind(&self) -> FlowKind {
        self.kind
    }

    /// Changes N on a live connection: the window is kept and shared out
    /// anew over the new flows, whose CUBIC stage restarts from it.
    pub(super) fn set_n(&mut self, n: f64) {
        if n != self.n {
            self.n = n;
            self.flows = weights(n).map(|w| Flow::new(w, 0.0)).collect();
            self.synced = 0;
        }
    }

    /// Changes what the flows are; their windows are kept.
    pub(super) fn set_kind(&mut self, kind: FlowKind) {
        if kind != self.kind {
            self.kind = kind;
            for f in &mut self.flows {
                f.epoch = None;
                f.w_max = f.window;
                f.w_est = f.window;
            }
        }
    }

    fn total(&self) -> f64 {
        self.flows.iter().map(|f| f.window).sum()
    }

    /// Shares `w.cwnd` out over the flows if it changed behind their back:
    /// in proportion to their windows, or to their weights when they hold
    /// nothing yet. A CUBIC stage restarts from the new windows.
    fn sync(&mut self, w: &Window) {
        if self.synced == w.cwnd && self.synced != 0 {
            return;
        }
        let cwnd = w.cwnd as f64;
        let total = self.total();
        for f in &mut self.flows {
            let share = if total > 0.0 {
                f.window / total
            } else {
                f.weight / self.n
            };
            let scale = if f.window > 0.0 {
                cwnd * share / f.window
            } else {
                1.0
            };
            f.window = cwnd * share;
            f.w_max = if f.w_max > 0.0 { f.w_max * scale } else { f.window };
            f.prior = f.window.max(f.prior * scale);
            f.w_est = f.window;
            f.epoch = None;
        }
        self.synced = w.cwnd;
    }

    /// Writes the flows' sum back as the window (never below the minimum).
    fn publish(&mut self, w: &mut Window) {
        w.cwnd = (self.total() as u64).max(w.min_window);
        self.synced = w.cwnd;
    }

    /// Congestion avoidance for `bytes` acknowledged bytes that may grow
    /// the window (after slow start, not application-limited).
    pub(super) fn on_ack(&mut self, w: &mut Window, now: Instant, acked: &Acked, bytes: u64) {
        self.sync(w);
        if acked.app_limited {
            // RFC 9438 §5.8: application-limited time does not count.
            if let Some(last) = self.last_ack {
                let idle = now.saturating_duration_since(last);
                for f in &mut self.flows {
                    if let Some(e) = f.epoch.as_mut() {
                        *e += idle;
                    }
                }
            }
        }
        self.last_ack = Some(now);
        if bytes == 0 {
            return;
        }
        let cwnd = self.total().max(1.0);
        let smss = w.smss as f64;
        let rtt = acked.rtt.smoothed;
        for f in &mut self.flows {
            if f.in_recovery_for(acked.sent_time) {
                continue; // RFC 6582: no growth until its recovery ends
            }
            // This flow's packets are its window's share of the flight.
            let mine = bytes as f64 * f.window / cwnd;
            match self.kind {
                FlowKind::Reno => {
                    f.window += f.weight * smss * mine / f.window.max(1.0);
                }
                FlowKind::Cubic => cubic_grow(f, now, rtt, mine, smss),
            }
        }
        self.publish(w);
    }

    /// A retransmission timeout: every flow's recovery period starts now,
    /// so losses of packets sent before it do not reduce them again.
    pub(super) fn on_timeout(&mut self, now: Instant) {
        for f in &mut self.flows {
            f.recovery_start = Some(now);
        }
        self.synced = 0;
    }

    /// `lost_packets` packets sent up to `lost_sent_time` were lost: each
    /// goes to a flow drawn in proportion to the windows; a flow not yet in a recovery
    /// period covering them reduces once. Returns whether any flow reduced;
    /// `w` is then set to the flows' new sum (`Window::reduce_on_loss`, so
    /// an application-limited sender keeps its restart window).
    pub(super) fn on_loss(
        &mut self,
        w: &mut Window,
        now: Instant,
        lost_sent_time: Instant,
        lost_packets: u64,
    ) -> bool {
        self.sync(w);
        // RFC 5681 eq. 4 reduces FlightSize, not cwnd: a flow that did not
        // fill its window reduces what it had out (its share of the flight).
        let total = self.total();
        let flight = w.flight_size() as f64;
        let in_flight = if total > 0.0 && flight > 0.0 { (flight / total).min(1.0) } else { 1.0 };
        let beta = self.kind.beta();
        let mut reduced = false;
        let total = self.total().max(1.0);
        for i in 0..lost_packets.min(self.flows.len() as u64 * 4) {
            // The lost packet is one of the flight's, so it belongs to flow
            // j with probability w_j/W. Its identity (send time, index in
            // the event) is hashed into that choice, so the draw is
            // deterministic and losses collide on a flow as often as they
            // do among N real flows.
            let mut u = uniform(lost_sent_time, i) * total;
            let last = self.flows.len() - 1;
            let mut pick = last;
            for (j, f) in self.flows.iter().enumerate() {
                if u < f.window {
                    pick = j;
                    break;
                }
                u -= f.window;
            }
            let f = &mut self.flows[pick];
            if f.in_recovery_for(lost_sent_time) {
                continue;
            }
            f.recovery_start = Some(now);
            reduced = true;
            let out = f.window * in_flight;
            match self.kind {
                FlowKind::Reno => f.window = out * beta,
                FlowKind::Cubic => {
                    // RFC 9438 §4.6, §4.7 (fast convergence).
                    f.w_max = if out < f.w_max {
                        out * (1.0 + beta) / 2.0
                    } else {
                        out
                    };
                    f.prior = out;
                    f.window = out * beta;
                    f.w_est = f.window;
                    f.epoch = None;
                }
            }
        }
        if reduced {
            w.reduce_on_loss(self.total());
            if (w.cwnd as f64) > self.total() + 0.5 {
                // The restart-window floor raised it: share that out.
                self.synced = 0;
                self.sync(w);
            }
            self.synced = w.cwnd;
        }
        reduced
    }
}

/// RFC 9438 §4.2–4.5 for one flow receiving `mine` acknowledged bytes.
/// A fractional flow scales C and the Reno-friendly α by its weight.
fn cubic_grow(f: &mut Flow, now: Instant, rtt: Duration, mine: f64, smss: f64) {
    let c = CUBIC_C * f.weight;
    let epoch = *f.epoch.get_or_insert_with(|| {
        if f.w_max <= f.window {
            f.w_max = f.window;
            f.k = 0.0;
        } else {
            f.k = ((f.w_max - f.window) / smss / c).cbrt();
        }
        f.w_est = f.window;
        now
    });
    let t = now.saturating_duration_since(epoch).as_secs_f64() + rtt.as_secs_f64();
    let target = (f.w_max + c * (t - f.k).powi(3) * smss).clamp(f.window, 1.5 * f.window);
    let alpha = if f.w_est < f.prior {
        3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)
    } else {
        1.0
    };
    f.w_est += f.weight * alpha * smss * mine / f.window.max(1.0);
    let cubic = f.window + (target - f.window) * mine / f.window.max(1.0);
    f.window = cubic.max(f.w_est);
}

/// A number in [0, 1) from a lost packet's identity (SplitMix64).
fn uniform(sent: Instant, index: u64) -> f64 {
    let z = braid_core::splitmix64(sent.as_micros() ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The flows' weights: ⌊N⌋ whole flows and one of weight N − ⌊N⌋ if any.
fn weights(n: f64) -> impl Iterator<Item = f64> {
    let whole = n.floor() as usize;
    let frac = n - n.floor();
    std::iter::repeat_n(1.0, whole).chain((frac > 1e-9).then_some(frac))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::RttEstimate;

    const S: u64 = 1000;

    fn t(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    fn acked(sent: Instant) -> Acked {
        let rtt = Duration::from_millis(100);
        Acked {
            sent_time: sent,
            bytes: S,
            app_limited: false,
            rtt: RttEstimate { latest: rtt, smoothed: rtt, min: rtt },
            one_way_delay_us: None,
        }
    }

    fn window(cwnd: u64) -> Window {
        let mut w = Window::new(S, cwnd);
        w.ssthresh = cwnd;
        w.on_sent(cwnd);
        w
    }

    #[test]
    fn weights_cover_n() {
        assert_eq!(weights(3.0).collect::<Vec<_>>(), vec![1.0, 1.0, 1.0]);
        let w: Vec<f64> = weights(2.5).collect();
        assert_eq!(w, vec![1.0, 1.0, 0.5]);
        assert_eq!(weights(0.25).collect::<Vec<_>>(), vec![0.25]);
    }

    #[test]
    fn one_loss_reduces_one_flow_and_an_overflow_reduces_all() {
        for kind in [FlowKind::Reno, FlowKind::Cubic] {
            let beta = kind.beta();
            let mut w = window(100 * S);
            let mut v = VirtualFlows::new(4.0, kind);
            assert!(v.on_loss(&mut w, t(10), t(0), 1));
            let one = 100.0 * S as f64 * (3.0 + beta) / 4.0;
            assert!((w.cwnd as f64 - one).abs() <= 1.0, "{kind:?}: {} vs {one}", w.cwnd);

            let mut w = window(100 * S);
            let mut v = VirtualFlows::new(4.0, kind);
            // An overflow that drops many packets reaches every flow.
            assert!(v.on_loss(&mut w, t(10), t(0), 16));
            let all = 100.0 * S as f64 * beta;
            assert!((w.cwnd as f64 - all).abs() <= 1.0, "{kind:?}: {} vs {all}", w.cwnd);
        }
    }

    #[test]
    fn a_flow_reduces_once_per_recovery_period() {
        let mut w = window(100 * S);
        let mut v = VirtualFlows::new(1.0, FlowKind::Reno);
        assert!(v.on_loss(&mut w, t(10), t(0), 1));
        assert_eq!(w.cwnd, 50 * S);
        w.on_sent(w.cwnd); // window-limited: no restart-window floor
        // A packet sent before the reduction: ignored.
        assert!(!v.on_loss(&mut w, t(20), t(5), 3));
        assert_eq!(w.cwnd, 50 * S);
        // One sent after it: a new congestion event.
        assert!(v.on_loss(&mut w, t(200), t(150), 1));
        assert_eq!(w.cwnd, 25 * S);
    }

    #[test]
    fn reno_flows_grow_n_segments_per_round_trip() {
        for n in [1.0, 2.0, 3.5] {
            let mut w = window(100 * S);
            let mut v = VirtualFlows::new(n, FlowKind::Reno);
            let before = w.cwnd as f64;
            // One window of acknowledgements.
            for i in 0..100 {
                v.on_ack(&mut w, t(100 + i), &acked(t(1 + i)), S);
            }
            let grown = (w.cwnd as f64 - before) / S as f64;
            assert!((grown - n).abs() < 0.1, "N = {n}: grew {grown} segments");
        }
    }

    #[test]
    fn cubic_flows_return_to_w_max_after_k() {
        // Large windows, so the cubic curve (not the Reno-friendly region)
        // drives the growth.
        let mut w = window(10_000 * S);
        let mut v = VirtualFlows::new(2.0, FlowKind::Cubic);
        assert!(v.on_loss(&mut w, t(0), t(0), 2)); // both flows: 0.7 of 5,000
        assert_eq!(w.cwnd, 7_000 * S);
        // K = ∛(5000·0.3/0.4) ≈ 15.5 s per flow; one window per 100 ms RTT.
        let k_ms = ((5000.0f64 * 0.3 / 0.4).cbrt() * 1000.0) as u64 - 100;
        for now in 1..=k_ms {
            let bytes = w.cwnd / 100;
            v.on_ack(&mut w, t(now + 100), &acked(t(now)), bytes);
        }
        let segments = w.cwnd as f64 / S as f64;
        assert!((9_700.0..=10_100.0).contains(&segments), "{segments}");
        // The plateau: little growth around W_max.
        assert!(v.flows.iter().all(|f| (f.window / S as f64 - 5000.0).abs() < 150.0));
    }

    #[test]
    fn outside_changes_are_shared_out() {
        let mut w = window(100 * S);
        let mut v = VirtualFlows::new(2.0, FlowKind::Reno);
        v.on_loss(&mut w, t(10), t(0), 1); // 50 + 25 segments
        w.cwnd = 150 * S; // e.g. slow start after a timeout
        v.on_ack(&mut w, t(500), &acked(t(400)), 0);
        assert_eq!(w.cwnd, 150 * S);
        let windows: Vec<f64> = v.flows.iter().map(|f| f.window / S as f64).collect();
        assert!((windows[0] - 100.0).abs() < 1e-6 || (windows[1] - 100.0).abs() < 1e-6, "{windows:?}");
    }
}
