//! `braid bench multipath`: Braid multipath with ProgMP schedulers against
//! kernel MPTCP over two (or more) emulated paths, in the same run.
//!
//! Part one, goodput: one bulk Braid connection over every path with the
//! chosen `--scheduler` (default min-RTT), one kernel MPTCP connection
//! (the emulator configures the subflow endpoints), and single-path kernel
//! TCP on path 0 for reference, each counted at the receiver after a
//! warm-up. Part two, flow-completion time: `--flows` request/response
//! flows (small request, `--fct` bytes of response) on one Braid
//! connection per scheduler of `--schedulers`, over the `--fct-path`
//! links (lossy by default), with p50/p90/p99. For every run, bytes on the
//! wire (IP packets offered to the emulated links, both directions) over
//! application bytes delivered.

mod braid_runs;
mod kernel;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid::progmp::Program;
use braid::LinkSpec;
use braid_emu::{Stats, Testbed};
use clap::Args;
use serde::Serialize;

use super::send::load_scheduler;
use super::{emit, parse_link, parse_secs, parse_size, table, Outcome};
use braid::size::ByteSize;

#[derive(Debug, Args)]
pub struct BenchMultipathArgs {
    /// A path of the goodput test (repeat; default two: rate=50mbit,rtt=20ms and rate=50mbit,rtt=40ms).
    #[arg(long = "path", value_name = "SPEC", value_parser = parse_link)]
    paths: Vec<LinkSpec>,
    /// Scheduler of the Braid goodput run: a shipped one's name (`braid progmp list`) or a .progmp file.
    #[arg(long, value_name = "NAME_OR_FILE", default_value = "min_rtt")]
    scheduler: String,
    /// Seconds of goodput measurement per variant (after --warmup).
    #[arg(long, value_name = "SECS", default_value = "8", value_parser = parse_secs)]
    secs: Duration,
    /// Seconds of each goodput run not counted (slow start).
    #[arg(long, value_name = "SECS", default_value = "3", value_parser = parse_secs)]
    warmup: Duration,
    /// Response size of the request/response flows.
    #[arg(long, value_name = "SIZE", default_value = "10KB", value_parser = parse_size)]
    fct: ByteSize,
    /// Request/response flows per scheduler.
    #[arg(long, value_name = "N", default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    flows: u32,
    /// Pause between two flows, in seconds (0: back to back).
    #[arg(long, value_name = "SECS", default_value = "0.01", value_parser = parse_gap)]
    gap: Duration,
    /// Schedulers compared on flow-completion time, comma-separated (names or .progmp files).
    #[arg(long, value_name = "LIST", default_value = "min_rtt,redundant", value_delimiter = ',')]
    schedulers: Vec<String>,
    /// A path of the flow-completion-time test (repeat; default: the --path links with loss=2% each).
    #[arg(long = "fct-path", value_name = "SPEC", value_parser = parse_link)]
    fct_paths: Vec<LinkSpec>,
    /// Skip the goodput part.
    #[arg(long)]
    no_goodput: bool,
    /// Skip the flow-completion-time part.
    #[arg(long, conflicts_with = "no_goodput")]
    no_fct: bool,
    /// Braid's largest UDP payload, bytes (default: the smallest path MTU
    /// minus 28 bytes of IPv4 and UDP headers, what path-MTU discovery
    /// finds; kernel TCP and MPTCP size their segments from the MTU too).
    #[arg(long, value_name = "BYTES", value_parser = clap::value_parser!(u16).range(1200..=65527))]
    mtu: Option<u16>,
    /// Seed of the emulated links' random choices (loss).
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_gap(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=60.0).contains(&v) => Ok(Duration::from_secs_f64(v)),
        _ => Err(format!("invalid gap `{s}`: expected seconds from 0 to 60, e.g. 0 or 0.01")),
    }
}

const DEFAULT_PATHS: [&str; 2] = ["rate=50mbit,rtt=20ms", "rate=50mbit,rtt=40ms"];

/// One goodput variant.
#[derive(Debug, Serialize)]
struct GoodputRow {
    /// `braid:<scheduler>`, `mptcp` or `tcp`.
    variant: String,
    mbps: f64,
    /// Application bytes delivered during the whole run (warm-up included).
    bytes_delivered: u64,
    /// IP bytes offered to the emulated links, both directions.
    wire_bytes: u64,
    wire_per_delivered: f64,
    /// Only for Braid: stream bytes each path carried.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_bytes_by_path: Option<Vec<u64>>,
    /// Only for MPTCP: whether the connection really ran MPTCP.
    #[serde(skip_serializing_if = "Option::is_none")]
    mptcp_active: Option<bool>,
    /// The run delivered data.
    ok: bool,
}

