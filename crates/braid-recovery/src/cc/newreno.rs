//! NewReno: RFC 5681 slow start and congestion avoidance with the RFC 6582
//! recovery period, mapped onto SACK-style loss detection.
//!
//! Also home of [`Window`], the RFC 5681 window bookkeeping (slow start,
//! recovery period, timeout, minimum window) that CUBIC reuses: RFC 9438 §4.10
//! says CUBIC's slow start and loss reaction follow the standard ones.
//!
//! # How RFC 5681 / RFC 6582 map onto SACK-style recovery
//!
//! Braid declares packets lost the way QUIC does (RFC 9002 §6): once later
//! packets are acknowledged past a packet or time threshold, with ACK frames
//! that say exactly which packets arrived. TCP's duplicate-ACK counting has
//! no counterpart, so:
//!
//! - **Entering recovery** (RFC 5681 §3.2 steps 2–3, RFC 6582 §3.2 step 2):
//!   on a loss of a packet sent after the current recovery period began,
//!   `ssthresh = max(FlightSize·β, min_window)` (β = ½, `min_window` = 2·SMSS
//!   by default) and `cwnd = ssthresh`. The 3·SMSS inflation and the +SMSS per
//!   further duplicate ACK of RFC 6582 only existed to release new data while
//!   the lost segment still counted as outstanding; here lost packets leave
//!   `bytes_in_flight` as soon as they are declared lost, so the reduced
//!   window alone releases the right amount and nothing is deflated later.
//! - **One reduction per round trip** (RFC 6582 §3.2 step 4, the `recover`
//!   variable): the send time of the newest lost packet stands in for its
//!   sequence number. Losses of packets sent no later than the start of the
//!   recovery period are ignored (RFC 9002 §7.3.2).
//! - **Leaving recovery** (RFC 6582 §3.2 step 5, full acknowledgement): the
//!   first acknowledgement of a packet sent after recovery began. Until then
//!   acknowledgements do not grow the window.
//! - **Retransmission timeout** (RFC 5681 §3.1 eq. 4): `ssthresh =
//!   max(FlightSize·β, min_window)`, `cwnd` = loss window = 1·SMSS;
//!   `ssthresh` is held on back-to-back timeouts (RFC 5681 §3.1, last
//!   paragraph) and packets sent before the timeout belong to the recovery
//!   period (RFC 6582 §4), so their late loss reports do not cut again.
//! - **Application-limited flights** (RFC 7661 §4.4, RFC 5681 §4.1): when
//!   the flight never filled the window since the window was last set, the
//!   loss cuts a window the application never used, and basing the new one
//!   on the little that was in flight ratchets it down loss after loss (an
//!   application-limited sender never regrows it: the acknowledgements of
//!   its bursts do not count, RFC 7661 §4.3). For such a flight the window
//!   after the reduction is at least the restart window `min(IW, cwnd)` of
//!   RFC 5681 §4.1, the burst the sender may send after any idle period
//!   anyway (and any new connection, RFC 6928). `ssthresh` is cut as usual.
//!   A sender that filled its window (cwnd-limited: it had at some point
//!   `cwnd − SMSS` or more in flight, or half the window in slow start, as
//!   Linux's `tcp_is_cwnd_limited`) backs off exactly as above. Short
//!   request/response flows, which send fewer than IW packets at a time,
//!   thus keep a window that carries a response in one round trip.
//! - **Persistent congestion** (RFC 9002 §7.6.2): `cwnd = min_window`.
//! - **FlightSize** is the last `bytes_in_flight` the connection reported
//!   (on send and at the end of each ACK frame) minus what was acknowledged
//!   since, capped at `cwnd` so that a reduction can never enlarge the window
//!   (packets sent before an earlier reduction may still be in flight).
//! - **Growth**: slow start counts acknowledged bytes exactly (RFC 3465 §2.2
//!   with an unbounded L, as RFC 9002 §7.3.1: pacing, not the ACK, limits
//!   bursts) and stops at `ssthresh`, carrying the rest of an ACK into
//!   congestion avoidance (RFC 5681 §3.1 allows either). Congestion avoidance
//!   uses RFC 3465 §2.1 byte counting: one SMSS per `cwnd` bytes
//!   acknowledged, i.e. one SMSS per round trip. Application-limited
//!   acknowledgements never grow the window (RFC 7661 §4.1 spirit).

use braid_core::Instant;

use super::{Acked, CcError, CongestionController};

/// Largest accepted `min_window`, in bytes: a floor above this is a typo.
const MAX_MIN_WINDOW: u64 = 1 << 30;

