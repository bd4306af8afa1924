//! The Fossa learner: genetic programming over ECA rule sets (seed 001
//! §6.4), sans-IO. It never runs a system itself: each generation's
//! executions are handed to a caller-supplied [`Evaluator`] as one batch of
//! [`Job`]s (one rule set in one environment each), so the lab can run a
//! generation as a study.
//!
//! Objective (eq. 6.1): `R_max = argmax_R A_w u(E(R, w))`, `A` the
//! [`Aggregation`] over the **training** environments. Every report also
//! gives the aggregate over the **held-out** environments, which the
//! search never sees.
//!
//! The loop: a pool of `population` rule sets (the caller's seeds, then
//! random ones); each generation breeds `offspring` children by crossover
//! (union of random subsets, branch swap), mutation (constant, operator,
//! metric/event, branch add/remove/replace, action, rule add/remove) or
//! fresh random generation; children are evaluated; the pool keeps the
//! best by fitness with the smaller set winning ties, or, with several
//! objectives, by NSGA-II, keeping the Pareto front.
//!
//! Efficiency measures of §6.4.2, each switchable in [`Measures`] and each
//! counted in [`Savings`]:
//! - constants drawn inside each metric's *observed* interval (reported by
//!   the evaluator), so comparisons can go either way;
//! - rules that never matched in any training environment are dropped
//!   (same behaviour, smaller set; the evaluator reports match counts);
//! - constant folding before evaluation (rules that can never fire go);
//! - semantic duplicates (equal [normal form](crate::normal)) are not
//!   evaluated again;
//! - a rule set is aborted once its aggregate utility, with every
//!   remaining environment at the utility's upper bound, can no longer
//!   reach the pool's current minimum (environments are evaluated one
//!   round at a time, hardest first).
//!
//! An *evaluation* is one rule set run in one environment; the budget and
//! all counts are in evaluations.

pub mod generate;
pub mod select;
pub mod variation;

use std::collections::{HashMap, HashSet};

use braid_core::{Rng, RngExt, SeedableRng};

use crate::ast::*;
use crate::check::{check, dimension_of};
use crate::diag::RuleError;
use crate::normal::{const_value, normal_key, normalize_cond};
use crate::vocab::{MetricId, VocabError, Vocabulary};
pub use generate::{GenConfig, Generator, Model};

/// An error the evaluator reports (it runs real systems: anything can fail).
pub type EvaluatorError = Box<dyn std::error::Error + Send + Sync>;

/// One execution to run: a rule set in one environment (an index the
/// caller defined: a link, a workload, a seed).
#[derive(Clone, Copy, Debug)]
pub struct Job<'a> {
    /// The rules to run.
    pub rules: &'a RuleSet,
    /// The environment, as listed in [`LearnConfig::training`] or
    /// [`LearnConfig::held_out`].
    pub environment: usize,
}

/// What one execution measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnvResult {
    /// The utility of each objective (higher is better), as many as
    /// [`LearnConfig::objectives`].
    pub objectives: Vec<f64>,
    /// How often each rule fired ([`crate::Engine::match_counts`]), in rule
    /// index order; may be empty if not known.
    pub match_counts: Vec<u64>,
    /// Observed interval of metrics during the run (base units).
    pub observed: Vec<(MetricId, f64, f64)>,
}

/// Runs executions. Called with each generation's jobs in one batch
/// (several batches per generation when aborting hopeless rule sets);
/// must return one result per job, in order.
pub trait Evaluator {
    /// Runs `jobs`.
    fn evaluate(&mut self, jobs: &[Job<'_>]) -> Result<Vec<EnvResult>, EvaluatorError>;
}

/// How utilities of several environments combine (`A` in eq. 6.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Aggregation {
    /// The mean.
    Mean,
    /// The worst environment.
    Min,
    /// The `q`-quantile (nearest rank, `q` in [0, 1]; 0 is the minimum).
    Quantile(f64),
}

impl Aggregation {
    /// Aggregates `xs` (NaN for no value).
    pub fn apply(&self, xs: &[f64]) -> f64 {
        if xs.is_empty() {
            return f64::NAN;
        }
        match self {
            Aggregation::Mean => xs.iter().sum::<f64>() / xs.len() as f64,
            Aggregation::Min => xs.iter().copied().fold(f64::INFINITY, f64::min),
            Aggregation::Quantile(q) => {
                let mut v = xs.to_vec();
                v.sort_by(f64::total_cmp);
                let i = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).saturating_sub(1).min(v.len() - 1);
                v[i]
            }
        }
    }

