//! LEDBAT: less-than-best-effort congestion control on one-way delay.
//!
//! Two variants share this module:
//!
//! **LEDBAT** (RFC 6817, with the changes DTL made to it):
//! - queuing delay = filtered current one-way delay − base delay
//!   ([`super::delay`], RFC 6817 §2.4.2, §3.4), immune to a constant clock
//!   offset between the hosts;
//! - with `adaptive = 1`, the yielding controller of [`super::yielding`]: a
//!   congestion threshold at the smallest queue it can tell from noise
//!   (capped by the target), drain-then-halve above it, so p = 0 yields on
//!   a buffer or AQM queue of any depth, and keeps the delay at most the
//!   target alone where the buffer is deep (RFC 6817); opt-in for now (see
//!   that module's "Status");
//! - by default (`adaptive = 0`), DTL's AIMD controller on the target
//!   (default 100 ms, RFC 6817 §2.4.2 TARGET): below it, additive increase
//!   by GAIN segments per round trip
//!   (`cwnd += GAIN·bytes_acked·SMSS/cwnd`, RFC 6817's largest ramp-up, "the
//!   same as TCP" in DTL's words); above it, multiplicative decrease,
//!   `cwnd ×= β` per acknowledged segment (β = 0.99, `delay_beta`), which
//!   makes the decrease proportional to the rate (Chiu–Jain AIMD);
//! - `delay_beta = 1` selects RFC 6817's linear controller instead (§2.4.2):
//!   `cwnd += GAIN·off_target·bytes_acked·SMSS/cwnd` with `off_target =
//!   (TARGET − queuing_delay)/TARGET`, so additive decrease above the
//!   target. Its increase vanishes as the delay nears the target, so the
//!   delay creeps up to the target and rarely crosses it, and flows whose
//!   base delays differ by a few ms never equalise: whoever sees the
//!   smallest queuing delay keeps the link (the `latecomer` and `five`
//!   simulations show it). DTL's constant increase crosses the target every
//!   cycle, and each crossing takes more from larger windows;
//! - an initial TCP slow start (Rossi et al., as DTL does) that ends at the
//!   first loss or once the queuing delay exceeds half the target
//!   (`ss_exit`, a fraction of the target; 0 = at the first loss only, DTL's
//!   exact behaviour). Slow start doubles the window per round trip, so the
//!   queue it leaves when it notices the delay is about twice what it
//!   measured: ending at the target overflows any buffer under twice the
//!   target, and a latecomer, whose base delay still contains the standing
//!   queue of the flows present, overflows deeper ones. Ending at half the
//!   target, the `latecomer` simulation loses nothing at all (at 1, or only
//!   at a loss, the latecomer's slow start loses more packets than RFC
//!   6817's additive decrease does, against DTL Table 2); the flows present
//!   still back off, as the queue crosses their target;
//! - one *initial slowdown* two RTTs after that slow start (LEDBAT++ §4.4,
//!   on by default, `initial_slowdown = 0` for DTL's exact behaviour): the
//!   window drops to the minimum for two RTTs, then slow-starts back. The
//!   loss alone drains the queue only if the buffer is at most one BDP;
//!   with a deeper buffer the backed-off flows and the paused newcomer
//!   together let it empty, so the newcomer's base delay is right.
//!   Without it, a flow that joins a standing queue counts that queue as
//!   base delay and keeps the bottleneck to itself (measured in the
//!   `latecomer` and `five` simulations);
//! - on loss, `cwnd = max(cwnd·β, MIN_CWND)` with β = ½ (§2.4.2), at most
//!   once per round trip (the recovery period of [`super::newreno::Window`]);
//! - on a retransmission timeout, the 1·SMSS loss window (§2.4.2) and a TCP
//!   slow start back to ssthresh that also ends when the queuing delay
//!   reaches the target.
//!
//! **LEDBAT++** (draft-irtf-iccrg-ledbat-plus-plus-01), on the same delay
//! estimate:
//! - target 60 ms;
//! - §4.2 slower-than-Reno increase with a dynamic gain:
//!   `GAIN = 1 / min(16, ⌈2·TARGET/base⌉)` and `cwnd += GAIN·bytes·SMSS/cwnd`
//!   below the target; `base` is the minimum RTT (the draft is RTT-based;
//!   the one-way base delay is unknown up to the clock offset);
//! - §4.3 multiplicative decrease above the target: per round trip
//!   `cwnd += max(GAIN − C·cwnd·(delay/TARGET − 1), −cwnd/2)` with C = 1;
//! - modified slow start: growth scaled by GAIN, exit once the queuing delay
//!   exceeds ¾ of the target;
//! - §4.4 initial and periodic slowdowns: two RTTs after the initial slow
//!   start, the window drops to the minimum (2 segments) for two RTTs, then
//!   slow-starts back to where it was; the next slowdown starts 9× the
//!   duration of the previous one after it ended (≤ 10% utilisation cost),
//!   so that every flow on the bottleneck regularly sees the empty queue.
//!
//! The delay sample is the same for every packet of one ACK frame, so it is
//! fed to the filters once per frame (the first `on_ack` after an
//! `on_ack_end`); the window reacts per acknowledged packet, as RFC 6817's
//! per-ACK pseudo-code does with `bytes_newly_acked`. Application-limited
//! acknowledgements never grow the window (they play the role of RFC 6817's
//! `ALLOWED_INCREASE` cap); acknowledgements of packets sent before the
//! current loss recovery began neither grow nor shrink it. Without any delay
//! sample (a peer without usable timestamps) the window never grows after
//! slow start: politeness is the safe default.

use std::time::Duration;

use braid_core::Instant;

use super::delay::{self, DelayEstimator};
use super::yielding::{Step, Yielding};
use super::newreno::{check_beta, f64_to_bytes, Window};
use super::{Acked, CcError, CongestionController};

/// RFC 6817 §2.4.2 TARGET: 100 ms.
const DEFAULT_TARGET_US: f64 = 100_000.0;
/// draft-irtf-iccrg-ledbat-plus-plus-01 target: 60 ms.
const PLUS_PLUS_TARGET_US: f64 = 60_000.0;
/// Largest accepted target, ms.
const MAX_TARGET_MS: f64 = 10_000.0;
/// DTL's multiplicative-decrease factor per acknowledged segment.
const DEFAULT_DELAY_BETA: f64 = 0.99;
/// LEDBAT++ §4.2: the gain divisor is at most 16.
const MAX_GAIN_DIVISOR: f64 = 16.0;
/// LEDBAT++ §4.3 multiplicative-decrease constant C.
const DECREASE_CONSTANT: f64 = 1.0;
/// LEDBAT++ modified slow start ends above this fraction of the target.
const PLUS_PLUS_SS_EXIT: f64 = 0.75;
/// LEDBAT's initial slow start ends above this fraction of the target (or
/// at the first loss, whichever comes first).
const DEFAULT_SS_EXIT: f64 = 0.5;
/// LEDBAT++ §4.4: the next slowdown starts this many slowdown durations
/// after the previous one ended.
const SLOWDOWN_SPACING: u32 = 9;
/// LEDBAT++ §4.4: the window stays at the minimum for this many RTTs, and
/// the first slowdown starts this many RTTs after slow start.
const SLOWDOWN_RTTS: u32 = 2;
/// RTT assumed before the first sample (RFC 6298's initial RTO basis).
const FALLBACK_RTT: Duration = Duration::from_millis(100);

