//! MulTCP: one connection that takes the share of N TCP flows.
//!
//! MulTCP (Crowcroft and Oechslin, 1998) changes the parameters of TCP's
//! AIMD so that one flow behaves like an aggregate of N virtual flows; N is
//! any positive real here. The window bookkeeping (recovery period,
//! FlightSize, timeout loss window) is NewReno's
//! ([`super::newreno::Window`], RFC 5681 / RFC 6582); this module decides
//! how much to grow and to shrink:
//!
//! - **Congestion avoidance**: N TCP flows each grow by one segment per
//!   round trip, so the aggregate grows by `a = N` segments per round trip:
//!   `cwnd += a·SMSS·bytes_acked/cwnd`.
//! - **Loss** (MulTCP2, Nabeshima et al.): original MulTCP shrinks as one of
//!   the N flows would, `cwnd ×= 1 − 1/(2N)`, but its steady-state window
//!   is then up to √(4/3) ≈ 1.15 times that of N TCP flows. MulTCP2 picks
//!   the decrease `b` that gives exactly N times TCP's steady-state window:
//!   for AIMD(a, b) the mean window is `√(a(2−b)/(2bp))` segments at loss
//!   rate p; with `a = N` and TCP's `√(3/(2p))` times N this gives
//!   `b = 2/(3N + 1)` (b = ½ for N = 1). `multcp2 = 0` selects the original
//!   decrease.
//! - **N < 1**: `2/(3N+1)` would exceed ½ (and the original `1/(2N)` reach
//!   1 at N = ½), so below one flow the decrease stays TCP's ½ and the
//!   increase is `a = N²`, which by the same formula gives N times TCP's
//!   window (continuous with N ≥ 1 at N = 1).
//! - **Slow start** (smooth slow start): N flows would start with N initial
//!   windows, which sent at once is a burst. Instead the window starts like
//!   one flow and grows by up to *two* bytes per acknowledged byte (×3 per
//!   round trip) while it is behind the N virtual flows' aggregate (which
//!   doubles per round trip from N initial windows; within a round it is
//!   interpolated by the bytes acknowledged), then by one byte per byte
//!   (doubling) with them. So at most three packets leave per
//!   acknowledgement, and pacing spreads them further. Slow start ends at
//!   ssthresh or at the first loss, as in RFC 5681.
//! - **Timeout**: RFC 5681 §3.1, ssthresh set with the MulTCP decrease.
//!
//! Application-limited acknowledgements never grow the window, and a loss
//! in an application-limited flight keeps the restart window (RFC 7661
//! §4.4, [`super::newreno::Window`]).
//!
//! # Reno or CUBIC flows
//!
//! The above is MulTCP proper: N virtual *Reno* flows (`multcp_base = 0`,
//! the default of [`MulTcp`]). With `multcp_base = 1` (the default of
//! [`super::Priority`], whose p > 0 must match the kernel's default TCP)
//! the virtual flows are CUBIC flows instead: congestion avoidance, loss
//! response and timeout are RFC 9438's scaled to N flows
//! ([`super::cubic`] derives `C_N = N·C`, `β_N = (N − 1 + β)/N` and the
//! Reno-friendly region of N Reno flows), and the smooth slow start above
//! is kept. With a deep drop-tail queue the round trip is dominated by the
//! queue, and CUBIC's clock-driven growth out-runs Reno's per-round-trip
//! growth: N Reno flows then get less than N CUBIC flows' share.

use braid_core::Instant;

use super::cubic::CubicCore;
use super::newreno::{f64_to_bytes, Window};
use super::virtual_flows::{FlowKind, VirtualFlows};
use super::{Acked, CcError, CongestionController};

/// Largest accepted N: DTL reports that MulTCP stops scaling beyond about
/// 10 virtual flows; 100 leaves room to experiment.
pub(super) const MAX_N: f64 = 100.0;

/// Additive increase of N Reno flows, segments per round trip: N, or N²
/// below one flow (see the module docs). Also the Reno-friendly pace of N
/// virtual CUBIC flows ([`super::cubic`]).
pub(super) fn aimd_increase(n: f64) -> f64 {
    if n >= 1.0 {
        n
    } else {
        n * n
    }
}

