//! `braid bench data`: DATA (the learned TCP/Braid mix of seed 000 §IV)
//! against TCP only and Braid only over the emulator, and the paper's
//! Fig. 8, the latency of small control messages while a bulk transfer
//! runs.
//!
//! The measurement is the lab's `data` template
//! (`braid_lab::template::builtin::data`, which documents what is measured
//! and why); this command is a small study over it: one experiment per RTT
//! of `--rtts` and repetition of `--repeat` (RTT by RTT, so the repetitions
//! of an RTT run back to back), each building its own testbed
//! (`rtt=<r>ms,rate=<rate>`, the link queue its default of 1 BDP) and
//! measuring TCP, Braid and DATA one after the other. `--repeat` repeats
//! the goodput runs: the control-latency runs (Fig. 8) run in each RTT's
//! first experiment only. Per RTT the goodput of each variant is the median
//! of its runs, and `data_over_best` is DATA's median over the better of
//! the other two medians. The i-th experiment's seed (the DATA learner's
//! exploration) is `--seed` + i.
//!
//! Prints a goodput table and a control-latency table, or one JSON object
//! with `--json` (`goodput[]` with `data_over_best` and per-variant
//! details, `control[]` with p10…p99 and the mean, `control_p50[]` with the
//! added latency over the no-bulk floor); `--plot FILE.svg` draws goodput
//! per RTT as bars.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid::size::ByteSize;
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions, OneOffResult};
use braid_lab::param::Value;
use braid_lab::plot::chart::write_bar_chart;
use braid_lab::template::builtin::data::report::{BenchSettings, DataBenchReport, DataRun, RttRuns};
use braid_lab::template::builtin::data::Data;
use clap::Args;

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
    /// Run both nodes without authentication or encryption (the bare
    /// protocols; by default TLS on TCP and Noise on Braid, each node a
    /// fresh identity pinned to the other's). The JSON's `encrypted` says
    /// which.
    #[arg(long)]
    insecure_no_auth: bool,
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

/// One experiment's parameter values.
type Experiment = Vec<(String, Value)>;

/// The experiments: one per RTT and repetition, RTT-major; the control
/// runs in each RTT's first repetition only.
fn experiments(args: &BenchDataArgs) -> Vec<Experiment> {
    let mut out = Vec::new();
    for &rtt in &args.rtts {
        for rep in 0..args.repeat {
            let control = if rep == 0 { Duration::from_secs_f64(args.control_secs) } else { Duration::ZERO };
            let mut e: Experiment = vec![
                ("rtt".into(), Value::Duration(Duration::from_millis(u64::from(rtt)))),
                ("rate".into(), Value::String(args.rate.clone())),
                ("bytes".into(), Value::Size(args.bytes.0)),
                ("message_size".into(), Value::Size(args.message_size.0)),
                ("control_secs".into(), Value::Duration(control)),
                ("transfer_timeout".into(), Value::Duration(args.timeout)),
                ("encrypted".into(), Value::Bool(!args.insecure_no_auth)),
            ];
            if let Some(r) = args.data_ratio {
                e.push(("data_policy".into(), Value::Enum("static".into())));
                e.push(("data_ratio".into(), Value::Float(r)));
            }
            if let Some(ms) = args.data_episode {
                e.push(("data_episode".into(), Value::Duration(Duration::from_millis(ms))));
            }
            if let Some(w) = args.data_window {
                e.push(("data_window".into(), Value::Int(i64::from(w))));
            }
            if let Some(cc) = args.data_bulk_cc {
                e.push(("data_bulk_cc".into(), Value::Enum(cc.as_str().into())));
            }
            out.push(e);
        }
    }
    out
}

/// Longest one experiment may take: three transfers of `--timeout` each,
/// four control runs with their grace periods, and the set-up.
fn experiment_timeout(args: &BenchDataArgs) -> Duration {
    args.timeout * 3 + (Duration::from_secs_f64(args.control_secs) + Duration::from_secs(60)) * 4 + Duration::from_secs(60)
}

/// Each experiment's report, grouped per RTT; the first failure as an
/// error.
fn group(args: &BenchDataArgs, results: &[OneOffResult]) -> anyhow::Result<Vec<RttRuns>> {
    let per_rtt = args.repeat as usize;
    let mut groups = Vec::with_capacity(args.rtts.len());
    for (&rtt, chunk) in args.rtts.iter().zip(results.chunks(per_rtt)) {
        let mut runs = Vec::with_capacity(chunk.len());
        for (rep, r) in chunk.iter().enumerate() {
            if let Some(e) = &r.error {
                anyhow::bail!("rtt {rtt} ms, run {}: {e}", rep + 1);
            }
            let json = r.artifact("report").with_context(|| format!("rtt {rtt} ms, run {}: no report", rep + 1))?;
            let run: DataRun = serde_json::from_value(json.clone()).context("reading the data template's report")?;
            runs.push(run);
        }
        groups.push(RttRuns { rtt_ms: rtt, runs });
    }
    Ok(groups)
}

