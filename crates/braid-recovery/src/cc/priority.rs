//! DTL's priority congestion control: one parameter, the priority p ≥ 0,
//! changeable on a live connection.
//!
//! - p = 0: less than best effort, [LEDBAT](super::Ledbat) (fill the link,
//!   keep the queuing delay at most the target, yield to everything else;
//!   with `adaptive = 1` through the yielding controller of
//!   [`super::yielding`], which backs off at the first queue it can tell
//!   from noise, so it yields on a shallow buffer or under an AQM too);
//! - p > 0: [MulTCP](super::MulTcp) with N = p virtual flows (p = 1 is one
//!   TCP flow, p = 2 takes the share of two). By default the virtual flows
//!   are CUBIC flows (`multcp_base = 1`: RFC 9438 scaled to N flows, see
//!   [`super::cubic`]; p = 1 is exactly [`super::Cubic`]), because the TCP
//!   that p is measured against is the kernel's default, CUBIC: behind a
//!   deep drop-tail queue CUBIC's clock-driven growth out-runs N Reno
//!   flows' per-round-trip growth (DTL Fig. 6's 200 ms buffer: Reno-based
//!   MulTCP(1) got 0.67 of a CUBIC flow's throughput). `multcp_base = 0`
//!   selects MulTCP proper (N Reno flows, MulTCP2 decrease), to compete with
//!   Reno.
//!
//! Both controllers drive one shared [`Window`] (congestion window,
//! ssthresh, recovery period, FlightSize), so a switch keeps the current
//! window and estimates instead of restarting from the initial window
//! (DTL §"Run-Time Dynamic Prioritization": no disruption, no reconnect).
//! The LEDBAT delay history (base delay, current-delay filter, RTT) is fed
//! on every acknowledgement whatever the mode, so a switch to p = 0 starts
//! with a complete picture of the path.
//!
//! Switching:
//! - **to MulTCP**: still in the initial slow start → the slow start goes
//!   on; slow-starting back to ssthresh (after a timeout or in a LEDBAT++
//!   slowdown, whose ssthresh remembers the window before it) → it goes on
//!   to ssthresh; otherwise congestion avoidance from the current window;
//! - **to LEDBAT**: never out of slow start → the initial slow start goes
//!   on; below ssthresh after a timeout → slow start back to it; otherwise
//!   the delay controller from the current window, which shrinks it
//!   multiplicatively if the queue is above the target;
//! - **between two p > 0**: only N changes; the next increase and decrease
//!   use it.

use std::time::Duration;

use braid_core::Instant;

use super::ledbat::{LedbatCore, LedbatVariant, Phase, LEDBAT_PARAMETERS};
use super::multcp::{self, Base, MulTcpCore};
use super::newreno::Window;
use super::{Acked, CcError, CongestionController};

/// Which controller a priority selects.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriorityMode {
    /// p = 0: LEDBAT.
    Ledbat,
    /// p > 0: MulTCP with this many virtual flows.
    MulTcp(f64),
}

/// DTL's priority controller, see the module docs.
///
/// Parameters ([`CongestionController::set_parameter`]):
/// - `priority`: p in [0, 100], default 1; 0 = LEDBAT, otherwise MulTCP with
///   N = p;
/// - LEDBAT's `target_ms`, `gain`, `beta`, `delay_beta`, `base_history`,
///   `current_filter`, `initial_slowdown`, `ss_exit`, `adaptive`, `variant`
///   (see [`super::Ledbat`]; `adaptive = 1` makes p = 0 yield on any
///   buffer, the default 0 is DTL's fixed-target AIMD);
/// - MulTCP's `multcp2` and `multcp_base` (see [`super::MulTcp`]):
///   `multcp_base` 1 = N virtual CUBIC flows (default), 0 = N virtual Reno
///   flows;
/// - `min_window`: floor in bytes, in `[SMSS, 2^30]`, default 2·SMSS.
///
/// ```
/// use braid_recovery::cc::{CongestionController, Priority, PriorityMode};
/// use braid_recovery::Instant;
///
/// let mut cc = Priority::new(1000, 100 * 1000);
/// assert_eq!(cc.mode(), PriorityMode::MulTcp(1.0));
/// for i in 1..=100 {
///     cc.on_sent(Instant::ZERO, 1000, i * 1000);
/// }
/// // p = 1 is one CUBIC flow: a loss keeps β = 0.7 of the flight.
/// cc.on_congestion_event(Instant::from_micros(50_000), Instant::ZERO, 1000, false);
/// assert_eq!(cc.window(), 70_000);
/// // Down to less than best effort and up to two flows' share: the window
/// // survives both switches.
/// cc.set_parameter("priority", 0.0).unwrap();
/// assert_eq!((cc.mode(), cc.window()), (PriorityMode::Ledbat, 70_000));
/// cc.set_priority(2.0).unwrap();
/// assert_eq!((cc.mode(), cc.window()), (PriorityMode::MulTcp(2.0), 70_000));
/// assert!(cc.set_priority(-1.0).is_err());
/// // N virtual Reno flows (MulTCP proper) instead of CUBIC flows.
/// cc.set_parameter("multcp_base", 0.0).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct Priority {
    window: Window,
    ledbat: LedbatCore,
    multcp: MulTcpCore,
    priority: f64,
}

