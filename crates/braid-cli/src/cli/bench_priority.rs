//! `braid bench priority --scenario NAME`: DTL's priority scenarios
//! (polite, latecomer, multcp, switch, five) over the emulator, Braid
//! LEDBAT/MulTCP flows (the `priority` controller, changed on the live
//! connections) against kernel TCP (CUBIC) on one bottleneck. The scenario
//! definitions and the report are the simulator's (`braid_lab::harness::priority_sim`);
//! the measurement is the lab's `priority` template
//! (`braid_lab::template::builtin::priority`): this command turns its flags
//! into one experiment per scenario run and prints what they recorded.
//!
//! Prints a table per run and the acceptance checks of issue 5, or one JSON
//! object with `--json` (`scenario`, `reports` as `braid sim priority`
//! prints them, `checks`); `--plot FILE.svg` draws each flow's throughput
//! over time with the priority switches marked.
//!
//! `--grid` runs issue 25's grid on the emulator, with the flags and output
//! of `braid sim priority --grid` (one experiment per point and scenario,
//! one at a time: the emulator's runs are timed on the wall clock; phases
//! at most `--max-phase`, default 60 s); it needs root, checked before
//! anything runs, and exits with status 3 if any check failed.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid::{CcAlgorithm, LinkSpec};
use braid_lab::harness::priority_sim::{self, ScenarioReport};
use braid_lab::oneoff::{run_experiments_with_progress, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::plot::chart::{write_line_chart, LineChart, Series};
use braid_lab::template::builtin::priority::{self, grid, Priority};
use clap::{Args, ValueEnum};

use super::sim_priority::GridArgs;
use super::{emit, parse_cc, parse_link, parse_secs, Outcome};

/// Default cap of a measured phase on the emulator: its runs take real
/// time (a `versus` run at p = 0 lasts about 5.3 phases).
const EMU_MAX_PHASE: Duration = Duration::from_secs(60);

/// The p = 0 controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Ledbat {
    /// RFC 6817 with DTL's multiplicative decrease (target 100 ms).
    Ledbat,
    /// LEDBAT++ (target 60 ms, dynamic gain, periodic slowdowns).
    #[value(name = "ledbat++")]
    PlusPlus,
}

impl Ledbat {
    /// The template's name for it.
    fn name(self) -> &'static str {
        match self {
            Ledbat::Ledbat => "ledbat",
            Ledbat::PlusPlus => "ledbat++",
        }
    }
}

#[derive(Debug, Args)]
pub struct BenchPriorityArgs {
    /// polite, latecomer, multcp, switch, five, versus or pair.
    #[arg(long, value_name = "NAME", required_unless_present = "grid", conflicts_with = "grid")]
    scenario: Option<String>,
    /// The bottleneck path (default: the paper's for the scenario, as in
    /// `braid sim priority`).
    #[arg(long, value_name = "SPEC", value_parser = parse_link, conflicts_with = "grid")]
    link: Option<LinkSpec>,
    /// Multiply every duration of the scenario (1 = the paper's timings:
    /// polite 120 s, latecomer 2 × 150 s, multcp 200 s per run, switch
    /// 480 s, five 340 s).
    #[arg(long, value_name = "X", default_value_t = 1.0, conflicts_with_all = ["duration", "grid"])]
    scale: f64,
    /// Length of each run in seconds: the paper's timings scaled to fit
    /// (e.g. `--scenario switch --duration 12` gives phases of 5.5, 2.75 and
    /// 2.75 s).
    #[arg(long, value_name = "SECS", value_parser = parse_secs, conflicts_with = "grid")]
    duration: Option<Duration>,
    /// N values of the multcp scenario, comma-separated.
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = [1.0, 2.0, 3.0, 4.0])]
    n: Vec<f64>,
    /// Congestion control of the competing kernel TCP flows: cubic
    /// (default) or newreno (kernel `reno`); with --grid, a list (default:
    /// cubic,newreno).
    #[arg(long, value_name = "ALGO,...", value_delimiter = ',', value_parser = parse_cc)]
    tcp: Vec<CcAlgorithm>,
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
    #[arg(long, value_name = "FILE.svg", conflicts_with = "grid")]
    plot: Option<PathBuf>,
    /// Print one JSON object instead of tables (with --grid: one array of
    /// rows, as `braid sim priority --grid --json`).
    #[arg(long)]
    json: bool,
    /// Run the Braid flows without authentication or encryption (the bare
    /// protocol; by default each end has a fresh identity pinned to the
    /// other's). The JSON's `encrypted` says which.
    #[arg(long)]
    insecure_no_auth: bool,
    #[command(flatten)]
    grid: GridArgs,
}

