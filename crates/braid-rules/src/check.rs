//! The type checker: resolves every name against the [`Vocabulary`] and
//! checks units (seed 001 §6.4.1: "the bespoke ECA rule language with its
//! type system ... allows to efficiently avoid invalid ECA rules").
//!
//! Each problem becomes a positioned [`Diagnostic`] with a hint: unknown
//! metric or event (with the closest name), an event where a metric belongs
//! and back, a unit mismatch in a comparison or a sum, a window that is not
//! a positive duration, an action on a target the vocabulary does not offer
//! ("missing capability"), a value not allowed for its target. All problems
//! are reported, not just the first.

use crate::ast::*;
use crate::diag::{suggest, Diagnostic, RuleError, Stage};
use crate::units::Dimension;
use crate::vocab::{TargetValues, Vocabulary};

/// Checks `rules` against `vocab`.
///
/// ```
/// use braid_rules::{parse, check, Vocabulary, Dimension, ActionKind};
/// let v = Vocabulary::new()
///     .metric("rtt", Dimension::Time, 0.0, 1.0)
///     .choice(ActionKind::Set, "transport", &["tcp", "braid"]);
/// let ok = parse("on first match rtt > 80ms: set transport = braid;").unwrap();
/// assert!(check(&ok, &v).is_ok());
/// let bad = parse("on first match rtt > 80: set transport = braid;").unwrap();
/// let err = check(&bad, &v).unwrap_err();
/// assert!(err.to_string().contains("cannot compare"));
/// ```
pub fn check(rules: &RuleSet, vocab: &Vocabulary) -> Result<(), RuleError> {
    let mut diags = Vec::new();
    if let Err(e) = vocab.validate() {
        diags.push(Diagnostic::new(Span::default(), format!("invalid vocabulary: {e}")));
    }
    for rule in rules.rules() {
        if rule.actions.is_empty() {
            diags.push(Diagnostic::new(rule.span, "a rule needs at least one action").hint("write `CONDITION: set NAME = VALUE;`"));
        }
        check_cond(&rule.condition, vocab, &mut diags);
        for a in &rule.actions {
            check_action(a, vocab, &mut diags);
        }
    }
    if diags.is_empty() {
        Ok(())
    } else {
        Err(RuleError {
            stage: Stage::Type,
            diagnostics: diags,
        })
    }
}

/// Parses and checks in one step.
pub fn compile(src: &str, vocab: &Vocabulary) -> Result<RuleSet, RuleError> {
    let rules = crate::parse(src)?;
    check(&rules, vocab)?;
    Ok(rules)
}

/// The dimension of a numeric expression, or the first problem in it.
pub fn dimension_of(n: &Num, vocab: &Vocabulary) -> Result<Dimension, Diagnostic> {
    let mut diags = Vec::new();
    match num_dim(n, vocab, &mut diags) {
        Some(d) if diags.is_empty() => Ok(d),
        _ => Err(diags
            .into_iter()
            .next()
            .unwrap_or_else(|| Diagnostic::new(n.span(), "expression has no dimension"))),
    }
}

fn check_cond(c: &Cond, vocab: &Vocabulary, diags: &mut Vec<Diagnostic>) {
    match c {
        Cond::Bool(..) => {}
        Cond::Not(inner, _) => check_cond(inner, vocab, diags),
        Cond::And(a, b, _) | Cond::Or(a, b, _) => {
            check_cond(a, vocab, diags);
            check_cond(b, vocab, diags);
        }
        Cond::Cmp { lhs, rhs, span, .. } => {
            let l = num_dim(lhs, vocab, diags);
            let r = num_dim(rhs, vocab, diags);
            if let (Some(l), Some(r)) = (l, r) {
                if l != r {
                    diags.push(
                        Diagnostic::new(*span, format!("cannot compare `{lhs}` (a {l}) with `{rhs}` (a {r})"))
                            .hint(format!("compare a {l} with {}", l.examples())),
                    );
                }
            }
        }
    }
}

fn unknown_source(name: &str, span: Span, vocab: &Vocabulary, want_event: bool) -> Diagnostic {
    let is_metric = vocab.metric_id(name).is_some();
    let is_event = vocab.event_id(name).is_some();
    if want_event && is_metric {
        return Diagnostic::new(span, format!("`{name}` is a metric, not an event"))
            .hint(format!("count and rate take events; aggregate a metric with avg({name}, 5s), min or max"));
    }
    if !want_event && is_event {
        return Diagnostic::new(span, format!("`{name}` is an event, not a metric"))
            .hint(format!("use count({name}, 30s) or rate({name}, 30s)"));
    }
    let (what, names): (&str, Vec<&str>) = if want_event {
        ("event", vocab.events().iter().map(|e| e.name.as_str()).collect())
    } else {
        ("metric", vocab.metrics().iter().map(|m| m.name.as_str()).collect())
    };
    let hint = match suggest(name, names.iter().copied()) {
        Some(s) => format!("did you mean `{s}`?"),
        None if names.is_empty() => format!("no {what} is declared"),
        None => format!("the {what}s are {}", names.join(", ")),
    };
    Diagnostic::new(span, format!("unknown {what} `{name}`")).hint(hint)
}

