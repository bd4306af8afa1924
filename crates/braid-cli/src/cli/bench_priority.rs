//! `braid bench priority --scenario NAME`: DTL's priority scenarios
//! (polite, latecomer, multcp, switch, five) over the emulator, Braid
//! LEDBAT/MulTCP flows (the `priority` controller, changed on the live
//! connections) against kernel TCP (CUBIC) on one bottleneck. The scenario
//! definitions and the report are the simulator's (`braid_lab::harness::priority_sim`);
//! only the runner differs (`bench_priority/emu.rs`).
//!
//! Prints a table per run and the acceptance checks of issue 5, or one JSON
//! object with `--json` (`scenario`, `reports` as `braid sim priority`
//! prints them, `checks`); `--plot FILE.svg` draws each flow's throughput
//! over time with the priority switches marked.

mod emu;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use braid_lab::harness::priority_sim::{self, ScenarioConfig, ScenarioOptions, ScenarioReport};
use braid::{CcAlgorithm, LinkSpec};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use braid_lab::plot::chart::{write_line_chart, LineChart, Series};
use super::{emit, parse_cc, parse_link, parse_secs, Outcome};

/// The p = 0 controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Ledbat {
    /// RFC 6817 with DTL's multiplicative decrease (target 100 ms).
    Ledbat,
    /// LEDBAT++ (target 60 ms, dynamic gain, periodic slowdowns).
    #[value(name = "ledbat++")]
    PlusPlus,
}

#[derive(Debug, Args)]
pub struct BenchPriorityArgs {
    /// polite, latecomer, multcp, switch or five.
    #[arg(long, value_name = "NAME")]
    scenario: String,
    /// The bottleneck path (default: the paper's for the scenario, as in
    /// `braid sim priority`).
    #[arg(long, value_name = "SPEC", value_parser = parse_link)]
    link: Option<LinkSpec>,
    /// Multiply every duration of the scenario (1 = the paper's timings:
    /// polite 120 s, latecomer 2 × 150 s, multcp 200 s per run, switch
    /// 480 s, five 340 s).
    #[arg(long, value_name = "X", default_value_t = 1.0, conflicts_with = "duration")]
    scale: f64,
    /// Length of each run in seconds: the paper's timings scaled to fit
    /// (e.g. `--scenario switch --duration 12` gives phases of 5.5, 2.75 and
    /// 2.75 s).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    duration: Option<Duration>,
    /// N values of the multcp scenario, comma-separated.
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = [1.0, 2.0, 3.0, 4.0])]
    n: Vec<f64>,
    /// Congestion control of the competing kernel TCP flows: cubic or
    /// newreno (kernel `reno`).
    #[arg(long, value_name = "ALGO", default_value = "cubic", value_parser = parse_cc)]
    tcp: CcAlgorithm,
    /// The p = 0 controller: ledbat or ledbat++.
    #[arg(long, value_name = "NAME", value_enum, default_value_t = Ledbat::Ledbat)]
    ledbat: Ledbat,
    /// Extra parameter of every Braid flow's controller, NAME=VALUE
    /// (repeatable), e.g. `delay_beta=1` (RFC 6817's additive decrease),
    /// `target_ms=60`, `ss_exit=0`.
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = super::sim_priority::parse_param)]
    params: Vec<(String, f64)>,
    /// Width of the throughput bins in seconds (default: 1 s × the time
    /// scale, at least 0.25 s).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    bin: Option<Duration>,
    /// Write each flow's throughput over time to this SVG file (one file
    /// per run: with several runs, the run's name is added to the stem).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// Shortest default bin of the throughput series.
const MIN_BIN: Duration = Duration::from_millis(250);

/// The paper's length of one run of `scenario`, seconds.
fn paper_duration(scenario: &str) -> Option<f64> {
    Some(match scenario {
        "polite" => 120.0,
        "latecomer" => 150.0,
        "multcp" => 200.0,
        "switch" => 480.0,
        "five" => 340.0,
        _ => return None,
    })
}

fn options(args: &BenchPriorityArgs) -> anyhow::Result<ScenarioOptions> {
    let expected = "expected polite, latecomer, multcp, switch or five";
    let paper = paper_duration(&args.scenario).ok_or_else(|| anyhow::anyhow!("--scenario `{}`: {expected}", args.scenario))?;
    let scale = match args.duration {
        Some(d) => d.as_secs_f64() / paper,
        None => args.scale,
    };
    if !(scale.is_finite() && scale > 0.0 && scale <= 100.0) {
        anyhow::bail!("--scale/--duration: the time scale {scale} is out of range: expected a scale in (0, 100], e.g. --scale 0.25 or --duration 60");
    }
    if let Some(bad) = args.n.iter().find(|n| !(n.is_finite() && **n > 0.0 && **n <= 100.0)) {
        anyhow::bail!("--n: {bad} is out of range: expected numbers in (0, 100], e.g. 1,2,3,4");
    }
    if args.tcp == CcAlgorithm::Priority {
        anyhow::bail!("--tcp: the competing flows are kernel TCP: expected cubic or newreno");
    }
    if let Some(p) = &args.plot {
        anyhow::ensure!(
            p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg")),
            "--plot {}: expected a file name ending in .svg",
            p.display()
        );
    }
    let mut dtl_params = match args.ledbat {
        Ledbat::Ledbat => Vec::new(),
        Ledbat::PlusPlus => vec![("variant".to_string(), 1.0)],
    };
    dtl_params.extend(args.params.iter().cloned());
    Ok(ScenarioOptions { link: args.link.clone(), scale, tcp: args.tcp, ns: args.n.clone(), dtl_params, seed: 1 })
}

