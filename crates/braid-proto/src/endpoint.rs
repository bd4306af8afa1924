//! The endpoint: one UDP socket's worth of connections.
//!
//! Demultiplexes datagrams by destination connection ID, answers a first
//! handshake packet with a stateless cookie challenge (so a spoofed source
//! address creates no state), and round-robins transmissions across
//! connections.

use std::net::SocketAddr;

use braid_core::Instant;
use bytes::Bytes;

use crate::cc::CcError;
use crate::config::{EndpointConfig, TransportConfig};
use crate::stats::{ConnectionStats, EndpointStats};

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

// API_CONTRACT_BEGIN (bodies being written; signatures are the contract)
/// A set of connections sharing one UDP socket. See the crate docs for a
/// complete example.
pub struct Endpoint {
    _private: (),
}

#[allow(unused_variables)]
impl Endpoint {
    /// A new endpoint; `seed` drives connection IDs and the cookie key.
    pub fn new(config: EndpointConfig, seed: u64) -> Self { todo!() }
    /// The endpoint's configuration.
    pub fn config(&self) -> &EndpointConfig { todo!() }
    /// Start a handshake with `remote` using the endpoint's transport config.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr) -> Result<ConnectionHandle, ConnectError> { todo!() }
    /// Start a handshake with `remote` using `transport`.
    pub fn connect_with(&mut self, now: Instant, remote: SocketAddr, transport: TransportConfig) -> Result<ConnectionHandle, ConnectError> { todo!() }
    /// A datagram arrived from `remote`. Never panics; malformed input is
    /// dropped and counted in [`EndpointStats`].
    pub fn handle_datagram(&mut self, now: Instant, remote: SocketAddr, datagram: Bytes) { todo!() }
    /// Clears `buf` and writes up to `max_datagrams` datagrams for one
    /// destination into it, or returns `None` when nothing is to be sent now.
    pub fn poll_transmit(&mut self, now: Instant, max_datagrams: usize, buf: &mut Vec<u8>) -> Option<Transmit> { todo!() }
    /// The earliest time `handle_timeout` must be called.
    pub fn poll_timeout(&mut self) -> Option<Instant> { todo!() }
    /// Run timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) { todo!() }
    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> { todo!() }
    /// Queue a message (may be sent before the handshake completes: it is
    /// held until then).
    pub fn send_message(&mut self, conn: ConnectionHandle, message: Bytes) -> Result<(), SendError> { todo!() }
    /// The next complete message, `Ok(None)` if none is ready yet.
    pub fn recv_message(&mut self, conn: ConnectionHandle) -> Result<Option<Bytes>, RecvError> { todo!() }
    /// Graceful close: everything already queued is delivered first, then
    /// the peer is told; [`Event::Closed`] follows.
    pub fn close(&mut self, now: Instant, conn: ConnectionHandle) { todo!() }
    /// Peer address of a connection.
    pub fn remote_address(&self, conn: ConnectionHandle) -> Option<SocketAddr> { todo!() }
    /// True once the handshake completed and until the connection closes.
    pub fn is_established(&self, conn: ConnectionHandle) -> bool { todo!() }
    /// Counters of one connection.
    pub fn connection_stats(&self, conn: ConnectionHandle) -> Option<ConnectionStats> { todo!() }
    /// Endpoint-wide counters.
    pub fn stats(&self) -> EndpointStats { todo!() }
    /// The live congestion controller of a connection (to read or set its
    /// parameters).
    pub fn congestion_controller(&mut self, conn: ConnectionHandle) -> Option<&mut dyn crate::cc::CongestionController> { todo!() }
    /// Handles of all connections held.
    pub fn connections(&self) -> Vec<ConnectionHandle> { todo!() }
}
// API_CONTRACT_END