/// What the N virtual flows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Base {
    /// Reno flows: MulTCP / MulTCP2 proper (this module).
    Reno,
    /// CUBIC flows (RFC 9438 scaled to N, [`super::cubic`]): what N kernel
    /// TCP flows are by default.
    Cubic,
}

impl Base {
    fn flow_kind(self) -> FlowKind {
        match self {
            Base::Reno => FlowKind::Reno,
            Base::Cubic => FlowKind::Cubic,
        }
    }

    /// The `multcp_base` parameter's value.
    fn value(self) -> f64 {
        match self {
            Base::Reno => 0.0,
            Base::Cubic => 1.0,
        }
    }
}

/// MulTCP's state and rules, applied to a [`Window`] it does not own so
/// that [`super::Priority`] can hand the same window to LEDBAT and back.
#[derive(Debug, Clone)]
pub(super) struct MulTcpCore {
    n: f64,
    multcp2: bool,
    base: Base,
    /// The N virtual CUBIC flows' state, used when `base` is CUBIC.
    cubic: CubicCore,
    /// Smooth slow start bookkeeping, during the initial slow start only.
    smooth: Option<SmoothStart>,
    /// Growth below one byte, kept so that small increments add up.
    frac: f64,
    /// The N virtual flows ([`super::virtual_flows`]), used after slow
    /// start unless `virtual_flows = 0` selects the aggregate AIMD above.
    flows: VirtualFlows,
    virtual_flows: bool,
}

impl MulTcpCore {
    /// The virtual flows drive congestion avoidance and losses. With N = 1
    /// both models are one Reno or CUBIC flow, and the aggregate code is
    /// exactly [`super::Cubic`]'s, so it stays in charge.
    fn uses_virtual_flows(&self) -> bool {
        self.virtual_flows && self.n != 1.0
    }

    /// `n` virtual flows of kind `base` (callers validate `n`; Reno flows
    /// use the MulTCP2 decrease), for a window that starts at
    /// `initial_window` bytes.
    pub(super) fn new(n: f64, initial_window: u64, base: Base) -> Self {
        MulTcpCore {
            n,
            multcp2: true,
            base,
            cubic: CubicCore::new(n),
            smooth: Some(SmoothStart {
                flow_at_round_start: initial_window as f64,
                round_cwnd: initial_window as f64,
                round_acked: 0.0,
            }),
            frac: 0.0,
            flows: VirtualFlows::new(n, base.flow_kind()),
            virtual_flows: true,
        }
    }

    pub(super) fn n(&self) -> f64 {
        self.n
    }

    /// Callers validate with [`check_n`]. The window is kept; the next
    /// increase and decrease use the new N.
    pub(super) fn set_n(&mut self, n: f64) {
        self.n = n;
        self.cubic.set_n(n);
        self.flows.set_n(n);
    }

    /// Additive increase of the Reno base, segments per round trip.
    pub(super) fn increase(&self) -> f64 {
        aimd_increase(self.n)
    }

    /// Multiplicative decrease of the Reno base: the fraction of the window
    /// given up on loss.
    pub(super) fn decrease(&self) -> f64 {
        if self.n < 1.0 {
            0.5
        } else if self.multcp2 {
            2.0 / (3.0 * self.n + 1.0)
        } else {
            1.0 / (2.0 * self.n)
        }
    }

    /// Takes over `w` from another controller (DTL's run-time switch). The
    /// window is kept. `from_slow_start`: the previous controller was still
    /// in its initial slow start, which then simply continues; otherwise,
    /// if the window is below ssthresh (after a timeout, or a LEDBAT++
    /// slowdown whose window ssthresh remembers) slow start restores it, and
    /// if not, congestion avoidance starts from the current window (for
    /// CUBIC flows a new stage with `K = 0`, RFC 9438 §4.8).
    pub(super) fn enter(&mut self, w: &mut Window, from_slow_start: bool, restoring: bool) {
        self.frac = 0.0;
        self.smooth = None;
        self.cubic.reset();
        if from_slow_start {
            w.ssthresh = u64::MAX;
        } else if !restoring || w.ssthresh == u64::MAX {
            w.ssthresh = w.cwnd.max(w.min_window);
        }
    }

    fn cwnd(&self, w: &Window) -> f64 {
        w.cwnd as f64 + self.frac
    }

