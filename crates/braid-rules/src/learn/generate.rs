//! Grammar- and type-correct random rules (seed 001 §6.4.1, "Generate a
//! random rule": children chosen recursively, the probability of a leaf
//! rising with depth to favour small rules), and the model of monitoring
//! values that places constants where comparisons can go either way
//! (§6.4.2, "Increase the matching probability": symbolic execution of an
//! expression over the metrics' observed intervals).

use std::time::Duration;

use braid_core::{Rng, RngExt};

use crate::ast::*;
use crate::units::Dimension;
use crate::vocab::{TargetValues, Vocabulary};

/// What the learner knows of each metric's values: the declared plausible
/// range and, once an evaluation reported it, the observed interval.
#[derive(Clone, Debug)]
pub struct Model {
    declared: Vec<(f64, f64)>,
    observed: Vec<Option<(f64, f64)>>,
    /// Draw constants in observed intervals (the efficiency measure); when
    /// false, the declared ranges are used throughout.
    pub use_observed: bool,
    /// Events per second assumed possible, for `count` and `rate` constants.
    pub event_rate: (f64, f64),
}

impl Model {
    /// The model of a vocabulary before any observation.
    pub fn new(vocab: &Vocabulary, use_observed: bool, event_rate: (f64, f64)) -> Model {
        Model {
            declared: vocab.metrics().iter().map(|m| m.range).collect(),
            observed: vec![None; vocab.metrics().len()],
            use_observed,
            event_rate,
        }
    }

    /// Widens the observed interval of metric `id` to include `[lo, hi]`.
    pub fn observe(&mut self, id: usize, lo: f64, hi: f64) {
        if !(lo.is_finite() && hi.is_finite()) || lo > hi {
            return;
        }
        if let Some(o) = self.observed.get_mut(id) {
            *o = Some(match *o {
                None => (lo, hi),
                Some((a, b)) => (a.min(lo), b.max(hi)),
            });
        }
    }

    /// The interval constants for metric `id` are drawn from.
    pub fn metric_range(&self, id: usize) -> (f64, f64) {
        let declared = self.declared.get(id).copied().unwrap_or((0.0, 1.0));
        match self.observed.get(id).copied().flatten() {
            Some(o) if self.use_observed => o,
            _ => declared,
        }
    }

    /// The observed interval of metric `id`, if any evaluation reported one.
    pub fn observed(&self, id: usize) -> Option<(f64, f64)> {
        self.observed.get(id).copied().flatten()
    }

    /// Interval arithmetic over an expression: every value it can take when
    /// its metrics stay in their intervals (an over-approximation).
    pub fn interval(&self, n: &Num, vocab: &Vocabulary) -> (f64, f64) {
        match n {
            Num::Lit(l, _) => (l.base(), l.base()),
            Num::Metric(m, _) => vocab.metric_id(m).map(|id| self.metric_range(id.0)).unwrap_or((f64::NEG_INFINITY, f64::INFINITY)),
            Num::Agg { func, source, window, .. } => match func {
                AggFn::Count => (0.0, (self.event_rate.1 * window.base()).ceil()),
                AggFn::Rate => (0.0, self.event_rate.1),
                _ => vocab.metric_id(source).map(|id| self.metric_range(id.0)).unwrap_or((f64::NEG_INFINITY, f64::INFINITY)),
            },
            Num::Neg(e, _) => {
                let (a, b) = self.interval(e, vocab);
                (-b, -a)
            }
            Num::Bin { op, lhs, rhs, .. } => {
                let (a, b) = self.interval(lhs, vocab);
                let (c, d) = self.interval(rhs, vocab);
                match op {
                    ArithOp::Add => (a + c, b + d),
                    ArithOp::Sub => (a - d, b - c),
                    ArithOp::Mul => min_max(&[a * c, a * d, b * c, b * d]),
                    ArithOp::Div => {
                        if c <= 0.0 && d >= 0.0 {
                            (f64::NEG_INFINITY, f64::INFINITY)
                        } else {
                            min_max(&[a / c, a / d, b / c, b / d])
                        }
                    }
                }
            }
        }
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().filter(|x| !x.is_nan()).fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().filter(|x| !x.is_nan()).fold(f64::NEG_INFINITY, f64::max);
    if lo > hi {
        (f64::NEG_INFINITY, f64::INFINITY)
    } else {
        (lo, hi)
    }
}

/// Shape of generated rules.
#[derive(Clone, Debug, PartialEq)]
pub struct GenConfig {
    /// Probability that a condition node at depth 0 is a leaf (a comparison).
    pub leaf_base: f64,
    /// Added to the leaf probability per level of depth.
    pub leaf_step: f64,
    /// Most rules in a generated rule set.
    pub max_rules: usize,
    /// Shortest and longest window drawn (log-uniformly).
    pub windows: (Duration, Duration),
    /// Significant digits of generated constants (readable rules).
    pub digits: u32,
    /// Probability that a generated rule is unconditional (`true: ...`).
    pub p_default: f64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            leaf_base: 0.55,
            leaf_step: 0.2,
            max_rules: 4,
            windows: (Duration::from_millis(500), Duration::from_secs(30)),
            digits: 3,
            p_default: 0.15,
        }
    }
}

