//! The endpoint: one UDP socket's worth of connections.
//!
//! Demultiplexes datagrams by destination connection ID, answers a first
//! handshake packet with a stateless cookie challenge (so a spoofed source
//! address creates no state), and round-robins transmissions across
//! connections.

use std::collections::VecDeque;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};

use braid_core::{Instant, RngCore, SeedableRng};
use bytes::Bytes;
use siphasher::sip128::{Hasher128, SipHasher24};

use crate::config::{EndpointConfig, TransportConfig};
use crate::connection::{Connection, CLOSE_REFUSED};
use crate::stats::{ConnectionStats, EndpointStats};
use crate::wire::{self, Frame, Header, Packet, PacketType};

/// Identifies a connection within its endpoint. Never reused by an endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnectionHandle(pub u64);

/// Something the application should know about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A connection we initiated completed its handshake.
    Connected(ConnectionHandle),
    /// A peer's connection was accepted; it is established.
    Accepted(ConnectionHandle),
    /// At least one message is ready for `recv_message`.
    Readable(ConnectionHandle),
    /// After a [`SendError::Blocked`], the send buffer has room again.
    Writable(ConnectionHandle),
    /// Everything sent before a graceful close has been acknowledged.
    Flushed(ConnectionHandle),
    /// The connection is closed. Messages already received stay readable
    /// until `recv_message` returns [`RecvError::Closed`]; after that the
    /// handle is forgotten.
    Closed(ConnectionHandle, CloseReason),
}

/// Why a connection closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloseReason {
    /// The application closed it.
    Local,
    /// The peer closed it, with an application code and reason.
    Remote { code: u64, reason: String },
    /// Nothing was heard from the peer for the idle timeout.
    IdleTimeout,
    /// The handshake did not complete in time.
    HandshakeTimeout,
    /// The server refused the connection (full, or not accepting).
    Refused,
    /// The peer broke the protocol; the text says how.
    ProtocolViolation(String),
}

impl std::fmt::Display for CloseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CloseReason::Local => f.write_str("closed locally"),
            CloseReason::Remote { code, reason } => write!(f, "closed by peer (code {code}: {reason})"),
            CloseReason::IdleTimeout => f.write_str("idle timeout"),
            CloseReason::HandshakeTimeout => f.write_str("handshake timed out"),
            CloseReason::Refused => f.write_str("connection refused by peer"),
            CloseReason::ProtocolViolation(why) => write!(f, "protocol violation: {why}"),
        }
    }
}

/// One or more datagrams to send, written to the buffer given to
/// [`Endpoint::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send them.
    pub destination: SocketAddr,
    /// Bytes written to the buffer.
    pub size: usize,
    /// If `Some(s)`, the buffer holds several datagrams of `s` bytes each
    /// (the last may be shorter), to be sent with one GSO call.
    pub segment_size: Option<usize>,
}

/// `connect` failed before anything was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConnectError {
    /// The endpoint holds `max_connections` already.
    #[error("endpoint is full ({0} connections)")]
    TooManyConnections(usize),
    /// The transport configuration is invalid.
    #[error(transparent)]
    InvalidConfig(#[from] crate::config::ConfigError),
}

/// `send_message` did not accept the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The send buffer is full; the message is handed back. Wait for
    /// [`Event::Writable`] and try again.
    #[error("send buffer full")]
    Blocked(Bytes),
    /// The message exceeds `max_message_size`.
    #[error("message of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge { size: u64, max: u64 },
    /// The connection is closed or closing.
    #[error("connection closed: {0}")]
    Closed(CloseReason),
    /// No such connection.
    #[error("unknown connection")]
    UnknownConnection,
}

/// `recv_message` found the connection gone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// The connection closed and every received message has been read.
    #[error("connection closed: {0}")]
    Closed(CloseReason),
    /// No such connection.
    #[error("unknown connection")]
    UnknownConnection,
}

enum CookieCheck {
    Valid,
    Missing,
    Expired,
    Forged,
}

