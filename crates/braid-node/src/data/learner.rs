//! The TD(λ) ratio learner (seed 000 §IV-C2–5, `TDRatioLearner`): online
//! on-policy Sarsa(λ) (Fig. 3) with replacing traces and an ε-greedy
//! policy, over the discretised ratio space, with three value functions:
//! the full matrix Q(s, a) (§IV-C3), the state values V(s) with the model
//! M(s, a) (§IV-C4), and V(s) approximated by a quadratic where nothing
//! was learned yet (§IV-C5).
//!
//! States are the ratios −1, −1 + κ, …, 1 (signed form: −1 all TCP, 1 all
//! Braid); an action moves by −m·κ … m·κ (`max_step` m, 2 in the paper).
//! One step per episode: the reward of an episode is what the ratio in
//! force during it earned.
//!
//! Endpoint probes ([`LearnerConfig::probe_endpoints`], on by default; a
//! departure from the paper, which starts at 50-50 and walks). After the
//! first episode, at `initial` (50-50: both transports start, which
//! matters on long paths where each needs seconds of slow start), two
//! episodes run all TCP, then all Braid; their rewards become the
//! learned values of the two end states, and Sarsa(λ) starts from the
//! better one. The reason is the shape of the landscape when both
//! transports share one bottleneck: each one's losses and queue slow the
//! other, so a mix can be slower than either transport alone, with the
//! best ratio at an edge. Measured over the emulator at 0 ms RTT (1
//! Gbit/s, `braid bench data`): all TCP 510 Mbit/s, all Braid 920, and
//! 60 %, 80 % and 90 % Braid 350, 530 and 620. §IV-C5's assumption of a
//! single maximum fails there, and a learner starting at 50-50 follows
//! the slope it finds first: of three seeds, two settled toward TCP. Two
//! probe episodes cost little where the transports are alike and find the
//! right edge at once where they are not.

use braid_core::{Instant, Rng, RngExt, SeedableRng};

use super::{Ratio, RatioPolicy};
use crate::ConfigError;

/// Which value function the learner uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueFunction {
    /// A Q(s, a) entry per state and action (§IV-C3): slow to fill.
    Matrix,
    /// V(s) with the model M(s, a) = s + a clamped to the state space,
    /// Q(s, a) = V(M(s, a)) (§IV-C4).
    Model,
    /// Like `Model`, with V of unvisited states taken from a least-squares
    /// quadratic (concave, else linear) through the learned values, once
    /// there are two (§IV-C5). Learned values always win.
    Quadratic,
}

impl std::str::FromStr for ValueFunction {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "matrix" => Ok(ValueFunction::Matrix),
            "model" => Ok(ValueFunction::Model),
            "quadratic" => Ok(ValueFunction::Quadratic),
            _ => Err(ConfigError { field: "value_function", expected: "matrix, model or quadratic" }),
        }
    }
}

/// The learner's parameters. Defaults are the paper's (§IV-C3/4):
/// α = 0.5, γ = 0.5, λ = 0.85, ε from 0.3 down to 0.1 by 0.01 per
/// episode, κ = 1/5, steps of up to 2κ, 1 s episodes, starting at 50-50,
/// quadratic approximation; plus the endpoint probes (see the module
/// documentation), which [`LearnerConfig::paper`] leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct LearnerConfig {
    /// Step size α (> 0).
    pub alpha: f64,
    /// Discount γ in `[0, 1]`.
    pub gamma: f64,
    /// Trace decay λ in `[0, 1]`.
    pub lambda: f64,
    /// Initial exploration probability.
    pub epsilon_max: f64,
    /// Final exploration probability.
    pub epsilon_min: f64,
    /// Decrease of ε per episode.
    pub epsilon_decay: f64,
    /// State step κ in the signed ratio space: `1/κ` must be a whole
    /// number from 1 to 50.
    pub kappa: f64,
    /// Largest action, in steps of κ (actions −m·κ … m·κ).
    pub max_step: u32,
    /// Episode length (one learning step per episode).
    pub episode: std::time::Duration,
    /// Starting ratio, signed form (snapped to the grid).
    pub initial: f64,
    /// The value function.
    pub value_function: ValueFunction,
    /// Seed of exploration and tie-breaking.
    pub seed: u64,
    /// After the first episode (at `initial`), run one episode all TCP
    /// and one all Braid, and start learning from the better (see the
    /// module documentation).
    pub probe_endpoints: bool,
}

