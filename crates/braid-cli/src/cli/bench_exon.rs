//! `braid bench exon`: Exon exactly-once messaging against kernel TCP over
//! the emulator, in the settings of the Exon paper's evaluation (§V).
//!
//! Each measurement builds a two-host testbed (`braid-emu`) with the given
//! link, runs Exon (a node in host a to a node in host b) and then kernel
//! TCP over the same link, and checks every Exon message end to end by its
//! identifier (`lost`, `duplicated`). Patterns: `oneway` (a sends as fast
//! as backpressure allows; msgs/s at b) and `rpc` (`--actors` loops at a,
//! each waiting for its reply before the next request; TCP multiplexes
//! them on one connection as the paper's middleware does; requests/s and
//! latency). A run measures until `--messages` messages (requests) or
//! `--timeout` seconds, whichever comes first, and the rate is computed
//! over what arrived in that window, so lossy TCP cannot stall a grid.
//! `--grid` runs the paper's settings, `--fairness` one Exon and one TCP
//! CUBIC flow at once, `--loopback` message rates on 127.0.0.1 without the
//! emulator.

mod exon_run;
mod measure;
mod message;
mod place;
mod tcp_run;

use std::time::Duration;

use anyhow::{bail, Context};
use braid::size::ByteSize;
use braid::LinkSpec;
use braid_emu::Testbed;
use braid_exon::ExonCc;
use braid_exon_net::SocketConfig;
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::{json, Value};

use super::{emit, parse_link, parse_secs, parse_size, table, Outcome};
use measure::{PeerResult, RunCfg};
use place::Ends;

/// The paper's link when none is given: RTT 10 ms, 100 Mbit/s (queue: the
/// spec's default, one bandwidth-delay product).
const DEFAULT_LINK: &str = "rtt=10ms,rate=100mbit";
/// The fairness experiment's link.
const FAIRNESS_LINK: &str = "rate=100mbit,rtt=20ms";
/// The paper's grid (§V-D, V-E): bandwidth at 10 ms, RTT at 10 Mbit/s,
/// loss at 100 Mbit/s and 10 ms (duplicates of one setting run once).
const GRID: [&str; 7] = [
    "rtt=10ms,rate=1mbit",
    "rtt=10ms,rate=10mbit",
    "rtt=10ms,rate=100mbit",
    "rtt=6ms,rate=10mbit",
    "rtt=100ms,rate=10mbit",
    "rtt=10ms,rate=100mbit,loss=1%",
    "rtt=10ms,rate=100mbit,loss=5%",
];
/// Largest message (Exon's limit).
const MAX_SIZE: u64 = 16 << 20;
/// Fairness: seconds before the shares are measured (start-up excluded).
const FAIRNESS_WARMUP: Duration = Duration::from_secs(3);

/// Messaging pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Pattern {
    /// No-wait unidirectional messages: msgs/s.
    Oneway,
    /// Request/reply loops (--actors of them): requests/s and latency.
    Rpc,
}

impl Pattern {
    fn name(self) -> &'static str {
        match self {
            Pattern::Oneway => "oneway",
            Pattern::Rpc => "rpc",
        }
    }
    fn rate_key(self) -> &'static str {
        match self {
            Pattern::Oneway => "msgs_per_s",
            Pattern::Rpc => "requests_per_s",
        }
    }
}

