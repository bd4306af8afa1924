//! Distributed pattern matching (DPM; Stein et al. \[F3\], Frömmgen 2018, §7.4):
//! a node extends a partial match as far as its local view allows and passes
//! it on to the neighbour that can extend it further, so patterns larger than
//! the view are found. Compared against non-distributed matching, where every
//! node first gathers a view large enough for the whole pattern.
//!
//! Model (synchronous rounds, one undirected topology):
//! - View size k: a node knows the neighbour lists (with edge weights) of the
//!   nodes within k-1 hops ([`crate::view`]). Gathering it takes k-1 flooding
//!   rounds; in round r every node sends the lists of the nodes at distance
//!   r-1 to each neighbour (one message per neighbour), or in one broadcast
//!   when the medium has broadcast.
//! - The pattern's edges are processed in an order where each has an already
//!   bound end. A holder that knows the list of the node it must extend from
//!   (or of either end, to check a closing edge) extends every candidate,
//!   checking injectivity and the rule's filter conjuncts as soon as their
//!   variables are bound; otherwise it forwards the partial match one hop
//!   towards that node. Per round a node sends one message per neighbour it
//!   forwards to (or one broadcast carrying them all).
//! - A complete match travels back to its origin (`self`), one message per hop.
//! - Message sizes are their postcard encodings.

use std::collections::{BTreeSet, HashMap, VecDeque};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use crate::check::compile;
use crate::engine::{Binding, Budget, Ctx, Engine, EngineConfig, EvalError, Facts, Val};
use crate::error::TarlError;
use crate::ir::{CExpr, CPattern, CSet, CompiledRule};
use crate::provider::{ActionError, Change, TopologyProvider};
use crate::schema::{AttrId, Schema, TopoId};
use crate::sim::{sim_schema, ATTR_ID, ATTR_WEIGHT};
use crate::value::{NodeId, Value};

/// A match as DPM reports it: the origin and the node of every pattern node
/// (in the pattern's node order).
pub type MatchKey = (u32, Vec<u32>);

