//! What a `data` experiment reports ([`DataRun`], its `report` artifact)
//! and what `braid bench data` prints from several of them
//! ([`DataBenchReport`]: the medians over repetitions, the same JSON keys
//! and tables as before the lab).

use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use super::hosts::DataVia;
use crate::analysis::table::Table;
use crate::plot::chart::BarChart;

/// One bulk transfer of an experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkReport {
    /// How the data travelled.
    pub via: DataVia,
    /// From the first message sent to the last byte received.
    pub secs: f64,
    /// Bytes the sender handed over.
    pub bytes_sent: u64,
    /// Bytes the receiver got.
    pub bytes_received: u64,
    /// Messages the receiver got.
    pub messages_received: u64,
    /// Every byte arrived.
    pub complete: bool,
    /// The DATA interceptor's view of the stream (DATA runs).
    pub data: Option<LearnerReport>,
}

impl BulkReport {
    /// Goodput, Mbit/s.
    pub fn mbps(&self) -> f64 {
        self.bytes_received as f64 * 8.0 / self.secs / 1e6
    }
}

/// The DATA interceptor's statistics of one stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LearnerReport {
    /// Signed ratio in force at the end (−1 all TCP … 1 all Braid).
    pub ratio: f64,
    /// Data messages sent over TCP.
    pub tcp_messages: u64,
    /// Data messages sent over Braid.
    pub braid_messages: u64,
    /// The learner's path, per episode: (ratio, taken Mbit/s, delivered
    /// Mbit/s, next ratio, observed Braid share, length in s).
    pub episodes: Vec<[f64; 6]>,
}

impl LearnerReport {
    /// From the interceptor's statistics.
    pub fn from_stats(d: &braid::node::data::DataStats) -> LearnerReport {
        LearnerReport {
            ratio: d.ratio,
            tcp_messages: d.tcp_messages,
            braid_messages: d.braid_messages,
            episodes: d
                .episodes
                .iter()
                .map(|e| {
                    [e.ratio, e.throughput_bps * 8e-6, e.delivered_bps * 8e-6, e.next_ratio, e.observed_braid_fraction, e.secs]
                })
                .collect(),
        }
    }
}

/// One control-latency run (Fig. 8): pings over TCP while bulk data flows
/// over `via`. In JSON the figures' keys stand next to `via`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlReport {
    /// How the bulk data travelled meanwhile (`none`: no bulk, the floor).
    pub via: DataVia,
    /// What the run measured.
    #[serde(flatten)]
    pub figures: ControlFigures,
}

impl ControlReport {
    /// From the round trips of a run of `secs` seconds.
    pub fn new(via: DataVia, rtts: &[std::time::Duration], bulk_bytes: u64, secs: f64, data_ratio: Option<f64>) -> ControlReport {
        ControlReport {
            via,
            figures: ControlFigures {
                pings: rtts.len(),
                p10_ms: quantile_ms(rtts, 0.1),
                p25_ms: quantile_ms(rtts, 0.25),
                p50_ms: quantile_ms(rtts, 0.5),
                p75_ms: quantile_ms(rtts, 0.75),
                p90_ms: quantile_ms(rtts, 0.9),
                p99_ms: quantile_ms(rtts, 0.99),
                mean_ms: (!rtts.is_empty()).then(|| rtts.iter().map(|d| d.as_secs_f64() * 1e3).sum::<f64>() / rtts.len() as f64),
                bulk_mbps: bulk_bytes as f64 * 8.0 / secs / 1e6,
                data_ratio,
            },
        }
    }
}

/// The `q`-quantile of `v` in ms (the element at the rounded fractional
/// index), `None` if empty.
pub fn quantile_ms(v: &[std::time::Duration], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort();
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    Some(s[i.min(s.len() - 1)].as_secs_f64() * 1e3)
}

/// One `data` experiment: its link, its bulk transfers and its control
/// runs. The `report` artifact.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DataRun {
    /// The link's round-trip time, ms.
    pub rtt_ms: f64,
    /// The bottleneck rate (`1gbit`).
    pub rate: String,
    /// The link queue, bytes (0: the link's default, 1 BDP).
    pub queue_bytes: u64,
    /// Bytes per bulk transfer.
    pub bytes: u64,
    /// Bytes per bulk message.
    pub message_size: u64,
    /// Length of each control run, seconds (0: none ran).
    pub control_secs: f64,
    /// The bulk transfers, in the order they ran.
    pub bulk: Vec<BulkReport>,
    /// The control runs, in the order they ran.
    pub control: Vec<ControlReport>,
}

