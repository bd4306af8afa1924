//! Braid: adaptive transport middleware.
//!
//! Applications send messages, streams and files between peers; Braid's
//! goal is to choose and tune how each is carried. This milestone provides
//! the foundation: a reliable, congestion-controlled message transport over
//! UDP (`braid-proto`, sans-IO), its tokio driver (`braid-net`), a
//! deterministic simulator (`braid-sim`) over a link model (`braid-link`),
//! and the `braid` command.
//!
//! Owns: the public facade (re-exports of what applications need, so they
//! depend on this one crate), the file-transfer application protocol
//! ([`transfer`]), length-prefixed framing for byte streams ([`framing`])
//! and human-readable sizes ([`size`]).
//!
//! Must not depend on: the command line (clap), plotting, databases or
//! benchmark peers (quinn): what applications link stays small. The `braid`
//! binary is `braid-cli`; experiments live in `braid-lab`, which (with the
//! CLI) is the only crate above this one.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use braid::{Endpoint, EndpointConfig, CcAlgorithm};
//!
//! // Server: accept a connection and echo one message.
//! let server = Endpoint::bind("127.0.0.1:0".parse()?)?;
//! let addr = server.local_addr();
//! tokio::spawn(async move {
//!     if let Some(mut conn) = server.accept().await {
//!         if let Ok(msg) = conn.recv_message().await {
//!             let _ = conn.send_message(msg).await;
//!             let _ = conn.close().await;
//!         }
//!     }
//! });
//!
//! // Client, with NewReno instead of the default CUBIC.
//! let mut config = EndpointConfig { accept_incoming: false, ..Default::default() };
//! config.transport.congestion_control = CcAlgorithm::NewReno;
//! let client = Endpoint::bind_with("127.0.0.1:0".parse()?, config)?;
//! let mut conn = client.connect(addr).await?;
//! conn.send_message(&b"hello"[..]).await?;
//! assert_eq!(&conn.recv_message().await?[..], b"hello");
//! println!("rtt {:?}", conn.stats().smoothed_rtt);
//! # Ok(()) }
//! ```

pub mod framing;
pub mod size;
pub mod transfer;
pub mod transfer_stream;

pub use braid_core::Instant;
pub use braid_link::LinkSpec;
pub use braid_net::{Connection, ConnectionError, Endpoint, NetError, PathInfo, Program, RecvBatch, Register};
pub use braid_proto::{CcAlgorithm, CloseReason, ConfigError, EndpointConfig, TransportConfig};

/// The message-oriented middleware: a `Node` with the transport chosen
/// per message, virtual nodes, typed messages and the DATA learner.
pub use braid_node as node;
/// Exon, exactly-once messaging: the sans-IO protocol.
pub use braid_exon as exon;
/// Exon on a real UDP socket (tokio driver).
pub use braid_exon_net as exon_net;
/// ProgMP, the multipath scheduler language.
pub use braid_progmp as progmp;
/// The real-network emulator (network namespaces joined by emulated links).
pub use braid_emu as emu;

/// Counters of endpoints and connections (plain data, serializable).
pub mod stats {
    pub use braid_proto::{ConnectionStats, EndpointStats};
}
