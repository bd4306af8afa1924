//! The sans-IO ECA engine (seed 001 §6.3: "an event processing unit, which
//! works as message broker between the incoming events and the
//! corresponding ECA rules ... only relevant monitoring values are
//! collected").
//!
//! The embedder feeds events and metric samples with their timestamps,
//! calls [`Engine::evaluate`] after an event or when [`Engine::next_deadline`]
//! passes, and applies the [`Outcome`]s. The engine keeps, per metric a rule
//! reads, its latest value, and per distinct (source, window) pair a
//! bucketed sliding window (32 bytes x buckets); nothing else. State is therefore
//! `O(rules' distinct windows x buckets)`, independent of event rates and
//! run time ([`Engine::state_bytes`]).
//!
//! Actions are settings: the engine emits one only when it changes what it
//! last emitted for that target, so a condition that stays true does not
//! re-apply the same transport on every evaluation. A numeric value
//! computed when the rule fires that is not allowed (out of range, not a
//! number) is reported as [`Outcome::Rejected`], once until the target is
//! set successfully again; the engine never panics on input.

use std::time::Duration;

use braid_core::Instant;

use crate::ast::*;
use crate::diag::RuleError;
use crate::vocab::{EventId, MetricId, TargetId, TargetValues, Vocabulary};
use crate::window::Window;

/// Engine tuning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// Buckets per window (1..=1024): the resolution of sliding windows is
    /// `window / buckets`.
    pub buckets: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { buckets: 16 }
    }
}

/// Why an engine could not be built.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The rules do not type-check against the vocabulary.
    #[error("rules do not check: {0}")]
    Rules(#[from] RuleError),
    /// A configuration value outside its allowed range.
    #[error("engine config `{field}` must be {allowed}, got {got}")]
    Config {
        /// The field.
        field: &'static str,
        /// The allowed form.
        allowed: &'static str,
        /// The value given.
        got: String,
    },
}

/// A value to apply to a target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// Index into the target's [`TargetValues::Choice`] list.
    Choice(usize),
    /// A number in the target's base unit, inside its range (rounded when
    /// the target takes whole numbers).
    Number(f64),
}

/// What an evaluation asks the embedder to do.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// Apply `value` to `target`, because rule number `rule` fired.
    Apply {
        /// Rule index (order of [`RuleSet::rules`]).
        rule: usize,
        /// The target.
        target: TargetId,
        /// The value.
        value: Value,
    },
    /// Rule `rule` fired but its computed value is not allowed.
    Rejected {
        /// Rule index.
        rule: usize,
        /// The target.
        target: TargetId,
        /// Why, naming the target and the allowed range.
        reason: String,
    },
}

#[derive(Clone, Debug)]
enum CNum {
    Const(f64),
    Current(usize),
    Agg(AggFn, usize, f64),
    Neg(Box<CNum>),
    Bin(ArithOp, Box<CNum>, Box<CNum>),
}

#[derive(Clone, Debug)]
enum CCond {
    Const(bool),
    Cmp(CmpOp, CNum, CNum),
    Not(Box<CCond>),
    And(Box<CCond>, Box<CCond>),
    Or(Box<CCond>, Box<CCond>),
}

#[derive(Clone, Debug)]
enum CValue {
    Choice(usize),
    Num { expr: CNum, min: f64, max: f64, integer: bool },
}

#[derive(Clone, Debug)]
struct CAction {
    target: TargetId,
    value: CValue,
}

#[derive(Clone, Debug)]
struct CRule {
    cond: CCond,
    actions: Vec<CAction>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Last {
    Nothing,
    Applied(Value),
    Rejected,
}

/// The running rule engine of one rule set.
#[derive(Clone, Debug)]
pub struct Engine {
    blocks: Vec<(Mode, std::ops::Range<usize>)>,
    rules: Vec<CRule>,
    /// Per metric id: slot in `current`, if a rule reads its current value.
    metric_slot: Vec<Option<usize>>,
    current: Vec<f64>,
    /// Per metric id / event id: the windows it feeds.
    metric_windows: Vec<Vec<usize>>,
    event_windows: Vec<Vec<usize>>,
    windows: Vec<Window>,
    /// (source is event, id, width ns) of each window, to share windows.
    window_keys: Vec<(bool, usize, u64)>,
    observed: Vec<Option<(f64, f64)>>,
    matches: Vec<u64>,
    last: Vec<Last>,
    out: Vec<Outcome>,
    evaluations: u64,
    target_names: Vec<String>,
}

struct Builder<'a> {
    vocab: &'a Vocabulary,
    e: Engine,
    buckets: usize,
}

