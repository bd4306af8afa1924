//! Congestion control: the [`CongestionController`] trait every Braid
//! transport drives, and the controllers shipped with it.
//!
//! The connection calls the controller on every send, every newly
//! acknowledged packet, every congestion event and every retransmission
//! timeout; it asks it for the congestion window and the pacing rate before
//! sending. Controllers see time only as the [`Instant`]s they are handed.
//!
//! - [`NewReno`]: RFC 5681 (slow start, congestion avoidance) with the
//!   RFC 6582 recovery period.
//! - [`Cubic`]: RFC 9438.
//! - [`Bbr`]: a BBR-style model-based controller.
//! - [`Ledbat`]: RFC 6817 with DTL's changes, and LEDBAT++.
//! - [`MulTcp`]: N virtual flows ([`virtual_flows`] by default).
//! - [`Priority`]: DTL's priority p ≥ 0, changeable on a live connection.
//! - [`TargetQueue`]: delivery-rate window with a small standing queue on
//!   purpose, for links whose rate swings (cellular).
//!
//! Parameters can be changed on a live connection through
//! [`CongestionController::set_parameter`], which is how later layers
//! (priorities, learners) steer a running flow; the controller itself is
//! replaced by building the new one and handing it the old one's
//! operating point ([`Handover`], [`CongestionController::resume`],
//! [`CcAlgorithm::take_over`]).

mod bbr;
mod contention;
mod cubic;
mod delay;
mod delivery_rate;
mod handover;
mod ledbat;
mod multcp;
mod newreno;
mod priority;
mod target_queue;
mod virtual_flows;
mod yielding;

pub use bbr::Bbr;
pub use cubic::Cubic;
pub use handover::Handover;
pub use ledbat::{Ledbat, LedbatVariant};
pub use multcp::MulTcp;
pub use newreno::NewReno;
pub use priority::{Priority, PriorityMode};
pub use target_queue::TargetQueue;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use braid_core::Instant;

/// Round-trip-time estimates at the moment an acknowledgement is processed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RttEstimate {
    /// The sample taken from this acknowledgement, or the previous one.
    pub latest: Duration,
    /// Smoothed RTT (RFC 6298 SRTT).
    pub smoothed: Duration,
    /// Minimum RTT seen on the connection.
    pub min: Duration,
}

/// One newly acknowledged packet, as reported to [`CongestionController::on_ack`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Acked {
    /// When the packet was sent.
    pub sent_time: Instant,
    /// Bytes it counted in flight (its UDP payload size).
    pub bytes: u64,
    /// The sender was application-limited when this packet was sent (it had
    /// less data to send than the window allowed): controllers must not grow
    /// the window on such acknowledgements (RFC 7661 spirit, RFC 9438 §5.8).
    pub app_limited: bool,
    /// RTT estimates after this acknowledgement.
    pub rtt: RttEstimate,
    /// One-way delay sample in microseconds, *plus an unknown constant clock
    /// offset* between the hosts (so it may be negative). Only differences
    /// between samples are meaningful (LEDBAT's base-delay method). `None`
    /// when the peer's timestamps were unusable.
    pub one_way_delay_us: Option<i64>,
}

/// A parameter that could not be set.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CcError {
    /// The controller has no parameter of this name.
    #[error("congestion controller `{controller}` has no parameter `{name}` (known: {known})")]
    UnknownParameter {
        controller: &'static str,
        name: String,
        known: String,
    },
    /// The value is outside the parameter's allowed range.
    #[error("parameter `{name}` = {value} is out of range: expected {expected}")]
    OutOfRange {
        name: &'static str,
        value: f64,
        expected: &'static str,
    },
}

/// A congestion controller, driven by a connection.
///
/// All sizes are in bytes of UDP payload. The connection guarantees:
/// `on_sent` is called for every packet counted in flight; each such packet
/// is later reported exactly once, either to `on_ack` or as part of a loss
/// (`on_congestion_event`, `on_retransmission_timeout`).
pub trait CongestionController: Send + fmt::Debug {
    /// Short lowercase name (`"newreno"`, `"cubic"`).
    fn name(&self) -> &'static str;

