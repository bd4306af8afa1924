//! Mutations and crossovers on rule ASTs (seed 001 §6.4.1, Figure 6.3):
//! change a constant, change an operator, change an event or metric, add,
//! remove or replace a branch; crossover as the union of random subsets of
//! two rule sets, or a swap of branches between rules.
//!
//! Every operation keeps rules type-correct by construction: a metric is
//! replaced by one of the same dimension, a constant keeps its dimension, a
//! condition branch is swapped for a condition, an action for an action of
//! the vocabulary. (`tests/properties.rs` checks it on random sequences.)

use braid_core::{Rng, RngExt};

use super::generate::{draw, draw_at, Generator, Model};
use crate::ast::*;
use crate::check::dimension_of;
use crate::units::Dimension;

/// Which mutation was applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutation {
    /// A comparison constant, window length or action value changed.
    Constant,
    /// A comparison operator, `and`/`or`, or aggregate function changed.
    Operator,
    /// A metric or event replaced by another of the same kind and unit.
    Source,
    /// A condition branch replaced by a random one.
    ReplaceBranch,
    /// A condition extended with `and`/`or` a new comparison.
    AddBranch,
    /// An `and`/`or`/`not` replaced by one of its operands.
    RemoveBranch,
    /// An action replaced by a random one.
    ReplaceAction,
    /// A rule added (random, or a mutated copy of an existing one).
    AddRule,
    /// A rule removed.
    RemoveRule,
    /// Two rules swapped, or the block's mode flipped.
    Reorder,
}

fn for_each_cond(c: &mut Cond, f: &mut dyn FnMut(&mut Cond, u32), depth: u32) {
    f(c, depth);
    match c {
        Cond::Not(x, _) => for_each_cond(x, f, depth + 1),
        Cond::And(a, b, _) | Cond::Or(a, b, _) => {
            for_each_cond(a, f, depth + 1);
            for_each_cond(b, f, depth + 1);
        }
        _ => {}
    }
}

fn for_each_num(n: &mut Num, f: &mut dyn FnMut(&mut Num)) {
    f(n);
    match n {
        Num::Neg(x, _) => for_each_num(x, f),
        Num::Bin { lhs, rhs, .. } => {
            for_each_num(lhs, f);
            for_each_num(rhs, f);
        }
        _ => {}
    }
}

fn count_conds(c: &mut Cond, pred: &dyn Fn(&Cond) -> bool) -> usize {
    let mut n = 0;
    for_each_cond(c, &mut |x, _| n += usize::from(pred(x)), 0);
    n
}

/// Applies `f` to the `k`-th condition node (pre-order) matching `pred`.
fn with_nth_cond(c: &mut Cond, pred: &dyn Fn(&Cond) -> bool, k: usize, f: &mut dyn FnMut(&mut Cond, u32)) {
    let mut i = 0;
    let mut done = false;
    // Pre-order visiting would descend into a replaced node; apply after
    // locating by index, then stop.
    fn go(c: &mut Cond, pred: &dyn Fn(&Cond) -> bool, k: usize, i: &mut usize, done: &mut bool, depth: u32, f: &mut dyn FnMut(&mut Cond, u32)) {
        if *done {
            return;
        }
        if pred(c) {
            if *i == k {
                f(c, depth);
                *done = true;
                return;
            }
            *i += 1;
        }
        match c {
            Cond::Not(x, _) => go(x, pred, k, i, done, depth + 1, f),
            Cond::And(a, b, _) | Cond::Or(a, b, _) => {
                go(a, pred, k, i, done, depth + 1, f);
                go(b, pred, k, i, done, depth + 1, f);
            }
            _ => {}
        }
    }
    go(c, pred, k, &mut i, &mut done, 0, f);
}

fn is_cmp(c: &Cond) -> bool {
    matches!(c, Cond::Cmp { .. })
}
fn is_junction(c: &Cond) -> bool {
    matches!(c, Cond::And(..) | Cond::Or(..) | Cond::Not(..))
}
fn any_cond(_: &Cond) -> bool {
    true
}