#[derive(Debug, Args)]
pub struct BenchExonArgs {
    /// oneway (msgs/s) or rpc (requests/s, latency). Default oneway; --grid without it runs both.
    #[arg(long, value_enum)]
    pattern: Option<Pattern>,
    /// Concurrent request/reply loops (rpc).
    #[arg(long, value_name = "N", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    actors: u64,
    /// The emulated link [default: rtt=10ms,rate=100mbit; with --fairness rate=100mbit,rtt=20ms].
    #[arg(long, value_name = "SPEC", value_parser = parse_link, conflicts_with_all = ["grid", "loopback"])]
    link: Option<LinkSpec>,
    /// Message (request, reply) size; 1KB = 1000 bytes as in the paper (8 B to 16 MiB).
    #[arg(long, value_name = "B", value_parser = parse_size, default_value = "1000")]
    size: ByteSize,
    /// Messages (one-way) or requests (rpc, over all actors) per run, at most.
    #[arg(long, value_name = "M", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    messages: u64,
    /// Seconds each run measures at most (it ends earlier once M arrived); fairness: seconds measured after 3 s of warm-up.
    #[arg(long, value_name = "SECS", default_value = "10", value_parser = parse_secs)]
    timeout: Duration,
    /// The paper's grid: 1/10/100 Mbit/s at 10 ms, 6/10/100 ms at 10 Mbit/s, loss 0/1/5% at 100 Mbit/s.
    #[arg(long, conflicts_with_all = ["fairness", "loopback"])]
    grid: bool,
    /// One Exon flow and one kernel TCP CUBIC flow at once: each one's share of the link.
    #[arg(long, conflicts_with = "loopback")]
    fairness: bool,
    /// No emulator: one-way msgs/s at 64 B and 1 KiB on 127.0.0.1, Exon vs TCP.
    #[arg(long)]
    loopback: bool,
    /// Exon's congestion control: bbr, newreno or cubic.
    #[arg(long, value_name = "ALGO", default_value = "bbr", value_parser = parse_exon_cc)]
    cc: ExonCc,
    /// Run Exon's BBR-style controller without its queue-loss guard (for comparison: unfair to TCP).
    #[arg(long)]
    no_guard: bool,
    /// Congestion control of the kernel TCP peer (the paper's Linux default was cubic).
    #[arg(long, value_name = "ALGO", default_value = "cubic", value_parser = parse_tcp_cc)]
    tcp_cc: String,
    /// Seed of the emulated links' random choices (loss).
    #[arg(long, value_name = "S", default_value_t = 0)]
    seed: u64,
    /// Keep Exon's sender and receiver records durable in DIR (clock and journal files per node, removed before each run; one fsync per group commit): exactly-once across crashes, at the cost measured here.
    #[arg(long, value_name = "DIR")]
    journal: Option<std::path::PathBuf>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

fn cc_name(cc: ExonCc) -> String {
    match cc {
        ExonCc::Bbr => "bbr".into(),
        ExonCc::Loss(a) => a.to_string(),
    }
}

fn parse_tcp_cc(s: &str) -> Result<String, String> {
    let ok = !s.is_empty() && s.len() < 16 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!("invalid TCP congestion control `{s}`: expected a kernel algorithm name such as cubic, reno or bbr"))
    }
}

fn parse_exon_cc(s: &str) -> Result<ExonCc, String> {
    s.parse::<ExonCc>()
}

pub async fn run(args: BenchExonArgs) -> anyhow::Result<Outcome> {
    if args.size.0 < message::MIN_SIZE as u64 || args.size.0 > MAX_SIZE {
        bail!("--size {}: must be between 8 B and 16 MiB (e.g. 1000, 1KiB, 64)", args.size.0);
    }
    // Testbeds and the measurement threads block: keep them off the async
    // workers.
    tokio::task::spawn_blocking(move || run_blocking(args)).await.context("benchmark task")?
}

