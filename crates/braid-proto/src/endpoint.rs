//! The endpoint: one UDP socket's worth of connections.
//!
//! Demultiplexes datagrams by destination connection ID, answers a first
//! handshake packet with a stateless cookie challenge (so a spoofed source
//! address creates no state), and round-robins transmissions across
//! connections. It is also the application's handle on multipath: opening
//! and closing paths, choosing a connection's ProgMP scheduler, setting
//! its registers and tagging writes.

use std::collections::VecDeque;
use std::sync::Arc;

use braid_progmp::{Program, Register};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::hash::Hasher;
use std::net::{IpAddr, SocketAddr};

use braid_core::{Instant, RngCore, SeedableRng};
use bytes::{Bytes, BytesMut};
use siphasher::sip128::{Hasher128, SipHasher24};

use crate::config::{EndpointConfig, TransportConfig};
use crate::connection::{Connection, ServerKeys, CLOSE_REFUSED, CLOSE_UNAUTHORIZED};
use crate::recv_batch::RecvBatch;
use crate::crypto::{noise, protection::Protection, CipherSuite, PublicKey};
use crate::stats::{ConnectionStats, EndpointStats, PathInfo};
use crate::wire::{self, Frame, Header, Packet, PacketType, PublicHeader};

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
    /// Authentication failed: we refused the peer's key, or the peer
    /// refused ours, or one side runs without authentication and the
    /// other requires it. The text says which and what to do.
    Unauthorized(String),
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
            CloseReason::Unauthorized(why) => write!(f, "not authorized: {why}"),
        }
    }
}

/// One or more datagrams to send, written to the buffer given to
/// [`Endpoint::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Where to send them.
    pub destination: SocketAddr,
    /// The local address to send them from, when the path needs one (a
    /// path opened from a given address, or a server answering on the
    /// address it was reached at); `None` lets the socket choose.
    pub source: Option<SocketAddr>,
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

/// A multipath request could not be carried out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// No such connection.
    #[error("unknown connection")]
    UnknownConnection,
    /// The connection has no path with this id.
    #[error("the connection has no path {0}")]
    UnknownPath(u32),
    /// A connection keeps at least one path.
    #[error("path {0} is the connection's last path; close the connection instead")]
    LastPath(u32),
    /// The connection already has as many paths as allowed.
    #[error("the connection already has the most paths allowed ({max})")]
    TooMany {
        /// The limit.
        max: usize,
    },
    /// A path with these addresses exists.
    #[error("a path from {local:?} to {remote} exists already")]
    Duplicate {
        /// Local address of the path.
        local: Option<SocketAddr>,
        /// Remote address of the path.
        remote: SocketAddr,
    },
    /// Only the side that connected opens paths (as in MPTCP, where the
    /// client joins subflows: a server behind no NAT could, but a client
    /// behind one could not be reached).
    #[error("only the connecting side opens paths")]
    NotClient,
    /// The connection is closing or closed.
    #[error("the connection is closing")]
    Closed,
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

/// Most stateless answers (RETRYs to cookie-less Initials, refusals)
/// waiting to be sent. Beyond it an Initial gets no answer (counted in
/// [`EndpointStats::stateless_dropped`](crate::EndpointStats)): a flood of
/// spoofed Initials that outpaces the socket cannot grow memory (at most
/// about 100 KiB of answers, each under 100 bytes), and a real client whose
/// Initial went unanswered retries after its timeout.
pub const MAX_STATELESS_QUEUED: usize = 1024;

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
    /// Stateless answers (RETRY, refusals) waiting to be sent: from
    /// (the local address the Initial reached), to, bytes. At most
    /// [`MAX_STATELESS_QUEUED`].
    stateless: VecDeque<(Option<SocketAddr>, SocketAddr, Vec<u8>)>,
    /// The next transmission is a stateless answer's turn (they alternate
    /// with connections' packets, so a queue full of answers to a flood
    /// delays a connection by one datagram, not a thousand).
    stateless_turn: bool,
    /// Connections that may have something to send, in round-robin order.
    send_queue: VecDeque<ConnectionHandle>,
    /// Members of `send_queue`, so a handle is queued at most once.
    queued: HashSet<ConnectionHandle>,
    /// This endpoint's public key as every RETRY carries it (empty without
    /// authentication), encoded once: deriving it from the identity costs
    /// a field inversion (the key's X25519 form), which per RETRY made
    /// answering a flood of spoofed Initials the receiver's largest cost.
    retry_key: Bytes,
    stats: EndpointStats,
}

