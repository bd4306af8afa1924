//! The overlay's wire messages, carried as typed Braid messages
//! (`braid_node::Message::typed`, postcard-encoded).
//!
//! Two families: membership (`State`, sent periodically to every candidate
//! neighbour and to the seeds) and link sessions (`Link`, `LinkAck`,
//! `Unlink`, `Keepalive`, exchanged only between the two ends of an
//! overlay link). Every field a receiver acts on is bounded by the
//! receiver ([`crate::MembershipConfig`]), never by the sender.

use std::net::SocketAddr;

use braid_node::MessageType;
use serde::{Deserialize, Serialize};

/// A peer as one node gossips it to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PeerRecord {
    /// The peer's overlay id.
    pub id: u64,
    /// Its node address (IP and base port).
    pub addr: SocketAddr,
    /// Its position.
    pub pos: (f64, f64),
    /// Milliseconds since the gossiping node (or whoever told it) last
    /// heard from the peer directly: gossip cannot keep a dead peer alive.
    pub age_ms: u64,
}

/// One topology's neighbour lists of the sender.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lists {
    /// Successors.
    pub out: Vec<u64>,
    /// Predecessors.
    pub inn: Vec<u64>,
}

/// The receiver's own timestamp coming back, for a round-trip time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Echo {
    /// The receiver's `stamp` as it sent it (its clock, nanoseconds).
    pub stamp: u64,
    /// How long the sender held it before echoing (nanoseconds).
    pub held_ns: u64,
}

/// The membership heartbeat.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// The sender's overlay id.
    pub from: u64,
    /// The sender's position.
    pub pos: (f64, f64),
    /// The sender's clock at sending (nanoseconds, opaque to the receiver).
    pub stamp: u64,
    /// The receiver's last stamp the sender saw, if any.
    pub echo: Option<Echo>,
    /// The sender's neighbour lists, one per topology of the schema.
    pub lists: Vec<Lists>,
    /// The sender's one-way delay estimates to its peers, microseconds.
    pub delays: Vec<(u64, u64)>,
    /// Peers the sender knows, nearest to the receiver first.
    pub gossip: Vec<PeerRecord>,
}

/// Every message the overlay sends.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum OverlayMsg {
    /// Membership heartbeat.
    State(State),
    /// Opens a link in topology `topo` (or adds directions to it).
    Link {
        /// The sender's overlay id.
        from: u64,
        /// The sender's position (so the receiver can evaluate the link).
        pos: (f64, f64),
        /// Topology index in the schema.
        topo: u16,
        /// The link sender -> receiver exists.
        sender_out: bool,
        /// The link receiver -> sender exists.
        sender_in: bool,
        /// Opened by the initial-topology policy, not by a rule: refused by
        /// a receiver that removed the link before.
        auto: bool,
    },
    /// Answer to `Link`.
    LinkAck {
        /// The sender's overlay id.
        from: u64,
        /// Topology index.
        topo: u16,
        /// Whether the sender now holds the link.
        accepted: bool,
    },
    /// Closes the link in topology `topo` (both directions).
    Unlink {
        /// The sender's overlay id.
        from: u64,
        /// Topology index.
        topo: u16,
    },
    /// Keeps an open link alive; answered by `Unlink` if the receiver has
    /// no such link.
    Keepalive {
        /// The sender's overlay id.
        from: u64,
        /// Topology index.
        topo: u16,
    },
}

impl MessageType for OverlayMsg {
    const NAME: &'static str = "braid.overlay.Msg";
}