fn run_blocking(args: BenchExonArgs) -> anyhow::Result<Outcome> {
    if args.loopback {
        return loopback(&args);
    }
    braid_emu::check_capabilities()?;
    if args.fairness {
        return fairness(&args);
    }
    let patterns: Vec<Pattern> = match (args.pattern, args.grid) {
        (Some(p), _) => vec![p],
        (None, true) => vec![Pattern::Oneway, Pattern::Rpc],
        (None, false) => vec![Pattern::Oneway],
    };
    let links: Vec<LinkSpec> = if args.grid {
        GRID.iter().map(|s| s.parse().expect("static spec")).collect()
    } else {
        vec![args.link.clone().unwrap_or_else(|| DEFAULT_LINK.parse().expect("static spec"))]
    };
    let bar = progress(args.json, (links.len() * patterns.len() * 2) as u64);
    let mut rows = Vec::new();
    for link in &links {
        let tb = Testbed::builder().seed(args.seed).link(link.clone()).build()?;
        let ends = Ends::testbed(&tb)?;
        for &p in &patterns {
            let cfg = run_cfg(&args, link);
            bar.set_message(format!("{} {link}: Exon", p.name()));
            let exon = match p {
                Pattern::Oneway => exon_run::oneway(&ends, &cfg),
                Pattern::Rpc => exon_run::rpc(&ends, &cfg),
            }
            .with_context(|| format!("Exon {} over {link}", p.name()))?;
            bar.inc(1);
            bar.set_message(format!("{} {link}: TCP", p.name()));
            let tcp = match p {
                Pattern::Oneway => tcp_run::oneway(&ends, &cfg, &args.tcp_cc),
                Pattern::Rpc => tcp_run::rpc(&ends, &cfg, &args.tcp_cc),
            }
            .with_context(|| format!("TCP {} over {link}", p.name()))?;
            bar.inc(1);
            rows.push(Row { pattern: p, link: link.to_string(), exon, tcp });
        }
        tb.down()?;
    }
    bar.finish_and_clear();
    let ok = rows.iter().all(Row::ok);
    if args.json {
        let runs: Vec<Value> = rows.iter().map(|r| r.json(&args)).collect();
        let v = if args.grid {
            json!({
                "grid": runs,
                "lost": rows.iter().map(|r| r.exon.lost).sum::<u64>(),
                "duplicated": rows.iter().map(|r| r.exon.duplicated).sum::<u64>(),
            })
        } else {
            runs.into_iter().next().expect("one run")
        };
        emit(&v.to_string());
    } else {
        print_rows(&rows);
    }
    Ok(Outcome::from_ok(ok))
}

/// The settings of one run over `link`.
fn run_cfg(args: &BenchExonArgs, link: &LinkSpec) -> RunCfg {
    let size = args.size.0 as usize;
    let rtt = link.rtt().max(Duration::from_millis(1));
    // Backpressure: at most ~8 bandwidth-delay products of messages queued
    // or unacknowledged at the sender (TCP's socket buffer plays this role
    // for TCP), so that what was accepted drains within seconds even on a
    // slow link.
    let bdp = link.rate().map_or(1 << 20, |r| (r.bytes_per_sec_f64() * rtt.as_secs_f64()) as u64);
    let outstanding = (8 * bdp / size as u64).clamp(256, 65_536) as usize;
    run_cfg_with(args, size, outstanding)
}

fn run_cfg_with(args: &BenchExonArgs, size: usize, outstanding: usize) -> RunCfg {
    let mut exon = SocketConfig::default();
    exon.node.cc = args.cc;
    exon.node.queue_loss_guard = !args.no_guard;
    exon.node.machine.max_outstanding = outstanding;
    RunCfg {
        size,
        messages: args.messages,
        actors: args.actors as usize,
        limit: args.timeout,
        drain: args.timeout.max(Duration::from_secs(10)),
        exon,
        journal_dir: args.journal.clone(),
    }
}

fn progress(hidden: bool, total: u64) -> ProgressBar {
    let target = if hidden { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let bar = ProgressBar::with_draw_target(Some(total), target);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{pos}/{len}] {elapsed:>4} {msg}").expect("static template"),
    );
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

/// Exon and TCP in one setting.
struct Row {
    pattern: Pattern,
    link: String,
    exon: PeerResult,
    tcp: PeerResult,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.exon.rate() / self.tcp.rate().max(1e-9)
    }

    /// Exon lost or duplicated nothing, nothing arrived corrupted.
    fn ok(&self) -> bool {
        self.exon.lost == 0
            && self.exon.duplicated == 0
            && self.exon.corrupt == 0
            && self.exon.in_doubt == 0
            && self.exon.drained
            && self.tcp.corrupt == 0
    }

    fn json(&self, args: &BenchExonArgs) -> Value {
        json!({
            "pattern": self.pattern.name(),
            "link": self.link,
            "size": args.size.0,
            "messages": args.messages,
            "actors": (self.pattern == Pattern::Rpc).then_some(args.actors),
            "timeout_s": args.timeout.as_secs_f64(),
            "seed": args.seed,
            "tcp_cc": args.tcp_cc,
            "exon_cc": cc_name(args.cc),
            "journal": args.journal.is_some(),
            "exon": peer_json(self.pattern, &self.exon, true),
            "tcp": peer_json(self.pattern, &self.tcp, false),
            "ratio": self.ratio(),
            "lost": self.exon.lost,
            "duplicated": self.exon.duplicated,
        })
    }
}

