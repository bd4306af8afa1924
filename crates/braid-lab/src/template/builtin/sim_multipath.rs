//! `sim-multipath`: request/response flows on one multipath connection
//! over two simulated paths, with one of the shipped ProgMP schedulers
//! ([`crate::harness::sim_multipath`]): the flow-completion-time workload
//! of `braid bench multipath` and of the thesis's redundancy study (seed
//! 001 §5.4.3), in virtual time.
//!
//! The client writes a `request_size` request, the server answers with
//! `flow_size` bytes, and `gap` after the whole response arrived the client
//! writes the next request, `flows` times; both ends schedule with
//! `scheduler`. The first request waits until both paths are open (the
//! path-1 RTT plus two path-2 RTTs, at least 300 ms): a warmed-up
//! connection, as in the thesis.
//!
//! The two paths are described by typed parameters so that a study can
//! cross them: path 1 has `rtt` and `rate_mbps`; path 2 has
//! `rtt × rtt_ratio` and `rate_mbps / rate_ratio`; both lose `loss_pct`
//! percent of the packets in each direction (`rate_mbps = 0`: no rate
//! limit). The queue is the simulator's default (one bandwidth-delay
//! product, at least 16 packets).
//!
//! Records:
//! - scalars `ok` (1 when every flow completed intact in time, else 0),
//!   `flows_completed`, `fct_p50_ms`, `fct_p90_ms`, `fct_p99_ms`,
//!   `fct_mean_ms`, `fct_max_ms` (completion time: request written to whole
//!   response read; nearest-rank quantiles), `delivered_bytes`
//!   (application bytes both ways), `wire_bytes` (IP bytes offered to the
//!   four links), `wire_over_delivered`, `goodput_mbps` (delivered bytes
//!   from the first request to the last response), `path2_wire_share_ratio`;
//! - series `fct_ms`: each flow's completion time at its request's
//!   virtual time;
//! - artifact `report`: a [`SimMultipathReport`].
//!
//! ```
//! use braid_lab::oneoff::{run_experiments, OneOffOptions};
//! use braid_lab::param::Value;
//! use braid_lab::template::find_builtin;
//! let t = find_builtin("sim-multipath").unwrap();
//! let runs = run_experiments(
//!     t,
//!     vec![vec![("scheduler".to_string(), Value::Enum("redundant".into())), ("flows".to_string(), Value::Int(20))]],
//!     &OneOffOptions::default(),
//! )
//! .unwrap();
//! assert_eq!(runs[0].metric("flows_completed"), Some(20.0));
//! assert!(runs[0].metric("wire_over_delivered").unwrap() > 1.5, "every packet twice");
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use braid_link::{LinkParams, LinkSpec, Probability, Rate};
use braid_progmp::{Program, BUILTINS};
use serde::{Deserialize, Serialize};

use crate::harness::sim_multipath::{self, Scenario, ScenarioError};
use crate::param::{ParamDecl, ParamType, Params, Value};
use crate::template::builtin::sim_transfer::{cc_decl, cc_param};
use crate::template::{Context, Template, TemplateError};

/// The `sim-multipath` template.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimMultipath;

/// Wall seconds per simulated packet (release build), for
/// `expected_duration` only.
const WALL_SECS_PER_PACKET: f64 = 6e-6;

/// What one experiment measured (the `report` artifact).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimMultipathReport {
    /// The scheduler.
    pub scheduler: String,
    /// The two paths' link specs.
    pub paths: [String; 2],
    /// Request size, bytes.
    pub request_bytes: u64,
    /// Response size, bytes.
    pub response_bytes: u64,
    /// Flows the experiment ran.
    pub flows: u32,
    /// Flows that completed.
    pub flows_completed: u32,
    /// Completion time of each completed flow, ms, in order.
    pub fct_ms: Vec<f64>,
    /// Median completion time, ms.
    pub fct_p50_ms: f64,
    /// 90th percentile, ms.
    pub fct_p90_ms: f64,
    /// 99th percentile, ms.
    pub fct_p99_ms: f64,
    /// Mean, ms.
    pub fct_mean_ms: f64,
    /// Longest, ms.
    pub fct_max_ms: f64,
    /// Application bytes delivered, both ways.
    pub delivered_bytes: u64,
    /// IP bytes offered to the links, both paths, both directions.
    pub wire_bytes: u64,
    /// `wire_bytes / delivered_bytes`.
    pub wire_over_delivered: f64,
    /// Delivered bytes from the first request to the last response, Mbit/s.
    pub goodput_mbps: f64,
    /// IP bytes offered per path (both directions), by path.
    pub wire_bytes_by_path: [u64; 2],
    /// Stream bytes the client sent per path (copies included).
    pub client_stream_bytes_by_path: [u64; 2],
    /// Packets the client declared lost.
    pub client_packets_lost: u64,
    /// Every flow completed intact.
    pub ok: bool,
    /// What went wrong, if anything.
    pub error: Option<String>,
}

