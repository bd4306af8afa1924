//! Braid's message-oriented middleware, after KompicsMessaging (seed 000):
//! one message interface over every transport, the transport chosen per
//! message, virtual nodes, typed messages, and DATA, which learns online
//! which mix of TCP and Braid carries a data stream fastest.
//!
//! Owns: the [`Node`] (tokio) with its channels (TCP, Braid; UDP and Exon
//! without channels), the extensible [`Header`] and [`Address`] traits and their
//! default and multi-hop implementations, virtual nodes, [`Message`]s
//! (raw bytes or postcard-encoded serde values) and the [`Dispatcher`]
//! registry, [`MessageBatch`]es (many bodies sharing one header and one
//! buffer: `Node::send_batch`/`Node::recv_batch`, for applications after
//! message rate, issue 23), delivery notifications, and [`data`]: the DATA interceptor,
//! its protocol selection and ratio policies and the Sarsa(λ) learner.
//! Adaptation (issue 20): typed actuators per destination (transport,
//! Braid congestion controller switched live, priority, ProgMP scheduler
//! and registers; `Node::set_transport_for`, `Node::set_priority`, ...)
//! and [`rules`], the ECA rule runtime that drives them from
//! `braid-rules` rule sets (`Node::set_rules`).
//!
//! Must not depend on: the `braid` facade, the simulator or the emulator
//! (they use this crate, not the reverse), protocol internals of
//! `braid-proto` (Braid is used through `braid-net` only). The learning
//! and selection code in [`data`] is sans-IO: time comes in as
//! [`braid_core::Instant`], randomness from a seeded [`braid_core::Rng`].
//!
//! Secure by default (issue 17 items 4–5): TCP channels run TLS 1.3 with
//! mutual authentication (`braid-tls`) and Braid connections the Noise IK
//! handshake, both with the node's identity and known hosts
//! ([`NodeConfig::security`], a [`NodeAuth`]); UDP, which has no handshake,
//! is the one unauthenticated transport and runs only when
//! [`NodeConfig::allow_unauthenticated_udp`] is set; `InsecureNoAuth` turns
//! all of it off.
//!
//! Exon (exactly-once, unordered) runs through `braid-exon-net`'s socket;
//! each node's Exon id is derived from its Exon address (see
//! [`Transport::Exon`]). The Exon protocol itself is not in this crate.
//!
//! ```no_run
//! use braid_node::{BasicAddress, BasicHeader, Message, MessageType, Node, NodeConfig, Transport};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct Ping { seq: u32 }
//! impl MessageType for Ping { const NAME: &'static str = "example.Ping"; }
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let a: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
//! let b: Node<BasicHeader> = Node::bind("127.0.0.1:0".parse()?, NodeConfig::default()).await?;
//! let h = BasicHeader::new(BasicAddress::new(a.local_addr()), BasicAddress::new(b.local_addr()), Transport::Braid);
//! let mut n = a.send_notify(Message::typed(h, Ping { seq: 1 })).await?;
//! println!("{:?}", n.outcome().await); // Delivered, once Braid's peer acknowledged it
//! let (_, ping) = b.recv().await.unwrap().decode::<Ping>()?;
//! assert_eq!(ping.seq, 1);
//! # Ok(()) }
//! ```

mod adapt;
mod address;
mod batch;
mod braid_link;
mod channel;
mod config;
pub mod data;
mod error;
mod exon;
mod header;
mod inbox;
mod message;
mod node;
mod notify;
mod receiver;
mod registry;
pub mod rules;
mod stats;
mod tcp;
mod transport;
mod udp;
mod wire;

pub use adapt::{scheduler_names, ActuatorError, BraidSettings, MAX_PRIORITY};
pub use address::{Address, BasicAddress, VnodeId};
pub use batch::{BatchError, Bodies, IntoMessages, MessageBatch, MessageBatchBuilder};
pub use receiver::Received;
pub use rules::{AppliedAction, RuleStats, RulesConfig, RulesError};
pub use config::{NodeAuth, NodeConfig, UdpLoss};
pub use error::{ConfigError, FailReason, NodeError, SendError};
pub use header::{BasicHeader, DataHeader, Header, Route, RoutingHeader};
pub use message::{BodyKind, DecodeError, Message, MessageType, MessageTypeId};
pub use node::{Node, Vnode};
pub use notify::{DeliveryStatus, Notify};
pub use registry::{DispatchError, Dispatcher, RegistryError};
pub use stats::{NodeStats, TransportStats};
pub use tcp::{decode_frame, FrameLengthError, TcpFrames};
pub use transport::{Transport, UnknownTransport};
pub use wire::WireError;
