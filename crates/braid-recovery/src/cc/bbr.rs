//! A delivery-rate congestion controller in the style of BBR
//! (draft-cardwell-iccrg-bbr-congestion-control-00, "BBR v1"), with the
//! loss-bounded in-flight model of BBRv2/v3 (draft-cardwell-ccwg-bbr-00,
//! cited below as "v3 §x").
//!
//! Instead of reading loss as congestion, it measures the path: the
//! bottleneck bandwidth (`BtlBw`, a windowed maximum of delivery-rate
//! samples over 10 round trips) and the propagation delay (`RTprop`, the
//! minimum RTT over 10 s). It paces at `pacing_gain × BtlBw` and bounds
//! what is in flight by `cwnd_gain × BtlBw × RTprop`. Random loss does not
//! change either estimate, which is what a loss-tolerant transport such as
//! Exon needs: at 5% random loss a loss-based controller collapses.
//!
//! BBRv1 alone overflows a bottleneck queue of one BDP on a clean link:
//! `cwnd_gain` 2 allows `BDP + 1 BDP of queue` in flight, so the slightest
//! over-estimate of `BtlBw` (a max filter over jittery samples) or of
//! `RTprop` fills that queue to the brim and beyond, and Startup's 2.885
//! gain overshoots it by up to a BDP before the bandwidth plateau is seen.
//! Following v3, Startup keeps at most 2 BDPs in flight (§4.3.1.1,
//! `BBRDefaultCwndGain`) while still pacing at 2.885, and (§4.3.1.3,
//! §4.5.10) a round trip that loses more than 2% of its data ends Startup
//! and sets `inflight_hi`, an upper bound on
//! what is in flight learned from where loss began; outside bandwidth
//! probing the flow stays 15% below it (v3 §4.3.3.1 headroom). Unlike v3,
//! loss counts only when it comes with a *standing queue* (the whole
//! round's RTTs above `RTprop` by a quarter): a full drop-tail queue has
//! one, random loss on an idle queue does not, so random loss still never
//! shrinks the rate.
//!
//! Two more departures, both measured in `tests/bbr_queue.rs`:
//! - The window always covers `extra_acked` and three send quanta (v3
//!   §4.6.4.2 BBRUpdateMaxInflight), not only in ProbeBW cruise: at
//!   sub-millisecond RTTs, where acknowledgements come in batches spaced
//!   wider than RTprop, 2 BDPs of RTprop spiral down to a few packets.
//! - ProbeBW_UP goes on while its own packets meet no queue, or while
//!   `inflight_hi` holds the flow back (v3 §4.3.3.5 ends UP when the
//!   bandwidth plateaus): a path a competitor just left is found in a
//!   few round trips instead of at 25% per eight-RTprop cycle.
//!
//! Delivery-rate samples follow draft-cheng-iccrg-delivery-rate-estimation
//! §3: each packet remembers, when sent, how much had been delivered and
//! when; its acknowledgement gives `delivered / max(send_elapsed,
//! ack_elapsed)`.

use std::collections::VecDeque;
use std::time::Duration;

use braid_core::Instant;

use super::delivery_rate::DeliveryRate;
use super::{Acked, CcError, CongestionController};

/// Startup gain 2/ln 2 (draft §4.3.1.1): doubles the sending rate each
/// round.
const HIGH_GAIN: f64 = 2.885;
/// ProbeBW pacing gain cycle (draft §4.3.4.3).
const CYCLE: [f64; 8] = [1.25, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0];
/// BtlBw filter length in round trips (§4.1.1.2).
const BW_WINDOW_ROUNDS: u64 = 10;
/// RTprop filter length (§4.1.2.2, v3 MinRTTFilterLen).
const RTPROP_WINDOW: Duration = Duration::from_secs(10);
/// ProbeRTT is due when no RTT near `RTprop` was seen for this long. v3
/// §4.3.4.1 uses 5 s to line up with other BBR flows; Exon keeps v1's
/// 10 s (§4.3.5), halving the ~2% of throughput that ProbeRTT costs.
const PROBE_RTT_INTERVAL: Duration = Duration::from_secs(10);
/// Time spent in ProbeRTT (§4.3.5).
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// In-flight target in ProbeRTT, as a fraction of the BDP (v3 §4.3.4.1
/// BBRProbeRTTCwndGain).
const PROBE_RTT_CWND_GAIN: f64 = 0.5;
/// Largest tolerated loss rate per round trip (v3 §2.8 BBRLossThresh).
const LOSS_THRESH: f64 = 0.02;
/// Lost packets in a round before Startup may end on loss (v3 §4.3.1.3
/// BBRStartupFullLossCnt).
const STARTUP_FULL_LOSS_COUNT: u64 = 6;
/// Multiplicative decrease of the in-flight target on a lossy round (v3
/// §2.8 BBRBeta).
const BETA: f64 = 0.7;
/// Free headroom left below `inflight_hi` outside probing (v3 §2.8
/// BBRHeadroom).
const HEADROOM: f64 = 0.15;
/// `extra_acked` filter length in round trips (v3 §2.7
/// BBRExtraAckedFilterLen).
const EXTRA_ACKED_WINDOW_ROUNDS: u64 = 10;

/// Longest ProbeBW_UP, in round trips, however much room it finds.
const MAX_UP_ROUNDS: u32 = 10;

/// Smallest window, in packets (§4.2.3.1).
const MIN_PACKETS: u64 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Startup,
    Drain,
    ProbeBw,
    ProbeRtt,
}

