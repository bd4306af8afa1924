//! The TARL engine: evaluates a node's rules on its local view and carries
//! out the resulting actions through the topology provider.
//!
//! Matching is subgraph isomorphism with attribute constraints, by
//! backtracking (in the manner of Ullmann's / VF2's state-space search):
//! pattern nodes are ordered so that each one after the first is adjacent to
//! an earlier one, candidates come from that neighbour's list, are pruned by
//! degree, injectivity and every adjacency to already-mapped nodes, and the
//! conjuncts of an enclosing `filter` are checked as soon as their variables
//! are bound. Set operators follow Frömmgen 2018, Table 7.1. Each rule's
//! evaluation is bounded by a [`Budget`] of search steps and produced
//! matches; a rule that would exceed it is cut off (no actions run) and
//! reported. The engine is sans-IO: the caller decides when to evaluate (on a
//! timer, on a topology change) and passes the provider in.

use rustc_hash::FxHashMap as HashMap;
use std::sync::Arc;

use crate::ast::{ActionKind, BinOp};
use crate::ir::{Builtin, CExpr, CPattern, CSet, CompiledRule};
use crate::provider::{ActionError, Change, TopologyProvider};
use crate::schema::{Schema, TopoId};
use crate::value::{angle, dist, NodeId, Value};
use crate::view::LocalView;

/// What one variable slot holds during matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Val {
    /// Not bound (yet).
    Unbound,
    /// A node.
    Node(NodeId),
    /// An edge `from -> to` (in the pattern edge's orientation).
    Edge(NodeId, NodeId),
}

/// One match: a value per slot of the rule.
pub type Binding = Vec<Val>;

/// Limits on one rule's evaluation at one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Candidate nodes tried by the matcher.
    pub max_steps: u64,
    /// Matches produced by all set operators together.
    pub max_matches: u64,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            max_steps: 1_000_000,
            max_matches: 100_000,
        }
    }
}

/// Engine settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// View size: neighbour lists within k-1 hops are known (k >= 1).
    pub k: u32,
    /// Per-rule, per-evaluation limits.
    pub budget: Budget,
}

/// Why a rule's evaluation stopped without a result.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// The step budget ran out.
    #[error("cut off after {0} search steps (budget exhausted)")]
    StepBudget(u64),
    /// The match budget ran out.
    #[error("cut off after {0} matches (budget exhausted)")]
    MatchBudget(u64),
    /// A node attribute the rule reads is not known for a node.
    #[error("node attribute `{attr}` of {node} is not available")]
    MissingNodeAttr {
        /// The node.
        node: NodeId,
        /// The attribute's name.
        attr: String,
    },
    /// An edge attribute the rule reads is not known.
    #[error("edge attribute `{attr}` of {from} -> {to} is not available")]
    MissingEdgeAttr {
        /// Source.
        from: NodeId,
        /// Target.
        to: NodeId,
        /// The attribute's name.
        attr: String,
    },
    /// The provider returned a value of another type than its schema says.
    #[error("provider returned a value of the wrong type for `{0}`")]
    WrongType(String),
    /// The provider's schema is not the one the rules were compiled against.
    #[error("the provider's schema differs from the one the rules were checked against")]
    SchemaMismatch,
}

/// Why an engine could not be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// `k` must be at least 1.
    #[error("view size k must be >= 1, got {0}")]
    InvalidK(u32),
}

/// An action the engine wants carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlannedAction {
    /// Index of the rule that produced it.
    pub rule: usize,
    /// The node whose neighbourhood changes.
    pub at: NodeId,
    /// The topology.
    pub topo: TopoId,
    /// The change.
    pub change: Change,
}

/// How one rule's evaluation ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleOutcome {
    /// The condition produced this many matches (possibly 0).
    Matched(usize),
    /// The evaluation was stopped by the budget; no actions were planned.
    CutOff(EvalError),
    /// The evaluation failed; no actions were planned.
    Failed(EvalError),
}

/// One rule's evaluation at one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleReport {
    /// The rule's name.
    pub rule: String,
    /// Search steps used.
    pub steps: u64,
    /// Matches produced (all operators).
    pub matches: u64,
    /// The outcome.
    pub outcome: RuleOutcome,
}