impl DataRun {
    /// Goodput of the transfer over `via`, Mbit/s (`None` if none ran).
    pub fn goodput(&self, via: DataVia) -> Option<f64> {
        self.bulk.iter().find(|b| b.via == via).map(BulkReport::mbps)
    }

    /// DATA's goodput over the better of TCP's and Braid's, measured in
    /// this experiment (0 when neither moved data).
    pub fn data_over_best(&self) -> f64 {
        let g = |v| self.goodput(v).unwrap_or(0.0);
        ratio_over_best(g(DataVia::Data), g(DataVia::Tcp), g(DataVia::Braid))
    }

    /// Every transfer delivered every byte.
    pub fn complete(&self) -> bool {
        self.bulk.iter().all(|b| b.complete)
    }

    /// The control p50 with bulk data over `via`, ms.
    pub fn p50(&self, via: DataVia) -> Option<f64> {
        p50_of(&self.control, via)
    }

    /// The control p50 that bulk data over `via` adds to the no-bulk
    /// floor (see the template's documentation), ms.
    pub fn added_p50(&self, via: DataVia) -> Option<f64> {
        added_p50_of(&self.control, via)
    }

    /// DATA's added control p50 over TCP/TCP's.
    pub fn added_ratio(&self) -> Option<f64> {
        added_ratio_of(&self.control)
    }
}

fn ratio_over_best(data: f64, tcp: f64, braid: f64) -> f64 {
    let best = tcp.max(braid);
    if best > 0.0 {
        data / best
    } else {
        0.0
    }
}

fn p50_of(control: &[ControlReport], via: DataVia) -> Option<f64> {
    control.iter().find(|c| c.via == via).and_then(|c| c.figures.p50_ms)
}

fn added_p50_of(control: &[ControlReport], via: DataVia) -> Option<f64> {
    Some(p50_of(control, via)? - p50_of(control, DataVia::None)?)
}

fn added_ratio_of(control: &[ControlReport]) -> Option<f64> {
    match (added_p50_of(control, DataVia::Data), added_p50_of(control, DataVia::Tcp)) {
        (Some(d), Some(t)) if t > 0.0 => Some(d / t),
        _ => None,
    }
}

/// The experiments of one RTT of `braid bench data` (its repetitions).
#[derive(Debug, Clone)]
pub struct RttRuns {
    /// The RTT as the command was given it, ms.
    pub rtt_ms: u32,
    /// Its experiments, in the order they ran.
    pub runs: Vec<DataRun>,
}

impl RttRuns {
    /// Every bulk transfer, in the order they ran.
    fn bulk(&self) -> impl Iterator<Item = &BulkReport> {
        self.runs.iter().flat_map(|r| r.bulk.iter())
    }

    /// The median goodput over `via`'s transfers (0 if none).
    fn goodput(&self, via: DataVia) -> f64 {
        let runs: Vec<f64> = self.bulk().filter(|b| b.via == via).map(BulkReport::mbps).collect();
        median(runs)
    }

    /// The control runs (of the first experiment that has some).
    fn control(&self) -> &[ControlReport] {
        self.runs.iter().find(|r| !r.control.is_empty()).map(|r| r.control.as_slice()).unwrap_or(&[])
    }
}

/// The median (the mean of the middle two for even lengths), 0 if empty.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The settings `braid bench data` prints with its results.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchSettings {
    /// Bytes per bulk transfer.
    pub bytes: u64,
    /// The bottleneck rate (`1gbit`).
    pub rate: String,
    /// Bytes per bulk message.
    pub message_size: u64,
    /// Goodput runs per variant and RTT.
    pub repeat: u32,
    /// Length of each control run, seconds (0: skipped).
    pub control_secs: f64,
    /// Both nodes authenticated and encrypted.
    pub encrypted: bool,
}

