//! `braid bench data`: DATA (the learned TCP/Braid mix of seed 000 §IV)
//! against TCP only and Braid only over the emulator, and the paper's
//! Fig. 8, the latency of small control messages while a bulk transfer
//! runs.
//!
//! For each RTT a two-host testbed is built (`rtt=<r>ms,rate=<rate>`, the
//! link queue its default of 1 BDP). On it:
//!
//! 1. Goodput (median of `--repeat` runs): `--bytes` of bulk data in `--message-size` messages from a
//!    node on host `a` to a node on host `b`, over TCP, over Braid and
//!    through the DATA interceptor (default learner, pattern selection),
//!    each timed from its first message to the receiver's last byte, and
//!    `data_over_best` = DATA's goodput over the better of the other two.
//! 2. Control latency (Fig. 8; skipped with `--control-secs 0`): a ping
//!    over TCP, answered by a pong over TCP, one at a time, for
//!    `--control-secs`, while bulk data flows over nothing (the baseline),
//!    TCP (the same TCP channel as the pings), Braid or DATA; p50 and p99
//!    of the round trips after a warm-up (and p10, p25, p75, p90 and the
//!    mean, which tell a standing queue from occasional losses). With data over TCP the pings
//!    wait behind the TCP channel's queue (the node's channel queue, and
//!    `NodeConfig::tcp_notsent_lowat` in the kernel); with DATA they do
//!    not, since DATA's stream has TCP and Braid channels of its own. A
//!    ping never beats the
//!    path's RTT, nor the bottleneck queue the bulk flow keeps full, so
//!    at long RTTs `p50 / tcp-tcp p50` is bounded below by those, whatever
//!    carries the data.
//!
//! The floor argument. A ping's round trip is at least the no-bulk p50
//! (`floor_p50_ms`: the path's RTT plus the hosts' processing). What bulk
//! data adds on top has three sources: (a) queues in the sending node and
//! kernel the ping shares with the data (the TCP channel's queue and
//! unsent bytes, and TCP's in-order delivery behind a lost data segment),
//! (b) the bottleneck queue the bulk flow's congestion control keeps, and
//! (c) CPU contention on the hosts. TCP/TCP pays all three; with DATA,
//! whose stream has channels of its own (the node's bulk lane), (a) is
//! gone and only (b) and (c) remain, as for TCP/Braid; and (b) is small,
//! since DATA's Braid connections run BBR (`NodeConfig::
//! bulk_congestion_control`, `--data-bulk-cc`), where Braid alone runs
//! Braid's default, CUBIC, which fills the queue as TCP does. So the literal
//! goal, DATA's p50 ≤ 1/10 of TCP/TCP's p50, cannot hold once the RTT
//! is more than 1/10 of TCP/TCP's p50 (150 and 320 ms here: TCP/TCP's
//! p50 is the RTT plus a few hundred ms): the comparable measure is the
//! added latency, `control_added_p50_ms` = DATA's p50 − the floor, and
//! `control_added_ratio` = that over TCP/TCP's added p50 (goal ≤ 0.1).
//! At long RTTs a run of `--control-secs` holds few pings (one per RTT
//! plus 10 ms), so p50 and above all p99 are noisy there.
//!
//! Buffers, so that a 1 Gbit/s × 320 ms path (40 MB in flight) is not
//! limited by them: inside each host's namespace
//! `net.ipv4.tcp_rmem`/`tcp_wmem` get a maximum of 4 BDP, at least 16 MiB
//! (these are per network namespace; autotuning grows the buffers only
//! as far as needed); Braid's receive window and send buffer are 3 BDP
//! (the 1-BDP link queue can double the RTT), at least 4 MiB. Not more:
//! whatever sits unsent in a transport's send buffer when DATA's stream
//! ends drains over that transport alone while the other idles (measured
//! at 3 ms with a 16 MiB floor, 45 BDP: DATA's last episode at 2/3 of the
//! path, `data_over_best` 0.88; with 4 MiB 0.99, Braid alone unchanged
//! within the noise). The global
//! `net.core.rmem_max`/`wmem_max`, which cap Braid's UDP socket buffers,
//! are raised to 64 MiB if lower for the run, and put back afterwards
//! unless another program changed them meanwhile.