/// The RFC 5681 / RFC 6582 window state shared by [`NewReno`] and
/// [`super::Cubic`]: congestion window, slow-start threshold, recovery
/// period, FlightSize tracking and the minimum window. The controllers only
/// decide *how much* to reduce and how to grow in congestion avoidance.
#[derive(Debug, Clone)]
pub(super) struct Window {
    /// Sender maximum segment size: the connection's max datagram size.
    pub(super) smss: u64,
    /// Floor for every reduction except the RTO loss window.
    pub(super) min_window: u64,
    /// Congestion window in bytes.
    pub(super) cwnd: u64,
    /// Slow-start threshold in bytes; `u64::MAX` until the first reduction.
    pub(super) ssthresh: u64,
    /// RFC 3465 §2.1 `bytes_acked` counter for Reno congestion avoidance.
    ca_bytes_acked: u64,
    /// When the current (or last) recovery period began (RFC 9002
    /// `congestion_recovery_start_time`).
    recovery_start: Option<Instant>,
    /// No packet sent after `recovery_start` has been acknowledged yet.
    in_recovery: bool,
    /// FlightSize estimate (see the module docs).
    flight: u64,
    /// A timeout fired and nothing was acknowledged since: hold ssthresh on
    /// the next timeout (RFC 5681 §3.1).
    timed_out: bool,
    /// The initial window IW (RFC 5681 §4.1's restart window is
    /// `min(IW, cwnd)`).
    initial_window: u64,
    /// Most bytes in flight right after a send since `cwnd` was last set by
    /// a reduction (packets sent before it do not show the new window
    /// used): tells a cwnd-limited sender from an application-limited one.
    max_flight: u64,
}

impl Window {
    /// Bad sizes are clamped rather than rejected: SMSS is at least one byte
    /// and the initial window at least the minimum window (2·SMSS).
    pub(super) fn new(max_datagram_size: u64, initial_window: u64) -> Self {
        let smss = max_datagram_size.max(1);
        let min_window = smss.saturating_mul(2);
        Window {
            smss,
            min_window,
            cwnd: initial_window.max(min_window),
            ssthresh: u64::MAX,
            ca_bytes_acked: 0,
            recovery_start: None,
            in_recovery: false,
            flight: 0,
            timed_out: false,
            initial_window: initial_window.max(min_window),
            max_flight: 0,
        }
    }

    /// Takes over another controller's operating point (see
    /// [`super::Handover`]): the window where it was (at least the minimum
    /// window); slow start continues only if the predecessor was in it,
    /// else congestion avoidance starts at the current window (ssthresh =
    /// cwnd); no recovery period carries over.
    pub(super) fn adopt(&mut self, from: &super::Handover) {
        self.cwnd = from.window.max(self.min_window);
        self.ssthresh = if from.slow_start {
            // The initial slow start continues (MAX), a restoring one
            // climbs back to its threshold.
            from.ssthresh.max(self.cwnd)
        } else {
            self.cwnd
        };
        self.ca_bytes_acked = 0;
        self.recovery_start = None;
        self.in_recovery = false;
        self.flight = from.bytes_in_flight;
        self.timed_out = false;
        self.max_flight = from.bytes_in_flight;
    }

    pub(super) fn in_recovery(&self) -> bool {
        self.in_recovery
    }

    /// The connection's count of bytes in flight, after a send or at the end
    /// of an ACK frame, is authoritative.
    pub(super) fn set_flight(&mut self, bytes_in_flight: u64) {
        self.flight = bytes_in_flight;
    }

    /// A packet was sent and `bytes_in_flight` includes it: the window
    /// held that much (what [`Window::cwnd_limited`] looks at).
    pub(super) fn on_sent(&mut self, bytes_in_flight: u64) {
        self.flight = bytes_in_flight;
        self.max_flight = self.max_flight.max(bytes_in_flight);
    }

    /// The sender filled its window since it was last set: it had so much
    /// in flight that no further packet fit (`cwnd − SMSS` or more), or in
    /// slow start more than half the window, which slow start doubles each
    /// round trip (Linux's `tcp_is_cwnd_limited`).
    pub(super) fn cwnd_limited(&self) -> bool {
        self.max_flight.saturating_add(self.smss) > self.cwnd
            || (self.cwnd < self.ssthresh && self.max_flight.saturating_mul(2) > self.cwnd)
    }

