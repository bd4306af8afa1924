//! TARL on real Braid nodes (Frömmgen 2018, ch. 7; issue 22 item 4): a
//! topology provider over Braid [`braid_node::Node`]s.
//!
//! Each member runs a membership protocol over typed Braid messages that
//! keeps its candidate neighbours (topology `Phys`: the members within a
//! radius of its given position) and its neighbours' lists and attributes
//! (positions, measured delays), with bounded tables and timeouts; its
//! overlay links (topology `Ctrl`) are sessions with their peers, opened,
//! kept alive and closed by messages. The TARL [`braid_tarl::Engine`]
//! evaluates the member's rules on its view on a timer and after changes,
//! and its actions open and close those sessions.
//!
//! Sans-IO where it can be: [`Membership`] is the protocol state machine and
//! the [`braid_tarl::TopologyProvider`] (time comes in, messages go out
//! through an outbox); [`OverlayNode`] is the tokio driver around a node.
//!
//! ```
//! use braid_overlay::{overlay_schema, Membership, MembershipConfig};
//! use braid_tarl::{algorithms::shipped, compile, NodeId};
//! let rule = compile("gabriel", shipped("gabriel").unwrap().source, &overlay_schema(false)).unwrap();
//! assert_eq!(rule.actions.len(), 1);
//! let m = Membership::new(MembershipConfig::new(NodeId(1), (0.5, 0.5), 0.3), "127.0.0.1:9000".parse().unwrap()).unwrap();
//! assert!(m.candidates().is_empty());
//! ```

#![warn(missing_docs)]

pub mod auth;
pub mod config;
pub mod driver;
pub mod membership;
pub mod msg;

pub use auth::{pinned_group, AuthError};
pub use config::{overlay_schema, ConfigError, InitialLinks, MembershipConfig, WeightSource};
pub use driver::{EngineStats, OverlayConfig, OverlayError, OverlayNode, Snapshot};
pub use membership::{Lane, LinkInfo, LinkState, Membership, MembershipStats, Outgoing};
pub use msg::OverlayMsg;
