//! One path of a connection: a pair of local and remote addresses with its
//! own packet-number space, acknowledgement state, RTT estimate, loss
//! detection, congestion controller and pacer (an MPTCP subflow, RFC 8684
//! §2; a QUIC multipath path, draft-ietf-quic-multipath §2).
//!
//! Loss detection follows RFC 9002 §6: every transmission gets a new packet
//! number; a packet is lost when a packet 3 numbers later on the same path
//! is acknowledged (the SACK-based fast retransmit of RFC 6675), or when it
//! is older than 9/8 of the path's RTT (the RACK time threshold of RFC
//! 8985). When no ACK comes for 2·SRTT + max_ack_delay with data in
//! flight, a tail loss probe (a PING) goes out, so that a lost tail is
//! found by the time threshold when the probe is acknowledged (RFC 8985
//! §7, RFC 9002 §6.2); probes back off and stop where the RTO would come
//! first. Single-path connections only: a multipath connection keeps the
//! MPTCP model of the thesis (§3.3.1), where a subflow's RTO reinjects its
//! data on the other paths and marks it potentially failed. The
//! retransmission timeout is RFC 6298's (see [`crate::rtt`]).
//! Packet numbers, and so loss detection, never compare packets of two
//! paths: reordering between paths is not loss.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use braid_core::Instant;
use braid_progmp::SubflowInfo;

use crate::cc::{Acked, CongestionController};
use crate::config::TransportConfig;
use crate::pacer::Pacer;
use crate::range_set::RangeSet;
use crate::rtt::RttEstimator;
use crate::wire::AckFrame;

/// RFC 9002 §6.1.1: packet reordering threshold.
pub(crate) const PACKET_THRESHOLD: u64 = 3;
/// Most SACK ranges sent in one ACK frame, and kept for received packets.
pub(crate) const MAX_ACK_RANGES: usize = 32;

/// Stream ranges carried by one packet; almost always one contiguous range.
#[derive(Debug, Default, Clone)]
pub(crate) struct StreamRanges {
    pub first: Option<Range<u64>>,
    rest: Vec<Range<u64>>,
}

impl StreamRanges {
    pub fn push(&mut self, r: Range<u64>) {
        match &mut self.first {
            None => self.first = Some(r),
            Some(f) if f.end == r.start => f.end = r.end,
            Some(_) => match self.rest.last_mut() {
                Some(l) if l.end == r.start => l.end = r.end,
                _ => self.rest.push(r),
            },
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.first.iter().cloned().chain(self.rest.iter().cloned())
    }
}

/// A packet sent and not yet acknowledged or declared lost.
#[derive(Debug)]
pub(crate) struct SentPacket {
    pub time: Instant,
    pub size: u64,
    pub ack_eliciting: bool,
    pub app_limited: bool,
    /// It carried one segment (scheduled sending), whose stream range is
    /// `ranges.first`; otherwise `ranges` are chunks of the stream.
    pub segment: bool,
    /// It carried path-management frames.
    pub control: bool,
    pub ranges: StreamRanges,
}

/// Exponentially weighted one-way delay estimator (thesis §5.8.2): only
/// differences between paths of one connection are meaningful.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct DelayEstimate {
    smoothed: Option<i64>,
    latest: i64,
}

impl DelayEstimate {
    fn update(&mut self, sample: i64) {
        self.latest = sample;
        // Same gain as SRTT (RFC 6298 (2.3)): 1/8.
        self.smoothed = Some(match self.smoothed {
            None => sample,
            Some(s) => s + (sample - s) / 8,
        });
    }
    pub fn smoothed(&self) -> i64 {
        self.smoothed.unwrap_or(0)
    }
}