/// The rules of a random block (the learner's rule sets have one).
fn rules_mut<'r>(rs: &'r mut RuleSet, rng: &mut Rng) -> Option<&'r mut Vec<Rule>> {
    if rs.blocks.is_empty() {
        return None;
    }
    let b = rng.random_range(0..rs.blocks.len());
    Some(&mut rs.blocks[b].rules)
}

fn pick_rule<'r>(rs: &'r mut RuleSet, rng: &mut Rng) -> Option<&'r mut Rule> {
    let rules = rules_mut(rs, rng)?;
    if rules.is_empty() {
        return None;
    }
    let i = rng.random_range(0..rules.len());
    rules.get_mut(i)
}

/// Applies one random mutation to `rs`; returns which, or `None` when none
/// applied (an empty rule set gets a rule added).
pub fn mutate(rs: &mut RuleSet, g: &mut Generator<'_>, rng: &mut Rng, model: &Model) -> Option<Mutation> {
    if rs.is_empty() {
        if rs.blocks.is_empty() {
            rs.blocks.push(Block {
                mode: Mode::FirstMatch,
                rules: Vec::new(),
                span: Span::default(),
            });
        }
        let r = g.rule(rng, model);
        rs.blocks[0].rules.push(r);
        return Some(Mutation::AddRule);
    }
    for _ in 0..8 {
        // Weights: constants are tuned most; rule-level structure (add a
        // rule, replace an action) often enough that multi-rule sets form.
        let kind = match rng.random_range(0..21) {
            0..=4 => Mutation::Constant,
            5..=6 => Mutation::Operator,
            7..=8 => Mutation::Source,
            9..=10 => Mutation::ReplaceBranch,
            11..=12 => Mutation::AddBranch,
            13 => Mutation::RemoveBranch,
            14..=15 => Mutation::ReplaceAction,
            16..=18 => Mutation::AddRule,
            19 => Mutation::RemoveRule,
            _ => Mutation::Reorder,
        };
        if apply(kind, rs, g, rng, model) {
            return Some(kind);
        }
    }
    None
}

