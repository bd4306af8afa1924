//! The report of `braid bench transfer`: a scenario's runs
//! ([`super::scenario`]) reduced to the issue's measures.
//!
//! - A run's **steady throughput** is the mean of its probe intervals
//!   after the first (connection set-up and slow start) and before the
//!   last (partial); a transfer too short for that counts whole.
//! - The **static optimum** is the fixed (read, net, write) setting of the
//!   sweep with the highest steady throughput, ties within [`TIE`] going
//!   to fewer workers. Tuners are compared with it interval by interval,
//!   so set-up time, which every run pays alike, does not enter.
//! - A tuner's run is read per probe interval (the last, partial interval
//!   left out). It has **converged** at the first interval from which its
//!   throughput reaches [`CONVERGED`] of the optimum's and stays there on
//!   average; `converge_intervals` counts the intervals up to it.
//!   `over_optimum` and `threads_over_optimum` are its mean throughput and
//!   mean total workers from then on, over the optimum's; `changes_after`
//!   counts the intervals from then on whose worker counts differ from
//!   the one before (0: steady, no ±1 dithering).
//! - Against peers: `braid_over_<peer>` = Braid's (Marlin's) throughput
//!   over the peer's, whole transfers, measured in the same run.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value as Json};

use super::report::{ThreadSample, TransferRun};
use super::scenario::{Role, Scenario};

/// Fixed settings within this fraction of the fastest count as tied.
pub const TIE: f64 = 0.03;

/// A tuner has converged once it holds this fraction of the optimum.
pub const CONVERGED: f64 = 0.9;

/// One fixed setting of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FixedRun {
    pub read: u32,
    pub net: u32,
    pub write: u32,
    pub throughput_mbps: f64,
}

impl FixedRun {
    /// Workers of all stages.
    pub fn total(&self) -> u32 {
        self.read + self.net + self.write
    }
}

/// A tuner's run, read against the optimum.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TunerRun {
    /// Whole transfer, Mbit/s.
    pub throughput_mbps: f64,
    /// Per probe interval.
    pub threads: Vec<ThreadSample>,
    /// Intervals until it converged; `None`: it never did.
    pub converge_intervals: Option<usize>,
    /// Mean throughput after converging over the optimum's.
    pub over_optimum: Option<f64>,
    /// Mean total workers after converging over the optimum's.
    pub threads_over_optimum: Option<f64>,
    /// Interval-to-interval changes of the worker counts after converging.
    pub changes_after: Option<usize>,
    /// Mean total workers over the last half of the intervals.
    pub settled_workers: f64,
    pub cpu_seconds_per_gb: f64,
    pub peak_memory_mb: f64,
}

/// The static optimum: the fastest fixed setting, ties to fewer workers.
pub fn optimum(sweep: &[FixedRun]) -> Option<&FixedRun> {
    let best = sweep.iter().map(|f| f.throughput_mbps).fold(f64::NAN, f64::max);
    sweep
        .iter()
        .filter(|f| f.throughput_mbps >= best * (1.0 - TIE))
        .min_by(|a, b| a.total().cmp(&b.total()).then(b.throughput_mbps.total_cmp(&a.throughput_mbps)))
}

/// Steady throughput of a run (see the module documentation), Mbit/s.
pub fn steady_mbps(run: &TransferRun) -> f64 {
    let threads = run.transfers.first().map(|t| t.threads.as_slice()).unwrap_or(&[]);
    let judged = judged(threads);
    if judged.len() >= 2 {
        mean(judged[1..].iter().map(|s| s.throughput_mbps))
    } else {
        run.throughput_mbps
    }
}

