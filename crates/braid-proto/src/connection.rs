//! One connection: handshake state, the reliable message stream, ACK
//! generation, loss recovery, RTO, congestion and flow control, pacing,
//! close and idle timeout.
//!
//! Loss recovery follows RFC 9002 §6 (every transmission gets a new packet
//! number; a packet is lost when a packet 3 numbers later is acknowledged,
//! the SACK-based fast retransmit of RFC 6675, or when it is older than
//! 9/8 of the RTT, the RACK time threshold of RFC 8985). The retransmission
//! timeout is RFC 6298's (see [`crate::rtt`]).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use braid_core::Instant;
use bytes::Bytes;

use crate::cc::{Acked, CongestionController};
use crate::config::TransportConfig;
use crate::endpoint::{CloseReason, ConnectionHandle, Event};
use crate::pacer::Pacer;
use crate::range_set::RangeSet;
use crate::recv_stream::{RecvStream, INITIAL_MAX_DATA};
use crate::rtt::RttEstimator;
use crate::send_stream::SendStream;
use crate::stats::ConnectionStats;
use crate::wire::{self, AckFrame, Frame, Header, Packet, PacketType};

/// RFC 9002 §6.1.1: packet reordering threshold.
const PACKET_THRESHOLD: u64 = 3;
/// Consecutive unanswered retransmission timeouts after which a silent
/// peer with data outstanding is given up (once the idle timeout passed).
const UNANSWERED_RTOS_BEFORE_IDLE: u32 = 6;
/// A data packet at most this many bytes short of full is padded to full.
const MAX_PAD_TO_FULL: usize = 32;
/// Most SACK ranges sent in one ACK frame, and kept for received packets.
const MAX_ACK_RANGES: usize = 32;
/// Close code sent when a server refuses a connection.
pub(crate) const CLOSE_REFUSED: u64 = 0x1_0000;
/// Close code for protocol violations.
const CLOSE_PROTOCOL_VIOLATION: u64 = 0x1_0001;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Client,
    Server,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Client waiting for Accept.
    Handshaking,
    Established,
    /// We sent CLOSE and linger to repeat it if the peer keeps talking.
    Closing { until: Instant },
    /// The peer sent CLOSE; we linger to absorb its late packets.
    Draining { until: Instant },
    /// Nothing more will be sent or received.
    Closed,
}

/// Stream ranges carried by one packet; almost always one contiguous range.
#[derive(Debug, Default, Clone)]
struct StreamRanges {
    first: Option<Range<u64>>,
    rest: Vec<Range<u64>>,
}

impl StreamRanges {
    fn push(&mut self, r: Range<u64>) {
        match &mut self.first {
            None => self.first = Some(r),
            Some(f) if f.end == r.start => f.end = r.end,
            Some(_) => match self.rest.last_mut() {
                Some(l) if l.end == r.start => l.end = r.end,
                _ => self.rest.push(r),
            },
        }
    }
    fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.first.iter().cloned().chain(self.rest.iter().cloned())
    }
}

#[derive(Debug)]
struct SentPacket {
    time: Instant,
    size: u64,
    ack_eliciting: bool,
    app_limited: bool,
    ranges: StreamRanges,
}

/// What the endpoint needs to route an outgoing datagram.
pub(crate) struct Outgoing {
    pub destination: SocketAddr,
    pub size: usize,
}

pub(crate) struct Connection {
    handle: ConnectionHandle,
    side: Side,
    state: State,
    config: TransportConfig,
    remote: SocketAddr,
    local_cid: u64,
    remote_cid: u64,
    /// Client: the cookie to echo in Initials. Server: unused.
    cookie: Bytes,
    /// Connection start: wire timestamps count from here.
    epoch: Instant,
    created: Instant,

    // Handshake.
    initial_due: bool,
    initial_sent_at: Option<Instant>,
    initial_attempts: u32,
    /// Server: the client has not yet proven it knows our CID, so our
    /// packets keep the Accept header that carries it.
    peer_confirmed: bool,