/// BBR-style congestion control.
///
/// ```
/// use braid_recovery::cc::{Acked, Bbr, CongestionController, RttEstimate};
/// use braid_core::Instant;
/// use std::time::Duration;
///
/// let mut cc = Bbr::new(1200, 12_000);
/// let rtt = Duration::from_millis(10);
/// // A 10 ms path delivering one 1200-byte packet every 100 µs (12 MB/s):
/// // send one packet per tick, acknowledge each one RTT after it left.
/// let mut sent = std::collections::VecDeque::new();
/// let mut t = Instant::ZERO;
/// for _ in 0..20_000 {
///     while sent.front().is_some_and(|&s: &Instant| s + rtt <= t) {
///         let s = sent.pop_front().unwrap();
///         let est = RttEstimate { latest: rtt, smoothed: rtt, min: rtt };
///         cc.on_ack(t, &Acked { sent_time: s, bytes: 1200, app_limited: false, rtt: est, one_way_delay_us: None });
///     }
///     sent.push_back(t);
///     cc.on_sent(t, 1200, 1200 * sent.len() as u64);
///     t += Duration::from_micros(100);
/// }
/// let bdp = 12_000_000.0 * 0.010;
/// assert!((cc.bottleneck_bandwidth() - 12e6).abs() < 0.6e6);
/// // At least the BDP, to keep the pipe full; near it while cruising (2
/// // BDPs while probing), so an over-estimate leaves no standing queue.
/// assert!((cc.window() as f64) >= bdp && (cc.window() as f64) < 3.0 * bdp, "{}", cc.window());
/// // Random loss does not shrink it.
/// let w = cc.window();
/// cc.on_congestion_event(t, t, 1200, false);
/// assert_eq!(cc.window(), w);
/// ```
#[derive(Debug, Clone)]
pub struct Bbr {
    mss: u64,
    initial_window: u64,
    mode: Mode,
    cwnd: u64,
    /// Window saved by an RTO, restored by the next acknowledgement.
    prior_cwnd: Option<u64>,
    // Delivery-rate estimation and round trips (§4.1.1.3).
    rate: DeliveryRate,
    // BtlBw max filter: (round, bytes/s), one entry per round.
    bw_samples: VecDeque<(u64, f64)>,
    btl_bw: f64,
    // RTprop min filter, and the shorter ProbeRTT schedule (v3 §4.3.4.4).
    rtprop: Option<Duration>,
    rtprop_stamp: Instant,
    probe_rtt_min_delay: Option<Duration>,
    probe_rtt_min_stamp: Instant,
    probe_rtt_expired: bool,
    // Startup plateau detection (§4.3.2.2).
    full_bw: f64,
    full_bw_rounds: u64,
    filled_pipe: bool,
    // ProbeBW gain cycling.
    cycle_index: usize,
    cycle_stamp: Instant,
    // ProbeRTT.
    probe_rtt_done: Option<Instant>,
    prior_mode_cwnd: u64,
    bytes_in_flight: u64,
    // Loss signals of the current round (v3 §4.5.10).
    round_lost: u64,
    round_lost_packets: u64,
    round_start_delivered: u64,
    /// Smallest RTT of the current and of the previous round.
    round_min_rtt: Option<Duration>,
    prev_round_min_rtt: Option<Duration>,
    /// Losses of packets sent before this answered the last reaction.
    loss_reaction_at: Option<Instant>,
    /// Most data delivered over one sampling interval (about a round
    /// trip), this round and the previous one (v3 §4.3.1.3
    /// BBR.inflight_latest).
    delivered_latest: u64,
    prev_delivered_latest: u64,
    /// `tx_in_flight` of the latest acknowledged packet.
    last_tx_in_flight: u64,
    /// Upper bound on in flight learned from loss (v3 §2.9.2
    /// BBR.inflight_hi); `None` is infinity.
    inflight_hi: Option<u64>,
    /// Round trips into the current ProbeBW_UP (v3 §4.3.3.6
    /// BBR.bw_probe_up_rounds): `inflight_hi` grows by 1, 2, 4, …
    /// packets in its successive round trips; and the fractional growth.
    probe_up_rounds: u32,
    inflight_hi_credit: f64,
    /// What the packets sent in this ProbeBW_UP met at the bottleneck:
    /// `None` before the first is acknowledged, then whether any met a
    /// queue (an RTT above `RTprop` by a 16th and 1 ms, so that a busy
    /// host's delay is not taken for one) or was lost (a queue shallower
    /// than that overflows first).
    up_queue: Option<bool>,
    /// Probe again one RTprop after the next drain instead of a cycle
    /// later: Startup ended on loss with a standing queue (not on a
    /// plateau), or the last ProbeBW_UP found a tenth more bandwidth.
    probe_soon: bool,
    /// BtlBw when the current ProbeBW_UP began.
    up_start_bw: f64,
    /// The latest packet sent filled the window: sending is limited by
    /// `cwnd`, not by the pacer or the application (v3
    /// `C.is_cwnd_limited`).
    window_full: bool,
    /// Ack aggregation (v3 §4.5.5 BBR.extra_acked): the most data
    /// acknowledged beyond what `BtlBw` explains within one aggregation
    /// epoch, max-filtered over 10 rounds, one entry per round.
    extra_acked_samples: VecDeque<(u64, u64)>,
    extra_acked: u64,
    ack_epoch_start: Instant,
    ack_epoch_acked: u64,
    // Tunables.
    cwnd_gain: f64,
    startup_gain: f64,
}

impl Bbr {
    /// A controller for packets of `max_datagram_size` bytes, with
    /// `initial_window` bytes allowed before the first measurement.
    pub fn new(max_datagram_size: u64, initial_window: u64) -> Self {
        let mss = max_datagram_size.max(1);
        Bbr {
            mss,
            initial_window: initial_window.max(MIN_PACKETS * mss),
            mode: Mode::Startup,
            cwnd: initial_window.max(MIN_PACKETS * mss),
            prior_cwnd: None,
            rate: DeliveryRate::new(),
            bw_samples: VecDeque::new(),
            btl_bw: 0.0,
            rtprop: None,
            rtprop_stamp: Instant::ZERO,
            probe_rtt_min_delay: None,
            probe_rtt_min_stamp: Instant::ZERO,
            probe_rtt_expired: false,
            full_bw: 0.0,
            full_bw_rounds: 0,
            filled_pipe: false,
            cycle_index: 0,
            cycle_stamp: Instant::ZERO,
            probe_rtt_done: None,
            prior_mode_cwnd: 0,
            bytes_in_flight: 0,
            round_lost: 0,
            round_lost_packets: 0,
            round_start_delivered: 0,
            round_min_rtt: None,
            prev_round_min_rtt: None,
            loss_reaction_at: None,
            delivered_latest: 0,
            prev_delivered_latest: 0,
            last_tx_in_flight: 0,
            inflight_hi: None,
            probe_up_rounds: 0,
            inflight_hi_credit: 0.0,
            up_queue: None,
            probe_soon: false,
            up_start_bw: 0.0,
            window_full: false,
            extra_acked_samples: VecDeque::new(),
            extra_acked: 0,
            ack_epoch_start: Instant::ZERO,
            ack_epoch_acked: 0,
            cwnd_gain: 2.0,
            startup_gain: HIGH_GAIN,
        }
    }

    /// Estimated bottleneck bandwidth, bytes per second (0 before any
    /// sample).
    pub fn bottleneck_bandwidth(&self) -> f64 {
        self.btl_bw
    }

