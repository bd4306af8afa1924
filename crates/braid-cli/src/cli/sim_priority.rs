//! `braid sim priority --scenario NAME`: DTL's priority scenarios (polite,
//! latecomer, multcp, switch, five) on the deterministic simulator, with
//! per-phase, per-flow throughput, fairness, queuing delay and loss.
//!
//! A thin command over the lab's `sim-priority` template: a scenario name
//! becomes one experiment per run of the scenario (`latecomer`: DTL's
//! multiplicative decrease, then RFC 6817's additive one; `multcp`: one
//! MulTCP(N) flow against TCP for each N, then two MulTCP(N) flows for each
//! N; `versus` and `pair`: one run per N), all with the same seed, as
//! before the lab. The reports the template records as its `report`
//! artifacts are printed with issue 5's checks.
//!
//! `--grid` runs issue 25's grid instead
//! (`braid_lab::template::builtin::priority::grid`): `versus` and `pair` at
//! every point of `--rtt` × `--rate` × `--queue` × `--aqm` × `--tcp` ×
//! `--p`, each phase `--epochs` congestion epochs long (at most
//! `--max-phase`), in parallel through the lab; it prints one row per check
//! of each point (`--json`: an array of them, keys `rtt`, `rate`, `queue`,
//! `aqm`, `tcp`, `p`, `scenario`, `check`, `value`, `want`, `pass`,
//! `epochs`, `capped`, `error`) and exits with status 3 if any check
//! failed.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use braid::{CcAlgorithm, LinkSpec};
use braid_lab::harness::priority_sim::{self, Check, ScenarioError, ScenarioReport};
use braid_lab::oneoff::{run_experiments, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::template::builtin::priority::grid::{self, GridAxes, GridRow, Rate};
use braid_lab::template::builtin::sim_priority::{ledbat_target_ms, SimPriority, SCENARIOS};
use clap::Args;

use super::sim::NO_WALL_LIMIT;
use super::{emit, parse_cc, parse_link, table, Outcome};

#[derive(Debug, Args)]
pub struct SimPriorityArgs {
    /// polite, latecomer, multcp, switch, five, versus or pair.
    #[arg(long, value_name = "NAME", required_unless_present = "grid", conflicts_with = "grid")]
    scenario: Option<String>,
    /// The bottleneck path (default: the paper's for the scenario).
    #[arg(long, value_name = "SPEC", value_parser = parse_link, conflicts_with = "grid")]
    link: Option<LinkSpec>,
    /// Multiply every duration of the scenario (1 = the paper's timings).
    #[arg(long, value_name = "X", default_value_t = 1.0, conflicts_with = "grid")]
    scale: f64,
    /// Controller of the competing "TCP" flows: newreno (default) or cubic;
    /// with --grid, a list (default: cubic,newreno).
    #[arg(long, value_name = "ALGO,...", value_delimiter = ',', value_parser = parse_cc)]
    tcp: Vec<CcAlgorithm>,
    /// N values of the multcp, versus and pair scenarios, comma-separated.
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = [1.0, 2.0, 3.0, 4.0])]
    n: Vec<f64>,
    /// Extra parameter of every DTL flow's controller, NAME=VALUE
    /// (repeatable), e.g. `delay_beta=1` for RFC 6817's additive decrease,
    /// `variant=1` for LEDBAT++, `target_ms=60`.
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, f64)>,
    /// Seed: the same seed gives the same run (and trace hash); with
    /// --grid, the base seed of every point's own.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Print the reports as JSON (one array).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    grid: GridArgs,
}

