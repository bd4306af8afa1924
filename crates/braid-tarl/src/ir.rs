//! The checked, name-resolved form of a rule that the engine evaluates.
//!
//! Variables live in numbered slots of a [`Binding`](crate::engine::Binding):
//! slot 0 is `self`; every other name of the rule has one slot, so the same
//! name in two `match`es is the same variable (which is what `join` joins on).

use crate::ast::{ActionKind, BinOp};
use crate::schema::{AttrId, TopoId};

/// What a slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// A node.
    Node,
    /// An edge of the given topology.
    Edge(TopoId),
}

/// A variable of the rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// Its name in the source.
    pub name: String,
    /// Node or edge.
    pub kind: SlotKind,
}

/// A built-in function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Builtin {
    /// `dist(p, q)`: Euclidean distance of two positions.
    Dist,
    /// `angle(p, q)`: direction from p to q in `[0, 2π)`.
    Angle,
    /// `floor(x)`.
    Floor,
    /// `abs(x)`.
    Abs,
    /// `sqrt(x)`.
    Sqrt,
    /// `min(x, y)` on numbers.
    Min,
    /// `max(x, y)` on numbers.
    Max,
    /// `pi()`.
    Pi,
}

/// A checked value expression.
#[derive(Clone, Debug, PartialEq)]
pub enum CExpr {
    /// A number.
    Num(f64),
    /// A truth value.
    Bool(bool),
    /// The node in a slot.
    Node(usize),
    /// A node attribute of the node in a slot.
    NodeAttr(usize, AttrId),
    /// An edge attribute of the edge in a slot.
    EdgeAttr(usize, TopoId, AttrId),
    /// Numeric negation.
    Neg(Box<CExpr>),
    /// Logical negation.
    Not(Box<CExpr>),
    /// A binary operation (operands type-checked).
    Bin(BinOp, Box<CExpr>, Box<CExpr>),
    /// A built-in call.
    Call(Builtin, Vec<CExpr>),
    /// The size of a match set evaluated under the current binding.
    Count(Box<CSet>),
}

impl CExpr {
    /// Adds every slot the expression reads (including inside `count`) to `out`.
    pub fn slots(&self, out: &mut Vec<usize>) {
        match self {
            CExpr::Num(_) | CExpr::Bool(_) => {}
            CExpr::Node(s) | CExpr::NodeAttr(s, _) | CExpr::EdgeAttr(s, _, _) => out.push(*s),
            CExpr::Neg(e) | CExpr::Not(e) => e.slots(out),
            CExpr::Bin(_, a, b) => {
                a.slots(out);
                b.slots(out);
            }
            CExpr::Call(_, args) => args.iter().for_each(|a| a.slots(out)),
            CExpr::Count(s) => s.slots(out),
        }
    }

    /// Splits a conjunction `a && b && ...` into its conjuncts.
    pub fn conjuncts(self) -> Vec<CExpr> {
        match self {
            CExpr::Bin(BinOp::And, a, b) => {
                let mut v = a.conjuncts();
                v.extend(b.conjuncts());
                v
            }
            other => vec![other],
        }
    }
}

/// One pattern edge between two pattern-node slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CEdge {
    /// Source node slot.
    pub from: usize,
    /// Target node slot.
    pub to: usize,
    /// The edge's slot.
    pub slot: usize,
    /// Needs links in both directions.
    pub undirected: bool,
}

/// A pattern of one topology, with predicates pushed into the search.
#[derive(Clone, Debug, PartialEq)]
pub struct CPattern {
    /// The topology matched.
    pub topo: TopoId,
    /// Distinct node slots of the pattern (matched injectively).
    pub nodes: Vec<usize>,
    /// The edges.
    pub edges: Vec<CEdge>,
    /// Conjuncts of an enclosing `filter`, checked as soon as their slots are bound.
    pub filters: Vec<CExpr>,
}

/// A checked match-set expression.
#[derive(Clone, Debug, PartialEq)]
pub enum CSet {
    /// Embeddings of a pattern.
    Match(CPattern),
    /// Matches satisfying a predicate.
    Filter(Box<CSet>, CExpr),
    /// Natural join; the slots are those bound on both sides (and not outside).
    Join(Box<CSet>, Box<CSet>, Vec<usize>),
    /// Index nested-loop join: the pattern is searched once per match of the
    /// left side, with the left's variables fixed (same result as `Join` when
    /// the pattern shares no edge variable with the left side, but no cross
    /// product is built and filters prune during the search).
    NestedJoin(Box<CSet>, CPattern),
    /// Matches with the least key.
    Min(Box<CSet>, CExpr),
    /// Matches with the greatest key.
    Max(Box<CSet>, CExpr),
}

impl CSet {
    /// Adds every slot the set expression mentions to `out`.
    pub fn slots(&self, out: &mut Vec<usize>) {
        match self {
            CSet::Match(p) => {
                out.extend(&p.nodes);
                out.extend(p.edges.iter().map(|e| e.slot));
                p.filters.iter().for_each(|f| f.slots(out));
            }
            CSet::Filter(s, e) | CSet::Min(s, e) | CSet::Max(s, e) => {
                s.slots(out);
                e.slots(out);
            }
            CSet::Join(a, b, _) => {
                a.slots(out);
                b.slots(out);
            }
            CSet::NestedJoin(a, p) => {
                a.slots(out);
                CSet::Match(p.clone()).slots(out);
            }
        }
    }
}

/// A checked action.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CAction {
    /// Slot of the node the action runs at.
    pub at: usize,
    /// The topology changed.
    pub topo: TopoId,
    /// Add, remove or move.
    pub kind: ActionKind,
    /// Slots of the node arguments.
    pub args: Vec<usize>,
}

/// A rule ready for the engine.
#[derive(Clone, Debug, PartialEq)]
pub struct CompiledRule {
    /// The rule's name (its file stem for shipped rules).
    pub name: String,
    /// Its variables; slot 0 is `self`.
    pub slots: Vec<Slot>,
    /// The condition.
    pub condition: CSet,
    /// The actions run for every match.
    pub actions: Vec<CAction>,
}