pub async fn run(args: BenchDataArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(!args.rtts.is_empty(), "--rtts: give at least one RTT in milliseconds, e.g. 0,3,150,320");
    anyhow::ensure!(args.bytes.0 > 0, "--bytes: expected a positive size, e.g. 400MiB");
    braid::emu::check_capabilities().context("`braid bench data` runs over the emulator")?;
    let experiments = experiments(&args);
    let options = OneOffOptions { seed: args.seed, timeout: Some(experiment_timeout(&args)) };
    let results = {
        let show_progress = !args.json;
        tokio::task::spawn_blocking(move || run_experiments_with_progress(Arc::new(Data), experiments, &options, show_progress))
    }
        .await
        .context("the benchmark thread panicked")??;
    let groups = group(&args, &results)?;
    let settings = BenchSettings {
        bytes: args.bytes.0,
        rate: args.rate.clone(),
        message_size: args.message_size.0,
        repeat: args.repeat,
        control_secs: args.control_secs,
        encrypted: !args.insecure_no_auth,
    };
    let report = DataBenchReport::new(&settings, &groups);
    if let Some(path) = &args.plot {
        write_bar_chart(path, &report.goodput_chart())?;
    }
    if args.json {
        emit(&serde_json::to_string(&report)?);
    } else {
        let protection = if report.encrypted { "encrypted" } else { "NOT encrypted, --insecure-no-auth" };
        emit(&format!("Goodput of {} over rate={} (queue 1 BDP; {protection}):", args.bytes, args.rate));
        emit(&render(&report.goodput_table()));
        if !report.control.is_empty() {
            emit(&format!("Control-message round trips (Fig. 8) over {:.0} s runs:", args.control_secs));
            emit(&render(&report.control_table()));
        }
    }
    Ok(Outcome::from_ok(report.complete && report.pings_ok()))
}

/// A lab table in the CLI's layout (numbers right-aligned).
fn render(t: &braid_lab::analysis::table::Table) -> String {
    let header: Vec<&str> = t.columns.iter().map(String::as_str).collect();
    super::table::render(&header, &t.rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(argv: &[&str]) -> BenchDataArgs {
        crate::cli::parse_flags(argv)
    }

    fn value<'a>(e: &'a Experiment, name: &str) -> Option<&'a Value> {
        e.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    #[test]
    fn rtts_and_repeats_become_experiments_with_control_runs_once_per_rtt() {
        let a = args(&["--rtts", "0,150", "--repeat", "3", "--bytes", "20MiB", "--control-secs", "2"]);
        let e = experiments(&a);
        assert_eq!(e.len(), 6);
        let rtts: Vec<_> = e.iter().map(|x| value(x, "rtt").unwrap().to_text()).collect();
        assert_eq!(rtts, ["0s", "0s", "0s", "150ms", "150ms", "150ms"]);
        let control: Vec<_> = e.iter().map(|x| value(x, "control_secs").unwrap().to_text()).collect();
        assert_eq!(control, ["2s", "0s", "0s", "2s", "0s", "0s"]);
        assert_eq!(value(&e[0], "bytes"), Some(&Value::Size(20 << 20)));
        assert_eq!(value(&e[0], "data_policy"), None, "the learner by default");
    }

    #[test]
    fn data_flags_become_template_parameters() {
        let a = args(&["--rtts", "3", "--data-ratio", "-0.5", "--data-episode", "250", "--data-window", "32", "--data-bulk-cc", "reno"]);
        let e = &experiments(&a)[0];
        assert_eq!(value(e, "data_policy"), Some(&Value::Enum("static".into())));
        assert_eq!(value(e, "data_ratio"), Some(&Value::Float(-0.5)));
        assert_eq!(value(e, "data_episode"), Some(&Value::Duration(Duration::from_millis(250))));
        assert_eq!(value(e, "data_window"), Some(&Value::Int(32)));
        assert_eq!(value(e, "data_bulk_cc"), Some(&Value::Enum("newreno".into())));
    }

    #[test]
    fn every_experiment_is_one_the_template_accepts() {
        use braid_lab::template::Template;
        let a = args(&["--data-ratio", "1", "--data-bulk-cc", "ledbat++", "--repeat", "2"]);
        let decls = Data.params();
        for e in experiments(&a) {
            for (name, v) in &e {
                let d = decls.iter().find(|d| &d.name == name).unwrap_or_else(|| panic!("undeclared {name}"));
                assert_eq!(d.ty.parse_text(&v.to_text()).as_ref(), Ok(v), "{name}");
            }
        }
    }

    #[test]
    fn the_timeout_covers_every_transfer_and_control_run() {
        let a = args(&["--timeout", "100", "--control-secs", "10"]);
        assert!(experiment_timeout(&a) >= Duration::from_secs(300 + 40));
    }
}
