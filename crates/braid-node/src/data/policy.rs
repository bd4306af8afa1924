//! Protocol ratio policies (seed 000 §IV-C): decide the target ratio,
//! episode by episode.

use std::time::Duration;

use braid_core::Instant;

use super::Ratio;

/// Sets the target ratio of a data stream. The interceptor calls
/// [`RatioPolicy::on_episode`] at the end of every episode with the
/// episode's reward; the returned ratio holds for the next episode.
pub trait RatioPolicy: Send {
    /// The ratio in force now.
    fn ratio(&self) -> Ratio;
    /// An episode ended at `now` and earned `reward`; the next ratio.
    fn on_episode(&mut self, now: Instant, reward: f64) -> Ratio;
    /// An episode ended at `now` that carries no reward (a warm-up
    /// episode, or one the application left idle); the next ratio.
    fn on_unlearned(&mut self, _now: Instant) -> Ratio {
        self.ratio()
    }
    /// Episode length.
    fn episode(&self) -> Duration;
}

/// A fixed ratio (§IV-C1, `StaticRatio`): TCP only, Braid only, or any
/// mix; the reference in experiments.
///
/// ```
/// use braid_node::data::{Ratio, RatioPolicy, StaticRatio};
/// let mut p = StaticRatio::new(Ratio::new(1, 2));
/// assert_eq!(p.on_episode(braid_core::Instant::ZERO, 42.0), Ratio::new(1, 2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StaticRatio {
    ratio: Ratio,
    episode: Duration,
}

impl StaticRatio {
    /// Always `ratio` (episodes of 1 s, for statistics only).
    pub fn new(ratio: Ratio) -> Self {
        StaticRatio { ratio, episode: Duration::from_secs(1) }
    }
}

impl RatioPolicy for StaticRatio {
    fn ratio(&self) -> Ratio {
        self.ratio
    }
    fn on_episode(&mut self, _now: Instant, _reward: f64) -> Ratio {
        self.ratio
    }
    fn episode(&self) -> Duration {
        self.episode
    }
}