    // Sending.
    next_pn: u64,
    /// Packets sent and not yet acknowledged or lost, indexed by `pn - sent_base`.
    sent: VecDeque<Option<SentPacket>>,
    sent_base: u64,
    bytes_in_flight: u64,
    ack_eliciting_in_flight: u64,
    largest_acked: Option<u64>,
    loss_time: Option<Instant>,
    rto_armed_at: Option<Instant>,
    last_ack_eliciting_sent: Instant,
    cc: Box<dyn CongestionController>,
    rtt: RttEstimator,
    pacer: Pacer,
    pacing_until: Option<Instant>,
    send: SendStream,
    peer_max_data: u64,
    ping_pending: bool,
    close_frame: Option<(u64, Bytes)>,
    close_requested: bool,
    want_writable: bool,
    /// Probe for a window update when flow control blocks us with nothing
    /// in flight.
    flow_probe_at: Option<Instant>,

    // Receiving.
    recv: RecvStream,
    received: RangeSet,
    largest_received: Option<(u64, Instant)>,
    /// Peer timestamp of the highest-numbered packet received (echoed).
    echo_timestamp_us: u64,
    ack_eliciting_unacked: u32,
    ack_immediately: bool,
    ack_deadline: Option<Instant>,
    last_received: Instant,
    close_reason: Option<CloseReason>,
    /// `recv_message` has reported the close to the application.
    app_saw_close: bool,

    events: Vec<Event>,
    stats: ConnectionStats,
}

impl Connection {
    pub(crate) fn new_client(
        handle: ConnectionHandle,
        now: Instant,
        remote: SocketAddr,
        local_cid: u64,
        config: TransportConfig,
    ) -> Self {
        let mut c = Self::new(handle, Side::Client, now, remote, local_cid, 0, config);
        c.state = State::Handshaking;
        c.initial_due = true;
        c
    }

    pub(crate) fn new_server(
        handle: ConnectionHandle,
        now: Instant,
        remote: SocketAddr,
        local_cid: u64,
        remote_cid: u64,
        config: TransportConfig,
    ) -> Self {
        let mut c = Self::new(handle, Side::Server, now, remote, local_cid, remote_cid, config);
        // The Accept must be acknowledged: it carries a PING.
        c.ping_pending = true;
        c.events.push(Event::Accepted(handle));
        c
    }

    fn new(
        handle: ConnectionHandle,
        side: Side,
        now: Instant,
        remote: SocketAddr,
        local_cid: u64,
        remote_cid: u64,
        config: TransportConfig,
    ) -> Self {
        let mtu = u64::from(config.max_datagram_size);
        let cc = config.congestion_control.build(mtu, mtu * u64::from(config.initial_window_packets));
        Connection {
            handle,
            side,
            state: State::Established,
            remote,
            local_cid,
            remote_cid,
            cookie: Bytes::new(),
            epoch: now,
            created: now,
            initial_due: false,
            initial_sent_at: None,
            initial_attempts: 0,
            peer_confirmed: side == Side::Client,
            next_pn: 0,
            sent: VecDeque::new(),
            sent_base: 0,
            bytes_in_flight: 0,
            ack_eliciting_in_flight: 0,
            largest_acked: None,
            loss_time: None,
            rto_armed_at: None,
            last_ack_eliciting_sent: now,
            cc,
            // A backed-off sender must still probe several times per idle
            // period, or its silent peer would time out a live connection.
            rtt: RttEstimator::new(
                config.initial_rtt,
                config.min_rto,
                config.max_rto.min(config.idle_timeout / 4).max(config.min_rto),
            ),
            pacer: Pacer::new(16 * mtu),
            pacing_until: None,
            send: SendStream::new(),
            peer_max_data: INITIAL_MAX_DATA,
            ping_pending: false,
            close_frame: None,
            close_requested: false,
            want_writable: false,
            flow_probe_at: None,
            recv: RecvStream::new(config.receive_window, config.max_message_size),
            received: RangeSet::new(),
            largest_received: None,
            echo_timestamp_us: 0,
            ack_eliciting_unacked: 0,
            ack_immediately: false,
            ack_deadline: None,
            last_received: now,
            close_reason: None,
            app_saw_close: false,
            events: Vec::new(),
            stats: ConnectionStats::default(),
            config,
        }
    }

    // ----- accessors -----

    pub(crate) fn local_cid(&self) -> u64 {
        self.local_cid
    }
    pub(crate) fn remote(&self) -> SocketAddr {
        self.remote
    }
    pub(crate) fn is_established(&self) -> bool {
        self.state == State::Established
    }
    pub(crate) fn is_closed(&self) -> bool {
        self.state == State::Closed
    }
    /// Closed, and the application has read everything and been told
    /// (`recv_message` returned `Closed`): the endpoint may forget it.
    pub(crate) fn is_drained(&self) -> bool {
        self.state == State::Closed && self.app_saw_close
    }
    pub(crate) fn close_reason(&self) -> Option<&CloseReason> {
        self.close_reason.as_ref()
    }
    pub(crate) fn drain_events(&mut self, out: &mut VecDeque<Event>) {
        out.extend(self.events.drain(..));
    }
    pub(crate) fn congestion_controller(&mut self) -> &mut dyn CongestionController {
        self.cc.as_mut()
    }