/// The result of evaluating every rule at one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// The node evaluated.
    pub node: NodeId,
    /// Actions planned, in rule order and match order.
    pub planned: Vec<PlannedAction>,
    /// One report per rule.
    pub reports: Vec<RuleReport>,
}

/// What applying an evaluation's actions did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyReport {
    /// Actions that changed the topology.
    pub changed: usize,
    /// Actions that found the topology already as wanted.
    pub unchanged: usize,
    /// Actions the provider refused.
    pub failed: Vec<(PlannedAction, ActionError)>,
}

/// Rules plus settings; evaluates any node of any provider with the rules' schema.
#[derive(Clone, Debug)]
pub struct Engine {
    schema: Schema,
    rules: Vec<Arc<CompiledRule>>,
    config: EngineConfig,
}

impl Engine {
    /// An engine running `rules` (compiled against `schema`).
    ///
    /// # Errors
    /// [`EngineError::InvalidK`] for `k == 0`.
    pub fn new(
        schema: Schema,
        rules: Vec<CompiledRule>,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        if config.k == 0 {
            return Err(EngineError::InvalidK(0));
        }
        Ok(Engine {
            schema,
            rules: rules.into_iter().map(Arc::new).collect(),
            config,
        })
    }

    /// The settings.
    pub fn config(&self) -> EngineConfig {
        self.config
    }

    /// The rules.
    pub fn rules(&self) -> &[Arc<CompiledRule>] {
        &self.rules
    }

    /// Evaluates every rule at `node` on its k-hop view; changes nothing.
    pub fn evaluate<P: TopologyProvider + ?Sized>(&self, provider: &P, node: NodeId) -> Evaluation {
        let mut planned = Vec::new();
        let mut reports = Vec::new();
        if *provider.schema() != self.schema {
            for r in &self.rules {
                reports.push(RuleReport {
                    rule: r.name.clone(),
                    steps: 0,
                    matches: 0,
                    outcome: RuleOutcome::Failed(EvalError::SchemaMismatch),
                });
            }
            return Evaluation {
                node,
                planned,
                reports,
            };
        }
        let view = LocalView::new(provider, node, self.config.k);
        for (ri, rule) in self.rules.iter().enumerate() {
            let mut cx = Ctx {
                view: &view,
                schema: &self.schema,
                budget: self.config.budget,
                steps: 0,
                matches: 0,
            };
            let mut base = vec![Val::Unbound; rule.slots.len()];
            base[0] = Val::Node(node);
            let res = cx.set(&rule.condition, &base);
            let outcome = match res {
                Ok(ms) => {
                    for m in &ms {
                        for a in &rule.actions {
                            let nodes: Vec<NodeId> = std::iter::once(a.at)
                                .chain(a.args.iter().copied())
                                .filter_map(|s| match m[s] {
                                    Val::Node(n) => Some(n),
                                    _ => None,
                                })
                                .collect();
                            if nodes.len() != 1 + a.args.len() {
                                continue;
                            }
                            let change = match a.kind {
                                ActionKind::Add => Change::Add(nodes[1]),
                                ActionKind::Remove => Change::Remove(nodes[1]),
                                ActionKind::Move => Change::Move {
                                    from: nodes[1],
                                    to: nodes[2],
                                },
                            };
                            planned.push(PlannedAction {
                                rule: ri,
                                at: nodes[0],
                                topo: a.topo,
                                change,
                            });
                        }
                    }
                    RuleOutcome::Matched(ms.len())
                }
                Err(e @ (EvalError::StepBudget(_) | EvalError::MatchBudget(_))) => {
                    RuleOutcome::CutOff(e)
                }
                Err(e) => RuleOutcome::Failed(e),
            };
            reports.push(RuleReport {
                rule: rule.name.clone(),
                steps: cx.steps,
                matches: cx.matches,
                outcome,
            });
        }
        Evaluation {
            node,
            planned,
            reports,
        }
    }