    fn set_cwnd(&mut self, w: &mut Window, x: f64) {
        if !x.is_finite() {
            return;
        }
        let whole = f64_to_bytes(x);
        // Growth only: never shrink on an acknowledgement.
        if whole >= w.cwnd {
            w.cwnd = whole;
            self.frac = if whole == u64::MAX {
                0.0
            } else {
                (x - whole as f64).clamp(0.0, 0.999_999)
            };
        }
    }

    pub(super) fn on_ack(&mut self, w: &mut Window, now: Instant, acked: &Acked) {
        let grow = w.on_ack(acked);
        // CUBIC's clock skips application-limited time (RFC 9438 §5.8).
        self.cubic.observe(now, acked);
        if grow == 0 {
            if self.uses_virtual_flows() && w.cwnd >= w.ssthresh {
                self.flows.on_ack(w, now, acked, 0);
            }
            return;
        }
        let mut rest = grow as f64;
        if w.cwnd < w.ssthresh {
            // Smooth slow start: one extra byte per byte acknowledged while
            // behind the virtual flows' aggregate. The rounds are counted
            // whatever N is, so that a raise of N mid-way finds them.
            let cwnd = self.cwnd(w);
            let extra = match self.smooth.as_mut() {
                Some(s) => s.extra(self.n, cwnd, grow as f64),
                None => 0.0,
            };
            if self.n > 1.0 && extra > 0.0 {
                let room = w.ssthresh as f64 - cwnd;
                let step = (grow as f64 + extra).min(room.max(0.0));
                self.set_cwnd(w, cwnd + step);
                // Bytes beyond ssthresh count toward congestion avoidance.
                rest = (grow as f64 - step).max(0.0);
            } else {
                // One flow's (or no extra) growth: RFC 5681 slow start, the
                // same integer steps as NewReno and CUBIC.
                rest = w.slow_start(grow) as f64;
            }
            if w.cwnd >= w.ssthresh {
                self.smooth = None;
            }
        }
        if rest > 0.0 && w.cwnd >= w.ssthresh && self.uses_virtual_flows() {
            self.flows.on_ack(w, now, acked, f64_to_bytes(rest));
        } else if rest > 0.0 && w.cwnd >= w.ssthresh {
            match self.base {
                Base::Reno => {
                    let cwnd = self.cwnd(w).max(1.0);
                    let smss = w.smss as f64;
                    self.set_cwnd(w, cwnd + self.increase() * smss * rest / cwnd);
                }
                Base::Cubic => {
                    let rest = f64_to_bytes(rest);
                    self.cubic
                        .congestion_avoidance(w, now, rest, acked.rtt.smoothed);
                }
            }
        }
    }

    pub(super) fn on_congestion_event(
        &mut self,
        w: &mut Window,
        now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
        persistent: bool,
    ) {
        if self.uses_virtual_flows() {
            let packets = lost_bytes.div_ceil(w.smss).max(1);
            if self.flows.on_loss(w, now, lost_sent_time, packets) {
                self.frac = 0.0;
            }
            w.remove_lost(lost_bytes);
            if persistent {
                w.persistent_congestion();
                self.frac = 0.0;
            }
            if w.ssthresh != u64::MAX {
                self.smooth = None;
            }
            return;
        }
        match self.base {
            Base::Reno => {
                if let Some(flight_size) = w.begin_recovery(now, lost_sent_time) {
                    // An application-limited flight keeps the restart
                    // window (RFC 7661 §4.4, see `Window::reduce_on_loss`).
                    w.reduce_on_loss(flight_size as f64 * (1.0 - self.decrease()));
                    self.frac = 0.0;
                }
                w.remove_lost(lost_bytes);
                if persistent {
                    w.persistent_congestion();
                    self.frac = 0.0;
                }
            }
            Base::Cubic => {
                self.cubic
                    .on_congestion_event(w, now, lost_sent_time, lost_bytes, persistent);
                self.frac = 0.0;
            }
        }
        if w.ssthresh != u64::MAX {
            // The initial slow start is over.
            self.smooth = None;
        }
    }

