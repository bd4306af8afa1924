//! A deterministic, round-based simulator: a topology provider holding whole
//! topologies in memory, random geometric and tree worlds, and a driver that
//! runs the engine at every node until a round changes nothing.
//!
//! Model: in each round every node, in an order drawn from the seeded RNG,
//! evaluates its rules on its k-hop view of the current state and its actions
//! take effect immediately (asynchronous, one node at a time), as in the
//! sequential-activation model of local topology control (Frömmgen 2018,
//! §7.2; Kluge et al. 2017). Convergence is a round without any change.

use std::collections::{BTreeSet, HashMap, VecDeque};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::engine::{Engine, RuleOutcome};
use crate::provider::{ActionError, Change, TopologyProvider};
use crate::schema::{AttrId, Schema, TopoId, TopologyDecl, Type};
use crate::value::{dist, NodeId, Value};

/// Node attribute index of `pos` in simulator schemas.
pub const ATTR_POS: AttrId = AttrId(0);
/// Node attribute index of `treeDepth` in simulator schemas.
pub const ATTR_TREE_DEPTH: AttrId = AttrId(1);
/// Node attribute index of `id` in simulator schemas.
pub const ATTR_ID: AttrId = AttrId(2);
/// Edge attribute index of `weight` in simulator schemas.
pub const ATTR_WEIGHT: AttrId = AttrId(0);

/// A simulator schema: provider `TP`, the given topologies `(name, directed)`,
/// node attributes `pos` (position), `treeDepth` (hops from the root of
/// topology `Tree`, if any), `id` (the node number), edge attribute `weight`
/// (explicit, else the Euclidean length).
pub fn sim_schema(topologies: &[(&str, bool)]) -> Schema {
    Schema {
        provider: "TP".into(),
        topologies: topologies
            .iter()
            .map(|&(n, d)| TopologyDecl {
                name: n.into(),
                directed: d,
            })
            .collect(),
        node_attrs: vec![
            ("pos".into(), Type::Pos),
            ("treeDepth".into(), Type::Num),
            ("id".into(), Type::Num),
        ],
        edge_attrs: vec![("weight".into(), Type::Num)],
    }
}

/// The wireless topology-control schema: `Phys` (the unit-disk graph,
/// undirected) and `Ctrl` (the controlled topology; directed for Yao).
pub fn geometric_schema(directed_ctrl: bool) -> Schema {
    sim_schema(&[("Phys", false), ("Ctrl", directed_ctrl)])
}

/// The overlay-tree schema of Listing 7.1: `Tree` (directed, parent -> child)
/// and `Neighborhood` (undirected).
pub fn tree_schema() -> Schema {
    sim_schema(&[("Tree", true), ("Neighborhood", false)])
}

/// An in-memory world: every topology of every node.
#[derive(Clone, Debug)]
pub struct SimWorld {
    schema: Schema,
    out: Vec<Vec<BTreeSet<u32>>>,
    inn: Vec<Vec<BTreeSet<u32>>>,
    pos: Vec<(f64, f64)>,
    weights: HashMap<(u32, u32), f64>,
    tree: Option<(TopoId, u32)>,
}

impl SimWorld {
    /// `n` nodes at `pos` with empty topologies of `schema`.
    pub fn new(schema: Schema, pos: Vec<(f64, f64)>) -> Self {
        let n = pos.len();
        let t = schema.topologies.len();
        let tree = schema.topology("Tree").map(|t| (t, 0));
        SimWorld {
            schema,
            out: vec![vec![BTreeSet::new(); n]; t],
            inn: vec![vec![BTreeSet::new(); n]; t],
            pos,
            weights: HashMap::new(),
            tree,
        }
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.pos.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.pos.is_empty()
    }

    /// Node positions.
    pub fn positions(&self) -> &[(f64, f64)] {
        &self.pos
    }

    /// Sets the root of the `Tree` topology (for `treeDepth`).
    pub fn set_tree_root(&mut self, root: u32) {
        if let Some((t, _)) = self.tree {
            self.tree = Some((t, root));
        }
    }