/// A path's part in scheduled sending.
#[derive(Debug, Default)]
pub(crate) struct PathSched {
    /// Segments the scheduler gave this path, not yet sent (`QUEUED`).
    pub queued: VecDeque<u64>,
    /// Segments this path lost and resends itself, as an MPTCP subflow
    /// retransmits its own losses.
    pub retransmit: VecDeque<u64>,
    /// The local application marked the path as a backup.
    pub backup_local: bool,
    /// The peer asked us to treat it as a backup (`PATH_STATUS`).
    pub backup_remote: bool,
    /// Highest `PATH_STATUS` sequence number received for this path.
    pub status_seq_in: u64,
    /// The scheduler's per-subflow integer (`USER`).
    pub user: i64,
    /// Packets declared lost on this path (`LOST_SKBS`).
    pub lost: u64,
    /// A retransmission timeout fired and nothing sent since has been
    /// acknowledged (`IS_LOSSY`, Linux's `TCP_CA_Loss` and MPTCP's
    /// "potentially failed").
    pub lossy: bool,
    /// `DELAY_OUT` (eq. 5.1) and `DELAY_IN` (eq. 5.2), µs.
    pub delay_out: DelayEstimate,
    pub delay_in: DelayEstimate,
}

/// Per-path counters.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct PathCounters {
    pub packets_sent: u64,
    pub bytes_sent: u64,
    pub packets_received: u64,
    pub bytes_received: u64,
    pub packets_lost: u64,
    pub stream_bytes_sent: u64,
}

/// Path validation in progress (RFC 9000 §8.2): 8 unpredictable bytes sent
/// to `remote`, which the peer must echo from there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Challenge {
    /// The bytes to echo.
    pub token: [u8; 8],
    /// Where the challenge goes (the path's address for a new path; the
    /// peer's new address when it moved).
    pub remote: SocketAddr,
    /// When it was last sent.
    pub sent_at: Option<Instant>,
    /// How many times it was sent.
    pub tries: u8,
}

#[derive(Debug)]
pub(crate) struct Path {
    /// Identifier on the wire, chosen by the client, never reused.
    pub id: u32,
    /// Bit of this path in segments' `sent_on` masks.
    pub slot: u8,
    /// Local address its packets leave from (`None`: the socket's choice).
    pub local: Option<SocketAddr>,
    pub remote: SocketAddr,
    /// Largest datagram, bytes: the unit of `CWND` in packets.
    pub mtu: u64,
    /// The configured initial window in bytes (a controller switched in
    /// keeps it as its restart window after idle).
    pub initial_window: u64,
    /// A packet sent on the path has been acknowledged: the peer receives
    /// on it and it has an RTT sample. Only validated paths carry data.
    pub validated: bool,
    /// Opened again on the addresses of a path that failed (client side,
    /// see `connection/paths.rs`): until validated it is a probe, given up
    /// at its first unanswered retransmission timeout.
    pub reopened: bool,

    // Sending.
    pub next_pn: u64,
    /// Packets sent and not yet acknowledged or lost, indexed by `pn - sent_base`.
    pub sent: VecDeque<Option<SentPacket>>,
    pub sent_base: u64,
    pub bytes_in_flight: u64,
    pub ack_eliciting_in_flight: u64,
    pub largest_acked: Option<u64>,
    pub loss_time: Option<Instant>,
    pub rto_armed_at: Option<Instant>,
    /// Tail loss probes sent since the timer was last (re)started.
    pub tail_probes: u32,
    /// The peer's longest deliberate ACK delay (the probe timeout allows
    /// for it).
    pub max_ack_delay: Duration,
    pub cc: Box<dyn CongestionController>,
    pub rtt: RttEstimator,
    pub pacer: Pacer,
    pub pacing_until: Option<Instant>,
    pub ping_pending: bool,
    /// A challenge sent (or to send) to `remote` or to a new address of the
    /// peer, awaiting its echo.
    pub challenge: Option<Challenge>,
    /// A challenge the peer sent on this path, to echo.
    pub response_due: Option<[u8; 8]>,

    // Receiving.
    pub received: RangeSet,
    /// Packet numbers below this were forgotten by `received` (see
    /// [`Path::on_received`]).
    pub received_floor: u64,
    pub largest_received: Option<(u64, Instant)>,
    /// Peer timestamp of the highest-numbered packet received (echoed).
    pub echo_timestamp_us: u64,
    pub ack_eliciting_unacked: u32,
    pub ack_immediately: bool,
    pub ack_deadline: Option<Instant>,

