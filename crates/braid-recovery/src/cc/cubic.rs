//! CUBIC congestion control (RFC 9438), for one flow ([`Cubic`]) and for an
//! aggregate of N virtual CUBIC flows ([`CubicCore`] with `n ≠ 1`, which
//! [`super::Priority`] and [`super::MulTcp`] use for p = N > 0).
//!
//! Slow start, the recovery period, the timeout loss window and FlightSize
//! tracking are NewReno's ([`super::newreno::Window`], RFC 9438 §4.10); this
//! module adds CUBIC's congestion-avoidance growth and its multiplicative
//! decrease:
//!
//! - window increase function `W_cubic(t) = C·(t−K)³ + W_max`,
//!   `K = ∛((W_max − cwnd_epoch)/C)` (§4.2, windows in segments, t in
//!   seconds since the first acknowledgement of the congestion-avoidance
//!   stage), target `W_cubic(t + RTT)` clamped to `[cwnd, 1.5·cwnd]`;
//! - Reno-friendly region (§4.3): `W_est += α·segments_acked/cwnd` with
//!   `α = 3(1−β)/(1+β)` until `W_est` reaches `cwnd_prior`, then `α = 1`;
//!   `cwnd = W_est` whenever `W_cubic(t) < W_est`;
//! - concave and convex regions (§4.4, §4.5): `cwnd += (target − cwnd)/cwnd`
//!   per acknowledged segment (byte-counted);
//! - multiplicative decrease (§4.6): `ssthresh = max(FlightSize·β, min_window)`,
//!   `cwnd = ssthresh`, `cwnd_prior` = the window before; an
//!   application-limited flight keeps at least the restart window
//!   `min(IW, cwnd)` (RFC 7661 §4.4 and RFC 5681 §4.1, as NewReno's
//!   [`super::newreno::Window`]);
//! - fast convergence (§4.7): `W_max = cwnd·(1+β)/2` when the window before
//!   the reduction is below the previous `W_max`;
//! - timeout (§4.8): ssthresh and the 1·SMSS loss window as NewReno but with
//!   β = 0.7; the next congestion-avoidance stage uses `K = 0` and
//!   `W_max = cwnd_epoch`. Persistent congestion (RFC 9002 §7.6.2) is
//!   handled the same way after collapsing to the minimum window;
//! - application-limited periods (§5.8): such acknowledgements do not grow
//!   the window, and the time between them is removed from `t` by moving the
//!   epoch start forward.
//!
//! # N virtual CUBIC flows
//!
//! DTL's priority p > 0 must take the share of p TCP flows, and the kernel's
//! TCP is CUBIC. Model the connection's window W as N CUBIC flows of W/N
//! each (MulTCP's idea, Crowcroft and Oechslin, applied to RFC 9438), N a
//! positive real:
//!
//! - **Decrease**: one loss hits one of the N flows (as MulTCP2 assumes),
//!   which keeps β of its W/N while the others keep theirs:
//!   `β_N = (N − 1 + β)/N`. Fast convergence lowers that one flow's W_max,
//!   which for the aggregate is `W_max = cwnd·(1+β_N)/2`.
//! - **Cubic growth**: summing the N flows' curves around the aggregate
//!   `W_max` gives `W_N(t) = N·C·(t−K)³ + W_max`, so `C_N = N·C`, and
//!   `K = ∛(W_max·(1−β_N)/(N·C))` is the same eq. 2 with `C_N` and
//!   `cwnd_epoch = β_N·W_max`.
//! - **Reno-friendly region** (§4.3) scaled to N Reno flows: AIMD(α, β) has
//!   the mean window `√(α(1+β)/(2(1−β)p))` segments at loss rate p, and N
//!   Reno flows `N·√(3/(2p))`, so `α_N = N²·3(1−β_N)/(1+β_N)` until W_est
//!   reaches cwnd_prior; past it N Reno flows grow by N segments per round
//!   trip (MulTCP's increase, [`super::multcp::aimd_increase`]).
//! - **N < 1**: `β_N` would go below zero near N = 1 − β, so below one flow
//!   the decrease stays β, `α_N = N²·α_cubic` then `N²` (MulTCP's N < 1
//!   rule), and `C_N = N⁴·C`: CUBIC's mean window goes as `C^¼` (RFC 9438
//!   §5.2 eq. 7), so `N⁴` gives N times one flow's.
//!
//! All of these are continuous in N and equal CUBIC's at N = 1, where the
//! code is exactly [`Cubic`]'s (one implementation, [`CubicCore`]). A change
//! of N on a live connection keeps the window, W_max and cwnd_prior; it only
//! starts a new stage from the current window (at the W_max plateau if the
//! window is already above it, so the faster curve does not jump).
//!
//! Not implemented (both optional): HyStart++ (RFC 9406) and undoing
//! spurious congestion events (§4.9).
//!
//! All state is in bytes; the equations are evaluated in segments of SMSS
//! bytes, which is the unit C is defined in.

use std::time::Duration;

use braid_core::Instant;

use super::multcp::aimd_increase;
use super::newreno::{check_beta, f64_to_bytes, Window};
use super::{Acked, CcError, CongestionController};

/// RFC 9438 §5.1 default C (segments/s³).
const DEFAULT_C: f64 = 0.4;
/// RFC 9438 §4.6 default β_cubic.
const DEFAULT_BETA: f64 = 0.7;
/// Largest accepted C: beyond this CUBIC is effectively slow start forever.
const MAX_C: f64 = 10.0;

