//! What a priority scenario measured: per-flow series, per-phase shares,
//! fairness, queuing delay and loss, and the stalls at priority switches.

use std::collections::BTreeMap;
use std::time::Duration;

use braid_link::LinkStats;
use braid_sim::{NodeId, Simulator};

use super::host::Host;
use super::{forward_stats, ScenarioConfig};

/// The outcome of a scenario (serialized as the `--json` report).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ScenarioReport {
    /// Scenario name.
    pub scenario: String,
    /// The link spec.
    pub link: String,
    /// Bottleneck rate, Mbit/s (10⁶ bit/s); `None` if unlimited.
    pub link_mbps: Option<f64>,
    /// Virtual seconds simulated.
    pub duration_secs: f64,
    /// Width of the throughput bins, seconds.
    pub bin_secs: f64,
    /// Per-flow results.
    pub flows: Vec<FlowResult>,
    /// Per-phase results.
    pub phases: Vec<PhaseResult>,
    /// Priority switches and the longest silence after each.
    pub switches: Vec<SwitchResult>,
    /// Queuing delay over the whole run (probe RTT minus the smallest), ms.
    pub queuing_delay_p50_ms: Option<f64>,
    /// 99th percentile of the queuing delay over the whole run, ms.
    pub queuing_delay_p99_ms: Option<f64>,
    /// The simulator's trace hash, 16 hex digits: equal for equal configs
    /// (`None` for emulator runs, which are not deterministic).
    pub trace_hash: Option<String>,
    /// Counters of the client → server link (the bottleneck direction).
    pub forward_link: LinkStats,
    /// Packets the bottleneck queue dropped, per bin.
    pub queue_drops: Vec<u64>,
}

/// One flow over the whole run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FlowResult {
    /// Its label.
    pub label: String,
    /// Its controller.
    pub cc: String,
    /// Bytes acknowledged in order.
    pub bytes: u64,
    /// Mean throughput from its start to its stop (or the end), Mbit/s.
    pub mean_mbps: f64,
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// `packets_lost / packets_sent`.
    pub loss: f64,
    /// Window reductions.
    pub congestion_events: u64,
    /// Retransmission timeouts.
    pub rto_count: u64,
    /// Throughput per bin, Mbit/s.
    pub throughput_mbps: Vec<f64>,
    /// What went wrong, if the connection failed.
    pub error: Option<String>,
}

/// One phase.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseResult {
    /// Its name.
    pub name: String,
    /// Start, seconds.
    pub start_secs: f64,
    /// End, seconds.
    pub end_secs: f64,
    /// Each flow's part of the phase.
    pub flows: Vec<PhaseFlow>,
    /// All flows' throughput over the link rate.
    pub utilization: Option<f64>,
    /// Jain's index over the flows active throughout the phase (`None` for
    /// fewer than two).
    pub jain: Option<f64>,
    /// Median queuing delay, ms.
    pub queuing_delay_p50_ms: Option<f64>,
    /// 99th percentile queuing delay, ms.
    pub queuing_delay_p99_ms: Option<f64>,
    /// Packets the senders declared lost over packets they sent (the
    /// flows that count them: all in the simulator, Braid's in the
    /// emulator, where kernel TCP's are not visible).
    pub loss: f64,
    /// Packets the bottleneck dropped (queue overflow or random loss) over
    /// packets offered to it, all flows together.
    pub bottleneck_loss: f64,
    /// Packets the bottleneck queue dropped.
    pub queue_drops: u64,
}

/// One flow in one phase.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PhaseFlow {
    /// The flow's label.
    pub label: String,
    /// Its priority at the start of the phase, if it has one.
    pub priority: Option<f64>,
    /// It ran throughout the phase.
    pub active: bool,
    /// Mean throughput (bytes acknowledged in order), Mbit/s.
    pub mbps: f64,
    /// `mbps` over the link rate.
    pub share_of_capacity: Option<f64>,
    /// `mbps` over the sum of all flows' `mbps` in the phase.
    pub share_of_total: f64,
}