impl Endpoint {
    /// A new endpoint whose connection IDs, cookie key and handshake
    /// ephemeral keys all come from `seed`: for simulations and tests,
    /// where runs must repeat. Real endpoints use [`Endpoint::with_seed`]
    /// with 32 bytes from the operating system, since 64 bits are too few
    /// to keep the cookie key and connection IDs unguessable.
    pub fn new(config: EndpointConfig, seed: u64) -> Self {
        Self::from_rng(config, braid_core::Rng::seed_from_u64(seed))
    }

    /// A new endpoint whose randomness is a CSPRNG seeded with `seed`
    /// (pass 32 bytes of OS randomness).
    pub fn with_seed(config: EndpointConfig, seed: [u8; 32]) -> Self {
        Self::from_rng(config, braid_core::Rng::from_seed(seed))
    }

    fn from_rng(config: EndpointConfig, mut rng: braid_core::Rng) -> Self {
        let cookie_key = (rng.next_u64(), rng.next_u64());
        let retry_key = match config.security.credentials() {
            Some(c) => Bytes::copy_from_slice(&c.identity.public_key().to_bytes()),
            None => Bytes::new(),
        };
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
            stateless_turn: false,
            send_queue: VecDeque::new(),
            queued: HashSet::default(),
            retry_key,
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
        self.connect_from(now, None, remote, transport)
    }