    pub(crate) fn stats(&self) -> ConnectionStats {
        let mut s = self.stats;
        s.smoothed_rtt = self.rtt.smoothed();
        s.min_rtt = self.rtt.min();
        s.rto = self.rtt.rto();
        s.cwnd = self.cc.window();
        s.bytes_in_flight = self.bytes_in_flight;
        s.stream_bytes_acked = self.send.acked_bytes();
        s.stream_bytes_received = self.recv.received_in_order();
        s
    }

    fn timestamp_us(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_micros() as u64
    }

    // ----- application interface -----

    pub(crate) fn send_message(&mut self, message: Bytes) -> Result<(), crate::SendError> {
        match &self.state {
            State::Handshaking | State::Established if !self.close_requested => {}
            _ => {
                let reason = self.close_reason.clone().unwrap_or(CloseReason::Local);
                return Err(crate::SendError::Closed(reason));
            }
        }
        let size = message.len() as u64;
        if size > self.config.max_message_size {
            return Err(crate::SendError::TooLarge { size, max: self.config.max_message_size });
        }
        // Accept while any room is left, so a message larger than the buffer
        // still flows without draining the pipe first; memory stays below
        // send_buffer + max_message_size.
        if self.send.buffered() >= self.config.send_buffer {
            self.want_writable = true;
            return Err(crate::SendError::Blocked(message));
        }
        self.send.push(message);
        self.stats.messages_sent += 1;
        Ok(())
    }

    pub(crate) fn recv_message(&mut self) -> Result<Option<Bytes>, crate::RecvError> {
        if let Some(msg) = self.recv.pop() {
            self.stats.messages_received += 1;
            return Ok(Some(msg));
        }
        match (&self.state, &self.close_reason) {
            (State::Closed | State::Draining { .. } | State::Closing { .. }, Some(reason)) => {
                self.app_saw_close = true;
                Err(crate::RecvError::Closed(reason.clone()))
            }
            _ => Ok(None),
        }
    }

    /// Graceful close: flush, then CLOSE.
    pub(crate) fn close(&mut self, now: Instant) {
        match self.state {
            // Queued messages still go out once the handshake completes;
            // with nothing queued there is nothing to flush.
            State::Handshaking if self.send.is_fully_acked() => self.finish(CloseReason::Local),
            State::Handshaking => self.close_requested = true,
            State::Established => {
                self.close_requested = true;
                self.maybe_send_close(now);
            }
            _ => {}
        }
    }

    fn maybe_send_close(&mut self, now: Instant) {
        if self.close_requested && self.state == State::Established && self.send.is_fully_acked() {
            self.events.push(Event::Flushed(self.handle));
            self.close_frame = Some((0, Bytes::new()));
            self.close_reason = Some(CloseReason::Local);
            self.state = State::Closing { until: now + self.rtt.rto() * 3 };
        }
    }

    /// Immediate close with a CLOSE frame telling the peer why.
    fn abort(&mut self, now: Instant, code: u64, reason: CloseReason) {
        if matches!(self.state, State::Closed | State::Draining { .. }) {
            return;
        }
        let text = match &reason {
            CloseReason::ProtocolViolation(t) => Bytes::from(t.clone().into_bytes()),
            _ => Bytes::new(),
        };
        self.close_frame = Some((code, text));
        self.close_reason = Some(reason.clone());
        self.state = State::Closing { until: now + self.rtt.rto() * 3 };
        self.events.push(Event::Closed(self.handle, reason));
    }

    /// Enter `Closed` and tell the application (once).
    fn finish(&mut self, reason: CloseReason) {
        if self.state == State::Closed {
            return;
        }
        let already_told = matches!(self.state, State::Draining { .. })
            || (matches!(self.state, State::Closing { .. }) && self.close_reason.as_ref() != Some(&CloseReason::Local));
        self.state = State::Closed;
        if self.close_reason.is_none() {
            self.close_reason = Some(reason.clone());
        }
        if !already_told {
            let reason = self.close_reason.clone().unwrap_or(reason);
            self.events.push(Event::Closed(self.handle, reason));
        }
        self.clear_in_flight();
    }