fn apply(kind: Mutation, rs: &mut RuleSet, g: &mut Generator<'_>, rng: &mut Rng, model: &Model) -> bool {
    match kind {
        Mutation::Constant => mutate_constant(rs, g, rng, model),
        Mutation::Operator => {
            let Some(rule) = pick_rule(rs, rng) else { return false };
            let c = &mut rule.condition;
            let n_cmp = count_conds(c, &is_cmp);
            let n_junc = count_conds(c, &|x| matches!(x, Cond::And(..) | Cond::Or(..)));
            let mut changed = false;
            if n_junc > 0 && rng.random_bool(0.3) {
                let k = rng.random_range(0..n_junc);
                with_nth_cond(c, &|x| matches!(x, Cond::And(..) | Cond::Or(..)), k, &mut |x, _| {
                    let old = std::mem::replace(x, Cond::Bool(true, Span::default()));
                    *x = match old {
                        Cond::And(a, b, s) => Cond::Or(a, b, s),
                        Cond::Or(a, b, s) => Cond::And(a, b, s),
                        other => other,
                    };
                    changed = true;
                });
            } else if n_cmp > 0 {
                let k = rng.random_range(0..n_cmp);
                let agg_swap = rng.random_bool(0.3);
                let new_op = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][rng.random_range(0..4)];
                let new_fn = [AggFn::Avg, AggFn::Min, AggFn::Max][rng.random_range(0..3)];
                with_nth_cond(c, &is_cmp, k, &mut |x, _| {
                    if let Cond::Cmp { op, lhs, .. } = x {
                        if agg_swap {
                            for_each_num(lhs, &mut |n| {
                                if let Num::Agg { func, .. } = n {
                                    if !func.over_events() && *func != new_fn {
                                        *func = new_fn;
                                        changed = true;
                                    }
                                }
                            });
                        }
                        if !changed && *op != new_op {
                            *op = new_op;
                            changed = true;
                        }
                    }
                });
            }
            changed
        }
        Mutation::Source => {
            let vocab = g.vocab;
            let Some(rule) = pick_rule(rs, rng) else { return false };
            let mut sources = 0;
            for_each_cond(&mut rule.condition, &mut |x, _| {
                if let Cond::Cmp { lhs, rhs, .. } = x {
                    for side in [lhs, rhs] {
                        for_each_num(side, &mut |n| sources += usize::from(matches!(n, Num::Metric(..) | Num::Agg { .. })));
                    }
                }
            }, 0);
            if sources == 0 {
                return false;
            }
            let k = rng.random_range(0..sources);
            let mut i = 0;
            let mut changed = false;
            let r1: f64 = rng.random();
            for_each_cond(&mut rule.condition, &mut |x, _| {
                if let Cond::Cmp { lhs, rhs, .. } = x {
                    for side in [lhs, rhs] {
                        for_each_num(side, &mut |n| {
                            let (name, event) = match n {
                                Num::Metric(m, _) => (m, false),
                                Num::Agg { func, source, .. } => (source, func.over_events()),
                                _ => return,
                            };
                            if i == k {
                                let candidates: Vec<&str> = if event {
                                    vocab.events().iter().map(|e| e.name.as_str()).filter(|e| *e != name.as_str()).collect()
                                } else {
                                    let dim = vocab.metric_id(name).and_then(|id| vocab.metric_decl(id)).map(|m| m.dimension);
                                    vocab
                                        .metrics()
                                        .iter()
                                        .filter(|m| Some(m.dimension) == dim && m.name != *name)
                                        .map(|m| m.name.as_str())
                                        .collect()
                                };
                                if !candidates.is_empty() {
                                    let j = ((r1 * candidates.len() as f64) as usize).min(candidates.len() - 1);
                                    *name = candidates[j].to_string();
                                    changed = true;
                                }
                            }
                            i += 1;
                        });
                    }
                }
            }, 0);
            changed
        }
        Mutation::ReplaceBranch => {
            let Some(rule) = pick_rule(rs, rng) else { return false };
            let n = count_conds(&mut rule.condition, &any_cond);
            let k = rng.random_range(0..n.max(1));
            let mut depth = 0;
            with_nth_cond(&mut rule.condition, &any_cond, k, &mut |_, d| depth = d);
            let fresh = g.cond(rng, model, depth);
            let mut fresh = Some(fresh);
            with_nth_cond(&mut rule.condition, &any_cond, k, &mut |x, _| {
                if let Some(f) = fresh.take() {
                    *x = f;
                }
            });
            true
        }
        Mutation::AddBranch => {
            let Some(rule) = pick_rule(rs, rng) else { return false };
            let new = g.comparison(rng, model);
            let old = std::mem::replace(&mut rule.condition, Cond::Bool(true, Span::default()));
            rule.condition = if rng.random_bool(0.6) {
                Cond::And(Box::new(old), Box::new(new), Span::default())
            } else {
                Cond::Or(Box::new(old), Box::new(new), Span::default())
            };
            true
        }
        Mutation::RemoveBranch => {
            let Some(rule) = pick_rule(rs, rng) else { return false };
            let n = count_conds(&mut rule.condition, &is_junction);
            if n == 0 {
                return false;
            }
            let k = rng.random_range(0..n);
            let left = rng.random_bool(0.5);
            with_nth_cond(&mut rule.condition, &is_junction, k, &mut |x, _| {
                let old = std::mem::replace(x, Cond::Bool(true, Span::default()));
                *x = match old {
                    Cond::Not(a, _) => *a,
                    Cond::And(a, b, _) | Cond::Or(a, b, _) => {
                        if left {
                            *a
                        } else {
                            *b
                        }
                    }
                    other => other,
                };
            });
            true
        }
        Mutation::ReplaceAction => {
            let Some(action) = g.action(rng, model) else { return false };
            let Some(rule) = pick_rule(rs, rng) else { return false };
            if rule.actions.is_empty() {
                rule.actions.push(action);
            } else {
                let i = rng.random_range(0..rule.actions.len());
                rule.actions[i] = action;
            }
            true
        }
        Mutation::AddRule => {
            let max = g.config.max_rules.max(1) * 2;
            let copy = rng.random_bool(0.4);
            let Some(rules) = rules_mut(rs, rng) else { return false };
            if rules.len() >= max {
                return false;
            }
            // "Rules and mutations of these rules are used at the same
            // time" (§6.4.1): sometimes the new rule is a variant of one.
            let new = if copy && !rules.is_empty() {
                let i = rng.random_range(0..rules.len());
                let mut one = RuleSet {
                    blocks: vec![Block {
                        mode: Mode::FirstMatch,
                        rules: vec![rules[i].clone()],
                        span: Span::default(),
                    }],
                };
                // A variant of the rule: another action for the same
                // situation, a narrower situation, or shifted constants.
                let variant = [Mutation::Constant, Mutation::AddBranch, Mutation::ReplaceAction, Mutation::Operator, Mutation::Source]
                    [rng.random_range(0..5)];
                apply(variant, &mut one, g, rng, model);
                one.blocks.pop().and_then(|mut b| b.rules.pop())
            } else {
                None
            };
            let new = match new {
                Some(r) => r,
                None => g.rule(rng, model),
            };
            let at = rng.random_range(0..=rules.len());
            rules.insert(at, new);
            true
        }
        Mutation::RemoveRule => {
            if rs.len() <= 1 {
                return false;
            }
            let Some(rules) = rules_mut(rs, rng) else { return false };
            if rules.is_empty() {
                return false;
            }
            let i = rng.random_range(0..rules.len());
            rules.remove(i);
            rs.blocks.retain(|b| !b.rules.is_empty());
            true
        }
        Mutation::Reorder => {
            let flip = rng.random_bool(0.5);
            let b = rng.random_range(0..rs.blocks.len().max(1));
            let Some(block) = rs.blocks.get_mut(b) else { return false };
            if flip || block.rules.len() < 2 {
                block.mode = match block.mode {
                    Mode::FirstMatch => Mode::EveryMatch,
                    Mode::EveryMatch => Mode::FirstMatch,
                };
            } else {
                let i = rng.random_range(0..block.rules.len());
                let j = rng.random_range(0..block.rules.len());
                block.rules.swap(i, j);
            }
            true
        }
    }
}

