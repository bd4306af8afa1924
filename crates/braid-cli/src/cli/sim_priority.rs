//! `braid sim priority --scenario NAME`: DTL's priority scenarios (polite,
//! latecomer, multcp, switch, five) on the deterministic simulator, with
//! per-phase, per-flow throughput, fairness, queuing delay and loss.
//!
//! A thin command over the lab's `sim-priority` template: a scenario name
//! becomes one experiment per run of the scenario (`latecomer`: DTL's
//! multiplicative decrease, then RFC 6817's additive one; `multcp`: one
//! MulTCP(N) flow against TCP for each N, then two MulTCP(N) flows for each
//! N), all with the same seed, as before the lab. The reports the template
//! records as its `report` artifacts are printed with issue 5's checks.

use anyhow::Context;
use braid::{CcAlgorithm, LinkSpec};
use braid_lab::harness::priority_sim::{self, Check, ScenarioError, ScenarioReport};
use braid_lab::oneoff::{run_experiments, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::template::builtin::sim_priority::{ledbat_target_ms, SimPriority, SCENARIOS};
use clap::Args;

use super::sim::NO_WALL_LIMIT;
use super::{emit, parse_cc, parse_link, table, Outcome};

#[derive(Debug, Args)]
pub struct SimPriorityArgs {
    /// polite, latecomer, multcp, switch or five.
    #[arg(long, value_name = "NAME")]
    scenario: String,
    /// The bottleneck path (default: the paper's for the scenario).
    #[arg(long, value_name = "SPEC", value_parser = parse_link)]
    link: Option<LinkSpec>,
    /// Multiply every duration of the scenario (1 = the paper's timings).
    #[arg(long, value_name = "X", default_value_t = 1.0)]
    scale: f64,
    /// Controller of the competing "TCP" flows: newreno or cubic.
    #[arg(long, value_name = "ALGO", default_value = "newreno", value_parser = parse_cc)]
    tcp: CcAlgorithm,
    /// N values of the multcp scenario, comma-separated.
    #[arg(long, value_name = "N,...", value_delimiter = ',', default_values_t = [1.0, 2.0, 3.0, 4.0])]
    n: Vec<f64>,
    /// Extra parameter of every DTL flow's controller, NAME=VALUE
    /// (repeatable), e.g. `delay_beta=1` for RFC 6817's additive decrease,
    /// `variant=1` for LEDBAT++, `target_ms=60`.
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = parse_param)]
    params: Vec<(String, f64)>,
    /// Seed: the same seed gives the same run (and trace hash).
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Print the reports as JSON (one array).
    #[arg(long)]
    json: bool,
}

/// The experiments the flags describe, in the order the reports print:
/// `sim-priority` parameters (the template's defaults fill the rest).
fn experiments(args: &SimPriorityArgs) -> anyhow::Result<Vec<Vec<(String, Value)>>> {
    if !(args.scale.is_finite() && args.scale > 0.0) {
        anyhow::bail!("--scale: expected a positive number, e.g. 0.2 or 1");
    }
    if let Some(bad) = args.n.iter().find(|n| !(n.is_finite() && **n > 0.0 && **n <= 100.0)) {
        anyhow::bail!("--n: {bad} is out of range: expected numbers in (0, 100], e.g. 1,2,3,4");
    }
    if !SCENARIOS.contains(&args.scenario.as_str()) {
        let e = ScenarioError::UnknownScenario(args.scenario.clone());
        anyhow::bail!("--scenario: {e} (expected polite, latecomer, multcp, switch or five)");
    }
    let text = |name: &str, v: Value| (name.to_string(), v);
    let mut base = vec![
        text("scenario", Value::Enum(args.scenario.clone())),
        text("scale", Value::Float(args.scale)),
        text("tcp", Value::Enum(args.tcp.as_str().to_string())),
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
    Ok(match args.scenario.as_str() {
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
        ];
        for flags in cases {
            let a = args(flags);
            let opts = ScenarioOptions {
                link: a.link.clone(),
                scale: a.scale,
                tcp: a.tcp,
                ns: a.n.clone(),
                dtl_params: a.params.clone(),
                seed: a.seed,
            };
            let before = priority_sim::scenarios(&a.scenario, &opts).unwrap();
            assert_eq!(configs(flags), before, "{flags:?}");
        }
    }

    #[test]
    fn bad_flags_are_refused_before_anything_runs() {
        let unknown = experiments(&args(&["--scenario", "nope"])).unwrap_err().to_string();
        assert!(unknown.contains("expected polite, latecomer, multcp, switch or five"), "{unknown}");
        assert!(experiments(&args(&["--scenario", "switch", "--scale", "0"]))
            .unwrap_err()
            .to_string()
            .contains("--scale"));
        assert!(experiments(&args(&["--scenario", "multcp", "--n", "0"])).unwrap_err().to_string().contains("--n"));
        assert_eq!(controller_params_text(&[("a".into(), 1.0), ("b".into(), 0.25)]), "a=1,b=0.25");
    }
}