    pub(super) fn on_timeout(&mut self, w: &mut Window, now: Instant) {
        if self.uses_virtual_flows() {
            // All N flows time out together (RFC 5681 §3.1 with their β).
            w.on_timeout(now, self.flows.kind().beta());
            self.flows.on_timeout(now);
            self.frac = 0.0;
            self.smooth = None;
            return;
        }
        match self.base {
            Base::Reno => {
                w.on_timeout(now, 1.0 - self.decrease());
            }
            Base::Cubic => self.cubic.on_timeout(w, now),
        }
        self.frac = 0.0;
        self.smooth = None;
    }

    /// Sets a MulTCP parameter other than N; `None` if the name is not one
    /// of MulTCP's. Nothing changes when the value is rejected.
    pub(super) fn set_parameter(&mut self, name: &str, value: f64) -> Option<Result<(), CcError>> {
        match name {
            "virtual_flows" => Some(if value == 0.0 || value == 1.0 {
                self.virtual_flows = value == 1.0;
                Ok(())
            } else {
                Err(CcError::OutOfRange {
                    name: "virtual_flows",
                    value,
                    expected: "1 (N virtual flows, each reacting to its own losses) or 0 (one aggregate AIMD: MulTCP2 or CUBIC scaled to N)",
                })
            }),
            "multcp2" => Some(if value == 0.0 || value == 1.0 {
                self.multcp2 = value == 1.0;
                Ok(())
            } else {
                Err(CcError::OutOfRange {
                    name: "multcp2",
                    value,
                    expected: "1 (MulTCP2 loss response, Nabeshima et al.) or 0 (original MulTCP)",
                })
            }),
            "multcp_base" => Some(if value == 0.0 || value == 1.0 {
                let base = if value == 1.0 {
                    Base::Cubic
                } else {
                    Base::Reno
                };
                if base != self.base {
                    // CUBIC takes over a window Reno grew like any other
                    // controller's; Reno needs no state.
                    self.base = base;
                    self.flows.set_kind(base.flow_kind());
                    self.cubic.reset();
                    self.frac = 0.0;
                }
                Ok(())
            } else {
                Err(CcError::OutOfRange {
                    name: "multcp_base",
                    value,
                    expected: "0 (N virtual Reno flows: MulTCP) or 1 (N virtual CUBIC flows)",
                })
            }),
            _ => None,
        }
    }

    /// The `virtual_flows` parameter: 1 = N virtual flows, 0 = aggregate.
    pub(super) fn virtual_flows(&self) -> f64 {
        if self.virtual_flows {
            1.0
        } else {
            0.0
        }
    }

    pub(super) fn multcp2(&self) -> f64 {
        if self.multcp2 {
            1.0
        } else {
            0.0
        }
    }

    /// The `multcp_base` parameter: 0 = Reno flows, 1 = CUBIC flows.
    pub(super) fn base(&self) -> f64 {
        self.base.value()
    }
}

/// Where N virtual flows in slow start would be, by round trips of the real
/// flow (a round ends once a round-start window has been acknowledged,
/// RFC 3465 style).
#[derive(Debug, Clone, Copy)]
struct SmoothStart {
    /// The window of *one* virtual flow at the start of the round, bytes.
    flow_at_round_start: f64,
    /// The real window at the start of the round, bytes.
    round_cwnd: f64,
    /// Bytes acknowledged in this round.
    round_acked: f64,
}

impl SmoothStart {
    /// Extra growth allowed for `grow` acknowledged bytes: what brings the
    /// window up to the N flows' aggregate, at most `grow`.
    fn extra(&mut self, n: f64, cwnd: f64, grow: f64) -> f64 {
        let round = self.round_cwnd.max(1.0);
        self.round_acked += grow;
        // The virtual flows double over the round as their acks come in.
        let flow = self.flow_at_round_start * (1.0 + (self.round_acked / round).min(1.0));
        let extra = (n.max(1.0) * flow - (cwnd + grow)).clamp(0.0, grow);
        if self.round_acked >= round {
            self.flow_at_round_start = flow;
            self.round_cwnd = cwnd + grow + extra;
            self.round_acked = 0.0;
        }
        extra
    }
}

/// Checks a number of virtual flows: a real in (0, 100].
pub(super) fn check_n(name: &'static str, value: f64) -> Result<f64, CcError> {
    if value > 0.0 && value <= MAX_N {
        Ok(value)
    } else {
        Err(CcError::OutOfRange {
            name,
            value,
            expected: "a number of virtual flows greater than 0 and at most 100",
        })
    }
}