/// Changes one constant: a comparison's constant (redrawn inside the other
/// side's interval, or scaled by up to x e^±0.5), a window length, or a
/// numeric action value.
fn mutate_constant(rs: &mut RuleSet, g: &mut Generator<'_>, rng: &mut Rng, model: &Model) -> bool {
    let vocab = g.vocab;
    let digits = g.config.digits;
    let Some(rule) = pick_rule(rs, rng) else { return false };
    let n_cmp = count_conds(&mut rule.condition, &is_cmp);
    let choice: f64 = rng.random();
    if n_cmp > 0 && choice < 0.75 {
        let k = rng.random_range(0..n_cmp);
        let redraw = rng.random_bool(0.5);
        let u: f64 = rng.random();
        let window_instead = rng.random_bool(0.2);
        let new_window = g.window(rng);
        let u2: f64 = rng.random();
        let mut changed = false;
        with_nth_cond(&mut rule.condition, &is_cmp, k, &mut |x, _| {
            let Cond::Cmp { lhs, rhs, .. } = x else { return };
            if window_instead {
                for side in [&mut *lhs, &mut *rhs] {
                    for_each_num(side, &mut |n| {
                        if let Num::Agg { window, .. } = n {
                            if !changed {
                                *window = new_window;
                                changed = true;
                            }
                        }
                    });
                }
                if changed {
                    return;
                }
            }
            // The constant side and the term it is compared with.
            let (konst, term) = match (lhs.as_lit().is_some(), rhs.as_lit().is_some()) {
                (_, true) => (rhs, lhs),
                (true, false) => (lhs, rhs),
                _ => return,
            };
            let Some(l) = konst.as_lit().copied() else { return };
            let dim = l.dimension();
            let v = if redraw {
                let (lo, hi) = model.interval(term, vocab);
                draw_at(u2, lo, hi)
            } else {
                l.base() * ((u - 0.5) * 1.0).exp()
            };
            **konst = Num::Lit(Literal::from_base(v, dim, digits), Span::default());
            changed = true;
        });
        return changed;
    }
    // A numeric action value: redraw in the target's range.
    let numeric: Vec<usize> = rule
        .actions
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a.value, ActionValue::Num(_)))
        .map(|(i, _)| i)
        .collect();
    if numeric.is_empty() {
        return false;
    }
    let i = numeric[rng.random_range(0..numeric.len())];
    let a = &rule.actions[i];
    let Some(tid) = vocab.target_id(a.kind, &a.target) else { return false };
    let Some(crate::vocab::TargetDecl {
        values: crate::vocab::TargetValues::Number { dimension, min, max, integer },
        ..
    }) = vocab.target_decl(tid)
    else {
        return false;
    };
    let mut v = draw(rng, *min, *max);
    if *integer {
        v = v.round().clamp(min.ceil(), max.floor());
    }
    let mut l = Literal::from_base(v, *dimension, if *integer { 0 } else { digits });
    if !(l.base() >= *min && l.base() <= *max) {
        l = Literal::from_base(v, *dimension, 0);
    }
    rule.actions[i].value = ActionValue::Num(Num::Lit(l, Span::default()));
    true
}