    /// The best aggregate still possible when `remaining` environments are
    /// unknown and no utility exceeds `hi` (every aggregation here is
    /// monotone, so filling in `hi` gives the bound).
    pub fn upper_bound(&self, known: &[f64], remaining: usize, hi: f64) -> f64 {
        let mut v = known.to_vec();
        v.extend(std::iter::repeat_n(hi, remaining));
        self.apply(&v)
    }
}

/// The efficiency measures of seed 001 §6.4.2, each on or off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measures {
    /// Draw constants inside observed metric intervals.
    pub observed_intervals: bool,
    /// Drop rules that never matched.
    pub drop_unmatched: bool,
    /// Fold constants before evaluating.
    pub fold_constants: bool,
    /// Skip rule sets whose normal form was evaluated already.
    pub skip_duplicates: bool,
    /// Stop evaluating a rule set that can no longer enter the pool.
    pub abort_hopeless: bool,
}

impl Measures {
    /// Every measure on.
    pub const ALL: Measures = Measures {
        observed_intervals: true,
        drop_unmatched: true,
        fold_constants: true,
        skip_duplicates: true,
        abort_hopeless: true,
    };
    /// Plain genetic programming.
    pub const NONE: Measures = Measures {
        observed_intervals: false,
        drop_unmatched: false,
        fold_constants: false,
        skip_duplicates: false,
        abort_hopeless: false,
    };
}

/// What the learner saved, per measure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Savings {
    /// Candidates not evaluated because their normal form was.
    pub duplicates_skipped: u64,
    /// Of those, the ones whose text differed from every earlier candidate
    /// (found only through the normal form).
    pub semantic_duplicates: u64,
    /// Evaluations the duplicate skipping saved (skips x training environments).
    pub evaluations_saved_by_duplicates: u64,
    /// Evaluations not run because a rule set was aborted.
    pub evaluations_saved_by_abort: u64,
    /// Rule sets aborted.
    pub aborted: u64,
    /// Rules dropped because they never matched.
    pub rules_dropped_unmatched: u64,
    /// Rules removed by constant folding (conditions that fold to false or
    /// rules unreachable after an unconditional one).
    pub rules_folded_away: u64,
    /// Constants drawn from observed intervals.
    pub constants_from_observed: u64,
    /// Children that failed the type checker and were discarded (zero
    /// unless an operator is broken).
    pub invalid_children: u64,
}

/// Learner settings (the study file's `[learn]` table).
#[derive(Clone, Debug, PartialEq)]
pub struct LearnConfig {
    /// Seed of every random choice: equal seeds and evaluator results give
    /// equal runs.
    pub seed: u64,
    /// Rule sets kept between generations.
    pub population: usize,
    /// Children bred per generation.
    pub offspring: usize,
    /// Most training evaluations (rule set x environment) to spend.
    pub budget: u64,
    /// Number of objectives the evaluator reports (1: fitness selection;
    /// more: NSGA-II).
    pub objectives: usize,
    /// How environments combine.
    pub aggregation: Aggregation,
    /// Environments the search sees.
    pub training: Vec<usize>,
    /// Environments only the final report sees.
    pub held_out: Vec<usize>,
    /// Lowest and highest utility an environment can give (objective 0);
    /// the upper bound lets `abort_hopeless` work for mean and quantile.
    pub utility_bounds: Option<(f64, f64)>,
    /// Efficiency measures.
    pub measures: Measures,
    /// Probability a child is a crossover of two parents.
    pub p_crossover: f64,
    /// Probability a child is a mutated parent (the rest are random).
    pub p_mutation: f64,
    /// Shape of random rules.
    pub generate: GenConfig,
    /// Events per second assumed possible (for `count`/`rate` constants).
    pub event_rate: (f64, f64),
    /// Rule sets to start from (developer-provided rules, §6.4.1).
    pub seeds: Vec<RuleSet>,
}