/// Why DPM cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DpmError {
    /// The rule's condition is not one (filtered) `match` anchored at `self`.
    #[error("DPM needs a condition that is one connected match(...) containing self, optionally filtered: {0}")]
    Unsupported(String),
    /// The rule does not compile.
    #[error(transparent)]
    Rule(#[from] TarlError),
    /// A parameter is out of range.
    #[error("invalid parameter `{name}`: {why}")]
    Param {
        /// The parameter.
        name: &'static str,
        /// What is allowed.
        why: String,
    },
    /// Evaluating the rule's predicates failed.
    #[error(transparent)]
    Eval(#[from] EvalError),
}

/// One undirected weighted topology `Net`, as provider and as global facts.
#[derive(Clone, Debug)]
pub struct Net {
    schema: Schema,
    adj: Vec<Vec<NodeId>>,
    weight: HashMap<(u32, u32), f64>,
    all: Vec<NodeId>,
}

impl Net {
    /// A net of `n` nodes with weighted undirected `edges` (`(a, b, w)`).
    pub fn new(n: usize, edges: &[(u32, u32, f64)]) -> Self {
        let mut adj = vec![Vec::new(); n];
        let mut weight = HashMap::new();
        for &(a, b, w) in edges {
            if a == b || a as usize >= n || b as usize >= n {
                continue;
            }
            if weight.insert((a.min(b), a.max(b)), w).is_none() {
                adj[a as usize].push(NodeId(u64::from(b)));
                adj[b as usize].push(NodeId(u64::from(a)));
            }
        }
        adj.iter_mut().for_each(|l| l.sort());
        Net {
            schema: net_schema(),
            adj,
            weight,
            all: (0..n as u64).map(NodeId).collect(),
        }
    }

    /// An Erdős–Rényi graph G(n, p = mean_degree / (n-1)) with weights uniform in [0, 1).
    pub fn erdos_renyi(n: usize, mean_degree: f64, seed: u64) -> Self {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let p = if n > 1 {
            (mean_degree / (n as f64 - 1.0)).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let mut edges = Vec::new();
        for a in 0..n as u32 {
            for b in a + 1..n as u32 {
                if rng.random::<f64>() < p {
                    edges.push((a, b, rng.random::<f64>()));
                }
            }
        }
        Net::new(n, &edges)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.adj.len()
    }

    /// Whether the net has no nodes.
    pub fn is_empty(&self) -> bool {
        self.adj.is_empty()
    }

    /// Neighbours of `v`.
    pub fn neighbors(&self, v: u32) -> &[NodeId] {
        &self.adj[v as usize]
    }

    fn w(&self, a: NodeId, b: NodeId) -> Option<f64> {
        let (a, b) = (u32::try_from(a.0).ok()?, u32::try_from(b.0).ok()?);
        self.weight.get(&(a.min(b), a.max(b))).copied()
    }
}

/// The schema of a [`Net`]: the simulator schema with one undirected topology `Net`.
pub fn net_schema() -> Schema {
    sim_schema(&[("Net", false)])
}

impl TopologyProvider for Net {
    fn schema(&self) -> &Schema {
        &self.schema
    }
    fn out_neighbors(&self, _t: TopoId, n: NodeId) -> Option<Vec<NodeId>> {
        self.adj.get(usize::try_from(n.0).ok()?).cloned()
    }
    fn in_neighbors(&self, t: TopoId, n: NodeId) -> Option<Vec<NodeId>> {
        self.out_neighbors(t, n)
    }
    fn node_attr(&self, n: NodeId, a: AttrId) -> Option<Value> {
        (a == ATTR_ID && (n.0 as usize) < self.adj.len()).then_some(Value::Num(n.0 as f64))
    }
    fn edge_attr(&self, _t: TopoId, a: NodeId, b: NodeId, attr: AttrId) -> Option<Value> {
        (attr == ATTR_WEIGHT)
            .then(|| self.w(a, b))
            .flatten()
            .map(Value::Num)
    }
    fn apply(&mut self, _at: NodeId, _t: TopoId, _c: Change) -> Result<bool, ActionError> {
        Err(ActionError::Refused("the DPM net is read-only".into()))
    }
}

impl Facts for Net {
    fn has_edge(&self, _t: TopoId, a: NodeId, b: NodeId) -> Option<bool> {
        Some(self.w(a, b).is_some())
    }
    fn out(&self, _t: TopoId, n: NodeId) -> Option<&[NodeId]> {
        self.adj.get(usize::try_from(n.0).ok()?).map(Vec::as_slice)
    }
    fn inn(&self, t: TopoId, n: NodeId) -> Option<&[NodeId]> {
        self.out(t, n)
    }
    fn nodes(&self, _t: TopoId) -> &[NodeId] {
        &self.all
    }
    fn node_attr(&self, n: NodeId, a: AttrId) -> Option<Value> {
        TopologyProvider::node_attr(self, n, a)
    }
    fn edge_attr(&self, t: TopoId, a: NodeId, b: NodeId, attr: AttrId) -> Option<Value> {
        TopologyProvider::edge_attr(self, t, a, b, attr)
    }
}

/// Messages and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Cost {
    /// Messages sent (a broadcast counts once).
    pub messages: u64,
    /// Bytes sent (postcard encodings).
    pub bytes: u64,
}

impl std::ops::AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        self.messages += o.messages;
        self.bytes += o.bytes;
    }
}

/// Wire form of a partial match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
struct WirePartial {
    origin: u32,
    next_edge: u8,
    /// Node per pattern node; `u32::MAX` for unbound.
    nodes: Vec<u32>,
}

/// Wire form of a DPM message: partial matches for one neighbour, or (broadcast)
/// for several, each with its destination.
#[derive(Serialize)]
enum WireMsg<'a> {
    Search {
        from: u32,
        partials: &'a [WirePartial],
    },
    SearchBroadcast {
        from: u32,
        partials: &'a [(u32, WirePartial)],
    },
    Result {
        origin: u32,
        nodes: &'a [u32],
    },
    Lists {
        from: u32,
        lists: &'a [(u32, Vec<(u32, f32)>)],
    },
}

