//! The topology provider: the engine's only window on the network.
//!
//! Following the conceptual architecture of Stein et al. (Frömmgen 2018, §7.2),
//! the adaptation logic (rules), the topology provider and the application are
//! decoupled: the provider reports neighbour lists and attributes of the nodes
//! it knows about and carries out the actions. The in-crate simulator
//! ([`crate::sim::SimWorld`]) is one provider; a provider over real Braid
//! nodes implements the same trait.

use crate::schema::{AttrId, Schema, TopoId};
use crate::value::{NodeId, Value};

/// A change of one node's neighbourhood in one topology.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Change {
    /// Link to a new neighbour.
    Add(NodeId),
    /// Drop a neighbour.
    Remove(NodeId),
    /// Replace neighbour `from` by `to`, keeping the link's direction.
    Move {
        /// The neighbour dropped.
        from: NodeId,
        /// The neighbour linked instead.
        to: NodeId,
    },
}

/// Why a provider could not carry out an action.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    /// The node or neighbour is not known to the provider.
    #[error("unknown node {0}")]
    UnknownNode(NodeId),
    /// The topology id is not in the schema.
    #[error("unknown topology #{0}")]
    UnknownTopology(usize),
    /// `move_neighbor` from a node that is not a neighbour.
    #[error("{at} has no neighbour {from} to move in topology `{topology}`")]
    NotANeighbor {
        /// Where the move ran.
        at: NodeId,
        /// The missing neighbour.
        from: NodeId,
        /// The topology.
        topology: String,
    },
    /// Linking a node to itself.
    #[error("{0} cannot be its own neighbour")]
    SelfLoop(NodeId),
    /// The provider refused for its own reasons (e.g. a connection failed).
    #[error("provider refused: {0}")]
    Refused(String),
}

/// Neighbour lists, attributes and actions, as one node's runtime sees them.
///
/// `None` from a query means the provider does not know (the node is outside
/// what it monitors), which the engine treats as "not in the view".
pub trait TopologyProvider {
    /// The names rules may use.
    fn schema(&self) -> &Schema;

    /// Successors of `node` in `topo` (all neighbours in an undirected topology), sorted.
    fn out_neighbors(&self, topo: TopoId, node: NodeId) -> Option<Vec<NodeId>>;

    /// Predecessors of `node` in `topo` (all neighbours in an undirected topology), sorted.
    fn in_neighbors(&self, topo: TopoId, node: NodeId) -> Option<Vec<NodeId>>;

    /// A node attribute.
    fn node_attr(&self, node: NodeId, attr: AttrId) -> Option<Value>;

    /// An attribute of the edge `from -> to` of `topo`.
    fn edge_attr(&self, topo: TopoId, from: NodeId, to: NodeId, attr: AttrId) -> Option<Value>;

    /// Carries out `change` at node `at` in `topo`; `Ok(true)` if the topology changed.
    ///
    /// # Errors
    /// An [`ActionError`] when the change is impossible.
    fn apply(&mut self, at: NodeId, topo: TopoId, change: Change) -> Result<bool, ActionError>;
}