impl Default for LearnerConfig {
    fn default() -> Self {
        LearnerConfig {
            alpha: 0.5,
            gamma: 0.5,
            lambda: 0.85,
            epsilon_max: 0.3,
            epsilon_min: 0.1,
            epsilon_decay: 0.01,
            kappa: 0.2,
            max_step: 2,
            episode: std::time::Duration::from_secs(1),
            initial: 0.0,
            value_function: ValueFunction::Quadratic,
            seed: 0,
            probe_endpoints: true,
        }
    }
}

impl LearnerConfig {
    /// Exactly the paper's learner: the defaults without the endpoint
    /// probes.
    pub fn paper() -> Self {
        LearnerConfig { probe_endpoints: false, ..Default::default() }
    }

    /// Check every field; the error names the field and the allowed form.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, expected| Err(ConfigError { field, expected });
        if !(self.alpha > 0.0 && self.alpha.is_finite()) {
            return err("alpha", "a positive number");
        }
        if !(0.0..=1.0).contains(&self.gamma) {
            return err("gamma", "a number in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.lambda) {
            return err("lambda", "a number in [0, 1]");
        }
        if !(0.0..=1.0).contains(&self.epsilon_min) || !(0.0..=1.0).contains(&self.epsilon_max) || self.epsilon_min > self.epsilon_max {
            return err("epsilon_min", "0 <= epsilon_min <= epsilon_max <= 1");
        }
        if !(self.epsilon_decay >= 0.0 && self.epsilon_decay.is_finite()) {
            return err("epsilon_decay", "a number >= 0");
        }
        let inv = 1.0 / self.kappa;
        if !(self.kappa > 0.0 && inv.round() >= 1.0 && inv.round() <= 50.0 && (inv - inv.round()).abs() < 1e-6) {
            return err("kappa", "1/k for a whole k from 1 to 50 (e.g. 0.2)");
        }
        if self.max_step == 0 || self.max_step > inv.round() as u32 * 2 {
            return err("max_step", "1 to the number of states - 1");
        }
        if self.episode.is_zero() {
            return err("episode", "a positive duration");
        }
        if !(-1.0..=1.0).contains(&self.initial) {
            return err("initial", "a signed ratio in [-1, 1]");
        }
        Ok(())
    }

    /// Number of intervals of the state grid (`2/κ`).
    fn intervals(&self) -> usize {
        (2.0 / self.kappa).round() as usize
    }
}

/// What one learning step did (for tracing and statistics).
#[derive(Debug, Clone, PartialEq)]
pub struct LearnerStep {
    /// Episode number (from 1).
    pub episode: u64,
    /// The state the reward was earned in (signed ratio).
    pub state: f64,
    /// The reward.
    pub reward: f64,
    /// The TD error δ.
    pub td_error: f64,
    /// Whether the next action was exploratory (random).
    pub explored: bool,
    /// ε used for the next action.
    pub epsilon: f64,
    /// The ratio chosen for the next episode.
    pub next: Ratio,
}

/// The Sarsa(λ) ratio learner.
///
/// ```
/// use braid_node::data::{LearnerConfig, RatioPolicy, TdLearner};
/// use braid_core::Instant;
/// let mut l = TdLearner::new(LearnerConfig { seed: 1, ..Default::default() }).unwrap();
/// let mut t = Instant::ZERO;
/// for _ in 0..40 {
///     // A landscape where all-TCP is best.
///     let r = l.ratio().signed();
///     let reward = 100.0 - 40.0 * (r + 1.0);
///     t = t + std::time::Duration::from_secs(1);
///     l.on_episode(t, reward);
/// }
/// assert!(l.greedy_ratio().signed() <= -0.8);
/// ```
#[derive(Debug, Clone)]
pub struct TdLearner {
    config: LearnerConfig,
    /// Number of states (`intervals + 1`).
    n: usize,
    /// Actions as state offsets.
    actions: Vec<i64>,
    /// Matrix: `n × actions` entries; model variants: `n` entries.
    values: Vec<Option<f64>>,
    traces: Vec<f64>,
    state: usize,
    action: usize,
    episode: u64,
    rng: Rng,
    last: Option<LearnerStep>,
    /// With probes: the first episode (at `initial`) has not ended yet.
    warming: bool,
    /// End states still to probe, in order.
    probes: Vec<usize>,
}