    fn clear_in_flight(&mut self) {
        self.sent.clear();
        self.sent_base = self.next_pn;
        self.bytes_in_flight = 0;
        self.ack_eliciting_in_flight = 0;
        self.loss_time = None;
        self.rto_armed_at = None;
    }

    // ----- handshake (client side) -----

    pub(crate) fn on_retry(&mut self, now: Instant, cookie: Bytes, echo_timestamp_us: u64) {
        if self.state != State::Handshaking {
            return;
        }
        // The RETRY echoes our Initial's timestamp: an RTT sample, which
        // also ends the back-off so the cookie is used well within its
        // lifetime (a lost Initial is resent after one RTO, not after the
        // backed-off one that the RETRY's own delay built up).
        if echo_timestamp_us > 0 {
            let sample = self.timestamp_us(now).saturating_sub(echo_timestamp_us);
            self.rtt.update(Duration::from_micros(sample));
        }
        self.cookie = cookie;
        self.initial_due = true;
        self.last_received = now;
    }

    /// Server: a client retransmitted its Initial; our Accept was lost.
    pub(crate) fn on_repeated_initial(&mut self) {
        if self.state == State::Established && !self.peer_confirmed {
            self.ping_pending = true;
        }
    }

    // ----- receiving -----

    pub(crate) fn handle_packet(&mut self, now: Instant, remote: SocketAddr, packet: Packet, size: usize) {
        if self.state == State::Closed {
            return;
        }
        let header = &packet.header;
        match (self.side, header.ty) {
            (Side::Client, PacketType::Accept) => {
                if self.state == State::Handshaking {
                    self.remote_cid = header.src_cid;
                    self.state = State::Established;
                    // The Accept echoes our Initial's timestamp: a first RTT sample.
                    if header.echo_timestamp_us > 0 {
                        let sample = self.timestamp_us(now).saturating_sub(header.echo_timestamp_us);
                        self.rtt.update(Duration::from_micros(sample));
                    }
                    self.events.push(Event::Connected(self.handle));
                }
            }
            (Side::Client, PacketType::Data) => {
                if self.state == State::Handshaking {
                    return; // we cannot answer before we know the server's CID
                }
            }
            (Side::Server, PacketType::Data) => self.peer_confirmed = true,
            _ => return,
        }
        self.stats.packets_received += 1;
        self.stats.bytes_received += size as u64;
        self.last_received = now;

        let pn = header.pn;
        let duplicate = self.received.contains(pn);
        if duplicate {
            self.stats.duplicate_packets += 1;
        } else {
            self.received.insert(pn..pn + 1);
            while self.received.range_count() > MAX_ACK_RANGES {
                self.received.pop_first();
            }
        }
        let is_largest = self.largest_received.is_none_or(|(l, _)| pn > l);
        let in_order = self.largest_received.is_none_or(|(l, _)| pn == l + 1);
        if is_largest {
            self.largest_received = Some((pn, now));
            self.echo_timestamp_us = header.timestamp_us;
            // Follow a peer whose address changed (NAT rebinding).
            self.remote = remote;
        }

        let mut ack_eliciting = false;
        let mut newly_readable = false;
        let timestamp_us = header.timestamp_us;
        let echo_us = header.echo_timestamp_us;
        for frame in packet.frames() {
            match frame {
                Frame::Ping => ack_eliciting = true,
                Frame::Ack(ack) => self.on_ack_frame(now, &ack, timestamp_us, echo_us),
                Frame::Data { offset, data, .. } => {
                    ack_eliciting = true;
                    if matches!(self.state, State::Closing { .. } | State::Draining { .. }) {
                        continue;
                    }
                    match self.recv.on_data(offset, data) {
                        Ok(n) => newly_readable |= n > 0,
                        Err(e) => {
                            self.stats.malformed_packets += 1;
                            let reason = CloseReason::ProtocolViolation(e.to_string());
                            self.abort(now, CLOSE_PROTOCOL_VIOLATION, reason);
                            return;
                        }
                    }
                }
                Frame::Close { code, reason } => {
                    self.on_close_frame(now, code, reason);
                    return;
                }
            }
        }
        if newly_readable {
            self.events.push(Event::Readable(self.handle));
        }
        if let State::Closing { .. } = self.state {
            // The peer keeps talking: repeat our CLOSE.
            if self.close_frame.is_none() {
                self.close_frame = Some((0, Bytes::new()));
            }
            return;
        }
        if ack_eliciting {
            self.ack_eliciting_unacked += 1;
            if !in_order || duplicate || self.ack_eliciting_unacked >= self.config.ack_frequency {
                self.ack_immediately = true;
            } else if self.ack_deadline.is_none() {
                self.ack_deadline = Some(now + self.config.max_ack_delay);
            }
        }
        self.maybe_send_close(now);
    }