    /// Start a handshake with `remote` from the local address `local`
    /// (`None`: the socket's choice), using `transport`. The handshake's
    /// path is the connection's first; [`Endpoint::add_path`] opens more.
    pub fn connect_from(
        &mut self,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        transport: TransportConfig,
    ) -> Result<ConnectionHandle, ConnectError> {
        transport.validate()?;
        if self.connections.len() >= self.config.max_connections {
            return Err(ConnectError::TooManyConnections(self.connections.len()));
        }
        let handle = self.new_handle();
        let cid = self.new_cid();
        let credentials = self.config.security.credentials().cloned();
        let seed = self.new_seed();
        let mut conn = Connection::new_client(handle, now, local, remote, cid, transport, credentials, seed);
        conn.set_path_secret(self.new_seed());
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

    /// 32 fresh random bytes (a handshake's ephemeral key).
    fn new_seed(&mut self) -> [u8; 32] {
        let mut seed = [0u8; 32];
        self.rng.fill_bytes(&mut seed);
        seed
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
        self.handle_datagram_on(now, None, remote, datagram);
    }

    /// A datagram arrived from `remote` at the local address `local` (when
    /// known: a multi-homed host tells its paths apart by it, and answers
    /// from it). Never panics; malformed input is dropped and counted.
    pub fn handle_datagram_on(
        &mut self,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        datagram: Bytes,
    ) {
        // Opening a sealed packet works in place: a datagram that is its
        // buffer's only owner costs no copy.
        let datagram = datagram.try_into_mut().unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        self.handle_datagram_mut_on(now, local, remote, datagram);
    }

    /// [`Endpoint::handle_datagram_on`] for a datagram in a buffer the
    /// endpoint may modify (a sealed packet is opened in place, without a
    /// copy): what a driver that receives into its own buffers hands over.
    pub fn handle_datagram_mut_on(
        &mut self,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        datagram: BytesMut,
    ) {
        self.stats.datagrams_received += 1;
        self.stats.bytes_received += datagram.len() as u64;
        let size = datagram.len();
        let header = match PublicHeader::decode_slice(&datagram) {
            Ok(h) => h,
            Err(_) => {
                self.stats.malformed_datagrams += 1;
                return;
            }
        };
        if header.ty == PacketType::Initial {
            // Unprotected: its only frames are PING and padding.
            let pn = u64::from(header.pn_truncated);
            let payload = datagram.freeze().slice(header.payload_offset..);
            match Packet::from_parts(header.header(pn), payload) {
                Ok(packet) => self.handle_initial(now, local, remote, &packet, size),
                Err(_) => self.stats.malformed_datagrams += 1,
            }
            return;
        }
        let Some(&handle) = self.by_cid.get(&header.dst_cid) else {
            self.stats.unknown_connection_datagrams += 1;
            return;
        };
        let Some(conn) = self.connections.get_mut(&handle) else { return };
        if header.ty == PacketType::Retry {
            conn.on_retry(now, &header);
        } else {
            conn.handle_datagram(now, local, remote, datagram, header, size);
        }
        self.mark_active(handle);
    }

    /// Server side of the handshake: answer a cookie-less Initial with a
    /// stateless RETRY; create the connection only for a valid cookie, which
    /// proves the client receives at its source address.
    fn handle_initial(&mut self, now: Instant, local: Option<SocketAddr>, remote: SocketAddr, packet: &Packet, size: usize) {
        let header = &packet.header;
        if size < usize::from(TransportConfig::MIN_DATAGRAM_SIZE) || header.src_cid == 0 {
            self.stats.malformed_datagrams += 1;
            return;
        }
        if let Some(&handle) = self.by_initial.get(&(remote, header.src_cid)) {
            if let Some(conn) = self.connections.get_mut(&handle) {
                conn.on_repeated_initial(header.timestamp_us);
                self.mark_active(handle);
            }
            return;
        }
        if !self.config.accept_incoming {
            self.stats.connections_refused += 1;
            self.queue_refusal(local, remote, header.src_cid);
            return;
        }
        match self.check_cookie(now, remote, header.src_cid, &header.cookie) {
            CookieCheck::Valid => {}
            CookieCheck::Missing => {
                self.queue_retry(now, local, remote, header);
                return;
            }
            CookieCheck::Expired => {
                // Genuine but old (the client's Initial was delayed or lost
                // many times): a fresh challenge, still without state.
                self.stats.invalid_cookies += 1;
                self.queue_retry(now, local, remote, header);
                return;
            }
            CookieCheck::Forged => {
                self.stats.invalid_cookies += 1;
                return;
            }
        }
        if self.connections.len() >= self.config.max_connections {
            self.stats.connections_refused += 1;
            self.queue_refusal(local, remote, header.src_cid);
            return;
        }
        // The cookie proved the address; now the key, still before any
        // state is kept.
        let keys = match self.authenticate_initial(now, local, remote, header) {
            Ok(keys) => keys,
            Err(()) => return,
        };
        let handle = self.new_handle();
        let cid = self.new_cid();
        let mut conn =
            Connection::new_server(
                handle,
                now,
                remote,
                cid,
                header.src_cid,
                header.timestamp_us,
                self.config.transport.clone(),
                keys,
            );
        conn.set_path_secret(self.new_seed());
        self.by_initial.insert((remote, header.src_cid), handle);
        self.insert(handle, cid, conn);
        self.stats.connections_accepted += 1;
    }

    /// Server: the Noise handshake of an address-validated Initial. The
    /// keys of the new connection, `None` if neither side authenticates,
    /// or `Err` when the Initial was answered (refused) or dropped.
    fn authenticate_initial(
        &mut self,
        now: Instant,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        header: &Header,
    ) -> Result<Option<ServerKeys>, ()> {
        let Some(credentials) = self.config.security.credentials().cloned() else {
            if header.noise.is_empty() {
                return Ok(None);
            }
            self.stats.connections_refused += 1;
            let why = "this server runs without authentication (--insecure-no-auth); connect with --insecure-no-auth too";
            self.queue_unauthorized(local, remote, header.src_cid, why);
            return Err(());
        };
        if header.noise.is_empty() {
            self.stats.connections_refused += 1;
            let why = "this server requires authentication; the client ran with --insecure-no-auth";
            self.queue_unauthorized(local, remote, header.src_cid, why);
            return Err(());
        }
        let seed = self.new_seed();
        let verifier = credentials.verifier.clone();
        let result = noise::respond(
            &credentials.identity,
            &credentials.suites,
            header.src_cid,
            &header.cookie,
            &header.noise,
            seed,
            |key: &PublicKey| verifier.verify_client(remote, key),
        );
        match result {
            Err(_) => {
                self.stats.handshake_failures += 1;
                Err(())
            }
            Ok(Err(refusal)) => {
                self.stats.peers_refused += 1;
                self.queue_unauthorized(local, remote, header.src_cid, &format!("the server refused this client's key: {refusal}"));
                Err(())
            }
            Ok(Ok(hs)) => {
                let s = hs.secrets;
                Ok(Some(ServerKeys {
                    protection: Protection::new(s.suite, s.send, s.recv, now),
                    accept_noise: Bytes::from(hs.message),
                    client_key: hs.client_key,
                }))
            }
        }
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

    fn queue_retry(&mut self, now: Instant, local: Option<SocketAddr>, remote: SocketAddr, initial: &Header) {
        if !self.stateless_room() {
            return;
        }
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
            noise: Bytes::new(),
            // The server's identity, for the client to check (or learn)
            // before it sends its own.
            server_key: self.retry_key.clone(),
            path_id: 0,
            pn: 0,
            timestamp_us: 0,
            // Lets the client take an RTT sample without us keeping state.
            echo_timestamp_us: initial.timestamp_us,
        };
        wire::encode_header(&mut buf, &header);
        self.stats.retries_sent += 1;
        self.stateless.push_back((local, remote, buf));
    }

    /// Whether another stateless answer may be queued; counts a refusal.
    /// Checked before an answer is built (a RETRY costs a MAC).
    fn stateless_room(&mut self) -> bool {
        let room = self.stateless.len() < MAX_STATELESS_QUEUED;
        if !room {
            self.stats.stateless_dropped += 1;
        }
        room
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

    fn queue_refusal(&mut self, local: Option<SocketAddr>, remote: SocketAddr, client_cid: u64) {
        self.queue_close(local, remote, client_cid, CLOSE_REFUSED, "refused");
    }

    fn queue_unauthorized(&mut self, local: Option<SocketAddr>, remote: SocketAddr, client_cid: u64, why: &str) {
        self.queue_close(local, remote, client_cid, CLOSE_UNAUTHORIZED, why);
    }

    /// A stateless CLOSE in a plaintext Accept (there are no keys to seal
    /// it with). A client believes one only while handshaking, and only
    /// if it echoes the client's random connection ID.
    fn queue_close(&mut self, local: Option<SocketAddr>, remote: SocketAddr, client_cid: u64, code: u64, why: &str) {
        if !self.stateless_room() {
            return;
        }
        let mut buf = Vec::with_capacity(64 + why.len());
        let header = Header {
            ty: PacketType::Accept,
            dst_cid: client_cid,
            src_cid: 0,
            cookie: Bytes::new(),
            noise: Bytes::new(),
            server_key: Bytes::new(),
            path_id: 0,
            pn: 0,
            timestamp_us: 0,
            echo_timestamp_us: 0,
        };
        wire::encode_header(&mut buf, &header);
        let reason = Bytes::copy_from_slice(why.as_bytes());
        wire::encode_frame(&mut buf, &Frame::Close { code, reason });
        self.stateless.push_back((local, remote, buf));
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
    /// path (one source and destination) into it, or returns `None` when
    /// nothing is to be sent now.
    pub fn poll_transmit(&mut self, now: Instant, max_datagrams: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        if self.stateless_turn || self.send_queue.is_empty() {
            self.stateless_turn = false;
            if let Some(t) = self.poll_stateless(buf) {
                return Some(t);
            }
        }
        if let Some(t) = self.poll_connections(now, max_datagrams, buf) {
            self.stateless_turn = true;
            return Some(t);
        }
        self.poll_stateless(buf)
    }

    fn poll_stateless(&mut self, buf: &mut Vec<u8>) -> Option<Transmit> {
        let (source, destination, packet) = self.stateless.pop_front()?;
        buf.clear();
        buf.extend_from_slice(&packet);
        self.count_sent(1, buf.len());
        Some(Transmit { destination, source, size: buf.len(), segment_size: None })
    }

    fn poll_connections(&mut self, now: Instant, max_datagrams: usize, buf: &mut Vec<u8>) -> Option<Transmit> {
        let max_datagrams = max_datagrams.max(1);
        // Round robin: each connection sends one batch, then goes to the back
        // of the queue if it may have more.
        while let Some(handle) = self.send_queue.pop_front() {
            self.queued.remove(&handle);
            let Some(conn) = self.connections.get_mut(&handle) else { continue };
            let mut count = 0;
            let mut segment = 0;
            let mut path = None;
            let mut redirect = None;
            while count < max_datagrams {
                let before = buf.len();
                let max_size = if count == 0 { usize::MAX } else { segment };
                // The rest of a batch goes on the first datagram's path.
                let Some(out) = conn.poll_transmit(now, buf, max_size, path) else { break };
                path = Some(out.path);
                count += 1;
                if out.redirect.is_some() {
                    // To another address than the path's: alone in its batch.
                    redirect = out.redirect;
                    break;
                }
                if count == 1 {
                    segment = out.size;
                } else if out.size < segment {
                    break; // a short datagram must be the batch's last
                }
                debug_assert_eq!(buf.len() - before, out.size);
            }
            let addresses = path.map(|p| conn.path_addresses(p)).map(|(to, from)| (redirect.unwrap_or(to), from));
            conn.drain_events(&mut self.events);
            // Nothing to send. A closed connection is forgotten once the
            // application has read `RecvError::Closed` (its counters stay
            // readable until then).
            let Some((destination, source)) = addresses else {
                self.reap(handle);
                continue;
            };
            // More may follow: keep the connection in the rotation.
            self.enqueue(handle);
            self.count_sent(count, buf.len());
            let segment_size = (count > 1).then_some(segment);
            return Some(Transmit { destination, source, size: buf.len(), segment_size });
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

    /// Queues copies of messages `msgs`, in order, from the first, as
    /// long as the send buffer has room, and returns how many: fewer than
    /// `msgs.len()` means the buffer is full (wait for
    /// [`Event::Writable`], then send the rest). The application keeps its
    /// buffers, so a batch of small messages costs no allocation per
    /// message (issue 23): they are copied into the stream's packs. If the
    /// connection cannot send, or any message exceeds `max_message_size`,
    /// an error and nothing is queued.
    ///
    /// ```
    /// # use braid_proto::{Endpoint, ConnectionHandle};
    /// # fn f(ep: &mut Endpoint, conn: ConnectionHandle) -> Result<(), braid_proto::SendError> {
    /// let scratch = [7u8; 64 * 16];
    /// let msgs: Vec<&[u8]> = scratch.chunks(64).collect();
    /// let queued = ep.send_copies(conn, &msgs)?;
    /// assert!(queued <= msgs.len());
    /// # Ok(()) }
    /// ```
    pub fn send_copies<M: AsRef<[u8]>>(&mut self, conn: ConnectionHandle, msgs: &[M]) -> Result<usize, SendError> {
        let c = self.connections.get_mut(&conn).ok_or(SendError::UnknownConnection)?;
        let n = c.send_copies(msgs)?;
        if n > 0 {
            self.enqueue(conn);
        }
        Ok(n)
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

    /// Moves up to `max` complete messages of `conn` into `batch` (after
    /// what it holds), in order; how many (`Ok(0)`: none ready yet). One
    /// lookup, one wake-up of the sender and one reference count per
    /// packet for a whole batch: the way to drain a stream of small
    /// messages (issue 23). After the connection closed and every received
    /// message was taken, `Err(Closed(reason))`.
    ///
    /// ```
    /// # use braid_proto::{Endpoint, ConnectionHandle, RecvBatch};
    /// # fn f(ep: &mut Endpoint, conn: ConnectionHandle) -> Result<(), braid_proto::RecvError> {
    /// let mut batch = RecvBatch::new();
    /// while ep.recv_batch(conn, &mut batch, 1024)? > 0 {
    ///     for msg in batch.iter() {
    ///         println!("{} bytes", msg.len());
    ///     }
    ///     batch.clear();
    /// }
    /// # Ok(()) }
    /// ```
    pub fn recv_batch(&mut self, conn: ConnectionHandle, batch: &mut RecvBatch, max: usize) -> Result<usize, RecvError> {
        let c = self.connections.get_mut(&conn).ok_or(RecvError::UnknownConnection)?;
        let result = c.recv_batch(batch, max);
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

    /// The peer's public key, once the handshake has proved it (`None`
    /// without authentication).
    pub fn peer_key(&self, conn: ConnectionHandle) -> Option<PublicKey> {
        self.connections.get(&conn).and_then(|c| c.peer_key())
    }

    /// The cipher suite sealing the connection's packets (`None` without
    /// authentication, or before the handshake completes).
    pub fn cipher_suite(&self, conn: ConnectionHandle) -> Option<CipherSuite> {
        self.connections.get(&conn).and_then(|c| c.cipher_suite())
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

    /// Replaces the congestion controller of every path of `conn` by one of
    /// `algorithm`, live: each continues from its predecessor's window,
    /// slow-start state, RTT estimates and delivery rate, with the bytes in
    /// flight unchanged, so the switch neither bursts nor stalls (the model
    /// is [`crate::cc::Handover`]'s). Parameters set on the old controller
    /// are not carried over (they belong to its algorithm).
    ///
    /// ```
    /// use braid_proto::{CcAlgorithm, Endpoint, EndpointConfig};
    /// use braid_core::Instant;
    /// let mut client = Endpoint::new(EndpointConfig { accept_incoming: false, ..Default::default() }, 1);
    /// let conn = client.connect(Instant::ZERO, "10.0.0.2:443".parse().unwrap()).unwrap();
    /// let window = client.congestion_controller(conn).unwrap().window();
    /// client.set_congestion_control(Instant::ZERO, conn, CcAlgorithm::Bbr).unwrap();
    /// let cc = client.congestion_controller(conn).unwrap();
    /// assert_eq!((cc.name(), cc.window()), ("bbr", window));
    /// ```
    pub fn set_congestion_control(
        &mut self,
        now: Instant,
        conn: ConnectionHandle,
        algorithm: crate::cc::CcAlgorithm,
    ) -> Result<(), PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        c.set_congestion_control(now, algorithm);
        self.mark_active(conn);
        Ok(())
    }

    // ----- multipath -----

    /// Opens a path of connection `conn` from the local address `local`
    /// (`None`: the socket's choice) to `remote`, the peer's address on
    /// that path; `backup` marks it a backup path at both ends (ProgMP's
    /// `IS_BACKUP`). Only the connecting side opens paths. The path carries
    /// data once the peer acknowledges its first packet. The connection
    /// schedules its packets from now on, with the scheduler chosen by
    /// [`Endpoint::set_scheduler`] or else the shipped minimum-RTT one.
    ///
    /// A path whose retransmission timeout fires four times in a row while
    /// another path works (or that the peer never answers on) is abandoned
    /// like one removed with [`Endpoint::remove_path`]; [`Endpoint::paths`]
    /// shows what remains. Unlike a removed path, a failed one (or one the
    /// server abandoned) is opened again on the same addresses, under a
    /// new id, after waits doubling up to
    /// [`TransportConfig::path_retry_max_backoff`](crate::TransportConfig::path_retry_max_backoff)
    /// (one probe packet each), and carries data once the peer answers;
    /// [`Endpoint::remove_path`] with its old id stops that.
    ///
    /// ```
    /// use braid_proto::{Endpoint, EndpointConfig};
    /// use braid_core::Instant;
    /// let mut client = Endpoint::new(EndpointConfig { accept_incoming: false, ..Default::default() }, 1);
    /// let conn = client.connect(Instant::ZERO, "10.0.0.2:443".parse().unwrap()).unwrap();
    /// let id = client
    ///     .add_path(conn, Some("10.1.0.1:5000".parse().unwrap()), "10.1.0.2:443".parse().unwrap(), false)
    ///     .unwrap();
    /// let paths = client.paths(conn);
    /// assert_eq!(paths.len(), 2);
    /// assert_eq!(paths[1].id, id);
    /// assert!(!paths[1].validated); // until the server answers on it
    /// ```
    pub fn add_path(
        &mut self,
        conn: ConnectionHandle,
        local: Option<SocketAddr>,
        remote: SocketAddr,
        backup: bool,
    ) -> Result<u32, PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        let id = c.add_path(local, remote, backup)?;
        self.mark_active(conn);
        Ok(id)
    }

    /// Closes path `path` of `conn`: what it carried and was not yet
    /// acknowledged is rescheduled on the other paths, and the peer is
    /// told to stop using it. The last path cannot be removed.
    pub fn remove_path(&mut self, conn: ConnectionHandle, path: u32) -> Result<(), PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        c.remove_path(path)?;
        self.mark_active(conn);
        Ok(())
    }

    /// Marks path `path` of `conn` as a backup or not, here and (with a
    /// `PATH_STATUS` frame) at the peer.
    pub fn set_path_backup(&mut self, conn: ConnectionHandle, path: u32, backup: bool) -> Result<(), PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        c.set_path_backup(path, backup)?;
        self.mark_active(conn);
        Ok(())
    }

    /// The paths of a connection, the primary first (empty for an unknown
    /// connection).
    pub fn paths(&self, conn: ConnectionHandle) -> Vec<PathInfo> {
        self.connections.get(&conn).map(|c| c.path_infos()).unwrap_or_default()
    }

    /// Schedules the packets of `conn` with `program` from now on, even on
    /// a single path. Load a program once and share it: connections hold
    /// the `Arc`. (Switching a running connection's scheduler works but is
    /// discouraged, as in the ProgMP thesis §3.3.4: set registers instead.)
    ///
    /// ```
    /// use std::sync::Arc;
    /// use braid_proto::{Endpoint, EndpointConfig, progmp::{builtin, Program, Register}};
    /// use braid_core::Instant;
    /// let redundant = Arc::new(Program::compile(builtin("redundant").unwrap().source).unwrap());
    /// let mut client = Endpoint::new(EndpointConfig { accept_incoming: false, ..Default::default() }, 1);
    /// let conn = client.connect(Instant::ZERO, "10.0.0.2:443".parse().unwrap()).unwrap();
    /// client.set_scheduler(conn, redundant.clone()).unwrap();
    /// client.set_register(conn, Register::R1, 1).unwrap();
    /// client.set_user_tag(conn, 2).unwrap(); // packets of later messages get USER = 2
    /// assert!(Arc::ptr_eq(&client.scheduler(conn).unwrap(), &redundant));
    /// assert_eq!(client.register(conn, Register::R1), Some(1));
    /// ```
    pub fn set_scheduler(&mut self, conn: ConnectionHandle, program: Arc<Program>) -> Result<(), PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        c.set_scheduler(program);
        self.mark_active(conn);
        Ok(())
    }

    /// The scheduler `conn` uses, if one was chosen or it schedules.
    pub fn scheduler(&self, conn: ConnectionHandle) -> Option<Arc<Program>> {
        self.connections.get(&conn).and_then(|c| c.scheduler())
    }

    /// Sets register `register` of `conn`'s scheduler (which runs at once:
    /// a register change is a scheduling trigger). A connection that does
    /// not schedule yet keeps the value for its scheduler.
    pub fn set_register(&mut self, conn: ConnectionHandle, register: Register, value: i64) -> Result<(), PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        c.set_register(register, value);
        self.mark_active(conn);
        Ok(())
    }

    /// The value of a register of `conn`'s scheduler (0 until set).
    pub fn register(&self, conn: ConnectionHandle, register: Register) -> Option<i64> {
        self.connections.get(&conn).map(|c| c.register(register))
    }

    /// Tags the messages `conn` sends from now on with `tag`: their
    /// packets' ProgMP `USER` property. A packet never mixes two tags.
    pub fn set_user_tag(&mut self, conn: ConnectionHandle, tag: i64) -> Result<(), PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        c.set_user_tag(tag);
        Ok(())
    }

    /// Keeps (or stops keeping) every `PRINT` line of `conn`'s scheduler
    /// for [`Endpoint::take_scheduler_prints`]. (`tracing` gets them too,
    /// rate-limited, either way.)
    pub fn capture_scheduler_prints(&mut self, conn: ConnectionHandle, on: bool) -> Result<(), PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        c.capture_prints(on);
        Ok(())
    }