/// Largest accepted priority (MulTCP's largest N).
const MAX_PRIORITY: f64 = multcp::MAX_N;

impl Priority {
    /// Priority 1 (one TCP flow's share) for packets of `max_datagram_size`
    /// bytes, starting with `initial_window` bytes (raised to the 2·SMSS
    /// minimum if smaller).
    pub fn new(max_datagram_size: u64, initial_window: u64) -> Self {
        let window = Window::new(max_datagram_size, initial_window);
        let multcp = MulTcpCore::new(1.0, window.cwnd, Base::Cubic);
        Priority {
            window,
            ledbat: LedbatCore::new(LedbatVariant::Rfc6817),
            multcp,
            priority: 1.0,
        }
    }

    /// Starts at `priority` instead of 1.
    pub fn with_priority(
        max_datagram_size: u64,
        initial_window: u64,
        priority: f64,
    ) -> Result<Self, CcError> {
        let mut p = Self::new(max_datagram_size, initial_window);
        p.set_priority(priority)?;
        Ok(p)
    }

    /// The priority in force.
    pub fn priority(&self) -> f64 {
        self.priority
    }

    /// The controller the priority selects.
    pub fn mode(&self) -> PriorityMode {
        if self.priority == 0.0 {
            PriorityMode::Ledbat
        } else {
            PriorityMode::MulTcp(self.priority)
        }
    }

    /// The LEDBAT queuing-delay estimate (kept up to date in both modes).
    pub fn queuing_delay(&self) -> Option<Duration> {
        self.ledbat.queuing_delay()
    }

    /// Changes the priority on a live connection (0 ≤ p ≤ 100); the window
    /// and all estimates are kept. Same as `set_parameter("priority", p)`.
    pub fn set_priority(&mut self, priority: f64) -> Result<(), CcError> {
        if !(0.0..=MAX_PRIORITY).contains(&priority) {
            return Err(CcError::OutOfRange {
                name: "priority",
                value: priority,
                expected: "a number from 0 (LEDBAT, less than best effort) to 100 (MulTCP with N = priority)",
            });
        }
        match (self.mode(), priority == 0.0) {
            (PriorityMode::MulTcp(_), true) => self.ledbat.enter(&self.window),
            (PriorityMode::Ledbat, false) => {
                let phase = self.ledbat.phase();
                self.multcp.enter(
                    &mut self.window,
                    phase == Phase::InitialSlowStart,
                    matches!(phase, Phase::Restoring { .. } | Phase::Frozen { .. }),
                );
            }
            _ => {}
        }
        if priority > 0.0 {
            self.multcp.set_n(priority);
        }
        self.priority = priority;
        Ok(())
    }
}

