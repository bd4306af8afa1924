//! Delivery-rate samples and round-trip counting, shared by the
//! controllers that model the path from its delivery rate (BBR and the
//! target-queue controller): draft-cheng-iccrg-delivery-rate-estimation §3,
//! rounds as in BBR (draft-cardwell-iccrg-bbr-congestion-control §4.1.1.3).
//!
//! Each packet remembers, when sent, how much had been delivered and when;
//! its acknowledgement gives the bytes delivered meanwhile over the longer
//! of the send and the acknowledgement intervals (§3.2–3.3).

use std::collections::VecDeque;
use std::time::Duration;

use braid_core::Instant;

use super::Acked;

/// Most send snapshots kept (bounds memory if acknowledgements stop).
const MAX_SNAPSHOTS: usize = 1 << 17;

/// Per-packet state at send time (§3.2).
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    sent_time: Instant,
    delivered: u64,
    delivered_time: Instant,
    first_sent_time: Instant,
    /// Bytes in flight once this packet was sent (BBRv3 §2.2
    /// packet.tx_in_flight).
    tx_in_flight: u64,
}

/// What one acknowledged packet tells, when its send snapshot was found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RateSample {
    /// Bytes delivered between the packet's send and its acknowledgement.
    pub delivered: u64,
    /// The sampling interval: the longer of the send and ack intervals.
    pub interval: Duration,
    /// The packet began a new round trip.
    pub round_start: bool,
    /// Bytes in flight once the packet was sent.
    pub tx_in_flight: u64,
}

impl RateSample {
    /// The delivery rate, bytes per second, if the interval is at least
    /// `min_interval` (shorter ones over-estimate, §3.3) and not zero.
    pub fn rate(&self, min_interval: Duration) -> Option<f64> {
        (self.interval >= min_interval && !self.interval.is_zero())
            .then(|| self.delivered as f64 / self.interval.as_secs_f64())
    }
}

/// The delivery-rate estimator (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct DeliveryRate {
    /// Bytes delivered (acknowledged) so far.
    pub delivered: u64,
    /// When the last acknowledgement arrived.
    pub delivered_time: Instant,
    first_sent_time: Instant,
    snapshots: VecDeque<Snapshot>,
    /// Round trips counted so far.
    pub round: u64,
    next_round_delivered: u64,
}

impl DeliveryRate {
    pub fn new() -> Self {
        DeliveryRate {
            delivered: 0,
            delivered_time: Instant::ZERO,
            first_sent_time: Instant::ZERO,
            snapshots: VecDeque::new(),
            round: 0,
            next_round_delivered: 0,
        }
    }

    /// A packet of `bytes` was sent at `now`, `bytes_in_flight` with it.
    pub fn on_sent(&mut self, now: Instant, bytes: u64, bytes_in_flight: u64) {
        if bytes_in_flight <= bytes {
            // Restarting from idle: intervals start now (§3.2).
            self.first_sent_time = now;
            self.delivered_time = now;
        }
        if self.snapshots.len() >= MAX_SNAPSHOTS {
            self.snapshots.pop_front();
        }
        self.snapshots.push_back(Snapshot {
            sent_time: now,
            delivered: self.delivered,
            delivered_time: self.delivered_time,
            first_sent_time: self.first_sent_time,
            tx_in_flight: bytes_in_flight,
        });
    }

    /// One acknowledged packet: counts its bytes as delivered, and gives
    /// its sample if its send snapshot is still there (acknowledgements
    /// come in send order; a reordered one has no sample).
    pub fn on_ack(&mut self, now: Instant, acked: &Acked) -> Option<RateSample> {
        self.delivered += acked.bytes;
        self.delivered_time = now;
        // Packets sent before this one were acknowledged or lost already.
        while self.snapshots.front().is_some_and(|s| s.sent_time < acked.sent_time) {
            self.snapshots.pop_front();
        }
        let s = self.snapshots.front().copied().filter(|s| s.sent_time == acked.sent_time)?;
        self.snapshots.pop_front();
        self.first_sent_time = s.sent_time;
        let send_elapsed = s.sent_time.saturating_duration_since(s.first_sent_time);
        let ack_elapsed = now.saturating_duration_since(s.delivered_time);
        let round_start = s.delivered >= self.next_round_delivered;
        if round_start {
            self.next_round_delivered = self.delivered;
            self.round += 1;
        }
        Some(RateSample {
            delivered: self.delivered - s.delivered,
            interval: send_elapsed.max(ack_elapsed),
            round_start,
            tx_in_flight: s.tx_in_flight,
        })
    }

    /// Forget the snapshots (a retransmission timeout: what was in flight
    /// will not be acknowledged in order).
    /// Starts sampling afresh at `now` (a controller taking over a live
    /// connection): packets already in flight were sent before this
    /// sampler saw them and give no rate sample.
    pub fn restart(&mut self, now: Instant) {
        self.snapshots.clear();
        self.delivered_time = now;
        self.first_sent_time = now;
    }

    pub fn clear(&mut self) {
        self.snapshots.clear();
    }
}