/// The `--grid` flags, shared by `braid sim priority` and `braid bench
/// priority`.
#[derive(Debug, Args)]
pub struct GridArgs {
    /// Run issue 25's grid: versus and pair at every point of the axes
    /// below, one table row per check (exit status 3 if any fails).
    #[arg(long)]
    pub grid: bool,
    /// Grid: base RTTs (default 10ms,50ms,200ms).
    #[arg(long, value_name = "RTT,...", value_delimiter = ',', value_parser = grid::parse_rtt, requires = "grid")]
    pub rtt: Vec<Duration>,
    /// Grid: bottleneck rates (default 5mbit,20mbit,100mbit).
    #[arg(long, value_name = "RATE,...", value_delimiter = ',', value_parser = grid::parse_rate, requires = "grid")]
    pub rate: Vec<Rate>,
    /// Grid: bottleneck buffers in BDPs (default 0.25bdp,1bdp,4bdp).
    #[arg(long, value_name = "Q,...", value_delimiter = ',', value_parser = grid::parse_queue_bdp, requires = "grid")]
    pub queue: Vec<f64>,
    /// Grid: queue disciplines (default droptail,codel,pie,red,fq_codel; the
    /// AQMs are left out, with a message, while braid-link lacks `aqm=`).
    #[arg(long, value_name = "AQM,...", value_delimiter = ',', value_parser = grid::parse_aqm, requires = "grid")]
    pub aqm: Vec<String>,
    /// Grid: priorities of the DTL flows (default 0,1,2,3,4).
    #[arg(long, value_name = "P,...", value_delimiter = ',', value_parser = grid::parse_p, requires = "grid")]
    pub p: Vec<f64>,
    /// Grid: congestion epochs of the competing TCP each measured phase
    /// spans (default 3; phases last at least 20 s).
    #[arg(long, value_name = "E", requires = "grid")]
    pub epochs: Option<f64>,
    /// Grid: the longest measured phase, seconds (default 120 in the
    /// simulator, 60 on the emulator).
    #[arg(long, value_name = "SECS", value_parser = super::parse_secs, requires = "grid")]
    pub max_phase: Option<Duration>,
    /// Grid: the paths' round-trip delay variation (σ), in packet times at
    /// each point's rate (default 1: Floyd and Jacobson's remedy for phase
    /// effects between flows; 0 for none)
    #[arg(long, value_name = "X", requires = "grid")]
    pub jitter_packets: Option<f64>,
    /// Grid: experiments at once (default: one per core; the emulator runs
    /// one at a time).
    #[arg(long, value_name = "N", requires = "grid")]
    pub jobs: Option<usize>,
}

impl GridArgs {
    /// Fails if a grid flag is given without `--grid` (clap's `requires`
    /// counts the flag's default `false` as present).
    pub fn check_unused(&self) -> anyhow::Result<()> {
        let given = [
            ("--rtt", !self.rtt.is_empty()),
            ("--rate", !self.rate.is_empty()),
            ("--queue", !self.queue.is_empty()),
            ("--aqm", !self.aqm.is_empty()),
            ("--p", !self.p.is_empty()),
            ("--epochs", self.epochs.is_some()),
            ("--max-phase", self.max_phase.is_some()),
            ("--jobs", self.jobs.is_some()),
        ];
        match given.iter().find(|(_, set)| *set) {
            Some((flag, _)) if !self.grid => anyhow::bail!("{flag} is a grid axis: add --grid (or drop {flag})"),
            _ => Ok(()),
        }
    }

    /// The grid these flags describe over the defaults; `tcps` the
    /// competing TCPs (empty: both), `max_phase` the default cap.
    pub fn axes(&self, tcps: &[CcAlgorithm], max_phase: Duration) -> anyhow::Result<GridAxes> {
        let d = GridAxes::default();
        fn or<T: Clone>(given: &[T], default: Vec<T>) -> Vec<T> {
            if given.is_empty() {
                default
            } else {
                given.to_vec()
            }
        }
        let tcps = if tcps.is_empty() {
            d.tcps.clone()
        } else {
            tcps.iter()
                .map(|t| match t {
                    CcAlgorithm::Cubic => Ok("cubic".to_string()),
                    CcAlgorithm::NewReno => Ok("newreno".to_string()),
                    other => anyhow::bail!("--tcp {other}: the competing TCP is cubic or newreno"),
                })
                .collect::<anyhow::Result<_>>()?
        };
        let epochs = self.epochs.unwrap_or(d.epochs);
        anyhow::ensure!(
            epochs.is_finite() && epochs > 0.0 && epochs <= 1000.0,
            "--epochs {epochs}: expected a number of congestion epochs in (0, 1000], e.g. 3"
        );
        let max_phase = self.max_phase.unwrap_or(max_phase);
        anyhow::ensure!(
            (20.0..=10_000.0).contains(&max_phase.as_secs_f64()),
            "--max-phase {}: expected 20 to 10000 seconds",
            max_phase.as_secs_f64()
        );
        let mut axes = GridAxes {
            rtts: or(&self.rtt, d.rtts),
            rates: or(&self.rate, d.rates),
            queues_bdp: or(&self.queue, d.queues_bdp),
            aqms: or(&self.aqm, d.aqms),
            tcps,
            ps: or(&self.p, d.ps),
            epochs,
            max_phase,
            jitter_packets: self.jitter_packets.unwrap_or(d.jitter_packets),
        };
        anyhow::ensure!(
            (0.0..=100.0).contains(&axes.jitter_packets),
            "--jitter-packets {}: expected 0 to 100 packet times",
            axes.jitter_packets
        );
        if axes.aqms.iter().any(|a| a != "droptail") && !grid::aqm_supported() {
            eprintln!(
                "note: this braid-link does not know `aqm=` yet: the AQM points ({}) are left out",
                axes.aqms.iter().filter(|a| *a != "droptail").cloned().collect::<Vec<_>>().join(", ")
            );
            axes.aqms.retain(|a| a == "droptail");
            anyhow::ensure!(!axes.aqms.is_empty(), "--aqm: no queue discipline left to run (add droptail)");
        }
        Ok(axes)
    }
}