/// Which LEDBAT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedbatVariant {
    /// RFC 6817 with DTL's initial slow start and multiplicative decrease.
    Rfc6817,
    /// LEDBAT++ (draft-irtf-iccrg-ledbat-plus-plus-01).
    PlusPlus,
}

impl LedbatVariant {
    fn as_f64(self) -> f64 {
        match self {
            LedbatVariant::Rfc6817 => 0.0,
            LedbatVariant::PlusPlus => 1.0,
        }
    }
}

/// Where the controller is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Phase {
    /// The slow start at the very beginning (until the first loss; LEDBAT++:
    /// or ¾ of the target).
    InitialSlowStart,
    /// Slow start back to ssthresh, after a timeout or (LEDBAT++) after a
    /// slowdown that began at `slowdown_started`.
    Restoring { slowdown_started: Option<Instant> },
    /// LEDBAT++ slowdown: the window is held at the minimum until `until`.
    Frozen { until: Instant, started: Instant },
    /// The delay-based controller.
    Avoidance,
}

/// LEDBAT's state and rules, applied to a [`Window`] it does not own so
/// that [`super::Priority`] can hand the same window to MulTCP and back.
#[derive(Debug, Clone)]
pub(super) struct LedbatCore {
    variant: LedbatVariant,
    target_us: f64,
    gain: f64,
    /// Loss reaction factor (RFC 6817: ½).
    beta: f64,
    /// DTL's per-segment decrease above the target; 1 = RFC 6817 additive.
    delay_beta: f64,
    delays: DelayEstimator,
    phase: Phase,
    /// Growth below one byte, kept so that small increments add up.
    frac: f64,
    /// The next `on_ack` is the first of an ACK frame.
    frame_open: bool,
    srtt: Option<Duration>,
    min_rtt: Option<Duration>,
    /// When the next slowdown starts (LEDBAT++: periodic; LEDBAT: once).
    next_slowdown: Option<Instant>,
    /// LEDBAT: one slowdown after the initial slow start.
    initial_slowdown: bool,
    /// LEDBAT: the initial slow start also ends once the queuing delay
    /// exceeds this fraction of the target; 0 = only a loss ends it.
    ss_exit: f64,
    /// LEDBAT: the yielding controller of [`super::yielding`] (noise-floor
    /// threshold, drain-then-halve; `adaptive = 1`, opt-in, see its
    /// "Status") instead of DTL's fixed-target AIMD (`adaptive = 0`).
    /// `delay_beta = 1` (RFC 6817's linear controller, the `latecomer`
    /// baseline) keeps the RFC's controller either way.
    adaptive: bool,
    yielding: Yielding,
}

impl LedbatCore {
    pub(super) fn new(variant: LedbatVariant) -> Self {
        LedbatCore {
            variant,
            target_us: match variant {
                LedbatVariant::Rfc6817 => DEFAULT_TARGET_US,
                LedbatVariant::PlusPlus => PLUS_PLUS_TARGET_US,
            },
            gain: 1.0,
            beta: 0.5,
            delay_beta: DEFAULT_DELAY_BETA,
            delays: DelayEstimator::new(),
            phase: Phase::InitialSlowStart,
            frac: 0.0,
            frame_open: true,
            srtt: None,
            min_rtt: None,
            next_slowdown: None,
            initial_slowdown: true,
            ss_exit: DEFAULT_SS_EXIT,
            adaptive: false,
            yielding: Yielding::default(),
        }
    }

    /// The yielding controller is in charge (RFC 6817 variant, `adaptive`,
    /// and not RFC 6817's linear controller, `delay_beta = 1`, which stays
    /// the RFC's baseline).
    fn yields(&self) -> bool {
        self.adaptive && self.variant == LedbatVariant::Rfc6817 && self.delay_beta < 1.0
    }

    /// Base RTT in µs: the smallest RTT seen, or the smoothed one before.
    fn base_rtt_us(&self) -> f64 {
        self.min_rtt.unwrap_or(self.srtt()).as_micros() as f64
    }

    /// The yielding controller's congestion threshold, µs.
    fn yield_threshold_us(&self, w: &Window) -> f64 {
        let segments = self.cwnd(w) / w.smss.max(1) as f64;
        self.yielding
            .threshold_us(self.target_us, self.base_rtt_us(), segments)
    }