    /// A packet of `bytes` bytes was sent; `bytes_in_flight` includes it.
    fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64);

    /// A packet was newly acknowledged. Called once per packet, in packet
    /// number order, for all packets of one ACK frame, then `on_ack_end`.
    fn on_ack(&mut self, now: Instant, acked: &Acked);

    /// All packets of one ACK frame have been reported; `bytes_in_flight`
    /// is what remains outstanding.
    fn on_ack_end(&mut self, _now: Instant, _bytes_in_flight: u64) {}

    /// Packets were declared lost. `lost_sent_time` is the send time of the
    /// newest lost packet: a controller reacts at most once per round trip
    /// by ignoring losses of packets sent before its current recovery period
    /// began (RFC 6582 §3.2 step 4, RFC 9002 §7.3.2). `persistent` is true
    /// when the losses span more than a retransmission timeout.
    fn on_congestion_event(
        &mut self,
        now: Instant,
        lost_sent_time: Instant,
        lost_bytes: u64,
        persistent: bool,
    );

    /// The retransmission timer expired (RFC 5681 §3.1: the window collapses
    /// to the loss window).
    fn on_retransmission_timeout(&mut self, now: Instant);

    /// The congestion window in bytes: the most the connection may have in
    /// flight.
    fn window(&self) -> u64;

    /// The slow-start threshold in bytes (`u64::MAX` before the first loss).
    fn ssthresh(&self) -> u64;

    /// True while in slow start.
    fn in_slow_start(&self) -> bool {
        self.window() < self.ssthresh()
    }

    /// Pacing rate in bytes per second, given the smoothed RTT. The default
    /// spreads the window over the RTT with headroom: 2× in slow start (so
    /// pacing never slows the doubling), 1.25× afterwards (as Linux's
    /// `tcp_pacing_ss_ratio` / `tcp_pacing_ca_ratio`).
    fn pacing_rate(&self, smoothed_rtt: Duration) -> f64 {
        let rtt = smoothed_rtt.as_secs_f64().max(1e-6);
        let gain = if self.in_slow_start() { 2.0 } else { 1.25 };
        gain * self.window() as f64 / rtt
    }

    /// Take over from another controller on a live connection (see
    /// [`Handover`] for the model): continue from its window, slow-start
    /// state, RTT and delivery-rate estimates.
    fn resume(&mut self, now: Instant, from: &Handover);

    /// Set a named parameter on a live connection. The current window and
    /// estimates are kept; the new value takes effect from the next event.
    fn set_parameter(&mut self, name: &str, value: f64) -> Result<(), CcError>;

    /// The current values of all parameters, by name.
    fn parameters(&self) -> Vec<(&'static str, f64)>;
}

/// The controllers Braid ships, selectable by name (`newreno`, `cubic`,
/// `bbr`, `ledbat`, `ledbat++`, `multcp`, `priority`, `tq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CcAlgorithm {
    /// RFC 5681 / RFC 6582.
    NewReno,
    /// RFC 9438.
    #[default]
    Cubic,
    /// RFC 6817 LEDBAT with DTL's changes: less than best effort.
    Ledbat,
    /// LEDBAT++ (draft-irtf-iccrg-ledbat-plus-plus).
    #[serde(rename = "ledbat++")]
    LedbatPlusPlus,
    /// MulTCP with N = 1 virtual flow (set `n` to change it).
    MulTcp,
    /// DTL's priority controller, priority 1 (set `priority` to change it:
    /// 0 = LEDBAT, p > 0 = N = p virtual CUBIC flows, or N virtual Reno
    /// flows, MulTCP proper, with `multcp_base=0`).
    Priority,
    /// The BBR-style model-based controller ([`Bbr`]): paces at the
    /// measured bottleneck rate and keeps its queue short; random loss
    /// does not lower its rate.
    Bbr,
    /// The target-queue controller ([`TargetQueue`]): a window of the
    /// measured delivery rate times the base RTT plus a small target
    /// queuing delay, so rate swings are followed within a round trip.
    Tq,
}