/// The experiments `args` stand for, one per scenario run, in the order
/// of today's report list: `latecomer` is the multiplicative decrease then
/// the additive baseline, `multcp` one MulTCP(N) flow against TCP for each
/// N, then two MulTCP(N) flows for each N.
fn experiments(args: &BenchPriorityArgs) -> anyhow::Result<Vec<Vec<(String, Value)>>> {
    args.grid.check_unused()?;
    let expected = "expected polite, latecomer, multcp, switch, five, versus or pair";
    let scenario = |name: &str| ("scenario".to_string(), Value::Enum(name.into()));
    let name = args.scenario.as_deref().context("--scenario: expected a scenario name, or --grid")?;
    let runs: Vec<Vec<(String, Value)>> = match name {
        "polite" | "switch" | "five" => vec![vec![scenario(name)]],
        "versus" | "pair" => args.n.iter().map(|&n| vec![scenario(name), ("n".into(), Value::Float(n))]).collect(),
        "latecomer" => vec![
            vec![scenario("latecomer")],
            vec![scenario("latecomer"), ("decrease".into(), Value::Enum("additive".into()))],
        ],
        "multcp" => [false, true]
            .into_iter()
            .flat_map(|pair| {
                args.n.iter().map(move |&n| {
                    vec![scenario("multcp"), ("n".into(), Value::Float(n)), ("multcp_pair".into(), Value::Bool(pair))]
                })
            })
            .collect(),
        other => anyhow::bail!("--scenario `{other}`: {expected}"),
    };
    if args.duration.is_none() && !(args.scale.is_finite() && args.scale > 0.0 && args.scale <= 100.0) {
        anyhow::bail!(
            "--scale: the time scale {} is out of range: expected a scale in (0, 100], e.g. --scale 0.25 or --duration 60",
            args.scale
        );
    }
    let zero_ok = matches!(name, "versus" | "pair");
    if let Some(bad) = args.n.iter().find(|n| !(n.is_finite() && (**n > 0.0 || zero_ok && **n == 0.0) && **n <= 100.0)) {
        anyhow::bail!("--n: {bad} is out of range: expected numbers in (0, 100], e.g. 1,2,3,4 (0 too for versus and pair)");
    }
    let tcp = match args.tcp.as_slice() {
        [] | [CcAlgorithm::Cubic] => "cubic",
        [CcAlgorithm::NewReno] => "newreno",
        [_] => anyhow::bail!("--tcp: the competing flows are kernel TCP: expected cubic or newreno"),
        _ => anyhow::bail!("--tcp: one kernel TCP per scenario run (a list only with --grid)"),
    };
    if let Some(p) = &args.plot {
        anyhow::ensure!(
            p.extension().is_some_and(|e| e.eq_ignore_ascii_case("svg")),
            "--plot {}: expected a file name ending in .svg",
            p.display()
        );
    }
    let mut common: Vec<(String, Value)> = vec![
        ("tcp".into(), Value::Enum(tcp.into())),
        ("ledbat".into(), Value::Enum(args.ledbat.name().into())),
        ("params".into(), Value::String(priority::format_cc_params(&args.params))),
        ("encrypted".into(), Value::Bool(!args.insecure_no_auth)),
    ];
    match args.duration {
        Some(d) => common.push(("duration".into(), Value::Duration(d))),
        None => common.push(("scale".into(), Value::Float(args.scale))),
    }
    if let Some(bin) = args.bin {
        common.push(("bin".into(), Value::Duration(bin)));
    }
    if let Some(link) = &args.link {
        common.push(("link".into(), Value::Link(link.to_string())));
    }
    let mut all = Vec::new();
    for mut values in runs {
        values.extend(common.iter().cloned());
        // A bad --param or --link fails now, not after the runs before it.
        let params = priority::with_defaults(&values)?;
        priority::scenario_config(&params, 1).map_err(|e| anyhow::anyhow!("--param/--link/--duration: {e}"))?;
        all.push(values);
    }
    Ok(all)
}