/// K in seconds (RFC 9438 §4.2 eq. 2), windows in segments. A negative
/// difference (window above `W_max` at the epoch start) gives a negative K,
/// which keeps `W_cubic(0) = cwnd_epoch`.
fn cubic_k(c: f64, w_max: f64, cwnd_epoch: f64) -> f64 {
    ((w_max - cwnd_epoch) / c).cbrt()
}

/// `W_cubic(t)` in segments (RFC 9438 §4.2 eq. 1).
fn w_cubic(c: f64, k: f64, w_max: f64, t: f64) -> f64 {
    c * (t - k).powi(3) + w_max
}

/// α_cubic (RFC 9438 §4.3 eq. 5): the additive increase, in segments per
/// RTT, that makes AIMD(α, β) as aggressive as Reno's AIMD(1, 0.5).
fn alpha_cubic(beta: f64) -> f64 {
    3.0 * (1.0 - beta) / (1.0 + beta)
}

/// The constants of an aggregate of N CUBIC flows (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Aggregate {
    /// C_N, segments/s³.
    c: f64,
    /// β_N: the fraction of the window kept on a loss.
    beta: f64,
    /// α_N of the Reno-friendly region before W_est reaches cwnd_prior.
    alpha: f64,
    /// The Reno-friendly increase after it (N Reno flows), segments/RTT.
    alpha_reno: f64,
}

impl Aggregate {
    fn new(c: f64, beta: f64, n: f64) -> Self {
        let (c_n, beta_n) = if n >= 1.0 {
            (n * c, (n - 1.0 + beta) / n)
        } else {
            (n.powi(4) * c, beta)
        };
        Aggregate {
            c: c_n,
            beta: beta_n,
            alpha: n * n * alpha_cubic(beta_n),
            alpha_reno: aimd_increase(n),
        }
    }
}

/// One congestion-avoidance stage (RFC 9438 §4.2): starts at the first
/// acknowledgement that may grow the window after a reduction or after
/// slow start.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    /// `t = now − start`; moved forward over application-limited time.
    start: Instant,
    /// cwnd at the start of the stage, bytes.
    cwnd_epoch: f64,
    /// The Reno-friendly estimate W_est (§4.3), bytes.
    w_est: f64,
    /// K (§4.2 eq. 2) and the (C_N, W_max, cwnd_epoch) it was computed
    /// from: a cube root per acknowledgement was a few percent of a fast
    /// sender's CPU, and the inputs change only between stages (or when a
    /// parameter is set mid-stage, which the comparison catches).
    k: Option<([f64; 3], f64)>,
}

/// CUBIC's state and rules for N virtual flows (N = 1: RFC 9438 CUBIC),
/// applied to a [`Window`] it does not own, so that [`super::Priority`] can
/// hand the same window to LEDBAT and back.
#[derive(Debug, Clone)]
pub(super) struct CubicCore {
    c: f64,
    beta: f64,
    fast_convergence: bool,
    /// Number of virtual flows; callers validate it.
    n: f64,
    /// W_max in bytes (§4.2, §4.7); `None` before the first reduction and
    /// after a timeout, until the next stage starts (§4.8).
    w_max: Option<f64>,
    /// cwnd when ssthresh was last set (§4.6), bytes.
    cwnd_prior: f64,
    /// W_est has reached `cwnd_prior`, so α = N Reno flows' (§4.3).
    alpha_is_one: bool,
    epoch: Option<Epoch>,
    /// Growth below one byte, kept so that small increments add up.
    cwnd_frac: f64,
    last_ack: Option<Instant>,
    /// N changed: the next stage starts at the plateau if the window is
    /// above W_max.
    n_changed: bool,
}

impl CubicCore {
    /// RFC 9438's defaults for `n` virtual flows.
    pub(super) fn new(n: f64) -> Self {
        CubicCore {
            c: DEFAULT_C,
            beta: DEFAULT_BETA,
            fast_convergence: true,
            n,
            w_max: None,
            cwnd_prior: 0.0,
            alpha_is_one: false,
            epoch: None,
            cwnd_frac: 0.0,
            last_ack: None,
            n_changed: false,
        }
    }

    fn aggregate(&self) -> Aggregate {
        Aggregate::new(self.c, self.beta, self.n)
    }

    /// β_N: the fraction of the flight kept on a loss.
    pub(super) fn beta_n(&self) -> f64 {
        self.aggregate().beta
    }

    /// Changes N (validated by the caller). The window and W_max are kept;
    /// the next acknowledgement starts a new stage from the current window.
    pub(super) fn set_n(&mut self, n: f64) {
        if n != self.n {
            self.n = n;
            self.end_epoch();
            self.n_changed = true;
        }
    }

    /// Takes over a window another controller grew (DTL's switch): the next
    /// stage starts from it as after a timeout (§4.8: `K = 0`,
    /// `W_max = cwnd_epoch`), with the Reno-friendly estimate at N Reno
    /// flows' pace, since no reduction of ours set `cwnd_prior`.
    pub(super) fn reset(&mut self) {
        self.w_max = None;
        self.cwnd_prior = 0.0;
        self.n_changed = false;
        self.end_epoch();
    }

    /// The window including its fractional part, bytes.
    fn cwnd(&self, w: &Window) -> f64 {
        w.cwnd as f64 + self.cwnd_frac
    }