impl CongestionController for Priority {
    fn name(&self) -> &'static str {
        "priority"
    }

    fn on_sent(&mut self, _now: Instant, _bytes: u64, bytes_in_flight: u64) {
        self.window.on_sent(bytes_in_flight);
    }

    fn on_ack(&mut self, now: Instant, acked: &Acked) {
        match self.mode() {
            PriorityMode::Ledbat => self.ledbat.on_ack(&mut self.window, now, acked),
            PriorityMode::MulTcp(_) => {
                self.ledbat.observe(now, acked);
                self.multcp.on_ack(&mut self.window, now, acked);
            }
        }
    }

    fn on_ack_end(&mut self, _now: Instant, bytes_in_flight: u64) {
        self.window.set_flight(bytes_in_flight);
        self.ledbat.end_frame();
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
        persistent: bool,
    ) {
        let mode = self.mode();
        let w = &mut self.window;
        match mode {
            PriorityMode::Ledbat => {
                self.ledbat
                    .on_congestion_event(w, now, lost_sent_time, lost_bytes, persistent)
            }
            PriorityMode::MulTcp(_) => {
                self.multcp
                    .on_congestion_event(w, now, lost_sent_time, lost_bytes, persistent)
            }
        }
    }

    fn on_retransmission_timeout(&mut self, now: Instant) {
        match self.mode() {
            PriorityMode::Ledbat => self.ledbat.on_timeout(&mut self.window, now),
            PriorityMode::MulTcp(_) => self.multcp.on_timeout(&mut self.window, now),
        }
    }

    fn resume(&mut self, _now: Instant, from: &super::Handover) {
        // The priority in force picks which half takes the window over,
        // exactly as a priority change hands it between them.
        self.window.adopt(from);
        match self.mode() {
            PriorityMode::Ledbat => self.ledbat.enter(&self.window),
            PriorityMode::MulTcp(_) => {
                let restoring = from.slow_start && !from.initial_slow_start();
                self.multcp.enter(&mut self.window, from.initial_slow_start(), restoring)
            }
        }
    }

    fn window(&self) -> u64 {
        self.window.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.window.ssthresh
    }

    fn in_slow_start(&self) -> bool {
        match self.mode() {
            PriorityMode::Ledbat => self.ledbat.in_slow_start(),
            PriorityMode::MulTcp(_) => self.window.cwnd < self.window.ssthresh,
        }
    }

    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError> {
        match name {
            "priority" => self.set_priority(value),
            "min_window" => self.window.set_min_window(value),
            _ => self
                .ledbat
                .set_parameter(name, value)
                .or_else(|| self.multcp.set_parameter(name, value))
                .unwrap_or_else(|| {
                    Err(CcError::UnknownParameter {
                        controller: "priority",
                        name: name.to_string(),
                        known: format!(
                            "priority, {LEDBAT_PARAMETERS}, virtual_flows, multcp2, multcp_base, min_window"
                        ),
                    })
                }),
        }
    }

    fn parameters(&self) -> Vec<(&'static str, f64)> {
        let mut p = vec![("priority", self.priority)];
        p.extend(self.ledbat.parameters());
        p.push(("virtual_flows", self.multcp.virtual_flows()));
        p.push(("multcp2", self.multcp.multcp2()));
        p.push(("multcp_base", self.multcp.base()));
        p.push(("min_window", self.window.min_window as f64));
        p
    }
}

#[cfg(test)]
mod tests {
    use super::super::newreno::test_support::{self, ms, SMSS};
    use super::super::{Cubic, Ledbat, MulTcp, RttEstimate};
    use super::*;
    use proptest::prelude::*;

    const S: u64 = SMSS;

    fn t(x: u64) -> Instant {
        Instant::ZERO + ms(x)
    }

    fn ack(sent: Instant, owd_us: Option<i64>, rtt_ms: u64) -> Acked {
        let d = ms(rtt_ms);
        Acked {
            sent_time: sent,
            bytes: S,
            app_limited: false,
            rtt: RttEstimate {
                latest: d,
                smoothed: d,
                min: d,
            },
            one_way_delay_us: owd_us,
        }
    }

    /// A scripted path: every ack carries a delay sample that depends on
    /// the window (a bottleneck of `bdp` segments with queue growing beyond
    /// it, 1 ms per segment, under a clock offset of −3 s), losses when the
    /// queue passes `buffer`. Time goes on from `clock`.
    fn drive(cc: &mut dyn CongestionController, clock: &mut Instant, rounds: usize) -> Vec<u64> {
        let (bdp, buffer) = (40u64, 200u64);
        let mut now = *clock;
        let mut windows = Vec::new();
        for _ in 0..rounds {
            let n = (cc.window() / S).max(1);
            for i in 1..=n {
                cc.on_sent(now, S, i * S);
            }
            let queue = n.saturating_sub(bdp);
            let end = now + ms(40 + queue);
            if queue > buffer {
                cc.on_congestion_event(end, now, S, false);
            }
            for i in 0..n {
                cc.on_ack(
                    end,
                    &ack(now, Some(20_000 + queue as i64 * 1000 - 3_000_000), 40),
                );
                cc.on_ack_end(end, (n - i - 1) * S);
            }
            now = end;
            windows.push(cc.window());
        }
        *clock = now;
        windows
    }

