//! The sans-IO core of the DATA interceptor (seed 000 §IV-A): releases a
//! stream's messages through a window of messages in flight, assigns each
//! its transport with the selection policy, measures each episode and
//! feeds its reward to the ratio policy.
//!
//! The release rate adapts by itself: a message leaves the window when its
//! transport took it (the node's `Sent`), so the stream goes as fast as
//! the mix of transports accepts it, and a transport that is slow on the
//! current path holds its share of the window longer. That coupling is
//! what makes the throughput of an episode a function of the ratio that
//! the learner can climb.

use std::time::Duration;

use braid_core::Instant;

use super::{Ratio, RatioPolicy, SelectionPolicy};
use crate::{ConfigError, Transport};

/// What an episode's reward is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RewardKind {
    /// Throughput, in MB/s (10⁶ bytes per second).
    Throughput,
    /// Throughput in MB/s minus `weight` × the mean time (ms) from release
    /// to `Sent`: penalises ratios that queue messages.
    ThroughputLatency {
        /// MB/s worth one millisecond.
        weight: f64,
    },
}

/// Parameters of the release window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlowConfig {
    /// Messages released and not yet taken by their transport. Default 16
    /// (the paper's "16 messages on the wire").
    pub window: usize,
    /// The reward. Default throughput.
    pub reward: RewardKind,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig { window: 16, reward: RewardKind::Throughput }
    }
}

impl FlowConfig {
    /// Check every field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.window == 0 {
            return Err(ConfigError { field: "window", expected: "at least 1 message" });
        }
        if let RewardKind::ThroughputLatency { weight } = self.reward {
            if !(weight >= 0.0 && weight.is_finite()) {
                return Err(ConfigError { field: "reward.weight", expected: "a number >= 0" });
            }
        }
        Ok(())
    }
}

/// One episode, as measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EpisodeReport {
    /// Episode number, from 1.
    pub episode: u64,
    /// Length, seconds.
    pub secs: f64,
    /// Signed ratio in force during the episode (−1 TCP … 1 Braid).
    pub ratio: f64,
    /// Fraction of the episode's messages that actually went over Braid.
    pub observed_braid_fraction: f64,
    /// Bytes taken by the transports per second.
    pub throughput_bps: f64,
    /// Mean time from release to `Sent`, seconds.
    pub mean_latency_secs: f64,
    /// The reward given to the ratio policy (`None`: the stream was
    /// application-limited, no learning step).
    pub reward: Option<f64>,
    /// Messages sent over TCP and over Braid.
    pub tcp_messages: u64,
    /// See `tcp_messages`.
    pub braid_messages: u64,
    /// Signed ratio for the next episode.
    pub next_ratio: f64,
}

/// The interceptor's state machine for one stream (one destination).
///
/// ```
/// use braid_core::Instant;
/// use braid_node::data::{DataFlow, FlowConfig, PatternSelection, Ratio, StaticRatio};
/// use std::time::Duration;
/// let mut f = DataFlow::new(
///     Box::new(StaticRatio::new(Ratio::new(1, 2))),
///     Box::new(PatternSelection::new(Ratio::new(1, 2))),
///     FlowConfig { window: 2, ..Default::default() },
///     Instant::ZERO,
/// ).unwrap();
/// let a = f.release(Instant::ZERO);
/// let b = f.release(Instant::ZERO);
/// assert_ne!(a, b);
/// assert!(!f.can_release());
/// f.on_sent(1_000_000, Duration::from_millis(10));
/// let rep = f.on_time(f.deadline()).unwrap();
/// assert_eq!(rep.throughput_bps, 1e6);
/// ```
pub struct DataFlow {
    policy: Box<dyn RatioPolicy>,
    selection: Box<dyn SelectionPolicy>,
    config: FlowConfig,
    in_flight: usize,
    /// Start of the current episode.
    start: Instant,
    episode: u64,
    bytes: u64,
    completions: u64,
    latency: Duration,
    tcp: u64,
    braid: u64,
    idle: Duration,
}

