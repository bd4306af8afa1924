//! `braid bench transfer --scenario read|network|write|mixed|small-files|large|competing`:
//! Braid's file transfer (the Marlin engine, seed 002) over the emulator,
//! against the static optimum of a sweep of fixed concurrencies, its own
//! Falcon-style tuner, and rsync and rclone measured in the same run.
//!
//! The measurement is the lab's `transfer` template
//! (`braid_lab::template::builtin::transfer`); the scenarios and the
//! report are `transfer::scenario` and `transfer::bench`, which document
//! the model behind each scenario and each measure. This command runs a
//! scenario's experiments one after another (each builds its own
//! testbed), then prints a table, or `--json`, and with `--plot FILE.svg`
//! the paper's Fig. 6–8: throughput over time (FILE.svg) and each stage's
//! workers over time (FILE-workers.svg).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::plot::chart::{write_line_chart, LineChart, Series};
use braid_lab::template::builtin::transfer::bench::BenchReport;
use braid_lab::template::builtin::transfer::report::TransferRun;
use braid_lab::template::builtin::transfer::scenario::{Role, Scenario, ScenarioSpec, BENCH_PROBE_INTERVAL};
use braid_lab::template::builtin::transfer::Transfer;
use clap::Args;

use super::{emit, Outcome};

#[derive(Debug, Args)]
pub struct BenchTransferArgs {
    /// The scenario: read, network or write (that stage is the bottleneck), mixed (each stage its own
    /// optimum), small-files, small-files-wan (the same tree over a wide-area path whose hosts cap each
    /// connection), large, or competing (1 to 4 transfers on one bottleneck).
    #[arg(long, value_name = "NAME", value_parser = parse_scenario)]
    scenario: Scenario,
    /// A smaller version (less data, a coarser sweep): what CI runs.
    #[arg(long)]
    quick: bool,
    /// Replace the scenario's link, e.g. rtt=20ms,rate=2gbit (the storage emulation stays).
    #[arg(long, value_name = "SPEC", value_parser = parse_link)]
    link: Option<String>,
    /// The hosts' largest TCP socket buffer, e.g. 256KiB: each stream then carries about
    /// buffer/RTT (the per-connection limit of wide-area paths); 0 lifts it. Default: the
    /// scenario's (network, mixed and small-files-wan cap it at 256 KiB).
    #[arg(long, value_name = "SIZE", value_parser = super::parse_size)]
    stream_buffer: Option<braid::size::ByteSize>,
    /// Files of the tree (default: the scenario's; small-files 50,000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    files: Option<u64>,
    /// Seconds between the tuner's measurements (default 1; the paper's 3 makes runs three times longer).
    #[arg(long, value_name = "SECS", value_parser = super::parse_secs)]
    probe_interval: Option<Duration>,
    /// Skip rsync and rclone.
    #[arg(long)]
    no_peers: bool,
    /// Give an experiment up after this many seconds.
    #[arg(long, value_name = "SECS", default_value = "900", value_parser = super::parse_secs)]
    timeout: Duration,
    /// Seed of the first experiment's tree (the i-th uses seed + i).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write throughput over time to FILE.svg and each stage's workers over time to FILE-workers.svg.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Run Braid without authentication or encryption (by default TLS 1.3 with keys pinned on both ends).
    #[arg(long)]
    insecure_no_auth: bool,
    /// Congestion control of Braid's TCP streams (`braid send --tcp-congestion`), e.g. cubic; iperf3's
    /// comparison runs the same. Default: the host's. rsync and rclone keep the host's either way.
    #[arg(long, value_name = "NAME")]
    tcp_congestion: Option<String>,
}

fn parse_scenario(s: &str) -> Result<Scenario, String> {
    Scenario::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
        format!("unknown scenario `{s}`: expected one of {}", names.join(", "))
    })
}

fn parse_link(s: &str) -> Result<String, String> {
    s.parse::<braid::LinkSpec>().map_err(|e| format!("invalid link `{s}`: {e}"))?;
    Ok(s.to_string())
}

/// The scenario's settings with the command's overrides.
fn spec(args: &BenchTransferArgs) -> ScenarioSpec {
    let mut spec = ScenarioSpec::new(args.scenario, args.quick);
    if let Some(link) = &args.link {
        spec.link = link.clone();
    }
    if let Some(files) = args.files {
        spec.files = files;
    }
    if let Some(buffer) = args.stream_buffer {
        spec.stream_buffer = buffer.0;
    }
    spec
}

/// What every run shares.
fn common(args: &BenchTransferArgs) -> Vec<(String, Value)> {
    vec![
        ("encrypted".into(), Value::Bool(!args.insecure_no_auth)),
        ("probe_interval".into(), Value::Duration(args.probe_interval.unwrap_or(BENCH_PROBE_INTERVAL))),
        ("transfer_timeout".into(), Value::Duration(args.timeout)),
        ("tcp_congestion".into(), Value::String(args.tcp_congestion.clone().unwrap_or_default())),
    ]
}

