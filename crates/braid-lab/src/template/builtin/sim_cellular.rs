//! `sim-cellular`: one bulk transfer beside a ping flow on a variable-rate
//! (cellular) link, in virtual time ([`crate::harness::sim_cellular`]):
//! issue 25 item 5's throughput-and-delay measurement.
//!
//! The path is built from the environment: `rtt` (base RTT), `buffer` (the
//! drop-tail queue in front of the sender's bottleneck), `trace` (a
//! Mahimahi trace as the sender → receiver rate; empty for none) and
//! `link` (more link-spec items as text, e.g. `rate=20mbit` when there
//! is no trace; text, not a parsed spec, so that it adds to the others). The transfer runs for `duration` of virtual time.
//!
//! Records (scalars): `throughput_mbps`, `bytes`, `ping_rtt_median_ms`,
//! `ping_rtt_p95_ms`, `added_delay_median_ms`, `added_delay_p95_ms` (ping
//! RTT minus the base RTT), `packets_lost`, `congestion_events`,
//! `rto_count`, `queue_drops` (the bottleneck's drops), `pings_answered`,
//! `virtual_secs`, `flow0_mbps` (and with a `competitor`: `flow1_mbps`,
//! `jain`, `share` = flow 0's share of both); series `throughput_mbps` (per 100 ms); artifact
//! `report`.
//!
//! ```
//! use braid_lab::oneoff::{run_experiments, OneOffOptions};
//! use braid_lab::param::Value;
//! use braid_lab::template::find_builtin;
//! use std::time::Duration;
//! let t = find_builtin("sim-cellular").unwrap();
//! let runs = run_experiments(
//!     t,
//!     vec![vec![
//!         ("link".to_string(), Value::String("rate=10mbit".into())),
//!         ("duration".to_string(), Value::Duration(Duration::from_secs(2))),
//!         ("cc".to_string(), Value::Enum("tq".into())),
//!     ]],
//!     &OneOffOptions::default(),
//! )
//! .unwrap();
//! assert!(runs[0].metric("throughput_mbps").unwrap() > 5.0);
//! ```

use std::time::Duration;

use braid_link::LinkSpec;
use braid_proto::CcAlgorithm;

use crate::harness::sim_cellular::{self, SimCellularConfig, SimCellularError, SimCellularReport};
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::{Context, Template, TemplateError};

use super::sim_transfer::{cc_param, cc_value};

/// The `sim-cellular` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimCellular;

/// Virtual seconds → wall seconds per simulated packet (release build),
/// for `expected_duration` only.
const WALL_SECS_PER_PACKET: f64 = 4e-6;

impl SimCellular {
    /// The link spec an experiment's environment describes.
    pub fn link(params: &Params) -> Result<LinkSpec, TemplateError> {
        let rtt = params.duration("rtt")?;
        let buffer = params.size("buffer")?;
        let trace = params.str("trace")?.trim();
        let extra = params.str("link")?.trim();
        let mut spec = format!("rtt={}us,a2b:queue={buffer}b", rtt.as_micros());
        if !trace.is_empty() {
            spec.push_str(&format!(",a2b:trace={trace}"));
        }
        if !extra.is_empty() {
            spec.push(',');
            spec.push_str(extra);
        }
        spec.parse().map_err(|e| TemplateError::Invalid(format!("rtt/buffer/trace/link make `{spec}`: {e}")))
    }

    /// The harness config of an experiment's parameters and seed.
    pub fn config(params: &Params, seed: u64) -> Result<SimCellularConfig, TemplateError> {
        Ok(SimCellularConfig {
            link: SimCellular::link(params)?,
            cc: cc_param(params, "cc")?,
            competitor: match params.str("competitor")? {
                "none" => None,
                _ => Some(cc_param(params, "competitor")?),
            },
            duration: params.duration("duration")?,
            ping_interval: params.duration("ping_interval")?,
            seed,
            wall_deadline: None,
        })
    }
}

impl Template for SimCellular {
    fn name(&self) -> &str {
        "sim-cellular"
    }

    fn description(&self) -> &str {
        "bulk transfer beside pings on a variable-rate (cellular trace) link, in virtual time: throughput and added delay"
    }