    /// Gives edge `{a, b}` an explicit weight (otherwise its Euclidean length).
    pub fn set_weight(&mut self, a: u32, b: u32, w: f64) {
        self.weights.insert((a.min(b), a.max(b)), w);
    }

    fn valid(&self, t: TopoId, a: u32, b: u32) -> bool {
        t.0 < self.out.len()
            && (a as usize) < self.pos.len()
            && (b as usize) < self.pos.len()
            && a != b
    }

    /// Inserts `a -> b` (and `b -> a` if `t` is undirected); false if nothing
    /// changed or the topology or a node does not exist.
    pub fn link(&mut self, t: TopoId, a: u32, b: u32) -> bool {
        if !self.valid(t, a, b) {
            return false;
        }
        let mut changed = self.out[t.0][a as usize].insert(b);
        self.inn[t.0][b as usize].insert(a);
        if !self.schema.is_directed(t) {
            changed |= self.out[t.0][b as usize].insert(a);
            self.inn[t.0][a as usize].insert(b);
        }
        changed
    }

    /// Removes `a -> b` and `b -> a`; false if nothing changed.
    pub fn unlink(&mut self, t: TopoId, a: u32, b: u32) -> bool {
        if !self.valid(t, a, b) {
            return false;
        }
        let mut changed = self.out[t.0][a as usize].remove(&b);
        self.inn[t.0][b as usize].remove(&a);
        changed |= self.out[t.0][b as usize].remove(&a);
        self.inn[t.0][a as usize].remove(&b);
        changed
    }

    /// Every link `a -> b` of `t`; for undirected topologies only `a < b`.
    pub fn edges(&self, t: TopoId) -> BTreeSet<(u32, u32)> {
        let directed = self.schema.is_directed(t);
        let mut s = BTreeSet::new();
        let Some(lists) = self.out.get(t.0) else {
            return s;
        };
        for (a, outs) in lists.iter().enumerate() {
            for &b in outs {
                if directed || (a as u32) < b {
                    s.insert((a as u32, b));
                }
            }
        }
        s
    }

    /// Successors of `a` in `t` (empty for an unknown topology or node).
    pub fn successors(&self, t: TopoId, a: u32) -> &BTreeSet<u32> {
        static EMPTY: BTreeSet<u32> = BTreeSet::new();
        self.out
            .get(t.0)
            .and_then(|l| l.get(a as usize))
            .unwrap_or(&EMPTY)
    }

    /// Hops from the tree root following parent links; `None` if detached or cyclic.
    pub fn tree_depth(&self, v: u32) -> Option<u32> {
        let (t, root) = self.tree?;
        let mut cur = v;
        let mut depth = 0;
        while cur != root {
            let parents = self.inn.get(t.0)?.get(cur as usize)?;
            if parents.len() != 1 {
                return None;
            }
            cur = *parents.iter().next()?;
            depth += 1;
            if depth as usize > self.pos.len() {
                return None;
            }
        }
        Some(depth)
    }

    fn index(&self, n: NodeId) -> Result<u32, ActionError> {
        if (n.0 as usize) < self.pos.len() {
            Ok(n.0 as u32)
        } else {
            Err(ActionError::UnknownNode(n))
        }
    }
}

fn ids(s: &BTreeSet<u32>) -> Vec<NodeId> {
    s.iter().map(|&x| NodeId(u64::from(x))).collect()
}

impl TopologyProvider for SimWorld {
    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn out_neighbors(&self, t: TopoId, n: NodeId) -> Option<Vec<NodeId>> {
        self.out.get(t.0)?.get(usize::try_from(n.0).ok()?).map(ids)
    }

    fn in_neighbors(&self, t: TopoId, n: NodeId) -> Option<Vec<NodeId>> {
        self.inn.get(t.0)?.get(usize::try_from(n.0).ok()?).map(ids)
    }