fn peer_json(p: Pattern, r: &PeerResult, exon: bool) -> Value {
    let mut v = json!({
        p.rate_key(): r.rate(),
        "delivered": r.delivered,
        "window_s": r.window.as_secs_f64(),
        "corrupt": r.corrupt,
    });
    if p == Pattern::Rpc {
        v["p50_ms"] = json!(r.latency_ms(0.5));
        v["p99_ms"] = json!(r.latency_ms(0.99));
    }
    if exon {
        v["accepted"] = json!(r.accepted);
        v["lost"] = json!(r.lost);
        v["duplicated"] = json!(r.duplicated);
        v["in_doubt"] = json!(r.in_doubt);
        v["drained"] = json!(r.drained);
        v["datagrams_sent"] = json!(r.datagrams);
        v["fragments_retransmitted"] = json!(r.retransmitted);
    }
    v
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |x| format!("{x:.1}"))
}

fn print_rows(rows: &[Row]) {
    let header = [
        "pattern", "link", "Exon /s", "TCP /s", "ratio", "Exon p50/p99 ms", "TCP p50/p99 ms", "lost", "duplicated",
    ];
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let lat = |x: &PeerResult| match r.pattern {
                Pattern::Rpc => format!("{}/{}", ms(x.latency_ms(0.5)), ms(x.latency_ms(0.99))),
                Pattern::Oneway => "-".into(),
            };
            vec![
                r.pattern.name().into(),
                r.link.clone(),
                format!("{:.0}", r.exon.rate()),
                format!("{:.0}", r.tcp.rate()),
                format!("{:.2}", r.ratio()),
                lat(&r.exon),
                lat(&r.tcp),
                r.exon.lost.to_string(),
                r.exon.duplicated.to_string(),
            ]
        })
        .collect();
    emit(&table::render(&header, &table_rows));
    emit("(/s: messages per second for oneway, requests per second for rpc; ratio = Exon / TCP; lost and duplicated: Exon, checked end to end)");
}

