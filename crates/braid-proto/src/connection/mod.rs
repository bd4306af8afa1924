//! One connection: handshake state, the reliable message stream, its paths
//! (each with its own loss recovery, RTO, congestion control and pacing,
//! see [`crate::path`]), flow control, close and idle timeout.
//!
//! A connection starts with one path, the one its handshake ran on, and
//! sends the stream directly on it. It switches to *scheduled* sending
//! (see [`crate::multipath`]) when a second path is added or the
//! application chooses a ProgMP scheduler: the stream is then cut into
//! segments that the scheduler assigns to paths. The receiver reassembles
//! by stream offset (the data sequence number), whichever path carried the
//! bytes, so deliverable data never waits for another path's order (the
//! receive-side stall of ProgMP thesis §3.4.6 cannot occur).
//!
//! This file owns the [`Connection`] state, its construction, its
//! accessors and the two entry points that everything else hangs off:
//! [`Connection::handle_packet`] (a received packet, frame by frame) and
//! the timers ([`Connection::poll_timeout`], [`Connection::handle_timeout`]).
//! They only dispatch; each job lives in its own file, as `impl Connection`
//! blocks over the same state:
//! - [`handshake`]: the client's Initial and RETRY, the server's Accept;
//! - [`streams`]: the message stream and flow control (sending and
//!   receiving messages, the peer's `max_data`, window probes);
//! - [`recovery`]: acknowledgements, loss detection (RFC 9002 §6.1), tail
//!   probes and retransmission timeouts (RFC 6298), handing losses back to
//!   the stream or the scheduler;
//! - [`paths`]: opening, validating, marking and abandoning paths, and the
//!   path-management frames that tell the peer;
//! - [`scheduling`]: scheduled sending by a ProgMP program (entering it,
//!   registers, the per-path queues the scheduler fills);
//! - [`close`]: graceful and immediate close, closing and draining, idle
//!   timeout;
//! - [`transmit`]: building packets (headers, ACKs, data, padding) and
//!   recording what was sent.

mod close;
mod handshake;
mod paths;
mod recovery;
mod scheduling;
mod streams;
mod transmit;
mod validation;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use braid_core::Instant;
use braid_progmp::Program;
use bytes::{Buf, Bytes, BytesMut};

use crate::config::TransportConfig;
use crate::crypto::noise::ClientHandshake;
use crate::crypto::protection::Protection;
use crate::crypto::{CipherSuite, Credentials, PublicKey, TAG_LEN};
use crate::endpoint::{CloseReason, ConnectionHandle, Event};
use crate::multipath::{Multipath, MAX_PATHS};
use crate::path::{Path, SentPacket};
use crate::recv_stream::{RecvStream, INITIAL_MAX_DATA};
use crate::send_stream::SendStream;
use crate::stats::ConnectionStats;
use crate::wire::{self, Frame, Packet, PacketType, PublicHeader};

pub(crate) use close::{CLOSE_REFUSED, CLOSE_UNAUTHORIZED};
use paths::Control;

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

/// What the server's handshake gives a new connection: its packet keys,
/// the Noise message its Accepts carry, and the client's proved key.
pub(crate) struct ServerKeys {
    pub protection: Protection,
    pub accept_noise: Bytes,
    pub client_key: PublicKey,
}

/// A datagram written by `poll_transmit`: its size, and the index of its
/// path, whose addresses route it ([`Connection::path_addresses`]) and
/// which the rest of a GSO batch must share.
pub(crate) struct Outgoing {
    pub size: usize,
    pub path: usize,
    /// Sent to this address instead of the path's (a challenge to a peer's
    /// new address); such a datagram is alone in its batch.
    pub redirect: Option<SocketAddr>,
}

pub(crate) struct Connection {
    handle: ConnectionHandle,
    side: Side,
    state: State,
    config: TransportConfig,
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

