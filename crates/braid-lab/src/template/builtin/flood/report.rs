//! What a flood run reports: every measured window, and per target the
//! legitimate throughput without and with the flood, their ratio against
//! the bar, the flood actually sent, and the receiver's state and
//! counters during it against the stated bound.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Target;

/// Issue 17's bar: legitimate transfers keep at least this share of their
/// throughput under the flood.
pub const MIN_RATIO: f64 = 0.8;

/// One measured window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Window {
    /// With the flood (else a baseline).
    pub flood: bool,
    /// Its length: the flood's, from its first to its last datagram, or
    /// the baseline's `secs`.
    pub secs: f64,
    /// Legitimate payload bytes the receiver got in it.
    pub bytes: u64,
    /// Legitimate messages.
    pub messages: u64,
    /// Legitimate payload throughput, Mbit/s.
    pub mbps: f64,
    /// Legitimate messages per second.
    pub msgs_per_s: f64,
    /// Forged datagrams sent (0 in a baseline).
    pub flood_packets: u64,
    /// Their rate, per second.
    pub flood_pps: f64,
    /// Failed `sendmmsg` calls of the attacker.
    pub send_errors: u64,
    /// Most state the receiver held in the window: connections (Braid) or
    /// sessions (Exon).
    pub held_max: u64,
    /// Most peers it kept.
    pub peers_max: u64,
    /// Growth of the process's resident memory from the window's start to
    /// its largest sample, KiB (the receiver runs in this process).
    pub rss_growth_kib: u64,
    /// Datagrams the kernel dropped at the receiver's socket in the window
    /// (its receive buffer was full: legitimate ones among them are lost),
    /// where readable.
    pub socket_drops: Option<u64>,
    /// The receiver's counters over the window.
    pub counters: BTreeMap<String, u64>,
}

/// One target's run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FloodRun {
    /// Braid or Exon.
    pub target: Target,
    /// The emulated link the legitimate traffic crosses.
    pub link: String,
    /// Always true: the protocols run authenticated and encrypted.
    pub encrypted: bool,
    /// A baseline window's length, seconds.
    pub secs: f64,
    /// Forged datagrams per second asked for.
    pub flood_pps_asked: u64,
    /// Forged datagrams per flood window asked for.
    pub flood_packets_asked: u64,
    /// The attacker's sockets (source address and port pairs).
    pub sources: usize,
    /// Distinct source addresses among them.
    pub source_addresses: usize,
    /// Mean legitimate throughput of the baseline windows, Mbit/s.
    pub baseline_mbps: f64,
    /// Mean legitimate throughput of the flood windows, Mbit/s.
    pub flood_mbps: f64,
    /// `flood_mbps / baseline_mbps`.
    pub ratio: f64,
    /// Messages per second, baseline and under flood.
    pub baseline_msgs_per_s: f64,
    pub flood_msgs_per_s: f64,
    /// Fewest forged datagrams any flood window sent.
    pub flood_packets: u64,
    /// Forged datagrams over all flood windows.
    pub flood_packets_total: u64,
    /// Mean rate the flood windows achieved, per second.
    pub flood_pps: f64,
    /// The receiver's state during the floods (maxima).
    pub receiver_state: BTreeMap<String, u64>,
    /// The receiver's counters summed over the flood windows.
    pub receiver_counters: BTreeMap<String, u64>,
    /// The bound the receiver's state is held to, in words.
    pub state_bound: String,
    /// It held.
    pub within_bound: bool,
    /// ratio ≥ [`MIN_RATIO`], every flood window sent what was asked, and
    /// the state stayed within its bound.
    pub pass: bool,
    /// Every window, in the order measured.
    pub windows: Vec<Window>,
}

/// The receiver's counters that say what work the flood cost it (Exon:
/// Diffie-Hellmans done as responder, cookie replies sent, initiations
/// dropped by the per-source limit), recorded on their own.
pub const FLOOD_WORK_COUNTERS: &[&str] = &["diffie_hellmans", "cookies_sent", "rate_limited"];

/// Most the process's resident memory may grow during a flood window:
/// 8 MiB, under 84 bytes per forged datagram of a 100,000-datagram flood,
/// so a receiver that kept anything per spoofed packet (even a queued
/// answer) would exceed it. (Measured: up to about 5 MiB for Braid and
/// 2 MiB for Exon, what receive buffers and the allocator take.)
pub const RSS_BOUND_KIB: u64 = 8 << 10;

