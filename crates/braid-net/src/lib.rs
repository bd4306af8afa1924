//! Braid on real UDP sockets: a tokio driver for the sans-IO
//! [`braid_proto::Endpoint`].
//!
//! Owns: the socket (created with socket2, large kernel buffers; batched
//! receive with GRO and segmented send with GSO through quinn-udp), the
//! mapping of the monotonic clock to [`braid_core::Instant`], the driver
//! task that feeds datagrams and timers to the endpoint and sends what it
//! produces, and the async application API: [`Endpoint`] (bind, connect,
//! accept, close) and [`Connection`] (send and receive messages with
//! backpressure, graceful close, statistics, congestion parameters), and
//! multipath: [`Endpoint::connect_multipath`], paths added and removed at
//! runtime, backup paths, a ProgMP [`Program`] per connection, its
//! registers and per-message `USER` tags (see the `multipath` module
//! docs on [`Connection::add_path`]).
//!
//! Must not depend on: protocol logic. Everything about the wire format,
//! reliability, flow and congestion control lives in `braid-proto`; this
//! crate only moves bytes and time in and out of it. It must not depend on
//! the `braid` facade or the simulator either.
//!
//! Design: one driver task per endpoint does all socket I/O. The protocol
//! state sits behind a `std::sync::Mutex` shared with the application
//! handles; calls lock it briefly, never across a syscall or an `.await`,
//! and wake tasks through `tokio::sync::Notify`.

mod clock;
mod connection;
mod driver;
mod endpoint;
mod error;
mod multipath;
mod security;
mod shared;
mod socket;

pub use braid_proto::progmp::{Program, Register};
pub use braid_proto::{
    CcAlgorithm, CloseReason, ConnectionStats, EndpointConfig, EndpointStats, PathError, PathInfo, RecvBatch, TransportConfig,
    MAX_PATHS, PACK_MAX_MESSAGE,
};
pub use bytes::Bytes;
pub use connection::{CongestionParameters, Connection};
pub use endpoint::Endpoint;
pub use security::{pinned_pair, NodeSecurity, PinnedKey, SecurityError, TrustVerifier};
pub use braid_proto::{CipherSuite, Security};
pub use braid_identity::{Identity, PublicKey, TrustPolicy};
pub use error::{ConnectionError, NetError};