    /// Book-keeping for one acknowledged packet; returns how many of its
    /// bytes may grow the window (zero while app-limited or in recovery).
    pub(super) fn on_ack(&mut self, acked: &Acked) -> u64 {
        self.flight = self.flight.saturating_sub(acked.bytes);
        self.timed_out = false;
        let sent_in_recovery = self
            .recovery_start
            .is_some_and(|start| acked.sent_time <= start);
        if !sent_in_recovery {
            // RFC 6582 §3.2 step 5: new data sent after recovery began was
            // acknowledged, so the recovery period is over.
            self.in_recovery = false;
        }
        if sent_in_recovery || acked.app_limited {
            0
        } else {
            acked.bytes
        }
    }

    /// Slow start (RFC 5681 §3.1, RFC 3465 byte counting): grows `cwnd` by
    /// up to `bytes` without passing `ssthresh`; returns the bytes left for
    /// congestion avoidance.
    pub(super) fn slow_start(&mut self, bytes: u64) -> u64 {
        if self.cwnd >= self.ssthresh {
            return bytes;
        }
        let grow = bytes.min(self.ssthresh - self.cwnd);
        self.cwnd += grow;
        bytes - grow
    }

    /// Reno congestion avoidance by byte counting (RFC 3465 §2.1): one SMSS
    /// once a full window has been acknowledged. At most one SMSS per call,
    /// and never more than a window banked, so an absurd `bytes` cannot
    /// make the window jump.
    pub(super) fn reno_avoidance(&mut self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.ca_bytes_acked = self.ca_bytes_acked.saturating_add(bytes);
        if self.ca_bytes_acked >= self.cwnd {
            self.ca_bytes_acked -= self.cwnd;
            self.cwnd = self.cwnd.saturating_add(self.smss);
            self.ca_bytes_acked = self.ca_bytes_acked.min(self.cwnd - 1);
        }
    }

    /// Starts a recovery period if a packet sent at `lost_sent_time` is not
    /// part of the current one (RFC 6582 §3.2 step 4, RFC 9002 §7.3.2).
    /// Returns the FlightSize the reduction is based on, or `None` when the
    /// loss must be ignored.
    pub(super) fn begin_recovery(&mut self, now: Instant, lost_sent_time: Instant) -> Option<u64> {
        if self
            .recovery_start
            .is_some_and(|start| lost_sent_time <= start)
        {
            return None;
        }
        self.recovery_start = Some(now);
        self.in_recovery = true;
        Some(self.flight_size())
    }

    /// FlightSize for a reduction, capped at `cwnd` (see the module docs).
    pub(super) fn flight_size(&self) -> u64 {
        self.flight.min(self.cwnd)
    }

    /// `ssthresh = max(target, min_window)`, `cwnd = ssthresh`
    /// (RFC 5681 §3.2 step 2–3, RFC 9438 §4.6).
    pub(super) fn reduce_to(&mut self, target: f64) {
        self.ssthresh = f64_to_bytes(target).max(self.min_window);
        self.cwnd = self.ssthresh;
        self.ca_bytes_acked = 0;
        self.max_flight = 0;
    }

    /// The reduction of a loss-triggered congestion event:
    /// [`Window::reduce_to`], except that an application-limited sender
    /// keeps at least the restart window `min(IW, cwnd)` (RFC 5681 §4.1,
    /// RFC 7661 §4.4; see the module docs).
    pub(super) fn reduce_on_loss(&mut self, target: f64) {
        let floor = if self.cwnd_limited() { 0 } else { self.initial_window.min(self.cwnd) };
        self.reduce_to(target);
        self.cwnd = self.cwnd.max(floor);
    }

    /// Packets declared lost no longer count in flight.
    pub(super) fn remove_lost(&mut self, lost_bytes: u64) {
        self.flight = self.flight.saturating_sub(lost_bytes);
    }

    /// Persistent congestion (RFC 9002 §7.6.2): collapse to the minimum
    /// window and end the recovery period, so growth restarts at once.
    pub(super) fn persistent_congestion(&mut self) {
        self.cwnd = self.min_window;
        self.max_flight = 0;
        self.ca_bytes_acked = 0;
        self.recovery_start = None;
        self.in_recovery = false;
    }

    /// Retransmission timeout (RFC 5681 §3.1 eq. 4 with factor `beta`,
    /// RFC 6582 §4): `ssthresh = max(FlightSize·β, min_window)` unless the
    /// previous timeout had no acknowledgement since, `cwnd` = 1·SMSS.
    /// Returns whether ssthresh was set (false when it was held).
    pub(super) fn on_timeout(&mut self, now: Instant, beta: f64) -> bool {
        let set_ssthresh = !self.timed_out;
        if set_ssthresh {
            self.ssthresh = f64_to_bytes(self.flight_size() as f64 * beta).max(self.min_window);
        }
        self.timed_out = true;
        self.cwnd = self.smss;
        self.max_flight = 0;
        self.ca_bytes_acked = 0;
        self.recovery_start = Some(now);
        self.in_recovery = true;
        set_ssthresh
    }

