//! Marlin's online concurrency tuner (seed 002 §3.1–3.2) and the Falcon-style shared tuner.
//!
//! Sans-IO: no clock, no threads. Once per probe interval (the paper uses 3 s) the caller reports
//! an [`Observation`] per stage — the worker count that ran, the throughput it achieved, and (for
//! the network stage) the loss ratio — and the tuner returns the worker count for the next
//! interval.
//!
//! # Utility (§3.1)
//! * eq. 1, read and write stages: `u = T / K^n`
//! * eq. 2, network stage: `u = T / K^n − B · L · T`
//!
//! where `T` is the stage throughput (the paper's `n_i · t_i`), `n` its worker count and `L` its
//! loss ratio. Each stage is tuned independently (the paper rejects the combined eq. 3: the stages
//! constrain each other's measurements, which slows a joint search). `K = 1.02`, `B = 10`
//! (errata: the printed `K = 0.02` would reward concurrency).
//!
//! # Search (§3.2, univariate online gradient ascent)
//! Two consecutive settings are scored and the relative gradient `g = (u₂ − u₁) / (u₁ · |n₂ − n₁|)`
//! sets the next step `Δn = θ · ⌈n · g⌉` in the uphill direction, where `θ` grows by one with
//! every consecutive step in the same direction (the reference's momentum): far from the optimum
//! the steps are large, near it they shrink to one worker. A step never more than doubles (or
//! halves) `n`, and never jumps onto or past a setting already known to be worse. The tuner keeps
//! a memory of the best recent settings (the paper's "last 20 intervals") and, once a step has
//! gone downhill, continues around the best setting instead of the last one.
//!
//! # What this fixes relative to the authors' public implementation (errata)
//! * **Dead band.** The reference always moves by at least one worker, so at the optimum it
//!   dithers ±1 forever. Here utilities within `dead_band` of each other are ties, broken towards
//!   fewer workers, and once the search has bracketed the optimum to `resolution` the tuner
//!   *holds*. While holding it still follows a changed optimum, as the paper requires: a change of
//!   the held setting's utility by more than `change_threshold` on two consecutive intervals
//!   restarts the search (the threshold adapts to the measured noise), and it probes a few workers
//!   up or down every `probe_every` intervals (backing off to `probe_every_max` while probes keep
//!   confirming the optimum).
//! * **Settling.** The first `settle_intervals` intervals after any change are discarded: workers
//!   that just started (or stopped) make the interval's throughput a blend of two settings.
//! * **Best-configuration memory.** The reference's cache evicts its newest entry; here the oldest
//!   entry is evicted and a re-scored setting replaces its old score.
//! * **Idle workers.** A stage's throughput is measured over its busy time (see `pool`), which
//!   keeps a starved stage from looking slow itself, but also hides that it is starved: its
//!   busy-time throughput is its capacity, which more workers keep raising whether or not the
//!   transfer has any use for it (a read-bound run left the network stage at 3–6 streams and the
//!   write stage at 11 writers where one of each was the optimum). Scoring what the stage
//!   delivered instead couples the stages (a starved stage's utility then moves with the
//!   bottleneck's, and both tuners climbed in step). So an observation may carry the workers in
//!   use (the mean number busy over the interval), and the tuner reads it as a constraint, not a
//!   utility: a stage keeping fewer than `saturation` of its workers busy has no use for the
//!   rest, whatever it waits for, and is cut to `⌈in use / saturation⌉`, which becomes a ceiling
//!   the search stays under (the utility still chooses below it: above a knee, workers that
//!   share a cap are all busy alike); a stage below the share that needs all its workers keeps
//!   them but gets no more. The ceiling lifts once the stage keeps `lift` of its workers busy at
//!   it, i.e. has become the bottleneck; between the two shares it holds, so a stage near the
//!   boundary does not alternate. Waiting downstream is not use either: a network worker blocked
//!   in a send because the receiver leaves its stream unread (its writers have chunks enough) is
//!   busy by the clock but not by the network, so the sender counts the receiver's held streams
//!   out of the network stage's workers in use (`send`, `WriterState::held_streams`); otherwise
//!   a write-bound transfer's network stage climbed on the megabytes each new stream's socket
//!   buffers swallow once (3 → 21 streams where one carried the writers' 134 Mbit/s).
//!
//! # A full bottleneck (model)
//! A stream added at a bottleneck that is already full buys no capacity, only a share of it:
//! with `m` other streams on a link of capacity `C`, a transfer's `n` streams get `n·C/(n+m)`,
//! so a transfer sharing the link sees each added stream pay (`C·m/(n+m)²`) and eq. 2 climbs,
//! as does every other transfer's tuner in reply: four transfers on one 300 Mbit/s bottleneck
//! ran 21 workers where one ran 3, and under CUBIC 41. The loss term is meant to stop this
//! (Falcon's argument), but on a buffer of a BDP or more loss stays far below the 2% a stream
//! must buy. A full bottleneck is seen in delay instead: its queue stands. So an observation may
//! carry the streams' standing queue (smoothed RTT minus minimum RTT, over the minimum), and
//! while it is at least `full_queue` the stage gets no more streams than it has (a ceiling, as
//! for idle workers; the utility still chooses below it, so a transfer alone on the link keeps
//! moving down to the fewest streams that fill it). The ceiling lifts once the queue is below
//! half of that: capacity came free. The two signals cover each other's blind spot: a deep
//! buffer shows a full link in delay and little in loss, a shallow one in loss (eq. 2) and
//! little in delay. A link whose streams are each window-limited (the wide-area case the paper
//! tunes for) has no queue until their sum reaches its rate, so the search climbs as before
//! and stops where the link is full.
//!
//! # Bracket refinement (model)
//! Once the optimum is bracketed, the next candidate is the knee of the stage model the paper's
//! testbeds are built on — throughput rises linearly with workers up to a cap, `T(n) = min(n·p,
//! C)` — estimated from the memory as `C / p` with `C` the highest throughput and `p` the highest
//! throughput per worker seen. Only the utility decides whether that candidate is kept, so a stage
//! that does not follow the model costs probes, not correctness; without a usable knee the larger
//! side of the bracket is bisected.