impl Builder<'_> {
    fn window(&mut self, event: bool, id: usize, width: &Literal) -> usize {
        let ns = Duration::try_from_secs_f64(width.base()).unwrap_or(Duration::MAX);
        let ns = u64::try_from(ns.as_nanos()).unwrap_or(u64::MAX).max(1);
        if let Some(i) = self.e.window_keys.iter().position(|k| *k == (event, id, ns)) {
            return i;
        }
        let i = self.e.windows.len();
        self.e.windows.push(Window::new(ns, self.buckets));
        self.e.window_keys.push((event, id, ns));
        if event {
            self.e.event_windows[id].push(i);
        } else {
            self.e.metric_windows[id].push(i);
        }
        i
    }

    fn num(&mut self, n: &Num) -> CNum {
        match n {
            Num::Lit(l, _) => CNum::Const(l.base()),
            Num::Metric(m, _) => {
                let id = self.vocab.metric_id(m).map(|i| i.0).unwrap_or(0);
                let slot = match self.e.metric_slot.get(id).copied().flatten() {
                    Some(s) => s,
                    None => {
                        let s = self.e.current.len();
                        self.e.current.push(f64::NAN);
                        if let Some(x) = self.e.metric_slot.get_mut(id) {
                            *x = Some(s);
                        }
                        s
                    }
                };
                CNum::Current(slot)
            }
            Num::Agg { func, source, window, .. } => {
                let (event, id) = if func.over_events() {
                    (true, self.vocab.event_id(source).map(|i| i.0).unwrap_or(0))
                } else {
                    (false, self.vocab.metric_id(source).map(|i| i.0).unwrap_or(0))
                };
                let w = self.window(event, id, window);
                CNum::Agg(*func, w, window.base())
            }
            Num::Neg(e, _) => CNum::Neg(Box::new(self.num(e))),
            Num::Bin { op, lhs, rhs, .. } => CNum::Bin(*op, Box::new(self.num(lhs)), Box::new(self.num(rhs))),
        }
    }

    fn cond(&mut self, c: &Cond) -> CCond {
        match c {
            Cond::Bool(b, _) => CCond::Const(*b),
            Cond::Cmp { op, lhs, rhs, .. } => CCond::Cmp(*op, self.num(lhs), self.num(rhs)),
            Cond::Not(x, _) => CCond::Not(Box::new(self.cond(x))),
            Cond::And(a, b, _) => CCond::And(Box::new(self.cond(a)), Box::new(self.cond(b))),
            Cond::Or(a, b, _) => CCond::Or(Box::new(self.cond(a)), Box::new(self.cond(b))),
        }
    }

    fn action(&mut self, a: &Action) -> Option<CAction> {
        let target = self.vocab.target_id(a.kind, &a.target)?;
        let decl = self.vocab.target_decl(target)?;
        let value = match (&decl.values, &a.value) {
            (TargetValues::Choice(vs), ActionValue::Symbol(s, _)) => CValue::Choice(vs.iter().position(|v| v == s)?),
            (TargetValues::Number { min, max, integer, .. }, ActionValue::Num(n)) => CValue::Num {
                expr: self.num(n),
                min: *min,
                max: *max,
                integer: *integer,
            },
            _ => return None,
        };
        Some(CAction { target, value })
    }
}