    /// Sets the minimum window (bytes, in `[SMSS, 2^30]`); the window is
    /// raised to it if below, everything else is kept.
    pub(super) fn set_min_window(&mut self, value: f64) -> Result<(), CcError> {
        if !(value.is_finite() && value >= self.smss as f64 && value <= MAX_MIN_WINDOW as f64) {
            return Err(CcError::OutOfRange {
                name: "min_window",
                value,
                expected: "a number of bytes from max_datagram_size to 1073741824",
            });
        }
        self.min_window = value as u64;
        self.cwnd = self.cwnd.max(self.min_window);
        Ok(())
    }
}

/// Bytes from a non-negative float, saturating; NaN counts as zero.
pub(super) fn f64_to_bytes(x: f64) -> u64 {
    // `as` saturates at both ends and maps NaN to 0.
    x as u64
}

/// Checks a multiplicative-decrease factor: strictly between 0 and 1.
pub(super) fn check_beta(value: f64) -> Result<f64, CcError> {
    if value > 0.0 && value < 1.0 {
        Ok(value)
    } else {
        Err(CcError::OutOfRange {
            name: "beta",
            value,
            expected: "a number greater than 0 and less than 1",
        })
    }
}

/// NewReno congestion control (RFC 5681, RFC 6582), see the module docs for
/// how it maps onto SACK-style loss detection.
///
/// Parameters ([`CongestionController::set_parameter`]):
/// - `beta`: multiplicative decrease factor, in (0, 1), default 0.5;
/// - `min_window`: floor of every reduction in bytes, in `[SMSS, 2^30]`,
///   default 2·SMSS.
///
/// ```
/// use braid_recovery::cc::{CongestionController, NewReno};
/// use braid_recovery::Instant;
///
/// let mut cc = NewReno::new(1200, 10 * 1200);
/// for i in 1..=10 {
///     cc.on_sent(Instant::ZERO, 1200, i * 1200);
/// }
/// // A loss halves the window (FlightSize was 10 packets).
/// cc.on_congestion_event(Instant::from_micros(50_000), Instant::ZERO, 1200, false);
/// assert_eq!(cc.window(), 5 * 1200);
/// assert_eq!(cc.ssthresh(), 5 * 1200);
/// cc.set_parameter("beta", 0.7).unwrap();
/// assert!(cc.set_parameter("beta", 1.5).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct NewReno {
    window: Window,
    beta: f64,
}

impl NewReno {
    /// A controller for packets of `max_datagram_size` bytes starting with
    /// `initial_window` bytes (raised to the 2·SMSS minimum if smaller).
    pub fn new(max_datagram_size: u64, initial_window: u64) -> Self {
        NewReno {
            window: Window::new(max_datagram_size, initial_window),
            beta: 0.5,
        }
    }

    /// True from a window reduction until a packet sent after it is
    /// acknowledged (RFC 6582 §3.2).
    pub fn in_recovery(&self) -> bool {
        self.window.in_recovery()
    }
}

impl CongestionController for NewReno {
    fn name(&self) -> &'static str {
        "newreno"
    }

    fn on_sent(&mut self, _now: Instant, _bytes: u64, bytes_in_flight: u64) {
        self.window.on_sent(bytes_in_flight);
    }

    fn on_ack(&mut self, _now: Instant, acked: &Acked) {
        let growth = self.window.on_ack(acked);
        let rest = self.window.slow_start(growth);
        self.window.reno_avoidance(rest);
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
            self.window.reduce_on_loss(flight_size as f64 * self.beta);
        }
        self.window.remove_lost(lost_bytes);
        if persistent {
            self.window.persistent_congestion();
        }
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        self.window.on_timeout(now, self.beta);
    }

    fn resume(&mut self, _now: Instant, from: &super::Handover) {
        self.window.adopt(from);
    }

    fn window(&self) -> u64 {
        self.window.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.window.ssthresh
    }

    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError> {
        match name {
            "beta" => self.beta = check_beta(value)?,
            "min_window" => self.window.set_min_window(value)?,
            _ => {
                return Err(CcError::UnknownParameter {
                    controller: "newreno",
                    name: name.to_string(),
                    known: "beta, min_window".to_string(),
                })
            }
        }
        Ok(())
    }

    fn parameters(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("beta", self.beta),
            ("min_window", self.window.min_window as f64),
        ]
    }
}

/// Drivers shared by the NewReno and CUBIC tests.
#[cfg(test)]
pub(super) mod test_support {
    use std::collections::VecDeque;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::super::{Acked, CongestionController, RttEstimate};
    use braid_core::Instant;

