//! `braid bench flood`: legitimate throughput under a flood of spoofed
//! handshakes (issue 17). One experiment of the lab's `flood` template per
//! target (Braid, Exon), each on its own emulator testbed: the legitimate
//! traffic crosses the emulated link from host a to host b, the attacker
//! sends forged datagrams to b's service address from inside b, and every
//! round measures a baseline window and a flood window on the same
//! connection. The template measures; this command maps flags to
//! experiments and prints its reports. Exit status 3 if a target misses
//! the bar (ratio ≥ 0.8, every flood window sent what was asked, the
//! receiver's state within its bound).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid::LinkSpec;
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::template::builtin::flood::report::{FloodRun, MIN_RATIO};
use braid_lab::template::builtin::flood::{Flood, Target, DEFAULT_LINK, REPORT_ARTIFACT};
use clap::Args;
use serde_json::json;

use super::{emit, parse_link, parse_secs, table, Outcome};

#[derive(Debug, Args)]
pub struct BenchFloodArgs {
    /// The emulated link the legitimate traffic crosses [default: rtt=20ms,rate=50mbit].
    #[arg(long, value_name = "SPEC", value_parser = parse_link)]
    link: Option<LinkSpec>,
    /// Seconds of a baseline window, and the longest a flood window runs.
    #[arg(long, value_name = "S", default_value = "2", value_parser = parse_secs)]
    secs: Duration,
    /// Forged datagrams per second.
    #[arg(long, value_name = "N", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    flood_pps: u64,
    /// Forged datagrams per flood window (it stops after these or --secs, whichever first).
    #[arg(long, value_name = "N", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    flood_packets: u64,
    /// Rounds of one baseline and one flood window each (alternating order).
    #[arg(long, value_name = "R", default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=100))]
    repeat: u64,
    /// Targets, comma-separated: braid, exon.
    #[arg(long, value_name = "LIST", default_value = "braid,exon", value_delimiter = ',')]
    targets: Vec<String>,
    /// Seed of the forged datagrams and the link's random choices.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: BenchFloodArgs) -> anyhow::Result<Outcome> {
    let targets = args
        .targets
        .iter()
        .map(|t| t.trim().parse::<Target>().map_err(|e| anyhow::anyhow!("--targets: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    anyhow::ensure!(!targets.is_empty(), "--targets: name at least one of braid, exon");
    anyhow::ensure!(
        args.flood_pps as f64 * args.secs.as_secs_f64() >= args.flood_packets as f64,
        "--flood-pps {}: {} datagrams need {:.0}/s or more within --secs {}",
        args.flood_pps,
        args.flood_packets,
        (args.flood_packets as f64 / args.secs.as_secs_f64()).ceil(),
        args.secs.as_secs_f64()
    );
    let link = match &args.link {
        Some(l) => l.clone(),
        None => DEFAULT_LINK.parse().map_err(|e| anyhow::anyhow!("{DEFAULT_LINK}: {e}"))?,
    };
    braid_emu::check_capabilities().context("`braid bench flood` needs the emulator (root and /dev/net/tun)")?;
    let experiments: Vec<Vec<(String, Value)>> = targets
        .iter()
        .map(|t| {
            vec![
                ("target".to_string(), Value::Enum(t.name().into())),
                ("link".to_string(), Value::Link(link.to_string())),
                ("secs".to_string(), Value::Duration(args.secs)),
                ("rounds".to_string(), Value::Int(args.repeat as i64)),
                ("flood_pps".to_string(), Value::Int(args.flood_pps as i64)),
                ("flood_packets".to_string(), Value::Int(args.flood_packets.min(i64::MAX as u64) as i64)),
            ]
        })
        .collect();
    // Set-up, warm-up, and each round's two windows with their slack.
    let timeout = Duration::from_secs(60) + (args.secs * 2 + Duration::from_secs(5)) * args.repeat as u32;
    let options = OneOffOptions { seed: args.seed, timeout: Some(timeout) };
    let show_progress = !args.json;
    let results = tokio::task::spawn_blocking(move || {
        run_experiments_with_progress(Arc::new(Flood), experiments, &options, show_progress)
    })
    .await
    .context("benchmark thread")??;
    let mut runs = Vec::new();
    for (t, r) in targets.iter().zip(&results) {
        if let Some(e) = &r.error {
            anyhow::bail!("{}: {e}", t.name());
        }
        let report = r.artifact(REPORT_ARTIFACT).with_context(|| format!("{}: no report", t.name()))?;
        runs.push(serde_json::from_value::<FloodRun>(report.clone()).context("reading the flood template's report")?);
    }
    let ok = runs.iter().all(|r| r.pass);
    if args.json {
        let doc = json!({
            "encrypted": true,
            "link": link.to_string(),
            "secs": args.secs.as_secs_f64(),
            "flood_pps": args.flood_pps,
            "flood_packets": args.flood_packets,
            "repeat": args.repeat,
            "min_ratio": MIN_RATIO,
            "targets": runs,
            "ok": ok,
        });
        emit(&serde_json::to_string(&doc)?);
    } else {
        print_text(&link, &runs);
    }
    Ok(Outcome::from_ok(ok))
}

fn print_text(link: &LinkSpec, runs: &[FloodRun]) {
    println!("legitimate traffic over {link} (encrypted), flood at the receiver");
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            let held = r.receiver_state.iter().find(|(k, _)| k.ends_with("s_max") && !k.starts_with("peers")).map_or(0, |(_, v)| *v);
            vec![
                r.target.name().to_string(),
                format!("{:.1}", r.baseline_mbps),
                format!("{:.1}", r.flood_mbps),
                format!("{:.3}", r.ratio),
                r.flood_packets.to_string(),
                format!("{:.0}", r.flood_pps),
                held.to_string(),
                r.receiver_state.get("rss_growth_kib_max").map_or("-".into(), |v| v.to_string()),
                if r.pass { "pass".into() } else { "FAIL".into() },
            ]
        })
        .collect();
    let header =
        ["target", "baseline Mbit/s", "flood Mbit/s", "ratio", "flood pkts", "flood pkt/s", "state max", "RSS +KiB", "bar"];
    println!("{}", table::render(&header, &rows).trim_end());
    for r in runs {
        println!("{}: bound {} ({}), counters over the floods: {:?}", r.target.name(), r.state_bound,
            if r.within_bound { "held" } else { "EXCEEDED" }, r.receiver_counters);
    }
}