impl CcAlgorithm {
    /// Every algorithm, in the order shown to users.
    pub const ALL: [CcAlgorithm; 8] = [
        CcAlgorithm::NewReno,
        CcAlgorithm::Cubic,
        CcAlgorithm::Bbr,
        CcAlgorithm::Ledbat,
        CcAlgorithm::LedbatPlusPlus,
        CcAlgorithm::MulTcp,
        CcAlgorithm::Priority,
        CcAlgorithm::Tq,
    ];

    /// Build a controller for packets of `max_datagram_size` bytes with an
    /// initial window of `initial_window` bytes.
    pub fn build(self, max_datagram_size: u64, initial_window: u64) -> Box<dyn CongestionController> {
        match self {
            CcAlgorithm::NewReno => Box::new(NewReno::new(max_datagram_size, initial_window)),
            CcAlgorithm::Cubic => Box::new(Cubic::new(max_datagram_size, initial_window)),
            CcAlgorithm::Ledbat => Box::new(Ledbat::new(max_datagram_size, initial_window)),
            CcAlgorithm::LedbatPlusPlus => {
                Box::new(Ledbat::plus_plus(max_datagram_size, initial_window))
            }
            CcAlgorithm::MulTcp => Box::new(
                MulTcp::new(max_datagram_size, initial_window, 1.0).expect("N = 1 is valid"),
            ),
            CcAlgorithm::Priority => Box::new(Priority::new(max_datagram_size, initial_window)),
            CcAlgorithm::Bbr => Box::new(Bbr::new(max_datagram_size, initial_window)),
            CcAlgorithm::Tq => Box::new(TargetQueue::new(max_datagram_size, initial_window)),
        }
    }

    /// Build a controller of this algorithm that continues from `old`'s
    /// operating point (see [`Handover`]): the live switch of a
    /// connection's controller. `initial_window` is the connection's
    /// configured initial window (the restart window after idle).
    pub fn take_over(
        self,
        now: Instant,
        old: &dyn CongestionController,
        max_datagram_size: u64,
        initial_window: u64,
        bytes_in_flight: u64,
        rtt: Option<RttEstimate>,
    ) -> Box<dyn CongestionController> {
        let h = Handover::of(old, bytes_in_flight, rtt);
        let mut cc = self.build(max_datagram_size, initial_window);
        cc.resume(now, &h);
        cc
    }

    /// The names of [`CcAlgorithm::ALL`], in that order: the one list
    /// every parameter, flag and help text takes its values from.
    pub const NAMES: [&'static str; 8] = {
        let mut names = [""; 8];
        let mut i = 0;
        while i < names.len() {
            names[i] = CcAlgorithm::ALL[i].as_str();
            i += 1;
        }
        names
    };

    /// The name accepted by [`FromStr`].
    pub const fn as_str(self) -> &'static str {
        match self {
            CcAlgorithm::NewReno => "newreno",
            CcAlgorithm::Cubic => "cubic",
            CcAlgorithm::Ledbat => "ledbat",
            CcAlgorithm::LedbatPlusPlus => "ledbat++",
            CcAlgorithm::MulTcp => "multcp",
            CcAlgorithm::Priority => "priority",
            CcAlgorithm::Bbr => "bbr",
            CcAlgorithm::Tq => "tq",
        }
    }
}

impl fmt::Display for CcAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown congestion-control name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown congestion control `{0}`: expected one of newreno, cubic, ledbat, ledbat++, multcp, priority, bbr, tq")]
pub struct UnknownCcAlgorithm(pub String);

impl FromStr for CcAlgorithm {
    type Err = UnknownCcAlgorithm;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "newreno" | "reno" => Ok(CcAlgorithm::NewReno),
            "cubic" => Ok(CcAlgorithm::Cubic),
            "ledbat" => Ok(CcAlgorithm::Ledbat),
            "ledbat++" | "ledbatpp" => Ok(CcAlgorithm::LedbatPlusPlus),
            "multcp" => Ok(CcAlgorithm::MulTcp),
            "priority" | "dtl" => Ok(CcAlgorithm::Priority),
            "bbr" => Ok(CcAlgorithm::Bbr),
            "tq" | "target-queue" => Ok(CcAlgorithm::Tq),
            _ => Err(UnknownCcAlgorithm(s.to_string())),
        }
    }
}