impl Default for LearnConfig {
    fn default() -> Self {
        LearnConfig {
            seed: 1,
            population: 24,
            offspring: 24,
            budget: 2_000,
            objectives: 1,
            aggregation: Aggregation::Mean,
            training: vec![0],
            held_out: Vec::new(),
            utility_bounds: None,
            measures: Measures::ALL,
            p_crossover: 0.3,
            p_mutation: 0.6,
            generate: GenConfig::default(),
            event_rate: (0.0, 50.0),
            seeds: Vec::new(),
        }
    }
}

/// How children are made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Genetic programming.
    Genetic,
    /// Every child a fresh random rule set (the random-search baseline).
    Random,
}

/// A rule set with its aggregate utilities.
#[derive(Clone, Debug, PartialEq)]
pub struct Scored {
    /// The rules.
    pub rules: RuleSet,
    /// Aggregate per objective over the training environments.
    pub training: Vec<f64>,
    /// Aggregate per objective over the held-out environments (empty when
    /// there are none).
    pub held_out: Vec<f64>,
    /// AST size.
    pub size: usize,
}

/// The best utility after some number of evaluations.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CurvePoint {
    /// Training evaluations spent so far.
    pub evaluations: u64,
    /// Best training aggregate of objective 0 in the pool.
    pub best: f64,
}

/// What a learning run found.
#[derive(Clone, Debug, PartialEq)]
pub struct LearnReport {
    /// The best rule set (objective 0 for several objectives).
    pub best: Scored,
    /// The Pareto front of the final pool (just `best` for one objective).
    pub front: Vec<Scored>,
    /// Best utility against evaluations, one point per generation.
    pub curve: Vec<CurvePoint>,
    /// Training evaluations spent.
    pub evaluations: u64,
    /// Evaluations spent on the held-out report.
    pub held_out_evaluations: u64,
    /// Generations run.
    pub generations: usize,
    /// What the efficiency measures saved.
    pub savings: Savings,
}

impl LearnReport {
    /// Evaluations after which the curve first reached `utility`.
    pub fn evaluations_to_reach(&self, utility: f64) -> Option<u64> {
        self.curve.iter().find(|p| p.best >= utility).map(|p| p.evaluations)
    }
}

/// Why learning failed.
#[derive(Debug, thiserror::Error)]
pub enum LearnError {
    /// A setting outside its allowed range.
    #[error("learn config `{field}` must be {allowed}, got {got}")]
    Config {
        /// The field.
        field: &'static str,
        /// The allowed form.
        allowed: &'static str,
        /// The value given.
        got: String,
    },
    /// The vocabulary is unusable.
    #[error(transparent)]
    Vocab(#[from] VocabError),
    /// A seed rule set does not check.
    #[error("seed rule set {index} does not check: {error}")]
    Seed {
        /// Its position in `seeds`.
        index: usize,
        /// The problems.
        error: RuleError,
    },
    /// The evaluator failed.
    #[error("evaluator failed: {0}")]
    Evaluator(EvaluatorError),
    /// The evaluator answered with the wrong shape.
    #[error("evaluator returned {got} for {expected}")]
    Shape {
        /// What was expected.
        expected: String,
        /// What came back.
        got: String,
    },
}

#[derive(Clone, Debug)]
struct Cand {
    rules: RuleSet,
    key: String,
    /// Per training environment (config order): objectives.
    per_env: Vec<Vec<f64>>,
    fitness: Vec<f64>,
    size: usize,
}

fn bad(field: &'static str, allowed: &'static str, got: impl ToString) -> LearnError {
    LearnError::Config {
        field,
        allowed,
        got: got.to_string(),
    }
}

impl LearnConfig {
    /// Checks every field.
    pub fn validate(&self) -> Result<(), LearnError> {
        if self.population < 2 {
            return Err(bad("population", "at least 2", self.population));
        }
        if self.offspring < 1 {
            return Err(bad("offspring", "at least 1", self.offspring));
        }
        if self.objectives < 1 {
            return Err(bad("objectives", "at least 1", self.objectives));
        }
        if self.training.is_empty() {
            return Err(bad("training", "at least one environment", "none"));
        }
        if self.budget < (self.training.len() * self.population) as u64 {
            return Err(bad("budget", "at least population x training environments", self.budget));
        }
        if let Aggregation::Quantile(q) = self.aggregation {
            if !(0.0..=1.0).contains(&q) {
                return Err(bad("aggregation", "a quantile in [0, 1]", q));
            }
        }
        let p_ok = |p: f64| (0.0..=1.0).contains(&p);
        if !p_ok(self.p_crossover) || !p_ok(self.p_mutation) || self.p_crossover + self.p_mutation > 1.0 {
            return Err(bad("p_crossover, p_mutation", "probabilities summing to at most 1", format!("{} + {}", self.p_crossover, self.p_mutation)));
        }
        if let Some((lo, hi)) = self.utility_bounds {
            if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
                return Err(bad("utility_bounds", "finite with low <= high", format!("({lo}, {hi})")));
            }
        }
        if self.generate.max_rules < 1 {
            return Err(bad("generate.max_rules", "at least 1", self.generate.max_rules));
        }
        Ok(())
    }
}