use thiserror::Error;

/// Which of the paper's utility functions scores a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Utility {
    /// Eq. 1, `T / K^n`: read and write stages.
    Io,
    /// Eq. 2, `T / K^n − B·L·T`: the network stage (loss is charged).
    Network,
}

impl Utility {
    /// The utility of running `workers` workers at `throughput` with `loss` (a ratio in 0..=1).
    pub fn value(self, config: &TunerConfig, workers: usize, throughput: f64, loss: f64) -> f64 {
        let exponent = i32::try_from(workers).unwrap_or(i32::MAX);
        let base = throughput / config.k.powi(exponent);
        match self {
            Utility::Io => base,
            Utility::Network => base - config.b * loss * throughput,
        }
    }
}

/// Tuning parameters. [`TunerConfig::default`] gives the paper's values and the errata's fixes.
#[derive(Debug, Clone, PartialEq)]
pub struct TunerConfig {
    /// Concurrency penalty base `K` of eq. 1–2. Default 1.02: adding a worker must buy at least
    /// 2% more throughput.
    pub k: f64,
    /// Loss penalty `B` of eq. 2. Default 10 (keeps loss below 1–2% for Cubic/Reno, §3.1).
    pub b: f64,
    /// Fewest workers. Default 1.
    pub min_workers: usize,
    /// Most workers. Default 64 (eq. 1 is concave only below 1/ln K ≈ 50 workers).
    pub max_workers: usize,
    /// Worker count of the first interval. Default 1 (the paper tests 1, then 2).
    pub initial_workers: usize,
    /// Intervals discarded after each change before the setting is scored. Default 1.
    pub settle_intervals: u32,
    /// Relative utility difference below which two settings tie (ties go to fewer workers).
    /// Default 0.02, i.e. `K − 1`: a difference smaller than one worker's penalty is not worth a
    /// move.
    pub dead_band: f64,
    /// Relative width, in workers, to which the optimum is bracketed before holding. Default 0.1.
    pub resolution: f64,
    /// Relative change of the held setting's utility (on two consecutive intervals) that restarts
    /// the search. Default 0.05; raised automatically to four times the utility's measured
    /// relative spread while holding, so noisy stages do not restart on noise.
    pub change_threshold: f64,
    /// Intervals held before the first probe around the held setting. Default 8.
    pub probe_every: u32,
    /// Longest spacing between probes after confirming probes doubled it. Default 16. Probes
    /// alternate up and down, so a changed optimum that leaves the held utility unchanged is
    /// found within twice this many intervals; each probe costs two intervals away from the held
    /// setting.
    pub probe_every_max: u32,
    /// Entries in the best-configuration memory. Default 20 (the paper's last 20 intervals).
    pub memory: usize,
    /// Share of its workers a stage must keep busy not to be cut (see "Idle workers").
    /// Default 0.8.
    pub saturation: f64,
    /// Share of its workers a stage must keep busy at its ceiling for the ceiling to lift.
    /// Default 0.95: a bottleneck's workers are busy all the time but for the moments between
    /// one piece of work and the next.
    pub lift: f64,
    /// Standing queue, as a fraction of the base RTT, at which the network stage's bottleneck
    /// counts as full and the stage gets no more streams (see "A full bottleneck"); the ceiling
    /// lifts below half of it. Default 0.25: more than a lone BBR flow's probing (pacing gain
    /// 1.25 for one round in eight) or a window-limited stream's bursts put there.
    pub full_queue: f64,
}