impl SimPriorityArgs {
    /// The one competing TCP of a scenario run (newreno by default).
    fn single_tcp(&self) -> anyhow::Result<CcAlgorithm> {
        match self.tcp.as_slice() {
            [] => Ok(CcAlgorithm::NewReno),
            [one] => Ok(*one),
            _ => anyhow::bail!("--tcp: one controller per scenario run (a list only with --grid)"),
        }
    }
}

/// The experiments the flags describe, in the order the reports print:
/// `sim-priority` parameters (the template's defaults fill the rest).
fn experiments(args: &SimPriorityArgs) -> anyhow::Result<Vec<Vec<(String, Value)>>> {
    args.grid.check_unused()?;
    if !(args.scale.is_finite() && args.scale > 0.0) {
        anyhow::bail!("--scale: expected a positive number, e.g. 0.2 or 1");
    }
    if let Some(bad) = args.n.iter().find(|n| !(n.is_finite() && **n >= 0.0 && **n <= 100.0)) {
        anyhow::bail!("--n: {bad} is out of range: expected numbers in [0, 100], e.g. 1,2,3,4");
    }
    let scenario = args.scenario.clone().context("--scenario: expected a scenario name, or --grid")?;
    if !SCENARIOS.contains(&scenario.as_str()) {
        let e = ScenarioError::UnknownScenario(scenario.clone());
        anyhow::bail!("--scenario: {e}");
    }
    if let Some(bad) = args.n.iter().find(|n| **n == 0.0 && scenario == "multcp") {
        anyhow::bail!("--n: {bad} is out of range for multcp: expected numbers in (0, 100], e.g. 1,2,3,4 (p = 0 against TCP is polite)");
    }
    let tcp = args.single_tcp()?;
    let text = |name: &str, v: Value| (name.to_string(), v);
    let mut base = vec![
        text("scenario", Value::Enum(scenario.clone())),
        text("scale", Value::Float(args.scale)),
        text("tcp", Value::Enum(tcp.as_str().to_string())),
        text("params", Value::String(controller_params_text(&args.params))),
    ];
    if let Some(link) = &args.link {
        base.push(text("link", Value::Link(link.to_string())));
    }
    let with = |extra: Vec<(String, Value)>| {
        let mut v = base.clone();
        v.extend(extra);
        v
    };
    Ok(match scenario.as_str() {
        "versus" | "pair" => args.n.iter().map(|&n| with(vec![text("n", Value::Float(n))])).collect(),
        "latecomer" => ["multiplicative", "additive"]
            .iter()
            .map(|d| with(vec![text("decrease", Value::Enum(d.to_string()))]))
            .collect(),
        "multcp" => [false, true]
            .iter()
            .flat_map(|&pair| args.n.iter().map(move |&n| (n, pair)))
            .map(|(n, pair)| with(vec![text("n", Value::Float(n)), text("multcp_pair", Value::Bool(pair))]))
            .collect(),
        _ => vec![base],
    })
}

/// `--param` items as the template's `params` text, in order.
fn controller_params_text(params: &[(String, f64)]) -> String {
    params.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join(",")
}