/// Runs a learning campaign. See the module documentation.
pub fn learn(vocab: &Vocabulary, config: &LearnConfig, strategy: Strategy, evaluator: &mut dyn Evaluator) -> Result<LearnReport, LearnError> {
    config.validate()?;
    vocab.validate()?;
    if vocab.targets().is_empty() {
        return Err(bad("vocabulary", "a vocabulary with at least one target to act on", "none"));
    }
    for (index, s) in config.seeds.iter().enumerate() {
        check(s, vocab).map_err(|error| LearnError::Seed { index, error })?;
    }
    let mut l = Learner {
        vocab,
        config,
        rng: Rng::seed_from_u64(config.seed),
        model: Model::new(vocab, config.measures.observed_intervals, config.event_rate),
        evaluations: 0,
        savings: Savings::default(),
        seen: HashSet::new(),
        raw_seen: HashSet::new(),
        env_order: (0..config.training.len()).collect(),
    };
    l.run(strategy, evaluator)
}

/// Evaluates one fixed rule set (a static baseline, a hand-written rule
/// set) on the training and held-out environments of `config`.
pub fn assess(vocab: &Vocabulary, config: &LearnConfig, rules: &RuleSet, evaluator: &mut dyn Evaluator) -> Result<Scored, LearnError> {
    check(rules, vocab).map_err(|error| LearnError::Seed { index: 0, error })?;
    let envs: Vec<usize> = config.training.iter().chain(&config.held_out).copied().collect();
    let jobs: Vec<Job<'_>> = envs.iter().map(|&environment| Job { rules, environment }).collect();
    let res = call(evaluator, &jobs, config.objectives)?;
    let (tr, ho) = res.split_at(config.training.len());
    Ok(Scored {
        rules: rules.clone(),
        training: aggregate(config, tr.iter().map(|r| &r.objectives)),
        held_out: if ho.is_empty() { Vec::new() } else { aggregate(config, ho.iter().map(|r| &r.objectives)) },
        size: rules.size(),
    })
}

fn aggregate<'a>(config: &LearnConfig, per_env: impl Iterator<Item = &'a Vec<f64>> + Clone) -> Vec<f64> {
    (0..config.objectives)
        .map(|k| {
            let xs: Vec<f64> = per_env.clone().map(|o| o.get(k).copied().unwrap_or(f64::NAN)).collect();
            config.aggregation.apply(&xs)
        })
        .collect()
}

fn call(evaluator: &mut dyn Evaluator, jobs: &[Job<'_>], objectives: usize) -> Result<Vec<EnvResult>, LearnError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let res = evaluator.evaluate(jobs).map_err(LearnError::Evaluator)?;
    if res.len() != jobs.len() {
        return Err(LearnError::Shape {
            expected: format!("{} results", jobs.len()),
            got: format!("{} results", res.len()),
        });
    }
    if let Some(r) = res.iter().find(|r| r.objectives.len() != objectives) {
        return Err(LearnError::Shape {
            expected: format!("{objectives} objectives per result"),
            got: format!("{} objectives", r.objectives.len()),
        });
    }
    Ok(res)
}

struct Learner<'a> {
    vocab: &'a Vocabulary,
    config: &'a LearnConfig,
    rng: Rng,
    model: Model,
    evaluations: u64,
    savings: Savings,
    /// Normal-form keys evaluated (or aborted) so far.
    seen: HashSet<String>,
    raw_seen: HashSet<String>,
    /// Training environment positions, hardest first.
    env_order: Vec<usize>,
}

