//! The TARL abstract syntax tree (Frömmgen 2018, §7.2, Tables 7.1 and 7.2).
//!
//! A rule is a preamble of constant and selector declarations, a condition
//! (a match-set expression built from `match`, `filter`, `join`, `min`, `max`)
//! and actions executed for every match of the condition. Positions are kept
//! in [`Span`]s, which compare equal to each other so that two ASTs compare by
//! structure only.

use crate::error::Span;

/// A name with its position.
#[derive(Clone, Debug, PartialEq)]
pub struct Ident {
    /// The name.
    pub name: String,
    /// Where it appears.
    pub span: Span,
}

impl Ident {
    /// A name without a meaningful position (for building ASTs in code).
    pub fn new(name: impl Into<String>) -> Self {
        Ident {
            name: name.into(),
            span: Span::default(),
        }
    }
}

/// One TARL rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// Constants and selectors, in declaration order.
    pub preamble: Vec<Decl>,
    /// The condition: the set of matches the actions run on.
    pub condition: SetExpr,
    /// Actions executed for every match, in order.
    pub actions: Vec<Action>,
}

/// A preamble declaration.
#[derive(Clone, Debug, PartialEq)]
pub enum Decl {
    /// `const NAME = expr;` — a number or boolean computed once.
    Const(Ident, Expr),
    /// `select NAME = set-expr;` — a named match set, usable wherever a set is.
    Select(Ident, SetExpr),
}

/// An expression denoting a set of matches (Table 7.1).
#[derive(Clone, Debug, PartialEq)]
pub enum SetExpr {
    /// `match(TP, Topology, pattern)`: all embeddings of the pattern.
    Match {
        /// The topology provider's name.
        provider: Ident,
        /// The topology's name.
        topology: Ident,
        /// The pattern's edges.
        pattern: Vec<PatEdge>,
    },
    /// `filter(M, predicate)`.
    Filter(Box<SetExpr>, Expr),
    /// `join(M1, M2)`: natural join on shared variable names.
    Join(Box<SetExpr>, Box<SetExpr>),
    /// `min(M, f)`: the matches of `M` with the smallest `f`.
    Min(Box<SetExpr>, Expr),
    /// `max(M, f)`: the matches of `M` with the largest `f`.
    Max(Box<SetExpr>, Expr),
    /// A selector declared in the preamble.
    Ref(Ident),
}

/// One pattern edge: `a - e -> b` (directed) or `a <- e -> b` (undirected,
/// i.e. links in both directions).
#[derive(Clone, Debug, PartialEq)]
pub struct PatEdge {
    /// Source node variable (or `self`).
    pub from: Ident,
    /// The edge variable.
    pub edge: Ident,
    /// Target node variable (or `self`).
    pub to: Ident,
    /// `<- e ->` rather than `- e ->`.
    pub undirected: bool,
}

/// A unary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `!b`
    Not,
}

/// A binary operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&&`
    And,
    /// `||`
    Or,
}

impl BinOp {
    /// Binding strength: larger binds tighter.
    pub fn precedence(self) -> u8 {
        match self {
            BinOp::Or => 1,
            BinOp::And => 2,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 3,
            BinOp::Add | BinOp::Sub => 4,
            BinOp::Mul | BinOp::Div => 5,
        }
    }

    /// How the operator is written.
    pub fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "&&",
            BinOp::Or => "||",
        }
    }
}

/// A value expression (predicates of `filter`, keys of `min`/`max`, constants).
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A number literal.
    Num(f64, Span),
    /// `true` / `false`.
    Bool(bool, Span),
    /// A node variable, `self`, or a constant.
    Var(Ident),
    /// `var.attribute` on a node or edge variable.
    Attr(Ident, Ident),
    /// A unary operation.
    Unary(UnOp, Box<Expr>, Span),
    /// A binary operation.
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// A built-in function: `dist`, `angle`, `floor`, `abs`, `sqrt`, `min`, `max`.
    Call(Ident, Vec<Expr>),
    /// `count(M)`: the number of matches (variables bound outside are fixed).
    Count(Box<SetExpr>, Span),
}

impl Expr {
    /// Where the expression starts.
    pub fn span(&self) -> Span {
        match self {
            Expr::Num(_, s) | Expr::Bool(_, s) | Expr::Unary(_, _, s) | Expr::Count(_, s) => *s,
            Expr::Var(i) | Expr::Attr(i, _) | Expr::Call(i, _) => i.span,
            Expr::Binary(_, l, _) => l.span(),
        }
    }
}

/// What an action does (Table 7.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActionKind {
    /// `add_neighbor(n)`
    Add,
    /// `remove_neighbor(n)`
    Remove,
    /// `move_neighbor(old, new)`
    Move,
}

impl ActionKind {
    /// The keyword.
    pub fn keyword(self) -> &'static str {
        match self {
            ActionKind::Add => "add_neighbor",
            ActionKind::Remove => "remove_neighbor",
            ActionKind::Move => "move_neighbor",
        }
    }

    /// How many node arguments it takes.
    pub fn arity(self) -> usize {
        match self {
            ActionKind::Add | ActionKind::Remove => 1,
            ActionKind::Move => 2,
        }
    }
}

/// `at (node, TP, Topology) kind(args)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    /// The node whose neighbourhood changes.
    pub at: Ident,
    /// The topology provider.
    pub provider: Ident,
    /// The topology changed.
    pub topology: Ident,
    /// Add, remove or move.
    pub kind: ActionKind,
    /// The node arguments.
    pub args: Vec<Ident>,
}