    fn node_attr(&self, n: NodeId, a: AttrId) -> Option<Value> {
        let i = usize::try_from(n.0).ok().filter(|&i| i < self.pos.len())?;
        match a {
            ATTR_POS => Some(Value::Pos(self.pos[i].0, self.pos[i].1)),
            ATTR_TREE_DEPTH => self.tree_depth(i as u32).map(|d| Value::Num(f64::from(d))),
            ATTR_ID => Some(Value::Num(i as f64)),
            _ => None,
        }
    }

    fn edge_attr(&self, t: TopoId, a: NodeId, b: NodeId, attr: AttrId) -> Option<Value> {
        let (x, y) = (u32::try_from(a.0).ok()?, u32::try_from(b.0).ok()?);
        if attr != ATTR_WEIGHT || !self.out.get(t.0)?.get(x as usize)?.contains(&y) {
            return None;
        }
        let w = match self.weights.get(&(x.min(y), x.max(y))) {
            Some(w) => *w,
            None => dist(self.pos[x as usize], self.pos[y as usize]),
        };
        Some(Value::Num(w))
    }

    fn apply(&mut self, at: NodeId, t: TopoId, change: Change) -> Result<bool, ActionError> {
        if t.0 >= self.out.len() {
            return Err(ActionError::UnknownTopology(t.0));
        }
        let a = self.index(at)?;
        match change {
            Change::Add(v) => {
                let v = self.index(v)?;
                if v == a {
                    return Err(ActionError::SelfLoop(at));
                }
                Ok(self.link(t, a, v))
            }
            Change::Remove(v) => {
                let v = self.index(v)?;
                Ok(self.unlink(t, a, v))
            }
            Change::Move { from, to } => {
                let (f, n) = (self.index(from)?, self.index(to)?);
                if n == a {
                    return Err(ActionError::SelfLoop(at));
                }
                let fwd = self.out[t.0][a as usize].contains(&f);
                let back = self.out[t.0][f as usize].contains(&a);
                if !fwd && !back {
                    return Err(ActionError::NotANeighbor {
                        at,
                        from,
                        topology: self.schema.topologies[t.0].name.clone(),
                    });
                }
                self.unlink(t, a, f);
                // The new link keeps the old one's direction(s).
                if fwd {
                    self.out[t.0][a as usize].insert(n);
                    self.inn[t.0][n as usize].insert(a);
                }
                if back || !self.schema.is_directed(t) {
                    self.out[t.0][n as usize].insert(a);
                    self.inn[t.0][a as usize].insert(n);
                }
                if !self.schema.is_directed(t) {
                    self.out[t.0][a as usize].insert(n);
                    self.inn[t.0][n as usize].insert(a);
                }
                Ok(true)
            }
        }
    }
}

/// Node positions in the plane.
pub type Positions = Vec<(f64, f64)>;

/// `n` points uniform in the unit square and the unit-disk graph of `radius`
/// over them (edges `a < b` with distance <= radius).
pub fn random_geometric(n: usize, radius: f64, rng: &mut impl Rng) -> (Positions, Vec<(u32, u32)>) {
    let pos: Vec<(f64, f64)> = (0..n)
        .map(|_| (rng.random::<f64>(), rng.random::<f64>()))
        .collect();
    let mut edges = Vec::new();
    for a in 0..n {
        for b in a + 1..n {
            if dist(pos[a], pos[b]) <= radius {
                edges.push((a as u32, b as u32));
            }
        }
    }
    (pos, edges)
}

/// Whether the undirected graph on `n` nodes is connected.
pub fn connected(n: usize, edges: &[(u32, u32)]) -> bool {
    if n == 0 {
        return true;
    }
    let mut adj = vec![Vec::new(); n];
    for &(a, b) in edges {
        adj[a as usize].push(b);
        adj[b as usize].push(a);
    }
    let mut seen = vec![false; n];
    seen[0] = true;
    let mut q = VecDeque::from([0u32]);
    let mut count = 1;
    while let Some(x) = q.pop_front() {
        for &y in &adj[x as usize] {
            if !seen[y as usize] {
                seen[y as usize] = true;
                count += 1;
                q.push_back(y);
            }
        }
    }
    count == n
}

