//! A delivery-rate controller that keeps a small standing queue on purpose
//! ("target queue", `tq`), for links whose rate swings (cellular).
//!
//! Anchors: BBR's delivery-rate model and its windowed filters
//! (draft-cardwell-iccrg-bbr-congestion-control, delivery rates from
//! draft-cheng-iccrg-delivery-rate-estimation §3), Copa's target queuing
//! delay and its competitive-mode switch (Arun & Balakrishnan, NSDI 2018,
//! §2.2 and §3), and Sprout/Verus's observation that a cellular link's
//! rate changes within a round trip (Winstein et al., NSDI 2013 §3).
//!
//! # Model
//!
//! A bottleneck of rate `C(t)` behind a propagation round trip `R`. The
//! flow keeps `C · T` bytes queued at the bottleneck on purpose:
//!
//! ```text
//! cwnd = bw · (R + T)
//! ```
//!
//! While that queue is non-empty the bottleneck never idles, so every
//! delivery-rate sample measures the link's *present* rate: a rate increase
//! shows up within one round trip without a probing phase (BBR waits up to
//! eight round trips for its next ProbeBW_UP, which on a cellular link is
//! several rate changes too late), and the window follows it at once. A
//! rate decrease also shows up within a round trip, in the samples and as
//! rising delay; the window, sized from the new rate, stops sending until
//! the excess has left. When the queue does run dry (the rate jumped more
//! than the queue covers), the window still holds `(R + T)/R` times the
//! delivered rate, so the flow grows by that factor per round trip until
//! the queue is back: the model probes by itself.
//!
//! - `bw` is a *short* max filter: the largest sample of the current and of
//!   the previous round trip, so a drop is followed within two round trips
//!   (BBR's 10-round filter holds a vanished rate for 10).
//! - `R` is the smallest RTT seen (the path's propagation delay).
//! - `T`, the target queuing delay, comes from the path, never from one
//!   link: `target_frac · R`, at least three packets' serialization at
//!   `bw` (acknowledgements and pacing come in packets; a queue shorter than
//!   that empties between two of them), and at most `cap_frac` of the
//!   largest queuing delay seen when a loss happened (the buffer's depth in
//!   time): a shallow buffer is not overrun.
//! - Sustained delay above the target (the smallest RTT of two round trips
//!   in a row above `R + 2T`: the queue never came near `T`) is answered by
//!   *draining*: one round trip with the window at `bw · R` (the pipe
//!   without a queue) and the pacing rate at `bw`, not by halving the
//!   window: the queue empties while the link stays busy.
//! - A loss that came with a queue (the buffer overflowed) sets the cap on
//!   `T` (the buffer's depth is now known); the smaller model window drains
//!   the excess by itself. Loss on an empty queue (random loss) is not
//!   congestion. Startup's overshoot is drained explicitly.
//! - The target adapts to the link (Copa adapts δ; here the queue is the
//!   signal): a round whose queue ran nearly dry raises it by a quarter,
//!   up to 4 `target_frac · R`; a round that did not lowers it by 2%.
//!   Cellular links need the queue, fixed links return to the base target.
//! - A stall (no acknowledgement for longer than `R + T`: a handover or
//!   fade) is not a rate change: samples spanning it are ignored.
//! - While the queue is nearly dry the window grows as in slow start (and
//!   the pacer lets it): no sample can show more than what is sent.
//! - Copa's competitive mode: when two drains in a row leave the smallest
//!   RTT above `R + 2T`, someone else keeps a queue this flow cannot drain
//!   (a loss-based flow, or a longer route). The flow then sizes its window
//!   on the *floor* measured in its last drain instead of `R`
//!   (`cwnd = bw · (floor + T)`: its own `T` on top of the standing queue)
//!   and drains every eight round trips to measure the floor again. It
//!   returns to `R` once a drain finds the queue empty.
//!
//! # Sharing
//!
//! A window proportional to the flow's own delivery rate makes every split
//! of the link an equilibrium (each flow keeps `bw_i · T` queued, all see
//! the same delay): nothing pulls two flows together. So the window also
//! carries an additive part, one packet per cruising round, cleared when
//! sustained delay forces a drain or the buffer overflows: equal additive
//! steps and proportional decreases converge to equal shares (Chiu & Jain
//! 1989), and against a loss-based flow, which halves on every overflow
//! while this one only drops the additive part, it keeps a share. The
//! additive part never takes the window beyond what the pipe and the
//! buffer hold at the present rate, once a loss showed the buffer's depth.
//!
//! Startup doubles the window each round trip (slow start, paced at 2× the
//! window per RTT) until the queue exceeds the target, a loss comes with a
//! queue, or the delivery rate stops growing (three rounds below +25%,
//! BBR's full-pipe test), then drains once.