    /// Every match of rule `rule`'s condition at `node` (for tools, tests and
    /// the non-distributed matcher); actions are not planned.
    ///
    /// # Errors
    /// The budget or a missing attribute, as in [`evaluate`](Self::evaluate).
    pub fn matches<P: TopologyProvider + ?Sized>(
        &self,
        rule: usize,
        provider: &P,
        node: NodeId,
    ) -> Result<Vec<Binding>, EvalError> {
        if *provider.schema() != self.schema {
            return Err(EvalError::SchemaMismatch);
        }
        let Some(r) = self.rules.get(rule) else {
            return Ok(Vec::new());
        };
        let view = LocalView::new(provider, node, self.config.k);
        let mut cx = Ctx {
            view: &view,
            schema: &self.schema,
            budget: self.config.budget,
            steps: 0,
            matches: 0,
        };
        let mut base = vec![Val::Unbound; r.slots.len()];
        base[0] = Val::Node(node);
        cx.set(&r.condition, &base)
    }

    /// Carries out an evaluation's planned actions, in order.
    pub fn apply<P: TopologyProvider + ?Sized>(
        &self,
        provider: &mut P,
        eval: &Evaluation,
    ) -> ApplyReport {
        let mut rep = ApplyReport::default();
        for a in &eval.planned {
            match provider.apply(a.at, a.topo, a.change) {
                Ok(true) => rep.changed += 1,
                Ok(false) => rep.unchanged += 1,
                Err(e) => rep.failed.push((*a, e)),
            }
        }
        rep
    }

    /// [`evaluate`](Self::evaluate) then [`apply`](Self::apply).
    pub fn step<P: TopologyProvider + ?Sized>(
        &self,
        provider: &mut P,
        node: NodeId,
    ) -> (Evaluation, ApplyReport) {
        let eval = self.evaluate(&*provider, node);
        let rep = self.apply(provider, &eval);
        (eval, rep)
    }
}

/// Applies a binary operator to two values of the types the checker allowed.
pub(crate) fn binary(op: BinOp, a: Value, b: Value) -> Option<Value> {
    use Value::{Bool, Num};
    Some(match (op, a, b) {
        (BinOp::Add, Num(x), Num(y)) => Num(x + y),
        (BinOp::Sub, Num(x), Num(y)) => Num(x - y),
        (BinOp::Mul, Num(x), Num(y)) => Num(x * y),
        (BinOp::Div, Num(x), Num(y)) => Num(x / y),
        (BinOp::Lt, Num(x), Num(y)) => Bool(x < y),
        (BinOp::Le, Num(x), Num(y)) => Bool(x <= y),
        (BinOp::Gt, Num(x), Num(y)) => Bool(x > y),
        (BinOp::Ge, Num(x), Num(y)) => Bool(x >= y),
        (BinOp::Eq, x, y) if std::mem::discriminant(&x) == std::mem::discriminant(&y) => {
            Bool(x == y)
        }
        (BinOp::Ne, x, y) if std::mem::discriminant(&x) == std::mem::discriminant(&y) => {
            Bool(x != y)
        }
        (BinOp::And, Bool(x), Bool(y)) => Bool(x && y),
        (BinOp::Or, Bool(x), Bool(y)) => Bool(x || y),
        _ => return None,
    })
}

/// Applies a built-in to arguments of the types the checker allowed.
pub(crate) fn call(f: Builtin, args: &[Value]) -> Option<Value> {
    use Value::{Num, Pos};
    Some(match (f, args) {
        (Builtin::Dist, [Pos(a, b), Pos(c, d)]) => Num(dist((*a, *b), (*c, *d))),
        (Builtin::Angle, [Pos(a, b), Pos(c, d)]) => Num(angle((*a, *b), (*c, *d))),
        (Builtin::Floor, [Num(x)]) => Num(x.floor()),
        (Builtin::Abs, [Num(x)]) => Num(x.abs()),
        (Builtin::Sqrt, [Num(x)]) => Num(x.sqrt()),
        (Builtin::Min, [Num(x), Num(y)]) => Num(x.min(*y)),
        (Builtin::Max, [Num(x), Num(y)]) => Num(x.max(*y)),
        (Builtin::Pi, []) => Num(std::f64::consts::PI),
        _ => return None,
    })
}