impl Learner<'_> {
    fn run(&mut self, strategy: Strategy, evaluator: &mut dyn Evaluator) -> Result<LearnReport, LearnError> {
        let cfg = self.config;
        let n_env = cfg.training.len() as u64;
        // Initial pool: seeds, then random rule sets.
        let mut initial: Vec<RuleSet> = Vec::new();
        let mut keys = HashSet::new();
        for s in &cfg.seeds {
            if let Some(c) = self.admit(s.clone(), &mut keys) {
                initial.push(c);
            }
        }
        let mut attempts = 0;
        while initial.len() < cfg.population && attempts < cfg.population * 50 {
            attempts += 1;
            let rs = self.random_rule_set();
            if let Some(c) = self.admit(rs, &mut keys) {
                initial.push(c);
            }
        }
        let mut pool = self.evaluate(initial, None, evaluator)?;
        pool = self.select(pool, Vec::new());
        let mut curve = vec![self.point(&pool)];
        let mut generations = 0;
        loop {
            let remaining = cfg.budget.saturating_sub(self.evaluations);
            let affordable = (remaining / n_env) as usize;
            if affordable == 0 {
                break;
            }
            let want = cfg.offspring.min(affordable);
            let mut children = Vec::new();
            let mut keys = HashSet::new();
            let mut attempts = 0;
            while children.len() < want && attempts < want * 50 {
                attempts += 1;
                let child = match strategy {
                    Strategy::Random => self.random_rule_set(),
                    Strategy::Genetic => self.breed(&pool),
                };
                if let Some(c) = self.admit(child, &mut keys) {
                    children.push(c);
                }
            }
            if children.is_empty() {
                break;
            }
            let threshold = self.threshold(&pool);
            self.order_environments(&pool);
            let fresh = self.evaluate(children, threshold, evaluator)?;
            pool = self.select(pool, fresh);
            generations += 1;
            curve.push(self.point(&pool));
        }
        self.report(pool, curve, generations, evaluator)
    }

    fn random_rule_set(&mut self) -> RuleSet {
        let mut g = Generator::new(self.vocab, &self.config.generate);
        let rs = g.rule_set(&mut self.rng, &self.model);
        self.savings.constants_from_observed += g.observed_draws;
        rs
    }

    fn tournament<'p>(&mut self, pool: &'p [Cand]) -> &'p Cand {
        // The pool is sorted best first: the smaller index of two wins
        // (binary tournament: mild pressure keeps the pool diverse).
        let k = (0..2).map(|_| self.rng.random_range(0..pool.len())).min().unwrap_or(0);
        &pool[k]
    }

    fn breed(&mut self, pool: &[Cand]) -> RuleSet {
        if pool.is_empty() {
            return self.random_rule_set();
        }
        let r: f64 = self.rng.random();
        let cfg = self.config;
        let mut g = Generator::new(self.vocab, &cfg.generate);
        let child = if r < cfg.p_crossover {
            let a = self.tournament(pool).rules.clone();
            let b = self.tournament(pool).rules.clone();
            if self.rng.random_bool(0.5) {
                variation::crossover_union(&a, &b, &mut self.rng, cfg.generate.max_rules * 2)
            } else {
                variation::crossover_branch(&a, &b, &mut self.rng)
            }
        } else if r < cfg.p_crossover + cfg.p_mutation {
            let mut c = self.tournament(pool).rules.clone();
            // One mutation, sometimes more: slight variations and big jumps.
            loop {
                variation::mutate(&mut c, &mut g, &mut self.rng, &self.model);
                if !self.rng.random_bool(0.35) {
                    break;
                }
            }
            c
        } else {
            g.rule_set(&mut self.rng, &self.model)
        };
        self.savings.constants_from_observed += g.observed_draws;
        child
    }

    /// Folds, checks and de-duplicates a candidate; `None` when it should
    /// not be evaluated.
    fn admit(&mut self, mut rs: RuleSet, batch: &mut HashSet<String>) -> Option<RuleSet> {
        if self.config.measures.fold_constants {
            let (folded, removed) = fold(&rs, self.vocab);
            self.savings.rules_folded_away += removed as u64;
            rs = folded;
        }
        if check(&rs, self.vocab).is_err() {
            self.savings.invalid_children += 1;
            return None;
        }
        if self.config.measures.skip_duplicates {
            let key = normal_key(&rs);
            let raw = rs.to_string();
            let dup = self.seen.contains(&key) || !batch.insert(key.clone());
            if dup {
                self.savings.duplicates_skipped += 1;
                self.savings.evaluations_saved_by_duplicates += self.config.training.len() as u64;
                if !self.raw_seen.contains(&raw) {
                    self.savings.semantic_duplicates += 1;
                }
                self.raw_seen.insert(raw);
                return None;
            }
            self.raw_seen.insert(raw);
        }
        Some(rs)
    }

    /// The fitness a child must reach to enter the pool: the pool's worst
    /// (one objective, pool full, abort enabled and boundable).
    fn threshold(&self, pool: &[Cand]) -> Option<f64> {
        let cfg = self.config;
        if !cfg.measures.abort_hopeless || cfg.objectives != 1 || pool.len() < cfg.population {
            return None;
        }
        if cfg.utility_bounds.is_none() && cfg.aggregation != Aggregation::Min {
            return None;
        }
        pool.last().and_then(|c| c.fitness.first().copied())
    }

    /// Hardest environments (lowest utility of the current best) first, so
    /// hopeless rule sets are found after few evaluations.
    fn order_environments(&mut self, pool: &[Cand]) {
        if let Some(best) = pool.first() {
            let mut order: Vec<usize> = (0..self.config.training.len()).collect();
            order.sort_by(|&a, &b| {
                let ua = best.per_env.get(a).and_then(|o| o.first()).copied().unwrap_or(0.0);
                let ub = best.per_env.get(b).and_then(|o| o.first()).copied().unwrap_or(0.0);
                ua.total_cmp(&ub).then(a.cmp(&b))
            });
            self.env_order = order;
        }
    }

    fn evaluate(&mut self, cands: Vec<RuleSet>, threshold: Option<f64>, evaluator: &mut dyn Evaluator) -> Result<Vec<Cand>, LearnError> {
        let cfg = self.config;
        let n = cfg.training.len();
        let rounds: Vec<Vec<usize>> = if threshold.is_some() {
            self.env_order.iter().map(|&e| vec![e]).collect()
        } else {
            vec![self.env_order.clone()]
        };
        let mut per_env: Vec<Vec<Option<Vec<f64>>>> = vec![vec![None; n]; cands.len()];
        let mut matches: Vec<Vec<u64>> = cands.iter().map(|c| vec![0; c.len()]).collect();
        let mut alive = vec![true; cands.len()];
        let hi = cfg.utility_bounds.map(|b| b.1).unwrap_or(f64::INFINITY);
        for (ri, round) in rounds.iter().enumerate() {
            let mut jobs = Vec::new();
            let mut who = Vec::new();
            for (ci, c) in cands.iter().enumerate() {
                if !alive[ci] {
                    continue;
                }
                for &e in round {
                    jobs.push(Job {
                        rules: c,
                        environment: cfg.training[e],
                    });
                    who.push((ci, e));
                }
            }
            let res = call(evaluator, &jobs, cfg.objectives)?;
            self.evaluations += jobs.len() as u64;
            for ((ci, e), r) in who.into_iter().zip(res) {
                for (m, lo, hi) in &r.observed {
                    self.model.observe(m.0, *lo, *hi);
                }
                for (acc, x) in matches[ci].iter_mut().zip(&r.match_counts) {
                    *acc += x;
                }
                if r.match_counts.is_empty() {
                    // Unknown counts: treat every rule as having matched.
                    for acc in matches[ci].iter_mut() {
                        *acc += 1;
                    }
                }
                per_env[ci][e] = Some(r.objectives);
            }
            if let Some(t) = threshold {
                let done: usize = rounds[..=ri].iter().map(Vec::len).sum();
                let left = n - done;
                for ci in 0..cands.len() {
                    if !alive[ci] || left == 0 {
                        continue;
                    }
                    let known: Vec<f64> = per_env[ci].iter().flatten().map(|o| o[0]).collect();
                    if cfg.aggregation.upper_bound(&known, left, hi) < t {
                        alive[ci] = false;
                        self.savings.aborted += 1;
                        self.savings.evaluations_saved_by_abort += left as u64;
                        self.seen.insert(normal_key(&cands[ci]));
                    }
                }
            }
        }
        let mut out = Vec::new();
        for (ci, mut rules) in cands.into_iter().enumerate() {
            if !alive[ci] {
                continue;
            }
            let objs: Vec<Vec<f64>> = per_env[ci].iter().map(|o| o.clone().unwrap_or_else(|| vec![f64::NAN; cfg.objectives])).collect();
            let fitness = aggregate(cfg, objs.iter());
            self.seen.insert(normal_key(&rules));
            if cfg.measures.drop_unmatched {
                let dropped = drop_unmatched(&mut rules, &matches[ci]);
                if dropped > 0 {
                    self.savings.rules_dropped_unmatched += dropped as u64;
                    self.seen.insert(normal_key(&rules));
                }
            }
            out.push(Cand {
                key: normal_key(&rules),
                size: rules.size(),
                rules,
                per_env: objs,
                fitness,
            });
        }
        Ok(out)
    }

    fn select(&self, pool: Vec<Cand>, fresh: Vec<Cand>) -> Vec<Cand> {
        let mut all: Vec<Cand> = pool.into_iter().chain(fresh).collect();
        if self.config.measures.skip_duplicates {
            // Keep one of each normal form (the smaller on equal fitness
            // comes first after ordering).
            let fit: Vec<Vec<f64>> = all.iter().map(|c| c.fitness.clone()).collect();
            let sizes: Vec<usize> = all.iter().map(|c| c.size).collect();
            let ord = select::order(&fit, &sizes);
            let mut seen = HashSet::new();
            let mut keep = Vec::new();
            let mut slots: Vec<Option<Cand>> = all.into_iter().map(Some).collect();
            for i in ord {
                if let Some(c) = slots[i].take() {
                    if seen.insert(c.key.clone()) {
                        keep.push(c);
                    }
                }
            }
            all = keep;
        }
        let fit: Vec<Vec<f64>> = all.iter().map(|c| c.fitness.clone()).collect();
        let sizes: Vec<usize> = all.iter().map(|c| c.size).collect();
        let ord = select::order(&fit, &sizes);
        let mut slots: Vec<Option<Cand>> = all.into_iter().map(Some).collect();
        let mut out: Vec<Cand> = ord.into_iter().filter_map(|i| slots[i].take()).collect();
        out.truncate(self.config.population);
        out
    }

    fn point(&self, pool: &[Cand]) -> CurvePoint {
        let best = pool
            .iter()
            .filter_map(|c| c.fitness.first().copied())
            .filter(|f| !f.is_nan())
            .fold(f64::NEG_INFINITY, f64::max);
        CurvePoint {
            evaluations: self.evaluations,
            best,
        }
    }

    fn report(&mut self, pool: Vec<Cand>, curve: Vec<CurvePoint>, generations: usize, evaluator: &mut dyn Evaluator) -> Result<LearnReport, LearnError> {
        let cfg = self.config;
        // Best by objective 0, smaller on ties.
        let mut best_i = 0;
        for (i, c) in pool.iter().enumerate() {
            let b = &pool[best_i];
            let (fc, fb) = (c.fitness[0], b.fitness[0]);
            if fc > fb || (fc == fb && c.size < b.size) {
                best_i = i;
            }
        }
        let front_idx: Vec<usize> = if cfg.objectives > 1 {
            let fit: Vec<Vec<f64>> = pool.iter().map(|c| c.fitness.clone()).collect();
            let r = select::ranks(&fit);
            (0..pool.len()).filter(|&i| r[i] == 0).collect()
        } else {
            vec![best_i]
        };
        let mut wanted: Vec<usize> = front_idx.clone();
        if !wanted.contains(&best_i) {
            wanted.push(best_i);
        }
        let mut held: HashMap<usize, Vec<f64>> = HashMap::new();
        let mut held_out_evaluations = 0;
        if !cfg.held_out.is_empty() && !pool.is_empty() {
            let mut jobs = Vec::new();
            for &i in &wanted {
                for &environment in &cfg.held_out {
                    jobs.push(Job {
                        rules: &pool[i].rules,
                        environment,
                    });
                }
            }
            let res = call(evaluator, &jobs, cfg.objectives)?;
            held_out_evaluations = jobs.len() as u64;
            for (k, &i) in wanted.iter().enumerate() {
                let chunk = &res[k * cfg.held_out.len()..(k + 1) * cfg.held_out.len()];
                held.insert(i, aggregate(cfg, chunk.iter().map(|r| &r.objectives)));
            }
        }
        let scored = |i: usize| Scored {
            rules: pool[i].rules.clone(),
            training: pool[i].fitness.clone(),
            held_out: held.get(&i).cloned().unwrap_or_default(),
            size: pool[i].size,
        };
        let best = if pool.is_empty() {
            Scored {
                rules: RuleSet::default(),
                training: Vec::new(),
                held_out: Vec::new(),
                size: 0,
            }
        } else {
            scored(best_i)
        };
        let front = front_idx.into_iter().map(scored).collect();
        Ok(LearnReport {
            best,
            front,
            curve,
            evaluations: self.evaluations,
            held_out_evaluations,
            generations,
            savings: self.savings.clone(),
        })
    }
}

