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

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use braid_core::Instant;
use braid_progmp::{Program, Register, Scheduler};
use bytes::Bytes;

use crate::config::TransportConfig;
use crate::endpoint::{CloseReason, ConnectionHandle, Event, PathError};
use crate::multipath::{Multipath, MAX_PATHS};
use crate::path::{Path, SentPacket, StreamRanges};
use crate::recv_stream::{RecvStream, INITIAL_MAX_DATA};
use crate::send_stream::SendStream;
use crate::stats::{ConnectionStats, PathInfo};
use crate::wire::{self, AckFrame, Frame, Header, Packet, PacketType};

/// Consecutive unanswered retransmission timeouts after which a silent
/// peer with data outstanding is given up (once the idle timeout passed).
const UNANSWERED_RTOS_BEFORE_IDLE: u32 = 6;
/// Consecutive unanswered retransmission timeouts after which a path is
/// abandoned while another path works: its data is rescheduled.
const PATH_FAILURE_RTOS: u32 = 4;
/// A data packet at most this many bytes short of full is padded to full.
const MAX_PAD_TO_FULL: usize = 32;
/// Longest Data packet header.
const MAX_DATA_HEADER: usize = wire::MAX_DATA_HEADER_LEN;
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

/// A datagram written by `poll_transmit`: its size, and the index of its
/// path, whose addresses route it ([`Connection::path_addresses`]) and
/// which the rest of a GSO batch must share.
pub(crate) struct Outgoing {
    pub size: usize,
    pub path: usize,
}

/// A path-management frame to deliver reliably.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ControlFrame {
    Abandon(u32),
    Status { path_id: u32, seq: u64, backup: bool },
}

#[derive(Debug)]
struct Control {
    frame: ControlFrame,
    /// The path id and packet number of the packet carrying it, until that
    /// packet is acknowledged (then the entry goes) or lost (then `None`).
    sent_in: Option<(u32, u64)>,
}

/// The scheduler used when a connection becomes multipath without one
/// chosen: the shipped minimum-RTT scheduler, compiled once per process.
fn default_program() -> Arc<Program> {
    static DEFAULT: OnceLock<Arc<Program>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            let source = braid_progmp::builtin(braid_progmp::DEFAULT_SCHEDULER)
                .expect("the default scheduler is shipped")
                .source;
            Arc::new(Program::compile(source).expect("the shipped default scheduler compiles"))
        })
        .clone()
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

    // Receiving.
    recv: RecvStream,
    last_received: Instant,
    close_reason: Option<CloseReason>,
    /// `recv_message` has reported the close to the application.
    app_saw_close: bool,

    acked_scratch: Vec<(u64, SentPacket)>,
    lost_scratch: Vec<(u64, SentPacket)>,
    events: Vec<Event>,
    stats: ConnectionStats,
}