/// The intervals a tuner run is judged on: all but a final partial one.
fn judged(threads: &[ThreadSample]) -> &[ThreadSample] {
    if threads.len() > 2 {
        &threads[..threads.len() - 1]
    } else {
        threads
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// Read a tuner's run against the optimum (if there is one).
pub fn tuner_run(run: &TransferRun, optimum: Option<&FixedRun>) -> TunerRun {
    let threads = run.transfers.first().map(|t| t.threads.clone()).unwrap_or_default();
    let samples = judged(&threads);
    let half = &samples[samples.len() / 2..];
    let settled_workers = mean(half.iter().map(|s| f64::from(s.total())));
    let mut out = TunerRun {
        throughput_mbps: run.throughput_mbps,
        threads: threads.clone(),
        converge_intervals: None,
        over_optimum: None,
        threads_over_optimum: None,
        changes_after: None,
        settled_workers,
        cpu_seconds_per_gb: run.cpu_seconds_per_gb,
        peak_memory_mb: run.peak_memory_mb,
    };
    let Some(opt) = optimum else { return out };
    let bar = CONVERGED * opt.throughput_mbps;
    let from = (0..samples.len()).find(|&i| {
        samples[i].throughput_mbps >= bar && mean(samples[i..].iter().map(|s| s.throughput_mbps)) >= bar
    });
    if let Some(i) = from {
        let after = &samples[i..];
        out.converge_intervals = Some(i + 1);
        out.over_optimum = Some(mean(after.iter().map(|s| s.throughput_mbps)) / opt.throughput_mbps);
        out.threads_over_optimum = Some(mean(after.iter().map(|s| f64::from(s.total()))) / f64::from(opt.total().max(1)));
        out.changes_after = Some(after.windows(2).filter(|w| (w[0].read, w[0].net, w[0].write) != (w[1].read, w[1].net, w[1].write)).count());
    }
    out
}

/// One competing run: `transfers` at once.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CompetingRun {
    pub transfers: usize,
    pub throughput_mbps: f64,
    pub jain: f64,
    /// Workers of all transfers together, settled (mean of the last half
    /// of each transfer's intervals, summed).
    pub total_workers: f64,
}

/// A peer's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerRun {
    pub throughput_mbps: f64,
    pub cpu_seconds_per_gb: f64,
    pub peak_memory_mb: f64,
    pub encrypted: bool,
    /// `false`: stopped at the time limit, its throughput is what it had
    /// copied intact by then over the time it ran.
    pub completed: bool,
    /// Seconds it ran.
    pub seconds: f64,
    /// The congestion control of its TCP streams (the hosts' default).
    pub tcp_congestion_control: String,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    pub scenario: Scenario,
    pub link: String,
    pub encrypted: bool,
    pub tcp_congestion_control: String,
    pub sweep: Vec<FixedRun>,
    pub optimum: Option<FixedRun>,
    pub marlin: Option<TunerRun>,
    pub falcon: Option<TunerRun>,
    pub peers: BTreeMap<String, PeerRun>,
    pub competing: Vec<CompetingRun>,
    /// With `large`: iperf3 over the same testbed and streams.
    pub iperf3_mbps: Option<f64>,
    pub iperf3_streams: Option<u32>,
    /// The link's rate, Mbit/s, where it has one.
    pub link_mbps: Option<f64>,
    /// Peers that could not be measured, and why (the rest of the report
    /// stands without them).
    pub peer_errors: BTreeMap<String, String>,
}

impl BenchReport {
    /// Build the report from each run's role and report.
    pub fn new(scenario: Scenario, link_mbps: Option<f64>, runs: &[(Role, TransferRun)]) -> BenchReport {
        let sweep: Vec<FixedRun> = runs
            .iter()
            .filter_map(|(role, r)| match role {
                Role::Fixed([read, net, write]) => {
                    Some(FixedRun { read: *read, net: *net, write: *write, throughput_mbps: steady_mbps(r) })
                }
                _ => None,
            })
            .collect();
        let optimum = optimum(&sweep).cloned();
        let find = |want: &Role| runs.iter().find(|(r, _)| r == want).map(|(_, run)| run);
        let marlin_run = find(&Role::Marlin);
        let competing = runs
            .iter()
            .filter_map(|(role, r)| match role {
                Role::Competing(_) => Some(CompetingRun {
                    transfers: r.transfers.len(),
                    throughput_mbps: r.throughput_mbps,
                    jain: r.jain,
                    total_workers: r
                        .transfers
                        .iter()
                        .map(|t| {
                            let s = judged(&t.threads);
                            mean(s[s.len() / 2..].iter().map(|x| f64::from(x.total())))
                        })
                        .sum(),
                }),
                _ => None,
            })
            .collect();
        let peers = runs
            .iter()
            .filter_map(|(role, r)| match role {
                Role::Peer(name) => Some((
                    name.clone(),
                    PeerRun {
                        throughput_mbps: r.throughput_mbps,
                        cpu_seconds_per_gb: r.cpu_seconds_per_gb,
                        peak_memory_mb: r.peak_memory_mb,
                        encrypted: r.encrypted,
                        completed: r.transfers.iter().all(|t| t.completed),
                        seconds: r.transfers.iter().map(|t| t.seconds).fold(0.0, f64::max),
                        tcp_congestion_control: r.tcp_congestion_control.clone(),
                    },
                )),
                _ => None,
            })
            .collect();
        let any = runs.first().map(|(_, r)| r);
        BenchReport {
            scenario,
            link: any.map(|r| r.link.clone()).unwrap_or_default(),
            encrypted: marlin_run.or(any).is_some_and(|r| r.encrypted),
            tcp_congestion_control: marlin_run.or(any).map(|r| r.tcp_congestion_control.clone()).unwrap_or_default(),
            marlin: marlin_run.map(|r| tuner_run(r, optimum.as_ref())),
            falcon: find(&Role::Falcon).map(|r| tuner_run(r, optimum.as_ref())),
            iperf3_mbps: marlin_run.and_then(|r| r.iperf3_mbps),
            iperf3_streams: marlin_run.and_then(|r| r.iperf3_streams),
            sweep,
            optimum,
            peers,
            competing,
            link_mbps,
            peer_errors: BTreeMap::new(),
        }
    }

