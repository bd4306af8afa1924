//! What one `exon` experiment reports (its `report` artifact: [`ExonRun`]
//! for Exon and TCP in turn, [`FairnessRun`] for both at once) and the
//! tables and JSON `braid bench exon` prints from them. The JSON keys are
//! the bench's contract: `exon`, `tcp` (each with `msgs_per_s` or
//! `requests_per_s`, `p50_ms`, `p99_ms`, ...), `ratio`, `lost`,
//! `duplicated`; added since, and only added: `fsyncs`,
//! `messages_per_fsync`, `volatile`, `durable_over_volatile` and
//! `durability` (Exon with a journal, issue 23 item 4).
//!
//! ```
//! use braid_lab::template::builtin::exon::report::{grid_json, ExonRun};
//! let runs: Vec<ExonRun> = Vec::new();
//! assert_eq!(grid_json(&runs)["lost"], 0);
//! ```

use serde::{Deserialize, Serialize};
use serde_json::json;

use braid::exon_net::DurabilityStats;

use super::measure::PeerResult;
use super::{Mode, Pattern};

/// One peer's figures in one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerReport {
    /// One-way: messages per second over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msgs_per_s: Option<f64>,
    /// RPC: completed requests per second over the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_s: Option<f64>,
    /// Messages (requests) counted in the window.
    pub delivered: u64,
    /// The window, seconds.
    pub window_s: f64,
    /// Deliveries that did not decode (or arrived out of order on TCP).
    pub corrupt: u64,
    /// RPC: median latency, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p50_ms: Option<f64>,
    /// RPC: 99th percentile latency, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    /// Exon only: its end-to-end checks.
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub checks: Option<ExonChecks>,
}

/// Exon's end-to-end checks, by message identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExonChecks {
    /// Messages the senders accepted (requests and replies for RPC).
    pub accepted: u64,
    /// Accepted, never delivered.
    pub lost: u64,
    /// Delivered more than once (or never sent).
    pub duplicated: u64,
    /// Outcomes "in doubt".
    pub in_doubt: u64,
    /// Every accepted message was acknowledged within the drain time.
    pub drained: bool,
    /// Datagrams the sending node sent.
    pub datagrams_sent: u64,
    /// Fragments it sent again.
    pub fragments_retransmitted: u64,
}

impl PeerReport {
    /// The figures of `r`, a run of `pattern`; `exon` adds the checks.
    pub fn new(pattern: Pattern, r: &PeerResult, exon: bool) -> PeerReport {
        let rpc = pattern == Pattern::Rpc;
        PeerReport {
            msgs_per_s: (!rpc).then(|| r.rate()),
            requests_per_s: rpc.then(|| r.rate()),
            delivered: r.delivered,
            window_s: r.window.as_secs_f64(),
            corrupt: r.corrupt,
            p50_ms: if rpc { r.latency_ms(0.5) } else { None },
            p99_ms: if rpc { r.latency_ms(0.99) } else { None },
            checks: exon.then_some(ExonChecks {
                accepted: r.accepted,
                lost: r.lost,
                duplicated: r.duplicated,
                in_doubt: r.in_doubt,
                drained: r.drained,
                datagrams_sent: r.datagrams,
                fragments_retransmitted: r.retransmitted,
            }),
        }
    }

    /// Messages or requests per second, whichever the run measured.
    pub fn rate(&self) -> f64 {
        self.msgs_per_s.or(self.requests_per_s).unwrap_or(0.0)
    }
}

/// One Exon node's durability counters in a run, as its driver counted
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct NodeDurability {
    /// Group commits: journal appends, one fdatasync each.
    pub fsyncs: u64,
    /// Messages made durable here (sent and received), each one having
    /// waited for a group commit.
    pub messages: u64,
    /// `messages / fsyncs` (`null` without a commit).
    pub messages_per_fsync: Option<f64>,
    /// Journal records the commits wrote.
    pub records: u64,
    /// Checkpoints (journal rewrites).
    pub checkpoints: u64,
    /// Writes of the clock file.
    pub clock_writes: u64,
}