pub async fn run(args: BenchPriorityArgs) -> anyhow::Result<Outcome> {
    if args.grid.grid {
        return run_grid(args).await;
    }
    let experiments = experiments(&args)?;
    let target_ms = {
        let params = priority::with_defaults(&experiments[0])?;
        priority::ledbat_target_ms(&params)?
    };
    // The runs are timed on the wall clock: keep them off the async workers.
    let show_progress = !args.json;
    let results = tokio::task::spawn_blocking(move || {
        run_experiments_with_progress(Arc::new(Priority), experiments, &OneOffOptions::default(), show_progress)
    })
    .await
    .context("benchmark task")??;
    let mut reports = Vec::with_capacity(results.len());
    for r in &results {
        let name = priority::scenario_config(&r.params, 1).map_or_else(|_| "a scenario".into(), |c| c.name);
        if let Some(e) = &r.error {
            anyhow::bail!("running {name} on the emulator: {e}");
        }
        reports.push(priority::report_of(r).with_context(|| format!("running {name} on the emulator"))?);
    }
    if let Some(path) = &args.plot {
        let many = reports.len() > 1;
        for r in &reports {
            let file = if many { plot_path(path, &r.scenario) } else { path.clone() };
            write_line_chart(&file, &chart(r))?;
        }
    }
    let checks = priority_sim::checks(&reports, target_ms);
    if args.json {
        let v = serde_json::json!({
            "scenario": args.scenario,
            "encrypted": !args.insecure_no_auth,
            "reports": reports,
            "checks": checks,
        });
        emit(&serde_json::to_string(&v)?);
    } else {
        let mut text: Vec<String> = reports.iter().map(super::sim_priority::render).collect();
        text.push(super::sim_priority::render_checks(&checks));
        emit(&text.join("\n\n"));
    }
    // Every flow must have run: an error is a failed check.
    Ok(Outcome::from_ok(reports.iter().all(|r| r.flows.iter().all(|f| f.error.is_none()))))
}

