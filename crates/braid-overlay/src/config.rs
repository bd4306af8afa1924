//! What one overlay member is and how its membership protocol behaves, and
//! the schema rules see.
//!
//! Model: every member has a position in the plane (given, as in the
//! wireless topology-control setting of Frömmgen 2018, §7.3); its candidate
//! neighbours (topology `Phys`) are the members within `radius` of it (a
//! unit-disk graph, the same predicate as
//! [`braid_tarl::sim::random_geometric`]); its overlay links (topology
//! `Ctrl`) are sessions it opens and closes with other members. Delays are
//! measured (round-trip times of the membership heartbeats, halved).

use std::net::SocketAddr;
use std::time::Duration;

use braid_tarl::{AttrId, NodeId, Schema, TopoId, TopologyDecl, Type};

/// The candidate topology, maintained by the membership protocol.
pub const TOPO_PHYS: TopoId = TopoId(0);
/// The overlay links, changed by the rules' actions.
pub const TOPO_CTRL: TopoId = TopoId(1);
/// Node attribute `pos` (given per member).
pub const ATTR_POS: AttrId = AttrId(0);
/// Node attribute `treeDepth` (not maintained by this provider: reads fail).
pub const ATTR_TREE_DEPTH: AttrId = AttrId(1);
/// Node attribute `id` (the member's overlay id).
pub const ATTR_ID: AttrId = AttrId(2);
/// Edge attribute `weight` (see [`WeightSource`]).
pub const ATTR_WEIGHT: AttrId = AttrId(0);
/// Edge attribute `delay`: measured one-way delay in milliseconds.
pub const ATTR_DELAY: AttrId = AttrId(1);

/// The schema rules run against on an overlay: the simulator's geometric
/// schema (`Phys`, `Ctrl`; `pos`, `treeDepth`, `id`; `weight`) plus the
/// measured edge attribute `delay`, so the shipped geometric rules compile
/// unchanged.
pub fn overlay_schema(ctrl_directed: bool) -> Schema {
    Schema {
        provider: "TP".into(),
        topologies: vec![
            TopologyDecl {
                name: "Phys".into(),
                directed: false,
            },
            TopologyDecl {
                name: "Ctrl".into(),
                directed: ctrl_directed,
            },
        ],
        node_attrs: vec![
            ("pos".into(), Type::Pos),
            ("treeDepth".into(), Type::Num),
            ("id".into(), Type::Num),
        ],
        edge_attrs: vec![("weight".into(), Type::Num), ("delay".into(), Type::Num)],
    }
}

/// What an edge's `weight` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightSource {
    /// The Euclidean distance of the ends' positions (the brute-force
    /// checkers' weight).
    Distance,
    /// The measured one-way delay in milliseconds (an overlay's natural
    /// weight; unknown until a round trip was measured).
    Delay,
}

/// Which overlay links a member opens by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitialLinks {
    /// A link to every candidate neighbour, once, when it is first found
    /// (topology control starts from the full unit-disk graph and removes
    /// links). A link removed by either end is never reopened by this
    /// policy, only by a rule.
    CopyOfCandidates,
    /// None: rules add every link (e.g. Yao).
    Empty,
}

/// A configuration field out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid overlay configuration `{field}`: expected {expected}")]
pub struct ConfigError {
    /// The field.
    pub field: &'static str,
    /// The allowed form.
    pub expected: &'static str,
}

/// One member's membership settings.
#[derive(Clone, Debug, PartialEq)]
pub struct MembershipConfig {
    /// The member's overlay id (unique in the overlay).
    pub id: NodeId,
    /// Its position.
    pub pos: (f64, f64),
    /// Members to contact first and then every `seed_every` heartbeats
    /// (rendezvous: a seed answers with the members nearest the asker).
    pub seeds: Vec<SocketAddr>,
    /// Candidate neighbours are the members within this distance.
    pub radius: f64,
    /// Whether `Ctrl` is directed.
    pub ctrl_directed: bool,
    /// Links opened without a rule.
    pub initial: InitialLinks,
    /// What `weight` means.
    pub weight: WeightSource,
    /// Heartbeat period (state to candidates, keepalives on links).
    pub heartbeat: Duration,
    /// Contact the seeds every this many heartbeats (>= 1).
    pub seed_every: u32,
    /// A member not heard from (directly or through fresh gossip) for this
    /// long is forgotten, with its links.
    pub peer_timeout: Duration,
    /// A link without a keepalive for this long is closed.
    pub link_timeout: Duration,
    /// Members remembered at most (bounds every table and message).
    pub max_peers: usize,
    /// Peers gossiped per heartbeat at most.
    pub max_gossip: usize,
}

impl MembershipConfig {
    /// Defaults for member `id` at `pos` with candidate `radius`: 250 ms
    /// heartbeats, seeds every 8, peers forgotten after 3 s, links after
    /// 2 s, at most 1024 peers, 32 gossiped.
    pub fn new(id: NodeId, pos: (f64, f64), radius: f64) -> Self {
        MembershipConfig {
            id,
            pos,
            seeds: Vec::new(),
            radius,
            ctrl_directed: false,
            initial: InitialLinks::CopyOfCandidates,
            weight: WeightSource::Distance,
            heartbeat: Duration::from_millis(250),
            seed_every: 8,
            peer_timeout: Duration::from_secs(3),
            link_timeout: Duration::from_secs(2),
            max_peers: 1024,
            max_gossip: 32,
        }
    }

    /// Checks every field; the error names it and the allowed form.
    ///
    /// # Errors
    /// The first field out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, expected| Err(ConfigError { field, expected });
        if !(self.pos.0.is_finite() && self.pos.1.is_finite()) {
            return err("pos", "finite coordinates");
        }
        if !(self.radius.is_finite() && self.radius > 0.0) {
            return err("radius", "a finite distance > 0");
        }
        if self.heartbeat.is_zero() {
            return err("heartbeat", "a positive duration");
        }
        if self.seed_every == 0 {
            return err("seed_every", "at least 1 heartbeat");
        }
        if self.peer_timeout < self.heartbeat * 2 {
            return err("peer_timeout", "at least two heartbeats");
        }
        if self.link_timeout < self.heartbeat * 2 {
            return err("link_timeout", "at least two heartbeats");
        }
        if !(1..=65_536).contains(&self.max_peers) {
            return err("max_peers", "1 to 65536");
        }
        if !(1..=1024).contains(&self.max_gossip) {
            return err("max_gossip", "1 to 1024");
        }
        Ok(())
    }
}
