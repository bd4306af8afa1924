//! The normal form of rules, for semantic duplicate detection (seed 001
//! §6.4.2: "We normalize rules with constant folding and ordering of
//! commutative operation operands", so `5 < x` and `x > 3 + 2` are one rule).
//!
//! What it does, each step preserving meaning under the three-valued logic
//! of [`crate::ast::Cond`]:
//! - constants are folded and rewritten in the base unit of their dimension
//!   (`80ms`, `0.08s` and `40ms + 40ms` are the same constant), written in
//!   the base unit ([`crate::Dimension::base_unit`]);
//! - `a - b` becomes `a + b * -1`, `-a` becomes `a * -1`; sums and products
//!   are flattened, their operands sorted, their constants folded into one
//!   last operand (dropped when it is 0 in a sum or 1 in a product);
//! - `not` is pushed down to comparisons (De Morgan; `not (a < b)` is
//!   `a >= b`); `and`/`or` are flattened, sorted and deduplicated, and fold
//!   with `true`/`false`;
//! - a comparison keeps its constant on the right: a constant on the left is
//!   swapped over (mirroring the operator); a constant term of a sum on the
//!   left moves to the right (`x + 3 > 8` is `x > 5`), as does a constant
//!   factor (`2 * x > 10` is `x > 5`; the boundary may move by one rounding
//!   step); two non-constant sides are put in a fixed order;
//! - comparisons of two constants fold to `true`/`false`; a rule whose
//!   condition is `false` is dropped, and so is every rule after an
//!   unconditional one in a first-match block; empty blocks disappear; a
//!   one-rule block is written `on first match`.
//!
//! Equal normal forms mean equal behaviour; the converse does not hold (no
//! normal form decides equivalence of arithmetic in general). Constant
//! folding is floating-point arithmetic: `0.1 + 0.2` folds to a value
//! different from `0.3`.

use std::cmp::Ordering;

use crate::ast::*;
use crate::units::Dimension;

/// The value of a numeric expression without metrics or aggregates, in the
/// base unit of its dimension.
pub fn const_value(n: &Num) -> Option<f64> {
    match n {
        Num::Lit(l, _) => Some(l.base()),
        Num::Metric(..) | Num::Agg { .. } => None,
        Num::Neg(e, _) => const_value(e).map(|v| -v),
        Num::Bin { op, lhs, rhs, .. } => Some(op.apply(const_value(lhs)?, const_value(rhs)?)),
    }
}

/// The normal form of a rule set.
///
/// ```
/// use braid_rules::{parse, normalize};
/// let a = parse("on first match 5 < hops: set transport = tcp;").unwrap();
/// let b = parse("on first match hops > 3 + 2: set transport = tcp;").unwrap();
/// assert_eq!(normalize(&a), normalize(&b));
/// ```
pub fn normalize(rules: &RuleSet) -> RuleSet {
    let mut blocks = Vec::new();
    for b in &rules.blocks {
        let mut out = Vec::new();
        for r in &b.rules {
            let condition = normalize_cond(&r.condition);
            if matches!(condition, Cond::Bool(false, _)) {
                continue;
            }
            let unconditional = matches!(condition, Cond::Bool(true, _));
            out.push(Rule {
                condition,
                actions: r.actions.iter().map(normalize_action).collect(),
                span: Span::default(),
            });
            if unconditional && b.mode == Mode::FirstMatch {
                break;
            }
        }
        if out.is_empty() {
            continue;
        }
        let mode = if out.len() == 1 { Mode::FirstMatch } else { b.mode };
        blocks.push(Block {
            mode,
            rules: out,
            span: Span::default(),
        });
    }
    RuleSet { blocks }
}

/// The normal form as text: equal keys, equal behaviour.
pub fn normal_key(rules: &RuleSet) -> String {
    normalize(rules).to_string()
}

fn normalize_action(a: &Action) -> Action {
    Action {
        kind: a.kind,
        target: a.target.clone(),
        value: match &a.value {
            ActionValue::Symbol(s, _) => ActionValue::Symbol(s.clone(), Span::default()),
            ActionValue::Num(n) => ActionValue::Num(normalize_num(n)),
        },
        span: Span::default(),
    }
}

/// The normal form of a condition.
pub fn normalize_cond(c: &Cond) -> Cond {
    norm_cond(c, false)
}