/// MulTCP congestion control with N virtual flows (MulTCP2 loss response,
/// smooth slow start), see the module docs.
///
/// Parameters ([`CongestionController::set_parameter`]):
/// - `n`: number of virtual flows, a real in (0, 100], default 1;
/// - `virtual_flows`: 1 = N virtual flows, each with its own window and
///   recovery period ([`super::virtual_flows`], default: N shares whether
///   losses are independent or synchronised by a drop-tail queue), 0 = one
///   aggregate AIMD (the MulTCP2 decrease or CUBIC scaled to N, below);
/// - `multcp2` (aggregate only): 1 = MulTCP2 decrease `2/(3N+1)` (default),
///   0 = original MulTCP `1/(2N)` (Reno flows only);
/// - `multcp_base`: 0 = N virtual Reno flows (MulTCP, default), 1 = N
///   virtual CUBIC flows (RFC 9438 scaled to N: `C_N = N·C`, `β_N = (N − 1 + β)/N`; see
///   the `cubic` module docs; N = 1 is [`super::Cubic`]);
/// - `min_window`: floor of every reduction in bytes, in `[SMSS, 2^30]`,
///   default 2·SMSS.
///
/// ```
/// use braid_recovery::cc::{CongestionController, MulTcp};
/// use braid_recovery::Instant;
///
/// // N = 3 virtual Reno flows of 40 segments: one loss halves one of them.
/// let mut cc = MulTcp::new(1000, 120 * 1000, 3.0).unwrap();
/// for i in 1..=120 {
///     cc.on_sent(Instant::ZERO, 1000, i * 1000);
/// }
/// cc.on_congestion_event(Instant::from_micros(50_000), Instant::ZERO, 1000, false);
/// assert_eq!(cc.window(), 100_000);
///
/// // The aggregate model, MulTCP2: a loss gives up b = 2/(3N+1) = 0.2 of
/// // the flight size.
/// let mut cc = MulTcp::new(1000, 100 * 1000, 3.0).unwrap();
/// cc.set_parameter("virtual_flows", 0.0).unwrap();
/// for i in 1..=100 {
///     cc.on_sent(Instant::ZERO, 1000, i * 1000);
/// }
/// cc.on_congestion_event(Instant::from_micros(50_000), Instant::ZERO, 1000, false);
/// assert_eq!(cc.window(), 80_000);
/// assert!(MulTcp::new(1000, 10_000, 0.0).is_err());
/// cc.set_parameter("n", 2.5).unwrap();
///
/// // N = 3 CUBIC flows: one of them keeps β = 0.7 of its third, so the
/// // aggregate keeps β_N = (N − 1 + β)/N = 0.9.
/// let mut cc = MulTcp::new(1000, 100 * 1000, 3.0).unwrap();
/// cc.set_parameter("virtual_flows", 0.0).unwrap();
/// cc.set_parameter("multcp_base", 1.0).unwrap();
/// for i in 1..=100 {
///     cc.on_sent(Instant::ZERO, 1000, i * 1000);
/// }
/// cc.on_congestion_event(Instant::from_micros(50_000), Instant::ZERO, 1000, false);
/// assert!(cc.window().abs_diff(90_000) <= 1);
/// ```
#[derive(Debug, Clone)]
pub struct MulTcp {
    window: Window,
    core: MulTcpCore,
}

impl MulTcp {
    /// MulTCP with `n` virtual flows for packets of `max_datagram_size`
    /// bytes, starting with `initial_window` bytes (raised to the 2·SMSS
    /// minimum if smaller). Fails unless `0 < n ≤ 100`.
    pub fn new(max_datagram_size: u64, initial_window: u64, n: f64) -> Result<Self, CcError> {
        let n = check_n("n", n)?;
        let window = Window::new(max_datagram_size, initial_window);
        let core = MulTcpCore::new(n, window.cwnd, Base::Reno);
        Ok(MulTcp { window, core })
    }

    /// The number of virtual flows.
    pub fn n(&self) -> f64 {
        self.core.n()
    }

    /// True from a window reduction until a packet sent after it is
    /// acknowledged (RFC 6582 §3.2).
    pub fn in_recovery(&self) -> bool {
        self.window.in_recovery()
    }
}