    pub(super) fn name(&self) -> &'static str {
        match self.variant {
            LedbatVariant::Rfc6817 => "ledbat",
            LedbatVariant::PlusPlus => "ledbat++",
        }
    }

    pub(super) fn phase(&self) -> Phase {
        self.phase
    }

    pub(super) fn in_slow_start(&self) -> bool {
        matches!(
            self.phase,
            Phase::InitialSlowStart | Phase::Restoring { .. }
        )
    }

    pub(super) fn queuing_delay(&self) -> Option<Duration> {
        self.delays.queuing_delay_us().map(Duration::from_micros)
    }

    fn srtt(&self) -> Duration {
        self.srtt.unwrap_or(FALLBACK_RTT)
    }

    fn cwnd(&self, w: &Window) -> f64 {
        w.cwnd as f64 + self.frac
    }

    /// Sets the window to `x` bytes (at least the minimum window).
    fn set_cwnd(&mut self, w: &mut Window, x: f64) {
        if !x.is_finite() {
            return;
        }
        let x = x.max(w.min_window as f64);
        let whole = f64_to_bytes(x);
        w.cwnd = whole;
        self.frac = if whole == u64::MAX {
            0.0
        } else {
            (x - whole as f64).clamp(0.0, 0.999_999)
        };
    }

    /// Takes over `w` from another controller (DTL's run-time switch): the
    /// window is kept; a window that never left slow start continues the
    /// initial slow start, one below ssthresh after a timeout slow-starts
    /// back to it, anything else goes straight to the delay controller.
    pub(super) fn enter(&mut self, w: &Window) {
        self.frac = 0.0;
        // A pending initial slowdown belongs to the slow start it followed;
        // LEDBAT++ schedules its first one two RTTs from now.
        self.next_slowdown = None;
        self.phase = if w.ssthresh == u64::MAX {
            Phase::InitialSlowStart
        } else if w.cwnd < w.ssthresh {
            Phase::Restoring {
                slowdown_started: None,
            }
        } else {
            Phase::Avoidance
        };
    }

    /// Records the RTT and, once per ACK frame, the delay sample. Called for
    /// every acknowledged packet whichever controller is driving, so the
    /// history is complete when LEDBAT takes over.
    pub(super) fn observe(&mut self, now: Instant, acked: &Acked) {
        if !acked.rtt.smoothed.is_zero() {
            self.srtt = Some(acked.rtt.smoothed);
        }
        if !acked.rtt.min.is_zero() {
            self.min_rtt = Some(acked.rtt.min);
        }
        if self.frame_open {
            self.frame_open = false;
            if let Some(sample) = acked.one_way_delay_us {
                self.delays.add(now, sample);
                if let (Some(q), Some(base)) =
                    (self.delays.queuing_delay_us(), self.delays.base_delay_us())
                {
                    let raw = sample.saturating_sub(base).max(0).unsigned_abs();
                    self.yielding.observe(q, raw);
                }
            }
        }
    }

    /// The ACK frame is complete: the next sample belongs to a new one.
    pub(super) fn end_frame(&mut self) {
        self.frame_open = true;
    }

    /// LEDBAT++ §4.2 dynamic gain, times the configured `gain`.
    fn plus_plus_gain(&self) -> f64 {
        let divisor = match self.min_rtt {
            Some(base) if !base.is_zero() => (2.0 * self.target_us / base.as_micros() as f64)
                .ceil()
                .clamp(1.0, MAX_GAIN_DIVISOR),
            _ => MAX_GAIN_DIVISOR,
        };
        self.gain / divisor
    }

    /// Queuing delay above which slow start ends, µs (`None`: only a loss
    /// ends it).
    fn slow_start_exit_us(&self, w: &Window) -> Option<f64> {
        match (self.variant, self.phase) {
            (LedbatVariant::PlusPlus, _) => Some(PLUS_PLUS_SS_EXIT * self.target_us),
            (LedbatVariant::Rfc6817, Phase::InitialSlowStart) => {
                (self.ss_exit > 0.0).then_some(self.ss_exit * self.target_us)
            }
            // The yielding controller: a slow start back to an earlier
            // window must end well before a shallow buffer fills (under
            // another flow's sawtooth), not at the target
            // (`Yielding::slow_start_exit_us`).
            (LedbatVariant::Rfc6817, _) if self.yields() => {
                let segments = self.cwnd(w) / w.smss.max(1) as f64;
                Some(self.yielding.slow_start_exit_us(self.target_us, self.base_rtt_us(), segments))
            }
            (LedbatVariant::Rfc6817, _) => Some(self.target_us),
        }
    }

    pub(super) fn on_ack(&mut self, w: &mut Window, now: Instant, acked: &Acked) {
        self.observe(now, acked);
        if self.yields() {
            let srtt = self.srtt();
            self.yielding
                .count_acked(now, acked.bytes, acked.app_limited, srtt, w.smss);
        }
        let grow = w.on_ack(acked);
        let shrink = if w.in_recovery() { 0 } else { acked.bytes };
        let queuing = self.delays.queuing_delay_us();
        match self.phase {
            Phase::Frozen { until, started } => {
                if now >= until {
                    self.phase = Phase::Restoring {
                        slowdown_started: Some(started),
                    };
                }
            }
            Phase::InitialSlowStart | Phase::Restoring { .. } => {
                let exit = self.slow_start_exit_us(w);
                if let (Some(q), Some(limit)) = (queuing, exit) {
                    if q as f64 > limit {
                        self.leave_slow_start(w, now);
                        return;
                    }
                }
                let scaled = match self.variant {
                    LedbatVariant::Rfc6817 => grow as f64,
                    LedbatVariant::PlusPlus => grow as f64 * self.plus_plus_gain(),
                };
                let cwnd = self.cwnd(w);
                let cap = w.ssthresh as f64;
                self.set_cwnd(w, (cwnd + scaled).min(cap.max(cwnd)));
                if w.cwnd >= w.ssthresh {
                    self.leave_slow_start(w, now);
                }
            }
            Phase::Avoidance => {
                match self.next_slowdown {
                    Some(at) if now >= at => return self.start_slowdown(w, now),
                    None if self.variant == LedbatVariant::PlusPlus => {
                        self.next_slowdown = Some(now + self.srtt() * SLOWDOWN_RTTS)
                    }
                    _ => {}
                }
                if let Some(q) = queuing {
                    if self.yields() {
                        self.yielding_avoidance(w, now, acked.sent_time, q, grow);
                    } else {
                        self.avoidance(w, q, grow, shrink);
                    }
                }
            }
        }
    }

    /// The yielding controller ([`super::yielding`]) for an acknowledgement
    /// of a packet sent at `sent`, `grow` bytes of which may grow the window.
    fn yielding_avoidance(&mut self, w: &mut Window, now: Instant, sent: Instant, queuing_us: u64, grow: u64) {
        let smss = w.smss as f64;
        let cwnd = self.cwnd(w).max(1.0);
        let threshold = self.yield_threshold_us(w);
        let step = self
            .yielding
            .step(now, sent, cwnd, queuing_us as f64, threshold, self.base_rtt_us());
        let next = match step {
            Step::Grow => cwnd + self.gain * grow as f64 * smss / cwnd,
            Step::Shrink(factor) => cwnd * factor,
            // Hold, but within contention's cap once it starts.
            Step::Hold => cwnd,
            Step::Restore(window) => {
                // The cross traffic left: slow-start back to the window we
                // yielded from (ssthresh), ending early at the target's
                // slow-start exit, instead of one segment per round trip.
                w.ssthresh = f64_to_bytes(window).max(w.min_window);
                if w.cwnd < w.ssthresh {
                    self.phase = Phase::Restoring {
                        slowdown_started: None,
                    };
                }
                return;
            }
        };
        // Contended ([`super::contention`]): a small share of the path.
        let next = self
            .yielding
            .window_cap(self.base_rtt_us())
            .map_or(next, |cap| next.min(cap));
        self.set_cwnd(w, next);
    }

    /// The delay-based controller, for `grow` bytes that may grow the window
    /// and `shrink` bytes that may shrink it.
    fn avoidance(&mut self, w: &mut Window, queuing_us: u64, grow: u64, shrink: u64) {
        let smss = w.smss as f64;
        let cwnd = self.cwnd(w).max(1.0);
        let q = queuing_us as f64;
        let target = self.target_us;
        let next = match self.variant {
            LedbatVariant::Rfc6817 if self.delay_beta < 1.0 => {
                if q > target {
                    // DTL: multiplicative decrease, β per acknowledged segment.
                    cwnd * self.delay_beta.powf(shrink as f64 / smss)
                } else {
                    // DTL: additive increase, GAIN segments per round trip.
                    cwnd + self.gain * grow as f64 * smss / cwnd
                }
            }
            LedbatVariant::Rfc6817 => {
                // RFC 6817 §2.4.2 linear controller.
                let off_target = (target - q) / target;
                let bytes = if off_target >= 0.0 { grow } else { shrink };
                cwnd + self.gain * off_target * bytes as f64 * smss / cwnd
            }
            LedbatVariant::PlusPlus => {
                let gain = self.plus_plus_gain();
                if q <= target {
                    // §4.2: GAIN segments per round trip.
                    cwnd + gain * grow as f64 * smss / cwnd
                } else {
                    // §4.3: the per-RTT change, spread over the window's acks.
                    let per_rtt = (gain * smss - DECREASE_CONSTANT * cwnd * (q / target - 1.0))
                        .max(-cwnd / 2.0);
                    cwnd + per_rtt * shrink as f64 / cwnd
                }
            }
        };
        self.set_cwnd(w, next);
    }

    fn leave_slow_start(&mut self, w: &mut Window, now: Instant) {
        match (self.phase, self.variant) {
            (
                Phase::Restoring {
                    slowdown_started: Some(started),
                },
                LedbatVariant::PlusPlus,
            ) => {
                // §4.4: the next slowdown is 9 durations of this one away.
                let duration = now.saturating_duration_since(started);
                self.next_slowdown = Some(now + duration * SLOWDOWN_SPACING);
            }
            (Phase::InitialSlowStart, LedbatVariant::Rfc6817) if self.initial_slowdown => {
                self.next_slowdown = Some(now + self.srtt() * SLOWDOWN_RTTS);
            }
            _ => {}
        }
        self.phase = Phase::Avoidance;
        // ssthresh records where slow start ended (never below the minimum).
        w.ssthresh = w.cwnd.max(w.min_window);
    }

    /// LEDBAT++ §4.4: remember the window in ssthresh, drop to the minimum
    /// for two RTTs.
    fn start_slowdown(&mut self, w: &mut Window, now: Instant) {
        w.ssthresh = w.cwnd.max(w.min_window);
        w.cwnd = w.min_window;
        self.frac = 0.0;
        self.next_slowdown = None;
        self.phase = Phase::Frozen {
            until: now + self.srtt() * SLOWDOWN_RTTS,
            started: now,
        };
    }

    pub(super) fn on_congestion_event(
        &mut self,
        w: &mut Window,
        now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
        persistent: bool,
    ) {
        if w.begin_recovery(now, lost_sent_time).is_some() {
            match self.phase {
                // The window is already minimal: halve the one to return to.
                Phase::Frozen { .. } => {
                    w.ssthresh = f64_to_bytes(w.ssthresh as f64 * self.beta).max(w.min_window);
                }
                _ => {
                    // RFC 6817 §2.4.2: cwnd = max(cwnd/2, MIN_CWND·MSS);
                    // the yielding controller also gives up the queue.
                    let cwnd = self.cwnd(w);
                    let factor = if self.yields() {
                        let q = self.delays.queuing_delay_us().unwrap_or(0) as f64;
                        let base = self.base_rtt_us();
                        self.yielding.on_loss(now, cwnd, q, base, self.beta)
                    } else {
                        self.beta
                    };
                    w.reduce_to(cwnd * factor);
                    self.frac = 0.0;
                    if self.in_slow_start() {
                        self.leave_slow_start(w, now);
                    }
                }
            }
        }
        w.remove_lost(lost_bytes);
        if persistent {
            w.persistent_congestion();
            self.frac = 0.0;
        }
    }

    pub(super) fn on_timeout(&mut self, w: &mut Window, now: Instant) {
        w.on_timeout(now, self.beta);
        self.frac = 0.0;
        let slowdown_started = match self.phase {
            Phase::Frozen { started, .. } => Some(started),
            Phase::Restoring { slowdown_started } => slowdown_started,
            _ => None,
        };
        self.phase = Phase::Restoring { slowdown_started };
    }

    /// Sets a LEDBAT parameter; `None` if the name is not one of LEDBAT's.
    /// Nothing changes when the value is rejected.
    pub(super) fn set_parameter(&mut self, name: &str, value: f64) -> Option<Result<(), CcError>> {
        let result = match name {
            "target_ms" => check_range(
                "target_ms",
                value,
                |v| v > 0.0 && v <= MAX_TARGET_MS,
                "a number of milliseconds greater than 0 and at most 10000",
            )
            .map(|v| self.target_us = v * 1e3),
            "gain" => check_range(
                "gain",
                value,
                |v| v > 0.0 && v <= 1.0,
                "a number greater than 0 and at most 1 (RFC 6817 §2.4.2)",
            )
            .map(|v| self.gain = v),
            "beta" => check_beta(value).map(|v| self.beta = v),
            "delay_beta" => check_range(
                "delay_beta",
                value,
                |v| v > 0.0 && v <= 1.0,
                "a number greater than 0 and at most 1 (1 = RFC 6817 additive decrease)",
            )
            .map(|v| self.delay_beta = v),
            "base_history" => check_integer(
                "base_history",
                value,
                delay::BASE_HISTORY_RANGE,
                "a whole number of minutes from 2 to 120",
            )
            .map(|v| self.delays.set_base_history(v)),
            "current_filter" => check_integer(
                "current_filter",
                value,
                delay::CURRENT_FILTER_RANGE,
                "a whole number of samples from 1 to 64",
            )
            .map(|v| self.delays.set_current_filter(v)),
            "initial_slowdown" => {
                if value == 0.0 || value == 1.0 {
                    self.initial_slowdown = value == 1.0;
                    Ok(())
                } else {
                    Err(CcError::OutOfRange {
                        name: "initial_slowdown",
                        value,
                        expected:
                            "1 (one slowdown after the initial slow start) or 0 (none, as DTL)",
                    })
                }
            }
            "ss_exit" => check_range(
                "ss_exit",
                value,
                |v| (0.0..=10.0).contains(&v),
                "a fraction of the target from 0 (only a loss ends slow start) to 10",
            )
            .map(|v| self.ss_exit = v),
            "adaptive" => {
                if value == 0.0 || value == 1.0 {
                    self.adaptive = value == 1.0;
                    Ok(())
                } else {
                    Err(CcError::OutOfRange {
                        name: "adaptive",
                        value,
                        expected: "1 (yield on any buffer: adaptive threshold, drain then halve) or 0 (DTL's fixed-target AIMD)",
                    })
                }
            }
            "variant" => {
                if value == 0.0 {
                    self.variant = LedbatVariant::Rfc6817;
                    Ok(())
                } else if value == 1.0 {
                    self.variant = LedbatVariant::PlusPlus;
                    Ok(())
                } else {
                    Err(CcError::OutOfRange {
                        name: "variant",
                        value,
                        expected: "0 (LEDBAT, RFC 6817) or 1 (LEDBAT++)",
                    })
                }
            }
            _ => return None,
        };
        Some(result)
    }

    pub(super) fn parameters(&self) -> [(&'static str, f64); 10] {
        [
            ("target_ms", self.target_us / 1e3),
            ("gain", self.gain),
            ("beta", self.beta),
            ("delay_beta", self.delay_beta),
            ("base_history", self.delays.base_history() as f64),
            ("current_filter", self.delays.current_filter() as f64),
            (
                "initial_slowdown",
                if self.initial_slowdown { 1.0 } else { 0.0 },
            ),
            ("ss_exit", self.ss_exit),
            ("adaptive", if self.adaptive { 1.0 } else { 0.0 }),
            ("variant", self.variant.as_f64()),
        ]
    }
}