fn size(m: &WireMsg<'_>) -> u64 {
    postcard::to_allocvec(m).map_or(0, |v| v.len() as u64)
}

/// The cost of gathering k-hop views at every node (k-1 flooding rounds).
pub fn view_cost(net: &Net, k: u32, broadcast: bool) -> Cost {
    let mut c = Cost::default();
    let n = net.len();
    for v in 0..n as u32 {
        let deg = net.neighbors(v).len() as u64;
        if deg == 0 {
            continue;
        }
        let d = bfs(net, v);
        for r in 1..k {
            let lists: Vec<(u32, Vec<(u32, f32)>)> = (0..n as u32)
                .filter(|&x| d[x as usize] == r - 1)
                .map(|x| {
                    (
                        x,
                        net.neighbors(x)
                            .iter()
                            .map(|y| {
                                (
                                    y.0 as u32,
                                    net.w(NodeId(u64::from(x)), *y).unwrap_or(0.0) as f32,
                                )
                            })
                            .collect(),
                    )
                })
                .collect();
            if lists.is_empty() {
                break;
            }
            let b = size(&WireMsg::Lists {
                from: v,
                lists: &lists,
            });
            let copies = if broadcast { 1 } else { deg };
            c.messages += copies;
            c.bytes += copies * b;
        }
    }
    c
}

fn bfs(net: &Net, s: u32) -> Vec<u32> {
    let mut d = vec![u32::MAX; net.len()];
    d[s as usize] = 0;
    let mut q = VecDeque::from([s]);
    while let Some(x) = q.pop_front() {
        for y in net.neighbors(x) {
            let y = y.0 as usize;
            if d[y] == u32::MAX {
                d[y] = d[x as usize] + 1;
                q.push_back(y as u32);
            }
        }
    }
    d
}

/// The search plan: pattern edges in processing order with their readiness.
struct DpmPlan<'r> {
    pat: &'r CPattern,
    nslots: usize,
    /// Pattern edge indices in processing order.
    order: Vec<usize>,
    /// Filters checkable after step i (index 0: before any edge).
    ready: Vec<Vec<&'r CExpr>>,
}

fn plan(rule: &CompiledRule) -> Result<DpmPlan<'_>, DpmError> {
    let CSet::Match(pat) = &rule.condition else {
        return Err(DpmError::Unsupported(
            "the condition uses join/min/max/filter over a non-match".into(),
        ));
    };
    if !pat.nodes.contains(&0) {
        return Err(DpmError::Unsupported(
            "the pattern does not contain self".into(),
        ));
    }
    let mut bound = vec![0usize];
    let mut order = Vec::new();
    while order.len() < pat.edges.len() {
        let next = (0..pat.edges.len()).find(|&i| {
            !order.contains(&i)
                && (bound.contains(&pat.edges[i].from) || bound.contains(&pat.edges[i].to))
        });
        let Some(i) = next else {
            return Err(DpmError::Unsupported("the pattern is not connected".into()));
        };
        order.push(i);
        for s in [pat.edges[i].from, pat.edges[i].to] {
            if !bound.contains(&s) {
                bound.push(s);
            }
        }
    }
    // Step at which a slot is bound: self before step 0, others by their edge.
    let step_of = |slot: usize| -> Option<usize> {
        if slot == 0 {
            return Some(0);
        }
        order
            .iter()
            .position(|&i| {
                let e = &pat.edges[i];
                e.slot == slot || e.from == slot || e.to == slot
            })
            .map(|p| p + 1)
    };
    let mut ready = vec![Vec::new(); order.len() + 1];
    for f in &pat.filters {
        let mut used = Vec::new();
        f.slots(&mut used);
        if used.iter().any(|&s| step_of(s).is_none()) {
            return Err(DpmError::Unsupported(
                "a filter uses a correlated count(...)".into(),
            ));
        }
        let at = used.iter().filter_map(|&s| step_of(s)).max().unwrap_or(0);
        ready[at].push(f);
    }
    Ok(DpmPlan {
        pat,
        nslots: rule.slots.len(),
        order,
        ready,
    })
}