impl TdLearner {
    /// A learner at `config.initial`, its first action chosen.
    pub fn new(config: LearnerConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let n = config.intervals() + 1;
        let m = config.max_step as i64;
        let actions: Vec<i64> = (-m..=m).collect();
        let entries = match config.value_function {
            ValueFunction::Matrix => n * actions.len(),
            ValueFunction::Model | ValueFunction::Quadratic => n,
        };
        let state = (((config.initial + 1.0) / config.kappa).round() as usize).min(n - 1);
        let mut l = TdLearner {
            rng: Rng::seed_from_u64(config.seed),
            n,
            values: vec![None; entries],
            traces: vec![0.0; entries],
            state,
            action: 0,
            episode: 0,
            last: None,
            warming: config.probe_endpoints,
            probes: if config.probe_endpoints { vec![0, n - 1] } else { Vec::new() },
            actions,
            config,
        };
        // The first episode runs at the initial ratio: action "stay".
        l.action = l.actions.len() / 2;
        Ok(l)
    }

    /// The configuration.
    pub fn config(&self) -> &LearnerConfig {
        &self.config
    }

    /// M(s, a): the state `a` leads to from `s`, clamped to the grid
    /// (§IV-C4).
    fn model(&self, s: usize, a: usize) -> usize {
        (s as i64 + self.actions[a]).clamp(0, self.n as i64 - 1) as usize
    }

    fn signed(&self, s: usize) -> f64 {
        -1.0 + s as f64 * self.config.kappa
    }

    fn ratio_of(&self, s: usize) -> Ratio {
        Ratio::new(s as u32, (self.n - 1) as u32)
    }

    /// The entry Q(s, a) lives in.
    fn entry(&self, s: usize, a: usize) -> usize {
        match self.config.value_function {
            ValueFunction::Matrix => s * self.actions.len() + a,
            _ => self.model(s, a),
        }
    }

    /// The estimate of Q(s, a): learned, or (quadratic) approximated.
    fn q(&self, s: usize, a: usize, fit: Option<&Fit>) -> Option<f64> {
        let e = self.entry(s, a);
        self.values[e].or_else(|| fit.map(|f| f.at(self.signed(e))))
    }

    fn fit(&self) -> Option<Fit> {
        if self.config.value_function != ValueFunction::Quadratic {
            return None;
        }
        let pts: Vec<(f64, f64)> = self
            .values
            .iter()
            .enumerate()
            .filter_map(|(s, v)| v.map(|v| (self.signed(s), v)))
            .collect();
        Fit::concave(&pts)
    }

    /// ε for the current episode.
    pub fn epsilon(&self) -> f64 {
        let c = &self.config;
        (c.epsilon_max - c.epsilon_decay * self.episode as f64).max(c.epsilon_min)
    }

    /// The greedy action in `s`, or `None` if some action's value is
    /// unknown (then the policy decides at random, as in the paper).
    fn greedy(&mut self, s: usize) -> Option<usize> {
        let fit = self.fit();
        let qs: Option<Vec<f64>> = (0..self.actions.len()).map(|a| self.q(s, a, fit.as_ref())).collect();
        let qs = qs?;
        let best = qs.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        // Ties: the smallest move (staying put beats wandering), then
        // random among equals.
        let tied: Vec<usize> = (0..qs.len()).filter(|&a| qs[a] >= best - 1e-12 * best.abs().max(1.0)).collect();
        let least = tied.iter().map(|&a| self.actions[a].abs()).min()?;
        let tied: Vec<usize> = tied.into_iter().filter(|&a| self.actions[a].abs() == least).collect();
        Some(tied[self.rng.random_range(0..tied.len())])
    }