/// Removes rules whose match count is zero; returns how many went.
fn drop_unmatched(rules: &mut RuleSet, matches: &[u64]) -> usize {
    let mut i = 0;
    let mut dropped = 0;
    for b in &mut rules.blocks {
        b.rules.retain(|_| {
            let keep = matches.get(i).is_none_or(|&m| m > 0);
            i += 1;
            if !keep {
                dropped += 1;
            }
            keep
        });
    }
    rules.blocks.retain(|b| !b.rules.is_empty());
    dropped
}

/// Constant folding for the learner (seed 001 §6.4.2): constant numeric
/// subexpressions become one literal, conditions that are constant become
/// `true`/`false`, rules that cannot fire are removed. Unlike
/// [`crate::normalize`] it keeps the rules as written otherwise, so
/// learned rules stay readable. Returns the folded set and the number of
/// rules removed.
pub fn fold(rules: &RuleSet, vocab: &Vocabulary) -> (RuleSet, usize) {
    let mut out = RuleSet::default();
    for b in &rules.blocks {
        let mut kept = Vec::new();
        for r in &b.rules {
            let cond = fold_cond(&r.condition, vocab);
            let norm = normalize_cond(&cond);
            match norm {
                Cond::Bool(false, _) => continue,
                Cond::Bool(true, _) => {
                    kept.push(Rule {
                        condition: Cond::Bool(true, Span::default()),
                        actions: r.actions.clone(),
                        span: r.span,
                    });
                    if b.mode == Mode::FirstMatch {
                        break;
                    }
                }
                _ => kept.push(Rule {
                    condition: cond,
                    actions: r.actions.clone(),
                    span: r.span,
                }),
            }
        }
        if !kept.is_empty() {
            out.blocks.push(Block {
                mode: b.mode,
                rules: kept,
                span: b.span,
            });
        }
    }
    let removed = rules.len() - out.len();
    (out, removed)
}