/// The names [`LedbatCore::set_parameter`] knows, for error messages.
pub(super) const LEDBAT_PARAMETERS: &str =
    "target_ms, gain, beta, delay_beta, base_history, current_filter, initial_slowdown, ss_exit, adaptive, variant";

fn check_range(
    name: &'static str,
    value: f64,
    ok: impl Fn(f64) -> bool,
    expected: &'static str,
) -> Result<f64, CcError> {
    if ok(value) {
        Ok(value)
    } else {
        Err(CcError::OutOfRange {
            name,
            value,
            expected,
        })
    }
}

fn check_integer(
    name: &'static str,
    value: f64,
    (lo, hi): (usize, usize),
    expected: &'static str,
) -> Result<usize, CcError> {
    if value.fract() == 0.0 && value >= lo as f64 && value <= hi as f64 {
        Ok(value as usize)
    } else {
        Err(CcError::OutOfRange {
            name,
            value,
            expected,
        })
    }
}

/// LEDBAT congestion control (RFC 6817 with DTL's changes, or LEDBAT++),
/// see the module docs.
///
/// Parameters ([`CongestionController::set_parameter`]):
/// - `target_ms`: queuing-delay target in ms, in (0, 10000], default 100
///   (LEDBAT++: 60);
/// - `gain`: RFC 6817 GAIN in (0, 1], default 1 (LEDBAT++: the upper bound
///   of the dynamic gain);
/// - `beta`: loss reaction factor in (0, 1), default 0.5;
/// - `delay_beta`: DTL's decrease per acknowledged segment above the
///   target, in (0, 1], default 0.99; 1 = RFC 6817's linear controller
///   (additive increase and decrease proportional to the distance to the
///   target);
/// - `base_history`: minutes of base-delay history, 2–120, default 10;
/// - `current_filter`: samples in the current-delay filter, 1–64, default 3;
/// - `initial_slowdown`: LEDBAT only: 1 (default) = one slowdown two RTTs
///   after the initial slow start, 0 = none;
/// - `ss_exit`: LEDBAT only: the initial slow start also ends once the
///   queuing delay exceeds this fraction of the target, in [0, 10],
///   default 0.5; 0 = only the first loss ends it (DTL's exact behaviour);
/// - `adaptive`: LEDBAT only: 1 = the yielding controller of
///   [`super::yielding`] (yields on any buffer), 0 (default) = DTL's
///   fixed-target AIMD (`delay_beta`); RFC 6817's linear controller
///   (`delay_beta = 1`) is kept either way;
/// - `variant`: 0 = LEDBAT (RFC 6817), 1 = LEDBAT++;
/// - `min_window`: floor in bytes, in `[SMSS, 2^30]`, default 2·SMSS.
///
/// ```
/// use braid_recovery::cc::{Acked, CongestionController, Ledbat, RttEstimate};
/// use braid_recovery::Instant;
/// use std::time::Duration;
///
/// let mut cc = Ledbat::new(1000, 10 * 1000);
/// // DTL's fixed-target AIMD (the default), whose rule this example shows
/// // (the yielding controller, `adaptive = 1`, backs off at a smaller,
/// // learnt threshold).
/// cc.set_parameter("adaptive", 0.0).unwrap();
/// let rtt = RttEstimate {
///     latest: Duration::from_millis(40),
///     smoothed: Duration::from_millis(40),
///     min: Duration::from_millis(40),
/// };
/// // One-way delays carry an unknown clock offset: only differences count.
/// let ack = |sent: u64, owd_us: i64| Acked {
///     sent_time: Instant::from_micros(sent),
///     bytes: 1000,
///     app_limited: false,
///     rtt,
///     one_way_delay_us: Some(owd_us - 7_000_000),
/// };
/// cc.on_sent(Instant::ZERO, 1000, 1000);
/// cc.on_ack(Instant::from_micros(40_000), &ack(0, 20_000));
/// cc.on_ack_end(Instant::from_micros(40_000), 0);
/// assert_eq!(cc.window(), 11 * 1000); // slow start at the very beginning
/// cc.on_congestion_event(Instant::from_micros(50_000), Instant::from_micros(1), 1000, false);
/// assert_eq!(cc.window(), 5500); // halved on loss; slow start is over
/// // A one-sample current-delay filter, so that the next sample counts alone.
/// cc.set_parameter("current_filter", 1.0).unwrap();
/// cc.on_ack(Instant::from_micros(120_000), &ack(100_000, 70_000));
/// // 50 ms of queuing, below the 100 ms target: one segment per window.
/// assert_eq!(cc.queuing_delay(), Some(Duration::from_millis(50)));
/// assert_eq!(cc.window(), 5500 + 1000 * 1000 / 5500);
/// cc.set_parameter("target_ms", 25.0).unwrap();
/// assert!(cc.set_parameter("gain", 2.0).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct Ledbat {
    window: Window,
    core: LedbatCore,
}