impl From<&DurabilityStats> for NodeDurability {
    fn from(d: &DurabilityStats) -> Self {
        NodeDurability {
            fsyncs: d.commits,
            messages: d.messages_committed(),
            messages_per_fsync: d.messages_per_commit(),
            records: d.records,
            checkpoints: d.checkpoints,
            clock_writes: d.clock_writes,
        }
    }
}

/// What Exon's durable records cost in a run with a journal: the rates with
/// and without it (same run, same settings) and each node's group commits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Durability {
    /// Exon's rate with the journal (messages or requests per second, as
    /// the pattern measures).
    pub durable_per_s: f64,
    /// Exon's rate without it.
    pub volatile_per_s: f64,
    /// Node a: the sender (RPC client).
    pub a: NodeDurability,
    /// Node b: the receiver (RPC server).
    pub b: NodeDurability,
}

/// Exon, then kernel TCP, over the same link (or loopback): one experiment
/// of mode `separate` or `loopback`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExonRun {
    /// Separate (emulated link) or loopback.
    pub mode: Mode,
    /// One-way or RPC.
    pub pattern: Pattern,
    /// The emulated link (`None` on loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Message size, bytes.
    pub size: u64,
    /// Messages (requests) per run at most.
    pub messages: u64,
    /// RPC: request/reply loops (`null` for one-way).
    pub actors: Option<u64>,
    /// Longest a run measures, seconds.
    pub timeout_s: f64,
    /// The experiment's seed (the emulated link's random choices).
    pub seed: u64,
    /// Congestion control of the TCP peer.
    pub tcp_cc: String,
    /// Congestion control of Exon.
    pub exon_cc: String,
    /// Exon kept durable records (clock and journal files).
    pub journal: bool,
    /// Exon sealed its datagrams in authenticated sessions (false: the
    /// bare protocol, `--insecure-no-auth`). Reports from before the
    /// field were unencrypted.
    #[serde(default)]
    pub encrypted: bool,
    /// Exon's figures and checks.
    pub exon: PeerReport,
    /// TCP's figures.
    pub tcp: PeerReport,
    /// Exon's rate over TCP's.
    pub ratio: f64,
    /// Exon's lost messages.
    pub lost: u64,
    /// Exon's duplicated messages.
    pub duplicated: u64,
    /// Exon lost, duplicated and corrupted nothing, drained, and TCP
    /// corrupted nothing.
    pub ok: bool,
    /// Group commits (journal appends, one fdatasync each) of both Exon
    /// nodes, counted by their drivers; 0 without a journal.
    #[serde(default)]
    pub fsyncs: u64,
    /// Messages made durable per group commit over both nodes (a message
    /// counts at its sender and at its receiver, where each commits it);
    /// `null` without a journal.
    #[serde(default)]
    pub messages_per_fsync: Option<f64>,
    /// With a journal: Exon without one, in the same run with the same
    /// settings (`null` otherwise).
    #[serde(default)]
    pub volatile: Option<PeerReport>,
    /// With a journal: Exon's rate with it over its rate without.
    #[serde(default)]
    pub durable_over_volatile: Option<f64>,
    /// With a journal: the rates and each node's counters.
    #[serde(default)]
    pub durability: Option<Durability>,
}

/// The durability fields of a run: `exon` measured (with a journal or
/// not), `volatile` the same without a journal when `exon` had one.
/// Returns `fsyncs`, `messages_per_fsync`, `durable_over_volatile` and
/// `durability`, in that order.
pub fn durability_of(
    exon: &PeerReport,
    result: &PeerResult,
    volatile: Option<&PeerReport>,
) -> (u64, Option<f64>, Option<f64>, Option<Durability>) {
    let both = result.durability[0].plus(&result.durability[1]);
    let Some(v) = volatile else {
        return (both.commits, both.messages_per_commit(), None, None);
    };
    let d = Durability {
        durable_per_s: exon.rate(),
        volatile_per_s: v.rate(),
        a: NodeDurability::from(&result.durability[0]),
        b: NodeDurability::from(&result.durability[1]),
    };
    (both.commits, both.messages_per_commit(), Some(exon.rate() / v.rate().max(1e-9)), Some(d))
}