    // Authentication (see `crate::crypto`).
    /// Client: our identity and trust decision (`None`: insecure).
    credentials: Option<Arc<Credentials>>,
    /// Client: when (on the clock of the timestamps packets echo) the
    /// first RETRY was taken; a later one answering an older Initial is
    /// stale.
    retry_taken_us: Option<u64>,
    /// Client: randomness for the handshake's ephemeral key.
    handshake_seed: [u8; 32],
    /// Client: the handshake in flight (message 1 sent).
    client_handshake: Option<ClientHandshake>,
    /// Server: the Noise message every Accept repeats until the client
    /// confirms.
    accept_noise: Bytes,
    /// Packet keys, once the handshake has produced them.
    protection: Option<Protection>,
    /// The peer's key, proved by the handshake.
    peer_key: Option<PublicKey>,
    /// Secret behind path-validation tokens (see [`validation`]).
    path_secret: [u8; 32],
    challenges_issued: u64,

    // Paths. `paths[0]` is the primary path: the handshake's, until it is
    // removed. Never empty.
    paths: Vec<Path>,
    /// Client: the id of the next path it opens. Server: one above the
    /// highest id seen; lower ids not in `paths` are retired.
    next_path_id: u32,
    /// Slots (bits of a segment's `sent_on`) not used by a path.
    free_slots: u64,
    /// Where `poll_transmit` starts looking, so paths take turns.
    next_poll: usize,
    control: Vec<Control>,
    status_seq_out: u64,
    /// Client: failed paths to open again (see [`paths`]).
    retries: Vec<paths::Retry>,
    /// Server: (local, remote) of paths our application removed, not to be
    /// opened again (the oldest forgotten beyond `MAX_PATHS`).
    refused_paths: Vec<(Option<SocketAddr>, SocketAddr)>,

    // Sending.
    last_ack_eliciting_sent: Instant,
    send: SendStream,
    peer_max_data: u64,
    close_frame: Option<(u64, Bytes)>,
    close_requested: bool,
    want_writable: bool,
    /// Probe for a window update when flow control blocks us with nothing
    /// in flight.
    flow_probe_at: Option<Instant>,
    /// Tag (ProgMP packet `USER`) of subsequent messages.
    user_tag: i64,
    /// The scheduler chosen for this connection (else the default).
    program: Option<Arc<Program>>,
    /// Scheduled sending, once multipath.
    mp: Option<Box<Multipath>>,
    /// Registers set before scheduling began (then the scheduler's).
    registers: [i64; 6],
    /// Keep the scheduler's `PRINT` lines for the application.
    capture_prints: bool,
    /// Packets sent with stream data, kept for the application while
    /// capturing (see [`crate::Endpoint::capture_sent_packets`]).
    sent_capture: Option<Vec<crate::SentPacketInfo>>,

    // Receiving.
    recv: RecvStream,
    last_received: Instant,
    close_reason: Option<CloseReason>,
    /// `recv_message` has reported the close to the application.
    app_saw_close: bool,

    acked_scratch: Vec<(u64, SentPacket)>,
    lost_scratch: Vec<(u64, SentPacket)>,
    /// Packets declared lost that a late acknowledgement may still
    /// report delivered (see [`recovery`]).
    presumed_lost: recovery::PresumedLost,
    events: Vec<Event>,
    stats: ConnectionStats,
}