    fn set_cwnd(&mut self, w: &mut Window, x: f64) {
        if !x.is_finite() {
            return;
        }
        let whole = f64_to_bytes(x);
        // Never shrink on an ACK; a window past u64 stops at u64::MAX.
        if whole > w.cwnd {
            w.cwnd = whole;
        }
        self.cwnd_frac = if whole == u64::MAX {
            0.0
        } else {
            (x - whole as f64).clamp(0.0, 0.999_999)
        };
    }

    /// Forget the current stage; the next growing ACK starts a new one.
    fn end_epoch(&mut self) {
        self.epoch = None;
        self.cwnd_frac = 0.0;
        self.alpha_is_one = false;
    }

    /// Every acknowledgement, growing or not (§5.8): time in which the
    /// sender is application-limited must not count in `t`, or the window
    /// would jump once the application catches up.
    pub(super) fn observe(&mut self, now: Instant, acked: &Acked) {
        if acked.app_limited {
            if let (Some(epoch), Some(last)) = (self.epoch.as_mut(), self.last_ack) {
                epoch.start = (epoch.start + now.saturating_duration_since(last)).min(now);
            }
        }
        self.last_ack = Some(now);
    }

    /// One acknowledged packet: slow start, then congestion avoidance.
    pub(super) fn on_ack(&mut self, w: &mut Window, now: Instant, acked: &Acked) {
        let growth = w.on_ack(acked);
        self.observe(now, acked);
        let rest = w.slow_start(growth);
        if rest > 0 {
            self.congestion_avoidance(w, now, rest, acked.rtt.smoothed);
        }
    }

    /// Congestion avoidance for `bytes` newly acknowledged (§4.2–§4.5).
    pub(super) fn congestion_avoidance(
        &mut self,
        w: &mut Window,
        now: Instant,
        bytes: u64,
        rtt: Duration,
    ) {
        let smss = w.smss as f64;
        let cwnd = self.cwnd(w);
        let agg = self.aggregate();
        let mut epoch = match self.epoch {
            Some(epoch) => epoch,
            None => {
                if std::mem::take(&mut self.n_changed) && self.w_max.is_some_and(|m| m < cwnd) {
                    // Above the plateau after a change of N: probe from
                    // here (K = 0) rather than far along the faster curve.
                    self.w_max = Some(cwnd);
                }
                Epoch {
                    start: now,
                    cwnd_epoch: cwnd,
                    w_est: cwnd,
                    k: None,
                }
            }
        };
        // §4.8: after a timeout W_max is the window at the start of the stage.
        let w_max = *self.w_max.get_or_insert(cwnd);
        let acked = bytes as f64;

        // §4.3: the Reno-friendly estimate, α·segments_acked/cwnd segments.
        let alpha = if self.alpha_is_one {
            agg.alpha_reno
        } else {
            agg.alpha
        };
        epoch.w_est += alpha * smss * acked / cwnd;
        if epoch.w_est >= self.cwnd_prior {
            self.alpha_is_one = true;
        }

        let t = now.saturating_duration_since(epoch.start).as_secs_f64();
        let k_inputs = [agg.c, w_max / smss, epoch.cwnd_epoch / smss];
        let k = match epoch.k {
            Some((inputs, k)) if inputs == k_inputs => k,
            _ => {
                let [c, w_max_segments, cwnd_epoch_segments] = k_inputs;
                let k = cubic_k(c, w_max_segments, cwnd_epoch_segments);
                epoch.k = Some((k_inputs, k));
                k
            }
        };
        let cubic_now = w_cubic(agg.c, k, w_max / smss, t) * smss;
        let new_w = if cubic_now < epoch.w_est {
            // §4.3 Reno-friendly region (never shrinking on an ACK).
            cwnd.max(epoch.w_est)
        } else {
            // §4.2 eq. 3 target; §4.4 concave / §4.5 convex: the same rule,
            // (target − cwnd)/cwnd per acknowledged segment. max/min rather
            // than clamp: no panic path even for a NaN.
            let ahead = w_cubic(agg.c, k, w_max / smss, t + rtt.as_secs_f64()) * smss;
            let target = ahead.max(cwnd).min(1.5 * cwnd);
            cwnd + (target - cwnd) * acked / cwnd
        };
        self.epoch = Some(epoch);
        self.set_cwnd(w, new_w);
    }

    /// Packets were declared lost (§4.6, §4.7; RFC 9002 §7.6.2).
    pub(super) fn on_congestion_event(
        &mut self,
        w: &mut Window,
        now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
        persistent: bool,
    ) {
        if let Some(flight_size) = w.begin_recovery(now, lost_sent_time) {
            let cwnd = self.cwnd(w);
            let beta = self.beta_n();
            // §4.7 fast convergence: release bandwidth to newer flows when
            // the window did not get back to the previous W_max.
            self.w_max = Some(match self.w_max {
                Some(previous) if self.fast_convergence && cwnd < previous => {
                    cwnd * (1.0 + beta) / 2.0
                }
                _ => cwnd,
            });
            // §4.6 multiplicative decrease.
            self.cwnd_prior = cwnd;
            // An application-limited flight keeps the restart window
            // (RFC 7661 §4.4, RFC 5681 §4.1; see `Window::reduce_on_loss`).
            w.reduce_on_loss(flight_size as f64 * beta);
            self.n_changed = false;
            self.end_epoch();
        }
        w.remove_lost(lost_bytes);
        if persistent {
            // RFC 9002 §7.6.2, and the next stage starts like after an RTO.
            w.persistent_congestion();
            self.w_max = None;
            self.end_epoch();
        }
    }