impl Default for TunerConfig {
    fn default() -> Self {
        TunerConfig {
            k: 1.02,
            b: 10.0,
            min_workers: 1,
            max_workers: 64,
            initial_workers: 1,
            settle_intervals: 1,
            dead_band: 0.02,
            resolution: 0.1,
            change_threshold: 0.05,
            probe_every: 8,
            probe_every_max: 16,
            memory: 20,
            saturation: 0.8,
            lift: 0.95,
            full_queue: 0.25,
        }
    }
}

/// A tuner configuration or observation that cannot be used.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TunerError {
    /// A configuration field is out of range.
    #[error("tuner config `{field}` = {value}: must be {allowed}")]
    Config {
        /// The field's name.
        field: &'static str,
        /// Its value, printed.
        value: String,
        /// The allowed form.
        allowed: &'static str,
    },
    /// An observation field is out of range.
    #[error("observation `{field}` = {value}: must be {allowed}")]
    Observation {
        /// The field's name.
        field: &'static str,
        /// Its value.
        value: f64,
        /// The allowed form.
        allowed: &'static str,
    },
}

impl TunerConfig {
    /// Checks every field; the error names the first bad one and its allowed range.
    pub fn validate(&self) -> Result<(), TunerError> {
        fn bad(field: &'static str, value: impl ToString, allowed: &'static str) -> TunerError {
            TunerError::Config { field, value: value.to_string(), allowed }
        }
        if !(self.k.is_finite() && self.k > 1.0) {
            return Err(bad("k", self.k, "a finite number > 1"));
        }
        if !(self.b.is_finite() && self.b >= 0.0) {
            return Err(bad("b", self.b, "a finite number >= 0"));
        }
        if self.min_workers == 0 {
            return Err(bad("min_workers", self.min_workers, ">= 1"));
        }
        if self.max_workers < self.min_workers {
            return Err(bad("max_workers", self.max_workers, ">= min_workers"));
        }
        if !(self.min_workers..=self.max_workers).contains(&self.initial_workers) {
            return Err(bad("initial_workers", self.initial_workers, "within min_workers..=max_workers"));
        }
        for (field, value) in [
            ("dead_band", self.dead_band),
            ("resolution", self.resolution),
            ("change_threshold", self.change_threshold),
        ] {
            if !(value.is_finite() && (0.0..1.0).contains(&value)) {
                return Err(bad(field, value, "a number in 0..1"));
            }
        }
        if self.probe_every == 0 {
            return Err(bad("probe_every", self.probe_every, ">= 1"));
        }
        if self.probe_every_max < self.probe_every {
            return Err(bad("probe_every_max", self.probe_every_max, ">= probe_every"));
        }
        if self.memory < 2 {
            return Err(bad("memory", self.memory, ">= 2"));
        }
        if !(self.saturation.is_finite() && self.saturation > 0.0 && self.saturation <= 1.0) {
            return Err(bad("saturation", self.saturation, "a number in (0, 1]"));
        }
        if !(self.lift.is_finite() && self.lift >= self.saturation && self.lift <= 1.0) {
            return Err(bad("lift", self.lift, "a number in saturation..=1"));
        }
        if !(self.full_queue.is_finite() && self.full_queue > 0.0) {
            return Err(bad("full_queue", self.full_queue, "a number > 0"));
        }
        Ok(())
    }
}

/// What one stage did during one probe interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Workers that ran during the interval.
    pub workers: usize,
    /// Throughput achieved (any unit, the same for every interval, e.g. bytes/s).
    pub throughput: f64,
    /// Loss ratio (retransmitted over sent), 0..=1; 0 for storage stages.
    pub loss: f64,
    /// Mean number of workers busy during the interval, if measured (see "Idle workers").
    pub in_use: Option<f64>,
    /// Network stage: the standing queue its streams saw during the interval, as a fraction of
    /// their base round-trip time (TCP's smoothed RTT minus its minimum, over the minimum), if
    /// measured (see "A full bottleneck").
    pub queuing: Option<f64>,
}

impl Observation {
    fn validate(&self) -> Result<(), TunerError> {
        if !(self.throughput.is_finite() && self.throughput >= 0.0) {
            return Err(TunerError::Observation {
                field: "throughput",
                value: self.throughput,
                allowed: "a finite number >= 0",
            });
        }
        if !(self.loss.is_finite() && (0.0..=1.0).contains(&self.loss)) {
            return Err(TunerError::Observation {
                field: "loss",
                value: self.loss,
                allowed: "a ratio in 0..=1",
            });
        }
        if let Some(in_use) = self.in_use.filter(|u| !(u.is_finite() && *u >= 0.0)) {
            return Err(TunerError::Observation { field: "in_use", value: in_use, allowed: "a finite number >= 0" });
        }
        if let Some(queuing) = self.queuing.filter(|q| !(q.is_finite() && *q >= 0.0)) {
            return Err(TunerError::Observation { field: "queuing", value: queuing, allowed: "a finite number >= 0" });
        }
        Ok(())
    }
}