fn invalid(e: impl std::fmt::Display) -> TemplateError {
    TemplateError::Invalid(e.to_string())
}

/// One path's link: `rtt`, `rate_mbps` (0: unlimited), `loss_pct` each way.
fn path_link(rtt: Duration, rate_mbps: f64, loss_pct: f64) -> Result<LinkSpec, TemplateError> {
    let mut p = LinkParams::default();
    p.delay = rtt / 2;
    if rate_mbps > 0.0 {
        let bps = (rate_mbps * 1e6).round();
        p.rate = Some(
            Rate::from_bits_per_sec(bps as u64)
                .ok_or_else(|| invalid(format!("a path rate of {rate_mbps} Mbit/s is out of range")))?,
        );
    }
    let billionths = (loss_pct / 100.0 * 1e9).round();
    p.loss = Probability::from_billionths(billionths as u32)
        .ok_or_else(|| invalid(format!("loss_pct: {loss_pct} is not a percentage")))?;
    LinkSpec::symmetric(p).map_err(invalid)
}

impl SimMultipath {
    /// The harness scenario of an experiment's parameters and seed.
    pub fn scenario(params: &Params, seed: u64) -> Result<Scenario, TemplateError> {
        let name = params.str("scheduler")?;
        let builtin =
            braid_progmp::builtin(name).ok_or_else(|| invalid(ScenarioError::UnknownScheduler(name.to_string())))?;
        let program =
            Program::compile(builtin.source).map_err(|e| TemplateError::failed(format!("scheduler {name}: {e}")))?;
        let rtt = params.duration("rtt")?;
        let rtt2 = rtt.mul_f64(params.float("rtt_ratio")?);
        let rate = params.float("rate_mbps")?;
        let loss = params.float("loss_pct")?;
        let links = [path_link(rtt, rate, loss)?, path_link(rtt2, rate / params.float("rate_ratio")?, loss)?];
        let mut s = Scenario::with_program(Arc::new(program), &["", ""]).map_err(invalid)?;
        for (path, link) in s.paths.iter_mut().zip(links) {
            path.link = link;
        }
        s.cc = cc_param(params, "cc")?;
        s.seed = seed;
        s.time_limit = params.duration("time_limit")?;
        let size = |name: &str| -> Result<usize, TemplateError> {
            let v = params.size(name)?;
            usize::try_from(v)
                .ok()
                .filter(|&v| (1..=64 << 20).contains(&v))
                .ok_or_else(|| invalid(format!("{name}: expected 1 byte to 64 MiB")))
        };
        let flows = u32::try_from(params.int("flows")?).map_err(|_| invalid("flows: out of range"))?;
        let start = (rtt + rtt2 * 2).max(Duration::from_millis(300));
        s.request_response(start, flows, size("request_size")?, size("flow_size")?, params.duration("gap")?);
        Ok(s)
    }
}

impl Template for SimMultipath {
    fn name(&self) -> &str {
        "sim-multipath"
    }

    fn description(&self) -> &str {
        "request/response flows on one connection over two simulated paths with a ProgMP scheduler: completion times and bytes on the wire"
    }