    fn params(&self) -> Vec<ParamDecl> {
        let d = SimCellularConfig::default();
        let names: Vec<&str> = CcAlgorithm::ALL.iter().map(|c| c.as_str()).collect();
        let competitors: Vec<&str> = std::iter::once("none").chain(names.iter().copied()).collect();
        vec![
            ParamDecl::config("cc", ParamType::one_of(&names), cc_value(CcAlgorithm::default()))
                .doc("congestion controller of the transfer"),
            ParamDecl::config("competitor", ParamType::one_of(&competitors), Value::Enum("none".into()))
                .doc("a second transfer beside the first with this controller (none: alone)"),
            ParamDecl::config("duration", ParamType::Duration, Value::Duration(d.duration))
                .doc("virtual time the transfer (and the pings) run"),
            ParamDecl::config("ping_interval", ParamType::Duration, Value::Duration(d.ping_interval))
                .doc("time between two pings"),
            ParamDecl::env("rtt", ParamType::Duration, Value::Duration(Duration::from_millis(40)))
                .doc("base (propagation) round-trip time"),
            ParamDecl::env("buffer", ParamType::Size, Value::Size(1_000_000))
                .doc("drop-tail queue in front of the sender's bottleneck"),
            // A trace path in a study is relative to the study file; the
            // default, empty, means no trace.
            ParamDecl::env("trace", ParamType::Trace, Value::Trace(std::path::PathBuf::new()))
                .doc("Mahimahi trace file as the sender → receiver rate (default none: give `rate` in `link`)"),
            ParamDecl::env("link", ParamType::String, Value::String("rate=20mbit".into()))
                .doc("further link-spec items (e.g. rate=20mbit without a trace, loss=1%)"),
        ]
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let secs = params.duration("duration").map_or(60.0, |d| d.as_secs_f64());
        // Cellular traces run at a few to a few tens of Mbit/s; assume 20.
        let packets = secs * 20e6 / 8.0 / 1200.0 * 1.5;
        Duration::from_secs_f64((packets * WALL_SECS_PER_PACKET).max(0.01))
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let mut cfg = SimCellular::config(ctx.params, ctx.seed)?;
        cfg.wall_deadline = Some(ctx.deadline);
        let total = cfg.duration.as_secs_f64();
        let mut last = (0.0f64, 0u64);
        let report = sim_cellular::run_with_progress(&cfg, |p| {
            let (t0, b0) = last;
            if p.virtual_secs > t0 {
                let mbps = p.bytes_delivered.saturating_sub(b0) as f64 * 8.0 / (p.virtual_secs - t0) / 1e6;
                ctx.series("throughput_mbps", p.virtual_secs, mbps);
            }
            last = (p.virtual_secs, p.bytes_delivered);
            ctx.progress(p.virtual_secs / total);
        })
        .map_err(|e| match e {
            SimCellularError::InvalidConfig { .. } => TemplateError::Invalid(e.to_string()),
            other => TemplateError::failed(other),
        })?;
        if report.virtual_secs + 1e-9 < total {
            return Err(TemplateError::Timeout(format!(
                "simulated {:.3} of {total:.3} s of virtual time",
                report.virtual_secs
            )));
        }
        record(ctx, &report)
    }
}

fn record(ctx: &mut Context<'_>, r: &SimCellularReport) -> Result<(), TemplateError> {
    ctx.record("throughput_mbps", r.throughput_mbps);
    ctx.record("bytes", r.bytes as f64);
    ctx.record("ping_rtt_median_ms", r.ping_rtt_median_ms);
    ctx.record("ping_rtt_p95_ms", r.ping_rtt_p95_ms);
    ctx.record("added_delay_median_ms", r.added_delay_median_ms);
    ctx.record("added_delay_p95_ms", r.added_delay_p95_ms);
    ctx.record("packets_lost", r.packets_lost as f64);
    ctx.record("congestion_events", r.congestion_events as f64);
    ctx.record("rto_count", r.rto_count as f64);
    ctx.record("queue_drops", r.forward_link.dropped_queue as f64);
    ctx.record("pings_answered", r.pings_answered as f64);
    ctx.record("virtual_secs", r.virtual_secs);
    for (i, mbps) in r.flow_mbps.iter().enumerate() {
        ctx.record(&format!("flow{i}_mbps"), *mbps);
    }
    if let Some(j) = r.jain {
        ctx.record("jain", j);
        let sum: f64 = r.flow_mbps.iter().sum();
        if sum > 0.0 {
            ctx.record("share", r.flow_mbps[0] / sum);
        }
    }
    let json = serde_json::to_value(r).map_err(|e| TemplateError::failed(format!("report: {e}")))?;
    ctx.artifact("report", json);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Params {
        crate::template::builtin::test_support::defaults(&SimCellular)
    }

    #[test]
    fn every_default_parses_with_its_type() {
        // `trace`'s default (no trace) is not an existing file.
        crate::template::builtin::test_support::assert_declarations_valid(&SimCellular, &["trace"]);
    }

    #[test]
    fn every_controller_is_accepted() {
        for cc in CcAlgorithm::ALL {
            let mut p = defaults();
            p.insert("cc", cc_value(cc));
            assert_eq!(SimCellular::config(&p, 1).unwrap().cc, cc);
        }
    }

    #[test]
    fn the_link_is_built_from_rtt_buffer_and_trace() {
        let mut p = defaults();
        p.insert("rtt", Value::Duration(Duration::from_millis(80)));
        let link = SimCellular::link(&p).unwrap();
        assert_eq!(link.rtt(), Duration::from_millis(80));
        let trace = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/traces/ATT-LTE-driving-2016.down");
        if std::path::Path::new(trace).is_file() {
            p.insert("trace", Value::Trace(trace.into()));
            p.insert("link", Value::String(String::new()));
            assert!(SimCellular::link(&p).unwrap().to_string().contains("trace="));
        }
    }

    #[test]
    fn a_trace_and_a_rate_together_are_invalid_and_named() {
        let mut p = defaults();
        p.insert("trace", Value::Trace("/nonexistent/trace.down".into()));
        let e = SimCellular::link(&p).unwrap_err();
        assert!(matches!(e, TemplateError::Invalid(_)) && e.to_string().contains("trace"), "{e}");
    }
}