    #[test]
    fn priority_zero_is_ledbat_and_positive_is_multcp() {
        let mut p = Priority::with_priority(S, 10 * S, 0.0).unwrap();
        let mut l = Ledbat::new(S, 10 * S);
        assert_eq!(
            drive(&mut p, &mut t(1000), 300),
            drive(&mut l, &mut t(1000), 300)
        );
        for base in [0.0, 1.0] {
            for n in [0.5, 1.0, 2.0, 3.5] {
                let mut p = Priority::with_priority(S, 10 * S, n).unwrap();
                p.set_parameter("multcp_base", base).unwrap();
                let mut m = MulTcp::new(S, 10 * S, n).unwrap();
                m.set_parameter("multcp_base", base).unwrap();
                assert_eq!(
                    drive(&mut p, &mut t(1000), 300),
                    drive(&mut m, &mut t(1000), 300),
                    "N = {n}, base {base}"
                );
            }
        }
    }

    /// By default p = 1 is the kernel's default TCP, CUBIC (RFC 9438),
    /// step for step.
    #[test]
    fn priority_one_is_cubic() {
        let mut p = Priority::new(S, 10 * S);
        assert!(p.parameters().contains(&("multcp_base", 1.0)));
        let mut c = Cubic::new(S, 10 * S);
        let (wp, wc) = (
            drive(&mut p, &mut t(1000), 400),
            drive(&mut c, &mut t(1000), 400),
        );
        assert_eq!(wp, wc);
        // The scripted path overflows: the run went through losses.
        assert!(p.ssthresh() < u64::MAX);
    }

    /// DTL item 3: a switch keeps the window; no restart from the initial
    /// window, no collapse. Reno flows (MulTCP), whose growth per round
    /// trip is exact.
    #[test]
    fn switches_keep_the_window() {
        let clock = &mut t(1000);
        let mut cc = Priority::with_priority(S, 10 * S, 0.0).unwrap();
        cc.set_parameter("multcp_base", 0.0).unwrap();
        let before = drive(&mut cc, clock, 100);
        let w = *before.last().unwrap();
        // LEDBAT fills the pipe (40 segments) and keeps the queue below
        // its threshold (at most the 100 ms target: 100 segments).
        assert!((40 * S..140 * S).contains(&w), "{w}");
        cc.set_priority(1.0).unwrap();
        assert_eq!(cc.window(), w);
        assert_eq!(
            cc.ssthresh(),
            w,
            "congestion avoidance from the current window"
        );
        assert!(!cc.in_slow_start());
        let after = drive(&mut cc, clock, 5);
        // MulTCP(1) in congestion avoidance: one segment per round trip.
        assert!(
            after.windows(2).all(|p| p[1] > p[0] && p[1] <= p[0] + S),
            "{after:?}"
        );
        let w = cc.window();
        cc.set_priority(2.5).unwrap();
        assert_eq!((cc.window(), cc.mode()), (w, PriorityMode::MulTcp(2.5)));
        let after = drive(&mut cc, clock, 20);
        assert!(
            after
                .windows(2)
                .all(|p| p[1] > p[0] + 2 * S && p[1] <= p[0] + 5 * S / 2),
            "{after:?}"
        );
        let w = cc.window();
        // A queue of w − 40 segments: above the threshold LEDBAT keeps.
        assert!(w > 80 * S, "the queue is now above LEDBAT's threshold: {w}");
        cc.set_priority(0.0).unwrap();
        assert_eq!(cc.window(), w);
        assert!(!cc.in_slow_start());
        // Back in LEDBAT with the history of the whole connection: the
        // queue is above the threshold, so the window shrinks (towards
        // the pipe, R/(R + q)), then settles below the target again.
        let after = drive(&mut cc, clock, 200);
        assert!(after[0] < w, "{after:?} from {w}");
        let settled = *after.last().unwrap();
        assert!(settled > 30 * S && settled < 145 * S, "{after:?}");
    }

