//! `braid sim priority --scenario NAME`: DTL's priority scenarios (polite,
//! latecomer, multcp, switch, five) on the deterministic simulator, with
//! per-phase, per-flow throughput, fairness, queuing delay and loss.

use anyhow::Context;
use braid::priority_sim::{self, ScenarioOptions, ScenarioReport};
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
    let opts = ScenarioOptions {
        link: args.link,
        scale: args.scale,
        tcp: args.tcp,
        ns: args.n,
        seed: args.seed,
        ..ScenarioOptions::default()
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
        let text: Vec<String> = reports.iter().map(render).collect();
        emit(&text.join("\n\n"));
    }
    Ok(Outcome::Success)
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{x:.digits$}"))
}

/// One table row per (phase, flow), then the phase's totals.
fn render(r: &ScenarioReport) -> String {
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
    let mut out = format!("scenario {} over {} ({:.0} s simulated)\n", r.scenario, r.link, r.duration_secs);
    out.push_str(&table::render(
        &["phase", "flow", "p", "Mbit/s", "share", "jain", "qdelay p50/p99 ms", "loss"],
        &rows,
    ));
    for s in &r.switches {
        out.push_str(&format!("\nswitch: {s:?}"));
    }
    out
}
