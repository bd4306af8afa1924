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
//!
//! The window is divided between the transports by the ratio (Braid's
//! part: `window × braid fraction`, rounded, at least one message each
//! when both have a share). With [`FlowConfig::spill`] on (the default) a
//! message whose picked transport has its part of the window full goes
//! over the other transport if that one has room: a transport that
//! stalls (its congestion window shrank, its buffer is full) never idles
//! the other while the window has room. Without it the stream runs at
//! `min(rate_t / share_t)` over the two transports, and every ratio away
//! from the transports' actual shares of the path wastes capacity
//! (measured over the emulator: a 50/50 mix at less than half of either
//! transport alone when one of them is throttled by the other). The
//! ratio still sets how the window is divided, and so how much of the
//! stream each transport carries when both keep up; the ratios 0 (all
//! TCP) and 1 (all Braid) never spill.
//!
//! The reward's throughput counts bytes *delivered* (acknowledged by the
//! receiving transport, [`DataFlow::on_delivered`]), not bytes taken.
//! A transport takes bytes into its send buffer faster than the path
//! carries them while that buffer has room (Braid's is 3 BDP in `braid
//! bench data`, tens of MB on a long fat path), so every move of the
//! ratio toward the transport with room earns a burst of taken bytes that
//! is no throughput at all: a bias the learner climbs (measured over the
//! emulator with taken bytes: the learner settled on all Braid at 150 ms
//! where TCP alone was 15% faster, and leaned to Braid at 3 ms where TCP
//! was 50% faster). The release window still moves on taken bytes: it
//! paces handing messages to the transports, not the reward.
//!
//! Episode length. The paper's episodes last 1 s, about 100 round trips
//! on its 10 ms test path. On a short fast path a whole transfer can be
//! over in a few such episodes (400 MiB at 0 ms RTT: 3.6 s over the
//! emulator), before any learner has found its ratio; on a long path 1 s
//! is only a few round trips, and shorter would measure mostly noise.
//! With [`FlowConfig::adaptive_episode`] (the default) an episode lasts
//! `delivery_times` times the shortest time any message took from
//! release to delivery (a round trip plus the transports' buffering),
//! at least `min`, at most the ratio policy's episode (1 s): the paper's
//! 1 s from 150 ms RTT up, 100 ms on a data-centre path. Until the first
//! delivery the policy's episode holds.

use std::time::Duration;

use braid_core::Instant;

use super::{Ratio, RatioPolicy, SelectionPolicy};
use crate::{ConfigError, Transport};

/// What an episode's reward is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RewardKind {
    /// Delivered throughput, in MB/s (10⁶ bytes per second).
    Throughput,
    /// Delivered throughput in MB/s minus `weight` × the mean time (ms)
    /// from release to `Sent`: penalises ratios that queue messages.
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
    /// Send a message over the other transport when the picked one's part
    /// of the window is full (see the module documentation). Default on.
    pub spill: bool,
    /// Episodes at the start of a stream that are measured and reported
    /// but not learned from. The first episode holds the connections'
    /// set-up and slow start, whatever the ratio: its reward says little
    /// about the ratio. Default 1: at the learner's initial 50-50 both
    /// transports start together, and the endpoint probes that follow
    /// ([`crate::data::LearnerConfig::probe_endpoints`]) find both
    /// running (measured at 150 ms RTT: probes from cold cost 16% of a
    /// 400 MiB transfer, each transport's slow start in turn).
    pub warmup_episodes: u32,
    /// Episodes scaled to the path (see the module documentation);
    /// `None`: always the ratio policy's episode. Default
    /// `AdaptiveEpisode::default()`.
    pub adaptive_episode: Option<AdaptiveEpisode>,
}

/// Episode length as a multiple of the stream's delivery time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveEpisode {
    /// Shortest episode. Default 100 ms.
    pub min: Duration,
    /// Episode length in delivery times (the shortest release-to-delivery
    /// time seen on the stream). Default 8.
    pub delivery_times: u32,
}