mod hosts;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use braid::emu::Testbed;
use braid::node::data::DataConfig;
use braid::node::{NodeConfig, Transport};
use braid::size::ByteSize;
use clap::Args;
use serde_json::json;

use self::hosts::{BulkResult, ControlResult, DataVia, RunSettings};
use braid_lab::plot::chart::{write_bar_chart, BarChart};
use super::{emit, parse_size, Outcome};

#[derive(Debug, Args)]
pub struct BenchDataArgs {
    /// Bulk bytes per transfer (e.g. 400MiB).
    #[arg(long, value_name = "SIZE", default_value = "400MiB", value_parser = parse_size)]
    bytes: ByteSize,
    /// Round-trip times to test, in milliseconds, comma-separated.
    #[arg(long, value_name = "MS,...", value_delimiter = ',', default_value = "0,3,150,320", value_parser = parse_rtt)]
    rtts: Vec<u32>,
    /// Bottleneck rate of the emulated link, as in a link spec (e.g. 1gbit, 500mbit).
    #[arg(long, value_name = "RATE", default_value = "1gbit", value_parser = parse_rate)]
    rate: String,
    /// Size of each bulk data message.
    #[arg(long, value_name = "SIZE", default_value = "64KiB", value_parser = parse_message_size)]
    message_size: ByteSize,
    /// Length of each control-latency run (Fig. 8), seconds; 0 skips them.
    #[arg(long, value_name = "SECS", default_value_t = 10.0, value_parser = parse_control_secs)]
    control_secs: f64,
    /// Goodput runs per variant and RTT, interleaved (tcp, braid, data,
    /// tcp, …); the median counts. More runs, less noise in
    /// `data_over_best` on a busy machine.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=20))]
    repeat: u32,
    /// Give up a transfer after this many seconds.
    #[arg(long, value_name = "SECS", default_value = "180", value_parser = super::parse_secs)]
    timeout: Duration,
    /// Seed of the DATA learner's exploration.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run DATA with this fixed ratio (signed: -1 all TCP … 1 all Braid)
    /// instead of the learner.
    #[arg(long, value_name = "R", allow_hyphen_values = true, value_parser = parse_ratio)]
    data_ratio: Option<f64>,
    /// Length of the DATA learner's episodes, in milliseconds (default:
    /// the learner's).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(10..=60_000))]
    data_episode: Option<u64>,
    /// Congestion control of DATA's Braid connections (the node's bulk
    /// lane): bbr (the node's default), cubic (Braid's default, as the
    /// other channels) or another of Braid's controllers (newreno,
    /// ledbat, ledbat++, multcp, priority).
    #[arg(long, value_name = "NAME")]
    data_bulk_cc: Option<braid::CcAlgorithm>,
    /// DATA's release window, in messages (default: the interceptor's).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    data_window: Option<u32>,
    /// Write a bar chart of goodput per RTT (SVG).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

fn parse_rtt(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(v) if v <= 10_000 => Ok(v),
        _ => Err(format!("invalid RTT `{s}`: expected whole milliseconds from 0 to 10000, e.g. 0,3,150,320")),
    }
}

fn parse_rate(s: &str) -> Result<String, String> {
    let s = s.trim().to_string();
    format!("rate={s}")
        .parse::<braid::LinkSpec>()
        .map_err(|e| format!("invalid rate `{s}`: {e} (expected e.g. 1gbit, 500mbit)"))?;
    Ok(s)
}

fn parse_message_size(s: &str) -> Result<ByteSize, String> {
    let v = parse_size(s)?;
    if !(1..=(16 << 20)).contains(&v.0) {
        return Err(format!("invalid message size `{s}`: expected 1 byte to 16MiB"));
    }
    Ok(v)
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (-1.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("invalid ratio `{s}`: expected a number from -1 (all TCP) to 1 (all Braid)")),
    }
}

fn parse_control_secs(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v == 0.0 || (2.0..=600.0).contains(&v) => Ok(v),
        _ => Err(format!("invalid --control-secs `{s}`: expected 0 (skip) or 2 to 600 seconds")),
    }
}