    /// The retransmission timer expired (§4.8).
    pub(super) fn on_timeout(&mut self, w: &mut Window, now: Instant) {
        let cwnd = self.cwnd(w);
        // §4.8: Reno's loss window, ssthresh set with β_cubic as in §4.6.
        if w.on_timeout(now, self.beta_n()) {
            self.cwnd_prior = cwnd;
        }
        self.w_max = None;
        self.end_epoch();
    }

    /// Sets `c`, `beta` or `fast_convergence`; `None` for other names.
    /// Nothing changes when the value is rejected.
    pub(super) fn set_parameter(&mut self, name: &str, value: f64) -> Option<Result<(), CcError>> {
        let result = match name {
            "c" => {
                if value > 0.0 && value <= MAX_C {
                    self.c = value;
                    Ok(())
                } else {
                    Err(CcError::OutOfRange {
                        name: "c",
                        value,
                        expected: "a number greater than 0 and at most 10",
                    })
                }
            }
            "beta" => check_beta(value).map(|b| self.beta = b),
            "fast_convergence" => {
                if value == 0.0 || value == 1.0 {
                    self.fast_convergence = value == 1.0;
                    Ok(())
                } else {
                    Err(CcError::OutOfRange {
                        name: "fast_convergence",
                        value,
                        expected: "0 (off) or 1 (on)",
                    })
                }
            }
            _ => return None,
        };
        Some(result)
    }

    /// `c`, `beta`, `fast_convergence`.
    pub(super) fn parameters(&self) -> [(&'static str, f64); 3] {
        [
            ("c", self.c),
            ("beta", self.beta),
            (
                "fast_convergence",
                if self.fast_convergence { 1.0 } else { 0.0 },
            ),
        ]
    }
}

/// CUBIC congestion control (RFC 9438), see the module docs.
///
/// Parameters ([`CongestionController::set_parameter`]):
/// - `c`: the cubic scaling constant, in (0, 10], default 0.4;
/// - `beta`: β_cubic, in (0, 1), default 0.7;
/// - `fast_convergence`: 1 (on, default) or 0 (off);
/// - `min_window`: floor of every reduction in bytes, in `[SMSS, 2^30]`,
///   default 2·SMSS.
///
/// ```
/// use braid_recovery::cc::{CongestionController, Cubic};
/// use braid_recovery::Instant;
///
/// let mut cc = Cubic::new(1000, 100 * 1000);
/// for i in 1..=100 {
///     cc.on_sent(Instant::ZERO, 1000, i * 1000);
/// }
/// // A loss cuts the window to β_cubic = 0.7 of the flight size.
/// cc.on_congestion_event(Instant::from_micros(50_000), Instant::ZERO, 1000, false);
/// assert!(cc.window().abs_diff(70_000) <= 1);
/// cc.set_parameter("fast_convergence", 0.0).unwrap();
/// assert!(cc.set_parameter("c", -1.0).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct Cubic {
    window: Window,
    core: CubicCore,
}

impl Cubic {
    /// A controller for packets of `max_datagram_size` bytes starting with
    /// `initial_window` bytes (raised to the 2·SMSS minimum if smaller).
    pub fn new(max_datagram_size: u64, initial_window: u64) -> Self {
        Cubic {
            window: Window::new(max_datagram_size, initial_window),
            core: CubicCore::new(1.0),
        }
    }

    /// True from a window reduction until a packet sent after it is
    /// acknowledged (RFC 6582 §3.2, RFC 9002 §7.3.2).
    pub fn in_recovery(&self) -> bool {
        self.window.in_recovery()
    }
}

impl CongestionController for Cubic {
    fn name(&self) -> &'static str {
        "cubic"
    }

    fn on_sent(&mut self, _now: Instant, _bytes: u64, bytes_in_flight: u64) {
        self.window.on_sent(bytes_in_flight);
    }

    fn on_ack(&mut self, now: Instant, acked: &Acked) {
        self.core.on_ack(&mut self.window, now, acked);
    }

    fn on_ack_end(&mut self, _now: Instant, bytes_in_flight: u64) {
        self.window.set_flight(bytes_in_flight);
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
        // A new stage from the adopted window (RFC 9438 §4.8: K = 0,
        // W_max = cwnd), as after a timeout.
        self.window.adopt(from);
        self.core.reset();
    }

    fn window(&self) -> u64 {
        self.window.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.window.ssthresh
    }

    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError> {
        match name {
            "min_window" => self.window.set_min_window(value),
            _ => self.core.set_parameter(name, value).unwrap_or_else(|| {
                Err(CcError::UnknownParameter {
                    controller: "cubic",
                    name: name.to_string(),
                    known: "c, beta, fast_convergence, min_window".to_string(),
                })
            }),
        }
    }

    fn parameters(&self) -> Vec<(&'static str, f64)> {
        let mut p = self.core.parameters().to_vec();
        p.push(("min_window", self.window.min_window as f64));
        p
    }
}
#[cfg(test)]
mod tests {
    use super::super::newreno::test_support::*;
    use super::*;
    use proptest::prelude::*;

    const S: f64 = SMSS as f64;

    fn t(ms_: u64) -> Instant {
        Instant::ZERO + ms(ms_)
    }

    /// The window including its fractional part, bytes.
    fn cwnd_of(cc: &Cubic) -> f64 {
        cc.core.cwnd(&cc.window)
    }

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    /// A controller that just lost a packet at `t(10)` with `segments`
    /// segments in flight (and as its window).
    fn after_loss(segments: u64) -> Cubic {
        let mut cc = Cubic::new(SMSS, segments * SMSS);
        send(&mut cc, t(0), segments);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        cc
    }