    /// The yielding controller (`adaptive = 1`) on the scripted path keeps
    /// the pipe full (40 segments) with a queue far below DTL's 100 ms.
    #[test]
    fn the_yielding_controller_keeps_the_pipe_full_and_the_queue_short() {
        let clock = &mut t(1000);
        let mut cc = Priority::with_priority(S, 10 * S, 0.0).unwrap();
        cc.set_parameter("adaptive", 1.0).unwrap();
        let windows = drive(&mut cc, clock, 300);
        let late = &windows[200..];
        assert!(late.iter().all(|w| *w >= 38 * S && *w <= 60 * S), "{late:?}");
    }

    /// The same with CUBIC flows (the default): each switch keeps the
    /// window, congestion avoidance goes on from it, and p = 2 grows faster
    /// than p = 1 from the same state.
    #[test]
    fn switches_keep_the_window_with_cubic_flows() {
        let clock = &mut t(1000);
        let mut cc = Priority::with_priority(S, 10 * S, 0.0).unwrap();
        drive(&mut cc, clock, 100);
        let w = cc.window();
        let grown: Vec<u64> = [1.0, 2.0]
            .iter()
            .map(|&p| {
                let mut cc = cc.clone();
                let clock = &mut clock.clone();
                cc.set_priority(p).unwrap();
                assert_eq!((cc.window(), cc.ssthresh()), (w, w));
                assert!(!cc.in_slow_start());
                let after = drive(&mut cc, clock, 20);
                assert!(after.windows(2).all(|p| p[1] > p[0]), "{after:?}");
                let w2 = cc.window();
                cc.set_priority(0.0).unwrap();
                assert_eq!(cc.window(), w2);
                w2 - w
            })
            .collect();
        assert!(grown[1] > grown[0] * 3 / 2, "{grown:?}");
    }

    #[test]
    fn a_switch_during_the_initial_slow_start_continues_it() {
        let clock = &mut t(1000);
        let mut cc = Priority::with_priority(S, 10 * S, 0.0).unwrap();
        drive(&mut cc, clock, 1);
        assert_eq!(cc.window(), 20 * S);
        cc.set_priority(1.0).unwrap();
        assert!(cc.in_slow_start());
        drive(&mut cc, clock, 1);
        assert_eq!(cc.window(), 40 * S);
        cc.set_priority(0.0).unwrap();
        assert!(cc.in_slow_start());
        drive(&mut cc, clock, 1);
        assert_eq!(cc.window(), 80 * S);
    }

    #[test]
    fn the_delay_history_is_kept_in_multcp_mode() {
        let mut cc = Priority::new(S, 10 * S);
        assert_eq!(cc.queuing_delay(), None);
        drive(&mut cc, &mut t(1000), 20);
        assert!(cc.queuing_delay().is_some());
    }

    #[test]
    fn priority_is_validated() {
        let mut cc = Priority::new(S, 10 * S);
        for bad in [-0.1, f64::NAN, f64::INFINITY, 100.5] {
            let err = cc.set_parameter("priority", bad).unwrap_err();
            assert!(err.to_string().contains("`priority`"), "{err}");
            assert_eq!(cc.priority(), 1.0);
        }
        assert!(Priority::with_priority(S, S, -1.0).is_err());
        let err = cc.set_parameter("n", 2.0).unwrap_err();
        assert!(err.to_string().contains("priority, target_ms"), "{err}");
        cc.set_parameter("target_ms", 60.0).unwrap();
        cc.set_parameter("multcp2", 0.0).unwrap();
        let p = cc.parameters();
        assert_eq!(p[0], ("priority", 1.0));
        assert!(p.contains(&("target_ms", 60.0)) && p.contains(&("multcp2", 0.0)));
        assert_eq!(p.last(), Some(&("min_window", (2 * S) as f64)));
    }