impl Ledbat {
    /// RFC 6817 LEDBAT with DTL's changes, for packets of
    /// `max_datagram_size` bytes, starting with `initial_window` bytes
    /// (raised to the 2·SMSS minimum if smaller).
    pub fn new(max_datagram_size: u64, initial_window: u64) -> Self {
        Self::with_variant(max_datagram_size, initial_window, LedbatVariant::Rfc6817)
    }

    /// LEDBAT++ (60 ms target, dynamic gain, periodic slowdowns).
    pub fn plus_plus(max_datagram_size: u64, initial_window: u64) -> Self {
        Self::with_variant(max_datagram_size, initial_window, LedbatVariant::PlusPlus)
    }

    /// The given variant with its default parameters.
    pub fn with_variant(
        max_datagram_size: u64,
        initial_window: u64,
        variant: LedbatVariant,
    ) -> Self {
        Ledbat {
            window: Window::new(max_datagram_size, initial_window),
            core: LedbatCore::new(variant),
        }
    }

    /// The variant in force.
    pub fn variant(&self) -> LedbatVariant {
        self.core.variant
    }

    /// The current queuing-delay estimate (filtered current one-way delay
    /// minus the base delay), `None` before the first delay sample.
    pub fn queuing_delay(&self) -> Option<Duration> {
        self.core.queuing_delay()
    }
}