    /// Estimated propagation round-trip time, once measured.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.rtprop
    }

    /// `BtlBw × RTprop` in bytes, once both are measured.
    pub fn bdp(&self) -> Option<u64> {
        let rtt = self.rtprop?;
        (self.btl_bw > 0.0).then_some((self.btl_bw * rtt.as_secs_f64()) as u64)
    }

    /// The upper bound on bytes in flight learned from loss that came with
    /// a standing queue (v3 `BBR.inflight_hi`), once there was such loss.
    pub fn inflight_hi(&self) -> Option<u64> {
        self.inflight_hi
    }

    /// True once Startup has ended (the bandwidth plateaued, or the queue
    /// overflowed).
    pub fn filled_pipe(&self) -> bool {
        self.filled_pipe
    }

    fn pacing_gain(&self) -> f64 {
        match self.mode {
            Mode::Startup => self.startup_gain,
            Mode::Drain => 1.0 / self.startup_gain,
            Mode::ProbeBw => CYCLE[self.cycle_index],
            Mode::ProbeRtt => 1.0,
        }
    }

    fn target_cwnd(&self, gain: f64) -> u64 {
        match self.bdp() {
            Some(bdp) => ((gain * bdp as f64) as u64).max(MIN_PACKETS * self.mss),
            None => self.initial_window,
        }
    }

    /// The most the model lets in flight (v3 §4.6.4.4
    /// BBRBoundCwndForModel): `inflight_hi` while probing or draining,
    /// 15% below it while cruising (headroom for other flows and bursts),
    /// but never below the BDP, which pacing at `BtlBw` needs in flight.
    fn inflight_cap(&self) -> u64 {
        let Some(hi) = self.inflight_hi else {
            return u64::MAX;
        };
        let floor = MIN_PACKETS * self.mss;
        let cruising = match self.mode {
            Mode::ProbeBw => CYCLE[self.cycle_index] == 1.0,
            Mode::ProbeRtt => true,
            Mode::Startup | Mode::Drain => false,
        };
        if cruising {
            let headroom = ((HEADROOM * hi as f64) as u64).max(self.mss);
            hi.saturating_sub(headroom)
                .max(self.target_cwnd(1.0))
                .max(floor)
        } else {
            hi.max(floor)
        }
    }

    fn update_bw(&mut self, sample: f64, app_limited: bool) {
        // An application-limited sample only counts if it raises the
        // estimate (§4.1.1.2): it says nothing about the path's limit.
        if app_limited && sample < self.btl_bw {
            return;
        }
        match self.bw_samples.back_mut() {
            Some((r, bw)) if *r == self.rate.round => *bw = bw.max(sample),
            _ => self.bw_samples.push_back((self.rate.round, sample)),
        }
        let oldest = self.rate.round.saturating_sub(BW_WINDOW_ROUNDS - 1);
        while self.bw_samples.front().is_some_and(|(r, _)| *r < oldest) {
            self.bw_samples.pop_front();
        }
        self.btl_bw = self.bw_samples.iter().map(|(_, b)| *b).fold(0.0, f64::max);
    }

    fn check_full_pipe(&mut self, round_start: bool, app_limited: bool) {
        if self.filled_pipe || !round_start || app_limited {
            return;
        }
        if self.btl_bw >= self.full_bw * 1.25 {
            self.full_bw = self.btl_bw;
            self.full_bw_rounds = 0;
            return;
        }
        self.full_bw_rounds += 1;
        if self.full_bw_rounds >= 3 {
            self.filled_pipe = true;
        }
    }

    /// A new packet-timed round begins (§4.1.1.3): the loss and RTT
    /// signals of the last one are rolled over.
    fn start_round(&mut self) {
        self.round_lost = 0;
        self.round_lost_packets = 0;
        self.round_start_delivered = self.rate.delivered;
        self.prev_round_min_rtt = self.round_min_rtt.take();
        self.prev_delivered_latest = std::mem::take(&mut self.delivered_latest);
    }

    /// The queue stood all round: the smallest RTT of the round so far
    /// (and, outside Startup, of the previous round too) exceeds `RTprop`
    /// by a quarter (and 1 ms). A drop-tail queue that overflows is full;
    /// random loss on a path the flow keeps drained is not accompanied by
    /// one. Startup looks at the current round alone: its queue grows from
    /// round to round, and waiting a round would overshoot further.
    fn standing_queue(&self) -> bool {
        let Some(base) = self.rtprop else {
            return false;
        };
        let threshold = base + (base / 4).max(Duration::from_millis(1));
        let current = self.round_min_rtt.is_some_and(|m| m > threshold);
        if self.mode == Mode::Startup {
            current
        } else {
            current && self.prev_round_min_rtt.is_none_or(|m| m > threshold)
        }
    }

    /// v3 §4.5.10 IsInflightTooHigh, qualified by a standing queue.
    fn inflight_too_high(&self) -> bool {
        let delivered = self.rate.delivered.saturating_sub(self.round_start_delivered);
        let lossy = self.round_lost as f64 > LOSS_THRESH * (delivered + self.round_lost) as f64;
        let enough =
            self.mode != Mode::Startup || self.round_lost_packets >= STARTUP_FULL_LOSS_COUNT;
        lossy && enough && self.standing_queue()
    }

    /// The queue overflowed: bound what is in flight where the loss began.
    fn handle_inflight_too_high(&mut self, now: Instant) {
        self.loss_reaction_at = Some(now);
        self.probe_up_rounds = 0;
        self.inflight_hi_credit = 0.0;
        if self.mode == Mode::Startup {
            // v3 §4.3.1.3: the pipe is full; the safe level is what one
            // round trip delivered, at least the BDP. Drain next.
            self.filled_pipe = true;
            self.probe_soon = true;
            let latest = self.delivered_latest.max(self.prev_delivered_latest);
            let bdp = self.target_cwnd(1.0);
            self.inflight_hi = Some(latest.max(bdp));
            self.mode = Mode::Drain;
        } else {
            // v3 §4.5.10 BBRHandleInflightTooHigh: the packets lost were
            // sent with about `tx_in_flight` out; never go below β × BDP.
            let target = (self.target_cwnd(1.0).min(self.cwnd) as f64 * BETA) as u64;
            self.inflight_hi = Some(
                self.last_tx_in_flight
                    .max(target)
                    .max(MIN_PACKETS * self.mss),
            );
            if self.probing_up() {
                // Stop probing up (v3 §4.3.3.4 exit on loss).
                self.cycle_index = (self.cycle_index + 1) % CYCLE.len();
                self.cycle_stamp = now;
            }
        }
        self.round_lost = 0;
        self.round_lost_packets = 0;
        self.round_start_delivered = self.rate.delivered;
        self.cwnd = self.cwnd.min(self.inflight_cap());
        tracing::debug!(
            mode = ?self.mode,
            inflight_hi = self.inflight_hi,
            btl_bw_mbit = self.btl_bw * 8e-6,
            cwnd = self.cwnd,
            round = self.rate.round,
            round_min_rtt_us = self.round_min_rtt.map(|r| r.as_micros() as u64),
            prev_round_min_rtt_us = self.prev_round_min_rtt.map(|r| r.as_micros() as u64),
            "bbr: loss with a standing queue bounds in flight"
        );
    }

    /// v3 §4.3.3.6 BBRAdaptUpperBounds: without excess loss, `inflight_hi`
    /// follows what was actually in flight, and while probing up and
    /// limited by it, grows by 1, 2, 4, … packets in the probe's
    /// successive round trips (spread over the acknowledgements), so a
    /// path that freed up (a competing flow left) is found in O(log) round
    /// trips of one probe.
    fn adapt_upper_bound(&mut self, acked_bytes: u64, tx_in_flight: u64) {
        let Some(hi) = self.inflight_hi else { return };
        let held = self.held_by_inflight_hi();
        let mut hi = hi.max(tx_in_flight);
        let probing = self.probing_up();
        // v3 BBRProbeInflightHiUpward grows the bound while the window is
        // at it and full now; the acknowledged packet's own
        // `tx_in_flight` would only show the bound of a round trip ago,
        // so growth beyond one packet per round trip never counted.
        if probing && held {
            // v3 starts each probe at one packet per round trip; on a
            // path of 10,000 packets that needs 12 round trips (1.8 s at
            // 150 ms) to find a third more. Starting at 1/64 of the bound
            // finds it in 5; pacing at 1.25 × BtlBw still limits what one
            // round trip adds, and loss with a standing queue ends the
            // probe as before.
            let first = (self.mss as f64).max(hi as f64 / 64.0);
            let growth = first * f64::from(1u32 << self.probe_up_rounds.min(30));
            self.inflight_hi_credit += acked_bytes as f64 * growth / self.cwnd.max(self.mss) as f64;
            let whole = self.inflight_hi_credit.floor();
            self.inflight_hi_credit -= whole;
            hi += whole as u64;
        }
        self.inflight_hi = Some(hi);
    }

    fn update_mode(&mut self, now: Instant) {
        if self.mode == Mode::Startup && self.filled_pipe {
            self.mode = Mode::Drain;
        }
        if self.mode == Mode::Drain && self.bytes_in_flight <= self.target_cwnd(1.0) {
            self.enter_probe_bw(now);
        }
        if self.mode == Mode::ProbeBw {
            let rtprop = self.rtprop.unwrap_or(Duration::from_millis(100));
            let elapsed = now.saturating_duration_since(self.cycle_stamp) > rtprop;
            let gain = CYCLE[self.cycle_index];
            // Leave the probing phase once it has filled the pipe further,
            // the draining phase once the queue it made is gone: v3
            // §4.3.3.1 ProbeBW_DOWN lasts until in flight is down to the
            // BDP (BBRIsTimeToCruise), however long that takes. Leaving it
            // after one RTprop, as v1 did, left whatever queue the probe
            // (or an over-estimated BtlBw) had built when that queue was
            // more than a quarter of a BDP: 0.75 × BtlBw drains only a
            // quarter BDP per RTprop.
            let advance = if gain > 1.0 {
                // v3 §4.3.3.5 BBRIsTimeToGoDown: a probe held back by
                // `inflight_hi` goes on (growing it exponentially, see
                // `adapt_upper_bound`) until loss ends it or the bound
                // no longer binds; v1's one or two RTprops would grow
                // it by one packet per probe, and a flow that met a
                // competitor's queue once (DATA's TCP probe before its
                // Braid one, measured at 1 Gbit/s × 150 ms: `inflight_hi`
                // 0.66 BDP) would stay below the path for minutes.
                //
                //
                //
                // Likewise while the packets this probe sent meet no
                // queue (v3 ends UP once the bandwidth plateaus, its
                // full_bw check; the queue shows that a round trip
                // sooner). Pacing at 1.25 × BtlBw without a queue means
                // the path has room: the probe goes on and finds it at
                // 25% per round trip, where one RTprop per cycle of eight
                // found it at 25% per cycle (1.2 s at 150 ms: four cycles
                // to double). Once its packets meet a queue, the path is
                // full and v1's exit applies; continuing regardless
                // overflowed a one-BDP queue every probe on 10 ms paths.
                let room = (self.held_by_inflight_hi() || self.up_queue != Some(true))
                    && self.probe_up_rounds < MAX_UP_ROUNDS;
                !room
                    && (elapsed && self.bytes_in_flight >= self.target_cwnd(gain).min(self.inflight_cap())
                        || now.saturating_duration_since(self.cycle_stamp) > 2 * rtprop)
            } else if gain < 1.0 {
                // Bounded in time as v3's DOWN is by its probe timer
                // (§4.3.3.5): when losses keep in flight above the BDP
                // (packets not yet declared lost), 4 RTprops at 0.75 ×
                // BtlBw have drained a whole BDP anyway.
                self.bytes_in_flight <= self.target_cwnd(1.0) || now.saturating_duration_since(self.cycle_stamp) > 4 * rtprop
            } else {
                elapsed
            };
            if advance {
                if gain > 1.0 {
                    tracing::trace!(
                        rounds = self.probe_up_rounds,
                        met_queue = ?self.up_queue,
                        btl_bw_mbit = self.btl_bw * 8e-6,
                        in_flight = self.bytes_in_flight,
                        inflight_hi = self.inflight_hi,
                        "bbr: ProbeBW_UP ends"
                    );
                    // A probe that found a tenth more bandwidth may
                    // not have found all there is (it ends at the first
                    // queue, and a busy host's delay looks like one):
                    // the next one follows the drain instead of a cycle
                    // later (1.2 s at 150 ms). Measured over the emulator
                    // (`braid bench data --rtts 150`, DATA's Braid after
                    // its TCP probe): 558-616 Mbit/s with a quarter as
                    // the bar, 615-623 with a tenth (Braid alone: 634).
                    self.probe_soon = self.btl_bw >= 1.1 * self.up_start_bw;
                }
                let drained = gain < 1.0;
                self.cycle_index = (self.cycle_index + 1) % CYCLE.len();
                if drained && std::mem::take(&mut self.probe_soon) {
                    self.cycle_index = CYCLE.len() - 1;
                }
                self.cycle_stamp = now;
                if CYCLE[self.cycle_index] > 1.0 {
                    self.up_start_bw = self.btl_bw;
                    // v3 §4.3.3.6 BBRStartProbeBW_UP: each probe grows
                    // `inflight_hi` from its first step per round trip.
                    self.probe_up_rounds = 0;
                    self.inflight_hi_credit = 0.0;
                    self.up_queue = None;
                }
            }
        }
        // ProbeRTT (v3 §4.3.4.4): when no RTT near RTprop was seen for
        // PROBE_RTT_INTERVAL, hold half a BDP in flight for 200 ms (and at
        // least a round trip) to see the empty-queue RTT.
        if self.probe_rtt_expired && self.mode != Mode::ProbeRtt {
            self.probe_rtt_expired = false;
            self.mode = Mode::ProbeRtt;
            self.prior_mode_cwnd = self.cwnd.max(self.prior_mode_cwnd);
            self.probe_rtt_done = None;
        }
        if self.mode == Mode::ProbeRtt {
            if self.probe_rtt_done.is_none() && self.bytes_in_flight <= self.probe_rtt_cwnd() {
                self.probe_rtt_done =
                    Some(now + PROBE_RTT_TIME.max(self.rtprop.unwrap_or_default()));
            }
            if self.probe_rtt_done.is_some_and(|t| now >= t) {
                // Schedule the next one; the RTT filter took what this one
                // measured.
                self.probe_rtt_min_stamp = now;
                self.cwnd = self.cwnd.max(self.prior_mode_cwnd);
                self.prior_mode_cwnd = 0;
                if self.filled_pipe {
                    self.enter_probe_bw(now);
                } else {
                    self.mode = Mode::Startup;
                }
            }
        }
    }

    /// In ProbeBW_UP: probing for more bandwidth.
    fn probing_up(&self) -> bool {
        self.mode == Mode::ProbeBw && CYCLE[self.cycle_index] > 1.0
    }

    /// The flow is held back by `inflight_hi`: the window is at the
    /// bound, and full.
    fn held_by_inflight_hi(&self) -> bool {
        self.window_full && self.inflight_hi.is_some_and(|hi| self.cwnd + self.mss >= hi)
    }

    fn probe_rtt_cwnd(&self) -> u64 {
        self.target_cwnd(PROBE_RTT_CWND_GAIN)
    }

    /// v3 §4.3.4.4 BBRUpdateMinRTT. An RTT within 1/8 of `RTprop`
    /// also postpones ProbeRTT: the queue was (nearly) empty, which is
    /// what ProbeRTT would go and look for.
    fn update_min_rtt(&mut self, now: Instant, rtt: Duration) {
        let expired = now.saturating_duration_since(self.probe_rtt_min_stamp) > PROBE_RTT_INTERVAL;
        let near_min = self.probe_rtt_min_delay.is_some_and(|m| rtt <= m + m / 8);
        if self.probe_rtt_min_delay.is_none_or(|m| rtt < m) || expired {
            self.probe_rtt_min_delay = Some(rtt);
            self.probe_rtt_min_stamp = now;
        } else if near_min {
            self.probe_rtt_min_stamp = now;
        }
        self.probe_rtt_expired = expired && !near_min;
        let min_expired = now.saturating_duration_since(self.rtprop_stamp) > RTPROP_WINDOW;
        let probe = self.probe_rtt_min_delay.unwrap_or(rtt);
        if self.rtprop.is_none_or(|m| probe < m) || min_expired {
            self.rtprop = Some(probe);
            self.rtprop_stamp = self.probe_rtt_min_stamp;
        }
    }

    fn enter_probe_bw(&mut self, now: Instant) {
        self.mode = Mode::ProbeBw;
        // Start anywhere but the draining phase (§4.3.4.4); deterministic.
        // After a Startup that ended on loss, probe one RTprop from now:
        // the queue that overflowed may have been another flow's,
        // about to leave (DATA's TCP probe before its Braid one), and
        // the bandwidth Startup saw is then far below the path's. Up to
        // six RTprops of cruise first cost 0.9 s at 150 ms.
        self.cycle_index = if std::mem::take(&mut self.probe_soon) {
            CYCLE.len() - 1
        } else {
            2 + (self.rate.round as usize % (CYCLE.len() - 2))
        };
        self.cycle_stamp = now;
    }

    /// v3 §4.5.5 BBRUpdateACKAggregation: how much more data the
    /// acknowledgements delivered within one epoch than `BtlBw` explains.
    /// An epoch ends (and the next starts) once deliveries fall back to
    /// what `BtlBw` predicts. This is the extra in flight that batched or
    /// jittery acknowledgements need to keep the bottleneck busy, and it
    /// is what ProbeBW_CRUISE may hold beyond the BDP.
    fn update_ack_aggregation(&mut self, now: Instant, acked_bytes: u64) {
        let interval = now.saturating_duration_since(self.ack_epoch_start);
        let mut expected = (self.btl_bw * interval.as_secs_f64()) as u64;
        if self.ack_epoch_acked <= expected {
            self.ack_epoch_acked = 0;
            self.ack_epoch_start = now;
            expected = 0;
        }
        self.ack_epoch_acked += acked_bytes;
        let extra = self.ack_epoch_acked.saturating_sub(expected).min(self.cwnd);
        match self.extra_acked_samples.back_mut() {
            Some((r, e)) if *r == self.rate.round => *e = (*e).max(extra),
            _ => self.extra_acked_samples.push_back((self.rate.round, extra)),
        }
        let oldest = self.rate.round.saturating_sub(EXTRA_ACKED_WINDOW_ROUNDS - 1);
        while self
            .extra_acked_samples
            .front()
            .is_some_and(|(r, _)| *r < oldest)
        {
            self.extra_acked_samples.pop_front();
        }
        self.extra_acked = self
            .extra_acked_samples
            .iter()
            .map(|(_, e)| *e)
            .max()
            .unwrap_or(0);
    }

    /// What ProbeBW_CRUISE keeps in flight at most: the BDP, plus what
    /// ack aggregation needs (`extra_acked`, v3 §4.6.4.2
    /// BBRUpdateMaxInflight), plus v3's quantization budget of three send
    /// quanta (§4.6.4.2 BBRQuantizationBudget; a quantum is 1 ms at the
    /// pacing rate, 2 packets to 64 KB, §4.6.3).
    ///
    /// v3 leaves the window at 2 BDPs in CRUISE and relies on pacing at
    /// `BtlBw` to keep the queue empty. But `BtlBw` is a max filter: ack
    /// jitter and aggregation make it over-estimate by a few percent, and
    /// pacing even 2% above the bottleneck grows the queue every round
    /// trip until the window stops it, a standing queue of nearly a BDP
    /// (the issue this fixes). Bounded here, an over-estimate of x% only
    /// leaves a queue of about x% of a BDP.
    fn cruise_cap(&self) -> u64 {
        self.target_cwnd(1.0)
            .saturating_add(self.extra_acked)
            .saturating_add(3 * self.send_quantum())
    }

    /// A send quantum (v3 §4.6.3 BBRSetSendQuantum): 1 ms at the
    /// bandwidth estimate, 2 packets to 64 KB (2 packets when they alone
    /// exceed 64 KB: datagrams above 32 KB would otherwise make the bounds
    /// cross).
    fn send_quantum(&self) -> u64 {
        let floor = 2 * self.mss;
        ((self.btl_bw * 0.001) as u64).clamp(floor, (64 * 1024).max(floor))
    }

    /// The most in flight outside ProbeRTT (v3 §4.6.4.2
    /// BBRUpdateMaxInflight): `cwnd_gain` BDPs plus `extra_acked`, and at
    /// least the quantization budget of three send quanta
    /// (BBRQuantizationBudget's offload budget).
    ///
    /// Without `extra_acked` here, a path whose acknowledgements come in
    /// batches spaced more than its RTprop apart (a busy host or a
    /// user-space forwarder at sub-millisecond RTTs) spirals down: each
    /// batch delivers at most a window, so the bandwidth sample is the
    /// window over the batch spacing, and the next window, 2 BDPs of that
    /// sample, is smaller still (measured in `tests/bbr_queue.rs`: 1
    /// Gbit/s at 100 µs with 250 µs batches ran at 0.28 of the link).
    fn max_inflight(&self) -> u64 {
        self.target_cwnd(self.cwnd_gain)
            .saturating_add(self.extra_acked)
            .max(3 * self.send_quantum())
    }

    fn update_cwnd(&mut self, acked_bytes: u64) {
        if self.mode == Mode::ProbeRtt {
            self.cwnd = self
                .cwnd
                .min(self.probe_rtt_cwnd())
                .max(MIN_PACKETS * self.mss);
            return;
        }
        // Startup paces at 2.885 but, as v3 §4.3.1.1 does
        // (BBRDefaultCwndGain), keeps at most 2 BDPs in flight: enough to
        // double the rate each round, and v1's 2.885 BDPs overflow a
        // queue of one BDP by almost another before the plateau shows.
        let target = self.max_inflight();
        // §4.2.3.4: grow towards the target; before the pipe is full, grow
        // freely (slow-start-like).
        if self.filled_pipe {
            self.cwnd = (self.cwnd + acked_bytes).min(target);
        } else if self.cwnd < target || self.rate.delivered < self.initial_window {
            self.cwnd += acked_bytes;
        }
        let mut cap = self.inflight_cap();
        if self.mode == Mode::ProbeBw && CYCLE[self.cycle_index] == 1.0 {
            cap = cap.min(self.cruise_cap());
        }
        self.cwnd = self.cwnd.min(cap).max(MIN_PACKETS * self.mss);
    }

    /// One acknowledged packet: delivery-rate sample, round trips, the
    /// model (BtlBw, RTprop, `inflight_hi`), the mode, the window.
    fn on_ack_inner(&mut self, now: Instant, acked: &Acked) {
        if let Some(prior) = self.prior_cwnd.take() {
            self.cwnd = self.cwnd.max(prior);
        }
        let snap = self.rate.on_ack(now, acked);
        let rtt = acked.rtt.latest;
        if let Some(s) = snap {
            let round_start = s.round_start;
            if round_start {
                self.start_round();
                if self.probing_up() {
                    // v3 BBRRaiseInflightHiSlope: twice the growth of the
                    // last round trip.
                    self.probe_up_rounds = (self.probe_up_rounds + 1).min(30);
                }
            }
            // An interval shorter than RTprop would overestimate (§3.3).
            let floor = self.rtprop.unwrap_or(Duration::ZERO).min(rtt);
            if let Some(sample) = s.rate(floor) {
                self.update_bw(sample, acked.app_limited);
            }
            self.delivered_latest = self.delivered_latest.max(s.delivered);
            self.last_tx_in_flight = s.tx_in_flight;
            self.check_full_pipe(round_start, acked.app_limited);
            if !acked.app_limited && !self.inflight_too_high() {
                self.adapt_upper_bound(acked.bytes, s.tx_in_flight);
            }
        }
        self.round_min_rtt = Some(self.round_min_rtt.map_or(rtt, |m| m.min(rtt)));
        if self.probing_up() && acked.sent_time >= self.cycle_stamp {
            let queued = self
                .rtprop
                .is_some_and(|base| rtt > base + (base / 16).max(Duration::from_millis(1)));
            self.up_queue = Some(self.up_queue == Some(true) || queued);
        }
        self.update_min_rtt(now, rtt);
        self.update_mode(now);
        self.update_ack_aggregation(now, acked.bytes);
        self.update_cwnd(acked.bytes);
    }

    /// Packets declared lost, sent at or before `lost_sent_time`.
    fn on_loss(
        &mut self,
        now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
    ) {
        // Loss alone is not a congestion signal here: the model of the
        // path is. Loss beyond 2% of a round with a standing queue is the
        // queue overflowing, and bounds what is in flight (v3 §4.5.10);
        // losses of packets sent before the last such reaction were
        // answered by it.
        self.bytes_in_flight = self.bytes_in_flight.saturating_sub(lost_bytes);
        if self.probing_up() && lost_sent_time >= self.cycle_stamp {
            // A probe packet lost: whether random or a shallow queue's
            // overflow, it is no evidence of room, so UP ends as in v1.
            self.up_queue = Some(true);
        }
        if self.loss_reaction_at.is_some_and(|t| lost_sent_time <= t) {
            return;
        }
        self.round_lost += lost_bytes;
        self.round_lost_packets += lost_bytes.div_ceil(self.mss);
        if self.inflight_too_high() {
            self.handle_inflight_too_high(now);
        }
    }

    /// Mode changes are logged (`RUST_LOG=braid_recovery::cc::bbr=debug`)
    /// with the model: what a flow that runs slow did, and why.
    fn trace_transition(&self, before: Mode, on: &'static str) {
        if self.mode != before {
            tracing::debug!(
                from = ?before,
                to = ?self.mode,
                on,
                btl_bw_mbit = self.btl_bw * 8e-6,
                rtprop_us = self.rtprop.map(|r| r.as_micros() as u64),
                cwnd = self.cwnd,
                inflight_hi = self.inflight_hi,
                extra_acked = self.extra_acked,
                "bbr mode"
            );
        }
    }
}