/// One scheduler's flow-completion times.
#[derive(Debug, Serialize)]
struct FctRow {
    scheduler: String,
    flows: usize,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
    max_ms: f64,
    bytes_delivered: u64,
    wire_bytes: u64,
    wire_per_delivered: f64,
    /// Every flow completed with a response of the right size.
    ok: bool,
}

#[derive(Debug, Serialize)]
struct Report {
    paths: Vec<String>,
    scheduler: String,
    /// Braid's largest UDP payload in these runs.
    max_datagram_size: u16,
    goodput: Vec<GoodputRow>,
    fct_paths: Vec<String>,
    fct_bytes: u64,
    fct: Vec<FctRow>,
    /// Braid aggregate over kernel MPTCP (goodput part).
    #[serde(skip_serializing_if = "Option::is_none")]
    braid_over_mptcp: Option<f64>,
    /// 1 - p90(second scheduler) / p90(first scheduler) (FCT part, with at
    /// least two schedulers).
    #[serde(skip_serializing_if = "Option::is_none")]
    p90_reduction: Option<f64>,
    ok: bool,
}

fn wire_bytes(before: &Stats, after: &Stats) -> u64 {
    let sum = |s: &Stats| s.paths.iter().map(|p| p.a2b.bytes_offered + p.b2a.bytes_offered).sum::<u64>();
    sum(after).saturating_sub(sum(before))
}