fn norm_cond(c: &Cond, negate: bool) -> Cond {
    match c {
        Cond::Bool(b, _) => Cond::Bool(*b != negate, Span::default()),
        Cond::Not(inner, _) => norm_cond(inner, !negate),
        Cond::Cmp { op, lhs, rhs, .. } => {
            let op = if negate { op.negate() } else { *op };
            norm_cmp(op, normalize_num(lhs), normalize_num(rhs))
        }
        Cond::And(a, b, _) | Cond::Or(a, b, _) => {
            let is_and = matches!(c, Cond::And(..)) != negate;
            let mut parts = Vec::new();
            for x in [norm_cond(a, negate), norm_cond(b, negate)] {
                flatten_junction(x, is_and, &mut parts);
            }
            build_junction(parts, is_and)
        }
    }
}

fn flatten_junction(c: Cond, is_and: bool, out: &mut Vec<Cond>) {
    match c {
        Cond::And(a, b, _) if is_and => {
            flatten_junction(*a, is_and, out);
            flatten_junction(*b, is_and, out);
        }
        Cond::Or(a, b, _) if !is_and => {
            flatten_junction(*a, is_and, out);
            flatten_junction(*b, is_and, out);
        }
        other => out.push(other),
    }
}

fn build_junction(parts: Vec<Cond>, is_and: bool) -> Cond {
    // `true` is neutral for `and` and absorbing for `or`; `false` the reverse.
    let mut keyed: Vec<(String, Cond)> = Vec::new();
    for p in parts {
        if let Cond::Bool(b, _) = p {
            if b == is_and {
                continue;
            }
            return Cond::Bool(b, Span::default());
        }
        keyed.push((p.to_string(), p));
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed.dedup_by(|a, b| a.0 == b.0);
    let mut it = keyed.into_iter().map(|k| k.1);
    let Some(first) = it.next() else {
        return Cond::Bool(is_and, Span::default());
    };
    it.fold(first, |acc, x| {
        if is_and {
            Cond::And(Box::new(acc), Box::new(x), Span::default())
        } else {
            Cond::Or(Box::new(acc), Box::new(x), Span::default())
        }
    })
}

fn lit(v: f64, d: Dimension) -> Num {
    let mut l = Literal::in_unit(v, d.base_unit());
    // from_base may leave -0.0; keep one zero.
    if l.mantissa == 0.0 {
        l.mantissa = 0.0;
    }
    Num::Lit(l, Span::default())
}

/// A folded constant: value in base units and its dimension.
fn as_const(n: &Num) -> Option<(f64, Dimension)> {
    match n {
        Num::Lit(l, _) => Some((l.base(), l.dimension())),
        _ => None,
    }
}

fn norm_cmp(op: CmpOp, l: Num, r: Num) -> Cond {
    let (mut op, mut l, mut r) = (op, l, r);
    match (as_const(&l), as_const(&r)) {
        (Some((a, _)), Some((b, _))) => {
            if let Some(v) = op.apply(a, b) {
                return Cond::Bool(v, Span::default());
            }
        }
        (Some(_), None) => {
            std::mem::swap(&mut l, &mut r);
            op = op.mirror();
        }
        (None, None) => match l.to_string().cmp(&r.to_string()) {
            Ordering::Greater => {
                std::mem::swap(&mut l, &mut r);
                op = op.mirror();
            }
            // `a > a` is `a < a`: pick one spelling.
            Ordering::Equal if matches!(op, CmpOp::Gt | CmpOp::Ge) => op = op.mirror(),
            _ => {}
        },
        (None, Some(_)) => {}
    }
    if let Some((c, cd)) = as_const(&r) {
        // Move a constant term of a sum on the left across.
        if let Num::Bin { op: ArithOp::Add, lhs, rhs, .. } = &l {
            if let Some((k, kd)) = as_const(rhs) {
                let v = c - k;
                if kd == cd && v.is_finite() {
                    let rest = (**lhs).clone();
                    return norm_cmp(op, rest, lit(v, cd));
                }
            }
        }
        // Divide by a constant factor on the left (mirror when negative).
        if let Num::Bin { op: ArithOp::Mul, lhs, rhs, .. } = &l {
            if let Some((k, kd)) = as_const(rhs) {
                let v = c / k;
                if kd == Dimension::Count && k != 0.0 && v.is_finite() {
                    let rest = (**lhs).clone();
                    let op = if k < 0.0 { op.mirror() } else { op };
                    return norm_cmp(op, rest, lit(v, cd));
                }
            }
        }
    }
    Cond::Cmp {
        op,
        lhs: Box::new(l),
        rhs: Box::new(r),
        span: Span::default(),
    }
}

/// The normal form of a numeric expression.
pub fn normalize_num(n: &Num) -> Num {
    match n {
        Num::Lit(l, _) => lit(l.base(), l.dimension()),
        Num::Metric(m, _) => Num::Metric(m.clone(), Span::default()),
        Num::Agg { func, source, window, .. } => Num::Agg {
            func: *func,
            source: source.clone(),
            window: Literal::in_unit(window.base(), window.dimension().base_unit()),
            span: Span::default(),
        },
        Num::Neg(e, _) => negate(normalize_num(e)),
        Num::Bin { op, lhs, rhs, .. } => {
            let a = normalize_num(lhs);
            let b = normalize_num(rhs);
            match op {
                ArithOp::Add => build_sum(vec![a, b]),
                ArithOp::Sub => build_sum(vec![a, negate(b)]),
                ArithOp::Mul => build_product(vec![a, b]),
                ArithOp::Div => match (as_const(&a), as_const(&b)) {
                    (Some((x, xd)), Some((y, yd))) => match Dimension::over(xd, yd) {
                        Some(d) if (x / y).is_finite() => lit(x / y, d),
                        _ => div(a, b),
                    },
                    _ => div(a, b),
                },
            }
        }
    }
}

fn div(a: Num, b: Num) -> Num {
    Num::Bin {
        op: ArithOp::Div,
        lhs: Box::new(a),
        rhs: Box::new(b),
        span: Span::default(),
    }
}

/// `-x` in normal form: a folded constant, or `x * -1`.
fn negate(n: Num) -> Num {
    match as_const(&n) {
        Some((v, d)) => lit(-v, d),
        None => build_product(vec![n, lit(-1.0, Dimension::Count)]),
    }
}

fn flatten_bin(n: Num, want: ArithOp, out: &mut Vec<Num>) {
    match n {
        Num::Bin { op, lhs, rhs, .. } if op == want => {
            flatten_bin(*lhs, want, out);
            flatten_bin(*rhs, want, out);
        }
        other => out.push(other),
    }
}

fn build_sum(parts: Vec<Num>) -> Num {
    let mut terms = Vec::new();
    for p in parts {
        flatten_bin(p, ArithOp::Add, &mut terms);
    }
    build_assoc(terms, ArithOp::Add)
}

fn build_product(parts: Vec<Num>) -> Num {
    let mut factors = Vec::new();
    for p in parts {
        flatten_bin(p, ArithOp::Mul, &mut factors);
    }
    build_assoc(factors, ArithOp::Mul)
}

/// Folds the constants of a flattened sum or product into one, sorts the
/// other operands and rebuilds a left-nested tree with the constant last.
fn build_assoc(items: Vec<Num>, op: ArithOp) -> Num {
    // Constants fold in value order, so operand order cannot change the
    // rounding of the folded value. If they cannot fold (units that do not
    // combine: an ill-typed expression), all stay as operands.
    let (mut consts, others): (Vec<Num>, Vec<Num>) = items.into_iter().partition(|n| as_const(n).is_some());
    consts.sort_by(|a, b| {
        let (x, y) = (as_const(a).map(|c| c.0).unwrap_or(0.0), as_const(b).map(|c| c.0).unwrap_or(0.0));
        x.total_cmp(&y)
    });
    let mut konst: Option<(f64, Dimension)> = None;
    for c in &consts {
        let Some((v, d)) = as_const(c) else { continue };
        konst = match konst {
            None => Some((v, d)),
            Some((k, kd)) => {
                let nd = if op == ArithOp::Add { (kd == d).then_some(d) } else { Dimension::times(kd, d) };
                let nv = op.apply(k, v);
                match nd.filter(|_| nv.is_finite()) {
                    Some(nd) => Some((nv, nd)),
                    None => {
                        konst = None;
                        break;
                    }
                }
            }
        };
    }
    let mut rest: Vec<(String, Num)> = others.into_iter().map(|n| (n.to_string(), n)).collect();
    if konst.is_none() {
        rest.extend(consts.into_iter().map(|n| (n.to_string(), n)));
    }
    rest.sort_by(|a, b| a.0.cmp(&b.0));
    let neutral = if op == ArithOp::Add { 0.0 } else { 1.0 };
    let mut operands: Vec<Num> = rest.into_iter().map(|r| r.1).collect();
    if let Some((k, d)) = konst {
        // A neutral constant goes, unless it is all there is or it carries
        // the unit of a product (`n * 1ms` is a duration).
        let neutral_here = k == neutral && !operands.is_empty() && (op == ArithOp::Add || d == Dimension::Count);
        if !neutral_here {
            operands.push(lit(k, d));
        }
    }
    let mut it = operands.into_iter();
    let Some(first) = it.next() else {
        return lit(neutral, Dimension::Count);
    };
    it.fold(first, |acc, x| Num::Bin {
        op,
        lhs: Box::new(acc),
        rhs: Box::new(x),
        span: Span::default(),
    })
}