/// Bandwidth-delay product in bytes of `rate` at `rtt_ms`.
fn bdp(rate: &str, rtt_ms: u32) -> anyhow::Result<u64> {
    let spec: braid::LinkSpec = format!("rtt={rtt_ms}ms,rate={rate}").parse().map_err(|e| anyhow::anyhow!("{e}"))?;
    let bps = spec.rate().map(|r| r.bits_per_sec()).unwrap_or(0);
    Ok(bps / 8 * u64::from(rtt_ms) / 1000)
}

/// Raise a global sysctl under /proc/sys to at least `min`.
fn raise_global(path: &'static str, min: u64) -> anyhow::Result<RaisedLimit> {
    let now: u64 = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?.trim().parse().unwrap_or(0);
    if now >= min {
        return Ok(RaisedLimit { path, restore: None });
    }
    std::fs::write(path, min.to_string()).with_context(|| format!("raising {path} to {min}"))?;
    Ok(RaisedLimit { path, restore: Some((now, min)) })
}

/// A global limit this run raised: put back when the run ends (even on
/// error), unless something else changed it meanwhile.
struct RaisedLimit {
    path: &'static str,
    /// (the value before, the value written).
    restore: Option<(u64, u64)>,
}

impl Drop for RaisedLimit {
    fn drop(&mut self) {
        let Some((before, written)) = self.restore else { return };
        let current = std::fs::read_to_string(self.path).ok().and_then(|v| v.trim().parse::<u64>().ok());
        if current == Some(written) {
            if let Err(e) = std::fs::write(self.path, before.to_string()) {
                eprintln!("warning: could not restore {} to {before}: {e}", self.path);
            }
        }
    }
}