/// One variant's goodput at one RTT.
#[derive(Debug, Clone, PartialEq)]
pub struct ViaGoodput {
    /// The variant.
    pub via: DataVia,
    /// The median over its runs, Mbit/s.
    pub mbps: f64,
    /// Every run's goodput, Mbit/s.
    pub mbps_runs: Vec<f64>,
    /// Every run delivered every byte.
    pub complete: bool,
    /// Its last run.
    pub last: Option<BulkReport>,
}

/// One RTT's goodput row of `braid bench data --json`: `rtt_ms`,
/// `data_over_best`, per variant `<via>_mbps`, `<via>_mbps_runs`,
/// `<via>_complete` and the last run's `<via>_secs`, `<via>_bytes_sent`,
/// `<via>_bytes_received`, `<via>_messages_received`; and DATA's
/// `data_ratio`, `data_tcp_messages`, `data_braid_messages`,
/// `data_episodes`, `data_episode_log` (of the last run with DATA
/// statistics).
#[derive(Debug, Clone, PartialEq)]
pub struct GoodputRow {
    /// The RTT, ms.
    pub rtt_ms: u32,
    /// DATA's median goodput over the better of TCP's and Braid's medians.
    pub data_over_best: f64,
    /// TCP, Braid, DATA.
    pub vias: Vec<ViaGoodput>,
    /// DATA's statistics of the last run that has them.
    pub learner: Option<LearnerReport>,
    /// DATA's ratio in the first run that has one (the table's column).
    pub first_ratio: Option<f64>,
}

impl GoodputRow {
    fn via(&self, via: DataVia) -> f64 {
        self.vias.iter().find(|v| v.via == via).map(|v| v.mbps).unwrap_or(0.0)
    }
}

impl Serialize for GoodputRow {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut m = serializer.serialize_map(None)?;
        m.serialize_entry("rtt_ms", &self.rtt_ms)?;
        m.serialize_entry("data_over_best", &self.data_over_best)?;
        for v in &self.vias {
            let n = v.via.name();
            if let Some(b) = &v.last {
                m.serialize_entry(&format!("{n}_secs"), &b.secs)?;
                m.serialize_entry(&format!("{n}_bytes_sent"), &b.bytes_sent)?;
                m.serialize_entry(&format!("{n}_bytes_received"), &b.bytes_received)?;
                m.serialize_entry(&format!("{n}_messages_received"), &b.messages_received)?;
            }
            m.serialize_entry(&format!("{n}_mbps"), &v.mbps)?;
            m.serialize_entry(&format!("{n}_mbps_runs"), &v.mbps_runs)?;
            m.serialize_entry(&format!("{n}_complete"), &v.complete)?;
        }
        if let Some(d) = &self.learner {
            m.serialize_entry("data_ratio", &d.ratio)?;
            m.serialize_entry("data_tcp_messages", &d.tcp_messages)?;
            m.serialize_entry("data_braid_messages", &d.braid_messages)?;
            m.serialize_entry("data_episodes", &d.episodes.len())?;
            m.serialize_entry("data_episode_log", &d.episodes)?;
        }
        m.end()
    }
}

/// One control run in `braid bench data --json`'s `control` list.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControlRow {
    /// The RTT, ms.
    pub rtt_ms: u32,
    /// The control messages' transport: always `tcp`.
    pub control: &'static str,
    /// How the bulk data travelled.
    pub data: DataVia,
    /// The run.
    #[serde(flatten)]
    pub run: ControlFigures,
}

/// What a control run measured ([`ControlReport`], [`ControlRow`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlFigures {
    /// Pings answered after the warm-up.
    pub pings: usize,
    /// Round-trip quantiles and mean, ms (`None` without pings).
    pub p10_ms: Option<f64>,
    /// See `p10_ms`.
    pub p25_ms: Option<f64>,
    /// See `p10_ms`.
    pub p50_ms: Option<f64>,
    /// See `p10_ms`.
    pub p75_ms: Option<f64>,
    /// See `p10_ms`.
    pub p90_ms: Option<f64>,
    /// See `p10_ms`.
    pub p99_ms: Option<f64>,
    /// See `p10_ms`.
    pub mean_ms: Option<f64>,
    /// Bulk goodput during the run, Mbit/s.
    pub bulk_mbps: f64,
    /// DATA's ratio at the end of the run (DATA runs).
    pub data_ratio: Option<f64>,
}