use std::time::Duration;

use braid_core::Instant;

use super::delivery_rate::DeliveryRate;
use super::{Acked, CcError, CongestionController};

/// Smallest window, in packets.
const MIN_PACKETS: u64 = 4;
/// The target queue is at least this many packets' serialization time at
/// the measured rate: acknowledgements and paced sends come in packets.
const TARGET_FLOOR_PACKETS: f64 = 3.0;
/// The target is never below this, whatever the rate (timer granularity).
const TARGET_FLOOR: Duration = Duration::from_millis(1);
/// Pacing gain in cruise: the window, not the pacer, sets the rate; the
/// pacer only spreads bursts.
const CRUISE_PACING_GAIN: f64 = 1.5;
/// Pacing gain while draining. The window (`bw · R`: the pipe, no queue)
/// does the draining: nothing is sent until what is in flight falls to
/// the pipe, while the queue keeps the link busy; pacing below `bw` would
/// idle the link once the queue is gone (on a shallow buffer, at once).
const DRAIN_PACING_GAIN: f64 = 1.0;
/// Startup pacing: twice the window per round trip (slow start's doubling
/// is never slowed by the pacer).
const STARTUP_PACING_GAIN: f64 = 2.0;
/// Rounds between floor-measuring drains in competitive mode.
const COMPETE_DRAIN_ROUNDS: u64 = 8;
/// Failed drains before competitive mode (Copa waits for 5 RTTs without an
/// empty queue; two drains of one round each, plus the rounds before them).
const FAILED_DRAINS_TO_COMPETE: u32 = 2;
/// Rounds in a row above `R + 2T` before a drain.
const HIGH_ROUNDS_TO_DRAIN: u32 = 2;
/// BBR's full-pipe test: growth below this factor...
const FULL_BW_GROWTH: f64 = 1.25;
/// ...for this many rounds ends Startup.
const FULL_BW_ROUNDS: u32 = 3;

const DEFAULT_TARGET_FRAC: f64 = 1.0;
/// Largest learned multiplier of the target: at most this many base RTTs
/// of queue (before the buffer's depth caps it).
const MAX_TARGET_SCALE: f64 = 4.0;
/// Target growth after a round whose queue ran dry.
const TARGET_GROWTH: f64 = 1.25;
/// Target decay after a round whose queue did not.
const TARGET_DECAY: f64 = 0.98;
const DEFAULT_CAP_FRAC: f64 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    Cruise,
}