    /// One event of a random sequence with delay samples and priority
    /// switches (the shared driver's acks carry no delay).
    #[derive(Debug, Clone)]
    enum Op {
        Send(u64),
        Ack {
            owd_us: Option<i64>,
            rtt_ms: u64,
            app_limited: bool,
        },
        AckEnd,
        Lose {
            persistent: bool,
        },
        Rto,
        Advance(u64),
        Priority(f64),
        Set(usize, f64),
    }

    const NAMES: [&str; 11] = [
        "target_ms",
        "gain",
        "beta",
        "delay_beta",
        "base_history",
        "current_filter",
        "variant",
        "multcp2",
        "multcp_base",
        "min_window",
        "bogus",
    ];

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (1u64..3000).prop_map(Op::Send),
            6 => (prop::option::weighted(0.9, -1_000_000i64..1_000_000), 0u64..2000, any::<bool>())
                .prop_map(|(owd_us, rtt_ms, app_limited)| Op::Ack { owd_us, rtt_ms, app_limited }),
            3 => Just(Op::AckEnd),
            2 => prop::bool::weighted(0.1).prop_map(|persistent| Op::Lose { persistent }),
            1 => Just(Op::Rto),
            4 => (0u64..200_000_000_000).prop_map(Op::Advance),
            2 => prop_oneof![Just(0.0), Just(1.0), 0.0..120.0f64, any::<f64>()].prop_map(Op::Priority),
            1 => (0..NAMES.len(), prop_oneof![any::<f64>(), 0.0..2.0f64, 1.0..200.0f64, 1000.0..5000.0f64])
                .prop_map(|(i, v)| Op::Set(i, v)),
        ]
    }

    fn replay(cc: &mut dyn CongestionController, smss: u64, ops: &[Op]) {
        let smss = smss.max(1);
        let mut now = t(1);
        let mut outstanding = std::collections::VecDeque::new();
        let mut flight = 0u64;
        for op in ops {
            match *op {
                Op::Send(bytes) => {
                    flight += bytes;
                    outstanding.push_back((now, bytes));
                    cc.on_sent(now, bytes, flight);
                }
                Op::Ack {
                    owd_us,
                    rtt_ms,
                    app_limited,
                } => {
                    if let Some((sent, bytes)) = outstanding.pop_front() {
                        flight -= bytes;
                        let mut a = ack(sent, owd_us, rtt_ms);
                        a.bytes = bytes;
                        a.app_limited = app_limited;
                        cc.on_ack(now, &a);
                    }
                }
                Op::AckEnd => cc.on_ack_end(now, flight),
                Op::Lose { persistent } => {
                    if let Some((sent, bytes)) = outstanding.pop_front() {
                        flight -= bytes;
                        cc.on_congestion_event(now, sent, bytes, persistent);
                    }
                }
                Op::Rto => cc.on_retransmission_timeout(now),
                Op::Advance(nanos) => now += Duration::from_nanos(nanos),
                Op::Priority(p) => {
                    let before = (cc.window(), cc.ssthresh(), cc.parameters());
                    match cc.set_parameter("priority", p) {
                        Ok(()) => assert_eq!(cc.window(), before.0, "a switch keeps the window"),
                        Err(_) => assert_eq!((cc.window(), cc.ssthresh(), cc.parameters()), before),
                    }
                }
                Op::Set(i, v) => {
                    let before = cc.parameters();
                    if cc.set_parameter(NAMES[i], v).is_err() {
                        assert_eq!(cc.parameters(), before);
                    }
                }
            }
            let w = cc.window();
            assert!(w >= smss, "window {w} after {op:?}");
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

    proptest! {
        #[test]
        fn random_events_and_switches_never_panic(
            smss in 0u64..2000,
            iw in 0u64..100_000,
            ops in prop::collection::vec(op(), 0..300),
        ) {
            replay(&mut Priority::new(smss, iw), smss, &ops);
            replay(&mut Ledbat::new(smss, iw), smss, &ops);
            replay(&mut Ledbat::plus_plus(smss, iw), smss, &ops);
            replay(&mut MulTcp::new(smss, iw, 2.0).unwrap(), smss, &ops);
        }

        #[test]
        fn shared_driver_invariants_hold(
            smss in 0u64..2000,
            iw in 0u64..100_000,
            ops in prop::collection::vec(test_support::op(), 0..200),
        ) {
            test_support::check_invariants(&mut Priority::new(smss, iw), smss, &ops);
        }
    }
}
