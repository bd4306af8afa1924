//! CUBIC congestion control (RFC 9438).
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
//! Not implemented (both optional): HyStart++ (RFC 9406) and undoing
//! spurious congestion events (§4.9).
//!
//! All state is in bytes; the equations are evaluated in segments of SMSS
//! bytes, which is the unit C is defined in.

use std::time::Duration;

use braid_core::Instant;

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
/// use braid_proto::cc::{CongestionController, Cubic};
/// use braid_proto::Instant;
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
    c: f64,
    beta: f64,
    fast_convergence: bool,
    /// W_max in bytes (§4.2, §4.7); `None` before the first reduction and
    /// after a timeout, until the next stage starts (§4.8).
    w_max: Option<f64>,
    /// cwnd when ssthresh was last set (§4.6), bytes.
    cwnd_prior: f64,
    /// W_est has reached `cwnd_prior`, so α = 1 (§4.3).
    alpha_is_one: bool,
    epoch: Option<Epoch>,
    /// Growth below one byte, kept so that small increments add up.
    cwnd_frac: f64,
    last_ack: Option<Instant>,
}

impl Cubic {
    /// A controller for packets of `max_datagram_size` bytes starting with
    /// `initial_window` bytes (raised to the 2·SMSS minimum if smaller).
    pub fn new(max_datagram_size: u64, initial_window: u64) -> Self {
        Cubic {
            window: Window::new(max_datagram_size, initial_window),
            c: DEFAULT_C,
            beta: DEFAULT_BETA,
            fast_convergence: true,
            w_max: None,
            cwnd_prior: 0.0,
            alpha_is_one: false,
            epoch: None,
            cwnd_frac: 0.0,
            last_ack: None,
        }
    }

    /// True from a window reduction until a packet sent after it is
    /// acknowledged (RFC 6582 §3.2, RFC 9002 §7.3.2).
    pub fn in_recovery(&self) -> bool {
        self.window.in_recovery()
    }

    /// The window including its fractional part, bytes.
    fn cwnd(&self) -> f64 {
        self.window.cwnd as f64 + self.cwnd_frac
    }

    fn set_cwnd(&mut self, w: f64) {
        if !w.is_finite() {
            return;
        }
        let whole = f64_to_bytes(w);
        // Never shrink on an ACK; a window past u64 stops at u64::MAX.
        if whole > self.window.cwnd {
            self.window.cwnd = whole;
        }
        self.cwnd_frac = if whole == u64::MAX {
            0.0
        } else {
            (w - whole as f64).clamp(0.0, 0.999_999)
        };
    }

    /// Forget the current stage; the next growing ACK starts a new one.
    fn end_epoch(&mut self) {
        self.epoch = None;
        self.cwnd_frac = 0.0;
        self.alpha_is_one = false;
    }

    /// §5.8: time in which the sender is application-limited must not count
    /// in `t`, or the window would jump once the application catches up.
    fn skip_app_limited_time(&mut self, now: Instant) {
        if let (Some(epoch), Some(last)) = (self.epoch.as_mut(), self.last_ack) {
            epoch.start = (epoch.start + now.saturating_duration_since(last)).min(now);
        }
    }