    /// Acknowledges one SMSS packet per `rtt / (cwnd/SMSS)` from `from`
    /// until `until`, each sent one RTT before its acknowledgement, keeping
    /// the window full. Returns the time of the last acknowledgement.
    fn ack_clock(cc: &mut Cubic, from: Instant, until: Instant, rtt: Duration) -> Instant {
        let mut now = from;
        while now < until {
            cc.on_sent(now, SMSS, cc.window());
            cc.on_ack(now, &acked(now - rtt, SMSS, rtt, false));
            let per_rtt = (cc.window() / SMSS).max(1);
            now += rtt / u32::try_from(per_rtt).unwrap();
        }
        now
    }

    #[test]
    fn k_and_w_cubic_match_the_rfc_equations() {
        // W_max = 100, cwnd_epoch = β·W_max = 70: K = ∛(W_max(1−β)/C) = ∛75.
        let k = cubic_k(0.4, 100.0, 70.0);
        assert!(close(k, 4.217_163_326_508_746, 1e-12), "{k}");
        assert!(close(k, (100.0 * (1.0 - 0.7) / 0.4f64).cbrt(), 1e-12));
        // W_cubic(0) = cwnd_epoch, W_cubic(K) = W_max, hand values between.
        assert!(close(w_cubic(0.4, k, 100.0, 0.0), 70.0, 1e-9));
        assert!(close(
            w_cubic(0.4, k, 100.0, 2.0),
            95.640_335_686_638_78,
            1e-9
        ));
        assert!(close(w_cubic(0.4, k, 100.0, k), 100.0, 1e-12));
        assert!(close(
            w_cubic(0.4, k, 100.0, 6.0),
            102.266_703_256_464_42,
            1e-9
        ));
        // W_max = 20, cwnd_epoch = 14: K = ∛15.
        assert!(close(cubic_k(0.4, 20.0, 14.0), 2.466_212_074_330_47, 1e-12));
        // Window above W_max: negative K, still W_cubic(0) = cwnd_epoch.
        let k = cubic_k(0.4, 10.0, 12.0);
        assert!(k < 0.0 && close(w_cubic(0.4, k, 10.0, 0.0), 12.0, 1e-9));
        assert!(close(alpha_cubic(0.7), 0.529_411_764_705_882_4, 1e-15));
        assert!(close(alpha_cubic(0.5), 1.0, 1e-15));
    }

    #[test]
    fn slow_start_doubles_per_round_trip() {
        let mut cc = Cubic::new(SMSS, 10 * SMSS);
        let mut now = t(0);
        for expected in [20, 40, 80] {
            now = round(&mut cc, now, ms(50), false);
            assert_eq!(cc.window(), expected * SMSS);
        }
    }

    /// §4.6: ssthresh = cwnd = 0.7·FlightSize; W_max and cwnd_prior = the
    /// window before.
    #[test]
    fn loss_reduces_by_beta_cubic() {
        let cc = after_loss(100);
        assert!(cc.window().abs_diff(70 * SMSS) <= 1, "{}", cc.window());
        assert_eq!(cc.ssthresh(), cc.window());
        assert_eq!(cc.core.w_max, Some(100.0 * S));
        assert_eq!(cc.core.cwnd_prior, 100.0 * S);
        assert!(cc.in_recovery());
    }

    #[test]
    fn one_reduction_per_recovery_period() {
        let mut cc = after_loss(100);
        let w = cc.window();
        cc.on_congestion_event(t(11), t(0), 3 * SMSS, false);
        cc.on_congestion_event(t(30), t(10), SMSS, false);
        assert_eq!(cc.window(), w);
        // A packet sent after the reduction is lost: reduce again.
        cc.on_sent(t(20), SMSS, w);
        cc.on_congestion_event(t(80), t(20), SMSS, false);
        assert!(cc.window() < w);
    }

    /// §4.2, §4.4, §4.5: with a large BDP the window tracks W_cubic(t)
    /// through the concave region, the plateau at W_max and the convex
    /// region (the RFC's per-ACK rule makes cwnd lag the W_cubic(t+RTT)
    /// target by about one RTT).
    #[test]
    fn window_follows_w_cubic_in_concave_and_convex_regions() {
        let rtt = ms(100);
        let mut cc = after_loss(1000);
        let cwnd_epoch = cc.window() as f64 / S;
        let start = t(200);
        let k = cubic_k(0.4, 1000.0, cwnd_epoch);
        assert!(close(k, 750f64.cbrt(), 1e-3));
        let mut now = start;
        for secs in [1.0, 2.0, 5.0, 9.0, 10.0, 11.0, 12.0] {
            now = ack_clock(&mut cc, now, start + Duration::from_secs_f64(secs), rtt);
            let elapsed = (now - start).as_secs_f64();
            let expected = w_cubic(0.4, k, 1000.0, elapsed);
            let got = cc.window() as f64 / S;
            assert!(
                close(got, expected, 0.25),
                "t={elapsed}: cwnd {got} segments, W_cubic {expected}"
            );
            let epoch = cc.core.epoch.expect("epoch");
            assert!(
                epoch.w_est < got * S,
                "Reno-friendly region should not apply: W_est {} t={elapsed}",
                epoch.w_est / S
            );
        }
    }