/// The target-queue controller (see the module documentation for the
/// model).
///
/// ```
/// use braid_recovery::cc::{Acked, CongestionController, RttEstimate, TargetQueue};
/// use braid_core::Instant;
/// use std::time::Duration;
///
/// let mut cc = TargetQueue::new(1200, 12_000);
/// // A 20 ms path of 12 MB/s: send when the window allows, each packet
/// // acknowledged when it has crossed the queue and the path.
/// let (rate, base) = (12e6, Duration::from_millis(20));
/// let mut sent = std::collections::VecDeque::new();
/// let (mut t, mut link_free) = (Instant::ZERO, Instant::ZERO);
/// for _ in 0..40_000 {
///     while sent.front().is_some_and(|&(_, a): &(Instant, Instant)| a <= t) {
///         let (s, a) = sent.pop_front().unwrap();
///         let est = RttEstimate { latest: a - s, smoothed: a - s, min: base };
///         cc.on_ack(a, &Acked { sent_time: s, bytes: 1200, app_limited: false, rtt: est, one_way_delay_us: None });
///     }
///     if 1200 * (sent.len() as u64 + 1) <= cc.window() {
///         link_free = link_free.max(t) + Duration::from_secs_f64(1200.0 / rate);
///         sent.push_back((t, link_free + base));
///         cc.on_sent(t, 1200, 1200 * sent.len() as u64);
///     }
///     t += Duration::from_micros(50);
/// }
/// let bdp = rate * 0.020;
/// // The pipe plus the target queue (one base RTT by default).
/// assert!((cc.window() as f64) > 1.7 * bdp && (cc.window() as f64) < 2.5 * bdp, "{}", cc.window());
/// ```
#[derive(Debug, Clone)]
pub struct TargetQueue {
    mss: u64,
    mode: Mode,
    cwnd: u64,
    /// Window saved by an RTO, restored by the next acknowledgement.
    prior_cwnd: Option<u64>,
    rate: DeliveryRate,
    /// Largest delivery-rate sample of the current and the previous round.
    bw_current: f64,
    bw_previous: f64,
    /// Smallest RTT seen: the propagation delay `R`.
    min_rtt: Option<Duration>,
    /// Smallest and largest RTT of the current round.
    round_min_rtt: Option<Duration>,
    round_max_rtt: Option<Duration>,
    /// RTT of the latest acknowledgement.
    latest_rtt: Option<Duration>,
    /// When the latest acknowledgement arrived.
    last_ack_time: Option<Instant>,
    /// End of the latest stall (no acknowledgement for longer than
    /// `R + T`): delivery-rate samples of packets sent before it span the
    /// stall and say nothing about the rate after it.
    stall_end: Option<Instant>,
    /// Largest RTT of the previous round (the queue a loss may have met).
    prev_round_max_rtt: Option<Duration>,
    /// Rounds in a row whose smallest RTT exceeded `base + 2T`.
    high_rounds: u32,
    /// Round at which the current drain ends.
    drain_end_round: u64,
    /// Smallest RTT from a drain's start to one round after its end.
    floor_probe: Option<Duration>,
    /// Round after which `floor_probe` is judged.
    floor_judge_round: Option<u64>,
    /// The floor measured by the last drain (competitive mode's base).
    floor: Option<Duration>,
    failed_drains: u32,
    competing: bool,
    last_drain_round: u64,
    /// Largest queuing delay seen when a queue-overflow loss happened.
    loss_queue_delay: Option<Duration>,
    /// Losses of packets sent before this were answered already.
    loss_reaction_at: Option<Instant>,
    // Startup full-pipe test.
    full_bw: f64,
    full_bw_rounds: u32,
    startup_rounds: u32,
    bytes_in_flight: u64,
    /// An application-limited packet was acknowledged this round.
    app_limited_round: bool,
    /// Bytes added to the model window, one packet per cruising round
    /// (additive increase), cleared by a delay-triggered drain: see
    /// "Sharing" in the module documentation.
    extra: u64,
    /// Multiplier of the target learned from the link (1 to
    /// `MAX_TARGET_SCALE`): raised when the queue ran dry within a round,
    /// lowered slowly when it did not.
    target_scale: f64,
    // Tunables.
    target_frac: f64,
    cap_frac: f64,
}

impl TargetQueue {
    /// A controller for packets of `max_datagram_size` bytes, with
    /// `initial_window` bytes allowed before the first measurement.
    pub fn new(max_datagram_size: u64, initial_window: u64) -> Self {
        let mss = max_datagram_size.max(1);
        let iw = initial_window.max(MIN_PACKETS * mss);
        TargetQueue {
            mss,
            mode: Mode::Startup,
            cwnd: iw,
            prior_cwnd: None,
            rate: DeliveryRate::new(),
            bw_current: 0.0,
            bw_previous: 0.0,
            min_rtt: None,
            round_min_rtt: None,
            round_max_rtt: None,
            latest_rtt: None,
            last_ack_time: None,
            stall_end: None,
            prev_round_max_rtt: None,
            high_rounds: 0,
            drain_end_round: 0,
            floor_probe: None,
            floor_judge_round: None,
            floor: None,
            failed_drains: 0,
            competing: false,
            last_drain_round: 0,
            loss_queue_delay: None,
            loss_reaction_at: None,
            full_bw: 0.0,
            full_bw_rounds: 0,
            startup_rounds: 0,
            bytes_in_flight: 0,
            app_limited_round: false,
            extra: 0,
            target_scale: 1.0,
            target_frac: DEFAULT_TARGET_FRAC,
            cap_frac: DEFAULT_CAP_FRAC,
        }
    }

    /// The measured delivery rate, bytes per second: the largest sample of
    /// the current and the previous round trip (0 before any sample).
    pub fn bandwidth(&self) -> f64 {
        self.bw_current.max(self.bw_previous)
    }

    /// The propagation round trip `R`, once measured.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// The target queuing delay `T` in force, once `R` is measured.
    pub fn target_delay(&self) -> Option<Duration> {
        let r = self.min_rtt?;
        let mut t = r.mul_f64(self.target_frac * self.target_scale);
        if let Some(q) = self.loss_queue_delay {
            t = t.min(q.mul_f64(self.cap_frac));
        }
        // The packet floor wins over the cap: a target below a few
        // packets' serialization is below what one RTT sample can resolve
        // (every sample carries a packet's serialization and the bursts of
        // paced sends), so delay would always read "above target".
        let bw = self.bandwidth();
        if bw > 0.0 {
            let packets = Duration::from_secs_f64(TARGET_FLOOR_PACKETS * self.mss as f64 / bw);
            t = t.max(packets);
        }
        t = t.max(TARGET_FLOOR);
        Some(t)
    }