/// One priority switch.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SwitchResult {
    /// The flow switched.
    pub label: String,
    /// When, seconds.
    pub at_secs: f64,
    /// The priority before.
    pub from: Option<f64>,
    /// The priority after.
    pub to: f64,
    /// The flow's smoothed RTT at the switch, ms.
    pub srtt_ms: f64,
    /// The longest time after the switch (within 10 s) without a packet
    /// sent by the flow, ms.
    pub longest_stall_ms: f64,
    /// `longest_stall_ms / srtt_ms`.
    pub stall_rtts: f64,
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn mbps(bytes: u64, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        bytes as f64 * 8.0 / s / 1e6
    } else {
        0.0
    }
}

/// Jain's fairness index: (Σx)² / (n·Σx²); `None` for fewer than two.
pub fn jain_index(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (x.len() > 1 && squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

/// The `q`-quantile (0 ≤ q ≤ 1, nearest rank) of unsorted values.
fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    Some(values[rank - 1])
}

/// Counters of every flow at one moment, cumulative since the start of
/// the run (one entry per flow, in the config's order).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Application bytes delivered in order (acknowledged, or read by the
    /// receiver).
    pub acked: Vec<u64>,
    /// Packets sent, for the flows that count them (Braid connections);
    /// 0 otherwise.
    pub sent: Vec<u64>,
    /// Packets declared lost, for the flows that count them.
    pub lost: Vec<u64>,
    /// Packets dropped by the bottleneck queue.
    pub queue_drops: u64,
    /// Packets offered to the bottleneck (forward direction).
    pub link_offered: u64,
    /// Packets the bottleneck dropped for any reason (forward direction).
    pub link_dropped: u64,
}

/// The final counters of one flow.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FlowCounters {
    /// Packets sent.
    pub packets_sent: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Window reductions.
    pub congestion_events: u64,
    /// Retransmission timeouts.
    pub rto_count: u64,
    /// What went wrong, if the flow failed.
    pub error: Option<String>,
}

/// One priority switch as recorded by whatever ran the flow.
#[derive(Debug, Clone, PartialEq)]
pub struct SwitchRecord {
    /// Index of the flow.
    pub flow: usize,
    /// When, from the start of the run.
    pub at: Duration,
    /// The priority before, if known.
    pub from: Option<f64>,
    /// The priority after.
    pub to: f64,
    /// The flow's smoothed RTT at the switch.
    pub srtt: Duration,
    /// The longest time after the switch without a packet sent.
    pub longest: Duration,
}

/// What one run of a scenario recorded, whoever ran it (the simulator
/// here, the emulator in `braid bench priority`): the input of
/// [`build_report`], so that both report the same figures computed the
/// same way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measurements {
    /// Edges of the throughput bins, from 0 to the duration.
    pub bins: Vec<Duration>,
    /// Counters at (at least) every bin edge, phase edge and flow start and
    /// stop; a missing time reads as all zeros.
    pub snapshots: BTreeMap<Duration, Snapshot>,
    /// Final counters per flow.
    pub flows: Vec<FlowCounters>,
    /// Delay probe: `(send time, RTT)` of every echo.
    pub probe: Vec<(Duration, Duration)>,
    /// Priority switches.
    pub switches: Vec<SwitchRecord>,
    /// Trace hash of a deterministic run.
    pub trace_hash: Option<String>,
    /// Counters of the bottleneck direction over the run.
    pub forward_link: LinkStats,
}

pub(super) fn report(
    cfg: &ScenarioConfig,
    sim: &Simulator<Host>,
    client_id: NodeId,
    bins: &[Duration],
    snapshots: &BTreeMap<Duration, Snapshot>,
) -> ScenarioReport {
    let host = sim.node(client_id);
    let client = host.client_app();
    let m = Measurements {
        bins: bins.to_vec(),
        snapshots: snapshots.clone(),
        flows: client
            .flows
            .iter()
            .map(|f| {
                let st = f
                    .conn
                    .and_then(|c| host.endpoint.connection_stats(c))
                    .unwrap_or_default();
                FlowCounters {
                    packets_sent: st.packets_sent,
                    packets_lost: st.packets_lost,
                    congestion_events: st.congestion_events,
                    rto_count: st.rto_count,
                    error: f.error.clone(),
                }
            })
            .collect(),
        probe: client
            .probe
            .as_ref()
            .map(|p| {
                p.samples
                    .iter()
                    .map(|&(t, rtt)| (t.since_epoch(), rtt))
                    .collect()
            })
            .unwrap_or_default(),
        switches: client
            .switches
            .iter()
            .map(|s| SwitchRecord {
                flow: s.flow,
                at: s.at.since_epoch(),
                from: s.from,
                to: s.to,
                srtt: s.srtt,
                longest: s.longest,
            })
            .collect(),
        trace_hash: Some(format!("{:016x}", sim.trace_hash())),
        forward_link: forward_stats(sim),
    };
    build_report(cfg, &m)
}