    /// §4.3: at a small BDP and short RTT W_est outgrows W_cubic: the window
    /// grows by α_cubic = 0.53 segments per RTT until it reaches cwnd_prior,
    /// then by one segment per RTT, like Reno.
    #[test]
    fn reno_friendly_region_dominates_at_small_bdp() {
        let rtt = ms(1);
        let mut cc = after_loss(20);
        assert!(cc.window().abs_diff(14 * SMSS) <= 1);
        let start = t(20);
        let now = ack_clock(&mut cc, start, start + 5 * rtt, rtt);
        let got = cc.window() as f64 / S;
        let expected = 14.0 + 5.0 * alpha_cubic(0.7);
        assert!(
            close(got, expected, 0.1),
            "cwnd {got}, W_est by eq. 4 {expected}"
        );
        assert!(!cc.core.alpha_is_one);
        let k = cubic_k(0.4, 20.0, 14.0);
        assert!(w_cubic(0.4, k, 20.0, 0.005) < got - 2.0);

        // Past cwnd_prior (20 segments) α = 1: one segment per RTT.
        let now = ack_clock(&mut cc, now, start + 20 * rtt, rtt);
        assert!(cc.core.alpha_is_one);
        let before = cc.window() as f64 / S;
        let end = now + 100 * rtt;
        let now = ack_clock(&mut cc, now, end, rtt);
        let grown = cc.window() as f64 / S - before;
        assert!(
            close(grown, 100.0, 1.5),
            "grew {grown} segments in 100 RTTs"
        );
        let elapsed = (now - start).as_secs_f64();
        assert!(
            w_cubic(0.4, k, 20.0, elapsed) < 20.0,
            "W_cubic is still below W_max"
        );
    }

    /// §4.2 eq. 3: the target is at most 1.5·cwnd, so one segment acked
    /// grows the window by at most half a segment.
    #[test]
    fn target_is_clamped_to_one_and_a_half_cwnd() {
        let mut cc = after_loss(100);
        let rtt = ms(50);
        cc.on_ack(t(100), &acked(t(50), SMSS, rtt, false));
        let before = cwnd_of(&cc);
        // 100 s later W_cubic(t + RTT) ≈ 0.4·96³ segments ≫ 1.5·cwnd.
        cc.on_ack(t(100_100), &acked(t(100_050), SMSS, rtt, false));
        assert!(
            close(cwnd_of(&cc) - before, 0.5 * S, 1e-6),
            "grew {}",
            cwnd_of(&cc) - before
        );
    }

    /// §4.7: a loss before regaining W_max lowers W_max to cwnd·(1+β)/2.
    #[test]
    fn fast_convergence_lowers_w_max() {
        for enabled in [true, false] {
            let mut cc = after_loss(100);
            cc.set_parameter("fast_convergence", if enabled { 1.0 } else { 0.0 })
                .unwrap();
            let now = ack_clock(&mut cc, t(100), t(1100), ms(50));
            let cwnd = cwnd_of(&cc);
            assert!(cwnd < 100.0 * S && cwnd > 75.0 * S, "{cwnd}");
            let flight = cc.window();
            cc.on_sent(now, SMSS, flight);
            cc.on_congestion_event(now, now - ms(10), SMSS, false);
            let expected = if enabled { cwnd * 1.7 / 2.0 } else { cwnd };
            assert!(
                close(cc.core.w_max.unwrap(), expected, 1e-6),
                "{:?} vs {expected}",
                cc.core.w_max
            );
            assert!(
                cc.window().abs_diff(f64_to_bytes(flight as f64 * 0.7)) <= 1,
                "{}",
                cc.window()
            );
        }
        // Above the previous W_max, W_max is simply the window.
        let mut cc = after_loss(100);
        cc.core.w_max = Some(50.0 * S);
        cc.on_ack(t(100), &acked(t(50), SMSS, ms(50), false));
        let cwnd = cwnd_of(&cc);
        cc.on_congestion_event(t(200), t(150), SMSS, false);
        assert!(close(cc.core.w_max.unwrap(), cwnd, 1e-6));
    }

    /// §5.8: application-limited time does not advance t, and such ACKs
    /// grow neither cwnd nor W_est.
    #[test]
    fn app_limited_time_does_not_advance_the_epoch() {
        let rtt = ms(50);
        let mut limited = after_loss(100);
        let mut busy = after_loss(100);
        for cc in [&mut limited, &mut busy] {
            cc.on_ack(t(100), &acked(t(50), SMSS, rtt, false));
        }
        let (cwnd, epoch) = (cwnd_of(&limited), limited.core.epoch.unwrap());
        for s in 1..=10 {
            limited.on_ack(t(100 + s * 1000), &acked(t(50 + s * 1000), SMSS, rtt, true));
        }
        assert_eq!(cwnd_of(&limited), cwnd);
        assert_eq!(limited.core.epoch.unwrap().w_est, epoch.w_est);
        limited.on_ack(t(10_101), &acked(t(10_051), SMSS, rtt, false));
        busy.on_ack(t(101), &acked(t(51), SMSS, rtt, false));
        assert_eq!(cwnd_of(&limited), cwnd_of(&busy));
        assert_eq!(
            limited.core.epoch.unwrap().w_est,
            busy.core.epoch.unwrap().w_est
        );
    }

