//! `braid sim transfer`: a bulk transfer of one or more flows over a
//! simulated link, in virtual time, reproducible from its seed.

use std::time::Duration;

use anyhow::Context;
use braid_lab::harness::sim_transfer::{self, SimTransferConfig};
use braid::size::ByteSize;
use braid::{CcAlgorithm, LinkSpec};
use clap::Args;
use serde_json::Value;

use super::{emit, parse_cc, parse_link, parse_secs, parse_size, progress, table, Outcome};

#[derive(Debug, Args)]
pub struct SimTransferArgs {
    /// The simulated path, e.g. rtt=20ms,rate=100mbit,loss=1% (keys: delay, rtt, jitter, rate, queue, loss, ge, reorder, reorder_delay, dup, mtu, trace=FILE for a Mahimahi rate trace). Items prefixed a2b: or b2a: apply to one direction only (a2b:rate=10mbit,b2a:rate=1mbit); `SPEC;at=10s:SPEC2` changes the link over time.
    #[arg(long, value_name = "SPEC", value_parser = parse_link)]
    link: LinkSpec,
    /// Bytes each flow transfers (e.g. 10MB, 1GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    bytes: ByteSize,
    /// Congestion control: newreno or cubic.
    #[arg(long, value_name = "ALGO", default_value = "cubic", value_parser = parse_cc)]
    cc: CcAlgorithm,
    /// Number of concurrent flows sharing the link.
    #[arg(long, value_name = "K", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    flows: u16,
    /// Seed of every random choice: the same seed gives the same run (and trace hash).
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Application message size.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    message_size: Option<ByteSize>,
    /// Stop after this much virtual time, in seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    time_limit: Option<Duration>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: SimTransferArgs) -> anyhow::Result<Outcome> {
    let mut cfg = SimTransferConfig {
        link: args.link,
        bytes: args.bytes.0,
        cc: args.cc,
        flows: usize::from(args.flows),
        seed: args.seed,
        ..SimTransferConfig::default()
    };
    if let Some(m) = args.message_size {
        cfg.message_size = usize::try_from(m.0)
            .ok()
            .filter(|&m| m >= 1)
            .context("--message-size: expected at least 1 byte")?;
    }
    if let Some(t) = args.time_limit {
        cfg.time_limit = t;
    }
    let bar = progress::bytes_bar(cfg.bytes.saturating_mul(cfg.flows as u64), "simulating", args.json);
    let bar_sim = bar.clone();
    // The simulation is CPU-bound: keep it off the async workers.
    let report = tokio::task::spawn_blocking(move || {
        sim_transfer::run_with_progress(&cfg, |p| {
            bar_sim.set_position(p.bytes_delivered);
            bar_sim.set_message(format!("{:.1} s virtual", p.virtual_secs));
        })
    })
    .await
    .context("simulation task")?
    .context("simulation failed")?;
    bar.finish_and_clear();
    let value = serde_json::to_value(&report)?;
    let ok = value.get("ok").and_then(Value::as_bool).unwrap_or(false);
    if args.json {
        emit(&value.to_string());
    } else {
        emit(&render(&value));
    }
    Ok(Outcome::from_ok(ok))
}

/// The report's scalar fields as a two-column table, then one row per flow.
fn render(report: &Value) -> String {
    let Some(fields) = report.as_object() else { return report.to_string() };
    let scalar = |v: &Value| match v {
        Value::Number(n) if n.is_f64() => format!("{:.4}", n.as_f64().unwrap_or(f64::NAN)),
        Value::String(s) => s.clone(),
        Value::Null => "-".to_string(),
        other => other.to_string(),
    };
    let rows: Vec<Vec<String>> = fields
        .iter()
        .filter(|(_, v)| !v.is_array() && !v.is_object())
        .map(|(k, v)| vec![k.clone(), scalar(v)])
        .collect();
    let mut out = table::render(&["metric", "value"], &rows);
    if let Some(flows) = fields.get("flows").and_then(Value::as_array) {
        let columns: Vec<String> = flows
            .first()
            .and_then(Value::as_object)
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default();
        if !columns.is_empty() {
            let mut header = vec!["flow".to_string()];
            header.extend(columns.iter().cloned());
            let rows: Vec<Vec<String>> = flows
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let mut row = vec![i.to_string()];
                    row.extend(columns.iter().map(|c| f.get(c).map(scalar).unwrap_or_default()));
                    row
                })
                .collect();
            let header: Vec<&str> = header.iter().map(String::as_str).collect();
            out.push_str("\n\n");
            out.push_str(&table::render(&header, &rows));
        }
    }
    out
}