/// What a [`StageTuner`] is doing, for progress displays and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Gradient search towards the optimum.
    Searching,
    /// Holding the bracketed optimum (the dead band).
    Holding,
    /// Trying one step away from the held setting.
    Probing,
}

/// One scored setting.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score {
    workers: usize,
    utility: f64,
    throughput: f64,
}

/// The best-configuration memory: the most recent scored settings, one entry per worker count,
/// evicting the oldest (the reference evicts the newest, so it forgets what it just learned).
#[derive(Debug, Clone)]
struct Memory {
    entries: Vec<Score>,
    capacity: usize,
}

impl Memory {
    fn record(&mut self, score: Score) {
        self.entries.retain(|e| e.workers != score.workers);
        if self.entries.len() >= self.capacity {
            self.entries.remove(0);
        }
        self.entries.push(score);
    }

    /// The best entry: the highest utility, except that among the entries within `dead_band` of
    /// it the one with the fewest workers wins ("use only what you need").
    fn best(&self, dead_band: f64) -> Option<Score> {
        let top = self.entries.iter().map(|e| e.utility).fold(f64::NEG_INFINITY, f64::max);
        let floor = top - dead_band * top.abs();
        self.entries
            .iter()
            .filter(|e| e.utility >= floor)
            .min_by_key(|e| e.workers)
            .copied()
    }

    fn nearest_below(&self, workers: usize) -> Option<usize> {
        self.entries.iter().map(|e| e.workers).filter(|&w| w < workers).max()
    }

    fn nearest_above(&self, workers: usize) -> Option<usize> {
        self.entries.iter().map(|e| e.workers).filter(|&w| w > workers).min()
    }

    fn knows(&self, workers: usize) -> bool {
        self.entries.iter().any(|e| e.workers == workers)
    }

    /// The knee `C / p` of the linear-then-capped model (see the module comment).
    fn knee(&self) -> Option<usize> {
        let cap = self.entries.iter().map(|e| e.throughput).fold(0.0, f64::max);
        let per_worker = self
            .entries
            .iter()
            .map(|e| e.throughput / e.workers as f64)
            .fold(0.0, f64::max);
        if cap <= 0.0 || per_worker <= 0.0 {
            return None;
        }
        // The fewest workers that reach the cap; the utility decides against the neighbours.
        let knee = (cap / per_worker - 1e-9).ceil();
        let largest = self.entries.iter().map(|e| e.workers).max().unwrap_or(0);
        // Only a setting scored beyond the knee shows the cap; below it the stage looks linear
        // and the knee would just be the largest setting tried.
        (knee.is_finite() && knee >= 1.0 && (knee as usize) < largest).then_some(knee as usize)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Search,
    /// `reference` is the held setting's averaged (utility, throughput); `spread` the average
    /// relative deviation of single intervals from it (the measurement noise).
    Hold { reference: Option<(f64, f64)>, spread: f64, held_for: u32, deviations: u32 },
    Probe { home: Score, spread: f64, up: bool },
}

/// Marlin's tuner for one stage: observations in, the next worker count out.
///
/// ```
/// use braid_transfer::tuner::{Observation, StageTuner, TunerConfig, Utility};
///
/// let mut tuner = StageTuner::new(TunerConfig::default(), Utility::Io).unwrap();
/// let mut workers = tuner.workers();
/// for _ in 0..40 {
///     // A stage whose workers each move 60 units, up to 300 in total: the optimum is 5.
///     let throughput = (workers as f64 * 60.0).min(300.0);
///     workers = tuner.observe(Observation { workers, throughput, loss: 0.0, in_use: None, queuing: None }).unwrap();
/// }
/// assert_eq!(workers, 5);
/// ```
#[derive(Debug, Clone)]
pub struct StageTuner {
    config: TunerConfig,
    utility: Utility,
    current: usize,
    settle_left: u32,
    memory: Memory,
    mode: Mode,
    last: Option<Score>,
    direction: i64,
    momentum: u32,
    probe_spacing: u32,
    probe_up_next: bool,
    restarted: bool,
    probe_retried: bool,
    /// The most workers the stage was last seen to have use for (see "Idle workers").
    ceiling: Option<usize>,
    /// The most streams the network stage had when its bottleneck was last seen full (see "A
    /// full bottleneck").
    full_at: Option<usize>,
}

impl StageTuner {
    /// A tuner starting at `config.initial_workers`; the config is validated.
    pub fn new(config: TunerConfig, utility: Utility) -> Result<Self, TunerError> {
        config.validate()?;
        Ok(StageTuner {
            current: config.initial_workers,
            settle_left: config.settle_intervals,
            memory: Memory { entries: Vec::new(), capacity: config.memory },
            mode: Mode::Search,
            last: None,
            direction: 1,
            momentum: 0,
            probe_spacing: config.probe_every,
            probe_up_next: true,
            restarted: false,
            probe_retried: false,
            ceiling: None,
            full_at: None,
            utility,
            config,
        })
    }