impl Engine {
    /// Builds the engine of `rules` (type-checked here against `vocab`).
    pub fn new(rules: &RuleSet, vocab: &Vocabulary, config: EngineConfig) -> Result<Engine, EngineError> {
        if !(1..=1024).contains(&config.buckets) {
            return Err(EngineError::Config {
                field: "buckets",
                allowed: "1..=1024",
                got: config.buckets.to_string(),
            });
        }
        crate::check::check(rules, vocab)?;
        let nm = vocab.metrics().len();
        let ne = vocab.events().len();
        let mut b = Builder {
            vocab,
            buckets: config.buckets,
            e: Engine {
                blocks: Vec::new(),
                rules: Vec::new(),
                metric_slot: vec![None; nm],
                current: Vec::new(),
                metric_windows: vec![Vec::new(); nm],
                event_windows: vec![Vec::new(); ne],
                windows: Vec::new(),
                window_keys: Vec::new(),
                observed: vec![None; nm],
                matches: Vec::new(),
                last: vec![Last::Nothing; vocab.targets().len()],
                out: Vec::new(),
                evaluations: 0,
                target_names: vocab.targets().iter().map(|t| t.name.clone()).collect(),
            },
        };
        for block in &rules.blocks {
            let start = b.e.rules.len();
            for r in &block.rules {
                let cond = b.cond(&r.condition);
                let actions = r.actions.iter().filter_map(|a| b.action(a)).collect();
                b.e.rules.push(CRule { cond, actions });
            }
            let end = b.e.rules.len();
            b.e.blocks.push((block.mode, start..end));
        }
        b.e.matches = vec![0; b.e.rules.len()];
        Ok(b.e)
    }

    /// True when some rule reads `metric` (samples of other metrics only
    /// update [`Engine::observed`]).
    pub fn wants_metric(&self, metric: MetricId) -> bool {
        self.metric_slot.get(metric.0).is_some_and(|s| s.is_some())
            || self.metric_windows.get(metric.0).is_some_and(|w| !w.is_empty())
    }

    /// True when some rule counts `event`.
    pub fn wants_event(&self, event: EventId) -> bool {
        self.event_windows.get(event.0).is_some_and(|w| !w.is_empty())
    }

    /// Records one occurrence of `event` at `now`. Unknown ids are ignored.
    pub fn event(&mut self, now: Instant, event: EventId) {
        if let Some(ws) = self.event_windows.get(event.0) {
            for &w in ws {
                self.windows[w].add(now.as_nanos(), 1.0);
            }
        }
    }

    /// Records a sample of `metric` (base units) taken at `now`. Unknown ids
    /// and NaN are ignored.
    pub fn sample(&mut self, now: Instant, metric: MetricId, value: f64) {
        if value.is_nan() {
            return;
        }
        let Some(obs) = self.observed.get_mut(metric.0) else { return };
        *obs = Some(match *obs {
            None => (value, value),
            Some((lo, hi)) => (lo.min(value), hi.max(value)),
        });
        if let Some(Some(slot)) = self.metric_slot.get(metric.0) {
            self.current[*slot] = value;
        }
        for &w in &self.metric_windows[metric.0] {
            self.windows[w].add(now.as_nanos(), value);
        }
    }

    /// Evaluates every block at `now` and returns what to apply, in order.
    pub fn evaluate(&mut self, now: Instant) -> &[Outcome] {
        self.out.clear();
        self.evaluations += 1;
        let t = now.as_nanos();
        for bi in 0..self.blocks.len() {
            let (mode, range) = self.blocks[bi].clone();
            for ri in range {
                let fired = eval_cond(&self.rules[ri].cond, &self.current, &mut self.windows, t) == Some(true);
                if !fired {
                    continue;
                }
                self.matches[ri] += 1;
                for ai in 0..self.rules[ri].actions.len() {
                    self.emit(ri, ai, t);
                }
                if mode == Mode::FirstMatch {
                    break;
                }
            }
        }
        &self.out
    }

    fn emit(&mut self, ri: usize, ai: usize, t: u64) {
        let a = &self.rules[ri].actions[ai];
        let target = a.target;
        let result = match &a.value {
            CValue::Choice(i) => Ok(Value::Choice(*i)),
            CValue::Num { expr, min, max, integer } => {
                let (min, max, integer) = (*min, *max, *integer);
                match eval_num(expr, &self.current, &mut self.windows, t) {
                    None => return, // not known yet: like an unknown condition
                    Some(v) => {
                        let v = if integer { v.round() } else { v };
                        if v >= min && v <= max {
                            Ok(Value::Number(v))
                        } else {
                            let name = self.target_names.get(target.0).map(String::as_str).unwrap_or("?");
                            Err(format!("`{name}` takes a value in [{min}, {max}] (base units), the rule computed {v}"))
                        }
                    }
                }
            }
        };
        let last = &mut self.last[target.0];
        match result {
            Ok(v) => {
                if *last != Last::Applied(v) {
                    *last = Last::Applied(v);
                    self.out.push(Outcome::Apply { rule: ri, target, value: v });
                }
            }
            Err(reason) => {
                if *last != Last::Rejected {
                    *last = Last::Rejected;
                    self.out.push(Outcome::Rejected { rule: ri, target, reason });
                }
            }
        }
    }