    fn params(&self) -> Vec<ParamDecl> {
        let schedulers: Vec<&str> = BUILTINS.iter().map(|b| b.name).collect();
        vec![
            ParamDecl::config(
                "scheduler",
                ParamType::one_of(&schedulers),
                Value::Enum(braid_progmp::DEFAULT_SCHEDULER.into()),
            )
            .doc("a shipped ProgMP scheduler (braid progmp list), on both ends"),
            cc_decl("cc", braid_proto::CcAlgorithm::Cubic).doc("congestion controller of every path"),
            ParamDecl::config("time_limit", ParamType::Duration, Value::Duration(Duration::from_secs(600)))
                .doc("give up after this much virtual time"),
            ParamDecl::env("rtt", ParamType::Duration, Value::Duration(Duration::from_millis(20))).doc("path 1's RTT"),
            ParamDecl::env("rtt_ratio", ParamType::float_range(0.01, 100.0), Value::Float(2.0))
                .doc("path 2's RTT over path 1's"),
            ParamDecl::env("rate_mbps", ParamType::float_range(0.0, 100_000.0), Value::Float(50.0))
                .doc("path 1's rate, Mbit/s (0: unlimited)"),
            ParamDecl::env("rate_ratio", ParamType::float_range(0.01, 100.0), Value::Float(1.0))
                .doc("path 1's rate over path 2's"),
            ParamDecl::env("loss_pct", ParamType::float_range(0.0, 50.0), Value::Float(2.0))
                .doc("random loss on both paths, each direction, percent"),
            ParamDecl::env("flow_size", ParamType::Size, Value::Size(10_000)).doc("response size of each flow"),
            ParamDecl::env("request_size", ParamType::Size, Value::Size(64)).doc("request size of each flow"),
            ParamDecl::env("flows", ParamType::int_range(1, 100_000), Value::Int(300))
                .doc("request/response flows, one after the other"),
            ParamDecl::env("gap", ParamType::Duration, Value::Duration(Duration::from_millis(10)))
                .doc("pause between a response and the next request"),
        ]
    }

    fn expected_duration(&self, params: &Params) -> Duration {
        let flows = params.int("flows").unwrap_or(300).max(1) as f64;
        let size = params.size("flow_size").unwrap_or(10_000) as f64;
        // Data packets of ~1200 bytes plus the request and the
        // acknowledgements; redundant schedulers send up to twice that.
        let packets = flows * (size / 1200.0 * 1.5 + 4.0);
        Duration::from_secs_f64((packets * WALL_SECS_PER_PACKET * 1.5).max(0.005))
    }