    /// Braid's (Marlin's) whole-transfer throughput, or the single
    /// transfer of the competing scenario.
    fn braid_mbps(&self) -> Option<f64> {
        self.marlin.as_ref().map(|m| m.throughput_mbps).or_else(|| self.competing.first().map(|c| c.throughput_mbps))
    }

    /// The JSON the command prints: the issue's keys at the top level
    /// (`throughput_mbps`, `threads`, `converge_intervals`, `over_optimum`,
    /// `threads_over_optimum`, `cpu_seconds_per_gb`, `peak_memory_mb`,
    /// `braid_over_<peer>`), the details beside them.
    pub fn json(&self) -> Json {
        let mut m = Map::new();
        m.insert("scenario".into(), json!(self.scenario.name()));
        m.insert("link".into(), json!(self.link));
        m.insert("encrypted".into(), json!(self.encrypted));
        m.insert("tcp_congestion_control".into(), json!(self.tcp_congestion_control));
        m.insert("throughput_mbps".into(), json!(self.braid_mbps()));
        if let Some(t) = &self.marlin {
            m.insert("threads".into(), json!(t.threads));
            m.insert("converge_intervals".into(), json!(t.converge_intervals));
            m.insert("over_optimum".into(), json!(t.over_optimum));
            m.insert("threads_over_optimum".into(), json!(t.threads_over_optimum));
            m.insert("changes_after_converging".into(), json!(t.changes_after));
            m.insert("settled_workers".into(), json!(t.settled_workers));
            m.insert("cpu_seconds_per_gb".into(), json!(t.cpu_seconds_per_gb));
            m.insert("peak_memory_mb".into(), json!(t.peak_memory_mb));
        }
        m.insert("optimum".into(), json!(self.optimum));
        m.insert("sweep".into(), json!(self.sweep));
        if let Some(f) = &self.falcon {
            m.insert("falcon".into(), json!(f));
        }
        if let Some(b) = self.braid_mbps() {
            for (name, p) in &self.peers {
                m.insert(format!("braid_over_{name}"), json!(b / p.throughput_mbps.max(1e-9)));
            }
            if let Some(l) = self.link_mbps {
                m.insert("over_link".into(), json!(b / l));
            }
            if let Some(i) = self.iperf3_mbps {
                m.insert("iperf3_mbps".into(), json!(i));
                m.insert("iperf3_streams".into(), json!(self.iperf3_streams));
                m.insert("over_iperf3".into(), json!(b / i.max(1e-9)));
            }
        }
        m.insert("peers".into(), json!(self.peers));
        if !self.peer_errors.is_empty() {
            m.insert("peer_errors".into(), json!(self.peer_errors));
        }
        if !self.competing.is_empty() {
            m.insert("competing".into(), json!(self.competing));
        }
        Json::Object(m)
    }