/// A wireless world: `Phys` = a random unit-disk graph, `Ctrl` = a copy of it
/// (or empty if `ctrl_empty`, for algorithms that add links, like Yao).
pub fn geometric_world(
    n: usize,
    radius: f64,
    seed: u64,
    directed_ctrl: bool,
    ctrl_empty: bool,
) -> SimWorld {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (pos, edges) = random_geometric(n, radius, &mut rng);
    let mut w = SimWorld::new(geometric_schema(directed_ctrl), pos);
    for &(a, b) in &edges {
        w.link(TopoId(0), a, b);
        if !ctrl_empty {
            w.link(TopoId(1), a, b);
            if directed_ctrl {
                w.link(TopoId(1), b, a);
            }
        }
    }
    w
}

/// An overlay world for the low-delay jump: `Neighborhood` = a connected
/// random unit-disk graph (the radius grows by 10 % until connected), `Tree` =
/// a random depth-first spanning tree of it rooted at node 0 (deep on purpose).
pub fn tree_world(n: usize, radius: f64, seed: u64) -> SimWorld {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut r = radius;
    let (pos, edges) = loop {
        let (pos, edges) = random_geometric(n, r, &mut rng);
        if connected(n, &edges) {
            break (pos, edges);
        }
        r *= 1.1;
    };
    let mut w = SimWorld::new(tree_schema(), pos);
    let (tree, nb) = (TopoId(0), TopoId(1));
    for &(a, b) in &edges {
        w.link(nb, a, b);
    }
    let mut seen = vec![false; n];
    let mut stack = vec![0u32];
    while let Some(x) = stack.pop() {
        if seen[x as usize] {
            continue;
        }
        seen[x as usize] = true;
        let mut next: Vec<u32> = w
            .successors(nb, x)
            .iter()
            .copied()
            .filter(|&y| !seen[y as usize])
            .collect();
        next.shuffle(&mut rng);
        for y in next {
            // The last parent to push a node wins: remove an earlier tentative parent.
            let old: Vec<u32> = w.inn[tree.0][y as usize].iter().copied().collect();
            for p in old {
                w.out[tree.0][p as usize].remove(&y);
                w.inn[tree.0][y as usize].remove(&p);
            }
            w.link(tree, x, y);
            stack.push(y);
        }
    }
    w.set_tree_root(0);
    w
}

/// What a simulation run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimReport {
    /// Rounds run (the last one changed nothing if converged).
    pub rounds: usize,
    /// Whether a round without changes was reached.
    pub converged: bool,
    /// Actions that changed the topology.
    pub changes: usize,
    /// Rule evaluations cut off by the budget.
    pub cutoffs: usize,
    /// Failed evaluations and refused actions, rendered.
    pub failures: Vec<String>,
}

/// Runs `engine` at every node, round after round, until a round changes
/// nothing or `max_rounds` have run. Node order per round comes from `seed`.
pub fn run_to_convergence(
    engine: &Engine,
    world: &mut SimWorld,
    seed: u64,
    max_rounds: usize,
) -> SimReport {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut rep = SimReport::default();
    let mut order: Vec<u32> = (0..world.len() as u32).collect();
    while rep.rounds < max_rounds {
        rep.rounds += 1;
        order.shuffle(&mut rng);
        let mut changed = 0;
        for &v in &order {
            let (eval, applied) = engine.step(world, NodeId(u64::from(v)));
            for r in &eval.reports {
                match &r.outcome {
                    RuleOutcome::CutOff(_) => rep.cutoffs += 1,
                    RuleOutcome::Failed(e) => rep.failures.push(format!("n{v} {}: {e}", r.rule)),
                    RuleOutcome::Matched(_) => {}
                }
            }
            for (a, e) in &applied.failed {
                rep.failures
                    .push(format!("n{v} action {:?}: {e}", a.change));
            }
            changed += applied.changed;
        }
        rep.changes += changed;
        if changed == 0 {
            rep.converged = true;
            break;
        }
    }
    rep
}