/// Where node attributes and edges come from during one evaluation.
pub(crate) trait Facts {
    /// Whether `a -> b` exists in `t` (`None`: unknown).
    fn has_edge(&self, t: TopoId, a: NodeId, b: NodeId) -> Option<bool>;
    /// Known successors (`None`: list unknown).
    fn out(&self, t: TopoId, n: NodeId) -> Option<&[NodeId]>;
    /// Known predecessors (`None`: list unknown).
    fn inn(&self, t: TopoId, n: NodeId) -> Option<&[NodeId]>;
    /// Every node of `t` in view.
    fn nodes(&self, t: TopoId) -> &[NodeId];
    /// A node attribute.
    fn node_attr(&self, n: NodeId, a: crate::schema::AttrId) -> Option<Value>;
    /// An edge attribute.
    fn edge_attr(
        &self,
        t: TopoId,
        a: NodeId,
        b: NodeId,
        attr: crate::schema::AttrId,
    ) -> Option<Value>;
}

impl<P: TopologyProvider + ?Sized> Facts for LocalView<'_, P> {
    fn has_edge(&self, t: TopoId, a: NodeId, b: NodeId) -> Option<bool> {
        self.topo(t).has_edge(a, b)
    }
    fn out(&self, t: TopoId, n: NodeId) -> Option<&[NodeId]> {
        self.topo(t).lists.get(&n).map(|l| l.out.as_slice())
    }
    fn inn(&self, t: TopoId, n: NodeId) -> Option<&[NodeId]> {
        self.topo(t).lists.get(&n).map(|l| l.inn.as_slice())
    }
    fn nodes(&self, _t: TopoId) -> &[NodeId] {
        LocalView::nodes(self)
    }
    fn node_attr(&self, n: NodeId, a: crate::schema::AttrId) -> Option<Value> {
        LocalView::node_attr(self, n, a)
    }
    fn edge_attr(
        &self,
        t: TopoId,
        a: NodeId,
        b: NodeId,
        attr: crate::schema::AttrId,
    ) -> Option<Value> {
        LocalView::edge_attr(self, t, a, b, attr)
    }
}

/// One rule's evaluation state: the facts, the schema (for error names) and the budget.
pub(crate) struct Ctx<'a, F: ?Sized> {
    pub(crate) view: &'a F,
    pub(crate) schema: &'a Schema,
    pub(crate) budget: Budget,
    pub(crate) steps: u64,
    pub(crate) matches: u64,
}

/// A pattern's search plan for one base binding.
struct Plan<'p> {
    pat: &'p CPattern,
    order: Vec<usize>,
    /// Per depth, the filters that become checkable once `order[..depth]` is bound.
    ready: Vec<Vec<&'p CExpr>>,
    /// Pattern out-/in-degree per order position (undirected edges count both ways).
    deg: Vec<(usize, usize)>,
}

