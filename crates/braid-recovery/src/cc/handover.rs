//! Hand-over between congestion controllers on a live connection.
//!
//! A connection that changes its controller (an adaptation rule's
//! `set cc = bbr`, issue 20) must not restart from the initial window, nor
//! keep a window the new controller never chose. The model: a controller's
//! operating point is the congestion window, whether the path's capacity
//! was found yet (slow start or not, with the slow-start threshold), the
//! bytes in flight, the RTT estimates and the delivery rate. These are
//! properties of the *path*, measured by the connection or by every
//! controller alike, so the successor takes them over and continues from
//! them; what is specific to one algorithm (CUBIC's `W_max` and epoch,
//! LEDBAT's base-delay history, BBR's gain cycle) starts afresh, the way
//! RFC 9438 §4.8 starts a CUBIC stage after a timeout (`K = 0`, the
//! window where it is) and DTL's priority controller hands its window
//! between LEDBAT and MulTCP (seed 001's DTL chapter).
//!
//! The rules every [`CongestionController::resume`] follows:
//!
//! - the window continues where the predecessor left it (at least the
//!   successor's minimum window), so nothing bursts and nothing stalls:
//!   what is in flight fits the new window exactly as it fitted the old;
//! - a predecessor still in its initial slow start hands over a flow that
//!   has not found the capacity: the successor continues slow start; any
//!   other starts in congestion avoidance (or the model-based equivalent)
//!   at the current window, as after RFC 5681's loss recovery;
//! - RTT and delivery-rate estimates seed the successor's models (RFC 9002
//!   §5: the RTT estimator belongs to the path and is kept; BBR's
//!   bottleneck-bandwidth filter gets the predecessor's rate as its first
//!   sample, draft-cardwell-ccwg-bbr §4.5.2.2);
//! - no recovery period is carried over: a loss reported after the switch
//!   is a congestion signal the successor answers by its own rule.

use std::time::Duration;

use super::{CongestionController, RttEstimate};

/// A controller's operating point, handed to its successor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Handover {
    /// Congestion window in bytes.
    pub window: u64,
    /// Slow-start threshold in bytes (`u64::MAX` before the first
    /// reduction).
    pub ssthresh: u64,
    /// The predecessor was in slow start: it had not found the capacity.
    pub slow_start: bool,
    /// Bytes in flight at the switch (the connection's count).
    pub bytes_in_flight: u64,
    /// The path's RTT estimates, once it has a sample.
    pub rtt: Option<RttEstimate>,
    /// Estimated delivery rate in bytes per second, once the RTT is known:
    /// the window over the smoothed RTT (what a window-limited flow
    /// delivers), the model-based controllers' bandwidth estimate if it is
    /// larger.
    pub delivery_rate: Option<f64>,
}

impl Handover {
    /// The operating point of `cc`, with the connection's bytes in flight
    /// and RTT estimates.
    pub fn of(cc: &dyn CongestionController, bytes_in_flight: u64, rtt: Option<RttEstimate>) -> Handover {
        let window = cc.window();
        let delivery_rate = rtt.and_then(|r| {
            let srtt = r.smoothed.max(Duration::from_micros(1)).as_secs_f64();
            let by_window = window as f64 / srtt;
            by_window.is_finite().then_some(by_window)
        });
        Handover {
            window,
            ssthresh: cc.ssthresh(),
            slow_start: cc.in_slow_start(),
            bytes_in_flight,
            rtt,
            delivery_rate,
        }
    }

    /// The predecessor was in its *initial* slow start (no threshold set
    /// yet), as opposed to slow-starting back to a threshold after a
    /// timeout.
    pub fn initial_slow_start(&self) -> bool {
        self.slow_start && self.ssthresh == u64::MAX
    }
}