/// Bytes of a cookie: issue time (ms, 8 bytes) and a 128-bit SipHash MAC.
const COOKIE_LEN: usize = 24;

/// A set of connections sharing one UDP socket. See the crate docs for a
/// complete example.
pub struct Endpoint {
    config: EndpointConfig,
    rng: braid_core::Rng,
    cookie_key: (u64, u64),
    connections: HashMap<ConnectionHandle, Connection>,
    by_cid: HashMap<u64, ConnectionHandle>,
    /// Server: accepted handshakes by (client address, client CID), so a
    /// repeated Initial finds its connection instead of making another.
    by_initial: HashMap<(SocketAddr, u64), ConnectionHandle>,
    next_handle: u64,
    events: VecDeque<Event>,
    /// Stateless answers (RETRY, refusals) waiting to be sent.
    stateless: VecDeque<(SocketAddr, Vec<u8>)>,
    /// Connections that may have something to send, in round-robin order.
    send_queue: VecDeque<ConnectionHandle>,
    /// Members of `send_queue`, so a handle is queued at most once.
    queued: HashSet<ConnectionHandle>,
    stats: EndpointStats,
}

impl Endpoint {
    /// A new endpoint; `seed` drives connection IDs and the cookie key.
    pub fn new(config: EndpointConfig, seed: u64) -> Self {
        let mut rng = braid_core::Rng::seed_from_u64(seed);
        let cookie_key = (rng.next_u64(), rng.next_u64());
        Endpoint {
            config,
            rng,
            cookie_key,
            connections: HashMap::default(),
            by_cid: HashMap::default(),
            by_initial: HashMap::default(),
            next_handle: 0,
            events: VecDeque::new(),
            stateless: VecDeque::new(),
            send_queue: VecDeque::new(),
            queued: HashSet::default(),
            stats: EndpointStats::default(),
        }
    }

    /// The endpoint's configuration.
    pub fn config(&self) -> &EndpointConfig {
        &self.config
    }

