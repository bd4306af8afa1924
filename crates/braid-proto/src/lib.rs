//! Braid's transport core, sans-IO.
//!
//! Owns: the wire format ([`wire`]), the endpoint that demultiplexes
//! datagrams to connections by connection ID and runs the stateless-cookie
//! handshake ([`Endpoint`]), the connection state machine (reliable ordered
//! message stream, flow control, close, idle timeout), its paths (each with
//! its own packet numbers, loss recovery, tail loss probes, RTO, pacing and congestion
//! control), multipath scheduling by ProgMP programs (segments, the queues
//! `Q`, `QU` and `RQ`, and the scheduling environment they run in), and
//! drives congestion control ([`cc`], which lives in `braid-recovery` with
//! the RTT estimator and the pacer).
//!
//! Must not depend on: tokio, sockets, threads, the system clock or a thread
//! RNG. Datagrams and the current [`Instant`] go in; datagrams, timer
//! deadlines and [`Event`]s come out. Randomness comes from a seed. This is
//! what lets `braid-sim` run it deterministically in virtual time and
//! `braid-net` run it on real sockets, unchanged. The ProgMP language
//! itself lives in `braid-progmp` ([`progmp`]); this crate only runs it.
//!
//! **Multipath.** A connection starts on the path of its handshake. The
//! connecting side may open more ([`Endpoint::add_path`]): pairs of local
//! and remote addresses, each validated by the peer's first
//! acknowledgement. With more than one path, or once the application picks
//! a scheduler ([`Endpoint::set_scheduler`]), a ProgMP program decides
//! which path carries which packet (by default the shipped minimum-RTT
//! scheduler). The receiver reassembles by data sequence number whatever
//! path carried the bytes.
//!
//! ```
//! use braid_proto::{Endpoint, EndpointConfig, Event};
//! use braid_core::Instant;
//! use bytes::Bytes;
//!
//! let (a_addr, b_addr) = ("10.0.0.1:1".parse().unwrap(), "10.0.0.2:1".parse().unwrap());
//! let mut client = Endpoint::new(EndpointConfig { accept_incoming: false, ..Default::default() }, 1);
//! let mut server = Endpoint::new(EndpointConfig::default(), 2);
//! let now = Instant::ZERO;
//! let conn = client.connect(now, b_addr).unwrap();
//! client.send_message(conn, Bytes::from_static(b"hello")).unwrap();
//!
//! // Shuttle datagrams both ways until the server has the message.
//! let mut buf = Vec::new();
//! let mut received = None;
//! for _ in 0..10 {
//!     while let Some(t) = client.poll_transmit(now, 1, &mut buf) {
//!         server.handle_datagram(now, a_addr, Bytes::copy_from_slice(&buf[..t.size]));
//!     }
//!     while let Some(t) = server.poll_transmit(now, 1, &mut buf) {
//!         client.handle_datagram(now, b_addr, Bytes::copy_from_slice(&buf[..t.size]));
//!     }
//!     while let Some(ev) = server.poll_event() {
//!         if let Event::Readable(h) = ev {
//!             received = server.recv_message(h).unwrap();
//!         }
//!     }
//! }
//! assert_eq!(received.as_deref(), Some(&b"hello"[..]));
//! ```

/// Congestion control, shared with Exon: see [`braid_recovery`].
pub use braid_recovery::cc;
mod config;
mod connection;
pub mod crypto;
mod endpoint;
mod message_pool;
mod multipath;
use braid_recovery::pacer;
mod path;
mod range_set;
mod recv_batch;
mod recv_stream;
use braid_recovery::rtt;
mod send_stream;
mod stats;
pub mod wire;

pub use braid_core::Instant;
/// The ProgMP language: compile schedulers here, hand them to
/// [`Endpoint::set_scheduler`].
pub use braid_progmp as progmp;
pub use multipath::MAX_PATHS;
pub use cc::{CcAlgorithm, CcError, CongestionController};
pub use config::{ConfigError, EndpointConfig, TransportConfig};
pub use crypto::{AcceptAnyKey, CipherSuite, Credentials, PeerVerifier, Security};
pub use endpoint::{
    CloseReason, ConnectError, ConnectionHandle, Endpoint, Event, PathError, RecvError, SendError, Transmit,
    MAX_STATELESS_QUEUED,
};
pub use recv_batch::RecvBatch;
pub use send_stream::PACK_MAX_MESSAGE;
pub use stats::{ConnectionStats, EndpointStats, PathInfo, SentPacketInfo};