    fn on_close_frame(&mut self, now: Instant, code: u64, reason: Bytes) {
        let reason = if code == CLOSE_REFUSED {
            CloseReason::Refused
        } else if code == CLOSE_PROTOCOL_VIOLATION {
            CloseReason::ProtocolViolation(format!("peer reported: {}", String::from_utf8_lossy(&reason)))
        } else {
            CloseReason::Remote { code, reason: String::from_utf8_lossy(&reason).into_owned() }
        };
        match self.state {
            State::Closing { .. } => self.finish(reason),
            State::Closed | State::Draining { .. } => {}
            _ => {
                self.close_reason = Some(reason.clone());
                self.events.push(Event::Closed(self.handle, reason));
                self.state = State::Draining { until: now + self.rtt.rto() * 3 };
                self.clear_in_flight();
            }
        }
    }

    fn on_ack_frame(&mut self, now: Instant, ack: &AckFrame, peer_ts_us: u64, echo_us: u64) {
        self.peer_max_data = self.peer_max_data.max(ack.max_data);
        if ack.largest >= self.next_pn {
            return; // acknowledges a packet never sent: ignore the frame
        }
        let largest_newly_acked = self.sent_packet(ack.largest).map(|p| (p.time, p.ack_eliciting));
        let mut newly_acked: Vec<(u64, SentPacket)> = Vec::new();
        for (lo, hi) in ack.ranges() {
            let lo = lo.max(self.sent_base);
            if hi < lo {
                continue;
            }
            for pn in (lo..=hi).rev() {
                if let Some(p) = self.take_sent(pn) {
                    newly_acked.push((pn, p));
                }
            }
        }
        if newly_acked.is_empty() {
            return;
        }
        self.largest_acked = Some(self.largest_acked.map_or(ack.largest, |l| l.max(ack.largest)));

        // RTT sample from the largest acknowledged packet, if newly acked and
        // ack-eliciting (RFC 9002 §5.1), less the peer's ack delay.
        let mut one_way_delay_us = None;
        if let Some((sent_time, true)) = largest_newly_acked {
            let raw = now.saturating_duration_since(sent_time);
            let delay = Duration::from_micros(ack.ack_delay_us).min(self.config.max_ack_delay);
            let sample = if raw > self.rtt.min() + delay { raw - delay } else { raw };
            self.rtt.update(sample);
            // One-way delay plus clock offset: when the peer received the
            // packet (its clock) minus when we sent it (ours).
            if echo_us > 0 {
                let peer_received = peer_ts_us as i64 - ack.ack_delay_us as i64;
                one_way_delay_us = Some(peer_received - echo_us as i64);
            }
        }

        let rtt = self.rtt.estimate();
        let mut freed = 0;
        newly_acked.reverse(); // packet-number order for the controller
        for (_, p) in &newly_acked {
            for r in p.ranges.iter() {
                freed += self.send.on_ack(r);
            }
            let acked = Acked {
                sent_time: p.time,
                bytes: p.size,
                app_limited: p.app_limited,
                rtt,
                one_way_delay_us,
            };
            self.cc.on_ack(now, &acked);
        }
        self.cc.on_ack_end(now, self.bytes_in_flight);
        if freed > 0 && self.want_writable && self.send.buffered() < self.config.send_buffer {
            self.want_writable = false;
            self.events.push(Event::Writable(self.handle));
        }
        self.detect_lost(now);
        // RFC 6298 (5.3): restart the timer when new data is acknowledged.
        self.rto_armed_at = (self.ack_eliciting_in_flight > 0).then_some(now);
        self.maybe_send_close(now);
    }

    fn sent_packet(&self, pn: u64) -> Option<&SentPacket> {
        let idx = pn.checked_sub(self.sent_base)?;
        self.sent.get(idx as usize)?.as_ref()
    }