/// What a DPM run found and cost.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DpmRun {
    /// Every match found.
    pub matches: BTreeSet<MatchKey>,
    /// Gathering the k-hop views.
    pub view: Cost,
    /// Forwarding partial matches.
    pub search: Cost,
    /// Returning complete matches to their origins.
    pub results: Cost,
    /// Rounds until no partial match was in flight.
    pub rounds: u32,
}

impl DpmRun {
    /// All costs together.
    pub fn total(&self) -> Cost {
        let mut c = self.view;
        c += self.search;
        c += self.results;
        c
    }
}

struct Runner<'a> {
    net: &'a Net,
    plan: DpmPlan<'a>,
    k: u32,
    dist_to: HashMap<u32, Vec<u32>>,
    schema: Schema,
    budget: Budget,
}

impl Runner<'_> {
    fn dist(&mut self, from: u32, to: u32) -> u32 {
        let net = self.net;
        self.dist_to.entry(to).or_insert_with(|| bfs(net, to))[from as usize]
    }

    /// The neighbour of `h` one hop closer to `x`.
    fn next_hop(&mut self, h: u32, x: u32) -> Option<u32> {
        let d = self.dist(h, x);
        let net = self.net;
        net.neighbors(h)
            .iter()
            .map(|y| y.0 as u32)
            .find(|&y| self.dist(y, x) < d)
    }

    fn binding(&self, p: &WirePartial) -> Binding {
        let mut b = vec![Val::Unbound; self.plan.nslots];
        for (i, &s) in self.plan.pat.nodes.iter().enumerate() {
            if p.nodes[i] != u32::MAX {
                b[s] = Val::Node(NodeId(u64::from(p.nodes[i])));
            }
        }
        for &ei in &self.plan.order[..p.next_edge as usize] {
            let e = &self.plan.pat.edges[ei];
            if let (Val::Node(x), Val::Node(y)) = (b[e.from], b[e.to]) {
                b[e.slot] = Val::Edge(x, y);
            }
        }
        b
    }

    fn filters_hold(&self, p: &WirePartial, step: usize) -> Result<bool, EvalError> {
        let b = self.binding(p);
        let mut cx = Ctx {
            view: self.net,
            schema: &self.schema,
            budget: self.budget,
            steps: 0,
            matches: 0,
        };
        for f in &self.plan.ready[step] {
            match cx.expr(f, &b)? {
                Value::Bool(true) => {}
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    fn slot_index(&self, slot: usize) -> usize {
        self.plan
            .pat
            .nodes
            .iter()
            .position(|&s| s == slot)
            .unwrap_or(0)
    }

    /// Processes `p` at holder `h`: local extensions, forwards, completions.
    fn process(
        &mut self,
        h: u32,
        p: WirePartial,
        out: &mut Vec<(u32, WirePartial)>,
        run: &mut DpmRun,
    ) -> Result<(), DpmError> {
        let mut stack = vec![p];
        let pat = self.plan.pat;
        while let Some(p) = stack.pop() {
            let step = p.next_edge as usize;
            if step == self.plan.order.len() {
                let hops = u64::from(self.dist(h, p.origin));
                if hops > 0 {
                    let b = size(&WireMsg::Result {
                        origin: p.origin,
                        nodes: &p.nodes,
                    });
                    run.results += Cost {
                        messages: hops,
                        bytes: hops * b,
                    };
                }
                run.matches.insert((p.origin, p.nodes));
                continue;
            }
            let e = &pat.edges[self.plan.order[step]];
            let (fi, ti) = (self.slot_index(e.from), self.slot_index(e.to));
            let (xf, xt) = (p.nodes[fi], p.nodes[ti]);
            let knows = |r: &mut Self, x: u32| x != u32::MAX && r.dist(h, x) < r.k;
            if xf != u32::MAX && xt != u32::MAX {
                // A closing edge: check it if either end's list is known.
                if knows(self, xf) || knows(self, xt) {
                    if Facts::has_edge(
                        self.net,
                        pat.topo,
                        NodeId(u64::from(xf)),
                        NodeId(u64::from(xt)),
                    ) == Some(true)
                    {
                        let q = WirePartial {
                            next_edge: p.next_edge + 1,
                            ..p
                        };
                        if self.filters_hold(&q, step + 1)? {
                            stack.push(q);
                        }
                    }
                } else {
                    let target = if self.dist(h, xf) <= self.dist(h, xt) {
                        xf
                    } else {
                        xt
                    };
                    if let Some(y) = self.next_hop(h, target) {
                        out.push((y, p));
                    }
                }
                continue;
            }
            let (anchor, free) = if xf != u32::MAX { (xf, ti) } else { (xt, fi) };
            if !knows(self, anchor) {
                if let Some(y) = self.next_hop(h, anchor) {
                    out.push((y, p));
                }
                continue;
            }
            let net = self.net;
            for c in net.neighbors(anchor) {
                let c = c.0 as u32;
                if p.nodes.contains(&c) {
                    continue;
                }
                let mut q = p.clone();
                q.nodes[free] = c;
                q.next_edge += 1;
                if self.filters_hold(&q, step + 1)? {
                    stack.push(q);
                }
            }
        }
        Ok(())
    }
}

/// Runs DPM for `rule` (one filtered `match` anchored at `self` on topology
/// `Net`) on every node of `net` with view size `k`.
///
/// # Errors
/// An unsupported rule shape or a failing predicate.
pub fn distributed_match(
    net: &Net,
    rule: &CompiledRule,
    k: u32,
    broadcast: bool,
) -> Result<DpmRun, DpmError> {
    if k == 0 {
        return Err(DpmError::Param {
            name: "k",
            why: "must be >= 1".into(),
        });
    }
    let plan = plan(rule)?;
    let npat = plan.pat.nodes.len();
    let self_index = plan.pat.nodes.iter().position(|&s| s == 0).unwrap_or(0);
    let mut r = Runner {
        net,
        plan,
        k,
        dist_to: HashMap::new(),
        schema: net_schema(),
        budget: Budget {
            max_steps: u64::MAX,
            max_matches: u64::MAX,
        },
    };
    let mut run = DpmRun {
        view: view_cost(net, k, broadcast),
        ..DpmRun::default()
    };
    let n = net.len() as u32;
    let mut outboxes: Vec<Vec<(u32, WirePartial)>> = vec![Vec::new(); net.len()];
    for s in 0..n {
        let mut nodes = vec![u32::MAX; npat];
        nodes[self_index] = s;
        let p = WirePartial {
            origin: s,
            next_edge: 0,
            nodes,
        };
        if r.filters_hold(&p, 0)? {
            let mut out = Vec::new();
            r.process(s, p, &mut out, &mut run)?;
            outboxes[s as usize] = out;
        }
    }
    while outboxes.iter().any(|o| !o.is_empty()) {
        run.rounds += 1;
        let mut inbox: Vec<Vec<WirePartial>> = vec![Vec::new(); net.len()];
        for (from, out) in outboxes.iter_mut().enumerate() {
            if out.is_empty() {
                continue;
            }
            let from = from as u32;
            if broadcast {
                let b = size(&WireMsg::SearchBroadcast {
                    from,
                    partials: out,
                });
                run.search += Cost {
                    messages: 1,
                    bytes: b,
                };
            } else {
                out.sort_by_key(|(d, _)| *d);
                for chunk in out.chunk_by(|a, b| a.0 == b.0) {
                    let ps: Vec<WirePartial> = chunk.iter().map(|(_, p)| p.clone()).collect();
                    let b = size(&WireMsg::Search {
                        from,
                        partials: &ps,
                    });
                    run.search += Cost {
                        messages: 1,
                        bytes: b,
                    };
                }
            }
            for (d, p) in out.drain(..) {
                inbox[d as usize].push(p);
            }
        }
        for (h, ps) in inbox.into_iter().enumerate() {
            for p in ps {
                let mut out = Vec::new();
                r.process(h as u32, p, &mut out, &mut run)?;
                outboxes[h].extend(out);
            }
        }
    }
    Ok(run)
}

/// Every match of `rule` found by the engine at every node with view size `k`
/// (`k >= horizon` finds all; `k = n` is the central matcher).
///
/// # Errors
/// The engine's evaluation errors.
pub fn engine_matches(
    net: &Net,
    rule: &CompiledRule,
    k: u32,
) -> Result<BTreeSet<MatchKey>, DpmError> {
    let engine = Engine::new(
        net_schema(),
        vec![rule.clone()],
        EngineConfig {
            k: k.max(1),
            budget: Budget {
                max_steps: u64::MAX,
                max_matches: u64::MAX,
            },
        },
    )
    .map_err(|e| DpmError::Param {
        name: "k",
        why: e.to_string(),
    })?;
    let mut out = BTreeSet::new();
    for v in 0..net.len() as u64 {
        for b in engine.matches(0, net, NodeId(v))? {
            let nodes = pattern_nodes(rule, &b);
            out.insert((v as u32, nodes));
        }
    }
    Ok(out)
}

fn pattern_nodes(rule: &CompiledRule, b: &Binding) -> Vec<u32> {
    let CSet::Match(p) = &rule.condition else {
        return Vec::new();
    };
    p.nodes
        .iter()
        .map(|&s| match b[s] {
            Val::Node(n) => n.0 as u32,
            _ => u32::MAX,
        })
        .collect()
}

/// The smallest view size with which a node sees the whole pattern:
/// 1 + the largest hop distance from `self` of an edge's nearer end.
///
/// # Errors
/// A rule DPM cannot handle.
pub fn pattern_horizon(rule: &CompiledRule) -> Result<u32, DpmError> {
    let plan = plan(rule)?;
    let pat = plan.pat;
    let mut d: HashMap<usize, u32> = HashMap::from([(0, 0)]);
    let mut changed = true;
    while changed {
        changed = false;
        for e in &pat.edges {
            for (a, b) in [(e.from, e.to), (e.to, e.from)] {
                if let Some(&da) = d.get(&a) {
                    if d.get(&b).is_none_or(|&db| db > da + 1) {
                        d.insert(b, da + 1);
                        changed = true;
                    }
                }
            }
        }
    }
    Ok(pat
        .edges
        .iter()
        .map(|e| d[&e.from].min(d[&e.to]) + 1)
        .max()
        .unwrap_or(1))
}

/// The thesis's horizon-3 pattern (Listing 7.2) with every edge weight below `threshold`.
pub fn listing_7_2_rule(threshold: f64) -> String {
    format!(
        "const T = {threshold:?};\n\
         filter(\n  match(TP, Net, self <- e1 -> n1, n1 <- e2 -> n2, n2 <- e3 -> n3, n1 <- e4 -> n4),\n  \
         e1.weight < T && e2.weight < T && e3.weight < T && e4.weight < T)\n\
         execute every match:\n  at (self, TP, Net) add_neighbor(n3)\n"
    )
}

/// A larger pattern of horizon 4 (the thesis's "Larger Pattern" needs k = 4):
/// a path of four edges from `self` with a branch at the first hop, every
/// edge weight below `threshold`.
pub fn larger_pattern_rule(threshold: f64) -> String {
    format!(
        "const T = {threshold:?};\n\
         filter(\n  match(TP, Net, self <- e1 -> n1, n1 <- e2 -> n2, n2 <- e3 -> n3, n3 <- e4 -> n4, n1 <- e5 -> n5),\n  \
         e1.weight < T && e2.weight < T && e3.weight < T && e4.weight < T && e5.weight < T)\n\
         execute every match:\n  at (self, TP, Net) add_neighbor(n4)\n"
    )
}

/// One point of the DPM study.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StudyParams {
    /// Nodes of the Erdős–Rényi graph.
    pub nodes: usize,
    /// Its mean degree.
    pub mean_degree: f64,
    /// Pattern edges must weigh less than this (weights are uniform in [0, 1)):
    /// controls how often the pattern occurs.
    pub weight_threshold: f64,
    /// DPM's view size.
    pub k: u32,
    /// Whether the medium has broadcast.
    pub broadcast: bool,
    /// Graph seed.
    pub seed: u64,
}

/// One matcher's cost in a study point.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct MatcherMetrics {
    /// View size used.
    pub k: u32,
    /// Messages (view + search + results).
    pub messages: u64,
    /// Bytes (view + search + results).
    pub bytes: u64,
    /// Of which for gathering views.
    pub view_messages: u64,
    /// Matches detected.
    pub matches: u64,
    /// Messages per node.
    pub messages_per_node: f64,
    /// Messages per detected match (`None` without matches).
    pub messages_per_match: Option<f64>,
    /// Bytes per detected match (`None` without matches).
    pub bytes_per_match: Option<f64>,
}

