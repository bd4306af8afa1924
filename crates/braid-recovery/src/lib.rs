//! Loss recovery's shared parts: congestion control, RTT estimation and
//! pacing, for every Braid transport.
//!
//! Owns: the [`CongestionController`] trait and every controller Braid
//! ships ([`cc`]: NewReno, CUBIC, BBR, LEDBAT, LEDBAT++, MulTCP and DTL's
//! priority controller), the RFC 6298 RTT estimator ([`rtt`]), the pacer
//! ([`pacer`]) and the one-way-delay measurements the delay-based
//! controllers share. `braid-proto` (every path of a connection, single or
//! multipath) and `braid-exon` both drive these, so a controller behaves
//! the same under either protocol.
//!
//! Must not depend on: either protocol crate, tokio, sockets, threads, the
//! system clock or a thread RNG. Controllers see time only as the
//! [`Instant`]s they are handed, and acknowledgements as [`Acked`] values.
//!
//! ```
//! use braid_recovery::{Acked, CcAlgorithm, RttEstimate};
//! use braid_core::Instant;
//! use std::time::Duration;
//!
//! let mut cc = CcAlgorithm::Cubic.build(1200, 10 * 1200);
//! let t0 = Instant::ZERO;
//! cc.on_sent(t0, 1200, 1200);
//! let rtt = Duration::from_millis(20);
//! let est = RttEstimate { latest: rtt, smoothed: rtt, min: rtt };
//! let ack = Acked { sent_time: t0, bytes: 1200, app_limited: false, rtt: est, one_way_delay_us: None };
//! cc.on_ack(t0 + rtt, &ack);
//! assert!(cc.window() > 10 * 1200, "slow start grows the window");
//! ```

pub mod cc;
pub mod pacer;
pub mod rtt;

pub use braid_core::Instant;
pub use cc::{
    Acked, Bbr, CcAlgorithm, CcError, CongestionController, Cubic, Handover, Ledbat, LedbatVariant, MulTcp,
    NewReno, Priority, PriorityMode, RttEstimate, UnknownCcAlgorithm,
};
pub use pacer::Pacer;
pub use rtt::RttEstimator;