    /// Congestion avoidance for `bytes` newly acknowledged (§4.2–§4.5).
    fn congestion_avoidance(&mut self, now: Instant, bytes: u64, rtt: Duration) {
        let smss = self.window.smss as f64;
        let w = self.cwnd();
        let mut epoch = match self.epoch {
            Some(epoch) => epoch,
            None => Epoch {
                start: now,
                cwnd_epoch: w,
                w_est: w,
            },
        };
        // §4.8: after a timeout W_max is the window at the start of the stage.
        let w_max = *self.w_max.get_or_insert(w);
        let acked = bytes as f64;

        // §4.3: the Reno-friendly estimate, α·segments_acked/cwnd segments.
        let alpha = if self.alpha_is_one {
            1.0
        } else {
            alpha_cubic(self.beta)
        };
        epoch.w_est += alpha * smss * acked / w;
        if epoch.w_est >= self.cwnd_prior {
            self.alpha_is_one = true;
        }

        let t = now.saturating_duration_since(epoch.start).as_secs_f64();
        let k = cubic_k(self.c, w_max / smss, epoch.cwnd_epoch / smss);
        let cubic_now = w_cubic(self.c, k, w_max / smss, t) * smss;
        let new_w = if cubic_now < epoch.w_est {
            // §4.3 Reno-friendly region (never shrinking on an ACK).
            w.max(epoch.w_est)
        } else {
            // §4.2 eq. 3 target; §4.4 concave / §4.5 convex: the same rule,
            // (target − cwnd)/cwnd per acknowledged segment. max/min rather
            // than clamp: no panic path even for a NaN.
            let ahead = w_cubic(self.c, k, w_max / smss, t + rtt.as_secs_f64()) * smss;
            let target = ahead.max(w).min(1.5 * w);
            w + (target - w) * acked / w
        };
        self.epoch = Some(epoch);
        self.set_cwnd(new_w);
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
        let growth = self.window.on_ack(acked);
        if acked.app_limited {
            self.skip_app_limited_time(now);
        }
        self.last_ack = Some(now);
        let rest = self.window.slow_start(growth);
        if rest > 0 {
            self.congestion_avoidance(now, rest, acked.rtt.smoothed);
        }
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
        if let Some(flight_size) = self.window.begin_recovery(now, lost_sent_time) {
            let cwnd = self.cwnd();
            // §4.7 fast convergence: release bandwidth to newer flows when
            // the window did not get back to the previous W_max.
            self.w_max = Some(match self.w_max {
                Some(previous) if self.fast_convergence && cwnd < previous => {
                    cwnd * (1.0 + self.beta) / 2.0
                }
                _ => cwnd,
            });
            // §4.6 multiplicative decrease.
            self.cwnd_prior = cwnd;
            // An application-limited flight keeps the restart window
            // (RFC 7661 §4.4, RFC 5681 §4.1; see `Window::reduce_on_loss`).
            self.window.reduce_on_loss(flight_size as f64 * self.beta);
            self.end_epoch();
        }
        self.window.remove_lost(lost_bytes);
        if persistent {
            // RFC 9002 §7.6.2, and the next stage starts like after an RTO.
            self.window.persistent_congestion();
            self.w_max = None;
            self.end_epoch();
        }
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        let cwnd = self.cwnd();
        // §4.8: Reno's loss window, ssthresh set with β_cubic as in §4.6.
        if self.window.on_timeout(now, self.beta) {
            self.cwnd_prior = cwnd;
        }
        self.w_max = None;
        self.end_epoch();
    }

    fn window(&self) -> u64 {
        self.window.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.window.ssthresh
    }

    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError> {
        match name {
            "c" => {
                if !(value > 0.0 && value <= MAX_C) {
                    return Err(CcError::OutOfRange {
                        name: "c",
                        value,
                        expected: "a number greater than 0 and at most 10",
                    });
                }
                self.c = value;
            }
            "beta" => self.beta = check_beta(value)?,
            "fast_convergence" => {
                self.fast_convergence = if value == 0.0 {
                    false
                } else if value == 1.0 {
                    true
                } else {
                    return Err(CcError::OutOfRange {
                        name: "fast_convergence",
                        value,
                        expected: "0 (off) or 1 (on)",
                    });
                }
            }
            "min_window" => self.window.set_min_window(value)?,
            _ => {
                return Err(CcError::UnknownParameter {
                    controller: "cubic",
                    name: name.to_string(),
                    known: "c, beta, fast_convergence, min_window".to_string(),
                })
            }
        }
        Ok(())
    }