    /// The worker count the stage should run now.
    pub fn workers(&self) -> usize {
        self.current
    }

    /// What the tuner is doing.
    pub fn phase(&self) -> Phase {
        match self.mode {
            Mode::Search => Phase::Searching,
            Mode::Hold { .. } => Phase::Holding,
            Mode::Probe { .. } => Phase::Probing,
        }
    }

    /// The configuration in use.
    pub fn config(&self) -> &TunerConfig {
        &self.config
    }

    /// Reports one interval and returns the worker count for the next one.
    ///
    /// An interval whose `workers` differs from [`StageTuner::workers`] (the change was not
    /// applied yet) or that falls in the settle time after a change is not scored.
    pub fn observe(&mut self, observation: Observation) -> Result<usize, TunerError> {
        observation.validate()?;
        if observation.workers != self.current {
            return Ok(self.current);
        }
        if self.settle_left > 0 {
            self.settle_left -= 1;
            return Ok(self.current);
        }
        if let Some(in_use) = observation.in_use {
            let n = self.current as f64;
            if in_use < self.config.saturation * n {
                let needed = (in_use / self.config.saturation).ceil();
                let useful = if needed.is_finite() { (needed as usize).max(self.config.min_workers) } else { self.current };
                if useful < self.current {
                    self.cut_to(useful);
                    return Ok(self.current);
                }
                // Not busy enough to have use for more: the search stays at or below this.
                self.ceiling = Some(self.ceiling.map_or(self.current, |c| c.min(self.current)));
            } else if in_use >= self.config.lift * n && self.ceiling.is_some_and(|c| self.current >= c) {
                self.ceiling = None;
            }
        }
        if let Some(queuing) = observation.queuing {
            if queuing >= self.config.full_queue {
                self.full_at = Some(self.full_at.map_or(self.current, |c| c.min(self.current)));
            } else if queuing < 0.5 * self.config.full_queue {
                self.full_at = None;
            }
        }
        let score = Score {
            workers: self.current,
            utility: self.utility.value(&self.config, self.current, observation.throughput, observation.loss),
            throughput: observation.throughput,
        };
        let next = match self.mode {
            Mode::Search => {
                self.memory.record(score);
                let next = self.search_step(score);
                self.last = Some(score);
                next
            }
            Mode::Hold { reference, spread, held_for, deviations } => {
                self.hold_step(score, reference, spread, held_for, deviations)
            }
            Mode::Probe { home, spread, up } => self.probe_step(score, home, spread, up),
        };
        self.move_to(next);
        Ok(self.current)
    }

    /// Cuts the stage to `useful` workers and searches on below that ceiling (see "Idle
    /// workers"). Scores of larger settings measured waiting, not work, so they leave the memory;
    /// a probe upwards that ends here confirmed the held setting.
    fn cut_to(&mut self, useful: usize) {
        if let Mode::Probe { up: true, .. } = self.mode {
            self.probe_spacing = self.probe_spacing.saturating_mul(2).min(self.config.probe_every_max);
            self.probe_retried = false;
        }
        self.memory.entries.retain(|e| e.workers <= useful);
        self.last = None;
        self.direction = -1;
        self.momentum = 0;
        self.ceiling = Some(useful);
        self.mode = Mode::Search;
        self.move_to(useful);
    }

    /// The most workers the search may go to.
    fn highest(&self) -> usize {
        let full = self.full_at.unwrap_or(usize::MAX);
        self.ceiling.unwrap_or(self.config.max_workers).min(self.config.max_workers).min(full)
    }

    fn move_to(&mut self, next: usize) {
        let next = next.clamp(self.config.min_workers, self.highest());
        if next != self.current {
            self.current = next;
            self.settle_left = self.config.settle_intervals;
        }
    }

    /// The smallest worker difference the tuner resolves around `workers`.
    fn tolerance(&self, workers: usize) -> usize {
        ((workers as f64 * self.config.resolution).floor() as usize).max(1)
    }