    /// §4.8: ssthresh = 0.7·FlightSize, cwnd = 1 SMSS; the following
    /// congestion-avoidance stage uses K = 0 and W_max = cwnd_epoch.
    #[test]
    fn timeout_resets_the_epoch_with_k_zero() {
        let mut cc = after_loss(100);
        let now = ack_clock(&mut cc, t(100), t(600), ms(50));
        cc.on_sent(now, SMSS, 40 * SMSS);
        cc.on_retransmission_timeout(now + ms(1000));
        assert_eq!(cc.window(), SMSS);
        assert_eq!(cc.ssthresh(), 28 * SMSS);
        assert_eq!(cc.core.w_max, None);
        assert!(cc.core.epoch.is_none());

        // Slow start back to ssthresh, then CA from W_max = cwnd_epoch.
        let start = now + ms(1001);
        ack_clock(&mut cc, start, start + ms(1000), ms(50));
        let epoch = cc.core.epoch.expect("congestion avoidance reached");
        // W_max = cwnd_epoch, hence K = 0 by eq. 2.
        assert_eq!(cc.core.w_max, Some(epoch.cwnd_epoch));
        assert!(close(epoch.cwnd_epoch, 28.0 * S, S));
        assert!(cc.window() as f64 > epoch.cwnd_epoch);
    }

    #[test]
    fn persistent_congestion_collapses_to_min_window() {
        let mut cc = after_loss(100);
        cc.on_congestion_event(t(2000), t(1000), 50 * SMSS, true);
        assert_eq!(cc.window(), 2 * SMSS);
        assert_eq!(cc.core.w_max, None);
        assert!(!cc.in_recovery());
    }

    #[test]
    fn parameters_change_live_and_reject_bad_values() {
        let mut cc = after_loss(100);
        let w = cc.window();
        cc.set_parameter("c", 0.8).unwrap();
        cc.set_parameter("beta", 0.5).unwrap();
        assert_eq!(cc.window(), w);
        assert_eq!(
            cc.parameters(),
            vec![
                ("c", 0.8),
                ("beta", 0.5),
                ("fast_convergence", 1.0),
                ("min_window", 2.0 * S)
            ]
        );
        for (name, bad) in [
            ("c", 0.0),
            ("c", 11.0),
            ("c", f64::NAN),
            ("beta", 1.0),
            ("fast_convergence", 0.5),
        ] {
            let err = cc.set_parameter(name, bad).unwrap_err();
            assert!(matches!(err, CcError::OutOfRange { .. }), "{err}");
        }
        let err = cc.set_parameter("C", 0.4).unwrap_err();
        assert_eq!(
            err.to_string(),
            "congestion controller `cubic` has no parameter `C` (known: c, beta, fast_convergence, min_window)"
        );
        // β = 0.5 now applies to the next reduction.
        let segments = cc.window() / SMSS;
        send(&mut cc, t(100), segments);
        cc.on_congestion_event(t(200), t(100), SMSS, false);
        assert!(
            cc.window().abs_diff(w / 2) <= 1,
            "{} vs {}",
            cc.window(),
            w / 2
        );
    }

    /// N virtual flows: a `Cubic` whose core models `n` flows.
    fn n_flows(n: f64, segments: u64) -> Cubic {
        let mut cc = Cubic::new(SMSS, segments * SMSS);
        cc.core.set_n(n);
        cc
    }

    /// The aggregate's constants (module docs): N = 1 is RFC 9438's CUBIC,
    /// N = 2 has C_N = 2C, β_N = (1 + β)/2, α_N = 4·α_cubic(β_N), and all
    /// are continuous in N; the Reno-friendly AIMD(α_N, β_N) has N Reno
    /// flows' mean window.
    #[test]
    fn aggregate_constants_follow_the_derivation() {
        let one = Aggregate::new(0.4, 0.7, 1.0);
        assert_eq!(
            one,
            Aggregate {
                c: 0.4,
                beta: 0.7,
                alpha: alpha_cubic(0.7),
                alpha_reno: 1.0
            }
        );
        let two = Aggregate::new(0.4, 0.7, 2.0);
        assert!(close(two.c, 0.8, 1e-15) && close(two.beta, 0.85, 1e-15));
        assert!(close(two.alpha, 4.0 * 3.0 * 0.15 / 1.85, 1e-12));
        assert_eq!(two.alpha_reno, 2.0);
        let half = Aggregate::new(0.4, 0.7, 0.5);
        assert!(close(half.c, 0.4 / 16.0, 1e-15) && half.beta == 0.7);
        assert!(close(half.alpha, 0.25 * alpha_cubic(0.7), 1e-15));
        assert_eq!(half.alpha_reno, 0.25);
        for (lo, hi) in [(1.0 - 1e-9, 1.0), (1.0, 1.0 + 1e-9)] {
            let (a, b) = (Aggregate::new(0.4, 0.7, lo), Aggregate::new(0.4, 0.7, hi));
            assert!(close(a.c, b.c, 1e-8) && close(a.beta, b.beta, 1e-8));
            assert!(close(a.alpha, b.alpha, 1e-8) && close(a.alpha_reno, b.alpha_reno, 1e-8));
        }
        // Mean window of AIMD(α, β) at loss rate p: √(α(1+β)/(2(1−β)p)).
        let mean =
            |alpha: f64, beta: f64| (alpha * (1.0 + beta) / (2.0 * (1.0 - beta) * 1e-3)).sqrt();
        for n in [0.3, 1.0, 1.5, 2.0, 3.0, 4.0, 10.0] {
            let a = Aggregate::new(0.4, 0.7, n);
            let ratio = mean(a.alpha, a.beta) / mean(1.0, 0.5);
            assert!(close(ratio, n, 1e-9), "N = {n}: {ratio}");
        }
    }