/// Exon lost or duplicated nothing, nothing arrived corrupted.
pub fn checks_pass(exon: &PeerResult, tcp: &PeerResult) -> bool {
    exon.lost == 0
        && exon.duplicated == 0
        && exon.corrupt == 0
        && exon.in_doubt == 0
        && exon.drained
        && tcp.corrupt == 0
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.1}"))
}

impl ExonRun {
    /// Header of the table of runs over links.
    pub const HEADER: [&'static str; 9] =
        ["pattern", "link", "Exon /s", "TCP /s", "ratio", "Exon p50/p99 ms", "TCP p50/p99 ms", "lost", "duplicated"];

    /// The line below that table.
    pub const NOTE: &'static str = "(/s: messages per second for oneway, requests per second for rpc; ratio = Exon / TCP; lost and duplicated: Exon, checked end to end)";

    /// Header of the durability table (runs with a journal).
    pub const DURABLE_HEADER: [&'static str; 7] =
        ["run", "durable /s", "volatile /s", "durable/volatile", "fsyncs", "msgs/fsync", "a / b msgs/fsync"];

    /// The line below that table.
    pub const DURABLE_NOTE: &'static str = "(durable: Exon with clock and journal files, volatile: without, same run and settings; fsyncs: group commits of both nodes, one fdatasync each, counted by the drivers; msgs/fsync: messages made durable per commit, each message counting at its sender and at its receiver)";

    /// This run's row under [`DURABLE_HEADER`](Self::DURABLE_HEADER)
    /// (`None` without a journal).
    pub fn durable_row(&self) -> Option<Vec<String>> {
        let d = self.durability.as_ref()?;
        let rate = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{v:.0}"));
        let run = match &self.link {
            Some(l) => format!("{} {l}", self.pattern.name()),
            None => format!("{} {} B loopback", self.pattern.name(), self.size),
        };
        Some(vec![
            run,
            format!("{:.0}", d.durable_per_s),
            format!("{:.0}", d.volatile_per_s),
            self.durable_over_volatile.map_or_else(|| "-".into(), |r| format!("{r:.2}")),
            self.fsyncs.to_string(),
            rate(self.messages_per_fsync),
            format!("{} / {}", rate(d.a.messages_per_fsync), rate(d.b.messages_per_fsync)),
        ])
    }

    /// Header of the loopback table.
    pub const LOOPBACK_HEADER: [&'static str; 6] = ["size", "Exon msgs/s", "TCP msgs/s", "ratio", "lost", "duplicated"];

    /// This run's row under [`HEADER`](Self::HEADER).
    pub fn row(&self) -> Vec<String> {
        let lat = |p: &PeerReport| match self.pattern {
            Pattern::Rpc => format!("{}/{}", ms(p.p50_ms), ms(p.p99_ms)),
            Pattern::Oneway => "-".into(),
        };
        vec![
            self.pattern.name().into(),
            self.link.clone().unwrap_or_else(|| "loopback".into()),
            format!("{:.0}", self.exon.rate()),
            format!("{:.0}", self.tcp.rate()),
            format!("{:.2}", self.ratio),
            lat(&self.exon),
            lat(&self.tcp),
            self.lost.to_string(),
            self.duplicated.to_string(),
        ]
    }

    /// This run's row under [`LOOPBACK_HEADER`](Self::LOOPBACK_HEADER).
    pub fn loopback_row(&self) -> Vec<String> {
        vec![
            format!("{} B", self.size),
            format!("{:.0}", self.exon.rate()),
            format!("{:.0}", self.tcp.rate()),
            format!("{:.2}", self.ratio),
            self.lost.to_string(),
            self.duplicated.to_string(),
        ]
    }

    /// The run as `braid bench exon --json` prints one run.
    pub fn json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_else(|e| json!({ "error": e.to_string() }))
    }
}

/// `braid bench exon --grid --json`: every run, and Exon's losses and
/// duplicates over all of them.
pub fn grid_json(runs: &[ExonRun]) -> serde_json::Value {
    json!({
        "encrypted": runs.iter().all(|r| r.encrypted),
        "grid": runs.iter().map(ExonRun::json).collect::<Vec<_>>(),
        "lost": runs.iter().map(|r| r.lost).sum::<u64>(),
        "duplicated": runs.iter().map(|r| r.duplicated).sum::<u64>(),
    })
}

/// `braid bench exon --loopback --json`: per size the rates, ratio and
/// checks, and the sums of the checks.
pub fn loopback_json(runs: &[ExonRun]) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = runs
        .iter()
        .map(|r| {
            json!({
                "size": r.size,
                "exon": r.exon,
                "tcp": r.tcp,
                "ratio": r.ratio,
                "lost": r.lost,
                "duplicated": r.duplicated,
                "fsyncs": r.fsyncs,
                "messages_per_fsync": r.messages_per_fsync,
                "volatile": r.volatile,
                "durable_over_volatile": r.durable_over_volatile,
                "durability": r.durability,
            })
        })
        .collect();
    json!({
        "encrypted": runs.iter().all(|r| r.encrypted),
        "loopback": rows,
        "lost": runs.iter().map(|r| r.lost).sum::<u64>(),
        "duplicated": runs.iter().map(|r| r.duplicated).sum::<u64>(),
    })
}

/// One Exon flow and one kernel TCP flow at once over one link: each one's
/// goodput over the same window after a warm-up (mode `fairness`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FairnessRun {
    /// The link.
    pub link: String,
    /// Seconds measured (after the warm-up).
    pub seconds: f64,
    /// Seconds of warm-up left out.
    pub warmup_s: f64,
    /// Exon's goodput, Mbit/s.
    pub exon_mbps: f64,
    /// TCP's goodput, Mbit/s.
    pub tcp_mbps: f64,
    /// Exon's share of the link's rate (`null` without a rate).
    pub exon_share: Option<f64>,
    /// TCP's share of the link's rate.
    pub tcp_share: Option<f64>,
    /// TCP's share of what both got.
    pub tcp_share_of_total: f64,
    /// Exon's lost messages.
    pub lost: u64,
    /// Exon's duplicated messages.
    pub duplicated: u64,
    /// Congestion control of the TCP flow.
    pub tcp_cc: String,
    /// Congestion control of Exon.
    pub exon_cc: String,
    /// The experiment's seed.
    pub seed: u64,
    /// Exon sealed its datagrams in authenticated sessions.
    #[serde(default)]
    pub encrypted: bool,
    /// Exon lost, duplicated and corrupted nothing, TCP corrupted nothing.
    pub ok: bool,
}