    /// How far a probe down from a held setting goes: at least the resolution, and far enough that
    /// the concurrency penalty alone (`K^δ`) differs by twice the dead band. Above a stage's knee
    /// the utility falls by exactly `K` per worker, so a one-worker probe with `dead_band = K − 1`
    /// could never see that fewer workers are better.
    fn probe_distance(&self, workers: usize) -> usize {
        let penalty = (2.0 * (1.0 + self.config.dead_band).ln() / self.config.k.ln()).ceil();
        let penalty = if penalty.is_finite() { penalty.clamp(1.0, 1e6) as usize } else { 1 };
        self.tolerance(workers).max(penalty)
    }

    fn search_step(&mut self, score: Score) -> usize {
        let Some(best) = self.memory.best(self.config.dead_band) else {
            return score.workers;
        };
        if best.workers == score.workers {
            if let Some(next) = self.climb(score) {
                return next;
            }
        }
        self.refine(best)
    }

    /// The paper's step rule from the best (current) setting; `None` when no new setting lies
    /// in the uphill direction.
    fn climb(&mut self, score: Score) -> Option<usize> {
        let n = score.workers;
        let (direction, step) = match self.last {
            Some(prev) if prev.workers != n && prev.utility > 0.0 => {
                let direction = if n > prev.workers { 1 } else { -1 };
                self.momentum = if direction == self.direction { self.momentum + 1 } else { 1 };
                let distance = n.abs_diff(prev.workers) as f64;
                let gradient = (score.utility - prev.utility).abs() / prev.utility / distance;
                let raw = (n as f64 * gradient).ceil().min(1e6) as usize;
                (direction, raw.max(1).saturating_mul(self.momentum as usize))
            }
            _ => {
                self.momentum = 1;
                // The first step of a restarted search goes as far as a probe, so the gain
                // shows above the noise; the very first step is the paper's 1 → 2.
                let step = if self.restarted { self.probe_distance(n) } else { self.tolerance(n) };
                (self.direction, step)
            }
        };
        self.direction = direction;
        let target = if direction > 0 {
            let mut target = n.saturating_add(step.min(n)).min(self.highest());
            if let Some(worse) = self.memory.nearest_above(n) {
                if target >= worse {
                    target = n + (worse - n) / 2;
                }
            }
            target
        } else {
            let mut target = n.saturating_sub(step.min(n / 2).max(1)).max(self.config.min_workers);
            if let Some(worse) = self.memory.nearest_below(n) {
                if target <= worse {
                    target = n - (n - worse) / 2;
                }
            }
            target
        };
        (target != n && !self.memory.knows(target)).then_some(target)
    }

    /// Continues around the best setting once a step has gone downhill (or the climb is blocked).
    fn refine(&mut self, best: Score) -> usize {
        let b = best.workers;
        let below = self.memory.nearest_below(b);
        let above = self.memory.nearest_above(b);
        let tol = self.tolerance(b);
        // Exclusive bounds of the bracket around the best setting.
        let lo = below.unwrap_or(self.config.min_workers - 1);
        let hi = above.unwrap_or(self.config.max_workers.saturating_add(1)).min(self.highest().saturating_add(1));
        if let Some(knee) = self.memory.knee().filter(|&k| k > lo && k < hi) {
            if knee == b {
                // The model's knee is the best setting. Loss (eq. 2) or a worker that only
                // partly fills the cap can make fewer workers as good: score that once, then
                // hold. The periodic probes correct a knee the stage does not follow.
                let fewer = b.saturating_sub(tol);
                if fewer > lo && !self.memory.knows(fewer) {
                    return fewer;
                }
                self.enter_hold();
                return b;
            }
            if !self.memory.knows(knee) {
                return knee;
            }
            // The knee was scored and lost: the optimum lies between it and the best setting.
            let gap = knee.abs_diff(b);
            if gap <= tol {
                self.enter_hold();
                return b;
            }
            return if knee > b { b + gap / 2 } else { b - gap / 2 };
        }
        if above.is_none() && b < self.highest() {
            self.direction = 1;
            self.last = Some(best);
            return (b + tol).min(self.highest());
        }
        if below.is_none() && b > self.config.min_workers {
            self.direction = -1;
            self.last = Some(best);
            return b.saturating_sub(tol).max(self.config.min_workers);
        }
        let (gap_lo, gap_hi) = (b - below.unwrap_or(b), above.unwrap_or(b) - b);
        if gap_lo.max(gap_hi) <= tol {
            self.enter_hold();
            return b;
        }
        if gap_hi >= gap_lo {
            b + gap_hi / 2
        } else {
            b - gap_lo / 2
        }
    }

    fn enter_hold(&mut self) {
        self.mode = Mode::Hold { reference: None, spread: 0.0, held_for: 0, deviations: 0 };
    }

