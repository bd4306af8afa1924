//! `braid sim transfer`: a bulk transfer of one or more flows over a
//! simulated link, in virtual time, reproducible from its seed.
//!
//! A thin command over the lab's `sim-transfer` template: the flags become
//! one experiment's parameters, the template runs it, and the report it
//! records as its `report` artifact is printed as a table or as JSON.

use std::time::Duration;

use anyhow::Context;
use braid::size::ByteSize;
use braid::{CcAlgorithm, LinkSpec};
use braid_lab::oneoff::{run_experiments, OneOffOptions};
use braid_lab::param::Value;
use braid_lab::template::builtin::sim_transfer::SimTransfer;
use clap::Args;
use serde_json::Value as Json;

use super::{emit, parse_cc, parse_link, parse_secs, parse_size, table, Outcome};

/// The one-off runs of `braid sim` have no wall-clock limit of their own
/// (the virtual `--time-limit` bounds them), as before the lab.
pub(super) const NO_WALL_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Args)]
pub struct SimTransferArgs {
    /// The simulated path, e.g. rtt=20ms,rate=100mbit,loss=1% (keys: delay, rtt, jitter, rate, queue, loss, ge, reorder, reorder_delay, dup, mtu, trace=FILE for a Mahimahi rate trace). Items prefixed a2b: or b2a: apply to one direction only (a2b:rate=10mbit,b2a:rate=1mbit); `SPEC;at=10s:SPEC2` changes the link over time.
    #[arg(long, value_name = "SPEC", value_parser = parse_link)]
    link: LinkSpec,
    /// Bytes each flow transfers (e.g. 10MB, 1GiB).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    bytes: ByteSize,
    /// Congestion control: newreno, cubic, bbr, ledbat, ledbat++, multcp, priority or tq.
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

/// The experiment the flags describe: `sim-transfer` parameters (the
/// template's defaults fill the rest; the seed goes to the runner).
fn experiment(args: &SimTransferArgs) -> anyhow::Result<Vec<(String, Value)>> {
    let mut values = vec![
        ("link".to_string(), Value::Link(args.link.to_string())),
        ("bytes".to_string(), Value::Size(args.bytes.0)),
        ("cc".to_string(), Value::Enum(args.cc.as_str().to_string())),
        ("flows".to_string(), Value::Int(i64::from(args.flows))),
    ];
    if let Some(m) = args.message_size {
        anyhow::ensure!(m.0 >= 1, "--message-size: expected at least 1 byte");
        values.push(("message_size".to_string(), Value::Size(m.0)));
    }
    if let Some(t) = args.time_limit {
        values.push(("time_limit".to_string(), Value::Duration(t)));
    }
    Ok(values)
}

pub async fn run(args: SimTransferArgs) -> anyhow::Result<Outcome> {
    let values = experiment(&args)?;
    let options = OneOffOptions { seed: args.seed, timeout: Some(NO_WALL_LIMIT) };
    // The simulation is CPU-bound: keep it off the async workers.
    let results =
        tokio::task::spawn_blocking(move || run_experiments(std::sync::Arc::new(SimTransfer), vec![values], &options))
            .await
            .context("simulation task")??;
    let result = results.into_iter().next().context("the simulation ran no experiment")?;
    if let Some(e) = &result.error {
        anyhow::bail!("simulation failed: {e}");
    }
    let value = result.artifact("report").cloned().context("the simulation recorded no report")?;
    let ok = value.get("ok").and_then(Json::as_bool).unwrap_or(false);
    if args.json {
        emit(&value.to_string());
    } else {
        emit(&render(&value));
    }
    Ok(Outcome::from_ok(ok))
}

/// The report's scalar fields as a two-column table, then one row per flow.
fn render(report: &Json) -> String {
    let Some(fields) = report.as_object() else { return report.to_string() };
    let scalar = |v: &Json| match v {
        Json::Number(n) if n.is_f64() => format!("{:.4}", n.as_f64().unwrap_or(f64::NAN)),
        Json::String(s) => s.clone(),
        Json::Null => "-".to_string(),
        other => other.to_string(),
    };
    let rows: Vec<Vec<String>> = fields
        .iter()
        .filter(|(_, v)| !v.is_array() && !v.is_object())
        .map(|(k, v)| vec![k.clone(), scalar(v)])
        .collect();
    let mut out = table::render(&["metric", "value"], &rows);
    if let Some(flows) = fields.get("flows").and_then(Json::as_array) {
        let columns: Vec<String> =
            flows.first().and_then(Json::as_object).map(|o| o.keys().cloned().collect()).unwrap_or_default();
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

#[cfg(test)]
mod tests {
    use super::*;
    use braid_lab::harness::sim_transfer::{self, SimTransferConfig};
    use braid_lab::template::Template;

    fn args(flags: &[&str]) -> SimTransferArgs {
        crate::cli::parse_flags(flags)
    }

    #[test]
    fn flags_map_to_typed_parameters() {
        let a = args(&[
            "--link",
            "rtt=20ms,rate=50mbit",
            "--bytes",
            "2MB",
            "--flows",
            "3",
            "--cc",
            "newreno",
            "--time-limit",
            "2.5",
        ]);
        let values = experiment(&a).unwrap();
        let get = |k: &str| values.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("link"), Some(Value::Link("rtt=20ms,rate=50mbit".into())));
        assert_eq!(get("bytes"), Some(Value::Size(2_000_000)));
        assert_eq!(get("cc"), Some(Value::Enum("newreno".into())));
        assert_eq!(get("flows"), Some(Value::Int(3)));
        assert_eq!(get("time_limit"), Some(Value::Duration(Duration::from_millis(2500))));
        assert_eq!(get("message_size"), None, "the template's default, as before");
        // Every value is one the template's declared type accepts.
        let decls = SimTransfer.params();
        for (name, v) in &values {
            let d = decls.iter().find(|d| &d.name == name).unwrap();
            assert_eq!(&d.ty.parse_text(&v.to_text()).unwrap(), v, "{name}");
        }
        let zero = args(&["--link", "rtt=1ms", "--bytes", "1", "--message-size", "0"]);
        assert!(experiment(&zero).unwrap_err().to_string().contains("--message-size"));
    }

    #[test]
    fn the_report_is_the_harness_report() {
        let a = args(&["--link", "rtt=10ms,rate=20mbit,loss=1%", "--bytes", "300kB", "--flows", "2", "--seed", "7"]);
        let options = OneOffOptions { seed: a.seed, timeout: Some(NO_WALL_LIMIT) };
        let runs = run_experiments(std::sync::Arc::new(SimTransfer), vec![experiment(&a).unwrap()], &options).unwrap();
        let direct = sim_transfer::run(&SimTransferConfig {
            link: a.link.clone(),
            bytes: 300_000,
            flows: 2,
            seed: 7,
            ..SimTransferConfig::default()
        })
        .unwrap();
        assert_eq!(runs[0].artifact("report"), Some(&serde_json::to_value(&direct).unwrap()));
        assert_eq!(runs[0].metric("goodput_mbps"), Some(direct.goodput_mbps));
    }
}