    /// N = 2: a loss keeps β_N = 0.85 of the flight (one of the two flows
    /// keeps 0.7 of its half), and fast convergence uses β_N too.
    #[test]
    fn two_flows_reduce_by_beta_n() {
        let mut cc = n_flows(2.0, 100);
        send(&mut cc, t(0), 100);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        assert!(cc.window().abs_diff(85 * SMSS) <= 1, "{}", cc.window());
        assert_eq!(cc.ssthresh(), cc.window());
        assert_eq!(cc.core.w_max, Some(100.0 * S));
        // A second loss below W_max: W_max = cwnd·(1 + β_N)/2.
        let w = cc.window();
        send(&mut cc, t(20), w / SMSS);
        cc.on_congestion_event(t(80), t(20), SMSS, false);
        assert!(close(cc.core.w_max.unwrap(), w as f64 * 1.85 / 2.0, 1e-6));
        assert!(cc.window().abs_diff(f64_to_bytes(w as f64 * 0.85)) <= 1);
        // The timeout's ssthresh as well.
        let mut cc = n_flows(4.0, 100);
        send(&mut cc, t(0), 100);
        cc.on_retransmission_timeout(t(500));
        assert!(cc.ssthresh().abs_diff(f64_to_bytes(100.0 * S * 3.7 / 4.0)) <= 1);
    }

    /// N = 2 in the cubic region: the window follows
    /// `W_N(t) = 2C(t−K)³ + W_max` with `K = ∛(W_max(1−β_N)/(2C))`, i.e.
    /// it gains twice what one flow gains from the same K.
    #[test]
    fn two_flows_follow_the_scaled_cubic_curve() {
        let rtt = ms(100);
        let mut cc = n_flows(2.0, 1000);
        send(&mut cc, t(0), 1000);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        let cwnd_epoch = cc.window() as f64 / S;
        assert!(close(cwnd_epoch, 850.0, 1e-3));
        let k = cubic_k(0.8, 1000.0, cwnd_epoch);
        assert!(close(k, (1000.0 * 0.15 / 0.8f64).cbrt(), 1e-3));
        let start = t(200);
        let mut now = start;
        for secs in [1.0, 3.0, 5.0, 6.0, 7.0, 8.0] {
            now = ack_clock(&mut cc, now, start + Duration::from_secs_f64(secs), rtt);
            let elapsed = (now - start).as_secs_f64();
            let expected = 2.0 * 0.4 * (elapsed - k).powi(3) + 1000.0;
            let got = cc.window() as f64 / S;
            assert!(
                close(got, expected, 0.25),
                "t={elapsed}: cwnd {got} segments, W_N {expected}"
            );
        }
    }

    /// N = 2 in the Reno-friendly region (small BDP): α_N per RTT until
    /// cwnd_prior, then two segments per RTT, twice one flow's pace.
    #[test]
    fn two_flows_are_twice_as_reno_friendly() {
        let rtt = ms(1);
        let mut cc = n_flows(2.0, 20);
        send(&mut cc, t(0), 20);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        assert!(cc.window().abs_diff(17 * SMSS) <= 1);
        let start = t(20);
        let now = ack_clock(&mut cc, start, start + 2 * rtt, rtt);
        let got = cc.window() as f64 / S;
        let alpha = Aggregate::new(0.4, 0.7, 2.0).alpha;
        assert!(close(got, 17.0 + 2.0 * alpha, 0.1), "{got}");
        let now = ack_clock(&mut cc, now, start + 10 * rtt, rtt);
        assert!(cc.core.alpha_is_one);
        let before = cc.window() as f64 / S;
        ack_clock(&mut cc, now, now + 100 * rtt, rtt);
        let grown = cc.window() as f64 / S - before;
        assert!(
            close(grown, 200.0, 3.0),
            "grew {grown} segments in 100 RTTs"
        );
    }

    /// A change of N keeps the window and W_max; above the plateau the new
    /// stage starts there (K = 0), below it the new curve still ends at
    /// W_max.
    #[test]
    fn changing_n_keeps_the_window_and_restarts_the_stage() {
        let rtt = ms(100);
        let mut cc = after_loss(1000);
        let now = ack_clock(&mut cc, t(200), t(2200), rtt);
        let w = cc.window();
        cc.core.set_n(3.0);
        assert_eq!(cc.window(), w);
        assert!(cc.core.epoch.is_none());
        ack_clock(&mut cc, now, now + ms(100), rtt);
        assert_eq!(cc.core.w_max, Some(1000.0 * S));
        let epoch = cc.core.epoch.unwrap();
        assert!(close(epoch.cwnd_epoch, w as f64, S));

        // Far above W_max: no jump along the steeper curve.
        let mut cc = after_loss(100);
        let now = ack_clock(&mut cc, t(200), t(20_200), rtt);
        let w = cc.window() as f64;
        assert!(w > 200.0 * S, "{w}");
        cc.core.set_n(4.0);
        let now = ack_clock(&mut cc, now, now + rtt, rtt);
        assert!(close(cc.core.w_max.unwrap(), w, 2.0 * S));
        // Six round trips of the Reno-friendly region's four segments.
        ack_clock(&mut cc, now, now + 5 * rtt, rtt);
        assert!(
            (cc.window() as f64) < w + 30.0 * S,
            "{} from {w}",
            cc.window()
        );
    }

    proptest! {
        #[test]
        fn random_event_sequences_keep_the_window_sane(
            smss in 0u64..2000,
            iw in 0u64..100_000,
            ops in prop::collection::vec(op(), 0..200),
        ) {
            let mut cc = Cubic::new(smss, iw);
            check_invariants(&mut cc, smss, &ops);
        }
    }
}