impl FairnessRun {
    /// The table's header.
    pub const HEADER: [&'static str; 3] = ["flow", "goodput Mbit/s", "share of link"];

    /// One row per flow.
    pub fn rows(&self) -> Vec<Vec<String>> {
        let pct = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{:.1}%", v * 100.0));
        let exon = if self.exon_cc == "bbr" { "Exon (BBR-style)".to_string() } else { format!("Exon ({})", self.exon_cc) };
        let tcp = if self.tcp_cc == "cubic" { "TCP CUBIC".to_string() } else { format!("TCP {}", self.tcp_cc) };
        vec![
            vec![exon, format!("{:.1}", self.exon_mbps), pct(self.exon_share)],
            vec![tcp, format!("{:.1}", self.tcp_mbps), pct(self.tcp_share)],
        ]
    }

    /// The line below the table.
    pub fn note(&self) -> String {
        format!(
            "link {}, {:.0} s after {} s of warm-up; TCP's share of the total {:.1}%; Exon lost {}, duplicated {}",
            self.link,
            self.seconds,
            self.warmup_s,
            100.0 * self.tcp_share_of_total,
            self.lost,
            self.duplicated
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn result(delivered: u64, millis: u64, lat: &[u64]) -> PeerResult {
        PeerResult {
            delivered,
            window: Duration::from_millis(millis),
            latencies: lat.iter().map(|&l| Duration::from_millis(l)).collect(),
            accepted: delivered,
            drained: true,
            ..Default::default()
        }
    }

    fn run(pattern: Pattern, exon: &PeerResult, tcp: &PeerResult) -> ExonRun {
        let (e, t) = (PeerReport::new(pattern, exon, true), PeerReport::new(pattern, tcp, false));
        ExonRun {
            mode: Mode::Separate,
            pattern,
            link: Some("rtt=10ms,rate=100mbit".into()),
            size: 1000,
            messages: 100,
            actors: (pattern == Pattern::Rpc).then_some(8),
            timeout_s: 10.0,
            seed: 3,
            tcp_cc: "cubic".into(),
            exon_cc: "bbr".into(),
            journal: false,
            encrypted: true,
            ratio: e.rate() / t.rate(),
            exon: e,
            tcp: t,
            lost: exon.lost,
            duplicated: exon.duplicated,
            ok: checks_pass(exon, tcp),
            fsyncs: 0,
            messages_per_fsync: None,
            volatile: None,
            durable_over_volatile: None,
            durability: None,
        }
    }

    #[test]
    fn oneway_json_has_the_contract_keys_and_no_latency() {
        let r = run(Pattern::Oneway, &result(100, 500, &[]), &result(50, 500, &[]));
        let j = r.json();
        assert_eq!(j["exon"]["msgs_per_s"], 200.0);
        assert_eq!(j["tcp"]["msgs_per_s"], 100.0);
        assert_eq!(j["ratio"], 2.0);
        assert_eq!(j["actors"], serde_json::Value::Null);
        assert!(j["exon"].get("p50_ms").is_none() && j["exon"].get("requests_per_s").is_none());
        assert_eq!(j["exon"]["lost"], 0);
        assert_eq!(j["exon"]["drained"], true);
        assert!(j["tcp"].get("lost").is_none(), "TCP has no end-to-end checks: {j}");
        assert_eq!((j["lost"].clone(), j["duplicated"].clone(), j["ok"].clone()), (json!(0), json!(0), json!(true)));
        assert_eq!(r.row()[2..5], ["200", "100", "2.00"]);
        assert_eq!(r.row()[5], "-");
    }

    #[test]
    fn rpc_reports_latency_quantiles() {
        let lat: Vec<u64> = (1..=100).collect();
        let r = run(Pattern::Rpc, &result(100, 1000, &lat), &result(100, 2000, &lat));
        let j = r.json();
        assert_eq!(j["exon"]["requests_per_s"], 100.0);
        assert_eq!(j["exon"]["p50_ms"], 50.0);
        assert_eq!(j["tcp"]["p99_ms"], 99.0);
        assert_eq!(j["actors"], 8);
        assert_eq!(r.row()[5], "50.0/99.0");
    }

    #[test]
    fn failed_checks_are_not_ok_and_sum_up() {
        let mut lossy = result(100, 500, &[]);
        lossy.lost = 2;
        lossy.duplicated = 1;
        let runs = [run(Pattern::Oneway, &lossy, &result(1, 500, &[])), run(Pattern::Oneway, &lossy, &result(1, 500, &[]))];
        assert!(!runs[0].ok);
        let g = grid_json(&runs);
        assert_eq!((g["lost"].as_u64(), g["duplicated"].as_u64()), (Some(4), Some(2)));
        assert_eq!(g["grid"].as_array().map(Vec::len), Some(2));
        let l = loopback_json(&runs);
        assert_eq!(l["loopback"][0]["size"], 1000);
        assert_eq!(l["loopback"][0]["exon"]["lost"], 2);
        assert_eq!(l["lost"], 4);
        let mut corrupt_tcp = result(1, 500, &[]);
        corrupt_tcp.corrupt = 1;
        assert!(!run(Pattern::Oneway, &result(1, 500, &[]), &corrupt_tcp).ok);
        let mut undrained = result(1, 500, &[]);
        undrained.drained = false;
        assert!(!run(Pattern::Oneway, &undrained, &result(1, 500, &[])).ok);
    }

    #[test]
    fn the_artifact_reads_back() {
        let lat: Vec<u64> = (1..=10).collect();
        for r in [run(Pattern::Rpc, &result(10, 100, &lat), &result(5, 100, &lat)), run(Pattern::Oneway, &result(10, 100, &[]), &result(5, 100, &[]))] {
            let back: ExonRun = serde_json::from_value(r.json()).unwrap();
            assert_eq!(back, r);
        }
    }

    /// The durability keys are there without a journal (0 fsyncs, nulls)
    /// and carry the drivers' counters with one; the rest is unchanged.
    #[test]
    fn durability_keys_are_added_only() {
        let plain = run(Pattern::Oneway, &result(100, 500, &[]), &result(50, 500, &[]));
        let j = plain.json();
        assert_eq!(j["fsyncs"], 0);
        for k in ["messages_per_fsync", "volatile", "durable_over_volatile", "durability"] {
            assert_eq!(j[k], serde_json::Value::Null, "{k}");
        }
        assert_eq!(plain.durable_row(), None);
        let mut durable = result(100, 500, &[]);
        let node = |commits, sent, received| DurabilityStats {
            commits,
            records: sent + received,
            sends_committed: sent,
            receipts_committed: received,
            ..Default::default()
        };
        durable.durability = [node(4, 100, 0), node(10, 0, 100)];
        let mut r = run(Pattern::Oneway, &durable, &result(50, 500, &[]));
        let volatile = PeerReport::new(Pattern::Oneway, &result(100, 250, &[]), true);
        let (fsyncs, per, over, d) = durability_of(&r.exon, &durable, Some(&volatile));
        (r.fsyncs, r.messages_per_fsync, r.volatile, r.durable_over_volatile, r.durability) = (fsyncs, per, Some(volatile), over, d);
        let j = r.json();
        assert_eq!((j["fsyncs"].as_u64(), j["messages_per_fsync"].as_f64()), (Some(14), Some(200.0 / 14.0)));
        assert_eq!(j["durable_over_volatile"], 0.5);
        assert_eq!(j["volatile"]["msgs_per_s"], 400.0);
        assert_eq!(j["durability"]["a"]["messages_per_fsync"], 25.0);
        assert_eq!(j["durability"]["b"]["fsyncs"], 10);
        assert_eq!(j["exon"]["msgs_per_s"], 200.0);
        assert_eq!(r.durable_row().unwrap()[1..], ["200", "400", "0.50", "14", "14", "25 / 10"]);
        let l = loopback_json(&[r.clone()]);
        assert_eq!(l["loopback"][0]["fsyncs"], 14);
        assert_eq!(l["loopback"][0]["durability"]["durable_per_s"], 200.0);
        let back: ExonRun = serde_json::from_value(j).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn fairness_rows_name_the_flows() {
        let f = FairnessRun {
            link: "rtt=20ms,rate=100mbit".into(),
            seconds: 10.0,
            warmup_s: 3.0,
            exon_mbps: 40.0,
            tcp_mbps: 50.0,
            exon_share: Some(0.4),
            tcp_share: Some(0.5),
            tcp_share_of_total: 50.0 / 90.0,
            lost: 0,
            duplicated: 0,
            tcp_cc: "cubic".into(),
            exon_cc: "bbr".into(),
            seed: 0,
            encrypted: true,
            ok: true,
        };
        assert_eq!(f.rows()[0], ["Exon (BBR-style)", "40.0", "40.0%"]);
        assert_eq!(f.rows()[1], ["TCP CUBIC", "50.0", "50.0%"]);
        assert!(f.note().contains("TCP's share of the total 55.6%"), "{}", f.note());
    }
}
