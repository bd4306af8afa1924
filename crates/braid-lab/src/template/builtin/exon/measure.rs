//! What one measurement of one peer (Exon or TCP) is given and gives back,
//! and how a rate is computed from arrival times, the same way for both.

use std::path::PathBuf;
use std::time::Duration;

use braid::exon_net::{DurabilityStats, SocketConfig};

use super::message::Tally;

/// Settings of one measurement.
#[derive(Debug, Clone)]
pub struct RunCfg {
    /// Message (request, reply) size in bytes.
    pub size: usize,
    /// Messages (one-way) or requests (RPC, over all actors) at most.
    pub messages: u64,
    /// Concurrent request/reply loops (RPC).
    pub actors: usize,
    /// The measurement ends after this long even if messages remain.
    pub limit: Duration,
    /// How long Exon may take after the measurement to have every accepted
    /// message acknowledged (then the rest counts as lost).
    pub drain: Duration,
    /// Exon's socket settings.
    pub exon: SocketConfig,
    /// Keep each node's clock and journal in this directory (fresh files
    /// every run): Exon with durable records, an fsync per group commit.
    pub journal_dir: Option<PathBuf>,
}

/// What one peer achieved.
#[derive(Debug, Clone, Default)]
pub struct PeerResult {
    /// Messages (or completed requests) counted in the window.
    pub delivered: u64,
    /// The window: from the first send to the last counted arrival, or to
    /// the time limit.
    pub window: Duration,
    /// RPC latencies of the requests counted.
    pub latencies: Vec<Duration>,
    /// Messages the sender accepted (requests and replies for RPC).
    pub accepted: u64,
    /// Accepted but never delivered, after draining.
    pub lost: u64,
    /// Deliveries beyond the first of a message.
    pub duplicated: u64,
    /// Deliveries that did not decode, or arrived out of order over TCP.
    pub corrupt: u64,
    /// Exon only: accepted messages whose outcome was "in doubt".
    pub in_doubt: u64,
    /// Whether every accepted message was acknowledged within the drain.
    pub drained: bool,
    /// Exon only: datagrams sent / fragments retransmitted by the sending node.
    pub datagrams: u64,
    pub retransmitted: u64,
    /// The receiver's tally, for windows other than the default (fairness).
    pub tally: Tally,
    /// When the sender started, since the run's epoch.
    pub start: Duration,
    /// Exon only: the durability counters of node a (sender, RPC client)
    /// and node b (receiver, RPC server), as their drivers counted them
    /// (all zero without a journal).
    pub durability: [DurabilityStats; 2],
}

impl PeerResult {
    /// Messages or requests per second over the window.
    pub fn rate(&self) -> f64 {
        self.delivered as f64 / self.window.as_secs_f64().max(1e-9)
    }

    /// A latency quantile in milliseconds (nearest rank), `None` without
    /// samples.
    pub fn latency_ms(&self, q: f64) -> Option<f64> {
        if self.latencies.is_empty() {
            return None;
        }
        Some(braid_emu::bench::quantile(&self.latencies, q).as_secs_f64() * 1e3)
    }
}

/// The end of the measurement window: the last arrival if all `target`
/// arrived before `deadline`, else the deadline.
pub fn window_end(arrived: u64, last: Option<Duration>, target: u64, deadline: Duration) -> Duration {
    match last {
        Some(t) if arrived >= target => t.min(deadline),
        _ => deadline,
    }
}

/// The window of an RPC run started at `start` and the latencies counted
/// in it, from every answered request's (completion time, latency): the
/// window ends at the last completion if all of `cfg.messages` completed
/// before the time limit, else at the limit.
pub fn rpc_window(completions: &[(Duration, Duration)], start: Duration, cfg: &RunCfg) -> (Duration, Vec<Duration>) {
    let deadline = start + cfg.limit;
    let last = completions.iter().map(|&(t, _)| t).max();
    let end = window_end(completions.len() as u64, last, cfg.messages, deadline);
    let counted = completions.iter().filter(|&&(t, _)| t >= start && t <= end).map(|&(_, l)| l).collect();
    (end, counted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_ends_at_last_arrival_only_when_complete() {
        let s = Duration::from_secs;
        assert_eq!(window_end(10, Some(s(3)), 10, s(5)), s(3));
        assert_eq!(window_end(9, Some(s(3)), 10, s(5)), s(5));
        assert_eq!(window_end(10, Some(s(7)), 10, s(5)), s(5));
        assert_eq!(window_end(0, None, 10, s(5)), s(5));
    }

    #[test]
    fn rpc_window_counts_completions_inside_it() {
        let ms = Duration::from_millis;
        let cfg = RunCfg {
            size: 8,
            messages: 3,
            actors: 1,
            limit: ms(100),
            drain: ms(10),
            exon: SocketConfig::default(),
            journal_dir: None,
        };
        // All three done by 40 ms: the window ends at the last, and a
        // completion before the start is not counted.
        let all = [(ms(5), ms(1)), (ms(20), ms(2)), (ms(40), ms(3))];
        assert_eq!(rpc_window(&all, ms(10), &cfg), (ms(40), vec![ms(2), ms(3)]));
        // Two of three: the window runs to the time limit.
        let some = [(ms(20), ms(2)), (ms(150), ms(4))];
        assert_eq!(rpc_window(&some, ms(10), &cfg), (ms(110), vec![ms(2)]));
        assert_eq!(rpc_window(&[], ms(10), &cfg), (ms(110), vec![]));
    }

    #[test]
    fn rate_and_quantiles() {
        let r = PeerResult {
            delivered: 500,
            window: Duration::from_millis(250),
            latencies: (1..=100).map(Duration::from_millis).collect(),
            ..Default::default()
        };
        assert_eq!(r.rate(), 2000.0);
        assert_eq!(r.latency_ms(0.5), Some(50.0));
        assert_eq!(r.latency_ms(0.99), Some(99.0));
        assert_eq!(PeerResult::default().latency_ms(0.5), None);
    }
}