impl Connection {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_client(
        handle: ConnectionHandle,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        local_cid: u64,
        config: TransportConfig,
        credentials: Option<Arc<Credentials>>,
        handshake_seed: [u8; 32],
    ) -> Self {
        let mut c = Self::new(handle, Side::Client, now, local, remote, local_cid, 0, config);
        c.state = State::Handshaking;
        c.initial_due = true;
        c.credentials = credentials;
        c.handshake_seed = handshake_seed;
        c
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new_server(
        handle: ConnectionHandle,
        now: Instant,
        remote: SocketAddr,
        local_cid: u64,
        remote_cid: u64,
        initial_timestamp_us: u64,
        config: TransportConfig,
        keys: Option<ServerKeys>,
    ) -> Self {
        // The first path answers from the socket's choice of address, as
        // a single-path connection always has; later paths answer from the
        // address they were opened to.
        let mut c = Self::new(handle, Side::Server, now, None, remote, local_cid, remote_cid, config);
        // The Accept must be acknowledged: it carries a PING. It echoes the
        // Initial's timestamp, the client's first RTT sample.
        c.paths[0].ping_pending = true;
        c.paths[0].echo_timestamp_us = initial_timestamp_us;
        if let Some(keys) = keys {
            c.protection = Some(keys.protection);
            c.accept_noise = keys.accept_noise;
            c.peer_key = Some(keys.client_key);
        }
        c.events.push(Event::Accepted(handle));
        c
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        handle: ConnectionHandle,
        side: Side,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        local_cid: u64,
        remote_cid: u64,
        config: TransportConfig,
    ) -> Self {
        let mut path = Path::new(0, 0, local, remote, &config);
        // The handshake validates the first path.
        path.validated = true;
        Connection {
            handle,
            side,
            state: State::Established,
            local_cid,
            remote_cid,
            cookie: Bytes::new(),
            epoch: now,
            created: now,
            initial_due: false,
            initial_sent_at: None,
            initial_attempts: 0,
            peer_confirmed: side == Side::Client,
            credentials: None,
            handshake_seed: [0; 32],
            retry_taken_us: None,
            client_handshake: None,
            accept_noise: Bytes::new(),
            protection: None,
            peer_key: None,
            path_secret: [0; 32],
            challenges_issued: 0,
            paths: vec![path],
            next_path_id: 1,
            free_slots: ((1u64 << MAX_PATHS) - 1) & !1,
            next_poll: 0,
            control: Vec::new(),
            status_seq_out: 0,
            retries: Vec::new(),
            refused_paths: Vec::new(),
            last_ack_eliciting_sent: now,
            send: SendStream::new(),
            peer_max_data: INITIAL_MAX_DATA,
            close_frame: None,
            close_requested: false,
            want_writable: false,
            flow_probe_at: None,
            user_tag: 0,
            program: None,
            mp: None,
            registers: [0; 6],
            capture_prints: false,
            sent_capture: None,
            recv: RecvStream::new(config.receive_window, config.max_message_size),
            last_received: now,
            close_reason: None,
            app_saw_close: false,
            acked_scratch: Vec::new(),
            lost_scratch: Vec::new(),
            presumed_lost: recovery::PresumedLost::default(),
            events: Vec::new(),
            stats: ConnectionStats::default(),
            config,
        }
    }

    // ----- accessors -----

    pub(crate) fn local_cid(&self) -> u64 {
        self.local_cid
    }
    /// The primary path's peer address.
    pub(crate) fn remote(&self) -> SocketAddr {
        self.paths[0].remote
    }
    /// Where datagrams of path `i` go, and the local address they leave
    /// from (`None`: the socket's choice).
    pub(crate) fn path_addresses(&self, i: usize) -> (SocketAddr, Option<SocketAddr>) {
        let p = &self.paths[i.min(self.paths.len() - 1)];
        (p.remote, p.local)
    }
    pub(crate) fn is_established(&self) -> bool {
        self.state == State::Established
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
    /// The primary path's congestion controller.
    pub(crate) fn congestion_controller(&mut self) -> &mut dyn crate::cc::CongestionController {
        self.paths[0].cc.as_mut()
    }

    /// Switches every path's congestion controller to `algorithm`, each
    /// continuing from its path's operating point (see
    /// [`crate::path::Path::set_congestion_control`]).
    pub(crate) fn set_congestion_control(&mut self, now: Instant, algorithm: crate::cc::CcAlgorithm) {
        for p in &mut self.paths {
            p.set_congestion_control(now, algorithm);
        }
    }

    /// The secret path-validation tokens are drawn from (the endpoint's
    /// CSPRNG provides it).
    pub(crate) fn set_path_secret(&mut self, secret: [u8; 32]) {
        self.path_secret = secret;
    }

    pub(crate) fn peer_key(&self) -> Option<PublicKey> {
        self.peer_key
    }

    pub(crate) fn cipher_suite(&self) -> Option<CipherSuite> {
        self.protection.as_ref().map(|p| p.suite())
    }

    /// Bytes sealing adds to a packet (known before the handshake ends: a
    /// client that authenticates will seal).
    fn seal_overhead(&self) -> usize {
        if self.protection.is_some() || self.credentials.is_some() {
            TAG_LEN
        } else {
            0
        }
    }

    pub(crate) fn stats(&self) -> ConnectionStats {
        let mut s = self.stats;
        s.key_updates = self.protection.as_ref().map_or(0, |p| p.key_updates);
        let primary = &self.paths[0];
        s.smoothed_rtt = primary.rtt.smoothed();
        s.min_rtt = primary.rtt.min();
        s.rto = primary.rtt.rto();
        s.cwnd = self.paths.iter().map(|p| p.cc.window()).sum();
        s.bytes_in_flight = self.paths.iter().map(|p| p.bytes_in_flight).sum();
        s.stream_bytes_acked = self.send.acked_bytes();
        s.stream_bytes_received = self.recv.received_in_order();
        s.paths = self.paths.len() as u64;
        if let Some(mp) = &self.mp {
            s.scheduler_runs = mp.counters.runs;
            s.scheduler_pushes = mp.counters.pushes;
            s.scheduler_refused_pushes = mp.counters.refused_pushes;
        }
        s
    }

    fn timestamp_us(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_micros() as u64
    }

    /// The primary path's retransmission timeout: the unit of the
    /// connection-wide timers (handshake retry, close linger, idle floor,
    /// window probe).
    fn rto(&self) -> Duration {
        self.paths[0].rtt.rto()
    }

    fn path_index(&self, id: u32) -> Option<usize> {
        if self.paths[0].id == id {
            return Some(0);
        }
        self.paths.iter().position(|p| p.id == id)
    }

    // ----- receiving: dispatch -----

    /// A datagram for this connection (an Accept or Data packet): opened
    /// (if the connection is authenticated) and then handled. Nothing that
    /// fails to open changes any state.
    pub(crate) fn handle_datagram(
        &mut self,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        datagram: BytesMut,
        header: PublicHeader,
        size: usize,
    ) {
        if self.state == State::Closed {
            return;
        }
        let handshaking = self.state == State::Handshaking;
        if handshaking && header.ty == PacketType::Accept && !header.noise.is_empty() {
            if !self.on_accept_noise(now, &header.noise) {
                return;
            }
        } else if handshaking && header.ty == PacketType::Accept && self.credentials.is_some() {
            // A plaintext Accept: the server's stateless refusal.
            self.on_stateless_close(&datagram, &header);
            return;
        }
        let largest = self.path_index(header.path_id).and_then(|i| self.paths[i].largest_received.map(|(l, _)| l));
        let (pn, payload) = match &mut self.protection {
            Some(p) => match p.open(now, datagram, header.payload_offset, header.path_id, largest) {
                Some(opened) => (opened.pn, opened.payload),
                None => {
                    self.stats.auth_failures += 1;
                    return;
                }
            },
            None if self.credentials.is_some() => {
                // We require authentication and have no keys yet.
                self.stats.auth_failures += 1;
                return;
            }
            None => {
                // Advanced rather than sliced once frozen: no reference-count
                // traffic per packet.
                let mut payload = datagram;
                payload.advance(header.payload_offset.min(payload.len()));
                (wire::expand_pn(largest, header.pn_truncated), payload.freeze())
            }
        };
        match Packet::from_parts(header.header(pn), payload) {
            Ok(packet) => self.handle_packet(now, local, remote, packet, size),
            Err(_) => self.stats.malformed_packets += 1,
        }
    }

    pub(crate) fn handle_packet(
        &mut self,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        packet: Packet,
        size: usize,
    ) {
        if self.state == State::Closed {
            return;
        }
        let (header, frames) = packet.into_frames();
        let header = &header;
        match (self.side, header.ty) {
            (Side::Client, PacketType::Accept) => self.on_accept(now, header),
            (Side::Client, PacketType::Data) => {
                if self.state == State::Handshaking {
                    return; // we cannot answer before we know the server's CID
                }
            }
            (Side::Server, PacketType::Data) => self.peer_confirmed = true,
            _ => return,
        }
        let path_id = header.path_id;
        let pi = match self.path_index(path_id) {
            Some(i) => i,
            None => match self.open_remote_path(path_id, local, remote) {
                Some(i) => i,
                None => {
                    self.stats.unknown_path_packets += 1;
                    return;
                }
            },
        };
        self.stats.packets_received += 1;
        self.stats.bytes_received += size as u64;
        self.last_received = now;

        let pn = header.pn;
        let timestamp_us = header.timestamp_us;
        let echo_us = header.echo_timestamp_us;
        let multipath = self.mp.is_some();
        let now_us = if multipath { self.timestamp_us(now) } else { 0 };
        let path = &mut self.paths[pi];
        if multipath {
            path.counters.packets_received += 1;
            path.counters.bytes_received += size as u64;
        }
        let (duplicate, is_largest, in_order) = path.on_received(now, pn, timestamp_us);
        if duplicate {
            // Already processed (a network duplicate, or a replay): its
            // frames must not act twice.
            self.stats.duplicate_packets += 1;
            return;
        }
        let moved = is_largest && remote != path.remote;
        if is_largest && multipath {
            path.on_timestamp(now_us, timestamp_us);
        }
        if moved {
            // A peer whose address changed (NAT rebinding) is followed once
            // the new address answers a challenge (see `validation`).
            self.on_peer_address(pi, remote);
        }

        let mut ack_eliciting = false;
        let mut newly_readable = false;
        for frame in frames {
            match frame {
                Frame::Ping => ack_eliciting = true,
                Frame::Ack(ack) => self.on_ack_frame(now, &ack, timestamp_us, echo_us),
                Frame::Data { offset, data, .. } => {
                    ack_eliciting = true;
                    if matches!(self.state, State::Closing { .. } | State::Draining { .. }) {
                        continue;
                    }
                    match self.on_data_frame(now, offset, data) {
                        Some(readable) => newly_readable |= readable,
                        None => return,
                    }
                }
                Frame::Close { code, reason } => {
                    self.on_close_frame(now, code, reason);
                    return;
                }
                Frame::PathAbandon { path_id: gone } => {
                    ack_eliciting = true;
                    self.on_path_abandon_frame(now, gone, path_id);
                }
                Frame::PathStatus { path_id: target, seq, backup } => {
                    ack_eliciting = true;
                    self.on_path_status_frame(target, seq, backup);
                }
                Frame::PathChallenge(token) => {
                    if let Some(i) = self.path_index(path_id) {
                        self.paths[i].response_due = Some(token);
                    }
                }
                Frame::PathResponse(token) => {
                    if let Some(i) = self.path_index(path_id) {
                        self.on_path_response(i, remote, token);
                    }
                }
            }
        }
        if newly_readable {
            self.events.push(Event::Readable(self.handle));
        }
        if let State::Closing { .. } = self.state {
            self.repeat_close();
            return;
        }
        if ack_eliciting {
            if let Some(i) = self.path_index(path_id) {
                self.paths[i].on_ack_eliciting(now, !in_order, &self.config);
            }
        }
        self.maybe_send_close(now);
    }

    // ----- timers: dispatch -----

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
            State::Handshaking => return self.handshake_deadline(),
            State::Established => {}
        }
        consider(self.idle_deadline());
        for p in &self.paths {
            consider(p.timeout());
        }
        if self.mp.is_none() && self.paths[0].loss_time.is_none() {
            consider(self.paths[0].tail_probe_at());
        }
        consider(self.flow_probe_at);
        consider(self.validation_deadline());
        consider(self.retry_deadline());
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
                self.on_handshake_timer(now);
                return;
            }
            State::Established => {}
        }
        if self.idle_deadline().is_some_and(|d| now >= d) {
            self.close_reason = Some(CloseReason::IdleTimeout);
            self.finish(CloseReason::IdleTimeout);
            return;
        }
        if self.flow_probe_at.is_some_and(|t| now >= t) {
            self.flow_probe_at = None;
            let i = self.probe_path();
            self.paths[i].ping_pending = true;
        }
        if let Some(k) = self.config.keep_alive_interval {
            if now >= self.last_ack_eliciting_sent + k {
                let i = self.probe_path();
                self.paths[i].ping_pending = true;
            }
        }
        let mut failed: Option<u32> = None;
        for pi in 0..self.paths.len() {
            let path = &mut self.paths[pi];
            if path.pacing_until.is_some_and(|t| now >= t) {
                path.pacing_until = None;
                if let Some(mp) = &mut self.mp {
                    // The path is no longer throttled.
                    mp.due = true;
                }
            }
            if path.ack_deadline.is_some_and(|t| now >= t) {
                path.ack_immediately = true;
                path.ack_deadline = None;
            }
            if self.on_loss_timers(now, pi) {
                failed = failed.or(Some(self.paths[pi].id));
            }
        }
        if let Some(i) = failed.and_then(|id| self.path_index(id)) {
            self.on_path_failed(now, i, true);
        }
        self.reopen_due_paths(now);
    }
}