    /// Table rows: one per run.
    pub fn rows(&self) -> Vec<Vec<String>> {
        let f1 = |x: f64| format!("{x:.1}");
        let opt = |x: Option<f64>| x.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into());
        let mut rows = Vec::new();
        for f in &self.sweep {
            let mark = if self.optimum.as_ref() == Some(f) { " *" } else { "" };
            rows.push(vec![format!("fixed {}/{}/{}{mark}", f.read, f.net, f.write), f1(f.throughput_mbps), f.total().to_string(), "-".into(), "-".into(), "-".into(), "-".into()]);
        }
        for (name, t) in [("braid (marlin)", &self.marlin), ("braid (falcon)", &self.falcon)] {
            if let Some(t) = t {
                let last = t.threads.last().map(|s| format!("{}/{}/{}", s.read, s.net, s.write)).unwrap_or_else(|| "-".into());
                rows.push(vec![
                    name.to_string(),
                    f1(t.throughput_mbps),
                    last,
                    t.converge_intervals.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
                    opt(t.over_optimum),
                    opt(t.threads_over_optimum),
                    format!("{:.2}", t.cpu_seconds_per_gb),
                ]);
            }
        }
        for (name, p) in &self.peers {
            rows.push(vec![name.clone(), f1(p.throughput_mbps), "-".into(), "-".into(), "-".into(), "-".into(), format!("{:.2}", p.cpu_seconds_per_gb)]);
        }
        for c in &self.competing {
            rows.push(vec![
                format!("{} transfers", c.transfers),
                f1(c.throughput_mbps),
                format!("{:.1}", c.total_workers),
                "-".into(),
                format!("jain {:.3}", c.jain),
                "-".into(),
                "-".into(),
            ]);
        }
        rows
    }

    /// The table's header.
    pub const HEADER: [&'static str; 7] = ["run", "Mbit/s", "workers r/n/w", "converged at", "over optimum", "workers over opt.", "cpu s/GB"];

    /// Lines under the table: the ratios the issue's goals are stated in.
    pub fn footer(&self) -> Vec<String> {
        let mut out = Vec::new();
        let protection = if self.encrypted { "Braid over TLS 1.3" } else { "Braid NOT encrypted (--insecure-no-auth)" };
        let peers_cc: std::collections::BTreeSet<&str> = self.peers.values().map(|p| p.tcp_congestion_control.as_str()).collect();
        let peers_cc = if peers_cc.is_empty() {
            String::new()
        } else {
            format!(", the peers' {}", peers_cc.into_iter().collect::<Vec<_>>().join("/"))
        };
        out.push(format!(
            "{} over {}: {protection}; rclone runs over SFTP (SSH), rsync over its daemon protocol (unencrypted); TCP congestion control: Braid's streams {}{peers_cc}.",
            self.scenario.name(),
            self.link,
            self.tcp_congestion_control
        ));
        if let Some(b) = self.braid_mbps() {
            for (name, p) in &self.peers {
                let cut = if p.completed { String::new() } else { format!(" ({name} did not finish: its rate over the {:.0} s it ran)", p.seconds) };
                out.push(format!("braid_over_{name}: {:.2}{cut}", b / p.throughput_mbps.max(1e-9)));
            }
            if let Some(l) = self.link_mbps {
                out.push(format!("over_link: {:.3} of {l:.0} Mbit/s", b / l));
            }
            if let Some(i) = self.iperf3_mbps {
                out.push(format!(
                    "over_iperf3: {:.3} (iperf3 -P {} -C {} memory to memory: {i:.1} Mbit/s)",
                    b / i.max(1e-9),
                    self.iperf3_streams.unwrap_or(0),
                    self.tcp_congestion_control
                ));
            }
        }
        for (name, why) in &self.peer_errors {
            out.push(format!("{name}: not measured: {why}"));
        }
        if let (Some(m), Some(f)) = (&self.marlin, &self.falcon) {
            out.push(format!("settled workers: marlin {:.1}, falcon {:.1}", m.settled_workers, f.settled_workers));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::builtin::transfer::report::OneTransfer;

    fn sample(t: f64, [read, net, write]: [u32; 3], mbps: f64) -> ThreadSample {
        ThreadSample { t, read, net, write, throughput_mbps: mbps, loss: 0.0 }
    }

    fn run(mbps: f64, threads: Vec<ThreadSample>) -> TransferRun {
        TransferRun {
            tool: "braid".into(),
            link: "rtt=10ms,rate=1gbit".into(),
            tcp_congestion_control: "cubic".into(),
            encrypted: true,
            transfers: vec![OneTransfer {
                seconds: 10.0,
                bytes: 1,
                files: 1,
                throughput_mbps: mbps,
                sender_cpu_secs: 0.0,
                receiver_cpu_secs: 0.0,
                sender_peak_mb: 1.0,
                receiver_peak_mb: 1.0,
                threads,
                completed: true,
                tcp_congestion: None,
            }],
            throughput_mbps: mbps,
            jain: 1.0,
            cpu_seconds_per_gb: 1.0,
            peak_memory_mb: 1.0,
            iperf3_mbps: None,
            iperf3_streams: None,
        }
    }

    #[test]
    fn the_optimum_is_the_fastest_with_ties_to_fewer_workers() {
        let f = |r, n, w, t| FixedRun { read: r, net: n, write: w, throughput_mbps: t };
        let sweep = vec![f(2, 1, 1, 60.0), f(4, 1, 1, 130.0), f(6, 1, 1, 132.0), f(4, 2, 2, 133.0)];
        assert_eq!(optimum(&sweep), Some(&sweep[1]));
        assert_eq!(optimum(&[]), None);
    }

    #[test]
    fn a_tuner_is_read_against_the_optimum() {
        let opt = FixedRun { read: 4, net: 1, write: 1, throughput_mbps: 100.0 };
        let threads = vec![
            sample(1.0, [1, 1, 1], 30.0),
            sample(2.0, [2, 1, 1], 60.0),
            sample(3.0, [4, 1, 1], 95.0),
            sample(4.0, [4, 1, 1], 99.0),
            sample(5.0, [5, 1, 1], 100.0),
            sample(6.0, [4, 1, 1], 98.0),
            sample(6.5, [4, 1, 1], 20.0), // the partial last interval
        ];
        let t = tuner_run(&run(80.0, threads), Some(&opt));
        assert_eq!(t.converge_intervals, Some(3));
        assert!((t.over_optimum.unwrap() - 0.98).abs() < 1e-9, "{t:?}");
        assert!((t.threads_over_optimum.unwrap() - 6.25 / 6.0).abs() < 1e-9, "{t:?}");
        assert_eq!(t.changes_after, Some(2));
        // Never at 0.9 of the optimum: not converged.
        let slow = tuner_run(&run(50.0, vec![sample(1.0, [1, 1, 1], 50.0); 5]), Some(&opt));
        assert_eq!(slow.converge_intervals, None);
    }

    #[test]
    fn the_json_carries_the_issues_keys_and_peer_ratios() {
        let threads = vec![sample(1.0, [4, 1, 1], 100.0); 4];
        let runs = vec![
            (Role::Fixed([4, 1, 1]), run(100.0, vec![])),
            (Role::Marlin, run(90.0, threads)),
            (Role::Falcon, run(80.0, vec![sample(1.0, [6, 6, 6], 100.0); 4])),
            (Role::Peer("rsync".into()), run(30.0, vec![])),
        ];
        let r = BenchReport::new(Scenario::Read, Some(1000.0), &runs);
        let j = r.json();
        for key in ["throughput_mbps", "threads", "converge_intervals", "over_optimum", "threads_over_optimum", "cpu_seconds_per_gb", "peak_memory_mb", "braid_over_rsync", "over_link"] {
            assert!(j.get(key).is_some(), "{key} in {j}");
        }
        assert_eq!(j["braid_over_rsync"], 3.0);
        assert_eq!(j["converge_intervals"], 1);
        assert_eq!(r.rows().len(), 4);
        assert!(r.footer().iter().any(|l| l.contains("settled workers: marlin 6.0, falcon 18.0")), "{:?}", r.footer());
    }

    #[test]
    fn a_peer_stopped_at_the_time_limit_is_reported_as_such() {
        let mut slow = run(5.0, vec![]);
        slow.transfers[0].completed = false;
        let runs = vec![(Role::Marlin, run(500.0, vec![sample(1.0, [1, 1, 1], 500.0); 3])), (Role::Peer("rclone".into()), slow)];
        let mut r = BenchReport::new(Scenario::SmallFiles, None, &runs);
        r.peer_errors.insert("rsync".into(), "not installed".into());
        let j = r.json();
        assert_eq!(j["braid_over_rclone"], 100.0);
        assert_eq!(j["peers"]["rclone"]["completed"], false);
        assert_eq!(j["peer_errors"]["rsync"], "not installed");
        let footer = r.footer().join("\n");
        assert!(footer.contains("braid_over_rclone: 100.00 (rclone did not finish: its rate over the 10 s it ran)"), "{footer}");
        assert!(footer.contains("rsync: not measured: not installed"), "{footer}");
    }
}