    pub sched: PathSched,
    pub counters: PathCounters,
}

impl Path {
    pub fn new(id: u32, slot: u8, local: Option<SocketAddr>, remote: SocketAddr, config: &TransportConfig) -> Self {
        let mtu = u64::from(config.max_datagram_size);
        Path {
            id,
            slot,
            local,
            remote,
            mtu,
            initial_window: mtu * u64::from(config.initial_window_packets),
            validated: false,
            reopened: false,
            next_pn: 0,
            sent: VecDeque::new(),
            sent_base: 0,
            bytes_in_flight: 0,
            ack_eliciting_in_flight: 0,
            largest_acked: None,
            loss_time: None,
            rto_armed_at: None,
            tail_probes: 0,
            max_ack_delay: config.max_ack_delay,
            cc: config.congestion_control.build(mtu, mtu * u64::from(config.initial_window_packets)),
            rtt: Self::rtt_estimator(config.initial_rtt, config),
            pacer: Pacer::new(16 * mtu),
            pacing_until: None,
            ping_pending: false,
            challenge: None,
            response_due: None,
            received: RangeSet::new(),
            received_floor: 0,
            largest_received: None,
            echo_timestamp_us: 0,
            ack_eliciting_unacked: 0,
            ack_immediately: false,
            ack_deadline: None,
            sched: PathSched::default(),
            counters: PathCounters::default(),
        }
    }

    /// The RTO is capped at a quarter of the idle timeout: a backed-off
    /// sender must still probe several times per idle period, or its
    /// silent peer would time out a live connection.
    fn rtt_estimator(initial: Duration, config: &TransportConfig) -> RttEstimator {
        RttEstimator::new(initial, config.min_rto, config.max_rto.min(config.idle_timeout / 4).max(config.min_rto))
    }

    /// Assume `initial` as the RTT until the first sample (a path re-opened
    /// on known addresses starts from what the failed path measured, so
    /// its probe is neither given up early on a slow link nor waited for
    /// needlessly on a fast one: RFC 6298 (2.1)'s RTO of 3 such RTTs).
    pub fn seed_rtt(&mut self, initial: Duration, config: &TransportConfig) {
        self.rtt = Self::rtt_estimator(initial, config);
    }

    /// Replaces the congestion controller by one of `algorithm` that
    /// continues from the current one's operating point (window, slow-start
    /// state, RTT estimates and delivery rate; see
    /// [`braid_recovery::Handover`]). Bytes in flight and the RTT estimator
    /// belong to the path (RFC 9002 §5, §6) and are kept as they are; the
    /// pacer continues at the new controller's rate.
    pub fn set_congestion_control(&mut self, now: Instant, algorithm: crate::cc::CcAlgorithm) {
        let rtt = self.rtt.has_sample().then(|| self.rtt.estimate());
        self.cc = algorithm.take_over(now, self.cc.as_ref(), self.mtu, self.initial_window, self.bytes_in_flight, rtt);
    }

    pub fn is_backup(&self) -> bool {
        self.sched.backup_local || self.sched.backup_remote
    }

    /// The path as a ProgMP scheduler sees it (one snapshot per run).
    pub fn subflow_info(&self) -> SubflowInfo {
        let mtu = self.mtu.max(1);
        let packets = |bytes: u64| u32::try_from(bytes / mtu).unwrap_or(u32::MAX);
        let us = |d: Duration| d.as_micros() as u64;
        SubflowInfo {
            id: self.id,
            rtt_us: if self.rtt.has_sample() { us(self.rtt.smoothed()) } else { 0 },
            rtt_var_us: us(self.rtt.variation()),
            cwnd: packets(self.cc.window()),
            ssthresh: packets(self.cc.ssthresh()),
            in_flight: u32::try_from(self.ack_eliciting_in_flight).unwrap_or(u32::MAX),
            queued: self.sched.queued.len() as u32,
            lost: u32::try_from(self.sched.lost).unwrap_or(u32::MAX),
            is_backup: self.is_backup(),
            throttled: !self.validated
                || self.pacing_until.is_some()
                || self.sched.queued.len() >= crate::multipath::PATH_QUEUE_LIMIT,
            lossy: self.sched.lossy,
            delay_in_us: self.sched.delay_in.smoothed(),
            delay_out_us: self.sched.delay_out.smoothed(),
            delay_out_sample_us: self.sched.delay_out.latest,
            user: self.sched.user,
        }
    }