impl CongestionController for Ledbat {
    fn name(&self) -> &'static str {
        self.core.name()
    }

    fn on_sent(&mut self, _now: Instant, _bytes: u64, bytes_in_flight: u64) {
        self.window.set_flight(bytes_in_flight);
    }

    fn on_ack(&mut self, now: Instant, acked: &Acked) {
        self.core.on_ack(&mut self.window, now, acked);
    }

    fn on_ack_end(&mut self, _now: Instant, bytes_in_flight: u64) {
        self.window.set_flight(bytes_in_flight);
        self.core.end_frame();
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
        persistent: bool,
    ) {
        self.core.on_congestion_event(
            &mut self.window,
            now,
            lost_sent_time,
            lost_bytes,
            persistent,
        );
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        self.core.on_timeout(&mut self.window, now);
    }

    fn resume(&mut self, _now: Instant, from: &super::Handover) {
        self.window.adopt(from);
        self.core.enter(&self.window);
    }

    fn window(&self) -> u64 {
        self.window.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.window.ssthresh
    }

    fn in_slow_start(&self) -> bool {
        self.core.in_slow_start()
    }

    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError> {
        if name == "min_window" {
            return self.window.set_min_window(value);
        }
        self.core.set_parameter(name, value).unwrap_or_else(|| {
            Err(CcError::UnknownParameter {
                controller: self.core.name(),
                name: name.to_string(),
                known: format!("{LEDBAT_PARAMETERS}, min_window"),
            })
        })
    }

    fn parameters(&self) -> Vec<(&'static str, f64)> {
        let mut p = self.core.parameters().to_vec();
        p.push(("min_window", self.window.min_window as f64));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::super::newreno::test_support::{self, send, SMSS};
    use super::super::RttEstimate;
    use super::*;

    /// DTL's fixed-target LEDBAT (`adaptive = 0`), which most of these
    /// tests pin down; the yielding controller has its own tests.
    fn dtl_ledbat(smss: u64, initial_window: u64) -> Ledbat {
        let mut cc = Ledbat::new(smss, initial_window);
        cc.set_parameter("adaptive", 0.0).unwrap();
        cc
    }
    use proptest::prelude::*;

    const S: u64 = SMSS;

    fn t(ms: u64) -> Instant {
        Instant::ZERO + Duration::from_millis(ms)
    }

    fn rtt(ms: u64) -> RttEstimate {
        let d = Duration::from_millis(ms);
        RttEstimate {
            latest: d,
            smoothed: d,
            min: d,
        }
    }

    fn ack(sent: Instant, owd_us: Option<i64>, rtt_ms: u64) -> Acked {
        Acked {
            sent_time: sent,
            bytes: S,
            app_limited: false,
            rtt: rtt(rtt_ms),
            one_way_delay_us: owd_us,
        }
    }

    /// One ACK frame for one packet with delay sample `owd_us`.
    fn frame(cc: &mut Ledbat, now: Instant, sent: Instant, owd_us: i64) {
        cc.on_ack(now, &ack(sent, Some(owd_us), 40));
        cc.on_ack_end(now, 0);
    }

    /// A controller that left slow start through a loss at `t(10)`, with a
    /// window of `segments` segments, a base delay of 20 ms (plus `offset`)
    /// and a current-delay filter of `filter` samples.
    fn in_avoidance_with(
        segments: u64,
        variant: LedbatVariant,
        offset: i64,
        filter: f64,
    ) -> Ledbat {
        let mut cc = Ledbat::with_variant(S, 2 * segments * S, variant);
        cc.set_parameter("adaptive", 0.0).unwrap();
        cc.set_parameter("current_filter", filter).unwrap();
        // An app-limited first sample: the base delay, no growth.
        let mut first = ack(t(0), Some(20_000 + offset), 40);
        first.app_limited = true;
        cc.on_ack(t(1), &first);
        cc.on_ack_end(t(1), 0);
        send(&mut cc, t(2), 2 * segments);
        cc.on_congestion_event(t(10), t(2), S, false);
        assert_eq!(cc.window(), segments * S);
        assert!(!cc.in_slow_start());
        // Leave the recovery period: a packet sent after it is acknowledged.
        cc.on_ack(t(60), &ack(t(20), Some(20_000 + offset), 40));
        cc.on_ack_end(t(60), 0);
        cc.core.frac = 0.0;
        cc.window.cwnd = segments * S;
        // No slowdown in the way of the controller under test.
        cc.core.next_slowdown = None;
        cc
    }

    /// [`in_avoidance_with`] without offset and with a one-sample filter, so
    /// that each frame's delay is the current delay.
    fn in_avoidance(segments: u64, variant: LedbatVariant) -> Ledbat {
        in_avoidance_with(segments, variant, 0, 1.0)
    }

    #[test]
    fn initial_slow_start_doubles_until_the_first_loss() {
        let mut cc = dtl_ledbat(S, 10 * S);
        // DTL's exact behaviour: only a loss ends the initial slow start.
        cc.set_parameter("ss_exit", 0.0).unwrap();
        assert!(cc.in_slow_start());
        let mut now = t(0);
        for expected in [20, 40, 80] {
            let n = cc.window() / S;
            send(&mut cc, now, n);
            for _ in 0..n {
                // Even a large queuing delay does not end it (Rossi et al.).
                frame(
                    &mut cc,
                    now + Duration::from_millis(40),
                    now,
                    20_000 + 500_000 * (expected > 20) as i64,
                );
            }
            now += Duration::from_millis(40);
            assert_eq!(cc.window(), expected * S);
            assert!(cc.in_slow_start());
        }
        send(&mut cc, now, 80);
        cc.on_congestion_event(now + Duration::from_millis(5), now, S, false);
        assert_eq!(cc.window(), 40 * S);
        assert_eq!(cc.ssthresh(), 40 * S);
        assert!(!cc.in_slow_start());
    }

    /// By default the initial slow start also ends once the queuing delay
    /// exceeds half the target (`ss_exit`), keeping the window it reached.
    #[test]
    fn initial_slow_start_ends_at_half_the_target_by_default() {
        for (queuing_ms, ends) in [(40i64, false), (49, false), (51, true), (300, true)] {
            let mut cc = dtl_ledbat(S, 10 * S);
            let mut now = t(0);
            // One round at the base delay, then one at the queuing delay.
            for q in [0, queuing_ms] {
                let n = cc.window() / S;
                send(&mut cc, now, n);
                for _ in 0..n {
                    frame(
                        &mut cc,
                        now + Duration::from_millis(40),
                        now,
                        20_000 + q * 1000,
                    );
                }
                now += Duration::from_millis(40);
            }
            assert_eq!(cc.in_slow_start(), !ends, "{queuing_ms} ms");
            if ends {
                // Ended within the round (once the current-delay filter
                // saw the delay), well before doubling to 40 segments;
                // ssthresh records where, and the delay controller took
                // over the rest of the round's acks.
                let at = cc.ssthresh();
                assert!(at > 20 * S && at < 30 * S, "{queuing_ms} ms: {at}");
                assert!(cc.window() < 30 * S, "{queuing_ms} ms: {}", cc.window());
            }
        }
    }

    /// RFC 6817 §2.4.2: cwnd += GAIN·off_target·bytes·MSS/cwnd.
    #[test]
    fn below_target_the_linear_controller_grows_by_off_target() {
        for (queuing_ms, gain) in [(0u64, 1.0), (25, 1.0), (50, 0.5), (90, 1.0)] {
            let mut cc = in_avoidance(40, LedbatVariant::Rfc6817);
            cc.set_parameter("delay_beta", 1.0).unwrap();
            cc.set_parameter("gain", gain).unwrap();
            let before = cc.window() as f64;
            frame(&mut cc, t(100), t(70), 20_000 + queuing_ms as i64 * 1000);
            let off_target = (100.0 - queuing_ms as f64) / 100.0;
            let expected = before + gain * off_target * (S * S) as f64 / before;
            let got = cc.window() as f64 + cc.core.frac;
            assert!(
                (got - expected).abs() < 1e-6,
                "{queuing_ms} ms: {got} vs {expected}"
            );
        }
    }

    /// DTL's additive increase: GAIN segments per RTT at any delay below
    /// the target.
    #[test]
    fn below_target_dtl_grows_by_gain_whatever_the_delay() {
        for (queuing_ms, gain) in [(0u64, 1.0), (50, 1.0), (99, 0.5)] {
            let mut cc = in_avoidance(40, LedbatVariant::Rfc6817);
            cc.set_parameter("gain", gain).unwrap();
            let before = cc.window() as f64;
            frame(&mut cc, t(100), t(70), 20_000 + queuing_ms as i64 * 1000);
            let expected = before + gain * (S * S) as f64 / before;
            let got = cc.window() as f64 + cc.core.frac;
            assert!(
                (got - expected).abs() < 1e-6,
                "{queuing_ms} ms: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn a_full_window_below_target_grows_at_most_one_segment_per_rtt() {
        let mut cc = in_avoidance(40, LedbatVariant::Rfc6817);
        let before = cc.window();
        for _ in 0..40 {
            frame(&mut cc, t(100), t(70), 20_000);
        }
        let grown = cc.window() - before;
        assert!((S - 40..=S).contains(&grown), "{grown}");
    }

    /// DTL: above the target the window shrinks by β per acknowledged
    /// segment.
    #[test]
    fn above_target_the_window_shrinks_multiplicatively() {
        let mut cc = in_avoidance(100, LedbatVariant::Rfc6817);
        for k in 1..=10 {
            frame(&mut cc, t(100), t(70), 20_000 + 150_000);
            let expected = 100.0 * S as f64 * 0.99f64.powi(k);
            let got = cc.window() as f64 + cc.core.frac;
            assert!((got - expected).abs() < 1e-6, "{got} vs {expected}");
        }
        // Never below the minimum window.
        for _ in 0..1000 {
            frame(&mut cc, t(100), t(70), 20_000 + 150_000);
        }
        assert_eq!(cc.window(), 2 * S);
    }

    /// `delay_beta = 1`: RFC 6817's additive decrease, off_target < 0,
    /// whatever `adaptive` says (the `latecomer` scenario's baseline stays
    /// the RFC).
    #[test]
    fn delay_beta_one_restores_the_additive_decrease() {
        for adaptive in [0.0, 1.0] {
            let mut cc = in_avoidance(100, LedbatVariant::Rfc6817);
            cc.set_parameter("adaptive", adaptive).unwrap();
            cc.set_parameter("delay_beta", 1.0).unwrap();
            let before = cc.window() as f64;
            frame(&mut cc, t(100), t(70), 20_000 + 150_000);
            let expected = before - 0.5 * (S * S) as f64 / before;
            let got = cc.window() as f64 + cc.core.frac;
            assert!((got - expected).abs() < 1e-6, "adaptive {adaptive}: {got} vs {expected}");
        }
    }

    #[test]
    fn losses_halve_once_per_round_trip() {
        let mut cc = in_avoidance(40, LedbatVariant::Rfc6817);
        send(&mut cc, t(100), 40);
        cc.on_congestion_event(t(150), t(100), S, false);
        assert_eq!(cc.window(), 20 * S);
        cc.on_congestion_event(t(151), t(100), S, false);
        assert_eq!(cc.window(), 20 * S);
        // Acks of packets sent before the loss neither grow nor shrink.
        cc.on_ack(t(160), &ack(t(100), Some(20_000 + 300_000), 40));
        cc.on_ack_end(t(160), 0);
        assert_eq!(cc.window(), 20 * S);
    }

    #[test]
    fn a_timeout_collapses_then_slow_starts_back_until_the_target() {
        let mut cc = in_avoidance(40, LedbatVariant::Rfc6817);
        send(&mut cc, t(100), 40);
        cc.on_retransmission_timeout(t(400));
        assert_eq!(cc.window(), S);
        assert_eq!(cc.ssthresh(), 20 * S);
        assert!(cc.in_slow_start());
        send(&mut cc, t(401), 1);
        frame(&mut cc, t(441), t(401), 20_000);
        assert_eq!(cc.window(), 2 * S);
        // Queuing delay past the target ends this slow start.
        frame(&mut cc, t(442), t(402), 20_000 + 120_000);
        frame(&mut cc, t(443), t(403), 20_000 + 120_000);
        frame(&mut cc, t(444), t(404), 20_000 + 120_000);
        assert!(!cc.in_slow_start());
    }

    /// The initial slow start is followed, two RTTs later, by one slowdown:
    /// two RTTs at the minimum window, then slow start back.
    #[test]
    fn one_slowdown_follows_the_initial_slow_start() {
        let mut cc = dtl_ledbat(S, 10 * S);
        cc.set_parameter("current_filter", 1.0).unwrap();
        frame(&mut cc, t(40), t(0), 20_000);
        send(&mut cc, t(40), 11);
        cc.on_congestion_event(t(50), t(40), S, false);
        let w = cc.window();
        assert_eq!(cc.core.next_slowdown, Some(t(50 + 80)));
        frame(&mut cc, t(129), t(89), 20_000);
        assert!(cc.window() > w);
        frame(&mut cc, t(130), t(90), 20_000);
        assert_eq!(cc.window(), 2 * S);
        let back_to = cc.ssthresh();
        frame(&mut cc, t(210), t(170), 20_000);
        assert!(cc.in_slow_start());
        let mut now = 211;
        while cc.in_slow_start() {
            frame(&mut cc, t(now), t(now - 40), 20_000);
            now += 1;
        }
        assert_eq!(cc.window(), back_to);
        assert_eq!(cc.core.next_slowdown, None, "only one");
        for _ in 0..1000 {
            frame(&mut cc, t(now), t(now - 40), 20_000);
            now += 1;
        }
        assert!(cc.window() > back_to);

        // initial_slowdown = 0: DTL's behaviour, no slowdown.
        let mut cc = dtl_ledbat(S, 10 * S);
        cc.set_parameter("initial_slowdown", 0.0).unwrap();
        frame(&mut cc, t(40), t(0), 20_000);
        send(&mut cc, t(40), 11);
        cc.on_congestion_event(t(50), t(40), S, false);
        assert_eq!(cc.core.next_slowdown, None);
    }

    #[test]
    fn without_delay_samples_the_window_never_grows_after_slow_start() {
        let mut cc = in_avoidance(10, LedbatVariant::Rfc6817);
        cc.core.delays = DelayEstimator::new();
        for _ in 0..100 {
            cc.on_ack(t(100), &ack(t(70), None, 40));
            cc.on_ack_end(t(100), 0);
        }
        assert_eq!(cc.window(), 10 * S);
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let mut cc = in_avoidance(10, LedbatVariant::Rfc6817);
        for _ in 0..50 {
            let mut a = ack(t(70), Some(20_000), 40);
            a.app_limited = true;
            cc.on_ack(t(100), &a);
            cc.on_ack_end(t(100), 0);
        }
        assert_eq!(cc.window(), 10 * S);
    }

    /// The delay sample is taken once per ACK frame.
    #[test]
    fn one_delay_sample_per_ack_frame() {
        let mut cc = in_avoidance(10, LedbatVariant::Rfc6817);
        cc.on_ack(t(100), &ack(t(70), Some(90_000), 40));
        cc.on_ack(t(100), &ack(t(70), Some(500_000), 40));
        assert_eq!(cc.queuing_delay(), Some(Duration::from_millis(70)));
        cc.on_ack_end(t(100), 0);
        frame(&mut cc, t(101), t(70), 500_000);
        assert_eq!(cc.queuing_delay(), Some(Duration::from_millis(480)));
    }

    /// The same events with a different clock offset give the same windows.
    #[test]
    fn a_constant_clock_offset_changes_nothing() {
        let run = |offset: i64| {
            let mut cc = in_avoidance_with(30, LedbatVariant::Rfc6817, offset, 3.0);
            let mut windows = Vec::new();
            for i in 0..500u64 {
                let queuing = ((i * 7919) % 160) as i64 * 1000;
                frame(&mut cc, t(100 + i), t(70 + i), 20_000 + queuing + offset);
                windows.push(cc.window());
            }
            windows
        };
        assert_eq!(run(0), run(-9_000_000_000));
        assert_eq!(run(0), run(123_456_789));
    }

    #[test]
    fn plus_plus_gain_follows_the_draft() {
        let mut cc = in_avoidance(40, LedbatVariant::PlusPlus);
        // min RTT 40 ms, target 60 ms: ⌈2·60/40⌉ = 3.
        assert!((cc.core.plus_plus_gain() - 1.0 / 3.0).abs() < 1e-12);
        cc.core.min_rtt = Some(Duration::from_millis(500));
        assert_eq!(cc.core.plus_plus_gain(), 1.0);
        cc.core.min_rtt = Some(Duration::from_millis(1));
        assert_eq!(cc.core.plus_plus_gain(), 1.0 / 16.0);
        cc.core.min_rtt = None;
        assert_eq!(cc.core.plus_plus_gain(), 1.0 / 16.0);
    }

    /// LEDBAT++ §4.3: per RTT, cwnd += max(GAIN − cwnd·(delay/target − 1), −cwnd/2).
    #[test]
    fn plus_plus_decrease_is_multiplicative_and_capped_at_half() {
        for (queuing_ms, _) in [(75u64, ()), (300, ())] {
            let mut cc = in_avoidance(100, LedbatVariant::PlusPlus);
            cc.core.next_slowdown = Some(t(1_000_000));
            let w = cc.window() as f64;
            frame(&mut cc, t(100), t(70), 20_000 + queuing_ms as i64 * 1000);
            let gain = 1.0 / 3.0;
            let per_rtt = (gain * S as f64 - w * (queuing_ms as f64 / 60.0 - 1.0)).max(-w / 2.0);
            let expected = w + per_rtt * S as f64 / w;
            let got = cc.window() as f64 + cc.core.frac;
            assert!(
                (got - expected).abs() < 1e-6,
                "{queuing_ms}: {got} vs {expected}"
            );
        }
    }

    #[test]
    fn plus_plus_slow_start_is_scaled_by_the_gain_and_ends_at_three_quarters() {
        let mut cc = Ledbat::plus_plus(S, 10 * S);
        frame(&mut cc, t(40), t(0), 20_000);
        // min RTT 40 ms: gain ⅓ of the acknowledged bytes.
        let got = cc.window() as f64 + cc.core.frac;
        assert!(
            (got - (10.0 * S as f64 + S as f64 / 3.0)).abs() < 1e-6,
            "{got}"
        );
        for _ in 0..3 {
            frame(&mut cc, t(41), t(1), 20_000 + 46_000);
        }
        assert!(!cc.in_slow_start());
    }

    /// LEDBAT++ §4.4: two RTTs after slow start, two RTTs at the minimum,
    /// slow start back, next slowdown 9 durations later.
    #[test]
    fn plus_plus_slows_down_periodically() {
        let mut cc = Ledbat::plus_plus(S, 10 * S);
        frame(&mut cc, t(40), t(0), 20_000);
        for _ in 0..3 {
            frame(&mut cc, t(41), t(1), 20_000 + 50_000);
        }
        assert_eq!(cc.core.phase(), Phase::Avoidance);
        let w = cc.window();
        // The first avoidance ack schedules the slowdown two RTTs out.
        frame(&mut cc, t(50), t(10), 20_000 + 50_000);
        assert_eq!(cc.core.next_slowdown, Some(t(50 + 80)));
        frame(&mut cc, t(129), t(89), 20_000);
        assert!(cc.window() >= w - S);
        frame(&mut cc, t(130), t(90), 20_000);
        assert_eq!(cc.window(), 2 * S);
        let w_before = cc.ssthresh();
        assert!(matches!(cc.core.phase(), Phase::Frozen { .. }));
        frame(&mut cc, t(209), t(169), 20_000);
        assert_eq!(cc.window(), 2 * S);
        frame(&mut cc, t(210), t(170), 20_000);
        assert!(cc.in_slow_start());
        // Ramp back up to the window before the slowdown.
        let mut now = 211;
        while cc.in_slow_start() {
            frame(&mut cc, t(now), t(now - 40), 20_000);
            now += 1;
            assert!(now < 10_000, "ramp never ended");
        }
        assert_eq!(cc.window(), w_before);
        let duration = now - 1 - 130;
        assert_eq!(cc.core.next_slowdown, Some(t(now - 1 + 9 * duration)));
    }

    #[test]
    fn parameters_are_validated_and_listed() {
        let mut cc = dtl_ledbat(S, 10 * S);
        for (name, bad) in [
            ("target_ms", 0.0),
            ("target_ms", f64::NAN),
            ("gain", 1.5),
            ("beta", 1.0),
            ("delay_beta", 0.0),
            ("base_history", 1.0),
            ("base_history", 10.5),
            ("current_filter", 0.0),
            ("variant", 2.0),
            ("initial_slowdown", 0.5),
            ("ss_exit", -0.1),
            ("ss_exit", f64::NAN),
            ("min_window", 1.0),
        ] {
            let before = cc.parameters();
            let err = cc.set_parameter(name, bad).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
            assert_eq!(cc.parameters(), before);
        }
        let err = cc.set_parameter("n", 1.0).unwrap_err();
        assert!(err.to_string().contains("target_ms"), "{err}");
        cc.set_parameter("variant", 1.0).unwrap();
        assert_eq!(cc.name(), "ledbat++");
        cc.set_parameter("base_history", 13.0).unwrap();
        cc.set_parameter("current_filter", 4.0).unwrap();
        let p = cc.parameters();
        assert!(p.contains(&("base_history", 13.0)) && p.contains(&("current_filter", 4.0)));
        assert!(p.contains(&("target_ms", 100.0)) && p.contains(&("min_window", (2 * S) as f64)));
        assert_eq!(Ledbat::plus_plus(S, S).parameters()[0], ("target_ms", 60.0));
    }

    proptest! {
        #[test]
        fn random_event_sequences_keep_the_window_sane(
            smss in 0u64..2000,
            iw in 0u64..100_000,
            plus_plus in any::<bool>(),
            ops in prop::collection::vec(test_support::op(), 0..200),
        ) {
            let mut cc = if plus_plus { Ledbat::plus_plus(smss, iw) } else { Ledbat::new(smss, iw) };
            test_support::check_invariants(&mut cc, smss, &ops);
        }
    }
}