/// Most state the receiver may hold under the flood: the legitimate
/// connection only (Braid), or one peer with at most four sessions (Exon:
/// previous, current and two awaiting confirmation). Spoofed packets may
/// add nothing.
pub fn state_bound(target: Target) -> (&'static str, u64, u64) {
    match target {
        Target::Braid => ("at most 1 connection (the legitimate one) and 8 MiB of resident memory more", 1, 1),
        Target::Exon => ("at most 4 sessions, 1 peer (the legitimate sender) and 8 MiB of resident memory more", 4, 1),
    }
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = v.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Per-target summary of `windows`.
#[allow(clippy::too_many_arguments)]
pub fn summarize(
    target: Target,
    link: String,
    secs: f64,
    flood_pps_asked: u64,
    flood_packets_asked: u64,
    sources: usize,
    source_addresses: usize,
    windows: Vec<Window>,
) -> FloodRun {
    let base = || windows.iter().filter(|w| !w.flood);
    let flood = || windows.iter().filter(|w| w.flood);
    let baseline_mbps = mean(base().map(|w| w.mbps));
    let flood_mbps = mean(flood().map(|w| w.mbps));
    let ratio = if baseline_mbps > 0.0 { flood_mbps / baseline_mbps } else { 0.0 };
    let flood_packets = flood().map(|w| w.flood_packets).min().unwrap_or(0);
    let mut counters = BTreeMap::new();
    for w in flood() {
        for (k, v) in &w.counters {
            *counters.entry(k.clone()).or_insert(0) += v;
        }
    }
    let max = |it: &mut dyn Iterator<Item = u64>| it.max().unwrap_or(0);
    let mut state = BTreeMap::new();
    let (held_key, peers_key) = match target {
        Target::Braid => ("connections_max", "peers_max"),
        Target::Exon => ("sessions_max", "peers_max"),
    };
    let held = max(&mut flood().map(|w| w.held_max));
    let peers = max(&mut flood().map(|w| w.peers_max));
    state.insert(held_key.to_string(), held);
    state.insert(peers_key.to_string(), peers);
    let rss = max(&mut flood().map(|w| w.rss_growth_kib));
    state.insert("rss_growth_kib_max".into(), rss);
    state.insert("rss_growth_kib_max_baseline".into(), max(&mut base().map(|w| w.rss_growth_kib)));
    if let Some(d) = flood().map(|w| w.socket_drops).sum::<Option<u64>>() {
        state.insert("socket_drops".into(), d);
    }
    if let Some(d) = base().map(|w| w.socket_drops).sum::<Option<u64>>() {
        state.insert("socket_drops_baseline".into(), d);
    }
    let (bound, held_bound, peers_bound) = state_bound(target);
    let within_bound = held <= held_bound && peers <= peers_bound && rss <= RSS_BOUND_KIB;
    let enough = flood().count() > 0 && flood_packets >= flood_packets_asked;
    FloodRun {
        target,
        link,
        encrypted: true,
        secs,
        flood_pps_asked,
        flood_packets_asked,
        sources,
        source_addresses,
        baseline_mbps,
        flood_mbps,
        ratio,
        baseline_msgs_per_s: mean(base().map(|w| w.msgs_per_s)),
        flood_msgs_per_s: mean(flood().map(|w| w.msgs_per_s)),
        flood_packets,
        flood_packets_total: flood().map(|w| w.flood_packets).sum(),
        flood_pps: mean(flood().map(|w| w.flood_pps)),
        receiver_state: state,
        receiver_counters: counters,
        state_bound: bound.to_string(),
        within_bound,
        pass: ratio >= MIN_RATIO && enough && within_bound,
        windows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(flood: bool, mbps: f64, packets: u64, held: u64) -> Window {
        Window {
            flood,
            secs: 2.0,
            bytes: (mbps * 2.0 * 1e6 / 8.0) as u64,
            messages: 10,
            mbps,
            msgs_per_s: 5.0,
            flood_packets: packets,
            flood_pps: packets as f64 / 2.0,
            send_errors: 0,
            held_max: held,
            peers_max: held.min(1),
            rss_growth_kib: if flood { 300 } else { 100 },
            socket_drops: Some(if flood { 7 } else { 0 }),
            counters: BTreeMap::from([("retries_sent".to_string(), packets / 2)]),
        }
    }

    #[test]
    fn the_summary_compares_means_and_checks_the_bar_and_the_bound() {
        let windows = vec![w(false, 40.0, 0, 1), w(true, 36.0, 100_000, 1), w(true, 30.0, 100_500, 1), w(false, 44.0, 0, 1)];
        let r = summarize(Target::Braid, "l".into(), 2.0, 60_000, 100_000, 64, 64, windows);
        assert!((r.ratio - 33.0 / 42.0).abs() < 1e-12, "{}", r.ratio);
        assert!(!r.pass, "0.786 is under the bar");
        assert_eq!((r.flood_packets, r.flood_packets_total), (100_000, 200_500));
        assert_eq!(r.receiver_counters["retries_sent"], 100_250);
        assert_eq!(r.receiver_state["connections_max"], 1);
        assert_eq!(r.receiver_state["rss_growth_kib_max"], 300);
        assert_eq!(r.receiver_state["socket_drops"], 14);
        let windows = vec![w(false, 40.0, 0, 1), w(true, 36.0, 99_000, 1)];
        let r = summarize(Target::Braid, "l".into(), 2.0, 60_000, 100_000, 64, 64, windows);
        assert!(r.ratio >= MIN_RATIO && !r.pass, "too few forged datagrams");
        let windows = vec![w(false, 40.0, 0, 1), w(true, 36.0, 100_000, 2)];
        let r = summarize(Target::Braid, "l".into(), 2.0, 60_000, 100_000, 64, 64, windows);
        assert!(!r.within_bound && !r.pass, "a second connection is state a spoofer made");
        let windows = vec![w(false, 40.0, 0, 4), w(true, 36.0, 100_000, 4)];
        let r = summarize(Target::Exon, "l".into(), 2.0, 60_000, 100_000, 64, 64, windows.clone());
        assert!(r.within_bound && r.pass, "{r:?}");
        let mut grown = windows;
        grown[1].rss_growth_kib = RSS_BOUND_KIB + 1;
        let r = summarize(Target::Exon, "l".into(), 2.0, 60_000, 100_000, 64, 64, grown);
        assert!(!r.within_bound, "memory grew past the bound");
    }
}