pub async fn run(args: SimPriorityArgs) -> anyhow::Result<Outcome> {
    if args.grid.grid {
        return run_grid(args).await;
    }
    let experiments = experiments(&args)?;
    // The p = 0 controller's target, for the delay check.
    let target_ms = ledbat_target_ms(&args.params);
    let seed = args.seed;
    // Simulations are CPU-bound: keep them off the async workers.
    let reports = tokio::task::spawn_blocking(move || -> anyhow::Result<Vec<ScenarioReport>> {
        // Every run of the scenario with the one seed, as before the lab.
        let options = OneOffOptions { seed, timeout: Some(NO_WALL_LIMIT) };
        let mut reports = Vec::new();
        for values in experiments {
            let results = run_experiments(std::sync::Arc::new(SimPriority), vec![values], &options)?;
            let result = results.into_iter().next().context("the simulation ran no experiment")?;
            if let Some(e) = &result.error {
                anyhow::bail!("simulation failed: {e}");
            }
            let report = result.artifact("report").cloned().context("the simulation recorded no report")?;
            reports.push(serde_json::from_value(report).context("the simulation's report")?);
        }
        Ok(reports)
    })
    .await
    .context("simulation task")??;
    if args.json {
        emit(&serde_json::to_string(&reports)?);
    } else {
        let mut text: Vec<String> = reports.iter().map(render).collect();
        text.push(render_checks(&priority_sim::checks(&reports, target_ms)));
        emit(&text.join("\n\n"));
    }
    Ok(Outcome::Success)
}

/// `--grid`: the grid in the simulator, every experiment without a wall
/// clock limit (virtual time: a run ends when its simulation does).
async fn run_grid(args: SimPriorityArgs) -> anyhow::Result<Outcome> {
    let axes = args.grid.axes(&args.tcp, priority_sim::DEFAULT_MAX_PHASE)?;
    let extra = [("params", Value::String(controller_params_text(&args.params)))];
    let study = axes.study("sim-priority-grid", Arc::new(SimPriority), &extra, args.seed)?;
    let jobs = args.grid.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let show_progress = !args.json;
    let results = tokio::task::spawn_blocking(move || grid::run_study(&study, jobs, Some(NO_WALL_LIMIT), show_progress))
        .await
        .context("simulation task")??;
    let rows = grid::rows(&results)?;
    emit_grid(&rows, args.json)
}

/// Print the grid's rows (a table and a summary, or one JSON array) and
/// turn them into the exit status: 3 if any check failed.
pub(super) fn emit_grid(rows: &[GridRow], json: bool) -> anyhow::Result<Outcome> {
    if json {
        emit(&serde_json::to_string(rows)?);
    } else {
        emit(&render_grid(rows));
    }
    Ok(Outcome::from_ok(rows.iter().all(|r| r.pass)))
}

/// The grid as a table: one row per check of each point, then a summary.
pub(super) fn render_grid(rows: &[GridRow]) -> String {
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                format!("{}/{}/{}/{}", r.rtt, r.rate, r.queue, r.aqm),
                r.tcp.clone(),
                format!("{}", r.p),
                r.check.clone(),
                r.value.map_or_else(|| "-".into(), |v| format!("{v:.3}")),
                r.want.clone(),
                match (r.epochs, r.capped) {
                    (Some(e), Some(true)) => format!("{e:.1} (capped)"),
                    (Some(e), _) => format!("{e:.1}"),
                    _ => "-".into(),
                },
                if r.pass { "pass".into() } else { format!("FAIL{}", r.error.as_ref().map_or(String::new(), |e| format!(": {e}"))) },
            ]
        })
        .collect();
    let point = |r: &GridRow| (r.rtt.clone(), r.rate.clone(), r.queue.clone(), r.aqm.clone(), r.tcp.clone(), r.p.to_bits());
    let mut points: Vec<_> = rows.iter().map(point).collect();
    points.dedup();
    let mut failed: Vec<_> = rows.iter().filter(|r| !r.pass).map(point).collect();
    failed.dedup();
    let mut capped: Vec<_> = rows.iter().filter(|r| r.capped == Some(true)).map(point).collect();
    capped.dedup();
    let misses = rows.iter().filter(|r| !r.pass).count();
    format!(
        "priority grid (issue 25)\n{}\n\n{} points, {} checks: {} failed at {} points{}; {} points measured fewer epochs than asked (capped)",
        table::render(&["rtt/rate/queue/aqm", "tcp", "p", "check", "value", "want", "epochs", ""], &cells),
        points.len(),
        rows.len(),
        misses,
        failed.len(),
        if misses > 0 { " (exit status 3)" } else { "" },
        capped.len(),
    )
}