/// One RTT's control p50s against the floor (`control_p50` list).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ControlP50Row {
    /// The RTT, ms.
    pub rtt_ms: u32,
    /// DATA's p50 over TCP/TCP's.
    pub data_p50_over_tcp_p50: Option<f64>,
    /// The p50 without bulk data.
    pub floor_p50_ms: Option<f64>,
    /// What bulk data over TCP adds to the floor.
    pub tcp_added_p50_ms: Option<f64>,
    /// What bulk data over Braid adds.
    pub braid_added_p50_ms: Option<f64>,
    /// What DATA adds.
    pub control_added_p50_ms: Option<f64>,
    /// DATA's added p50 over TCP/TCP's (goal ≤ 0.1).
    pub control_added_ratio: Option<f64>,
}

/// `braid bench data`'s whole report: the JSON it prints, and its tables
/// and chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DataBenchReport {
    /// Bytes per bulk transfer.
    pub bytes: u64,
    /// The bottleneck rate.
    pub rate: String,
    /// Bytes per bulk message.
    pub message_size: u64,
    /// Goodput runs per variant and RTT.
    pub repeat: u32,
    /// Both nodes authenticated and encrypted (TLS on TCP, Noise on Braid);
    /// false: `--insecure-no-auth`.
    pub encrypted: bool,
    /// The RTTs, ms.
    pub rtts_ms: Vec<u32>,
    /// Per RTT.
    pub goodput: Vec<GoodputRow>,
    /// Per RTT and bulk variant.
    pub control: Vec<ControlRow>,
    /// Per RTT with control runs.
    pub control_p50: Vec<ControlP50Row>,
    /// Every transfer delivered every byte.
    pub complete: bool,
    /// Length of each control run, seconds.
    #[serde(skip)]
    pub control_secs: f64,
}

impl DataBenchReport {
    /// The report of `groups` (one per RTT, in the command's order).
    pub fn new(settings: &BenchSettings, groups: &[RttRuns]) -> DataBenchReport {
        let goodput = groups.iter().map(goodput_row).collect();
        let control = groups
            .iter()
            .flat_map(|g| {
                g.control().iter().map(move |c| ControlRow {
                    rtt_ms: g.rtt_ms,
                    control: "tcp",
                    data: c.via,
                    run: c.figures.clone(),
                })
            })
            .collect();
        let control_p50 = groups
            .iter()
            .filter(|g| !g.control().is_empty())
            .map(|g| {
                let c = g.control();
                let ratio = match (p50_of(c, DataVia::Data), p50_of(c, DataVia::Tcp)) {
                    (Some(d), Some(t)) if t > 0.0 => Some(d / t),
                    _ => None,
                };
                ControlP50Row {
                    rtt_ms: g.rtt_ms,
                    data_p50_over_tcp_p50: ratio,
                    floor_p50_ms: p50_of(c, DataVia::None),
                    tcp_added_p50_ms: added_p50_of(c, DataVia::Tcp),
                    braid_added_p50_ms: added_p50_of(c, DataVia::Braid),
                    control_added_p50_ms: added_p50_of(c, DataVia::Data),
                    control_added_ratio: added_ratio_of(c),
                }
            })
            .collect();
        DataBenchReport {
            bytes: settings.bytes,
            rate: settings.rate.clone(),
            message_size: settings.message_size,
            repeat: settings.repeat,
            encrypted: settings.encrypted,
            rtts_ms: groups.iter().map(|g| g.rtt_ms).collect(),
            goodput,
            control,
            control_p50,
            complete: groups.iter().all(|g| g.runs.iter().all(DataRun::complete)),
            control_secs: settings.control_secs,
        }
    }

    /// Every control run got answers.
    pub fn pings_ok(&self) -> bool {
        self.control.iter().all(|c| c.run.pings > 0)
    }

    /// The goodput table: per RTT, each variant's median and DATA's ratio.
    pub fn goodput_table(&self) -> Table {
        let mut t = Table::new(["rtt", "tcp Mbit/s", "braid Mbit/s", "data Mbit/s", "data_over_best", "data ratio (-1 tcp..1 braid)"]);
        for g in &self.goodput {
            t.push(vec![
                format!("{} ms", g.rtt_ms),
                format!("{:.0}", g.via(DataVia::Tcp)),
                format!("{:.0}", g.via(DataVia::Braid)),
                format!("{:.0}", g.via(DataVia::Data)),
                format!("{:.3}", g.data_over_best),
                g.first_ratio.map(|r| format!("{r:+.2}")).unwrap_or_default(),
            ]);
        }
        t
    }