    fn parameters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("c", self.c),
            ("beta", self.beta),
            (
                "fast_convergence",
                if self.fast_convergence { 1.0 } else { 0.0 },
            ),
            ("min_window", self.window.min_window as f64),
        ]
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
        assert_eq!(cc.w_max, Some(100.0 * S));
        assert_eq!(cc.cwnd_prior, 100.0 * S);
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
            let epoch = cc.epoch.expect("epoch");
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
        assert!(!cc.alpha_is_one);
        let k = cubic_k(0.4, 20.0, 14.0);
        assert!(w_cubic(0.4, k, 20.0, 0.005) < got - 2.0);

        // Past cwnd_prior (20 segments) α = 1: one segment per RTT.
        let now = ack_clock(&mut cc, now, start + 20 * rtt, rtt);
        assert!(cc.alpha_is_one);
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
        let before = cc.cwnd();
        // 100 s later W_cubic(t + RTT) ≈ 0.4·96³ segments ≫ 1.5·cwnd.
        cc.on_ack(t(100_100), &acked(t(100_050), SMSS, rtt, false));
        assert!(
            close(cc.cwnd() - before, 0.5 * S, 1e-6),
            "grew {}",
            cc.cwnd() - before
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
            let cwnd = cc.cwnd();
            assert!(cwnd < 100.0 * S && cwnd > 75.0 * S, "{cwnd}");
            let flight = cc.window();
            cc.on_sent(now, SMSS, flight);
            cc.on_congestion_event(now, now - ms(10), SMSS, false);
            let expected = if enabled { cwnd * 1.7 / 2.0 } else { cwnd };
            assert!(
                close(cc.w_max.unwrap(), expected, 1e-6),
                "{:?} vs {expected}",
                cc.w_max
            );
            assert!(
                cc.window().abs_diff(f64_to_bytes(flight as f64 * 0.7)) <= 1,
                "{}",
                cc.window()
            );
        }
        // Above the previous W_max, W_max is simply the window.
        let mut cc = after_loss(100);
        cc.w_max = Some(50.0 * S);
        cc.on_ack(t(100), &acked(t(50), SMSS, ms(50), false));
        let cwnd = cc.cwnd();
        cc.on_congestion_event(t(200), t(150), SMSS, false);
        assert!(close(cc.w_max.unwrap(), cwnd, 1e-6));
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
        let (cwnd, epoch) = (limited.cwnd(), limited.epoch.unwrap());
        for s in 1..=10 {
            limited.on_ack(t(100 + s * 1000), &acked(t(50 + s * 1000), SMSS, rtt, true));
        }
        assert_eq!(limited.cwnd(), cwnd);
        assert_eq!(limited.epoch.unwrap().w_est, epoch.w_est);
        limited.on_ack(t(10_101), &acked(t(10_051), SMSS, rtt, false));
        busy.on_ack(t(101), &acked(t(51), SMSS, rtt, false));
        assert_eq!(limited.cwnd(), busy.cwnd());
        assert_eq!(limited.epoch.unwrap().w_est, busy.epoch.unwrap().w_est);
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
        assert_eq!(cc.w_max, None);
        assert!(cc.epoch.is_none());

        // Slow start back to ssthresh, then CA from W_max = cwnd_epoch.
        let start = now + ms(1001);
        ack_clock(&mut cc, start, start + ms(1000), ms(50));
        let epoch = cc.epoch.expect("congestion avoidance reached");
        // W_max = cwnd_epoch, hence K = 0 by eq. 2.
        assert_eq!(cc.w_max, Some(epoch.cwnd_epoch));
        assert!(close(epoch.cwnd_epoch, 28.0 * S, S));
        assert!(cc.window() as f64 > epoch.cwnd_epoch);
    }

    #[test]
    fn persistent_congestion_collapses_to_min_window() {
        let mut cc = after_loss(100);
        cc.on_congestion_event(t(2000), t(1000), 50 * SMSS, true);
        assert_eq!(cc.window(), 2 * SMSS);
        assert_eq!(cc.w_max, None);
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
