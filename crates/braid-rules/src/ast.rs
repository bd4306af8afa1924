//! The abstract syntax of Fossa ECA rules (seed 001 §6.3, Listing 6.1).
//!
//! A rule set is a list of blocks; each block says how its rules fire
//! (`on first match`: the first rule whose condition holds; `on every match`:
//! all of them) and lists rules `CONDITION: ACTION, ACTION;`. Conditions are
//! comparisons of numeric expressions over current monitoring values and
//! windowed aggregates (`count(loss, 30s)`, `avg(rtt, 5s)`), combined with
//! `and`, `or`, `not`. The genetic-programming learner (§6.4.1) works on this
//! tree directly.
//!
//! Spans are position metadata only: two nodes compare equal wherever they
//! were written, which is what the round-trip property (parse . print = id)
//! and the learner's structural comparisons need.

use crate::units::{Dimension, Unit};

/// Where a node was written: byte range and 1-based line and column (in
/// characters) of its first character. Generated nodes have the default span.
#[derive(Clone, Copy, Debug, Default)]
pub struct Span {
    /// Byte offset of the first character.
    pub start: usize,
    /// Byte offset just past the last character.
    pub end: usize,
    /// 1-based line of `start` (0 for generated nodes).
    pub line: u32,
    /// 1-based column of `start`, in characters (0 for generated nodes).
    pub column: u32,
}

impl Span {
    /// The span from the start of `self` to the end of `other`.
    pub fn to(self, other: Span) -> Span {
        Span {
            end: other.end.max(self.end),
            ..self
        }
    }
}

impl PartialEq for Span {
    /// Always true: positions do not change what a rule means.
    fn eq(&self, _: &Span) -> bool {
        true
    }
}

/// How a block's rules fire when several conditions hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Only the first rule (in order) whose condition holds fires.
    FirstMatch,
    /// Every rule whose condition holds fires, in order.
    EveryMatch,
}

/// A whole rule file.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct RuleSet {
    /// The blocks, evaluated independently in order.
    pub blocks: Vec<Block>,
}

impl RuleSet {
    /// Every rule, in evaluation order. The index of a rule in this order is
    /// its *rule index* (used by match counts and engine outcomes).
    pub fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.blocks.iter().flat_map(|b| b.rules.iter())
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.blocks.iter().map(|b| b.rules.len()).sum()
    }

    /// True when there is no rule (the static configuration).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of AST nodes (conditions, expressions and actions): the size
    /// the learner prefers small on equal utility.
    pub fn size(&self) -> usize {
        self.rules()
            .map(|r| 1 + r.condition.size() + r.actions.iter().map(Action::size).sum::<usize>())
            .sum()
    }
}

/// `on first match` or `on every match` and its rules.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// How the rules fire.
    pub mode: Mode,
    /// The rules, in order.
    pub rules: Vec<Rule>,
    /// The `on ... match` header.
    pub span: Span,
}

/// `CONDITION: ACTION, ...;`
#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    /// When the rule fires.
    pub condition: Cond,
    /// What it does, in order (at least one).
    pub actions: Vec<Action>,
    /// The whole rule.
    pub span: Span,
}

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
}

impl CmpOp {
    /// Every operator.
    pub const ALL: [CmpOp; 6] = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];

    /// The operator with its operands swapped: `a < b` is `b > a`.
    pub fn mirror(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::Le => CmpOp::Ge,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::Ge => CmpOp::Le,
            other => other,
        }
    }

    /// The operator of the negated comparison: `not (a < b)` is `a >= b`.
    pub fn negate(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Ge,
            CmpOp::Le => CmpOp::Gt,
            CmpOp::Gt => CmpOp::Le,
            CmpOp::Ge => CmpOp::Lt,
            CmpOp::Eq => CmpOp::Ne,
            CmpOp::Ne => CmpOp::Eq,
        }
    }

    /// Compares two values; `None` (unknown) if either is NaN.
    pub fn apply(self, a: f64, b: f64) -> Option<bool> {
        if a.is_nan() || b.is_nan() {
            return None;
        }
        Some(match self {
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
        })
    }

    /// How it is written.
    pub fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
        }
    }
}