/// What the lab records for one study point.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StudyMetrics {
    /// Matches per node (the thesis's pattern frequency).
    pub pattern_frequency: f64,
    /// Distributed pattern matching with view size k.
    pub dpm: MatcherMetrics,
    /// Non-distributed matching with a view covering the pattern.
    pub baseline: MatcherMetrics,
    /// Whether DPM found exactly the baseline's matches.
    pub same_matches: bool,
}

fn metrics(k: u32, total: Cost, view: Cost, matches: u64, nodes: usize) -> MatcherMetrics {
    let per = |x: u64| (matches > 0).then(|| x as f64 / matches as f64);
    MatcherMetrics {
        k,
        messages: total.messages,
        bytes: total.bytes,
        view_messages: view.messages,
        matches,
        messages_per_node: total.messages as f64 / nodes.max(1) as f64,
        messages_per_match: per(total.messages),
        bytes_per_match: per(total.bytes),
    }
}

/// Runs one DPM study point (the lab template calls this): an Erdős–Rényi
/// graph, the Listing 7.2 pattern under the weight threshold, DPM with view
/// size `k` against non-distributed matching with the pattern's horizon.
///
/// # Errors
/// Out-of-range parameters.
pub fn study_point(p: &StudyParams) -> Result<StudyMetrics, DpmError> {
    study_point_for(p, &listing_7_2_rule(p.weight_threshold))
}