    /// The `PRINT` lines captured since the last call, oldest first.
    pub fn take_scheduler_prints(&mut self, conn: ConnectionHandle) -> Vec<String> {
        self.connections.get_mut(&conn).map(|c| c.take_prints()).unwrap_or_default()
    }

    /// Keeps (or stops keeping) a record of every packet `conn` sends with
    /// stream data: its path, packet number and stream ranges, taken before
    /// the packet is sealed (for [`Endpoint::take_sent_packets`]). Meant for
    /// simulations and tests that ask which path carried which bytes: on an
    /// encrypted connection the wire no longer tells.
    pub fn capture_sent_packets(&mut self, conn: ConnectionHandle, on: bool) -> Result<(), PathError> {
        let c = self.connections.get_mut(&conn).ok_or(PathError::UnknownConnection)?;
        c.capture_sent(on);
        Ok(())
    }

    /// The packets captured since the last call, in the order they were
    /// sent.
    pub fn take_sent_packets(&mut self, conn: ConnectionHandle) -> Vec<crate::SentPacketInfo> {
        self.connections.get_mut(&conn).map(|c| c.take_sent()).unwrap_or_default()
    }

    /// Handles of all connections held.
    pub fn connections(&self) -> Vec<ConnectionHandle> {
        let mut v: Vec<_> = self.connections.keys().copied().collect();
        v.sort();
        v
    }
}