pub async fn run(args: BenchTransferArgs) -> anyhow::Result<Outcome> {
    braid::emu::check_capabilities().context("`braid bench transfer` runs over the emulator")?;
    let spec = spec(&args);
    let runs = spec.runs(&common(&args), !args.no_peers);
    let (roles, experiments): (Vec<Role>, Vec<_>) = runs.into_iter().unzip();
    let options = OneOffOptions { seed: args.seed, timeout: Some(args.timeout + Duration::from_secs(120)) };
    let results = {
        let show_progress = !args.json;
        tokio::task::spawn_blocking(move || run_experiments_with_progress(Arc::new(Transfer), experiments, &options, show_progress))
    }
    .await
    .context("the benchmark thread panicked")??;
    let mut reports = Vec::with_capacity(results.len());
    let mut peer_errors = std::collections::BTreeMap::new();
    for (role, r) in roles.into_iter().zip(&results) {
        match (&r.error, &role) {
            // A peer that cannot run here (not installed, failed) leaves
            // Braid's runs standing; the report says which and why.
            (Some(e), Role::Peer(name)) => {
                peer_errors.insert(name.clone(), e.clone());
                continue;
            }
            (Some(e), _) => anyhow::bail!("{}: {e}", role.label()),
            (None, _) => {}
        }
        let json = r.artifact("report").with_context(|| format!("{}: no report", role.label()))?;
        let run: TransferRun = serde_json::from_value(json.clone()).context("reading the transfer template's report")?;
        reports.push((role, run));
    }
    let link_mbps = spec.link.parse::<braid::LinkSpec>().ok().and_then(|l| l.rate()).map(|r| r.bits_per_sec() as f64 / 1e6);
    let mut report = BenchReport::new(args.scenario, link_mbps, &reports);
    report.peer_errors = peer_errors;
    if let Some(path) = &args.plot {
        plot(path, &report)?;
    }
    if args.json {
        emit(&report.json().to_string());
    } else {
        emit(&super::table::render(&BenchReport::HEADER, &report.rows()));
        for line in report.footer() {
            emit(&line);
        }
    }
    Ok(Outcome::Success)
}

/// FILE.svg: throughput per probe interval of both tuners, with the
/// optimum as a flat line; FILE-workers.svg: each stage's workers.
fn plot(path: &Path, r: &BenchReport) -> anyhow::Result<()> {
    let mut throughput = LineChart {
        title: format!("braid bench transfer --scenario {}: throughput", r.scenario.name()),
        x_label: "time (s)".into(),
        y_label: "Mbit/s".into(),
        ..LineChart::default()
    };
    let mut workers = LineChart {
        title: format!("braid bench transfer --scenario {}: workers per stage", r.scenario.name()),
        x_label: "time (s)".into(),
        y_label: "workers".into(),
        ..LineChart::default()
    };
    for (name, tuner) in [("marlin", &r.marlin), ("falcon", &r.falcon)] {
        let Some(t) = tuner else { continue };
        throughput.series.push(Series { name: name.into(), points: t.threads.iter().map(|s| (s.t, s.throughput_mbps)).collect() });
        for (stage, pick) in [("read", 0), ("net", 1), ("write", 2)] {
            let points = t.threads.iter().map(|s| (s.t, f64::from([s.read, s.net, s.write][pick]))).collect();
            workers.series.push(Series { name: format!("{name} {stage}"), points });
        }
    }
    if let (Some(o), Some(end)) = (&r.optimum, r.marlin.as_ref().and_then(|m| m.threads.last()).map(|s| s.t)) {
        let label = format!("static optimum {}/{}/{}", o.read, o.net, o.write);
        throughput.series.push(Series { name: label, points: vec![(0.0, o.throughput_mbps), (end, o.throughput_mbps)] });
    }
    write_line_chart(path, &throughput)?;
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_else(|| "transfer".into());
    write_line_chart(&path.with_file_name(format!("{stem}-workers.svg")), &workers)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> BenchTransferArgs {
        crate::cli::parse_flags(argv)
    }

    #[test]
    fn flags_override_the_scenario() {
        let a = args(&["--scenario", "small-files", "--files", "1000", "--link", "rtt=2ms,rate=100mbit", "--insecure-no-auth", "--stream-buffer", "256KiB"]);
        let s = spec(&a);
        assert_eq!((s.files, s.link.as_str(), s.stream_buffer), (1000, "rtt=2ms,rate=100mbit", 256 << 10));
        let c = common(&a);
        assert!(c.contains(&("encrypted".to_string(), Value::Bool(false))));
        assert!(c.contains(&("probe_interval".to_string(), Value::Duration(BENCH_PROBE_INTERVAL))));
    }

    #[test]
    fn bad_values_name_the_allowed_form() {
        let e = parse_scenario("fast").unwrap_err();
        assert!(e.contains("read, network, write, mixed, small-files, small-files-wan, large, competing"), "{e}");
        assert!(parse_link("rtt=fast").unwrap_err().contains("invalid link"));
    }
}