    /// True while another flow keeps a queue this one cannot drain, so the
    /// window is sized on the measured floor instead of `R`.
    pub fn competing(&self) -> bool {
        self.competing
    }

    /// The RTT the target is added to: `R`, or the drained floor when
    /// competing.
    fn base_rtt(&self) -> Option<Duration> {
        let r = self.min_rtt?;
        Some(match (self.competing, self.floor) {
            (true, Some(f)) => f.max(r),
            _ => r,
        })
    }

    fn min_window(&self) -> u64 {
        MIN_PACKETS * self.mss
    }

    /// `bw · (base + extra)`, at least the minimum window.
    fn model_window(&self, extra: Duration) -> Option<u64> {
        let base = self.base_rtt()?;
        let bw = self.bandwidth();
        (bw > 0.0).then(|| ((bw * (base + extra).as_secs_f64()) as u64).max(self.min_window()))
    }

    /// What the pipe and the buffer hold at the present rate, once a loss
    /// showed the buffer's depth: `bw · (base + depth)`.
    fn buffer_ceiling(&self) -> u64 {
        self.loss_queue_delay
            .and_then(|q| self.model_window(q))
            .unwrap_or(u64::MAX)
    }

    fn enter_drain(&mut self) {
        self.mode = Mode::Drain;
        self.drain_end_round = self.rate.round + 1;
        self.last_drain_round = self.rate.round;
        self.high_rounds = 0;
        self.floor_probe = None;
        self.floor_judge_round = None;
    }

    /// A round trip ended: filters roll over, and the mode machine steps.
    fn on_round_start(&mut self) {
        let round = self.rate.round;
        // A round without a usable sample (all skipped as spanning a
        // stall) keeps the estimate it had.
        if self.bw_current > 0.0 {
            self.bw_previous = self.bw_current;
            self.bw_current = 0.0;
        }
        let round_min = self.round_min_rtt.take();
        self.prev_round_max_rtt = self.round_max_rtt.take();
        let (Some(base), Some(target)) = (self.base_rtt(), self.target_delay()) else {
            return;
        };
        match self.mode {
            Mode::Startup => {
                self.startup_rounds += 1;
                let bw = self.bandwidth();
                if bw >= self.full_bw * FULL_BW_GROWTH {
                    self.full_bw = bw;
                    self.full_bw_rounds = 0;
                } else {
                    self.full_bw_rounds += 1;
                }
                // The queue passed the target: the pipe is full.
                let queued = self.startup_rounds >= 2 && round_min.is_some_and(|m| m > base + target);
                if queued || self.full_bw_rounds >= FULL_BW_ROUNDS {
                    self.enter_drain();
                }
            }
            Mode::Drain => {
                if round >= self.drain_end_round {
                    self.mode = Mode::Cruise;
                    // Judge the floor once the packets sent while draining
                    // are acknowledged.
                    self.floor_judge_round = Some(round + 1);
                }
            }
            Mode::Cruise => {
                if let Some(judge) = self.floor_judge_round.filter(|&j| round >= j) {
                    let _ = judge;
                    self.floor_judge_round = None;
                    self.judge_floor(target);
                }
                if !self.app_limited_round {
                    self.extra = self.extra.saturating_add(self.mss);
                }
                self.adapt_target(round_min.map(|m| m < base + target / 4));
                let high = round_min.is_some_and(|m| m > base + 2 * target);
                self.high_rounds = if high { self.high_rounds + 1 } else { 0 };
                let periodic = self.competing
                    && round.saturating_sub(self.last_drain_round) >= COMPETE_DRAIN_ROUNDS;
                if !self.competing && self.high_rounds >= HIGH_ROUNDS_TO_DRAIN {
                    self.extra = 0;
                    self.enter_drain();
                } else if periodic {
                    self.enter_drain();
                }
            }
        }
    }

    /// Learns how much queue the link needs (Copa adapts its δ to what
    /// the path shows; here the queue itself is the signal). A round whose
    /// smallest RTT found the queue nearly empty, while cruising and not
    /// application-limited, means the link's rate outran the estimate
    /// within a round trip (the queue is the only thing that keeps a
    /// varying link busy until the estimate catches up): the target grows
    /// by a quarter. A round that never came near empty lets it shrink by
    /// 2%, so a steady link returns to `target_frac · R`.
    fn adapt_target(&mut self, ran_dry: Option<bool>) {
        match ran_dry {
            Some(true) if !self.app_limited_round => {
                self.target_scale = (self.target_scale * TARGET_GROWTH).min(MAX_TARGET_SCALE);
            }
            Some(false) => self.target_scale = (self.target_scale * TARGET_DECAY).max(1.0),
            _ => {}
        }
        self.app_limited_round = false;
    }