    pub fn sent_packet(&self, pn: u64) -> Option<&SentPacket> {
        let idx = pn.checked_sub(self.sent_base)?;
        self.sent.get(idx as usize)?.as_ref()
    }

    pub fn take_sent(&mut self, pn: u64) -> Option<SentPacket> {
        let idx = pn.checked_sub(self.sent_base)? as usize;
        let p = self.sent.get_mut(idx)?.take()?;
        self.bytes_in_flight -= p.size;
        if p.ack_eliciting {
            self.ack_eliciting_in_flight -= 1;
        }
        while let Some(None) = self.sent.front() {
            self.sent.pop_front();
            self.sent_base += 1;
        }
        Some(p)
    }

    /// Takes the packets an ACK frame newly acknowledges into `out`, highest
    /// first. Returns the send time of the largest acknowledged packet if
    /// it is newly acknowledged and ack-eliciting (an RTT sample, RFC 9002
    /// §5.1), or `None`; the outer `None` means the frame acknowledges a
    /// packet never sent and must be ignored.
    pub fn take_acked(&mut self, ack: &AckFrame, out: &mut Vec<(u64, SentPacket)>) -> Option<Option<Instant>> {
        if ack.largest >= self.next_pn {
            return None;
        }
        let sample = self.sent_packet(ack.largest).filter(|p| p.ack_eliciting).map(|p| p.time);
        for (lo, hi) in ack.ranges() {
            let lo = lo.max(self.sent_base);
            if hi < lo {
                continue;
            }
            for pn in (lo..=hi).rev() {
                if let Some(p) = self.take_sent(pn) {
                    out.push((pn, p));
                }
            }
        }
        if !out.is_empty() {
            self.largest_acked = Some(self.largest_acked.map_or(ack.largest, |l| l.max(ack.largest)));
        }
        Some(sample)
    }

    /// RTT sample from the largest newly acknowledged packet, less the
    /// peer's ACK delay (RFC 9002 §5.3), and the one-way delay samples of
    /// the timestamps (LEDBAT; thesis eq. 5.1 and 5.2). Returns the
    /// one-way delay for the congestion controller.
    pub fn on_rtt_sample(
        &mut self,
        raw: Duration,
        ack_delay_us: u64,
        max_ack_delay: Duration,
        peer_ts_us: u64,
        echo_us: u64,
    ) -> Option<i64> {
        let delay = Duration::from_micros(ack_delay_us).min(max_ack_delay);
        let sample = if raw > self.rtt.min() + delay { raw - delay } else { raw };
        self.rtt.update(sample);
        // One-way delay plus clock offset: when the peer received the
        // packet (its clock) minus when we sent it (ours).
        (echo_us > 0).then(|| {
            let peer_received = peer_ts_us as i64 - ack_delay_us as i64;
            let owd = peer_received - echo_us as i64;
            self.sched.delay_out.update(owd);
            owd
        })
    }

    /// The handshake's answer echoes our first packet's timestamp: a first
    /// `DELAY_OUT` sample (eq. 5.1 with no processing time), so a path
    /// that has carried no data yet is comparable with the others.
    pub fn on_handshake_echo(&mut self, now_us: u64, peer_ts_us: u64, echo_us: u64) {
        if peer_ts_us > 0 && echo_us > 0 {
            self.sched.delay_out.update(peer_ts_us as i64 - echo_us as i64);
            self.on_timestamp(now_us, peer_ts_us);
        }
    }

    /// `DELAY_IN` (thesis eq. 5.2): our receive time minus the peer's send
    /// timestamp, both in µs since each side's connection start.
    pub fn on_timestamp(&mut self, now_us: u64, peer_ts_us: u64) {
        if peer_ts_us > 0 {
            self.sched.delay_in.update(now_us as i64 - peer_ts_us as i64);
        }
    }