impl Connection {
    pub(crate) fn new_client(
        handle: ConnectionHandle,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        local_cid: u64,
        config: TransportConfig,
    ) -> Self {
        let mut c = Self::new(handle, Side::Client, now, local, remote, local_cid, 0, config);
        c.state = State::Handshaking;
        c.initial_due = true;
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
    ) -> Self {
        // The first path answers from the socket's choice of address, as
        // a single-path connection always has; later paths answer from the
        // address they were opened to.
        let mut c = Self::new(handle, Side::Server, now, None, remote, local_cid, remote_cid, config);
        // The Accept must be acknowledged: it carries a PING. It echoes the
        // Initial's timestamp, the client's first RTT sample.
        c.paths[0].ping_pending = true;
        c.paths[0].echo_timestamp_us = initial_timestamp_us;
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
            paths: vec![path],
            next_path_id: 1,
            free_slots: ((1u64 << MAX_PATHS) - 1) & !1,
            next_poll: 0,
            control: Vec::new(),
            status_seq_out: 0,
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
            recv: RecvStream::new(config.receive_window, config.max_message_size),
            last_received: now,
            close_reason: None,
            app_saw_close: false,
            acked_scratch: Vec::new(),
            lost_scratch: Vec::new(),
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

    pub(crate) fn stats(&self) -> ConnectionStats {
        let mut s = self.stats;
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

    fn rto(&self) -> Duration {
        self.paths[0].rtt.rto()
    }

    fn path_index(&self, id: u32) -> Option<usize> {
        if self.paths[0].id == id {
            return Some(0);
        }
        self.paths.iter().position(|p| p.id == id)
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
        self.send.push_tagged(message, self.user_tag);
        self.stats.messages_sent += 1;
        if let Some(mp) = &mut self.mp {
            mp.segments.carve(&mut self.send);
            mp.due = true;
        }
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
            self.state = State::Closing { until: now + self.rto() * 3 };
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
        self.state = State::Closing { until: now + self.rto() * 3 };
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
        for p in &mut self.paths {
            p.clear_in_flight();
        }
    }

    // ----- multipath interface -----

    /// Switch to scheduled sending (idempotent).
    fn enter_multipath(&mut self) {
        if self.mp.is_some() {
            return;
        }
        let program = self.program.clone().unwrap_or_else(default_program);
        // A seed for `RANDOM` that differs between connections but is a
        // function of the endpoint's seed, like the connection ID.
        let scheduler = Scheduler::new(program, self.local_cid ^ 0x5c4e_d01e);
        let budget = usize::from(self.config.max_datagram_size) - MAX_DATA_HEADER;
        // Until now every packet was the first path's: its counters (kept
        // only while several paths share the connection's) start from the
        // connection's.
        let counters = self.single_path_counters();
        self.paths[0].counters = counters;
        let mut mp = Multipath::new(scheduler, &mut self.send, budget);
        mp.registers = self.registers;
        mp.prints = self.capture_prints.then(VecDeque::new);
        self.mp = Some(Box::new(mp));
    }

    /// The first path's counters while it is the only one: the
    /// connection's (every new stream byte sent once, plus resends).
    fn single_path_counters(&self) -> crate::path::PathCounters {
        crate::path::PathCounters {
            packets_sent: self.stats.packets_sent,
            bytes_sent: self.stats.bytes_sent,
            packets_received: self.stats.packets_received,
            bytes_received: self.stats.bytes_received,
            packets_lost: self.paths[0].counters.packets_lost,
            stream_bytes_sent: self.send.next_unsent() + self.stats.retransmitted_bytes,
        }
    }

    /// Use `program` to schedule this connection's packets from now on
    /// (scheduled sending even on one path).
    pub(crate) fn set_scheduler(&mut self, program: Arc<Program>) {
        self.program = Some(program.clone());
        match &mut self.mp {
            Some(mp) => {
                mp.scheduler = Scheduler::new(program, self.local_cid ^ 0x5c4e_d01e);
                mp.due = true;
            }
            None => self.enter_multipath(),
        }
    }

    /// The scheduler this connection uses or will use.
    pub(crate) fn scheduler(&self) -> Option<Arc<Program>> {
        match &self.mp {
            Some(mp) => Some(mp.scheduler.program().clone()),
            None => self.program.clone(),
        }
    }

    /// Sets a register: the scheduler's if it runs (a trigger), else kept
    /// for when it starts.
    pub(crate) fn set_register(&mut self, register: Register, value: i64) {
        match &mut self.mp {
            Some(mp) => {
                mp.registers[register.index()] = value;
                mp.due = true;
            }
            None => self.registers[register.index()] = value,
        }
    }

    pub(crate) fn register(&self, register: Register) -> i64 {
        match &self.mp {
            Some(mp) => mp.registers[register.index()],
            None => self.registers[register.index()],
        }
    }

    pub(crate) fn set_user_tag(&mut self, tag: i64) {
        self.user_tag = tag;
    }

    pub(crate) fn capture_prints(&mut self, on: bool) {
        self.capture_prints = on;
        if let Some(mp) = &mut self.mp {
            mp.prints = if on { Some(mp.prints.take().unwrap_or_default()) } else { None };
        }
    }

    pub(crate) fn take_prints(&mut self) -> Vec<String> {
        match self.mp.as_mut().and_then(|mp| mp.prints.as_mut()) {
            Some(log) => log.drain(..).collect(),
            None => Vec::new(),
        }
    }

    fn alloc_slot(&mut self) -> Option<u8> {
        if self.free_slots == 0 {
            return None;
        }
        let slot = self.free_slots.trailing_zeros() as u8;
        self.free_slots &= !(1 << slot);
        Some(slot)
    }

    /// Client: open a path from `local` to `remote`. It carries data once
    /// the server acknowledges its first packet.
    pub(crate) fn add_path(
        &mut self,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<u32, PathError> {
        if self.side != Side::Client {
            return Err(PathError::NotClient);
        }
        if matches!(self.state, State::Closing { .. } | State::Draining { .. } | State::Closed) || self.close_requested
        {
            return Err(PathError::Closed);
        }
        if self.paths.iter().any(|p| p.local == local && p.remote == remote) {
            return Err(PathError::Duplicate { local, remote });
        }
        if self.paths.len() >= MAX_PATHS || self.next_path_id == u32::MAX {
            return Err(PathError::TooMany { max: MAX_PATHS });
        }
        let slot = self.alloc_slot().ok_or(PathError::TooMany { max: MAX_PATHS })?;
        let id = self.next_path_id;
        self.next_path_id += 1;
        let mut path = Path::new(id, slot, local, remote, &self.config);
        // The first packet on the path asks for an acknowledgement, which
        // validates the path and gives its first RTT sample.
        path.ping_pending = true;
        path.sched.backup_local = backup;
        self.paths.push(path);
        if backup {
            self.queue_status(id, true);
        }
        self.enter_multipath();
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
        Ok(id)
    }

    /// Stop using path `id`; the peer is told.
    pub(crate) fn remove_path(&mut self, id: u32) -> Result<(), PathError> {
        let i = self.path_index(id).ok_or(PathError::UnknownPath(id))?;
        if self.paths.len() == 1 {
            return Err(PathError::LastPath(id));
        }
        self.abandon_path(i, true);
        Ok(())
    }

    /// Mark path `id` as a backup (or not), here and at the peer.
    pub(crate) fn set_path_backup(&mut self, id: u32, backup: bool) -> Result<(), PathError> {
        let i = self.path_index(id).ok_or(PathError::UnknownPath(id))?;
        self.paths[i].sched.backup_local = backup;
        self.queue_status(id, backup);
        self.enter_multipath();
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
        Ok(())
    }

    fn queue_status(&mut self, path_id: u32, backup: bool) {
        self.status_seq_out += 1;
        let seq = self.status_seq_out;
        self.control.retain(|c| !matches!(c.frame, ControlFrame::Status { path_id: p, .. } if p == path_id));
        self.control.push(Control { frame: ControlFrame::Status { path_id, seq, backup }, sent_in: None });
    }

    pub(crate) fn path_infos(&self) -> Vec<PathInfo> {
        let single = self.single_path_counters();
        self.paths
            .iter()
            .map(|p| (p, if self.mp.is_some() { p.counters } else { single }))
            .map(|(p, counters)| PathInfo {
                id: p.id,
                local: p.local,
                remote: p.remote,
                validated: p.validated,
                backup: p.is_backup(),
                lossy: p.sched.lossy,
                smoothed_rtt: p.rtt.smoothed(),
                min_rtt: p.rtt.min(),
                cwnd: p.cc.window(),
                bytes_in_flight: p.bytes_in_flight,
                packets_sent: counters.packets_sent,
                bytes_sent: counters.bytes_sent,
                stream_bytes_sent: counters.stream_bytes_sent,
                packets_received: counters.packets_received,
                bytes_received: counters.bytes_received,
                packets_lost: counters.packets_lost,
                queued: p.sched.queued.len() as u64,
                user: p.sched.user,
            })
            .collect()
    }

    /// Drops path `i`: what it still carried goes back for rescheduling
    /// (`RQ`, or the stream's retransmission queue for data sent before
    /// scheduling began).
    fn abandon_path(&mut self, i: usize, notify: bool) {
        let mut path = self.paths.remove(i);
        let mut lost = std::mem::take(&mut self.lost_scratch);
        path.take_all(&mut lost);
        for (pn, p) in lost.drain(..) {
            match (&mut self.mp, p.segment) {
                (Some(mp), true) => {
                    if let Some(id) = p.ranges.first.as_ref().and_then(|r| mp.segments.id_at(r.start)) {
                        mp.segments.reinject(id);
                    }
                }
                _ => {
                    for r in p.ranges.iter() {
                        self.send.on_lost(r);
                    }
                }
            }
            if p.control {
                self.on_control_lost(path.id, pn);
            }
        }
        self.lost_scratch = lost;
        if let Some(mp) = &mut self.mp {
            for &id in path.sched.queued.iter().chain(path.sched.retransmit.iter()) {
                mp.segments.reinject(id);
            }
            mp.segments.clear_slot(path.slot);
            mp.due = true;
        }
        self.free_slots |= 1 << path.slot;
        // Frames that went out on that path go out again on another.
        for c in &mut self.control {
            if c.sent_in.is_some_and(|(p, _)| p == path.id) {
                c.sent_in = None;
            }
        }
        self.control.retain(|c| !matches!(c.frame, ControlFrame::Status { path_id, .. } if path_id == path.id));
        if notify {
            self.control.push(Control { frame: ControlFrame::Abandon(path.id), sent_in: None });
        }
        self.stats.paths_abandoned += 1;
        self.next_poll = 0;
    }

    fn on_control_lost(&mut self, path_id: u32, pn: u64) {
        for c in &mut self.control {
            if c.sent_in == Some((path_id, pn)) {
                c.sent_in = None;
            }
        }
    }

    fn on_control_acked(&mut self, path_id: u32, pn: u64) {
        self.control.retain(|c| c.sent_in != Some((path_id, pn)));
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
            self.paths[0].rtt.update(Duration::from_micros(sample));
        }
        self.cookie = cookie;
        self.initial_due = true;
        self.last_received = now;
    }

    /// Server: a client retransmitted its Initial; our Accept was lost.
    /// The next one echoes the new Initial's timestamp.
    pub(crate) fn on_repeated_initial(&mut self, timestamp_us: u64) {
        if self.state == State::Established && !self.peer_confirmed {
            let path = &mut self.paths[0];
            path.ping_pending = true;
            path.echo_timestamp_us = path.echo_timestamp_us.max(timestamp_us);
        }
    }

    // ----- receiving -----

    /// Server: a Data packet names a path we do not know. A new path id
    /// opens a path on the addresses it came from; a retired one is
    /// refused.
    fn open_remote_path(&mut self, id: u32, local: Option<SocketAddr>, remote: SocketAddr) -> Option<usize> {
        if self.side != Side::Server || self.state != State::Established || id < self.next_path_id {
            return None;
        }
        if self.paths.len() >= MAX_PATHS {
            return None;
        }
        let slot = self.alloc_slot()?;
        self.next_path_id = id.saturating_add(1);
        let mut path = Path::new(id, slot, local, remote, &self.config);
        // Validate the path (and take an RTT sample) before sending data.
        path.ping_pending = true;
        self.paths.push(path);
        self.enter_multipath();
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
        Some(self.paths.len() - 1)
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
        let header = &packet.header;
        match (self.side, header.ty) {
            (Side::Client, PacketType::Accept) => {
                if self.state == State::Handshaking {
                    self.remote_cid = header.src_cid;
                    self.state = State::Established;
                    // The Accept echoes our Initial's timestamp: a first RTT sample.
                    if header.echo_timestamp_us > 0 {
                        let now_us = self.timestamp_us(now);
                        let sample = now_us.saturating_sub(header.echo_timestamp_us);
                        self.paths[0].rtt.update(Duration::from_micros(sample));
                        self.paths[0].on_handshake_echo(now_us, header.timestamp_us, header.echo_timestamp_us);
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
            self.stats.duplicate_packets += 1;
        }
        if is_largest {
            // Follow a peer whose address changed (NAT rebinding).
            path.remote = remote;
            if multipath {
                path.on_timestamp(now_us, timestamp_us);
            }
        }

        let mut ack_eliciting = false;
        let mut newly_readable = false;
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
                Frame::PathAbandon { path_id: gone } => {
                    ack_eliciting = true;
                    // The peer stops using the path. Never our last one,
                    // nor the one this very packet came on.
                    if let Some(i) = self.path_index(gone) {
                        if self.paths.len() > 1 && gone != path_id {
                            self.abandon_path(i, false);
                        }
                    }
                }
                Frame::PathStatus { path_id: target, seq, backup } => {
                    ack_eliciting = true;
                    if let Some(i) = self.path_index(target) {
                        let p = &mut self.paths[i];
                        if seq > p.sched.status_seq_in {
                            p.sched.status_seq_in = seq;
                            p.sched.backup_remote = backup;
                            if let Some(mp) = &mut self.mp {
                                mp.due = true;
                            }
                        }
                    }
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
            if let Some(i) = self.path_index(path_id) {
                self.paths[i].on_ack_eliciting(now, !in_order || duplicate, &self.config);
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
                self.state = State::Draining { until: now + self.rto() * 3 };
                self.clear_in_flight();
            }
        }
    }

    fn on_ack_frame(&mut self, now: Instant, ack: &AckFrame, peer_ts_us: u64, echo_us: u64) {
        if ack.max_data > self.peer_max_data {
            self.peer_max_data = ack.max_data;
            if let Some(mp) = &mut self.mp {
                mp.due = true;
            }
        }
        let Some(pi) = self.path_index(ack.path_id) else { return };
        let mut acked = std::mem::take(&mut self.acked_scratch);
        acked.clear();
        let path = &mut self.paths[pi];
        let Some(sample) = path.take_acked(ack, &mut acked) else {
            self.acked_scratch = acked;
            return; // acknowledges a packet never sent: ignore the frame
        };
        if acked.is_empty() {
            self.acked_scratch = acked;
            return;
        }
        let mut one_way_delay_us = None;
        if let Some(sent_time) = sample {
            let raw = now.saturating_duration_since(sent_time);
            one_way_delay_us =
                path.on_rtt_sample(raw, ack.ack_delay_us, self.config.max_ack_delay, peer_ts_us, echo_us);
        }
        path.report_acked(now, &acked, one_way_delay_us);
        path.sched.lossy = false;
        path.validated = true;
        let path_id = path.id;

        let mut freed = 0;
        for (pn, p) in acked.iter().rev() {
            for r in p.ranges.iter() {
                freed += self.send.on_ack(r);
            }
            if let (Some(mp), true) = (&mut self.mp, p.segment) {
                if let Some(id) = p.ranges.first.as_ref().and_then(|r| mp.segments.id_at(r.start)) {
                    mp.segments.on_acked(id);
                }
            }
            if p.control {
                self.on_control_acked(path_id, *pn);
            }
        }
        acked.clear();
        self.acked_scratch = acked;
        if freed > 0 && self.want_writable && self.send.buffered() < self.config.send_buffer {
            self.want_writable = false;
            self.events.push(Event::Writable(self.handle));
        }
        self.detect_lost(now, pi);
        // RFC 6298 (5.3): restart the timer when new data is acknowledged.
        let path = &mut self.paths[pi];
        if path.ack_eliciting_in_flight > 0 {
            path.restart_rto(now);
        } else {
            path.rto_armed_at = None;
        }
        if let Some(mp) = &mut self.mp {
            mp.due = true;
        }
        self.maybe_send_close(now);
    }

    /// RFC 9002 §6.1 on path `pi`.
    fn detect_lost(&mut self, now: Instant, pi: usize) {
        let mut lost = std::mem::take(&mut self.lost_scratch);
        self.paths[pi].detect_lost(now, &mut lost);
        if !lost.is_empty() {
            self.declare_lost(now, pi, &lost, false);
        }
        lost.clear();
        self.lost_scratch = lost;
    }

    fn declare_lost(&mut self, now: Instant, pi: usize, lost: &[(u64, SentPacket)], by_timeout: bool) {
        self.stats.packets_lost += lost.len() as u64;
        let path = &mut self.paths[pi];
        if path.on_lost(now, lost, by_timeout) {
            self.stats.congestion_events += 1;
        }
        let path_id = path.id;
        for (pn, p) in lost {
            match (&mut self.mp, p.segment) {
                (Some(mp), true) => {
                    // Like an MPTCP subflow, the path resends its own loss;
                    // the segment also joins RQ for the scheduler to
                    // reinject.
                    if let Some(id) = p.ranges.first.as_ref().and_then(|r| mp.segments.id_at(r.start)) {
                        if mp.segments.on_lost(id) {
                            self.paths[pi].sched.retransmit.push_back(id);
                        }
                    }
                    mp.due = true;
                }
                _ => {
                    for r in p.ranges.iter() {
                        self.send.on_lost(r);
                    }
                }
            }
            if p.control {
                self.on_control_lost(path_id, *pn);
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
                    consider(Some(sent + self.rto()));
                }
                return t;
            }
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
                } else if self.initial_sent_at.is_some_and(|s| now >= s + self.rto()) {
                    self.paths[0].rtt.back_off();
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
            if path.loss_time.is_some_and(|t| now >= t) {
                self.detect_lost(now, pi);
            } else if self.mp.is_none() && path.tail_probe_at().is_some_and(|t| now >= t) {
                // The probe: one ack-eliciting packet, past the congestion
                // window. Its ACK lets the time threshold declare the
                // lost tail (RFC 9002 §6.1.2), answered by fast recovery
                // instead of the RTO's collapse of the window.
                path.tail_probes += 1;
                path.ping_pending = true;
                self.stats.tail_probes += 1;
            } else if path.rto_armed_at.is_some_and(|a| now >= a + path.rtt.rto()) && self.on_rto(now, pi) {
                failed = failed.or(Some(self.paths[pi].id));
            }
        }
        if let Some(i) = failed.and_then(|id| self.path_index(id)) {
            self.abandon_path(i, true);
        }
    }

    /// The path for a keep-alive or window probe: the first that works
    /// (validated, not failing), else the primary.
    fn probe_path(&self) -> usize {
        self.paths.iter().position(|p| p.validated && !p.sched.lossy).unwrap_or(0)
    }

    /// RFC 6298 (5.4)–(5.6) with RFC 5681 §3.1's loss window: everything in
    /// flight on the path is presumed lost and goes back to be resent; the
    /// window collapses, so only the earliest data leaves first. Returns
    /// whether the path has failed and should be abandoned.
    fn on_rto(&mut self, now: Instant, pi: usize) -> bool {
        self.stats.rto_count += 1;
        let mut lost = std::mem::take(&mut self.lost_scratch);
        let path = &mut self.paths[pi];
        path.rtt.back_off();
        path.take_all(&mut lost);
        self.declare_lost(now, pi, &lost, true);
        lost.clear();
        self.lost_scratch = lost;
        let has_legacy = self.send.has_retransmissions();
        let path = &mut self.paths[pi];
        path.cc.on_retransmission_timeout(now);
        self.stats.congestion_events += 1;
        path.rto_armed_at = None;
        path.pacing_until = None;
        let Some(mp) = &mut self.mp else {
            if !has_legacy {
                path.ping_pending = true;
            }
            return false;
        };
        // MPTCP (thesis §3.3.1): a subflow's retransmission timeout
        // reinjects everything it holds, and marks it potentially failed
        // (`IS_LOSSY`) until something it sends is acknowledged. A PING
        // goes with the probe so the path is heard from even when other
        // paths delivered its data meanwhile.
        path.sched.lossy = true;
        path.ping_pending = true;
        for &id in &path.sched.queued {
            mp.segments.reinject(id);
        }
        mp.due = true;
        let backoff = path.rtt.backoff();
        let healthy_other = self
            .paths
            .iter()
            .enumerate()
            .any(|(j, p)| j != pi && p.validated && !p.sched.lossy && p.rtt.backoff() == 0);
        backoff >= PATH_FAILURE_RTOS && healthy_other
    }

    // ----- sending -----

    /// Writes one datagram into `buf` (appending), if anything is due.
    /// `max_size` bounds its size (GSO batches need equal segments; only
    /// the last may be shorter). With `only_path`, only that path may send
    /// (the rest of a GSO batch).
    pub(crate) fn poll_transmit(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        max_size: usize,
        only_path: Option<usize>,
    ) -> Option<Outgoing> {
        let start = buf.len();
        match self.state {
            State::Closed | State::Draining { .. } => return None,
            State::Handshaking => return self.poll_initial(now, buf),
            State::Closing { .. } => {
                if only_path.is_some_and(|p| p != 0) {
                    return None;
                }
                let (code, reason) = self.close_frame.take()?;
                self.write_header(now, 0, buf, PacketType::Data);
                wire::encode_frame(buf, &Frame::Close { code, reason });
                let none = StreamRanges::default();
                return self.finish_packet(now, 0, buf, start, false, none, false, false, false);
            }
            State::Established => {}
        }
        if self.mp.is_some() {
            return self.poll_scheduled(now, buf, max_size, only_path);
        }
        self.poll_single(now, buf, max_size)
    }

    /// Single-path sending: the stream goes straight into packets.
    fn poll_single(&mut self, now: Instant, buf: &mut Vec<u8>, max_size: usize) -> Option<Outgoing> {
        let start = buf.len();
        let mtu = max_size.min(usize::from(self.config.max_datagram_size));
        let path = &mut self.paths[0];
        let ack_due = path.ack_due(now) || (path.largest_received.is_some() && self.recv.window_update_due());
        let window_ok = path.bytes_in_flight + mtu as u64 <= path.cc.window();
        let data_ready = self.send.has_data(self.peer_max_data);
        let mut can_send_data = data_ready && window_ok;
        if can_send_data && self.config.pacing && path.pacing_until.is_none() {
            let rate = path.cc.pacing_rate(path.rtt.smoothed());
            path.pacer.set_burst((rate * 0.001) as u64 + 16 * mtu as u64);
            if let Some(t) = path.pacer.delay(now, rate, mtu as u64) {
                path.pacing_until = Some(t);
            }
        }
        if path.pacing_until.is_some() {
            can_send_data = false;
        }
        if !(ack_due || can_send_data || path.ping_pending) {
            self.update_flow_probe(now);
            return None;
        }

        let packet_type = if self.peer_confirmed { PacketType::Data } else { PacketType::Accept };
        self.write_header(now, 0, buf, packet_type);
        // Always piggyback an ACK when we owe one.
        if self.paths[0].ack_eliciting_unacked > 0 || ack_due {
            self.write_ack(now, 0, buf, mtu - (buf.len() - start));
        }
        let mut ack_eliciting = false;
        if self.paths[0].ping_pending {
            wire::encode_frame(buf, &Frame::Ping);
            self.paths[0].ping_pending = false;
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
        self.finish_packet(now, 0, buf, start, ack_eliciting, ranges, false, false, app_limited)
    }

    /// Scheduled sending: run the scheduler if something happened, then
    /// let the paths take turns sending what they hold.
    fn poll_scheduled(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        max_size: usize,
        only_path: Option<usize>,
    ) -> Option<Outgoing> {
        // Twice at most: looking at the paths may itself be a trigger (a
        // queue shrank as acknowledged entries were dropped).
        for _ in 0..2 {
            self.run_scheduler(now);
            let n = self.paths.len();
            if let Some(i) = only_path {
                if i >= n {
                    return None;
                }
                if let Some(out) = self.poll_path(now, i, buf, max_size) {
                    return Some(out);
                }
            } else {
                let first = self.next_poll % n;
                for k in 0..n {
                    let i = (first + k) % n;
                    if let Some(out) = self.poll_path(now, i, buf, max_size) {
                        self.next_poll = (i + 1) % n;
                        return Some(out);
                    }
                }
            }
            if !self.mp.as_ref().is_some_and(|mp| mp.due) {
                break;
            }
        }
        self.update_flow_probe(now);
        None
    }

    fn run_scheduler(&mut self, now: Instant) {
        if let Some(mp) = &mut self.mp {
            if mp.due {
                mp.run(now, &mut self.paths, self.peer_max_data);
            }
        }
    }

    /// Drops acknowledged segments from the heads of path `i`'s queues.
    fn purge_path_queues(&mut self, i: usize) {
        let Some(mp) = &mut self.mp else { return };
        let sched = &mut self.paths[i].sched;
        while sched.retransmit.front().is_some_and(|&id| mp.segments.get(id).is_none()) {
            sched.retransmit.pop_front();
        }
        while sched.queued.front().is_some_and(|&id| mp.segments.get(id).is_none()) {
            sched.queued.pop_front();
            // The queue shrank: the path may no longer be throttled.
            mp.due = true;
        }
    }

    /// Path `i` has data it may send now (flow control permitting).
    fn path_has_data(&self, i: usize) -> bool {
        let path = &self.paths[i];
        if !path.validated {
            return false;
        }
        if !path.sched.retransmit.is_empty() || self.send.has_retransmissions() {
            return true;
        }
        let Some(mp) = &self.mp else { return false };
        path.sched
            .queued
            .front()
            .and_then(|&id| mp.segments.get(id))
            .is_some_and(|s| s.seq + u64::from(s.len) <= self.peer_max_data)
    }

    /// One datagram on path `i` in scheduled sending, if it has anything
    /// to send.
    fn poll_path(&mut self, now: Instant, i: usize, buf: &mut Vec<u8>, max_size: usize) -> Option<Outgoing> {
        let start = buf.len();
        let mtu = max_size.min(usize::from(self.config.max_datagram_size));
        self.purge_path_queues(i);
        let data_ready = self.path_has_data(i);
        let path_id = self.paths[i].id;
        let validated = self.paths[i].validated;
        // Path frames go on validated paths. A path's status goes on the
        // path itself, or on another once the path is validated (the peer
        // knows it then: a status for a path it does not know yet would be
        // lost on it).
        let mut validated_ids = [u32::MAX; MAX_PATHS];
        for (slot, p) in validated_ids.iter_mut().zip(self.paths.iter().filter(|p| p.validated)) {
            *slot = p.id;
        }
        let carries = |c: &Control| {
            c.sent_in.is_none()
                && match c.frame {
                    ControlFrame::Abandon(_) => validated,
                    ControlFrame::Status { path_id: p, .. } => {
                        p == path_id || (validated && validated_ids.contains(&p))
                    }
                }
        };
        let control_due = self.control.iter().any(carries);
        let path = &mut self.paths[i];
        let ack_due = path.ack_due(now) || (path.largest_received.is_some() && self.recv.window_update_due());
        let window_ok = path.bytes_in_flight + mtu as u64 <= path.cc.window();
        let mut can_send_data = data_ready && window_ok;
        if can_send_data && self.config.pacing && path.pacing_until.is_none() {
            let rate = path.cc.pacing_rate(path.rtt.smoothed());
            path.pacer.set_burst((rate * 0.001) as u64 + 16 * mtu as u64);
            if let Some(t) = path.pacer.delay(now, rate, mtu as u64) {
                path.pacing_until = Some(t);
            }
        }
        if path.pacing_until.is_some() {
            can_send_data = false;
        }
        if !(ack_due || can_send_data || path.ping_pending || control_due) {
            return None;
        }
        let packet_type = if self.peer_confirmed { PacketType::Data } else { PacketType::Accept };
        if packet_type == PacketType::Accept && path_id != 0 {
            return None;
        }
        self.write_header(now, i, buf, packet_type);
        let header_end = buf.len();
        if self.paths[i].ack_eliciting_unacked > 0 || ack_due {
            self.write_ack(now, i, buf, mtu - (buf.len() - start));
        }
        let mut ack_eliciting = false;
        let mut control_sent = false;
        if control_due {
            let pn = self.paths[i].next_pn;
            for c in &mut self.control {
                if !carries(c) || mtu - (buf.len() - start) < 32 {
                    continue;
                }
                let frame = match c.frame {
                    ControlFrame::Abandon(id) => Frame::PathAbandon { path_id: id },
                    ControlFrame::Status { path_id, seq, backup } => Frame::PathStatus { path_id, seq, backup },
                };
                wire::encode_frame(buf, &frame);
                c.sent_in = Some((path_id, pn));
                control_sent = true;
                ack_eliciting = true;
            }
        }
        if self.paths[i].ping_pending {
            wire::encode_frame(buf, &Frame::Ping);
            self.paths[i].ping_pending = false;
            ack_eliciting = true;
        }
        let mut ranges = StreamRanges::default();
        let mut segment = false;
        if can_send_data {
            let room = mtu.saturating_sub(buf.len() - start);
            if let Some(id) = self.take_segment(i, room) {
                if let Some(r) = self.write_segment(i, id, buf) {
                    ranges.push(r);
                    segment = true;
                    ack_eliciting = true;
                }
            } else if self.send.has_retransmissions() {
                // Data sent before scheduling began, lost since.
                let overhead = wire::data_frame_overhead(self.send.next_unsent().max(1 << 30), room as u64);
                if room > overhead {
                    if let Some(chunk) = self.send.next_chunk((room - overhead) as u64, 0) {
                        wire::encode_data_frame_header(buf, chunk.offset, chunk.len, chunk.message_end);
                        self.send.write_chunk(buf, &chunk);
                        self.stats.retransmitted_bytes += chunk.len;
                        self.paths[i].counters.stream_bytes_sent += chunk.len;
                        ranges.push(chunk.offset..chunk.offset + chunk.len);
                        ack_eliciting = true;
                    }
                }
            }
        }
        if buf.len() == header_end {
            // Nothing to say after all.
            buf.truncate(start);
            return None;
        }
        let len = buf.len() - start;
        let has_data = ranges.first.is_some();
        if has_data && len < mtu && mtu - len <= MAX_PAD_TO_FULL {
            wire::encode_padding(buf, mtu - len);
        }
        // Application-limited (RFC 7661): the path has nothing more to send
        // and the scheduler nothing more to give.
        let app_limited = self.mp.as_ref().is_none_or(|mp| {
            let s = &self.paths[i].sched;
            s.queued.is_empty() && s.retransmit.is_empty() && mp.segments.q_len() == 0 && mp.segments.rq_len() == 0
        });
        self.finish_packet(now, i, buf, start, ack_eliciting, ranges, segment, control_sent, app_limited)
    }

    /// Takes the next segment path `i` should send, if it fits in `room`
    /// bytes and the peer's window: its own losses first, then what the
    /// scheduler gave it. Data lost before scheduling began goes first of
    /// all (`None` while there is some).
    fn take_segment(&mut self, i: usize, room: usize) -> Option<u64> {
        let mp = self.mp.as_mut()?;
        let sched = &mut self.paths[i].sched;
        let max_data = self.peer_max_data;
        let fits = |s: &crate::multipath::Segment| s.frame_bytes as usize <= room && s.seq + u64::from(s.len) <= max_data;
        if let Some(&id) = sched.retransmit.front() {
            if mp.segments.get(id).is_some_and(fits) {
                sched.retransmit.pop_front();
                return Some(id);
            }
            return None;
        }
        if self.send.has_retransmissions() {
            return None;
        }
        let &id = sched.queued.front()?;
        if mp.segments.get(id).is_some_and(fits) {
            sched.queued.pop_front();
            // The queue shrank: the path may no longer be throttled.
            mp.due = true;
            return Some(id);
        }
        None
    }

    /// Writes segment `id`'s DATA frames; returns its stream range.
    fn write_segment(&mut self, i: usize, id: u64, buf: &mut Vec<u8>) -> Option<std::ops::Range<u64>> {
        let seg = self.mp.as_ref()?.segments.get(id)?;
        let (seq, len, was_lost) = (seg.seq, u64::from(seg.len), seg.was_lost);
        self.send.encode_range(buf, seq, len);
        if was_lost {
            self.stats.retransmitted_bytes += len;
        }
        self.paths[i].counters.stream_bytes_sent += len;
        Some(seq..seq + len)
    }

    /// When silence from the peer ends the connection.
    ///
    /// With nothing outstanding, after the idle timeout. With data or a
    /// probe outstanding, silence may just be loss, so, like TCP's retry
    /// limit, only once `UNANSWERED_RTOS_BEFORE_IDLE` retransmission
    /// timeouts in a row went unanswered as well, on every path; and never
    /// sooner than three RTOs (RFC 9000 §10.1 uses three probe timeouts).
    fn idle_deadline(&self) -> Option<Instant> {
        let outstanding = !self.send.is_fully_acked()
            || self.paths.iter().any(|p| p.ack_eliciting_in_flight > 0 || p.ping_pending);
        let backoff = self.paths.iter().filter(|p| p.validated).map(|p| p.rtt.backoff()).min().unwrap_or(0);
        if outstanding && backoff < UNANSWERED_RTOS_BEFORE_IDLE {
            return None;
        }
        Some(self.last_received + self.config.idle_timeout.max(self.rto() * 3))
    }

    fn update_flow_probe(&mut self, now: Instant) {
        let max_data = self.peer_max_data;
        let blocked = match &self.mp {
            None => self.send.is_flow_blocked(max_data),
            Some(mp) => {
                let beyond = |s: &crate::multipath::Segment| s.seq + u64::from(s.len) > max_data;
                mp.segments.q_front().is_some_and(beyond)
                    || self
                        .paths
                        .iter()
                        .any(|p| p.sched.queued.front().and_then(|&id| mp.segments.get(id)).is_some_and(beyond))
            }
        };
        if blocked && self.paths.iter().all(|p| p.bytes_in_flight == 0) {
            if self.flow_probe_at.is_none() {
                self.flow_probe_at = Some(now + self.rto());
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
        self.write_header(now, 0, buf, PacketType::Initial);
        // Pad so the server's answers are never larger than what it got
        // (no amplification toward a spoofed address).
        let min = usize::from(crate::config::TransportConfig::MIN_DATAGRAM_SIZE);
        let have = buf.len() - start;
        if have < min {
            wire::encode_padding(buf, min - have);
        }
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += (buf.len() - start) as u64;
        Some(Outgoing { size: buf.len() - start, path: 0 })
    }

    fn write_header(&mut self, now: Instant, pi: usize, buf: &mut Vec<u8>, ty: PacketType) {
        let path = &self.paths[pi];
        let timestamp_us = self.timestamp_us(now).max(1);
        if ty == PacketType::Data {
            // The hot path, without building a `Header`.
            let (id, pn, echo) = (path.id, path.next_pn, path.echo_timestamp_us);
            wire::encode_data_header(buf, self.remote_cid, id, pn, timestamp_us, echo);
            return;
        }
        let header = Header {
            ty,
            dst_cid: self.remote_cid,
            src_cid: self.local_cid,
            cookie: if ty == PacketType::Initial { self.cookie.clone() } else { Bytes::new() },
            path_id: path.id,
            pn: path.next_pn,
            timestamp_us,
            echo_timestamp_us: path.echo_timestamp_us,
        };
        wire::encode_header(buf, &header);
    }

    fn write_ack(&mut self, now: Instant, pi: usize, buf: &mut Vec<u8>, room: usize) {
        if self.paths[pi].largest_received.is_none() {
            return;
        }
        let max_data = self.recv.announce();
        let path = &mut self.paths[pi];
        if let Some(ack) = path.ack_frame(now, room, max_data) {
            wire::encode_frame(buf, &Frame::Ack(ack));
        }
        path.on_ack_sent();
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn finish_packet(
        &mut self,
        now: Instant,
        pi: usize,
        buf: &[u8],
        start: usize,
        ack_eliciting: bool,
        ranges: StreamRanges,
        segment: bool,
        control: bool,
        app_limited: bool,
    ) -> Option<Outgoing> {
        let size = (buf.len() - start) as u64;
        let established = self.state == State::Established;
        let pacing = self.config.pacing;
        let path = &mut self.paths[pi];
        let pn = path.next_pn;
        path.next_pn += 1;
        debug_assert_eq!(path.sent_base + path.sent.len() as u64, pn);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += size;
        if self.mp.is_some() {
            path.counters.packets_sent += 1;
            path.counters.bytes_sent += size;
        }
        if ack_eliciting && established {
            path.bytes_in_flight += size;
            path.ack_eliciting_in_flight += 1;
            self.last_ack_eliciting_sent = now;
            path.cc.on_sent(now, size, path.bytes_in_flight);
            if pacing {
                path.pacer.on_sent(size);
            }
            // RFC 6298 (5.1): start the timer if it is not running.
            if path.rto_armed_at.is_none() {
                path.restart_rto(now);
            }
            path.sent.push_back(Some(SentPacket { time: now, size, ack_eliciting, app_limited, segment, control, ranges }));
        } else if path.sent.is_empty() {
            path.sent_base = path.next_pn;
        } else {
            path.sent.push_back(None);
        }
        Some(Outgoing { size: size as usize, path: pi })
    }
}