/// `--param NAME=VALUE`.
pub(super) fn parse_param(s: &str) -> Result<(String, f64), String> {
    let expected = "expected NAME=VALUE with a number, e.g. delay_beta=1 or target_ms=60";
    let (name, value) = s.split_once('=').ok_or_else(|| format!("invalid parameter `{s}`: {expected}"))?;
    let value: f64 = value.trim().parse().map_err(|_| format!("invalid parameter `{s}`: {expected}"))?;
    if name.trim().is_empty() || !value.is_finite() {
        return Err(format!("invalid parameter `{s}`: {expected}"));
    }
    Ok((name.trim().to_string(), value))
}

/// The acceptance checks of issue 5 as a table.
pub(super) fn render_checks(checks: &[Check]) -> String {
    let rows: Vec<Vec<String>> = checks
        .iter()
        .map(|c| {
            vec![
                c.name.clone(),
                c.value.map_or_else(
                    || "-".to_string(),
                    |v| {
                        // Loss rates are small: keep their digits.
                        if v != 0.0 && v.abs() < 0.01 {
                            format!("{v:.2e}")
                        } else {
                            format!("{v:.3}")
                        }
                    },
                ),
                c.want.clone(),
                if c.pass { "pass" } else { "FAIL" }.to_string(),
            ]
        })
        .collect();
    format!("acceptance (issue 5)\n{}", table::render(&["check", "value", "want", ""], &rows))
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
}