impl DataFlow {
    /// A stream starting at `now` with the policy's current ratio.
    pub fn new(
        policy: Box<dyn RatioPolicy>,
        mut selection: Box<dyn SelectionPolicy>,
        config: FlowConfig,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        selection.set_ratio(policy.ratio());
        Ok(DataFlow {
            policy,
            selection,
            config,
            in_flight: 0,
            start: now,
            episode: 0,
            bytes: 0,
            completions: 0,
            latency: Duration::ZERO,
            tcp: 0,
            braid: 0,
            idle: Duration::ZERO,
        })
    }

    /// The ratio in force.
    pub fn ratio(&self) -> Ratio {
        self.policy.ratio()
    }

    /// Messages released and not yet taken.
    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// Whether the window has room.
    pub fn can_release(&self) -> bool {
        self.in_flight < self.config.window
    }

    /// Release one message: its transport.
    pub fn release(&mut self, _now: Instant) -> Transport {
        self.in_flight += 1;
        let t = self.selection.select();
        match t {
            Transport::Braid => self.braid += 1,
            _ => self.tcp += 1,
        }
        t
    }

    /// The window had room but the application had nothing to send for
    /// `d`. An episode idle for more than half its length is
    /// application-limited: its throughput says nothing about the ratio,
    /// and the policy is not told.
    pub fn add_idle(&mut self, d: Duration) {
        self.idle += d;
    }

    /// A released message of `bytes` was taken by its transport,
    /// `latency` after its release.
    pub fn on_sent(&mut self, bytes: u64, latency: Duration) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.bytes += bytes;
        self.completions += 1;
        self.latency += latency;
    }

    /// A released message failed: it leaves the window, earns nothing.
    pub fn on_failed(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// When the current episode ends.
    pub fn deadline(&self) -> Instant {
        self.start + self.policy.episode()
    }

    /// Call at (or after) [`DataFlow::deadline`]: ends the episode, runs
    /// the ratio policy and switches the selection to the new ratio.
    pub fn on_time(&mut self, now: Instant) -> Option<EpisodeReport> {
        if now < self.deadline() {
            return None;
        }
        let secs = (now - self.start).as_secs_f64().max(1e-9);
        let throughput = self.bytes as f64 / secs;
        let mean_latency = if self.completions > 0 { self.latency.as_secs_f64() / self.completions as f64 } else { 0.0 };
        let ratio = self.policy.ratio();
        let learn = self.idle.as_secs_f64() <= secs / 2.0 && self.completions > 0;
        let reward = learn.then(|| match self.config.reward {
            RewardKind::Throughput => throughput / 1e6,
            RewardKind::ThroughputLatency { weight } => throughput / 1e6 - weight * mean_latency * 1e3,
        });
        let next = match reward {
            Some(r) => self.policy.on_episode(now, r),
            None => self.policy.ratio(),
        };
        self.selection.set_ratio(next);
        self.episode += 1;
        let total = (self.tcp + self.braid).max(1) as f64;
        let report = EpisodeReport {
            episode: self.episode,
            secs,
            ratio: ratio.signed(),
            observed_braid_fraction: self.braid as f64 / total,
            throughput_bps: throughput,
            mean_latency_secs: mean_latency,
            reward,
            tcp_messages: self.tcp,
            braid_messages: self.braid,
            next_ratio: next.signed(),
        };
        tracing::info!(
            target: "braid_node::data",
            episode = report.episode,
            ratio = report.ratio,
            throughput_mbps = report.throughput_bps * 8e-6,
            reward = ?report.reward,
            next = report.next_ratio,
            "data episode"
        );
        self.start = now;
        self.bytes = 0;
        self.completions = 0;
        self.latency = Duration::ZERO;
        self.tcp = 0;
        self.braid = 0;
        self.idle = Duration::ZERO;
        Some(report)
    }
}