/// One Exon flow and one kernel TCP CUBIC flow at the same time.
fn fairness(args: &BenchExonArgs) -> anyhow::Result<Outcome> {
    let link = args.link.clone().unwrap_or_else(|| FAIRNESS_LINK.parse().expect("static spec"));
    let link_bps = link.rate().map(|r| r.bits_per_sec() as f64);
    let tb = Testbed::builder().seed(args.seed).link(link.clone()).build()?;
    let ends = Ends::testbed(&tb)?;
    let mut cfg = run_cfg(args, &link);
    cfg.messages = u64::MAX;
    cfg.limit = FAIRNESS_WARMUP + args.timeout;
    let bar = progress(args.json, 1);
    bar.set_message(format!("Exon and TCP CUBIC together over {link}"));
    let exon = exon_run::oneway_start(&ends, &cfg)?;
    let tcp = tcp_run::oneway_start(&ends, &cfg, "cubic")?;
    let tcp = tcp.finish().context("TCP flow")?;
    let exon = exon.finish().context("Exon flow")?;
    bar.finish_and_clear();
    tb.down()?;
    // Goodput of each over the same window after the warm-up.
    let from = exon.start.max(tcp.start) + FAIRNESS_WARMUP;
    let to = from + args.timeout;
    let bps = |r: &PeerResult| r.tally.delivered_between(from, to) as f64 * args.size.0 as f64 * 8.0 / args.timeout.as_secs_f64();
    let (e, t) = (bps(&exon), bps(&tcp));
    let share = |x: f64| link_bps.map(|l| x / l);
    let ok = exon.lost == 0 && exon.duplicated == 0 && exon.corrupt == 0 && tcp.corrupt == 0;
    if args.json {
        emit(
            &json!({
                "link": link.to_string(),
                "seconds": args.timeout.as_secs_f64(),
                "exon_mbps": e / 1e6,
                "tcp_mbps": t / 1e6,
                "exon_share": share(e),
                "tcp_share": share(t),
                "tcp_share_of_total": t / (e + t).max(1e-9),
                "lost": exon.lost,
                "duplicated": exon.duplicated,
            })
            .to_string(),
        );
    } else {
        let pct = |x: Option<f64>| x.map_or_else(|| "-".into(), |v| format!("{:.1}%", v * 100.0));
        emit(&table::render(
            &["flow", "goodput Mbit/s", "share of link"],
            &[
                vec!["Exon (BBR-style)".into(), format!("{:.1}", e / 1e6), pct(share(e))],
                vec!["TCP CUBIC".into(), format!("{:.1}", t / 1e6), pct(share(t))],
            ],
        ));
        emit(&format!(
            "link {link}, {:.0} s after {} s of warm-up; TCP's share of the total {:.1}%; Exon lost {}, duplicated {}",
            args.timeout.as_secs_f64(),
            FAIRNESS_WARMUP.as_secs(),
            100.0 * t / (e + t).max(1e-9),
            exon.lost,
            exon.duplicated
        ));
    }
    Ok(Outcome::from_ok(ok))
}

/// One-way message rate on 127.0.0.1 at 64 B and 1 KiB.
fn loopback(args: &BenchExonArgs) -> anyhow::Result<Outcome> {
    let bar = progress(args.json, 4);
    let mut rows = Vec::new();
    for size in [64usize, 1024] {
        let cfg = run_cfg_with(args, size, 4096);
        let ends = Ends::loopback();
        bar.set_message(format!("{size} B: Exon"));
        let exon = exon_run::oneway(&ends, &cfg).with_context(|| format!("Exon at {size} B"))?;
        bar.inc(1);
        bar.set_message(format!("{size} B: TCP"));
        let tcp = tcp_run::oneway(&ends, &cfg, &args.tcp_cc).with_context(|| format!("TCP at {size} B"))?;
        bar.inc(1);
        rows.push((size, exon, tcp));
    }
    bar.finish_and_clear();
    let ok = rows.iter().all(|(_, e, t)| e.lost == 0 && e.duplicated == 0 && e.corrupt == 0 && e.drained && t.corrupt == 0);
    if args.json {
        let runs: Vec<Value> = rows
            .iter()
            .map(|(size, e, t)| {
                json!({
                    "size": size,
                    "exon": peer_json(Pattern::Oneway, e, true),
                    "tcp": peer_json(Pattern::Oneway, t, false),
                    "ratio": e.rate() / t.rate().max(1e-9),
                    "lost": e.lost,
                    "duplicated": e.duplicated,
                })
            })
            .collect();
        emit(
            &json!({
                "loopback": runs,
                "lost": rows.iter().map(|(_, e, _)| e.lost).sum::<u64>(),
                "duplicated": rows.iter().map(|(_, e, _)| e.duplicated).sum::<u64>(),
            })
            .to_string(),
        );
    } else {
        let t: Vec<Vec<String>> = rows
            .iter()
            .map(|(size, e, t)| {
                vec![
                    format!("{size} B"),
                    format!("{:.0}", e.rate()),
                    format!("{:.0}", t.rate()),
                    format!("{:.2}", e.rate() / t.rate().max(1e-9)),
                    e.lost.to_string(),
                    e.duplicated.to_string(),
                ]
            })
            .collect();
        emit(&table::render(&["size", "Exon msgs/s", "TCP msgs/s", "ratio", "lost", "duplicated"], &t));
    }
    Ok(Outcome::from_ok(ok))
}