/// The random rule generator.
pub struct Generator<'a> {
    /// The vocabulary rules are drawn from.
    pub vocab: &'a Vocabulary,
    /// Shape parameters.
    pub config: &'a GenConfig,
    /// Constants from observed intervals, counted.
    pub observed_draws: u64,
}

impl<'a> Generator<'a> {
    /// A generator over `vocab`.
    pub fn new(vocab: &'a Vocabulary, config: &'a GenConfig) -> Self {
        Generator { vocab, config, observed_draws: 0 }
    }

    /// A random rule set of one block.
    pub fn rule_set(&mut self, rng: &mut Rng, model: &Model) -> RuleSet {
        let n = rng.random_range(1..=self.config.max_rules.max(1));
        let rules = (0..n).map(|_| self.rule(rng, model)).collect();
        RuleSet {
            blocks: vec![Block {
                mode: if rng.random_bool(0.7) { Mode::FirstMatch } else { Mode::EveryMatch },
                rules,
                span: Span::default(),
            }],
        }
    }

    /// A random rule with one action; with probability
    /// [`GenConfig::p_default`] its condition is `true` (a default action,
    /// the "else" of a first-match block).
    pub fn rule(&mut self, rng: &mut Rng, model: &Model) -> Rule {
        let condition = if rng.random_bool(self.config.p_default.clamp(0.0, 1.0)) {
            Cond::Bool(true, Span::default())
        } else {
            self.cond(rng, model, 0)
        };
        Rule {
            condition,
            actions: self.action(rng, model).into_iter().collect(),
            span: Span::default(),
        }
    }

    /// A random condition whose root is at `depth`.
    pub fn cond(&mut self, rng: &mut Rng, model: &Model, depth: u32) -> Cond {
        let p_leaf = (self.config.leaf_base + self.config.leaf_step * depth as f64).min(1.0);
        if rng.random_bool(p_leaf.clamp(0.0, 1.0)) {
            return self.comparison(rng, model);
        }
        let a = Box::new(self.cond(rng, model, depth + 1));
        match rng.random_range(0..10) {
            0 => Cond::Not(a, Span::default()),
            1..=5 => Cond::And(a, Box::new(self.cond(rng, model, depth + 1)), Span::default()),
            _ => Cond::Or(a, Box::new(self.cond(rng, model, depth + 1)), Span::default()),
        }
    }