    fn run(&self, ctx: &mut Context<'_>) -> Result<(), TemplateError> {
        let mut s = SimMultipath::scenario(ctx.params, ctx.seed)?;
        s.wall_deadline = Some(ctx.deadline);
        let r = sim_multipath::run(&s).map_err(|e| match e {
            ScenarioError::Network(_) | ScenarioError::Transport(_) => TemplateError::failed(e),
            other => invalid(other),
        })?;
        let rr = s.request_response.ok_or_else(|| TemplateError::failed("no request/response workload"))?;
        let report = summarize(ctx.params.str("scheduler")?, &s, &r, rr);
        if !report.ok && Instant::now() >= ctx.deadline {
            return Err(TemplateError::Timeout(format!(
                "{} of {} flows completed by {:.3} s of virtual time",
                report.flows_completed,
                report.flows,
                r.end.since_epoch().as_secs_f64()
            )));
        }
        ctx.progress(1.0);
        for w in r.writes.iter() {
            if let Some(done) = w.responded {
                ctx.series("fct_ms", w.at.since_epoch().as_secs_f64(), (done - w.at).as_secs_f64() * 1e3);
            }
        }
        record(ctx, &report)
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The report of a finished run.
fn summarize(
    scheduler: &str,
    s: &Scenario,
    r: &sim_multipath::ScenarioReport,
    rr: sim_multipath::RequestResponse,
) -> SimMultipathReport {
    let fcts = r.completion_times();
    let q = |x: f64| ms(braid_emu::bench::quantile(&fcts, x));
    let completed = fcts.len() as u32;
    let delivered = u64::from(completed) * (rr.request_bytes as u64 + rr.response_bytes as u64);
    let wire_by_path: Vec<u64> = r.link_stats.iter().map(|[a, b]| a.bytes_offered + b.bytes_offered).collect();
    let wire: u64 = wire_by_path.iter().sum();
    let first = r.writes.iter().map(|w| w.at).min();
    let last = r.writes.iter().filter_map(|w| w.responded).max();
    let span = match (first, last) {
        (Some(a), Some(b)) if b > a => (b - a).as_secs_f64(),
        _ => 0.0,
    };
    let stream = r.bytes_by_path();
    SimMultipathReport {
        scheduler: scheduler.to_string(),
        paths: [0, 1].map(|i| s.paths[i].link.to_string()),
        request_bytes: rr.request_bytes as u64,
        response_bytes: rr.response_bytes as u64,
        flows: rr.flows,
        flows_completed: completed,
        fct_ms: fcts.iter().copied().map(ms).collect(),
        fct_p50_ms: q(0.5),
        fct_p90_ms: q(0.9),
        fct_p99_ms: q(0.99),
        fct_mean_ms: fcts.iter().copied().map(ms).sum::<f64>() / fcts.len().max(1) as f64,
        fct_max_ms: q(1.0),
        delivered_bytes: delivered,
        wire_bytes: wire,
        wire_over_delivered: if delivered > 0 { wire as f64 / delivered as f64 } else { 0.0 },
        goodput_mbps: if span > 0.0 { delivered as f64 * 8.0 / span / 1e6 } else { 0.0 },
        wire_bytes_by_path: [0, 1].map(|i| wire_by_path.get(i).copied().unwrap_or(0)),
        client_stream_bytes_by_path: [0, 1].map(|i| stream.get(i).copied().unwrap_or(0)),
        client_packets_lost: r.stats.packets_lost,
        ok: r.ok && completed == rr.flows,
        error: r.error.clone(),
    }
}

fn record(ctx: &mut Context<'_>, r: &SimMultipathReport) -> Result<(), TemplateError> {
    ctx.record("ok", f64::from(u8::from(r.ok)));
    ctx.record("flows_completed", f64::from(r.flows_completed));
    if r.flows_completed > 0 {
        ctx.record("fct_p50_ms", r.fct_p50_ms);
        ctx.record("fct_p90_ms", r.fct_p90_ms);
        ctx.record("fct_p99_ms", r.fct_p99_ms);
        ctx.record("fct_mean_ms", r.fct_mean_ms);
        ctx.record("fct_max_ms", r.fct_max_ms);
        ctx.record("wire_over_delivered", r.wire_over_delivered);
        ctx.record("goodput_mbps", r.goodput_mbps);
    }
    ctx.record("delivered_bytes", r.delivered_bytes as f64);
    ctx.record("wire_bytes", r.wire_bytes as f64);
    if r.wire_bytes > 0 {
        ctx.record("path2_wire_share_ratio", r.wire_bytes_by_path[1] as f64 / r.wire_bytes as f64);
    }
    if let Some(e) = &r.error {
        ctx.warn(e);
    }
    let json = serde_json::to_value(r).map_err(|e| TemplateError::failed(format!("report: {e}")))?;
    ctx.artifact("report", json);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[(&str, Value)]) -> Params {
        let mut p = crate::template::builtin::test_support::defaults(&SimMultipath);
        for (k, v) in values {
            p.insert(k, v.clone());
        }
        p
    }

    #[test]
    fn defaults_are_the_bench_fct_setup() {
        let s = SimMultipath::scenario(&with(&[]), 9).unwrap();
        let links: Vec<String> = s.paths.iter().map(|p| p.link.to_string()).collect();
        assert_eq!(links, ["rtt=20ms,rate=50mbit,loss=2%", "rtt=40ms,rate=50mbit,loss=2%"]);
        let rr = s.request_response.unwrap();
        assert_eq!(
            (rr.flows, rr.request_bytes, rr.response_bytes, rr.gap),
            (300, 64, 10_000, Duration::from_millis(10))
        );
        assert_eq!(rr.start, Duration::from_millis(300));
        assert_eq!(s.seed, 9);
    }

    #[test]
    fn path_two_follows_the_ratios() {
        let p = with(&[
            ("rtt_ratio", Value::Float(10.0)),
            ("rate_ratio", Value::Float(4.0)),
            ("loss_pct", Value::Float(0.0)),
            ("rate_mbps", Value::Float(20.0)),
        ]);
        let s = SimMultipath::scenario(&p, 1).unwrap();
        assert_eq!(s.paths[0].link.to_string(), "rtt=20ms,rate=20mbit");
        assert_eq!(s.paths[1].link.to_string(), "rtt=200ms,rate=5mbit");
        // The first request waits for path 2: 20 + 2 × 200 ms.
        assert_eq!(s.request_response.unwrap().start, Duration::from_millis(420));
        let unlimited = SimMultipath::scenario(&with(&[("rate_mbps", Value::Float(0.0))]), 1).unwrap();
        assert_eq!(unlimited.paths[1].link.to_string(), "rtt=40ms,loss=2%");
    }

    #[test]
    fn every_shipped_scheduler_is_allowed_and_compiles() {
        let decl = SimMultipath.params().into_iter().find(|d| d.name == "scheduler").unwrap();
        for b in BUILTINS {
            let v = decl.ty.parse_text(b.name).unwrap();
            SimMultipath::scenario(&with(&[("scheduler", v)]), 1).unwrap();
        }
        assert!(decl.ty.parse_text("fastest").is_err());
    }

    #[test]
    fn every_default_parses_with_its_type() {
        crate::template::builtin::test_support::assert_declarations_valid(&SimMultipath, &[]);
    }
}