fn fold_cond(c: &Cond, vocab: &Vocabulary) -> Cond {
    match c {
        Cond::Bool(..) => c.clone(),
        Cond::Not(x, s) => Cond::Not(Box::new(fold_cond(x, vocab)), *s),
        Cond::And(a, b, s) => Cond::And(Box::new(fold_cond(a, vocab)), Box::new(fold_cond(b, vocab)), *s),
        Cond::Or(a, b, s) => Cond::Or(Box::new(fold_cond(a, vocab)), Box::new(fold_cond(b, vocab)), *s),
        Cond::Cmp { op, lhs, rhs, span } => Cond::Cmp {
            op: *op,
            lhs: Box::new(fold_num(lhs, vocab)),
            rhs: Box::new(fold_num(rhs, vocab)),
            span: *span,
        },
    }
}

fn fold_num(n: &Num, vocab: &Vocabulary) -> Num {
    match n {
        Num::Lit(..) | Num::Metric(..) | Num::Agg { .. } => n.clone(),
        _ => match (const_value(n), dimension_of(n, vocab)) {
            (Some(v), Ok(d)) if v.is_finite() => Num::Lit(Literal::from_base(v, d, 0), n.span()),
            _ => match n {
                Num::Neg(x, s) => Num::Neg(Box::new(fold_num(x, vocab)), *s),
                Num::Bin { op, lhs, rhs, span } => Num::Bin {
                    op: *op,
                    lhs: Box::new(fold_num(lhs, vocab)),
                    rhs: Box::new(fold_num(rhs, vocab)),
                    span: *span,
                },
                other => other.clone(),
            },
        },
    }
}