    /// The control table (Fig. 8): per RTT and bulk variant, the round
    /// trips against TCP/TCP's and the floor. Empty without control runs.
    pub fn control_table(&self) -> Table {
        let mut t = Table::new([
            "rtt",
            "control/data",
            "pings",
            "p50 ms",
            "p99 ms",
            "p50 / tcp/tcp p50",
            "added p50 ms",
            "added / tcp/tcp added",
        ]);
        for c in &self.control {
            let same_rtt = || self.control.iter().filter(|o| o.rtt_ms == c.rtt_ms);
            let p50 = |via| same_rtt().find(|o| o.data == via).and_then(|o| o.run.p50_ms);
            let added = |via| Some(p50(via)? - p50(DataVia::None)?);
            let rel = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
                _ => "-".into(),
            };
            let mine = (c.data != DataVia::None).then(|| added(c.data)).flatten();
            t.push(vec![
                format!("{} ms", c.rtt_ms),
                format!("tcp/{}", c.data.name()),
                c.run.pings.to_string(),
                fmt_opt(c.run.p50_ms),
                fmt_opt(c.run.p99_ms),
                rel(c.run.p50_ms, p50(DataVia::Tcp)),
                fmt_opt(mine),
                rel(mine, added(DataVia::Tcp)),
            ]);
        }
        t
    }

    /// A bar chart of the goodput medians per RTT.
    pub fn goodput_chart(&self) -> BarChart {
        BarChart {
            title: format!("Goodput of {} over {} (DATA vs TCP vs Braid)", braid::size::ByteSize(self.bytes), self.rate),
            y_label: "goodput (Mbit/s)".into(),
            groups: self
                .goodput
                .iter()
                .map(|g| (format!("{} ms", g.rtt_ms), DataVia::BULK.iter().map(|&v| (v.name().to_string(), g.via(v))).collect()))
                .collect(),
        }
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

fn goodput_row(g: &RttRuns) -> GoodputRow {
    let vias: Vec<ViaGoodput> = DataVia::BULK
        .iter()
        .map(|&via| {
            let runs: Vec<&BulkReport> = g.bulk().filter(|b| b.via == via).collect();
            ViaGoodput {
                via,
                mbps: g.goodput(via),
                mbps_runs: runs.iter().map(|b| b.mbps()).collect(),
                complete: runs.iter().all(|b| b.complete),
                last: runs.last().map(|b| (*b).clone()),
            }
        })
        .collect();
    GoodputRow {
        rtt_ms: g.rtt_ms,
        data_over_best: ratio_over_best(g.goodput(DataVia::Data), g.goodput(DataVia::Tcp), g.goodput(DataVia::Braid)),
        vias,
        learner: g.bulk().filter_map(|b| b.data.clone()).last(),
        first_ratio: g.bulk().find_map(|b| b.data.as_ref().map(|d| d.ratio)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn bulk(via: DataVia, mbps: f64, ratio: Option<f64>) -> BulkReport {
        // 1 s transfers: bytes = mbps * 1e6 / 8.
        let bytes = (mbps * 1e6 / 8.0) as u64;
        BulkReport {
            via,
            secs: 1.0,
            bytes_sent: bytes,
            bytes_received: bytes,
            messages_received: bytes / 1000,
            complete: true,
            data: ratio.map(|r| LearnerReport { ratio: r, tcp_messages: 3, braid_messages: 4, episodes: vec![[r, 1.0, 1.0, r, 0.5, 1.0]] }),
        }
    }

    fn control(via: DataVia, p50: f64) -> ControlReport {
        let rtts: Vec<Duration> = (0..5).map(|_| Duration::from_secs_f64(p50 / 1e3)).collect();
        ControlReport::new(via, &rtts, 1_000_000, 2.0, None)
    }

    fn run(tcp: f64, braid: f64, data: f64, with_control: bool) -> DataRun {
        DataRun {
            rtt_ms: 20.0,
            rate: "1gbit".into(),
            queue_bytes: 0,
            bytes: 1000,
            message_size: 100,
            control_secs: if with_control { 2.0 } else { 0.0 },
            bulk: vec![bulk(DataVia::Tcp, tcp, None), bulk(DataVia::Braid, braid, None), bulk(DataVia::Data, data, Some(0.25))],
            control: if with_control {
                vec![control(DataVia::None, 20.0), control(DataVia::Tcp, 220.0), control(DataVia::Braid, 60.0), control(DataVia::Data, 30.0)]
            } else {
                vec![]
            },
        }
    }

    fn settings(repeat: u32) -> BenchSettings {
        BenchSettings { bytes: 1000, rate: "1gbit".into(), message_size: 100, repeat, control_secs: 2.0, encrypted: true }
    }

    #[test]
    fn one_run_gives_its_own_ratios() {
        let r = run(800.0, 600.0, 760.0, true);
        assert!((r.data_over_best() - 0.95).abs() < 1e-3);
        assert_eq!(r.p50(DataVia::None), Some(20.0));
        assert!((r.added_p50(DataVia::Data).unwrap() - 10.0).abs() < 1e-9);
        assert!((r.added_ratio().unwrap() - 0.05).abs() < 1e-9);
    }

    #[test]
    fn repeats_report_medians_and_the_json_keys() {
        let groups = vec![RttRuns {
            rtt_ms: 20,
            runs: vec![run(800.0, 600.0, 700.0, true), run(900.0, 500.0, 800.0, false), run(1000.0, 700.0, 900.0, false)],
        }];
        let report = DataBenchReport::new(&settings(3), &groups);
        let g = &report.goodput[0];
        assert!((g.via(DataVia::Tcp) - 900.0).abs() < 0.01);
        assert!((g.data_over_best - 800.0 / 900.0).abs() < 1e-4);
        let v = serde_json::to_value(&report).unwrap();
        let row = &v["goodput"][0];
        for key in ["tcp_mbps", "braid_mbps_runs", "data_complete", "data_bytes_received", "data_ratio", "data_episode_log"] {
            assert!(row.get(key).is_some(), "{key} missing in {row}");
        }
        assert_eq!(row["tcp_mbps_runs"].as_array().unwrap().len(), 3);
        assert_eq!(row["data_episodes"], 1);
        // Control runs of the first repetition only: four, one floor.
        assert_eq!(v["control"].as_array().unwrap().len(), 4);
        assert_eq!(v["control"][0]["data"], "none");
        assert_eq!(v["control"][0]["control"], "tcp");
        let p = &v["control_p50"][0];
        assert_eq!(p["floor_p50_ms"], 20.0);
        assert!((p["control_added_p50_ms"].as_f64().unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(v["complete"], true);
        assert!(report.pings_ok());
        assert_eq!(report.goodput_table().rows.len(), 1);
        assert_eq!(report.control_table().rows.len(), 4);
        assert_eq!(report.control_table().rows[3][7], "0.050");
        assert_eq!(report.goodput_chart().groups[0].1.len(), 3);
    }

    #[test]
    fn artifacts_read_back() {
        let r = run(800.0, 600.0, 760.0, true);
        let v = serde_json::to_value(&r).unwrap();
        // A control run's figures stand next to its `via`, as before they
        // were shared with the bench's rows.
        assert_eq!(v["control"][0]["via"], "none");
        assert_eq!(v["control"][0]["p50_ms"], 20.0);
        assert_eq!(v["control"][0]["pings"], 5);
        let back: DataRun = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    proptest! {
        #[test]
        fn median_lies_between_min_and_max(v in proptest::collection::vec(0.0f64..1e4, 1..20)) {
            let m = median(v.clone());
            let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(lo <= m && m <= hi);
        }

        #[test]
        fn quantiles_are_ordered(ms in proptest::collection::vec(0u64..10_000, 1..50)) {
            let v: Vec<Duration> = ms.iter().map(|&m| Duration::from_millis(m)).collect();
            let q: Vec<f64> = [0.1, 0.25, 0.5, 0.75, 0.9, 0.99].iter().map(|&q| quantile_ms(&v, q).unwrap()).collect();
            prop_assert!(q.windows(2).all(|w| w[0] <= w[1]));
        }
    }
}