    fn take_sent(&mut self, pn: u64) -> Option<SentPacket> {
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

    /// RFC 9002 §6.1: packet and time thresholds.
    fn detect_lost(&mut self, now: Instant) {
        self.loss_time = None;
        let Some(largest_acked) = self.largest_acked else { return };
        let rtt = self.rtt.latest().max(self.rtt.smoothed());
        let loss_delay = (rtt * 9 / 8).max(Duration::from_millis(1));
        let lost_send_time = now - loss_delay;
        let mut lost = Vec::new();
        let end = largest_acked.saturating_sub(self.sent_base).min(self.sent.len() as u64);
        for idx in 0..end {
            let pn = self.sent_base + idx;
            let Some(p) = &self.sent[idx as usize] else { continue };
            if p.time <= lost_send_time || largest_acked >= pn + PACKET_THRESHOLD {
                lost.push(pn);
            } else {
                let t = p.time + loss_delay;
                self.loss_time = Some(self.loss_time.map_or(t, |l| l.min(t)));
            }
        }
        self.declare_lost(now, &lost, false);
    }

    fn declare_lost(&mut self, now: Instant, pns: &[u64], by_timeout: bool) {
        let mut lost_bytes = 0;
        let mut newest_sent = None;
        for &pn in pns {
            let Some(p) = self.take_sent(pn) else { continue };
            self.stats.packets_lost += 1;
            lost_bytes += p.size;
            newest_sent = Some(newest_sent.map_or(p.time, |t: Instant| t.max(p.time)));
            for r in p.ranges.iter() {
                self.send.on_lost(r);
            }
        }
        if let (Some(sent), false) = (newest_sent, by_timeout) {
            let before = self.cc.window();
            self.cc.on_congestion_event(now, sent, lost_bytes, false);
            if self.cc.window() < before {
                self.stats.congestion_events += 1;
            }
        }
    }

    // ----- timers -----

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |d: Option<Instant>| {
            if let Some(d) = d {
                t = Some(t.map_or(d, |x| x.min(d)));
            }
        };
        match self.state {
            State::Closed => return None,
            State::Closing { until } | State::Draining { until } => return Some(until),
            State::Handshaking => {
                consider(Some(self.created + self.config.handshake_timeout));
                if let Some(sent) = self.initial_sent_at {
                    consider(Some(sent + self.rtt.rto()));
                }
                return t;
            }
            State::Established => {}
        }
        consider(self.idle_deadline());
        consider(self.loss_time);
        if self.loss_time.is_none() {
            consider(self.rto_armed_at.map(|a| a + self.rtt.rto()));
        }
        if self.ack_eliciting_unacked > 0 {
            consider(self.ack_deadline);
        }
        consider(self.pacing_until);
        consider(self.flow_probe_at);
        if let Some(k) = self.config.keep_alive_interval {
            consider(Some(self.last_ack_eliciting_sent + k));
        }
        t
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        match self.state {
            State::Closed => return,
            State::Closing { until } | State::Draining { until } => {
                if now >= until {
                    self.finish(CloseReason::Local);
                }
                return;
            }
            State::Handshaking => {
                if now >= self.created + self.config.handshake_timeout {
                    self.finish(CloseReason::HandshakeTimeout);
                } else if self.initial_sent_at.is_some_and(|s| now >= s + self.rtt.rto()) {
                    self.rtt.back_off();
                    self.initial_due = true;
                }
                return;
            }
            State::Established => {}
        }
        if self.idle_deadline().is_some_and(|d| now >= d) {
            self.close_reason = Some(CloseReason::IdleTimeout);
            self.finish(CloseReason::IdleTimeout);
            return;
        }
        if self.pacing_until.is_some_and(|t| now >= t) {
            self.pacing_until = None;
        }
        if self.ack_deadline.is_some_and(|t| now >= t) {
            self.ack_immediately = true;
            self.ack_deadline = None;
        }
        if self.flow_probe_at.is_some_and(|t| now >= t) {
            self.flow_probe_at = None;
            self.ping_pending = true;
        }
        if let Some(k) = self.config.keep_alive_interval {
            if now >= self.last_ack_eliciting_sent + k {
                self.ping_pending = true;
            }
        }
        if self.loss_time.is_some_and(|t| now >= t) {
            self.detect_lost(now);
        } else if self.rto_armed_at.is_some_and(|a| now >= a + self.rtt.rto()) {
            self.on_rto(now);
        }
    }