    /// What the last drain found: an empty queue (the floor near `R`) ends
    /// competitive mode; a queue that stayed counts towards it.
    fn judge_floor(&mut self, target: Duration) {
        let (Some(floor), Some(r)) = (self.floor_probe.take(), self.min_rtt) else {
            return;
        };
        self.floor = Some(floor);
        if floor > r + 2 * target {
            self.failed_drains += 1;
            if self.failed_drains >= FAILED_DRAINS_TO_COMPETE {
                self.competing = true;
            }
        } else {
            self.failed_drains = 0;
            self.competing = false;
        }
    }

    fn update_window(&mut self, acked_bytes: u64) {
        match self.mode {
            Mode::Startup => {
                // Slow start: one packet's bytes per packet acknowledged.
                self.cwnd = self.cwnd.saturating_add(acked_bytes);
            }
            Mode::Drain => {
                if let Some(w) = self.model_window(Duration::ZERO) {
                    self.cwnd = w;
                }
            }
            Mode::Cruise => {
                let Some(target) = self.target_delay() else { return };
                let Some(w) = self.model_window(target) else { return };
                // The additive part never takes the window past what the
                // buffer holds (once a loss showed its depth).
                let w = w.max(w.saturating_add(self.extra).min(self.buffer_ceiling()));
                // The queue ran (nearly) dry: the link delivers more than
                // the estimate says (a rate jump, or the end of an outage
                // whose stale samples pulled the estimate down), and no
                // sample can show more than what is sent. Grow as slow
                // start does until the queue is back; the model takes
                // over as soon as the queue exceeds half the target.
                let dry = self
                    .latest_rtt
                    .zip(self.base_rtt())
                    .is_some_and(|(rtt, base)| rtt < base + target / 2);
                // Once a loss showed the buffer's depth, growth stops at
                // what the buffer holds at the present rate: beyond it the
                // doubling only overflows a shallow buffer (at a higher
                // rate the bound rises with `bw`).
                let ceiling = self.buffer_ceiling();
                self.cwnd = if dry {
                    w.max(self.cwnd.saturating_add(acked_bytes).min(ceiling))
                } else {
                    w
                };
            }
        }
    }

    fn on_loss(&mut self, lost_sent_time: Instant, lost_bytes: u64) {
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(lost_bytes);
        if self.loss_reaction_at.is_some_and(|t| lost_sent_time <= t) {
            return;
        }
        let Some(r) = self.min_rtt else { return };
        // The queue the lost packet met: the largest RTT of this round and
        // the last. Loss on an (almost) empty queue is random loss.
        let seen = [self.round_max_rtt, self.prev_round_max_rtt]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(r);
        let queue = seen.saturating_sub(r);
        let noise = (r / 8).max(TARGET_FLOOR);
        if queue <= noise {
            return;
        }
        self.loss_reaction_at = Some(self.rate.delivered_time.max(lost_sent_time));
        self.loss_queue_delay = Some(self.loss_queue_delay.map_or(queue, |q| q.max(queue)));
        // The buffer overflowed: the additive part goes (AIMD's decrease).
        self.extra = 0;
        // Cruising, the lower cap shrinks the model's window below what is
        // in flight, so the excess drains by itself (no halving, no drain
        // round: either would idle a shallow buffer's link). Startup's
        // overshoot is drained explicitly.
        if self.mode == Mode::Startup {
            self.enter_drain();
        }
        self.update_window(0);
    }
}