/// A condition. Conditions are evaluated in Kleene's three-valued logic: a
/// comparison with a value that is not known yet (a metric never sampled,
/// the average of an empty window) is *unknown*, `not unknown` is unknown,
/// and a rule fires only when its condition is *true*. This keeps
/// `not (x < 5)` and `x >= 5` the same rule, which the normal form relies on.
#[derive(Clone, Debug, PartialEq)]
pub enum Cond {
    /// `true` or `false`.
    Bool(bool, Span),
    /// `LHS op RHS`.
    Cmp {
        /// The operator.
        op: CmpOp,
        /// Left operand.
        lhs: Box<Num>,
        /// Right operand.
        rhs: Box<Num>,
        /// The comparison.
        span: Span,
    },
    /// `not C`.
    Not(Box<Cond>, Span),
    /// `A and B`.
    And(Box<Cond>, Box<Cond>, Span),
    /// `A or B`.
    Or(Box<Cond>, Box<Cond>, Span),
}

impl Cond {
    /// The node's span.
    pub fn span(&self) -> Span {
        match self {
            Cond::Bool(_, s) | Cond::Not(_, s) | Cond::And(_, _, s) | Cond::Or(_, _, s) => *s,
            Cond::Cmp { span, .. } => *span,
        }
    }

    /// Number of nodes.
    pub fn size(&self) -> usize {
        match self {
            Cond::Bool(..) => 1,
            Cond::Cmp { lhs, rhs, .. } => 1 + lhs.size() + rhs.size(),
            Cond::Not(c, _) => 1 + c.size(),
            Cond::And(a, b, _) | Cond::Or(a, b, _) => 1 + a.size() + b.size(),
        }
    }
}

/// An arithmetic operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArithOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
}

impl ArithOp {
    /// How it is written.
    pub fn symbol(self) -> &'static str {
        match self {
            ArithOp::Add => "+",
            ArithOp::Sub => "-",
            ArithOp::Mul => "*",
            ArithOp::Div => "/",
        }
    }

    /// Applies the operator.
    pub fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            ArithOp::Add => a + b,
            ArithOp::Sub => a - b,
            ArithOp::Mul => a * b,
            ArithOp::Div => a / b,
        }
    }
}

/// A windowed aggregate function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AggFn {
    /// Occurrences of an event in the window (a plain number).
    Count,
    /// Occurrences of an event per second over the window (a frequency).
    Rate,
    /// Mean of a metric's samples in the window.
    Avg,
    /// Smallest sample of a metric in the window.
    Min,
    /// Largest sample of a metric in the window.
    Max,
}

impl AggFn {
    /// Every function.
    pub const ALL: [AggFn; 5] = [AggFn::Count, AggFn::Rate, AggFn::Avg, AggFn::Min, AggFn::Max];

    /// How it is written.
    pub fn name(self) -> &'static str {
        match self {
            AggFn::Count => "count",
            AggFn::Rate => "rate",
            AggFn::Avg => "avg",
            AggFn::Min => "min",
            AggFn::Max => "max",
        }
    }

    /// Looks a function name up.
    pub fn parse(name: &str) -> Option<AggFn> {
        AggFn::ALL.into_iter().find(|f| f.name() == name)
    }

    /// True for the functions over events (`count`, `rate`); the others
    /// aggregate a metric's samples.
    pub fn over_events(self) -> bool {
        matches!(self, AggFn::Count | AggFn::Rate)
    }
}

/// A constant as written: the number, whether it was written without a
/// decimal point, and its unit suffix.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Literal {
    /// The number as written (negative only through a leading `-`).
    pub mantissa: f64,
    /// Written without a decimal point.
    pub integer: bool,
    /// The unit suffix.
    pub unit: Unit,
}