    /// ε-greedy π_Q; returns (action, explored).
    fn policy(&mut self, s: usize) -> (usize, bool) {
        let eps = self.epsilon();
        if self.rng.random_bool(eps.clamp(0.0, 1.0)) {
            return (self.rng.random_range(0..self.actions.len()), true);
        }
        match self.greedy(s) {
            Some(a) => (a, false),
            None => (self.rng.random_range(0..self.actions.len()), true),
        }
    }

    /// The ratio the learner currently believes best (greedy over the
    /// known and approximated values of every state; the current ratio
    /// if nothing is known).
    pub fn greedy_ratio(&self) -> Ratio {
        let fit = self.fit();
        let value = |s: usize| -> Option<f64> {
            match self.config.value_function {
                ValueFunction::Matrix => {
                    (0..self.actions.len()).filter_map(|a| self.values[s * self.actions.len() + a]).reduce(f64::max)
                }
                _ => self.values[s].or_else(|| fit.as_ref().map(|f| f.at(self.signed(s)))),
            }
        };
        (0..self.n)
            .filter_map(|s| value(s).map(|v| (s, v)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(s, _)| self.ratio_of(s))
            .unwrap_or_else(|| self.ratio())
    }

    /// The last learning step.
    pub fn last_step(&self) -> Option<&LearnerStep> {
        self.last.as_ref()
    }

    /// Learned values, by state (signed ratio); for the matrix, the best
    /// learned action value of each state.
    pub fn values(&self) -> Vec<(f64, Option<f64>)> {
        (0..self.n)
            .map(|s| {
                let v = match self.config.value_function {
                    ValueFunction::Matrix => (0..self.actions.len())
                        .filter_map(|a| self.values[s * self.actions.len() + a])
                        .reduce(f64::max),
                    _ => self.values[s],
                };
                (self.signed(s), v)
            })
            .collect()
    }

    /// A probe episode at end state `s` earned `reward`: it becomes the
    /// value of staying in `s` (a steady state earning `reward`, as for a
    /// first visit in [`TdLearner::step`]). After the last probe the
    /// learner moves to the better end state and stays for the next
    /// episode.
    fn probe(&mut self, s: usize, reward: f64) -> LearnerStep {
        self.episode += 1;
        let g = self.config.gamma;
        let value = if g < 1.0 { reward / (1.0 - g) } else { reward };
        let stay = self.actions.len() / 2;
        let e = self.entry(s, stay);
        self.values[e] = Some(value);
        if self.probes.is_empty() {
            let (tcp, braid) = (self.values[self.entry(0, stay)], self.values[self.entry(self.n - 1, stay)]);
            self.state = if braid > tcp { self.n - 1 } else { 0 };
            self.action = stay;
        }
        self.record(s, reward, 0.0, true, "probe")
    }

    /// Records (and traces) the step that just ended: the episode spent in
    /// state `s` earned `reward`.
    fn record(&mut self, s: usize, reward: f64, td_error: f64, explored: bool, kind: &'static str) -> LearnerStep {
        let step = LearnerStep {
            episode: self.episode,
            state: self.signed(s),
            reward,
            td_error,
            explored,
            epsilon: self.epsilon(),
            next: self.ratio(),
        };
        tracing::debug!(
            target: "braid_node::data",
            kind,
            episode = step.episode,
            state = step.state,
            reward = step.reward,
            td_error = step.td_error,
            explored = step.explored,
            epsilon = step.epsilon,
            next = step.next.signed(),
            "learner step"
        );
        self.last = Some(step.clone());
        step
    }

    /// One step of Fig. 3: the episode that ran at M(s, a) earned
    /// `reward`.
    fn step(&mut self, reward: f64) -> LearnerStep {
        self.episode += 1;
        let (s, a) = (self.state, self.action);
        let s2 = self.model(s, a);
        let (a2, explored) = self.policy(s2);
        let fit = self.fit();
        let g = self.config.gamma;
        let next_q = self.q(s2, a2, fit.as_ref());
        let e = self.entry(s, a);
        // Unvisited values start at the TD target itself (a first sample
        // is the best estimate there is); an unknown successor counts as
        // a steady state earning this reward.
        let target = reward + g * next_q.unwrap_or(if g < 1.0 { reward / (1.0 - g) } else { reward });
        let delta = target - self.values[e].unwrap_or(target);
        if self.values[e].is_none() {
            self.values[e] = Some(target);
        }
        // Replacing trace: this entry 1, the other actions of s 0.
        if self.config.value_function == ValueFunction::Matrix {
            for b in 0..self.actions.len() {
                self.traces[s * self.actions.len() + b] = 0.0;
            }
        }
        self.traces[e] = 1.0;
        let (alpha, decay) = (self.config.alpha, g * self.config.lambda);
        for (v, tr) in self.values.iter_mut().zip(self.traces.iter_mut()) {
            if let Some(v) = v {
                *v += alpha * delta * *tr;
            }
            *tr *= decay;
        }
        self.state = s2;
        self.action = a2;
        self.record(s2, reward, delta, explored, "sarsa")
    }
}

impl RatioPolicy for TdLearner {
    fn ratio(&self) -> Ratio {
        match self.probes.first() {
            Some(&s) if !self.warming => self.ratio_of(s),
            _ => self.ratio_of(self.model(self.state, self.action)),
        }
    }