fn num_dim(n: &Num, vocab: &Vocabulary, diags: &mut Vec<Diagnostic>) -> Option<Dimension> {
    match n {
        Num::Lit(l, _) => Some(l.dimension()),
        Num::Metric(name, span) => match vocab.metric_id(name).and_then(|id| vocab.metric_decl(id)) {
            Some(m) => Some(m.dimension),
            None => {
                diags.push(unknown_source(name, *span, vocab, false));
                None
            }
        },
        Num::Agg { func, source, window, span } => {
            let w = window.base();
            if window.dimension() != Dimension::Time {
                diags.push(
                    Diagnostic::new(*span, format!("the window of {} must be a duration, got `{window}`", func.name()))
                        .hint("write e.g. 30s or 500ms"),
                );
            } else if w.is_nan() || w <= 0.0 {
                diags.push(Diagnostic::new(*span, format!("the window `{window}` must be longer than zero")));
            } else if w > vocab.max_window.as_secs_f64() {
                diags.push(Diagnostic::new(
                    *span,
                    format!("the window `{window}` is longer than the longest allowed, {}s", vocab.max_window.as_secs_f64()),
                ));
            }
            if func.over_events() {
                if vocab.event_id(source).is_none() {
                    diags.push(unknown_source(source, *span, vocab, true));
                    return None;
                }
                Some(if *func == AggFn::Count { Dimension::Count } else { Dimension::Frequency })
            } else {
                match vocab.metric_id(source).and_then(|id| vocab.metric_decl(id)) {
                    Some(m) => Some(m.dimension),
                    None => {
                        diags.push(unknown_source(source, *span, vocab, false));
                        None
                    }
                }
            }
        }
        Num::Neg(inner, _) => num_dim(inner, vocab, diags),
        Num::Bin { op, lhs, rhs, span } => {
            let l = num_dim(lhs, vocab, diags)?;
            let r = num_dim(rhs, vocab, diags)?;
            let d = match op {
                ArithOp::Add | ArithOp::Sub => (l == r).then_some(l),
                ArithOp::Mul => Dimension::times(l, r),
                ArithOp::Div => Dimension::over(l, r),
            };
            if d.is_none() {
                let verb = match op {
                    ArithOp::Add => "add",
                    ArithOp::Sub => "subtract",
                    ArithOp::Mul => "multiply",
                    ArithOp::Div => "divide",
                };
                diags.push(
                    Diagnostic::new(*span, format!("cannot {verb} a {l} and a {r}"))
                        .hint("sums need equal units; products and quotients scale by plain numbers, divide equal units, or combine a frequency and a duration"),
                );
            }
            d
        }
    }
}

fn check_action(a: &Action, vocab: &Vocabulary, diags: &mut Vec<Diagnostic>) {
    let Some(decl) = vocab.target_id(a.kind, &a.target).and_then(|id| vocab.target_decl(id)) else {
        let same_kind: Vec<&str> = vocab
            .targets()
            .iter()
            .filter(|t| t.kind == a.kind)
            .map(|t| t.name.as_str())
            .collect();
        let other = vocab.targets().iter().find(|t| t.name == a.target && t.kind != a.kind);
        let hint = if let Some(o) = other {
            format!("`{}` is a {}, not a {}", a.target, o.kind.describe(), a.kind.describe())
        } else if let Some(s) = suggest(&a.target, same_kind.iter().copied()) {
            format!("did you mean `{s}`?")
        } else if same_kind.is_empty() {
            format!("no {} is offered here", a.kind.describe())
        } else {
            format!("the {}s offered are {}", a.kind.describe(), same_kind.join(", "))
        };
        diags.push(
            Diagnostic::new(a.span, format!("this system offers no {} `{}` (missing capability)", a.kind.describe(), a.target))
                .hint(hint),
        );
        return;
    };
    match (&decl.values, &a.value) {
        (TargetValues::Choice(allowed), ActionValue::Symbol(s, span)) => {
            if !allowed.iter().any(|v| v == s) {
                diags.push(
                    Diagnostic::new(*span, format!("`{s}` is not a value of `{}`", a.target))
                        .hint(format!("`{}` takes one of {}", a.target, allowed.join(", "))),
                );
            }
        }
        (TargetValues::Choice(allowed), ActionValue::Num(n)) => {
            diags.push(
                Diagnostic::new(n.span(), format!("`{}` takes a name, not a number", a.target))
                    .hint(format!("one of {}", allowed.join(", "))),
            );
        }
        (TargetValues::Number { dimension, .. }, ActionValue::Symbol(s, span)) => {
            let hint = if vocab.metric_id(s).is_some() {
                format!("`{s}` is a metric: write `({s})` to set its current value")
            } else {
                format!("give {}", dimension.examples())
            };
            diags.push(Diagnostic::new(*span, format!("`{}` takes a {dimension}, not the name `{s}`", a.target)).hint(hint));
        }
        (TargetValues::Number { dimension, min, max, integer }, ActionValue::Num(n)) => {
            let Some(d) = num_dim(n, vocab, diags) else { return };
            if d != *dimension {
                diags.push(
                    Diagnostic::new(n.span(), format!("`{}` takes a {dimension}, got `{n}` (a {d})", a.target))
                        .hint(format!("give {}", dimension.examples())),
                );
                return;
            }
            if let Some(v) = crate::normal::const_value(n) {
                let whole = if *integer { "a whole number" } else { "a value" };
                if !(v >= *min && v <= *max) || (*integer && v.fract() != 0.0) {
                    diags.push(
                        Diagnostic::new(n.span(), format!("`{}` takes {whole} in [{}, {}], got {}", a.target, show(*min, d), show(*max, d), show(v, d)))
                            .hint("the range is what this system declares for the target"),
                    );
                }
            }
        }
    }
}

/// A base-unit value written in its dimension's display unit.
fn show(v: f64, d: Dimension) -> String {
    Literal::from_base(v, d, 0).to_string()
}