impl<F: Facts + ?Sized> Ctx<'_, F> {
    fn count_matches(&mut self, n: usize) -> Result<(), EvalError> {
        self.matches += n as u64;
        if self.matches > self.budget.max_matches {
            return Err(EvalError::MatchBudget(self.matches));
        }
        Ok(())
    }

    pub(crate) fn set(&mut self, s: &CSet, base: &Binding) -> Result<Vec<Binding>, EvalError> {
        let out = match s {
            CSet::Match(p) => {
                let mut out = Vec::new();
                self.pattern(p, base, &mut out)?;
                out
            }
            CSet::Filter(m, e) => {
                let ms = self.set(m, base)?;
                let mut out = Vec::with_capacity(ms.len());
                for b in ms {
                    if self.truth(e, &b)? {
                        out.push(b);
                    }
                }
                return Ok(out);
            }
            CSet::Join(a, b, shared) => {
                let la = self.set(a, base)?;
                let lb = self.set(b, base)?;
                let mut index: HashMap<Vec<Val>, Vec<usize>> = HashMap::default();
                for (i, m) in lb.iter().enumerate() {
                    index
                        .entry(shared.iter().map(|&s| m[s]).collect())
                        .or_default()
                        .push(i);
                }
                let mut out = Vec::new();
                for m in &la {
                    let key: Vec<Val> = shared.iter().map(|&s| m[s]).collect();
                    if let Some(is) = index.get(&key) {
                        self.count_matches(is.len())?;
                        for &i in is {
                            let mut merged = m.clone();
                            for (slot, v) in lb[i].iter().enumerate() {
                                if merged[slot] == Val::Unbound {
                                    merged[slot] = *v;
                                }
                            }
                            out.push(merged);
                        }
                    }
                }
                return Ok(out);
            }
            CSet::NestedJoin(a, p) => {
                let la = self.set(a, base)?;
                let mut out = Vec::new();
                for m in &la {
                    self.pattern(p, m, &mut out)?;
                }
                return Ok(out);
            }
            CSet::Min(m, e) | CSet::Max(m, e) => {
                let ms = self.set(m, base)?;
                let mut keyed = Vec::with_capacity(ms.len());
                for b in ms {
                    let k = self.num(e, &b)?;
                    if !k.is_nan() {
                        keyed.push((k, b));
                    }
                }
                let want_min = matches!(s, CSet::Min(..));
                let best = keyed
                    .iter()
                    .map(|(k, _)| *k)
                    .fold(None, |acc: Option<f64>, k| {
                        Some(match acc {
                            None => k,
                            Some(a) if want_min => a.min(k),
                            Some(a) => a.max(k),
                        })
                    });
                return Ok(keyed
                    .into_iter()
                    .filter(|(k, _)| Some(*k) == best)
                    .map(|(_, b)| b)
                    .collect());
            }
        };
        Ok(out)
    }

    fn truth(&mut self, e: &CExpr, b: &Binding) -> Result<bool, EvalError> {
        match self.expr(e, b)? {
            Value::Bool(x) => Ok(x),
            _ => Err(EvalError::WrongType("predicate".into())),
        }
    }

    fn num(&mut self, e: &CExpr, b: &Binding) -> Result<f64, EvalError> {
        match self.expr(e, b)? {
            Value::Num(x) => Ok(x),
            _ => Err(EvalError::WrongType("number".into())),
        }
    }

    pub(crate) fn expr(&mut self, e: &CExpr, b: &Binding) -> Result<Value, EvalError> {
        Ok(match e {
            CExpr::Num(x) => Value::Num(*x),
            CExpr::Bool(x) => Value::Bool(*x),
            CExpr::Node(s) => match b[*s] {
                Val::Node(n) => Value::Node(n),
                _ => return Err(EvalError::WrongType("node variable".into())),
            },
            CExpr::NodeAttr(s, a) => {
                let Val::Node(n) = b[*s] else {
                    return Err(EvalError::WrongType("node variable".into()));
                };
                let v = self
                    .view
                    .node_attr(n, *a)
                    .ok_or_else(|| EvalError::MissingNodeAttr {
                        node: n,
                        attr: self
                            .schema
                            .node_attrs
                            .get(a.0)
                            .map(|x| x.0.clone())
                            .unwrap_or_default(),
                    })?;
                let want = self.schema.node_attrs.get(a.0).map(|x| x.1);
                if !type_ok(v, want) {
                    return Err(EvalError::WrongType(
                        self.schema
                            .node_attrs
                            .get(a.0)
                            .map(|x| x.0.clone())
                            .unwrap_or_default(),
                    ));
                }
                v
            }
            CExpr::EdgeAttr(s, t, a) => {
                let Val::Edge(x, y) = b[*s] else {
                    return Err(EvalError::WrongType("edge variable".into()));
                };
                let name = || {
                    self.schema
                        .edge_attrs
                        .get(a.0)
                        .map(|x| x.0.clone())
                        .unwrap_or_default()
                };
                let v = self.view.edge_attr(*t, x, y, *a).ok_or_else(|| {
                    EvalError::MissingEdgeAttr {
                        from: x,
                        to: y,
                        attr: name(),
                    }
                })?;
                if !type_ok(v, self.schema.edge_attrs.get(a.0).map(|x| x.1)) {
                    return Err(EvalError::WrongType(name()));
                }
                v
            }
            CExpr::Neg(x) => Value::Num(-self.num(x, b)?),
            CExpr::Not(x) => Value::Bool(!self.truth(x, b)?),
            CExpr::Bin(BinOp::And, x, y) => Value::Bool(self.truth(x, b)? && self.truth(y, b)?),
            CExpr::Bin(BinOp::Or, x, y) => Value::Bool(self.truth(x, b)? || self.truth(y, b)?),
            CExpr::Bin(op, x, y) => {
                let (vx, vy) = (self.expr(x, b)?, self.expr(y, b)?);
                binary(*op, vx, vy).ok_or_else(|| EvalError::WrongType(op.symbol().into()))?
            }
            CExpr::Call(f, args) => {
                let mut vs = Vec::with_capacity(args.len());
                for a in args {
                    vs.push(self.expr(a, b)?);
                }
                call(*f, &vs).ok_or_else(|| EvalError::WrongType(format!("{f:?}")))?
            }
            CExpr::Count(s) => Value::Num(self.set(s, b)?.len() as f64),
        })
    }

    fn plan<'p>(&self, p: &'p CPattern, base: &Binding) -> Plan<'p> {
        let mut order: Vec<usize> = p
            .nodes
            .iter()
            .copied()
            .filter(|&s| base[s] != Val::Unbound)
            .collect();
        let pre = order.len();
        while order.len() < p.nodes.len() {
            // Most-constrained first: the unordered node with most edges to ordered ones.
            let best = p
                .nodes
                .iter()
                .copied()
                .filter(|s| !order.contains(s))
                .max_by_key(|&s| {
                    let links = p
                        .edges
                        .iter()
                        .filter(|e| {
                            (e.from == s && order.contains(&e.to))
                                || (e.to == s && order.contains(&e.from))
                        })
                        .count();
                    (
                        links,
                        std::cmp::Reverse(p.nodes.iter().position(|&x| x == s)),
                    )
                });
            match best {
                Some(s) => order.push(s),
                None => break,
            }
        }
        let pos = |s: usize| order.iter().position(|&x| x == s);
        // Depth at which a slot becomes bound: nodes after their position, edges after both ends.
        let bound_at = |s: usize| -> Option<usize> {
            if base[s] != Val::Unbound {
                return Some(pre);
            }
            if let Some(i) = pos(s) {
                return Some(i + 1);
            }
            p.edges
                .iter()
                .find(|e| e.slot == s)
                .and_then(|e| Some(pos(e.from)?.max(pos(e.to)?) + 1))
        };
        let mut ready = vec![Vec::new(); order.len() + 1];
        for f in &p.filters {
            let mut used = Vec::new();
            f.slots(&mut used);
            let d = used
                .iter()
                .filter_map(|&s| bound_at(s))
                .max()
                .unwrap_or(pre)
                .max(pre);
            // Slots of a correlated count's own pattern are not bound here: check at the end.
            let d = if used
                .iter()
                .any(|&s| bound_at(s).is_none() && base[s] == Val::Unbound)
            {
                order.len()
            } else {
                d
            };
            ready[d.min(order.len())].push(f);
        }
        let deg = order
            .iter()
            .map(|&s| {
                let out = p
                    .edges
                    .iter()
                    .filter(|e| e.from == s || (e.undirected && e.to == s))
                    .count();
                let inn = p
                    .edges
                    .iter()
                    .filter(|e| e.to == s || (e.undirected && e.from == s))
                    .count();
                (out, inn)
            })
            .collect();
        Plan {
            pat: p,
            order,
            ready,
            deg,
        }
    }

    fn pattern(
        &mut self,
        p: &CPattern,
        base: &Binding,
        out: &mut Vec<Binding>,
    ) -> Result<(), EvalError> {
        let plan = self.plan(p, base);
        let pre = p.nodes.iter().filter(|&&s| base[s] != Val::Unbound).count();
        let mut b = base.clone();
        // Pre-bound nodes must already be distinct and linked as the pattern says.
        for i in 0..pre {
            for j in 0..i {
                if b[plan.order[i]] == b[plan.order[j]] {
                    return Ok(());
                }
            }
            if !self.link_edges(&plan, i, &mut b) {
                return Ok(());
            }
        }
        for f in &plan.ready[pre] {
            if !self.truth(f, &b)? {
                return Ok(());
            }
        }
        self.extend(&plan, pre, &mut b, out)
    }

    /// Checks and binds the edges between `order[i]` and `order[..i]`.
    fn link_edges(&self, plan: &Plan<'_>, i: usize, b: &mut Binding) -> bool {
        let s = plan.order[i];
        let earlier = &plan.order[..i];
        for e in &plan.pat.edges {
            let other = if e.from == s {
                e.to
            } else if e.to == s {
                e.from
            } else {
                continue;
            };
            if !earlier.contains(&other) {
                continue;
            }
            let (Val::Node(x), Val::Node(y)) = (b[e.from], b[e.to]) else {
                return false;
            };
            let t = plan.pat.topo;
            let ok = self.view.has_edge(t, x, y) == Some(true)
                && (!e.undirected || self.view.has_edge(t, y, x) == Some(true));
            if !ok {
                return false;
            }
            b[e.slot] = Val::Edge(x, y);
        }
        true
    }

    fn extend(
        &mut self,
        plan: &Plan<'_>,
        d: usize,
        b: &mut Binding,
        out: &mut Vec<Binding>,
    ) -> Result<(), EvalError> {
        if d == plan.order.len() {
            self.count_matches(1)?;
            out.push(b.clone());
            return Ok(());
        }
        let s = plan.order[d];
        let t = plan.pat.topo;
        // Candidates: the known list of an adjacent, already-mapped node.
        let mut cands: Option<&[NodeId]> = None;
        for e in &plan.pat.edges {
            let (anchor, forward) = if e.to == s && plan.order[..d].contains(&e.from) {
                (e.from, true)
            } else if e.from == s && plan.order[..d].contains(&e.to) {
                (e.to, e.undirected)
            } else {
                continue;
            };
            let Val::Node(a) = b[anchor] else { continue };
            let list = if forward {
                self.view.out(t, a)
            } else {
                self.view.inn(t, a)
            };
            if let Some(l) = list {
                if cands.is_none_or(|c| l.len() < c.len()) {
                    cands = Some(l);
                }
            }
        }
        let cands: Vec<NodeId> = cands.unwrap_or_else(|| self.view.nodes(t)).to_vec();
        let (want_out, want_in) = plan.deg[d];
        for c in cands {
            self.steps += 1;
            if self.steps > self.budget.max_steps {
                return Err(EvalError::StepBudget(self.steps));
            }
            if plan.order[..d].iter().any(|&o| b[o] == Val::Node(c)) {
                continue;
            }
            if let (Some(o), Some(i)) = (self.view.out(t, c), self.view.inn(t, c)) {
                if o.len() < want_out || i.len() < want_in {
                    continue;
                }
            }
            b[s] = Val::Node(c);
            if self.link_edges(plan, d, b) {
                let mut ok = true;
                for f in &plan.ready[d + 1] {
                    if !self.truth(f, b)? {
                        ok = false;
                        break;
                    }
                }
                if ok {
                    self.extend(plan, d + 1, b, out)?;
                }
            }
            // Undo this level's bindings.
            b[s] = Val::Unbound;
            for e in &plan.pat.edges {
                let other = if e.from == s {
                    e.to
                } else if e.to == s {
                    e.from
                } else {
                    continue;
                };
                if plan.order[..d].contains(&other) {
                    b[e.slot] = Val::Unbound;
                }
            }
        }
        Ok(())
    }
}

fn type_ok(v: Value, want: Option<crate::schema::Type>) -> bool {
    use crate::schema::Type;
    matches!(
        (v, want),
        (Value::Num(_), Some(Type::Num))
            | (Value::Bool(_), Some(Type::Bool))
            | (Value::Pos(..), Some(Type::Pos))
            | (Value::Node(_), Some(Type::Node))
    )
}