impl CongestionController for Bbr {
    fn name(&self) -> &'static str {
        "bbr"
    }

    fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64) {
        self.rate.on_sent(now, bytes, bytes_in_flight);
        self.bytes_in_flight = bytes_in_flight;
        self.window_full = bytes_in_flight + self.mss > self.cwnd;
    }

    fn on_ack(&mut self, now: Instant, acked: &Acked) {
        let mode = self.mode;
        self.on_ack_inner(now, acked);
        self.trace_transition(mode, "ack");
    }

    fn on_ack_end(&mut self, now: Instant, bytes_in_flight: u64) {
        let mode = self.mode;
        self.bytes_in_flight = bytes_in_flight;
        self.update_mode(now);
        self.trace_transition(mode, "ack end");
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
        _persistent: bool,
    ) {
        let mode = self.mode;
        self.on_loss(now, lost_sent_time, lost_bytes);
        self.trace_transition(mode, "loss");
    }
    fn on_retransmission_timeout(&mut self, _now: Instant) {
        // Everything in flight is presumed lost: send little until an
        // acknowledgement shows the path works, then resume (§4.2.3.3).
        self.prior_cwnd = Some(self.cwnd.max(self.prior_cwnd.unwrap_or(0)));
        self.cwnd = MIN_PACKETS * self.mss;
        self.rate.clear();
        self.bytes_in_flight = 0;
    }

    fn resume(&mut self, now: Instant, from: &super::Handover) {
        // The model starts from the path's measurements: RTprop from the
        // minimum RTT, BtlBw from the predecessor's delivery rate (the
        // filter's first sample, replaced by real ones within its
        // window). A predecessor past slow start had found the capacity:
        // no Startup, cruise in ProbeBW at the adopted window.
        self.cwnd = from.window.max(MIN_PACKETS * self.mss);
        self.prior_cwnd = None;
        self.bytes_in_flight = from.bytes_in_flight;
        self.rate.restart(now);
        if let Some(rtt) = from.rtt {
            self.rtprop = Some(rtt.min);
            self.rtprop_stamp = now;
            self.probe_rtt_min_delay = Some(rtt.min);
            self.probe_rtt_min_stamp = now;
        }
        if let Some(bw) = from.delivery_rate {
            self.bw_samples.clear();
            self.bw_samples.push_back((self.rate.round, bw));
            self.btl_bw = bw;
            self.full_bw = bw;
        }
        if from.slow_start {
            self.mode = Mode::Startup;
            self.filled_pipe = false;
        } else {
            self.filled_pipe = true;
            self.enter_probe_bw(now);
        }
    }

    fn window(&self) -> u64 {
        self.cwnd
    }

    fn ssthresh(&self) -> u64 {
        if self.filled_pipe {
            self.target_cwnd(self.cwnd_gain).min(self.inflight_cap())
        } else {
            u64::MAX
        }
    }

    fn in_slow_start(&self) -> bool {
        self.mode == Mode::Startup
    }

    fn pacing_rate(&self, smoothed_rtt: Duration) -> f64 {
        if self.btl_bw > 0.0 {
            // v3 §4.6.2 paces 1% below the estimate (BBRPacingMarginPercent)
            // to keep an over-estimate from building a queue; here
            // `inflight_hi` and the cruise cap bound that queue, and the
            // 1% would come straight off the throughput.
            //
            // Never slower than the smallest window per round trip: a
            // bandwidth estimate that collapsed (repeated RTOs under heavy
            // loss leave only tiny delivery samples in the filter) would
            // otherwise pace so slowly that no sample can ever show more,
            // and the window, not the pacer, is what keeps such a path
            // safe (measured in braid-exon's crash campaign: a restarted
            // sender at 18.6% loss paced at 33 B/s for minutes).
            let floor = (MIN_PACKETS * self.mss) as f64 / smoothed_rtt.as_secs_f64().max(1e-6);
            (self.pacing_gain() * self.btl_bw).max(floor)
        } else {
            self.startup_gain * self.cwnd as f64 / smoothed_rtt.as_secs_f64().max(1e-6)
        }
    }

    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError> {
        match name {
            "cwnd_gain" => {
                if !(1.0..=10.0).contains(&value) {
                    return Err(CcError::OutOfRange {
                        name: "cwnd_gain",
                        value,
                        expected: "1 ≤ cwnd_gain ≤ 10",
                    });
                }
                self.cwnd_gain = value;
            }
            "startup_gain" => {
                if !(1.5..=4.0).contains(&value) {
                    return Err(CcError::OutOfRange {
                        name: "startup_gain",
                        value,
                        expected: "1.5 ≤ startup_gain ≤ 4",
                    });
                }
                self.startup_gain = value;
            }
            _ => {
                return Err(CcError::UnknownParameter {
                    controller: "bbr",
                    name: name.to_string(),
                    known: "cwnd_gain, startup_gain".to_string(),
                })
            }
        }
        Ok(())
    }

    fn parameters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("cwnd_gain", self.cwnd_gain),
            ("startup_gain", self.startup_gain),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cc::RttEstimate;

    #[test]
    fn datagrams_above_32_kib_have_a_send_quantum() {
        // 2 × 64 KiB exceeds the 64 KiB cap: the quantum is two packets.
        for mss in [1200, 32 * 1024, 33 * 1024, 65_527] {
            let cc = Bbr::new(mss, 10 * mss);
            assert!(cc.send_quantum() >= 2 * mss);
            assert!(cc.window() >= 2 * mss);
        }
    }

    /// A fluid bottleneck: packets leave the sender paced by the
    /// controller, queue at `rate` bytes/s, and are acknowledged one RTT
    /// (`base_rtt` plus queueing) later; every `loss_every`-th is lost.
    fn run(
        cc: &mut Bbr,
        rate: f64,
        base_rtt: Duration,
        secs: f64,
        loss_every: u64,
    ) -> (f64, Duration) {
        let mss = 1200u64;
        let mut now = Instant::ZERO;
        let mut link_free = Instant::ZERO;
        let mut in_flight: VecDeque<(Instant, Instant, bool)> = VecDeque::new(); // (sent, acked_at, lost)
        let mut flight_bytes = 0u64;
        let mut delivered = 0u64;
        let mut n = 0u64;
        let mut max_queue = Duration::ZERO;
        let end = Instant::ZERO + Duration::from_secs_f64(secs);
        let mut next_send = Instant::ZERO;
        while now < end {
            // Process acknowledgements due.
            while in_flight.front().is_some_and(|p| p.1 <= now) {
                let (sent, at, lost) = in_flight.pop_front().unwrap();
                flight_bytes -= mss;
                if lost {
                    cc.on_congestion_event(at, sent, mss, false);
                    continue;
                }
                delivered += mss;
                let rtt = at - sent;
                let est = RttEstimate {
                    latest: rtt,
                    smoothed: rtt,
                    min: base_rtt,
                };
                cc.on_ack(
                    at,
                    &Acked {
                        sent_time: sent,
                        bytes: mss,
                        app_limited: false,
                        rtt: est,
                        one_way_delay_us: None,
                    },
                );
                cc.on_ack_end(at, flight_bytes);
            }
            if flight_bytes + mss <= cc.window() && now >= next_send {
                n += 1;
                flight_bytes += mss;
                cc.on_sent(now, mss, flight_bytes);
                let start = link_free.max(now);
                link_free = start + Duration::from_secs_f64(mss as f64 / rate);
                max_queue = max_queue.max(start - now);
                let lost = loss_every > 0 && n.is_multiple_of(loss_every);
                in_flight.push_back((now, link_free + base_rtt, lost));
                let rate_now = cc.pacing_rate(base_rtt);
                next_send = now + Duration::from_secs_f64(mss as f64 / rate_now);
            } else {
                let next_ack = in_flight.front().map(|p| p.1).unwrap_or(end);
                let wake = if flight_bytes + mss <= cc.window() {
                    next_send.min(next_ack)
                } else {
                    next_ack
                };
                now = wake.max(now + Duration::from_nanos(1));
            }
        }
        (delivered as f64 / secs, max_queue)
    }

    #[test]
    fn fills_the_pipe_without_a_standing_queue() {
        let mut cc = Bbr::new(1200, 12_000);
        let rate = 12_500_000.0; // 100 Mbit/s
        let (goodput, _) = run(&mut cc, rate, Duration::from_millis(10), 5.0, 0);
        assert!(goodput > 0.85 * rate, "goodput {goodput}");
        let bw = cc.bottleneck_bandwidth();
        assert!((bw - rate).abs() < 0.1 * rate, "btl_bw {bw}");
        // The propagation delay plus one packet's serialization (96 µs).
        let min_rtt = cc.min_rtt().unwrap();
        assert!(
            min_rtt >= Duration::from_millis(10) && min_rtt < Duration::from_micros(10_200),
            "{min_rtt:?}"
        );
        assert_eq!(cc.mode, Mode::ProbeBw);
    }

    #[test]
    fn random_loss_is_not_congestion() {
        let rate = 12_500_000.0;
        let mut cc = Bbr::new(1200, 12_000);
        let (goodput, _) = run(&mut cc, rate, Duration::from_millis(10), 5.0, 20); // 5% loss
        assert!(goodput > 0.8 * rate * 0.95, "goodput {goodput} at 5% loss");
    }

    #[test]
    fn rto_shrinks_then_restores() {
        let mut cc = Bbr::new(1200, 120_000);
        cc.on_retransmission_timeout(Instant::ZERO);
        assert_eq!(cc.window(), 4 * 1200);
        let rtt = Duration::from_millis(5);
        let est = RttEstimate {
            latest: rtt,
            smoothed: rtt,
            min: rtt,
        };
        cc.on_sent(Instant::ZERO, 1200, 1200);
        cc.on_ack(
            Instant::ZERO + rtt,
            &Acked {
                sent_time: Instant::ZERO,
                bytes: 1200,
                app_limited: false,
                rtt: est,
                one_way_delay_us: None,
            },
        );
        assert!(cc.window() >= 120_000);
    }

    /// BBRv1 here refreshed RTprop from any sample once it was 10 s old,
    /// before ProbeRTT could see it expire: ProbeRTT never ran, and a
    /// queued RTT became the propagation delay. Now a path whose RTT
    /// stays above RTprop enters ProbeRTT after the interval, not before.
    #[test]
    fn probe_rtt_runs_when_no_rtt_near_the_minimum_was_seen() {
        let mut cc = Bbr::new(1200, 12_000);
        let mut sent: VecDeque<Instant> = VecDeque::new();
        let mut t = Instant::ZERO;
        let mut first_probe_rtt = None;
        let end = Instant::ZERO + Duration::from_secs(12);
        while t < end {
            // 10 ms for the first second, then 20 ms (a standing queue).
            let rtt = if t < Instant::ZERO + Duration::from_secs(1) {
                Duration::from_millis(10)
            } else {
                Duration::from_millis(20)
            };
            while sent.front().is_some_and(|&s| s + rtt <= t) {
                let s = sent.pop_front().unwrap();
                let est = RttEstimate {
                    latest: t - s,
                    smoothed: rtt,
                    min: Duration::from_millis(10),
                };
                cc.on_ack(
                    t,
                    &Acked {
                        sent_time: s,
                        bytes: 1200,
                        app_limited: false,
                        rtt: est,
                        one_way_delay_us: None,
                    },
                );
                cc.on_ack_end(t, 1200 * sent.len() as u64);
            }
            if cc.mode == Mode::ProbeRtt && first_probe_rtt.is_none() {
                first_probe_rtt = Some(t);
            }
            if 1200 * (sent.len() as u64 + 1) <= cc.window() {
                sent.push_back(t);
                cc.on_sent(t, 1200, 1200 * sent.len() as u64);
            }
            t += Duration::from_micros(200);
        }
        let at = first_probe_rtt.expect("ProbeRTT ran");
        let since_min = at.saturating_duration_since(Instant::ZERO + Duration::from_secs(1));
        assert!(since_min >= PROBE_RTT_INTERVAL, "ProbeRTT at {at:?}");
        assert!(
            since_min < PROBE_RTT_INTERVAL + Duration::from_millis(100),
            "ProbeRTT at {at:?}"
        );
    }

    #[test]
    fn parameters_are_checked() {
        let mut cc = Bbr::new(1200, 12_000);
        cc.set_parameter("cwnd_gain", 3.0).unwrap();
        assert!(cc.parameters().contains(&("cwnd_gain", 3.0)));
        assert!(matches!(
            cc.set_parameter("cwnd_gain", 0.5),
            Err(CcError::OutOfRange { .. })
        ));
        assert!(matches!(
            cc.set_parameter("beta", 0.5),
            Err(CcError::UnknownParameter { .. })
        ));
    }
}