    fn restart(&mut self, from: Score, direction: i64, prev: Option<Score>) -> usize {
        self.memory.entries.clear();
        if let Some(prev) = prev {
            self.memory.record(prev);
        }
        self.memory.record(from);
        self.mode = Mode::Search;
        self.last = prev;
        self.direction = direction;
        self.momentum = 0;
        self.probe_spacing = self.config.probe_every;
        self.restarted = true;
        let next = self.search_step(from);
        self.last = Some(from);
        next
    }

    fn hold_step(
        &mut self,
        score: Score,
        reference: Option<(f64, f64)>,
        spread: f64,
        held_for: u32,
        deviations: u32,
    ) -> usize {
        let n = score.workers;
        let mut deviations = deviations;
        let mut spread = spread;
        let (utility, throughput) = match reference {
            None => (score.utility, score.throughput),
            Some((utility, throughput)) => {
                let change = (score.utility - utility).abs() / utility.abs().max(f64::MIN_POSITIVE);
                if change > self.config.change_threshold.max(4.0 * spread) {
                    deviations += 1;
                    if deviations >= 2 {
                        return self.restart(score, 1, None);
                    }
                    (utility, throughput)
                } else {
                    deviations = 0;
                    spread += 0.25 * (change - spread);
                    // An average over a few intervals, so one noisy interval does not move it.
                    (
                        utility + 0.25 * (score.utility - utility),
                        throughput + 0.25 * (score.throughput - throughput),
                    )
                }
            }
        };
        let held_for = held_for + 1;
        if held_for >= self.probe_spacing {
            let can_up = n < self.highest();
            let can_down = n > self.config.min_workers;
            let up = if self.probe_up_next { can_up } else { !can_down };
            self.probe_up_next = !self.probe_up_next;
            if can_up || can_down {
                let home = Score { workers: n, utility, throughput };
                self.mode = Mode::Probe { home, spread, up };
                // Up by the resolution (a larger step could jump past a better setting); down
                // far enough for the concurrency penalty to show (see `probe_distance`).
                return if up { n + self.tolerance(n) } else { n.saturating_sub(self.probe_distance(n)) };
            }
        }
        self.mode = Mode::Hold { reference: Some((utility, throughput)), spread, held_for, deviations };
        n
    }

    fn probe_step(&mut self, score: Score, home: Score, spread: f64, up: bool) -> usize {
        // A probe wins only by more than the dead band and twice the measured noise (the probe
        // is one interval, the home setting an average).
        let margin = self.config.dead_band.max(2.0 * spread);
        if score.utility > home.utility + margin * home.utility.abs() {
            return self.restart(score, if up { 1 } else { -1 }, Some(home));
        }
        if score.utility < home.utility - margin * home.utility.abs() {
            // Clearly worse: the held setting is confirmed on this side; back off.
            self.probe_spacing = self.probe_spacing.saturating_mul(2).min(self.config.probe_every_max);
        } else if !self.probe_retried {
            // Within the noise: try the same side once more soon rather than trust one interval.
            self.probe_spacing = self.config.probe_every;
            self.probe_up_next = up;
            self.probe_retried = true;
            return self.return_home(home, spread);
        } else {
            // Within the noise twice: a tie, which goes to the held (fewer or settled) setting.
            self.probe_spacing = self.probe_spacing.saturating_mul(2).min(self.config.probe_every_max);
        }
        self.probe_retried = false;
        self.return_home(home, spread)
    }

    fn return_home(&mut self, home: Score, spread: f64) -> usize {
        self.mode = Mode::Hold {
            reference: Some((home.utility, home.throughput)),
            spread,
            held_for: 0,
            deviations: 0,
        };
        home.workers
    }
}

/// The three stages Marlin tunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Reading the source storage into the staging area.
    Read,
    /// Sending chunks over the network streams.
    Network,
    /// Writing received chunks to the destination storage.
    Write,
}

/// One worker count per stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// Reader workers.
    pub read: usize,
    /// Network streams.
    pub network: usize,
    /// Writer workers.
    pub write: usize,
}

impl Concurrency {
    /// Workers over all stages.
    pub fn total(&self) -> usize {
        self.read + self.network + self.write
    }
}

/// One interval's observations of the three stages.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageObservations {
    /// The read stage (its loss is ignored).
    pub read: Observation,
    /// The network stage.
    pub network: Observation,
    /// The write stage (its loss is ignored).
    pub write: Observation,
}

/// Marlin: an independent [`StageTuner`] per stage (eq. 1 for read and write, eq. 2 for the
/// network), any of which may be pinned to a fixed count (`--read N` etc.).
#[derive(Debug, Clone)]
pub struct MarlinTuner {
    stages: [StageSlot; 3],
}