    /// RFC 6298 (5.4)–(5.6) with RFC 5681 §3.1's loss window: everything in
    /// flight is presumed lost and goes back to the retransmission queue;
    /// the window collapses, so only the earliest data leaves first.
    fn on_rto(&mut self, now: Instant) {
        self.stats.rto_count += 1;
        self.rtt.back_off();
        let outstanding: Vec<u64> = (0..self.sent.len() as u64)
            .filter(|&i| self.sent[i as usize].is_some())
            .map(|i| self.sent_base + i)
            .collect();
        self.declare_lost(now, &outstanding, true);
        self.cc.on_retransmission_timeout(now);
        self.stats.congestion_events += 1;
        if !self.send.has_retransmissions() {
            self.ping_pending = true;
        }
        self.rto_armed_at = None;
        self.pacing_until = None;
    }

    // ----- sending -----

    /// Writes one datagram into `buf` (appending), if anything is due.
    /// `min_size` > 0 asks for a datagram of exactly that size or nothing
    /// (GSO batches need equal segments; only the last may be shorter).
    pub(crate) fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>, max_size: usize) -> Option<Outgoing> {
        let start = buf.len();
        match self.state {
            State::Closed | State::Draining { .. } => return None,
            State::Handshaking => return self.poll_initial(now, buf),
            State::Closing { .. } => {
                let (code, reason) = self.close_frame.take()?;
                self.write_header(now, buf, PacketType::Data);
                wire::encode_frame(buf, &Frame::Close { code, reason });
                return self.finish_packet(now, buf, start, false, StreamRanges::default(), false);
            }
            State::Established => {}
        }
        let mtu = max_size.min(usize::from(self.config.max_datagram_size));
        let ack_due = self.ack_immediately
            || (self.ack_eliciting_unacked > 0 && self.ack_deadline.is_some_and(|t| now >= t))
            || (self.largest_received.is_some() && self.recv.window_update_due());
        let window_ok = self.bytes_in_flight + mtu as u64 <= self.cc.window();
        let data_ready = self.send.has_data(self.peer_max_data);
        let mut can_send_data = data_ready && window_ok;
        if can_send_data && self.config.pacing && self.pacing_until.is_none() {
            let rate = self.cc.pacing_rate(self.rtt.smoothed());
            self.pacer.set_burst((rate * 0.001) as u64 + 16 * mtu as u64);
            if let Some(t) = self.pacer.delay(now, rate, mtu as u64) {
                self.pacing_until = Some(t);
            }
        }
        if self.pacing_until.is_some() {
            can_send_data = false;
        }
        if !(ack_due || can_send_data || self.ping_pending) {
            self.update_flow_probe(now);
            return None;
        }

        let packet_type = if self.peer_confirmed { PacketType::Data } else { PacketType::Accept };
        self.write_header(now, buf, packet_type);
        // Always piggyback an ACK when we owe one.
        if self.ack_eliciting_unacked > 0 || ack_due {
            self.write_ack(now, buf, mtu - (buf.len() - start));
        }
        let mut ack_eliciting = false;
        if self.ping_pending {
            wire::encode_frame(buf, &Frame::Ping);
            self.ping_pending = false;
            ack_eliciting = true;
        }
        let mut ranges = StreamRanges::default();
        if can_send_data {
            loop {
                let room = mtu.saturating_sub(buf.len() - start);
                let overhead = wire::data_frame_overhead(self.send.next_unsent().max(1 << 30), room as u64);
                if room <= overhead {
                    break;
                }
                let Some(chunk) = self.send.next_chunk((room - overhead) as u64, self.peer_max_data) else {
                    break;
                };
                wire::encode_data_frame_header(buf, chunk.offset, chunk.len, chunk.message_end);
                self.send.write_chunk(buf, &chunk);
                if chunk.retransmission {
                    self.stats.retransmitted_bytes += chunk.len;
                }
                ranges.push(chunk.offset..chunk.offset + chunk.len);
                ack_eliciting = true;
            }
        }
        // A data packet the frame-overhead estimate left a few bytes short
        // of full is padded to full size: GSO batches need equal segments,
        // and one short datagram ends a batch.
        let len = buf.len() - start;
        if ranges.first.is_some() && len < mtu && mtu - len <= MAX_PAD_TO_FULL {
            wire::encode_padding(buf, mtu - len);
        }
        let app_limited = !self.send.has_data(self.peer_max_data);
        self.finish_packet(now, buf, start, ack_eliciting, ranges, app_limited)
    }

    /// When silence from the peer ends the connection.
    ///
    /// With nothing outstanding, after the idle timeout. With data or a
    /// probe outstanding, silence may just be loss, so, like TCP's retry
    /// limit, only once `UNANSWERED_RTOS_BEFORE_IDLE` retransmission
    /// timeouts in a row went unanswered as well; and never sooner than
    /// three RTOs (RFC 9000 §10.1 uses three probe timeouts).
    fn idle_deadline(&self) -> Option<Instant> {
        let outstanding = self.ack_eliciting_in_flight > 0 || self.ping_pending || !self.send.is_fully_acked();
        if outstanding && self.rtt.backoff() < UNANSWERED_RTOS_BEFORE_IDLE {
            return None;
        }
        Some(self.last_received + self.config.idle_timeout.max(self.rtt.rto() * 3))
    }

    fn update_flow_probe(&mut self, now: Instant) {
        if self.send.is_flow_blocked(self.peer_max_data) && self.bytes_in_flight == 0 {
            if self.flow_probe_at.is_none() {
                self.flow_probe_at = Some(now + self.rtt.rto());
            }
        } else {
            self.flow_probe_at = None;
        }
    }

    fn poll_initial(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Outgoing> {
        if !self.initial_due {
            return None;
        }
        self.initial_due = false;
        self.initial_attempts += 1;
        self.initial_sent_at = Some(now);
        let start = buf.len();
        self.write_header(now, buf, PacketType::Initial);
        // Pad so the server's answers are never larger than what it got
        // (no amplification toward a spoofed address).
        let min = usize::from(crate::config::TransportConfig::MIN_DATAGRAM_SIZE);
        let have = buf.len() - start;
        if have < min {
            wire::encode_padding(buf, min - have);
        }
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += (buf.len() - start) as u64;
        Some(Outgoing { destination: self.remote, size: buf.len() - start })
    }

    fn write_header(&mut self, now: Instant, buf: &mut Vec<u8>, ty: PacketType) {
        let header = Header {
            ty,
            dst_cid: self.remote_cid,
            src_cid: self.local_cid,
            cookie: if ty == PacketType::Initial { self.cookie.clone() } else { Bytes::new() },
            pn: self.next_pn,
            timestamp_us: self.timestamp_us(now).max(1),
            echo_timestamp_us: self.echo_timestamp_us,
        };
        wire::encode_header(buf, &header);
    }

    fn write_ack(&mut self, now: Instant, buf: &mut Vec<u8>, room: usize) {
        let Some((largest, received_at)) = self.largest_received else { return };
        let delay = now.saturating_duration_since(received_at).as_micros() as u64;
        let max_data = self.recv.announce();
        // Each range costs at most 16 bytes; keep the frame within the room.
        let max_ranges = (room.saturating_sub(48) / 16).clamp(1, MAX_ACK_RANGES);
        let ranges = self.received.iter_rev().take(max_ranges).map(|r| (r.start, r.end - 1));
        if let Some(ack) = AckFrame::from_ranges(ranges, delay, max_data) {
            debug_assert_eq!(ack.largest, largest);
            wire::encode_frame(buf, &Frame::Ack(ack));
        }
        self.ack_eliciting_unacked = 0;
        self.ack_immediately = false;
        self.ack_deadline = None;
    }

    fn finish_packet(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        start: usize,
        ack_eliciting: bool,
        ranges: StreamRanges,
        app_limited: bool,
    ) -> Option<Outgoing> {
        let size = (buf.len() - start) as u64;
        let pn = self.next_pn;
        self.next_pn += 1;
        debug_assert_eq!(self.sent_base + self.sent.len() as u64, pn);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += size;
        if ack_eliciting && self.state == State::Established {
            self.bytes_in_flight += size;
            self.ack_eliciting_in_flight += 1;
            self.last_ack_eliciting_sent = now;
            self.cc.on_sent(now, size, self.bytes_in_flight);
            if self.config.pacing {
                self.pacer.on_sent(size);
            }
            // RFC 6298 (5.1): start the timer if it is not running.
            if self.rto_armed_at.is_none() {
                self.rto_armed_at = Some(now);
            }
            self.sent.push_back(Some(SentPacket { time: now, size, ack_eliciting, app_limited, ranges }));
        } else if self.sent.is_empty() {
            self.sent_base = self.next_pn;
        } else {
            self.sent.push_back(None);
        }
        Some(Outgoing { destination: self.remote, size: size as usize })
    }
}