    /// Reports newly acknowledged packets (packet-number order) to the
    /// congestion controller.
    pub fn report_acked(&mut self, now: Instant, acked: &[(u64, SentPacket)], one_way_delay_us: Option<i64>) {
        let rtt = self.rtt.estimate();
        for (_, p) in acked.iter().rev() {
            let a = Acked { sent_time: p.time, bytes: p.size, app_limited: p.app_limited, rtt, one_way_delay_us };
            self.cc.on_ack(now, &a);
        }
        self.cc.on_ack_end(now, self.bytes_in_flight);
    }

    /// RFC 9002 §6.1: packet and time thresholds. Lost packets are taken
    /// out of the sent queue into `lost`.
    pub fn detect_lost(&mut self, now: Instant, lost: &mut Vec<(u64, SentPacket)>) {
        self.loss_time = None;
        let Some(largest_acked) = self.largest_acked else { return };
        let rtt = self.rtt.latest().max(self.rtt.smoothed());
        let loss_delay = (rtt * 9 / 8).max(Duration::from_millis(1));
        let lost_send_time = now - loss_delay;
        let first = self.sent_base;
        let end = first + largest_acked.saturating_sub(first).min(self.sent.len() as u64);
        // Absolute packet numbers: taking a packet may advance `sent_base`
        // but never moves another packet's number.
        for pn in first..end {
            let Some(p) = self.sent_packet(pn) else { continue };
            if p.time <= lost_send_time || largest_acked >= pn + PACKET_THRESHOLD {
                if let Some(p) = self.take_sent(pn) {
                    lost.push((pn, p));
                }
            } else {
                let t = p.time + loss_delay;
                self.loss_time = Some(self.loss_time.map_or(t, |l| l.min(t)));
            }
        }
    }

    /// Takes every outstanding packet into `lost` (retransmission timeout).
    pub fn take_all(&mut self, lost: &mut Vec<(u64, SentPacket)>) {
        let base = self.sent_base;
        let n = self.sent.len() as u64;
        for pn in base..base + n {
            if let Some(p) = self.take_sent(pn) {
                lost.push((pn, p));
            }
        }
    }

    /// The congestion controller's reaction to packets declared lost.
    /// Returns whether the window shrank.
    pub fn on_lost(&mut self, now: Instant, lost: &[(u64, SentPacket)], by_timeout: bool) -> bool {
        let mut lost_bytes = 0;
        let mut newest_sent: Option<Instant> = None;
        for (_, p) in lost {
            lost_bytes += p.size;
            newest_sent = Some(newest_sent.map_or(p.time, |t| t.max(p.time)));
        }
        self.counters.packets_lost += lost.len() as u64;
        self.sched.lost += lost.len() as u64;
        if let (Some(sent), false) = (newest_sent, by_timeout) {
            let before = self.cc.window();
            self.cc.on_congestion_event(now, sent, lost_bytes, false);
            return self.cc.window() < before;
        }
        false
    }

    /// Forget everything in flight (the connection closed).
    pub fn clear_in_flight(&mut self) {
        self.sent.clear();
        self.sent_base = self.next_pn;
        self.bytes_in_flight = 0;
        self.ack_eliciting_in_flight = 0;
        self.loss_time = None;
        self.rto_armed_at = None;
        self.tail_probes = 0;
    }

    /// (Re)start the retransmission timer at `now` (RFC 6298 (5.1),
    /// (5.3)); a new tail loss probe may go out.
    pub fn restart_rto(&mut self, now: Instant) {
        self.rto_armed_at = Some(now);
        self.tail_probes = 0;
    }