    /// A random comparison `TERM op CONSTANT`, the constant inside the
    /// term's interval so that the comparison can go either way.
    pub fn comparison(&mut self, rng: &mut Rng, model: &Model) -> Cond {
        let Some(term) = self.term(rng) else {
            return Cond::Bool(rng.random_bool(0.5), Span::default());
        };
        let dim = crate::check::dimension_of(&term, self.vocab).unwrap_or(Dimension::Count);
        let c = self.constant_for(rng, model, &term);
        let op = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge][rng.random_range(0..4)];
        Cond::Cmp {
            op,
            lhs: Box::new(term),
            rhs: Box::new(Num::Lit(Literal::from_base(c, dim, self.config.digits), Span::default())),
            span: Span::default(),
        }
    }

    /// A constant (base units) drawn inside the interval `term` can take.
    pub fn constant_for(&mut self, rng: &mut Rng, model: &Model, term: &Num) -> f64 {
        let (lo, hi) = model.interval(term, self.vocab);
        if model.use_observed && uses_observed(term, model, self.vocab) {
            self.observed_draws += 1;
        }
        draw(rng, lo, hi)
    }

    /// A random numeric term: a current value, an aggregate, or (rarely) the
    /// difference or ratio of two aggregates of one metric. `None` if the
    /// vocabulary has neither metrics nor events.
    pub fn term(&mut self, rng: &mut Rng) -> Option<Num> {
        let nm = self.vocab.metrics().len();
        let ne = self.vocab.events().len();
        if nm + ne == 0 {
            return None;
        }
        let pick_event = ne > 0 && (nm == 0 || rng.random_bool(ne as f64 / (nm + ne) as f64 * 0.8));
        if pick_event {
            let e = &self.vocab.events()[rng.random_range(0..ne)].name;
            let func = if rng.random_bool(0.5) { AggFn::Count } else { AggFn::Rate };
            return Some(Num::Agg {
                func,
                source: e.clone(),
                window: self.window(rng),
                span: Span::default(),
            });
        }
        let m = self.vocab.metrics()[rng.random_range(0..nm)].name.clone();
        Some(match rng.random_range(0..10) {
            0..=3 => Num::Metric(m, Span::default()),
            4..=8 => Num::Agg {
                func: [AggFn::Avg, AggFn::Min, AggFn::Max][rng.random_range(0..3)],
                source: m,
                window: self.window(rng),
                span: Span::default(),
            },
            _ => Num::Bin {
                op: ArithOp::Sub,
                lhs: Box::new(Num::Agg {
                    func: AggFn::Max,
                    source: m.clone(),
                    window: self.window(rng),
                    span: Span::default(),
                }),
                rhs: Box::new(Num::Agg {
                    func: AggFn::Min,
                    source: m,
                    window: self.window(rng),
                    span: Span::default(),
                }),
                span: Span::default(),
            },
        })
    }

    /// A window length, log-uniform in the configured range, in whole
    /// milliseconds (two significant digits).
    pub fn window(&mut self, rng: &mut Rng) -> Literal {
        let (a, b) = self.config.windows;
        let lo = a.as_secs_f64().max(1e-3);
        let hi = b.as_secs_f64().max(lo).min(self.vocab.max_window.as_secs_f64().max(lo));
        let v = (lo.ln() + rng.random::<f64>() * (hi.ln() - lo.ln())).exp();
        let l = Literal::from_base(v, Dimension::Time, 2);
        Literal {
            mantissa: l.mantissa.round().max(1.0),
            integer: true,
            unit: l.unit,
        }
    }

    /// A random action on a random target, `None` if there is no target.
    pub fn action(&mut self, rng: &mut Rng, _model: &Model) -> Option<Action> {
        let ts = self.vocab.targets();
        if ts.is_empty() {
            return None;
        }
        let t = &ts[rng.random_range(0..ts.len())];
        let value = match &t.values {
            TargetValues::Choice(vs) => ActionValue::Symbol(vs[rng.random_range(0..vs.len())].clone(), Span::default()),
            TargetValues::Number { dimension, min, max, integer } => {
                let mut v = draw(rng, *min, *max);
                if *integer {
                    v = v.round().clamp(min.ceil(), max.floor());
                }
                let digits = if *integer { 0 } else { self.config.digits };
                let mut l = Literal::from_base(v, *dimension, digits);
                if !(l.base() >= *min && l.base() <= *max) {
                    l = Literal::from_base(v, *dimension, 0);
                }
                ActionValue::Num(Num::Lit(l, Span::default()))
            }
        };
        Some(Action {
            kind: t.kind,
            target: t.name.clone(),
            value,
            span: Span::default(),
        })
    }
}

fn uses_observed(n: &Num, model: &Model, vocab: &Vocabulary) -> bool {
    match n {
        Num::Metric(m, _) | Num::Agg { source: m, .. } => vocab.metric_id(m).is_some_and(|id| model.observed(id.0).is_some()),
        Num::Neg(e, _) => uses_observed(e, model, vocab),
        Num::Bin { lhs, rhs, .. } => uses_observed(lhs, model, vocab) || uses_observed(rhs, model, vocab),
        Num::Lit(..) => false,
    }
}

/// A value in `[lo, hi]`: uniform when the interval is finite, otherwise
/// a spread around the finite end.
pub fn draw(rng: &mut Rng, lo: f64, hi: f64) -> f64 {
    draw_at(rng.random::<f64>(), lo, hi)
}

/// [`draw`] with the uniform variate `u` in [0, 1) given.
///
/// Monitoring values often span orders of magnitude (an RTT of 5 ms and of
/// 300 ms on one run), where a uniform draw almost never lands in the lowest
/// decade. So for a positive interval wider than a factor of ten, half the
/// draws (`u` below 0.5) are log-uniform over its top three decades.
pub fn draw_at(u: f64, lo: f64, hi: f64) -> f64 {
    let wide = lo.is_finite() && hi.is_finite() && hi > 0.0 && hi > 10.0 * lo.max(0.0);
    if wide {
        if u < 0.5 {
            let a = lo.max(hi / 1000.0).max(f64::MIN_POSITIVE);
            return (a.ln() + (u * 2.0) * (hi.ln() - a.ln())).exp().clamp(lo, hi);
        }
        return lo + (u - 0.5) * 2.0 * (hi - lo);
    }
    match (lo.is_finite(), hi.is_finite()) {
        (true, true) if hi > lo => lo + u * (hi - lo),
        (true, true) => lo,
        (true, false) => lo + u * lo.abs().max(1.0) * 10.0,
        (false, true) => hi - u * hi.abs().max(1.0) * 10.0,
        (false, false) => u * 100.0 - 50.0,
    }
}