impl Literal {
    /// A literal of `base` (a value in the base unit of `dim`) written in
    /// the dimension's display unit, rounded to `digits` significant
    /// digits when `digits > 0`.
    pub fn from_base(base: f64, dim: Dimension, digits: u32) -> Literal {
        let unit = dim.display_unit();
        let mut m = unit.from_base(base);
        if digits > 0 && m != 0.0 && m.is_finite() {
            let mag = m.abs().log10().floor() as i32;
            let scale = 10f64.powi(digits as i32 - 1 - mag);
            m = if scale.is_finite() && scale > 0.0 {
                let r = (m * scale).round() / scale;
                if r.is_finite() { r } else { m }
            } else {
                m
            };
        }
        Literal {
            mantissa: m,
            integer: m.fract() == 0.0 && m.abs() < 9.0e15,
            unit,
        }
    }

    /// A literal of `base` (a value in the base unit of its dimension)
    /// written exactly in `unit`.
    pub fn in_unit(base: f64, unit: Unit) -> Literal {
        let m = unit.from_base(base);
        Literal {
            mantissa: m,
            integer: m.fract() == 0.0 && m.abs() < 9.0e15,
            unit,
        }
    }

    /// The value in the base unit of its dimension.
    pub fn base(&self) -> f64 {
        self.unit.to_base(self.mantissa)
    }

    /// The dimension of its unit.
    pub fn dimension(&self) -> Dimension {
        self.unit.dimension()
    }
}

/// A numeric expression.
#[derive(Clone, Debug, PartialEq)]
pub enum Num {
    /// A constant.
    Lit(Literal, Span),
    /// The current (latest sampled) value of a metric.
    Metric(String, Span),
    /// `FUNC(SOURCE, WINDOW)`: an aggregate of an event or metric over the
    /// last WINDOW.
    Agg {
        /// The function.
        func: AggFn,
        /// An event (for `count`, `rate`) or a metric.
        source: String,
        /// The window length (a duration).
        window: Literal,
        /// The call.
        span: Span,
    },
    /// `-E` (a `-` directly before a number is part of the literal).
    Neg(Box<Num>, Span),
    /// `A op B`.
    Bin {
        /// The operator.
        op: ArithOp,
        /// Left operand.
        lhs: Box<Num>,
        /// Right operand.
        rhs: Box<Num>,
        /// The expression.
        span: Span,
    },
}

impl Num {
    /// The node's span.
    pub fn span(&self) -> Span {
        match self {
            Num::Lit(_, s) | Num::Metric(_, s) | Num::Neg(_, s) => *s,
            Num::Agg { span, .. } | Num::Bin { span, .. } => *span,
        }
    }

    /// Number of nodes.
    pub fn size(&self) -> usize {
        match self {
            Num::Lit(..) | Num::Metric(..) | Num::Agg { .. } => 1,
            Num::Neg(e, _) => 1 + e.size(),
            Num::Bin { lhs, rhs, .. } => 1 + lhs.size() + rhs.size(),
        }
    }

    /// The constant, if the node is one.
    pub fn as_lit(&self) -> Option<&Literal> {
        match self {
            Num::Lit(l, _) => Some(l),
            _ => None,
        }
    }
}

/// The three forms of action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ActionKind {
    /// `set NAME = VALUE` (transport, priority, cc, scheduler, ...).
    Set,
    /// `set register NAME = VALUE` (a scheduler register).
    Register,
    /// `execute parameter transition NAME at self set value (VALUE)`
    /// (Listing 6.1).
    Transition,
}

impl ActionKind {
    /// How the kind is described in messages.
    pub fn describe(self) -> &'static str {
        match self {
            ActionKind::Set => "setting",
            ActionKind::Register => "register",
            ActionKind::Transition => "parameter transition",
        }
    }
}

/// The value an action sets.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionValue {
    /// One of an enumerated target's allowed names (`braid`, `bbr`).
    Symbol(String, Span),
    /// A number, possibly computed from metrics when the action fires.
    Num(Num),
}

/// `set TARGET = VALUE` and its kin.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    /// Which form.
    pub kind: ActionKind,
    /// The setting, register or transition.
    pub target: String,
    /// The value.
    pub value: ActionValue,
    /// The whole action.
    pub span: Span,
}

impl Action {
    /// Number of nodes.
    pub fn size(&self) -> usize {
        1 + match &self.value {
            ActionValue::Symbol(..) => 1,
            ActionValue::Num(n) => n.size(),
        }
    }
}