/// Set TCP's buffer limits inside both hosts' namespaces.
fn tune_tcp(tb: &Testbed, max: u64) -> anyhow::Result<()> {
    for host in ["a", "b"] {
        for (key, default) in [("net.ipv4.tcp_rmem", 131_072), ("net.ipv4.tcp_wmem", 16_384)] {
            let out = tb
                .command(host, "sysctl")?
                .args(["-q", "-w", &format!("{key}=4096 {default} {max}")])
                .output()
                .with_context(|| format!("running sysctl on {host}"))?;
            anyhow::ensure!(out.status.success(), "sysctl {key} on {host}: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    Ok(())
}

fn settings(args: &BenchDataArgs, bdp: u64) -> RunSettings {
    let window = (3 * bdp).max(4 << 20);
    let mut node = NodeConfig { transports: vec![Transport::Tcp, Transport::Braid], ..Default::default() };
    node.braid.transport.receive_window = window;
    node.braid.transport.send_buffer = window;
    let mut data = DataConfig::default();
    if let braid::node::data::PolicyConfig::Learner(l) = &mut data.policy {
        l.seed = args.seed;
        if let Some(ms) = args.data_episode {
            l.episode = Duration::from_millis(ms);
        }
    }
    if let Some(r) = args.data_ratio {
        data.policy = braid::node::data::PolicyConfig::Static(braid::node::data::Ratio::from_signed(r, 20));
    }
    if let Some(w) = args.data_window {
        data.flow.window = w as usize;
    }
    if let Some(cc) = args.data_bulk_cc {
        node.bulk_congestion_control = Some(cc);
    }
    RunSettings { node, data, message_size: args.message_size.0 as usize, limit: args.timeout }
}

struct RttResult {
    rtt_ms: u32,
    bulk: Vec<(DataVia, BulkResult)>,
    control: Vec<(DataVia, ControlResult)>,
}

fn mbps(r: &BulkResult) -> f64 {
    r.bytes_received as f64 * 8.0 / r.secs / 1e6
}

fn quantile_ms(v: &[Duration], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort();
    let i = ((s.len() - 1) as f64 * q).round() as usize;
    Some(s[i].as_secs_f64() * 1e3)
}

impl RttResult {
    fn goodput(&self, via: DataVia) -> f64 {
        let mut runs: Vec<f64> = self.bulk.iter().filter(|(v, _)| *v == via).map(|(_, r)| mbps(r)).collect();
        runs.sort_by(f64::total_cmp);
        match runs.len() {
            0 => 0.0,
            n if n % 2 == 1 => runs[n / 2],
            n => (runs[n / 2 - 1] + runs[n / 2]) / 2.0,
        }
    }
    fn data_over_best(&self) -> f64 {
        let best = self.goodput(DataVia::Tcp).max(self.goodput(DataVia::Braid));
        if best > 0.0 {
            self.goodput(DataVia::Data) / best
        } else {
            0.0
        }
    }
    fn p50(&self, via: DataVia) -> Option<f64> {
        self.control.iter().find(|(v, _)| *v == via).and_then(|(_, c)| quantile_ms(&c.rtts, 0.5))
    }
    /// The control p50 that bulk data over `via` adds to the no-bulk
    /// floor (see the module documentation).
    fn added_p50(&self, via: DataVia) -> Option<f64> {
        Some(self.p50(via)? - self.p50(DataVia::None)?)
    }
    /// DATA's added control p50 over TCP/TCP's.
    fn added_ratio(&self) -> Option<f64> {
        match (self.added_p50(DataVia::Data), self.added_p50(DataVia::Tcp)) {
            (Some(d), Some(t)) if t > 0.0 => Some(d / t),
            _ => None,
        }
    }
}

pub async fn run(args: BenchDataArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(!args.rtts.is_empty(), "--rtts: give at least one RTT in milliseconds, e.g. 0,3,150,320");
    anyhow::ensure!(args.bytes.0 > 0, "--bytes: expected a positive size, e.g. 400MiB");
    braid::emu::check_capabilities().context("`braid bench data` runs over the emulator")?;
    let json = args.json;
    tokio::task::spawn_blocking(move || measure(&args).map(|r| (args, r)))
        .await
        .context("the benchmark thread panicked")?
        .and_then(|(args, results)| report(&args, &results, json))
}

fn measure(args: &BenchDataArgs) -> anyhow::Result<Vec<RttResult>> {
    let hidden = args.json || !std::io::IsTerminal::is_terminal(&std::io::stderr());
    let bar = super::progress::bytes_bar(args.bytes.0, "", hidden);
    let _rmem = raise_global("/proc/sys/net/core/rmem_max", 64 << 20)?;
    let _wmem = raise_global("/proc/sys/net/core/wmem_max", 64 << 20)?;
    let mut out = Vec::new();
    for &rtt in &args.rtts {
        let bdp = bdp(&args.rate, rtt)?;
        let spec = format!("rtt={rtt}ms,rate={}", args.rate);
        let tb = Testbed::builder().link(spec.parse().map_err(|e| anyhow::anyhow!("{spec}: {e}"))?).build()?;
        tune_tcp(&tb, (4 * bdp).max(16 << 20))?;
        let s = settings(args, bdp);
        let mut r = RttResult { rtt_ms: rtt, bulk: Vec::new(), control: Vec::new() };
        for via in (0..args.repeat).flat_map(|_| [DataVia::Tcp, DataVia::Braid, DataVia::Data]) {
            bar.reset();
            bar.set_length(args.bytes.0);
            bar.set_prefix(format!("{rtt}ms {}", via.name()));
            let res = hosts::bulk(&tb, via, args.bytes.0, &s, &|b| bar.set_position(b))?;
            if !hidden {
                bar.println(format!("rtt {rtt} ms, {}: {:.0} Mbit/s{}", via.name(), mbps(&res), if res.complete { "" } else { " (incomplete)" }));
            }
            r.bulk.push((via, res));
        }
        if args.control_secs > 0.0 {
            let d = Duration::from_secs_f64(args.control_secs);
            // Skip the connection set-up and the first round trips.
            let warmup = (d / 5).max(Duration::from_millis(u64::from(rtt) * 4)).min(d / 2);
            for via in [DataVia::None, DataVia::Tcp, DataVia::Braid, DataVia::Data] {
                bar.reset();
                bar.set_length(0);
                bar.set_prefix(format!("{rtt}ms ping/{}", via.name()));
                let c = hosts::control(&tb, via, d, warmup, &s)?;
                if !hidden {
                    bar.println(format!(
                        "rtt {rtt} ms, control over tcp, data over {}: {} pings, p50 {:.2} ms",
                        via.name(),
                        c.rtts.len(),
                        quantile_ms(&c.rtts, 0.5).unwrap_or(f64::NAN)
                    ));
                }
                r.control.push((via, c));
            }
        }
        drop(tb);
        out.push(r);
    }
    bar.finish_and_clear();
    Ok(out)
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into())
}

fn report(args: &BenchDataArgs, results: &[RttResult], json: bool) -> anyhow::Result<Outcome> {
    let complete = results.iter().all(|r| r.bulk.iter().all(|(_, b)| b.complete));
    let pings_ok = results.iter().all(|r| r.control.iter().all(|(_, c)| !c.rtts.is_empty()));
    if let Some(path) = &args.plot {
        let chart = BarChart {
            title: format!("Goodput of {} over {} (DATA vs TCP vs Braid)", args.bytes, args.rate),
            y_label: "goodput (Mbit/s)".into(),
            groups: results
                .iter()
                .map(|r| {
                    (
                        format!("{} ms", r.rtt_ms),
                        [DataVia::Tcp, DataVia::Braid, DataVia::Data].iter().map(|&v| (v.name().to_string(), r.goodput(v))).collect(),
                    )
                })
                .collect(),
        };
        write_bar_chart(path, &chart)?;
    }
    if json {
        let goodput: Vec<_> = results
            .iter()
            .map(|r| {
                let mut o = json!({
                    "rtt_ms": r.rtt_ms,
                    "data_over_best": r.data_over_best(),
                });
                // Details of the last run of each variant; goodput: the
                // median and every run.
                for (via, b) in &r.bulk {
                    let n = via.name();
                    o[format!("{n}_secs")] = json!(b.secs);
                    o[format!("{n}_bytes_sent")] = json!(b.bytes_sent);
                    o[format!("{n}_bytes_received")] = json!(b.bytes_received);
                    o[format!("{n}_messages_received")] = json!(b.messages_received);
                    o[format!("{n}_complete")] = json!(b.complete);
                    if let Some(d) = &b.data {
                        o["data_ratio"] = json!(d.ratio);
                        o["data_tcp_messages"] = json!(d.tcp_messages);
                        o["data_braid_messages"] = json!(d.braid_messages);
                        o["data_episodes"] = json!(d.episodes.len());
                        // The learner's path: (ratio, taken Mbit/s, delivered Mbit/s, next ratio, observed Braid share, length in s) per episode.
                        o["data_episode_log"] = json!(d
                            .episodes
                            .iter()
                            .map(|e| {
                                json!([
                                    e.ratio,
                                    e.throughput_bps * 8e-6,
                                    e.delivered_bps * 8e-6,
                                    e.next_ratio,
                                    e.observed_braid_fraction,
                                    e.secs
                                ])
                            })
                            .collect::<Vec<_>>());
                    }
                }
                for via in [DataVia::Tcp, DataVia::Braid, DataVia::Data] {
                    let n = via.name();
                    let runs: Vec<&BulkResult> = r.bulk.iter().filter(|(v, _)| *v == via).map(|(_, b)| b).collect();
                    o[format!("{n}_mbps")] = json!(r.goodput(via));
                    o[format!("{n}_mbps_runs")] = json!(runs.iter().map(|b| mbps(b)).collect::<Vec<_>>());
                    o[format!("{n}_complete")] = json!(runs.iter().all(|b| b.complete));
                }
                o
            })
            .collect();
        let control: Vec<_> = results
            .iter()
            .flat_map(|r| {
                r.control.iter().map(move |(via, c)| {
                    json!({
                        "rtt_ms": r.rtt_ms,
                        "control": "tcp",
                        "data": via.name(),
                        "pings": c.rtts.len(),
                        "p10_ms": quantile_ms(&c.rtts, 0.1),
                        "p25_ms": quantile_ms(&c.rtts, 0.25),
                        "p50_ms": quantile_ms(&c.rtts, 0.5),
                        "p75_ms": quantile_ms(&c.rtts, 0.75),
                        "p90_ms": quantile_ms(&c.rtts, 0.9),
                        "p99_ms": quantile_ms(&c.rtts, 0.99),
                        "mean_ms": (!c.rtts.is_empty()).then(|| c.rtts.iter().map(|d| d.as_secs_f64() * 1e3).sum::<f64>() / c.rtts.len() as f64),
                        "bulk_mbps": c.bulk_bytes as f64 * 8.0 / args.control_secs / 1e6,
                        "data_ratio": c.data.as_ref().map(|d| d.ratio),
                    })
                })
            })
            .collect();
        let p50_ratio: Vec<_> = results
            .iter()
            .filter(|r| !r.control.is_empty())
            .map(|r| {
                let ratio = match (r.p50(DataVia::Data), r.p50(DataVia::Tcp)) {
                    (Some(d), Some(t)) if t > 0.0 => Some(d / t),
                    _ => None,
                };
                json!({
                    "rtt_ms": r.rtt_ms,
                    "data_p50_over_tcp_p50": ratio,
                    "floor_p50_ms": r.p50(DataVia::None),
                    "tcp_added_p50_ms": r.added_p50(DataVia::Tcp),
                    "braid_added_p50_ms": r.added_p50(DataVia::Braid),
                    "control_added_p50_ms": r.added_p50(DataVia::Data),
                    "control_added_ratio": r.added_ratio(),
                })
            })
            .collect();
        let o = json!({
            "bytes": args.bytes.0,
            "rate": args.rate,
            "message_size": args.message_size.0,
            "repeat": args.repeat,
            "rtts_ms": args.rtts,
            "goodput": goodput,
            "control": control,
            "control_p50": p50_ratio,
            "complete": complete,
        });
        emit(&o.to_string());
    } else {
        let header = ["rtt", "tcp Mbit/s", "braid Mbit/s", "data Mbit/s", "data_over_best", "data ratio (-1 tcp..1 braid)"];
        let rows: Vec<Vec<String>> = results
            .iter()
            .map(|r| {
                let ratio = r.bulk.iter().find_map(|(_, b)| b.data.as_ref().map(|d| format!("{:+.2}", d.ratio))).unwrap_or_default();
                vec![
                    format!("{} ms", r.rtt_ms),
                    format!("{:.0}", r.goodput(DataVia::Tcp)),
                    format!("{:.0}", r.goodput(DataVia::Braid)),
                    format!("{:.0}", r.goodput(DataVia::Data)),
                    format!("{:.3}", r.data_over_best()),
                    ratio,
                ]
            })
            .collect();
        emit(&format!("Goodput of {} over rate={} (queue 1 BDP):", args.bytes, args.rate));
        emit(&super::table::render(&header, &rows));
        if results.iter().any(|r| !r.control.is_empty()) {
            let header =
                ["rtt", "control/data", "pings", "p50 ms", "p99 ms", "p50 / tcp/tcp p50", "added p50 ms", "added / tcp/tcp added"];
            let mut rows = Vec::new();
            for r in results {
                for (via, c) in &r.control {
                    let p50 = quantile_ms(&c.rtts, 0.5);
                    let rel = match (p50, r.p50(DataVia::Tcp)) {
                        (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
                        _ => "-".into(),
                    };
                    let added = (*via != DataVia::None).then(|| r.added_p50(*via)).flatten();
                    let added_rel = match (added, r.added_p50(DataVia::Tcp)) {
                        (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
                        _ => "-".into(),
                    };
                    rows.push(vec![
                        format!("{} ms", r.rtt_ms),
                        format!("tcp/{}", via.name()),
                        c.rtts.len().to_string(),
                        fmt_opt(p50),
                        fmt_opt(quantile_ms(&c.rtts, 0.99)),
                        rel,
                        fmt_opt(added),
                        added_rel,
                    ]);
                }
            }
            emit(&format!("Control-message round trips (Fig. 8) over {:.0} s runs:", args.control_secs));
            emit(&super::table::render(&header, &rows));
        }
    }
    Ok(if complete && pings_ok { Outcome::Success } else { Outcome::CheckFailed })
}
