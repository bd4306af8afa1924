//! A node's local view: its k-hop neighbourhood in every topology.
//!
//! Model: with view size k a node knows the neighbour lists (with edge
//! attributes) of every node within k-1 hops, and the attributes of every node
//! within k hops — what k-1 rounds of flooding neighbour lists deliver. So
//! k = 1 is a node's own links; a triangle through `self` needs k = 2; the
//! horizon-3 pattern of Listing 7.2 needs k = 3 (Frömmgen 2018, §7.4). Hops
//! are counted over the links of all topologies together, regardless of
//! direction (a node's monitoring reports all its lists at once). An edge is
//! in the view when the list of at least one endpoint is.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

use crate::provider::TopologyProvider;
use crate::schema::{AttrId, TopoId};
use crate::value::{NodeId, Value};

/// The neighbour lists of one node.
#[derive(Clone, Debug, Default)]
pub struct Lists {
    /// Successors, sorted.
    pub out: Vec<NodeId>,
    /// Predecessors, sorted.
    pub inn: Vec<NodeId>,
}

/// One topology's part of the view.
#[derive(Clone, Debug, Default)]
pub struct TopoView {
    /// Neighbour lists of the nodes within k-1 hops.
    pub lists: HashMap<NodeId, Lists>,
}

impl TopoView {
    /// Whether the link `a -> b` is known to exist (`None`: not in the view).
    pub fn has_edge(&self, a: NodeId, b: NodeId) -> Option<bool> {
        if let Some(l) = self.lists.get(&a) {
            return Some(l.out.binary_search(&b).is_ok());
        }
        self.lists.get(&b).map(|l| l.inn.binary_search(&a).is_ok())
    }
}

/// What the engine matches against: a k-hop view through a provider.
pub struct LocalView<'p, P: ?Sized> {
    provider: &'p P,
    center: NodeId,
    topos: Vec<TopoView>,
    /// Every node within k hops (over all topologies), sorted.
    nodes: Vec<NodeId>,
    /// Hop distance of every node in `nodes`.
    hops: HashMap<NodeId, u32>,
}

impl<'p, P: TopologyProvider + ?Sized> LocalView<'p, P> {
    /// The view of `center` with view size `k` (k >= 1) over all topologies.
    pub fn new(provider: &'p P, center: NodeId, k: u32) -> Self {
        let (topos, hops) = build_all(provider, center, k);
        let mut nodes: Vec<NodeId> = hops.keys().copied().collect();
        nodes.sort();
        LocalView {
            provider,
            center,
            topos,
            nodes,
            hops,
        }
    }

    /// The node the view belongs to.
    pub fn center(&self) -> NodeId {
        self.center
    }

    /// One topology's view.
    pub fn topo(&self, t: TopoId) -> &TopoView {
        &self.topos[t.0]
    }

    /// A node attribute, if the node is in the view of some topology.
    pub fn node_attr(&self, node: NodeId, attr: AttrId) -> Option<Value> {
        if self.hops.contains_key(&node) {
            self.provider.node_attr(node, attr)
        } else {
            None
        }
    }

    /// Every node within k hops, sorted.
    pub fn nodes(&self) -> &[NodeId] {
        &self.nodes
    }

    /// Hop distance of a node in the view.
    pub fn hops(&self, node: NodeId) -> Option<u32> {
        self.hops.get(&node).copied()
    }

    /// An edge attribute, if the edge is in the view.
    pub fn edge_attr(&self, t: TopoId, a: NodeId, b: NodeId, attr: AttrId) -> Option<Value> {
        match self.topos[t.0].has_edge(a, b) {
            Some(true) => self.provider.edge_attr(t, a, b, attr),
            _ => None,
        }
    }
}

fn build_all<P: TopologyProvider + ?Sized>(
    p: &P,
    center: NodeId,
    k: u32,
) -> (Vec<TopoView>, HashMap<NodeId, u32>) {
    let n = p.schema().topologies.len();
    let mut views = vec![TopoView::default(); n];
    let mut hops: HashMap<NodeId, u32> = HashMap::default();
    hops.insert(center, 0);
    let mut queue = VecDeque::from([center]);
    while let Some(x) = queue.pop_front() {
        let d = hops[&x];
        // Lists are known up to k-1 hops; nodes up to k hops.
        if d + 1 > k {
            continue;
        }
        for (t, view) in views.iter_mut().enumerate() {
            let (Some(out), Some(inn)) =
                (p.out_neighbors(TopoId(t), x), p.in_neighbors(TopoId(t), x))
            else {
                continue;
            };
            for &y in out.iter().chain(inn.iter()) {
                if let std::collections::hash_map::Entry::Vacant(e) = hops.entry(y) {
                    e.insert(d + 1);
                    queue.push_back(y);
                }
            }
            view.lists.insert(x, Lists { out, inn });
        }
    }
    (views, hops)
}