impl Default for AdaptiveEpisode {
    fn default() -> Self {
        AdaptiveEpisode { min: Duration::from_millis(100), delivery_times: 8 }
    }
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            window: 16,
            reward: RewardKind::Throughput,
            spill: true,
            warmup_episodes: 1,
            adaptive_episode: Some(AdaptiveEpisode::default()),
        }
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
        if let Some(a) = self.adaptive_episode {
            if a.min.is_zero() {
                return Err(ConfigError { field: "adaptive_episode.min", expected: "a positive duration" });
            }
            if a.delivery_times == 0 {
                return Err(ConfigError { field: "adaptive_episode.delivery_times", expected: "at least 1" });
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
    /// Bytes delivered (acknowledged by the receiving transport) per
    /// second: the reward's throughput.
    pub delivered_bps: f64,
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
    /// Messages sent over the other transport than the selection policy
    /// picked, because the pick's part of the window was full.
    pub spilled: u64,
    /// The shortest release-to-delivery time seen on the stream so far,
    /// seconds (`None` before the first delivery): what adaptive episodes
    /// scale with.
    pub delivery_secs: Option<f64>,
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
/// f.on_sent(a, 1_000_000, Duration::from_millis(10));
/// f.on_delivered(500_000, Duration::from_millis(30));
/// // Episodes of 8 delivery times, at least 100 ms.
/// assert_eq!(f.deadline(), Instant::ZERO + Duration::from_millis(240));
/// let rep = f.on_time(Instant::ZERO + Duration::from_secs(1)).unwrap();
/// assert_eq!(rep.throughput_bps, 1e6);
/// assert_eq!(rep.delivered_bps, 5e5);
/// ```
pub struct DataFlow {
    policy: Box<dyn RatioPolicy>,
    selection: Box<dyn SelectionPolicy>,
    config: FlowConfig,
    in_flight: usize,
    /// Of `in_flight`, those over Braid.
    in_flight_braid: usize,
    /// Messages sent over the other transport than picked, this episode.
    spilled: u64,
    /// Start of the current episode.
    start: Instant,
    episode: u64,
    bytes: u64,
    delivered: u64,
    completions: u64,
    latency: Duration,
    tcp: u64,
    braid: u64,
    idle: Duration,
    /// Shortest release-to-delivery time seen.
    min_delivery: Option<Duration>,
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
            in_flight_braid: 0,
            spilled: 0,
            start: now,
            episode: 0,
            bytes: 0,
            delivered: 0,
            completions: 0,
            latency: Duration::ZERO,
            tcp: 0,
            braid: 0,
            idle: Duration::ZERO,
            min_delivery: None,
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

    /// Braid's part of the window under the current ratio (TCP has the
    /// rest), at least one message each when both have a share.
    fn braid_part(&self) -> usize {
        let r = self.policy.ratio();
        let w = self.config.window;
        if r.braid() == 0 {
            return 0;
        }
        if r.tcp() == 0 {
            return w;
        }
        let part = (w as f64 * r.braid_fraction()).round() as usize;
        part.clamp(1, w.saturating_sub(1).max(1))
    }

    /// Release one message: its transport (the selection policy's pick,
    /// or the other transport if the pick's part of the window is full
    /// and spilling is on).
    pub fn release(&mut self, _now: Instant) -> Transport {
        let picked = self.selection.select();
        let mut t = picked;
        let r = self.policy.ratio();
        if self.config.spill && r.braid() > 0 && r.tcp() > 0 {
            let braid_room = self.in_flight_braid < self.braid_part();
            let tcp_room = self.in_flight - self.in_flight_braid < self.config.window - self.braid_part();
            t = match picked {
                Transport::Braid if !braid_room && tcp_room => Transport::Tcp,
                Transport::Tcp if !tcp_room && braid_room => Transport::Braid,
                p => p,
            };
            if t != picked {
                self.spilled += 1;
            }
        }
        self.in_flight += 1;
        if t == Transport::Braid {
            self.in_flight_braid += 1;
        }
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

    fn leave(&mut self, t: Transport) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if t == Transport::Braid {
            self.in_flight_braid = self.in_flight_braid.saturating_sub(1);
        }
    }

    /// A message released over `t`, of `bytes`, was taken by its
    /// transport, `latency` after its release.
    pub fn on_sent(&mut self, t: Transport, bytes: u64, latency: Duration) {
        self.leave(t);
        self.bytes += bytes;
        self.completions += 1;
        self.latency += latency;
    }

    /// A message of `bytes`, released `latency` ago, was delivered: the
    /// receiving transport acknowledged it (for a transport that cannot
    /// know, call this at `Sent`). This is what the reward's throughput
    /// counts; `latency` sets the length of adaptive episodes.
    pub fn on_delivered(&mut self, bytes: u64, latency: Duration) {
        self.delivered += bytes;
        if !latency.is_zero() {
            self.min_delivery = Some(self.min_delivery.map_or(latency, |m| m.min(latency)));
        }
    }

    /// Length of the current episode.
    pub fn episode_length(&self) -> Duration {
        let cap = self.policy.episode();
        match (self.config.adaptive_episode, self.min_delivery) {
            (Some(a), Some(d)) => d.saturating_mul(a.delivery_times).clamp(a.min.min(cap), cap),
            _ => cap,
        }
    }

    /// A message released over `t` failed: it leaves the window, earns
    /// nothing.
    pub fn on_failed(&mut self, t: Transport) {
        self.leave(t);
    }

    /// When the current episode ends.
    pub fn deadline(&self) -> Instant {
        self.start + self.episode_length()
    }

    /// Call at (or after) [`DataFlow::deadline`]: ends the episode, runs
    /// the ratio policy and switches the selection to the new ratio.
    pub fn on_time(&mut self, now: Instant) -> Option<EpisodeReport> {
        if now < self.deadline() {
            return None;
        }
        let secs = (now - self.start).as_secs_f64().max(1e-9);
        let throughput = self.bytes as f64 / secs;
        let delivered = self.delivered as f64 / secs;
        let mean_latency = if self.completions > 0 { self.latency.as_secs_f64() / self.completions as f64 } else { 0.0 };
        let ratio = self.policy.ratio();
        let learn = self.idle.as_secs_f64() <= secs / 2.0
            && self.completions > 0
            && self.episode >= u64::from(self.config.warmup_episodes);
        let reward = learn.then(|| match self.config.reward {
            RewardKind::Throughput => delivered / 1e6,
            RewardKind::ThroughputLatency { weight } => delivered / 1e6 - weight * mean_latency * 1e3,
        });
        let total = (self.tcp + self.braid).max(1) as f64;
        let next = match reward {
            Some(r) => self.policy.on_episode(now, r),
            None => self.policy.on_unlearned(now),
        };
        self.selection.set_ratio(next);
        self.episode += 1;
        let report = EpisodeReport {
            episode: self.episode,
            secs,
            ratio: ratio.signed(),
            observed_braid_fraction: self.braid as f64 / total,
            throughput_bps: throughput,
            delivered_bps: delivered,
            mean_latency_secs: mean_latency,
            reward,
            tcp_messages: self.tcp,
            braid_messages: self.braid,
            next_ratio: next.signed(),
            spilled: self.spilled,
            delivery_secs: self.min_delivery.map(|d| d.as_secs_f64()),
        };
        tracing::info!(
            target: "braid_node::data",
            episode = report.episode,
            ratio = report.ratio,
            throughput_mbps = report.throughput_bps * 8e-6,
            delivered_mbps = report.delivered_bps * 8e-6,
            reward = ?report.reward,
            next = report.next_ratio,
            "data episode"
        );
        self.start = now;
        self.bytes = 0;
        self.delivered = 0;
        self.completions = 0;
        self.latency = Duration::ZERO;
        self.tcp = 0;
        self.braid = 0;
        self.spilled = 0;
        self.idle = Duration::ZERO;
        Some(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{PatternSelection, StaticRatio};

    fn flow(r: Ratio, window: usize, spill: bool) -> DataFlow {
        DataFlow::new(
            Box::new(StaticRatio::new(r)),
            Box::new(PatternSelection::new(r)),
            FlowConfig { window, spill, ..Default::default() },
            Instant::ZERO,
        )
        .unwrap()
    }

    /// Release until the window is full; TCP never completes (stalled),
    /// Braid completes at once. Returns the Braid share of `n` releases.
    fn braid_share_with_tcp_stalled(f: &mut DataFlow, n: usize) -> f64 {
        let mut braid = 0;
        for _ in 0..n {
            if !f.can_release() {
                break;
            }
            let t = f.release(Instant::ZERO);
            if t == Transport::Braid {
                braid += 1;
                f.on_sent(t, 1, Duration::ZERO);
            }
        }
        braid as f64 / n as f64
    }

    #[test]
    fn a_stalled_transport_spills_to_the_other_within_the_window() {
        // 50/50, window 16: TCP's part is 8 messages; once 8 TCP messages
        // are stuck, every further message goes over Braid.
        let mut f = flow(Ratio::new(1, 2), 16, true);
        let share = braid_share_with_tcp_stalled(&mut f, 1000);
        assert!(share > 0.98, "braid share {share}");
        assert_eq!(f.in_flight(), 8, "TCP holds exactly its part of the window");
        let rep = f.on_time(f.deadline()).unwrap();
        // Half the picks are Braid anyway; the TCP picks spill.
        assert!(rep.spilled > 450, "{rep:?}");
    }

    #[test]
    fn without_spilling_a_stalled_transport_blocks_the_stream() {
        let mut f = flow(Ratio::new(1, 2), 16, false);
        let share = braid_share_with_tcp_stalled(&mut f, 1000);
        // The window fills with stuck TCP messages after ~32 releases.
        assert!(!f.can_release());
        assert!(share < 0.02, "braid share {share}");
    }

    /// Records the rewards it gets.
    struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<f64>>>);
    impl RatioPolicy for Recorder {
        fn ratio(&self) -> Ratio {
            Ratio::new(1, 2)
        }
        fn on_episode(&mut self, _: Instant, reward: f64) -> Ratio {
            self.0.lock().unwrap().push(reward);
            self.ratio()
        }
        fn episode(&self) -> Duration {
            Duration::from_secs(1)
        }
    }

    #[test]
    fn the_reward_counts_delivered_bytes_not_bytes_taken() {
        let rewards = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut f = DataFlow::new(
            Box::new(Recorder(rewards.clone())),
            Box::new(PatternSelection::new(Ratio::new(1, 2))),
            FlowConfig { warmup_episodes: 1, ..Default::default() },
            Instant::ZERO,
        )
        .unwrap();
        // Warm-up: measured, not learned from.
        let t = f.release(Instant::ZERO);
        f.on_sent(t, 4_000_000, Duration::ZERO);
        f.on_delivered(4_000_000, Duration::ZERO);
        let rep = f.on_time(f.deadline()).unwrap();
        assert_eq!(rep.reward, None);
        // A send buffer swallows 30 MB; the path delivers 2 MB.
        for _ in 0..30 {
            let t = f.release(Instant::ZERO);
            f.on_sent(t, 1_000_000, Duration::ZERO);
        }
        f.on_delivered(2_000_000, Duration::ZERO);
        let rep = f.on_time(f.deadline()).unwrap();
        assert_eq!((rep.throughput_bps, rep.delivered_bps), (30e6, 2e6));
        assert_eq!(rep.reward, Some(2.0));
        assert_eq!(*rewards.lock().unwrap(), vec![2.0]);
    }

    #[test]
    fn pure_ratios_never_spill() {
        let mut f = flow(Ratio::new(0, 2), 4, true);
        for _ in 0..4 {
            assert_eq!(f.release(Instant::ZERO), Transport::Tcp);
        }
        assert!(!f.can_release(), "all TCP means all TCP, stalled or not");
        let mut f = flow(Ratio::new(2, 2), 4, true);
        for _ in 0..4 {
            assert_eq!(f.release(Instant::ZERO), Transport::Braid);
        }
    }

    #[test]
    fn when_both_keep_up_the_split_follows_the_ratio() {
        let mut f = flow(Ratio::new(1, 4), 16, true);
        let mut braid = 0;
        for _ in 0..400 {
            let t = f.release(Instant::ZERO);
            braid += usize::from(t == Transport::Braid);
            f.on_sent(t, 1, Duration::ZERO);
        }
        assert_eq!(braid, 100);
    }

    #[test]
    fn adaptive_episodes_scale_with_the_delivery_time_between_min_and_the_policy_episode() {
        let mut f = flow(Ratio::new(1, 2), 16, true);
        assert_eq!(f.episode_length(), Duration::from_secs(1), "before any delivery: the policy's");
        f.on_delivered(1, Duration::from_millis(400));
        assert_eq!(f.episode_length(), Duration::from_secs(1), "8 x 400 ms capped at 1 s");
        f.on_delivered(1, Duration::from_millis(50));
        assert_eq!(f.episode_length(), Duration::from_millis(400));
        f.on_delivered(1, Duration::from_millis(90));
        assert_eq!(f.episode_length(), Duration::from_millis(400), "the shortest delivery counts");
        f.on_delivered(1, Duration::from_millis(2));
        assert_eq!(f.episode_length(), Duration::from_millis(100), "at least min");
        assert_eq!(f.deadline(), Instant::ZERO + Duration::from_millis(100));
        let mut fixed = DataFlow::new(
            Box::new(StaticRatio::new(Ratio::new(1, 2))),
            Box::new(PatternSelection::new(Ratio::new(1, 2))),
            FlowConfig { adaptive_episode: None, ..Default::default() },
            Instant::ZERO,
        )
        .unwrap();
        fixed.on_delivered(1, Duration::from_millis(2));
        assert_eq!(fixed.episode_length(), Duration::from_secs(1));
    }

    #[test]
    fn the_learner_warms_up_at_50_50_then_probes_tcp_then_braid_then_keeps_the_better() {
        use crate::data::{LearnerConfig, TdLearner};
        let learner = TdLearner::new(LearnerConfig::default()).unwrap();
        let mut f =
            DataFlow::new(Box::new(learner), Box::new(PatternSelection::new(Ratio::new(1, 2))), FlowConfig::default(), Instant::ZERO)
                .unwrap();
        // Delivered MB per episode by ratio: Braid is the faster here.
        let rate = |r: Ratio| if r == Ratio::BRAID { 90_000_000 } else if r == Ratio::TCP { 50_000_000 } else { 30_000_000 };
        let mut ratios = Vec::new();
        for _ in 0..4 {
            let r = f.ratio();
            ratios.push(r);
            let t = f.release(Instant::ZERO);
            f.on_sent(t, 1, Duration::ZERO);
            f.on_delivered(rate(r), Duration::from_millis(20));
            let rep = f.on_time(f.deadline()).unwrap();
            assert_eq!(rep.reward.is_none(), ratios.len() == 1, "only the warm-up is not learned from: {rep:?}");
        }
        assert_eq!(ratios, [Ratio::new(1, 2), Ratio::TCP, Ratio::BRAID, Ratio::BRAID]);
    }
}