impl CongestionController for TargetQueue {
    fn name(&self) -> &'static str {
        "tq"
    }

    fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64) {
        self.bytes_in_flight = bytes_in_flight;
        self.rate.on_sent(now, bytes, bytes_in_flight);
    }

    fn on_ack(&mut self, now: Instant, acked: &Acked) {
        if let Some(prior) = self.prior_cwnd.take() {
            self.cwnd = self.cwnd.max(prior);
        }
        let rtt = acked.rtt.latest;
        if !rtt.is_zero() {
            self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        }
        // Cellular links stall (handovers, fades: seconds without a
        // delivery opportunity) and then resume at about their former
        // rate; a stall is not a rate change. An acknowledgement gap
        // longer than a round trip with its target queue marks one.
        let stall_gap = self.min_rtt.zip(self.target_delay()).map(|(r, t)| r + t);
        if let (Some(last), Some(gap)) = (self.last_ack_time, stall_gap) {
            if now.saturating_duration_since(last) > gap {
                self.stall_end = Some(now);
            }
        }
        self.last_ack_time = Some(now);
        let spans_stall = self.stall_end.is_some_and(|end| acked.sent_time < end);
        let min_interval = self.min_rtt.unwrap_or(Duration::ZERO).min(rtt);
        let sample = self.rate.on_ack(now, acked);
        if sample.is_some_and(|s| s.round_start) {
            self.on_round_start();
        }
        if let Some(bw) = sample.and_then(|s| s.rate(min_interval)) {
            // An application-limited sample only counts if it raises the
            // estimate: it says nothing about the link's limit.
            if (!acked.app_limited && !spans_stall) || bw > self.bandwidth() {
                self.bw_current = self.bw_current.max(bw);
            }
        }
        self.round_min_rtt = Some(self.round_min_rtt.map_or(rtt, |m| m.min(rtt)));
        self.round_max_rtt = Some(self.round_max_rtt.map_or(rtt, |m| m.max(rtt)));
        self.latest_rtt = Some(rtt);
        self.app_limited_round |= acked.app_limited;
        if self.mode == Mode::Drain || self.floor_judge_round.is_some() {
            self.floor_probe = Some(self.floor_probe.map_or(rtt, |m| m.min(rtt)));
        }
        // Growth beyond the model needs evidence the window was the limit.
        self.update_window(if acked.app_limited { 0 } else { acked.bytes });
    }

    fn on_ack_end(&mut self, _now: Instant, bytes_in_flight: u64) {
        self.bytes_in_flight = bytes_in_flight;
    }

    fn on_congestion_event(
        &mut self,
        _now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
        _persistent: bool,
    ) {
        self.on_loss(lost_sent_time, lost_bytes);
    }

    fn on_retransmission_timeout(&mut self, _now: Instant) {
        // Everything in flight is presumed lost: send little until an
        // acknowledgement shows the path works, then resume.
        self.prior_cwnd = Some(self.cwnd.max(self.prior_cwnd.unwrap_or(0)));
        self.cwnd = self.min_window();
        self.rate.clear();
        self.bytes_in_flight = 0;
    }

    fn resume(&mut self, now: Instant, from: &super::Handover) {
        // The model's inputs are path measurements: the base RTT and the
        // delivery rate carry over; a predecessor past slow start had
        // found the capacity, so the window cruises from where it is.
        self.cwnd = from.window.max(self.min_window());
        self.prior_cwnd = None;
        self.bytes_in_flight = from.bytes_in_flight;
        self.rate.restart(now);
        if let Some(rtt) = from.rtt {
            self.min_rtt = Some(rtt.min);
            self.latest_rtt = Some(rtt.latest);
        }
        if let Some(bw) = from.delivery_rate {
            self.bw_current = bw;
            self.bw_previous = bw;
            self.full_bw = bw;
        }
        self.last_ack_time = None;
        self.stall_end = None;
        // TQ learns the buffer's depth from the queue a loss met and caps
        // its target queue below it; without that it would target a full
        // base RTT of queue and jump its window there at once (measured:
        // 2.5x the handed-over window within 5 ms after a NewReno flow on
        // a one-BDP buffer). A predecessor past slow start ran the buffer
        // up to the queue it had at the switch: that queue is the depth
        // known to be safe, until a loss shows a deeper one.
        if !from.slow_start {
            if let Some(rtt) = from.rtt {
                let q = rtt.smoothed.saturating_sub(rtt.min);
                self.loss_queue_delay = Some(self.loss_queue_delay.map_or(q, |old| old.max(q)));
            }
        }
        self.mode = if from.slow_start { Mode::Startup } else { Mode::Cruise };
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn ssthresh(&self) -> u64 {
        match self.mode {
            Mode::Startup => u64::MAX,
            _ => self.cwnd,
        }
    }

    fn in_slow_start(&self) -> bool {
        self.mode == Mode::Startup
    }

    fn pacing_rate(&self, smoothed_rtt: Duration) -> f64 {
        let rtt = smoothed_rtt.as_secs_f64().max(1e-6);
        let bw = self.bandwidth();
        // Never slower than the smallest window per round trip: a collapsed
        // estimate must still let samples show more.
        let floor = self.min_window() as f64 / rtt;
        match self.mode {
            Mode::Startup => STARTUP_PACING_GAIN * self.cwnd as f64 / rtt,
            Mode::Drain if bw > 0.0 => (DRAIN_PACING_GAIN * bw).max(floor),
            // The window per smoothed RTT too: when the queue ran dry the
            // window grows ahead of `bw`, and the pacer must not hold it
            // back (with the target queue in place, `cwnd / srtt ≈ bw`).
            Mode::Cruise if bw > 0.0 => (CRUISE_PACING_GAIN * bw)
                .max(CRUISE_PACING_GAIN * self.cwnd as f64 / rtt)
                .max(floor),
            _ => CRUISE_PACING_GAIN * self.cwnd as f64 / rtt,
        }
    }

    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError> {
        match name {
            "target_frac" => {
                if !(0.05..=4.0).contains(&value) {
                    return Err(CcError::OutOfRange {
                        name: "target_frac",
                        value,
                        expected: "0.05 ≤ target_frac ≤ 4 (target queuing delay over the base RTT)",
                    });
                }
                self.target_frac = value;
            }
            "cap_frac" => {
                if !(0.1..=1.0).contains(&value) {
                    return Err(CcError::OutOfRange {
                        name: "cap_frac",
                        value,
                        expected: "0.1 ≤ cap_frac ≤ 1 (largest target over the buffer's depth in time)",
                    });
                }
                self.cap_frac = value;
            }
            _ => {
                return Err(CcError::UnknownParameter {
                    controller: "tq",
                    name: name.to_string(),
                    known: "target_frac, cap_frac".to_string(),
                })
            }
        }
        Ok(())
    }

    fn parameters(&self) -> Vec<(&'static str, f64)> {
        vec![("target_frac", self.target_frac), ("cap_frac", self.cap_frac)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use crate::cc::RttEstimate;
    use proptest::prelude::*;

    /// A drop-tail bottleneck whose rate follows `rate_at(t)` (bytes/s),
    /// `base` round trip, `buffer` bytes of queue, driven for `secs`.
    /// Returns (delivered bytes, mean queuing delay of the acked packets).
    fn run(
        cc: &mut TargetQueue,
        rate_at: impl Fn(f64) -> f64,
        base: Duration,
        buffer: u64,
        secs: f64,
    ) -> (u64, Duration) {
        let mss = 1200u64;
        // (sent, arrival at the sender of its ack, lost)
        let mut flight: VecDeque<(Instant, Instant, bool)> = VecDeque::new();
        let mut link_free = Instant::ZERO;
        let mut now = Instant::ZERO;
        let end = Instant::ZERO + Duration::from_secs_f64(secs);
        let mut next_send = Instant::ZERO;
        let (mut delivered, mut queue_sum, mut acks) = (0u64, Duration::ZERO, 0u32);
        while now < end {
            while flight.front().is_some_and(|p| p.1 <= now) {
                let (sent, at, lost) = flight.pop_front().unwrap();
                let in_flight = mss * flight.len() as u64;
                if lost {
                    cc.on_congestion_event(at, sent, mss, false);
                    continue;
                }
                delivered += mss;
                let rtt = at - sent;
                queue_sum += rtt.saturating_sub(base);
                acks += 1;
                let est = RttEstimate { latest: rtt, smoothed: rtt, min: base };
                let acked = Acked { sent_time: sent, bytes: mss, app_limited: false, rtt: est, one_way_delay_us: None };
                cc.on_ack(at, &acked);
                cc.on_ack_end(at, in_flight);
            }
            let in_flight = mss * flight.len() as u64;
            if in_flight + mss <= cc.window() && now >= next_send {
                let start = link_free.max(now);
                let queued_bytes = (start - now).as_secs_f64() * rate_at(now.since_epoch().as_secs_f64());
                let lost = queued_bytes > buffer as f64;
                if !lost {
                    let r = rate_at(start.since_epoch().as_secs_f64()).max(1.0);
                    link_free = start + Duration::from_secs_f64(mss as f64 / r);
                }
                let arrive = if lost { now + base } else { link_free + base };
                flight.push_back((now, arrive, lost));
                cc.on_sent(now, mss, in_flight + mss);
                next_send = now + Duration::from_secs_f64(mss as f64 / cc.pacing_rate(base).max(1.0));
            } else {
                let next_ack = flight.front().map(|p| p.1).unwrap_or(end);
                let wake = if in_flight + mss <= cc.window() { next_send.min(next_ack) } else { next_ack };
                now = wake.max(now + Duration::from_micros(1));
            }
        }
        (delivered, queue_sum / acks.max(1))
    }

    #[test]
    fn fixed_link_is_filled_with_a_queue_near_the_target() {
        let mut cc = TargetQueue::new(1200, 12_000);
        let rate = 6_250_000.0; // 50 Mbit/s
        let base = Duration::from_millis(40);
        let (delivered, queue) = run(&mut cc, |_| rate, base, 1 << 20, 10.0);
        assert!(delivered as f64 > 0.9 * rate * 10.0, "delivered {delivered}");
        // Target: one base RTT by default; the mean includes startup's
        // overshoot.
        assert!(queue < base.mul_f64(1.5), "mean queuing delay {queue:?}");
        assert!(!cc.competing());
    }

    #[test]
    fn a_rate_drop_is_followed_within_a_few_round_trips() {
        let mut cc = TargetQueue::new(1200, 12_000);
        let base = Duration::from_millis(40);
        let rate = |t: f64| if t < 5.0 { 6_250_000.0 } else { 1_250_000.0 };
        // The old window drains at the new rate (~0.3 s), then a few rounds.
        run(&mut cc, rate, base, 4 << 20, 7.0);
        let bw = cc.bandwidth();
        assert!((bw - 1_250_000.0).abs() < 0.3 * 1_250_000.0, "bw {bw} after the drop");
    }

    #[test]
    fn a_shallow_buffer_caps_the_target() {
        let mut cc = TargetQueue::new(1200, 12_000);
        let rate = 6_250_000.0;
        let base = Duration::from_millis(100);
        // A quarter BDP: 25 ms of queue, less than the default 100 ms target.
        let buffer = (rate * 0.025) as u64;
        let (delivered, _) = run(&mut cc, |_| rate, base, buffer, 20.0);
        let t = cc.target_delay().unwrap();
        assert!(t <= Duration::from_millis(25), "target {t:?}");
        assert!(delivered as f64 > 0.85 * rate * 20.0, "delivered {delivered}");
    }

    #[test]
    fn random_loss_on_an_empty_queue_does_not_drain() {
        let mut cc = TargetQueue::new(1200, 12_000);
        let t0 = Instant::ZERO;
        let rtt = Duration::from_millis(20);
        let est = RttEstimate { latest: rtt, smoothed: rtt, min: rtt };
        cc.on_sent(t0, 1200, 1200);
        cc.on_ack(t0 + rtt, &Acked { sent_time: t0, bytes: 1200, app_limited: false, rtt: est, one_way_delay_us: None });
        let w = cc.window();
        cc.on_congestion_event(t0 + rtt, t0, 1200, false);
        assert_eq!(cc.mode, Mode::Startup);
        assert_eq!(cc.window(), w);
    }

    #[test]
    fn rto_shrinks_then_restores() {
        let mut cc = TargetQueue::new(1200, 120_000);
        cc.on_retransmission_timeout(Instant::ZERO);
        assert_eq!(cc.window(), 4 * 1200);
        let rtt = Duration::from_millis(5);
        let est = RttEstimate { latest: rtt, smoothed: rtt, min: rtt };
        cc.on_sent(Instant::ZERO, 1200, 1200);
        cc.on_ack(Instant::ZERO + rtt, &Acked { sent_time: Instant::ZERO, bytes: 1200, app_limited: false, rtt: est, one_way_delay_us: None });
        assert!(cc.window() >= 120_000);
    }

    #[test]
    fn parameters_are_checked() {
        let mut cc = TargetQueue::new(1200, 12_000);
        cc.set_parameter("target_frac", 1.0).unwrap();
        assert!(cc.parameters().contains(&("target_frac", 1.0)));
        assert!(matches!(cc.set_parameter("target_frac", 0.0), Err(CcError::OutOfRange { .. })));
        assert!(matches!(cc.set_parameter("cap_frac", 2.0), Err(CcError::OutOfRange { .. })));
        assert!(matches!(cc.set_parameter("beta", 0.5), Err(CcError::UnknownParameter { .. })));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(12))]
        /// On any fixed link (1–100 Mbit/s, 5–200 ms) with a 1-BDP buffer
        /// the flow fills at least 85% of it after its first second, and its
        /// bandwidth estimate ends within 30% of the rate.
        #[test]
        fn fills_any_fixed_link(mbit in 1.0f64..100.0, rtt_ms in 5u64..200) {
            let rate = mbit * 125_000.0;
            let base = Duration::from_millis(rtt_ms);
            let bdp = (rate * base.as_secs_f64()) as u64;
            let secs = (40.0 * base.as_secs_f64()).max(4.0);
            let mut cc = TargetQueue::new(1200, 12_000);
            let (delivered, _) = run(&mut cc, |_| rate, base, bdp.max(6_000), secs);
            prop_assert!(delivered as f64 > 0.8 * rate * secs, "delivered {} of {}", delivered, rate * secs);
            let bw = cc.bandwidth();
            prop_assert!((bw - rate).abs() < 0.3 * rate, "bw {} rate {}", bw, rate);
        }
    }
}