    fn on_episode(&mut self, _now: Instant, reward: f64) -> Ratio {
        if reward.is_finite() {
            if self.warming {
                // The first episode, at the initial state, was learned
                // from: its value, then the probes.
                self.warming = false;
                self.probe(self.state, reward);
            } else if self.probes.is_empty() {
                self.step(reward);
            } else {
                let s = self.probes.remove(0);
                self.probe(s, reward);
            }
        }
        self.ratio()
    }

    fn on_unlearned(&mut self, _now: Instant) -> Ratio {
        // A warm-up episode: the probes start now. (Other unlearned
        // episodes change nothing: a probe the application left idle
        // runs again.)
        self.warming = false;
        self.ratio()
    }

    fn episode(&self) -> std::time::Duration {
        self.config.episode
    }
}

/// A least-squares fit `y = a x² + b x + c` with `a ≤ 0` (a single
/// maximum, the assumption of §IV-C5), or a line when that fails or there
/// are only two distinct points.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fit {
    a: f64,
    b: f64,
    c: f64,
}

impl Fit {
    fn at(&self, x: f64) -> f64 {
        self.a * x * x + self.b * x + self.c
    }

    fn concave(pts: &[(f64, f64)]) -> Option<Fit> {
        if pts.len() < 2 {
            return None;
        }
        if pts.len() >= 3 {
            if let Some(f) = Self::quadratic(pts) {
                if f.a <= 0.0 {
                    return Some(f);
                }
            }
        }
        Self::linear(pts)
    }

    fn linear(pts: &[(f64, f64)]) -> Option<Fit> {
        let n = pts.len() as f64;
        let (sx, sy) = pts.iter().fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
        let (mx, my) = (sx / n, sy / n);
        let sxx: f64 = pts.iter().map(|(x, _)| (x - mx).powi(2)).sum();
        if sxx < 1e-12 {
            return None;
        }
        let sxy: f64 = pts.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
        let b = sxy / sxx;
        Some(Fit { a: 0.0, b, c: my - b * mx })
    }