/// One table row per (phase, flow), then the phase's totals.
pub(super) fn render(r: &ScenarioReport) -> String {
    let mut rows = Vec::new();
    for phase in &r.phases {
        for f in &phase.flows {
            rows.push(vec![
                phase.name.clone(),
                f.label.clone(),
                opt(f.priority, 0),
                format!("{:.2}", f.mbps),
                opt(f.share_of_capacity, 3),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
        rows.push(vec![
            phase.name.clone(),
            "(all)".to_string(),
            String::new(),
            String::new(),
            opt(phase.utilization, 3),
            opt(phase.jain, 3),
            format!("{} / {}", opt(phase.queuing_delay_p50_ms, 1), opt(phase.queuing_delay_p99_ms, 1)),
            format!("{:.4}", phase.loss),
        ]);
    }
    let mut out = format!("scenario {} over {} ({:.0} s)\n", r.scenario, r.link, r.duration_secs);
    out.push_str(&table::render(
        &["phase", "flow", "p", "Mbit/s", "share", "jain", "qdelay p50/p99 ms", "loss"],
        &rows,
    ));
    for s in &r.switches {
        out.push_str(&format!("\nswitch: {s:?}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use braid_lab::harness::priority_sim::ScenarioOptions;
    use braid_lab::param::Params;
    use braid_lab::template::Template;

    fn args(flags: &[&str]) -> SimPriorityArgs {
        crate::cli::parse_flags(flags)
    }

    /// The harness configs the experiments of `flags` run.
    fn configs(flags: &[&str]) -> Vec<priority_sim::ScenarioConfig> {
        let a = args(flags);
        let decls = SimPriority.params();
        experiments(&a)
            .unwrap()
            .into_iter()
            .map(|values| {
                let mut p = Params::default();
                for d in &decls {
                    p.insert(&d.name, d.default.clone());
                }
                for (name, v) in values {
                    let d = decls.iter().find(|d| d.name == name).unwrap();
                    assert_eq!(d.ty.parse_text(&v.to_text()).unwrap(), v, "{name}");
                    p.insert(&name, v);
                }
                SimPriority::config(&p, a.seed).unwrap()
            })
            .collect()
    }

    #[test]
    fn each_scenario_runs_what_it_ran_before_the_lab() {
        let cases: &[&[&str]] = &[
            &["--scenario", "polite"],
            &["--scenario", "latecomer", "--scale", "0.1", "--seed", "4"],
            &["--scenario", "multcp", "--n", "1,2.5", "--tcp", "cubic"],
            &["--scenario", "switch", "--param", "variant=1", "--param", "target_ms=70"],
            &["--scenario", "five", "--link", "rtt=30ms,rate=8mbit,queue=100kb"],
            &["--scenario", "versus", "--n", "0,2", "--link", "rtt=30ms,rate=8mbit,queue=1bdp"],
            &["--scenario", "pair", "--n", "0,3", "--tcp", "cubic"],
        ];
        for flags in cases {
            let a = args(flags);
            let opts = ScenarioOptions {
                link: a.link.clone(),
                scale: a.scale,
                tcp: a.single_tcp().unwrap(),
                ns: a.n.clone(),
                dtl_params: a.params.clone(),
                seed: a.seed,
                warmup: None,
            };
            let before = priority_sim::scenarios(a.scenario.as_deref().unwrap(), &opts).unwrap();
            assert_eq!(configs(flags), before, "{flags:?}");
        }
    }

    #[test]
    fn bad_flags_are_refused_before_anything_runs() {
        let unknown = experiments(&args(&["--scenario", "nope"])).unwrap_err().to_string();
        assert!(unknown.contains("expected one of polite, latecomer, multcp, switch, five, versus, pair"), "{unknown}");
        assert!(experiments(&args(&["--scenario", "switch", "--scale", "0"]))
            .unwrap_err()
            .to_string()
            .contains("--scale"));
        assert!(experiments(&args(&["--scenario", "multcp", "--n", "0"])).unwrap_err().to_string().contains("--n"));
        assert!(experiments(&args(&["--scenario", "switch", "--tcp", "cubic,newreno"]))
            .unwrap_err()
            .to_string()
            .contains("only with --grid"));
        assert_eq!(controller_params_text(&[("a".into(), 1.0), ("b".into(), 0.25)]), "a=1,b=0.25");
    }

    #[test]
    fn grid_flags_become_the_axes_over_the_defaults() {
        let a = args(&[
            "--grid", "--rtt", "10ms,50ms", "--rate", "5mbit", "--queue", "0.25bdp,4bdp", "--aqm", "droptail",
            "--tcp", "cubic", "--p", "0,2", "--epochs", "2", "--max-phase", "30",
        ]);
        let axes = a.grid.axes(&a.tcp, priority_sim::DEFAULT_MAX_PHASE).unwrap();
        assert_eq!(axes.rtts, [Duration::from_millis(10), Duration::from_millis(50)]);
        assert_eq!(axes.rates, [Rate::from_mbit(5)]);
        assert_eq!(axes.queues_bdp, [0.25, 4.0]);
        assert_eq!((axes.tcps.as_slice(), axes.ps.as_slice()), (&["cubic".to_string()][..], &[0.0, 2.0][..]));
        assert_eq!((axes.epochs, axes.max_phase), (2.0, Duration::from_secs(30)));
        assert_eq!(axes.points(), 8);
        let d = args(&["--grid"]);
        let axes = d.grid.axes(&d.tcp, priority_sim::DEFAULT_MAX_PHASE).unwrap();
        assert_eq!(axes.tcps, ["cubic", "newreno"]);
        assert_eq!(axes.without_aqm().points(), 270, "the issue's drop-tail grid");
        let bad = args(&["--grid", "--max-phase", "5"]);
        assert!(bad.grid.axes(&bad.tcp, priority_sim::DEFAULT_MAX_PHASE).unwrap_err().to_string().contains("--max-phase"));
        use clap::Parser;
        #[derive(clap::Parser, Debug)]
        struct Cli {
            #[command(flatten)]
            a: SimPriorityArgs,
        }
        for bad in [&["x", "--grid", "--scenario", "polite"][..], &["x"]] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
        let e = experiments(&args(&["--rtt", "10ms", "--scenario", "polite"])).unwrap_err().to_string();
        assert!(e.contains("--rtt is a grid axis"), "{e}");
        assert!(Cli::try_parse_from(["x", "--grid", "--queue", "64kb"]).unwrap_err().to_string().contains("BDPs"));
    }

    #[test]
    fn the_grid_table_counts_points_and_failures() {
        let row = |p: f64, check: &str, pass: bool, capped: bool| GridRow {
            rtt: "10ms".into(),
            rate: "5mbit".into(),
            queue: "1bdp".into(),
            aqm: "droptail".into(),
            tcp: "cubic".into(),
            p,
            scenario: "x".into(),
            check: check.into(),
            value: Some(0.5),
            want: ">= 0.9".into(),
            pass,
            epochs: Some(2.0),
            capped: Some(capped),
            error: None,
        };
        let rows = [row(0.0, "a", true, false), row(0.0, "b", false, false), row(1.0, "c", false, true)];
        let text = render_grid(&rows);
        assert!(text.contains("2 points, 3 checks: 2 failed at 2 points (exit status 3); 1 points measured"), "{text}");
        assert!(text.contains("2.0 (capped)") && text.contains("FAIL"), "{text}");
        assert_eq!(emit_grid(&rows[..1], true).unwrap(), Outcome::Success);
        assert_eq!(emit_grid(&rows, true).unwrap(), Outcome::CheckFailed);
    }
}