/// `--grid` on the emulator: the study of the grid on the `priority`
/// template (exclusive: one experiment at a time), after checking that the
/// emulator can run here.
async fn run_grid(args: BenchPriorityArgs) -> anyhow::Result<Outcome> {
    let axes = args.grid.axes(&args.tcp, EMU_MAX_PHASE)?;
    let mut extra = vec![
        ("ledbat", Value::Enum(args.ledbat.name().into())),
        ("params", Value::String(priority::format_cc_params(&args.params))),
        ("encrypted", Value::Bool(!args.insecure_no_auth)),
    ];
    if let Some(bin) = args.bin {
        extra.push(("bin", Value::Duration(bin)));
    }
    let study = axes.study("bench-priority-grid", Arc::new(Priority), &extra, 1)?;
    braid_emu::check_capabilities().context("`braid bench priority --grid` needs the emulator")?;
    let show_progress = !args.json;
    let results = tokio::task::spawn_blocking(move || grid::run_study(&study, 1, None, show_progress))
        .await
        .context("benchmark task")??;
    let rows = grid::rows(&results)?;
    super::sim_priority::emit_grid(&rows, args.json)
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

    fn args(argv: &[&str]) -> BenchPriorityArgs {
        crate::cli::parse_flags(argv)
    }

    fn get<'a>(values: &'a [(String, Value)], name: &str) -> Option<&'a Value> {
        values.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    #[test]
    fn each_scenario_run_is_one_experiment() {
        let runs = |argv: &[&str]| -> Vec<String> {
            experiments(&args(argv))
                .unwrap()
                .iter()
                .map(|v| {
                    let params = priority::with_defaults(v).unwrap();
                    priority::scenario_config(&params, 1).unwrap().name
                })
                .collect()
        };
        assert_eq!(runs(&["--scenario", "switch"]), ["switch"]);
        assert_eq!(runs(&["--scenario", "latecomer"]), ["latecomer", "latecomer_additive"]);
        assert_eq!(
            runs(&["--scenario", "multcp", "--n", "1,2.5"]),
            ["multcp_1", "multcp_2.5", "multcp_pair_1", "multcp_pair_2.5"]
        );
        assert_eq!(runs(&["--scenario", "multcp"]).len(), 8, "N = 1, 2, 3, 4 by default");
    }

    #[test]
    fn flags_become_parameter_values() {
        let e = experiments(&args(&["--scenario", "switch", "--duration", "12"])).unwrap();
        assert_eq!(get(&e[0], "duration"), Some(&Value::Duration(Duration::from_secs(12))));
        assert_eq!(get(&e[0], "scale"), None, "--duration and --scale conflict");
        let cfg = priority::scenario_config(&priority::with_defaults(&e[0]).unwrap(), 1).unwrap();
        assert_eq!((cfg.duration, cfg.bin), (Duration::from_secs(12), Duration::from_millis(250)));
        let e = experiments(&args(&[
            "--scenario", "five", "--scale", "0.5", "--tcp", "newreno", "--ledbat", "ledbat++",
            "--param", "target_ms=50", "--param", "delay_beta=1", "--bin", "0.5", "--link", "rtt=10ms,rate=20mbit",
        ]))
        .unwrap();
        let v = &e[0];
        assert_eq!(get(v, "scale"), Some(&Value::Float(0.5)));
        assert_eq!(get(v, "tcp"), Some(&Value::Enum("newreno".into())));
        assert_eq!(get(v, "ledbat"), Some(&Value::Enum("ledbat++".into())));
        assert_eq!(get(v, "params"), Some(&Value::String("target_ms=50,delay_beta=1".into())));
        assert_eq!(get(v, "bin"), Some(&Value::Duration(Duration::from_millis(500))));
        assert_eq!(get(v, "link"), Some(&Value::Link("rtt=10ms,rate=20mbit".into())));
        let params = priority::with_defaults(v).unwrap();
        assert_eq!(priority::ledbat_target_ms(&params).unwrap(), 50.0);
        // Every value is one the template's declared type accepts.
        let decls = braid_lab::template::Template::params(&Priority);
        for (name, value) in v {
            let d = decls.iter().find(|d| &d.name == name).unwrap();
            assert_eq!(d.ty.parse_text(&value.to_text()).unwrap(), *value, "{name}");
        }
    }

    #[test]
    fn bad_flags_fail_before_any_run() {
        let err = |argv: &[&str]| experiments(&args(argv)).unwrap_err().to_string();
        assert!(err(&["--scenario", "nope"]).contains("expected polite, latecomer, multcp, switch, five, versus or pair"));
        assert!(err(&["--scenario", "five", "--plot", "a.png"]).contains(".svg"));
        assert!(err(&["--scenario", "switch", "--param", "delay_beta=2"]).contains("delay_beta"));
        assert!(err(&["--scenario", "switch", "--scale", "0"]).contains("(0, 100]"));
        assert!(err(&["--scenario", "multcp", "--n", "1,0"]).contains("--n"));
        assert!(err(&["--scenario", "switch", "--tcp", "priority"]).contains("cubic or newreno"));
        assert!(err(&["--scenario", "switch", "--tcp", "cubic,newreno"]).contains("only with --grid"));
        assert!(err(&["--scenario", "switch", "--p", "1"]).contains("--p is a grid axis"));
        assert_eq!(experiments(&args(&["--scenario", "pair", "--n", "0,2"])).unwrap().len(), 2);
    }
}