/// Crossover (i): the union of random subsets of both parents' rules (at
/// least one rule), in one block with the first parent's mode, at most
/// `max_rules` rules.
pub fn crossover_union(a: &RuleSet, b: &RuleSet, rng: &mut Rng, max_rules: usize) -> RuleSet {
    let mut rules: Vec<Rule> = Vec::new();
    for r in a.rules().chain(b.rules()) {
        if rng.random_bool(0.5) {
            rules.push(r.clone());
        }
    }
    if rules.is_empty() {
        let all: Vec<&Rule> = a.rules().chain(b.rules()).collect();
        if !all.is_empty() {
            rules.push(all[rng.random_range(0..all.len())].clone());
        }
    }
    while rules.len() > max_rules.max(1) {
        let i = rng.random_range(0..rules.len());
        rules.remove(i);
    }
    let mode = a.blocks.first().or(b.blocks.first()).map(|b| b.mode).unwrap_or(Mode::FirstMatch);
    RuleSet {
        blocks: if rules.is_empty() {
            Vec::new()
        } else {
            vec![Block {
                mode,
                rules,
                span: Span::default(),
            }]
        },
    }
}

/// Crossover (ii): a copy of `a` where one rule's condition branch (or
/// action) is replaced by one from a rule of `b`.
pub fn crossover_branch(a: &RuleSet, b: &RuleSet, rng: &mut Rng) -> RuleSet {
    let mut child = a.clone();
    let donors: Vec<&Rule> = b.rules().collect();
    if donors.is_empty() || child.is_empty() {
        return child;
    }
    let donor = donors[rng.random_range(0..donors.len())];
    let swap_action = rng.random_bool(0.25);
    let Some(rule) = pick_rule(&mut child, rng) else { return child };
    if swap_action {
        if let (Some(src), false) = (donor.actions.first(), rule.actions.is_empty()) {
            let i = rng.random_range(0..rule.actions.len());
            rule.actions[i] = src.clone();
        }
        return child;
    }
    let mut donor_cond = donor.condition.clone();
    let nd = count_conds(&mut donor_cond, &any_cond);
    let kd = rng.random_range(0..nd.max(1));
    let mut branch = None;
    with_nth_cond(&mut donor_cond, &any_cond, kd, &mut |x, _| branch = Some(x.clone()));
    let nr = count_conds(&mut rule.condition, &any_cond);
    let kr = rng.random_range(0..nr.max(1));
    with_nth_cond(&mut rule.condition, &any_cond, kr, &mut |x, _| {
        if let Some(b) = branch.take() {
            *x = b;
        }
    });
    child
}

/// True when every numeric constant of a comparison has the dimension of
/// the other side (what the generators guarantee); for debugging and tests.
pub fn well_dimensioned(c: &Cond, vocab: &crate::vocab::Vocabulary) -> bool {
    match c {
        Cond::Bool(..) => true,
        Cond::Not(x, _) => well_dimensioned(x, vocab),
        Cond::And(a, b, _) | Cond::Or(a, b, _) => well_dimensioned(a, vocab) && well_dimensioned(b, vocab),
        Cond::Cmp { lhs, rhs, .. } => {
            let l = dimension_of(lhs, vocab).unwrap_or(Dimension::Count);
            let r = dimension_of(rhs, vocab).unwrap_or(Dimension::Count);
            l == r
        }
    }
}