    fn quadratic(pts: &[(f64, f64)]) -> Option<Fit> {
        // Normal equations for (c, b, a), solved by Gaussian elimination
        // with partial pivoting.
        let mut s = [0.0f64; 5];
        let mut t = [0.0f64; 3];
        for &(x, y) in pts {
            let mut p = 1.0;
            for (k, sk) in s.iter_mut().enumerate() {
                *sk += p;
                if k < 3 {
                    t[k] += p * y;
                }
                p *= x;
            }
        }
        let mut m = [[s[0], s[1], s[2], t[0]], [s[1], s[2], s[3], t[1]], [s[2], s[3], s[4], t[2]]];
        for col in 0..3 {
            let piv = (col..3).max_by(|&i, &j| m[i][col].abs().total_cmp(&m[j][col].abs()))?;
            if m[piv][col].abs() < 1e-12 {
                return None;
            }
            m.swap(col, piv);
            let pivot_row = m[col];
            for (row, r) in m.iter_mut().enumerate() {
                if row != col {
                    let f = r[col] / pivot_row[col];
                    for (x, p) in r.iter_mut().zip(pivot_row.iter()).skip(col) {
                        *x -= f * p;
                    }
                }
            }
        }
        let (c, b, a) = (m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]);
        (a.is_finite() && b.is_finite() && c.is_finite()).then_some(Fit { a, b, c })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_parabola_and_refuses_convex_ones() {
        let pts: Vec<(f64, f64)> = [-1.0, -0.2, 0.4, 1.0].iter().map(|&x| (x, -2.0 * x * x + 0.5 * x + 3.0)).collect();
        let f = Fit::concave(&pts).unwrap();
        assert!((f.a + 2.0).abs() < 1e-9 && (f.b - 0.5).abs() < 1e-9 && (f.c - 3.0).abs() < 1e-9, "{f:?}");
        let convex: Vec<(f64, f64)> = [-1.0, 0.0, 1.0].iter().map(|&x| (x, x * x)).collect();
        assert_eq!(Fit::concave(&convex).unwrap().a, 0.0);
        assert!(Fit::concave(&[(0.5, 1.0)]).is_none());
        assert!(Fit::concave(&[(0.5, 1.0), (0.5, 2.0)]).is_none());
    }

    #[test]
    fn probes_run_both_edges_then_learning_starts_from_the_better() {
        for (tcp, braid, start) in [(510.0, 920.0, Ratio::BRAID), (920.0, 510.0, Ratio::TCP)] {
            for vf in [ValueFunction::Matrix, ValueFunction::Model, ValueFunction::Quadratic] {
                let mut l = TdLearner::new(LearnerConfig { value_function: vf, ..Default::default() }).unwrap();
                assert_eq!(l.ratio(), Ratio::new(1, 2), "the first episode starts both transports");
                assert_eq!(l.on_unlearned(Instant::ZERO), Ratio::TCP);
                assert_eq!(l.on_episode(Instant::ZERO, tcp), Ratio::BRAID);
                assert_eq!(l.on_episode(Instant::ZERO, braid), start, "{vf:?}");
                assert_eq!(l.greedy_ratio(), start, "{vf:?}");
                assert!(l.last_step().unwrap().explored);
            }
        }
        let paper = TdLearner::new(LearnerConfig::paper()).unwrap();
        assert_eq!(paper.ratio(), Ratio::new(5, 10));
    }

    #[test]
    fn model_clamps_at_the_edges() {
        let l = TdLearner::new(LearnerConfig { initial: -1.0, ..LearnerConfig::paper() }).unwrap();
        assert_eq!(l.n, 11);
        assert_eq!(l.model(0, 0), 0); // M(-1, -2κ) = -1
        assert_eq!(l.model(0, 4), 2);
        assert_eq!(l.model(10, 4), 10);
        assert_eq!(l.ratio(), Ratio::TCP);
    }

    #[test]
    fn bad_configs_name_the_field() {
        for (c, field) in [
            (LearnerConfig { kappa: 0.3, ..Default::default() }, "kappa"),
            (LearnerConfig { gamma: 1.5, ..Default::default() }, "gamma"),
            (LearnerConfig { alpha: 0.0, ..Default::default() }, "alpha"),
            (LearnerConfig { epsilon_min: 0.5, epsilon_max: 0.2, ..Default::default() }, "epsilon_min"),
            (LearnerConfig { max_step: 0, ..Default::default() }, "max_step"),
        ] {
            assert_eq!(TdLearner::new(c).unwrap_err().field, field);
        }
    }
}