    pub const SMSS: u64 = 1200;

    pub fn ms(x: u64) -> Duration {
        Duration::from_millis(x)
    }

    pub fn acked(sent_time: Instant, bytes: u64, rtt: Duration, app_limited: bool) -> Acked {
        Acked {
            sent_time,
            bytes,
            app_limited,
            rtt: RttEstimate {
                latest: rtt,
                smoothed: rtt,
                min: rtt,
            },
            one_way_delay_us: None,
        }
    }

    /// Sends `n` packets of SMSS at `at` (flight counted from zero).
    pub fn send(cc: &mut dyn CongestionController, at: Instant, n: u64) {
        for i in 1..=n {
            cc.on_sent(at, SMSS, i * SMSS);
        }
    }

    /// One round trip: a full window of SMSS packets is sent at `now` and
    /// all of them are acknowledged at `now + rtt`, each by its own ACK.
    /// Returns the time the round ended.
    pub fn round(
        cc: &mut dyn CongestionController,
        now: Instant,
        rtt: Duration,
        app_limited: bool,
    ) -> Instant {
        let n = cc.window() / SMSS;
        send(cc, now, n);
        let end = now + rtt;
        for i in 0..n {
            cc.on_ack(end, &acked(now, SMSS, rtt, app_limited));
            cc.on_ack_end(end, (n - i - 1) * SMSS);
        }
        end
    }

    /// One event of a random sequence.
    #[derive(Debug, Clone)]
    pub enum Op {
        Send(u64),
        Ack {
            app_limited: bool,
            rtt_us: u64,
        },
        AckEnd,
        Lose {
            count: usize,
            persistent: bool,
        },
        Rto,
        Advance(u64),
        /// An arbitrary, possibly backwards, timestamp.
        Jump(u64),
        /// Raw call with arbitrary values, unrelated to what was sent.
        RawAck {
            sent: u64,
            bytes: u64,
        },
        RawLoss {
            sent: u64,
            bytes: u64,
        },
        Set {
            name: usize,
            value: f64,
        },
    }

    pub const PARAM_NAMES: [&str; 6] = [
        "beta",
        "min_window",
        "c",
        "fast_convergence",
        "initial_window",
        "",
    ];

    pub fn op() -> impl Strategy<Value = Op> {
        let value = prop_oneof![
            any::<f64>(),
            0.0..1.5f64,
            1000.0..20_000.0f64,
            Just(0.0),
            Just(1.0),
        ];
        prop_oneof![
            6 => (1u64..3000).prop_map(Op::Send),
            6 => (any::<bool>(), 0u64..2_000_000)
                .prop_map(|(app_limited, rtt_us)| Op::Ack { app_limited, rtt_us }),
            2 => Just(Op::AckEnd),
            2 => (1usize..4, prop::bool::weighted(0.1))
                .prop_map(|(count, persistent)| Op::Lose { count, persistent }),
            1 => Just(Op::Rto),
            4 => (0u64..5_000_000_000).prop_map(Op::Advance),
            1 => any::<u64>().prop_map(Op::Jump),
            1 => (any::<u64>(), any::<u64>()).prop_map(|(sent, bytes)| Op::RawAck { sent, bytes }),
            1 => (any::<u64>(), any::<u64>()).prop_map(|(sent, bytes)| Op::RawLoss { sent, bytes }),
            1 => (0usize..PARAM_NAMES.len(), value).prop_map(|(name, value)| Op::Set { name, value }),
        ]
    }