impl CongestionController for MulTcp {
    fn name(&self) -> &'static str {
        "multcp"
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
        self.window.adopt(from);
        let restoring = from.slow_start && !from.initial_slow_start();
        self.core.enter(&mut self.window, from.initial_slow_start(), restoring);
    }

    fn window(&self) -> u64 {
        self.window.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.window.ssthresh
    }

    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError> {
        match name {
            "n" => {
                self.core.set_n(check_n("n", value)?);
                Ok(())
            }
            "min_window" => self.window.set_min_window(value),
            _ => self.core.set_parameter(name, value).unwrap_or_else(|| {
                Err(CcError::UnknownParameter {
                    controller: "multcp",
                    name: name.to_string(),
                    known: "n, virtual_flows, multcp2, multcp_base, min_window".to_string(),
                })
            }),
        }
    }

    fn parameters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("n", self.core.n()),
            ("virtual_flows", self.core.virtual_flows()),
            ("multcp2", self.core.multcp2()),
            ("multcp_base", self.core.base()),
            ("min_window", self.window.min_window as f64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::super::newreno::test_support::{self, acked, ms, round, send, SMSS};
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    const S: u64 = SMSS;

    fn t(x: u64) -> Instant {
        Instant::ZERO + ms(x)
    }

    /// Mean window of AIMD(a, b) at loss rate p, in segments (the
    /// deterministic sawtooth: a per RTT up, ×(1−b) per loss).
    fn aimd_mean_window(a: f64, b: f64, p: f64) -> f64 {
        (a * (2.0 - b) / (2.0 * b * p)).sqrt()
    }

    #[test]
    fn multcp2_gives_exactly_n_times_tcp_in_steady_state() {
        let p = 1e-3;
        let tcp = aimd_mean_window(1.0, 0.5, p);
        for n in [0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 10.0] {
            let core = MulTcpCore::new(n, 0, Base::Reno);
            let ratio = aimd_mean_window(core.increase(), core.decrease(), p) / tcp;
            assert!((ratio - n).abs() < 1e-9, "N = {n}: ratio {ratio}");
        }
        // The original MulTCP overshoots, up to √(4/3) for large N.
        let mut original = MulTcpCore::new(10.0, 0, Base::Reno);
        original.multcp2 = false;
        let ratio = aimd_mean_window(original.increase(), original.decrease(), p) / tcp;
        assert!(
            ratio > 11.0 && ratio < 10.0 * (4.0f64 / 3.0).sqrt(),
            "{ratio}"
        );
    }

    #[test]
    fn decrease_factors() {
        let b = |n: f64, multcp2: bool| {
            let mut c = MulTcpCore::new(n, 0, Base::Reno);
            c.multcp2 = multcp2;
            c.decrease()
        };
        assert_eq!(b(1.0, true), 0.5);
        assert_eq!(b(2.0, true), 2.0 / 7.0);
        assert_eq!(b(4.0, true), 2.0 / 13.0);
        assert_eq!(b(2.0, false), 0.25);
        assert_eq!(b(0.5, true), 0.5);
        assert_eq!(MulTcpCore::new(0.5, 0, Base::Reno).increase(), 0.25);
    }

    #[test]
    fn congestion_avoidance_grows_n_segments_per_round_trip() {
        for n in [1.0, 2.0, 3.0, 4.0] {
            let mut cc = MulTcp::new(S, 100 * S, n).unwrap();
            send(&mut cc, t(0), 100);
            cc.on_congestion_event(t(10), t(0), S, false);
            let start = cc.window() as f64;
            let mut now = t(20);
            for _ in 0..10 {
                now = round(&mut cc, now, ms(50), false);
            }
            let grown = (cc.window() as f64 - start) / S as f64;
            // Ten round trips of about N segments each (byte counting with
            // a growing window is slightly below N per round).
            assert!(
                grown > 10.0 * n - 1.0 && grown <= 10.0 * n,
                "N = {n}: {grown}"
            );
        }
    }

    #[test]
    fn loss_shrinks_by_the_multcp2_factor_once_per_round_trip() {
        let mut cc = MulTcp::new(S, 70 * S, 2.0).unwrap();
        cc.set_parameter("virtual_flows", 0.0).unwrap();
        send(&mut cc, t(0), 70);
        cc.on_congestion_event(t(10), t(0), S, false);
        assert_eq!(cc.window(), 50 * S); // 70·(1 − 2/7)
        assert_eq!(cc.ssthresh(), 50 * S);
        cc.on_congestion_event(t(11), t(0), S, false);
        assert_eq!(cc.window(), 50 * S);
        assert!(cc.in_recovery());
        cc.set_parameter("multcp2", 0.0).unwrap();
        send(&mut cc, t(20), 50);
        cc.on_congestion_event(t(70), t(20), S, false);
        assert_eq!(cc.window(), 75 * S / 2); // 50·(1 − 1/4)
    }

    /// RFC 7661 §4.4: a flight that never filled the window keeps the
    /// restart window min(IW, cwnd) (ssthresh is cut as usual).
    #[test]
    fn app_limited_flight_keeps_the_restart_window() {
        let mut cc = MulTcp::new(S, 10 * S, 2.0).unwrap();
        cc.set_parameter("virtual_flows", 0.0).unwrap();
        send(&mut cc, t(0), 3);
        cc.on_congestion_event(t(50), t(0), S, false);
        assert_eq!(cc.window(), 10 * S);
        assert_eq!(cc.ssthresh(), 3 * S * 5 / 7); // 1 − 2/7 of the flight
        // Virtual flows: the flight (3 segments) is shared by the two
        // flows; one halves the 1.5 it had out, the other keeps its 5.
        let mut cc = MulTcp::new(S, 10 * S, 2.0).unwrap();
        send(&mut cc, t(0), 3);
        cc.on_congestion_event(t(50), t(0), S, false);
        assert_eq!(cc.window(), 10 * S);
        assert_eq!(cc.ssthresh(), 23 * S / 4);
    }

    /// Test driver for the CUBIC base: one of a few kinds of event.
    fn step(cc: &mut dyn CongestionController, now: &mut Instant, kind: u8, x: u64) {
        let rtt = ms(1 + x % 300);
        match kind % 7 {
            0 | 1 => *now = round(cc, *now, rtt, false),
            2 => *now = round(cc, *now, rtt, true),
            3 => {
                let n = (cc.window() / S).max(1);
                send(cc, *now, n - x % n);
                *now += rtt;
                cc.on_congestion_event(*now, *now - rtt, S, x.is_multiple_of(13));
            }
            4 => cc.on_retransmission_timeout(*now),
            5 => *now += Duration::from_millis(x % 5000),
            _ => {
                // Part of a round, acknowledged late.
                send(cc, *now, 1 + x % 5);
                *now += rtt;
                for _ in 0..1 + x % 5 {
                    cc.on_ack(*now, &acked(*now - rtt, S, rtt, false));
                }
                cc.on_ack_end(*now, 0);
            }
        }
    }

    /// Reno-based MulTCP(2) grows two segments per round trip from the
    /// same window that CUBIC-based MulTCP(2) reduced less.
    #[test]
    fn cubic_base_reduces_by_beta_n_and_grows_with_time() {
        let mut reno = MulTcp::new(S, 100 * S, 2.0).unwrap();
        let mut cubic = MulTcp::new(S, 100 * S, 2.0).unwrap();
        cubic.set_parameter("multcp_base", 1.0).unwrap();
        assert_eq!(cubic.parameters()[3], ("multcp_base", 1.0));
        for cc in [&mut reno, &mut cubic] {
            cc.set_parameter("virtual_flows", 0.0).unwrap();
            send(cc, t(0), 100);
            cc.on_congestion_event(t(10), t(0), S, false);
        }
        assert_eq!(reno.window() / S, 71); // 1 − 2/7
        assert!(cubic.window().abs_diff(85 * S) <= 1); // β_N = 0.85
                                                       // Behind a deep queue (1 s round trips) the CUBIC flows grow with
                                                       // the clock, the Reno flows by 2 segments per round trip.
        let (mut a, mut b) = (t(20), t(20));
        for _ in 0..8 {
            a = round(&mut reno, a, ms(1000), false);
            b = round(&mut cubic, b, ms(1000), false);
        }
        let reno_segments = reno.window() / S;
        assert!((86..=87).contains(&reno_segments), "{reno_segments}");
        assert!(cubic.window() > 100 * S, "{}", cubic.window() / S);
    }

    proptest! {
        /// One virtual CUBIC flow is RFC 9438 CUBIC, step for step.
        #[test]
        fn one_cubic_flow_is_cubic(
            iw in 2u64..200,
            steps in prop::collection::vec((any::<u8>(), any::<u64>()), 0..60),
        ) {
            let mut m = MulTcp::new(S, iw * S, 1.0).unwrap();
            m.set_parameter("multcp_base", 1.0).unwrap();
            let mut c = super::super::Cubic::new(S, iw * S);
            let (mut tm, mut tc) = (t(1), t(1));
            for &(kind, x) in &steps {
                step(&mut m, &mut tm, kind, x);
                step(&mut c, &mut tc, kind, x);
                prop_assert_eq!((m.window(), m.ssthresh()), (c.window(), c.ssthresh()), "after {:?}", (kind, x));
            }
        }
    }

    #[test]
    fn smooth_slow_start_catches_up_with_n_flows_then_doubles() {
        let mut cc = MulTcp::new(S, 10 * S, 4.0).unwrap();
        let mut now = t(0);
        let mut windows = vec![cc.window() / S];
        for _ in 0..5 {
            now = round(&mut cc, now, ms(50), false);
            windows.push(cc.window() / S);
        }
        // ×3 per round while behind 4 flows' 40·2^k (40, 80, 160, 320,
        // 640, 1280), then ×2 with them.
        assert_eq!(windows[..4], [10, 30, 90, 270]);
        assert!(windows[4].abs_diff(640) <= 2, "{windows:?}");
        assert!(windows[5].abs_diff(1280) <= 4, "{windows:?}");
        for pair in windows.windows(2) {
            assert!(pair[1] <= 3 * pair[0]);
        }
        // One flow: plain slow start.
        let mut cc = MulTcp::new(S, 10 * S, 1.0).unwrap();
        round(&mut cc, t(0), ms(50), false);
        assert_eq!(cc.window(), 20 * S);
    }

    #[test]
    fn timeout_uses_the_multcp_decrease_for_ssthresh() {
        let mut cc = MulTcp::new(S, 70 * S, 2.0).unwrap();
        cc.set_parameter("virtual_flows", 0.0).unwrap();
        send(&mut cc, t(0), 70);
        cc.on_retransmission_timeout(t(500));
        assert_eq!(cc.window(), S);
        assert_eq!(cc.ssthresh(), 50 * S);
        cc.on_sent(t(501), S, S);
        cc.on_ack(t(550), &acked(t(501), S, ms(50), false));
        assert_eq!(cc.window(), 2 * S);
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let mut cc = MulTcp::new(S, 10 * S, 3.0).unwrap();
        round(&mut cc, t(0), ms(50), true);
        assert_eq!(cc.window(), 10 * S);
    }

    #[test]
    fn parameters_are_validated() {
        assert!(MulTcp::new(S, S, f64::NAN).is_err());
        assert!(MulTcp::new(S, S, 101.0).is_err());
        let mut cc = MulTcp::new(S, 10 * S, 0.5).unwrap();
        for (name, bad) in [
            ("n", 0.0),
            ("n", -1.0),
            ("n", f64::INFINITY),
            ("multcp2", 0.5),
            ("multcp_base", 2.0),
        ] {
            let before = cc.parameters();
            let err = cc.set_parameter(name, bad).unwrap_err();
            assert!(err.to_string().contains(name), "{err}");
            assert_eq!(cc.parameters(), before);
        }
        assert!(cc
            .set_parameter("priority", 1.0)
            .unwrap_err()
            .to_string()
            .contains("n, virtual_flows, multcp2, multcp_base, min_window"));
        cc.set_parameter("n", 2.5).unwrap();
        assert_eq!(
            cc.parameters(),
            vec![
                ("n", 2.5),
                ("virtual_flows", 1.0),
                ("multcp2", 1.0),
                ("multcp_base", 0.0),
                ("min_window", (2 * S) as f64)
            ]
        );
    }

    proptest! {
        #[test]
        fn random_event_sequences_keep_the_window_sane(
            smss in 0u64..2000,
            iw in 0u64..100_000,
            n in 0.01f64..100.0,
            ops in prop::collection::vec(test_support::op(), 0..200),
        ) {
            let mut cc = MulTcp::new(smss, iw, n).unwrap();
            test_support::check_invariants(&mut cc, smss, &ops);
        }
    }
}