/// The report of a scenario from what a run recorded.
///
/// ```
/// use std::time::Duration;
/// use braid_lab::harness::priority_sim::{bin_edges, build_report, switch, Measurements, ScenarioOptions, Snapshot};
/// let cfg = switch(&ScenarioOptions { scale: 0.025, ..ScenarioOptions::default() }).unwrap();
/// // Two flows (tcp, dtl) delivering 0.5 and 0.125 MB per second.
/// let bins = bin_edges(&cfg);
/// let snapshots = cfg
///     .phases
///     .iter()
///     .flat_map(|p| [p.start, p.end])
///     .chain(bins.iter().copied())
///     .map(|t| {
///         let s = t.as_secs_f64();
///         let acked = vec![(500_000.0 * s) as u64, (125_000.0 * s) as u64];
///         (t, Snapshot { acked, ..Snapshot::default() })
///     })
///     .collect();
/// let r = build_report(&cfg, &Measurements { bins, snapshots, ..Measurements::default() });
/// let p1 = &r.phases[1];
/// assert!((p1.flows[0].mbps - 4.0).abs() < 1e-6 && (p1.flows[1].mbps - 1.0).abs() < 1e-6);
/// assert!((p1.jain.unwrap() - 25.0 / 34.0).abs() < 1e-9);
/// assert_eq!(p1.flows[1].priority, Some(1.0));
/// ```
pub fn build_report(cfg: &ScenarioConfig, m: &Measurements) -> ScenarioReport {
    let bins = &m.bins;
    let snap = |t: Duration| -> Snapshot {
        let mut s = m.snapshots.get(&t).cloned().unwrap_or_default();
        let n = cfg.flows.len();
        for v in [&mut s.acked, &mut s.sent, &mut s.lost] {
            v.resize(n, 0);
        }
        s
    };
    let end = snap(cfg.duration);
    let link_mbps = cfg.link.rate().map(|r| r.bits_per_sec() as f64 / 1e6);

    let flows = cfg
        .flows
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let stop = f.stop.unwrap_or(cfg.duration).min(cfg.duration);
            let acked_at = |t: Duration| snap(t).acked[i];
            let st = m.flows.get(i).cloned().unwrap_or_default();
            FlowResult {
                label: f.label.clone(),
                cc: f.cc.to_string(),
                bytes: end.acked[i],
                mean_mbps: mbps(
                    acked_at(stop).saturating_sub(acked_at(f.start)),
                    stop.saturating_sub(f.start),
                ),
                packets_sent: st.packets_sent,
                packets_lost: st.packets_lost,
                loss: st.packets_lost as f64 / st.packets_sent.max(1) as f64,
                congestion_events: st.congestion_events,
                rto_count: st.rto_count,
                throughput_mbps: bins
                    .windows(2)
                    .map(|w| mbps(acked_at(w[1]).saturating_sub(acked_at(w[0])), w[1] - w[0]))
                    .collect(),
                error: st.error,
            }
        })
        .collect();

    let base_rtt = m.probe.iter().map(|s| s.1).min();
    let delays = |from: Duration, to: Duration| -> Vec<f64> {
        match base_rtt {
            Some(base) => m
                .probe
                .iter()
                .filter(|(sent, _)| *sent >= from && *sent < to)
                .map(|(_, rtt)| (*rtt - base).as_secs_f64() * 1e3)
                .collect(),
            None => Vec::new(),
        }
    };

    let phases = cfg
        .phases
        .iter()
        .map(|p| {
            let (a, b) = (snap(p.start), snap(p.end));
            let span = p.end - p.start;
            let rates: Vec<f64> = (0..cfg.flows.len())
                .map(|i| mbps(b.acked[i].saturating_sub(a.acked[i]), span))
                .collect();
            let total: f64 = rates.iter().sum();
            let active: Vec<bool> = cfg
                .flows
                .iter()
                .map(|f| f.active_throughout(p.start, p.end))
                .collect();
            let active_rates: Vec<f64> = rates
                .iter()
                .zip(&active)
                .filter(|(_, a)| **a)
                .map(|(r, _)| *r)
                .collect();
            let sent: u64 = (0..cfg.flows.len())
                .map(|i| b.sent[i].saturating_sub(a.sent[i]))
                .sum();
            let lost: u64 = (0..cfg.flows.len())
                .map(|i| b.lost[i].saturating_sub(a.lost[i]))
                .sum();
            let mut q = delays(p.start, p.end);
            PhaseResult {
                name: p.name.clone(),
                start_secs: secs(p.start),
                end_secs: secs(p.end),
                flows: cfg
                    .flows
                    .iter()
                    .zip(&rates)
                    .zip(&active)
                    .map(|((f, &r), &act)| PhaseFlow {
                        label: f.label.clone(),
                        priority: f.priority_at(p.start),
                        active: act,
                        mbps: r,
                        share_of_capacity: link_mbps.map(|l| r / l),
                        share_of_total: if total > 0.0 { r / total } else { 0.0 },
                    })
                    .collect(),
                utilization: link_mbps.map(|l| total / l),
                jain: jain_index(&active_rates),
                queuing_delay_p50_ms: quantile(&mut q, 0.5),
                queuing_delay_p99_ms: quantile(&mut q, 0.99),
                loss: lost as f64 / sent.max(1) as f64,
                bottleneck_loss: b.link_dropped.saturating_sub(a.link_dropped) as f64
                    / b.link_offered.saturating_sub(a.link_offered).max(1) as f64,
                queue_drops: b.queue_drops.saturating_sub(a.queue_drops),
            }
        })
        .collect();

    let switches = m
        .switches
        .iter()
        .map(|s| {
            let srtt_ms = s.srtt.as_secs_f64() * 1e3;
            let longest_stall_ms = s.longest.as_secs_f64() * 1e3;
            SwitchResult {
                label: cfg.flows[s.flow].label.clone(),
                at_secs: secs(s.at),
                from: s.from,
                to: s.to,
                srtt_ms,
                longest_stall_ms,
                stall_rtts: if srtt_ms > 0.0 {
                    longest_stall_ms / srtt_ms
                } else {
                    0.0
                },
            }
        })
        .collect();

    let mut all = delays(Duration::ZERO, cfg.duration + Duration::from_nanos(1));
    ScenarioReport {
        scenario: cfg.name.clone(),
        link: cfg.link.to_string(),
        link_mbps,
        duration_secs: secs(cfg.duration),
        bin_secs: secs(cfg.bin),
        flows,
        phases,
        switches,
        queuing_delay_p50_ms: quantile(&mut all, 0.5),
        queuing_delay_p99_ms: quantile(&mut all, 0.99),
        trace_hash: m.trace_hash.clone(),
        forward_link: m.forward_link,
        queue_drops: bins
            .windows(2)
            .map(|w| {
                snap(w[1])
                    .queue_drops
                    .saturating_sub(snap(w[0]).queue_drops)
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_and_jain() {
        let mut v = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(quantile(&mut v, 0.5), Some(3.0));
        assert_eq!(quantile(&mut v, 0.99), Some(5.0));
        assert_eq!(quantile(&mut v, 0.0), Some(1.0));
        assert_eq!(quantile(&mut [], 0.5), None);
        assert_eq!(jain_index(&[2.0, 2.0]), Some(1.0));
        assert_eq!(jain_index(&[1.0, 0.0]), Some(0.5));
        assert_eq!(jain_index(&[1.0]), None);
    }
}