    /// The next time an aggregate changes without new input (a sample
    /// leaving a window): evaluate then. `None` while every window is empty.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.windows.iter().filter_map(Window::next_change).min().map(Instant::from_nanos)
    }

    /// How often each rule fired (rule index order).
    pub fn match_counts(&self) -> &[u64] {
        &self.matches
    }

    /// The smallest and largest sample seen of a metric (the learner's
    /// model of observed intervals, seed 001 §6.4.2).
    pub fn observed(&self, metric: MetricId) -> Option<(f64, f64)> {
        self.observed.get(metric.0).copied().flatten()
    }

    /// Number of evaluations so far.
    pub fn evaluations(&self) -> u64 {
        self.evaluations
    }

    /// Forgets what was last emitted per target, so the next evaluation
    /// emits every firing action again (after the embedder's actuators were
    /// reset, or an application failed).
    pub fn forget_applied(&mut self) {
        for l in &mut self.last {
            *l = Last::Nothing;
        }
    }

    /// Bytes of monitoring state: windows plus per-metric values. Bounded by
    /// the rule set and the vocabulary, never by how long it runs.
    pub fn state_bytes(&self) -> usize {
        self.windows.iter().map(Window::bytes).sum::<usize>()
            + self.current.len() * 8
            + self.observed.len() * 24
            + self.matches.len() * 8
            + self.last.len() * std::mem::size_of::<Last>()
    }
}

fn and3(a: Option<bool>, b: impl FnOnce() -> Option<bool>) -> Option<bool> {
    match a {
        Some(false) => Some(false),
        _ => match (a, b()) {
            (_, Some(false)) => Some(false),
            (Some(true), Some(true)) => Some(true),
            _ => None,
        },
    }
}

fn or3(a: Option<bool>, b: impl FnOnce() -> Option<bool>) -> Option<bool> {
    match a {
        Some(true) => Some(true),
        _ => match (a, b()) {
            (_, Some(true)) => Some(true),
            (Some(false), Some(false)) => Some(false),
            _ => None,
        },
    }
}

fn eval_cond(c: &CCond, cur: &[f64], ws: &mut [Window], t: u64) -> Option<bool> {
    match c {
        CCond::Const(b) => Some(*b),
        CCond::Cmp(op, l, r) => {
            let a = eval_num(l, cur, ws, t)?;
            let b = eval_num(r, cur, ws, t)?;
            op.apply(a, b)
        }
        CCond::Not(x) => eval_cond(x, cur, ws, t).map(|b| !b),
        CCond::And(a, b) => and3(eval_cond(a, cur, ws, t), || eval_cond(b, cur, ws, t)),
        CCond::Or(a, b) => or3(eval_cond(a, cur, ws, t), || eval_cond(b, cur, ws, t)),
    }
}

fn eval_num(n: &CNum, cur: &[f64], ws: &mut [Window], t: u64) -> Option<f64> {
    let v = match n {
        CNum::Const(v) => *v,
        CNum::Current(s) => cur[*s],
        CNum::Agg(func, w, width) => {
            let s = ws[*w].stats(t);
            match func {
                AggFn::Count => s.count as f64,
                AggFn::Rate => s.count as f64 / width,
                AggFn::Avg if s.count > 0 => s.sum / s.count as f64,
                AggFn::Min if s.count > 0 => s.min,
                AggFn::Max if s.count > 0 => s.max,
                _ => f64::NAN,
            }
        }
        CNum::Neg(x) => -eval_num(x, cur, ws, t)?,
        CNum::Bin(op, a, b) => op.apply(eval_num(a, cur, ws, t)?, eval_num(b, cur, ws, t)?),
    };
    (!v.is_nan()).then_some(v)
}