pub async fn run(args: BenchPriorityArgs) -> anyhow::Result<Outcome> {
    let opts = options(&args)?;
    let mut configs =
        priority_sim::scenarios(&args.scenario, &opts).map_err(|e| anyhow::anyhow!("--scenario: {e}"))?;
    for c in &mut configs {
        // Wall-clock samples: bins much shorter than this are noise.
        c.bin = args.bin.unwrap_or(c.bin.max(MIN_BIN));
        // A bad --param fails now, not after the runs before it.
        priority_sim::validate(c).map_err(|e| anyhow::anyhow!("--param/--link: {e}"))?;
    }
    let target_ms = args.params.iter().rev().find(|(n, _)| n == "target_ms").map_or(
        match args.ledbat {
            Ledbat::Ledbat => 100.0,
            Ledbat::PlusPlus => 60.0,
        },
        |(_, v)| *v,
    );
    let hidden = args.json;
    // The runs are timed on the wall clock: keep them off the async workers.
    let reports = tokio::task::spawn_blocking(move || run_all(&configs, hidden)).await.context("benchmark task")??;
    if let Some(path) = &args.plot {
        let many = reports.len() > 1;
        for r in &reports {
            let file = if many { plot_path(path, &r.scenario) } else { path.clone() };
            write_line_chart(&file, &chart(r))?;
        }
    }
    let checks = priority_sim::checks(&reports, target_ms);
    if args.json {
        let v = serde_json::json!({ "scenario": args.scenario, "reports": reports, "checks": checks });
        emit(&serde_json::to_string(&v)?);
    } else {
        let mut text: Vec<String> = reports.iter().map(super::sim_priority::render).collect();
        text.push(super::sim_priority::render_checks(&checks));
        emit(&text.join("\n\n"));
    }
    // Every flow must have run: an error is a failed check.
    Ok(Outcome::from_ok(reports.iter().all(|r| r.flows.iter().all(|f| f.error.is_none()))))
}

fn run_all(configs: &[ScenarioConfig], hidden: bool) -> anyhow::Result<Vec<ScenarioReport>> {
    let total: Duration = configs.iter().map(|c| c.duration).sum();
    let target = if hidden { ProgressDrawTarget::hidden() } else { ProgressDrawTarget::stderr() };
    let bar = ProgressBar::with_draw_target(Some(total.as_millis() as u64), target);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>16.bold} [{bar:30.cyan/blue}] {msg} ({eta} left)")
            .expect("static template is valid")
            .progress_chars("=> "),
    );
    let mut done = Duration::ZERO;
    let mut reports = Vec::new();
    for cfg in configs {
        bar.set_prefix(cfg.name.clone());
        let tick = |t: Duration| {
            bar.set_position((done + t).as_millis() as u64);
            bar.set_message(format!("{:.0}/{:.0} s", t.as_secs_f64(), cfg.duration.as_secs_f64()));
        };
        let r = emu::run(cfg, &tick).with_context(|| format!("running {} on the emulator", cfg.name))?;
        done += cfg.duration;
        reports.push(r);
    }
    bar.finish_and_clear();
    Ok(reports)
}

/// `dir/stem-NAME.svg` for the run `name` of `path` = `dir/stem.svg`.
fn plot_path(path: &Path, name: &str) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!("{stem}-{name}.svg"))
}

/// Each flow's throughput per bin, with the priority changes and phase
/// starts marked.
fn chart(r: &ScenarioReport) -> LineChart {
    let series = r
        .flows
        .iter()
        .map(|f| Series {
            name: format!("{} ({})", f.label, f.cc),
            points: f.throughput_mbps.iter().enumerate().map(|(k, &v)| ((k as f64 + 0.5) * r.bin_secs, v)).collect(),
        })
        .collect();
    let mut markers: Vec<(f64, String)> = Vec::new();
    for s in &r.switches {
        let label = format!("{} p={}", s.label, s.to);
        match markers.iter_mut().find(|m| (m.0 - s.at_secs).abs() < 1e-6) {
            Some(m) if !m.1.contains(&format!("p={}", s.to)) => m.1.push_str(&format!(", p={}", s.to)),
            Some(_) => {}
            None => markers.push((s.at_secs, label)),
        }
    }
    LineChart {
        title: format!("braid bench priority: {} over {}", r.scenario, r.link),
        x_label: "time (s)".into(),
        y_label: "throughput (Mbit/s)".into(),
        series,
        markers,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_paths_name_the_run() {
        assert_eq!(plot_path(Path::new("/tmp/x/p.svg"), "multcp_2"), PathBuf::from("/tmp/x/p-multcp_2.svg"));
    }

    #[test]
    fn duration_scales_the_paper_timings() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: BenchPriorityArgs,
        }
        let a = Cli::parse_from(["x", "--scenario", "switch", "--duration", "12"]).a;
        let o = options(&a).unwrap();
        assert!((o.scale - 0.025).abs() < 1e-12);
        let a = Cli::parse_from(["x", "--scenario", "nope"]).a;
        assert!(options(&a).unwrap_err().to_string().contains("expected polite"));
        let a = Cli::parse_from(["x", "--scenario", "five", "--plot", "a.png"]).a;
        assert!(options(&a).unwrap_err().to_string().contains(".svg"));
    }
}