    /// Replays `ops` and checks after each one that the window is at least
    /// one SMSS, at least `min_window` unless it is the RTO loss window, and
    /// that nothing derived from it is non-finite.
    pub fn check_invariants(cc: &mut dyn CongestionController, smss: u64, ops: &[Op]) {
        let smss = smss.max(1);
        let mut now = Instant::from_nanos(1_000_000_000);
        let mut outstanding: VecDeque<(Instant, u64)> = VecDeque::new();
        let mut flight = 0u64;
        let mut loss_window = false;
        for op in ops {
            match *op {
                Op::Send(bytes) => {
                    flight = flight.saturating_add(bytes);
                    outstanding.push_back((now, bytes));
                    cc.on_sent(now, bytes, flight);
                }
                Op::Ack {
                    app_limited,
                    rtt_us,
                } => {
                    if let Some((sent, bytes)) = outstanding.pop_front() {
                        flight = flight.saturating_sub(bytes);
                        cc.on_ack(
                            now,
                            &acked(sent, bytes, Duration::from_micros(rtt_us), app_limited),
                        );
                    }
                }
                Op::AckEnd => cc.on_ack_end(now, flight),
                Op::Lose { count, persistent } => {
                    let mut newest = None;
                    let mut bytes = 0u64;
                    for _ in 0..count {
                        if let Some((sent, b)) = outstanding.pop_front() {
                            newest = Some(sent);
                            bytes = bytes.saturating_add(b);
                        }
                    }
                    if let Some(sent) = newest {
                        flight = flight.saturating_sub(bytes);
                        cc.on_congestion_event(now, sent, bytes, persistent);
                    }
                }
                Op::Rto => {
                    cc.on_retransmission_timeout(now);
                    loss_window = true;
                }
                Op::Advance(nanos) => now += Duration::from_nanos(nanos),
                Op::Jump(nanos) => now = Instant::from_nanos(nanos),
                Op::RawAck { sent, bytes } => cc.on_ack(
                    now,
                    &acked(
                        Instant::from_nanos(sent),
                        bytes,
                        Duration::from_nanos(sent),
                        false,
                    ),
                ),
                Op::RawLoss { sent, bytes } => {
                    cc.on_congestion_event(now, Instant::from_nanos(sent), bytes, false)
                }
                Op::Set { name, value } => {
                    let before = cc.parameters();
                    if cc.set_parameter(PARAM_NAMES[name], value).is_err() {
                        assert_eq!(
                            cc.parameters(),
                            before,
                            "a rejected value must not change anything"
                        );
                    }
                }
            }
            let min_window = cc
                .parameters()
                .iter()
                .find(|(n, _)| *n == "min_window")
                .map(|&(_, v)| v as u64)
                .expect("min_window parameter");
            let w = cc.window();
            if w >= min_window {
                loss_window = false;
            }
            assert!(w >= smss, "window {w} below one SMSS after {op:?}");
            assert!(
                loss_window || w >= min_window,
                "window {w} below min {min_window} after {op:?}"
            );
            assert!(
                cc.ssthresh() >= smss,
                "ssthresh {} after {op:?}",
                cc.ssthresh()
            );
            let rate = cc.pacing_rate(Duration::from_millis(20));
            assert!(rate.is_finite() && rate > 0.0, "pacing rate {rate}");
            assert!(cc.parameters().iter().all(|(_, v)| v.is_finite()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use proptest::prelude::*;

    fn t(ms_: u64) -> Instant {
        Instant::ZERO + ms(ms_)
    }

    #[test]
    fn slow_start_doubles_per_round_trip() {
        let mut cc = NewReno::new(SMSS, 10 * SMSS);
        let mut now = t(0);
        for expected in [20, 40, 80, 160] {
            now = round(&mut cc, now, ms(50), false);
            assert_eq!(cc.window(), expected * SMSS);
            assert!(cc.in_slow_start());
        }
    }

    #[test]
    fn slow_start_stops_at_ssthresh_and_carries_the_rest() {
        let mut cc = NewReno::new(SMSS, 10 * SMSS);
        cc.window.ssthresh = 15 * SMSS;
        round(&mut cc, t(0), ms(50), false);
        // 5 packets filled slow start; the other 5·SMSS count toward CA,
        // less than the 15·SMSS needed for one more SMSS.
        assert_eq!(cc.window(), 15 * SMSS);
        assert_eq!(cc.window.ca_bytes_acked, 5 * SMSS);
        assert!(!cc.in_slow_start());
    }

    /// RFC 5681 §3.1: in congestion avoidance cwnd grows by one SMSS per RTT.
    #[test]
    fn congestion_avoidance_grows_one_smss_per_round_trip() {
        let mut cc = NewReno::new(SMSS, 40 * SMSS);
        send(&mut cc, t(0), 40);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        assert_eq!(cc.window(), 20 * SMSS);
        let mut now = t(20);
        for k in 1..=10 {
            now = round(&mut cc, now, ms(50), false);
            assert_eq!(cc.window(), (20 + k) * SMSS);
            assert_eq!(cc.ssthresh(), 20 * SMSS);
        }
    }

    #[test]
    fn loss_sets_ssthresh_to_half_the_flight_size() {
        let mut cc = NewReno::new(SMSS, 100 * SMSS);
        // Only 60 packets in flight (more than half the window: in slow
        // start that is cwnd-limited): RFC 5681 eq. 4 uses FlightSize, not
        // cwnd.
        send(&mut cc, t(0), 60);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        assert_eq!(cc.ssthresh(), 30 * SMSS);
        assert_eq!(cc.window(), 30 * SMSS);
        assert!(cc.in_recovery());

        // Tiny flight: the floor is 2·SMSS.
        let mut cc = NewReno::new(SMSS, 2 * SMSS);
        send(&mut cc, t(0), 1);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        assert_eq!(cc.window(), 2 * SMSS);
        assert_eq!(cc.ssthresh(), 2 * SMSS);
    }

    /// RFC 7661 §4.4 / RFC 5681 §4.1: a loss in an application-limited
    /// flight (the window never filled) cuts ssthresh by FlightSize as
    /// usual but leaves the window at least at the restart window
    /// `min(IW, cwnd)`; a cwnd-limited flight backs off as before.
    #[test]
    fn app_limited_flight_keeps_the_restart_window() {
        // Slow start to 40 packets, then a loss with only 3 in flight.
        let mut cc = NewReno::new(SMSS, 10 * SMSS);
        let now = round(&mut cc, t(0), ms(50), false);
        let now = round(&mut cc, now, ms(50), false);
        assert_eq!(cc.window(), 40 * SMSS);
        // The rounds filled the window, so start a fresh observation: a
        // reduction resets it. Reduce once with a full flight...
        send(&mut cc, now, 40);
        cc.on_congestion_event(now + ms(10), now, SMSS, false);
        assert_eq!(cc.window(), 20 * SMSS, "cwnd-limited: FlightSize/2");
        // ...acknowledge everything, then lose one of a 3-packet burst.
        cc.on_ack_end(now + ms(60), 0);
        let later = now + ms(100);
        send(&mut cc, later, 3);
        cc.on_congestion_event(later + ms(60), later, SMSS, false);
        assert_eq!(cc.ssthresh(), 2 * SMSS, "ssthresh still from FlightSize");
        assert_eq!(cc.window(), 10 * SMSS, "the window keeps min(IW, cwnd)");
        // Again: the window below IW is not cut any further by an
        // application-limited loss, and not raised either.
        let mut small = NewReno::new(SMSS, 10 * SMSS);
        send(&mut small, t(0), 10);
        small.on_congestion_event(t(10), t(0), SMSS, false);
        assert_eq!(small.window(), 5 * SMSS);
        small.on_ack_end(t(60), 0);
        send(&mut small, t(100), 2);
        small.on_congestion_event(t(160), t(100), SMSS, false);
        assert_eq!(small.window(), 5 * SMSS);
        // A flight that filled the window (one SMSS short at most) halves.
        small.on_ack_end(t(200), 0);
        send(&mut small, t(300), 5);
        small.on_congestion_event(t(360), t(300), SMSS, false);
        assert_eq!(small.window(), 2 * SMSS + SMSS / 2);
    }

    #[test]
    fn beta_parameter_sets_the_reduction() {
        let mut cc = NewReno::new(SMSS, 100 * SMSS);
        cc.set_parameter("beta", 0.8).unwrap();
        send(&mut cc, t(0), 60);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        assert_eq!(cc.window(), 48 * SMSS);
    }

    /// RFC 6582 §3.2 step 4: several losses in one round trip reduce once;
    /// a loss of a packet sent after recovery began reduces again.
    #[test]
    fn one_reduction_per_recovery_period() {
        let mut cc = NewReno::new(SMSS, 40 * SMSS);
        send(&mut cc, t(0), 40);
        cc.on_congestion_event(t(50), t(0), SMSS, false);
        assert_eq!(cc.window(), 20 * SMSS);
        // More packets of the same flight declared lost, in later batches.
        cc.on_congestion_event(t(51), t(0), 2 * SMSS, false);
        cc.on_congestion_event(t(60), t(50), SMSS, false);
        assert_eq!(cc.window(), 20 * SMSS);
        assert_eq!(cc.ssthresh(), 20 * SMSS);

        // Acks of pre-recovery packets do not grow the window...
        cc.on_ack(t(70), &acked(t(0), SMSS, ms(50), false));
        assert_eq!(cc.window(), 20 * SMSS);
        assert!(cc.in_recovery());
        // ...the first ack of a packet sent after recovery began ends it.
        send(&mut cc, t(61), 20);
        cc.on_ack(t(111), &acked(t(61), SMSS, ms(50), false));
        assert!(!cc.in_recovery());

        // A loss of a packet sent after t(50) starts a new period; 19 of
        // the 20 new packets are still in flight.
        cc.on_congestion_event(t(120), t(61), SMSS, false);
        assert_eq!(cc.window(), 19 * SMSS / 2);
        assert!(cc.in_recovery());
    }

    /// RFC 5681 §3.1 eq. 4: ssthresh = max(FlightSize/2, 2·SMSS), cwnd = 1·SMSS,
    /// ssthresh held on a back-to-back timeout.
    #[test]
    fn retransmission_timeout_collapses_to_the_loss_window() {
        let mut cc = NewReno::new(SMSS, 40 * SMSS);
        send(&mut cc, t(0), 24);
        cc.on_retransmission_timeout(t(1000));
        assert_eq!(cc.window(), SMSS);
        assert_eq!(cc.ssthresh(), 12 * SMSS);
        assert!(cc.in_slow_start());

        // The retransmission is lost too: ssthresh is held, not halved again.
        cc.on_sent(t(1000), SMSS, 25 * SMSS);
        cc.on_retransmission_timeout(t(3000));
        assert_eq!(cc.ssthresh(), 12 * SMSS);
        assert_eq!(cc.window(), SMSS);

        // Late loss reports for packets sent before the timeout are part of
        // its recovery period.
        cc.on_congestion_event(t(3001), t(0), SMSS, false);
        assert_eq!(cc.window(), SMSS);

        // Slow start resumes on acks of packets sent after the timeout.
        cc.on_sent(t(3001), SMSS, SMSS);
        cc.on_ack(t(3050), &acked(t(3001), SMSS, ms(50), false));
        assert_eq!(cc.window(), 2 * SMSS);
    }

    #[test]
    fn persistent_congestion_collapses_to_min_window() {
        let mut cc = NewReno::new(SMSS, 40 * SMSS);
        send(&mut cc, t(0), 40);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        cc.on_congestion_event(t(900), t(5), 10 * SMSS, true);
        assert_eq!(cc.window(), 2 * SMSS);
        assert_eq!(cc.ssthresh(), 20 * SMSS);
        assert!(!cc.in_recovery());
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let mut cc = NewReno::new(SMSS, 10 * SMSS);
        round(&mut cc, t(0), ms(50), true);
        assert_eq!(cc.window(), 10 * SMSS);

        // Same in congestion avoidance.
        send(&mut cc, t(100), 10);
        cc.on_congestion_event(t(110), t(100), SMSS, false);
        assert_eq!(cc.window(), 5 * SMSS);
        let now = round(&mut cc, t(200), ms(50), false);
        assert_eq!(cc.window(), 6 * SMSS);
        round(&mut cc, now, ms(50), true);
        assert_eq!(cc.window(), 6 * SMSS);
    }

    #[test]
    fn min_window_parameter_is_a_floor_and_raises_the_window() {
        let mut cc = NewReno::new(SMSS, 10 * SMSS);
        cc.set_parameter("min_window", (8 * SMSS) as f64).unwrap();
        send(&mut cc, t(0), 10);
        cc.on_congestion_event(t(10), t(0), SMSS, false);
        assert_eq!(cc.window(), 8 * SMSS);
        cc.set_parameter("min_window", (12 * SMSS) as f64).unwrap();
        assert_eq!(cc.window(), 12 * SMSS);
        assert_eq!(
            cc.parameters(),
            vec![("beta", 0.5), ("min_window", (12 * SMSS) as f64)]
        );
    }

    #[test]
    fn bad_parameters_are_rejected_with_the_allowed_form() {
        let mut cc = NewReno::new(SMSS, 10 * SMSS);
        for bad in [0.0, 1.0, -0.5, f64::NAN, f64::INFINITY] {
            let err = cc.set_parameter("beta", bad).unwrap_err();
            assert!(
                matches!(err, CcError::OutOfRange { name: "beta", .. }),
                "{err}"
            );
        }
        let err = cc.set_parameter("min_window", 100.0).unwrap_err();
        assert!(err.to_string().contains("max_datagram_size"), "{err}");
        let err = cc.set_parameter("gamma", 1.0).unwrap_err();
        assert_eq!(
            err.to_string(),
            "congestion controller `newreno` has no parameter `gamma` (known: beta, min_window)"
        );
        assert_eq!(
            cc.parameters(),
            vec![("beta", 0.5), ("min_window", (2 * SMSS) as f64)]
        );
    }

    #[test]
    fn degenerate_construction_is_clamped() {
        let cc = NewReno::new(0, 0);
        assert_eq!(cc.window(), 2);
        let cc = NewReno::new(SMSS, SMSS);
        assert_eq!(cc.window(), 2 * SMSS);
        assert_eq!(cc.ssthresh(), u64::MAX);
    }

    proptest! {
        #[test]
        fn random_event_sequences_keep_the_window_sane(
            smss in 0u64..2000,
            iw in 0u64..100_000,
            ops in prop::collection::vec(op(), 0..200),
        ) {
            let mut cc = NewReno::new(smss, iw);
            check_invariants(&mut cc, smss, &ops);
        }
    }
}