fn ratio(wire: u64, delivered: u64) -> f64 {
    if delivered == 0 {
        0.0
    } else {
        wire as f64 / delivered as f64
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// A testbed name unique to this process (1-8 characters).
fn testbed_name(part: &str) -> String {
    format!("{part}{}", std::process::id() % 1_000_000)
}

fn build(part: &str, specs: &[LinkSpec], seed: u64) -> anyhow::Result<Testbed> {
    let mut b = Testbed::builder().name(&testbed_name(part)).seed(seed);
    for s in specs {
        b = b.link(s.clone());
    }
    b.build().context("building the testbed (needs root, /dev/net/tun and iproute2)")
}

fn progress(steps: u64, hidden: bool) -> indicatif::ProgressBar {
    let target = if hidden { indicatif::ProgressDrawTarget::hidden() } else { indicatif::ProgressDrawTarget::stderr() };
    let bar = indicatif::ProgressBar::with_draw_target(Some(steps), target);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>12.bold} [{bar:30.cyan/blue}] {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    bar.set_prefix("multipath");
    bar
}

pub async fn run(args: BenchMultipathArgs) -> anyhow::Result<Outcome> {
    braid_emu::check_capabilities().context("`braid bench multipath` needs the emulator")?;
    let paths: Vec<LinkSpec> = if args.paths.is_empty() {
        DEFAULT_PATHS.iter().map(|s| s.parse().expect("default specs are valid")).collect()
    } else {
        args.paths.clone()
    };
    anyhow::ensure!(paths.len() >= 2, "--path: give at least two paths (or none for the default two)");
    let fct_paths: Vec<LinkSpec> = if args.fct_paths.is_empty() {
        paths
            .iter()
            .map(|p| format!("{p},loss=2%").parse::<LinkSpec>().map_err(|e| anyhow::anyhow!("{p},loss=2%: {e}")))
            .collect::<anyhow::Result<_>>()?
    } else {
        args.fct_paths.clone()
    };
    anyhow::ensure!(fct_paths.len() >= 2, "--fct-path: give at least two paths (or none for the default)");
    let (scheduler_name, scheduler) = load_scheduler(&args.scheduler)?;
    let fct_schedulers: Vec<(String, Arc<Program>)> = if args.no_fct {
        Vec::new()
    } else {
        args.schedulers.iter().map(|s| load_scheduler(s.trim())).collect::<anyhow::Result<_>>()?
    };
    let fct_bytes = usize::try_from(args.fct.0).ok().filter(|&n| (1..=(64 << 20)).contains(&n)).ok_or_else(|| {
        anyhow::anyhow!("--fct {}: expected a response size from 1 byte to 64 MiB, e.g. 10KB", args.fct.0)
    })?;
    let datagram = args.mtu.unwrap_or_else(|| {
        let mtu = paths.iter().chain(&fct_paths).map(braid_emu::iface_mtu).min().unwrap_or(1500);
        u16::try_from(mtu.saturating_sub(28)).unwrap_or(u16::MAX).max(1200)
    });
    let steps = if args.no_goodput { 0 } else { 3 } + fct_schedulers.len() as u64;
    let bar = progress(steps, args.json);
    let (warmup, secs, seed) = (args.warmup, args.secs, args.seed);
    let flows = args.flows as usize;
    let gap = args.gap;
    let no_goodput = args.no_goodput;
    let (paths_c, fct_paths_c, name_c) = (paths.clone(), fct_paths.clone(), scheduler_name.clone());
    let bar_c = bar.clone();
    // The testbeds and the runs block (threads in namespaces): off the runtime.
    let (goodput, fct) = tokio::task::spawn_blocking(move || -> anyhow::Result<(Vec<GoodputRow>, Vec<FctRow>)> {
        let mut goodput = Vec::new();
        if !no_goodput {
            goodput = goodput_part(&paths_c, seed, &name_c, scheduler, datagram, warmup, secs, &bar_c)?;
        }
        let mut fct = Vec::new();
        if !fct_schedulers.is_empty() {
            fct = fct_part(&fct_paths_c, seed, &fct_schedulers, datagram, fct_bytes, flows, gap, &bar_c)?;
        }
        Ok((goodput, fct))
    })
    .await
    .context("benchmark thread")??;
    bar.finish_and_clear();

    let braid_mbps = goodput.iter().find(|r| r.variant.starts_with("braid")).map(|r| r.mbps);
    let mptcp_mbps = goodput.iter().find(|r| r.variant == "mptcp").map(|r| r.mbps);
    let braid_over_mptcp = braid_mbps.zip(mptcp_mbps).filter(|(_, m)| *m > 0.0).map(|(b, m)| b / m);
    let p90_reduction = (fct.len() >= 2 && fct[0].p90_ms > 0.0).then(|| 1.0 - fct[1].p90_ms / fct[0].p90_ms);
    let ok = goodput.iter().all(|r| r.ok) && fct.iter().all(|r| r.ok);
    let report = Report {
        paths: paths.iter().map(|p| p.to_string()).collect(),
        scheduler: scheduler_name,
        max_datagram_size: datagram,
        goodput,
        fct_paths: fct_paths.iter().map(|p| p.to_string()).collect(),
        fct_bytes: fct_bytes as u64,
        fct,
        braid_over_mptcp,
        p90_reduction,
        ok,
    };
    if args.json {
        emit(&serde_json::to_string(&report)?);
    } else {
        print_text(&report);
    }
    Ok(Outcome::from_ok(report.ok))
}

fn goodput_part(
    paths: &[LinkSpec],
    seed: u64,
    name: &str,
    scheduler: Arc<Program>,
    datagram: u16,
    warmup: Duration,
    secs: Duration,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<GoodputRow>> {
    let tb = build("mpg", paths, seed)?;
    let mut rows = Vec::new();

    bar.set_message(format!("braid {name}"));
    let before = tb.stats()?;
    let b = braid_runs::bulk(&tb, scheduler, datagram, warmup, secs).context("Braid goodput run")?;
    let wire = wire_bytes(&before, &tb.stats()?);
    rows.push(GoodputRow {
        variant: format!("braid:{name}"),
        mbps: b.bps / 1e6,
        bytes_delivered: b.delivered,
        wire_bytes: wire,
        wire_per_delivered: ratio(wire, b.delivered),
        stream_bytes_by_path: Some(b.stream_bytes_by_path),
        mptcp_active: None,
        ok: b.delivered > 0,
    });
    bar.inc(1);

    bar.set_message("kernel MPTCP");
    let before = tb.stats()?;
    let m = kernel::goodput(&tb, kernel::Kernel::Mptcp, warmup, secs).context("kernel MPTCP run")?;
    let wire = wire_bytes(&before, &tb.stats()?);
    rows.push(GoodputRow {
        variant: "mptcp".into(),
        mbps: m.bps / 1e6,
        bytes_delivered: m.delivered,
        wire_bytes: wire,
        wire_per_delivered: ratio(wire, m.delivered),
        stream_bytes_by_path: None,
        mptcp_active: Some(m.mptcp),
        ok: m.delivered > 0,
    });
    bar.inc(1);

    bar.set_message("kernel TCP, path 0");
    let before = tb.stats()?;
    let t = kernel::goodput(&tb, kernel::Kernel::Tcp, warmup, secs).context("kernel TCP run")?;
    let wire = wire_bytes(&before, &tb.stats()?);
    rows.push(GoodputRow {
        variant: "tcp".into(),
        mbps: t.bps / 1e6,
        bytes_delivered: t.delivered,
        wire_bytes: wire,
        wire_per_delivered: ratio(wire, t.delivered),
        stream_bytes_by_path: None,
        mptcp_active: None,
        ok: t.delivered > 0,
    });
    bar.inc(1);
    Ok(rows)
}

fn fct_part(
    paths: &[LinkSpec],
    seed: u64,
    schedulers: &[(String, Arc<Program>)],
    datagram: u16,
    response: usize,
    flows: usize,
    gap: Duration,
    bar: &indicatif::ProgressBar,
) -> anyhow::Result<Vec<FctRow>> {
    let tb = build("mpf", paths, seed)?;
    let mut rows = Vec::new();
    for (name, program) in schedulers {
        bar.set_message(format!("FCT {name}"));
        let before = tb.stats()?;
        let r = braid_runs::fct(&tb, program.clone(), datagram, response, flows, gap).with_context(|| format!("FCT run of {name}"))?;
        let wire = wire_bytes(&before, &tb.stats()?);
        let q = |x: f64| ms(braid_emu::bench::quantile(&r.fcts, x));
        let mean = r.fcts.iter().map(|d| ms(*d)).sum::<f64>() / r.fcts.len().max(1) as f64;
        rows.push(FctRow {
            scheduler: name.clone(),
            flows: r.fcts.len(),
            p50_ms: q(0.5),
            p90_ms: q(0.9),
            p99_ms: q(0.99),
            mean_ms: mean,
            max_ms: q(1.0),
            bytes_delivered: r.delivered,
            wire_bytes: wire,
            wire_per_delivered: ratio(wire, r.delivered),
            ok: r.fcts.len() == flows,
        });
        bar.inc(1);
    }
    Ok(rows)
}

fn print_text(r: &Report) {
    if !r.goodput.is_empty() {
        emit(&format!("goodput over {}", r.paths.join(" + ")));
        let rows: Vec<Vec<String>> = r
            .goodput
            .iter()
            .map(|g| {
                vec![
                    g.variant.clone(),
                    format!("{:.1}", g.mbps),
                    format!("{:.3}", g.wire_per_delivered),
                    g.stream_bytes_by_path
                        .as_ref()
                        .map(|v| v.iter().map(|b| format!("{:.1}", *b as f64 / 1e6)).collect::<Vec<_>>().join(" / "))
                        .or_else(|| g.mptcp_active.map(|m| if m { "mptcp".into() } else { "fell back to tcp".into() }))
                        .unwrap_or_default(),
                ]
            })
            .collect();
        emit(&table::render(&["variant", "Mbit/s", "wire/delivered", "MB per path"], &rows));
        if let Some(x) = r.braid_over_mptcp {
            emit(&format!("braid / mptcp: {x:.3}"));
        }
        emit("");
    }
    if !r.fct.is_empty() {
        emit(&format!("request/response flows ({} bytes) over {}", r.fct_bytes, r.fct_paths.join(" + ")));
        let rows: Vec<Vec<String>> = r
            .fct
            .iter()
            .map(|f| {
                vec![
                    f.scheduler.clone(),
                    f.flows.to_string(),
                    format!("{:.1}", f.p50_ms),
                    format!("{:.1}", f.p90_ms),
                    format!("{:.1}", f.p99_ms),
                    format!("{:.1}", f.mean_ms),
                    format!("{:.3}", f.wire_per_delivered),
                ]
            })
            .collect();
        emit(&table::render(&["scheduler", "flows", "p50 ms", "p90 ms", "p99 ms", "mean ms", "wire/delivered"], &rows));
        if let Some(x) = r.p90_reduction {
            emit(&format!("p90 reduction, {} vs {}: {:.1}%", r.fct[1].scheduler, r.fct[0].scheduler, x * 100.0));
        }
    }
}
