//! `braid sim priority --scenario NAME`: DTL's priority scenarios (polite,
//! latecomer, multcp, switch, five) on the deterministic simulator, with
//! per-phase, per-flow throughput, fairness, queuing delay and loss.

use anyhow::Context;
use braid_lab::harness::priority_sim::{self, Check, ScenarioOptions, ScenarioReport};
use braid::{CcAlgorithm, LinkSpec};
use clap::Args;

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

pub async fn run(args: SimPriorityArgs) -> anyhow::Result<Outcome> {
    if !(args.scale.is_finite() && args.scale > 0.0) {
        anyhow::bail!("--scale: expected a positive number, e.g. 0.2 or 1");
    }
    if let Some(bad) = args.n.iter().find(|n| !(n.is_finite() && **n > 0.0 && **n <= 100.0)) {
        anyhow::bail!("--n: {bad} is out of range: expected numbers in (0, 100], e.g. 1,2,3,4");
    }
    // The p = 0 controller's target, for the delay check: the last
    // `target_ms` given, else LEDBAT++'s or LEDBAT's default.
    let plus_plus = args.params.iter().rev().find(|(n, _)| n == "variant").is_some_and(|(_, v)| *v == 1.0);
    let target_ms = args
        .params
        .iter()
        .rev()
        .find(|(n, _)| n == "target_ms")
        .map_or(if plus_plus { 60.0 } else { 100.0 }, |(_, v)| *v);
    let opts = ScenarioOptions {
        link: args.link,
        scale: args.scale,
        tcp: args.tcp,
        ns: args.n,
        seed: args.seed,
        dtl_params: args.params,
    };
    let configs = priority_sim::scenarios(&args.scenario, &opts)
        .map_err(|e| anyhow::anyhow!("--scenario: {e} (expected polite, latecomer, multcp, switch or five)"))?;
    // Simulations are CPU-bound: keep them off the async workers.
    let reports = tokio::task::spawn_blocking(move || {
        configs.iter().map(priority_sim::run).collect::<Result<Vec<_>, _>>()
    })
    .await
    .context("simulation task")?
    .context("simulation failed")?;
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
                c.value.map_or_else(|| "-".to_string(), |v| {
                    // Loss rates are small: keep their digits.
                    if v != 0.0 && v.abs() < 0.01 { format!("{v:.2e}") } else { format!("{v:.3}") }
                }),
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