    /// Start a handshake with `remote` using the endpoint's transport config.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr) -> Result<ConnectionHandle, ConnectError> {
        self.connect_with(now, remote, self.config.transport.clone())
    }

    /// Start a handshake with `remote` using `transport`.
    pub fn connect_with(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        transport: TransportConfig,
    ) -> Result<ConnectionHandle, ConnectError> {
        transport.validate()?;
        if self.connections.len() >= self.config.max_connections {
            return Err(ConnectError::TooManyConnections(self.connections.len()));
        }
        let handle = self.new_handle();
        let cid = self.new_cid();
        let conn = Connection::new_client(handle, now, remote, cid, transport);
        self.insert(handle, cid, conn);
        self.stats.connections_initiated += 1;
        Ok(handle)
    }

    fn new_handle(&mut self) -> ConnectionHandle {
        self.next_handle += 1;
        ConnectionHandle(self.next_handle)
    }

    fn new_cid(&mut self) -> u64 {
        loop {
            let cid = self.rng.next_u64();
            if cid != 0 && !self.by_cid.contains_key(&cid) {
                return cid;
            }
        }
    }

    fn insert(&mut self, handle: ConnectionHandle, cid: u64, conn: Connection) {
        self.by_cid.insert(cid, handle);
        self.connections.insert(handle, conn);
        self.stats.connections_open = self.connections.len() as u64;
        self.mark_active(handle);
    }

    /// A datagram arrived from `remote`. Never panics; malformed input is
    /// dropped and counted in [`EndpointStats`].
    pub fn handle_datagram(&mut self, now: Instant, remote: SocketAddr, datagram: Bytes) {
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        let size = datagram.len();
        let packet = match Packet::decode(datagram) {
            Ok(p) => p,
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        let header = &packet.header;
        if header.ty == PacketType::Initial {
            self.handle_initial(now, remote, &packet, size);
            return;
        }
        let Some(&handle) = self.by_cid.get(&header.dst_cid) else {
            self.stats.unknown_connection_datagrams += 1;
            return;
        };
        let Some(conn) = self.connections.get_mut(&handle) else { return };
        if header.ty == PacketType::Retry {
            let cookie = header.cookie.clone();
            conn.on_retry(now, cookie, header.echo_timestamp_us);
        } else {
            conn.handle_packet(now, remote, packet, size);
        }
        self.mark_active(handle);
    }

    /// Server side of the handshake: answer a cookie-less Initial with a
    /// stateless RETRY; create the connection only for a valid cookie, which
    /// proves the client receives at its source address.
    fn handle_initial(&mut self, now: Instant, remote: SocketAddr, packet: &Packet, size: usize) {
        let header = &packet.header;
        if size < usize::from(TransportConfig::MIN_DATAGRAM_SIZE) || header.src_cid == 0 {
            self.stats.malformed_datagrams += 1;
            return;
        }
        if let Some(&handle) = self.by_initial.get(&(remote, header.src_cid)) {
            if let Some(conn) = self.connections.get_mut(&handle) {
                conn.on_repeated_initial();
                self.mark_active(handle);
            }
            return;
        }
        if !self.config.accept_incoming {
            self.stats.connections_refused += 1;
            self.queue_refusal(remote, header.src_cid);
            return;
        }
        match self.check_cookie(now, remote, header.src_cid, &header.cookie) {
            CookieCheck::Valid => {}
            CookieCheck::Missing => {
                self.queue_retry(now, remote, header);
                return;
            }
            CookieCheck::Expired => {
                // Genuine but old (the client's Initial was delayed or lost
                // many times): a fresh challenge, still without state.
                self.stats.invalid_cookies += 1;
                self.queue_retry(now, remote, header);
                return;
            }
            CookieCheck::Forged => {
                self.stats.invalid_cookies += 1;
                return;
            }
        }
        if self.connections.len() >= self.config.max_connections {
            self.stats.connections_refused += 1;
            self.queue_refusal(remote, header.src_cid);
            return;
        }
        let handle = self.new_handle();
        let cid = self.new_cid();
        let conn = Connection::new_server(handle, now, remote, cid, header.src_cid, self.config.transport.clone());
        self.by_initial.insert((remote, header.src_cid), handle);
        self.insert(handle, cid, conn);
        self.stats.connections_accepted += 1;
    }

    fn cookie_mac(&self, issued_ms: u64, remote: SocketAddr, client_cid: u64) -> [u8; 16] {
        let mut h = SipHasher24::new_with_keys(self.cookie_key.0, self.cookie_key.1);
        h.write_u64(issued_ms);
        match remote.ip() {
            IpAddr::V4(ip) => h.write(&ip.octets()),
            IpAddr::V6(ip) => h.write(&ip.octets()),
        }
        h.write_u16(remote.port());
        h.write_u64(client_cid);
        h.finish128().as_bytes()
    }

    fn queue_retry(&mut self, now: Instant, remote: SocketAddr, initial: &Header) {
        let client_cid = initial.src_cid;
        let issued_ms = now.as_nanos() / 1_000_000;
        let mut cookie = Vec::with_capacity(COOKIE_LEN);
        cookie.extend_from_slice(&issued_ms.to_be_bytes());
        cookie.extend_from_slice(&self.cookie_mac(issued_ms, remote, client_cid));
        let mut buf = Vec::with_capacity(64);
        let header = Header {
            ty: PacketType::Retry,
            dst_cid: client_cid,
            src_cid: 0,
            cookie: Bytes::from(cookie),
            pn: 0,
            timestamp_us: 0,
            // Lets the client take an RTT sample without us keeping state.
            echo_timestamp_us: initial.timestamp_us,
        };
        wire::encode_header(&mut buf, &header);
        self.stats.retries_sent += 1;
        self.stateless.push_back((remote, buf));
    }

    fn check_cookie(&self, now: Instant, remote: SocketAddr, client_cid: u64, cookie: &[u8]) -> CookieCheck {
        if cookie.is_empty() {
            return CookieCheck::Missing;
        }
        if cookie.len() != COOKIE_LEN {
            return CookieCheck::Forged;
        }
        let mut issued = [0u8; 8];
        issued.copy_from_slice(&cookie[..8]);
        let issued_ms = u64::from_be_bytes(issued);
        let expected = self.cookie_mac(issued_ms, remote, client_cid);
        // Constant-time comparison: no early exit on the first difference.
        if expected.iter().zip(&cookie[8..]).fold(0u8, |acc, (a, b)| acc | (a ^ b)) != 0 {
            return CookieCheck::Forged;
        }
        let now_ms = now.as_nanos() / 1_000_000;
        let lifetime_ms = self.config.cookie_lifetime.as_millis() as u64;
        if issued_ms > now_ms || now_ms - issued_ms > lifetime_ms {
            return CookieCheck::Expired;
        }
        CookieCheck::Valid
    }

    fn queue_refusal(&mut self, remote: SocketAddr, client_cid: u64) {
        let mut buf = Vec::with_capacity(64);
        let header = Header {
            ty: PacketType::Accept,
            dst_cid: client_cid,
            src_cid: 0,
            cookie: Bytes::new(),
            pn: 0,
            timestamp_us: 0,
            echo_timestamp_us: 0,
        };
        wire::encode_header(&mut buf, &header);
        wire::encode_frame(&mut buf, &Frame::Close { code: CLOSE_REFUSED, reason: Bytes::from_static(b"refused") });
        self.stateless.push_back((remote, buf));
    }

    fn mark_active(&mut self, handle: ConnectionHandle) {
        self.collect_events(handle);
        self.enqueue(handle);
    }

    fn enqueue(&mut self, handle: ConnectionHandle) {
        if self.queued.insert(handle) {
            self.send_queue.push_back(handle);
        }
    }

    fn collect_events(&mut self, handle: ConnectionHandle) {
        if let Some(conn) = self.connections.get_mut(&handle) {
            conn.drain_events(&mut self.events);
        }
    }

    /// Clears `buf` and writes up to `max_datagrams` datagrams for one
    /// destination into it, or returns `None` when nothing is to be sent now.
    pub fn poll_transmit(&mut self, now: Instant, max_datagrams: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        if let Some((destination, packet)) = self.stateless.pop_front() {
            buf.extend_from_slice(&packet);
            self.count_sent(1, buf.len());
            return Some(Transmit { destination, size: buf.len(), segment_size: None });
        }
        let max_datagrams = max_datagrams.max(1);
        // Round robin: each connection sends one batch, then goes to the back
        // of the queue if it may have more.
        while let Some(handle) = self.send_queue.pop_front() {
            self.queued.remove(&handle);
            let Some(conn) = self.connections.get_mut(&handle) else { continue };
            let mut count = 0;
            let mut segment = 0;
            let mut destination = None;
            while count < max_datagrams {
                let before = buf.len();
                let max_size = if count == 0 { usize::MAX } else { segment };
                let Some(out) = conn.poll_transmit(now, buf, max_size) else { break };
                destination = Some(out.destination);
                count += 1;
                if count == 1 {
                    segment = out.size;
                } else if out.size < segment {
                    break; // a short datagram must be the batch's last
                }
                debug_assert_eq!(buf.len() - before, out.size);
            }
            conn.drain_events(&mut self.events);
            // Nothing to send. A closed connection is forgotten once the
            // application has read `RecvError::Closed` (its counters stay
            // readable until then).
            let Some(destination) = destination else {
                self.reap(handle);
                continue;
            };
            // More may follow: keep the connection in the rotation.
            self.enqueue(handle);
            self.count_sent(count, buf.len());
            let segment_size = (count > 1).then_some(segment);
            return Some(Transmit { destination, size: buf.len(), segment_size });
        }
        None
    }

    fn count_sent(&mut self, datagrams: usize, bytes: usize) {
        self.stats.datagrams_sent += datagrams as u64;
        self.stats.bytes_sent += bytes as u64;
    }

    /// Forget a connection that is closed and fully read.
    fn reap(&mut self, handle: ConnectionHandle) {
        let Some(conn) = self.connections.get(&handle) else { return };
        if !conn.is_drained() {
            return;
        }
        let cid = conn.local_cid();
        self.connections.remove(&handle);
        self.by_cid.remove(&cid);
        self.by_initial.retain(|_, h| *h != handle);
        self.stats.connections_open = self.connections.len() as u64;
    }

    /// The earliest time `handle_timeout` must be called.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.connections.values().filter_map(|c| c.poll_timeout()).min()
    }

    /// Run timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due: Vec<ConnectionHandle> = self
            .connections
            .iter()
            .filter(|(_, c)| c.poll_timeout().is_some_and(|t| t <= now))
            .map(|(&h, _)| h)
            .collect();
        // Hash-map order is arbitrary: sort so runs are reproducible.
        let mut due = due;
        due.sort_unstable();
        for handle in due {
            if let Some(conn) = self.connections.get_mut(&handle) {
                conn.handle_timeout(now);
            }
            self.mark_active(handle);
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Queue a message (may be sent before the handshake completes: it is
    /// held until then).
    pub fn send_message(&mut self, conn: ConnectionHandle, message: Bytes) -> Result<(), SendError> {
        let c = self.connections.get_mut(&conn).ok_or(SendError::UnknownConnection)?;
        c.send_message(message)?;
        self.enqueue(conn);
        Ok(())
    }

    /// The next complete message, `Ok(None)` if none is ready yet.
    pub fn recv_message(&mut self, conn: ConnectionHandle) -> Result<Option<Bytes>, RecvError> {
        let c = self.connections.get_mut(&conn).ok_or(RecvError::UnknownConnection)?;
        let result = c.recv_message();
        // Reading may open the receive window: let the peer hear about it.
        self.enqueue(conn);
        if result.is_err() {
            self.reap(conn);
        }
        result
    }

    /// Graceful close: everything already queued is delivered first, then
    /// the peer is told; [`Event::Closed`] follows.
    pub fn close(&mut self, now: Instant, conn: ConnectionHandle) {
        if let Some(c) = self.connections.get_mut(&conn) {
            c.close(now);
            self.mark_active(conn);
        }
    }

    /// Peer address of a connection.
    pub fn remote_address(&self, conn: ConnectionHandle) -> Option<SocketAddr> {
        self.connections.get(&conn).map(|c| c.remote())
    }

    /// True once the handshake completed and until the connection closes.
    pub fn is_established(&self, conn: ConnectionHandle) -> bool {
        self.connections.get(&conn).is_some_and(|c| c.is_established())
    }

    /// Why a connection closed, once it has.
    pub fn close_reason(&self, conn: ConnectionHandle) -> Option<CloseReason> {
        self.connections.get(&conn).and_then(|c| c.close_reason().cloned())
    }

    /// Counters of one connection.
    pub fn connection_stats(&self, conn: ConnectionHandle) -> Option<ConnectionStats> {
        self.connections.get(&conn).map(|c| c.stats())
    }

    /// Endpoint-wide counters.
    pub fn stats(&self) -> EndpointStats {
        self.stats
    }

    /// The live congestion controller of a connection (to read or set its
    /// parameters).
    pub fn congestion_controller(
        &mut self,
        conn: ConnectionHandle,
    ) -> Option<&mut dyn crate::cc::CongestionController> {
        self.connections.get_mut(&conn).map(|c| c.congestion_controller())
    }

    /// Handles of all connections held.
    pub fn connections(&self) -> Vec<ConnectionHandle> {
        let mut v: Vec<_> = self.connections.keys().copied().collect();
        v.sort();
        v
    }
}