#[derive(Debug, Clone)]
enum StageSlot {
    Tuned(Box<StageTuner>),
    Pinned(usize),
}

impl StageSlot {
    fn workers(&self) -> usize {
        match self {
            StageSlot::Tuned(t) => t.workers(),
            StageSlot::Pinned(n) => *n,
        }
    }

    fn observe(&mut self, observation: Observation) -> Result<usize, TunerError> {
        match self {
            StageSlot::Tuned(t) => t.observe(observation),
            StageSlot::Pinned(n) => {
                observation.validate()?;
                Ok(*n)
            }
        }
    }
}

impl MarlinTuner {
    /// Tunes every stage with `config`.
    pub fn new(config: TunerConfig) -> Result<Self, TunerError> {
        Ok(MarlinTuner {
            stages: [
                StageSlot::Tuned(Box::new(StageTuner::new(config.clone(), Utility::Io)?)),
                StageSlot::Tuned(Box::new(StageTuner::new(config.clone(), Utility::Network)?)),
                StageSlot::Tuned(Box::new(StageTuner::new(config, Utility::Io)?)),
            ],
        })
    }

    /// Pins `stage` to `workers` (no tuning for it); `workers` must be at least 1.
    pub fn pin(mut self, stage: Stage, workers: usize) -> Result<Self, TunerError> {
        if workers == 0 {
            return Err(TunerError::Config {
                field: "pinned workers",
                value: workers.to_string(),
                allowed: ">= 1",
            });
        }
        self.stages[stage as usize] = StageSlot::Pinned(workers);
        Ok(self)
    }

    /// The tuner of `stage`, unless it is pinned.
    pub fn stage(&self, stage: Stage) -> Option<&StageTuner> {
        match &self.stages[stage as usize] {
            StageSlot::Tuned(t) => Some(t),
            StageSlot::Pinned(_) => None,
        }
    }

    /// The worker counts to run now.
    pub fn concurrency(&self) -> Concurrency {
        Concurrency {
            read: self.stages[0].workers(),
            network: self.stages[1].workers(),
            write: self.stages[2].workers(),
        }
    }

    /// Reports one interval of every stage; returns the next worker counts.
    pub fn observe(&mut self, observations: &StageObservations) -> Result<Concurrency, TunerError> {
        let read = Observation { loss: 0.0, ..observations.read };
        let write = Observation { loss: 0.0, ..observations.write };
        Ok(Concurrency {
            read: self.stages[0].observe(read)?,
            network: self.stages[1].observe(observations.network)?,
            write: self.stages[2].observe(write)?,
        })
    }
}

/// The Falcon-style baseline (the ablation): one shared worker count for all three stages, tuned
/// on the end-to-end throughput (the slowest stage's) with eq. 2.
#[derive(Debug, Clone)]
pub struct FalconTuner {
    inner: Box<StageTuner>,
}

impl FalconTuner {
    /// A shared tuner with `config`.
    pub fn new(config: TunerConfig) -> Result<Self, TunerError> {
        Ok(FalconTuner { inner: Box::new(StageTuner::new(config, Utility::Network)?) })
    }

    /// The worker counts to run now (all equal).
    pub fn concurrency(&self) -> Concurrency {
        let n = self.inner.workers();
        Concurrency { read: n, network: n, write: n }
    }

    /// The shared tuner.
    pub fn stage(&self) -> &StageTuner {
        &self.inner
    }

    /// Reports one interval; the transfer's throughput is the slowest stage's.
    pub fn observe(&mut self, observations: &StageObservations) -> Result<Concurrency, TunerError> {
        let throughput = observations
            .read
            .throughput
            .min(observations.network.throughput)
            .min(observations.write.throughput);
        let workers = observations.network.workers;
        self.inner.observe(Observation { workers, throughput, loss: observations.network.loss, in_use: None, queuing: None })?;
        Ok(self.concurrency())
    }
}

/// Marlin or the Falcon-style ablation (`--tuner falcon`).
#[derive(Debug, Clone)]
pub enum Tuner {
    /// Per-stage tuning.
    Marlin(MarlinTuner),
    /// One shared concurrency.
    Falcon(FalconTuner),
}

impl Tuner {
    /// The worker counts to run now.
    pub fn concurrency(&self) -> Concurrency {
        match self {
            Tuner::Marlin(t) => t.concurrency(),
            Tuner::Falcon(t) => t.concurrency(),
        }
    }

    /// Reports one interval; returns the next worker counts.
    pub fn observe(&mut self, observations: &StageObservations) -> Result<Concurrency, TunerError> {
        match self {
            Tuner::Marlin(t) => t.observe(observations),
            Tuner::Falcon(t) => t.observe(observations),
        }
    }
}

#[cfg(test)]
mod tests;