    /// When the next tail loss probe is due (RFC 8985 §7.2, with RFC 9002
    /// §6.2.1's allowance for the peer's ACK delay): PTO = 2·SRTT +
    /// max_ack_delay after the timer started, each further probe after
    /// twice the previous wait (RFC 9002 §6.2.1's back-off: a probe can
    /// be lost too), as long as that is earlier than the RTO. A flight
    /// whose last packets are lost gets no ACK that could reveal the
    /// loss; without the probes it waits for the RTO, at least 200 ms,
    /// which on a sub-millisecond path is hundreds of round trips of
    /// silence, and then collapses the window.
    pub fn tail_probe_at(&self) -> Option<Instant> {
        if !self.rtt.has_sample() || self.ack_eliciting_in_flight == 0 || self.tail_probes >= 16 {
            return None;
        }
        let armed = self.rto_armed_at?;
        let pto = (self.rtt.smoothed() * 2 + self.max_ack_delay).max(Duration::from_millis(1));
        // Probe n (from 0) is due (2^(n+1) - 1) PTOs after the start.
        let wait = pto.checked_mul((2u32 << self.tail_probes) - 1)?;
        (wait < self.rtt.rto()).then_some(armed + wait)
    }

    /// Records a received packet number. Returns (duplicate, is largest,
    /// in order). A number below the oldest range still remembered counts
    /// as a duplicate: it may have been received, and a replay must never
    /// act twice.
    #[inline]
    pub fn on_received(&mut self, now: Instant, pn: u64, timestamp_us: u64) -> (bool, bool, bool) {
        let duplicate = pn < self.received_floor || self.received.contains(pn);
        if !duplicate {
            self.received.insert(pn..pn + 1);
            while self.received.range_count() > MAX_ACK_RANGES {
                if let Some(forgotten) = self.received.pop_first() {
                    self.received_floor = self.received_floor.max(forgotten.end);
                }
            }
        }
        let is_largest = self.largest_received.is_none_or(|(l, _)| pn > l);
        let in_order = self.largest_received.is_none_or(|(l, _)| pn == l + 1);
        if is_largest {
            self.largest_received = Some((pn, now));
            self.echo_timestamp_us = timestamp_us;
        }
        (duplicate, is_largest, in_order)
    }

    /// Schedules the acknowledgement of an ack-eliciting packet (RFC 9000
    /// §13.2.1 spirit: at once when out of order, else after
    /// `ack_frequency` packets or `max_ack_delay`).
    pub fn on_ack_eliciting(&mut self, now: Instant, immediate: bool, config: &TransportConfig) {
        self.ack_eliciting_unacked += 1;
        if immediate || self.ack_eliciting_unacked >= config.ack_frequency {
            self.ack_immediately = true;
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now + config.max_ack_delay);
        }
    }

    /// An acknowledgement is due now (not merely owed).
    pub fn ack_due(&self, now: Instant) -> bool {
        self.ack_immediately || (self.ack_eliciting_unacked > 0 && self.ack_deadline.is_some_and(|t| now >= t))
    }

    /// The ACK frame for this path's received packets, at most enough
    /// ranges to fit `room` bytes (each range costs at most 16 bytes).
    pub fn ack_frame(&self, now: Instant, room: usize, max_data: u64) -> Option<AckFrame> {
        let (_, received_at) = self.largest_received?;
        let delay = now.saturating_duration_since(received_at).as_micros() as u64;
        let max_ranges = (room.saturating_sub(48) / 16).clamp(1, MAX_ACK_RANGES);
        let ranges = self.received.iter_rev().take(max_ranges).map(|r| (r.start, r.end - 1));
        AckFrame::for_path(self.id, ranges, delay, max_data)
    }

    /// An ACK frame was sent: nothing is owed any more.
    pub fn on_ack_sent(&mut self) {
        self.ack_eliciting_unacked = 0;
        self.ack_immediately = false;
        self.ack_deadline = None;
    }

    /// The earliest of this path's timers.
    pub fn timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |d: Option<Instant>| {
            if let Some(d) = d {
                t = Some(t.map_or(d, |x| x.min(d)));
            }
        };
        consider(self.loss_time);
        if self.loss_time.is_none() {
            consider(self.rto_armed_at.map(|a| a + self.rtt.rto()));
        }
        if self.ack_eliciting_unacked > 0 {
            consider(self.ack_deadline);
        }
        consider(self.pacing_until);
        t
    }
}