/// [`study_point`] with another pattern: `rule_src` is a TARL rule over the
/// [`net_schema`] whose condition is one filtered `match` containing `self`
/// (e.g. [`larger_pattern_rule`]).
///
/// # Errors
/// Out-of-range parameters, or a rule that does not compile or suit DPM.
pub fn study_point_for(p: &StudyParams, rule_src: &str) -> Result<StudyMetrics, DpmError> {
    if p.nodes == 0 || p.nodes > 20_000 {
        return Err(DpmError::Param {
            name: "nodes",
            why: format!("must be in 1..=20000, got {}", p.nodes),
        });
    }
    if !(p.mean_degree >= 0.0 && p.mean_degree.is_finite()) {
        return Err(DpmError::Param {
            name: "mean_degree",
            why: "must be a finite number >= 0".into(),
        });
    }
    if !p.weight_threshold.is_finite() {
        return Err(DpmError::Param {
            name: "weight_threshold",
            why: "must be finite".into(),
        });
    }
    if p.k == 0 || p.k > 16 {
        return Err(DpmError::Param {
            name: "k",
            why: format!("must be in 1..=16, got {}", p.k),
        });
    }
    let rule = compile("pattern", rule_src, &net_schema())?;
    let net = Net::erdos_renyi(p.nodes, p.mean_degree, p.seed);
    let run = distributed_match(&net, &rule, p.k, p.broadcast)?;
    let kb = pattern_horizon(&rule)?;
    let base = engine_matches(&net, &rule, kb)?;
    let base_view = view_cost(&net, kb, p.broadcast);
    Ok(StudyMetrics {
        pattern_frequency: base.len() as f64 / p.nodes as f64,
        dpm: metrics(
            p.k,
            run.total(),
            run.view,
            run.matches.len() as u64,
            p.nodes,
        ),
        baseline: metrics(kb, base_view, base_view, base.len() as u64, p.nodes),
        same_matches: run.matches == base,
    })
}
